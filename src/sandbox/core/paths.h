/*
 * paths.h - lexical path handling for the files API (pure, no I/O).
 *
 * Paths from clients are normalised before the kernel ever sees them: relative
 * paths are joined to a base (the acting user's home), "." and empty components
 * are dropped and ".." pops one component but never climbs above "/". The result
 * is what the sandbox's own root would mean by the path; the kernel then resolves
 * it again with RESOLVE_IN_ROOT (files.c), which also confines symlinks, so a
 * lexical slip here still cannot leave the sandbox.
 */
#ifndef REBUNO_SANDBOX_PATHS_H
#define REBUNO_SANDBOX_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SBX_PATH_MAX 4096     /* bytes of a client path, and of a normalised one */
#define SBX_COMPONENT_MAX 255 /* bytes of one path component */

/*
 * Normalise `in` into out (outlen >= SBX_PATH_MAX + 1). base must be an absolute,
 * already normalised path; it is used when `in` is relative. Empty input, NUL bytes
 * (impossible in C strings, but a length is checked), over-long paths and components
 * fail with 400 validation_error on `field`. Returns 0 or -1.
 */
int sbx_path_normalize(const char *in, const char *base, char *out, size_t outlen,
                       const char *field, struct err *err);

/*
 * Split a normalised absolute path into its parent, relative to the root ("." for the
 * root itself, else "a/b"), and its last component. For "/" the leaf is "" and the
 * parent ".". parent needs SBX_PATH_MAX + 1 bytes.
 */
void sbx_path_split(const char *norm, char *parent, size_t plen, const char **leaf);

/* The normalised path relative to the root: "." for "/", else without the leading '/'. */
const char *sbx_path_rel(const char *norm);

#endif
