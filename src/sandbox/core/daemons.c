/*
 * daemons.c - the host-wide record of sandboxd daemons and the reaping of what a dead one
 * left (see daemons.h).
 *
 * A record is a small text file, "state_dir=<path>\ncgroup=<mode>\npid=<pid>\n", made 0600
 * in a root-owned 0700 folder and only ever opened beneath that folder's descriptor with
 * O_NOFOLLOW. What it names is checked before anything is reaped: the state folder must
 * be an absolute path of sbx_plan_path_ok characters whose id is the record's name, so a
 * record can only ever lead to the resources that id names (rebuno-<id> cgroups, the
 * rebuno_<tag> table and rb<tag>h* links, <state>/store backed by <state>/store.img).
 *
 * Locks: the reaper takes the dead record's lock for the whole reap, so a daemon starting
 * on that folder waits until it is done, and two reapers never work on one record. A
 * record is dropped (unlinked) while locked; whoever then gets the lock of the unlinked
 * file sees that its inode is no longer the path's and starts over.
 */
#include "sandbox/core/daemons.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "sandbox/runtime/cgroup.h"
#include "sandbox/net/net.h"
#include "sandbox/runtime/plan.h"
#include "sandbox/storage/storage.h"

#define RECORD_MAX 2048
#define WAIT_REAPER_MS 60000 /* a reaper kills and unmounts, each step bounded */

struct sbx_daemon {
    int dirfd, fd; /* -1, -1: no record is kept */
    char name[16];
};

uint64_t sbx_daemon_id(const char *state_dir)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = state_dir; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ull;
    }
    return h & 0xffffffffffffull;
}

/* ------------------------------------------------------------------ records */

static int open_dir(const char *dir)
{
    char *p = xstrdup(dir);
    for (char *q = p + 1; *q; q++) /* parents: /run/rebuno */
        if (*q == '/') {
            *q = '\0';
            mkdir(p, 0755);
            *q = '/';
        }
    free(p);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) return -errno;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 0022)) {
        close(fd); /* someone else's folder: records there cannot be trusted */
        return -EPERM;
    }
    return fd;
}

/* Open and lock name beneath dirfd. 0 with *fd, -EAGAIN when another process holds the
 * lock, -ENOENT when there is no such record (and !create). */
static int lock_record(int dirfd, const char *name, bool create, int *fd)
{
    for (;;) {
        int f = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0),
                       0600);
        if (f < 0) return -errno;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(f, F_SETLK, &fl) < 0) {
            int e = errno;
            close(f);
            return e == EACCES || e == EAGAIN ? -EAGAIN : -e;
        }
        struct stat a, b;
        if (fstat(f, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino && S_ISREG(a.st_mode)) {
            *fd = f;
            return 0;
        }
        close(f); /* dropped (or replaced) while we waited for it */
        if (!create) return -ENOENT;
    }
}

