/*
 * logs.c - the Vercel-compatible command routes: run (with wait: an NDJSON stream of the
 * command, its output and its end), get (with wait: a long-poll to the exit), logs (NDJSON,
 * replayed from the start or from given offsets, then live until the exit) and kill.
 *
 * The content type is exactly application/x-ndjson (the SDK compares it with !==). Lines
 * are ASCII-only JSON (\uXXXX escapes): the SDK decodes each transport chunk on its own,
 * so a multibyte character split between two writes would break; an incomplete UTF-8
 * sequence at the end of what a command wrote so far waits for its rest. Commands run
 * without a shell, as the SDK's argv. `sudo -u USER -- ARGV` (what the SDK's asUser()
 * sends) runs ARGV as USER: the image has no sudo, the core switches users itself.
 *
 * A stream is a record in the endpoint's list, told of command events by its observer
 * (core/observe.h); it goes away with its reply or its client.
 */
#include "sandbox/vercel/vc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"

#define CHUNK (32u * 1024)
#define KEEPALIVE_SEC 15
#define GRACE_MS 20             /* a command done this soon gets one plain (keep-alive) reply */
#define PENDING_MAX (256u << 10) /* or sooner, once this much is waiting */

enum vs_kind { VS_RUN, VS_LOGS, VS_WAIT };

struct vc_stream {
    struct vc_stream *prev, *next;
    struct vc *v;
    struct http_req *r;
    struct sbx_cmd *cmd;
    enum vs_kind kind;
    bool started; /* NDJSON head sent */
    bool told;    /* why the command could not start: said on stderr */
    struct buf pend;     /* lines made before the head is sent (the grace) */
    struct event *grace; /* ends the grace: the head goes out, streaming begins */
    uint64_t off_out, off_err;
    struct event *timer; /* keep-alive of a long-poll or a quiet stream */
};

/* ------------------------------------------------------------------ records */

static void stream_closed(struct http_req *r, void *arg);

static struct vc_stream *stream_new(struct vc *v, struct http_req *r, struct sbx_cmd *c,
                                    enum vs_kind kind)
{
    struct vc_stream *st = xcalloc(1, sizeof *st);
    st->v = v;
    st->r = r;
    st->cmd = c;
    st->kind = kind;
    buf_init(&st->pend, 0); /* ours, bounded by PENDING_MAX plus one chunk */
    st->next = v->streams;
    if (v->streams) v->streams->prev = st;
    v->streams = st;
    c->watchers++;
    http_req_on_close(r, stream_closed, st);
    return st;
}

static void stream_free(struct vc_stream *st)
{
    struct vc *v = st->v;
    if (st->prev)
        st->prev->next = st->next;
    else
        v->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    if (st->cmd) st->cmd->watchers--;
    if (st->timer) event_free(st->timer);
    if (st->grace) event_free(st->grace);
    buf_fini(&st->pend);
    free(st);
}

static void stream_closed(struct http_req *r, void *arg)
{
    stream_free(arg);
}

/* ------------------------------------------------------------------ NDJSON */

static int put_line(struct vc_stream *st, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    size_t n = strlen(s);
    s[n] = '\n';
    int rc = st->started ? http_stream_write(st->r, s, n + 1) : buf_append(&st->pend, s, n + 1);
    free(s);
    return rc;
}

static void stream_begin(struct vc_stream *st);

/* How many of p[0..n) end with complete UTF-8 characters (a split one waits). */
size_t vc_utf8_whole(const unsigned char *p, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char b = p[n - k];
        if ((b & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return need > k ? n - k : n;
    }
    return n;
}

static void stream_drained(struct http_req *r, void *arg);

/* Send what the client has not seen; the last line (VS_RUN) or EOF once it is done. */
static void pump(struct vc_stream *st)
{
    struct sbx_cmd *c = st->cmd;
    char *tmp = xmalloc(CHUNK);
    bool done = sbx_cmd_done(c);
    for (;;) {
        bool sent = false;
        for (int k = 1; k <= 2; k++) {
            const struct sbx_ring *ring = k == 1 ? &c->out : &c->err;
            uint64_t *off = k == 1 ? &st->off_out : &st->off_err;
            uint64_t from;
            size_t n = sbx_ring_read(ring, *off, tmp, CHUNK, &from);
            if (n == 0) {
                if (from > *off) *off = from; /* dropped from the ring */
                continue;
            }
            size_t whole = done ? n : vc_utf8_whole((unsigned char *)tmp, n);
            if (whole == 0) continue;
            json_t *line = json_pack("{s:s, s:o}", "stream", k == 1 ? "stdout" : "stderr", "data",
                                     sbx_json_text(tmp, whole));
            int rc = put_line(st, line);
            if (rc == -EAGAIN) goto blocked;
            if (rc < 0) goto out;
            *off = from + whole;
            sent = true;
        }
        if (!sent) break;
    }
    if (done && c->status == CMD_FAILED && !st->told) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s\n", c->error.msg);
        if (put_line(st, json_pack("{s:s, s:s}", "stream", "stderr", "data", msg)) == -EAGAIN)
            goto blocked;
        st->told = true;
    }
    if (done) {
        if (st->kind == VS_RUN &&
            put_line(st, json_pack("{s:o}", "command", vc_cmd_json(c))) == -EAGAIN)
            goto blocked;
        free(tmp);
        if (st->started) {
            http_sse_end(st->r);
        } else { /* done within the grace: one reply with a length, the connection stays */
            http_add_header(st->r, "Cache-Control", "no-cache");
            http_reply_raw(st->r, 200, "application/x-ndjson", st->pend.data ? st->pend.data : "",
                           st->pend.len);
        }
        stream_free(st);
        return;
    }
    if (!st->started && st->pend.len >= PENDING_MAX) {
        free(tmp);
        stream_begin(st);
        pump(st);
        return;
    }
out:
    free(tmp);
    return;
blocked:
    free(tmp);
    http_sse_on_drain(st->r, stream_drained, st);
}

