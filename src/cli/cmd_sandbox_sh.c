/*
 * cmd_sandbox_sh.c - `rebuno sandbox sh NAME [-- CMD ARGS...]` (see sandbox_sh.h).
 *
 * Two steps, as the API has them: POST /v1/sandboxes/NAME/ptys (libcurl, through
 * cli/client.h) creates the terminal with this terminal's size and $TERM; then a
 * plain TCP socket does the WebSocket handshake (random Sec-WebSocket-Key, the
 * Sec-WebSocket-Accept checked) for GET .../ptys/ID/ws, and wslay's client context
 * runs the protocol in one poll() loop: stdin -> binary frames, binary frames ->
 * stdout, SIGWINCH -> a resize message (through a self-pipe), the server's exit
 * message -> this process's exit status.
 *
 * The local terminal is put in raw mode only once the handshake succeeded, and is
 * restored on every way out: normal return, errors, and fatal signals (the handler
 * restores, then re-raises with the default action). SIGTSTP from outside restores
 * too and re-enters raw mode on SIGCONT. In raw mode ^C and ^Z are just bytes for
 * the remote terminal, as over ssh.
 */
#include "cli/sandbox_sh.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "net/ws.h"

#define HANDSHAKE_MAX (16u * 1024)  /* bytes of the server's reply head */
#define ERROR_BODY_MAX (64u * 1024) /* bytes of a refusal's JSON body */
#define HANDSHAKE_TIMEOUT_MS 10000
#define STDIN_CHUNK 16384
#define QUEUE_MAX (1u << 20) /* input queued for the server before stdin is not read */
#define MSG_MAX (4u << 20)   /* largest message accepted from the server */

/* ------------------------------------------------------------------ the local terminal */

static struct termios saved_tio;
static volatile sig_atomic_t raw_on;
static int winch_pipe[2] = {-1, -1};

/* Whether this process group owns the terminal. When it does not (a job-control shell
 * took the terminal back), the shell restores its own modes, and a tcsetattr() from
 * here would only stop this process with SIGTTOU. Async-signal-safe. */
static bool foreground(void)
{
    return tcgetpgrp(STDIN_FILENO) == getpgrp();
}

static void raw_restore(void)
{
    if (raw_on) {
        if (foreground()) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_tio);
        raw_on = 0;
    }
}

static void raw_enter(void)
{
    struct termios t = saved_tio;
    cfmakeraw(&t);
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0) raw_on = 1;
}

static void on_fatal(int sig)
{
    if (raw_on && foreground()) tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio); /* signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_winch(int sig);

/* An outside SIGTSTP: give the terminal back, stop, and take it again on SIGCONT (then
 * the window may have changed: resend its size). Only async-signal-safe calls. */
static void on_tstp(int sig)
{
    int e = errno;
    int was = raw_on;
    if (was && foreground()) tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
    struct sigaction dfl, mine;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTSTP, &dfl, &mine);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTSTP);
    sigprocmask(SIG_UNBLOCK, &set, NULL); /* it is blocked while its handler runs */
    raise(SIGTSTP);                       /* stops here until SIGCONT */
    sigprocmask(SIG_BLOCK, &set, NULL);
    sigaction(SIGTSTP, &mine, NULL);
    if (was) { /* continued in the background (bg), this waits (SIGTTOU) for fg */
        struct termios t = saved_tio;
        cfmakeraw(&t);
        tcsetattr(STDIN_FILENO, TCSANOW, &t);
    }
    on_winch(SIGWINCH);
    errno = e;
}

static void on_winch(int sig)
{
    int e = errno;
    if (winch_pipe[1] >= 0 && write(winch_pipe[1], "w", 1) < 0) {
    }
    errno = e;
}

static const int fatal_sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGABRT, SIGSEGV, SIGBUS};

static void handlers_install(bool tty)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < ARRAY_LEN(fatal_sigs); i++)
        sigaction(fatal_sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!tty) return;
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    sa.sa_handler = on_tstp;
    sigaction(SIGTSTP, &sa, NULL);
}

