/*
 * spawn.c - clone and set up a session's init (see spawn.h).
 *
 * The zygote is single-threaded, so the raw clone3() below (fork-like: no new stack)
 * is safe: no other thread can hold a lock the child would need. (Without a zygote
 * sandboxd clones itself, and its worker threads, sandboxd_int.h, make that a risk: a
 * child stuck on a lock a thread held fails the start after its timeout.) The
 * child never returns into the caller's code paths; it ends in sbx_init_main() or
 * _exit(). The zygote talks to sandboxd over a SOCK_SEQPACKET pair: one fixed-size
 * request (struct zreq), one reply with the pidfd and the control socket attached.
 *
 * Network namespaces come from a small pool the zygote keeps (see "the netns pool"
 * below): making one is the dearest part of the clone, so the zygote makes them while
 * it has nothing else to do and a spawn only enters a ready one.
 */
#include "sandbox/runtime/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include "base/buf.h"
#include "base/clock.h"
#include "sandbox/runtime/caps.h"
#include "sandbox/runtime/idmap.h"
#include "sandbox/runtime/init.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/runtime/seccomp.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

static int pidfd_signal(int pidfd, int sig)
{
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

/* ------------------------------------------------------------------ the child */

static char *title_start, *title_end;

void sbx_spawn_set_title_area(void)
{
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f) return;
    char line[2048];
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    char *p = ok ? strrchr(line, ')') : NULL; /* the name may hold spaces and parens */
    if (!p) return;
    /* after ")" come fields 3..52; arg_start..env_end are fields 48..51 */
    unsigned long long v[52] = {0};
    int field = 3;
    for (char *save = NULL, *t = strtok_r(p + 1, " \n", &save); t && field <= 51;
         t = strtok_r(NULL, " \n", &save), field++)
        v[field] = strtoull(t, NULL, 10);
    if (field <= 51 || !v[48] || v[51] <= v[48]) return;
    title_start = (char *)(uintptr_t)v[48];
    title_end = (char *)(uintptr_t)v[51];
}

static void wipe_title(void)
{
    clearenv();
    if (!title_start || title_end <= title_start) return;
    memset(title_start, 0, (size_t)(title_end - title_start));
    snprintf(title_start, (size_t)(title_end - title_start), "rebuno-init");
    prctl(PR_SET_NAME, "rebuno-init");
}

static void report(int ctl, int e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(int ctl, int e, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct buf b;
    buf_init(&b, 0);
    sbx_msg_encode(&b, SBX_MSG_SETUP_FAILED, 0, e, 0, msg, strlen(msg));
    if (send(ctl, b.data, b.len, MSG_NOSIGNAL) < 0) {
    }
    buf_fini(&b);
}

/* Close every descriptor >= 3 except keep[0..n). */
static void close_except(const int *keep, int n)
{
    int lo = 3;
    for (;;) {
        int next = -1;
        for (int i = 0; i < n; i++)
            if (keep[i] >= lo && (next < 0 || keep[i] < next)) next = keep[i];
        if (next < 0) {
            syscall(SYS_close_range, lo, ~0U, 0);
            return;
        }
        if (next > lo) syscall(SYS_close_range, lo, next - 1, 0);
        lo = next + 1;
    }
}

static int loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int e = 0;
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) e = -errno;
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (!e && ioctl(s, SIOCSIFFLAGS, &ifr) < 0) e = -errno;
    close(s);
    return e;
}

/* A spawn request: what the cloning process needs, flat (it crosses a socket). */
struct zreq {
    uint32_t uid_base, ncg, nofile, setuid;
    uint64_t tmp_bytes;
    char sandbox_dir[1024], image_dir[1024], usr_dir[256], hostname[72];
    char cg[SBX_CG_PROCS_MAX][512]; /* cgroup.procs files the child joins */
    char fs_dir[1024]; /* the upper tree ("" : sandbox_dir/fs) */
    uint32_t data_base, mount_base, nmounts;
    struct {
        char source[1024], target[SBX_MOUNT_PATH_MAX + 1];
        uint32_t readonly;
    } mounts[SBX_MOUNTS_MAX];
    char layers_dir[1024]; /* self-contained image (usr_dir ""): its layers, top first */
    uint32_t nlayers;
    char layers[SBX_PLAN_LAYERS_MAX][65];
};

