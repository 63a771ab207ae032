/*
 * build.c - image build jobs (build.h): the recipe's steps one after another, RUN in a
 * sandbox of this daemon, COPY from the context folder, and the result recorded as an
 * image (sbx_images_commit). Steps continue from a zero-delay event, never from inside a
 * command's notification.
 */
#include "sandbox/storage/build.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
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
#include "proxy/worker.h"
#include "sandbox/core/observe.h"
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/store.h"
#include "sandbox/core/validate.h"
#include "sandbox/storage/buildfs.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/layers.h"
#include "sandbox/storage/oci.h"
#include "sandbox/storage/recipe.h"

#define BUILD_KEEP 32       /* finished jobs kept */
#define BUILD_RUNNING_MAX 4 /* builds running at once */
#define BUILD_LOG_KEEP 500  /* lines of log kept in the job */
#define BUILD_LINE_MAX 4096 /* a longer output line is cut */
#define BUILD_STREAMS_MAX 64
#define BUILD_STEP_TIMEOUT_MS (60 * 60 * 1000)
#define BUILD_KEEP_FREE (32ll << 20)

enum wkind { W_COPY, W_DIFF, W_IMAGE };

struct stream {
    struct http_req *req;
    struct bjob *j;
};

struct bjob {
    struct bjob *next;
    struct sbx_builds *bs;
    struct sbxd *d;
    char id[40];
    const char *status; /* "building", "done", "failed" */
    struct sbx_recipe rec;
    char ref[800];
    char context[1024];
    int ctx_fd;
    char from[800];
    json_t *netpol; /* network_policy of the RUN sandboxes, or NULL (the default) */
    /* state: layers so far (bottom first), config, the cache key of the state */
    char (*layers)[SBX_OCI_DIGEST_LEN + 1];
    size_t nlayers;
    json_t *config; /* {"env":[...],"workdir":..,"user":..} */
    char chain[65];
    size_t cur;    /* the step under way */
    char key[65];  /* its cache key */
    json_t *steps; /* the job's view of every step */
    json_t *log;   /* last lines */
    char line[2][BUILD_LINE_MAX + 1];
    size_t linelen[2];
    uint64_t off[2];
    /* a RUN's sandbox */
    char sbx_id[40];
    struct sbx_cmd *cmd;
    bool prep;     /* the command under way is the WORKDIR mkdir */
    bool want_cmd; /* the mkdir is done: the step's own command next */
    char tmp_img[65];
    bool tmp_created;
    int exit_code;
    struct err err; /* the failure */
    bool failed, finished;
    struct event *next_ev;
    json_t *image;
    int64_t created_at, finished_at;
    struct stream *streams[BUILD_STREAMS_MAX];
    int nstreams;
    /* worker */
    enum wkind wk;
    bool final;
    char tar[PATH_MAX];
    char upper[PATH_MAX];
    uint32_t base;
    char copy_dst[SBX_PATH_MAX + 1];
    int copy_dir;
    char layer[SBX_OCI_DIGEST_LEN + 1]; /* result of W_COPY / W_DIFF ("" none) */
    bool layer_existed;
    int64_t entries;
    int64_t layer_size; /* bytes of that layer's tar */
    int64_t size_total; /* the base's size_bytes plus each layer tar of the steps so far */
    uint64_t max_bytes;
    struct sbx_image_rec irec;
    int wrc;
    struct err werr;
    bool busy; /* a worker job is out */
};

struct sbx_builds {
    struct sbx_observer obs;
    struct sbxd *d;
    struct bjob *jobs; /* newest first */
    struct proxy_worker *w;
    bool closed;
};

static sqlite3 *db(struct sbxd *d)
{
    return sbx_store_db(d->store);
}

/* ------------------------------------------------------------------ hashing */

static void hex_of(const unsigned char *md, char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void sha256_buf(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int ml = 0;
    EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL);
    hex_of(md, out);
}

static int sha256_fd(int fd, char out[65])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    char buf[65536];
    ssize_t n;
    if (lseek(fd, 0, SEEK_SET) < 0)
        n = -1;
    else
        while ((n = read(fd, buf, sizeof buf)) > 0)
            EVP_DigestUpdate(c, buf, (size_t)n);
    unsigned char md[32];
    unsigned int ml = 0;
    EVP_DigestFinal_ex(c, md, &ml);
    EVP_MD_CTX_free(c);
    if (n < 0) return -errno;
    hex_of(md, out);
    return lseek(fd, 0, SEEK_SET) < 0 ? -errno : 0;
}

/* The cache key of a step: sha256(parent key "\n" instruction [extra]). */
static void step_key(const char *parent, const char *text, const char *extra, char out[65])
{
    char *s = xasprintf("%s\n%s%s%s", parent, text, extra ? "\n" : "", extra ? extra : "");
    sha256_buf(s, strlen(s), out);
    free(s);
}

/* ------------------------------------------------------------------ the cache table */

static void cache_open(struct sbxd *d)
{
    sqlite3_exec(db(d),
                 "CREATE TABLE IF NOT EXISTS build_cache(key TEXT PRIMARY KEY,"
                 " layer TEXT NOT NULL, created_at INTEGER NOT NULL, size INTEGER) STRICT",
                 NULL, NULL, NULL);
    /* a table from before sizes: add the column (an error says it exists) */
    sqlite3_exec(db(d), "ALTER TABLE build_cache ADD COLUMN size INTEGER", NULL, NULL, NULL);
}

/* The layer ("" for a step that changed nothing) cached under key: true when found and
 * its layer is still in the store. */
