/*
 * image.c - build the host image's layer and self-contained images' skeletons (image.h).
 */
#include "sandbox/storage/image.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "sandbox/storage/safefs.h"

#define COPY_FILE_MAX (8u << 20)

/* snprintf into a path buffer; -ENAMETOOLONG when it does not fit. */
__attribute__((format(printf, 3, 4))) static int pf(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}
#define COPY_DEPTH_MAX 8

const char *const sbx_image_etc_allow[] = {
    "alternatives", "bash.bashrc", "bash_completion", "bash_completion.d",
    "bindresvport.blacklist", "ca-certificates", "ca-certificates.conf", "debian_version",
    "default", "environment", "ethertypes", "gai.conf", "gitconfig", "host.conf", "inputrc",
    "issue", "issue.net", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
    "localtime", "login.defs", "magic", "magic.mime", "manpath.config", "mime.types",
    "nanorc", "networks", "os-release", "perl", "profile", "profile.d", "protocols",
    "python3", "python3.11", "rpc", "services", "shells", "skel", "ssl", "terminfo",
    "timezone", "vim", "wgetrc", "xattr.conf", "adduser.conf", "deluser.conf", "mailcap",
    "mke2fs.conf", NULL,
};

static const char passwd_txt[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "bin:x:2:2:bin:/bin:/usr/sbin/nologin\n"
    "sys:x:3:3:sys:/dev:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char group_txt[] = "root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\n"
                                "tty:x:5:\ndisk:x:6:\nstaff:x:50:\nusers:x:100:\n"
                                "nogroup:x:65534:\n";
static const char shadow_txt[] = "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
                                 "bin:*:19000:0:99999:7:::\nsys:*:19000:0:99999:7:::\n"
                                 "nobody:*:19000:0:99999:7:::\n";
static const char nsswitch_txt[] = "passwd: files\ngroup: files\nshadow: files\n"
                                   "gshadow: files\nhosts: files dns\nnetworks: files\n"
                                   "protocols: files\nservices: files\nethers: files\n"
                                   "rpc: files\n";
static const char hosts_txt[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
                                "ip6-loopback\n127.0.1.1\tsandbox\n";
static const char resolv_txt[] = "# rebuno sandbox: no network yet (loopback only)\n";

static int copy_regular(const char *src, int dfd, const char *name, const struct stat *st)
{
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (in < 0) return -errno;
    int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     st->st_mode & 0755);
    if (out < 0) {
        int e = -errno;
        close(in);
        return e;
    }
    char b[65536];
    int e = 0;
    for (;;) {
        ssize_t n = read(in, b, sizeof b);
        if (n < 0) {
            e = -errno;
            break;
        }
        if (n == 0) break;
        if (write(out, b, (size_t)n) != n) {
            e = -EIO;
            break;
        }
    }
    close(in);
    close(out);
    return e;
}

/* Copy a host path to name in dfd: symlinks verbatim, world-readable regular files and
 * directories. Best effort: what cannot be copied is left out. */
static void copy_tree(const char *src, int dfd, const char *name, int depth)
{
    struct stat st;
    if (lstat(src, &st) < 0 || depth > COPY_DEPTH_MAX) return;
    if (S_ISLNK(st.st_mode)) {
        char t[PATH_MAX];
        ssize_t n = readlink(src, t, sizeof t - 1);
        if (n < 0) return;
        t[n] = '\0';
        if (symlinkat(t, dfd, name) < 0) return; /* best effort, as for everything here */
        return;
    }
    if (S_ISREG(st.st_mode)) {
        if ((st.st_mode & S_IROTH) && st.st_size <= (off_t)COPY_FILE_MAX)
            copy_regular(src, dfd, name, &st);
        return;
    }
    if (!S_ISDIR(st.st_mode) || (st.st_mode & (S_IROTH | S_IXOTH)) != (S_IROTH | S_IXOTH)) return;
    int fd = sbx_safe_mkdir(dfd, name, 0755, (uid_t)-1, (gid_t)-1, NULL);
    if (fd < 0) return;
    DIR *d = opendir(src);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!strcmp(de->d_name, "private")) continue; /* ssl/private and the like */
        char s[PATH_MAX];
        if (pf(s, sizeof s, "%s/%s", src, de->d_name) < 0) continue;
        copy_tree(s, fd, de->d_name, depth + 1);
    }
    closedir(d);
    close(fd);
}

/* What keep leaves alone: something of the image's own stands there, or on the way
 * (a file, a symlink: never followed out of the layer). */
static bool image_owns(int e)
{
    return e == -EEXIST || e == -ELOOP || e == -ENOTDIR || e == -ENOENT;
}

