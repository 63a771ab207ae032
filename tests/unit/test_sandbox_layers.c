/* test_sandbox_layers.c - the layer store (src/sandbox/storage/layers.c): layers are
 * unpacked verified and safely, whiteouts become overlayfs ones, and bad layers leave
 * nothing behind. Each test writes its tar with libarchive into a temporary file. Needs
 * root (overlay xattrs, whiteout devices, chown). */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sandbox/storage/image.h"
#include "sandbox/storage/layers.h"
#include "sandbox/storage/oci.h"
#include "sandbox/storage/safefs.h"

static char base[64];
static struct sbx_layers ls;

static void setup(void)
{
    snprintf(base, sizeof base, "/tmp/rebuno-layers-XXXXXX");
    cr_assert_not_null(mkdtemp(base));
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_layers_open(base, &ls, &e), 0, "%s", e.msg);
}

static void teardown(void)
{
    sbx_layers_close(&ls);
    sbx_image_remove_tree(base);
}

/* entries: type ('f' file, 'd' dir, 'l' symlink, 'h' hardlink, 'c' char device), name,
 * data (file content or link target). */
struct ent {
    char type;
    const char *name, *data;
};

static int blob(const struct ent *es, size_t n, int filter, char digest[80])
{
    char path[128];
    snprintf(path, sizeof path, "%s/blob-XXXXXX", base);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    unlink(path);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (filter == 1) archive_write_add_filter_gzip(a);
    if (filter == 2) archive_write_add_filter_zstd(a);
    cr_assert_eq(archive_write_open_fd(a, fd), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, es[i].name);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        switch (es[i].type) {
        case 'f':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_perm(e, 0644);
            archive_entry_set_size(e, (la_int64_t)strlen(es[i].data));
            break;
        case 'd':
            archive_entry_set_filetype(e, AE_IFDIR);
            archive_entry_set_perm(e, 0755);
            break;
        case 'l':
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_perm(e, 0777);
            archive_entry_set_symlink(e, es[i].data);
            break;
        case 'h':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_perm(e, 0644);
            archive_entry_set_hardlink(e, es[i].data);
            break;
        case 'c':
            archive_entry_set_filetype(e, AE_IFCHR);
            archive_entry_set_perm(e, 0666);
            archive_entry_set_rdev(e, makedev(1, 3));
            break;
        }
        cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK, "%s", archive_error_string(a));
        if (es[i].type == 'f') archive_write_data(a, es[i].data, strlen(es[i].data));
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    /* its digest */
    lseek(fd, 0, SEEK_SET);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    char b[4096];
    ssize_t r;
    while ((r = read(fd, b, sizeof b)) > 0) EVP_DigestUpdate(md, b, (size_t)r);
    unsigned char h[32];
    unsigned hl;
    EVP_DigestFinal_ex(md, h, &hl);
    EVP_MD_CTX_free(md);
    strcpy(digest, "sha256:");
    for (int i = 0; i < 32; i++) snprintf(digest + 7 + 2 * i, 3, "%02x", h[i]);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static int add(int fd, const char *digest, struct err *e)
{
    struct sbx_layer_info info;
    return sbx_layer_add_from_blob(&ls, fd, NULL, digest, -1, 0, NULL, NULL, &info, e);
}

