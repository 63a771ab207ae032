/*
 * e2b_int.h - what the files of the E2B endpoint share: the endpoint's state, the
 * Connect framing (connect.c), the sandbox and user an envd request addresses (e2b.c),
 * and each part's route registration.
 */
#ifndef REBUNO_SANDBOX_E2B_INT_H
#define REBUNO_SANDBOX_E2B_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "net/http.h"
#include "sandbox/core/sandboxd_int.h"

/* The envd version we advertise: default user (>= 0.4.0), CloseStdin (>= 0.5.2),
 * octet-stream uploads, streamed or gzip (>= 0.5.7), file metadata (>= 0.6.2), entry
 * info in watch events (>= 0.6.3), allowNetworkMounts on watches (>= 0.6.4: accepted;
 * no directory the files layer touches is on a network file system, watch.c). */
#define E2B_ENVD_VERSION "0.6.4"
#define E2B_DEFAULT_USER "user"
/* File metadata (X-Metadata-KEY: value) is kept as the user xattr "user.e2b.KEY". */
#define E2B_XATTR_PREFIX "e2b."
#define E2B_TOKEN_HEX 64

struct e2b_stream;
struct e2b_kill_wait;

struct e2b {
    struct sbx_observer o;
    struct sbxd *d;
    struct http_server *http;
    unsigned char secret[32];     /* keys the per-sandbox envd access tokens */
    struct e2b_stream *streams;   /* process.c: open Start/Connect streams */
    struct e2b_kill_wait *kills;  /* process.c: SendSignals waiting for their process's end */
};

