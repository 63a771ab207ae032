/*
 * conn.c - one proxied TCP connection from a sandbox (see proxy.h for the flows).
 *
 * A connection has two sides, `down` (the sandbox) and `up` (the real server),
 * each a libevent socket bufferevent. TLS, when the proxy terminates it, is done
 * by OpenSSL reading and writing the bufferevents' buffers directly (a small BIO
 * type over evbuffers), not the sockets: plaintext moves between the two sides'
 * SSL objects. That keeps every byte in buffers the proxy controls: the
 * ClientHello read for the SNI stays in the down side's input and is simply fed
 * to the server handshake (intercept) or forwarded (pass); nothing is consumed
 * twice or lost. Passthrough connections switch to splice(2) once the hello is
 * forwarded (see "zero-copy passthrough").
 *
 * States, in order (a connection skips those that do not apply):
 *   SNIFF (443) / HEAD (80)  read until the SNI / first Host is known; decide
 *   RESOLVE                  override table, else getaddrinfo on the resolver pool; the
 *                            addresses the policy's ranges refuse are dropped (conn_match)
 *   CONNECT                  TCP to the upstream (next address on failure)
 *   UP_TLS                   intercept: verify the real server (host = SNI)
 *   LEAF                     intercept: wait for the minted certificate
 *   DOWN_TLS                 intercept: the sandbox's handshake, http/1.1 only
 *   RELAY                    both directions; requests rewritten in HTTP modes
 *   CLOSING                  flushing a refusal response, then close
 *
 * Routed connections (the domain has forwardURL or response rules, policy.h) skip
 * RESOLVE..UP_TLS at first: LEAF, DOWN_TLS, RELAY with no upstream at all. The rewriter
 * runs serially there (one forwarded request until its response has ended), and each
 * request names its target (the host, a forward URL, or none when the policy answers
 * it): route_start() drops an upstream for another target, or one that has ended, and
 * goes through RESOLVE..UP_TLS again, back to RELAY; a failure then is a 502/504 answer
 * (up_refuse), not a reset, since the sandbox already has its channel.
 *
 * In HTTP modes the upstream's bytes are shown to the rewriter's response tracker
 * (http_rw.h) on their way back. After an Upgrade request the client side is not read
 * until that tracker has seen the answer: a 101 makes the connection opaque both
 * ways (raw_up), anything else resumes parsing where it stopped (the bytes it had not
 * taken stay in the socket's input, or in `held` when they were already decrypted).
 *
 * Flow control: each direction stops reading its source while the destination has
 * cfg.buffer_max bytes queued (plaintext queue + socket output); the
 * destination's write callback (low watermark) resumes it. EOF is passed on as a
 * half-close (close_notify and/or shutdown(SHUT_WR)); the connection ends when
 * both directions are finished and flushed, on any error, or on a timeout.
 *
 * Refusals before the sandbox got any byte from us are TCP resets (SO_LINGER 0).
 * Re-entrancy: every callback ends in conn_run() or a close; helpers that may
 * free the connection return false, and callers return at once.
 */
#include "proxy/proxy_int.h"

#include "base/log.h"
#include "base/xalloc.h"
#include "proxy/addr.h"
#include "proxy/http_rw.h"
#include "proxy/sni.h"

#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80 /* linux/netfilter_ipv6/ip6_tables.h */
#endif

#define SNIFF_MAX (PROXY_SNI_MAX_HELLO + 4096) /* record headers of a split hello */
#define CLOSE_LINGER_MS 2000
#define MAX_ADDRS 8
#define IO_CHUNK (128 * 1024)       /* bytes per read()/write() call (libevent's default: 16 KiB) */
#define SPLICE_PIPE_MIN (64 * 1024) /* a splicing pipe's first size (the kernel's default) */
#define SPLICE_PIPE_MAX (1024 * 1024) /* grown x4 at a time while reads fill it (splice_grow) */

enum conn_state {
    CS_SNIFF,
    CS_HEAD,
    CS_RESOLVE,
    CS_CONNECT,
    CS_UP_TLS,
    CS_LEAF,
    CS_DOWN_TLS,
    CS_RELAY,
    CS_CLOSING
};
enum conn_mode { M_PASS, M_INTERCEPT, M_HTTP };

struct side {
    struct bufferevent *bev;
    SSL *ssl;
    bool wrote;     /* TLS wrote bytes to this side */
    bool ready;     /* connected (and handshake done when TLS) */
    bool sock_eof;  /* the socket reported EOF */
    bool done;      /* nothing more will come from this side */
    bool shut_sent; /* we finished writing to it (close_notify queued) */
    bool wr_shut;   /* shutdown(SHUT_WR) done */
};

struct splice_dir {
    struct proxy_conn *conn;
    int from, to; /* sockets (owned by the bufferevents) */
    int pipe[2];
    size_t in_pipe, cap;
    bool grow; /* cap < SPLICE_PIPE_MAX and growing has not failed */
    bool eof;  /* `from` reached EOF */
    bool shut; /* shutdown(to, SHUT_WR) done */
    bool short_read;
    struct event *rd, *wr;
};

struct resolve_job {
    struct proxy_conn *c;
    char host[PROXY_HOST_MAX + 1];
    char port[8];
    int rc;
    struct addrinfo *ai;
};

/* What the upstream side is (or is being) connected to. */
struct up_target {
    char host[PROXY_HOST_MAX + 1]; /* "" = none */
    uint16_t port;
    bool tls;
};

struct proxy_conn {
    struct proxy *px;
    struct proxy_sandbox *sbx;
    struct proxy_conn *prev, *next;
    uint64_t id;
    enum conn_state state;
    enum conn_mode mode;
    uint16_t up_port;
    struct side down, up;
    struct evbuffer *to_up, *to_down; /* plaintext waiting for the other side */
    char host[PROXY_HOST_MAX + 1];
    enum proxy_verdict_kind admitted;
    char orig[INET_ADDRSTRLEN]; /* the IPv4 address the sandbox dialled ("" unknown) */
    bool by_addr; /* admitted for its address alone (no domain allows the name): the
                     upstream is the address dialled, the name is never looked up */
    uint64_t generation;
    struct proxy_http *http;
    uint64_t req_seen, inj_seen;
    struct evbuffer *held; /* client plaintext the rewriter does not take yet (TLS side;
                              made on first use) */
    bool raw_up;           /* after the upstream's 101: client bytes are opaque */
    bool kick_down;        /* the upstream's answer ended a wait: run the client side again */
    bool sent_to_client;   /* decides reset vs close */
    struct event *timer;
    int64_t last_ms;
    struct proxy_job *resolving;
    bool override;
    struct sockaddr_storage addrs[MAX_ADDRS];
    socklen_t alen[MAX_ADDRS];
    int naddrs, addr_i;
    struct proxy_leaf *leaf; /* waiting on it */
    struct proxy_conn *leaf_next;
    SSL_CTX *leaf_ctx;       /* referenced */
    const char *why;         /* why it ended, for the log */
    bool spliced;            /* passthrough moved to splice(2); the bufferevents are idle */
    struct splice_dir sp[2]; /* [0] sandbox -> upstream, [1] upstream -> sandbox */
    /* per-request routing (the domain has forward or response rules) */
    bool routed;          /* the upstream is chosen per request; none until one is needed */
    struct up_target cur; /* the upstream side's target */
    struct up_target want;
    bool want_up; /* the request just read needs `want`: switch before sending it */
    uint64_t fwd_seen, resp_seen;
    struct proxy_header *scratch; /* PROXY_POLICY_MAX_HEADERS, with http: the headers set */
};

static void conn_run(struct proxy_conn *c);
static void conn_free(struct proxy_conn *c);
static void up_read_cb(struct bufferevent *b, void *arg);
static void write_cb(struct bufferevent *b, void *arg);
static void up_event_cb(struct bufferevent *b, short what, void *arg);
static int http_decide(void *arg, const char *host, const struct proxy_request *rq,
                       struct proxy_action *act, const char **why);

/* ------------------------------------------------------------------ helpers */

static struct proxy_stats *st(struct proxy_conn *c)
{
    return &c->sbx->st;
}

static size_t blen(struct bufferevent *b, bool out)
{
    if (!b) return 0;
    return evbuffer_get_length(out ? bufferevent_get_output(b) : bufferevent_get_input(b));
}

