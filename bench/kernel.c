/*
 * kernel.c - the kernel benchmark (build/bench/kernel, see bench/README.md).
 *
 * Starts the real `rebuno dev` binary on a free loopback port with a fresh state
 * folder, drives it over keep-alive HTTP/1.1 and prints:
 *
 *   - a raw SQLite baseline: one INSERT per durable transaction (WAL,
 *     synchronous=FULL) in a loop, on the same file system as the kernel's store;
 *   - step round trips per second (submit + complete) with 1, 8 and 32 concurrent
 *     simulated agents, each on a fresh kernel, with p50/p99 latency of the round
 *     trip and of each request, kernel CPU per round trip, and a durability check
 *     (the kernel is killed with SIGKILL and every acknowledged step completion must
 *     be in its database);
 *   - replay lookup latency: re-dispatched executions re-submit recorded steps and
 *     get `replay`, with ~10 and ~100,000 events in the execution;
 *   - health under slowloris: GET /v0/health latency, each on a fresh connection, while
 *     4,200 connections drip a byte of a request head every 5 s each (issue 13's load);
 *   - dispatch round trips per second by dispatch mode (issue 18): create an execution,
 *     get its dispatch, complete it, with 8 concurrent flows (threads, blocking calls):
 *     long-poll claims against the kernel's webhook dispatch (the kernel POSTs each
 *     dispatch to a small HTTP server in this process), side by side.
 *
 * With --store postgres (issue 15) it instead starts a real PostgreSQL (initdb + pg_ctl in
 * a temporary folder, fsync on, as nobody when run as root) and prints: a naive loop of one
 * durable PostgreSQL transaction per write, 32 agents on SQLite, and 32 agents spread over
 * 1, 2 and 3 kernel replicas on that PostgreSQL, with the ratios the issue aims at and the
 * CPU of the database backends serving the kernels per round trip.
 *
 * The simulated agents are one epoll loop over N non-blocking sockets (one
 * connection, one execution and one dispatch per agent) so the client spends as
 * little of the machine's CPU as possible; every agent has at most one request in
 * flight, like a real agent. Setup and replay calls use the same connections in
 * blocking mode. Responses are framed by Content-Length (the kernel always sends it).
 *
 * Every reply is checked: status 200 and the expected decision, else the run
 * aborts. Kernels and temporary folders are removed on every exit path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "base/xalloc.h"
#include "net/local_auth.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

#define AIM_RT_PER_S 5000.0
/* The aim: ">= 5,000 round trips/s ... i.e. at least 2x that naive loop" (which did
 * about 4,600 tx/s): a round trip is two durable writes (submit, complete), so the 2x is in
 * writes per second, 2 * rt/s against the loop's one write per transaction. */
#define AIM_VS_BASELINE 2.0
#define WRITES_PER_RT 2.0
#define MAX_LEVELS 8
#define MAX_AGENTS 1024

/* ------------------------------------------------------------------ options */

struct opts {
    double seconds;          /* measured time per concurrency level */
    double warmup;           /* unmeasured time before it */
    double baseline_seconds; /* raw SQLite loop */
    int levels[MAX_LEVELS], n_levels;
    int big_steps;   /* steps in the big execution (4 events each) */
    int replays;     /* replay samples per point (small, big start, big end) */
    const char *bin; /* rebuno binary */
    const char *tmp; /* parent of the temporary folders */
    double slow_seconds; /* slowloris load */
    bool quick, no_replay, no_baseline, no_slowloris, no_dispatch, verbose;
    bool postgres; /* --store postgres */
    const char *rate_limit; /* --rate-limit SCOPE: every step under a rate_limit rule of that scope */
};

static struct opts O;

/* --rate-limit: the config of the step round-trip kernels, else NULL (make_limit_config). */
static char *limit_config;

/* ------------------------------------------------------------------ cleanup */

struct kproc {
    pid_t pid;
    int port;
    char dir[PATH_MAX];
    char log[PATH_MAX + 32];
    char db[PATH_MAX + 32];
};

#define MAX_LIVE 4
static struct kproc *live[MAX_LIVE];
static char tmp_dirs[MAX_LIVE][PATH_MAX];
static volatile sig_atomic_t interrupted;
/* --store postgres: the server we started (stopped by cleanup) and the --store URI the
 * next kernels get */
static char pg_dir[PATH_MAX], pg_bindir[PATH_MAX];
static int pg_port;
static char kernel_store_uri[2 * PATH_MAX];
static void pg_stop(void);

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    if (dir[0]) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void kill_wait(pid_t pid, double grace)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    for (int i = 0; i < (int)(grace * 100); i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void cleanup(void)
{
    pg_stop();
    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i]) {
            kill_wait(live[i]->pid, 5.0);
            rm_rf(live[i]->dir);
            live[i] = NULL;
        }
        if (tmp_dirs[i][0]) {
            rm_rf(tmp_dirs[i]);
            tmp_dirs[i][0] = '\0';
        }
    }
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "bench/kernel: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1); /* atexit(cleanup) stops the kernels and removes the folders */
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void check_interrupted(void)
{
    if (interrupted) die("interrupted");
}

static void track_tmp(const char *dir)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!tmp_dirs[i][0]) {
            snprintf(tmp_dirs[i], sizeof tmp_dirs[i], "%s", dir);
            return;
        }
    die("too many temporary folders");
}

static void untrack_tmp(const char *dir)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (strcmp(tmp_dirs[i], dir) == 0) {
            rm_rf(tmp_dirs[i]);
            tmp_dirs[i][0] = '\0';
        }
}

/* ------------------------------------------------------------------ time and stats */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_s(double s)
{
    int64_t end = now_ns() + (int64_t)(s * 1e9);
    for (;;) {
        check_interrupted();
        int64_t left = end - now_ns();
        if (left <= 0) return;
        if (left > 50000000) left = 50000000;
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
}

struct samples {
    int64_t *v;
    size_t n, cap;
};

static void samples_add(struct samples *s, int64_t x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile in ns (sorts in place); 0 when empty. */
static int64_t pct(struct samples *s, double q)
{
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_i64);
    size_t rank = (size_t)ceil(q * (double)s->n);
    if (rank < 1) rank = 1;
    if (rank > s->n) rank = s->n;
    return s->v[rank - 1];
}

static void samples_free(struct samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* "12,345" */
static const char *commas(double x, char *out, size_t n)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.0f", x);
    size_t len = strlen(tmp), o = 0;
    for (size_t i = 0; i < len && o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0 && tmp[i - 1] != '-') out[o++] = ',';
        out[o++] = tmp[i];
    }
    out[o] = '\0';
    return out;
}

/* ------------------------------------------------------------------ HTTP client */

struct conn {
    int fd;
    char *buf; /* received bytes not yet consumed */
    size_t len, cap;
    char auth[96]; /* "Authorization: Bearer <the kernel's local token>\r\n", or "" */
};

struct resp {
    int status;
    const char *body;
    size_t body_len;
    size_t total; /* bytes of this response in conn.buf */
};

/* Blocking reads wake up every second so a silent kernel cannot hang the benchmark. */
static void set_rcvtimeo(int fd)
{
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static void conn_open(struct conn *c, int port)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die("socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_rcvtimeo(c->fd);
    c->cap = 16384;
    c->buf = xmalloc(c->cap);
    /* found as any client of this user finds it (none from a kernel without local auth) */
    char url[64];
    struct local_auth_found f;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    if (local_auth_find(url, NULL, &f) == 0)
        snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s\r\n", f.token);
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static void set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* Write all of it (waits for POLLOUT if the socket is non-blocking and full). */
static void conn_send(struct conn *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {c->fd, POLLOUT, 0};
            poll(&pf, 1, 1000);
        } else if (w < 0 && errno == EINTR) {
            check_interrupted();
        } else {
            die("send to the kernel: %s", w < 0 ? strerror(errno) : "short write");
        }
    }
}

/* Read what is available. 1 = got bytes, 0 = would block; dies on EOF/error. */
static int conn_fill(struct conn *c)
{
    if (c->cap - c->len < 4096) {
        c->cap *= 2;
        c->buf = xrealloc(c->buf, c->cap);
    }
    ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
    if (r > 0) {
        c->len += (size_t)r;
        return 1;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r < 0 && errno == EINTR) {
        check_interrupted();
        return 0;
    }
    die("the kernel closed the connection (%s)", r == 0 ? "EOF" : strerror(errno));
}

static const char *find_ci(const char *h, size_t hl, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= hl; i++)
        if (strncasecmp(h + i, needle, nl) == 0) return h + i;
    return NULL;
}

/* 1 = a whole response is in the buffer (r filled), 0 = need more bytes. */
static int conn_parse(struct conn *c, struct resp *r)
{
    const char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) {
        if (c->len > 65536) die("response header too long");
        return 0;
    }
    size_t hlen = (size_t)(end - c->buf) + 4;
    if (c->len < 12 || memcmp(c->buf, "HTTP/1.", 7) != 0) die("malformed response from the kernel");
    r->status = atoi(c->buf + 9);
    const char *cl = find_ci(c->buf, hlen, "\r\nContent-Length:");
    size_t blen = 0;
    if (cl)
        blen = strtoul(cl + 17, NULL, 10);
    else if (r->status != 204 && r->status != 304)
        die("response without Content-Length (status %d)", r->status);
    if (c->len < hlen + blen) return 0;
    r->body = c->buf + hlen;
    r->body_len = blen;
    r->total = hlen + blen;
    return 1;
}

