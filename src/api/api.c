/*
 * api.c - routes of the kernel API, validation, auth and group commit.
 *
 * Group commit: a handler that changes state runs its kernel operation inside a
 * savepoint of the current batch transaction (opening one if needed) and queues
 * its reply instead of sending it. A low-priority libevent event fires once the
 * loop has no more ready input, commits the batch with one fsync, then sends the
 * held replies and wakes long-polling claims and SSE watchers. A request is thus
 * acknowledged only after its writes are durable, and 32 concurrent agents cost
 * one fsync per round rather than 32. A batch is also flushed once it holds
 * MAX_BATCH operations so a steady stream cannot starve it.
 */
#include "api/api.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/jtext.h"
#include "base/log.h"
#include "base/names.h"
#include "base/xalloc.h"
#include "api/api_keys.h"
#include "api/judge.h"
#include "api/signature.h"
#include "api/webhook.h"
#include "kernel/identity.h"
#include "policy/policy.h"
#include "store/store.h"

#define MAX_BATCH 256
#define SWEEP_INTERVAL_MS 200
#define KEEPALIVE_MS 15000
#define SSE_PAGE 256

enum perm { P_PUBLIC, P_READ, P_CLIENT, P_AGENT, P_APPROVE, P_ADMIN };

struct held_reply {
    struct held_reply *next;
    struct http_req *req; /* NULL once the client went away */
    int status;
    json_t *body;
    struct err err;
};

struct waiter {
    struct waiter *next, *prev;
    struct api *api;
    struct http_req *req;
    char *agent, *worker_id;
    struct event *timer;
};

struct watcher {
    struct watcher *next, *prev;
    struct api *api;
    struct http_req *req;
    char exec_id[UUID_STR_LEN];
    int64_t last_sent;
    bool blocked, pump_after_commit;
    struct event *keepalive;
};

/* Push dispatch (upstream's modes): the kernel claims on an agent's behalf and hands each
 * dispatch to its webhook (a signed POST) or to one of its open dispatch streams. The
 * claim commits first; the push goes out after the commit (struct push). */
#define HOOK_CONCURRENCY 32      /* webhook posts in flight per agent */
#define HOOK_TIMEOUT_MS 30000    /* per delivery, capped by the lease */
#define HOOK_BACKOFF_BASE_MS 1000
#define HOOK_BACKOFF_MAX_MS 30000

struct consumer {
    struct consumer *next, *prev;
    struct pusher *p;
    struct http_req *req;
    char *id;
    struct event *keepalive;
};

struct pusher {
    struct pusher *next;
    struct api *api;
    char *agent;
    char worker_id[UUID_STR_LEN];
    int in_flight;    /* webhook deliveries claimed and not yet answered */
    int failures;     /* consecutive failed deliveries (backoff) */
    int64_t retry_at; /* no webhook claims before this (ms; 0: none) */
    struct consumer *consumers, *next_consumer;
};

struct push {
    struct push *next;
    struct pusher *p;
    struct consumer *c; /* the stream it goes to (NULL once that closed) */
    bool stream;        /* false: the webhook */
    char exec_id[UUID_STR_LEN], dispatch_id[UUID_STR_LEN];
    int64_t attempt, lease_s;
};

struct route {
    const char *method, *pattern;
    enum perm perm;
    void (*fn)(struct api *a, struct http_req *r);
    struct api *api;
    const char *const *query; /* the query parameters it takes (NULL-terminated); NULL: none */
};

struct api {
    struct event_base *base;
    struct http_server *http;
    struct kernel *k;
    struct store *st;
    struct event *flush_ev, *sweep_ev;
    struct event *watch_ev; /* changes other replicas committed (store_watch_fd) */
    int watch_fd;
    int batch_ops;
    struct held_reply *held, **held_tail;
    struct waiter *waiters;
    struct watcher *watchers;
    struct key_entry *keys;
    int n_keys;
    struct api_keys *rkeys; /* made at run time (/v0/api-keys), scoped */
    char *judge_url, *judge_model, *judge_auth; /* judge rules' model (judge_url NULL: none) */
    long judge_timeout_ms;
    const struct local_auth *local; /* with no keys: the token every caller must send */
    struct route *routes;
    int n_routes;
    bool shutting_down;
    struct key_entry **signers; /* agents that sign their calls (an agent role each; stable) */
    int n_signers;
    struct webhook *hooks;
    struct pusher *pushers;
    struct push *pushes, **pushes_tail; /* claimed in the open batch, sent after its commit */
    struct delta_sub *delta_subs;       /* GET /v0/executions/{id}/stream */
    struct list_sub *list_subs;         /* GET /v0/executions/stream */
    long long deliveries_ok, deliveries_failed, deltas;
};

/* A watcher of an execution's live step deltas (upstream's best-effort stream). */
struct delta_sub {
    struct delta_sub *next, *prev;
    struct api *api;
    struct http_req *req;
    char exec_id[UUID_STR_LEN];
    struct event *keepalive;
};

/* A watcher of the executions list (GET /v0/executions/stream): told each execution that
 * matches its filter and changed, after the change committed. */
struct list_sub {
    struct list_sub *next, *prev;
    struct api *api;
    struct http_req *req;
    char *agent, *status, *session; /* the filter (NULL: any) */
    bool blocked, lost;             /* back-pressure: changes were dropped, send "resync" */
    struct event *keepalive;
};

static void flush(struct api *a);
static void pump(struct watcher *w);
static void list_notify(struct api *a, const char *exec_id);
static void list_resync_all(struct api *a);
static void pushes_send(struct api *a, bool committed);
static void pusher_pump(struct pusher *p);
static struct pusher *find_pusher(struct api *a, const char *agent);
static void probe_webhook(struct api *a, const char *agent, const char *url);

/* --- replies and group commit --- */

static void held_closed(struct http_req *req, void *arg)
{
    ((struct held_reply *)arg)->req = NULL;
}

/* Send now, or hold until the open batch commits. body is stolen. */
static void reply(struct api *a, struct http_req *r, int status, json_t *body)
{
    if (!store_in_tx(a->st)) {
        http_reply_json(r, status, body);
        return;
    }
    struct held_reply *h = xcalloc(1, sizeof *h);
    h->req = r;
    h->status = status;
    h->body = body;
    *a->held_tail = h;
    a->held_tail = &h->next;
    http_req_on_close(r, held_closed, h);
}

static void reply_err(struct api *a, struct http_req *r, const struct err *e)
{
    if (!store_in_tx(a->st)) {
        http_reply_err(r, e);
        return;
    }
    reply(a, r, 0, NULL);
    struct held_reply *h = (struct held_reply *)((char *)a->held_tail - offsetof(struct held_reply, next));
    h->err = *e;
}

/* joins: a step's submission or outcome, which touches only its execution's rows and so,
 * taking that row NOWAIT, may join a batch holding a rate limit's lock; any other
 * operation commits such a batch first, as it may wait for a lock (store.h,
 * store_rule_steps_since). */
static int op_begin_as(struct api *a, bool joins, struct err *err)
{
    if (!joins && store_batch_should_end(a->st)) flush(a);
    if (!store_in_tx(a->st)) {
        int r = store_begin(a->st);
        if (r < 0)
            return err_set(err, 503, "storage_unavailable", "", "storage unavailable: %s; retry shortly",
                           store_errmsg(a->st));
        event_active(a->flush_ev, 0, 0);
    }
    if (store_op_begin(a->st) < 0)
        return err_set(err, 503, "storage_unavailable", "", "storage error: %s; retry shortly", store_errmsg(a->st));
    return 0;
}

static int op_begin(struct api *a, struct err *err)
{
    return op_begin_as(a, false, err);
}

/* End the operation; false when it succeeded but the store could not keep it (it was
 * rolled back) and err says why. The PostgreSQL store reports a late failure of an
 * operation's queued writes by failing the batch's commit instead. */
static bool op_end(struct api *a, bool ok, struct err *err)
{
    int r = store_op_end(a->st, ok);
    bool done = true;
    if (r < 0) {
        log_error("savepoint failed", "error=\"%s\"", store_errmsg(a->st));
        if (ok) {
            done = false;
            *err = (struct err)ERR_INIT;
            if (r == -ENOTCONN || r == -EAGAIN)
                err_set(err, 503, r == -EAGAIN ? "storage_conflict" : "storage_unavailable", "",
                        "storage error: %s; retry shortly", store_errmsg(a->st));
            else
                err_internal(err, "storage error: %s", store_errmsg(a->st));
        }
    }
    if (++a->batch_ops >= MAX_BATCH) flush(a);
    return done;
}

static void wake_agent(struct api *a, const char *agent);

static void flush(struct api *a)
{
    if (!store_in_tx(a->st)) return;
    int r = store_commit(a->st);
    bool ok = r == 0;
    if (!ok) {
        log_error("commit failed; replying 503 to the batch", "error=\"%s\" ops=%d", store_errmsg(a->st), a->batch_ops);
        store_rollback(a->st);
    }
    a->batch_ops = 0;
    struct held_reply *h = a->held;
    a->held = NULL;
    a->held_tail = &a->held;
    while (h) {
        struct held_reply *next = h->next;
        if (h->req) {
            http_req_on_close(h->req, NULL, NULL);
            if (!ok) {
                json_decref(h->body);
                /* A COMMIT whose connection broke may still have landed: say so, never 2xx. */
                http_reply_error(h->req, 503, "storage_unavailable", "",
                                 r == -ENOTCONN ? "the database connection was lost at commit; the change may or may "
                                                  "not have been made: read it back before retrying"
                                                : "the write could not be made durable; nothing was changed");
            } else if (h->err.status) {
                http_reply_err(h->req, &h->err);
            } else {
                http_reply_json(h->req, h->status, h->body);
            }
        } else {
            json_decref(h->body);
        }
        free(h);
        h = next;
    }
    pushes_send(a, ok);
    struct kernel_notes notes;
    kernel_take_notes(a->k, &notes);
    if (ok) {
        for (int i = 0; i < notes.n_agents; i++) wake_agent(a, notes.agents[i]);
        for (struct watcher *w = a->watchers, *next; w; w = next) {
            next = w->next;
            bool hit = w->pump_after_commit;
            for (int i = 0; !hit && i < notes.n_execs; i++) hit = strcmp(notes.execs[i], w->exec_id) == 0;
            w->pump_after_commit = false;
            if (hit) pump(w);
        }
        for (int i = 0; a->list_subs && i < notes.n_execs; i++) list_notify(a, notes.execs[i]);
    }
    kernel_notes_fini(&notes);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    flush(arg);
}

/* Run one kernel operation in the batch and reply with its result. */
typedef int (*kop_fn)(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err);

/* joins: an operation on one execution's own rows (a step's submission or outcome), which
 * may join a batch holding a rate limit's lock (op_begin_as) and, refused a lock there
 * (storage_conflict), runs again once first in a new batch (see submit_run). */
static void run_op_as(struct api *a, struct http_req *r, int status, kop_fn fn, void *ctx, bool joins)
{
    struct err err = ERR_INIT;
    json_t *out = NULL;
    int rc;
    for (int pass = 0;; pass++) {
        if (op_begin_as(a, joins, &err) < 0) {
            reply_err(a, r, &err);
            return;
        }
        rc = fn(a, r, ctx, &out, &err);
        if (!op_end(a, rc == 0, &err)) {
            json_decref(out);
            out = NULL;
            rc = -1;
        }
        if (!joins || rc == 0 || pass > 0 || strcmp(err.code, "storage_conflict") != 0) break;
        flush(a);
        err = (struct err)ERR_INIT;
    }
    if (status == 204) { /* upstream answers these with no body */
        json_decref(out);
        out = NULL;
    }
    if (rc < 0) reply_err(a, r, &err);
    else reply(a, r, out ? status : 204, out);
}

static void run_op(struct api *a, struct http_req *r, int status, kop_fn fn, void *ctx)
{
    run_op_as(a, r, status, fn, ctx, false);
}

/* The array member of a kernel result (upstream's lists are bare arrays); frees the rest. */
static json_t *unwrap(json_t *out, const char *key)
{
    json_t *arr = json_incref(json_object_get(out, key));
    json_decref(out);
    return arr ? arr : json_array();
}

/* --- auth --- */

static void key_hash(const char *key, char out[STEP_ID_LEN])
{
    identity_sha256_hex(key, strlen(key), out);
}

static const struct key_entry *lookup_key(struct api *a, const char *token)
{
    char h[STEP_ID_LEN];
    key_hash(token, h);
    const struct key_entry *found = NULL;
    /* Compare against every key in constant time so timing reveals nothing. */
    for (int i = 0; i < a->n_keys; i++)
        if (CRYPTO_memcmp(h, a->keys[i].hash, 64) == 0) found = &a->keys[i];
    return found;
}

static struct caller caller_of(struct http_req *r)
{
    const struct key_entry *k = http_req_data(r);
    struct caller c = {k && k->role == ROLE_AGENT ? k->agent : NULL};
    return c;
}

