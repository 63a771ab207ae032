/*
 * snapshot.c - sandboxes' upper trees in the store, snapshots, forks, and creating
 * a sandbox from a snapshot (docs/sandbox-api.md "Snapshots and forks").
 *
 * A sandbox's changes are one tree, <store>/fs/<id> (upper/, work/, work-usr/).
 * A snapshot is an immutable clone of it at <store>/snapshots/<id> (a read-only
 * btrfs snapshot: O(1) whatever the workspace size); a sandbox created from it, or
 * a fork, gets a writable clone. A running sandbox is never stopped for this: its
 * file system is flushed while it runs (syncfs), then its cgroup is frozen for the
 * clone itself (the ioctl flushes what was written since and commits) and thawed:
 * a point-in-time copy that no write straddles. Paused and stopped sandboxes are
 * cloned as they are.
 *
 * Cloned files keep their on-disk owners (the range of the sandbox that wrote them:
 * data_base); sessions see them through an idmapped mount as their own (plan.h).
 * Snapshots have an expiration (per snapshot, else the sandbox's
 * snapshot_expiration_ms, else the daemon's default; 0 = never): a 1 s timer
 * deletes expired ones, and an expired snapshot is never used. Metadata lives in
 * the `snapshots` table of sandboxd.db, so snapshots survive restarts. A snapshot may
 * have a name (not unique: a later snapshot of the same name is the one the name
 * restores, as E2B assigns a name's newest build), kept with it and listed by it.
 */
#include "sandbox/core/sandboxd_int.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/safefs.h"
#include "sandbox/core/validate.h"

#define SNAP_EXPIRATION_MAX_MS (10LL * 366 * 24 * 3600 * 1000)
#define SNAP_EXPIRATION_MIN_MS 1000
#define LIST_MAX 1000

struct sbx_snap {
    struct sbx_snap *prev, *next;
    char id[40];
    char sandbox_id[40], sandbox_name[64], image[72];
    char name[SBX_SNAP_NAME_MAX + 1]; /* "" for none */
    uint32_t data_base;
    int64_t created_at, expires_at, expiration_ms;
    char *path;
};

struct sbx_snaps {
    struct sbx_snap *first, *last;
    int count;
    struct event *tick;
};

static const char *snaps_sql =
    "CREATE TABLE IF NOT EXISTS snapshots("
    " id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, sandbox_name TEXT NOT NULL,"
    " image TEXT NOT NULL, data_base INTEGER NOT NULL, created_at INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL, expiration_ms INTEGER NOT NULL,"
    " name TEXT NOT NULL DEFAULT '') STRICT;";

/* A table made before snapshots had names gets the column in place. */
static int snaps_migrate(sqlite3 *db, char **msg)
{
    sqlite3_stmt *q;
    bool have = false;
    if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('snapshots')", -1, &q, NULL) !=
        SQLITE_OK)
        return -1;
    while (sqlite3_step(q) == SQLITE_ROW)
        have |= !strcmp((const char *)sqlite3_column_text(q, 0), "name");
    sqlite3_finalize(q);
    if (have) return 0;
    return sqlite3_exec(db, "ALTER TABLE snapshots ADD COLUMN name TEXT NOT NULL DEFAULT ''", NULL,
                        NULL, msg) == SQLITE_OK
               ? 0
               : -1;
}

static int64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

/* ------------------------------------------------------------------ api helpers */

bool sbx_api_body(struct http_req *r, bool allow_empty, json_t **out)
{
    size_t len;
    http_req_body(r, &len);
    if (len > (1u << 20)) {
        http_reply_error(r, 413, "payload_too_large", "body", "JSON bodies are limited to 1 MiB");
        return false;
    }
    struct err err = ERR_INIT;
    *out = http_req_json(r, allow_empty, &err);
    if (!*out) {
        http_reply_err(r, &err);
        return false;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        http_reply_error(r, 400, "validation_error", "body", "the body must be a JSON object");
        return false;
    }
    return true;
}

struct sbx *sbx_api_sandbox(struct sbxd *d, struct http_req *r)
{
    const char *ref = http_req_param(r, "ref");
    struct sbx *s = sbx_find(d, ref);
    if (!s)
        http_reply_error(r, 404, "sandbox_not_found", "", "no sandbox with id or name \"%.80s\"",
                         ref ? ref : "");
    return s;
}

/* ------------------------------------------------------------------ the registry */