static void conn_consume(struct conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* Read until a whole response is buffered; dies after 30 s without one. */
static void conn_wait_resp(struct conn *c, struct resp *r)
{
    int64_t deadline = now_ns() + 30 * (int64_t)1000000000;
    while (!conn_parse(c, r)) {
        if (!conn_fill(c)) {
            if (now_ns() > deadline) die("no reply from the kernel within 30 s");
            struct pollfd pf = {c->fd, POLLIN, 0};
            poll(&pf, 1, 1000);
        }
    }
}

/* Format a request into out (returns its length). hdrs: extra header lines, each ending \r\n. */
static size_t format_req(char *out, size_t n, const struct conn *c, const char *method,
                         const char *path, const char *hdrs, const char *body)
{
    int len = snprintf(out, n,
                       "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       "Content-Length: %zu\r\n%s%s\r\n%s",
                       method, path, body ? strlen(body) : 0, c->auth, hdrs ? hdrs : "",
                       body ? body : "");
    if (len < 0 || (size_t)len >= n) die("request too long: %s %s", method, path);
    return (size_t)len;
}

/* Blocking call. Returns the status; *out = parsed body (NULL if empty or not wanted). */
static int http_call(struct conn *c, const char *method, const char *path, const char *hdrs,
                     const char *body, json_t **out, char *raw, size_t rawn)
{
    char req[4096];
    size_t n = format_req(req, sizeof req, c, method, path, hdrs, body);
    conn_send(c, req, n);
    struct resp r;
    conn_wait_resp(c, &r);
    if (out) {
        json_error_t je;
        *out = r.body_len ? json_loadb(r.body, r.body_len, 0, &je) : NULL;
        if (r.body_len && !*out)
            die("%s %s: reply is not JSON: %.*s", method, path, (int)r.body_len, r.body);
    }
    if (raw && rawn) snprintf(raw, rawn, "%.*s", (int)r.body_len, r.body);
    int st = r.status;
    conn_consume(c, r.total);
    return st;
}

/* Call that must answer `want`; returns the parsed body (caller decrefs). */
static json_t *call_ok(struct conn *c, int want, const char *method, const char *path,
                       const char *hdrs, const char *body)
{
    json_t *j = NULL;
    char raw[600];
    int st = http_call(c, method, path, hdrs, body, &j, raw, sizeof raw);
    if (st != want) die("%s %s: expected %d, got %d: %s", method, path, want, st, raw);
    return j;
}

static const char *jstr(json_t *j, const char *path1, const char *path2)
{
    json_t *v = json_object_get(j, path1);
    if (path2) v = json_object_get(v, path2);
    if (!json_is_string(v))
        die("reply has no string %s%s%s", path1, path2 ? "." : "", path2 ? path2 : "");
    return json_string_value(v);
}

static long long jint(json_t *j, const char *path1, const char *path2)
{
    json_t *v = json_object_get(j, path1);
    if (path2) v = json_object_get(v, path2);
    if (!json_is_integer(v))
        die("reply has no integer %s%s%s", path1, path2 ? "." : "", path2 ? path2 : "");
    return json_integer_value(v);
}

/* Cheap field extraction for the hot loop: the kernel's JSON is compact. Copies the
 * string value of "key" into out; -1 when absent. */
static int field_str(const char *b, size_t n, const char *key, char *out, size_t outn)
{
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = memmem(b, n, pat, (size_t)pl);
    if (!p) return -1;
    p += pl;
    const char *q = memchr(p, '"', (size_t)(b + n - p));
    if (!q || (size_t)(q - p) >= outn) return -1;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ kernel process */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0)
        die("cannot find a free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

static void make_tmp(char *out, size_t n, const char *what)
{
    snprintf(out, n, "%s/rebuno-bench-%s-XXXXXX", O.tmp, what);
    if (!mkdtemp(out)) die("mkdtemp %s: %s", out, strerror(errno));
}

static void print_log_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    fprintf(stderr, "--- kernel log (%s) ---\n", path);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

static bool health_ok(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        set_rcvtimeo(fd);
        struct conn c = {.fd = fd, .cap = 16384};
        c.buf = xmalloc(c.cap);
        ok = http_call(&c, "GET", "/v0/health", NULL, NULL, NULL, NULL, 0) == 200;
        free(c.buf);
    }
    if (fd >= 0) close(fd);
    return ok;
}

/* Start `rebuno dev` on a free port in a fresh folder; config_yaml may be NULL. */
static void kernel_start(struct kproc *k, const char *config_yaml)
{
    memset(k, 0, sizeof *k);
    make_tmp(k->dir, sizeof k->dir, "kernel");
    snprintf(k->log, sizeof k->log, "%s/kernel.log", k->dir);
    snprintf(k->db, sizeof k->db, "%s/state/kernel.db", k->dir);
    int slot = -1;
    for (int i = 0; i < MAX_LIVE; i++)
        if (!live[i]) {
            live[i] = k;
            slot = i;
            break;
        }
    if (slot < 0) die("too many kernels");
    char cfg[PATH_MAX + 32] = "", state[PATH_MAX + 32], listen_addr[64];
    if (config_yaml) {
        snprintf(cfg, sizeof cfg, "%s/rebuno.yaml", k->dir);
        FILE *f = fopen(cfg, "w");
        if (!f || fputs(config_yaml, f) < 0 || fclose(f) != 0) die("cannot write %s", cfg);
    }
    snprintf(state, sizeof state, "%s/state", k->dir);
    k->port = free_port();
    snprintf(listen_addr, sizeof listen_addr, "127.0.0.1:%d", k->port);
    /* --sandboxes off: the kernel alone (as root, dev would also start sandboxd, which
     * costs CPU here and, killed with SIGKILL, could leave its store mounted) */
    char *argv[16] = {(char *)O.bin,  "dev",         "--listen",  listen_addr, "--state-dir",
                      state,          "--sandboxes", "off",       "--log-level", "warn"};
    int ac = 10;
    if (kernel_store_uri[0]) argv[ac++] = "--store", argv[ac++] = kernel_store_uri;
    if (cfg[0]) argv[ac++] = "--config", argv[ac++] = cfg;
    argv[ac] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
        int fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execv(O.bin, argv);
        fprintf(stderr, "exec %s: %s\n", O.bin, strerror(errno));
        _exit(127);
    }
    k->pid = pid;
    int64_t end = now_ns() + 10 * (int64_t)1000000000;
    while (now_ns() < end) {
        check_interrupted();
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            k->pid = 0;
            print_log_tail(k->log);
            if (WIFSIGNALED(st))
                die("the kernel (%s) was killed by signal %d during start-up", O.bin, WTERMSIG(st));
            die("the kernel (%s) exited with status %d during start-up", O.bin, WEXITSTATUS(st));
        }
        if (health_ok(k->port)) {
            if (O.verbose)
                fprintf(stderr, "bench/kernel: kernel pid %d on 127.0.0.1:%d, state %s\n", (int)pid,
                        k->port, k->dir);
            return;
        }
        usleep(10000);
    }
    print_log_tail(k->log);
    die("the kernel did not answer GET /v0/health within 10 s");
}

/* hard: SIGKILL now (keeps the folder for inspection until kernel_remove). */
static void kernel_stop(struct kproc *k, bool hard)
{
    if (k->pid > 0) {
        if (hard) {
            kill(k->pid, SIGKILL);
            waitpid(k->pid, NULL, 0);
        } else {
            kill_wait(k->pid, 5.0);
        }
        k->pid = 0;
    }
}

static void kernel_remove(struct kproc *k)
{
    kernel_stop(k, false);
    rm_rf(k->dir);
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] == k) live[i] = NULL;
}

/* utime + stime of a process in seconds (from /proc). */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    unsigned long ut = 0, st = 0;
    /* after ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ agents */

enum phase { PH_SUBMIT, PH_COMPLETE, PH_DONE };

struct agent {
    struct conn c;
    char name[32];
    char worker_id[64];
    char exec_id[64];
    char hdrs[160]; /* Rebuno-Dispatch-* lines */
    char step_id[80];
    long long next, stride,
        limit; /* step counters next, next+stride, ... while < limit (limit < 0: until time) */
    long long cur;
    enum phase phase;
    int64_t rt_t0, req_t0;
};

struct run_stats {
    struct samples rt, submit, complete; /* ns, measured window only */
    long long rts_in_window;             /* round trips completed inside the window */
    long long acked;                     /* every "recorded" reply, warm-up included */
    double window_s;
};

static void agent_dispatch(struct agent *a, json_t *claim)
{
    snprintf(a->exec_id, sizeof a->exec_id, "%s", jstr(claim, "execution", "id"));
    snprintf(a->hdrs, sizeof a->hdrs, "Rebuno-Dispatch-Id: %s\r\nRebuno-Dispatch-Attempt: %lld\r\n",
             jstr(claim, "dispatch", "id"), jint(claim, "dispatch", "attempt"));
}

static void send_submit(struct agent *a)
{
    char path[160], body[128], req[1024];
    snprintf(path, sizeof path, "/v0/executions/%s/steps", a->exec_id);
    snprintf(body, sizeof body,
             "{\"kind\":\"tool_call\",\"target\":\"tool\",\"args\":{\"i\":%lld}}", a->cur);
    size_t n = format_req(req, sizeof req, &a->c, "POST", path, a->hdrs, body);
    a->phase = PH_SUBMIT;
    a->req_t0 = a->rt_t0 = now_ns();
    conn_send(&a->c, req, n);
}

static void send_complete(struct agent *a)
{
    char path[256], body[128], req[1024];
    snprintf(path, sizeof path, "/v0/executions/%s/steps/%s/complete", a->exec_id, a->step_id);
    snprintf(body, sizeof body, "{\"result\":{\"i\":%lld}}", a->cur);
    size_t n = format_req(req, sizeof req, &a->c, "POST", path, a->hdrs, body);
    a->phase = PH_COMPLETE;
    a->req_t0 = now_ns();
    conn_send(&a->c, req, n);
}

/* Start the agent's next round trip, or finish it. */
static void agent_next(struct agent *a, int64_t t_end)
{
    if ((a->limit >= 0 && a->next >= a->limit) || (a->limit < 0 && now_ns() >= t_end)) {
        a->phase = PH_DONE;
        return;
    }
    a->cur = a->next;
    a->next += a->stride;
    send_submit(a);
}

static void bad_reply(struct agent *a, const char *what, const struct resp *r)
{
    die("agent %s, step %lld: %s reply: status %d, body %.*s", a->name, a->cur, what, r->status,
        (int)(r->body_len > 500 ? 500 : r->body_len), r->body);
}

/* Run the agents' submit/complete loops until each is done. Round trips finishing in
 * [t_measure, t_end] count; agents stop starting new ones at t_end (or their limit)
 * and finish the one in flight. */
