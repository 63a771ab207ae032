/*
 * control.c - E2B's control-plane REST routes (docs/e2b.md): create, connect (which
 * resumes), info, list with metadata and state queries, kill, timeout, pause,
 * metrics, snapshots, fork and network updates, each mapped onto the core's sandbox
 * operations (the ones /v1 uses) and answered in E2B's shapes. Errors are
 * {"code": <status>, "message"}: the SDK reads "code" (404 -> SandboxNotFoundError,
 * 409 on pause -> already paused).
 */
#include "sandbox/e2b/e2b_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "sandbox/core/validate.h"
#include "sandbox/storage/image.h"

#define E2B_DEFAULT_TIMEOUT_S 300
#define E2B_LIST_MAX 1000
#define E2B_TEMPLATE_BASE "base"

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

/* E2B's state of ours: a stopped sandbox keeps its files and comes back on connect,
 * as a paused E2B sandbox does. */
static const char *e2b_state(const struct sbx *s)
{
    return s->state == SBX_RUNNING ? "running" : "paused";
}

static json_t *template_id(const struct sbx *s)
{
    if (!strcmp(s->image, SBX_IMAGE_DEFAULT)) return json_string(E2B_TEMPLATE_BASE);
    char iname[900];
    sbx_image_name(s->d, s->image, iname, sizeof iname);
    return json_string(iname);
}

/* Sandbox (create, connect, fork). */
json_t *e2b_sandbox_json(struct e2b *e, const struct sbx *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "sandboxID", json_string(s->id));
    json_object_set_new(o, "templateID", template_id(s));
    json_object_set_new(o, "clientID", json_string("local"));
    json_object_set_new(o, "envdVersion", json_string(E2B_ENVD_VERSION));
    char tok[E2B_TOKEN_HEX + 1];
    e2b_access_token(e, s->id, tok);
    json_object_set_new(o, "envdAccessToken", json_string(tok));
    json_object_set_new(o, "domain", json_null());
    json_object_set_new(o, "alias", json_string(s->name));
    return o;
}

/* ListedSandbox, and SandboxDetail when detail. */
static json_t *detail_json(struct e2b *e, const struct sbx *s, bool detail)
{
    json_t *o = json_object();
    json_object_set_new(o, "sandboxID", json_string(s->id));
    json_object_set_new(o, "templateID", template_id(s));
    json_object_set_new(o, "alias", json_string(s->name));
    json_object_set_new(o, "clientID", json_string("local"));
    json_object_set_new(o, "envdVersion", json_string(E2B_ENVD_VERSION));
    json_object_set_new(o, "cpuCount", json_integer(s->vcpus));
    json_object_set_new(o, "memoryMB", json_integer(s->memory_mb));
    json_object_set_new(o, "diskSizeMB", json_integer(s->disk_mb));
    json_object_set_new(o, "startedAt", iso(s->sess ? s->sess->started_at : s->created_at));
    /* a paused or stopped sandbox has no clock running: its end is "now" */
    json_object_set_new(o, "endAt", iso(s->expires_at > 0 ? s->expires_at : clock_now_ms()));
    json_object_set_new(o, "state", json_string(e2b_state(s)));
    json_object_set_new(o, "metadata", json_deep_copy(s->metadata));
    if (detail) {
        char tok[E2B_TOKEN_HEX + 1];
        e2b_access_token(e, s->id, tok);
        json_object_set_new(o, "envdAccessToken", json_string(tok));
        json_object_set_new(o, "domain", json_null());
        json_object_set_new(o, "network", e2b_network_info(s));
        json_object_set_new(o, "lifecycle",
                            json_pack("{s:s, s:b}", "onTimeout",
                                      s->on_timeout_pause ? "pause" : "kill", "autoResume",
                                      0));
    }
    return o;
}


/* ------------------------------------------------------------------ create */

