/*
 * cmd_serve.c - `rebuno dev` and `rebuno server`: run the kernel.
 *
 * Both load the settings table, open the store, configure agents and their
 * policies, and serve the /v0 API on one libevent loop until SIGINT/SIGTERM,
 * then shut down gracefully (held replies are committed and sent, long-polls
 * and streams end). `dev` accepts agents that are not configured (a worker or an
 * execution names them), so a first agent runs with no config file at all;
 * `server` only serves configured agents. Without API keys the kernel refuses
 * to listen on anything but loopback, and every caller must send the local token
 * it makes at start (net/local_auth.h).
 *
 * `dev` (as root) also runs `rebuno sandboxd` as its child and supervises it: if it
 * dies, dev logs how (exit status or signal), reaps it and starts it again after a
 * backoff (0.5 s doubling to 30 s, back to 0.5 s after a minute's run), never while
 * shutting down. At shutdown it waits for sandboxd for as long as sandboxd reports
 * progress (--notify-fd), so a long clean-up is never cut short.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "ui/ui.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/names.h"
#include "base/xalloc.h"
#include "cli/commands.h"
#include "config/config.h"
#include "kernel/kernel.h"
#include "net/http.h"
#include "net/local_auth.h"
#include "policy/policy.h"
#include "store/store.h"

#define RESTART_FIRST_MS 500    /* sandboxd died: first restart after this */
#define RESTART_MAX_MS 30000     /* doubling up to this */
#define RESTART_RESET_MS 60000   /* a run at least this long starts the backoff over */
#define STOP_QUIET_MS 30000      /* a stopping sandboxd silent this long is killed */

struct serve {
    struct event_base *base;
    struct http_server *http;
    struct api *api;
    struct local_auth *local; /* no api_keys: the token callers must send */
    struct cli_stop_signals stop; /* SIGINT, SIGTERM, SIGHUP */
    const struct config *cfg;
    /* dev: the sandbox service we started and supervise */
    pid_t sandboxd;             /* 0 when none runs */
    int sbx_pidfd, sbx_notify;  /* its pidfd, and the read end of its --notify-fd pipe */
    struct event *sbx_exit, *sbx_restart;
    int64_t sbx_started_ms;
    int restart_ms;             /* delay of the next restart */
    bool stopping;
};

/* dev: whether to run the sandbox service (sandboxes: on, or auto as root). */
static int sandboxes_wanted(const struct config *c, struct err *err)
{
    bool want = strcmp(c->sandboxes, "on") == 0;
    if (!want && strcmp(c->sandboxes, "auto") != 0) {
        if (strcmp(c->sandboxes, "off") != 0)
            return err_invalid(err, "sandboxes", "sandboxes must be auto, on or off (got \"%s\")", c->sandboxes);
        return 0;
    }
    if (geteuid() != 0) {
        if (want) return err_invalid(err, "sandboxes", "sandboxes need root (namespaces, mounts, cgroups); run as root or set sandboxes: off");
        log_warn("sandboxes off: the sandbox service needs root", "hint=\"run as root, or --sandboxes off to silence\"");
        return 0;
    }
    return 1;
}

static void on_sandboxd_exit(evutil_socket_t fd, short what, void *arg);

/* dev: run `rebuno sandboxd` as a child of this process (it needs root), watched through
 * a pidfd and told to report its shutdown's progress on a pipe. The child gets SIGTERM if
 * we die, so a crashed dev never leaves sandboxes running. */
