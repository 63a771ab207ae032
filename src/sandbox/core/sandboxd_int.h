/*
 * sandboxd_int.h - sandboxd's internal types, shared by sandbox.c (registry and
 * lifecycle), command.c (commands and their I/O) and api.c (HTTP handlers).
 *
 * Ownership: the daemon owns its sandboxes (a list in creation order); a sandbox
 * owns its session (while running or paused) and its commands (most recent last,
 * at most SBX_CMDS_KEPT finished ones). Watchers (waiting HTTP requests) belong to
 * api.c and are told when a command starts, produces output, finishes or goes away.
 * Everything runs on the loop thread, but for worker threads (proxy/worker.h) that
 * touch only their own job: image imports (images.c), registry pulls (pull.c, with
 * their download and unpack helpers) and session teardowns (unmounts and drive
 * commits, sandbox.c). Inits are cloned by the single-threaded zygote; only
 * its fallback, a clone from the daemon itself (spawn.c), would rather there were no
 * other threads. A sandbox also owns its terminals (pty.c, struct sbx_pty), which
 * live while their session does.
 */
#ifndef REBUNO_SANDBOX_SANDBOXD_INT_H
#define REBUNO_SANDBOX_SANDBOXD_INT_H

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "sandbox/storage/layers.h"
#include "net/http.h"
#include "sandbox/runtime/cgroup.h"
#include "sandbox/storage/files.h"
#include "sandbox/core/observe.h"
#include "sandbox/core/paths.h"
#include "sandbox/runtime/ring.h"
#include "sandbox/core/sandboxd.h"
#include "sandbox/runtime/spawn.h"
#include "sandbox/storage/storage.h"
#include "sandbox/core/store.h"
#include "sandbox/runtime/users.h"

#define SBX_CMDS_KEPT 64         /* finished commands kept per sandbox */
#define SBX_CMDS_RUNNING_MAX 128 /* running commands per sandbox */
#define SBX_STDIN_MAX (8u << 20) /* bytes of stdin queued per command */
#define SBX_EXIT_GRACE_MS 200    /* after exit, wait this long for stray writers */
#define SBX_DEFAULT_TIMEOUT_MS (5 * 60 * 1000)
#define SBX_STOP_TIMEOUT_MS 5000
#define SBX_FREEZE_TIMEOUT_MS 2000

enum sbx_state { SBX_RUNNING, SBX_PAUSED, SBX_STOPPED };
enum sbx_cmd_status { CMD_STARTING, CMD_RUNNING, CMD_EXITED, CMD_FAILED };

struct sbx;
struct sbx_cmd;
struct sbx_pty;

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
    struct sbx_observer *observers, *observers_last; /* observe.h: front-ends, in order */
    struct sbx_storage *storage;   /* trees that snapshot cheaply (storage.h) */
    struct sbx_snaps *snaps;       /* snapshot.c */
    struct sbx_drives *drives;     /* drive.c */
    struct sbx_srcjob *srcjobs;    /* source.c: sources being set up */
    struct sbx_net *net;           /* net.c: proxy, veth pool, nftables (net.h) */
    struct sbx_builds *builds;     /* build.c: image builds and their jobs */
    struct proxy_worker *img_worker; /* images.c: the import thread (made on first use) */
    struct sbx_layers layers;      /* images.c: the layer store (layers.h) */
    int img_pending;               /* imports / pulls / collections in flight */
    struct sbx_pulls *pulls;         /* pull.c: registry pulls and their jobs */
    const struct local_auth *local; /* api.c: the token every caller but health sends */
    struct sbx_daemon *record;     /* daemons.h: our host-wide record and its lock */
    struct sbx_uidpool *uids;      /* uidpool.h: the uid ranges this state folder owns */
    int64_t files_budget; /* most pids x nofile one sandbox may have: fs.file-max / 4 */
    struct proxy_worker *td_worker; /* sandbox.c: the teardown thread (made on first use) */
    struct sbx_waiter *waiters, *waiters_last; /* sandbox.c: sbx_wait_quiet, in order */
    struct event *quiet_ev; /* runs the waiters of sandboxes no longer busy */
};

