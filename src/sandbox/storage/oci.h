/*
 * oci.h - the JSON documents of OCI images and Docker v2 images, parsed and checked.
 *
 * Pure: no I/O. Every source of an image (an OCI image layout on disk, a `docker
 * save` archive, a registry pull) ends as an OCI image layout directory that
 * sbx_image_install_oci_layout (layers.h) reads with these parsers, so the rules
 * live in one place:
 *   - an image index (OCI index or Docker manifest list) names manifests per
 *     platform; sbx_oci_select picks linux/amd64 (a manifest without a platform is
 *     taken when it is the only one);
 *   - a manifest (OCI or Docker schema 2) names a config blob and layer blobs;
 *   - the config gives env, working dir, user, cmd, entrypoint and the diff_ids
 *     (one per layer, sha256 of the uncompressed tar).
 * Inputs are hostile: sizes are bounded (SBX_OCI_DOC_MAX bytes per document,
 * SBX_OCI_LAYERS_MAX layers, SBX_OCI_ENV_MAX env entries ...), digests must be
 * "sha256:<64 lowercase hex>", media types must be known ones. Errors are 400
 * "invalid_image" naming the document and field. Strings are heap copies owned by the
 * struct, freed by the matching _fini.
 */
#ifndef REBUNO_SANDBOX_OCI_H
#define REBUNO_SANDBOX_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_OCI_DOC_MAX (4u << 20)   /* bytes of one index, manifest or config */
#define SBX_OCI_LAYERS_MAX 128       /* layers of one image (overlay takes 500) */
#define SBX_OCI_INDEX_MAX 256        /* manifests of one index */
#define SBX_OCI_ENV_MAX 256          /* Env entries (each at most 32 KiB) */
#define SBX_OCI_ARGS_MAX 256         /* Cmd / Entrypoint words */
#define SBX_OCI_DIGEST_LEN 71        /* "sha256:" + 64 hex */

/* Media types (Docker's and OCI's). */
#define SBX_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define SBX_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define SBX_MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define SBX_MT_OCI_LAYER "application/vnd.oci.image.layer.v1.tar"
#define SBX_MT_OCI_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define SBX_MT_OCI_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define SBX_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define SBX_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define SBX_MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"
#define SBX_MT_DOCKER_LAYER "application/vnd.docker.image.rootfs.diff.tar.gzip"
#define SBX_MT_DOCKER_LAYER_TAR "application/vnd.docker.image.rootfs.diff.tar"

enum sbx_oci_kind {
    SBX_OCI_UNKNOWN = 0,
    SBX_OCI_INDEX,      /* OCI index or Docker manifest list */
    SBX_OCI_MANIFEST,   /* OCI manifest or Docker schema 2 manifest */
    SBX_OCI_CONFIG,
    SBX_OCI_LAYER_TAR,  /* uncompressed tar */
    SBX_OCI_LAYER_GZIP,
    SBX_OCI_LAYER_ZSTD,
};

/* What a media type is (NULL or unknown: SBX_OCI_UNKNOWN). */
enum sbx_oci_kind sbx_oci_media_kind(const char *media_type);
/* Whether s is "sha256:<64 lowercase hex>". */
bool sbx_oci_digest_ok(const char *s);

struct sbx_oci_desc {
    char *media_type;
    char digest[SBX_OCI_DIGEST_LEN + 1];
    int64_t size;            /* >= 0 */
    char *os, *arch, *variant; /* platform (index entries; NULL when absent) */
    char *ref_name;          /* annotation org.opencontainers.image.ref.name, or NULL */
};

struct sbx_oci_index {
    struct sbx_oci_desc *manifests;
    size_t n;
};

struct sbx_oci_manifest {
    char *media_type; /* the document's own, or NULL when it names none */
    struct sbx_oci_desc config;
    struct sbx_oci_desc *layers; /* bottom first, as in the document */
    size_t nlayers;
};

struct sbx_oci_config {
    char **env;        /* "K=V" */
    size_t nenv;
    char **cmd, **entrypoint;
    size_t ncmd, nentrypoint;
    char *workdir, *user; /* NULL when absent or empty */
    char *os, *arch;
    char (*diff_ids)[SBX_OCI_DIGEST_LEN + 1];
    size_t ndiff_ids;
};

/* Parse an index (what: the document's name for errors). 0 or -1 with err. */
int sbx_oci_parse_index(const char *buf, size_t len, const char *what, struct sbx_oci_index *ix,
                        struct err *err);
void sbx_oci_index_fini(struct sbx_oci_index *ix);
/* The entry for os/arch ("linux"/"amd64"): its position, or -1 with err (404
 * "platform_not_found" listing the platforms the index has). */
int sbx_oci_select(const struct sbx_oci_index *ix, const char *os, const char *arch,
                   struct err *err);

/* Parse a manifest; its layers must have layer media types, its config a config type. */
int sbx_oci_parse_manifest(const char *buf, size_t len, const char *what,
                           struct sbx_oci_manifest *m, struct err *err);
void sbx_oci_manifest_fini(struct sbx_oci_manifest *m);

/* Whether buf is an index or a manifest (by mediaType, else by its members). */
enum sbx_oci_kind sbx_oci_doc_kind(const char *buf, size_t len);

/* Parse an image config. */
int sbx_oci_parse_config(const char *buf, size_t len, const char *what, struct sbx_oci_config *c,
                         struct err *err);
void sbx_oci_config_fini(struct sbx_oci_config *c);

/*
 * Image references: [registry/]repository[:tag][@sha256:hex]. The registry is the
 * first component when it has a '.' or ':' or is "localhost" (else "docker.io", whose
 * one-component repositories get "library/"); repository components are lowercase
 * [a-z0-9] runs joined by '.', '_', "__" or '-'; a tag is [A-Za-z0-9_][A-Za-z0-9_.-]*
 * (at most 128); without tag and digest the tag is "latest". canonical is the full
 * form ("docker.io/library/alpine:latest"), name the part before ':' / '@'.
 */
struct sbx_oci_ref {
    char registry[256], repository[256], tag[129];
    char digest[SBX_OCI_DIGEST_LEN + 1]; /* "" when none */
    char name[520];                      /* registry/repository */
    char canonical[740];
};
/* 0 or -1 with err (400 validation_error, field "image"). */
int sbx_oci_ref_parse(const char *s, struct sbx_oci_ref *r, struct err *err);

#endif
