/*
 * http_rw.c - request rewriting for HTTP/1.1, and response framing (see http_rw.h).
 *
 * Three pieces run over a connection's bytes:
 *  - scan(): a strict scanner for the raw bytes of each request head, from the start
 *    of a message to its empty line. It accepts only what RFC 9112 allows and stops
 *    exactly at the end of the head, so http-parser (built lenient by Debian: it
 *    takes "Host : x" as a header named "Host ", honours "Content-Length : n", folds
 *    continuation lines) never sees head bytes that were not checked first;
 *  - http-parser's request callbacks: header pieces are collected in one capped
 *    arena (names and values as offsets into it); on_headers_complete checks the
 *    framing headers and Host, asks the proxy and writes the new head; on_body writes
 *    body bytes (re-chunked if the request was chunked); on_message_complete closes
 *    the chunked body and pauses the parser, so the next head goes through scan()
 *    first;
 *  - a second http-parser over the upstream's bytes, for framing only: it counts
 *    final responses against the requests forwarded (HEAD, 1xx, 204 and 304 have no
 *    body), so a 101 is taken as a protocol switch only when it answers the Upgrade
 *    request itself, never from inside a body or for an earlier pipelined request.
 * Nothing is held back, so memory per connection is the arena of the head being
 * parsed, at most PROXY_HTTP_MAX_HEAD bytes.
 */
#include "proxy/http_rw.h"

#include "base/buf.h"
#include "base/xalloc.h"

#include <http_parser.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct hdr {
    size_t name_off, name_len, val_off, val_len;
};

enum rw_state { RW_HEAD, RW_BODY };

/* Where scan() is in a request head. */
enum scan_state {
    SC_START,    /* before the request line (empty lines are skipped) */
    SC_START_CR, /* CR of an empty line before it */
    SC_RLINE,    /* in the request line */
    SC_RLINE_CR,
    SC_LINE, /* at the start of a field line, or of the final empty line */
    SC_NAME,
    SC_VALUE,
    SC_VALUE_CR,
    SC_END_CR, /* CR of the final empty line */
    SC_DONE,   /* the head ended; the parser must now say so too */
};

struct proxy_http {
    http_parser p;  /* requests */
    http_parser rp; /* responses (framing only) */
    proxy_http_decide_fn decide;
    void *arg;
    enum rw_state state;
    enum scan_state scan;
    size_t head_raw;  /* raw bytes of the current head seen by scan() */
    struct buf arena; /* url, header names and values of the current head */
    size_t url_off, url_len;
    struct hdr *h;
    size_t nh, caph;
    bool in_value; /* the last header callback was a value */
    bool chunked;
    struct evbuffer *out; /* valid during proxy_http_feed */
    int error;
    const char *reason;
    uint64_t requests, injected;
    /* response side */
    uint64_t answered;    /* requests whose final response head was seen */
    uint64_t head_bits;   /* bit (k - 1) % 64: request k is a HEAD (no response body) */
    uint64_t upgrade_req; /* the Upgrade request waiting for its answer (0: none) */
    bool waiting;         /* feed takes nothing until the response side says so */
    bool resp_lost;       /* responses could not be followed: no more Upgrade, no waits */
    bool raw;             /* 101 seen: nothing is parsed any more */
    enum proxy_http_resp event;
    /* per-request routing */
    struct proxy_req_header *rqh; /* the request's headers for the policy
                                     (PROXY_HTTP_MAX_HEADERS of them, made on first use) */
    bool tls;                     /* the client's side */
    uint16_t port;
    struct evbuffer *local;  /* local answers go here */
    struct evbuffer *answer; /* the answer to the request being read (made on first use) */
    bool answering;          /* the current request is answered here: its body is dropped */
    bool answer_close;       /* ... and asked to close the connection after the answer */
    bool closing;            /* such an answer was written: the proxy closes after it */
    bool serial;
    bool reinit;       /* an Upgrade request was answered here: parse afresh */
    uint64_t finished; /* forwarded requests whose response has ended */
    bool resp_interim; /* the response being parsed is a 1xx */
    uint64_t forwarded, responded;
};

static int fail(struct proxy_http *h, int status, const char *reason)
{
    h->error = status;
    h->reason = reason;
    return -1;
}

