/*
 * buildfs.h - the file work of image builds (build.c): a finished RUN step's changes
 * and a COPY step's files, each written as one uncompressed layer tar (OCI form) that
 * the layer store then takes like any layer (sbx_layer_add_from_blob, layers.h).
 *
 * Both walk host trees as host root beneath a directory descriptor, never following a
 * symlink (safefs.h): a symlink is stored as a symlink, never read through.
 *   - the diff of a sandbox's upper tree (its session over, nothing mounted): every
 *     entry of upper/ as it is, owners shifted back by the tree's base uid; overlayfs
 *     whiteouts (0/0 character devices) become ".wh.NAME" entries, opaque directories
 *     (trusted.overlay.opaque=y) get a ".wh..wh..opq" entry; the files every sandbox
 *     gets of its own (/etc/hostname, /etc/hosts, /etc/resolv.conf) are left out, and
 *     so are fifos, sockets and device nodes;
 *   - COPY src dst: src relative to the context folder, without "..", never through a
 *     symlink (a symlink inside a copied folder is copied as one); files owned by root.
 * Run on a worker thread: files only. 0 or -1 with err.
 */
#ifndef REBUNO_SANDBOX_BUILDFS_H
#define REBUNO_SANDBOX_BUILDFS_H

#include <stdint.h>

#include "base/err.h"

/* The tar of the changes in upper_dirfd (a sandbox's "upper" directory) into out_fd.
 * base: the host uid of root inside in those files. *entries: how many were written. */
int sbx_build_diff(int upper_dirfd, uint32_t base, int out_fd, int64_t *entries, struct err *err);

/* The tar of context/src placed at dst (absolute, normalised) into out_fd: a folder's
 * contents go into dst; a file becomes dst, or dst/<name> when dst_is_dir. */
int sbx_build_copy(int ctx_dirfd, const char *src, const char *dst, int dst_is_dir, int out_fd,
                   int64_t *entries, struct err *err);

#endif
