/*
 * http.h - the thin HTTP/1.1 server layer every rebuno daemon shares.
 *
 * Built on libevent (bufferevents, one event loop thread) and http-parser (strict
 * request parsing). It does routing with path parameters, JSON bodies with hard
 * size caps, one JSON error shape, keep-alive (one request at a time per
 * connection; pipelined requests wait their turn), deferred replies (long-poll),
 * Server-Sent Events, protocol upgrades (101, for WebSocket), graceful shutdown, and the
 * connection limits a slowloris client meets (struct http_config).
 *
 * Ownership: the server owns every struct http_req. A handler either replies
 * before returning, or keeps the pointer and replies later (long-poll, SSE). A
 * kept request stays valid until the reply is finished or until the close
 * callback set with http_req_on_close() has run, whichever comes first; after
 * that the pointer must not be used. Everything runs on the loop thread.
 *
 * Errors are rendered as  {"error":{"code":"...","message":"...","field":"..."}}
 * ("field" omitted when empty), or with flat_errors as {"code":"...","message":"...",
 * "details":{"field":"..."}} ("details" omitted when there is no field).
 */
#ifndef REBUNO_NET_HTTP_H
#define REBUNO_NET_HTTP_H

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct http_server;
struct http_req;

/*
 * Limits of one server; a zero field takes its default. Deadlines never restart per
 * byte: a request head is due header_timeout_sec after it began (its first byte, or
 * the accept for a new connection), a body body_timeout_sec after the head plus one
 * second per body_min_rate bytes received, so a body averaging at least that rate is
 * never cut. A late head or body gets 408 and the connection closes. Once a request
 * is complete its handler owns the time (long-polls, SSE, upgrades are not cut). When
 * the table or a peer's share is full, a new connection sheds the one that has waited
 * longest for a request (idle keep-alive or stuck head, bodies last; never one being
 * served); with nothing to shed it is closed.
 */
struct http_config {
    size_t max_body;          /* request body cap (413 above it); default 1 MiB */
    size_t max_header_bytes;  /* all header bytes of one request; default 64 KiB */
    int idle_timeout_sec;     /* keep-alive between requests, and a reply that makes no
                                 progress; default 60 */
    int header_timeout_sec;   /* a whole request head; default 10 */
    int body_timeout_sec;     /* a request body's grace; default 10 */
    int body_min_rate;        /* bytes/s a body must average after its grace; default 1024 */
    int max_connections;      /* open connections; default 4096 */
    int max_per_peer;         /* open connections per client address (IPv6: per /64);
                                 default min(1024, max_connections) */
    bool flat_errors;         /* {code, message, details} at the top level (see above) */
};

typedef void (*http_handler_fn)(struct http_req *req, void *arg);
typedef void (*http_close_fn)(struct http_req *req, void *arg);

/* cfg may be NULL for defaults. */
struct http_server *http_server_new(struct event_base *base, const struct http_config *cfg);
/* Stops accepting, closes idle connections, ends SSE streams and long-polls with their
 * close callbacks, and frees the server once in-flight replies are written (or after
 * timeout_ms). Safe to call once. */
void http_server_shutdown(struct http_server *s, int timeout_ms);
void http_server_free(struct http_server *s);

/* Listen on "host:port" ("127.0.0.1:8080", "[::1]:0", "0.0.0.0:9000"). Port 0 picks one;
 * the bound port is returned by http_server_port(). May be called more than once. */
int http_server_listen(struct http_server *s, const char *addr, struct err *err);
int http_server_port(const struct http_server *s);
/* Number of open connections (for tests and shutdown). */
int http_server_connections(const struct http_server *s);

/* Register a route. method "GET"/"POST"/... ; pattern like "/v0/executions/:id/steps/:step".
 * Segments starting with ':' capture one path segment (percent-decoded, must be non-empty).
 * First registered match wins. Unknown path -> 404 not_found; known path with another
 * method -> 405 method_not_allowed with an Allow header. */
void http_route(struct http_server *s, const char *method, const char *pattern,
                http_handler_fn fn, void *arg);
/* Called for every request before routing; may reply (e.g. 401) and return false to stop. */
typedef bool (*http_filter_fn)(struct http_req *req, void *arg);
void http_set_filter(struct http_server *s, http_filter_fn fn, void *arg);

/* Let pages of these origins ("http://127.0.0.1:8080", exact match) call this server from
 * a browser (CORS): their requests get Access-Control-Allow-Origin, and their preflights
 * are answered 204 before the filter runs. Other origins get no CORS headers. Copies. */
void http_set_cors_origins(struct http_server *s, const char *const *origins, size_t n);

/* --- request accessors (valid while the request is) --- */
const char *http_req_method(const struct http_req *r);
const char *http_req_path(const struct http_req *r);      /* decoded path without query */
const char *http_req_target(const struct http_req *r);    /* the request target as sent (path?query) */
const char *http_req_param(const struct http_req *r, const char *name); /* ":name" capture */
/* Decoded query parameter, NULL if absent. Repeated keys: the first one. */
const char *http_req_query(const struct http_req *r, const char *name);
/* The i-th decoded query parameter in request order (i from 0), for checking the keys a
 * route accepts. Returns false when there is no i-th parameter. */
