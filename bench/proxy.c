/*
 * proxy.c - the egress proxy benchmark (build/bench/proxy, see bench/README.md).
 *
 * Starts a local HTTPS upstream (threads in this process, certificate from a CA
 * made here), the real `rebuno egress-proxy` binary in front of it, and, when
 * installed, mitmproxy (`mitmdump`, reverse mode, an addon setting the same
 * header, upstream verification on). The same TLS client then measures, for
 *
 *   direct       client -> upstream                       (the baseline)
 *   passthrough  client -> proxy (host without rules) -> upstream, TLS end to end
 *   injection    client -> proxy (host with a header rule: TLS terminated, header
 *                set, re-encrypted and verified) -> upstream
 *   mitmproxy    client -> mitmdump (same injection) -> upstream
 *   forward      client -> proxy (host whose rule forwards every request to
 *                https://api.example/: TLS terminated, re-targeted, serial) -> upstream
 *   answer       client -> proxy (host whose rule answers every request; no upstream,
 *                no bulk transfer)
 *
 * bulk throughput (one connection, one large response body), keep-alive request
 * rate and latency with 1 and N connections, and the rate of new connections
 * (one request each, so TLS handshakes dominate). It prints ratios: passthrough vs
 * direct, injection vs mitmproxy, and the latency the proxy adds.
 *
 * Every response is checked (status 200, full body) and the upstream counts how
 * many requests carried the injected header, so a broken proxy cannot look fast.
 * Client, proxy and upstream share the machine's CPUs: compare ratios, not
 * absolute numbers. Children die with the benchmark (PR_SET_PDEATHSIG); the
 * temporary folder is removed on exit.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/xalloc.h"

#define CREDENTIAL "Basic eC1hY2Nlc3MtdG9rZW46YmVuY2gtdG9rZW4="
#define SMALL_BODY 64

static struct {
    const char *bin;
    double seconds;
    long bulk_mib;
    int conns;
    int runs;
    bool mitm;
    bool verbose;
    const char *only;
    const char *compare; /* a second rebuno binary, measured as "passthrough-B" */
} opt = {NULL, 2.0, 256, 8, 5, true, false, NULL, NULL};

static char tmpdir[256];
static pid_t children[8];
static int nchildren;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static void cleanup(void)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0) {
            kill(children[i], SIGTERM);
            waitpid(children[i], NULL, 0);
        }
    nchildren = 0;
    if (tmpdir[0]) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    tmpdir[0] = '\0';
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench/proxy: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    cleanup();
    exit(1);
}

static void on_signal(int sig)
{
    cleanup();
    _exit(128 + sig);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *path_in(const char *name)
{
    return xasprintf("%s/%s", tmpdir, name);
}

/* ------------------------------------------------------------------ certificates */

static void add_ext(X509 *c, X509 *issuer, int nid, const char *v)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, c, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, v);
    if (!e || X509_add_ext(c, e, -1) != 1) die("certificate extension %d", nid);
    X509_EXTENSION_free(e);
}

static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key,
                       const char *san)
{
    X509 *c = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(c), (long)(random() & 0x7fffffff));
    X509_set_version(c, 2);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 86400);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c, X509_get_subject_name(issuer ? issuer : c));
    X509_set_pubkey(c, key);
    if (!issuer) {
        add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign");
        add_ext(c, c, NID_subject_key_identifier, "hash");
    } else {
        add_ext(c, issuer, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(c, issuer, NID_ext_key_usage, "serverAuth");
        add_ext(c, issuer, NID_subject_alt_name, san);
        add_ext(c, issuer, NID_authority_key_identifier, "keyid:always");
    }
    if (X509_sign(c, issuer_key, EVP_sha256()) <= 0) die("signing");
    return c;
}

static void write_pem(const char *path, X509 *c)
{
    FILE *f = fopen(path, "w");
    if (!f || PEM_write_X509(f, c) != 1) die("writing %s", path);
    fclose(f);
}

