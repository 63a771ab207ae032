/*
 * safefs.h - the file operations sandboxd does as host root inside a tree a sandbox
 * wrote: its upper layer (create, fork, restore, the /usr mask), the trees of
 * imported images, and paths inside a running sandbox (the files API).
 *
 * A sandbox's root may leave any symlink in its tree, and host root following one
 * would reach the host ("/etc" -> "/root" makes a chown of "upper/etc" a chown of the
 * host's /root). So nothing here takes a path the kernel would resolve from "/":
 *   - paths are resolved beneath a directory descriptor with openat2(RESOLVE_BENEATH |
 *     RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): a symlink anywhere
 *     on the way, "..", an absolute path or another mount is refused by the kernel;
 *   - owners and modes are set on a descriptor of the very directory or file just
 *     made (fchown/fchmod), never on a name that could have been swapped meanwhile;
 *   - files are replaced by a rename of a fresh temporary, which replaces a symlink
 *     or FIFO standing there instead of opening it.
 * sbx_safe_resolve is the one exception that follows symlinks: as if the descriptor
 * were "/" (like RESOLVE_IN_ROOT), and only links owned by accounts it trusts.
 * Every function returns 0 (or a descriptor) or -errno, and never prints.
 */
#ifndef REBUNO_SANDBOX_SAFEFS_H
#define REBUNO_SANDBOX_SAFEFS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* openat2(dirfd, rel, flags | O_CLOEXEC | O_NOFOLLOW) with RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, retried when a
 * concurrent rename made the kernel give up (EAGAIN). rel is relative ("." for dirfd
 * itself). A descriptor, or -errno: -ELOOP for a symlink on the way (or a final one,
 * unless O_PATH or O_DIRECTORY: then the link itself, or -ENOTDIR), -EXDEV for ".."
 * above dirfd, an absolute path or a mount, -ENOTDIR, -ENOENT. */
int sbx_safe_open(int dirfd, const char *rel, int flags);

/*
 * The directory rel beneath dirfd (its parent resolved as sbx_safe_open does). Made
 * with mode and uid:gid if missing (set on its descriptor, so the umask does not apply
 * and no name is followed; (uid_t)-1 keeps the creator's); an existing directory is
 * left as it is. Returns an O_RDONLY | O_DIRECTORY descriptor of it, or -errno: -ENOTDIR
 * when a symlink or a non-directory (a file, an overlay whiteout) stands there or is its
 * parent, -ELOOP for a symlink further up, -EEXIST when what was made was swapped for
 * another directory before it got its owner. *made (may be NULL) says whether it was
 * made here.
 */
int sbx_safe_mkdir(int dirfd, const char *rel, mode_t mode, uid_t uid, gid_t gid, bool *made);

/*
 * Replace name in the directory dirfd with a regular file holding data (mode and
 * uid:gid; (uid_t)-1 keeps the creator's): written to a temporary beside it, then
 * renamed over name, so whatever stood there (a file, a symlink, a FIFO, a whiteout)
 * is replaced and never opened. A directory there is left alone: -EISDIR. durable:
 * fsync the data before the rename.
 */
int sbx_safe_replace(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
                     uid_t uid, gid_t gid, bool durable);

/* fchmod + fchown of an open file or directory (a real descriptor, not O_PATH). */
int sbx_safe_set_owner(int fd, mode_t mode, uid_t uid, gid_t gid);

/* The same for an absolute path the daemon made itself (a tree's root in its state
 * folder), opened without following a final symlink. */
int sbx_safe_set_owner_at(const char *path, mode_t mode, uid_t uid, gid_t gid);

/* rm -rf of name in dirfd: never follows a symlink, never enters another mount (best
 * effort: what cannot be removed stays). */
void sbx_safe_remove_tree(int dirfd, const char *name);

/* Symlinks sbx_safe_resolve follows: those owned by one of these host uids. */
struct sbx_safe_links {
    uid_t uid[2];
    size_t n;
};

#define SBX_SAFE_LINKS_MAX 40 /* symlinks followed in one resolution, as the kernel's */

/*
 * Resolve the absolute path (normalised: no "." or ".." components) as if rootfd were
 * "/", one component at a time with O_PATH | O_NOFOLLOW descriptors: ".." (from a
 * link's target) never climbs above rootfd, an absolute target restarts at rootfd.
 * A symlink is followed only when its owner is one of *trusted; follow_last says
 * whether a final one is. Symlinks on procfs (magic links) are refused with -ELOOP,
 * so are more than SBX_SAFE_LINKS_MAX links. Race-free: each step is taken from the
 * descriptor of the previous one, and a link is judged by its own descriptor.
 * Returns an O_PATH descriptor (with O_DIRECTORY in flags, it must be a directory), or
 * -errno; -ENOLINK when an untrusted symlink was met, its path then in refused (the
 * sandbox's view of it, at most rlen bytes with the NUL).
 */
int sbx_safe_resolve(int rootfd, const char *path, int flags, bool follow_last,
                     const struct sbx_safe_links *trusted, char *refused, size_t rlen);

#endif
