/*
 * test_local_auth.c - unit tests for the local token (src/net/local_auth.c): the files
 * it writes and their modes, the constant-time check, how clients find it (registry,
 * state file, the address check), a symlink planted at the file's name, and a fork()
 * child that must not see the token.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/local_auth.h"

static char root[64], state[128], xdg[128];

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/rebuno-la-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    snprintf(state, sizeof state, "%s/state", root);
    snprintf(xdg, sizeof xdg, "%s/xdg", root);
    cr_assert_eq(mkdir(xdg, 0700), 0);
    setenv("XDG_CONFIG_HOME", xdg, 1);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void teardown(void)
{
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static struct local_auth *start(int port)
{
    struct local_auth_opts o = {state, "kernel", "REBUNO_API_KEY", "127.0.0.1:0", port};
    struct err e = ERR_INIT;
    struct local_auth *la = local_auth_new(&o, &e);
    cr_assert_not_null(la, "%s", e.msg);
    return la;
}

/* The token in a file written by local_auth_new (as a client would read it). */
static void token_of(const char *path, char out[LOCAL_AUTH_TOKEN_LEN + 1])
{
    json_t *j = json_load_file(path, 0, NULL);
    cr_assert_not_null(j, "%s", path);
    const char *t = json_string_value(json_object_get(j, "token"));
    cr_assert(t && strlen(t) == LOCAL_AUTH_TOKEN_LEN);
    memcpy(out, t, LOCAL_AUTH_TOKEN_LEN + 1);
    json_decref(j);
}

static void assert_private(const char *path, mode_t mode)
{
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "%s", path);
    cr_assert_eq(st.st_mode & 07777, mode, "%s: %o", path, st.st_mode & 07777);
    cr_assert_eq(st.st_uid, geteuid());
}

TestSuite(local_auth, .init = setup, .fini = teardown);

Test(local_auth, files_are_private_and_hold_the_address)
{
    umask(0); /* the modes must not depend on it */
    struct local_auth *la = start(18123);
    char path[256], reg[256], t1[65], t2[65];
    snprintf(path, sizeof path, "%s/local-token", state);
    snprintf(reg, sizeof reg, "%s/rebuno/local/127.0.0.1_18123", xdg);
    cr_assert_str_eq(local_auth_path(la), path);
    assert_private(state, 0700);
    assert_private(path, 0600);
    assert_private(reg, 0600);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/rebuno/local", xdg);
    assert_private(dir, 0700);
    token_of(path, t1);
    token_of(reg, t2);
    cr_assert_str_eq(t1, t2);
    json_t *j = json_load_file(reg, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(j, "url")), "http://127.0.0.1:18123");
    cr_assert_str_eq(json_string_value(json_object_get(j, "service")), "kernel");
    json_decref(j);
    local_auth_free(la);
    cr_assert(access(path, F_OK) < 0 && access(reg, F_OK) < 0, "a stop removes both files");
}

Test(local_auth, check_takes_only_the_exact_token)
{
    struct local_auth *la = start(18124);
    char t[65], h[128];
    token_of(local_auth_path(la), t);
    snprintf(h, sizeof h, "Bearer %s", t);
    cr_assert(local_auth_check(la, h));
    snprintf(h, sizeof h, "bearer %s", t);
    cr_assert(local_auth_check(la, h), "the scheme is case-insensitive");
    cr_assert_not(local_auth_check(la, NULL));
    cr_assert_not(local_auth_check(la, t));
    snprintf(h, sizeof h, "Bearer %s ", t);
    cr_assert_not(local_auth_check(la, h));
    snprintf(h, sizeof h, "Bearer %.63s", t);
    cr_assert_not(local_auth_check(la, h));
    h[7] ^= 1;
    cr_assert_not(local_auth_check(la, h));
    /* every start makes a new one */
    local_auth_free(la);
    la = start(18124);
    char t2[65];
    token_of(local_auth_path(la), t2);
    cr_assert_str_neq(t, t2);
    local_auth_free(la);
}