struct sbx_session {
    struct sbx *sbx;
    struct sbx_proc proc;
    struct sbx_cgroup *cg;
    struct event *ctl_ev, *pid_ev;
    struct sbx_fs fs;
    char id[48];
    int64_t started_at;
    struct sbx_netsess *net; /* net.c: its veth and proxy context, or NULL (loopback only) */
    const char *stopping;    /* the stop's reason once init got SIGKILL, else NULL */
    struct event *kill_ev;   /* bounds the wait for init's exit after that */
    /* the last cpu sample a cpu % was measured from (e2b metrics): the cgroup's usage
     * and clock_mono_ms() then; {0, session start} before the first */
    int64_t cpu_seen_us, cpu_seen_mono;
};

struct sbx {
    struct sbxd *d;
    struct sbx *prev, *next;
    char id[40];
    char name[64];
    enum sbx_state state;
    uint32_t slot, uid_base;
    char image[72]; /* SBX_IMAGE_DEFAULT or an imported image's sha256 hex */
    json_t *image_config; /* the image's config (env, workdir, user) while a session runs */
    char region[SBX_REGION_MAX + 1]; /* as created ([a-z0-9-]); SBX_REGION_DEFAULT */
    json_t *metadata, *env;
    int64_t vcpus, memory_mb, pids_max, timeout_ms;
    int64_t nofile;  /* RLIMIT_NOFILE of its processes (soft = hard) */
    int64_t disk_mb; /* quota of its tree (fs_dir) */
    bool disk_enforced; /* the store enforces disk_mb on this tree (btrfs simple quotas) */
    bool on_timeout_pause;
    /* no no_new_privs in its sessions: setuid programs (sudo) work inside (spawn.h) */
    bool allow_privilege_escalation;
    int64_t created_at, updated_at, started_at, stopped_at, expires_at, session_seq;
    char stop_reason[64];
    char *dir;
    struct sbx_session *sess;
    struct event *timeout_ev;
    struct sbx_cmd *cmds_first, *cmds_last;
    int ncmds, nrunning;
    /* snapshot.c, drive.c, source.c (stored as the row's `ext` JSON) */
    char *fs_dir;            /* the upper tree: <store>/fs/<id>, or <dir>/fs (older) */
    uint32_t data_base;      /* host uid of root in fs_dir's files (uid_base unless cloned) */
    json_t *mounts;          /* {"/path": {"drive_id", "mode"}}: for the next session */
    int64_t snap_expiration_ms; /* default for its snapshots; -1: the daemon's */
    json_t *origin;          /* where its files came from, or NULL */
    struct sbx_smount *smounts; /* the session's drive mounts (drive.c) */
    int nsmounts;
    struct sbx_pty *ptys; /* pty.c's terminals, newest first */
    int nptys;
    struct sbx_netcfg *net; /* net.c: network_policy, network_id, ports (NULL: defaults) */
    struct sbx_teardown *teardown; /* its last session's unmounts and commits, under way */
    bool deleting; /* deleted: gone from the API; removed once its stop is over */
};

