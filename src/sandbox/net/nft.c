/*
 * nft.c - generate the daemon's nftables table and run nft (see nft.h).
 */
#include "sandbox/net/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"

#define NFT_TIMEOUT_MS 10000
#define NFT_OUT_MAX 4096

/* Addresses a sandbox never reaches, whatever its policy: link-local (which holds the
 * usual metadata address 169.254.169.254) and the other clouds' metadata services. */
static const char *const blocked = "169.254.0.0/16, 100.100.100.200, 168.63.129.16";

char *sbx_nft_ruleset(const struct sbx_nft_conf *c)
{
    struct buf b;
    buf_init(&b, 0);
    const char *t = c->table, *p = c->ifprefix;
    buf_printf(&b, "table inet %s\ndelete table inet %s\n", t, t);
    buf_printf(&b, "table inet %s {\n", t);
    buf_printf(&b, "\tset netpairs {\n\t\ttype ipv4_addr . ipv4_addr\n\t}\n");
    /* before NAT: no IPv6, no link-local / metadata, not even through the proxy */
    buf_printf(&b,
               "\tchain pre_early {\n"
               "\t\ttype filter hook prerouting priority -150; policy accept;\n"
               "\t\tiifname != \"%s*\" return\n"
               "\t\tmeta nfproto ipv6 drop\n"
               "\t\tip daddr { %s } reject with icmpx admin-prohibited\n"
               "\t}\n",
               p, blocked);
    /* NAT: a private network's members talk directly; 80/443 anywhere and DNS to the
     * host go to the proxy */
    buf_printf(&b,
               "\tchain pre_nat {\n"
               "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
               "\t\tiifname != \"%s*\" return\n"
               "\t\tip saddr . ip daddr @netpairs return\n"
               "\t\ttcp dport { 80, 443 } redirect to :%u\n"
               "\t\tfib daddr type local udp dport 53 redirect to :%u\n"
               "\t}\n",
               p, c->proxy_port, c->dns_port);
    /* after NAT: nothing is routed onwards except within a private network */
    buf_printf(&b,
               "\tchain pre_late {\n"
               "\t\ttype filter hook prerouting priority 0; policy accept;\n"
               "\t\tiifname != \"%s*\" return\n"
               "\t\tip saddr . ip daddr @netpairs accept\n"
               "\t\tfib daddr type local return\n"
               "\t\tmeta l4proto tcp reject with tcp reset\n"
               "\t\treject with icmpx admin-prohibited\n"
               "\t}\n",
               p);
    /* to the host itself: only the proxy, and only what was redirected to it */
    buf_printf(&b,
               "\tchain from_sandbox {\n"
               "\t\tct state established,related accept\n"
               "\t\ttcp dport %u ct original proto-dst { 80, 443 } accept\n"
               "\t\tudp dport %u ct original proto-dst 53 accept\n"
               "\t\tmeta l4proto tcp reject with tcp reset\n"
               "\t\treject with icmpx admin-prohibited\n"
               "\t}\n",
               c->proxy_port, c->dns_port);
    buf_printf(&b,
               "\tchain input {\n"
               "\t\ttype filter hook input priority 0; policy accept;\n"
               "\t\tiifname \"%s*\" jump from_sandbox\n"
               "\t\ttcp dport %u reject with tcp reset\n"
               "\t\tudp dport %u reject with icmpx port-unreachable\n"
               "\t}\n",
               p, c->proxy_port, c->dns_port);
    buf_printf(&b,
               "\tchain forward {\n"
               "\t\ttype filter hook forward priority 0; policy accept;\n"
               "\t\tiifname \"%s*\" ip saddr . ip daddr @netpairs accept\n"
               "\t\tiifname \"%s*\" meta l4proto tcp reject with tcp reset\n"
               "\t\tiifname \"%s*\" reject with icmpx admin-prohibited\n"
               "\t\toifname \"%s*\" drop\n"
               "\t}\n",
               p, p, p, p);
    buf_puts(&b, "}\n");
    return buf_steal(&b, NULL);
}

