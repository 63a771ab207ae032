/*
 * bench/sandbox.c - sandboxd against bubblewrap on this machine.
 *
 *   make build/rebuno build/bench/sandbox && sudo build/bench/sandbox [--bin build/rebuno]
 *        [--state-dir DIR] [--iterations N] [--idle N]
 *
 * Starts `rebuno sandboxd` on a free loopback port with a fresh state folder and
 * measures, over HTTP with one keep-alive connection (what a local client sees):
 *   - create -> first output: POST /v1/sandboxes, then run `echo ready` to completion;
 *   - command round trip: `true` to completion in a running sandbox;
 *   - pause and resume latency, idle and with 256 MiB resident in the sandbox;
 *   - host memory per idle sandbox: MemAvailable drop and init PSS over N sandboxes;
 *   - snapshots (issue 6): snapshot of a running sandbox with a 10,000-file workspace
 *     after changing 1 file and after changing 1,000, fork, create-from-snapshot,
 *     and the same with a 100-file workspace to show the cost is flat in its size
 *     (--snapshots-only runs just these).
 * Beside each, bwrap running the same command on the same machine (a new bwrap per
 * command: it has no running sandbox to talk to, no pause and no resume).
 * Prints median / p90 / min in milliseconds. Needs root (sandboxd does).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n, const char *note)
{
    if (n <= 0) {
        printf("  %-44s %s\n", what, note ? note : "n/a");
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("  %-44s median %7.2f  p90 %7.2f  min %7.2f ms%s%s\n", what, v[n / 2],
           v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1], v[0], note ? "  " : "", note ? note : "");
}

/* ---- a tiny keep-alive HTTP/1.1 client ---- */

static int conn_fd = -1, port;
static char resp[1 << 20];
static char resp_hdrs[8192]; /* the last reply's headers */

static int http_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Returns the status; the body is in resp (NUL-terminated). */
static int http(const char *method, const char *path, const char *body)
{
    if (conn_fd < 0) conn_fd = http_connect();
    if (conn_fd < 0) return -1;
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, body ? strlen(body) : 0, body ? body : "");
    if (write(conn_fd, req, (size_t)n) != n) return -1;
    size_t got = 0;
    long clen = -1;
    char *hdr_end = NULL;
    for (;;) {
        ssize_t r = read(conn_fd, resp + got, sizeof resp - 1 - got);
        if (r <= 0) return -1;
        got += (size_t)r;
        resp[got] = '\0';
        if (!hdr_end && (hdr_end = strstr(resp, "\r\n\r\n"))) {
            char *cl = strcasestr(resp, "Content-Length:");
            clen = cl && cl < hdr_end ? strtol(cl + 15, NULL, 10) : 0;
        }
        if (hdr_end && (long)(got - (size_t)(hdr_end + 4 - resp)) >= clen) break;
    }
    int status = atoi(resp + 9);
    size_t hl = (size_t)(hdr_end - resp);
    if (hl >= sizeof resp_hdrs) hl = sizeof resp_hdrs - 1;
    memcpy(resp_hdrs, resp, hl);
    resp_hdrs[hl] = '\0';
    memmove(resp, hdr_end + 4, (size_t)clen);
    resp[clen] = '\0';
    return status;
}

static int must(const char *method, const char *path, const char *body)
{
    int st = http(method, path, body);
    if (st < 200 || st > 299) {
        fprintf(stderr, "bench: %s %s -> %d %s\n", method, path, st, resp);
        exit(1);
    }
    return st;
}

/* ---- helpers ---- */

static long meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) v = strtol(line + strlen(key), NULL, 10);
    if (f) fclose(f);
    return v;
}

static long pss_kb(int pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen(p, "re");
    long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Pss:", 4)) v = strtol(line + 4, NULL, 10);
    if (f) fclose(f);
    return v;
}

static long cg_usage_kb;

/* PSS of the processes in a sandbox's cgroup ("v1:/parent/id" from the API); adds the
 * group's memory.usage_in_bytes (user and kernel memory charged to it) to cg_usage_kb. */
