/*
 * seccomp.c - build the sandbox's seccomp filter with libseccomp (see seccomp.h).
 *
 * Deny by default. The default action is ENOSYS, so a call that is not listed here
 * (including every call a newer kernel adds) looks to libc like an old kernel and
 * it falls back where it can. Calls that are known and dangerous get EPERM; a few
 * are allowed or denied on their arguments.
 *
 * Syscalls are named, not numbered: libseccomp maps each name to every ABI in the
 * filter (x86-64, x32 and i386 on an x86-64 host), and a name the running
 * libseccomp does not know is skipped, which leaves that call on the default.
 *
 * Argument rules are written as disjoint sets (for one syscall, no argument value
 * matches two rules with different actions), because libseccomp does not promise an
 * order between overlapping rules; and no syscall is both on a list and argument
 * filtered, because an unconditional rule swallows the conditional ones.
 */
#include "sandbox/runtime/seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/sched.h>
#include <sched.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* The name lists stay packed. */
/* clang-format off */

/* Allowed whatever the arguments. The kernel's own checks (the user namespace owns
 * none of the host's namespaces, capabilities are cut, rlimits and cgroups) still
 * apply to each of these. */
const char *const sbx_seccomp_allowed[] = {
    /* memory: what every dynamic binary, allocator and JIT (node, python) does */
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore",
    "mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "memfd_create",
    "remap_file_pages", "pkey_alloc", "pkey_free", "pkey_mprotect", "get_mempolicy",
    "set_mempolicy", "mbind", "map_shadow_stack", "mseal", "cachestat",
    /* threads, TLS and the C runtime's start-up */
    "arch_prctl", "set_thread_area", "get_thread_area", "set_tid_address", "set_robust_list",
    "get_robust_list", "rseq", "futex", "futex_time64", "futex_waitv", "futex_wake",
    "futex_wait", "futex_requeue", "restart_syscall",
    /* file descriptors and reading and writing them */
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "fcntl64", "flock",
    "lseek", "_llseek", "pipe", "pipe2", "sendfile", "sendfile64", "splice", "tee",
    "vmsplice", "copy_file_range", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
    "fadvise64", "fadvise64_64", "readahead", "fallocate", "ftruncate", "ftruncate64",
    "truncate", "truncate64",
    /* paths: open, stat, create, rename, links, permissions, times, xattrs */
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "stat64", "fstat64",
    "lstat64", "newfstatat", "fstatat64", "statx", "statfs", "fstatfs", "statfs64",
    "fstatfs64", "ustat", "access", "faccessat", "faccessat2", "getdents", "getdents64",
    "getcwd", "chdir", "fchdir", "chroot", "mkdir", "mkdirat", "rmdir", "rename", "renameat",
    "renameat2", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "readlink",
    "readlinkat", "mknod", "mknodat", "umask", "chmod", "fchmod", "fchmodat", "fchmodat2",
    "chown", "fchown", "lchown", "fchownat", "chown32", "fchown32", "lchown32", "utime",
    "utimes", "futimesat", "utimensat", "utimensat_time64", "getxattr", "lgetxattr",
    "fgetxattr", "getxattrat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    "listxattr", "llistxattr", "flistxattr", "listxattrat", "removexattr", "lremovexattr",
    "fremovexattr", "removexattrat", "file_getattr", "file_setattr", "inotify_init",
    "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    /* waiting for many descriptors, and descriptors that are events */
    "select", "_newselect", "pselect6", "pselect6_time64", "poll", "ppoll", "ppoll_time64",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
    "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_settime", "timerfd_settime64", "timerfd_gettime", "timerfd_gettime64",
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "io_pgetevents_time64",
    /* processes: fork (clone is filtered below), exec, wait, signals, pidfds */
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
    "waitpid", "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "rt_sigaction", "rt_sigprocmask",
    "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_sigtimedwait_time64", "sigaltstack", "sigreturn", "sigaction", "sigprocmask",
    "sigpending", "sigsuspend", "signal", "pause",
    /* identity: uids and groups inside the user namespace, sessions, limits */
    "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
    "getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32",
    "getgroups32", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "setuid32", "setgid32", "setreuid32", "setregid32",
    "setresuid32", "setresgid32", "setgroups32", "setfsuid32", "setfsgid32", "capget",
    "capset", "prctl", "getrlimit", "ugetrlimit", "setrlimit", "prlimit64", "getrusage",
    "times", "getpriority", "setpriority", "nice", "ioprio_get", "ioprio_set",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
    "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
    "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "getcpu",
    /* debugging the sandbox's own processes (strace, gdb): the pid namespace holds
     * nothing else, init is not dumpable, CAP_SYS_PTRACE is gone */
    "ptrace", "process_vm_readv", "process_vm_writev",
    /* a process may only narrow its own rights further */
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    /* clocks and timers, reading only (the setters are denied) */
    "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64",
    "clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "gettimeofday", "time",
    "alarm", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_settime64",
    "timer_gettime", "timer_gettime64", "timer_getoverrun", "timer_delete",
    /* system information */
    "uname", "sysinfo", "getrandom",
    /* sockets (socket() itself is filtered below; socketcall is denied) */
    "socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname",
    "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
    "recvmmsg_time64", "shutdown", "setsockopt", "getsockopt",
    /* System V and POSIX IPC, all in the sandbox's own IPC namespace */
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop",
    "semtimedop_time64", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "ipc", "mq_open",
    "mq_unlink", "mq_timedsend", "mq_timedsend_time64", "mq_timedreceive",
    "mq_timedreceive_time64", "mq_notify", "mq_getsetattr",
    NULL,
};

