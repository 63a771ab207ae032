/*
 * routes.c - the Vercel-compatible endpoint's routes (docs/vercel.md): sandboxes
 * (create, get with resume, list, update, delete, fork), sessions (get, list, stop,
 * extend-timeout, network-policy, snapshot), snapshots; the command routes are in
 * logs.c, the file routes in files.c, the drive routes in drives.c.
 *
 * Every handler maps the SDK's request onto the core operation /v1 uses (sbx_create,
 * sbx_update, sbx_stop_begin, sbx_extend, sbx_fork, sbx_snapshot_take ...) and the
 * result back with objects.c. Errors keep the shape the SDK reads,
 * {"error":{"code","message"}}, and its statuses: 404 unknown, 409 conflicts, 410 a
 * stopped session (the SDK resumes the sandbox and retries). Auth: the daemon's local
 * token as the SDK's Bearer token; teamId, projectId and project are accepted and ignored.
 */
#include "sandbox/vercel/vc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "net/local_auth.h"
#include "sandbox/core/validate.h"
#include "sandbox/storage/files.h"


/* ------------------------------------------------------------------ helpers */

json_t *vc_body(struct http_req *r, bool allow_empty)
{
    size_t len;
    http_req_body(r, &len);
    if (len > VC_JSON_MAX) {
        http_reply_error(r, 413, "payload_too_large", "body", "JSON bodies are limited to %u bytes",
                         VC_JSON_MAX);
        return NULL;
    }
    struct err err = ERR_INIT;
    json_t *b = http_req_json(r, allow_empty, &err);
    if (!b) {
        http_reply_err(r, &err);
        return NULL;
    }
    if (!json_is_object(b)) {
        json_decref(b);
        http_reply_error(r, 400, "bad_request", "body", "the body must be a JSON object");
        return NULL;
    }
    return b;
}

int vc_query_limit(struct http_req *r, long *out)
{
    const char *lim = http_req_query(r, "limit");
    char *end = NULL;
    *out = 50;
    if (lim && (!*lim || (*out = strtol(lim, &end, 10)) < 1 || *out > VC_LIST_MAX || *end)) {
        http_reply_error(r, 400, "bad_request", "limit", "limit must be an integer from 1 to %d",
                         VC_LIST_MAX);
        return -1;
    }
    return 0;
}

void vc_reply_err(struct http_req *r, struct err *err)
{
    static const char *const map[][2] = {
        {"timeout_ms", "timeout"}, {"metadata", "tags"}, {"network_policy", "networkPolicy"},
        {"snapshot_expiration_ms", "snapshotExpiration"}, {"source.snapshot_id", "source.snapshotId"},
        {"cmd", "command"}, {NULL, NULL}};
    for (int i = 0; map[i][0]; i++) {
        size_t n = strlen(map[i][0]);
        if (!strncmp(err->field, map[i][0], n) && (!err->field[n] || err->field[n] == '.' ||
                                                   err->field[n] == '[')) {
            char f[sizeof err->field];
            snprintf(f, sizeof f, "%s%s", map[i][1], err->field + n);
            snprintf(err->field, sizeof err->field, "%s", f);
            break;
        }
    }
    http_reply_err(r, err);
}

static struct sbx *get_named(struct vc *v, struct http_req *r)
{
    const char *name = http_req_param(r, "name");
    struct sbx *s = sbx_find(v->d, name);
    if (!s)
        http_reply_error(r, 404, "not_found", "name", "no sandbox named \"%.80s\"", name ? name : "");
    return s;
}

struct sbx *vc_sid_sbx(struct vc *v, struct http_req *r)
{
    const char *sid = http_req_param(r, "sid");
    char id[40];
    int64_t seq;
    struct sbx *s = vc_sid_parse(sid, id, &seq) == 0 ? sbx_find(v->d, id) : NULL;
    if (!s)
        http_reply_error(r, 404, "not_found", "sessionId", "no session \"%.100s\"", sid ? sid : "");
    return s;
}