static void snap_link(struct sbx_snaps *ss, struct sbx_snap *n)
{
    n->prev = ss->last;
    if (ss->last)
        ss->last->next = n;
    else
        ss->first = n;
    ss->last = n;
    ss->count++;
}

static void snap_unlink(struct sbx_snaps *ss, struct sbx_snap *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        ss->first = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        ss->last = n->prev;
    ss->count--;
}

static void snap_free(struct sbx_snap *n)
{
    free(n->path);
    free(n);
}

static bool expired(const struct sbx_snap *n, int64_t now)
{
    return n->expires_at > 0 && n->expires_at <= now;
}

static int db_exec(struct sbxd *d, const char *sql, const char *id, struct err *err)
{
    sqlite3 *db = sbx_store_db(d->store);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    return 0;
}

static int snap_insert(struct sbxd *d, const struct sbx_snap *n, struct err *err)
{
    sqlite3 *db = sbx_store_db(d->store);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO snapshots(id, sandbox_id, sandbox_name, image, data_base,"
                           " created_at, expires_at, expiration_ms, name)"
                           " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                           -1, &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(q, 1, n->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, n->sandbox_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, n->sandbox_name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, n->image, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, n->data_base);
    sqlite3_bind_int64(q, 6, n->created_at);
    sqlite3_bind_int64(q, 7, n->expires_at);
    sqlite3_bind_int64(q, 8, n->expiration_ms);
    sqlite3_bind_text(q, 9, n->name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    return 0;
}

/* Remove a snapshot's tree and row, and forget it. */
static void snap_destroy(struct sbxd *d, struct sbx_snap *n, const char *why)
{
    struct err err = ERR_INIT;
    if (db_exec(d, "DELETE FROM snapshots WHERE id = ?1", n->id, &err) < 0)
        log_error("cannot delete snapshot row", "snapshot=%s error=\"%s\"", n->id, err.msg);
    int e = sbx_storage_remove(d->storage, n->path);
    if (e < 0)
        log_warn("cannot remove snapshot files", "snapshot=%s error=\"%s\"", n->id, strerror(-e));
    log_info("snapshot deleted", "snapshot=%s reason=%s", n->id, why);
    snap_unlink(d->snaps, n);
    snap_free(n);
}

/* A live snapshot by id; expired ones are deleted on the way. */
static struct sbx_snap *snap_find(struct sbxd *d, const char *id)
{
    if (!id || !d->snaps) return NULL;
    for (struct sbx_snap *n = d->snaps->first; n; n = n->next) {
        if (strcmp(n->id, id) != 0) continue;
        if (expired(n, clock_now_ms())) {
            snap_destroy(d, n, "expired");
            return NULL;
        }
        return n;
    }
    return NULL;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct sbxd *d = arg;
    int64_t now = clock_now_ms();
    for (struct sbx_snap *n = d->snaps->first, *next; n; n = next) {
        next = n->next;
        if (expired(n, now)) snap_destroy(d, n, "expired");
    }
}

static json_t *snap_json(struct sbxd *d, const struct sbx_snap *n)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(n->id));
    json_object_set_new(o, "sandbox_id", json_string(n->sandbox_id));
    json_object_set_new(o, "sandbox_name", json_string(n->sandbox_name));
    json_object_set_new(o, "name", n->name[0] ? json_string(n->name) : json_null());
    char iname[900];
    sbx_image_name(d, n->image, iname, sizeof iname);
    json_object_set_new(o, "image", json_string(iname));
    json_object_set_new(o, "status", json_string("created"));
    json_object_set_new(o, "created_at", iso(n->created_at));
    json_object_set_new(o, "expiration_ms", json_integer(n->expiration_ms));
    json_object_set_new(o, "expires_at", iso(n->expires_at));
    return o;
}

/* ------------------------------------------------------------------ trees */

static bool in_store(const struct sbxd *d, const char *path)
{
    size_t n = strlen(d->storage->root);
    return path && !strncmp(path, d->storage->root, n) && path[n] == '/';
}

int sbx_err_space(struct err *err, int e, const char *code, const char *fmt, ...)
{
    bool full = e == -ENOSPC || e == -EDQUOT;
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, full ? 507 : 500, full ? "no_space" : code, "", fmt, ap);
    va_end(ap);
    return -1;
}

