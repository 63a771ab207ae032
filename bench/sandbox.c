/*
 * bench/sandbox.c - sandboxd against bubblewrap on this machine.
 *
 *   make build/rebuno build/bench/sandbox && sudo build/bench/sandbox [--bin build/rebuno]
 *        [--state-dir DIR] [--iterations N] [--idle N] [--snapshots-only] [--help]
 *
 * Starts `rebuno sandboxd` on a free loopback port with a fresh state folder and
 * measures, over HTTP with one keep-alive connection (what a local client sees):
 *   - create -> first output: POST /v1/sandboxes, then run `echo ready` to completion;
 *     on the built-in host image, and on an imported self-contained 3-layer OCI image
 *     (bench/make_image.py writes it; issue 14 aims within 10% of host);
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
 *
 * Leaves nothing behind, on every way out (return, exit(1) on a failed request,
 * Ctrl-C, SIGTERM, even SIGKILL): a janitor process, forked first, waits for this one
 * to end (EOF on a pipe), stops sandboxd (SIGTERM through a pidfd, SIGKILL after
 * JANITOR_WAIT_S), unmounts what sandboxd left under the state folder, detaches loop
 * devices backed by files in it (the btrfs store image), removes the daemon's cgroups
 * and, when the folder is the default /tmp/rebuno-bench-sandbox-PID rather than a
 * --state-dir, removes it and its log. Normal exits wait for the janitor, so the folder
 * is gone when the benchmark returns.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/loop.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/local_auth.h"

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

/* Prints one figure's median, p90 and min; returns the median (0 without samples). */
static double report(const char *what, double *v, int n, const char *note)
{
    if (n <= 0) {
        printf("  %-44s %s\n", what, note ? note : "n/a");
        return 0;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    printf("  %-44s median %7.2f  p90 %7.2f  min %7.2f ms%s%s\n", what, v[n / 2],
           v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1], v[0], note ? "  " : "", note ? note : "");
    return v[n / 2];
}

/* ---- a tiny keep-alive HTTP/1.1 client ---- */

static int conn_fd = -1, port;
static char auth[96]; /* "Authorization: Bearer <sandboxd's local token>\r\n" once it is up */
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
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, path, auth, body ? strlen(body) : 0, body ? body : "");
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

/* ---- leaving nothing behind ---- */

#define JANITOR_WAIT_S 120 /* for sandboxd to stop its sessions and unmount its store */

static pid_t janitor = -1, daemon_pid = -1;
static int janitor_fd = -1; /* write end: "PID\n" when sandboxd starts, "0\n" once reaped */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* The file system side of the clean-up (the daemon is gone): mounts under state (the
 * btrfs store), loop devices backed by files in it, the daemon's cgroups, then, with
 * remove, the folder and its log. */
static void clean_state(const char *state, bool remove)
{
    char real[PATH_MAX];
    if (!realpath(state, real)) snprintf(real, sizeof real, "%s", state);
    size_t rl = strlen(real);
    /* mounts, innermost (latest) first */
    char *mnts[64];
    int nm = 0;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    while (f && fgets(line, sizeof line, f) && nm < 64) {
        char mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1) continue;
        if (!strncmp(mp, real, rl) && (mp[rl] == '\0' || mp[rl] == '/')) mnts[nm++] = strdup(mp);
    }
    if (f) fclose(f);
    for (int i = nm - 1; i >= 0; i--) {
        if (mnts[i] && umount2(mnts[i], MNT_DETACH) < 0)
            fprintf(stderr, "bench: cannot unmount %s: %s\n", mnts[i], strerror(errno));
        free(mnts[i]);
    }
    /* loop devices (with autoclear the lazy unmount frees them once the file system is) */
    for (int i = 0; i < 256; i++) {
        char p[96], b[PATH_MAX];
        snprintf(p, sizeof p, "/sys/block/loop%d/loop/backing_file", i);
        FILE *bf = fopen(p, "re");
        if (!bf) continue;
        bool mine = fgets(b, sizeof b, bf) && !strncmp(b, real, rl) && b[rl] == '/';
        fclose(bf);
        if (!mine) continue;
        snprintf(p, sizeof p, "/dev/loop%d", i);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && ioctl(fd, LOOP_CLR_FD, 0) < 0 && errno != ENXIO)
            fprintf(stderr, "bench: cannot detach %s: %s\n", p, strerror(errno));
        if (fd >= 0) close(fd);
    }
    /* cgroups: sandboxd's parent group is rebuno-<fnv1a(state) & 48 bits> (sandbox.c) */
    uint64_t h = 1469598103934665603ull;
    for (const char *c = real; *c; c++) {
        h ^= (unsigned char)*c;
        h *= 1099511628211ull;
    }
    static const char *const hier[] = {"memory", "pids", "cpu", "cpuacct", "freezer", "unified",
                                       ""};
    for (size_t i = 0; i < sizeof hier / sizeof hier[0]; i++) {
        char g[256];
        snprintf(g, sizeof g, "/sys/fs/cgroup/%s%srebuno-%012llx", hier[i], *hier[i] ? "/" : "",
                 (unsigned long long)(h & 0xffffffffffffull));
        DIR *d = opendir(g);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_type == DT_DIR && de->d_name[0] != '.') {
                char sub[600];
                snprintf(sub, sizeof sub, "%s/%s", g, de->d_name);
                rmdir(sub);
            }
        closedir(d);
        rmdir(g);
    }
    if (!remove) return;
    nftw(real, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    char log[PATH_MAX + 8];
    snprintf(log, sizeof log, "%s.log", state);
    unlink(log);
    if (access(real, F_OK) == 0)
        fprintf(stderr, "bench: could not remove all of %s\n", real);
}

