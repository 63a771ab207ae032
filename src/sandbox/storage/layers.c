/*
 * layers.c - the content-addressed layer store: unpack a layer blob with libarchive,
 * safely, verifying its digest (see layers.h).
 *
 * Every entry is made from the descriptor of its parent directory, itself opened
 * beneath the layer's root with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS (safefs.h), and
 * created with O_EXCL / O_NOFOLLOW / AT_SYMLINK_NOFOLLOW: a symlink the layer made
 * earlier is never followed, whatever the tar says afterwards. Nothing of the tar's
 * extended attributes is applied (a trusted.overlay.* attribute from a tar could
 * redirect the overlay); the only xattr written is the opaque marker made from an
 * ".wh..wh..opq" entry.
 */
#include "sandbox/storage/layers.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "sandbox/storage/safefs.h"

#define BLOCK (256u << 10)
#define OVL_OPAQUE "trusted.overlay.opaque"
#define NAME_MAX_LEN 4096
#define ENTRIES_MAX 2000000 /* entries of one archive (inodes are not bounded by max_bytes) */

int sbx_layers_open(const char *state_dir, struct sbx_layers *ls, struct err *err)
{
    ls->dir = xasprintf("%s/layers", state_dir);
    ls->dfd = -1;
    if (mkdir(ls->dir, 0755) < 0 && errno != EEXIST) {
        err_internal(err, "cannot create %s: %s", ls->dir, strerror(errno));
        goto fail;
    }
    ls->dfd = open(ls->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ls->dfd < 0) {
        err_internal(err, "cannot open %s: %s", ls->dir, strerror(errno));
        goto fail;
    }
    DIR *dd = opendir(ls->dir);
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd)))
            if (!strncmp(de->d_name, ".tmp-", 5)) sbx_safe_remove_tree(ls->dfd, de->d_name);
        closedir(dd);
    }
    return 0;
fail:
    free(ls->dir);
    ls->dir = NULL;
    return -1;
}

void sbx_layers_close(struct sbx_layers *ls)
{
    if (!ls->dir) return; /* never opened */
    if (ls->dfd >= 0) close(ls->dfd);
    free(ls->dir);
    ls->dir = NULL;
    ls->dfd = -1;
}

