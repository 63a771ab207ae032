/*
 * process.c - envd's process.Process service over the core's commands: Start and
 * Connect stream a command's events (start with its pid, stdout/stderr data as
 * produced, end with its exit), List, SendInput, CloseStdin and SendSignal address a
 * running command by its pid inside the sandbox (E2B's process handle).
 *
 * A stream is a record watching one command; the endpoint's observer hands it every
 * event of that command, and it pushes what the client has not seen from the
 * command's output rings (the same ones /v1 reads). A client that goes away does not
 * stop the command. Start gives the command the stream's deadline (Connect-Timeout-Ms)
 * as its timeout, as envd does; Connect follows live output only (no replay).
 * Exits follow envd: a signal gives exitCode -1 with exited false.
 *
 * SendSignal answers once the process is gone (its exit reported by the sandbox's init,
 * which has reaped it), or after a bound (KILL_WAIT_MS, TERM_WAIT_MS for a SIGTERM it
 * may handle) all the same: the SDK's kill() is followed by a List or a `kill -0 pid`
 * that must not see it any more, and a zombie still answers kill -0.
 */
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"

#define CHUNK (48u * 1024)
#define KEEPALIVE_DEFAULT_S 50
#define GONE_MSG "the sandbox was killed or reached its end of life"
#define KILL_WAIT_MS 5000
#define TERM_WAIT_MS 1000
#define KILL_POLL_MS 5

struct e2b_stream {
    struct e2b_stream *prev, *next;
    struct e2b *e;
    struct http_req *req;
    struct sbx_cmd *cmd;
    bool started;  /* the reply began and the start event is out */
    bool end_sent; /* the end event is out: only the end of stream is left */
    uint64_t off_out, off_err;
    struct event *keepalive;
};

/* ------------------------------------------------------------------ streams */

static void stream_closed(struct http_req *r, void *arg);

static struct e2b_stream *stream_new(struct e2b *e, struct http_req *r, struct sbx_cmd *c)
{
    struct e2b_stream *st = xcalloc(1, sizeof *st);
    st->e = e;
    st->req = r;
    st->cmd = c;
    c->watchers++;
    st->next = e->streams;
    if (e->streams) e->streams->prev = st;
    e->streams = st;
    http_req_on_close(r, stream_closed, st);
    return st;
}

static void stream_free(struct e2b_stream *st)
{
    struct e2b *e = st->e;
    if (st->prev)
        st->prev->next = st->next;
    else
        e->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    if (st->cmd) st->cmd->watchers--;
    if (st->keepalive) event_free(st->keepalive);
    free(st);
}

static void stream_closed(struct http_req *r, void *arg)
{
    stream_free(arg);
}

/* A stream that fails before its first message: the error goes in the end of stream,
 * where the SDK reads its code. */
