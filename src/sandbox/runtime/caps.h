/*
 * caps.h - the capabilities root inside a sandbox keeps.
 *
 * Root inside is an unprivileged uid outside, and every namespace but the user
 * namespace belongs to the host, so most capabilities are empty words already.
 * What is kept is what ordinary tools expect of root on its own files (chown,
 * reading and writing any file, setuid to users, kill, binding low ports, chroot);
 * everything else leaves the bounding set, so nothing a command execs can regain
 * it. Users other than root get no capabilities at all (the kernel clears them on
 * setuid).
 */
#ifndef REBUNO_SANDBOX_CAPS_H
#define REBUNO_SANDBOX_CAPS_H

#include <stdbool.h>

/* Drop every capability not in the kept set from the bounding set, clear the
 * inheritable and ambient sets, and set permitted = effective = kept. 0 or -errno. */
int sbx_caps_restrict(void);
/* Whether capability number cap is in the kept set (for tests). */
bool sbx_caps_kept(int cap);

#endif
