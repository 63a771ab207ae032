/*
 * http.c - the shared HTTP/1.1 server layer (see http.h).
 *
 * A listener accepts sockets into connections (struct http_conn): a libevent
 * bufferevent plus an http-parser. Input is parsed only while no request of the
 * connection is in a handler's hands, so pipelined requests are served strictly one
 * after another; unparsed bytes wait in the input buffer (capped by a read watermark).
 *
 * Lifetimes. A request (struct http_req) belongs to its connection until its handler
 * returns. If the handler kept it (deferred reply, SSE) the request lives until the
 * reply is finished or its close callback has run. A kept request without a close
 * callback whose client goes away becomes an "orphan": it stays allocated so a late
 * reply is harmless (and discarded), and is freed by that reply or by server free.
 *
 * Upgrades. http_upgrade() writes the 101 and marks the connection; once no request
 * of it is in a handler's hands (right after the handler returns, or from the resume
 * event) the bufferevent is detached, the connection struct freed and the
 * application's callback given the bufferevent. A connection that dies before that
 * gives the callback NULL instead, so it always runs exactly once.
 *
 * Re-entrancy rule: functions the application calls (replies, SSE, upgrade) never free a
 * connection. They may free the request they were given and then poke the
 * connection's resume event; connections are freed only from libevent callbacks,
 * shutdown and free, so nothing up the stack ever finds its connection gone.
 *
 * Deadlines and shedding (the slowloris defence). A connection that waits for a
 * request is on one of four lists by what it waits in: HEAD (a request head is due:
 * since the accept, or since the first byte of a keep-alive connection's next
 * request), IDLE (keep-alive, reply flushed, no byte of a next request), BODY (head
 * parsed, body arriving) and LINGER (lingering close). A connection is put at a list's
 * tail with the time it entered it, so each list is in order of entry, and since a
 * list's deadline is a fixed offset from that time (IDLE, HEAD) the expired ones are
 * at its head: one timer per server, armed at the earliest deadline, cuts them. A
 * BODY deadline also grows by a second per body_min_rate bytes received, so the timer
 * walks the BODY list only as far as the connections whose grace is over. Reading
 * never restarts a deadline (libevent's read timeouts would, so they are off; the
 * write timeout stays: a reply must keep making progress). A connection serving a
 * request (from the end of its head to the flush of its reply; kept requests, SSE)
 * is on no list, so it is never timed or shed here.
 *
 * Every connection also counts against its peer (IPv4 address, IPv6 /64), which keeps
 * its own list of the same connections in order of entry. A new connection that finds
 * the table full, or its peer's share full, sheds the connection that has waited
 * longest (bodies only when nothing else is left), from anyone or from that peer; so a
 * fresh request always gets in while stuck connections are around, and a peer at its
 * cap only ever sheds its own. A connection whose socket already holds a request we
 * have not read (the loop is behind, the client is not) is passed over. Running out of descriptors (EMFILE) sheds the same way.
 */
#include "net/http.h"
#include "net/gzip.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/jtext.h"
#include "base/log.h"
#include "base/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <http_parser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

enum {
    HTTP_MAX_URL = 8 * 1024,         /* longer request targets get 414 */
    HTTP_MAX_HEADERS = 200,          /* header lines per request (431 above) */
    HTTP_SSE_LIMIT = 256 * 1024,     /* unsent SSE output that triggers -EAGAIN */
    HTTP_READ_SLACK = 64 * 1024,     /* unparsed input buffered beyond the header cap */
    HTTP_LINGER_MS = 2000,           /* keep draining input this long after an error */
    HTTP_LINGER_BYTES = 1024 * 1024, /* ... or until this much was discarded */
    HTTP_ACCEPT_BACKOFF_MS = 100,    /* pause accepting after EMFILE and friends */
    HTTP_SWEEP_SLACK_MS = 50,        /* deadlines may be this late, so sweeps batch */
    HTTP_SHED_LOG_MS = 10000,        /* one log line per this while shedding */
    HTTP_STARVED_BYTES = 16,         /* unread bytes that make a waiting connection not idle */
    HTTP_SHED_SCAN = 64,             /* connections a shed looks at, at most */
};

#define HTTP_DEF_MAX_BODY ((size_t)1024 * 1024)
#define HTTP_DEF_MAX_HEADER ((size_t)64 * 1024)
#define HTTP_DEF_IDLE_SEC 60
#define HTTP_DEF_HEADER_SEC 10
#define HTTP_DEF_BODY_SEC 10
#define HTTP_DEF_BODY_RATE 1024
#define HTTP_DEF_MAX_CONN 4096
#define HTTP_DEF_MAX_PER_PEER 1024

struct http_kv {
    char *key;
    char *val;
};

/* A small owned list of string pairs (headers, query, params). */
struct http_kvs {
    struct http_kv *v;
    size_t n, cap;
};

enum http_req_state {
    REQ_PARSING, /* bytes still arriving */
    REQ_HANDLER, /* inside the filter / handler call */
    REQ_KEPT,    /* handler returned without finishing: deferred reply or SSE */
};

struct http_req {
    struct http_server *server;
    struct http_conn *conn; /* NULL once the client is gone (orphan or closing) */
    enum http_req_state state;
    bool in_handler; /* the dispatcher frees it when the handler returns */
    bool done;       /* reply written (or SSE ended): exactly once */
    bool sse;        /* SSE stream started */
    bool closing;    /* close callback running: replies become no-ops */
    bool want_drain; /* an SSE send returned -EAGAIN */
    bool chunked;    /* a raw stream sent with Transfer-Encoding: chunked (keep-alive) */
    bool head, http10, keep_alive, is_connect, want_close;
    bool in_value; /* last header callback was a value */
    const char *method;
    char id[24];

    struct buf url, hfield, hval, body;
    size_t header_bytes;
    struct http_kvs hdrs, query, params, out_hdrs;
    char *path;  /* decoded */
    char **segs; /* decoded path segments */
    size_t nsegs;

    void *data;
    http_close_fn close_fn, drain_fn;
    void *close_arg, *drain_arg;
    struct http_req *orphan_prev, *orphan_next;
};

/* What a connection waits for; see the top of the file. WAIT_NONE: it is serving a
 * request or closing, and is neither timed nor shed by the server. */
enum conn_wait { WAIT_NONE, WAIT_HEAD, WAIT_IDLE, WAIT_LINGER, WAIT_BODY, WAIT_N };

enum { LINK_WAIT, LINK_PEER }; /* the two lists a waiting connection is on */

struct conn_link {
    struct http_conn *prev, *next;
};

struct conn_list {
    struct http_conn *first, *last;
};

/* The connections of one source address (an IPv6 peer: its /64). */
struct http_peer {
    uint8_t addr[16];
    int nconns;
    struct conn_list waiting; /* its connections not WAIT_NONE, oldest first */
    struct http_peer *next;   /* hash chain */
};

struct http_conn {
    struct http_server *s;
    struct bufferevent *bev;
    struct event *resume_ev; /* re-run the parser outside the application's call stack */
    http_parser parser;
    struct http_req *req; /* being parsed, in a handler, or kept */
    char peer[INET6_ADDRSTRLEN];
    bool loopback;
    bool close_after; /* close once the output is flushed and no request is kept */
    bool linger;      /* ... but drain the client's input for a while first */
    bool lingering;
    bool peer_eof;
    http_upgrade_fn upgrade_fn; /* set by http_upgrade(): hand over once the request is done */
    void *upgrade_arg;
    struct err rej; /* why the parser was stopped by a limit */
    int64_t linger_until;
    size_t linger_bytes;
    enum conn_wait wait;
    int64_t wait_since;  /* clock_mono_ms() when it entered wait */
    uint64_t body_bytes; /* of the request in WAIT_BODY */
    struct http_peer *src;
    struct conn_link link[2]; /* LINK_WAIT: s->wait[wait]; LINK_PEER: src->waiting */
    struct http_conn *prev, *next;
};

struct http_route {
    char method[16];
    char **segs; /* pattern segments; ":name" captures */
    size_t nsegs;
    http_handler_fn fn;
    void *arg;
    struct http_route *next;
};

struct http_listener {
    struct http_server *s;
    struct evconnlistener *lev;
    struct event *backoff;
    struct http_listener *next;
};

