/*
 * webhook.h - asynchronous HTTP(S) POSTs on the kernel's event loop (libcurl multi), for
 * the webhook dispatcher: each post ends in one callback with the HTTP status (0 when none
 * arrived) and, on failure, a short reason. Redirects are not followed; only http and
 * https are spoken; a reply body is read and dropped (at most 64 KiB), or kept for
 * webhook_post_reply.
 */
#ifndef REBUNO_API_WEBHOOK_H
#define REBUNO_API_WEBHOOK_H

#include <event2/event.h>
#include <stddef.h>

struct webhook;

/* status: the HTTP status, 0 when the request failed (then why says how), -1 when the
 * post was cancelled by webhook_free (release arg, do nothing else). */
typedef void (*webhook_done_fn)(void *arg, long status, const char *why);

struct webhook *webhook_new(struct event_base *base);
/* Cancels every post in flight; each callback runs once more with status -1. */
void webhook_free(struct webhook *w);
/* POST body to url with the NULL-terminated "Name: value" headers; done runs later, on
 * the loop, exactly once (never from inside this call). 0, or -1 when the post could not
 * even start (done is then not called). */
int webhook_post(struct webhook *w, const char *url, const char *const *headers, const char *body,
                 size_t len, long timeout_ms, webhook_done_fn done, void *arg);
/* Only connect to url's host and port (TCP, and TLS for https) and report, like a post,
 * whether that worked (status 200) or why not (0). */
/* The same POST, keeping the reply body (at most 64 KiB; longer is a failure): done_reply
 * gets it (NUL-terminated; len 0 when none) with the status. For calls whose answer
 * matters (the judge model). */
typedef void (*webhook_reply_fn)(void *arg, long status, const char *why, const char *reply, size_t len);
int webhook_post_reply(struct webhook *w, const char *url, const char *const *headers, const char *body,
                       size_t len, long timeout_ms, webhook_reply_fn done, void *arg);
int webhook_probe(struct webhook *w, const char *url, long timeout_ms, webhook_done_fn done, void *arg);
int webhook_in_flight(const struct webhook *w);

#endif
