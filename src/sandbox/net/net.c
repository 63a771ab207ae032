/*
 * net.c - a sandbox's network: configuration, the embedded egress proxy, attaching
 * a veth to a session, the trust store, private networks and exposed ports (net.h).
 *
 * Attaching runs on the loop thread, which briefly enters the sandbox's network
 * namespace (setns on init's pidfd) to open a netlink socket and a namespace
 * descriptor there, then returns to its own; both keep referring to the sandbox's
 * namespace. setns only affects the calling thread, and nothing else runs on the
 * loop meanwhile. The proxy's worker threads never change namespace.
 *
 * The sandbox's trust store and resolv.conf are written through the files API
 * (files.h: resolved inside the sandbox's root with RESOLVE_IN_ROOT), never through
 * host paths into its upper layer, which the sandbox controls. Only the CA's
 * certificate goes there; its key stays in the proxy (proxy/ca.h).
 */
#include "sandbox/net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "proxy/proxy.h"
#include "sandbox/core/daemons.h"
#include "sandbox/net/fwd.h"
#include "sandbox/net/netpool.h"
#include "sandbox/net/nft.h"
#include "sandbox/net/nl.h"
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/validate.h"

#define DEFAULT_CIDR "10.200.0.0/16"
#define NETWORK_MEMBERS_MAX 64
#define BUNDLE_MAX (8u << 20)
#define CA_HOURS (7 * 24)

/* In the sandbox: the combined bundle every tool is pointed at, and the CA alone (for
 * NODE_EXTRA_CA_CERTS, and where update-ca-certificates picks it up again). */
#define BUNDLE_PATH "/etc/ssl/certs/ca-certificates.crt"
#define CA_CRT_DIR "/usr/local/share/ca-certificates"
#define CA_CRT_PATH CA_CRT_DIR "/rebuno-egress-ca.crt"
#define BLOCK_BEGIN "# rebuno egress CA (this sandbox's; rewritten at each session start)\n"
#define BLOCK_END "# end rebuno egress CA\n"

struct sbx_netcfg {
    json_t *policy;          /* as given (holds secrets); NULL: deny-all */
    struct proxy_policy *pp; /* parsed; NULL: deny-all */
    char network_id[SBX_NETWORK_ID_MAX + 1];
    int nports;
    uint16_t ports[SBX_PORTS_MAX];
    uint16_t host_ports[SBX_PORTS_MAX]; /* of the last session, tried again first */
    bool dirty;
};

struct sbx_netsess {
    struct sbx_veth veth;
    struct proxy_sandbox *px;
    int nfwd;
    struct sbx_fwd *fwd[SBX_PORTS_MAX];
    uint16_t fwd_port[SBX_PORTS_MAX]; /* the sandbox port each one relays to */
    char joined[SBX_NETWORK_ID_MAX + 1];
};

struct sbx_net {
    struct sbxd *d;
    bool enabled;
    char why_off[200];
    struct proxy *px;
    struct proxy_policy *deny; /* the shared deny-all */
    struct sbx_netpool *pool;
    struct sbx_nft_conf nft;
    bool nft_loaded;
    int root_ns;
    sqlite3_stmt *save, *del;
};

/* ------------------------------------------------------------------ small helpers */

