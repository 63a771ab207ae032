/*
 * safefs.c - host-root file operations inside a sandbox's trees, resolved beneath a
 * directory descriptor and never through a symlink (see safefs.h).
 */
#include "sandbox/storage/safefs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REMOVE_DEPTH_MAX 512  /* directory levels sbx_safe_remove_tree descends */
#define RESOLVE_DEPTH_MAX 256 /* directory levels sbx_safe_resolve holds */

int sbx_safe_open(int dirfd, const char *rel, int flags)
{
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    for (int tries = 0; tries < 16; tries++) {
        long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
        if (fd >= 0) return (int)fd;
        if (errno != EAGAIN) return -errno; /* EAGAIN: a rename raced the lookup */
    }
    return -EAGAIN;
}

int sbx_safe_set_owner(int fd, mode_t mode, uid_t uid, gid_t gid)
{
    /* chown first: it clears set-id bits, which the mode may ask for */
    if (fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0) return -errno;
    return 0;
}

int sbx_safe_set_owner_at(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    int e = sbx_safe_set_owner(fd, mode, uid, gid);
    close(fd);
    return e;
}

/* rel's parent beneath dirfd (O_PATH) and its last component. */
static int open_parent(int dirfd, const char *rel, const char **leaf)
{
    const char *slash = strrchr(rel, '/');
    *leaf = slash ? slash + 1 : rel;
    if (!**leaf || !strcmp(*leaf, ".") || !strcmp(*leaf, "..")) return -EINVAL;
    if (!slash) return sbx_safe_open(dirfd, ".", O_PATH | O_DIRECTORY);
    char parent[PATH_MAX];
    if ((size_t)(slash - rel) >= sizeof parent) return -ENAMETOOLONG;
    memcpy(parent, rel, (size_t)(slash - rel));
    parent[slash - rel] = '\0';
    return sbx_safe_open(dirfd, parent[0] ? parent : ".", O_PATH | O_DIRECTORY);
}

int sbx_safe_mkdir(int dirfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, bool *made)
{
    if (made) *made = false;
    const char *leaf;
    int pfd = open_parent(dirfd, rel, &leaf);
    if (pfd < 0) return pfd;
    /* 0700 until it has its owner and mode: nobody else gets in before */
    bool mine = mkdirat(pfd, leaf, 0700) == 0;
    int e = mine || errno == EEXIST ? 0 : -errno;
    int fd = e ? -1 : openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (!e && fd < 0) e = -errno;
    close(pfd);
    if (e || !mine) return e ? e : fd;
    /* The directory made above, not one renamed into its place since: only this daemon
     * makes directories owned by its own uid in a sandbox's tree, and it owns them to
     * someone else right away. */
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid()) e = -EEXIST;
    if (!e) e = sbx_safe_set_owner(fd, mode, uid, gid);
    if (e) {
        close(fd);
        return e;
    }
    if (made) *made = true;
    return fd;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int sbx_safe_replace(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                     uid_t uid, gid_t gid, bool durable)
{
    static unsigned seq;
    char tmp[NAME_MAX + 1];
    snprintf(tmp, sizeof tmp, ".%.200s.rebuno-%d-%u", name, (int)getpid(),
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int e = write_all(fd, data, len);
    if (!e) e = sbx_safe_set_owner(fd, mode, uid, gid);
    if (!e && durable && fsync(fd) < 0) e = -errno;
    close(fd);
    if (!e && renameat(dirfd, tmp, dirfd, name) < 0) e = -errno;
    if (e) unlinkat(dirfd, tmp, 0);
    return e;
}

/* ------------------------------------------------------------------ removal */

static bool mount_id(int fd, uint64_t *id)
{
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) < 0 || !(sx.stx_mask & STATX_MNT_ID))
        return false;
    *id = sx.stx_mnt_id;
    return true;
}

static void remove_at(int dfd, const char *name, uint64_t mnt, int depth)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP) unlinkat(dfd, name, 0);
        return;
    }
    uint64_t here;
    DIR *d = NULL;
    /* a mount point (or no way to tell): neither entered nor removed */
    if (depth > REMOVE_DEPTH_MAX || !mount_id(fd, &here) || (depth > 0 && here != mnt) ||
        !(d = fdopendir(fd))) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)
            remove_at(dirfd(d), de->d_name, here, depth + 1);
        else
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

