/*
 * http_rw.h - the request side of an intercepted HTTP/1.1 connection: parse the
 * client's requests, let the proxy decide each one by its Host, set the policy's
 * headers, and write a normalized request stream for the upstream.
 *
 * Request bytes in, request bytes out. Every request head is parsed (http-parser,
 * strict) and re-serialized: a client header whose name matches a configured
 * header (any case) is removed, and the configured value is appended once, so a
 * credential is set or overwritten, never duplicated. Bodies are streamed, never
 * buffered: Content-Length bodies pass as they are, chunked bodies are re-framed
 * from the parsed chunks (trailers are dropped), so what the upstream receives is
 * exactly what the proxy understood. Heads are capped (PROXY_HTTP_MAX_HEAD bytes,
 * PROXY_HTTP_MAX_HEADERS lines); bodies are not (they are streamed).
 *
 * Responses are not parsed: they flow back untouched.
 *
 * Refused: CONNECT, a missing or repeated Host, a request-target authority that
 * differs from Host, and whatever the decide callback refuses (e.g. a Host other
 * than the TLS server name: 421). After an Upgrade request (WebSocket) the rest
 * of the stream is opaque and the caller relays it raw.
 */
#ifndef REBUNO_PROXY_HTTP_RW_H
#define REBUNO_PROXY_HTTP_RW_H

#include <event2/buffer.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define PROXY_HTTP_MAX_HEAD (64 * 1024)
#define PROXY_HTTP_MAX_HEADERS 256

/* decide() results besides 0 (go on) and an HTTP status (refuse with that status). */
#define PROXY_HTTP_DENIED (-1) /* refuse without any response: reset the connection */

/*
 * Called once per request head with the normalized Host (port removed). Return 0
 * and set *set to the headers to set (NULL for none), PROXY_HTTP_DENIED, or a 4xx
 * status to refuse. The headers must stay valid until the next call or free.
 */
typedef int (*proxy_http_decide_fn)(void *arg, const char *host, const struct proxy_headers **set);

enum proxy_http_status {
    PROXY_HTTP_OK,      /* all input consumed */
    PROXY_HTTP_UPGRADE, /* *consumed bytes were HTTP; the rest is an opaque stream */
    PROXY_HTTP_ERROR,   /* refused: proxy_http_error() says how; nothing more may be fed */
};

struct proxy_http;

struct proxy_http *proxy_http_new(proxy_http_decide_fn decide, void *arg);
void proxy_http_free(struct proxy_http *h);

/* Parse data[0..len), appending the rewritten stream to out. */
enum proxy_http_status proxy_http_feed(struct proxy_http *h, const char *data, size_t len,
                                       struct evbuffer *out, size_t *consumed);

/* After PROXY_HTTP_ERROR: PROXY_HTTP_DENIED or a status (400, 405, 421, 431, ...). */
int proxy_http_error(const struct proxy_http *h);
/* A short reason for logs (never contains header values). */
const char *proxy_http_error_reason(const struct proxy_http *h);
/* Requests whose head was forwarded, and how many of them had headers set. */
uint64_t proxy_http_requests(const struct proxy_http *h);
uint64_t proxy_http_injected(const struct proxy_http *h);
/* True while a request is partly forwarded (head sent, body not finished). */
int proxy_http_mid_request(const struct proxy_http *h);

/* Write the whole response for a refusal status ("HTTP/1.1 421 Misdirected Request ...",
 * Connection: close) into out; returns its length. 256 bytes are enough. */
size_t proxy_http_status_response(int status, char *out, size_t outsz);

#endif