struct http_server {
    struct event_base *base;
    struct http_config cfg;
    struct timeval write_tv;
    struct http_listener *listeners;
    struct http_route *routes, **routes_tail;
    http_filter_fn filter;
    void *filter_arg;
    char **cors;  /* origins whose pages may call this server (http_set_cors_origins) */
    size_t ncors;
    struct http_conn *conns;
    int nconns;
    struct conn_list wait[WAIT_N];
    struct event *sweep_ev; /* cuts expired waits */
    int64_t sweep_at;       /* when sweep_ev fires, 0 when not armed */
    struct http_peer **peers;
    size_t npeer_slots; /* a power of two */
    uint64_t peer_seed;
    uint64_t shed, refused; /* since the last log line about them */
    int64_t shed_logged;
    int port;
    struct http_req *orphans;
    bool shutting_down;
    struct event *done_ev; /* shutdown finished or timed out */
    int cb_depth;
};

static uint64_t http_req_seq;

/* ------------------------------------------------------------------ small helpers */

static void kvs_add(struct http_kvs *k, char *key, char *val)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 8;
        k->v = xrealloc(k->v, k->cap * sizeof *k->v);
    }
    k->v[k->n].key = key;
    k->v[k->n].val = val;
    k->n++;
}

static const char *kvs_get(const struct http_kvs *k, const char *key, bool nocase)
{
    for (size_t i = 0; i < k->n; i++)
        if (nocase ? strcasecmp(k->v[i].key, key) == 0 : strcmp(k->v[i].key, key) == 0)
            return k->v[i].val;
    return NULL;
}

static void kvs_free(struct http_kvs *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->v[i].key);
        free(k->v[i].val);
    }
    free(k->v);
    k->v = NULL;
    k->n = k->cap = 0;
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Percent-decode n bytes; NULL for a broken escape or an encoded NUL (the result is
 * used as a C string, so %00 would silently truncate it). */
static char *pct_decode(const char *s, size_t n, bool plus_is_space)
{
    char *out = xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(out);
                return NULL;
            }
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = plus_is_space && s[i] == '+' ? ' ' : s[i];
        }
    }
    *o = '\0';
    return out;
}

