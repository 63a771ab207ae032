/* test_sandbox_hostwide.c - what daemons share on one host: the daemon records
 * (daemons.h: a live daemon's folder is refused, a dead daemon's record is reaped and
 * dropped). Each test uses its own temporary record folder. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/daemons.h"

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

TestSuite(sandbox_hostwide, .init = setup, .fini = teardown);

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
