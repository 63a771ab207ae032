/*
 * idmap.c - uid range arithmetic and user namespace creation (see idmap.h).
 *
 * The namespace comes from a helper cloned with CLONE_NEWUSER that blocks on a
 * pipe: the parent (root in the initial namespace) writes both maps, opens
 * /proc/PID/ns/user, then closes the pipe, kills and reaps the helper. The namespace
 * lives on through the fd. The helper runs on a small private stack and does
 * nothing but read(), so it is safe in any process state.
 */
#include "sandbox/runtime/idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int64_t sbx_idmap_max_slot(uint32_t first)
{
    uint64_t top = 0xfffffffeull; /* (uid_t)-1 is invalid; keep ranges strictly below */
    if ((uint64_t)first + SBX_IDMAP_COUNT > top) return -1;
    return (int64_t)((top - first - SBX_IDMAP_COUNT) / SBX_IDMAP_COUNT);
}

int sbx_idmap_host(uint32_t first, uint32_t slot, uint32_t inside, uint32_t *host)
{
    if (inside >= SBX_IDMAP_COUNT) return -ERANGE;
    int64_t max = sbx_idmap_max_slot(first);
    if (max < 0 || slot > (uint64_t)max) return -ERANGE;
    *host = first + slot * SBX_IDMAP_COUNT + inside;
    return 0;
}

int sbx_idmap_inside(uint32_t first, uint32_t slot, uint32_t host, uint32_t *inside)
{
    uint32_t base;
    if (sbx_idmap_host(first, slot, 0, &base) < 0) return -ERANGE;
    if (host < base || host - base >= SBX_IDMAP_COUNT) return -ERANGE;
    *inside = host - base;
    return 0;
}

int sbx_idmap_line(uint32_t base, char *out, size_t n)
{
    if ((uint64_t)base + SBX_IDMAP_COUNT > 0xffffffffull) return -ERANGE;
    int w = snprintf(out, n, "0 %u %u\n", base, SBX_IDMAP_COUNT);
    return w < 0 || (size_t)w >= n ? -ERANGE : 0;
}

struct helper_arg {
    int rfd, wfd;
};

__attribute__((no_sanitize("address"))) static int helper_main(void *p)
{
    struct helper_arg *a = p;
    char c;
    close(a->wfd); /* our copy: the read below must see EOF once the parent closes */
    while (read(a->rfd, &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
}

static int write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = write(fd, s, strlen(s));
    int e = n < 0 ? -errno : (size_t)n != strlen(s) ? -EIO : 0;
    close(fd);
    return e;
}

int sbx_userns_create(uint32_t base)
{
    char line[64];
    if (sbx_idmap_line(base, line, sizeof line) < 0) return -ERANGE;
    return sbx_userns_create_map(line);
}

int sbx_userns_create_remap(uint32_t from, uint32_t to)
{
    char map[96];
    if (from == 0 || to == 0 || (uint64_t)from + SBX_IDMAP_COUNT > 0xffffffffull ||
        (uint64_t)to + SBX_IDMAP_COUNT > 0xffffffffull)
        return -ERANGE;
    snprintf(map, sizeof map, "0 0 1\n%u %u %u\n", from, to, SBX_IDMAP_COUNT);
    return sbx_userns_create_map(map);
}

int sbx_userns_create_map(const char *line)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -errno;
    static char stack[16384] __attribute__((aligned(16)));
    struct helper_arg arg = {pfd[0], pfd[1]};
    /* CLONE_VM keeps the helper cheap; it touches nothing but its own stack frame and
     * `arg`, and the parent waits for it before returning. */
    pid_t pid = clone(helper_main, stack + sizeof stack, CLONE_NEWUSER | CLONE_VM | SIGCHLD, &arg);
    int ret;
    if (pid < 0) {
        ret = -errno;
        close(pfd[0]);
        close(pfd[1]);
        return ret;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    ret = write_file(path, line);
    if (ret == 0) {
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
        ret = write_file(path, line);
    }
    int fd = -1;
    if (ret == 0) {
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) ret = -errno;
    }
    close(pfd[1]); /* the helper's read returns 0 and it exits */
    close(pfd[0]);
    kill(pid, SIGKILL); /* in case it is still blocked for any other reason */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return ret < 0 ? ret : fd;
}