static void run_agents(struct agent *ag, int n, int64_t t_measure, int64_t t_end,
                       struct run_stats *rs)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1: %s", strerror(errno));
    int active = 0;
    for (int i = 0; i < n; i++) {
        set_nonblock(ag[i].c.fd, true);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ag[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, ag[i].c.fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
        agent_next(&ag[i], t_end);
        if (ag[i].phase != PH_DONE) active++;
    }
    int64_t last_progress = now_ns();
    struct epoll_event evs[64];
    while (active > 0) {
        int ne = epoll_wait(ep, evs, 64, 200);
        if (ne < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
        check_interrupted();
        int64_t t = now_ns();
        if (ne > 0)
            last_progress = t;
        else if (t - last_progress > 30 * (int64_t)1000000000)
            die("the kernel stopped answering for 30 s (%d agents still waiting)", active);
        for (int e = 0; e < ne; e++) {
            struct agent *a = evs[e].data.ptr;
            while (conn_fill(&a->c) > 0) {
            }
            struct resp r;
            while (a->phase != PH_DONE && conn_parse(&a->c, &r)) {
                int64_t done = now_ns();
                if (a->phase == PH_SUBMIT) {
                    char dec[32];
                    if (r.status != 200 ||
                        field_str(r.body, r.body_len, "decision", dec, sizeof dec) < 0 ||
                        strcmp(dec, "proceed") != 0 ||
                        field_str(r.body, r.body_len, "step_id", a->step_id, sizeof a->step_id) <
                            0 ||
                        strlen(a->step_id) != 64)
                        bad_reply(a, "submit (expected decision \"proceed\")", &r);
                    if (a->req_t0 >= t_measure && done <= t_end)
                        samples_add(&rs->submit, done - a->req_t0);
                    conn_consume(&a->c, r.total);
                    send_complete(a);
                } else {
                    char dec[32];
                    if (r.status != 200 ||
                        field_str(r.body, r.body_len, "decision", dec, sizeof dec) < 0 ||
                        strcmp(dec, "recorded") != 0)
                        bad_reply(a, "complete (expected decision \"recorded\")", &r);
                    rs->acked++;
                    if (done >= t_measure && done <= t_end) rs->rts_in_window++;
                    if (a->req_t0 >= t_measure && done <= t_end)
                        samples_add(&rs->complete, done - a->req_t0);
                    if (a->rt_t0 >= t_measure && done <= t_end)
                        samples_add(&rs->rt, done - a->rt_t0);
                    conn_consume(&a->c, r.total);
                    agent_next(a, t_end);
                    if (a->phase == PH_DONE) active--;
                }
            }
            if (a->phase == PH_DONE && a->c.len)
                die("agent %s: unexpected bytes from the kernel", a->name);
        }
    }
    for (int i = 0; i < n; i++) {
        epoll_ctl(ep, EPOLL_CTL_DEL, ag[i].c.fd, NULL);
        set_nonblock(ag[i].c.fd, false);
    }
    close(ep);
}

/* Register a worker for agent_name and keep its id in a->worker_id. */
static void agent_register(struct agent *a, const char *agent_name)
{
    char path[128];
    snprintf(path, sizeof path, "/v0/agents/%s/workers", agent_name);
    json_t *w = call_ok(&a->c, 201, "POST", path, NULL, "{}");
    snprintf(a->worker_id, sizeof a->worker_id, "%s", jstr(w, "worker_id", NULL));
    json_decref(w);
}

static json_t *agent_claim(struct agent *a, const char *agent_name, int wait_seconds)
{
    char path[128], body[160];
    snprintf(path, sizeof path, "/v0/agents/%s/claim", agent_name);
    snprintf(body, sizeof body, "{\"worker_id\":\"%s\",\"wait_seconds\":%d}", a->worker_id,
             wait_seconds);
    json_t *j = NULL;
    char raw[600];
    int st = http_call(&a->c, "POST", path, NULL, body, &j, raw, sizeof raw);
    if (st == 204) return NULL;
    if (st != 200) die("POST %s: expected 200, got %d: %s", path, st, raw);
    return j;
}

static char *create_exec(struct conn *c, const char *agent_name)
{
    char body[128];
    snprintf(body, sizeof body, "{\"agent_id\":\"%s\"}", agent_name);
    json_t *e = call_ok(c, 201, "POST", "/v0/executions", NULL, body);
    char *id = xstrdup(jstr(e, "id", NULL));
    json_decref(e);
    return id;
}

/* ------------------------------------------------------------------ baseline */

struct baseline {
    double tx_per_s;
    long long tx;
    double p50_us, p99_us;
};

static void sql_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        die("sqlite: %s: %s", sql, msg ? msg : "?");
}

/* A naive loop: one durable write (insert(ctx, payload, len)) after another, for `seconds`
 * after a short unmeasured start; the SQLite and the PostgreSQL baselines. */
static struct baseline naive_loop(double seconds, void (*insert)(void *ctx, const char *payload, int len),
                                  void *ctx)
{
    struct samples lat = {0};
    struct baseline b = {0};
    char payload[256];
    int64_t t_measure = now_ns() + 200000000, t_end = t_measure + (int64_t)(seconds * 1e9);
    for (long long i = 0;; i++) {
        check_interrupted();
        int n = snprintf(payload, sizeof payload,
                         "{\"execution_id\":\"0192f1a0-7b3c-7e21-9a0c-5d1e2f3a4b5c\",\"seq\":%lld,"
                         "\"type\":\"step.succeeded\",\"payload\":{\"i\":%lld}}",
                         i, i);
        int64_t t0 = now_ns();
        if (t0 >= t_end) break;
        insert(ctx, payload, n);
        int64_t t1 = now_ns();
        if (t0 >= t_measure) {
            b.tx++;
            samples_add(&lat, t1 - t0);
        }
    }
    b.tx_per_s = (double)b.tx / seconds;
    b.p50_us = (double)pct(&lat, 0.50) / 1e3;
    b.p99_us = (double)pct(&lat, 0.99) / 1e3;
    samples_free(&lat);
    return b;
}

/* One autocommit INSERT = one durable SQLite transaction. */
static void sqlite_insert(void *ctx, const char *payload, int len)
{
    sqlite3_stmt *ins = ctx;
    sqlite3_bind_text(ins, 1, payload, len, SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) die("sqlite insert: %s", sqlite3_errmsg(sqlite3_db_handle(ins)));
    sqlite3_reset(ins);
}

static struct baseline run_baseline(double seconds)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    make_tmp(dir, sizeof dir, "sqlite");
    track_tmp(dir);
    snprintf(path, sizeof path, "%s/baseline.db", dir);
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK)
        die("sqlite open %s", path);
    sql_ok(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
    sql_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, payload TEXT NOT NULL)");
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(db, "INSERT INTO t(payload) VALUES (?)", -1, &ins, NULL) != SQLITE_OK)
        die("sqlite prepare: %s", sqlite3_errmsg(db));
    struct baseline b = naive_loop(seconds, sqlite_insert, ins);
    sqlite3_finalize(ins);
    sqlite3_close(db);
    untrack_tmp(dir);
    return b;
}

/* ------------------------------------------------------------------ round trips */

struct level_result {
    int agents;
    double rt_per_s;
    double rt_p50_ms, rt_p99_ms, submit_p50_ms, submit_p99_ms, complete_p50_ms, complete_p99_ms;
    double kernel_cpu_us_per_rt, client_cpu_us_per_rt;
    double db_cpu_us_per_rt; /* PostgreSQL backends serving the kernels; 0 on SQLite */
    double rows_per_rt;      /* PostgreSQL: rows inserted or updated per succeeded step */
    long long acked, found;
};

/* The figures of a level from its run: rates, latencies, CPU seconds per round trip. */
static void level_fill(struct level_result *lr, struct run_stats *rs, double kernel_cpu_s, double client_cpu_s)
{
    lr->rt_per_s = (double)rs->rts_in_window / O.seconds;
    lr->rt_p50_ms = (double)pct(&rs->rt, 0.50) / 1e6;
    lr->rt_p99_ms = (double)pct(&rs->rt, 0.99) / 1e6;
    lr->submit_p50_ms = (double)pct(&rs->submit, 0.50) / 1e6;
    lr->submit_p99_ms = (double)pct(&rs->submit, 0.99) / 1e6;
    lr->complete_p50_ms = (double)pct(&rs->complete, 0.50) / 1e6;
    lr->complete_p99_ms = (double)pct(&rs->complete, 0.99) / 1e6;
    if (rs->acked) {
        lr->kernel_cpu_us_per_rt = kernel_cpu_s * 1e6 / (double)rs->acked;
        lr->client_cpu_us_per_rt = client_cpu_s * 1e6 / (double)rs->acked;
    }
}

static long long count_succeeded(const char *db_path)
{
    sqlite3 *db;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        die("cannot open the kernel's database %s", db_path);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM steps WHERE status='succeeded'", -1, &s,
                           NULL) != SQLITE_OK ||
        sqlite3_step(s) != SQLITE_ROW)
        die("cannot count steps in %s: %s", db_path, sqlite3_errmsg(db));
    long long n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return n;
}

/* Agent number i+1 on the kernel at port: registered, with one execution claimed. */
static void agent_start(struct agent *a, int i, int port)
{
    conn_open(&a->c, port);
    snprintf(a->name, sizeof a->name, "a%d", i + 1);
    agent_register(a, a->name);
    char *id = create_exec(&a->c, a->name);
    json_t *cl = agent_claim(a, a->name, 0);
    if (!cl) die("claim for %s found no work", a->name);
    agent_dispatch(a, cl);
    if (strcmp(a->exec_id, id) != 0) die("claim for %s returned execution %s, not %s", a->name, a->exec_id, id);
    json_decref(cl);
    free(id);
    a->next = 0;
    a->stride = 1;
    a->limit = -1;
}

static struct level_result run_level(int n)
{
    struct level_result lr = {.agents = n};
    struct kproc k;
    kernel_start(&k, limit_config);
    struct agent *ag = xcalloc((size_t)n, sizeof *ag);
    for (int i = 0; i < n; i++) agent_start(&ag[i], i, k.port);
    struct run_stats rs = {0};
    int64_t t0 = now_ns();
    int64_t t_measure = t0 + (int64_t)(O.warmup * 1e9);
    int64_t t_end = t_measure + (int64_t)(O.seconds * 1e9);
    /* CPU is sampled over the whole run (warm-up included) and divided by all round trips. */
    double kcpu0 = proc_cpu_s(k.pid), ccpu0 = self_cpu_s();
    run_agents(ag, n, t_measure, t_end, &rs);
    double kcpu = proc_cpu_s(k.pid) - kcpu0, ccpu = self_cpu_s() - ccpu0;
    level_fill(&lr, &rs, kcpu, ccpu);
    lr.acked = rs.acked;
    /* Durability: every acknowledged completion must survive a SIGKILL. */
    kernel_stop(&k, true);
    lr.found = count_succeeded(k.db);
    for (int i = 0; i < n; i++)
        conn_close(&ag[i].c);
    free(ag);
    samples_free(&rs.rt);
    samples_free(&rs.submit);
    samples_free(&rs.complete);
    kernel_remove(&k);
    if (lr.found < lr.acked)
        die("durability: %lld step completions were acknowledged but only %lld are in the database "
            "after kill -9",
            lr.acked, lr.found);
    return lr;
}

/* ------------------------------------------------------------------ replay */

struct replay_result {
    long long events; /* last_seq of the execution when the lookups ran */
    double p50_us, p99_us;
    size_t n;
};

static const char *REPLAY_CONFIG = "agents:\n"
                                   "  - name: small\n"
                                   "    lease_timeout_seconds: 1\n"
                                   "  - name: big\n"
                                   "    lease_timeout_seconds: 2\n";

/* Re-submit step i on the agent's current (re-claimed) dispatch; it must replay
 * the recorded result {"i":i}. Returns the latency in ns. */
static int64_t replay_one(struct agent *a, long long i)
{
    char path[160], body[128], req[1024], want[64];
    snprintf(path, sizeof path, "/v0/executions/%s/steps", a->exec_id);
    snprintf(body, sizeof body,
             "{\"kind\":\"tool_call\",\"target\":\"tool\",\"args\":{\"i\":%lld}}", i);
    size_t n = format_req(req, sizeof req, &a->c, "POST", path, a->hdrs, body);
    int64_t t0 = now_ns();
    conn_send(&a->c, req, n);
    struct resp r;
    conn_wait_resp(&a->c, &r);
    int64_t dt = now_ns() - t0;
    char dec[32];
    int wl = snprintf(want, sizeof want, "\"result\":{\"i\":%lld}", i);
    a->cur = i;
    if (r.status != 200 || field_str(r.body, r.body_len, "decision", dec, sizeof dec) < 0 ||
        strcmp(dec, "replay") != 0 || !memmem(r.body, r.body_len, want, (size_t)wl))
        bad_reply(a, "re-submit (expected decision \"replay\" with the recorded result)", &r);
    conn_consume(&a->c, r.total);
    return dt;
}

static void finish_exec(struct agent *a)
{
    char path[160];
    snprintf(path, sizeof path, "/v0/executions/%s/complete", a->exec_id);
    json_decref(call_ok(&a->c, 204, "POST", path, a->hdrs, "{}"));
}

