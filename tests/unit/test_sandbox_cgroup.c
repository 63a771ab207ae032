/* test_sandbox_cgroup.c - both cgroup backends for real (tests run as root): create a
 * group, move a child into it, freeze, thaw, kill and remove it. v2 runs on the
 * unified hierarchy even without controllers (freeze and kill are core features). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/cgroup.h"

static void exercise(const char *mode)
{
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    char parent[64];
    snprintf(parent, sizeof parent, "rebuno-unit-%d", (int)getpid());
    if (sbx_cg_root_open(mode, parent, &root, &e) < 0) {
        cr_skip_test("no %s cgroups here: %s", mode, e.msg);
        return;
    }
    struct sbx_cg_limits l = {64 << 20, 32, 50000, 100000};
    struct sbx_cgroup *cg = sbx_cg_create(root, "g1", &l, &e);
    cr_assert_not_null(cg, "%s", e.msg);
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            for (;;) pause();
        }
        cr_assert_eq(sbx_cg_attach(cg, kids[i]), 0);
    }
    cr_assert_eq(sbx_cg_count(cg), 3);
    cr_assert_eq(sbx_cg_freeze(cg, 2000), 0);
    cr_assert(sbx_cg_frozen(cg));
    cr_assert_eq(sbx_cg_thaw(cg, 2000), 0);
    cr_assert_eq(sbx_cg_freeze(cg, 2000), 0);
    /* killing works on a frozen group too */
    cr_assert_eq(sbx_cg_kill(cg, 5000), 0);
    for (int i = 0; i < 3; i++) {
        int st;
        cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    }
    cr_assert_eq(sbx_cg_count(cg), 0);
    struct sbx_cg_stats s;
    sbx_cg_stats(cg, &s);
    cr_assert_eq(sbx_cg_destroy(cg), 0);
    /* a leftover group (a crash) is swept */
    cg = sbx_cg_create(root, "g2", &l, &e);
    cr_assert_not_null(cg);
    sbx_cg_forget(cg);
    cr_assert_eq(sbx_cg_root_sweep(root), 1);
    sbx_cg_root_remove(root);
    sbx_cg_root_free(root);
}

Test(sandbox_cgroup_real, v1)
{
    exercise("v1");
}

Test(sandbox_cgroup_real, v2_freeze_and_kill)
{
    exercise("v2");
}
