/*
 * nl.h - small helpers over a raw NETLINK_ROUTE socket: veth pairs, moving a link
 * into another network namespace, IPv4 addresses, the default route, link state.
 *
 * Why raw netlink and not ip(8): these calls sit on a session's start path (moving
 * and configuring the sandbox's end of a veth), where spawning `ip` eight times costs
 * ~15 ms (machine-probes §4); a netlink request is a few microseconds. libmnl is not
 * among our dependencies and the handful of messages needed here fit in ~250 lines.
 * Every input is bounded (interface names at most IFNAMSIZ - 1 bytes, checked), every
 * message is built in a fixed buffer and every request waits for the kernel's ACK.
 *
 * A socket talks to the network namespace its creator was in when it was opened: to
 * configure a sandbox's namespace, open the socket while the calling thread is in it
 * (setns) and keep using it after switching back. Not thread-safe; loop thread only.
 * All functions return 0 (or a positive value where stated) or -errno.
 */
#ifndef REBUNO_SANDBOX_NL_H
#define REBUNO_SANDBOX_NL_H

#include <netinet/in.h>
#include <stdint.h>

struct sbx_nl {
    int fd;
    uint32_t seq;
};

/* Open a socket in the calling thread's network namespace. */
int sbx_nl_open(struct sbx_nl *nl);
void sbx_nl_close(struct sbx_nl *nl);

/* A veth pair `name` <-> `peer`, down. The peer is created in the namespace of
 * peer_netns (a namespace descriptor) when it is >= 0, else in this one: creating it
 * there costs ~0.5 ms, where moving an existing link between namespaces costs 15-35 ms
 * (the kernel waits for RCU grace periods). -EEXIST if `name` is taken. */
int sbx_nl_veth_add(struct sbx_nl *nl, const char *name, const char *peer, int peer_netns);
/* Delete a link by name (a veth's peer goes with it). -ENODEV when there is none. */
int sbx_nl_link_del(struct sbx_nl *nl, const char *name);
/* The link's index (> 0), or -ENODEV. */
int sbx_nl_link_index(struct sbx_nl *nl, const char *name);
/* Set IFF_UP on a link. */
int sbx_nl_link_up(struct sbx_nl *nl, int ifindex);
/* Move link `name` into the namespace of netns_fd, renamed to newname there. */
int sbx_nl_link_move(struct sbx_nl *nl, const char *name, int netns_fd, const char *newname);
/* Add addr/prefix to a link. */
int sbx_nl_addr_add(struct sbx_nl *nl, int ifindex, struct in_addr addr, int prefix);
/* Add the default route via gw on a link. */
int sbx_nl_route_default(struct sbx_nl *nl, int ifindex, struct in_addr gw);
/* Call fn for the name of every link of the namespace (a dump). */
int sbx_nl_link_names(struct sbx_nl *nl, void (*fn)(const char *name, void *arg), void *arg);

#endif
