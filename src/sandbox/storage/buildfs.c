/*
 * buildfs.c - layer tars of image builds: the changes of a RUN step's sandbox and the
 * files of a COPY step (buildfs.h). libarchive writes pax tars; every file is opened
 * beneath its parent's descriptor with O_NOFOLLOW.
 */
#include "sandbox/storage/buildfs.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "sandbox/storage/safefs.h"

#define DEPTH_MAX 256
#define RANGE 65536u

struct tw {
    struct archive *a;
    uint32_t base; /* host uid of root inside (diff), or 0 with own = true (copy) */
    bool root_owned;
    int64_t entries;
    struct err *err;
};

static int tw_open(struct tw *w, int fd, struct err *err)
{
    w->a = archive_write_new();
    w->err = err;
    w->entries = 0;
    if (archive_write_set_format_pax_restricted(w->a) != ARCHIVE_OK ||
        archive_write_open_fd(w->a, fd) != ARCHIVE_OK) {
        err_internal(err, "cannot start a layer tar: %s", archive_error_string(w->a));
        archive_write_free(w->a);
        w->a = NULL;
        return -1;
    }
    return 0;
}

static int tw_close(struct tw *w, int rc)
{
    if (!w->a) return -1;
    if (archive_write_close(w->a) != ARCHIVE_OK && rc == 0) {
        int e = archive_errno(w->a);
        rc =
            e == ENOSPC || e == EDQUOT
                ? err_set(w->err, 507, "no_space", "", "no space left for a layer of the build")
                : err_internal(w->err, "cannot finish a layer tar: %s", archive_error_string(w->a));
    }
    archive_write_free(w->a);
    w->a = NULL;
    return rc;
}

static int64_t shift(const struct tw *w, uint32_t id)
{
    if (w->root_owned) return 0;
    return id >= w->base && id - w->base < RANGE ? (int64_t)(id - w->base) : 65534;
}

/* One entry: path (relative), st its metadata, fd its data (regular files), link its
 * target (symlinks). type_override: AE_IFREG for a whiteout (an empty file). */
static int put(struct tw *w, const char *path, const struct stat *st, int fd, const char *link,
               bool whiteout)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_uid(e, whiteout ? 0 : shift(w, st->st_uid));
    archive_entry_set_gid(e, whiteout ? 0 : shift(w, st->st_gid));
    archive_entry_set_mtime(e, st->st_mtim.tv_sec, 0);
    if (whiteout) {
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, 0);
    } else if (S_ISDIR(st->st_mode)) {
        archive_entry_set_filetype(e, AE_IFDIR);
        archive_entry_set_perm(e, st->st_mode & 07777);
    } else if (S_ISLNK(st->st_mode)) {
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_perm(e, 0777);
        archive_entry_set_symlink(e, link);
    } else {
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, st->st_mode & 07777);
        archive_entry_set_size(e, st->st_size);
    }
    int rc = 0;
    if (archive_write_header(w->a, e) != ARCHIVE_OK) {
        rc = err_internal(w->err, "cannot write %s to a layer tar: %s", path,
                          archive_error_string(w->a));
    } else if (fd >= 0 && !whiteout) {
        char buf[65536];
        int64_t left = st->st_size;
        while (left > 0) {
            ssize_t n =
                read(fd, buf, (size_t)(left < (int64_t)sizeof buf ? left : (int64_t)sizeof buf));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) { /* shrank meanwhile: pad with zeros to the size in the header */
                memset(buf, 0, sizeof buf);
                n = left < (int64_t)sizeof buf ? (ssize_t)left : (ssize_t)sizeof buf;
            }
            if (archive_write_data(w->a, buf, (size_t)n) < 0) {
                int ae = archive_errno(w->a);
                rc = ae == ENOSPC || ae == EDQUOT
                         ? err_set(w->err, 507, "no_space", "",
                                   "no space left for a layer of "
                                   "the build")
                         : err_internal(w->err, "cannot write %s to a layer tar: %s", path,
                                        archive_error_string(w->a));
                break;
            }
            left -= n;
        }
    }
    archive_entry_free(e);
    if (rc == 0) w->entries++;
    return rc;
}

