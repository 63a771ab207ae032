/*
 * vercel.h - the Vercel-Sandbox-compatible endpoint of sandboxd (docs/vercel.md): the
 * routes the official @vercel/sandbox SDK calls, served on their own HTTP server (their
 * own port), over the same core operations as /v1.
 *
 * Used by `rebuno sandboxd --vercel-listen ADDR:PORT` (src/cli/cmd_sandboxd.c).
 */
#ifndef REBUNO_SANDBOX_VERCEL_VERCEL_H
#define REBUNO_SANDBOX_VERCEL_VERCEL_H

struct sbxd;
struct http_server;

/* Register the routes and an auth filter (the daemon's local token, as a Bearer token)
 * on h, and the endpoint's observer of command events on d. h outlives nothing of d's:
 * shut it down before sbxd_free. */
void sbx_vercel_register(struct sbxd *d, struct http_server *h);

#endif