bool http_req_query_at(const struct http_req *r, size_t i, const char **key, const char **value);
/* Case-insensitive header lookup, NULL if absent. */
const char *http_req_header(const struct http_req *r, const char *name);
/* The i-th request header (from 0) as received, for headers named by a prefix. */
bool http_req_header_at(const struct http_req *r, size_t i, const char **name,
                        const char **value);
const char *http_req_body(const struct http_req *r, size_t *len);
/* Peer address as text ("127.0.0.1"), and whether it is a loopback address. */
const char *http_req_peer(const struct http_req *r);
bool http_req_peer_is_loopback(const struct http_req *r);
/* Short per-request id for logs ("r1f3a"). */
const char *http_req_id(const struct http_req *r);

/* Parse the body as one JSON value (jansson, duplicate keys rejected). An empty body is an
 * error unless allow_empty (then returns a new empty object). On error fills err with
 * 400 validation_error naming what is wrong and returns NULL. Caller owns the result. */
json_t *http_req_json(struct http_req *r, bool allow_empty, struct err *err);

/* Per-request user data, for handlers that defer. */
void http_req_set_data(struct http_req *r, void *data);
void *http_req_data(const struct http_req *r);
/* Called once if the client disconnects or the server shuts down before the reply is
 * finished. Not called after a normal finished reply. */
void http_req_on_close(struct http_req *r, http_close_fn fn, void *arg);

/* --- replies (exactly one per request) --- */
/* Add a response header before replying. */
void http_add_header(struct http_req *r, const char *name, const char *value);
/* body may be NULL (no body). Takes a reference-stealing json_t; frees it. */
void http_reply_json(struct http_req *r, int status, json_t *body);
void http_reply_raw(struct http_req *r, int status, const char *content_type, const void *body,
                    size_t len);
void http_reply_error(struct http_req *r, int status, const char *code, const char *field,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void http_reply_err(struct http_req *r, const struct err *e);

/* --- Server-Sent Events --- */
/* Send 200 with text/event-stream, no-cache, X-Accel-Buffering: no. */
void http_sse_start(struct http_req *r);
/* One event; id and event may be NULL. data may contain newlines (split into data: lines).
 * Returns 0, or -EAGAIN when the client's unsent output exceeds the back-pressure limit
 * (256 KiB) - the event was NOT queued; call again after the drain callback. */
int http_sse_send(struct http_req *r, const char *id, const char *event, const char *data);
/* Comment line (": keep-alive"). */
void http_sse_comment(struct http_req *r, const char *text);
/* Called when output drops below the back-pressure limit again. */
void http_sse_on_drain(struct http_req *r, http_close_fn fn, void *arg);
/* Finish the stream; the connection is closed after the data is flushed. */
void http_sse_end(struct http_req *r);

/* --- raw streams (NDJSON): like SSE, but the caller frames the bytes --- */
/* Send 200 with this Content-Type (exactly), no length: chunked to a keep-alive HTTP/1.1
 * client (the connection then serves its next request after http_sse_end), else the body
 * ends when the connection does. Then http_stream_write, http_sse_on_drain and
 * http_sse_end as for SSE. */
void http_stream_start(struct http_req *r, const char *content_type);
/* Queue bytes: 0, or -EAGAIN past the back-pressure limit (nothing queued; wait for the
 * drain callback), -EPIPE when the client is gone. */
int http_stream_write(struct http_req *r, const void *data, size_t len);

/* --- protocol upgrade (101 Switching Protocols) --- */
struct bufferevent;
/*
 * Receives an upgraded connection. bev is the connection's bufferevent, now the
 * callee's to own and free (bufferevent_free closes the socket): its output holds
 * the 101 reply (maybe not yet flushed), its input any bytes the client sent after
 * the request; callbacks, timeouts and watermarks are cleared and reading is
 * disabled. bev is NULL when the connection failed or the server shut down before
 * the hand-over; then the callee only cleans up.
 */
typedef void (*http_upgrade_fn)(struct bufferevent *bev, void *arg);
/*
 * Answer r with "101 Switching Protocols", "Upgrade: <protocol>", "Connection: Upgrade"
 * and the headers added with http_add_header(), then hand the connection over: fn is
 * called exactly once, after the handler returned (or soon, for a kept request), and
 * the server forgets the connection (it no longer counts it, times it out or closes it
 * at shutdown). The request is finished by this call. protocol is a header value such
 * as "websocket". Returns 0 (fn will run), -EPIPE when the client is already gone, or
 * -ESHUTDOWN when the server is shutting down (then r was answered 503); fn is not
 * called in either case. The caller checks the request's own headers first.
 */
int http_upgrade(struct http_req *r, const char *protocol, http_upgrade_fn fn, void *arg);

#endif
