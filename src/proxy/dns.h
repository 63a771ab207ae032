/*
 * dns.h - the sandbox's DNS: only allowed names resolve, and they all resolve to
 * the proxy.
 *
 * Inside a sandbox the only reachable resolver is this one. A query for a name
 * the policy allows is answered with a fixed address that routes to the egress
 * proxy (A and/or AAAA, configurable); the proxy then decides by SNI or Host and
 * resolves the real name itself. Any other name gets NXDOMAIN, so a denied host
 * fails at lookup time, before a connection is even tried.
 *
 * proxy_dns_answer() is the whole protocol and is pure: a query packet in, a
 * response packet out. Parsing is bounds-checked at every step; compression
 * pointers are refused in questions; one question per query.
 */
#ifndef REBUNO_PROXY_DNS_H
#define REBUNO_PROXY_DNS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define PROXY_DNS_MAX_PACKET 512 /* classic UDP size; answers here are tiny */

enum {
    PROXY_DNS_NOERROR = 0,
    PROXY_DNS_FORMERR = 1,
    PROXY_DNS_SERVFAIL = 2,
    PROXY_DNS_NXDOMAIN = 3,
    PROXY_DNS_NOTIMP = 4,
    PROXY_DNS_REFUSED = 5,
};

enum { PROXY_DNS_TYPE_A = 1, PROXY_DNS_TYPE_AAAA = 28, PROXY_DNS_TYPE_ANY = 255 };

struct proxy_dns_config {
    bool have_a, have_aaaa;
    struct in_addr a;     /* answer for allowed names, A queries */
    struct in6_addr aaaa; /* answer for allowed names, AAAA queries */
    uint32_t ttl;         /* seconds */
};

/* Whether a (normalized) name may resolve. */
typedef bool (*proxy_dns_allowed_fn)(const char *name, void *arg);

/*
 * Answer one query. Returns the response length (> 0), or -EINVAL when the packet
 * deserves no answer at all (too short for a header, or itself a response).
 * out needs PROXY_DNS_MAX_PACKET bytes. If qname_out is not NULL it receives the
 * normalized name asked for ("" when none could be read; PROXY_HOST_MAX + 1 bytes),
 * and *rcode_out the response code.
 */
int proxy_dns_answer(const uint8_t *q, size_t qlen, uint8_t *out,
                     const struct proxy_dns_config *cfg, proxy_dns_allowed_fn allowed, void *arg,
                     char *qname_out, int *rcode_out);

#endif
