/*
 * proto.h - the messages between sandboxd and a sandbox's init (pure encoding).
 *
 * They travel over a SOCK_SEQPACKET socketpair, one message per packet, so there
 * is no framing beyond a fixed header. A spawn request carries the command's stdio
 * as three SCM_RIGHTS file descriptors next to the packet. A terminal spawn
 * (SPAWN_PTY) carries none: init opens the pty pair in the sandbox's own devpts and
 * its SPAWNED reply carries the pty's master as one SCM_RIGHTS descriptor. sandboxd treats what
 * init sends as untrusted (init runs inside the sandbox): every decoder checks
 * lengths and bounds.
 */
#ifndef REBUNO_SANDBOX_PROTO_H
#define REBUNO_SANDBOX_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define SBX_MSG_MAX (256 * 1024) /* largest packet either side accepts */
#define SBX_MAX_GROUPS 64

enum sbx_msg_type {
    SBX_MSG_READY = 1,    /* init -> d: set-up done, waiting for work */
    SBX_MSG_SETUP_FAILED, /* child -> d: a = errno, payload = stage name */
    SBX_MSG_SPAWN,        /* d -> init: payload = spawn request, fds = stdin, stdout, stderr */
    SBX_MSG_SPAWNED,      /* init -> d: id, a = pid inside */
    SBX_MSG_SPAWN_FAILED, /* init -> d: id, a = errno, b = enum sbx_spawn_stage */
    SBX_MSG_EXITED,       /* init -> d: id, a = wait status */
    SBX_MSG_SIGNAL,       /* d -> init: id, a = signal, b = enum sbx_signal_scope */
    SBX_MSG_SPAWN_PTY,    /* d -> init: spawn request on a new pty, a = cols, b = rows;
                             SPAWNED then carries the master fd */
};

enum sbx_spawn_stage {
    SBX_STAGE_FORK = 1,
    SBX_STAGE_CWD,
    SBX_STAGE_CREDS,
    SBX_STAGE_EXEC,
    SBX_STAGE_PTY, /* opening the pty pair or making it the controlling terminal */
};

/* Who a SIGNAL reaches. */
enum sbx_signal_scope {
    SBX_SIG_PROCESS = 0, /* the command's process */
    SBX_SIG_GROUP = 1,   /* its process group */
    SBX_SIG_SESSION = 2, /* every process of its session (a terminal's jobs too) */
};

#define SBX_PTY_DIM_MAX 1000 /* cols and rows of a terminal: 1..SBX_PTY_DIM_MAX */

struct sbx_msg_hdr {
    uint32_t type;
    uint32_t len; /* payload bytes after the header */
    uint64_t id;  /* command id (spawn, spawned, exited, signal) */
    int32_t a, b;
};

struct sbx_spawn_req {
    uint64_t id;
    uint32_t uid, gid;
    uint32_t ngroups;
    uint32_t groups[SBX_MAX_GROUPS];
    const char *cwd;
    uint32_t argc, envc;
    const char **argv; /* argc entries (+ NULL when decoded) */
    const char **envp; /* envc entries (+ NULL when decoded) */
    bool pty;          /* encode as SPAWN_PTY with this window size */
    uint16_t cols, rows;
};

/* Header-only message into out (cleared first). */
void sbx_msg_encode(struct buf *out, uint32_t type, uint64_t id, int32_t a, int32_t b,
                    const void *payload, size_t len);
/* Check a received packet: header present and len consistent. 0 or -EBADMSG. */
int sbx_msg_decode(const void *p, size_t n, struct sbx_msg_hdr *h, const void **payload);

/* Encode into out (an initialised buf, reset first, with no cap below SBX_MSG_MAX):
 * SPAWN, or SPAWN_PTY when r->pty (cols and rows 1..SBX_PTY_DIM_MAX).
 * 0, or -E2BIG when it would not fit SBX_MSG_MAX, -EINVAL for bad counts or sizes. */
int sbx_spawn_encode(const struct sbx_spawn_req *r, struct buf *out);
/*
 * Decode a SPAWN or SPAWN_PTY payload (the caller sets pty, cols and rows from the
 * header). Strings point into payload (which must stay alive);
 * argv/envp are allocated NULL-terminated arrays the caller frees with
 * sbx_spawn_req_fini(). 0 or -EBADMSG.
 */
int sbx_spawn_decode(const void *payload, size_t len, uint64_t id, struct sbx_spawn_req *r);
void sbx_spawn_req_fini(struct sbx_spawn_req *r);

#endif
