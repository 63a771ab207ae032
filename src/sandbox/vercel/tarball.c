/*
 * tarball.c - the SDK's `source: {type: "tarball", url}` (docs/vercel.md, "Sources"):
 * the host fetches the URL (http or https only, at most VC_TARBALL_MAX bytes, with
 * connect, stall and overall timeouts) on a worker thread into a 0600 file of a
 * root-only folder of sandboxd's state, then the sandbox is created with the core's
 * tarball source from that file (storage/source.c): tar runs inside the sandbox, as its
 * root, so a hostile archive ("..", absolute names, links out, devices) can only touch
 * that sandbox, and tar's refusal is the create's 400 source_failed. The file is
 * removed once the source job is over (or at the next start).
 */
#include "sandbox/vercel/vc_int.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "proxy/worker.h"
#include "sandbox/storage/safefs.h"

#define DIR_NAME "vercel-tarballs"
#define CONNECT_S 10
#define STALL_S 30   /* below 1 KiB/s for this long ends it */
#define TOTAL_S 600

struct tb_job {
    struct tb_job *next; /* v->tarballs: fetched files until their source job is over */
    struct vc *v;
    struct http_req *req; /* NULL once the client left */
    json_t *body;         /* the /v1 create body (its source set once fetched) */
    char url[VC_URL_MAX + 1];
    char path[512];
    char sbx_id[40]; /* once created */
    int fd;
    int64_t got;
    atomic_bool cancel;
    int rc; /* 0, or -1 with msg */
    char msg[CURL_ERROR_SIZE + 128];
};

bool vc_tarball_url_ok(const char *u)
{
    size_t n = strlen(u);
    if (n > VC_URL_MAX || (strncmp(u, "http://", 7) && strncmp(u, "https://", 8))) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)u[i] <= 0x20 || u[i] == 0x7f) return false;
    return true;
}

static void job_free(struct tb_job *j)
{
    if (j->fd >= 0) close(j->fd);
    json_decref(j->body);
    free(j);
}

/* Remove the files of jobs whose source is over (its sandbox gone or set up). */
static void sweep(struct vc *v)
{
    for (struct tb_job **p = &v->tarballs; *p;) {
        struct tb_job *j = *p;
        struct sbx *s = j->sbx_id[0] ? sbx_find(v->d, j->sbx_id) : NULL;
        bool pending = s && s->origin && json_is_true(json_object_get(s->origin, "pending"));
        if (!pending) {
            unlink(j->path);
            *p = j->next;
            job_free(j);
        } else {
            p = &j->next;
        }
    }
}

/* ---- the fetch (worker thread) ---- */

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct tb_job *j = arg;
    size_t len = size * n;
    if (atomic_load(&j->cancel) || atomic_load(&j->v->tarball_cancel)) return 0;
    if (j->got + (int64_t)len > VC_TARBALL_MAX) {
        snprintf(j->msg, sizeof j->msg, "the tarball is larger than %d MiB",
                 VC_TARBALL_MAX >> 20);
        return 0;
    }
    for (size_t w = 0; w < len;) {
        ssize_t k = write(j->fd, data + w, len - w);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            snprintf(j->msg, sizeof j->msg, "cannot store the tarball: %s", strerror(errno));
            return 0;
        }
        w += (size_t)k;
    }
    j->got += (int64_t)len;
    return len;
}

static int on_xfer(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct tb_job *j = arg;
    return atomic_load(&j->cancel) || atomic_load(&j->v->tarball_cancel) ? 1 : 0;
}

static void work(void *arg)
{
    struct tb_job *j = arg;
    CURL *h = curl_easy_init();
    if (!h) {
        j->rc = -1;
        snprintf(j->msg, sizeof j->msg, "cannot start a download");
        return;
    }
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, j->url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_S);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)STALL_S);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)TOTAL_S);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)VC_TARBALL_MAX);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "rebuno-sandboxd");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, j);
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        j->rc = -1;
        if (rc == CURLE_FILESIZE_EXCEEDED)
            snprintf(j->msg, sizeof j->msg, "the tarball is larger than %d MiB",
                     VC_TARBALL_MAX >> 20);
        else if (!j->msg[0])
            snprintf(j->msg, sizeof j->msg, "cannot fetch the tarball: %s",
                     ebuf[0] ? ebuf : curl_easy_strerror(rc));
    }
    curl_easy_cleanup(h);
}

/* ---- back on the loop ---- */

static void req_gone(struct http_req *r, void *arg)
{
    struct tb_job *j = arg;
    j->req = NULL;
    atomic_store(&j->cancel, true); /* nobody waits for the sandbox: do not make it */
}