static int start_sandboxd(struct serve *s, struct err *err)
{
    const struct config *c = s->cfg;
    /* argv: fixed part, then --upstream-ca and one --upstream-override per item of the
     * comma/space separated list (each HOST=ADDR:PORT; sandboxd checks the rest) */
    char *state = xasprintf("%s/sandboxes", c->state_dir);
    char *list = xstrdup(c->sandbox_upstream_overrides);
    char *rlist = xstrdup(c->sandbox_registry_http);
    enum { MAX_OVERRIDES = 64, MAX_REGISTRIES = 16, FIXED = 24 };
    char *argv[FIXED + 2 * MAX_OVERRIDES + 2 * MAX_REGISTRIES + 1];
    int pfd[2] = {-1, -1};
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        free(state), free(list), free(rlist);
        return err_set(err, 500, "sandboxd", "", "cannot start the sandbox service: %s", strerror(errno));
    }
    char fdstr[16];
    snprintf(fdstr, sizeof fdstr, "%d", pfd[1]);
    int n = 0;
    argv[n++] = "rebuno", argv[n++] = "sandboxd", argv[n++] = "--listen", argv[n++] = c->sandbox_listen;
    argv[n++] = "--state-dir", argv[n++] = state, argv[n++] = "--notify-fd", argv[n++] = fdstr;
    /* the kernel's dashboard shows the sandbox views by calling sandboxd's /v1 from the
     * browser: sandboxd lets exactly the kernel's own origins do so (CORS) */
    char origins[3][64];
    int port = http_server_port(s->http);
    snprintf(origins[0], sizeof origins[0], "http://127.0.0.1:%d", port);
    snprintf(origins[1], sizeof origins[1], "http://localhost:%d", port);
    snprintf(origins[2], sizeof origins[2], "http://[::1]:%d", port);
    for (int i = 0; i < 3; i++) argv[n++] = "--ui-origin", argv[n++] = origins[i];
    if (c->sandbox_upstream_ca[0]) argv[n++] = "--upstream-ca", argv[n++] = c->sandbox_upstream_ca;
    if (c->sandbox_e2b_listen[0] && strcmp(c->sandbox_e2b_listen, "off") != 0)
        argv[n++] = "--e2b-listen", argv[n++] = c->sandbox_e2b_listen;
    if (c->sandbox_registry_auth[0])
        argv[n++] = "--registry-auth", argv[n++] = c->sandbox_registry_auth;
    if (c->sandbox_registry_ca[0]) argv[n++] = "--registry-ca", argv[n++] = c->sandbox_registry_ca;
    int nreg = 0;
    if (c->sandbox_vercel_listen[0] && strcmp(c->sandbox_vercel_listen, "off") != 0)
        argv[n++] = "--vercel-listen", argv[n++] = c->sandbox_vercel_listen;
    char *save = NULL;
    for (char *item = strtok_r(rlist, ", \t\n", &save); item; item = strtok_r(NULL, ", \t\n", &save)) {
        if (++nreg > MAX_REGISTRIES) {
            err_invalid(err, "sandbox_registry_http",
                        "sandbox_registry_http: at most %d registries (HOST[:PORT], comma separated)",
                        MAX_REGISTRIES);
            free(state), free(list), free(rlist);
            close(pfd[0]), close(pfd[1]);
            return -1;
        }
        argv[n++] = "--registry-http", argv[n++] = item;
    }
    save = NULL;
    for (char *item = strtok_r(list, ", \t\n", &save); item; item = strtok_r(NULL, ", \t\n", &save)) {
        if (!strchr(item, '=') || n >= FIXED + 2 * MAX_OVERRIDES) {
            err_invalid(err, "sandbox_upstream_overrides",
                        "sandbox_upstream_overrides: at most %d items, each HOST=ADDR:PORT (got \"%s\")",
                        MAX_OVERRIDES, item);
            free(state), free(list), free(rlist);
            close(pfd[0]), close(pfd[1]);
            return -1;
        }
        argv[n++] = "--upstream-override", argv[n++] = item;
    }
    argv[n] = NULL;
    /* exec our binary by its path: exec of /proc/self/exe itself would start valgrind's
     * tool binary when dev runs under valgrind (which reports the client's path here) */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || (size_t)len >= sizeof self - 1) snprintf(self, sizeof self, "/proc/self/exe");
    else self[len] = '\0';
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1); /* the parent died before prctl */
        fcntl(pfd[1], F_SETFD, 0);          /* the one descriptor it inherits */
        execv(self, argv);
        execv("/proc/self/exe", argv); /* the file was replaced since we started */
        _exit(127);
    }
    int e = errno;
    free(state), free(list), free(rlist);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return err_set(err, 500, "sandboxd", "", "cannot start the sandbox service: %s", strerror(e));
    }
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    s->sandboxd = pid;
    s->sbx_notify = pfd[0];
    s->sbx_started_ms = clock_mono_ms();
    s->sbx_pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* our child: no reuse race */
    if (s->sbx_pidfd < 0) {
        log_warn("cannot watch the sandbox service; it is not restarted if it dies",
                 "error=\"%s\"", strerror(errno));
        return 0;
    }
    s->sbx_exit = event_new(s->base, s->sbx_pidfd, EV_READ, on_sandboxd_exit, s);
    event_add(s->sbx_exit, NULL);
    return 0;
}

/* Forget the sandboxd that ended with wait status st; why: how it ended. */
static void forget_sandboxd(struct serve *s, int st, char *why, size_t n)
{
    if (WIFSIGNALED(st)) snprintf(why, n, "signal=%d", WTERMSIG(st));
    else snprintf(why, n, "status=%d", WEXITSTATUS(st));
    if (s->sbx_exit) event_free(s->sbx_exit);
    if (s->sbx_pidfd >= 0) close(s->sbx_pidfd);
    if (s->sbx_notify >= 0) close(s->sbx_notify);
    s->sbx_exit = NULL;
    s->sbx_pidfd = s->sbx_notify = -1;
    s->sandboxd = 0;
}

