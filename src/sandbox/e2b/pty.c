/*
 * pty.c - envd's terminals over the core's (runtime/pty.c, struct sbx_pty_client):
 * Start with a "pty" opens one and streams its output as data.pty events, Connect by
 * pid attaches a new stream (the old one ends), SendInput {pty} writes to it, Update
 * resizes it, SendSignal kills its session. A stream that goes away detaches: the
 * terminal runs on, as envd's do, until its process or the session ends.
 *
 * Every message goes through the stream's backlog, sent as the client's pipe allows;
 * the terminal stops being read while the backlog is full (pending()).
 */
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"

#define KEEPALIVE_S 50

struct ptys {
    struct ptys *prev, *next;
    struct e2b *e;
    struct http_req *req;
    struct sbx_pty *p; /* NULL once the terminal is over (or was never made) */
    bool started, ending;
    struct buf backlog; /* envelopes not yet sent */
    struct event *keepalive;
};

static struct ptys *streams;

static void ps_free(struct ptys *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        streams = st->next;
    if (st->next) st->next->prev = st->prev;
    if (st->keepalive) event_free(st->keepalive);
    buf_fini(&st->backlog);
    free(st);
}

static void queue(struct ptys *st, unsigned flags, json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) return;
    size_t n = strlen(s);
    unsigned char h[5] = {(unsigned char)flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    buf_append(&st->backlog, h, 5);
    buf_append(&st->backlog, s, n);
    free(s);
}

static void drained(struct http_req *r, void *arg);

/* Send the backlog; after the end, finish the reply and free st. From the drain
 * callback (only: never inside the terminal's own read loop), resume reading it. */
static void flush_ex(struct ptys *st, bool from_drain)
{
    if (st->backlog.len) {
        int rc = http_stream_write(st->req, st->backlog.data, st->backlog.len);
        if (rc == -EAGAIN) {
            http_sse_on_drain(st->req, drained, st);
            return;
        }
        if (rc < 0) return; /* gone: the close callback frees st */
        st->backlog.len = 0;
    }
    if (st->ending) {
        http_req_on_close(st->req, NULL, NULL);
        http_sse_end(st->req);
        ps_free(st);
        return;
    }
    if (st->p && from_drain) sbx_pty_drained(st->p);
}

static void flush(struct ptys *st)
{
    flush_ex(st, false);
}

static void drained(struct http_req *r, void *arg)
{
    flush_ex(arg, true);
}

static void closed(struct http_req *r, void *arg)
{
    struct ptys *st = arg;
    if (st->p) sbx_pty_detach(st->p);
    ps_free(st);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct ptys *st = arg;
    if (st->backlog.len || st->ending) return;
    queue(st, 0, json_pack("{s:{s:{}}}", "event", "keepalive"));
    flush(st);
}

static void begin(struct ptys *st)
{
    cx_stream_start(st->req);
    st->started = true;
    queue(st, 0, json_pack("{s:{s:{s:i}}}", "event", "start", "pid", sbx_pty_pid(st->p)));
    st->keepalive = event_new(st->e->d->base, -1, EV_PERSIST, on_keepalive, st);
    struct timeval tv = {KEEPALIVE_S, 0};
    event_add(st->keepalive, &tv);
    flush(st);
}

static void end_with(struct ptys *st, const char *code, const char *msg)
{
    if (!st->started) cx_stream_start(st->req);
    st->started = true;
    json_t *o = json_object();
    if (code)
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", code, "message", msg));
    queue(st, 0x02, o);
    st->ending = true;
    st->p = NULL;
    flush(st);
}

/* ---- the core's client callbacks ---- */

static void cl_started(void *arg, struct sbx_pty *p, const struct err *failed)
{
    struct ptys *st = arg;
    if (failed) {
        end_with(st, cx_code(failed), failed->msg);
        return;
    }
    st->p = p;
    begin(st);
}

static void cl_output(void *arg, const void *data, size_t len)
{
    struct ptys *st = arg;
    struct buf b;
    buf_init(&b, 0);
    sbx_base64_encode(data, len, &b);
    json_t *d = json_pack("{s:{s:{s:s%}}}", "event", "data", "pty", b.data ? b.data : "", b.len);
    buf_fini(&b);
    queue(st, 0, d);
    flush(st);
}

static size_t cl_pending(void *arg)
{
    return ((struct ptys *)arg)->backlog.len;
}

static void cl_exit(void *arg, int code, int sig)
{
    struct ptys *st = arg;
    json_t *end = json_object();
    char status[64];
    if (sig) {
        snprintf(status, sizeof status, "signal: %s", sig == SIGKILL ? "killed"
                 : sig == SIGTERM ? "terminated" : sig == SIGHUP ? "hangup" : "other");
        json_object_set_new(end, "exitCode", json_integer(-1));
        json_object_set_new(end, "exited", json_false());
        json_object_set_new(end, "error", json_string(status));
    } else {
        snprintf(status, sizeof status, "exit status %d", code);
        json_object_set_new(end, "exitCode", json_integer(code));
        json_object_set_new(end, "exited", json_true());
        if (code) json_object_set_new(end, "error", json_string(status));
    }
    json_object_set_new(end, "status", json_string(status));
    queue(st, 0, json_pack("{s:{s:o}}", "event", "end", end));
    end_with(st, NULL, NULL);
}

