/*
 * ws.c - WebSocket connections on wslay over a libevent bufferevent (see ws.h).
 *
 * wslay's event API does the framing, masking checks, UTF-8 checks of text, message
 * size caps, ping/pong and the close handshake; this file feeds it from the
 * bufferevent. Its recv callback drains the bufferevent's input (bounded by a read
 * watermark, so a peer that sends faster than the application takes is held back
 * by TCP), its send callback appends to the output until high_water, leaving the
 * rest in wslay's queue. Everything wslay does happens in pump(), which only
 * libevent callbacks call, so the application's callbacks never run inside its
 * own ws_* calls; those queue and poke the `kick` event.
 *
 * Lingering close: when wslay is done with a connection whose peer has not closed (it
 * refused an oversized message, say, with the rest of it still arriving), closing the
 * socket over unread input would make the kernel answer with a reset, which can destroy
 * our close frame before the peer reads it. So the write side is shut and input is read
 * and dropped until the peer closes, WS_LINGER_BYTES arrived or the close timer ends.
 */
#include "net/ws.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

#include "base/xalloc.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_DEF_MAX_MSG ((size_t)1 << 20)
#define WS_DEF_HIGH ((size_t)256 * 1024)
#define WS_READ_HIGH ((size_t)256 * 1024) /* unconsumed input held before TCP pushes back */
#define WS_LINGER_BYTES ((size_t)16 << 20)  /* input dropped at most after we are done */

struct ws_conn {
    struct bufferevent *bev;
    wslay_event_context_ptr ctx;
    const struct ws_handlers *h;
    void *arg;
    struct event *kick, *close_timer;
    size_t high;
    bool paused, want_drain;
    bool close_pending; /* ws_close() was called; the frame goes after the data */
    bool lingering;     /* done: write side shut, input dropped until the peer closes */
    size_t lingered;    /* bytes dropped so far */
    uint16_t close_code;
    char close_reason[124];
};

struct ws_pending_upgrade {
    const struct ws_handlers *h;
    void *arg;
};

/* ------------------------------------------------------------------ handshake (pure) */

static bool has_token(const char *list, const char *tok)
{
    if (!list) return false;
    size_t n = strlen(tok);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == n && strncasecmp(p, tok, n) == 0) return true;
        p = e;
    }
    return false;
}

void ws_accept_value(const char *key, char *out)
{
    char in[128];
    int n = snprintf(in, sizeof in, "%s%s", key, WS_GUID);
    if (n < 0 || (size_t)n >= sizeof in) n = 0; /* callers pass checked keys */
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha1(), NULL);
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
}

void ws_client_key(char *out)
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        ASSERT(n > 0);
        got += (size_t)n;
    }
    EVP_EncodeBlock((unsigned char *)out, raw, (int)sizeof raw);
}

bool ws_key_valid(const char *key)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!key || strlen(key) != WS_KEY_LEN || key[22] != '=' || key[23] != '=') return false;
    for (int i = 0; i < 22; i++)
        if (!strchr(b64, key[i]) || !key[i]) return false;
    /* the last sextet carries 2 data bits: the low 4 must be zero */
    return ((strchr(b64, key[21]) - b64) & 0x0f) == 0;
}

/* Value of header `name` in a reply head (up to n bytes), copied into out. */
static bool head_value(const char *head, size_t len, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    const char *end = head + len;
    const char *p = memchr(head, '\n', len);
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) break;
        if ((size_t)(eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            size_t vl = (size_t)(ve - v);
            if (vl >= n) return false;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
        p = eol;
    }
    return false;
}

int ws_client_check_reply(const char *head, size_t len, const char *key, struct err *err)
{
    int status = 0;
    char line[64];
    size_t l1 = strcspn(head, "\r\n");
    if (l1 >= sizeof line || l1 > len) l1 = sizeof line - 1;
    memcpy(line, head, l1);
    line[l1] = '\0';
    if (sscanf(line, "HTTP/1.%*[01] %3d", &status) != 1)
        return err_set(err, 0, "bad_response", "", "the server's reply is not HTTP");
    if (status != 101)
        return err_set(err, status, "http_error", "",
                       "the server answered %d instead of switching to WebSocket", status);
    char up[64], conn[128], acc[64], want[WS_ACCEPT_LEN + 1];
    if (!head_value(head, len, "Upgrade", up, sizeof up) || !has_token(up, "websocket") ||
        !head_value(head, len, "Connection", conn, sizeof conn) || !has_token(conn, "upgrade"))
        return err_set(err, 0, "bad_response", "",
                       "the server's 101 reply lacks Upgrade: websocket / Connection: Upgrade");
    ws_accept_value(key, want);
    if (!head_value(head, len, "Sec-WebSocket-Accept", acc, sizeof acc) || strcmp(acc, want) != 0)
        return err_set(err, 0, "bad_response", "",
                       "the server's Sec-WebSocket-Accept does not match the key sent");
    return 0;
}

/* ------------------------------------------------------------------ connection */

