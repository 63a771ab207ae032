/*
 * images.c - images: the built-in "host" image and imported self-contained ones
 * (POST/GET/DELETE /v1/images, POST /v1/images/gc), and what sessions need of them.
 *
 * An imported image is a stack of read-only layers in the layer store (layers.h,
 * <state>/store/layers/<hex>, shared between images) plus a small skeleton
 * <state>/images/<manifest hex>/ on top (image.h); nothing of the host's /usr. Sources:
 *   oci-layout      an OCI image layout directory, or a tar of one
 *   docker-archive  a `docker save` archive
 *   dir, tarball    a host directory or tarball as a single-layer image (the digest is
 *                   the SHA-256 of the tar: the tarball as is, or a deterministic
 *                   `tar --sort=name --mtime=@0 --owner=0 ...` of the directory)
 * and the registry pull (another file) hands its downloads over as an OCI layout too.
 * Every one ends in sbx_image_install_oci_layout / sbx_layer_add_from_blob, on the
 * import worker thread (one job at a time, in order, so concurrent imports of one image
 * do the work once); recording the image (sbx_images_commit) and the reply run on the
 * loop.
 *
 * Rows: `images` (digest hex, size, source, layers as a JSON array bottom first, the
 * config sessions apply) and `image_refs` (canonical "registry/repo:tag" -> digest; a
 * tag moves when an import names it again). An image is named by a reference
 * ("name:tag", "name@sha256:...", "sha256:..."), "host", or "default": the image tagged
 * docker.io/rebuno/default:latest when there is one, else host. Delete is refused
 * while a sandbox or a snapshot uses the image; layers no image references are removed
 * then (or by POST /v1/images/gc), unless an import is in flight.
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
#include "sandbox/storage/build.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/pull.h"
#include "sandbox/storage/layers.h"
#include "sandbox/storage/oci.h"
#include "sandbox/storage/safefs.h"
#include "sandbox/storage/storage.h"
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/store.h"
#include "sandbox/core/validate.h"

#define IMG_PATH_MAX 1024
#define IMG_KEEP_FREE (32ll << 20) /* bytes an import leaves free in the store */
#define IMG_DEFAULT_REF "docker.io/rebuno/default:latest"

static const char *schema_sql =
    "CREATE TABLE IF NOT EXISTS images("
    " digest TEXT PRIMARY KEY, size_bytes INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, source_type TEXT NOT NULL,"
    " source_path TEXT NOT NULL, layers TEXT, config TEXT) STRICT;"
    "CREATE TABLE IF NOT EXISTS image_refs(ref TEXT PRIMARY KEY, digest TEXT NOT NULL) STRICT;";

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
    /* a state folder from before layers: add the columns (an error says they exist) */
    sqlite3_exec(db_of(d), "ALTER TABLE images ADD COLUMN layers TEXT", NULL, NULL, NULL);
    sqlite3_exec(db_of(d), "ALTER TABLE images ADD COLUMN config TEXT", NULL, NULL, NULL);
    if (sbx_layers_open(d->storage ? d->storage->root : d->state_dir, &d->layers, err) < 0)
        return -1;
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
    return ref && sbx_oci_digest_ok(ref) ? ref + 7 : NULL;
}

static bool is_host(const char *ref)
{
    return !strcmp(ref, "host") || !strcmp(ref, SBX_IMAGE_DEFAULT);
}

bool sbx_image_ref_valid(const char *ref)
{
    struct sbx_oci_ref r;
    struct err e = ERR_INIT;
    return is_host(ref) || !strcmp(ref, "default") || digest_hex(ref) ||
           sbx_oci_ref_parse(ref, &r, &e) == 0;
}

/* The first reference of an image (canonical), into out ("" when none). */
static void first_ref(struct sbxd *d, const char *hex, char *out, size_t outsz)
{
    out[0] = '\0';
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT ref FROM image_refs WHERE digest = ?1 ORDER BY ref"
                           " LIMIT 1", -1, &q, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW)
        snprintf(out, outsz, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
}