static long sandbox_pss_kb(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sandboxes/%.200s", name);
    must("GET", path, NULL);
    char *cg = strstr(resp, "\"cgroup\":\"v1:");
    if (!cg) return -1;
    cg += 13;
    char rel[256];
    size_t n = strcspn(cg, "\"");
    snprintf(rel, sizeof rel, "%.*s", (int)n, cg);
    char procs[600];
    snprintf(procs, sizeof procs, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", rel);
    FILE *u = fopen(procs, "re");
    long long bytes = 0;
    if (u && fscanf(u, "%lld", &bytes) == 1) cg_usage_kb += (long)(bytes / 1024);
    if (u) fclose(u);
    snprintf(procs, sizeof procs, "/sys/fs/cgroup/pids%s/cgroup.procs", rel);
    FILE *f = fopen(procs, "re");
    long total = 0;
    int pid;
    while (f && fscanf(f, "%d", &pid) == 1)
        total += pss_kb(pid);
    if (f) fclose(f);
    return total;
}

static const char *bwrap_args[] = {
    "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64",
    "/lib64", "--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev", "--tmpfs",
    "/tmp", "--tmpfs", "/root", NULL};

/* Run argv under bwrap; returns ms until its first output byte (wait for exit too). */
static double bwrap_first_output(const char *const *cmd)
{
    int p[2];
    if (pipe(p) < 0) return -1;
    const char *argv[64];
    int n = 0;
    for (const char **a = bwrap_args; *a; a++) argv[n++] = *a;
    for (const char *const *a = cmd; *a; a++) argv[n++] = *a;
    argv[n] = NULL;
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execvp("bwrap", (char **)argv);
        _exit(127);
    }
    close(p[1]);
    char c;
    double first = -1;
    while (read(p[0], &c, 1) == 1)
        if (first < 0) first = now_ms() - t0;
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    double end = now_ms() - t0;
    return first >= 0 ? first : end;
}

/* A header of the last reply as a number (-1 when absent). */
static double hdr_num(const char *name)
{
    char *h = strcasestr(resp_hdrs, name);
    return h ? strtod(h + strlen(name) + 1, NULL) : -1;
}

/* The "id" of the JSON object in resp. */
static void resp_id(char *out, size_t n)
{
    char *p = strstr(resp, "\"id\":\"");
    out[0] = '\0';
    if (p) snprintf(out, n, "%.*s", (int)(strcspn(p + 6, "\"") & 63), p + 6);
}

/* Snapshot, fork and restore timings for a workspace of `files` files. */
static void bench_snapshots(int files, int iters)
{
    char body[1024], path[256], id[64];
    double snap1[1000], frozen1[1000], snapk[1000], fork[1000], restore[1000], restore_cold[1000];
    int n1 = 0, nk = 0, nf = 0, nr = 0, nc = 0;
    snprintf(body, sizeof body, "{\"name\":\"ws%d\",\"timeout_ms\":0}", files);
    must("POST", "/v1/sandboxes", body);
    snprintf(path, sizeof path, "/v1/sandboxes/ws%d/commands", files);
    snprintf(body, sizeof body,
             "{\"cmd\":\"python3\",\"args\":[\"-c\",\"import os\\nfor i in range(%d):\\n"
             "    d='/root/ws/d%%d' %% (i %% 100)\\n    os.makedirs(d, exist_ok=True)\\n"
             "    open(d + '/f%%d' %% i, 'w').write('x' * 100)\\n\"],\"wait\":true}",
             files);
    must("POST", path, body);
    char snaps[64][64];
    int ns = 0;
    id[0] = '\0';
    for (int i = 0; i < iters && i < 1000; i++) {
        /* change one file, then snapshot the running sandbox */
        snprintf(body, sizeof body,
                 "{\"cmd\":\"bash\",\"args\":[\"-c\",\"echo %d >> /root/ws/d0/f0\"],"
                 "\"wait\":true}", i);
        must("POST", path, body);
        snprintf(body, sizeof body, "/v1/sandboxes/ws%d/snapshots", files);
        double t0 = now_ms();
        must("POST", body, "{}");
        snap1[n1] = now_ms() - t0;
        frozen1[n1++] = hdr_num("X-Rebuno-Frozen-Ms");
        resp_id(id, sizeof id);
        if (ns < 64) snprintf(snaps[ns++], sizeof snaps[0], "%.60s", id);
    }
    for (int i = 0; i < iters / 3 + 2 && i < 1000; i++) {
        snprintf(body, sizeof body,
                 "{\"cmd\":\"python3\",\"args\":[\"-c\",\"for i in range(%d):\\n"
                 "    open('/root/ws/d%%d/f%%d' %% (i %% 100, i), 'a').write('y')\\n\"],"
                 "\"wait\":true}",
                 files < 1000 ? files : 1000);
        must("POST", path, body);
        snprintf(body, sizeof body, "/v1/sandboxes/ws%d/snapshots", files);
        double t0 = now_ms();
        must("POST", body, "{}");
        snapk[nk++] = now_ms() - t0;
    }
    for (int i = 0; i < iters && i < 1000; i++) {
        snprintf(body, sizeof body, "{\"name\":\"fk%d-%d\",\"timeout_ms\":0}", files, i);
        snprintf(path, sizeof path, "/v1/sandboxes/ws%d/fork", files);
        double t0 = now_ms();
        must("POST", path, body);
        fork[nf++] = now_ms() - t0;
        snprintf(path, sizeof path, "/v1/sandboxes/fk%d-%d", files, i);
        must("DELETE", path, NULL);
    }
    for (int i = 0; i < iters && i < 1000 && ns > 0; i++) {
        for (int start = 0; start < 2; start++) {
            snprintf(body, sizeof body,
                     "{\"name\":\"rs%d-%d-%d\",\"timeout_ms\":0,\"start\":%s,"
                     "\"source\":{\"type\":\"snapshot\",\"snapshot_id\":\"%s\"}}",
                     files, i, start, start ? "true" : "false", snaps[i % ns]);
            double t0 = now_ms();
            must("POST", "/v1/sandboxes", body);
            (start ? restore : restore_cold)[start ? nr++ : nc++] = now_ms() - t0;
            snprintf(path, sizeof path, "/v1/sandboxes/rs%d-%d-%d", files, i, start);
            must("DELETE", path, NULL);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "snapshot, %d files, 1 changed", files);
    report(what, snap1, n1, files >= 10000 ? "target <= 20 ms" : NULL);
    snprintf(what, sizeof what, "  of which the sandbox was frozen");
    report(what, frozen1, n1, NULL);
    snprintf(what, sizeof what, "snapshot, %d files, %d changed", files, files < 1000 ? files : 1000);
    report(what, snapk, nk, NULL);
    snprintf(what, sizeof what, "fork (running), %d files", files);
    report(what, fork, nf, files >= 10000 ? "target <= 30 ms" : NULL);
    snprintf(what, sizeof what, "create from snapshot, %d files", files);
    report(what, restore, nr, "with its first session");
    snprintf(what, sizeof what, "create from snapshot, %d files, start=false", files);
    report(what, restore_cold, nc, "the clone alone");
    for (int i = 0; i < ns; i++) {
        snprintf(path, sizeof path, "/v1/snapshots/%.60s", snaps[i]);
        http("DELETE", path, NULL);
    }
    snprintf(path, sizeof path, "/v1/sandboxes/ws%d", files);
    must("DELETE", path, NULL);
}

static pid_t start_sandboxd(const char *bin, const char *state)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    socklen_t len = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &len);
    port = ntohs(a.sin_port);
    close(s);
    char listen[64], log[300];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%.250s.log", state);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, "sandboxd", "--listen", listen, "--state-dir", state, "--log-level",
              "warn", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        usleep(10000);
        conn_fd = -1;
        if (http("GET", "/v1/health", NULL) == 200) return pid;
        if (conn_fd >= 0) close(conn_fd);
        conn_fd = -1;
    }
    fprintf(stderr, "bench: sandboxd did not start (see %s)\n", log);
    kill(pid, SIGKILL);
    exit(1);
}

