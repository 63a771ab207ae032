/*
 * proxy.c - the egress proxy engine: sandbox contexts, listeners, the DNS
 * responder, the leaf-certificate cache and live policy updates (see proxy.h;
 * connections themselves are in conn.c).
 *
 * The engine owns two worker pools (worker.h): a one-thread signer that runs
 * proxy_ca_mint() (so a CA's private key is only ever used on that thread, never
 * on the loop that talks to sandboxes) and a small resolver pool for getaddrinfo.
 * Each sandbox caches up to PROXY_LEAF_CACHE leaves (least recently used out,
 * re-minted an hour before they expire); connections that need a leaf being
 * minted wait on it and continue when it arrives.
 */
#include "proxy/proxy_int.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "proxy/addr.h"

#include <errno.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BACKOFF_MS 100

int64_t proxy_now_ms(void)
{
    return clock_mono_ms();
}

void proxy_rst_fd(evutil_socket_t fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* ------------------------------------------------------------------ TLS contexts */

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    static const unsigned char h11[] = "\x08http/1.1";
    unsigned char *o;
    if (SSL_select_next_proto(&o, outlen, h11, sizeof h11 - 1, in, inlen) ==
        OPENSSL_NPN_NEGOTIATED) {
        *out = o;
        return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_NOACK; /* no ALPN: the client speaks HTTP/1.1 or gives up */
}

static SSL_CTX *leaf_ctx_new(const struct proxy_ca *ca, X509 *cert)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    if (SSL_CTX_use_certificate(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey(ctx, proxy_ca_leaf_key(ca)) != 1) {
        SSL_CTX_free(ctx);
        ERR_clear_error();
        return NULL;
    }
    return ctx;
}

static SSL_CTX *up_ctx_new(const struct proxy_config *cfg, struct err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        err_internal(err, "cannot create the upstream TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    static const unsigned char h11[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, h11, sizeof h11 - 1);
    /* sessions are kept by us, per host (proxy_session_put via conn.c's callback) */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, proxy_conn_new_session);
    if (!cfg->no_system_trust && SSL_CTX_set_default_verify_paths(ctx) != 1) {
        err_internal(err, "cannot load the system trust store");
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (cfg->upstream_ca_file &&
        SSL_CTX_load_verify_locations(ctx, cfg->upstream_ca_file, NULL) != 1) {
        unsigned long e = ERR_get_error();
        char buf[200] = "";
        ERR_error_string_n(e, buf, sizeof buf);
        ERR_clear_error();
        err_invalid(err, "upstream_ca", "%s: cannot load as PEM certificates: %s",
                    cfg->upstream_ca_file, buf);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* ------------------------------------------------------------------ upstream sessions */

SSL_SESSION *proxy_session_get(struct proxy *p, const char *host)
{
    for (size_t i = 0; i < p->nsessions; i++)
        if (!strcmp(p->sessions[i].host, host)) {
            p->sessions[i].last_used = ++p->session_clock;
            return p->sessions[i].sess;
        }
    return NULL;
}

void proxy_session_put(struct proxy *p, const char *host, SSL_SESSION *sess)
{
    size_t i = 0, lru = 0;
    for (; i < p->nsessions && strcmp(p->sessions[i].host, host) != 0; i++)
        if (p->sessions[i].last_used < p->sessions[lru].last_used) lru = i;
    if (i == p->nsessions) {
        if (p->nsessions < PROXY_SESSION_CACHE)
            p->nsessions++;
        else
            i = lru;
        snprintf(p->sessions[i].host, sizeof p->sessions[i].host, "%s", host);
    }
    SSL_SESSION_free(p->sessions[i].sess);
    p->sessions[i].sess = sess;
    p->sessions[i].last_used = ++p->session_clock;
}

/* ------------------------------------------------------------------ leaf cache */

struct mint_job {
    struct proxy_leaf *leaf;
    struct proxy_ca *ca;
    char host[PROXY_HOST_MAX + 1];
    int hours;
    X509 *cert;
};

static void mint_work(void *arg)
{
    struct mint_job *j = arg;
    struct err e = ERR_INIT;
    j->cert = proxy_ca_mint(j->ca, j->host, j->hours, &e);
}

static void mint_drop(void *arg)
{
    struct mint_job *j = arg;
    X509_free(j->cert);
    proxy_ca_unref(j->ca);
    free(j);
}

static void mint_done(void *arg)
{
    struct mint_job *j = arg;
    struct proxy_leaf *leaf = j->leaf;
    struct proxy_sandbox *s = leaf->sbx;
    leaf->job = NULL;
    if (j->cert) leaf->ctx = leaf_ctx_new(s->ca, j->cert);
    if (leaf->ctx) {
        int64_t life = (int64_t)j->hours * 3600 * 1000;
        leaf->expires_ms = proxy_now_ms() + (life > 7200000 ? life - 3600000 : life / 2);
        s->st.leaves_minted++;
    } else {
        log_error("egress leaf minting failed", "sandbox=%s host=%s", s->id, leaf->host);
    }
    mint_drop(j);
    proxy_leaf_ready(leaf);
}

static void leaf_submit(struct proxy_sandbox *s, struct proxy_leaf *leaf)
{
    struct mint_job *j = xcalloc(1, sizeof *j);
    j->leaf = leaf;
    j->ca = proxy_ca_ref(s->ca);
    j->hours = s->px->cfg.leaf_valid_hours;
    snprintf(j->host, sizeof j->host, "%s", leaf->host);
    leaf->job = proxy_worker_submit(s->px->signer, mint_work, mint_done, mint_drop, j);
}

static void leaf_free(struct proxy_leaf *leaf)
{
    ASSERT(leaf->waiters == NULL);
    if (leaf->job) proxy_worker_cancel(leaf->job);
    SSL_CTX_free(leaf->ctx);
    free(leaf);
}

struct proxy_leaf *proxy_leaf_get(struct proxy_sandbox *s, const char *host)
{
    int64_t now = proxy_now_ms();
    for (size_t i = 0; i < s->nleaves; i++) {
        struct proxy_leaf *e = s->leaves[i];
        if (strcmp(e->host, host) != 0) continue;
        e->last_used = ++s->use_clock;
        if (e->ctx && e->expires_ms <= now) {
            SSL_CTX_free(e->ctx);
            e->ctx = NULL;
        }
        if (!e->ctx && !e->job) leaf_submit(s, e);
        return e;
    }
    if (s->nleaves == PROXY_LEAF_CACHE) {
        size_t victim = PROXY_LEAF_CACHE;
        for (size_t i = 0; i < s->nleaves; i++) {
            struct proxy_leaf *e = s->leaves[i];
            if (e->job || e->waiters) continue;
            if (victim == PROXY_LEAF_CACHE || e->last_used < s->leaves[victim]->last_used)
                victim = i;
        }
        if (victim == PROXY_LEAF_CACHE) return NULL;
        leaf_free(s->leaves[victim]);
        s->leaves[victim] = s->leaves[--s->nleaves];
    }
    struct proxy_leaf *e = xcalloc(1, sizeof *e);
    e->sbx = s;
    snprintf(e->host, sizeof e->host, "%s", host);
    e->last_used = ++s->use_clock;
    s->leaves[s->nleaves++] = e;
    leaf_submit(s, e);
    return e;
}

/* ------------------------------------------------------------------ engine */

struct proxy *proxy_new(struct event_base *base, const struct proxy_config *cfg, struct err *err)
{
    struct proxy *p = xcalloc(1, sizeof *p);
    p->base = base;
    if (cfg) p->cfg = *cfg;
    if (p->cfg.max_conns <= 0) p->cfg.max_conns = 4096;
    if (p->cfg.max_conns_per_sandbox <= 0) p->cfg.max_conns_per_sandbox = 1024;
    if (p->cfg.handshake_timeout_ms <= 0) p->cfg.handshake_timeout_ms = 10000;
    if (p->cfg.idle_timeout_ms <= 0) p->cfg.idle_timeout_ms = 300000;
    if (p->cfg.buffer_max == 0) p->cfg.buffer_max = 256 * 1024;
    if (p->cfg.buffer_max < 16 * 1024) p->cfg.buffer_max = 16 * 1024;
    if (p->cfg.leaf_valid_hours <= 0) p->cfg.leaf_valid_hours = 24;
    p->cfg.upstream_ca_file = NULL; /* only used while building up_ctx below */
    p->up_ctx = up_ctx_new(cfg ? cfg : &p->cfg, err);
    if (!p->up_ctx) goto fail;
    p->signer = proxy_worker_new(base, 1, err);
    if (!p->signer) goto fail;
    p->resolver = proxy_worker_new(base, 2, err);
    if (!p->resolver) goto fail;
    return p;
fail:
    proxy_free(p);
    return NULL;
}

static void listener_free(struct proxy_listener *l)
{
    if (l->lev) evconnlistener_free(l->lev);
    if (l->resume_ev) event_free(l->resume_ev);
    if (l->udp_ev) event_free(l->udp_ev);
    if (l->udp_fd >= 0) close(l->udp_fd);
    free(l);
}

void proxy_free(struct proxy *p)
{
    if (!p) return;
    while (p->sandboxes)
        proxy_sandbox_free(p->sandboxes);
    while (p->listeners) {
        struct proxy_listener *l = p->listeners;
        p->listeners = l->next;
        listener_free(l);
    }
    proxy_worker_free(p->resolver);
    proxy_worker_free(p->signer);
    SSL_CTX_free(p->up_ctx);
    for (size_t i = 0; i < p->nsessions; i++)
        SSL_SESSION_free(p->sessions[i].sess);
    free(p->ov);
    free(p->src);
    free(p);
}

int proxy_add_override(struct proxy *p, const char *host, const char *addr, struct err *err)
{
    char h[PROXY_HOST_MAX + 1];
    uint16_t port = 0;
    const char *colon = strrchr(host, ':');
    size_t hl = colon ? (size_t)(colon - host) : strlen(host);
    if (colon) {
        if (!strcmp(colon, ":80"))
            port = 80;
        else if (!strcmp(colon, ":443"))
            port = 443;
        else
            return err_invalid(err, "upstream_override",
                               "upstream override \"%.80s\": the "
                               "port may only be :80 or :443",
                               host);
    }
    if (proxy_host_normalize(host, hl, false, h) < 0)
        return err_invalid(err, "upstream_override",
                           "upstream override \"%.80s\": not a host "
                           "name",
                           host);
    struct sockaddr_storage ss;
    socklen_t len;
    if (proxy_addr_parse(addr, &ss, &len) < 0)
        return err_invalid(err, "upstream_override",
                           "upstream override for %s: \"%.80s\" is "
                           "not a numeric address:port (\"127.0.0.1:"
                           "8443\", \"[::1]:8443\")",
                           h, addr);
    size_t i = 0;
    while (i < p->nov && (strcmp(p->ov[i].host, h) != 0 || p->ov[i].port != port))
        i++;
    if (i == p->nov) p->ov = xrealloc(p->ov, ++p->nov * sizeof *p->ov);
    snprintf(p->ov[i].host, sizeof p->ov[i].host, "%s", h);
    p->ov[i].port = port;
    p->ov[i].addr = ss;
    p->ov[i].len = len;
    return 0;
}

const struct proxy_override *proxy_find_override(const struct proxy *p, const char *host,
                                                 uint16_t port)
{
    const struct proxy_override *any = NULL;
    for (size_t i = 0; i < p->nov; i++) {
        if (strcmp(p->ov[i].host, host) != 0) continue;
        if (p->ov[i].port == port) return &p->ov[i];
        if (p->ov[i].port == 0) any = &p->ov[i];
    }
    return any;
}

/* ------------------------------------------------------------------ listeners */

struct proxy_sandbox *proxy_find_source(struct proxy *px, const struct sockaddr *peer)
{
    for (size_t i = 0; i < px->nsrc; i++)
        if (proxy_addr_same_host((struct sockaddr *)&px->src[i].addr, peer)) return px->src[i].sbx;
    return NULL;
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int len,
                      void *arg)
{
    proxy_conn_accept(arg, fd, sa, len);
}

static void accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct proxy_listener *l = arg;
    evconnlistener_enable(l->lev);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
    struct proxy_listener *l = arg;
    int e = EVUTIL_SOCKET_ERROR();
    log_error("egress accept failed", "err=\"%s\" backoff_ms=%d", evutil_socket_error_to_string(e),
              ACCEPT_BACKOFF_MS);
    /* EMFILE and friends: pause instead of spinning */
    evconnlistener_disable(lev);
    struct timeval tv = {0, ACCEPT_BACKOFF_MS * 1000};
    if (!l->resume_ev) l->resume_ev = evtimer_new(l->px->base, accept_resume, l);
    event_add(l->resume_ev, &tv);
}

static bool dns_allowed(const char *name, void *arg)
{
    struct proxy_sandbox *s = arg;
    struct proxy_verdict v;
    proxy_policy_match(s->policy, name, &v);
    return v.kind != PROXY_DENY;
}

static void dns_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct proxy_listener *l = arg;
    for (int i = 0; i < 64; i++) {
        uint8_t q[1500], out[PROXY_DNS_MAX_PACKET];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n < 0) break;
        struct proxy_sandbox *s =
            l->sbx ? l->sbx : proxy_find_source(l->px, (struct sockaddr *)&from);
        if (!s) {
            l->px->st.limit_rejected++;
            continue;
        }
        s->st.dns_queries++;
        char name[PROXY_HOST_MAX + 1];
        int rcode = 0;
        int len = proxy_dns_answer(q, (size_t)n, out, &s->dns, dns_allowed, s, name, &rcode);
        if (len < 0) continue;
        if (rcode == PROXY_DNS_NOERROR)
            s->st.dns_answered++;
        else if (rcode == PROXY_DNS_NXDOMAIN)
            s->st.dns_nxdomain++;
        log_debug("egress dns", "sandbox=%s name=%s rcode=%d", s->id, name[0] ? name : "-", rcode);
        sendto(fd, out, (size_t)len, 0, (struct sockaddr *)&from, fl);
    }
}

int proxy_listen(struct proxy *p, enum proxy_role role, const char *addr, struct proxy_sandbox *s,
                 struct err *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (proxy_addr_parse(addr, &ss, &len) < 0)
        return err_invalid(err, "listen",
                           "listen address \"%.80s\": use host:port with a "
                           "numeric host (\"127.0.0.1:0\", \"[::1]:8443\")",
                           addr);
    struct proxy_listener *l = xcalloc(1, sizeof *l);
    l->px = p;
    l->sbx = s;
    l->role = role;
    l->udp_fd = -1;
    evutil_socket_t fd;
    if (role == PROXY_ROLE_DNS) {
        fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            free(l);
            return err_set(err, 500, "listen_failed", "listen", "cannot listen on udp %s: %s", addr,
                           strerror(e));
        }
        l->udp_fd = fd;
        l->udp_ev = event_new(p->base, fd, EV_READ | EV_PERSIST, dns_read_cb, l);
        event_add(l->udp_ev, NULL);
    } else {
        l->lev = evconnlistener_new_bind(p->base, accept_cb, l,
                                         LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                             LEV_OPT_CLOSE_ON_EXEC,
                                         1024, (struct sockaddr *)&ss, (int)len);
        if (!l->lev) {
            int e = errno;
            free(l);
            return err_set(err, 500, "listen_failed", "listen", "cannot listen on %s: %s", addr,
                           strerror(e));
        }
        evconnlistener_set_error_cb(l->lev, accept_error_cb);
        fd = evconnlistener_get_fd(l->lev);
    }
    l->next = p->listeners;
    p->listeners = l;
    struct sockaddr_storage b;
    socklen_t bl = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&b, &bl) < 0) return 0;
    return ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                         : ((struct sockaddr_in *)&b)->sin_port);
}

