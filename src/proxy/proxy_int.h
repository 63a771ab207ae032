/*
 * proxy_int.h - what proxy.c (engine, sandboxes, listeners, DNS) and conn.c
 * (one proxied TCP connection) share. Not for use outside src/proxy.
 */
#ifndef REBUNO_PROXY_PROXY_INT_H
#define REBUNO_PROXY_PROXY_INT_H

#include "proxy/ca.h"
#include "proxy/proxy.h"
#include "proxy/worker.h"

#include <event2/listener.h>
#include <openssl/ssl.h>
#include <stdint.h>

struct proxy_conn;

struct proxy_override {
    char host[PROXY_HOST_MAX + 1];
    uint16_t port; /* original destination port it applies to; 0 = any */
    struct sockaddr_storage addr;
    socklen_t len;
};

struct proxy_listener {
    struct proxy *px;
    struct proxy_sandbox *sbx; /* NULL: by source address */
    enum proxy_role role;
    struct evconnlistener *lev; /* TCP roles */
    int udp_fd;                 /* DNS */
    struct event *udp_ev;
    struct event *resume_ev; /* accept back-off */
    struct proxy_listener *next;
};

struct proxy_source {
    struct sockaddr_storage addr;
    socklen_t len;
    struct proxy_sandbox *sbx;
};

/* A leaf certificate for one host, ready (ctx) or being minted (job). */
struct proxy_leaf {
    struct proxy_sandbox *sbx;
    char host[PROXY_HOST_MAX + 1];
    SSL_CTX *ctx;          /* server context with the leaf and its key; NULL while minting */
    int64_t expires_ms;    /* monotonic; re-mint after this */
    struct proxy_job *job; /* pending mint */
    struct proxy_conn *waiters;
    uint64_t last_used;
};

#define PROXY_LEAF_CACHE 256
#define PROXY_SESSION_CACHE 256

/* The last TLS session ticket an upstream gave us, per host: resuming skips the
 * server's signature and our chain verification on the next connection. */
struct proxy_session {
    char host[PROXY_HOST_MAX + 1];
    SSL_SESSION *sess;
    uint64_t last_used;
};

struct proxy_sandbox {
    struct proxy *px;
    char id[64];
    struct proxy_policy *policy;
    uint64_t generation;
    struct proxy_ca *ca;
    struct proxy_dns_config dns;
    struct proxy_stats st;
    struct proxy_conn *conns;
    int nconns;
    struct proxy_leaf *leaves[PROXY_LEAF_CACHE];
    size_t nleaves;
    uint64_t use_clock;
    struct proxy_sandbox *prev, *next;
};

struct proxy {
    struct event_base *base;
    struct proxy_config cfg;
    SSL_CTX *up_ctx;
    struct proxy_session sessions[PROXY_SESSION_CACHE];
    size_t nsessions;
    uint64_t session_clock;
    struct proxy_worker *signer;   /* 1 thread: leaf minting */
    struct proxy_worker *resolver; /* getaddrinfo */
    struct proxy_override *ov;
    size_t nov;
    struct proxy_listener *listeners;
    struct proxy_source *src;
    size_t nsrc;
    struct proxy_sandbox *sandboxes;
    int nconns;
    int nholders; /* sandboxes with at least one connection (fair shares) */
    uint64_t next_conn_id;
    struct proxy_stats st; /* engine-level counters (unknown sources, global limit) */
};

/* conn.c */
void proxy_conn_accept(struct proxy_listener *l, evutil_socket_t fd, const struct sockaddr *peer,
                       int peerlen);
/* The sandbox's policy changed: keep, update or reset this connection. */
void proxy_conn_policy_changed(struct proxy_conn *c);
/* Reset the connection now (sandbox or engine going away). */
void proxy_conn_abort(struct proxy_conn *c);
struct proxy_conn *proxy_conn_next(const struct proxy_conn *c);
/* The upstream context's new-session callback (TLS 1.3 tickets arrive after the
 * handshake): files the session under the connection's host. */
int proxy_conn_new_session(SSL *ssl, SSL_SESSION *sess);
/* A leaf finished minting (ctx NULL = failed): continue or reset each waiter. */
void proxy_leaf_ready(struct proxy_leaf *leaf);

/* proxy.c */
/* The override for host and original port (an exact port beats "any"), or NULL. */
const struct proxy_override *proxy_find_override(const struct proxy *p, const char *host,
                                                 uint16_t port);
/* The sandbox a peer address belongs to (proxy_sandbox_add_source), or NULL. */
struct proxy_sandbox *proxy_find_source(struct proxy *px, const struct sockaddr *peer);
/* Reset a socket: SO_LINGER 0 then close, so the peer gets RST. */
void proxy_rst_fd(evutil_socket_t fd);
/* Find or start a leaf for host; NULL only when the cache is full of pending ones. */
struct proxy_leaf *proxy_leaf_get(struct proxy_sandbox *s, const char *host);
int64_t proxy_now_ms(void);
/* Upstream TLS session cache (loop thread). get: borrowed, may be NULL. */
SSL_SESSION *proxy_session_get(struct proxy *p, const char *host);
void proxy_session_put(struct proxy *p, const char *host, SSL_SESSION *sess); /* takes it */

#endif
