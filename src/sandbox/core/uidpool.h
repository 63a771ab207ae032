/*
 * uidpool.h - host-wide ownership of sandbox uid ranges, so that two daemons on one host
 * never give their sandboxes the same host uids.
 *
 * A sandbox's users are a range of SBX_IDMAP_COUNT host uids and gids (idmap.h: slot s of
 * a daemon is first + s x 65536), and its files keep those owners on disk. Which state
 * folder owns which range is one host-wide SQLite table, uid_ranges(first, owner), in
 * SBX_UIDPOOL_PATH: under /var/lib, not /run, because files keep their owners across
 * reboots. A daemon works under the database's write lock (BEGIN IMMEDIATE), only at
 * start-up and when it runs out:
 *   - it records the ranges its sandboxes already have (a state folder made before the
 *     table existed keeps its ranges: its files are owned by them); a range another
 *     folder already holds is kept all the same, since the files cannot move, and logged;
 *   - it gives back its ranges no sandbox uses, and those of state folders that are gone
 *     (no <folder>/sandboxd.db any more);
 *   - it reserves SBX_UIDPOOL_BATCH more ranges that overlap nobody's.
 * Sandboxes then get ranges from that reserve in memory, so a create normally touches no
 * file. Loop thread only; low-level results are 0 or -errno, and nothing here prints but
 * the conflict warning at start-up.
 */
#ifndef REBUNO_SANDBOX_UIDPOOL_H
#define REBUNO_SANDBOX_UIDPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_UIDPOOL_PATH "/var/lib/rebuno/uid-ranges.db"
#define SBX_UIDPOOL_BATCH 32

struct sbx_uidpool;

/* Open the table at path (NULL: SBX_UIDPOOL_PATH; its folder is made 0700) for the state
 * folder state_dir, whose slots start at first and end at max_slot, and whose sandboxes
 * use the slots in used[0..nused). 0 or -1 with err. */
int sbx_uidpool_open(const char *path, const char *state_dir, uint32_t first, int64_t max_slot,
                     const uint32_t *used, size_t nused, struct sbx_uidpool **out,
                     struct err *err);
/* The lowest slot this folder owns that in_use() says no sandbox has, reserving more when
 * none is left. 0, -ENOSPC when the host has no range left, or -errno. */
int sbx_uidpool_take(struct sbx_uidpool *p, bool (*in_use)(uint32_t slot, void *arg), void *arg,
                     uint32_t *slot);
void sbx_uidpool_close(struct sbx_uidpool *p);

#endif