static void janitor_main(int rfd, const char *state, bool remove)
{
    signal(SIGINT, SIG_IGN); /* Ctrl-C reaches the whole process group */
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    int pidfd = -1;
    char b[64];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(rfd, b + got, sizeof b - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* the benchmark is gone, however it went */
        got += (size_t)n;
        b[got] = '\0';
        char *nl;
        while ((nl = strchr(b, '\n'))) {
            *nl = '\0';
            long pid = strtol(b, NULL, 10);
            if (pidfd >= 0) close(pidfd);
            pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
            memmove(b, nl + 1, strlen(nl + 1) + 1);
            got = strlen(b);
        }
        if (got >= sizeof b - 1) got = 0;
    }
    if (pidfd >= 0) {
        struct pollfd pf = {pidfd, POLLIN, 0};
        if (poll(&pf, 1, 0) == 0) {
            syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, NULL, 0);
            if (poll(&pf, 1, JANITOR_WAIT_S * 1000) == 0) {
                fprintf(stderr, "bench: sandboxd did not stop in %d s: killing it\n",
                        JANITOR_WAIT_S);
                syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                poll(&pf, 1, 10000);
            }
        }
        close(pidfd);
    }
    clean_state(state, remove);
    _exit(0);
}

static void start_janitor(const char *state, bool remove)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        perror("bench: pipe");
        exit(1);
    }
    fflush(NULL);
    janitor = fork();
    if (janitor < 0) {
        perror("bench: fork");
        exit(1);
    }
    if (janitor == 0) {
        close(p[1]);
        janitor_main(p[0], state, remove);
    }
    close(p[0]);
    janitor_fd = p[1];
}

static void tell_janitor(long pid)
{
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", pid);
    if (janitor_fd >= 0 && write(janitor_fd, b, (size_t)n) != n)
        fprintf(stderr, "bench: cannot reach the janitor\n");
}

/* atexit: stop sandboxd, then hand over to the janitor and wait for it. */
static void finish(void)
{
    fflush(NULL);
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, NULL, 0);
        daemon_pid = -1;
        tell_janitor(0);
    }
    if (janitor_fd >= 0) {
        close(janitor_fd);
        janitor_fd = -1;
    }
    if (janitor > 0) {
        while (waitpid(janitor, NULL, 0) < 0 && errno == EINTR) {
        }
        janitor = -1;
    }
}

/* The last lines of sandboxd's log on stderr (the log is removed with the folder). */
static void show_log(const char *log)
{
    int fd = open(log, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    off_t end = lseek(fd, 0, SEEK_END);
    char b[4096];
    ssize_t n = pread(fd, b, sizeof b, end > (off_t)sizeof b ? end - (off_t)sizeof b : 0);
    if (n > 0) fwrite(b, 1, (size_t)n, stderr);
    close(fd);
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
    daemon_pid = pid;
    tell_janitor(pid);
    for (int i = 0; i < 500; i++) {
        usleep(10000);
        conn_fd = -1;
        if (http("GET", "/v1/health", NULL) == 200) {
            /* found as any client of this user finds it (none from an older sandboxd) */
            char url[80], file[PATH_MAX];
            struct local_auth_found f;
            snprintf(url, sizeof url, "http://%s", listen);
            snprintf(file, sizeof file, "%s/%s", state, LOCAL_AUTH_FILE);
            if (local_auth_find(url, file, &f) == 0)
                snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", f.token);
            return pid;
        }
        if (conn_fd >= 0) close(conn_fd);
        conn_fd = -1;
    }
    fprintf(stderr, "bench: sandboxd did not start; the end of its log (%s):\n", log);
    show_log(log);
    exit(1); /* finish(): stops it, the janitor cleans up */
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [--bin B] [--state-dir D] [--iterations 3-1000] [--idle 1-500]\n"
            "       [--snapshots-only] [--help]\n\n"
            "sandboxd against bwrap on this machine (as root): create -> first output, command\n"
            "round trip, pause/resume, idle memory per sandbox, snapshots and forks.\n\n"
            "  --bin B           the rebuno binary (default build/rebuno)\n"
            "  --state-dir D     sandboxd's state folder, kept afterwards (default: a fresh\n"
            "                    /tmp/rebuno-bench-sandbox-PID, removed on every exit)\n"
            "  --iterations N    samples per figure (default 30)\n"
            "  --idle N          idle sandboxes for the memory figure (default 20)\n"
            "  --snapshots-only  only the snapshot, fork and restore figures\n",
            argv0);
}

