/*
 * idmap.h - which host uids a sandbox's users are, and the user namespace that
 * maps them.
 *
 * Every sandbox owns one slot: a range of SBX_IDMAP_COUNT host uids (and gids)
 * starting at first + slot * SBX_IDMAP_COUNT. Root inside is the first uid of the
 * range; nothing outside the range exists inside (it shows as 65534). The slot is
 * stored with the sandbox, so its files keep their owners across sessions and
 * daemon restarts.
 */
#ifndef REBUNO_SANDBOX_IDMAP_H
#define REBUNO_SANDBOX_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_IDMAP_COUNT 65536u
#define SBX_IDMAP_DEFAULT_FIRST 100000u

/* Highest usable slot for ranges starting at first (the last range must end below
 * 2^32 - 1, which the kernel reserves). -1 if first leaves no room. */
int64_t sbx_idmap_max_slot(uint32_t first);
/* Host id of id `inside` for a sandbox in `slot`. 0 or -ERANGE. */
int sbx_idmap_host(uint32_t first, uint32_t slot, uint32_t inside, uint32_t *host);
/* The inside id of a host id, or -ERANGE when the host id is not in the slot's range. */
int sbx_idmap_inside(uint32_t first, uint32_t slot, uint32_t host, uint32_t *inside);
/* The line written to uid_map / gid_map: "0 BASE 65536\n". 0 or -ERANGE. */
int sbx_idmap_line(uint32_t base, char *out, size_t n);

/*
 * A new user namespace whose uid and gid maps are "0 base SBX_IDMAP_COUNT", returned
 * as an O_CLOEXEC file descriptor (for MOUNT_ATTR_IDMAP and setns). Made by a
 * throwaway child that only lives while the maps are written. Returns fd or -errno.
 * Needs CAP_SETUID/CAP_SETGID in the caller's namespace (root).
 */
int sbx_userns_create(uint32_t base);
/* The same with the map "0 0 1" + "from to SBX_IDMAP_COUNT": for idmapped mounts of
 * trees whose files belong to range `from` (a clone of another sandbox's files, a
 * drive), seen as range `to`; host root stays root so overlayfs and sandboxd (both
 * host root) can still write there. fd or -errno. */
int sbx_userns_create_remap(uint32_t from, uint32_t to);
/* A user namespace with these uid_map/gid_map lines. fd or -errno. */
int sbx_userns_create_map(const char *map);

#endif