static void set_rst(struct bufferevent *b)
{
    if (!b) return;
    evutil_socket_t fd = bufferevent_getfd(b);
    if (fd < 0) return;
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

static void arm_timer(struct proxy_conn *c, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(c->timer, &tv);
}

/* End the connection. rst: reset both sockets (always when the sandbox got nothing). */
static void conn_close(struct proxy_conn *c, bool rst, const char *why)
{
    if (why) c->why = why;
    if (rst || !c->sent_to_client) {
        set_rst(c->down.bev);
        set_rst(c->up.bev);
    }
    conn_free(c);
}

static void refuse(struct proxy_conn *c, uint64_t *counter, const char *why)
{
    if (counter) (*counter)++;
    conn_close(c, true, why);
}

static void sync_http_stats(struct proxy_conn *c)
{
    if (!c->http) return;
    uint64_t r = proxy_http_requests(c->http), i = proxy_http_injected(c->http);
    uint64_t f = proxy_http_forwarded(c->http), a = proxy_http_responded(c->http);
    st(c)->requests += r - c->req_seen;
    st(c)->injected += i - c->inj_seen;
    st(c)->forwarded += f - c->fwd_seen;
    st(c)->responded += a - c->resp_seen;
    c->req_seen = r;
    c->inj_seen = i;
    c->fwd_seen = f;
    c->resp_seen = a;
}

/* ------------------------------------------------------------------ TLS over the socket buffers */

/*
 * The SSL objects read ciphertext straight from a side's bufferevent input and
 * write records straight into its output, through a small BIO type over the two
 * evbuffers: no copy beyond what TLS itself does. An empty input is "retry"
 * (the connection tracks the socket's EOF itself).
 */
static int evb_write(BIO *b, const char *data, int len)
{
    struct side *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    if (evbuffer_add(bufferevent_get_output(s->bev), data, (size_t)len) < 0) return -1;
    s->wrote = true;
    return len;
}

static int evb_read(BIO *b, char *out, int len)
{
    struct side *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    int n = evbuffer_remove(bufferevent_get_input(s->bev), out, (size_t)len);
    if (n > 0) return n;
    BIO_set_retry_read(b);
    return -1;
}

static long evb_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct side *s = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
        return s && s->bev ? (long)evbuffer_get_length(bufferevent_get_input(s->bev)) : 0;
    default:
        return 0;
    }
}

static int evb_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void side_set_ssl(struct side *s, SSL *ssl)
{
    static BIO_METHOD *method; /* loop thread; lives for the process */
    if (!method) {
        method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "rebuno evbuffer");
        ASSERT(method);
        BIO_meth_set_write(method, evb_write);
        BIO_meth_set_read(method, evb_read);
        BIO_meth_set_ctrl(method, evb_ctrl);
        BIO_meth_set_create(method, evb_create);
    }
    BIO *b = BIO_new(method);
    ASSERT(ssl && b);
    BIO_set_data(b, s);
    SSL_set_bio(ssl, b, b); /* one reference, owned by ssl */
    s->ssl = ssl;
}

/* Note that the sandbox got bytes from us (a reset is then no longer silent). */
static void tls_flush(struct proxy_conn *c, struct side *s)
{
    if (s == &c->down && s->wrote) c->sent_to_client = true;
}

/* 1 done, 0 waiting for bytes, -1 failed. */
static int tls_handshake(struct proxy_conn *c, struct side *s)
{
    ERR_clear_error();
    int r = SSL_do_handshake(s->ssl);
    tls_flush(c, s);
    if (r == 1) {
        s->ready = true;
        return 1;
    }
    if (SSL_get_error(s->ssl, r) != SSL_ERROR_WANT_READ) return -1;
    return s->sock_eof ? -1 : 0;
}

#define TLS_EOF (-2)
#define TLS_ERR (-1)

/* Plaintext bytes read (> 0), 0 for none yet, TLS_EOF, or TLS_ERR. */
static int tls_read(struct proxy_conn *c, struct side *s, char *buf, int cap)
{
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(s->ssl, buf, cap);
        if (r > 0) return r;
        int e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_READ) {
            tls_flush(c, s); /* a post-handshake message may have been answered */
            return s->sock_eof ? TLS_EOF : 0;
        }
        if (e == SSL_ERROR_ZERO_RETURN) return TLS_EOF;
        return TLS_ERR;
    }
}

static bool tls_write_queue(struct proxy_conn *c, struct side *d, struct evbuffer *q)
{
    while (evbuffer_get_length(q)) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(q, 16384, NULL, &v, 1) < 1) break;
        size_t n = v.iov_len > 16384 ? 16384 : v.iov_len;
        ERR_clear_error();
        int r = SSL_write(d->ssl, v.iov_base, (int)n);
        if (r <= 0) return false;
        evbuffer_drain(q, (size_t)r);
    }
    tls_flush(c, d);
    return true;
}

/* ------------------------------------------------------------------ relaying */

static size_t queued(struct side *d, struct evbuffer *q)
{
    return evbuffer_get_length(q) + blen(d->bev, true);
}

/* Send what is queued for d, if d can take it. */
static bool side_send(struct proxy_conn *c, struct side *d, struct evbuffer *q)
{
    size_t n = evbuffer_get_length(q);
    if (!d->ready || n == 0 || d->shut_sent) return true;
    if (d == &c->up)
        st(c)->bytes_up += n;
    else
        st(c)->bytes_down += n;
    if (d->ssl) {
        if (!tls_write_queue(c, d, q)) {
            conn_close(c, false, "TLS write failed");
            return false;
        }
    } else {
        evbuffer_add_buffer(bufferevent_get_output(d->bev), q);
        if (d == &c->down) c->sent_to_client = true;
    }
    return true;
}

static void maybe_wr_shut(struct side *d)
{
    if (!d->shut_sent || d->wr_shut || !d->bev || blen(d->bev, true)) return;
    shutdown(bufferevent_getfd(d->bev), SHUT_WR);
    d->wr_shut = true;
}

static void side_shutdown(struct proxy_conn *c, struct side *d)
{
    d->shut_sent = true;
    if (d->ssl) {
        ERR_clear_error();
        (void)SSL_shutdown(d->ssl);
        tls_flush(c, d);
    }
    bufferevent_setwatermark(d->bev, EV_WRITE, 0, 0); /* write callback when empty */
    maybe_wr_shut(d);
}

static void answer_and_close(struct proxy_conn *c, int code, const char *reason, const char *why);

/* A request the proxy refuses: answer it if nothing was forwarded yet, then close.
 * In CS_HEAD (the first request on port 80) nothing was sent anywhere yet and the
 * sandbox's socket is plain, so it can always be answered. */
static void http_refused(struct proxy_conn *c)
{
    int code = proxy_http_error(c->http);
    sync_http_stats(c);
    if (code == PROXY_HTTP_DENIED) {
        /* the Host is denied (first request on port 80, or a live policy change) */
        refuse(c, &st(c)->denied, "host denied");
        return;
    }
    const char *reason = proxy_http_error_reason(c->http);
    bool first = c->state == CS_HEAD;
    if (code == 421) st(c)->host_mismatch++;
    if (first) st(c)->refused++;
    log_info("egress request refused", "sandbox=%s conn=%llu host=%s status=%d reason=\"%s\"",
             c->sbx->id, (unsigned long long)c->id, c->host[0] ? c->host : "-", code, reason);
    /* Serial (routed) connections have no response in flight when a request is read,
     * so their refusal can be answered in order, after what is queued. */
    bool answerable = (first || (c->state == CS_RELAY && c->down.ready)) &&
                      (c->routed || proxy_http_requests(c->http) == 0);
    if (!answerable) {
        /* a response may be in flight (or there is no channel to answer on) */
        conn_close(c, true, "request refused");
        return;
    }
    if (!c->routed) evbuffer_drain(c->to_down, evbuffer_get_length(c->to_down));
    answer_and_close(c, code, reason, "request refused");
}

/* Queue a status response (code 0: none) for the sandbox after what is queued, then
 * close once it is out. */
static void answer_and_close(struct proxy_conn *c, int code, const char *reason, const char *why)
{
    char resp[512];
    size_t n = code ? proxy_http_status_response(code, reason, resp, sizeof resp) : 0;
    evbuffer_add(c->to_down, resp, n); /* code 0: only what is queued */
    c->state = CS_CLOSING;
    c->why = why;
    c->down.ready = true;
    if (c->up.bev) bufferevent_disable(c->up.bev, EV_READ);
    if (!c->down.sock_eof) bufferevent_enable(c->down.bev, EV_READ);
    if (!side_send(c, &c->down, c->to_down)) return;
    side_shutdown(c, &c->down);
    arm_timer(c, CLOSE_LINGER_MS);
    conn_run(c);
}

