/*
 * caps.c - restrict the capability sets with libcap (see caps.h).
 */
#include "sandbox/runtime/caps.h"

#include <errno.h>
#include <sys/capability.h>
#include <sys/prctl.h>

static const cap_value_t kept[] = {
    CAP_CHOWN,       CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,  CAP_FOWNER,
    CAP_FSETID,      CAP_KILL,         CAP_SETGID,           CAP_SETUID,
    CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE,
};

bool sbx_caps_kept(int cap)
{
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (kept[i] == cap) return true;
    return false;
}

int sbx_caps_restrict(void)
{
    int last = (int)cap_max_bits() - 1;
    for (int c = 0; c <= last; c++)
        if (!sbx_caps_kept(c) && cap_drop_bound((cap_value_t)c) < 0 && errno != EINVAL)
            return -errno;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    cap_t c = cap_init();
    if (!c) return -ENOMEM;
    int n = (int)(sizeof kept / sizeof kept[0]);
    int r = cap_set_flag(c, CAP_PERMITTED, n, kept, CAP_SET);
    if (r == 0) r = cap_set_flag(c, CAP_EFFECTIVE, n, kept, CAP_SET);
    if (r == 0) r = cap_set_proc(c);
    int e = r < 0 ? -errno : 0;
    cap_free(c);
    return e;
}
