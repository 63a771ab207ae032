/*
 * interactive.c - the SDK's interactive PTY (docs/vercel.md, "Interactive"), over the
 * core's terminals (runtime/pty.c, struct sbx_pty_client).
 *
 * POST /v2/sandboxes/sessions/:sid/interactive answers {url, token}: a WebSocket URL on
 * this endpoint and a one-time token good for VC_TICKET_MS for that session. The
 * `sandbox` CLI opens url?token=..., sends {"type":"start","command","args",
 * "env":["K=V"],"cwd","cols","rows"}, then stdin as binary frames and
 * {"type":"resize","cols","rows"} (or {"type":"signal","signal"}); it gets the terminal's
 * output as binary frames, {"type":"error",...} for a bad message, and at the end
 * {"type":"exit","code","signal"} before the close. The socket closing before the exit
 * kills the terminal's session.
 */
#include "sandbox/vercel/vc_int.h"

#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/xalloc.h"
#include "net/ws.h"
#include "sandbox/core/validate.h"
#include "sandbox/runtime/pty.h"

#define WS_SUFFIX "/interactive/ws"

/* ------------------------------------------------------------------ tickets */

static void new_token(char out[VC_TOKEN_HEX + 1])
{
    unsigned char raw[VC_TOKEN_HEX / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n > 0) got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[VC_TOKEN_HEX] = 0;
    OPENSSL_cleanse(raw, sizeof raw);
}

/* A ticket slot: a free or expired one, else the one that expires first. */
static struct vc_ticket *ticket_slot(struct vc *v, int64_t now)
{
    struct vc_ticket *best = &v->tickets[0];
    for (int i = 0; i < VC_TICKETS_MAX; i++) {
        struct vc_ticket *t = &v->tickets[i];
        if (!t->token[0] || t->expires <= now) return t;
        if (t->expires < best->expires) best = t;
    }
    return best;
}

/* Take (and burn) the ticket of token for sid. */
static bool ticket_take(struct vc *v, const char *sid, const char *token)
{
    if (!token || strlen(token) != VC_TOKEN_HEX) return false;
    int64_t now = clock_now_ms();
    for (int i = 0; i < VC_TICKETS_MAX; i++) {
        struct vc_ticket *t = &v->tickets[i];
        if (!t->token[0] || CRYPTO_memcmp(t->token, token, VC_TOKEN_HEX) != 0) continue;
        bool ok = t->expires > now && !strcmp(t->sid, sid);
        OPENSSL_cleanse(t, sizeof *t);
        return ok;
    }
    return false;
}

bool vc_interactive_path(const char *method, const char *path)
{
    static const char prefix[] = "/v2/sandboxes/sessions/";
    if (strcmp(method, "GET") != 0 || strncmp(path, prefix, sizeof prefix - 1) != 0) return false;
    const char *sid = path + sizeof prefix - 1;
    size_t n = strcspn(sid, "/"); /* exactly one segment, then the suffix */
    return n > 0 && !strcmp(sid + n, WS_SUFFIX);
}

/* The Host the client reached us by, when it is a plain host[:port]; else loopback. */
static void ws_base(struct vc *v, struct http_req *r, char *out, size_t cap)
{
    const char *h = http_req_header(r, "Host");
    size_t n = h ? strlen(h) : 0;
    if (n > 0 && n < 256 &&
        strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n)
        snprintf(out, cap, "ws://%s", h);
    else
        snprintf(out, cap, "ws://127.0.0.1:%d", http_server_port(v->h));
}

static void h_open(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_session_sbx(v, r, h_open);
    if (!s) return;
    json_t *body = vc_body(r, true);
    if (!body) return;
    json_decref(body); /* the SDK sends {} */
    const char *sid = http_req_param(r, "sid");
    int64_t now = clock_now_ms();
    struct vc_ticket *t = ticket_slot(v, now);
    new_token(t->token);
    snprintf(t->sid, sizeof t->sid, "%s", sid);
    t->expires = now + VC_TICKET_MS;
    char base[300], url[512];
    ws_base(v, r, base, sizeof base);
    snprintf(url, sizeof url, "%s/v2/sandboxes/sessions/%s%s", base, sid, WS_SUFFIX);
    http_reply_json(r, 200, json_pack("{s:s, s:s}", "url", url, "token", t->token));
}