struct sbx *vc_session_sbx(struct vc *v, struct http_req *r, http_handler_fn self)
{
    struct sbx *s = vc_sid_sbx(v, r);
    if (!s || sbx_api_park(s, r, self, v)) return NULL;
    char id[40];
    int64_t seq = 0;
    vc_sid_parse(http_req_param(r, "sid"), id, &seq);
    if (seq != s->session_seq || s->state == SBX_STOPPED) {
        http_reply_error(r, 410, "session_stopped", "sessionId",
                         "session %s of sandbox %s has stopped; resume the sandbox (its files "
                         "are kept)", http_req_param(r, "sid"), s->name);
        return NULL;
    }
    struct err err = ERR_INIT;
    if (sbx_ensure_running(s, NULL, &err) < 0) { /* paused: resumed */
        vc_reply_err(r, &err);
        return NULL;
    }
    return s;
}

/* The session's cwd exists in every session, as on Vercel (a tree made by /v1 too). */
static void ensure_cwd(struct sbx *s)
{
    if (!s->sess) return;
    struct sbx_owner root = {0, 0};
    struct err err = ERR_INIT;
    if (sbx_fs_mkdir(&s->sess->fs, VC_CWD, true, 0755, &root, &err) < 0 && err.status != 409)
        log_warn("vercel: cannot make the session cwd", "sandbox=%s error=\"%s\"", s->id, err.msg);
}

static void reply_sandbox(struct http_req *r, struct sbx *s, int status, int resumed)
{
    ensure_cwd(s);
    http_reply_json(r, status, vc_sandbox_reply(s, resumed));
}