char *sbx_nft_drop_table(const char *table)
{
    struct buf b;
    buf_init(&b, 0);
    buf_printf(&b, "table inet %s\ndelete table inet %s\n", table, table);
    return buf_steal(&b, NULL);
}

char *sbx_nft_pairs(const char *table, bool add, const struct in_addr *a, const struct in_addr *b,
                    size_t n)
{
    struct buf o;
    buf_init(&o, 0);
    buf_printf(&o, "%s element inet %s netpairs { ", add ? "add" : "delete", table);
    for (size_t i = 0; i < n; i++) {
        char x[INET_ADDRSTRLEN], y[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a[i], x, sizeof x);
        inet_ntop(AF_INET, &b[i], y, sizeof y);
        buf_printf(&o, "%s%s . %s, %s . %s", i ? ", " : "", x, y, y, x);
    }
    buf_puts(&o, " }\n");
    return buf_steal(&o, NULL);
}

const char *sbx_nft_path(void)
{
    static const char *const where[] = {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
        if (access(where[i], X_OK) == 0) return where[i];
    return NULL;
}

/* Run nft with argv (argv[0] is replaced by the binary's path) and optional stdin text;
 * its output (stdout and stderr) goes to out (at most NFT_OUT_MAX bytes). */
static int nft_exec(char *const argv[], const char *input, struct buf *out)
{
    const char *bin = sbx_nft_path();
    if (!bin) return -ENOENT;
    int in[2] = {-1, -1}, res[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) < 0) return -errno;
    if (pipe2(res, O_CLOEXEC) < 0) {
        int e = -errno;
        close(in[0]);
        close(in[1]);
        return e;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, res[1], 1);
    posix_spawn_file_actions_adddup2(&fa, res[1], 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    /* a group of its own: a Ctrl-C meant for the daemon must not kill the nft that is
     * deleting its table during the shutdown that Ctrl-C started */
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    close(res[1]);
    if (rc != 0) {
        close(in[1]);
        close(res[0]);
        return -rc;
    }
    /* the scripts are a few KiB: they fit in the pipe, nft reads them before writing */
    size_t n = input ? strlen(input) : 0, off = 0;
    while (off < n) {
        ssize_t w = write(in[1], input + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(in[1]);
    int64_t end = clock_mono_ms() + NFT_TIMEOUT_MS;
    int e = 0;
    for (;;) {
        int left = (int)(end - clock_mono_ms());
        if (left <= 0) {
            e = -ETIMEDOUT;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd pf = {res[0], POLLIN, 0};
        int r = poll(&pf, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char chunk[1024];
        ssize_t got = read(res[0], chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (out->len < NFT_OUT_MAX)
            buf_append(out, chunk,
                       (size_t)got < NFT_OUT_MAX - out->len ? (size_t)got : NFT_OUT_MAX - out->len);
    }
    close(res[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (e) return e;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

int sbx_nft_run(const char *script, char *msg, size_t msglen)
{
    struct buf out;
    buf_init(&out, 0);
    char *argv[] = {"nft", "-f", "-", NULL};
    int e = nft_exec(argv, script, &out);
    if (msg && msglen) {
        /* one line is enough for a log: the first error line nft printed */
        const char *s = out.data ? out.data : "";
        const char *nl = strchr(s, '\n');
        snprintf(msg, msglen, "%.*s", nl ? (int)(nl - s) : (int)strlen(s), s);
        if (!*msg && e) snprintf(msg, msglen, "%s", strerror(-e == EIO ? EIO : -e));
    }
    buf_fini(&out);
    return e;
}

int sbx_nft_tables(const char *prefix, void (*fn)(const char *name, void *arg), void *arg)
{
    struct buf out;
    buf_init(&out, 0);
    char *argv[] = {"nft", "list", "tables", NULL};
    int e = nft_exec(argv, NULL, &out);
    if (e == 0 && out.data) {
        size_t pl = strlen(prefix);
        char *save = NULL;
        for (char *line = strtok_r(out.data, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            if (strncmp(line, "table inet ", 11) != 0) continue;
            const char *name = line + 11;
            if (strncmp(name, prefix, pl) == 0 && strlen(name) < 64) fn(name, arg);
        }
    }
    buf_fini(&out);
    return e;
}
