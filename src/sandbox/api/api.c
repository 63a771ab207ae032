/*
 * api.c - the sandbox service's /v1 HTTP API (docs/sandbox-api.md).
 *
 * Handlers validate their input, find the sandbox (by id or name), resume it
 * lazily where the API says so, and call into sandbox.c / command.c / files.c.
 * Requests that wait (a command's start, its end, new output, stdin being
 * written, an SSE stream) become watches: small records in one list, which the API's
 * observer of command events (core/observe.h) goes through. A watch is freed right
 * after its reply, or when its client goes away.
 * File content travels as raw bytes (application/octet-stream) in chunks of at
 * most 16 MiB addressed by offset, so no file is ever held whole in memory.
 * Every call but health must carry the daemon's local token (auth_filter).
 */
#include "sandbox/core/sandboxd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "net/local_auth.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"
#include "sandbox/storage/pull.h"
#include "ui/ui.h"

#define JSON_BODY_MAX (1u << 20)
#define SSE_CHUNK (48u * 1024)
#define KEEPALIVE_SEC 15
#define WAIT_MAX_MS (300 * 1000)
#define LIST_MAX 1000

enum wkind { W_START, W_RUN, W_WAIT, W_OUTPUT, W_SSE, W_STDIN };

struct watch {
    struct watch *prev, *next;
    struct sbxd *d;
    struct http_req *req;
    struct sbx_cmd *cmd;
    enum wkind kind;
    struct event *timer;
    bool b64;
    int stream; /* W_OUTPUT: 1 stdout, 2 stderr */
    uint64_t off_out, off_err;
    size_t limit;
    struct sbx_stdin_waiter stdin_waiter; /* W_STDIN */
};

/* The API's observer of command events (observe.h). */
struct api_observer {
    struct sbx_observer o;
    struct sbxd *d;
};

/* ------------------------------------------------------------------ helpers */

static void reply_err(struct http_req *r, const struct err *e)
{
    http_reply_err(r, e);
}

static bool json_body(struct http_req *r, bool allow_empty, json_t **out)
{
    size_t len;
    http_req_body(r, &len);
    if (len > JSON_BODY_MAX) {
        http_reply_error(r, 413, "payload_too_large", "body", "JSON bodies are limited to %u bytes",
                         JSON_BODY_MAX);
        return false;
    }
    struct err err = ERR_INIT;
    *out = http_req_json(r, allow_empty, &err);
    if (!*out) {
        reply_err(r, &err);
        return false;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        http_reply_error(r, 400, "validation_error", "body", "the body must be a JSON object");
        return false;
    }
    return true;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s) return 0;
    if (!*s || strlen(s) > 20) return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

static bool query_u64(struct http_req *r, const char *key, uint64_t max, uint64_t *out)
{
    if (parse_u64(http_req_query(r, key), max, out) < 0) {
        http_reply_error(r, 400, "validation_error", key,
                         "%s must be a non-negative integer of at most %llu", key,
                         (unsigned long long)max);
        return false;
    }
    return true;
}

static bool query_bool(struct http_req *r, const char *key, bool *out)
{
    const char *v = http_req_query(r, key);
    if (!v) return true;
    if (!strcmp(v, "true") || !strcmp(v, "1")) *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0")) *out = false;
    else {
        http_reply_error(r, 400, "validation_error", key, "%s must be true or false", key);
        return false;
    }
    return true;
}

static struct sbx *get_sbx(struct sbxd *d, struct http_req *r)
{
    const char *ref = http_req_param(r, "ref");
    struct sbx *s = sbx_find(d, ref);
    if (!s)
        http_reply_error(r, 404, "sandbox_not_found", "", "no sandbox with id or name \"%.80s\"",
                         ref ? ref : "");
    return s;
}

/* ------------------------------------------------------------------ waiting for a stop */

/*
 * While a sandbox is stopping (sbx_busy: its init was killed and its teardown is under
 * way), requests that act on it are parked, and run once the stop is over: their
 * handler again (P_RERUN), or an answer the stop or delete request was waiting for.
 * The loop serves every other request meanwhile.
 */
enum pkind { P_RERUN, P_SANDBOX, P_DELETED };

struct parked {
    struct sbxd *d;
    struct http_req *r;
    enum pkind kind;
    http_handler_fn fn; /* P_RERUN */
    void *arg;
    int status;         /* P_SANDBOX: the reply's status and timing header */
    const char *header;
    int64_t t0;
    struct sbx_waiter *w;
};

static void parked_closed(struct http_req *r, void *arg)
{
    struct parked *p = arg;
    sbx_wait_cancel(p->d, p->w);
    free(p);
}

static void reply_sandbox(struct http_req *r, struct sbx *s, int status, const char *header,
                          int64_t t0)
{
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)(clock_mono_ms() - t0));
    http_add_header(r, header, v);
    http_reply_json(r, status, sbx_json(s, true));
}

static void parked_fire(struct sbxd *d, const char *id, void *arg)
{
    struct parked *p = arg;
    http_req_on_close(p->r, NULL, NULL);
    struct sbx *s = sbx_find_id(d, id);
    if (d->shutting_down && p->kind == P_RERUN) { /* it would resume a sandbox */
        http_reply_error(p->r, 503, "shutting_down", "", "the sandbox service is shutting down");
    } else if (p->kind == P_RERUN) {
        p->fn(p->r, p->arg); /* finds the sandbox again: it may be gone, or stopped */
    } else if (p->kind == P_SANDBOX && s && !s->deleting) {
        reply_sandbox(p->r, s, p->status, p->header, p->t0);
    } else if (p->kind == P_SANDBOX) {
        http_reply_error(p->r, 404, "sandbox_not_found", "", "sandbox %s was deleted", id);
    } else if (s) { /* P_DELETED, and the deletion failed: it is still there */
        http_reply_error(p->r, 500, "storage_error", "", "sandbox %s could not be deleted", id);
    } else {
        http_reply_raw(p->r, 204, NULL, NULL, 0);
    }
    free(p);
}