/* NewSandboxV2 -> the /v1 create body (docs/sandbox-api.md). */
static json_t *create_body(struct e2b *e, json_t *in, struct err *err)
{
    static const char *const known[] = {
        "templateID", "metadata", "envVars", "timeout", "allow_internet_access", "network",
        "autoPause", "autoPauseMemory", "autoResume", "secure", "mcp", "volumeMounts", NULL};
    if (sbx_json_known(in, known, "a sandbox", err) < 0) return NULL;
    const char *tmpl;
    bool auto_pause = false, internet = true, pause_memory = true;
    int64_t t = E2B_DEFAULT_TIMEOUT_S;
    if (sbx_json_str(in, "templateID", 500, &tmpl, err) < 0 ||
        sbx_json_bool(in, "autoPause", &auto_pause, err) < 0 ||
        sbx_json_bool(in, "autoPauseMemory", &pause_memory, err) < 0 ||
        sbx_json_bool(in, "allow_internet_access", &internet, err) < 0 ||
        e2b_timeout_s(in, &t, err) < 0)
        return NULL;
    json_t *vm = json_object_get(in, "volumeMounts");
    if (vm && !json_is_null(vm) && json_array_size(vm) > 0) {
        err_set(err, 400, "validation_error", "volumeMounts",
                "volumes are not available on this machine; use /v1 drives (docs/sandbox-api.md)");
        return NULL;
    }
    json_t *b = json_object();
    json_t *snap = tmpl ? sbx_snapshot_find_json(e->d, tmpl) : NULL;
    json_decref(snap);
    /* a snapshot's name restores the newest of that name (E2B: the name's latest build) */
    const char *named = snap || !tmpl ? NULL : sbx_snapshot_named(e->d, tmpl);
    if (!tmpl || !strcmp(tmpl, E2B_TEMPLATE_BASE) || !strcmp(tmpl, "default")) {
        /* the default image */
    } else if (snap || named) {
        json_object_set_new(b, "source", json_pack("{s:s, s:s}", "type", "snapshot",
                                                   "snapshot_id", snap ? tmpl : named));
    } else if (sbx_image_ref_valid(tmpl)) {
        json_object_set_new(b, "image", json_string(tmpl));
    } else {
        json_decref(b);
        err_set(err, 404, "template_not_found", "templateID",
                "template \"%.80s\" not found: use \"base\", a snapshot id or name, or an image "
                "(a reference or sha256:..., imported or pulled)", tmpl);
        return NULL;
    }
    json_t *v;
    if ((v = json_object_get(in, "metadata")) && !json_is_null(v))
        json_object_set(b, "metadata", v);
    if ((v = json_object_get(in, "envVars")) && !json_is_null(v)) json_object_set(b, "env", v);
    json_object_set_new(b, "timeout_ms", json_integer(t * 1000));
    /* a filesystem-only auto-pause (autoPauseMemory: false) is our stop: files kept */
    json_object_set_new(b, "on_timeout", json_string(auto_pause && pause_memory ? "pause" : "stop"));
    /* E2B's default user has passwordless sudo (e2b_user gives it the sudoers entry) */
    json_object_set_new(b, "allow_privilege_escalation", json_true());
    json_t *policy;
    if (e2b_network_policy(json_object_get(in, "network"), internet, &policy, err) < 0) {
        json_decref(b);
        return NULL;
    }
    json_object_set_new(b, "network_policy", policy);
    return b;
}

static void h_create(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    json_t *in;
    if (!e2b_api_body(r, &in)) return;
    struct err err = ERR_INIT;
    json_t *b = create_body(e, in, &err);
    json_decref(in);
    if (!b) {
        e2b_api_err(r, &err);
        return;
    }
    struct sbx *s = sbx_create(e->d, b, &err);
    json_decref(b);
    if (!s) {
        e2b_api_err(r, &err);
        return;
    }
    http_reply_json(r, 201, e2b_sandbox_json(e, s));
}

/* ------------------------------------------------------------------ the others */