/* ------------------------------------------------------------------ one connection */

struct conn {
    struct vc *v;
    struct ws_conn *ws; /* NULL once closed */
    char id[40];        /* the sandbox */
    int64_t seq;        /* and its session the token was for */
    struct sbx_pty *p;  /* from the start until the exit (or the close) */
    bool running;       /* the terminal started */
    struct buf early;   /* input that came before it started */
};

static void conn_free(struct conn *c)
{
    buf_fini(&c->early);
    free(c);
}

static void send_err(struct conn *c, const char *code, const char *msg)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "type", "error", "code", code, "message", msg);
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (txt && c->ws) ws_send_text(c->ws, txt, strlen(txt));
    free(txt);
}

static void fail(struct conn *c, const char *code, const char *msg)
{
    send_err(c, code, msg);
    if (c->ws) ws_close(c->ws, 1011, "no terminal");
}

static void cl_started(void *arg, struct sbx_pty *p, const struct err *failed)
{
    struct conn *c = arg;
    if (failed) {
        c->p = NULL;
        if (!c->ws) {
            conn_free(c);
            return;
        }
        fail(c, failed->code, failed->msg);
        return;
    }
    if (!c->ws) { /* the client left while it started */
        sbx_pty_detach(p);
        sbx_pty_kill(p, SIGKILL);
        conn_free(c);
        return;
    }
    c->running = true;
    struct err err = ERR_INIT;
    if (c->early.len && sbx_pty_write(p, c->early.data, c->early.len, &err) < 0)
        send_err(c, err.code, err.msg);
    buf_fini(&c->early);
    buf_init(&c->early, 0);
}

static void cl_output(void *arg, const void *data, size_t len)
{
    struct conn *c = arg;
    if (c->ws) ws_send_binary(c->ws, data, len);
}

static size_t cl_pending(void *arg)
{
    struct conn *c = arg;
    return c->ws ? ws_pending(c->ws) : 0;
}

static void cl_exit(void *arg, int code, int sig)
{
    struct conn *c = arg;
    c->p = NULL;
    if (!c->ws) {
        conn_free(c);
        return;
    }
    char *m = sbx_pty_exit_msg(code, sig);
    ws_send_text(c->ws, m, strlen(m));
    free(m);
    ws_close(c->ws, 1000, "exited");
}

static const struct sbx_pty_client client = {
    .started = cl_started, .output = cl_output, .pending = cl_pending, .exit = cl_exit};

/* The start message -> /v1's terminal body (new reference), or NULL with err. */
static json_t *start_body(const json_t *m, struct err *err)
{
    static const char *const known[] = {"type", "command", "args", "env", "cwd", "cols", "rows",
                                        NULL};
    if (sbx_json_known(m, known, "the start message", err) < 0) return NULL;
    json_t *b = json_object(), *x;
    if ((x = json_object_get(m, "command")) && !json_is_null(x)) json_object_set(b, "cmd", x);
    if ((x = json_object_get(m, "args")) && !json_is_null(x)) json_object_set(b, "args", x);
    if ((x = json_object_get(m, "cols")) && !json_is_null(x)) json_object_set(b, "cols", x);
    if ((x = json_object_get(m, "rows")) && !json_is_null(x)) json_object_set(b, "rows", x);
    x = json_object_get(m, "cwd");
    json_object_set_new(b, "cwd", json_string(json_is_string(x) && json_string_length(x)
                                                  ? json_string_value(x) : VC_CWD));
    if ((x = json_object_get(m, "env")) && !json_is_null(x)) {
        if (!json_is_array(x)) {
            err_invalid(err, "env", "env must be an array of \"NAME=value\" strings");
            goto fail;
        }
        json_t *env = json_object();
        json_object_set_new(b, "env", env);
        size_t i;
        json_t *e;
        json_array_foreach(x, i, e) {
            const char *kv = json_string_value(e);
            const char *eq = kv ? strchr(kv, '=') : NULL;
            if (!eq || eq == kv || (size_t)(eq - kv) > 256) {
                err_invalid(err, "env", "env[%zu] must be \"NAME=value\"", i);
                goto fail;
            }
            char name[257];
            snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
            json_object_set_new(env, name, json_string(eq + 1));
        }
    }
    return b;
fail:
    json_decref(b);
    return NULL;
}

