/*
 * images.c - imported images: a host directory or tarball, imported once into
 * <state>/images/<sha256 hex>/ and cached by digest (POST/GET/DELETE /v1/images).
 *
 * An image is the sandbox root's read-only lower layer, like the default image
 * (image.h): the host's /usr is still mounted over its /usr, so an image brings
 * everything else (/etc, /app, /opt, ...). Top-level entries the image lacks (mount
 * points, merged-/usr links, a generated /etc/passwd, ...) are filled in from the
 * default skeleton without overwriting anything the image has.
 *
 * Import: the bytes are first copied into one temporary tar file (a tarball as is;
 * a directory as a deterministic `tar --sort=name --mtime=@0 --owner=0 ...` of it),
 * so the digest (SHA-256 of that file, OpenSSL) names exactly what gets extracted even if
 * the source changes meanwhile. Safety: before extracting, `tar -tP` lists the raw
 * member names (reject absolute names and any ".." component) and `tar -tvP` their
 * types (only regular files, directories, symlinks and hard links: no device nodes,
 * fifos or sockets). Extraction then runs `tar -x --no-same-owner --no-overwrite-dir`
 * into a fresh directory: everything becomes host root's (the idmapped mount makes it
 * the sandbox's root), and GNU tar never writes through a symlink it extracted (links
 * with absolute or ".." targets are placeholders until the end). The layer is renamed
 * into place only when complete. All commands are argv-only, never a shell.
 *
 * The file work runs on a worker thread (one at a time, in order), so an import of a
 * large tree never stalls the daemon's other requests; installing the layer and its row
 * in the `images` table of the sandbox store, and the reply, run on the loop.
 */
#include <dirent.h>
#include <openssl/evp.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "net/http.h"
#include "proxy/worker.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/pull.h"
#include "sandbox/storage/safefs.h"
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/store.h"
#include "sandbox/core/validate.h"

#define IMG_PATH_MAX 1024
#define IMG_LINE_MAX 8192

static const char *schema_sql = "CREATE TABLE IF NOT EXISTS images("
                                " digest TEXT PRIMARY KEY, size_bytes INTEGER NOT NULL,"
                                " created_at INTEGER NOT NULL, source_type TEXT NOT NULL,"
                                " source_path TEXT NOT NULL) STRICT;";

static sqlite3 *db_of(struct sbxd *d)
{
    return sbx_store_db(d->store);
}

int sbx_images_open(struct sbxd *d, struct err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db_of(d), schema_sql, NULL, NULL, &msg) != SQLITE_OK) {
        err_set(err, 500, "storage_error", "", "cannot create the images table: %s",
                msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    /* leftovers of an interrupted import */
    DIR *dd = opendir(d->image_dir);
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd))) {
            if (strncmp(de->d_name, ".import-", 8) != 0) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%.200s", d->image_dir, de->d_name);
            sbx_image_remove_tree(p);
        }
        closedir(dd);
    }
    return 0;
}

/* "sha256:<64 lowercase hex>" -> the hex part, or NULL. */
static const char *digest_hex(const char *ref)
{
    if (!ref || strncmp(ref, "sha256:", 7) != 0) return NULL;
    const char *h = ref + 7;
    size_t n = 0;
    for (; h[n]; n++)
        if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f'))) return NULL;
    return n == 64 ? h : NULL;
}

bool sbx_image_ref_valid(const char *ref)
{
    return !strcmp(ref, "default") || !strcmp(ref, SBX_IMAGE_DEFAULT) || digest_hex(ref);
}

static json_t *row_json(sqlite3_stmt *q)
{
    json_t *o = json_object();
    char dg[80];
    snprintf(dg, sizeof dg, "sha256:%s", (const char *)sqlite3_column_text(q, 0));
    json_object_set_new(o, "digest", json_string(dg));
    json_object_set_new(o, "size_bytes", json_integer(sqlite3_column_int64(q, 1)));
    json_object_set_new(o, "created_at", json_integer(sqlite3_column_int64(q, 2)));
    json_t *src = json_object();
    json_object_set_new(src, "type", json_string((const char *)sqlite3_column_text(q, 3)));
    json_object_set_new(src, "path", json_string((const char *)sqlite3_column_text(q, 4)));
    json_object_set_new(o, "source", src);
    return o;
}

