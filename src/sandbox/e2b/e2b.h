/*
 * e2b.h - the E2B-compatible endpoint of sandboxd (docs/e2b.md): the control-plane
 * REST routes of E2B's API, envd's /health and /files routes and its Connect-protocol
 * RPCs (process.Process, filesystem.Filesystem), all on one HTTP server, so the
 * official `e2b` SDK drives this machine's sandboxes with only E2B_API_URL,
 * E2B_SANDBOX_URL and E2B_API_KEY changed. A front-end over the same core operations
 * the /v1 API uses; `rebuno sandboxd --e2b-listen ADDR` turns it on.
 */
#ifndef REBUNO_SANDBOX_E2B_H
#define REBUNO_SANDBOX_E2B_H

struct sbxd;
struct http_server;

/* Register the endpoint's routes on h (its own server) and its observer on d. Every
 * request must carry d's local token (X-API-KEY on the control plane) or the access
 * token a create or connect returned (X-Access-Token on envd routes). */
void sbx_e2b_register(struct sbxd *d, struct http_server *h);

#endif
