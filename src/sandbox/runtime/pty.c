/*
 * pty.c - interactive terminals in sandboxes (see pty.h, docs/sandbox-api.md).
 *
 * A terminal starts like a command, through the sandbox's init, but as SPAWN_PTY:
 * init opens the pty pair in the sandbox's own devpts and sends back the master
 * with SPAWNED (SCM_RIGHTS). The daemon checks it is a pty master and from then on
 * reads and writes it directly; resize is TIOCSWINSZ (the kernel sends SIGWINCH),
 * a signal message is TIOCSIG (the terminal's foreground process group, like ^C).
 *
 * One client attaches, over a WebSocket (net/ws.h): binary frames carry terminal
 * bytes both ways, text frames JSON control messages; the last server message is
 * {"type":"exit",...} before a normal close. Back-pressure both ways: output is
 * read from the master only while less than SBX_PTY_OUT_HIGH waits for the client
 * (otherwise the kernel's pty buffer fills and the program blocks), and client
 * input waiting for the terminal is capped at SBX_PTY_IN_MAX (then the client is
 * not read, and TCP holds it back).
 *
 * Lifetime: a terminal lives until its exit has been delivered or nobody can get it
 * any more. A client that leaves before the exit hangs the terminal up: the master
 * is closed, the session gets SIGHUP and, SBX_PTY_KILL_GRACE_MS later, SIGKILL. So
 * does a terminal nobody attaches to within SBX_PTY_ATTACH_TIMEOUT_MS. The end of
 * the sandbox's session ends every terminal (exit 137, KILL). A terminal whose
 * sandbox is freed while its client is still being closed lives on, detached, until
 * that close completes.
 */
#include "sandbox/runtime/pty.h"

#include <errno.h>
#include <event2/buffer.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "net/ws.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"

enum pty_status { PTY_STARTING, PTY_RUNNING, PTY_EXITED, PTY_FAILED };
enum pty_timer { T_NONE, T_ATTACH, T_GRACE, T_KILL };

struct sbx_pty {
    struct sbx *sbx; /* NULL once detached from a freed sandbox */
    struct sbx_pty *prev, *next;
    char id[40];
    uint64_t num; /* id on the wire to init */
    char session_id[48];
    json_t *argv;
    char cwd[SBX_PATH_MAX + 1];
    char user[SBX_USER_NAME_MAX + 1];
    char term[SBX_PTY_TERM_MAX + 1];
    bool sudo;
    int cols, rows;
    enum pty_status status;
    int pid, exit_code, term_signal;
    struct err error; /* why it failed to start */
    bool exited;      /* the process's exit is known */
    bool eof;         /* the master read EIO: nothing holds the terminal any more */
    bool hung_up;     /* the client left (or DELETE, or nobody attached) */
    bool attached;    /* a client attached (a terminal takes one, once) */
    bool exit_sent;   /* the exit message is queued to the client */
    bool rd_paused;   /* reading the master waits for the client to drain */
    int master;
    struct event *rd_ev, *wr_ev, *timer;
    enum pty_timer timer_kind;
    struct evbuffer *in_q; /* client input waiting for the terminal */
    struct ws_conn *ws;
    struct http_req *create_req; /* the POST waiting for SPAWNED */
    int64_t started_at, ended_at;
    /* opened by a front-end (sbx_pty_open) rather than /v1: its client comes and goes
     * without hanging the terminal up, and gets output and the exit through cl */
    bool external;
    const struct sbx_pty_client *cl;
    void *cl_arg;
};

static void maybe_free(struct sbx_pty *p);
static void hang_up(struct sbx_pty *p);

/* ------------------------------------------------------------------ pure pieces */

int sbx_pty_parse_ctl(const char *p, size_t n, struct sbx_pty_ctl *out, struct err *err)
{
    memset(out, 0, sizeof *out);
    if (n > SBX_PTY_CTL_MAX)
        return err_invalid(err, "", "a control message is at most %d bytes", SBX_PTY_CTL_MAX);
    json_error_t je;
    json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return err_invalid(err, "", "a control message is a JSON object with a \"type\"");
    }
    const char *type = json_string_value(json_object_get(j, "type"));
    int rc = 0;
    if (type && !strcmp(type, "resize")) {
        static const char *const known[] = {"type", "cols", "rows", NULL};
        json_t *c = json_object_get(j, "cols"), *r = json_object_get(j, "rows");
        if (sbx_json_known(j, known, "a resize message", err) < 0)
            rc = -1;
        else if (!json_is_integer(c) || json_integer_value(c) < 1 ||
                 json_integer_value(c) > SBX_PTY_DIM_MAX)
            rc = err_invalid(err, "cols", "cols must be an integer from 1 to %d", SBX_PTY_DIM_MAX);
        else if (!json_is_integer(r) || json_integer_value(r) < 1 ||
                 json_integer_value(r) > SBX_PTY_DIM_MAX)
            rc = err_invalid(err, "rows", "rows must be an integer from 1 to %d", SBX_PTY_DIM_MAX);
        else {
            out->type = SBX_PTY_CTL_RESIZE;
            out->cols = (int)json_integer_value(c);
            out->rows = (int)json_integer_value(r);
        }
    } else if (type && !strcmp(type, "signal")) {
        static const char *const known[] = {"type", "signal", NULL};
        json_t *sv = json_object_get(j, "signal");
        int sig = 0;
        if (json_is_integer(sv) && json_integer_value(sv) > 0 && json_integer_value(sv) < 65)
            sig = (int)json_integer_value(sv);
        else if (json_is_string(sv))
            sig = sbx_signal_parse(json_string_value(sv));
        if (sbx_json_known(j, known, "a signal message", err) < 0)
            rc = -1;
        else if (sig <= 0)
            rc = err_invalid(err, "signal", "signal must be a name like \"INT\" or a number 1-64");
        else {
            out->type = SBX_PTY_CTL_SIGNAL;
            out->signal = sig;
        }
    } else {
        rc = err_invalid(err, "type", "type must be \"resize\" or \"signal\"");
    }
    json_decref(j);
    return rc;
}