/* Clone s's upper tree to dst without stopping it (see the top of this file). */
static int clone_live(struct sbx *s, const char *dst, bool readonly, int64_t *frozen_us,
                      struct err *err)
{
    struct sbxd *d = s->d;
    bool freeze = s->sess && s->state == SBX_RUNNING && !sbx_cg_frozen(s->sess->cg);
    *frozen_us = 0;
    if (freeze && d->storage->kind == SBX_STORAGE_BTRFS) sbx_storage_sync(s->fs_dir);
    int64_t t0 = now_us();
    if (freeze) {
        int e = sbx_cg_freeze(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
        if (e < 0) {
            sbx_cg_thaw(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
            return err_set(err, 500, "snapshot_failed", "",
                           "could not freeze sandbox %s for a consistent snapshot: %s", s->name,
                           strerror(-e));
        }
    }
    int e = sbx_storage_clone(d->storage, s->fs_dir, dst, readonly);
    if (freeze) {
        int te = sbx_cg_thaw(s->sess->cg, SBX_FREEZE_TIMEOUT_MS);
        if (te < 0)
            log_error("sandbox did not thaw after a snapshot", "sandbox=%s error=\"%s\"", s->id,
                      strerror(-te));
        *frozen_us = now_us() - t0;
    }
    if (e < 0)
        return sbx_err_space(err, e, "snapshot_failed", "cannot copy the files of sandbox %s: %s",
                         s->name, strerror(-e));
    return 0;
}

/* The directories of a new, empty tree at path. host: for the host image, whose /usr
 * overlay needs upper/usr; a self-contained image gets neither upper/usr nor upper/etc
 * made in advance (a directory there would hide an image's /usr or /etc symlink).
 * 0 or -errno. */
static int tree_make(const char *path, uid_t owner, bool host)
{
    static const struct {
        const char *rel;
        mode_t mode;
        int owned;
    } dirs[] = {{"upper", 0755, 1}, {"upper/usr", 0755, 1}, {"upper/etc", 0755, 1},
                {"work", 0700, 0},  {"work-usr", 0700, 0}};
    int tree = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tree < 0) return -errno;
    int e = 0;
    for (size_t i = 0; !e && i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!host && (!strcmp(dirs[i].rel, "upper/usr") || !strcmp(dirs[i].rel, "upper/etc")))
            continue;
        uid_t u = dirs[i].owned ? owner : 0;
        int fd = sbx_safe_mkdir(tree, dirs[i].rel, dirs[i].mode, u, u, NULL);
        if (fd < 0) e = fd;
        else close(fd);
    }
    close(tree);
    return e;
}

int sbx_upper_make(struct sbx *s, const json_t *source, struct sbx *fork_from, struct err *err)
{
    struct sbxd *d = s->d;
    char *path = xasprintf("%s/fs/%s", d->storage->root, s->id);
    const char *type = source ? json_string_value(json_object_get(source, "type")) : NULL;
    json_decref(s->origin);
    s->origin = NULL;
    if (fork_from) {
        int64_t us;
        if (clone_live(fork_from, path, false, &us, err) < 0) goto fail;
        s->data_base = fork_from->data_base ? fork_from->data_base : fork_from->uid_base;
        snprintf(s->image, sizeof s->image, "%s", fork_from->image);
        s->origin = json_pack("{s:s, s:s, s:s}", "type", "fork", "sandbox_id", fork_from->id,
                              "sandbox_name", fork_from->name);
    } else if (type && !strcmp(type, "snapshot")) {
        const char *sid = json_string_value(json_object_get(source, "snapshot_id"));
        struct sbx_snap *n = snap_find(d, sid);
        if (!n) {
            err_set(err, 404, "snapshot_not_found", "source.snapshot_id",
                    "no snapshot \"%.80s\" (it may have expired or been deleted)",
                    sid ? sid : "");
            goto fail;
        }
        char img[PATH_MAX];
        struct stat st;
        snprintf(img, sizeof img, "%s/%s", d->image_dir, n->image);
        if (stat(img, &st) < 0) {
            err_set(err, 409, "image_not_found", "source.snapshot_id",
                    "snapshot %s needs image %s, which this daemon does not have", n->id,
                    n->image);
            goto fail;
        }
        int e = sbx_storage_clone(d->storage, n->path, path, false);
        if (e < 0) {
            sbx_err_space(err, e, "storage_error", "cannot restore snapshot %s: %s", n->id,
                      strerror(-e));
            goto fail;
        }
        s->data_base = n->data_base;
        snprintf(s->image, sizeof s->image, "%s", n->image);
        s->origin = json_pack("{s:s, s:s, s:s}", "type", "snapshot", "snapshot_id", n->id,
                              "sandbox_id", n->sandbox_id);
    } else {
        int e = sbx_storage_create(d->storage, path);
        if (!e) e = tree_make(path, s->uid_base, !strcmp(s->image, SBX_IMAGE_DEFAULT));
        if (e < 0) {
            sbx_storage_remove(d->storage, path);
            sbx_err_space(err, e, "internal_error", "cannot create the files of sandbox %s: %s",
                      s->name, strerror(-e));
            goto fail;
        }
        s->data_base = s->uid_base;
        if (type && (!strcmp(type, "git") || !strcmp(type, "tarball"))) {
            s->origin = json_deep_copy(source);
            json_object_set_new(s->origin, "pending", json_true());
        } else if (type) {
            s->origin = json_pack("{s:s}", "type", type);
        }
    }
    free(s->fs_dir);
    s->fs_dir = path;
    /* its own quota, whatever the tree was cloned from: a clone's shared extents stay
     * charged to the tree that wrote them (simple quotas), so it starts near empty */
    if (sbx_disk_apply(s, s->disk_mb, err) < 0) {
        sbx_upper_remove(s);
        return -1;
    }
    return 0;
fail:
    free(path);
    return -1;
}

