/*
 * init.c - the init loop inside a sandbox (see init.h).
 *
 * Single-threaded, poll()-driven, no allocation in the steady state except the
 * command table. Messages from sandboxd are trusted (they come from the daemon that
 * created us) but are still decoded with bounds checks.
 *
 * Terminals (SPAWN_PTY): init opens the pty pair itself, in the sandbox's mount
 * namespace and private devpts (/dev/pts/ptmx), as the sandbox's root, so the daemon
 * never opens a device node inside a sandbox. The child makes the slave its
 * controlling terminal (setsid + TIOCSCTTY), owns it (like login does) and runs as
 * usual; the master goes back to sandboxd with SPAWNED as SCM_RIGHTS.
 */
#include "sandbox/runtime/init.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "sandbox/runtime/proto.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define TTY_GID 5 /* the "tty" group of the default image */

struct running {
    uint64_t id;
    pid_t pid;
};

static struct running *table;
static size_t ntable, captable;
static int ctl_fd = -1;
static struct buf out;

static void send_msg(uint32_t type, uint64_t id, int32_t a, int32_t b, const void *p, size_t n)
{
    sbx_msg_encode(&out, type, id, a, b, p, n);
    while (send(ctl_fd, out.data, out.len, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR) continue;
        _exit(0); /* sandboxd is gone: the pid namespace dies with us */
    }
}

/* A header-only message with one descriptor attached (SCM_RIGHTS). */
static void send_msg_fd(uint32_t type, uint64_t id, int32_t a, int32_t b, int fd)
{
    sbx_msg_encode(&out, type, id, a, b, NULL, 0);
    struct iovec iov = {out.data, out.len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof cm.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    while (sendmsg(ctl_fd, &mh, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR) continue;
        _exit(0);
    }
}

void sbx_exec_search(const char *file, char *const argv[], char *const envp[])
{
    if (strchr(file, '/')) {
        execve(file, argv, envp);
        return;
    }
    const char *path = NULL;
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
    if (!path) path = DEFAULT_PATH;
    size_t flen = strlen(file);
    bool eacces = false;
    int last = ENOENT;
    char buf[PATH_MAX];
    for (const char *p = path;; p++) {
        const char *colon = strchrnul(p, ':');
        size_t dlen = (size_t)(colon - p);
        if (dlen + flen + 2 <= sizeof buf) {
            if (dlen == 0) {
                memcpy(buf, file, flen + 1); /* empty entry = current directory */
            } else {
                memcpy(buf, p, dlen);
                buf[dlen] = '/';
                memcpy(buf + dlen + 1, file, flen + 1);
            }
            execve(buf, argv, envp);
            if (errno == EACCES) eacces = true;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP &&
                     errno != ENAMETOOLONG)
                last = errno;
        }
        if (!*colon) break;
        p = colon;
    }
    errno = eacces ? EACCES : last;
}

/* In the forked child: become the command. Reports failures on errfd and exits. With
 * pty, in = outfd = errfd_cmd is the terminal's slave, which becomes the controlling
 * terminal. */
static void child_exec(const struct sbx_spawn_req *r, int in, int outfd, int errfd_cmd, int errpipe,
                       bool pty)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    setsid(); /* own session and process group: kill(-pid) reaches all it starts */
    int32_t rep[2] = {SBX_STAGE_PTY, 0};
    if (pty) {
        if (ioctl(in, TIOCSCTTY, 0) < 0) goto fail;
        /* the user owns its terminal, as after login; best effort (root keeps it) */
        if (fchown(in, r->uid, TTY_GID) < 0 || fchmod(in, 0620) < 0) {
        }
    }
    rep[0] = SBX_STAGE_FORK;
    if (dup2(in, 0) < 0 || dup2(outfd, 1) < 0 || dup2(errfd_cmd, 2) < 0) goto fail;
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    rep[0] = SBX_STAGE_CREDS;
    gid_t groups[SBX_MAX_GROUPS];
    for (uint32_t i = 0; i < r->ngroups; i++)
        groups[i] = r->groups[i];
    if (setgroups(r->ngroups, groups) < 0) goto fail;
    if (setresgid(r->gid, r->gid, r->gid) < 0) goto fail;
    if (setresuid(r->uid, r->uid, r->uid) < 0) goto fail;
    rep[0] = SBX_STAGE_CWD;
    if (chdir(r->cwd) < 0) goto fail;
    umask(022);
    rep[0] = SBX_STAGE_EXEC;
    sbx_exec_search(r->argv[0], (char *const *)r->argv, (char *const *)r->envp);
fail:
    rep[1] = errno;
    if (write(errpipe, rep, sizeof rep) < 0) {
    }
    _exit(127);
}

static void table_add(uint64_t id, pid_t pid)
{
    if (ntable == captable) {
        captable = captable ? captable * 2 : 16;
        table = xrealloc(table, captable * sizeof *table);
    }
    table[ntable].id = id;
    table[ntable].pid = pid;
    ntable++;
}

/* Open a pty pair in our devpts: master and slave (both close-on-exec), the window
 * set. 0 or -errno. */
static int open_pty(uint16_t cols, uint16_t rows, int *master, int *slave)
{
    int m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0) return -errno;
    int unlock = 0;
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    int s = -1;
    if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0 ||
        (s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        int e = errno;
        close(m);
        return -e;
    }
    *master = m;
    *slave = s;
    return 0;
}

