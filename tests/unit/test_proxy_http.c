/*
 * test_proxy_http.c - unit tests for request rewriting (src/proxy/http_rw.c),
 * data-driven: request bytes in, the exact bytes the upstream would get out (or the
 * refusal's status, with nothing of the refused request out).
 *
 * Every case is also fed one byte at a time and in pieces of 2, 3, 7 and 64 bytes;
 * the outcome must be the same whatever the split (the proxy sees arbitrary reads).
 * The response side (proxy_http_response) is fed the upstream's bytes the same way.
 */
#include <criterion/criterion.h>

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "proxy/http_rw.h"
#include "proxy/policy.h"

struct ctx {
    const char *expect_host;  /* NULL: any */
    struct proxy_headers set; /* headers to set */
    int decisions;
    char last_host[PROXY_HOST_MAX + 1];
    int refuse_with; /* 0: allow */
};

static int decide(void *arg, const char *host, const struct proxy_request *rq,
                  struct proxy_action *act, const char **why)
{
    struct ctx *c = arg;
    c->decisions++;
    snprintf(c->last_host, sizeof c->last_host, "%s", host);
    if (c->refuse_with) return c->refuse_with;
    if (c->expect_host && strcmp(host, c->expect_host) != 0) return 421;
    if (c->set.n) act->headers = c->set;
    return 0;
}

static struct proxy_header auth = {(char *)"Authorization", (char *)"Basic SECRET", 13, 12};

struct result {
    enum proxy_http_status st;
    int error;
    char *out;
    size_t consumed_total;
    uint64_t requests, injected;
};

static char *take(struct evbuffer *out)
{
    size_t ol = evbuffer_get_length(out);
    char *o = malloc(ol + 1);
    evbuffer_remove(out, o, ol);
    o[ol] = '\0';
    return o;
}

/* Feed in[0..len) in pieces of `step` bytes (0 = all at once) until it is all
 * taken, or the rewriter waits or refuses. */
static enum proxy_http_status feed_steps(struct proxy_http *h, const char *in, size_t len,
                                         size_t step, struct evbuffer *out, size_t *taken)
{
    enum proxy_http_status st = PROXY_HTTP_OK;
    size_t off = 0;
    while (off < len) {
        size_t n = step ? (len - off < step ? len - off : step) : len - off;
        size_t used = 0;
        st = proxy_http_feed(h, in + off, n, out, &used);
        off += used;
        if (st != PROXY_HTTP_OK) break;
    }
    *taken = off;
    return st;
}

static struct result run_n(struct ctx *c, const char *in, size_t len, size_t step)
{
    struct proxy_http *h = proxy_http_new(decide, c);
    struct evbuffer *out = evbuffer_new();
    struct result r = {PROXY_HTTP_OK, 0, NULL, 0, 0, 0};
    r.st = feed_steps(h, in, len, step, out, &r.consumed_total);
    r.error = proxy_http_error(h);
    r.requests = proxy_http_requests(h);
    r.injected = proxy_http_injected(h);
    r.out = take(out);
    evbuffer_free(out);
    proxy_http_free(h);
    return r;
}

static struct result run(struct ctx *c, const char *in, size_t step)
{
    return run_n(c, in, strlen(in), step);
}

static const size_t steps[] = {0, 1, 2, 3, 7, 64};

/* Same result at every split size. */
static void check(struct ctx *c, const char *in, const char *want)
{
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        struct ctx copy = *c;
        struct result r = run(&copy, in, steps[i]);
        cr_assert_eq(r.st, PROXY_HTTP_OK, "step %zu: status %d error %d", steps[i], r.st, r.error);
        cr_assert_str_eq(r.out, want, "step %zu", steps[i]);
        free(r.out);
    }
}

Test(proxy_http, sets_header)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    check(&c,
          "GET /repo.git/info/refs?service=git-receive-pack HTTP/1.1\r\n"
          "Host: github.example\r\nUser-Agent: git/2.39\r\n\r\n",
          "GET /repo.git/info/refs?service=git-receive-pack HTTP/1.1\r\n"
          "Host: github.example\r\nUser-Agent: git/2.39\r\nAuthorization: Basic SECRET\r\n\r\n");
}

Test(proxy_http, overwrites_not_duplicates_any_case)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    check(&c,
          "GET / HTTP/1.1\r\nHost: github.example\r\nauthorization: Bearer mine\r\n"
          "X-Other: 1\r\nAUTHORIZATION: Basic also-mine\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: github.example\r\nX-Other: 1\r\n"
          "Authorization: Basic SECRET\r\n\r\n");
    struct result r =
        run(&c, "GET / HTTP/1.1\r\nHost: github.example\r\nAuthorization: x\r\n\r\n", 0);
    cr_assert_eq(r.injected, 1);
    free(r.out);
}

Test(proxy_http, similar_names_kept)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    check(&c,
          "GET / HTTP/1.1\r\nHost: github.example\r\nAuthorization-Extra: 1\r\n"
          "X-Authorization: 2\r\n\r\n",
          "GET / HTTP/1.1\r\nHost: github.example\r\nAuthorization-Extra: 1\r\n"
          "X-Authorization: 2\r\nAuthorization: Basic SECRET\r\n\r\n");
}

