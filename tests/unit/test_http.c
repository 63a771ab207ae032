/*
 * test_http.c - unit tests for the HTTP server layer (src/net/http.c).
 *
 * Real sockets over loopback, no mocks. The server's event loop runs in its own
 * thread; the test body is the client (blocking sockets with receive timeouts). The
 * two talk over a socketpair: srv_call() runs a function on the loop thread and waits
 * for it, which is how tests shut the server down or read its state. Handlers report
 * what they saw in their replies or in atomic counters.
 */
#include "net/http.h"
#include "net/gzip.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------------ server side */

struct srv {
    struct event_base *base;
    struct http_server *http;
    int port;
    int ctl[2]; /* [0] test thread, [1] loop thread */
    struct event *ctl_ev;
    pthread_t th;
    /* written on the loop thread, read with atomics by the test */
    int handled;
    int closes;
    int drains;
    int sse_sent;
    int sse_eagain;
    int poll_done;
    int fast_saw_poll_done;
    int conns; /* snapshot from srv_conns() */
    int upgraded;      /* upgrade callbacks with a bufferevent */
    int upgrade_null;  /* ... with NULL (connection gone first) */
    int upgrade_ended; /* upgraded connections that ended */
    int bad;   /* failed checks on the loop thread (cr_assert only works on the test's) */
    /* loop thread only */
    struct http_req *poll_req;
    struct http_req *kept[4];
};

static struct srv g; /* Criterion runs every test in its own process */

struct srv_cmd {
    void (*fn)(void *arg);
    void *arg;
};

static int ld(int *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void inc(int *p)
{
    __atomic_add_fetch(p, 1, __ATOMIC_SEQ_CST);
}

#define CHECK(x) ((x) ? (void)0 : inc(&g.bad))

static void on_ctl(evutil_socket_t fd, short what, void *arg)
{
    struct srv_cmd cmd;
    ssize_t n = read(fd, &cmd, sizeof cmd);
    if (n != (ssize_t)sizeof cmd) return;
    cmd.fn(cmd.arg);
    char ack = 'k';
    (void)!write(fd, &ack, 1);
}

static void *loop_main(void *arg)
{
    event_base_dispatch(g.base);
    return NULL;
}

/* Run fn(arg) on the loop thread and wait until it returned. */
static void srv_call(void (*fn)(void *), void *arg)
{
    struct srv_cmd cmd = {fn, arg};
    cr_assert_eq(write(g.ctl[0], &cmd, sizeof cmd), (ssize_t)sizeof cmd);
    char ack;
    cr_assert_eq(read(g.ctl[0], &ack, 1), 1, "loop thread did not answer");
}

static void srv_start(const struct http_config *cfg)
{
    memset(&g, 0, sizeof g);
    g.base = event_base_new();
    cr_assert(g.base);
    g.http = http_server_new(g.base, cfg);
    struct err e = ERR_INIT;
    cr_assert_eq(http_server_listen(g.http, "127.0.0.1:0", &e), 0, "%s", e.msg);
    g.port = http_server_port(g.http);
    cr_assert_gt(g.port, 0);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, g.ctl), 0);
    g.ctl_ev = event_new(g.base, g.ctl[1], EV_READ | EV_PERSIST, on_ctl, NULL);
    event_add(g.ctl_ev, NULL);
}

static void srv_run(void)
{
    cr_assert_eq(pthread_create(&g.th, NULL, loop_main, NULL), 0);
}

/* Wait (bounded) for the loop thread to return from event_base_dispatch, i.e. for the
 * loop to run out of events by itself. */
static void srv_join(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 3;
    cr_assert_eq(pthread_timedjoin_np(g.th, NULL, &ts), 0, "event loop did not exit");
    cr_assert_eq(ld(&g.bad), 0, "a check on the loop thread failed");
    event_base_free(g.base);
    close(g.ctl[0]);
    close(g.ctl[1]);
}

static void do_free(void *arg)
{
    http_server_free(g.http);
    g.http = NULL;
    event_free(g.ctl_ev);
}

static void srv_stop(void)
{
    srv_call(do_free, NULL);
    srv_join();
}

static void do_shutdown(void *arg)
{
    http_server_shutdown(g.http, *(int *)arg);
    g.http = NULL; /* frees itself */
    event_free(g.ctl_ev);
}

static void do_count_conns(void *arg)
{
    __atomic_store_n(&g.conns, http_server_connections(g.http), __ATOMIC_SEQ_CST);
}

static int srv_conns(void)
{
    srv_call(do_count_conns, NULL);
    return ld(&g.conns);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait up to 2 s for *p to reach want. */
static bool wait_for(int *p, int want)
{
    for (int i = 0; i < 400; i++) {
        if (ld(p) >= want) return true;
        sleep_ms(5);
    }
    return false;
}

/* ------------------------------------------------------------------ handlers */

static void h_item(struct http_req *r, void *arg)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(http_req_param(r, "id")));
    json_object_set_new(o, "step", json_string(http_req_param(r, "step")));
    const char *q = http_req_query(r, "q"), *x = http_req_query(r, "x");
    json_object_set_new(o, "q", q ? json_string(q) : json_null());
    json_object_set_new(o, "x", x ? json_string(x) : json_null());
    json_object_set_new(o, "flag", json_boolean(http_req_query(r, "flag") != NULL));
    json_object_set_new(o, "path", json_string(http_req_path(r)));
    json_object_set_new(o, "method", json_string(http_req_method(r)));
    json_object_set_new(o, "route", json_string(arg));
    http_reply_json(r, 200, o);
}

static void h_echo(struct http_req *r, void *arg)
{
    struct err e = ERR_INIT;
    json_t *j = http_req_json(r, arg != NULL, &e);
    if (!j) {
        http_reply_err(r, &e);
        return;
    }
    http_reply_json(r, 200, j);
}

static void h_fast(struct http_req *r, void *arg)
{
    inc(&g.handled);
    if (ld(&g.poll_done)) inc(&g.fast_saw_poll_done);
    http_reply_raw(r, 200, "text/plain", "fast", 4);
}

static void h_nocontent(struct http_req *r, void *arg)
{
    http_reply_json(r, 204, NULL);
}

static void h_err0(struct http_req *r, void *arg)
{
    struct err e = ERR_INIT;
    err_set(&e, 0, "", "", "boom");
    http_reply_err(r, &e);
}

static void h_whoami(struct http_req *r, void *arg)
{
    const char *empty = http_req_header(r, "X-Empty");
    json_t *o = json_pack("{s:s, s:b, s:s, s:s?, s:s?}", "peer", http_req_peer(r), "loopback",
                          http_req_peer_is_loopback(r), "id", http_req_id(r), "ua",
                          http_req_header(r, "user-agent"), "empty", empty);
    http_reply_json(r, 200, o);
}

static void on_close(struct http_req *r, void *arg)
{
    struct http_req **slot = arg;
    if (slot) *slot = NULL;
    inc(&g.closes);
}

static void poll_fire(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = g.poll_req;
    if (!r) return; /* client left first */
    g.poll_req = NULL;
    __atomic_store_n(&g.poll_done, 1, __ATOMIC_SEQ_CST);
    http_reply_json(r, 200, json_pack("{s:s}", "ok", "late"));
}

/* Long-poll: answer 40 ms later from a timer. */
static void h_poll(struct http_req *r, void *arg)
{
    g.poll_req = r;
    http_req_on_close(r, on_close, &g.poll_req);
    struct timeval tv = {0, 40 * 1000};
    event_base_once(g.base, -1, EV_TIMEOUT, poll_fire, NULL, &tv);
    inc(&g.handled);
}

