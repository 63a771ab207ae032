/*
 * image.h - the default image: a read-only layer made from this machine.
 *
 * The layer is a directory under the state folder holding what the sandbox root
 * needs besides /usr (which is the host's own /usr, mounted read-only and idmapped
 * by the session): mount points, the merged-/usr symlinks (bin -> usr/bin, ...) as
 * the host has them, and an /etc. The /etc is generated (passwd, group, shadow,
 * hosts, resolv.conf, nsswitch.conf, ...) plus an allowlist of the host's /etc
 * entries programs need (ld.so.cache, alternatives, ssl/certs, profile, skel, ...),
 * copying only world-readable files and never anything with host data (no
 * passwd/shadow/group of the host, no ssh keys, no sudoers, no machine-id).
 * Everything is owned by host root; the idmapped mount makes it root's inside.
 * A layer is built once per version into a temporary directory and renamed into
 * place, so a crash never leaves a half-built image in use.
 */
#ifndef REBUNO_SANDBOX_IMAGE_H
#define REBUNO_SANDBOX_IMAGE_H

#include "base/err.h"

#define SBX_IMAGE_DEFAULT "default-v1"

/* Make sure images_dir/SBX_IMAGE_DEFAULT exists. 0 or -1 with err. */
int sbx_image_ensure_default(const char *images_dir, struct err *err);

/* Fill what an imported image layer at dir lacks from the default skeleton (mount
 * points, merged-/usr links, allowlisted host /etc entries, generated /etc files),
 * never replacing an entry it has. 0 or -1 with err. */
int sbx_image_fill(const char *dir, struct err *err);
/* rm -rf without following symlinks (best effort). */
void sbx_image_remove_tree(const char *path);

/* The host /etc entries copied into the image (NULL-terminated; for docs and tests). */
extern const char *const sbx_image_etc_allow[];

#endif