static void stream_fail(struct http_req *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void stream_fail(struct http_req *r, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cx_stream_start(r);
    cx_stream_end(r, code, msg); /* a fresh stream has room for one small envelope */
}

static json_t *event_msg(const char *kind, json_t *v)
{
    return json_pack("{s:{s:o}}", "event", kind, v);
}

static json_t *end_event(const struct sbx_cmd *c)
{
    json_t *end = json_object();
    char status[64];
    if (c->status == CMD_FAILED) {
        json_object_set_new(end, "exitCode", json_integer(-1));
        json_object_set_new(end, "exited", json_false());
        json_object_set_new(end, "status", json_string("failed"));
        json_object_set_new(end, "error", json_string(c->error.msg));
    } else if (c->term_signal) {
        const char *name = sbx_signal_name(c->term_signal);
        snprintf(status, sizeof status, "signal: %s",
                 c->term_signal == SIGKILL ? "killed"
                 : c->term_signal == SIGTERM ? "terminated"
                 : name ? name : "unknown");
        json_object_set_new(end, "exitCode", json_integer(-1));
        json_object_set_new(end, "exited", json_false());
        json_object_set_new(end, "status", json_string(status));
        json_object_set_new(end, "error", json_string(status));
    } else {
        snprintf(status, sizeof status, "exit status %d", c->exit_code);
        json_object_set_new(end, "exitCode", json_integer(c->exit_code));
        json_object_set_new(end, "exited", json_true());
        json_object_set_new(end, "status", json_string(status));
        if (c->exit_code != 0) json_object_set_new(end, "error", json_string(status));
    }
    return event_msg("end", end);
}

static void stream_drained(struct http_req *r, void *arg);

/* Push what the client has not seen; after the command's end, the end event and the
 * end of stream. Waits for the drain when the client's pipe is full. */
static void pump(struct e2b_stream *st)
{
    struct sbx_cmd *c = st->cmd;
    char *tmp = xmalloc(CHUNK);
    int rc = 0;
    for (;;) {
        bool sent = false;
        for (int k = 0; k < 2 && !st->end_sent; k++) {
            const struct sbx_ring *ring = k == 0 ? &c->out : &c->err;
            uint64_t *off = k == 0 ? &st->off_out : &st->off_err;
            uint64_t start = sbx_ring_start(ring);
            if (*off < start) *off = start; /* the ring dropped these bytes already */
            uint64_t from;
            size_t n = sbx_ring_read(ring, *off, tmp, CHUNK, &from);
            if (n == 0) continue;
            struct buf b;
            buf_init(&b, 0);
            sbx_base64_encode(tmp, n, &b);
            json_t *data = json_object();
            json_object_set_new(data, k == 0 ? "stdout" : "stderr", json_stringn(b.data, b.len));
            buf_fini(&b);
            rc = cx_stream_send(st->req, event_msg("data", data));
            if (rc < 0) goto blocked;
            *off = from + n;
            sent = true;
        }
        if (!sent) break;
    }
    free(tmp);
    if (!sbx_cmd_done(c)) return;
    struct sbx *s = c->sbx;
    if (!st->end_sent && (!s->sess || strcmp(s->sess->id, c->session_id) != 0)) {
        /* its session ended under it (the sandbox was killed or stopped): no exit of its
         * own to report, but the sandbox's end, which the SDK raises as a TimeoutError */
        if ((rc = cx_stream_end(st->req, "unavailable", GONE_MSG)) < 0) goto blocked_nofree;
        stream_free(st);
        return;
    }
    if (!st->end_sent) {
        if ((rc = cx_stream_send(st->req, end_event(c))) < 0) goto blocked_nofree;
        st->end_sent = true;
    }
    if ((rc = cx_stream_end(st->req, NULL, NULL)) < 0) goto blocked_nofree;
    stream_free(st);
    return;
blocked:
    free(tmp);
blocked_nofree:
    if (rc == -EAGAIN) http_sse_on_drain(st->req, stream_drained, st);
    /* -EPIPE: the client is gone; its close callback frees st */
}

static void stream_drained(struct http_req *r, void *arg)
{
    pump(arg);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct e2b_stream *st = arg;
    if (!st->end_sent) cx_stream_send(st->req, event_msg("keepalive", json_object()));
}

static void stream_begin(struct e2b_stream *st)
{
    struct http_req *r = st->req;
    cx_stream_start(r);
    st->started = true;
    /* the first message of a fresh stream always fits */
    cx_stream_send(r, event_msg("start", json_pack("{s:i}", "pid", st->cmd->pid)));
    long ka = KEEPALIVE_DEFAULT_S;
    const char *h = http_req_header(r, "Keepalive-Ping-Interval");
    if (h) {
        char *end;
        long v = strtol(h, &end, 10);
        if (*h && !*end && v >= 1 && v <= 3600) ka = v;
    }
    st->keepalive = event_new(st->e->d->base, -1, EV_PERSIST, on_keepalive, st);
    struct timeval tv = {ka, 0};
    event_add(st->keepalive, &tv);
}

void e2b_process_on_cmd(struct e2b *e, struct sbx_cmd *c, int ev)
{
    for (struct e2b_stream *st = e->streams, *next; st; st = next) {
        next = st->next;
        if (st->cmd != c) continue;
        if (ev & SBX_EV_GONE) {
            c->watchers--;
            st->cmd = NULL;
            struct http_req *r = st->req;
            if (!st->started) cx_stream_start(r);
            http_req_on_close(r, NULL, NULL);
            http_sse_on_drain(r, NULL, NULL);
            stream_free(st);
            /* a full pipe takes no end envelope: then the stream just ends (the SDK says
             * the process exited without a result) */
            if (cx_stream_end(r, "unavailable", GONE_MSG) < 0) http_sse_end(r);
            continue;
        }
        if (!st->started) {
            if (!(ev & (SBX_EV_STARTED | SBX_EV_DONE))) continue;
            if (c->status == CMD_FAILED) {
                struct http_req *r = st->req;
                http_req_on_close(r, NULL, NULL);
                stream_free(st);
                stream_fail(r, cx_code(&c->error), "%s", c->error.msg);
                continue;
            }
            stream_begin(st);
        }
        pump(st);
    }
}

void e2b_process_shutdown(struct e2b *e)
{
    while (e->streams) {
        struct e2b_stream *st = e->streams;
        st->cmd = NULL; /* the core frees its commands itself */
        stream_free(st);
    }
}

/* ------------------------------------------------------------------ lookups */

/* The running command of pid in s's session, or NULL. */
static struct sbx_cmd *by_pid(struct sbx *s, int64_t pid)
{
    if (pid <= 0 || !s->sess) return NULL;
    for (struct sbx_cmd *c = s->cmds_last; c; c = c->prev)
        if (c->pid == pid && c->status == CMD_RUNNING && !strcmp(c->session_id, s->sess->id))
            return c;
    return NULL;
}

/* {"process": {"pid": N}} (tags are not kept: processes are addressed by pid). */
static int selector_pid(const json_t *body, int64_t *pid, struct err *err)
{
    json_t *p = json_object_get(body, "process");
    json_t *v = json_is_object(p) ? json_object_get(p, "pid") : NULL;
    if (json_is_object(p) && json_object_get(p, "tag"))
        return err_set(err, 404, "not_found", "process.tag",
                       "processes have no tags here; address them by pid");
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > INT32_MAX)
        return err_invalid(err, "process.pid", "process.pid must be a positive integer");
    *pid = json_integer_value(v);
    return 0;
}

