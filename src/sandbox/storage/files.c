/*
 * files.c - file operations confined to a sandbox's root (see files.h).
 */
#include "sandbox/storage/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "sandbox/core/paths.h"
#include "sandbox/storage/safefs.h"
#include "sandbox/core/text.h"

#ifndef OVERLAYFS_SUPER_MAGIC
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#endif

#define MAX_DEPTH 256

/* ------------------------------------------------------------------ errors */

static int fs_err(struct err *err, int e, const char *path)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return err_set(err, 404, "path_not_found", "path", "%s: no such file or directory", path);
    case EEXIST:
        return err_set(err, 409, "already_exists", "path", "%s already exists", path);
    case ENOTEMPTY:
        return err_set(err, 409, "directory_not_empty", "path", "%s is a directory that is not empty",
                       path);
    case EISDIR:
        return err_set(err, 400, "is_a_directory", "path", "%s is a directory", path);
    case EACCES:
    case EPERM:
        return err_set(err, 403, "permission_denied", "path", "%s: permission denied", path);
    case ELOOP:
        return err_set(err, 400, "symlink_loop", "path",
                       "%s: too many symlinks, or a link that may not be followed here", path);
    case EXDEV:
        return err_set(err, 400, "cross_device", "path",
                       "%s: the operation would cross file systems (e.g. /tmp and /)", path);
    case EBUSY:
        return err_set(err, 409, "busy", "path", "%s is in use (a mount point)", path);
    case ENOSPC:
    case EDQUOT:
        return err_set(err, 507, "no_space", "path", "no space left for %s", path);
    case EFBIG:
        return err_set(err, 413, "file_too_large", "path", "%s would be too large", path);
    case ENAMETOOLONG:
        return err_set(err, 400, "validation_error", "path", "%s is too long", path);
    case EINVAL:
        return err_set(err, 400, "invalid_operation", "path", "%s: invalid operation", path);
    case EROFS:
        return err_set(err, 403, "read_only", "path", "%s is on a read-only file system", path);
    default:
        return err_set(err, 500, "internal_error", "path", "%s: %s", path, strerror(e));
    }
}

/* ------------------------------------------------------------------ resolution */

/* Open rel (relative to the sandbox root) as an O_PATH fd (flags: O_PATH, maybe with
 * O_DIRECTORY). follow: whether a final symlink is followed (always within the root).
 * For root, the kernel resolves it (openat2 RESOLVE_IN_ROOT); for another account,
 * sbx_safe_resolve, which follows only the links root inside (or the daemon) made. On
 * failure err is filled for `shown` and -errno returned. */
static int resolve(const struct sbx_fs *fs, const char *rel, int flags, bool follow,
                   const char *shown, struct err *err)
{
    long fd = -EAGAIN;
    if (fs->no_user_links) {
        char link[SBX_PATH_MAX + 1] = "";
        struct sbx_safe_links trusted = {{(uid_t)fs->uid_base, 0}, 2};
        fd = sbx_safe_resolve(fs->rootfd, rel, flags, follow, &trusted, link, sizeof link);
        if (fd == -ENOLINK) {
            err_set(err, 403, "symlink_refused", "path",
                    "%s: %s is a symbolic link made by an account other than root; calls "
                    "made for a user never follow those",
                    shown, link);
            return (int)fd;
        }
    } else {
        struct open_how how;
        memset(&how, 0, sizeof how);
        how.flags = (uint64_t)(flags | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
        how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
        for (int tries = 0; tries < 16 && fd == -EAGAIN; tries++) { /* EAGAIN: a racing rename */
            fd = syscall(SYS_openat2, fs->rootfd, rel, &how, sizeof how);
            if (fd < 0) fd = -errno;
        }
    }
    if (fd < 0) fs_err(err, (int)-fd, shown);
    return (int)fd;
}

/* Only the sandbox's own file systems: its overlays and tmpfs mounts, and its drive
 * mounts (drive.c: btrfs, or the state folder's ext4/xfs with the copy backend). */
static bool fs_allowed(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0) return false;
    return sf.f_type == OVERLAYFS_SUPER_MAGIC || sf.f_type == TMPFS_MAGIC ||
           sf.f_type == 0x9123683E /* btrfs */ || sf.f_type == 0x58465342 /* xfs */ ||
           sf.f_type == 0xEF53 /* ext4 */;
}

