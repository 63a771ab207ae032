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
 */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "cli/commands.h"
#include "config/config.h"
#include "kernel/kernel.h"
#include "net/http.h"
#include "net/local_auth.h"
#include "policy/policy.h"
#include "store/store.h"

struct serve {
    struct event_base *base;
    struct http_server *http;
    struct api *api;
    struct local_auth *local; /* no api_keys: the token callers must send */
    struct event *sigint, *sigterm;
    pid_t sandboxd; /* dev: the sandbox service we started, 0 when none */
};

/* dev: run `rebuno sandboxd` as a child of this process (it needs root). The child
 * gets SIGTERM if we die, so a crashed dev never leaves sandboxes running. */
static int start_sandboxd(struct serve *s, const struct config *c, struct err *err)
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
    /* argv: fixed part, then --upstream-ca and one --upstream-override per item of the
     * comma/space separated list (each HOST=ADDR:PORT; sandboxd checks the rest) */
    char *state = xasprintf("%s/sandboxes", c->state_dir);
    char *list = xstrdup(c->sandbox_upstream_overrides);
    enum { MAX_OVERRIDES = 64 };
    char *argv[8 + 2 * MAX_OVERRIDES + 1];
    int n = 0;
    argv[n++] = "rebuno", argv[n++] = "sandboxd", argv[n++] = "--listen", argv[n++] = c->sandbox_listen;
    argv[n++] = "--state-dir", argv[n++] = state;
    if (c->sandbox_upstream_ca[0]) argv[n++] = "--upstream-ca", argv[n++] = c->sandbox_upstream_ca;
    char *save = NULL;
    for (char *item = strtok_r(list, ", \t\n", &save); item; item = strtok_r(NULL, ", \t\n", &save)) {
        if (!strchr(item, '=') || n >= 8 + 2 * MAX_OVERRIDES) {
            err_invalid(err, "sandbox_upstream_overrides",
                        "sandbox_upstream_overrides: at most %d items, each HOST=ADDR:PORT (got \"%s\")",
                        MAX_OVERRIDES, item);
            free(state), free(list);
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
        execv(self, argv);
        execv("/proc/self/exe", argv); /* the file was replaced since we started */
        _exit(127);
    }
    free(state), free(list);
    if (pid < 0) return err_set(err, 500, "sandboxd", "", "cannot start the sandbox service: %s", strerror(errno));
    s->sandboxd = pid;
    return 0;
}

static void stop_sandboxd(struct serve *s)
{
    if (s->sandboxd <= 0) return;
    kill(s->sandboxd, SIGTERM);
    for (int i = 0; i < 100; i++) { /* it stops every session first: give it 10 s */
        if (waitpid(s->sandboxd, NULL, WNOHANG) == s->sandboxd) {
            s->sandboxd = 0;
            return;
        }
        usleep(100000);
    }
    kill(s->sandboxd, SIGKILL);
    waitpid(s->sandboxd, NULL, 0);
    s->sandboxd = 0;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct serve *s = arg;
    log_info("shutting down", "signal=%d", (int)sig);
    event_del(s->sigint);
    event_del(s->sigterm);
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
    struct serve s = {0};
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
    if (c.store[0] && strncmp(c.store, "sqlite:", 7) != 0) {
        err_invalid(&err, "store",
                    "store \"%s\" is not supported; use sqlite:PATH (PostgreSQL is planned)",
                    c.store);
        goto fail;
    }
    db = config_store_path(&c);
    if ((!c.store[0] || c.n_keys == 0) && mkdir_p(c.state_dir) < 0) {
        err_set(&err, 500, "state_dir", "state_dir", "cannot create state folder %s: %s",
                c.state_dir, strerror(errno));
        goto fail;
    }
    char why[512];
    if (!(st = store_open(db, why, sizeof why))) {
        err_set(&err, 500, "store", "store", "%s", why);
        goto fail;
    }
    struct kernel_config kc = {c.lease_timeout_seconds * 1000, c.max_attempts,
                               c.approval_timeout_seconds * 1000, dev};
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
                             .idle_timeout_sec = (int)c.http_idle_timeout_seconds};
    s.http = http_server_new(s.base, &hc);
    struct api_key_config *keys = xcalloc((size_t)c.n_keys + 1, sizeof *keys);
    for (int i = 0; i < c.n_keys; i++) {
        keys[i].key = c.keys[i].key;
        api_role_parse(c.keys[i].role, &keys[i].role);
        keys[i].agent = c.keys[i].agent;
    }
    s.api = api_new(s.base, s.http, k, keys, c.n_keys);
    free(keys);
    if (http_server_listen(s.http, c.listen, &err) < 0) goto fail;
    if (c.n_keys == 0) {
        struct local_auth_opts lo = {c.state_dir, "kernel", "REBUNO_API_KEY or --api-key", c.listen,
                                     http_server_port(s.http)};
        if (!(s.local = local_auth_new(&lo, &err))) goto fail;
        api_set_local_auth(s.api, s.local);
    }
    if (dev && start_sandboxd(&s, &c, &err) < 0) goto fail;
    signal(SIGPIPE, SIG_IGN);
    s.sigint = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.sigterm = evsignal_new(s.base, SIGTERM, on_signal, &s);
    event_add(s.sigint, NULL);
    event_add(s.sigterm, NULL);
    log_info("rebuno kernel ready", "mode=%s listen=%s port=%d store=%s agents=%d auth=%s token_file=%s",
             dev ? "dev" : "server", c.listen, http_server_port(s.http), db, c.n_agents,
             c.n_keys ? "api_keys" : "local_token(loopback only)",
             s.local ? local_auth_path(s.local) : "-");
    /* A line people and scripts can read: where to point REBUNO_URL. */
    printf("rebuno %s: kernel on http://127.0.0.1:%d (store %s)\n", dev ? "dev" : "server",
           http_server_port(s.http), db);
    if (s.sandboxd)
        printf("rebuno dev: sandboxes on http://%s (state %s/sandboxes)\n", c.sandbox_listen, c.state_dir);
    fflush(stdout);
    event_base_dispatch(s.base);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
out:
    stop_sandboxd(&s);
    if (s.sigint) event_free(s.sigint);
    if (s.sigterm) event_free(s.sigterm);
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