struct stdin_chunk {
    struct stdin_chunk *next;
    char *data;
    size_t len, off;
    bool close_after;
    struct sbx_stdin_waiter *w; /* told when this chunk is written or dropped, or NULL */
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
/* By id or name; sandboxes being deleted are not found. */
struct sbx *sbx_find(struct sbxd *d, const char *ref);
/* By id, those being deleted included. */
struct sbx *sbx_find_id(struct sbxd *d, const char *id);
struct sbx *sbx_create(struct sbxd *d, json_t *body, struct err *err);
int sbx_update(struct sbx *s, json_t *body, struct err *err);
/* Delete s now, or when it has a session: stop it and delete it once the stop is over
 * (s->deleting; sbx_find no longer returns it). */
int sbx_delete(struct sbx *s, struct err *err);
/*
 * Stopping. sbx_stop_begin sends init SIGKILL and returns; init's pidfd ends the
 * session on the loop (at most SBX_STOP_TIMEOUT_MS later), and the slow rest, the
 * overlays' unmount (which writes back the store's dirty data) and the commits of
 * read-write drives, runs on the teardown thread. From the SIGKILL until that is over
 * the sandbox is busy: calls that act on it wait (sbx_wait_quiet). reason is a string
 * literal. sbx_stop does all of it before returning, on the loop (shutdown).
 */
void sbx_stop_begin(struct sbx *s, const char *reason);
int sbx_stop(struct sbx *s, const char *reason, struct err *err);
bool sbx_busy(const struct sbx *s);
/* fn(d, id, arg) runs on the loop once sandbox id is not busy (or gone: look it up
 * again), in the order the waits were made. The handle cancels it until then. */
typedef void (*sbx_quiet_fn)(struct sbxd *d, const char *id, void *arg);
struct sbx_waiter;
struct sbx_waiter *sbx_wait_quiet(struct sbx *s, sbx_quiet_fn fn, void *arg);
void sbx_wait_cancel(struct sbxd *d, struct sbx_waiter *w);
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
                  struct sbx_stdin_waiter *w, struct err *err);
bool sbx_cmd_done(const struct sbx_cmd *c);
/* The session ended: every command of it that has not finished is finished now. */
void sbx_cmds_session_ended(struct sbx *s);
/* Handle one message from init. */
void sbx_cmd_on_msg(struct sbx *s, uint32_t type, uint64_t id, int32_t a, int32_t b);
void sbx_cmds_free(struct sbx *s);

/* Who a command or terminal runs as, where, and with what environment. */
struct sbx_run_as {
    char user[SBX_USER_NAME_MAX + 1];
    char cwd[SBX_PATH_MAX + 1];
    bool sudo;
    struct sbx_user u; /* uid, gid and groups to run with (root's with sudo) */
    json_t *env;       /* NAME -> value; the caller json_decref()s it */
};
/* From body's "user", "cwd", "sudo" and "env" (validated) in s's running session. */
int sbx_run_as_prepare(struct sbx *s, json_t *body, struct sbx_run_as *ra, struct err *err);
/* Send init a SPAWN with fds (stdin, stdout, stderr), or when fds is NULL a SPAWN_PTY
 * of cols x rows (1..SBX_PTY_DIM_MAX). num is the id on the wire. */
int sbx_spawn_send(struct sbx *s, uint64_t num, json_t *argv, const struct sbx_run_as *ra,
                   int fds[3], uint16_t cols, uint16_t rows, struct err *err);

/* ---- pty.c: terminals ---- */
/* A message from init about a terminal: returns true when id is one (then handled).
 * fd (a descriptor that came with the message, or -1) is always taken: kept or closed. */
bool sbx_pty_on_msg(struct sbx *s, uint32_t type, uint64_t id, int32_t a, int32_t b, int fd);
/* The session ended: every terminal's process is dead; clients get the exit. */
void sbx_ptys_session_ended(struct sbx *s);
/* Free every terminal at once (sandbox freed); no client is told. */
void sbx_ptys_free(struct sbx *s);
/* The /v1/sandboxes/:ref/ptys routes (docs/sandbox-api.md, Terminals). */
void sbx_pty_routes(struct sbxd *d);
/* Terminals for front-ends other than /v1's WebSocket (the E2B endpoint). The client
 * is told when the terminal started (failed: why; it is detached then), gets output as
 * it comes (reading stops while pending() is over SBX_PTY_OUT_HIGH, until
 * sbx_pty_drained), and the exit (detached then). A client may detach and another
 * attach; the terminal runs on meanwhile, until its process ends or the session does. */
