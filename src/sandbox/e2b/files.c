/*
 * files.c - envd's plain-HTTP file routes: GET /files?path= (the whole file: one reply
 * up to 16 MiB, a stream of 16 MiB reads beyond) and POST /files (multipart/form-data,
 * one part per file, its filename the destination; or one octet-stream body for
 * ?path=, plain or Content-Encoding: gzip, inflated here to at most SBX_FS_IO_MAX).
 * Parents are made, files truncated, everything owned by the acting user (?username=,
 * else "user"). The body is bounded by the server (16 MiB in all).
 */
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <archive.h>
#include <archive_entry.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <time.h>

#include "base/xalloc.h"
#include "sandbox/core/text.h"

#define BOUNDARY_MAX 200
#define PART_HEAD_MAX 4096

/* ---- signed URLs (uploadUrl/downloadUrl): no headers, so the sandbox is the one whose
 * access token makes the signature: "v1_" + base64(sha256("path:op:user:token[:exp]")),
 * unpadded. Tried against each sandbox's token (one hash each). */

static void signature_of(const char *path, const char *op, const char *user, const char *token,
                         const char *exp, char *out, size_t outsz)
{
    struct buf raw, b64;
    buf_init(&raw, 0);
    buf_init(&b64, 0);
    buf_append(&raw, path, strlen(path));
    buf_append(&raw, ":", 1);
    buf_append(&raw, op, strlen(op));
    buf_append(&raw, ":", 1);
    buf_append(&raw, user, strlen(user));
    buf_append(&raw, ":", 1);
    buf_append(&raw, token, strlen(token));
    if (exp) {
        buf_append(&raw, ":", 1);
        buf_append(&raw, exp, strlen(exp));
    }
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)raw.data, raw.len, md);
    OPENSSL_cleanse(raw.data, raw.len);
    sbx_base64_encode(md, sizeof md, &b64);
    while (b64.len && b64.data[b64.len - 1] == '=') b64.len--;
    snprintf(out, outsz, "v1_%.*s", (int)b64.len, b64.data);
    buf_fini(&raw);
    buf_fini(&b64);
}

/* The sandbox of r: its E2b-Sandbox-Id, or the one whose token signed the URL. NULL
 * after answering. */
static struct sbx *files_sandbox(struct e2b *e, struct http_req *r, http_handler_fn fn,
                                 const char *op)
{
    const char *sig = http_req_query(r, "signature");
    if (!sig) return e2b_envd_sandbox(e, r, fn);
    const char *path = http_req_query(r, "path"), *user = http_req_query(r, "username");
    const char *exp = http_req_query(r, "signature_expiration");
    if (exp) {
        char *end;
        long long t = strtoll(exp, &end, 10);
        if (!*exp || *end) {
            e2b_api_error(r, 400, "signature_expiration must be a unix time");
            return NULL;
        }
        if (t < (long long)time(NULL)) {
            e2b_api_error(r, 401, "signature is already expired");
            return NULL;
        }
    }
    if (strlen(sig) > 128 || (path && strlen(path) > SBX_PATH_MAX)) {
        e2b_api_error(r, 401, "invalid signature");
        return NULL;
    }
    struct sbx *found = NULL;
    for (struct sbx *s = e->d->first; s && !found; s = s->next) {
        if (s->deleting) continue;
        char tok[E2B_TOKEN_HEX + 1], want[64];
        e2b_access_token(e, s->id, tok);
        signature_of(path ? path : "", op, user ? user : "", tok, exp, want, sizeof want);
        OPENSSL_cleanse(tok, sizeof tok);
        if (strlen(want) == strlen(sig) && CRYPTO_memcmp(want, sig, strlen(sig)) == 0) found = s;
    }
    if (!found) {
        e2b_api_error(r, 401, "invalid signature");
        return NULL;
    }
    return e2b_envd_running(e, r, fn, found);
}

struct dl {
    struct e2b *e;
    char sbx_id[40];
    struct sbx_user u;
    char path[SBX_PATH_MAX + 1];
    uint64_t off;
};

static void dl_closed(struct http_req *r, void *arg)
{
    free(arg);
}

