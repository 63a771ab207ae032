/*
 * daemons.h - the host-wide record of sandboxd daemons, so that a daemon starting up
 * cleans up after any daemon that was killed (kill -9, OOM, a crash), whatever its
 * state folder.
 *
 * A daemon owns host resources that outlive it when it dies without its shutdown: its
 * cgroups (where a paused sandbox's processes stay frozen for good), the mount of its
 * store and the loop device under it, its nftables table and veths. Each daemon has a
 * record, <dir>/<id> (default /run/rebuno/daemons; /run is right, since none of those
 * survives a reboot either), naming its state folder and cgroup mode, and holds a POSIX
 * write lock (fcntl F_SETLK) on it for as long as it runs. POSIX locks belong to the
 * process and are not inherited across fork, so the lock goes with the daemon itself,
 * whatever its children (cleaners, the zygote) are still doing: a record whose lock
 * can be taken is provably a dead daemon's.
 *
 * At start-up, before it touches anything of its own, a daemon takes the lock of every
 * record it can and reaps: it thaws and kills every process of the dead daemon's
 * cgroups and removes them, deletes its veths and nftables table, unmounts its store
 * (the loop device, attached with autoclear, goes with the last reference) and detaches
 * any loop device still backed by its image, then drops the record. Its own folder's
 * predecessor is reaped the same way. A record whose lock is held belongs to a live
 * daemon and is never touched. A graceful shutdown drops the daemon's own record.
 *
 * The id is 12 hex digits of a hash of the state folder's real path: the daemon's cgroup
 * is rebuno-<id>, and the last 6 digits are its network tag (netpool.h). Loop thread
 * only (start-up and shutdown); logs what it reaps.
 */
#ifndef REBUNO_SANDBOX_DAEMONS_H
#define REBUNO_SANDBOX_DAEMONS_H

#include <stdint.h>

#include "base/err.h"

#define SBX_DAEMONS_DIR "/run/rebuno/daemons"

struct sbx_daemon;

/* 48 bits of FNV-1a of the state folder's real path. */
uint64_t sbx_daemon_id(const char *state_dir);

/* Reap every dead daemon's leftovers (this folder's predecessor included), then write and
 * lock this daemon's record. dir: NULL for SBX_DAEMONS_DIR. Fails with 409 state_dir_busy
 * when a live daemon runs on state_dir. Without a usable dir it warns and returns a
 * daemon that keeps no record. 0 or -1 with err. */
int sbx_daemon_register(const char *dir, const char *state_dir, const char *cgroup_mode,
                        struct sbx_daemon **out, struct err *err);
/* Drop the record and its lock (after a graceful shutdown); frees d. */
void sbx_daemon_unregister(struct sbx_daemon *d);

#endif