static void h_get(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    const char *id = http_req_param(r, "id");
    struct sbx *s = sbx_find(e->d, id);
    if (!s) {
        e2b_api_error(r, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return;
    }
    http_reply_json(r, 200, detail_json(e, s, true));
}

/* "k=v&k2=v2", each key and value percent-encoded once more. */
static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int pct_decode(const char *in, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '%') {
            int hi = i + 2 < n ? hexval(in[i + 1]) : -1, lo = hi >= 0 ? hexval(in[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o + 1 >= outsz) return -1;
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

static json_t *parse_metadata_query(const char *q, struct err *err)
{
    json_t *m = json_object();
    const char *p = q;
    while (*p) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        char k[256], v[1024];
        if (!eq || pct_decode(p, (size_t)(eq - p), k, sizeof k) < 0 ||
            pct_decode(eq + 1, n - (size_t)(eq - p) - 1, v, sizeof v) < 0 || !*k) {
            json_decref(m);
            err_invalid(err, "metadata", "metadata must be key=value pairs joined by &");
            return NULL;
        }
        json_object_set_new(m, k, json_string(v));
        p += n;
        if (*p == '&') p++;
    }
    return m;
}

static void h_list(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct err err = ERR_INIT;
    bool want_running = true, want_paused = true;
    const char *state = http_req_query(r, "state");
    if (state && *state) {
        want_running = want_paused = false;
        char *copy = xstrdup(state), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (!strcmp(t, "running"))
                want_running = true;
            else if (!strcmp(t, "paused"))
                want_paused = true;
            else {
                free(copy);
                e2b_api_error(r, 400, "state must be running, paused or both (comma-separated)");
                return;
            }
        }
        free(copy);
    }
    json_t *meta = NULL;
    const char *mq = http_req_query(r, "metadata");
    if (mq && *mq && !(meta = parse_metadata_query(mq, &err))) {
        e2b_api_err(r, &err);
        return;
    }
    long limit = 100;
    const char *ls = http_req_query(r, "limit");
    if (ls) {
        char *end;
        limit = strtol(ls, &end, 10);
        if (!*ls || *end || limit < 1 || limit > E2B_LIST_MAX) {
            json_decref(meta);
            e2b_api_error(r, 400, "limit must be from 1 to %d", E2B_LIST_MAX);
            return;
        }
    }
    const char *cursor = http_req_query(r, "nextToken");
    if (cursor && !*cursor) cursor = NULL;
    /* E2B lists newest first unless order=asc */
    const char *order = http_req_query(r, "order");
    bool asc = order && !strcmp(order, "asc");
    if (order && !asc && strcmp(order, "desc") != 0) {
        json_decref(meta);
        e2b_api_error(r, 400, "order must be asc or desc");
        return;
    }
    int64_t after = 0;
    const char *sa = http_req_query(r, "startedAfter");
    if (sa && *sa && clock_parse_iso(sa, &after) < 0) {
        json_decref(meta);
        e2b_api_error(r, 400, "startedAfter must be an RFC 3339 time");
        return;
    }
    const char *tmpl = http_req_query(r, "template");
    if (tmpl && !*tmpl) tmpl = NULL;
    json_t *arr = json_array();
    const char *next = NULL;
    bool past = cursor == NULL;
    for (struct sbx *s = asc ? e->d->first : e->d->last; s; s = asc ? s->next : s->prev) {
        if (!past) {
            past = !strcmp(s->id, cursor);
            continue;
        }
        bool running = s->state == SBX_RUNNING;
        int64_t started = s->sess ? s->sess->started_at : s->created_at;
        if (s->deleting || (running ? !want_running : !want_paused) ||
            (meta && !sbx_metadata_match(s->metadata, meta)) || (after && started < after))
            continue;
        if (tmpl) {
            json_t *t = template_id(s);
            bool same = !strcmp(json_string_value(t), tmpl);
            json_decref(t);
            if (!same) continue;
        }
        if ((long)json_array_size(arr) == limit) {
            json_t *last = json_array_get(arr, json_array_size(arr) - 1);
            next = json_string_value(json_object_get(last, "sandboxID"));
            break;
        }
        json_array_append_new(arr, detail_json(e, s, false));
    }
    json_decref(meta);
    if (next) http_add_header(r, "X-Next-Token", next);
    http_reply_json(r, 200, arr);
}

static void h_kill(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_kill);
    if (!s) return;
    struct err err = ERR_INIT;
    if (sbx_delete(s, &err) < 0)
        e2b_api_err(r, &err);
    else
        http_reply_raw(r, 204, NULL, NULL, 0);
}

