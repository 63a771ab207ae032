/*
 * sandbox.c - sandboxd's registry and the lifecycle of sandboxes and sessions.
 *
 * States: running (a session exists and is thawed), paused (its cgroup is frozen),
 * stopped (no session; files kept). Transitions run on the loop thread with bounded
 * waits (start, freeze, kill), and only stable states reach the database: nothing
 * can be left "starting" or "stopping". A session ends when its init exits for any
 * reason (stop, timeout, OOM, crash): the pidfd event finishes its commands, removes
 * its cgroup and marks the sandbox stopped with a reason. A stop does not wait for
 * that on the loop: it sends SIGKILL, and the unmounts and drive commits after the
 * session's end run on a teardown thread ("teardown" below); until both are over the
 * sandbox is busy, and calls that act on it wait ("waiting").
 *
 * Start-up recovery: rows that say running or paused belong to sessions that died
 * with the previous daemon (their inits got SIGKILL through PDEATHSIG); they become
 * stopped with reason "daemon_restart", and any cgroups left behind are swept.
 */
#include "sandbox/core/sandboxd_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "sandbox/core/daemons.h"
#include "proxy/worker.h"
#include "sandbox/runtime/idmap.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/pull.h"
#include "sandbox/net/net.h"
#include "sandbox/runtime/plan.h"
#include "sandbox/storage/safefs.h"
#include "sandbox/core/uidpool.h"
#include "sandbox/core/validate.h"

#define MAX_CLEANERS 64
#define SBX_STORE_MIN_FREE (32 << 20) /* bytes free in the store a create needs */

static pid_t cleaners[MAX_CLEANERS];

static void session_end(struct sbx *s, const char *reason, bool now);
static int session_start(struct sbx *s, struct err *err);
static void arm_timeout(struct sbx *s);

const char *sbx_state_name(enum sbx_state st)
{
    return st == SBX_RUNNING ? "running" : st == SBX_PAUSED ? "paused" : "stopped";
}

int sbx_parse_state(const char *s, enum sbx_state *out)
{
    if (!strcmp(s, "running")) *out = SBX_RUNNING;
    else if (!strcmp(s, "paused")) *out = SBX_PAUSED;
    else if (!strcmp(s, "stopped")) *out = SBX_STOPPED;
    else return -EINVAL;
    return 0;
}

/* ------------------------------------------------------------------ persistence */

int sbx_save(struct sbx *s, struct err *err)
{
    char *meta = json_dumps(s->metadata, JSON_COMPACT | JSON_SORT_KEYS);
    char *env = json_dumps(s->env, JSON_COMPACT | JSON_SORT_KEYS);
    char *ext = sbx_ext_dump(s);
    struct sbx_row r = {
        .id = s->id, .name = s->name, .state = sbx_state_name(s->state), .image = s->image,
        .metadata = meta, .env = env, .on_timeout = s->on_timeout_pause ? "pause" : "stop",
        .stop_reason = s->stop_reason, .slot = s->slot, .vcpus = s->vcpus,
        .memory_mb = s->memory_mb, .pids_max = s->pids_max, .timeout_ms = s->timeout_ms,
        .created_at = s->created_at, .updated_at = s->updated_at, .started_at = s->started_at,
        .stopped_at = s->stopped_at, .expires_at = s->expires_at, .session_seq = s->session_seq,
        .ext = ext, .region = s->region,
    };
    int rc = sbx_store_save(s->d->store, &r, err);
    if (rc == 0) rc = sbx_net_save(s, err);
    free(meta);
    free(env);
    free(ext);
    return rc;
}

static void save_or_log(struct sbx *s)
{
    struct err err = ERR_INIT;
    if (sbx_save(s, &err) < 0)
        log_error("cannot save sandbox", "sandbox=%s error=\"%s\"", s->id, err.msg);
}

/* ------------------------------------------------------------------ registry */

struct sbx *sbx_find(struct sbxd *d, const char *ref)
{
    if (!ref) return NULL;
    for (struct sbx *s = d->first; s; s = s->next)
        if (!s->deleting && !strcmp(s->id, ref)) return s;
    for (struct sbx *s = d->first; s; s = s->next)
        if (!s->deleting && !strcmp(s->name, ref)) return s;
    return NULL;
}

struct sbx *sbx_find_id(struct sbxd *d, const char *id)
{
    for (struct sbx *s = d->first; s; s = s->next)
        if (!strcmp(s->id, id)) return s;
    return NULL;
}

static void link_sbx(struct sbxd *d, struct sbx *s)
{
    s->prev = d->last;
    if (d->last)
        d->last->next = s;
    else
        d->first = s;
    d->last = s;
    d->count++;
}

static void unlink_sbx(struct sbxd *d, struct sbx *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        d->first = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        d->last = s->prev;
    d->count--;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg);

static struct sbx *sbx_alloc(struct sbxd *d, const char *id)
{
    struct sbx *s = xcalloc(1, sizeof *s);
    s->d = d;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->dir = xasprintf("%s/%s", d->sandboxes_dir, id);
    s->timeout_ev = evtimer_new(d->base, on_timeout, s);
    s->state = SBX_STOPPED;
    return s;
}

static void sbx_free(struct sbx *s)
{
    sbx_ptys_free(s);
    sbx_cmds_free(s);
    if (s->timeout_ev) event_free(s->timeout_ev);
    json_decref(s->metadata);
    json_decref(s->env);
    json_decref(s->image_config);
    sbx_ext_free(s);
    sbx_net_cfg_free(s);
    free(s->dir);
    free(s);
}

static bool slot_in_use(uint32_t slot, void *arg)
{
    const struct sbxd *d = arg;
    for (const struct sbx *s = d->first; s; s = s->next)
        if (s->slot == slot) return true;
    return false;
}

/* A uid range of this state folder's no sandbox has (host-wide unique: uidpool.h). */
static int next_slot(struct sbxd *d, uint32_t *out)
{
    return sbx_uidpool_take(d->uids, slot_in_use, d, out);
}

/* ------------------------------------------------------------------ files on disk */

static bool hostname_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 63 || n[0] == '-' || n[len - 1] == '-') return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-'))
            return false;
    }
    return true;
}

static const char *hostname_of(const struct sbx *s)
{
    return hostname_ok(s->name) ? s->name : "sandbox";
}

/* The sandbox's own /etc/hostname and /etc/hosts, in its upper tree. The tree may be a
 * fork's or a snapshot's, whose /etc, hosts and hostname the sandbox could have made
 * anything (a symlink to a host path, for one): nothing there is followed. hosts and
 * hostname replace whatever file or link stands there; an /etc that is not a real
 * directory, or a directory in place of a file, is the sandbox's own layout and left
 * as it is. Files made belong to the tree's range. */