char *sbx_pty_exit_msg(int code, int signal)
{
    const char *name = signal ? sbx_signal_name(signal) : NULL;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("exit"));
    json_object_set_new(o, "code", json_integer(code));
    json_object_set_new(o, "signal", name ? json_string(name) : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    ASSERT(s);
    return s;
}

/* ------------------------------------------------------------------ bookkeeping */

static struct sbx_pty *find_num(struct sbx *s, uint64_t num)
{
    for (struct sbx_pty *p = s->ptys; p; p = p->next)
        if (p->num == num) return p;
    return NULL;
}

static struct sbx_pty *find_id(struct sbx *s, const char *id)
{
    for (struct sbx_pty *p = s->ptys; p; p = p->next)
        if (id && !strcmp(p->id, id)) return p;
    return NULL;
}

static void unlink_pty(struct sbx_pty *p)
{
    struct sbx *s = p->sbx;
    if (!s) return;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->ptys = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL;
    s->nptys--;
    p->sbx = NULL;
}

static void close_master(struct sbx_pty *p)
{
    if (p->rd_ev) event_free(p->rd_ev);
    if (p->wr_ev) event_free(p->wr_ev);
    p->rd_ev = p->wr_ev = NULL;
    if (p->master >= 0) close(p->master);
    p->master = -1;
    evbuffer_drain(p->in_q, evbuffer_get_length(p->in_q));
}

static void pty_free(struct sbx_pty *p)
{
    unlink_pty(p);
    close_master(p);
    if (p->timer) event_free(p->timer);
    if (p->ws) ws_free(p->ws);
    evbuffer_free(p->in_q);
    json_decref(p->argv);
    free(p);
}

static bool finished(const struct sbx_pty *p)
{
    return p->status == PTY_FAILED || (p->exited && (p->exit_sent || p->hung_up));
}

/* Free p once nothing can still reach it. */
static void maybe_free(struct sbx_pty *p)
{
    if (!p->ws && !p->create_req && finished(p)) pty_free(p);
}

static void on_timer(evutil_socket_t fd, short what, void *arg);

static void arm(struct sbx_pty *p, enum pty_timer kind, int ms)
{
    if (!p->timer) {
        if (!p->sbx) return;
        p->timer = evtimer_new(p->sbx->d->base, on_timer, p);
    }
    p->timer_kind = kind;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(p->timer, &tv);
}

static void disarm(struct sbx_pty *p)
{
    if (p->timer) evtimer_del(p->timer);
    p->timer_kind = T_NONE;
}

static bool has_client(const struct sbx_pty *p)
{
    return p->ws || p->cl;
}

static size_t client_pending(const struct sbx_pty *p)
{
    return p->ws ? ws_pending(p->ws) : p->cl->pending(p->cl_arg);
}

/* Signal the terminal's process (scope: enum sbx_signal_scope) through init. */
static void signal_via_init(struct sbx_pty *p, int sig, int scope)
{
    struct sbx *s = p->sbx;
    if (!s || !s->sess || strcmp(s->sess->id, p->session_id) != 0 || p->exited) return;
    struct buf pkt;
    buf_init(&pkt, 0);
    sbx_msg_encode(&pkt, SBX_MSG_SIGNAL, p->num, sig, scope, NULL, 0);
    if (send(s->sess->proc.ctl, pkt.data, pkt.len, MSG_NOSIGNAL) < 0)
        log_warn("cannot signal terminal", "sandbox=%s pty=%s error=\"%s\"", s->id, p->id,
                 strerror(errno));
    buf_fini(&pkt);
}

/* ------------------------------------------------------------------ output */

static void read_master(struct sbx_pty *p, size_t budget, bool ignore_high);