static int set_timeout(struct sbx *s, int64_t secs, struct err *err)
{
    json_t *b = json_pack("{s:I}", "timeout_ms", (json_int_t)(secs * 1000));
    int rc = sbx_update(s, b, err);
    json_decref(b);
    return rc;
}

static void h_timeout(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_timeout);
    json_t *body;
    if (!s || !e2b_api_body(r, &body)) return;
    struct err err = ERR_INIT;
    int64_t t = 0;
    if (e2b_timeout_s(body, &t, &err) == 0 && t == 0)
        err_invalid(&err, "timeout", "timeout (seconds) is required");
    json_decref(body);
    if (err.status || set_timeout(s, t, &err) < 0) {
        e2b_api_err(r, &err);
        return;
    }
    http_reply_raw(r, 204, NULL, NULL, 0);
}

/* body {"memory": false} (pause({keepMemory: false})): a filesystem-only pause, which is
 * our stop (the session ends, the files stay; connect boots a new one). */
static bool memory_dropped(struct http_req *r, struct err *err, int *rc)
{
    json_t *body;
    *rc = 0;
    if (!e2b_api_body(r, &body)) {
        *rc = -2; /* answered */
        return false;
    }
    bool keep = true;
    if (sbx_json_bool(body, "memory", &keep, err) < 0) *rc = -1;
    json_decref(body);
    return !keep;
}

static void reply_paused(struct http_req *r, void *arg)
{
    http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_pause(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_pause);
    if (!s) return;
    struct err err = ERR_INIT;
    int rc;
    bool drop = memory_dropped(r, &err, &rc);
    if (rc == -2) return;
    if (rc == 0 && s->state != SBX_RUNNING) {
        e2b_api_error(r, 409, "sandbox %s is already paused", s->id);
        return;
    }
    if (rc == 0 && drop) {
        sbx_stop_begin(s, "stopped"); /* answered once the stop is over */
        if (!sbx_api_park(s, r, reply_paused, arg)) reply_paused(r, arg);
        return;
    }
    if (rc < 0 || sbx_pause(s, &err) < 0)
        e2b_api_err(r, &err);
    else
        http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_connect(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_api_sandbox(e, r, h_connect);
    json_t *body;
    if (!s || !e2b_api_body(r, &body)) return;
    struct err err = ERR_INIT;
    int64_t t = 0;
    bool memory = true;
    int rc = e2b_timeout_s(body, &t, &err);
    if (rc == 0) rc = sbx_json_bool(body, "memory", &memory, &err);
    json_decref(body);
    if (rc == 0 && !memory && s->state == SBX_PAUSED) {
        /* onResume: "reboot": drop the frozen memory, boot anew on the same files */
        sbx_stop_begin(s, "stopped");
        if (e2b_api_sandbox(e, r, h_connect) != s) return; /* runs again once stopped */
    }
    bool was_running = s->state == SBX_RUNNING;
    int64_t end_before = s->expires_at;
    if (rc == 0) rc = sbx_ensure_running(s, NULL, &err);
    /* connect only extends: a running sandbox's later end stays */
    if (rc == 0 && t > 0 && !(was_running && end_before > clock_now_ms() + t * 1000))
        rc = set_timeout(s, t, &err);
    if (rc < 0) {
        e2b_api_err(r, &err);
        return;
    }
    http_reply_json(r, was_running ? 200 : 201, e2b_sandbox_json(e, s));
}

static void h_network(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_network);
    json_t *body;
    if (!s || !e2b_api_body(r, &body)) return;
    struct err err = ERR_INIT;
    json_t *policy;
    /* the update replaces everything: what it leaves out is cleared */
    int rc = e2b_network_policy(body, true, &policy, &err);
    json_decref(body);
    if (rc == 0) {
        json_t *u = json_pack("{s:o}", "network_policy", policy);
        rc = sbx_update(s, u, &err);
        json_decref(u);
    }
    if (rc < 0)
        e2b_api_err(r, &err);
    else
        http_reply_raw(r, 204, NULL, NULL, 0);
}

