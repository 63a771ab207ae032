/*
 * seccomp.c - build the sandbox's seccomp filter with libseccomp (see seccomp.h).
 *
 * Syscalls are named, not numbered, so a name the running libseccomp does not know
 * is skipped rather than failing the whole filter. clone is filtered on its flags
 * (any CLONE_NEW* bit is denied); clone3 passes its flags in memory the filter
 * cannot read, so it gets ENOSYS and glibc falls back to clone. socketcall (the
 * i386 multiplexer) is denied because it would hide the socket family.
 */
#include "sandbox/seccomp.h"

#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

const char *const sbx_seccomp_denied[] = {
    /* file systems and mounts */
    "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "swapon", "swapoff", "quotactl",
    "quotactl_fd",
    /* namespaces */
    "unshare", "setns",
    /* the kernel itself */
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load",
    "kexec_file_load", "reboot", "syslog", "acct", "iopl", "ioperm", "uselib", "vm86",
    "vm86old", "lookup_dcookie", "nfsservctl", "get_kernel_syms", "query_module",
    "settimeofday", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
    "adjtimex", "stime",
    /* keyrings, bpf, perf, userfaultfd, handle-based opens, io_uring */
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "fanotify_init", "kcmp",
    /* hide the socket family (i386) */
    "socketcall",
    NULL,
};

/* Socket families a sandbox may create; everything else gets EAFNOSUPPORT. */
static const int allowed_af[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

static int add(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return 0; /* unknown to this libseccomp: nothing to deny */
    int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    /* -EDOM/-EINVAL: the syscall does not exist on one of the ABIs; fine. */
    return r == -EDOM || r == -EINVAL ? 0 : r;
}

int sbx_seccomp_load(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) return -ENOMEM;
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r == 0 && seccomp_arch_native() == SCMP_ARCH_X86_64) {
        r = seccomp_arch_add(ctx, SCMP_ARCH_X86);
        if (r == 0 || r == -EEXIST) r = seccomp_arch_add(ctx, SCMP_ARCH_X32);
        if (r == -EEXIST) r = 0;
    }
    for (const char *const *p = sbx_seccomp_denied; r == 0 && *p; p++)
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), *p, 0, NULL);

    /* clone with any namespace flag */
    static const unsigned long ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,
                                             CLONE_NEWNET,  CLONE_NEWUTS, CLONE_NEWIPC,
                                             CLONE_NEWCGROUP, CLONE_NEWTIME};
    for (size_t i = 0; r == 0 && i < sizeof ns_flags / sizeof ns_flags[0]; i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c);
    }
    if (r == 0) r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);

    /* socket(): deny every family but the allowed ones, as ranges between them */
    int lo = 0;
    for (size_t i = 0; r == 0 && i <= sizeof allowed_af / sizeof allowed_af[0]; i++) {
        int hi = i < sizeof allowed_af / sizeof allowed_af[0] ? allowed_af[i] : -1;
        if (hi < 0) { /* everything above the last allowed family */
            struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_GE, (scmp_datum_t)lo);
            r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
            break;
        }
        for (int af = lo; r == 0 && af < hi; af++) {
            struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)af);
            r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
        }
        lo = hi + 1;
    }

    /* terminal input injection */
    static const unsigned long bad_ioctls[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; r == 0 && i < 2; i++) {
        struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, bad_ioctls[i]);
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &c);
    }
    if (r == 0) r = seccomp_load(ctx);
    seccomp_release(ctx);
    return r;
}