struct zrep {
    int32_t err, pid;
    char msg[400];
};

static int join_cgroup(const struct zreq *q)
{
    for (uint32_t i = 0; i < q->ncg; i++) {
        int fd = open(q->cg[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0) return -errno;
        int e = write(fd, "0", 1) == 1 ? 0 : -errno;
        close(fd);
        if (e < 0) return e;
    }
    return 0;
}

/* lo_up: the network namespace came from the pool, with loopback already up. */
static void child_main(const struct zreq *q, const struct sbx_plan *plan, int ctl, const int *nsfds,
                       bool lo_up)
{
    int userns = nsfds[SBX_NS_SESSION];
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    wipe_title();
    int keep[2 + SBX_NS_COUNT] = {ctl}, nkeep = 1;
    for (int i = 0; i < SBX_NS_COUNT; i++)
        if (nsfds[i] >= 0) keep[nkeep++] = nsfds[i];
    close_except(keep, nkeep);

    int e = join_cgroup(q);
    if (e < 0) {
        report(ctl, -e, "join the cgroup: %s", strerror(-e));
        _exit(1);
    }
    const struct sbx_op *failed = NULL;
    e = sbx_plan_exec(plan, nsfds, &failed);
    if (e < 0 && failed->kind == SBX_OP_BIND_IN && e == -ENOTDIR)
        report(ctl, -e,
               "the drive mount point /%s passes through a symlink or a file in the sandbox's "
               "files, which a mount never follows; make it a directory, or mount the drive "
               "elsewhere",
               failed->data);
    else if (e < 0)
        report(ctl, -e, "%s %s%s%s: %s", sbx_op_name(failed->kind),
               failed->target ? failed->target : "", failed->kind == SBX_OP_BIND_IN ? "/" : "",
               failed->kind == SBX_OP_BIND_IN ? failed->data : "", strerror(-e));
    if (e < 0) _exit(1);
    for (int i = 1; i < SBX_NS_COUNT; i++)
        if (nsfds[i] >= 0) close(nsfds[i]);
    if (sethostname(q->hostname, strlen(q->hostname)) < 0) {
        report(ctl, errno, "sethostname: %s", strerror(errno));
        _exit(1);
    }
    if (!lo_up && (e = loopback_up()) < 0) {
        report(ctl, -e, "bring up loopback: %s", strerror(-e));
        _exit(1);
    }
    if (unshare(CLONE_NEWCGROUP) < 0) {
        report(ctl, errno, "unshare cgroup namespace: %s", strerror(errno));
        _exit(1);
    }
    /* the host's file table (fs.file-max) is shared: pids x nofile bounds one sandbox.
     * Set while still host root, which may raise the hard limit past the daemon's own;
     * inside, without CAP_SYS_RESOURCE, nothing can raise it again. */
    struct rlimit nofile = {q->nofile, q->nofile};
    if (setrlimit(RLIMIT_NOFILE, &nofile) < 0) {
        report(ctl, errno, "set RLIMIT_NOFILE to %u: %s", q->nofile, strerror(errno));
        _exit(1);
    }
    if (setns(userns, CLONE_NEWUSER) < 0) {
        report(ctl, errno, "enter user namespace: %s", strerror(errno));
        _exit(1);
    }
    close(userns);
    if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0) {
        report(ctl, errno, "become root of the user namespace: %s", strerror(errno));
        _exit(1);
    }
    /* without no_new_privs the kernel loads a filter only for a holder of CAP_SYS_ADMIN
     * in its user namespace: load it now, before the capabilities are cut (spawn.h) */
    if (q->setuid && (e = sbx_seccomp_load()) < 0) {
        report(ctl, -e, "load seccomp filter: %s", strerror(-e));
        _exit(1);
    }
    if ((e = sbx_caps_restrict()) < 0) {
        report(ctl, -e, "restrict capabilities: %s", strerror(-e));
        _exit(1);
    }
    /* stdin and stdout from inside the new root; stderr stays the daemon's log */
    int dn = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (dn < 0 || dup2(dn, 0) < 0 || dup2(dn, 1) < 0) {
        report(ctl, errno, "open /dev/null: %s", strerror(errno));
        _exit(1);
    }
    close(dn);
    /* a credential change cleared these: set them now */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (prctl(PR_SET_DUMPABLE, 0) < 0 ||
        (!q->setuid && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)) {
        report(ctl, errno, "prctl: %s", strerror(errno));
        _exit(1);
    }
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    if (!q->setuid && (e = sbx_seccomp_load()) < 0) {
        report(ctl, -e, "load seccomp filter: %s", strerror(-e));
        _exit(1);
    }
    sbx_init_main(ctl);
}

