/*
 * cmd_egress_proxy.c - `rebuno egress-proxy`: the egress proxy for one sandbox,
 * standalone, for tests, demos and benchmarks (sandboxd embeds the same engine
 * on its own loop).
 *
 *   rebuno egress-proxy --policy FILE|JSON|allow-all|deny-all
 *       [--listen-tls ADDR] [--listen-http ADDR] [--listen-transparent ADDR]
 *       [--dns ADDR --dns-answer IPV4 [--dns-answer6 IPV6]]
 *       [--upstream-override HOST=ADDR:PORT]... [--upstream-ca FILE] [--no-system-trust]
 *       [--ca-cert-out PATH] [--control ADDR] [--allow-private-upstreams] [--no-splice]
 *       [--max-conns N] [--max-conns-per-sandbox N] [--handshake-timeout MS]
 *       [--idle-timeout MS] [--buffer KIB] [--sandbox-id ID] [--source IP]... [--log-level L]
 *
 * One sandbox context by default, bound to the listeners. With --source, one context
 * per source address instead, found by the peer's address on shared listeners, which
 * is how sandboxd maps its sandboxes' veth addresses: tests use it to play several
 * sandboxes from 127.0.0.x (the per-sandbox and global connection limits, fair shares).
 *
 * When every listener is bound it prints one JSON line on stdout with the ports
 * ({"tls":P,"http":P,"transparent":P,"dns":P,"control":P}; 0 = not listening), so
 * callers can bind to port 0. Live policy changes: SIGHUP re-reads the --policy
 * file; the control endpoint (loopback HTTP) takes PUT /v0/policy with the JSON
 * and serves GET /v0/stats and GET /v0/policy. SIGTERM/SIGINT stop it.
 *
 * The sandbox CA's private key never leaves this process; --ca-cert-out writes
 * the certificate only.
 */
#include "cli/commands.h"

#include "base/log.h"
#include "base/xalloc.h"
#include "net/http.h"
#include "proxy/proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OVERRIDES 256
#define MAX_SOURCES 64

struct ep {
    struct event_base *base;
    struct proxy *px;
    struct proxy_sandbox *sbx; /* the first context: generation, policy summary */
    struct proxy_sandbox *sbxs[MAX_SOURCES];
    const char *ids[MAX_SOURCES];
    int nsbx;
    bool by_source; /* --source given */
    struct http_server *http;
    struct event *sigint, *sigterm, *sighup;
    const char *policy_file; /* NULL when the policy was given inline */
};

static void usage(FILE *f)
{
    fputs("usage: rebuno egress-proxy --policy FILE|JSON|allow-all|deny-all [options]\n"
          "\n"
          "Runs the sandbox egress proxy for one sandbox (for tests, demos and benchmarks).\n"
          "\n"
          "  --listen-tls ADDR          connections meant for port 443 (SNI decides)\n"
          "  --listen-http ADDR         connections meant for port 80 (Host decides)\n"
          "  --listen-transparent ADDR  redirected connections: SO_ORIGINAL_DST port 80/443\n"
          "  --dns ADDR                 UDP DNS: allowed names resolve, others NXDOMAIN\n"
          "  --dns-answer IPV4          address answered for allowed names (A)\n"
          "  --dns-answer6 IPV6         address answered for allowed names (AAAA)\n"
          "  --upstream-override H=A:P  connect to A:P for host H (repeatable); H may end in\n"
          "                             :80 or :443 to apply to that port only\n"
          "  --upstream-ca FILE         extra PEM CA trusted for upstream verification\n"
          "  --no-system-trust          trust only --upstream-ca upstream\n"
          "  --allow-private-upstreams  let names resolve to loopback/private addresses\n"
          "  --no-splice                passthrough through buffers, not splice(2)\n"
          "  --ca-cert-out PATH         write the sandbox CA certificate (PEM, no key)\n"
          "  --control ADDR             loopback HTTP: PUT /v0/policy, GET /v0/stats\n"
          "  --max-conns N              connections in all (default 4096)\n"
          "  --max-conns-per-sandbox N  per sandbox (default: --max-conns if given, else 1024)\n"
          "  --handshake-timeout MS     accept to relaying (default 10000)\n"
          "  --idle-timeout MS          no traffic either way (default 300000)\n"
          "  --buffer KIB               queued bytes per direction (default 256)\n"
          "  --sandbox-id ID            name in logs and in the CA subject\n"
          "  --source IP                a sandbox whose connections come from IP (repeatable;\n"
          "                             shared listeners, one context per address)\n"
          "  --log-level L              debug, info, warn, error (default info)\n"
          "\n"
          "ADDR is host:port with a numeric host; port 0 picks one. When ready, one JSON\n"
          "line with the bound ports is printed on stdout. SIGHUP re-reads the policy file.\n",
          f);
}