/* "name@sha256:<hex>" for an image with a reference, else "sha256:<hex>". */
static void pinned(struct sbxd *d, const char *hex, char *out, size_t outsz)
{
    char ref[800];
    first_ref(d, hex, ref, sizeof ref);
    struct sbx_oci_ref r;
    struct err e = ERR_INIT;
    if (ref[0] && sbx_oci_ref_parse(ref, &r, &e) == 0)
        snprintf(out, outsz, "%s@sha256:%s", r.name, hex);
    else
        snprintf(out, outsz, "sha256:%s", hex);
}

#define ROW_COLS "digest, size_bytes, created_at, source_type, source_path, layers, config"

static json_t *row_json(struct sbxd *d, sqlite3_stmt *q)
{
    json_t *o = json_object();
    const char *hex = (const char *)sqlite3_column_text(q, 0);
    char dg[80], pin[900];
    snprintf(dg, sizeof dg, "sha256:%s", hex);
    pinned(d, hex, pin, sizeof pin);
    json_object_set_new(o, "digest", json_string(dg));
    json_object_set_new(o, "reference", json_string(pin));
    json_t *refs = json_array();
    sqlite3_stmt *r;
    if (sqlite3_prepare_v2(db_of(d), "SELECT ref FROM image_refs WHERE digest = ?1 ORDER BY ref",
                           -1, &r, NULL) == SQLITE_OK) {
        sqlite3_bind_text(r, 1, hex, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(r) == SQLITE_ROW)
            json_array_append_new(refs, json_string((const char *)sqlite3_column_text(r, 0)));
        sqlite3_finalize(r);
    }
    json_object_set_new(o, "references", refs);
    json_object_set_new(o, "size_bytes", json_integer(sqlite3_column_int64(q, 1)));
    json_object_set_new(o, "created_at", json_integer(sqlite3_column_int64(q, 2)));
    json_t *src = json_object();
    json_object_set_new(src, "type", json_string((const char *)sqlite3_column_text(q, 3)));
    json_object_set_new(src, "path", json_string((const char *)sqlite3_column_text(q, 4)));
    json_object_set_new(o, "source", src);
    const char *lt = (const char *)sqlite3_column_text(q, 5);
    json_t *layers = lt ? json_loads(lt, 0, NULL) : NULL;
    json_t *ls = json_array();
    for (size_t i = 0; i < json_array_size(layers); i++) {
        char l[80];
        snprintf(l, sizeof l, "sha256:%s", json_string_value(json_array_get(layers, i)));
        json_array_append_new(ls, json_string(l));
    }
    json_decref(layers);
    json_object_set_new(o, "layers", ls);
    const char *ct = (const char *)sqlite3_column_text(q, 6);
    json_t *cfg = ct ? json_loads(ct, 0, NULL) : NULL;
    json_object_set_new(o, "config", cfg ? cfg : json_object());
    json_object_set_new(o, "self_contained", json_boolean(lt != NULL));
    return o;
}

static json_t *host_json(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "digest", json_null());
    json_object_set_new(o, "reference", json_string("host"));
    json_object_set_new(o, "references", json_pack("[s]", "host"));
    json_object_set_new(o, "builtin", json_true());
    json_object_set_new(o, "self_contained", json_false());
    return o;
}

/* The image object for this hex digest, or NULL when unknown. */
static json_t *image_get(struct sbxd *d, const char *hex)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT " ROW_COLS " FROM images WHERE digest = ?1", -1, &q,
                           NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    json_t *o = sqlite3_step(q) == SQLITE_ROW ? row_json(d, q) : NULL;
    sqlite3_finalize(q);
    return o;
}

static bool have_row(struct sbxd *d, const char *hex)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT 1 FROM images WHERE digest = ?1", -1, &q, NULL) !=
        SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    bool ok = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return ok;
}

/* The digest (hex) a canonical reference names, into out; false when none. */
static bool ref_lookup(struct sbxd *d, const char *canonical, char out[65])
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT digest FROM image_refs WHERE ref = ?1", -1, &q,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, canonical, -1, SQLITE_STATIC);
    bool ok = sqlite3_step(q) == SQLITE_ROW;
    if (ok) snprintf(out, 65, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    return ok;
}

/* Any name of an image -> "" for host, or its hex (a row exists). 0, or -1 with err
 * (400 for a malformed name, 404 image_not_found naming it). */