static void park(struct sbx *s, struct http_req *r, struct parked *p)
{
    p->d = s->d;
    p->r = r;
    p->t0 = clock_mono_ms();
    p->w = sbx_wait_quiet(s, parked_fire, p);
    http_req_on_close(r, parked_closed, p);
}

bool sbx_api_park(struct sbx *s, struct http_req *r, http_handler_fn fn, void *arg)
{
    if (!sbx_busy(s)) return false;
    struct parked *p = xcalloc(1, sizeof *p);
    p->kind = P_RERUN;
    p->fn = fn;
    p->arg = arg;
    park(s, r, p);
    return true;
}

void sbx_api_reply_quiet(struct sbx *s, struct http_req *r, int status, const char *header,
                         int64_t t0)
{
    if (!sbx_busy(s)) {
        reply_sandbox(r, s, status, header, t0);
        return;
    }
    struct parked *p = xcalloc(1, sizeof *p);
    p->kind = P_SANDBOX;
    p->status = status;
    p->header = header;
    park(s, r, p);
    p->t0 = t0;
}

/* The sandbox, unless it is stopping: then r is parked (fn, its handler, runs again
 * when the stop is over) and NULL is returned without a reply. */
static struct sbx *get_quiet(struct sbxd *d, struct http_req *r, http_handler_fn fn)
{
    struct sbx *s = get_sbx(d, r);
    return s && sbx_api_park(s, r, fn, d) ? NULL : s;
}

/* The sandbox, resumed if it was stopped or paused (unless pinned to a session).
 * While it is stopping, r waits for that (see get_quiet). */
static struct sbx *get_running(struct sbxd *d, struct http_req *r, const char *session,
                               http_handler_fn fn)
{
    struct sbx *s = get_quiet(d, r, fn);
    if (!s) return NULL;
    if (!session) session = http_req_query(r, "session");
    struct err err = ERR_INIT;
    if (sbx_ensure_running(s, session, &err) < 0) {
        reply_err(r, &err);
        return NULL;
    }
    return s;
}

static struct sbx_cmd *get_cmd(struct sbx *s, struct http_req *r)
{
    const char *id = http_req_param(r, "cid");
    struct sbx_cmd *c = sbx_cmd_find(s, id);
    if (!c)
        http_reply_error(r, 404, "no_such_command", "",
                         "sandbox %s has no command \"%.80s\" (it may have been pruned)", s->name,
                         id ? id : "");
    return c;
}

/* ------------------------------------------------------------------ watches */

static void watch_closed(struct http_req *req, void *arg);

static struct watch *watch_new(struct sbxd *d, struct http_req *r, struct sbx_cmd *c,
                               enum wkind kind)
{
    struct watch *w = xcalloc(1, sizeof *w);
    w->d = d;
    w->req = r;
    w->cmd = c;
    w->kind = kind;
    w->next = d->watches;
    if (d->watches) d->watches->prev = w;
    d->watches = w;
    if (c) c->watchers++;
    http_req_on_close(r, watch_closed, w);
    return w;
}

static void watch_free(struct watch *w)
{
    struct sbxd *d = w->d;
    if (w->prev)
        w->prev->next = w->next;
    else
        d->watches = w->next;
    if (w->next) w->next->prev = w->prev;
    if (w->cmd) {
        w->cmd->watchers--;
        if (w->kind == W_STDIN) sbx_stdin_forget(w->cmd, &w->stdin_waiter);
    }
    if (w->timer) event_free(w->timer);
    free(w);
}

static void watch_closed(struct http_req *req, void *arg)
{
    watch_free(arg);
}

static void watch_timer(struct watch *w, int64_t ms, event_callback_fn fn)
{
    w->timer = evtimer_new(w->d->base, fn, w);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    event_add(w->timer, &tv);
}

/* ------------------------------------------------------------------ output */

static json_t *output_json(const struct sbx_ring *ring, bool b64)
{
    size_t held = ring->len;
    char *tmp = xmalloc(held ? held : 1);
    size_t n = sbx_ring_read(ring, 0, tmp, held, NULL);
    json_t *j;
    if (b64) {
        struct buf b;
        buf_init(&b, 0);
        sbx_base64_encode(tmp, n, &b);
        j = json_stringn(b.data, b.len);
        buf_fini(&b);
    } else {
        j = sbx_json_text(tmp, n);
    }
    free(tmp);
    return j;
}

static json_t *run_result(const struct sbx_cmd *c, bool b64)
{
    json_t *o = sbx_cmd_json(c);
    json_object_set_new(o, "stdout", output_json(&c->out, b64));
    json_object_set_new(o, "stderr", output_json(&c->err, b64));
    json_object_set_new(o, "output_encoding", json_string(b64 ? "base64" : "utf-8"));
    json_object_set_new(o, "stdout_truncated", json_boolean(c->out.total > c->out.len));
    json_object_set_new(o, "stderr_truncated", json_boolean(c->err.total > c->err.len));
    return o;
}