static struct proxy_policy *load_policy(const char *arg, bool *is_file, struct err *err)
{
    *is_file = false;
    if (!strcmp(arg, "allow-all")) return proxy_policy_new_mode(PROXY_POLICY_ALLOW_ALL);
    if (!strcmp(arg, "deny-all")) return proxy_policy_new_mode(PROXY_POLICY_DENY_ALL);
    if (arg[0] == '{' || arg[0] == '"') return proxy_policy_parse(arg, strlen(arg), err);
    *is_file = true;
    return proxy_policy_load_file(arg, err);
}

/* ------------------------------------------------------------------ control endpoint */

static json_t *stats_json(const struct proxy_stats *s, uint64_t generation)
{
    json_t *o = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
        "s:I,s:I,s:I}",
        "accepted", (json_int_t)s->accepted, "active", (json_int_t)s->active, "denied",
        (json_int_t)s->denied, "refused", (json_int_t)s->refused, "passthrough",
        (json_int_t)s->passthrough, "intercepted", (json_int_t)s->intercepted, "plain_http",
        (json_int_t)s->plain_http, "requests", (json_int_t)s->requests, "injected",
        (json_int_t)s->injected, "host_mismatch", (json_int_t)s->host_mismatch, "upstream_failed",
        (json_int_t)s->upstream_failed, "verify_failed", (json_int_t)s->verify_failed,
        "client_tls_failed", (json_int_t)s->client_tls_failed, "policy_closed",
        (json_int_t)s->policy_closed, "timeouts", (json_int_t)s->timeouts, "limit_rejected",
        (json_int_t)s->limit_rejected, "evicted", (json_int_t)s->evicted, "leaves_minted",
        (json_int_t)s->leaves_minted, "bytes_up", (json_int_t)s->bytes_up, "bytes_down",
        (json_int_t)s->bytes_down, "dns_queries", (json_int_t)s->dns_queries, "dns_answered",
        (json_int_t)s->dns_answered, "dns_nxdomain", (json_int_t)s->dns_nxdomain, "generation",
        (json_int_t)generation);
    json_object_set_new(o, "forwarded", json_integer((json_int_t)s->forwarded));
    json_object_set_new(o, "responded", json_integer((json_int_t)s->responded));
    return o;
}

static void h_stats(struct http_req *r, void *arg)
{
    struct ep *e = arg;
    struct proxy_stats s;
    proxy_stats(e->px, &s);
    json_t *out = stats_json(&s, proxy_sandbox_generation(e->sbx));
    if (e->by_source) { /* each context too, by its address */
        json_t *each = json_object();
        for (int i = 0; i < e->nsbx; i++) {
            proxy_sandbox_stats(e->sbxs[i], &s);
            json_object_set_new(each, e->ids[i],
                                stats_json(&s, proxy_sandbox_generation(e->sbxs[i])));
        }
        json_object_set_new(out, "sandboxes", each);
    }
    http_reply_json(r, 200, out);
}