static int find(struct sbxd *d, const char *ref, const char *field, char hex[65],
                struct err *err)
{
    hex[0] = '\0';
    if (!ref || !strcmp(ref, "default")) {
        if (!ref_lookup(d, IMG_DEFAULT_REF, hex) || !have_row(d, hex)) hex[0] = '\0';
        return 0;
    }
    if (is_host(ref)) return 0;
    const char *h = digest_hex(ref);
    struct sbx_oci_ref r;
    if (!h) {
        if (sbx_oci_ref_parse(ref, &r, err) < 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg); /* not formatted into itself */
            return err_invalid(err, field,
                               "%s must be \"host\", \"default\", \"sha256:<64 hex>\" or an image "
                               "reference (name:tag, name@sha256:...): %.300s",
                               field, why);
        }
        if (r.digest[0]) h = r.digest + 7;
        else if (ref_lookup(d, r.canonical, hex)) h = hex;
        else
            return err_set(err, 404, "image_not_found", field,
                           "no image %.200s (%.300s) on this daemon; import or pull it first",
                           ref, r.canonical);
    }
    if (!have_row(d, h))
        return err_set(err, 404, "image_not_found", field,
                       "no image %.200s on this daemon; import or pull it first", ref);
    if (h != hex) snprintf(hex, 65, "%.64s", h);
    return 0;
}

int sbx_image_resolve(struct sbxd *d, const char *ref, const char *field, char *out, size_t outsz,
                      struct err *err)
{
    char hex[65];
    if (find(d, ref, field, hex, err) < 0) return -1;
    snprintf(out, outsz, "%s", hex[0] ? hex : SBX_IMAGE_DEFAULT);
    return 0;
}

void sbx_image_name(struct sbxd *d, const char *image, char *out, size_t outsz)
{
    if (strlen(image) == 64 && strspn(image, "0123456789abcdef") == 64)
        pinned(d, image, out, outsz);
    else
        snprintf(out, outsz, "host");
}

int sbx_image_session(struct sbxd *d, const char *image, char ***layers, size_t *n,
                      json_t **config, struct err *err)
{
    *layers = NULL;
    *n = 0;
    *config = NULL;
    if (!strcmp(image, SBX_IMAGE_DEFAULT)) return 1;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT layers, config FROM images WHERE digest = ?1", -1,
                           &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
    sqlite3_bind_text(q, 1, image, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_ROW) {
        sqlite3_finalize(q);
        return err_set(err, 409, "image_not_found", "image",
                       "the sandbox's image sha256:%s is gone from this daemon", image);
    }
    const char *lt = (const char *)sqlite3_column_text(q, 0);
    const char *ct = (const char *)sqlite3_column_text(q, 1);
    if (!lt) { /* an image imported before layers existed: over the host's /usr */
        sqlite3_finalize(q);
        return 1;
    }
    json_t *la = json_loads(lt, 0, NULL);
    *config = ct ? json_loads(ct, 0, NULL) : NULL;
    sqlite3_finalize(q);
    size_t k = json_array_size(la);
    *layers = xcalloc(k + 1, sizeof **layers);
    for (size_t i = 0; i < k; i++) /* top first */
        (*layers)[i] = xstrdup(json_string_value(json_array_get(la, k - 1 - i)) ?: "");
    *n = k;
    json_decref(la);
    return 0;
}

