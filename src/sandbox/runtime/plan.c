/*
 * plan.c - build the list of mount operations for a session (see plan.h). Pure.
 */
#include "sandbox/runtime/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "base/xalloc.h"

int sbx_plan_path_ok(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) > 1024) return 0;
    for (const char *s = p; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '/' || c == '.' || c == '_' || c == '-' || c == '+' || c == '@'))
            return 0;
    }
    /* no "." / ".." components and no "//" */
    for (const char *s = p; *s; s++) {
        if (s[0] != '/') continue;
        if (s[1] == '/') return 0;
        if (s[1] == '.' && (s[2] == '/' || s[2] == '\0')) return 0;
        if (s[1] == '.' && s[2] == '.' && (s[3] == '/' || s[3] == '\0')) return 0;
    }
    return 1;
}

static struct sbx_op *push(struct sbx_plan *p, enum sbx_op_kind k)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 32;
        p->ops = xrealloc(p->ops, p->cap * sizeof *p->ops);
    }
    struct sbx_op *o = &p->ops[p->n++];
    memset(o, 0, sizeof *o);
    o->kind = k;
    return o;
}

static void op_tmpfs(struct sbx_plan *p, char *target, char *data, unsigned long flags)
{
    struct sbx_op *o = push(p, SBX_OP_TMPFS);
    o->target = target;
    o->data = data;
    o->flags = flags;
}

static void op_mkdir(struct sbx_plan *p, char *target, mode_t mode)
{
    struct sbx_op *o = push(p, SBX_OP_MKDIR);
    o->target = target;
    o->mode = mode;
}

static void op_two(struct sbx_plan *p, enum sbx_op_kind k, char *source, char *target,
                   unsigned long flags)
{
    struct sbx_op *o = push(p, k);
    o->source = source;
    o->target = target;
    o->flags = flags;
}

