/* test_sandbox_hostwide.c - what daemons share on one host: the uid range table
 * (uidpool.h: disjoint ranges, folders from before the table keep theirs, gone folders
 * give theirs back) and the daemon records (daemons.h: a live daemon's folder is refused,
 * a dead daemon's record is reaped and dropped). Each test uses its own temporary table
 * and record folder. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/core/daemons.h"
#include "sandbox/runtime/idmap.h"
#include "sandbox/core/uidpool.h"

static char root[64];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/rebuno-hostwide-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    cr_assert_eq(system(cmd), 0);
}

/* A state folder that exists (it has a sandboxd.db, as a daemon's does). */
static char *folder(const char *name)
{
    char *p;
    cr_assert(asprintf(&p, "%s/%s", root, name) > 0);
    mkdir(p, 0700);
    char db[256];
    snprintf(db, sizeof db, "%s/sandboxd.db", p);
    int fd = open(db, O_CREAT | O_WRONLY, 0600);
    cr_assert(fd >= 0);
    close(fd);
    return p;
}

static char *table(void)
{
    char *p;
    cr_assert(asprintf(&p, "%s/var/uid-ranges.db", root) > 0);
    return p;
}

static struct sbx_uidpool *pool(const char *tbl, const char *dir, uint32_t first,
                                const uint32_t *used, size_t n)
{
    struct sbx_uidpool *p = NULL;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_uidpool_open(tbl, dir, first, sbx_idmap_max_slot(first), used, n, &p, &e),
                 0, "%s", e.msg);
    return p;
}

struct taken {
    uint32_t v[256];
    size_t n;
};

static bool in(uint32_t slot, void *arg)
{
    const struct taken *t = arg;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i] == slot) return true;
    return false;
}

/* Take n slots, as n creates would; returns their first host uids in out. */
static void take(struct sbx_uidpool *p, uint32_t first, struct taken *t, int n, int64_t *out)
{
    for (int i = 0; i < n; i++) {
        uint32_t s;
        cr_assert_eq(sbx_uidpool_take(p, in, t, &s), 0);
        cr_assert(!in(s, t));
        t->v[t->n++] = s;
        out[i] = (int64_t)first + (int64_t)s * SBX_IDMAP_COUNT;
    }
}

static void disjoint(const int64_t *a, size_t na, const int64_t *b, size_t nb)
{
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            cr_assert(a[i] + SBX_IDMAP_COUNT <= b[j] || b[j] + SBX_IDMAP_COUNT <= a[i],
                      "ranges at %lld and %lld overlap", (long long)a[i], (long long)b[j]);
}

TestSuite(sandbox_hostwide, .init = setup, .fini = teardown);

Test(sandbox_hostwide, two_folders_get_disjoint_ranges_past_one_batch)
{
    char *tbl = table(), *a = folder("a"), *b = folder("b");
    struct sbx_uidpool *pa = pool(tbl, a, 100000, NULL, 0);
    struct sbx_uidpool *pb = pool(tbl, b, 100000, NULL, 0);
    struct taken ta = {0}, tb = {0};
    int64_t ra[SBX_UIDPOOL_BATCH + 3], rb[SBX_UIDPOOL_BATCH + 3];
    take(pa, 100000, &ta, SBX_UIDPOOL_BATCH + 3, ra); /* a runs out once and reserves more */
    take(pb, 100000, &tb, SBX_UIDPOOL_BATCH + 3, rb);
    disjoint(ra, SBX_UIDPOOL_BATCH + 3, rb, SBX_UIDPOOL_BATCH + 3);
    cr_assert_eq(ra[0], 100000); /* the lowest free range first */
    sbx_uidpool_close(pa);
    sbx_uidpool_close(pb);
    free(tbl), free(a), free(b);
}

Test(sandbox_hostwide, different_uid_bases_do_not_overlap_either)
{
    char *tbl = table(), *a = folder("a"), *b = folder("b");
    struct sbx_uidpool *pa = pool(tbl, a, 100000, NULL, 0);
    struct sbx_uidpool *pb = pool(tbl, b, 100000 + 32768, NULL, 0); /* half a range off */
    struct taken ta = {0}, tb = {0};
    int64_t ra[4], rb[4];
    take(pa, 100000, &ta, 4, ra);
    take(pb, 100000 + 32768, &tb, 4, rb);
    disjoint(ra, 4, rb, 4);
    sbx_uidpool_close(pa);
    sbx_uidpool_close(pb);
    free(tbl), free(a), free(b);
}

