/*
 * proxy.h - the sandbox egress proxy: transparent TCP 80/443 and DNS, on a
 * caller's libevent loop.
 *
 * One engine (struct proxy) per event loop; one context (struct proxy_sandbox)
 * per sandbox, holding its policy, its CA and its counters. Connections reach a
 * sandbox's context either through a listener bound to it (one port per sandbox,
 * and the standalone/test mode) or through a shared listener that maps the peer's
 * address (the sandbox's veth address) to its context.
 *
 *   443: read the ClientHello (not consumed), take the SNI, match the policy.
 *        deny / no SNI / not TLS -> TCP reset, nothing sent.
 *        pass      -> connect upstream, splice both ways untouched (end-to-end TLS).
 *        intercept -> verify the real upstream first (TLS, system trust + extra CA,
 *                     host name = SNI), then answer the client's handshake with a leaf
 *                     minted for the SNI by the sandbox's CA, offering only http/1.1;
 *                     rewrite each request (http_rw.h): Host must be the SNI, the
 *                     policy's headers are set or replaced; responses stream back.
 *    80: parse the request head; Host decides as above (deny -> reset); every request
 *        on the connection must keep that Host; a host with header rules gets them only
 *        when its rule says "plain_http": true, and is refused (403) otherwise.
 *   DNS: only allowed names resolve, to the proxy's address (dns.h).
 *
 * The upstream is always found from the name (SNI / Host), never from the address
 * the sandbox dialled: overrides first (host -> address:port), else an asynchronous
 * lookup whose loopback, private, link-local and multicast results are refused
 * unless allowed in the config. In transparent mode the original destination port
 * (SO_ORIGINAL_DST) picks 80 or 443 handling; any other port is reset.
 *
 * Live policy: proxy_sandbox_set_policy() swaps the policy; connections whose host
 * is now denied, or whose TLS handling would change (pass <-> intercept), are reset
 * at once; intercepted and port-80 connections use the new headers from their next
 * request on. New connections follow the new policy.
 *
 * Everything runs on the loop thread except certificate signing (ca.h). Header
 * values are never logged. Freeing the engine closes every connection.
 */
#ifndef REBUNO_PROXY_PROXY_H
#define REBUNO_PROXY_PROXY_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/err.h"
#include "proxy/dns.h"
#include "proxy/policy.h"

struct proxy;
struct proxy_sandbox;

struct proxy_config {
    int max_conns;                /* all sandboxes; default 4096. When full, a sandbox below
                                     its fair share (max_conns / sandboxes holding
                                     connections) takes the slot of the quietest
                                     connection of the sandbox holding the most */
    int max_conns_per_sandbox;    /* default 1024 */
    int handshake_timeout_ms;     /* accept -> relaying (sniff, lookup, connect, TLS); 10000 */
    int idle_timeout_ms;          /* no byte either way; default 300000 */
    size_t buffer_max;            /* bytes queued per direction before reading pauses; 256 KiB */
    bool allow_private_upstreams; /* let names resolve to private/loopback addresses */
    const char *upstream_ca_file; /* extra PEM trust for upstream verification (optional) */
    bool no_system_trust;         /* trust only upstream_ca_file (tests); default: system + file */
    int leaf_valid_hours;         /* minted leaves; default 24 */
    bool no_splice;               /* passthrough through buffers instead of splice(2) */
};

enum proxy_role {
    PROXY_ROLE_HTTP,        /* connections arriving here were meant for port 80 */
    PROXY_ROLE_TLS,         /* ... for port 443 */
    PROXY_ROLE_TRANSPARENT, /* redirected: SO_ORIGINAL_DST port says 80 or 443 */
    PROXY_ROLE_DNS,         /* UDP DNS */
};