static void reply_output(struct watch *w)
{
    struct sbx_cmd *c = w->cmd;
    struct http_req *r = w->req;
    const struct sbx_ring *ring = w->stream == 1 ? &c->out : &c->err;
    uint64_t off = w->stream == 1 ? w->off_out : w->off_err;
    char *tmp = xmalloc(w->limit ? w->limit : 1);
    uint64_t from;
    size_t n = sbx_ring_read(ring, off, tmp, w->limit, &from);
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)from);
    http_add_header(r, "X-Rebuno-Offset", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)(from + n));
    http_add_header(r, "X-Rebuno-Next-Offset", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)ring->total);
    http_add_header(r, "X-Rebuno-Total", v);
    bool eof = sbx_cmd_done(c) && from + n >= ring->total;
    http_add_header(r, "X-Rebuno-Eof", eof ? "true" : "false");
    http_add_header(r, "X-Rebuno-Status", sbx_cmd_done(c) ? "done" : "running");
    http_reply_raw(r, 200, "application/octet-stream", tmp, n);
    free(tmp);
}

/* Push what the SSE client has not seen yet; end the stream after the exit event. */
static void sse_drained(struct http_req *req, void *arg);

static void sse_pump(struct watch *w)
{
    struct sbx_cmd *c = w->cmd;
    char *tmp = xmalloc(SSE_CHUNK);
    for (;;) {
        bool sent = false;
        for (int st = 1; st <= 2; st++) {
            const struct sbx_ring *ring = st == 1 ? &c->out : &c->err;
            uint64_t *off = st == 1 ? &w->off_out : &w->off_err;
            const char *name = st == 1 ? "stdout" : "stderr";
            uint64_t start = sbx_ring_start(ring);
            if (*off < start) { /* the log already dropped these bytes */
                char gap[160];
                snprintf(gap, sizeof gap, "{\"stream\":\"%s\",\"from\":%llu,\"to\":%llu}", name,
                         (unsigned long long)*off, (unsigned long long)start);
                if (http_sse_send(w->req, NULL, "gap", gap) == -EAGAIN) goto blocked;
                *off = start;
            }
            uint64_t from;
            size_t n = sbx_ring_read(ring, *off, tmp, SSE_CHUNK, &from);
            if (n == 0) continue;
            json_t *o = json_object();
            json_object_set_new(o, "offset", json_integer((json_int_t)from));
            struct buf b;
            buf_init(&b, 0);
            sbx_base64_encode(tmp, n, &b);
            json_object_set_new(o, "data", json_stringn(b.data, b.len));
            buf_fini(&b);
            char *data = json_dumps(o, JSON_COMPACT);
            json_decref(o);
            char id[64];
            snprintf(id, sizeof id, "%llu,%llu",
                     (unsigned long long)(st == 1 ? from + n : w->off_out),
                     (unsigned long long)(st == 2 ? from + n : w->off_err));
            int rc = http_sse_send(w->req, id, name, data);
            free(data);
            if (rc == -EAGAIN) goto blocked;
            if (rc < 0) { /* client gone without a close callback: cannot happen here */
                free(tmp);
                return;
            }
            *off = from + n;
            sent = true;
        }
        if (sent) continue;
        if (sbx_cmd_done(c)) {
            json_t *j = sbx_cmd_json(c);
            char *data = json_dumps(j, JSON_COMPACT);
            json_decref(j);
            if (http_sse_send(w->req, NULL, "exit", data) == -EAGAIN) {
                free(data);
                goto blocked;
            }
            free(data);
            free(tmp);
            http_sse_end(w->req);
            watch_free(w);
            return;
        }
        break;
    }
    free(tmp);
    return;
blocked:
    free(tmp);
    http_sse_on_drain(w->req, sse_drained, w);
}

static void sse_drained(struct http_req *req, void *arg)
{
    sse_pump(arg);
}

static void sse_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    http_sse_comment(w->req, "keep-alive");
}

/* ------------------------------------------------------------------ notifications */

static void reply_cmd_error(struct watch *w)
{
    reply_err(w->req, &w->cmd->error);
    watch_free(w);
}

static void notify_one(struct watch *w, int ev)
{
    struct sbx_cmd *c = w->cmd;
    if (ev & SBX_EV_GONE) {
        if (w->kind == W_SSE) {
            http_sse_end(w->req);
        } else {
            http_reply_error(w->req, 410, "command_gone", "",
                             "the command went away (its sandbox was deleted)");
        }
        w->cmd->watchers--;
        w->cmd = NULL;
        watch_free(w);
        return;
    }
    switch (w->kind) {
    case W_START:
        if (!(ev & (SBX_EV_STARTED | SBX_EV_DONE))) return;
        if (c->status == CMD_FAILED) {
            reply_cmd_error(w);
            return;
        }
        http_reply_json(w->req, 201, sbx_cmd_json(c));
        watch_free(w);
        return;
    case W_RUN:
        if ((ev & SBX_EV_STARTED) && c->status == CMD_FAILED) {
            reply_cmd_error(w);
            return;
        }
        if (!(ev & SBX_EV_DONE)) return;
        if (c->status == CMD_FAILED) {
            reply_cmd_error(w);
            return;
        }
        http_reply_json(w->req, 200, run_result(c, w->b64));
        watch_free(w);
        return;
    case W_WAIT:
        if (!(ev & SBX_EV_DONE)) return;
        http_reply_json(w->req, 200, sbx_cmd_json(c));
        watch_free(w);
        return;
    case W_OUTPUT:
        if (!(ev & (SBX_EV_OUTPUT | SBX_EV_DONE))) return;
        reply_output(w);
        watch_free(w);
        return;
    case W_SSE:
        if (ev & (SBX_EV_OUTPUT | SBX_EV_DONE)) sse_pump(w);
        return;
    case W_STDIN:
        return;
    }
}

static void on_cmd_event(struct sbx_observer *o, struct sbx_cmd *c, int ev)
{
    struct sbxd *d = ((struct api_observer *)o)->d;
    for (struct watch *w = d->watches, *next; w; w = next) {
        next = w->next;
        if (w->cmd == c && w->kind != W_STDIN) {
            /* a reply frees w only; keep `next` valid across it */
            notify_one(w, ev);
        }
    }
}

