/*
 * cgroup.h - one interface over cgroup v1 and v2 for a sandbox session's limits,
 * freezing and killing.
 *
 * A root (struct sbx_cg_root) is the backend plus the parent group this daemon owns
 * (named after its state folder, so two daemons never touch each other's groups).
 * A group (struct sbx_cgroup) belongs to one running session:
 *   v1: the same relative path in the memory, pids, cpu and freezer hierarchies (and
 *       cpuacct's, for cpu usage, when it is mounted apart from cpu);
 *   v2: one directory in the unified hierarchy with memory, pids and cpu enabled.
 * Low-level calls return 0 or -errno and never print. Nothing here keeps file
 * descriptors open between calls.
 */
#ifndef REBUNO_SANDBOX_CGROUP_H
#define REBUNO_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

enum sbx_cg_kind { SBX_CG_V1 = 1, SBX_CG_V2 = 2 };

struct sbx_cg_limits {
    int64_t memory_bytes; /* 0: unlimited */
    int64_t pids_max;     /* 0: unlimited */
    int64_t cpu_quota_us; /* per period; 0: unlimited */
    int64_t cpu_period_us;
};

struct sbx_cg_stats {
    int64_t memory_bytes; /* current usage, page cache and tmpfs included */
    int64_t memory_peak;  /* -1 when the backend has no peak */
    int64_t pids;
    int64_t oom_kills;
    int64_t cpu_usage_us; /* cpu time used by the group since it was made; -1: not measured */
};

struct sbx_cg_root;
struct sbx_cgroup;

/*
 * mode: "auto" (v1 when the memory, pids, cpu and freezer hierarchies are mounted,
 * else v2), "v1" or "v2". parent: the daemon's group name, one path component.
 * Creates the parent group(s). v2 fails closed: -1 (with a message naming the
 * missing controllers and how to enable them) unless the memory, pids and cpu
 * controllers are available and enabled in the parent's cgroup.subtree_control.
 * Returns 0 or -1 with err.
 */
int sbx_cg_root_open(const char *mode, const char *parent, struct sbx_cg_root **out,
                     struct err *err);
void sbx_cg_root_free(struct sbx_cg_root *r);
enum sbx_cg_kind sbx_cg_root_kind(const struct sbx_cg_root *r);
/* Kill and remove every group left under the parent (after a crash). Returns how many. */
int sbx_cg_root_sweep(struct sbx_cg_root *r);
/* Remove the parent group(s) if empty. */
void sbx_cg_root_remove(struct sbx_cg_root *r);

/* Create the session group `name` (one path component) with limits. An existing
 * group of that name is swept first. NULL with err on failure (a limit that cannot
 * be written included: the group is removed again). */
struct sbx_cgroup *sbx_cg_create(struct sbx_cg_root *r, const char *name,
                                 const struct sbx_cg_limits *l, struct err *err);
/* Write every limit; a limit whose file is missing is an error, never skipped.
 * 0 or -1 with err (limits written before the failing one stay). */
int sbx_cg_set_limits(struct sbx_cgroup *cg, const struct sbx_cg_limits *l, struct err *err);
int sbx_cg_attach(struct sbx_cgroup *cg, pid_t pid);
/* Freeze / thaw every process and wait (at most timeout_ms) until the kernel says so. */
int sbx_cg_freeze(struct sbx_cgroup *cg, int timeout_ms);
int sbx_cg_thaw(struct sbx_cgroup *cg, int timeout_ms);
bool sbx_cg_frozen(const struct sbx_cgroup *cg);
/* SIGKILL every process (frozen ones too) and wait until the group is empty. */
int sbx_cg_kill(struct sbx_cgroup *cg, int timeout_ms);
int sbx_cg_stats(const struct sbx_cgroup *cg, struct sbx_cg_stats *st);
/* Number of processes in the group, or -errno. */
int sbx_cg_count(const struct sbx_cgroup *cg);
/* Kill what is left, remove the group and free cg. 0 or -errno (cg is freed anyway). */
int sbx_cg_destroy(struct sbx_cgroup *cg);
/* Free the handle and leave the group in place (as a crashed daemon would; a later
 * sbx_cg_root_sweep removes it). */
void sbx_cg_forget(struct sbx_cgroup *cg);
/* The cgroup.procs files a process writes "0" into to join the group (one per v1
 * hierarchy, one for v2; at most SBX_CG_PROCS_MAX). Returns how many were stored in
 * out (at most max). */
#define SBX_CG_PROCS_MAX 5
int sbx_cg_procs_files(const struct sbx_cgroup *cg, char out[][512], int max);
/* "memory:/rebuno-x/sbx" style description for logs and tests. */
const char *sbx_cg_path(const struct sbx_cgroup *cg);

/* Format v2 cpu.max ("max 100000" or "QUOTA PERIOD"); pure, for tests. */
void sbx_cg_cpu_max(const struct sbx_cg_limits *l, char *out, size_t n);

#endif
