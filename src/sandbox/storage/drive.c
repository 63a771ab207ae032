/*
 * drive.c - drives: named persistent file systems that sandboxes mount
 * (docs/sandbox-api.md "Drives").
 *
 * A drive is <store>/drives/<id>/ with two trees:
 *   data       what a read-write mount sees and changes (a btrfs subvolume with a
 *              simple-quota limit of max_size_bytes when the store has quotas);
 *   committed  a read-only snapshot of data, taken when a read-write session ends
 *              (or at start-up after a crash). A drive without it is "not
 *              initialized": it cannot be forked or mounted as a snapshot.
 * A read-write mount has one writer at a time (409 drive_attached); mode
 * "snapshot" mounts a per-session read-only clone of committed (a point in time,
 * unaffected by later commits), removed when the session ends. Forking a drive
 * clones committed into a new drive (parent_drive_id, root_drive_id).
 *
 * Drive files belong on disk to one fixed range (SBX_DRIVE_UID_BASE..+65535) and
 * each session binds them idmapped to its own range, so any sandbox sees a drive's
 * files with the owners it wrote them with. Mount paths follow 004: absolute,
 * canonical (repeated and trailing slashes and "." dropped), no "..", not "/", at
 * most 256 characters, no two overlapping, each drive once, and not over a system
 * directory.
 */
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/storage/safefs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "sandbox/core/validate.h"

#define SBX_DRIVE_UID_BASE 0x80000000u
#define DRIVE_SIZE_MIN (1LL << 20)
#define DRIVE_SIZE_MAX (1LL << 40)
#define DRIVE_SIZE_DEFAULT (10LL << 30)
#define LIST_MAX 1000

struct sbx_drive {
    struct sbx_drive *prev, *next;
    char id[40], name[64], parent_id[40], root_id[40];
    int64_t max_size, created_at, updated_at, committed_at;
    bool dirty;
    bool committing;    /* its writer's session ended; the commit is under way */
    struct sbx *writer; /* the live session mounting it read-write */
    int readers;        /* live sessions mounting a snapshot of it */
    char *dir;
};

struct sbx_drives {
    struct sbx_drive *first, *last;
    int count;
    unsigned seq; /* names of per-session snapshot mounts */
};

struct sbx_smount {
    int n;
    struct sbx_drive *drv[SBX_MOUNTS_MAX];
    bool rw[SBX_MOUNTS_MAX];
    char *src[SBX_MOUNTS_MAX], *target[SBX_MOUNTS_MAX];
    struct sbx_plan_mount plan[SBX_MOUNTS_MAX];
};

static const char *drives_sql =
    "CREATE TABLE IF NOT EXISTS drives("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, max_size INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, committed_at INTEGER NOT NULL,"
    " parent_id TEXT NOT NULL, root_id TEXT NOT NULL, dirty INTEGER NOT NULL) STRICT;";

static json_t *iso(int64_t ms)
{
    if (ms <= 0) return json_null();
    char b[40];
    clock_format_iso(ms, b, sizeof b);
    return json_string(b);
}

/* ------------------------------------------------------------------ registry */

static struct sbx_drive *drive_find(struct sbxd *d, const char *ref)
{
    if (!ref || !d->drives) return NULL;
    for (struct sbx_drive *v = d->drives->first; v; v = v->next)
        if (!strcmp(v->id, ref)) return v;
    for (struct sbx_drive *v = d->drives->first; v; v = v->next)
        if (!strcmp(v->name, ref)) return v;
    return NULL;
}

static void drive_link(struct sbx_drives *dd, struct sbx_drive *v)
{
    v->prev = dd->last;
    if (dd->last)
        dd->last->next = v;
    else
        dd->first = v;
    dd->last = v;
    dd->count++;
}

static void drive_unlink(struct sbx_drives *dd, struct sbx_drive *v)
{
    if (v->prev)
        v->prev->next = v->next;
    else
        dd->first = v->next;
    if (v->next)
        v->next->prev = v->prev;
    else
        dd->last = v->prev;
    dd->count--;
}

static void drive_free(struct sbx_drive *v)
{
    free(v->dir);
    free(v);
}