static bool excluded(const char *rel)
{
    return !strcmp(rel, "etc/hostname") || !strcmp(rel, "etc/hosts") ||
           !strcmp(rel, "etc/resolv.conf");
}

/* Whether directory fd has an entry a diff keeps (top-level etc only: its own files). */
static bool etc_has_more(int dirfd)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dd) {
        if (fd >= 0) close(fd);
        return true;
    }
    bool more = false;
    struct dirent *de;
    while (!more && (de = readdir(dd))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
        more = strcmp(n, "hostname") && strcmp(n, "hosts") && strcmp(n, "resolv.conf");
    }
    closedir(dd);
    return more;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dirfd (sorted, so a tar is reproducible), NULL-terminated. */
static char **list(int dirfd)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dd) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    size_t n = 0, cap = 16;
    char **v = xcalloc(cap, sizeof *v);
    struct dirent *de;
    while ((de = readdir(dd))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n + 1 >= cap) v = xrealloc(v, (cap *= 2) * sizeof *v);
        v[n++] = xstrdup(de->d_name);
    }
    v[n] = NULL;
    closedir(dd);
    qsort(v, n, sizeof *v, cmp_names);
    return v;
}

static void list_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* Walk dirfd, whose entries go under prefix ("" or "a/b/"). diff: the overlay rules. */
static int walk(struct tw *w, int dirfd, const char *prefix, bool diff, int depth)
{
    if (depth > DEPTH_MAX)
        return err_invalid(w->err, "recipe", "a folder nests deeper than %d levels", DEPTH_MAX);
    char **names = list(dirfd);
    if (!names)
        return err_internal(w->err, "cannot list %s: %s", prefix[0] ? prefix : ".",
                            strerror(errno));
    int rc = 0;
    for (size_t i = 0; rc == 0 && names[i]; i++) {
        const char *n = names[i];
        char *rel = xasprintf("%s%s", prefix, n);
        struct stat st;
        if (strlen(rel) > 4000) {
            rc = err_invalid(w->err, "recipe", "a path is over 4000 bytes: %.100s...", rel);
        } else if (fstatat(dirfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                rc = err_internal(w->err, "cannot stat %s: %s", rel, strerror(errno));
        } else if (diff && depth == 1 && excluded(rel)) {
            /* the sandbox's own files */
        } else if (S_ISDIR(st.st_mode)) {
            int fd = openat(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                rc = err_internal(w->err, "cannot open %s: %s", rel, strerror(errno));
            } else {
                struct stat fst;
                bool skip = diff && depth == 0 && !strcmp(n, "etc") && !etc_has_more(fd);
                if (fstat(fd, &fst) < 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino) {
                    rc = err_internal(w->err, "%s changed while read", rel);
                } else if (!skip) {
                    char *sub = xasprintf("%s/", rel);
                    rc = put(w, sub, &st, -1, NULL, false);
                    char v[4] = "";
                    if (rc == 0 && diff &&
                        fgetxattr(fd, "trusted.overlay.opaque", v, sizeof v) == 1 && v[0] == 'y') {
                        char *wh = xasprintf("%s.wh..wh..opq", sub);
                        rc = put(w, wh, &st, -1, NULL, true);
                        free(wh);
                    }
                    if (rc == 0) rc = walk(w, fd, sub, diff, depth + 1);
                    free(sub);
                }
                close(fd);
            }
        } else if (S_ISREG(st.st_mode)) {
            int fd = openat(dirfd, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            struct stat fst;
            if (fd < 0)
                rc = err_internal(w->err, "cannot open %s: %s", rel, strerror(errno));
            else if (fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino)
                rc = err_internal(w->err, "%s changed while read", rel);
            else
                rc = put(w, rel, &fst, fd, NULL, false);
            if (fd >= 0) close(fd);
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t tl = readlinkat(dirfd, n, target, sizeof target - 1);
            if (tl < 0)
                rc = err_internal(w->err, "cannot read link %s: %s", rel, strerror(errno));
            else {
                target[tl] = '\0';
                rc = put(w, rel, &st, -1, target, false);
            }
        } else if (diff && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
            char *wh = xasprintf("%s.wh.%s", prefix, n); /* deleted in this step */
            rc = put(w, wh, &st, -1, NULL, true);
            free(wh);
        } /* fifos, sockets, devices: left out (no layer may hold them) */
        free(rel);
    }
    list_free(names);
    return rc;
}

int sbx_build_diff(int upper_dirfd, uint32_t base, int out_fd, int64_t *entries, struct err *err)
{
    struct tw w = {.base = base};
    if (tw_open(&w, out_fd, err) < 0) return -1;
    int rc = walk(&w, upper_dirfd, "", true, 0);
    rc = tw_close(&w, rc);
    *entries = w.entries;
    return rc;
}

/* A relative path without "..", "." only components or empty ones. */
static bool rel_ok(const char *p)
{
    if (!p[0] || p[0] == '/') return false;
    char *c = xstrdup(p), *save = NULL;
    bool ok = true;
    for (char *t = strtok_r(c, "/", &save); ok && t; t = strtok_r(NULL, "/", &save))
        ok = strcmp(t, "..") != 0;
    free(c);
    return ok;
}

int sbx_build_copy(int ctx_dirfd, const char *src, const char *dst, int dst_is_dir, int out_fd,
                   int64_t *entries, struct err *err)
{
    *entries = 0;
    if (!rel_ok(src))
        return err_invalid(err, "recipe",
                           "COPY %.200s: the source must be a path inside the "
                           "context folder (relative, without \"..\")",
                           src);
    if (dst[0] != '/') return err_internal(err, "COPY destination %s is not absolute", dst);
    int fd = sbx_safe_open(ctx_dirfd, src, O_RDONLY | O_NONBLOCK);
    if (fd == -ELOOP || fd == -EXDEV || fd == -ENOTDIR || fd == -ENOENT)
        return err_invalid(err, "recipe", "COPY %.200s: %s", src,
                           fd == -ENOENT ? "no such file in the context folder"
                                         : "the path goes through a symlink or leaves the "
                                           "context folder");
    if (fd < 0) return err_invalid(err, "recipe", "COPY %.200s: %s", src, strerror(-fd));
    struct stat st;
    if (fstat(fd, &st) < 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))) {
        close(fd);
        return err_invalid(err, "recipe", "COPY %.200s: not a regular file or folder", src);
    }
    struct tw w = {.root_owned = true};
    if (tw_open(&w, out_fd, err) < 0) {
        close(fd);
        return -1;
    }
    /* the destination's folders, root's 0755 */
    struct stat dst_st = {.st_mode = S_IFDIR | 0755, .st_mtim = st.st_mtim};
    char *d = xstrdup(dst + 1), *acc = xstrdup("");
    const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
    bool file_into = S_ISREG(st.st_mode) && dst_is_dir;
    int rc = 0;
    char *save = NULL;
    char *parts[512];
    size_t np = 0;
    for (char *t = strtok_r(d, "/", &save); t && np < 512; t = strtok_r(NULL, "/", &save))
        parts[np++] = t;
    size_t ndirs = S_ISDIR(st.st_mode) || file_into ? np : (np ? np - 1 : 0);
    for (size_t i = 0; rc == 0 && i < ndirs; i++) {
        char *nacc = xasprintf("%s%s/", acc, parts[i]);
        free(acc);
        acc = nacc;
        rc = put(&w, acc, &dst_st, -1, NULL, false);
    }
    if (rc == 0) {
        if (S_ISDIR(st.st_mode)) {
            rc = walk(&w, fd, acc, false, 0);
        } else {
            char *path = file_into ? xasprintf("%s%s", acc, base)
                                   : xasprintf("%s%s", acc, np ? parts[np - 1] : base);
            rc = put(&w, path, &st, fd, NULL, false);
            free(path);
        }
    }
    free(d);
    free(acc);
    close(fd);
    rc = tw_close(&w, rc);
    *entries = w.entries;
    return rc;
}