/* The /v1 create/fork/update fields of an SDK body (fork: no source, image, mounts). */
static json_t *map_body(const json_t *in, bool create, struct err *err)
{
    json_t *o = json_object();
    json_t *v;
    if ((v = json_object_get(in, "name")) && !json_is_null(v)) json_object_set(o, "name", v);
    if ((v = json_object_get(in, "timeout")) && !json_is_null(v)) json_object_set(o, "timeout_ms", v);
    if ((v = json_object_get(in, "env")) && !json_is_null(v)) json_object_set(o, "env", v);
    if ((v = json_object_get(in, "tags")) && !json_is_null(v)) json_object_set(o, "metadata", v);
    if ((v = json_object_get(in, "snapshotExpiration")) && !json_is_null(v))
        json_object_set(o, "snapshot_expiration_ms", v);
    if ((v = json_object_get(in, "ports")) && !json_is_null(v)) json_object_set(o, "ports", v);
    if ((v = json_object_get(in, "networkId")) && !json_is_null(v)) json_object_set(o, "network_id", v);
    if ((v = json_object_get(in, "image")) && !json_is_null(v)) json_object_set(o, "image", v);
    if ((v = json_object_get(in, "mounts")) && !json_is_null(v)) {
        json_t *m = vc_mounts_in(v, err);
        if (!m) goto fail;
        json_object_set_new(o, "mounts", m);
    }
    if ((v = json_object_get(in, "resources")) && !json_is_null(v)) {
        if (!json_is_object(v)) {
            err_invalid(err, "resources", "resources must be an object like {\"vcpus\": 2}");
            goto fail;
        }
        json_t *res = json_object();
        json_t *c = json_object_get(v, "vcpus"), *m = json_object_get(v, "memory");
        if (c) json_object_set(res, "vcpus", c);
        if (m) json_object_set(res, "memory", m);
        else if (create && json_is_integer(c) && json_integer_value(c) > 0 &&
                 json_integer_value(c) <= 64) /* Vercel's 2 GiB per vCPU */
            json_object_set_new(res, "memory", json_integer(json_integer_value(c) * 2048));
        json_object_set_new(o, "resources", res);
    }
    if ((v = json_object_get(in, "networkPolicy")) && !json_is_null(v)) {
        json_t *p = vc_policy_in(v, err);
        if (!p) goto fail;
        json_object_set_new(o, "network_policy", p);
    }
    if (create && (v = json_object_get(in, "source")) && !json_is_null(v)) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (type && !strcmp(type, "snapshot")) {
            json_t *id = json_object_get(v, "snapshotId");
            if (!json_is_string(id)) {
                err_invalid(err, "source.snapshotId", "source.snapshotId must be a snapshot id");
                goto fail;
            }
            json_object_set_new(o, "source", json_pack("{s:s, s:O}", "type", "snapshot",
                                                       "snapshot_id", id));
        } else if (type && !strcmp(type, "git")) {
            json_t *g = json_pack("{s:s, s:s}", "type", "git", "path", VC_CWD);
            json_t *x;
            const char *url = json_string_value(json_object_get(v, "url"));
            if (url && (url[0] == '/' || !strncmp(url, "file:", 5))) {
                json_decref(g);
                err_invalid(err, "source.url", "source.url must be a remote repository URL");
                goto fail;
            }
            if ((x = json_object_get(v, "url"))) json_object_set(g, "url", x);
            if ((x = json_object_get(v, "depth"))) json_object_set(g, "depth", x);
            if ((x = json_object_get(v, "revision"))) json_object_set(g, "branch", x);
            if (json_object_get(v, "username") || json_object_get(v, "password")) {
                json_decref(g);
                err_set(err, 400, "unsupported", "source.password",
                        "git credentials in the source are not supported locally: give the "
                        "sandbox a network policy that injects them");
                goto fail;
            }
            json_object_set_new(o, "source", g);
        } else if (type && !strcmp(type, "tarball")) {
            const char *url = json_string_value(json_object_get(v, "url"));
            if (!url || !vc_tarball_url_ok(url)) {
                err_invalid(err, "source.url", "source.url must be an http:// or https:// URL "
                            "of a tar (plain or compressed)");
                goto fail;
            }
            json_object_set_new(o, "source", json_pack("{s:s, s:s}", "type", "tarball", "url", url));
        } else {
            err_set(err, 400, "unsupported", "source.type",
                    "source.type must be \"snapshot\", \"git\" or \"tarball\"");
            goto fail;
        }
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

/* ------------------------------------------------------------------ sandboxes */

void vc_source_done(struct http_req *r, struct sbx *s, const char *error)
{
    if (s)
        reply_sandbox(r, s, 200, -1);
    else
        http_reply_error(r, 400, "source_failed", "source", "%s", error);
}

static void h_create(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    json_t *in = vc_body(r, true);
    if (!in) return;
    struct err err = ERR_INIT;
    json_t *body = map_body(in, true, &err);
    json_decref(in);
    if (!body) {
        vc_reply_err(r, &err);
        return;
    }
    json_t *src = json_object_get(body, "source");
    const char *url = json_string_value(json_object_get(src, "url"));
    if (url && !strcmp(json_string_value(json_object_get(src, "type")), "tarball")) {
        char u[VC_URL_MAX + 1];
        snprintf(u, sizeof u, "%s", url);
        json_object_del(body, "source");
        vc_tarball_create(v, r, body, u); /* answered once fetched and extracted */
        return;
    }
    struct sbx *s = sbx_create(v->d, body, &err);
    json_decref(body);
    if (!s) {
        vc_reply_err(r, &err);
        return;
    }
    if (sbx_source_begin_ex(v->d, s, r, vc_source_done)) return; /* git: answered when cloned */
    reply_sandbox(r, s, 200, -1);
}

static void h_get(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = get_named(v, r);
    if (!s) return;
    const char *q = http_req_query(r, "resume");
    bool resume = q && (!strcmp(q, "true") || !strcmp(q, "1"));
    if (resume && sbx_api_park(s, r, h_get, v)) return;
    int resumed = 0;
    if (resume && s->state != SBX_RUNNING) {
        struct err err = ERR_INIT;
        resumed = s->state == SBX_STOPPED;
        if (sbx_ensure_running(s, NULL, &err) < 0) {
            vc_reply_err(r, &err);
            return;
        }
    }
    reply_sandbox(r, s, 200, resumed);
}

static void h_list(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const char *prefix = http_req_query(r, "namePrefix"), *tags = http_req_query(r, "tags");
    const char *cursor = http_req_query(r, "cursor"), *order = http_req_query(r, "sortOrder");
    long limit;
    if (vc_query_limit(r, &limit) < 0) return;
    char tk[128] = "", tv[512] = "";
    if (tags) {
        const char *c = strchr(tags, ':');
        if (!c || c == tags || (size_t)(c - tags) >= sizeof tk || strlen(c + 1) >= sizeof tv) {
            http_reply_error(r, 400, "bad_request", "tags", "tags must be key:value");
            return;
        }
        snprintf(tk, sizeof tk, "%.*s", (int)(c - tags), tags);
        snprintf(tv, sizeof tv, "%s", c + 1);
    }
    bool desc = !order || strcmp(order, "asc") != 0; /* newest first, as Vercel's default */
    json_t *arr = json_array();
    const char *next = NULL;
    bool past = cursor == NULL;
    for (struct sbx *s = desc ? v->d->last : v->d->first; s; s = desc ? s->prev : s->next) {
        if (!past) {
            past = !strcmp(s->id, cursor);
            continue;
        }
        if (s->deleting) continue;
        if (prefix && strncmp(s->name, prefix, strlen(prefix)) != 0) continue;
        if (tags) {
            const char *have = json_string_value(json_object_get(s->metadata, tk));
            if (!have || strcmp(have, tv)) continue;
        }
        if ((long)json_array_size(arr) == limit) {
            struct sbx *prev = desc ? s->next : s->prev;
            next = prev ? prev->id : NULL;
            break;
        }
        json_array_append_new(arr, vc_sandbox_json(s));
    }
    json_t *o = json_pack("{s:o, s:{s:I, s:s?}}", "sandboxes", arr, "pagination", "count",
                          (json_int_t)json_array_size(arr), "next", next);
    http_reply_json(r, 200, o);
}

/* The named sandbox (*s; NULL: answered or parked) and its update/fork body mapped to
 * /v1's, without "image" (NULL with err: the caller answers). */
static json_t *named_body(struct vc *v, struct http_req *r, http_handler_fn self, struct sbx **s,
                          struct err *err)
{
    *s = get_named(v, r);
    if (!*s || sbx_api_park(*s, r, self, v)) {
        *s = NULL;
        return NULL;
    }
    json_t *in = vc_body(r, true);
    if (!in) {
        *s = NULL;
        return NULL;
    }
    json_t *body = map_body(in, false, err);
    json_decref(in);
    if (body) json_object_del(body, "image");
    return body;
}

static void h_update(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct err err = ERR_INIT;
    struct sbx *s;
    json_t *body = named_body(v, r, h_update, &s, &err);
    if (!s) return;
    if (body) json_object_del(body, "name");
    if (!body || sbx_update(s, body, &err) < 0) {
        json_decref(body);
        vc_reply_err(r, &err);
        return;
    }
    json_decref(body);
    http_reply_json(r, 200, json_pack("{s:o, s:o}", "sandbox", vc_sandbox_json(s), "routes",
                                      vc_routes_json(s)));
}

static void h_delete(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = get_named(v, r);
    if (!s) return;
    json_t *o = json_pack("{s:o, s:o}", "sandbox", vc_sandbox_json(s), "routes", vc_routes_json(s));
    struct err err = ERR_INIT;
    if (sbx_delete(s, &err) < 0) { /* else gone, or going once its stop is over */
        json_decref(o);
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, o);
}

static void h_fork(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct err err = ERR_INIT;
    struct sbx *src;
    json_t *body = named_body(v, r, h_fork, &src, &err); /* a fork keeps its source's image */
    if (!src) return;
    struct sbx *s = body ? sbx_fork(v->d, src, body, &err) : NULL;
    json_decref(body);
    if (!s) {
        vc_reply_err(r, &err);
        return;
    }
    reply_sandbox(r, s, 200, -1);
}

/* ------------------------------------------------------------------ sessions */

static void h_session_get(struct http_req *r, void *arg)
{
    struct sbx *s = vc_sid_sbx(arg, r);
    if (s)
        http_reply_json(r, 200, json_pack("{s:o, s:o}", "session", vc_session_json(s), "routes",
                                          vc_routes_json(s)));
}

static void h_session_list(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const char *name = http_req_query(r, "name");
    json_t *arr = json_array();
    for (struct sbx *s = v->d->last; s; s = s->prev) /* one (the latest) per sandbox */
        if (!s->deleting && (!name || !strcmp(s->name, name)) && s->session_seq > 0)
            json_array_append_new(arr, vc_session_json(s));
    http_reply_json(r, 200, json_pack("{s:o, s:{s:I, s:n}}", "sessions", arr, "pagination",
                                      "count", (json_int_t)json_array_size(arr), "next"));
}

struct stop_wait {
    struct vc *v;
    struct http_req *r;
    struct sbx_waiter *w;
};

static void stop_closed(struct http_req *r, void *arg)
{
    struct stop_wait *sw = arg;
    sbx_wait_cancel(sw->v->d, sw->w);
    free(sw);
}

static void stop_over(struct sbxd *d, const char *id, void *arg)
{
    struct stop_wait *sw = arg;
    http_req_on_close(sw->r, NULL, NULL);
    struct sbx *s = sbx_find(d, id);
    if (s)
        http_reply_json(sw->r, 200, json_pack("{s:o, s:o}", "session", vc_session_json(s),
                                              "sandbox", vc_sandbox_json(s)));
    else
        http_reply_error(sw->r, 404, "not_found", "sessionId", "the sandbox was deleted");
    free(sw);
}

/* Stop: answered once the stop is over (files kept; the next call resumes). */
static void h_stop(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_sid_sbx(v, r);
    if (!s || sbx_api_park(s, r, h_stop, v)) return;
    char id[40];
    int64_t seq = 0;
    vc_sid_parse(http_req_param(r, "sid"), id, &seq);
    if (seq != s->session_seq) { /* an earlier session: over already; the current one runs on */
        json_t *sess = vc_session_json(s);
        json_object_set_new(sess, "id", json_string(http_req_param(r, "sid")));
        json_object_set_new(sess, "status", json_string("stopped"));
        http_reply_json(r, 200, json_pack("{s:o, s:o}", "session", sess, "sandbox",
                                          vc_sandbox_json(s)));
        return;
    }
    if (s->state != SBX_STOPPED) sbx_stop_begin(s, "stopped");
    if (!sbx_busy(s)) {
        http_reply_json(r, 200, json_pack("{s:o, s:o}", "session", vc_session_json(s), "sandbox",
                                          vc_sandbox_json(s)));
        return;
    }
    struct stop_wait *sw = xcalloc(1, sizeof *sw);
    sw->v = v;
    sw->r = r;
    sw->w = sbx_wait_quiet(s, stop_over, sw);
    http_req_on_close(r, stop_closed, sw);
}

static void h_extend(struct http_req *r, void *arg)
{
    struct sbx *s = vc_session_sbx(arg, r, h_extend);
    json_t *body;
    if (!s || !(body = vc_body(r, false))) return;
    struct err err = ERR_INIT;
    int64_t ms = 0;
    int rc = sbx_json_int(body, "duration", 1, SBX_TIMEOUT_MAX_MS, &ms, &err);
    json_decref(body);
    if (rc == 0 && ms == 0) rc = err_invalid(&err, "duration", "duration (ms to add) is required");
    if (rc < 0 || sbx_extend(s, ms, &err) < 0) {
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "session", vc_session_json(s)));
}

