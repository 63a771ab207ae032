/* test_sandbox_cgroup.c - the cgroup backends.
 *
 * For real (tests run as root): create a group, move children into it, freeze, thaw,
 * kill and remove it, on v1 and on the unified (v2) hierarchy; this machine's v2 has
 * no limit controllers, so that one is opened with no_limits (freeze and kill are core
 * features) and makes unlimited groups only.
 *
 * On a fake cgroup directory (cgroup_int.h: a mounts table naming plain directories
 * that hold the files the kernel would): the files each backend writes for a set of
 * limits, and that missing controllers or limit files are refused, never skipped. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/runtime/cgroup.h"
#include "sandbox/runtime/cgroup_int.h"
#include "sandbox/storage/image.h"

static const char *real_mode;

/* After a real test, passed or failed: kill and remove what is left of its groups. */
static void real_cleanup(void)
{
    char parent[64];
    snprintf(parent, sizeof parent, "rebuno-unit-%d", (int)getpid());
    struct sbx_cg_open_opts o = {.mode = real_mode, .parent = parent, .no_limits = true};
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    if (sbx_cg_root_open_ex(&o, &root, &e) < 0) return;
    sbx_cg_root_sweep(root);
    sbx_cg_root_remove(root);
    sbx_cg_root_free(root);
}

static void exercise(const char *mode, const struct sbx_cg_limits *l)
{
    real_mode = mode;
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    char parent[64];
    snprintf(parent, sizeof parent, "rebuno-unit-%d", (int)getpid());
    struct sbx_cg_open_opts o = {.mode = mode, .parent = parent, .no_limits = !strcmp(mode, "v2")};
    if (sbx_cg_root_open_ex(&o, &root, &e) < 0) {
        cr_skip_test("no %s cgroups here: %s", mode, e.msg);
        return;
    }
    struct sbx_cgroup *cg = sbx_cg_create(root, "g1", l, &e);
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
    /* cpu usage counts what the group's processes burn: one spins 30 ms of cpu time */
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t spin = fork();
    if (spin == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 0) _exit(1); /* until attached */
        struct timespec t0, t;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
        do clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 30000000L);
        _exit(0);
    }
    close(go[0]);
    cr_assert_eq(sbx_cg_attach(cg, spin), 0);
    close(go[1]);
    cr_assert_eq(waitpid(spin, NULL, 0), spin);
    struct sbx_cg_stats cs;
    sbx_cg_stats(cg, &cs);
    cr_assert_geq(cs.cpu_usage_us, 25000, "cpu usage %lld us", (long long)cs.cpu_usage_us);
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
    cg = sbx_cg_create(root, "g2", l, &e);
    cr_assert_not_null(cg);
    sbx_cg_forget(cg);
    cr_assert_eq(sbx_cg_root_sweep(root), 1);
    sbx_cg_root_remove(root);
    sbx_cg_root_free(root);
}

Test(sandbox_cgroup_real, v1, .fini = real_cleanup)
{
    struct sbx_cg_limits l = {64 << 20, 32, 50000, 100000};
    exercise("v1", &l);
}

Test(sandbox_cgroup_real, v2_freeze_and_kill, .fini = real_cleanup)
{
    struct sbx_cg_limits unlimited = {0, 0, 0, 0};
    exercise("v2", &unlimited);
}

/* On a v2 hierarchy without the limit controllers (this machine's), the daemon's way
 * of opening it is refused, and a group with limits cannot be made even when opened
 * for freeze and kill only. */