/* An upstream failed. Before the sandbox has a channel (or when nothing routes per
 * request) that is a reset; a routed connection answers 502 (504 for a timeout) in
 * order and closes. */
static void up_refuse(struct proxy_conn *c, uint64_t *counter, const char *why)
{
    if (!c->routed || !c->down.ready || c->state == CS_CLOSING) {
        refuse(c, counter, why);
        return;
    }
    if (counter) (*counter)++;
    log_info("egress request failed upstream",
             "sandbox=%s conn=%llu host=%s upstream=%s reason=\"%s\"", c->sbx->id,
             (unsigned long long)c->id, c->host, c->cur.host[0] ? c->cur.host : "-", why);
    answer_and_close(c, strstr(why, "timeout") ? 504 : 502, why, why);
}

/* Forget the upstream side (a routed connection between requests). */
static void up_drop(struct proxy_conn *c)
{
    SSL_free(c->up.ssl);
    if (c->up.bev) bufferevent_free(c->up.bev);
    memset(&c->up, 0, sizeof c->up);
    c->cur.host[0] = '\0';
    c->raw_up = false;
}

static void start_resolve(struct proxy_conn *c);

static bool same_target(const struct up_target *a, const struct up_target *b)
{
    return a->port == b->port && a->tls == b->tls && !strcmp(a->host, b->host);
}

/* The request just read goes to c->want. Nothing of it was sent yet, and (serial) every
 * earlier answer has ended, so an upstream for another target can be swapped. true: a
 * new upstream is being connected (c may be gone; the caller returns at once). */
static bool route_start(struct proxy_conn *c)
{
    c->want_up = false;
    if (c->up.bev && c->up.ready && !c->up.done && !c->up.sock_eof &&
        same_target(&c->cur, &c->want))
        return false;
    if (!side_send(c, &c->down, c->to_down)) return true; /* closed */
    up_drop(c);
    c->cur = c->want;
    proxy_http_upstream_reset(c->http);
    c->override = false;
    c->naddrs = c->addr_i = 0;
    log_debug("egress upstream", "sandbox=%s conn=%llu host=%s upstream=%s:%u tls=%d", c->sbx->id,
              (unsigned long long)c->id, c->host, c->cur.host, c->cur.port, (int)c->cur.tls);
    arm_timer(c, c->px->cfg.handshake_timeout_ms);
    start_resolve(c);
    return true;
}

/* Feed client plaintext through the request rewriter into to_up. *used is what it
 * took: less than n when it waits for the upstream's answer (an Upgrade, or a full
 * pipeline), and the caller keeps the rest. false: the connection was closed. */
static bool feed_http(struct proxy_conn *c, const char *data, size_t n, size_t *used)
{
    enum proxy_http_status r = proxy_http_feed(c->http, data, n, c->to_up, used);
    sync_http_stats(c);
    if (r == PROXY_HTTP_ERROR) {
        http_refused(c);
        return false;
    }
    return true;
}

/* Show the upstream's bytes (len 0: its end) to the response tracker, which says when
 * an Upgrade really happened (101) or a wait is over. */
static void track_response(struct proxy_conn *c, const char *data, size_t n)
{
    switch (proxy_http_response(c->http, data, n)) {
    case PROXY_HTTP_RESP_RAW:
        c->raw_up = true;
        if (c->held) evbuffer_add_buffer(c->to_up, c->held);
        c->kick_down = true;
        log_debug("egress upgrade", "sandbox=%s conn=%llu host=%s", c->sbx->id,
                  (unsigned long long)c->id, c->host);
        break;
    case PROXY_HTTP_RESP_RESUME:
        c->kick_down = true;
        break;
    case PROXY_HTTP_RESP_NONE:
        break;
    }
}

/* The same over every chain of an evbuffer, without copying or draining it. */
static void track_buffer(struct proxy_conn *c, struct evbuffer *b)
{
    struct evbuffer_ptr at;
    struct evbuffer_iovec v;
    if (evbuffer_ptr_set(b, &at, 0, EVBUFFER_PTR_SET) < 0) return;
    while (!c->raw_up && evbuffer_peek(b, -1, &at, &v, 1) == 1 && v.iov_len > 0) {
        track_response(c, v.iov_base, v.iov_len);
        if (evbuffer_ptr_set(b, &at, v.iov_len, EVBUFFER_PTR_ADD) < 0) break;
    }
}

/* Move what can be moved from s to d. http: s is the sandbox and its requests go
 * through the rewriter; responses from the upstream are shown to the tracker while
 * the connection speaks HTTP. false: the connection was closed. */
static bool relay_dir(struct proxy_conn *c, struct side *s, struct side *d, struct evbuffer *q,
                      bool http)
{
    size_t max = c->px->cfg.buffer_max;
    bool track = s == &c->up && c->http && !c->raw_up;
    while (!s->done && queued(d, q) < max && c->state == CS_RELAY) {
        if (http && proxy_http_waiting(c->http)) break; /* the rest waits in held / the input */
        if (http && c->held && evbuffer_get_length(c->held)) {
            struct evbuffer_iovec v;
            size_t used;
            if (evbuffer_peek(c->held, -1, NULL, &v, 1) < 1) break;
            if (!feed_http(c, v.iov_base, v.iov_len, &used)) return false;
            evbuffer_drain(c->held, used); /* after the last use of v */
            continue;
        }
        if (s->ssl) {
            char tmp[16384];
            int n = tls_read(c, s, tmp, sizeof tmp);
            if (n == TLS_ERR) {
                conn_close(c, false, "TLS read failed");
                return false;
            }
            if (n == TLS_EOF) {
                s->done = true;
                break;
            }
            if (n == 0) break;
            if (track) {
                track_response(c, tmp, (size_t)n);
                track = !c->raw_up;
            }
            if (http) {
                size_t used;
                if (!feed_http(c, tmp, (size_t)n, &used)) return false;
                if (used < (size_t)n) {
                    if (!c->held) c->held = evbuffer_new();
                    evbuffer_add(c->held, tmp + used, (size_t)n - used);
                }
            } else if (d->ready && d->ssl && !d->shut_sent && evbuffer_get_length(q) == 0) {
                /* straight into the other side's TLS: no queueing copy */
                ERR_clear_error();
                if (SSL_write(d->ssl, tmp, n) != n) {
                    conn_close(c, false, "TLS write failed");
                    return false;
                }
                tls_flush(c, d);
                if (d == &c->up)
                    st(c)->bytes_up += (uint64_t)n;
                else
                    st(c)->bytes_down += (uint64_t)n;
            } else {
                evbuffer_add(q, tmp, (size_t)n);
            }
        } else {
            struct evbuffer *in = bufferevent_get_input(s->bev);
            size_t len = evbuffer_get_length(in);
            if (len == 0) {
                if (s->sock_eof) s->done = true;
                break;
            }
            if (track) {
                track_buffer(c, in);
                track = !c->raw_up;
            }
            if (!http) {
                if (d->ready && !d->ssl && evbuffer_get_length(q) == 0 && !d->shut_sent) {
                    /* the splice: move chains, no copy */
                    if (d == &c->up)
                        st(c)->bytes_up += len;
                    else {
                        st(c)->bytes_down += len;
                        c->sent_to_client = true;
                    }
                    evbuffer_add_buffer(bufferevent_get_output(d->bev), in);
                } else {
                    evbuffer_add_buffer(q, in);
                }
            } else {
                struct evbuffer_iovec v;
                size_t used;
                if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
                if (!feed_http(c, v.iov_base, v.iov_len, &used)) return false;
                evbuffer_drain(in, used); /* after the last use of v */
            }
        }
    }
    if (track && s->done) track_response(c, NULL, 0); /* no answer will come any more */
    if (c->state != CS_RELAY) return true;
    if (s == &c->up && s->done && c->routed && !c->raw_up && proxy_http_idle(c->http)) {
        /* the upstream left after complete answers: the next request may need another */
        if (!side_send(c, d, q)) return false;
        up_drop(c);
        return true;
    }
    bool hold = d == &c->up && c->want_up; /* maybe not for this upstream: route_start first */
    if (!hold && !side_send(c, d, q)) return false;
    if (!s->done && s->bev) {
        if (queued(d, q) >= max)
            bufferevent_disable(s->bev, EV_READ);
        else if (!s->sock_eof)
            bufferevent_enable(s->bev, EV_READ);
    }
    if (!hold && s->done && evbuffer_get_length(q) == 0 && d->ready && !d->shut_sent)
        side_shutdown(c, d);
    return true;
}