/* ------------------------------------------------------------------ the netns pool */

/*
 * A clone with CLONE_NEWNET spends ~0.5 ms in the kernel making the namespace (every
 * subsystem's per-namespace set-up, the loopback device: the zygote's clone3 takes
 * 1.1-1.3 ms with it, 0.65 ms without), and the child then brings lo up. The zygote
 * instead keeps NETNS_POOL namespaces made ahead, lo up, as descriptors:
 * unshare(CLONE_NEWNET), bring lo up, open /proc/thread-self/ns/net, setns() back
 * home. A spawn takes one, setns()es into it, clones without CLONE_NEWNET (the child
 * inherits it) and goes home at once; the descriptor is then closed, so the sandbox's
 * processes hold the only references and the namespace dies with them, exactly as one
 * made by the clone would (net.c still finds it by init's pidfd). A namespace leaves
 * the pool once, is entered by one clone and never comes back. The zygote refills one
 * namespace at a time, and only when no request waits (zygote_main), so a spawn waits
 * at most for one refill already under way; an empty pool means CLONE_NEWNET as
 * before. Pooled namespaces belong to the initial user namespace, as the clone's did:
 * the zygote makes them outside any user namespace.
 *
 * The descriptors are O_CLOEXEC and every child closes all but its own (close_except),
 * so no sandbox can reach another's namespace. The zygote's own namespace matters to
 * nothing it does (its only use is to leave and come back), but it must not stay
 * inside a sandbox's: if going home ever fails the pool is switched off for good (and
 * the namespace it is stuck in lives on until the zygote exits). The zygote must not
 * exit over it: every init dies with it (PR_SET_PDEATHSIG).
 *
 * Only the zygote fills the pool; a daemon that clones for itself (no zygote) finds
 * it empty.
 */
#define NETNS_POOL 4

static int netns_home = -1; /* the zygote's own network namespace */
static int netns_pool[NETNS_POOL];
static int netns_count;
static bool netns_off = true; /* until netns_pool_init() */

static void netns_pool_disable(void)
{
    netns_off = true;
    while (netns_count > 0)
        close(netns_pool[--netns_count]);
}

/* Back to the zygote's namespace. 0, or -errno with the pool switched off. */
static int netns_go_home(void)
{
    if (setns(netns_home, CLONE_NEWNET) == 0) return 0;
    int e = -errno;
    netns_pool_disable();
    return e;
}

static void netns_pool_init(void)
{
    netns_home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    netns_off = netns_home < 0;
}

static bool netns_pool_wants(void)
{
    return !netns_off && netns_count < NETNS_POOL;
}

/* Make one namespace for the pool. Any failure switches the pool off (the zygote
 * would otherwise retry it in a busy loop); spawns then clone with CLONE_NEWNET. */
static void netns_pool_add(void)
{
    if (!netns_pool_wants()) return;
    if (unshare(CLONE_NEWNET) < 0) {
        netns_pool_disable();
        return;
    }
    int fd = loopback_up() == 0 ? open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC) : -1;
    if (netns_go_home() < 0) {
        if (fd >= 0) close(fd);
        return;
    }
    if (fd < 0) {
        netns_pool_disable();
        return;
    }
    netns_pool[netns_count++] = fd;
}