struct sbx_pty_client {
    void (*started)(void *arg, struct sbx_pty *p, const struct err *failed);
    void (*output)(void *arg, const void *data, size_t len);
    size_t (*pending)(void *arg);
    void (*exit)(void *arg, int code, int signal);
};
/* body: cmd (default /bin/bash), args, cwd, env, user, sudo, cols, rows, term, as /v1's
 * POST .../ptys. The session must be running. NULL with err. */
struct sbx_pty *sbx_pty_open(struct sbx *s, json_t *body, const struct sbx_pty_client *cl,
                             void *arg, struct err *err);
struct sbx_pty *sbx_pty_by_pid(struct sbx *s, int pid); /* a running one sbx_pty_open made */
struct sbx_pty *sbx_pty_next_running(struct sbx *s, struct sbx_pty *after);
void sbx_pty_attach(struct sbx_pty *p, const struct sbx_pty_client *cl, void *arg);
void sbx_pty_detach(struct sbx_pty *p);
void sbx_pty_drained(struct sbx_pty *p);
int sbx_pty_write(struct sbx_pty *p, const void *data, size_t len, struct err *err);
int sbx_pty_resize(struct sbx_pty *p, int cols, int rows, struct err *err);
void sbx_pty_kill(struct sbx_pty *p, int sig); /* its whole session, through init */
int sbx_pty_pid(const struct sbx_pty *p);
json_t *sbx_pty_argv(const struct sbx_pty *p); /* borrowed */
const char *sbx_pty_cwd(const struct sbx_pty *p);

/* Create with an origin: fork_from (a fork of that sandbox's current files), else
 * body's "source". sbx_create() is sbx_create_ex(d, body, NULL, err). */
struct sbx *sbx_create_ex(struct sbxd *d, json_t *body, struct sbx *fork_from, struct err *err);

/* ---- snapshot.c: upper trees, snapshots and forks ---- */
int sbx_snaps_open(struct sbxd *d, struct err *err); /* load, sweep leftovers, expiry timer */
void sbx_snaps_close(struct sbxd *d);
void sbx_snaps_shutdown(struct sbxd *d); /* stop the expiry timer */
/* Make s's upper tree: cloned from fork_from's live files, from body "source" (a
 * snapshot), or new and empty; then its /etc/hostname and /etc/hosts. Sets fs_dir,
 * data_base (and image, for a snapshot). 0 or -1 with err. */
int sbx_upper_make(struct sbx *s, const json_t *source, struct sbx *fork_from, struct err *err);
void sbx_upper_remove(struct sbx *s);
/* The operations behind the snapshot and fork routes, for every front-end. A snapshot
 * never stops s (a running one is frozen while its tree is cloned). exp: its expiration
 * in ms (0: never), -1 for s's or the daemon's default. Returns the /v1 snapshot object
 * (docs/sandbox-api.md), or NULL with err; took_us/frozen_us may be NULL. */
json_t *sbx_snapshot_take(struct sbx *s, int64_t exp, const char *name, int64_t *took_us,
                          int64_t *frozen_us, struct err *err);
/* A snapshot's name (name above; NULL or "": none): 1..SBX_SNAP_NAME_MAX of
 * [A-Za-z0-9._/-], starting with a letter or digit. Names need not be unique. */
#define SBX_SNAP_NAME_MAX 128
bool sbx_snapshot_name_valid(const char *name);
json_t *sbx_snapshot_find_json(struct sbxd *d, const char *id); /* NULL: none (or expired) */
/* The id of the newest live snapshot named name (owned by the registry: copy it), or NULL. */
const char *sbx_snapshot_named(struct sbxd *d, const char *name);
int sbx_snapshot_delete(struct sbxd *d, const char *id);         /* 0 or -ENOENT */
/* Snapshots in creation order after cursor (an id, or NULL), of sandbox (id or name; NULL:
 * all), named name (or with that id; NULL: any), at most limit; *next: the cursor of the
 * next page, or NULL. */
json_t *sbx_snapshot_list(struct sbxd *d, const char *sandbox, const char *name,
                          const char *cursor, long limit, const char **next);
