/*
 * layers.h - the content-addressed layer store, and installing an image from an OCI
 * image layout.
 *
 * A layer is one image layer's tar, unpacked once into <layers>/<sha256 hex>/, the hex
 * being the digest of the blob as delivered (compressed or not). sandboxd's <layers> is
 * <state>/store/layers: in the sandbox store, so images and sandboxes share one space
 * (and one 507), on btrfs when the store is. Unpacked
 * layers are read-only lower directories of sessions' overlays, shared by every image
 * that has them: a layer present is never unpacked (or downloaded) again.
 *
 * Unpacking (libarchive; plain tar, gzip, zstd): the blob's SHA-256 is computed over
 * the very bytes libarchive reads, and the layer is refused unless it matches the
 * digest. Every entry is made beneath the layer's directory descriptor, never through
 * a symlink (safefs.h: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). Refused, with 400
 * "invalid_image": absolute names, ".." components, device nodes other than the
 * whiteout form, fifos and sockets, hard links whose target is not an earlier regular
 * file of the same layer. OCI whiteouts become overlayfs ones, so the kernel applies
 * them across the lowerdir stack: ".wh.NAME" -> a 0/0 character device NAME,
 * ".wh..wh..opq" -> trusted.overlay.opaque=y on its directory. Files are owned by host
 * root's range as the tar says (uid/gid of the tar, which the session's idmapped mount
 * shifts into the sandbox's range); setuid/setgid bits are kept (sessions mount
 * nosuid), modes, mtimes and symlinks too. A layer is unpacked into
 * <state>/layers/.tmp-<hex>-<pid>-<n> and renamed into place when complete, so a
 * crash or an error never leaves a partial layer under its name.
 *
 * The functions here do file work only (no database, no event loop): they run on a
 * worker thread. sbx_images_commit (sandboxd_int.h) records the result on the loop.
 * All return 0 or -1 with err unless said otherwise.
 */
#ifndef REBUNO_SANDBOX_LAYERS_H
#define REBUNO_SANDBOX_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "sandbox/storage/oci.h"

struct sbx_layers {
    char *dir; /* <state>/layers, absolute */
    int dfd;   /* O_PATH descriptor of it */
};

/* Open (making it) <parent>/layers; sweep leftovers of interrupted unpacks. */
int sbx_layers_open(const char *parent, struct sbx_layers *ls, struct err *err);
void sbx_layers_close(struct sbx_layers *ls);

/* Whether the layer "sha256:<hex>" is unpacked in the store. */
bool sbx_layer_have(const struct sbx_layers *ls, const char *digest);

/* Progress of one unpack (may be NULL): called every ~1 MiB of blob read. */
typedef void (*sbx_layer_progress_fn)(void *arg, const char *digest, int64_t done, int64_t total);

struct sbx_layer_info {
    int64_t blob_bytes;     /* bytes of the blob read */
    int64_t unpacked_bytes; /* bytes of regular files written */
    bool existed;           /* the layer was there already: nothing read */
};

/*
 * Unpack the blob readable from fd (read to its end; not closed) as the layer
 * `digest`, media_type one of the layer types (oci.h; NULL: detect the compression).
 * size: the descriptor's size, -1 when unknown (checked when known). max_bytes: 0, or
 * the most bytes of files the layer may unpack to (beyond: 507 "no_space").
 * A layer already present returns at once (info->existed). A digest mismatch is 400
 * "digest_mismatch"; a full disk 507 "no_space"; both leave nothing.
 */
int sbx_layer_add_from_blob(const struct sbx_layers *ls, int fd, const char *media_type,
                            const char *digest, int64_t size, uint64_t max_bytes,
                            sbx_layer_progress_fn progress, void *parg,
                            struct sbx_layer_info *info, struct err *err);

/* Unpack the tar (plain, gzip or zstd) readable from fd into the directory dirfd, with
 * the checks of a layer (an outer archive: `docker save`, an OCI layout as a tar).
 * label names it in errors. */
int sbx_archive_unpack(int dirfd, int fd, uint64_t max_bytes, const char *label,
                       struct err *err);

/* Remove the layer (a missing one is fine). The caller knows nothing uses it. */
int sbx_layer_remove(const struct sbx_layers *ls, const char *digest);

/* The absolute directory of a layer into out. */
int sbx_layer_path(const struct sbx_layers *ls, const char *digest, char *out, size_t outsz);

/* ------------------------------------------------------------------ images */

/* An installed image, as the file work leaves it for the loop to record. */
struct sbx_image_rec {
    char digest[SBX_OCI_DIGEST_LEN + 1]; /* the manifest's digest: the image's identity */
    char *ref;                           /* "name:tag" it was imported as, or NULL */
    char (*layers)[SBX_OCI_DIGEST_LEN + 1]; /* bottom first */
    size_t nlayers;
    int64_t size_bytes;                  /* sum of the layers' blob sizes */
    char *config_json;                   /* {"env":[..],"workdir":..,"user":..,"cmd":..,
                                          *  "entrypoint":..}: what sessions apply */
    char *source_type, *source_path;     /* how it came ("oci-layout", "registry", ...) */
};
void sbx_image_rec_fini(struct sbx_image_rec *r);

/*
 * Install the image of the OCI image layout in the directory dirfd (oci-layout,
 * index.json, blobs/sha256/...): choose the manifest (ref: the index entry whose
 * org.opencontainers.image.ref.name annotation is ref's tag, else the only image, else
 * linux/amd64 through a nested index), verify and unpack each missing layer into the
 * store, and make the image's skeleton directory images_dir/<manifest hex>/ (mount
 * points and generated /etc files the layers lack: image.h), renamed into place when
 * complete. Every file of the layout is opened beneath dirfd without following
 * symlinks. ref: the reference to record ("name:tag", may be NULL). Fills *rec.
 */
int sbx_image_install_oci_layout(const struct sbx_layers *ls, const char *images_dir, int dirfd,
                                 const char *ref, uint64_t max_bytes,
                                 sbx_layer_progress_fn progress, void *parg,
                                 struct sbx_image_rec *rec, struct err *err);

/*
 * Install from a local source: type "oci-layout" (path: a layout directory, or a tar of
 * one) or "docker-archive" (a `docker save` tar, legacy or OCI form: rewritten as an OCI
 * layout whose blobs are the archive's own files). work: a path that does not exist yet,
 * where an archive is unpacked (removed afterwards). ref: as for
 * sbx_image_install_oci_layout (for a docker archive, also which RepoTags entry).
 */
int sbx_image_import(const struct sbx_layers *ls, const char *images_dir, const char *type,
                     const char *path, const char *work, const char *ref, uint64_t max_bytes,
                     struct sbx_image_rec *rec, struct err *err);

#endif