static void relay(struct proxy_conn *c)
{
    bool http = c->mode != M_PASS;
    do { /* again when the upstream's answer released client bytes */
        c->kick_down = false;
        if (!relay_dir(c, &c->down, &c->up, c->to_up, http && !c->raw_up)) return;
        if (c->routed && proxy_http_closing(c->http)) { /* answered, and asked to close */
            answer_and_close(c, 0, NULL, "answered; the sandbox asked to close");
            return;
        }
        if (c->want_up) {
            if (route_start(c)) return; /* connecting; c may be gone */
            /* the upstream is kept: send what was held, half-close if the sandbox is done */
            if (!side_send(c, &c->up, c->to_up)) return;
            if (c->down.done && evbuffer_get_length(c->to_up) == 0 && !c->up.shut_sent)
                side_shutdown(c, &c->up);
        }
        if (c->up.bev) {
            if (!relay_dir(c, &c->up, &c->down, c->to_down, false)) return;
        } else if (!side_send(c, &c->down, c->to_down)) {
            return;
        }
        if (c->state != CS_RELAY) return;
    } while (c->kick_down);
    maybe_wr_shut(&c->down);
    maybe_wr_shut(&c->up);
    if (c->routed && !c->up.bev && c->down.done && proxy_http_idle(c->http)) {
        /* the sandbox is done and every answer is queued: finish its side */
        if (!c->down.shut_sent && evbuffer_get_length(c->to_down) == 0) side_shutdown(c, &c->down);
        if (c->down.wr_shut) {
            c->why = "finished";
            conn_free(c);
        }
        return;
    }
    if (c->down.done && c->up.done && c->down.wr_shut && c->up.wr_shut) {
        c->why = "finished";
        conn_free(c);
    }
}

/* ------------------------------------------------------------------ zero-copy passthrough */

/*
 * A passthrough connection, once the ClientHello is forwarded, moves bytes with
 * splice(2) through a pipe per direction: socket pages are handed over inside the
 * kernel instead of being copied into the proxy and back (the proxy then costs a
 * fraction of the CPU, which on a small machine is CPU taken from the endpoints).
 * Each direction waits for readability of its source only while its pipe is
 * empty, and for writability of its destination while the pipe holds bytes; a
 * pipe's free space is not known exactly (it counts pages, not bytes), so "read
 * while the pipe is not empty" would spin. If pipes cannot be had (fd limits) the
 * connection keeps the buffered relay.
 */
static void set_interest(struct event *ev, bool on)
{
    bool pending = event_pending(ev, EV_READ | EV_WRITE, NULL);
    if (on && !pending) event_add(ev, NULL);
    if (!on && pending) event_del(ev);
}

/* A read filled at least half the pipe: a bulk transfer. Fewer, larger splices then cost
 * the proxy less CPU per byte (measured: 64 KiB pipes ~310 ms of CPU per GB moved, 256 KiB
 * ~240, 1 MiB ~180; 4 MiB is no better). Pipes start small so that idle or chatty
 * connections hold little: resizing counts against the user's pipe quota
 * (fs.pipe-user-pages-soft) unless the process has CAP_SYS_RESOURCE, and over it the
 * kernel refuses; the pipe then keeps its size. Growing never fails for lack of room (only
 * shrinking below the bytes held does), so it is safe with bytes in the pipe. */
static void splice_grow(struct splice_dir *d)
{
    size_t want = d->cap * 4 > SPLICE_PIPE_MAX ? SPLICE_PIPE_MAX : d->cap * 4;
    int got = fcntl(d->pipe[1], F_SETPIPE_SZ, (int)want);
    if (got > 0 && (size_t)got > d->cap) d->cap = (size_t)got;
    d->grow = got > 0 && d->cap < SPLICE_PIPE_MAX;
}

/* false: failed (the caller closes). A read that returns less than was asked for
 * means the socket is drained: no second read just to see EAGAIN (the events are
 * level-triggered, so bytes arriving meanwhile wake us again). */