static int write_etc(struct sbx *s, struct err *err)
{
    uid_t B = s->data_base ? s->data_base : s->uid_base;
    int tree = open(s->fs_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int upper = tree < 0 ? -errno : sbx_safe_open(tree, "upper", O_PATH | O_DIRECTORY);
    if (tree >= 0) close(tree);
    if (upper < 0)
        return err_internal(err, "cannot open %s/upper: %s", s->fs_dir, strerror(-upper));
    /* an image whose /etc is a symlink has no /etc in its skeleton (image.h): a
     * directory here would hide the image's */
    struct stat est;
    char *skel_etc = xasprintf("%s/%s/etc", s->d->image_dir, s->image);
    bool image_etc = lstat(skel_etc, &est) == 0 && S_ISDIR(est.st_mode);
    free(skel_etc);
    if (!image_etc && fstatat(upper, "etc", &est, AT_SYMLINK_NOFOLLOW) < 0) {
        close(upper);
        return 0;
    }
    int etc = sbx_safe_mkdir(upper, "etc", 0755, B, B, NULL);
    close(upper);
    if (etc == -ELOOP || etc == -ENOTDIR || etc == -EEXIST) {
        log_warn("the sandbox's /etc is not a directory; hosts and hostname left as they are",
                 "sandbox=%s", s->id);
        return 0;
    }
    if (etc < 0)
        return sbx_err_space(err, etc, "internal_error", "cannot create %s/upper/etc: %s", s->fs_dir,
                             strerror(-etc));
    char hosts[256], hn[80];
    snprintf(hosts, sizeof hosts,
             "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
             hostname_of(s));
    snprintf(hn, sizeof hn, "%s\n", hostname_of(s));
    const char *const names[] = {"hosts", "hostname"}, *const texts[] = {hosts, hn};
    int e = 0;
    for (size_t i = 0; i < 2 && !e; i++) {
        e = sbx_safe_replace(etc, names[i], texts[i], strlen(texts[i]), 0644, B, B, false);
        if (e == -EISDIR) {
            log_warn("the sandbox's /etc file is a directory; left as it is", "sandbox=%s file=%s",
                     s->id, names[i]);
            e = 0;
        } else if (e < 0) {
            sbx_err_space(err, e, "internal_error", "cannot write %s/upper/etc/%s: %s", s->fs_dir,
                          names[i], strerror(-e));
        }
    }
    close(etc);
    return e ? -1 : 0;
}

/* The sandbox's directory and its mount points (in the daemon's state folder), then its
 * /etc files. */
static int make_dirs(struct sbx *s, struct err *err)
{
    static const char *const dirs[] = {"", "/mnt", "/mnt/root", "/mnt/layers"};
    static const mode_t modes[] = {0700, 0700, 0755, 0700};
    int top = open(s->d->sandboxes_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (top < 0)
        return err_internal(err, "cannot open %s: %s", s->d->sandboxes_dir, strerror(errno));
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s%s", s->id, dirs[i]);
        int fd = sbx_safe_mkdir(top, rel, modes[i], 0, 0, NULL);
        if (fd < 0) {
            close(top);
            return sbx_err_space(err, fd, "internal_error", "cannot create %s%s: %s", s->dir, dirs[i],
                                 strerror(-fd));
        }
        close(fd);
    }
    close(top);
    return write_etc(s, err);
}

static void reap_cleaners(void)
{
    for (int i = 0; i < MAX_CLEANERS; i++)
        if (cleaners[i] > 0 && waitpid(cleaners[i], NULL, WNOHANG) != 0) cleaners[i] = 0;
}

/* Delete trash/<name> in a child process: big trees must not block the loop. */
static void clean_later(struct sbxd *d, const char *name)
{
    reap_cleaners();
    int slot = -1;
    for (int i = 0; i < MAX_CLEANERS && slot < 0; i++)
        if (cleaners[i] == 0) slot = i;
    pid_t pid = slot >= 0 ? fork() : -1;
    if (pid == 0) {
        int dfd = open(d->trash_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) sbx_safe_remove_tree(dfd, name);
        _exit(0);
    }
    if (pid > 0) {
        cleaners[slot] = pid;
        return;
    }
    /* no process available: do it here */
    int dfd = open(d->trash_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        sbx_safe_remove_tree(dfd, name);
        close(dfd);
    }
}

/* Reap cleaners and any init whose exit we did not wait for (a kill that timed out).
 * Inits are tracked by pidfd, which stays readable after a reap, so this is safe. */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    reap_cleaners();
    sbx_reap_zombies();
}

/* ------------------------------------------------------------------ sessions */

/* One packet from init, with at most one descriptor (a terminal's master) in *fd. */
static ssize_t ctl_recv(int sock, char *pkt, size_t n, int *fd)
{
    struct iovec iov = {pkt, n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof cm.buf;
    *fd = -1;
    ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) return r;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int)) && *fd < 0)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    return r;
}

static void on_ctl(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    char pkt[256];
    for (int i = 0; i < 256 && s->sess; i++) {
        int mfd;
        ssize_t n = ctl_recv(fd, pkt, sizeof pkt, &mfd);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* init is gone; the pidfd event ends the session */
            if (mfd >= 0) close(mfd);
            event_del(s->sess->ctl_ev);
            return;
        }
        struct sbx_msg_hdr h;
        const void *pl;
        if (sbx_msg_decode(pkt, (size_t)n, &h, &pl) < 0 || h.len != 0) {
            log_warn("bad message from init", "sandbox=%s bytes=%zd", s->id, n);
            if (mfd >= 0) close(mfd);
            continue;
        }
        if (!sbx_pty_on_msg(s, h.type, h.id, h.a, h.b, mfd)) /* takes mfd */
            sbx_cmd_on_msg(s, h.type, h.id, h.a, h.b);
    }
}

static void on_init_exit(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    if (!s->sess) return;
    if (s->sess->stopping) { /* the SIGKILL of a stop */
        session_end(s, s->sess->stopping, false);
        return;
    }
    log_warn("sandbox init exited", "sandbox=%s name=%s", s->id, s->name);
    session_end(s, "init_exited", false);
}

static struct sbx_cg_limits limits_of(const struct sbx *s)
{
    struct sbx_cg_limits l = {0};
    l.memory_bytes = s->memory_mb * 1024 * 1024;
    l.pids_max = s->pids_max;
    l.cpu_period_us = 100000;
    l.cpu_quota_us = s->vcpus * 100000;
    return l;
}

static void free_layers(char **layers, size_t n)
{
    for (size_t i = 0; i < n; i++) free(layers[i]);
    free(layers);
}

static int session_start(struct sbx *s, struct err *err)
{
    struct sbxd *d = s->d;
    char **layers = NULL;
    size_t nlayers = 0;
    json_t *icfg = NULL;
    int host = sbx_image_session(d, s->image, &layers, &nlayers, &icfg, err);
    if (host < 0) return -1;
    json_decref(s->image_config);
    s->image_config = icfg;
    if (host) {
        /* host configuration under /usr (/usr/local/etc) stays hidden, whatever the
         * sandbox's layer holds from before */
        char *tree = s->fs_dir ? xstrdup(s->fs_dir) : xasprintf("%s/fs", s->dir);
        int me = sbx_image_mask_usr(tree, s->data_base ? s->data_base : s->uid_base, err);
        free(tree);
        if (me < 0) return -1;
    }
    struct sbx_cg_limits l = limits_of(s);
    struct sbx_cgroup *cg = sbx_cg_create(d->cg, s->id, &l, err);
    if (!cg) {
        free_layers(layers, nlayers);
        return -1;
    }
    char *image_dir = xasprintf("%s/%s", d->image_dir, s->image);
    struct sbx_spawn_params p = {
        .plan = {.sandbox_dir = s->dir, .image_dir = image_dir, .usr_dir = host ? "/usr" : NULL,
                 .layers_dir = d->layers.dir, .layers = (const char *const *)layers,
                 .nlayers = nlayers, .uid_base = s->uid_base,
                 .tmp_bytes = (uint64_t)s->memory_mb * 1024 * 1024},
        .hostname = hostname_of(s),
        .cg = cg,
        .timeout_ms = d->cfg.start_timeout_ms,
        .nofile = (uint32_t)s->nofile,
        .setuid = s->allow_privilege_escalation,
    };
    p.plan.fs_dir = s->fs_dir;
    p.plan.data_base = s->data_base;
    if (sbx_mounts_acquire(s, &p.plan, err) < 0) {
        sbx_cg_destroy(cg);
        free(image_dir);
        free_layers(layers, nlayers);
        return -1;
    }
    struct sbx_session *ss = xcalloc(1, sizeof *ss);
    int64_t t0 = clock_mono_ms();
    int rc = sbx_session_spawn(&p, &ss->proc, err);
    free(image_dir);
    free_layers(layers, nlayers);
    if (rc < 0) {
        sbx_cg_destroy(cg);
        free(ss);
        sbx_commits_run(d, sbx_mounts_release(s));
        log_error("sandbox start failed", "sandbox=%s error=\"%s\"", s->id, err->msg);
        return -1;
    }
    ss->sbx = s;
    ss->cg = cg;
    ss->fs.rootfd = ss->proc.rootfd;
    ss->fs.uid_base = s->uid_base;
    if (sbx_net_session_start(s, ss, err) < 0) { /* its veth, proxy context, trust store */
        sbx_session_kill(&ss->proc, 1000);
        sbx_cg_destroy(cg);
        free(ss);
        sbx_commits_run(d, sbx_mounts_release(s));
        log_error("sandbox start failed", "sandbox=%s error=\"%s\"", s->id, err->msg);
        return -1;
    }
    ss->started_at = clock_now_ms();
    ss->cpu_seen_mono = clock_mono_ms();
    uuid_v7(ss->id);
    ss->ctl_ev = event_new(d->base, ss->proc.ctl, EV_READ | EV_PERSIST, on_ctl, s);
    ss->pid_ev = event_new(d->base, ss->proc.pidfd, EV_READ, on_init_exit, s);
    event_add(ss->ctl_ev, NULL);
    event_add(ss->pid_ev, NULL);
    s->sess = ss;
    s->state = SBX_RUNNING;
    s->session_seq++;
    s->started_at = ss->started_at;
    s->updated_at = ss->started_at;
    s->stop_reason[0] = '\0';
    arm_timeout(s);
    save_or_log(s);
    log_info("sandbox session started", "sandbox=%s name=%s session=%s ms=%lld", s->id, s->name,
             ss->id, (long long)(clock_mono_ms() - t0));
    return 0;
}

