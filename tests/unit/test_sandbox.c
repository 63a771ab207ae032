/* test_sandbox.c - the sandbox runtime's pure parts: path normalisation, name and
 * input validation, uid map arithmetic, the mount plan, the init wire protocol,
 * the output log, passwd/group parsing and text encodings. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/runtime/caps.h"
#include "sandbox/runtime/cgroup.h"
#include "sandbox/runtime/idmap.h"
#include "sandbox/core/paths.h"
#include "sandbox/runtime/plan.h"
#include "sandbox/runtime/proto.h"
#include "sandbox/runtime/ring.h"
#include "sandbox/runtime/seccomp.h"
#include "sandbox/core/text.h"
#include "sandbox/runtime/users.h"
#include "sandbox/core/validate.h"

static const char *norm(const char *in, const char *base)
{
    static char out[SBX_PATH_MAX + 1];
    struct err e = ERR_INIT;
    if (sbx_path_normalize(in, base, out, sizeof out, "path", &e) < 0) return NULL;
    return out;
}

Test(sandbox_paths, normalises_and_clamps_at_the_root)
{
    cr_assert_str_eq(norm("/a/b/../c", "/"), "/a/c");
    cr_assert_str_eq(norm("../../../../etc/shadow", "/root"), "/etc/shadow");
    cr_assert_str_eq(norm("/..", "/"), "/");
    cr_assert_str_eq(norm("..", "/"), "/");
    cr_assert_str_eq(norm("//a///b/./", "/"), "/a/b");
    cr_assert_str_eq(norm("x/y", "/home/alice"), "/home/alice/x/y");
    cr_assert_str_eq(norm("./", "/home/alice"), "/home/alice");
    cr_assert_str_eq(norm("/a/../../../..", "/"), "/");
    cr_assert_str_eq(norm("...", "/"), "/...");
    cr_assert_str_eq(norm("a/..b/..", "/r"), "/r/a");
}

Test(sandbox_paths, rejects_empty_and_oversized)
{
    cr_assert_null(norm("", "/"));
    char long_comp[300];
    memset(long_comp, 'a', sizeof long_comp - 1);
    long_comp[sizeof long_comp - 1] = '\0';
    cr_assert_null(norm(long_comp, "/"));
    static char huge[SBX_PATH_MAX + 10];
    memset(huge, 'a', sizeof huge - 1);
    for (size_t i = 1; i < sizeof huge - 1; i += 100) huge[i] = '/';
    huge[sizeof huge - 1] = '\0';
    cr_assert_null(norm(huge, "/"));
}

Test(sandbox_paths, splits_parent_and_leaf)
{
    char parent[SBX_PATH_MAX + 1];
    const char *leaf;
    sbx_path_split("/a/b/c", parent, sizeof parent, &leaf);
    cr_assert_str_eq(parent, "a/b");
    cr_assert_str_eq(leaf, "c");
    sbx_path_split("/top", parent, sizeof parent, &leaf);
    cr_assert_str_eq(parent, ".");
    cr_assert_str_eq(leaf, "top");
    sbx_path_split("/", parent, sizeof parent, &leaf);
    cr_assert_str_eq(parent, ".");
    cr_assert_str_eq(leaf, "");
    cr_assert_str_eq(sbx_path_rel("/"), ".");
    cr_assert_str_eq(sbx_path_rel("/x/y"), "x/y");
}

Test(sandbox_validate, names)
{
    cr_assert(sbx_name_valid("my-box_1.x"));
    cr_assert(sbx_name_valid("A"));
    cr_assert(!sbx_name_valid(""));
    cr_assert(!sbx_name_valid("-x"));
    cr_assert(!sbx_name_valid(".hidden"));
    cr_assert(!sbx_name_valid("a b"));
    cr_assert(!sbx_name_valid("a/b"));
    char n[70];
    memset(n, 'a', 64);
    n[64] = '\0';
    cr_assert(!sbx_name_valid(n));
    n[63] = '\0';
    cr_assert(sbx_name_valid(n));
}

Test(sandbox_validate, user_names_as_in_004)
{
    cr_assert(sbx_user_name_valid("alice"));
    cr_assert(sbx_user_name_valid("_svc"));
    cr_assert(sbx_user_name_valid("a-b_c9"));
    cr_assert(!sbx_user_name_valid("Alice"));
    cr_assert(!sbx_user_name_valid("9lives"));
    cr_assert(!sbx_user_name_valid("-x"));
    cr_assert(!sbx_user_name_valid("a.b"));
    cr_assert(!sbx_user_name_valid(""));
    cr_assert(sbx_user_name_valid("abcdefghijabcdefghijabcdefghijab"));   /* 32 */
    cr_assert(!sbx_user_name_valid("abcdefghijabcdefghijabcdefghijabc")); /* 33 */
}