static void dl_pump(struct http_req *r, void *arg)
{
    struct dl *d = arg;
    struct sbx *s = sbx_find(d->e->d, d->sbx_id);
    for (;;) {
        if (!s || !s->sess) break; /* the sandbox went away: cut the stream short */
        struct buf out;
        buf_init(&out, SBX_FS_IO_MAX);
        uint64_t size = 0;
        struct err err = ERR_INIT;
        struct sbx_fs fs = e2b_fs(s, &d->u);
        if (sbx_fs_read(&fs, d->path, d->off, 1u << 20, &out, &size, &err) < 0 || !out.len) {
            buf_fini(&out);
            break;
        }
        int rc = http_stream_write(r, out.data, out.len);
        buf_fini(&out);
        if (rc == -EAGAIN) {
            http_sse_on_drain(r, dl_pump, d);
            return;
        }
        if (rc < 0) return; /* gone: the close callback frees d */
        d->off += out.len;
    }
    http_req_on_close(r, NULL, NULL);
    http_sse_end(r);
    free(d);
}

static void h_download(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = files_sandbox(e, r, h_download, "read");
    if (!s) return;
    struct err err = ERR_INIT;
    struct sbx_user u;
    char path[SBX_PATH_MAX + 1];
    if (e2b_user(s, r, http_req_query(r, "username"), &u, &err) < 0 ||
        e2b_path(http_req_query(r, "path"), &u, "path", path, &err) < 0) {
        e2b_api_err(r, &err);
        return;
    }
    struct sbx_fs fs = e2b_fs(s, &u);
    struct buf out;
    buf_init(&out, SBX_FS_IO_MAX);
    uint64_t size = 0;
    if (sbx_fs_read(&fs, path, 0, SBX_FS_IO_MAX, &out, &size, &err) < 0) {
        buf_fini(&out);
        e2b_api_err(r, &err);
        return;
    }
    if (size <= out.len) {
        http_reply_raw(r, 200, "application/octet-stream", out.data ? out.data : "", out.len);
        buf_fini(&out);
        return;
    }
    /* larger than one read: stream it, a read at a time */
    http_stream_start(r, "application/octet-stream");
    int rc = http_stream_write(r, out.data, out.len);
    struct dl *d = xcalloc(1, sizeof *d);
    d->e = e;
    snprintf(d->sbx_id, sizeof d->sbx_id, "%s", s->id);
    d->u = u;
    snprintf(d->path, sizeof d->path, "%s", path);
    d->off = out.len;
    buf_fini(&out);
    http_req_on_close(r, dl_closed, d);
    if (rc == 0) dl_pump(r, d);
    else if (rc == -EAGAIN) { /* cannot be: a fresh stream; send it on the next drain */
        d->off = 0;
        http_sse_on_drain(r, dl_pump, d);
    }
}

/* ------------------------------------------------------------------ uploads */

#define META_HEADER "X-Metadata-"

/* The upload's metadata: each X-Metadata-KEY header as {KEY: value} (envd 0.6.2), KEY
 * an HTTP token and the value printable ASCII, as the SDK checks, at most
 * SBX_XATTRS_MAX of them. NULL with err. */
static json_t *upload_metadata(struct http_req *r, struct err *err)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    json_t *m = json_object();
    const char *k, *v;
    size_t pl = strlen(META_HEADER);
    for (size_t i = 0; http_req_header_at(r, i, &k, &v); i++) {
        if (strncasecmp(k, META_HEADER, pl) != 0) continue;
        const char *key = k + pl;
        bool ok = *key && strspn(key, tchar) == strlen(key) && strlen(key) <= 200 &&
                  strlen(v) <= SBX_XATTR_VALUE_MAX;
        for (const char *c = v; ok && *c; c++) ok = *c >= 0x20 && *c <= 0x7e;
        if (!ok || json_object_size(m) >= SBX_XATTRS_MAX) {
            json_decref(m);
            err_invalid(err, "metadata", "metadata %.60s: at most %d keys of HTTP token "
                        "characters, values printable ASCII of at most %d bytes",
                        key, SBX_XATTRS_MAX, SBX_XATTR_VALUE_MAX);
            return NULL;
        }
        json_object_set_new(m, key, json_string(v));
    }
    return m;
}

