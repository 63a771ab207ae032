/*
 * install.c - install an image from an OCI image layout directory (layers.h), and
 * turn the other import forms into one: a `docker save` archive or an OCI layout tar
 * is unpacked into a temporary directory (the same safe unpacker as layers) and, for
 * docker archives, rewritten as an OCI layout (manifest.json -> an OCI manifest whose
 * blobs are the archive's config and layer tars, hashed here). Every source, a
 * registry pull included, ends in sbx_image_install_oci_layout.
 */
#include "sandbox/storage/layers.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "sandbox/storage/image.h"
#include "sandbox/storage/safefs.h"

void sbx_image_rec_fini(struct sbx_image_rec *r)
{
    free(r->ref);
    free(r->layers);
    free(r->config_json);
    free(r->source_type);
    free(r->source_path);
    memset(r, 0, sizeof *r);
}

/* Read a whole small file rel beneath dirfd (no symlinks) of at most max bytes. */
static int read_small(int dirfd, const char *rel, size_t max, char **out, size_t *len)
{
    int fd = sbx_safe_open(dirfd, rel, O_RDONLY);
    if (fd < 0) return fd;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    char *b = xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    b[got] = '\0';
    *out = b;
    *len = got;
    return 0;
}

static void sha256_hex(const void *p, size_t n, char hex[65])
{
    unsigned char md[32];
    unsigned ml = 0;
    EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* A blob of the layout (sha256:<hex>), verified against its digest and size. */
static int read_blob(int dirfd, const char *digest, int64_t size, const char *what, char **out,
                     size_t *len, struct err *err)
{
    char rel[100];
    snprintf(rel, sizeof rel, "blobs/sha256/%s", digest + 7);
    int e = read_small(dirfd, rel, SBX_OCI_DOC_MAX, out, len);
    if (e == -ENOENT)
        return err_set(err, 400, "invalid_image", "path", "the %s blob %s is missing", what,
                       digest);
    if (e == -EFBIG)
        return err_set(err, 400, "invalid_image", "path", "the %s blob %s is too large", what,
                       digest);
    if (e < 0)
        return err_set(err, 400, "invalid_image", "path", "cannot read the %s blob %s: %s", what,
                       digest, strerror(-e));
    char hex[65];
    sha256_hex(*out, *len, hex);
    if (strcmp(hex, digest + 7) != 0 || (size >= 0 && (int64_t)*len != size)) {
        free(*out);
        *out = NULL;
        return err_set(err, 400, "digest_mismatch", "path",
                       "the %s blob %s does not match its digest or size", what, digest);
    }
    return 0;
}

static json_t *strv_json(char **v, size_t n)
{
    if (!v) return json_null();
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_string(v[i]));
    return a;
}

/* The tag part of a reference ("docker.io/x/y:tag" -> "tag"), or NULL. */
static const char *tag_of(const char *ref)
{
    if (!ref) return NULL;
    const char *slash = strrchr(ref, '/');
    const char *colon = strrchr(slash ? slash : ref, ':');
    return colon ? colon + 1 : NULL;
}

/* Choose the manifest descriptor of the layout's index: 0 with *m chosen. */
static int choose(int dirfd, const char *ref, struct sbx_oci_desc *out, struct err *err)
{
    char *buf = NULL;
    size_t len = 0;
    int e = read_small(dirfd, "index.json", SBX_OCI_DOC_MAX, &buf, &len);
    if (e < 0)
        return err_set(err, 400, "invalid_image", "path",
                       "not an OCI image layout: cannot read index.json (%s)", strerror(-e));
    struct sbx_oci_index ix;
    int rc = sbx_oci_parse_index(buf, len, "index.json", &ix, err);
    free(buf);
    if (rc < 0) return -1;
    int pick = -1;
    const char *tag = tag_of(ref);
    for (size_t i = 0; ref && i < ix.n && pick < 0; i++) {
        const char *rn = ix.manifests[i].ref_name;
        if (rn && (!strcmp(rn, ref) || (tag && !strcmp(rn, tag)))) pick = (int)i;
    }
    if (pick < 0 && ix.n == 1) pick = 0;
    if (pick < 0) pick = sbx_oci_select(&ix, "linux", "amd64", err);
    rc = -1;
    if (pick >= 0) {
        struct sbx_oci_desc *d = &ix.manifests[pick];
        /* hand over the chosen descriptor */
        *out = *d;
        memset(d, 0, sizeof *d);
        rc = 0;
    }
    sbx_oci_index_fini(&ix);
    return rc;
}

