/*
 * oci.c - parse and check OCI / Docker v2 image documents (see oci.h).
 *
 * jansson parses with JSON_REJECT_DUPLICATES; every field read is type-checked and
 * bounded before it is copied out.
 */
#include "sandbox/storage/oci.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define OCI_STR_MAX (32u << 10)

enum sbx_oci_kind sbx_oci_media_kind(const char *mt)
{
    if (!mt) return SBX_OCI_UNKNOWN;
    static const struct {
        const char *mt;
        enum sbx_oci_kind k;
    } t[] = {
        {SBX_MT_OCI_INDEX, SBX_OCI_INDEX},
        {SBX_MT_DOCKER_LIST, SBX_OCI_INDEX},
        {SBX_MT_OCI_MANIFEST, SBX_OCI_MANIFEST},
        {SBX_MT_DOCKER_MANIFEST, SBX_OCI_MANIFEST},
        {SBX_MT_OCI_CONFIG, SBX_OCI_CONFIG},
        {SBX_MT_DOCKER_CONFIG, SBX_OCI_CONFIG},
        {SBX_MT_OCI_LAYER, SBX_OCI_LAYER_TAR},
        {SBX_MT_DOCKER_LAYER_TAR, SBX_OCI_LAYER_TAR},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar", SBX_OCI_LAYER_TAR},
        {SBX_MT_OCI_LAYER_GZIP, SBX_OCI_LAYER_GZIP},
        {SBX_MT_DOCKER_LAYER, SBX_OCI_LAYER_GZIP},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", SBX_OCI_LAYER_GZIP},
        {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", SBX_OCI_LAYER_GZIP},
        {SBX_MT_OCI_LAYER_ZSTD, SBX_OCI_LAYER_ZSTD},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", SBX_OCI_LAYER_ZSTD},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(mt, t[i].mt)) return t[i].k;
    return SBX_OCI_UNKNOWN;
}

bool sbx_oci_digest_ok(const char *s)
{
    if (!s || strncmp(s, "sha256:", 7) != 0) return false;
    size_t n = 0;
    for (const char *h = s + 7; h[n]; n++)
        if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f'))) return false;
    return n == 64;
}

static json_t *load(const char *buf, size_t len, const char *what, struct err *err)
{
    if (len > SBX_OCI_DOC_MAX) {
        err_set(err, 400, "invalid_image", "", "%s is larger than %u bytes", what,
                SBX_OCI_DOC_MAX);
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        err_set(err, 400, "invalid_image", "", "%s is not a JSON object%s%s", what,
                o ? "" : ": ", o ? "" : je.text);
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A bounded string member, or NULL (absent or null). -1 with err when of another type. */
static int str_of(json_t *o, const char *key, const char *what, const char **out,
                  struct err *err)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || json_string_length(v) > OCI_STR_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
        return err_set(err, 400, "invalid_image", key, "%s: %s must be a string", what, key);
    *out = json_string_value(v);
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s && *s ? xstrdup(s) : NULL;
}

static void desc_fini(struct sbx_oci_desc *d)
{
    free(d->media_type);
    free(d->os);
    free(d->arch);
    free(d->variant);
    free(d->ref_name);
    memset(d, 0, sizeof *d);
}

static int desc_parse(json_t *o, const char *what, struct sbx_oci_desc *d, struct err *err)
{
    memset(d, 0, sizeof *d);
    if (!json_is_object(o))
        return err_set(err, 400, "invalid_image", "", "%s is not an object", what);
    const char *mt, *dg;
    if (str_of(o, "mediaType", what, &mt, err) < 0 || str_of(o, "digest", what, &dg, err) < 0)
        return -1;
    if (!sbx_oci_digest_ok(dg))
        return err_set(err, 400, "invalid_image", "digest",
                       "%s: digest must be \"sha256:<64 lowercase hex>\"", what);
    json_t *sz = json_object_get(o, "size");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        return err_set(err, 400, "invalid_image", "size",
                       "%s: size must be a non-negative integer", what);
    snprintf(d->digest, sizeof d->digest, "%s", dg);
    d->size = json_integer_value(sz);
    d->media_type = dup_or_null(mt);
    json_t *p = json_object_get(o, "platform");
    if (json_is_object(p)) {
        const char *os, *arch, *var;
        if (str_of(p, "os", what, &os, err) < 0 || str_of(p, "architecture", what, &arch, err) < 0 ||
            str_of(p, "variant", what, &var, err) < 0) {
            desc_fini(d);
            return -1;
        }
        d->os = dup_or_null(os);
        d->arch = dup_or_null(arch);
        d->variant = dup_or_null(var);
    }
    json_t *an = json_object_get(o, "annotations");
    if (json_is_object(an)) {
        const char *rn;
        if (str_of(an, "org.opencontainers.image.ref.name", what, &rn, err) < 0) {
            desc_fini(d);
            return -1;
        }
        d->ref_name = dup_or_null(rn);
    }
    return 0;
}

enum sbx_oci_kind sbx_oci_doc_kind(const char *buf, size_t len)
{
    struct err e = ERR_INIT;
    json_t *o = load(buf, len, "document", &e);
    if (!o) return SBX_OCI_UNKNOWN;
    enum sbx_oci_kind k = sbx_oci_media_kind(json_string_value(json_object_get(o, "mediaType")));
    if (k == SBX_OCI_UNKNOWN) {
        if (json_is_array(json_object_get(o, "manifests"))) k = SBX_OCI_INDEX;
        else if (json_is_array(json_object_get(o, "layers"))) k = SBX_OCI_MANIFEST;
    }
    json_decref(o);
    return k == SBX_OCI_INDEX || k == SBX_OCI_MANIFEST ? k : SBX_OCI_UNKNOWN;
}

int sbx_oci_parse_index(const char *buf, size_t len, const char *what, struct sbx_oci_index *ix,
                        struct err *err)
{
    memset(ix, 0, sizeof *ix);
    json_t *o = load(buf, len, what, err);
    if (!o) return -1;
    const char *mt;
    int rc = -1;
    json_t *arr = json_object_get(o, "manifests");
    if (str_of(o, "mediaType", what, &mt, err) < 0) goto out;
    if (mt && sbx_oci_media_kind(mt) != SBX_OCI_INDEX) {
        err_set(err, 400, "invalid_image", "mediaType", "%s: media type %.100s is not an index",
                what, mt);
        goto out;
    }
    if (!json_is_array(arr)) {
        err_set(err, 400, "invalid_image", "manifests", "%s: manifests must be an array", what);
        goto out;
    }
    if (json_array_size(arr) > SBX_OCI_INDEX_MAX) {
        err_set(err, 400, "invalid_image", "manifests", "%s: more than %d manifests", what,
                SBX_OCI_INDEX_MAX);
        goto out;
    }
    ix->manifests = xcalloc(json_array_size(arr) + 1, sizeof *ix->manifests);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        if (desc_parse(json_array_get(arr, i), what, &ix->manifests[i], err) < 0) goto out;
        ix->n++;
    }
    rc = 0;
out:
    json_decref(o);
    if (rc < 0) sbx_oci_index_fini(ix);
    return rc;
}

void sbx_oci_index_fini(struct sbx_oci_index *ix)
{
    for (size_t i = 0; i < ix->n; i++) desc_fini(&ix->manifests[i]);
    free(ix->manifests);
    memset(ix, 0, sizeof *ix);
}

int sbx_oci_select(const struct sbx_oci_index *ix, const char *os, const char *arch,
                   struct err *err)
{
    for (size_t i = 0; i < ix->n; i++) {
        const struct sbx_oci_desc *d = &ix->manifests[i];
        if (d->os && d->arch && !strcmp(d->os, os) && !strcmp(d->arch, arch)) return (int)i;
    }
    if (ix->n == 1 && !ix->manifests[0].os && !ix->manifests[0].arch) return 0;
    char have[256] = "";
    size_t w = 0;
    for (size_t i = 0; i < ix->n && w < sizeof have - 40; i++) {
        const struct sbx_oci_desc *d = &ix->manifests[i];
        int n = snprintf(have + w, sizeof have - w, "%s%.16s/%.16s", w ? ", " : "",
                         d->os ? d->os : "?", d->arch ? d->arch : "?");
        if (n > 0) w += (size_t)n;
    }
    return err_set(err, 404, "platform_not_found", "",
                   "the image has no %s/%s manifest (it has: %s)", os, arch,
                   ix->n ? have : "none");
}

int sbx_oci_parse_manifest(const char *buf, size_t len, const char *what,
                           struct sbx_oci_manifest *m, struct err *err)
{
    memset(m, 0, sizeof *m);
    json_t *o = load(buf, len, what, err);
    if (!o) return -1;
    int rc = -1;
    const char *mt;
    if (str_of(o, "mediaType", what, &mt, err) < 0) goto out;
    if (mt && sbx_oci_media_kind(mt) != SBX_OCI_MANIFEST) {
        err_set(err, 400, "invalid_image", "mediaType",
                "%s: media type %.100s is not an image manifest", what, mt);
        goto out;
    }
    json_t *sv = json_object_get(o, "schemaVersion");
    if (!json_is_integer(sv) || json_integer_value(sv) != 2) {
        err_set(err, 400, "invalid_image", "schemaVersion", "%s: schemaVersion must be 2", what);
        goto out;
    }
    m->media_type = dup_or_null(mt);
    char w2[160];
    snprintf(w2, sizeof w2, "%s config", what);
    if (desc_parse(json_object_get(o, "config"), w2, &m->config, err) < 0) goto out;
    if (m->config.media_type && sbx_oci_media_kind(m->config.media_type) != SBX_OCI_CONFIG) {
        err_set(err, 400, "invalid_image", "config.mediaType",
                "%s: config media type %.100s is not an image config", what,
                m->config.media_type);
        goto out;
    }
    json_t *arr = json_object_get(o, "layers");
    if (!json_is_array(arr)) {
        err_set(err, 400, "invalid_image", "layers", "%s: layers must be an array", what);
        goto out;
    }
    if (json_array_size(arr) > SBX_OCI_LAYERS_MAX) {
        err_set(err, 400, "invalid_image", "layers", "%s: more than %d layers", what,
                SBX_OCI_LAYERS_MAX);
        goto out;
    }
    m->layers = xcalloc(json_array_size(arr) + 1, sizeof *m->layers);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        snprintf(w2, sizeof w2, "%s layer %zu", what, i);
        if (desc_parse(json_array_get(arr, i), w2, &m->layers[i], err) < 0) goto out;
        m->nlayers++;
        enum sbx_oci_kind k = sbx_oci_media_kind(m->layers[i].media_type);
        if (k != SBX_OCI_LAYER_TAR && k != SBX_OCI_LAYER_GZIP && k != SBX_OCI_LAYER_ZSTD) {
            err_set(err, 400, "invalid_image", "layers.mediaType",
                    "%s: layer media type %.100s is not supported (tar, tar+gzip, tar+zstd)",
                    w2, m->layers[i].media_type ? m->layers[i].media_type : "(none)");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(o);
    if (rc < 0) sbx_oci_manifest_fini(m);
    return rc;
}

void sbx_oci_manifest_fini(struct sbx_oci_manifest *m)
{
    free(m->media_type);
    desc_fini(&m->config);
    for (size_t i = 0; i < m->nlayers; i++) desc_fini(&m->layers[i]);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

/* A string array member into *out (NULL when absent or null). */
static int strv_of(json_t *o, const char *key, size_t max, const char *what, char ***out,
                   size_t *n, struct err *err)
{
    *out = NULL;
    *n = 0;
    json_t *a = json_object_get(o, key);
    if (!a || json_is_null(a)) return 0;
    if (!json_is_array(a) || json_array_size(a) > max)
        return err_set(err, 400, "invalid_image", key, "%s: %s must be an array of at most %zu "
                       "strings", what, key, max);
    *out = xcalloc(json_array_size(a) + 1, sizeof **out);
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_string(v) || json_string_length(v) > OCI_STR_MAX ||
            strlen(json_string_value(v)) != json_string_length(v))
            return err_set(err, 400, "invalid_image", key, "%s: %s[%zu] must be a string", what,
                           key, i);
        (*out)[(*n)++] = xstrdup(json_string_value(v));
    }
    return 0;
}

int sbx_oci_parse_config(const char *buf, size_t len, const char *what, struct sbx_oci_config *c,
                         struct err *err)
{
    memset(c, 0, sizeof *c);
    json_t *o = load(buf, len, what, err);
    if (!o) return -1;
    int rc = -1;
    const char *os, *arch;
    if (str_of(o, "os", what, &os, err) < 0 || str_of(o, "architecture", what, &arch, err) < 0)
        goto out;
    c->os = dup_or_null(os);
    c->arch = dup_or_null(arch);
    json_t *cf = json_object_get(o, "config");
    if (cf && !json_is_null(cf)) {
        if (!json_is_object(cf)) {
            err_set(err, 400, "invalid_image", "config", "%s: config must be an object", what);
            goto out;
        }
        const char *wd, *user;
        if (strv_of(cf, "Env", SBX_OCI_ENV_MAX, what, &c->env, &c->nenv, err) < 0 ||
            strv_of(cf, "Cmd", SBX_OCI_ARGS_MAX, what, &c->cmd, &c->ncmd, err) < 0 ||
            strv_of(cf, "Entrypoint", SBX_OCI_ARGS_MAX, what, &c->entrypoint, &c->nentrypoint,
                    err) < 0 ||
            str_of(cf, "WorkingDir", what, &wd, err) < 0 || str_of(cf, "User", what, &user, err) < 0)
            goto out;
        for (size_t i = 0; i < c->nenv; i++)
            if (!strchr(c->env[i], '=') || c->env[i][0] == '=') {
                err_set(err, 400, "invalid_image", "Env", "%s: Env[%zu] is not NAME=value", what,
                        i);
                goto out;
            }
        c->workdir = dup_or_null(wd);
        c->user = dup_or_null(user);
    }
    json_t *rf = json_object_get(o, "rootfs");
    json_t *ids = json_is_object(rf) ? json_object_get(rf, "diff_ids") : NULL;
    if (ids) {
        if (!json_is_array(ids) || json_array_size(ids) > SBX_OCI_LAYERS_MAX) {
            err_set(err, 400, "invalid_image", "rootfs.diff_ids",
                    "%s: rootfs.diff_ids must be an array of at most %d digests", what,
                    SBX_OCI_LAYERS_MAX);
            goto out;
        }
        c->diff_ids = xcalloc(json_array_size(ids) + 1, sizeof *c->diff_ids);
        for (size_t i = 0; i < json_array_size(ids); i++) {
            const char *s = json_string_value(json_array_get(ids, i));
            if (!sbx_oci_digest_ok(s)) {
                err_set(err, 400, "invalid_image", "rootfs.diff_ids",
                        "%s: rootfs.diff_ids[%zu] is not a sha256 digest", what, i);
                goto out;
            }
            snprintf(c->diff_ids[c->ndiff_ids++], SBX_OCI_DIGEST_LEN + 1, "%s", s);
        }
    }
    rc = 0;
out:
    json_decref(o);
    if (rc < 0) sbx_oci_config_fini(c);
    return rc;
}

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

void sbx_oci_config_fini(struct sbx_oci_config *c)
{
    strv_free(c->env, c->nenv);
    strv_free(c->cmd, c->ncmd);
    strv_free(c->entrypoint, c->nentrypoint);
    free(c->workdir);
    free(c->user);
    free(c->os);
    free(c->arch);
    free(c->diff_ids);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------------ references */

static bool repo_component_ok(const char *c, size_t n)
{
    if (!n) return false;
    bool sep = true; /* at a start or after a separator: an alphanumeric must come */
    for (size_t i = 0; i < n; i++) {
        char ch = c[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
            sep = false;
        } else if (ch == '.' || ch == '-' || ch == '_') {
            if (sep && !(ch == '_' && i > 0 && c[i - 1] == '_')) return false;
            if (ch == '-') { /* runs of '-' are allowed */
                sep = false;
                if (i + 1 == n) return false;
                continue;
            }
            sep = true;
        } else {
            return false;
        }
    }
    return !sep;
}

static bool registry_ok(const char *c, size_t n)
{
    if (!n || n >= 256) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = c[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-' || ch == ':' || ch == '[' || ch == ']'))
            return false;
    }
    return c[0] != '.' && c[0] != '-' && c[0] != ':';
}

int sbx_oci_ref_parse(const char *s, struct sbx_oci_ref *r, struct err *err)
{
    memset(r, 0, sizeof *r);
    if (!s || !*s || strlen(s) > 500)
        return err_invalid(err, "image", "an image reference must be 1 to 500 characters");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *at = strchr(buf, '@');
    if (at) {
        *at = '\0';
        if (!sbx_oci_digest_ok(at + 1))
            return err_invalid(err, "image",
                               "image reference %.200s: the part after @ must be sha256:<64 "
                               "lowercase hex>",
                               s);
        snprintf(r->digest, sizeof r->digest, "%s", at + 1);
    }
    /* the tag: after the last ':' that follows the last '/' */
    char *slash = strrchr(buf, '/');
    char *colon = strrchr(slash ? slash : buf, ':');
    if (colon) {
        *colon = '\0';
        const char *t = colon + 1;
        size_t n = strlen(t);
        bool ok = n >= 1 && n <= 128 && t[0] != '.' && t[0] != '-';
        for (size_t i = 0; ok && i < n; i++)
            ok = (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
                 (t[i] >= '0' && t[i] <= '9') || t[i] == '_' || t[i] == '.' || t[i] == '-';
        if (!ok)
            return err_invalid(err, "image", "image reference %.200s: tag \"%.130s\" must be "
                               "[A-Za-z0-9_.-], at most 128", s, t);
        snprintf(r->tag, sizeof r->tag, "%s", t);
    }
    const char *repo = buf;
    char *first = strchr(buf, '/');
    if (first && (memchr(buf, '.', (size_t)(first - buf)) || memchr(buf, ':', (size_t)(first - buf)) ||
                  (first - buf == 9 && !strncmp(buf, "localhost", 9)))) {
        if (!registry_ok(buf, (size_t)(first - buf)))
            return err_invalid(err, "image", "image reference %.200s: bad registry name", s);
        snprintf(r->registry, sizeof r->registry, "%.*s", (int)(first - buf), buf);
        repo = first + 1;
    } else {
        snprintf(r->registry, sizeof r->registry, "docker.io");
    }
    for (const char *c = repo;;) {
        size_t n = strcspn(c, "/");
        if (!repo_component_ok(c, n))
            return err_invalid(err, "image",
                               "image reference %.200s: repository \"%.200s\" must be lowercase "
                               "[a-z0-9] words joined by . _ - and /",
                               s, repo);
        if (!c[n]) break;
        c += n + 1;
    }
    bool lib = !strcmp(r->registry, "docker.io") && !strchr(repo, '/');
    if (snprintf(r->repository, sizeof r->repository, "%s%s", lib ? "library/" : "", repo) >=
        (int)sizeof r->repository)
        return err_invalid(err, "image", "image reference %.200s is too long", s);
    if (!r->tag[0] && !r->digest[0]) snprintf(r->tag, sizeof r->tag, "latest");
    snprintf(r->name, sizeof r->name, "%s/%s", r->registry, r->repository);
    snprintf(r->canonical, sizeof r->canonical, "%s%s%s%s%s", r->name, r->tag[0] ? ":" : "",
             r->tag, r->digest[0] ? "@" : "", r->digest);
    return 0;
}