static bool cache_get(struct sbxd *d, const char *key, char out[SBX_OCI_DIGEST_LEN + 1],
                      int64_t *size)
{
    sqlite3_stmt *q;
    bool found = false;
    if (sqlite3_prepare_v2(db(d), "SELECT layer, size FROM build_cache WHERE key = ?1", -1, &q,
                           NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *l = (const char *)sqlite3_column_text(q, 0);
        if (l && (!l[0] || (sbx_oci_digest_ok(l) && sbx_layer_have(&d->layers, l)))) {
            snprintf(out, SBX_OCI_DIGEST_LEN + 1, "%s", l);
            *size = sqlite3_column_int64(q, 1);
            found = true;
        }
    }
    sqlite3_finalize(q);
    return found;
}

static void cache_put(struct sbxd *d, const char *key, const char *layer, int64_t size)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db(d),
                           "INSERT OR REPLACE INTO build_cache(key, layer, created_at, size)"
                           " VALUES(?1, ?2, ?3, ?4)",
                           -1, &q, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, layer, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, clock_now_ms());
    sqlite3_bind_int64(q, 4, size);
    sqlite3_step(q);
    sqlite3_finalize(q);
}

/* ------------------------------------------------------------------ job object, log, streams */

static json_t *job_json(struct bjob *j, bool with_log)
{
    json_t *o = json_pack("{s:s, s:s, s:s?, s:s, s:O, s:I, s:I}", "id", j->id, "type", "build",
                          "ref", j->ref[0] ? j->ref : NULL, "status", j->status, "steps", j->steps,
                          "step", (json_int_t)j->cur + (j->finished ? 0 : 1), "created_at",
                          (json_int_t)j->created_at);
    json_object_set_new(o, "finished_at", j->finished ? json_integer(j->finished_at) : json_null());
    if (with_log) json_object_set(o, "log", j->log);
    json_object_set(o, "image", j->image ? j->image : json_null());
    if (j->failed) {
        json_t *e = json_pack("{s:s, s:s, s:i}", "code", j->err.code, "message", j->err.msg,
                              "status", j->err.status);
        if (j->err.field[0]) json_object_set_new(e, "field", json_string(j->err.field));
        if (j->exit_code) json_object_set_new(e, "exit_code", json_integer(j->exit_code));
        json_object_set_new(o, "error", e);
    } else {
        json_object_set_new(o, "error", json_null());
    }
    return o;
}

static void send_all(struct bjob *j, const char *event, json_t *data)
{
    char *s = json_dumps(data, JSON_COMPACT);
    for (int i = 0; i < j->nstreams; i++)
        http_sse_send(j->streams[i]->req, j->id, event, s);
    free(s);
}

static void progress(struct bjob *j)
{
    if (!j->nstreams) return;
    json_t *o = job_json(j, false);
    send_all(j, "progress", o);
    json_decref(o);
}

static void log_line(struct bjob *j, const char *line)
{
    json_array_append_new(j->log, json_string(line));
    while (json_array_size(j->log) > BUILD_LOG_KEEP)
        json_array_remove(j->log, 0);
    if (j->nstreams) {
        json_t *o = json_pack("{s:s, s:I}", "line", line, "step", (json_int_t)j->cur + 1);
        send_all(j, "log", o);
        json_decref(o);
    }
}