static void h_policy(struct http_req *r, void *arg)
{
    struct sbx *s = vc_session_sbx(arg, r, h_policy);
    json_t *body;
    if (!s || !(body = vc_body(r, false))) return;
    struct err err = ERR_INIT;
    json_t *p = vc_policy_in(body, &err);
    json_decref(body);
    json_t *upd = p ? json_pack("{s:o}", "network_policy", p) : NULL;
    int rc = upd ? sbx_update(s, upd, &err) : -1;
    json_decref(upd);
    if (rc < 0) {
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "session", vc_session_json(s)));
}

/* Ours never stops the sandbox (Vercel's ends the session): the session comes back
 * running, and "sandboxStopped": false says so. */
static void h_snapshot(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_session_sbx(v, r, h_snapshot);
    json_t *body;
    if (!s || !(body = vc_body(r, true))) return;
    struct err err = ERR_INIT;
    int64_t exp = -1;
    json_t *e = json_object_get(body, "expiration");
    if (e && !json_is_null(e) &&
        sbx_json_int(body, "expiration", 0, 10LL * 366 * 24 * 3600 * 1000, &exp, &err) < 0) {
        json_decref(body);
        vc_reply_err(r, &err);
        return;
    }
    json_decref(body);
    if (exp > 0 && exp < 1000) exp = 1000;
    json_t *snap = sbx_snapshot_take(s, exp, NULL, NULL, NULL, &err);
    if (!snap) {
        vc_reply_err(r, &err);
        return;
    }
    http_add_header(r, "X-Rebuno-Note", "snapshots never stop the sandbox here");
    json_t *o = json_pack("{s:o, s:o, s:b, s:s}", "snapshot", vc_snapshot_json(v->d, snap),
                          "session", vc_session_json(s), "sandboxStopped", 0, "note",
                          "rebuno snapshots never stop the sandbox: its session keeps running");
    http_reply_json(r, 200, o);
}