/* The image object for this hex digest, or NULL when unknown. */
static json_t *image_get(struct sbxd *d, const char *hex)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d),
                           "SELECT digest, size_bytes, created_at, source_type, source_path"
                           " FROM images WHERE digest = ?1",
                           -1, &q, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    json_t *o = sqlite3_step(q) == SQLITE_ROW ? row_json(q) : NULL;
    sqlite3_finalize(q);
    return o;
}

int sbx_image_resolve(struct sbxd *d, const char *ref, const char *field, char *out, size_t outsz,
                      struct err *err)
{
    if (!ref || !strcmp(ref, "default") || !strcmp(ref, SBX_IMAGE_DEFAULT)) {
        snprintf(out, outsz, "%s", SBX_IMAGE_DEFAULT);
        return 0;
    }
    const char *hex = digest_hex(ref);
    if (!hex)
        return err_invalid(err, field, "%s must be \"default\" or \"sha256:<64 hex digits>\"",
                           field);
    json_t *o = image_get(d, hex);
    if (!o)
        return err_set(err, 404, "image_not_found", field, "no image %.80s; import it first", ref);
    json_decref(o);
    snprintf(out, outsz, "%s", hex);
    return 0;
}

void sbx_image_name(const char *image, char *out, size_t outsz)
{
    if (strlen(image) == 64 && strspn(image, "0123456789abcdef") == 64)
        snprintf(out, outsz, "sha256:%s", image);
    else
        snprintf(out, outsz, "%s", image);
}

/* ------------------------------------------------------------------ running tar */

/* Run argv (absolute program) with stdout to out_fd (or /dev/null), stdin and stderr
 * /dev/null. With on_line, stdout is read line by line instead (lines longer than
 * IMG_LINE_MAX stop it, unchecked); a nonzero return from on_line stops reading and
 * kills it (the result is then 1).
 * Returns the exit status, or -1 on failure to run / killed. */
