/*
 * drives.c - the Vercel-compatible drive routes (list, get-or-create, delete) over the
 * core's drive operations (storage/drive.c), and the mapping of the SDK's mounts
 * ({path: {drive, mode: "read-write"|"snapshot"}}) to and from /v1's ("rw"|"snapshot").
 */
#include "sandbox/vercel/vc_int.h"

#include <stdlib.h>
#include <string.h>

#include "sandbox/core/validate.h"


/* A /v1 drive object as the SDK's Drive (consumed). */
static json_t *drive_out(struct sbxd *d, json_t *v1)
{
    json_t *o = json_object();
    json_object_set(o, "id", json_object_get(v1, "id"));
    json_object_set(o, "name", json_object_get(v1, "name"));
    json_object_set_new(o, "projectId", json_string("prj_local"));
    json_object_set_new(o, "region", json_string(VC_REGION));
    json_object_set(o, "maxSizeBytes", json_object_get(v1, "max_size_bytes"));
    json_object_set_new(o, "createdAt", json_integer(vc_iso_ms(json_object_get(v1, "created_at"))));
    json_object_set_new(o, "updatedAt", json_integer(vc_iso_ms(json_object_get(v1, "updated_at"))));
    json_t *at = json_object_get(v1, "attached_to");
    struct sbx *s = json_is_object(at)
                        ? sbx_find_id(d, json_string_value(json_object_get(at, "sandbox_id")))
                        : NULL;
    if (s) {
        char sid[VC_SID_MAX];
        vc_sid(s, s->session_seq, sid);
        json_object_set_new(o, "currentSessionId", json_string(sid));
        json_object_set_new(o, "currentSandboxName", json_string(s->name));
    }
    json_decref(v1);
    return o;
}

json_t *vc_mounts_in(const json_t *m, struct err *err)
{
    if (!json_is_object(m)) {
        err_invalid(err, "mounts", "mounts must map absolute paths to {\"drive\", \"mode\"}");
        return NULL;
    }
    json_t *o = json_object();
    const char *path;
    json_t *v;
    json_object_foreach((json_t *)m, path, v) {
        const char *drive = json_string_value(json_object_get(v, "drive"));
        const char *mode = json_string_value(json_object_get(v, "mode"));
        if (!json_is_object(v) || !drive) {
            json_decref(o);
            err_invalid(err, "mounts", "each mount must be {\"drive\": NAME, \"mode\": ...}");
            return NULL;
        }
        const char *ours = !mode || !strcmp(mode, "read-write") ? "rw"
                           : !strcmp(mode, "snapshot") || !strcmp(mode, "read-only") ? "snapshot"
                                                                                      : NULL;
        if (!ours) {
            json_decref(o);
            err_invalid(err, "mounts", "a mount's mode must be \"read-write\" or \"snapshot\"");
            return NULL;
        }
        json_object_set_new(o, path, json_pack("{s:s, s:s}", "drive", drive, "mode", ours));
    }
    return o;
}

json_t *vc_mounts_out(struct sbx *s)
{
    json_t *m = sbx_mounts_json(s->d, s->mounts), *o = json_object();
    const char *path;
    json_t *v;
    json_object_foreach(m, path, v) {
        const char *mode = json_string_value(json_object_get(v, "mode"));
        json_t *name = json_object_get(v, "drive");
        json_object_set_new(o, path, json_pack("{s:O, s:s}", "drive",
                                               name ? name : json_object_get(v, "drive_id"), "mode",
                                               mode && !strcmp(mode, "snapshot") ? "snapshot"
                                                                                 : "read-write"));
    }
    json_decref(m);
    return o;
}

static void h_list(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    const char *cur = http_req_query(r, "cursor"), *order = http_req_query(r, "sortOrder");
    long limit, start = 0;
    char *end;
    if (vc_query_limit(r, &limit) < 0) return;
    if (cur && (!*cur || (start = strtol(cur, &end, 10)) < 0 || *end)) {
        http_reply_error(r, 400, "bad_request", "cursor", "cursor must come from pagination.next");
        return;
    }
    json_t *all = sbx_drive_list_json(v->d, http_req_query(r, "namePrefix")), *out = json_array();
    size_t n = json_array_size(all), i = (size_t)start;
    bool desc = !order || strcmp(order, "asc") != 0;
    for (; i < n && (long)json_array_size(out) < limit; i++)
        json_array_append_new(out, drive_out(v->d, json_incref(json_array_get(all, desc ? n - 1 - i : i))));
    json_decref(all);
    char next[32];
    snprintf(next, sizeof next, "%zu", i);
    http_reply_json(r, 200, json_pack("{s:o, s:{s:I, s:s?}}", "drives", out, "pagination", "count",
                                      (json_int_t)json_array_size(out), "next", i < n ? next : NULL));
}

static void h_ensure(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    json_t *body = vc_body(r, true);
    if (!body) return;
    struct err err = ERR_INIT;
    int64_t max = 0;
    const char *region = NULL;
    json_t *o = NULL;
    bool created;
    if (sbx_json_str(body, "region", 64, &region, &err) == 0 &&
        (json_is_null(json_object_get(body, "maxSizeBytes")) ||
         sbx_json_int(body, "maxSizeBytes", 0, INT64_MAX, &max, &err) == 0))
        o = sbx_drive_ensure(v->d, http_req_param(r, "name"), max, &created, &err);
    json_decref(body);
    if (!o) {
        if (!strcmp(err.field, "max_size_bytes")) snprintf(err.field, sizeof err.field, "maxSizeBytes");
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "drive", drive_out(v->d, o)));
}

static void h_delete(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct err err = ERR_INIT;
    json_t *o = sbx_drive_delete(v->d, http_req_param(r, "name"), &err);
    if (!o) {
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "drive", drive_out(v->d, o)));
}

void vc_drive_routes(struct vc *v)
{
    http_route(v->h, "GET", "/v2/sandboxes/drives", h_list, v);
    http_route(v->h, "POST", "/v2/sandboxes/drives/:name", h_ensure, v);
    http_route(v->h, "DELETE", "/v2/sandboxes/drives/:name", h_delete, v);
}