static int drive_save(struct sbxd *d, const struct sbx_drive *v, struct err *err)
{
    sqlite3 *db = sbx_store_db(d->store);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(
            db,
            "INSERT INTO drives(id, name, max_size, created_at, updated_at, committed_at,"
            " parent_id, root_id, dirty) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)"
            " ON CONFLICT(id) DO UPDATE SET max_size=?3, updated_at=?5, committed_at=?6, dirty=?9",
            -1, &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    sqlite3_bind_text(q, 1, v->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, v->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, v->max_size);
    sqlite3_bind_int64(q, 4, v->created_at);
    sqlite3_bind_int64(q, 5, v->updated_at);
    sqlite3_bind_int64(q, 6, v->committed_at);
    sqlite3_bind_text(q, 7, v->parent_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 8, v->root_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 9, v->dirty);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    return 0;
}

static void save_or_log(struct sbxd *d, const struct sbx_drive *v)
{
    struct err err = ERR_INIT;
    if (drive_save(d, v, &err) < 0)
        log_error("cannot save drive", "drive=%s error=\"%s\"", v->id, err.msg);
}

static char *drive_path(const struct sbx_drive *v, const char *what)
{
    return xasprintf("%s/%s", v->dir, what);
}

/*
 * A commit replaces committed with a read-only snapshot of data, in two halves. The
 * clone (data -> committed.new) makes btrfs write back the drive's dirty data first,
 * which takes as long as the disk needs: after a session ends it runs on the teardown
 * thread (sbx_commits_work touches nothing but those two paths). Replacing committed
 * and saving the row then run on the loop (commit_finish). Meanwhile the drive is
 * `committing`: no new writer may mount it, so committed holds exactly what the
 * session left; readers keep the previous commit until the rename.
 */
struct sbx_commits {
    int n;
    struct sbx_drive *drv[SBX_MOUNTS_MAX];
    char *data[SBX_MOUNTS_MAX], *next[SBX_MOUNTS_MAX];
    int e[SBX_MOUNTS_MAX];
};

static void commit_finish(struct sbxd *d, struct sbx_drive *v, int e)
{
    char *next = drive_path(v, "committed.new"), *cur = drive_path(v, "committed");
    if (!e) {
        sbx_storage_remove(d->storage, cur);
        if (rename(next, cur) < 0) e = -errno;
    }
    if (!e) {
        v->committed_at = v->updated_at = clock_now_ms();
        v->dirty = false;
        save_or_log(d, v);
        log_info("drive committed", "drive=%s name=%s", v->id, v->name);
    } else {
        log_error("drive commit failed", "drive=%s error=\"%s\"", v->id, strerror(-e));
    }
    v->committing = false;
    free(next);
    free(cur);
}

/* Both halves at once, on the loop (start-up). 0 or -errno. */
static int drive_commit(struct sbxd *d, struct sbx_drive *v)
{
    char *data = drive_path(v, "data"), *next = drive_path(v, "committed.new");
    sbx_storage_remove(d->storage, next);
    int e = sbx_storage_clone(d->storage, data, next, true);
    commit_finish(d, v, e);
    free(data);
    free(next);
    return e;
}

void sbx_commits_work(struct sbx_storage *st, struct sbx_commits *c)
{
    for (int i = 0; c && i < c->n; i++)
        c->e[i] = sbx_storage_clone(st, c->data[i], c->next[i], true);
}

void sbx_commits_run(struct sbxd *d, struct sbx_commits *c)
{
    sbx_commits_work(d->storage, c);
    sbx_commits_finish(d, c);
}

void sbx_commits_finish(struct sbxd *d, struct sbx_commits *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        commit_finish(d, c->drv[i], c->e[i]);
        free(c->data[i]);
        free(c->next[i]);
    }
    free(c);
}

static json_t *drive_json(struct sbxd *d, const struct sbx_drive *v)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(v->id));
    json_object_set_new(o, "name", json_string(v->name));
    json_object_set_new(o, "region", json_string("local"));
    json_object_set_new(o, "max_size_bytes", json_integer(v->max_size));
    json_object_set_new(o, "max_size_enforced", json_boolean(d->storage->quota));
    json_object_set_new(o, "created_at", iso(v->created_at));
    json_object_set_new(o, "updated_at", iso(v->updated_at));
    json_object_set_new(o, "initialized", json_boolean(v->committed_at > 0));
    json_object_set_new(o, "committed_at", iso(v->committed_at));
    json_object_set_new(o, "parent_drive_id", v->parent_id[0] ? json_string(v->parent_id) : json_null());
    json_object_set_new(o, "root_drive_id", v->root_id[0] ? json_string(v->root_id) : json_null());
    json_object_set_new(o, "attached_to", v->writer ? json_pack("{s:s, s:s, s:s}", "sandbox_id",
                                                                v->writer->id, "sandbox_name",
                                                                v->writer->name, "mode", "rw")
                                                    : json_null());
    json_object_set_new(o, "snapshot_mounts", json_integer(v->readers));
    return o;
}

