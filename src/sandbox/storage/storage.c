/*
 * storage.c - the store of snapshot-able trees: btrfs subvolumes, or copies (see
 * storage.h).
 *
 * The loop image is attached with LOOP_CONFIGURE + LO_FLAGS_AUTOCLEAR, so the loop
 * device disappears by itself when the file system is unmounted; mkfs.btrfs runs
 * as a child with an argv (never a shell). The ioctls come from <linux/btrfs.h>:
 * nothing on the snapshot path starts a process.
 */
#include "sandbox/storage/storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/btrfs.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "sandbox/storage/safefs.h"

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif
#ifndef STATX_ATTR_MOUNT_ROOT
#define STATX_ATTR_MOUNT_ROOT 0x00002000
#endif
#define BTRFS_SUBVOL_INO 256 /* BTRFS_FIRST_FREE_OBJECTID: the root inode of a subvolume */
#define COPY_DEPTH_MAX 256

/* ------------------------------------------------------------------ helpers */

static bool on_btrfs(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC;
}

bool sbx_storage_is_subvolume(const char *path)
{
    struct stat st;
    return on_btrfs(path) && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
           st.st_ino == BTRFS_SUBVOL_INO;
}

static bool is_mount_root(const char *path)
{
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) < 0) return false;
    return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
           (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* Run argv (no shell), output discarded; returns the exit status or -errno. */
static int run_argv(char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        int dn = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (dn >= 0) { /* mkfs.btrfs prints notes even with -q: the exit status says it all */
            dup2(dn, 0);
            dup2(dn, 1);
            dup2(dn, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Split an absolute path into an open parent directory and the last component. */
static int open_parent(const char *path, char *name, size_t nlen)
{
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1] || strlen(slash + 1) >= nlen) return -EINVAL;
    snprintf(name, nlen, "%s", slash + 1);
    char parent[PATH_MAX];
    int n = snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    if (n < 0 || (size_t)n >= sizeof parent) return -ENAMETOOLONG;
    if (!parent[0]) snprintf(parent, sizeof parent, "/");
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* Remove <root>/.trash/<name> in a child process (reaped by the daemon's reaper). */
static void trash_later(const char *trash, const char *name)
{
    pid_t pid = fork();
    if (pid == 0) {
        int dfd = open(trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) sbx_safe_remove_tree(dfd, name);
        _exit(0);
    }
    if (pid < 0) { /* no process: do it here */
        int dfd = open(trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            sbx_safe_remove_tree(dfd, name);
            close(dfd);
        }
    }
}

/* ------------------------------------------------------------------ the loop image */

static bool has_btrfs_magic(int fd)
{
    char m[8];
    return pread(fd, m, sizeof m, 0x10040) == (ssize_t)sizeof m && !memcmp(m, "_BHRfS_M", 8);
}

static int loop_attach(int imgfd, const char *image, char *dev, size_t devlen)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0) return -errno;
    int e = -EBUSY;
    for (int tries = 0; tries < 16 && e == -EBUSY; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0) {
            e = -errno;
            break;
        }
        snprintf(dev, devlen, "/dev/loop%d", n);
        int lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0 && errno == ENOENT && mknod(dev, S_IFBLK | 0660, makedev(7, (unsigned)n)) == 0)
            lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0) {
            e = -errno;
            break;
        }
        struct loop_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.fd = (uint32_t)imgfd;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        snprintf((char *)cfg.info.lo_file_name, sizeof cfg.info.lo_file_name, "%s", image);
        if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
            e = lfd; /* keep it open until the mount holds the device */
            break;
        }
        e = -errno; /* EBUSY: someone took it first; try the next free one */
        close(lfd);
    }
    close(ctl);
    return e;
}