/* The process is gone (and the terminal drained, or the grace ran out): hand the
 * client what is left, then the exit, then close. */
static void finish(struct sbx_pty *p)
{
    if (p->exit_sent) return;
    if (has_client(p) && p->master >= 0) read_master(p, SBX_PTY_OUT_HIGH, true);
    close_master(p);
    disarm(p);
    p->status = PTY_EXITED;
    p->ended_at = clock_now_ms();
    if (p->ws) {
        char *m = sbx_pty_exit_msg(p->exit_code, p->term_signal);
        ws_send_text(p->ws, m, strlen(m));
        free(m);
        ws_close(p->ws, 1000, "exited");
        p->exit_sent = true;
    } else if (p->external) { /* told now, or never (no client) */
        const struct sbx_pty_client *cl = p->cl;
        p->cl = NULL;
        p->exit_sent = true;
        if (cl) cl->exit(p->cl_arg, p->exit_code, p->term_signal);
    }
}

/* Read the master into the client: at most budget bytes, and (unless ignore_high)
 * only while the client's queue is under SBX_PTY_OUT_HIGH. */
static void read_master(struct sbx_pty *p, size_t budget, bool ignore_high)
{
    char b[SBX_PTY_READ_CHUNK];
    while (budget > 0 && p->master >= 0 && has_client(p)) {
        if (!ignore_high && client_pending(p) >= SBX_PTY_OUT_HIGH) {
            if (p->rd_ev) event_del(p->rd_ev); /* on_drain resumes */
            p->rd_paused = true;
            return;
        }
        size_t want = budget < sizeof b ? budget : sizeof b;
        ssize_t n = read(p->master, b, want);
        if (n > 0) {
            if (p->ws)
                ws_send_binary(p->ws, b, (size_t)n);
            else
                p->cl->output(p->cl_arg, b, (size_t)n);
            budget -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        /* EIO: no process holds the terminal any more */
        p->eof = true;
        if (p->rd_ev) event_del(p->rd_ev);
        return;
    }
}

static void on_master_read(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_pty *p = arg;
    if (!has_client(p)) {
        event_del(p->rd_ev);
        return;
    }
    read_master(p, 4 * SBX_PTY_OUT_HIGH, false);
    if (p->eof && p->exited) finish(p);
}

/* ------------------------------------------------------------------ input */

static void on_master_write(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_pty *p = arg;
    while (evbuffer_get_length(p->in_q) > 0) {
        int n = evbuffer_write_atmost(p->in_q, p->master, 65536);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) { /* EIO: the terminal is gone; input has nowhere to go */
            evbuffer_drain(p->in_q, evbuffer_get_length(p->in_q));
            break;
        }
    }
    size_t left = evbuffer_get_length(p->in_q);
    if (left == 0 && p->wr_ev) event_del(p->wr_ev);
    if (left > 0 && p->wr_ev) event_add(p->wr_ev, NULL);
    if (p->ws) ws_pause_reading(p->ws, left >= SBX_PTY_IN_MAX);
    /* a front-end's input that does not fit is dropped past the limit (sbx_pty_write) */
}

/* ------------------------------------------------------------------ the client */

static void send_error(struct ws_conn *ws, const struct err *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "code", json_string(e->code));
    json_object_set_new(o, "message", json_string(e->msg));
    if (e->field[0]) json_object_set_new(o, "field", json_string(e->field));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) ws_send_text(ws, s, strlen(s));
    free(s);
}

static void ws_opened(struct ws_conn *ws, void *arg)
{
    struct sbx_pty *p = arg;
    p->ws = ws;
    if (p->master < 0) { /* cannot happen (the hand-over follows the upgrade at once) */
        ws_close(ws, 1011, "the terminal is gone");
        return;
    }
    event_add(p->rd_ev, NULL);
    if (p->exited) arm(p, T_GRACE, SBX_PTY_EXIT_GRACE_MS);
}

static void ws_binary(struct ws_conn *ws, const uint8_t *d, size_t n, void *arg)
{
    struct sbx_pty *p = arg;
    if (p->master < 0 || n == 0) return;
    evbuffer_add(p->in_q, d, n);
    on_master_write(p->master, EV_WRITE, p);
}

/* Signal the terminal's foreground process group. TIOCSIG does it the way the line
 * discipline does for ^C, but Linux accepts only INT, QUIT and TSTP there; any other
 * signal goes to the group TIOCGPGRP names (in our pid namespace). That group can only
 * be one of the terminal's own session (tcsetpgrp refuses others), so nothing outside
 * the sandbox's terminal can be reached this way. */
static int signal_foreground(int master, int sig)
{
    if (ioctl(master, TIOCSIG, sig) == 0) return 0;
    if (errno != EINVAL) return -1;
    pid_t pgrp;
    if (ioctl(master, TIOCGPGRP, &pgrp) < 0) return -1;
    if (pgrp <= 1) {
        errno = ESRCH;
        return -1;
    }
    return kill(-pgrp, sig);
}