static void log_fmt(struct bjob *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_fmt(struct bjob *j, const char *fmt, ...)
{
    char buf[BUILD_LINE_MAX + 200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_line(j, buf);
}

static void stream_closed(struct http_req *r, void *arg)
{
    (void)r;
    struct stream *st = arg;
    struct bjob *j = st->j;
    for (int i = 0; i < j->nstreams; i++)
        if (j->streams[i] == st) {
            j->streams[i] = j->streams[--j->nstreams];
            break;
        }
    free(st);
}

static void streams_end(struct bjob *j)
{
    json_t *o = job_json(j, false);
    send_all(j, j->failed ? "error" : "done", o);
    json_decref(o);
    while (j->nstreams) {
        struct stream *st = j->streams[--j->nstreams];
        http_req_on_close(st->req, NULL, NULL);
        http_sse_end(st->req);
        free(st);
    }
}

static void step_set(struct bjob *j, const char *status, const char *layer, bool cached)
{
    json_t *s = json_array_get(j->steps, j->cur);
    json_object_set_new(s, "status", json_string(status));
    if (layer) json_object_set_new(s, "layer", layer[0] ? json_string(layer) : json_null());
    if (cached) json_object_set_new(s, "cached", json_true());
}

/* ------------------------------------------------------------------ ending */

static void tmp_forget(struct bjob *j);
static void kick(struct bjob *j);

static void job_finish(struct bjob *j)
{
    if (j->finished) return;
    j->finished = true;
    j->finished_at = clock_now_ms();
    j->status = j->failed ? "failed" : "done";
    if (j->tar[0]) unlink(j->tar);
    if (j->ctx_fd >= 0) close(j->ctx_fd);
    j->ctx_fd = -1;
    sbx_images_busy(j->d, -1);
    if (j->failed) {
        if (j->cur < json_array_size(j->steps)) step_set(j, "failed", NULL, false);
        log_fmt(j, "build failed: %s", j->err.msg);
        log_warn("image build failed", "id=%s error=\"%s\"", j->id, j->err.msg);
    } else {
        log_info("image built", "id=%s ref=%s steps=%zu", j->id, j->ref, j->rec.n);
    }
    streams_end(j);
    /* forget the oldest finished jobs beyond BUILD_KEEP */
    int n = 0;
    for (struct bjob **p = &j->bs->jobs; *p;) {
        struct bjob *x = *p;
        if (x->finished && ++n > BUILD_KEEP && !x->busy) {
            *p = x->next;
            if (x->next_ev) event_free(x->next_ev);
            sbx_recipe_fini(&x->rec);
            free(x->layers);
            json_decref(x->config);
            json_decref(x->netpol);
            json_decref(x->steps);
            json_decref(x->log);
            json_decref(x->image);
            sbx_image_rec_fini(&x->irec);
            free(x);
            continue;
        }
        p = &x->next;
    }
}

static void fail(struct bjob *j, const struct err *e)
{
    if (!j->failed) {
        j->failed = true;
        j->err = *e;
    }
}

/* End the RUN's sandbox (if any), then finish the job failed. */
static void sandbox_gone_then(struct bjob *j);

static void fail_now(struct bjob *j, const struct err *e)
{
    fail(j, e);
    kick(j);
}

/* ------------------------------------------------------------------ worker */

static void work(void *arg)
{
    struct bjob *j = arg;
    struct err *err = &j->werr;
    *err = (struct err)ERR_INIT;
    j->wrc = 0;
    if (j->wk == W_IMAGE) {
        /* compose the manifest and config; the digest of the manifest is the image's */
        json_t *rootfs = json_array(), *mlayers = json_array();
        const char **dirs = xcalloc(j->nlayers + 1, sizeof *dirs);
        char(*paths)[PATH_MAX] = xcalloc(j->nlayers + 1, sizeof *paths);
        for (size_t i = 0; i < j->nlayers; i++) {
            json_array_append_new(rootfs, json_string(j->layers[i]));
            json_array_append_new(mlayers,
                                  json_pack("{s:s, s:s, s:I}", "mediaType", SBX_MT_OCI_LAYER,
                                            "digest", j->layers[i], "size", (json_int_t)0));
            sbx_layer_path(&j->d->layers, j->layers[i], paths[i], sizeof paths[i]);
            dirs[j->nlayers - 1 - i] = paths[i]; /* top first */
        }
        json_t *cfg = json_pack(
            "{s:s, s:s, s:{s:O?, s:O?, s:O?}, s:{s:s, s:o}}", "architecture", "amd64", "os",
            "linux", "config", "Env", json_object_get(j->config, "env"), "WorkingDir",
            json_object_get(j->config, "workdir"), "User", json_object_get(j->config, "user"),
            "rootfs", "type", "layers", "diff_ids", rootfs);
        char *cs = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
        char ch[65];
        sha256_buf(cs, strlen(cs), ch);
        json_t *man =
            json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2, "mediaType",
                      SBX_MT_OCI_MANIFEST, "config", "mediaType", SBX_MT_OCI_CONFIG, "digest", "",
                      "size", (json_int_t)strlen(cs), "layers", mlayers);
        char cd[80];
        snprintf(cd, sizeof cd, "sha256:%s", ch);
        json_object_set_new(json_object_get(man, "config"), "digest", json_string(cd));
        char *ms = json_dumps(man, JSON_COMPACT | JSON_SORT_KEYS);
        char mh[65];
        sha256_buf(ms, strlen(ms), mh);
        free(cs);
        free(ms);
        json_decref(cfg);
        json_decref(man);
        j->wrc = sbx_image_make_skeleton(j->d->image_dir, mh, dirs, j->nlayers, err);
        free(dirs);
        free(paths);
        if (j->wrc == 0) {
            struct sbx_image_rec *r = &j->irec;
            sbx_image_rec_fini(r);
            memset(r, 0, sizeof *r);
            snprintf(r->digest, sizeof r->digest, "sha256:%s", mh);
            r->layers = xcalloc(j->nlayers + 1, sizeof *r->layers);
            memcpy(r->layers, j->layers, j->nlayers * sizeof *r->layers);
            r->nlayers = j->nlayers;
            r->size_bytes = j->size_total;
            r->config_json = json_dumps(j->config, JSON_COMPACT);
            r->ref = j->final && j->ref[0] ? xstrdup(j->ref) : NULL;
            r->source_type = xstrdup(j->final ? "build" : "build-step");
            r->source_path = xstrdup(j->final ? (j->context[0] ? j->context : "") : j->id);
        }
        return;
    }
    j->layer[0] = '\0';
    j->layer_existed = false;
    j->layer_size = 0;
    int fd = open(j->tar, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        j->wrc = err_internal(err, "cannot create %s: %s", j->tar, strerror(errno));
        return;
    }
    if (j->wk == W_DIFF) {
        int up = open(j->upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (up < 0)
            j->wrc = err_internal(err, "cannot open %s: %s", j->upper, strerror(errno));
        else {
            j->wrc = sbx_build_diff(up, j->base, fd, &j->entries, err);
            close(up);
        }
    } else {
        j->wrc = sbx_build_copy(j->ctx_fd, j->rec.steps[j->cur].args[0], j->copy_dst, j->copy_dir,
                                fd, &j->entries, err);
    }
    if (j->wrc == 0 && j->entries > 0) {
        char hx[65];
        int e = sha256_fd(fd, hx);
        if (e < 0) j->wrc = err_internal(err, "cannot hash %s: %s", j->tar, strerror(-e));
        struct stat st;
        if (j->wrc == 0 && fstat(fd, &st) == 0) {
            snprintf(j->layer, sizeof j->layer, "sha256:%s", hx);
            struct sbx_layer_info info;
            j->wrc = sbx_layer_add_from_blob(&j->d->layers, fd, SBX_MT_OCI_LAYER, j->layer,
                                             st.st_size, j->max_bytes, NULL, NULL, &info, err);
            j->layer_existed = info.existed;
            j->layer_size = st.st_size;
        }
    }
    close(fd);
    unlink(j->tar);
}

static void work_done(void *arg);

static void work_drop(void *arg)
{
    struct bjob *j = arg;
    j->busy = false;
    struct err e = ERR_INIT;
    err_set(&e, 503, "shutting_down", "", "the daemon is shutting down");
    fail(j, &e);
    sandbox_gone_then(j);
}

static void submit(struct bjob *j, enum wkind k)
{
    struct err e = ERR_INIT;
    if (!j->bs->w && !(j->bs->w = proxy_worker_new(j->d->base, 1, &e))) {
        fail_now(j, &e);
        return;
    }
    int64_t room = j->d->storage ? sbx_storage_free(j->d->storage) : -1;
    j->max_bytes = room > BUILD_KEEP_FREE ? (uint64_t)(room - BUILD_KEEP_FREE) : 0;
    if (room >= 0 && room <= BUILD_KEEP_FREE && k != W_IMAGE) {
        err_set(&e, 507, "no_space", "",
                "the sandbox store is full; delete sandboxes, "
                "snapshots or images");
        fail_now(j, &e);
        return;
    }
    j->wk = k;
    j->busy = true;
    proxy_worker_submit(j->bs->w, work, work_done, work_drop, j);
}

/* ------------------------------------------------------------------ RUN */

static void on_quiet(struct sbxd *d, const char *id, void *arg);

static void run_cmd(struct bjob *j)
{
    struct err e = ERR_INIT;
    struct sbx *s = sbx_find_id(j->d, j->sbx_id);
    if (!s || sbx_ensure_running(s, NULL, &e) < 0) {
        if (!s) err_internal(&e, "the build's sandbox is gone");
        fail(j, &e);
        sandbox_gone_then(j);
        return;
    }
    const struct sbx_recipe_step *st = &j->rec.steps[j->cur];
    const char *wd = json_string_value(json_object_get(j->config, "workdir"));
    const char *user = json_string_value(json_object_get(j->config, "user"));
    json_t *body;
    if (j->prep) {
        body =
            json_pack("{s:s, s:[s, s, s], s:s, s:s, s:I}", "cmd", "mkdir", "args", "-p", "--", wd,
                      "user", "root", "cwd", "/", "timeout_ms", (json_int_t)BUILD_STEP_TIMEOUT_MS);
    } else {
        json_t *args = json_array();
        for (size_t i = 1; i < st->nargs; i++)
            json_array_append_new(args, json_string(st->args[i]));
        body = json_pack("{s:s, s:o, s:I}", "cmd", st->args[0], "args", args, "timeout_ms",
                         (json_int_t)BUILD_STEP_TIMEOUT_MS);
        if (wd) json_object_set_new(body, "cwd", json_string(wd));
        if (user) {
            char name[65];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(user, ":"), user);
            json_object_set_new(body, "user", json_string(name));
        } else {
            json_object_set_new(body, "user", json_string("root"));
        }
    }
    j->off[0] = j->off[1] = 0;
    j->linelen[0] = j->linelen[1] = 0;
    j->cmd = sbx_cmd_start(s, body, &e);
    json_decref(body);
    if (!j->cmd) {
        if (!strcmp(e.code, "validation_error") || e.status == 404) {
            char m[sizeof e.msg];
            snprintf(m, sizeof m, "%s", e.msg);
            err_invalid(&e, "recipe", "recipe line %d: %s", st->line, m);
        }
        fail(j, &e);
        sbx_stop_begin(s, "build step failed");
        sbx_wait_quiet(s, on_quiet, j);
    }
}

/* Output of the command: split into lines for the log. */
static void drain(struct bjob *j, struct sbx_cmd *c, int which, bool flush)
{
    struct sbx_ring *rg = which ? &c->err : &c->out;
    char buf[8192];
    size_t n;
    uint64_t from;
    while ((n = sbx_ring_read(rg, j->off[which], buf, sizeof buf, &from)) > 0) {
        j->off[which] = from + n;
        for (size_t i = 0; i < n; i++) {
            if (buf[i] == '\n' || j->linelen[which] >= BUILD_LINE_MAX) {
                j->line[which][j->linelen[which]] = '\0';
                log_line(j, j->line[which]);
                j->linelen[which] = 0;
                if (buf[i] == '\n') continue;
            }
            j->line[which][j->linelen[which]++] = buf[i];
        }
    }
    if (flush && j->linelen[which]) {
        j->line[which][j->linelen[which]] = '\0';
        log_line(j, j->line[which]);
        j->linelen[which] = 0;
    }
}

static void on_cmd(struct sbx_observer *o, struct sbx_cmd *c, int ev)
{
    struct sbx_builds *bs = (struct sbx_builds *)o;
    for (struct bjob *j = bs->jobs; j; j = j->next) {
        if (j->cmd != c) continue;
        if (ev & (SBX_EV_OUTPUT | SBX_EV_DONE)) {
            drain(j, c, 0, ev & SBX_EV_DONE);
            drain(j, c, 1, ev & SBX_EV_DONE);
        }
        if (ev & SBX_EV_GONE) {
            j->cmd = NULL;
            struct err e = ERR_INIT;
            err_internal(&e, "the build's sandbox went away during step %zu", j->cur + 1);
            fail(j, &e);
            kick(j);
        } else if ((ev & SBX_EV_DONE) || (c->status == CMD_FAILED)) {
            j->cmd = NULL;
            struct err e = ERR_INIT;
            const struct sbx_recipe_step *st = &j->rec.steps[j->cur];
            if (c->status == CMD_FAILED) {
                err_set(&e, 400, "build_failed", "recipe", "recipe line %d: %s could not start: %s",
                        st->line, j->prep ? "mkdir of WORKDIR" : st->text, c->error.msg);
                fail(j, &e);
            } else if (c->exit_code != 0) {
                j->exit_code = c->exit_code;
                /* the tail of its output is the log's last lines */
                size_t nl = json_array_size(j->log), from = nl > 10 ? nl - 10 : 0;
                char tail[1500] = "";
                size_t tl = 0;
                for (size_t i = from; i < nl && tl < sizeof tail - 2; i++)
                    tl += (size_t)snprintf(tail + tl, sizeof tail - tl, "%s%s", tl ? "\n" : "",
                                           json_string_value(json_array_get(j->log, i)));
                err_set(&e, 400, "build_failed", "recipe",
                        "recipe line %d: %.200s exited with %d%s%s", st->line,
                        j->prep ? "mkdir of WORKDIR" : st->text, c->exit_code,
                        c->timed_out ? " (timed out)" : "", tl ? ":\n" : "");
                size_t ml = strlen(e.msg), room = sizeof e.msg - ml - 1;
                size_t cut = tl > room ? tl - room : 0; /* keep the end of the output */
                memcpy(e.msg + ml, tail + cut, tl - cut);
                e.msg[ml + tl - cut] = '\0';
                fail(j, &e);
            } else if (j->prep) {
                j->prep = false; /* WORKDIR made: now the step's command */
                j->want_cmd = true;
                kick(j);
                return;
            }
            struct sbx *s = sbx_find_id(j->d, j->sbx_id);
            if (!s) {
                kick(j);
                return;
            }
            sbx_stop_begin(s, "build step done");
            sbx_wait_quiet(s, on_quiet, j);
        }
        return;
    }
}

/* The sandbox's session is over: take its changes, unless the step failed. */
static void on_quiet(struct sbxd *d, const char *id, void *arg)
{
    struct bjob *j = arg;
    struct sbx *s = sbx_find_id(d, id);
    if (j->failed || !s || !s->fs_dir) {
        if (!s && !j->failed) {
            struct err e = ERR_INIT;
            err_internal(&e, "the build's sandbox went away");
            fail(j, &e);
        }
        sandbox_gone_then(j);
        return;
    }
    snprintf(j->upper, sizeof j->upper, "%s/upper", s->fs_dir);
    j->base = s->data_base ? s->data_base : s->uid_base;
    submit(j, W_DIFF);
}

/* Delete the step's sandbox and its image of the layers so far, then go on. */
static void sandbox_gone_then(struct bjob *j)
{
    if (j->sbx_id[0]) {
        struct sbx *s = sbx_find_id(j->d, j->sbx_id);
        struct err e = ERR_INIT;
        if (s && !s->deleting && sbx_delete(s, &e) < 0)
            log_warn("build: cannot delete its sandbox", "id=%s error=\"%s\"", j->sbx_id, e.msg);
        j->sbx_id[0] = '\0';
    }
    tmp_forget(j);
    kick(j);
}

static void tmp_forget(struct bjob *j)
{
    if (!j->tmp_img[0]) return;
    if (j->tmp_created) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db(j->d), "DELETE FROM images WHERE digest = ?1", -1, &q, NULL) ==
            SQLITE_OK) {
            sqlite3_bind_text(q, 1, j->tmp_img, -1, SQLITE_STATIC);
            sqlite3_step(q);
            sqlite3_finalize(q);
        }
        /* the skeleton stays while the deleted sandbox's teardown may still use it; image
         * garbage collection removes skeletons no image has */
    }
    j->tmp_img[0] = '\0';
    j->tmp_created = false;
}