/* Make (once) and mount the loop image at root. */
static int mount_loop_image(struct sbx_storage *st, const char *image, uint64_t size,
                            struct err *err)
{
    int fd = open(image, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return err_internal(err, "cannot open the store image %s: %s", image, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_internal(err, "store image %s is not a regular file", image);
    }
    if (!has_btrfs_magic(fd)) {
        if (ftruncate(fd, (off_t)size) < 0) {
            int e = errno;
            close(fd);
            return err_internal(err, "cannot size the store image: %s", strerror(e));
        }
        /* A small image gets mixed block groups (as mkfs.btrfs advises below 1 GiB): with
         * data and metadata in separate chunks, filling it once hands every chunk to data,
         * and after the files are deleted metadata still cannot grow, so statfs reports
         * nothing free and new trees fail with ENOSPC until a balance. */
        bool mixed = size < SBX_STORE_MIXED_BELOW;
        char *argv[] = {"mkfs.btrfs", "-q", "-f", "-K", "-m", "single", "-d", "single",
                        "-L", "rebuno-store", mixed ? "--mixed" : (char *)image,
                        mixed ? (char *)image : NULL, NULL};
        int rc = run_argv(argv);
        if (rc != 0 || !has_btrfs_magic(fd)) {
            close(fd);
            return err_internal(err, "mkfs.btrfs %s failed (exit %d); is btrfs-progs installed?",
                                image, rc);
        }
    }
    char dev[64];
    int lfd = loop_attach(fd, image, dev, sizeof dev);
    close(fd);
    if (lfd < 0)
        return err_internal(err, "cannot attach a loop device to %s: %s", image, strerror(-lfd));
    int rc = mount(dev, st->root, "btrfs", MS_NOATIME | MS_NOSUID | MS_NODEV, "discard=async");
    int e = errno;
    close(lfd); /* autoclear: the device goes away with the mount (or now, if it failed) */
    if (rc < 0) return err_internal(err, "cannot mount %s on %s: %s", dev, st->root, strerror(e));
    st->mounted = true;
    return 0;
}

static bool reflink_works(const char *dir)
{
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/.reflink-probe-a", dir);
    snprintf(b, sizeof b, "%s/.reflink-probe-b", dir);
    int fa = open(a, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int fb = open(b, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fa >= 0 && fb >= 0 && write(fa, "x", 1) == 1 && ioctl(fb, FICLONE, fa) == 0;
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    unlink(a);
    unlink(b);
    return ok;
}

int sbx_storage_open(const char *state_dir, const char *mode, uint64_t size,
                     struct sbx_storage **out, struct err *err)
{
    *out = NULL;
    if (!mode) mode = "auto";
    if (strcmp(mode, "auto") && strcmp(mode, "btrfs") && strcmp(mode, "copy"))
        return err_invalid(err, "storage", "storage must be auto, btrfs or copy");
    struct sbx_storage *st = xcalloc(1, sizeof *st);
    st->root = xasprintf("%s/store", state_dir);
    if (mkdir(st->root, 0700) < 0 && errno != EEXIST) {
        err_internal(err, "cannot create %s: %s", st->root, strerror(errno));
        goto fail;
    }
    if (strcmp(mode, "copy") != 0) {
        if (is_mount_root(st->root) && on_btrfs(st->root)) {
            /* left mounted by a daemon that was killed: ours, reuse it */
            st->kind = SBX_STORAGE_BTRFS;
            st->mounted = true;
            st->image = xasprintf("%s/store.img", state_dir);
            snprintf(st->how, sizeof st->how, "btrfs (loop image, reused)");
        } else if (on_btrfs(state_dir)) {
            st->kind = SBX_STORAGE_BTRFS;
            snprintf(st->how, sizeof st->how, "btrfs (state folder)");
        } else {
            struct err e2 = ERR_INIT;
            char *image = xasprintf("%s/store.img", state_dir);
            if (mount_loop_image(st, image, size ? size : SBX_STORAGE_SIZE_DEFAULT, &e2) == 0) {
                st->kind = SBX_STORAGE_BTRFS;
                st->image = image;
                snprintf(st->how, sizeof st->how, "btrfs (loop image)");
            } else {
                free(image);
                if (!strcmp(mode, "btrfs")) {
                    *err = e2;
                    goto fail;
                }
                log_warn("no btrfs store; snapshots copy files", "error=\"%s\"", e2.msg);
            }
        }
    }
    if (!st->kind) {
        st->kind = SBX_STORAGE_COPY;
        st->reflink = reflink_works(st->root);
        snprintf(st->how, sizeof st->how, "copy (%s)", st->reflink ? "reflink" : "plain copy");
    }
    if (st->kind == SBX_STORAGE_BTRFS && st->image) {
        /* our own file system: turn on simple quotas so drives can have a size */
        int fd = open(st->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct btrfs_ioctl_quota_ctl_args q;
        memset(&q, 0, sizeof q);
        q.cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA;
        st->quota = fd >= 0 && ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) == 0;
        if (fd >= 0) close(fd);
        if (!st->quota)
            log_warn("btrfs simple quotas unavailable; drive sizes are not enforced",
                     "error=\"%s\"", strerror(errno));
    }
    struct statfs sf;
    if (statfs(st->root, &sf) == 0) st->size = (uint64_t)sf.f_blocks * (uint64_t)sf.f_frsize;
    static const char *const dirs[] = {"fs", "snapshots", "drives", "mounts", ".trash"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", st->root, dirs[i]);
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            err_internal(err, "cannot create %s: %s", p, strerror(errno));
            goto fail;
        }
    }
    /* finish removals a previous daemon started */
    char trash[PATH_MAX];
    snprintf(trash, sizeof trash, "%s/.trash", st->root);
    DIR *t = opendir(trash);
    if (t) {
        struct dirent *de;
        while ((de = readdir(t)))
            if (de->d_name[0] != '.') trash_later(trash, de->d_name);
        closedir(t);
    }
    *out = st;
    return 0;
fail:
    sbx_storage_close(st);
    return -1;
}

/* Unmount root; lazily when something (a removal in a child process) still holds it
 * after a second. 0 or -errno. */
static int unmount_store(const char *root)
{
    int rc = -1;
    for (int i = 0; i < 50 && (rc = umount2(root, 0)) < 0 && errno == EBUSY; i++)
        usleep(20000);
    if (rc < 0 && umount2(root, MNT_DETACH) < 0) return -errno;
    return 0;
}

void sbx_storage_close(struct sbx_storage *st)
{
    if (!st) return;
    if (st->mounted && st->image) {
        int e = unmount_store(st->root);
        if (e < 0)
            log_warn("cannot unmount the store", "path=%s error=\"%s\"", st->root, strerror(-e));
    }
    free(st->root);
    free(st->image);
    free(st);
}

/* Whether the loop device named by its sysfs folder (/sys/block/loopN or
 * /sys/dev/block/M:N) is backed by image. */
static bool loop_backed_by(const char *sysdir, const char *image)
{
    char p[PATH_MAX], b[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/loop/backing_file", sysdir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) return false;
    b[n] = '\0';
    b[strcspn(b, "\n")] = '\0';
    size_t il = strlen(image); /* "PATH (deleted)" once the state folder was removed */
    return strncmp(b, image, il) == 0 && (!b[il] || !strcmp(b + il, " (deleted)"));
}

/* Whether the top mount at root is a loop device backed by image. /proc/self/mountinfo:
 * "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - TYPE SOURCE ..." (btrfs shows an
 * anonymous MAJ:MIN, so the source names the device; our paths need no octal escapes). */
static bool loop_mounted_at(const char *root, const char *image)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return false;
    char line[4096], dev[64] = "";
    while (fgets(line, sizeof line, f)) {
        char mp[PATH_MAX], src[64];
        const char *tail = strstr(line, " - ");
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, root) == 0)
            dev[0] = '\0'; /* the last one is on top */
        else
            continue;
        if (tail && sscanf(tail, " - %*s %63s", src) == 1 && !strncmp(src, "/dev/loop", 9))
            snprintf(dev, sizeof dev, "%s", src + 5);
    }
    fclose(f);
    char sys[128];
    snprintf(sys, sizeof sys, "/sys/block/%s", dev);
    return dev[0] && !strchr(dev, '/') && loop_backed_by(sys, image);
}