static int run(char *const argv[], int out_fd, int (*on_line)(char *line, void *arg), void *arg)
{
    int p[2] = {-1, -1};
    if (on_line && pipe2(p, O_CLOEXEC) < 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (on_line)
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    else if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (on_line) close(p[1]);
    if (rc != 0) {
        if (on_line) close(p[0]);
        return -1;
    }
    bool stopped = false;
    if (on_line) {
        char *line = xmalloc(IMG_LINE_MAX + 1);
        size_t len = 0;
        bool cut = false;
        char chunk[4096];
        for (;;) {
            ssize_t n = read(p[0], chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            for (ssize_t i = 0; i < n && !stopped; i++) {
                if (chunk[i] == '\n') {
                    line[len] = '\0';
                    if (cut || on_line(line, arg) != 0) stopped = true; /* cut: refuse */
                    len = 0;
                    cut = false;
                } else if (len < IMG_LINE_MAX) {
                    line[len++] = chunk[i];
                } else if (!cut) {
                    cut = true;
                }
            }
            if (stopped) break;
        }
        if (!stopped && (len || cut)) {
            line[len] = '\0';
            if (cut || on_line(line, arg) != 0) stopped = true;
        }
        free(line);
        if (stopped) kill(pid, SIGKILL);
        close(p[0]);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (stopped) return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *tar_bin(void)
{
    return access("/usr/bin/tar", X_OK) == 0 ? "/usr/bin/tar" : "/bin/tar";
}

struct scan {
    char why[256];
};

static int check_name(char *line, void *arg)
{
    struct scan *sc = arg;
    if (line[0] == '/') {
        snprintf(sc->why, sizeof sc->why, "member \"%.120s\" has an absolute name", line);
        return 1;
    }
    for (const char *c = line; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            snprintf(sc->why, sizeof sc->why, "member \"%.120s\" contains \"..\"", line);
            return 1;
        }
        c += n;
        if (*c == '/') c++;
    }
    return 0;
}

static int check_type(char *line, void *arg)
{
    struct scan *sc = arg;
    if (!line[0] || strchr("-dlh", line[0])) return 0;
    snprintf(sc->why, sizeof sc->why,
             "member \"%.120s\" is not a file, directory or link (device nodes, fifos and "
             "sockets are refused)",
             line);
    return 1;
}

/* SHA-256 of a file as lowercase hex, streamed (the tar may be large). 0 or -errno. */
static int file_sha256_hex(const char *path, char hex[65])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0 : -ENOMEM;
    char b[65536];
    ssize_t n;
    while (rc == 0 && (n = read(fd, b, sizeof b)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = -errno;
        } else if (!EVP_DigestUpdate(ctx, b, (size_t)n)) {
            rc = -EIO;
        }
    }
    unsigned char md[32];
    unsigned int len = 0;
    if (rc == 0 && !EVP_DigestFinal_ex(ctx, md, &len)) rc = -EIO;
    for (unsigned i = 0; rc == 0 && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    close(fd);
    return rc;
}

/* Copy path (a regular file, opened without following links) into fd; size out. */
static int copy_into(const char *path, int fd, int64_t *size)
{
    int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0) return -errno;
    char b[65536];
    int e = 0;
    *size = 0;
    for (;;) {
        ssize_t n = read(in, b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            e = -errno;
            break;
        }
        if (n == 0) break;
        if (write(fd, b, (size_t)n) != n) {
            e = -EIO;
            break;
        }
        *size += n;
    }
    close(in);
    return e;
}

static bool in_use(struct sbxd *d, const char *hex)
{
    for (struct sbx *s = d->first; s; s = s->next)
        if (!strcmp(s->image, hex)) return true;
    return false;
}

/* ------------------------------------------------------------------ import */

/* ------------------------------------------------------------------ import jobs */

/* One import. The file work (tar or copy, hash, checks, extraction, filling) runs on a
 * worker thread so the daemon's loop goes on serving every other request; the install
 * (rename into place, the row) and the reply run on the loop. */
struct import_job {
    struct sbxd *d;
    struct http_req *req; /* NULL once the client left; the import still completes */
    char type[16], path[IMG_PATH_MAX + 1];
    char tar[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX], hex[65];
    int64_t size;
    bool again;     /* redo the extraction: a layer was found without its row */
    bool extracted; /* tmp holds the layer */
    int rc;
    struct err err;
};

static void job_closed(struct http_req *r, void *arg)
{
    (void)r;
    ((struct import_job *)arg)->req = NULL;
}

static void job_free(struct import_job *j)
{
    if (j->extracted) sbx_image_remove_tree(j->tmp);
    free(j);
}

/* Worker thread: files only (no store, no loop). */
static void import_work(void *arg)
{
    struct import_job *j = arg;
    struct err *err = &j->err;
    j->rc = -1;
    bool is_dir = !strcmp(j->type, "dir");
    const char *path = j->path;
    struct stat st;
    if (stat(path, &st) < 0) {
        err_invalid(err, "path", "cannot use %s: %s", path, strerror(errno));
        return;
    }
    if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        err_invalid(err, "path", "%s is not a %s", path, is_dir ? "directory" : "regular file");
        return;
    }
    int fd = open(j->tar, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        err_internal(err, "cannot create %s: %s", j->tar, strerror(errno));
        return;
    }
    int rc = 0;
    const char *T = tar_bin();
    if (is_dir) {
        char *argv[] = {
            (char *)T,   "--sort=name", "--mtime=@0", "--owner=0",  "--group=0", "--numeric-owner",
            "--no-acls", "--no-xattrs", "-C",         (char *)path, "-cf",       "-",
            ".",         NULL};
        rc = run(argv, fd, NULL, NULL);
        if (rc != 0) {
            close(fd);
            unlink(j->tar);
            err_invalid(err, "path", "tar could not read %s (exit %d)", path, rc);
            return;
        }
        struct stat ts;
        if (fstat(fd, &ts) == 0) j->size = ts.st_size;
    } else {
        int e = copy_into(path, fd, &j->size);
        if (e < 0) {
            close(fd);
            unlink(j->tar);
            err_invalid(err, "path", "cannot read %s: %s", path, strerror(-e));
            return;
        }
    }
    close(fd);
    if ((rc = file_sha256_hex(j->tar, j->hex)) < 0) {
        unlink(j->tar);
        err_internal(err, "cannot hash %s: %s", j->tar, strerror(-rc));
        return;
    }
    snprintf(j->final, sizeof j->final, "%s/%s", j->d->image_dir, j->hex);
    struct stat fs;
    if (!j->again && stat(j->final, &fs) == 0 && S_ISDIR(fs.st_mode)) {
        unlink(j->tar); /* most likely cached: the loop checks the row */
        j->rc = 0;
        return;
    }
    struct scan sc = {""};
    char *list[] = {(char *)T, "-tPf", j->tar, NULL};
    char *listv[] = {(char *)T, "-tvPf", j->tar, NULL};
    rc = run(list, -1, check_name, &sc);
    if (rc == 0 && !sc.why[0]) rc = run(listv, -1, check_type, &sc);
    if (rc != 0 || sc.why[0]) {
        unlink(j->tar);
        if (sc.why[0]) err_set(err, 400, "invalid_image", "path", "%s", sc.why);
        else err_set(err, 400, "invalid_image", "path", "%s is not a readable tar archive", path);
        return;
    }
    sbx_image_remove_tree(j->tmp);
    if (mkdir(j->tmp, 0755) < 0) {
        unlink(j->tar);
        err_internal(err, "cannot create %s: %s", j->tmp, strerror(errno));
        return;
    }
    j->extracted = true;
    char *x[] = {(char *)T,  "--no-same-owner", "--no-overwrite-dir", "--no-acls", "--no-xattrs",
                 "--no-selinux", "-C", j->tmp, "-xf", j->tar, NULL};
    rc = run(x, -1, NULL, NULL);
    unlink(j->tar);
    if (rc != 0) {
        err_set(err, 400, "invalid_image", "path", "tar could not extract %s (exit %d)", path, rc);
        return;
    }
    sbx_safe_set_owner_at(j->tmp, 0755, (uid_t)-1, (gid_t)-1); /* whatever "." the tar held */
    if (sbx_image_fill(j->tmp, err) < 0) return;
    j->rc = 0;
}

static void import_done(void *arg);
static void import_drop(void *arg) /* the daemon is shutting down */
{
    struct import_job *j = arg;
    if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        http_reply_error(j->req, 503, "shutting_down", "", "the daemon is shutting down");
    }
    job_free(j);
}

