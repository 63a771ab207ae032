/*
 * cmd_sandboxd.c - `rebuno sandboxd`: run the sandbox service (/v1).
 *
 * Parses its few options, serves the API on one libevent loop until SIGINT or
 * SIGTERM, then stops every session (files stay), releases what it holds on the host
 * and exits. Needs root. It only listens on loopback, and every call but health must
 * send the local token it makes at start (net/local_auth.h): any local user can reach
 * loopback.
 *
 * The first SIGINT, SIGTERM or SIGHUP starts that shutdown and later ones are ignored:
 * Ctrl-C in a terminal, systemd and a closing terminal signal every process of the group
 * at once, and `rebuno dev` then sends its own SIGTERM, none of which may cut the
 * clean-up short (stop_signals.c). With
 * --notify-fd, a supervisor is told "ready", "stopping", one "progress" per step of the
 * shutdown, and "stopped", one line each.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/commands.h"
#include "net/http.h"
#include "net/local_auth.h"
#include "sandbox/storage/files.h"
#include "sandbox/core/sandboxd.h"
#include "sandbox/runtime/spawn.h"
#include "sandbox/core/uidpool.h"
#include "sandbox/vercel/vercel.h"
#include "sandbox/e2b/e2b.h"

/* An optional compatible API on its own port (--vercel-listen, --e2b-listen). */
struct extra_endpoint {
    const char *name;  /* in logs and the ready line: "vercel" */
    const char *title; /* in the warning: "Vercel" */
    const char *flag;  /* the option that picks its address */
    void (*register_routes)(struct sbxd *d, struct http_server *h);
    const char *listen; /* from the flag, or NULL: off */
    struct http_server *http; /* serving, or NULL */
};

enum { N_EXTRA = 2 };

struct daemon {
    struct event_base *base;
    struct http_server *http;
    struct extra_endpoint extra[N_EXTRA];
    struct sbxd *d;
    struct local_auth *local;
    struct cli_stop_signals stop; /* SIGINT, SIGTERM, SIGHUP */
    int notify_fd; /* --notify-fd, or -1 */
};

static void notify(struct daemon *s, const char *what)
{
    if (s->notify_fd < 0) return;
    char line[32];
    int n = snprintf(line, sizeof line, "%s\n", what);
    if (write(s->notify_fd, line, (size_t)n) < 0) { /* the supervisor is gone: fine */
    }
}

static void on_progress(void *arg)
{
    notify(arg, "progress");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *s = arg;
    log_info("shutting down", "signal=%d", (int)sig);
    cli_stop_signals_ignore(&s->stop);
    notify(s, "stopping");
    sbxd_shutdown(s->d);
    http_server_shutdown(s->http, 5000);
    s->http = NULL; /* freed by the shutdown */
    for (int i = 0; i < N_EXTRA; i++) {
        if (s->extra[i].http) http_server_shutdown(s->extra[i].http, 5000);
        s->extra[i].http = NULL;
    }
}

/* Starts one optional endpoint; a port taken costs it alone, not the service. */
static void extra_start(struct extra_endpoint *x, struct sbxd *d, struct event_base *base,
                        const struct http_config *hc)
{
    if (!x->listen) return;
    x->http = http_server_new(base, hc);
    x->register_routes(d, x->http);
    struct err xerr = ERR_INIT;
    if (http_server_listen(x->http, x->listen, &xerr) < 0) {
        log_warn("compatible endpoint not started", "api=%s listen=%s error=\"%s\"", x->name,
                 x->listen, xerr.msg);
        fprintf(stderr, "warning: the %s-compatible endpoint cannot listen on %s: %s "
                        "(pick another with %s)\n", x->title, x->listen, xerr.msg, x->flag);
        http_server_free(x->http);
        x->http = NULL;
    }
}