/* ------------------------------------------------------------------ mounts */

static const char *const system_dirs[] = {"/proc", "/dev", "/sys", "/usr", "/etc", "/bin",
                                          "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                          "/tmp", "/run", NULL};

/* 004's canonical form, or -1 with err. */
static int canon_mount_path(const char *in, char *out, size_t n, struct err *err)
{
    if (in[0] != '/')
        return err_invalid(err, "mounts", "mount path \"%.80s\" must be absolute", in);
    size_t o = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 1 && p[0] == '.') {
            p += len;
            continue;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return err_invalid(err, "mounts", "mount path \"%.80s\" must not contain ..", in);
        if (o + 1 + len >= n || o + 1 + len > SBX_MOUNT_PATH_MAX)
            return err_invalid(err, "mounts", "mount path \"%.80s...\" is longer than %d characters",
                               in, SBX_MOUNT_PATH_MAX);
        out[o++] = '/';
        memcpy(out + o, p, len);
        o += len;
        p += len;
    }
    out[o] = '\0';
    if (o == 0) return err_invalid(err, "mounts", "a drive cannot be mounted on /");
    if (!sbx_plan_mount_path_ok(out))
        return err_invalid(err, "mounts",
                           "mount path \"%.80s\" may only hold the characters A-Z a-z 0-9 / . _ + "
                           "@ -",
                           in);
    for (const char *const *s = system_dirs; *s; s++) {
        size_t l = strlen(*s);
        if (!strncmp(out, *s, l) && (out[l] == '\0' || out[l] == '/'))
            return err_invalid(err, "mounts", "mount path %s is over the system directory %s", out,
                               *s);
    }
    return 0;
}

static bool overlaps(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > lb) {
        const char *t = a;
        a = b;
        b = t;
        la = lb;
    }
    return !strncmp(a, b, la) && (b[la] == '\0' || b[la] == '/');
}

int sbx_mounts_parse(struct sbxd *d, const json_t *v, json_t **out, struct err *err)
{
    *out = NULL;
    if (!json_is_object(v))
        return err_invalid(err, "mounts",
                           "mounts must be an object of path -> drive name or {\"drive\", \"mode\"}");
    if (json_object_size(v) > SBX_MOUNTS_MAX)
        return err_invalid(err, "mounts", "at most %d mounts", SBX_MOUNTS_MAX);
    json_t *res = json_object();
    const char *k;
    json_t *m;
    json_object_foreach((json_t *)v, k, m) {
        char path[SBX_MOUNT_PATH_MAX + 2];
        if (canon_mount_path(k, path, sizeof path, err) < 0) goto fail;
        const char *ref = NULL, *mode = "rw";
        if (json_is_string(m)) {
            ref = json_string_value(m);
        } else if (json_is_object(m)) {
            static const char *const known[] = {"drive", "mode", NULL};
            if (sbx_json_known(m, known, "a mount", err) < 0 ||
                sbx_json_str(m, "drive", 80, &ref, err) < 0 ||
                sbx_json_str(m, "mode", 16, &mode, err) < 0) {
                err_wrap(err, "mounts");
                goto fail;
            }
            if (!mode) mode = "rw";
        }
        if (!ref) {
            err_invalid(err, "mounts", "mount %s names no drive", path);
            goto fail;
        }
        if (strcmp(mode, "rw") && strcmp(mode, "snapshot")) {
            err_invalid(err, "mounts", "mount mode must be \"rw\" or \"snapshot\"");
            goto fail;
        }
        struct sbx_drive *drv = drive_find(d, ref);
        if (!drv) {
            err_set(err, 404, "not_found", "mounts", "no drive with name or id \"%.80s\"", ref);
            goto fail;
        }
        const char *pk;
        json_t *pv;
        json_object_foreach(res, pk, pv) {
            if (overlaps(pk, path)) {
                err_invalid(err, "mounts", "mount paths %s and %s overlap", pk, path);
                goto fail;
            }
            if (!strcmp(json_string_value(json_object_get(pv, "drive_id")), drv->id)) {
                err_invalid(err, "mounts", "drive %s is mounted twice", drv->name);
                goto fail;
            }
        }
        json_object_set_new(res, path, json_pack("{s:s, s:s}", "drive_id", drv->id, "mode", mode));
    }
    *out = res;
    return 0;
fail:
    json_decref(res);
    return -1;
}