Test(proxy_http, no_rules_passes_head_unchanged)
{
    struct ctx c = {NULL, {NULL, 0}, 0, "", 0};
    check(&c, "GET /x HTTP/1.1\r\nHost: a.example:8080\r\nAuthorization: mine\r\n\r\n",
          "GET /x HTTP/1.1\r\nHost: a.example:8080\r\nAuthorization: mine\r\n\r\n");
    struct ctx c2 = {NULL, {NULL, 0}, 0, "", 0};
    struct result r = run(&c2, "GET /x HTTP/1.1\r\nHost: A.Example.:8080\r\n\r\n", 0);
    cr_assert_str_eq(c2.last_host, "a.example", "Host normalized for the decision");
    cr_assert_eq(r.injected, 0);
    cr_assert_eq(r.requests, 1);
    free(r.out);
}

Test(proxy_http, keep_alive_each_request_rewritten)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    check(&c,
          "GET /a HTTP/1.1\r\nHost: github.example\r\n\r\n"
          "POST /b HTTP/1.1\r\nHost: github.example\r\nContent-Length: 5\r\n"
          "Authorization: no\r\n\r\nhello"
          "GET /c HTTP/1.1\r\nHost: github.example\r\n\r\n",
          "GET /a HTTP/1.1\r\nHost: github.example\r\nAuthorization: Basic SECRET\r\n\r\n"
          "POST /b HTTP/1.1\r\nHost: github.example\r\nContent-Length: 5\r\n"
          "Authorization: Basic SECRET\r\n\r\nhello"
          "GET /c HTTP/1.1\r\nHost: github.example\r\nAuthorization: Basic SECRET\r\n\r\n");
    struct result r = run(&c,
                          "GET /a HTTP/1.1\r\nHost: github.example\r\n\r\n"
                          "GET /b HTTP/1.1\r\nHost: github.example\r\n\r\n",
                          5);
    cr_assert_eq(r.requests, 2);
    cr_assert_eq(r.injected, 2);
    free(r.out);
}

Test(proxy_http, chunked_body_reframed)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    /* chunk extensions and trailers are dropped; sizes follow what was parsed */
    const char *in = "POST /git-receive-pack HTTP/1.1\r\nHost: github.example\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"
                     "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
                     "GET /next HTTP/1.1\r\nHost: github.example\r\n\r\n";
    struct result r = run(&c, in, 0);
    cr_assert_eq(r.st, PROXY_HTTP_OK);
    cr_assert_str_eq(r.out, "POST /git-receive-pack HTTP/1.1\r\nHost: github.example\r\n"
                            "Transfer-Encoding: chunked\r\nAuthorization: Basic SECRET\r\n\r\n"
                            "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                            "GET /next HTTP/1.1\r\nHost: github.example\r\n"
                            "Authorization: Basic SECRET\r\n\r\n");
    free(r.out);
    /* byte by byte the chunks come out smaller, but they decode to the same body */
    r = run(&c, in, 1);
    cr_assert_eq(r.st, PROXY_HTTP_OK);
    cr_assert_eq(r.requests, 2);
    const char *body = strstr(r.out, "\r\n\r\n") + 4;
    char decoded[64] = "";
    size_t dl = 0;
    const char *p = body;
    for (;;) {
        unsigned long n = strtoul(p, NULL, 16);
        p = strstr(p, "\r\n") + 2;
        if (n == 0) break;
        memcpy(decoded + dl, p, n);
        dl += n;
        p += n + 2;
    }
    decoded[dl] = '\0';
    cr_assert_str_eq(decoded, "hello world");
    free(r.out);
}

Test(proxy_http, host_mismatch_refused)
{
    struct ctx c = {"github.example", {&auth, 1}, 0, "", 0};
    struct result r = run(&c, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", 0);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, 421);
    cr_assert_str_eq(r.out, "", "nothing forwarded, no credential");
    free(r.out);
    /* a second request on the same connection switching host */
    r = run(&c,
            "GET / HTTP/1.1\r\nHost: github.example\r\n\r\n"
            "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
            0);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, 421);
    cr_assert_eq(r.requests, 1);
    cr_assert_null(strstr(r.out, "evil"));
    free(r.out);
}