/* jansson refuses invalid UTF-8; messages may echo client bytes, so degrade them. */
static json_t *json_str_safe(const char *s)
{
    json_t *j = json_string(s);
    if (j) return j;
    char *t = xstrdup(s);
    for (char *p = t; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(t);
    free(t);
    return j;
}

/* flat: {code, message, details: {field}} at the top level (the kernel's /v0, upstream
 * Rebuno's envelope); else {"error": {code, message, field}} (the sandbox daemon). */
static char *error_json(bool flat, const char *code, const char *field, const char *msg)
{
    json_t *e = json_object();
    json_object_set_new(e, "code", json_str_safe(code && *code ? code : "internal_error"));
    json_object_set_new(e, "message", json_str_safe(msg && *msg ? msg : "internal error"));
    if (field && *field) {
        if (flat) json_object_set_new(e, "details", json_pack("{s:o}", "field", json_str_safe(field)));
        else json_object_set_new(e, "field", json_str_safe(field));
    }
    json_t *root = e;
    if (!flat) {
        root = json_object();
        json_object_set_new(root, "error", e);
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        s = xstrdup(flat ? "{\"code\":\"internal_error\",\"message\":\"internal error\"}"
                         : "{\"error\":{\"code\":\"internal_error\",\"message\":\"internal error\"}}");
    return s;
}

static const char *status_reason(int status)
{
    const char *r = http_status_str((enum http_status)status);
    return r && r[0] != '<' ? r : "Unknown";
}

/* ------------------------------------------------------------------ requests */

static struct http_req *req_new(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct http_req *r = xcalloc(1, sizeof *r);
    r->server = s;
    r->conn = c;
    r->state = REQ_PARSING;
    r->method = "GET";
    buf_init(&r->url, HTTP_MAX_URL);
    buf_init(&r->hfield, s->cfg.max_header_bytes);
    buf_init(&r->hval, s->cfg.max_header_bytes);
    buf_init(&r->body, s->cfg.max_body);
    uint64_t n = __atomic_add_fetch(&http_req_seq, 1, __ATOMIC_RELAXED);
    snprintf(r->id, sizeof r->id, "r%llx", (unsigned long long)n);
    return r;
}

static void req_free(struct http_req *r)
{
    buf_fini(&r->url);
    buf_fini(&r->hfield);
    buf_fini(&r->hval);
    buf_fini(&r->body);
    kvs_free(&r->hdrs);
    kvs_free(&r->query);
    kvs_free(&r->params);
    kvs_free(&r->out_hdrs);
    free(r->path);
    strv_free(r->segs, r->nsegs);
    free(r);
}

static void orphan_add(struct http_server *s, struct http_req *r)
{
    r->orphan_prev = NULL;
    r->orphan_next = s->orphans;
    if (s->orphans) s->orphans->orphan_prev = r;
    s->orphans = r;
}

static void orphan_remove(struct http_server *s, struct http_req *r)
{
    if (r->orphan_prev)
        r->orphan_prev->orphan_next = r->orphan_next;
    else
        s->orphans = r->orphan_next;
    if (r->orphan_next) r->orphan_next->orphan_prev = r->orphan_prev;
}

/* The client is gone before the kept request finished: run the close callback (then
 * the request is dead) or, without one, keep it as an orphan for a late reply. */
static void req_abort(struct http_req *r)
{
    r->conn = NULL;
    if (!r->close_fn) {
        orphan_add(r->server, r);
        return;
    }
    struct http_server *s = r->server;
    r->closing = true;
    s->cb_depth++;
    r->close_fn(r, r->close_arg);
    s->cb_depth--;
    req_free(r);
}

/* ------------------------------------------------------------------ connections */

static void list_push(struct conn_list *l, struct http_conn *c, int k)
{
    c->link[k].prev = l->last;
    c->link[k].next = NULL;
    if (l->last)
        l->last->link[k].next = c;
    else
        l->first = c;
    l->last = c;
}

static void list_del(struct conn_list *l, struct http_conn *c, int k)
{
    struct conn_link *ln = &c->link[k];
    if (ln->prev)
        ln->prev->link[k].next = ln->next;
    else
        l->first = ln->next;
    if (ln->next)
        ln->next->link[k].prev = ln->prev;
    else
        l->last = ln->prev;
}

/* The peer key: an IPv4 address as v4-mapped IPv6, an IPv6 address's /64 (one host
 * usually holds a whole /64), anything else (a unix socket) one key of its own. */
static void peer_key(const struct sockaddr *sa, uint8_t key[16])
{
    memset(key, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(key, a->s6_addr, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
    } else {
        memset(key, 0xff, 16); /* multicast: never a real source */
    }
}

/* Seeded, so nobody can pick addresses that share a hash chain. */
static struct http_peer **peer_slot(struct http_server *s, const uint8_t key[16])
{
    uint64_t a, b;
    memcpy(&a, key, 8);
    memcpy(&b, key + 8, 8);
    uint64_t h = (a ^ s->peer_seed) * 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 31) ^ b) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    struct http_peer **pp = &s->peers[h & (s->npeer_slots - 1)];
    while (*pp && memcmp((*pp)->addr, key, 16) != 0)
        pp = &(*pp)->next;
    return pp;
}

static struct http_peer *peer_get(struct http_server *s, const uint8_t key[16])
{
    return *peer_slot(s, key);
}

static struct http_peer *peer_ref(struct http_server *s, const uint8_t key[16])
{
    struct http_peer **pp = peer_slot(s, key);
    if (!*pp) {
        *pp = xcalloc(1, sizeof **pp);
        memcpy((*pp)->addr, key, 16);
    }
    (*pp)->nconns++;
    return *pp;
}

static void peer_unref(struct http_server *s, struct http_peer *p)
{
    if (--p->nconns > 0) return;
    struct http_peer **pp = peer_slot(s, p->addr);
    *pp = p->next;
    free(p);
}

/* When c's wait ends (INT64_MAX: never by itself). */
static int64_t conn_deadline(const struct http_server *s, const struct http_conn *c)
{
    switch (c->wait) {
    case WAIT_HEAD:
        return c->wait_since + s->cfg.header_timeout_sec * 1000LL;
    case WAIT_IDLE:
        return c->wait_since + s->cfg.idle_timeout_sec * 1000LL;
    case WAIT_BODY:
        return c->wait_since + s->cfg.body_timeout_sec * 1000LL +
               (int64_t)(c->body_bytes * 1000 / (uint64_t)s->cfg.body_min_rate);
    default:
        return INT64_MAX;
    }
}

static void sweep_arm(struct http_server *s, int64_t at, int64_t now)
{
    if (at == INT64_MAX || (s->sweep_at && s->sweep_at <= at + HTTP_SWEEP_SLACK_MS)) return;
    s->sweep_at = at + HTTP_SWEEP_SLACK_MS;
    int64_t d = s->sweep_at > now ? s->sweep_at - now : 0;
    struct timeval tv = {(time_t)(d / 1000), (suseconds_t)(d % 1000) * 1000};
    evtimer_add(s->sweep_ev, &tv);
}

/* Move c to the tail of the list for w (WAIT_NONE: off the lists). */
static void wait_set(struct http_conn *c, enum conn_wait w)
{
    struct http_server *s = c->s;
    if (c->wait != WAIT_NONE) {
        list_del(&s->wait[c->wait], c, LINK_WAIT);
        list_del(&c->src->waiting, c, LINK_PEER);
    }
    c->wait = w;
    if (w == WAIT_NONE) return;
    int64_t now = clock_mono_ms();
    c->wait_since = now;
    list_push(&s->wait[w], c, LINK_WAIT);
    list_push(&c->src->waiting, c, LINK_PEER);
    sweep_arm(s, conn_deadline(s, c), now);
}

static void conn_free(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct http_req *r = c->req;
    ASSERT(!r || r->state != REQ_HANDLER);
    wait_set(c, WAIT_NONE);
    peer_unref(s, c->src);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->nconns--;
    http_upgrade_fn up = c->upgrade_fn;
    void *up_arg = c->upgrade_arg;
    if (c->bev) bufferevent_free(c->bev); /* NULL after a hand-over */
    event_free(c->resume_ev);
    free(c);
    if (s->shutting_down && s->nconns == 0 && s->done_ev) event_active(s->done_ev, EV_TIMEOUT, 0);
    if (up) { /* an upgrade that never got its connection */
        s->cb_depth++;
        up(NULL, up_arg);
        s->cb_depth--;
    }
    /* Last, so a close callback never sees a half-freed connection. */
    if (!r) return;
    if (r->state == REQ_KEPT)
        req_abort(r);
    else
        req_free(r);
}

/* The upgraded connection leaves the server: its bufferevent goes to the application.
 * Always returns false (the connection struct is freed). */
static bool conn_handover(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct bufferevent *bev = c->bev;
    http_upgrade_fn fn = c->upgrade_fn;
    void *arg = c->upgrade_arg;
    ASSERT(fn && !c->req);
    c->upgrade_fn = NULL;
    c->bev = NULL;
    bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
    bufferevent_set_timeouts(bev, NULL, NULL);
    bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
    bufferevent_disable(bev, EV_READ);
    conn_free(c);
    s->cb_depth++;
    fn(bev, arg);
    s->cb_depth--;
    return false;
}

/* Discard input of a lingering connection. Returns false if the connection was freed. */
static bool linger_read(struct http_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = evbuffer_get_length(in);
    c->linger_bytes += n;
    evbuffer_drain(in, n);
    if (c->linger_bytes <= HTTP_LINGER_BYTES && clock_mono_ms() <= c->linger_until) return true;
    conn_free(c);
    return false;
}

/* Output is flushed and the connection should go. After an error reply the client may
 * still be sending (an oversized body); closing with unread input would make the
 * kernel send RST, which can destroy the reply before the client reads it. So we send
 * FIN and discard input for a short while (a "lingering close"). Returns false if the
 * connection was freed. */
static bool conn_close_flushed(struct http_conn *c)
{
    if (!c->linger || c->s->shutting_down) {
        conn_free(c);
        return false;
    }
    c->lingering = true;
    wait_set(c, WAIT_LINGER); /* first to go when room is needed */
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    c->linger_until = clock_mono_ms() + HTTP_LINGER_MS;
    struct timeval tv = {HTTP_LINGER_MS / 1000, (HTTP_LINGER_MS % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_enable(c->bev, EV_READ);
    return linger_read(c);
}

/* No more requests on this connection: close once the output is flushed. Returns
 * false if the connection was freed. */
static bool conn_finish(struct http_conn *c)
{
    c->close_after = true;
    wait_set(c, WAIT_NONE);
    bufferevent_disable(c->bev, EV_READ);
    if (c->req || evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) return true;
    return conn_close_flushed(c);
}

static void write_response(struct http_conn *c, struct http_req *r, int status, const char *ctype,
                           const void *body, size_t len)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    bool close = !r || !r->keep_alive || r->want_close || c->s->shutting_down;
    if (status < 200 || status > 599) status = 500; /* 1xx are not final replies */
    bool bodiless = status == 204 || status == 304;
    /* The fixed head in one evbuffer_add (evbuffer_add_printf per line cost more
     * than the rest of sending a small reply). */
    struct buf head;
    buf_init(&head, 0);
    char line[64];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    buf_puts(&head, line);
    buf_puts(&head, status_reason(status));
    buf_puts(&head, "\r\n");
    if (!bodiless) {
        if (ctype && !(r && kvs_get(&r->out_hdrs, "Content-Type", true))) {
            buf_puts(&head, "Content-Type: ");
            buf_puts(&head, ctype);
            buf_puts(&head, "\r\n");
        }
        snprintf(line, sizeof line, "Content-Length: %zu\r\n", len);
        buf_puts(&head, line);
    }
    if (close)
        buf_puts(&head, "Connection: close\r\n");
    else if (r->http10)
        buf_puts(&head, "Connection: keep-alive\r\n");
    for (size_t i = 0; r && i < r->out_hdrs.n; i++) {
        buf_puts(&head, r->out_hdrs.v[i].key);
        buf_puts(&head, ": ");
        buf_puts(&head, r->out_hdrs.v[i].val);
        buf_puts(&head, "\r\n");
    }
    buf_puts(&head, "\r\n");
    evbuffer_add(out, head.data, head.len);
    buf_fini(&head);
    if (!bodiless && len && !(r && r->head)) evbuffer_add(out, body, len);
    if (close) c->close_after = true;
}

/* The parser stopped on a limit or a syntax error: reply and close. */
static bool conn_reject(struct http_conn *c, enum http_errno e)
{
    struct err *rej = &c->rej;
    if (rej->status == 0) {
        if (e == HPE_HEADER_OVERFLOW)
            err_set(rej, 431, "headers_too_large", "headers", "request headers exceed %zu bytes",
                    c->s->cfg.max_header_bytes);
        else
            err_set(rej, 400, "bad_request", "", "malformed HTTP request: %s",
                    http_errno_description(e));
    }
    if (c->req) {
        req_free(c->req);
        c->req = NULL;
    }
    char *body = error_json(c->s->cfg.flat_errors, rej->code, rej->field, rej->msg);
    write_response(c, NULL, rej->status, "application/json", body, strlen(body));
    free(body);
    c->linger = true;
    return conn_finish(c);
}

/* ------------------------------------------------------------------ deadlines and shedding */

/* c's wait is over: a connection that sent nothing of a request closes quietly (an idle
 * keep-alive client must not read a 408 as the reply to its next request), one
 * caught in the middle gets 408. */
static void conn_expire(struct http_conn *c)
{
    const struct http_config *cfg = &c->s->cfg;
    if (c->wait == WAIT_IDLE || !c->req) {
        conn_free(c);
        return;
    }
    if (c->wait == WAIT_BODY)
        err_set(&c->rej, 408, "request_timeout", "body",
                "request body arrived slower than %d bytes/s (after the first %d s)",
                cfg->body_min_rate, cfg->body_timeout_sec);
    else
        err_set(&c->rej, 408, "request_timeout", "headers",
                "request head was not complete within %d s", cfg->header_timeout_sec);
    conn_reject(c, HPE_OK);
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    struct conn_list *body = &s->wait[WAIT_BODY];
    int64_t now = clock_mono_ms(), grace = s->cfg.body_timeout_sec * 1000LL, at = INT64_MAX;
    struct http_conn *c, *next;
    s->sweep_at = 0;
    for (int w = WAIT_HEAD; w <= WAIT_IDLE; w++)
        while ((c = s->wait[w].first) && conn_deadline(s, c) <= now)
            conn_expire(c);
    /* In order of their start, so only those past their grace can be due. */
    for (c = body->first; c && c->wait_since + grace <= now; c = next) {
        next = c->link[LINK_WAIT].next;
        if (conn_deadline(s, c) <= now) conn_expire(c);
    }
    for (int w = WAIT_HEAD; w <= WAIT_IDLE; w++)
        if ((c = s->wait[w].first) && conn_deadline(s, c) < at) at = conn_deadline(s, c);
    for (c = body->first; c && c->wait_since + grace < at; c = c->link[LINK_WAIT].next)
        if (conn_deadline(s, c) < at) at = conn_deadline(s, c);
    sweep_arm(s, at, now);
}

/* Count a shed or refused connection; log now and then, not per connection. */
static void overload_note(struct http_server *s, bool shed, const char *why)
{
    if (shed)
        s->shed++;
    else
        s->refused++;
    int64_t now = clock_mono_ms();
    if (s->shed_logged && now - s->shed_logged < HTTP_SHED_LOG_MS) return;
    log_warn("http connections over the limit", "shed=%llu refused=%llu last=%s conns=%d",
             (unsigned long long)s->shed, (unsigned long long)s->refused, why, s->nconns);
    s->shed = s->refused = 0;
    s->shed_logged = now;
}

/* A connection waiting for a request whose socket already holds one we have not read
 * yet (the loop is behind, not the client): at least a request line's worth of bytes.
 * Under a reconnecting flood every waiting connection is young, so age alone would shed
 * a fresh, complete probe before the loop got to it. */
static bool conn_starved(const struct http_conn *c)
{
    int n = 0;
    return (c->wait == WAIT_HEAD || c->wait == WAIT_IDLE) &&
           ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n >= HTTP_STARVED_BYTES;
}

/* The first connection from c on (along list link k) that may be shed: not in a body,
 * not starved; at most HTTP_SHED_SCAN looked at. */
static struct http_conn *shed_candidate(struct http_conn *c, int k)
{
    for (int i = 0; c && i < HTTP_SHED_SCAN; c = c->link[k].next, i++)
        if (c->wait != WAIT_BODY && !conn_starved(c)) return c;
    return NULL;
}

/* Make room by closing the connection that has waited longest for a request: of peer p,
 * or of anyone when p is NULL, passing over those whose request is already in their
 * socket. Connections in a body go last, as they were sending something. Returns false
 * when every connection is being served. */
static bool conn_shed(struct http_server *s, struct http_peer *p, const char *why)
{
    struct http_conn *victim = NULL;
    if (p) {
        victim = shed_candidate(p->waiting.first, LINK_PEER);
        if (!victim) victim = p->waiting.first;
    } else {
        for (int w = WAIT_HEAD; w <= WAIT_LINGER; w++) {
            struct http_conn *c = shed_candidate(s->wait[w].first, LINK_WAIT);
            if (c && (!victim || c->wait_since < victim->wait_since)) victim = c;
        }
        if (!victim) victim = s->wait[WAIT_HEAD].first;
        if (!victim) victim = s->wait[WAIT_IDLE].first;
        if (!victim) victim = s->wait[WAIT_BODY].first;
    }
    if (!victim) return false;
    overload_note(s, true, why);
    conn_free(victim);
    return true;
}

/* ------------------------------------------------------------------ parser callbacks */

static int hdr_budget(struct http_conn *c, size_t n)
{
    c->req->header_bytes += n;
    if (c->req->header_bytes <= c->s->cfg.max_header_bytes) return 0;
    return err_set(&c->rej, 431, "headers_too_large", "headers", "request headers exceed %zu bytes",
                   c->s->cfg.max_header_bytes);
}

static int hdr_push(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (r->hdrs.n >= HTTP_MAX_HEADERS)
        return err_set(&c->rej, 431, "headers_too_large", "headers", "more than %d header fields",
                       HTTP_MAX_HEADERS);
    kvs_add(&r->hdrs, buf_steal(&r->hfield, NULL), buf_steal(&r->hval, NULL));
    r->in_value = false;
    return hdr_budget(c, 4); /* ": " and CRLF */
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    if (c->req->url.len + n > HTTP_MAX_URL)
        return err_set(&c->rej, 414, "uri_too_long", "path",
                       "request target is longer than %d bytes", HTTP_MAX_URL);
    if (hdr_budget(c, n) < 0) return -1;
    buf_append(&c->req->url, at, n);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    if (c->req->in_value && hdr_push(c) < 0) return -1;
    if (hdr_budget(c, n) < 0) return -1;
    buf_append(&c->req->hfield, at, n);
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    c->req->in_value = true;
    if (hdr_budget(c, n) < 0) return -1;
    buf_append(&c->req->hval, at, n);
    return 0;
}

static void maybe_continue(struct http_conn *c, const http_parser *p)
{
    const char *ex = kvs_get(&c->req->hdrs, "Expect", true);
    bool has_body = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length);
    if (ex && strcasecmp(ex, "100-continue") == 0 && !c->req->http10 && has_body)
        evbuffer_add_printf(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n");
}

static int on_headers_complete(http_parser *p)
{
    struct http_conn *c = p->data;
    struct http_req *r = c->req;
    if ((r->in_value || r->hfield.len) && hdr_push(c) < 0) return -1;
    r->method = http_method_str((enum http_method)p->method);
    r->http10 = p->http_major < 1 || (p->http_major == 1 && p->http_minor == 0);
    r->keep_alive = http_should_keep_alive(p);
    r->head = p->method == HTTP_HEAD;
    r->is_connect = p->method == HTTP_CONNECT;
    /* Refuse before reading a byte of the body. */
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->s->cfg.max_body)
        return err_set(&c->rej, 413, "payload_too_large", "body",
                       "request body of %llu bytes exceeds the limit of %zu bytes",
                       (unsigned long long)p->content_length, c->s->cfg.max_body);
    maybe_continue(c, p);
    if ((p->flags & F_CHUNKED) || ((p->flags & F_CONTENTLENGTH) && p->content_length)) {
        c->body_bytes = 0;
        wait_set(c, WAIT_BODY);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct http_conn *c = p->data;
    c->body_bytes += n;
    if (buf_append(&c->req->body, at, n) == 0) return 0;
    return err_set(&c->rej, 413, "payload_too_large", "body",
                   "request body exceeds the limit of %zu bytes", c->s->cfg.max_body);
}

static int on_message_complete(http_parser *p)
{
    /* Stop right after this message; the bytes after it are the next request. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ------------------------------------------------------------------ routing */

static int split_path(struct http_req *r, const char *raw, size_t n)
{
    /* "/" is one empty segment, "/a/" is "a" and "". Decoding per segment keeps an
     * encoded "/" (%2F) inside its segment. */
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += raw[i] == '/';
    r->segs = xcalloc(cap, sizeof *r->segs);
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && raw[i] != '/') continue;
        char *seg = pct_decode(raw + start, i - start, false);
        if (!seg) return -1;
        r->segs[r->nsegs++] = seg;
        start = i + 1;
    }
    return 0;
}

static int parse_query(struct http_req *r, const char *q, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && q[i] != '&') continue;
        const char *piece = q + start;
        size_t len = i - start, klen = len;
        start = i + 1;
        if (len == 0) continue;
        const char *eq = memchr(piece, '=', len);
        if (eq) klen = (size_t)(eq - piece);
        char *k = pct_decode(piece, klen, true);
        char *v = eq ? pct_decode(eq + 1, len - klen - 1, true) : xstrdup("");
        if (!k || !v) {
            free(k);
            free(v);
            return -1;
        }
        kvs_add(&r->query, k, v);
    }
    return 0;
}

