/* fuzz_proxy_routes.c - libFuzzer target: hostile request bytes through the egress proxy's
 * request rewriter (src/proxy/http_rw.c) on a serial, routed connection whose policy
 * forwards, answers and matches per request (src/proxy/policy.c), with the upstream's
 * answers fed whenever the rewriter waits for one.
 * Invariants: never crashes or leaks; nothing is taken while waiting; the local output
 * holds nothing until a response rule answered. */
#include <event2/buffer.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "proxy/http_rw.h"
#include "proxy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ROUTES                                                                                     \
    "{\"a.example\": ["                                                                            \
    "{\"match\": {\"path\": {\"startsWith\": \"/f\"}}, \"forwardURL\": \"https://p.example/x/\"}," \
    "{\"match\": {\"method\": [\"DELETE\", \"PUT\"], \"queryString\": [{\"key\": {\"exact\": "     \
    "\"k\"}}]}, \"response\": {\"statusCode\": 403, \"body\": \"no\"}},"                           \
    "{\"match\": {\"headers\": [{\"key\": {\"startsWith\": \"x-\"}, \"value\": {\"exact\": "       \
    "\"1\"}}]}, \"response\": {\"statusCode\": 204}},"                                             \
    "{\"match\": {\"queryString\": [{\"value\": {\"startsWith\": \"a b\"}}]}, \"transform\": "     \
    "[{\"headers\": {\"Authorization\": \"Bearer S\"}}]}]}"

struct fctx {
    struct proxy_policy *p;
    struct proxy_header scratch[PROXY_POLICY_MAX_HEADERS];
};

static int decide(void *arg, const char *host, const struct proxy_request *rq,
                  struct proxy_action *act, const char **why)
{
    struct fctx *c = arg;
    struct proxy_verdict v;
    proxy_policy_match(c->p, host, &v);
    if (v.kind == PROXY_DENY) return PROXY_HTTP_DENIED;
    proxy_policy_eval(&v, rq, c->scratch, act);
    return 0;
}

static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fctx c;
    if (!c.p) {
        struct err e = ERR_INIT;
        c.p = proxy_policy_parse(ROUTES, strlen(ROUTES), &e);
        if (!c.p) abort();
    }
    if (size == 0) return 0;
    size_t step = (size_t)(data[0] % 16) + 1;
    bool tls = data[0] & 0x80;
    data++;
    size--;
    struct proxy_http *h = proxy_http_new(decide, &c);
    struct evbuffer *out = evbuffer_new(), *local = evbuffer_new();
    proxy_http_set_origin(h, tls, tls ? 443 : 80);
    proxy_http_set_local(h, local);
    proxy_http_set_serial(h, true);
    size_t off = 0, rounds = 0;
    while (off < size && rounds++ < 4096) {
        size_t n = size - off < step ? size - off : step, used = 0;
        enum proxy_http_status st = proxy_http_feed(h, (const char *)data + off, n, out, &used);
        if (used > n) abort();
        if (evbuffer_get_length(local) && proxy_http_responded(h) == 0)
            abort(); /* a local answer nobody's rule gave */
        if (st == PROXY_HTTP_ERROR) break;
        off += used;
        if (st == PROXY_HTTP_WAIT) {
            size_t again = 0;
            if (proxy_http_feed(h, (const char *)data + off, size - off, out, &again) !=
                    PROXY_HTTP_WAIT ||
                again != 0)
                abort(); /* nothing is taken while waiting */
            proxy_http_response(h, ok, sizeof ok - 1);
            if (proxy_http_waiting(h)) proxy_http_response(h, NULL, 0);
            if (proxy_http_idle(h)) proxy_http_upstream_reset(h);
        }
    }
    evbuffer_free(out);
    evbuffer_free(local);
    proxy_http_free(h);
    return 0;
}