Test(sandbox_cgroup_real, v2_without_controllers_is_refused, .fini = real_cleanup)
{
    real_mode = "v2";
    char have[512] = "";
    FILE *f = fopen("/sys/fs/cgroup/unified/cgroup.controllers", "re");
    if (!f) cr_skip_test("no hybrid unified hierarchy here");
    if (!fgets(have, sizeof have, f)) have[0] = '\0';
    fclose(f);
    if (strstr(have, "memory") && strstr(have, "pids") && strstr(have, "cpu"))
        cr_skip_test("this v2 hierarchy has the controllers");
    char parent[64];
    snprintf(parent, sizeof parent, "rebuno-unit-%d", (int)getpid());
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_cg_root_open("v2", parent, &root, &e), -1);
    cr_assert_null(root);
    cr_assert_str_eq(e.code, "cgroup_unavailable");
    cr_assert(strstr(e.msg, "lacks the memory, pids, cpu controllers") && strstr(e.msg, "--cgroup v1"),
              "%s", e.msg);
    struct sbx_cg_open_opts o = {.mode = "v2", .parent = parent, .no_limits = true};
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), 0, "%s", e.msg);
    struct sbx_cg_limits l = {64 << 20, 32, 50000, 100000};
    err_clear(&e);
    cr_assert_null(sbx_cg_create(root, "g1", &l, &e));
    cr_assert(strstr(e.msg, "memory.max") && strstr(e.msg, "not enabled"), "%s", e.msg);
    char p[600];
    snprintf(p, sizeof p, "/sys/fs/cgroup/unified/%s/g1", parent);
    cr_assert_neq(access(p, F_OK), 0, "the refused group was left behind");
    sbx_cg_root_remove(root);
    sbx_cg_root_free(root);
}

/* ---- a fake cgroup directory ---- */

static char fake[64];

static void fake_rm(void)
{
    if (fake[0]) sbx_image_remove_tree(fake);
}

static void put(const char *dir, const char *file, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "we");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static char *get(const char *dir, const char *file)
{
    static char b[256];
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "re");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    size_t n = fread(b, 1, sizeof b - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

/* mkdir a/b (b may be "") */
static void mk(const char *a, const char *b)
{
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", a, *b ? "/" : "", b);
    cr_assert(mkdir(p, 0755) == 0 || errno == EEXIST, "%s: %s", p, strerror(errno));
}

/* A fake root: returns the mounts table's path; hierarchies under fake/. */
static const char *fake_init(const char *table)
{
    snprintf(fake, sizeof fake, "/tmp/rebuno-cg-fake-XXXXXX");
    cr_assert_not_null(mkdtemp(fake));
    static char mounts[128];
    snprintf(mounts, sizeof mounts, "%s/mounts", fake);
    FILE *f = fopen(mounts, "we");
    cr_assert_not_null(f);
    /* the table names directories under fake (one %s per line) */
    for (const char *p = table; *p; p++) {
        if (*p == '@')
            fputs(fake, f);
        else
            fputc(*p, f);
    }
    fclose(f);
    return mounts;
}

static const char *const v2_limit_files[] = {"memory.max", "memory.swap.max", "pids.max",
                                             "cpu.max"};

Test(sandbox_cgroup_fake, v2_writes_every_limit, .fini = fake_rm)
{
    const char *mounts = fake_init("cgroup2 @/unified cgroup2 rw,nosuid,nodev 0 0\n");
    char mnt[128], parent[160], g[200];
    snprintf(mnt, sizeof mnt, "%s/unified", fake);
    mk(mnt, "");
    put(mnt, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put(mnt, "cgroup.subtree_control", "cpu memory pids\n");
    snprintf(parent, sizeof parent, "%s/rebuno-t", mnt);
    mk(parent, "");
    put(parent, "cgroup.subtree_control", "cpu memory pids\n");
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    struct sbx_cg_open_opts o = {.mode = "v2", .parent = "rebuno-t", .mounts = mounts};
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), 0, "%s", e.msg);
    cr_assert_eq(sbx_cg_root_kind(root), SBX_CG_V2);
    /* nothing to enable: the controller lists are left as they were */
    cr_assert_str_eq(get(mnt, "cgroup.subtree_control"), "cpu memory pids\n");

    /* the group as the kernel makes it: its limit files exist, empty here */
    snprintf(g, sizeof g, "%s/g1", parent);
    mk(g, "");
    for (size_t i = 0; i < sizeof v2_limit_files / sizeof v2_limit_files[0]; i++)
        put(g, v2_limit_files[i], "");
    struct sbx_cgroup *cg = sbx_cg_open(root, "g1");
    struct sbx_cg_limits l = {512ll << 20, 200, 150000, 100000};
    cr_assert_eq(sbx_cg_set_limits(cg, &l, &e), 0, "%s", e.msg);
    cr_assert_str_eq(get(g, "memory.max"), "536870912");
    cr_assert_str_eq(get(g, "memory.swap.max"), "0");
    cr_assert_str_eq(get(g, "pids.max"), "200");
    cr_assert_str_eq(get(g, "cpu.max"), "150000 100000");
    cr_assert_str_eq(sbx_cg_path(cg), "v2:/rebuno-t/g1");
    sbx_cg_forget(cg);

    /* a limit file that is missing (its controller not enabled) fails, whichever it is */
    for (size_t miss = 0; miss < sizeof v2_limit_files / sizeof v2_limit_files[0]; miss++) {
        if (!strcmp(v2_limit_files[miss], "memory.swap.max")) continue; /* no swap accounting */
        char g2[220];
        snprintf(g2, sizeof g2, "%s/m%zu", parent, miss);
        mk(g2, "");
        for (size_t i = 0; i < sizeof v2_limit_files / sizeof v2_limit_files[0]; i++)
            if (i != miss) put(g2, v2_limit_files[i], "");
        char name[16];
        snprintf(name, sizeof name, "m%zu", miss);
        cg = sbx_cg_open(root, name);
        err_clear(&e);
        cr_assert_eq(sbx_cg_set_limits(cg, &l, &e), -1, "%s", v2_limit_files[miss]);
        cr_assert(strstr(e.msg, v2_limit_files[miss]) && strstr(e.msg, "not enabled"), "%s",
                  e.msg);
        cr_assert_str_eq(e.code, "cgroup_failed");
        /* unlimited needs no file: nothing is lost */
        struct sbx_cg_limits none = {0, 0, 0, 100000};
        cr_assert_eq(sbx_cg_set_limits(cg, &none, &e), 0, "%s", e.msg);
        sbx_cg_forget(cg);
    }

    /* sbx_cg_create: the kernel would fill the new group; here it stays empty, so the
     * limits cannot be written and the group is refused and removed again */
    err_clear(&e);
    cr_assert_null(sbx_cg_create(root, "fresh", &l, &e));
    cr_assert(strstr(e.msg, "memory.max"), "%s", e.msg);
    snprintf(g, sizeof g, "%s/fresh", parent);
    cr_assert_neq(access(g, F_OK), 0);
    sbx_cg_root_free(root);
}