static int req_prepare(struct http_req *r, struct err *e)
{
    struct http_parser_url u;
    http_parser_url_init(&u);
    const char *url = r->url.data ? r->url.data : "";
    if (r->url.len == 0 || http_parser_parse_url(url, r->url.len, r->is_connect, &u) != 0)
        return err_set(e, 400, "bad_request", "path", "request target is not a valid URL");
    const char *raw = "/";
    size_t rawlen = 1;
    if (u.field_set & (1 << UF_PATH)) {
        raw = url + u.field_data[UF_PATH].off;
        rawlen = u.field_data[UF_PATH].len;
    }
    if (raw[0] != '/') return err_set(e, 400, "bad_request", "path", "path must start with /");
    r->path = pct_decode(raw, rawlen, false);
    if (!r->path || split_path(r, raw + 1, rawlen - 1) < 0)
        return err_invalid(e, "path", "path has an invalid percent-encoding");
    if ((u.field_set & (1 << UF_QUERY)) &&
        parse_query(r, url + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len) < 0)
        return err_invalid(e, "query", "query string has an invalid percent-encoding");
    return 0;
}

static bool route_match(const struct http_route *rt, const struct http_req *r)
{
    if (rt->nsegs != r->nsegs) return false;
    for (size_t i = 0; i < rt->nsegs; i++) {
        const char *p = rt->segs[i];
        if (p[0] == ':' ? r->segs[i][0] == '\0' : strcmp(p, r->segs[i]) != 0) return false;
    }
    return true;
}

