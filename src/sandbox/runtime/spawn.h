/*
 * spawn.h - start a session: the process that becomes a sandbox's init.
 *
 * Inits are not forked from sandboxd itself but from a small "zygote": a process
 * sandboxd forks once at start-up, before it has read a single request, so an init's
 * memory (a copy-on-write image of its parent) holds nothing of other tenants.
 * sbx_session_spawn() asks the zygote over a socket; the zygote makes the session's
 * user namespace, clones a child into new mount, pid, uts and ipc namespaces and a
 * network namespace of its own (a ready one from the zygote's pool, see spawn.c, or
 * a new one) and hands back a pidfd and the control socket; sandboxd then waits
 * until the child reports READY (or why it could not). If the zygote is gone,
 * sandboxd does the same itself. The child, in order (bubblewrap style, each step
 * checked):
 *   1. resets signal handlers, wipes the daemon's argv/environ, closes every
 *      inherited descriptor but its two, and moves itself into the session's cgroup;
 *   2. runs the mount plan (plan.h) and pivots into the sandbox root;
 *   3. sets the hostname and brings up loopback (the only interface; a pooled
 *      namespace has it up already);
 *   4. unshares a cgroup namespace;
 *   5. enters the user namespace and becomes its root (host uid = base): from here
 *      on every other namespace belongs to the host's user namespace, so root
 *      inside cannot mount, change the network or sysctls, or load anything;
 *   6. keeps only a few capabilities (caps.h), sets no_new_privs, makes itself
 *      non-dumpable (so nothing inside can ptrace it or read its memory), sets
 *      RLIMIT_NOFILE (soft and hard: without CAP_SYS_RESOURCE nothing inside can
 *      raise it) and loads the seccomp filter (seccomp.h). With `setuid` (a
 *      sandbox's allow_privilege_escalation) it sets no no_new_privs, so setuid
 *      programs (sudo) work inside: the filter is then loaded first, while the
 *      child still holds CAP_SYS_ADMIN in the session's user namespace (which is
 *      what the kernel asks of a filter without no_new_privs), and the
 *      capabilities are cut after it. A setuid-root program can then only become
 *      root of that user namespace, with the bounding set cut in step 6: exactly
 *      what a command run as root has (a mapped, unprivileged host uid, the same
 *      filter, cgroup and namespaces);
 *   7. becomes init (init.h).
 * The parent keeps a pidfd (for waiting), the control socket and O_PATH descriptors
 * of the sandbox's root (for the files API) and /usr, which keep its two overlays
 * mounted after init has exited (sbx_session_unpin).
 */
#ifndef REBUNO_SANDBOX_SPAWN_H
#define REBUNO_SANDBOX_SPAWN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "sandbox/runtime/cgroup.h"
#include "sandbox/runtime/plan.h"

struct sbx_spawn_params {
    struct sbx_plan_input plan;
    const char *hostname;
    struct sbx_cgroup *cg; /* created with the session's limits */
    int timeout_ms;        /* for the child to report READY */
    uint32_t nofile;       /* RLIMIT_NOFILE (soft = hard) of init and so of everything inside */
    bool setuid;           /* no no_new_privs: setuid programs inside work (step 6) */
};

struct sbx_proc {
    pid_t pid;  /* host pid of init */
    int pidfd;  /* readable when init has exited */
    int ctl;    /* control socket (non-blocking) */
    int rootfd; /* O_PATH of the sandbox's "/" (and a pin on its overlay) */
    int usrfd;  /* O_PATH of its "/usr": a pin on that overlay */
};

#define SBX_PINS 2 /* descriptors that keep a session's overlays alive */

/* Remember the daemon's argv/environ area (from /proc/self/stat): a session's init
 * wipes it and renames itself "rebuno-init", so /proc/1/cmdline and environ inside
 * show no host paths, settings or environment. Call once at daemon start. */
void sbx_spawn_set_title_area(void);

/* Fork the zygote. Call once, early, while the daemon is single-threaded and holds
 * no tenant data. 0 or -errno (sessions are then cloned by the daemon itself). */
int sbx_zygote_start(void);
/* Close the zygote's socket; it exits. */
void sbx_zygote_stop(void);

/* 0, or -1 with err (the child is gone then). */
int sbx_session_spawn(const struct sbx_spawn_params *p, struct sbx_proc *out, struct err *err);

/* SIGKILL init (the pid namespace dies with it), wait at most timeout_ms for it to
 * exit, close the descriptors. Returns 0 or -ETIMEDOUT (descriptors closed anyway;
 * whoever is its parent reaps it). */
int sbx_session_kill(struct sbx_proc *p, int timeout_ms);
/* SIGKILL init without waiting (its pidfd becomes readable when it has exited). */
int sbx_session_signal_kill(const struct sbx_proc *p);
/* Take the descriptors that pin the session's overlays out of p (rootfd, usrfd).
 * Closing the last of them unmounts the overlays, which syncs the file system under
 * them: it blocks for as long as writing back the dirty data takes, so the caller
 * closes them where waiting is harmless. */
void sbx_session_unpin(struct sbx_proc *p, int pins[SBX_PINS]);
/* Reap any of our children that exited (late inits, cleaners): waitpid(-1, WNOHANG). */
void sbx_reap_zombies(void);

#endif