json_t *sbx_mounts_json(struct sbxd *d, const json_t *mounts)
{
    json_t *o = json_object();
    const char *k;
    json_t *m;
    json_object_foreach((json_t *)mounts, k, m) {
        const char *id = json_string_value(json_object_get(m, "drive_id"));
        struct sbx_drive *v = drive_find(d, id);
        json_object_set_new(o, k, json_pack("{s:s, s:s?, s:O}", "drive_id", id ? id : "", "drive",
                                            v ? v->name : NULL, "mode",
                                            json_object_get(m, "mode")));
    }
    return o;
}

struct sbx_commits *sbx_mounts_release(struct sbx *s)
{
    struct sbx_smount *sm = s->smounts;
    if (!sm) return NULL;
    struct sbxd *d = s->d;
    struct sbx_commits *c = NULL;
    for (int i = 0; i < sm->n; i++) {
        struct sbx_drive *v = sm->drv[i];
        if (sm->rw[i]) {
            if (v->writer == s) {
                v->writer = NULL;
                v->committing = true;
                if (!c) c = xcalloc(1, sizeof *c);
                c->drv[c->n] = v;
                c->data[c->n] = drive_path(v, "data");
                c->next[c->n] = drive_path(v, "committed.new");
                sbx_storage_remove(d->storage, c->next[c->n]);
                c->n++;
            }
        } else {
            v->readers--;
            sbx_storage_remove(d->storage, sm->src[i]);
        }
        free(sm->src[i]);
        free(sm->target[i]);
    }
    free(sm);
    s->smounts = NULL;
    return c;
}

int sbx_mounts_acquire(struct sbx *s, struct sbx_plan_input *in, struct err *err)
{
    struct sbxd *d = s->d;
    sbx_commits_run(d, sbx_mounts_release(s)); /* (nothing is held between sessions) */
    in->mounts = NULL;
    in->nmounts = 0;
    if (!s->mounts || !json_object_size(s->mounts)) return 0;
    struct sbx_smount *sm = xcalloc(1, sizeof *sm);
    s->smounts = sm;
    const char *k;
    json_t *m;
    json_object_foreach(s->mounts, k, m) {
        if (sm->n >= SBX_MOUNTS_MAX) break;
        const char *id = json_string_value(json_object_get(m, "drive_id"));
        const char *mode = json_string_value(json_object_get(m, "mode"));
        struct sbx_drive *v = drive_find(d, id);
        if (!v) {
            err_set(err, 404, "not_found", "mounts",
                    "drive %.80s mounted at %s no longer exists; update the sandbox's mounts",
                    id ? id : "?", k);
            goto fail;
        }
        bool rw = !mode || strcmp(mode, "snapshot") != 0;
        char *src;
        if (rw) {
            if (v->writer && v->writer != s) {
                err_set(err, 409, "drive_attached", "mounts",
                        "drive %s is mounted read-write by sandbox %s; stop it first, or mount "
                        "the drive with mode \"snapshot\"",
                        v->name, v->writer->name);
                goto fail;
            }
            if (v->committing) {
                err_set(err, 409, "drive_attached", "mounts",
                        "drive %s is being committed after its writer stopped; try again in a "
                        "moment", v->name);
                goto fail;
            }
            v->writer = s;
            if (!v->dirty) {
                v->dirty = true;
                save_or_log(d, v);
            }
            src = drive_path(v, "data");
        } else {
            if (!v->committed_at) {
                err_set(err, 409, "drive_not_initialized", "mounts",
                        "drive %s has no committed data to mount as a snapshot; mount it "
                        "read-write and stop that session first",
                        v->name);
                goto fail;
            }
            char *cur = drive_path(v, "committed");
            src = xasprintf("%s/mounts/%s-%u", d->storage->root, s->id, ++d->drives->seq);
            int e = sbx_storage_clone(d->storage, cur, src, true);
            free(cur);
            if (e < 0) {
                free(src);
                err_set(err, 500, "storage_error", "mounts", "cannot snapshot drive %s: %s",
                        v->name, strerror(-e));
                goto fail;
            }
            v->readers++;
        }
        int i = sm->n++;
        sm->drv[i] = v;
        sm->rw[i] = rw;
        sm->src[i] = src;
        sm->target[i] = xstrdup(k);
        sm->plan[i].source = sm->src[i];
        sm->plan[i].target = sm->target[i];
        sm->plan[i].readonly = !rw;
    }
    in->mounts = sm->plan;
    in->nmounts = (size_t)sm->n;
    in->mount_base = SBX_DRIVE_UID_BASE;
    return 0;
fail:
    /* undo, without committing drives this session never used */
    for (int i = 0; i < sm->n; i++) {
        if (sm->rw[i]) {
            if (sm->drv[i]->writer == s) sm->drv[i]->writer = NULL;
        } else {
            sm->drv[i]->readers--;
            sbx_storage_remove(d->storage, sm->src[i]);
        }
        free(sm->src[i]);
        free(sm->target[i]);
    }
    free(sm);
    s->smounts = NULL;
    return -1;
}

