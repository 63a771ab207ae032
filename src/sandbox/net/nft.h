/*
 * nft.h - the daemon's nftables table: what a sandbox's veth may send and where.
 *
 * One table per daemon, `inet rebuno_<tag>`, created at start-up and deleted at
 * shutdown. Its rules match every host-side veth of the daemon by a name prefix
 * (`rb<tag>h*`, see netpool.h), so sandboxes come and go without touching the
 * ruleset; only private networks change it (elements of the `netpairs` set). Traffic
 * arriving from a sandbox:
 *
 *   - IPv6: dropped (the sandbox's namespace has IPv6 disabled on its veth anyway);
 *   - to link-local (169.254.0.0/16, the cloud metadata address) and the other
 *     metadata addresses: rejected before anything else, whatever the policy says;
 *   - between members of one private network (netpairs): accepted and forwarded;
 *   - TCP 80 and 443 to any address: redirected to the egress proxy's transparent
 *     listener (which reads the original destination, then the SNI / Host);
 *   - UDP 53 to any of the host's own addresses: redirected to the proxy's DNS;
 *   - everything else: rejected at once - TCP with a reset, the rest with ICMP
 *     admin-prohibited - never accepted and then dropped. Non-local destinations are
 *     rejected in prerouting (the host end does not forward); local ones (the
 *     host's other addresses and ports, the proxy ports hit directly) in input.
 * The proxy's ports themselves refuse connections that do not come from a sandbox.
 *
 * Text is generated here (pure, unit-tested) and applied by running `nft -f -` with
 * the text on stdin: argv-only, a fixed path, no shell, no string from a client
 * (addresses and ports are formatted from integers; the tag is hex). libnftables
 * would avoid the exec but is not among our Debian packages, and nft runs only at
 * daemon start and stop and when a private network's membership changes.
 */
#ifndef REBUNO_SANDBOX_NFT_H
#define REBUNO_SANDBOX_NFT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_nft_conf {
    char table[32];      /* "rebuno_<tag>" */
    char ifprefix[16];   /* host ends are named <ifprefix><index> */
    uint16_t proxy_port; /* the proxy's transparent TCP listener (0.0.0.0) */
    uint16_t dns_port;   /* the proxy's DNS (UDP, 0.0.0.0) */
};

/* The whole table; replaces an older one of the same name atomically. */
char *sbx_nft_ruleset(const struct sbx_nft_conf *c);
/* Delete the table if it exists. */
char *sbx_nft_drop_table(const char *table);
/* Add (or delete) the pairs (a[i], b[i]) and (b[i], a[i]) of the netpairs set. */
char *sbx_nft_pairs(const char *table, bool add, const struct in_addr *a, const struct in_addr *b,
                    size_t n);

/* The nft binary, or NULL when it is not installed. */
const char *sbx_nft_path(void);
/* Run `nft -f -` with script on stdin (waits at most 10 s). 0, or -errno / -EIO
 * with what nft printed in msg. */
int sbx_nft_run(const char *script, char *msg, size_t msglen);
/* Names of the inet tables that start with prefix (`nft list tables`). fn is called
 * once per table. 0 or -errno. */
int sbx_nft_tables(const char *prefix, void (*fn)(const char *name, void *arg), void *arg);

#endif