static void stdin_done(struct sbx_stdin_waiter *sw, bool ok, size_t written)
{
    struct watch *w = (struct watch *)((char *)sw - offsetof(struct watch, stdin_waiter));
    if (ok) {
        json_t *o = json_object();
        json_object_set_new(o, "written", json_integer((json_int_t)written));
        json_object_set_new(o, "stdin_open", json_boolean(w->cmd && !w->cmd->in_closed));
        http_reply_json(w->req, 200, o);
    } else {
        http_reply_error(w->req, 409, "stdin_closed", "",
                         "the command closed its stdin or finished before all input was written");
    }
    watch_free(w);
}

static void on_wait_timer(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    if (w->kind == W_WAIT)
        http_reply_json(w->req, 200, sbx_cmd_json(w->cmd));
    else
        reply_output(w);
    watch_free(w);
}

void sbx_api_shutdown(struct sbxd *d)
{
    /* streams end; long-polls answer with what they have */
    while (d->watches) {
        struct watch *w = d->watches;
        if (w->kind == W_SSE)
            http_sse_end(w->req);
        else
            http_reply_error(w->req, 503, "shutting_down", "", "sandboxd is shutting down");
        watch_free(w);
    }
}

/* ------------------------------------------------------------------ sandboxes */

static void h_health(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string("ok"));
    json_object_set_new(o, "service", json_string("sandboxd"));
    json_object_set_new(o, "sandboxes", json_integer(d->count));
    http_reply_json(r, 200, o);
}

static void h_create(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    if (!json_body(r, true, &body)) return;
    struct err err = ERR_INIT;
    int64_t t0 = clock_mono_ms();
    struct sbx *s = sbx_create(d, body, &err);
    json_decref(body);
    if (!s) {
        reply_err(r, &err);
        return;
    }
    if (sbx_source_begin(d, s, r)) return; /* git/tarball: answered when it is set up */
    char ms[32];
    snprintf(ms, sizeof ms, "%lld", (long long)(clock_mono_ms() - t0));
    http_add_header(r, "X-Rebuno-Create-Ms", ms);
    http_reply_json(r, 201, sbx_json(s, true));
}

static void h_list(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    bool want[3] = {true, true, true};
    const char *state = http_req_query(r, "state");
    if (state) {
        want[0] = want[1] = want[2] = false;
        char *copy = xstrdup(state), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            enum sbx_state st;
            if (sbx_parse_state(t, &st) < 0) {
                free(copy);
                http_reply_error(r, 400, "validation_error", "state",
                                 "state must be a comma-separated list of running, paused, "
                                 "stopped");
                return;
            }
            want[st] = true;
        }
        free(copy);
    }
    json_t *meta = NULL;
    const char *mq = http_req_query(r, "metadata");
    if (mq) {
        meta = json_loads(mq, JSON_REJECT_DUPLICATES, NULL);
        struct err err = ERR_INIT;
        if (!meta || sbx_validate_metadata(meta, "metadata", &err) < 0) {
            json_decref(meta);
            if (!err.status)
                err_invalid(&err, "metadata",
                            "metadata must be a JSON object of strings, e.g. {\"team\":\"a\"}");
            reply_err(r, &err);
            return;
        }
    }
    uint64_t limit = 100;
    if (!query_u64(r, "limit", LIST_MAX, &limit)) {
        json_decref(meta);
        return;
    }
    if (limit == 0) limit = 100;
    const char *cursor = http_req_query(r, "cursor");
    json_t *arr = json_array();
    const char *next = NULL;
    bool past = cursor == NULL;
    for (struct sbx *s = d->first; s; s = s->next) {
        if (!past) {
            past = !strcmp(s->id, cursor);
            continue;
        }
        if (s->deleting || !want[s->state] || (meta && !sbx_metadata_match(s->metadata, meta))) continue;
        if (json_array_size(arr) == limit) {
            next = s->prev ? s->prev->id : NULL;
            break;
        }
        json_array_append_new(arr, sbx_json(s, false));
    }
    json_decref(meta);
    json_t *o = json_object();
    json_object_set_new(o, "sandboxes", arr);
    json_object_set_new(o, "next_cursor", next ? json_string(next) : json_null());
    http_reply_json(r, 200, o);
}

static void h_get(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    if (s) http_reply_json(r, 200, sbx_json(s, true));
}