void sbx_safe_remove_tree(int dirfd, const char *name)
{
    remove_at(dirfd, name, 0, 0);
}

/* ------------------------------------------------------------------ resolution */

static bool trusted_uid(const struct sbx_safe_links *t, uid_t uid)
{
    for (size_t i = 0; t && i < t->n && i < sizeof t->uid / sizeof t->uid[0]; i++)
        if (t->uid[i] == uid) return true;
    return false;
}

int sbx_safe_resolve(int rootfd, const char *path, int flags, bool follow_last,
                     const struct sbx_safe_links *trusted, char *refused, size_t rlen)
{
    /* fds[0..top]: the directories walked, fds[0] the root (not ours to close); lex the
     * sandbox's path of fds[top], lexlen[i] its length at depth i (for ".." and errors) */
    int fds[RESOLVE_DEPTH_MAX + 1];
    size_t lexlen[RESOLVE_DEPTH_MAX + 1];
    char lex[PATH_MAX] = "";
    char rest[2][2 * PATH_MAX]; /* what is left to walk, before and after a link */
    int cur = 0, links = 0, fd = -1, e = 0;
    size_t top = 0;
    fds[0] = rootfd;
    lexlen[0] = 0;
    if (snprintf(rest[0], sizeof rest[0], "%s", path) >= (int)sizeof rest[0]) return -ENAMETOOLONG;
    const char *p = rest[0];
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p) break;
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX) {
            e = -ENAMETOOLONG;
            break;
        }
        char name[NAME_MAX + 1];
        memcpy(name, p, n);
        name[n] = '\0';
        const char *next = p + n;
        p = next;
        while (*p == '/')
            p++;
        bool last = !*p;
        p = next;
        if (!strcmp(name, ".")) continue;
        if (!strcmp(name, "..")) { /* never above the root */
            if (top > 0) close(fds[top--]);
            lex[lexlen[top]] = '\0';
            continue;
        }
        fd = openat(fds[top], name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            e = -errno;
            break;
        }
        if (S_ISLNK(st.st_mode) && (!last || follow_last)) {
            struct statfs sf;
            if (fstatfs(fd, &sf) < 0 || sf.f_type == PROC_SUPER_MAGIC ||
                ++links > SBX_SAFE_LINKS_MAX) {
                e = -ELOOP; /* a magic link, or too many */
                break;
            }
            if (!trusted_uid(trusted, st.st_uid)) {
                if (refused && rlen) snprintf(refused, rlen, "%s/%s", lex, name);
                e = -ENOLINK;
                break;
            }
            char t[PATH_MAX];
            ssize_t tn = readlinkat(fd, "", t, sizeof t - 1);
            close(fd);
            fd = -1;
            if (tn <= 0) {
                e = tn < 0 ? -errno : -ENOENT;
                break;
            }
            t[tn] = '\0';
            if (snprintf(rest[!cur], sizeof rest[0], "%s/%s", t, next) >= (int)sizeof rest[0]) {
                e = -ENAMETOOLONG;
                break;
            }
            cur = !cur;
            p = rest[cur];
            if (t[0] == '/') { /* absolute: from the sandbox's root */
                while (top > 0)
                    close(fds[top--]);
                lex[0] = '\0';
            }
            continue;
        }
        if (!last && !S_ISDIR(st.st_mode)) {
            e = -ENOTDIR;
            break;
        }
        if (top == RESOLVE_DEPTH_MAX) {
            e = -ENAMETOOLONG;
            break;
        }
        fds[++top] = fd;
        fd = -1;
        size_t l = strlen(lex);
        if (l + 1 + n < sizeof lex) snprintf(lex + l, sizeof lex - l, "/%s", name);
        lexlen[top] = strlen(lex);
    }
    if (fd >= 0) close(fd);
    fd = -1;
    if (!e && top == 0) {
        fd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) e = -errno;
    } else if (!e) {
        fd = fds[top--];
    }
    while (top > 0)
        close(fds[top--]);
    struct stat st;
    if (!e && (flags & O_DIRECTORY) && (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode))) e = -ENOTDIR;
    if (e && fd >= 0) close(fd);
    return e ? e : fd;
}