/* Known and dangerous: EPERM whatever the arguments. */
const char *const sbx_seccomp_denied[] = {
    /* file systems and mounts */
    "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "open_tree_attr", "mount_setattr", "swapon", "swapoff",
    "quotactl", "quotactl_fd",
    /* namespaces (clone is filtered on its flags below) */
    "unshare", "setns",
    /* the kernel itself */
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load",
    "kexec_file_load", "reboot", "syslog", "acct", "iopl", "ioperm", "uselib", "vm86",
    "vm86old", "modify_ldt", "lookup_dcookie", "nfsservctl", "get_kernel_syms",
    "query_module", "settimeofday", "clock_settime", "clock_settime64", "clock_adjtime",
    "clock_adjtime64", "adjtimex", "stime", "sethostname", "setdomainname",
    /* keyrings, bpf, perf, userfaultfd, handle-based opens, io_uring */
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "fanotify_init", "kcmp",
    /* hide the socket family (i386) */
    "socketcall",
    NULL,
};

/* Allowed or denied on their arguments (the rules below). */
const char *const sbx_seccomp_filtered[] = {"clone", "socket", "ioctl", "personality", NULL};

/* Names whose calls must end in ENOSYS, so that libc falls back (documentation and
 * tests: the default action does it). clone3 passes its flags in memory the filter
 * cannot read; glibc then uses clone, whose flags it can. */
const char *const sbx_seccomp_enosys[] = {"clone3", NULL};

/* clang-format on */

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int add(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
               const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return 0; /* unknown to this libseccomp: the default */
    int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    /* -EDOM/-EINVAL: the syscall does not exist on one of the ABIs; fine. */
    return r == -EDOM || r == -EINVAL ? 0 : r;
}

static int add_list(scmp_filter_ctx ctx, uint32_t action, const char *const *names)
{
    int r = 0;
    for (const char *const *p = names; r == 0 && *p; p++)
        r = add(ctx, action, *p, 0, NULL);
    return r;
}

/* clone: allowed without any namespace flag, EPERM with one. */
static int clone_rules(scmp_filter_ctx ctx)
{
    static const unsigned long ns[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
                                       CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP, CLONE_NEWTIME};
    unsigned long all = 0;
    for (size_t i = 0; i < N(ns); i++)
        all |= ns[i];
    struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, all, 0);
    int r = add(ctx, SCMP_ACT_ALLOW, "clone", 1, &c);
    for (size_t i = 0; r == 0 && i < N(ns); i++) {
        c = (struct scmp_arg_cmp)SCMP_A0_64(SCMP_CMP_MASKED_EQ, ns[i], ns[i]);
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c);
    }
    return r;
}

/* socket(): unix and netlink of any type; inet and inet6 only as streams and
 * datagrams (raw and packet: EPERM, as without CAP_NET_RAW; SCTP's seqpacket, DCCP and
 * the rest: ESOCKTNOSUPPORT); every other family EAFNOSUPPORT (packet, vsock, which
 * would reach the VM host, alg, bluetooth...). The rules cover every value. */
/* An inet stream or datagram socket: protocol 0 or TCP / UDP only. Any other protocol
 * (SCTP's one-to-one streams, UDP-Lite, ICMP datagrams, ...) gets EPROTONOSUPPORT, so an
 * unprivileged socket() cannot make the host load a protocol module. Disjoint rules: the
 * allowed values, each value below the highest one, and everything above it (high bits
 * included). */