static void sysctl_write(const char *path, const char *v)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, v, strlen(v)) < 0) {
    }
    close(fd);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *ntoa(struct in_addr a, char *buf)
{
    return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

static struct proxy_policy *policy_of(const struct sbx_net *n, const struct sbx_netcfg *c)
{
    return c && c->pp ? c->pp : n->deny;
}

static bool needs_net(const struct sbx_netcfg *c)
{
    if (!c) return false;
    return (c->pp && proxy_policy_mode(c->pp) != PROXY_POLICY_DENY_ALL) || c->nports > 0 ||
           c->network_id[0];
}

static void cfg_free(struct sbx_netcfg *c)
{
    if (!c) return;
    json_decref(c->policy);
    proxy_policy_unref(c->pp);
    free(c);
}

static struct sbx_netcfg *cfg_copy(const struct sbx_netcfg *src)
{
    struct sbx_netcfg *c = xcalloc(1, sizeof *c);
    if (src) {
        *c = *src;
        c->policy = src->policy ? json_deep_copy(src->policy) : NULL;
        c->pp = src->pp ? proxy_policy_ref(src->pp) : NULL;
    }
    return c;
}

/* ------------------------------------------------------------------ validation */

static int parse_fields(const struct sbx_net *n, struct sbx_netcfg *c, const json_t *body,
                        struct err *err)
{
    json_t *pol = json_object_get(body, "network_policy");
    if (pol && !json_is_null(pol)) {
        struct proxy_policy *pp = proxy_policy_from_json(pol, err);
        if (!pp) {
            char f[sizeof err->field];
            snprintf(f, sizeof f, "%s", err->field);
            snprintf(err->field, sizeof err->field, "network_policy%s%.80s", f[0] ? "." : "", f);
            return err_wrap(err, "network_policy");
        }
        json_decref(c->policy);
        proxy_policy_unref(c->pp);
        c->policy = json_deep_copy(pol);
        c->pp = pp;
    }
    json_t *nid = json_object_get(body, "network_id");
    if (nid) {
        if (json_is_null(nid)) {
            c->network_id[0] = '\0';
        } else {
            const char *v = json_string_value(nid);
            if (!v || !sbx_name_valid(v) || strlen(v) > SBX_NETWORK_ID_MAX)
                return err_invalid(err, "network_id",
                                   "network_id must be null or 1-%d characters of A-Z a-z 0-9 . _ "
                                   "- starting with a letter or digit",
                                   SBX_NETWORK_ID_MAX);
            snprintf(c->network_id, sizeof c->network_id, "%s", v);
        }
    }
    json_t *ports = json_object_get(body, "ports");
    if (ports) {
        if (!json_is_null(ports) && !json_is_array(ports))
            return err_invalid(err, "ports", "ports must be an array of port numbers");
        size_t np = json_is_array(ports) ? json_array_size(ports) : 0;
        if (np > SBX_PORTS_MAX)
            return err_invalid(err, "ports", "at most %d ports can be exposed", SBX_PORTS_MAX);
        uint16_t v[SBX_PORTS_MAX] = {0}, hp[SBX_PORTS_MAX] = {0};
        for (size_t i = 0; i < np; i++) {
            json_t *p = json_array_get(ports, i);
            json_int_t x = json_is_integer(p) ? json_integer_value(p) : 0;
            if (x < 1 || x > 65535)
                return err_invalid(err, "ports", "ports[%zu] must be a port number (1-65535)", i);
            v[i] = (uint16_t)x;
            for (size_t j = 0; j < i; j++)
                if (v[j] == v[i]) return err_invalid(err, "ports", "port %u is listed twice", v[i]);
            for (int j = 0; j < c->nports; j++) /* keep the host port of a port kept */
                if (c->ports[j] == v[i]) hp[i] = c->host_ports[j];
        }
        c->nports = (int)np;
        memcpy(c->ports, v, np * sizeof v[0]);
        memcpy(c->host_ports, hp, sizeof hp);
    }
    if (needs_net(c) && !n->enabled)
        return err_set(err, 409, "network_unavailable", pol ? "network_policy" : "",
                       "this sandboxd runs without sandbox networking (%s), so sandboxes have "
                       "loopback only: network_policy must be \"deny-all\" and there can be no "
                       "network_id or ports",
                       n->why_off);
    return 0;
}

static bool has_net_fields(const json_t *body)
{
    return json_object_get(body, "network_policy") || json_object_get(body, "network_id") ||
           json_object_get(body, "ports");
}

/* ------------------------------------------------------------------ persistence */

static const char *net_sql =
    "CREATE TABLE IF NOT EXISTS sandbox_network(id TEXT PRIMARY KEY, policy TEXT NOT NULL,"
    " network_id TEXT NOT NULL, ports TEXT NOT NULL) STRICT;";

int sbx_net_save(struct sbx *s, struct err *err)
{
    struct sbx_net *n = s->d->net;
    struct sbx_netcfg *c = s->net;
    if (!n || !n->save || !c || !c->dirty) return 0;
    char *pol =
        c->policy ? json_dumps(c->policy, JSON_COMPACT | JSON_ENCODE_ANY) : xstrdup("\"deny-all\"");
    json_t *ports = json_array();
    for (int i = 0; i < c->nports; i++)
        json_array_append_new(ports, json_integer(c->ports[i]));
    char *pj = json_dumps(ports, JSON_COMPACT);
    json_decref(ports);
    sqlite3_stmt *st = n->save;
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, s->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, pol, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, c->network_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, pj, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (pol) { /* it may hold credentials: do not leave them in freed memory */
        memset(pol, 0, strlen(pol));
        free(pol);
    }
    free(pj);
    if (rc != SQLITE_DONE)
        return err_set(err, 500, "storage_error", "", "save network settings: %s",
                       sqlite3_errmsg(sqlite3_db_handle(st)));
    c->dirty = false;
    return 0;
}

void sbx_net_forget(struct sbx *s)
{
    struct sbx_net *n = s->d->net;
    if (!n || !n->del) return;
    sqlite3_reset(n->del);
    sqlite3_bind_text(n->del, 1, s->id, -1, SQLITE_STATIC);
    if (sqlite3_step(n->del) != SQLITE_DONE)
        log_warn("cannot delete network settings", "sandbox=%s", s->id);
    sqlite3_reset(n->del);
    sqlite3_clear_bindings(n->del);
}

static int load_rows(struct sbx_net *n, struct err *err)
{
    sqlite3 *db = sbx_store_db(n->d->store);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT id, policy, network_id, ports FROM sandbox_network", -1, &q,
                           NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "load network settings: %s",
                       sqlite3_errmsg(db));
    int orphans = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(q, 0);
        struct sbx *s = NULL;
        for (struct sbx *x = n->d->first; x && id && !s; x = x->next)
            if (!strcmp(x->id, id)) s = x;
        if (!s) {
            orphans++;
            continue;
        }
        const char *pol = (const char *)sqlite3_column_text(q, 1);
        const char *nid = (const char *)sqlite3_column_text(q, 2);
        const char *ports = (const char *)sqlite3_column_text(q, 3);
        json_t *body = json_object();
        json_t *pj = pol ? json_loads(pol, 0, NULL) : NULL;
        json_object_set_new(body, "network_policy", pj ? pj : json_string("deny-all"));
        json_object_set_new(body, "network_id", nid && *nid ? json_string(nid) : json_null());
        json_t *pa = ports ? json_loads(ports, 0, NULL) : NULL;
        json_object_set_new(body, "ports", pa ? pa : json_array());
        struct sbx_netcfg *c = xcalloc(1, sizeof *c);
        struct err e = ERR_INIT;
        bool was = n->enabled;
        n->enabled = true; /* stored settings load even if networking is off now */
        if (parse_fields(n, c, body, &e) < 0) {
            log_error("stored network settings are invalid; using deny-all",
                      "sandbox=%s error=\"%s\"", s->id, e.msg);
            cfg_free(c);
            c = xcalloc(1, sizeof *c);
        }
        n->enabled = was;
        json_decref(body);
        cfg_free(s->net);
        s->net = c;
    }
    sqlite3_finalize(q);
    if (orphans)
        sqlite3_exec(db, "DELETE FROM sandbox_network WHERE id NOT IN (SELECT id FROM sandboxes)",
                     NULL, NULL, NULL);
    return 0;
}

