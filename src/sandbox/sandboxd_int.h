/*
 * sandboxd_int.h - sandboxd's internal types, shared by sandbox.c (registry and
 * lifecycle), command.c (commands and their I/O) and api.c (HTTP handlers).
 *
 * Ownership: the daemon owns its sandboxes (a list in creation order); a sandbox
 * owns its session (while running or paused) and its commands (most recent last,
 * at most SBX_CMDS_KEPT finished ones). Watchers (waiting HTTP requests) belong to
 * api.c and are told when a command starts, produces output, finishes or goes away.
 * Everything runs on the loop thread; the daemon has no other threads (spawn.c
 * relies on this).
 */
#ifndef REBUNO_SANDBOX_SANDBOXD_INT_H
#define REBUNO_SANDBOX_SANDBOXD_INT_H

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "net/http.h"
#include "sandbox/cgroup.h"
#include "sandbox/files.h"
#include "sandbox/paths.h"
#include "sandbox/ring.h"
#include "sandbox/sandboxd.h"
#include "sandbox/spawn.h"
#include "sandbox/store.h"
#include "sandbox/users.h"

#define SBX_CMDS_KEPT 64         /* finished commands kept per sandbox */
#define SBX_CMDS_RUNNING_MAX 128 /* running commands per sandbox */
#define SBX_STDIN_MAX (8u << 20) /* bytes of stdin queued per command */
#define SBX_EXIT_GRACE_MS 200    /* after exit, wait this long for stray writers */
#define SBX_DEFAULT_TIMEOUT_MS (5 * 60 * 1000)
#define SBX_STOP_TIMEOUT_MS 5000
#define SBX_FREEZE_TIMEOUT_MS 2000

enum sbx_state { SBX_RUNNING, SBX_PAUSED, SBX_STOPPED };
enum sbx_cmd_status { CMD_STARTING, CMD_RUNNING, CMD_EXITED, CMD_FAILED };
enum sbx_event { SBX_EV_STARTED = 1, SBX_EV_OUTPUT = 2, SBX_EV_DONE = 4, SBX_EV_GONE = 8 };

struct sbx;
struct sbx_cmd;

struct sbxd {
    struct event_base *base;
    struct http_server *http;
    struct sbx_store *store;
    struct sbx_cg_root *cg;
    char *state_dir, *image_dir, *sandboxes_dir, *trash_dir;
    struct sbxd_config cfg;
    struct sbx *first, *last;
    int count;
    uint64_t cmd_seq;
    bool shutting_down;
    struct event *reap_ev; /* periodic reaping of cleaner processes */
    struct watch *watches; /* api.c's waiting requests */
};

struct sbx_session {
    struct sbx *sbx;
    struct sbx_proc proc;
    struct sbx_cgroup *cg;
    struct event *ctl_ev, *pid_ev;
    struct sbx_fs fs;
    char id[48];
    int64_t started_at;
};

struct sbx {
    struct sbxd *d;
    struct sbx *prev, *next;
    char id[40];
    char name[64];
    enum sbx_state state;
    uint32_t slot, uid_base;
    char image[64];
    json_t *metadata, *env;
    int64_t vcpus, memory_mb, pids_max, timeout_ms;
    bool on_timeout_pause;
    int64_t created_at, updated_at, started_at, stopped_at, expires_at, session_seq;
    char stop_reason[64];
    char *dir;
    struct sbx_session *sess;
    struct event *timeout_ev;
    struct sbx_cmd *cmds_first, *cmds_last;
    int ncmds, nrunning;
};

struct stdin_chunk {
    struct stdin_chunk *next;
    char *data;
    size_t len, off;
    bool close_after;
    struct watch *w; /* the request waiting for this chunk to be written, or NULL */
};

struct sbx_cmd {
    struct sbx *sbx;
    struct sbx_cmd *prev, *next;
    char id[40];
    uint64_t num; /* id on the wire to init */
    char session_id[48];
    json_t *argv; /* array: cmd, args... */
    char cwd[SBX_PATH_MAX + 1];
    char user[SBX_USER_NAME_MAX + 1];
    bool sudo;
    enum sbx_cmd_status status;
    int pid;
    int exit_code, term_signal;
    bool exited, timed_out, killed, detached;
    struct err error; /* why it failed to start */
    int64_t started_at, ended_at, timeout_ms;
    struct event *timeout_ev, *grace_ev;
    int fd_in, fd_out, fd_err;
    struct event *in_ev, *out_ev, *err_ev;
    struct sbx_ring out, err;
    struct stdin_chunk *in_head, *in_tail;
    size_t in_queued;
    bool in_closed;
    int watchers;
};

/* ---- sandbox.c: registry and lifecycle ---- */
struct sbx *sbx_find(struct sbxd *d, const char *ref);
struct sbx *sbx_create(struct sbxd *d, json_t *body, struct err *err);
int sbx_update(struct sbx *s, json_t *body, struct err *err);
int sbx_delete(struct sbx *s, struct err *err);
int sbx_stop(struct sbx *s, const char *reason, struct err *err);
int sbx_pause(struct sbx *s, struct err *err);
int sbx_resume(struct sbx *s, struct err *err);
int sbx_extend(struct sbx *s, int64_t ms, struct err *err);
/* Lazy resume for file and command calls. session: an explicit session id the
 * caller is pinned to (never resumes), or NULL. */
int sbx_ensure_running(struct sbx *s, const char *session, struct err *err);
json_t *sbx_json(struct sbx *s, bool full);
const char *sbx_state_name(enum sbx_state st);
int sbx_parse_state(const char *s, enum sbx_state *out);
int sbx_save(struct sbx *s, struct err *err);

/* ---- command.c ---- */
/* Start a command (the session must be running). The reply comes asynchronously:
 * watchers get SBX_EV_STARTED. NULL with err when it cannot even be sent. */
struct sbx_cmd *sbx_cmd_start(struct sbx *s, json_t *body, struct err *err);
struct sbx_cmd *sbx_cmd_find(struct sbx *s, const char *id);
json_t *sbx_cmd_json(const struct sbx_cmd *c);
int sbx_cmd_signal(struct sbx_cmd *c, int sig, bool group, struct err *err);
/* Queue stdin bytes; w (may be NULL) is told when they are written. */
int sbx_cmd_stdin(struct sbx_cmd *c, const char *data, size_t len, bool close_after,
                  struct watch *w, struct err *err);
bool sbx_cmd_done(const struct sbx_cmd *c);
/* The session ended: every command of it that has not finished is finished now. */
void sbx_cmds_session_ended(struct sbx *s);
/* Handle one message from init. */
void sbx_cmd_on_msg(struct sbx *s, uint32_t type, uint64_t id, int32_t a, int32_t b);
void sbx_cmds_free(struct sbx *s);

/* ---- api.c ---- */
void sbx_api_register(struct sbxd *d);
/* Tell every watcher of c about ev. */
void sbx_watch_notify(struct sbxd *d, struct sbx_cmd *c, int ev);
/* A stdin chunk a watcher waited for was written (ok) or dropped. */
void sbx_watch_stdin_done(struct watch *w, bool ok, size_t written);
void sbx_api_shutdown(struct sbxd *d);

#endif