static void ws_text(struct ws_conn *ws, const char *d, size_t n, void *arg)
{
    struct sbx_pty *p = arg;
    struct sbx_pty_ctl c;
    struct err err = ERR_INIT;
    if (sbx_pty_parse_ctl(d, n, &c, &err) < 0) {
        send_error(ws, &err);
        return;
    }
    if (p->master < 0) return; /* over: nothing to resize or signal */
    if (c.type == SBX_PTY_CTL_RESIZE) {
        struct winsize w = {.ws_row = (unsigned short)c.rows, .ws_col = (unsigned short)c.cols};
        if (ioctl(p->master, TIOCSWINSZ, &w) == 0) {
            p->cols = c.cols;
            p->rows = c.rows;
        }
    } else if (signal_foreground(p->master, c.signal) < 0) {
        err_set(&err, 409, "signal_failed", "signal", "cannot signal the terminal: %s",
                strerror(errno));
        send_error(ws, &err);
    }
}

static void ws_drained(struct ws_conn *ws, void *arg)
{
    struct sbx_pty *p = arg;
    if (p->rd_paused && p->rd_ev) {
        p->rd_paused = false;
        event_add(p->rd_ev, NULL);
        on_master_read(p->master, EV_READ, p); /* what is already there */
    }
}

static void ws_closed(void *arg)
{
    struct sbx_pty *p = arg;
    p->ws = NULL;
    if (!p->exit_sent) hang_up(p); /* the client left before the end: end the terminal */
    if (!p->sbx) {
        pty_free(p); /* detached from a freed sandbox: this was all that kept it */
        return;
    }
    maybe_free(p);
}

static const struct ws_handlers pty_ws = {
    .on_open = ws_opened,
    .on_binary = ws_binary,
    .on_text = ws_text,
    .on_drain = ws_drained,
    .on_close = ws_closed,
    .max_msg = SBX_PTY_MSG_MAX,
    .high_water = SBX_PTY_OUT_HIGH,
};

/* ------------------------------------------------------------------ ending */

/* Nobody will read this terminal: close it (the kernel hangs it up), SIGHUP its
 * session, SIGKILL it after a grace if the process is still there. */