Test(sandbox_validate, env_metadata_argv)
{
    struct err e = ERR_INIT;
    json_t *ok = json_pack("{s:s, s:s}", "PATH", "/bin", "_X1", "y");
    cr_assert_eq(sbx_validate_env(ok, "env", &e), 0);
    json_t *bad = json_pack("{s:s}", "1X", "y");
    cr_assert_eq(sbx_validate_env(bad, "env", &e), -1);
    cr_assert_str_eq(e.code, "validation_error");
    json_t *notstr = json_pack("{s:i}", "X", 1);
    cr_assert_eq(sbx_validate_env(notstr, "env", &e), -1);
    json_t *meta = json_pack("{s:s}", "team:a", "b");
    cr_assert_eq(sbx_validate_metadata(meta, "metadata", &e), 0);
    json_t *badmeta = json_pack("{s:s}", "bad key", "b");
    cr_assert_eq(sbx_validate_metadata(badmeta, "metadata", &e), -1);
    json_t *cmd = json_string("ls"), *args = json_pack("[s,s]", "-l", "/");
    cr_assert_eq(sbx_validate_argv(cmd, args, &e), 0);
    json_t *badargs = json_pack("[s,i]", "-l", 3);
    cr_assert_eq(sbx_validate_argv(cmd, badargs, &e), -1);
    json_t *empty = json_string("");
    cr_assert_eq(sbx_validate_argv(empty, NULL, &e), -1);
    json_decref(ok);
    json_decref(bad);
    json_decref(notstr);
    json_decref(meta);
    json_decref(badmeta);
    json_decref(cmd);
    json_decref(args);
    json_decref(badargs);
    json_decref(empty);
}

Test(sandbox_validate, signals)
{
    cr_assert_eq(sbx_signal_parse("TERM"), SIGTERM);
    cr_assert_eq(sbx_signal_parse("sigkill"), SIGKILL);
    cr_assert_eq(sbx_signal_parse("9"), 9);
    cr_assert_eq(sbx_signal_parse("0"), 0);
    cr_assert_eq(sbx_signal_parse("65"), 0);
    cr_assert_eq(sbx_signal_parse("NOPE"), 0);
    cr_assert_str_eq(sbx_signal_name(SIGINT), "INT");
}

Test(sandbox_idmap, ranges)
{
    uint32_t h, in;
    cr_assert_eq(sbx_idmap_host(100000, 0, 0, &h), 0);
    cr_assert_eq(h, 100000);
    cr_assert_eq(sbx_idmap_host(100000, 3, 1000, &h), 0);
    cr_assert_eq(h, 100000 + 3 * 65536 + 1000);
    cr_assert_eq(sbx_idmap_host(100000, 0, 65536, &h), -ERANGE);
    cr_assert_eq(sbx_idmap_inside(100000, 3, 100000 + 3 * 65536 + 1000, &in), 0);
    cr_assert_eq(in, 1000);
    cr_assert_eq(sbx_idmap_inside(100000, 3, 100000, &in), -ERANGE);
    int64_t max = sbx_idmap_max_slot(100000);
    cr_assert_gt(max, 60000);
    cr_assert_eq(sbx_idmap_host(100000, (uint32_t)max, 65535, &h), 0);
    cr_assert_lt((uint64_t)h, 0xffffffffull);
    cr_assert_eq(sbx_idmap_host(100000, (uint32_t)max + 1, 0, &h), -ERANGE);
    cr_assert_eq(sbx_idmap_max_slot(0xffff0000u), -1);
    char line[64];
    cr_assert_eq(sbx_idmap_line(165536, line, sizeof line), 0);
    cr_assert_str_eq(line, "0 165536 65536\n");
}

static const struct sbx_op *find_op(const struct sbx_plan *p, enum sbx_op_kind k,
                                    const char *target_suffix)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct sbx_op *o = &p->ops[i];
        if (o->kind != k) continue;
        size_t tl = o->target ? strlen(o->target) : 0, sl = strlen(target_suffix);
        if (tl >= sl && strcmp(o->target + tl - sl, target_suffix) == 0) return o;
    }
    return NULL;
}

