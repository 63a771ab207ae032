/*
 * addr.h - socket address helpers for the egress proxy: numeric "host:port"
 * parsing and the check that keeps a sandbox from reaching the host's own or
 * internal networks through a name that resolves there.
 */
#ifndef REBUNO_PROXY_ADDR_H
#define REBUNO_PROXY_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* "1.2.3.4:80", "[::1]:80" (numeric only). 0 or -EINVAL. */
int proxy_addr_parse(const char *s, struct sockaddr_storage *out, socklen_t *len);
/* "1.2.3.4:80" / "[::1]:80" into out (at least 64 bytes). */
void proxy_addr_format(const struct sockaddr *sa, char *out, size_t n);
/* False for addresses a name from the outside must never lead to: unspecified,
 * loopback, RFC 1918 and other private ranges, carrier-grade NAT, link-local
 * (including 169.254.169.254, the cloud metadata service), multicast, broadcast,
 * reserved, IPv6 unique-local and site-local, and IPv4-mapped/compatible forms of
 * any of these. */
bool proxy_addr_is_public(const struct sockaddr *sa);
/* Same address (and family); ports are ignored. */
bool proxy_addr_same_host(const struct sockaddr *a, const struct sockaddr *b);

#endif
