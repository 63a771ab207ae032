/* fuzz_proxy_policy.c - libFuzzer target: the egress proxy's network policy parser
 * (src/proxy/policy.c) on hostile JSON, with address ranges and per-request rules; then
 * every host it names matched, its per-request rules evaluated against a few requests and
 * a few addresses matched against its ranges; and the CIDR parser on the same bytes.
 * Invariants: never crashes or leaks; an error is a 400 validation_error; an evaluation
 * sets at most PROXY_POLICY_MAX_HEADERS headers and names a rule of the domain; a parsed
 * range has no bits beyond its prefix and a prefix-shaped mask. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "proxy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[80];
    size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
    memcpy(s, data, n);
    s[n] = '\0';
    uint32_t net, mask;
    if (proxy_cidr_parse(s, &net, &mask) == 0) {
        if (net & ~mask) abort();
        if (mask && (~mask & (~mask + 1u))) abort(); /* ~mask must be 2^k - 1 */
    }

    struct err e = ERR_INIT;
    struct proxy_policy *p = proxy_policy_parse((const char *)data, size, &e);
    if (!p) {
        if (e.status != 400 || strcmp(e.code, "validation_error") != 0) abort();
        return 0;
    }
    static const struct proxy_req_header h[] = {{"X-Key", "1", 5, 1}, {"a", " b ", 1, 3}};
    static const struct proxy_request rqs[] = {
        {"GET", "/", 1, NULL, 0, NULL, 0},
        {"POST", "/a/b", 4, "k=v&a+b=%20&&=", 14, h, 2},
        {"DELETE", "/x", 2, "%", 1, h, 1},
    };
    static const char *hosts[] = {"a.example", "x.a.example", "github.com", "localhost", "10.1.2.3", ""};
    static const char *const addrs[] = {"10.1.2.3", "203.0.113.7", "0.0.0.0", "255.255.255.255"};
    struct proxy_header scratch[PROXY_POLICY_MAX_HEADERS];
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        struct proxy_verdict v;
        proxy_policy_match(p, hosts[i], &v);
        for (size_t k = 0; k < sizeof rqs / sizeof rqs[0]; k++) {
            struct proxy_action a;
            proxy_policy_eval(&v, &rqs[k], scratch, &a);
            if (a.headers.n > PROXY_POLICY_MAX_HEADERS) abort();
            if ((a.kind == PROXY_ACT_FORWARD) != (a.forward != NULL)) abort();
            if ((a.kind == PROXY_ACT_RESPOND) != (a.response != NULL)) abort();
            if (a.rule >= PROXY_POLICY_MAX_RULES) abort();
        }
        for (size_t j = 0; j < sizeof addrs / sizeof addrs[0]; j++) {
            struct proxy_verdict a;
            struct sockaddr_in sa = {.sin_family = AF_INET};
            inet_pton(AF_INET, addrs[j], &sa.sin_addr);
            proxy_policy_match_addr(p, &v, (struct sockaddr *)&sa, &a);
            if (!a.rule) abort();
        }
    }
    proxy_policy_unref(p);
    return 0;
}
