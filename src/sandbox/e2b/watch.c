/*
 * watch.c - envd's WatchDir stream, new in sandboxd: inotify on a directory of the
 * sandbox (and, when recursive, on every directory beneath it as they come), its
 * events sent as FilesystemEvent {name relative to the watched directory, type, and with
 * includeEntry (envd 0.6.3) the entry's EntryInfo, stat'ed as the watching user when the
 * event comes, absent when the name is gone by then (a remove, a rename away)}.
 *
 * The daemon is host root, so the directories are reached the files layer's way: the
 * watched one resolved inside the sandbox's root (files.h), each subdirectory opened
 * from its parent's descriptor, one component, O_NOFOLLOW, on an allowed file system.
 * allowNetworkMounts (envd 0.6.4) is accepted and changes nothing: envd refuses NFS,
 * CIFS, SMB and FUSE unless it is set, and the files layer never touches those at all
 * (a FUSE server inside could stall the daemon), so such a directory is refused either
 * way (permission_denied, as for /proc).
 * inotify watches the kept O_PATH descriptor (/proc/self/fd/N), never a path a tenant
 * could swap. A watch ends when its client goes, or when the session ends (the
 * observer's on_session_end), before the trees are unmounted.
 */
#include "sandbox/e2b/e2b_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/xalloc.h"

#define WATCH_DIRS_MAX 1024
#define WATCH_DEPTH_MAX 16
#define WATCH_KEEPALIVE_S 50
#define MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | \
              IN_DELETE_SELF | IN_ONLYDIR)

struct wdir {
    int wd, fd, depth;
    char *rel; /* "" for the watched directory, else "sub/dir" */
};

struct e2b_watch {
    struct e2b_watch *prev, *next;
    struct e2b *e;
    struct http_req *req;
    char sbx_id[40];
    bool recursive, include_entry;
    struct sbx_user user;        /* the watching user: entries are stat'ed as it */
    char path[SBX_PATH_MAX + 1]; /* the watched directory */
    int ifd;
    struct event *ev, *keepalive;
    struct wdir *dirs;
    int ndirs;
    struct buf pending; /* envelopes not yet sent (the client's pipe was full) */
};

static struct e2b_watch *watches; /* every open WatchDir stream of the daemon */

static void watch_free(struct e2b_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        watches = w->next;
    if (w->next) w->next->prev = w->prev;
    if (w->ev) event_free(w->ev);
    if (w->keepalive) event_free(w->keepalive);
    for (int i = 0; i < w->ndirs; i++) {
        close(w->dirs[i].fd);
        free(w->dirs[i].rel);
    }
    free(w->dirs);
    if (w->ifd >= 0) close(w->ifd);
    buf_fini(&w->pending);
    free(w);
}

static void watch_closed(struct http_req *r, void *arg)
{
    watch_free(arg);
}

/* Watch directory fd (taken: kept or closed) at rel; its subdirectories too when
 * recursive. */
static void add_dir(struct e2b_watch *w, int fd, const char *rel, int depth)
{
    if (w->ndirs >= WATCH_DIRS_MAX || !sbx_fs_fd_allowed(fd)) {
        close(fd);
        return;
    }
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int wd = inotify_add_watch(w->ifd, p, MASK);
    if (wd < 0) {
        close(fd);
        return;
    }
    w->dirs = xrealloc(w->dirs, (size_t)(w->ndirs + 1) * sizeof *w->dirs);
    w->dirs[w->ndirs++] = (struct wdir){wd, fd, depth, xstrdup(rel)};
    if (!w->recursive || depth >= WATCH_DEPTH_MAX) return;
    int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
    if (!d) {
        if (rfd >= 0) close(rfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) continue;
        int cfd = openat(fd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd < 0) continue;
        char *crel = *rel ? xasprintf("%s/%s", rel, de->d_name) : xstrdup(de->d_name);
        add_dir(w, cfd, crel, depth + 1);
        free(crel);
    }
    closedir(d);
}

static struct wdir *dir_of(struct e2b_watch *w, int wd)
{
    for (int i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd) return &w->dirs[i];
    return NULL;
}

static void watch_drained(struct http_req *r, void *arg);

/* Send what is pending; false while the client's pipe is full. */
static bool flush(struct e2b_watch *w)
{
    if (!w->pending.len) return true;
    int rc = http_stream_write(w->req, w->pending.data, w->pending.len);
    if (rc == -EAGAIN) {
        http_sse_on_drain(w->req, watch_drained, w);
        event_del(w->ev); /* stop reading inotify until the client catches up */
        return false;
    }
    w->pending.len = 0;
    return true;
}

/* Queue one message (an envelope) after what is pending. */
static void queue(struct e2b_watch *w, json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) return;
    size_t n = strlen(s);
    unsigned char h[5] = {0, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    buf_append(&w->pending, h, 5);
    buf_append(&w->pending, s, n);
    free(s);
}

static void watch_drained(struct http_req *r, void *arg)
{
    struct e2b_watch *w = arg;
    if (flush(w)) event_add(w->ev, NULL);
}

static const char *type_of(uint32_t m)
{
    if (m & (IN_CREATE | IN_MOVED_TO)) return "EVENT_TYPE_CREATE";
    if (m & IN_MODIFY) return "EVENT_TYPE_WRITE";
    if (m & IN_DELETE) return "EVENT_TYPE_REMOVE";
    if (m & IN_MOVED_FROM) return "EVENT_TYPE_RENAME";
    if (m & IN_ATTRIB) return "EVENT_TYPE_CHMOD";
    return NULL;
}

/* The EntryInfo of name (relative to the watched directory) now, or NULL when it is
 * gone or the session is. */