static int check_fs(int fd, const char *path, struct err *err)
{
    if (fs_allowed(fd)) return 0;
    return err_set(err, 403, "forbidden_path", "path",
                   "%s is on a kernel file system (/proc, /dev/pts); the files API does not "
                   "touch those",
                   path);
}

/* Turn an O_PATH fd of a checked regular file into a real one. */
static int reopen(int pathfd, int flags)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", pathfd);
    int fd = open(p, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    return fd < 0 ? -errno : fd;
}

/* The parent directory of a normalised path, as an O_PATH fd; *leaf its last name. */
static int open_parent(const struct sbx_fs *fs, const char *path, const char **leaf,
                       struct err *err)
{
    char parent[SBX_PATH_MAX + 1];
    sbx_path_split(path, parent, sizeof parent, leaf);
    if (!**leaf)
        return err_set(err, 400, "invalid_operation", "path",
                       "this operation needs a path below /");
    int fd = resolve(fs, parent, O_PATH | O_DIRECTORY, true, path, err);
    if (fd < 0) return -1;
    if (check_fs(fd, path, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static uid_t host_id(const struct sbx_fs *fs, uint32_t inside)
{
    return (uid_t)(fs->uid_base + inside);
}

static const char *type_name(mode_t m)
{
    if (S_ISREG(m)) return "file";
    if (S_ISDIR(m)) return "directory";
    if (S_ISLNK(m)) return "symlink";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISCHR(m)) return "char_device";
    if (S_ISBLK(m)) return "block_device";
    return "unknown";
}

static json_t *stat_json(const struct sbx_fs *fs, const struct stat *st, const char *name,
                         int dirfd, const char *at)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", sbx_json_text(name, strlen(name)));
    json_object_set_new(o, "type", json_string(type_name(st->st_mode)));
    json_object_set_new(o, "size", json_integer((json_int_t)st->st_size));
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", (unsigned)(st->st_mode & 07777));
    json_object_set_new(o, "mode", json_string(mode));
    /* ids as root inside sees them; unmapped ones show as nobody, as inside */
    uint32_t uid = st->st_uid - fs->uid_base, gid = st->st_gid - fs->uid_base;
    if (st->st_uid < fs->uid_base || uid >= 65536) uid = 65534;
    if (st->st_gid < fs->uid_base || gid >= 65536) gid = 65534;
    json_object_set_new(o, "uid", json_integer(uid));
    json_object_set_new(o, "gid", json_integer(gid));
    char ts[40];
    clock_format_iso((int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000, ts,
                     sizeof ts);
    json_object_set_new(o, "mtime", json_string(ts));
    if (S_ISLNK(st->st_mode)) {
        char t[SBX_PATH_MAX + 1];
        ssize_t n = readlinkat(dirfd, at, t, sizeof t - 1);
        if (n >= 0) json_object_set_new(o, "target", sbx_json_text(t, (size_t)n));
    }
    return o;
}

/* ------------------------------------------------------------------ operations */

json_t *sbx_fs_stat(const struct sbx_fs *fs, const char *path, struct err *err)
{
    int fd = resolve(fs, sbx_path_rel(path), O_PATH, false, path, err);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
        fs_err(err, errno, path);
        close(fd);
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    json_t *o = stat_json(fs, &st, path[1] ? slash + 1 : "/", fd, "");
    json_object_set_new(o, "path", sbx_json_text(path, strlen(path)));
    close(fd);
    return o;
}

/* An O_PATH fd of a regular file on an allowed file system, following symlinks. */
static int open_regular(const struct sbx_fs *fs, const char *path, struct stat *st,
                        struct err *err)
{
    int fd = resolve(fs, sbx_path_rel(path), O_PATH, true, path, err);
    if (fd < 0) return -1;
    if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        return fs_err(err, e, path);
    }
    if (S_ISDIR(st->st_mode)) {
        close(fd);
        return err_set(err, 400, "is_a_directory", "path", "%s is a directory", path);
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return err_set(err, 400, "not_a_file", "path", "%s is a %s, not a regular file", path,
                       type_name(st->st_mode));
    }
    if (check_fs(fd, path, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int sbx_fs_read(const struct sbx_fs *fs, const char *path, uint64_t off, size_t max,
                struct buf *out, uint64_t *size, struct err *err)
{
    struct stat st;
    int pfd = open_regular(fs, path, &st, err);
    if (pfd < 0) return -1;
    int fd = reopen(pfd, O_RDONLY);
    close(pfd);
    if (fd < 0) return fs_err(err, -fd, path);
    if (size) *size = (uint64_t)st.st_size;
    if (max > SBX_FS_IO_MAX) max = SBX_FS_IO_MAX;
    char *tmp = xmalloc(max ? max : 1);
    size_t got = 0;
    while (got < max) {
        ssize_t n = pread(fd, tmp + got, max - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            free(tmp);
            close(fd);
            return fs_err(err, e, path);
        }
        if (n == 0) break;
        got += (size_t)n;
    }
    close(fd);
    int r = buf_append(out, tmp, got);
    free(tmp);
    if (r < 0) return err_set(err, 413, "payload_too_large", "length", "read too large");
    return 0;
}

int sbx_fs_read_all(const struct sbx_fs *fs, const char *path, size_t max, struct buf *out,
                    struct err *err)
{
    uint64_t size = 0;
    if (sbx_fs_read(fs, path, 0, max + 1, out, &size, err) < 0) return -1;
    if (out->len > max)
        return err_set(err, 413, "file_too_large", "path", "%s is larger than %zu bytes", path,
                       max);
    return 0;
}

static int write_all(int fd, uint64_t off, const void *data, size_t len)
{
    const char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        done += (size_t)n;
    }
    return 0;
}

int sbx_fs_write(const struct sbx_fs *fs, const char *path, uint64_t off, const void *data,
                 size_t len, bool truncate, int mode, const struct sbx_owner *owner,
                 uint64_t *size, struct err *err)
{
    const char *leaf;
    int dfd = open_parent(fs, path, &leaf, err);
    if (dfd < 0) return -1;
    int fd = -1;
    int pfd = openat(dfd, leaf, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0 && errno != ENOENT) {
        int e = errno;
        close(dfd);
        return fs_err(err, e, path);
    }
    if (pfd < 0) { /* a new file: O_EXCL so it is ours and regular */
        mode_t m = (mode_t)(mode >= 0 ? mode & 07777 : 0644);
        fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                    m);
        if (fd < 0) {
            int e = errno;
            close(dfd);
            return fs_err(err, e, path);
        }
        struct sbx_owner root = {0, 0};
        const struct sbx_owner *o = owner ? owner : &root;
        if (fchown(fd, host_id(fs, o->uid), host_id(fs, o->gid)) < 0 || fchmod(fd, m) < 0) {
            int e = errno;
            close(fd);
            unlinkat(dfd, leaf, 0);
            close(dfd);
            return fs_err(err, e, path);
        }
    } else {
        close(pfd);
        struct stat st;
        pfd = open_regular(fs, path, &st, err); /* follows a symlink, within the root */
        if (pfd < 0) {
            close(dfd);
            return -1;
        }
        fd = reopen(pfd, O_WRONLY);
        close(pfd);
        if (fd < 0) {
            close(dfd);
            return fs_err(err, -fd, path);
        }
    }
    close(dfd);
    int e = 0;
    if (truncate && ftruncate(fd, (off_t)off) < 0) e = errno;
    if (!e) e = -write_all(fd, off, data, len);
    /* an explicit mode applies to an existing file too, set on the descriptor written (a
     * chmod by path, as a client would run it next, could follow a link swapped in) */
    if (!e && mode >= 0 && fchmod(fd, (mode_t)(mode & 07777)) < 0) e = errno;
    struct stat st;
    if (!e && size) *size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : off + len;
    close(fd);
    return e ? fs_err(err, e, path) : 0;
}

int sbx_fs_replace(const struct sbx_fs *fs, const char *path, const void *data, size_t len,
                   int mode, const struct sbx_owner *owner, struct err *err)
{
    const char *leaf;
    int dfd = open_parent(fs, path, &leaf, err);
    if (dfd < 0) return -1;
    struct sbx_owner root = {0, 0};
    const struct sbx_owner *o = owner ? owner : &root;
    int e = sbx_safe_replace(dfd, leaf, data, len, (mode_t)(mode & 0777), host_id(fs, o->uid),
                             host_id(fs, o->gid), true);
    close(dfd);
    return e ? fs_err(err, -e, path) : 0;
}

/* Owner and mode are set on the new directory's descriptor: a chmod by name would
 * follow a symlink the sandbox swapped in meanwhile, from the host's "/". */
static int mkdir_one(const struct sbx_fs *fs, int dfd, const char *name, mode_t m,
                     const struct sbx_owner *o)
{
    bool made;
    int fd = sbx_safe_mkdir(dfd, name, m, host_id(fs, o->uid), host_id(fs, o->gid), &made);
    if (fd >= 0) close(fd);
    return fd >= 0 && !made ? -EEXIST : fd < 0 ? fd : 0;
}

int sbx_fs_mkdir(const struct sbx_fs *fs, const char *path, bool parents, int mode,
                 const struct sbx_owner *owner, struct err *err)
{
    /* another account's directories: it and the sandbox default group, 0770 (files.h) */
    struct sbx_owner dir = owner ? *owner : (struct sbx_owner){0, 0};
    if (dir.uid != 0) dir.gid = SBX_DEFAULT_GID;
    const struct sbx_owner *o = &dir;
    mode_t m = (mode_t)(mode >= 0 ? mode & 07777 : dir.uid != 0 ? 0770 : 0755);
    if (!parents) {
        const char *leaf;
        int dfd = open_parent(fs, path, &leaf, err);
        if (dfd < 0) return -1;
        int e = mkdir_one(fs, dfd, leaf, m, o);
        close(dfd);
        return e < 0 ? fs_err(err, -e, path) : 0;
    }
    if (!path[1]) return 0; /* "/" exists */
    /* walk down: each prefix resolved in the root; create what is missing */
    char prefix[SBX_PATH_MAX + 1];
    size_t n = strlen(path);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && path[i] != '/') continue;
        memcpy(prefix, path, i);
        prefix[i] = '\0';
        int fd = resolve(fs, sbx_path_rel(prefix), O_PATH | O_DIRECTORY, true, prefix, err);
        if (fd >= 0) {
            close(fd);
            continue;
        }
        if (fd != -ENOENT) return -1;
        const char *leaf;
        int dfd = open_parent(fs, prefix, &leaf, err);
        if (dfd < 0) return -1;
        int e = mkdir_one(fs, dfd, leaf, m, o);
        close(dfd);
        if (e < 0 && e != -EEXIST) return fs_err(err, -e, prefix);
    }
    return 0;
}