/* waitpid for sandboxd: its pid when it was reaped into *st, 0 when it still runs. */
static pid_t wait_sandboxd(struct serve *s, int *st, bool block)
{
    pid_t r;
    while ((r = waitpid(s->sandboxd, st, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {
    }
    return r;
}

static void on_sandboxd_exit(evutil_socket_t fd, short what, void *arg)
{
    struct serve *s = arg;
    pid_t pid = s->sandboxd;
    char why[32];
    int st = 0;
    wait_sandboxd(s, &st, true); /* the pidfd is readable: it has exited */
    forget_sandboxd(s, st, why, sizeof why);
    if (s->stopping) return;
    int64_t ran = clock_mono_ms() - s->sbx_started_ms;
    if (ran >= RESTART_RESET_MS) s->restart_ms = RESTART_FIRST_MS;
    log_warn("sandboxd exited; restarting it", "pid=%d %s ran_ms=%lld restart_in_ms=%d",
             (int)pid, why, (long long)ran, s->restart_ms);
    struct timeval tv = {s->restart_ms / 1000, (s->restart_ms % 1000) * 1000};
    evtimer_add(s->sbx_restart, &tv);
    s->restart_ms = s->restart_ms * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : s->restart_ms * 2;
}

static void on_sandboxd_restart(evutil_socket_t fd, short what, void *arg)
{
    struct serve *s = arg;
    if (s->stopping || s->sandboxd) return;
    struct err err = ERR_INIT;
    if (start_sandboxd(s, &err) < 0) {
        log_error("cannot restart the sandbox service", "error=\"%s\" retry_in_ms=%d", err.msg,
                  s->restart_ms);
        struct timeval tv = {s->restart_ms / 1000, (s->restart_ms % 1000) * 1000};
        evtimer_add(s->sbx_restart, &tv);
        s->restart_ms = s->restart_ms * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : s->restart_ms * 2;
        return;
    }
    log_info("sandbox service restarted", "pid=%d", (int)s->sandboxd);
}

/* Stop sandboxd: SIGTERM (it may be stopping already: a signal to the whole group), then
 * wait as long as it reports progress on its pipe; SIGKILL only when it falls silent for
 * STOP_QUIET_MS, since sandboxes left half-stopped are what this wait is there to avoid. */
static void stop_sandboxd(struct serve *s)
{
    if (s->sandboxd <= 0) return;
    kill(s->sandboxd, SIGTERM);
    int64_t quiet_until = clock_mono_ms() + STOP_QUIET_MS;
    char why[32];
    int st = 0;
    for (;;) {
        if (wait_sandboxd(s, &st, false) != 0) {
            forget_sandboxd(s, st, why, sizeof why);
            return;
        }
        int left = (int)(quiet_until - clock_mono_ms());
        if (left <= 0) break;
        /* its exit (pidfd) or a progress line wakes us; without a pidfd, look every 0.1 s */
        struct pollfd pf[2] = {{s->sbx_notify, POLLIN, 0}, {s->sbx_pidfd, POLLIN, 0}};
        int r = poll(pf, 2, s->sbx_pidfd >= 0 || left < 100 ? left : 100);
        if (r > 0 && (pf[0].revents & (POLLIN | POLLHUP))) {
            char b[512];
            ssize_t got = read(s->sbx_notify, b, sizeof b);
            if (got > 0) quiet_until = clock_mono_ms() + STOP_QUIET_MS;
            if (got == 0) { /* it closed the pipe: only its exit is left to wait for */
                close(s->sbx_notify);
                s->sbx_notify = -1;
            }
        }
    }
    log_warn("the sandbox service makes no progress stopping; killing it", "pid=%d quiet_ms=%d",
             (int)s->sandboxd, STOP_QUIET_MS);
    kill(s->sandboxd, SIGKILL);
    wait_sandboxd(s, &st, true);
    forget_sandboxd(s, st, why, sizeof why);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct serve *s = arg;
    log_info("shutting down", "signal=%d", (int)sig);
    cli_stop_signals_ignore(&s->stop);
    s->stopping = true; /* sandboxd is stopped after the loop, and not restarted */
    if (s->sbx_exit) event_del(s->sbx_exit);
    if (s->sbx_restart) event_del(s->sbx_restart);
    api_shutdown(s->api);
    http_server_shutdown(s->http, 5000);
    s->http = NULL; /* freed by the shutdown */
}

static bool addr_is_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strncmp(addr, "localhost:", 10) == 0 ||
           strncmp(addr, "[::1]:", 6) == 0;
}

static int mkdir_p(const char *dir)
{
    char *p = xstrdup(dir);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(p, 0700);
            *q = '/';
        }
    int r = mkdir(p, 0700);
    free(p);
    return r == 0 || errno == EEXIST ? 0 : -errno;
}

static int configure_agents(struct kernel *k, const struct config *c, struct err *err)
{
    for (int i = 0; i < c->n_agents; i++) {
        const struct config_agent *a = &c->agents[i];
        struct policy *p = NULL;
        if (a->policy_file)
            p = policy_load_file(a->policy_file, err);
        else if (a->policy_inline)
            p = policy_load_string(a->policy_inline, strlen(a->policy_inline), c->path,
                                   a->policy_line, err);
        if ((a->policy_file || a->policy_inline) && !p) return err_wrap(err, "agent %s", a->name);
        kernel_add_agent(k, a->name, p, a->lease_timeout_seconds * 1000, a->max_attempts);
        kernel_agent_set_endpoint(k, a->name, a->webhook_url, a->secret);
    }
    return 0;
}

static void usage(FILE *out, const char *cmd)
{
    fprintf(out, "usage: rebuno %s [--config rebuno.yaml] [settings]\n\n", cmd);
    if (strcmp(cmd, "dev") == 0)
        fprintf(
            out,
            "Runs the kernel on the embedded SQLite store for local development. Agents that are\n"
            "not in the config are accepted as they appear.\n\n");
    else
        fprintf(out, "Runs the kernel; only agents listed in the config are served.\n\n");
    config_usage(out);
}

int cmd_serve(int argc, char **argv)
{
    bool dev = strcmp(argv[0], "dev") == 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout, argv[0]);
            return 0;
        }
    struct config c;
    struct err err = ERR_INIT;
    int rc = 1;
    struct store *st = NULL;
    struct kernel *k = NULL;
    struct serve s = {.cfg = &c, .sbx_pidfd = -1, .sbx_notify = -1, .restart_ms = RESTART_FIRST_MS};
    char *db = NULL;
    if (config_load(&c, argc, argv, &err) < 0) goto fail;
    enum log_level lvl;
    if (log_parse_level(c.log_level, &lvl) < 0) {
        err_invalid(&err, "log_level", "log_level must be debug, info, warn or error");
        goto fail;
    }
    log_set_level(lvl);
    if (c.n_keys == 0 && !addr_is_loopback(c.listen)) {
        err_invalid(&err, "listen",
                    "refusing to listen on %s without API keys: add api_keys: to the config, "
                    "or listen on 127.0.0.1",
                    c.listen);
        goto fail;
    }
    if (c.store[0] && strncmp(c.store, "sqlite:", 7) != 0 && !store_spec_is_postgres(c.store)) {
        char *shown = store_spec_redacted(c.store);
        err_invalid(&err, "store",
                    "store \"%s\" is not supported; use sqlite:PATH or postgres://user[:password]@host[:port]/database",
                    shown);
        free(shown);
        goto fail;
    }
    db = config_store_path(&c);
    if ((!c.store[0] || c.n_keys == 0) && mkdir_p(c.state_dir) < 0) {
        err_set(&err, 500, "state_dir", "state_dir", "cannot create state folder %s: %s",
                c.state_dir, strerror(errno));
        goto fail;
    }
    char why[1024];
    if (!(st = store_open(db, why, sizeof why))) {
        err_set(&err, 500, "store", "store", "%s", why);
        goto fail;
    }
    if (c.judge_url[0]) {
        char bad[160];
        if (!name_http_url_valid(c.judge_url, bad, sizeof bad)) {
            err_set(&err, 400, "config", "judge_url", "judge_url %s", bad);
            goto fail;
        }
    }
    struct kernel_config kc = {c.lease_timeout_seconds * 1000, c.max_attempts,
                               c.approval_timeout_seconds * 1000, dev, c.judge_url[0] != '\0'};
    k = kernel_new(st, &kc);
    if (configure_agents(k, &c, &err) < 0) goto fail;

    struct event_config *ec = event_config_new();
    /* Batch epoll_ctl changes per loop turn: held replies toggle read interest a lot. */
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    s.base = event_base_new_with_config(ec);
    event_config_free(ec);
    event_base_priority_init(s.base, 3); /* 0 unused, 1 I/O and timers, 2 group commit */
    struct http_config hc = {.max_connections = (int)c.http_max_connections,
                             .max_per_peer = (int)c.http_max_connections_per_peer,
                             .header_timeout_sec = (int)c.http_header_timeout_seconds,
                             .body_timeout_sec = (int)c.http_body_timeout_seconds,
                             .body_min_rate = (int)c.http_body_min_rate,
                             .idle_timeout_sec = (int)c.http_idle_timeout_seconds,
                             .flat_errors = true};
    s.http = http_server_new(s.base, &hc);
    struct api_key_config *keys = xcalloc((size_t)c.n_keys + 1, sizeof *keys);
    for (int i = 0; i < c.n_keys; i++) {
        keys[i].key = c.keys[i].key;
        api_role_parse(c.keys[i].role, &keys[i].role);
        keys[i].agent = c.keys[i].agent;
    }
    ui_mount(s.http, "kernel"); /* the dashboard, at /ui/ (docs/dashboard.md) */
    s.api = api_new(s.base, s.http, k, keys, c.n_keys);
    free(keys);
    api_set_judge(s.api, c.judge_url, c.judge_model, c.judge_api_key, c.judge_timeout_seconds * 1000);
    if (http_server_listen(s.http, c.listen, &err) < 0) goto fail;
    if (c.n_keys == 0) {
        struct local_auth_opts lo = {c.state_dir, "kernel", "REBUNO_API_KEY or --api-key", c.listen,
                                     http_server_port(s.http)};
        if (!(s.local = local_auth_new(&lo, &err))) goto fail;
        api_set_local_auth(s.api, s.local);
    }
    int want = dev ? sandboxes_wanted(&c, &err) : 0;
    if (want < 0) goto fail;
    s.sbx_restart = evtimer_new(s.base, on_sandboxd_restart, &s);
    if (want && start_sandboxd(&s, &err) < 0) goto fail;
    if (want) ui_set_sandboxes(c.sandbox_listen); /* the dashboard shows sandboxd's sandboxes */
    else if (c.dashboard_sandboxes[0]) {           /* a sandboxd someone else runs */
        const char *d = c.dashboard_sandboxes;
        if (strlen(d) > 200 || !strchr(d, ':') ||
            strspn(d, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(d)) {
            err_invalid(&err, "dashboard_sandboxes", "dashboard_sandboxes: HOST:PORT of a sandbox service "
                                                     "(127.0.0.1:8090), got \"%.64s\"", d);
            goto fail;
        }
        ui_set_sandboxes(d);
    }
    signal(SIGPIPE, SIG_IGN);
    cli_stop_signals_add(&s.stop, s.base, on_signal, &s);
    char *shown = store_spec_redacted(db); /* never a password in logs */
    api_start_dispatch(s.api);
    log_info("rebuno kernel ready", "mode=%s listen=%s port=%d store=%s agents=%d auth=%s token_file=%s",
             dev ? "dev" : "server", c.listen, http_server_port(s.http), shown, c.n_agents,
             c.n_keys ? "api_keys" : "local_token(loopback only)",
             s.local ? local_auth_path(s.local) : "-");
    /* A line people and scripts can read: where to point REBUNO_URL. */
    printf("rebuno %s: kernel on http://127.0.0.1:%d (store %s)\n", dev ? "dev" : "server",
           http_server_port(s.http), shown);
    free(shown);
    if (s.sandboxd)
        printf("rebuno dev: sandboxes on http://%s (state %s/sandboxes)%s%s%s%s\n", c.sandbox_listen,
               c.state_dir, strcmp(c.sandbox_vercel_listen, "off") ? ", Vercel-compatible on http://" : "",
               strcmp(c.sandbox_vercel_listen, "off") ? c.sandbox_vercel_listen : "",
               strcmp(c.sandbox_e2b_listen, "off") ? ", E2B-compatible on http://" : "",
               strcmp(c.sandbox_e2b_listen, "off") ? c.sandbox_e2b_listen : "");
    printf("rebuno %s: dashboard on http://127.0.0.1:%d/ui/\n", dev ? "dev" : "server", http_server_port(s.http));
    fflush(stdout);
    event_base_dispatch(s.base);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
out:
    stop_sandboxd(&s);
    if (s.sbx_restart) event_free(s.sbx_restart);
    cli_stop_signals_free(&s.stop);
    if (s.http) http_server_free(s.http);
    api_free(s.api);
    local_auth_free(s.local);
    if (s.base) event_base_free(s.base);
    kernel_free(k);
    store_close(st);
    free(db);
    config_fini(&c);
    return rc;
}