/* ------------------------------------------------------------------ config API */

int sbx_net_parse(struct sbx *s, const json_t *body, const struct sbx *fork_from, struct err *err)
{
    struct sbx_netcfg *c = cfg_copy(fork_from ? fork_from->net : NULL);
    memset(c->host_ports, 0, sizeof c->host_ports);
    if (parse_fields(s->d->net, c, body, err) < 0) {
        cfg_free(c);
        return -1;
    }
    c->dirty = true;
    cfg_free(s->net);
    s->net = c;
    return 0;
}

void sbx_net_copy_config(struct sbx *dst, const struct sbx *src)
{
    struct sbx_netcfg *c = cfg_copy(src->net);
    memset(c->host_ports, 0, sizeof c->host_ports);
    c->dirty = true;
    cfg_free(dst->net);
    dst->net = c;
}

void sbx_net_cfg_free(struct sbx *s)
{
    cfg_free(s->net);
    s->net = NULL;
}

static int apply_live(struct sbx *s, struct sbx_session *ss, bool policy, struct err *err);

int sbx_net_update(struct sbx *s, const json_t *body, struct err *err)
{
    if (!has_net_fields(body)) return 0;
    struct sbx_netcfg *c = cfg_copy(s->net);
    if (parse_fields(s->d->net, c, body, err) < 0) {
        cfg_free(c);
        return -1;
    }
    c->dirty = true;
    cfg_free(s->net);
    s->net = c;
    if (!s->sess) return 0;
    return apply_live(s, s->sess, json_object_get(body, "network_policy") != NULL, err);
}

/* ------------------------------------------------------------------ JSON */

/* The policy as given, with every header value replaced: credentials never leave. */
static json_t *redact(const json_t *v, bool values)
{
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            if (values)
                json_object_set_new(o, k, json_string("<redacted>"));
            else
                json_object_set_new(o, k, redact(x, !strcmp(k, "headers") && json_is_object(x)));
        }
        return o;
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_append_new(a, redact(json_array_get(v, i), false));
        return a;
    }
    return json_deep_copy(v);
}

