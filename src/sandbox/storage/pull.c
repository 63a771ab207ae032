/*
 * pull.c - pull jobs (pull.h): the loop side of a registry pull and its progress stream.
 *
 * A job is made by POST /v1/images {"type":"pull"}; its file work (registry.c's
 * reg_pull_run, then the OCI layout and the install) runs on the pull workers (two
 * threads, so a slow registry does not hold up a pull from another). The loop never
 * waits: a timer samples the job's atomic counters every PULL_TICK_MS and sends a
 * `progress` event to each watcher when they changed (a watcher whose output is full
 * just misses samples: progress is state, the next one says it all); the last event
 * (`done` or `error`) is always delivered.
 *
 * Jobs are kept after they end (at most PULL_KEPT finished ones) so a client that
 * connects late still reads the outcome. A POST for a reference whose job is still
 * running answers that job (one download).
 */
#include "sandbox/storage/pull.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "sandbox/core/sandboxd_int.h"
#include "sandbox/core/validate.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/layers.h"
#include "sandbox/storage/registry.h"

#define PULL_TICK_MS 200
#define PULL_KEEPALIVE_TICKS 50 /* a comment every 10 s when nothing moves */
#define PULL_KEPT 32            /* finished jobs remembered */
#define PULL_THREADS 2
#define PULL_WATCHERS_MAX 64    /* streams per job */

enum pull_state { PULL_RUNNING, PULL_INSTALLING, PULL_DONE, PULL_FAILED };

struct pull_watch {
    struct pull_watch *next;
    struct sbx_pull_job *j;
    struct http_req *req;
    bool final_pending; /* the last event is waiting for the client to drain */
};

struct sbx_pull_job {
    struct sbx_pulls *ps;
    struct sbx_pull_job *next;
    char id[UUID_STR_LEN];
    char ref[REG_REF_MAX + 1]; /* normalized, as requested */
    struct reg_pull p;
    _Atomic int state; /* enum pull_state */
    struct err err;
    int rc;
    json_t *image; /* when done */
    int64_t created_at, finished_at;
    struct event *tick;
    int quiet_ticks;
    int64_t last_sum;
    int last_state, last_n;
    struct pull_watch *watches;
    int nwatches;
    struct proxy_job *job;
    char layout[PATH_MAX];
    struct sbx_image_rec rec; /* what the install made (installed) */
    bool installed;
    int64_t install_ms; /* written by the worker before done() */
    _Atomic int64_t unpacking; /* bytes of the current layer's blob unpacked */
};

struct sbx_pulls {
    struct sbxd *d;
    struct reg_client *reg;
    struct proxy_worker *worker;
    struct sbx_pull_job *jobs; /* newest first */
    char *pulls_dir;
    unsigned seq;
    bool closed;
};

/* ------------------------------------------------------------------ job objects */

static const char *state_name(int st, const struct reg_pull *p)
{
    switch (st) {
    case PULL_RUNNING:
        return atomic_load(&p->phase) == REG_RESOLVING ? "resolving" : "downloading";
    case PULL_INSTALLING: return "installing";
    case PULL_DONE: return "done";
    default: return "failed";
    }
}

static json_t *blob_json(const struct reg_blob *b)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:b}", "digest", b->digest, "media_type",
                     b->media_type, "size", (json_int_t)b->size, "done",
                     (json_int_t)atomic_load(&b->done), "cached", (int)atomic_load(&b->cached));
}

