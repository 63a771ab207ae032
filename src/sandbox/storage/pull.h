/*
 * pull.h - pull jobs: POST /v1/images {"type":"pull","ref":...} starts (or joins) a job
 * that pulls an image from an OCI registry (registry.h) on a worker thread, and
 * GET /v1/images/jobs/:id[/stream] shows its progress (bytes per layer, as an SSE
 * stream). See docs/sandbox-api.md, "Pulling from a registry".
 *
 * A job's life, all on the loop but for the file work: the worker fetches the blobs into
 * the shared blob store (<state>/blobs), writes an OCI image layout of hard links to
 * them in <state>/pulls/.pull-<n>, and installs it as an image (layers.h); the loop then
 * records the image and tells every watcher. Only a complete image is ever recorded;
 * a failed pull leaves verified blobs in the store (a later pull reuses them) and
 * nothing else. Pulls of the same reference while one runs join it: one download.
 */
#ifndef REBUNO_SANDBOX_PULL_H
#define REBUNO_SANDBOX_PULL_H

#include <jansson.h>

#include "base/err.h"
#include "net/http.h"

struct sbxd;

struct sbx_pull_opts {
    const char *auth_file;         /* docker-style auth.json (daemon configuration) */
    const char *ca_file;           /* extra PEM CA for registries */
    const char *const *plain_http; /* registries reached over plain http */
    int n_plain_http;
    int stall_sec;                 /* a registry sending < 1 KiB/s this long fails */
};

/* At start (after the store is open): make the blob store, read the auth file, sweep
 * what interrupted pulls left. 0 or -1 with err. */
int sbx_pulls_open(struct sbxd *d, const struct sbx_pull_opts *o, struct err *err);
void sbx_pulls_register(struct sbxd *d);
/* POST /v1/images with "type": "pull" (body: the request's, still owned by the caller). */
void sbx_pull_post(struct sbxd *d, struct http_req *r, json_t *body);
/* sbxd_free: sbx_pulls_close, then forget every job. */
void sbx_pulls_free(struct sbxd *d);
/* Stop running pulls (they fail with 503 shutting_down), end their streams, join the
 * threads. Safe to call more than once. */
void sbx_pulls_close(struct sbxd *d);

#endif