/* A ready namespace, now the caller's to close; -1 when the pool is empty. */
static int netns_pool_take(void)
{
    return netns_off || netns_count == 0 ? -1 : netns_pool[--netns_count];
}

/* Plan, make the user namespace and clone the child. Runs in the zygote (or in the
 * daemon when there is none). 0, or -errno with msg filled. */
static int clone_session(const struct zreq *q, pid_t *pid, int *pidfd, int *ctl, char *msg,
                         size_t msglen)
{
    struct sbx_plan plan;
    struct err err = ERR_INIT;
    struct sbx_plan_input in = {.sandbox_dir = q->sandbox_dir, .image_dir = q->image_dir,
                                .usr_dir = q->usr_dir[0] ? q->usr_dir : NULL,
                                .uid_base = q->uid_base, .tmp_bytes = q->tmp_bytes};
    const char *layers[SBX_PLAN_LAYERS_MAX];
    for (uint32_t i = 0; i < q->nlayers && i < SBX_PLAN_LAYERS_MAX; i++) layers[i] = q->layers[i];
    in.layers = layers;
    in.nlayers = q->nlayers;
    in.layers_dir = q->layers_dir[0] ? q->layers_dir : NULL;
    struct sbx_plan_mount mounts[SBX_MOUNTS_MAX];
    in.fs_dir = q->fs_dir[0] ? q->fs_dir : NULL;
    in.data_base = q->data_base;
    in.mount_base = q->mount_base;
    in.setuid = q->setuid != 0;
    in.nmounts = q->nmounts;
    for (uint32_t i = 0; i < q->nmounts && i < SBX_MOUNTS_MAX; i++) {
        mounts[i].source = q->mounts[i].source;
        mounts[i].target = q->mounts[i].target;
        mounts[i].readonly = (int)q->mounts[i].readonly;
    }
    in.mounts = mounts;
    if (sbx_plan_build(&in, &plan, &err) < 0) {
        snprintf(msg, msglen, "%.390s", err.msg);
        return -EINVAL;
    }
    int nsfds[SBX_NS_COUNT] = {-1, -1, -1};
    int nserr = sbx_userns_create(q->uid_base);
    if (nserr >= 0) {
        nsfds[SBX_NS_SESSION] = nserr;
        nserr = 0;
    }
    if (!nserr && sbx_plan_uses_ns(&plan, SBX_NS_FS)) {
        int fd = sbx_userns_create_remap(q->data_base, q->uid_base);
        if (fd < 0) nserr = fd;
        else nsfds[SBX_NS_FS] = fd;
    }
    if (!nserr && sbx_plan_uses_ns(&plan, SBX_NS_MOUNTS)) {
        int fd = sbx_userns_create_remap(q->mount_base, q->uid_base);
        if (fd < 0) nserr = fd;
        else nsfds[SBX_NS_MOUNTS] = fd;
    }
    if (nserr < 0) {
        for (int i = 0; i < SBX_NS_COUNT; i++)
            if (nsfds[i] >= 0) close(nsfds[i]);
        sbx_plan_fini(&plan);
        snprintf(msg, msglen, "cannot create the user namespace: %s", strerror(-nserr));
        return nserr;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        for (int i = 0; i < SBX_NS_COUNT; i++)
            if (nsfds[i] >= 0) close(nsfds[i]);
        sbx_plan_fini(&plan);
        snprintf(msg, msglen, "socketpair: %s", strerror(e));
        return -e;
    }
    int bufsz = SBX_MSG_MAX * 2;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz);
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz);
    int fd = -1;
    struct clone_args ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_PIDFD;
    ca.pidfd = (uint64_t)(uintptr_t)&fd;
    ca.exit_signal = SIGCHLD;
    /* a pooled network namespace, entered only around the clone; else a new one */
    int netns = netns_pool_take();
    bool pooled = netns >= 0 && setns(netns, CLONE_NEWNET) == 0;
    if (!pooled) ca.flags |= CLONE_NEWNET;
    long r = syscall(SYS_clone3, &ca, sizeof ca);
    if (r == 0) child_main(q, &plan, sv[1], nsfds, pooled);
    int e = errno;
    if (pooled) netns_go_home(); /* on failure the pool is off; this spawn stands */
    if (netns >= 0) close(netns);
    close(sv[1]);
    for (int i = 0; i < SBX_NS_COUNT; i++)
        if (nsfds[i] >= 0) close(nsfds[i]);
    sbx_plan_fini(&plan);
    if (r < 0) {
        close(sv[0]);
        snprintf(msg, msglen, "clone: %s", strerror(e));
        return -e;
    }
    *pid = (pid_t)r;
    *pidfd = fd;
    *ctl = sv[0];
    return 0;
}

