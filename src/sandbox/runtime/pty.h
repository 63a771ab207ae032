/*
 * pty.h - interactive terminals in sandboxes: limits and the pure pieces of the
 * WebSocket protocol (docs/sandbox-api.md, "Terminals").
 *
 * A terminal is a process on a pseudo-terminal inside a sandbox's namespaces,
 * started through the sandbox's init (init.h, SPAWN_PTY) and carried over one
 * WebSocket: binary frames are raw terminal bytes both ways, text frames JSON
 * control messages. The daemon side lives in pty.c (struct sbx_pty, declared in
 * sandboxd_int.h); this header has what unit tests check without a sandbox.
 */
#ifndef REBUNO_SANDBOX_PTY_H
#define REBUNO_SANDBOX_PTY_H

#include <stddef.h>

#include "base/err.h"

#define SBX_PTYS_MAX 64 /* terminals per sandbox */
#define SBX_PTY_DEFAULT_COLS 80
#define SBX_PTY_DEFAULT_ROWS 24
#define SBX_PTY_DEFAULT_TERM "xterm-256color"
#define SBX_PTY_TERM_MAX 64             /* bytes of a TERM value */
#define SBX_PTY_CTL_MAX 4096            /* bytes of one control (text) message */
#define SBX_PTY_MSG_MAX (1u << 20)      /* bytes of any one client message */
#define SBX_PTY_OUT_HIGH (256u * 1024)  /* output queued to a client before reading stops */
#define SBX_PTY_IN_MAX (1u << 20)       /* input queued for the program before the client waits */
#define SBX_PTY_READ_CHUNK 16384        /* bytes per output frame at most */
#define SBX_PTY_ATTACH_TIMEOUT_MS 30000 /* a terminal nobody attaches to is hung up */
#define SBX_PTY_EXIT_GRACE_MS 200       /* after the exit, wait this long for EOF */
#define SBX_PTY_KILL_GRACE_MS 2000      /* after a hang-up, SIGKILL the session after */

enum sbx_pty_ctl_type { SBX_PTY_CTL_RESIZE = 1, SBX_PTY_CTL_SIGNAL };

struct sbx_pty_ctl {
    enum sbx_pty_ctl_type type;
    int cols, rows; /* resize: 1..SBX_PTY_DIM_MAX */
    int signal;     /* signal: 1..64 */
};

/*
 * Parse one client control message:
 *   {"type":"resize","cols":N,"rows":N}    {"type":"signal","signal":"INT" | 2}
 * Unknown types and fields, duplicate keys, out-of-range numbers and messages over
 * SBX_PTY_CTL_MAX bytes are errors. 0, or -1 with a 400 validation_error in err.
 */
int sbx_pty_parse_ctl(const char *p, size_t n, struct sbx_pty_ctl *out, struct err *err);

/* The server's last message: {"type":"exit","code":N,"signal":"NAME"|null}, where code
 * is 128 + the signal when one ended the process. Caller frees. */
char *sbx_pty_exit_msg(int code, int signal);

#endif