void sbx_net_json(const struct sbx *s, json_t *o, bool full)
{
    const struct sbx_netcfg *c = s->net;
    json_object_set_new(o, "network_policy",
                        c && c->policy ? redact(c->policy, false) : json_string("deny-all"));
    json_object_set_new(o, "network_id",
                        c && c->network_id[0] ? json_string(c->network_id) : json_null());
    const struct sbx_netsess *ns = s->sess ? s->sess->net : NULL;
    json_t *ports = json_array();
    for (int i = 0; c && i < c->nports; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "port", json_integer(c->ports[i]));
        uint16_t hp = 0;
        for (int j = 0; ns && j < ns->nfwd; j++)
            if (ns->fwd_port[j] == c->ports[i]) hp = sbx_fwd_port(ns->fwd[j]);
        json_object_set_new(p, "host_port", hp ? json_integer(hp) : json_null());
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%u", hp);
        json_object_set_new(p, "url", hp ? json_string(url) : json_null());
        json_array_append_new(ports, p);
    }
    json_object_set_new(o, "ports", ports);
    if (!ns) {
        json_object_set_new(o, "network", json_null());
        return;
    }
    char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN];
    json_t *net = json_object();
    json_object_set_new(net, "address", json_string(ntoa(ns->veth.sbx_addr, a)));
    json_object_set_new(net, "gateway", json_string(ntoa(ns->veth.host_addr, g)));
    json_object_set_new(net, "dns", json_string(g));
    if (full) {
        struct proxy_stats st;
        proxy_sandbox_stats(ns->px, &st);
        json_t *e = json_object();
#define STAT(x) json_object_set_new(e, #x, json_integer((json_int_t)st.x))
        STAT(accepted);
        STAT(active);
        STAT(denied);
        STAT(refused);
        STAT(passthrough);
        STAT(intercepted);
        STAT(plain_http);
        STAT(requests);
        STAT(injected);
        STAT(forwarded);
        STAT(responded);
        STAT(host_mismatch);
        STAT(upstream_failed);
        STAT(verify_failed);
        STAT(policy_closed);
        STAT(limit_rejected);
        STAT(evicted);
        STAT(bytes_up);
        STAT(bytes_down);
        STAT(dns_queries);
        STAT(dns_nxdomain);
#undef STAT
        json_object_set_new(net, "egress", e);
    }
    json_object_set_new(o, "network", net);
}

void sbx_net_env(const struct sbx *s, json_t *env)
{
    if (!s->sess || !s->sess->net) return;
    static const char *const bundle_vars[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                                              "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"};
    for (size_t i = 0; i < sizeof bundle_vars / sizeof bundle_vars[0]; i++)
        json_object_set_new(env, bundle_vars[i], json_string(BUNDLE_PATH));
    json_object_set_new(env, "NODE_EXTRA_CA_CERTS", json_string(CA_CRT_PATH));
}

/* ------------------------------------------------------------------ a session */

/* Inside the sandbox's namespace: IPv6 off for new links, and a netlink socket and a
 * namespace descriptor that stay there. The thread always comes back. */
static int enter_and_open(struct sbx_net *n, int pidfd, struct sbx_nl *in, int *nsfd)
{
    *nsfd = -1;
    in->fd = -1;
    if (setns(pidfd, CLONE_NEWNET) < 0) return -errno;
    int e = 0;
    sysctl_write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
    *nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (*nsfd < 0) e = -errno;
    if (!e) e = sbx_nl_open(in);
    if (setns(n->root_ns, CLONE_NEWNET) < 0) {
        /* the loop thread would stay inside a sandbox: nothing sane can follow */
        log_error("cannot return to the host network namespace", "error=\"%s\"", strerror(errno));
        abort();
    }
    if (e < 0) {
        if (*nsfd >= 0) close(*nsfd);
        *nsfd = -1;
        sbx_nl_close(in);
    }
    return e;
}

/* Make the session's veth pair (eth0 inside) and configure both ends. */
static int make_link(struct sbx_net *n, struct sbx_session *ss, struct sbx_veth *v)
{
    struct sbx_nl in;
    int nsfd;
    int e = enter_and_open(n, ss->proc.pidfd, &in, &nsfd);
    if (e < 0) return e;
    e = sbx_netpool_create(n->pool, nsfd, v);
    bool made = e == 0;
    int idx = e < 0 ? e : sbx_nl_link_index(&in, "eth0");
    if (idx < 0) e = idx;
    if (!e) e = sbx_nl_addr_add(&in, idx, v->sbx_addr, 31);
    if (!e) e = sbx_nl_link_up(&in, idx);
    if (!e) e = sbx_nl_route_default(&in, idx, v->host_addr);
    sbx_nl_close(&in);
    close(nsfd);
    if (e < 0 && made) sbx_netpool_release(n->pool, v);
    return e;
}

/* Replace the block between the markers (or append one) in the bundle text. */
static void bundle_with(struct buf *out, const char *cur, size_t len, const char *pem)
{
    const char *b = cur ? memmem(cur, len, BLOCK_BEGIN, strlen(BLOCK_BEGIN)) : NULL;
    const char *e = b ? memmem(b, len - (size_t)(b - cur), BLOCK_END, strlen(BLOCK_END)) : NULL;
    if (b && e) {
        buf_append(out, cur, (size_t)(b - cur));
        const char *after = e + strlen(BLOCK_END);
        buf_append(out, after, len - (size_t)(after - cur));
    } else if (cur) {
        buf_append(out, cur, len);
    }
    if (out->len && out->data[out->len - 1] != '\n') buf_puts(out, "\n");
    buf_puts(out, BLOCK_BEGIN);
    buf_puts(out, pem);
    if (out->len && out->data[out->len - 1] != '\n') buf_puts(out, "\n");
    buf_puts(out, BLOCK_END);
}