static int wait_ready(int ctl, int pidfd, int timeout_ms, struct err *err)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    char pkt[1024];
    for (;;) {
        int left = (int)(end - clock_mono_ms());
        if (left <= 0)
            return err_set(err, 500, "sandbox_start_failed", "",
                           "the sandbox did not start within %d ms", timeout_ms);
        struct pollfd pf[2] = {{ctl, POLLIN, 0}, {pidfd, POLLIN, 0}};
        int r = poll(pf, 2, left);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return err_internal(err, "poll: %s", strerror(errno));
        if (pf[0].revents & POLLIN) {
            ssize_t n = recv(ctl, pkt, sizeof pkt - 1, MSG_DONTWAIT);
            struct sbx_msg_hdr h;
            const void *pl;
            if (n > 0 && sbx_msg_decode(pkt, (size_t)n, &h, &pl) == 0) {
                if (h.type == SBX_MSG_READY) return 0;
                if (h.type == SBX_MSG_SETUP_FAILED) {
                    int len = h.len > 400 ? 400 : (int)h.len;
                    return err_set(err, 500, "sandbox_start_failed", "",
                                   "the sandbox could not be set up: %.*s", len, (const char *)pl);
                }
            }
            if (n == 0) goto died;
            continue;
        }
        if (pf[0].revents & (POLLHUP | POLLERR) || pf[1].revents) goto died;
    }
died:
    return err_set(err, 500, "sandbox_start_failed", "",
                   "the sandbox's init exited during set-up (see the daemon log)");
}

/* ------------------------------------------------------------------ the zygote */

static int zygote_fd = -1;

static bool mounts_ok(const struct zreq *q)
{
    for (uint32_t i = 0; i < q->nmounts && i < SBX_MOUNTS_MAX; i++)
        if (!memchr(q->mounts[i].source, 0, sizeof q->mounts[i].source) ||
            !memchr(q->mounts[i].target, 0, sizeof q->mounts[i].target))
            return false;
    return true;
}

static bool layers_ok(const struct zreq *q)
{
    for (uint32_t i = 0; i < q->nlayers && i < SBX_PLAN_LAYERS_MAX; i++)
        if (!memchr(q->layers[i], 0, sizeof q->layers[i])) return false;
    return true;
}

static bool cgs_ok(const struct zreq *q)
{
    for (size_t i = 0; i < SBX_CG_PROCS_MAX; i++)
        if (!memchr(q->cg[i], 0, sizeof q->cg[i])) return false;
    return true;
}

static bool zreq_ok(const struct zreq *q)
{
    return memchr(q->sandbox_dir, 0, sizeof q->sandbox_dir) &&
           memchr(q->image_dir, 0, sizeof q->image_dir) &&
           memchr(q->usr_dir, 0, sizeof q->usr_dir) && memchr(q->hostname, 0, sizeof q->hostname) &&
           q->ncg <= SBX_CG_PROCS_MAX && cgs_ok(q) && q->nofile > 0 && q->setuid <= 1 &&
           memchr(q->fs_dir, 0, sizeof q->fs_dir) && q->nmounts <= SBX_MOUNTS_MAX &&
           mounts_ok(q) && q->nlayers <= SBX_PLAN_LAYERS_MAX &&
           memchr(q->layers_dir, 0, sizeof q->layers_dir) && layers_ok(q);
}

