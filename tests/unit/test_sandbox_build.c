/* test_sandbox_build.c - image builds' pure and file parts: the recipe parser
 * (src/sandbox/storage/recipe.c) and the layer tars of a RUN's changes and of COPY
 * (buildfs.c), read back with libarchive. The diff tests need root (whiteout devices,
 * trusted.* xattrs). */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sandbox/storage/buildfs.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/recipe.h"

Test(recipe, parses_every_instruction_form)
{
    const char *t = "# comment\n"
                    "from example.test/base:v1\n"
                    "ENV A=1 B=\"two words\" C=x\\ y\n"
                    "ENV LEGACY some value\n"
                    "RUN echo one && \\\n    echo two\n"
                    "RUN [\"sh\", \"-c\", \"true\"]\n"
                    "COPY src/a /dst/\n"
                    "COPY [\"with space\", \"/d 2\"]\n"
                    "WORKDIR /srv\n"
                    "USER app:app\n";
    struct sbx_recipe r;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_recipe_parse(t, strlen(t), &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n, 9);
    cr_assert_eq(r.steps[0].kind, SBX_STEP_FROM);
    cr_assert_str_eq(r.steps[0].args[0], "example.test/base:v1");
    cr_assert_eq(r.steps[1].nargs, 6);
    cr_assert_str_eq(r.steps[1].args[3], "two words");
    cr_assert_str_eq(r.steps[1].args[5], "x y");
    cr_assert_str_eq(r.steps[2].args[1], "some value");
    cr_assert_eq(r.steps[3].line, 5);
    cr_assert_str_eq(r.steps[3].args[0], "/bin/sh");
    cr_assert_str_eq(r.steps[3].args[2], "echo one && echo two");
    cr_assert_str_eq(r.steps[3].text, "RUN echo one && echo two");
    cr_assert_eq(r.steps[4].nargs, 3);
    cr_assert_str_eq(r.steps[4].args[0], "sh");
    cr_assert_str_eq(r.steps[6].args[0], "with space");
    cr_assert_str_eq(r.steps[8].args[0], "app:app");
    sbx_recipe_fini(&r);
}

Test(recipe, refuses_what_it_does_not_know)
{
    const char *bad[] = {"",
                         "RUN true\n",
                         "FROM a\nFROM b\n",
                         "FROM a\nADD x y\n",
                         "FROM a\nCOPY --chown=1 x y\n",
                         "FROM a\nCOPY onlyone\n",
                         "FROM a\nENV 1A=x\n",
                         "FROM a\nUSER bad/user\n",
                         "FROM a\nRUN\n",
                         "FROM a\nRUN [\"sh\", 1]\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sbx_recipe r;
        struct err e = ERR_INIT;
        cr_assert_eq(sbx_recipe_parse(bad[i], strlen(bad[i]), &r, &e), -1, "%s", bad[i]);
        cr_assert_str_eq(e.field, "recipe");
        cr_assert_eq(e.status, 400);
    }
}

Test(recipe, paths_normalise_and_never_climb_above_root)
{
    char p[64];
    cr_assert_eq(sbx_recipe_path("/srv", "app/./x//y", p, sizeof p), 0);
    cr_assert_str_eq(p, "/srv/app/x/y");
    cr_assert_eq(sbx_recipe_path("/srv/app", "../b", p, sizeof p), 0);
    cr_assert_str_eq(p, "/srv/b");
    cr_assert_eq(sbx_recipe_path("/", "/a/..", p, sizeof p), 0);
    cr_assert_str_eq(p, "/");
    cr_assert_eq(sbx_recipe_path("/", "../etc", p, sizeof p), -1);
    cr_assert_eq(sbx_recipe_path("/a", "/a/../../b", p, sizeof p), -1);
}

/* ------------------------------------------------------------------ layer tars */

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/rebuno-build-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    sbx_image_remove_tree(dir);
}

static void put_file(const char *rel, const char *data)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(data, f);
    fclose(f);
}

static void mk(const char *rel)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

/* The tar's entries as "name type uid" lines. */
static char *listing(int fd)
{
    lseek(fd, 0, SEEK_SET);
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    cr_assert_eq(archive_read_open_fd(a, fd, 65536), ARCHIVE_OK);
    static char out[8192];
    size_t n = 0;
    out[0] = '\0';
    struct archive_entry *e;
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        mode_t t = archive_entry_filetype(e);
        n += (size_t)snprintf(out + n, sizeof out - n, "%s %c %lld\n", archive_entry_pathname(e),
                              t == AE_IFDIR   ? 'd'
                              : t == AE_IFLNK ? 'l'
                                              : 'f',
                              (long long)archive_entry_uid(e));
    }
    archive_read_free(a);
    return out;
}