static void handlers_remove(void)
{
    for (size_t i = 0; i < ARRAY_LEN(fatal_sigs); i++)
        signal(fatal_sigs[i], SIG_DFL);
    signal(SIGWINCH, SIG_DFL);
    signal(SIGTSTP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
}

static void window_size(int *cols, int *rows)
{
    struct winsize w;
    *cols = 80;
    *rows = 24;
    if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &w) == 0 || ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0) &&
        w.ws_col > 0 && w.ws_row > 0) {
        *cols = w.ws_col > 1000 ? 1000 : w.ws_col;
        *rows = w.ws_row > 1000 ? 1000 : w.ws_row;
    }
}

/* ------------------------------------------------------------------ URL and handshake */

int sbx_cli_split_url(const char *url, char *host, size_t hn, char *port, size_t pn, char *prefix,
                      size_t xn)
{
    if (strncmp(url, "http://", 7) != 0) return -1;
    const char *h = url + 7, *end;
    size_t hl;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end) return -1;
        hl = (size_t)(end - h - 1);
        h++;
        end++;
    } else {
        end = h + strcspn(h, ":/");
        hl = (size_t)(end - h);
    }
    if (hl == 0 || hl >= hn) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    const char *pe = end;
    if (*end == ':') {
        pe = end + 1 + strcspn(end + 1, "/");
        size_t pl = (size_t)(pe - end - 1);
        if (pl == 0 || pl >= pn || strspn(end + 1, "0123456789") < pl) return -1;
        memcpy(port, end + 1, pl);
        port[pl] = '\0';
    } else if (*end == '/' || *end == '\0') {
        snprintf(port, pn, "80");
    } else {
        return -1;
    }
    size_t xl = strlen(pe);
    while (xl > 0 && pe[xl - 1] == '/')
        xl--;
    if (xl >= xn) return -1;
    memcpy(prefix, pe, xl);
    prefix[xl] = '\0';
    return 0;
}

static int dial(const char *host, const char *port, struct err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return err_set(err, 0, "unreachable", "", "cannot resolve %s: %s", host, gai_strerror(rc));
    int fd = -1, e = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return err_set(err, 0, "unreachable", "", "cannot connect to %s:%s: %s", host, port,
                       strerror(e));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Read from fd into b until it holds "\r\n\r\n" (the head ends at *head_len) or the
 * time is up. 0 or -1. */
static int read_head(int fd, struct buf *b, size_t *head_len, int64_t timeout_ms)
{
    for (;;) {
        char *end = b->data ? strstr(b->data, "\r\n\r\n") : NULL;
        if (end) {
            *head_len = (size_t)(end - b->data) + 4;
            return 0;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        int pr = poll(&pf, 1, (int)timeout_ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return -1;
        char chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || buf_append(b, chunk, (size_t)n) < 0) return -1;
    }
}

/* A refusal (not 101): take sandboxd's JSON error from the body when there is one. */
static void refusal(int fd, struct buf *b, size_t head_len, struct err *err)
{
    const char *cl = strcasestr(b->data, "\r\nContent-Length:");
    size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
    if (want > ERROR_BODY_MAX) want = ERROR_BODY_MAX;
    while (b->len - head_len < want) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 2000) <= 0) break;
        char chunk[4096];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0 || buf_append(b, chunk, (size_t)n) < 0) break;
    }
    json_t *j = json_loadb(b->data + head_len, b->len - head_len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *code = json_string_value(json_object_get(e, "code"));
    if (msg) err_set(err, err->status, code ? code : "http_error", "", "%s", msg);
    json_decref(j);
}

/* ------------------------------------------------------------------ the session */

struct sh {
    int sock;
    const char *pre; /* bytes that came after the handshake's head */
    size_t pre_len, pre_off;
    bool got_exit, eof, out_broken;
    int code;
    char signal[16];
};

static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *b, size_t len, int flags, void *user)
{
    struct sh *sh = user;
    if (sh->pre_off < sh->pre_len) {
        size_t n = sh->pre_len - sh->pre_off;
        if (n > len) n = len;
        memcpy(b, sh->pre + sh->pre_off, n);
        sh->pre_off += n;
        return (ssize_t)n;
    }
    ssize_t n;
    while ((n = recv(sh->sock, b, len, MSG_DONTWAIT)) < 0 && errno == EINTR) {
    }
    if (n > 0) return n;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    } else {
        sh->eof = true;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    }
    return -1;
}

