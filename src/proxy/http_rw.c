/*
 * http_rw.c - request rewriting for intercepted HTTP/1.1 (see http_rw.h).
 *
 * The parser's callbacks do all the work inside http_parser_execute(): header
 * pieces are collected in one capped arena (names and values as offsets into it),
 * on_headers_complete checks Host, asks the proxy and writes the new head,
 * on_body writes body bytes (re-chunked if the request was chunked) and
 * on_message_complete closes the chunked body and resets for the next request on
 * the keep-alive connection. Nothing is held back, so memory per connection is the
 * arena of the head being parsed, at most PROXY_HTTP_MAX_HEAD bytes.
 */
#include "proxy/http_rw.h"

#include "base/buf.h"
#include "base/xalloc.h"

#include <http_parser.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct hdr {
    size_t name_off, name_len, val_off, val_len;
};

enum rw_state { RW_HEAD, RW_BODY };

struct proxy_http {
    http_parser p;
    proxy_http_decide_fn decide;
    void *arg;
    enum rw_state state;
    struct buf arena; /* url, header names and values of the current head */
    size_t url_off, url_len;
    struct hdr *h;
    size_t nh, caph;
    bool in_value; /* the last header callback was a value */
    bool chunked;
    bool upgrade_ok;      /* the head was forwarded and asked for Upgrade */
    struct evbuffer *out; /* valid during proxy_http_feed */
    int error;
    const char *reason;
    uint64_t requests, injected;
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

static int on_headers_complete(http_parser *p)
{
    struct proxy_http *h = p->data;
    if (p->method == HTTP_CONNECT) return fail(h, 405, "CONNECT is not allowed here");
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

    const struct proxy_headers *set = NULL;
    int d = h->decide(h->arg, hn, &set);
    if (d == PROXY_HTTP_DENIED) return fail(h, PROXY_HTTP_DENIED, "host denied");
    if (d != 0) return fail(h, d, d == 421 ? "Host differs from the TLS server name" : "refused");

    struct evbuffer *o = h->out;
    const char *a = h->arena.data;
    evbuffer_add_printf(o, "%s ", http_method_str((enum http_method)p->method));
    evbuffer_add(o, a + h->url_off, h->url_len);
    evbuffer_add_printf(o, " HTTP/%d.%d\r\n", p->http_major, p->http_minor);
    for (size_t i = 0; i < h->nh; i++) {
        const struct hdr *x = &h->h[i];
        if (is_set(set, h, x)) continue;
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
    evbuffer_add(o, "\r\n", 2);
    h->requests++;
    if (set && set->n) h->injected++;
    h->chunked = (p->flags & F_CHUNKED) != 0;
    h->upgrade_ok = p->upgrade;
    h->state = RW_BODY;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct proxy_http *h = p->data;
    if (h->chunked) evbuffer_add_printf(h->out, "%zx\r\n", n);
    evbuffer_add(h->out, at, n);
    if (h->chunked) evbuffer_add(h->out, "\r\n", 2);
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct proxy_http *h = p->data;
    if (h->chunked) evbuffer_add(h->out, "0\r\n\r\n", 5);
    reset_head(h);
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

struct proxy_http *proxy_http_new(proxy_http_decide_fn decide, void *arg)
{
    struct proxy_http *h = xcalloc(1, sizeof *h);
    http_parser_init(&h->p, HTTP_REQUEST);
    h->p.data = h;
    h->decide = decide;
    h->arg = arg;
    buf_init(&h->arena, PROXY_HTTP_MAX_HEAD);
    return h;
}

void proxy_http_free(struct proxy_http *h)
{
    if (!h) return;
    buf_fini(&h->arena);
    free(h->h);
    free(h);
}

enum proxy_http_status proxy_http_feed(struct proxy_http *h, const char *data, size_t len,
                                       struct evbuffer *out, size_t *consumed)
{
    *consumed = 0;
    if (h->error) return PROXY_HTTP_ERROR;
    h->out = out;
    size_t n = http_parser_execute(&h->p, &rw_settings, data, len);
    h->out = NULL;
    *consumed = n;
    if (h->error) return PROXY_HTTP_ERROR;
    enum http_errno e = HTTP_PARSER_ERRNO(&h->p);
    if (e != HPE_OK) {
        h->error = 400;
        h->reason = http_errno_description(e);
        return PROXY_HTTP_ERROR;
    }
    if (h->p.upgrade) {
        if (!h->upgrade_ok) { /* cannot happen: upgrade is set with the head */
            h->error = 400;
            h->reason = "unexpected upgrade";
            return PROXY_HTTP_ERROR;
        }
        return PROXY_HTTP_UPGRADE;
    }
    if (n != len) {
        h->error = 400;
        h->reason = "unparsed bytes";
        return PROXY_HTTP_ERROR;
    }
    return PROXY_HTTP_OK;
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

int proxy_http_mid_request(const struct proxy_http *h)
{
    return h->state == RW_BODY;
}

size_t proxy_http_status_response(int status, char *out, size_t outsz)
{
    static const struct {
        int code;
        const char *reason, *body;
    } table[] = {
        {400, "Bad Request", "egress proxy: bad HTTP request\n"},
        {405, "Method Not Allowed", "egress proxy: method not allowed\n"},
        {421, "Misdirected Request", "egress proxy: Host does not match the TLS server name\n"},
        {431, "Request Header Fields Too Large", "egress proxy: request head too large\n"},
    };
    size_t i = 0;
    while (i < ARRAY_LEN(table) && table[i].code != status)
        i++;
    if (i == ARRAY_LEN(table)) i = 0;
    int n = snprintf(out, outsz,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     table[i].code, table[i].reason, strlen(table[i].body), table[i].body);
    return n < 0 ? 0 : (size_t)n < outsz ? (size_t)n : outsz - 1;
}