int main(int argc, char **argv)
{
    const char *bin = "build/rebuno", *state = NULL;
    int iters = 30, idle = 20;
    bool snapshots_only = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--snapshots-only")) {
            snapshots_only = true;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
            argc--;
        }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bin")) bin = argv[i + 1];
        else if (!strcmp(argv[i], "--state-dir")) state = argv[i + 1];
        else if (!strcmp(argv[i], "--iterations")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--idle")) idle = atoi(argv[i + 1]);
    }
    if (iters < 3 || iters > 1000 || idle < 1 || idle > 500) {
        fprintf(stderr, "usage: %s [--bin B] [--state-dir D] [--iterations 3-1000] [--idle 1-500]\n",
                argv[0]);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "bench: run as root (sandboxd needs it)\n");
        return 2;
    }
    char tmp[128];
    if (!state) {
        snprintf(tmp, sizeof tmp, "/tmp/rebuno-bench-sandbox-%d", (int)getpid());
        state = tmp;
    }
    signal(SIGPIPE, SIG_IGN);
    pid_t d = start_sandboxd(bin, state);
    double *v = calloc((size_t)(iters * 10 + 1000), sizeof *v);
    char path[256], body[512];
    printf("sandboxd vs bwrap on this machine (%d iterations; state in %s)\n\n", iters, state);
    if (snapshots_only) goto snapshots;

    /* create -> first output */
    int n = 0;
    for (int i = 0; i < iters; i++) {
        snprintf(body, sizeof body, "{\"name\":\"b%d\",\"timeout_ms\":0}", i);
        double t0 = now_ms();
        must("POST", "/v1/sandboxes", body);
        snprintf(path, sizeof path, "/v1/sandboxes/b%d/commands", i);
        must("POST", path, "{\"cmd\":\"echo\",\"args\":[\"ready\"],\"wait\":true}");
        v[n++] = now_ms() - t0;
        if (!strstr(resp, "ready")) fprintf(stderr, "bench: unexpected output: %s\n", resp);
    }
    report("create -> first output (sandboxd, HTTP)", v, n, NULL);
    const char *echo[] = {"echo", "ready", NULL};
    n = 0;
    for (int i = 0; i < iters; i++) v[n++] = bwrap_first_output(echo);
    report("first output (bwrap --unshare-all, echo)", v, n, NULL);

    /* command round trip */
    n = 0;
    for (int i = 0; i < iters * 10; i++) {
        double t0 = now_ms();
        must("POST", "/v1/sandboxes/b0/commands", "{\"cmd\":\"true\",\"wait\":true}");
        v[n++] = now_ms() - t0;
    }
    report("command round trip `true` (sandboxd)", v, n, "target <= 2 ms");
    const char *tru[] = {"true", NULL};
    n = 0;
    for (int i = 0; i < iters; i++) v[n++] = bwrap_first_output(tru);
    report("`true` in a new bwrap each time", v, n, NULL);

    /* pause / resume, idle and with 256 MiB resident */
    for (int loaded = 0; loaded < 2; loaded++) {
        const char *name = loaded ? "b1" : "b0";
        if (loaded) {
            must("POST", "/v1/sandboxes/b1/commands",
                 "{\"cmd\":\"python3\",\"args\":[\"-c\",\"import time; x=bytearray(256<<20); "
                 "x[::4096]=b'1'*(len(x)//4096); print('ok',flush=True); time.sleep(3600)\"]}");
            usleep(1500000);
        }
        double p[1000], r[1000];
        int k = 0;
        for (int i = 0; i < iters && k < 1000; i++, k++) {
            snprintf(path, sizeof path, "/v1/sandboxes/%s/pause", name);
            double t0 = now_ms();
            must("POST", path, "{}");
            p[k] = now_ms() - t0;
            snprintf(path, sizeof path, "/v1/sandboxes/%s/resume", name);
            t0 = now_ms();
            must("POST", path, "{}");
            r[k] = now_ms() - t0;
        }
        report(loaded ? "pause, 256 MiB resident" : "pause, idle", p, k, "target <= 10 ms");
        report(loaded ? "resume, 256 MiB resident" : "resume, idle", r, k, "target <= 10 ms");
    }
    report("pause / resume (bwrap)", v, 0, "n/a: bwrap has no pause");

    /* idle memory: stop the bench sandboxes first so only idle ones count */
    for (int i = 0; i < iters; i++) {
        snprintf(path, sizeof path, "/v1/sandboxes/b%d", i);
        must("DELETE", path, NULL);
    }
    sleep(1);
    long before = meminfo_kb("MemAvailable:");
    for (int i = 0; i < idle; i++) {
        snprintf(body, sizeof body, "{\"name\":\"idle%d\",\"timeout_ms\":0}", i);
        must("POST", "/v1/sandboxes", body);
    }
    sleep(1);
    long after = meminfo_kb("MemAvailable:");
    long pss = 0;
    for (int i = 0; i < idle; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "idle%d", i);
        pss += sandbox_pss_kb(nm);
    }
    printf("  %-44s %7.2f MiB (MemAvailable drop / %d)  target <= 3 MiB\n",
           "host memory per idle sandbox", (before - after) / 1024.0 / idle, idle);
    printf("  %-44s %7.2f MiB init PSS, %.2f MiB charged to its cgroup\n", "  of which",
           pss / 1024.0 / idle, cg_usage_kb / 1024.0 / idle);
    /* bwrap: N idle `sleep`s */
    before = meminfo_kb("MemAvailable:");
    pid_t kids[500];
    for (int i = 0; i < idle; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            const char *argv2[64];
            int m = 0;
            for (const char **a = bwrap_args; *a; a++) argv2[m++] = *a;
            argv2[m++] = "sleep";
            argv2[m++] = "3600";
            argv2[m] = NULL;
            int dn = open("/dev/null", O_RDWR);
            dup2(dn, 0);
            dup2(dn, 1);
            execvp("bwrap", (char **)argv2);
            _exit(127);
        }
    }
    sleep(1);
    after = meminfo_kb("MemAvailable:");
    printf("  %-44s %7.2f MiB (MemAvailable drop / %d)\n", "host memory per idle bwrap `sleep`",
           (before - after) / 1024.0 / idle, idle);
    for (int i = 0; i < idle; i++) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], NULL, 0);
    }
    for (int i = 0; i < idle; i++) {
        snprintf(path, sizeof path, "/v1/sandboxes/idle%d", i);
        must("DELETE", path, NULL);
    }
    printf("\n(MemAvailable is noisy on a shared VM; PSS is the init processes only, kernel\n"
           " objects such as the network namespace are in the MemAvailable figure.)\n");
snapshots:
    printf("\nsnapshots, forks and restores (store: btrfs loop image unless the log says "
           "otherwise)\n");
    bench_snapshots(100, iters);
    bench_snapshots(10000, iters);
    kill(d, SIGTERM);
    waitpid(d, NULL, 0);
    free(v);
    return 0;
}