static void start(struct conn *c, const char *d, size_t n)
{
    json_error_t je;
    json_t *m = json_loadb(d, n, JSON_REJECT_DUPLICATES, &je);
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!json_is_object(m) || !type || strcmp(type, "start") != 0) {
        json_decref(m);
        fail(c, "bad_request", "the first message must be {\"type\":\"start\", ...}");
        return;
    }
    struct err err = ERR_INIT;
    json_t *body = start_body(m, &err);
    json_decref(m);
    struct sbx *s = sbx_find(c->v->d, c->id);
    if (!s || s->state == SBX_STOPPED || sbx_busy(s) || s->session_seq != c->seq) {
        json_decref(body);
        fail(c, "session_stopped", "the session has stopped");
        return;
    }
    if (body && sbx_ensure_running(s, NULL, &err) == 0)
        c->p = sbx_pty_open(s, body, &client, c, &err);
    json_decref(body);
    if (!c->p) fail(c, err.code[0] ? err.code : "bad_request", err.msg);
}

static void ws_opened(struct ws_conn *ws, void *arg)
{
    ((struct conn *)arg)->ws = ws;
}

static void ws_text(struct ws_conn *ws, const char *d, size_t n, void *arg)
{
    struct conn *c = arg;
    if (!c->p && !c->running) {
        start(c, d, n);
        return;
    }
    struct sbx_pty_ctl ctl;
    struct err err = ERR_INIT;
    if (sbx_pty_parse_ctl(d, n, &ctl, &err) < 0) {
        send_err(c, err.code, err.msg);
        return;
    }
    if (!c->p || !c->running) return; /* starting or over: nothing to resize or signal */
    if (ctl.type == SBX_PTY_CTL_RESIZE) {
        if (sbx_pty_resize(c->p, ctl.cols, ctl.rows, &err) < 0) send_err(c, err.code, err.msg);
    } else {
        sbx_pty_kill(c->p, ctl.signal);
    }
}

static void ws_binary(struct ws_conn *ws, const uint8_t *d, size_t n, void *arg)
{
    struct conn *c = arg;
    struct err err = ERR_INIT;
    if (!c->p) return; /* before the start, or after the exit */
    if (!c->running) {
        if (c->early.len + n > SBX_PTY_IN_MAX) {
            send_err(c, "pty_input_full", "too much input before the terminal started");
            return;
        }
        buf_append(&c->early, d, n);
        return;
    }
    if (sbx_pty_write(c->p, d, n, &err) < 0) send_err(c, err.code, err.msg);
}

static void ws_drained(struct ws_conn *ws, void *arg)
{
    struct conn *c = arg;
    if (c->p && c->running) sbx_pty_drained(c->p);
}

static void ws_closed(void *arg)
{
    struct conn *c = arg;
    c->ws = NULL;
    if (c->p && c->running) { /* left before the end: the terminal goes with it */
        sbx_pty_detach(c->p);
        sbx_pty_kill(c->p, SIGKILL);
        c->p = NULL;
    }
    if (!c->p) conn_free(c); /* else starting: cl_started frees it */
}

static const struct ws_handlers handlers = {
    .on_open = ws_opened,
    .on_binary = ws_binary,
    .on_text = ws_text,
    .on_drain = ws_drained,
    .on_close = ws_closed,
    .max_msg = SBX_PTY_MSG_MAX,
    .high_water = SBX_PTY_OUT_HIGH,
};

static void h_ws(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_session_sbx(v, r, h_ws);
    if (!s) return;
    if (!ticket_take(v, http_req_param(r, "sid"), http_req_query(r, "token"))) {
        http_reply_error(r, 401, "unauthorized", "token",
                         "no such interactive token for this session (they are good once, for "
                         "%d s)", VC_TICKET_MS / 1000);
        return;
    }
    struct conn *c = xcalloc(1, sizeof *c);
    c->v = v;
    snprintf(c->id, sizeof c->id, "%s", s->id);
    c->seq = s->session_seq;
    buf_init(&c->early, 0);
    if (ws_server_upgrade(r, &handlers, c) < 0) conn_free(c); /* answered; no callback */
}

void vc_interactive_routes(struct vc *v)
{
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/interactive", h_open, v);
    http_route(v->h, "GET", "/v2/sandboxes/sessions/:sid" WS_SUFFIX, h_ws, v);
}