static const struct sbx_pty_client client = {
    .started = cl_started, .output = cl_output, .pending = cl_pending, .exit = cl_exit};

static struct ptys *ps_new(struct e2b *e, struct http_req *r)
{
    struct ptys *st = xcalloc(1, sizeof *st);
    st->e = e;
    st->req = r;
    buf_init(&st->backlog, 0);
    st->next = streams;
    if (streams) streams->prev = st;
    streams = st;
    http_req_on_close(r, closed, st);
    return st;
}

/* ---- process.c's entry points ---- */

void e2b_pty_start(struct e2b *e, struct sbx *s, struct http_req *r, const json_t *body,
                   const struct sbx_user *u)
{
    struct err err = ERR_INIT;
    json_t *proc = json_object_get(body, "process");
    json_t *size = json_object_get(json_object_get(body, "pty"), "size");
    json_t *b = json_object();
    if (json_is_object(proc)) {
        json_t *v;
        if ((v = json_object_get(proc, "cmd"))) json_object_set(b, "cmd", v);
        if ((v = json_object_get(proc, "args")) && !json_is_null(v)) json_object_set(b, "args", v);
        if ((v = json_object_get(proc, "envs")) && json_object_size(v)) json_object_set(b, "env", v);
        if ((v = json_object_get(proc, "cwd")) && json_is_string(v) && json_string_length(v))
            json_object_set(b, "cwd", v);
    }
    if (json_is_object(size)) {
        json_t *c = json_object_get(size, "cols"), *rw = json_object_get(size, "rows");
        if (c) json_object_set(b, "cols", c);
        if (rw) json_object_set(b, "rows", rw);
    }
    json_object_set_new(b, "user", json_string(u->name));
    struct ptys *st = ps_new(e, r);
    struct sbx_pty *p = sbx_pty_open(s, b, &client, st, &err);
    json_decref(b);
    if (!p) end_with(st, cx_code(&err), err.msg);
    /* else: cl_started begins the stream once the terminal is up */
}

bool e2b_pty_connect(struct e2b *e, struct sbx *s, struct http_req *r, const json_t *body)
{
    json_t *pid = json_object_get(json_object_get(body, "process"), "pid");
    struct sbx_pty *p = json_is_integer(pid) ? sbx_pty_by_pid(s, (int)json_integer_value(pid)) : NULL;
    if (!p) return false;
    for (struct ptys *o = streams, *next; o; o = next) { /* one client at a time */
        next = o->next;
        if (o->p == p) end_with(o, NULL, NULL);
    }
    struct ptys *st = ps_new(e, r);
    st->p = p;
    sbx_pty_attach(p, &client, st);
    begin(st);
    return true;
}

void e2b_pty_list(struct sbx *s, json_t *arr)
{
    for (struct sbx_pty *p = sbx_pty_next_running(s, NULL); p; p = sbx_pty_next_running(s, p)) {
        json_t *argv = sbx_pty_argv(p), *args = json_array();
        for (size_t i = 1; i < json_array_size(argv); i++)
            json_array_append(args, json_array_get(argv, i));
        json_array_append_new(arr, json_pack("{s:i, s:{s:O, s:o, s:{}, s:s}}", "pid", sbx_pty_pid(p),
                                             "config", "cmd", json_array_get(argv, 0), "args", args,
                                             "envs", "cwd", sbx_pty_cwd(p)));
    }
}

static struct sbx_pty *find(struct sbx *s, int64_t pid, struct err *err)
{
    struct sbx_pty *p = sbx_pty_by_pid(s, (int)pid);
    if (!p) err_set(err, 404, "not_found", "process.pid", "no terminal with pid %lld", (long long)pid);
    return p;
}

int e2b_pty_input(struct sbx *s, int64_t pid, const void *data, size_t len, struct err *err)
{
    struct sbx_pty *p = find(s, pid, err);
    return p ? sbx_pty_write(p, data, len, err) : -1;
}

bool e2b_pty_signal(struct sbx *s, int64_t pid, int sig, struct err *err)
{
    struct sbx_pty *p = sbx_pty_by_pid(s, (int)pid);
    if (!p) return false;
    sbx_pty_kill(p, sig);
    return true;
}

int e2b_pty_update(struct sbx *s, int64_t pid, const json_t *body, struct err *err)
{
    json_t *size = json_object_get(json_object_get(body, "pty"), "size");
    if (!json_is_object(size))
        return err_invalid(err, "pty.size", "pty.size {cols, rows} is required");
    json_t *c = json_object_get(size, "cols"), *rw = json_object_get(size, "rows");
    if (!json_is_integer(c) || !json_is_integer(rw))
        return err_invalid(err, "pty.size", "cols and rows must be integers");
    struct sbx_pty *p = find(s, pid, err);
    return p ? sbx_pty_resize(p, (int)json_integer_value(c), (int)json_integer_value(rw), err) : -1;
}
