/*
 * nl.c - raw NETLINK_ROUTE requests (see nl.h).
 *
 * Each request is one message built in a fixed, aligned buffer with bounds-checked
 * attribute helpers, sent with NLM_F_ACK, and answered by one NLMSG_ERROR (0 on
 * success). Replies are matched by sequence number; anything else is skipped. The
 * socket has a receive timeout so a lost answer can never hang the daemon's loop.
 */
#include "sandbox/net/nl.h"

#include <errno.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define REQ_MAX 512
#define RECV_MAX 32768

struct req {
    union {
        struct nlmsghdr h;
        char buf[REQ_MAX];
    } u;
    int overflow;
};

static void req_init(struct req *r, uint16_t type, uint16_t flags, const void *hdr, size_t hlen)
{
    memset(r, 0, sizeof *r);
    r->u.h.nlmsg_len = (uint32_t)NLMSG_LENGTH(hlen);
    r->u.h.nlmsg_type = type;
    r->u.h.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
    memcpy(NLMSG_DATA(&r->u.h), hdr, hlen);
}

static struct rtattr *attr_put(struct req *r, uint16_t type, const void *data, size_t len)
{
    size_t at = NLMSG_ALIGN(r->u.h.nlmsg_len);
    size_t need = RTA_LENGTH(len);
    if (at + RTA_ALIGN(need) > REQ_MAX) {
        r->overflow = 1;
        return NULL;
    }
    struct rtattr *a = (struct rtattr *)(void *)(r->u.buf + at);
    a->rta_type = type;
    a->rta_len = (uint16_t)need;
    if (len) memcpy(RTA_DATA(a), data, len);
    r->u.h.nlmsg_len = (uint32_t)(at + RTA_ALIGN(need));
    return a;
}

static int attr_str(struct req *r, uint16_t type, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= IFNAMSIZ) return -EINVAL;
    return attr_put(r, type, s, n + 1) ? 0 : -E2BIG;
}

static struct rtattr *nest_begin(struct req *r, uint16_t type)
{
    return attr_put(r, type, NULL, 0);
}

static void nest_end(struct req *r, struct rtattr *a)
{
    if (a) a->rta_len = (uint16_t)((r->u.buf + r->u.h.nlmsg_len) - (char *)a);
}

int sbx_nl_open(struct sbx_nl *nl)
{
    nl->seq = 1;
    nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (nl->fd < 0) return -errno;
    struct timeval tv = {2, 0};
    setsockopt(nl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (bind(nl->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = -errno;
        close(nl->fd);
        nl->fd = -1;
        return e;
    }
    return 0;
}

void sbx_nl_close(struct sbx_nl *nl)
{
    if (nl->fd >= 0) close(nl->fd);
    nl->fd = -1;
}

/* Send r; with fn, call it for every reply message of a dump until NLMSG_DONE, else
 * wait for the ACK. Returns 0, a positive value from an RTM_NEWLINK reply's index
 * (want_index), or -errno. */
static int transact(struct sbx_nl *nl, struct req *r, void (*fn)(struct nlmsghdr *, void *),
                    void *arg, int want_index)
{
    if (r->overflow) return -E2BIG;
    uint32_t seq = nl->seq++;
    r->u.h.nlmsg_seq = seq;
    struct sockaddr_nl to = {.nl_family = AF_NETLINK};
    ssize_t n;
    do
        n = sendto(nl->fd, r->u.buf, r->u.h.nlmsg_len, 0, (struct sockaddr *)&to, sizeof to);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    static _Thread_local union {
        struct nlmsghdr h;
        char b[RECV_MAX];
    } in;
    int index = 0;
    for (;;) {
        n = recv(nl->fd, in.b, sizeof in.b, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN ? -ETIMEDOUT : -errno;
        if (n == 0) return -EPIPE;
        int len = (int)n;
        for (struct nlmsghdr *h = &in.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_seq != seq) continue;
            if (h->nlmsg_type == NLMSG_DONE) return 0;
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) return -EPROTO;
                if (e->error) return e->error;
                return want_index ? (index > 0 ? index : -ENODEV) : 0;
            }
            if (fn) fn(h, arg);
            if (want_index && h->nlmsg_type == RTM_NEWLINK &&
                h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifinfomsg))) {
                const struct ifinfomsg *ifi = NLMSG_DATA(h);
                index = ifi->ifi_index;
                if (!(r->u.h.nlmsg_flags & NLM_F_ACK)) return index;
            }
        }
    }
}