static json_t *policy_summary(struct ep *e)
{
    static const char *modes[] = {"allow-all", "deny-all", "custom"};
    struct proxy_policy *p = proxy_sandbox_policy(e->sbx);
    return json_pack("{s:s,s:I,s:I}", "mode", modes[proxy_policy_mode(p)], "domains",
                     (json_int_t)proxy_policy_domain_count(p), "generation",
                     (json_int_t)proxy_sandbox_generation(e->sbx));
}

static void h_policy_get(struct http_req *r, void *arg)
{
    http_reply_json(r, 200, policy_summary(arg));
}

static void set_policy(struct ep *e, struct proxy_policy *p)
{
    for (int i = 0; i < e->nsbx; i++)
        proxy_sandbox_set_policy(e->sbxs[i], p);
}

static void h_policy_put(struct http_req *r, void *arg)
{
    struct ep *e = arg;
    struct err err = ERR_INIT;
    json_t *j = http_req_json(r, false, &err);
    struct proxy_policy *p = j ? proxy_policy_from_json(j, &err) : NULL;
    json_decref(j);
    if (!p) {
        http_reply_err(r, &err);
        return;
    }
    set_policy(e, p);
    proxy_policy_unref(p);
    http_reply_json(r, 200, policy_summary(e));
}

/* ------------------------------------------------------------------ signals */

static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    struct ep *e = arg;
    log_info("egress proxy stopping", "signal=%d", (int)sig);
    event_del(e->sigint);
    event_del(e->sigterm);
    event_del(e->sighup);
    if (e->http) http_server_shutdown(e->http, 1000);
    e->http = NULL;
    proxy_free(e->px); /* resets every connection, stops the worker threads */
    e->px = NULL;
    e->sbx = NULL;
    e->nsbx = 0;
}

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    struct ep *e = arg;
    if (!e->policy_file) {
        log_warn("egress policy reload skipped", "reason=\"the policy was given inline\"");
        return;
    }
    struct err err = ERR_INIT;
    struct proxy_policy *p = proxy_policy_load_file(e->policy_file, &err);
    if (!p) {
        log_error("egress policy reload failed", "err=\"%s\"", err.msg);
        return;
    }
    set_policy(e, p);
    proxy_policy_unref(p);
}

/* ------------------------------------------------------------------ main */