/* ------------------------------------------------------------------ teardown */

/*
 * Once a session's init has exited, what is left is slow I/O: dropping the last pins
 * of its overlays (spawn.h) unmounts them, and an overlay's unmount syncs its upper
 * file system, the whole store; and read-write drives are committed, which writes back
 * their dirty data. With gigabytes unwritten that takes seconds, so a teardown runs on
 * a worker thread. The sandbox is recorded stopped before (a stable state: init is
 * gone), and stays busy until the job is back on the loop.
 */
struct sbx_teardown {
    struct sbxd *d;
    char id[40];
    int pins[SBX_PINS];
    struct sbx_commits *commits;
    int64_t t0;
    bool worked; /* teardown_work ran; read on the loop once the thread is done with it */
};

static void quiet_soon(struct sbxd *d)
{
    if (d->quiet_ev) event_active(d->quiet_ev, EV_TIMEOUT, 0);
}

static void teardown_work(void *arg)
{
    struct sbx_teardown *t = arg;
    for (int i = 0; i < SBX_PINS; i++)
        if (t->pins[i] >= 0) close(t->pins[i]);
    sbx_commits_work(t->d->storage, t->commits);
    t->worked = true;
}

static void teardown_done(void *arg)
{
    struct sbx_teardown *t = arg;
    struct sbxd *d = t->d;
    sbx_commits_finish(d, t->commits);
    struct sbx *s = sbx_find_id(d, t->id);
    if (s && s->teardown == t) s->teardown = NULL;
    log_info("sandbox torn down", "sandbox=%s ms=%lld", t->id,
             (long long)(clock_mono_ms() - t->t0));
    free(t);
    quiet_soon(d);
}

/* The worker was freed before it handed the job back (shutdown): finish it here. */
static void teardown_drop(void *arg)
{
    struct sbx_teardown *t = arg;
    if (!t->worked) teardown_work(t);
    teardown_done(t);
}

/* Unmount (close the pins) and commit, on the worker; `now`: here, before returning. */
static void teardown(struct sbx *s, const int pins[SBX_PINS], struct sbx_commits *c, bool now)
{
    struct sbxd *d = s->d;
    struct sbx_teardown *t = xcalloc(1, sizeof *t);
    t->d = d;
    snprintf(t->id, sizeof t->id, "%s", s->id);
    memcpy(t->pins, pins, sizeof t->pins);
    t->commits = c;
    t->t0 = clock_mono_ms();
    struct err err = ERR_INIT;
    if (!now && !d->td_worker && !(d->td_worker = proxy_worker_new(d->base, 1, &err)))
        log_warn("no teardown thread; tearing down on the loop", "error=\"%s\"", err.msg);
    if (now || !d->td_worker) {
        teardown_work(t);
        teardown_done(t);
        return;
    }
    s->teardown = t;
    proxy_worker_submit(d->td_worker, teardown_work, teardown_done, teardown_drop, t);
}

/* Wait for teardowns under way (their threads finish them), then run what waited. */
static void teardowns_close(struct sbxd *d)
{
    proxy_worker_free(d->td_worker);
    d->td_worker = NULL;
}

/* ------------------------------------------------------------------ waiting */

struct sbx_waiter {
    struct sbx_waiter *prev, *next;
    char id[40];
    sbx_quiet_fn fn;
    void *arg;
};

bool sbx_busy(const struct sbx *s)
{
    return s->teardown || (s->sess && s->sess->stopping);
}

struct sbx_waiter *sbx_wait_quiet(struct sbx *s, sbx_quiet_fn fn, void *arg)
{
    struct sbxd *d = s->d;
    struct sbx_waiter *w = xcalloc(1, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", s->id);
    w->fn = fn;
    w->arg = arg;
    w->prev = d->waiters_last;
    if (d->waiters_last)
        d->waiters_last->next = w;
    else
        d->waiters = w;
    d->waiters_last = w;
    if (!sbx_busy(s)) quiet_soon(d);
    return w;
}

static void waiter_unlink(struct sbxd *d, struct sbx_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        d->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        d->waiters_last = w->prev;
}

void sbx_wait_cancel(struct sbxd *d, struct sbx_waiter *w)
{
    waiter_unlink(d, w);
    free(w);
}

/* Run, oldest first, every waiter whose sandbox is no longer busy (or is gone). A
 * waiter may delete sandboxes, start sessions or wait again: the list is searched
 * afresh each time. */
static void on_quiet(evutil_socket_t fd, short what, void *arg)
{
    struct sbxd *d = arg;
    for (;;) {
        struct sbx_waiter *w = d->waiters;
        for (; w; w = w->next) {
            struct sbx *s = sbx_find_id(d, w->id);
            if (!s || !sbx_busy(s)) break;
        }
        if (!w) return;
        waiter_unlink(d, w);
        w->fn(d, w->id, w->arg);
        free(w);
    }
}

/* The session is over (init exited or was killed): clean up and record it. now: tear
 * it down before returning (shutdown), else on the teardown thread. */
static void session_end(struct sbx *s, const char *reason, bool now)
{
    struct sbx_session *ss = s->sess;
    if (!ss) return;
    event_free(ss->ctl_ev);
    event_free(ss->pid_ev);
    if (ss->kill_ev) event_free(ss->kill_ev);
    int pins[SBX_PINS];
    sbx_session_unpin(&ss->proc, pins); /* unmounting is the teardown's */
    sbx_session_kill(&ss->proc, 1000);  /* reaps; kills if still there */
    sbx_net_session_end(s, ss);
    int e = sbx_cg_destroy(ss->cg);
    if (e < 0)
        log_warn("cgroup not removed", "sandbox=%s error=\"%s\"", s->id, strerror(-e));
    s->sess = NULL;
    free(ss);
    struct sbx_commits *commits = sbx_mounts_release(s); /* read-write drives: committed */
    sbx_cmds_session_ended(s);
    sbx_ptys_session_ended(s);
    sbx_session_notify(s->d, s);
    s->state = SBX_STOPPED;
    s->stopped_at = s->updated_at = clock_now_ms();
    s->expires_at = 0;
    snprintf(s->stop_reason, sizeof s->stop_reason, "%s", reason);
    event_del(s->timeout_ev);
    if (!s->deleting) save_or_log(s); /* (a deleted sandbox's row is gone next) */
    log_info("sandbox stopped", "sandbox=%s name=%s reason=%s", s->id, s->name, reason);
    teardown(s, pins, commits, now);
}

static void arm_timeout(struct sbx *s)
{
    event_del(s->timeout_ev);
    if (s->timeout_ms <= 0 || s->state != SBX_RUNNING) {
        s->expires_at = 0;
        return;
    }
    int64_t now = clock_now_ms();
    if (s->expires_at <= now) s->expires_at = now + s->timeout_ms;
    int64_t left = s->expires_at - now;
    struct timeval tv = {(time_t)(left / 1000), (suseconds_t)((left % 1000) * 1000)};
    event_add(s->timeout_ev, &tv);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    if (s->state != SBX_RUNNING || sbx_busy(s)) return;
    struct err err = ERR_INIT;
    log_info("sandbox timed out", "sandbox=%s name=%s action=%s", s->id, s->name,
             s->on_timeout_pause ? "pause" : "stop");
    if (!s->on_timeout_pause) {
        sbx_stop_begin(s, "timeout");
    } else if (sbx_pause(s, &err) < 0) {
        log_error("timeout action failed; stopping", "sandbox=%s error=\"%s\"", s->id, err.msg);
        sbx_stop_begin(s, "timeout");
    }
}

/* ------------------------------------------------------------------ lifecycle */

static void on_kill_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct sbx *s = arg;
    if (!s->sess) return;
    log_warn("init did not exit in time", "sandbox=%s", s->id);
    session_end(s, s->sess->stopping, false); /* the cgroup kill catches stragglers */
}