static void run_start(struct bjob *j)
{
    /* the image of the layers so far is recorded (tmp_img): a sandbox on it */
    char name[64];
    snprintf(name, sizeof name, "build-%.8s-%zu", j->id + 28, j->cur + 1);
    json_t *body =
        json_pack("{s:s, s:s, s:{s:s}, s:I}", "name", name, "image", "", "metadata", "rebuno.build",
                  j->id, "timeout_ms", (json_int_t)BUILD_STEP_TIMEOUT_MS);
    char img[80];
    snprintf(img, sizeof img, "sha256:%s", j->tmp_img);
    json_object_set_new(body, "image", json_string(img));
    if (j->netpol) json_object_set(body, "network_policy", j->netpol);
    struct err e = ERR_INIT;
    struct sbx *s = sbx_create(j->d, body, &e);
    json_decref(body);
    if (!s) {
        fail(j, &e);
        sandbox_gone_then(j);
        return;
    }
    snprintf(j->sbx_id, sizeof j->sbx_id, "%s", s->id);
    j->prep = json_string_value(json_object_get(j->config, "workdir")) != NULL;
    run_cmd(j);
}

/* ------------------------------------------------------------------ the steps */

static void push_layer(struct bjob *j, const char *layer)
{
    if (!layer[0]) return;
    j->layers = xrealloc(j->layers, (j->nlayers + 1) * sizeof *j->layers);
    snprintf(j->layers[j->nlayers++], SBX_OCI_DIGEST_LEN + 1, "%s", layer);
}