static const struct http_route *find_route(const struct http_server *s, const struct http_req *r,
                                           const char *method)
{
    for (const struct http_route *rt = s->routes; rt; rt = rt->next)
        if (strcmp(rt->method, method) == 0 && route_match(rt, r)) return rt;
    return NULL;
}

static void bind_params(struct http_req *r, const struct http_route *rt)
{
    for (size_t i = 0; i < rt->nsegs; i++)
        if (rt->segs[i][0] == ':')
            kvs_add(&r->params, xstrdup(rt->segs[i] + 1), xstrdup(r->segs[i]));
}

static bool list_has(const char *list, const char *m)
{
    size_t n = strlen(m);
    for (const char *p = list; (p = strstr(p, m)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

/* "GET, POST" for every route matching the path; empty when none does. */
static void allowed_methods(const struct http_server *s, const struct http_req *r, struct buf *b)
{
    for (const struct http_route *rt = s->routes; rt; rt = rt->next) {
        if (!route_match(rt, r) || list_has(b->data ? b->data : "", rt->method)) continue;
        buf_printf(b, "%s%s", b->len ? ", " : "", rt->method);
    }
    if (b->len && list_has(b->data, "GET") && !list_has(b->data, "HEAD")) buf_puts(b, ", HEAD");
}

static void route_request(struct http_req *r)
{
    const struct http_server *s = r->server;
    const struct http_route *rt = find_route(s, r, r->method);
    if (!rt && r->head) rt = find_route(s, r, "GET");
    if (rt) {
        bind_params(r, rt);
        rt->fn(r, rt->arg);
        return;
    }
    struct buf allow;
    buf_init(&allow, 0);
    allowed_methods(s, r, &allow);
    if (allow.len == 0) {
        http_reply_error(r, 404, "not_found", "", "no route for %s %s", r->method, r->path);
    } else {
        http_add_header(r, "Allow", allow.data);
        http_reply_error(r, 405, "method_not_allowed", "", "%s is not allowed on %s (allowed: %s)",
                         r->method, r->path, allow.data);
    }
    buf_fini(&allow);
}

/* CORS for the origins of http_set_cors_origins: their pages' requests get
 * Access-Control-Allow-Origin, and their preflights (OPTIONS with
 * Access-Control-Request-Method, which carry no credentials) are answered here, before the
 * filter would refuse them. True when the request was answered. */
static bool cors(struct http_req *r)
{
    struct http_server *s = r->server;
    const char *origin = kvs_get(&r->hdrs, "Origin", true);
    bool known = false;
    for (size_t i = 0; origin && i < s->ncors && !known; i++) known = strcmp(origin, s->cors[i]) == 0;
    if (!known) return false; /* no CORS headers: the browser keeps the reply from the page */
    http_add_header(r, "Access-Control-Allow-Origin", origin);
    http_add_header(r, "Vary", "Origin");
    if (strcmp(r->method, "OPTIONS") != 0 || !kvs_get(&r->hdrs, "Access-Control-Request-Method", true))
        return false;
    http_add_header(r, "Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE");
    http_add_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Last-Event-ID");
    http_add_header(r, "Access-Control-Max-Age", "600");
    http_reply_raw(r, 204, NULL, NULL, 0);
    return true;
}

static void req_run(struct http_req *r)
{
    struct err e = ERR_INIT;
    if (req_prepare(r, &e) < 0) {
        http_reply_err(r, &e);
        return;
    }
    struct http_server *s = r->server;
    if (cors(r)) return;
    if (s->filter && !s->filter(r, s->filter_arg)) {
        /* A filter that stops a request must answer it, or the client would hang. */
        if (!r->done && !r->sse)
            http_reply_error(r, 500, "internal_error", "", "request stopped without a reply");
        return;
    }
    if (!r->done && !r->sse) route_request(r);
}

/* ------------------------------------------------------------------ connection I/O */

static bool conn_process(struct http_conn *c);

/* Run the handler for the request just parsed. Returns false if the connection was
 * freed. */
static bool conn_dispatch(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct http_req *r = c->req;
    if (c->parser.upgrade) r->keep_alive = false; /* no protocol switching here */
    wait_set(c, WAIT_NONE); /* the request is complete: its time is the handler's */
    r->state = REQ_HANDLER;
    r->in_handler = true;
    s->cb_depth++;
    req_run(r);
    s->cb_depth--;
    r->in_handler = false;
    if (r->done) {
        c->req = NULL;
        req_free(r);
        if (c->upgrade_fn) return conn_handover(c);
        return true;
    }
    r->state = REQ_KEPT;
    if (!c->peer_eof && !s->shutting_down) return true;
    /* The client already left, or we are shutting down: the kept request is dead. The
     * connection is settled first: the close callback must be the last thing here. */
    c->req = NULL;
    bool alive = conn_finish(c);
    req_abort(r);
    return alive;
}

/* Parse buffered input and dispatch complete requests one at a time. Returns false if
 * the connection was freed. */
static bool conn_process(struct http_conn *c)
{
    if (c->upgrade_fn && !c->req) return conn_handover(c);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (!c->close_after && !c->s->shutting_down) {
        if (c->req && c->req->state != REQ_PARSING) return true; /* wait for the handler */
        if (evbuffer_get_length(in) == 0) break;
        if (!c->req) {
            c->req = req_new(c);
            /* A new connection's head is due from the accept, a next request's from
             * its first byte. */
            if (c->wait != WAIT_HEAD) wait_set(c, WAIT_HEAD);
        }
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
        size_t n = http_parser_execute(&c->parser, &parser_settings, v.iov_base, v.iov_len);
        evbuffer_drain(in, n);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            if (!conn_dispatch(c)) return false;
            continue;
        }
        if (e != HPE_OK || n != v.iov_len) return conn_reject(c, e);
    }
    if (c->req && c->req->state == REQ_KEPT) return true;
    if (c->peer_eof || c->s->shutting_down || c->close_after) {
        if (c->req) { /* a request that will never be completed */
            req_free(c->req);
            c->req = NULL;
        }
        return conn_finish(c);
    }
    return true;
}

static void conn_readcb(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    if (c->lingering)
        linger_read(c);
    else
        conn_process(c);
}

static void conn_writecb(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    size_t len = evbuffer_get_length(bufferevent_get_output(bev));
    if (len == 0 && !c->req && !c->lingering) {
        if (c->close_after) {
            conn_close_flushed(c);
            return;
        }
        /* The reply is out: keep-alive idle until the next request. */
        if (c->wait == WAIT_NONE && !c->upgrade_fn) wait_set(c, WAIT_IDLE);
        return;
    }
    struct http_req *r = c->req;
    if (r && r->sse && r->want_drain && !r->done && len <= HTTP_SSE_LIMIT) {
        r->want_drain = false;
        if (!r->drain_fn) return;
        struct http_server *s = c->s;
        s->cb_depth++;
        r->drain_fn(r, r->drain_arg); /* may end the stream or shut down: c is not used after */
        s->cb_depth--;
    }
}

static void conn_eventcb(struct bufferevent *bev, short what, void *arg)
{
    struct http_conn *c = arg;
    if (c->lingering || (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))) {
        conn_free(c);
        return;
    }
    if (!(what & BEV_EVENT_EOF)) return;
    c->peer_eof = true;
    if (c->req && c->req->state == REQ_KEPT) {
        conn_free(c); /* the client left before the kept request finished */
        return;
    }
    /* A half-closed client may still wait for replies to what it already sent. */
    conn_process(c);
}

static void conn_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    conn_process(arg);
}