static int write_trust(struct sbx_session *ss, const char *pem, struct in_addr dns, struct err *err)
{
    const struct sbx_fs *fs = &ss->fs;
    struct sbx_owner root = {0, 0};
    size_t pl = strlen(pem);
    if (sbx_fs_mkdir(fs, CA_CRT_DIR, true, 0755, &root, err) < 0 ||
        sbx_fs_mkdir(fs, "/etc/ssl/certs", true, 0755, &root, err) < 0 ||
        sbx_fs_replace(fs, CA_CRT_PATH, pem, pl, 0644, &root, err) < 0)
        return -1;
    struct buf cur, out;
    buf_init(&cur, 0);
    buf_init(&out, 0);
    struct err e2 = ERR_INIT;
    if (sbx_fs_read_all(fs, BUNDLE_PATH, BUNDLE_MAX, &cur, &e2) < 0 && e2.status != 404) {
        buf_fini(&cur);
        *err = e2;
        return -1;
    }
    bundle_with(&out, cur.data, cur.len, pem);
    int rc = sbx_fs_replace(fs, BUNDLE_PATH, out.data, out.len, 0644, &root, err);
    buf_fini(&cur);
    buf_fini(&out);
    if (rc < 0) return -1;
    char resolv[160], a[INET_ADDRSTRLEN];
    snprintf(resolv, sizeof resolv,
             "# written by rebuno sandboxd: the sandbox's DNS is its egress proxy\n"
             "nameserver %s\noptions timeout:2 attempts:2\n",
             ntoa(dns, a));
    return sbx_fs_replace(fs, "/etc/resolv.conf", resolv, strlen(resolv), 0644, &root, err);
}

static int run_nft(const char *script, struct err *err)
{
    char msg[256];
    int e = sbx_nft_run(script, msg, sizeof msg);
    if (e < 0)
        return err_set(err, 500, "network_failed", "", "nft: %s", msg[0] ? msg : strerror(-e));
    return 0;
}

static size_t members(struct sbx *s, const struct sbx_netsess *ns, const char *id,
                      struct in_addr *a, struct in_addr *b, size_t max)
{
    size_t k = 0;
    for (struct sbx *m = s->d->first; m && k < max; m = m->next) {
        if (m == s || !m->sess || !m->sess->net || strcmp(m->sess->net->joined, id) != 0) continue;
        a[k] = ns->veth.sbx_addr;
        b[k] = m->sess->net->veth.sbx_addr;
        k++;
    }
    return k;
}

static void set_forwarding(const struct sbx_veth *v, bool on)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/sys/net/ipv4/conf/%s/forwarding", v->host);
    sysctl_write(path, on ? "1" : "0");
}

static int net_join(struct sbx_net *n, struct sbx *s, struct sbx_netsess *ns, const char *id,
                    struct err *err)
{
    struct in_addr a[NETWORK_MEMBERS_MAX], b[NETWORK_MEMBERS_MAX];
    size_t k = members(s, ns, id, a, b, NETWORK_MEMBERS_MAX);
    if (k >= NETWORK_MEMBERS_MAX - 1)
        return err_set(err, 409, "network_full", "network_id",
                       "private network %s already has %d running members", id,
                       NETWORK_MEMBERS_MAX);
    if (k) {
        char *script = sbx_nft_pairs(n->nft.table, true, a, b, k);
        int rc = run_nft(script, err);
        free(script);
        if (rc < 0) return -1;
    }
    set_forwarding(&ns->veth, true);
    snprintf(ns->joined, sizeof ns->joined, "%s", id);
    log_info("sandbox joined a private network", "sandbox=%s network=%s peers=%zu", s->id, id, k);
    return 0;
}

static void net_leave(struct sbx_net *n, struct sbx *s, struct sbx_netsess *ns)
{
    if (!ns->joined[0]) return;
    struct in_addr a[NETWORK_MEMBERS_MAX], b[NETWORK_MEMBERS_MAX];
    size_t k = members(s, ns, ns->joined, a, b, NETWORK_MEMBERS_MAX);
    if (k) { /* add first, so the delete cannot fail on a missing element */
        char *add = sbx_nft_pairs(n->nft.table, true, a, b, k);
        char *del = sbx_nft_pairs(n->nft.table, false, a, b, k);
        char *script = xasprintf("%s%s", add, del);
        struct err e = ERR_INIT;
        if (run_nft(script, &e) < 0)
            log_error("cannot remove a sandbox from its private network", "sandbox=%s error=\"%s\"",
                      s->id, e.msg);
        free(add);
        free(del);
        free(script);
    }
    set_forwarding(&ns->veth, false);
    ns->joined[0] = '\0';
}

