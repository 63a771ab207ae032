/*
 * command.c - commands in a sandbox: start through init, stdio, exit, timeouts.
 *
 * sandboxd makes the three pipes itself and hands the child ends to init with the
 * SPAWN message, so output flows straight from the command into the daemon's loop
 * (no relay through init) and lands in two bounded logs (ring.h) that clients read
 * by byte offset. A command is done when init reported its exit and both output
 * pipes reached EOF; a background process that keeps the pipes open gets
 * SBX_EXIT_GRACE_MS after the exit, then the daemon stops reading (the writer gets
 * EPIPE). A time limit or kill signals the command's whole process group (init
 * put it in its own session).
 */
#include "sandbox/core/sandboxd_int.h"

#include "sandbox/net/net.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/core/text.h"
#include "sandbox/core/validate.h"

#define READ_CHUNK 65536
#define READ_BUDGET (1u << 20) /* per callback, so one chatty command cannot starve others */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static void finish(struct sbx_cmd *c);

bool sbx_cmd_done(const struct sbx_cmd *c)
{
    return c->status == CMD_EXITED || c->status == CMD_FAILED;
}

struct sbx_cmd *sbx_cmd_find(struct sbx *s, const char *id)
{
    for (struct sbx_cmd *c = s->cmds_first; c; c = c->next)
        if (!strcmp(c->id, id)) return c;
    return NULL;
}

static struct sbx_cmd *find_num(struct sbx *s, uint64_t num)
{
    for (struct sbx_cmd *c = s->cmds_last; c; c = c->prev)
        if (c->num == num) return c;
    return NULL;
}

/* ------------------------------------------------------------------ fds and events */