static json_t *job_json(struct sbx_pull_job *j)
{
    int st = atomic_load(&j->state);
    int n = atomic_load(&j->p.nlayers);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "type", json_string("pull"));
    json_object_set_new(o, "ref", json_string(j->ref));
    json_object_set_new(o, "status", json_string(state_name(st, &j->p)));
    json_t *layers = json_array();
    int64_t total = 0, done = 0;
    for (int i = 0; i < n; i++) {
        json_array_append_new(layers, blob_json(&j->p.layers[i]));
        total += j->p.layers[i].size;
        done += atomic_load(&j->p.layers[i].done);
    }
    json_object_set_new(o, "manifest_digest",
                        n ? json_string(j->p.manifest_digest) : json_null());
    json_object_set_new(o, "index_digest",
                        j->p.index_digest[0] ? json_string(j->p.index_digest) : json_null());
    json_object_set_new(o, "layers", layers);
    json_object_set_new(o, "bytes_total", json_integer(total));
    json_object_set_new(o, "bytes_done", json_integer(done));
    json_object_set_new(o, "bytes_fetched", json_integer(atomic_load(&j->p.fetched)));
    json_object_set_new(o, "bytes_unpacking", json_integer(atomic_load(&j->unpacking)));
    json_object_set_new(o, "created_at", json_integer(j->created_at));
    bool over = st == PULL_DONE || st == PULL_FAILED; /* the worker's fields are final */
    json_object_set_new(o, "download_ms", over && j->p.download_ms ? json_integer(j->p.download_ms)
                                                                   : json_null());
    json_object_set_new(o, "install_ms", over && j->installed ? json_integer(j->install_ms)
                                                              : json_null());
    json_object_set_new(o, "finished_at",
                        j->finished_at ? json_integer(j->finished_at) : json_null());
    json_object_set_new(o, "image", j->image ? json_incref(j->image) : json_null());
    if (st == PULL_FAILED) {
        json_t *e = json_pack("{s:s, s:s, s:i}", "code", j->err.code, "message", j->err.msg,
                              "status", j->err.status);
        if (j->err.field[0]) json_object_set_new(e, "field", json_string(j->err.field));
        json_object_set_new(o, "error", e);
    } else {
        json_object_set_new(o, "error", json_null());
    }
    return o;
}

static int64_t progress_sum(struct sbx_pull_job *j)
{
    int64_t s = atomic_load(&j->p.config.done) + atomic_load(&j->p.fetched) +
                atomic_load(&j->unpacking);
    int n = atomic_load(&j->p.nlayers);
    for (int i = 0; i < n; i++) s += atomic_load(&j->p.layers[i].done);
    return s;
}

/* ------------------------------------------------------------------ watchers */

static void watch_closed(struct http_req *r, void *arg);