static void env_set(json_t *cfg, const char *k, const char *v)
{
    json_t *env = json_object_get(cfg, "env");
    if (!json_is_array(env)) {
        env = json_array();
        json_object_set_new(cfg, "env", env);
    }
    size_t kl = strlen(k), i;
    json_t *x;
    char *kv = xasprintf("%s=%s", k, v);
    json_array_foreach(env, i, x)
    {
        const char *s = json_string_value(x);
        if (s && !strncmp(s, k, kl) && s[kl] == '=') {
            json_array_set_new(env, i, json_string(kv));
            free(kv);
            return;
        }
    }
    json_array_append_new(env, json_string(kv));
    free(kv);
}

static void work_done(void *arg)
{
    struct bjob *j = arg;
    j->busy = false;
    if (j->wrc < 0) {
        fail(j, &j->werr);
        if (j->wk == W_DIFF)
            sandbox_gone_then(j);
        else
            kick(j);
        return;
    }
    if (j->wk == W_IMAGE) {
        json_t *o = NULL;
        bool created = false;
        struct err e = ERR_INIT;
        if (sbx_images_commit(j->d, &j->irec, &o, &created, &e) < 0) {
            fail_now(j, &e);
            return;
        }
        if (j->final) {
            j->image = o;
            j->cur = j->rec.n;
            log_fmt(j, "built %s%s%s", j->irec.digest, j->ref[0] ? " as " : "", j->ref);
            job_finish(j);
            return;
        }
        json_decref(o);
        snprintf(j->tmp_img, sizeof j->tmp_img, "%s", j->irec.digest + 7);
        j->tmp_created = created;
        run_start(j);
        return;
    }
    const struct sbx_recipe_step *st = &j->rec.steps[j->cur];
    if (j->wk == W_COPY) {
        step_key(j->chain, st->text, j->layer, j->key);
        log_fmt(j, "  -> %s%s", j->layer[0] ? j->layer : "(nothing to copy)",
                j->layer_existed ? " (cached: the layer was there already)" : "");
    } else {
        log_fmt(j, "  -> %s (%lld entries)", j->layer[0] ? j->layer : "(no changes)",
                (long long)j->entries);
        cache_put(j->d, j->key, j->layer, j->layer_size);
    }
    step_set(j, "done", j->layer, j->layer_existed);
    push_layer(j, j->layer);
    if (j->layer[0]) j->size_total += j->layer_size;
    snprintf(j->chain, sizeof j->chain, "%s", j->key);
    j->cur++;
    progress(j);
    if (j->wk == W_DIFF)
        sandbox_gone_then(j);
    else
        kick(j);
}

