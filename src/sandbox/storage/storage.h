/*
 * storage.h - where sandbox file trees live, so that snapshots and forks are cheap.
 *
 * A store is one directory, <state>/store, holding every tree sandboxd snapshots:
 * sandboxes' upper directories (fs/<id>), snapshots (snapshots/<id>), drives
 * (drives/<id>/{data,committed}) and per-session read-only views (mounts/...).
 * Two backends:
 *   btrfs  the store is on btrfs: the state folder's own file system, or a sparse
 *          loop image <state>/store.img that sandboxd formats (mkfs.btrfs, argv
 *          only) and mounts at start-up and unmounts at shutdown (the loop device
 *          is attached with autoclear, so it goes away with the mount). Trees are
 *          subvolumes: a clone is BTRFS_IOC_SNAP_CREATE_V2 (O(1) in the tree's size,
 *          one transaction commit), a removal BTRFS_IOC_SNAP_DESTROY. Simple quotas
 *          (squota, kernel >= 6.7) are enabled so a tree can get a size limit.
 *   copy   anything else: trees are directories and a clone is a recursive copy
 *          (FICLONE reflinks where the file system has them, else a byte copy),
 *          keeping owners, modes, times, xattrs (overlay's trusted.overlay.*),
 *          symlinks and overlay whiteouts (0/0 character devices).
 * Low-level calls return 0 or -errno and never print; sbx_storage_open() logs.
 */
#ifndef REBUNO_SANDBOX_STORAGE_H
#define REBUNO_SANDBOX_STORAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

enum sbx_storage_kind { SBX_STORAGE_BTRFS = 1, SBX_STORAGE_COPY = 2 };

#define SBX_STORAGE_SIZE_DEFAULT (32ull << 30) /* sparse loop image */
#define SBX_STORE_MIXED_BELOW (2ull << 30) /* smaller loop images get mixed block groups */

struct sbx_storage {
    enum sbx_storage_kind kind;
    char *root;        /* <state>/store */
    char *image;       /* <state>/store.img when sandboxd made a loop image, else NULL */
    bool mounted;      /* sandboxd mounted root and unmounts it on close */
    bool reflink;      /* copy backend: FICLONE works here */
    bool quota;        /* btrfs simple quotas are on: size limits are enforced */
    uint64_t size;     /* bytes of the file system holding root (statfs at open) */
    char how[64];      /* "btrfs (loop image)", "btrfs (state folder)", "copy (reflink)" ... */
};

/*
 * mode: "auto" (btrfs when the state folder is on btrfs, else a btrfs loop image,
 * else copy), "btrfs" (fail when no btrfs can be had) or "copy". size: bytes of a
 * new loop image (0: SBX_STORAGE_SIZE_DEFAULT). A loop image left mounted by a
 * daemon that was killed is reused. 0 or -1 with err.
 */
int sbx_storage_open(const char *state_dir, const char *mode, uint64_t size,
                     struct sbx_storage **out, struct err *err);
/* Unmount (if sandboxd mounted it) and free. */
void sbx_storage_close(struct sbx_storage *st);
/* What a killed daemon left of the store of state_dir (daemons.h): unmount <state>/store
 * when a loop device backed by <state>/store.img is mounted there, and detach any loop
 * device still backed by that image (one still in use only gets autoclear). Returns how
 * many mounts and devices it undid, or -errno. The state folder must not be in use. */
int sbx_storage_reap(const char *state_dir);

/* A new empty tree at path (a subvolume on btrfs), mode 0700 root. */
int sbx_storage_create(struct sbx_storage *st, const char *path);
/* A new tree at dst with src's content: a snapshot on btrfs (read-only if asked),
 * else a copy. dst must not exist; its parent must. */
int sbx_storage_clone(struct sbx_storage *st, const char *src, const char *dst, bool readonly);
/* Remove a tree made by create or clone (a missing one is fine). On btrfs this is
 * one ioctl; a copied tree is renamed aside and removed by a child process. */
int sbx_storage_remove(struct sbx_storage *st, const char *path);
/* Limit a tree to `bytes` (0: no limit). -EOPNOTSUPP without quotas. */
int sbx_storage_set_limit(struct sbx_storage *st, const char *path, uint64_t bytes);
/* Bytes a tree made by create or clone holds (its btrfs qgroup's referenced bytes), or
 * -errno (-EOPNOTSUPP without quotas). */
int64_t sbx_storage_used(const struct sbx_storage *st, const char *path);
/* Bytes the store can still take (statfs f_bavail), or -errno. */
int64_t sbx_storage_free(const struct sbx_storage *st);
/* Flush the file system that holds path (syncfs). */
int sbx_storage_sync(const char *path);
/* Whether path is a tree the store can snapshot in O(1) (a btrfs subvolume). */
bool sbx_storage_is_subvolume(const char *path);

/* Copy a directory tree (the copy backend; exposed for tests). dst must not exist. */
int sbx_storage_copy_tree(const char *src, const char *dst, bool reflink);

#endif