static void hang_up(struct sbx_pty *p)
{
    if (p->hung_up) return;
    p->hung_up = true;
    close_master(p);
    if (p->status == PTY_RUNNING && !p->exited) {
        signal_via_init(p, SIGHUP, SBX_SIG_SESSION);
        signal_via_init(p, SIGCONT, SBX_SIG_SESSION);
        arm(p, T_KILL, SBX_PTY_KILL_GRACE_MS);
    } else {
        disarm(p);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_pty *p = arg;
    enum pty_timer k = p->timer_kind;
    p->timer_kind = T_NONE;
    if (k == T_ATTACH && !p->attached) {
        log_info("terminal not attached in time; hanging up", "pty=%s", p->id);
        hang_up(p);
        maybe_free(p);
    } else if (k == T_GRACE && p->exited && has_client(p)) {
        finish(p);
    } else if (k == T_KILL && !p->exited) {
        signal_via_init(p, SIGKILL, SBX_SIG_SESSION);
    }
}

/* ------------------------------------------------------------------ messages from init */

static bool is_pty_master(int fd)
{
    struct stat st;
    unsigned int n;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && ioctl(fd, TIOCGPTN, &n) == 0;
}

static json_t *pty_json(const struct sbx_pty *p);

static void spawn_failed(struct sbx_pty *p, int e, int stage)
{
    p->status = PTY_FAILED;
    const char *prog = json_string_value(json_array_get(p->argv, 0));
    if (stage == SBX_STAGE_EXEC && e == ENOENT)
        err_set(&p->error, 400, "command_not_found", "cmd", "%s: command not found", prog);
    else if (stage == SBX_STAGE_EXEC && e == EACCES)
        err_set(&p->error, 403, "permission_denied", "cmd", "%s: permission denied", prog);
    else if (stage == SBX_STAGE_EXEC)
        err_set(&p->error, 400, "exec_failed", "cmd", "%s: %s", prog, strerror(e));
    else if (stage == SBX_STAGE_CWD)
        err_set(&p->error, 400, "cwd_not_found", "cwd", "cannot enter %s: %s", p->cwd, strerror(e));
    else if (stage == SBX_STAGE_CREDS)
        err_set(&p->error, 500, "spawn_failed", "user", "cannot become user %s: %s", p->user,
                strerror(e));
    else if (stage == SBX_STAGE_PTY)
        err_set(&p->error, 500, "spawn_failed", "", "cannot set up the terminal: %s", strerror(e));
    else
        err_set(&p->error, 500, "spawn_failed", "", "cannot start the terminal: %s", strerror(e));
    if (p->create_req) {
        http_reply_err(p->create_req, &p->error);
        p->create_req = NULL;
    }
    if (p->cl) {
        const struct sbx_pty_client *cl = p->cl;
        p->cl = NULL;
        cl->started(p->cl_arg, p, &p->error);
    }
    maybe_free(p);
}

/* Returns false when p was freed. */
static bool spawned(struct sbx_pty *p, int pid, int fd)
{
    if (p->status != PTY_STARTING) {
        if (fd >= 0) close(fd);
        return true;
    }
    p->pid = pid;
    if (!is_pty_master(fd)) {
        if (fd >= 0) close(fd);
        log_warn("init sent no terminal", "sandbox=%s pty=%s", p->sbx->id, p->id);
        p->status = PTY_RUNNING; /* so the kill reaches it */
        signal_via_init(p, SIGKILL, SBX_SIG_SESSION);
        spawn_failed(p, EBADF, SBX_STAGE_PTY);
        return false;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    p->master = fd;
    p->status = PTY_RUNNING;
    struct event_base *base = p->sbx->d->base;
    p->rd_ev = event_new(base, fd, EV_READ | EV_PERSIST, on_master_read, p);
    p->wr_ev = event_new(base, fd, EV_WRITE, on_master_write, p);
    if (!p->attached) arm(p, T_ATTACH, SBX_PTY_ATTACH_TIMEOUT_MS);
    if (p->create_req) {
        http_reply_json(p->create_req, 201, pty_json(p));
        p->create_req = NULL;
    }
    if (p->cl) {
        event_add(p->rd_ev, NULL);
        p->cl->started(p->cl_arg, p, NULL);
    }
    return true;
}

static void exited(struct sbx_pty *p, int status, bool killed)
{
    if (p->exited) return;
    p->exited = true;
    p->status = PTY_EXITED;
    p->ended_at = clock_now_ms();
    if (killed) {
        p->term_signal = SIGKILL;
        p->exit_code = 128 + SIGKILL;
    } else if (WIFEXITED(status)) {
        p->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        p->term_signal = WTERMSIG(status);
        p->exit_code = 128 + p->term_signal;
    } else {
        p->exit_code = -1;
    }
    if (p->timer_kind == T_KILL) disarm(p);
    if (has_client(p)) {
        if (p->eof || p->master < 0 || killed)
            finish(p);
        else
            arm(p, T_GRACE, SBX_PTY_EXIT_GRACE_MS);
    } else if (p->external) {
        finish(p); /* nobody attached to tell: it is over */
    }
    /* not attached yet: the exit waits for the client (or the attach timeout) */
}

bool sbx_pty_on_msg(struct sbx *s, uint32_t type, uint64_t id, int32_t a, int32_t b, int fd)
{
    struct sbx_pty *p = find_num(s, id);
    if (!p) {
        if (fd >= 0) close(fd);
        return false;
    }
    if (type == SBX_MSG_SPAWNED) {
        if (!spawned(p, a, fd)) p = NULL;
        fd = -1;
    } else if (type == SBX_MSG_SPAWN_FAILED && p->status == PTY_STARTING) {
        spawn_failed(p, a, b);
        p = NULL;
    } else if (type == SBX_MSG_EXITED) {
        exited(p, a, false);
    }
    if (fd >= 0) close(fd);
    if (p) maybe_free(p);
    return true;
}

void sbx_ptys_session_ended(struct sbx *s)
{
    for (struct sbx_pty *p = s->ptys, *next; p; p = next) {
        next = p->next;
        if (p->status == PTY_STARTING) {
            p->status = PTY_FAILED;
            err_set(&p->error, 409, "session_ended", "",
                    "the sandbox stopped before the terminal started");
            if (p->create_req) {
                http_reply_err(p->create_req, &p->error);
                p->create_req = NULL;
            }
            if (p->cl) {
                const struct sbx_pty_client *cl = p->cl;
                p->cl = NULL;
                cl->started(p->cl_arg, p, &p->error);
            }
        } else {
            exited(p, 0, true); /* every process of the session is dead */
            if (has_client(p)) {
                finish(p);
            } else {
                p->hung_up = true; /* nobody can attach any more */
                close_master(p);
            }
        }
        disarm(p);
        maybe_free(p);
    }
}

void sbx_ptys_free(struct sbx *s)
{
    while (s->ptys) {
        struct sbx_pty *p = s->ptys;
        if (p->create_req) {
            http_reply_error(p->create_req, 409, "session_ended", "", "the sandbox is gone");
            p->create_req = NULL;
        }
        if (p->cl) { /* a front-end's client: told it is over, then freed */
            if (!p->exited) exited(p, 0, true);
            finish(p);
        }
        if (!p->ws) {
            pty_free(p);
            continue;
        }
        /* its client is still being closed: let that finish, detached (ws_closed frees) */
        if (!p->exited) exited(p, 0, true);
        finish(p);
        disarm(p);
        unlink_pty(p);
    }
}

/* ------------------------------------------------------------------ JSON */

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

static json_t *pty_json(const struct sbx_pty *p)
{
    static const char *names[] = {"starting", "running", "exited", "failed"};
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(p->id));
    json_object_set_new(o, "sandbox_id", json_string(p->sbx ? p->sbx->id : ""));
    json_object_set_new(o, "session_id", json_string(p->session_id));
    json_object_set_new(o, "cmd", json_copy(json_array_get(p->argv, 0)));
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(p->argv); i++)
        json_array_append(args, json_array_get(p->argv, i));
    json_object_set_new(o, "args", args);
    json_object_set_new(o, "cwd", json_string(p->cwd));
    json_object_set_new(o, "user", json_string(p->user));
    json_object_set_new(o, "sudo", json_boolean(p->sudo));
    json_object_set_new(o, "term", sbx_json_text(p->term, strlen(p->term)));
    json_object_set_new(o, "cols", json_integer(p->cols));
    json_object_set_new(o, "rows", json_integer(p->rows));
    json_object_set_new(o, "status", json_string(names[p->status]));
    json_object_set_new(o, "pid", p->pid > 0 ? json_integer(p->pid) : json_null());
    bool has_exit = p->exited && p->status != PTY_FAILED;
    json_object_set_new(o, "exit_code", has_exit ? json_integer(p->exit_code) : json_null());
    const char *sig = has_exit && p->term_signal ? sbx_signal_name(p->term_signal) : NULL;
    json_object_set_new(o, "signal", sig ? json_string(sig) : json_null());
    json_object_set_new(o, "attached", json_boolean(p->attached));
    json_object_set_new(o, "started_at", iso(p->started_at));
    json_object_set_new(o, "ended_at", iso(p->ended_at));
    return o;
}