static void do_spawn(const struct sbx_msg_hdr *h, const void *payload, int fds[3])
{
    struct sbx_spawn_req r;
    bool pty = h->type == SBX_MSG_SPAWN_PTY;
    if (sbx_spawn_decode(payload, h->len, h->id, &r) < 0 ||
        (pty && (h->a < 1 || h->a > SBX_PTY_DIM_MAX || h->b < 1 || h->b > SBX_PTY_DIM_MAX))) {
        if (r.argv) sbx_spawn_req_fini(&r);
        send_msg(SBX_MSG_SPAWN_FAILED, h->id, EINVAL, SBX_STAGE_FORK, NULL, 0);
        return;
    }
    int master = -1, slave = -1, pty_fds[3];
    if (pty) {
        int e = open_pty((uint16_t)h->a, (uint16_t)h->b, &master, &slave);
        if (e < 0) {
            sbx_spawn_req_fini(&r);
            send_msg(SBX_MSG_SPAWN_FAILED, h->id, -e, SBX_STAGE_PTY, NULL, 0);
            return;
        }
        pty_fds[0] = pty_fds[1] = pty_fds[2] = slave;
        fds = pty_fds;
    }
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) {
        send_msg(SBX_MSG_SPAWN_FAILED, h->id, errno, SBX_STAGE_FORK, NULL, 0);
        sbx_spawn_req_fini(&r);
        if (pty) {
            close(master);
            close(slave);
        }
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(ep[0]);
        child_exec(&r, fds[0], fds[1], fds[2], ep[1], pty);
    }
    int fork_errno = errno;
    close(ep[1]);
    if (pty) close(slave); /* the child has it; the master's reads see EIO once all are gone */
    sbx_spawn_req_fini(&r);
    if (pid < 0) {
        close(ep[0]);
        if (pty) close(master);
        send_msg(SBX_MSG_SPAWN_FAILED, h->id, fork_errno, SBX_STAGE_FORK, NULL, 0);
        return;
    }
    int32_t rep[2];
    ssize_t n;
    while ((n = read(ep[0], rep, sizeof rep)) < 0 && errno == EINTR) {
    }
    close(ep[0]);
    if (n == (ssize_t)sizeof rep) {
        /* the child exits 127; it is reaped as an unknown pid */
        if (pty) close(master);
        send_msg(SBX_MSG_SPAWN_FAILED, h->id, rep[1], rep[0], NULL, 0);
        return;
    }
    table_add(h->id, pid);
    if (pty) {
        send_msg_fd(SBX_MSG_SPAWNED, h->id, (int32_t)pid, 0, master);
        close(master);
    } else {
        send_msg(SBX_MSG_SPAWNED, h->id, (int32_t)pid, 0, NULL, 0);
    }
}

/* Signal every process of session sid (inside pids; init itself is never one). */
static void kill_session(pid_t sid, int sig)
{
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid > INT_MAX) continue;
        if (getsid((pid_t)pid) == sid) kill((pid_t)pid, sig);
    }
    closedir(d);
}

static void do_signal(const struct sbx_msg_hdr *h)
{
    int sig = h->a;
    if (sig < 0 || sig >= NSIG) return;
    for (size_t i = 0; i < ntable; i++)
        if (table[i].id == h->id) {
            if (h->b == SBX_SIG_SESSION)
                kill_session(table[i].pid, sig);
            else
                kill(h->b == SBX_SIG_GROUP ? -table[i].pid : table[i].pid, sig);
            return;
        }
}

static void read_ctl(char *pkt)
{
    for (;;) {
        struct iovec iov = {pkt, SBX_MSG_MAX};
        union {
            char buf[CMSG_SPACE(3 * sizeof(int))];
            struct cmsghdr align;
        } cm;
        struct msghdr mh = {0};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cm.buf;
        mh.msg_controllen = sizeof cm.buf;
        ssize_t n = recvmsg(ctl_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            _exit(0);
        }
        if (n == 0) _exit(0); /* sandboxd closed the session */
        int fds[3] = {-1, -1, -1}, nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int *p = (int *)CMSG_DATA(c);
            for (int i = 0; i < k; i++) {
                if (nfds < 3)
                    fds[nfds++] = p[i];
                else
                    close(p[i]);
            }
        }
        struct sbx_msg_hdr h;
        const void *payload;
        bool ok = !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
                  sbx_msg_decode(pkt, (size_t)n, &h, &payload) == 0;
        if (ok && h.type == SBX_MSG_SPAWN && nfds == 3)
            do_spawn(&h, payload, fds);
        else if (ok && h.type == SBX_MSG_SPAWN_PTY && nfds == 0)
            do_spawn(&h, payload, fds);
        else if (ok && h.type == SBX_MSG_SPAWN_PTY)
            send_msg(SBX_MSG_SPAWN_FAILED, h.id, EBADF, SBX_STAGE_FORK, NULL, 0);
        else if (ok && h.type == SBX_MSG_SPAWN)
            send_msg(SBX_MSG_SPAWN_FAILED, h.id, EBADF, SBX_STAGE_FORK, NULL, 0);
        else if (ok && h.type == SBX_MSG_SIGNAL)
            do_signal(&h);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
}

static void reap(void)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (size_t i = 0; i < ntable; i++)
            if (table[i].pid == pid) {
                uint64_t id = table[i].id;
                table[i] = table[--ntable];
                send_msg(SBX_MSG_EXITED, id, st, 0, NULL, 0);
                break;
            }
    }
}

void sbx_init_main(int ctl)
{
    ctl_fd = ctl;
    buf_init(&out, 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) _exit(1);
    char *pkt = xmalloc(SBX_MSG_MAX);
    send_msg(SBX_MSG_READY, 0, 0, 0, NULL, 0);
    struct pollfd pf[2] = {{ctl_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        if (pf[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) > 0) {
            }
            reap();
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) read_ctl(pkt);
    }
}