Test(sandbox_plan, builds_the_documented_layout)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    struct sbx_plan_input in = {.sandbox_dir = "/s/sandboxes/x",
                                .image_dir = "/s/images/default-v1", .usr_dir = "/usr",
                                .uid_base = 165536, .tmp_bytes = 64 << 20};
    cr_assert_eq(sbx_plan_build(&in, &p, &e), 0, "%s", e.msg);
    cr_assert_eq(p.ops[0].kind, SBX_OP_PRIVATE);
    cr_assert_eq(p.ops[p.n - 1].kind, SBX_OP_PIVOT);
    cr_assert_str_eq(p.ops[p.n - 1].target, "/s/sandboxes/x/mnt/root");
    const struct sbx_op *root = find_op(&p, SBX_OP_OVERLAY, "/mnt/root");
    cr_assert_not_null(root);
    cr_assert_str_eq(root->data, "lowerdir=/s/sandboxes/x/mnt/layers/image,"
                                 "upperdir=/s/sandboxes/x/fs/upper,workdir=/s/sandboxes/x/fs/work");
    const struct sbx_op *usr = find_op(&p, SBX_OP_OVERLAY, "/mnt/root/usr");
    cr_assert_not_null(usr);
    cr_assert(strstr(usr->data, "upperdir=/s/sandboxes/x/fs/upper/usr"));
    cr_assert(root->flags & MS_NOSUID && usr->flags & MS_NOSUID);
    /* lowers are idmapped, read-only, nosuid; the root overlay comes before /usr's */
    size_t i_root = (size_t)(root - p.ops), i_usr = (size_t)(usr - p.ops);
    cr_assert_lt(i_root, i_usr);
    int idmaps = 0;
    for (size_t i = 0; i < p.n; i++)
        if (p.ops[i].kind == SBX_OP_IDMAP_BIND) {
            idmaps++;
            cr_assert(p.ops[i].flags & MS_RDONLY);
            cr_assert(p.ops[i].flags & MS_NOSUID);
            cr_assert_lt(i, i_root);
        }
    cr_assert_eq(idmaps, 2);
    /* tmpfs /tmp owned by root inside, sized */
    const struct sbx_op *tmp = find_op(&p, SBX_OP_TMPFS, "/mnt/root/tmp");
    cr_assert_not_null(tmp);
    cr_assert(strstr(tmp->data, "uid=165536") && strstr(tmp->data, "size=67108864"));
    /* a private devpts with a cap on its ptys */
    const struct sbx_op *pts = find_op(&p, SBX_OP_DEVPTS, "/mnt/root/dev/pts");
    cr_assert_not_null(pts);
    cr_assert(strstr(pts->data, "newinstance") && strstr(pts->data, ",max=128"), "%s", pts->data);
    /* only the six device nodes */
    int nodes = 0;
    for (size_t i = 0; i < p.n; i++) nodes += p.ops[i].kind == SBX_OP_MKNOD;
    cr_assert_eq(nodes, 6);
    cr_assert_not_null(find_op(&p, SBX_OP_MKNOD, "/dev/null"));
    cr_assert_null(find_op(&p, SBX_OP_MKNOD, "/dev/sda"));
    /* /proc/sys read-only; nothing of the host's / is bound except the two lowers and
     * the session's boot id, a file of the sandbox's own directory, over the kernel's */
    cr_assert_not_null(find_op(&p, SBX_OP_BIND_RO, "/proc/sys"));
    const struct sbx_op *boot = find_op(&p, SBX_OP_BIND_RO, "/proc/sys/kernel/random/boot_id");
    cr_assert_not_null(boot);
    cr_assert_str_eq(boot->source, "/s/sandboxes/x/boot_id");
    cr_assert_str_eq(boot->target, "/s/sandboxes/x/mnt/root/proc/sys/kernel/random/boot_id");
    for (size_t i = 0; i < p.n; i++)
        if (p.ops[i].source && p.ops[i].kind == SBX_OP_BIND_RO && &p.ops[i] != boot)
            cr_assert(strncmp(p.ops[i].source, "/s/sandboxes/x/mnt/root/", 24) == 0,
                      "%s", p.ops[i].source);
    sbx_plan_fini(&p);
}