static void ports_close(struct sbx_netsess *ns, struct sbx_netcfg *c)
{
    for (int i = 0; i < ns->nfwd; i++) {
        for (int j = 0; c && j < c->nports; j++)
            if (c->ports[j] == ns->fwd_port[i]) c->host_ports[j] = sbx_fwd_port(ns->fwd[i]);
        sbx_fwd_free(ns->fwd[i]);
    }
    ns->nfwd = 0;
}

/* Make the session's forwarders match the configured ports. */
static int ports_sync(struct sbx_net *n, struct sbx *s, struct sbx_netsess *ns, struct err *err)
{
    struct sbx_netcfg *c = s->net;
    int k = 0;
    for (int i = 0; i < ns->nfwd; i++) { /* drop those no longer configured */
        bool keep = false;
        for (int j = 0; c && j < c->nports; j++)
            keep |= c->ports[j] == ns->fwd_port[i];
        if (keep) {
            ns->fwd[k] = ns->fwd[i];
            ns->fwd_port[k++] = ns->fwd_port[i];
        } else {
            sbx_fwd_free(ns->fwd[i]);
        }
    }
    ns->nfwd = k;
    for (int j = 0; c && j < c->nports; j++) {
        bool have = false;
        for (int i = 0; i < ns->nfwd; i++)
            have |= ns->fwd_port[i] == c->ports[j];
        if (have) continue;
        struct sockaddr_in to = {
            .sin_family = AF_INET, .sin_port = htons(c->ports[j]), .sin_addr = ns->veth.sbx_addr};
        int e = 0;
        struct sbx_fwd *f = sbx_fwd_new(n->d->base, c->host_ports[j], &to, &e);
        if (!f)
            return err_set(err, 500, "network_failed", "ports",
                           "cannot listen on a host port for port %u: %s", c->ports[j],
                           strerror(-e));
        ns->fwd[ns->nfwd] = f;
        ns->fwd_port[ns->nfwd++] = c->ports[j];
        c->host_ports[j] = sbx_fwd_port(f);
    }
    return 0;
}

static void detach(struct sbx_net *n, struct sbx *s, struct sbx_session *ss)
{
    struct sbx_netsess *ns = ss->net;
    if (!ns) return;
    ports_close(ns, s->net);
    if (ns->joined[0]) net_leave(n, s, ns);
    proxy_sandbox_free(ns->px);
    sbx_netpool_release(n->pool, &ns->veth);
    ss->net = NULL;
    free(ns);
}

static int attach(struct sbx_net *n, struct sbx *s, struct sbx_session *ss, struct err *err)
{
    int64_t t0 = mono_us();
    struct sbx_netsess *ns = xcalloc(1, sizeof *ns);
    int e = make_link(n, ss, &ns->veth);
    int64_t t1 = mono_us();
    if (e < 0) {
        free(ns);
        return err_set(err, 500, "network_failed", "", "cannot set up the sandbox's network: %s",
                       strerror(-e));
    }
    ns->px = proxy_sandbox_new(n->px, s->id, policy_of(n, s->net), CA_HOURS, err);
    if (!ns->px) {
        sbx_netpool_release(n->pool, &ns->veth);
        free(ns);
        return -1;
    }
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr = ns->veth.sbx_addr};
    proxy_sandbox_add_source(ns->px, (struct sockaddr *)&src, sizeof src);
    struct proxy_dns_config dns = {.have_a = true, .a = ns->veth.host_addr, .ttl = 60};
    proxy_sandbox_set_dns(ns->px, &dns);
    ss->net = ns;
    int64_t t2 = mono_us();
    char *pem = proxy_sandbox_ca_pem(ns->px);
    int rc = pem ? write_trust(ss, pem, ns->veth.host_addr, err)
                 : err_internal(err, "cannot encode the sandbox's CA certificate");
    free(pem);
    if (rc == 0 && s->net && s->net->network_id[0])
        rc = net_join(n, s, ns, s->net->network_id, err);
    if (rc == 0) rc = ports_sync(n, s, ns, err);
    if (rc < 0) {
        detach(n, s, ss);
        return -1;
    }
    char a[INET_ADDRSTRLEN];
    int64_t t3 = mono_us();
    log_info("sandbox network attached",
             "sandbox=%s link=%s address=%s us=%lld link_us=%lld ca_us=%lld files_us=%lld", s->id,
             ns->veth.host, ntoa(ns->veth.sbx_addr, a), (long long)(t3 - t0), (long long)(t1 - t0),
             (long long)(t2 - t1), (long long)(t3 - t2));
    return 0;
}