static int inet_protocol_rules(scmp_filter_ctx ctx, int af, int type)
{
    int proto = type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP;
    struct scmp_arg_cmp c[3] = {SCMP_A0_64(SCMP_CMP_EQ, (scmp_datum_t)af),
                                SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)type),
                                SCMP_A2_64(SCMP_CMP_EQ, 0)};
    int r = 0;
    for (int p = 0; r == 0 && p <= proto; p++) {
        c[2] = SCMP_A2_64(SCMP_CMP_EQ, (scmp_datum_t)p);
        r = add(ctx, p == 0 || p == proto ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(EPROTONOSUPPORT),
                "socket", 3, c);
    }
    if (r == 0) {
        c[2] = SCMP_A2_64(SCMP_CMP_GT, (scmp_datum_t)proto);
        r = add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket", 3, c);
    }
    return r;
}

static int socket_rules(scmp_filter_ctx ctx)
{
    static const int any_type[] = {AF_UNIX, AF_NETLINK};
    static const int inet[] = {AF_INET, AF_INET6};
    static const int allowed_af[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}; /* sorted */
    int r = 0;
    for (size_t i = 0; r == 0 && i < N(any_type); i++) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_EQ, (scmp_datum_t)any_type[i]);
        r = add(ctx, SCMP_ACT_ALLOW, "socket", 1, &c);
    }
    for (size_t i = 0; r == 0 && i < N(inet); i++)
        for (int t = 0; r == 0 && t <= 0xf; t++) { /* the type's low nibble (SOCK_TYPE_MASK) */
            if (t == SOCK_STREAM || t == SOCK_DGRAM) {
                r = inet_protocol_rules(ctx, inet[i], t);
                continue;
            }
            uint32_t act = t == SOCK_RAW || t == SOCK_PACKET ? SCMP_ACT_ERRNO(EPERM)
                                                             : SCMP_ACT_ERRNO(ESOCKTNOSUPPORT);
            struct scmp_arg_cmp c[2] = {SCMP_A0_64(SCMP_CMP_EQ, (scmp_datum_t)inet[i]),
                                        SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)t)};
            r = add(ctx, act, "socket", 2, c);
        }
    /* the other families, as the ranges between the allowed ones */
    int lo = 0;
    for (size_t i = 0; r == 0 && i < N(allowed_af); i++) {
        for (int af = lo; r == 0 && af < allowed_af[i]; af++) {
            struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_EQ, (scmp_datum_t)af);
            r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
        }
        lo = allowed_af[i] + 1;
    }
    if (r == 0) { /* everything above the last allowed family, high bits included */
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_GE, (scmp_datum_t)lo);
        r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
    }
    return r;
}

/* ioctl: EPERM for terminal input injection (TIOCSTI, TIOCLINUX), allowed otherwise.
 * The kernel truncates the request to 32 bits, so the rules look at the low 32 bits
 * only. "Not one of the bad values" is written as disjoint allow rules: a request that
 * differs from them on a bit they share (one rule per bit), or that has their shared
 * bits and another combination of the bits where they differ (one rule each). */
static int ioctl_rules(scmp_filter_ctx ctx)
{
    static const uint32_t bad[] = {TIOCSTI, TIOCLINUX};
    uint32_t shared = 0xffffffffu;
    for (size_t i = 1; i < N(bad); i++)
        shared &= ~(bad[i] ^ bad[0]);
    uint32_t common = bad[0] & shared, differ = ~shared;
    int r = 0;
    for (int b = 0; r == 0 && b < 32; b++) {
        uint32_t bit = 1u << b;
        if (!(shared & bit)) continue;
        struct scmp_arg_cmp c = SCMP_A1_64(SCMP_CMP_MASKED_EQ, bit, ~common & bit);
        r = add(ctx, SCMP_ACT_ALLOW, "ioctl", 1, &c);
    }
    uint32_t p = 0; /* every subset of the differing bits */
    do {
        bool is_bad = false;
        for (size_t i = 0; i < N(bad); i++)
            is_bad |= (bad[i] & differ) == p;
        struct scmp_arg_cmp c = SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffu, common | p);
        if (r == 0 && !is_bad) r = add(ctx, SCMP_ACT_ALLOW, "ioctl", 1, &c);
        p = (p - differ) & differ;
    } while (p != 0);
    for (size_t i = 0; r == 0 && i < N(bad); i++) {
        struct scmp_arg_cmp c = SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffu, bad[i]);
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &c);
    }
    return r;
}

