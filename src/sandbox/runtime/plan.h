/*
 * plan.h - the root file system of a session, planned before it is built.
 *
 * As bubblewrap does, set-up is split in two: sbx_plan_build() turns a few inputs
 * into a flat, validated list of operations (pure: no I/O, unit-tested), and
 * sbx_plan_exec() (rootfs.c) runs that list inside the new mount namespace, in
 * order, stopping at the first failure. Every path in a plan is absolute and made
 * only of characters that cannot confuse mount option strings.
 *
 * Layout (D = the sandbox's directory, B = its base uid):
 *   D/mnt/layers              tmpfs holding the idmapped read-only lowers
 *     image/                  the image layer (generated /etc, symlinks, mount points)
 *     usr/                    the host's /usr
 *   D/mnt/root                overlay: image + D/fs/upper (work D/fs/work)
 *     usr                     overlay: host /usr + D/fs/upper/usr (work D/fs/work-usr)
 *     proc dev dev/pts dev/shm tmp    fresh proc, tmpfs /dev with six nodes, devpts,
 *                             tmpfs /dev/shm and /tmp; /proc/sys read-only, a few
 *                             /proc files masked, D/boot_id over /proc/sys/kernel/
 *                             random/boot_id; then pivot_root into D/mnt/root.
 * Both overlays write into one upper tree (D/fs/upper), so a sandbox's changes are
 * one directory: what snapshots will turn into a layer.
 *
 * A self-contained image (usr_dir NULL: every image but the built-in "host") has no
 * /usr overlay and nothing of the host: the lowers are the image's skeleton
 * (image_dir, on top) and its layers (layers_dir/<hex>, top first), each bound
 * idmapped at D/mnt/layers/image and D/mnt/layers/l<i>, and one overlay is mounted
 * with the new mount API (fsopen + one fsconfig "lowerdir+" per layer descriptor:
 * SBX_OP_OVERLAY_FD), so the number of layers is not bound by a page of mount
 * options.
 *
 * With a store (storage.h) the upper, work and work-usr directories live in one
 * snapshot-able tree U (fs_dir) instead of D/fs. A tree cloned from another
 * sandbox keeps its files' on-disk owners (the range of the sandbox that wrote them,
 * data_base): U is then bound idmapped at D/mnt/layers/fs with a user namespace
 * mapping "0 0 1" plus data_base.. -> uid_base.., so the clone's files show as this
 * sandbox's own without a chown of every file. Drive mounts (mounts[]) are bound the
 * same way from their on-disk range (mount_base), after /tmp and before the pivot;
 * their mount points are created component by component inside the new root,
 * never following a symlink.
 */
#ifndef REBUNO_SANDBOX_PLAN_H
#define REBUNO_SANDBOX_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

enum sbx_op_kind {
    SBX_OP_PRIVATE,    /* make every mount private (recursive) */
    SBX_OP_TMPFS,      /* target, data, flags */
    SBX_OP_MKDIR,      /* target, mode: create if missing; must be a real directory */
    SBX_OP_IDMAP_BIND, /* source -> target, idmapped with the session's user namespace */
    SBX_OP_OVERLAY,    /* target, data, flags */
    SBX_OP_PROC,       /* target */
    SBX_OP_DEVPTS,     /* target, data */
    SBX_OP_MKNOD,      /* target, mode, dev */
    SBX_OP_SYMLINK,    /* source (the link's text) -> target */
    SBX_OP_BIND_RO,    /* source -> target, then read-only */
    SBX_OP_PIVOT,      /* target becomes / */
    SBX_OP_BIND_IN,    /* source -> data (a path inside the root `target`), idmapped */
    SBX_OP_OVERLAY_FD, /* target; data: lowers, '\n'-separated, top first; source: the
                        * tree holding upper/ and work/ (fsopen + lowerdir+ fds) */
};

#define SBX_PLAN_LAYERS_MAX 128 /* layers of a self-contained image (oci.h) */