/* ------------------------------------------------------------------ sandboxes */

struct proxy_sandbox *proxy_sandbox_new(struct proxy *p, const char *id,
                                        struct proxy_policy *policy, int ca_valid_hours,
                                        struct err *err)
{
    struct proxy_ca *ca = proxy_ca_new(id, ca_valid_hours > 0 ? ca_valid_hours : 168, err);
    if (!ca) return NULL;
    struct proxy_sandbox *s = xcalloc(1, sizeof *s);
    s->px = p;
    snprintf(s->id, sizeof s->id, "%s", id && *id ? id : "-");
    s->policy = proxy_policy_ref(policy);
    s->generation = 1;
    s->ca = ca;
    s->dns.ttl = 60;
    s->next = p->sandboxes;
    if (s->next) s->next->prev = s;
    p->sandboxes = s;
    return s;
}

void proxy_sandbox_free(struct proxy_sandbox *s)
{
    if (!s) return;
    struct proxy *p = s->px;
    while (s->conns)
        proxy_conn_abort(s->conns);
    for (size_t i = 0; i < s->nleaves; i++)
        leaf_free(s->leaves[i]);
    for (struct proxy_listener **pp = &p->listeners; *pp;) {
        struct proxy_listener *l = *pp;
        if (l->sbx == s) {
            *pp = l->next;
            listener_free(l);
        } else {
            pp = &l->next;
        }
    }
    size_t j = 0;
    for (size_t i = 0; i < p->nsrc; i++)
        if (p->src[i].sbx != s) p->src[j++] = p->src[i];
    p->nsrc = j;
    /* fold the counters into the engine's so totals stay monotonic */
    uint64_t *dst = (uint64_t *)&p->st;
    const uint64_t *src = (const uint64_t *)&s->st;
    for (size_t i = 0; i < sizeof s->st / sizeof(uint64_t); i++)
        dst[i] += src[i];
    if (s->prev)
        s->prev->next = s->next;
    else
        p->sandboxes = s->next;
    if (s->next) s->next->prev = s->prev;
    proxy_policy_unref(s->policy);
    proxy_ca_unref(s->ca);
    free(s);
}