static bool splice_dir_pump(struct proxy_conn *c, struct splice_dir *d, uint64_t *bytes)
{
    for (;;) {
        if (d->in_pipe) {
            ssize_t n = splice(d->pipe[0], NULL, d->to, NULL, d->in_pipe,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
            if (n > 0) {
                d->in_pipe -= (size_t)n;
                *bytes += (uint64_t)n;
                c->last_ms = proxy_now_ms();
            }
            if (d->in_pipe) break; /* wait until `to` can take more */
            if (d->short_read) break;
        }
        if (d->eof) break;
        ssize_t n =
            splice(d->from, NULL, d->pipe[1], NULL, d->cap, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            d->in_pipe = (size_t)n;
            d->short_read = (size_t)n < d->cap;
            if (d->grow && (size_t)n >= d->cap / 2) splice_grow(d);
        } else if (n == 0) {
            d->eof = true;
        } else if (errno == EAGAIN || errno == EINTR) {
            break;
        } else {
            return false;
        }
    }
    d->short_read = false;
    if (d->eof && d->in_pipe == 0 && !d->shut) {
        shutdown(d->to, SHUT_WR);
        d->shut = true;
    }
    set_interest(d->rd, !d->eof && d->in_pipe == 0);
    set_interest(d->wr, d->in_pipe > 0);
    return true;
}

/* Pump one direction (0 up, 1 down) or both (-1). */
static void splice_pump(struct proxy_conn *c, int which)
{
    if ((which != 1 && !splice_dir_pump(c, &c->sp[0], &st(c)->bytes_up)) ||
        (which != 0 && !splice_dir_pump(c, &c->sp[1], &st(c)->bytes_down))) {
        conn_close(c, true, errno == ECONNRESET ? "reset by peer" : "splice failed");
        return;
    }
    c->sent_to_client = true;
    if (c->sp[0].shut && c->sp[1].shut) {
        c->why = "finished";
        conn_free(c);
    }
}

static void splice_cb(evutil_socket_t fd, short what, void *arg)
{
    struct splice_dir *d = arg;
    struct proxy_conn *c = d->conn;
    splice_pump(c, d == &c->sp[0] ? 0 : 1);
}

static void splice_fini(struct proxy_conn *c)
{
    for (int i = 0; i < 2; i++) {
        struct splice_dir *d = &c->sp[i];
        if (d->rd) event_free(d->rd);
        if (d->wr) event_free(d->wr);
        if (d->pipe[0] >= 0) close(d->pipe[0]);
        if (d->pipe[1] >= 0) close(d->pipe[1]);
    }
}

/* Switch a passthrough connection to splicing. false: keep the buffered relay. */
static bool start_splice(struct proxy_conn *c)
{
    if (blen(c->up.bev, true) || blen(c->up.bev, false) || blen(c->down.bev, true) ||
        c->down.sock_eof || c->up.sock_eof)
        return false;
    int fds[2] = {bufferevent_getfd(c->down.bev), bufferevent_getfd(c->up.bev)};
    int pipes[2][2];
    if (pipe2(pipes[0], O_NONBLOCK | O_CLOEXEC) < 0) return false;
    if (pipe2(pipes[1], O_NONBLOCK | O_CLOEXEC) < 0) {
        close(pipes[0][0]);
        close(pipes[0][1]);
        return false;
    }
    /* The ClientHello (and anything after it) goes first, as the kernel takes it. */
    struct evbuffer *in = bufferevent_get_input(c->down.bev);
    size_t hello = evbuffer_get_length(in);
    while (evbuffer_get_length(in)) {
        if (evbuffer_write(in, fds[1]) <= 0) break;
    }
    st(c)->bytes_up += hello - evbuffer_get_length(in);
    if (evbuffer_get_length(in)) { /* the socket would block: rare; stay buffered */
        for (int i = 0; i < 2; i++) {
            close(pipes[i][0]);
            close(pipes[i][1]);
        }
        return false;
    }
    bufferevent_disable(c->down.bev, EV_READ | EV_WRITE);
    bufferevent_disable(c->up.bev, EV_READ | EV_WRITE);
    for (int i = 0; i < 2; i++) {
        struct splice_dir *d = &c->sp[i];
        d->from = fds[i];
        d->to = fds[1 - i];
        d->pipe[0] = pipes[i][0];
        d->pipe[1] = pipes[i][1];
        int cap = fcntl(d->pipe[1], F_GETPIPE_SZ);
        if (cap > 0 && cap < SPLICE_PIPE_MIN) {
            int r = fcntl(d->pipe[1], F_SETPIPE_SZ, SPLICE_PIPE_MIN);
            if (r > 0) cap = r;
        }
        d->cap = cap > 0 ? (size_t)cap : 4096;
        d->grow = d->cap < SPLICE_PIPE_MAX;
        d->conn = c;
        d->rd = event_new(c->px->base, d->from, EV_READ | EV_PERSIST, splice_cb, d);
        d->wr = event_new(c->px->base, d->to, EV_WRITE | EV_PERSIST, splice_cb, d);
    }
    c->spliced = true;
    return true;
}

static void start_relay(struct proxy_conn *c)
{
    size_t max = c->px->cfg.buffer_max;
    c->state = CS_RELAY;
    c->last_ms = proxy_now_ms();
    arm_timer(c, c->px->cfg.idle_timeout_ms);
    if (c->mode == M_PASS && !c->px->cfg.no_splice && start_splice(c)) {
        splice_pump(c, -1);
        return;
    }
    bufferevent_setwatermark(c->down.bev, EV_READ, 0, max);
    bufferevent_setwatermark(c->down.bev, EV_WRITE, max / 2, 0);
    if (!c->down.sock_eof) bufferevent_enable(c->down.bev, EV_READ);
    if (c->up.bev) { /* a routed connection has none until a request needs one */
        bufferevent_setwatermark(c->up.bev, EV_READ, 0, max);
        bufferevent_setwatermark(c->up.bev, EV_WRITE, max / 2, 0);
        if (!c->up.sock_eof) bufferevent_enable(c->up.bev, EV_READ);
    }
    relay(c);
}

/* ------------------------------------------------------------------ intercept handshakes */

static void start_down_tls(struct proxy_conn *c)
{
    c->state = CS_DOWN_TLS;
    side_set_ssl(&c->down, SSL_new(c->leaf_ctx));
    SSL_set_accept_state(c->down.ssl);
    bufferevent_setwatermark(c->down.bev, EV_READ, 0, SNIFF_MAX);
    if (!c->down.sock_eof) bufferevent_enable(c->down.bev, EV_READ);
    conn_run(c);
}

static void down_handshake(struct proxy_conn *c)
{
    int r = tls_handshake(c, &c->down);
    if (r < 0) {
        unsigned long e = ERR_peek_error();
        char buf[160] = "closed";
        if (e) ERR_error_string_n(e, buf, sizeof buf);
        st(c)->client_tls_failed++;
        log_info("egress sandbox handshake failed", "sandbox=%s conn=%llu host=%s err=\"%s\"",
                 c->sbx->id, (unsigned long long)c->id, c->host, buf);
        conn_close(c, false, "sandbox TLS handshake failed");
        return;
    }
    if (r == 0) return;
    start_relay(c);
}

static void up_handshake(struct proxy_conn *c)
{
    int r = tls_handshake(c, &c->up);
    if (r < 0) {
        long v = SSL_get_verify_result(c->up.ssl);
        unsigned long e = ERR_peek_error();
        char buf[160] = "connection closed";
        if (v != X509_V_OK)
            snprintf(buf, sizeof buf, "%s", X509_verify_cert_error_string(v));
        else if (e)
            ERR_error_string_n(e, buf, sizeof buf);
        st(c)->verify_failed++;
        log_warn("egress upstream TLS failed", "sandbox=%s conn=%llu host=%s err=\"%s\"",
                 c->sbx->id, (unsigned long long)c->id, c->cur.host, buf);
        up_refuse(c, NULL, "upstream TLS failed");
        return;
    }
    if (r == 0) return;
    if (c->down.ready) { /* a routed connection's next upstream */
        start_relay(c);
        return;
    }
    if (c->leaf_ctx) {
        start_down_tls(c);
        return;
    }
    c->state = CS_LEAF;
}

void proxy_leaf_ready(struct proxy_leaf *leaf)
{
    struct proxy_conn *w = leaf->waiters;
    leaf->waiters = NULL;
    while (w) {
        struct proxy_conn *c = w;
        w = c->leaf_next;
        c->leaf = NULL;
        c->leaf_next = NULL;
        if (!leaf->ctx) {
            refuse(c, NULL, "leaf certificate minting failed");
            continue;
        }
        SSL_CTX_up_ref(leaf->ctx);
        c->leaf_ctx = leaf->ctx;
        if (c->state == CS_LEAF) start_down_tls(c);
    }
}

int proxy_conn_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct proxy_conn *c = SSL_get_app_data(ssl);
    if (!c || !SSL_SESSION_is_resumable(sess)) return 0;
    proxy_session_put(c->px, c->cur.host, sess);
    return 1; /* we keep the reference */
}

static void start_up_tls(struct proxy_conn *c)
{
    c->state = CS_UP_TLS;
    side_set_ssl(&c->up, SSL_new(c->px->up_ctx));
    SSL_set_app_data(c->up.ssl, c);
    SSL_SESSION *prev = proxy_session_get(c->px, c->cur.host);
    if (prev) SSL_set_session(c->up.ssl, prev);
    SSL_set_connect_state(c->up.ssl);
    SSL_set_tlsext_host_name(c->up.ssl, c->cur.host);
    SSL_set_hostflags(c->up.ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(c->up.ssl, c->cur.host) != 1) {
        up_refuse(c, &st(c)->verify_failed, "cannot set the host to verify");
        return;
    }
    bufferevent_enable(c->up.bev, EV_READ);
    up_handshake(c);
}

/* ------------------------------------------------------------------ address ranges */

/* The address the upstream side is connected to (or connecting to) for the host the
 * sandbox named; NULL before one is chosen or while a routed connection talks to a
 * forward target (the policy's own choice: ranges do not apply to it). */
static const struct sockaddr *up_addr(const struct proxy_conn *c)
{
    if (c->addr_i == 0 || c->addr_i > c->naddrs || (strcmp(c->cur.host, c->host) && !c->by_addr))
        return NULL;
    return (const struct sockaddr *)&c->addrs[c->addr_i - 1];
}

/*
 * The policy's verdict for this connection (policy.h, address ranges): by the host's
 * name, then by the address actually connected to. Before there is one, a name the
 * domains deny passes for now (rule "subnets.allow") when subnets.allow might admit its
 * address: the deciding caller marks the connection by_addr, its upstream is then the
 * address the sandbox dialled (set_target; a name nobody allowed is never resolved on
 * the host, so it cannot carry data out through DNS), and the resolution keeps only
 * admitted addresses (admit_addrs), so nothing is connected that the ranges refuse.
 */
static void conn_match(struct proxy_conn *c, struct proxy_verdict *v)
{
    const struct proxy_policy *p = c->sbx->policy;
    proxy_policy_match(p, c->host, v);
    if (c->by_addr && v->kind != PROXY_DENY) {
        /* a live change allows the name itself now: it may go to its own addresses (and
         * get its rules, credentials included) on a new connection, never on this one to
         * the address the sandbox chose */
        memset(v, 0, sizeof *v);
        v->kind = PROXY_DENY;
        v->rule = "";
        return;
    }
    if (!proxy_policy_has_subnets(p)) return;
    const struct sockaddr *a = up_addr(c);
    if (a) {
        struct proxy_verdict name = *v;
        proxy_policy_match_addr(p, &name, a, v);
    } else if (v->kind == PROXY_DENY && proxy_policy_subnets_allow(p)) {
        v->kind = PROXY_PASS;
        v->rule = "subnets.allow";
    }
}

/* Drop the resolved addresses the ranges refuse (the sandbox's own host only; a
 * forward target is the policy's choice). The number dropped. */
static int admit_addrs(struct proxy_conn *c)
{
    const struct proxy_policy *p = c->sbx->policy;
    if (!proxy_policy_has_subnets(p) || (strcmp(c->cur.host, c->host) && !c->by_addr)) return 0;
    struct proxy_verdict name, v;
    proxy_policy_match(p, c->host, &name);
    int kept = 0, dropped = 0;
    for (int i = 0; i < c->naddrs; i++) {
        proxy_policy_match_addr(p, &name, (struct sockaddr *)&c->addrs[i], &v);
        if (v.kind == PROXY_DENY) {
            dropped++;
            continue;
        }
        if (kept != i) {
            c->addrs[kept] = c->addrs[i];
            c->alen[kept] = c->alen[i];
        }
        kept++;
    }
    c->naddrs = kept;
    if (dropped && !kept) {
        char a[80];
        proxy_addr_format((struct sockaddr *)&c->addrs[0], a, sizeof a);
        log_info("egress connection refused",
                 "sandbox=%s conn=%llu host=%s reason=\"address denied by subnets\" addr=%s addrs=%d",
                 c->sbx->id, (unsigned long long)c->id, c->host, a, dropped);
    }
    return dropped;
}

