/*
 * files.c - the Vercel-compatible file routes: fs/write (a gzip'd tar, names relative to
 * the x-cwd header, extracted by tar inside the sandbox: the core's extract operation, as
 * /v1's files/extract), fs/read (the raw bytes of one file; 404 when missing, which the
 * SDK turns into null) and fs/mkdir (one directory, not recursive, as the SDK asks).
 *
 * Every path goes through the core's normalisation and its no-symlink-following file
 * operations (storage/files.h) as the sandbox's root, the default user here. A read
 * returns at most SBX_FS_IO_MAX bytes (a larger file is 413: read it with a command).
 */
#include "sandbox/vercel/vc_int.h"

#include <stdio.h>
#include <string.h>

#include "sandbox/core/validate.h"
#include "sandbox/storage/files.h"

/* path (relative to cwd, else the session cwd) of body, normalized into out. */
static bool body_path(struct http_req *r, json_t *body, char out[SBX_PATH_MAX + 1])
{
    struct err err = ERR_INIT;
    const char *path = NULL, *cwd = NULL;
    char base[SBX_PATH_MAX + 1];
    if (sbx_json_str(body, "path", SBX_PATH_MAX, &path, &err) < 0 ||
        sbx_json_str(body, "cwd", SBX_PATH_MAX, &cwd, &err) < 0) {
        vc_reply_err(r, &err);
        return false;
    }
    if (!path) {
        http_reply_error(r, 400, "bad_request", "path", "path is required");
        return false;
    }
    if (sbx_path_normalize(cwd ? cwd : VC_CWD, "/", base, sizeof base, "cwd", &err) < 0 ||
        sbx_path_normalize(path, base, out, SBX_PATH_MAX + 1, "path", &err) < 0) {
        vc_reply_err(r, &err);
        return false;
    }
    return true;
}

/* The running session's sandbox and the body's {path, cwd} resolved; NULL: answered. */
static struct sbx *session_path(struct vc *v, struct http_req *r, http_handler_fn self,
                                char path[SBX_PATH_MAX + 1])
{
    struct sbx *s = vc_session_sbx(v, r, self);
    json_t *body;
    if (!s || !(body = vc_body(r, false))) return NULL;
    bool ok = body_path(r, body, path);
    json_decref(body);
    return ok ? s : NULL;
}

static void write_done(struct http_req *r, const char *error, const char *target, size_t bytes)
{
    if (error)
        http_reply_error(r, 400, "extract_failed", "body", "the archive could not be written: %s",
                         error);
    else
        http_reply_json(r, 200, json_object());
}

static void h_write(struct http_req *r, void *arg)
{
    struct vc *v = arg;
    struct sbx *s = vc_session_sbx(v, r, h_write);
    if (!s) return;
    size_t len;
    const char *body = http_req_body(r, &len);
    const char *xcwd = http_req_header(r, "x-cwd");
    char target[SBX_PATH_MAX + 1];
    struct err err = ERR_INIT;
    if (sbx_path_normalize(xcwd && *xcwd ? xcwd : "/", "/", target, sizeof target, "x-cwd",
                           &err) < 0) {
        vc_reply_err(r, &err);
        return;
    }
    if (len < 2 || (unsigned char)body[0] != 0x1f || (unsigned char)body[1] != 0x8b) {
        http_reply_error(r, 400, "bad_request", "body", "the body must be a gzip'd tar archive");
        return;
    }
    sbx_extract_begin(v->d, s, r, target, body, len, write_done);
}

static void h_read(struct http_req *r, void *arg)
{
    char path[SBX_PATH_MAX + 1];
    struct sbx *s = session_path(arg, r, h_read, path);
    if (!s) return;
    struct buf out;
    buf_init(&out, SBX_FS_IO_MAX);
    struct err err = ERR_INIT;
    uint64_t size = 0;
    if (sbx_fs_read(&s->sess->fs, path, 0, SBX_FS_IO_MAX, &out, &size, &err) < 0) {
        buf_fini(&out);
        vc_reply_err(r, &err);
        return;
    }
    if (size > out.len) {
        buf_fini(&out);
        http_reply_error(r, 413, "file_too_large", "path",
                         "%s has %llu bytes; this endpoint reads at most %u (use a command, or "
                         "the /v1 API's ranges)", path, (unsigned long long)size, SBX_FS_IO_MAX);
        return;
    }
    http_reply_raw(r, 200, "application/octet-stream", out.data ? out.data : "", out.len);
    buf_fini(&out);
}

static void h_mkdir(struct http_req *r, void *arg)
{
    char path[SBX_PATH_MAX + 1];
    struct sbx *s = session_path(arg, r, h_mkdir, path);
    if (!s) return;
    struct sbx_owner root = {0, 0};
    struct err err = ERR_INIT;
    if (sbx_fs_mkdir(&s->sess->fs, path, false, -1, &root, &err) < 0) {
        vc_reply_err(r, &err);
        return;
    }
    http_reply_json(r, 200, json_object());
}

void vc_file_routes(struct vc *v)
{
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/fs/write", h_write, v);
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/fs/read", h_read, v);
    http_route(v->h, "POST", "/v2/sandboxes/sessions/:sid/fs/mkdir", h_mkdir, v);
}
