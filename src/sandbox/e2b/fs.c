/*
 * fs.c - envd's filesystem.Filesystem unary RPCs (Stat, ListDir, MakeDir, Move,
 * Remove) over the core's file operations (files.h), acting as the request's user
 * (relative paths from its home). Entries are envd's EntryInfo: enum types, Go-style
 * permission strings, owner and group by name (from the sandbox's /etc/passwd and
 * /etc/group). WatchDir is watch.c's.
 */
#include "sandbox/e2b/e2b_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "sandbox/core/validate.h"
#include "sandbox/runtime/users.h"

#define DEPTH_MAX 32

struct names {
    struct buf passwd, group;
};

static void names_load(struct names *n, const struct sbx *s)
{
    struct sbx_fs fs = s->sess->fs; /* root's view: /etc as root sees it */
    fs.no_user_links = false;
    struct err ignored = ERR_INIT;
    buf_init(&n->passwd, SBX_ETC_FILE_MAX);
    buf_init(&n->group, SBX_ETC_FILE_MAX);
    if (sbx_fs_read_all(&fs, "/etc/passwd", SBX_ETC_FILE_MAX, &n->passwd, &ignored) < 0)
        n->passwd.len = 0;
    if (sbx_fs_read_all(&fs, "/etc/group", SBX_ETC_FILE_MAX, &n->group, &ignored) < 0)
        n->group.len = 0;
}

static void names_free(struct names *n)
{
    buf_fini(&n->passwd);
    buf_fini(&n->group);
}

/* The name of id in a passwd/group text (field 3), else the number. */
static void name_of(const struct buf *b, long long id, char *out, size_t outsz)
{
    snprintf(out, outsz, "%lld", id);
    const char *p = b->data, *end = b->data + b->len;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *c1 = memchr(p, ':', (size_t)(le - p));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
        if (c2) {
            char *e;
            long long v = strtoll(c2 + 1, &e, 10);
            if (e != c2 + 1 && *e == ':' && v == id && (size_t)(c1 - p) < outsz) {
                memcpy(out, p, (size_t)(c1 - p));
                out[c1 - p] = 0;
                return;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
}

/* One of the core's stat objects (files.h) -> EntryInfo, with the metadata the SDK
 * attached to the file (envd 0.6.2: X-Metadata-* on upload, kept as user xattrs). */
#define E2B_DIR_BLOCK 4096

static json_t *entry_json(const struct sbx_fs *fs, const json_t *st, const char *path,
                          struct names *n)
{
    const char *type = json_string_value(json_object_get(st, "type"));
    const char *mode_s = json_string_value(json_object_get(st, "mode"));
    unsigned mode = mode_s ? (unsigned)strtoul(mode_s, NULL, 8) : 0;
    const char *ft = "FILE_TYPE_UNSPECIFIED";
    char perms[12] = "?";
    if (type && !strcmp(type, "file")) ft = "FILE_TYPE_FILE", perms[0] = '-';
    else if (type && !strcmp(type, "directory")) ft = "FILE_TYPE_DIRECTORY", perms[0] = 'd';
    else if (type && !strcmp(type, "symlink")) ft = "FILE_TYPE_SYMLINK", perms[0] = 'L';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++) perms[1 + i] = (mode & (0400u >> i)) ? rwx[i] : '-';
    perms[10] = 0;
    char owner[64], group[64];
    name_of(&n->passwd, json_integer_value(json_object_get(st, "uid")), owner, sizeof owner);
    name_of(&n->group, json_integer_value(json_object_get(st, "gid")), group, sizeof group);
    json_t *o = json_object();
    json_object_set(o, "name", json_object_get(st, "name"));
    json_object_set_new(o, "type", json_string(ft));
    json_object_set_new(o, "path", json_string(path));
    json_t *size = json_object_get(st, "size");
    if (!strcmp(ft, "FILE_TYPE_DIRECTORY")) {
        /* ext4's directory size (E2B's sandboxes run on ext4): whole blocks, at least one.
         * btrfs counts a directory's name bytes instead, 0 for an empty one. */
        json_int_t sz = json_is_integer(size) ? json_integer_value(size) : 0;
        json_int_t blocks = sz <= E2B_DIR_BLOCK ? 1 : (sz + E2B_DIR_BLOCK - 1) / E2B_DIR_BLOCK;
        sz = blocks * E2B_DIR_BLOCK;
        json_object_set_new(o, "size", json_integer(sz));
    } else {
        json_object_set(o, "size", size);
    }
    json_object_set_new(o, "mode", json_integer(mode & 0777));
    json_object_set_new(o, "permissions", json_string(perms));
    json_object_set_new(o, "owner", json_string(owner));
    json_object_set_new(o, "group", json_string(group));
    json_object_set(o, "modifiedTime", json_object_get(st, "mtime"));
    json_t *t = json_object_get(st, "target");
    if (json_is_string(t)) { /* envd gives the target as an absolute path */
        char dir[SBX_PATH_MAX + 1], abs[SBX_PATH_MAX + 1];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) slash[slash == dir ? 1 : 0] = 0;
        struct err ignored = ERR_INIT;
        if (sbx_path_normalize(json_string_value(t), dir, abs, sizeof abs, "target", &ignored) == 0)
            json_object_set_new(o, "symlinkTarget", json_string(abs));
        else
            json_object_set(o, "symlinkTarget", t);
    }
    struct err ignored = ERR_INIT;
    json_t *meta = sbx_fs_xattrs(fs, path, E2B_XATTR_PREFIX, &ignored);
    if (json_object_size(meta)) json_object_set(o, "metadata", meta);
    json_decref(meta);
    return o;
}