/* A fork of src: its configuration, overridden by body's /v1 fork fields (validated). */
struct sbx *sbx_fork(struct sbxd *d, struct sbx *src, json_t *body, struct err *err);
/* err for a failed tree operation (e: -errno): 507 no_space when e says the store or a
 * quota is full (ENOSPC, EDQUOT), else 500 with code. Returns -1. */
int sbx_err_space(struct err *err, int e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Limit s's tree to mb MiB and set s->disk_enforced (false, and 0, where the store has
 * no quotas or the tree is not one of its subvolumes). -1 with err when quotas are on
 * but the limit could not be set. */
int sbx_disk_apply(struct sbx *s, int64_t mb, struct err *err);
/* The row's ext JSON <-> the struct; the sandbox object's extra members. */
void sbx_ext_load(struct sbx *s, const char *ext);
char *sbx_ext_dump(const struct sbx *s);
void sbx_ext_json(const struct sbx *s, json_t *o);
/* "mounts" and "snapshot_expiration_ms" of a create or update body. */
int sbx_ext_parse(struct sbx *s, const json_t *body, struct err *err);
void sbx_ext_free(struct sbx *s);
/* Routes of snapshot.c, drive.c and source.c. */
void sbx_api_register_ext(struct sbxd *d);
/* Small helpers for those handlers (snapshot.c). */
bool sbx_api_body(struct http_req *r, bool allow_empty, json_t **out);
struct sbx *sbx_api_sandbox(struct sbxd *d, struct http_req *r);

/* ---- drive.c: drives and their mounts ---- */
int sbx_drives_open(struct sbxd *d, struct err *err);
void sbx_drives_close(struct sbxd *d);
void sbx_drives_register(struct sbxd *d);
/* Validate a "mounts" map (004's path rules, drives by name or id) into the stored
 * form {"/path": {"drive_id", "mode"}}. */
int sbx_mounts_parse(struct sbxd *d, const json_t *v, json_t **out, struct err *err);
/* Mount the sandbox's drives for a new session (409 drive_attached when a read-write
 * drive has another writer, or is still being committed); fills in->mounts. Released
 * by sbx_mounts_release at the end of the session, which returns the commits of its
 * read-write drives (NULL: none): sbx_commits_work does the slow half (any thread),
 * sbx_commits_finish the rest (the loop; frees c); sbx_commits_run both, on the loop. */
int sbx_mounts_acquire(struct sbx *s, struct sbx_plan_input *in, struct err *err);
struct sbx_commits;
struct sbx_commits *sbx_mounts_release(struct sbx *s);
void sbx_commits_work(struct sbx_storage *st, struct sbx_commits *c);
void sbx_commits_finish(struct sbxd *d, struct sbx_commits *c);
void sbx_commits_run(struct sbxd *d, struct sbx_commits *c);
json_t *sbx_mounts_json(struct sbxd *d, const json_t *mounts);
/* The operations behind the drive routes, for every front-end; drives in the /v1 shape.
 * ensure: the drive of that name, or a new one of max bytes (0: the default), *created
 * saying which. delete: by id or name, 404 / 409 drive_attached; the object it was. */
json_t *sbx_drive_ensure(struct sbxd *d, const char *name, int64_t max, bool *created,
                         struct err *err);
json_t *sbx_drive_list_json(struct sbxd *d, const char *prefix); /* in creation order */
json_t *sbx_drive_delete(struct sbxd *d, const char *ref, struct err *err);

/* ---- source.c: git and tarball sources, tar uploads ---- */
/* Validate a create body's git/tarball "source" (others are handled elsewhere). */
int sbx_source_check(const json_t *source, struct err *err);
/* After a create: if s has a pending git/tarball source, run it and answer r when it
 * is done (true); false: nothing to do, the caller answers. */