static struct sbx_cmd *find_proc(struct sbx *s, const json_t *body, struct err *err)
{
    int64_t pid;
    if (selector_pid(body, &pid, err) < 0) return NULL;
    struct sbx_cmd *c = by_pid(s, pid);
    if (!c) err_set(err, 404, "not_found", "process.pid", "process with pid %lld not found",
                    (long long)pid);
    return c;
}

/* ------------------------------------------------------------------ Start, Connect */

/* ProcessConfig -> a /v1 command body. */
static json_t *command_body(const json_t *body, const struct sbx_user *u, int64_t timeout_ms,
                            struct err *err)
{
    json_t *p = json_object_get(body, "process");
    if (!json_is_object(p)) {
        err_invalid(err, "process", "process (a ProcessConfig) is required");
        return NULL;
    }
    json_t *cmd = json_object_get(p, "cmd"), *args = json_object_get(p, "args");
    json_t *envs = json_object_get(p, "envs"), *cwd = json_object_get(p, "cwd");
    json_t *stdin_v = json_object_get(body, "stdin");
    if (stdin_v && !json_is_boolean(stdin_v)) {
        err_invalid(err, "stdin", "stdin must be a boolean");
        return NULL;
    }
    json_t *b = json_object();
    json_object_set(b, "cmd", cmd ? cmd : json_null());
    if (args && !json_is_null(args)) json_object_set(b, "args", args);
    if (envs && !json_is_null(envs) && json_object_size(envs)) json_object_set(b, "env", envs);
    if (json_is_string(cwd) && *json_string_value(cwd)) json_object_set(b, "cwd", cwd);
    else if (cwd && !json_is_null(cwd) && !json_is_string(cwd)) {
        json_decref(b);
        err_invalid(err, "process.cwd", "process.cwd must be a string");
        return NULL;
    }
    json_object_set_new(b, "user", json_string(u->name));
    json_object_set_new(b, "stdin", json_string(json_is_true(stdin_v) ? "pipe" : "null"));
    if (timeout_ms > 0) json_object_set_new(b, "timeout_ms", json_integer(timeout_ms));
    return b;
}

/* Connect-Timeout-Ms: the stream's deadline, which envd also gives the process. */
static int64_t deadline_ms(struct http_req *r)
{
    const char *h = http_req_header(r, "Connect-Timeout-Ms");
    if (!h) return 0;
    char *end;
    long long v = strtoll(h, &end, 10);
    if (!*h || *end || v <= 0) return 0;
    return v > SBX_TIMEOUT_MAX_MS ? SBX_TIMEOUT_MAX_MS : v;
}

static void h_start(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_start);
    if (!s) return;
    json_t *body = cx_stream_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    struct sbx_user u;
    json_t *pty = json_object_get(body, "pty");
    if (pty && !json_is_null(pty)) {
        if (e2b_user(s, r, NULL, &u, &err) < 0)
            stream_fail(r, cx_code(&err), "%s", err.msg);
        else
            e2b_pty_start(e, s, r, body, &u);
        json_decref(body);
        return;
    }
    json_t *cb = NULL;
    if (e2b_user(s, r, NULL, &u, &err) == 0) cb = command_body(body, &u, deadline_ms(r), &err);
    json_decref(body);
    struct sbx_cmd *c = cb ? sbx_cmd_start(s, cb, &err) : NULL;
    json_decref(cb);
    if (!c) {
        stream_fail(r, cx_code(&err), "%s", err.msg);
        return;
    }
    stream_new(e, r, c); /* begins once the core says it started */
}