int sbx_disk_apply(struct sbx *s, int64_t mb, struct err *err)
{
    struct sbx_storage *st = s->d->storage;
    s->disk_enforced = false;
    if (!st->quota || !in_store(s->d, s->fs_dir)) return 0; /* no quotas; an older tree */
    int e = sbx_storage_set_limit(st, s->fs_dir, (uint64_t)mb << 20);
    if (e == -EOPNOTSUPP) return 0; /* not a subvolume */
    if (e < 0)
        return err_set(err, 500, "storage_error", "resources", "cannot limit the files of "
                       "sandbox %s to %lld MiB: %s", s->name, (long long)mb, strerror(-e));
    s->disk_enforced = true;
    return 0;
}

void sbx_upper_remove(struct sbx *s)
{
    if (!s->fs_dir || !in_store(s->d, s->fs_dir)) return; /* an older tree goes with s->dir */
    int e = sbx_storage_remove(s->d->storage, s->fs_dir);
    if (e < 0)
        log_warn("cannot remove sandbox files", "sandbox=%s error=\"%s\"", s->id, strerror(-e));
}

/* ------------------------------------------------------------------ ext */

void sbx_ext_load(struct sbx *s, const char *ext)
{
    json_t *o = ext ? json_loads(ext, 0, NULL) : NULL;
    const char *fs = json_string_value(json_object_get(o, "fs"));
    if (fs && !strcmp(fs, "store"))
        s->fs_dir = xasprintf("%s/fs/%s", s->d->storage->root, s->id);
    else
        s->fs_dir = xasprintf("%s/fs", s->dir);
    json_int_t base = json_integer_value(json_object_get(o, "data_base"));
    s->data_base = base > 0 && base < 0xffffffffLL ? (uint32_t)base : s->uid_base;
    json_t *m = json_object_get(o, "mounts");
    s->mounts = json_is_object(m) ? json_incref(m) : NULL;
    s->nofile = json_integer_value(json_object_get(o, "nofile")); /* 0: the default */
    s->disk_mb = json_integer_value(json_object_get(o, "disk_mb"));
    s->allow_privilege_escalation = json_is_true(json_object_get(o, "allow_privilege_escalation"));
    json_t *x = json_object_get(o, "snapshot_expiration_ms");
    s->snap_expiration_ms = json_is_integer(x) ? json_integer_value(x) : -1;
    json_t *origin = json_object_get(o, "origin");
    s->origin = json_is_object(origin) ? json_incref(origin) : NULL;
    if (s->origin && json_object_get(s->origin, "pending")) {
        /* a source that never finished: the sandbox was deleted by then, or keep a note */
        json_object_del(s->origin, "pending");
        json_object_set_new(s->origin, "incomplete", json_true());
    }
    json_decref(o);
}