/* ------------------------------------------------------------------ upstream server */

static SSL_CTX *server_ctx;
static atomic_long up_requests, up_with_cred;

static bool read_head(SSL *s, char *buf, size_t cap, size_t *len)
{
    *len = 0;
    while (*len < cap - 1) {
        int n = SSL_read(s, buf + *len, (int)(cap - 1 - *len));
        if (n <= 0) return false;
        *len += (size_t)n;
        buf[*len] = '\0';
        if (strstr(buf, "\r\n\r\n")) return true;
    }
    return false;
}

static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SSL *s = SSL_new(server_ctx);
    SSL_set_fd(s, fd);
    static char chunk[64 * 1024];
    if (SSL_accept(s) == 1) {
        char req[16384];
        size_t len;
        while (read_head(s, req, sizeof req, &len)) {
            atomic_fetch_add(&up_requests, 1);
            char *cred = strcasestr(req, "\r\nAuthorization: ");
            if (cred && !strncmp(cred + 17, CREDENTIAL, strlen(CREDENTIAL)) &&
                !strcasestr(cred + 1, "\r\nAuthorization:"))
                atomic_fetch_add(&up_with_cred, 1);
            long long body = SMALL_BODY;
            if (!strncmp(req, "GET /bulk/", 10)) body = atoll(req + 10);
            char head[128];
            int hl = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\n\r\n",
                              body);
            if (SSL_write(s, head, hl) != hl) break;
            bool ok = true;
            while (body > 0 && ok) {
                int k = body > (long long)sizeof chunk ? (int)sizeof chunk : (int)body;
                ok = SSL_write(s, chunk, k) == k;
                body -= k;
            }
            if (!ok) break;
        }
    }
    SSL_shutdown(s);
    SSL_free(s);
    close(fd);
    return NULL;
}

static void *accept_loop(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, serve_conn, (void *)(intptr_t)fd) != 0) close(fd);
        pthread_attr_destroy(&a);
    }
    return NULL;
}

static int listen_any(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 512) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) < 0)
        die("upstream listen: %s", strerror(errno));
    return fd;
}

static int port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    return ntohs(a.sin_port);
}

/* ------------------------------------------------------------------ children */

static pid_t spawn(char **argv, int out_fd)
{
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (out_fd >= 0) dup2(out_fd, 1);
        if (!opt.verbose) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 2);
            if (out_fd < 0) dup2(null, 1);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    children[nchildren++] = pid;
    return pid;
}

static int start_proxy(const char *bin, int up_port, char *sbx_ca, pid_t *pid)
{
    char body[SMALL_BODY + 1];
    memset(body, 'a', SMALL_BODY);
    body[SMALL_BODY] = '\0';
    char *policy = xasprintf("{\"api.example\": [], \"github.example\": [{\"transform\": "
                             "[{\"headers\": {\"Authorization\": \"%s\"}}]}],"
                             "\"fwd.example\": [{\"forwardURL\": \"https://api.example/\"}],"
                             "\"answer.example\": [{\"response\": {\"statusCode\": 200, "
                             "\"body\": \"%s\"}}]}",
                             CREDENTIAL, body);
    char *o1 = xasprintf("github.example=127.0.0.1:%d", up_port);
    char *o2 = xasprintf("api.example=127.0.0.1:%d", up_port);
    char *upca = path_in("upstream-ca.pem");
    const char *extra = getenv("BENCH_PROXY_ARG"); /* e.g. --no-splice */
    char *argv[] = {(char *)bin,
                    "egress-proxy",
                    "--policy",
                    policy,
                    "--listen-tls",
                    "127.0.0.1:0",
                    "--upstream-override",
                    o1,
                    "--upstream-override",
                    o2,
                    "--upstream-ca",
                    upca,
                    "--no-system-trust",
                    "--ca-cert-out",
                    sbx_ca,
                    "--log-level",
                    "warn",
                    "--max-conns",
                    "10000",
                    extra && *extra ? (char *)extra : NULL,
                    NULL};
    int p[2];
    if (pipe(p) < 0) die("pipe");
    *pid = spawn(argv, p[1]);
    close(p[1]);
    struct pollfd pf = {p[0], POLLIN, 0};
    char line[256] = "";
    size_t n = 0;
    while (n < sizeof line - 1 && !strchr(line, '\n')) {
        if (poll(&pf, 1, 20000) <= 0) die("the proxy did not start (%s)", bin);
        ssize_t r = read(p[0], line + n, sizeof line - 1 - n);
        if (r <= 0) die("the proxy exited at start (%s)", bin);
        n += (size_t)r;
        line[n] = '\0';
    }
    close(p[0]);
    const char *t = strstr(line, "\"tls\":");
    if (!t) die("unexpected ready line: %s", line);
    free(policy);
    free(o1);
    free(o2);
    free(upca);
    return atoi(t + 6);
}