Test(sandbox_cgroup_fake, v2_missing_controllers_are_refused, .fini = fake_rm)
{
    const char *mounts = fake_init("cgroup2 @/unified cgroup2 rw 0 0\n");
    char mnt[128], parent[160];
    snprintf(mnt, sizeof mnt, "%s/unified", fake);
    mk(mnt, "");
    put(mnt, "cgroup.controllers", "cpu io hugetlb\n");
    put(mnt, "cgroup.subtree_control", "");
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    struct sbx_cg_open_opts o = {.mode = "v2", .parent = "rebuno-t", .mounts = mounts};
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), -1);
    cr_assert_null(root);
    cr_assert_str_eq(e.code, "cgroup_unavailable");
    cr_assert(strstr(e.msg, "lacks the memory, pids controllers"), "%s", e.msg);
    cr_assert(strstr(e.msg, "\"cpu io hugetlb\"") && strstr(e.msg, "cgroup.subtree_control") &&
                  strstr(e.msg, "--cgroup v1"),
              "%s", e.msg);
    /* auto picks v2 here (no v1) and refuses it the same way */
    o.mode = "auto";
    err_clear(&e);
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), -1);
    cr_assert(strstr(e.msg, "lacks the memory, pids controllers"), "%s", e.msg);

    /* available but not enabled for the parent (the write does not take): refused,
     * naming them and the file to fix, and the parent it made is removed */
    put(mnt, "cgroup.controllers", "cpu io memory pids\n");
    snprintf(parent, sizeof parent, "%s/rebuno-t", mnt);
    o.mode = "v2";
    err_clear(&e);
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), -1);
    cr_assert(strstr(e.msg, "cannot enable the memory, pids, cpu controllers"), "%s", e.msg);
    cr_assert(strstr(e.msg, "cgroup.subtree_control"), "%s", e.msg);
    cr_assert_neq(access(parent, F_OK), 0);
    /* the same with the parent already there: refused, and the parent is left alone */
    mk(parent, "");
    put(parent, "cgroup.subtree_control", "memory\n");
    err_clear(&e);
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), -1);
    cr_assert(strstr(e.msg, "cannot enable the") && strstr(e.msg, "pids") && strstr(e.msg, "cpu"),
              "%s", e.msg);
    cr_assert_eq(access(parent, F_OK), 0);
    /* no cgroup2 at all */
    char none[128];
    snprintf(none, sizeof none, "%s/none", fake);
    put(fake, "none", "proc /proc proc rw 0 0\n");
    o.mounts = none;
    err_clear(&e);
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), -1);
    cr_assert(strstr(e.msg, "no cgroup2 file system is mounted"), "%s", e.msg);
}