char *sbx_ext_dump(const struct sbx *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "fs", json_string(in_store(s->d, s->fs_dir) ? "store" : "dir"));
    json_object_set_new(o, "data_base", json_integer(s->data_base));
    json_object_set_new(o, "nofile", json_integer(s->nofile));
    json_object_set_new(o, "disk_mb", json_integer(s->disk_mb));
    if (s->allow_privilege_escalation)
        json_object_set_new(o, "allow_privilege_escalation", json_true());
    if (s->mounts) json_object_set(o, "mounts", s->mounts);
    if (s->snap_expiration_ms >= 0)
        json_object_set_new(o, "snapshot_expiration_ms", json_integer(s->snap_expiration_ms));
    if (s->origin) json_object_set(o, "origin", s->origin);
    char *t = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return t;
}

void sbx_ext_json(const struct sbx *s, json_t *o)
{
    json_object_set_new(o, "mounts", sbx_mounts_json(s->d, s->mounts));
    json_object_set_new(o, "snapshot_expiration_ms", s->snap_expiration_ms >= 0
                                                         ? json_integer(s->snap_expiration_ms)
                                                         : json_null());
    if (s->origin) {
        json_t *src = json_deep_copy(s->origin);
        json_object_del(src, "pending");
        json_object_set_new(o, "source", src);
    } else {
        json_object_set_new(o, "source", json_null());
    }
}

static int parse_expiration(const json_t *body, const char *key, int64_t *out, struct err *err)
{
    json_t *v = json_object_get(body, key);
    if (!v) return 0;
    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    int64_t x = -1;
    if (sbx_json_int(body, key, 0, SNAP_EXPIRATION_MAX_MS, &x, err) < 0) return -1;
    if (x != 0 && x < SNAP_EXPIRATION_MIN_MS)
        return err_invalid(err, key, "%s must be 0 (never) or at least %d ms", key,
                           SNAP_EXPIRATION_MIN_MS);
    *out = x;
    return 0;
}

int sbx_ext_parse(struct sbx *s, const json_t *body, struct err *err)
{
    int64_t exp = s->snap_expiration_ms;
    if (parse_expiration(body, "snapshot_expiration_ms", &exp, err) < 0) return -1;
    json_t *m = json_object_get(body, "mounts"), *parsed = NULL;
    if (m && !json_is_null(m) && sbx_mounts_parse(s->d, m, &parsed, err) < 0) return -1;
    s->snap_expiration_ms = exp;
    if (parsed) {
        json_decref(s->mounts);
        s->mounts = json_object_size(parsed) ? parsed : NULL;
        if (!s->mounts) json_decref(parsed);
    }
    return 0;
}

void sbx_ext_free(struct sbx *s)
{
    free(s->fs_dir);
    s->fs_dir = NULL;
    json_decref(s->mounts);
    json_decref(s->origin);
    s->mounts = s->origin = NULL;
}

/* ------------------------------------------------------------------ open / close */

static bool known_sandbox(struct sbxd *d, const char *id)
{
    for (struct sbx *s = d->first; s; s = s->next)
        if (!strcmp(s->id, id)) return true;
    return false;
}

static bool known_snapshot(struct sbxd *d, const char *id)
{
    for (struct sbx_snap *n = d->snaps->first; n; n = n->next)
        if (!strcmp(n->id, id)) return true;
    return false;
}

/* Remove entries of <store>/<dir> that nothing refers to (a crash mid-way). */
static void sweep(struct sbxd *d, const char *dir, bool (*known)(struct sbxd *, const char *))
{
    char p[1024];
    snprintf(p, sizeof p, "%.900s/%s", d->storage->root, dir);
    DIR *dp = opendir(p);
    if (!dp) return;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.' || known(d, de->d_name)) continue;
        char t[1300];
        snprintf(t, sizeof t, "%s/%.200s", p, de->d_name);
        log_warn("removing files nothing refers to", "path=%s", t);
        sbx_storage_remove(d->storage, t);
    }
    closedir(dp);
}