static bool port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static bool have_mitmdump(void)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    char *copy = xstrdup(path), *save = NULL;
    bool found = false;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = xasprintf("%s/mitmdump", d);
        found = access(p, X_OK) == 0;
        free(p);
    }
    free(copy);
    return found;
}

static int start_mitm(int up_port)
{
    char *addon = path_in("inject.py");
    FILE *f = fopen(addon, "w");
    if (!f) die("writing %s", addon);
    fprintf(f, "def request(flow):\n    flow.request.headers[\"Authorization\"] = \"%s\"\n",
            CREDENTIAL);
    fclose(f);
    int lfd = listen_any();
    int port = port_of(lfd);
    close(lfd);
    char *mode = xasprintf("reverse:https://127.0.0.1:%d", up_port);
    char *portstr = xasprintf("%d", port);
    char *confdir = xasprintf("confdir=%s/mitm", tmpdir);
    char *trusted = xasprintf("ssl_verify_upstream_trusted_ca=%s/upstream-ca.pem", tmpdir);
    char *argv[] = {"mitmdump",
                    "-q",
                    "--mode",
                    mode,
                    "--listen-host",
                    "127.0.0.1",
                    "--listen-port",
                    portstr,
                    "--set",
                    confdir,
                    "--set",
                    trusted,
                    "--set",
                    "stream_large_bodies=1m",
                    "--set",
                    "connection_strategy=lazy",
                    "-s",
                    addon,
                    NULL};
    spawn(argv, -1);
    double end = now_s() + 30;
    while (!port_open(port)) {
        if (now_s() > end) die("mitmdump did not start");
        usleep(50000);
    }
    free(addon);
    free(mode);
    free(portstr);
    free(confdir);
    free(trusted);
    return port;
}

/* ------------------------------------------------------------------ client */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n values (sorts them). */
static double median(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct target {
    const char *name;
    int port;
    const char *sni;
    SSL_CTX *ctx;
    pid_t pid; /* the proxy in the path, 0 for none */
    bool injecting;
    bool answered; /* the proxy answers: no upstream request, no bulk */
};

struct conn {
    int fd;
    SSL *ssl;
    char buf[32768];
    size_t have;
};

static bool conn_open(const struct target *t, struct conn *c)
{
    c->have = 0;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)t->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(c->fd);
        return false;
    }
    c->ssl = SSL_new(t->ctx);
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, t->sni);
    if (SSL_get_verify_mode(c->ssl) != SSL_VERIFY_NONE) SSL_set1_host(c->ssl, t->sni);
    if (SSL_connect(c->ssl) != 1) {
        ERR_print_errors_fp(stderr);
        SSL_free(c->ssl);
        close(c->fd);
        return false;
    }
    return true;
}

static void conn_close(struct conn *c)
{
    SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
    close(c->fd);
}