static int write_one(struct sbx *s, const struct sbx_user *u, const char *dest, const void *data,
                     size_t len, const json_t *meta, json_t *result, struct err *err)
{
    char path[SBX_PATH_MAX + 1];
    if (e2b_path(dest, u, "path", path, err) < 0) return -1;
    struct sbx_fs fs = e2b_fs(s, u);
    struct sbx_owner own = {u->uid, u->gid};
    char *slash = strrchr(path, '/');
    if (slash && slash != path) {
        *slash = 0;
        int rc = e2b_mkdirs(&fs, path, u, err);
        *slash = '/';
        if (rc < 0) return -1;
    }
    uint64_t size;
    if (sbx_fs_write(&fs, path, 0, data, len, true, -1, &own, &size, err) < 0 ||
        sbx_fs_set_xattrs(&fs, path, E2B_XATTR_PREFIX, meta, err) < 0)
        return -1;
    const char *name = strrchr(path, '/');
    json_t *w = json_pack("{s:s, s:s, s:s}", "name", name ? name + 1 : path, "type", "file",
                          "path", path);
    if (json_object_size(meta)) json_object_set_new(w, "metadata", json_deep_copy(meta));
    json_array_append_new(result, w);
    return 0;
}

/* A gzip body (Content-Encoding: gzip) inflated into out, at most SBX_FS_IO_MAX bytes
 * (a bomb stops there): 0, or -1 with err (400 for what is no gzip stream, 413 past the
 * cap). libarchive's raw format behind its gzip filter; anything but gzip is refused. */
static int gunzip(const char *in, size_t n, struct buf *out, struct err *err)
{
    struct archive *a = archive_read_new();
    if (!a) return err_internal(err, "out of memory");
    archive_read_support_filter_gzip(a);
    archive_read_support_format_raw(a);
    archive_read_support_format_empty(a);
    struct archive_entry *ent;
    int rc = archive_read_open_memory(a, in, n);
    if (rc == ARCHIVE_OK) rc = archive_read_next_header(a, &ent);
    if ((rc != ARCHIVE_OK && rc != ARCHIVE_EOF) || archive_filter_count(a) < 2 ||
        archive_filter_code(a, 0) != ARCHIVE_FILTER_GZIP) {
        archive_read_free(a);
        return err_invalid(err, "body", "Content-Encoding: gzip, but the body is no gzip stream");
    }
    char chunk[65536];
    la_ssize_t k = 0;
    while (rc == ARCHIVE_OK && (k = archive_read_data(a, chunk, sizeof chunk)) > 0)
        if (out->len + (size_t)k > SBX_FS_IO_MAX || buf_append(out, chunk, (size_t)k) < 0) {
            archive_read_free(a);
            return err_set(err, 413, "payload_too_large", "body",
                           "the inflated upload is larger than %u bytes", SBX_FS_IO_MAX);
        }
    archive_read_free(a);
    if (k < 0) return err_invalid(err, "body", "a damaged gzip stream");
    return 0;
}

/* The boundary of a multipart/form-data Content-Type, or -1. */
static int boundary_of(const char *ct, char *out, size_t outsz)
{
    const char *b = strcasestr(ct, "boundary=");
    if (!b) return -1;
    b += 9;
    size_t n;
    if (*b == '"') {
        b++;
        const char *q = strchr(b, '"');
        if (!q) return -1;
        n = (size_t)(q - b);
    } else {
        n = strcspn(b, "; \t");
    }
    if (n == 0 || n >= outsz) return -1;
    memcpy(out, b, n);
    out[n] = 0;
    return 0;
}

/* filename="..." of a part's headers (head, n bytes), into out. */
static int part_filename(const char *head, size_t n, char *out, size_t outsz)
{
    char h[PART_HEAD_MAX + 1];
    memcpy(h, head, n);
    h[n] = 0;
    const char *f = strcasestr(h, "filename=\"");
    if (!f) return -1;
    f += 10;
    const char *q = strchr(f, '"');
    if (!q || q == f || (size_t)(q - f) >= outsz) return -1;
    memcpy(out, f, (size_t)(q - f));
    out[q - f] = 0;
    return 0;
}

