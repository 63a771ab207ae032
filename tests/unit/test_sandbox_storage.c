/* test_sandbox_storage.c - issue 6's pure parts and the copy backend: the mount plan
 * with a cloned upper tree (idmapped) and drive mounts, mount path checks, and
 * sbx_storage_copy_tree keeping owners, modes, symlinks and overlay whiteouts. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/runtime/plan.h"
#include "sandbox/storage/storage.h"

static const struct sbx_op *find_op(const struct sbx_plan *p, enum sbx_op_kind k, int nth)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->ops[i].kind == k && nth-- == 0) return &p->ops[i];
    return NULL;
}

Test(sandbox_storage, plan_uses_the_store_tree_without_remap_for_its_own_files)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    struct sbx_plan_input in = {.sandbox_dir = "/s/sandboxes/x", .image_dir = "/s/images/d",
                                .usr_dir = "/usr", .uid_base = 165536,
                                .fs_dir = "/s/store/fs/x", .data_base = 165536};
    cr_assert_eq(sbx_plan_build(&in, &p, &e), 0, "%s", e.msg);
    const struct sbx_op *o = find_op(&p, SBX_OP_OVERLAY, 0);
    cr_assert_str_eq(o->data, "lowerdir=/s/sandboxes/x/mnt/layers/image,upperdir=/s/store/fs/x/"
                              "upper,workdir=/s/store/fs/x/work");
    cr_assert(!sbx_plan_uses_ns(&p, SBX_NS_FS));
    cr_assert(!sbx_plan_uses_ns(&p, SBX_NS_MOUNTS));
    sbx_plan_fini(&p);
}

Test(sandbox_storage, plan_binds_a_cloned_tree_idmapped_and_mounts_drives_last)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    struct sbx_plan_mount m[2] = {{"/s/store/drives/d/data", "/cache", 0},
                                  {"/s/store/mounts/x-1", "/data/ro", 1}};
    struct sbx_plan_input in = {.sandbox_dir = "/s/sandboxes/x", .image_dir = "/s/images/d",
                                .usr_dir = "/usr", .uid_base = 165536,
                                .fs_dir = "/s/store/fs/x", .data_base = 100000,
                                .mounts = m, .nmounts = 2, .mount_base = 0x80000000u};
    cr_assert_eq(sbx_plan_build(&in, &p, &e), 0, "%s", e.msg);
    cr_assert(sbx_plan_uses_ns(&p, SBX_NS_FS));
    cr_assert(sbx_plan_uses_ns(&p, SBX_NS_MOUNTS));
    const struct sbx_op *b = find_op(&p, SBX_OP_IDMAP_BIND, 2);
    cr_assert_not_null(b);
    cr_assert_str_eq(b->source, "/s/store/fs/x");
    cr_assert_str_eq(b->target, "/s/sandboxes/x/mnt/layers/fs");
    cr_assert_eq(b->ns, SBX_NS_FS);
    const struct sbx_op *o = find_op(&p, SBX_OP_OVERLAY, 1);
    cr_assert_str_eq(o->data, "lowerdir=/s/sandboxes/x/mnt/layers/usr,upperdir=/s/sandboxes/x/"
                              "mnt/layers/fs/upper/usr,workdir=/s/sandboxes/x/mnt/layers/fs/"
                              "work-usr");
    /* the two drive mounts come right before the pivot, the second read-only */
    cr_assert_eq(p.ops[p.n - 1].kind, SBX_OP_PIVOT);
    const struct sbx_op *d0 = &p.ops[p.n - 3], *d1 = &p.ops[p.n - 2];
    cr_assert_eq(d0->kind, SBX_OP_BIND_IN);
    cr_assert_str_eq(d0->data, "cache");
    cr_assert_str_eq(d0->target, "/s/sandboxes/x/mnt/root");
    cr_assert_eq(d0->owner, 165536u);
    cr_assert(!(d0->flags & MS_RDONLY));
    cr_assert_str_eq(d1->data, "data/ro");
    cr_assert(d1->flags & MS_RDONLY);
    sbx_plan_fini(&p);
}