static void summarize(struct samples *s, struct replay_result *r)
{
    r->n = s->n;
    r->p50_us = (double)pct(s, 0.50) / 1e3;
    r->p99_us = (double)pct(s, 0.99) / 1e3;
}

/* small: `replays` executions with one step each (about 10 events), each re-dispatched
 * and its step re-submitted once. big: one execution with big_steps steps (4 events
 * each), re-dispatched once; steps 0..replays-1 and the last `replays` re-submitted. */
static void run_replay(struct replay_result *small, struct replay_result *big_all,
                       struct replay_result *big_start, struct replay_result *big_end,
                       double *build_s, double *build_rt_per_s)
{
    struct kproc k;
    kernel_start(&k, REPLAY_CONFIG);
    int nconn = 32;
    struct agent *ag = xcalloc((size_t)nconn, sizeof *ag);
    for (int i = 0; i < nconn; i++) {
        conn_open(&ag[i].c, k.port);
        snprintf(ag[i].name, sizeof ag[i].name, "big#%d", i);
    }
    struct agent small_agent = {0};
    struct agent *s = &small_agent;
    conn_open(&s->c, k.port);
    snprintf(s->name, sizeof s->name, "small");

    /* Small executions: create them all, then claim each (the oldest queued first, so
     * never one whose lease already expired: those are queued later) and record one
     * step; then leave the leases to expire. */
    agent_register(s, "small");
    for (int i = 0; i < O.replays; i++)
        free(create_exec(&s->c, "small"));
    for (int i = 0; i < O.replays; i++) {
        json_t *cl = agent_claim(s, "small", 0);
        if (!cl) die("claim for small found no work");
        if (jint(cl, "dispatch", "attempt") != 1)
            die("small claim %d has attempt %lld, expected 1", i, jint(cl, "dispatch", "attempt"));
        agent_dispatch(s, cl);
        json_decref(cl);
        s->next = 0;
        s->stride = 1;
        s->limit = 1;
        struct run_stats rs = {0};
        run_agents(s, 1, 0, INT64_MAX, &rs);
    }

    /* The big execution: big_steps steps submitted and completed by 32 connections
     * sharing its dispatch (distinct args, so the order does not matter). */
    for (int i = 0; i < nconn; i++)
        agent_register(&ag[i], "big");
    char *big_id = create_exec(&ag[0].c, "big");
    json_t *cl = agent_claim(&ag[0], "big", 0);
    if (!cl) die("claim for big found no work");
    for (int i = 0; i < nconn; i++) {
        agent_dispatch(&ag[i], cl);
        ag[i].next = i;
        ag[i].stride = nconn;
        ag[i].limit = O.big_steps;
    }
    json_decref(cl);
    if (strcmp(ag[0].exec_id, big_id) != 0) die("claim for big returned another execution");
    int64_t b0 = now_ns();
    struct run_stats rs = {0};
    run_agents(ag, nconn, 0, INT64_MAX, &rs);
    *build_s = (double)(now_ns() - b0) / 1e9;
    *build_rt_per_s = (double)rs.acked / *build_s;
    if (rs.acked != O.big_steps)
        die("big execution: %lld of %d steps recorded", rs.acked, O.big_steps);

    /* Let every lease expire (big: 2 s after its last submission; small long ago). */
    sleep_s(2.6);

    /* Small: claim each again (attempt 2), re-submit its step, finish the execution. */
    struct samples lat = {0};
    long long small_events = 0;
    for (int i = 0; i < O.replays; i++) {
        json_t *c2 = agent_claim(s, "small", 5);
        if (!c2) die("small execution %d was not re-dispatched after its lease expired", i);
        if (jint(c2, "dispatch", "attempt") != 2)
            die("small re-dispatch has attempt %lld, expected 2", jint(c2, "dispatch", "attempt"));
        agent_dispatch(s, c2);
        small_events += jint(c2, "execution", "last_seq");
        json_decref(c2);
        samples_add(&lat, replay_one(s, 0));
        finish_exec(s);
    }
    small->events = (small_events + O.replays / 2) / O.replays;
    summarize(&lat, small);
    samples_free(&lat);

    /* Big: claim again (attempt 2), re-submit the first and the last `replays` steps. */
    struct agent *b = &ag[1];
    json_t *c3 = agent_claim(b, "big", 5);
    if (!c3) die("the big execution was not re-dispatched after its lease expired");
    agent_dispatch(b, c3);
    if (strcmp(b->exec_id, big_id) != 0) die("claim for big returned another execution");
    if (jint(c3, "dispatch", "attempt") != 2)
        die("big re-dispatch has attempt %lld, expected 2", jint(c3, "dispatch", "attempt"));
    big_all->events = big_start->events = big_end->events = jint(c3, "execution", "last_seq");
    json_decref(c3);
    struct samples st = {0}, en = {0}, all = {0};
    int nr = O.replays < O.big_steps / 2 ? O.replays : O.big_steps / 2;
    for (int i = 0; i < nr; i++)
        samples_add(&st, replay_one(b, i));
    for (int i = O.big_steps - nr; i < O.big_steps; i++)
        samples_add(&en, replay_one(b, i));
    for (size_t i = 0; i < st.n; i++)
        samples_add(&all, st.v[i]);
    for (size_t i = 0; i < en.n; i++)
        samples_add(&all, en.v[i]);
    summarize(&st, big_start);
    summarize(&en, big_end);
    summarize(&all, big_all);
    samples_free(&st);
    samples_free(&en);
    samples_free(&all);
    finish_exec(b);
    free(big_id);
    for (int i = 0; i < nconn; i++)
        conn_close(&ag[i].c);
    conn_close(&s->c);
    free(ag);
    kernel_remove(&k);
}

/* ------------------------------------------------------------------ slowloris */

#define SLOW_CONNS 4200 /* issue 13's load: more than the 4,096 connections a server holds */
#define SLOW_EVERY_S 5.0
#define PROBE_EVERY_MS 100
#define AIM_HEALTH_MS 100.0

struct slow_result {
    int conns;                      /* slow connections held at the start; 0 = skipped */
    size_t probes, answered;
    double p50_ms, p99_ms, max_ms;  /* of the answered probes */
};

static const char slow_head[] = "GET /v0/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

/* A connection that has sent the first byte of a head; -1 when connect fails. */
static int slow_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        send(fd, slow_head, 1, MSG_NOSIGNAL) != 1) {
        close(fd);
        return -1;
    }
    set_nonblock(fd, true);
    return fd;
}

/* GET /v0/health on a fresh connection: ns to the whole reply, -1 when not answered 200
 * within 2 s (refused, reset, closed, silent). */
static int64_t health_probe(int port)
{
    int64_t t0 = now_ns(), deadline = t0 + 2 * (int64_t)1000000000;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static const char req[] = "GET /v0/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    char buf[2048];
    size_t len = 0;
    int64_t took = -1;
    if (fd < 0) return -1;
    set_rcvtimeo(fd);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
        goto out;
    while (now_ns() < deadline && len < sizeof buf - 1) {
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) break; /* the whole reply is there when the server closes */
        len += (size_t)r;
    }
    buf[len] = '\0';
    if (strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && strstr(buf, "\r\n\r\n")) took = now_ns() - t0;
out:
    close(fd);
    return took;
}

/* Health probes every PROBE_EVERY_MS for O.slow_seconds on a fresh kernel while
 * SLOW_CONNS connections each send a byte of an endless request head every
 * SLOW_EVERY_S; those the kernel closes are opened again once a second, as an
 * attacker's tool does. */
static struct slow_result run_slowloris(void)
{
    struct slow_result res = {0};
    struct rlimit rl;
    rlim_t want = 2 * SLOW_CONNS + 1024; /* ours, and the kernel's (it inherits the limit) */
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want))
        return res;
    if (rl.rlim_cur < want) rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) return res;
    struct kproc k;
    kernel_start(&k, NULL);
    int *fd = xmalloc(SLOW_CONNS * sizeof *fd);
    size_t *sent = xcalloc(SLOW_CONNS, sizeof *sent);
    int64_t *due = xmalloc(SLOW_CONNS * sizeof *due);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1: %s", strerror(errno));
    int64_t every = (int64_t)(SLOW_EVERY_S * 1e9), t0 = now_ns();
    for (int i = 0; i < SLOW_CONNS; i++) {
        fd[i] = -1;
        due[i] = t0 + every * (i % 97 + 1) / 97; /* spread the drips over the interval */
    }
    struct samples lat = {0};
    int64_t end = 0, next_fill = 0, next_probe = 0;
    for (;;) {
        check_interrupted();
        int64_t now = now_ns();
        if (end && now >= end) break;
        if (now >= next_fill) { /* (re)open the closed ones */
            int open = 0;
            for (int i = 0; i < SLOW_CONNS; i++) {
                if (fd[i] < 0 && (fd[i] = slow_open(k.port)) >= 0) {
                    sent[i] = 1;
                    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &ev);
                }
                open += fd[i] >= 0;
            }
            if (!end) { /* the load is up: measure from now */
                res.conns = open;
                end = now_ns() + (int64_t)(O.slow_seconds * 1e9);
            }
            next_fill = now_ns() + 1000000000;
        }
        for (int i = 0; i < SLOW_CONNS; i++) {
            if (fd[i] < 0 || due[i] > now) continue;
            due[i] = now + every;
            char b = sent[i] < sizeof slow_head - 1 ? slow_head[sent[i]] : 'a';
            if (send(fd[i], &b, 1, MSG_NOSIGNAL) == 1) sent[i]++;
        }
        if (now >= next_probe) {
            int64_t took = health_probe(k.port);
            res.probes++;
            if (took >= 0) samples_add(&lat, took);
            next_probe = now_ns() + PROBE_EVERY_MS * 1000000LL;
        }
        struct epoll_event evs[256];
        int n = epoll_wait(ep, evs, 256, 10);
        for (int j = 0; j < n; j++) { /* the kernel cut or shed it: gone until the next fill */
            int i = (int)evs[j].data.u32;
            close(fd[i]); /* also drops it from the epoll set */
            fd[i] = -1;
        }
    }
    res.answered = lat.n;
    res.p50_ms = (double)pct(&lat, 0.50) / 1e6;
    res.p99_ms = (double)pct(&lat, 0.99) / 1e6;
    res.max_ms = (double)pct(&lat, 1.0) / 1e6;
    samples_free(&lat);
    for (int i = 0; i < SLOW_CONNS; i++)
        if (fd[i] >= 0) close(fd[i]);
    close(ep);
    free(fd);
    free(sent);
    free(due);
    kernel_remove(&k);
    return res;
}

/* ------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ dispatch modes */

#define DISPATCH_FLOWS 8
#define DQ_CAP 1024