static void submit(struct import_job *j)
{
    proxy_worker_submit(j->d->img_worker, import_work, import_done, import_drop, j);
}

/* Loop: put the layer in place and record it, or find it cached. 1: resubmitted. */
static int install(struct import_job *j, json_t **out, bool *created)
{
    struct sbxd *d = j->d;
    struct err *err = &j->err;
    json_t *have = image_get(d, j->hex);
    struct stat fs;
    bool there = stat(j->final, &fs) == 0 && S_ISDIR(fs.st_mode);
    if (have && there) { /* cached, or another import of the same bytes finished first */
        *out = have;
        *created = false;
        return 0;
    }
    json_decref(have);
    if (!j->extracted) { /* a layer without its row (an interrupted import): redo it */
        sbx_image_remove_tree(j->final);
        j->again = true;
        submit(j);
        return 1;
    }
    sbx_image_remove_tree(j->final);
    if (rename(j->tmp, j->final) < 0)
        return err_internal(err, "cannot install image %s: %s", j->final, strerror(errno));
    j->extracted = false;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d),
                           "INSERT OR REPLACE INTO images(digest, size_bytes, created_at,"
                           " source_type, source_path) VALUES(?1, ?2, ?3, ?4, ?5)",
                           -1, &q, NULL) != SQLITE_OK) {
        sbx_image_remove_tree(j->final);
        return err_set(err, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
    }
    sqlite3_bind_text(q, 1, j->hex, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, j->size);
    sqlite3_bind_int64(q, 3, clock_now_ms());
    sqlite3_bind_text(q, 4, j->type, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 5, j->path, -1, SQLITE_STATIC);
    int sr = sqlite3_step(q);
    sqlite3_finalize(q);
    if (sr != SQLITE_DONE) {
        sbx_image_remove_tree(j->final);
        return err_set(err, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
    }
    log_info("image imported", "digest=sha256:%s type=%s path=%s bytes=%lld", j->hex, j->type,
             j->path, (long long)j->size);
    *out = image_get(d, j->hex);
    *created = true;
    return *out ? 0 : err_internal(err, "image %s vanished", j->hex);
}

static void import_done(void *arg)
{
    struct import_job *j = arg;
    json_t *o = NULL;
    bool created = false;
    if (j->rc == 0) {
        int rc = install(j, &o, &created);
        if (rc == 1) return; /* running again */
        j->rc = rc;
    }
    if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        if (j->rc == 0) http_reply_json(j->req, created ? 201 : 200, o);
        else http_reply_err(j->req, &j->err);
    } else {
        json_decref(o);
    }
    job_free(j);
}

/* ------------------------------------------------------------------ routes */