/* ------------------------------------------------------------------ upstream connect */

static void connect_next(struct proxy_conn *c);

static void up_connected(struct proxy_conn *c)
{
    evutil_socket_t fd = bufferevent_getfd(c->up.bev);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!c->override && !c->px->cfg.allow_private_upstreams) {
        /* A public address that is one of this host's own: local == remote. */
        struct sockaddr_storage l, r;
        socklen_t ll = sizeof l, rl = sizeof r;
        if (getsockname(fd, (struct sockaddr *)&l, &ll) == 0 &&
            getpeername(fd, (struct sockaddr *)&r, &rl) == 0 &&
            proxy_addr_same_host((struct sockaddr *)&l, (struct sockaddr *)&r)) {
            up_refuse(c, &st(c)->upstream_failed, "upstream is this host");
            return;
        }
    }
    if (c->cur.tls) {
        start_up_tls(c);
        return;
    }
    c->up.ready = true;
    start_relay(c);
}

static void connect_next(struct proxy_conn *c)
{
    c->state = CS_CONNECT;
    while (c->addr_i < c->naddrs) {
        int i = c->addr_i++;
        if (c->up.bev) bufferevent_free(c->up.bev);
        c->up.bev = bufferevent_socket_new(c->px->base, -1, BEV_OPT_CLOSE_ON_FREE);
        ASSERT(c->up.bev);
        bufferevent_set_max_single_read(c->up.bev, IO_CHUNK);
        bufferevent_set_max_single_write(c->up.bev, IO_CHUNK);
        bufferevent_setwatermark(c->up.bev, EV_READ, 0, c->px->cfg.buffer_max);
        bufferevent_setcb(c->up.bev, up_read_cb, write_cb, up_event_cb, c);
        if (bufferevent_socket_connect(c->up.bev, (struct sockaddr *)&c->addrs[i],
                                       (int)c->alen[i]) == 0)
            return;
    }
    char a[80] = "-";
    if (c->naddrs) proxy_addr_format((struct sockaddr *)&c->addrs[c->naddrs - 1], a, sizeof a);
    log_info("egress upstream unreachable", "sandbox=%s conn=%llu host=%s addr=%s", c->sbx->id,
             (unsigned long long)c->id, c->cur.host, a);
    up_refuse(c, &st(c)->upstream_failed, "upstream unreachable");
}

static void resolve_work(void *arg)
{
    struct resolve_job *j = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_protocol = IPPROTO_TCP,
                             .ai_flags = AI_ADDRCONFIG};
    j->rc = getaddrinfo(j->host, j->port, &hints, &j->ai);
}

static void resolve_drop(void *arg)
{
    struct resolve_job *j = arg;
    if (j->ai) freeaddrinfo(j->ai);
    free(j);
}

static void resolve_done(void *arg)
{
    struct resolve_job *j = arg;
    struct proxy_conn *c = j->c;
    c->resolving = NULL;
    int refused = 0;
    for (struct addrinfo *a = j->rc == 0 ? j->ai : NULL; a && c->naddrs < MAX_ADDRS;
         a = a->ai_next) {
        if (a->ai_addrlen > sizeof c->addrs[0]) continue;
        if (!c->px->cfg.allow_private_upstreams && !proxy_addr_is_public(a->ai_addr)) {
            refused++;
            continue;
        }
        memcpy(&c->addrs[c->naddrs], a->ai_addr, a->ai_addrlen);
        c->alen[c->naddrs++] = a->ai_addrlen;
    }
    int rc = j->rc;
    resolve_drop(j);
    if (c->naddrs && admit_addrs(c) && c->naddrs == 0) {
        up_refuse(c, &st(c)->denied, "address denied");
        return;
    }
    if (c->naddrs == 0) {
        log_info("egress upstream lookup failed", "sandbox=%s conn=%llu host=%s err=\"%s\"",
                 c->sbx->id, (unsigned long long)c->id, c->cur.host,
                 rc        ? gai_strerror(rc)
                 : refused ? "only private or local addresses"
                           : "no address");
        up_refuse(c, &st(c)->upstream_failed, "upstream lookup failed");
        return;
    }
    connect_next(c);
}

/* Resolve and connect to c->cur (set_target; a routed connection's route_start). */
static void start_resolve(struct proxy_conn *c)
{
    c->state = CS_RESOLVE;
    const struct proxy_override *o = proxy_find_override(c->px, c->cur.host, c->cur.port);
    if (o) {
        c->override = true;
        memcpy(&c->addrs[0], &o->addr, o->len);
        c->alen[0] = o->len;
        c->naddrs = 1;
        if (admit_addrs(c) && c->naddrs == 0) {
            up_refuse(c, &st(c)->denied, "address denied");
            return;
        }
        connect_next(c);
        return;
    }
    struct resolve_job *j = xcalloc(1, sizeof *j);
    j->c = c;
    snprintf(j->host, sizeof j->host, "%s", c->cur.host);
    snprintf(j->port, sizeof j->port, "%u", c->cur.port);
    c->resolving =
        proxy_worker_submit(c->px->resolver, resolve_work, resolve_done, resolve_drop, j);
}

/* ------------------------------------------------------------------ deciding */

static void log_decision(struct proxy_conn *c, const struct proxy_verdict *v)
{
    log_info("egress connection", "sandbox=%s conn=%llu port=%u host=%s verdict=%s rule=%s",
             c->sbx->id, (unsigned long long)c->id, c->up_port, c->host,
             proxy_verdict_name(v->kind), v->rule[0] ? v->rule : "-");
}

/* Whether v (from conn_match, before any upstream) admits only by address. */
static bool admitted_by_addr(const struct proxy_verdict *v)
{
    return v->kind == PROXY_PASS && !strcmp(v->rule, "subnets.allow");
}

/* The upstream is the host the sandbox named, on its port; for a connection admitted by
 * its address alone, the address it dialled (or the IPv4 literal it named, on a role
 * listener). false: there is none (the name would have to be looked up): refused. */
static bool set_target(struct proxy_conn *c)
{
    const char *h = c->host;
    if (c->by_addr) {
        struct in_addr a;
        h = c->orig[0] ? c->orig : inet_pton(AF_INET, c->host, &a) == 1 ? c->host : NULL;
        if (!h) {
            log_info("egress connection refused",
                     "sandbox=%s conn=%llu host=%s reason=\"no domain allows the name and the "
                     "address dialled is unknown\"", c->sbx->id, (unsigned long long)c->id, c->host);
            refuse(c, &st(c)->denied, "host denied");
            return false;
        }
    }
    snprintf(c->cur.host, sizeof c->cur.host, "%s", h);
    c->cur.port = c->up_port;
    c->cur.tls = c->mode == M_INTERCEPT;
    return true;
}

/* literal: no SNI; host is the address the sandbox dialled (transparent listener) */
static void decide_tls(struct proxy_conn *c, const char *host, bool literal)
{
    snprintf(c->host, sizeof c->host, "%s", host);
    struct proxy_verdict v;
    conn_match(c, &v);
    if (literal && v.kind == PROXY_INTERCEPT) {
        log_info("egress connection refused", "sandbox=%s conn=%llu port=%u host=%s reason=\"%s\"",
                 c->sbx->id, (unsigned long long)c->id, c->up_port, host,
                 "no SNI: the policy's rules for this address need a host name");
        refuse(c, &st(c)->refused, "no SNI");
        return;
    }
    c->admitted = v.kind;
    c->by_addr = admitted_by_addr(&v);
    c->generation = c->sbx->generation;
    log_decision(c, &v);
    if (v.kind == PROXY_DENY) {
        refuse(c, &st(c)->denied, "host denied");
        return;
    }
    bufferevent_disable(c->down.bev, EV_READ); /* hold the hello until relaying */
    if (v.kind == PROXY_PASS) {
        c->mode = M_PASS;
        c->down.ready = true;
        st(c)->passthrough++;
    } else {
        c->mode = M_INTERCEPT;
        st(c)->intercepted++;
        c->http = proxy_http_new(http_decide, c);
        c->scratch = xcalloc(PROXY_POLICY_MAX_HEADERS, sizeof *c->scratch);
        proxy_http_set_origin(c->http, true, c->up_port);
        proxy_http_set_local(c->http, c->to_down);
        c->routed = v.routes;
        proxy_http_set_serial(c->http, c->routed);
        struct proxy_leaf *leaf = proxy_leaf_get(c->sbx, c->host);
        if (!leaf) {
            refuse(c, NULL, "leaf cache full");
            return;
        }
        if (leaf->ctx) {
            SSL_CTX_up_ref(leaf->ctx);
            c->leaf_ctx = leaf->ctx;
        } else {
            c->leaf = leaf;
            c->leaf_next = leaf->waiters;
            leaf->waiters = c;
        }
        if (c->routed) { /* no upstream until a request needs one: the sandbox's TLS first */
            if (c->leaf_ctx)
                start_down_tls(c);
            else
                c->state = CS_LEAF;
            return;
        }
    }
    if (set_target(c)) start_resolve(c);
}