/* Run steps until one needs to wait (a worker job, a sandbox), or the end. */
static void advance(struct bjob *j)
{
    if (j->finished || j->busy || j->cmd) return;
    if (j->want_cmd && !j->failed) {
        j->want_cmd = false;
        run_cmd(j);
        return;
    }
    j->want_cmd = false;
    if (j->sbx_id[0]) { /* a failure while a sandbox was up: stop it first */
        struct sbx *s = sbx_find_id(j->d, j->sbx_id);
        if (s && s->sess) {
            sbx_stop_begin(s, "build failed");
            sbx_wait_quiet(s, on_quiet, j);
            return;
        }
        if (s && sbx_busy(s)) {
            sbx_wait_quiet(s, on_quiet, j);
            return;
        }
        sandbox_gone_then(j);
        return;
    }
    if (j->failed) {
        job_finish(j);
        return;
    }
    while (j->cur < j->rec.n) {
        const struct sbx_recipe_step *st = &j->rec.steps[j->cur];
        json_t *view = json_array_get(j->steps, j->cur);
        if (!strcmp(json_string_value(json_object_get(view, "status")), "pending"))
            log_fmt(j, "STEP %zu/%zu: %.3000s", j->cur + 1, j->rec.n, st->text);
        switch (st->kind) {
        case SBX_STEP_FROM:
            step_set(j, "done", NULL, false);
            break;
        case SBX_STEP_ENV:
            for (size_t i = 0; i + 1 < st->nargs; i += 2)
                env_set(j->config, st->args[i], st->args[i + 1]);
            step_set(j, "done", NULL, false);
            break;
        case SBX_STEP_WORKDIR: {
            const char *wd = json_string_value(json_object_get(j->config, "workdir"));
            char p[SBX_PATH_MAX + 1];
            if (sbx_recipe_path(wd ? wd : "/", st->args[0], p, sizeof p) < 0) {
                struct err e = ERR_INIT;
                err_invalid(&e, "recipe",
                            "recipe line %d: WORKDIR %.200s leaves \"/\" or is "
                            "too long",
                            st->line, st->args[0]);
                fail_now(j, &e);
                return;
            }
            json_object_set_new(j->config, "workdir", json_string(p));
            step_set(j, "done", NULL, false);
            break;
        }
        case SBX_STEP_USER:
            json_object_set_new(j->config, "user", json_string(st->args[0]));
            step_set(j, "done", NULL, false);
            break;
        case SBX_STEP_COPY: {
            if (j->nlayers >= SBX_OCI_LAYERS_MAX) {
                struct err e = ERR_INIT;
                err_invalid(&e, "recipe",
                            "recipe line %d: the image would have more than %d layers", st->line,
                            SBX_OCI_LAYERS_MAX);
                fail_now(j, &e);
                return;
            }
            const char *wd = json_string_value(json_object_get(j->config, "workdir"));
            const char *dst = st->args[1];
            size_t dl = strlen(dst);
            if (j->ctx_fd < 0) {
                struct err e = ERR_INIT;
                err_invalid(&e, "context",
                            "recipe line %d: COPY needs a context folder "
                            "(\"context\": an absolute host path)",
                            st->line);
                fail_now(j, &e);
                return;
            }
            if (sbx_recipe_path(wd ? wd : "/", dst, j->copy_dst, sizeof j->copy_dst) < 0) {
                struct err e = ERR_INIT;
                err_invalid(&e, "recipe",
                            "recipe line %d: COPY destination %.200s leaves "
                            "\"/\" or is too long",
                            st->line, dst);
                fail_now(j, &e);
                return;
            }
            j->copy_dir = dl && (dst[dl - 1] == '/' || (dl >= 2 && !strcmp(dst + dl - 2, "/.")));
            step_set(j, "running", NULL, false);
            progress(j);
            submit(j, W_COPY);
            return;
        }
        case SBX_STEP_RUN: {
            step_key(j->chain, st->text, NULL, j->key);
            char layer[SBX_OCI_DIGEST_LEN + 1];
            int64_t lsz = 0;
            if (cache_get(j->d, j->key, layer, &lsz)) {
                j->size_total += lsz;
                log_fmt(j, "  -> %s (cached)", layer[0] ? layer : "(no changes)");
                step_set(j, "done", layer, true);
                push_layer(j, layer);
                snprintf(j->chain, sizeof j->chain, "%s", j->key);
                j->cur++;
                progress(j);
                continue;
            }
            if (j->nlayers == 0) {
                struct err e = ERR_INIT;
                err_invalid(&e, "recipe",
                            "recipe line %d: RUN needs an image with a program to "
                            "run; FROM scratch has none yet (COPY one first)",
                            st->line);
                fail_now(j, &e);
                return;
            }
            if (j->nlayers >= SBX_OCI_LAYERS_MAX) {
                struct err e = ERR_INIT;
                err_invalid(&e, "recipe",
                            "recipe line %d: the image would have more than %d "
                            "layers",
                            st->line, SBX_OCI_LAYERS_MAX);
                fail_now(j, &e);
                return;
            }
            step_set(j, "running", NULL, false);
            progress(j);
            j->final = false;
            submit(j, W_IMAGE);
            return;
        }
        }
        if (st->kind != SBX_STEP_COPY && st->kind != SBX_STEP_RUN) {
            step_key(j->chain, st->text, NULL, j->key);
            snprintf(j->chain, sizeof j->chain, "%s", j->key);
        }
        j->cur++;
        progress(j);
    }
    if (j->nlayers == 0) {
        struct err e = ERR_INIT;
        err_invalid(&e, "recipe", "the image has no layers (FROM scratch without COPY or RUN)");
        fail_now(j, &e);
        return;
    }
    j->final = true;
    submit(j, W_IMAGE);
}