static bool perm_ok(const struct key_entry *k, enum perm p)
{
    if (!k || k->role == ROLE_ADMIN || p == P_PUBLIC || p == P_READ) return true;
    switch (p) {
    case P_CLIENT: case P_APPROVE: return k->role == ROLE_CLIENT;
    case P_AGENT: return k->role == ROLE_AGENT;
    case P_ADMIN: return false; /* admins returned true above */
    default: return false;
    }
}

/* The scopes a run-time key needs for a route (upstream's table); ~0u: none may call it. */
static unsigned route_scopes(const struct route *rt)
{
    const char *p = rt->pattern;
    bool get = !strcmp(rt->method, "GET");
    if (rt->perm == P_PUBLIC) return 0;
    if (rt->perm == P_AGENT) return ~0u; /* agents sign with their secret */
    if (!strncmp(p, "/v0/api-keys", 12)) return SCOPE_KEYS_MANAGE;
    if (!strncmp(p, "/v0/approvals", 13)) return get ? SCOPE_APPR_READ : SCOPE_APPR_WRITE;
    if (!strcmp(p, "/v0/policies/:agent/test")) return SCOPE_POLICIES_WRITE | SCOPE_EXEC_READ;
    if (!strncmp(p, "/v0/policies", 12)) return get ? SCOPE_AGENTS_READ : SCOPE_POLICIES_WRITE;
    if (!strncmp(p, "/v0/agents", 10)) return get ? SCOPE_AGENTS_READ : SCOPE_AGENTS_WRITE;
    if (!strncmp(p, "/v0/executions", 14)) return get ? SCOPE_EXEC_READ : SCOPE_EXEC_WRITE;
    return ~0u;
}

/* 0, or -1 with the 401/403 sent: may this run-time key call rt? */
static int scoped_ok(const struct key_entry *k, const struct route *rt, struct http_req *r)
{
    if (k->revoked) {
        http_reply_error(r, 401, "unauthorized", "Authorization", "this API key is revoked");
        return -1;
    }
    unsigned need = route_scopes(rt);
    if (need == ~0u || (k->scopes & need) != need) {
        char want[160];
        http_reply_error(r, 403, "forbidden", "", "this API key's scopes do not allow %s %s%s%s", rt->method,
                         rt->pattern, need == ~0u ? "" : "; it needs ",
                         need == ~0u ? "" : api_scope_names(need, want, sizeof want));
        return -1;
    }
    return 0;
}

static int check_query(struct http_req *r, const char *const *allowed, struct err *err);

#define SIG_MAX_SKEW_S 300

/* The agent role an agent's own signatures give it (one entry per agent, kept). */
static const struct key_entry *signer_entry(struct api *a, const char *agent)
{
    for (int i = 0; i < a->n_signers; i++)
        if (strcmp(a->signers[i]->agent, agent) == 0) return a->signers[i];
    a->signers = xrealloc(a->signers, (size_t)(a->n_signers + 1) * sizeof *a->signers);
    struct key_entry *k = a->signers[a->n_signers++] = xcalloc(1, sizeof *k);
    k->role = ROLE_AGENT;
    k->agent = xstrdup(agent);
    return k;
}

/* Upstream's agent authentication: Rebuno-Agent-Id, Rebuno-Timestamp and a v1 HMAC in
 * Rebuno-Signature with the agent's secret. NULL with the 401 sent on any mismatch. */
static const struct key_entry *check_signature(struct api *a, struct http_req *r)
{
    const char *agent = http_req_header(r, "Rebuno-Agent-Id"), *sig = http_req_header(r, "Rebuno-Signature");
    const char *ts = http_req_header(r, "Rebuno-Timestamp");
    struct kernel_agent_info info;
    if (!agent || !*agent) {
        http_reply_error(r, 401, "unauthorized", "Rebuno-Agent-Id",
                         "a signed call needs Rebuno-Agent-Id (the agent whose secret signed it)");
        return NULL;
    }
    if (!name_agent_valid(agent) || !kernel_agent_info(a->k, agent, &info) || !info.secret) {
        http_reply_error(r, 401, "unauthorized", "Rebuno-Agent-Id",
                         "agent \"%.128s\" has no secret configured here; add secret: to it in the config "
                         "(or register it with POST /v0/agents)",
                         name_agent_valid(agent) ? agent : "?");
        return NULL;
    }
    if (!sig || strncmp(sig, "v1=", 3) != 0) {
        http_reply_error(r, 401, "unauthorized", "Rebuno-Signature",
                         "Rebuno-Signature must be v1=<hex HMAC-SHA256> (request signatures v1)");
        return NULL;
    }
    char *end = NULL;
    errno = 0;
    long long t = ts ? strtoll(ts, &end, 10) : 0;
    long long now = (long long)(clock_now_ms() / 1000);
    if (!ts || errno || end == ts || *end || t < now - SIG_MAX_SKEW_S || t > now + SIG_MAX_SKEW_S) {
        http_reply_error(r, 401, "unauthorized", "Rebuno-Timestamp",
                         "Rebuno-Timestamp must be the Unix time in seconds within %d s of the kernel's clock",
                         SIG_MAX_SKEW_S);
        return NULL;
    }
    size_t len;
    const char *body = http_req_body(r, &len);
    char want[SIG_HEX_LEN];
    sig_request_v1(info.secret, http_req_method(r), http_req_target(r), ts,
                   http_req_header(r, "Rebuno-Dispatch-Id"), http_req_header(r, "Rebuno-Dispatch-Attempt"),
                   body, len, want);
    if (!sig_equal(sig + 3, want)) {
        http_reply_error(r, 401, "unauthorized", "Rebuno-Signature",
                         "Rebuno-Signature does not match this request signed with agent %s's secret", agent);
        return NULL;
    }
    return signer_entry(a, agent);
}

static void route_entry(struct http_req *r, void *arg)
{
    struct route *rt = arg;
    struct api *a = rt->api;
    bool signed_call = http_req_header(r, "Rebuno-Signature") || http_req_header(r, "Rebuno-Agent-Id");
    if (rt->perm != P_PUBLIC && signed_call) {
        if (a->n_keys == 0 && !http_req_peer_is_loopback(r)) {
            http_reply_error(r, 403, "forbidden", "", "this kernel has no API keys configured and only serves loopback clients");
            return;
        }
        const struct key_entry *k = check_signature(a, r);
        if (!k) return;
        if (!perm_ok(k, rt->perm)) {
            http_reply_error(r, 403, "forbidden", "", "an agent's signature may not call %s %s", rt->method, rt->pattern);
            return;
        }
        http_req_set_data(r, (void *)k);
    } else if (rt->perm != P_PUBLIC) {
        if (a->n_keys == 0) {
            if (!http_req_peer_is_loopback(r)) {
                http_reply_error(r, 403, "forbidden", "", "this kernel has no API keys configured and only serves loopback clients");
                return;
            }
            /* loopback is every local user: the local token tells the one who started it */
            const char *auth = http_req_header(r, "Authorization");
            const struct key_entry *rk = auth && strncasecmp(auth, "Bearer ", 7) == 0
                                             ? api_keys_lookup(a->rkeys, auth + 7) : NULL;
            if (rk) {
                if (scoped_ok(rk, rt, r) < 0) return;
                http_req_set_data(r, (void *)rk);
            } else if (!a->local || !local_auth_check(a->local, auth)) {
                if (a->local) local_auth_refuse(a->local, r);
                else http_reply_error(r, 401, "unauthorized", "Authorization", "this kernel has no local token yet");
                return;
            }
        } else {
            const char *auth = http_req_header(r, "Authorization");
            if (!auth || strncasecmp(auth, "Bearer ", 7) != 0 || !auth[7]) {
                http_reply_error(r, 401, "unauthorized", "Authorization",
                                 "missing API key: send 'Authorization: Bearer <key>' (REBUNO_API_KEY for the CLI and SDK)");
                return;
            }
            const struct key_entry *k = lookup_key(a, auth + 7);
            if (!k) k = api_keys_lookup(a->rkeys, auth + 7);
            if (!k) {
                http_reply_error(r, 401, "unauthorized", "Authorization", "unknown API key");
                return;
            }
            if (k->scopes) {
                if (scoped_ok(k, rt, r) < 0) return;
            } else if (!perm_ok(k, rt->perm)) {
                http_reply_error(r, 403, "forbidden", "", "a key with role %s may not call %s %s",
                                 k->role == ROLE_AGENT ? "agent" : "client", rt->method, rt->pattern);
                return;
            }
            http_req_set_data(r, (void *)k);
        }
    }
    struct err err = ERR_INIT;
    if (check_query(r, rt->query, &err) < 0) {
        http_reply_err(r, &err);
        return;
    }
    rt->fn(a, r);
}

int api_role_parse(const char *s, enum api_role *out)
{
    if (strcmp(s, "admin") == 0) *out = ROLE_ADMIN;
    else if (strcmp(s, "client") == 0) *out = ROLE_CLIENT;
    else if (strcmp(s, "agent") == 0) *out = ROLE_AGENT;
    else return -EINVAL;
    return 0;
}

/* --- input validation --- */

static bool name_in(const char *name, const char *const *names)
{
    for (int i = 0; names && names[i]; i++)
        if (strcmp(name, names[i]) == 0) return true;
    return false;
}

/* "a, b, c" of a NULL-terminated list ("" for none) into list. */
static void join_names(const char *const *names, char *list, size_t size)
{
    list[0] = '\0';
    for (int i = 0; names && names[i]; i++) {
        strncat(list, i ? ", " : "", size - strlen(list) - 1);
        strncat(list, names[i], size - strlen(list) - 1);
    }
}

static int check_fields(const json_t *body, const char *const *allowed, struct err *err)
{
    if (!json_is_object(body)) return err_invalid(err, "body", "the request body must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        if (!name_in(key, allowed)) {
            char list[256];
            join_names(allowed, list, sizeof list);
            return err_invalid(err, key, "unknown field \"%s\"; this request takes: %s", key,
                               *list ? list : "no fields");
        }
    }
    return 0;
}

/* The query keys a route takes, each at most once: like check_fields for the URL, so a
 * misspelt filter (?stauts=failed) is an error rather than a silently unfiltered list. */
static int check_query(struct http_req *r, const char *const *allowed, struct err *err)
{
    const char *key, *val;
    for (size_t i = 0; http_req_query_at(r, i, &key, &val); i++) {
        if (!name_in(key, allowed)) {
            char list[256];
            join_names(allowed, list, sizeof list);
            if (!*list)
                return err_invalid(err, key, "unknown query parameter \"%s\"; this request takes no query parameters",
                                   key);
            return err_invalid(err, key, "unknown query parameter \"%s\"; this request takes: %s", key, list);
        }
        const char *k2, *v2;
        for (size_t j = 0; j < i && http_req_query_at(r, j, &k2, &v2); j++)
            if (strcmp(k2, key) == 0)
                return err_invalid(err, key, "query parameter \"%s\" is given more than once; pass it once", key);
    }
    return 0;
}

/* Optional (or required) string field with a length cap. */
static int get_str(const json_t *body, const char *key, bool required, size_t max,
                   const char **out, struct err *err)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required) return err_invalid(err, key, "%s: required", key);
        return 0;
    }
    if (!json_is_string(v)) return err_invalid(err, key, "%s: must be a string", key);
    size_t n = json_string_length(v);
    if (required && n == 0) return err_invalid(err, key, "%s: must not be empty", key);
    if (n > max) return err_invalid(err, key, "%s: at most %zu bytes", key, max);
    if (strlen(json_string_value(v)) != n) return err_invalid(err, key, "%s: must not contain NUL bytes", key);
    *out = json_string_value(v);
    return 0;
}

static int get_int(const json_t *body, const char *key, int64_t min, int64_t max, int64_t *out,
                   struct err *err)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return err_invalid(err, key, "%s: must be an integer", key);
    int64_t n = json_integer_value(v);
    if (n < min || n > max)
        return err_invalid(err, key, "%s: must be between %lld and %lld", key, (long long)min, (long long)max);
    *out = n;
    return 0;
}

static int query_int(struct http_req *r, const char *name, int64_t min, int64_t max, int64_t *out,
                     struct err *err)
{
    const char *s = http_req_query(r, name);
    if (!s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return err_invalid(err, name, "%s: must be an integer between %lld and %lld", name, (long long)min,
                           (long long)max);
    *out = v;
    return 0;
}

static json_t *body_json(struct http_req *r, const char *const *allowed, struct err *err)
{
    json_t *b = http_req_json(r, true, err);
    if (!b) return NULL;
    if (check_fields(b, allowed, err) < 0) {
        json_decref(b);
        return NULL;
    }
    return b;
}

static int dispatch_ref(struct http_req *r, struct dispatch_ref *d, struct err *err)
{
    d->id = http_req_header(r, "Rebuno-Dispatch-Id");
    d->attempt = 0;
    const char *at = http_req_header(r, "Rebuno-Dispatch-Attempt");
    if (!d->id || !at)
        return err_invalid(err, d->id ? "Rebuno-Dispatch-Attempt" : "Rebuno-Dispatch-Id",
                           "agent calls need the Rebuno-Dispatch-Id and Rebuno-Dispatch-Attempt headers from the claim");
    char *end;
    errno = 0;
    long long v = strtoll(at, &end, 10);
    if (errno || end == at || *end || v < 1)
        return err_invalid(err, "Rebuno-Dispatch-Attempt", "Rebuno-Dispatch-Attempt must be a positive integer");
    d->attempt = v;
    return 0;
}

static bool status_valid(const char *s)
{
    enum exec_status st;
    return exec_status_parse(s, &st) == 0;
}

/* --- execution handlers --- */

struct create_ctx {
    const char *agent, *session, *parent;
    json_t *input;
    int64_t deadline_ms;
};

/* Session names: 1..128 of [A-Za-z0-9_.:/-] (they show up in branch names and CLIs). */
static int check_session(const char *session, struct err *err)
{
    if (!session || name_valid(session, 128, "_.:/-")) return 0;
    return err_invalid(err, "session", "session: use letters, digits and _ . : / - (got \"%s\")", session);
}

/* An optional array of at most max objects; each checked by fn. */
static int check_array(const json_t *body, const char *key, size_t max, int (*fn)(const json_t *, struct err *),
                       struct err *err)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) > max)
        return err_invalid(err, key, "%s: must be an array of at most %zu items", key, max);
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) if (fn(item, err) < 0) return -1;
    return 0;
}

