/*
 * seccomp.h - the system call filter every sandbox process runs under.
 *
 * Default allow, with a deny list of what a sandbox never needs and what has been
 * the door out of containers: mounting, new namespaces, kernel modules, kexec,
 * keyrings, BPF, perf, userfaultfd, handle-based opens, io_uring, terminal input
 * injection, and socket families other than unix, inet, inet6 and netlink (vsock
 * in particular, which would reach the VM host). Denied calls fail with EPERM (or
 * ENOSYS / EAFNOSUPPORT where callers expect that to fall back), never kill, so
 * ordinary programs see a clean error. The x86-64, x32 and i386 ABIs are all
 * filtered; any other architecture kills the process.
 */
#ifndef REBUNO_SANDBOX_SECCOMP_H
#define REBUNO_SANDBOX_SECCOMP_H

/* Build and load the filter for the calling thread (and what it execs). Requires
 * no_new_privs or CAP_SYS_ADMIN. Returns 0 or -errno. */
int sbx_seccomp_load(void);

/* The names of the denied system calls, NULL-terminated (for docs and tests). */
extern const char *const sbx_seccomp_denied[];

#endif