int sbx_fs_open_dir(const struct sbx_fs *fs, const char *path, struct err *err)
{
    int fd = resolve(fs, sbx_path_rel(path), O_PATH | O_DIRECTORY, true, path, err);
    if (fd < 0) return -1;
    if (check_fs(fd, path, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool sbx_fs_fd_allowed(int fd)
{
    return fs_allowed(fd);
}

json_t *sbx_fs_list(const struct sbx_fs *fs, const char *path, size_t limit, struct err *err)
{
    int pfd = resolve(fs, sbx_path_rel(path), O_PATH | O_DIRECTORY, true, path, err);
    if (pfd < 0) return NULL;
    if (check_fs(pfd, path, err) < 0) {
        close(pfd);
        return NULL;
    }
    int fd = reopen(pfd, O_RDONLY | O_DIRECTORY);
    close(pfd);
    if (fd < 0) {
        fs_err(err, -fd, path);
        return NULL;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        fs_err(err, errno, path);
        close(fd);
        return NULL;
    }
    if (limit == 0 || limit > SBX_FS_LIST_MAX) limit = SBX_FS_LIST_MAX;
    json_t *entries = json_array();
    bool truncated = false;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (json_array_size(entries) >= limit) {
            truncated = true;
            break;
        }
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
        json_array_append_new(entries, stat_json(fs, &st, de->d_name, dirfd(d), de->d_name));
    }
    closedir(d);
    json_t *o = json_object();
    json_object_set_new(o, "path", sbx_json_text(path, strlen(path)));
    json_object_set_new(o, "entries", entries);
    json_object_set_new(o, "truncated", json_boolean(truncated));
    return o;
}

int sbx_fs_rename(const struct sbx_fs *fs, const char *from, const char *to, bool overwrite,
                  struct err *err)
{
    const char *l1, *l2;
    int d1 = open_parent(fs, from, &l1, err);
    if (d1 < 0) return -1;
    int d2 = open_parent(fs, to, &l2, err);
    if (d2 < 0) {
        close(d1);
        return -1;
    }
    int r = renameat2(d1, l1, d2, l2, overwrite ? 0 : RENAME_NOREPLACE);
    int e = r < 0 ? errno : 0;
    close(d1);
    close(d2);
    if (!e) return 0;
    return fs_err(err, e, e == EEXIST || e == ENOTEMPTY || e == EISDIR ? to : from);
}

/* Remove everything in directory `name` of dirfd, never following symlinks or
 * leaving the file system the directory is on. */
static int rm_tree(int dirfd_, const char *name, dev_t dev, int depth)
{
    if (depth > MAX_DEPTH) return -ELOOP;
    int fd = openat(dirfd_, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_dev != dev) {
        close(fd);
        return -EBUSY; /* a mount point: leave it (rmdir will say busy) */
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    int ret = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        struct stat cst;
        if (fstatat(dirfd(d), de->d_name, &cst, AT_SYMLINK_NOFOLLOW) < 0) continue;
        int e = 0;
        if (S_ISDIR(cst.st_mode)) {
            e = rm_tree(dirfd(d), de->d_name, dev, depth + 1);
            if (!e && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0) e = -errno;
        } else if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
            e = -errno;
        }
        if (e && !ret) ret = e;
    }
    closedir(d);
    return ret;
}

int sbx_fs_remove(const struct sbx_fs *fs, const char *path, bool recursive, struct err *err)
{
    const char *leaf;
    int dfd = open_parent(fs, path, &leaf, err);
    if (dfd < 0) return -1;
    struct stat st;
    int e = 0;
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        e = errno;
    } else if (S_ISDIR(st.st_mode)) {
        if (recursive) {
            int r = rm_tree(dfd, leaf, st.st_dev, 0);
            if (r < 0) e = -r;
        }
        if (!e && unlinkat(dfd, leaf, AT_REMOVEDIR) < 0) e = errno;
    } else if (unlinkat(dfd, leaf, 0) < 0) {
        e = errno;
    }
    close(dfd);
    return e ? fs_err(err, e, path) : 0;
}