static void h_import(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    if (!sbx_api_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    const char *kind = json_string_value(json_object_get(body, "type"));
    if (kind && !strcmp(kind, "pull")) { /* from a registry: pull.c */
        sbx_pull_post(d, r, body);
        json_decref(body);
        return;
    }
    static const char *const known[] = {"type", "path", NULL};
    const char *type = NULL, *path = NULL;
    if (sbx_json_known(body, known, "an image import", &err) < 0 ||
        sbx_json_str(body, "type", 16, &type, &err) < 0 ||
        sbx_json_str(body, "path", IMG_PATH_MAX, &path, &err) < 0)
        goto out;
    if (!type || (strcmp(type, "dir") != 0 && strcmp(type, "tarball") != 0)) {
        err_invalid(&err, "type", "type must be \"dir\" or \"tarball\"");
        goto out;
    }
    if (!path || path[0] != '/' || strstr(path, "/../") ||
        (strlen(path) >= 3 && !strcmp(path + strlen(path) - 3, "/..")) || strpbrk(path, "\n\r\t")) {
        err_invalid(&err, "path", "path must be an absolute host path without \"..\"");
        goto out;
    }
    if (!d->img_worker && !(d->img_worker = proxy_worker_new(d->base, 1, &err))) goto out;
    static unsigned seq;
    struct import_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->req = r;
    j->err = (struct err)ERR_INIT;
    snprintf(j->type, sizeof j->type, "%s", type);
    snprintf(j->path, sizeof j->path, "%s", path);
    ++seq;
    snprintf(j->tar, sizeof j->tar, "%s/.import-%d-%u.tar", d->image_dir, (int)getpid(), seq);
    snprintf(j->tmp, sizeof j->tmp, "%s/.import-%d-%u", d->image_dir, (int)getpid(), seq);
    json_decref(body);
    http_req_on_close(r, job_closed, j);
    submit(j);
    return;
out:
    json_decref(body);
    http_reply_err(r, &err);
}

static void h_list(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *arr = json_array();
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d),
                           "SELECT digest, size_bytes, created_at, source_type, source_path"
                           " FROM images ORDER BY created_at, digest",
                           -1, &q, NULL) == SQLITE_OK) {
        while (sqlite3_step(q) == SQLITE_ROW)
            json_array_append_new(arr, row_json(q));
        sqlite3_finalize(q);
    }
    json_t *o = json_object();
    json_object_set_new(o, "images", arr);
    http_reply_json(r, 200, o);
}

static const char *param_hex(struct http_req *r)
{
    const char *p = http_req_param(r, "digest");
    const char *hex = digest_hex(p);
    if (!hex)
        http_reply_error(r, 404, "image_not_found", "", "no image %.80s (use sha256:<hex>)",
                         p ? p : "");
    return hex;
}

static void h_get(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *hex = param_hex(r);
    if (!hex) return;
    json_t *o = image_get(d, hex);
    if (!o) {
        http_reply_error(r, 404, "image_not_found", "", "no image sha256:%s", hex);
        return;
    }
    http_reply_json(r, 200, o);
}

static void h_delete(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *hex = param_hex(r);
    if (!hex) return;
    json_t *o = image_get(d, hex);
    if (!o) {
        http_reply_error(r, 404, "image_not_found", "", "no image sha256:%s", hex);
        return;
    }
    json_decref(o);
    if (in_use(d, hex)) {
        http_reply_error(r, 409, "image_in_use", "",
                         "image sha256:%s is used by a sandbox; delete the sandbox first", hex);
        return;
    }
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "DELETE FROM images WHERE digest = ?1", -1, &q, NULL) !=
        SQLITE_OK) {
        http_reply_error(r, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
        return;
    }
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    int sr = sqlite3_step(q);
    sqlite3_finalize(q);
    if (sr != SQLITE_DONE) {
        http_reply_error(r, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
        return;
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", d->image_dir, hex);
    sbx_image_remove_tree(p);
    log_info("image deleted", "digest=sha256:%s", hex);
    http_reply_raw(r, 204, NULL, NULL, 0);
}

void sbx_images_register(struct sbxd *d)
{
    http_route(d->http, "POST", "/v1/images", h_import, d);
    http_route(d->http, "GET", "/v1/images", h_list, d);
    http_route(d->http, "GET", "/v1/images/:digest", h_get, d);
    http_route(d->http, "DELETE", "/v1/images/:digest", h_delete, d);
}

void sbx_images_close(struct sbxd *d)
{
    proxy_worker_free(d->img_worker); /* waits for a running import; drops queued ones */
    d->img_worker = NULL;
}
