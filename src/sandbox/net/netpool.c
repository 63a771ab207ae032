/*
 * netpool.c - veth pairs made in place, their address indexes and locks (netpool.h).
 */
#include "sandbox/net/netpool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "sandbox/net/nl.h"

#define TAG_OFF ((off_t)1 << 32) /* tag locks live past every index lock */
#define SWEEP_MAX 4096

struct sbx_netpool {
    struct sbx_netpool_conf c;
    int lockfd;
    char prefix[16]; /* "rb<tag>h" */
    uint32_t max_idx, cursor;
    uint8_t *used; /* bitmap of indexes this daemon holds */
    struct sbx_nl nl;
};

/* ------------------------------------------------------------------ locks */

static int lock_at(int fd, off_t off, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

static bool held_by_other(int fd, off_t off)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) < 0) return true; /* when in doubt, leave it alone */
    return fl.l_type != F_UNLCK;
}

bool sbx_netpool_tag_alive(const struct sbx_netpool *p, uint32_t tag)
{
    if (tag == p->c.tag) return true;
    return held_by_other(p->lockfd, TAG_OFF + (off_t)tag);
}

static bool used(const struct sbx_netpool *p, uint32_t i)
{
    return p->used[i / 8] & (1u << (i % 8));
}

static void set_used(struct sbx_netpool *p, uint32_t i, bool on)
{
    if (on)
        p->used[i / 8] |= (uint8_t)(1u << (i % 8));
    else
        p->used[i / 8] &= (uint8_t) ~(1u << (i % 8));
}

/* ------------------------------------------------------------------ names */

/* "rb<6 hex>[hs]<index>" (earlier versions also named sandbox ends "s") */
static bool parse_name(const char *n, uint32_t *tag, char *kind, uint32_t *idx)
{
    size_t len = strlen(n);
    if (len < 10 || len > 15 || n[0] != 'r' || n[1] != 'b') return false;
    uint32_t t = 0;
    for (int i = 2; i < 8; i++) {
        char c = n[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        t = t * 16 + (uint32_t)v;
    }
    if (n[8] != 'h' && n[8] != 's') return false;
    uint32_t x = 0;
    for (size_t i = 9; i < len; i++) {
        if (n[i] < '0' || n[i] > '9') return false;
        x = x * 10 + (uint32_t)(n[i] - '0');
    }
    *tag = t;
    *kind = n[8];
    *idx = x;
    return true;
}

struct names {
    char (*v)[16];
    size_t n;
};

static void collect(const char *name, void *arg)
{
    struct names *ns = arg;
    uint32_t tag, idx;
    char kind;
    if (!parse_name(name, &tag, &kind, &idx) || ns->n >= SWEEP_MAX) return;
    snprintf(ns->v[ns->n++], 16, "%s", name);
}

/* Delete links of ours (tag), of dead daemons, and any holding index `only` (when
 * not UINT32_MAX: an index we just locked, so whoever named it is gone). */
static int sweep(struct sbx_netpool *p, uint32_t only)
{
    struct names ns = {xcalloc(SWEEP_MAX, 16), 0};
    int e = sbx_nl_link_names(&p->nl, collect, &ns);
    int removed = 0;
    for (size_t i = 0; e == 0 && i < ns.n; i++) {
        uint32_t tag, idx;
        char kind;
        parse_name(ns.v[i], &tag, &kind, &idx);
        bool stale =
            only != UINT32_MAX ? idx == only : tag == p->c.tag || !sbx_netpool_tag_alive(p, tag);
        if (!stale) continue;
        int r = sbx_nl_link_del(&p->nl, ns.v[i]);
        if (r == 0) removed++;
        if (r < 0 && r != -ENODEV)
            log_warn("cannot remove a leftover veth", "link=%s error=\"%s\"", ns.v[i],
                     strerror(-r));
    }
    free(ns.v);
    return e < 0 ? e : removed;
}

/* ------------------------------------------------------------------ pool */

static void sysctl_write(const char *path, const char *v)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return; /* e.g. no IPv6 on this host */
    if (write(fd, v, strlen(v)) < 0) {
    }
    close(fd);
}

static void pair_of(const struct sbx_netpool *p, uint32_t idx, struct sbx_veth *v)
{
    memset(v, 0, sizeof *v);
    v->idx = idx;
    idx &= 0xffff; /* at most 5 digits: names stay within IFNAMSIZ */
    snprintf(v->host, sizeof v->host, "rb%06xh%u", p->c.tag & 0xffffff, idx);
    uint32_t base = ntohl(p->c.base.s_addr);
    v->host_addr.s_addr = htonl(base + 2 * idx);
    v->sbx_addr.s_addr = htonl(base + 2 * idx + 1);
}