/* ------------------------------------------------------------------ snapshots */

static void h_snap_list(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const char *name = http_req_query(r, "name"), *cursor = http_req_query(r, "cursor");
    long limit;
    if (vc_query_limit(r, &limit) < 0) return;
    const char *next = NULL;
    json_t *arr = sbx_snapshot_list(v->d, name, NULL, cursor, limit, &next), *out = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(arr, i, n) {
        json_array_append_new(out, vc_snapshot_json(v->d, json_incref(n)));
    }
    json_t *o = json_pack("{s:o, s:{s:I, s:s?}}", "snapshots", out, "pagination", "count",
                          (json_int_t)json_array_size(out), "next", next);
    json_decref(arr);
    http_reply_json(r, 200, o);
}

static void h_snap_get(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const char *id = http_req_param(r, "id");
    json_t *snap = sbx_snapshot_find_json(v->d, id);
    if (!snap) {
        http_reply_error(r, 404, "snapshot_not_found", "snapshotId", "no snapshot \"%.80s\"", id);
        return;
    }
    json_t *o = vc_snapshot_json(v->d, snap);
    if (!strcmp(http_req_method(r), "DELETE")) {
        sbx_snapshot_delete(v->d, id);
        json_object_set_new(o, "status", json_string("deleted"));
    }
    http_reply_json(r, 200, json_pack("{s:o}", "snapshot", o));
}