Test(sandbox_storage, plan_refuses_unusable_mounts)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    const char *bad[] = {"/", "relative", "/a/../b", "/a/./b", "/a//b", "/a b", "/a/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sbx_plan_mount m = {"/s/store/drives/d/data", bad[i], 0};
        struct sbx_plan_input in = {.sandbox_dir = "/s/x", .image_dir = "/i", .usr_dir = "/usr",
                                    .uid_base = 100000, .mounts = &m, .nmounts = 1};
        cr_assert_eq(sbx_plan_build(&in, &p, &e), -1, "%s", bad[i]);
        cr_assert_eq(sbx_plan_mount_path_ok(bad[i]), 0, "%s", bad[i]);
    }
    char longp[300];
    memset(longp, 'a', sizeof longp);
    longp[0] = '/';
    longp[257] = '\0';
    cr_assert_eq(sbx_plan_mount_path_ok(longp), 0);
    longp[256] = '\0';
    cr_assert_eq(sbx_plan_mount_path_ok(longp), 1);
    cr_assert_eq(sbx_plan_mount_path_ok("/home/user/.cache"), 1);
}

static void put(const char *p, const char *text, mode_t mode, uid_t uid)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
    cr_assert(fd >= 0, "%s: %s", p, strerror(errno));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    fchmod(fd, mode);
    cr_assert_eq(fchown(fd, uid, uid), 0);
    close(fd);
}

Test(sandbox_storage, copy_tree_keeps_owners_modes_links_and_whiteouts)
{
    if (geteuid() != 0) cr_skip_test("needs root (chown, mknod)");
    char base[] = "/tmp/rebuno-unit-copy-XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    char src[256], dst[256], p[512];
    snprintf(src, sizeof src, "%s/src", base);
    snprintf(dst, sizeof dst, "%s/dst", base);
    cr_assert_eq(mkdir(src, 0750), 0);
    snprintf(p, sizeof p, "%s/dir", src);
    cr_assert_eq(mkdir(p, 0711), 0);
    cr_assert_eq(chown(p, 100005, 100005), 0);
    snprintf(p, sizeof p, "%s/dir/file", src);
    put(p, "hello", 0640, 100007);
    snprintf(p, sizeof p, "%s/link", src);
    cr_assert_eq(symlink("dir/file", p), 0);
    snprintf(p, sizeof p, "%s/whiteout", src);
    cr_assert_eq(mknod(p, S_IFCHR | 0000, makedev(0, 0)), 0);
    cr_assert_eq(sbx_storage_copy_tree(src, dst, false), 0);
    struct stat st;
    snprintf(p, sizeof p, "%s/dir", dst);
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_uid, 100005u);
    cr_assert_eq(st.st_mode & 07777, 0711u);
    snprintf(p, sizeof p, "%s/dir/file", dst);
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_uid, 100007u);
    cr_assert_eq(st.st_mode & 07777, 0640u);
    cr_assert_eq(st.st_size, 5);
    char t[64] = {0};
    snprintf(p, sizeof p, "%s/link", dst);
    cr_assert_eq(readlink(p, t, sizeof t - 1), 8);
    cr_assert_str_eq(t, "dir/file");
    snprintf(p, sizeof p, "%s/whiteout", dst);
    cr_assert_eq(lstat(p, &st), 0);
    cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == 0);
    cr_assert_eq(stat(dst, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0750u);
    /* an existing destination is refused */
    cr_assert_eq(sbx_storage_copy_tree(src, dst, false), -EEXIST);
    char *argv[] = {"rm", "-rf", base, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        execvp("rm", argv);
        _exit(127);
    }
    int ws;
    waitpid(pid, &ws, 0);
}