/* ------------------------------------------------------------------ open / close */

static void sweep_dir(struct sbxd *d, const char *sub, bool all)
{
    char p[1024];
    snprintf(p, sizeof p, "%.900s/%s", d->storage->root, sub);
    DIR *dp = opendir(p);
    if (!dp) return;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.') continue;
        if (!all && drive_find(d, de->d_name)) continue;
        char t[1300];
        snprintf(t, sizeof t, "%s/%.200s", p, de->d_name);
        if (all) {
            sbx_storage_remove(d->storage, t);
            continue;
        }
        /* a drive directory nothing refers to: its two trees, then itself */
        static const char *const parts[] = {"data", "committed", "committed.new"};
        for (size_t i = 0; i < 3; i++) {
            char q[1400];
            snprintf(q, sizeof q, "%s/%s", t, parts[i]);
            sbx_storage_remove(d->storage, q);
        }
        rmdir(t);
    }
    closedir(dp);
}

int sbx_drives_open(struct sbxd *d, struct err *err)
{
    sqlite3 *db = sbx_store_db(d->store);
    char *msg = NULL;
    if (sqlite3_exec(db, drives_sql, NULL, NULL, &msg) != SQLITE_OK) {
        err_set(err, 500, "storage_error", "", "drives table: %s", msg ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    d->drives = xcalloc(1, sizeof *d->drives);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, name, max_size, created_at, updated_at, committed_at,"
                           " parent_id, root_id, dirty FROM drives ORDER BY created_at, id",
                           -1, &q, NULL) != SQLITE_OK)
        return err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    while (sqlite3_step(q) == SQLITE_ROW) {
        struct sbx_drive *v = xcalloc(1, sizeof *v);
        snprintf(v->id, sizeof v->id, "%s", (const char *)sqlite3_column_text(q, 0));
        snprintf(v->name, sizeof v->name, "%s", (const char *)sqlite3_column_text(q, 1));
        v->max_size = sqlite3_column_int64(q, 2);
        v->created_at = sqlite3_column_int64(q, 3);
        v->updated_at = sqlite3_column_int64(q, 4);
        v->committed_at = sqlite3_column_int64(q, 5);
        snprintf(v->parent_id, sizeof v->parent_id, "%s", (const char *)sqlite3_column_text(q, 6));
        snprintf(v->root_id, sizeof v->root_id, "%s", (const char *)sqlite3_column_text(q, 7));
        v->dirty = sqlite3_column_int(q, 8) != 0;
        v->dir = xasprintf("%s/drives/%s", d->storage->root, v->id);
        drive_link(d->drives, v);
    }
    sqlite3_finalize(q);
    sweep_dir(d, "mounts", true); /* no session survives a restart */
    sweep_dir(d, "drives", false);
    for (struct sbx_drive *v = d->drives->first; v; v = v->next)
        if (v->dirty) drive_commit(d, v); /* its writer died with the previous daemon */
    return 0;
}