static bool in_use(struct sbxd *d, const char *hex, const char **by)
{
    for (struct sbx *s = d->first; s; s = s->next)
        if (!strcmp(s->image, hex)) {
            *by = "a sandbox";
            return true;
        }
    sqlite3_stmt *q;
    bool used = false;
    if (sqlite3_prepare_v2(db_of(d), "SELECT 1 FROM snapshots WHERE image = ?1 LIMIT 1", -1, &q,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
        used = sqlite3_step(q) == SQLITE_ROW;
        sqlite3_finalize(q);
    }
    if (used) *by = "a snapshot";
    return used;
}

/* ------------------------------------------------------------------ running tar */

/* Run argv (absolute program, argv only: never a shell) with stdout to out_fd, stdin
 * and stderr /dev/null. Returns the exit status, or -1 on failure to run / killed. */
static int run(char *const argv[], int out_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
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
    if (rc != 0) return -1;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *tar_bin(void)
{
    return access("/usr/bin/tar", X_OK) == 0 ? "/usr/bin/tar" : "/bin/tar";
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

/* ------------------------------------------------------------------ recording */

int sbx_images_commit(struct sbxd *d, const struct sbx_image_rec *rec, json_t **out,
                      bool *created, struct err *err)
{
    *out = NULL;
    *created = false;
    const char *hex = digest_hex(rec->digest);
    if (!hex) return err_internal(err, "image digest %s is malformed", rec->digest);
    struct sbx_oci_ref r;
    if (rec->ref && sbx_oci_ref_parse(rec->ref, &r, err) < 0) return -1;
    json_t *la = json_array();
    for (size_t i = 0; i < rec->nlayers; i++)
        json_array_append_new(la, json_string(rec->layers[i] + 7));
    char *lt = json_dumps(la, JSON_COMPACT);
    json_decref(la);
    sqlite3_stmt *q;
    int rc = -1;
    if (sqlite3_prepare_v2(db_of(d),
                           "INSERT OR IGNORE INTO images(digest, size_bytes, created_at,"
                           " source_type, source_path, layers, config)"
                           " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           -1, &q, NULL) != SQLITE_OK)
        goto db;
    sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, rec->size_bytes);
    sqlite3_bind_int64(q, 3, clock_now_ms());
    sqlite3_bind_text(q, 4, rec->source_type ? rec->source_type : "?", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 5, rec->source_path ? rec->source_path : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 6, lt, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 7, rec->config_json ? rec->config_json : "{}", -1, SQLITE_STATIC);
    int sr = sqlite3_step(q);
    sqlite3_finalize(q);
    if (sr != SQLITE_DONE) goto db;
    *created = sqlite3_changes(db_of(d)) > 0;
    if (rec->ref) {
        if (sqlite3_prepare_v2(db_of(d),
                               "INSERT OR REPLACE INTO image_refs(ref, digest) VALUES(?1, ?2)", -1,
                               &q, NULL) != SQLITE_OK)
            goto db;
        sqlite3_bind_text(q, 1, r.canonical, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, hex, -1, SQLITE_STATIC);
        sr = sqlite3_step(q);
        sqlite3_finalize(q);
        if (sr != SQLITE_DONE) goto db;
    }
    if (*created)
        log_info("image imported", "digest=%s type=%s path=%s ref=%s layers=%zu bytes=%lld",
                 rec->digest, rec->source_type ? rec->source_type : "?",
                 rec->source_path ? rec->source_path : "", rec->ref ? r.canonical : "",
                 rec->nlayers, (long long)rec->size_bytes);
    *out = image_get(d, hex);
    rc = *out ? 0 : err_internal(err, "image %s vanished", rec->digest);
    free(lt);
    return rc;
db:
    free(lt);
    return err_set(err, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
}

void sbx_images_busy(struct sbxd *d, int delta)
{
    d->img_pending += delta;
}

/* ------------------------------------------------------------------ import jobs */

/* One import. The file work runs on the import worker thread so the daemon's loop goes
 * on serving every other request; recording the image and the reply run on the loop. */
struct import_job {
    struct sbxd *d;
    struct http_req *req; /* NULL once the client left; the import still completes */
    char type[16], path[IMG_PATH_MAX + 1], ref[800];
    char tar[PATH_MAX], work[PATH_MAX];
    uint64_t max_bytes;
    struct sbx_image_rec rec;
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
    j->d->img_pending--;
    unlink(j->tar);
    sbx_image_rec_fini(&j->rec);
    free(j);
}

/* dir / tarball: one tar file, hashed, unpacked as the image's only layer. */
static int import_single(struct import_job *j, struct err *err)
{
    bool is_dir = !strcmp(j->type, "dir");
    const char *path = j->path;
    struct stat st;
    if (stat(path, &st) < 0) return err_invalid(err, "path", "cannot use %s: %s", path, strerror(errno));
    if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        return err_invalid(err, "path", "%s is not a %s", path,
                           is_dir ? "directory" : "regular file");
    int fd = open(j->tar, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return err_internal(err, "cannot create %s: %s", j->tar, strerror(errno));
    int64_t size = 0;
    if (is_dir) {
        const char *T = tar_bin();
        char *argv[] = {
            (char *)T,   "--sort=name", "--mtime=@0", "--owner=0",  "--group=0", "--numeric-owner",
            "--no-acls", "--no-xattrs", "-C",         (char *)path, "-cf",       "-",
            ".",         NULL};
        int rc = run(argv, fd);
        if (rc != 0) {
            close(fd);
            return err_invalid(err, "path", "tar could not read %s (exit %d)", path, rc);
        }
        struct stat ts;
        if (fstat(fd, &ts) == 0) size = ts.st_size;
    } else {
        int e = copy_into(path, fd, &size);
        if (e < 0) {
            close(fd);
            return e == -ENOSPC ? err_set(err, 507, "no_space", "",
                                          "no space left to import %s; free space or delete "
                                          "images", path)
                                : err_invalid(err, "path", "cannot read %s: %s", path, strerror(-e));
        }
    }
    char hex[65], dg[80];
    int e = file_sha256_hex(j->tar, hex);
    if (e < 0) {
        close(fd);
        return err_internal(err, "cannot hash %s: %s", j->tar, strerror(-e));
    }
    snprintf(dg, sizeof dg, "sha256:%s", hex);
    lseek(fd, 0, SEEK_SET);
    struct sbx_layer_info info;
    e = sbx_layer_add_from_blob(&j->d->layers, fd, NULL, dg, size, j->max_bytes, NULL, NULL,
                                &info, err);
    close(fd);
    unlink(j->tar);
    if (e < 0) {
        if (!strcmp(err->code, "invalid_image")) snprintf(err->field, sizeof err->field, "path");
        return -1;
    }
    char lp[PATH_MAX];
    sbx_layer_path(&j->d->layers, dg, lp, sizeof lp);
    const char *dirs[] = {lp};
    if (sbx_image_make_skeleton(j->d->image_dir, hex, dirs, 1, err) < 0) return -1;
    snprintf(j->rec.digest, sizeof j->rec.digest, "sha256:%.64s", hex);
    j->rec.layers = xcalloc(1, sizeof *j->rec.layers);
    snprintf(j->rec.layers[0], sizeof j->rec.layers[0], "sha256:%.64s", hex);
    j->rec.nlayers = 1;
    j->rec.size_bytes = size;
    j->rec.config_json = xstrdup("{}");
    j->rec.ref = j->ref[0] ? xstrdup(j->ref) : NULL;
    return 0;
}

/* Worker thread: files only (no database, no loop). */
static void import_work(void *arg)
{
    struct import_job *j = arg;
    if (!strcmp(j->type, "dir") || !strcmp(j->type, "tarball"))
        j->rc = import_single(j, &j->err);
    else
        j->rc = sbx_image_import(&j->d->layers, j->d->image_dir, j->type, j->path, j->work,
                                 j->ref[0] ? j->ref : NULL, j->max_bytes, &j->rec, &j->err);
    if (j->rc == 0) {
        j->rec.source_type = xstrdup(j->type);
        j->rec.source_path = xstrdup(j->path);
    }
}

static void import_drop(void *arg) /* the daemon is shutting down */
{
    struct import_job *j = arg;
    if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        http_reply_error(j->req, 503, "shutting_down", "", "the daemon is shutting down");
    }
    job_free(j);
}

static int gc_start(struct sbxd *d, struct http_req *r, struct err *err);

static void import_done(void *arg)
{
    struct import_job *j = arg;
    json_t *o = NULL;
    bool created = false;
    if (j->rc == 0) j->rc = sbx_images_commit(j->d, &j->rec, &o, &created, &j->err);
    if (j->rc < 0)
        log_warn("image import failed", "type=%s path=%s error=\"%s\"", j->type, j->path,
                 j->err.msg);
    if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        if (j->rc == 0) http_reply_json(j->req, created ? 201 : 200, o);
        else http_reply_err(j->req, &j->err);
        o = NULL;
    }
    json_decref(o);
    struct sbxd *d = j->d;
    bool failed = j->rc < 0;
    job_free(j);
    if (failed) { /* complete layers of a failed import are collected too */
        struct err ge = ERR_INIT;
        gc_start(d, NULL, &ge);
    }
}

static int ensure_worker(struct sbxd *d, struct err *err)
{
    if (!d->img_worker && !(d->img_worker = proxy_worker_new(d->base, 1, err))) return -1;
    return 0;
}

/* ------------------------------------------------------------------ garbage collection */

struct gc_job {
    struct sbxd *d;
    struct http_req *req;
    char (*layers)[65];
    size_t nlayers;
    char (*skels)[65];
    size_t nskels;
};

static bool all_hex(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

static void gc_work(void *arg)
{
    struct gc_job *g = arg;
    for (size_t i = 0; i < g->nlayers; i++) {
        char dg[80];
        snprintf(dg, sizeof dg, "sha256:%s", g->layers[i]);
        sbx_layer_remove(&g->d->layers, dg);
    }
    for (size_t i = 0; i < g->nskels; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", g->d->image_dir, g->skels[i]);
        sbx_image_remove_tree(p);
    }
}

static void gc_free(struct gc_job *g)
{
    g->d->img_pending--;
    free(g->layers);
    free(g->skels);
    free(g);
}

static void gc_reply(struct gc_job *g, int status)
{
    if (!g->req) return;
    http_req_on_close(g->req, NULL, NULL);
    if (status != 200) {
        http_reply_error(g->req, status, "shutting_down", "", "the daemon is shutting down");
        return;
    }
    json_t *a = json_array();
    for (size_t i = 0; i < g->nlayers; i++) {
        char dg[80];
        snprintf(dg, sizeof dg, "sha256:%s", g->layers[i]);
        json_array_append_new(a, json_string(dg));
    }
    http_reply_json(g->req, 200, json_pack("{s:o,s:b}", "removed_layers", a, "skipped", 0));
}

static void gc_done(void *arg)
{
    struct gc_job *g = arg;
    if (g->nlayers) log_info("image layers collected", "layers=%zu", g->nlayers);
    gc_reply(g, 200);
    gc_free(g);
}

static void gc_drop(void *arg)
{
    struct gc_job *g = arg;
    gc_reply(g, 503);
    gc_free(g);
}

static void gc_closed(struct http_req *r, void *arg)
{
    (void)r;
    ((struct gc_job *)arg)->req = NULL;
}

/* Remove layers (and skeletons) no image row references. Not while an import or pull
 * is in flight (its layers have no row yet): returns 1 then. r: answered when done. */
static int gc_start(struct sbxd *d, struct http_req *r, struct err *err)
{
    if (d->img_pending > 0) return 1;
    if (ensure_worker(d, err) < 0) return -1;
    json_t *used = json_object();
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db_of(d), "SELECT digest, layers FROM images", -1, &q, NULL) ==
        SQLITE_OK) {
        while (sqlite3_step(q) == SQLITE_ROW) {
            json_object_set_new(used, (const char *)sqlite3_column_text(q, 0), json_string("i"));
            const char *lt = (const char *)sqlite3_column_text(q, 1);
            json_t *la = lt ? json_loads(lt, 0, NULL) : NULL;
            for (size_t i = 0; i < json_array_size(la); i++) {
                const char *h = json_string_value(json_array_get(la, i));
                char k[80];
                snprintf(k, sizeof k, "l:%s", h ? h : "");
                json_object_set_new(used, k, json_true());
            }
            json_decref(la);
        }
        sqlite3_finalize(q);
    }
    struct gc_job *g = xcalloc(1, sizeof *g);
    g->d = d;
    size_t cap = 16;
    g->layers = xcalloc(cap, sizeof *g->layers);
    DIR *dd = opendir(d->layers.dir);
    struct dirent *de;
    while (dd && (de = readdir(dd))) {
        char k[80];
        snprintf(k, sizeof k, "l:%.64s", de->d_name);
        if (!all_hex(de->d_name) || json_object_get(used, k)) continue;
        if (g->nlayers == cap) {
            cap *= 2;
            g->layers = xrealloc(g->layers, cap * sizeof *g->layers);
        }
        snprintf(g->layers[g->nlayers++], 65, "%.64s", de->d_name);
    }
    if (dd) closedir(dd);
    size_t scap = 16;
    g->skels = xcalloc(scap, sizeof *g->skels);
    dd = opendir(d->image_dir);
    while (dd && (de = readdir(dd))) {
        if (!all_hex(de->d_name) || json_object_get(used, de->d_name)) continue;
        if (g->nskels == scap) {
            scap *= 2;
            g->skels = xrealloc(g->skels, scap * sizeof *g->skels);
        }
        snprintf(g->skels[g->nskels++], 65, "%.64s", de->d_name);
    }
    if (dd) closedir(dd);
    json_decref(used);
    g->req = r;
    if (r) http_req_on_close(r, gc_closed, g);
    d->img_pending++;
    proxy_worker_submit(d->img_worker, gc_work, gc_done, gc_drop, g);
    return 0;
}

/* ------------------------------------------------------------------ routes */

static void h_import(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    if (!sbx_api_body(r, false, &body)) return;
    if (json_is_string(json_object_get(body, "type")) &&
        !strcmp(json_string_value(json_object_get(body, "type")), "build")) {
        sbx_build_post(d, r, body); /* from a recipe: build.c */
        json_decref(body);
        return;
    }
    struct err err = ERR_INIT;
    const char *kind = json_string_value(json_object_get(body, "type"));
    if (kind && !strcmp(kind, "pull")) { /* from a registry: pull.c */
        sbx_pull_post(d, r, body);
        json_decref(body);
        return;
    }
    static const char *const known[] = {"type", "path", "ref", NULL};
    const char *type = NULL, *path = NULL, *ref = NULL;
    struct sbx_oci_ref pr;
    if (sbx_json_known(body, known, "an image import", &err) < 0 ||
        sbx_json_str(body, "type", 16, &type, &err) < 0 ||
        sbx_json_str(body, "path", IMG_PATH_MAX, &path, &err) < 0 ||
        sbx_json_str(body, "ref", 500, &ref, &err) < 0)
        goto out;
    if (!type || (strcmp(type, "dir") != 0 && strcmp(type, "tarball") != 0 &&
                  strcmp(type, "oci-layout") != 0 && strcmp(type, "docker-archive") != 0)) {
        err_invalid(&err, "type",
                    "type must be \"oci-layout\", \"docker-archive\", \"dir\" or \"tarball\"");
        goto out;
    }
    if (!path || path[0] != '/' || strstr(path, "/../") ||
        (strlen(path) >= 3 && !strcmp(path + strlen(path) - 3, "/..")) || strpbrk(path, "\n\r\t")) {
        err_invalid(&err, "path", "path must be an absolute host path without \"..\"");
        goto out;
    }
    if (ref) {
        if (sbx_oci_ref_parse(ref, &pr, &err) < 0) {
            snprintf(err.field, sizeof err.field, "ref");
            goto out;
        }
        if (pr.digest[0]) {
            err_invalid(&err, "ref", "ref names a tag to give the image (name:tag), not a digest");
            goto out;
        }
    }
    int64_t room = d->storage ? sbx_storage_free(d->storage) : -1;
    if (room >= 0 && room < IMG_KEEP_FREE) {
        err_set(&err, 507, "no_space", "",
                "the sandbox store has %lld MiB free; delete sandboxes, snapshots or images",
                (long long)(room >> 20));
        goto out;
    }
    if (ensure_worker(d, &err) < 0) goto out;
    static unsigned seq;
    struct import_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->req = r;
    j->err = (struct err)ERR_INIT;
    j->max_bytes = room > IMG_KEEP_FREE ? (uint64_t)(room - IMG_KEEP_FREE) : 0;
    snprintf(j->type, sizeof j->type, "%s", type);
    snprintf(j->path, sizeof j->path, "%s", path);
    if (ref) snprintf(j->ref, sizeof j->ref, "%s", pr.canonical);
    ++seq;
    snprintf(j->tar, sizeof j->tar, "%s/.import-%d-%u.tar", d->image_dir, (int)getpid(), seq);
    snprintf(j->work, sizeof j->work, "%s/.import-%d-%u", d->image_dir, (int)getpid(), seq);
    json_decref(body);
    d->img_pending++;
    http_req_on_close(r, job_closed, j);
    proxy_worker_submit(d->img_worker, import_work, import_done, import_drop, j);
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
    if (sqlite3_prepare_v2(db_of(d), "SELECT " ROW_COLS " FROM images ORDER BY created_at, digest",
                           -1, &q, NULL) == SQLITE_OK) {
        while (sqlite3_step(q) == SQLITE_ROW) json_array_append_new(arr, row_json(d, q));
        sqlite3_finalize(q);
    }
    char def[65];
    struct err e = ERR_INIT;
    find(d, "default", "image", def, &e);
    char dn[900];
    if (def[0]) pinned(d, def, dn, sizeof dn);
    json_t *o = json_object();
    json_object_set_new(o, "images", arr);
    json_object_set_new(o, "default", json_string(def[0] ? dn : "host"));
    http_reply_json(r, 200, o);
}

static void h_get(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *ref = http_req_param(r, "ref");
    char hex[65];
    struct err err = ERR_INIT;
    if (find(d, ref, "ref", hex, &err) < 0) {
        if (err.status == 400) err.status = 404, snprintf(err.code, sizeof err.code, "image_not_found");
        http_reply_err(r, &err);
        return;
    }
    if (!hex[0]) {
        http_reply_json(r, 200, host_json());
        return;
    }
    json_t *o = image_get(d, hex);
    if (!o) {
        http_reply_error(r, 404, "image_not_found", "", "no image %.200s", ref);
        return;
    }
    http_reply_json(r, 200, o);
}

static void h_delete(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *ref = http_req_param(r, "ref");
    char hex[65];
    struct err err = ERR_INIT;
    if (find(d, ref, "ref", hex, &err) < 0) {
        if (err.status == 400) err.status = 404, snprintf(err.code, sizeof err.code, "image_not_found");
        http_reply_err(r, &err);
        return;
    }
    if (!hex[0]) {
        http_reply_error(r, 409, "image_builtin", "", "the host image is built in and cannot be "
                         "deleted");
        return;
    }
    const char *by = "";
    if (in_use(d, hex, &by)) {
        http_reply_error(r, 409, "image_in_use", "",
                         "image sha256:%s is used by %s; delete it first", hex, by);
        return;
    }
    static const char *const sql[] = {"DELETE FROM image_refs WHERE digest = ?1",
                                      "DELETE FROM images WHERE digest = ?1"};
    for (size_t i = 0; i < 2; i++) {
        sqlite3_stmt *q;
        int sr = SQLITE_ERROR;
        if (sqlite3_prepare_v2(db_of(d), sql[i], -1, &q, NULL) == SQLITE_OK) {
            sqlite3_bind_text(q, 1, hex, -1, SQLITE_STATIC);
            sr = sqlite3_step(q);
            sqlite3_finalize(q);
        }
        if (sr != SQLITE_DONE) {
            http_reply_error(r, 500, "storage_error", "", "images: %s", sqlite3_errmsg(db_of(d)));
            return;
        }
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", d->image_dir, hex);
    sbx_image_remove_tree(p);
    log_info("image deleted", "digest=sha256:%s", hex);
    struct err ge = ERR_INIT;
    gc_start(d, NULL, &ge); /* its layers, unless another image has them */
    http_reply_raw(r, 204, NULL, NULL, 0);
}

static void h_gc(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct err err = ERR_INIT;
    int rc = gc_start(d, r, &err);
    if (rc < 0) http_reply_err(r, &err);
    else if (rc == 1)
        http_reply_json(r, 200, json_pack("{s:[],s:b}", "removed_layers", "skipped", 1));
}

void sbx_images_register(struct sbxd *d)
{
    sbx_builds_register(d); /* builds: build.c (before images/:ref) */
    http_route(d->http, "POST", "/v1/images", h_import, d);
    http_route(d->http, "GET", "/v1/images", h_list, d);
    http_route(d->http, "POST", "/v1/images/gc", h_gc, d);
    http_route(d->http, "GET", "/v1/images/:ref", h_get, d);
    http_route(d->http, "DELETE", "/v1/images/:ref", h_delete, d);
}

void sbx_images_close(struct sbxd *d)
{
    sbx_builds_close(d);
    proxy_worker_free(d->img_worker); /* waits for a running import; drops queued ones */
    d->img_worker = NULL;
    sbx_layers_close(&d->layers);
}
