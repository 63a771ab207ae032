/*
 * init.h - pid 1 of a sandbox: spawns commands on request and reaps everything.
 *
 * The init is the session's first process, forked by sandboxd and set up by
 * spawn.c; it never re-executes. It waits on its control socket for SPAWN and
 * SIGNAL messages (proto.h) and on a signalfd for SIGCHLD. A command is forked
 * into its own session and process group, gets the three stdio descriptors that
 * came with the request, its user's uid, gid and groups, its cwd and environment,
 * and is exec'd with a PATH search of its own environment. Exec failures travel
 * back over a close-on-exec pipe, so a spawn answers SPAWNED or SPAWN_FAILED with
 * the stage and errno. Every child that exits is reaped (orphans re-parent to pid
 * 1); commands' exits are reported as EXITED with the raw wait status. When the
 * control socket closes (sandboxd is gone), init exits and the kernel kills the
 * whole pid namespace.
 */
#ifndef REBUNO_SANDBOX_INIT_H
#define REBUNO_SANDBOX_INIT_H

/* Serve on ctl until it closes. Never returns. */
void sbx_init_main(int ctl) __attribute__((noreturn));

/*
 * Search PATH (from envp, or a default) for file and execve it with argv/envp, like
 * execvpe but with the child's own environment. Returns only on failure, with errno
 * set (EACCES when some candidate was not executable, else the last error).
 */
void sbx_exec_search(const char *file, char *const argv[], char *const envp[]);

#endif