static void on_next(evutil_socket_t fd, short ev, void *arg)
{
    (void)fd;
    (void)ev;
    advance(arg);
}

static void kick(struct bjob *j)
{
    event_active(j->next_ev, EV_TIMEOUT, 0);
}

/* ------------------------------------------------------------------ HTTP */

static struct sbx_builds *builds_of(struct sbxd *d);

void sbx_build_post(struct sbxd *d, struct http_req *r, json_t *body)
{
    struct sbx_builds *bs = builds_of(d);
    struct err err = ERR_INIT;
    static const char *const known[] = {"type", "recipe", "context", "ref", "network_policy", NULL};
    const char *recipe = NULL, *ctx = NULL, *ref = NULL;
    struct sbx_oci_ref pr;
    struct sbx_recipe rec = {0};
    int ctx_fd = -1;
    char **blayers = NULL;
    size_t nb = 0;
    json_t *bcfg = NULL;
    if (sbx_json_known(body, known, "an image build", &err) < 0 ||
        sbx_json_str(body, "recipe", SBX_RECIPE_MAX, &recipe, &err) < 0 ||
        sbx_json_str(body, "context", 1024, &ctx, &err) < 0 ||
        sbx_json_str(body, "ref", 500, &ref, &err) < 0)
        goto out;
    if (bs->closed) {
        err_set(&err, 503, "shutting_down", "", "the daemon is shutting down");
        goto out;
    }
    if (!recipe) {
        err_invalid(&err, "recipe", "recipe (the text of a Dockerfile-like recipe) is required");
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
    if (sbx_recipe_parse(recipe, strlen(recipe), &rec, &err) < 0) goto out;
    if (ctx) {
        if (ctx[0] != '/' || strstr(ctx, "/../") || strpbrk(ctx, "\n\r\t")) {
            err_invalid(&err, "context", "context must be an absolute host path without \"..\"");
            goto out;
        }
        ctx_fd = open(ctx, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (ctx_fd < 0) {
            err_invalid(&err, "context", "cannot open the context folder %s: %s", ctx,
                        strerror(errno));
            goto out;
        }
    }
    int running = 0;
    for (struct bjob *x = bs->jobs; x; x = x->next)
        running += !x->finished;
    if (running >= BUILD_RUNNING_MAX) {
        err_set(&err, 429, "too_many_builds", "", "%d builds are running; wait for one to end",
                running);
        goto out;
    }
    /* the base */
    const char *from = rec.steps[0].args[0];
    char base[80] = "";
    if (strcmp(from, "scratch") != 0) {
        if (!strcmp(from, "host")) {
            err_invalid(&err, "recipe",
                        "recipe line %d: FROM host is not supported: the host "
                        "image is not made of layers; use an imported or pulled image "
                        "(scripts/default-image.sh makes a Debian one)",
                        rec.steps[0].line);
            goto out;
        }
        if (sbx_image_resolve(d, from, "recipe", base, sizeof base, &err) < 0) goto out;
        if (!strcmp(base, SBX_IMAGE_DEFAULT)) {
            err_invalid(&err, "recipe",
                        "recipe line %d: FROM %.200s is the host image, which "
                        "is not made of layers; import or pull a base image",
                        rec.steps[0].line, from);
            goto out;
        }
        int k = sbx_image_session(d, base, &blayers, &nb, &bcfg, &err);
        if (k < 0) goto out;
        if (k == 1) {
            err_invalid(&err, "recipe",
                        "recipe line %d: FROM %.200s is an image of the old "
                        "kind (over the host's /usr); import it again",
                        rec.steps[0].line, from);
            goto out;
        }
    }
    struct bjob *j = xcalloc(1, sizeof *j);
    j->bs = bs;
    j->d = d;
    uuid_v7(j->id);
    j->status = "building";
    j->rec = rec;
    rec = (struct sbx_recipe){0};
    j->ctx_fd = ctx_fd;
    ctx_fd = -1;
    if (ctx) snprintf(j->context, sizeof j->context, "%s", ctx);
    if (ref) snprintf(j->ref, sizeof j->ref, "%s", pr.canonical);
    snprintf(j->from, sizeof j->from, "%s", from);
    json_t *np = json_object_get(body, "network_policy");
    if (np && !json_is_null(np)) j->netpol = json_deep_copy(np); /* checked by each sbx_create */
    j->layers = xcalloc(nb + 1, sizeof *j->layers);
    for (size_t i = 0; i < nb; i++) /* bottom first */
        snprintf(j->layers[i], sizeof j->layers[i], "sha256:%.64s", blayers[nb - 1 - i]);
    j->nlayers = nb;
    j->config = json_object();
    static const char *const keep[] = {"env", "workdir", "user", "cmd", "entrypoint"};
    for (size_t i = 0; i < 5; i++) {
        json_t *v = json_object_get(bcfg, keep[i]);
        if (v && !json_is_null(v)) json_object_set_new(j->config, keep[i], json_deep_copy(v));
    }
    snprintf(j->chain, sizeof j->chain, "%.64s", base[0] ? base : "scratch");
    if (base[0]) { /* the image's size: the base's, then each layer this build adds */
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db(d), "SELECT size_bytes FROM images WHERE digest = ?1", -1, &q,
                               NULL) == SQLITE_OK) {
            sqlite3_bind_text(q, 1, base, -1, SQLITE_STATIC);
            if (sqlite3_step(q) == SQLITE_ROW) j->size_total = sqlite3_column_int64(q, 0);
            sqlite3_finalize(q);
        }
    }
    j->steps = json_array();
    for (size_t i = 0; i < j->rec.n; i++)
        json_array_append_new(j->steps,
                              json_pack("{s:I, s:s, s:s}", "n", (json_int_t)i + 1, "instruction",
                                        j->rec.steps[i].text, "status", "pending"));
    j->log = json_array();
    j->err = (struct err)ERR_INIT;
    j->created_at = clock_now_ms();
    snprintf(j->tar, sizeof j->tar, "%s/.build-%s.tar", d->image_dir, j->id);
    j->next_ev = event_new(d->base, -1, 0, on_next, j);
    j->next = bs->jobs;
    bs->jobs = j;
    sbx_images_busy(d, +1); /* its layers have no image yet: no collection meanwhile */
    log_info("image build started", "id=%s ref=%s from=%s steps=%zu", j->id, j->ref, from,
             j->rec.n);
    http_reply_json(r, 202, job_json(j, true));
    kick(j);
    goto done;
out:
    http_reply_err(r, &err);
done:
    if (ctx_fd >= 0) close(ctx_fd);
    sbx_recipe_fini(&rec);
    for (size_t i = 0; i < nb; i++)
        free(blayers[i]);
    free(blayers);
    json_decref(bcfg);
}