static void zygote_serve(int fd)
{
    struct zreq q;
    ssize_t n = recv(fd, &q, sizeof q, 0);
    if (n == 0) _exit(0); /* the daemon is gone */
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) return;
        _exit(0);
    }
    struct zrep rep;
    memset(&rep, 0, sizeof rep);
    pid_t pid = -1;
    int pidfd = -1, ctl = -1;
    if (n != (ssize_t)sizeof q || !zreq_ok(&q)) {
        rep.err = EINVAL;
        snprintf(rep.msg, sizeof rep.msg, "bad request to the zygote");
    } else {
        rep.err = -clone_session(&q, &pid, &pidfd, &ctl, rep.msg, sizeof rep.msg);
        rep.pid = pid;
    }
    struct iovec iov = {&rep, sizeof rep};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (rep.err == 0) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof cm.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(2 * sizeof(int));
        int fds[2] = {pidfd, ctl};
        memcpy(CMSG_DATA(c), fds, sizeof fds);
    }
    if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 && pidfd >= 0)
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
    if (pidfd >= 0) close(pidfd);
    if (ctl >= 0) close(ctl);
}

static void zygote_main(int fd, pid_t parent)
{
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    /* a stop signalled to the whole process group (Ctrl-C, systemd, a closed terminal) is
     * the daemon's to carry out, session by session; the zygote dies with it (PDEATHSIG,
     * EOF) */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    prctl(PR_SET_NAME, "rebuno-zygote");
    int keep[1] = {fd};
    close_except(keep, 1);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_SETMASK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    netns_pool_init();
    for (;;) {
        struct pollfd pf[2] = {{fd, POLLIN, 0}, {sfd, POLLIN, 0}};
        /* while the pool is short, only look for work; if there is none, add one
         * namespace and look again, so a request waits at most for one */
        int r = poll(pf, 2, netns_pool_wants() ? 0 : -1);
        if (r < 0 && errno != EINTR) _exit(1);
        if (r == 0) {
            netns_pool_add();
            continue;
        }
        if (pf[1].revents) { /* inits are our children: reap them */
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) > 0) {
            }
            while (waitpid(-1, NULL, WNOHANG) > 0) {
            }
        }
        if (pf[0].revents) zygote_serve(fd);
    }
}

int sbx_zygote_start(void)
{
    if (zygote_fd >= 0) return 0;
    /* compiled here, once: the zygote and (without it) this process's own clones inherit it */
    int prep = sbx_seccomp_prepare();
    if (prep < 0) return prep;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(sv[0]);
        close(sv[1]);
        return e;
    }
    if (pid == 0) {
        close(sv[0]);
        zygote_main(sv[1], parent);
    }
    close(sv[1]);
    zygote_fd = sv[0];
    return 0;
}

void sbx_zygote_stop(void)
{
    if (zygote_fd >= 0) close(zygote_fd);
    zygote_fd = -1;
}