/* --source IP: connections and DNS queries from IP belong to s. */
static int add_source(struct proxy_sandbox *s, const char *ip, struct err *err)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        len = sizeof *v6;
    } else {
        return err_invalid(err, "source", "--source %.80s: not an IPv4 or IPv6 address", ip);
    }
    if (proxy_sandbox_add_source(s, (struct sockaddr *)&ss, len) < 0)
        return err_invalid(err, "source", "--source %.80s: given twice", ip);
    return 0;
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int cmd_egress_proxy(int argc, char **argv)
{
    const char *policy_arg = NULL, *listen_tls = NULL, *listen_http = NULL, *listen_tp = NULL;
    const char *dns_addr = NULL, *dns_a = NULL, *dns_aaaa = NULL, *ca_out = NULL;
    const char *control = NULL, *sandbox_id = "standalone", *level = "info";
    const char *overrides[MAX_OVERRIDES], *sources[MAX_SOURCES];
    int nov = 0, nsrc = 0;
    long per_sandbox = 0;
    struct proxy_config cfg = {0};
    cfg.max_conns_per_sandbox = 1024;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-system-trust")) {
            cfg.no_system_trust = true;
            continue;
        }
        if (!strcmp(a, "--allow-private-upstreams")) {
            cfg.allow_private_upstreams = true;
            continue;
        }
        if (!strcmp(a, "--no-splice")) {
            cfg.no_splice = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "rebuno egress-proxy: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "--policy"))
            policy_arg = v;
        else if (!strcmp(a, "--listen-tls"))
            listen_tls = v;
        else if (!strcmp(a, "--listen-http"))
            listen_http = v;
        else if (!strcmp(a, "--listen-transparent"))
            listen_tp = v;
        else if (!strcmp(a, "--dns"))
            dns_addr = v;
        else if (!strcmp(a, "--dns-answer"))
            dns_a = v;
        else if (!strcmp(a, "--dns-answer6"))
            dns_aaaa = v;
        else if (!strcmp(a, "--upstream-ca"))
            cfg.upstream_ca_file = v;
        else if (!strcmp(a, "--ca-cert-out"))
            ca_out = v;
        else if (!strcmp(a, "--control"))
            control = v;
        else if (!strcmp(a, "--sandbox-id"))
            sandbox_id = v;
        else if (!strcmp(a, "--log-level"))
            level = v;
        else if (!strcmp(a, "--upstream-override")) {
            if (nov == MAX_OVERRIDES) {
                fprintf(stderr, "rebuno egress-proxy: at most %d overrides\n", MAX_OVERRIDES);
                return 2;
            }
            overrides[nov++] = v;
        } else if (!strcmp(a, "--source")) {
            if (nsrc == MAX_SOURCES) {
                fprintf(stderr, "rebuno egress-proxy: at most %d sources\n", MAX_SOURCES);
                return 2;
            }
            sources[nsrc++] = v;
        } else if (!strcmp(a, "--max-conns") && parse_int(v, 1, 1000000, &n))
            cfg.max_conns = cfg.max_conns_per_sandbox = (int)n;
        else if (!strcmp(a, "--max-conns-per-sandbox") && parse_int(v, 1, 1000000, &n))
            per_sandbox = n;
        else if (!strcmp(a, "--handshake-timeout") && parse_int(v, 1, 3600000, &n))
            cfg.handshake_timeout_ms = (int)n;
        else if (!strcmp(a, "--idle-timeout") && parse_int(v, 1, 86400000, &n))
            cfg.idle_timeout_ms = (int)n;
        else if (!strcmp(a, "--buffer") && parse_int(v, 16, 65536, &n))
            cfg.buffer_max = (size_t)n * 1024;
        else {
            fprintf(stderr, "rebuno egress-proxy: bad option or value: %s %s\n", a, v);
            usage(stderr);
            return 2;
        }
    }
    if (!policy_arg) {
        fputs("rebuno egress-proxy: --policy is required (a file, inline JSON, allow-all or "
              "deny-all)\n",
              stderr);
        return 2;
    }
    if (per_sandbox) cfg.max_conns_per_sandbox = (int)per_sandbox;
    if (nsrc && ca_out) {
        fputs("rebuno egress-proxy: --ca-cert-out writes one sandbox's CA; it cannot be combined "
              "with --source\n",
              stderr);
        return 2;
    }
    if (!listen_tls && !listen_http && !listen_tp && !dns_addr) {
        fputs("rebuno egress-proxy: nothing to listen on; give --listen-tls, --listen-http, "
              "--listen-transparent or --dns\n",
              stderr);
        return 2;
    }
    enum log_level lvl;
    if (log_parse_level(level, &lvl) < 0) {
        fputs("rebuno egress-proxy: --log-level must be debug, info, warn or error\n", stderr);
        return 2;
    }
    log_set_level(lvl);

    struct proxy_dns_config dns = {.ttl = 60};
    if (dns_a) {
        if (inet_pton(AF_INET, dns_a, &dns.a) != 1) {
            fprintf(stderr, "rebuno egress-proxy: --dns-answer %s is not an IPv4 address\n", dns_a);
            return 2;
        }
        dns.have_a = true;
    }
    if (dns_aaaa) {
        if (inet_pton(AF_INET6, dns_aaaa, &dns.aaaa) != 1) {
            fprintf(stderr, "rebuno egress-proxy: --dns-answer6 %s is not an IPv6 address\n",
                    dns_aaaa);
            return 2;
        }
        dns.have_aaaa = true;
    }

    struct err err = ERR_INIT;
    struct ep e = {0};
    int rc = 1;
    bool is_file;
    struct proxy_policy *policy = load_policy(policy_arg, &is_file, &err);
    if (!policy) goto fail;
    e.policy_file = is_file ? policy_arg : NULL;
    e.base = event_base_new();
    e.px = proxy_new(e.base, &cfg, &err);
    if (!e.px) goto fail;
    for (int i = 0; i < nov; i++) {
        const char *eq = strchr(overrides[i], '=');
        if (!eq) {
            err_invalid(&err, "upstream_override", "--upstream-override %s: use HOST=ADDR:PORT",
                        overrides[i]);
            goto fail;
        }
        char *host = xstrndup(overrides[i], (size_t)(eq - overrides[i]));
        int r = proxy_add_override(e.px, host, eq + 1, &err);
        free(host);
        if (r < 0) goto fail;
    }
    for (int i = 0; i < (nsrc ? nsrc : 1); i++) {
        const char *id = nsrc ? sources[i] : sandbox_id;
        struct proxy_sandbox *s = proxy_sandbox_new(e.px, id, policy, 0, &err);
        if (!s) goto fail;
        e.sbxs[e.nsbx] = s;
        e.ids[e.nsbx++] = id;
        proxy_sandbox_set_dns(s, &dns);
        if (nsrc && add_source(s, id, &err) < 0) goto fail;
    }
    e.sbx = e.sbxs[0];
    e.by_source = nsrc > 0;
    if (ca_out && proxy_sandbox_write_ca(e.sbx, ca_out, &err) < 0) goto fail;
    int ports[4] = {0, 0, 0, 0};
    const char *addrs[4] = {listen_tls, listen_http, listen_tp, dns_addr};
    enum proxy_role roles[4] = {PROXY_ROLE_TLS, PROXY_ROLE_HTTP, PROXY_ROLE_TRANSPARENT,
                                PROXY_ROLE_DNS};
    for (int i = 0; i < 4; i++)
        if (addrs[i] &&
            (ports[i] = proxy_listen(e.px, roles[i], addrs[i], nsrc ? NULL : e.sbx, &err)) < 0)
            goto fail;
    int control_port = 0;
    if (control) {
        if (strncmp(control, "127.", 4) && strncmp(control, "[::1]:", 6)) {
            err_invalid(&err, "control", "--control must be a loopback address");
            goto fail;
        }
        e.http = http_server_new(e.base, NULL);
        http_route(e.http, "GET", "/v0/stats", h_stats, &e);
        http_route(e.http, "GET", "/v0/policy", h_policy_get, &e);
        http_route(e.http, "PUT", "/v0/policy", h_policy_put, &e);
        if (http_server_listen(e.http, control, &err) < 0) goto fail;
        control_port = http_server_port(e.http);
    }
    signal(SIGPIPE, SIG_IGN);
    e.sigint = evsignal_new(e.base, SIGINT, on_stop, &e);
    e.sigterm = evsignal_new(e.base, SIGTERM, on_stop, &e);
    e.sighup = evsignal_new(e.base, SIGHUP, on_hup, &e);
    event_add(e.sigint, NULL);
    event_add(e.sigterm, NULL);
    event_add(e.sighup, NULL);
    log_info("egress proxy ready", "sandbox=%s tls=%d http=%d transparent=%d dns=%d control=%d",
             sandbox_id, ports[0], ports[1], ports[2], ports[3], control_port);
    printf("{\"tls\":%d,\"http\":%d,\"transparent\":%d,\"dns\":%d,\"control\":%d}\n", ports[0],
           ports[1], ports[2], ports[3], control_port);
    fflush(stdout);
    event_base_dispatch(e.base);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", err.msg);
out:
    proxy_policy_unref(policy);
    if (e.sigint) event_free(e.sigint);
    if (e.sigterm) event_free(e.sigterm);
    if (e.sighup) event_free(e.sighup);
    if (e.http) http_server_free(e.http);
    proxy_free(e.px);
    if (e.base) event_base_free(e.base);
    return rc;
}
