/*
 * http_rw.h - the request side of an HTTP/1.1 connection the proxy reads: check
 * the client's requests, let the proxy decide each one by its Host, set the
 * policy's headers, and write a normalized request stream for the upstream; and
 * follow the upstream's responses just far enough to know when a protocol switch
 * really happened.
 *
 * Request bytes in, request bytes out. Every request head is first checked byte by
 * byte against RFC 9112 (a strict scanner of our own: Debian's http-parser is built
 * lenient), then parsed (http-parser) and re-serialized: a client header whose name
 * matches a configured header (any case) is removed, and the configured value is
 * appended once, so a credential is set or overwritten, never duplicated. Bodies are
 * streamed, never buffered: Content-Length bodies pass as they are, chunked bodies
 * are re-framed from the parsed chunks (trailers are dropped), so what the upstream
 * receives is exactly what the proxy understood. Heads are capped
 * (PROXY_HTTP_MAX_HEAD bytes, PROXY_HTTP_MAX_HEADERS lines); bodies are not.
 *
 * Refused with 400 before any byte of the request is written out: a head that is
 * not strictly well-formed (whitespace before a colon, a field name that is not a
 * token, obs-fold, a bare CR or LF, NUL or another control character, a non-ASCII
 * request line), a missing or repeated Host, a request-target authority other than
 * Host, more than one Content-Length or Transfer-Encoding, both of them, a
 * Content-Length that is not digits, a Transfer-Encoding other than exactly
 * "chunked", an Upgrade to anything but WebSocket. 405: CONNECT, and TRACE to a host
 * that gets headers set (the upstream would echo them back). And whatever the
 * decide callback refuses (e.g. a Host other than the TLS server name: 421).
 *
 * Per-request routing (policy.h): a request the policy answers is read to its end and
 * not forwarded; its response is appended to the local output (proxy_http_set_local)
 * when its body has been read (a "100 Continue" first when it sent Expect:
 * 100-continue with a body). A forwarded request is re-targeted: the forward URL's
 * path prefix before the original path and query, Host set to the forward URL's
 * authority, vercel-forwarded-{host,scheme,port,path} added (the sandbox's own copies,
 * and vercel-sandbox-oidc-token, dropped). In serial mode (proxy_http_set_serial, for
 * connections whose upstream changes per request) the rewriter takes no more bytes
 * after a forwarded request until that request's response has ended, so the proxy may
 * switch upstreams between requests and local answers are never out of order.
 *
 * Responses are not rewritten: they flow back untouched. They are parsed for their
 * framing only (proxy_http_response), which is what lets the rewriter honour an
 * Upgrade: after an Upgrade request it takes no more client bytes (feed answers
 * PROXY_HTTP_WAIT) until the upstream's response to that very request is known;
 * a 101 turns both directions opaque (PROXY_HTTP_RESP_RAW), anything else resumes
 * HTTP (PROXY_HTTP_RESP_RESUME). The same wait bounds pipelining to
 * PROXY_HTTP_MAX_PIPELINE requests without a response.
 */
#ifndef REBUNO_PROXY_HTTP_RW_H
#define REBUNO_PROXY_HTTP_RW_H

#include <event2/buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define PROXY_HTTP_MAX_HEAD (64 * 1024)
#define PROXY_HTTP_MAX_HEADERS 256
#define PROXY_HTTP_MAX_PIPELINE 64 /* requests forwarded and not yet answered */

/* decide() results besides 0 (go on) and an HTTP status (refuse with that status). */
#define PROXY_HTTP_DENIED (-1) /* refuse without any response: reset the connection */

/*
 * Called once per request head with the normalized Host (port removed) and the
 * request as the policy's per-request rules see it. Return 0 with *act filled
 * (proxy_policy_eval's outcome: the headers to set, and whether to forward the request
 * elsewhere or answer it here), PROXY_HTTP_DENIED, or a 4xx/5xx status to refuse, with
 * *why a static reason for the response body and the log (never a header value; NULL
 * for a default). act arrives as "upstream, no headers"; what it points to must stay
 * valid until the next call or free.
 */
