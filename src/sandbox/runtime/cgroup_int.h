/*
 * cgroup_int.h - the parts of cgroup.c the unit tests reach beyond cgroup.h: a root
 * opened on hierarchies named by a mounts table (a fake cgroup directory), and
 * handles on groups that already exist.
 */
#ifndef REBUNO_SANDBOX_CGROUP_INT_H
#define REBUNO_SANDBOX_CGROUP_INT_H

#include <stdbool.h>

#include "sandbox/runtime/cgroup.h"

struct sbx_cg_open_opts {
    const char *mode;   /* as sbx_cg_root_open() */
    const char *parent; /* as sbx_cg_root_open() */
    const char *mounts; /* a table in /proc/self/mounts format; NULL: /proc/self/mounts */
    /* v2: open even without the memory, pids and cpu controllers (freeze and kill work
     * without them). Every limit still fails closed: only unlimited groups can be made. */
    bool no_limits;
};

/* sbx_cg_root_open() with options. */
int sbx_cg_root_open_ex(const struct sbx_cg_open_opts *o, struct sbx_cg_root **out,
                        struct err *err);
/* A handle on the group `name` under r as it is: nothing is created, swept or written
 * (free it with sbx_cg_forget or sbx_cg_destroy). */
struct sbx_cgroup *sbx_cg_open(struct sbx_cg_root *r, const char *name);

#endif
