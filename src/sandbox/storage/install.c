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