json_t *e2b_stat_entry(const struct sbx *s, const struct sbx_fs *fs, const char *path,
                       struct err *err)
{
    json_t *st = sbx_fs_stat(fs, path, err);
    if (!st) return NULL;
    struct names n;
    names_load(&n, s);
    json_t *o = entry_json(fs, st, path, &n);
    names_free(&n);
    json_decref(st);
    return o;
}

/* Common start: the sandbox, the request's message, the user, its path field. */
struct fsreq {
    struct sbx *s;
    json_t *body;
    struct sbx_user u;
    struct sbx_fs fs;
    char path[SBX_PATH_MAX + 1];
};

int e2b_mkdirs(const struct sbx_fs *fs, const char *path, const struct sbx_user *u,
               struct err *err)
{
    struct sbx_owner own = {u->uid, u->gid};
    char prefix[SBX_PATH_MAX + 1];
    size_t n = strlen(path);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && path[i] != '/') continue;
        memcpy(prefix, path, i);
        prefix[i] = 0;
        json_t *st = sbx_fs_stat(fs, prefix, err);
        if (st) {
            json_decref(st);
            continue;
        }
        if (err->status != 404) return -1;
        err_clear(err);
        /* envd makes them as the user: 0755, the user's own group */
        if (sbx_fs_mkdir(fs, prefix, false, 0755, &own, err) < 0) {
            if (err->status != 409) return -1;
            err_clear(err);
            continue;
        }
        if (u->uid != 0 && sbx_fs_chown(fs, prefix, &own, err) < 0) return -1;
    }
    return 0;
}

/* A listing or watch of path failed with err: a path that exists but is no directory
 * says so (invalid_argument, as envd), rather than "not found". */
void e2b_not_a_dir(const struct sbx_fs *fs, const char *path, struct err *err)
{
    if (err->status != 404) return;
    struct err e2 = ERR_INIT;
    json_t *st = sbx_fs_stat(fs, path, &e2);
    const char *t = st ? json_string_value(json_object_get(st, "type")) : NULL;
    if (t && strcmp(t, "directory") != 0)
        err_invalid(err, "path", "%s is not a directory", path);
    json_decref(st);
}

static bool fs_begin(struct e2b *e, struct http_req *r, http_handler_fn self, const char *field,
                     struct fsreq *q)
{
    q->s = e2b_envd_sandbox(e, r, self);
    if (!q->s || !(q->body = cx_unary_body(r))) return false;
    struct err err = ERR_INIT;
    json_t *p = json_object_get(q->body, field);
    if (e2b_user(q->s, r, NULL, &q->u, &err) < 0 ||
        (p && !json_is_string(p) && err_invalid(&err, field, "%s must be a string", field)) ||
        e2b_path(json_string_value(p), &q->u, field, q->path, &err) < 0) {
        json_decref(q->body);
        cx_error_err(r, &err);
        return false;
    }
    q->fs = e2b_fs(q->s, &q->u);
    return true;
}

static void reply_entry(struct http_req *r, struct fsreq *q, const char *path)
{
    struct err err = ERR_INIT;
    json_t *o = e2b_stat_entry(q->s, &q->fs, path, &err);
    if (!o)
        cx_error_err(r, &err);
    else
        cx_reply(r, json_pack("{s:o}", "entry", o));
}

static void h_stat(struct http_req *r, void *arg)
{
    struct fsreq q;
    if (!fs_begin(arg, r, h_stat, "path", &q)) return;
    json_decref(q.body);
    reply_entry(r, &q, q.path);
}

static int by_name(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
    return strcmp(x ? x : "", y ? y : "");
}

/* The entries of path, then (depth-first) those below each directory, each directory's
 * in lexical order, as envd's walk gives them. */
