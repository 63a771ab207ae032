/*
 * observe.h - how the sandbox service core tells its front-ends (the /v1 API, and the
 * E2B and Vercel endpoints beside it) about commands they wait on.
 *
 * A front-end registers one observer per daemon and hears every command event: started
 * (or failed to start), output, done, gone (its sandbox was deleted). It finds its own
 * waiters among them. A caller that writes stdin may pass a waiter, told once its bytes
 * are in the pipe or dropped; a waiter that goes away first calls sbx_stdin_forget.
 * Everything runs on the loop thread. Observers are told in registration order, after
 * the core's own users (source jobs).
 */
#ifndef REBUNO_SANDBOX_CORE_OBSERVE_H
#define REBUNO_SANDBOX_CORE_OBSERVE_H

#include <stdbool.h>
#include <stddef.h>

struct sbxd;
struct sbx;
struct sbx_cmd;

enum sbx_event { SBX_EV_STARTED = 1, SBX_EV_OUTPUT = 2, SBX_EV_DONE = 4, SBX_EV_GONE = 8 };

struct sbx_observer {
    /* ev: a mask of enum sbx_event. c stays valid during the call; after SBX_EV_GONE it is
     * freed, so forget it then. */
    void (*on_cmd)(struct sbx_observer *o, struct sbx_cmd *c, int ev);
    /* s's session ended (stopped, crashed, deleted), before its trees are unmounted: let
     * go of anything held inside them (may be NULL) */
    void (*on_session_end)(struct sbx_observer *o, struct sbx *s);
    /* sbxd_shutdown began (may be NULL): let go of what keeps the loop running (threads'
     * notifications, timers), so the loop can end before sbxd_free */
    void (*on_shutdown)(struct sbx_observer *o);
    /* called by sbxd_free, last (may be NULL): free what holds o */
    void (*release)(struct sbx_observer *o);
    struct sbx_observer *next; /* the core's */
};

/* Register o; it lives until sbxd_free calls its release. */
void sbx_observe(struct sbxd *d, struct sbx_observer *o);
/* Tell the core's users and every observer about ev on c (command.c calls this). */
void sbx_cmd_notify(struct sbxd *d, struct sbx_cmd *c, int ev);
/* Tell every observer that s's session ended (sandbox.c calls this). */
void sbx_session_notify(struct sbxd *d, struct sbx *s);

struct sbx_stdin_waiter {
    /* ok: every byte of the chunk is in the pipe; !ok: the command closed its stdin or
     * finished first (written: how many got through) */
    void (*done)(struct sbx_stdin_waiter *w, bool ok, size_t written);
};

/* w goes away before its chunk was written: the core will not call it. */
void sbx_stdin_forget(struct sbx_cmd *c, struct sbx_stdin_waiter *w);

#endif