int sbx_storage_reap(const char *state_dir)
{
    char root[PATH_MAX], image[PATH_MAX];
    if (snprintf(root, sizeof root, "%s/store", state_dir) >= (int)sizeof root ||
        snprintf(image, sizeof image, "%s/store.img", state_dir) >= (int)sizeof image)
        return -ENAMETOOLONG;
    int n = 0;
    for (int i = 0; i < 8 && loop_mounted_at(root, image); i++) {
        int e = unmount_store(root);
        if (e < 0) return e;
        n++;
    }
    DIR *d = opendir("/sys/block");
    if (!d) return n;
    struct dirent *de;
    while ((de = readdir(d))) {
        char sys[300], dev[300];
        if (strncmp(de->d_name, "loop", 4) != 0) continue;
        snprintf(sys, sizeof sys, "/sys/block/%s", de->d_name);
        if (!loop_backed_by(sys, image)) continue;
        snprintf(dev, sizeof dev, "/dev/%s", de->d_name);
        int fd = open(dev, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        if (ioctl(fd, LOOP_CLR_FD, 0) == 0) n++; /* busy: the kernel sets autoclear instead */
        close(fd);
    }
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------ trees */

int sbx_storage_create(struct sbx_storage *st, const char *path)
{
    if (st->kind == SBX_STORAGE_BTRFS) {
        char name[BTRFS_PATH_NAME_MAX + 1];
        int pfd = open_parent(path, name, sizeof name);
        if (pfd < 0) return pfd;
        struct btrfs_ioctl_vol_args a;
        memset(&a, 0, sizeof a);
        snprintf(a.name, sizeof a.name, "%s", name);
        int e = ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0 ? -errno : 0;
        close(pfd);
        if (e < 0) return e;
    } else if (mkdir(path, 0700) < 0) {
        return -errno;
    }
    return chmod(path, 0700) < 0 ? -errno : 0;
}

int sbx_storage_clone(struct sbx_storage *st, const char *src, const char *dst, bool readonly)
{
    if (st->kind == SBX_STORAGE_BTRFS && sbx_storage_is_subvolume(src)) {
        char name[BTRFS_SUBVOL_NAME_MAX + 1];
        int pfd = open_parent(dst, name, sizeof name);
        if (pfd < 0) return pfd;
        int sfd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) {
            int e = -errno;
            close(pfd);
            return e;
        }
        struct btrfs_ioctl_vol_args_v2 a;
        memset(&a, 0, sizeof a);
        a.fd = sfd;
        a.flags = readonly ? BTRFS_SUBVOL_RDONLY : 0;
        snprintf(a.name, sizeof a.name, "%s", name);
        int e = ioctl(pfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0 ? -errno : 0;
        close(sfd);
        close(pfd);
        return e;
    }
    int e = sbx_storage_copy_tree(src, dst, st->reflink || on_btrfs(dst));
    if (e < 0) {
        char name[NAME_MAX + 1];
        int pfd = open_parent(dst, name, sizeof name);
        if (pfd >= 0) {
            sbx_safe_remove_tree(pfd, name);
            close(pfd);
        }
        return e;
    }
    if (readonly) chmod(dst, 0500);
    return 0;
}

int sbx_storage_remove(struct sbx_storage *st, const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0) return errno == ENOENT ? 0 : -errno;
    char name[NAME_MAX + 1];
    int pfd = open_parent(path, name, sizeof name);
    if (pfd < 0) return pfd;
    int e = 0;
    if (sbx_storage_is_subvolume(path)) {
        struct btrfs_ioctl_vol_args a;
        memset(&a, 0, sizeof a);
        snprintf(a.name, sizeof a.name, "%s", name);
        if (ioctl(pfd, BTRFS_IOC_SNAP_DESTROY, &a) < 0) e = -errno;
    } else {
        char trash[PATH_MAX], tname[NAME_MAX + 1];
        static unsigned seq;
        snprintf(trash, sizeof trash, "%s/.trash", st->root);
        snprintf(tname, sizeof tname, "%d-%u-%.200s", (int)getpid(), ++seq, name);
        int tfd = open(trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tfd >= 0 && renameat(pfd, name, tfd, tname) == 0) {
            trash_later(trash, tname);
        } else {
            sbx_safe_remove_tree(pfd, name);
        }
        if (tfd >= 0) close(tfd);
    }
    close(pfd);
    return e;
}

int sbx_storage_set_limit(struct sbx_storage *st, const char *path, uint64_t bytes)
{
    if (st->kind != SBX_STORAGE_BTRFS || !st->quota || !sbx_storage_is_subvolume(path))
        return -EOPNOTSUPP;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct btrfs_ioctl_qgroup_limit_args a;
    memset(&a, 0, sizeof a);
    a.qgroupid = 0; /* the subvolume fd refers to */
    a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
    a.lim.max_rfer = bytes ? bytes : (uint64_t)-1;
    int e = ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0 ? -errno : 0;
    close(fd);
    return e;
}

int64_t sbx_storage_used(const struct sbx_storage *st, const char *path)
{
    if (st->kind != SBX_STORAGE_BTRFS || !st->quota || !sbx_storage_is_subvolume(path))
        return -EOPNOTSUPP;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct btrfs_ioctl_fs_info_args fi;
    struct btrfs_ioctl_ino_lookup_args il;
    memset(&fi, 0, sizeof fi);
    memset(&il, 0, sizeof il);
    il.objectid = BTRFS_SUBVOL_INO; /* treeid 0: the subvolume fd is in */
    int e = ioctl(fd, BTRFS_IOC_FS_INFO, &fi) < 0 || ioctl(fd, BTRFS_IOC_INO_LOOKUP, &il) < 0
                ? -errno
                : 0;
    close(fd);
    if (e < 0) return e;
    /* the subvolume's qgroup 0/<id>: its referenced bytes, as the kernel exports them */
    char p[160];
    int n = snprintf(p, sizeof p, "/sys/fs/btrfs/");
    for (int i = 0; i < BTRFS_FSID_SIZE; i++)
        n += snprintf(p + n, sizeof p - (size_t)n, "%s%02x",
                      i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", fi.fsid[i]);
    snprintf(p + n, sizeof p - (size_t)n, "/qgroups/0_%llu/referenced",
             (unsigned long long)il.treeid);
    FILE *f = fopen(p, "re");
    if (!f) return -errno;
    long long v = -1;
    e = fscanf(f, "%lld", &v) == 1 && v >= 0 ? 0 : -EIO;
    fclose(f);
    return e < 0 ? e : (int64_t)v;
}

int64_t sbx_storage_free(const struct sbx_storage *st)
{
    struct statfs sf;
    if (statfs(st->root, &sf) < 0) return -errno;
    return (int64_t)(sf.f_bavail * (uint64_t)sf.f_frsize);
}

int sbx_storage_sync(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int e = syncfs(fd) < 0 ? -errno : 0;
    close(fd);
    return e;
}

/* ------------------------------------------------------------------ the copy backend */

static int copy_xattrs(int sfd, int dfd)
{
    char names[8192];
    ssize_t n = flistxattr(sfd, names, sizeof names);
    if (n < 0) return errno == ENOTSUP ? 0 : -errno;
    char val[8192];
    for (char *k = names; k < names + n; k += strlen(k) + 1) {
        ssize_t v = fgetxattr(sfd, k, val, sizeof val);
        if (v < 0) continue;
        if (fsetxattr(dfd, k, val, (size_t)v, 0) < 0 && errno != ENOTSUP) return -errno;
    }
    return 0;
}

static int copy_data(int in, int out, bool reflink)
{
    if (reflink && ioctl(out, FICLONE, in) == 0) return 0;
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
        if (n == 0) return 0;
        if (n > 0) continue;
        if (errno == EINTR) continue;
        if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP) return -errno;
        break;
    }
    char b[65536];
    for (;;) { /* copy_file_range refused: plain read/write */
        ssize_t n = read(in, b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return 0;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, b + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) return -errno;
            off += w;
        }
    }
}

