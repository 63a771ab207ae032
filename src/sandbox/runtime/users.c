/*
 * users.c - accounts inside a sandbox (see users.h).
 *
 * Creation order makes a half-done account harmless: home first (removed again if
 * anything after it fails), then /etc/group, then /etc/passwd, each replaced
 * atomically. The account exists only once its passwd line does.
 */
#include "sandbox/runtime/users.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"

/* Split one line into at most max ':'-separated fields (in place). Returns count. */
static int fields(char *line, char **f, int max)
{
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == ':') {
            *p = '\0';
            f[n++] = p + 1;
        }
    return n;
}

static int parse_id(const char *s, uint32_t *out)
{
    if (!*s) return -1;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v > 0xfffffffful) return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Call fn on each line of text (copied, NUL-terminated); stop when fn returns nonzero. */
static int each_line(const char *text, size_t n, int (*fn)(char *line, void *arg), void *arg)
{
    const char *p = text, *end = text + n;
    char line[4096];
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = '\0';
            int r = fn(line, arg);
            if (r) return r;
        }
        p += len + 1;
    }
    return 0;
}

struct lookup {
    const char *name;
    struct sbx_user *u;
};

static int lookup_line(char *line, void *arg)
{
    struct lookup *l = arg;
    char *f[7];
    if (fields(line, f, 7) != 7 || strcmp(f[0], l->name) != 0) return 0;
    struct sbx_user *u = l->u;
    if (parse_id(f[2], &u->uid) < 0 || parse_id(f[3], &u->gid) < 0) return 0;
    if (u->uid >= 65536 || u->gid >= 65536) return 0; /* not mappable inside */
    snprintf(u->name, sizeof u->name, "%s", f[0]);
    snprintf(u->home, sizeof u->home, "%s", f[5][0] == '/' ? f[5] : "/");
    snprintf(u->shell, sizeof u->shell, "%s", f[6]);
    return 1;
}

int sbx_passwd_lookup(const char *text, size_t n, const char *name, struct sbx_user *u)
{
    memset(u, 0, sizeof *u);
    struct lookup l = {name, u};
    return each_line(text, n, lookup_line, &l) == 1 ? 0 : -ENOENT;
}

static int group_line(char *line, void *arg)
{
    struct sbx_user *u = arg;
    char *f[4];
    uint32_t gid;
    if (fields(line, f, 4) != 4 || parse_id(f[2], &gid) < 0 || gid >= 65536) return 0;
    bool member = false;
    for (char *m = f[3]; *m && !member;) {
        size_t len = strcspn(m, ",");
        member = len == strlen(u->name) && strncmp(m, u->name, len) == 0;
        m += len + (m[len] == ',');
    }
    if (!member) return 0;
    for (uint32_t i = 0; i < u->ngroups; i++)
        if (u->groups[i] == gid) return 0;
    if (u->ngroups < SBX_MAX_GROUPS) u->groups[u->ngroups++] = gid;
    return 0;
}

void sbx_group_fill(const char *text, size_t n, struct sbx_user *u)
{
    u->ngroups = 0;
    u->groups[u->ngroups++] = u->gid;
    each_line(text, n, group_line, u);
}

struct has {
    const char *name;
    uint32_t id;
};

static int has_name_line(char *line, void *arg)
{
    char *f[3];
    return fields(line, f, 3) >= 1 && strcmp(f[0], ((struct has *)arg)->name) == 0;
}

static int has_id_line(char *line, void *arg)
{
    char *f[4];
    uint32_t id;
    return fields(line, f, 4) >= 3 && parse_id(f[2], &id) == 0 && id == ((struct has *)arg)->id;
}

int sbx_etc_has_name(const char *text, size_t n, const char *name)
{
    struct has h = {name, 0};
    return each_line(text, n, has_name_line, &h);
}

int sbx_etc_has_id(const char *text, size_t n, uint32_t id)
{
    struct has h = {NULL, id};
    return each_line(text, n, has_id_line, &h);
}

int64_t sbx_next_free_id(const char *passwd, size_t pn, const char *group, size_t gn)
{
    for (uint32_t id = SBX_USER_UID_MIN; id <= SBX_USER_UID_MAX; id++)
        if (!sbx_etc_has_id(passwd, pn, id) && !sbx_etc_has_id(group, gn, id)) return id;
    return -ENOSPC;
}

int sbx_user_resolve(const struct sbx_fs *fs, const char *name, struct sbx_user *u,
                     struct err *err)
{
    if (!sbx_user_name_valid(name))
        return err_invalid(err, "user",
                           "user must match [a-z_][a-z0-9_-]* and be at most %d characters",
                           SBX_USER_NAME_MAX);
    struct buf pw, gr;
    buf_init(&pw, 0);
    buf_init(&gr, 0);
    struct err ignored = ERR_INIT;
    int r = sbx_fs_read_all(fs, "/etc/passwd", SBX_ETC_FILE_MAX, &pw, &ignored);
    if (r < 0 || sbx_passwd_lookup(pw.data ? pw.data : "", pw.len, name, u) < 0) {
        if (strcmp(name, "root") == 0) { /* root works even with a broken passwd */
            memset(u, 0, sizeof *u);
            snprintf(u->name, sizeof u->name, "root");
            snprintf(u->home, sizeof u->home, "/root");
            snprintf(u->shell, sizeof u->shell, "/bin/sh");
            r = 0;
        } else {
            buf_fini(&pw);
            return err_set(err, 404, "user_not_found", "user",
                           "no user \"%s\" in this sandbox; create it first", name);
        }
    }
    r = sbx_fs_read_all(fs, "/etc/group", SBX_ETC_FILE_MAX, &gr, &ignored);
    sbx_group_fill(r == 0 && gr.data ? gr.data : "", r == 0 ? gr.len : 0, u);
    buf_fini(&pw);
    buf_fini(&gr);
    return 0;
}