static void desc_free(struct sbx_oci_desc *d)
{
    free(d->media_type);
    free(d->os);
    free(d->arch);
    free(d->variant);
    free(d->ref_name);
    memset(d, 0, sizeof *d);
}

int sbx_image_install_oci_layout(const struct sbx_layers *ls, const char *images_dir, int dirfd,
                                 const char *ref, uint64_t max_bytes,
                                 sbx_layer_progress_fn progress, void *parg,
                                 struct sbx_image_rec *rec, struct err *err)
{
    memset(rec, 0, sizeof *rec);
    char *lay = NULL, *mbuf = NULL, *cbuf = NULL;
    size_t len = 0, mlen = 0, clen = 0;
    struct sbx_oci_desc md = {0};
    struct sbx_oci_manifest m = {0};
    struct sbx_oci_config cf = {0};
    char **dirs = NULL;
    int rc = -1;
    int e = read_small(dirfd, "oci-layout", 4096, &lay, &len);
    if (e < 0) {
        err_set(err, 400, "invalid_image", "path",
                "not an OCI image layout: no oci-layout file (%s)", strerror(-e));
        goto out;
    }
    json_t *lj = json_loadb(lay, len, 0, NULL);
    const char *ver = json_string_value(json_object_get(lj, "imageLayoutVersion"));
    bool ok = ver && !strcmp(ver, "1.0.0");
    json_decref(lj);
    if (!ok) {
        err_set(err, 400, "invalid_image", "path",
                "oci-layout must say {\"imageLayoutVersion\": \"1.0.0\"}");
        goto out;
    }
    if (choose(dirfd, ref, &md, err) < 0) goto out;
    /* follow nested indexes (a multi-platform image inside the layout) */
    for (int depth = 0;; depth++) {
        if (read_blob(dirfd, md.digest, md.size, "manifest", &mbuf, &mlen, err) < 0) goto out;
        enum sbx_oci_kind k = sbx_oci_media_kind(md.media_type);
        if (k == SBX_OCI_UNKNOWN) k = sbx_oci_doc_kind(mbuf, mlen);
        if (k == SBX_OCI_MANIFEST) break;
        if (k != SBX_OCI_INDEX || depth >= 2) {
            err_set(err, 400, "invalid_image", "path", "%s is neither an image manifest nor an "
                    "index", md.digest);
            goto out;
        }
        struct sbx_oci_index ix;
        if (sbx_oci_parse_index(mbuf, mlen, md.digest, &ix, err) < 0) goto out;
        int pick = sbx_oci_select(&ix, "linux", "amd64", err);
        free(mbuf);
        mbuf = NULL;
        if (pick < 0) {
            sbx_oci_index_fini(&ix);
            goto out;
        }
        desc_free(&md);
        md = ix.manifests[pick];
        memset(&ix.manifests[pick], 0, sizeof ix.manifests[pick]);
        sbx_oci_index_fini(&ix);
    }
    if (sbx_oci_parse_manifest(mbuf, mlen, md.digest, &m, err) < 0) goto out;
    if (read_blob(dirfd, m.config.digest, m.config.size, "config", &cbuf, &clen, err) < 0)
        goto out;
    if (sbx_oci_parse_config(cbuf, clen, m.config.digest, &cf, err) < 0) goto out;
    if (cf.os && strcmp(cf.os, "linux") != 0) {
        err_set(err, 400, "invalid_image", "path", "the image is for %.32s, not linux", cf.os);
        goto out;
    }
    if (cf.arch && strcmp(cf.arch, "amd64") != 0) {
        err_set(err, 400, "invalid_image", "path", "the image is for %.32s, not amd64", cf.arch);
        goto out;
    }
    if (cf.diff_ids && cf.ndiff_ids != m.nlayers) {
        err_set(err, 400, "invalid_image", "path",
                "the config lists %zu diff_ids for %zu layers", cf.ndiff_ids, m.nlayers);
        goto out;
    }
    rec->layers = xcalloc(m.nlayers + 1, sizeof *rec->layers);
    for (size_t i = 0; i < m.nlayers; i++) {
        const struct sbx_oci_desc *l = &m.layers[i];
        snprintf(rec->layers[i], sizeof rec->layers[i], "%s", l->digest);
        rec->nlayers++;
        rec->size_bytes += l->size;
        if (sbx_layer_have(ls, l->digest)) continue;
        char rel[100];
        snprintf(rel, sizeof rel, "blobs/sha256/%s", l->digest + 7);
        int fd = sbx_safe_open(dirfd, rel, O_RDONLY);
        if (fd < 0) {
            err_set(err, 400, "invalid_image", "path", "layer blob %s is missing: %s", l->digest,
                    strerror(-fd));
            goto out;
        }
        struct sbx_layer_info info;
        int r = sbx_layer_add_from_blob(ls, fd, l->media_type, l->digest, l->size, max_bytes,
                                        progress, parg, &info, err);
        close(fd);
        if (r < 0) goto out;
    }
    /* the skeleton over the layers, top first */
    dirs = xcalloc(m.nlayers + 1, sizeof *dirs);
    for (size_t i = 0; i < m.nlayers; i++) {
        char p[PATH_MAX];
        sbx_layer_path(ls, m.layers[m.nlayers - 1 - i].digest, p, sizeof p);
        dirs[i] = xstrdup(p);
    }
    snprintf(rec->digest, sizeof rec->digest, "%s", md.digest);
    if (sbx_image_make_skeleton(images_dir, md.digest + 7, (const char *const *)dirs, m.nlayers,
                                err) < 0)
        goto out;
    json_t *c = json_object();
    json_object_set_new(c, "env", strv_json(cf.env, cf.nenv));
    json_object_set_new(c, "workdir", cf.workdir ? json_string(cf.workdir) : json_null());
    json_object_set_new(c, "user", cf.user ? json_string(cf.user) : json_null());
    json_object_set_new(c, "cmd", strv_json(cf.cmd, cf.ncmd));
    json_object_set_new(c, "entrypoint", strv_json(cf.entrypoint, cf.nentrypoint));
    rec->config_json = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    rec->ref = ref ? xstrdup(ref) : NULL;
    rc = 0;
out:
    if (rc < 0) sbx_image_rec_fini(rec);
    for (size_t i = 0; dirs && i < m.nlayers; i++) free(dirs[i]);
    free(dirs);
    free(lay);
    free(mbuf);
    free(cbuf);
    desc_free(&md);
    sbx_oci_manifest_fini(&m);
    sbx_oci_config_fini(&cf);
    return rc;
}