typedef int (*proxy_http_decide_fn)(void *arg, const char *host, const struct proxy_request *rq,
                                    struct proxy_action *act, const char **why);

enum proxy_http_status {
    PROXY_HTTP_OK,    /* all input consumed */
    PROXY_HTTP_WAIT,  /* *consumed bytes were taken; keep the rest and feed it again after
                         proxy_http_response() says RESUME (or go raw on RAW) */
    PROXY_HTTP_ERROR, /* refused: proxy_http_error() says how; nothing more may be fed */
};

enum proxy_http_resp {
    PROXY_HTTP_RESP_NONE,   /* nothing changed for the request side */
    PROXY_HTTP_RESP_RESUME, /* the wait is over: feed the kept bytes */
    PROXY_HTTP_RESP_RAW,    /* 101 to the Upgrade request: both directions are opaque now */
};

struct proxy_http;

struct proxy_http *proxy_http_new(proxy_http_decide_fn decide, void *arg);
void proxy_http_free(struct proxy_http *h);

/* Where the client's requests were sent (for vercel-forwarded-scheme/-port): TLS or
 * not, and the original port. Default: plain, 80. */
void proxy_http_set_origin(struct proxy_http *h, bool tls, uint16_t port);
/* Where local answers go (the client's plaintext queue). Needed before a policy can
 * answer a request. */
void proxy_http_set_local(struct proxy_http *h, struct evbuffer *local);
/* One request at a time: see above. */
void proxy_http_set_serial(struct proxy_http *h, bool on);
/* An answered request asked to close (Connection: close, HTTP/1.0 without keep-alive):
 * its answer is in the local output, nothing more is taken; close after sending it. */
bool proxy_http_closing(const struct proxy_http *h);
/* Every forwarded request's response has ended (serial mode; the upstream may go). */
bool proxy_http_idle(const struct proxy_http *h);
/* A new upstream connection follows: start its response parsing afresh. Only when
 * every response before the request just read has ended. */
void proxy_http_upstream_reset(struct proxy_http *h);

/* Parse data[0..len), appending the rewritten stream to out. */
enum proxy_http_status proxy_http_feed(struct proxy_http *h, const char *data, size_t len,
                                       struct evbuffer *out, size_t *consumed);
/* True between PROXY_HTTP_WAIT and the RESUME or RAW that ends it. */
bool proxy_http_waiting(const struct proxy_http *h);

/* The upstream's bytes, in order, as they are relayed back (len 0: the upstream
 * finished; in serial mode an upstream that ends after complete responses is fine,
 * see proxy_http_idle). Never fails: responses it cannot follow only end its tracking (a
 * later Upgrade request is then refused, and a wait ends as RESUME). */
enum proxy_http_resp proxy_http_response(struct proxy_http *h, const char *data, size_t len);

/* After PROXY_HTTP_ERROR: PROXY_HTTP_DENIED or a status (400, 403, 405, 421, 431, ...). */
int proxy_http_error(const struct proxy_http *h);
/* A short static reason for logs and the refusal's body (never contains header values). */
const char *proxy_http_error_reason(const struct proxy_http *h);
/* Requests whose head was forwarded, and how many of them had headers set. */
uint64_t proxy_http_requests(const struct proxy_http *h);
uint64_t proxy_http_injected(const struct proxy_http *h);
/* Requests sent to a forward URL, and requests answered by the policy. */
uint64_t proxy_http_forwarded(const struct proxy_http *h);
uint64_t proxy_http_responded(const struct proxy_http *h);

/* Write the whole response for a refusal status ("HTTP/1.1 421 Misdirected Request ...",
 * Connection: close, body "egress proxy: <reason>") into out; returns its length. reason
 * may be NULL. 512 bytes are enough. */
size_t proxy_http_status_response(int status, const char *reason, char *out, size_t outsz);

#endif
