/*
 * ws.h - WebSocket (RFC 6455) on wslay, for the daemons' HTTP layer and the CLI.
 *
 * Server side: ws_server_upgrade() checks a request's handshake headers, answers
 * 101 through http_upgrade() and runs the connection on the loop as a struct
 * ws_conn: whole messages in (binary or text, each at most max_msg bytes; larger
 * ones close the connection with 1009), messages out through a queue whose size the
 * application reads with ws_pending() to apply back-pressure, ping/pong and the
 * close handshake handled here.
 *
 * Callbacks. After a successful ws_server_upgrade(), exactly one of these happens:
 * on_open(ws) and later on_close(arg), or on_close(arg) alone (the client left before
 * the hand-over). Message and drain callbacks come only between the two. Callbacks
 * run from libevent callbacks, never from inside a ws_* call the application makes.
 * In a callback the application may send, close and pause, but not ws_free(). When
 * on_close runs the connection is already freed.
 *
 * Client side (the CLI's blocking client): key generation, the accept value and a
 * check of the server's 101 reply. The client's wslay context is the caller's.
 */
#ifndef REBUNO_NET_WS_H
#define REBUNO_NET_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/http.h"

#define WS_KEY_LEN 24             /* base64 of 16 bytes */
#define WS_ACCEPT_LEN 28          /* base64 of a SHA-1 */
#define WS_CLOSE_TIMEOUT_MS 2000  /* wait this long for the peer's close frame */
#define WS_FLUSH_TIMEOUT_MS 30000 /* and this long for queued data to go before it */

struct ws_conn;

struct ws_handlers {
    void (*on_open)(struct ws_conn *ws, void *arg);
    void (*on_binary)(struct ws_conn *ws, const uint8_t *p, size_t n, void *arg);
    void (*on_text)(struct ws_conn *ws, const char *p, size_t n, void *arg);
    /* ws_pending() fell below high_water after a ws_pending() >= high_water was seen */
    void (*on_drain)(struct ws_conn *ws, void *arg);
    void (*on_close)(void *arg);
    size_t max_msg;    /* largest message accepted (default 1 MiB) */
    size_t high_water; /* ws_pending() level that counts as full (default 256 KiB) */
};

/*
 * Check r's WebSocket handshake (GET, Upgrade: websocket, Connection: upgrade,
 * Sec-WebSocket-Version: 13, a Sec-WebSocket-Key of 16 bytes) and upgrade. On a bad
 * handshake replies 400 (426 for another version) and returns -1; -1 too when the
 * client is gone or the server shuts down. h must outlive the connection.
 */
int ws_server_upgrade(struct http_req *r, const struct ws_handlers *h, void *arg);

/* Queue one message. 0, or -EPIPE when the connection is closing. */
int ws_send_binary(struct ws_conn *ws, const void *p, size_t n);
int ws_send_text(struct ws_conn *ws, const char *p, size_t n);
/* Bytes queued but not yet written to the socket. Seeing it at or above high_water
 * arms on_drain. */
size_t ws_pending(struct ws_conn *ws);
/* Stop (true) or resume (false) reading the peer's messages. */
void ws_pause_reading(struct ws_conn *ws, bool pause);
/* Send a close frame once what is queued has gone (at most WS_FLUSH_TIMEOUT_MS); the
 * connection ends when the peer answers (or WS_CLOSE_TIMEOUT_MS after the frame), then
 * on_close runs. Nothing can be sent after this. reason: at most 123 bytes. */
void ws_close(struct ws_conn *ws, uint16_t code, const char *reason);
/* Drop the connection now; no callback runs. Not from inside a callback. */
void ws_free(struct ws_conn *ws);

/* ---- handshake pieces (pure) ---- */
/* Sec-WebSocket-Accept for key: base64(SHA-1(key + GUID)). out: WS_ACCEPT_LEN + 1. */
void ws_accept_value(const char *key, char *out);
/* A random Sec-WebSocket-Key. out: WS_KEY_LEN + 1. */
void ws_client_key(char *out);
/* Whether a Sec-WebSocket-Key is base64 of exactly 16 bytes. */
bool ws_key_valid(const char *key);
/* Check a server's reply head (status line and headers up to and including the blank
 * line) to a handshake made with key: 101, Upgrade: websocket, Connection: upgrade,
 * the right Sec-WebSocket-Accept. 0, or -1 with err saying what is wrong (for a non-101
 * reply err->status is the HTTP status). */
int ws_client_check_reply(const char *head, size_t len, const char *key, struct err *err);

#endif