/* ------------------------------------------------------------------ HTTP */

static struct sbx *get_sbx(struct sbxd *d, struct http_req *r)
{
    const char *ref = http_req_param(r, "ref");
    struct sbx *s = sbx_find(d, ref);
    if (!s)
        http_reply_error(r, 404, "sandbox_not_found", "", "no sandbox with id or name \"%.80s\"",
                         ref ? ref : "");
    return s;
}

static struct sbx_pty *get_pty(struct sbx *s, struct http_req *r)
{
    const char *id = http_req_param(r, "pty");
    struct sbx_pty *p = find_id(s, id);
    if (!p || finished(p))
        http_reply_error(r, 404, "no_such_pty", "",
                         "sandbox %s has no terminal \"%.80s\" (terminals end with their process "
                         "or their client)",
                         s->name, id ? id : "");
    return p && !finished(p) ? p : NULL;
}

static bool term_ok(const char *t)
{
    size_t n = strlen(t);
    return n > 0 && n <= SBX_PTY_TERM_MAX &&
           strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") == n;
}

/* Validate a terminal body's cmd, args, cols, rows and term (cmd defaults to bash). */
static int pty_check(json_t *body, struct err *err)
{
    int64_t cols, rows;
    const char *term = NULL;
    if (sbx_json_int(body, "cols", 1, SBX_PTY_DIM_MAX, &cols, err) < 0 ||
        sbx_json_int(body, "rows", 1, SBX_PTY_DIM_MAX, &rows, err) < 0 ||
        sbx_json_str(body, "term", SBX_PTY_TERM_MAX, &term, err) < 0)
        return -1;
    if (term && !term_ok(term))
        return err_invalid(err, "term", "term must be 1-%d characters of [A-Za-z0-9._+-]",
                           SBX_PTY_TERM_MAX);
    json_t *cmd = json_object_get(body, "cmd");
    if (!cmd || json_is_null(cmd)) json_object_set_new(body, "cmd", json_string("/bin/bash"));
    return sbx_validate_argv(json_object_get(body, "cmd"), json_object_get(body, "args"), err);
}

/* A new terminal of s's running session for a checked body, its SPAWN_PTY sent. */
static struct sbx_pty *pty_new(struct sbx *s, json_t *body, struct err *err)
{
    struct sbxd *d = s->d;
    struct sbx_pty *p = NULL;
    struct sbx_run_as ra = {.env = NULL};
    json_t *cmd = json_object_get(body, "cmd"), *args = json_object_get(body, "args");
    const char *term = NULL;
    int64_t cols = SBX_PTY_DEFAULT_COLS, rows = SBX_PTY_DEFAULT_ROWS;
    sbx_json_int(body, "cols", 1, SBX_PTY_DIM_MAX, &cols, err);
    sbx_json_int(body, "rows", 1, SBX_PTY_DIM_MAX, &rows, err);
    sbx_json_str(body, "term", SBX_PTY_TERM_MAX, &term, err);
    if (s->nptys >= SBX_PTYS_MAX) {
        err_set(err, 429, "too_many_ptys", "", "sandbox %s already has %d terminals", s->name,
                SBX_PTYS_MAX);
        goto fail;
    }
    if (sbx_run_as_prepare(s, body, &ra, err) < 0) goto fail;
    if (term)
        json_object_set_new(ra.env, "TERM", json_string(term));
    else if (!json_object_get(ra.env, "TERM"))
        json_object_set_new(ra.env, "TERM", json_string(SBX_PTY_DEFAULT_TERM));