static void close_ev(struct event **ev, int *fd)
{
    if (*ev) {
        event_free(*ev);
        *ev = NULL;
    }
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void stdin_fail_all(struct sbx_cmd *c)
{
    while (c->in_head) {
        struct stdin_chunk *k = c->in_head;
        c->in_head = k->next;
        if (k->w) k->w->done(k->w, false, k->off);
        free(k->data);
        free(k);
    }
    c->in_tail = NULL;
    c->in_queued = 0;
}

static void close_stdin(struct sbx_cmd *c)
{
    close_ev(&c->in_ev, &c->fd_in);
    c->in_closed = true;
    stdin_fail_all(c);
}

static void on_stdin(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_cmd *c = arg;
    while (c->in_head) {
        struct stdin_chunk *k = c->in_head;
        if (k->off < k->len) {
            ssize_t n = write(c->fd_in, k->data + k->off, k->len - k->off);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* stay armed */
            if (n < 0) { /* EPIPE: the command closed its stdin or exited */
                close_stdin(c);
                return;
            }
            k->off += (size_t)n;
            c->in_queued -= (size_t)n;
            if (k->off < k->len) continue;
        }
        c->in_head = k->next;
        if (!c->in_head) c->in_tail = NULL;
        bool close_after = k->close_after;
        if (k->w) k->w->done(k->w, true, k->len);
        free(k->data);
        free(k);
        if (close_after) {
            close_stdin(c);
            return;
        }
    }
    if (c->in_ev) event_del(c->in_ev);
}

int sbx_cmd_stdin(struct sbx_cmd *c, const char *data, size_t len, bool close_after,
                  struct sbx_stdin_waiter *w, struct err *err)
{
    if (c->in_closed || c->fd_in < 0)
        return err_set(err, 409, "stdin_closed", "",
                       "the command's stdin is closed (it was not started with stdin \"pipe\", "
                       "was closed, or the command finished)");
    if (c->in_queued + len > SBX_STDIN_MAX)
        return err_set(err, 429, "stdin_full", "",
                       "more than %u bytes of stdin are waiting for the command to read them; "
                       "retry later",
                       SBX_STDIN_MAX);
    struct stdin_chunk *k = xcalloc(1, sizeof *k);
    k->data = xmalloc(len ? len : 1);
    if (len) memcpy(k->data, data, len);
    k->len = len;
    k->close_after = close_after;
    k->w = w;
    if (c->in_tail)
        c->in_tail->next = k;
    else
        c->in_head = k;
    c->in_tail = k;
    c->in_queued += len;
    event_add(c->in_ev, NULL);
    return 0;
}

/* Read what a pipe has; returns true at EOF. */
static bool drain(struct sbx_cmd *c, int fd, struct sbx_ring *ring)
{
    char b[READ_CHUNK];
    size_t total = 0;
    for (;;) {
        ssize_t n = read(fd, b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
        if (n == 0) return true;
        sbx_ring_write(ring, b, (size_t)n);
        total += (size_t)n;
        if (total >= READ_BUDGET) return false;
    }
}

static void maybe_finish(struct sbx_cmd *c)
{
    if (c->exited && c->fd_out < 0 && c->fd_err < 0) finish(c);
}

static void on_output(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_cmd *c = arg;
    bool is_out = fd == c->fd_out;
    uint64_t before = is_out ? c->out.total : c->err.total;
    bool eof = drain(c, fd, is_out ? &c->out : &c->err);
    uint64_t after = is_out ? c->out.total : c->err.total;
    if (eof) {
        if (is_out)
            close_ev(&c->out_ev, &c->fd_out);
        else
            close_ev(&c->err_ev, &c->fd_err);
    }
    if (after != before) sbx_cmd_notify(c->sbx->d, c, SBX_EV_OUTPUT);
    if (eof) maybe_finish(c);
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_cmd *c = arg;
    /* whatever is buffered still counts; then stop reading */
    if (c->fd_out >= 0) drain(c, c->fd_out, &c->out);
    if (c->fd_err >= 0) drain(c, c->fd_err, &c->err);
    close_ev(&c->out_ev, &c->fd_out);
    close_ev(&c->err_ev, &c->fd_err);
    sbx_cmd_notify(c->sbx->d, c, SBX_EV_OUTPUT);
    maybe_finish(c);
}

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_cmd *c = arg;
    if (sbx_cmd_done(c) || c->exited) return;
    c->timed_out = true;
    struct err err = ERR_INIT;
    log_info("command timed out", "sandbox=%s command=%s", c->sbx->id, c->id);
    sbx_cmd_signal(c, SIGKILL, true, &err);
}

static void finish(struct sbx_cmd *c)
{
    if (sbx_cmd_done(c)) return;
    if (c->status != CMD_FAILED) c->status = CMD_EXITED;
    c->ended_at = clock_now_ms();
    close_stdin(c);
    close_ev(&c->out_ev, &c->fd_out);
    close_ev(&c->err_ev, &c->fd_err);
    if (c->timeout_ev) event_del(c->timeout_ev);
    if (c->grace_ev) event_del(c->grace_ev);
    c->sbx->nrunning--;
    sbx_cmd_notify(c->sbx->d, c, SBX_EV_DONE);
}

/* ------------------------------------------------------------------ retention */

static void cmd_free(struct sbx_cmd *c)
{
    close_stdin(c);
    close_ev(&c->out_ev, &c->fd_out);
    close_ev(&c->err_ev, &c->fd_err);
    if (c->timeout_ev) event_free(c->timeout_ev);
    if (c->grace_ev) event_free(c->grace_ev);
    sbx_ring_fini(&c->out);
    sbx_ring_fini(&c->err);
    json_decref(c->argv);
    free(c);
}

static void unlink_cmd(struct sbx *s, struct sbx_cmd *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->cmds_first = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->cmds_last = c->prev;
    s->ncmds--;
}

/* Keep at most SBX_CMDS_KEPT finished commands (oldest go first, never one that a
 * client is waiting on). */
static void prune(struct sbx *s)
{
    int finished = 0;
    for (struct sbx_cmd *c = s->cmds_first; c; c = c->next)
        finished += sbx_cmd_done(c);
    for (struct sbx_cmd *c = s->cmds_first; c && finished > SBX_CMDS_KEPT;) {
        struct sbx_cmd *next = c->next;
        if (sbx_cmd_done(c) && c->watchers == 0) {
            unlink_cmd(s, c);
            cmd_free(c);
            finished--;
        }
        c = next;
    }
}

void sbx_cmds_free(struct sbx *s)
{
    while (s->cmds_first) {
        struct sbx_cmd *c = s->cmds_first;
        sbx_cmd_notify(s->d, c, SBX_EV_GONE);
        unlink_cmd(s, c);
        if (!sbx_cmd_done(c)) s->nrunning--;
        cmd_free(c);
    }
}

/* ------------------------------------------------------------------ start */

static void env_set(json_t *env, const char *k, const char *v)
{
    json_object_set_new(env, k, json_string(v));
}

/* Resolve who runs it, where, and with what environment. */
int sbx_run_as_prepare(struct sbx *s, json_t *body, struct sbx_run_as *ra, struct err *err)
{
    const char *user, *cwd;
    struct sbx_user *u = &ra->u;
    ra->env = NULL;
    ra->sudo = false;
    if (sbx_json_str(body, "user", SBX_USER_NAME_MAX, &user, err) < 0 ||
        sbx_json_str(body, "cwd", SBX_PATH_MAX, &cwd, err) < 0 ||
        sbx_json_bool(body, "sudo", &ra->sudo, err) < 0)
        return -1;
    /* the image's config: its User (when that user exists in the image), WorkingDir and
     * Env are the defaults of a command that names none */
    json_t *ic = s->image_config;
    const char *iuser = json_string_value(json_object_get(ic, "user"));
    const char *iwd = json_string_value(json_object_get(ic, "workdir"));
    bool resolved = false;
    if (!user && iuser && iuser[0]) {
        char name[SBX_USER_NAME_MAX + 1];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(iuser, ":"), iuser);
        struct err ue = ERR_INIT;
        resolved = name[0] && sbx_user_resolve(&s->sess->fs, name, u, &ue) == 0;
    }
    if (!resolved) {
        if (!user) user = "root";
        if (sbx_user_resolve(&s->sess->fs, user, u, err) < 0) return -1;
    }
    snprintf(ra->user, sizeof ra->user, "%s", u->name);
    const char *home = u->home[0] == '/' ? u->home : "/";
    if (!cwd && iwd && iwd[0] == '/') cwd = iwd;
    if (sbx_path_normalize(cwd ? cwd : home, home, ra->cwd, sizeof ra->cwd, "cwd", err) < 0)
        return -1;
    json_t *env = json_object();
    struct sbx_user root = {.uid = 0, .gid = 0, .ngroups = 1};
    snprintf(root.name, sizeof root.name, "root");
    snprintf(root.home, sizeof root.home, "/root");
    snprintf(root.shell, sizeof root.shell, "/bin/bash");
    const struct sbx_user *who = ra->sudo ? &root : u;
    env_set(env, "PATH", DEFAULT_PATH);
    env_set(env, "HOME", who->home);
    env_set(env, "USER", who->name);
    env_set(env, "LOGNAME", who->name);
    env_set(env, "SHELL", who->shell[0] ? who->shell : "/bin/sh");
    env_set(env, "LANG", "C.UTF-8");
    env_set(env, "PWD", ra->cwd);
    json_t *ienv = json_object_get(ic, "env");
    for (size_t i = 0; i < json_array_size(ienv); i++) {
        const char *kv = json_string_value(json_array_get(ienv, i));
        const char *eq = kv ? strchr(kv, '=') : NULL;
        if (!eq || eq == kv || eq - kv > 255) continue;
        char k[256];
        snprintf(k, sizeof k, "%.*s", (int)(eq - kv), kv);
        env_set(env, k, eq + 1);
    }
    sbx_net_env(s, env); /* trust variables for the egress proxy's CA (net.h) */
    json_object_update(env, s->env);
    json_t *extra = json_object_get(body, "env");
    if (extra && !json_is_null(extra)) {
        if (sbx_validate_env(extra, "env", err) < 0) {
            json_decref(env);
            return -1;
        }
        json_object_update(env, extra);
    }
    if (ra->sudo) {
        u->uid = u->gid = 0;
        u->ngroups = 1;
        u->groups[0] = 0;
    }
    ra->env = env;
    return 0;
}