static void sniff(struct proxy_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->down.bev);
    size_t len = evbuffer_get_length(in);
    if (len > SNIFF_MAX) len = SNIFF_MAX;
    const uint8_t *data = evbuffer_pullup(in, (ev_ssize_t)len);
    char host[PROXY_HOST_MAX + 1];
    enum proxy_sni_result r = proxy_sni_parse(data, len, host);
    if (r == PROXY_SNI_OK) {
        decide_tls(c, host, false);
        return;
    }
    if (r == PROXY_SNI_NONE && c->orig[0]) {
        /* a client dialling an IP literal sends no SNI: that address is the name (the
         * proxy still resolves it, to itself, and judges it like any upstream) */
        decide_tls(c, c->orig, true);
        return;
    }
    if (r == PROXY_SNI_NEED_MORE && !c->down.sock_eof && len < SNIFF_MAX) return;
    const char *why = r == PROXY_SNI_NONE        ? "no SNI"
                      : r == PROXY_SNI_NEED_MORE ? "incomplete ClientHello"
                      : r == PROXY_SNI_TOO_BIG   ? "ClientHello too large"
                                                 : "not a TLS ClientHello";
    log_info("egress connection refused", "sandbox=%s conn=%llu port=%u reason=\"%s\"", c->sbx->id,
             (unsigned long long)c->id, c->up_port, why);
    refuse(c, &st(c)->refused, why);
}

/* Every request head on an HTTP-mode connection comes here (http_rw.h). */
static int http_decide(void *arg, const char *host, const struct proxy_request *rq,
                       struct proxy_action *act, const char **why)
{
    struct proxy_conn *c = arg;
    if (c->host[0] == '\0') {
        snprintf(c->host, sizeof c->host, "%s", host); /* first request on port 80 */
    } else if (strcmp(host, c->host) != 0) {
        return 421;
    }
    struct proxy_verdict v;
    conn_match(c, &v);
    if (c->state == CS_HEAD) {
        c->admitted = v.kind;
        c->by_addr = admitted_by_addr(&v);
        c->generation = c->sbx->generation;
        c->routed = v.routes;
        proxy_http_set_serial(c->http, c->routed);
        log_decision(c, &v);
    }
    if (v.kind == PROXY_DENY) return PROXY_HTTP_DENIED;
    proxy_policy_eval(&v, rq, c->scratch, act);
    if (c->mode == M_HTTP && act->headers.n && !act->plain_http) {
        /* the headers would cross the network in cleartext: only on the rule's word */
        *why = "the policy sets headers for this host and sends them only over HTTPS: use "
               "https://, or set plain_http: true on the host's rule to allow cleartext";
        return 403;
    }
    if (act->kind != PROXY_ACT_UPSTREAM && !c->routed) {
        *why = "the policy changed for this connection: reconnect";
        return 503;
    }
    if (act->kind != PROXY_ACT_UPSTREAM || act->rule >= 0)
        log_debug("egress request routed", "sandbox=%s conn=%llu host=%s rule=%d action=%s%s%s",
                  c->sbx->id, (unsigned long long)c->id, c->host, act->rule,
                  act->kind == PROXY_ACT_FORWARD ? "forward" : "respond",
                  act->forward ? " to=" : "", act->forward ? act->forward->url : "");
    if (!c->routed || act->kind == PROXY_ACT_RESPOND) return 0;
    struct up_target t;
    if (act->kind == PROXY_ACT_FORWARD) {
        snprintf(t.host, sizeof t.host, "%s", act->forward->host);
        t.port = act->forward->port;
        t.tls = act->forward->tls;
    } else {
        snprintf(t.host, sizeof t.host, "%s", c->host);
        t.port = c->up_port;
        t.tls = c->mode == M_INTERCEPT;
    }
    c->want = t;
    c->want_up = true; /* route_start keeps a live upstream for the same target */
    return 0;
}

/* Port 80: parse until the first request's Host is known, then connect for it. */
static void head(struct proxy_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->down.bev);
    while (c->state == CS_HEAD && evbuffer_get_length(in) && !proxy_http_waiting(c->http)) {
        struct evbuffer_iovec v;
        size_t used;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
        if (!feed_http(c, v.iov_base, v.iov_len, &used)) return; /* refused */
        evbuffer_drain(in, used); /* after the last use of v; the rest stays for relaying */
        if (c->host[0]) {
            sync_http_stats(c);
            st(c)->plain_http++;
            c->down.ready = true;
            if (c->routed) { /* the first request chose its upstream (or none) */
                start_relay(c);
                return;
            }
            /* pause reading until relaying; what was read is in to_up */
            bufferevent_disable(c->down.bev, EV_READ);
            if (set_target(c)) start_resolve(c);
            return;
        }
    }
    if (c->state != CS_HEAD) return;
    if (c->down.sock_eof) refuse(c, &st(c)->refused, "closed before a request");
}

/* ------------------------------------------------------------------ callbacks */

static void conn_run(struct proxy_conn *c)
{
    switch (c->state) {
    case CS_SNIFF:
        sniff(c);
        return;
    case CS_HEAD:
        head(c);
        return;
    case CS_UP_TLS:
        up_handshake(c);
        return;
    case CS_DOWN_TLS:
        down_handshake(c);
        return;
    case CS_RELAY:
        if (c->spliced)
            splice_pump(c, -1);
        else
            relay(c);
        return;
    case CS_CLOSING:
        /* Discard what the sandbox still sends (closing with unread input would
         * reset the connection and could destroy the response), and close once
         * the response is out and the sandbox is done. */
        evbuffer_drain(bufferevent_get_input(c->down.bev), blen(c->down.bev, false));
        maybe_wr_shut(&c->down);
        if (blen(c->down.bev, true) == 0 && c->down.sock_eof) conn_close(c, false, NULL);
        return;
    case CS_RESOLVE:
    case CS_CONNECT:
    case CS_LEAF:
        return;
    }
}

static void down_read_cb(struct bufferevent *b, void *arg)
{
    struct proxy_conn *c = arg;
    c->last_ms = proxy_now_ms();
    conn_run(c);
}

static void write_cb(struct bufferevent *b, void *arg)
{
    struct proxy_conn *c = arg;
    c->last_ms = proxy_now_ms();
    conn_run(c);
}

static void side_event(struct proxy_conn *c, struct side *s, short what)
{
    if (what & BEV_EVENT_EOF) {
        s->sock_eof = true;
        conn_run(c);
        return;
    }
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        int e = EVUTIL_SOCKET_ERROR();
        if (s == &c->up && c->state == CS_CONNECT) {
            connect_next(c);
            return;
        }
        if (s == &c->up && c->state < CS_RELAY) {
            up_refuse(c, &st(c)->upstream_failed, "upstream failed");
            return;
        }
        (void)e;
        conn_close(c, true, s == &c->up ? "upstream error" : "sandbox error");
    }
}

static void down_event_cb(struct bufferevent *b, short what, void *arg)
{
    side_event(arg, &((struct proxy_conn *)arg)->down, what);
}

static void up_read_cb(struct bufferevent *b, void *arg)
{
    struct proxy_conn *c = arg;
    c->last_ms = proxy_now_ms();
    conn_run(c);
}

