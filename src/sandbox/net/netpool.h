/*
 * netpool.h - the daemon's veth pairs: one per networked sandbox session, with the
 * addresses of a pool of /31s.
 *
 * Creating a pair with its sandbox end made directly inside the sandbox's network
 * namespace costs ~0.5 ms here; moving an existing link into a namespace costs
 * 15-35 ms (the kernel waits for RCU grace periods), and so does ip(8) set-up through
 * several processes (machine-probes §4). So pairs are not pre-created in the host's
 * namespace and moved: a session's pair is created in place, over raw netlink, and
 * what is pooled is the addressing (the indexes below).
 *
 * Addressing. A pair with index i gets a /31 from the daemon's range (default
 * 10.200.0.0/16): the host end base+2i, the sandbox end base+2i+1. The range is only
 * ever used for this machine's own namespaces. Several daemons can share one host:
 * an index is owned through an open-file-description lock on byte i of a lock file
 * (/run/rebuno-netpool.lock), which the kernel drops when the owner dies, so two live
 * daemons never hold the same addresses and a crashed daemon's indexes come back.
 *
 * Names. The host end is `rb<tag>h<i>` (the sandbox end is eth0), where tag is 6 hex
 * digits of a hash of the daemon's state folder (as its cgroup); nft.h's rules match
 * the `rb<tag>h` prefix. A daemon holds a lock on its tag too, so a later daemon can
 * tell a dead daemon's leftovers (links, its nft table) from a live one's and remove
 * them.
 *
 * Host ends get: the address, rp_filter=1 (a sandbox cannot send with another
 * sandbox's source address), IPv6 off, link up. Loop thread only.
 */
#ifndef REBUNO_SANDBOX_NETPOOL_H
#define REBUNO_SANDBOX_NETPOOL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct sbx_veth {
    uint32_t idx;
    char host[16];                      /* the host end's name */
    struct in_addr host_addr, sbx_addr; /* the /31 */
};

struct sbx_netpool_conf {
    uint32_t tag;        /* 24 bits */
    struct in_addr base; /* network order; the range's first address */
    int prefix;          /* 8..24 */
};

struct sbx_netpool;

/* Lock the tag, remove this tag's leftovers and those of dead daemons. NULL with err. */
struct sbx_netpool *sbx_netpool_open(const struct sbx_netpool_conf *c, struct err *err);
/* Delete every pair of this daemon and drop the locks. */
void sbx_netpool_close(struct sbx_netpool *p);
/* "rb<tag>h": the prefix of every host end. */
const char *sbx_netpool_prefix(const struct sbx_netpool *p);
/* A dead daemon's tag (daemons.h): take its lock, so that no daemon starts using it
 * meanwhile, and delete its links. Returns the descriptor holding the lock (close it to
 * let go), or -EBUSY when a live daemon holds the tag, or -errno. */
int sbx_netpool_reap(uint32_t tag);
/* Whether another daemon's tag is alive (its lock is held). */
bool sbx_netpool_tag_alive(const struct sbx_netpool *p, uint32_t tag);
/* A pair for a session: the host end here, the sandbox end created as eth0 inside the
 * namespace of netns_fd (down, without address). 0 or -errno. */
int sbx_netpool_create(struct sbx_netpool *p, int netns_fd, struct sbx_veth *out);
/* The session is over: delete the pair (if the namespace has not already) and
 * give the index back. */
void sbx_netpool_release(struct sbx_netpool *p, const struct sbx_veth *v);

#endif