static int arena_add(struct proxy_http *h, const char *at, size_t n)
{
    if (buf_append(&h->arena, at, n) < 0) return fail(h, 431, "request head larger than 64 KiB");
    return 0;
}

static void reset_head(struct proxy_http *h)
{
    buf_reset(&h->arena);
    h->url_off = h->url_len = 0;
    h->nh = 0;
    h->in_value = false;
    h->chunked = false;
    h->state = RW_HEAD;
}

/* ------------------------------------------------------------------ the strict head scanner */

/* Byte classes of a request head (RFC 9110 5.6.2, 5.5; RFC 9112 3): */
#define C_TOKEN 1 /* tchar: ALPHA / DIGIT / "!#$%&'*+-.^_`|~" */
#define C_VALUE 2 /* field-value: HTAB / SP / VCHAR / obs-text */
#define C_RLINE 4 /* request-line: SP / VCHAR */
static const unsigned char cls[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, /* 0x00: HTAB only */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
    6, 7, 6, 7, 7, 7, 7, 7, 6, 6, 7, 7, 6, 7, 7, 6, /* 0x20: SP ! " # $ % & ' ( ) * + , - . / */
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, /* 0x30: 0-9 : ; < = > ? */
    6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, /* 0x40: @ A-O */
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 7, 7, /* 0x50: P-Z [ \ ] ^ _ */
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, /* 0x60: ` a-o */
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 7, 6, 7, 0, /* 0x70: p-z { | } ~ DEL */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0x80-0xff: obs-text */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
};

static long bad(struct proxy_http *h, const char *reason)
{
    fail(h, 400, reason);
    return -1;
}

/* The bytes from i on that are all of class k (the common bytes of a line, skipped in a
 * tight loop: the scanner costs a few instructions per byte of head). */
static size_t run_of(const unsigned char *d, size_t i, size_t len, unsigned char k)
{
    while (i < len && (cls[d[i]] & k))
        i++;
    return i;
}

/* Check data as the continuation of a request head. Returns how many bytes belong to
 * the head (all of data, or up to and including the LF that ends the head), or -1
 * with the error set. */
static long scan(struct proxy_http *h, const char *data, size_t len)
{
    const unsigned char *d = (const unsigned char *)data;
    enum scan_state s = h->scan;
    size_t i = 0;
    if (s == SC_DONE) return bad(h, "malformed request head"); /* the parser disagreed */
    while (i < len && s != SC_DONE) {
        if (s == SC_RLINE)
            i = run_of(d, i, len, C_RLINE);
        else if (s == SC_NAME)
            i = run_of(d, i, len, C_TOKEN);
        else if (s == SC_VALUE)
            i = run_of(d, i, len, C_VALUE);
        if (i == len) break;
        unsigned char c = d[i++];
        if (c == '\n' && s != SC_START_CR && s != SC_RLINE_CR && s != SC_VALUE_CR && s != SC_END_CR)
            return bad(h, "a line of the request head ends in LF without CR");
        switch (s) {
        case SC_START:
            if (c == '\r')
                s = SC_START_CR;
            else if (cls[c] & C_TOKEN)
                s = SC_RLINE;
            else
                return bad(h, "the request line does not start with a method");
            break;
        case SC_RLINE:
            if (c != '\r') return bad(h, "a control or non-ASCII byte in the request line");
            s = SC_RLINE_CR;
            break;
        case SC_LINE:
            if (c == '\r')
                s = SC_END_CR;
            else if (c == ' ' || c == '\t')
                return bad(h, "a header line starts with whitespace (obs-fold)");
            else if (cls[c] & C_TOKEN)
                s = SC_NAME;
            else
                return bad(h, "a header field name that is not a token");
            break;
        case SC_NAME:
            if (c == ':')
                s = SC_VALUE;
            else if (c == ' ' || c == '\t')
                return bad(h, "whitespace before the colon of a header field");
            else
                return bad(h, "a header field name that is not a token");
            break;
        case SC_VALUE:
            if (c != '\r') return bad(h, "a control character (NUL, ...) in a header field value");
            s = SC_VALUE_CR;
            break;
        case SC_START_CR:
        case SC_RLINE_CR:
        case SC_VALUE_CR:
        case SC_END_CR:
            if (c != '\n') return bad(h, "a CR not followed by LF in the request head");
            s = s == SC_START_CR ? SC_START : s == SC_END_CR ? SC_DONE : SC_LINE;
            break;
        case SC_DONE:
            break;
        }
    }
    h->scan = s;
    h->head_raw += i;
    if (h->head_raw > PROXY_HTTP_MAX_HEAD) {
        fail(h, 431, "request head larger than 64 KiB");
        return -1;
    }
    return (long)i;
}