/* Create and configure the pair for a locked index. */
static int make_pair(struct sbx_netpool *p, const struct sbx_veth *v, int netns_fd)
{
    int e = sbx_nl_veth_add(&p->nl, v->host, "eth0", netns_fd);
    if (e == -EEXIST) { /* ours from before: start over */
        sbx_nl_link_del(&p->nl, v->host);
        e = sbx_nl_veth_add(&p->nl, v->host, "eth0", netns_fd);
    }
    if (e < 0) return e;
    char path[128];
    snprintf(path, sizeof path, "/proc/sys/net/ipv4/conf/%s/rp_filter", v->host);
    sysctl_write(path, "1");
    snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", v->host);
    sysctl_write(path, "1");
    int idx = sbx_nl_link_index(&p->nl, v->host);
    if (idx < 0) e = idx;
    if (!e) e = sbx_nl_addr_add(&p->nl, idx, v->host_addr, 31);
    if (!e) e = sbx_nl_link_up(&p->nl, idx);
    if (e < 0) sbx_nl_link_del(&p->nl, v->host);
    return e;
}

int sbx_netpool_create(struct sbx_netpool *p, int netns_fd, struct sbx_veth *out)
{
    for (uint32_t n = 0; n < p->max_idx; n++) {
        uint32_t i = p->cursor; /* round robin: an index is not reused at once */
        p->cursor = p->cursor + 1 >= p->max_idx ? 1 : p->cursor + 1;
        if (i == 0 || used(p, i)) continue;
        if (lock_at(p->lockfd, (off_t)i, F_WRLCK) < 0) continue; /* another daemon's */
        sweep(p, i); /* a dead daemon may have left a link with this index */
        pair_of(p, i, out);
        int e = make_pair(p, out, netns_fd);
        if (e < 0) {
            lock_at(p->lockfd, (off_t)i, F_UNLCK);
            return e;
        }
        set_used(p, i, true);
        return 0;
    }
    return -ENOSPC;
}

static int open_lockfile(const char **path)
{
    struct stat st;
    *path = stat("/run", &st) == 0 && S_ISDIR(st.st_mode) ? "/run/rebuno-netpool.lock"
                                                           : "/tmp/rebuno-netpool.lock";
    int fd = open(*path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    return fd < 0 ? -errno : fd;
}

int sbx_netpool_reap(uint32_t tag)
{
    const char *path;
    struct sbx_netpool p = {.c.tag = tag & 0xffffff, .nl.fd = -1};
    p.lockfd = open_lockfile(&path);
    if (p.lockfd < 0) return p.lockfd;
    if (lock_at(p.lockfd, TAG_OFF + (off_t)p.c.tag, F_WRLCK) < 0) {
        close(p.lockfd);
        return -EBUSY;
    }
    if (sbx_nl_open(&p.nl) == 0) { /* links of the tag (and of other dead daemons) */
        sweep(&p, UINT32_MAX);
        sbx_nl_close(&p.nl);
    }
    return p.lockfd;
}

struct sbx_netpool *sbx_netpool_open(const struct sbx_netpool_conf *c, struct err *err)
{
    if (c->prefix < 8 || c->prefix > 24) {
        err_invalid(err, "net_cidr", "the sandbox network range must be a /8 to /24");
        return NULL;
    }
    struct sbx_netpool *p = xcalloc(1, sizeof *p);
    p->c = *c;
    p->c.tag &= 0xffffff;
    p->nl.fd = -1;
    p->max_idx = (uint32_t)1 << (31 - c->prefix); /* /31s in the range, at most 65536 */
    if (p->max_idx > 65536) p->max_idx = 65536;
    p->cursor = 1;
    p->used = xcalloc(p->max_idx / 8 + 1, 1);
    snprintf(p->prefix, sizeof p->prefix, "rb%06xh", p->c.tag);
    const char *path;
    p->lockfd = open_lockfile(&path);
    if (p->lockfd < 0) {
        err_internal(err, "cannot open %s: %s", path, strerror(-p->lockfd));
        goto fail;
    }
    if (lock_at(p->lockfd, TAG_OFF + (off_t)p->c.tag, F_WRLCK) < 0) {
        err_set(err, 409, "network_busy", "",
                "another sandboxd uses network tag %06x (the same state folder?)", p->c.tag);
        goto fail;
    }
    int e = sbx_nl_open(&p->nl);
    if (e < 0) {
        err_internal(err, "cannot open a netlink socket: %s", strerror(-e));
        goto fail;
    }
    e = sweep(p, UINT32_MAX);
    if (e > 0) log_info("removed leftover veths", "count=%d", e);
    return p;
fail:
    sbx_netpool_close(p);
    return NULL;
}

void sbx_netpool_close(struct sbx_netpool *p)
{
    if (!p) return;
    if (p->nl.fd >= 0) {
        sweep(p, UINT32_MAX); /* anything of ours still there */
        sbx_nl_close(&p->nl);
    }
    if (p->lockfd >= 0) close(p->lockfd); /* drops every lock */
    free(p->used);
    free(p);
}

const char *sbx_netpool_prefix(const struct sbx_netpool *p)
{
    return p->prefix;
}

void sbx_netpool_release(struct sbx_netpool *p, const struct sbx_veth *v)
{
    int e = sbx_nl_link_del(&p->nl, v->host);
    if (e < 0 && e != -ENODEV) {
        log_warn("cannot remove a sandbox veth; its index stays taken", "link=%s error=\"%s\"",
                 v->host, strerror(-e));
        return;
    }
    lock_at(p->lockfd, (off_t)v->idx, F_UNLCK);
    set_used(p, v->idx, false);
}