static int list_into(struct fsreq *q, const char *path, int depth, int max_depth,
                     struct names *names, json_t *out, struct err *err)
{
    json_t *l = sbx_fs_list(&q->fs, path, SBX_FS_LIST_MAX, err);
    if (!l) return -1;
    json_t *entries = json_object_get(l, "entries");
    size_t n = json_array_size(entries), i;
    json_t **sorted = xcalloc(n ? n : 1, sizeof *sorted);
    for (i = 0; i < n; i++) sorted[i] = json_array_get(entries, i);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (i = 0; i < n; i++) {
        json_t *st = sorted[i];
        if (json_array_size(out) >= SBX_FS_LIST_MAX) break;
        const char *name = json_string_value(json_object_get(st, "name"));
        char child[SBX_PATH_MAX + 1];
        int w = snprintf(child, sizeof child, "%s/%s", path[1] ? path : "", name);
        if (w < 0 || (size_t)w >= sizeof child) continue;
        json_array_append_new(out, entry_json(&q->fs, st, child, names));
        const char *type = json_string_value(json_object_get(st, "type"));
        if (depth < max_depth && type && !strcmp(type, "directory")) {
            struct err ignored = ERR_INIT; /* a subdirectory that cannot be read is skipped */
            list_into(q, child, depth + 1, max_depth, names, out, &ignored);
        }
    }
    free(sorted);
    json_decref(l);
    return 0;
}

static void h_list_dir(struct http_req *r, void *arg)
{
    struct fsreq q;
    if (!fs_begin(arg, r, h_list_dir, "path", &q)) return;
    struct err err = ERR_INIT;
    int64_t depth = 1;
    int rc = sbx_json_int(q.body, "depth", 0, DEPTH_MAX, &depth, &err);
    json_decref(q.body);
    if (depth == 0) depth = 1;
    json_t *out = json_array();
    struct names n;
    names_load(&n, q.s);
    if (rc == 0) rc = list_into(&q, q.path, 1, (int)depth, &n, out, &err);
    names_free(&n);
    if (rc < 0) {
        json_decref(out);
        e2b_not_a_dir(&q.fs, q.path, &err);
        cx_error_err(r, &err);
        return;
    }
    cx_reply(r, json_pack("{s:o}", "entries", out));
}

static void h_make_dir(struct http_req *r, void *arg)
{
    struct fsreq q;
    if (!fs_begin(arg, r, h_make_dir, "path", &q)) return;
    json_decref(q.body);
    struct err err = ERR_INIT;
    json_t *st = sbx_fs_stat(&q.fs, q.path, &err);
    if (st) {
        json_decref(st);
        cx_error(r, "already_exists", "%s already exists", q.path);
        return;
    }
    err_clear(&err);
    if (e2b_mkdirs(&q.fs, q.path, &q.u, &err) < 0) {
        cx_error_err(r, &err);
        return;
    }
    reply_entry(r, &q, q.path);
}

static void h_move(struct http_req *r, void *arg)
{
    struct fsreq q;
    if (!fs_begin(arg, r, h_move, "source", &q)) return;
    struct err err = ERR_INIT;
    char to[SBX_PATH_MAX + 1];
    json_t *d = json_object_get(q.body, "destination");
    int rc = e2b_path(json_is_string(d) ? json_string_value(d) : NULL, &q.u, "destination", to,
                      &err);
    json_decref(q.body);
    if (rc == 0) rc = sbx_fs_rename(&q.fs, q.path, to, true, &err);
    if (rc < 0) {
        cx_error_err(r, &err);
        return;
    }
    reply_entry(r, &q, to);
}

static void h_remove(struct http_req *r, void *arg)
{
    struct fsreq q;
    if (!fs_begin(arg, r, h_remove, "path", &q)) return;
    json_decref(q.body);
    struct err err = ERR_INIT;
    /* envd removes recursively, and a missing path is no error */
    if (sbx_fs_remove(&q.fs, q.path, true, &err) < 0 && err.status != 404) {
        cx_error_err(r, &err);
        return;
    }
    cx_reply(r, NULL);
}

static void h_unimplemented(struct http_req *r, void *arg)
{
    cx_error(r, "unimplemented", "the polling watcher RPCs are not served; use WatchDir");
}

void e2b_fs_routes(struct e2b *e)
{
    struct http_server *h = e->http;
    http_route(h, "POST", "/filesystem.Filesystem/Stat", h_stat, e);
    http_route(h, "POST", "/filesystem.Filesystem/ListDir", h_list_dir, e);
    http_route(h, "POST", "/filesystem.Filesystem/MakeDir", h_make_dir, e);
    http_route(h, "POST", "/filesystem.Filesystem/Move", h_move, e);
    http_route(h, "POST", "/filesystem.Filesystem/Remove", h_remove, e);
    http_route(h, "POST", "/filesystem.Filesystem/CreateWatcher", h_unimplemented, e);
    http_route(h, "POST", "/filesystem.Filesystem/GetWatcherEvents", h_unimplemented, e);
    http_route(h, "POST", "/filesystem.Filesystem/RemoveWatcher", h_unimplemented, e);
    e2b_watch_routes(e);
}