int sbx_snaps_open(struct sbxd *d, struct err *err)
{
    sqlite3 *db = sbx_store_db(d->store);
    char *msg = NULL;
    if (sqlite3_exec(db, snaps_sql, NULL, NULL, &msg) != SQLITE_OK ||
        snaps_migrate(db, &msg) < 0) {
        err_set(err, 500, "storage_error", "", "snapshots table: %s", msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    d->snaps = xcalloc(1, sizeof *d->snaps);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, sandbox_id, sandbox_name, image, data_base, created_at,"
                           " expires_at, expiration_ms, name FROM snapshots"
                           " ORDER BY created_at, id",
                           -1, &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    while (sqlite3_step(q) == SQLITE_ROW) {
        struct sbx_snap *n = xcalloc(1, sizeof *n);
        snprintf(n->id, sizeof n->id, "%s", (const char *)sqlite3_column_text(q, 0));
        snprintf(n->sandbox_id, sizeof n->sandbox_id, "%s", (const char *)sqlite3_column_text(q, 1));
        snprintf(n->sandbox_name, sizeof n->sandbox_name, "%s",
                 (const char *)sqlite3_column_text(q, 2));
        snprintf(n->image, sizeof n->image, "%s", (const char *)sqlite3_column_text(q, 3));
        n->data_base = (uint32_t)sqlite3_column_int64(q, 4);
        n->created_at = sqlite3_column_int64(q, 5);
        n->expires_at = sqlite3_column_int64(q, 6);
        n->expiration_ms = sqlite3_column_int64(q, 7);
        snprintf(n->name, sizeof n->name, "%s", (const char *)sqlite3_column_text(q, 8));
        n->path = xasprintf("%s/snapshots/%s", d->storage->root, n->id);
        snap_link(d->snaps, n);
    }
    sqlite3_finalize(q);
    for (struct sbx_snap *n = d->snaps->first, *next; n; n = next) {
        next = n->next;
        struct stat st;
        if (stat(n->path, &st) < 0) {
            log_error("snapshot files are missing; forgetting it", "snapshot=%s", n->id);
            snap_destroy(d, n, "missing");
        }
    }
    sweep(d, "fs", known_sandbox);
    sweep(d, "snapshots", known_snapshot);
    d->snaps->tick = event_new(d->base, -1, EV_PERSIST, on_tick, d);
    struct timeval one = {1, 0};
    event_add(d->snaps->tick, &one);
    on_tick(-1, 0, d);
    return 0;
}

void sbx_snaps_shutdown(struct sbxd *d)
{
    if (d->snaps && d->snaps->tick) event_del(d->snaps->tick);
}

void sbx_snaps_close(struct sbxd *d)
{
    if (!d->snaps) return;
    if (d->snaps->tick) event_free(d->snaps->tick);
    while (d->snaps->first) {
        struct sbx_snap *n = d->snaps->first;
        snap_unlink(d->snaps, n);
        snap_free(n);
    }
    free(d->snaps);
    d->snaps = NULL;
}

/* ------------------------------------------------------------------ handlers */

bool sbx_snapshot_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > SBX_SNAP_NAME_MAX || !isalnum((unsigned char)name[0])) return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("._-/", name[i])) return false;
    return true;
}

json_t *sbx_snapshot_take(struct sbx *s, int64_t exp, const char *name, int64_t *took_us,
                          int64_t *frozen_us, struct err *err)
{
    struct sbxd *d = s->d;
    if (name && *name && !sbx_snapshot_name_valid(name)) {
        err_invalid(err, "name", "a snapshot name is 1 to %d of [A-Za-z0-9._/-], starting with a "
                    "letter or digit", SBX_SNAP_NAME_MAX);
        return NULL;
    }
    if (exp < 0) exp = s->snap_expiration_ms >= 0 ? s->snap_expiration_ms
                                                  : d->cfg.snapshot_expiration_ms;
    if (exp < 0) exp = 0;
    struct sbx_snap *n = xcalloc(1, sizeof *n);
    uuid_v7(n->id);
    snprintf(n->sandbox_id, sizeof n->sandbox_id, "%s", s->id);
    snprintf(n->sandbox_name, sizeof n->sandbox_name, "%s", s->name);
    snprintf(n->image, sizeof n->image, "%s", s->image);
    snprintf(n->name, sizeof n->name, "%s", name ? name : "");
    n->data_base = s->data_base ? s->data_base : s->uid_base;
    n->path = xasprintf("%s/snapshots/%s", d->storage->root, n->id);
    int64_t t0 = now_us(), frozen = 0;
    if (clone_live(s, n->path, true, &frozen, err) < 0) {
        snap_free(n);
        return NULL;
    }
    int64_t took = now_us() - t0;
    n->created_at = clock_now_ms();
    n->expiration_ms = exp;
    n->expires_at = exp > 0 ? n->created_at + exp : 0;
    if (snap_insert(d, n, err) < 0) {
        sbx_storage_remove(d->storage, n->path);
        snap_free(n);
        return NULL;
    }
    snap_link(d->snaps, n);
    log_info("snapshot created",
             "snapshot=%s sandbox=%s name=\"%s\" state=%s us=%lld frozen_us=%lld", n->id, s->id,
             n->name, sbx_state_name(s->state), (long long)took, (long long)frozen);
    if (took_us) *took_us = took;
    if (frozen_us) *frozen_us = frozen;
    return snap_json(d, n);
}