/* personality: the query, linux and linux32, uname26, and no-ASLR (gdb, setarch -R)
 * allowed; EPERM for the flags that weaken memory protection or change the ABI
 * (READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ...); anything else ENOSYS. The EPERM rules
 * require bit 31 clear so they are disjoint from the 0xffffffff query. */
static int personality_rules(scmp_filter_ctx ctx)
{
    static const uint32_t ok[] = {PER_LINUX,         PER_LINUX32,
                                  UNAME26,           UNAME26 | PER_LINUX32,
                                  ADDR_NO_RANDOMIZE, ADDR_NO_RANDOMIZE | PER_LINUX32,
                                  0xffffffffu};
    static const uint32_t bad[] = {MMAP_PAGE_ZERO,   READ_IMPLIES_EXEC, ADDR_COMPAT_LAYOUT,
                                   ADDR_LIMIT_32BIT, ADDR_LIMIT_3GB,    FDPIC_FUNCPTRS,
                                   SHORT_INODE,      WHOLE_SECONDS,     STICKY_TIMEOUTS};
    int r = 0;
    for (size_t i = 0; r == 0 && i < N(ok); i++) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0xffffffffu, ok[i]);
        r = add(ctx, SCMP_ACT_ALLOW, "personality", 1, &c);
    }
    for (size_t i = 0; r == 0 && i < N(bad); i++) {
        struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, bad[i] | 0x80000000u, bad[i]);
        r = add(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &c);
    }
    return r;
}

static int build(scmp_filter_ctx *out)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
    if (!ctx) return -ENOMEM;
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r == 0 && seccomp_arch_native() == SCMP_ARCH_X86_64) {
        /* the same names on the 32-bit ABIs, so int 0x80 or x32 cannot go around */
        r = seccomp_arch_add(ctx, SCMP_ARCH_X86);
        if (r == 0 || r == -EEXIST) r = seccomp_arch_add(ctx, SCMP_ARCH_X32);
        if (r == -EEXIST) r = 0;
    }
    /* no_new_privs is the caller's to set (spawn.c), never libseccomp's: a session
     * that allows privilege escalation loads the filter without it */
    if (r == 0) r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
    /* a binary tree of syscall numbers, where this libseccomp can */
    if (r == 0) (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r == 0) r = add_list(ctx, SCMP_ACT_ALLOW, sbx_seccomp_allowed);
    if (r == 0) r = add_list(ctx, SCMP_ACT_ERRNO(EPERM), sbx_seccomp_denied);
    if (r == 0) r = clone_rules(ctx);
    if (r == 0) r = socket_rules(ctx);
    if (r == 0) r = ioctl_rules(ctx);
    if (r == 0) r = personality_rules(ctx);
    if (r < 0) {
        seccomp_release(ctx);
        return r;
    }
    *out = ctx;
    return 0;
}

/* The program sbx_seccomp_prepare compiled (NULL until then); forked children inherit it. */
static struct sock_filter *prepared;
static unsigned short prepared_len;

int sbx_seccomp_prepare(void)
{
    if (prepared) return 0;
    scmp_filter_ctx ctx;
    int r = build(&ctx);
    if (r < 0) return r;
    /* libseccomp 2.5 exports BPF to a descriptor only: a memfd, read back */
    int fd = memfd_create("rebuno-seccomp", MFD_CLOEXEC);
    if (fd < 0) r = -errno;
    else r = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    off_t size = r == 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (r == 0 && (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
                   size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
        r = -EINVAL;
    struct sock_filter *prog = NULL;
    if (r == 0) {
        prog = malloc((size_t)size);
        if (!prog) r = -ENOMEM;
        else if (pread(fd, prog, (size_t)size, 0) != size) r = errno ? -errno : -EIO;
    }
    if (fd >= 0) close(fd);
    if (r < 0) {
        free(prog);
        return r;
    }
    prepared = prog;
    prepared_len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    return 0;
}

int sbx_seccomp_load(void)
{
    if (prepared) {
        /* what seccomp_load does with our attributes: no flags (no TSYNC, no log) */
        struct sock_fprog p = {.len = prepared_len, .filter = prepared};
        return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p) < 0 ? -errno : 0;
    }
    scmp_filter_ctx ctx;
    int r = build(&ctx);
    if (r < 0) return r;
    r = seccomp_load(ctx);
    seccomp_release(ctx);
    return r;
}

int sbx_seccomp_export_pfc(int fd)
{
    scmp_filter_ctx ctx;
    int r = build(&ctx);
    if (r < 0) return r;
    r = seccomp_export_pfc(ctx, fd);
    seccomp_release(ctx);
    return r;
}