static int apply_live(struct sbx *s, struct sbx_session *ss, bool policy, struct err *err)
{
    struct sbx_net *n = s->d->net;
    if (!ss->net) return needs_net(s->net) ? attach(n, s, ss, err) : 0;
    struct sbx_netsess *ns = ss->net;
    if (policy) proxy_sandbox_set_policy(ns->px, policy_of(n, s->net));
    const char *want = s->net ? s->net->network_id : "";
    if (strcmp(ns->joined, want) != 0) {
        net_leave(n, s, ns);
        if (want[0] && net_join(n, s, ns, want, err) < 0) return -1;
    }
    return ports_sync(n, s, ns, err);
}

int sbx_net_session_start(struct sbx *s, struct sbx_session *ss, struct err *err)
{
    struct sbx_net *n = s->d->net;
    ss->net = NULL;
    if (!n || !n->enabled || !needs_net(s->net)) return 0;
    return attach(n, s, ss, err);
}

void sbx_net_session_end(struct sbx *s, struct sbx_session *ss)
{
    struct sbx_net *n = s->d->net;
    if (n && ss->net) detach(n, s, ss);
}

/* ------------------------------------------------------------------ the daemon */

static uint32_t tag_of(const char *state_dir)
{
    return (uint32_t)(sbx_daemon_id(state_dir) & 0xffffff);
}

/* Delete the table of a daemon that is gone. 0, or -errno with nft's words logged. */
static int drop_table(const char *table)
{
    char *drop = sbx_nft_drop_table(table);
    char msg[200];
    int e = sbx_nft_run(drop, msg, sizeof msg);
    free(drop);
    if (e < 0)
        log_warn("cannot remove a dead sandboxd's nftables table", "table=%s error=\"%s\"", table,
                 msg);
    return e;
}

int sbx_net_reap(uint32_t tag)
{
    int lock = sbx_netpool_reap(tag);
    if (lock < 0) return lock;
    char table[32];
    snprintf(table, sizeof table, "rebuno_%06x", tag & 0xffffff);
    int e = sbx_nft_path() ? drop_table(table) : 0;
    close(lock);
    return e;
}

static int parse_cidr(const char *s, struct in_addr *base, int *prefix)
{
    char ip[32];
    const char *slash = strchr(s, '/');
    if (!slash || (size_t)(slash - s) >= sizeof ip) return -EINVAL;
    memcpy(ip, s, (size_t)(slash - s));
    ip[slash - s] = '\0';
    char *end;
    long p = strtol(slash + 1, &end, 10);
    if (*end || p < 8 || p > 24 || inet_pton(AF_INET, ip, base) != 1) return -EINVAL;
    uint32_t mask = p == 0 ? 0 : 0xffffffffu << (32 - p);
    if (ntohl(base->s_addr) & ~mask) return -EINVAL;
    *prefix = (int)p;
    return 0;
}

struct sweep_ctx {
    struct sbx_net *n;
    char names[16][64];
    int count;
};

static void dead_table(const char *name, void *arg)
{
    struct sweep_ctx *c = arg;
    const char *hex = name + strlen("rebuno_");
    char *end;
    unsigned long tag = strtoul(hex, &end, 16);
    if (*end || strlen(hex) != 6 || c->count >= 16) return;
    if (sbx_netpool_tag_alive(c->n->pool, (uint32_t)tag)) return; /* ours, or alive */
    snprintf(c->names[c->count++], 64, "%s", name);
}

static void turn_off(struct sbx_net *n, const char *why)
{
    n->enabled = false;
    snprintf(n->why_off, sizeof n->why_off, "%.190s", why);
}

static int start_network(struct sbx_net *n, struct err *err)
{
    const struct sbxd_config *cfg = &n->d->cfg;
    struct proxy_config pc = {.upstream_ca_file = cfg->upstream_ca};
    n->px = proxy_new(n->d->base, &pc, err);
    if (!n->px) return -1;
    for (int i = 0; i < cfg->n_upstream_overrides; i++) {
        const char *o = cfg->upstream_overrides[i];
        const char *eq = strchr(o, '=');
        if (!eq || eq == o || strlen(o) > 400)
            return err_invalid(err, "upstream_override",
                               "--upstream-override \"%.80s\": use HOST[:80|:443]=ADDR:PORT", o);
        char host[300];
        snprintf(host, sizeof host, "%.*s", (int)(eq - o), o);
        if (proxy_add_override(n->px, host, eq + 1, err) < 0) return -1;
    }
    int tport = proxy_listen(n->px, PROXY_ROLE_TRANSPARENT, "0.0.0.0:0", NULL, err);
    if (tport <= 0) return -1;
    int dport = proxy_listen(n->px, PROXY_ROLE_DNS, "0.0.0.0:0", NULL, err);
    if (dport <= 0) return -1;
    struct sbx_netpool_conf pc2 = {.tag = tag_of(n->d->state_dir)};
    if (parse_cidr(cfg->net_cidr ? cfg->net_cidr : DEFAULT_CIDR, &pc2.base, &pc2.prefix) < 0)
        return err_invalid(err, "net_cidr",
                           "--net-cidr \"%s\": use an IPv4 network from /8 to /24, e.g. %s",
                           cfg->net_cidr, DEFAULT_CIDR);
    n->pool = sbx_netpool_open(&pc2, err);
    if (!n->pool) return -1;
    snprintf(n->nft.table, sizeof n->nft.table, "rebuno_%06x", pc2.tag);
    snprintf(n->nft.ifprefix, sizeof n->nft.ifprefix, "%s", sbx_netpool_prefix(n->pool));
    n->nft.proxy_port = (uint16_t)tport;
    n->nft.dns_port = (uint16_t)dport;
    /* tables of daemons that are gone (their tag lock is free) */
    struct sweep_ctx sc = {.n = n};
    sbx_nft_tables("rebuno_", dead_table, &sc);
    for (int i = 0; i < sc.count; i++) {
        if (!strcmp(sc.names[i], n->nft.table)) continue; /* replaced below */
        if (drop_table(sc.names[i]) == 0)
            log_info("removed a dead sandboxd's nftables table", "table=%s", sc.names[i]);
    }
    char *rules = sbx_nft_ruleset(&n->nft);
    char msg[256];
    int e = sbx_nft_run(rules, msg, sizeof msg);
    free(rules);
    if (e < 0)
        return err_set(err, 500, "network_failed", "", "cannot load the nftables rules: %s", msg);
    n->nft_loaded = true;
    return 0;
}

