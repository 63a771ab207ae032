/*
 * sandboxd.h - the sandbox service: sandboxes, their sessions, commands, files and
 * users, served as the /v1 HTTP API (docs/sandbox-api.md) on one libevent loop.
 *
 * Used by `rebuno sandboxd` (src/cli/cmd_sandboxd.c): create the service on a
 * loop and an HTTP server, run the loop, shut down on a signal. Must run as root.
 */
#ifndef REBUNO_SANDBOX_SANDBOXD_H
#define REBUNO_SANDBOX_SANDBOXD_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/http.h"

struct sbxd_config {
    const char *state_dir;     /* created if missing; made absolute */
    const char *cgroup_mode;   /* "auto", "v1", "v2" */
    uint32_t uid_first;        /* first host uid of slot 0 */
    int max_sandboxes;         /* limit on sandboxes (all states) */
    size_t output_limit;       /* bytes kept per command stream */
    int start_timeout_ms;      /* for a session to come up */
    const char *storage_mode;  /* "auto" (NULL), "btrfs", "copy": see storage.h */
    uint64_t storage_size;     /* bytes of a new btrfs loop image (0: 32 GiB, sparse) */
    int64_t snapshot_expiration_ms; /* default expiration of snapshots; 0: never */
    /* sandbox networking (net.h) */
    const char *net_mode;      /* "auto" (NULL): on when nft works; "on"; "off" */
    const char *net_cidr;      /* veth addresses; NULL: 10.200.0.0/16 */
    const char *const *upstream_overrides; /* "HOST[:80|:443]=ADDR:PORT" for the proxy */
    int n_upstream_overrides;
    const char *upstream_ca;   /* extra PEM trust for the proxy's upstreams */
    /* image pulls (registry.h): all NULL/0 for the defaults */
    const char *registry_auth; /* docker-style auth.json with registry credentials */
    const char *registry_ca;   /* extra PEM CA trusted for registries */
    const char *const *registry_plain_http; /* "host[:port]" reached over plain http */
    int n_registry_plain_http;
    int registry_stall_sec;    /* a registry under 1 KiB/s this long fails (0: 30) */
    /* host-wide state (daemons.h, uidpool.h); NULL: the defaults under /run and /var/lib */
    const char *daemons_dir;   /* records of running daemons */
    const char *uid_ranges;    /* the table of which state folder owns which uid range */
    /* called at each step of a shutdown (a session stopped, a resource released), so a
     * supervisor can tell a long clean-up from a stuck one; may be NULL */
    void (*progress)(void *arg);
    void *progress_arg;
};

struct sbxd;

/* Reap what dead daemons left on the host (daemons.h), open the store, build the default
 * image if needed, recover after a crash (every sandbox that was running or paused
 * becomes stopped, leftover cgroups are removed), and register the routes on http. NULL
 * with err on failure. */
struct sbxd *sbxd_new(struct event_base *base, struct http_server *http,
                      const struct sbxd_config *cfg, struct err *err);
struct local_auth;
/* From now on every route but GET /v1/health needs la's token (net/local_auth.h); until
 * this is called they answer 401. la outlives d. */
void sbxd_set_local_auth(struct sbxd *d, const struct local_auth *la);
/* Stop every session (files are kept), end streams and long-polls. */
void sbxd_shutdown(struct sbxd *d);
void sbxd_free(struct sbxd *d);

#endif
