/* fuzz_proxy_policy.c - libFuzzer target: the egress proxy's policy (JSON, with address
 * ranges) on hostile input, then host and address matching; and the CIDR parser on the
 * same bytes. Invariants: never crashes or leaks; a refusal is a 400 validation_error;
 * a parsed range has no bits beyond its prefix and a prefix-shaped mask. */
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

    struct err err = ERR_INIT;
    struct proxy_policy *p = proxy_policy_parse((const char *)data, size, &err);
    if (!p) {
        if (err.status != 400 || strcmp(err.code, "validation_error")) abort();
        return 0;
    }
    static const char *const hosts[] = {"github.com", "a.example.com", "10.1.2.3", "x", ""};
    static const char *const addrs[] = {"10.1.2.3", "203.0.113.7", "0.0.0.0", "255.255.255.255"};
    for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
        struct proxy_verdict v, a;
        proxy_policy_match(p, hosts[i], &v);
        for (size_t j = 0; j < sizeof addrs / sizeof addrs[0]; j++) {
            struct sockaddr_in sa = {.sin_family = AF_INET};
            inet_pton(AF_INET, addrs[j], &sa.sin_addr);
            proxy_policy_match_addr(p, &v, (struct sockaddr *)&sa, &a);
            if (!a.rule) abort();
        }
    }
    proxy_policy_unref(p);
    return 0;
}