/* The pid holding the lock on name, or 0. */
static pid_t lock_holder(int dirfd, const char *name)
{
    int f = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (f < 0) return 0;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    pid_t pid = fcntl(f, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK ? fl.l_pid : 0;
    close(f);
    return pid;
}

struct record {
    char state_dir[PATH_MAX];
    char cgroup[8];
    long pid;
};

/* Parse and check the record in fd, named name. 0, or -EINVAL for anything unexpected. */
static int read_record(int fd, const char *name, struct record *r)
{
    char b[RECORD_MAX + 1];
    ssize_t n = pread(fd, b, RECORD_MAX, 0);
    if (n <= 0) return -EINVAL;
    b[n] = '\0';
    memset(r, 0, sizeof *r);
    char *save = NULL;
    for (char *l = strtok_r(b, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(l, "state_dir=", 10))
            snprintf(r->state_dir, sizeof r->state_dir, "%s", l + 10);
        else if (!strncmp(l, "cgroup=", 7))
            snprintf(r->cgroup, sizeof r->cgroup, "%s", l + 7);
        else if (!strncmp(l, "pid=", 4))
            r->pid = strtol(l + 4, NULL, 10);
    }
    char want[16];
    snprintf(want, sizeof want, "%012llx", (unsigned long long)sbx_daemon_id(r->state_dir));
    if (r->state_dir[0] != '/' || strlen(r->state_dir) > 512 || !sbx_plan_path_ok(r->state_dir) ||
        strcmp(want, name) != 0)
        return -EINVAL;
    if (strcmp(r->cgroup, "auto") && strcmp(r->cgroup, "v1") && strcmp(r->cgroup, "v2"))
        snprintf(r->cgroup, sizeof r->cgroup, "auto");
    return 0;
}

static int write_record(int fd, const char *state_dir, const char *cgroup_mode)
{
    char b[RECORD_MAX];
    int n = snprintf(b, sizeof b, "state_dir=%s\ncgroup=%s\npid=%ld\n", state_dir,
                     cgroup_mode ? cgroup_mode : "auto", (long)getpid());
    if (n < 0 || n >= (int)sizeof b) return -ENAMETOOLONG;
    if (ftruncate(fd, 0) < 0 || pwrite(fd, b, (size_t)n, 0) != n) return -errno;
    return 0;
}

/* ------------------------------------------------------------------ reaping */

/* Everything the daemon of r left: processes and cgroups first (they hold the store's
 * file system and their network namespaces), then the network, then the store. */
static void reap(const struct record *r, const char *name)
{
    uint64_t id = sbx_daemon_id(r->state_dir);
    char parent[32];
    snprintf(parent, sizeof parent, "rebuno-%012llx", (unsigned long long)id);
    int groups = 0;
    struct sbx_cg_root *cg = NULL;
    struct err e = ERR_INIT;
    if (sbx_cg_root_open(r->cgroup, parent, &cg, &e) == 0) {
        groups = sbx_cg_root_sweep(cg);
        sbx_cg_root_remove(cg);
        sbx_cg_root_free(cg);
    } else {
        log_warn("cannot reap a dead sandboxd's cgroups", "state_dir=%s error=\"%s\"", r->state_dir,
                 e.msg);
    }
    int net = sbx_net_reap((uint32_t)(id & 0xffffff));
    int store = sbx_storage_reap(r->state_dir);
    if (store < 0)
        log_warn("cannot unmount a dead sandboxd's store", "state_dir=%s error=\"%s\"",
                 r->state_dir, strerror(-store));
    log_info("reaped a dead sandboxd", "state_dir=%s record=%s pid=%ld cgroups=%d store=%d net=%s",
             r->state_dir, name, r->pid, groups, store > 0 ? store : 0,
             net == 0 ? "swept" : net == -EBUSY ? "in_use" : "error");
}

/* Reap the record in fd (locked) if it names anything; drop it unless keep. */
static void reap_locked(int dirfd, const char *name, int fd, bool keep)
{
    struct record r;
    struct stat st;
    if (read_record(fd, name, &r) == 0)
        reap(&r, name);
    else if (fstat(fd, &st) == 0 && st.st_size > 0)
        log_warn("dropping a sandboxd record that makes no sense", "record=%s", name);
    if (!keep) unlinkat(dirfd, name, 0);
}

static bool record_name_ok(const char *n)
{
    if (strlen(n) != 12) return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

static int reap_at(int dirfd, const char *name)
{
    if (!record_name_ok(name)) return -EINVAL;
    int fd;
    int e = lock_record(dirfd, name, false, &fd);
    if (e == -EAGAIN || e == -ENOENT) return 0; /* alive, or reaped by someone else */
    if (e < 0) return e;
    reap_locked(dirfd, name, fd, false);
    close(fd);
    return 1;
}

/* Every dead record but ours (ours is taken, and reaped, by the caller). */
static void reap_others(int dirfd, const char *mine)
{
    int d2 = dup(dirfd);
    DIR *dp = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!dp) {
        if (d2 >= 0) close(d2);
        return;
    }
    char (*names)[16] = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dp)))
        if (record_name_ok(de->d_name) && strcmp(de->d_name, mine) != 0) {
            names = xrealloc(names, (n + 1) * sizeof *names);
            snprintf(names[n++], sizeof names[0], "%.12s", de->d_name);
        }
    closedir(dp);
    for (size_t i = 0; i < n; i++)
        reap_at(dirfd, names[i]);
    free(names);
}

/* ------------------------------------------------------------------ our own record */

int sbx_daemon_register(const char *dir, const char *state_dir, const char *cgroup_mode,
                        struct sbx_daemon **out, struct err *err)
{
    struct sbx_daemon *d = xcalloc(1, sizeof *d);
    d->dirfd = d->fd = -1;
    snprintf(d->name, sizeof d->name, "%012llx", (unsigned long long)sbx_daemon_id(state_dir));
    *out = d;
    if (!dir) dir = SBX_DAEMONS_DIR;
    int dfd = open_dir(dir);
    if (dfd < 0) {
        log_warn("no record of this daemon is kept: a daemon that starts after it is killed "
                 "will not clean up after it",
                 "dir=%s error=\"%s\"", dir, strerror(-dfd));
        return 0;
    }
    d->dirfd = dfd;
    reap_others(dfd, d->name);
    int64_t end = clock_mono_ms() + WAIT_REAPER_MS;
    int e;
    while ((e = lock_record(dfd, d->name, true, &d->fd)) == -EAGAIN) {
        /* held: by the daemon the record names (alive), or by a reaper (wait for it) */
        pid_t holder = lock_holder(dfd, d->name);
        int rfd = openat(dfd, d->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct record r;
        bool owner = rfd >= 0 && read_record(rfd, d->name, &r) == 0 && r.pid == holder;
        if (rfd >= 0) close(rfd);
        if (owner || clock_mono_ms() >= end) {
            err_set(err, 409, "state_dir_busy", "state_dir",
                    "another sandboxd (pid %ld) uses the state folder %s; stop it first, or use "
                    "another --state-dir",
                    (long)holder, state_dir);
            goto fail;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (e < 0) {
        err_internal(err, "cannot lock the daemon record %s/%s: %s", dir, d->name, strerror(-e));
        goto fail;
    }
    reap_locked(dfd, d->name, d->fd, true); /* what our own predecessor left */
    e = write_record(d->fd, state_dir, cgroup_mode);
    if (e < 0) {
        err_internal(err, "cannot write the daemon record %s/%s: %s", dir, d->name, strerror(-e));
        goto fail;
    }
    return 0;
fail:
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    close(dfd);
    free(d);
    *out = NULL;
    return -1;
}

void sbx_daemon_unregister(struct sbx_daemon *d)
{
    if (!d) return;
    if (d->fd >= 0) {
        unlinkat(d->dirfd, d->name, 0); /* still locked: nobody reaps it meanwhile */
        close(d->fd);
    }
    if (d->dirfd >= 0) close(d->dirfd);
    free(d);
}
