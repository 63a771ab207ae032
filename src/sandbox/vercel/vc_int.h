/*
 * vc_int.h - what the files of the Vercel-compatible endpoint share: its state, the
 * session ids it hands out, the object mapping (objects.c), the command routes and
 * their NDJSON streams (logs.c) and the file routes (files.c). routes.c has the rest.
 */
#ifndef REBUNO_SANDBOX_VERCEL_VC_INT_H
#define REBUNO_SANDBOX_VERCEL_VC_INT_H

#include <stdatomic.h>

#include "sandbox/core/sandboxd_int.h"
#include "sandbox/vercel/vercel.h"

#define VC_CWD "/vercel/sandbox" /* the session cwd, as on Vercel */
#define VC_REGION "local"
#define VC_SID_MAX 96
#define VC_JSON_MAX (1u << 20)

#define VC_LIST_MAX 200 /* items of a list page */
#define VC_URL_MAX 2048
#define VC_TARBALL_MAX (1 << 30) /* bytes of a tarball source fetched by URL */
#define VC_TOKEN_HEX 64    /* an interactive token: 32 random bytes in hex */
#define VC_TICKETS_MAX 32  /* interactive tokens handed out and not yet used */
#define VC_TICKET_MS 60000 /* how long one is good for */

struct vc_stream;
struct tb_job;
struct proxy_worker;

/* interactive.c: a one-time token for the WebSocket of a session's terminal */
struct vc_ticket {
    char token[VC_TOKEN_HEX + 1]; /* "" when the slot is free */
    char sid[VC_SID_MAX];
    int64_t expires; /* epoch ms */
};

struct vc {
    struct sbx_observer o;     /* first: the core hands it back */
    struct sbxd *d;
    struct http_server *h;
    struct vc_stream *streams; /* logs.c: NDJSON streams and long-polls */
    struct vc_ticket tickets[VC_TICKETS_MAX];
    struct tb_job *tarballs; /* tarball.c: fetched files whose source job runs */
    struct proxy_worker *tarball_worker;
    atomic_bool tarball_cancel;
    bool tarball_dir_ready;
};

/* ---- routes.c ---- */
/* The sandbox of session sid ("sbs_<sandbox id>_<n>") when n is its current session
 * and that session runs (a paused one is resumed); else an answer: 404 for an unknown
 * sid, 410 session_stopped for an ended session (the SDK then resumes the sandbox and
 * retries). While the sandbox is stopping, r is parked and self runs again once it is
 * over; NULL then too. */
struct sbx *vc_session_sbx(struct vc *v, struct http_req *r, http_handler_fn self);
/* The sandbox sid names, whatever the state of that session (commands outlive it). */
struct sbx *vc_sid_sbx(struct vc *v, struct http_req *r);
/* The JSON object body of r, or an answer (400/413) and NULL. */
json_t *vc_body(struct http_req *r, bool allow_empty);
/* The "limit" query of a list: 1..VC_LIST_MAX, default 50; -1 when answered 400. */
int vc_query_limit(struct http_req *r, long *out);
/* Answer a create once its source is set up (s), or failed (error). */
void vc_source_done(struct http_req *r, struct sbx *s, const char *error);
/* err with the /v1 field names mapped to the SDK's (timeout_ms -> timeout ...). */
void vc_reply_err(struct http_req *r, struct err *err);

/* ---- objects.c ---- */
void vc_sid(const struct sbx *s, int64_t seq, char out[VC_SID_MAX]);
/* Parse a sid: the sandbox id (37 bytes) and the session number. 0 or -1. */
int vc_sid_parse(const char *sid, char id[40], int64_t *seq);
json_t *vc_session_json(struct sbx *s);
json_t *vc_sandbox_json(struct sbx *s);
json_t *vc_routes_json(struct sbx *s);
/* {sandbox, session, routes[, resumed]} */
json_t *vc_sandbox_reply(struct sbx *s, int resumed);
json_t *vc_cmd_json(const struct sbx_cmd *c);
/* A /v1 snapshot object as the SDK's Snapshot (consumed). */
json_t *vc_snapshot_json(struct sbxd *d, json_t *snap);
/* A network policy as the SDK sends it -> the /v1 network_policy (new reference), or NULL
 * with err. */
json_t *vc_policy_in(const json_t *p, struct err *err);
/* The sandbox's (redacted) /v1 policy -> {mode} or the legacy {mode:"custom", ...}. */
json_t *vc_policy_out(struct sbx *s);
/* Epoch ms of an ISO 8601 UTC time as the core writes them; 0 for null/invalid. */
int64_t vc_iso_ms(const json_t *v);

/* ---- logs.c ---- */
/* How many bytes of p[0..n) end with whole UTF-8 characters (a split last one waits). */
size_t vc_utf8_whole(const unsigned char *p, size_t n);
void vc_cmd_routes(struct vc *v);
void vc_on_cmd(struct sbx_observer *o, struct sbx_cmd *c, int ev);

/* ---- drives.c ---- */
void vc_drive_routes(struct vc *v);
/* The SDK's mounts -> /v1's (new reference), or NULL with err; and back, for s. */
json_t *vc_mounts_in(const json_t *m, struct err *err);
json_t *vc_mounts_out(struct sbx *s);

/* ---- files.c ---- */
void vc_file_routes(struct vc *v);

/* ---- tarball.c ---- */
bool vc_tarball_url_ok(const char *url); /* http(s), no spaces or controls, bounded */
/* Fetch url, then create the sandbox of body (a /v1 create body, taken) with it as a
 * tarball source, extracted into VC_CWD; r is answered as the create. */
void vc_tarball_create(struct vc *v, struct http_req *r, json_t *body, const char *url);
void vc_tarballs_free(struct vc *v);

/* ---- interactive.c ---- */
void vc_interactive_routes(struct vc *v);
/* Whether method + path is the terminal's WebSocket, which its token (not the Bearer
 * token: WebSocket clients send no headers) guards. */
bool vc_interactive_path(const char *method, const char *path);

#endif