/* Dispatches the webhook server received, taken by any flow. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char exec_id[DQ_CAP][40], dispatch_id[DQ_CAP][40];
    long long attempt[DQ_CAP];
    int head, n;
} DQ = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static volatile int hook_stop;

struct dflow {
    pthread_t th;
    int port;
    bool webhook;
    const char *agent;
    int64_t t_measure, t_end;
    long long done;
    struct samples lat;
};

/* One webhook connection (curl keeps it alive): read each POST, queue it, answer 200. */
static void *hook_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    size_t len = 0;
    set_rcvtimeo(fd);
    while (!hook_stop) {
        char *end = memmem(buf, len, "\r\n\r\n", 4);
        if (!end) {
            if (len == sizeof buf) break;
            ssize_t r = read(fd, buf + len, sizeof buf - len);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) break;
            len += (size_t)r;
            continue;
        }
        size_t head = (size_t)(end - buf) + 4;
        const char *cl = find_ci(buf, head, "content-length:");
        size_t body_len = cl ? strtoul(cl + 15, NULL, 10) : 0;
        if (head + body_len > sizeof buf) break;
        while (len < head + body_len && !hook_stop) {
            ssize_t r = read(fd, buf + len, sizeof buf - len);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) goto out;
            len += (size_t)r;
        }
        json_t *j = json_loadb(buf + head, body_len, 0, NULL);
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        if (write(fd, ok, sizeof ok - 1) < 0) {
            json_decref(j);
            break;
        }
        pthread_mutex_lock(&DQ.mu);
        if (j && DQ.n < DQ_CAP) {
            int slot = (DQ.head + DQ.n++) % DQ_CAP;
            snprintf(DQ.exec_id[slot], 40, "%s", json_string_value(json_object_get(j, "execution_id")));
            snprintf(DQ.dispatch_id[slot], 40, "%s", json_string_value(json_object_get(j, "dispatch_id")));
            DQ.attempt[slot] = json_integer_value(json_object_get(j, "dispatch_attempt"));
            pthread_cond_signal(&DQ.cv);
        }
        pthread_mutex_unlock(&DQ.mu);
        json_decref(j);
        memmove(buf, buf + head + body_len, len - head - body_len);
        len -= head + body_len;
    }
out:
    close(fd);
    return NULL;
}

static void *hook_server(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    while (!hook_stop) {
        struct pollfd p = {lfd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        pthread_t th;
        if (pthread_create(&th, NULL, hook_conn, (void *)(intptr_t)fd) == 0) pthread_detach(th);
        else close(fd);
    }
    return NULL;
}

static void *dflow_run(void *arg)
{
    struct dflow *f = arg;
    struct agent a;
    memset(&a, 0, sizeof a);
    conn_open(&a.c, f->port);
    if (!f->webhook) agent_register(&a, f->agent);
    for (;;) {
        int64_t t0 = now_ns();
        if (t0 >= f->t_end || interrupted) break;
        char *id = create_exec(&a.c, f->agent);
        char exec_id[40], did[40];
        long long att;
        if (!f->webhook) {
            json_t *claim = agent_claim(&a, f->agent, 10);
            if (!claim) die("no dispatch within 10 s (long-poll)");
            snprintf(exec_id, sizeof exec_id, "%s", jstr(claim, "execution", "id"));
            snprintf(did, sizeof did, "%s", jstr(claim, "dispatch", "id"));
            att = jint(claim, "dispatch", "attempt");
            json_decref(claim);
        } else {
            pthread_mutex_lock(&DQ.mu);
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += 10;
            while (DQ.n == 0)
                if (pthread_cond_timedwait(&DQ.cv, &DQ.mu, &dl) == ETIMEDOUT) break;
            if (DQ.n == 0) {
                pthread_mutex_unlock(&DQ.mu);
                die("no webhook delivery within 10 s");
            }
            snprintf(exec_id, sizeof exec_id, "%s", DQ.exec_id[DQ.head]);
            snprintf(did, sizeof did, "%s", DQ.dispatch_id[DQ.head]);
            att = DQ.attempt[DQ.head];
            DQ.head = (DQ.head + 1) % DQ_CAP;
            DQ.n--;
            pthread_mutex_unlock(&DQ.mu);
        }
        free(id);
        char path[160], hdrs[200];
        snprintf(path, sizeof path, "/v0/executions/%s/complete", exec_id);
        snprintf(hdrs, sizeof hdrs, "Rebuno-Dispatch-Id: %s\r\nRebuno-Dispatch-Attempt: %lld\r\n", did, att);
        json_decref(call_ok(&a.c, 204, "POST", path, hdrs, "{}"));
        int64_t t1 = now_ns();
        if (t0 >= f->t_measure) {
            f->done++;
            samples_add(&f->lat, t1 - t0);
        }
    }
    conn_close(&a.c);
    return NULL;
}

struct dispatch_result {
    double rt_per_s, p50_ms, p99_ms;
};

static struct dispatch_result run_dispatch_mode(bool webhook)
{
    struct kproc k;
    int lfd = -1, hook_port = 0;
    pthread_t hook_th;
    char cfg[256];
    if (webhook) {
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 128) < 0)
            die("webhook listener: %s", strerror(errno));
        socklen_t sl = sizeof sa;
        getsockname(lfd, (struct sockaddr *)&sa, &sl);
        hook_port = ntohs(sa.sin_port);
        hook_stop = 0;
        DQ.head = DQ.n = 0;
        if (pthread_create(&hook_th, NULL, hook_server, (void *)(intptr_t)lfd) != 0) die("pthread_create");
        snprintf(cfg, sizeof cfg,
                 "agents:\n  - id: hook\n    webhook_url: http://127.0.0.1:%d/hook\n    secret: bench-secret\n",
                 hook_port);
    } else {
        snprintf(cfg, sizeof cfg, "agents:\n  - id: pull\n");
    }
    kernel_start(&k, cfg);
    struct dflow f[DISPATCH_FLOWS];
    int64_t t_measure = now_ns() + (int64_t)(O.warmup * 1e9), t_end = t_measure + (int64_t)(O.seconds * 1e9);
    for (int i = 0; i < DISPATCH_FLOWS; i++) {
        memset(&f[i], 0, sizeof f[i]);
        f[i].port = k.port;
        f[i].webhook = webhook;
        f[i].agent = webhook ? "hook" : "pull";
        f[i].t_measure = t_measure;
        f[i].t_end = t_end;
        if (pthread_create(&f[i].th, NULL, dflow_run, &f[i]) != 0) die("pthread_create");
    }
    struct samples all = {0};
    long long done = 0;
    for (int i = 0; i < DISPATCH_FLOWS; i++) {
        pthread_join(f[i].th, NULL);
        done += f[i].done;
        for (size_t j = 0; j < f[i].lat.n; j++) samples_add(&all, f[i].lat.v[j]);
        samples_free(&f[i].lat);
    }
    struct dispatch_result r = {(double)done / O.seconds, (double)pct(&all, 0.50) / 1e6,
                                (double)pct(&all, 0.99) / 1e6};
    samples_free(&all);
    kernel_stop(&k, false);
    kernel_remove(&k);
    if (webhook) {
        hook_stop = 1;
        pthread_join(hook_th, NULL);
        close(lfd);
    }
    return r;
}

/* The agents a1..aN of the runs, each with one rule that limits every tool call, far
 * above what a run reaches. */
static void make_limit_config(void)
{
    int agents = 32; /* the PostgreSQL runs' */
    for (int i = 0; i < O.n_levels; i++)
        if (O.levels[i] > agents) agents = O.levels[i];
    size_t cap = (size_t)agents * 320 + 16;
    limit_config = xmalloc(cap);
    size_t n = (size_t)snprintf(limit_config, cap, "agents:\n");
    for (int i = 1; i <= agents && n < cap; i++)
        n += (size_t)snprintf(limit_config + n, cap - n,
                              "  - id: a%d\n    policy: |\n      default_action: allow\n      rules:\n"
                              "        - id: bench-limit\n          when: {step_kind: tool_call}\n"
                              "          then: {decision: allow, rate_limit: {max_calls: 1000000000, window: 1s,"
                              " per_what: %s}}\n", i, O.rate_limit);
    if (n >= cap) die("--rate-limit: the config does not fit");
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: build/bench/kernel [--seconds S] [--warmup S] [--baseline-seconds S] [--agents "
        "1,8,32]\n"
        "                          [--events N] [--replays N] [--quick] [--no-replay] "
        "[--no-baseline]\n"
        "                          [--slowloris-seconds S] [--no-slowloris] [--no-dispatch] [--bin PATH]\n"
        "                          [--tmpdir DIR] [--verbose]\n\n"
        "  --seconds S           measured time per concurrency level (default 3)\n"
        "  --warmup S            unmeasured time before it (default 0.5)\n"
        "  --baseline-seconds S  raw SQLite loop duration (default 2)\n"
        "  --agents LIST         concurrency levels (default 1,8,32; at most %d each)\n"
        "  --events N            events in the big replay execution, 4 per step (default 100000)\n"
        "  --replays N           replay lookups timed per point (default 2000)\n"
        "  --quick               ~30 s run: --seconds 1 --warmup 0.25 --baseline-seconds 1 "
        "--replays 500\n"
        "  --bin PATH            kernel binary (default $REBUNO_BIN or build/rebuno)\n"
        "  --tmpdir DIR          where state folders go (default $TMPDIR or /tmp); the baseline\n"
        "                        database goes there too, so both fsync on the same file system\n"
        "  --slowloris-seconds S health probes under slowloris this long (default 15: past the\n"
        "                        10 s head deadline; --quick: 5)\n"
        "  --no-baseline, --no-replay, --no-slowloris, --no-dispatch  skip those parts\n"
        "  --store postgres      instead: a real PostgreSQL (started here), a naive loop of one\n"
        "                        durable transaction per write, 32 agents on SQLite and on 1, 2\n"
        "                        and 3 kernel replicas sharing the PostgreSQL\n"
        "  --rate-limit SCOPE    every step round trip under a rate_limit rule (per_what SCOPE:\n"
        "                        execution, agent or global; window 1 s, never reached)\n"
        "  --verbose             print each kernel's pid, port and state folder (to attach a "
        "profiler)\n",
        MAX_AGENTS);
}

static double arg_num(const char *opt, const char *v, double min, double max)
{
    char *end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end || x < min || x > max) {
        fprintf(stderr, "bench/kernel: %s needs a number between %g and %g\n", opt, min, max);
        exit(2);
    }
    return x;
}