/* Which user namespace an idmapped bind uses (index into sbx_plan_exec's fds). */
enum sbx_plan_ns { SBX_NS_SESSION = 0, SBX_NS_FS = 1, SBX_NS_MOUNTS = 2, SBX_NS_COUNT = 3 };

#define SBX_MOUNTS_MAX 16       /* drive mounts per sandbox */
#define SBX_MOUNT_PATH_MAX 256  /* characters of a mount path inside the sandbox */
/* ptys one sandbox's devpts may hold at once (its max= option): the API's terminals
 * (SBX_PTYS_MAX, 64) and as many again for what runs inside (tmux, expect, ssh). The
 * host's pool is kernel.pty.max (4096 by default, 1024 of them reserved for the
 * host's own devpts), so no one sandbox can take it. */
#define SBX_DEVPTS_MAX 128

struct sbx_plan_mount {
    const char *source; /* host path of the tree: absolute, sbx_plan_path_ok */
    const char *target; /* canonical absolute path inside the sandbox, not "/" */
    int readonly;
};

struct sbx_op {
    enum sbx_op_kind kind;
    char *source, *target, *data;
    unsigned long flags;
    mode_t mode;
    dev_t dev;
    int optional; /* a missing target is skipped (masks of /proc files) */
    int ns;       /* SBX_OP_IDMAP_BIND, SBX_OP_BIND_IN: enum sbx_plan_ns */
    uid_t owner;  /* SBX_OP_BIND_IN: owner (uid = gid) of mount points it creates */
};

struct sbx_plan {
    struct sbx_op *ops;
    size_t n, cap;
};

struct sbx_plan_input {
    const char *sandbox_dir; /* D: absolute, holds fs/ and mnt/ */
    const char *image_dir;   /* the image layer: absolute */
    const char *usr_dir;     /* the /usr lower: absolute (normally "/usr"); NULL for a
                              * self-contained image */
    const char *layers_dir;  /* self-contained: where the layers are (absolute) */
    const char *const *layers; /* self-contained: layer names (64 hex), top first */
    size_t nlayers;
    uint32_t uid_base;       /* B: host uid (and gid) of root inside */
    uint64_t tmp_bytes;      /* size cap of /tmp and /dev/shm */
    const char *fs_dir;      /* U: holds upper/, work/, work-usr/; NULL: D/fs */
    uint32_t data_base;      /* on-disk uid of root in U; 0 or uid_base: no remap */
    const struct sbx_plan_mount *mounts; /* drive mounts, at most SBX_MOUNTS_MAX */
    size_t nmounts;
    uint32_t mount_base;     /* on-disk uid of root in the mounted trees */
    int setuid;              /* honour set-user-ID bits on the root and /usr overlays (the
                              * session runs without no_new_privs: spawn.h) */
};

/* 0, or -1 with err (400 for a path that cannot be used safely). */
int sbx_plan_build(const struct sbx_plan_input *in, struct sbx_plan *p, struct err *err);
void sbx_plan_fini(struct sbx_plan *p);
const char *sbx_op_name(enum sbx_op_kind k);
/* Whether a host path is acceptable in a plan: absolute, no "." or ".." components,
 * only [A-Za-z0-9/._+@-]. */
int sbx_plan_path_ok(const char *p);

/* Whether a plan needs the remapping namespace ns (SBX_NS_FS, SBX_NS_MOUNTS). */
int sbx_plan_uses_ns(const struct sbx_plan *p, int ns);
/* A canonical mount path inside a sandbox: absolute, no "."/".." or empty components,
 * no trailing slash, not "/", at most SBX_MOUNT_PATH_MAX characters of
 * [A-Za-z0-9/._+@-]. */
int sbx_plan_mount_path_ok(const char *p);

/*
 * Run the plan (in the child, in its new mount namespace, as root of the initial
 * user namespace). userns_fds[SBX_NS_COUNT]: the session's user namespace (used for
 * idmapped lowers) and the remapping ones (-1 when the plan does not use them).
 * Returns 0, or -errno with *failed set to the operation that failed.
 */
int sbx_plan_exec(const struct sbx_plan *p, const int *userns_fds, const struct sbx_op **failed);

#endif