void proxy_sandbox_set_policy(struct proxy_sandbox *s, struct proxy_policy *policy)
{
    proxy_policy_ref(policy);
    proxy_policy_unref(s->policy);
    s->policy = policy;
    s->generation++;
    log_info("egress policy updated", "sandbox=%s generation=%llu mode=%d domains=%zu", s->id,
             (unsigned long long)s->generation, (int)proxy_policy_mode(policy),
             proxy_policy_domain_count(policy));
    for (struct proxy_conn *c = s->conns; c;) {
        struct proxy_conn *next = proxy_conn_next(c);
        proxy_conn_policy_changed(c);
        c = next;
    }
}

struct proxy_policy *proxy_sandbox_policy(const struct proxy_sandbox *s)
{
    return s->policy;
}

uint64_t proxy_sandbox_generation(const struct proxy_sandbox *s)
{
    return s->generation;
}

void proxy_sandbox_set_dns(struct proxy_sandbox *s, const struct proxy_dns_config *cfg)
{
    s->dns = *cfg;
}

int proxy_sandbox_add_source(struct proxy_sandbox *s, const struct sockaddr *addr, socklen_t len)
{
    struct proxy *p = s->px;
    if (len > sizeof p->src[0].addr) return -EINVAL;
    if (proxy_find_source(p, addr)) return -EEXIST;
    p->src = xrealloc(p->src, (p->nsrc + 1) * sizeof *p->src);
    memset(&p->src[p->nsrc], 0, sizeof p->src[p->nsrc]);
    memcpy(&p->src[p->nsrc].addr, addr, len);
    p->src[p->nsrc].len = len;
    p->src[p->nsrc].sbx = s;
    p->nsrc++;
    return 0;
}

int proxy_sandbox_write_ca(const struct proxy_sandbox *s, const char *path, struct err *err)
{
    return proxy_ca_write_cert_pem(s->ca, path, err);
}

char *proxy_sandbox_ca_pem(const struct proxy_sandbox *s)
{
    return proxy_ca_cert_pem(s->ca);
}

void proxy_sandbox_stats(const struct proxy_sandbox *s, struct proxy_stats *out)
{
    *out = s->st;
}

void proxy_stats(const struct proxy *p, struct proxy_stats *out)
{
    *out = p->st;
    uint64_t *dst = (uint64_t *)out;
    for (const struct proxy_sandbox *s = p->sandboxes; s; s = s->next) {
        const uint64_t *src = (const uint64_t *)&s->st;
        for (size_t i = 0; i < sizeof s->st / sizeof(uint64_t); i++)
            dst[i] += src[i];
    }
}