static void parse_args(int argc, char **argv)
{
    O.seconds = 3;
    O.warmup = 0.5;
    O.baseline_seconds = 2;
    O.levels[0] = 1, O.levels[1] = 8, O.levels[2] = 32, O.n_levels = 3;
    O.big_steps = 25000;
    O.replays = 2000;
    O.slow_seconds = 15;
    O.bin = getenv("REBUNO_BIN") ? getenv("REBUNO_BIN") : "build/rebuno";
    O.tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    bool set_seconds = false, set_warmup = false, set_base = false, set_replays = false;
    bool set_slow = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--quick")) {
            O.quick = true;
        } else if (!strcmp(a, "--no-replay")) {
            O.no_replay = true;
        } else if (!strcmp(a, "--verbose")) {
            O.verbose = true;
        } else if (!strcmp(a, "--no-baseline")) {
            O.no_baseline = true;
        } else if (!strcmp(a, "--store") && v) {
            if (strcmp(v, "postgres") && strcmp(v, "sqlite")) {
                fprintf(stderr, "bench/kernel: --store is sqlite or postgres\n");
                exit(2);
            }
            O.postgres = !strcmp(v, "postgres"), i++;
        } else if (!strcmp(a, "--rate-limit") && v) {
            if (strcmp(v, "execution") && strcmp(v, "agent") && strcmp(v, "global")) {
                fprintf(stderr, "bench/kernel: --rate-limit is execution, agent or global\n");
                exit(2);
            }
            O.rate_limit = v, i++;
        } else if (!strcmp(a, "--no-dispatch")) {
            O.no_dispatch = true;
        } else if (!strcmp(a, "--no-slowloris")) {
            O.no_slowloris = true;
        } else if (!strcmp(a, "--slowloris-seconds")) {
            O.slow_seconds = arg_num(a, v, 1, 600), i++, set_slow = true;
        } else if (!strcmp(a, "--seconds")) {
            O.seconds = arg_num(a, v, 0.1, 600), i++, set_seconds = true;
        } else if (!strcmp(a, "--warmup")) {
            O.warmup = arg_num(a, v, 0, 60), i++, set_warmup = true;
        } else if (!strcmp(a, "--baseline-seconds")) {
            O.baseline_seconds = arg_num(a, v, 0.1, 600), i++, set_base = true;
        } else if (!strcmp(a, "--events")) {
            O.big_steps = (int)(arg_num(a, v, 40, 4000000) / 4), i++;
        } else if (!strcmp(a, "--replays")) {
            O.replays = (int)arg_num(a, v, 10, 100000), i++, set_replays = true;
        } else if (!strcmp(a, "--bin") && v) {
            O.bin = v, i++;
        } else if (!strcmp(a, "--tmpdir") && v) {
            O.tmp = v, i++;
        } else if (!strcmp(a, "--agents") && v) {
            O.n_levels = 0;
            char *copy = xstrdup(v), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (O.n_levels == MAX_LEVELS) {
                    fprintf(stderr, "bench/kernel: at most %d levels\n", MAX_LEVELS);
                    exit(2);
                }
                O.levels[O.n_levels++] = (int)arg_num("--agents", t, 1, MAX_AGENTS);
            }
            free(copy);
            if (!O.n_levels) O.levels[O.n_levels++] = 32;
            i++;
        } else {
            fprintf(stderr, "bench/kernel: unknown option %s\n", a);
            usage(stderr);
            exit(2);
        }
    }
    if (O.quick) {
        if (!set_seconds) O.seconds = 1;
        if (!set_warmup) O.warmup = 0.25;
        if (!set_base) O.baseline_seconds = 1;
        if (!set_replays) O.replays = 500;
        if (!set_slow) O.slow_seconds = 5;
    }
    if (O.rate_limit) make_limit_config();
    if (access(O.bin, X_OK) != 0) {
        fprintf(stderr,
                "bench/kernel: cannot run %s (build it with `make build/rebuno`, or pass --bin)\n",
                O.bin);
        exit(2);
    }
}

static const char *fs_note(void)
{
    struct statfs sf;
    if (statfs(O.tmp, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
        return " -- WARNING: tmpfs, fsync is free here; pass --tmpdir on a disk";
    return "";
}

static int run_postgres(void);

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    atexit(cleanup);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (O.postgres) return run_postgres();

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char n1[32], n2[32], n3[32];
    printf("rebuno kernel benchmark (%ld cores, SQLite %s WAL synchronous=FULL, state in %s%s)\n",
           cores, sqlite3_libversion(), O.tmp, fs_note());
    printf("kernel: %s dev, fresh state per run; clients: one epoll loop, 1 keep-alive connection "
           "per agent\n",
           O.bin);
    if (O.rate_limit) printf("every step under a rate_limit rule, per_what: %s (never reached)\n", O.rate_limit);
    printf("round trip = POST .../steps (proceed) + POST .../steps/{id}/complete (recorded); %.2g "
           "s warm-up, %.3g s measured\n\n",
           O.warmup, O.seconds);

    struct baseline base = {0};
    if (!O.no_baseline) {
        base = run_baseline(O.baseline_seconds);
        printf("baseline: raw SQLite, 1 durable tx per write ...... %s tx/s  (p50 %.0f us, p99 "
               "%.0f us)\n\n",
               commas(base.tx_per_s, n1, sizeof n1), base.p50_us, base.p99_us);
    }

    struct level_result res[MAX_LEVELS];
    printf("agents  round-trips/s  writes vs baseline  p50 ms  p99 ms   submit p50/p99 ms  complete "
           "p50/p99 ms   cpu us/rt kernel client\n");
    const struct level_result *r32 = NULL;
    for (int i = 0; i < O.n_levels; i++) {
        res[i] = run_level(O.levels[i]);
        struct level_result *r = &res[i];
        char vs[48] = "-";
        if (base.tx_per_s > 0)
            snprintf(vs, sizeof vs, "%.2fx", WRITES_PER_RT * r->rt_per_s / base.tx_per_s);
        printf("%6d  %13s  %18s  %6.2f  %6.2f  %8.2f / %-7.2f  %9.2f / %-7.2f  %16.0f %6.0f\n",
               r->agents, commas(r->rt_per_s, n1, sizeof n1), vs, r->rt_p50_ms, r->rt_p99_ms,
               r->submit_p50_ms, r->submit_p99_ms, r->complete_p50_ms, r->complete_p99_ms,
               r->kernel_cpu_us_per_rt, r->client_cpu_us_per_rt);
        if (r->agents == 32) r32 = r;
    }
    if (r32) {
        printf("aim with 32 agents: >= %s rt/s -> %s (%s)", commas(AIM_RT_PER_S, n1, sizeof n1),
               commas(r32->rt_per_s, n2, sizeof n2),
               r32->rt_per_s >= AIM_RT_PER_S ? "met" : "MISSED");
        if (base.tx_per_s > 0)
            printf("; durable writes/s >= %.0fx baseline -> %.2fx (%s)", AIM_VS_BASELINE,
                   WRITES_PER_RT * r32->rt_per_s / base.tx_per_s,
                   WRITES_PER_RT * r32->rt_per_s >= AIM_VS_BASELINE * base.tx_per_s ? "met"
                                                                                    : "MISSED");
        printf("\n");
    }
    printf("durability: after each run the kernel was killed with SIGKILL; acknowledged / found in "
           "its database:");
    for (int i = 0; i < O.n_levels; i++)
        printf(" %s/%s", commas((double)res[i].acked, n1, sizeof n1),
               commas((double)res[i].found, n2, sizeof n2));
    printf(" (all present)\n\n");

    struct replay_result small = {0}, big = {0}, big_start = {0}, big_end = {0};
    double build_s = 0, build_rate = 0;
    if (!O.no_replay) {
        run_replay(&small, &big, &big_start, &big_end, &build_s, &build_rate);
        printf("replay lookup (re-dispatched execution re-submits a recorded step; decision "
               "\"replay\")\n");
        printf("        events  lookups   p50 us   p99 us\n");
        printf("%14s  %7zu  %7.0f  %7.0f   (%zu executions of ~%lld events, one lookup each)\n",
               commas((double)small.events, n1, sizeof n1), small.n, small.p50_us, small.p99_us,
               small.n, small.events);
        printf("%14s  %7zu  %7.0f  %7.0f   (ratio %s/%s p50: %.2fx, p99: %.2fx; aim ~1x)\n",
               commas((double)big.events, n1, sizeof n1), big.n, big.p50_us, big.p99_us, n1,
               commas((double)small.events, n3, sizeof n3),
               small.p50_us > 0 ? big.p50_us / small.p50_us : 0,
               small.p99_us > 0 ? big.p99_us / small.p99_us : 0);
        printf("        of which the first %zu steps: p50 %.0f us, p99 %.0f us; the last %zu: p50 "
               "%.0f us, p99 %.0f us\n",
               big_start.n, big_start.p50_us, big_start.p99_us, big_end.n, big_end.p50_us,
               big_end.p99_us);
        printf(
            "        (the big history was built by 32 connections in %.1f s: %s round trips/s)\n\n",
            build_s, commas(build_rate, n2, sizeof n2));
    }

    struct slow_result slow = {0};
    if (!O.no_slowloris) {
        slow = run_slowloris();
        if (!slow.conns)
            printf("health under slowloris: skipped (RLIMIT_NOFILE hard limit below %d)\n\n",
                   2 * SLOW_CONNS + 1024);
        else
            printf("health under slowloris (%s connections dripping a byte of a request head every "
                   "%.0f s each,\n  reopened each second when closed; a probe at most every %d ms for "
                   "%.3g s, each on a fresh connection):\n  answered %zu/%zu, p50 %.2f ms, p99 %.2f ms, max "
                   "%.2f ms (aim: all answered, p99 <= %.0f ms -> %s)\n\n",
                   commas(slow.conns, n1, sizeof n1), SLOW_EVERY_S, PROBE_EVERY_MS,
                   O.slow_seconds, slow.answered, slow.probes, slow.p50_ms, slow.p99_ms,
                   slow.max_ms, AIM_HEALTH_MS,
                   slow.answered == slow.probes && slow.p99_ms <= AIM_HEALTH_MS ? "met"
                                                                                : "MISSED");
    }

    struct dispatch_result dpoll = {0}, dhook = {0};
    if (!O.no_dispatch) {
        dpoll = run_dispatch_mode(false);
        dhook = run_dispatch_mode(true);
        double ratio = dpoll.rt_per_s > 0 ? dhook.rt_per_s / dpoll.rt_per_s : 0;
        printf("dispatch round trips (POST /v0/executions, the dispatch reaches the agent, POST .../complete),\n"
               "%d concurrent flows, one kernel per mode:\n"
               "  mode        round-trips/s   p50 ms   p99 ms\n"
               "  long-poll   %13s  %7.2f  %7.2f\n"
               "  webhook     %13s  %7.2f  %7.2f   (%.2fx long-poll; aim >= 0.8x -> %s)\n\n",
               DISPATCH_FLOWS, commas(dpoll.rt_per_s, n1, sizeof n1), dpoll.p50_ms, dpoll.p99_ms,
               commas(dhook.rt_per_s, n2, sizeof n2), dhook.p50_ms, dhook.p99_ms, ratio,
               ratio >= 0.8 ? "met" : "MISSED");
    }

    /* machine-readable */
    if (!O.no_baseline) printf("bench.sqlite.tx_per_s=%.0f\n", base.tx_per_s);
    if (!O.no_dispatch) {
        printf("bench.kernel.dispatch_rt_per_s.longpoll=%.0f\n", dpoll.rt_per_s);
        printf("bench.kernel.dispatch_rt_per_s.webhook=%.0f\n", dhook.rt_per_s);
        printf("bench.kernel.dispatch_p50_ms.longpoll=%.3f\n", dpoll.p50_ms);
        printf("bench.kernel.dispatch_p50_ms.webhook=%.3f\n", dhook.p50_ms);
        printf("bench.kernel.dispatch_webhook_vs_longpoll=%.3f\n",
               dpoll.rt_per_s > 0 ? dhook.rt_per_s / dpoll.rt_per_s : 0);
    }
    for (int i = 0; i < O.n_levels; i++) {
        struct level_result *r = &res[i];
        int a = r->agents;
        printf("bench.kernel.rt_per_s.agents%d=%.0f\n", a, r->rt_per_s);
        printf("bench.kernel.rt_p50_ms.agents%d=%.3f\n", a, r->rt_p50_ms);
        printf("bench.kernel.rt_p99_ms.agents%d=%.3f\n", a, r->rt_p99_ms);
        printf("bench.kernel.submit_p50_ms.agents%d=%.3f\n", a, r->submit_p50_ms);
        printf("bench.kernel.submit_p99_ms.agents%d=%.3f\n", a, r->submit_p99_ms);
        printf("bench.kernel.complete_p50_ms.agents%d=%.3f\n", a, r->complete_p50_ms);
        printf("bench.kernel.complete_p99_ms.agents%d=%.3f\n", a, r->complete_p99_ms);
        printf("bench.kernel.cpu_us_per_rt.agents%d=%.1f\n", a, r->kernel_cpu_us_per_rt);
        printf("bench.client.cpu_us_per_rt.agents%d=%.1f\n", a, r->client_cpu_us_per_rt);
        if (base.tx_per_s > 0)
            printf("bench.kernel.writes_vs_baseline.agents%d=%.3f\n", a,
                   WRITES_PER_RT * r->rt_per_s / base.tx_per_s);
    }
    if (!O.no_replay) {
        printf("bench.kernel.replay_events.small=%lld\n", small.events);
        printf("bench.kernel.replay_p50_us.small=%.1f\n", small.p50_us);
        printf("bench.kernel.replay_p99_us.small=%.1f\n", small.p99_us);
        printf("bench.kernel.replay_events.big=%lld\n", big.events);
        printf("bench.kernel.replay_p50_us.big=%.1f\n", big.p50_us);
        printf("bench.kernel.replay_p99_us.big=%.1f\n", big.p99_us);
        printf("bench.kernel.replay_p50_ratio=%.3f\n",
               small.p50_us > 0 ? big.p50_us / small.p50_us : 0);
        printf("bench.kernel.replay_p99_ratio=%.3f\n",
               small.p99_us > 0 ? big.p99_us / small.p99_us : 0);
    }
    if (slow.conns) {
        printf("bench.kernel.slowloris_conns=%d\n", slow.conns);
        printf("bench.kernel.slowloris_answered=%zu\n", slow.answered);
        printf("bench.kernel.slowloris_probes=%zu\n", slow.probes);
        printf("bench.kernel.slowloris_health_p50_ms=%.3f\n", slow.p50_ms);
        printf("bench.kernel.slowloris_health_p99_ms=%.3f\n", slow.p99_ms);
    }
    return 0;
}

/* ------------------------------------------------------------------ PostgreSQL (--store postgres) */

#define PG_AIM_VS_NAIVE 3.0   /* 1 replica >= 3x the naive loop in durable writes/s */
#define PG_AIM_SCALE 0.9      /* 2 replicas >= 0.9x one replica's round trips/s */
#define PG_AIM_CPU 1.2        /* kernel CPU per round trip within 20% of one replica's */
#define PG_MAX_REPLICAS 3

static uid_t pg_uid;
static gid_t pg_gid;
static bool pg_as_other;

/* Run a PostgreSQL program as the server's user; dies unless it exits 0. */
static void pg_run(char *const argv[])
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char log[PATH_MAX + 16];
        snprintf(log, sizeof log, "%s/tools.log", pg_dir);
        if (pg_as_other && (setgid(pg_gid) < 0 || setuid(pg_uid) < 0)) _exit(126);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        if (chdir(pg_dir) < 0) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char log[PATH_MAX + 16];
        snprintf(log, sizeof log, "%s/tools.log", pg_dir);
        print_log_tail(log);
        die("%s failed", argv[0]);
    }
}