static void peer_text(const struct sockaddr *sa, char *out, size_t n, bool *loopback)
{
    *loopback = false;
    snprintf(out, n, "unknown");
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, out, (socklen_t)n);
        *loopback = (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) { /* dual-stack socket: show it as IPv4 */
            const uint8_t *b = in6->sin6_addr.s6_addr + 12;
            inet_ntop(AF_INET, b, out, (socklen_t)n);
            *loopback = b[0] == 127;
        } else {
            inet_ntop(AF_INET6, &in6->sin6_addr, out, (socklen_t)n);
            *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        }
    }
}

static void conn_new(struct http_server *s, evutil_socket_t fd, const struct sockaddr *sa,
                     const uint8_t key[16])
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* replies go out whole */
    struct bufferevent *bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        evutil_closesocket(fd);
        log_error("http connection setup failed", "peer_fd=%d", (int)fd);
        return;
    }
    struct http_conn *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->bev = bev;
    c->resume_ev = event_new(s->base, -1, 0, conn_resume_cb, c);
    ASSERT(c->resume_ev);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    peer_text(sa, c->peer, sizeof c->peer, &c->loopback);
    c->src = peer_ref(s, key);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    bufferevent_setcb(bev, conn_readcb, conn_writecb, conn_eventcb, c);
    bufferevent_setwatermark(bev, EV_READ, 0, s->cfg.max_header_bytes + HTTP_READ_SLACK);
    /* Reads are timed by the wait lists (libevent's read timeout would restart on every
     * byte); a write must keep making progress. */
    bufferevent_set_timeouts(bev, NULL, &s->write_tv);
    wait_set(c, WAIT_HEAD);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* ------------------------------------------------------------------ listeners */

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct http_listener *li = arg;
    struct http_server *s = li->s;
    if (s->shutting_down) {
        evutil_closesocket(fd);
        return;
    }
    uint8_t key[16];
    peer_key(sa, key);
    struct http_peer *p = peer_get(s, key);
    if ((p && p->nconns >= s->cfg.max_per_peer && !conn_shed(s, p, "peer_full")) ||
        (s->nconns >= s->cfg.max_connections && !conn_shed(s, NULL, "table_full"))) {
        overload_note(s, false, "all_busy");
        evutil_closesocket(fd);
        return;
    }
    conn_new(s, fd, sa, key); /* p may be gone: shedding its last connection frees it */
}

static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    struct http_listener *li = arg;
    int e = EVUTIL_SOCKET_ERROR();
    if (e == EMFILE || e == ENFILE) {
        /* accept() fails so even with nothing queued (the descriptor comes first): that
         * is the end of the accept loop, not a client turned away. */
        struct pollfd pfd = {.fd = evconnlistener_get_fd(lev), .events = POLLIN};
        if (poll(&pfd, 1, 0) == 0) return;
        /* One is queued: free a descriptor stuck connections hold, accept next turn. */
        if (conn_shed(li->s, NULL, "fd_limit")) return;
    }
    log_error("http accept failed", "err=\"%s\" backoff_ms=%d", evutil_socket_error_to_string(e),
              HTTP_ACCEPT_BACKOFF_MS);
    /* Out of descriptors etc.: the pending connection stays queued, so retrying at once
     * would spin the loop. */
    evconnlistener_disable(lev);
    struct timeval tv = {0, HTTP_ACCEPT_BACKOFF_MS * 1000};
    evtimer_add(li->backoff, &tv);
}

static void on_accept_backoff(evutil_socket_t fd, short what, void *arg)
{
    struct http_listener *li = arg;
    evconnlistener_enable(li->lev);
}

static void listeners_free(struct http_server *s)
{
    while (s->listeners) {
        struct http_listener *li = s->listeners;
        s->listeners = li->next;
        evconnlistener_free(li->lev);
        event_free(li->backoff);
        free(li);
    }
}

/* Split "host:port" / "[v6]:port" into host (may be empty) and port. */
static int split_hostport(const char *addr, char *host, size_t hn, const char **port)
{
    const char *colon;
    size_t len;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') return -1;
        len = (size_t)(close - addr - 1);
        if (len >= hn) return -1;
        memcpy(host, addr + 1, len);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) return -1;
        len = (size_t)(colon - addr);
        if (len >= hn) return -1;
        memcpy(host, addr, len);
    }
    host[len] = '\0';
    *port = colon + 1;
    if (!**port || strspn(*port, "0123456789") != strlen(*port) || atol(*port) > 65535) return -1;
    return 0;
}

static evutil_socket_t bind_one(const struct addrinfo *ai, int *err_no)
{
    evutil_socket_t fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err_no = errno;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 511) < 0) {
        *err_no = errno;
        evutil_closesocket(fd);
        return -1;
    }
    return fd;
}

static int bound_port(evutil_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return 0;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

static void listener_add(struct http_server *s, evutil_socket_t fd)
{
    struct http_listener *li = xcalloc(1, sizeof *li);
    li->s = s;
    /* backlog 0: the socket is already listening */
    li->lev = evconnlistener_new(s->base, on_accept, li,
                                 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    ASSERT(li->lev);
    evconnlistener_set_error_cb(li->lev, on_accept_error);
    li->backoff = evtimer_new(s->base, on_accept_backoff, li);
    ASSERT(li->backoff);
    li->next = s->listeners;
    s->listeners = li;
}

int http_server_listen(struct http_server *s, const char *addr, struct err *err)
{
    char host[256];
    const char *port;
    if (s->shutting_down) return err_set(err, 500, "internal_error", "", "server is shutting down");
    if (!addr || split_hostport(addr, host, sizeof host, &port) < 0)
        return err_invalid(err, "listen", "listen address \"%s\" is not host:port",
                           addr ? addr : "");
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] && strcmp(host, "*") != 0 ? host : NULL, port, &hints, &res);
    if (rc != 0)
        return err_invalid(err, "listen", "cannot resolve listen address \"%s\": %s", addr,
                           gai_strerror(rc));
    int err_no = EADDRNOTAVAIL;
    evutil_socket_t fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = bind_one(ai, &err_no);
    freeaddrinfo(res);
    if (fd < 0)
        return err_set(err, 500, "internal_error", "listen", "cannot listen on %s: %s", addr,
                       strerror(err_no));
    s->port = bound_port(fd);
    listener_add(s, fd);
    return 0;
}

/* ------------------------------------------------------------------ server */

static void server_destroy(struct http_server *s)
{
    listeners_free(s);
    while (s->conns)
        conn_free(s->conns);
    while (s->orphans) {
        struct http_req *r = s->orphans;
        orphan_remove(s, r);
        req_free(r);
    }
    while (s->routes) {
        struct http_route *rt = s->routes;
        s->routes = rt->next;
        strv_free(rt->segs, rt->nsegs);
        free(rt);
    }
    if (s->done_ev) event_free(s->done_ev);
    event_free(s->sweep_ev);
    free(s->peers);
    strv_free(s->cors, s->ncors);
    free(s);
}