    p = xcalloc(1, sizeof *p);
    p->master = -1;
    p->in_q = evbuffer_new();
    ASSERT(p->in_q);
    uuid_v7(p->id);
    p->num = ++d->cmd_seq;
    snprintf(p->session_id, sizeof p->session_id, "%s", s->sess->id);
    p->argv = json_array();
    json_array_append(p->argv, cmd);
    for (size_t i = 0; json_is_array(args) && i < json_array_size(args); i++)
        json_array_append(p->argv, json_array_get(args, i));
    snprintf(p->cwd, sizeof p->cwd, "%s", ra.cwd);
    snprintf(p->user, sizeof p->user, "%s", ra.user);
    snprintf(p->term, sizeof p->term, "%.*s", SBX_PTY_TERM_MAX,
             json_string_value(json_object_get(ra.env, "TERM")));
    p->sudo = ra.sudo;
    p->cols = (int)cols;
    p->rows = (int)rows;
    p->status = PTY_STARTING;
    p->started_at = clock_now_ms();
    if (sbx_spawn_send(s, p->num, p->argv, &ra, NULL, (uint16_t)cols, (uint16_t)rows, err) < 0)
        goto fail;
    p->sbx = s;
    p->next = s->ptys;
    if (s->ptys) s->ptys->prev = p;
    s->ptys = p;
    s->nptys++;
    json_decref(ra.env);
    return p;
fail:
    if (p) pty_free(p);
    json_decref(ra.env);
    return NULL;
}

static void create_gone(struct http_req *r, void *arg)
{
    struct sbx_pty *p = arg;
    p->create_req = NULL; /* the terminal waits for an attach (or its timeout) */
    maybe_free(p);
}

static void h_pty_create(struct http_req *r, void *arg)
{
    static const char *const known[] = {"cmd",  "args", "cwd",  "env",     "user", "sudo",
                                        "cols", "rows", "term", "session", NULL};
    struct sbxd *d = arg;
    struct err err = ERR_INIT;
    size_t blen;
    http_req_body(r, &blen);
    if (blen > SBX_PTY_MSG_MAX) {
        http_reply_error(r, 413, "payload_too_large", "body", "JSON bodies are limited to %u bytes",
                         SBX_PTY_MSG_MAX);
        return;
    }
    json_t *body = http_req_json(r, true, &err);
    if (!body) {
        http_reply_err(r, &err);
        return;
    }
    struct sbx_pty *p = NULL;
    const char *session = NULL;
    if (!json_is_object(body)) {
        err_invalid(&err, "body", "the body must be a JSON object");
        goto fail;
    }
    if (sbx_json_known(body, known, "a terminal", &err) < 0 ||
        sbx_json_str(body, "session", 64, &session, &err) < 0 || pty_check(body, &err) < 0)
        goto fail;
    struct sbx *s = get_sbx(d, r);
    if (!s || sbx_api_park(s, r, h_pty_create, d)) { /* stopping: runs again after */
        json_decref(body);
        return;
    }
    if (sbx_ensure_running(s, session, &err) < 0) goto fail;
    p = pty_new(s, body, &err);
    if (!p) goto fail;
    p->create_req = r;
    http_req_on_close(r, create_gone, p);
    json_decref(body);
    return;
fail:
    json_decref(body);
    http_reply_err(r, &err);
}

static void h_pty_list(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    if (!s) return;
    json_t *arr = json_array();
    for (struct sbx_pty *p = s->ptys; p; p = p->next)
        if (!finished(p)) json_array_append_new(arr, pty_json(p));
    json_t *o = json_object();
    json_object_set_new(o, "ptys", arr);
    http_reply_json(r, 200, o);
}

static void h_pty_get(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    struct sbx_pty *p = s ? get_pty(s, r) : NULL;
    if (p) http_reply_json(r, 200, pty_json(p));
}

static void h_pty_delete(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    struct sbx_pty *p = s ? get_pty(s, r) : NULL;
    if (!p) return;
    if (p->status == PTY_STARTING) {
        http_reply_error(r, 409, "pty_starting", "", "the terminal is still starting");
        return;
    }
    hang_up(p);
    http_reply_json(r, 204, NULL);
    maybe_free(p);
}