/* ---- e2b.c ---- */
/* The envd access token of sandbox id (hex, NUL-terminated). */
void e2b_access_token(const struct e2b *e, const char *id, char out[E2B_TOKEN_HEX + 1]);
/* The control-plane error shape {"code": status, "message"}. */
void e2b_api_error(struct http_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void e2b_api_err(struct http_req *r, const struct err *e);
/* The control plane's sandbox of :id (E2B ids are ours), unless it is stopping: then r
 * waits (fn runs again) and NULL is returned, as for an unknown one after a 404. */
struct sbx *e2b_api_sandbox(struct e2b *e, struct http_req *r, http_handler_fn fn);
/* The body as a JSON object (empty: {}); false after answering 400. */
bool e2b_api_body(struct http_req *r, json_t **out);
/* body's "timeout" (whole seconds, 1 .. SBX_TIMEOUT_MAX_MS / 1000) into *out when
 * present. 0 or -1 with err (400 field timeout). */
int e2b_timeout_s(const json_t *body, int64_t *out, struct err *err);
/* The sandbox an envd request addresses (E2b-Sandbox-Id), running (resumed lazily).
 * NULL after answering (502 for an unknown one, as E2B's edge does) or after parking
 * r while the sandbox stops (fn runs again then). */
struct sbx *e2b_envd_sandbox(struct e2b *e, struct http_req *r, http_handler_fn fn);
/* The same for a sandbox found otherwise (NULL: answer 502). */
struct sbx *e2b_envd_running(struct e2b *e, struct http_req *r, http_handler_fn fn, struct sbx *s);
/* The acting user: name (NULL: the request's Basic user, else "user"), made on first
 * use when it is the default one. 0 or -1 with err. */
int e2b_user(struct sbx *s, struct http_req *r, const char *name, struct sbx_user *u,
             struct err *err);
/* EntryInfo of path (Stat's answer): type, permissions, owner, times, metadata. NULL
 * with err. */
json_t *e2b_stat_entry(const struct sbx *s, const struct sbx_fs *fs, const char *path,
                       struct err *err);
/* The session's files as u sees them (files.h no_user_links). */
struct sbx_fs e2b_fs(const struct sbx *s, const struct sbx_user *u);
/* Normalize path for u (relative: from u's home). 0 or -1 with err (400 field). */
int e2b_path(const char *in, const struct sbx_user *u, const char *field, char *out,
             struct err *err);

/* ---- connect.c: the Connect protocol, JSON mode ---- */
/* A unary request's message (the body, a JSON object). NULL after answering 400. */
json_t *cx_unary_body(struct http_req *r);
/* A server-streaming request's message: the body's single envelope. NULL after
 * answering. */
json_t *cx_stream_body(struct http_req *r);
/* Unary success: 200 application/json with msg (stolen; NULL: {}). */
void cx_reply(struct http_req *r, json_t *msg);
/* Unary error: the status for code, {"code","message"}. */
void cx_error(struct http_req *r, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The Connect code for one of our errors (404 -> not_found, ...). */
const char *cx_code(const struct err *e);
void cx_error_err(struct http_req *r, const struct err *e);
/* Streams: start (200 application/connect+json); one message envelope (msg stolen;
 * 0, or -EAGAIN / -EPIPE as http_stream_write: then nothing was queued, send it again
 * after the drain callback); the end-of-stream envelope (code NULL: success), which
 * also ends the reply (-EAGAIN: it did not, call again after the drain). */
void cx_stream_start(struct http_req *r);
int cx_stream_send(struct http_req *r, json_t *msg);
int cx_stream_end(struct http_req *r, const char *code, const char *message);

/* ---- the parts' routes ---- */
void e2b_control_routes(struct e2b *e);
void e2b_snapshot_routes(struct e2b *e);
/* network.c: E2B's network settings (NULL: none) -> a network_policy (*out, new);
 * internet: allow_internet_access of the create (true unless it said false). */
int e2b_network_policy(const json_t *net, bool internet, json_t **out, struct err *err);
/* network.c: the sandbox's policy as E2B's network object for getInfo ({allowOut,
 * denyOut, rules?}, header values redacted); new. */
json_t *e2b_network_info(const struct sbx *s);
/* control.c: the Sandbox object of create, connect and fork */
json_t *e2b_sandbox_json(struct e2b *e, const struct sbx *s);
void e2b_process_routes(struct e2b *e);
void e2b_files_routes(struct e2b *e);
void e2b_fs_routes(struct e2b *e);
/* fs.c: make path and its missing parents as u (0755, u's uid and gid), as envd does */
int e2b_mkdirs(const struct sbx_fs *fs, const char *path, const struct sbx_user *u,
               struct err *err);
/* fs.c: a listing or watch failed with 404 on a path that is no directory: say so */
void e2b_not_a_dir(const struct sbx_fs *fs, const char *path, struct err *err);
/* watch.c: WatchDir streams, ended with their sandbox's session */
void e2b_watch_routes(struct e2b *e);
void e2b_watch_session_end(struct e2b *e, struct sbx *s);
void e2b_watch_shutdown(struct e2b *e);
/* process.c: a command event (the endpoint's observer passes it on). */
void e2b_process_on_cmd(struct e2b *e, struct sbx_cmd *c, int ev);
void e2b_process_shutdown(struct e2b *e);
/* process.c: answer every SendSignal still waiting (the daemon is shutting down). */
void e2b_process_kills_end(struct e2b *e);
/* pty.c: terminals, which process.c's RPCs reach by pid too. e2b_pty_start answers a
 * Start with a "pty"; e2b_pty_connect answers a Connect to a terminal (true) or leaves
 * r (false); e2b_pty_signal is false when pid is no terminal of s. */
void e2b_pty_start(struct e2b *e, struct sbx *s, struct http_req *r, const json_t *body,
                   const struct sbx_user *u);
bool e2b_pty_connect(struct e2b *e, struct sbx *s, struct http_req *r, const json_t *body);
void e2b_pty_list(struct sbx *s, json_t *arr);
int e2b_pty_input(struct sbx *s, int64_t pid, const void *data, size_t len, struct err *err);
bool e2b_pty_signal(struct sbx *s, int64_t pid, int sig, struct err *err);
int e2b_pty_update(struct sbx *s, int64_t pid, const json_t *body, struct err *err);

#endif