static void h_connect(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_connect);
    if (!s) return;
    json_t *body = cx_stream_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    if (e2b_pty_connect(e, s, r, body)) {
        json_decref(body);
        return;
    }
    struct sbx_cmd *c = find_proc(s, body, &err);
    json_decref(body);
    if (!c) {
        stream_fail(r, cx_code(&err), "%s", err.msg);
        return;
    }
    struct e2b_stream *st = stream_new(e, r, c);
    st->off_out = c->out.total; /* live output only */
    st->off_err = c->err.total;
    stream_begin(st);
    pump(st);
}

/* ------------------------------------------------------------------ unary */

static void h_list(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_list);
    if (!s) return;
    json_t *body = cx_unary_body(r);
    if (!body) return;
    json_decref(body);
    json_t *arr = json_array();
    for (struct sbx_cmd *c = s->cmds_first; c; c = c->next) {
        if (c->status != CMD_RUNNING || strcmp(c->session_id, s->sess->id) != 0) continue;
        json_t *args = json_array();
        for (size_t i = 1; i < json_array_size(c->argv); i++)
            json_array_append(args, json_array_get(c->argv, i));
        json_t *cfg = json_object();
        json_object_set(cfg, "cmd", json_array_get(c->argv, 0));
        json_object_set_new(cfg, "args", args);
        json_object_set_new(cfg, "envs", json_object());
        json_object_set_new(cfg, "cwd", json_string(c->cwd));
        json_array_append_new(arr, json_pack("{s:i, s:o}", "pid", c->pid, "config", cfg));
    }
    e2b_pty_list(s, arr);
    cx_reply(r, json_pack("{s:o}", "processes", arr));
}

static void h_send_input(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_send_input);
    if (!s) return;
    json_t *body = cx_unary_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    json_t *in = json_object_get(body, "input");
    json_t *pty = json_is_object(in) ? json_object_get(in, "pty") : NULL;
    json_t *sin = json_is_object(in) ? json_object_get(in, "stdin") : NULL;
    json_t *data = pty ? pty : sin;
    struct buf b;
    buf_init(&b, 1u << 20);
    int64_t pid = 0;
    if (selector_pid(body, &pid, &err) == 0 && !json_is_string(data))
        err_invalid(&err, "input", "input must be {\"stdin\": base64} or {\"pty\": base64}");
    else if (!err.status && sbx_base64_decode(json_string_value(data),
                                              json_string_length(data), &b) < 0)
        err_invalid(&err, "input", "input is not valid base64");
    json_decref(body);
    if (!err.status) {
        if (pty) {
            e2b_pty_input(s, pid, b.data, b.len, &err);
        } else {
            struct sbx_cmd *c = by_pid(s, pid);
            if (!c)
                err_set(&err, 404, "not_found", "process.pid", "process with pid %lld not found",
                        (long long)pid);
            else
                sbx_cmd_stdin(c, b.data ? b.data : "", b.len, false, NULL, &err);
        }
    }
    buf_fini(&b);
    if (err.status)
        cx_error_err(r, &err);
    else
        cx_reply(r, NULL);
}

static void h_close_stdin(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_close_stdin);
    if (!s) return;
    json_t *body = cx_unary_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    struct sbx_cmd *c = find_proc(s, body, &err);
    json_decref(body);
    if (c && !c->in_closed) sbx_cmd_stdin(c, "", 0, true, NULL, &err);
    if (err.status)
        cx_error_err(r, &err);
    else
        cx_reply(r, NULL);
}

/* A SendSignal waiting for its process to be gone. It polls (every KILL_POLL_MS, until
 * its deadline): terminals tell no observer of their end, and the process is looked up
 * again by sandbox id and pid each time (the command or terminal may be freed
 * meanwhile). */
struct e2b_kill_wait {
    struct e2b_kill_wait *prev, *next;
    struct e2b *e;
    struct http_req *req;
    char sbx_id[sizeof ((struct sbx *)0)->id];
    int64_t pid;
    int64_t deadline; /* clock_mono_ms() */
    struct event *ev;
};

static void kill_wait_free(struct e2b_kill_wait *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        w->e->kills = w->next;
    if (w->next) w->next->prev = w->prev;
    event_free(w->ev);
    free(w);
}