static int int_arg(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || !*s || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *bin = "build/rebuno", *state = NULL;
    int iters = 30, idle = 20;
    bool snapshots_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        }
        if (!strcmp(a, "--snapshots-only")) {
            snapshots_only = true;
            continue;
        }
        bool ok = v != NULL;
        if (ok && !strcmp(a, "--bin")) bin = v;
        else if (ok && !strcmp(a, "--state-dir")) state = v;
        else if (ok && !strcmp(a, "--iterations")) ok = int_arg(v, &iters) == 0;
        else if (ok && !strcmp(a, "--idle")) ok = int_arg(v, &idle) == 0;
        else ok = false;
        if (!ok) {
            fprintf(stderr, "bench: bad or incomplete option %s\n", a);
            usage(stderr, argv[0]);
            return 2;
        }
        i++;
    }
    if (iters < 3 || iters > 1000 || idle < 1 || idle > 500) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "bench: run as root (sandboxd needs it)\n");
        return 2;
    }
    char tmp[128];
    bool own_state = !state;
    if (!state) {
        snprintf(tmp, sizeof tmp, "/tmp/rebuno-bench-sandbox-%d", (int)getpid());
        state = tmp;
    }
    signal(SIGPIPE, SIG_IGN);
    start_janitor(state, own_state);
    atexit(finish);
    start_sandboxd(bin, state);
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
    double create_ms = report("create -> first output (sandboxd, HTTP)", v, n, NULL);
    const char *echo[] = {"echo", "ready", NULL};
    n = 0;
    for (int i = 0; i < iters; i++) v[n++] = bwrap_first_output(echo);
    double bwrap_ms = report("first output (bwrap --unshare-all, echo)", v, n, NULL);
    if (bwrap_ms > 0)
        printf("  %-44s %7.2fx of bwrap (medians)  target <= 1.5x: %s\n", "create -> first output",
               create_ms / bwrap_ms, create_ms <= 1.5 * bwrap_ms ? "met" : "MISSED");

    /* the same on an imported, self-contained 3-layer image (issue 14) */
    char layout[200];
    snprintf(layout, sizeof layout, "%s-image", state);
    pid_t mk = fork();
    if (mk == 0) {
        execl("/usr/bin/python3", "python3", "bench/make_image.py", layout, (char *)NULL);
        _exit(127);
    }
    int mst = 0;
    waitpid(mk, &mst, 0);
    if (WIFEXITED(mst) && WEXITSTATUS(mst) == 0) {
        snprintf(body, sizeof body,
                 "{\"type\":\"oci-layout\",\"path\":\"%s\",\"ref\":\"bench/multi:1\"}", layout);
        double ti = now_ms();
        must("POST", "/v1/images", body);
        printf("  %-44s %7.2f ms\n", "import of the 3-layer image (once)", now_ms() - ti);
        /* interleaved with creates on the host image, so both see the same machine load */
        double *hv = calloc((size_t)iters + 1, sizeof *hv);
        int hn = 0;
        n = 0;
        for (int i = 0; i < iters; i++) {
            for (int img = 0; img < 2; img++) {
                snprintf(body, sizeof body, "{\"name\":\"%c%d\",\"timeout_ms\":0%s}",
                         img ? 'm' : 'h', i, img ? ",\"image\":\"bench/multi:1\"" : "");
                double t0 = now_ms();
                must("POST", "/v1/sandboxes", body);
                snprintf(path, sizeof path, "/v1/sandboxes/%c%d/commands", img ? 'm' : 'h', i);
                must("POST", path, "{\"cmd\":\"echo\",\"args\":[\"ready\"],\"wait\":true}");
                if (img) v[n++] = now_ms() - t0;
                else hv[hn++] = now_ms() - t0;
                if (!strstr(resp, "ready")) fprintf(stderr, "bench: unexpected output: %s\n", resp);
            }
        }
        double host_ms = report("create -> first output, host (interleaved)", hv, hn, NULL);
        double img_ms = report("create -> first output, 3-layer OCI image", v, n, NULL);
        free(hv);
        if (host_ms > 0)
            printf("  %-44s %7.2fx of host (medians)  target <= 1.10x: %s\n",
                   "3-layer image vs host image", img_ms / host_ms,
                   img_ms <= 1.10 * host_ms ? "met" : "MISSED");
        for (int i = 0; i < iters; i++) {
            snprintf(path, sizeof path, "/v1/sandboxes/m%d", i);
            http("DELETE", path, NULL);
            snprintf(path, sizeof path, "/v1/sandboxes/h%d", i);
            http("DELETE", path, NULL);
        }
    } else {
        fprintf(stderr, "bench: bench/make_image.py failed; skipped the image benchmark\n");
    }
    char *rm[] = {"/bin/rm", "-rf", layout, NULL}; /* our own path, argv only */
    pid_t rp = fork();
    if (rp == 0) {
        execv(rm[0], rm);
        _exit(127);
    }
    waitpid(rp, NULL, 0);

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
    free(v);
    return 0; /* finish() stops sandboxd and waits for the janitor */
}