static json_t *event_entry(struct e2b_watch *w, const char *name)
{
    struct sbx *s = sbx_find(w->e->d, w->sbx_id);
    if (!s || !s->sess) return NULL;
    char full[SBX_PATH_MAX + 1];
    int n = snprintf(full, sizeof full, "%s/%s", w->path[1] ? w->path : "", name);
    if (n < 0 || (size_t)n >= sizeof full) return NULL;
    struct sbx_fs fs = e2b_fs(s, &w->user);
    struct err ignored = ERR_INIT;
    return e2b_stat_entry(s, &fs, full, &ignored);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    struct e2b_watch *w = arg;
    char b[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(w->ifd, b, sizeof b)) > 0) {
        for (char *p = b; p < b + n;) {
            struct inotify_event *ie = (struct inotify_event *)p;
            p += sizeof *ie + ie->len;
            struct wdir *d = dir_of(w, ie->wd);
            if (!d) continue;
            if (ie->mask & (IN_IGNORED | IN_DELETE_SELF)) continue;
            const char *t = type_of(ie->mask);
            if (!t || !ie->len) continue;
            char *name = *d->rel ? xasprintf("%s/%s", d->rel, ie->name) : xstrdup(ie->name);
            json_t *ev = json_pack("{s:s, s:s}", "name", name, "type", t);
            if (w->include_entry && !(ie->mask & (IN_DELETE | IN_MOVED_FROM))) {
                json_t *entry = event_entry(w, name);
                if (entry) json_object_set_new(ev, "entry", entry);
            }
            queue(w, json_pack("{s:o}", "filesystem", ev));
            if (w->recursive && (ie->mask & (IN_CREATE | IN_MOVED_TO)) && (ie->mask & IN_ISDIR) &&
                d->depth < WATCH_DEPTH_MAX) {
                int cfd = openat(d->fd, ie->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cfd >= 0) add_dir(w, cfd, name, d->depth + 1); /* may move w->dirs */
            }
            free(name);
        }
    }
    flush(w);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct e2b_watch *w = arg;
    if (w->pending.len) return;
    queue(w, json_pack("{s:{}}", "keepalive"));
    flush(w);
}

static void stream_error(struct http_req *r, const char *code, const char *msg)
{
    cx_stream_start(r);
    cx_stream_end(r, code, msg);
}

static void h_watch(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = e2b_envd_sandbox(e, r, h_watch);
    if (!s) return;
    json_t *body = cx_stream_body(r);
    if (!body) return;
    struct err err = ERR_INIT;
    struct sbx_user u;
    char path[SBX_PATH_MAX + 1];
    json_t *p = json_object_get(body, "path");
    bool recursive = json_is_true(json_object_get(body, "recursive"));
    bool include_entry = json_is_true(json_object_get(body, "includeEntry"));
    int rc = e2b_user(s, r, NULL, &u, &err);
    if (rc == 0) rc = e2b_path(json_is_string(p) ? json_string_value(p) : NULL, &u, "path", path, &err);
    json_decref(body);
    struct sbx_fs fs = rc == 0 ? e2b_fs(s, &u) : (struct sbx_fs){0};
    int dfd = rc == 0 ? sbx_fs_open_dir(&fs, path, &err) : -1;
    if (dfd < 0) {
        if (rc == 0) e2b_not_a_dir(&fs, path, &err);
        stream_error(r, cx_code(&err), err.msg);
        return;
    }
    struct e2b_watch *w = xcalloc(1, sizeof *w);
    w->e = e;
    w->req = r;
    w->recursive = recursive;
    w->include_entry = include_entry;
    w->user = u;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->sbx_id, sizeof w->sbx_id, "%s", s->id);
    buf_init(&w->pending, 0);
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w->next = watches;
    if (watches) watches->prev = w;
    watches = w;
    if (w->ifd < 0) {
        close(dfd);
        watch_free(w);
        stream_error(r, "resource_exhausted", "cannot make an inotify instance");
        return;
    }
    add_dir(w, dfd, "", 0);
    if (!w->ndirs) {
        watch_free(w);
        stream_error(r, "internal", "cannot watch that directory");
        return;
    }
    http_req_on_close(r, watch_closed, w);
    cx_stream_start(r);
    queue(w, json_pack("{s:{}}", "start"));
    w->ev = event_new(e->d->base, w->ifd, EV_READ | EV_PERSIST, on_inotify, w);
    event_add(w->ev, NULL);
    w->keepalive = event_new(e->d->base, -1, EV_PERSIST, on_keepalive, w);
    struct timeval tv = {WATCH_KEEPALIVE_S, 0};
    event_add(w->keepalive, &tv);
    flush(w);
}

void e2b_watch_session_end(struct e2b *e, struct sbx *s)
{
    for (struct e2b_watch *w = watches, *next; w; w = next) {
        next = w->next;
        if (w->e != e || strcmp(w->sbx_id, s->id) != 0) continue;
        struct http_req *r = w->req;
        http_req_on_close(r, NULL, NULL);
        /* the end of stream may not fit a full pipe: then the stream just ends */
        if (flush(w) && cx_stream_end(r, NULL, NULL) == 0) {
            watch_free(w);
            continue;
        }
        watch_free(w);
        http_sse_end(r);
    }
}

void e2b_watch_shutdown(struct e2b *e)
{
    for (struct e2b_watch *w = watches, *next; w; w = next) {
        next = w->next;
        if (w->e == e) watch_free(w);
    }
}

void e2b_watch_routes(struct e2b *e)
{
    http_route(e->http, "POST", "/filesystem.Filesystem/WatchDir", h_watch, e);
}