static int check_resource_key(const json_t *v, struct err *err)
{
    if (!json_is_string(v) || !kernel_resource_key_valid(json_string_value(v)))
        return err_invalid(err, "resources", "resources: keys are 1..128 of [A-Za-z0-9_.-]");
    return 0;
}

static int check_capture(const json_t *v, struct err *err)
{
    static const char *const fields[] = {"key", "generation", "checkpoint_ref", NULL};
    const char *key, *ref;
    int64_t gen = -1;
    if (check_fields(v, fields, err) < 0 || get_str(v, "key", true, 128, &key, err) < 0 ||
        get_str(v, "checkpoint_ref", true, 1024, &ref, err) < 0 ||
        get_int(v, "generation", 0, INT64_MAX, &gen, err) < 0)
        return err_wrap(err, "captures");
    if (gen < 0) return err_invalid(err, "generation", "captures: generation is required (from the proceed decision)");
    return 0;
}

static int check_failure(const json_t *v, struct err *err)
{
    static const char *const fields[] = {"key", "generation", "error", NULL};
    const char *key, *msg;
    int64_t gen = 0;
    if (check_fields(v, fields, err) < 0 || get_str(v, "key", true, 128, &key, err) < 0 ||
        get_str(v, "error", true, 4096, &msg, err) < 0 || get_int(v, "generation", 0, INT64_MAX, &gen, err) < 0)
        return err_wrap(err, "capture_failures");
    return 0;
}

static int op_create(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct create_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_create(a->k, &who, c->agent, c->input, c->session, c->parent, c->deadline_ms, out, err);
}