/* allow_privilege_escalation: the sandbox's own trees honour setuid bits, nothing else */
Test(sandbox_plan, setuid_lifts_nosuid_on_the_sandbox_trees_only)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    struct sbx_plan_input in = {.sandbox_dir = "/s/sandboxes/x",
                                .image_dir = "/s/images/default-v1", .usr_dir = "/usr",
                                .uid_base = 165536, .tmp_bytes = 64 << 20, .setuid = 1};
    cr_assert_eq(sbx_plan_build(&in, &p, &e), 0, "%s", e.msg);
    const struct sbx_op *root = find_op(&p, SBX_OP_OVERLAY, "/mnt/root");
    const struct sbx_op *usr = find_op(&p, SBX_OP_OVERLAY, "/mnt/root/usr");
    cr_assert(root && usr && !(root->flags & MS_NOSUID) && !(usr->flags & MS_NOSUID));
    cr_assert(root->flags & MS_NODEV && usr->flags & MS_NODEV);
    for (size_t i = 0; i < p.n; i++)
        if (p.ops[i].kind == SBX_OP_TMPFS || p.ops[i].kind == SBX_OP_IDMAP_BIND ||
            p.ops[i].kind == SBX_OP_PROC || p.ops[i].kind == SBX_OP_DEVPTS)
            cr_assert(p.ops[i].flags & MS_NOSUID, "%s", p.ops[i].target);
    sbx_plan_fini(&p);
}

Test(sandbox_plan, a_self_contained_image_is_one_overlay_of_its_layers)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    const char *h0 = "1111111111111111111111111111111111111111111111111111111111111111",
               *h1 = "2222222222222222222222222222222222222222222222222222222222222222";
    const char *layers[] = {h1, h0}; /* top first */
    struct sbx_plan_input in = {.sandbox_dir = "/s/sandboxes/x", .image_dir = "/s/images/abc",
                                .layers_dir = "/s/store/layers", .layers = layers, .nlayers = 2,
                                .uid_base = 165536, .tmp_bytes = 64 << 20};
    cr_assert_eq(sbx_plan_build(&in, &p, &e), 0, "%s", e.msg);
    cr_assert_null(find_op(&p, SBX_OP_OVERLAY, "/mnt/root"));
    cr_assert_null(find_op(&p, SBX_OP_OVERLAY, "/mnt/root/usr"), "nothing of the host's /usr");
    const struct sbx_op *root = find_op(&p, SBX_OP_OVERLAY_FD, "/mnt/root");
    cr_assert_not_null(root);
    cr_assert_str_eq(root->data, "/s/sandboxes/x/mnt/layers/image\n/s/sandboxes/x/mnt/layers/l0\n"
                                 "/s/sandboxes/x/mnt/layers/l1");
    cr_assert_str_eq(root->source, "/s/sandboxes/x/fs");
    int idmaps = 0;
    bool saw_top = false;
    for (size_t i = 0; i < p.n; i++)
        if (p.ops[i].kind == SBX_OP_IDMAP_BIND) {
            idmaps++;
            cr_assert(p.ops[i].flags & MS_RDONLY);
            cr_assert_neq(strcmp(p.ops[i].source, "/usr"), 0);
            if (!strcmp(p.ops[i].target, "/s/sandboxes/x/mnt/layers/l0"))
                saw_top = !strcmp(p.ops[i].source, "/s/store/layers/2222222222222222222222222222222222222222222222222222222222222222");
        }
    cr_assert_eq(idmaps, 3);
    cr_assert(saw_top, "l0 is the top layer");
    sbx_plan_fini(&p);
    const char *bad[] = {"../etc"};
    in.layers = bad;
    in.nlayers = 1;
    cr_assert_eq(sbx_plan_build(&in, &p, &e), -1);
    in.layers = layers;
    in.usr_dir = "/usr"; /* layers and the host's /usr do not mix */
    cr_assert_eq(sbx_plan_build(&in, &p, &e), -1);
}

Test(sandbox_plan, rejects_unsafe_paths)
{
    struct sbx_plan p;
    struct err e = ERR_INIT;
    const char *bad[] = {"relative/dir", "/a,lowerdir=/", "/a:b", "/a/../b", "/a/./b",
                         "/a b", "/a//b", "/a\nb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sbx_plan_input in = {.sandbox_dir = bad[i], .image_dir = "/img", .usr_dir = "/usr",
                                    .uid_base = 100000};
        cr_assert_eq(sbx_plan_build(&in, &p, &e), -1, "%s", bad[i]);
    }
    struct sbx_plan_input zero = {.sandbox_dir = "/ok", .image_dir = "/img", .usr_dir = "/usr"};
    cr_assert_eq(sbx_plan_build(&zero, &p, &e), -1);
    cr_assert(sbx_plan_path_ok("/tmp/rebuno-test-x_1/state/sandboxes/0192-ab"));
}