/* The symlink parent/name -> target beneath root (parent "" for root itself). */
static int link_at(int root, const char *parent, const char *name, const char *target)
{
    int pfd = sbx_safe_open(root, parent[0] ? parent : ".", O_PATH | O_DIRECTORY);
    if (pfd < 0) return pfd;
    int e = symlinkat(target, pfd, name) < 0 ? -errno : 0;
    close(pfd);
    return e;
}

/* Build the skeleton into the directory root (host root's files). With keep, entries
 * that exist already are left alone (an imported image's own), and so is anything
 * below a symlink or a file of the image. */
static int build(int root, const char *dir, bool keep, struct err *err)
{
    static const struct {
        const char *path;
        mode_t mode;
    } dirs[] = {{"etc", 0755},     {"usr", 0755},     {"proc", 0555},
                {"sys", 0555},     {"dev", 0755},     {"tmp", 01777},    {"run", 0755},
                {"run/lock", 01777}, {"home", 0755},  {"root", 0700},    {"mnt", 0755},
                {"opt", 0755},     {"srv", 0755},     {"media", 0755},   {"var", 0755},
                {"var/tmp", 01777}, {"var/log", 0755}, {"var/cache", 0755}, {"var/lib", 0755},
                {"var/spool", 0755}, {"var/mail", 02775}, {"var/local", 0755},
                {"var/opt", 0755}, {"var/backups", 0755}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        int fd = sbx_safe_mkdir(root, dirs[i].path, dirs[i].mode, (uid_t)-1, (gid_t)-1, NULL);
        if (fd >= 0) close(fd);
        else if (!keep || !image_owns(fd))
            return err_internal(err, "image: cannot create %s/%s: %s", dir, dirs[i].path,
                                strerror(-fd));
    }
    static const struct {
        const char *parent, *name, *target;
    } links[] = {{"var", "run", "/run"}, {"var", "lock", "/run/lock"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        int e = link_at(root, links[i].parent, links[i].name, links[i].target);
        if (e < 0 && e != -EEXIST && !(keep && image_owns(e)))
            return err_internal(err, "image: symlink %s/%s/%s: %s", dir, links[i].parent,
                                links[i].name, strerror(-e));
    }
    /* merged /usr links, as the host has them */
    static const char *top[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        char host[64], t[PATH_MAX];
        pf(host, sizeof host, "/%s", top[i]);
        ssize_t n = readlink(host, t, sizeof t - 1);
        if (n <= 0) continue; /* absent, or a real directory: not supported (logged by caller) */
        t[n] = '\0';
        if (strncmp(t, "usr/", 4) != 0 && strncmp(t, "/usr/", 5) != 0) continue;
        if (symlinkat(t, root, top[i]) < 0 && !(keep && errno == EEXIST))
            return err_internal(err, "image: symlink %s/%s: %s", dir, top[i], strerror(errno));
    }
    int etc = sbx_safe_open(root, "etc", O_RDONLY | O_DIRECTORY);
    if (etc < 0) {
        if (keep && image_owns(etc))
            return err_set(err, 400, "invalid_image", "path",
                           "the image's /etc is not a directory");
        return err_internal(err, "image: cannot open %s/etc: %s", dir, strerror(-etc));
    }
    struct stat st;
    for (const char *const *a = sbx_image_etc_allow; *a; a++) {
        char s[PATH_MAX];
        pf(s, sizeof s, "/etc/%s", *a);
        if (keep && fstatat(etc, *a, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
        copy_tree(s, etc, *a, 0);
    }
    static const struct {
        const char *name, *text;
        mode_t mode;
    } gen[] = {{"passwd", passwd_txt, 0644},     {"group", group_txt, 0644},
               {"shadow", shadow_txt, 0640},     {"gshadow", "", 0640},
               {"nsswitch.conf", nsswitch_txt, 0644}, {"hosts", hosts_txt, 0644},
               {"hostname", "sandbox\n", 0644},  {"resolv.conf", resolv_txt, 0644},
               {"machine-id", "", 0444},         {"fstab", "", 0644},
               {"subuid", "", 0644},             {"subgid", "", 0644}};
    int e = 0;
    for (size_t i = 0; i < sizeof gen / sizeof gen[0] && !e; i++) {
        if (keep && fstatat(etc, gen[i].name, &st, AT_SYMLINK_NOFOLLOW) == 0) continue;
        e = sbx_safe_replace(etc, gen[i].name, gen[i].text, strlen(gen[i].text), gen[i].mode,
                             (uid_t)-1, (gid_t)-1, false);
        if (e < 0)
            err_internal(err, "image: cannot write %s/etc/%s: %s", dir, gen[i].name, strerror(-e));
    }
    if (!e && symlinkat("../proc/self/mounts", etc, "mtab") < 0 && errno != EEXIST) {
        e = -errno;
        err_internal(err, "image: symlink %s/etc/mtab: %s", dir, strerror(errno));
    }
    close(etc);
    return e ? -1 : 0;
}

/* ------------------------------------------------------------------ /usr masks */

const char *const sbx_image_usr_masked[] = {"local/etc", NULL};

#define OVL_OPAQUE "trusted.overlay.opaque"

static bool opaque(int fd)
{
    char v[4];
    return fgetxattr(fd, OVL_OPAQUE, v, sizeof v) == 1 && v[0] == 'y';
}

/* Walk rel (a/b/c) below the directory top, making what is missing as overlayfs's
 * copy-up would (the host's mode, owned by root inside), and make the last component
 * opaque. Stops early, with nothing to do, where the sandbox's own tree already hides
 * the host's: a component that is not a directory (a file, a symlink, or the whiteout
 * of a removal) or an opaque directory. 0 or -errno. */
static int mask_one(int top, const char *rel, uid_t owner)
{
    char buf[256], host[300] = "/usr";
    if (pf(buf, sizeof buf, "%s", rel) < 0) return -ENAMETOOLONG;
    int dfd = fcntl(top, F_DUPFD_CLOEXEC, 0);
    if (dfd < 0) return -errno;
    int e = 0;
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c;) {
        char *next = strtok_r(NULL, "/", &save);
        snprintf(host + strlen(host), sizeof host - strlen(host), "/%s", c);
        struct stat st;
        mode_t mode = stat(host, &st) == 0 && S_ISDIR(st.st_mode) ? st.st_mode & 07777 : 0755;
        int fd = sbx_safe_mkdir(dfd, c, mode, owner, owner, NULL);
        if (fd < 0) {
            if (fd != -ENOTDIR && fd != -ELOOP) e = fd;
            break; /* not a directory: the sandbox's own entry hides the host's */
        }
        close(dfd);
        dfd = fd;
        if (opaque(fd)) break;
        if (!next && fsetxattr(fd, OVL_OPAQUE, "y", 1, 0) < 0) e = -errno;
        c = next;
    }
    close(dfd);
    return e;
}

int sbx_image_mask_usr(const char *tree, uid_t owner, struct err *err)
{
    int tfd = open(tree, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int top = tfd < 0 ? -errno : sbx_safe_open(tfd, "upper/usr", O_RDONLY | O_DIRECTORY);
    if (tfd >= 0) close(tfd);
    if (top < 0) return err_internal(err, "cannot open %s/upper/usr: %s", tree, strerror(-top));
    int e = 0;
    const char *const *m;
    for (m = sbx_image_usr_masked; *m && !e; m++)
        e = mask_one(top, *m, owner);
    close(top);
    if (e < 0)
        return err_internal(err,
                            "cannot hide the host's /usr/%s from the sandbox (%s/upper/usr): %s",
                            m[-1], tree, strerror(-e));
    return 0;
}

void sbx_image_remove_tree(const char *path)
{
    const char *slash = strrchr(path, '/');
    char parent[PATH_MAX];
    if (!slash || !slash[1] || pf(parent, sizeof parent, "%.*s", (int)(slash - path), path) < 0)
        return;
    int pfd = open(parent[0] ? parent : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return;
    sbx_safe_remove_tree(pfd, slash + 1);
    close(pfd);
}

int sbx_image_ensure_default(const char *images_dir, struct err *err)
{
    char final[PATH_MAX], tmp[PATH_MAX];
    if (strlen(images_dir) > PATH_MAX - 1024)
        return err_invalid(err, "state_dir", "state directory path is too long");
    pf(final, sizeof final, "%s/%s", images_dir, SBX_IMAGE_DEFAULT);
    struct stat st;
    if (stat(final, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    if (mkdir(images_dir, 0700) < 0 && errno != EEXIST)
        return err_internal(err, "cannot create %s: %s", images_dir, strerror(errno));
    pf(tmp, sizeof tmp, "%s/.tmp-%s-%d", images_dir, SBX_IMAGE_DEFAULT, (int)getpid());
    sbx_image_remove_tree(tmp);
    int root = mkdir(tmp, 0755) < 0 || chmod(tmp, 0755) < 0
                   ? -errno
                   : open(tmp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        sbx_image_remove_tree(tmp);
        return err_internal(err, "image: cannot create %s: %s", tmp, strerror(errno));
    }
    int rc = build(root, tmp, false, err);
    close(root);
    if (rc < 0) {
        sbx_image_remove_tree(tmp);
        return -1;
    }
    if (rename(tmp, final) < 0) {
        int e = errno;
        sbx_image_remove_tree(tmp);
        if (e == ENOTEMPTY || e == EEXIST) return 0; /* someone else won */
        return err_internal(err, "cannot install image %s: %s", final, strerror(e));
    }
    return 0;
}


/* ------------------------------------------------------------------ skeletons */

/* Whether rel exists in the stack of layers (top first): the first layer that has it
 * decides; a whiteout there means absent. A symlink or file on the way counts as
 * present (the image has something of its own there). */
static bool in_layers(const int *fds, size_t n, const char *rel)
{
    for (size_t i = 0; i < n; i++) {
        int fd = sbx_safe_open(fds[i], rel, O_PATH);
        if (fd >= 0) {
            struct stat st;
            bool wh = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == 0;
            close(fd);
            return !wh;
        }
        if (fd != -ENOENT) return true;
    }
    return false;
}

static int skeleton(int root, const char *dir, const int *fds, size_t n, struct err *err)
{
    static const struct {
        const char *path;
        mode_t mode;
    } dirs[] = {{"etc", 0755},      {"proc", 0555},     {"sys", 0555},       {"dev", 0755},
                {"tmp", 01777},     {"run", 0755},      {"home", 0755},      {"root", 0700},
                {"mnt", 0755},      {"var", 0755},      {"var/tmp", 01777},  {"usr", 0755}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (in_layers(fds, n, dirs[i].path)) continue;
        int fd = sbx_safe_mkdir(root, dirs[i].path, dirs[i].mode, (uid_t)-1, (gid_t)-1, NULL);
        if (fd >= 0) close(fd);
        else if (!image_owns(fd))
            return err_internal(err, "image: cannot create %s/%s: %s", dir, dirs[i].path,
                                strerror(-fd));
    }
    /* /etc: the layers' own (or the skeleton's) */
    int etc = sbx_safe_mkdir(root, "etc", 0755, (uid_t)-1, (gid_t)-1, NULL);
    if (etc < 0) return err_internal(err, "image: cannot create %s/etc: %s", dir, strerror(-etc));
    static const struct {
        const char *name, *text;
        mode_t mode;
        bool always; /* the sandbox's own, whatever the image has */
    } gen[] = {{"passwd", passwd_txt, 0644, false},       {"group", group_txt, 0644, false},
               {"shadow", shadow_txt, 0640, false},       {"gshadow", "", 0640, false},
               {"nsswitch.conf", nsswitch_txt, 0644, false}, {"hosts", hosts_txt, 0644, true},
               {"hostname", "sandbox\n", 0644, true},    {"resolv.conf", resolv_txt, 0644, true}};
    int e = 0;
    for (size_t i = 0; i < sizeof gen / sizeof gen[0] && !e; i++) {
        char rel[64];
        pf(rel, sizeof rel, "etc/%s", gen[i].name);
        if (!gen[i].always && in_layers(fds, n, rel)) continue;
        e = sbx_safe_replace(etc, gen[i].name, gen[i].text, strlen(gen[i].text), gen[i].mode,
                             (uid_t)-1, (gid_t)-1, false);
        if (e < 0)
            err_internal(err, "image: cannot write %s/etc/%s: %s", dir, gen[i].name, strerror(-e));
    }
    close(etc);
    return e ? -1 : 0;
}

static atomic_uint skel_seq;

int sbx_image_make_skeleton(const char *images_dir, const char *name,
                            const char *const *layer_dirs, size_t n, struct err *err)
{
    char final[PATH_MAX], tmp[PATH_MAX];
    if (pf(final, sizeof final, "%s/%s", images_dir, name) < 0 ||
        pf(tmp, sizeof tmp, "%s/.import-skel-%s-%d-%u", images_dir, name, (int)getpid(),
           atomic_fetch_add(&skel_seq, 1)) < 0)
        return err_invalid(err, "state_dir", "state directory path is too long");
    struct stat st;
    if (lstat(final, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    int *fds = xcalloc(n + 1, sizeof *fds);
    size_t got = 0;
    int rc = -1, root = -1;
    for (; got < n; got++) {
        fds[got] = open(layer_dirs[got], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fds[got] < 0) {
            err_internal(err, "image: cannot open layer %s: %s", layer_dirs[got], strerror(errno));
            goto out;
        }
    }
    sbx_image_remove_tree(tmp);
    root = mkdir(tmp, 0755) < 0 || chmod(tmp, 0755) < 0
               ? -errno
               : open(tmp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        err_internal(err, "image: cannot create %s: %s", tmp, strerror(-root));
        goto out;
    }
    if (skeleton(root, tmp, fds, n, err) < 0) goto out;
    if (rename(tmp, final) < 0 && errno != ENOTEMPTY && errno != EEXIST) {
        err_internal(err, "cannot install %s: %s", final, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (root >= 0) close(root);
    sbx_image_remove_tree(tmp);
    for (size_t i = 0; i < got; i++) close(fds[i]);
    free(fds);
    return rc;
}