static void h_create(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"agent_id", "input", "session", "parent_execution_id", "deadline_seconds",
                                         NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct create_ctx c = {0};
    int64_t deadline = 0;
    if (!b || get_str(b, "agent_id", true, 128, &c.agent, &err) < 0 ||
        get_str(b, "session", false, 128, &c.session, &err) < 0 || check_session(c.session, &err) < 0 ||
        get_str(b, "parent_execution_id", false, UUID_STR_LEN, &c.parent, &err) < 0 ||
        get_int(b, "deadline_seconds", 1, 31536000, &deadline, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    json_t *empty = NULL;
    c.input = json_object_get(b, "input");
    if (!c.input) c.input = empty = json_object();
    c.deadline_ms = deadline * 1000;
    run_op(a, r, 201, op_create, &c);
    json_decref(empty);
    json_decref(b);
}

static void h_get(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out = NULL;
    struct caller who = caller_of(r);
    if (kernel_get(a->k, &who, http_req_param(r, "id"), &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

/* The filter of a list, a count or a list stream from the query: agent_id, status
 * (when with_status), session, created_after, created_before (RFC 3339). */
static int list_filter(struct http_req *r, bool with_status, struct exec_filter *f, struct err *err)
{
    memset(f, 0, sizeof *f);
    f->agent = http_req_query(r, "agent_id");
    f->session = http_req_query(r, "session");
    f->status = with_status ? http_req_query(r, "status") : NULL;
    if (f->status && !status_valid(f->status))
        return err_invalid(err, "status", "status: one of pending, running, blocked, completed, failed, cancelled");
    static const char *const times[] = {"created_after", "created_before"};
    for (int i = 0; i < 2; i++) {
        const char *t = http_req_query(r, times[i]);
        int64_t ms = 0;
        if (t && (clock_parse_iso(t, &ms) < 0 || ms <= 0))
            return err_invalid(err, times[i], "%s: an RFC 3339 time in UTC such as 2026-12-02T10:00:00Z", times[i]);
        if (i == 0) f->created_after = ms;
        else f->created_before = ms;
    }
    return 0;
}

static void h_list(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    int64_t limit = 50;
    const char *cursor = http_req_query(r, "cursor");
    struct exec_filter f;
    if (query_int(r, "limit", 1, 200, &limit, &err) < 0 || list_filter(r, true, &f, &err) < 0) goto fail;
    if (cursor && !uuid_valid(cursor)) {
        err_invalid(&err, "cursor", "cursor: pass the next_cursor of a previous page");
        goto fail;
    }
    json_t *out;
    struct caller who = caller_of(r);
    if (kernel_list(a->k, &who, &f, cursor, (int)limit, &out, &err) < 0) goto fail;
    reply(a, r, 200, out);
    return;
fail:
    reply_err(a, r, &err);
}

static void h_counts(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    struct exec_filter f;
    json_t *out;
    struct caller who = caller_of(r);
    if (list_filter(r, false, &f, &err) < 0 || kernel_exec_counts(a->k, &who, &f, &out, &err) < 0)
        reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

static void h_forks(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    int64_t limit = 100;
    json_t *out;
    struct caller who = caller_of(r);
    if (query_int(r, "limit", 1, 1000, &limit, &err) < 0 ||
        kernel_forks(a->k, &who, http_req_param(r, "id"), (int)limit, &out, &err) < 0)
        reply_err(a, r, &err);
    else reply(a, r, 200, unwrap(out, "forks"));
}

/* --- SSE of the executions list --- */

static void list_sub_free(struct list_sub *l)
{
    struct api *a = l->api;
    if (l->prev) l->prev->next = l->next;
    else a->list_subs = l->next;
    if (l->next) l->next->prev = l->prev;
    event_free(l->keepalive);
    free(l->agent);
    free(l->status);
    free(l->session);
    free(l);
}

static void list_sub_closed(struct http_req *r, void *arg)
{
    list_sub_free(arg);
}

static void list_send(struct list_sub *l, const char *event, const char *data)
{
    if (l->blocked) {
        l->lost = true;
        return;
    }
    if (http_sse_send(l->req, NULL, event, data) == -EAGAIN) l->blocked = l->lost = true;
}

static void list_drained(struct http_req *r, void *arg)
{
    struct list_sub *l = arg;
    l->blocked = false;
    if (l->lost) { /* changes were dropped: the client reads the list again */
        l->lost = false;
        list_send(l, "resync", "{}");
    }
}

static bool field_is(const json_t *o, const char *key, const char *want)
{
    const char *v = json_string_value(json_object_get(o, key));
    return !want || (v && strcmp(v, want) == 0);
}

/* exec_id changed (committed here, or by another replica): tell the watchers it matches. */
static void list_notify(struct api *a, const char *exec_id)
{
    if (!a->list_subs) return;
    struct err err = ERR_INIT;
    json_t *e;
    if (kernel_get(a->k, NULL, exec_id, &e, &err) < 0) return;
    /* the row of a list, not the execution's data */
    json_object_del(e, "input");
    json_object_del(e, "output");
    json_object_del(e, "state");
    json_object_del(e, "restoration");
    char *data = NULL;
    for (struct list_sub *l = a->list_subs; l; l = l->next) {
        if (!field_is(e, "agent_id", l->agent) || !field_is(e, "status", l->status) ||
            !field_is(e, "session", l->session))
            continue;
        if (!data) data = jtext_dump(e, NULL);
        if (data) list_send(l, "execution", data);
    }
    free(data);
    json_decref(e);
}

/* Anything may have changed (the PostgreSQL listener reconnected): every list reads again. */
static void list_resync_all(struct api *a)
{
    for (struct list_sub *l = a->list_subs; l; l = l->next) list_send(l, "resync", "{}");
}

static void list_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct list_sub *l = arg;
    http_sse_comment(l->req, "keep-alive");
}

static void h_list_stream(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    struct exec_filter f;
    if (list_filter(r, true, &f, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    struct caller who = caller_of(r);
    if (f.agent && !name_agent_valid(f.agent)) {
        err_invalid(&err, "agent_id", "agent_id: use 1..%d letters, digits and _ . : -", NAME_AGENT_MAX);
        reply_err(a, r, &err);
        return;
    }
    if (who.agent && f.agent && strcmp(f.agent, who.agent) != 0) {
        http_reply_error(r, 403, "forbidden", "agent_id", "an agent's key sees only its own agent's executions");
        return;
    }
    if (f.created_after || f.created_before) {
        err_invalid(&err, f.created_after ? "created_after" : "created_before",
                    "the list stream takes no time filter (it tells of changes as they happen)");
        reply_err(a, r, &err);
        return;
    }
    struct list_sub *l = xcalloc(1, sizeof *l);
    l->api = a;
    l->req = r;
    l->agent = who.agent ? xstrdup(who.agent) : f.agent ? xstrdup(f.agent) : NULL;
    l->status = f.status ? xstrdup(f.status) : NULL;
    l->session = f.session ? xstrdup(f.session) : NULL;
    l->next = a->list_subs;
    if (a->list_subs) a->list_subs->prev = l;
    a->list_subs = l;
    l->keepalive = event_new(a->base, -1, EV_PERSIST, list_keepalive, l);
    struct timeval tv = {KEEPALIVE_MS / 1000, 0};
    event_add(l->keepalive, &tv);
    http_req_on_close(r, list_sub_closed, l);
    http_sse_on_drain(r, list_drained, l);
    http_sse_start(r);
    list_send(l, "ready", "{}"); /* from here on every change is told */
}

static int op_cancel(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct caller who = caller_of(r);
    return kernel_cancel(a->k, &who, http_req_param(r, "id"), ctx, out, err);
}

static void h_cancel(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"reason", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    const char *reason = NULL;
    if (!b || get_str(b, "reason", false, 1024, &reason, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    run_op(a, r, 204, op_cancel, (void *)reason);
    json_decref(b);
}

static void h_events(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    int64_t after = 0, limit = 100;
    json_t *out;
    struct caller who = caller_of(r);
    if (query_int(r, "after_seq", 0, INT64_MAX, &after, &err) < 0 || query_int(r, "limit", 1, 1000, &limit, &err) < 0 ||
        kernel_events(a->k, &who, http_req_param(r, "id"), after, (int)limit, &out, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    reply(a, r, 200, unwrap(out, "events"));
}

static void h_steps(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    struct caller who = caller_of(r);
    const char *status = http_req_query(r, "status");
    if (status && strcmp(status, "terminal") != 0) {
        err_invalid(&err, "status", "status: only \"terminal\" (succeeded, failed or denied steps) is a filter here");
        reply_err(a, r, &err);
        return;
    }
    if (kernel_steps(a->k, &who, http_req_param(r, "id"), &out, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    json_t *steps = unwrap(out, "steps");
    if (status) { /* what a re-dispatched agent may replay: the settled outcomes */
        for (size_t i = json_array_size(steps); i-- > 0;) {
            const char *st = json_string_value(json_object_get(json_array_get(steps, i), "status"));
            if (!st || (strcmp(st, "succeeded") && strcmp(st, "failed") && strcmp(st, "denied")))
                json_array_remove(steps, i);
        }
    }
    reply(a, r, 200, steps);
}

static void h_step_get(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    struct caller who = caller_of(r);
    if (kernel_step_get(a->k, &who, http_req_param(r, "id"), http_req_param(r, "step"), &out, &err) < 0)
        reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

/* --- SSE watch --- */

static void watcher_free(struct watcher *w)
{
    struct api *a = w->api;
    if (w->prev) w->prev->next = w->next;
    else a->watchers = w->next;
    if (w->next) w->next->prev = w->prev;
    event_free(w->keepalive);
    free(w);
}

static void watcher_closed(struct http_req *r, void *arg)
{
    watcher_free(arg);
}

static void watcher_end(struct watcher *w)
{
    struct http_req *r = w->req;
    http_req_on_close(r, NULL, NULL);
    watcher_free(w);
    http_sse_end(r);
}

static void watcher_drained(struct http_req *r, void *arg)
{
    struct watcher *w = arg;
    w->blocked = false;
    pump(w);
}

/* Send every committed event after last_sent; end the stream after a terminal execution. */
static void pump(struct watcher *w)
{
    struct api *a = w->api;
    if (w->blocked) return;
    if (store_in_tx(a->st)) { /* never show uncommitted events */
        w->pump_after_commit = true;
        return;
    }
    for (;;) {
        struct err err = ERR_INIT;
        json_t *out;
        if (kernel_events(a->k, NULL, w->exec_id, w->last_sent, SSE_PAGE, &out, &err) < 0) {
            watcher_end(w);
            return;
        }
        json_t *events = json_object_get(out, "events");
        bool terminal = json_is_true(json_object_get(out, "terminal"));
        size_t i, n = json_array_size(events);
        json_t *ev;
        json_array_foreach(events, i, ev) {
            char id[24];
            snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(ev, "event_seq")));
            char *data = jtext_dump(ev, NULL); /* an object: same text as json_dumps(ev, JSON_COMPACT) */
            int rc = http_sse_send(w->req, id, json_string_value(json_object_get(ev, "type")), data);
            free(data);
            if (rc == -EAGAIN) {
                w->blocked = true;
                json_decref(out);
                return;
            }
            w->last_sent = json_integer_value(json_object_get(ev, "event_seq"));
        }
        json_decref(out);
        if (n == SSE_PAGE) continue;
        if (terminal) watcher_end(w);
        return;
    }
}

static void keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
    struct watcher *w = arg;
    http_sse_comment(w->req, "keep-alive");
}

static void h_stream(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    int64_t after = 0;
    const char *last = http_req_header(r, "Last-Event-ID");
    json_t *exec;
    struct caller who = caller_of(r);
    if (query_int(r, "after_seq", 0, INT64_MAX, &after, &err) < 0) goto fail;
    if (last) {
        char *end;
        errno = 0;
        long long v = strtoll(last, &end, 10);
        if (errno || end == last || *end || v < 0) {
            err_invalid(&err, "Last-Event-ID", "Last-Event-ID must be the seq of the last event received");
            goto fail;
        }
        after = v;
    }
    if (kernel_get(a->k, &who, http_req_param(r, "id"), &exec, &err) < 0) goto fail;
    struct watcher *w = xcalloc(1, sizeof *w);
    w->api = a;
    w->req = r;
    snprintf(w->exec_id, sizeof w->exec_id, "%s", json_string_value(json_object_get(exec, "id")));
    json_decref(exec);
    w->last_sent = after;
    w->next = a->watchers;
    if (a->watchers) a->watchers->prev = w;
    a->watchers = w;
    w->keepalive = event_new(a->base, -1, EV_PERSIST, keepalive_cb, w);
    struct timeval tv = {KEEPALIVE_MS / 1000, 0};
    event_add(w->keepalive, &tv);
    http_req_on_close(r, watcher_closed, w);
    http_sse_on_drain(r, watcher_drained, w);
    http_sse_start(r);
    pump(w);
    return;
fail:
    reply_err(a, r, &err);
}

/* --- workers and claims --- */

struct worker_ctx {
    const char *name;
};

static int op_worker(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct caller who = caller_of(r);
    return kernel_register_worker(a->k, &who, http_req_param(r, "agent"), ((struct worker_ctx *)ctx)->name, out, err);
}

static void h_worker(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"name", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct worker_ctx c = {0};
    if (!b || get_str(b, "name", false, 256, &c.name, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    run_op(a, r, 201, op_worker, &c);
    json_decref(b);
}

static void waiter_free(struct waiter *w)
{
    struct api *a = w->api;
    if (w->prev) w->prev->next = w->next;
    else a->waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    event_free(w->timer);
    free(w->agent);
    free(w->worker_id);
    free(w);
}

static void waiter_closed(struct http_req *r, void *arg)
{
    waiter_free(arg);
}

static void waiter_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct waiter *w = arg;
    struct http_req *r = w->req;
    http_req_on_close(r, NULL, NULL);
    waiter_free(w);
    http_reply_json(r, 204, NULL);
}

/* Try to claim for the waiter; true when it was answered. */
static bool waiter_try(struct waiter *w)
{
    struct api *a = w->api;
    struct err err = ERR_INIT;
    json_t *out = NULL;
    if (op_begin(a, &err) < 0) return false;
    struct caller who = {NULL};
    int rc = kernel_claim(a->k, &who, w->agent, w->worker_id, &out, &err);
    if (!op_end(a, rc == 0, &err)) {
        json_decref(out);
        out = NULL;
        rc = -1;
    }
    if (rc == 0 && !out) return false;
    struct http_req *r = w->req;
    http_req_on_close(r, NULL, NULL);
    waiter_free(w);
    if (rc < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
    return true;
}

static void wake_agent(struct api *a, const char *agent)
{
    struct pusher *p = find_pusher(a, agent);
    if (p) pusher_pump(p);
    /* Oldest waiter first; stop at the first that finds nothing left. Waiters were
     * pushed at the head, so walk to the tail. */
    struct waiter *tail = NULL;
    for (struct waiter *w = a->waiters; w; w = w->next) tail = w;
    for (struct waiter *w = tail, *prev; w; w = prev) {
        prev = w->prev;
        if (strcmp(w->agent, agent) != 0) continue;
        if (!waiter_try(w)) break;
    }
}

struct claim_ctx {
    const char *worker_id;
};

static void h_claim(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"worker_id", "wait_seconds", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct claim_ctx c = {0};
    int64_t wait = 30;
    if (!b || get_str(b, "worker_id", true, 64, &c.worker_id, &err) < 0 ||
        get_int(b, "wait_seconds", 0, 60, &wait, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    if (!uuid_valid(c.worker_id)) {
        err_invalid(&err, "worker_id", "worker_id: use the id returned by POST /v0/agents/{agent}/workers");
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    json_t *out = NULL;
    if (op_begin(a, &err) < 0) goto fail;
    struct caller who = caller_of(r);
    int rc = kernel_claim(a->k, &who, http_req_param(r, "agent"), c.worker_id, &out, &err);
    if (!op_end(a, rc == 0, &err)) {
        json_decref(out);
        out = NULL;
        rc = -1;
    }
    if (rc < 0) goto fail;
    if (out) {
        reply(a, r, 200, out);
    } else if (wait == 0 || a->shutting_down) {
        reply(a, r, 204, NULL);
    } else {
        struct waiter *w = xcalloc(1, sizeof *w);
        w->api = a;
        w->req = r;
        w->agent = xstrdup(http_req_param(r, "agent"));
        w->worker_id = xstrdup(c.worker_id);
        w->timer = evtimer_new(a->base, waiter_timeout, w);
        struct timeval tv = {(time_t)wait, 0};
        evtimer_add(w->timer, &tv);
        w->next = a->waiters;
        if (a->waiters) a->waiters->prev = w;
        a->waiters = w;
        http_req_on_close(r, waiter_closed, w);
    }
    json_decref(b);
    return;
fail:
    reply_err(a, r, &err);
    json_decref(b);
}

static void h_agents(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    if (kernel_agents(a->k, &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, unwrap(out, "agents"));
}

static void h_agent_get(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    if (kernel_agents(a->k, &out, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    const char *id = http_req_param(r, "agent");
    json_t *arr = json_object_get(out, "agents"), *v, *found = NULL;
    size_t i;
    json_array_foreach(arr, i, v) if (strcmp(json_string_value(json_object_get(v, "id")), id) == 0) found = v;
    if (found) {
        reply(a, r, 200, json_incref(found));
    } else {
        err_set(&err, 404, "not_found", "id", "no agent \"%s\"; list them with GET /v0/agents", id);
        reply_err(a, r, &err);
    }
    json_decref(out);
}

/* --- push dispatch: webhooks and dispatch streams --- */

static struct pusher *find_pusher(struct api *a, const char *agent)
{
    for (struct pusher *p = a->pushers; p; p = p->next)
        if (strcmp(p->agent, agent) == 0) return p;
    return NULL;
}

static struct pusher *ensure_pusher(struct api *a, const char *agent)
{
    struct pusher *p = find_pusher(a, agent);
    if (p) return p;
    p = xcalloc(1, sizeof *p);
    p->api = a;
    p->agent = xstrdup(agent);
    uuid_v7(p->worker_id); /* the kernel's own worker for this agent's pushes */
    p->next = a->pushers;
    a->pushers = p;
    return p;
}

static int64_t backoff_ms(int failures)
{
    int64_t d = HOOK_BACKOFF_BASE_MS;
    for (int i = 1; i < failures && d < HOOK_BACKOFF_MAX_MS; i++) d *= 2;
    if (d > HOOK_BACKOFF_MAX_MS) d = HOOK_BACKOFF_MAX_MS;
    return d + (int64_t)(rand() % (int)(d / 4 + 1)); /* jitter up to 25% */
}

/* Claim while someone can take a dispatch: an open stream of the agent, else its webhook
 * (not while backing off, at most HOOK_CONCURRENCY in flight). */
static void pusher_pump(struct pusher *p)
{
    struct api *a = p->api;
    struct kernel_agent_info info;
    if (a->shutting_down || !kernel_agent_info(a->k, p->agent, &info)) return;
    /* until nothing is queued (a stream takes every dispatch: nothing else would wake the
     * rest) or the webhook is full; the bound is only a backstop */
    for (int guard = 0; guard < 1000000; guard++) {
        struct consumer *c = NULL;
        if (p->consumers) {
            c = p->next_consumer ? p->next_consumer : p->consumers;
            p->next_consumer = c->next;
        } else if (!info.webhook_url || p->in_flight >= HOOK_CONCURRENCY ||
                   (p->retry_at && clock_now_ms() < p->retry_at)) {
            return;
        }
        struct err err = ERR_INIT;
        json_t *out = NULL;
        if (op_begin(a, &err) < 0) {
            log_error("dispatch: cannot claim", "agent=%s error=\"%s\"", p->agent, err.msg);
            return;
        }
        struct caller who = {NULL};
        int rc = kernel_claim(a->k, &who, p->agent, p->worker_id, &out, &err);
        if (!op_end(a, rc == 0, &err)) { /* the store could not keep the claim */
            json_decref(out);
            out = NULL;
            rc = -1;
        }
        if (rc < 0) log_error("dispatch: claim failed", "agent=%s error=\"%s\"", p->agent, err.msg);
        if (rc < 0 || !out) return;
        struct push *x = xcalloc(1, sizeof *x);
        x->p = p;
        x->c = c;
        x->stream = c != NULL;
        json_t *d = json_object_get(out, "dispatch");
        snprintf(x->exec_id, sizeof x->exec_id, "%s",
                 json_string_value(json_object_get(json_object_get(out, "execution"), "id")));
        snprintf(x->dispatch_id, sizeof x->dispatch_id, "%s", json_string_value(json_object_get(d, "id")));
        x->attempt = json_integer_value(json_object_get(d, "attempt"));
        x->lease_s = json_integer_value(json_object_get(d, "lease_timeout_seconds"));
        json_decref(out);
        if (!x->stream) p->in_flight++;
        *a->pushes_tail = x;
        a->pushes_tail = &x->next;
        if (!store_in_tx(a->st)) pushes_send(a, true); /* op_end flushed (MAX_BATCH): committed */
    }
}

/* Record a delivery's outcome (acked, or failed: the attempt ends as an expired lease). */
static void record_delivery(struct api *a, const char *exec_id, const char *dispatch_id, int64_t attempt,
                            const char *failure)
{
    struct err err = ERR_INIT;
    if (op_begin(a, &err) < 0) return;
    struct dispatch_ref d = {dispatch_id, attempt};
    int rc = failure ? kernel_dispatch_failed(a->k, exec_id, &d, failure, &err)
                     : kernel_dispatch_acked(a->k, exec_id, &d, &err);
    if (!op_end(a, rc == 0, &err)) rc = -1;
    if (rc < 0) log_error("dispatch: recording the delivery failed", "execution=%s error=\"%s\"", exec_id, err.msg);
}

struct delivery {
    struct pusher *p;
    char exec_id[UUID_STR_LEN], dispatch_id[UUID_STR_LEN];
    int64_t attempt;
    char *url;
};

static void delivered(void *arg, long status, const char *why)
{
    struct delivery *dv = arg;
    struct pusher *p = dv->p;
    struct api *a = p->api;
    if (status < 0) { /* the kernel is stopping: the lease expires and a later start re-sends it */
        free(dv->url);
        free(dv);
        return;
    }
    p->in_flight--;
    if (status >= 200 && status < 300) {
        a->deliveries_ok++;
        p->failures = 0;
        p->retry_at = 0;
        record_delivery(a, dv->exec_id, dv->dispatch_id, dv->attempt, NULL);
    } else {
        char reason[300];
        if (status) snprintf(reason, sizeof reason, "webhook answered HTTP %ld", status);
        else snprintf(reason, sizeof reason, "webhook unreachable: %.250s", why && *why ? why : "no reply");
        p->failures++;
        a->deliveries_failed++;
        int64_t wait = backoff_ms(p->failures);
        p->retry_at = clock_now_ms() + wait;
        log_warn("webhook delivery failed; the attempt ends and the dispatch is retried",
                 "agent=%s execution=%s attempt=%lld url=\"%s\" error=\"%s\" retry_in_ms=%lld", p->agent, dv->exec_id,
                 (long long)dv->attempt, dv->url, reason, (long long)wait);
        record_delivery(a, dv->exec_id, dv->dispatch_id, dv->attempt, reason);
    }
    free(dv->url);
    free(dv);
    pusher_pump(p);
}

static char *dispatch_body(const struct push *x)
{
    json_t *b = json_pack("{s:s, s:s, s:I, s:I}", "execution_id", x->exec_id, "dispatch_id", x->dispatch_id,
                          "dispatch_attempt", (json_int_t)x->attempt, "lease_timeout_seconds", (json_int_t)x->lease_s);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

static void push_webhook(struct api *a, struct push *x)
{
    struct pusher *p = x->p;
    struct kernel_agent_info info;
    if (!kernel_agent_info(a->k, p->agent, &info) || !info.webhook_url) {
        p->in_flight--;
        record_delivery(a, x->exec_id, x->dispatch_id, x->attempt, "the agent has no webhook_url any more");
        return;
    }
    char *body = dispatch_body(x);
    char sig[SIG_HEX_LEN];
    sig_body(info.secret ? info.secret : "", body, strlen(body), sig);
    char h_sig[96], h_exec[80], h_did[80], h_att[48];
    snprintf(h_sig, sizeof h_sig, "Rebuno-Signature: sha256=%s", sig);
    snprintf(h_exec, sizeof h_exec, "Rebuno-Execution-Id: %s", x->exec_id);
    snprintf(h_did, sizeof h_did, "Rebuno-Dispatch-Id: %s", x->dispatch_id);
    snprintf(h_att, sizeof h_att, "Rebuno-Dispatch-Attempt: %lld", (long long)x->attempt);
    const char *hdrs[] = {"Content-Type: application/json", h_sig, h_exec, h_did, h_att, NULL};
    struct delivery *dv = xcalloc(1, sizeof *dv);
    dv->p = p;
    memcpy(dv->exec_id, x->exec_id, sizeof dv->exec_id);
    memcpy(dv->dispatch_id, x->dispatch_id, sizeof dv->dispatch_id);
    dv->attempt = x->attempt;
    dv->url = xstrdup(info.webhook_url);
    long timeout = HOOK_TIMEOUT_MS;
    if (x->lease_s > 0 && x->lease_s * 1000 < timeout) timeout = (long)(x->lease_s * 1000);
    if (webhook_post(a->hooks, info.webhook_url, hdrs, body, strlen(body), timeout, delivered, dv) < 0)
        delivered(dv, 0, "the request could not be started");
    free(body);
}

/* After the batch that claimed them commits: hand each dispatch over (or, when the
 * commit failed, forget it: the claims were rolled back). */
static void pushes_send(struct api *a, bool committed)
{
    struct push *x = a->pushes;
    a->pushes = NULL;
    a->pushes_tail = &a->pushes;
    while (x) {
        struct push *next = x->next;
        if (!committed) {
            if (!x->stream) x->p->in_flight--;
        } else if (x->stream) {
            char *body = dispatch_body(x);
            int rc = x->c && x->c->req ? http_sse_send(x->c->req, x->dispatch_id, "dispatch", body) : -EPIPE;
            free(body);
            if (rc < 0) /* the stream is gone or stuck: another consumer gets the next attempt */
                record_delivery(a, x->exec_id, x->dispatch_id, x->attempt, "the dispatch stream could not take it");
        } else {
            push_webhook(a, x);
        }
        free(x);
        x = next;
    }
}

static void consumer_free(struct consumer *c)
{
    struct pusher *p = c->p;
    if (c->prev) c->prev->next = c->next;
    else p->consumers = c->next;
    if (c->next) c->next->prev = c->prev;
    if (p->next_consumer == c) p->next_consumer = c->next;
    for (struct push *x = p->api->pushes; x; x = x->next)
        if (x->c == c) x->c = NULL; /* claimed for it: recorded as failed after the commit */
    event_free(c->keepalive);
    free(c->id);
    free(c);
}

static void consumer_closed(struct http_req *r, void *arg)
{
    struct consumer *c = arg;
    c->req = NULL;
    consumer_free(c);
}

static void consumer_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct consumer *c = arg;
    if (c->req) http_sse_comment(c->req, "keep-alive");
}

/* GET /v0/agents/stream?agent_id=&consumer_id=: upstream's pull-by-stream dispatch. Each
 * dispatch is one SSE event "dispatch" with the webhook's body as data. */
static void h_agent_stream(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    const char *agent = http_req_query(r, "agent_id"), *cid = http_req_query(r, "consumer_id");
    struct caller who = caller_of(r);
    if (!agent || !name_agent_valid(agent)) {
        err_invalid(&err, "agent_id", "agent_id: required, 1..%d letters, digits and _ . : -", NAME_AGENT_MAX);
        goto fail;
    }
    if (cid && (strlen(cid) > 128 || !name_valid(cid, 128, "_.:-"))) {
        err_invalid(&err, "consumer_id", "consumer_id: 1..128 letters, digits and _ . : -");
        goto fail;
    }
    if (who.agent && strcmp(who.agent, agent) != 0) {
        err_set(&err, 403, "forbidden", "agent_id", "this caller is agent %s, not %s", who.agent, agent);
        goto fail;
    }
    struct kernel_agent_info info;
    if (!kernel_agent_info(a->k, agent, &info)) {
        err_set(&err, 404, "not_found", "agent_id", "no agent named \"%s\"; add it under agents: in the config", agent);
        goto fail;
    }
    struct pusher *p = ensure_pusher(a, agent);
    struct consumer *c = xcalloc(1, sizeof *c);
    c->p = p;
    c->req = r;
    c->id = xstrdup(cid ? cid : "");
    c->next = p->consumers;
    if (p->consumers) p->consumers->prev = c;
    p->consumers = c;
    c->keepalive = event_new(a->base, -1, EV_PERSIST, consumer_keepalive, c);
    struct timeval tv = {KEEPALIVE_MS / 1000, 0};
    event_add(c->keepalive, &tv);
    http_req_on_close(r, consumer_closed, c);
    http_sse_start(r);
    pusher_pump(p);
    return;
fail:
    reply_err(a, r, &err);
}

/* --- agent calls on an execution --- */

struct agent_ctx {
    struct dispatch_ref d;
    json_t *body;
    const char *args_text;
    size_t args_len;
    const char *kind, *target, *error, *request_id;
    enum idempotency idem;
    bool ok;
};

static int op_heartbeat(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct agent_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_heartbeat(a->k, &who, http_req_param(r, "id"), &c->d, out, err);
}

static void h_heartbeat(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    struct agent_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0) {
        http_reply_err(r, &err);
        return;
    }
    run_op(a, r, 204, op_heartbeat, &c);
}

static int op_complete(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct agent_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_complete(a->k, &who, http_req_param(r, "id"), &c->d, json_object_get(c->body, "output"),
                           json_object_get(c->body, "state"), out, err);
}

static void h_complete(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"output", "state", NULL};
    struct err err = ERR_INIT;
    struct agent_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err))) {
        http_reply_err(r, &err);
        return;
    }
    run_op(a, r, 204, op_complete, &c);
    json_decref(c.body);
}

static int op_fail(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct agent_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_fail(a->k, &who, http_req_param(r, "id"), &c->d, c->error, out, err);
}

static void h_fail(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"error", NULL};
    struct err err = ERR_INIT;
    struct agent_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err)) ||
        get_str(c.body, "error", true, 4096, &c.error, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(c.body);
        return;
    }
    run_op(a, r, 204, op_fail, &c);
    json_decref(c.body);
}

static int op_submit(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct agent_ctx *c = ctx;
    struct caller who = caller_of(r);
    json_t *args = json_object_get(c->body, "args");
    json_t *resources = json_object_get(c->body, "resources");
    return kernel_submit_step(a->k, &who, http_req_param(r, "id"), &c->d, c->kind, c->target, c->args_text,
                              c->args_len, args, json_is_array(resources) ? resources : NULL, c->idem,
                              c->request_id, out, err);
}

/* A submission waiting for the judge model's verdict (judge.h). */
struct judge_call {
    struct api *a;
    struct http_req *r; /* NULL once the agent went away */
    struct agent_ctx c; /* body held */
    struct kernel_judge_request q;
};

static void submit_run(struct api *a, struct http_req *r, struct agent_ctx *c);

static void judge_closed(struct http_req *r, void *arg)
{
    ((struct judge_call *)arg)->r = NULL;
}

static void judge_call_free(struct judge_call *j)
{
    json_decref(j->c.body);
    kernel_judge_request_fini(&j->q);
    free(j);
}

static void judge_answered(void *arg, long status, const char *why, const char *reply, size_t len)
{
    struct judge_call *j = arg;
    if (j->r && status < 0) http_req_on_close(j->r, NULL, NULL);
    if (status >= 0 && j->r) {
        char reason[300];
        enum policy_decision d = judge_verdict(&j->q, status, why, reply, reason, sizeof reason);
        if (status != 200 || strncmp(reason, "judge unavailable", 17) == 0)
            log_warn("the judge model gave no verdict; the rule's fallback applies", "step=%s reason=\"%s\"",
                     j->q.step_id, reason);
        http_req_on_close(j->r, NULL, NULL);
        kernel_set_judge_verdict(j->a->k, j->q.step_id, d, reason);
        submit_run(j->a, j->r, &j->c);
    }
    judge_call_free(j);
}

/* Ask the judge about the step the kernel just refused to decide alone; the submission
 * runs again with the verdict when the model answers (or fails to within the timeout). */
static void judge_ask(struct api *a, struct http_req *r, struct agent_ctx *c)
{
    struct judge_call *j = xcalloc(1, sizeof *j);
    j->a = a;
    j->r = r;
    j->c = *c;
    json_incref(j->c.body);
    if (!kernel_take_judge_request(a->k, &j->q)) {
        judge_call_free(j);
        http_reply_error(r, 500, "internal_error", "", "the judge request went missing");
        return;
    }
    size_t len;
    char *body = judge_request_body(a->judge_model, &j->q, &len);
    const char *hdrs[3] = {"Content-Type: application/json", a->judge_auth, NULL};
    http_req_on_close(r, judge_closed, j);
    if (!body || webhook_post_reply(a->hooks, a->judge_url, hdrs, body, len, a->judge_timeout_ms, judge_answered,
                                    j) < 0) {
        http_req_on_close(r, NULL, NULL);
        kernel_set_judge_verdict(a->k, j->q.step_id, j->q.fallback, "judge unavailable: the request could not start");
        submit_run(a, r, &j->c);
        judge_call_free(j);
    }
    free(body);
}

/* op_submit in the batch, asking the judge first when the step's rule says so. */
static void submit_run(struct api *a, struct http_req *r, struct agent_ctx *c)
{
    struct err err = ERR_INIT;
    json_t *out = NULL;
    bool again = false;
run:
    if (op_begin_as(a, true, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    int rc = op_submit(a, r, c, &out, &err);
    if (!op_end(a, rc == 0, &err)) {
        json_decref(out);
        out = NULL;
        rc = -1;
    }
    if (rc < 0 && !strcmp(err.code, "storage_conflict") && !again) {
        /* another replica held what this needs (a rate limit another replica decides under,
         * a row while this batch holds a rate limit's lock, or a deadlock) while this batch
         * holds other operations' locks: commit them, then run this again first in a new
         * batch, where it may wait (store_rule_steps_since) */
        flush(a);
        err = (struct err)ERR_INIT;
        again = true;
        goto run;
    }
    if (rc < 0 && !strcmp(err.code, "judge_pending") && a->judge_url) judge_ask(a, r, c);
    else if (rc < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

void api_set_judge(struct api *a, const char *url, const char *model, const char *key, long timeout_ms)
{
    free(a->judge_url);
    free(a->judge_model);
    free(a->judge_auth);
    a->judge_url = url && *url ? xstrdup(url) : NULL;
    a->judge_model = xstrdup(model ? model : "");
    a->judge_auth = key && *key ? xasprintf("Authorization: Bearer %s", key) : NULL;
    a->judge_timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
}

static void h_submit(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"kind", "target", "args", "idempotency", "resources", "request_id", NULL};
    struct err err = ERR_INIT;
    struct agent_ctx c = {0};
    const char *idem = NULL;
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err)) ||
        get_str(c.body, "kind", true, 32, &c.kind, &err) < 0 ||
        get_str(c.body, "target", true, 256, &c.target, &err) < 0 ||
        get_str(c.body, "idempotency", false, 32, &idem, &err) < 0 ||
        get_str(c.body, "request_id", false, 64, &c.request_id, &err) < 0 ||
        check_array(c.body, "resources", 32, check_resource_key, &err) < 0)
        goto fail;
    if (strcmp(c.kind, "tool_call") != 0 && strcmp(c.kind, "llm_call") != 0 && strcmp(c.kind, "local") != 0) {
        err_invalid(&err, "kind", "kind: one of tool_call, llm_call, local (got \"%s\")", c.kind);
        goto fail;
    }
    if (idem && idempotency_parse(idem, &c.idem) < 0) {
        err_invalid(&err, "idempotency", "idempotency: safe_to_retry or at_most_once (got \"%s\")", idem);
        goto fail;
    }
    if (strcmp(c.kind, "llm_call") == 0) c.idem = IDEM_SAFE_TO_RETRY; /* a model call has no outside effect */
    size_t len;
    const char *body = http_req_body(r, &len);
    int found = identity_find_member(body, len, "args", &c.args_text, &c.args_len, &err);
    if (found < 0) goto fail;
    if (!found) c.args_text = NULL;
    submit_run(a, r, &c);
    json_decref(c.body);
    return;
fail:
    http_reply_err(r, &err);
    json_decref(c.body);
}

static int op_finish_step(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct agent_ctx *c = ctx;
    struct caller who = caller_of(r);
    json_t *v = json_object_get(c->body, c->ok ? "result" : "error");
    json_t *caps = json_object_get(c->body, "captures"), *fails = json_object_get(c->body, "capture_failures");
    return kernel_finish_step(a->k, &who, http_req_param(r, "id"), &c->d, http_req_param(r, "step"), c->ok, v,
                              json_is_array(caps) ? caps : NULL, json_is_array(fails) ? fails : NULL, out, err);
}

static void finish_step(struct api *a, struct http_req *r, bool ok)
{
    static const char *const ok_fields[] = {"result", "captures", "capture_failures", NULL};
    static const char *const fail_fields[] = {"error", "captures", "capture_failures", NULL};
    struct err err = ERR_INIT;
    struct agent_ctx c = {.ok = ok};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, ok ? ok_fields : fail_fields, &err)) ||
        check_array(c.body, "captures", 64, check_capture, &err) < 0 ||
        check_array(c.body, "capture_failures", 64, check_failure, &err) < 0) {
        http_reply_err(r, &err);
        return;
    }
    if (!ok && !json_object_get(c.body, "error")) {
        err_invalid(&err, "error", "error: required (any JSON value describing the failure)");
        http_reply_err(r, &err);
        json_decref(c.body);
        return;
    }
    run_op_as(a, r, 200, op_finish_step, &c, true);
    json_decref(c.body);
}

static void h_step_complete(struct api *a, struct http_req *r)
{
    finish_step(a, r, true);
}

static void h_step_fail(struct api *a, struct http_req *r)
{
    finish_step(a, r, false);
}

/* --- sessions, resources, forks --- */

static void h_previous(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    struct caller who = caller_of(r);
    if (kernel_previous(a->k, &who, http_req_param(r, "id"), &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

static void h_resources(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    struct caller who = caller_of(r);
    if (kernel_resources(a->k, &who, http_req_param(r, "id"), &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

struct resource_ctx {
    struct dispatch_ref d;
    struct resource_spec spec;
    json_t *body;
};

static int op_register(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct resource_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_resource_register(a->k, &who, http_req_param(r, "id"), &c->d, &c->spec, out, err);
}

static int get_bool(const json_t *body, const char *key, bool def, bool *out, struct err *err)
{
    json_t *v = json_object_get(body, key);
    *out = def;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return err_invalid(err, key, "%s: must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static void h_register(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"key", "driver_id", "configuration", "coverage_reuse", "every_steps",
                                         "on_completion", NULL};
    struct err err = ERR_INIT;
    struct resource_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err)) ||
        get_str(c.body, "key", true, 128, &c.spec.key, &err) < 0 ||
        get_str(c.body, "driver_id", true, 256, &c.spec.driver_id, &err) < 0 ||
        get_int(c.body, "every_steps", 0, 1000000, &c.spec.every_steps, &err) < 0 ||
        get_bool(c.body, "coverage_reuse", false, &c.spec.coverage_reuse, &err) < 0 ||
        get_bool(c.body, "on_completion", true, &c.spec.on_completion, &err) < 0)
        goto fail;
    if (!kernel_resource_key_valid(c.spec.key)) {
        err_invalid(&err, "key", "key: 1..128 of [A-Za-z0-9_.-]");
        goto fail;
    }
    c.spec.configuration = json_object_get(c.body, "configuration");
    run_op(a, r, 200, op_register, &c);
    json_decref(c.body);
    return;
fail:
    http_reply_err(r, &err);
    json_decref(c.body);
}

static int op_bind(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct resource_ctx *c = ctx;
    struct caller who = caller_of(r);
    *out = NULL;
    return kernel_resource_bind(a->k, &who, http_req_param(r, "id"), &c->d, http_req_param(r, "key"),
                                json_object_get(c->body, "binding"), err);
}

static void h_bind(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"binding", NULL};
    struct err err = ERR_INIT;
    struct resource_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err))) goto fail;
    json_t *b = json_object_get(c.body, "binding");
    if (!b || json_is_null(b)) {
        err_invalid(&err, "binding", "binding: required (the driver's JSON locator of the resource)");
        goto fail;
    }
    run_op(a, r, 204, op_bind, &c);
    json_decref(c.body);
    return;
fail:
    http_reply_err(r, &err);
    json_decref(c.body);
}

static int op_checkpoints(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct resource_ctx *c = ctx;
    struct caller who = caller_of(r);
    json_t *caps = json_object_get(c->body, "captures"), *fails = json_object_get(c->body, "capture_failures");
    return kernel_checkpoints(a->k, &who, http_req_param(r, "id"), &c->d, json_is_array(caps) ? caps : NULL,
                              json_is_array(fails) ? fails : NULL, out, err);
}

static void h_checkpoints(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"captures", "capture_failures", NULL};
    struct err err = ERR_INIT;
    struct resource_ctx c = {0};
    if (dispatch_ref(r, &c.d, &err) < 0 || !(c.body = body_json(r, fields, &err)) ||
        check_array(c.body, "captures", 64, check_capture, &err) < 0 ||
        check_array(c.body, "capture_failures", 64, check_failure, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(c.body);
        return;
    }
    run_op(a, r, 200, op_checkpoints, &c);
    json_decref(c.body);
}

struct fork_ctx {
    int64_t at_seq;
    const char *session;
};

static int op_fork(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct fork_ctx *c = ctx;
    struct caller who = caller_of(r);
    return kernel_fork(a->k, &who, http_req_param(r, "id"), c->at_seq, c->session, out, err);
}

static void h_fork(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"at_seq", "session", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct fork_ctx c = {0, NULL};
    if (!b || get_int(b, "at_seq", 1, INT64_MAX, &c.at_seq, &err) < 0 ||
        get_str(b, "session", false, 128, &c.session, &err) < 0 || check_session(c.session, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    if (c.at_seq == 0) {
        err_invalid(&err, "at_seq", "at_seq: required (the event to fork at; see fork-points)");
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    run_op(a, r, 201, op_fork, &c);
    json_decref(b);
}

static void h_fork_points(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    int64_t after = 0, limit = 1000;
    json_t *out;
    struct caller who = caller_of(r);
    if (query_int(r, "after", 0, INT64_MAX, &after, &err) < 0 || query_int(r, "limit", 1, 10000, &limit, &err) < 0 ||
        kernel_fork_points(a->k, &who, http_req_param(r, "id"), after, (int)limit, &out, &err) < 0)
        reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

/* --- approvals --- */

static void h_approvals(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    const char *status = http_req_query(r, "status"), *exec = http_req_query(r, "execution_id");
    enum approval_status st;
    if (status && strcmp(status, "all") == 0) status = NULL;
    if (status && approval_status_parse(status, &st) < 0) {
        err_invalid(&err, "status", "status: one of pending, granted, denied, expired, all");
        reply_err(a, r, &err);
        return;
    }
    json_t *out;
    if (kernel_approvals(a->k, status, exec, &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, unwrap(out, "approvals"));
}

static void h_approval_get(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    if (kernel_approval_get(a->k, http_req_param(r, "id"), &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

struct decide_ctx {
    bool approve;
    const char *by, *reason;
};

static int op_decide(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct decide_ctx *c = ctx;
    return kernel_approval_decide(a->k, http_req_param(r, "id"), c->approve, c->by, c->reason, out, err);
}

static void decide(struct api *a, struct http_req *r, bool approve)
{
    static const char *const fields[] = {"decided_by", "rationale", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct decide_ctx c = {approve, NULL, NULL};
    if (!b || get_str(b, "decided_by", true, 256, &c.by, &err) < 0 ||
        get_str(b, "rationale", false, 4096, &c.reason, &err) < 0) {
        http_reply_err(r, &err);
        json_decref(b);
        return;
    }
    run_op(a, r, 204, op_decide, &c);
    json_decref(b);
}

static void h_grant(struct api *a, struct http_req *r)
{
    decide(a, r, true);
}

static void h_deny(struct api *a, struct http_req *r)
{
    decide(a, r, false);
}

static void h_health(struct api *a, struct http_req *r)
{
    http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* --- changes committed by other replicas --- */

static void watch_arm(struct api *a);

static void pump_exec(struct api *a, const char *exec_id)
{
    for (struct watcher *w = a->watchers, *next; w; w = next) {
        next = w->next;
        if (!exec_id || strcmp(w->exec_id, exec_id) == 0) pump(w);
    }
}

static void on_change(char kind, const char *name, void *arg)
{
    struct api *a = arg;
    if (kind == 'a') {
        wake_agent(a, name);
    } else if (kind == 'k') { /* an API key changed on another replica */
        api_keys_changed(a->rkeys);
        api_keys_refresh(a->rkeys, false);
    } else if (kind == 'c') { /* an agent or its policy changed on another replica */
        kernel_agent_reload(a->k, name);
        struct kernel_agent_info info;
        if (kernel_agent_info(a->k, name, &info) && info.webhook_url) pusher_pump(ensure_pusher(a, name));
    } else if (kind == 'e') {
        pump_exec(a, name);
        list_notify(a, name);
    } else { /* anything may have changed: every agent someone waits for, every watcher */
        int n = 0;
        for (struct waiter *w = a->waiters; w; w = w->next) n++;
        char **agents = xcalloc((size_t)n + 1, sizeof *agents);
        int k = 0;
        for (struct waiter *w = a->waiters; w; w = w->next) {
            bool seen = false;
            for (int i = 0; i < k && !seen; i++) seen = strcmp(agents[i], w->agent) == 0;
            if (!seen) agents[k++] = xstrdup(w->agent);
        }
        for (int i = 0; i < k; i++) {
            wake_agent(a, agents[i]);
            free(agents[i]);
        }
        free(agents);
        for (struct pusher *p = a->pushers; p; p = p->next) pusher_pump(p); /* webhook/stream agents */
        pump_exec(a, NULL);
        list_resync_all(a);
    }
}

static void watch_cb(evutil_socket_t fd, short what, void *arg)
{
    struct api *a = arg;
    if (store_watch_read(a->st, on_change, a) < 0) {
        log_warn("lost the PostgreSQL listener; reconnecting", "%s", "");
        /* its descriptor is closed: a new one may get the same number, so always re-add */
        event_free(a->watch_ev);
        a->watch_ev = NULL;
        a->watch_fd = -1;
    }
    watch_arm(a);
}

/* (Re-)register the listener's descriptor, which changes when it reconnects. */
static void watch_arm(struct api *a)
{
    int fd = store_watch_fd(a->st);
    if (fd == a->watch_fd && (fd < 0 || a->watch_ev)) return;
    if (a->watch_ev) event_free(a->watch_ev);
    a->watch_ev = NULL;
    a->watch_fd = fd;
    if (fd < 0) return;
    a->watch_ev = event_new(a->base, fd, EV_READ | EV_PERSIST, watch_cb, a);
    event_add(a->watch_ev, NULL);
    event_active(a->watch_ev, EV_READ, 0); /* a new listener: report the gap */
}

static int ready_noop(const char *name, void *arg)
{
    return 0;
}

/* Ready when the store answers a read (upstream pings its database). */
static void h_ready(struct api *a, struct http_req *r)
{
    if (store_agents_each(a->st, ready_noop, NULL) < 0) http_reply_json(r, 503, json_pack("{s:s}", "status", "unavailable"));
    else http_reply_json(r, 200, json_pack("{s:s}", "status", "ready"));
}

/* --- agents and policies at run time (admin) --- */

struct register_ctx {
    const char *id, *webhook_url, *secret;
    int64_t lease_s;
};

static int op_register_agent(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct register_ctx *c = ctx;
    if (kernel_agent_register(a->k, c->id, c->lease_s * 1000, c->webhook_url, c->secret, err) < 0) return -1;
    json_t *all;
    if (kernel_agents(a->k, &all, err) < 0) return -1;
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(all, "agents"), i, v) if (strcmp(json_string_value(json_object_get(v, "id")),
                                                                        c->id) == 0) *out = json_incref(v);
    json_decref(all);
    return 0;
}

/* POST /v0/agents {id, webhook_url?, secret?, lease_timeout_seconds?}: upstream's upsert. */
static void h_register_agent(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"id", "webhook_url", "secret", "lease_timeout_seconds", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    struct register_ctx c = {0};
    char why[160];
    if (!b || get_str(b, "id", true, NAME_AGENT_MAX, &c.id, &err) < 0 ||
        get_str(b, "webhook_url", false, NAME_URL_MAX, &c.webhook_url, &err) < 0 ||
        get_str(b, "secret", false, 1024, &c.secret, &err) < 0 ||
        get_int(b, "lease_timeout_seconds", 1, 86400, &c.lease_s, &err) < 0)
        goto fail;
    if (!name_agent_valid(c.id)) {
        err_invalid(&err, "id", "id: use 1..%d letters, digits and _ . : -", NAME_AGENT_MAX);
        goto fail;
    }
    if (c.webhook_url && !*c.webhook_url) c.webhook_url = NULL;
    if (c.secret && !*c.secret) c.secret = NULL;
    if (c.webhook_url && !name_http_url_valid(c.webhook_url, why, sizeof why)) {
        err_invalid(&err, "webhook_url", "webhook_url %s", why);
        goto fail;
    }
    if (c.webhook_url && !c.secret) {
        err_invalid(&err, "secret", "secret: required with a webhook_url (every webhook is signed with it)");
        goto fail;
    }
    run_op(a, r, 201, op_register_agent, &c);
    if (c.webhook_url) {
        probe_webhook(a, c.id, c.webhook_url);
        pusher_pump(ensure_pusher(a, c.id));
    }
    json_decref(b);
    return;
fail:
    http_reply_err(r, &err);
    json_decref(b);
}

struct policy_ctx {
    const char *agent;
    struct policy *pol;
};

static int op_set_policy(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    struct policy_ctx *c = ctx;
    struct policy *pol = c->pol;
    c->pol = NULL; /* the kernel owns it now, whatever happens */
    return kernel_agent_set_policy(a->k, c->agent, pol, err);
}

/* POST /v0/policies/{agent} {bundle}: replace the agent's policy (kept in the store). */
static void h_set_policy(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"bundle", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    const char *bundle;
    if (!b || get_str(b, "bundle", true, 1 << 20, &bundle, &err) < 0) goto fail;
    struct policy_ctx c = {http_req_param(r, "agent"), policy_load_string(bundle, strlen(bundle), "bundle", 0, &err)};
    if (!c.pol) {
        err_invalid(&err, "bundle", "bundle: %.400s", err.msg);
        goto fail;
    }
    run_op(a, r, 204, op_set_policy, &c);
    policy_free(c.pol);
    json_decref(b);
    return;
fail:
    http_reply_err(r, &err);
    json_decref(b);
}

static int op_delete_agent(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    return kernel_agent_delete(a->k, ctx, err);
}

/* DELETE /v0/agents/{id}: upstream's; 204, 404 unknown, 409 while it has live executions. */
static void h_delete_agent(struct api *a, struct http_req *r)
{
    run_op(a, r, 204, op_delete_agent, (void *)http_req_param(r, "agent"));
}

/* --- upstream's run-time API keys (api_keys.c) --- */

static int op_key_create(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    return api_keys_create(a->rkeys, ctx, out, err);
}

/* POST /v0/api-keys {name, scopes}: 201 {id, name, scopes, created_at, prefix, token}. */
static void h_key_create(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"name", "scopes", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err);
    if (!b) {
        http_reply_err(r, &err);
        return;
    }
    http_add_header(r, "Cache-Control", "no-store"); /* the token is in the reply */
    run_op(a, r, 201, op_key_create, b);
    json_decref(b);
}

static void h_key_list(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *out;
    if (api_keys_list(a->rkeys, &out, &err) < 0) reply_err(a, r, &err);
    else reply(a, r, 200, out);
}

static int op_key_rotate(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    return api_keys_rotate(a->rkeys, http_req_param(r, "id"), out, err);
}

static void h_key_rotate(struct api *a, struct http_req *r)
{
    http_add_header(r, "Cache-Control", "no-store");
    run_op(a, r, 200, op_key_rotate, NULL);
}

static int op_key_revoke(struct api *a, struct http_req *r, void *ctx, json_t **out, struct err *err)
{
    return api_keys_revoke(a->rkeys, http_req_param(r, "id"), err);
}

static void h_key_revoke(struct api *a, struct http_req *r)
{
    run_op(a, r, 204, op_key_revoke, NULL);
}

/* GET /v0/policies/{agent}: the agent's policy as stored (upstream shows it only as the
 * agent view's policy_bundle) with its rules in evaluation order. */
static void h_get_policy(struct api *a, struct http_req *r)
{
    const char *agent = http_req_param(r, "agent");
    struct kernel_agent_info info;
    if (!kernel_agent_info(a->k, agent, &info)) {
        http_reply_error(r, 404, "not_found", "agent_id", "no agent named \"%s\"; list them with GET /v0/agents",
                         agent);
        return;
    }
    json_t *out = json_pack("{s:s, s:b, s:s, s:o}", "agent_id", agent, "has_policy", info.policy != NULL,
                            "default_action", policy_decision_name(policy_default_action(info.policy)), "rules",
                            policy_rules_json(info.policy));
    if (info.policy) json_object_set_new(out, "bundle", json_string(policy_source(info.policy)));
    http_reply_json(r, 200, out);
}

/* POST /v0/policies/{agent}/test {bundle?, cases? | execution_id? | executions?}: upstream's dry run.
 * Evaluates cases (or an execution's recorded steps) against bundle, or the agent's
 * stored policy when bundle is absent; stores nothing. */
static void h_test_policy(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"bundle", "cases", "execution_id", "executions", NULL};
    struct err err = ERR_INIT;
    const char *agent = http_req_param(r, "agent");
    json_t *b = body_json(r, fields, &err), *cases = NULL, *report = NULL;
    struct policy *own = NULL;
    struct kernel_agent_info info;
    const char *bundle, *exec_id;
    if (!b || get_str(b, "bundle", false, POLICY_MAX_BYTES, &bundle, &err) < 0 ||
        get_str(b, "execution_id", false, UUID_STR_LEN, &exec_id, &err) < 0)
        goto fail;
    if (!kernel_agent_info(a->k, agent, &info)) {
        err_set(&err, 404, "not_found", "agent_id", "no agent named \"%s\"; list them with GET /v0/agents", agent);
        goto fail;
    }
    json_t *given = json_object_get(b, "cases"), *range = json_object_get(b, "executions");
    bool has_cases = given && !json_is_null(given), has_range = range && !json_is_null(range);
    if (!has_cases && !exec_id && !has_range) {
        err_invalid(&err, "cases", "cases: required (a list of {kind, target, args, expect?}), or give execution_id "
                                   "or executions to replay recorded steps");
        goto fail;
    }
    if (has_cases + (exec_id != NULL) + has_range > 1) {
        err_invalid(&err, has_range ? "executions" : "execution_id",
                    "%s: give one of cases, execution_id and executions", has_range ? "executions" : "execution_id");
        goto fail;
    }
    const char *session = NULL, *since = NULL;
    int64_t since_ms = 0, limit = 50;
    if (has_range) {
        static const char *const rfields[] = {"session", "since", "limit", NULL};
        if (!json_is_object(range)) {
            err_invalid(&err, "executions", "executions: must be an object {session?, since?, limit?}");
            goto fail;
        }
        if (check_fields(range, rfields, &err) < 0 || get_str(range, "session", false, 128, &session, &err) < 0 ||
            get_str(range, "since", false, 64, &since, &err) < 0 || get_int(range, "limit", 1, 200, &limit, &err) < 0 ||
            check_session(session, &err) < 0)
            goto fail;
        if (since && clock_parse_iso(since, &since_ms) < 0) {
            err_invalid(&err, "since", "since: an RFC 3339 time, e.g. 2026-12-01T00:00:00Z");
            goto fail;
        }
    }
    if (bundle) {
        own = policy_load_string(bundle, strlen(bundle), "bundle", 0, &err);
        if (!own) {
            err_invalid(&err, "bundle", "bundle: %.400s", err.msg);
            goto fail;
        }
    }
    if (exec_id) {
        if (kernel_policy_replay_cases(a->k, agent, exec_id, &cases, &err) < 0) goto fail;
    } else if (has_range) {
        if (kernel_policy_replay_range(a->k, agent, session, since_ms, (int)limit, &cases, &err) < 0) goto fail;
    } else {
        cases = json_incref(given);
    }
    report = policy_run_cases(bundle ? own : info.policy, cases, agent, "cases", &err);
    if (!report) goto fail;
    http_reply_json(r, 200, report);
    goto done;
fail:
    http_reply_err(r, &err);
done:
    policy_free(own);
    json_decref(cases);
    json_decref(b);
}

/* --- live step deltas (best effort, never stored) --- */

static void delta_sub_free(struct delta_sub *d)
{
    struct api *a = d->api;
    if (d->prev) d->prev->next = d->next;
    else a->delta_subs = d->next;
    if (d->next) d->next->prev = d->prev;
    event_free(d->keepalive);
    free(d);
}

static void delta_sub_closed(struct http_req *r, void *arg)
{
    delta_sub_free(arg);
}

static void delta_keepalive(evutil_socket_t fd, short what, void *arg)
{
    http_sse_comment(((struct delta_sub *)arg)->req, "keep-alive");
}

/* GET /v0/executions/{id}/stream: SSE of the deltas agents post while a step runs. */
static void h_delta_stream(struct api *a, struct http_req *r)
{
    struct err err = ERR_INIT;
    json_t *exec;
    struct caller who = caller_of(r);
    if (kernel_get(a->k, &who, http_req_param(r, "id"), &exec, &err) < 0) {
        reply_err(a, r, &err);
        return;
    }
    struct delta_sub *d = xcalloc(1, sizeof *d);
    d->api = a;
    d->req = r;
    snprintf(d->exec_id, sizeof d->exec_id, "%s", json_string_value(json_object_get(exec, "id")));
    json_decref(exec);
    d->next = a->delta_subs;
    if (a->delta_subs) a->delta_subs->prev = d;
    a->delta_subs = d;
    d->keepalive = event_new(a->base, -1, EV_PERSIST, delta_keepalive, d);
    struct timeval tv = {KEEPALIVE_MS / 1000, 0};
    event_add(d->keepalive, &tv);
    http_req_on_close(r, delta_sub_closed, d);
    http_sse_start(r);
}

/* POST /v0/executions/{id}/steps/{step}/stream {seq, data}: 204; 409 unless executing. */
static void h_step_delta(struct api *a, struct http_req *r)
{
    static const char *const fields[] = {"seq", "data", NULL};
    struct err err = ERR_INIT;
    json_t *b = body_json(r, fields, &err), *step = NULL;
    const char *data;
    int64_t seq = -1;
    struct caller who = caller_of(r);
    if (!b || get_int(b, "seq", 0, INT64_MAX, &seq, &err) < 0 || get_str(b, "data", true, 7000, &data, &err) < 0)
        goto fail;
    if (seq < 0) {
        err_invalid(&err, "seq", "seq: required (the delta's position in the step's stream)");
        goto fail;
    }
    if (kernel_step_get(a->k, &who, http_req_param(r, "id"), http_req_param(r, "step"), &step, &err) < 0) goto fail;
    if (strcmp(json_string_value(json_object_get(step, "status")), "executing") != 0) {
        err_set(&err, 409, "conflict", "step_id", "step %s is %s, not executing; deltas are for a running step",
                http_req_param(r, "step"), json_string_value(json_object_get(step, "status")));
        goto fail;
    }
    json_t *frame = json_pack("{s:O, s:I, s:s}", "step_id", json_object_get(step, "step_id"), "seq", (json_int_t)seq,
                              "data", data);
    char *text = json_dumps(frame, JSON_COMPACT);
    json_decref(frame);
    const char *eid = json_string_value(json_object_get(step, "execution_id"));
    for (struct delta_sub *d = a->delta_subs; d; d = d->next)
        if (strcmp(d->exec_id, eid) == 0) http_sse_send(d->req, NULL, NULL, text); /* best effort */
    free(text);
    a->deltas++;
    json_decref(step);
    json_decref(b);
    http_reply_json(r, 204, NULL);
    return;
fail:
    json_decref(step);
    json_decref(b);
    http_reply_err(r, &err);
}

/* GET /metrics: Prometheus text exposition of what the API layer counts. */
static void h_metrics(struct api *a, struct http_req *r)
{
    struct buf m;
    buf_init(&m, 0);
    int waiters = 0, watchers = 0, subs = 0;
    for (struct waiter *w = a->waiters; w; w = w->next) waiters++;
    for (struct watcher *w = a->watchers; w; w = w->next) watchers++;
    for (struct delta_sub *d = a->delta_subs; d; d = d->next) subs++;
    buf_printf(&m, "# TYPE rebuno_up gauge\nrebuno_up 1\n");
    buf_printf(&m, "# TYPE rebuno_claim_waiters gauge\nrebuno_claim_waiters %d\n", waiters);
    buf_printf(&m, "# TYPE rebuno_event_streams gauge\nrebuno_event_streams %d\n", watchers);
    buf_printf(&m, "# TYPE rebuno_delta_streams gauge\nrebuno_delta_streams %d\n", subs);
    buf_printf(&m, "# TYPE rebuno_step_deltas_total counter\nrebuno_step_deltas_total %lld\n", a->deltas);
    buf_printf(&m, "# TYPE rebuno_webhook_deliveries_total counter\n"
                   "rebuno_webhook_deliveries_total{result=\"ok\"} %lld\n"
                   "rebuno_webhook_deliveries_total{result=\"failed\"} %lld\n",
               a->deliveries_ok, a->deliveries_failed);
    long long kread, kunread;
    api_keys_stats(a->rkeys, &kread, &kunread);
    buf_printf(&m, "# TYPE rebuno_unknown_api_keys_total counter\n"
                   "rebuno_unknown_api_keys_total{result=\"read\"} %lld\n"
                   "rebuno_unknown_api_keys_total{result=\"refused_unread\"} %lld\n", kread, kunread);
    buf_printf(&m, "# TYPE rebuno_webhook_in_flight gauge\n# TYPE rebuno_dispatch_stream_consumers gauge\n");
    for (struct pusher *p = a->pushers; p; p = p->next) {
        int n = 0;
        for (struct consumer *c = p->consumers; c; c = c->next) n++;
        buf_printf(&m, "rebuno_webhook_in_flight{agent=\"%s\"} %d\n", p->agent, p->in_flight);
        buf_printf(&m, "rebuno_dispatch_stream_consumers{agent=\"%s\"} %d\n", p->agent, n);
    }
    http_reply_raw(r, 200, "text/plain; version=0.0.4", m.data, m.len);
    buf_fini(&m);
}

/* --- timers --- */

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct api *a = arg;
    watch_arm(a);
    api_keys_refresh(a->rkeys, false); /* revocations made on other replicas */
    int64_t now = clock_now_ms();
    for (struct pusher *p = a->pushers; p; p = p->next)
        if (p->retry_at && p->retry_at <= now) {
            p->retry_at = 0;
            pusher_pump(p);
        }
    int64_t due = kernel_next_due(a->k);
    if (due == 0 || due > now) return;
    struct err err = ERR_INIT;
    if (op_begin(a, &err) < 0) {
        log_error("sweep could not start", "error=\"%s\"", err.msg);
        return;
    }
    int n = kernel_sweep(a->k, now, &err);
    if (!op_end(a, n >= 0, &err)) n = -1;
    if (n < 0) log_error("sweep failed", "error=\"%s\"", err.msg);
}

/* --- setup --- */

/* Query parameters of the routes that take any. */
static const char *const q_list[] = {"agent_id", "status", "session", "created_after", "created_before",
                                     "cursor", "limit", NULL};
static const char *const q_counts[] = {"agent_id", "session", "created_after", "created_before", NULL};
static const char *const q_list_stream[] = {"agent_id", "status", "session", NULL};
static const char *const q_limit[] = {"limit", NULL};
static const char *const q_events[] = {"after_seq", "limit", NULL};
static const char *const q_page[] = {"after", "limit", NULL};
static const char *const q_stream[] = {"after_seq", NULL};
static const char *const q_steps[] = {"status", NULL};
static const char *const q_agent_stream[] = {"agent_id", "consumer_id", NULL};
static const char *const q_approvals[] = {"status", "execution_id", NULL};

static const struct route route_table[] = {
    {"GET", "/v0/health", P_PUBLIC, h_health, NULL, NULL},
    {"GET", "/v0/ready", P_PUBLIC, h_ready, NULL, NULL},
    {"GET", "/metrics", P_PUBLIC, h_metrics, NULL, NULL},
    {"POST", "/v0/agents", P_ADMIN, h_register_agent, NULL, NULL},
    {"POST", "/v0/policies/:agent", P_ADMIN, h_set_policy, NULL, NULL},
    {"GET", "/v0/policies/:agent", P_READ, h_get_policy, NULL, NULL},
    {"POST", "/v0/api-keys", P_ADMIN, h_key_create, NULL, NULL},
    {"GET", "/v0/api-keys", P_ADMIN, h_key_list, NULL, NULL},
    {"POST", "/v0/api-keys/:id/rotate", P_ADMIN, h_key_rotate, NULL, NULL},
    {"DELETE", "/v0/api-keys/:id", P_ADMIN, h_key_revoke, NULL, NULL},
    {"POST", "/v0/policies/:agent/test", P_ADMIN, h_test_policy, NULL, NULL},
    {"GET", "/v0/executions/:id/stream", P_READ, h_delta_stream, NULL, NULL},
    {"POST", "/v0/executions/:id/steps/:step/stream", P_AGENT, h_step_delta, NULL, NULL},
    {"POST", "/v0/executions", P_CLIENT, h_create, NULL, NULL},
    {"GET", "/v0/executions", P_READ, h_list, NULL, q_list},
    {"GET", "/v0/executions/counts", P_READ, h_counts, NULL, q_counts},
    {"GET", "/v0/executions/stream", P_READ, h_list_stream, NULL, q_list_stream},
    {"GET", "/v0/executions/:id/forks", P_READ, h_forks, NULL, q_limit},
    {"GET", "/v0/executions/:id", P_READ, h_get, NULL, NULL},
    {"POST", "/v0/executions/:id/cancel", P_CLIENT, h_cancel, NULL, NULL},
    {"GET", "/v0/executions/:id/events", P_READ, h_events, NULL, q_events},
    {"GET", "/v0/executions/:id/events/stream", P_READ, h_stream, NULL, q_stream},
    {"GET", "/v0/executions/:id/steps", P_READ, h_steps, NULL, q_steps},
    {"POST", "/v0/executions/:id/steps", P_AGENT, h_submit, NULL, NULL},
    {"GET", "/v0/executions/:id/steps/:step", P_READ, h_step_get, NULL, NULL},
    {"POST", "/v0/executions/:id/steps/:step/complete", P_AGENT, h_step_complete, NULL, NULL},
    {"POST", "/v0/executions/:id/steps/:step/fail", P_AGENT, h_step_fail, NULL, NULL},
    {"POST", "/v0/executions/:id/heartbeat", P_AGENT, h_heartbeat, NULL, NULL},
    {"POST", "/v0/executions/:id/complete", P_AGENT, h_complete, NULL, NULL},
    {"POST", "/v0/executions/:id/fail", P_AGENT, h_fail, NULL, NULL},
    {"GET", "/v0/executions/:id/previous", P_READ, h_previous, NULL, NULL},
    {"POST", "/v0/executions/:id/fork", P_CLIENT, h_fork, NULL, NULL},
    {"GET", "/v0/executions/:id/fork-points", P_READ, h_fork_points, NULL, q_page},
    {"GET", "/v0/executions/:id/resources", P_READ, h_resources, NULL, NULL},
    {"POST", "/v0/executions/:id/resources", P_AGENT, h_register, NULL, NULL},
    {"POST", "/v0/executions/:id/resources/:key/binding", P_AGENT, h_bind, NULL, NULL},
    {"POST", "/v0/executions/:id/resources/checkpoints", P_AGENT, h_checkpoints, NULL, NULL},
    {"GET", "/v0/agents", P_READ, h_agents, NULL, NULL},
    {"GET", "/v0/agents/stream", P_AGENT, h_agent_stream, NULL, q_agent_stream},
    {"GET", "/v0/agents/:agent", P_READ, h_agent_get, NULL, NULL},
    {"DELETE", "/v0/agents/:agent", P_ADMIN, h_delete_agent, NULL, NULL},
    {"POST", "/v0/agents/:agent/workers", P_AGENT, h_worker, NULL, NULL},
    {"POST", "/v0/agents/:agent/claim", P_AGENT, h_claim, NULL, NULL},
    {"GET", "/v0/approvals", P_CLIENT, h_approvals, NULL, q_approvals},
    {"GET", "/v0/approvals/:id", P_CLIENT, h_approval_get, NULL, NULL},
    {"POST", "/v0/approvals/:id/grant", P_APPROVE, h_grant, NULL, NULL},
    {"POST", "/v0/approvals/:id/deny", P_APPROVE, h_deny, NULL, NULL},
};

struct api *api_new(struct event_base *base, struct http_server *http, struct kernel *k,
                    const struct api_key_config *keys, int n_keys)
{
    struct api *a = xcalloc(1, sizeof *a);
    a->base = base;
    a->http = http;
    a->k = k;
    a->st = kernel_store(k);
    a->held_tail = &a->held;
    a->pushes_tail = &a->pushes;
    a->hooks = webhook_new(base);
    /* Lowest priority: runs only once the loop has no ready input left. */
    a->flush_ev = event_new(base, -1, 0, flush_cb, a);
    event_priority_set(a->flush_ev, event_base_get_npriorities(base) - 1);
    a->sweep_ev = event_new(base, -1, EV_PERSIST, sweep_cb, a);
    struct timeval tv = {0, SWEEP_INTERVAL_MS * 1000};
    event_add(a->sweep_ev, &tv);
    a->watch_fd = -1;
    watch_arm(a);
    a->rkeys = api_keys_new(a->st);
    a->keys = xcalloc((size_t)n_keys + 1, sizeof *a->keys);
    a->n_keys = n_keys;
    for (int i = 0; i < n_keys; i++) {
        key_hash(keys[i].key, a->keys[i].hash);
        a->keys[i].role = keys[i].role;
        a->keys[i].agent = keys[i].agent ? xstrdup(keys[i].agent) : NULL;
    }
    a->n_routes = (int)ARRAY_LEN(route_table);
    a->routes = xmalloc(sizeof route_table);
    memcpy(a->routes, route_table, sizeof route_table);
    for (int i = 0; i < a->n_routes; i++) {
        a->routes[i].api = a;
        http_route(http, a->routes[i].method, a->routes[i].pattern, route_entry, &a->routes[i]);
    }
    return a;
}

struct probe {
    char *agent, *url;
};

static void probed(void *arg, long status, const char *why)
{
    struct probe *pr = arg;
    if (status == 0)
        log_warn("webhook_url is not reachable now; dispatches to it will fail and be retried until it is",
                 "agent=%s url=\"%s\" error=\"%s\"", pr->agent, pr->url, why && *why ? why : "no connection");
    else if (status > 0)
        log_info("webhook_url reachable", "agent=%s url=\"%s\"", pr->agent, pr->url);
    free(pr->agent);
    free(pr->url);
    free(pr);
}

/* Say at once when an agent's webhook cannot be reached (it may come up later). */
static void probe_webhook(struct api *a, const char *agent, const char *url)
{
    struct probe *pr = xcalloc(1, sizeof *pr);
    pr->agent = xstrdup(agent);
    pr->url = xstrdup(url);
    if (webhook_probe(a->hooks, url, 5000, probed, pr) < 0) probed(pr, 0, "the probe could not start");
}

void api_start_dispatch(struct api *a)
{
    const char *agent;
    struct kernel_agent_info info;
    for (int i = 0; (agent = kernel_webhook_agent(a->k, i)); i++) {
        if (kernel_agent_info(a->k, agent, &info)) probe_webhook(a, agent, info.webhook_url);
        pusher_pump(ensure_pusher(a, agent));
    }
}

void api_set_local_auth(struct api *a, const struct local_auth *la)
{
    a->local = la;
}

bool api_has_keys(const struct api *a)
{
    return a->n_keys > 0;
}

void api_shutdown(struct api *a)
{
    a->shutting_down = true;
    flush(a);
    while (a->waiters) {
        struct waiter *w = a->waiters;
        struct http_req *r = w->req;
        http_req_on_close(r, NULL, NULL);
        waiter_free(w);
        http_reply_json(r, 204, NULL);
    }
    while (a->watchers) watcher_end(a->watchers);
    while (a->delta_subs) {
        struct http_req *r = a->delta_subs->req;
        http_req_on_close(r, NULL, NULL);
        delta_sub_free(a->delta_subs);
        http_sse_end(r);
    }
    while (a->list_subs) {
        struct http_req *r = a->list_subs->req;
        http_req_on_close(r, NULL, NULL);
        list_sub_free(a->list_subs);
        http_sse_end(r);
    }
    for (struct pusher *p = a->pushers; p; p = p->next)
        while (p->consumers) {
            struct http_req *r = p->consumers->req;
            http_req_on_close(r, NULL, NULL);
            consumer_free(p->consumers);
            http_sse_end(r);
        }
    event_del(a->sweep_ev);
    if (a->watch_ev) event_del(a->watch_ev);
}

void api_free(struct api *a)
{
    if (!a) return;
    flush(a);
    while (a->waiters) waiter_free(a->waiters);
    while (a->watchers) watcher_free(a->watchers);
    while (a->delta_subs) delta_sub_free(a->delta_subs);
    while (a->list_subs) list_sub_free(a->list_subs);
    webhook_free(a->hooks);
    while (a->pushers) {
        struct pusher *p = a->pushers;
        a->pushers = p->next;
        while (p->consumers) consumer_free(p->consumers);
        free(p->agent);
        free(p);
    }
    event_free(a->flush_ev);
    event_free(a->sweep_ev);
    if (a->watch_ev) event_free(a->watch_ev);
    for (int i = 0; i < a->n_keys; i++) free(a->keys[i].agent);
    free(a->keys);
    api_keys_free(a->rkeys);
    free(a->judge_url);
    free(a->judge_model);
    free(a->judge_auth);
    for (int i = 0; i < a->n_signers; i++) {
        free(a->signers[i]->agent);
        free(a->signers[i]);
    }
    free(a->signers);
    free(a->routes);
    free(a);
}