/* ------------------------------------------------------------------ archives */

/* sha256 and size of the file rel beneath dirfd, and its first bytes. */
static int hash_file(int dirfd, const char *rel, char hex[65], int64_t *size, unsigned char magic[4])
{
    int fd = sbx_safe_open(dirfd, rel, O_RDONLY);
    if (fd < 0) return fd;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    char *b = xmalloc(1 << 18);
    int64_t n = 0;
    int e = 0;
    memset(magic, 0, 4);
    for (;;) {
        ssize_t r = read(fd, b, 1 << 18);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            e = -errno;
            break;
        }
        if (r == 0) break;
        if (n == 0) memcpy(magic, b, r < 4 ? (size_t)r : 4);
        EVP_DigestUpdate(md, b, (size_t)r);
        n += r;
    }
    unsigned char h[32];
    unsigned hl = 0;
    EVP_DigestFinal_ex(md, h, &hl);
    EVP_MD_CTX_free(md);
    free(b);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
    *size = n;
    /* into the blobs of the layout being made (a hard link: no copy) */
    int bl = e ? e : sbx_safe_open(dirfd, "blobs/sha256", O_PATH | O_DIRECTORY);
    if (bl >= 0) {
        if (linkat(fd, "", bl, hex, AT_EMPTY_PATH) < 0 && errno != EEXIST) e = -errno;
        close(bl);
    } else {
        e = bl;
    }
    close(fd);
    return e;
}