Test(local_auth, clients_find_it_for_its_address_only)
{
    struct local_auth *la = start(18125);
    char t[65], file[256];
    token_of(local_auth_path(la), t);
    snprintf(file, sizeof file, "%s/local-token", state);
    struct local_auth_found f;
    cr_assert_eq(local_auth_find("http://127.0.0.1:18125", NULL, &f), 0);
    cr_assert_str_eq(f.token, t);
    cr_assert_eq(local_auth_find("http://localhost:18125/prefix/", NULL, &f), 0);
    cr_assert_str_eq(f.token, t);
    cr_assert_eq(local_auth_find("http://127.0.0.1:18126", file, &f), -ENOENT,
                 "the state file names another address");
    cr_assert(strstr(f.looked, "127.0.0.1_18126") && strstr(f.looked, file), "%s", f.looked);
    cr_assert_eq(local_auth_find("http://user@127.0.0.1:18125", NULL, &f), -ENOENT);
    cr_assert_eq(local_auth_find("ftp://127.0.0.1:18125", NULL, &f), -ENOENT);
    /* without the registry: the state file */
    setenv("XDG_CONFIG_HOME", "/nonexistent", 1);
    cr_assert_eq(local_auth_find("http://127.0.0.1:18125", NULL, &f), -ENOENT);
    cr_assert_eq(local_auth_find("http://127.0.0.1:18125", file, &f), 0);
    cr_assert_str_eq(f.token, t);
    cr_assert_str_eq(f.from, file);
    setenv("XDG_CONFIG_HOME", xdg, 1);
    local_auth_free(la);
    cr_assert_eq(local_auth_find("http://127.0.0.1:18125", file, &f), -ENOENT, "gone after a stop");
}

Test(local_auth, a_planted_symlink_is_replaced_not_followed)
{
    char victim[256], link[256], before[] = "someone else's file\n";
    snprintf(victim, sizeof victim, "%s/victim", root);
    FILE *v = fopen(victim, "w");
    fputs(before, v);
    fclose(v);
    cr_assert_eq(mkdir(state, 0755), 0);
    snprintf(link, sizeof link, "%s/local-token", state);
    cr_assert_eq(symlink(victim, link), 0);
    struct local_auth *la = start(18127);
    char buf[64] = "";
    v = fopen(victim, "r");
    cr_assert(fgets(buf, sizeof buf, v));
    fclose(v);
    cr_assert_str_eq(buf, before);
    assert_private(link, 0600); /* a regular file now */
    assert_private(state, 0700); /* and the folder was made private */
    local_auth_free(la);
}

Test(local_auth, a_state_folder_of_another_user_is_refused)
{
    if (geteuid() != 0) cr_skip_test("needs root to chown");
    cr_assert_eq(mkdir(state, 0700), 0);
    cr_assert_eq(chown(state, 65534, 65534), 0);
    struct local_auth_opts o = {state, "sandboxd", "REBUNO_SANDBOX_TOKEN", "127.0.0.1:0", 18128};
    struct err e = ERR_INIT;
    cr_assert_null(local_auth_new(&o, &e));
    cr_assert(strstr(e.msg, "belongs to uid 65534"), "%s", e.msg);
}

Test(local_auth, a_fork_child_does_not_hold_the_token)
{
    struct local_auth *la = start(18129);
    char t[65], h[128];
    token_of(local_auth_path(la), t);
    snprintf(h, sizeof h, "Bearer %s", t);
    cr_assert(local_auth_check(la, h));
    pid_t pid = fork();
    if (pid == 0) _exit(local_auth_check(la, h) ? 1 : 0); /* the page reads as zeros here */
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child saw the token");
    cr_assert(local_auth_check(la, h), "the parent keeps it");
    local_auth_free(la);
}