static int upload_multipart(struct sbx *s, const struct sbx_user *u, const char *ct,
                            const char *body, size_t len, const char *qpath, const json_t *meta,
                            json_t *result, struct err *err)
{
    char bnd[BOUNDARY_MAX + 8];
    char b[BOUNDARY_MAX];
    if (boundary_of(ct, b, sizeof b) < 0)
        return err_invalid(err, "Content-Type", "multipart/form-data needs a boundary");
    int bl = snprintf(bnd, sizeof bnd, "\r\n--%s", b);
    /* the first delimiter may come without the CRLF before it */
    const char *p = body, *end = body + len;
    if (len >= (size_t)bl - 2 && !memcmp(p, bnd + 2, (size_t)bl - 2))
        p += bl - 2;
    else {
        const char *f = memmem(p, len, bnd, (size_t)bl);
        if (!f) return err_invalid(err, "body", "no multipart delimiter in the body");
        p = f + bl;
    }
    int files = 0;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') break; /* the close delimiter */
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return err_invalid(err, "body", "a malformed multipart delimiter");
        p += 2;
        const char *he = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!he || he - p > PART_HEAD_MAX)
            return err_invalid(err, "body", "a multipart part without its headers");
        char dest[SBX_PATH_MAX + 1];
        bool named = part_filename(p, (size_t)(he - p), dest, sizeof dest) == 0;
        const char *data = he + 4;
        const char *de = memmem(data, (size_t)(end - data), bnd, (size_t)bl);
        if (!de) return err_invalid(err, "body", "a multipart part that never ends");
        /* one file with ?path= is written there; several go to their filenames */
        const char *target = qpath && *qpath ? qpath : named ? dest : NULL;
        if (!target)
            return err_invalid(err, "path", "each part needs a filename (its destination), or "
                                            "the request a ?path=");
        if (write_one(s, u, target, data, (size_t)(de - data), meta, result, err) < 0) return -1;
        files++;
        p = de + bl;
    }
    if (!files) return err_invalid(err, "body", "the multipart body holds no file");
    return 0;
}

static void h_upload(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    struct sbx *s = files_sandbox(e, r, h_upload, "write");
    if (!s) return;
    struct err err = ERR_INIT;
    struct sbx_user u;
    if (e2b_user(s, r, http_req_query(r, "username"), &u, &err) < 0) {
        e2b_api_err(r, &err);
        return;
    }
    const char *ct = http_req_header(r, "Content-Type");
    const char *qpath = http_req_query(r, "path");
    const char *enc = http_req_header(r, "Content-Encoding");
    size_t len;
    const char *body = http_req_body(r, &len);
    json_t *result = json_array();
    struct buf plain;
    buf_init(&plain, 0);
    json_t *meta = upload_metadata(r, &err);
    int rc = meta ? 0 : -1;
    if (rc == 0 && enc && !strcasecmp(enc, "gzip")) {
        if ((rc = gunzip(body ? body : "", len, &plain, &err)) == 0) {
            body = plain.data;
            len = plain.len;
        }
    } else if (rc == 0 && enc && strcasecmp(enc, "identity") != 0) {
        rc = err_set(&err, 415, "unsupported_encoding", "Content-Encoding",
                     "Content-Encoding %.40s is not supported here: send gzip or plain", enc);
    }
    if (rc == 0 && ct && !strncasecmp(ct, "multipart/form-data", 19))
        rc = upload_multipart(s, &u, ct, body ? body : "", len, qpath, meta, result, &err);
    else if (rc == 0 && qpath && *qpath)
        rc = write_one(s, &u, qpath, body ? body : "", len, meta, result, &err);
    else if (rc == 0)
        rc = err_invalid(&err, "path", "an octet-stream upload needs ?path=");
    buf_fini(&plain);
    json_decref(meta);
    if (rc < 0) {
        json_decref(result);
        e2b_api_err(r, &err);
        return;
    }
    http_reply_json(r, 200, result);
}

void e2b_files_routes(struct e2b *e)
{
    http_route(e->http, "GET", "/files", h_download, e);
    http_route(e->http, "POST", "/files", h_upload, e);
}