/* Never answers: only a disconnect or shutdown ends it. */
static void h_hang(struct http_req *r, void *arg)
{
    g.kept[0] = r;
    http_req_on_close(r, on_close, &g.kept[0]);
    inc(&g.handled);
}

static void h_sse(struct http_req *r, void *arg)
{
    http_sse_start(r);
    CHECK(http_sse_send(r, "1", "greet", "hello") == 0);
    CHECK(http_sse_send(r, NULL, NULL, "line1\nline2\r\nline3") == 0);
    http_sse_comment(r, "ping");
    CHECK(http_sse_send(r, "2", NULL, "") == 0);
    http_sse_end(r);
}

static void h_ndjson(struct http_req *r, void *arg)
{
    http_stream_start(r, "application/x-ndjson");
    CHECK(http_stream_write(r, "a\n", 2) == 0);
    CHECK(http_stream_write(r, "", 0) == 0); /* nothing: not the last chunk */
    CHECK(http_stream_write(r, "bc\n", 3) == 0);
    http_sse_end(r);
}

static void h_sse_keep(struct http_req *r, void *arg)
{
    g.kept[1] = r;
    http_req_on_close(r, on_close, &g.kept[1]);
    http_sse_start(r);
    http_sse_send(r, "1", "first", "x");
    inc(&g.handled);
}

static void sse_drained(struct http_req *r, void *arg)
{
    inc(&g.drains);
    CHECK(http_sse_send(r, NULL, "last", "done") == 0);
    http_sse_end(r);
}

/* Fill the output past the back-pressure limit, then finish from the drain callback. */
static void h_sse_flood(struct http_req *r, void *arg)
{
    static char chunk[8192];
    memset(chunk, 'z', sizeof chunk - 1);
    http_sse_start(r);
    http_sse_on_drain(r, sse_drained, NULL);
    for (int i = 0; i < 1000; i++) {
        int rc = http_sse_send(r, NULL, "chunk", chunk);
        if (rc == -EAGAIN) {
            inc(&g.sse_eagain);
            break;
        }
        inc(&g.sse_sent);
    }
}

/* Kept without a close callback: survives its client as an orphan. */
static void h_orphan(struct http_req *r, void *arg)
{
    for (int i = 2; i < 4; i++)
        if (!g.kept[i]) {
            g.kept[i] = r;
            break;
        }
    inc(&g.handled);
}

static void do_reply_orphan(void *arg)
{
    http_reply_json(g.kept[2], 200, json_pack("{s:s}", "too", "late"));
    g.kept[2] = NULL;
}

/* 2 MiB reply: more than the socket buffers hold, so it is in flight for a while. */
static void h_big(struct http_req *r, void *arg)
{
    size_t n = 2u << 20;
    char *b = malloc(n);
    memset(b, 'b', n);
    http_reply_raw(r, 200, "application/octet-stream", b, n);
    free(b);
    inc(&g.handled);
}

/* Reply, then shut the server down from inside the handler. */
static void h_quit(struct http_req *r, void *arg)
{
    http_reply_json(r, 202, json_pack("{s:b}", "stopping", 1));
    http_server_shutdown(g.http, 1000);
    g.http = NULL;
    event_free(g.ctl_ev);
}

/* An upgraded connection speaks "echo": every byte comes back. */
static void echo_read(struct bufferevent *bev, void *arg)
{
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void echo_event(struct bufferevent *bev, short what, void *arg)
{
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) return;
    bufferevent_free(bev);
    inc(&g.upgrade_ended);
}

static void on_upgraded(struct bufferevent *bev, void *arg)
{
    CHECK(arg == &g);
    if (!bev) {
        inc(&g.upgrade_null);
        return;
    }
    inc(&g.upgraded);
    bufferevent_setcb(bev, echo_read, NULL, echo_event, NULL);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    if (evbuffer_get_length(bufferevent_get_input(bev)) > 0) echo_read(bev, NULL);
}

static void h_upgrade(struct http_req *r, void *arg)
{
    const char *up = http_req_header(r, "Upgrade");
    if (!up || strcmp(up, "echo") != 0) {
        http_reply_error(r, 400, "upgrade_required", "", "send Upgrade: echo");
        return;
    }
    http_add_header(r, "X-Proto", "echo/1");
    CHECK(http_upgrade(r, "echo", on_upgraded, &g) == 0);
}

static void upgrade_fire(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = g.kept[0];
    if (!r) return; /* the client left first */
    g.kept[0] = NULL;
    CHECK(http_upgrade(r, "echo", on_upgraded, &g) == 0);
}

/* Upgrade a kept request later, from a timer. */
static void h_upgrade_later(struct http_req *r, void *arg)
{
    g.kept[0] = r;
    http_req_on_close(r, on_close, &g.kept[0]);
    struct timeval tv = {0, 30 * 1000};
    event_base_once(g.base, -1, EV_TIMEOUT, upgrade_fire, NULL, &tv);
    inc(&g.handled);
}

static bool filter_token(struct http_req *r, void *arg)
{
    if (strncmp(http_req_path(r), "/private", 8) != 0) return true;
    const char *t = http_req_header(r, "X-Token");
    if (t && strcmp(t, "sesame") == 0) return true;
    http_reply_error(r, 401, "unauthorized", "", "missing or wrong token");
    return false;
}

static void add_routes(void)
{
    http_route(g.http, "GET", "/v0/items/:id/steps/:step", h_item, "param");
    http_route(g.http, "GET", "/v0/items/special/steps/:step", h_item, "literal");
    http_route(g.http, "POST", "/v0/items/:id/steps/:step", h_item, "post");
    http_route(g.http, "GET", "/", h_item, "root");
    http_route(g.http, "POST", "/echo", h_echo, NULL);
    http_route(g.http, "POST", "/echo-empty-ok", h_echo, "yes");
    http_route(g.http, "GET", "/fast", h_fast, NULL);
    http_route(g.http, "POST", "/fast", h_fast, NULL);
    http_route(g.http, "GET", "/private/x", h_fast, NULL);
    http_route(g.http, "DELETE", "/nocontent", h_nocontent, NULL);
    http_route(g.http, "GET", "/err0", h_err0, NULL);
    http_route(g.http, "GET", "/whoami", h_whoami, NULL);
    http_route(g.http, "GET", "/poll", h_poll, NULL);
    http_route(g.http, "GET", "/hang", h_hang, NULL);
    http_route(g.http, "GET", "/sse", h_sse, NULL);
    http_route(g.http, "GET", "/ndjson", h_ndjson, NULL);
    http_route(g.http, "GET", "/sse-keep", h_sse_keep, NULL);
    http_route(g.http, "GET", "/sse-flood", h_sse_flood, NULL);
    http_route(g.http, "GET", "/orphan", h_orphan, NULL);
    http_route(g.http, "GET", "/big", h_big, NULL);
    http_route(g.http, "POST", "/quit", h_quit, NULL);
    http_route(g.http, "GET", "/upgrade", h_upgrade, NULL);
    http_route(g.http, "GET", "/upgrade-later", h_upgrade_later, NULL);
    http_set_filter(g.http, filter_token, NULL);
}

static void start(const struct http_config *cfg)
{
    srv_start(cfg);
    add_routes();
    srv_run();
}

/* ------------------------------------------------------------------ client side */

struct cl {
    int fd;
    char *buf;
    size_t len, cap;
};

struct resp {
    int status;
    char *head; /* status line + headers, NUL-terminated */
    char *body;
    size_t body_len;
};