json_t *sbx_snapshot_find_json(struct sbxd *d, const char *id)
{
    struct sbx_snap *n = snap_find(d, id);
    return n ? snap_json(d, n) : NULL;
}

const char *sbx_snapshot_named(struct sbxd *d, const char *name)
{
    if (!name || !*name || !d->snaps) return NULL;
    on_tick(-1, 0, d);
    for (struct sbx_snap *n = d->snaps->last; n; n = n->prev)
        if (!strcmp(n->name, name)) return n->id;
    return NULL;
}

int sbx_snapshot_delete(struct sbxd *d, const char *id)
{
    struct sbx_snap *n = snap_find(d, id);
    if (!n) return -ENOENT;
    snap_destroy(d, n, "deleted");
    return 0;
}

json_t *sbx_snapshot_list(struct sbxd *d, const char *sandbox, const char *name,
                          const char *cursor, long limit, const char **next)
{
    struct sbx *s = sandbox ? sbx_find(d, sandbox) : NULL;
    const char *want = s ? s->id : sandbox; /* a deleted sandbox's id still matches */
    on_tick(-1, 0, d);
    json_t *arr = json_array();
    *next = NULL;
    bool past = cursor == NULL;
    for (struct sbx_snap *n = d->snaps->first; n; n = n->next) {
        if (!past) {
            past = !strcmp(n->id, cursor);
            continue;
        }
        if (want && strcmp(n->sandbox_id, want) != 0 && strcmp(n->sandbox_name, want) != 0)
            continue;
        if (name && strcmp(n->name, name) != 0 && strcmp(n->id, name) != 0) continue;
        if ((long)json_array_size(arr) == limit) {
            *next = n->prev ? n->prev->id : NULL;
            break;
        }
        json_array_append_new(arr, snap_json(d, n));
    }
    return arr;
}

static void h_snap_create(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = sbx_api_sandbox(d, r);
    json_t *body;
    if (!s || sbx_api_park(s, r, h_snap_create, d) || !sbx_api_body(r, true, &body)) return;
    struct err err = ERR_INIT;
    static const char *const known[] = {"expiration_ms", "name", NULL};
    int64_t exp = -1;
    const char *name = NULL;
    int rc = sbx_json_known(body, known, "a snapshot", &err) < 0 ||
                     parse_expiration(body, "expiration_ms", &exp, &err) < 0 ||
                     sbx_json_str(body, "name", SBX_SNAP_NAME_MAX, &name, &err) < 0
                 ? -1
                 : 0;
    if (!rc && name && !*name) rc = err_invalid(&err, "name", "name must not be empty");
    int64_t took = 0, frozen = 0;
    json_t *o = rc < 0 ? NULL : sbx_snapshot_take(s, exp, name, &took, &frozen, &err);
    json_decref(body); /* (name was in it) */
    if (!o) {
        http_reply_err(r, &err);
        return;
    }
    char v[32];
    snprintf(v, sizeof v, "%.3f", took / 1000.0);
    http_add_header(r, "X-Rebuno-Snapshot-Ms", v);
    snprintf(v, sizeof v, "%.3f", frozen / 1000.0);
    http_add_header(r, "X-Rebuno-Frozen-Ms", v);
    http_reply_json(r, 201, o);
}

static void h_snap_list(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *ref = http_req_query(r, "sandbox"), *cursor = http_req_query(r, "cursor");
    const char *name = http_req_query(r, "name");
    const char *lim = http_req_query(r, "limit");
    long limit = 100;
    if (lim) {
        char *end;
        limit = strtol(lim, &end, 10);
        if (*end || limit < 0 || limit > LIST_MAX) {
            http_reply_error(r, 400, "validation_error", "limit",
                             "limit must be an integer from 0 to %d", LIST_MAX);
            return;
        }
        if (limit == 0) limit = 100;
    }
    const char *next = NULL;
    json_t *arr = sbx_snapshot_list(d, ref, name && *name ? name : NULL, cursor, limit, &next);
    json_t *o = json_object();
    json_object_set_new(o, "snapshots", arr);
    json_object_set_new(o, "next_cursor", next ? json_string(next) : json_null());
    http_reply_json(r, 200, o);
}