static json_t *desc_json(const char *mt, const char *hex, int64_t size)
{
    char dg[80];
    snprintf(dg, sizeof dg, "sha256:%s", hex);
    return json_pack("{s:s,s:s,s:I}", "mediaType", mt, "digest", dg, "size", (json_int_t)size);
}

static bool tag_matches(json_t *tags, const char *ref)
{
    struct sbx_oci_ref want, have;
    struct err e = ERR_INIT;
    if (!ref || sbx_oci_ref_parse(ref, &want, &e) < 0) return false;
    for (size_t i = 0; i < json_array_size(tags); i++) {
        const char *t = json_string_value(json_array_get(tags, i));
        if (t && sbx_oci_ref_parse(t, &have, &e) == 0 && !strcmp(have.canonical, want.canonical))
            return true;
    }
    return false;
}

/* Rewrite the unpacked `docker save` archive in dirfd as an OCI layout. */
static int docker_to_oci(int dirfd, const char *ref, struct err *err)
{
    char *buf = NULL;
    size_t len = 0;
    int e = read_small(dirfd, "manifest.json", SBX_OCI_DOC_MAX, &buf, &len);
    if (e < 0)
        return err_set(err, 400, "invalid_image", "path",
                       "not a docker archive: cannot read manifest.json (%s)", strerror(-e));
    json_t *mj = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
    free(buf);
    int rc = -1;
    json_t *layers = json_array(), *pick = NULL;
    if (!json_is_array(mj) || json_array_size(mj) == 0) {
        err_set(err, 400, "invalid_image", "path", "manifest.json must be a non-empty array");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(mj) && !pick; i++)
        if (tag_matches(json_object_get(json_array_get(mj, i), "RepoTags"), ref))
            pick = json_array_get(mj, i);
    if (!pick) pick = json_array_get(mj, 0);
    const char *cfg = json_string_value(json_object_get(pick, "Config"));
    json_t *ls = json_object_get(pick, "Layers");
    if (!cfg || !json_is_array(ls) || json_array_size(ls) > SBX_OCI_LAYERS_MAX) {
        err_set(err, 400, "invalid_image", "path",
                "manifest.json: an entry needs Config and at most %d Layers", SBX_OCI_LAYERS_MAX);
        goto out;
    }
    int bfd = sbx_safe_mkdir(dirfd, "blobs", 0755, (uid_t)-1, (gid_t)-1, NULL);
    if (bfd >= 0) close(bfd);
    bfd = bfd < 0 ? bfd : sbx_safe_mkdir(dirfd, "blobs/sha256", 0755, (uid_t)-1, (gid_t)-1, NULL);
    if (bfd < 0) {
        err_set(err, 400, "invalid_image", "path", "cannot make blobs/sha256: %s",
                strerror(-bfd));
        goto out;
    }
    close(bfd);
    char hex[65];
    int64_t size;
    unsigned char mg[4];
    if ((e = hash_file(dirfd, cfg, hex, &size, mg)) < 0) {
        err_set(err, 400, "invalid_image", "path", "config %.200s: %s", cfg,
                e == -ELOOP ? "a symlink (not supported)" : strerror(-e));
        goto out;
    }
    json_t *cdesc = desc_json(SBX_MT_OCI_CONFIG, hex, size);
    for (size_t i = 0; i < json_array_size(ls); i++) {
        const char *lp = json_string_value(json_array_get(ls, i));
        if (!lp || (e = hash_file(dirfd, lp, hex, &size, mg)) < 0) {
            json_decref(cdesc);
            err_set(err, 400, "invalid_image", "path", "layer %.200s: %s", lp ? lp : "?",
                    !lp ? "not a string" : e == -ELOOP ? "a symlink (not supported)"
                                                       : strerror(-e));
            goto out;
        }
        const char *mt = mg[0] == 0x1f && mg[1] == 0x8b ? SBX_MT_OCI_LAYER_GZIP
                         : mg[0] == 0x28 && mg[1] == 0xb5 && mg[2] == 0x2f && mg[3] == 0xfd
                             ? SBX_MT_OCI_LAYER_ZSTD
                             : SBX_MT_OCI_LAYER;
        json_array_append_new(layers, desc_json(mt, hex, size));
    }
    json_t *man = json_pack("{s:i,s:s,s:o,s:O}", "schemaVersion", 2, "mediaType",
                            SBX_MT_OCI_MANIFEST, "config", cdesc, "layers", layers);
    char *mtext = json_dumps(man, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(man);
    char mhex[65];
    sha256_hex(mtext, strlen(mtext), mhex);
    int blobs = sbx_safe_open(dirfd, "blobs/sha256", O_PATH | O_DIRECTORY);
    e = blobs < 0 ? blobs
                  : sbx_safe_replace(blobs, mhex, mtext, strlen(mtext), 0644, (uid_t)-1, (gid_t)-1,
                                     false);
    if (blobs >= 0) close(blobs);
    json_t *ix = json_pack("{s:i,s:[o]}", "schemaVersion", 2, "manifests",
                           desc_json(SBX_MT_OCI_MANIFEST, mhex, (int64_t)strlen(mtext)));
    free(mtext);
    char *itext = json_dumps(ix, JSON_COMPACT);
    json_decref(ix);
    static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
    if (!e) e = sbx_safe_replace(dirfd, "index.json", itext, strlen(itext), 0644, (uid_t)-1,
                                 (gid_t)-1, false);
    if (!e) e = sbx_safe_replace(dirfd, "oci-layout", layout, strlen(layout), 0644, (uid_t)-1,
                                 (gid_t)-1, false);
    free(itext);
    if (e < 0) {
        err_internal(err, "cannot write the image layout: %s", strerror(-e));
        goto out;
    }
    rc = 0;
out:
    json_decref(layers);
    json_decref(mj);
    return rc;
}

int sbx_image_import(const struct sbx_layers *ls, const char *images_dir, const char *type,
                     const char *path, const char *work, const char *ref, uint64_t max_bytes,
                     struct sbx_image_rec *rec, struct err *err)
{
    memset(rec, 0, sizeof *rec);
    bool docker = !strcmp(type, "docker-archive");
    struct stat st;
    if (stat(path, &st) < 0)
        return err_invalid(err, "path", "cannot use %s: %s", path, strerror(errno));
    int rc = -1, dfd = -1;
    if (!docker && S_ISDIR(st.st_mode)) {
        dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) return err_invalid(err, "path", "cannot open %s: %s", path, strerror(errno));
        rc = sbx_image_install_oci_layout(ls, images_dir, dfd, ref, max_bytes, NULL, NULL, rec,
                                          err);
        close(dfd);
        return rc;
    }
    if (!S_ISREG(st.st_mode))
        return err_invalid(err, "path", "%s is not a %s", path,
                           docker ? "file (a docker save archive)"
                                  : "directory or tar file (an OCI image layout)");
    int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0) return err_invalid(err, "path", "cannot read %s: %s", path, strerror(errno));
    if (mkdir(work, 0700) < 0) {
        close(in);
        return err_internal(err, "cannot create %s: %s", work, strerror(errno));
    }
    dfd = open(work, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        err_internal(err, "cannot open %s: %s", work, strerror(errno));
        goto out;
    }
    if (sbx_archive_unpack(dfd, in, max_bytes, docker ? "the docker archive" : "the OCI layout tar",
                           err) < 0)
        goto out;
    struct stat ls_st;
    bool is_layout = fstatat(dfd, "oci-layout", &ls_st, AT_SYMLINK_NOFOLLOW) == 0 &&
                     fstatat(dfd, "index.json", &ls_st, AT_SYMLINK_NOFOLLOW) == 0;
    if (docker && !is_layout && docker_to_oci(dfd, ref, err) < 0) goto out;
    rc = sbx_image_install_oci_layout(ls, images_dir, dfd, ref, max_bytes, NULL, NULL, rec, err);
out:
    if (dfd >= 0) close(dfd);
    close(in);
    sbx_image_remove_tree(work);
    return rc;
}