/* An origin as browsers send it: http(s)://host[:port], no path, no user, nothing odd. */
static bool origin_valid(const char *v)
{
    const char *h = !strncmp(v, "http://", 7) ? v + 7 : !strncmp(v, "https://", 8) ? v + 8 : NULL;
    if (!h || !*h || strlen(v) > 255) return false;
    return strspn(h, "abcdefghijklmnopqrstuvwxyz0123456789.-:[]") == strlen(h);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rebuno sandboxd [--listen 127.0.0.1:8090] [--state-dir DIR] [options]\n\n"
            "Runs the sandbox service: isolated Linux environments with commands, files and\n"
            "users (docs/sandbox.md, docs/sandbox-api.md). Needs root. Every call but health\n"
            "needs the token it makes at start, in DIR/local-token (mode 0600) and in this\n"
            "user's ${XDG_CONFIG_HOME:-~/.config}/rebuno/local/: this user's clients find it.\n\n"
            "options:\n"
            "  --listen ADDR        loopback address to serve /v1 on (default 127.0.0.1:8090)\n"
            "  --vercel-listen ADDR also serve the Vercel-Sandbox-compatible API there, for the\n"
            "                       official @vercel/sandbox SDK (docs/vercel.md; off by default)\n"
            "  --e2b-listen ADDR    also serve the E2B-compatible API there, for the official\n"
            "                       e2b SDK (docs/e2b.md; off by default)\n"
            "  --state-dir DIR      sandboxes, images and metadata (default .rebuno/sandboxes)\n"
            "  --ui-origin ORIGIN   a page origin (http://127.0.0.1:8080) whose dashboard may call\n"
            "                       /v1 from the browser (CORS); repeatable; rebuno dev passes its own\n"
            "  --uid-base N         first host uid of the sandboxes' uid ranges (default 100000)\n"
            "  --max-sandboxes N    most sandboxes this daemon holds (default 1000)\n"
            "  --output-limit BYTES bytes kept per command stream (default 1048576)\n"
            "  --cgroup MODE        auto, v1 or v2 (default auto)\n"
            "  --storage MODE       auto, btrfs or copy: where snapshot-able trees live\n"
            "                       (default auto: btrfs, else a btrfs loop image, else copies)\n"
            "  --storage-size BYTES size of a new btrfs loop image (sparse; default 32 GiB)\n"
            "  --snapshot-expiration MS  default expiration of snapshots, 0 = never\n"
            "                       (default 2592000000, 30 days)\n"
            "  --network MODE       auto, on or off: sandbox networking through the egress\n"
            "                       proxy (default auto: on when nft works)\n"
            "  --net-cidr CIDR      addresses of the sandboxes' veths (default 10.200.0.0/16)\n"
            "  --upstream-override HOST[:80|:443]=ADDR:PORT  send the proxy's connections for\n"
            "                       HOST there (repeatable; tests and demos)\n"
            "  --upstream-ca FILE   extra PEM CA the proxy trusts for upstream servers\n"
            "  --registry-auth FILE docker-style auth.json with credentials for image\n"
            "                       registries (never read from a sandbox)\n"
            "  --registry-ca FILE   extra PEM CA trusted for image registries\n"
            "  --registry-http HOST[:PORT]  reach this registry over plain http (repeatable;\n"
            "                       a registry on loopback for tests and demos)\n"
            "  --registry-stall-timeout S  a registry sending under 1 KiB/s for S s fails\n"
            "                       the pull (default 30)\n"
            "  --max-connections N  API connections at most; when full, a new one sheds the\n"
            "                       one waiting longest for a request (default 4096)\n"
            "  --max-connections-per-peer N  per client address (default: all of them;\n"
            "                       every client of this loopback service is 127.0.0.1)\n"
            "  --header-timeout S   a request head must be complete S s after it began\n"
            "                       (the accept, or its first byte; default 10)\n"
            "  --body-timeout S     a request body's grace, after which it must average\n"
            "  --body-min-rate B    B bytes/s (defaults 10 and 1024)\n"
            "  --idle-timeout S     keep-alive connections with no request (default 60)\n"
            "  --uid-ranges FILE    the host's table of which state folder owns which uid\n"
            "                       range (default " SBX_UIDPOOL_PATH ")\n"
            "  --notify-fd N        write ready, stopping, progress and stopped to this\n"
            "                       descriptor, one line each (for a supervisor)\n"
            "  --log-level LEVEL    debug, info, warn, error (default info)\n");
}

static bool loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strncmp(addr, "localhost:", 10) == 0 ||
           strncmp(addr, "[::1]:", 6) == 0;
}