int sbx_plan_build(const struct sbx_plan_input *in, struct sbx_plan *p, struct err *err)
{
    memset(p, 0, sizeof *p);
    if (!sbx_plan_path_ok(in->sandbox_dir))
        return err_invalid(err, "state_dir",
                           "sandbox directory \"%s\" must be an absolute path of "
                           "[A-Za-z0-9/._+@-] without . or .. components",
                           in->sandbox_dir);
    if (!sbx_plan_path_ok(in->image_dir))
        return err_invalid(err, "image", "image directory \"%s\" is not a usable path",
                           in->image_dir);
    if (in->usr_dir && !sbx_plan_path_ok(in->usr_dir))
        return err_invalid(err, "image", "usr directory \"%s\" is not a usable path",
                           in->usr_dir);
    if (in->nlayers > SBX_PLAN_LAYERS_MAX || (in->nlayers && in->usr_dir) ||
        (in->nlayers && (!in->layers_dir || !sbx_plan_path_ok(in->layers_dir))))
        return err_invalid(err, "image", "the image's layers cannot be used");
    for (size_t i = 0; i < in->nlayers; i++)
        if (!in->layers[i] || strlen(in->layers[i]) != 64 ||
            strspn(in->layers[i], "0123456789abcdef") != 64)
            return err_invalid(err, "image", "layer %zu is not named by a sha256 hex digest", i);
    if (in->uid_base == 0) return err_invalid(err, "uid_base", "uid base must not be 0");
    if (in->fs_dir && !sbx_plan_path_ok(in->fs_dir))
        return err_invalid(err, "state_dir", "upper directory \"%s\" is not a usable path",
                           in->fs_dir);
    if (in->nmounts > SBX_MOUNTS_MAX)
        return err_invalid(err, "mounts", "at most %d mounts", SBX_MOUNTS_MAX);
    for (size_t i = 0; i < in->nmounts; i++)
        if (!sbx_plan_path_ok(in->mounts[i].source) ||
            !sbx_plan_mount_path_ok(in->mounts[i].target))
            return err_invalid(err, "mounts", "mount %s is not a usable path",
                               in->mounts[i].target ? in->mounts[i].target : "?");
    const char *D = in->sandbox_dir;
    uint32_t B = in->uid_base;
    unsigned long long tmp = in->tmp_bytes ? (unsigned long long)in->tmp_bytes : 64ull << 20;
    char *L = xasprintf("%s/mnt/layers", D), *M = xasprintf("%s/mnt/root", D);

    push(p, SBX_OP_PRIVATE);
    op_tmpfs(p, xstrdup(L), xstrdup("mode=0700,size=64k"), MS_NOSUID | MS_NODEV | MS_NOEXEC);
    op_mkdir(p, xasprintf("%s/image", L), 0700);
    op_two(p, SBX_OP_IDMAP_BIND, xstrdup(in->image_dir), xasprintf("%s/image", L),
           MS_RDONLY | MS_NOSUID | MS_NODEV);
    if (in->usr_dir) {
        op_mkdir(p, xasprintf("%s/usr", L), 0700);
        op_two(p, SBX_OP_IDMAP_BIND, xstrdup(in->usr_dir), xasprintf("%s/usr", L),
               MS_RDONLY | MS_NOSUID | MS_NODEV);
    }
    for (size_t i = 0; i < in->nlayers; i++) {
        op_mkdir(p, xasprintf("%s/l%zu", L, i), 0700);
        op_two(p, SBX_OP_IDMAP_BIND, xasprintf("%s/%s", in->layers_dir, in->layers[i]),
               xasprintf("%s/l%zu", L, i), MS_RDONLY | MS_NOSUID | MS_NODEV);
    }

    /* U: the upper tree, bound idmapped when its files belong to another range */
    char *U = in->fs_dir ? xstrdup(in->fs_dir) : xasprintf("%s/fs", D);
    if (in->data_base && in->data_base != B) {
        op_mkdir(p, xasprintf("%s/fs", L), 0700);
        op_two(p, SBX_OP_IDMAP_BIND, U, xasprintf("%s/fs", L), MS_NOSUID | MS_NODEV);
        p->ops[p->n - 1].ns = SBX_NS_FS;
        U = xasprintf("%s/fs", L);
    }
    struct sbx_op *o;
    /* the sandbox's own files: setuid programs there only ever become its root */
    unsigned long tree = in->setuid ? MS_NODEV : MS_NOSUID | MS_NODEV;
    if (in->usr_dir) {
        o = push(p, SBX_OP_OVERLAY);
        o->target = xstrdup(M);
        o->data = xasprintf("lowerdir=%s/image,upperdir=%s/upper,workdir=%s/work", L, U, U);
        o->flags = tree;
        op_mkdir(p, xasprintf("%s/usr", M), 0755);
        o = push(p, SBX_OP_OVERLAY);
        o->target = xasprintf("%s/usr", M);
        o->data =
            xasprintf("lowerdir=%s/usr,upperdir=%s/upper/usr,workdir=%s/work-usr", L, U, U);
        o->flags = tree;
        free(U);
    } else {
        o = push(p, SBX_OP_OVERLAY_FD);
        o->target = xstrdup(M);
        o->source = U;
        size_t cap = strlen(L) * (in->nlayers + 1) + 16 * (in->nlayers + 1) + 16;
        char *lw = xmalloc(cap);
        int w = snprintf(lw, cap, "%s/image", L);
        for (size_t i = 0; i < in->nlayers; i++)
            w += snprintf(lw + w, cap - (size_t)w, "\n%s/l%zu", L, i);
        o->data = lw;
        o->flags = tree;
    }

    op_mkdir(p, xasprintf("%s/proc", M), 0555);
    o = push(p, SBX_OP_PROC);
    o->target = xasprintf("%s/proc", M);
    o->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

    op_mkdir(p, xasprintf("%s/dev", M), 0755);
    op_tmpfs(p, xasprintf("%s/dev", M), xasprintf("mode=0755,uid=%u,gid=%u,size=64k", B, B),
             MS_NOSUID | MS_NOEXEC);
    static const struct {
        const char *name;
        unsigned maj, min;
    } nodes[] = {{"null", 1, 3}, {"zero", 1, 5},    {"full", 1, 7},
                 {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        o = push(p, SBX_OP_MKNOD);
        o->target = xasprintf("%s/dev/%s", M, nodes[i].name);
        o->mode = S_IFCHR | 0666;
        o->dev = makedev(nodes[i].maj, nodes[i].min);
    }
    static const struct {
        const char *text, *name;
    } links[] = {{"/proc/self/fd", "fd"},       {"/proc/self/fd/0", "stdin"},
                 {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
                 {"pts/ptmx", "ptmx"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        op_two(p, SBX_OP_SYMLINK, xstrdup(links[i].text), xasprintf("%s/dev/%s", M, links[i].name),
               0);
    op_mkdir(p, xasprintf("%s/dev/pts", M), 0755);
    o = push(p, SBX_OP_DEVPTS);
    o->target = xasprintf("%s/dev/pts", M);
    /* max=: the host has one pool of ptys (kernel.pty.max) shared by every devpts
     * instance; this caps what one sandbox can take from it */
    o->data = xasprintf("newinstance,ptmxmode=0666,mode=0620,gid=%u,max=%d", B + 5,
                        SBX_DEVPTS_MAX);
    o->flags = MS_NOSUID | MS_NOEXEC;
    op_mkdir(p, xasprintf("%s/dev/shm", M), 01777);
    op_tmpfs(p, xasprintf("%s/dev/shm", M),
             xasprintf("mode=1777,uid=%u,gid=%u,size=%llu", B, B, tmp), MS_NOSUID | MS_NODEV);
    op_mkdir(p, xasprintf("%s/tmp", M), 01777);
    op_tmpfs(p, xasprintf("%s/tmp", M), xasprintf("mode=1777,uid=%u,gid=%u,size=%llu", B, B, tmp),
             MS_NOSUID | MS_NODEV);

    /* /proc: the host's kernel knobs read-only, a few files that describe the host masked. */
    static const char *ro[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
    for (size_t i = 0; i < sizeof ro / sizeof ro[0]; i++) {
        op_two(p, SBX_OP_BIND_RO, xasprintf("%s/proc/%s", M, ro[i]),
               xasprintf("%s/proc/%s", M, ro[i]), 0);
        p->ops[p->n - 1].optional = 1;
    }
    static const char *masked[] = {"kcore", "keys", "timer_list", "kallsyms", "kmsg"};
    for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++) {
        op_two(p, SBX_OP_BIND_RO, xasprintf("%s/dev/null", M),
               xasprintf("%s/proc/%s", M, masked[i]), 0);
        p->ops[p->n - 1].optional = 1;
    }
    /* the session's own boot id (D/boot_id, written for each session: spawn.c) */
    op_two(p, SBX_OP_BIND_RO, xasprintf("%s/boot_id", D),
           xasprintf("%s/proc/sys/kernel/random/boot_id", M), 0);
    p->ops[p->n - 1].optional = 1;

    /* drive mounts: after everything else, so none can be shadowed */
    for (size_t i = 0; i < in->nmounts; i++) {
        o = push(p, SBX_OP_BIND_IN);
        o->source = xstrdup(in->mounts[i].source);
        o->target = xstrdup(M);
        o->data = xstrdup(in->mounts[i].target + 1);
        o->flags = MS_NOSUID | MS_NODEV | (in->mounts[i].readonly ? MS_RDONLY : 0);
        o->ns = SBX_NS_MOUNTS;
        o->owner = B;
    }

    o = push(p, SBX_OP_PIVOT);
    o->target = M;
    free(L);
    return 0;
}

int sbx_plan_mount_path_ok(const char *p)
{
    if (!sbx_plan_path_ok(p) || !strcmp(p, "/") || strlen(p) > SBX_MOUNT_PATH_MAX) return 0;
    return p[strlen(p) - 1] != '/';
}

int sbx_plan_uses_ns(const struct sbx_plan *p, int ns)
{
    for (size_t i = 0; i < p->n; i++)
        if ((p->ops[i].kind == SBX_OP_IDMAP_BIND || p->ops[i].kind == SBX_OP_BIND_IN) &&
            p->ops[i].ns == ns)
            return 1;
    return 0;
}

void sbx_plan_fini(struct sbx_plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->ops[i].source);
        free(p->ops[i].target);
        free(p->ops[i].data);
    }
    free(p->ops);
    memset(p, 0, sizeof *p);
}

const char *sbx_op_name(enum sbx_op_kind k)
{
    switch (k) {
    case SBX_OP_PRIVATE: return "make mounts private";
    case SBX_OP_TMPFS: return "mount tmpfs";
    case SBX_OP_MKDIR: return "mkdir";
    case SBX_OP_IDMAP_BIND: return "idmapped bind";
    case SBX_OP_OVERLAY: return "mount overlay";
    case SBX_OP_PROC: return "mount proc";
    case SBX_OP_DEVPTS: return "mount devpts";
    case SBX_OP_MKNOD: return "mknod";
    case SBX_OP_SYMLINK: return "symlink";
    case SBX_OP_BIND_RO: return "read-only bind";
    case SBX_OP_PIVOT: return "pivot_root";
    case SBX_OP_BIND_IN: return "mount";
    case SBX_OP_OVERLAY_FD: return "mount overlay (layers)";
    }
    return "?";
}
