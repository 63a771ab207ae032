/*
 * fwd.h - a sandbox's exposed ports: a listener on host loopback that relays each
 * connection to a port on the sandbox's veth address.
 *
 * A small TCP relay on the daemon's loop (bufferevents with bounded buffers, half
 * closes passed on) instead of a DNAT from 127.0.0.1, which would need
 * route_localnet on the host. The host initiates these connections, so the sandbox
 * side sees them come from its gateway address; the nftables rules let the replies
 * back in as established traffic. Loop thread only.
 */
#ifndef REBUNO_SANDBOX_FWD_H
#define REBUNO_SANDBOX_FWD_H

#include <event2/event.h>
#include <netinet/in.h>
#include <stdint.h>

struct sbx_fwd;

/* Listen on 127.0.0.1:port (0, or the port if taken: any free one) and relay to `to`.
 * NULL with -errno in *e. */
struct sbx_fwd *sbx_fwd_new(struct event_base *base, uint16_t port, const struct sockaddr_in *to,
                            int *e);
/* The host port it listens on. */
uint16_t sbx_fwd_port(const struct sbx_fwd *f);
/* Close the listener and every relayed connection. */
void sbx_fwd_free(struct sbx_fwd *f);

#endif