bool sbx_source_begin(struct sbxd *d, struct sbx *s, struct http_req *r);
/* The same, answered by done: s once its source is set up (and any stop after it is
 * over), or NULL and why it failed (the sandbox is deleted then). */
typedef void (*sbx_source_done_fn)(struct http_req *r, struct sbx *s, const char *error);
bool sbx_source_begin_ex(struct sbxd *d, struct sbx *s, struct http_req *r,
                         sbx_source_done_fn done);
/* A command of a source job changed state (called from sbx_cmd_notify). */
void sbx_source_on_event(struct sbxd *d, struct sbx_cmd *c, int ev);
/* Extract a tar (plain, gzip, xz, bzip2 or zstd: by its first bytes) of len bytes into
 * target (absolute, normalized) of s's running session, as its root, through tar inside
 * the sandbox; done answers r when it is over (error: tar's complaint, or NULL). The
 * body is copied; r's close cancels nothing but the answer. */
typedef void (*sbx_extract_done_fn)(struct http_req *r, const char *error, const char *target,
                                    size_t bytes);
void sbx_extract_begin(struct sbxd *d, struct sbx *s, struct http_req *r, const char *target,
                       const void *body, size_t len, sbx_extract_done_fn done);
void sbx_sources_register(struct sbxd *d);
void sbx_sources_close(struct sbxd *d);

/* ---- observe.c ---- */
void sbx_observers_release(struct sbxd *d); /* sbxd_free: every observer's release */
void sbx_observers_shutdown(struct sbxd *d); /* sbxd_shutdown: every observer's on_shutdown */

/* ---- api.c ---- */
void sbx_api_register(struct sbxd *d);
/* While s is busy (stopping), park request r: fn(r, arg), its handler, runs again once
 * the stop is over (503 if the daemon is shutting down by then). Returns whether r was
 * parked; the handler then returns without replying. */
bool sbx_api_park(struct sbx *s, struct http_req *r, http_handler_fn fn, void *arg);
/* Answer r with status and the sandbox object (header: the ms since t0) once s is not
 * busy; at once when it is not. */
void sbx_api_reply_quiet(struct sbx *s, struct http_req *r, int status, const char *header,
                         int64_t t0);

/* images.c: imported images (POST/GET/DELETE /v1/images) */
int sbx_images_open(struct sbxd *d, struct err *err); /* the table; sweep failed imports */
void sbx_images_register(struct sbxd *d);
void sbx_images_close(struct sbxd *d); /* waits for a running import */
/* "host", "default", "sha256:<64 hex>" or an image reference (syntax only). */
bool sbx_image_ref_valid(const char *ref);
/* ref (NULL or "default": the default image) -> the directory name under images/ (hex,
 * or SBX_IMAGE_DEFAULT for host); 404 image_not_found naming it. */
int sbx_image_resolve(struct sbxd *d, const char *ref, const char *field, char *out,
                      size_t outsz, struct err *err);
/* The API name of an image directory name: "host", or the digest-pinned reference
 * ("name@sha256:<hex>", "sha256:<hex>" without a reference). */
void sbx_image_name(struct sbxd *d, const char *image, char *out, size_t outsz);
/* What a session of image needs: 1 for the host image (the host's /usr), 0 for a
 * self-contained one with *layers (heap strings: hex, top first; the caller frees) and
 * *config (the image config, or NULL), -1 with err. */
int sbx_image_session(struct sbxd *d, const char *image, char ***layers, size_t *n,
                      json_t **config, struct err *err);
struct sbx_image_rec;
/* Record an installed image (layers.h) and its reference, on the loop: *out the image
 * object, *created false when it was there already. 0 or -1 with err. */
int sbx_images_commit(struct sbxd *d, const struct sbx_image_rec *rec, json_t **out,
                      bool *created, struct err *err);
/* +1 while an import or pull installs layers with no row yet, -1 after: garbage
 * collection waits for none to be in flight. */
void sbx_images_busy(struct sbxd *d, int delta);
void sbx_api_shutdown(struct sbxd *d);

#endif