static void created(struct http_req *r, struct sbx *s, const char *error)
{
    struct vc *v = http_req_data(r);
    sweep(v); /* its own file too: its source is over */
    vc_source_done(r, s, error);
}

static void drop(void *arg)
{
    struct tb_job *j = arg;
    unlink(j->path);
    if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        http_reply_error(j->req, 503, "shutting_down", "", "sandboxd is stopping");
    }
    job_free(j);
}

static void done(void *arg)
{
    struct tb_job *j = arg;
    struct vc *v = j->v;
    close(j->fd);
    j->fd = -1;
    if (!j->req || j->rc < 0) {
        if (j->req) {
            http_req_on_close(j->req, NULL, NULL);
            http_reply_error(j->req, 400, "source_failed", "source.url", "%s", j->msg);
        }
        unlink(j->path);
        job_free(j);
        return;
    }
    struct http_req *r = j->req;
    http_req_on_close(r, NULL, NULL);
    json_object_set_new(j->body, "source", json_pack("{s:s, s:s, s:s}", "type", "tarball",
                                                     "file", j->path, "path", VC_CWD));
    struct err err = ERR_INIT;
    struct sbx *s = sbx_create(v->d, j->body, &err);
    if (!s) {
        unlink(j->path);
        job_free(j);
        vc_reply_err(r, &err);
        return;
    }
    log_info("vercel: tarball fetched", "sandbox=%s bytes=%lld", s->id, (long long)j->got);
    snprintf(j->sbx_id, sizeof j->sbx_id, "%s", s->id);
    j->req = NULL; /* the source job answers it now */
    j->next = v->tarballs;
    v->tarballs = j;
    http_req_set_data(r, v);
    if (!sbx_source_begin_ex(v->d, s, r, created)) created(r, s, NULL);
}

/* The folder for fetched files, emptied of what an earlier run left; its fd or -1. */
static int tb_dir(struct vc *v, char *out, size_t cap, struct err *err)
{
    snprintf(out, cap, "%s/" DIR_NAME, v->d->state_dir);
    if (!v->tarball_dir_ready) {
        int sfd = open(v->d->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sfd >= 0) {
            sbx_safe_remove_tree(sfd, DIR_NAME);
            close(sfd);
        }
        if (mkdir(out, 0700) < 0 && errno != EEXIST)
            return err_set(err, 500, "internal", "", "cannot make %s: %s", out, strerror(errno));
        v->tarball_dir_ready = true;
    }
    int fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return err_set(err, 500, "internal", "", "cannot open %s: %s", out, strerror(errno));
    return fd;
}

void vc_tarball_create(struct vc *v, struct http_req *r, json_t *body, const char *url)
{
    struct err err = ERR_INIT;
    static bool curl_ready;
    if (!curl_ready && curl_global_init(CURL_GLOBAL_DEFAULT) == 0) curl_ready = true;
    sweep(v);
    if (atomic_load(&v->tarball_cancel)) {
        json_decref(body);
        http_reply_error(r, 503, "shutting_down", "", "sandboxd is stopping");
        return;
    }
    if (!v->tarball_worker && !(v->tarball_worker = proxy_worker_new(v->d->base, 2, &err))) {
        json_decref(body);
        vc_reply_err(r, &err);
        return;
    }
    char dir[400];
    int dfd = tb_dir(v, dir, sizeof dir, &err);
    if (dfd < 0) {
        json_decref(body);
        vc_reply_err(r, &err);
        return;
    }
    struct tb_job *j = xcalloc(1, sizeof *j);
    j->v = v;
    j->req = r;
    j->body = body;
    snprintf(j->url, sizeof j->url, "%s", url);
    unsigned char rnd[12];
    while (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    }
    char name[32];
    for (int i = 0; i < 12; i++)
        snprintf(name + 2 * i, 3, "%02x", rnd[i]);
    strcat(name, ".tar");
    snprintf(j->path, sizeof j->path, "%s/%s", dir, name);
    j->fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    close(dfd);
    if (j->fd < 0) {
        err_set(&err, 500, "internal", "", "cannot make %s: %s", j->path, strerror(errno));
        job_free(j);
        vc_reply_err(r, &err);
        return;
    }
    http_req_on_close(r, req_gone, j);
    proxy_worker_submit(v->tarball_worker, work, done, drop, j);
}

void vc_tarballs_free(struct vc *v)
{
    atomic_store(&v->tarball_cancel, true); /* a running fetch ends at its next callback */
    proxy_worker_free(v->tarball_worker);
    v->tarball_worker = NULL;
    while (v->tarballs) {
        struct tb_job *j = v->tarballs;
        v->tarballs = j->next;
        unlink(j->path);
        job_free(j);
    }
}