static void pg_stop(void)
{
    if (!pg_dir[0]) return;
    if (pg_port) {
        char ctl[PATH_MAX + 16], data[PATH_MAX + 16];
        snprintf(ctl, sizeof ctl, "%s/pg_ctl", pg_bindir);
        snprintf(data, sizeof data, "%s/data", pg_dir);
        char *argv[] = {ctl, "-D", data, "-m", "immediate", "-w", "stop", NULL};
        pid_t pid = fork();
        if (pid == 0) {
            if (pg_as_other && (setgid(pg_gid) < 0 || setuid(pg_uid) < 0)) _exit(126);
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
            execv(ctl, argv);
            _exit(127);
        }
        if (pid > 0) waitpid(pid, NULL, 0);
        pg_port = 0;
    }
    rm_rf(pg_dir);
    pg_dir[0] = '\0';
}

static void pg_start(void)
{
    const char *cands[] = {"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
                           "/usr/lib/postgresql/15/bin", NULL};
    /* REBUNO_BENCH_PG_BINDIR: another PostgreSQL, e.g. one whose postgres runs under callgrind */
    const char *env = getenv("REBUNO_BENCH_PG_BINDIR");
    if (env && *env) snprintf(pg_bindir, sizeof pg_bindir, "%s", env);
    for (int i = 0; cands[i] && !pg_bindir[0]; i++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/initdb", cands[i]);
        if (access(p, X_OK) == 0) snprintf(pg_bindir, sizeof pg_bindir, "%s", cands[i]);
    }
    if (!pg_bindir[0]) die("PostgreSQL is not installed (apt-get install postgresql-15; scripts/deps.sh)");
    make_tmp(pg_dir, sizeof pg_dir, "pg");
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw) die("run as root, the benchmark starts PostgreSQL as nobody, who does not exist here");
        pg_uid = pw->pw_uid, pg_gid = pw->pw_gid, pg_as_other = true;
        if (chown(pg_dir, pg_uid, pg_gid) < 0) die("chown %s: %s", pg_dir, strerror(errno));
    }
    char initdb[PATH_MAX + 16], ctl[PATH_MAX + 16], data[PATH_MAX + 16], log[PATH_MAX + 16], opts[PATH_MAX + 128];
    snprintf(initdb, sizeof initdb, "%s/initdb", pg_bindir);
    snprintf(ctl, sizeof ctl, "%s/pg_ctl", pg_bindir);
    snprintf(data, sizeof data, "%s/data", pg_dir);
    snprintf(log, sizeof log, "%s/pg.log", pg_dir);
    char *iargv[] = {initdb, "-D", data, "-U", "rebuno", "-E", "UTF8", "--locale=C.UTF-8", "-A", "trust", NULL};
    pg_run(iargv);
    int port = free_port();
    /* defaults kept where they matter: fsync=on, synchronous_commit=on, full_page_writes=on */
    snprintf(opts, sizeof opts, "-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=100", port, pg_dir);
    char *sargv[] = {ctl, "-D", data, "-l", log, "-o", opts, "-w", "-t", "60", "start", NULL};
    pg_run(sargv);
    pg_port = port;
}

static PGconn *pg_connect(const char *schema)
{
    char uri[2 * PATH_MAX];
    snprintf(uri, sizeof uri, "postgres://rebuno@/postgres?host=%s&port=%d%s%s", pg_dir, pg_port,
             schema ? "&options=-csearch_path%3D" : "", schema ? schema : "");
    PGconn *c = PQconnectdb(uri);
    if (PQstatus(c) != CONNECTION_OK) die("cannot connect to the benchmark's PostgreSQL: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning")); /* no NOTICE per dropped table */
    return c;
}

static void pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) die("postgres: %s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

/* One autocommit INSERT = one durable PostgreSQL transaction. */
static void pg_insert(void *ctx, const char *payload, int len)
{
    const char *v[] = {payload};
    PGresult *r = PQexecPrepared(ctx, "ins", 1, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("postgres insert: %s", PQresultErrorMessage(r));
    PQclear(r);
}

/* The naive loop on PostgreSQL, over the Unix socket like the kernels. */
static struct baseline run_pg_naive(double seconds)
{
    PGconn *c = pg_connect(NULL);
    pg_exec(c, "CREATE TABLE naive(id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL)");
    PGresult *r = PQprepare(c, "ins", "INSERT INTO naive(payload) VALUES ($1)", 1, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("postgres prepare: %s", PQresultErrorMessage(r));
    PQclear(r);
    struct baseline b = naive_loop(seconds, pg_insert, c);
    pg_exec(c, "DROP TABLE naive");
    PQfinish(c);
    return b;
}

/* CPU seconds used so far by the PostgreSQL backends serving the kernels (their
 * connections say application_name=rebuno). */
static double pg_kernels_cpu_s(PGconn *admin)
{
    PGresult *r = PQexec(admin, "SELECT pid FROM pg_stat_activity WHERE application_name = 'rebuno'");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) die("postgres: pg_stat_activity: %s", PQresultErrorMessage(r));
    double s = 0;
    for (int i = 0; i < PQntuples(r); i++) s += proc_cpu_s((pid_t)atoi(PQgetvalue(r, i, 0)));
    PQclear(r);
    return s;
}

/* Succeeded steps, and the rows the run wrote per succeeded step: every event, step row
 * and step counter was inserted once and every succeeded step updated once (the 32
 * executions' own few events included: a rounding error at these counts). */
static long long pg_count_succeeded(const char *schema, double *rows_per_rt)
{
    PGconn *c = pg_connect(schema);
    PGresult *r = PQexec(c, "SELECT (SELECT count(*) FROM steps WHERE status='succeeded'),"
                            " (SELECT count(*) FROM events) + (SELECT count(*) FROM steps)"
                            " + (SELECT count(*) FROM step_counters)");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) die("postgres count: %s", PQresultErrorMessage(r));
    long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10), rows = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    *rows_per_rt = n ? (double)(rows + n) / (double)n : 0;
    PQclear(r);
    PQfinish(c);
    return n;
}

/* n agents spread over `replicas` kernels sharing one schema; CPU summed over the kernels. */
static struct level_result run_pg_level(int n, int replicas)
{
    struct level_result lr = {.agents = n};
    char schema[32];
    snprintf(schema, sizeof schema, "bench_r%d_%d", replicas, n);
    PGconn *admin = pg_connect(NULL);
    char sql[96];
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", schema);
    pg_exec(admin, sql);
    /* over the server's Unix socket, as a kernel on the database's host would connect */
    snprintf(kernel_store_uri, sizeof kernel_store_uri,
             "postgres://rebuno@/postgres?host=%s&port=%d&options=-csearch_path%%3D%s", pg_dir, pg_port, schema);
    struct kproc k[PG_MAX_REPLICAS];
    for (int i = 0; i < replicas; i++) kernel_start(&k[i], limit_config);
    kernel_store_uri[0] = '\0';
    struct agent *ag = xcalloc((size_t)n, sizeof *ag);
    for (int i = 0; i < n; i++) agent_start(&ag[i], i, k[i % replicas].port);
    struct run_stats rs = {0};
    int64_t t_measure = now_ns() + (int64_t)(O.warmup * 1e9);
    int64_t t_end = t_measure + (int64_t)(O.seconds * 1e9);
    double kcpu0 = 0, kcpu = 0, ccpu0 = self_cpu_s(), dbcpu0 = pg_kernels_cpu_s(admin);
    for (int i = 0; i < replicas; i++) kcpu0 += proc_cpu_s(k[i].pid);
    run_agents(ag, n, t_measure, t_end, &rs);
    for (int i = 0; i < replicas; i++) kcpu += proc_cpu_s(k[i].pid);
    kcpu -= kcpu0;
    double dbcpu = pg_kernels_cpu_s(admin) - dbcpu0;
    double ccpu = self_cpu_s() - ccpu0;
    level_fill(&lr, &rs, kcpu, ccpu);
    if (rs.acked) lr.db_cpu_us_per_rt = dbcpu * 1e6 / (double)rs.acked;
    lr.acked = rs.acked;
    for (int i = 0; i < replicas; i++) kernel_stop(&k[i], true);
    lr.found = pg_count_succeeded(schema, &lr.rows_per_rt);
    for (int i = 0; i < n; i++) conn_close(&ag[i].c);
    free(ag);
    samples_free(&rs.rt);
    samples_free(&rs.submit);
    samples_free(&rs.complete);
    for (int i = 0; i < replicas; i++) kernel_remove(&k[i]);
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
    pg_exec(admin, sql);
    PQfinish(admin);
    if (lr.found < lr.acked)
        die("durability: %lld step completions were acknowledged but only %lld are in PostgreSQL after kill -9",
            lr.acked, lr.found);
    return lr;
}