void sbx_drives_close(struct sbxd *d)
{
    if (!d->drives) return;
    while (d->drives->first) {
        struct sbx_drive *v = d->drives->first;
        drive_unlink(d->drives, v);
        drive_free(v);
    }
    free(d->drives);
    d->drives = NULL;
}

/* ------------------------------------------------------------------ handlers */

static struct sbx_drive *get_drive(struct sbxd *d, struct http_req *r)
{
    const char *ref = http_req_param(r, "dref");
    struct sbx_drive *v = drive_find(d, ref);
    if (!v)
        http_reply_error(r, 404, "not_found", "", "no drive with name or id \"%.80s\"",
                         ref ? ref : "");
    return v;
}

/* A new drive directory with an empty (create) or cloned (from) data tree. */
static struct sbx_drive *drive_new(struct sbxd *d, const char *name, int64_t max_size,
                                   const struct sbx_drive *from, struct err *err)
{
    struct sbx_drive *v = xcalloc(1, sizeof *v);
    uuid_v7(v->id);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->max_size = max_size;
    v->created_at = v->updated_at = clock_now_ms();
    v->dir = xasprintf("%s/drives/%s", d->storage->root, v->id);
    char *data = drive_path(v, "data");
    int e = mkdir(v->dir, 0700) < 0 ? -errno : 0;
    if (!e && !from) {
        e = sbx_storage_create(d->storage, data);
        if (!e) e = sbx_safe_set_owner_at(data, 0755, SBX_DRIVE_UID_BASE, SBX_DRIVE_UID_BASE);
    } else if (!e) {
        char *src = drive_path(from, "committed"), *cur = drive_path(v, "committed");
        e = sbx_storage_clone(d->storage, src, data, false);
        if (!e) e = sbx_storage_clone(d->storage, src, cur, true);
        if (!e) sbx_safe_set_owner_at(data, 0755, (uid_t)-1, (gid_t)-1);
        free(src);
        free(cur);
        v->committed_at = v->created_at;
        snprintf(v->parent_id, sizeof v->parent_id, "%s", from->id);
        snprintf(v->root_id, sizeof v->root_id, "%s", from->root_id[0] ? from->root_id : from->id);
    }
    if (!e && d->storage->quota) {
        int le = sbx_storage_set_limit(d->storage, data, (uint64_t)max_size);
        if (le < 0)
            log_warn("cannot set the drive's size limit", "drive=%s error=\"%s\"", v->id,
                     strerror(-le));
    }
    free(data);
    if (!e && drive_save(d, v, err) < 0) e = -EIO;
    if (e < 0) {
        if (!err->status)
            err_set(err, e == -ENOSPC ? 507 : 500, e == -ENOSPC ? "no_space" : "storage_error", "",
                    "cannot create drive %s: %s", name, strerror(-e));
        char *p;
        static const char *const parts[] = {"data", "committed"};
        for (size_t i = 0; i < 2; i++) {
            p = drive_path(v, parts[i]);
            sbx_storage_remove(d->storage, p);
            free(p);
        }
        rmdir(v->dir);
        drive_free(v);
        return NULL;
    }
    drive_link(d->drives, v);
    return v;
}

json_t *sbx_drive_ensure(struct sbxd *d, const char *name, int64_t max, bool *created,
                         struct err *err)
{
    *created = false;
    if (max == 0) max = DRIVE_SIZE_DEFAULT;
    if (!name || !sbx_name_valid(name) || uuid_valid(name)) {
        err_invalid(err, "name",
                    "name must be 1-%d characters of A-Z a-z 0-9 . _ - starting with a letter or "
                    "digit (and not look like an id)",
                    SBX_NAME_MAX);
        return NULL;
    }
    if (max < DRIVE_SIZE_MIN || max > DRIVE_SIZE_MAX) {
        err_invalid(err, "max_size_bytes", "max_size_bytes must be between %lld and %lld",
                    DRIVE_SIZE_MIN, DRIVE_SIZE_MAX);
        return NULL;
    }
    struct sbx_drive *v = drive_find(d, name);
    if (v) return drive_json(d, v);
    v = drive_new(d, name, max, NULL, err);
    if (!v) return NULL;
    log_info("drive created", "drive=%s name=%s", v->id, v->name);
    *created = true;
    return drive_json(d, v);
}