/* A client socket, not yet connected. */
static struct cl *cl_new(void)
{
    struct cl *c = calloc(1, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(c->fd, 0);
    struct timeval tv = {2, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static void cl_connect(struct cl *c)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(c->fd, (struct sockaddr *)&sa, sizeof sa), 0);
}

static struct cl *cl_open(void)
{
    struct cl *c = cl_new();
    cl_connect(c);
    return c;
}

/* A connection from another loopback address: another peer to the server. */
static struct cl *cl_open_from(const char *src)
{
    struct cl *c = cl_new();
    struct sockaddr_in sa = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, src, &sa.sin_addr), 1);
    cr_assert_eq(bind(c->fd, (struct sockaddr *)&sa, sizeof sa), 0, "bind %s: %s", src,
                 strerror(errno));
    cl_connect(c);
    return c;
}

static void cl_close(struct cl *c)
{
    close(c->fd);
    free(c->buf);
    free(c);
}

static void cl_sendn(struct cl *c, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        cr_assert_gt(w, 0, "send: %s", strerror(errno));
        s += w;
        n -= (size_t)w;
    }
}

static void cl_send(struct cl *c, const char *s)
{
    cl_sendn(c, s, strlen(s));
}

/* Read more bytes; 0 on EOF or reset, -1 on timeout. */
static ssize_t cl_fill(struct cl *c)
{
    if (c->cap - c->len < 65536) {
        c->cap = c->cap ? c->cap * 2 : 131072;
        c->buf = realloc(c->buf, c->cap + 1);
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n < 0 && errno == ECONNRESET) return 0;
    if (n < 0) return -1;
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    return n;
}

static void cl_consume(struct cl *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
    c->buf[c->len] = '\0';
}

/* True when the server closed the connection (no further bytes). */
static bool cl_eof(struct cl *c)
{
    return c->len == 0 && cl_fill(c) == 0;
}

/* Like cl_eof, but waits up to 6 s for the server to close (a deadline is due). */
static bool cl_eof_within_6s(struct cl *c)
{
    for (int i = 0; i < 3; i++) {
        if (c->len) return false;
        ssize_t n = cl_fill(c);
        if (n >= 0) return n == 0 && c->len == 0;
    }
    return false;
}

/* Send s one byte every interval_ms until the server answers or closes, at most
 * 6 s. Returns how many bytes went out before that. */
static size_t cl_drip(struct cl *c, const char *s, int interval_ms)
{
    size_t n = strlen(s), sent = 0;
    for (int waited = 0; waited < 6000; waited += interval_ms) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        if (poll(&pfd, 1, interval_ms) > 0) break;
        if (sent < n) {
            ssize_t w = send(c->fd, s + sent, 1, MSG_NOSIGNAL);
            if (w <= 0) break;
            sent++;
        }
    }
    return sent;
}

static bool hdr_get(const char *head, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            size_t len = strcspn(v, "\r");
            if (len >= n) len = n - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return true;
        }
    }
    return false;
}

/* n bytes of p, NUL-terminated (bodies may hold NULs: gzip) */
static char *memdup0(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (n) memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* Read one response; bodies without Content-Length run to EOF. */
static bool cl_resp(struct cl *c, struct resp *r, bool head_req)
{
    memset(r, 0, sizeof *r);
    char *end;
    while (!c->buf || !(end = strstr(c->buf, "\r\n\r\n")))
        if (cl_fill(c) <= 0) return false;
    size_t hlen = (size_t)(end - c->buf) + 4;
    r->head = strndup(c->buf, hlen);
    cl_consume(c, hlen);
    if (sscanf(r->head, "HTTP/1.1 %d", &r->status) != 1) return false;
    char cl[32];
    bool has_len = hdr_get(r->head, "Content-Length", cl, sizeof cl);
    if (r->status == 204 || r->status == 304 || head_req) {
        r->body = strdup("");
        return true;
    }
    if (has_len) {
        size_t want = strtoul(cl, NULL, 10);
        while (c->len < want)
            if (cl_fill(c) <= 0) return false;
        r->body = memdup0(c->buf, want);
        r->body_len = want;
        cl_consume(c, want);
        return true;
    }
    while (cl_fill(c) > 0) {
    }
    r->body = memdup0(c->buf ? c->buf : "", c->len);
    r->body_len = c->len;
    cl_consume(c, c->len);
    return true;
}

static void resp_free(struct resp *r)
{
    free(r->head);
    free(r->body);
}

/* One request on a fresh connection; returns the response. */
static void roundtrip(const char *req, struct resp *r)
{
    struct cl *c = cl_open();
    cl_send(c, req);
    cr_assert(cl_resp(c, r, false), "no response to: %s", req);
    cl_close(c);
}

static json_t *body_json(const struct resp *r)
{
    json_error_t je;
    json_t *j = json_loadb(r->body, r->body_len, 0, &je);
    cr_assert(j, "body is not JSON (%s): %s", je.text, r->body);
    return j;
}

static void assert_error(const struct resp *r, int status, const char *code, const char *field)
{
    cr_assert_eq(r->status, status, "status %d, body %s", r->status, r->body);
    char ct[64];
    cr_assert(hdr_get(r->head, "Content-Type", ct, sizeof ct));
    cr_assert_str_eq(ct, "application/json");
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_object(e), "%s", r->body);
    cr_assert_str_eq(json_string_value(json_object_get(e, "code")), code);
    cr_assert(json_is_string(json_object_get(e, "message")));
    if (field)
        cr_assert_str_eq(json_string_value(json_object_get(e, "field")), field);
    else
        cr_assert_null(json_object_get(e, "field"), "field must be omitted: %s", r->body);
    cr_assert_eq(json_object_size(e), field ? 3u : 2u);
    json_decref(j);
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

TestSuite(http, .timeout = 20);

/* ------------------------------------------------------------------ tests */

Test(http, routing_params_and_query)
{
    start(NULL);
    struct resp r;
    roundtrip(GET("/v0/items/a%20b/steps/7?q=hello+world&x=%2Fy%26z&q=second&flag"), &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "a b");
    cr_assert_str_eq(json_string_value(json_object_get(j, "step")), "7");
    cr_assert_str_eq(json_string_value(json_object_get(j, "q")), "hello world");
    cr_assert_str_eq(json_string_value(json_object_get(j, "x")), "/y&z");
    cr_assert(json_is_true(json_object_get(j, "flag")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "path")), "/v0/items/a b/steps/7");
    cr_assert_str_eq(json_string_value(json_object_get(j, "route")), "param");
    json_decref(j);
    resp_free(&r);

    /* first registered match wins over the later literal route */
    roundtrip(GET("/v0/items/special/steps/1"), &r);
    j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "route")), "param");
    json_decref(j);
    resp_free(&r);

    /* an encoded slash stays inside its segment */
    roundtrip(GET("/v0/items/a%2Fb/steps/2"), &r);
    j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "a/b");
    json_decref(j);
    resp_free(&r);

    /* '+' is only a space in the query */
    roundtrip(GET("/v0/items/a+b/steps/1?q=a+b%2B"), &r);
    j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "a+b");
    cr_assert_str_eq(json_string_value(json_object_get(j, "q")), "a b+");
    json_decref(j);
    resp_free(&r);

    roundtrip(GET("/"), &r);
    j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "route")), "root");
    json_decref(j);
    resp_free(&r);

    roundtrip(GET("/v0/items/%zz/steps/1"), &r);
    assert_error(&r, 400, "validation_error", "path");
    resp_free(&r);
    roundtrip(GET("/v0/items/%00/steps/1"), &r);
    assert_error(&r, 400, "validation_error", "path");
    resp_free(&r);
    roundtrip(GET("/v0/items/a/steps/1?q=%G1"), &r);
    assert_error(&r, 400, "validation_error", "query");
    resp_free(&r);
    srv_stop();
}