/* Ask the zygote; -1 when it is gone (the caller then clones itself). */
static int via_zygote(const struct zreq *q, int timeout_ms, struct sbx_proc *out, struct err *err)
{
    if (send(zygote_fd, q, sizeof *q, MSG_NOSIGNAL) != (ssize_t)sizeof *q) goto gone;
    struct pollfd pf = {zygote_fd, POLLIN, 0};
    int r;
    while ((r = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (r <= 0) goto gone;
    struct zrep rep;
    struct iovec iov = {&rep, sizeof rep};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof cm.buf;
    ssize_t n = recvmsg(zygote_fd, &mh, MSG_CMSG_CLOEXEC);
    if (n != (ssize_t)sizeof rep) goto gone;
    rep.msg[sizeof rep.msg - 1] = '\0';
    int fds[2] = {-1, -1};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(2 * sizeof(int)))
        memcpy(fds, CMSG_DATA(c), sizeof fds);
    if (rep.err != 0 || fds[0] < 0 || fds[1] < 0) {
        if (fds[0] >= 0) close(fds[0]);
        if (fds[1] >= 0) close(fds[1]);
        return err_internal(err, "cannot start the sandbox: %s", rep.msg[0] ? rep.msg : "?");
    }
    out->pid = rep.pid;
    out->pidfd = fds[0];
    out->ctl = fds[1];
    return 0;
gone:
    sbx_zygote_stop();
    return -2;
}

/* D/boot_id: a fresh random id (the kernel's boot_id format) that the plan binds over
 * the session's /proc/sys/kernel/random/boot_id, so each session is a boot of its own
 * to what runs inside (a stop and start reads as a reboot, as on a VM). A new inode
 * each time (written aside, then renamed): nothing still holding the last one sees it
 * change. D is the daemon's own directory, no tenant's. 0 or -1 with err. */
static int write_boot_id(const char *dir, struct err *err)
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n < 0 && errno != EINTR)
            return err_internal(err, "boot id: getrandom: %s", strerror(errno));
        if (n > 0) got += (size_t)n;
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4, variant 10 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    char text[40];
    int len = snprintf(text, sizeof text,
                       "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
                       r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
                       r[12], r[13], r[14], r[15]);
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return err_internal(err, "boot id: open %s: %s", dir, strerror(errno));
    int e = 0;
    int fd = openat(dfd, "boot_id.new", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                    0444);
    if (fd < 0) {
        e = errno;
    } else {
        ssize_t n = write(fd, text, (size_t)len);
        if (n != len) e = n < 0 ? errno : EIO;
        if (close(fd) < 0 && !e) e = errno;
    }
    if (!e && renameat(dfd, "boot_id.new", dfd, "boot_id") < 0) e = errno;
    close(dfd);
    return e ? err_internal(err, "boot id: write %s/boot_id: %s", dir, strerror(e)) : 0;
}