/* ------------------------------------------------------------------ request callbacks */

static int on_message_begin(http_parser *p)
{
    struct proxy_http *h = p->data;
    reset_head(h);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct proxy_http *h = p->data;
    if (h->url_len == 0) h->url_off = h->arena.len;
    h->url_len += n;
    return arena_add(h, at, n);
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct proxy_http *h = p->data;
    if (h->state != RW_HEAD) return 0; /* trailers: dropped */
    if (h->nh == 0 || h->in_value) {
        if (h->nh >= PROXY_HTTP_MAX_HEADERS) return fail(h, 431, "more than 256 header lines");
        if (h->nh == h->caph) {
            h->caph = h->caph ? h->caph * 2 : 32;
            h->h = xrealloc(h->h, h->caph * sizeof *h->h);
        }
        struct hdr *x = &h->h[h->nh++];
        x->name_off = h->arena.len;
        x->name_len = x->val_len = 0;
        x->val_off = 0;
        h->in_value = false;
    }
    h->h[h->nh - 1].name_len += n;
    return arena_add(h, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct proxy_http *h = p->data;
    if (h->state != RW_HEAD) return 0;
    struct hdr *x = &h->h[h->nh - 1];
    if (!h->in_value) {
        x->val_off = h->arena.len;
        h->in_value = true;
    }
    x->val_len += n;
    return arena_add(h, at, n);
}

static bool name_is(const struct proxy_http *h, const struct hdr *x, const char *name, size_t nl)
{
    return x->name_len == nl && !strncasecmp(h->arena.data + x->name_off, name, nl);
}

/* The value without surrounding whitespace equals word (any case). */
static bool value_is(const struct proxy_http *h, const struct hdr *x, const char *word)
{
    const char *v = h->arena.data + x->val_off;
    size_t n = x->val_len, wl = strlen(word);
    while (n && (v[0] == ' ' || v[0] == '\t'))
        v++, n--;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    return n == wl && !strncasecmp(v, word, wl);
}

static bool value_is_number(const struct proxy_http *h, const struct hdr *x)
{
    const char *v = h->arena.data + x->val_off;
    size_t n = x->val_len, digits = 0;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++) {
        if (v[i] >= '0' && v[i] <= '9')
            digits++;
        else if (digits || (v[i] != ' ' && v[i] != '\t'))
            return false;
    }
    return digits > 0;
}

static bool is_set(const struct proxy_headers *set, const struct proxy_http *h, const struct hdr *x)
{
    for (size_t i = 0; set && i < set->n; i++)
        if (name_is(h, x, set->v[i].name, set->v[i].name_len)) return true;
    return false;
}

/* Host of an absolute-form request target, normalized; "" when origin-form. */
static int target_host(struct proxy_http *h, char *out)
{
    out[0] = '\0';
    const char *url = h->arena.data + h->url_off;
    if (h->url_len == 0 || url[0] == '/' || (h->url_len == 1 && url[0] == '*')) return 0;
    struct http_parser_url u;
    http_parser_url_init(&u);
    if (http_parser_parse_url(url, h->url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_HOST)))
        return -1;
    return proxy_host_normalize(url + u.field_data[UF_HOST].off, u.field_data[UF_HOST].len, false,
                                out);
}

static uint64_t req_bit(uint64_t k)
{
    return 1ull << ((k - 1) & 63);
}

/* The framing headers: one Content-Length of digits, or one Transfer-Encoding that
 * is exactly chunked, never both; an Upgrade only to WebSocket. */