/* Nothing but the store's own entries (no temporaries, no layer) is left. */
static void store_is_empty(void)
{
    DIR *d = opendir(ls.dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    cr_assert_eq(n, 0, "the store holds leftovers");
}

static void refused(const struct ent *es, size_t n, const char *needle)
{
    char dg[80];
    int fd = blob(es, n, 0, dg);
    struct err e = ERR_INIT;
    cr_assert_eq(add(fd, dg, &e), -1);
    close(fd);
    cr_assert_eq(e.status, 400, "%d %s", e.status, e.msg);
    cr_assert(strstr(e.msg, needle), "message \"%s\" lacks \"%s\"", e.msg, needle);
    cr_assert_not(sbx_layer_have(&ls, dg));
    store_is_empty();
}

TestSuite(layers, .init = setup, .fini = teardown);

Test(layers, unpacks_gzip_zstd_and_whiteouts)
{
    static const struct ent es[] = {{'d', "etc/", ""},
                                    {'f', "etc/os-release", "ID=test\n"},
                                    {'f', "etc/.wh.passwd", ""},
                                    {'d', "opt/", ""},
                                    {'f', "opt/.wh..wh..opq", ""},
                                    {'l', "bin", "usr/bin"},
                                    {'f', "deep/a/b/c", "x"},
                                    {'h', "deep/link", "deep/a/b/c"}};
    for (int filter = 0; filter < 3; filter++) {
        char dg[80], p[256];
        int fd = blob(es, sizeof es / sizeof es[0], filter, dg);
        struct err e = ERR_INIT;
        cr_assert_eq(add(fd, dg, &e), 0, "filter %d: %s", filter, e.msg);
        close(fd);
        cr_assert(sbx_layer_have(&ls, dg));
        sbx_layer_path(&ls, dg, p, sizeof p);
        char q[300];
        struct stat st;
        snprintf(q, sizeof q, "%s/etc/passwd", p);
        cr_assert_eq(lstat(q, &st), 0);
        cr_assert(S_ISCHR(st.st_mode) && st.st_rdev == 0, "a whiteout is a 0/0 device");
        snprintf(q, sizeof q, "%s/opt", p);
        char v[4] = "";
        cr_assert_eq(lgetxattr(q, "trusted.overlay.opaque", v, sizeof v), 1);
        cr_assert_eq(v[0], 'y');
        snprintf(q, sizeof q, "%s/deep/link", p);
        cr_assert_eq(lstat(q, &st), 0);
        cr_assert_eq(st.st_nlink, 2);
        snprintf(q, sizeof q, "%s/bin", p);
        cr_assert_eq(lstat(q, &st), 0);
        cr_assert(S_ISLNK(st.st_mode));
        /* present: a second add reads nothing */
        fd = blob(es, sizeof es / sizeof es[0], filter, dg);
        struct sbx_layer_info info;
        cr_assert_eq(sbx_layer_add_from_blob(&ls, fd, NULL, dg, -1, 0, NULL, NULL, &info, &e), 0);
        cr_assert(info.existed);
        close(fd);
        cr_assert_eq(sbx_layer_remove(&ls, dg), 0);
    }
    store_is_empty();
}

Test(layers, refuses_dotdot)
{
    static const struct ent es[] = {{'f', "a/../../escape", "x"}};
    refused(es, 1, "contains \"..\"");
}

Test(layers, refuses_absolute)
{
    static const struct ent es[] = {{'f', "/etc/evil", "x"}};
    refused(es, 1, "absolute");
}

Test(layers, refuses_devices)
{
    static const struct ent es[] = {{'c', "dev/null", ""}};
    refused(es, 1, "device node");
}

Test(layers, refuses_hardlink_out)
{
    static const struct ent es[] = {{'h', "passwd", "../../../../etc/passwd"}};
    refused(es, 1, "contains \"..\"");
    static const struct ent es2[] = {{'h', "passwd", "etc/shadow"}};
    refused(es2, 1, "not a file of the layer");
}

Test(layers, never_writes_through_a_symlink)
{
    char outside[128];
    snprintf(outside, sizeof outside, "%s/outside", base);
    cr_assert_eq(mkdir(outside, 0755), 0);
    const struct ent es[] = {{'l', "x", outside}, {'f', "x/planted", "owned"}};
    char dg[80];
    int fd = blob(es, 2, 0, dg);
    struct err e = ERR_INIT;
    cr_assert_eq(add(fd, dg, &e), -1);
    close(fd);
    cr_assert(strstr(e.msg, "below a symlink"), "%s", e.msg);
    char p[200];
    snprintf(p, sizeof p, "%s/planted", outside);
    cr_assert_neq(access(p, F_OK), 0, "a file was written through the symlink");
    rmdir(outside);
    store_is_empty();
}

Test(layers, refuses_digest_mismatch)
{
    static const struct ent es[] = {{'f', "a", "x"}};
    char dg[80];
    int fd = blob(es, 1, 1, dg);
    dg[10] = dg[10] == '0' ? '1' : '0';
    struct err e = ERR_INIT;
    cr_assert_eq(add(fd, dg, &e), -1);
    close(fd);
    cr_assert_str_eq(e.code, "digest_mismatch");
    cr_assert_not(sbx_layer_have(&ls, dg));
    store_is_empty();
}

Test(layers, full_store_is_507)
{
    static const struct ent es[] = {{'f', "big", "0123456789012345678901234567890123456789"}};
    char dg[80];
    int fd = blob(es, 1, 0, dg);
    struct err e = ERR_INIT;
    struct sbx_layer_info info;
    cr_assert_eq(sbx_layer_add_from_blob(&ls, fd, NULL, dg, -1, 16, NULL, NULL, &info, &e), -1);
    close(fd);
    cr_assert_eq(e.status, 507, "%s", e.msg);
    store_is_empty();
}

Test(oci, index_selects_linux_amd64)
{
    const char *ix_json =
        "{\"schemaVersion\":2,\"mediaType\":\"" SBX_MT_OCI_INDEX "\",\"manifests\":["
        "{\"mediaType\":\"" SBX_MT_OCI_MANIFEST "\",\"size\":10,\"digest\":\"sha256:"
        "1111111111111111111111111111111111111111111111111111111111111111\","
        "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}},"
        "{\"mediaType\":\"" SBX_MT_OCI_MANIFEST "\",\"size\":10,\"digest\":\"sha256:"
        "2222222222222222222222222222222222222222222222222222222222222222\","
        "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
    struct sbx_oci_index ix;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_oci_parse_index(ix_json, strlen(ix_json), "index", &ix, &e), 0, "%s", e.msg);
    cr_assert_eq(sbx_oci_select(&ix, "linux", "amd64", &e), 1);
    cr_assert_eq(sbx_oci_select(&ix, "linux", "s390x", &e), -1);
    cr_assert(strstr(e.msg, "linux/arm64, linux/amd64"), "%s", e.msg);
    sbx_oci_index_fini(&ix);
    const char *bad = "{\"schemaVersion\":2,\"manifests\":[{\"size\":1,\"digest\":\"sha256:12\"}]}";
    cr_assert_eq(sbx_oci_parse_index(bad, strlen(bad), "index", &ix, &e), -1);
    cr_assert_eq(e.status, 400);
}