Test(http, not_found_and_method_not_allowed)
{
    start(NULL);
    struct resp r;
    roundtrip(GET("/nope"), &r);
    assert_error(&r, 404, "not_found", NULL);
    resp_free(&r);

    /* an empty capture does not match */
    roundtrip(GET("/v0/items//steps/1"), &r);
    assert_error(&r, 404, "not_found", NULL);
    resp_free(&r);

    roundtrip("DELETE /v0/items/1/steps/2 HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    assert_error(&r, 405, "method_not_allowed", NULL);
    char allow[128];
    cr_assert(hdr_get(r.head, "Allow", allow, sizeof allow));
    cr_assert_str_eq(allow, "GET, POST, HEAD");
    resp_free(&r);

    /* status 0 in a struct err renders as 500 */
    roundtrip(GET("/err0"), &r);
    assert_error(&r, 500, "internal_error", NULL);
    resp_free(&r);
    srv_stop();
}

Test(http, json_bodies)
{
    start(NULL);
    struct resp r;
    roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 16\r\n\r\n{\"a\":1,\"b\":[2]}\n",
              &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(r.body, "{\"a\":1,\"b\":[2]}");
    char ct[64];
    cr_assert(hdr_get(r.head, "Content-Type", ct, sizeof ct));
    cr_assert_str_eq(ct, "application/json");
    resp_free(&r);

    roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n{bad}", &r);
    assert_error(&r, 400, "validation_error", "body");
    json_t *j = body_json(&r);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    cr_assert(strncmp(msg, "request body is not valid JSON: ", 32) == 0, "%s", msg);
    cr_assert(strstr(msg, "line 1 column"), "%s", msg);
    json_decref(j);
    resp_free(&r);

    roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 13\r\n\r\n{\"a\":1,\"a\":2}", &r);
    assert_error(&r, 400, "validation_error", "body");
    cr_assert(strstr(r.body, "duplicate"), "%s", r.body);
    resp_free(&r);

    roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", &r);
    assert_error(&r, 400, "validation_error", "body");
    resp_free(&r);

    roundtrip("POST /echo-empty-ok HTTP/1.1\r\nHost: t\r\n\r\n", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "{}");
    resp_free(&r);

    /* chunked bodies are assembled */
    roundtrip("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
              "3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n",
              &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(r.body, "[1,2]");
    resp_free(&r);
    srv_stop();
}

Test(http, oversize_body_413_without_reading_it)
{
    struct http_config cfg = {.max_body = 1024};
    start(&cfg);
    /* Announce 100 MB but send only 1000 bytes: the reply must come anyway. */
    struct cl *c = cl_open();
    cl_send(c, "POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n");
    char junk[1000];
    memset(junk, 'x', sizeof junk);
    cl_sendn(c, junk, sizeof junk);
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    assert_error(&r, 413, "payload_too_large", "body");
    char conn[32];
    cr_assert(hdr_get(r.head, "Connection", conn, sizeof conn));
    cr_assert_str_eq(conn, "close");
    cr_assert(cl_eof(c), "connection must be closed after 413");
    resp_free(&r);
    cl_close(c);

    /* chunked bodies are capped too */
    c = cl_open();
    cl_send(c, "POST /fast HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n");
    char big[1024];
    memset(big, 'y', sizeof big);
    cl_sendn(c, big, sizeof big);
    cl_send(c, "\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    assert_error(&r, 413, "payload_too_large", "body");
    cr_assert(cl_eof(c));
    resp_free(&r);
    cl_close(c);

    /* exactly at the cap is fine */
    c = cl_open();
    cl_send(c, "POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n");
    cl_sendn(c, big, sizeof big);
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(r.status, 200);
    resp_free(&r);
    cl_close(c);
    cr_assert_eq(ld(&g.handled), 1, "oversized requests must not reach handlers");
    srv_stop();
}

Test(http, header_and_url_limits)
{
    struct http_config cfg = {.max_header_bytes = 1024};
    start(&cfg);
    char req[12000];
    struct resp r;
    memset(req, 0, sizeof req);
    strcpy(req, "GET /fast HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(req + strlen(req), 'a', 2000);
    strcat(req, "\r\n\r\n");
    roundtrip(req, &r);
    assert_error(&r, 431, "headers_too_large", "headers");
    resp_free(&r);

    srv_stop();

    start(NULL);
    memset(req, 0, sizeof req);
    strcpy(req, "GET /");
    memset(req + 5, 'p', 9000);
    strcat(req, " HTTP/1.1\r\nHost: t\r\n\r\n");
    roundtrip(req, &r);
    assert_error(&r, 414, "uri_too_long", "path");
    resp_free(&r);
    srv_stop();
}

Test(http, malformed_request_400_and_close)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, "GET /fast HTTP/1.1\r\nHost: t\r\nNo colon here\r\n\r\n");
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    assert_error(&r, 400, "bad_request", NULL);
    cr_assert(cl_eof(c));
    resp_free(&r);
    cl_close(c);

    c = cl_open();
    cl_send(c, "\x01\x02garbage\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    assert_error(&r, 400, "bad_request", NULL);
    cr_assert(cl_eof(c));
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

Test(http, keep_alive_two_requests_one_connection)
{
    start(NULL);
    struct cl *c = cl_open();
    struct resp r;
    for (int i = 0; i < 2; i++) {
        cl_send(c, GET("/fast"));
        cr_assert(cl_resp(c, &r, false));
        cr_assert_eq(r.status, 200);
        cr_assert_str_eq(r.body, "fast");
        char v[32];
        cr_assert_not(hdr_get(r.head, "Connection", v, sizeof v), "%s", r.head);
        resp_free(&r);
    }
    cr_assert_eq(srv_conns(), 1);
    /* 204 has no body and no Content-Length, and the connection stays usable */
    cl_send(c, "DELETE /nocontent HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(r.status, 204);
    char v[32];
    cr_assert_not(hdr_get(r.head, "Content-Length", v, sizeof v));
    resp_free(&r);
    /* HEAD is served by the GET route, with the length but without the body */
    cl_send(c, "HEAD /fast HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert(cl_resp(c, &r, true));
    cr_assert_eq(r.status, 200);
    cr_assert(hdr_get(r.head, "Content-Length", v, sizeof v));
    cr_assert_str_eq(v, "4");
    resp_free(&r);
    /* Connection: close is honoured */
    cl_send(c, "GET /fast HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "fast");
    cr_assert(hdr_get(r.head, "Connection", v, sizeof v));
    cr_assert_str_eq(v, "close");
    cr_assert(cl_eof(c));
    resp_free(&r);
    cl_close(c);

    /* HTTP/1.0 closes unless asked to keep alive */
    c = cl_open();
    cl_send(c, "GET /fast HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    cr_assert(hdr_get(r.head, "Connection", v, sizeof v));
    cr_assert_str_eq(v, "keep-alive");
    resp_free(&r);
    cl_send(c, "GET /fast HTTP/1.0\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "fast");
    cr_assert(cl_eof(c));
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

Test(http, pipelined_requests_answered_in_order)
{
    start(NULL);
    struct cl *c = cl_open();
    /* the first one is deferred; the second must wait for it */
    cl_send(c, GET("/poll") GET("/fast") "POST /echo HTTP/1.1\r\nHost: t\r\n"
                                         "Content-Length: 7\r\n\r\n{\"n\":3}");
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "{\"ok\":\"late\"}");
    resp_free(&r);
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "fast");
    resp_free(&r);
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "{\"n\":3}");
    resp_free(&r);
    cr_assert_eq(ld(&g.fast_saw_poll_done), 1, "pipelined request dispatched too early");
    cl_close(c);
    srv_stop();
}

Test(http, many_pipelined_and_fragmented_requests)
{
    start(NULL);
    struct cl *c = cl_open();
    enum { N = 100 };
    char one[] = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\n{\"i\":000}";
    char *all = calloc(N, sizeof one);
    for (int i = 0; i < N; i++) {
        char *p = all + strlen(all);
        strcpy(p, one);
        char num[16];
        snprintf(num, sizeof num, "%3d", i); /* no leading zeros in JSON */
        memcpy(strstr(p, "000"), num, 3);
    }
    cl_send(c, all);
    free(all);
    struct resp r;
    for (int i = 0; i < N; i++) {
        cr_assert(cl_resp(c, &r, false), "response %d missing", i);
        json_t *j = body_json(&r);
        cr_assert_eq(json_integer_value(json_object_get(j, "i")), i);
        json_decref(j);
        resp_free(&r);
    }
    /* the same request a byte at a time: every parser callback split across reads */
    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nX-Long-Header: abcdef\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n4\r\n[42]\r\n0\r\n\r\n";
    for (const char *p = req; *p; p++) {
        cl_sendn(c, p, 1);
        if ((p - req) % 16 == 0) sleep_ms(1);
    }
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "[42]");
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

Test(http, deferred_reply_and_close_callback)
{
    start(NULL);
    /* long-poll answered by a timer: no close callback afterwards */
    struct cl *c = cl_open();
    cl_send(c, GET("/poll"));
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "{\"ok\":\"late\"}");
    resp_free(&r);
    /* the connection is still usable after a deferred reply */
    cl_send(c, GET("/fast"));
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "fast");
    resp_free(&r);
    cl_close(c);

    /* client gives up on a pending request: close callback exactly once */
    c = cl_open();
    cl_send(c, GET("/hang"));
    cr_assert(wait_for(&g.handled, 3));
    cl_close(c);
    cr_assert(wait_for(&g.closes, 1), "close callback not called");
    sleep_ms(20);
    cr_assert_eq(ld(&g.closes), 1);
    cr_assert_eq(srv_conns(), 0);
    srv_stop();
    cr_assert_eq(ld(&g.closes), 1, "close callback called again at free");
}

Test(http, sse_framing)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, GET("/sse"));
    struct resp r;
    cr_assert(cl_resp(c, &r, false)); /* no Content-Length: reads to EOF */
    cr_assert_eq(r.status, 200);
    char v[64];
    cr_assert(hdr_get(r.head, "Content-Type", v, sizeof v));
    cr_assert_str_eq(v, "text/event-stream");
    cr_assert(hdr_get(r.head, "Cache-Control", v, sizeof v));
    cr_assert_str_eq(v, "no-cache");
    cr_assert(hdr_get(r.head, "X-Accel-Buffering", v, sizeof v));
    cr_assert_str_eq(v, "no");
    cr_assert_not(hdr_get(r.head, "Content-Length", v, sizeof v));
    cr_assert_str_eq(r.body, "id: 1\nevent: greet\ndata: hello\n\n"
                             "data: line1\ndata: line2\ndata: line3\n\n"
                             ": ping\n\n"
                             "id: 2\ndata: \n\n");
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

/* Raw streams go chunked to keep-alive HTTP/1.1 clients, and the connection serves the
 * next request; to HTTP/1.0 (or Connection: close) the body ends with the connection. */
Test(http, raw_stream_chunked_and_kept_alive)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, GET("/ndjson"));
    static const char framed[] = "2\r\na\n\r\n3\r\nbc\n\r\n0\r\n\r\n";
    char *end;
    while (!c->buf || !(end = strstr(c->buf, "\r\n\r\n")) ||
           c->len < (size_t)(end - c->buf) + 4 + sizeof framed - 1)
        cr_assert_gt(cl_fill(c), 0, "%s", c->buf ? c->buf : "");
    char *head = strndup(c->buf, (size_t)(end - c->buf) + 4);
    char v[64];
    cr_assert(hdr_get(head, "Transfer-Encoding", v, sizeof v), "%s", head);
    cr_assert_str_eq(v, "chunked");
    cr_assert_not(hdr_get(head, "Connection", v, sizeof v), "%s", head);
    cr_assert_not(hdr_get(head, "Content-Length", v, sizeof v), "%s", head);
    cl_consume(c, strlen(head));
    free(head);
    cr_assert_eq(c->len, sizeof framed - 1);
    cr_assert(memcmp(c->buf, framed, c->len) == 0, "%s", c->buf);
    cl_consume(c, c->len);
    /* the same connection serves the next request */
    cl_send(c, GET("/fast"));
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_str_eq(r.body, "fast");
    resp_free(&r);
    cr_assert_eq(srv_conns(), 1);
    cl_close(c);
    /* HTTP/1.0: no chunks, the close ends the body */
    c = cl_open();
    cl_send(c, "GET /ndjson HTTP/1.0\r\n\r\n");
    cr_assert(cl_resp(c, &r, false));
    cr_assert(hdr_get(r.head, "Connection", v, sizeof v));
    cr_assert_str_eq(v, "close");
    cr_assert_not(hdr_get(r.head, "Transfer-Encoding", v, sizeof v));
    cr_assert_str_eq(r.body, "a\nbc\n");
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

Test(http, sse_back_pressure_and_drain)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, GET("/sse-flood"));
    sleep_ms(50); /* let the server hit the limit before we read */
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(ld(&g.sse_eagain), 1);
    int sent = ld(&g.sse_sent);
    cr_assert_geq(sent, 32); /* 256 KiB of 8 KiB events */
    cr_assert_leq(sent, 40);
    int events = 0;
    for (const char *p = r.body; (p = strstr(p, "event: chunk\n")) != NULL; p++)
        events++;
    cr_assert_eq(events, sent);
    cr_assert(strstr(r.body, "event: last\ndata: done\n\n"));
    cr_assert_eq(ld(&g.drains), 1);
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

Test(http, sse_client_disconnect_calls_close)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, GET("/sse-keep"));
    while (!c->buf || !strstr(c->buf, "data: x\n\n"))
        cr_assert_gt(cl_fill(c), 0);
    cl_close(c);
    cr_assert(wait_for(&g.closes, 1));
    cr_assert_eq(srv_conns(), 0);
    srv_stop();
    cr_assert_eq(ld(&g.closes), 1);
}

Test(http, graceful_shutdown_ends_streams_and_long_polls)
{
    start(NULL);
    struct cl *sse = cl_open();
    cl_send(sse, GET("/sse-keep"));
    while (!sse->buf || !strstr(sse->buf, "data: x\n\n"))
        cr_assert_gt(cl_fill(sse), 0);
    struct cl *poll = cl_open();
    cl_send(poll, GET("/hang"));
    cr_assert(wait_for(&g.handled, 2));
    struct cl *idle = cl_open();
    cl_send(idle, GET("/fast"));
    struct resp r;
    cr_assert(cl_resp(idle, &r, false));
    resp_free(&r);
    cr_assert_eq(srv_conns(), 3);

    int timeout_ms = 2000;
    srv_call(do_shutdown, &timeout_ms);
    srv_join(); /* the loop exits by itself: nothing left registered */
    cr_assert_eq(ld(&g.closes), 2);

    while (cl_fill(sse) > 0) {
    }
    cr_assert(strstr(sse->buf, "event: first\n"));
    cr_assert(cl_eof(poll), "long-poll connection must be closed");
    cr_assert(cl_eof(idle), "idle connection must be closed");
    cl_close(sse);
    cl_close(poll);
    cl_close(idle);
}

Test(http, shutdown_lets_in_flight_replies_flush)
{
    start(NULL);
    struct cl *c = cl_open();
    cl_send(c, GET("/big"));
    cr_assert(wait_for(&g.handled, 1));
    int timeout_ms = 2000;
    srv_call(do_shutdown, &timeout_ms); /* the reply is still mostly unsent */
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.body_len, 2u << 20);
    char v[32];
    cr_assert(hdr_get(r.head, "Content-Length", v, sizeof v));
    resp_free(&r);
    cr_assert(cl_eof(c));
    srv_join();
    cl_close(c);
}

Test(http, shutdown_from_a_handler)
{
    start(NULL);
    struct cl *keep = cl_open();
    cl_send(keep, GET("/hang"));
    cr_assert(wait_for(&g.handled, 1));
    struct cl *c = cl_open();
    cl_send(c, "POST /quit HTTP/1.1\r\nHost: t\r\n\r\n" GET("/fast"));
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    cr_assert_eq(r.status, 202);
    cr_assert_str_eq(r.body, "{\"stopping\":true}");
    resp_free(&r);
    cr_assert(cl_eof(c), "the pipelined request after shutdown is not served");
    cr_assert(cl_eof(keep));
    srv_join();
    cr_assert_eq(ld(&g.closes), 1);
    cr_assert_eq(ld(&g.handled), 1);
    cl_close(c);
    cl_close(keep);
}

Test(http, kept_request_without_close_callback_outlives_client)
{
    start(NULL);
    struct cl *a = cl_open(), *b = cl_open();
    cl_send(a, GET("/orphan"));
    cl_send(b, GET("/orphan"));
    cr_assert(wait_for(&g.handled, 2));
    cl_close(a);
    cl_close(b);
    for (int i = 0; i < 200 && srv_conns() > 0; i++)
        sleep_ms(5);
    cr_assert_eq(srv_conns(), 0);
    srv_call(do_reply_orphan, NULL); /* a late reply is harmless and frees it */
    srv_stop();                      /* the other one is freed with the server */
}

Test(http, filter_runs_before_routing)
{
    start(NULL);
    struct resp r;
    roundtrip(GET("/private/x"), &r);
    assert_error(&r, 401, "unauthorized", NULL);
    resp_free(&r);
    /* the filter runs before routing, so unknown private paths are 401 too */
    roundtrip(GET("/private/unknown"), &r);
    cr_assert_eq(r.status, 401);
    resp_free(&r);
    roundtrip("GET /private/x HTTP/1.1\r\nHost: t\r\nX-Token: sesame\r\n\r\n", &r);
    cr_assert_eq(r.status, 200);
    resp_free(&r);
    srv_stop();
}

Test(http, peer_id_and_headers)
{
    start(NULL);
    struct resp r;
    roundtrip("GET /whoami HTTP/1.1\r\nHost: t\r\nUser-Agent: tester/1\r\nX-Empty:\r\n"
              "X-Other: o\r\n\r\n",
              &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *j = body_json(&r);
    cr_assert_str_eq(json_string_value(json_object_get(j, "peer")), "127.0.0.1");
    cr_assert(json_is_true(json_object_get(j, "loopback")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "ua")), "tester/1");
    cr_assert_str_eq(json_string_value(json_object_get(j, "empty")), "");
    const char *id = json_string_value(json_object_get(j, "id"));
    cr_assert(id && id[0] == 'r' && strlen(id) < 20, "%s", id);
    char first[24];
    snprintf(first, sizeof first, "%s", id);
    json_decref(j);
    resp_free(&r);
    roundtrip(GET("/whoami"), &r);
    j = body_json(&r);
    cr_assert_str_neq(json_string_value(json_object_get(j, "id")), first);
    json_decref(j);
    resp_free(&r);
    srv_stop();
}

Test(http, listen_address_forms)
{
    srv_start(NULL);
    struct err e = ERR_INIT;
    cr_assert_eq(http_server_listen(g.http, "127.0.0.1", &e), -1);
    cr_assert_str_eq(e.code, "validation_error");
    cr_assert_eq(http_server_listen(g.http, "127.0.0.1:99999", &e), -1);
    /* IPv6 may be unavailable in a sandbox; only check the syntax is accepted */
    err_clear(&e);
    if (http_server_listen(g.http, "[::1]:0", &e) < 0)
        cr_assert_str_neq(e.code, "validation_error");
    srv_run();
    srv_stop();
}

/* Read exactly n bytes (after what is buffered) and compare. */
static void cl_expect(struct cl *c, const char *want)
{
    size_t n = strlen(want);
    while (c->len < n)
        cr_assert_gt(cl_fill(c), 0, "connection ended before \"%s\"", want);
    cr_assert(memcmp(c->buf, want, n) == 0, "got \"%.*s\", want \"%s\"", (int)n, c->buf, want);
    cl_consume(c, n);
}

/* Read the 101 head of an upgrade. */
static void cl_switch(struct cl *c)
{
    char *end;
    while (!c->buf || !(end = strstr(c->buf, "\r\n\r\n")))
        cr_assert_gt(cl_fill(c), 0, "no 101 reply");
    size_t hlen = (size_t)(end - c->buf) + 4;
    char *head = strndup(c->buf, hlen);
    cl_consume(c, hlen);
    static const char line[] = "HTTP/1.1 101 Switching Protocols\r\n";
    cr_assert(strncmp(head, line, sizeof line - 1) == 0, "%s", head);
    char v[64];
    cr_assert(hdr_get(head, "Upgrade", v, sizeof v) && strcmp(v, "echo") == 0, "%s", head);
    cr_assert(hdr_get(head, "Connection", v, sizeof v) && strcmp(v, "Upgrade") == 0, "%s", head);
    cr_assert(!hdr_get(head, "Content-Length", v, sizeof v), "%s", head);
    free(head);
}

Test(http, upgrade_hands_the_connection_over)
{
    start(NULL);
    struct cl *c = cl_open();
    /* the first bytes of the new protocol come in the same packet as the request */
    cl_send(c, "GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
               "early");
    char *end;
    while (!c->buf || !(end = strstr(c->buf, "\r\n\r\n")))
        cr_assert_gt(cl_fill(c), 0);
    char v[32];
    cr_assert(hdr_get(c->buf, "X-Proto", v, sizeof v) && strcmp(v, "echo/1") == 0, "%s", c->buf);
    cl_switch(c);
    cl_expect(c, "early");
    cl_send(c, "GET / HTTP/1.1\r\n\r\n"); /* no longer HTTP: echoed, not parsed */
    cl_expect(c, "GET / HTTP/1.1\r\n\r\n");
    cr_assert_eq(ld(&g.upgraded), 1);
    cr_assert_eq(srv_conns(), 0, "the server still counts an upgraded connection");
    /* a kept request upgraded later, from a timer */
    struct cl *k = cl_open();
    cl_send(k, "GET /upgrade-later HTTP/1.1\r\nHost: t\r\n\r\n");
    cl_switch(k);
    cl_send(k, "later");
    cl_expect(k, "later");
    cr_assert_eq(ld(&g.upgraded), 2);
    /* a client that leaves before a deferred upgrade: close callback, no hand-over */
    struct cl *gone = cl_open();
    cl_send(gone, "GET /upgrade-later HTTP/1.1\r\nHost: t\r\n\r\n");
    cr_assert(wait_for(&g.handled, 2));
    cl_close(gone);
    cr_assert(wait_for(&g.closes, 1));
    sleep_ms(60);
    cr_assert_eq(ld(&g.upgraded), 2);
    cr_assert_eq(ld(&g.upgrade_null), 0);
    /* the upgraded connections are the application's: they end when it frees them */
    cl_close(c);
    cl_close(k);
    cr_assert(wait_for(&g.upgrade_ended, 2));
    /* a refused upgrade is an ordinary reply, and the connection closes after it */
    c = cl_open();
    cl_send(c, "GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n");
    struct resp r;
    cr_assert(cl_resp(c, &r, false));
    assert_error(&r, 400, "upgrade_required", NULL);
    cr_assert(hdr_get(r.head, "Connection", v, sizeof v) && strcmp(v, "close") == 0);
    resp_free(&r);
    cr_assert(cl_eof(c));
    cl_close(c);
    srv_stop();
}

/* ------------------------------------------------------------------ limits and deadlines */

/* One request and its 200 on c. */
static void cl_fast(struct cl *c)
{
    struct resp r;
    cl_send(c, GET("/fast"));
    cr_assert(cl_resp(c, &r, false), "no reply");
    cr_assert_eq(r.status, 200, "%s", r.head);
    resp_free(&r);
}

/* A full table sheds an idle connection for a new one; one whose every connection is
 * being served turns the new one away. */
Test(http, max_connections)
{
    struct http_config cfg = {.max_connections = 1};
    start(&cfg);
    struct cl *a = cl_open();
    cl_fast(a);
    sleep_ms(20); /* the reply is flushed: a is idle */
    struct cl *b = cl_open();
    cl_fast(b);
    cr_assert(cl_eof(a), "the idle connection must make room");
    cl_close(a);
    cl_send(b, GET("/hang"));
    cr_assert(wait_for(&g.handled, 3));
    struct cl *c = cl_open(); /* accepted by the kernel, then closed by the server */
    cr_assert(cl_eof(c));
    cl_close(c);
    cr_assert_eq(ld(&g.closes), 0, "a request being served must not be shed");
    cr_assert_eq(srv_conns(), 1);
    cl_close(b);
    srv_stop();
}

/* The connection shed is the one that has waited longest for a request (idle or in a
 * head), never one being served. */
Test(http, shedding_takes_the_longest_waiting)
{
    struct http_config cfg = {.max_connections = 3};
    start(&cfg);
    struct cl *busy = cl_open();
    cl_send(busy, GET("/hang"));
    cr_assert(wait_for(&g.handled, 1));
    struct cl *idle = cl_open();
    cl_fast(idle);
    sleep_ms(20);
    struct cl *head = cl_open();
    cl_send(head, "GET /fast HTTP/1.1\r\n"); /* a head begun, not finished */
    sleep_ms(20);
    struct cl *n1 = cl_open(); /* sheds idle: it has waited since before head began */
    cl_fast(n1);
    cr_assert(cl_eof(idle));
    sleep_ms(20);
    struct cl *n2 = cl_open(); /* sheds head, which waits longer than the idle n1 */
    cl_fast(n2);
    cr_assert(cl_eof(head), "the stuck head must be shed quietly");
    cl_fast(n1);
    cr_assert_eq(ld(&g.closes), 0, "the request being served must not be shed");
    cl_close(idle);
    cl_close(head);
    cl_close(n1);
    cl_close(n2);
    cl_close(busy);
    srv_stop();
}

/* A peer at its cap sheds its own connections, never another peer's. */
Test(http, per_peer_cap_sheds_that_peers_own)
{
    struct http_config cfg = {.max_connections = 10, .max_per_peer = 2};
    start(&cfg);
    struct cl *a1 = cl_open_from("127.0.0.2");
    cl_fast(a1);
    sleep_ms(20);
    struct cl *b = cl_open(); /* 127.0.0.1: older than a2, another peer */
    cl_fast(b);
    sleep_ms(20);
    struct cl *a2 = cl_open_from("127.0.0.2");
    cl_fast(a2);
    sleep_ms(20);
    struct cl *a3 = cl_open_from("127.0.0.2");
    cl_fast(a3);
    cr_assert(cl_eof(a1), "127.0.0.2's oldest connection must go");
    cl_fast(a2);
    cl_fast(b);
    cr_assert_eq(srv_conns(), 3);
    cl_close(a1);
    cl_close(a2);
    cl_close(a3);
    cl_close(b);
    srv_stop();
}

/* Out of descriptors (EMFILE at accept) with an idle connection open: it is shed and the
 * pending connection gets in. */
Test(http, out_of_descriptors_sheds_an_idle_connection)
{
    start(NULL);
    enum { K = 4 };
    struct cl *c[K];
    for (int i = 0; i < K; i++)
        c[i] = cl_new(); /* the client's descriptors exist before the limit drops */
    int lowest = dup(0);
    cr_assert_geq(lowest, 0);
    close(lowest);
    struct rlimit old, low;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)lowest + K - 1; /* room for K - 1 accepted connections */
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int i = 0; i < K - 1; i++) {
        cl_connect(c[i]);
        cl_fast(c[i]);
        sleep_ms(20);
    }
    cl_connect(c[K - 1]);
    cl_fast(c[K - 1]);
    cr_assert(cl_eof(c[0]), "the longest idle connection must make room");
    cl_fast(c[1]);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    for (int i = 0; i < K; i++)
        cl_close(c[i]);
    srv_stop();
}