Test(sandbox_proto, spawn_round_trip)
{
    const char *argv[] = {"sh", "-c", "echo hi"};
    const char *envp[] = {"PATH=/bin", "HOME=/root"};
    struct sbx_spawn_req r = {.id = 42, .uid = 1000, .gid = 1001, .ngroups = 2,
                              .groups = {1001, 27}, .cwd = "/home/a", .argc = 3, .envc = 2,
                              .argv = argv, .envp = envp};
    struct buf b;
    buf_init(&b, SBX_MSG_MAX);
    cr_assert_eq(sbx_spawn_encode(&r, &b), 0);
    struct sbx_msg_hdr h;
    const void *pl;
    cr_assert_eq(sbx_msg_decode(b.data, b.len, &h, &pl), 0);
    cr_assert_eq(h.type, SBX_MSG_SPAWN);
    cr_assert_eq(h.id, 42);
    struct sbx_spawn_req d;
    cr_assert_eq(sbx_spawn_decode(pl, h.len, h.id, &d), 0);
    cr_assert_eq(d.uid, 1000);
    cr_assert_eq(d.gid, 1001);
    cr_assert_eq(d.ngroups, 2);
    cr_assert_eq(d.groups[1], 27);
    cr_assert_str_eq(d.cwd, "/home/a");
    cr_assert_eq(d.argc, 3);
    cr_assert_str_eq(d.argv[2], "echo hi");
    cr_assert_null(d.argv[3]);
    cr_assert_str_eq(d.envp[1], "HOME=/root");
    sbx_spawn_req_fini(&d);
    /* every truncation of the payload is rejected, never read past */
    for (size_t cut = 0; cut < h.len; cut++)
        cr_assert_eq(sbx_spawn_decode(pl, cut, 1, &d), -EBADMSG, "cut %zu", cut);
    cr_assert_eq(sbx_msg_decode(b.data, b.len - 1, &h, &pl), -EBADMSG);
    cr_assert_eq(sbx_msg_decode(b.data, 3, &h, &pl), -EBADMSG);
    buf_fini(&b);
}

Test(sandbox_proto, bounds)
{
    const char *argv[] = {"x"};
    struct sbx_spawn_req r = {.argc = 1, .argv = argv, .ngroups = SBX_MAX_GROUPS + 1};
    struct buf b;
    buf_init(&b, SBX_MSG_MAX);
    cr_assert_eq(sbx_spawn_encode(&r, &b), -EINVAL);
    r.ngroups = 0;
    r.argc = 0;
    cr_assert_eq(sbx_spawn_encode(&r, &b), -EINVAL);
    static char big[SBX_MSG_MAX];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *bigv[] = {big};
    struct sbx_spawn_req r2 = {.argc = 1, .argv = bigv};
    cr_assert_eq(sbx_spawn_encode(&r2, &b), -E2BIG);
    buf_fini(&b);
}

Test(sandbox_ring, keeps_the_tail_with_absolute_offsets)
{
    struct sbx_ring r;
    sbx_ring_init(&r, 10);
    char out[32];
    uint64_t from;
    sbx_ring_write(&r, "hello", 5);
    cr_assert_eq(sbx_ring_read(&r, 0, out, sizeof out, &from), 5);
    cr_assert_eq(from, 0);
    sbx_ring_write(&r, " world!", 7); /* 12 bytes total, 10 kept */
    cr_assert_eq(sbx_ring_start(&r), 2);
    size_t n = sbx_ring_read(&r, 0, out, sizeof out, &from);
    cr_assert_eq(from, 2);
    cr_assert_eq(n, 10);
    cr_assert(memcmp(out, "llo world!", 10) == 0);
    n = sbx_ring_read(&r, 8, out, 3, &from);
    cr_assert_eq(n, 3);
    cr_assert(memcmp(out, "rld", 3) == 0);
    cr_assert_eq(sbx_ring_read(&r, 12, out, sizeof out, &from), 0);
    cr_assert_eq(sbx_ring_read(&r, 99, out, sizeof out, &from), 0);
    sbx_ring_write(&r, "0123456789abcdef", 16); /* larger than cap */
    n = sbx_ring_read(&r, 0, out, sizeof out, &from);
    cr_assert_eq(from, 18);
    cr_assert(memcmp(out, "6789abcdef", 10) == 0);
    sbx_ring_fini(&r);
}

Test(sandbox_ring, many_small_writes_wrap_correctly)
{
    struct sbx_ring r;
    sbx_ring_init(&r, 100000);
    char ref[300000];
    size_t total = 0;
    for (int i = 0; total < sizeof ref - 100; i++) {
        char chunk[97];
        size_t len = (size_t)(i % 97) + 1;
        for (size_t j = 0; j < len; j++) chunk[j] = (char)('a' + (total + j) % 26);
        memcpy(ref + total, chunk, len);
        sbx_ring_write(&r, chunk, len);
        total += len;
    }
    static char out[100000];
    uint64_t from;
    size_t n = sbx_ring_read(&r, 0, out, sizeof out, &from);
    cr_assert_eq(n, 100000);
    cr_assert_eq(from, total - 100000);
    cr_assert(memcmp(out, ref + from, n) == 0);
    sbx_ring_fini(&r);
}

