/*
 * api.h - the kernel's HTTP API (/v0) on the shared HTTP layer.
 *
 * Owns the glue between HTTP and the kernel: request validation, auth (API keys,
 * or the local token of net/local_auth.h when there are none), group commit
 * (requests that arrive together share one transaction and one fsync; their
 * replies are held until it commits), long-poll claims, SSE watchers, upstream's
 * push dispatch (signed webhooks and dispatch streams, claimed on the agent's behalf),
 * v1 HMAC agent signatures, and the timer that expires leases, deadlines and approvals.
 */
#ifndef REBUNO_API_API_H
#define REBUNO_API_API_H

#include <event2/event.h>
#include <stdbool.h>

#include "base/err.h"
#include "kernel/kernel.h"
#include "net/http.h"
#include "net/local_auth.h"

enum api_role { ROLE_ADMIN, ROLE_CLIENT, ROLE_AGENT };

struct api_key_config {
    const char *key;   /* the secret */
    enum api_role role;
    const char *agent; /* for ROLE_AGENT */
};

struct api;

struct api *api_new(struct event_base *base, struct http_server *http, struct kernel *k,
                    const struct api_key_config *keys, int n_keys);
/* Commit what is pending, end watchers and long-polls, stop timers. */
void api_shutdown(struct api *a);
void api_free(struct api *a);
bool api_has_keys(const struct api *a);
/* With no keys, every route but health then needs la's token (la outlives a). Until
 * this is called such routes answer 401. */
void api_set_local_auth(struct api *a, const struct local_auth *la);
int api_role_parse(const char *s, enum api_role *out);
/* The model judge policy rules ask: an OpenAI-compatible chat completions URL ("" none),
 * the model name, a bearer key ("" none) and the wait before the rule's fallback. */
void api_set_judge(struct api *a, const char *url, const char *model, const char *key, long timeout_ms);
/* Start delivering to the configured webhooks (queued work from before a restart too). */
void api_start_dispatch(struct api *a);

#endif
