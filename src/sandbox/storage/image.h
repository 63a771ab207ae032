/*
 * image.h - the built-in "host" image (a read-only layer made from this machine), and the
 * skeletons of self-contained images (sbx_image_make_skeleton).
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
 * /usr is the host's own, less a few paths that hold host configuration rather than
 * programs (sbx_image_usr_masked: /usr/local/etc), which every session hides with an
 * opaque directory in the sandbox's own upper layer (sbx_image_mask_usr).
 * A layer is built once per version into a temporary directory and renamed into
 * place, so a crash never leaves a half-built image in use.
 */
#ifndef REBUNO_SANDBOX_IMAGE_H
#define REBUNO_SANDBOX_IMAGE_H

#include <sys/types.h>

#include "base/err.h"

#define SBX_IMAGE_DEFAULT "default-v1"

/* Make sure images_dir/SBX_IMAGE_DEFAULT exists. 0 or -1 with err. */
int sbx_image_ensure_default(const char *images_dir, struct err *err);

/*
 * The skeleton of a self-contained image: images_dir/<name>/, the top lower layer of
 * its sessions, above its layers (layer_dirs: absolute, top first). It holds only what
 * the layers lack (looked up top down; an overlay whiteout counts as absent): the mount
 * points and standard directories, /etc with generated passwd, group, shadow, gshadow
 * and nsswitch.conf when the image has none, and always the sandbox's own hosts,
 * hostname and resolv.conf. Nothing of the host is copied. Built in a temporary and
 * renamed into place; an existing skeleton is kept. 0 or -1 with err.
 */
int sbx_image_make_skeleton(const char *images_dir, const char *name,
                            const char *const *layer_dirs, size_t n, struct err *err);

/* rm -rf without following symlinks or entering mounts (best effort). */
void sbx_image_remove_tree(const char *path);

/* The host /etc entries copied into the image (NULL-terminated; for docs and tests). */
extern const char *const sbx_image_etc_allow[];

/* Paths under the host's /usr a sandbox never sees, though /usr is the host's
 * (NULL-terminated): "local/etc" (host configuration such as npm's credentials). */
extern const char *const sbx_image_usr_masked[];
/* Before a session mounts its overlays: make each sbx_image_usr_masked path an opaque
 * directory in the sandbox's upper /usr (tree: the upper tree, holding upper/usr;
 * owner: the on-disk uid of root inside), so the host's copy is hidden while the
 * sandbox can still keep files of its own there. A path the sandbox already replaced
 * or removed is left as it is; symlinks are never followed (safefs.h). 0 or -1 with
 * err. */
int sbx_image_mask_usr(const char *tree, uid_t owner, struct err *err);

#endif
