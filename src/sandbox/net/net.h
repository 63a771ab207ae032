/*
 * net.h - a sandbox's network: egress policy, its veth, the embedded egress proxy,
 * private networks and exposed ports (docs/sandbox.md, "Network").
 *
 * Configuration (per sandbox, persisted in the `sandbox_network` table, inherited by
 * forks): `network_policy` ("allow-all", "deny-all" or the proxy's custom map, see
 * proxy/policy.h; default deny-all), `network_id` (a private network's name, or
 * none) and `ports` (at most SBX_PORTS_MAX ports published on host loopback).
 *
 * A session gets networking only when it needs it: a policy other than deny-all, a
 * port or a network_id. It then takes a veth pair from the pool (netpool.h), moves
 * one end into the sandbox's network namespace as eth0 (address, default route via
 * the host end; IPv6 off), registers the address with a proxy context (its policy
 * and its own CA), writes the CA into the sandbox's trust store and resolv.conf, and
 * opens its ports. The daemon's nftables table (nft.h) confines the veth to the
 * proxy. Without networking a sandbox has loopback only, as before. An update that
 * needs networking attaches it to the running session; policy changes are applied
 * to open connections by the proxy at once.
 *
 * Every function runs on the loop thread.
 */
#ifndef REBUNO_SANDBOX_NET_H
#define REBUNO_SANDBOX_NET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_PORTS_MAX 8
#define SBX_NETWORK_ID_MAX 63

struct sbxd;
struct sbx;
struct sbx_session;

/* ---- the daemon ---- */
/* After the sandboxes are loaded: the network table (and each sandbox's row), the
 * proxy engine and its listeners, the veth pool and the nftables table. With
 * cfg.net_mode "off" (or "auto" without a working nft) sandboxes keep loopback only and
 * asking for anything else is refused. */
int sbx_net_open(struct sbxd *d, struct err *err);
/* After every session ended: the pool, the nftables table, the proxy. */
void sbx_net_close(struct sbxd *d);
/* A dead daemon's network (daemons.h): its veths and nftables table, unless a live daemon
 * holds the tag. 0, -EBUSY when alive, or -errno. */
int sbx_net_reap(uint32_t tag);

/* ---- a sandbox's configuration ---- */
/* A create body's network_policy, network_id and ports; a fork (fork_from) starts from
 * its source's values, which the body may override. */
int sbx_net_parse(struct sbx *s, const json_t *body, const struct sbx *fork_from, struct err *err);
/* The same in an update: validated, stored, and applied to the running session (a
 * new policy at once, a network change, new ports). */
int sbx_net_update(struct sbx *s, const json_t *body, struct err *err);
/* Copy src's network configuration into dst (forks). */
void sbx_net_copy_config(struct sbx *dst, const struct sbx *src);
/* Persist the configuration if it changed (called from sbx_save). */
int sbx_net_save(struct sbx *s, struct err *err);
/* The sandbox is deleted: forget its row. */
void sbx_net_forget(struct sbx *s);
void sbx_net_cfg_free(struct sbx *s);
/* "network_policy" (header values redacted), "network_id", "ports", "network". */
void sbx_net_json(const struct sbx *s, json_t *o, bool full);

/* ---- a session ---- */
/* The session's init is READY; attach networking when the sandbox needs it. */
int sbx_net_session_start(struct sbx *s, struct sbx_session *ss, struct err *err);
/* The session is over (init is dead): close ports, leave the network, drop the proxy
 * context, give the veth back. */
void sbx_net_session_end(struct sbx *s, struct sbx_session *ss);
/* The trust variables for a command (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
 * REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT) when the session has
 * networking. */
void sbx_net_env(const struct sbx *s, json_t *env);

#endif
