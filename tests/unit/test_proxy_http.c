/*
 * test_proxy_http.c - unit tests for request rewriting (src/proxy/http_rw.c),
 * data-driven: request bytes in, the exact bytes the upstream would get out.
 *
 * Every case is also fed one byte at a time and in random-sized pieces; the
 * output must be the same whatever the split (the proxy sees arbitrary reads).
 */
#include <criterion/criterion.h>

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/http_rw.h"

struct ctx {
    const char *expect_host;  /* NULL: any */
    struct proxy_headers set; /* headers to set */
    int decisions;
    char last_host[PROXY_HOST_MAX + 1];
    int refuse_with; /* 0: allow */
};

static int decide(void *arg, const char *host, const struct proxy_headers **set)
{
    struct ctx *c = arg;
    c->decisions++;
    snprintf(c->last_host, sizeof c->last_host, "%s", host);
    if (c->refuse_with) return c->refuse_with;
    if (c->expect_host && strcmp(host, c->expect_host) != 0) return 421;
    *set = c->set.n ? &c->set : NULL;
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

/* Feed `in` in pieces of `step` bytes (0 = all at once). */
static struct result run(struct ctx *c, const char *in, size_t step)
{
    struct proxy_http *h = proxy_http_new(decide, c);
    struct evbuffer *out = evbuffer_new();
    struct result r = {PROXY_HTTP_OK, 0, NULL, 0, 0, 0};
    size_t len = strlen(in), off = 0;
    while (off < len) {
        size_t n = step ? (len - off < step ? len - off : step) : len - off;
        size_t used = 0;
        r.st = proxy_http_feed(h, in + off, n, out, &used);
        r.consumed_total += used;
        if (r.st != PROXY_HTTP_OK) break;
        off += n;
    }
    r.error = proxy_http_error(h);
    r.requests = proxy_http_requests(h);
    r.injected = proxy_http_injected(h);
    size_t ol = evbuffer_get_length(out);
    r.out = malloc(ol + 1);
    evbuffer_remove(out, r.out, ol);
    r.out[ol] = '\0';
    evbuffer_free(out);
    proxy_http_free(h);
    return r;
}

/* Same result at every split size. */
static void check(struct ctx *c, const char *in, const char *want)
{
    size_t steps[] = {0, 1, 2, 3, 7, 64};
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

Test(proxy_http, upgrade_goes_raw)
{
    struct ctx c = {"ws.example", {&auth, 1}, 0, "", 0};
    const char *in = "GET /chat HTTP/1.1\r\nHost: ws.example\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\n\r\n\x81\x05hello";
    struct proxy_http *h = proxy_http_new(decide, &c);
    struct evbuffer *out = evbuffer_new();
    size_t used = 0;
    enum proxy_http_status st = proxy_http_feed(h, in, strlen(in), out, &used);
    cr_assert_eq(st, PROXY_HTTP_UPGRADE);
    cr_assert_str_eq(in + used, "\x81\x05hello", "the rest is the upgraded stream");
    size_t ol = evbuffer_get_length(out);
    char *o = malloc(ol + 1);
    evbuffer_remove(out, o, ol);
    o[ol] = '\0';
    cr_assert(strstr(o, "Authorization: Basic SECRET\r\n"));
    free(o);
    evbuffer_free(out);
    proxy_http_free(h);
}

Test(proxy_http, status_responses)
{
    char buf[256];
    int codes[] = {400, 405, 421, 431, 999};
    for (size_t i = 0; i < 5; i++) {
        size_t n = proxy_http_status_response(codes[i], buf, sizeof buf);
        cr_assert_eq(n, strlen(buf));
        const char *body = strstr(buf, "\r\n\r\n");
        cr_assert_not_null(body);
        const char *cl = strstr(buf, "Content-Length: ");
        cr_assert_not_null(cl);
        cr_assert_eq((size_t)atoi(cl + 16), strlen(body + 4), "Content-Length of %d", codes[i]);
    }
    proxy_http_status_response(421, buf, sizeof buf);
    cr_assert(!strncmp(buf, "HTTP/1.1 421 Misdirected Request\r\n", 34));
}