static void h_update(struct http_req *r, void *arg)
{
    struct sbx *s = get_quiet(arg, r, h_update);
    json_t *body;
    if (!s || !json_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    int rc = sbx_update(s, body, &err);
    json_decref(body);
    if (rc < 0)
        reply_err(r, &err);
    else
        http_reply_json(r, 200, sbx_json(s, true));
}

static void h_delete(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = get_sbx(d, r);
    if (!s) return;
    struct err err = ERR_INIT;
    char id[sizeof s->id];
    snprintf(id, sizeof id, "%s", s->id);
    if (sbx_delete(s, &err) < 0) {
        reply_err(r, &err);
        return;
    }
    s = sbx_find_id(d, id);
    if (s) { /* stopping first: answered once it is gone */
        struct parked *p = xcalloc(1, sizeof *p);
        p->kind = P_DELETED;
        park(s, r, p);
        return;
    }
    http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_stop(struct http_req *r, void *arg);
static void h_pause(struct http_req *r, void *arg);
static void h_resume(struct http_req *r, void *arg);
static void h_extend(struct http_req *r, void *arg);

static void lifecycle(struct http_req *r, void *arg, int which)
{
    static const http_handler_fn self[] = {h_stop, h_pause, h_resume, h_extend};
    struct sbx *s = which == 0 ? get_sbx(arg, r) : get_quiet(arg, r, self[which]);
    json_t *body;
    if (!s || !json_body(r, true, &body)) return;
    struct err err = ERR_INIT;
    int64_t t0 = clock_mono_ms();
    int rc = 0;
    if (which == 0) { /* answered when the stop is over; other requests go on meanwhile */
        json_decref(body);
        sbx_stop_begin(s, "stopped");
        sbx_api_reply_quiet(s, r, 200, "X-Rebuno-Op-Ms", t0);
        return;
    } else if (which == 1) {
        rc = sbx_pause(s, &err);
    } else if (which == 2) {
        rc = sbx_resume(s, &err);
    } else {
        int64_t ms = 0;
        static const char *const known[] = {"duration_ms", NULL};
        if (sbx_json_known(body, known, "extend", &err) < 0 ||
            sbx_json_int(body, "duration_ms", 1, SBX_TIMEOUT_MAX_MS, &ms, &err) < 0)
            rc = -1;
        else if (ms == 0)
            rc = err_invalid(&err, "duration_ms", "duration_ms is required");
        else
            rc = sbx_extend(s, ms, &err);
    }
    json_decref(body);
    if (rc < 0) {
        reply_err(r, &err);
        return;
    }
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)(clock_mono_ms() - t0));
    http_add_header(r, "X-Rebuno-Op-Ms", v);
    http_reply_json(r, 200, sbx_json(s, true));
}

static void h_stop(struct http_req *r, void *arg) { lifecycle(r, arg, 0); }
static void h_pause(struct http_req *r, void *arg) { lifecycle(r, arg, 1); }
static void h_resume(struct http_req *r, void *arg) { lifecycle(r, arg, 2); }
static void h_extend(struct http_req *r, void *arg) { lifecycle(r, arg, 3); }

/* ------------------------------------------------------------------ commands */

static void h_cmd_create(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    if (!json_body(r, false, &body)) return;
    const char *session = json_string_value(json_object_get(body, "session"));
    struct sbx *s = get_running(d, r, session, h_cmd_create);
    if (!s) {
        json_decref(body);
        return;
    }
    struct err err = ERR_INIT;
    bool wait = false;
    const char *enc = NULL;
    if (sbx_json_bool(body, "wait", &wait, &err) < 0 ||
        sbx_json_str(body, "output_encoding", 16, &enc, &err) < 0) {
        json_decref(body);
        reply_err(r, &err);
        return;
    }
    if (enc && strcmp(enc, "utf-8") && strcmp(enc, "base64")) {
        json_decref(body);
        http_reply_error(r, 400, "validation_error", "output_encoding",
                         "output_encoding must be \"utf-8\" or \"base64\"");
        return;
    }
    bool b64 = enc && !strcmp(enc, "base64");
    struct sbx_cmd *c = sbx_cmd_start(s, body, &err);
    json_decref(body);
    if (!c) {
        reply_err(r, &err);
        return;
    }
    struct watch *w = watch_new(d, r, c, wait ? W_RUN : W_START);
    w->b64 = b64;
}

static void h_cmd_list(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    if (!s) return;
    json_t *arr = json_array();
    for (struct sbx_cmd *c = s->cmds_first; c; c = c->next)
        json_array_append_new(arr, sbx_cmd_json(c));
    json_t *o = json_object();
    json_object_set_new(o, "commands", arr);
    http_reply_json(r, 200, o);
}

static void h_cmd_get(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (c) http_reply_json(r, 200, sbx_cmd_json(c));
}