static int check_framing(struct proxy_http *h, const http_parser *p)
{
    const struct hdr *cl = NULL, *te = NULL, *up = NULL;
    for (size_t i = 0; i < h->nh; i++) {
        const struct hdr *x = &h->h[i];
        if (name_is(h, x, "content-length", 14)) {
            if (cl) return fail(h, 400, "more than one Content-Length header");
            cl = x;
        } else if (name_is(h, x, "transfer-encoding", 17)) {
            if (te) return fail(h, 400, "more than one Transfer-Encoding header");
            te = x;
        } else if (name_is(h, x, "upgrade", 7)) {
            if (up) return fail(h, 400, "more than one Upgrade header");
            up = x;
        }
    }
    if (cl && te) return fail(h, 400, "both Content-Length and Transfer-Encoding");
    if (cl && !value_is_number(h, cl)) return fail(h, 400, "Content-Length is not a number");
    if (te && !value_is(h, te, "chunked"))
        return fail(h, 400, "Transfer-Encoding other than exactly chunked");
    if (p->upgrade) {
        if (!up || !value_is(h, up, "websocket"))
            return fail(h, 400, "only WebSocket upgrades are relayed");
        if (h->resp_lost) return fail(h, 400, "Upgrade after responses the proxy could not follow");
    }
    return 0;
}

/* The request as the policy sees it: method, path and query of the target (origin or
 * absolute form; "*" is the path "/"), and the headers. */
static int request_view(struct proxy_http *h, const http_parser *p, struct proxy_request *rq,
                        char *slash)
{
    const char *url = h->arena.data + h->url_off;
    size_t n = h->url_len;
    rq->method = http_method_str((enum http_method)p->method);
    rq->query = NULL;
    rq->query_len = 0;
    if (n && url[0] != '/' && !(n == 1 && url[0] == '*')) {
        struct http_parser_url u;
        http_parser_url_init(&u);
        if (http_parser_parse_url(url, n, 0, &u) != 0) return -1;
        if (u.field_set & (1 << UF_PATH)) {
            rq->path = url + u.field_data[UF_PATH].off;
            rq->path_len = u.field_data[UF_PATH].len;
        } else {
            slash[0] = '/';
            slash[1] = '\0';
            rq->path = slash;
            rq->path_len = 1;
        }
        if (u.field_set & (1 << UF_QUERY)) {
            rq->query = url + u.field_data[UF_QUERY].off;
            rq->query_len = u.field_data[UF_QUERY].len;
        }
    } else if (n == 1 && url[0] == '*') {
        slash[0] = '/';
        slash[1] = '\0';
        rq->path = slash;
        rq->path_len = 1;
    } else {
        const char *hash = memchr(url, '#', n);
        if (hash) n = (size_t)(hash - url);
        const char *q = memchr(url, '?', n);
        rq->path = url;
        rq->path_len = q ? (size_t)(q - url) : n;
        if (q) {
            rq->query = q + 1;
            rq->query_len = n - rq->path_len - 1;
        }
    }
    if (!h->rqh) h->rqh = xcalloc(PROXY_HTTP_MAX_HEADERS, sizeof *h->rqh);
    for (size_t i = 0; i < h->nh; i++) {
        h->rqh[i].name = h->arena.data + h->h[i].name_off;
        h->rqh[i].name_len = h->h[i].name_len;
        h->rqh[i].value = h->arena.data + h->h[i].val_off;
        h->rqh[i].value_len = h->h[i].val_len;
    }
    rq->h = h->rqh;
    rq->nh = h->nh;
    return 0;
}

/* Headers a forwarded request must not carry from the sandbox: the forwarding server
 * trusts them to describe the original request. */
static bool forwarded_header(const struct proxy_http *h, const struct hdr *x)
{
    static const char pfx[] = "vercel-forwarded-";
    return (x->name_len >= sizeof pfx - 1 &&
            !strncasecmp(h->arena.data + x->name_off, pfx, sizeof pfx - 1)) ||
           name_is(h, x, "vercel-sandbox-oidc-token", 25);
}

static const char *status_reason(int status)
{
    static const struct {
        int code;
        const char *reason;
    } t[] = {{200, "OK"},
             {201, "Created"},
             {202, "Accepted"},
             {204, "No Content"},
             {301, "Moved Permanently"},
             {302, "Found"},
             {304, "Not Modified"},
             {307, "Temporary Redirect"},
             {308, "Permanent Redirect"},
             {400, "Bad Request"},
             {401, "Unauthorized"},
             {403, "Forbidden"},
             {404, "Not Found"},
             {405, "Method Not Allowed"},
             {409, "Conflict"},
             {418, "I'm a teapot"},
             {421, "Misdirected Request"},
             {429, "Too Many Requests"},
             {431, "Request Header Fields Too Large"},
             {451, "Unavailable For Legal Reasons"},
             {500, "Internal Server Error"},
             {502, "Bad Gateway"},
             {503, "Service Unavailable"},
             {504, "Gateway Timeout"}};
    for (size_t i = 0; i < ARRAY_LEN(t); i++)
        if (t[i].code == status) return t[i].reason;
    return "";
}