struct http_server *http_server_new(struct event_base *base, const struct http_config *cfg)
{
    static uint32_t parser_max_header = HTTP_MAX_HEADER_SIZE;
    struct http_server *s = xcalloc(1, sizeof *s);
    s->base = base;
    if (cfg) s->cfg = *cfg;
    if (!s->cfg.max_body) s->cfg.max_body = HTTP_DEF_MAX_BODY;
    if (!s->cfg.max_header_bytes) s->cfg.max_header_bytes = HTTP_DEF_MAX_HEADER;
    if (s->cfg.idle_timeout_sec <= 0) s->cfg.idle_timeout_sec = HTTP_DEF_IDLE_SEC;
    if (s->cfg.header_timeout_sec <= 0) s->cfg.header_timeout_sec = HTTP_DEF_HEADER_SEC;
    if (s->cfg.body_timeout_sec <= 0) s->cfg.body_timeout_sec = HTTP_DEF_BODY_SEC;
    if (s->cfg.body_min_rate <= 0) s->cfg.body_min_rate = HTTP_DEF_BODY_RATE;
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = HTTP_DEF_MAX_CONN;
    if (s->cfg.max_per_peer <= 0) s->cfg.max_per_peer = HTTP_DEF_MAX_PER_PEER;
    if (s->cfg.max_per_peer > s->cfg.max_connections)
        s->cfg.max_per_peer = s->cfg.max_connections;
    s->write_tv.tv_sec = s->cfg.idle_timeout_sec;
    s->sweep_ev = evtimer_new(base, sweep_cb, s);
    ASSERT(s->sweep_ev);
    /* Chains stay short: at most one peer per connection, about one slot each. */
    s->npeer_slots = 16;
    while (s->npeer_slots < (size_t)s->cfg.max_connections && s->npeer_slots < 65536)
        s->npeer_slots *= 2;
    s->peers = xcalloc(s->npeer_slots, sizeof *s->peers);
    evutil_secure_rng_get_bytes(&s->peer_seed, sizeof s->peer_seed);
    s->routes_tail = &s->routes;
    /* http-parser has its own process-wide header cap; it must not undercut ours. It is
     * only ever raised, so servers with different caps coexist. */
    if (s->cfg.max_header_bytes + 4096 > parser_max_header &&
        s->cfg.max_header_bytes < UINT32_MAX - 4096) {
        parser_max_header = (uint32_t)s->cfg.max_header_bytes + 4096;
        http_parser_set_max_header_size(parser_max_header);
    }
    return s;
}

static void server_done_cb(evutil_socket_t fd, short what, void *arg)
{
    server_destroy(arg);
}

/* Shutdown step for one connection not inside a handler. */
static void conn_shutdown(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (r && r->in_handler) return; /* conn_dispatch finishes it when the handler returns */
    if (c->lingering) {
        conn_free(c);
        return;
    }
    c->req = NULL;
    conn_finish(c); /* frees idle connections now, the others once flushed */
    if (r && r->state == REQ_KEPT)
        req_abort(r); /* last: c may be gone */
    else if (r)
        req_free(r);
}

void http_server_shutdown(struct http_server *s, int timeout_ms)
{
    if (s->shutting_down) return;
    s->shutting_down = true;
    listeners_free(s);
    s->done_ev = evtimer_new(s->base, server_done_cb, s);
    ASSERT(s->done_ev);
    struct http_conn *next;
    for (struct http_conn *c = s->conns; c; c = next) {
        next = c->next; /* callbacks below never free other connections */
        conn_shutdown(c);
    }
    if (s->nconns == 0) {
        event_active(s->done_ev, EV_TIMEOUT, 0);
        return;
    }
    if (timeout_ms < 0) timeout_ms = 0;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(s->done_ev, &tv);
}

void http_server_free(struct http_server *s)
{
    if (!s) return;
    ASSERT(s->cb_depth == 0); /* not from a handler or callback: use shutdown there */
    server_destroy(s);
}

int http_server_port(const struct http_server *s)
{
    return s->port;
}

int http_server_connections(const struct http_server *s)
{
    return s->nconns;
}

void http_route(struct http_server *s, const char *method, const char *pattern, http_handler_fn fn,
                void *arg)
{
    ASSERT(method && strlen(method) < sizeof(((struct http_route *)0)->method));
    ASSERT(pattern && pattern[0] == '/' && fn);
    struct http_route *rt = xcalloc(1, sizeof *rt);
    snprintf(rt->method, sizeof rt->method, "%s", method);
    const char *p = pattern + 1;
    size_t cap = 1;
    for (const char *q = p; *q; q++)
        cap += *q == '/';
    rt->segs = xcalloc(cap, sizeof *rt->segs);
    for (;;) {
        size_t n = strcspn(p, "/");
        rt->segs[rt->nsegs] = xstrndup(p, n);
        ASSERT(strcmp(rt->segs[rt->nsegs], ":") != 0); /* a capture needs a name */
        rt->nsegs++;
        if (!p[n]) break;
        p += n + 1;
    }
    rt->fn = fn;
    rt->arg = arg;
    *s->routes_tail = rt;
    s->routes_tail = &rt->next;
}

void http_set_cors_origins(struct http_server *s, const char *const *origins, size_t n)
{
    strv_free(s->cors, s->ncors);
    s->cors = n ? xcalloc(n, sizeof *s->cors) : NULL;
    s->ncors = n;
    for (size_t i = 0; i < n; i++) s->cors[i] = xstrdup(origins[i]);
}

void http_set_filter(struct http_server *s, http_filter_fn fn, void *arg)
{
    s->filter = fn;
    s->filter_arg = arg;
}

/* ------------------------------------------------------------------ request accessors */

const char *http_req_method(const struct http_req *r)
{
    return r->method;
}

const char *http_req_path(const struct http_req *r)
{
    return r->path ? r->path : "/";
}

const char *http_req_target(const struct http_req *r)
{
    return r->url.data ? r->url.data : "";
}

const char *http_req_param(const struct http_req *r, const char *name)
{
    return kvs_get(&r->params, name, false);
}

const char *http_req_query(const struct http_req *r, const char *name)
{
    return kvs_get(&r->query, name, false);
}

bool http_req_query_at(const struct http_req *r, size_t i, const char **key, const char **value)
{
    if (i >= r->query.n) return false;
    *key = r->query.v[i].key;
    *value = r->query.v[i].val;
    return true;
}

const char *http_req_header(const struct http_req *r, const char *name)
{
    return kvs_get(&r->hdrs, name, true);
}

bool http_req_header_at(const struct http_req *r, size_t i, const char **name,
                        const char **value)
{
    if (i >= r->hdrs.n) return false;
    *name = r->hdrs.v[i].key;
    *value = r->hdrs.v[i].val;
    return true;
}