static void watch_free(struct pull_watch *w)
{
    struct sbx_pull_job *j = w->j;
    for (struct pull_watch **pp = &j->watches; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    j->nwatches--;
    free(w);
}

static void watch_closed(struct http_req *r, void *arg)
{
    (void)r;
    watch_free(arg);
}

static void final_drained(struct http_req *r, void *arg);

/* Send the job's last event and end the stream (later, if the client is behind). */
static void send_final(struct pull_watch *w)
{
    struct sbx_pull_job *j = w->j;
    json_t *o = job_json(j);
    char *data = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = http_sse_send(w->req, j->id, atomic_load(&j->state) == PULL_DONE ? "done" : "error",
                           data);
    free(data);
    if (rc == -EAGAIN) {
        w->final_pending = true;
        http_sse_on_drain(w->req, final_drained, w);
        return;
    }
    http_req_on_close(w->req, NULL, NULL);
    http_sse_end(w->req);
    watch_free(w);
}

static void final_drained(struct http_req *r, void *arg)
{
    (void)r;
    send_final(arg);
}

static void send_progress(struct sbx_pull_job *j)
{
    json_t *o = job_json(j);
    char *data = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    for (struct pull_watch *w = j->watches; w; w = w->next)
        if (!w->final_pending) http_sse_send(w->req, j->id, "progress", data); /* -EAGAIN: skip */
    free(data);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sbx_pull_job *j = arg;
    int64_t sum = progress_sum(j);
    int st = atomic_load(&j->state) * 4 + atomic_load(&j->p.phase);
    int n = atomic_load(&j->p.nlayers);
    if (sum != j->last_sum || st != j->last_state || n != j->last_n) {
        j->last_sum = sum;
        j->last_state = st;
        j->last_n = n;
        j->quiet_ticks = 0;
        if (j->watches) send_progress(j);
    } else if (++j->quiet_ticks >= PULL_KEEPALIVE_TICKS) {
        j->quiet_ticks = 0;
        for (struct pull_watch *w = j->watches; w; w = w->next)
            if (!w->final_pending) http_sse_comment(w->req, "keep-alive");
    }
}

/* ------------------------------------------------------------------ jobs */

static void job_free(struct sbx_pull_job *j)
{
    while (j->watches) {
        struct pull_watch *w = j->watches;
        http_req_on_close(w->req, NULL, NULL);
        http_sse_end(w->req);
        watch_free(w);
    }
    if (j->tick) event_free(j->tick);
    if (j->layout[0]) sbx_image_remove_tree(j->layout);
    json_decref(j->image);
    sbx_image_rec_fini(&j->rec);
    free(j);
}

/* Forget the oldest finished jobs beyond PULL_KEPT. */
static void trim(struct sbx_pulls *ps)
{
    int kept = 0;
    for (struct sbx_pull_job **pp = &ps->jobs; *pp;) {
        struct sbx_pull_job *j = *pp;
        int st = atomic_load(&j->state);
        if ((st == PULL_DONE || st == PULL_FAILED) && !j->watches && ++kept > PULL_KEPT) {
            *pp = j->next;
            job_free(j);
            continue;
        }
        pp = &j->next;
    }
}

static void on_unpack(void *arg, const char *digest, int64_t done, int64_t total)
{
    (void)digest;
    (void)total;
    struct sbx_pull_job *j = arg;
    atomic_store(&j->unpacking, done);
}

/* Worker thread: make the image from the OCI layout at j->layout (layers.h): the
 * layers are verified again as they are unpacked, from the store's hard links. */
static int install_layout(struct sbx_pull_job *j, struct err *err)
{
    int dfd = open(j->layout, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0) return err_internal(err, "cannot open %s: %s", j->layout, strerror(errno));
    int rc = sbx_image_install_oci_layout(&j->ps->d->layers, j->ps->d->image_dir, dfd, j->ref, 0,
                                          on_unpack, j, &j->rec, err);
    close(dfd);
    if (rc < 0) {
        if (err->status == 400) { /* the registry's image is at fault, not the request */
            err->status = 502;
            err->field[0] = '\0';
        }
        return err_wrap(err, "the image from registry %s is refused", j->p.ref.registry);
    }
    j->installed = true;
    free(j->rec.source_type);
    free(j->rec.source_path);
    j->rec.source_type = xstrdup("registry");
    j->rec.source_path = xstrdup(j->ref);
    return 0;
}

/* Loop: record the installed image (images.c); j->image is what the API shows. */
static int record(struct sbx_pull_job *j, struct err *err)
{
    bool created;
    return sbx_images_commit(j->ps->d, &j->rec, &j->image, &created, err);
}

/* Worker thread: download, lay out, install. Files only. */
static void pull_work(void *arg)
{
    struct sbx_pull_job *j = arg;
    struct sbx_pulls *ps = j->ps;
    j->rc = reg_pull_run(ps->reg, &j->p, &j->err);
    if (j->rc < 0) return;
    j->rc = reg_layout_write(ps->reg, &j->p, j->layout, &j->err);
    if (j->rc < 0) return;
    atomic_store(&j->state, PULL_INSTALLING);
    int64_t t0 = clock_mono_ms();
    j->rc = install_layout(j, &j->err);
    j->install_ms = clock_mono_ms() - t0;
    if (j->rc == 0) reg_drop_layer_blobs(ps->reg, &j->p); /* unpacked: the layer store has them */
}

static void finish(struct sbx_pull_job *j)
{
    struct sbx_pulls *ps = j->ps;
    j->job = NULL;
    j->finished_at = clock_now_ms();
    sbx_images_busy(ps->d, -1); /* garbage collection may run again */
    if (j->tick) {
        event_free(j->tick);
        j->tick = NULL;
    }
    if (j->layout[0]) {
        sbx_image_remove_tree(j->layout);
        j->layout[0] = '\0';
    }
    if (atomic_load(&j->state) == PULL_DONE)
        log_info("image pulled", "job=%s ref=%s digest=%s layers=%d fetched=%lld", j->id, j->ref,
                 j->p.manifest_digest, atomic_load(&j->p.nlayers),
                 (long long)atomic_load(&j->p.fetched));
    else
        log_warn("image pull failed", "job=%s ref=%s status=%d code=%s msg=\"%s\"", j->id,
                 j->ref, j->err.status, j->err.code, j->err.msg);
    for (struct pull_watch *w = j->watches, *next; w; w = next) {
        next = w->next; /* send_final may free w */
        if (!w->final_pending) send_final(w);
    }
    trim(ps);
}

static void pull_done(void *arg)
{
    struct sbx_pull_job *j = arg;
    if (j->rc == 0 && record(j, &j->err) < 0) j->rc = -1;
    atomic_store(&j->state, j->rc == 0 ? PULL_DONE : PULL_FAILED);
    finish(j);
}

static void pull_drop(void *arg) /* the daemon is shutting down */
{
    struct sbx_pull_job *j = arg;
    err_set(&j->err, 503, "shutting_down", "", "the daemon is shutting down");
    atomic_store(&j->state, PULL_FAILED);
    finish(j);
}

/* ------------------------------------------------------------------ routes */

void sbx_pull_post(struct sbxd *d, struct http_req *r, json_t *body)
{
    struct sbx_pulls *ps = d->pulls;
    struct err err = ERR_INIT;
    static const char *const known[] = {"type", "ref", NULL};
    const char *ref = NULL;
    struct sbx_oci_ref rr;
    if (sbx_json_known(body, known, "an image pull", &err) < 0 ||
        sbx_json_str(body, "ref", REG_REF_MAX, &ref, &err) < 0)
        goto fail;
    if (!ref) {
        err_invalid(&err, "ref", "ref is required: an image reference such as "
                                 "\"debian:bookworm\" or \"registry.example:5000/team/name:tag\"");
        goto fail;
    }
    if (sbx_oci_ref_parse(ref, &rr, &err) < 0) {
        snprintf(err.field, sizeof err.field, "ref");
        goto fail;
    }
    if (!ps || !ps->reg || ps->closed) {
        err_set(&err, 503, "shutting_down", "", "the daemon is shutting down");
        goto fail;
    }
    const char *norm = rr.canonical;
    for (struct sbx_pull_job *j = ps->jobs; j; j = j->next) {
        int st = atomic_load(&j->state);
        if ((st == PULL_RUNNING || st == PULL_INSTALLING) && !strcmp(j->ref, norm)) {
            http_reply_json(r, 202, job_json(j)); /* join it: one download */
            return;
        }
    }
    if (!ps->worker && !(ps->worker = proxy_worker_new(d->base, PULL_THREADS, &err))) goto fail;
    struct sbx_pull_job *j = xcalloc(1, sizeof *j);
    j->ps = ps;
    uuid_v7(j->id);
    snprintf(j->ref, sizeof j->ref, "%s", norm);
    j->p.ref = rr;
    j->err = (struct err)ERR_INIT;
    j->created_at = clock_now_ms();
    j->last_state = -1;
    snprintf(j->layout, sizeof j->layout, "%s/.pull-%d-%u", ps->pulls_dir, (int)getpid(),
             ++ps->seq);
    j->tick = event_new(d->base, -1, EV_PERSIST, on_tick, j);
    struct timeval tv = {0, PULL_TICK_MS * 1000};
    event_add(j->tick, &tv);
    j->next = ps->jobs;
    ps->jobs = j;
    sbx_images_busy(d, +1); /* its layers have no row until it ends */
    log_info("image pull started", "job=%s ref=%s req=%s", j->id, j->ref, http_req_id(r));
    j->job = proxy_worker_submit(ps->worker, pull_work, pull_done, pull_drop, j);
    http_reply_json(r, 202, job_json(j));
    return;
fail:
    http_reply_err(r, &err);
}

static struct sbx_pull_job *find_job(struct sbxd *d, struct http_req *r)
{
    const char *id = http_req_param(r, "id");
    for (struct sbx_pull_job *j = d->pulls ? d->pulls->jobs : NULL; j; j = j->next)
        if (!strcmp(j->id, id)) return j;
    http_reply_error(r, 404, "job_not_found", "", "no image job %.60s (finished jobs are kept "
                     "for a while only)", id);
    return NULL;
}

static void h_job(struct http_req *r, void *arg)
{
    struct sbx_pull_job *j = find_job(arg, r);
    if (j) http_reply_json(r, 200, job_json(j));
}

static void h_stream(struct http_req *r, void *arg)
{
    struct sbx_pull_job *j = find_job(arg, r);
    if (!j) return;
    if (j->nwatches >= PULL_WATCHERS_MAX) {
        http_reply_error(r, 429, "too_many_streams", "",
                         "job %s already has %d streams; read it with GET /v1/images/jobs/%s",
                         j->id, PULL_WATCHERS_MAX, j->id);
        return;
    }
    struct pull_watch *w = xcalloc(1, sizeof *w);
    w->j = j;
    w->req = r;
    w->next = j->watches;
    j->watches = w;
    j->nwatches++;
    http_sse_start(r);
    http_req_on_close(r, watch_closed, w);
    int st = atomic_load(&j->state);
    if (st == PULL_DONE || st == PULL_FAILED) {
        send_final(w);
        return;
    }
    json_t *o = job_json(j);
    char *data = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    http_sse_send(r, j->id, "progress", data);
    free(data);
}

void sbx_pulls_register(struct sbxd *d)
{
    http_route(d->http, "GET", "/v1/images/jobs/:id", h_job, d);
    http_route(d->http, "GET", "/v1/images/jobs/:id/stream", h_stream, d);
}

/* ------------------------------------------------------------------ open, close */

static bool have_layer(void *arg, const char *digest)
{
    return sbx_layer_have(arg, digest);
}

int sbx_pulls_open(struct sbxd *d, const struct sbx_pull_opts *o, struct err *err)
{
    struct sbx_pulls *ps = xcalloc(1, sizeof *ps);
    ps->d = d;
    d->pulls = ps;
    ps->pulls_dir = xasprintf("%s/pulls", d->state_dir);
    if (mkdir(ps->pulls_dir, 0700) < 0 && errno != EEXIST)
        return err_internal(err, "cannot create %s: %s", ps->pulls_dir, strerror(errno));
    DIR *dd = opendir(ps->pulls_dir); /* layouts of interrupted pulls */
    if (dd) {
        struct dirent *de;
        while ((de = readdir(dd))) {
            if (strncmp(de->d_name, ".pull-", 6) != 0) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%.200s", ps->pulls_dir, de->d_name);
            sbx_image_remove_tree(p);
        }
        closedir(dd);
    }
    char *store = xasprintf("%s/blobs", d->state_dir);
    struct reg_opts ro = {.auth_file = o ? o->auth_file : NULL,
                          .ca_file = o ? o->ca_file : NULL,
                          .plain_http = o ? o->plain_http : NULL,
                          .n_plain_http = o ? o->n_plain_http : 0,
                          .stall_sec = o ? o->stall_sec : 0,
                          .have_layer = have_layer,
                          .have_arg = &d->layers};
    ps->reg = reg_client_new(&ro, store, err);
    free(store);
    if (!ps->reg) return -1;
    /* leftovers of interrupted downloads */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/blobs/tmp", d->state_dir);
    if ((dd = opendir(tmp))) {
        struct dirent *de;
        while ((de = readdir(dd)))
            if (de->d_name[0] != '.') unlinkat(dirfd(dd), de->d_name, 0);
        closedir(dd);
    }
    return 0;
}

void sbx_pulls_close(struct sbxd *d)
{
    struct sbx_pulls *ps = d->pulls;
    if (!ps) return;
    ps->closed = true;
    for (struct sbx_pull_job *j = ps->jobs; j; j = j->next) atomic_store(&j->p.cancel, true);
    proxy_worker_free(ps->worker); /* joins; queued jobs get pull_drop, finished pull_done */
    ps->worker = NULL;
}

void sbx_pulls_free(struct sbxd *d)
{
    struct sbx_pulls *ps = d->pulls;
    if (!ps) return;
    sbx_pulls_close(d);
    while (ps->jobs) {
        struct sbx_pull_job *j = ps->jobs;
        ps->jobs = j->next;
        job_free(j);
    }
    reg_client_free(ps->reg);
    free(ps->pulls_dir);
    free(ps);
    d->pulls = NULL;
}