/* One row of the table: the writes ratio counts 2 durable API writes per round trip (the
 * issue's aim), the rt ratio 1; both against the naive loop's 1 write per transaction. */
static void print_level(const char *label, const struct level_result *r, double naive)
{
    char n1[32], vs[32] = "-", vr[32] = "-";
    if (naive > 0) snprintf(vs, sizeof vs, "%.2fx", WRITES_PER_RT * r->rt_per_s / naive);
    if (naive > 0) snprintf(vr, sizeof vr, "%.2fx", r->rt_per_s / naive);
    char db[16] = "-";
    if (r->db_cpu_us_per_rt > 0) snprintf(db, sizeof db, "%.0f", r->db_cpu_us_per_rt);
    printf("%-22s %13s  %9s  %6s  %6.2f  %6.2f  %8.2f / %-7.2f  %9.2f / %-7.2f  %10.0f %6.0f %9s\n", label,
           commas(r->rt_per_s, n1, sizeof n1), vs, vr, r->rt_p50_ms, r->rt_p99_ms, r->submit_p50_ms,
           r->submit_p99_ms, r->complete_p50_ms, r->complete_p99_ms, r->kernel_cpu_us_per_rt,
           r->client_cpu_us_per_rt, db);
}

static int run_postgres(void)
{
    const int agents = 32;
    char n1[32], n2[32], n3[32];
    pg_start();
    printf("rebuno kernel benchmark, PostgreSQL store (%ld cores shared by the database, the replicas "
           "and the client;\n  PostgreSQL from %s, fsync=on, synchronous_commit=on, data in %s%s)\n",
           sysconf(_SC_NPROCESSORS_ONLN), pg_bindir, pg_dir, fs_note());
    if (O.rate_limit) printf("every step under a rate_limit rule, per_what: %s (never reached)\n", O.rate_limit);
    printf("round trip = POST .../steps (proceed) + POST .../steps/{id}/complete (recorded); %d agents, "
           "%.2g s warm-up, %.3g s measured\n\n", agents, O.warmup, O.seconds);
    struct baseline naive = run_pg_naive(O.baseline_seconds);
    printf("naive: PostgreSQL, 1 durable tx per write ...... %s tx/s  (p50 %.0f us, p99 %.0f us)\n\n",
           commas(naive.tx_per_s, n1, sizeof n1), naive.p50_us, naive.p99_us);
    printf("%-22s %13s  %9s  %6s  %6s  %6s  %18s  %19s  %27s\n", "store", "round-trips/s", "writes/s", "rt/s",
           "p50 ms", "p99 ms", "submit p50/p99 ms", "complete p50/p99 ms", "cpu us/rt kernel client database");
    printf("%-22s %13s  %9s  %6s\n", "", "", "vs naive", "vs nv");
    struct level_result sq = run_level(agents);
    print_level("SQLite, 1 kernel", &sq, naive.tx_per_s);
    struct level_result pr[PG_MAX_REPLICAS];
    for (int r = 1; r <= PG_MAX_REPLICAS; r++) {
        pr[r - 1] = run_pg_level(agents, r);
        char label[48];
        snprintf(label, sizeof label, "PostgreSQL, %d replica%s", r, r > 1 ? "s" : "");
        print_level(label, &pr[r - 1], naive.tx_per_s);
    }
    double vs_naive = WRITES_PER_RT * pr[0].rt_per_s / naive.tx_per_s;
    double rt_vs_naive = pr[0].rt_per_s / naive.tx_per_s, rows_vs_naive = rt_vs_naive * pr[0].rows_per_rt;
    double scale2 = pr[1].rt_per_s / pr[0].rt_per_s, scale3 = pr[2].rt_per_s / pr[0].rt_per_s;
    double cpu2 = pr[1].kernel_cpu_us_per_rt / pr[0].kernel_cpu_us_per_rt;
    double cpu3 = pr[2].kernel_cpu_us_per_rt / pr[0].kernel_cpu_us_per_rt;
    printf("\naims (issue 15):\n");
    printf("  1 replica durable writes/s >= %.0fx the naive loop -> %.2fx (%s)\n", PG_AIM_VS_NAIVE, vs_naive,
           vs_naive >= PG_AIM_VS_NAIVE ? "met" : "MISSED");
    printf("    (a write = one acknowledged durable request, 2 per round trip; the loop: 1 INSERT per transaction.\n"
           "     Counted otherwise: round trips/s %.2fx the loop's transactions/s; rows written/s %.2fx the loop's,\n"
           "     at %.1f rows per round trip: 4 events, a step inserted and updated, a step counter)\n",
           rt_vs_naive, rows_vs_naive, pr[0].rows_per_rt);
    /* One replica's loop waits for its backend: kernel and database CPU per round trip add
     * up, whatever the disk (bench/README.md, "Is 3x the naive loop reachable here?"). */
    double per_rt_us = pr[0].kernel_cpu_us_per_rt + pr[0].db_cpu_us_per_rt;
    if (per_rt_us > 0)
        printf("    (ceiling of 1 replica at this run's CPU costs: 1e6 / (%.0f kernel + %.0f database us/rt) = %s rt/s,\n"
               "     %.2fx the loop's writes/s; 3x needs a loop of at most %s tx/s)\n",
               pr[0].kernel_cpu_us_per_rt, pr[0].db_cpu_us_per_rt, commas(1e6 / per_rt_us, n1, sizeof n1),
               WRITES_PER_RT * 1e6 / per_rt_us / naive.tx_per_s,
               commas(WRITES_PER_RT * 1e6 / per_rt_us / PG_AIM_VS_NAIVE, n2, sizeof n2));
    printf("  2 replicas round trips/s >= %.1fx one replica's -> %.2fx (%s); 3 replicas: %.2fx\n", PG_AIM_SCALE,
           scale2, scale2 >= PG_AIM_SCALE ? "met" : "MISSED", scale3);
    printf("  2 replicas kernel CPU per round trip within 20%% of one replica's -> %.2fx (%s); 3 replicas: "
           "%.2fx\n", cpu2, cpu2 <= PG_AIM_CPU ? "met" : "MISSED", cpu3);
    printf("  PostgreSQL 1 replica vs SQLite round trips/s: %.2fx\n", pr[0].rt_per_s / sq.rt_per_s);
    struct replay_result small = {0}, big = {0}, big_start = {0}, big_end = {0};
    double build_s = 0, build_rate = 0;
    if (!O.no_replay) { /* the replay lookups of the SQLite run, on one replica */
        PGconn *admin = pg_connect(NULL);
        pg_exec(admin, "CREATE SCHEMA bench_replay");
        snprintf(kernel_store_uri, sizeof kernel_store_uri,
                 "postgres://rebuno@/postgres?host=%s&port=%d&options=-csearch_path%%3Dbench_replay", pg_dir,
                 pg_port);
        run_replay(&small, &big, &big_start, &big_end, &build_s, &build_rate);
        kernel_store_uri[0] = '\0';
        pg_exec(admin, "DROP SCHEMA bench_replay CASCADE");
        PQfinish(admin);
        double r50 = small.p50_us > 0 ? big.p50_us / small.p50_us : 0;
        double r99 = small.p99_us > 0 ? big.p99_us / small.p99_us : 0;
        printf("  replay lookups flat in history length: %s events p50 %.0f us p99 %.0f us vs %s events "
               "p50 %.0f us p99 %.0f us -> %.2fx / %.2fx (aim ~1x; the history was built at %s rt/s)\n",
               commas((double)big.events, n1, sizeof n1), big.p50_us, big.p99_us,
               commas((double)small.events, n2, sizeof n2), small.p50_us, small.p99_us, r50, r99,
               commas(build_rate, n3, sizeof n3));
        printf("bench.pg.replay_p50_ratio=%.3f\n", r50);
    }
    printf("durability: after each run every kernel was killed with SIGKILL; acknowledged / found: SQLite %s/%s",
           commas((double)sq.acked, n1, sizeof n1), commas((double)sq.found, n2, sizeof n2));
    for (int r = 0; r < PG_MAX_REPLICAS; r++)
        printf(", %d replica%s %s/%s", r + 1, r ? "s" : "", commas((double)pr[r].acked, n1, sizeof n1),
               commas((double)pr[r].found, n2, sizeof n2));
    printf(" (all present)\n\n");
    printf("bench.pg.naive_tx_per_s=%.0f\n", naive.tx_per_s);
    printf("bench.sqlite.rt_per_s.agents32=%.0f\n", sq.rt_per_s);
    for (int r = 0; r < PG_MAX_REPLICAS; r++) {
        printf("bench.pg.rt_per_s.replicas%d=%.0f\n", r + 1, pr[r].rt_per_s);
        printf("bench.pg.cpu_us_per_rt.replicas%d=%.1f\n", r + 1, pr[r].kernel_cpu_us_per_rt);
        printf("bench.pg.db_cpu_us_per_rt.replicas%d=%.1f\n", r + 1, pr[r].db_cpu_us_per_rt);
        printf("bench.pg.rt_p99_ms.replicas%d=%.3f\n", r + 1, pr[r].rt_p99_ms);
    }
    printf("bench.pg.writes_vs_naive.replicas1=%.3f\n", vs_naive);
    printf("bench.pg.rt_vs_naive.replicas1=%.3f\n", rt_vs_naive);
    printf("bench.pg.rows_vs_naive.replicas1=%.3f\n", rows_vs_naive);
    printf("bench.pg.rows_per_rt.replicas1=%.2f\n", pr[0].rows_per_rt);
    double ceil_us = pr[0].kernel_cpu_us_per_rt + pr[0].db_cpu_us_per_rt;
    if (ceil_us > 0) printf("bench.pg.ceiling_writes_vs_naive.replicas1=%.3f\n", WRITES_PER_RT * 1e6 / ceil_us / naive.tx_per_s);
    printf("bench.pg.scale.replicas2=%.3f\n", scale2);
    printf("bench.pg.cpu_ratio.replicas2=%.3f\n", cpu2);
    pg_stop();
    return 0;
}