Test(sandbox_users, passwd_and_group_parsing)
{
    const char *pw = "root:x:0:0:root:/root:/bin/bash\n"
                     "broken line\n"
                     "alice:x:1000:1000::/home/alice:/bin/bash\n"
                     "big:x:70000:70000::/home/big:/bin/sh\n";
    const char *gr = "root:x:0:\nalice:x:1000:\ndev:x:2000:bob,alice\nops:x:2001:alicex\n";
    struct sbx_user u;
    cr_assert_eq(sbx_passwd_lookup(pw, strlen(pw), "alice", &u), 0);
    cr_assert_eq(u.uid, 1000);
    cr_assert_str_eq(u.home, "/home/alice");
    cr_assert_eq(sbx_passwd_lookup(pw, strlen(pw), "bob", &u), -ENOENT);
    cr_assert_eq(sbx_passwd_lookup(pw, strlen(pw), "big", &u), -ENOENT); /* not mappable */
    cr_assert_eq(sbx_passwd_lookup(pw, strlen(pw), "alic", &u), -ENOENT);
    sbx_passwd_lookup(pw, strlen(pw), "alice", &u);
    sbx_group_fill(gr, strlen(gr), &u);
    cr_assert_eq(u.ngroups, 2);
    cr_assert_eq(u.groups[0], 1000);
    cr_assert_eq(u.groups[1], 2000);
    cr_assert(sbx_etc_has_name(gr, strlen(gr), "dev"));
    cr_assert(!sbx_etc_has_name(gr, strlen(gr), "de"));
    cr_assert_eq(sbx_next_free_id(pw, strlen(pw), gr, strlen(gr)), 1001);
}

Test(sandbox_text, utf8_and_base64)
{
    cr_assert(sbx_utf8_valid("h\xc3\xa9llo", 6));
    cr_assert(!sbx_utf8_valid("\xff", 1));
    cr_assert(!sbx_utf8_valid("a\0b", 3));
    cr_assert(!sbx_utf8_valid("\xed\xa0\x80", 3)); /* surrogate */
    json_t *j = sbx_json_text("a\xffz", 3);
    cr_assert_str_eq(json_string_value(j), "a\xef\xbf\xbdz");
    json_decref(j);
    struct buf b, d;
    buf_init(&b, 0);
    buf_init(&d, 0);
    for (size_t n = 0; n < 8; n++) {
        buf_reset(&b);
        buf_reset(&d);
        sbx_base64_encode("\x00\xff\x10""abcd", n, &b);
        cr_assert_eq(sbx_base64_decode(b.data, b.len, &d), 0);
        cr_assert_eq(d.len, n);
        cr_assert(memcmp(d.data, "\x00\xff\x10""abcd", n) == 0);
    }
    buf_reset(&b);
    sbx_base64_encode("hi", 2, &b);
    cr_assert_str_eq(b.data, "aGk=");
    cr_assert_eq(sbx_base64_decode("a$==", 4, &d), -EINVAL);
    buf_fini(&b);
    buf_fini(&d);
}

Test(sandbox_policy, kept_capabilities_and_denied_syscalls)
{
    cr_assert(sbx_caps_kept(0));  /* CAP_CHOWN */
    cr_assert(!sbx_caps_kept(21)); /* CAP_SYS_ADMIN */
    cr_assert(!sbx_caps_kept(19)); /* CAP_SYS_PTRACE */
    cr_assert(!sbx_caps_kept(13)); /* CAP_NET_RAW */
    cr_assert(!sbx_caps_kept(16)); /* CAP_SYS_MODULE */
    const char *must[] = {"mount", "umount2", "pivot_root", "unshare", "setns", "init_module",
                          "finit_module", "kexec_load", "bpf", "perf_event_open", "keyctl",
                          "add_key", "userfaultfd", "open_by_handle_at", "io_uring_setup"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        bool found = false;
        for (const char *const *p = sbx_seccomp_denied; *p && !found; p++)
            found = strcmp(*p, must[i]) == 0;
        cr_assert(found, "%s must be denied", must[i]);
    }
}

/* Names added to Linux after 5.15: an older libseccomp may not know them (they are then
 * left on the default, ENOSYS). Any other unknown name is a typo. */
static const char *const newer_than_5_15[] = {
    "futex_waitv", "set_mempolicy_home_node", "cachestat", "fchmodat2", "map_shadow_stack",
    "futex_wake", "futex_wait", "futex_requeue", "mseal", "getxattrat", "setxattrat",
    "listxattrat", "removexattrat", "file_getattr", "file_setattr", "open_tree_attr", NULL};