/* ------------------------------------------------------------------ routes */

static bool auth_filter(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const struct local_auth *la = v->d->local;
    if (vc_interactive_path(http_req_method(r), http_req_path(r))) return true; /* its token */
    if (la && local_auth_check(la, http_req_header(r, "Authorization"))) return true;
    if (la)
        local_auth_refuse(la, r);
    else
        http_reply_error(r, 401, "unauthorized", "Authorization", "sandboxd has no local token yet");
    return false;
}

static void shutdown_(struct sbx_observer *o)
{
    vc_tarballs_free((struct vc *)o); /* its worker's notifications keep the loop running */
}

static void release(struct sbx_observer *o)
{
    vc_tarballs_free((struct vc *)o);
    free(o);
}

void sbx_vercel_register(struct sbxd *d, struct http_server *h)
{
    struct vc *v = xcalloc(1, sizeof *v);
    v->o.on_cmd = vc_on_cmd;
    v->o.on_shutdown = shutdown_;
    v->o.release = release;
    v->d = d;
    v->h = h;
    sbx_observe(d, &v->o);
    http_set_filter(h, auth_filter, v);
    /* fixed paths before /v2/sandboxes/:name (the first match wins) */
    http_route(h, "GET", "/v2/sandboxes/snapshots", h_snap_list, v);
    http_route(h, "GET", "/v2/sandboxes/snapshots/:id", h_snap_get, v);
    http_route(h, "DELETE", "/v2/sandboxes/snapshots/:id", h_snap_get, v);
    http_route(h, "GET", "/v2/sandboxes/sessions", h_session_list, v);
    http_route(h, "GET", "/v2/sandboxes/sessions/:sid", h_session_get, v);
    http_route(h, "POST", "/v2/sandboxes/sessions/:sid/stop", h_stop, v);
    http_route(h, "POST", "/v2/sandboxes/sessions/:sid/extend-timeout", h_extend, v);
    http_route(h, "POST", "/v2/sandboxes/sessions/:sid/network-policy", h_policy, v);
    http_route(h, "POST", "/v2/sandboxes/sessions/:sid/snapshot", h_snapshot, v);
    vc_cmd_routes(v);
    vc_file_routes(v);
    vc_interactive_routes(v);
    vc_drive_routes(v); /* before /v2/sandboxes/:name/fork */
    http_route(h, "POST", "/v3/sandboxes", h_create, v);
    http_route(h, "POST", "/v2/sandboxes", h_create, v);
    http_route(h, "GET", "/v2/sandboxes", h_list, v);
    http_route(h, "GET", "/v2/sandboxes/:name", h_get, v);
    http_route(h, "PATCH", "/v2/sandboxes/:name", h_update, v);
    http_route(h, "DELETE", "/v2/sandboxes/:name", h_delete, v);
    http_route(h, "POST", "/v2/sandboxes/:name/fork", h_fork, v);
}