/* A response rule's answer: status line, its headers, Content-Type, Content-Length
 * (none for 204 and 304, which have no body), and the body unless head. */
static void write_answer(struct evbuffer *o, const struct proxy_response *r, bool head)
{
    bool bodyless = r->status == 204 || r->status == 304;
    evbuffer_add_printf(o, "HTTP/1.1 %d %s\r\n", r->status, status_reason(r->status));
    for (size_t i = 0; i < r->headers.n; i++) {
        evbuffer_add(o, r->headers.v[i].name, r->headers.v[i].name_len);
        evbuffer_add(o, ": ", 2);
        evbuffer_add(o, r->headers.v[i].value, r->headers.v[i].value_len);
        evbuffer_add(o, "\r\n", 2);
    }
    if (r->content_type)
        evbuffer_add_printf(o, "Content-Type: %s\r\n", r->content_type);
    else if (r->body_len && !bodyless)
        evbuffer_add_printf(o, "Content-Type: text/plain; charset=utf-8\r\n");
    if (!bodyless) evbuffer_add_printf(o, "Content-Length: %zu\r\n", r->body_len);
    evbuffer_add(o, "\r\n", 2);
    if (!bodyless && !head && r->body_len) evbuffer_add(o, r->body, r->body_len);
}

static int on_headers_complete(http_parser *p)
{
    struct proxy_http *h = p->data;
    if (p->method == HTTP_CONNECT) return fail(h, 405, "CONNECT is not allowed here");
    if (p->http_major != 1) return fail(h, 400, "only HTTP/1.x requests are relayed");
    if (check_framing(h, p) < 0) return -1;
    const struct hdr *host = NULL;
    for (size_t i = 0; i < h->nh; i++) {
        if (!name_is(h, &h->h[i], "host", 4)) continue;
        if (host) return fail(h, 400, "more than one Host header");
        host = &h->h[i];
    }
    if (!host) return fail(h, 400, "no Host header");
    char hn[PROXY_HOST_MAX + 1], th[PROXY_HOST_MAX + 1];
    if (proxy_host_normalize(h->arena.data + host->val_off, host->val_len, true, hn) < 0)
        return fail(h, 400, "Host is not a host name");
    if (target_host(h, th) < 0) return fail(h, 400, "bad request target");
    if (th[0] && strcmp(th, hn) != 0)
        return fail(h, 400, "request target names another host than Host");

    if (h->serial && h->resp_lost)
        return fail(h, 502, "the upstream's responses could not be followed");

    char path_buf[2];
    struct proxy_request rq;
    if (request_view(h, p, &rq, path_buf) < 0) return fail(h, 400, "bad request target");
    struct proxy_action act;
    memset(&act, 0, sizeof act);
    act.kind = PROXY_ACT_UPSTREAM;
    act.rule = -1;
    const char *why = NULL;
    int d = h->decide(h->arg, hn, &rq, &act, &why);
    if (d == PROXY_HTTP_DENIED) return fail(h, PROXY_HTTP_DENIED, "host denied");
    if (d != 0)
        return fail(h, d,
                    why        ? why
                    : d == 421 ? "Host differs from the TLS server name"
                               : "refused");
    const struct proxy_headers *set = act.headers.n ? &act.headers : NULL;
    if (p->method == HTTP_TRACE && set)
        return fail(h, 405, "TRACE is refused to a host that gets headers set: it echoes them");
    if (act.kind == PROXY_ACT_RESPOND) {
        if (!h->local || !act.response) return fail(h, 503, "cannot answer here");
        if (!h->answer) h->answer = evbuffer_new();
        write_answer(h->answer, act.response, p->method == HTTP_HEAD);
        /* a client waiting for "100 Continue" before its body gets it from us (every
         * earlier answer has ended: serial), or it would stall until its own timeout */
        bool body =
            (p->flags & F_CHUNKED) || (p->content_length > 0 && p->content_length != ULLONG_MAX);
        for (size_t i = 0; body && i < h->nh; i++)
            if (name_is(h, &h->h[i], "expect", 6) && value_is(h, &h->h[i], "100-continue"))
                evbuffer_add(h->local, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        h->answer_close = !http_should_keep_alive(p);
        h->answering = true;
        h->responded++;
        h->chunked = false;
        h->state = RW_BODY;
        return 0;
    }
    const struct proxy_forward *fw = act.kind == PROXY_ACT_FORWARD ? act.forward : NULL;

    struct evbuffer *o = h->out;
    const char *a = h->arena.data;
    evbuffer_add_printf(o, "%s ", http_method_str((enum http_method)p->method));
    if (fw) {
        evbuffer_add(o, fw->path, fw->path_len);
        evbuffer_add(o, rq.path, rq.path_len);
        if (rq.query) {
            evbuffer_add(o, "?", 1);
            evbuffer_add(o, rq.query, rq.query_len);
        }
    } else {
        evbuffer_add(o, a + h->url_off, h->url_len);
    }
    evbuffer_add_printf(o, " HTTP/%d.%d\r\n", p->http_major, p->http_minor);
    for (size_t i = 0; i < h->nh; i++) {
        const struct hdr *x = &h->h[i];
        if (is_set(set, h, x)) continue;
        if (fw && (name_is(h, x, "host", 4) || forwarded_header(h, x))) continue;
        evbuffer_add(o, a + x->name_off, x->name_len);
        evbuffer_add(o, ": ", 2);
        evbuffer_add(o, a + x->val_off, x->val_len);
        evbuffer_add(o, "\r\n", 2);
    }
    for (size_t i = 0; set && i < set->n; i++) {
        evbuffer_add(o, set->v[i].name, set->v[i].name_len);
        evbuffer_add(o, ": ", 2);
        evbuffer_add(o, set->v[i].value, set->v[i].value_len);
        evbuffer_add(o, "\r\n", 2);
    }
    if (fw) {
        if (fw->port == (fw->tls ? 443 : 80))
            evbuffer_add_printf(o, "Host: %s\r\n", fw->host);
        else
            evbuffer_add_printf(o, "Host: %s:%u\r\n", fw->host, fw->port);
        evbuffer_add_printf(o,
                            "vercel-forwarded-host: %s\r\nvercel-forwarded-scheme: %s\r\n"
                            "vercel-forwarded-port: %u\r\nvercel-forwarded-path: ",
                            hn, h->tls ? "https" : "http", h->port);
        evbuffer_add(o, rq.path, rq.path_len);
        if (rq.query) {
            evbuffer_add(o, "?", 1);
            evbuffer_add(o, rq.query, rq.query_len);
        }
        evbuffer_add(o, "\r\n", 2);
        h->forwarded++;
    }
    evbuffer_add(o, "\r\n", 2);
    h->requests++;
    if (set) h->injected++;
    if (p->method == HTTP_HEAD)
        h->head_bits |= req_bit(h->requests);
    else
        h->head_bits &= ~req_bit(h->requests);
    h->chunked = (p->flags & F_CHUNKED) != 0;
    h->state = RW_BODY;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct proxy_http *h = p->data;
    if (h->answering) return 0; /* read and dropped: nobody upstream gets it */
    if (h->chunked) evbuffer_add_printf(h->out, "%zx\r\n", n);
    evbuffer_add(h->out, at, n);
    if (h->chunked) evbuffer_add(h->out, "\r\n", 2);
    return 0;
}

/* A request ended: the next bytes are a head again (scan() first, so pause here).
 * After an Upgrade request, or with PROXY_HTTP_MAX_PIPELINE requests unanswered,
 * take nothing more until the response side says so. */
static int on_message_complete(http_parser *p)
{
    struct proxy_http *h = p->data;
    if (h->answering) {
        /* answered here, in order: in serial mode every earlier response has ended */
        evbuffer_add_buffer(h->local, h->answer);
        h->answering = false;
        if (h->answer_close) { /* Connection: close (or HTTP/1.0): nothing more is read */
            h->closing = true;
            h->waiting = true;
        }
        reset_head(h);
        h->scan = SC_START;
        h->head_raw = 0;
        if (p->upgrade) h->reinit = true; /* no switch happened: parse HTTP again */
        http_parser_pause(p, 1);
        return 0;
    }
    if (h->chunked) evbuffer_add(h->out, "0\r\n\r\n", 5);
    reset_head(h);
    h->scan = SC_START;
    h->head_raw = 0;
    if (h->serial) {
        if (p->upgrade) h->upgrade_req = h->requests;
        if (!h->resp_lost && h->finished < h->requests) h->waiting = true;
    } else if (p->upgrade) {
        h->upgrade_req = h->requests;
        h->waiting = true;
    } else if (!h->resp_lost && h->requests - h->answered >= PROXY_HTTP_MAX_PIPELINE) {
        h->waiting = true;
    }
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings rw_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ------------------------------------------------------------------ response framing */

/* The wait ends; after an Upgrade that did not happen, requests start afresh. */
static void resume(struct proxy_http *h)
{
    if (!h->waiting) return;
    h->waiting = false;
    if (h->upgrade_req) {
        h->upgrade_req = 0;
        http_parser_init(&h->p, HTTP_REQUEST); /* it stopped at the Upgrade */
        h->p.data = h;
    }
    if (h->event == PROXY_HTTP_RESP_NONE) h->event = PROXY_HTTP_RESP_RESUME;
}

static void lose(struct proxy_http *h)
{
    h->resp_lost = true;
    resume(h);
}

static int on_response_head(http_parser *p)
{
    struct proxy_http *h = p->data;
    unsigned st = p->status_code;
    h->resp_interim = st >= 100 && st < 200 && st != 101;
    if (h->resp_interim) return 1; /* interim, no body */
    uint64_t k = h->answered + 1;
    if (k > h->requests || (st == 101 && k != h->upgrade_req)) {
        lose(h); /* a response nobody asked for, or a switch nobody asked for */
        return -1;
    }
    if (st == 101) {
        h->raw = true;
        h->waiting = false;
        h->event = PROXY_HTTP_RESP_RAW;
        return -1; /* the rest is the other protocol: stop parsing */
    }
    h->answered = k;
    if (h->waiting && !h->serial &&
        (k == h->upgrade_req || (!h->upgrade_req && h->requests - k < PROXY_HTTP_MAX_PIPELINE)))
        resume(h);
    bool head = (h->head_bits & req_bit(k)) != 0;
    return head || st == 204 || st == 304 ? 1 : 0;
}

/* A final response ended (serial mode waits for this, not for the head). */
static int on_response_complete(http_parser *p)
{
    struct proxy_http *h = p->data;
    if (h->resp_interim) {
        h->resp_interim = false;
        return 0;
    }
    h->finished = h->answered;
    if (h->serial && h->waiting && h->finished == h->requests) resume(h);
    return 0;
}

static const http_parser_settings resp_settings = {
    .on_headers_complete = on_response_head,
    .on_message_complete = on_response_complete,
};

enum proxy_http_resp proxy_http_response(struct proxy_http *h, const char *data, size_t len)
{
    if (h->raw || h->resp_lost) return PROXY_HTTP_RESP_NONE;
    h->event = PROXY_HTTP_RESP_NONE;
    if (len == 0) {
        if (h->serial) {
            /* an answer delimited by the end of the connection ends here */
            http_parser_execute(&h->rp, &resp_settings, NULL, 0);
            if (h->finished == h->requests) return h->event;
        }
        lose(h); /* the upstream finished: no answer will come */
        return h->event;
    }
    http_parser_execute(&h->rp, &resp_settings, data, len);
    if (!h->raw && HTTP_PARSER_ERRNO(&h->rp) != HPE_OK) lose(h);
    return h->event;
}

/* ------------------------------------------------------------------ feeding */

struct proxy_http *proxy_http_new(proxy_http_decide_fn decide, void *arg)
{
    struct proxy_http *h = xcalloc(1, sizeof *h);
    http_parser_init(&h->p, HTTP_REQUEST);
    h->p.data = h;
    http_parser_init(&h->rp, HTTP_RESPONSE);
    h->rp.data = h;
    h->decide = decide;
    h->arg = arg;
    h->port = 80;
    buf_init(&h->arena, PROXY_HTTP_MAX_HEAD);
    return h;
}

void proxy_http_free(struct proxy_http *h)
{
    if (!h) return;
    buf_fini(&h->arena);
    free(h->h);
    free(h->rqh);
    if (h->answer) evbuffer_free(h->answer);
    free(h);
}

void proxy_http_set_origin(struct proxy_http *h, bool tls, uint16_t port)
{
    h->tls = tls;
    h->port = port;
}

void proxy_http_set_local(struct proxy_http *h, struct evbuffer *local)
{
    h->local = local;
}

void proxy_http_set_serial(struct proxy_http *h, bool on)
{
    h->serial = on;
}

bool proxy_http_closing(const struct proxy_http *h)
{
    return h->closing;
}

bool proxy_http_idle(const struct proxy_http *h)
{
    return h->finished == h->requests && !h->resp_lost;
}

void proxy_http_upstream_reset(struct proxy_http *h)
{
    ASSERT(h->requests - h->finished <= 1); /* at most the request just read */
    http_parser_init(&h->rp, HTTP_RESPONSE);
    h->rp.data = h;
    h->resp_interim = false;
}

uint64_t proxy_http_forwarded(const struct proxy_http *h)
{
    return h->forwarded;
}

uint64_t proxy_http_responded(const struct proxy_http *h)
{
    return h->responded;
}

enum proxy_http_status proxy_http_feed(struct proxy_http *h, const char *data, size_t len,
                                       struct evbuffer *out, size_t *consumed)
{
    *consumed = 0;
    if (h->error) return PROXY_HTTP_ERROR;
    if (h->waiting) return PROXY_HTTP_WAIT;
    h->out = out;
    size_t off = 0;
    while (off < len && !h->waiting) {
        size_t n = len - off;
        if (h->state == RW_HEAD) {
            long k = scan(h, data + off, n);
            if (k < 0) break;
            n = (size_t)k;
        }
        size_t got = http_parser_execute(&h->p, &rw_settings, data + off, n);
        off += got;
        if (h->error) break;
        enum http_errno e = HTTP_PARSER_ERRNO(&h->p);
        if (e == HPE_PAUSED) { /* at the end of a message */
            http_parser_pause(&h->p, 0);
            if (h->reinit) { /* an Upgrade request answered here: HTTP goes on */
                h->reinit = false;
                http_parser_init(&h->p, HTTP_REQUEST);
                h->p.data = h;
            }
            continue;
        }
        if (e != HPE_OK) {
            fail(h, 400, http_errno_description(e));
            break;
        }
        if (got != n) {
            fail(h, 400, "unparsed bytes");
            break;
        }
    }
    h->out = NULL;
    *consumed = off;
    if (h->error) return PROXY_HTTP_ERROR;
    return h->waiting ? PROXY_HTTP_WAIT : PROXY_HTTP_OK;
}

bool proxy_http_waiting(const struct proxy_http *h)
{
    return h->waiting;
}

int proxy_http_error(const struct proxy_http *h)
{
    return h->error;
}

const char *proxy_http_error_reason(const struct proxy_http *h)
{
    return h->reason ? h->reason : "";
}

uint64_t proxy_http_requests(const struct proxy_http *h)
{
    return h->requests;
}

uint64_t proxy_http_injected(const struct proxy_http *h)
{
    return h->injected;
}

size_t proxy_http_status_response(int status, const char *reason, char *out, size_t outsz)
{
    static const struct {
        int code;
        const char *reason, *body;
    } table[] = {
        {400, "Bad Request", "bad HTTP request"},
        {403, "Forbidden", "refused"},
        {405, "Method Not Allowed", "method not allowed"},
        {421, "Misdirected Request", "Host does not match the TLS server name"},
        {431, "Request Header Fields Too Large", "request head too large"},
        {502, "Bad Gateway", "upstream failed"},
        {503, "Service Unavailable", "unavailable"},
        {504, "Gateway Timeout", "upstream timed out"},
    };
    size_t i = 0;
    while (i < ARRAY_LEN(table) && table[i].code != status)
        i++;
    if (i == ARRAY_LEN(table)) i = 0;
    char body[300];
    int bl = snprintf(body, sizeof body, "egress proxy: %.250s\n",
                      reason && *reason ? reason : table[i].body);
    if (bl < 0) bl = 0;
    int n = snprintf(out, outsz,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n\r\n%s",
                     table[i].code, table[i].reason, bl, body);
    return n < 0 ? 0 : (size_t)n < outsz ? (size_t)n : outsz - 1;
}