static void destroy(struct ws_conn *w)
{
    event_free(w->kick);
    event_free(w->close_timer);
    wslay_event_context_free(w->ctx);
    bufferevent_free(w->bev);
    free(w);
}

/* The connection is over: free it, then tell the application. */
static void end(struct ws_conn *w)
{
    const struct ws_handlers *h = w->h;
    void *arg = w->arg;
    destroy(w);
    if (h->on_close) h->on_close(arg);
}

size_t ws_pending(struct ws_conn *w)
{
    size_t n = evbuffer_get_length(bufferevent_get_output(w->bev)) +
               wslay_event_get_queued_msg_length(w->ctx);
    if (n >= w->high) w->want_drain = true;
    return n;
}

/* Start a lingering close (see the top of the file): false when the socket cannot. */
static bool linger(struct ws_conn *w)
{
    if (w->lingering) return true;
    evutil_socket_t fd = bufferevent_getfd(w->bev);
    if (fd < 0 || shutdown(fd, SHUT_WR) < 0) return false;
    w->lingering = true;
    bufferevent_setwatermark(w->bev, EV_READ, 0, 0);
    bufferevent_enable(w->bev, EV_READ);
    if (!evtimer_pending(w->close_timer, NULL)) {
        struct timeval tv = {WS_CLOSE_TIMEOUT_MS / 1000, (WS_CLOSE_TIMEOUT_MS % 1000) * 1000};
        evtimer_add(w->close_timer, &tv);
    }
    return true;
}

/* While lingering: drop what arrived; true when the connection should end now. */
static bool linger_drop(struct ws_conn *w)
{
    struct evbuffer *in = bufferevent_get_input(w->bev);
    size_t n = evbuffer_get_length(in);
    evbuffer_drain(in, n);
    w->lingered += n;
    return w->lingered >= WS_LINGER_BYTES;
}

/* Run wslay: read what is buffered, write what is queued, end when both directions are
 * closed and flushed. Returns false when the connection was freed. */
static bool pump(struct ws_conn *w)
{
    wslay_event_context_ptr ctx = w->ctx;
    if (!w->paused && wslay_event_want_read(ctx) && wslay_event_recv(ctx) != 0) {
        end(w);
        return false;
    }
    if (wslay_event_want_write(ctx) && wslay_event_send(ctx) != 0) {
        end(w);
        return false;
    }
    /* wslay sends control frames before queued data: the close waits for the data */
    if (w->close_pending && wslay_event_get_queued_msg_count(ctx) == 0) {
        w->close_pending = false;
        wslay_event_queue_close(ctx, w->close_code, (const uint8_t *)w->close_reason,
                                strlen(w->close_reason));
        struct timeval tv = {WS_CLOSE_TIMEOUT_MS / 1000, (WS_CLOSE_TIMEOUT_MS % 1000) * 1000};
        evtimer_add(w->close_timer, &tv); /* the peer has this long to answer */
        if (wslay_event_send(ctx) != 0) {
            end(w);
            return false;
        }
    }
    struct evbuffer *out = bufferevent_get_output(w->bev);
    if (!wslay_event_want_read(ctx) && !wslay_event_want_write(ctx) &&
        evbuffer_get_length(out) == 0) {
        if (!wslay_event_get_close_received(ctx) && linger(w)) return true;
        end(w); /* closed both ways and flushed */
        return false;
    }
    if (w->want_drain && ws_pending(w) < w->high) {
        w->want_drain = false;
        if (w->h->on_drain) w->h->on_drain(w, w->arg);
    }
    return true;
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct ws_conn *w = arg;
    if (w->lingering) {
        if (linger_drop(w)) end(w);
        return;
    }
    pump(w);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    pump(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct ws_conn *w = arg;
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        end(w);
        return;
    }
    if (w->lingering) { /* the peer closed (or failed) while we dropped its input */
        end(w);
        return;
    }
    if (what & BEV_EVENT_EOF) { /* the peer is gone: take what it sent, then end */
        w->paused = false;
        if (pump(w)) end(w);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct ws_conn *w = arg;
    if (!w->lingering) pump(w);
}

static void on_close_timer(evutil_socket_t fd, short what, void *arg)
{
    end(arg); /* the peer never answered our close */
}

static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    struct ws_conn *w = user;
    int n = w->paused ? 0 : evbuffer_remove(bufferevent_get_input(w->bev), buf, len);
    if (n <= 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    return n;
}

static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    struct ws_conn *w = user;
    struct evbuffer *out = bufferevent_get_output(w->bev);
    if (evbuffer_get_length(out) >= w->high) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (evbuffer_add(out, data, len) < 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return (ssize_t)len;
}

static void msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a,
                   void *user)
{
    struct ws_conn *w = user;
    if (a->opcode == WSLAY_BINARY_FRAME && w->h->on_binary)
        w->h->on_binary(w, a->msg, a->msg_length, w->arg);
    else if (a->opcode == WSLAY_TEXT_FRAME && w->h->on_text)
        w->h->on_text(w, (const char *)a->msg, a->msg_length, w->arg);
    /* close, ping and pong are wslay's */
}