static struct bjob *job_find(struct sbxd *d, const char *id)
{
    for (struct bjob *j = builds_of(d)->jobs; j; j = j->next)
        if (!strcmp(j->id, id)) return j;
    return NULL;
}

static void h_get(struct http_req *r, void *arg)
{
    struct bjob *j = job_find(arg, http_req_param(r, "id"));
    if (!j) {
        http_reply_error(r, 404, "job_not_found", "",
                         "no build %.64s (finished builds are kept, "
                         "the %d most recent)",
                         http_req_param(r, "id"), BUILD_KEEP);
        return;
    }
    http_reply_json(r, 200, job_json(j, true));
}

static void h_stream(struct http_req *r, void *arg)
{
    struct bjob *j = job_find(arg, http_req_param(r, "id"));
    if (!j) {
        http_reply_error(r, 404, "job_not_found", "", "no build %.64s", http_req_param(r, "id"));
        return;
    }
    if (!j->finished && j->nstreams >= BUILD_STREAMS_MAX) {
        http_reply_error(r, 429, "too_many_streams", "", "at most %d streams per build",
                         BUILD_STREAMS_MAX);
        return;
    }
    http_sse_start(r);
    json_t *o = job_json(j, true);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (j->finished) {
        http_sse_send(r, j->id, j->failed ? "error" : "done", s);
        free(s);
        http_sse_end(r);
        return;
    }
    http_sse_send(r, j->id, "progress", s);
    free(s);
    struct stream *st = xcalloc(1, sizeof *st);
    st->req = r;
    st->j = j;
    j->streams[j->nstreams++] = st;
    http_req_on_close(r, stream_closed, st);
}

static void release(struct sbx_observer *o)
{
    struct sbx_builds *bs = (struct sbx_builds *)o;
    proxy_worker_free(bs->w);
    while (bs->jobs) {
        struct bjob *j = bs->jobs;
        bs->jobs = j->next;
        if (j->next_ev) event_free(j->next_ev);
        if (j->ctx_fd >= 0) close(j->ctx_fd);
        for (int i = 0; i < j->nstreams; i++)
            free(j->streams[i]);
        sbx_recipe_fini(&j->rec);
        free(j->layers);
        json_decref(j->config);
        json_decref(j->netpol);
        json_decref(j->steps);
        json_decref(j->log);
        json_decref(j->image);
        sbx_image_rec_fini(&j->irec);
        free(j);
    }
    free(bs);
}

static struct sbx_builds *builds_of(struct sbxd *d)
{
    return d->builds;
}

void sbx_builds_register(struct sbxd *d)
{
    struct sbx_builds *bs = xcalloc(1, sizeof *bs);
    bs->d = d;
    bs->obs.on_cmd = on_cmd;
    bs->obs.release = release;
    d->builds = bs;
    sbx_observe(d, &bs->obs);
    cache_open(d);
    /* what builds interrupted by a stop or a crash left: their step sandboxes and the
     * images of their steps so far (their layers stay for the cache) */
    for (struct sbx *s = d->first, *next; s; s = next) {
        next = s->next;
        if (!json_is_string(json_object_get(s->metadata, "rebuno.build"))) continue;
        struct err e = ERR_INIT;
        log_info("build: removing the sandbox of an interrupted build", "sandbox=%s", s->name);
        if (sbx_delete(s, &e) < 0)
            log_warn("build: cannot delete a leftover sandbox", "sandbox=%s error=\"%s\"", s->name,
                     e.msg);
    }
    sqlite3_exec(db(d), "DELETE FROM images WHERE source_type = 'build-step'", NULL, NULL, NULL);
    http_route(d->http, "GET", "/v1/images/builds/:id", h_get, d);
    http_route(d->http, "GET", "/v1/images/builds/:id/stream", h_stream, d);
}

void sbx_builds_close(struct sbxd *d)
{
    struct sbx_builds *bs = d->builds;
    if (!bs || bs->closed) return;
    bs->closed = true;
    proxy_worker_free(bs->w); /* a running job finishes; queued ones are dropped */
    bs->w = NULL;
    struct err e = ERR_INIT;
    err_set(&e, 503, "shutting_down", "", "the daemon is shutting down");
    for (struct bjob *j = bs->jobs; j; j = j->next) {
        if (j->finished) continue;
        fail(j, &e);
        j->cmd = NULL;
        j->busy = false;
        job_finish(j);
    }
}