void sbx_stop_begin(struct sbx *s, const char *reason)
{
    struct sbx_session *ss = s->sess;
    if (!ss || ss->stopping) return;
    ss->stopping = reason;
    event_del(s->timeout_ev);
    if (sbx_cg_frozen(ss->cg)) sbx_cg_thaw(ss->cg, SBX_FREEZE_TIMEOUT_MS);
    /* killing init tears down its pid namespace; its pidfd then ends the session */
    int e = sbx_session_signal_kill(&ss->proc);
    if (e < 0)
        log_warn("cannot signal init", "sandbox=%s error=\"%s\"", s->id, strerror(-e));
    ss->kill_ev = evtimer_new(s->d->base, on_kill_timeout, s);
    struct timeval tv = {SBX_STOP_TIMEOUT_MS / 1000, (SBX_STOP_TIMEOUT_MS % 1000) * 1000};
    evtimer_add(ss->kill_ev, &tv);
}

int sbx_stop(struct sbx *s, const char *reason, struct err *err)
{
    if (!s->sess) return 0;
    if (s->sess->stopping) reason = s->sess->stopping;
    if (sbx_cg_frozen(s->sess->cg)) sbx_cg_thaw(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
    /* killing init tears down its pid namespace; the cgroup kill catches stragglers */
    if (sbx_session_kill(&s->sess->proc, SBX_STOP_TIMEOUT_MS) < 0)
        log_warn("init did not exit in time", "sandbox=%s", s->id);
    session_end(s, reason, true);
    return 0;
}

int sbx_pause(struct sbx *s, struct err *err)
{
    if (s->state == SBX_PAUSED) return 0;
    if (s->state != SBX_RUNNING)
        return err_set(err, 409, "sandbox_stopped", "", "sandbox %s is stopped; nothing to pause",
                       s->name);
    int64_t t0 = clock_mono_ms();
    int e = sbx_cg_freeze(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
    if (e < 0) {
        sbx_cg_thaw(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
        return err_set(err, 500, "pause_failed", "", "could not freeze sandbox %s: %s", s->name,
                       strerror(-e));
    }
    s->state = SBX_PAUSED;
    s->updated_at = clock_now_ms();
    s->expires_at = 0;
    event_del(s->timeout_ev);
    save_or_log(s);
    log_info("sandbox paused", "sandbox=%s name=%s ms=%lld", s->id, s->name,
             (long long)(clock_mono_ms() - t0));
    return 0;
}

int sbx_resume(struct sbx *s, struct err *err)
{
    if (s->state == SBX_RUNNING) return 0;
    if (s->state == SBX_STOPPED) return session_start(s, err);
    int e = sbx_cg_thaw(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
    if (e < 0)
        return err_set(err, 500, "resume_failed", "", "could not thaw sandbox %s: %s", s->name,
                       strerror(-e));
    s->state = SBX_RUNNING;
    s->updated_at = clock_now_ms();
    s->expires_at = 0; /* a fresh full timeout: the configured one, never a default */
    arm_timeout(s);
    save_or_log(s);
    return 0;
}

int sbx_extend(struct sbx *s, int64_t ms, struct err *err)
{
    if (s->state != SBX_RUNNING)
        return err_set(err, 409, "sandbox_not_running", "",
                       "sandbox %s is %s; resume it before extending its timeout", s->name,
                       sbx_state_name(s->state));
    if (s->timeout_ms <= 0) return 0; /* no timeout: nothing to extend */
    int64_t now = clock_now_ms();
    if (s->expires_at < now) s->expires_at = now;
    s->expires_at += ms;
    s->updated_at = now;
    arm_timeout(s);
    save_or_log(s);
    return 0;
}

int sbx_ensure_running(struct sbx *s, const char *session, struct err *err)
{
    if (sbx_busy(s)) /* callers that can wait park first (sbx_api_park) */
        return err_set(err, 409, "busy", "", "sandbox %s is stopping; try again when its stop "
                       "has finished", s->name);
    if (session && *session) {
        if (!s->sess || strcmp(s->sess->id, session) != 0)
            return err_set(err, 409, "session_ended", "session",
                           "session %s of sandbox %s has ended; an explicit session never "
                           "resumes",
                           session, s->name);
        if (s->state == SBX_PAUSED)
            return err_set(err, 409, "session_paused", "session",
                           "session %s of sandbox %s is paused; an explicit session never "
                           "resumes",
                           session, s->name);
        return 0;
    }
    if (s->state == SBX_RUNNING) return 0;
    log_info("lazy resume", "sandbox=%s from=%s", s->id, sbx_state_name(s->state));
    return sbx_resume(s, err);
}

static void delete_when_stopped(struct sbxd *d, const char *id, void *arg)
{
    struct sbx *s = sbx_find_id(d, id);
    struct err err = ERR_INIT;
    if (!s || !s->deleting) return;
    if (sbx_delete(s, &err) < 0) {
        log_error("cannot delete sandbox", "sandbox=%s error=\"%s\"", s->id, err.msg);
        s->deleting = false; /* it is still there: show it again */
        save_or_log(s);
    }
}

int sbx_delete(struct sbx *s, struct err *err)
{
    struct sbxd *d = s->d;
    if (s->sess || sbx_busy(s)) { /* its tree is in use until the stop is over */
        if (!s->deleting) sbx_wait_quiet(s, delete_when_stopped, NULL);
        s->deleting = true;
        sbx_stop_begin(s, "deleted");
        return 0;
    }
    if (sbx_store_delete(d->store, s->id, err) < 0) return -1;
    sbx_net_forget(s);
    sbx_upper_remove(s);
    char trash[PATH_MAX];
    snprintf(trash, sizeof trash, "%s/%s", d->trash_dir, s->id);
    if (rename(s->dir, trash) == 0)
        clean_later(d, s->id);
    else if (errno != ENOENT)
        log_warn("cannot move sandbox files to trash", "sandbox=%s error=\"%s\"", s->id,
                 strerror(errno));
    log_info("sandbox deleted", "sandbox=%s name=%s", s->id, s->name);
    unlink_sbx(d, s);
    sbx_free(s);
    return 0;
}

/* ------------------------------------------------------------------ create / update */

/* The most MiB a tree may be limited to: the store's size (1 TiB when unknown). */
static int64_t disk_max_mb(const struct sbxd *d)
{
    int64_t mb = (int64_t)(d->storage->size >> 20);
    return mb >= SBX_DISK_MIN_MB && mb < SBX_DISK_MAX_MB ? mb : SBX_DISK_MAX_MB;
}

/* A quarter of the store, at most 10 GiB: one tenant cannot fill it for the others. */
static int64_t disk_default_mb(const struct sbxd *d)
{
    int64_t mb = disk_max_mb(d) / 4;
    return mb < SBX_DISK_MIN_MB ? SBX_DISK_MIN_MB
           : mb > SBX_DISK_DEFAULT_MAX_MB ? SBX_DISK_DEFAULT_MAX_MB : mb;
}

/* SBX_NOFILE_DEFAULT, or on a host whose file table is small, the largest power of
 * two that keeps pids x nofile within the daemon's budget (at least SBX_NOFILE_MIN). */
static int64_t nofile_default(const struct sbxd *d, int64_t pids)
{
    int64_t n = SBX_NOFILE_DEFAULT;
    while (n > SBX_NOFILE_MIN && n * pids > d->files_budget)
        n /= 2;
    return n;
}

/* Fill the resources a sandbox did not name (nofile, disk_mb: 0). */
static void resources_default(struct sbx *s)
{
    if (s->nofile <= 0) s->nofile = nofile_default(s->d, s->pids_max);
    if (s->disk_mb <= 0) s->disk_mb = disk_default_mb(s->d);
}

static int parse_resources(const json_t *res, struct sbx *s, struct err *err)
{
    if (!res || json_is_null(res)) return 0;
    if (!json_is_object(res)) return err_invalid(err, "resources", "resources must be an object");
    static const char *const known[] = {"vcpus", "memory", "pids", "nofile", "disk_mb", NULL};
    if (sbx_json_known(res, known, "resources", err) < 0) return -1;
    if (sbx_json_int(res, "vcpus", 1, SBX_VCPUS_MAX, &s->vcpus, err) < 0 ||
        sbx_json_int(res, "memory", SBX_MEMORY_MIN_MB, SBX_MEMORY_MAX_MB, &s->memory_mb, err) <
            0 ||
        sbx_json_int(res, "pids", SBX_PIDS_MIN, SBX_PIDS_MAX, &s->pids_max, err) < 0 ||
        sbx_json_int(res, "nofile", SBX_NOFILE_MIN, SBX_NOFILE_MAX, &s->nofile, err) < 0 ||
        sbx_json_int(res, "disk_mb", SBX_DISK_MIN_MB, disk_max_mb(s->d), &s->disk_mb, err) < 0)
        return err_wrap(err, "resources");
    return 0;
}

/* Every process may hold nofile open files, so pids x nofile bounds what one sandbox
 * takes of the host's file table (fs.file-max, shared by every process on the host).
 * res: the request's resources, to name the field it got wrong. */
static int check_files_budget(const struct sbx *s, const json_t *res, struct err *err)
{
    if (s->pids_max * s->nofile <= s->d->files_budget) return 0;
    return err_invalid(err, json_object_get(res, "nofile") ? "nofile" : "pids",
                       "resources: pids x nofile (%lld x %lld) must be at most %lld on this "
                       "host (a quarter of fs.file-max); lower pids or nofile",
                       (long long)s->pids_max, (long long)s->nofile,
                       (long long)s->d->files_budget);
}

/* RLIMIT_NOFILE of every process of s's session, with its cgroup frozen (if it is not
 * already) so that no fork slips between reading the list and the update. */
static int set_nofile_live(struct sbx *s, int64_t n, struct err *err)
{
    struct sbx_cgroup *cg = s->sess->cg;
    char procs[SBX_CG_PROCS_MAX][512];
    if (sbx_cg_procs_files(cg, procs, SBX_CG_PROCS_MAX) < 1) return err_internal(err, "no cgroup.procs");
    bool thaw = !sbx_cg_frozen(cg);
    int e = thaw ? sbx_cg_freeze(cg, SBX_FREEZE_TIMEOUT_MS) : 0;
    FILE *f = e == 0 ? fopen(procs[0], "re") : NULL;
    if (!f && e == 0) e = -errno;
    struct rlimit rl = {(rlim_t)n, (rlim_t)n};
    long pid;
    while (f && fscanf(f, "%ld", &pid) == 1)
        if (prlimit((pid_t)pid, RLIMIT_NOFILE, &rl, NULL) < 0 && errno != ESRCH && !e) e = -errno;
    if (f) fclose(f);
    if (thaw) sbx_cg_thaw(cg, SBX_FREEZE_TIMEOUT_MS);
    if (e < 0)
        return err_set(err, 500, "cgroup_failed", "", "cannot set RLIMIT_NOFILE of sandbox %s: %s",
                       s->name, strerror(-e));
    return 0;
}

/* "region": where the client wants the sandbox. One host is one region, so it is only
 * recorded (the create's, else a fork's source's, else SBX_REGION_DEFAULT). */
static int parse_region(const json_t *body, const struct sbx *fork_from, char *out, size_t n,
                        struct err *err)
{
    const char *v;
    if (sbx_json_str(body, "region", SBX_REGION_MAX, &v, err) < 0) return -1;
    if (!v) {
        snprintf(out, n, "%s", fork_from ? fork_from->region : SBX_REGION_DEFAULT);
        return 0;
    }
    bool ok = *v != '\0';
    for (const char *p = v; *p && ok; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-';
    if (!ok)
        return err_invalid(err, "region", "region must be 1-%d characters of a-z 0-9 -",
                           SBX_REGION_MAX);
    snprintf(out, n, "%s", v);
    return 0;
}

static int parse_on_timeout(const json_t *body, bool *pause, struct err *err)
{
    const char *v;
    if (sbx_json_str(body, "on_timeout", 16, &v, err) < 0) return -1;
    if (!v) return 0;
    if (!strcmp(v, "pause")) *pause = true;
    else if (!strcmp(v, "stop")) *pause = false;
    else return err_invalid(err, "on_timeout", "on_timeout must be \"stop\" or \"pause\"");
    return 0;
}

struct sbx *sbx_create(struct sbxd *d, json_t *body, struct err *err)
{
    return sbx_create_ex(d, body, NULL, err);
}

struct sbx *sbx_create_ex(struct sbxd *d, json_t *body, struct sbx *fork_from, struct err *err)
{
    static const char *const known[] = {"name", "metadata", "env", "resources", "timeout_ms",
                                        "on_timeout", "image", "start", "source", "mounts",
                                        "snapshot_expiration_ms", "network_policy",
                                        "network_id", "ports", "region",
                                        "allow_privilege_escalation", NULL};
    if (!json_is_object(body)) {
        err_invalid(err, "body", "the body must be a JSON object");
        return NULL;
    }
    if (sbx_json_known(body, known, "a sandbox", err) < 0) return NULL;
    const char *name, *image;
    if (sbx_json_str(body, "name", SBX_NAME_MAX, &name, err) < 0 ||
        sbx_json_str(body, "image", 500, &image, err) < 0)
        return NULL;
    if (name && (!sbx_name_valid(name) || uuid_valid(name))) {
        err_invalid(err, "name",
                    "name must be 1-%d characters of A-Z a-z 0-9 . _ - starting with a letter or "
                    "digit (and not look like an id)",
                    SBX_NAME_MAX);
        return NULL;
    }
    /* the image: "image", or an image source's "image" (which must agree) */
    const char *image_field = "image";
    json_t *src0 = json_object_get(body, "source");
    if (!fork_from && json_is_object(src0) &&
        json_is_string(json_object_get(src0, "type")) &&
        !strcmp(json_string_value(json_object_get(src0, "type")), "image") &&
        json_is_string(json_object_get(src0, "image"))) {
        const char *si = json_string_value(json_object_get(src0, "image"));
        if (image && strcmp(image, si) != 0) {
            err_invalid(err, "source.image", "source.image and image name different images");
            return NULL;
        }
        image = si;
        image_field = "source.image";
    }
    char image_dir[72];
    if (sbx_image_resolve(d, image, image_field, image_dir, sizeof image_dir, err) < 0)
        return NULL;
    json_t *meta = json_object_get(body, "metadata"), *env = json_object_get(body, "env");
    if (meta && !json_is_null(meta) && sbx_validate_metadata(meta, "metadata", err) < 0)
        return NULL;
    if (env && !json_is_null(env) && sbx_validate_env(env, "env", err) < 0) return NULL;
    bool start = true;
    if (sbx_json_bool(body, "start", &start, err) < 0) return NULL;
    json_t *source = json_object_get(body, "source");
    if (source && json_is_null(source)) source = NULL;
    if (source && !fork_from && sbx_source_check(source, err) < 0) return NULL;

    char id[UUID_STR_LEN];
    uuid_v7(id);
    struct sbx *s = sbx_alloc(d, id);
    s->vcpus = 1;
    s->memory_mb = 2048;
    s->pids_max = 1024;
    s->timeout_ms = SBX_DEFAULT_TIMEOUT_MS;
    s->snap_expiration_ms = -1;
    json_t *res = json_object_get(body, "resources");
    if (parse_resources(res, s, err) < 0) goto fail;
    resources_default(s);
    if (check_files_budget(s, res, err) < 0 ||
        sbx_json_int(body, "timeout_ms", 0, SBX_TIMEOUT_MAX_MS, &s->timeout_ms, err) < 0 ||
        parse_on_timeout(body, &s->on_timeout_pause, err) < 0 ||
        sbx_json_bool(body, "allow_privilege_escalation", &s->allow_privilege_escalation, err) < 0 ||
        parse_region(body, fork_from, s->region, sizeof s->region, err) < 0 ||
        sbx_ext_parse(s, body, err) < 0 || sbx_net_parse(s, body, fork_from, err) < 0)
        goto fail;
    if (name)
        snprintf(s->name, sizeof s->name, "%s", name);
    else
        snprintf(s->name, sizeof s->name, "sbx-%.8s%.4s", id + 24, id + 9);
    if (sbx_find(d, s->name)) {
        err_set(err, 409, "name_taken", "name", "a sandbox named \"%s\" already exists", s->name);
        goto fail;
    }
    if (d->count >= d->cfg.max_sandboxes) {
        err_set(err, 429, "too_many_sandboxes", "",
                "this daemon holds its limit of %d sandboxes; delete some first",
                d->cfg.max_sandboxes);
        goto fail;
    }
    int se = next_slot(d, &s->slot);
    if (se == -EIO) {
        err_internal(err, "cannot reserve a uid range in the host's table");
        goto fail;
    }
    if (se < 0 || sbx_idmap_host(d->cfg.uid_first, s->slot, 0, &s->uid_base) < 0) {
        err_set(err, 429, "too_many_sandboxes", "", "no free uid range left");
        goto fail;
    }
    /* a new tree (created, forked or restored) needs room to be written to; refused
     * before anything is made, so a full store leaves nothing half-made */
    int64_t room = sbx_storage_free(d->storage);
    if (room >= 0 && room < SBX_STORE_MIN_FREE) {
        err_set(err, 507, "no_space", "",
                "the sandbox store has %lld MiB free, less than the %d MiB a new sandbox "
                "needs; delete sandboxes, snapshots or drives",
                (long long)(room >> 20), SBX_STORE_MIN_FREE >> 20);
        goto fail;
    }
    snprintf(s->image, sizeof s->image, "%s", image_dir);
    s->metadata = meta && !json_is_null(meta) ? json_deep_copy(meta) : json_object();
    s->env = env && !json_is_null(env) ? json_deep_copy(env) : json_object();
    s->created_at = s->updated_at = clock_now_ms();
    snprintf(s->stop_reason, sizeof s->stop_reason, "created");
    s->data_base = s->uid_base;
    if (sbx_upper_make(s, fork_from ? NULL : source, fork_from, err) < 0) goto fail;
    if (s->origin && json_is_true(json_object_get(s->origin, "pending"))) {
        /* git and tarball sources run inside: the sandbox starts, and stops after if asked */
        if (!start) json_object_set_new(s->origin, "stop_after", json_true());
        start = true;
    }
    if (make_dirs(s, err) < 0) goto fail_dir;
    /* A started sandbox is saved once, by session_start(); a crash before that leaves
     * only a directory without a row, which the next start-up moves to the trash. */
    if (!start && sbx_save(s, err) < 0) goto fail_dir;
    link_sbx(d, s);
    log_info("sandbox created", "sandbox=%s name=%s slot=%u", s->id, s->name, s->slot);
    if (start && session_start(s, err) < 0) {
        struct err ignored = ERR_INIT;
        sbx_delete(s, &ignored);
        return NULL;
    }
    return s;
fail_dir: {
    char trash[PATH_MAX];
    snprintf(trash, sizeof trash, "%s/%s", d->trash_dir, s->id);
    if (rename(s->dir, trash) == 0) clean_later(d, s->id);
    sbx_upper_remove(s);
}
fail:
    sbx_free(s);
    return NULL;
}

int sbx_update(struct sbx *s, json_t *body, struct err *err)
{
    static const char *const known[] = {"metadata", "env", "resources", "timeout_ms",
                                        "on_timeout", "mounts", "snapshot_expiration_ms",
                                        "network_policy", "network_id", "ports", NULL};
    if (!json_is_object(body)) return err_invalid(err, "body", "the body must be a JSON object");
    if (sbx_json_known(body, known, "a sandbox update", err) < 0) return -1;
    json_t *meta = json_object_get(body, "metadata"), *env = json_object_get(body, "env");
    if (meta && sbx_validate_metadata(meta, "metadata", err) < 0) return -1;
    if (env && sbx_validate_env(env, "env", err) < 0) return -1;
    struct sbx tmp = *s;
    if (parse_resources(json_object_get(body, "resources"), &tmp, err) < 0 ||
        check_files_budget(&tmp, json_object_get(body, "resources"), err) < 0 ||
        sbx_json_int(body, "timeout_ms", 0, SBX_TIMEOUT_MAX_MS, &tmp.timeout_ms, err) < 0 ||
        parse_on_timeout(body, &tmp.on_timeout_pause, err) < 0)
        return -1;
    bool limits = tmp.vcpus != s->vcpus || tmp.memory_mb != s->memory_mb ||
                  tmp.pids_max != s->pids_max;
    bool nofile_live = tmp.nofile != s->nofile && s->sess, disk = tmp.disk_mb != s->disk_mb;
    /* New limits reach a running session first: when the kernel refuses one (say, a
     * memory limit below what is in use), nothing changes and the caller is told. */
    struct sbx_cg_limits old_limits = limits_of(s);
    if (limits && s->sess) {
        struct sbx_cg_limits l = limits_of(&tmp);
        if (sbx_cg_set_limits(s->sess->cg, &l, err) < 0) {
            struct err ignored = ERR_INIT;
            sbx_cg_set_limits(s->sess->cg, &old_limits, &ignored);
            return err_wrap(err, "resources not changed");
        }
    }
    /* the tree's quota applies at once too, running or not (a limit below what the
     * tree holds already only stops further writes) */
    if ((nofile_live && set_nofile_live(s, tmp.nofile, err) < 0) ||
        (disk && sbx_disk_apply(s, tmp.disk_mb, err) < 0) || sbx_ext_parse(s, body, err) < 0 ||
        sbx_net_update(s, body, err) < 0) { /* applied live to a running session */
        struct err ignored = ERR_INIT;
        if (limits && s->sess) sbx_cg_set_limits(s->sess->cg, &old_limits, &ignored);
        if (nofile_live) set_nofile_live(s, s->nofile, &ignored);
        if (disk) sbx_disk_apply(s, s->disk_mb, &ignored);
        return -1;
    }
    s->vcpus = tmp.vcpus;
    s->memory_mb = tmp.memory_mb;
    s->pids_max = tmp.pids_max;
    s->nofile = tmp.nofile;
    s->disk_mb = tmp.disk_mb;
    s->on_timeout_pause = tmp.on_timeout_pause;
    if (meta) {
        json_decref(s->metadata);
        s->metadata = json_deep_copy(meta);
    }
    if (env) {
        json_decref(s->env);
        s->env = json_deep_copy(env);
    }
    if (json_object_get(body, "timeout_ms") && tmp.timeout_ms != s->timeout_ms) {
        s->timeout_ms = tmp.timeout_ms;
        s->expires_at = 0; /* restart the clock with the new timeout */
        arm_timeout(s);
    }
    s->updated_at = clock_now_ms();
    return sbx_save(s, err);
}

/* ------------------------------------------------------------------ JSON */

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

json_t *sbx_json(struct sbx *s, bool full)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(s->id));
    json_object_set_new(o, "name", json_string(s->name));
    json_object_set_new(o, "state", json_string(sbx_state_name(s->state)));
    json_object_set_new(o, "metadata", json_deep_copy(s->metadata));
    json_t *keys = json_array();
    for (void *it = json_object_iter(s->env); it; it = json_object_iter_next(s->env, it))
        json_array_append_new(keys, json_string(json_object_iter_key(it)));
    json_object_set_new(o, "env_keys", keys);
    json_t *res = json_object();
    json_object_set_new(res, "vcpus", json_integer(s->vcpus));
    json_object_set_new(res, "memory", json_integer(s->memory_mb));
    json_object_set_new(res, "pids", json_integer(s->pids_max));
    json_object_set_new(res, "nofile", json_integer(s->nofile));
    json_object_set_new(res, "disk_mb", json_integer(s->disk_mb));
    json_object_set_new(o, "resources", res);
    json_object_set_new(o, "disk_enforced", json_boolean(s->disk_enforced));
    json_object_set_new(o, "timeout_ms", json_integer(s->timeout_ms));
    json_object_set_new(o, "on_timeout", json_string(s->on_timeout_pause ? "pause" : "stop"));
    json_object_set_new(o, "allow_privilege_escalation",
                        json_boolean(s->allow_privilege_escalation));
    char iname[900];
    sbx_image_name(s->d, s->image, iname, sizeof iname);
    json_object_set_new(o, "image", json_string(iname));
    json_object_set_new(o, "region", json_string(s->region));
    json_object_set_new(o, "created_at", iso(s->created_at));
    json_object_set_new(o, "updated_at", iso(s->updated_at));
    json_object_set_new(o, "expires_at", iso(s->expires_at));
    sbx_ext_json(s, o);
    sbx_net_json(s, o, full);
    if (s->sess) {
        json_t *ss = json_object();
        json_object_set_new(ss, "id", json_string(s->sess->id));
        json_object_set_new(ss, "started_at", iso(s->sess->started_at));
        json_object_set_new(o, "session", ss);
    } else {
        json_object_set_new(o, "session", json_null());
        json_object_set_new(o, "stopped_at", iso(s->stopped_at));
        json_object_set_new(o, "stop_reason", json_string(s->stop_reason));
    }
    if (full && s->sess) {
        struct sbx_cg_stats st;
        sbx_cg_stats(s->sess->cg, &st);
        json_t *u = json_object();
        json_object_set_new(u, "memory_bytes", json_integer(st.memory_bytes));
        json_object_set_new(u, "memory_peak_bytes", json_integer(st.memory_peak));
        json_object_set_new(u, "pids", json_integer(st.pids));
        json_object_set_new(u, "oom_kills", json_integer(st.oom_kills));
        if (st.cpu_usage_us >= 0) json_object_set_new(u, "cpu_usage_us", json_integer(st.cpu_usage_us));
        int64_t disk = s->disk_enforced ? sbx_storage_used(s->d->storage, s->fs_dir) : -1;
        if (disk >= 0) json_object_set_new(u, "disk_bytes", json_integer(disk));
        json_object_set_new(u, "cgroup", json_string(sbx_cg_path(s->sess->cg)));
        json_object_set_new(o, "usage", u);
    }
    return o;
}

/* ------------------------------------------------------------------ daemon */

static void load_row(const struct sbx_row *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = sbx_alloc(d, r->id);
    snprintf(s->name, sizeof s->name, "%s", r->name);
    s->slot = (uint32_t)r->slot;
    if (sbx_idmap_host(d->cfg.uid_first, s->slot, 0, &s->uid_base) < 0) {
        log_error("sandbox has a slot outside the uid range; skipped", "sandbox=%s slot=%lld",
                  r->id, (long long)r->slot);
        sbx_free(s);
        return;
    }
    snprintf(s->image, sizeof s->image, "%s", r->image);
    snprintf(s->region, sizeof s->region, "%s", *r->region ? r->region : SBX_REGION_DEFAULT);
    s->metadata = json_loads(r->metadata, 0, NULL);
    s->env = json_loads(r->env, 0, NULL);
    if (!json_is_object(s->metadata)) s->metadata = json_object();
    if (!json_is_object(s->env)) s->env = json_object();
    s->vcpus = r->vcpus;
    s->memory_mb = r->memory_mb;
    s->pids_max = r->pids_max;
    s->timeout_ms = r->timeout_ms;
    s->on_timeout_pause = !strcmp(r->on_timeout, "pause");
    s->created_at = r->created_at;
    s->updated_at = r->updated_at;
    s->started_at = r->started_at;
    s->stopped_at = r->stopped_at;
    s->session_seq = r->session_seq;
    snprintf(s->stop_reason, sizeof s->stop_reason, "%s", r->stop_reason);
    sbx_ext_load(s, r->ext);
    resources_default(s); /* made before nofile and disk_mb existed */
    struct err qerr = ERR_INIT;
    if (sbx_disk_apply(s, s->disk_mb, &qerr) < 0)
        log_warn("disk quota not set", "sandbox=%s error=\"%s\"", s->id, qerr.msg);
    enum sbx_state st = SBX_STOPPED;
    sbx_parse_state(r->state, &st);
    s->state = st; /* fixed up by the caller */
    link_sbx(d, s);
}

static int mkdir_p0700(const char *p)
{
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -errno;
}

/* A quarter of the host's file table (fs.file-max): the most pids x nofile one
 * sandbox may have. A table the kernel does not limit (LONG_MAX) leaves only the memory
 * limit, which the kernel charges open files to. */
static int64_t files_budget(void)
{
    long long max = 0;
    FILE *f = fopen("/proc/sys/fs/file-max", "re");
    if (!f || fscanf(f, "%lld", &max) != 1) max = 0;
    if (f) fclose(f);
    if (max <= 0) max = 1LL << 22; /* unreadable: as on a host with ~40 GB of memory */
    int64_t b = max / 4;
    return b > (int64_t)SBX_PIDS_MAX * SBX_NOFILE_MAX ? (int64_t)SBX_PIDS_MAX * SBX_NOFILE_MAX
                                                       : b;
}

struct sbxd *sbxd_new(struct event_base *base, struct http_server *http,
                      const struct sbxd_config *cfg, struct err *err)
{
    if (geteuid() != 0) {
        err_set(err, 500, "not_root", "",
                "sandboxd needs root (namespaces, mounts, cgroups); run it as root");
        return NULL;
    }
    /* before anything of a tenant is in memory: inits are forked from this */
    int ze = sbx_zygote_start();
    if (ze < 0) log_warn("no zygote; sessions are cloned by the daemon", "error=\"%s\"",
                         strerror(-ze));
    struct sbxd *d = xcalloc(1, sizeof *d);
    d->base = base;
    d->http = http;
    d->cfg = *cfg;
    if (!d->cfg.uid_first) d->cfg.uid_first = SBX_IDMAP_DEFAULT_FIRST;
    if (d->cfg.max_sandboxes <= 0) d->cfg.max_sandboxes = 1000;
    if (!d->cfg.output_limit) d->cfg.output_limit = 1u << 20;
    if (d->cfg.start_timeout_ms <= 0) d->cfg.start_timeout_ms = 10000;
    d->files_budget = files_budget();
    if (sbx_idmap_max_slot(d->cfg.uid_first) < 0) {
        err_invalid(err, "uid_base", "uid base %u leaves no room for a uid range",
                    d->cfg.uid_first);
        goto fail;
    }
    /* create the state folder (and parents), then make it absolute */
    {
        char *p = xstrdup(cfg->state_dir);
        for (char *q = p + 1; *q; q++)
            if (*q == '/') {
                *q = '\0';
                mkdir(p, 0700);
                *q = '/';
            }
        mkdir(p, 0700);
        free(p);
    }
    char real[PATH_MAX];
    if (!realpath(cfg->state_dir, real)) {
        err_set(err, 500, "state_dir", "state_dir", "cannot use state folder %s: %s",
                cfg->state_dir, strerror(errno));
        goto fail;
    }
    if (!sbx_plan_path_ok(real) || strlen(real) > 512) {
        err_invalid(err, "state_dir",
                    "state folder %s must be an absolute path of at most 512 characters of "
                    "[A-Za-z0-9/._+@-] (it ends up in mount options)",
                    real);
        goto fail;
    }
    chmod(real, 0700);
    d->state_dir = xstrdup(real);
    /* before anything of ours: what dead daemons left (this folder's included) */
    if (sbx_daemon_register(cfg->daemons_dir, real, cfg->cgroup_mode, &d->record, err) < 0)
        goto fail;
    d->image_dir = xasprintf("%s/images", real);
    d->sandboxes_dir = xasprintf("%s/sandboxes", real);
    d->trash_dir = xasprintf("%s/trash", real);
    if (mkdir_p0700(d->sandboxes_dir) < 0 || mkdir_p0700(d->trash_dir) < 0 ||
        mkdir_p0700(d->image_dir) < 0) {
        err_internal(err, "cannot create folders under %s: %s", real, strerror(errno));
        goto fail;
    }
    char *db = xasprintf("%s/sandboxd.db", real);
    d->store = sbx_store_open(db, err);
    free(db);
    if (!d->store) goto fail;
    if (sbx_image_ensure_default(d->image_dir, err) < 0) goto fail;
    if (sbx_storage_open(real, cfg->storage_mode, cfg->storage_size, &d->storage, err) < 0)
        goto fail;
    if (sbx_images_open(d, err) < 0) goto fail; /* its layers live in the store */
    struct sbx_pull_opts po = {.auth_file = cfg->registry_auth, .ca_file = cfg->registry_ca,
                               .plain_http = cfg->registry_plain_http,
                               .n_plain_http = cfg->n_registry_plain_http,
                               .stall_sec = cfg->registry_stall_sec};
    if (sbx_pulls_open(d, &po, err) < 0) goto fail; /* uses the layer store */
    char cgname[64];
    snprintf(cgname, sizeof cgname, "rebuno-%012llx", (unsigned long long)sbx_daemon_id(real));
    if (sbx_cg_root_open(cfg->cgroup_mode, cgname, &d->cg, err) < 0) goto fail;
    int swept = sbx_cg_root_sweep(d->cg);
    if (sbx_store_load(d->store, load_row, d, err) < 0) goto fail;
    {
        uint32_t *used = xcalloc((size_t)d->count + 1, sizeof *used);
        size_t nused = 0;
        for (struct sbx *s = d->first; s; s = s->next)
            used[nused++] = s->slot;
        int ue = sbx_uidpool_open(cfg->uid_ranges, real, d->cfg.uid_first,
                                  sbx_idmap_max_slot(d->cfg.uid_first), used, nused, &d->uids, err);
        free(used);
        if (ue < 0) goto fail;
    }
    int recovered = 0;
    for (struct sbx *s = d->first; s; s = s->next) {
        if (s->state == SBX_STOPPED) continue;
        s->state = SBX_STOPPED;
        s->stopped_at = s->updated_at = clock_now_ms();
        s->expires_at = 0;
        snprintf(s->stop_reason, sizeof s->stop_reason, "daemon_restart");
        save_or_log(s);
        recovered++;
    }
    /* directories without a row: a crash between creating and saving a sandbox */
    DIR *sd = opendir(d->sandboxes_dir);
    if (sd) {
        struct dirent *de;
        while ((de = readdir(sd))) {
            if (de->d_name[0] == '.') continue;
            bool known = false;
            for (struct sbx *s = d->first; s && !known; s = s->next)
                known = !strcmp(s->id, de->d_name);
            if (known) continue;
            char from[PATH_MAX], to[PATH_MAX];
            snprintf(from, sizeof from, "%s/%.64s", d->sandboxes_dir, de->d_name);
            snprintf(to, sizeof to, "%s/%.64s", d->trash_dir, de->d_name);
            if (rename(from, to) == 0)
                log_warn("sandbox directory without metadata moved to trash", "dir=%s", from);
        }
        closedir(sd);
    }
    /* finish deletions a previous daemon started */
    DIR *t = opendir(d->trash_dir);
    if (t) {
        struct dirent *de;
        while ((de = readdir(t)))
            if (de->d_name[0] != '.') clean_later(d, de->d_name);
        closedir(t);
    }
    if (sbx_drives_open(d, err) < 0 || sbx_snaps_open(d, err) < 0) goto fail;
    if (sbx_net_open(d, err) < 0) goto fail;
    d->quiet_ev = event_new(base, -1, 0, on_quiet, d);
    struct timeval one = {1, 0};
    d->reap_ev = event_new(base, -1, EV_PERSIST, on_reap, d);
    event_add(d->reap_ev, &one);
    sbx_api_register(d);
    log_info("sandboxd state loaded", "state_dir=%s sandboxes=%d recovered=%d swept_cgroups=%d "
             "cgroup=%s storage=\"%s\"",
             real, d->count, recovered, swept, sbx_cg_root_kind(d->cg) == SBX_CG_V1 ? "v1" : "v2",
             d->storage->how);
    return d;
fail:
    sbxd_free(d);
    return NULL;
}

static void progress(struct sbxd *d)
{
    if (d->cfg.progress) d->cfg.progress(d->cfg.progress_arg);
}

void sbxd_shutdown(struct sbxd *d)
{
    if (!d || d->shutting_down) return;
    d->shutting_down = true;
    sbx_api_shutdown(d);
    struct err err = ERR_INIT;
    for (struct sbx *s = d->first; s; s = s->next)
        if (s->sess) {
            sbx_stop(s, "daemon_shutdown", &err);
            progress(d);
        }
    teardowns_close(d);
    on_quiet(-1, 0, d);
    if (d->reap_ev) event_del(d->reap_ev);
    sbx_net_close(d); /* the proxy's listeners would keep the loop running */
    progress(d);
    sbx_images_close(d); /* so would the import thread's notifications */
    sbx_pulls_close(d);  /* and the pulls' */
    sbx_observers_shutdown(d); /* and the front-ends' */
    sbx_snaps_shutdown(d);
}

void sbxd_free(struct sbxd *d)
{
    if (!d) return;
    struct err err = ERR_INIT;
    for (struct sbx *s = d->first; s; s = s->next)
        if (s->sess) sbx_stop(s, "daemon_shutdown", &err);
    teardowns_close(d);
    on_quiet(-1, 0, d); /* deletions that waited for a stop */
    while (d->waiters) /* (none should be left) */
        sbx_wait_cancel(d, d->waiters);
    if (d->quiet_ev) event_free(d->quiet_ev);
    sbx_sources_close(d);
    sbx_images_close(d);
    sbx_pulls_free(d);
    while (d->first) {
        struct sbx *s = d->first;
        unlink_sbx(d, s);
        sbx_free(s);
    }
    sbx_net_close(d);
    sbx_snaps_close(d);
    sbx_drives_close(d);
    if (d->reap_ev) event_free(d->reap_ev);
    for (int i = 0; i < 50; i++) { /* give cleaners a moment, then leave them to init */
        reap_cleaners();
        bool any = false;
        for (int j = 0; j < MAX_CLEANERS; j++)
            any |= cleaners[j] > 0;
        if (!any) break;
        usleep(20000);
    }
    if (d->cg) {
        sbx_cg_root_remove(d->cg);
        sbx_cg_root_free(d->cg);
    }
    progress(d);
    sbx_uidpool_close(d->uids);
    sbx_store_close(d->store);
    sbx_zygote_stop();
    sbx_storage_close(d->storage);
    sbx_daemon_unregister(d->record); /* last: until now a reaper would have work */
    free(d->state_dir);
    free(d->image_dir);
    free(d->sandboxes_dir);
    free(d->trash_dir);
    sbx_observers_release(d);
    free(d);
}
