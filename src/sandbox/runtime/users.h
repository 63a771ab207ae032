/*
 * users.h - Linux accounts inside a sandbox: lookup, creation, and the pure
 * parsing of /etc/passwd and /etc/group they rest on.
 *
 * The sandbox's own /etc/passwd and /etc/group are the source of truth (tools
 * inside may change them too). sandboxd reads them through the files layer, so a
 * sandbox cannot point them anywhere outside its root.
 */
#ifndef REBUNO_SANDBOX_USERS_H
#define REBUNO_SANDBOX_USERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "sandbox/storage/files.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/core/validate.h"

#define SBX_USER_UID_MIN 1000
#define SBX_USER_UID_MAX 59999
#define SBX_ETC_FILE_MAX (1u << 20)

struct sbx_user {
    char name[SBX_USER_NAME_MAX + 1];
    uint32_t uid, gid;
    char home[256];
    char shell[256];
    uint32_t groups[SBX_MAX_GROUPS]; /* supplementary, the primary gid first */
    uint32_t ngroups;
};

/* Look name up in passwd text. 0, or -ENOENT. Lines that do not parse are skipped. */
int sbx_passwd_lookup(const char *text, size_t n, const char *name, struct sbx_user *u);
/* Fill u->groups with u->gid and every group in group text that lists u->name. */
void sbx_group_fill(const char *text, size_t n, struct sbx_user *u);
/* Whether an entry called name exists in a passwd/group style file. */
int sbx_etc_has_name(const char *text, size_t n, const char *name);
/* Whether numeric id is used in field 3 of a passwd/group style file. */
int sbx_etc_has_id(const char *text, size_t n, uint32_t id);
/* Smallest id in [SBX_USER_UID_MIN, SBX_USER_UID_MAX] used neither as a uid in passwd
 * nor as a gid in group. -ENOSPC when none is left. */
int64_t sbx_next_free_id(const char *passwd, size_t pn, const char *group, size_t gn);

/* Resolve a user of the sandbox (root always resolves). 404 user_not_found. */
int sbx_user_resolve(const struct sbx_fs *fs, const char *name, struct sbx_user *u,
                     struct err *err);
/*
 * Create an account: a new uid and a group of the same name and id, home
 * /home/NAME (mode 0770, owned by the user), shell /bin/bash, /etc/skel copied in.
 * 400 for a bad name, 409 user_exists / group_exists / home_exists.
 */
int sbx_user_create(const struct sbx_fs *fs, const char *name, struct sbx_user *u,
                    struct err *err);

#endif