int sbx_spawn_send(struct sbx *s, uint64_t num, json_t *argvj, const struct sbx_run_as *ra,
                   int fds[3], uint16_t cols, uint16_t rows, struct err *err)
{
    const struct sbx_user *u = &ra->u;
    json_t *env = ra->env;
    size_t argc = json_array_size(argvj), envc = json_object_size(env);
    const char **argv = xcalloc(argc + 1, sizeof *argv);
    char **envv = xcalloc(envc + 1, sizeof *envv);
    for (size_t i = 0; i < argc; i++)
        argv[i] = json_string_value(json_array_get(argvj, i));
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v) envv[n++] = xasprintf("%s=%s", k, json_string_value(v));
    struct sbx_spawn_req r = {.id = num, .uid = u->uid, .gid = u->gid,
                              .ngroups = u->ngroups, .cwd = ra->cwd, .argc = (uint32_t)argc,
                              .envc = (uint32_t)n, .argv = argv, .envp = (const char **)envv,
                              .pty = fds == NULL, .cols = cols, .rows = rows};
    memcpy(r.groups, u->groups, sizeof r.groups);
    struct buf pkt;
    buf_init(&pkt, SBX_MSG_MAX);
    int e = sbx_spawn_encode(&r, &pkt);
    for (size_t i = 0; i < n; i++)
        free(envv[i]);
    free(envv);
    free(argv);
    if (e < 0) {
        buf_fini(&pkt);
        return err_invalid(err, "args", "the command and its environment are too large");
    }
    struct iovec iov = {pkt.data, pkt.len};
    union {
        char buf[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (fds) { /* a terminal's spawn carries no descriptors */
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof cm.buf;
        struct cmsghdr *cmh = CMSG_FIRSTHDR(&mh);
        cmh->cmsg_level = SOL_SOCKET;
        cmh->cmsg_type = SCM_RIGHTS;
        cmh->cmsg_len = CMSG_LEN(3 * sizeof(int));
        memcpy(CMSG_DATA(cmh), fds, 3 * sizeof(int));
    }
    ssize_t w;
    while ((w = sendmsg(s->sess->proc.ctl, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    int se = errno;
    buf_fini(&pkt);
    if (w < 0)
        return err_set(err, se == EAGAIN ? 503 : 500, "spawn_failed", "",
                       "cannot reach the sandbox's init: %s", strerror(se));
    return 0;
}

static int make_pipe(int p[2], bool ours_is_read)
{
    if (pipe2(p, O_CLOEXEC) < 0) return -errno;
    int ours = ours_is_read ? p[0] : p[1];
    fcntl(ours, F_SETFL, O_NONBLOCK);
    return 0;
}

struct sbx_cmd *sbx_cmd_start(struct sbx *s, json_t *body, struct err *err)
{
    static const char *const known[] = {"cmd", "args", "cwd", "env", "user", "sudo",
                                        "timeout_ms", "stdin", "input", "input_encoding",
                                        "wait", "output_encoding", "session", NULL};
    if (!json_is_object(body)) {
        err_invalid(err, "body", "the body must be a JSON object");
        return NULL;
    }
    if (sbx_json_known(body, known, "a command", err) < 0) return NULL;
    json_t *cmd = json_object_get(body, "cmd"), *args = json_object_get(body, "args");
    if (sbx_validate_argv(cmd, args, err) < 0) return NULL;
    const char *stdin_mode, *input, *input_enc;
    if (sbx_json_str(body, "stdin", 8, &stdin_mode, err) < 0 ||
        sbx_json_str(body, "input", SBX_STDIN_MAX, &input, err) < 0 ||
        sbx_json_str(body, "input_encoding", 16, &input_enc, err) < 0)
        return NULL;
    bool pipe_stdin = false;
    if (stdin_mode && !strcmp(stdin_mode, "pipe"))
        pipe_stdin = true;
    else if (stdin_mode && strcmp(stdin_mode, "null") != 0) {
        err_invalid(err, "stdin", "stdin must be \"pipe\" or \"null\"");
        return NULL;
    }
    struct buf in;
    buf_init(&in, SBX_STDIN_MAX);
    if (input) {
        if (input_enc && !strcmp(input_enc, "base64")) {
            if (sbx_base64_decode(input, strlen(input), &in) < 0) {
                buf_fini(&in);
                err_invalid(err, "input", "input is not valid base64");
                return NULL;
            }
        } else if (input_enc && strcmp(input_enc, "utf-8") != 0) {
            buf_fini(&in);
            err_invalid(err, "input_encoding", "input_encoding must be \"utf-8\" or \"base64\"");
            return NULL;
        } else {
            buf_append(&in, input, strlen(input));
        }
    }
    int64_t timeout = 0;
    if (sbx_json_int(body, "timeout_ms", 0, SBX_TIMEOUT_MAX_MS, &timeout, err) < 0) {
        buf_fini(&in);
        return NULL;
    }
    if (s->nrunning >= SBX_CMDS_RUNNING_MAX) {
        buf_fini(&in);
        err_set(err, 429, "too_many_commands", "", "sandbox %s already runs %d commands",
                s->name, SBX_CMDS_RUNNING_MAX);
        return NULL;
    }
    struct sbx_cmd *c = xcalloc(1, sizeof *c);
    c->sbx = s;
    c->fd_in = c->fd_out = c->fd_err = -1;
    uuid_v7(c->id);
    c->num = ++s->d->cmd_seq;
    c->timeout_ms = timeout;
    snprintf(c->session_id, sizeof c->session_id, "%s", s->sess->id);
    c->argv = json_array();
    json_array_append(c->argv, cmd);
    for (size_t i = 0; json_is_array(args) && i < json_array_size(args); i++)
        json_array_append(c->argv, json_array_get(args, i));
    sbx_ring_init(&c->out, s->d->cfg.output_limit);
    sbx_ring_init(&c->err, s->d->cfg.output_limit);
    struct sbx_run_as ra = {.env = NULL};
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    if (sbx_run_as_prepare(s, body, &ra, err) < 0) goto fail;
    snprintf(c->user, sizeof c->user, "%s", ra.user);
    snprintf(c->cwd, sizeof c->cwd, "%s", ra.cwd);
    c->sudo = ra.sudo;
    if (make_pipe(pin, false) < 0 || make_pipe(pout, true) < 0 || make_pipe(perr, true) < 0) {
        err_internal(err, "cannot make pipes: %s", strerror(errno));
        goto fail;
    }
    int child[3] = {pin[0], pout[1], perr[1]};
    if (sbx_spawn_send(s, c->num, c->argv, &ra, child, 0, 0, err) < 0) goto fail;
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    json_decref(ra.env);
    struct event_base *base = s->d->base;
    c->fd_in = pin[1];
    c->fd_out = pout[0];
    c->fd_err = perr[0];
    c->in_ev = event_new(base, c->fd_in, EV_WRITE | EV_PERSIST, on_stdin, c);
    c->out_ev = event_new(base, c->fd_out, EV_READ | EV_PERSIST, on_output, c);
    c->err_ev = event_new(base, c->fd_err, EV_READ | EV_PERSIST, on_output, c);
    c->timeout_ev = evtimer_new(base, on_cmd_timeout, c);
    c->grace_ev = evtimer_new(base, on_grace, c);
    event_add(c->out_ev, NULL);
    event_add(c->err_ev, NULL);
    c->status = CMD_STARTING;
    c->started_at = clock_now_ms();
    c->prev = s->cmds_last;
    if (s->cmds_last)
        s->cmds_last->next = c;
    else
        s->cmds_first = c;
    s->cmds_last = c;
    s->ncmds++;
    s->nrunning++;
    struct err ignored = ERR_INIT;
    if (in.len) sbx_cmd_stdin(c, in.data, in.len, !pipe_stdin, NULL, &ignored);
    else if (!pipe_stdin) close_stdin(c);
    buf_fini(&in);
    prune(s);
    return c;
fail:
    for (int k = 0; k < 2; k++) {
        if (pin[k] >= 0) close(pin[k]);
        if (pout[k] >= 0) close(pout[k]);
        if (perr[k] >= 0) close(perr[k]);
    }
    json_decref(ra.env);
    buf_fini(&in);
    cmd_free(c);
    return NULL;
}

/* ------------------------------------------------------------------ messages from init */

static void spawn_failed(struct sbx_cmd *c, int e, int stage)
{
    c->status = CMD_FAILED;
    const char *prog = json_string_value(json_array_get(c->argv, 0));
    if (stage == SBX_STAGE_EXEC && e == ENOENT)
        err_set(&c->error, 400, "command_not_found", "cmd", "%s: command not found", prog);
    else if (stage == SBX_STAGE_EXEC && e == EACCES)
        err_set(&c->error, 403, "permission_denied", "cmd", "%s: permission denied", prog);
    else if (stage == SBX_STAGE_EXEC)
        err_set(&c->error, 400, "exec_failed", "cmd", "%s: %s", prog, strerror(e));
    else if (stage == SBX_STAGE_CWD)
        err_set(&c->error, 400, "cwd_not_found", "cwd", "cannot enter %s: %s", c->cwd,
                strerror(e));
    else if (stage == SBX_STAGE_CREDS)
        err_set(&c->error, 500, "spawn_failed", "user", "cannot become user %s: %s", c->user,
                strerror(e));
    else
        err_set(&c->error, 500, "spawn_failed", "", "cannot start the command: %s", strerror(e));
    c->exit_code = -1;
    sbx_cmd_notify(c->sbx->d, c, SBX_EV_STARTED);
    finish(c);
}

void sbx_cmd_on_msg(struct sbx *s, uint32_t type, uint64_t id, int32_t a, int32_t b)
{
    struct sbx_cmd *c = find_num(s, id);
    if (!c || sbx_cmd_done(c)) return;
    switch (type) {
    case SBX_MSG_SPAWNED:
        if (c->status != CMD_STARTING) return;
        c->status = CMD_RUNNING;
        c->pid = a;
        if (c->timeout_ms > 0) {
            struct timeval tv = {(time_t)(c->timeout_ms / 1000),
                                 (suseconds_t)((c->timeout_ms % 1000) * 1000)};
            event_add(c->timeout_ev, &tv);
        }
        sbx_cmd_notify(s->d, c, SBX_EV_STARTED);
        break;
    case SBX_MSG_SPAWN_FAILED:
        spawn_failed(c, a, b);
        break;
    case SBX_MSG_EXITED:
        if (c->exited) return;
        c->exited = true;
        if (WIFEXITED(a)) {
            c->exit_code = WEXITSTATUS(a);
        } else if (WIFSIGNALED(a)) {
            c->term_signal = WTERMSIG(a);
            c->exit_code = 128 + c->term_signal;
        } else {
            c->exit_code = -1;
        }
        event_del(c->timeout_ev);
        if (c->fd_out >= 0 || c->fd_err >= 0) {
            struct timeval tv = {0, SBX_EXIT_GRACE_MS * 1000};
            event_add(c->grace_ev, &tv);
        }
        maybe_finish(c);
        break;
    default:
        break;
    }
}

void sbx_cmds_session_ended(struct sbx *s)
{
    for (struct sbx_cmd *c = s->cmds_first; c; c = c->next) {
        if (sbx_cmd_done(c)) continue;
        if (c->status == CMD_STARTING) {
            err_set(&c->error, 409, "session_ended", "", "the sandbox stopped before the command "
                                                         "started");
            c->status = CMD_FAILED;
            sbx_cmd_notify(s->d, c, SBX_EV_STARTED);
        }
        if (!c->exited) {
            c->exited = true;
            c->killed = true;
            c->term_signal = SIGKILL;
            c->exit_code = 128 + SIGKILL;
        }
        /* every process of the session is dead: what is in the pipes is all there is */
        if (c->fd_out >= 0) drain(c, c->fd_out, &c->out);
        if (c->fd_err >= 0) drain(c, c->fd_err, &c->err);
        finish(c);
    }
}

int sbx_cmd_signal(struct sbx_cmd *c, int sig, bool group, struct err *err)
{
    struct sbx *s = c->sbx;
    if (sbx_cmd_done(c) || c->exited)
        return err_set(err, 409, "command_finished", "", "command %s has already finished", c->id);
    if (!s->sess || strcmp(s->sess->id, c->session_id) != 0)
        return err_set(err, 409, "session_ended", "", "the command's session has ended");
    struct buf pkt;
    buf_init(&pkt, 0);
    sbx_msg_encode(&pkt, SBX_MSG_SIGNAL, c->num, sig, group ? 1 : 0, NULL, 0);
    ssize_t w = send(s->sess->proc.ctl, pkt.data, pkt.len, MSG_NOSIGNAL);
    int e = errno;
    buf_fini(&pkt);
    if (w < 0) return err_internal(err, "cannot reach the sandbox's init: %s", strerror(e));
    if (sig == SIGKILL) c->killed = true;
    return 0;
}

/* ------------------------------------------------------------------ JSON */

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

json_t *sbx_cmd_json(const struct sbx_cmd *c)
{
    static const char *names[] = {"starting", "running", "exited", "failed"};
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "sandbox_id", json_string(c->sbx->id));
    json_object_set_new(o, "session_id", json_string(c->session_id));
    json_object_set_new(o, "cmd", json_copy(json_array_get(c->argv, 0)));
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(c->argv); i++)
        json_array_append(args, json_array_get(c->argv, i));
    json_object_set_new(o, "args", args);
    json_object_set_new(o, "cwd", json_string(c->cwd));
    json_object_set_new(o, "user", json_string(c->user));
    json_object_set_new(o, "sudo", json_boolean(c->sudo));
    json_object_set_new(o, "status", json_string(names[c->status]));
    json_object_set_new(o, "pid", c->pid > 0 ? json_integer(c->pid) : json_null());
    bool has_exit = c->status == CMD_EXITED;
    json_object_set_new(o, "exit_code", has_exit ? json_integer(c->exit_code) : json_null());
    const char *sig = c->term_signal ? sbx_signal_name(c->term_signal) : NULL;
    json_object_set_new(o, "signal", has_exit && sig ? json_string(sig) : json_null());
    json_object_set_new(o, "timed_out", json_boolean(c->timed_out));
    json_object_set_new(o, "killed", json_boolean(c->killed));
    json_object_set_new(o, "started_at", iso(c->started_at));
    json_object_set_new(o, "ended_at", iso(c->ended_at));
    json_object_set_new(o, "stdout_bytes", json_integer((json_int_t)c->out.total));
    json_object_set_new(o, "stderr_bytes", json_integer((json_int_t)c->err.total));
    json_object_set_new(o, "stdin_open", json_boolean(!c->in_closed && c->fd_in >= 0));
    if (c->status == CMD_FAILED) {
        json_t *e = json_object();
        json_object_set_new(e, "code", json_string(c->error.code));
        json_object_set_new(e, "message", json_string(c->error.msg));
        json_object_set_new(o, "error", e);
    }
    return o;
}