int sbx_nl_veth_add(struct sbx_nl *nl, const char *name, const char *peer, int peer_netns)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct req r;
    req_init(&r, RTM_NEWLINK, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
    int e = attr_str(&r, IFLA_IFNAME, name);
    if (e < 0) return e;
    struct rtattr *li = nest_begin(&r, IFLA_LINKINFO);
    attr_put(&r, IFLA_INFO_KIND, "veth", 5);
    struct rtattr *data = nest_begin(&r, IFLA_INFO_DATA);
    struct rtattr *pe = nest_begin(&r, VETH_INFO_PEER);
    /* the peer's ifinfomsg comes first inside VETH_INFO_PEER */
    size_t at = NLMSG_ALIGN(r.u.h.nlmsg_len);
    if (at + NLMSG_ALIGN(sizeof ifi) > REQ_MAX) return -E2BIG;
    memset(r.u.buf + at, 0, sizeof ifi);
    r.u.h.nlmsg_len = (uint32_t)(at + NLMSG_ALIGN(sizeof ifi));
    if ((e = attr_str(&r, IFLA_IFNAME, peer)) < 0) return e;
    if (peer_netns >= 0) {
        uint32_t fd = (uint32_t)peer_netns;
        attr_put(&r, IFLA_NET_NS_FD, &fd, sizeof fd);
    }
    nest_end(&r, pe);
    nest_end(&r, data);
    nest_end(&r, li);
    return transact(nl, &r, NULL, NULL, 0);
}

int sbx_nl_link_del(struct sbx_nl *nl, const char *name)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct req r;
    req_init(&r, RTM_DELLINK, NLM_F_ACK, &ifi, sizeof ifi);
    int e = attr_str(&r, IFLA_IFNAME, name);
    if (e < 0) return e;
    return transact(nl, &r, NULL, NULL, 0);
}

int sbx_nl_link_index(struct sbx_nl *nl, const char *name)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct req r;
    req_init(&r, RTM_GETLINK, 0, &ifi, sizeof ifi);
    int e = attr_str(&r, IFLA_IFNAME, name);
    if (e < 0) return e;
    uint32_t mask = RTEXT_FILTER_SKIP_STATS;
    attr_put(&r, IFLA_EXT_MASK, &mask, sizeof mask);
    return transact(nl, &r, NULL, NULL, 1);
}

int sbx_nl_link_up(struct sbx_nl *nl, int ifindex)
{
    struct ifinfomsg ifi = {
        .ifi_family = AF_UNSPEC, .ifi_index = ifindex, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct req r;
    req_init(&r, RTM_NEWLINK, NLM_F_ACK, &ifi, sizeof ifi);
    return transact(nl, &r, NULL, NULL, 0);
}

int sbx_nl_link_move(struct sbx_nl *nl, const char *name, int netns_fd, const char *newname)
{
    int idx = sbx_nl_link_index(nl, name);
    if (idx < 0) return idx;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = idx};
    struct req r;
    req_init(&r, RTM_NEWLINK, NLM_F_ACK, &ifi, sizeof ifi);
    int e = attr_str(&r, IFLA_IFNAME, newname); /* the name it gets over there */
    if (e < 0) return e;
    uint32_t fd = (uint32_t)netns_fd;
    attr_put(&r, IFLA_NET_NS_FD, &fd, sizeof fd);
    return transact(nl, &r, NULL, NULL, 0);
}

int sbx_nl_addr_add(struct sbx_nl *nl, int ifindex, struct in_addr addr, int prefix)
{
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)prefix,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)ifindex};
    struct req r;
    req_init(&r, RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof ifa);
    attr_put(&r, IFA_LOCAL, &addr, sizeof addr);
    attr_put(&r, IFA_ADDRESS, &addr, sizeof addr);
    return transact(nl, &r, NULL, NULL, 0);
}

int sbx_nl_route_default(struct sbx_nl *nl, int ifindex, struct in_addr gw)
{
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_BOOT,
                       .rtm_scope = RT_SCOPE_UNIVERSE,
                       .rtm_type = RTN_UNICAST};
    struct req r;
    req_init(&r, RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, &rt, sizeof rt);
    attr_put(&r, RTA_GATEWAY, &gw, sizeof gw);
    uint32_t oif = (uint32_t)ifindex;
    attr_put(&r, RTA_OIF, &oif, sizeof oif);
    return transact(nl, &r, NULL, NULL, 0);
}

struct names_ctx {
    void (*fn)(const char *name, void *arg);
    void *arg;
};

static void on_link(struct nlmsghdr *h, void *arg)
{
    struct names_ctx *c = arg;
    if (h->nlmsg_type != RTM_NEWLINK || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg)))
        return;
    struct ifinfomsg *ifi = NLMSG_DATA(h);
    int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *ifi));
    for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type != IFLA_IFNAME) continue;
        char name[IFNAMSIZ];
        size_t n = RTA_PAYLOAD(a);
        if (n == 0 || n > IFNAMSIZ) return;
        memcpy(name, RTA_DATA(a), n);
        name[n - 1] = '\0';
        c->fn(name, c->arg);
        return;
    }
}

int sbx_nl_link_names(struct sbx_nl *nl, void (*fn)(const char *name, void *arg), void *arg)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct req r;
    req_init(&r, RTM_GETLINK, NLM_F_DUMP, &ifi, sizeof ifi);
    uint32_t mask = RTEXT_FILTER_SKIP_STATS;
    attr_put(&r, IFLA_EXT_MASK, &mask, sizeof mask);
    struct names_ctx c = {fn, arg};
    return transact(nl, &r, on_link, &c, 0);
}