bool sbx_layer_have(const struct sbx_layers *ls, const char *digest)
{
    if (!sbx_oci_digest_ok(digest)) return false;
    struct stat st;
    return fstatat(ls->dfd, digest + 7, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

int sbx_layer_path(const struct sbx_layers *ls, const char *digest, char *out, size_t outsz)
{
    if (!sbx_oci_digest_ok(digest)) return -EINVAL;
    int n = snprintf(out, outsz, "%s/%s", ls->dir, digest + 7);
    return n < 0 || (size_t)n >= outsz ? -ENAMETOOLONG : 0;
}

int sbx_layer_remove(const struct sbx_layers *ls, const char *digest)
{
    if (!sbx_oci_digest_ok(digest)) return -EINVAL;
    static atomic_uint seq;
    char aside[128];
    snprintf(aside, sizeof aside, ".tmp-rm-%.16s-%d-%u", digest + 7, (int)getpid(),
             atomic_fetch_add(&seq, 1));
    if (renameat(ls->dfd, digest + 7, ls->dfd, aside) < 0)
        return errno == ENOENT ? 0 : -errno;
    sbx_safe_remove_tree(ls->dfd, aside);
    return 0;
}

/* ------------------------------------------------------------------ reading */

struct reader {
    int fd;
    EVP_MD_CTX *md;
    unsigned char *buf;
    int64_t done, total, last_report;
    const char *digest;
    sbx_layer_progress_fn progress;
    void *parg;
    int error; /* errno of a failed read */
};

static la_ssize_t rd(struct archive *a, void *arg, const void **out)
{
    (void)a;
    struct reader *r = arg;
    ssize_t n;
    do n = read(r->fd, r->buf, BLOCK);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        r->error = errno;
        if (a) archive_set_error(a, errno, "read: %s", strerror(errno));
        return -1;
    }
    if (n > 0) {
        EVP_DigestUpdate(r->md, r->buf, (size_t)n);
        r->done += n;
        if (r->progress && r->done - r->last_report >= (1 << 20)) {
            r->last_report = r->done;
            r->progress(r->parg, r->digest, r->done, r->total);
        }
    }
    *out = r->buf;
    return n;
}

/* Read what libarchive left of the blob (the tar's padding after its end marker). */
static int drain(struct reader *r)
{
    const void *p;
    la_ssize_t n;
    while ((n = rd(NULL, r, &p)) > 0) {}
    return n < 0 ? -r->error : 0;
}

/* ------------------------------------------------------------------ unpacking */

struct unpack {
    int root;            /* the layer's temporary root directory */
    char pdir[PATH_MAX]; /* the parent directory cached in pfd ("" : root) */
    int pfd;
    uint64_t bytes, max_bytes;
    char why[400];       /* a refusal, for the 400 */
    int sys;             /* -errno of a failure of ours (500, or 507 for ENOSPC) */
};

/* Clean an entry's name: strip "./" and trailing slashes; refuse absolute names and
 * ".." components. "" for the root itself. 0, or -1 with u->why. */
static int clean_name(struct unpack *u, const char *raw, char *out, size_t outsz,
                      const char *what)
{
    if (!raw) {
        snprintf(u->why, sizeof u->why, "a layer entry has no name");
        return -1;
    }
    if (raw[0] == '/') {
        snprintf(u->why, sizeof u->why, "%s \"%.200s\" is an absolute name", what, raw);
        return -1;
    }
    size_t w = 0;
    for (const char *c = raw; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            snprintf(u->why, sizeof u->why, "%s \"%.200s\" contains \"..\"", what, raw);
            return -1;
        }
        if (n && !(n == 1 && c[0] == '.')) {
            if (w + n + 2 > outsz) {
                snprintf(u->why, sizeof u->why, "%s \"%.120s...\" is too long", what, raw);
                return -1;
            }
            if (w) out[w++] = '/';
            memcpy(out + w, c, n);
            w += n;
        }
        c += n;
        while (*c == '/') c++;
    }
    out[w] = '\0';
    return 0;
}

/* Open (making the missing directories) the parent directory of name; its fd. */
static int parent_of(struct unpack *u, char *name, const char **leaf)
{
    char *slash = strrchr(name, '/');
    *leaf = slash ? slash + 1 : name;
    const char *dir = "";
    if (slash) {
        *slash = '\0';
        dir = name;
    }
    int fd;
    if (u->pfd >= 0 && !strcmp(u->pdir, dir)) {
        fd = u->pfd;
    } else {
        if (u->pfd >= 0) close(u->pfd);
        u->pfd = -1;
        fd = sbx_safe_open(u->root, dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY);
        if (fd == -ENOENT) { /* directories the tar did not list: make them */
            char part[PATH_MAX];
            snprintf(part, sizeof part, "%s", dir);
            fd = -ENOENT;
            for (char *c = part;;) {
                char *s = strchr(c, '/');
                if (s) *s = '\0';
                int m = sbx_safe_mkdir(u->root, part, 0755, 0, 0, NULL);
                if (m < 0) {
                    fd = m;
                    break;
                }
                if (!s) {
                    fd = m;
                    break;
                }
                close(m);
                *s = '/';
                c = s + 1;
            }
        }
        if (fd >= 0) {
            snprintf(u->pdir, sizeof u->pdir, "%s", dir);
            u->pfd = fd;
        }
    }
    if (slash) *slash = '/';
    if (fd < 0) {
        if (fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV)
            snprintf(u->why, sizeof u->why,
                     "entry \"%.200s\" lies below a symlink or a file of the layer", name);
        else
            u->sys = fd;
    }
    return fd;
}

/* Remove whatever stands at leaf (a later entry replaces an earlier one), except a
 * directory when keep_dir. */