Test(buildfs, diff_has_whiteouts_opaque_dirs_and_shifted_owners, .init = setup, .fini = teardown)
{
    if (geteuid() != 0) cr_skip_test("needs root");
    uint32_t base = 200000;
    mk("upper");
    mk("upper/etc");
    put_file("upper/etc/hostname", "box\n");
    put_file("upper/etc/hosts", "127.0.0.1 box\n");
    mk("upper/etc2");
    put_file("upper/etc2/hostname", "not the sandbox's own: kept\n");
    mk("upper/app");
    put_file("upper/app/new", "n\n");
    char p[256];
    snprintf(p, sizeof p, "%s/upper/app/new", dir);
    cr_assert_eq(chown(p, base + 1000, base + 1000), 0);
    snprintf(p, sizeof p, "%s/upper/app/gone", dir);
    cr_assert_eq(mknod(p, S_IFCHR | 0, makedev(0, 0)), 0);
    mk("upper/opq");
    snprintf(p, sizeof p, "%s/upper/opq", dir);
    cr_assert_eq(setxattr(p, "trusted.overlay.opaque", "y", 1, 0), 0);
    snprintf(p, sizeof p, "%s/upper/link", dir);
    cr_assert_eq(symlink("/etc/shadow", p), 0);
    snprintf(p, sizeof p, "%s/upper/fifo", dir);
    cr_assert_eq(mkfifo(p, 0600), 0);

    snprintf(p, sizeof p, "%s/upper", dir);
    int up = open(p, O_RDONLY | O_DIRECTORY);
    snprintf(p, sizeof p, "%s/out.tar", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    int64_t n = 0;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_build_diff(up, base, fd, &n, &e), 0, "%s", e.msg);
    char *l = listing(fd);
    /* base + 1000 is 1000 inside; host root's files (outside the range) are nobody's */
    cr_assert_str_eq(l, "app/ d 65534\n"
                        "app/.wh.gone f 0\n"
                        "app/new f 1000\n"
                        "etc2/ d 65534\n"
                        "etc2/hostname f 65534\n"
                        "link l 65534\n"
                        "opq/ d 65534\n"
                        "opq/.wh..wh..opq f 0\n");
    cr_assert_eq(n, 8);
    /* with another change in /etc, /etc is kept but its own files are still left out */
    put_file("upper/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
    cr_assert_eq(ftruncate(fd, 0), 0);
    lseek(fd, 0, SEEK_SET);
    cr_assert_eq(sbx_build_diff(up, base, fd, &n, &e), 0, "%s", e.msg);
    cr_assert_not_null(strstr(listing(fd), "etc/ d 65534\netc/passwd f 65534\netc2/"));
    close(fd);
    close(up);
}

Test(buildfs, copy_stays_in_its_context, .init = setup, .fini = teardown)
{
    mk("ctx");
    mk("ctx/d");
    put_file("ctx/d/a", "a\n");
    put_file("ctx/f", "f\n");
    char p[256];
    snprintf(p, sizeof p, "%s/ctx/out", dir);
    cr_assert_eq(symlink("/etc", p), 0);
    snprintf(p, sizeof p, "%s/ctx", dir);
    int ctx = open(p, O_RDONLY | O_DIRECTORY);
    snprintf(p, sizeof p, "%s/out.tar", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    int64_t n = 0;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_build_copy(ctx, "d", "/srv/x", 0, fd, &n, &e), 0, "%s", e.msg);
    cr_assert_str_eq(listing(fd), "srv/ d 0\nsrv/x/ d 0\nsrv/x/a f 0\n");
    cr_assert_eq(ftruncate(fd, 0), 0);
    lseek(fd, 0, SEEK_SET);
    cr_assert_eq(sbx_build_copy(ctx, "f", "/srv", 1, fd, &n, &e), 0, "%s", e.msg);
    cr_assert_str_eq(listing(fd), "srv/ d 0\nsrv/f f 0\n");
    const char *bad[] = {"../ctx/f", "/etc/passwd", "out/passwd", "out", "d/../../x", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct err be = ERR_INIT;
        cr_assert_eq(sbx_build_copy(ctx, bad[i], "/x", 0, fd, &n, &be), -1, "%s", bad[i]);
        cr_assert_eq(be.status, 400, "%s: %s", bad[i], be.msg);
    }
    close(fd);
    close(ctx);
}