/* The head's deadline runs from its first byte (here: the accept) and a byte now and
 * then does not move it: a head dripping faster than the deadline is still cut, 408. */
Test(http, header_deadline_does_not_restart_per_byte)
{
    struct http_config cfg = {.header_timeout_sec = 1};
    start(&cfg);
    struct cl *c = cl_open();
    const char *head = "GET /fast HTTP/1.1\r\nHost: t\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    size_t sent = cl_drip(c, head, 100);
    cr_assert_lt(sent, strlen(head), "the whole head went out: it was never cut");
    struct resp r;
    cr_assert(cl_resp(c, &r, false), "no 408");
    assert_error(&r, 408, "request_timeout", "headers");
    char v[16];
    cr_assert(hdr_get(r.head, "Connection", v, sizeof v) && strcmp(v, "close") == 0);
    resp_free(&r);
    cr_assert(cl_eof_within_6s(c));
    cl_close(c);
    /* a connection that never sends a byte is closed quietly */
    c = cl_open();
    cr_assert(cl_eof_within_6s(c), "a silent connection must be closed, without a reply");
    cl_close(c);
    cr_assert_eq(ld(&g.handled), 0);
    cr_assert_eq(srv_conns(), 0);
    srv_stop();
}

/* Between requests a keep-alive connection has the idle timeout, not the head's; the
 * next head's deadline starts at its first byte; an idle one is closed quietly. */