static bool in_list(const char *const *list, const char *name)
{
    for (const char *const *p = list; *p; p++)
        if (strcmp(*p, name) == 0) return true;
    return false;
}

Test(sandbox_policy, seccomp_lists_are_disjoint_and_known)
{
    const char *const *lists[] = {sbx_seccomp_allowed, sbx_seccomp_denied,
                                  sbx_seccomp_filtered, sbx_seccomp_enosys};
    for (size_t i = 0; i < 4; i++)
        for (const char *const *p = lists[i]; *p; p++) {
            /* once per list, and in one list only: an unconditional rule would swallow
             * the argument rules, and allow + deny would be a contradiction */
            for (const char *const *q = p + 1; *q; q++)
                cr_assert(strcmp(*p, *q) != 0, "%s listed twice", *p);
            for (size_t j = i + 1; j < 4; j++)
                cr_assert(!in_list(lists[j], *p), "%s is in two lists", *p);
            cr_assert(seccomp_syscall_resolve_name(*p) != __NR_SCMP_ERROR ||
                          in_list(newer_than_5_15, *p),
                      "%s: unknown system call name", *p);
        }
    const char *must[] = {"read", "write", "openat", "close", "mmap", "execve", "wait4",
                          "futex", "rt_sigaction", "newfstatat", "statx", "getdents64",
                          "pipe2", "epoll_pwait", "connect", "ptrace", "chroot", "setresuid"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        cr_assert(in_list(sbx_seccomp_allowed, must[i]), "%s must be allowed", must[i]);
    cr_assert(in_list(sbx_seccomp_enosys, "clone3"));
    cr_assert(!in_list(sbx_seccomp_allowed, "clone3"));
}

#if defined(__x86_64__)
/* The i386 ABI from a 64-bit process: int 0x80 (r8-r11 come back zeroed). */
static long i386_syscall(long nr, long a, long b, long c)
{
    long r;
    __asm__ volatile("int $0x80"
                     : "=a"(r)
                     : "a"(nr), "b"(a), "c"(b), "d"(c)
                     : "memory", "r8", "r9", "r10", "r11");
    return (long)(int)r;
}

/* Whether this kernel runs i386 system calls (IA32 emulation can be off). */
static bool have_i386_abi(void)
{
    pid_t pid = fork();
    if (pid == 0) _exit(i386_syscall(20 /* getpid */, 0, 0, 0) == getpid() ? 0 : 1);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}
#endif

/* -errno, or the result */
static long sys_r(long r)
{
    return r < 0 ? -errno : r;
}

/* The filter's checks in a forked child; prepared: load the program compiled beforehand
 * (what session inits do), else build it in the child. */
static void seccomp_checks(bool prepared)
{
    bool i386 = false;
#if defined(__x86_64__)
    i386 = have_i386_abi();
#endif
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* the child exits with the number of the first failed check; raw syscalls only,
         * so no sanitizer interceptor runs under the filter */
        int n = 0;
#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        n++;                                                                                \
        if (!(cond)) _exit(n);                                                              \
    } while (0)
        EXPECT(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
        if (prepared) EXPECT(sbx_seccomp_prepare() == 0 && sbx_seccomp_prepare() == 0);
        EXPECT(sbx_seccomp_load() == 0);
        int p[2];
        EXPECT(syscall(SYS_pipe2, p, 0) == 0);
        EXPECT(syscall(SYS_getppid) > 0);
        /* not on the list: ENOSYS, like an older kernel */
        EXPECT(sys_r(syscall(1000)) == -ENOSYS);
        EXPECT(sys_r(syscall(SYS_clone3, NULL, 0)) == -ENOSYS);
        /* known and dangerous: EPERM */
        EXPECT(sys_r(syscall(SYS_kexec_load, 0, 0, 0, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_add_key, 0, 0, 0, 0, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_keyctl, 0, 0, 0, 0, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_mount, 0, 0, 0, 0, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_unshare, CLONE_NEWUSER)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_bpf, 0, 0, 0)) == -EPERM);
        /* clone: a plain fork works, namespace flags do not (high bits ignored) */
        long c = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (c == 0) syscall(SYS_exit_group, 0);
        EXPECT(c > 0 && syscall(SYS_wait4, c, NULL, 0, NULL) == c);
        EXPECT(sys_r(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_clone, (1UL << 32) | CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0)) ==
               -EPERM);
        /* socket families and types */
        long s = syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        s = syscall(SYS_socket, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        s = syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        s = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        EXPECT(sys_r(syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0)) == -EAFNOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, 40 /* AF_VSOCK */, SOCK_STREAM, 0)) == -EAFNOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_STREAM, 0)) ==
               -EAFNOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_RAW, 1)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET6, SOCK_PACKET, 0)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_SEQPACKET, 132)) == -ESOCKTNOSUPPORT);
        /* inet protocols: 0, TCP and UDP only (no SCTP, UDP-Lite, ICMP datagrams) */
        s = syscall(SYS_socket, AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        s = syscall(SYS_socket, AF_INET, SOCK_DGRAM, IPPROTO_UDP);
        EXPECT(s >= 0 && syscall(SYS_close, s) == 0);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_STREAM, IPPROTO_SCTP)) == -EPROTONOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET6, SOCK_STREAM, IPPROTO_UDP)) == -EPROTONOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE)) == -EPROTONOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_DGRAM, IPPROTO_ICMP)) == -EPROTONOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_STREAM, -1)) == -EPROTONOSUPPORT);
        EXPECT(sys_r(syscall(SYS_socket, AF_INET, SOCK_STREAM, (1UL << 32) | IPPROTO_TCP)) ==
               -EPROTONOSUPPORT);
        /* ioctl: everything reaches the kernel but terminal input injection */
        int avail = -1;
        EXPECT(syscall(SYS_ioctl, p[0], FIONREAD, &avail) == 0 && avail == 0);
        EXPECT(sys_r(syscall(SYS_ioctl, p[0], TCGETS, NULL)) == -ENOTTY);
        EXPECT(sys_r(syscall(SYS_ioctl, p[0], TIOCSTI, "x")) == -EPERM);
        EXPECT(sys_r(syscall(SYS_ioctl, p[0], TIOCLINUX, "x")) == -EPERM);
        EXPECT(sys_r(syscall(SYS_ioctl, p[0], (1UL << 32) | TIOCSTI, "x")) == -EPERM);
        EXPECT(sys_r(syscall(SYS_ioctl, p[0], TIOCSTI ^ 0x6, NULL)) == -ENOTTY);
        /* personality */
        EXPECT(syscall(SYS_personality, 0xffffffffUL) >= 0);
        EXPECT(syscall(SYS_personality, ADDR_NO_RANDOMIZE) >= 0);
        EXPECT(syscall(SYS_personality, PER_LINUX) >= 0);
        EXPECT(sys_r(syscall(SYS_personality, READ_IMPLIES_EXEC)) == -EPERM);
        EXPECT(sys_r(syscall(SYS_personality, MMAP_PAGE_ZERO)) == -EPERM);