/* The cpu in use since the last sample (the session's start before the first), as a
 * share of the sandbox's vCPUs in percent (0..100, two decimals), as envd reports it. */
static double cpu_used_pct(struct sbx *s, const struct sbx_cg_stats *st)
{
    struct sbx_session *ss = s->sess;
    int64_t now = clock_mono_ms(), dt_ms = now - ss->cpu_seen_mono;
    if (st->cpu_usage_us < 0 || dt_ms <= 0 || s->vcpus <= 0) return 0;
    double used = (double)(st->cpu_usage_us - ss->cpu_seen_us);
    double pct = used / ((double)dt_ms * 1000.0 * (double)s->vcpus) * 100.0;
    ss->cpu_seen_us = st->cpu_usage_us;
    ss->cpu_seen_mono = now;
    if (pct < 0) pct = 0;
    if (pct > 100) pct = 100;
    return (double)(int64_t)(pct * 100.0 + 0.5) / 100.0;
}

static void h_metrics(struct http_req *r, void *arg)
{
    struct sbx *s = e2b_api_sandbox(arg, r, h_metrics);
    if (!s) return;
    json_t *arr = json_array();
    /* one sample, now: in the asked range (unix seconds), or none */
    int64_t now_s = clock_now_ms() / 1000;
    const char *qs = http_req_query(r, "start"), *qe = http_req_query(r, "end");
    bool in_range = (!qs || strtoll(qs, NULL, 10) <= now_s) && (!qe || strtoll(qe, NULL, 10) >= now_s);
    if (s->sess && in_range) {
        struct sbx_cg_stats st;
        sbx_cg_stats(s->sess->cg, &st);
        int64_t now = clock_now_ms();
        json_t *m = json_object();
        json_object_set_new(m, "timestamp", iso(now));
        json_object_set_new(m, "timestampUnix", json_integer(now / 1000));
        json_object_set_new(m, "cpuCount", json_integer(s->vcpus));
        json_object_set_new(m, "cpuUsedPct", json_real(cpu_used_pct(s, &st)));
        json_object_set_new(m, "memUsed", json_integer(st.memory_bytes));
        json_object_set_new(m, "memTotal", json_integer(s->memory_mb * 1024 * 1024));
        int64_t used = s->disk_enforced ? sbx_storage_used(s->d->storage, s->fs_dir) : -1;
        json_object_set_new(m, "diskUsed", json_integer(used > 0 ? used : 0));
        json_object_set_new(m, "diskTotal", json_integer(s->disk_mb * 1024 * 1024));
        json_array_append_new(arr, m);
    }
    http_reply_json(r, 200, arr);
}

void e2b_control_routes(struct e2b *e)
{
    struct http_server *h = e->http;
    http_route(h, "POST", "/v2/sandboxes", h_create, e);
    http_route(h, "GET", "/v2/sandboxes", h_list, e);
    http_route(h, "POST", "/v2/sandboxes/:id/connect", h_connect, e);
    /* the routes SDKs before 2.51 use for the same */
    http_route(h, "POST", "/sandboxes", h_create, e);
    http_route(h, "POST", "/sandboxes/:id/connect", h_connect, e);
    http_route(h, "GET", "/sandboxes/:id", h_get, e);
    http_route(h, "DELETE", "/sandboxes/:id", h_kill, e);
    http_route(h, "POST", "/sandboxes/:id/timeout", h_timeout, e);
    http_route(h, "POST", "/sandboxes/:id/pause", h_pause, e);
    http_route(h, "GET", "/sandboxes/:id/metrics", h_metrics, e);
    http_route(h, "PUT", "/sandboxes/:id/network", h_network, e);
}