static void up_event_cb(struct bufferevent *b, short what, void *arg)
{
    struct proxy_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        up_connected(c);
        return;
    }
    side_event(c, &c->up, what);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct proxy_conn *c = arg;
    if (c->state == CS_CLOSING) {
        conn_close(c, true, NULL);
        return;
    }
    if (c->state != CS_RELAY) {
        log_info("egress handshake timeout", "sandbox=%s conn=%llu host=%s", c->sbx->id,
                 (unsigned long long)c->id, c->host[0] ? c->host : "-");
        up_refuse(c, &st(c)->timeouts, "handshake timeout");
        return;
    }
    int64_t idle = proxy_now_ms() - c->last_ms, limit = c->px->cfg.idle_timeout_ms;
    if (idle >= limit) {
        st(c)->timeouts++;
        conn_close(c, true, "idle timeout");
        return;
    }
    arm_timer(c, (int)(limit - idle));
}

/* ------------------------------------------------------------------ lifetime */

/* The port the sandbox dialled, and its IPv4 address as text into orig
 * (INET_ADDRSTRLEN bytes; "" for IPv6). */
static bool original_dst(evutil_socket_t fd, const struct sockaddr *peer, uint16_t *port,
                         char *orig)
{
    struct sockaddr_storage d;
    socklen_t l = sizeof d;
    int r = peer->sa_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &d, &l)
                                        : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &d, &l);
    if (r < 0) return false;
    orig[0] = '\0';
    if (d.ss_family == AF_INET) {
        *port = ntohs(((struct sockaddr_in *)&d)->sin_port);
        if (!inet_ntop(AF_INET, &((struct sockaddr_in *)&d)->sin_addr, orig, INET_ADDRSTRLEN))
            orig[0] = '\0';
    } else if (d.ss_family == AF_INET6) {
        *port = ntohs(((struct sockaddr_in6 *)&d)->sin6_port);
    } else {
        return false;
    }
    return true;
}

/*
 * The global table is full. A sandbox below its fair share (the table divided by the
 * sandboxes holding connections, itself included) gets a slot by resetting the
 * connection that has been quiet longest in the sandbox holding the most; one at or
 * above its share is refused. So no set of sandboxes can starve the others, and a
 * sandbox loses connections only while it holds more than its share. Runs only when
 * full: O(sandboxes + that sandbox's connections).
 */
static bool make_room(struct proxy *px, struct proxy_sandbox *sbx)
{
    int holders = px->nholders + (sbx->nconns == 0);
    int fair = px->cfg.max_conns / holders;
    if (fair < 1) fair = 1;
    if (sbx->nconns >= fair) return false;
    struct proxy_sandbox *big = NULL;
    for (struct proxy_sandbox *s = px->sandboxes; s; s = s->next)
        if (s != sbx && (!big || s->nconns > big->nconns)) big = s;
    if (!big || big->nconns <= fair) return false;
    struct proxy_conn *victim = big->conns;
    for (struct proxy_conn *c = victim; c; c = c->next)
        if (c->last_ms <= victim->last_ms) victim = c; /* newest first: ties go to the oldest */
    log_info("egress connection evicted",
             "sandbox=%s conn=%llu host=%s conns=%d fair_share=%d for_sandbox=%s", big->id,
             (unsigned long long)victim->id, victim->host[0] ? victim->host : "-", big->nconns,
             fair, sbx->id);
    big->st.evicted++;
    conn_close(victim, true, "evicted: its sandbox holds more than a fair share");
    return true;
}

void proxy_conn_accept(struct proxy_listener *l, evutil_socket_t fd, const struct sockaddr *peer,
                       int peerlen)
{
    struct proxy *px = l->px;
    struct proxy_sandbox *sbx = l->sbx ? l->sbx : proxy_find_source(px, peer);
    if (!sbx) {
        px->st.limit_rejected++;
        proxy_rst_fd(fd);
        return;
    }
    sbx->st.accepted++;
    if (sbx->nconns >= px->cfg.max_conns_per_sandbox) {
        sbx->st.limit_rejected++;
        proxy_rst_fd(fd);
        return;
    }
    uint16_t port = l->role == PROXY_ROLE_HTTP ? 80 : 443;
    char orig[INET_ADDRSTRLEN] = "";
    if (l->role == PROXY_ROLE_TRANSPARENT &&
        (!original_dst(fd, peer, &port, orig) || (port != 80 && port != 443))) {
        sbx->st.refused++;
        proxy_rst_fd(fd);
        return;
    }
    if (px->nconns >= px->cfg.max_conns && !make_room(px, sbx)) {
        sbx->st.limit_rejected++;
        proxy_rst_fd(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    struct proxy_conn *c = xcalloc(1, sizeof *c);
    c->px = px;
    c->sbx = sbx;
    c->id = ++px->next_conn_id;
    c->up_port = port;
    memcpy(c->orig, orig, sizeof c->orig);
    c->mode = port == 80 ? M_HTTP : M_PASS;
    c->state = port == 80 ? CS_HEAD : CS_SNIFF;
    c->to_up = evbuffer_new();
    c->to_down = evbuffer_new();
    c->why = "closed";
    c->next = sbx->conns;
    if (c->next) c->next->prev = c;
    sbx->conns = c;
    if (sbx->nconns++ == 0) px->nholders++;
    px->nconns++;
    sbx->st.active++;
    if (c->mode == M_HTTP) {
        c->http = proxy_http_new(http_decide, c);
        c->scratch = xcalloc(PROXY_POLICY_MAX_HEADERS, sizeof *c->scratch);
        proxy_http_set_local(c->http, c->to_down);
    }

    c->down.bev = bufferevent_socket_new(px->base, fd, BEV_OPT_CLOSE_ON_FREE);
    ASSERT(c->down.bev);
    bufferevent_set_max_single_read(c->down.bev, IO_CHUNK);
    bufferevent_set_max_single_write(c->down.bev, IO_CHUNK);
    bufferevent_setcb(c->down.bev, down_read_cb, write_cb, down_event_cb, c);
    bufferevent_setwatermark(c->down.bev, EV_READ, 0,
                             c->state == CS_SNIFF ? SNIFF_MAX : px->cfg.buffer_max);
    bufferevent_enable(c->down.bev, EV_READ);
    c->timer = evtimer_new(px->base, timer_cb, c);
    arm_timer(c, px->cfg.handshake_timeout_ms);
    c->last_ms = proxy_now_ms();
    (void)peerlen;
}

static void conn_free(struct proxy_conn *c)
{
    struct proxy_sandbox *s = c->sbx;
    sync_http_stats(c);
    log_debug("egress connection closed", "sandbox=%s conn=%llu host=%s why=\"%s\"", s->id,
              (unsigned long long)c->id, c->host[0] ? c->host : "-", c->why);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (--s->nconns == 0) s->px->nholders--;
    s->px->nconns--;
    s->st.active--;
    if (c->leaf) {
        struct proxy_conn **pp = &c->leaf->waiters;
        while (*pp && *pp != c)
            pp = &(*pp)->leaf_next;
        if (*pp) *pp = c->leaf_next;
    }
    if (c->resolving) proxy_worker_cancel(c->resolving);
    if (c->spliced) splice_fini(c);
    SSL_free(c->down.ssl);
    SSL_free(c->up.ssl);
    SSL_CTX_free(c->leaf_ctx);
    if (c->down.bev) bufferevent_free(c->down.bev);
    if (c->up.bev) bufferevent_free(c->up.bev);
    evbuffer_free(c->to_up);
    evbuffer_free(c->to_down);
    if (c->held) evbuffer_free(c->held);
    proxy_http_free(c->http);
    free(c->scratch);
    event_free(c->timer);
    free(c);
}

void proxy_conn_policy_changed(struct proxy_conn *c)
{
    if (c->host[0] == '\0') return; /* not decided yet: it will see the new policy */
    struct proxy_verdict v;
    conn_match(c, &v);
    bool close = v.kind == PROXY_DENY || (c->mode != M_HTTP && v.kind != c->admitted) ||
                 (v.kind == PROXY_INTERCEPT && v.routes != c->routed);
    if (!close) {
        c->generation = c->sbx->generation;
        return;
    }
    log_info("egress connection closed by policy", "sandbox=%s conn=%llu host=%s verdict=%s",
             c->sbx->id, (unsigned long long)c->id, c->host, proxy_verdict_name(v.kind));
    st(c)->policy_closed++;
    conn_close(c, true, "policy changed");
}

void proxy_conn_abort(struct proxy_conn *c)
{
    conn_close(c, true, "shutdown");
}

struct proxy_conn *proxy_conn_next(const struct proxy_conn *c)
{
    return c->next;
}