Test(http, keep_alive_idle_deadline)
{
    struct http_config cfg = {.header_timeout_sec = 1, .idle_timeout_sec = 3};
    start(&cfg);
    struct cl *c = cl_open();
    cl_fast(c);
    sleep_ms(1500); /* past the head deadline, within the idle one */
    cl_fast(c);
    cr_assert(cl_eof_within_6s(c), "an idle keep-alive connection must be closed, quietly");
    cl_close(c);
    srv_stop();
}

/* A body must average body_min_rate after its grace: a trickle is cut with 408, a body
 * that takes longer than the grace at a good rate is not. */
Test(http, body_deadline_is_a_minimum_rate)
{
    struct http_config cfg = {.body_timeout_sec = 1, .body_min_rate = 1000};
    start(&cfg);
    struct cl *c = cl_open();
    cl_send(c, "POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n");
    char body[101];
    memset(body, 'x', 100);
    body[100] = '\0';
    size_t sent = cl_drip(c, body, 100);
    cr_assert_lt(sent, 100u, "the whole body went out: it was never cut");
    struct resp r;
    cr_assert(cl_resp(c, &r, false), "no 408");
    assert_error(&r, 408, "request_timeout", "body");
    resp_free(&r);
    cl_close(c);
    cr_assert_eq(ld(&g.handled), 0);
    /* 4000 bytes at about 2000 bytes/s: longer than the grace, faster than the rate */
    c = cl_open();
    cl_send(c, "POST /fast HTTP/1.1\r\nHost: t\r\nContent-Length: 4000\r\n\r\n");
    char chunk[200];
    memset(chunk, 'y', sizeof chunk);
    for (int i = 0; i < 20; i++) {
        cl_sendn(c, chunk, sizeof chunk);
        sleep_ms(100);
    }
    cr_assert(cl_resp(c, &r, false), "no reply");
    cr_assert_eq(r.status, 200, "%s%s", r.head, r.body);
    resp_free(&r);
    cl_close(c);
    srv_stop();
}