static void h_pty_attach(struct http_req *r, void *arg)
{
    struct sbx *s = get_sbx(arg, r);
    struct sbx_pty *p = s ? get_pty(s, r) : NULL;
    if (!p) return;
    if (p->attached) {
        http_reply_error(r, 409, "pty_attached", "",
                         "terminal %s already has (or had) its client; create another", p->id);
        return;
    }
    if (p->status == PTY_STARTING || p->hung_up) {
        http_reply_error(r, 409, "pty_not_running", "", "terminal %s is not running", p->id);
        return;
    }
    if (s->state == SBX_PAUSED) { /* lazy resume: thaw the terminal's own session */
        struct err err = ERR_INIT;
        if (sbx_ensure_running(s, NULL, &err) < 0) {
            http_reply_err(r, &err);
            return;
        }
    }
    if (ws_server_upgrade(r, &pty_ws, p) < 0) return; /* answered */
    p->attached = true;
    if (p->timer_kind == T_ATTACH) disarm(p);
}

/* ------------------------------------------------------------------ front-ends */

struct sbx_pty *sbx_pty_open(struct sbx *s, json_t *body, const struct sbx_pty_client *cl,
                             void *arg, struct err *err)
{
    static const char *const known[] = {"cmd", "args", "cwd", "env", "user", "sudo",
                                        "cols", "rows", "term", NULL};
    if (!json_is_object(body)) {
        err_invalid(err, "body", "the body must be a JSON object");
        return NULL;
    }
    if (sbx_json_known(body, known, "a terminal", err) < 0 || pty_check(body, err) < 0)
        return NULL;
    struct sbx_pty *p = pty_new(s, body, err);
    if (!p) return NULL;
    p->external = true;
    p->attached = true;
    p->cl = cl;
    p->cl_arg = arg;
    return p;
}

struct sbx_pty *sbx_pty_by_pid(struct sbx *s, int pid)
{
    for (struct sbx_pty *p = s->ptys; p; p = p->next)
        if (p->external && p->pid == pid && p->status == PTY_RUNNING && !p->exited) return p;
    return NULL;
}

void sbx_pty_attach(struct sbx_pty *p, const struct sbx_pty_client *cl, void *arg)
{
    p->cl = cl;
    p->cl_arg = arg;
    if (p->rd_ev) {
        p->rd_paused = false;
        event_add(p->rd_ev, NULL);
    }
}

void sbx_pty_detach(struct sbx_pty *p)
{
    p->cl = NULL;
    p->cl_arg = NULL;
    if (p->rd_ev) event_del(p->rd_ev); /* output waits in the terminal for the next client */
}

void sbx_pty_drained(struct sbx_pty *p)
{
    if (p->rd_paused && p->rd_ev && p->cl) {
        p->rd_paused = false;
        event_add(p->rd_ev, NULL);
        on_master_read(p->master, EV_READ, p);
    }
}

int sbx_pty_write(struct sbx_pty *p, const void *data, size_t len, struct err *err)
{
    if (p->master < 0) return err_set(err, 409, "pty_not_running", "", "the terminal is over");
    if (evbuffer_get_length(p->in_q) + len > SBX_PTY_IN_MAX)
        return err_set(err, 429, "pty_input_full", "", "the terminal has %u bytes of input "
                       "waiting already", SBX_PTY_IN_MAX);
    evbuffer_add(p->in_q, data, len);
    on_master_write(p->master, EV_WRITE, p);
    return 0;
}

int sbx_pty_resize(struct sbx_pty *p, int cols, int rows, struct err *err)
{
    if (cols < 1 || rows < 1 || cols > SBX_PTY_DIM_MAX || rows > SBX_PTY_DIM_MAX)
        return err_invalid(err, "size", "cols and rows must be 1-%d", SBX_PTY_DIM_MAX);
    if (p->master < 0) return err_set(err, 409, "pty_not_running", "", "the terminal is over");
    struct winsize w = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (ioctl(p->master, TIOCSWINSZ, &w) < 0)
        return err_internal(err, "cannot resize the terminal: %s", strerror(errno));
    p->cols = cols;
    p->rows = rows;
    return 0;
}

void sbx_pty_kill(struct sbx_pty *p, int sig)
{
    signal_via_init(p, sig, SBX_SIG_SESSION);
}

int sbx_pty_pid(const struct sbx_pty *p)
{
    return p->pid;
}

json_t *sbx_pty_argv(const struct sbx_pty *p)
{
    return p->argv;
}

const char *sbx_pty_cwd(const struct sbx_pty *p)
{
    return p->cwd;
}

struct sbx_pty *sbx_pty_next_running(struct sbx *s, struct sbx_pty *after)
{
    for (struct sbx_pty *p = after ? after->next : s->ptys; p; p = p->next)
        if (p->external && p->status == PTY_RUNNING && !p->exited) return p;
    return NULL;
}

void sbx_pty_routes(struct sbxd *d)
{
    struct http_server *h = d->http;
    http_route(h, "POST", "/v1/sandboxes/:ref/ptys", h_pty_create, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/ptys", h_pty_list, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/ptys/:pty", h_pty_get, d);
    http_route(h, "DELETE", "/v1/sandboxes/:ref/ptys/:pty", h_pty_delete, d);
    http_route(h, "GET", "/v1/sandboxes/:ref/ptys/:pty/ws", h_pty_attach, d);
}