static void kill_wait_closed(struct http_req *r, void *arg)
{
    kill_wait_free(arg);
}

static void kill_wait_answer(struct e2b_kill_wait *w)
{
    http_req_on_close(w->req, NULL, NULL);
    cx_reply(w->req, NULL);
    kill_wait_free(w);
}

/* Is pid a running command or terminal of s's session? */
static bool proc_alive(struct sbx *s, int64_t pid)
{
    return s && s->sess && (by_pid(s, pid) || sbx_pty_by_pid(s, (int)pid));
}

static void kill_wait_poll(evutil_socket_t fd, short what, void *arg)
{
    struct e2b_kill_wait *w = arg;
    if (!proc_alive(sbx_find_id(w->e->d, w->sbx_id), w->pid) || clock_mono_ms() >= w->deadline) {
        kill_wait_answer(w);
        return;
    }
    struct timeval tv = {0, KILL_POLL_MS * 1000};
    event_add(w->ev, &tv);
}

void e2b_process_kills_end(struct e2b *e)
{
    while (e->kills) kill_wait_answer(e->kills);
}

static void kill_wait_start(struct e2b *e, struct http_req *r, struct sbx *s, int64_t pid, int sig)
{
    struct e2b_kill_wait *w = xcalloc(1, sizeof *w);
    w->e = e;
    w->req = r;
    snprintf(w->sbx_id, sizeof w->sbx_id, "%s", s->id);
    w->pid = pid;
    w->deadline = clock_mono_ms() + (sig == SIGKILL ? KILL_WAIT_MS : TERM_WAIT_MS);
    w->ev = evtimer_new(e->d->base, kill_wait_poll, w);
    w->next = e->kills;
    if (e->kills) e->kills->prev = w;
    e->kills = w;
    http_req_on_close(r, kill_wait_closed, w);
    struct timeval tv = {0, KILL_POLL_MS * 1000};
    event_add(w->ev, &tv);
}

static void h_send_signal(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_send_signal);
    if (!s) return;
    json_t *body = cx_unary_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    json_t *sv = json_object_get(body, "signal");
    int sig = 0;
    if (json_is_string(sv) && !strcmp(json_string_value(sv), "SIGNAL_SIGKILL")) sig = SIGKILL;
    else if (json_is_string(sv) && !strcmp(json_string_value(sv), "SIGNAL_SIGTERM")) sig = SIGTERM;
    else if (json_is_integer(sv) && (json_integer_value(sv) == 9 || json_integer_value(sv) == 15))
        sig = (int)json_integer_value(sv);
    int64_t pid = 0;
    if (selector_pid(body, &pid, &err) == 0 && !sig)
        err_invalid(&err, "signal", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    json_decref(body);
    if (!err.status && !e2b_pty_signal(s, pid, sig, &err)) {
        struct sbx_cmd *c = by_pid(s, pid);
        if (!c)
            err_set(&err, 404, "not_found", "process.pid", "process with pid %lld not found",
                    (long long)pid);
        else
            sbx_cmd_signal(c, sig, true, &err);
    }
    if (err.status)
        cx_error_err(r, &err);
    else
        kill_wait_start(e, r, s, pid, sig); /* answers once the process is gone */
}

static void h_update(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_update);
    if (!s) return;
    json_t *body = cx_unary_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    int64_t pid = 0;
    if (selector_pid(body, &pid, &err) == 0) e2b_pty_update(s, pid, body, &err);
    json_decref(body);
    if (err.status)
        cx_error_err(r, &err);
    else
        cx_reply(r, NULL);
}

static void h_stream_input(struct http_req *r, void *arg)
{
    cx_error(r, "unimplemented", "StreamInput needs a client stream; use SendInput");
}

void e2b_process_routes(struct e2b *e)
{
    struct http_server *h = e->http;
    http_route(h, "POST", "/process.Process/Start", h_start, e);
    http_route(h, "POST", "/process.Process/Connect", h_connect, e);
    http_route(h, "POST", "/process.Process/List", h_list, e);
    http_route(h, "POST", "/process.Process/SendInput", h_send_input, e);
    http_route(h, "POST", "/process.Process/CloseStdin", h_close_stdin, e);
    http_route(h, "POST", "/process.Process/SendSignal", h_send_signal, e);
    http_route(h, "POST", "/process.Process/Update", h_update, e);
    http_route(h, "POST", "/process.Process/StreamInput", h_stream_input, e);
}