static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *d, size_t len, int flags,
                       void *user)
{
    struct sh *sh = user;
    ssize_t n;
    while ((n = send(sh->sock, d, len, MSG_DONTWAIT | MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (n >= 0) return n;
    wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK
                                   ? WSLAY_ERR_WOULDBLOCK
                                   : WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
}

static int genmask_cb(wslay_event_context_ptr ctx, uint8_t *b, size_t len, void *user)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(b + got, len - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

static void write_all(struct sh *sh, int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0 && !sh->out_broken) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            sh->out_broken = true; /* stdout is gone; the session goes on */
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static void msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a,
                   void *user)
{
    struct sh *sh = user;
    if (a->opcode == WSLAY_BINARY_FRAME) {
        write_all(sh, STDOUT_FILENO, a->msg, a->msg_length);
        return;
    }
    if (a->opcode != WSLAY_TEXT_FRAME) return;
    json_t *j = json_loadb((const char *)a->msg, a->msg_length, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (type && !strcmp(type, "exit")) {
        json_t *c = json_object_get(j, "code");
        const char *sig = json_string_value(json_object_get(j, "signal"));
        sh->got_exit = true;
        sh->code = json_is_integer(c) ? (int)json_integer_value(c) : 1;
        snprintf(sh->signal, sizeof sh->signal, "%s", sig ? sig : "");
    } else if (type && !strcmp(type, "error")) {
        const char *m = json_string_value(json_object_get(j, "message"));
        char line[600];
        int n = snprintf(line, sizeof line, "\r\n[rebuno: %s]\r\n", m ? m : "error");
        if (n > 0)
            write_all(sh, STDERR_FILENO, line,
                      (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    json_decref(j);
}

static void queue_msg(wslay_event_context_ptr ctx, uint8_t op, const void *p, size_t n)
{
    struct wslay_event_msg m = {op, p, n};
    wslay_event_queue_msg(ctx, &m);
}

static void queue_resize(wslay_event_context_ptr ctx)
{
    int cols, rows;
    window_size(&cols, &rows);
    char m[80];
    int n = snprintf(m, sizeof m, "{\"type\":\"resize\",\"cols\":%d,\"rows\":%d}", cols, rows);
    queue_msg(ctx, WSLAY_TEXT_FRAME, m, (size_t)n);
}

/* The poll loop: until both directions are closed or the connection breaks. */
static void relay(struct sh *sh, wslay_event_context_ptr ctx, bool tty)
{
    bool stdin_open = true;
    char b[STDIN_CHUNK];
    if (wslay_event_recv(ctx) != 0) return; /* bytes that came with the handshake */
    for (;;) {
        int wr = wslay_event_want_read(ctx), ww = wslay_event_want_write(ctx);
        if (!wr && !ww) return;
        bool take_stdin =
            stdin_open && !sh->got_exit && wslay_event_get_queued_msg_length(ctx) < QUEUE_MAX;
        struct pollfd pf[3] = {
            {sh->sock, (short)((wr ? POLLIN : 0) | (ww ? POLLOUT : 0)), 0},
            {take_stdin ? STDIN_FILENO : -1, POLLIN, 0},
            {tty ? winch_pipe[0] : -1, POLLIN, 0},
        };
        if (poll(pf, 3, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (pf[2].revents) {
            while (read(winch_pipe[0], b, sizeof b) > 0) {
            }
            queue_resize(ctx);
        }
        if (pf[1].revents) {
            ssize_t n = read(STDIN_FILENO, b, sizeof b);
            if (n > 0) {
                queue_msg(ctx, WSLAY_BINARY_FRAME, b, (size_t)n);
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                stdin_open = false;
                queue_msg(ctx, WSLAY_BINARY_FRAME, "\x04", 1); /* EOF, as ^D on a terminal */
            }
        }
        if ((pf[0].revents & (POLLIN | POLLHUP | POLLERR)) && wslay_event_recv(ctx) != 0) return;
        if (wslay_event_want_write(ctx) && wslay_event_send(ctx) != 0) return;
    }
}

static json_t *create_body(const struct sbx_sh_opts *o)
{
    json_t *body = json_object();
    if (o->ncmd > 0) {
        json_object_set_new(body, "cmd", json_string(o->cmd[0]));
        json_t *args = json_array();
        for (int i = 1; i < o->ncmd; i++)
            json_array_append_new(args, json_string(o->cmd[i]));
        json_object_set_new(body, "args", args);
    }
    if (o->user) json_object_set_new(body, "user", json_string(o->user));
    if (o->cwd) json_object_set_new(body, "cwd", json_string(o->cwd));
    if (o->sudo) json_object_set_new(body, "sudo", json_true());
    if (o->env && json_object_size(o->env)) json_object_set(body, "env", o->env);
    int cols, rows;
    window_size(&cols, &rows);
    json_object_set_new(body, "cols", json_integer(cols));
    json_object_set_new(body, "rows", json_integer(rows));
    const char *term = getenv("TERM");
    size_t tl = term ? strlen(term) : 0;
    if (tl > 0 && tl <= 64 &&
        strspn(term, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") == tl)
        json_object_set_new(body, "term", json_string(term));
    return body;
}

int sbx_cli_sh(struct client *c, const struct sbx_sh_opts *o, struct err *err)
{
    char host[256], port[16], prefix[512];
    if (sbx_cli_split_url(c->url, host, sizeof host, port, sizeof port, prefix, sizeof prefix) < 0)
        return err_set(err, 0, "bad_url", "", "sandbox sh needs an http:// URL, got %s", c->url), 1;
    /* 1. create the terminal */
    char *ename = client_escape(c, o->name);
    char *path = xasprintf("/v1/sandboxes/%s/ptys", ename);
    json_t *body = create_body(o), *pty = NULL;
    int rc = client_request(c, "POST", path, body, NULL, &pty, err);
    json_decref(body);
    free(path);
    if (rc < 0) {
        free(ename);
        return 1;
    }
    char *eid = client_escape(c, json_string_value(json_object_get(pty, "id")) ?: "");
    json_decref(pty);
    /* 2. attach */
    int ret = 1;
    struct buf resp;
    buf_init(&resp, HANDSHAKE_MAX + ERROR_BODY_MAX);
    int fd = dial(host, port, err);
    char key[WS_KEY_LEN + 1];
    ws_client_key(key);
    if (fd >= 0) {
        /* the key passed the client's checks in the request above */
        char *auth = c->api_key ? xasprintf("Authorization: Bearer %s\r\n", c->api_key) : xstrdup("");
        char *req = xasprintf("GET %s/v1/sandboxes/%s/ptys/%s/ws HTTP/1.1\r\nHost: %s:%s\r\n"
                              "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                              "%sUser-Agent: rebuno-cli\r\n\r\n",
                              prefix, ename, eid, host, port, key, auth);
        free(auth);
        size_t n = strlen(req), off = 0;
        while (off < n) {
            ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            off += (size_t)w;
        }
        free(req);
        size_t head_len = 0;
        if (off < n || read_head(fd, &resp, &head_len, HANDSHAKE_TIMEOUT_MS) < 0) {
            err_set(err, 0, "unreachable", "", "sandboxd did not answer the terminal's handshake");
        } else if (ws_client_check_reply(resp.data, head_len, key, err) < 0) {
            if (err->status) refusal(fd, &resp, head_len, err);
        } else {
            ret = 0;
            struct sh sh = {
                .sock = fd, .pre = resp.data + head_len, .pre_len = resp.len - head_len};
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
            static const struct wslay_event_callbacks cbs = {.recv_callback = recv_cb,
                                                             .send_callback = send_cb,
                                                             .genmask_callback = genmask_cb,
                                                             .on_msg_recv_callback = msg_cb};
            wslay_event_context_ptr ctx;
            if (wslay_event_context_client_init(&ctx, &cbs, &sh) != 0) {
                fprintf(stderr, "fatal: out of memory\n");
                abort();
            }
            wslay_event_config_set_max_recv_msg_length(ctx, MSG_MAX);
            bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tio) == 0;
            if (tty && pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) < 0) tty = false;
            handlers_install(tty);
            if (tty) raw_enter();
            relay(&sh, ctx, tty);
            raw_restore();
            handlers_remove();
            if (winch_pipe[0] >= 0) {
                close(winch_pipe[0]);
                close(winch_pipe[1]);
                winch_pipe[0] = winch_pipe[1] = -1;
            }
            wslay_event_context_free(ctx);
            if (sh.got_exit) {
                ret = sh.code < 0 ? 1 : sh.code > 255 ? 255 : sh.code;
            } else {
                err_set(err, 0, "connection_lost", "",
                        "the connection to sandboxd ended before the terminal's exit status");
                ret = 1;
            }
        }
        close(fd);
    }
    buf_fini(&resp);
    free(ename);
    free(eid);
    return ret;
}
