/*
 * proto.c - encoding of sandboxd <-> init messages (see proto.h).
 *
 * SPAWN payload layout (host byte order; both ends are the same binary):
 *   u32 uid, gid, ngroups, argc, envc;  u32 groups[ngroups];
 *   cwd NUL  argv[0] NUL ... argv[argc-1] NUL  envp[0] NUL ... envp[envc-1] NUL
 */
#include "sandbox/runtime/proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void sbx_msg_encode(struct buf *out, uint32_t type, uint64_t id, int32_t a, int32_t b,
                    const void *payload, size_t len)
{
    struct sbx_msg_hdr h = {type, (uint32_t)len, id, a, b};
    buf_reset(out);
    buf_append(out, &h, sizeof h);
    if (len) buf_append(out, payload, len);
}

int sbx_msg_decode(const void *p, size_t n, struct sbx_msg_hdr *h, const void **payload)
{
    if (n < sizeof *h || n > SBX_MSG_MAX) return -EBADMSG;
    memcpy(h, p, sizeof *h);
    if (h->len != n - sizeof *h) return -EBADMSG;
    *payload = (const char *)p + sizeof *h;
    return 0;
}

int sbx_spawn_encode(const struct sbx_spawn_req *r, struct buf *out)
{
    if (r->ngroups > SBX_MAX_GROUPS || r->argc == 0) return -EINVAL;
    if (r->pty && (r->cols < 1 || r->cols > SBX_PTY_DIM_MAX || r->rows < 1 ||
                   r->rows > SBX_PTY_DIM_MAX))
        return -EINVAL;
    struct buf pl;
    buf_init(&pl, SBX_MSG_MAX);
    uint32_t head[5] = {r->uid, r->gid, r->ngroups, r->argc, r->envc};
    int e = buf_append(&pl, head, sizeof head);
    if (!e && r->ngroups) e = buf_append(&pl, r->groups, r->ngroups * sizeof(uint32_t));
    if (!e) e = buf_append(&pl, r->cwd ? r->cwd : "/", strlen(r->cwd ? r->cwd : "/") + 1);
    for (uint32_t i = 0; !e && i < r->argc; i++)
        e = buf_append(&pl, r->argv[i], strlen(r->argv[i]) + 1);
    for (uint32_t i = 0; !e && i < r->envc; i++)
        e = buf_append(&pl, r->envp[i], strlen(r->envp[i]) + 1);
    if (!e && pl.len + sizeof(struct sbx_msg_hdr) > SBX_MSG_MAX) e = -E2BIG;
    if (!e)
        sbx_msg_encode(out, r->pty ? SBX_MSG_SPAWN_PTY : SBX_MSG_SPAWN, r->id,
                       r->pty ? r->cols : 0, r->pty ? r->rows : 0, pl.data, pl.len);
    buf_fini(&pl);
    return e ? -E2BIG : 0;
}

/* Next NUL-terminated string at *p within end, or NULL. */
static const char *next_str(const char **p, const char *end)
{
    const char *s = *p;
    if (s >= end) return NULL;
    const char *z = memchr(s, '\0', (size_t)(end - s));
    if (!z) return NULL;
    *p = z + 1;
    return s;
}

int sbx_spawn_decode(const void *payload, size_t len, uint64_t id, struct sbx_spawn_req *r)
{
    memset(r, 0, sizeof *r);
    uint32_t head[5];
    if (len < sizeof head) return -EBADMSG;
    memcpy(head, payload, sizeof head);
    r->id = id;
    r->uid = head[0];
    r->gid = head[1];
    r->ngroups = head[2];
    r->argc = head[3];
    r->envc = head[4];
    if (r->ngroups > SBX_MAX_GROUPS || r->argc == 0 || r->argc > len || r->envc > len)
        return -EBADMSG;
    const char *p = (const char *)payload + sizeof head, *end = (const char *)payload + len;
    if ((size_t)(end - p) < r->ngroups * sizeof(uint32_t)) return -EBADMSG;
    memcpy(r->groups, p, r->ngroups * sizeof(uint32_t));
    p += r->ngroups * sizeof(uint32_t);
    if (!(r->cwd = next_str(&p, end))) return -EBADMSG;
    r->argv = xcalloc((size_t)r->argc + 1, sizeof *r->argv);
    r->envp = xcalloc((size_t)r->envc + 1, sizeof *r->envp);
    for (uint32_t i = 0; i < r->argc; i++)
        if (!(r->argv[i] = next_str(&p, end))) goto bad;
    for (uint32_t i = 0; i < r->envc; i++)
        if (!(r->envp[i] = next_str(&p, end))) goto bad;
    if (p != end) goto bad;
    return 0;
bad:
    sbx_spawn_req_fini(r);
    return -EBADMSG;
}

void sbx_spawn_req_fini(struct sbx_spawn_req *r)
{
    free(r->argv);
    free(r->envp);
    r->argv = r->envp = NULL;
}