static void stream_drained(struct http_req *r, void *arg)
{
    pump(arg);
}

static void keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct vc_stream *st = arg;
    if (st->kind == VS_WAIT) return; /* a long-poll has nothing to send */
    /* an empty line: the SDK's NDJSON parser skips it, proxies see the stream alive */
    if (http_stream_write(st->r, "\n", 1) < 0) return;
}

static void stream_begin(struct vc_stream *st)
{
    http_stream_start(st->r, "application/x-ndjson");
    st->started = true;
    if (st->grace) {
        event_free(st->grace);
        st->grace = NULL;
    }
    if (st->pend.len) { /* a few lines: under the back-pressure limit of a new stream */
        http_stream_write(st->r, st->pend.data, st->pend.len);
        buf_reset(&st->pend);
    }
    st->timer = event_new(st->v->d->base, -1, EV_PERSIST, keepalive, st);
    struct timeval tv = {KEEPALIVE_SEC, 0};
    event_add(st->timer, &tv);
}

static void grace_over(evutil_socket_t fd, short what, void *arg)
{
    struct vc_stream *st = arg;
    stream_begin(st);
    pump(st);
}

/* Start answering: at once for a finished command (one reply), after GRACE_MS for one
 * still running (a short command still gets one reply, with keep-alive). */
static void stream_open(struct vc_stream *st, int64_t grace_ms)
{
    if (sbx_cmd_done(st->cmd)) {
        pump(st);
        return;
    }
    if (grace_ms <= 0) {
        stream_begin(st);
        pump(st);
        return;
    }
    st->grace = evtimer_new(st->v->d->base, grace_over, st);
    struct timeval tv = {0, (suseconds_t)(grace_ms * 1000)};
    event_add(st->grace, &tv);
}

void vc_on_cmd(struct sbx_observer *o, struct sbx_cmd *c, int ev)
{
    struct vc *v = (struct vc *)o;
    for (struct vc_stream *st = v->streams, *next; st; st = next) {
        next = st->next;
        if (st->cmd != c) continue;
        if (ev & SBX_EV_GONE) {
            if (st->kind == VS_WAIT || !st->started) {
                http_reply_error(st->r, 404, "not_found", "cmdId",
                                 "the command went away (its sandbox was deleted)");
            } else {
                put_line(st, json_pack("{s:s, s:{s:s, s:s}}", "stream", "error", "data", "code",
                                       "command_gone", "message",
                                       "the command went away (its sandbox was deleted)"));
                http_sse_end(st->r);
            }
            st->cmd->watchers--;
            st->cmd = NULL;
            stream_free(st);
            continue;
        }
        if (st->kind == VS_WAIT) {
            if (!(ev & SBX_EV_DONE)) continue;
            http_reply_json(st->r, 200, json_pack("{s:o}", "command", vc_cmd_json(c)));
            stream_free(st);
            continue;
        }
        if (ev & (SBX_EV_OUTPUT | SBX_EV_DONE | SBX_EV_STARTED)) pump(st);
    }
}

/* ------------------------------------------------------------------ handlers */

static struct sbx_cmd *get_cmd(struct sbx *s, struct http_req *r)
{
    const char *id = http_req_param(r, "cid");
    struct sbx_cmd *c = sbx_cmd_find(s, id);
    if (!c)
        http_reply_error(r, 404, "not_found", "cmdId", "no command \"%.80s\" in sandbox %s", id,
                         s->name);
    return c;
}