static void stop_network(struct sbx_net *n)
{
    if (n->pool) sbx_netpool_close(n->pool);
    n->pool = NULL;
    if (n->nft_loaded) {
        char *drop = sbx_nft_drop_table(n->nft.table);
        char msg[200];
        if (sbx_nft_run(drop, msg, sizeof msg) < 0)
            log_error("cannot remove the nftables table", "table=%s error=\"%s\"", n->nft.table,
                      msg);
        free(drop);
        n->nft_loaded = false;
    }
    proxy_free(n->px);
    n->px = NULL;
}

int sbx_net_open(struct sbxd *d, struct err *err)
{
    struct sbx_net *n = xcalloc(1, sizeof *n);
    n->d = d;
    n->root_ns = -1;
    n->deny = proxy_policy_new_mode(PROXY_POLICY_DENY_ALL);
    d->net = n;
    sqlite3 *db = sbx_store_db(d->store);
    if (sqlite3_exec(db, net_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO sandbox_network(id, policy, network_id, ports)"
                           " VALUES(?1,?2,?3,?4) ON CONFLICT(id) DO UPDATE SET policy=?2,"
                           " network_id=?3, ports=?4",
                           -1, &n->save, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "DELETE FROM sandbox_network WHERE id = ?1", -1, &n->del, NULL) !=
            SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "network settings table: %s",
                       sqlite3_errmsg(db));
    if (load_rows(n, err) < 0) return -1;
    const char *mode = d->cfg.net_mode ? d->cfg.net_mode : "auto";
    if (!strcmp(mode, "off")) {
        turn_off(n, "started with --network off");
        return 0;
    }
    if (strcmp(mode, "auto") != 0 && strcmp(mode, "on") != 0)
        return err_invalid(err, "network", "--network must be auto, on or off");
    bool required = !strcmp(mode, "on");
    if (!sbx_nft_path()) {
        if (required) return err_set(err, 500, "network_failed", "", "nft is not installed");
        turn_off(n, "nft is not installed");
        log_warn("sandbox networking is off: nft is not installed (apt-get install nftables)", "%s",
                 "");
        return 0;
    }
    n->root_ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (n->root_ns < 0)
        return err_internal(err, "cannot open the daemon's network namespace: %s", strerror(errno));
    struct err e2 = ERR_INIT;
    if (start_network(n, &e2) < 0) {
        if (required || !strcmp(e2.code, "validation_error")) {
            *err = e2;
            return -1;
        }
        stop_network(n);
        turn_off(n, e2.msg);
        log_warn("sandbox networking is off", "error=\"%s\"", e2.msg);
        return 0;
    }
    n->enabled = true;
    log_info("sandbox networking ready", "table=%s links=%s* proxy_port=%u dns_port=%u",
             n->nft.table, n->nft.ifprefix, n->nft.proxy_port, n->nft.dns_port);
    return 0;
}

void sbx_net_close(struct sbxd *d)
{
    struct sbx_net *n = d->net;
    if (!n) return;
    for (struct sbx *s = d->first; s; s = s->next) /* normally already done by the stops */
        if (s->sess && s->sess->net) detach(n, s, s->sess);
    stop_network(n);
    if (n->root_ns >= 0) close(n->root_ns);
    sqlite3_finalize(n->save);
    sqlite3_finalize(n->del);
    proxy_policy_unref(n->deny);
    free(n);
    d->net = NULL;
}