int sbx_session_spawn(const struct sbx_spawn_params *p, struct sbx_proc *out, struct err *err)
{
    out->pid = -1;
    out->pidfd = out->ctl = out->rootfd = out->usrfd = -1;
    if (write_boot_id(p->plan.sandbox_dir, err) < 0) return -1;
    struct zreq *q = calloc(1, sizeof *q);
    if (!q) return err_internal(err, "out of memory");
    q->uid_base = p->plan.uid_base;
    q->tmp_bytes = p->plan.tmp_bytes;
    q->nofile = p->nofile;
    q->setuid = p->setuid;
    int ok = snprintf(q->sandbox_dir, sizeof q->sandbox_dir, "%s", p->plan.sandbox_dir) <
                 (int)sizeof q->sandbox_dir &&
             snprintf(q->image_dir, sizeof q->image_dir, "%s", p->plan.image_dir) <
                 (int)sizeof q->image_dir &&
             snprintf(q->usr_dir, sizeof q->usr_dir, "%s",
                      p->plan.usr_dir ? p->plan.usr_dir : "") < (int)sizeof q->usr_dir &&
             p->plan.nlayers <= SBX_PLAN_LAYERS_MAX &&
             snprintf(q->layers_dir, sizeof q->layers_dir, "%s",
                      p->plan.layers_dir ? p->plan.layers_dir : "") < (int)sizeof q->layers_dir &&
             snprintf(q->hostname, sizeof q->hostname, "%s", p->hostname) <
                 (int)sizeof q->hostname;
    if (!ok) {
        free(q);
        return err_internal(err, "sandbox paths are too long");
    }
    ok = !p->plan.fs_dir ||
         snprintf(q->fs_dir, sizeof q->fs_dir, "%s", p->plan.fs_dir) < (int)sizeof q->fs_dir;
    q->nlayers = ok ? (uint32_t)p->plan.nlayers : 0;
    for (uint32_t i = 0; ok && i < q->nlayers; i++)
        ok = snprintf(q->layers[i], sizeof q->layers[i], "%s", p->plan.layers[i]) <
             (int)sizeof q->layers[i];
    q->data_base = p->plan.data_base;
    q->mount_base = p->plan.mount_base;
    q->nmounts = (uint32_t)(p->plan.nmounts > SBX_MOUNTS_MAX ? SBX_MOUNTS_MAX : p->plan.nmounts);
    for (uint32_t i = 0; ok && i < q->nmounts; i++) {
        const struct sbx_plan_mount *m = &p->plan.mounts[i];
        ok = snprintf(q->mounts[i].source, sizeof q->mounts[i].source, "%s", m->source) <
                 (int)sizeof q->mounts[i].source &&
             snprintf(q->mounts[i].target, sizeof q->mounts[i].target, "%s", m->target) <
                 (int)sizeof q->mounts[i].target;
        q->mounts[i].readonly = (uint32_t)m->readonly;
    }
    if (!ok) {
        free(q);
        return err_internal(err, "sandbox paths are too long");
    }
    q->ncg = (uint32_t)sbx_cg_procs_files(p->cg, q->cg, SBX_CG_PROCS_MAX);
    int rc = zygote_fd >= 0 ? via_zygote(q, p->timeout_ms, out, err) : -2;
    if (rc == -2) { /* no zygote: clone from here */
        char msg[400];
        int e = clone_session(q, &out->pid, &out->pidfd, &out->ctl, msg, sizeof msg);
        rc = e < 0 ? err_internal(err, "cannot start the sandbox: %s", msg) : 0;
    }
    free(q);
    if (rc < 0) return -1;
    if (wait_ready(out->ctl, out->pidfd, p->timeout_ms, err) < 0) {
        sbx_session_kill(out, 2000);
        return -1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/root", (int)out->pid);
    out->rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    /* Pin the /usr overlay too (rootfd pins the root one): the last reference to an
     * overlay syncs its whole upper file system, the shared store, and without these
     * that would be init's exit (which the daemon waits for). The daemon drops them
     * where it chooses instead (sbx_session_unpin). No code of the tenant has run yet,
     * so "usr" is still the overlay the plan mounted there. */
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                      RESOLVE_NO_MAGICLINKS};
    if (out->rootfd >= 0 && p->plan.usr_dir) /* a self-contained image has one overlay */
        out->usrfd = (int)syscall(SYS_openat2, out->rootfd, "usr", &how, sizeof how);
    if (out->rootfd < 0 || (p->plan.usr_dir && out->usrfd < 0)) {
        int err_no = errno;
        sbx_session_kill(out, 2000);
        return err_internal(err, "cannot open the sandbox root: %s", strerror(err_no));
    }
    fcntl(out->ctl, F_SETFL, O_NONBLOCK);
    return 0;
}

static void close_fds(struct sbx_proc *p)
{
    if (p->ctl >= 0) close(p->ctl);
    if (p->rootfd >= 0) close(p->rootfd);
    if (p->usrfd >= 0) close(p->usrfd);
    if (p->pidfd >= 0) close(p->pidfd);
    p->ctl = p->rootfd = p->usrfd = p->pidfd = -1;
}

int sbx_session_signal_kill(const struct sbx_proc *p)
{
    return p->pid > 0 && pidfd_signal(p->pidfd, SIGKILL) < 0 ? -errno : 0;
}

void sbx_session_unpin(struct sbx_proc *p, int pins[SBX_PINS])
{
    pins[0] = p->rootfd;
    pins[1] = p->usrfd;
    p->rootfd = p->usrfd = -1;
}

int sbx_session_kill(struct sbx_proc *p, int timeout_ms)
{
    if (p->pid <= 0) {
        close_fds(p);
        return 0;
    }
    pidfd_signal(p->pidfd, SIGKILL);
    struct pollfd pf = {p->pidfd, POLLIN, 0};
    int64_t end = clock_mono_ms() + timeout_ms;
    int ret = -ETIMEDOUT;
    for (;;) {
        int left = (int)(end - clock_mono_ms());
        if (left < 0) break;
        int r = poll(&pf, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) { /* exited; reap it unless someone already did */
            siginfo_t si;
            memset(&si, 0, sizeof si);
            waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED | WNOHANG);
            ret = 0;
        }
        break;
    }
    p->pid = -1;
    close_fds(p);
    return ret;
}

void sbx_reap_zombies(void)
{
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}