/* Copy the regular files at the top of /etc/skel into home (best effort). */
static void copy_skel(const struct sbx_fs *fs, const char *home, const struct sbx_owner *o)
{
    struct err e = ERR_INIT;
    json_t *l = sbx_fs_list(fs, "/etc/skel", 64, &e);
    if (!l) return;
    size_t i;
    json_t *ent;
    json_array_foreach(json_object_get(l, "entries"), i, ent) {
        const char *type = json_string_value(json_object_get(ent, "type"));
        const char *name = json_string_value(json_object_get(ent, "name"));
        if (!type || !name || strcmp(type, "file") != 0) continue;
        char src[600], dst[600];
        snprintf(src, sizeof src, "/etc/skel/%s", name);
        snprintf(dst, sizeof dst, "%s/%s", home, name);
        struct buf b;
        buf_init(&b, 0);
        if (sbx_fs_read_all(fs, src, 256 * 1024, &b, &e) == 0)
            sbx_fs_write(fs, dst, 0, b.data ? b.data : "", b.len, true, 0644, o, NULL, &e);
        buf_fini(&b);
    }
    json_decref(l);
}

int sbx_user_create(const struct sbx_fs *fs, const char *name, struct sbx_user *u,
                    struct err *err)
{
    if (!sbx_user_name_valid(name))
        return err_invalid(err, "name",
                           "user name must match [a-z_][a-z0-9_-]* and be at most %d characters",
                           SBX_USER_NAME_MAX);
    struct buf pw, gr;
    buf_init(&pw, 0);
    buf_init(&gr, 0);
    int ret = -1;
    char home[300];
    snprintf(home, sizeof home, "/home/%s", name);
    if (sbx_fs_read_all(fs, "/etc/passwd", SBX_ETC_FILE_MAX, &pw, err) < 0 ||
        sbx_fs_read_all(fs, "/etc/group", SBX_ETC_FILE_MAX, &gr, err) < 0)
        goto out;
    if (!pw.data) buf_append(&pw, "", 0);
    if (!gr.data) buf_append(&gr, "", 0);
    if (sbx_etc_has_name(pw.data, pw.len, name)) {
        err_set(err, 409, "user_exists", "name", "user \"%s\" already exists; use it as is",
                name);
        goto out;
    }
    if (sbx_etc_has_name(gr.data, gr.len, name)) {
        err_set(err, 409, "group_exists", "name", "a group \"%s\" already exists", name);
        goto out;
    }
    struct err probe = ERR_INIT;
    json_t *st = sbx_fs_stat(fs, home, &probe);
    if (st) {
        json_decref(st);
        err_set(err, 409, "home_exists", "name", "%s already exists (as a %s)", home,
                "path");
        goto out;
    }
    if (probe.status != 404) {
        *err = probe;
        goto out;
    }
    int64_t id = sbx_next_free_id(pw.data, pw.len, gr.data, gr.len);
    if (id < 0) {
        err_set(err, 409, "no_free_uid", "name", "no free user id left in %d-%d",
                SBX_USER_UID_MIN, SBX_USER_UID_MAX);
        goto out;
    }
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    u->uid = u->gid = (uint32_t)id;
    snprintf(u->home, sizeof u->home, "/home/%s", name);
    snprintf(u->shell, sizeof u->shell, "/bin/bash");
    /* the home belongs to the user and the sandbox default group (004); files in it, like
     * uploads, to the user and its own primary group */
    struct sbx_owner root = {0, 0}, own = {u->uid, u->gid}, home_owner = {u->uid, SBX_DEFAULT_GID};
    if (sbx_fs_mkdir(fs, "/home", true, 0755, &root, err) < 0) goto out;
    if (sbx_fs_mkdir(fs, home, false, 0770, &home_owner, err) < 0) goto out;
    copy_skel(fs, home, &own);
    /* group, then passwd: the account exists once its passwd line does */
    if (gr.len && gr.data[gr.len - 1] != '\n') buf_append(&gr, "\n", 1);
    buf_printf(&gr, "%s:x:%u:\n", name, u->gid);
    if (pw.len && pw.data[pw.len - 1] != '\n') buf_append(&pw, "\n", 1);
    buf_printf(&pw, "%s:x:%u:%u::%s:%s\n", name, u->uid, u->gid, home, u->shell);
    if (sbx_fs_replace(fs, "/etc/group", gr.data, gr.len, 0644, &root, err) < 0 ||
        sbx_fs_replace(fs, "/etc/passwd", pw.data, pw.len, 0644, &root, err) < 0) {
        struct err ignored = ERR_INIT;
        sbx_fs_remove(fs, home, true, &ignored);
        goto out;
    }
    u->ngroups = 1;
    u->groups[0] = u->gid;
    ret = 0;
out:
    buf_fini(&pw);
    buf_fini(&gr);
    return ret;
}