Test(oci, config_and_references)
{
    const char *cf = "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Env\":"
                     "[\"PATH=/usr/bin\",\"LANG=C\"],\"WorkingDir\":\"/app\",\"User\":\"app\","
                     "\"Cmd\":[\"sh\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:"
                     "3333333333333333333333333333333333333333333333333333333333333333\"]}}";
    struct sbx_oci_config c;
    struct err e = ERR_INIT;
    cr_assert_eq(sbx_oci_parse_config(cf, strlen(cf), "config", &c, &e), 0, "%s", e.msg);
    cr_assert_eq(c.nenv, 2);
    cr_assert_str_eq(c.workdir, "/app");
    cr_assert_str_eq(c.user, "app");
    cr_assert_eq(c.ndiff_ids, 1);
    sbx_oci_config_fini(&c);
    struct sbx_oci_ref r;
    cr_assert_eq(sbx_oci_ref_parse("alpine", &r, &e), 0);
    cr_assert_str_eq(r.canonical, "docker.io/library/alpine:latest");
    cr_assert_eq(sbx_oci_ref_parse("registry.example:5000/team/name:v1", &r, &e), 0);
    cr_assert_str_eq(r.registry, "registry.example:5000");
    cr_assert_str_eq(r.repository, "team/name");
    cr_assert_str_eq(r.tag, "v1");
    cr_assert_eq(sbx_oci_ref_parse("rebuno/default@sha256:"
                                   "4444444444444444444444444444444444444444444444444444444444444444",
                                   &r, &e),
                 0);
    cr_assert_str_eq(r.repository, "rebuno/default");
    cr_assert_eq(r.tag[0], '\0');
    cr_assert_eq(sbx_oci_ref_parse("UPPER/case", &r, &e), -1);
    cr_assert_eq(sbx_oci_ref_parse("a/../b", &r, &e), -1);
}