/* Once a request is complete its handler owns the time: a long-poll, an SSE stream and
 * an upgraded connection all outlive every deadline. */
Test(http, served_requests_outlive_the_deadlines)
{
    struct http_config cfg = {.header_timeout_sec = 1, .idle_timeout_sec = 1,
                              .body_timeout_sec = 1};
    start(&cfg);
    struct cl *poll_c = cl_open();
    cl_send(poll_c, GET("/hang"));
    struct cl *sse = cl_open();
    cl_send(sse, GET("/sse-keep"));
    cr_assert(wait_for(&g.handled, 2));
    struct cl *up = cl_open();
    cl_send(up, "GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n");
    cl_switch(up);
    sleep_ms(2500);
    cr_assert_eq(ld(&g.closes), 0, "a kept request was cut");
    cr_assert_eq(srv_conns(), 2);
    cl_send(up, "still here");
    cl_expect(up, "still here");
    cl_close(poll_c);
    cl_close(sse);
    cl_close(up);
    cr_assert(wait_for(&g.closes, 2));
    srv_stop();
}

/* gunzip a whole reply body (the test side of Content-Encoding: gzip) */
static char *gunzip(const char *data, size_t len, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(inflateInit2(&z, 31), Z_OK);
    size_t cap = 1u << 20;
    char *out = malloc(cap);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(inflate(&z, Z_FINISH), Z_STREAM_END);
    *out_len = z.total_out;
    inflateEnd(&z);
    return out;
}

