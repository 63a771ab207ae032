/*
 * policy.h - the sandbox network policy the egress proxy enforces.
 *
 * Three modes, as in the product documents:
 *
 *   "allow-all" | {"mode": "allow-all"}     every host, bytes untouched
 *   "deny-all"  | {"mode": "deny-all"}      nothing
 *   custom map  {"*": [], "github.com": [{"transform": [{"headers": {"Authorization": "..."}}]}],
 *                "*.example.com": []}
 *               (also accepted wrapped as {"allow": {...}} or {"allow": ["a.com", ...]})
 *
 * A rule may also say "plain_http": true: its headers are then set on plain HTTP
 * (port 80) requests too. Without it they are set only inside TLS, and a port-80
 * request to that host is refused, so a credential never crosses the network in
 * cleartext unless the policy asks for it by name.
 *
 * A host is matched exactly first, then against the longest "*.suffix" wildcard
 * (subdomains at any depth, never the apex itself), then "*" (any host, no rules).
 * Matching is case-insensitive and ignores one trailing dot. The result is one of
 *   deny       - refuse the connection (TCP reset before any byte is sent)
 *   pass       - allowed, no header rules: bytes pass untouched (end-to-end TLS)
 *   intercept  - allowed with header rules: terminate TLS, set these headers
 * "*" may not carry rules (a credential for every host is never what anyone means).
 *
 * A policy is immutable once built and reference-counted, so a connection keeps
 * the policy it was admitted under while the sandbox's policy is replaced live.
 * Header values (credentials) are wiped from memory when the last reference goes,
 * and no error message ever quotes a header value. Loop-thread only (plain int refs).
 */
#ifndef REBUNO_PROXY_POLICY_H
#define REBUNO_PROXY_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* Hard limits on a policy. */
#define PROXY_POLICY_MAX_BYTES (1024 * 1024)
#define PROXY_POLICY_MAX_DOMAINS 4096
#define PROXY_POLICY_MAX_RULES 32    /* rules per domain, transforms per rule */
#define PROXY_POLICY_MAX_HEADERS 64  /* headers set for one domain (after merging) */
#define PROXY_POLICY_MAX_HNAME 256   /* header name bytes */
#define PROXY_POLICY_MAX_HVALUE 8192 /* header value bytes */
#define PROXY_HOST_MAX 253           /* a DNS name without the trailing dot */

enum proxy_policy_mode { PROXY_POLICY_ALLOW_ALL, PROXY_POLICY_DENY_ALL, PROXY_POLICY_CUSTOM };
enum proxy_verdict_kind { PROXY_DENY, PROXY_PASS, PROXY_INTERCEPT };

struct proxy_header {
    char *name;  /* as configured (case kept for the wire) */
    char *value; /* secret: never logged */
    size_t name_len, value_len;
};

/* The headers to set on every request to one matched domain. */
struct proxy_headers {
    struct proxy_header *v;
    size_t n;
};

struct proxy_verdict {
    enum proxy_verdict_kind kind;
    const struct proxy_headers *headers; /* PROXY_INTERCEPT only; owned by the policy */
    const char *rule;                    /* the matching key ("github.com", "*.x.com", "*",
                                            "allow-all"), owned by the policy; "" on deny */
    bool plain_http;                     /* PROXY_INTERCEPT: the headers may go over port 80 */
};

struct proxy_policy;

/* Parse the JSON forms above. NULL on error with err = 400 "validation_error", the
 * offending element in err->field (e.g. "github.com[0].transform[0].headers.X-Key")
 * and a message saying what is wrong and how to fix it. */
struct proxy_policy *proxy_policy_from_json(const json_t *j, struct err *err);
/* Same from JSON text (duplicate keys rejected, at most PROXY_POLICY_MAX_BYTES). */
struct proxy_policy *proxy_policy_parse(const char *text, size_t len, struct err *err);
/* Same from a file. */
struct proxy_policy *proxy_policy_load_file(const char *path, struct err *err);
/* The two fixed policies. */
struct proxy_policy *proxy_policy_new_mode(enum proxy_policy_mode mode);

struct proxy_policy *proxy_policy_ref(struct proxy_policy *p);
void proxy_policy_unref(struct proxy_policy *p); /* NULL is fine */

enum proxy_policy_mode proxy_policy_mode(const struct proxy_policy *p);
/* Number of domain keys of a custom policy (including "*"). */
size_t proxy_policy_domain_count(const struct proxy_policy *p);

/* Decide for a host name (any case, optional trailing dot, no port). A name that is
 * not a valid host name is denied. Pure; never allocates. */
void proxy_policy_match(const struct proxy_policy *p, const char *host, struct proxy_verdict *out);

/* Two verdicts from (possibly different) policies treat a connection the same way:
 * same kind and, for intercept, the same header names and values and plain_http. */
bool proxy_verdict_same(const struct proxy_verdict *a, const struct proxy_verdict *b);

const char *proxy_verdict_name(enum proxy_verdict_kind k); /* "deny" "pass" "intercept" */

/*
 * Normalize a host name: lowercase, one trailing dot removed, a ":port" suffix
 * removed when allow_port, then checked: labels of [a-z0-9_-] (1..63 bytes each),
 * 1..253 bytes in all. IPv4 literals pass (digits and dots); IPv6 literals do not.
 * out needs PROXY_HOST_MAX + 1 bytes. 0 or -EINVAL.
 */
int proxy_host_normalize(const char *in, size_t n, bool allow_port, char *out);

/* RFC 9110 token (header field name). */
bool proxy_header_name_valid(const char *s, size_t n);

#endif