static void clear_at(int pfd, const char *leaf, bool keep_dir)
{
    struct stat st;
    if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0) return;
    if (S_ISDIR(st.st_mode)) {
        if (!keep_dir) sbx_safe_remove_tree(pfd, leaf);
    } else {
        unlinkat(pfd, leaf, 0);
    }
}

static void set_times(int pfd, const char *leaf, struct archive_entry *e)
{
    struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                             {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW);
}

static int write_data(struct unpack *u, struct archive *a, int fd, struct archive_entry *e)
{
    const void *buf;
    size_t len;
    la_int64_t off;
    int r;
    int64_t end = 0;
    while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
        if (u->max_bytes && u->bytes + len > u->max_bytes) return -ENOSPC;
        u->bytes += len;
        const char *p = buf;
        while (len) {
            ssize_t w = pwrite(fd, p, len, off);
            if (w < 0) {
                if (errno == EINTR) continue;
                return -errno;
            }
            p += w;
            off += w;
            len -= (size_t)w;
        }
        end = off;
    }
    if (r != ARCHIVE_EOF) return 1; /* the archive's fault */
    if (end < archive_entry_size(e) && ftruncate(fd, archive_entry_size(e)) < 0) return -errno;
    return 0; /* a sparse file's hole at its end */
}