/* The SDK's command body -> the /v1 one. `sudo -u USER [--] ARGV` becomes ARGV as USER. */
static json_t *map_cmd(const json_t *in, struct err *err)
{
    json_t *cmd = json_object_get(in, "command"), *args = json_object_get(in, "args");
    if (!json_is_string(cmd)) {
        err_invalid(err, "command", "command must be a string (the program; no shell)");
        return NULL;
    }
    if (args && !json_is_null(args) && !json_is_array(args)) {
        err_invalid(err, "args", "args must be a list of strings");
        return NULL;
    }
    json_t *o = json_object();
    json_t *a = json_is_array(args) ? json_copy(args) : json_array();
    if (!strcmp(json_string_value(cmd), "sudo") && json_array_size(a) >= 3 &&
        json_is_string(json_array_get(a, 0)) &&
        !strcmp(json_string_value(json_array_get(a, 0)), "-u") &&
        json_is_string(json_array_get(a, 1))) {
        json_object_set(o, "user", json_array_get(a, 1));
        size_t skip = 2;
        const char *dd = json_string_value(json_array_get(a, 2));
        if (dd && !strcmp(dd, "--")) skip = 3;
        cmd = json_array_get(a, skip);
        json_object_set(o, "cmd", cmd ? cmd : json_null());
        json_t *rest = json_array();
        for (size_t i = skip + 1; i < json_array_size(a); i++)
            json_array_append(rest, json_array_get(a, i));
        json_decref(a);
        a = rest;
    } else {
        json_object_set(o, "cmd", cmd);
    }
    json_object_set_new(o, "args", a);
    json_t *v;
    if ((v = json_object_get(in, "cwd")) && !json_is_null(v))
        json_object_set(o, "cwd", v);
    else if (!json_object_get(o, "user"))
        json_object_set_new(o, "cwd", json_string(VC_CWD));
    if ((v = json_object_get(in, "env")) && !json_is_null(v)) json_object_set(o, "env", v);
    if ((v = json_object_get(in, "sudo")) && !json_is_null(v)) json_object_set(o, "sudo", v);
    if ((v = json_object_get(in, "timeout")) && !json_is_null(v)) json_object_set(o, "timeout_ms", v);
    return o;
}

static void h_run(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_session_sbx(v, r, h_run);
    json_t *in;
    if (!s || !(in = vc_body(r, false))) return;
    struct err err = ERR_INIT;
    bool wait = false;
    if (sbx_json_bool(in, "wait", &wait, &err) < 0) {
        json_decref(in);
        vc_reply_err(r, &err);
        return;
    }
    json_t *body = map_cmd(in, &err);
    json_decref(in);
    struct sbx_cmd *c = body ? sbx_cmd_start(s, body, &err) : NULL;
    json_decref(body);
    if (!c) {
        vc_reply_err(r, &err);
        return;
    }
    if (!wait) {
        http_reply_json(r, 200, json_pack("{s:o}", "command", vc_cmd_json(c)));
        return;
    }
    struct vc_stream *st = stream_new(v, r, c, VS_RUN);
    json_t *first = vc_cmd_json(c);
    json_object_set_new(first, "exitCode", json_null()); /* the first line: not finished */
    json_object_del(first, "durationMs");
    put_line(st, json_pack("{s:o}", "command", first));
    stream_open(st, GRACE_MS);
}

static void h_cmd_get(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_sid_sbx(v, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    if (!c) return;
    const char *w = http_req_query(r, "wait");
    if (!w || strcmp(w, "true") || sbx_cmd_done(c)) {
        http_reply_json(r, 200, json_pack("{s:o}", "command", vc_cmd_json(c)));
        return;
    }
    stream_new(v, r, c, VS_WAIT);
}

static bool query_off(struct http_req *r, const char *key, uint64_t *out)
{
    const char *q = http_req_query(r, key);
    if (!q) return true;
    char *end;
    unsigned long long n = strtoull(q, &end, 10);
    if (!*q || *end || *q == '-' || strlen(q) > 19) {
        http_reply_error(r, 400, "bad_request", key, "%s must be a byte offset", key);
        return false;
    }
    *out = n;
    return true;
}

/* Logs from the start (or from ?stdoutOffset/?stderrOffset, byte offsets: a client that
 * reconnects says what it has), then live until the command ends. */
static void h_logs(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_sid_sbx(v, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    uint64_t oo = 0, oe = 0;
    if (!c || !query_off(r, "stdoutOffset", &oo) || !query_off(r, "stderrOffset", &oe)) return;
    struct vc_stream *st = stream_new(v, r, c, VS_LOGS);
    st->off_out = oo;
    st->off_err = oe;
    stream_open(st, 0);
}

static void h_kill(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_sid_sbx(v, r);
    struct sbx_cmd *c = s ? get_cmd(s, r) : NULL;
    json_t *body;
    if (!c || !(body = vc_body(r, true))) return;
    struct err err = ERR_INIT;
    int64_t sig = 15;
    int rc = sbx_json_int(body, "signal", 1, 64, &sig, &err);
    json_decref(body);
    if (rc < 0 || (!sbx_cmd_done(c) && sbx_cmd_signal(c, (int)sig, true, &err) < 0)) {
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "command", vc_cmd_json(c)));
}

void vc_cmd_routes(struct vc *v)
{
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/cmd", h_run, v);
    http_route(v->h, "GET", "/v2/sandboxes/sessions/:sid/cmd/:cid", h_cmd_get, v);
    http_route(v->h, "GET", "/v2/sandboxes/sessions/:sid/cmd/:cid/logs", h_logs, v);
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/cmd/:cid/kill", h_kill, v);
}