Test(proxy_http, bad_requests)
{
    struct ctx c = {NULL, {&auth, 1}, 0, "", 0};
    struct {
        const char *in;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\r\n\r\n", 400},                                       /* no Host */
        {"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", 400}, /* two */
        {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        {"GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", 400}, /* target */
        {"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", 405},
        {"GET / HTTP/1.1\r\nHost: a.example\r\nX: a\rb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\n"
         "Transfer-Encoding: chunked\r\n\r\n",
         400}, /* smuggling shape */
        {"GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
         400},
        {"\x16\x03\x01\x00\x05hello", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ctx copy = c;
        struct result r = run(&copy, cases[i].in, 0);
        cr_assert_eq(r.st, PROXY_HTTP_ERROR, "case %zu", i);
        cr_assert_eq(r.error, cases[i].status, "case %zu: got %d", i, r.error);
        cr_assert_str_eq(r.out, "", "case %zu forwarded bytes", i);
        free(r.out);
    }
    /* absolute-form with the same host is fine */
    check(&c, "GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n",
          "GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n"
          "Authorization: Basic SECRET\r\n\r\n");
}

Test(proxy_http, denied_and_refused_by_callback)
{
    struct ctx c = {NULL, {NULL, 0}, 0, "", PROXY_HTTP_DENIED};
    struct result r = run(&c, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", 0);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, PROXY_HTTP_DENIED);
    cr_assert_str_eq(r.out, "");
    free(r.out);
}

Test(proxy_http, head_too_large)
{
    struct ctx c = {NULL, {NULL, 0}, 0, "", 0};
    size_t n = PROXY_HTTP_MAX_HEAD + 100;
    char *in = malloc(n + 64);
    strcpy(in, "GET / HTTP/1.1\r\nHost: a.example\r\nX-Big: ");
    size_t l = strlen(in);
    memset(in + l, 'a', n);
    strcpy(in + l + n, "\r\n\r\n");
    struct result r = run(&c, in, 4096);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, 431);
    free(r.out);
    free(in);
    /* too many header lines */
    char *many = malloc(20000);
    strcpy(many, "GET / HTTP/1.1\r\nHost: a.example\r\n");
    for (int i = 0; i < PROXY_HTTP_MAX_HEADERS + 1; i++)
        strcat(many, "X: 1\r\n");
    strcat(many, "\r\n");
    r = run(&c, many, 0);
    cr_assert_eq(r.error, 431);
    free(r.out);
    free(many);
}

/* ------------------------------------------------------------------ strict heads (issue 13 #7) */

struct verdict_case {
    const char *in;
    size_t len;
    int status; /* 0: accepted whole */
};
#define V(s, st)                                                                                   \
    {                                                                                              \
        s, sizeof(s) - 1, st                                                                       \
    }
#define GET "GET / HTTP/1.1\r\nHost: a.example\r\n"

/* Request bytes in, verdict out: each refused head is refused whatever the split, and
 * nothing of it reaches the output. */
Test(proxy_http, strict_heads)
{
    static const struct verdict_case cases[] = {
        /* whitespace before the colon: lenient http-parser takes "Host " as another
         * header (so two Hosts reach the upstream) and honours "Content-Length " */
        V("GET / HTTP/1.1\r\nHost : evil.example\r\n\r\n", 400),
        V(GET "Host : evil.example\r\n\r\n", 400),
        V(GET "Content-Length : 5\r\n\r\nhello", 400),
        V(GET "Content-Length\t: 5\r\n\r\nhello", 400),
        /* field names that are not tokens */
        V(GET "X y: 1\r\n\r\n", 400),
        V(GET "X(y): 1\r\n\r\n", 400),
        V(GET "X\"y: 1\r\n\r\n", 400),
        V(GET "X/y: 1\r\n\r\n", 400),
        V(GET "\xc3\x84: 1\r\n\r\n", 400),
        V(GET ": no name\r\n\r\n", 400),
        V(GET "NoColon\r\n\r\n", 400),
        /* obs-fold */
        V(GET "X-A: one\r\n two\r\n\r\n", 400),
        V(GET "X-A: one\r\n\ttwo\r\n\r\n", 400),
        V("GET / HTTP/1.1\r\n Host: a.example\r\n\r\n", 400),
        /* bare CR, bare LF, NUL and other controls */
        V(GET "X-A: a\rb\r\n\r\n", 400),
        V(GET "X-A: a\r\r\n\r\n", 400),
        V("GET / HTTP/1.1\nHost: a.example\n\n", 400),
        V(GET "X-A: a\nHost: b.example\r\n\r\n", 400),
        V(GET "\n", 400),
        V(GET "\r\r\n", 400),
        V(GET "X-A: a\0b\r\n\r\n", 400),
        V(GET "X-A: a\x01\r\n\r\n", 400),
        V(GET "X-A: a\x7f\r\n\r\n", 400),
        V("GET /\r HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        V("GET /\0 HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        V("GET /\xff HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        V("GET /\t HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        V(" GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        V("GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", 400),
        /* framing: duplicate or conflicting Content-Length, TE other than chunked */
        V(GET "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400),
        V(GET "Content-Length: 1\r\nContent-Length: 2\r\n\r\nxx", 400),
        V(GET "Content-Length: 1, 1\r\n\r\nx", 400),
        V(GET "Content-Length: +1\r\n\r\nx", 400),
        V(GET "Content-Length: 1 1\r\n\r\nx", 400),
        V(GET "Content-Length:\r\n\r\n", 400),
        V(GET "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 400),
        V(GET "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n1\r\nx\r\n0\r\n\r\n", 400),
        V(GET "Transfer-Encoding: gzip\r\n\r\n", 400),
        V(GET "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400),
        V(GET "Transfer-Encoding: chunked, gzip\r\n\r\n", 400),
        V(GET "Transfer-Encoding: identity\r\n\r\n", 400),
        V(GET "Transfer-Encoding: xchunked\r\n\r\n", 400),
        V(GET "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        /* upgrades other than WebSocket would let HTTP/2 (any authority) through raw */
        V(GET "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMA\r\n\r\n",
          400),
        V(GET "Connection: Upgrade\r\nUpgrade: websocket, h2c\r\n\r\n", 400),
        /* TRACK is no method http-parser knows */
        V("TRACK / HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
        /* accepted: the strictness costs nothing that RFC 9112 allows */
        V("\r\n\r\n" GET "\r\n", 0),
        V(GET "X-A:\r\n\r\n", 0),
        V(GET "X-A:   spaced \t \r\n\r\n", 0),
        V(GET "X-A: caf\xc3\xa9 \x80\xff\r\n\r\n", 0),
        V(GET "X-A: a:b: c\r\n\r\n", 0),
        V(GET "!#$%&'*+-.^_`|~09azAZ: 1\r\n\r\n", 0),
        V(GET "Content-Length: 5 \r\n\r\nhello", 0),
        V(GET "Content-Length: 0\r\n\r\n", 0),
        V(GET "Transfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 0),
        V("GET /a?b=c&d=%20 HTTP/1.0\r\nHost: a.example\r\n\r\n", 0),
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
            struct ctx c = {NULL, {&auth, 1}, 0, "", 0};
            struct result r = run_n(&c, cases[i].in, cases[i].len, steps[k]);
            if (cases[i].status == 0) {
                cr_assert_eq(r.st, PROXY_HTTP_OK, "case %zu step %zu: %d", i, steps[k], r.error);
                cr_assert_eq(r.requests, 1, "case %zu step %zu", i, steps[k]);
                cr_assert_not_null(strstr(r.out, "Authorization: Basic SECRET"), "case %zu", i);
            } else {
                cr_assert_eq(r.st, PROXY_HTTP_ERROR, "case %zu step %zu accepted", i, steps[k]);
                cr_assert_eq(r.error, cases[i].status, "case %zu step %zu: got %d", i, steps[k],
                             r.error);
                cr_assert_str_eq(r.out, "", "case %zu step %zu forwarded bytes", i, steps[k]);
                cr_assert_eq(r.requests, 0, "case %zu", i);
            }
            free(r.out);
        }
    }
}

/* A later head on a keep-alive connection is checked as strictly as the first, right
 * after a body of either framing: nothing of it is forwarded. */
Test(proxy_http, strict_heads_after_bodies)
{
    static const struct verdict_case cases[] = {
        V("GET /a HTTP/1.1\r\nHost: a.example\r\n\r\n"
          "GET /b HTTP/1.1\r\nHost : evil.example\r\n\r\n",
          400),
        V("POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc"
          "GET /b HTTP/1.1\r\nX-A: 1\r\n folded\r\nHost: a.example\r\n\r\n",
          400),
        V("POST /a HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
          "3\r\nabc\r\n0\r\n\r\n"
          "GET /b HTTP/1.1\r\nHost: a.example\r\nContent-Length : 3\r\n\r\nxyz",
          400),
        V("POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc\r\n"
          "GET /b HTTP/1.1\r\nHost: a.example\r\nX-A: \0\r\n\r\n",
          400),
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
            struct ctx c = {NULL, {&auth, 1}, 0, "", 0};
            struct result r = run_n(&c, cases[i].in, cases[i].len, steps[k]);
            cr_assert_eq(r.st, PROXY_HTTP_ERROR, "case %zu step %zu", i, steps[k]);
            cr_assert_eq(r.error, 400, "case %zu step %zu: %d", i, steps[k], r.error);
            cr_assert_eq(r.requests, 1, "case %zu step %zu", i, steps[k]);
            cr_assert_not_null(strstr(r.out, "/a HTTP/1.1"), "case %zu", i);
            cr_assert_null(strstr(r.out, "/b"), "case %zu step %zu: %s", i, steps[k], r.out);
            free(r.out);
        }
    }
}

/* The smuggling shape: a body announced by "Content-Length : N" holding a
 * request for another host is refused before anything is forwarded. */
Test(proxy_http, smuggled_request_in_body_refused)
{
    const char *inner = "GET /steal HTTP/1.1\r\nHost: evil.example\r\n\r\n";
    char in[256];
    snprintf(in, sizeof in, "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length : %zu\r\n\r\n%s",
             strlen(inner), inner);
    struct ctx c = {"a.example", {&auth, 1}, 0, "", 0};
    struct result r = run(&c, in, 0);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, 400);
    cr_assert_str_eq(r.out, "");
    cr_assert_eq(c.decisions, 0, "refused before the proxy is even asked");
    free(r.out);
}

/* ------------------------------------------------------------------ TRACE (issue 13 #3) */

Test(proxy_http, trace_refused_where_headers_are_set)
{
    struct ctx c = {NULL, {&auth, 1}, 0, "", 0};
    struct result r = run(&c, "TRACE / HTTP/1.1\r\nHost: a.example\r\n\r\n", 0);
    cr_assert_eq(r.st, PROXY_HTTP_ERROR);
    cr_assert_eq(r.error, 405);
    cr_assert_str_eq(r.out, "", "nothing forwarded: the credential is never echoed");
    free(r.out);
    /* a host without rules: the sandbox's own bytes only, TRACE is its business */
    struct ctx plain = {NULL, {NULL, 0}, 0, "", 0};
    check(&plain, "TRACE / HTTP/1.1\r\nHost: a.example\r\n\r\n",
          "TRACE / HTTP/1.1\r\nHost: a.example\r\n\r\n");
}

/* ------------------------------------------------------------------ Upgrade (issue 13 #8) */

static const char upgrade_req[] = "GET /chat HTTP/1.1\r\nHost: ws.example\r\nUpgrade: websocket\r\n"
                                  "Connection: Upgrade\r\n\r\n";
static const char switched[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                               "Connection: Upgrade\r\n\r\n";

/* Feed the upstream's bytes in pieces of step; the last event that is not NONE. */
static enum proxy_http_resp respond(struct proxy_http *h, const char *in, size_t step)
{
    enum proxy_http_resp ev = PROXY_HTTP_RESP_NONE;
    size_t len = strlen(in), off = 0;
    do {
        size_t n = step ? (len - off < step ? len - off : step) : len - off;
        enum proxy_http_resp e = proxy_http_response(h, in + off, n);
        if (e != PROXY_HTTP_RESP_NONE) ev = e;
        off += n;
    } while (off < len);
    return ev;
}

Test(proxy_http, upgrade_waits_for_101)
{
    for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
        struct ctx c = {"ws.example", {&auth, 1}, 0, "", 0};
        struct proxy_http *h = proxy_http_new(decide, &c);
        struct evbuffer *out = evbuffer_new();
        char in[512];
        snprintf(in, sizeof in, "%sGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", upgrade_req);
        size_t taken;
        cr_assert_eq(feed_steps(h, in, strlen(in), steps[k], out, &taken), PROXY_HTTP_WAIT);
        cr_assert_eq(taken, strlen(upgrade_req), "step %zu: the rest is held", steps[k]);
        cr_assert(proxy_http_waiting(h));
        char *o = take(out);
        cr_assert(strstr(o, "Authorization: Basic SECRET\r\n"));
        cr_assert_null(strstr(o, "evil"));
        free(o);
        size_t used = 1;
        cr_assert_eq(proxy_http_feed(h, in + taken, 1, out, &used), PROXY_HTTP_WAIT);
        cr_assert_eq(used, 0);
        /* the 101 (and the upgraded bytes after it) switch both directions to raw */
        char resp[256];
        snprintf(resp, sizeof resp, "%s\x81\x05hello", switched);
        cr_assert_eq(respond(h, resp, steps[k]), PROXY_HTTP_RESP_RAW, "step %zu", steps[k]);
        cr_assert_not(proxy_http_waiting(h));
        cr_assert_eq(proxy_http_response(h, "HTTP/1.1 200 OK\r\n\r\n", 19), PROXY_HTTP_RESP_NONE,
                     "nothing is parsed after the switch");
        evbuffer_free(out);
        proxy_http_free(h);
    }
}

Test(proxy_http, upgrade_declined_continues_as_http)
{
    for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
        struct ctx c = {"ws.example", {&auth, 1}, 0, "", 0};
        struct proxy_http *h = proxy_http_new(decide, &c);
        struct evbuffer *out = evbuffer_new();
        char in[512];
        snprintf(in, sizeof in,
                 "%sGET /next HTTP/1.1\r\nHost: ws.example\r\n\r\n"
                 "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                 upgrade_req);
        size_t taken;
        cr_assert_eq(feed_steps(h, in, strlen(in), steps[k], out, &taken), PROXY_HTTP_WAIT);
        free(take(out));
        /* the server does not switch: what the sandbox sent next is HTTP again, checked
         * as every request is (the Host must stay the TLS server name) */
        cr_assert_eq(
            respond(h, "HTTP/1.1 426 Upgrade Required\r\nContent-Length: 3\r\n\r\nno\n", steps[k]),
            PROXY_HTTP_RESP_RESUME, "step %zu", steps[k]);
        size_t more;
        enum proxy_http_status st =
            feed_steps(h, in + taken, strlen(in) - taken, steps[k], out, &more);
        cr_assert_eq(st, PROXY_HTTP_ERROR);
        cr_assert_eq(proxy_http_error(h), 421);
        char *o = take(out);
        cr_assert_str_eq(o, "GET /next HTTP/1.1\r\nHost: ws.example\r\n"
                            "Authorization: Basic SECRET\r\n\r\n");
        free(o);
        cr_assert_eq(proxy_http_requests(h), 2);
        evbuffer_free(out);
        proxy_http_free(h);
    }
}

/* Only the response to the Upgrade request itself counts: a 101 inside an earlier
 * response's body, after a HEAD response's headers, or for a request that asked for
 * nothing, never switches; interim responses are skipped. */
Test(proxy_http, upgrade_answer_is_matched_to_its_request)
{
    struct {
        const char *before; /* requests pipelined before the Upgrade */
        const char *resp;   /* the upstream's bytes before the real 101 */
    } cases[] = {
        {"GET /a HTTP/1.1\r\nHost: ws.example\r\n\r\n",
         "HTTP/1.1 200 OK\r\nContent-Length: 36\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n"},
        {"GET /a HTTP/1.1\r\nHost: ws.example\r\n\r\n",
         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "24\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n\r\n0\r\n\r\n"},
        {"HEAD /a HTTP/1.1\r\nHost: ws.example\r\n\r\n",
         "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"},
        {"GET /a HTTP/1.1\r\nHost: ws.example\r\n\r\n"
         "GET /b HTTP/1.1\r\nHost: ws.example\r\n\r\n",
         "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n"
         "HTTP/1.1 204 No Content\r\n\r\n"},
        {"", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
            struct ctx c = {"ws.example", {&auth, 1}, 0, "", 0};
            struct proxy_http *h = proxy_http_new(decide, &c);
            struct evbuffer *out = evbuffer_new();
            char in[512];
            snprintf(in, sizeof in, "%s%s", cases[i].before, upgrade_req);
            size_t taken;
            cr_assert_eq(feed_steps(h, in, strlen(in), steps[k], out, &taken), PROXY_HTTP_WAIT);
            cr_assert_eq(taken, strlen(in));
            cr_assert_eq(respond(h, cases[i].resp, steps[k]), PROXY_HTTP_RESP_NONE,
                         "case %zu step %zu: switched too early", i, steps[k]);
            cr_assert(proxy_http_waiting(h), "case %zu", i);
            cr_assert_eq(respond(h, switched, steps[k]), PROXY_HTTP_RESP_RAW, "case %zu step %zu",
                         i, steps[k]);
            evbuffer_free(out);
            proxy_http_free(h);
        }
    }
}

Test(proxy_http, unexpected_101_and_lost_responses)
{
    struct ctx c = {"ws.example", {&auth, 1}, 0, "", 0};
    struct proxy_http *h = proxy_http_new(decide, &c);
    struct evbuffer *out = evbuffer_new();
    const char *get = "GET /a HTTP/1.1\r\nHost: ws.example\r\n\r\n";
    size_t used;
    cr_assert_eq(proxy_http_feed(h, get, strlen(get), out, &used), PROXY_HTTP_OK);
    /* a switch nobody asked for: the proxy keeps reading the sandbox as HTTP */
    cr_assert_eq(respond(h, switched, 0), PROXY_HTTP_RESP_NONE);
    cr_assert_eq(proxy_http_feed(h, get, strlen(get), out, &used), PROXY_HTTP_OK);
    /* ... and, no longer able to match answers to requests, refuses an Upgrade */
    cr_assert_eq(proxy_http_feed(h, upgrade_req, strlen(upgrade_req), out, &used),
                 PROXY_HTTP_ERROR);
    cr_assert_eq(proxy_http_error(h), 400);
    evbuffer_free(out);
    proxy_http_free(h);

    /* the upstream ends without answering the Upgrade, or answers garbage: HTTP again */
    const char *ends[] = {NULL, "SSH-2.0-OpenSSH\r\n"};
    for (size_t i = 0; i < ARRAY_LEN(ends); i++) {
        struct ctx c2 = {"ws.example", {&auth, 1}, 0, "", 0};
        h = proxy_http_new(decide, &c2);
        out = evbuffer_new();
        cr_assert_eq(proxy_http_feed(h, upgrade_req, strlen(upgrade_req), out, &used),
                     PROXY_HTTP_WAIT);
        enum proxy_http_resp ev =
            ends[i] ? respond(h, ends[i], 0) : proxy_http_response(h, NULL, 0);
        cr_assert_eq(ev, PROXY_HTTP_RESP_RESUME, "case %zu", i);
        cr_assert_not(proxy_http_waiting(h));
        evbuffer_free(out);
        proxy_http_free(h);
    }
}

/* At most PROXY_HTTP_MAX_PIPELINE requests without an answer are taken; each answer
 * makes room for one more. */
Test(proxy_http, pipeline_is_bounded)
{
    struct ctx c = {"a.example", {NULL, 0}, 0, "", 0};
    struct proxy_http *h = proxy_http_new(decide, &c);
    struct evbuffer *out = evbuffer_new();
    const char *get = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
    size_t gl = strlen(get), n = PROXY_HTTP_MAX_PIPELINE + 6;
    char *in = malloc(gl * n + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(in + i * gl, get, gl);
    size_t used;
    cr_assert_eq(proxy_http_feed(h, in, gl * n, out, &used), PROXY_HTTP_WAIT);
    cr_assert_eq(used, gl * PROXY_HTTP_MAX_PIPELINE);
    cr_assert_eq(proxy_http_requests(h), PROXY_HTTP_MAX_PIPELINE);
    cr_assert_eq(respond(h, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0),
                 PROXY_HTTP_RESP_RESUME);
    size_t more;
    cr_assert_eq(proxy_http_feed(h, in + used, gl * n - used, out, &more), PROXY_HTTP_WAIT);
    cr_assert_eq(more, gl);
    cr_assert_eq(proxy_http_requests(h), PROXY_HTTP_MAX_PIPELINE + 1);
    free(in);
    evbuffer_free(out);
    proxy_http_free(h);
}

Test(proxy_http, status_responses)
{
    char buf[512];
    int codes[] = {400, 403, 405, 421, 431, 999};
    for (size_t i = 0; i < ARRAY_LEN(codes); i++) {
        for (int with_reason = 0; with_reason < 2; with_reason++) {
            size_t n = proxy_http_status_response(codes[i], with_reason ? "a reason" : NULL, buf,
                                                  sizeof buf);
            cr_assert_eq(n, strlen(buf));
            const char *body = strstr(buf, "\r\n\r\n");
            cr_assert_not_null(body);
            const char *cl = strstr(buf, "Content-Length: ");
            cr_assert_not_null(cl);
            cr_assert_eq((size_t)atoi(cl + 16), strlen(body + 4), "Content-Length of %d", codes[i]);
            if (with_reason) cr_assert_str_eq(body + 4, "egress proxy: a reason\n");
        }
    }
    proxy_http_status_response(421, NULL, buf, sizeof buf);
    cr_assert(!strncmp(buf, "HTTP/1.1 421 Misdirected Request\r\n", 34));
}

/* ------------------------------------------------------------------ per-request routing */

/* The real policy decides (policy.c's per-request rules), as the proxy's connection does. */
struct pctx {
    struct proxy_policy *p;
    struct proxy_header scratch[PROXY_POLICY_MAX_HEADERS];
    int decisions;
};

static int policy_decide(void *arg, const char *host, const struct proxy_request *rq,
                         struct proxy_action *act, const char **why)
{
    struct pctx *c = arg;
    c->decisions++;
    struct proxy_verdict v;
    proxy_policy_match(c->p, host, &v);
    if (v.kind == PROXY_DENY) return PROXY_HTTP_DENIED;
    proxy_policy_eval(&v, rq, c->scratch, act);
    return 0;
}

#define ROUTES                                                                                     \
    "{\"api.example\": ["                                                                          \
    "{\"match\": {\"path\": {\"startsWith\": \"/fwd\"}}, \"forwardURL\": "                         \
    "\"https://proxy.example:8443/base/\"},"                                                       \
    "{\"match\": {\"method\": [\"DELETE\"]}, \"response\": {\"statusCode\": 403, \"body\": "       \
    "\"nope\", \"headers\": {\"X-Why\": \"policy\"}}},"                                            \
    "{\"match\": {\"path\": {\"exact\": \"/empty\"}}, \"response\": {\"statusCode\": 204}},"       \
    "{\"match\": {\"headers\": [{\"key\": {\"exact\": \"x-key\"}}]}, \"transform\": "              \
    "[{\"headers\": {\"Authorization\": \"Bearer S\"}}]}"                                          \
    "]}"

struct routed {
    struct pctx c;
    struct proxy_http *h;
    struct evbuffer *out, *local;
};

static void routed_init(struct routed *r)
{
    memset(r, 0, sizeof *r);
    struct err e = ERR_INIT;
    r->c.p = proxy_policy_parse(ROUTES, strlen(ROUTES), &e);
    cr_assert_not_null(r->c.p, "%s", e.msg);
    r->h = proxy_http_new(policy_decide, &r->c);
    r->out = evbuffer_new();
    r->local = evbuffer_new();
    proxy_http_set_origin(r->h, true, 443);
    proxy_http_set_local(r->h, r->local);
    proxy_http_set_serial(r->h, true);
}

static void routed_fini(struct routed *r)
{
    proxy_http_free(r->h);
    evbuffer_free(r->out);
    evbuffer_free(r->local);
    proxy_policy_unref(r->c.p);
}

/* Forward: the prefix before the original path and query, Host the forward URL's
 * authority, the original described in vercel-forwarded-*, the sandbox's copies gone. */
Test(proxy_http, forward_rewrites_target_and_host)
{
    const char *in = "POST /fwd/a?b=1 HTTP/1.1\r\nHost: api.example\r\n"
                     "Vercel-Forwarded-Host: evil.example\r\nvercel-sandbox-oidc-token: x\r\n"
                     "Content-Length: 3\r\n\r\nabc";
    const char *want = "POST /base/fwd/a?b=1 HTTP/1.1\r\nContent-Length: 3\r\n"
                       "Host: proxy.example:8443\r\nvercel-forwarded-host: api.example\r\n"
                       "vercel-forwarded-scheme: https\r\nvercel-forwarded-port: 443\r\n"
                       "vercel-forwarded-path: /fwd/a?b=1\r\n\r\nabc";
    for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
        struct routed r;
        routed_init(&r);
        size_t used;
        cr_assert_eq(feed_steps(r.h, in, strlen(in), steps[k], r.out, &used), PROXY_HTTP_WAIT);
        cr_assert_eq(used, strlen(in));
        char *o = take(r.out);
        cr_assert_str_eq(o, want, "step %zu", steps[k]);
        free(o);
        cr_assert_eq(proxy_http_forwarded(r.h), 1);
        cr_assert_not(proxy_http_idle(r.h));
        routed_fini(&r);
    }
}

/* Serial mode: nothing more is taken until the forwarded request's response has ended
 * (not just its head), and a response ended by the upstream's EOF counts. */
Test(proxy_http, serial_waits_for_the_whole_response)
{
    const char *two = "GET /fwd HTTP/1.1\r\nHost: api.example\r\n\r\n"
                      "GET /x HTTP/1.1\r\nHost: api.example\r\nX-Key: 1\r\n\r\n";
    struct routed r;
    routed_init(&r);
    size_t used, more;
    cr_assert_eq(proxy_http_feed(r.h, two, strlen(two), r.out, &used), PROXY_HTTP_WAIT);
    cr_assert_eq(used, strlen("GET /fwd HTTP/1.1\r\nHost: api.example\r\n\r\n"));
    cr_assert_eq(respond(r.h, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", 0),
                 PROXY_HTTP_RESP_NONE);
    cr_assert(proxy_http_waiting(r.h));
    cr_assert_eq(respond(r.h, "cd", 0), PROXY_HTTP_RESP_RESUME);
    cr_assert(proxy_http_idle(r.h));
    proxy_http_upstream_reset(r.h); /* the next one may go elsewhere */
    evbuffer_drain(r.out, evbuffer_get_length(r.out));
    cr_assert_eq(proxy_http_feed(r.h, two + used, strlen(two) - used, r.out, &more),
                 PROXY_HTTP_WAIT);
    char *o = take(r.out);
    cr_assert_str_eq(o, "GET /x HTTP/1.1\r\nHost: api.example\r\nX-Key: 1\r\n"
                        "Authorization: Bearer S\r\n\r\n");
    free(o);
    /* no Content-Length: the body ends with the connection */
    cr_assert_eq(respond(r.h, "HTTP/1.1 200 OK\r\n\r\nall of it", 0), PROXY_HTTP_RESP_NONE);
    cr_assert_eq(proxy_http_response(r.h, NULL, 0), PROXY_HTTP_RESP_RESUME);
    cr_assert(proxy_http_idle(r.h));
    routed_fini(&r);
}

/* A response rule: nothing goes upstream (not even the body, chunked or not), the
 * answer goes to the local output in order, HEAD gets no body, 204 no length, and the
 * connection goes on with the next request. */
Test(proxy_http, respond_answers_locally)
{
    const char *in = "DELETE /a HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n0\r\n\r\n"
                     "HEAD /empty HTTP/1.1\r\nHost: api.example\r\n\r\n"
                     "DELETE /b HTTP/1.1\r\nHost: api.example\r\nContent-Length: 2\r\n\r\nxy"
                     "GET /up HTTP/1.1\r\nHost: api.example\r\n\r\n";
    const char *want_local = "HTTP/1.1 403 Forbidden\r\nX-Why: policy\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 4\r\n\r\n"
                             "nope"
                             "HTTP/1.1 204 No Content\r\n\r\n"
                             "HTTP/1.1 403 Forbidden\r\nX-Why: policy\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\nContent-Length: 4\r\n\r\n"
                             "nope";
    for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
        struct routed r;
        routed_init(&r);
        size_t used;
        cr_assert_eq(feed_steps(r.h, in, strlen(in), steps[k], r.out, &used), PROXY_HTTP_WAIT);
        char *l = take(r.local), *o = take(r.out);
        cr_assert_str_eq(l, want_local, "step %zu", steps[k]);
        cr_assert_str_eq(o, "GET /up HTTP/1.1\r\nHost: api.example\r\n\r\n", "step %zu", steps[k]);
        free(l);
        free(o);
        cr_assert_eq(proxy_http_responded(r.h), 3);
        cr_assert_eq(proxy_http_requests(r.h), 1);
        routed_fini(&r);
    }
}

/* An Upgrade request the policy answers: no switch, HTTP goes on. HEAD to a body rule:
 * the length, not the body. */
Test(proxy_http, respond_to_upgrade_and_head)
{
    struct routed r;
    routed_init(&r);
    const char *in = "DELETE /ws HTTP/1.1\r\nHost: api.example\r\nConnection: Upgrade\r\n"
                     "Upgrade: websocket\r\n\r\n"
                     "GET /after HTTP/1.1\r\nHost: api.example\r\n\r\n";
    size_t used;
    cr_assert_eq(proxy_http_feed(r.h, in, strlen(in), r.out, &used), PROXY_HTTP_WAIT);
    cr_assert_eq(used, strlen(in));
    char *o = take(r.out);
    cr_assert_str_eq(o, "GET /after HTTP/1.1\r\nHost: api.example\r\n\r\n");
    free(o);
    cr_assert_eq(proxy_http_responded(r.h), 1);
    routed_fini(&r);
}

/* Hostile heads on a routed connection: the strict checks still come first, and an
 * answer is never produced for a refused head. */
Test(proxy_http, routed_refusals)
{
    const char *bad[] = {
        "DELETE /a HTTP/1.1\r\nHost: api.example\r\nHost: api.example\r\n\r\n",
        "DELETE /a HTTP/1.1\r\nHost: api.example\r\nContent-Length: 1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        "DELETE /a HTTP/1.1\r\nHost : api.example\r\n\r\n",
        "DELETE http://other.example/a HTTP/1.1\r\nHost: api.example\r\n\r\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct routed r;
        routed_init(&r);
        size_t used;
        cr_assert_eq(proxy_http_feed(r.h, bad[i], strlen(bad[i]), r.out, &used), PROXY_HTTP_ERROR,
                     "case %zu", i);
        cr_assert_eq(proxy_http_error(r.h), 400, "case %zu", i);
        cr_assert_eq(evbuffer_get_length(r.local), 0, "case %zu", i);
        cr_assert_eq(evbuffer_get_length(r.out), 0, "case %zu", i);
        routed_fini(&r);
    }
    /* absolute-form: the path and query are matched and forwarded, not the authority */
    struct routed r;
    routed_init(&r);
    const char *abs = "GET http://api.example/fwd?q HTTP/1.1\r\nHost: api.example\r\n\r\n";
    size_t used;
    cr_assert_eq(proxy_http_feed(r.h, abs, strlen(abs), r.out, &used), PROXY_HTTP_WAIT);
    char *o = take(r.out);
    cr_assert(strstr(o, "GET /base/fwd?q HTTP/1.1\r\n") == o, "%s", o);
    cr_assert(strstr(o, "vercel-forwarded-path: /fwd?q\r\n"), "%s", o);
    free(o);
    routed_fini(&r);
}

/* An answered request that waits for "100 Continue" gets it at once (before its body is
 * read), and one that asks to close makes the rewriter stop: the proxy closes after the
 * answer. */
Test(proxy_http, respond_continue_and_close)
{
    for (size_t k = 0; k < ARRAY_LEN(steps); k++) {
        struct routed r;
        routed_init(&r);
        const char *head = "DELETE /a HTTP/1.1\r\nHost: api.example\r\nExpect: 100-continue\r\n"
                           "Content-Length: 4\r\n\r\n";
        size_t used;
        cr_assert_eq(feed_steps(r.h, head, strlen(head), steps[k], r.out, &used), PROXY_HTTP_OK);
        char *l = take(r.local);
        cr_assert_str_eq(l, "HTTP/1.1 100 Continue\r\n\r\n", "step %zu", steps[k]);
        free(l);
        const char *rest = "bodyDELETE /b HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n"
                           "GET /never HTTP/1.1\r\nHost: api.example\r\n\r\n";
        cr_assert_eq(feed_steps(r.h, rest, strlen(rest), steps[k], r.out, &used),
                     PROXY_HTTP_WAIT);
        cr_assert(proxy_http_closing(r.h));
        cr_assert_eq(used, strlen(rest) - strlen("GET /never HTTP/1.1\r\nHost: api.example\r\n\r\n"));
        cr_assert_eq(proxy_http_responded(r.h), 2);
        cr_assert_eq(evbuffer_get_length(r.out), 0);
        routed_fini(&r);
    }
    /* HTTP/1.0 without keep-alive closes too; with it, it does not; no Expect without a body */
    const char *v10[] = {"DELETE / HTTP/1.0\r\nHost: api.example\r\nExpect: 100-continue\r\n\r\n",
                         "DELETE / HTTP/1.0\r\nHost: api.example\r\nConnection: keep-alive\r\n\r\n"};
    for (size_t i = 0; i < 2; i++) {
        struct routed r;
        routed_init(&r);
        size_t used;
        proxy_http_feed(r.h, v10[i], strlen(v10[i]), r.out, &used);
        cr_assert_eq(proxy_http_closing(r.h), i == 0, "case %zu", i);
        char *l = take(r.local);
        cr_assert(strncmp(l, "HTTP/1.1 403 ", 13) == 0, "case %zu: %s", i, l);
        free(l);
        routed_fini(&r);
    }
}
