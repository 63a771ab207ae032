/*
 * seccomp.h - the system call filter every sandbox process runs under.
 *
 * Deny by default: an allow list of what ordinary programs use (shells, coreutils,
 * git, python, node, gcc/make, ssh and curl clients), and ENOSYS for everything else,
 * so libc falls back as on an older kernel (clone3 → clone) and a call a newer kernel
 * adds is never allowed by accident. What has been the door out of containers fails
 * with EPERM: mounting, new namespaces, kernel modules, kexec, keyrings, BPF, perf,
 * userfaultfd, handle-based opens, io_uring, the clock, terminal input injection, and
 * socket families other than unix, inet, inet6 and netlink (EAFNOSUPPORT; vsock in
 * particular, which would reach the VM host) or raw inet sockets. Nothing kills, so
 * ordinary programs see a clean error. The x86-64, x32 and i386 ABIs are all filtered
 * by the same names; any other architecture kills the process.
 */
#ifndef REBUNO_SANDBOX_SECCOMP_H
#define REBUNO_SANDBOX_SECCOMP_H

/* Compile the filter to BPF once, in this process, so that processes forked from it
 * load it without compiling: libseccomp takes ~45 ms to build the allow list's
 * program (three ABIs, a binary tree), and loading the ready program ~0.1 ms. Call it
 * before forking session inits (sbx_zygote_start does). Returns 0 or -errno. */
int sbx_seccomp_prepare(void);

/* Load the filter for the calling thread (and what it execs): the prepared program, or
 * one built now when none was prepared. Requires no_new_privs or CAP_SYS_ADMIN (in the
 * caller's user namespace), and sets no no_new_privs itself; after a prepare it
 * allocates nothing. Returns 0 or -errno. */
int sbx_seccomp_load(void);

/* Write the filter, as libseccomp's readable pseudo code, to fd (tests, debugging).
 * Returns 0 or -errno. */
int sbx_seccomp_export_pfc(int fd);

/* NULL-terminated lists of names (for docs and tests). Names the running libseccomp
 * does not know are skipped, i.e. left on the default (ENOSYS). */
extern const char *const sbx_seccomp_allowed[];  /* allowed whatever the arguments */
extern const char *const sbx_seccomp_denied[];   /* EPERM whatever the arguments */
extern const char *const sbx_seccomp_filtered[]; /* decided on their arguments */
extern const char *const sbx_seccomp_enosys[];   /* left on the default, on purpose */

#endif