static void on_upgraded(struct bufferevent *bev, void *p)
{
    struct ws_pending_upgrade pu = *(struct ws_pending_upgrade *)p;
    free(p);
    if (!bev) {
        if (pu.h->on_close) pu.h->on_close(pu.arg);
        return;
    }
    struct ws_conn *w = xcalloc(1, sizeof *w);
    w->bev = bev;
    w->h = pu.h;
    w->arg = pu.arg;
    w->high = pu.h->high_water ? pu.h->high_water : WS_DEF_HIGH;
    static const struct wslay_event_callbacks cbs = {
        .recv_callback = recv_cb, .send_callback = send_cb, .on_msg_recv_callback = msg_cb};
    ASSERT(wslay_event_context_server_init(&w->ctx, &cbs, w) == 0);
    wslay_event_config_set_max_recv_msg_length(w->ctx,
                                               pu.h->max_msg ? pu.h->max_msg : WS_DEF_MAX_MSG);
    struct event_base *base = bufferevent_get_base(bev);
    w->kick = event_new(base, -1, 0, on_kick, w);
    w->close_timer = evtimer_new(base, on_close_timer, w);
    ASSERT(w->kick && w->close_timer);
    bufferevent_setcb(bev, on_read, on_write, on_event, w);
    bufferevent_setwatermark(bev, EV_READ, 0, WS_READ_HIGH);
    bufferevent_setwatermark(bev, EV_WRITE, w->high / 2, 0);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    if (w->h->on_open) w->h->on_open(w, w->arg);
    event_active(w->kick, EV_TIMEOUT, 0); /* input that came with the request */
}

int ws_server_upgrade(struct http_req *r, const struct ws_handlers *h, void *arg)
{
    const char *ver = http_req_header(r, "Sec-WebSocket-Version");
    const char *key = http_req_header(r, "Sec-WebSocket-Key");
    if (strcmp(http_req_method(r), "GET") != 0 ||
        !has_token(http_req_header(r, "Upgrade"), "websocket") ||
        !has_token(http_req_header(r, "Connection"), "upgrade")) {
        http_reply_error(r, 400, "websocket_required", "",
                         "this endpoint speaks WebSocket: send GET with Upgrade: websocket and "
                         "Connection: Upgrade");
        return -1;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        http_add_header(r, "Sec-WebSocket-Version", "13");
        http_reply_error(r, 426, "websocket_version", "", "only WebSocket version 13 is spoken");
        return -1;
    }
    if (!ws_key_valid(key)) {
        http_reply_error(r, 400, "websocket_key", "",
                         "Sec-WebSocket-Key must be the base64 of 16 random bytes");
        return -1;
    }
    char acc[WS_ACCEPT_LEN + 1];
    ws_accept_value(key, acc);
    http_add_header(r, "Sec-WebSocket-Accept", acc);
    /* the one subprotocol spoken: a browser offers it beside its token (see the sandbox API) */
    if (has_token(http_req_header(r, "Sec-WebSocket-Protocol"), "rebuno"))
        http_add_header(r, "Sec-WebSocket-Protocol", "rebuno");
    struct ws_pending_upgrade *pu = xcalloc(1, sizeof *pu);
    pu->h = h;
    pu->arg = arg;
    if (http_upgrade(r, "websocket", on_upgraded, pu) < 0) {
        free(pu);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ application calls */

static int queue(struct ws_conn *w, uint8_t opcode, const void *p, size_t n)
{
    if (w->close_pending) return -EPIPE;
    struct wslay_event_msg m = {opcode, p, n};
    if (wslay_event_queue_msg(w->ctx, &m) != 0) return -EPIPE;
    event_active(w->kick, EV_TIMEOUT, 0);
    return 0;
}

int ws_send_binary(struct ws_conn *w, const void *p, size_t n)
{
    return queue(w, WSLAY_BINARY_FRAME, p, n);
}

int ws_send_text(struct ws_conn *w, const char *p, size_t n)
{
    return queue(w, WSLAY_TEXT_FRAME, p, n);
}

void ws_pause_reading(struct ws_conn *w, bool pause)
{
    if (w->paused == pause) return;
    w->paused = pause;
    if (!pause) event_active(w->kick, EV_TIMEOUT, 0);
}

void ws_close(struct ws_conn *w, uint16_t code, const char *reason)
{
    if (w->close_pending || wslay_event_get_close_sent(w->ctx)) return;
    w->close_pending = true;
    w->close_code = code;
    snprintf(w->close_reason, sizeof w->close_reason, "%s", reason ? reason : "");
    /* a peer that stops reading cannot keep the connection forever */
    struct timeval tv = {WS_FLUSH_TIMEOUT_MS / 1000, (WS_FLUSH_TIMEOUT_MS % 1000) * 1000};
    evtimer_add(w->close_timer, &tv);
    event_active(w->kick, EV_TIMEOUT, 0);
}

void ws_free(struct ws_conn *w)
{
    if (w) destroy(w);
}