Test(sandbox_cgroup_fake, v1_writes_every_limit, .fini = fake_rm)
{
    const char *mounts = fake_init("cgroup @/memory cgroup rw,nosuid,memory 0 0\n"
                                   "cgroup @/pids cgroup rw,pids 0 0\n"
                                   "cgroup @/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
                                   "cgroup @/freezer cgroup rw,freezer 0 0\n"
                                   "cgroup2 @/unified cgroup2 rw 0 0\n");
    static const char *const h[] = {"memory", "pids", "cpu,cpuacct", "freezer"};
    for (size_t i = 0; i < 4; i++) mk(fake, h[i]);
    struct sbx_cg_root *root = NULL;
    struct err e = ERR_INIT;
    struct sbx_cg_open_opts o = {.mode = "auto", .parent = "rebuno-t", .mounts = mounts};
    cr_assert_eq(sbx_cg_root_open_ex(&o, &root, &e), 0, "%s", e.msg);
    cr_assert_eq(sbx_cg_root_kind(root), SBX_CG_V1);
    char g[4][200];
    for (size_t i = 0; i < 4; i++) {
        snprintf(g[i], sizeof g[i], "%s/%s/rebuno-t/g1", fake, h[i]);
        cr_assert_eq(mkdir(g[i], 0755), 0, "%s: %s", g[i], strerror(errno));
    }
    put(g[0], "memory.limit_in_bytes", "");
    put(g[0], "memory.memsw.limit_in_bytes", "");
    put(g[1], "pids.max", "");
    put(g[2], "cpu.cfs_period_us", "");
    put(g[2], "cpu.cfs_quota_us", "");
    struct sbx_cgroup *cg = sbx_cg_open(root, "g1");
    struct sbx_cg_limits l = {256ll << 20, 64, 200000, 100000};
    cr_assert_eq(sbx_cg_set_limits(cg, &l, &e), 0, "%s", e.msg);
    cr_assert_str_eq(get(g[0], "memory.limit_in_bytes"), "268435456");
    cr_assert_str_eq(get(g[0], "memory.memsw.limit_in_bytes"), "268435456");
    cr_assert_str_eq(get(g[1], "pids.max"), "64");
    cr_assert_str_eq(get(g[2], "cpu.cfs_period_us"), "100000");
    cr_assert_str_eq(get(g[2], "cpu.cfs_quota_us"), "200000");
    /* no swap accounting (no memsw file) is fine; a missing pids.max is not */
    char p[256];
    snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", g[0]);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(sbx_cg_set_limits(cg, &l, &e), 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/pids.max", g[1]);
    cr_assert_eq(unlink(p), 0);
    err_clear(&e);
    cr_assert_eq(sbx_cg_set_limits(cg, &l, &e), -1);
    cr_assert(strstr(e.msg, "pids.max") && strstr(e.msg, "pids limit"), "%s", e.msg);
    sbx_cg_forget(cg);
    sbx_cg_root_free(root);
}
