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
 * A domain's rules are an ordered list. Each rule has an optional "match" and one action:
 *
 *   {"transform": [{"headers": {...}}]}   set these headers on the request
 *   {"forwardURL": "https://proxy.example/prefix"}
 *                                         send the request there instead (see below)
 *   {"response": {"statusCode": 403, "headers": {...}, "body": "...", "contentType": "..."}}
 *                                         answer it here; no upstream is contacted
 *
 * "match" (Vercel's L7 matcher): {"path": M, "method": ["GET", ...], "queryString": [KV],
 * "headers": [KV]} where M is {"exact": s} or {"startsWith": s} ("regex" is refused: no
 * RE2 here) and KV is {"key": M?, "value": M?}. Every dimension given must match; the
 * methods are ORed (any case), the KV lists ANDed, and a KV matches when one entry has
 * both its key and value matching. The path is the request target's path as sent (no
 * query, not decoded); query keys and values are compared decoded (%XX, '+'); header
 * names compare in any case, values exactly after trimming whitespace. No "match" =
 * every request.
 *
 * Per request: the headers of every matching transform rule are set (a later rule wins
 * a header name, as when rules merge); the first matching forward or response rule
 * decides where the request goes; a request that no forward/response rule matches goes
 * to the host it named, with the matched transforms (none: unchanged).
 *
 * forwardURL: http or https, no user info, query or fragment. The request keeps its
 * method, headers and body; its target becomes the URL's path (trailing '/' removed)
 * followed by the original path and query ("https://p.example/fwd" + "/a?b" = "/fwd/a?b"),
 * Host becomes the URL's authority, and the original request is described the way
 * Vercel's defineSandboxProxy reads it: vercel-forwarded-host, -scheme, -port and -path
 * (path and query); copies of those the sandbox sent are dropped. The forwarding server
 * must be reachable and (https) present a certificate the proxy trusts.
 *
 * A rule may also say "plain_http": true: its headers are then set on plain HTTP
 * (port 80) requests too. Without it they are set only inside TLS, and a port-80
 * request that would get them is refused, so a credential never crosses the network in
 * cleartext unless the policy asks for it by name.
 *
 * A host is matched exactly first, then against the longest "*.suffix" wildcard
 * (subdomains at any depth, never the apex itself), then "*" (any host, no rules).
 * Matching is case-insensitive and ignores one trailing dot. The result is one of
 *   deny       - refuse the connection (TCP reset before any byte is sent)
 *   pass       - allowed, no rules that act: bytes pass untouched (end-to-end TLS)
 *   intercept  - allowed with rules: terminate TLS, evaluate the rules per request
 * "*" may not carry rules (a credential for every host is never what anyone means).
 *
 * Address ranges (Vercel's `subnets`, E2B's allowOut/denyOut addresses) ride beside the
 * domains in the wrapped form:
 *   {"allow": {...} | [...], "subnets": {"allow": ["10.0.0.0/8", "1.2.3.4"],
 *                                        "deny": ["10.1.0.0/16"], "precedence": "deny"}}
 * IPv4 only (sandboxes have no IPv6), at most PROXY_POLICY_MAX_SUBNETS per list, no
 * host bits set ("10.1.2.3/8" is refused). They apply to the address the proxy
 * connects to, after it resolved the name itself, or, for a name no domain allows, the
 * address the sandbox dialled (never a lookup of that name) (proxy_policy_match_addr):
 *   precedence "deny" (default, Vercel): an address in subnets.deny is refused, whatever
 *       allowed its name; one in subnets.allow is allowed even when its name is not.
 *   precedence "allow" (E2B: allowOut wins over denyOut): a name allowed by an exact or
 *       wildcard domain key, or an address in subnets.allow, is allowed even when
 *       subnets.deny covers the address; otherwise subnets.deny refuses it ("*" does not
 *       shield an address from subnets.deny).
 * The proxy's own refusal of private, loopback and link-local upstreams stays in force
 * whatever subnets.allow says.
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
#include <stdint.h>
#include <sys/socket.h>

#include "base/err.h"

/* Hard limits on a policy. */
#define PROXY_POLICY_MAX_BYTES (1024 * 1024)
#define PROXY_POLICY_MAX_DOMAINS 4096
#define PROXY_POLICY_MAX_RULES 32         /* rules per domain, transforms per rule */
#define PROXY_POLICY_MAX_HEADERS 64       /* headers set for one domain (after merging) */
#define PROXY_POLICY_MAX_HNAME 256        /* header name bytes */
#define PROXY_POLICY_MAX_HVALUE 8192      /* header value bytes */
#define PROXY_HOST_MAX 253                /* a DNS name without the trailing dot */
#define PROXY_POLICY_MAX_MATCHERS 16      /* methods, query or header matchers of one rule */
#define PROXY_POLICY_MAX_MATCH 1024       /* bytes of one matcher's string */
#define PROXY_POLICY_MAX_URL 2048         /* bytes of a forwardURL */
#define PROXY_POLICY_MAX_BODY (64 * 1024) /* a response rule's body */
#define PROXY_POLICY_MAX_SUBNETS 256   /* ranges in subnets.allow, and in subnets.deny */