int sbx_fs_chown(const struct sbx_fs *fs, const char *path, const struct sbx_owner *owner,
                 struct err *err)
{
    int fd = resolve(fs, sbx_path_rel(path), O_PATH, false, path, err);
    if (fd < 0) return -1;
    int e = 0;
    if (check_fs(fd, path, err) < 0)
        e = -1;
    else if (fchownat(fd, "", host_id(fs, owner->uid), host_id(fs, owner->gid),
                      AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
        e = fs_err(err, errno, path);
    close(fd);
    return e;
}

/* ------------------------------------------------------------------ user xattrs */

#define NO_XATTRS (-2)

/* An O_PATH fd of path that may carry user xattrs: a regular file or directory on an
 * allowed file system; NO_XATTRS (a symlink or other), or -1. follow: a final symlink
 * is followed (within the root, as a write follows it). */
static int xattr_target(const struct sbx_fs *fs, const char *path, bool follow,
                        struct err *err)
{
    int fd = resolve(fs, sbx_path_rel(path), O_PATH, follow, path, err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return fs_err(err, e, path);
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        close(fd);
        return NO_XATTRS;
    }
    if (check_fs(fd, path, err) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

json_t *sbx_fs_xattrs(const struct sbx_fs *fs, const char *path, const char *prefix,
                      struct err *err)
{
    int fd = xattr_target(fs, path, false, err);
    if (fd == -1) return NULL;
    json_t *o = json_object();
    if (fd == NO_XATTRS) return o;
    /* the inode the O_PATH fd holds, through its magic link (never a path inside) */
    char p[64], names[16384];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = listxattr(p, names, sizeof names);
    char want[300];
    int wl = snprintf(want, sizeof want, "user.%s", prefix);
    for (ssize_t i = 0; n > 0 && i < n && json_object_size(o) < SBX_XATTRS_MAX;
         i += (ssize_t)strlen(names + i) + 1) {
        const char *name = names + i;
        if (strncmp(name, want, (size_t)wl) != 0 || !name[wl]) continue;
        char v[SBX_XATTR_VALUE_MAX];
        ssize_t k = getxattr(p, name, v, sizeof v);
        if (k >= 0) json_object_set_new(o, name + wl, sbx_json_text(v, (size_t)k));
    }
    close(fd);
    return o;
}

int sbx_fs_set_xattrs(const struct sbx_fs *fs, const char *path, const char *prefix,
                      const json_t *kv, struct err *err)
{
    int fd = xattr_target(fs, path, true, err);
    if (fd == -1) return -1;
    if (fd == NO_XATTRS) {
        if (json_object_size(kv) == 0) return 0;
        return err_invalid(err, "path", "%s is no file or directory: it cannot carry metadata",
                           path);
    }
    char p[64], names[16384], want[300];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int wl = snprintf(want, sizeof want, "user.%s", prefix);
    /* the set is replaced: what kv leaves out goes (none kept on a file system without
     * user xattrs: nothing to remove there) */
    ssize_t n = listxattr(p, names, sizeof names);
    for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(names + i) + 1)
        if (!strncmp(names + i, want, (size_t)wl) && !json_object_get(kv, names + i + wl))
            removexattr(p, names + i);
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)kv, k, v) {
        char name[300];
        if (snprintf(name, sizeof name, "%s%s", want, k) >= (int)sizeof name ||
            !json_is_string(v) || json_string_length(v) > SBX_XATTR_VALUE_MAX) {
            rc = err_invalid(err, "metadata", "metadata %.60s: the key or its value is too long", k);
            break;
        }
        if (setxattr(p, name, json_string_value(v), json_string_length(v), 0) < 0) {
            int e = errno;
            if (e == ENOTSUP || e == EOPNOTSUPP)
                rc = err_invalid(err, "metadata", "%s: this file system keeps no metadata", path);
            else if (e == ENOSPC || e == E2BIG || e == ERANGE)
                rc = err_invalid(err, "metadata", "%s: no room for that metadata", path);
            else
                rc = fs_err(err, e, path);
            break;
        }
    }
    close(fd);
    return rc;
}