Test(sandbox_hostwide, a_folder_from_before_keeps_its_ranges_and_others_avoid_them)
{
    char *tbl = table(), *a = folder("a"), *b = folder("b"), *c = folder("c");
    const uint32_t a_used[] = {0, 1, 5}, b_used[] = {1}; /* b collides with a already */
    struct sbx_uidpool *pa = pool(tbl, a, 100000, a_used, 3);
    struct sbx_uidpool *pb = pool(tbl, b, 100000, b_used, 1);
    struct sbx_uidpool *pc = pool(tbl, c, 100000, NULL, 0);
    struct taken tc = {0};
    int64_t rc[8];
    take(pc, 100000, &tc, 8, rc);
    const int64_t kept[] = {100000, 100000 + 65536, 100000 + 5 * 65536};
    disjoint(rc, 8, kept, 3);
    /* a's free slots are its own reserve, not b's or c's */
    struct taken ta = {.v = {0, 1, 5}, .n = 3};
    int64_t ra[2];
    take(pa, 100000, &ta, 2, ra);
    disjoint(ra, 2, rc, 8);
    sbx_uidpool_close(pa);
    sbx_uidpool_close(pb);
    sbx_uidpool_close(pc);
    free(tbl), free(a), free(b), free(c);
}

Test(sandbox_hostwide, ranges_of_a_folder_that_is_gone_come_back)
{
    char *tbl = table(), *a = folder("a"), *b = folder("b");
    const uint32_t used[] = {0};
    sbx_uidpool_close(pool(tbl, a, 100000, used, 1));
    char db[256];
    snprintf(db, sizeof db, "%s/sandboxd.db", a);
    cr_assert_eq(unlink(db), 0); /* the folder was removed */
    struct sbx_uidpool *pb = pool(tbl, b, 100000, NULL, 0);
    struct taken t = {0};
    int64_t r[1];
    take(pb, 100000, &t, 1, r);
    cr_assert_eq(r[0], 100000);
    sbx_uidpool_close(pb);
    free(tbl), free(a), free(b);
}

Test(sandbox_hostwide, no_range_left_is_enospc)
{
    char *tbl = table(), *a = folder("a");
    uint32_t first = 0xffffffffu - 3 * SBX_IDMAP_COUNT; /* room for two ranges */
    struct sbx_uidpool *p = pool(tbl, a, first, NULL, 0);
    struct taken t = {0};
    int64_t r[2];
    take(p, first, &t, 2, r);
    uint32_t s;
    cr_assert_eq(sbx_uidpool_take(p, in, &t, &s), -ENOSPC);
    sbx_uidpool_close(p);
    free(tbl), free(a);
}

/* ------------------------------------------------------------------ daemon records */

static int record_count(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    cr_assert(fscanf(f, "%d", &n) == 1);
    pclose(f);
    return n;
}

Test(sandbox_hostwide, a_live_daemons_folder_is_refused_and_a_dead_ones_record_is_reaped)
{
    char *dir, *a = folder("a"), *b = folder("b");
    cr_assert(asprintf(&dir, "%s/daemons", root) > 0);
    int go[2], ready[2];
    cr_assert_eq(pipe(go), 0);
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork(); /* a daemon on a: POSIX locks are per process */
    if (pid == 0) {
        struct sbx_daemon *d;
        struct err e = ERR_INIT;
        if (sbx_daemon_register(dir, a, "auto", &d, &e) < 0) _exit(1);
        char c = 1;
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0) _exit(2);
        _exit(0); /* dies without unregistering, as after kill -9 */
    }
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(record_count(dir), 1);
    struct sbx_daemon *d2;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_daemon_register(dir, a, "auto", &d2, &e), -1);
    cr_assert_str_eq(e.code, "state_dir_busy");
    cr_assert(strstr(e.msg, "another sandboxd"), "%s", e.msg);
    cr_assert_eq(record_count(dir), 1); /* a live daemon's record is left alone */
    cr_assert_eq(write(go[1], "x", 1), 1);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct sbx_daemon *db;
    cr_assert_eq(sbx_daemon_register(dir, b, "auto", &db, &e), 0, "%s", e.msg);
    cr_assert_eq(record_count(dir), 1); /* a's was reaped and dropped; b's is there */
    sbx_daemon_unregister(db);
    cr_assert_eq(record_count(dir), 0);
    free(dir), free(a), free(b);
}