/* Copy entry sname of sdir to dname in ddir. */
static int copy_entry(int sdir, const char *sname, int ddir, const char *dname, bool reflink,
                      int depth)
{
    if (depth > COPY_DEPTH_MAX) return -ELOOP;
    struct stat sb;
    if (fstatat(sdir, sname, &sb, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
    int e = 0;
    struct timespec times[2] = {sb.st_atim, sb.st_mtim};
    if (S_ISDIR(sb.st_mode)) {
        if (mkdirat(ddir, dname, 0700) < 0) return -errno;
        int s = openat(sdir, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int d = openat(ddir, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s < 0 || d < 0) {
            e = -errno;
            goto dir_out;
        }
        int s2 = dup(s);
        DIR *dp = s2 >= 0 ? fdopendir(s2) : NULL;
        if (!dp) {
            if (s2 >= 0) close(s2);
            e = -errno;
            goto dir_out;
        }
        struct dirent *de;
        while (!e && (de = readdir(dp))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            e = copy_entry(dirfd(dp), de->d_name, d, de->d_name, reflink, depth + 1);
        }
        closedir(dp);
        if (!e) e = copy_xattrs(s, d);
        if (!e && (fchown(d, sb.st_uid, sb.st_gid) < 0 || fchmod(d, sb.st_mode & 07777) < 0))
            e = -errno;
        if (!e) futimens(d, times);
    dir_out:
        if (s >= 0) close(s);
        if (d >= 0) close(d);
        return e;
    }
    if (S_ISREG(sb.st_mode)) {
        int s = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (s < 0) return -errno;
        int d = openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (d < 0) {
            e = -errno;
            close(s);
            return e;
        }
        e = copy_data(s, d, reflink);
        if (!e) e = copy_xattrs(s, d);
        if (!e && (fchown(d, sb.st_uid, sb.st_gid) < 0 || fchmod(d, sb.st_mode & 07777) < 0))
            e = -errno;
        if (!e) futimens(d, times);
        close(s);
        close(d);
        return e;
    }
    if (S_ISLNK(sb.st_mode)) {
        char t[PATH_MAX];
        ssize_t n = readlinkat(sdir, sname, t, sizeof t - 1);
        if (n < 0) return -errno;
        t[n] = '\0';
        if (symlinkat(t, ddir, dname) < 0) return -errno;
        if (fchownat(ddir, dname, sb.st_uid, sb.st_gid, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
        utimensat(ddir, dname, times, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    /* overlay whiteouts (0/0 character devices) and FIFOs; no other device can be in
     * a sandbox's tree (root inside cannot mknod), sockets are skipped */
    if ((S_ISCHR(sb.st_mode) && sb.st_rdev == 0) || S_ISFIFO(sb.st_mode)) {
        if (mknodat(ddir, dname, sb.st_mode, sb.st_rdev) < 0) return -errno;
        if (fchownat(ddir, dname, sb.st_uid, sb.st_gid, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
        /* xattrs of a whiteout are rare; not copied */
        return 0;
    }
    return 0;
}

int sbx_storage_copy_tree(const char *src, const char *dst, bool reflink)
{
    char sname[NAME_MAX + 1], dname[NAME_MAX + 1];
    int sp = open_parent(src, sname, sizeof sname);
    if (sp < 0) return sp;
    int dp = open_parent(dst, dname, sizeof dname);
    if (dp < 0) {
        close(sp);
        return dp;
    }
    int e = copy_entry(sp, sname, dp, dname, reflink, 0);
    close(sp);
    close(dp);
    return e;
}