static void h_drive_create(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    if (!sbx_api_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    static const char *const known[] = {"name", "max_size_bytes", "region", NULL};
    const char *name = NULL, *region = NULL;
    int64_t max = DRIVE_SIZE_DEFAULT;
    json_t *o = NULL;
    bool created = false;
    if (sbx_json_known(body, known, "a drive", &err) < 0 ||
        sbx_json_str(body, "name", SBX_NAME_MAX, &name, &err) < 0 ||
        sbx_json_str(body, "region", 64, &region, &err) < 0 ||
        sbx_json_int(body, "max_size_bytes", DRIVE_SIZE_MIN, DRIVE_SIZE_MAX, &max, &err) < 0) {
    } else if (region && strcmp(region, "local") != 0) {
        err_invalid(&err, "region", "this service has one region: \"local\"");
    } else {
        o = sbx_drive_ensure(d, name, max, &created, &err);
    }
    json_decref(body);
    if (o)
        http_reply_json(r, created ? 201 : 200, o);
    else
        http_reply_err(r, &err);
}

json_t *sbx_drive_list_json(struct sbxd *d, const char *prefix)
{
    json_t *arr = json_array();
    for (struct sbx_drive *v = d->drives->first; v; v = v->next)
        if (!prefix || !strncmp(v->name, prefix, strlen(prefix)))
            json_array_append_new(arr, drive_json(d, v));
    return arr;
}

static void h_drive_get(struct http_req *r, void *arg)
{
    struct sbx_drive *v = get_drive(arg, r);
    if (v) http_reply_json(r, 200, drive_json(arg, v));
}

static int cmp_created(const void *a, const void *b)
{
    const struct sbx_drive *x = *(struct sbx_drive *const *)a, *y = *(struct sbx_drive *const *)b;
    return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
}

static int cmp_updated(const void *a, const void *b)
{
    const struct sbx_drive *x = *(struct sbx_drive *const *)a, *y = *(struct sbx_drive *const *)b;
    return x->updated_at < y->updated_at ? -1 : x->updated_at > y->updated_at ? 1 : strcmp(x->id, y->id);
}

static int cmp_name(const void *a, const void *b)
{
    const struct sbx_drive *x = *(struct sbx_drive *const *)a, *y = *(struct sbx_drive *const *)b;
    return strcmp(x->name, y->name);
}

/* GET /v1/drives?name=PREFIX&order=created_at|updated_at|name&direction=asc|desc
 *               &limit=100&cursor=N */
static void h_drive_list(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    const char *prefix = http_req_query(r, "name"), *order = http_req_query(r, "order");
    const char *dir = http_req_query(r, "direction"), *lim = http_req_query(r, "limit");
    const char *cur = http_req_query(r, "cursor");
    int (*cmp)(const void *, const void *) = cmp_created;
    if (order && !strcmp(order, "updated_at")) cmp = cmp_updated;
    else if (order && !strcmp(order, "name")) cmp = cmp_name;
    else if (order && strcmp(order, "created_at") != 0) {
        http_reply_error(r, 400, "validation_error", "order",
                         "order must be created_at, updated_at or name");
        return;
    }
    bool desc = dir && !strcmp(dir, "desc");
    if (dir && !desc && strcmp(dir, "asc") != 0) {
        http_reply_error(r, 400, "validation_error", "direction", "direction must be asc or desc");
        return;
    }
    long limit = 100, start = 0;
    char *end;
    if (lim && ((limit = strtol(lim, &end, 10)) < 1 || limit > LIST_MAX || *end)) {
        http_reply_error(r, 400, "validation_error", "limit", "limit must be 1-%d", LIST_MAX);
        return;
    }
    if (cur && ((start = strtol(cur, &end, 10)) < 0 || *end)) {
        http_reply_error(r, 400, "validation_error", "cursor", "cursor must come from next_cursor");
        return;
    }
    struct sbx_drive **all = xcalloc((size_t)d->drives->count + 1, sizeof *all);
    size_t n = 0;
    for (struct sbx_drive *v = d->drives->first; v; v = v->next)
        if (!prefix || !strncmp(v->name, prefix, strlen(prefix))) all[n++] = v;
    qsort(all, n, sizeof *all, cmp);
    json_t *arr = json_array();
    size_t i = (size_t)start;
    for (; i < n && (long)json_array_size(arr) < limit; i++)
        json_array_append_new(arr, drive_json(d, all[desc ? n - 1 - i : i]));
    free(all);
    json_t *o = json_object();
    json_object_set_new(o, "drives", arr);
    char nc[32];
    snprintf(nc, sizeof nc, "%zu", i);
    json_object_set_new(o, "next_cursor", i < n ? json_string(nc) : json_null());
    http_reply_json(r, 200, o);
}

static void h_drive_fork(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    json_t *body;
    struct sbx_drive *src = get_drive(d, r);
    if (!src || !sbx_api_body(r, false, &body)) return;
    struct err err = ERR_INIT;
    static const char *const known[] = {"name", NULL};
    const char *name = NULL;
    if (sbx_json_known(body, known, "a drive fork", &err) < 0 ||
        sbx_json_str(body, "name", SBX_NAME_MAX, &name, &err) < 0) {
    } else if (!name || !sbx_name_valid(name) || uuid_valid(name)) {
        err_invalid(&err, "name", "name must be 1-%d characters of A-Z a-z 0-9 . _ -",
                    SBX_NAME_MAX);
    } else if (drive_find(d, name)) {
        err_set(&err, 409, "conflict", "name", "a drive named \"%s\" already exists", name);
    } else if (!src->committed_at) {
        err_set(&err, 409, "drive_not_initialized", "",
                "drive %s has no committed data; mount it read-write and stop that session to "
                "commit before forking",
                src->name);
    } else {
        struct sbx_drive *v = drive_new(d, name, src->max_size, src, &err);
        if (v) {
            json_decref(body);
            log_info("drive forked", "drive=%s name=%s from=%s", v->id, v->name, src->id);
            http_reply_json(r, 201, drive_json(d, v));
            return;
        }
    }
    json_decref(body);
    http_reply_err(r, &err);
}

json_t *sbx_drive_delete(struct sbxd *d, const char *ref, struct err *err)
{
    struct sbx_drive *v = drive_find(d, ref);
    if (!v) {
        err_set(err, 404, "not_found", "", "no drive with name or id \"%.80s\"", ref ? ref : "");
        return NULL;
    }
    if (v->writer || v->readers || v->committing) {
        err_set(err, 409, "drive_attached", "",
                "drive %s is mounted by a running sandbox%s%s; stop it first", v->name,
                v->writer ? " " : "", v->writer ? v->writer->name : "");
        return NULL;
    }
    sqlite3 *db = sbx_store_db(d->store);
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "DELETE FROM drives WHERE id = ?1", -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, v->id, -1, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE)
            err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
        sqlite3_finalize(q);
    } else {
        err_set(err, 500, "storage_error", "", "%s", sqlite3_errmsg(db));
    }
    if (err->status) return NULL;
    json_t *o = drive_json(d, v);
    static const char *const parts[] = {"data", "committed", "committed.new"};
    for (size_t i = 0; i < 3; i++) {
        char *p = drive_path(v, parts[i]);
        sbx_storage_remove(d->storage, p);
        free(p);
    }
    rmdir(v->dir);
    log_info("drive deleted", "drive=%s name=%s", v->id, v->name);
    drive_unlink(d->drives, v);
    drive_free(v);
    return o;
}

static void h_drive_delete(struct http_req *r, void *arg)
{
    struct err err = ERR_INIT;
    json_t *o = sbx_drive_delete(arg, http_req_param(r, "dref"), &err);
    if (!o) {
        http_reply_err(r, &err);
        return;
    }
    json_decref(o);
    http_reply_raw(r, 204, NULL, NULL, 0);
}

void sbx_drives_register(struct sbxd *d)
{
    struct http_server *h = d->http;
    http_route(h, "POST", "/v1/drives", h_drive_create, d);
    http_route(h, "GET", "/v1/drives", h_drive_list, d);
    http_route(h, "GET", "/v1/drives/:dref", h_drive_get, d);
    http_route(h, "DELETE", "/v1/drives/:dref", h_drive_delete, d);
    http_route(h, "POST", "/v1/drives/:dref/fork", h_drive_fork, d);
}