const char *http_req_body(const struct http_req *r, size_t *len)
{
    if (len) *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

const char *http_req_peer(const struct http_req *r)
{
    return r->conn ? r->conn->peer : "unknown";
}

bool http_req_peer_is_loopback(const struct http_req *r)
{
    return r->conn && r->conn->loopback;
}

const char *http_req_id(const struct http_req *r)
{
    return r->id;
}

json_t *http_req_json(struct http_req *r, bool allow_empty, struct err *err)
{
    size_t len;
    const char *b = http_req_body(r, &len);
    size_t ws = 0;
    while (ws < len && b[ws] && strchr(" \t\r\n", b[ws]))
        ws++;
    if (ws == len) {
        if (allow_empty) return json_object();
        err_invalid(err, "body", "request body is empty; a JSON value is required");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(b, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        err_invalid(err, "body", "request body is not valid JSON: %s at line %d column %d", je.text,
                    je.line, je.column);
    return j;
}

void http_req_set_data(struct http_req *r, void *data)
{
    r->data = data;
}

void *http_req_data(const struct http_req *r)
{
    return r->data;
}

void http_req_on_close(struct http_req *r, http_close_fn fn, void *arg)
{
    r->close_fn = fn;
    r->close_arg = arg;
}

/* ------------------------------------------------------------------ replies */

/* The reply (or SSE stream) is complete. Outside a handler the request is freed here
 * and the connection goes on with the next pipelined request - from its resume event,
 * not from this call stack. */
static void req_finished(struct http_req *r)
{
    if (r->in_handler || r->closing) return; /* conn_dispatch / req_abort frees it */
    struct http_conn *c = r->conn;
    if (!c) {
        orphan_remove(r->server, r);
        req_free(r);
        return;
    }
    c->req = NULL;
    req_free(r);
    event_active(c->resume_ev, EV_TIMEOUT, 0);
}

static bool header_ok(const char *name, const char *value)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return name && value && name[0] && strspn(name, tchar) == strlen(name) &&
           !strpbrk(value, "\r\n");
}

void http_add_header(struct http_req *r, const char *name, const char *value)
{
    ASSERT(!r->done && !r->sse);
    if (!header_ok(name, value)) {
        /* A CR/LF would let a value smuggle headers into the response. */
        log_warn("http response header dropped", "req=%s reason=invalid_characters", r->id);
        return;
    }
    if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0)
        return; /* message framing is ours */
    if (strcasecmp(name, "Connection") == 0) {
        if (strcasestr(value, "close")) r->want_close = true;
        return;
    }
    kvs_add(&r->out_hdrs, xstrdup(name), xstrdup(value));
}

void http_reply_raw(struct http_req *r, int status, const char *content_type, const void *body,
                    size_t len)
{
    ASSERT(!r->done && !r->sse);
    ASSERT(body || len == 0);
    r->done = true;
    if (r->conn) {
        /* gzip when the client takes it and it pays: JSON and text of a KiB or more */
        struct buf z = {0};
        bool coded = len >= GZIP_MIN_BYTES && status != 204 && status != 304 &&
                     gzip_type_ok(kvs_get(&r->out_hdrs, "Content-Type", true) ?: content_type) &&
                     !kvs_get(&r->out_hdrs, "Content-Encoding", true);
        if (coded) {
            kvs_add(&r->out_hdrs, xstrdup("Vary"), xstrdup("Accept-Encoding"));
            buf_init(&z, 0);
            coded = gzip_accepted(http_req_header(r, "Accept-Encoding")) && gzip_compress(body, len, &z) == 0;
        }
        if (coded) kvs_add(&r->out_hdrs, xstrdup("Content-Encoding"), xstrdup("gzip"));
        write_response(r->conn, r, status, content_type, coded ? z.data : body, coded ? z.len : len);
        buf_fini(&z);
    }
    req_finished(r);
}

void http_reply_json(struct http_req *r, int status, json_t *body)
{
    if (!body) {
        http_reply_raw(r, status, NULL, NULL, 0);
        return;
    }
    size_t len;
    char *s = jtext_dump(body, &len);
    json_decref(body);
    if (!s) {
        http_reply_error(r, 500, "internal_error", "", "cannot serialize the response");
        return;
    }
    http_reply_raw(r, status, "application/json", s, len);
    free(s);
}

static void reply_error_msg(struct http_req *r, int status, const char *code, const char *field,
                            const char *msg)
{
    char *body = error_json(r->server->cfg.flat_errors, code, field, msg);
    http_reply_raw(r, status ? status : 500, "application/json", body, strlen(body));
    free(body);
}

void http_reply_error(struct http_req *r, int status, const char *code, const char *field,
                      const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply_error_msg(r, status, code, field, msg);
}

void http_reply_err(struct http_req *r, const struct err *e)
{
    reply_error_msg(r, e->status, e->code, e->field, e->msg);
}

/* ------------------------------------------------------------------ SSE */

void http_sse_start(struct http_req *r)
{
    ASSERT(!r->done && !r->sse);
    r->sse = true;
    struct http_conn *c = r->conn;
    if (!c) return;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
                             "Connection: close\r\n");
    for (size_t i = 0; i < r->out_hdrs.n; i++)
        if (strcasecmp(r->out_hdrs.v[i].key, "Content-Type") != 0)
            evbuffer_add_printf(out, "%s: %s\r\n", r->out_hdrs.v[i].key, r->out_hdrs.v[i].val);
    evbuffer_add(out, "\r\n", 2);
    /* The stream has no length: it ends when the connection does. */
    c->close_after = true;
    /* Have the write callback run whenever output is at or under the limit. */
    bufferevent_setwatermark(c->bev, EV_WRITE, HTTP_SSE_LIMIT, 0);
}

/* A raw stream (NDJSON and the like): the SSE machinery with another content type.
 * To a keep-alive HTTP/1.1 client the body goes chunked and the connection stays for
 * the next request: clients that send a stream request per call (the E2B SDK's every
 * command, file stream and watch) then pay no connect, accept and close per call. */
void http_stream_start(struct http_req *r, const char *content_type)
{
    ASSERT(!r->done && !r->sse && header_ok("Content-Type", content_type));
    r->sse = true;
    struct http_conn *c = r->conn;
    if (!c) return;
    r->chunked = !r->http10 && r->keep_alive && !r->want_close && !c->s->shutting_down;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                             "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n%s",
                        content_type,
                        r->chunked ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n");
    for (size_t i = 0; i < r->out_hdrs.n; i++)
        if (strcasecmp(r->out_hdrs.v[i].key, "Content-Type") != 0)
            evbuffer_add_printf(out, "%s: %s\r\n", r->out_hdrs.v[i].key, r->out_hdrs.v[i].val);
    evbuffer_add(out, "\r\n", 2);
    if (!r->chunked) c->close_after = true; /* no length: the body ends with the connection */
    bufferevent_setwatermark(c->bev, EV_WRITE, HTTP_SSE_LIMIT, 0);
}

int http_stream_write(struct http_req *r, const void *data, size_t len)
{
    ASSERT(r->sse && !r->done);
    struct http_conn *c = r->conn;
    if (!c) return -EPIPE;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) > HTTP_SSE_LIMIT) {
        r->want_drain = true;
        return -EAGAIN;
    }
    if (len == 0) return 0; /* an empty chunk would end the body */
    if (r->chunked) evbuffer_add_printf(out, "%zx\r\n", len);
    evbuffer_add(out, data, len);
    if (r->chunked) evbuffer_add(out, "\r\n", 2);
    return 0;
}

/* "name: value\n" with line breaks in value flattened (they would end the field). */
static void sse_field(struct evbuffer *out, const char *name, const char *value)
{
    char *v = xstrdup(value);
    for (char *p = v; (p = strpbrk(p, "\r\n")) != NULL;)
        *p = ' ';
    evbuffer_add_printf(out, "%s: %s\n", name, v);
    free(v);
}

int http_sse_send(struct http_req *r, const char *id, const char *event, const char *data)
{
    ASSERT(r->sse && !r->done);
    struct http_conn *c = r->conn;
    if (!c) return -EPIPE; /* client gone (no close callback was set) */
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) > HTTP_SSE_LIMIT) {
        r->want_drain = true;
        return -EAGAIN;
    }
    if (id) sse_field(out, "id", id);
    if (event) sse_field(out, "event", event);
    /* SSE lines end at CRLF, LF or CR: each piece of data becomes one data: line. */
    const char *p = data ? data : "";
    for (;;) {
        size_t n = strcspn(p, "\r\n");
        evbuffer_add(out, "data: ", 6);
        evbuffer_add(out, p, n);
        evbuffer_add(out, "\n", 1);
        if (!p[n]) break;
        p += n + (p[n] == '\r' && p[n + 1] == '\n' ? 2 : 1);
    }
    evbuffer_add(out, "\n", 1);
    return 0;
}

void http_sse_comment(struct http_req *r, const char *text)
{
    ASSERT(r->sse && !r->done);
    struct http_conn *c = r->conn;
    if (!c) return;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (evbuffer_get_length(out) > HTTP_SSE_LIMIT) return; /* a ping cannot help a full pipe */
    sse_field(out, "", text ? text : "");
    evbuffer_add(out, "\n", 1);
}

void http_sse_on_drain(struct http_req *r, http_close_fn fn, void *arg)
{
    r->drain_fn = fn;
    r->drain_arg = arg;
}

void http_sse_end(struct http_req *r)
{
    ASSERT(r->sse && !r->done);
    r->done = true;
    struct http_conn *c = r->conn;
    if (c && r->chunked) {
        /* the last chunk; the connection serves the next request once it is out */
        evbuffer_add(bufferevent_get_output(c->bev), "0\r\n\r\n", 5);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    }
    req_finished(r); /* else the connection closes once the output is flushed */
}

/* ------------------------------------------------------------------ upgrade */

int http_upgrade(struct http_req *r, const char *protocol, http_upgrade_fn fn, void *arg)
{
    ASSERT(!r->done && !r->sse && fn && header_ok("Upgrade", protocol));
    struct http_conn *c = r->conn;
    if (c && c->s->shutting_down) {
        http_reply_error(r, 503, "shutting_down", "", "the server is shutting down");
        return -ESHUTDOWN;
    }
    r->done = true;
    if (!c || c->close_after || c->lingering) {
        req_finished(r);
        return -EPIPE;
    }
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\n"
                             "Connection: Upgrade\r\n",
                        protocol);
    for (size_t i = 0; i < r->out_hdrs.n; i++)
        evbuffer_add_printf(out, "%s: %s\r\n", r->out_hdrs.v[i].key, r->out_hdrs.v[i].val);
    evbuffer_add(out, "\r\n", 2);
    c->upgrade_fn = fn;
    c->upgrade_arg = arg;
    bufferevent_disable(c->bev, EV_READ); /* the rest of the input is the new protocol's */
    req_finished(r); /* in a handler: conn_dispatch hands over; else the resume event does */
    return 0;
}