enum proxy_policy_mode { PROXY_POLICY_ALLOW_ALL, PROXY_POLICY_DENY_ALL, PROXY_POLICY_CUSTOM };
enum proxy_verdict_kind { PROXY_DENY, PROXY_PASS, PROXY_INTERCEPT };
enum proxy_action_kind { PROXY_ACT_UPSTREAM, PROXY_ACT_FORWARD, PROXY_ACT_RESPOND };

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

/* Where a forward rule sends a request. */
struct proxy_forward {
    bool tls;                      /* https */
    char host[PROXY_HOST_MAX + 1]; /* normalized */
    uint16_t port;
    char *path; /* prefix without trailing '/' ("" for none) */
    size_t path_len;
    char *url; /* as written (not secret) */
};

/* What a response rule answers. */
struct proxy_response {
    int status;
    char *content_type; /* NULL: none */
    struct proxy_headers headers;
    char *body;
    size_t body_len;
};

struct proxy_domain;

struct proxy_verdict {
    enum proxy_verdict_kind kind;
    const struct proxy_headers *headers; /* PROXY_INTERCEPT only: the headers of the rules
                                            without "match"; owned by the policy */
    const char *rule;                    /* the matching key ("github.com", "*.x.com", "*",
                                            "allow-all"), owned by the policy; "" on deny */
    bool plain_http;                     /* PROXY_INTERCEPT: the headers may go over port 80 */
    bool routes;                         /* some rule forwards or answers: the upstream is
                                            chosen per request (none at all for answers) */
    const struct proxy_domain *domain;   /* for proxy_policy_eval; NULL unless intercept */
};

/* One request as the per-request rules see it (all borrowed). */
struct proxy_req_header {
    const char *name, *value;
    size_t name_len, value_len;
};
struct proxy_request {
    const char *method;
    const char *path; /* the target's path, without the query ("/" for "*" or none) */
    size_t path_len;
    const char *query; /* after '?', without a fragment; NULL for none */
    size_t query_len;
    const struct proxy_req_header *h;
    size_t nh;
};

/* The outcome for one request. */
struct proxy_action {
    enum proxy_action_kind kind;
    struct proxy_headers headers;          /* to set; v is the caller's scratch */
    bool plain_http;                       /* every header set may go over port 80 */
    const struct proxy_forward *forward;   /* PROXY_ACT_FORWARD; owned by the policy */
    const struct proxy_response *response; /* PROXY_ACT_RESPOND; owned by the policy */
    int rule;                              /* the deciding rule's index; -1: none */
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

/* The verdict for a connection to address sa (the address actually connected to) of
 * a host whose name verdict is *name (from proxy_policy_match on the same policy):
 * *name itself, or a deny (rule "subnets.deny", or "" when nothing allowed it), or a
 * pass (rule "subnets.allow") for a name denied but an address allowed. IPv4-mapped
 * IPv6 addresses count as IPv4; other IPv6 addresses are denied when the policy has
 * ranges (they could not be judged). Pure. */
void proxy_policy_match_addr(const struct proxy_policy *p, const struct proxy_verdict *name,
                             const struct sockaddr *sa, struct proxy_verdict *out);
/* The policy has address ranges (subnets.allow or subnets.deny): the address decides
 * too, after resolution. */
bool proxy_policy_has_subnets(const struct proxy_policy *p);
/* A name the domains deny may still be allowed by its address (subnets.allow is not
 * empty): resolve before refusing. */
bool proxy_policy_subnets_allow(const struct proxy_policy *p);
/* Parse "a.b.c.d" or "a.b.c.d/n" (0..32, no host bits) into host-order net and mask.
 * 0, -EINVAL (not IPv4 CIDR), -EAFNOSUPPORT (IPv6), -EDOM (host bits set). */
int proxy_cidr_parse(const char *s, uint32_t *net, uint32_t *mask);

/* Evaluate an intercept verdict's rules for one request (see the top of this file).
 * scratch holds PROXY_POLICY_MAX_HEADERS entries (shallow copies; the names and values
 * stay the policy's). Pure; valid while the policy is. */
void proxy_policy_eval(const struct proxy_verdict *v, const struct proxy_request *rq,
                       struct proxy_header *scratch, struct proxy_action *out);

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
