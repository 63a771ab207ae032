/*
 * rootfs.c - run a session's mount plan (see plan.h) in the new mount namespace.
 *
 * Runs in the freshly cloned child, as root of the initial user namespace, before
 * anything of the sandbox runs: nothing inside can race these operations. Still,
 * every mount target inside the new root is checked to be a real directory (a
 * sandbox could have left a symlink named like a mount point in its upper layer,
 * and mount(2) follows symlinks). Idmapped lowers use the new mount API:
 * open_tree(OPEN_TREE_CLONE) + mount_setattr(MOUNT_ATTR_IDMAP) + move_mount.
 * Drive mount points (SBX_OP_BIND_IN) are paths chosen by the API's caller inside
 * a root the sandbox wrote: they are walked one component at a time from the new
 * root, never through a symlink (sbx_safe_mkdir: missing directories are made and
 * given to the sandbox's root), and the tree is moved onto the final directory's
 * descriptor. Directories made here get their mode on their descriptor.
 */
#include "sandbox/runtime/plan.h"
#include "sandbox/storage/safefs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

/* The target must be a directory that is not a symlink. */
static int real_dir(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int do_mkdir(const struct sbx_op *o)
{
    if (mkdir(o->target, o->mode & 07777) == 0) { /* the mode, not masked by the umask */
        sbx_safe_set_owner_at(o->target, o->mode & 07777, (uid_t)-1, (gid_t)-1);
        return 0;
    }
    if (errno != EEXIST) return -errno;
    return real_dir(o->target);
}

/* A detached, idmapped (and maybe read-only) clone of o->source; fd or -errno. */
static int idmapped_tree(const struct sbx_op *o, int userns_fd)
{
    if (userns_fd < 0) return -EINVAL;
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, o->source,
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0) return -errno;
    struct mount_attr attr = {0};
    attr.attr_set = MOUNT_ATTR_IDMAP;
    if (o->flags & MS_RDONLY) attr.attr_set |= MOUNT_ATTR_RDONLY;
    if (o->flags & MS_NOSUID) attr.attr_set |= MOUNT_ATTR_NOSUID;
    if (o->flags & MS_NODEV) attr.attr_set |= MOUNT_ATTR_NODEV;
    attr.userns_fd = (uint64_t)userns_fd;
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* Walk o->data below the root o->target, making missing directories. */
static int do_bind_in(const struct sbx_op *o, int userns_fd)
{
    int dfd = open(o->target, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return -errno;
    char rel[512];
    if (snprintf(rel, sizeof rel, "%s", o->data) >= (int)sizeof rel) {
        close(dfd);
        return -ENAMETOOLONG;
    }
    int e = 0;
    for (char *save = NULL, *c = strtok_r(rel, "/", &save); c && !e;
         c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, ".") || !strcmp(c, "..")) {
            e = -EINVAL;
            break;
        }
        int next = sbx_safe_mkdir(dfd, c, 0755, o->owner, o->owner, NULL);
        if (next < 0) {
            e = next == -ELOOP ? -ENOTDIR : next;
            break;
        }
        close(dfd);
        dfd = next;
    }
    if (!e) {
        int fd = idmapped_tree(o, userns_fd);
        if (fd < 0) {
            e = fd;
        } else {
            if (syscall(SYS_move_mount, fd, "", dfd, "",
                        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                e = -errno;
            close(fd);
        }
    }
    close(dfd);
    return e;
}

static int do_idmap_bind(const struct sbx_op *o, int userns_fd)
{
    int e = real_dir(o->target);
    if (e < 0) return e;
    int fd = idmapped_tree(o, userns_fd);
    if (fd < 0) return fd;
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, o->target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        e = -errno;
    close(fd);
    return e;
}

static int do_bind_ro(const struct sbx_op *o)
{
    struct stat st;
    if (lstat(o->target, &st) < 0) return o->optional && errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode)) return -ELOOP;
    if (mount(o->source, o->target, NULL, MS_BIND | MS_REC, NULL) < 0) return -errno;
    if (mount(NULL, o->target, NULL,
              MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return -errno;
    return 0;
}

/* The overlay of a self-contained image: fsopen("overlay"), each lower given as a
 * descriptor ("lowerdir+", top first), upper and work as paths, then fsmount and
 * move_mount onto the target. No option string, so no page limit on the layers. */
static int do_overlay_fd(const struct sbx_op *o)
{
    int e = real_dir(o->target);
    if (e < 0) return e;
    int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
    if (fs < 0) return -errno;
    char path[1200];
    for (const char *c = o->data; *c && !e;) {
        size_t n = strcspn(c, "\n");
        if (n >= sizeof path) {
            e = -ENAMETOOLONG;
            break;
        }
        memcpy(path, c, n);
        path[n] = '\0';
        int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) e = -errno;
        else if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_FD, "lowerdir+", NULL, fd) < 0) e = -errno;
        if (fd >= 0) close(fd);
        c += n;
        if (*c == '\n') c++;
    }
    if (!e && snprintf(path, sizeof path, "%s/upper", o->source) < (int)sizeof path &&
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", path, 0) < 0)
        e = -errno;
    if (!e && snprintf(path, sizeof path, "%s/work", o->source) < (int)sizeof path &&
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", path, 0) < 0)
        e = -errno;
    if (!e && syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) e = -errno;
    int mnt = -1;
    if (!e) {
        unsigned attr = (o->flags & MS_NOSUID ? MOUNT_ATTR_NOSUID : 0) |
                        (o->flags & MS_NODEV ? MOUNT_ATTR_NODEV : 0);
        mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attr);
        if (mnt < 0) e = -errno;
    }
    if (!e && syscall(SYS_move_mount, mnt, "", AT_FDCWD, o->target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        e = -errno;
    if (mnt >= 0) close(mnt);
    close(fs);
    return e;
}

static int do_pivot(const struct sbx_op *o)
{
    if (chdir(o->target) < 0) return -errno;
    if (syscall(SYS_pivot_root, ".", ".") < 0) return -errno;
    /* the old root is stacked under the new one: detach it */
    if (umount2(".", MNT_DETACH) < 0) return -errno;
    if (chdir("/") < 0) return -errno;
    return 0;
}

static int run_op(const struct sbx_op *o, const int *fds)
{
    int userns_fd = o->ns >= 0 && o->ns < SBX_NS_COUNT ? fds[o->ns] : -1;
    int e;
    switch (o->kind) {
    case SBX_OP_PRIVATE:
        return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? -errno : 0;
    case SBX_OP_TMPFS:
        if ((e = real_dir(o->target)) < 0) return e;
        return mount("tmpfs", o->target, "tmpfs", o->flags, o->data) < 0 ? -errno : 0;
    case SBX_OP_MKDIR:
        return do_mkdir(o);
    case SBX_OP_IDMAP_BIND:
        return do_idmap_bind(o, userns_fd);
    case SBX_OP_OVERLAY:
        if ((e = real_dir(o->target)) < 0) return e;
        return mount("overlay", o->target, "overlay", o->flags, o->data) < 0 ? -errno : 0;
    case SBX_OP_PROC:
        if ((e = real_dir(o->target)) < 0) return e;
        return mount("proc", o->target, "proc", o->flags, NULL) < 0 ? -errno : 0;
    case SBX_OP_DEVPTS:
        if ((e = real_dir(o->target)) < 0) return e;
        return mount("devpts", o->target, "devpts", o->flags, o->data) < 0 ? -errno : 0;
    case SBX_OP_MKNOD:
        if (mknod(o->target, o->mode, o->dev) < 0) return -errno;
        return chmod(o->target, o->mode & 07777) < 0 ? -errno : 0;
    case SBX_OP_SYMLINK:
        return symlink(o->source, o->target) < 0 ? -errno : 0;
    case SBX_OP_BIND_RO:
        return do_bind_ro(o);
    case SBX_OP_PIVOT:
        return do_pivot(o);
    case SBX_OP_BIND_IN:
        return do_bind_in(o, userns_fd);
    case SBX_OP_OVERLAY_FD:
        return do_overlay_fd(o);
    }
    return -EINVAL;
}

int sbx_plan_exec(const struct sbx_plan *p, const int *userns_fds, const struct sbx_op **failed)
{
    *failed = NULL;
    for (size_t i = 0; i < p->n; i++) {
        int e = run_op(&p->ops[i], userns_fds);
        if (e < 0) {
            *failed = &p->ops[i];
            return e;
        }
    }
    return 0;
}
