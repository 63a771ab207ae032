/*
 * registry.h - a client of the OCI distribution API (v2) on libcurl: pulls an
 * image's manifest, config and layers into a shared content-addressed blob store.
 *
 * References are oci.h's (sbx_oci_ref_parse: `name`, `name:tag`, `name@sha256:<hex>`,
 * `host[:port]/path/name:tag`, Docker Hub and `library/` by default); Docker Hub is
 * reached at registry-1.docker.io. With a digest, the digest is what is fetched.
 *
 * A pull (reg_pull_run, blocking: it runs on a worker thread, never on the loop):
 * GET /v2/<name>/manifests/<tag|digest> with Accept for the OCI and Docker v2 manifest
 * and index/list types (parsed and checked by oci.h, the one manifest model); an index
 * picks linux/amd64; then every blob the manifest names
 * (config, layers) is fetched unless the store already has it. Each blob streams into
 * <store>/tmp/, hashed (SHA-256) as it arrives, and is renamed to <store>/sha256/<hex>
 * only when its digest and size match: a blob in the store is always complete and
 * verified, and is never downloaded again. Manifests (and the index) are kept there too,
 * so the store is the `blobs/` of an OCI image layout (reg_layout_write).
 *
 * Auth: a 401 with `WWW-Authenticate: Bearer realm=,service=,scope=` is answered by a
 * token from the realm (with the basic credentials of the daemon's docker-style
 * auth.json for that registry, when it has any), then the request is retried with it;
 * `Basic` challenges get the credentials directly. Credentials come only from the
 * daemon's configuration. Redirects (blob storage) are followed, http/https only;
 * libcurl does not send our Authorization header to another host.
 * Limits: a manifest or index is at most REG_MANIFEST_MAX bytes; a blob at most its
 * declared size; a transfer below 1 KiB/s for stall_sec fails; errors name the registry
 * and the HTTP status (401 -> 401 registry_unauthorized, 404 -> 404 image_not_found,
 * 429/5xx -> 502 registry_error, a stall -> 504 registry_timeout, full disk -> 507).
 *
 * Concurrency: two pulls that need the same blob at the same time do one download; the
 * other waits for it (struct reg_client holds the set of blobs in flight).
 */
#ifndef REBUNO_SANDBOX_REGISTRY_H
#define REBUNO_SANDBOX_REGISTRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "sandbox/storage/oci.h"

#define REG_MANIFEST_MAX (4 << 20)
#define REG_LAYERS_MAX 128
#define REG_HOST_MAX 255
#define REG_REPO_MAX 255
#define REG_REF_MAX 739 /* a canonical reference (struct sbx_oci_ref) */
#define REG_DOCKER_HUB "docker.io"

struct reg_opts {
    const char *auth_file;               /* docker-style auth.json, or NULL */
    const char *ca_file;                 /* extra PEM CA trusted for registries, or NULL */
    const char *const *plain_http;       /* "host[:port]" reached over http:// */
    int n_plain_http;
    int stall_sec;                       /* below 1 KiB/s this long: fail (0: 30) */
    int connect_timeout_sec;             /* 0: 15 */
    /* Whether a layer is already unpacked (any thread; NULL: never): such a layer is
     * neither downloaded nor linked into a layout, so the blob store may drop layer
     * blobs once they are unpacked (reg_drop_layer_blobs). */
    bool (*have_layer)(void *arg, const char *digest);
    void *have_arg;
};

struct reg_client;

/* store_dir: the blob store (sha256/ and tmp/ are made beneath it). Reads the auth file
 * now (a file that cannot be read or parsed is an error naming it). Loop thread. */
struct reg_client *reg_client_new(const struct reg_opts *o, const char *store_dir,
                                  struct err *err);
void reg_client_free(struct reg_client *c);
/* Bytes downloaded (blob and manifest bodies) since the client was made, and blob GETs
 * started: counters for tests and benches (any thread). */
int64_t reg_client_bytes(struct reg_client *c);
int64_t reg_client_blob_gets(struct reg_client *c);
/* The path of a stored blob ("<store>/sha256/<hex>") into out. */
void reg_blob_path(struct reg_client *c, const char *digest, char *out, size_t outsz);

/* A blob a manifest names. total and done are read by the loop while a worker fills
 * them. */
struct reg_blob {
    char digest[72];
    char media_type[128];
    int64_t size;
    _Atomic int64_t done; /* bytes of it in the store or received so far */
    _Atomic bool cached;  /* it was in the store already (or another pull fetched it) */
};

enum reg_phase { REG_RESOLVING, REG_FETCHING, REG_DONE };

struct reg_pull {
    struct sbx_oci_ref ref; /* parsed by sbx_oci_ref_parse (oci.h) */
    /* filled by reg_pull_run */
    char index_digest[72];    /* the index the reference named, or "" */
    char manifest_digest[72]; /* the linux/amd64 image manifest */
    char manifest_type[128];
    int64_t manifest_size;
    struct reg_blob config;
    struct reg_blob layers[REG_LAYERS_MAX];
    _Atomic int nlayers;       /* published once layers[] and config are filled */
    _Atomic int phase;         /* enum reg_phase */
    _Atomic int64_t fetched;   /* bytes this pull downloaded itself */
    _Atomic bool cancel;       /* set by the loop: stop at the next chunk */
    int64_t download_ms;       /* how long reg_pull_run took (when it succeeded) */
};

/* Run a whole pull (blocking; a worker thread). 0, or -1 with err. */
int reg_pull_run(struct reg_client *c, struct reg_pull *p, struct err *err);

/* After the pull's image is installed: remove its layer blobs from the store (the layer
 * store holds them unpacked; manifests and config stay). A layout that linked one
 * keeps its own link. */
void reg_drop_layer_blobs(struct reg_client *c, const struct reg_pull *p);

/* Write an OCI image layout at dir (which must not exist; made here): `oci-layout`,
 * `index.json` naming the pulled manifest (annotated with the reference), and
 * `blobs/sha256/` holding hard links to the store's blobs of this image (a copy when
 * the store is on another file system; none for a layer already unpacked, which the
 * install skips). 0, or -1 with err. */
int reg_layout_write(struct reg_client *c, const struct reg_pull *p, const char *dir,
                     struct err *err);

/* Parsing helpers (exposed for tests/unit/test_sandbox_registry.c). */
/* The value of key="..." (or key=token) among a WWW-Authenticate challenge's parameters
 * (after the scheme), quotes and backslash escapes undone; false when absent. out is
 * truncated to outsz. */
bool reg_challenge_param(const char *params, const char *key, char *out, size_t outsz);
/* The registry an auth.json key names: "https://index.docker.io/v1/" -> "docker.io",
 * "http://host:port/path" -> "host:port". */
void reg_auth_key_host(const char *key, char *out, size_t outsz);

#endif
