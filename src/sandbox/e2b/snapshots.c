/*
 * snapshots.c - E2B's snapshot and fork routes over the core's (snapshot.c):
 * createSnapshot (never stops the sandbox: a running one is frozen while its tree is
 * cloned; its name, if any, is kept with it), listSnapshots (by sandbox, by name),
 * deleteSnapshot (DELETE /templates/{id}, E2B's route), and fork {count} (one core fork
 * per copy, each answered as {sandbox} or {error}). A snapshot restores as a create
 * with templateID = its id, or its name for the newest of that name (control.c).
 */
#include "sandbox/e2b/e2b_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/core/validate.h"

#define FORK_COUNT_MAX 16
#define SNAP_LIST_MAX 1000

static json_t *snap_e2b(const json_t *snap)
{
    json_t *names = json_array();
    json_t *name = json_object_get(snap, "name");
    if (json_is_string(name)) json_array_append(names, name);
    return json_pack("{s:O, s:o}", "snapshotID", json_object_get(snap, "id"), "names", names);
}

static void h_snapshot(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_snapshot);
    json_t *body;
    if (!s || !e2b_api_body(r, &body)) return;
    struct err err = ERR_INIT;
    const char *name = NULL;
    json_t *snap = sbx_json_str(body, "name", SBX_SNAP_NAME_MAX, &name, &err) < 0
                       ? NULL
                       : sbx_snapshot_take(s, -1, name, NULL, NULL, &err);
    json_decref(body);
    if (!snap) {
        e2b_api_err(r, &err);
        return;
    }
    http_reply_json(r, 201, snap_e2b(snap));
    json_decref(snap);
}

static void h_list(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    const char *sandbox = http_req_query(r, "sandboxID");
    const char *cursor = http_req_query(r, "nextToken");
    const char *name = http_req_query(r, "name");
    long limit = 100;
    const char *ls = http_req_query(r, "limit");
    if (ls) {
        char *end;
        limit = strtol(ls, &end, 10);
        if (!*ls || *end || limit < 1 || limit > SNAP_LIST_MAX) {
            e2b_api_error(r, 400, "limit must be from 1 to %d", SNAP_LIST_MAX);
            return;
        }
    }
    const char *next = NULL;
    json_t *l = sbx_snapshot_list(e->d, sandbox && *sandbox ? sandbox : NULL,
                                  name && *name ? name : NULL, cursor && *cursor ? cursor : NULL,
                                  limit, &next);
    json_t *arr = json_array();
    size_t i;
    json_t *v;
    for (i = 0; i < json_array_size(l); i++) {
        v = json_array_get(l, i);
        json_array_append_new(arr, snap_e2b(v));
    }
    if (next) http_add_header(r, "X-Next-Token", next);
    json_decref(l);
    http_reply_json(r, 200, arr);
}

static void h_delete(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    const char *id = http_req_param(r, "id");
    if (sbx_snapshot_delete(e->d, id) < 0) {
        e2b_api_error(r, 404, "snapshot \"%.80s\" not found", id ? id : "");
        return;
    }
    http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_fork(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_api_sandbox(e, r, h_fork);
    json_t *body;
    if (!s || !e2b_api_body(r, &body)) return;
    json_t *cv = json_object_get(body, "count");
    int64_t count = 1, timeout = 0;
    if (cv && !json_is_null(cv)) {
        if (!json_is_integer(cv) || json_integer_value(cv) < 1 ||
            json_integer_value(cv) > FORK_COUNT_MAX) {
            json_decref(body);
            e2b_api_error(r, 400, "count must be from 1 to %d", FORK_COUNT_MAX);
            return;
        }
        count = json_integer_value(cv);
    }
    struct err terr = ERR_INIT;
    int trc = e2b_timeout_s(body, &timeout, &terr);
    json_decref(body);
    if (trc < 0) {
        e2b_api_err(r, &terr);
        return;
    }
    json_t *out = json_array();
    char src_id[40];
    snprintf(src_id, sizeof src_id, "%s", s->id);
    for (int64_t i = 0; i < count; i++) {
        struct sbx *src = sbx_find(e->d, src_id);
        struct err err = ERR_INIT;
        json_t *fb = json_object();
        if (timeout) json_object_set_new(fb, "timeout_ms", json_integer(timeout * 1000));
        struct sbx *f = src ? sbx_fork(e->d, src, fb, &err) : NULL;
        json_decref(fb);
        if (f) {
            json_array_append_new(out, json_pack("{s:o}", "sandbox", e2b_sandbox_json(e, f)));
        } else {
            if (!src) err_set(&err, 404, "sandbox_not_found", "", "the source sandbox is gone");
            json_array_append_new(out, json_pack("{s:{s:i, s:s}}", "error", "code",
                                                 err.status ? err.status : 500, "message",
                                                 err.msg));
        }
    }
    http_reply_json(r, 201, out);
}

void e2b_snapshot_routes(struct e2b *e)
{
    struct http_server *h = e->http;
    http_route(h, "POST", "/sandboxes/:id/snapshots", h_snapshot, e);
    http_route(h, "GET", "/snapshots", h_list, e);
    http_route(h, "DELETE", "/templates/:id", h_delete, e);
    http_route(h, "POST", "/sandboxes/:id/fork", h_fork, e);
}
