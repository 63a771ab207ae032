/*
 * build.h - image builds: POST /v1/images {"type":"build","recipe":...} starts a job
 * that runs a recipe (recipe.h) step by step and installs the result as an image;
 * GET /v1/images/builds/:id[/stream] shows it (steps, log, SSE stream). See
 * docs/sandbox-api.md, "Building an image".
 *
 * All on the loop but the file work (buildfs.h, the layer store: a worker thread).
 * Each RUN runs in a sandbox of this daemon (sbx_create, sbx_cmd_start: the normal
 * isolation; the build's "network_policy", else deny-all) on an image of the layers so
 * far; once it exits 0, the sandbox is stopped and its upper tree's changes become one
 * layer. COPY makes a layer from the context folder without a sandbox; ENV, WORKDIR and
 * USER change the config.
 * A step whose parent state and instruction are those of an earlier build reuses its
 * layer (the build_cache table). Only a complete image is ever recorded.
 */
#ifndef REBUNO_SANDBOX_BUILD_H
#define REBUNO_SANDBOX_BUILD_H

#include <jansson.h>

#include "net/http.h"

struct sbxd;

/* The table and the routes (GET /v1/images/builds/...); sbx_images_register calls it. */
void sbx_builds_register(struct sbxd *d);
/* POST /v1/images with "type": "build" (body still owned by the caller). */
void sbx_build_post(struct sbxd *d, struct http_req *r, json_t *body);
/* Shutdown: running builds fail (503 shutting_down), streams end, the thread joins. */
void sbx_builds_close(struct sbxd *d);

#endif