static struct sbx_snap *get_snap(struct sbxd *d, struct http_req *r)
{
    const char *id = http_req_param(r, "sid");
    struct sbx_snap *n = snap_find(d, id);
    if (!n)
        http_reply_error(r, 404, "snapshot_not_found", "", "no snapshot \"%.80s\"", id ? id : "");
    return n;
}

static void h_snap_get(struct http_req *r, void *arg)
{
    struct sbx_snap *n = get_snap(arg, r);
    if (n) http_reply_json(r, 200, snap_json(arg, n));
}

static void h_snap_delete(struct http_req *r, void *arg)
{
    struct sbx_snap *n = get_snap(arg, r);
    if (!n) return;
    snap_destroy(arg, n, "deleted");
    http_reply_raw(r, 204, NULL, NULL, 0);
}

struct sbx *sbx_fork(struct sbxd *d, struct sbx *src, json_t *body, struct err *err)
{
    static const char *const known[] = {"name", "metadata", "env", "resources", "timeout_ms",
                                        "on_timeout", "snapshot_expiration_ms", "mounts",
                                        "start", "network_policy", "network_id", "ports",
                                        "allow_privilege_escalation", NULL};
    if (sbx_json_known(body, known, "a fork", err) < 0) return NULL;
    json_t *res = json_pack("{s:I, s:I, s:I, s:I, s:I}", "vcpus", (json_int_t)src->vcpus,
                            "memory", (json_int_t)src->memory_mb, "pids",
                            (json_int_t)src->pids_max, "nofile", (json_int_t)src->nofile,
                            "disk_mb", (json_int_t)src->disk_mb);
    json_t *over = json_object_get(body, "resources");
    if (json_is_object(over)) {
        /* more processes than the source: the default nofile for them, unless named */
        if (json_object_get(over, "pids") && !json_object_get(over, "nofile"))
            json_object_del(res, "nofile");
        json_object_update(res, over); /* validated by create */
    } else if (over && !json_is_null(over)) {
        json_decref(res);
        res = json_incref(over); /* create refuses it */
    }
    json_t *c = json_object();
    json_object_set(c, "metadata", src->metadata);
    json_object_set(c, "env", src->env);
    json_object_set_new(c, "resources", res);
    json_object_set_new(c, "timeout_ms", json_integer(src->timeout_ms));
    json_object_set_new(c, "on_timeout", json_string(src->on_timeout_pause ? "pause" : "stop"));
    json_object_set_new(c, "allow_privilege_escalation",
                        json_boolean(src->allow_privilege_escalation));
    if (src->snap_expiration_ms >= 0)
        json_object_set_new(c, "snapshot_expiration_ms", json_integer(src->snap_expiration_ms));
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (!strcmp(k, "resources")) continue;
        json_object_set(c, k, v);
    }
    struct sbx *s = sbx_create_ex(d, c, src, err);
    json_decref(c);
    if (s) log_info("sandbox forked", "sandbox=%s from=%s", s->id, src->id);
    return s;
}

/* POST /v1/sandboxes/:ref/fork: the source's configuration, overridden by the body. */
static void h_fork(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *src = sbx_api_sandbox(d, r);
    json_t *body;
    if (!src || sbx_api_park(src, r, h_fork, d) || !sbx_api_body(r, true, &body)) return;
    struct err err = ERR_INIT;
    int64_t t0 = now_us();
    struct sbx *s = sbx_fork(d, src, body, &err);
    json_decref(body);
    if (!s) {
        http_reply_err(r, &err);
        return;
    }
    char v2[32];
    snprintf(v2, sizeof v2, "%.3f", (now_us() - t0) / 1000.0);
    http_add_header(r, "X-Rebuno-Create-Ms", v2);
    http_reply_json(r, 201, sbx_json(s, true));
}

void sbx_api_register_ext(struct sbxd *d)
{
    struct http_server *h = d->http;
    http_route(h, "POST", "/v1/sandboxes/:ref/snapshots", h_snap_create, d);
    http_route(h, "POST", "/v1/sandboxes/:ref/fork", h_fork, d);
    http_route(h, "GET", "/v1/snapshots", h_snap_list, d);
    http_route(h, "GET", "/v1/snapshots/:sid", h_snap_get, d);
    http_route(h, "DELETE", "/v1/snapshots/:sid", h_snap_delete, d);
    sbx_drives_register(d);
    sbx_sources_register(d);
}
