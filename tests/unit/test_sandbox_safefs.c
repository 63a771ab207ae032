/* test_sandbox_safefs.c - the host-side file primitives used in sandboxes' trees
 * (src/sandbox/storage/safefs.c): nothing resolved through a symlink or above the directory
 * descriptor, owners and modes set on what was made, files replaced instead of
 * written through a link, links followed only when their owner is trusted. Each test
 * builds a small tree in a temporary directory, with links pointing "out" at a second
 * directory that must stay untouched. Needs root (chown of links to other uids). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/storage/safefs.h"

#define TRUSTED 4242
#define OTHER 4343

static char base[64], root_path[128], out_path[128];
static int root = -1;

static void mk(const char *rel, mode_t mode)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root_path, rel);
    cr_assert_eq(mkdir(p, mode), 0, "mkdir %s: %s", p, strerror(errno));
}

static void put(const char *dir, const char *rel, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void ln(const char *target, const char *rel, uid_t owner)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root_path, rel);
    cr_assert_eq(symlink(target, p), 0, "symlink %s: %s", p, strerror(errno));
    cr_assert_eq(lchown(p, owner, owner), 0);
}

static struct stat st_of(const char *dir, const char *rel)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    cr_assert_eq(lstat(p, &st), 0, "%s: %s", p, strerror(errno));
    return st;
}

/* "out" is a directory outside the tree holding one file; it must never change. */
static void setup(void)
{
    if (geteuid() != 0) cr_skip_test("needs root");
    snprintf(base, sizeof base, "/tmp/rebuno-safefs-XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    snprintf(root_path, sizeof root_path, "%s/root", base);
    snprintf(out_path, sizeof out_path, "%s/out", base);
    cr_assert_eq(mkdir(root_path, 0755), 0);
    cr_assert_eq(mkdir(out_path, 0700), 0);
    put(out_path, "f", "outside\n");
    root = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(root, 0);
}

static void check_out_untouched(void)
{
    struct stat st = st_of(out_path, ".");
    cr_assert_eq(st.st_mode & 07777, 0700);
    cr_assert_eq(st.st_uid, 0);
    st = st_of(out_path, "f");
    cr_assert_eq(st.st_size, 8);
    cr_assert_eq(st.st_uid, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/new", out_path);
    cr_assert_neq(access(p, F_OK), 0, "something was made outside the tree");
}

static void teardown(void)
{
    if (root >= 0) close(root);
    if (base[0]) {
        int dfd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
        sbx_safe_remove_tree(dfd, base + strlen("/tmp/"));
        close(dfd);
    }
}

TestSuite(sandbox_safefs, .init = setup, .fini = teardown);

Test(sandbox_safefs, open_refuses_links_dotdot_and_absolute_paths)
{
    mk("a", 0755);
    ln(out_path, "l", 0);
    cr_assert_eq(sbx_safe_open(root, "l/f", O_RDONLY), -ELOOP);
    cr_assert_eq(sbx_safe_open(root, "l", O_RDONLY | O_DIRECTORY), -ENOTDIR); /* a final link */
    cr_assert_eq(sbx_safe_open(root, "../out/f", O_RDONLY), -EXDEV);
    cr_assert_eq(sbx_safe_open(root, out_path, O_RDONLY | O_DIRECTORY), -EXDEV);
    int fd = sbx_safe_open(root, "a", O_PATH | O_DIRECTORY);
    cr_assert_geq(fd, 0);
    close(fd);
    check_out_untouched();
}

Test(sandbox_safefs, mkdir_sets_owner_and_mode_and_never_follows)
{
    bool made = false;
    int fd = sbx_safe_mkdir(root, "d", 02750, 1234, 1235, &made);
    cr_assert_geq(fd, 0, "%s", strerror(-fd));
    cr_assert(made);
    close(fd);
    struct stat st = st_of(root_path, "d");
    cr_assert_eq(st.st_mode & 07777, 02750); /* exact: no umask, set-gid kept */
    cr_assert_eq(st.st_uid, 1234);
    cr_assert_eq(st.st_gid, 1235);

    /* an existing directory is left as it is */
    mk("keep", 0711);
    fd = sbx_safe_mkdir(root, "keep", 0755, 1, 1, &made);
    cr_assert_geq(fd, 0);
    cr_assert(!made);
    close(fd);
    st = st_of(root_path, "keep");
    cr_assert_eq(st.st_mode & 07777, 0711);
    cr_assert_eq(st.st_uid, 0);

    /* a link in its place, a link on the way, a file in its place */
    ln(out_path, "etc", 0);
    cr_assert_eq(sbx_safe_mkdir(root, "etc", 0755, 1, 1, &made), -ENOTDIR);
    cr_assert_eq(sbx_safe_mkdir(root, "etc/new", 0755, 1, 1, &made), -ENOTDIR);
    cr_assert_eq(sbx_safe_mkdir(root, "etc/deeper/new", 0755, 1, 1, &made), -ELOOP);
    put(root_path, "file", "x");
    cr_assert_eq(sbx_safe_mkdir(root, "file", 0755, 1, 1, &made), -ENOTDIR);
    cr_assert_eq(sbx_safe_mkdir(root, "../out/new", 0755, 1, 1, &made), -EXDEV);
    cr_assert_eq(sbx_safe_mkdir(root, "d/..", 0755, 1, 1, &made), -EINVAL);
    cr_assert(!made);
    check_out_untouched();
}

Test(sandbox_safefs, replace_swaps_a_link_for_a_file_and_leaves_directories)
{
    char p[256];
    snprintf(p, sizeof p, "%s/f", out_path);
    ln(p, "hosts", 0);
    ln(out_path, "hostname", 0);
    int dfd = open(root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_eq(sbx_safe_replace(dfd, "hosts", "mine\n", 5, 0644, 77, 78, false), 0);
    cr_assert_eq(sbx_safe_replace(dfd, "hostname", "me\n", 3, 0600, 77, 78, true), 0);
    struct stat st = st_of(root_path, "hosts");
    cr_assert(S_ISREG(st.st_mode));
    cr_assert_eq(st.st_size, 5);
    cr_assert_eq(st.st_mode & 07777, 0644);
    cr_assert_eq(st.st_uid, 77);
    cr_assert(S_ISREG(st_of(root_path, "hostname").st_mode));
    mk("dir", 0755);
    cr_assert_eq(sbx_safe_replace(dfd, "dir", "x", 1, 0644, 0, 0, false), -EISDIR);
    close(dfd);
    /* no temporary left behind */
    int n = 0;
    DIR *d = opendir(root_path);
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(n, 3);
    check_out_untouched();
}

static ino_t ino_of_fd(int fd)
{
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    return st.st_ino;
}

Test(sandbox_safefs, resolve_follows_trusted_links_inside_the_root_only)
{
    struct sbx_safe_links trusted = {{TRUSTED, 0}, 2};
    char refused[256] = "";
    mk("home", 0755);
    mk("home/alice", 0755);
    mk("home/bob", 0700);
    put(root_path, "home/bob/notes", "bob\n");
    ln("/home", "abs", TRUSTED);              /* absolute: from the tree's root */
    ln("../../../../../home", "up", TRUSTED); /* ".." never climbs above the root */
    ln(out_path, "out", TRUSTED);             /* the host's path, resolved inside */
    ln("/home/bob/notes", "home/alice/s2", OTHER);
    ln("/home/bob", "home/alice/bobdir", OTHER);
    ln("loop", "loop", TRUSTED);

    int fd =
        sbx_safe_resolve(root, "abs/alice", O_DIRECTORY, true, &trusted, refused, sizeof refused);
    cr_assert_geq(fd, 0, "%s", strerror(-fd));
    cr_assert_eq(ino_of_fd(fd), st_of(root_path, "home/alice").st_ino);
    close(fd);
    fd = sbx_safe_resolve(root, "/up/bob/notes", 0, true, &trusted, refused, sizeof refused);
    cr_assert_geq(fd, 0, "%s", strerror(-fd));
    cr_assert_eq(ino_of_fd(fd), st_of(root_path, "home/bob/notes").st_ino);
    close(fd);
    cr_assert_eq(sbx_safe_resolve(root, "out/f", 0, true, &trusted, refused, sizeof refused),
                 -ENOENT);
    fd = sbx_safe_resolve(root, "/", O_DIRECTORY, true, &trusted, refused, sizeof refused);
    cr_assert_eq(ino_of_fd(fd), st_of(root_path, ".").st_ino);
    close(fd);

    /* links of another account: refused, named; a final one may be opened as itself */
    cr_assert_eq(
        sbx_safe_resolve(root, "/home/alice/s2", 0, true, &trusted, refused, sizeof refused),
        -ENOLINK);
    cr_assert_str_eq(refused, "/home/alice/s2");
    cr_assert_eq(sbx_safe_resolve(root, "/abs/alice/bobdir/notes", 0, false, &trusted, refused,
                                  sizeof refused),
                 -ENOLINK);
    cr_assert_str_eq(refused, "/home/alice/bobdir");
    fd = sbx_safe_resolve(root, "/home/alice/s2", 0, false, &trusted, refused, sizeof refused);
    cr_assert_geq(fd, 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    close(fd);

    cr_assert_eq(sbx_safe_resolve(root, "loop", 0, true, &trusted, refused, sizeof refused),
                 -ELOOP);
    cr_assert_eq(sbx_safe_resolve(root, "home/bob/notes", O_DIRECTORY, true, &trusted, refused,
                                  sizeof refused),
                 -ENOTDIR);
    cr_assert_eq(
        sbx_safe_resolve(root, "home/bob/notes/x", 0, true, &trusted, refused, sizeof refused),
        -ENOTDIR);
    check_out_untouched();
}

Test(sandbox_safefs, resolve_refuses_magic_links)
{
    struct sbx_safe_links trusted = {{0, 0}, 1};
    int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    cr_assert_eq(sbx_safe_resolve(proc, "self/root/etc", 0, true, &trusted, NULL, 0), -ELOOP);
    close(proc);
}

Test(sandbox_safefs, remove_tree_never_follows_a_link_nor_enters_a_mount)
{
    cr_assert_eq(unshare(CLONE_NEWNS), 0);
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
    mk("t", 0755);
    mk("t/sub", 0755);
    put(root_path, "t/sub/file", "x");
    ln(out_path, "t/link", 0);
    mk("t/m", 0755);
    char m[256];
    snprintf(m, sizeof m, "%s/t/m", root_path);
    cr_assert_eq(mount("tmpfs", m, "tmpfs", 0, "size=64k"), 0);
    put(root_path, "t/m/mounted", "kept\n");
    int dfd = open(root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    sbx_safe_remove_tree(dfd, "t");
    cr_assert_eq(st_of(root_path, "t/m/mounted").st_size, 5); /* the mount was not entered */
    cr_assert_neq(faccessat(dfd, "t/sub", F_OK, AT_SYMLINK_NOFOLLOW), 0);
    cr_assert_neq(faccessat(dfd, "t/link", F_OK, AT_SYMLINK_NOFOLLOW), 0);
    umount2(m, MNT_DETACH);
    sbx_safe_remove_tree(dfd, "t");
    cr_assert_neq(faccessat(dfd, "t", F_OK, AT_SYMLINK_NOFOLLOW), 0);
    close(dfd);
    check_out_untouched();
}