/* One GET; returns the body size or -1. */
static long long request(struct conn *c, const struct target *t, const char *path)
{
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bench\r\n\r\n",
                     path, t->sni);
    if (SSL_write(c->ssl, req, n) != n) return -1;
    c->have = 0;
    char *end = NULL;
    while (!(end = memmem(c->buf, c->have, "\r\n\r\n", 4))) {
        if (c->have == sizeof c->buf) return -1;
        int r = SSL_read(c->ssl, c->buf + c->have, (int)(sizeof c->buf - c->have));
        if (r <= 0) return -1;
        c->have += (size_t)r;
    }
    if (strncmp(c->buf, "HTTP/1.1 200", 12) != 0) return -1;
    *end = '\0';
    char *cl = strcasestr(c->buf, "\r\nContent-Length:");
    if (!cl) return -1;
    long long body = atoll(cl + 17), got = (long long)(c->have - (size_t)(end + 4 - c->buf));
    while (got < body) {
        int r = SSL_read(c->ssl, c->buf, (int)sizeof c->buf);
        if (r <= 0) return -1;
        got += r;
    }
    return got == body ? body : -1;
}

/* CPU time (ns) used so far by every thread of a process, from /proc/<pid>/task/<tid>/schedstat
 * (nanosecond resolution, unlike the 10 ms ticks of /proc/<pid>/stat); -1 if unreadable. */