static void h_cmd_wait(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = get_sbx(d, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (!c) return;
    uint64_t ms = 30000;
    if (!query_u64(r, "timeout_ms", WAIT_MAX_MS, &ms)) return;
    if (sbx_cmd_done(c) || ms == 0) {
        http_reply_json(r, 200, sbx_cmd_json(c));
        return;
    }
    struct watch *w = watch_new(d, r, c, W_WAIT);
    watch_timer(w, (int64_t)ms, on_wait_timer);
}

static bool parse_stream(struct http_req *r, int *stream)
{
    const char *st = http_req_query(r, "stream");
    if (!st || !strcmp(st, "stdout")) *stream = 1;
    else if (!strcmp(st, "stderr")) *stream = 2;
    else {
        http_reply_error(r, 400, "validation_error", "stream", "stream must be stdout or stderr");
        return false;
    }
    return true;
}

static void h_cmd_output(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = get_sbx(d, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (!c) return;
    int stream;
    uint64_t off = 0, limit = 1u << 20, wait = 0;
    if (!parse_stream(r, &stream) || !query_u64(r, "offset", UINT64_MAX / 2, &off) ||
        !query_u64(r, "limit", SBX_FS_IO_MAX, &limit) || !query_u64(r, "wait_ms", WAIT_MAX_MS, &wait))
        return;
    if (limit == 0) limit = 1u << 20;
    struct watch tmp = {.d = d, .req = r, .cmd = c, .stream = stream, .off_out = off,
                        .off_err = off, .limit = (size_t)limit};
    const struct sbx_ring *ring = stream == 1 ? &c->out : &c->err;
    if (off < ring->total || sbx_cmd_done(c) || wait == 0) {
        reply_output(&tmp);
        return;
    }
    struct watch *w = watch_new(d, r, c, W_OUTPUT);
    w->stream = stream;
    w->off_out = w->off_err = off;
    w->limit = (size_t)limit;
    watch_timer(w, (int64_t)wait, on_wait_timer);
}

static void h_cmd_stream(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = get_sbx(d, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (!c) return;
    uint64_t oo = 0, oe = 0;
    if (!query_u64(r, "stdout_offset", UINT64_MAX / 2, &oo) ||
        !query_u64(r, "stderr_offset", UINT64_MAX / 2, &oe))
        return;
    /* Last-Event-ID "OUT,ERR" (what we send as ids) resumes where the stream broke */
    const char *last = http_req_header(r, "Last-Event-ID");
    unsigned long long a, b;
    if (last && sscanf(last, "%llu,%llu", &a, &b) == 2) {
        oo = a;
        oe = b;
    }
    struct watch *w = watch_new(d, r, c, W_SSE);
    w->off_out = oo;
    w->off_err = oe;
    http_sse_start(r);
    w->timer = event_new(d->base, -1, EV_PERSIST, sse_keepalive, w);
    struct timeval tv = {KEEPALIVE_SEC, 0};
    event_add(w->timer, &tv);
    sse_pump(w);
}

static void h_cmd_stdin(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = get_sbx(d, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (!c) return;
    bool close_after = false;
    if (!query_bool(r, "close", &close_after)) return;
    size_t len;
    const char *data = http_req_body(r, &len);
    struct watch *w = watch_new(d, r, c, W_STDIN);
    w->stdin_waiter.done = stdin_done;
    struct err err = ERR_INIT;
    if (sbx_cmd_stdin(c, data, len, close_after, &w->stdin_waiter, &err) < 0) {
        watch_free(w);
        reply_err(r, &err);
    }
}

static void h_cmd_signal(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    json_t *body;
    if (!c || !json_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    json_t *sv = json_object_get(body, "signal");
    int sig = 0;
    if (json_is_integer(sv) && json_integer_value(sv) > 0 && json_integer_value(sv) < 65)
        sig = (int)json_integer_value(sv);
    else if (json_is_string(sv))
        sig = sbx_signal_parse(json_string_value(sv));
    bool group = true;
    if (sig == 0)
        err_invalid(&err, "signal", "signal must be a name like \"TERM\" or a number 1-64");
    else
        sbx_json_bool(body, "group", &group, &err);
    json_decref(body);
    if (err.status || sbx_cmd_signal(c, sig, group, &err) < 0) {
        reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, sbx_cmd_json(c));
}

/* ------------------------------------------------------------------ users */

static json_t *user_json(const struct sbx_user *u)
{
    json_t *o = json_object();
    json_object_set_new(o, "username", json_string(u->name));
    json_object_set_new(o, "uid", json_integer(u->uid));
    json_object_set_new(o, "gid", json_integer(u->gid));
    json_object_set_new(o, "home_dir", json_string(u->home));
    json_object_set_new(o, "shell", json_string(u->shell));
    json_t *g = json_array();
    for (uint32_t i = 0; i < u->ngroups; i++)
        json_array_append_new(g, json_integer(u->groups[i]));
    json_object_set_new(o, "groups", g);
    return o;
}

static void h_user_create(struct http_req *r, void *arg)
{
    json_t *body;
    if (!json_body(r, false, &body)) return;
    struct sbx *s = get_running(arg, r, json_string_value(json_object_get(body, "session")),
                                h_user_create);
    if (!s) {
        json_decref(body);
        return;
    }
    struct err err = ERR_INIT;
    const char *name;
    static const char *const known[] = {"name", "session", NULL};
    struct sbx_user u;
    int rc = sbx_json_known(body, known, "a user", &err);
    if (rc == 0) rc = sbx_json_str(body, "name", 64, &name, &err);
    if (rc == 0 && !name) rc = err_invalid(&err, "name", "name is required");
    if (rc == 0) rc = sbx_user_create(&s->sess->fs, name, &u, &err);
    json_decref(body);
    if (rc < 0)
        reply_err(r, &err);
    else
        http_reply_json(r, 201, user_json(&u));
}

static void h_user_get(struct http_req *r, void *arg)
{
    struct sbx *s = get_running(arg, r, NULL, h_user_get);
    if (!s) return;
    struct err err = ERR_INIT;
    struct sbx_user u;
    if (sbx_user_resolve(&s->sess->fs, http_req_param(r, "name"), &u, &err) < 0)
        reply_err(r, &err);
    else
        http_reply_json(r, 200, user_json(&u));
}

/* ------------------------------------------------------------------ files */

/* Who acts (for ownership and relative paths): ?user= / "user", default root. */
static bool file_actor(struct sbx *s, struct http_req *r, const char *user, struct sbx_user *u)
{
    struct err err = ERR_INIT;
    if (sbx_user_resolve(&s->sess->fs, user ? user : "root", u, &err) < 0) {
        reply_err(r, &err);
        return false;
    }
    return true;
}

static bool norm_path(struct http_req *r, const char *in, const struct sbx_user *u,
                      const char *field, char *out)
{
    struct err err = ERR_INIT;
    if (!in) {
        http_reply_error(r, 400, "validation_error", field, "%s is required", field);
        return false;
    }
    const char *home = u->home[0] == '/' ? u->home : "/";
    if (sbx_path_normalize(in, home, out, SBX_PATH_MAX + 1, field, &err) < 0) {
        reply_err(r, &err);
        return false;
    }
    return true;
}

static bool parse_mode(struct http_req *r, const char *s, int *mode)
{
    *mode = -1;
    if (!s) return true;
    char *end;
    long v = strtol(s, &end, 8);
    if (!*s || *end || v < 0 || v > 07777) {
        http_reply_error(r, 400, "validation_error", "mode", "mode must be octal, e.g. 0644");
        return false;
    }
    *mode = (int)v;
    return true;
}

struct fctx {
    struct sbx *s;
    struct sbx_user u;
    char path[SBX_PATH_MAX + 1];
    struct sbx_fs fs;
};

/* The session's files as f's actor sees them: for an account other than root, paths
 * never follow a symlink such an account made (files.h). */
static const struct sbx_fs *actor_fs(struct fctx *f)
{
    f->fs = f->s->sess->fs;
    f->fs.no_user_links = f->u.uid != 0;
    return &f->fs;
}

/* Common start of the query-string file calls: sandbox (resumed), actor, path. */
static bool file_start(struct sbxd *d, struct http_req *r, struct fctx *f,
                       http_handler_fn self)
{
    f->s = get_running(d, r, NULL, self);
    return f->s && file_actor(f->s, r, http_req_query(r, "user"), &f->u) &&
           norm_path(r, http_req_query(r, "path"), &f->u, "path", f->path);
}

static void h_file_read(struct http_req *r, void *arg)
{
    struct fctx f;
    if (!file_start(arg, r, &f, h_file_read)) return;
    uint64_t off = 0, len = SBX_FS_IO_MAX;
    if (!query_u64(r, "offset", UINT64_MAX / 2, &off) ||
        !query_u64(r, "length", SBX_FS_IO_MAX, &len))
        return;
    struct buf out;
    buf_init(&out, SBX_FS_IO_MAX);
    struct err err = ERR_INIT;
    uint64_t size = 0;
    if (sbx_fs_read(actor_fs(&f), f.path, off, (size_t)len, &out, &size, &err) < 0) {
        buf_fini(&out);
        reply_err(r, &err);
        return;
    }
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)size);
    http_add_header(r, "X-Rebuno-File-Size", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)off);
    http_add_header(r, "X-Rebuno-Offset", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)(off + out.len));
    http_add_header(r, "X-Rebuno-Next-Offset", v);
    http_add_header(r, "X-Rebuno-Eof", off + out.len >= size ? "true" : "false");
    http_reply_raw(r, 200, "application/octet-stream", out.data ? out.data : "", out.len);
    buf_fini(&out);
}

static void h_file_write(struct http_req *r, void *arg)
{
    struct fctx f;
    if (!file_start(arg, r, &f, h_file_write)) return;
    uint64_t off = 0;
    int mode;
    if (!query_u64(r, "offset", UINT64_MAX / 2, &off) ||
        !parse_mode(r, http_req_query(r, "mode"), &mode))
        return;
    bool truncate = off == 0;
    if (!query_bool(r, "truncate", &truncate)) return;
    size_t len;
    const char *data = http_req_body(r, &len);
    struct sbx_owner own = {f.u.uid, f.u.gid};
    struct err err = ERR_INIT;
    uint64_t size = 0;
    if (sbx_fs_write(actor_fs(&f), f.path, off, data, len, truncate, mode, &own, &size, &err) <
        0) {
        reply_err(r, &err);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "path", sbx_json_text(f.path, strlen(f.path)));
    json_object_set_new(o, "written", json_integer((json_int_t)len));
    json_object_set_new(o, "size", json_integer((json_int_t)size));
    http_reply_json(r, 200, o);
}

static void h_file_stat(struct http_req *r, void *arg)
{
    struct fctx f;
    if (!file_start(arg, r, &f, h_file_stat)) return;
    struct err err = ERR_INIT;
    json_t *o = sbx_fs_stat(actor_fs(&f), f.path, &err);
    if (!o)
        reply_err(r, &err);
    else
        http_reply_json(r, 200, o);
}

static void h_file_list(struct http_req *r, void *arg)
{
    struct fctx f;
    if (!file_start(arg, r, &f, h_file_list)) return;
    uint64_t limit = SBX_FS_LIST_MAX;
    if (!query_u64(r, "limit", SBX_FS_LIST_MAX, &limit)) return;
    struct err err = ERR_INIT;
    json_t *o = sbx_fs_list(actor_fs(&f), f.path, (size_t)limit, &err);
    if (!o)
        reply_err(r, &err);
    else
        http_reply_json(r, 200, o);
}

static void h_file_remove(struct http_req *r, void *arg)
{
    struct fctx f;
    if (!file_start(arg, r, &f, h_file_remove)) return;
    bool recursive = false;
    if (!query_bool(r, "recursive", &recursive)) return;
    struct err err = ERR_INIT;
    if (sbx_fs_remove(actor_fs(&f), f.path, recursive, &err) < 0)
        reply_err(r, &err);
    else
        http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_file_mkdir(struct http_req *r, void *arg)
{
    json_t *body;
    if (!json_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    static const char *const known[] = {"path", "parents", "mode", "user", "session", NULL};
    const char *path = NULL, *user = NULL, *mode_s = NULL;
    bool parents = false;
    struct fctx f;
    int mode = -1;
    if (sbx_json_known(body, known, "mkdir", &err) < 0 ||
        sbx_json_str(body, "path", SBX_PATH_MAX, &path, &err) < 0 ||
        sbx_json_str(body, "user", 64, &user, &err) < 0 ||
        sbx_json_str(body, "mode", 8, &mode_s, &err) < 0 ||
        sbx_json_bool(body, "parents", &parents, &err) < 0) {
        json_decref(body);
        reply_err(r, &err);
        return;
    }
    f.s = get_running(arg, r, json_string_value(json_object_get(body, "session")), h_file_mkdir);
    bool ok = f.s && file_actor(f.s, r, user, &f.u) && norm_path(r, path, &f.u, "path", f.path) &&
              parse_mode(r, mode_s, &mode);
    json_decref(body);
    if (!ok) return;
    struct sbx_owner own = {f.u.uid, f.u.gid};
    if (sbx_fs_mkdir(actor_fs(&f), f.path, parents, mode, &own, &err) < 0) {
        reply_err(r, &err);
        return;
    }
    json_t *o = sbx_fs_stat(actor_fs(&f), f.path, &err);
    http_reply_json(r, 201, o ? o : json_object());
}

static void h_file_rename(struct http_req *r, void *arg)
{
    json_t *body;
    if (!json_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    static const char *const known[] = {"from", "to", "overwrite", "session", NULL};
    const char *from = NULL, *to = NULL;
    bool overwrite = false;
    if (sbx_json_known(body, known, "rename", &err) < 0 ||
        sbx_json_str(body, "from", SBX_PATH_MAX, &from, &err) < 0 ||
        sbx_json_str(body, "to", SBX_PATH_MAX, &to, &err) < 0 ||
        sbx_json_bool(body, "overwrite", &overwrite, &err) < 0) {
        json_decref(body);
        reply_err(r, &err);
        return;
    }
    struct fctx f;
    char to_n[SBX_PATH_MAX + 1];
    f.s = get_running(arg, r, json_string_value(json_object_get(body, "session")), h_file_rename);
    bool ok = f.s && file_actor(f.s, r, NULL, &f.u) && norm_path(r, from, &f.u, "from", f.path) &&
              norm_path(r, to, &f.u, "to", to_n);
    json_decref(body);
    if (!ok) return;
    if (sbx_fs_rename(actor_fs(&f), f.path, to_n, overwrite, &err) < 0) {
        reply_err(r, &err);
        return;
    }
    json_t *o = sbx_fs_stat(actor_fs(&f), to_n, &err);
    http_reply_json(r, 200, o ? o : json_object());
}

/* ------------------------------------------------------------------ routes */

/* A browser's WebSocket cannot send Authorization: the dashboard offers the subprotocols
 * "rebuno, rebuno.bearer.<token>" instead (ws_server_upgrade answers "rebuno"). Returns
 * "Bearer <token>" in buf, or NULL when the request carries no such offer. */
static const char *ws_bearer(struct http_req *r, char *buf, size_t size)
{
    const char *up = http_req_header(r, "Upgrade"), *protos = http_req_header(r, "Sec-WebSocket-Protocol");
    if (!up || strcasecmp(up, "websocket") != 0 || !protos) return NULL;
    const char *p = strstr(protos, "rebuno.bearer.");
    if (!p) return NULL;
    p += strlen("rebuno.bearer.");
    size_t n = strcspn(p, ", \t");
    if (n == 0 || n + 8 > size) return NULL;
    snprintf(buf, size, "Bearer %.*s", (int)n, p);
    return buf;
}

/* Before routing (so unknown paths too): any local user can connect to loopback, so
 * every call but health must carry the token of the user who started the daemon. The
 * dashboard's files (/ui/, ui/ui.h) hold no data and are public too. */
static bool auth_filter(struct http_req *r, void *arg)
{
    const struct sbxd *d = arg;
    const char *m = http_req_method(r), *path = http_req_path(r);
    if ((!strcmp(m, "GET") || !strcmp(m, "HEAD")) &&
        (!strcmp(path, "/v1/health") || !strcmp(path, "/ui") || !strncmp(path, "/ui/", 4)))
        return true;
    if (d->local && local_auth_check(d->local, http_req_header(r, "Authorization"))) return true;
    char bearer[128];
    const char *wsb = http_req_header(r, "Authorization") ? NULL : ws_bearer(r, bearer, sizeof bearer);
    if (d->local && wsb && local_auth_check(d->local, wsb)) return true;
    if (d->local) local_auth_refuse(d->local, r);
    else http_reply_error(r, 401, "unauthorized", "Authorization", "sandboxd has no local token yet");
    return false;
}

void sbxd_set_local_auth(struct sbxd *d, const struct local_auth *la)
{
    d->local = la;
}

static void observer_release(struct sbx_observer *o)
{
    free(o);
}

void sbx_api_register(struct sbxd *d)
{
    struct http_server *h = d->http;
    struct api_observer *obs = xcalloc(1, sizeof *obs);
    obs->o.on_cmd = on_cmd_event;
    obs->o.release = observer_release;
    obs->d = d;
    sbx_observe(d, &obs->o);
    http_set_filter(h, auth_filter, d);
    ui_mount(h, "sandboxd"); /* the dashboard's Sandboxes views, same origin as this API */
    http_route(h, "GET", "/v1/health", h_health, d);
    http_route(h, "POST", "/v1/sandboxes", h_create, d);
    http_route(h, "GET", "/v1/sandboxes", h_list, d);
    http_route(h, "GET", "/v1/sandboxes/:ref", h_get, d);
    http_route(h, "PATCH", "/v1/sandboxes/:ref", h_update, d);
    http_route(h, "DELETE", "/v1/sandboxes/:ref", h_delete, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/stop", h_stop, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/pause", h_pause, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/resume", h_resume, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/extend", h_extend, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/commands", h_cmd_create, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/commands", h_cmd_list, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/commands/:cid", h_cmd_get, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/commands/:cid/wait", h_cmd_wait, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/commands/:cid/output", h_cmd_output, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/commands/:cid/stream", h_cmd_stream, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/commands/:cid/stdin", h_cmd_stdin, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/commands/:cid/signal", h_cmd_signal, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/users", h_user_create, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/users/:name", h_user_get, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/files/content", h_file_read, d);
    http_route(h, "PUT", "/v1/sandboxes/:ref/files/content", h_file_write, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/files/stat", h_file_stat, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/files/list", h_file_list, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/files/mkdir", h_file_mkdir, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/files/rename", h_file_rename, d);
    http_route(h, "DELETE", "/v1/sandboxes/:ref/files", h_file_remove, d);
    sbx_api_register_ext(d); /* snapshots, forks, drives, sources: snapshot.c */
    sbx_pty_routes(d); /* terminals: pty.c */
    sbx_pulls_register(d);  /* registry pulls: pull.c (before images/:digest) */
    sbx_images_register(d); /* imported images: images.c */
}
