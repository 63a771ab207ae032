/*
 * files.h - the files API: file operations inside a running sandbox's root.
 *
 * sandboxd holds an O_PATH descriptor of the sandbox's "/" (its init's root) and
 * resolves every client path with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
 * from it: ".." stops at the sandbox root, absolute symlinks are resolved as if the
 * sandbox root were "/", /proc magic links are refused, and the kernel re-checks
 * every step, so renames racing the lookup cannot carry it outside. Only the last
 * component is then operated on, relative to its parent's descriptor, without
 * following symlinks unless the operation says so (and then again within the root).
 *
 * For a call made on behalf of another account than root (no_user_links), paths are
 * resolved by sbx_safe_resolve (safefs.h) instead, which follows only root's links.
 *
 * Because sandboxd is host root, two more rules apply:
 *   - only regular files, directories and symlinks are touched, and a file is opened
 *     for I/O only after an O_PATH open showed it is regular (so FIFOs cannot block
 *     the daemon and no device is ever opened);
 *   - only overlay and tmpfs file systems are accepted (never the sandbox's /proc or
 *     /dev/pts, where host root could change kernel settings).
 * New files and directories belong to the acting user inside (root by default).
 * Directories made for another account belong to it and to the sandbox default group
 * (see sbx_fs_mkdir). Paths given here are already normalised (paths.h).
 */
#ifndef REBUNO_SANDBOX_FILES_H
#define REBUNO_SANDBOX_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define SBX_FS_IO_MAX (16u << 20) /* bytes of one read or write call */
#define SBX_FS_LIST_MAX 10000     /* entries of one directory listing */

struct sbx_fs {
    int rootfd;        /* O_PATH of the sandbox's "/" */
    uint32_t uid_base; /* host uid of root inside */
    /* acting for an account other than root (?user=): paths are resolved without
     * following a symlink any such account made (403 symlink_refused), so a call made
     * for alice cannot be pointed by alice at what she may not touch */
    bool no_user_links;
};

/*
 * The sandbox default group: the primary group of the default account, the one the files
 * API and commands act as when no user is named. That account is root inside, so it is
 * gid 0 (no other account is a member of it unless a sandbox adds one).
 */
#define SBX_DEFAULT_GID 0

/* Owner of new files and directories: ids inside the sandbox. */
struct sbx_owner {
    uint32_t uid, gid;
};

/* {"path","name","type","size","mode","uid","gid","mtime"[,"target"]} of a path
 * (symlinks not followed). NULL with err. */
json_t *sbx_fs_stat(const struct sbx_fs *fs, const char *path, struct err *err);
/* Read up to max bytes at off into out (appended). *size gets the file's size. */
int sbx_fs_read(const struct sbx_fs *fs, const char *path, uint64_t off, size_t max,
                struct buf *out, uint64_t *size, struct err *err);
/* Write len bytes at off. A missing file is created (mode, owner); truncate cuts an
 * existing file to off first. A mode (>= 0, masked to 07777) is applied to an existing
 * file too. *size gets the file's size after the write. */
int sbx_fs_write(const struct sbx_fs *fs, const char *path, uint64_t off, const void *data,
                 size_t len, bool truncate, int mode, const struct sbx_owner *owner,
                 uint64_t *size, struct err *err);
/*
 * Create a directory (and missing parents when parents is set). Every directory made
 * for an owner other than root belongs to owner->uid and SBX_DEFAULT_GID, mode 0770 unless
 * mode >= 0 (004: so the default account can still reach them); root's are 0755 by default.
 */
int sbx_fs_mkdir(const struct sbx_fs *fs, const char *path, bool parents, int mode,
                 const struct sbx_owner *owner, struct err *err);
/* {"path", "entries":[stat objects without "path"], "truncated": bool} */
json_t *sbx_fs_list(const struct sbx_fs *fs, const char *path, size_t limit, struct err *err);
int sbx_fs_rename(const struct sbx_fs *fs, const char *from, const char *to, bool overwrite,
                  struct err *err);
int sbx_fs_remove(const struct sbx_fs *fs, const char *path, bool recursive, struct err *err);
/* An O_PATH descriptor of a directory (symlinks followed within the root) on an allowed
 * file system, for watching it; -1 with err. sbx_fs_fd_allowed: whether fd is on one. */
int sbx_fs_open_dir(const struct sbx_fs *fs, const char *path, struct err *err);
bool sbx_fs_fd_allowed(int fd);
/* chown a path (not following a final symlink) to owner. */
int sbx_fs_chown(const struct sbx_fs *fs, const char *path, const struct sbx_owner *owner,
                 struct err *err);
/* Whole small file (at most max bytes; larger is an error) into out: for /etc files. */
int sbx_fs_read_all(const struct sbx_fs *fs, const char *path, size_t max, struct buf *out,
                    struct err *err);
/*
 * User extended attributes named "user." prefix KEY of a regular file or directory, for
 * metadata a client attaches to its files (sbx_fs_xattrs: a final symlink is not
 * followed, and has none; sbx_fs_set_xattrs follows it as sbx_fs_write does). sbx_fs_xattrs: {KEY: value} (values as text; at most SBX_XATTRS_MAX of them,
 * each at most SBX_XATTR_VALUE_MAX bytes, others skipped); a file system without user
 * xattrs gives {}. sbx_fs_set_xattrs replaces the set: each member of kv (string
 * values), and the names of the prefix kv lacks removed; 400 where the file system keeps
 * none. NULL / -1 with err.
 */
#define SBX_XATTRS_MAX 64
#define SBX_XATTR_VALUE_MAX 4096
json_t *sbx_fs_xattrs(const struct sbx_fs *fs, const char *path, const char *prefix,
                      struct err *err);
int sbx_fs_set_xattrs(const struct sbx_fs *fs, const char *path, const char *prefix,
                      const json_t *kv, struct err *err);
/* Replace a file atomically (write a temporary next to it, fsync, rename). */
int sbx_fs_replace(const struct sbx_fs *fs, const char *path, const void *data, size_t len,
                   int mode, const struct sbx_owner *owner, struct err *err);

#endif