#if defined(__x86_64__)
        /* the i386 ABI is held to the same list */
        if (i386) {
            EXPECT(i386_syscall(20 /* getpid */, 0, 0, 0) == syscall(SYS_getpid));
            EXPECT(i386_syscall(1000, 0, 0, 0) == -ENOSYS);
            EXPECT(i386_syscall(283 /* kexec_load */, 0, 0, 0) == -EPERM);
            EXPECT(i386_syscall(102 /* socketcall */, 1, 0, 0) == -EPERM);
            EXPECT(i386_syscall(359 /* socket */, AF_PACKET, SOCK_RAW, 0) == -EAFNOSUPPORT);
            EXPECT(i386_syscall(310 /* unshare */, CLONE_NEWUSER, 0, 0) == -EPERM);
            EXPECT(i386_syscall(120 /* clone */, CLONE_NEWUSER | SIGCHLD, 0, 0) == -EPERM);
            EXPECT(i386_syscall(54 /* ioctl */, p[0], TIOCSTI, 0) == -EPERM);
        }
#endif
#undef EXPECT
        syscall(SYS_exit_group, 0);
    }
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "child died: status %#x", st);
    cr_assert_eq(WEXITSTATUS(st), 0, "check number %d failed", WEXITSTATUS(st));
}

Test(sandbox_policy, seccomp_filter_denies_by_default)
{
    seccomp_checks(false);
}

Test(sandbox_policy, seccomp_prepared_filter_denies_the_same)
{
    seccomp_checks(true);
}

Test(sandbox_cgroup, v2_cpu_max)
{
    char b[64];
    struct sbx_cg_limits l = {0, 0, 150000, 100000};
    sbx_cg_cpu_max(&l, b, sizeof b);
    cr_assert_str_eq(b, "150000 100000");
    l.cpu_quota_us = 0;
    sbx_cg_cpu_max(&l, b, sizeof b);
    cr_assert_str_eq(b, "max 100000");
}