struct proxy_stats {
    uint64_t accepted;          /* TCP connections accepted */
    uint64_t active;            /* open now */
    uint64_t denied;            /* reset: host denied by policy */
    uint64_t refused;           /* reset: no SNI, not TLS, bad first request, other port */
    uint64_t passthrough;       /* spliced untouched */
    uint64_t intercepted;       /* TLS terminated (header rules) */
    uint64_t plain_http;        /* port-80 connections relayed */
    uint64_t requests;          /* HTTP requests forwarded (80 and intercepted) */
    uint64_t injected;          /* ... of which had headers set */
    uint64_t forwarded;         /* ... of which went to a rule's forwardURL */
    uint64_t responded;         /* requests a response rule answered (no upstream) */
    uint64_t host_mismatch;     /* 421: Host other than the SNI / first Host */
    uint64_t upstream_failed;   /* lookup, connect or refused address */
    uint64_t verify_failed;     /* upstream TLS handshake / certificate check failed */
    uint64_t client_tls_failed; /* the sandbox's handshake with the minted leaf failed */
    uint64_t policy_closed;     /* closed by a live policy change */
    uint64_t timeouts;          /* handshake or idle timeouts */
    uint64_t limit_rejected;    /* reset: connection limits, unknown source */
    uint64_t evicted;           /* reset: quietest connection, to give another sandbox its share */
    uint64_t leaves_minted;
    uint64_t bytes_up, bytes_down; /* application bytes relayed (plaintext when intercepted) */
    uint64_t dns_queries, dns_answered, dns_nxdomain;
};

/* cfg may be NULL (defaults). */
struct proxy *proxy_new(struct event_base *base, const struct proxy_config *cfg, struct err *err);
/* Closes every connection, frees every sandbox context and listener. */
void proxy_free(struct proxy *p);

/* Upstream override: connections for `host` go to addr ("127.0.0.1:8443",
 * "[::1]:8443"), exempt from the private-address check. `host` may end in ":80" or
 * ":443" to apply to that original port only (it then wins over a plain `host`).
 * Replaces an earlier override for the same host and port. */
int proxy_add_override(struct proxy *p, const char *host, const char *addr, struct err *err);

/* Listen on "host:port" (port 0 picks one). s NULL = the sandbox is found by the
 * peer's address (proxy_sandbox_add_source). Returns the bound port, or -1. */
int proxy_listen(struct proxy *p, enum proxy_role role, const char *addr, struct proxy_sandbox *s,
                 struct err *err);

/* A sandbox context: a new CA (valid ca_valid_hours; 0 = 168) and the policy (a
 * reference is taken). id names it in logs and in the CA's subject. */
struct proxy_sandbox *proxy_sandbox_new(struct proxy *p, const char *id,
                                        struct proxy_policy *policy, int ca_valid_hours,
                                        struct err *err);
/* Resets its connections, closes its listeners, drops its CA. */
void proxy_sandbox_free(struct proxy_sandbox *s);
/* Replace the policy (a reference is taken) and apply it to open connections. */
void proxy_sandbox_set_policy(struct proxy_sandbox *s, struct proxy_policy *policy);
/* Borrowed. */
struct proxy_policy *proxy_sandbox_policy(const struct proxy_sandbox *s);
uint64_t proxy_sandbox_generation(const struct proxy_sandbox *s);
/* The address answered for allowed names. */
void proxy_sandbox_set_dns(struct proxy_sandbox *s, const struct proxy_dns_config *cfg);
/* Connections and DNS queries from this address belong to s. */
int proxy_sandbox_add_source(struct proxy_sandbox *s, const struct sockaddr *addr, socklen_t len);
/* The CA certificate (public part only) as PEM for the sandbox's trust store. */
int proxy_sandbox_write_ca(const struct proxy_sandbox *s, const char *path, struct err *err);
char *proxy_sandbox_ca_pem(const struct proxy_sandbox *s); /* caller frees */
void proxy_sandbox_stats(const struct proxy_sandbox *s, struct proxy_stats *out);

/* Sums over all sandboxes plus engine-level counters. */
void proxy_stats(const struct proxy *p, struct proxy_stats *out);

#endif