static int entry(struct unpack *u, struct archive *a, struct archive_entry *e)
{
    char name[NAME_MAX_LEN];
    if (clean_name(u, archive_entry_pathname(e), name, sizeof name, "entry") < 0) return -1;
    mode_t type = archive_entry_filetype(e);
    const char *hl = archive_entry_hardlink(e);
    mode_t perm = archive_entry_perm(e) & 07777;
    uid_t uid = (uid_t)archive_entry_uid(e);
    gid_t gid = (gid_t)archive_entry_gid(e);
    if (!name[0]) { /* "./": the root's own mode */
        if (type == AE_IFDIR) fchmod(u->root, perm | 0700);
        return 0;
    }
    const char *leaf;
    int pfd = parent_of(u, name, &leaf);
    if (pfd < 0) return -1;
    if (!strncmp(leaf, ".wh.", 4)) { /* OCI whiteouts -> overlayfs whiteouts */
        if (!strcmp(leaf, ".wh..wh..opq")) {
            if (fsetxattr(pfd, OVL_OPAQUE, "y", 1, 0) < 0) return u->sys = -errno, -1;
            return 0;
        }
        const char *victim = leaf + 4;
        if (!victim[0] || !strcmp(victim, ".") || !strcmp(victim, "..") ||
            !strncmp(victim, ".wh.", 4)) {
            snprintf(u->why, sizeof u->why, "whiteout \"%.200s\" names nothing", name);
            return -1;
        }
        clear_at(pfd, victim, false);
        if (mknodat(pfd, victim, S_IFCHR | 0, makedev(0, 0)) < 0) return u->sys = -errno, -1;
        return 0;
    }
    if (hl) {
        char target[NAME_MAX_LEN];
        if (clean_name(u, hl, target, sizeof target, "hard link target") < 0) return -1;
        int tfd = target[0] ? sbx_safe_open(u->root, target, O_PATH) : -EISDIR;
        struct stat st;
        if (tfd < 0 || fstat(tfd, &st) < 0 || !S_ISREG(st.st_mode)) {
            if (tfd >= 0) close(tfd);
            snprintf(u->why, sizeof u->why,
                     "hard link \"%.150s\" points to \"%.150s\", which is not a file of the "
                     "layer",
                     name, hl);
            return -1;
        }
        clear_at(pfd, leaf, false);
        int rc = linkat(tfd, "", pfd, leaf, AT_EMPTY_PATH) < 0 ? -errno : 0;
        close(tfd);
        if (rc < 0) return u->sys = rc, -1;
        return 0;
    }
    switch (type) {
    case AE_IFDIR: {
        clear_at(pfd, leaf, true);
        if (mkdirat(pfd, leaf, 0700) < 0 && errno != EEXIST) return u->sys = -errno, -1;
        int fd = openat(pfd, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return u->sys = -errno, -1;
        int rc = sbx_safe_set_owner(fd, perm, uid, gid);
        close(fd);
        if (rc < 0) return u->sys = rc, -1;
        return 0;
    }
    case AE_IFREG: {
        clear_at(pfd, leaf, false);
        int fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) return u->sys = -errno, -1;
        int rc = write_data(u, a, fd, e);
        if (rc == 0) rc = sbx_safe_set_owner(fd, perm, uid, gid);
        if (rc == 0) {
            struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                                     {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
            futimens(fd, ts);
        }
        close(fd);
        if (rc == 1) {
            snprintf(u->why, sizeof u->why, "the layer is damaged at \"%.200s\": %s", name,
                     archive_error_string(a) ? archive_error_string(a) : "read error");
            return -1;
        }
        if (rc < 0) return u->sys = rc, -1;
        return 0;
    }
    case AE_IFLNK: {
        const char *t = archive_entry_symlink(e);
        if (!t || !t[0]) {
            snprintf(u->why, sizeof u->why, "symlink \"%.200s\" has no target", name);
            return -1;
        }
        clear_at(pfd, leaf, false);
        if (symlinkat(t, pfd, leaf) < 0) return u->sys = -errno, -1;
        if (fchownat(pfd, leaf, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) return u->sys = -errno, -1;
        set_times(pfd, leaf, e);
        return 0;
    }
    default:
        snprintf(u->why, sizeof u->why,
                 "entry \"%.200s\" is a %s: device nodes, fifos and sockets are refused", name,
                 type == AE_IFCHR || type == AE_IFBLK ? "device node"
                 : type == AE_IFIFO                  ? "fifo"
                                                     : "socket");
        return -1;
    }
}

static int fail_sys(struct err *err, int e, const char *label)
{
    if (e == -ENOSPC || e == -EDQUOT)
        return err_set(err, 507, "no_space", "",
                       "no space left for %s; free space or delete images", label);
    return err_internal(err, "cannot unpack %s: %s", label, strerror(-e));
}

/* Read the archive from r into u->root: 0, or -1 with err (label names it). */
static int unpack_stream(struct unpack *u, struct reader *r, const char *label, struct err *err)
{
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    int rc = -1;
    if (archive_read_open(a, r, NULL, rd, NULL) != ARCHIVE_OK) {
        if (r->error) fail_sys(err, -r->error, label);
        else if (r->done == 0) rc = 0; /* an empty blob: an empty layer */
        else
            err_set(err, 400, "invalid_image", "", "%s is not a tar archive (%s)", label,
                    archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    struct archive_entry *e;
    int ar;
    long entries = 0;
    while ((ar = archive_read_next_header(a, &e)) == ARCHIVE_OK || ar == ARCHIVE_WARN) {
        if (++entries > ENTRIES_MAX) {
            err_set(err, 400, "invalid_image", "", "%s has more than %d entries", label,
                    ENTRIES_MAX);
            goto out;
        }
        if (entry(u, a, e) < 0) {
            if (u->why[0]) err_set(err, 400, "invalid_image", "", "%s: %s", label, u->why);
            else fail_sys(err, u->sys, label);
            goto out;
        }
    }
    if (ar != ARCHIVE_EOF) {
        if (r->error) fail_sys(err, -r->error, label);
        else
            err_set(err, 400, "invalid_image", "", "%s is damaged: %s", label,
                    archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    rc = 0;
out:
    archive_read_free(a);
    if (rc == 0 && drain(r) < 0) rc = fail_sys(err, -r->error, label);
    return rc;
}

int sbx_archive_unpack(int dirfd, int fd, uint64_t max_bytes, const char *label, struct err *err)
{
    struct unpack u = {.root = dirfd, .pfd = -1, .max_bytes = max_bytes};
    struct reader r = {.fd = fd, .total = -1, .digest = label};
    r.md = EVP_MD_CTX_new();
    r.buf = xmalloc(BLOCK);
    int rc = r.md && EVP_DigestInit_ex(r.md, EVP_sha256(), NULL)
                 ? unpack_stream(&u, &r, label, err)
                 : err_internal(err, "sha256 unavailable");
    if (u.pfd >= 0) close(u.pfd);
    EVP_MD_CTX_free(r.md);
    free(r.buf);
    return rc;
}

int sbx_layer_add_from_blob(const struct sbx_layers *ls, int fd, const char *media_type,
                            const char *digest, int64_t size, uint64_t max_bytes,
                            sbx_layer_progress_fn progress, void *parg,
                            struct sbx_layer_info *info, struct err *err)
{
    memset(info, 0, sizeof *info);
    if (!sbx_oci_digest_ok(digest))
        return err_set(err, 400, "invalid_image", "digest", "layer digest %.80s is not sha256:<hex>",
                       digest ? digest : "(none)");
    if (media_type) {
        enum sbx_oci_kind k = sbx_oci_media_kind(media_type);
        if (k != SBX_OCI_LAYER_TAR && k != SBX_OCI_LAYER_GZIP && k != SBX_OCI_LAYER_ZSTD)
            return err_set(err, 400, "invalid_image", "mediaType",
                           "layer %s has media type %.100s, not a tar layer", digest, media_type);
    }
    if (sbx_layer_have(ls, digest)) {
        info->existed = true;
        return 0;
    }
    static atomic_uint seq;
    char tmp[128], label[100];
    snprintf(tmp, sizeof tmp, ".tmp-%.64s-%d-%u", digest + 7, (int)getpid(),
             atomic_fetch_add(&seq, 1));
    snprintf(label, sizeof label, "layer %s", digest);
    if (mkdirat(ls->dfd, tmp, 0755) < 0) return fail_sys(err, -errno, label);
    struct unpack u = {.root = -1, .pfd = -1, .max_bytes = max_bytes};
    u.root = sbx_safe_open(ls->dfd, tmp, O_RDONLY | O_DIRECTORY);
    struct reader r = {.fd = fd, .total = size, .digest = digest, .progress = progress,
                       .parg = parg};
    int rc = -1;
    if (u.root < 0) {
        fail_sys(err, u.root, label);
        goto out;
    }
    fchmod(u.root, 0755);
    r.md = EVP_MD_CTX_new();
    r.buf = xmalloc(BLOCK);
    if (!r.md || !EVP_DigestInit_ex(r.md, EVP_sha256(), NULL)) {
        err_internal(err, "sha256 unavailable");
        goto out;
    }
    if (unpack_stream(&u, &r, label, err) < 0) goto out;
    unsigned char md[32];
    unsigned mdlen = 0;
    char hex[65];
    EVP_DigestFinal_ex(r.md, md, &mdlen);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (strcmp(hex, digest + 7) != 0) {
        err_set(err, 400, "digest_mismatch", "",
                "layer %s: its content has digest sha256:%s (damaged or not the blob named)",
                digest, hex);
        goto out;
    }
    if (size >= 0 && r.done != size) {
        err_set(err, 400, "invalid_image", "size", "layer %s: %lld bytes, the manifest says %lld",
                digest, (long long)r.done, (long long)size);
        goto out;
    }
    if (syncfs(u.root) < 0) {
        fail_sys(err, -errno, label);
        goto out;
    }
    if (renameat(ls->dfd, tmp, ls->dfd, digest + 7) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY) {
            fail_sys(err, -errno, label);
            goto out;
        }
        info->existed = true; /* a concurrent unpack won: its copy is as good */
    } else {
        tmp[0] = '\0';
    }
    info->blob_bytes = r.done;
    info->unpacked_bytes = (int64_t)u.bytes;
    if (progress) progress(parg, digest, r.done, size >= 0 ? size : r.done);
    rc = 0;
out:
    if (u.pfd >= 0) close(u.pfd);
    if (u.root >= 0) close(u.root);
    EVP_MD_CTX_free(r.md);
    free(r.buf);
    if (tmp[0]) sbx_safe_remove_tree(ls->dfd, tmp);
    return rc;
}