static double proc_cpu_s(pid_t pid)
{
    char *dir = xasprintf("/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    free(dir);
    if (!d) return -1;
    double total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char *path = xasprintf("/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        free(path);
        unsigned long long ns = 0;
        if (f) {
            if (fscanf(f, "%llu", &ns) == 1) total += (double)ns / 1e9;
            fclose(f);
        }
    }
    closedir(d);
    return total;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* One bulk transfer on a new connection (the handshake is not timed). Returns MB/s; adds the
 * CPU the proxy in the path (pid, or 0) and this process (client + upstream) used. */
static double bulk_once(const struct target *t, long long bytes, double *proxy_cpu,
                        double *self_cpu)
{
    struct conn c;
    if (!conn_open(t, &c)) die("%s: connect failed", t->name);
    char path[64];
    snprintf(path, sizeof path, "/bulk/%lld", bytes);
    double p0 = t->pid ? proc_cpu_s(t->pid) : 0, s0 = self_cpu_s(), t0 = now_s();
    if (request(&c, t, path) != bytes) die("%s: bulk transfer failed", t->name);
    double el = now_s() - t0;
    *self_cpu += self_cpu_s() - s0;
    if (t->pid) *proxy_cpu += proc_cpu_s(t->pid) - p0;
    conn_close(&c);
    return (double)bytes / el / 1e6;
}

struct rr {
    const struct target *t;
    double until;
    bool new_conn_each;
    long count;
    double *lat; /* seconds */
    long lat_cap;
    bool failed;
};

static void *rr_thread(void *arg)
{
    struct rr *r = arg;
    struct conn c;
    bool open = false;
    while (now_s() < r->until) {
        double t0 = now_s();
        if (!open) {
            if (!conn_open(r->t, &c)) {
                r->failed = true;
                break;
            }
            open = true;
        }
        if (request(&c, r->t, "/small") != SMALL_BODY) {
            r->failed = true;
            break;
        }
        if (r->new_conn_each) {
            conn_close(&c);
            open = false;
        }
        if (r->count < r->lat_cap) r->lat[r->count] = now_s() - t0;
        r->count++;
    }
    if (open) conn_close(&c);
    return NULL;
}

struct rr_result {
    double rps, p50_us, p99_us;
};

static struct rr_result run_rr(const struct target *t, int nconn, bool new_conn_each, double secs)
{
    struct rr *rs = xcalloc((size_t)nconn, sizeof *rs);
    pthread_t *th = xcalloc((size_t)nconn, sizeof *th);
    double start = now_s(), until = start + secs;
    for (int i = 0; i < nconn; i++) {
        rs[i] = (struct rr){t,       until, new_conn_each, 0, xcalloc(1000000, sizeof(double)),
                            1000000, false};
        pthread_create(&th[i], NULL, rr_thread, &rs[i]);
    }
    long total = 0, nl = 0;
    for (int i = 0; i < nconn; i++) {
        pthread_join(th[i], NULL);
        if (rs[i].failed) die("%s: a request failed", t->name);
        total += rs[i].count;
    }
    double elapsed = now_s() - start;
    double *all = xcalloc((size_t)total + 1, sizeof *all);
    for (int i = 0; i < nconn; i++) {
        long k = rs[i].count < rs[i].lat_cap ? rs[i].count : rs[i].lat_cap;
        memcpy(all + nl, rs[i].lat, (size_t)k * sizeof *all);
        nl += k;
        free(rs[i].lat);
    }
    qsort(all, (size_t)nl, sizeof *all, cmp_double);
    struct rr_result res = {(double)total / elapsed, nl ? all[nl / 2] * 1e6 : 0,
                            nl ? all[(long)((double)nl * 0.99)] * 1e6 : 0};
    free(all);
    free(rs);
    free(th);
    return res;
}

static SSL_CTX *client_ctx(const char *cafile)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
    if (cafile) {
        if (SSL_CTX_load_verify_locations(ctx, cafile, NULL) != 1) die("loading %s", cafile);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return ctx;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fputs(
        "usage: build/bench/proxy [--seconds S] [--bulk-mib N] [--runs N] [--conns N] [--no-mitm]\n"
        "                         [--quick] [--only PATH] [--bin PATH] [--compare PATH] "
        "[--verbose]\n"
        "  --seconds S     measured time per request-rate point (default 2)\n"
        "  --bulk-mib N    size of one bulk transfer (default 256)\n"
        "  --runs N        bulk rounds, every path once per round, interleaved; the median is\n"
        "                  reported (default 5)\n"
        "  --conns N       concurrent keep-alive connections for the rate test (default 8)\n"
        "  --no-mitm       skip mitmproxy even if mitmdump is installed\n"
        "  --quick         --seconds 1 --bulk-mib 64 --runs 3\n"
        "  --only PATH     measure one path: direct, passthrough, injection, mitmproxy, forward\n"
        "                  or answer\n"
        "  --bin PATH      the rebuno binary (default $REBUNO_BIN or build/rebuno)\n"
        "  --compare PATH  a second rebuno binary, measured as path passthrough-B in the same\n"
        "                  interleaved rounds (A/B of two builds on a noisy machine)\n"
        "  BENCH_PROXY_ARG=ARG in the environment adds one option to the proxies' command line\n"
        "  (e.g. --no-splice)\n",
        f);
}

#define MAX_TARGETS 7
#define MAX_RUNS 50

int main(int argc, char **argv)
{
    opt.bin = getenv("REBUNO_BIN") ? getenv("REBUNO_BIN") : "build/rebuno";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--seconds") && more)
            opt.seconds = atof(argv[++i]);
        else if (!strcmp(a, "--bulk-mib") && more)
            opt.bulk_mib = atol(argv[++i]);
        else if (!strcmp(a, "--runs") && more)
            opt.runs = atoi(argv[++i]);
        else if (!strcmp(a, "--conns") && more)
            opt.conns = atoi(argv[++i]);
        else if (!strcmp(a, "--bin") && more)
            opt.bin = argv[++i];
        else if (!strcmp(a, "--compare") && more)
            opt.compare = argv[++i];
        else if (!strcmp(a, "--only") && more)
            opt.only = argv[++i];
        else if (!strcmp(a, "--no-mitm"))
            opt.mitm = false;
        else if (!strcmp(a, "--verbose"))
            opt.verbose = true;
        else if (!strcmp(a, "--quick")) {
            opt.seconds = 1;
            opt.bulk_mib = 64;
            opt.runs = 3;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (opt.seconds <= 0 || opt.bulk_mib <= 0 || opt.conns <= 0 || opt.conns > 256 ||
        opt.runs <= 0 || opt.runs > MAX_RUNS) {
        usage(stderr);
        return 2;
    }
    if (access(opt.bin, X_OK) != 0) die("%s is not executable; build it first", opt.bin);
    if (opt.compare && access(opt.compare, X_OK) != 0)
        die("%s is not executable; build it first", opt.compare);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/rebuno-bench-proxy-XXXXXX", base);
    if (!mkdtemp(tmpdir)) die("mkdtemp: %s", strerror(errno));
    atexit(cleanup);
    srandom((unsigned)time(NULL));

    /* the "real world": a CA and a server certificate for both names and 127.0.0.1 */
    EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *srv_key = EVP_EC_gen("P-256");
    X509 *ca = make_cert("bench upstream CA", ca_key, NULL, ca_key, NULL);
    X509 *srv = make_cert("github.example", srv_key, ca, ca_key,
                          "DNS:github.example,DNS:api.example,IP:127.0.0.1");
    char *upca = path_in("upstream-ca.pem");
    write_pem(upca, ca);
    server_ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(server_ctx, srv);
    SSL_CTX_use_PrivateKey(server_ctx, srv_key);
    int lfd = listen_any();
    int up_port = port_of(lfd);
    pthread_t at;
    pthread_create(&at, NULL, accept_loop, (void *)(intptr_t)lfd);

    char *sbx_ca = path_in("sandbox-ca.pem"), *sbx_ca_b = path_in("sandbox-ca-b.pem");
    pid_t px_pid = 0, cmp_pid = 0;
    int px_port = start_proxy(opt.bin, up_port, sbx_ca, &px_pid), cmp_port = 0;
    if (opt.compare) cmp_port = start_proxy(opt.compare, up_port, sbx_ca_b, &cmp_pid);
    int mitm_port = 0;
    bool mitm = opt.mitm && have_mitmdump() && (!opt.only || !strcmp(opt.only, "mitmproxy"));
    if (mitm) mitm_port = start_mitm(up_port);

    SSL_CTX *up_trust = client_ctx(upca), *sbx_trust = client_ctx(sbx_ca), *none = client_ctx(NULL);
    struct target all[] = {
        {"direct", up_port, "api.example", up_trust, 0, false, false},
        {"passthrough", px_port, "api.example", up_trust, px_pid, false, false},
        {"passthrough-B", cmp_port, "api.example", up_trust, cmp_pid, false, false},
        {"injection", px_port, "github.example", sbx_trust, px_pid, true, false},
        {"mitmproxy", mitm_port, "github.example", none, 0, true, false},
        {"forward", px_port, "fwd.example", sbx_trust, px_pid, false, false},
        {"answer", px_port, "answer.example", sbx_trust, px_pid, false, true},
    };
    struct target targets[MAX_TARGETS];
    int nt = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const struct target *t = &all[i];
        if (!strcmp(t->name, "passthrough-B") && !opt.compare) continue;
        if (!strcmp(t->name, "mitmproxy") && !mitm) continue;
        if (opt.only && strcmp(opt.only, t->name) != 0) continue;
        targets[nt++] = *t;
    }
    if (nt == 0) die("no path named %s", opt.only);
    long long bytes = opt.bulk_mib * 1024 * 1024;
    /* mitmproxy is slow; do not spend minutes on its bulk transfers */
    long long mitm_bytes = bytes > 64ll << 20 ? 64ll << 20 : bytes;
    struct rr_result one[MAX_TARGETS], many[MAX_TARGETS], fresh[MAX_TARGETS];
    static double mbs[MAX_TARGETS][MAX_RUNS], ratio[MAX_TARGETS][MAX_RUNS];
    double med[MAX_TARGETS], lo[MAX_TARGETS], hi[MAX_TARGETS], ratio_med[MAX_TARGETS];
    double pcpu[MAX_TARGETS] = {0}, scpu[MAX_TARGETS] = {0}, moved[MAX_TARGETS] = {0};

    printf("egress proxy benchmark: bulk %ld MiB x %d interleaved rounds (median), %.1f s per "
           "rate point, %d connections, %ld CPUs shared by client, proxy and upstream\n",
           opt.bulk_mib, opt.runs, opt.seconds, opt.conns, sysconf(_SC_NPROCESSORS_ONLN));
    if (!mitm && (!opt.only || !strcmp(opt.only, "mitmproxy")))
        printf("(mitmproxy: %s)\n", opt.mitm ? "mitmdump not installed" : "skipped");

    /* Bulk: one unmeasured warm-up transfer per path, then rounds in which every path moves
     * the same body once, the starting path rotating, so that noise from other work on the
     * machine falls on all paths alike. Ratios are taken within a round, then the median. */
    long cred0 = atomic_load(&up_with_cred);
    for (int i = 0; i < nt; i++) {
        double dummy = 0;
        if (targets[i].answered) continue;
        long long b = strcmp(targets[i].name, "mitmproxy") ? bytes : mitm_bytes;
        bulk_once(&targets[i], b / 4 ? b / 4 : b, &dummy, &dummy);
    }
    for (int r = 0; r < opt.runs; r++)
        for (int k = 0; k < nt; k++) {
            int i = (k + r) % nt;
            if (targets[i].answered) continue;
            long long b = strcmp(targets[i].name, "mitmproxy") ? bytes : mitm_bytes;
            mbs[i][r] = bulk_once(&targets[i], b, &pcpu[i], &scpu[i]);
            moved[i] += (double)b;
        }
    for (int i = 0; i < nt; i++) {
        for (int r = 0; r < opt.runs; r++)
            ratio[i][r] = mbs[0][r] > 0 ? mbs[i][r] / mbs[0][r] : 0;
        ratio_med[i] = median(ratio[i], opt.runs);
        med[i] = median(mbs[i], opt.runs); /* sorts mbs[i] */
        lo[i] = mbs[i][0];
        hi[i] = mbs[i][opt.runs - 1];
    }
    long bulk_cred = atomic_load(&up_with_cred) - cred0;

    printf("\n%-14s %10s %13s %8s %10s %10s\n", "path", "bulk MB/s", "(min-max)", "vs first",
           "proxy CPU", "endpoints");
    printf("%-14s %10s %13s %8s %10s %10s\n", "", "median", "", "median", "ms/GB", "CPU ms/GB");
    for (int i = 0; i < nt; i++) {
        char range[32], cpu[16] = "-";
        if (targets[i].answered) {
            printf("%-14s %10s %13s %8s %10s %10s\n", targets[i].name, "-", "", "", "-", "-");
            continue;
        }
        snprintf(range, sizeof range, "(%.0f-%.0f)", lo[i], hi[i]);
        if (targets[i].pid) snprintf(cpu, sizeof cpu, "%.0f", pcpu[i] * 1e3 / (moved[i] / 1e9));
        printf("%-14s %10.0f %13s %7.0f%% %10s %10.0f\n", targets[i].name, med[i], range,
               100 * ratio_med[i], cpu, scpu[i] * 1e3 / (moved[i] / 1e9));
    }
    fflush(stdout);

    printf("\n%-14s %12s %9s %9s %12s %12s\n", "path", "1-conn req/s", "p50 us", "p99 us",
           "N-conn req/s", "new-conn /s");
    for (int i = 0; i < nt; i++) {
        const struct target *t = &targets[i];
        long before = atomic_load(&up_with_cred), reqs_before = atomic_load(&up_requests);
        one[i] = run_rr(t, 1, false, opt.seconds);
        many[i] = run_rr(t, opt.conns, false, opt.seconds);
        fresh[i] = run_rr(t, opt.conns < 4 ? opt.conns : 4, true, opt.seconds);
        long cred = atomic_load(&up_with_cred) - before,
             reqs = atomic_load(&up_requests) - reqs_before;
        if (t->injecting && cred != reqs)
            die("%s: only %ld of %ld requests carried the header", t->name, cred, reqs);
        if (!t->injecting && cred != 0) die("%s: a header was injected", t->name);
        if (t->answered && reqs != 0) die("%s: %ld requests reached the upstream", t->name, reqs);
        if (!t->answered && reqs == 0) die("%s: no request reached the upstream", t->name);
        printf("%-14s %12.0f %9.0f %9.0f %12.0f %12.0f\n", t->name, one[i].rps, one[i].p50_us,
               one[i].p99_us, many[i].rps, fresh[i].rps);
        fflush(stdout);
    }
    long injected_bulk = 0;
    for (int i = 0; i < nt; i++)
        if (targets[i].injecting) injected_bulk += opt.runs + 1;
    if (bulk_cred != injected_bulk)
        die("bulk: %ld of %ld requests on injecting paths carried the header", bulk_cred,
            injected_bulk);
    if (opt.only) return 0;

    int P = 1, I = opt.compare ? 3 : 2, M = I + 1;
    printf("\npassthrough vs direct: bulk %.0f%% (median of per-round ratios), 1-conn req/s "
           "%.0f%%, N-conn req/s %.0f%%, new connections %.0f%%; added latency p50 %+.0f us, "
           "p99 %+.0f us\n",
           100 * ratio_med[P], 100 * one[P].rps / one[0].rps, 100 * many[P].rps / many[0].rps,
           100 * fresh[P].rps / fresh[0].rps, one[P].p50_us - one[0].p50_us,
           one[P].p99_us - one[0].p99_us);
    if (opt.compare)
        printf("passthrough-B vs direct: bulk %.0f%%, 1-conn req/s %.0f%%, N-conn req/s %.0f%%, "
               "new connections %.0f%%\n",
               100 * ratio_med[2], 100 * one[2].rps / one[0].rps, 100 * many[2].rps / many[0].rps,
               100 * fresh[2].rps / fresh[0].rps);
    printf("injection vs direct:   bulk %.0f%%, 1-conn req/s %.0f%%, N-conn req/s %.0f%%, "
           "new connections %.0f%%; added latency p50 %+.0f us, p99 %+.0f us\n",
           100 * ratio_med[I], 100 * one[I].rps / one[0].rps, 100 * many[I].rps / many[0].rps,
           100 * fresh[I].rps / fresh[0].rps, one[I].p50_us - one[0].p50_us,
           one[I].p99_us - one[0].p99_us);
    if (mitm)
        printf("injection vs mitmproxy: bulk %.1fx, 1-conn req/s %.1fx, N-conn req/s %.1fx, "
               "new connections %.1fx\n",
               med[I] / med[M], one[I].rps / one[M].rps, many[I].rps / many[M].rps,
               fresh[I].rps / fresh[M].rps);
    for (int i = 0; i < nt; i++) {
        if (strcmp(targets[i].name, "forward") && strcmp(targets[i].name, "answer")) continue;
        printf("%-6s vs injection: 1-conn req/s %.0f%%, N-conn req/s %.0f%%, new connections "
               "%.0f%%; added latency p50 %+.0f us\n",
               targets[i].name, 100 * one[i].rps / one[I].rps, 100 * many[i].rps / many[I].rps,
               100 * fresh[i].rps / fresh[I].rps, one[i].p50_us - one[I].p50_us);
    }
    printf("every injected request carried the header exactly once (%ld checked upstream)\n",
           (long)atomic_load(&up_with_cred));
    printf("bench.proxy.bulk_mbs.direct=%.0f bench.proxy.bulk_mbs.passthrough=%.0f "
           "bench.proxy.bulk_ratio.passthrough=%.2f bench.proxy.cpu_ms_per_gb.passthrough=%.0f\n",
           med[0], med[P], ratio_med[P], pcpu[P] * 1e3 / (moved[P] / 1e9));
    free(upca);
    free(sbx_ca);
    free(sbx_ca_b);
    return 0;
}