static int parse_num(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || !*s || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int cmd_sandboxd(int argc, char **argv)
{
    const char *vercel_listen = NULL;
    const char *e2b_listen = NULL;
    const char *listen = "127.0.0.1:8090", *state = ".rebuno/sandboxes", *cg = "auto";
    const char *level = "info";
    sbx_spawn_set_title_area();
    long long uid_base = 100000, max_sbx = 1000, out_limit = 1 << 20;
    long long storage_size = 0, snap_exp = 30LL * 24 * 3600 * 1000;
    long long max_conns = 4096, per_peer = 0, head_s = 10, body_s = 10, body_rate = 1024;
    long long idle_s = 60;
    const char *storage = "auto";
    const char *net_mode = "auto", *net_cidr = NULL, *upstream_ca = NULL, *uid_ranges = NULL;
    long long notify_fd = -1;
    const char *overrides[64];
    int noverrides = 0;
    const char *reg_auth = NULL, *reg_ca = NULL, *reg_http[64], *ui_origins[8];
    size_t n_ui_origins = 0;
    int nreg_http = 0;
    long long reg_stall = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof name) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
            if (i + 1 < argc) v = argv[i + 1], i++;
        }
        if (!v) {
            fprintf(stderr, "error: %s needs a value\n", name);
            return 2;
        }
        int bad = 0;
        if (!strcmp(name, "--listen")) listen = v;
        else if (!strcmp(name, "--vercel-listen")) vercel_listen = v;
        else if (!strcmp(name, "--e2b-listen")) e2b_listen = v;
        else if (!strcmp(name, "--state-dir")) state = v;
        else if (!strcmp(name, "--cgroup")) cg = v;
        else if (!strcmp(name, "--storage")) storage = v;
        else if (!strcmp(name, "--storage-size"))
            bad = parse_num(v, 256LL << 20, 1LL << 50, &storage_size);
        else if (!strcmp(name, "--snapshot-expiration"))
            bad = parse_num(v, 0, 10LL * 366 * 24 * 3600 * 1000, &snap_exp);
        else if (!strcmp(name, "--log-level")) level = v;
        else if (!strcmp(name, "--network")) net_mode = v;
        else if (!strcmp(name, "--net-cidr")) net_cidr = v;
        else if (!strcmp(name, "--upstream-ca")) upstream_ca = v;
        else if (!strcmp(name, "--uid-ranges")) uid_ranges = v;
        else if (!strcmp(name, "--notify-fd"))
            bad = parse_num(v, 3, 1 << 20, &notify_fd) || fcntl((int)notify_fd, F_GETFD) < 0;
        else if (!strcmp(name, "--registry-auth")) reg_auth = v;
        else if (!strcmp(name, "--registry-ca")) reg_ca = v;
        else if (!strcmp(name, "--registry-stall-timeout")) bad = parse_num(v, 1, 3600, &reg_stall);
        else if (!strcmp(name, "--registry-http")) {
            if (nreg_http == 64) bad = 1;
            else reg_http[nreg_http++] = v;
        }
        else if (!strcmp(name, "--ui-origin")) {
            if (n_ui_origins == 8 || !origin_valid(v)) bad = 1;
            else ui_origins[n_ui_origins++] = v;
        }
        else if (!strcmp(name, "--upstream-override")) {
            if (noverrides == 64) bad = 1;
            else overrides[noverrides++] = v;
        }
        else if (!strcmp(name, "--uid-base")) bad = parse_num(v, 1, 4000000000LL, &uid_base);
        else if (!strcmp(name, "--max-sandboxes")) bad = parse_num(v, 1, 60000, &max_sbx);
        else if (!strcmp(name, "--output-limit"))
            bad = parse_num(v, 4096, 256LL << 20, &out_limit);
        else if (!strcmp(name, "--max-connections")) bad = parse_num(v, 1, 1000000, &max_conns);
        else if (!strcmp(name, "--max-connections-per-peer"))
            bad = parse_num(v, 1, 1000000, &per_peer);
        else if (!strcmp(name, "--header-timeout")) bad = parse_num(v, 1, 3600, &head_s);
        else if (!strcmp(name, "--body-timeout")) bad = parse_num(v, 1, 3600, &body_s);
        else if (!strcmp(name, "--body-min-rate")) bad = parse_num(v, 1, 1LL << 30, &body_rate);
        else if (!strcmp(name, "--idle-timeout")) bad = parse_num(v, 1, 86400, &idle_s);
        else {
            fprintf(stderr, "error: unknown option %s\n\n", name);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "error: %s: \"%s\" is not a valid value\n", name, v);
            return 2;
        }
    }
    enum log_level lvl;
    if (log_parse_level(level, &lvl) < 0) {
        fprintf(stderr, "error: --log-level must be debug, info, warn or error\n");
        return 2;
    }
    log_set_level(lvl);
    for (int k = 0; k < 3; k++) {
        const char *a = k == 0 ? listen : k == 1 ? vercel_listen : e2b_listen;
        if (a && !loopback(a)) {
            fprintf(stderr, "error: refusing to listen on %s: the sandbox API only listens on "
                            "loopback (127.0.0.1 or [::1])\n",
                    a);
            return 2;
        }
    }
    struct daemon s = {.notify_fd = (int)notify_fd,
                       .extra = {{"vercel", "Vercel", "--vercel-listen", sbx_vercel_register,
                                  vercel_listen, NULL},
                                 {"e2b", "E2B", "--e2b-listen", sbx_e2b_register, e2b_listen,
                                  NULL}}};
    if (s.notify_fd >= 0) { /* ours alone: no child inherits it, no write ever blocks */
        fcntl(s.notify_fd, F_SETFD, FD_CLOEXEC);
        fcntl(s.notify_fd, F_SETFL, fcntl(s.notify_fd, F_GETFL) | O_NONBLOCK);
    }
    struct err err = ERR_INIT;
    int rc = 1;
    signal(SIGPIPE, SIG_IGN);
    s.base = event_base_new();
    struct http_config hc = {.max_body = SBX_FS_IO_MAX + 4096,
                             .max_connections = (int)max_conns,
                             .max_per_peer = (int)(per_peer ? per_peer : max_conns),
                             .header_timeout_sec = (int)head_s,
                             .body_timeout_sec = (int)body_s,
                             .body_min_rate = (int)body_rate,
                             .idle_timeout_sec = (int)idle_s};
    s.http = http_server_new(s.base, &hc);
    http_set_cors_origins(s.http, ui_origins, n_ui_origins); /* only /v1 of --listen */
    struct sbxd_config cfg = {.state_dir = state, .cgroup_mode = cg,
                              .uid_first = (uint32_t)uid_base, .max_sandboxes = (int)max_sbx,
                              .output_limit = (size_t)out_limit, .start_timeout_ms = 10000,
                              .storage_mode = storage, .storage_size = (uint64_t)storage_size,
                              .snapshot_expiration_ms = snap_exp, .net_mode = net_mode,
                              .net_cidr = net_cidr,
                              .upstream_overrides = overrides, .n_upstream_overrides = noverrides,
                              .upstream_ca = upstream_ca, .uid_ranges = uid_ranges,
                              .registry_auth = reg_auth, .registry_ca = reg_ca,
                              .registry_plain_http = reg_http, .n_registry_plain_http = nreg_http,
                              .registry_stall_sec = (int)reg_stall,
                              .progress = on_progress, .progress_arg = &s};
    s.d = sbxd_new(s.base, s.http, &cfg, &err);
    if (!s.d) goto fail;
    if (http_server_listen(s.http, listen, &err) < 0) goto fail;
    for (int i = 0; i < N_EXTRA; i++) extra_start(&s.extra[i], s.d, s.base, &hc);
    /* after sbxd_new: the zygote, which every sandbox init comes from, never holds it */
    struct local_auth_opts lo = {state, "sandboxd", "REBUNO_SANDBOX_TOKEN", listen,
                                 http_server_port(s.http)};
    if (!(s.local = local_auth_new(&lo, &err))) goto fail;
    sbxd_set_local_auth(s.d, s.local);
    cli_stop_signals_add(&s.stop, s.base, on_signal, &s);
    log_info("rebuno sandboxd ready", "listen=%s port=%d state_dir=%s token_file=%s", listen,
             http_server_port(s.http), state, local_auth_path(s.local));
    printf("rebuno sandboxd: http://127.0.0.1:%d (state %s)\n", http_server_port(s.http), state);
    for (int i = 0; i < N_EXTRA; i++) {
        struct extra_endpoint *x = &s.extra[i];
        if (!x->http) continue;
        log_info("compatible endpoint ready", "api=%s listen=%s port=%d", x->name, x->listen,
                 http_server_port(x->http));
        printf("rebuno sandboxd: %s-compatible endpoint http://127.0.0.1:%d\n", x->name,
               http_server_port(x->http));
    }
    fflush(stdout);
    notify(&s, "ready");
    event_base_dispatch(s.base);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
out:
    cli_stop_signals_free(&s.stop);
    if (s.d) sbxd_shutdown(s.d);
    if (s.http) http_server_free(s.http);
    for (int i = 0; i < N_EXTRA; i++)
        if (s.extra[i].http) http_server_free(s.extra[i].http);
    sbxd_free(s.d);
    local_auth_free(s.local);
    if (s.base) event_base_free(s.base);
    notify(&s, "stopped");
    if (rc == 0) log_info("sandboxd stopped", "state_dir=%s", state);
    return rc;
}