Test(http, gzip_when_accepted)
{
    cr_assert(gzip_accepted("gzip"));
    cr_assert(gzip_accepted("deflate, gzip;q=0.8, br"));
    cr_assert(gzip_accepted("GZIP"));
    cr_assert(gzip_accepted("*"));
    cr_assert(gzip_accepted("x-gzip"));
    cr_assert_not(gzip_accepted(NULL));
    cr_assert_not(gzip_accepted(""));
    cr_assert_not(gzip_accepted("identity"));
    cr_assert_not(gzip_accepted("gzip;q=0"));
    cr_assert_not(gzip_accepted("gzip ; q=0.0, deflate"));
    cr_assert_not(gzip_accepted("*, gzip;q=0"));
    cr_assert_not(gzip_accepted("gzipx, xgzip"));
    cr_assert(gzip_type_ok("application/json"));
    cr_assert(gzip_type_ok("text/html; charset=utf-8"));
    cr_assert_not(gzip_type_ok("application/octet-stream"));
    cr_assert_not(gzip_type_ok("image/png"));

    start(NULL);
    /* a JSON body well past GZIP_MIN_BYTES, echoed back */
    size_t n = 20000;
    char *json = malloc(n + 5);
    memcpy(json, "[\"", 2);
    for (size_t i = 2; i < n + 2; i++) json[i] = (char)('a' + i % 7);
    memcpy(json + n + 2, "\"]", 3);
    char req[32768];
    const char *encodings[] = {"gzip, deflate", NULL, "gzip;q=0"};
    for (int k = 0; k < 3; k++) {
        char ae[64] = "";
        if (encodings[k]) snprintf(ae, sizeof ae, "Accept-Encoding: %s\r\n", encodings[k]);
        snprintf(req, sizeof req,
                 "POST /echo HTTP/1.1\r\nHost: t\r\n%sContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n%s",
                 ae, n + 4, json);
        struct resp r;
        roundtrip(req, &r);
        cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
        char v[64];
        cr_assert(hdr_get(r.head, "Vary", v, sizeof v), "%s", r.head);
        cr_assert_str_eq(v, "Accept-Encoding");
        if (k == 0) {
            cr_assert(hdr_get(r.head, "Content-Encoding", v, sizeof v), "%s", r.head);
            cr_assert_str_eq(v, "gzip");
            cr_assert_lt(r.body_len, n / 10, "20 KB of 7 letters repeating should shrink: %zu", r.body_len);
            size_t plain_len;
            char *plain = gunzip(r.body, r.body_len, &plain_len);
            cr_assert_eq(plain_len, n + 4);
            cr_assert(memcmp(plain, json, n + 4) == 0);
            free(plain);
        } else {
            cr_assert_not(hdr_get(r.head, "Content-Encoding", v, sizeof v), "%s", r.head);
            cr_assert_eq(r.body_len, n + 4);
        }
        resp_free(&r);
    }
    free(json);

    /* small replies and binary ones go out as they are */
    struct resp r;
    char v[64];
    roundtrip("GET /v0/items/a/steps/1 HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_not(hdr_get(r.head, "Content-Encoding", v, sizeof v), "%s", r.head);
    resp_free(&r);
    roundtrip("GET /big HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_not(hdr_get(r.head, "Content-Encoding", v, sizeof v), "%s", r.head);
    cr_assert_eq(r.body_len, 2u << 20);
    resp_free(&r);
    srv_stop();
}

Test(http, cors_for_the_named_origins_only)
{
    srv_start(NULL);
    add_routes();
    const char *origins[] = {"http://127.0.0.1:8080", "http://localhost:8080"};
    http_set_cors_origins(g.http, origins, 2);
    srv_run();
    struct resp r;
    char v[128];
    /* a preflight of a named origin is answered before the filter (it carries no token) */
    roundtrip("OPTIONS /private/x HTTP/1.1\r\nHost: t\r\nOrigin: http://localhost:8080\r\n"
              "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: authorization\r\n\r\n", &r);
    cr_assert_eq(r.status, 204, "%s", r.head);
    cr_assert(hdr_get(r.head, "Access-Control-Allow-Origin", v, sizeof v));
    cr_assert_str_eq(v, "http://localhost:8080");
    cr_assert(hdr_get(r.head, "Access-Control-Allow-Headers", v, sizeof v));
    cr_assert(strstr(v, "Authorization"));
    resp_free(&r);
    /* its real request: the filter still runs, the reply carries the header */
    roundtrip("GET /private/x HTTP/1.1\r\nHost: t\r\nOrigin: http://127.0.0.1:8080\r\n\r\n", &r);
    cr_assert_eq(r.status, 401);
    cr_assert(hdr_get(r.head, "Access-Control-Allow-Origin", v, sizeof v));
    cr_assert_str_eq(v, "http://127.0.0.1:8080");
    resp_free(&r);
    /* any other origin (or a near miss): no CORS at all */
    const char *others[] = {"http://evil.example", "http://127.0.0.1:8081", "http://127.0.0.1:8080.evil", "null"};
    for (int i = 0; i < 4; i++) {
        char req[256];
        snprintf(req, sizeof req, "OPTIONS /private/x HTTP/1.1\r\nHost: t\r\nOrigin: %s\r\n"
                                  "Access-Control-Request-Method: GET\r\n\r\n", others[i]);
        roundtrip(req, &r);
        cr_assert_neq(r.status, 204, "%s", others[i]);
        cr_assert_not(hdr_get(r.head, "Access-Control-Allow-Origin", v, sizeof v), "%s", others[i]);
        resp_free(&r);
    }
    srv_stop();
}
