/*
 * e2b.c - the E2B endpoint's wiring: its routes, the auth every request passes, the
 * sandbox and user an envd request addresses, and the observer that hands command
 * events to the process streams.
 *
 * Auth (docs/e2b.md): the control plane wants X-API-KEY = sandboxd's local token (the
 * one /v1 wants as a Bearer token), so E2B_API_KEY is that token. envd routes want
 * X-Access-Token = the sandbox's envd access token, which create and connect return
 * (envdAccessToken): HMAC-SHA256 of the sandbox id under a key made at start, so a
 * token opens one sandbox only and dies with the daemon.
 */
#include "sandbox/e2b/e2b.h"
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "net/local_auth.h"
#include "sandbox/core/text.h"
#include "sandbox/runtime/users.h"

struct sbx *e2b_api_sandbox(struct e2b *e, struct http_req *r, http_handler_fn fn)
{
    const char *id = http_req_param(r, "id");
    struct sbx *s = sbx_find(e->d, id);
    if (!s) {
        e2b_api_error(r, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return NULL;
    }
    return sbx_api_park(s, r, fn, e) ? NULL : s;
}

bool e2b_api_body(struct http_req *r, json_t **out)
{
    struct err err = ERR_INIT;
    *out = http_req_json(r, true, &err);
    if (!*out) {
        e2b_api_err(r, &err);
        return false;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        e2b_api_error(r, 400, "the body must be a JSON object");
        return false;
    }
    return true;
}

int e2b_timeout_s(const json_t *body, int64_t *out, struct err *err)
{
    json_t *v = json_object_get(body, "timeout");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > SBX_TIMEOUT_MAX_MS / 1000)
        return err_invalid(err, "timeout", "timeout must be whole seconds from 1 to %lld",
                           (long long)(SBX_TIMEOUT_MAX_MS / 1000));
    *out = json_integer_value(v);
    return 0;
}

void e2b_access_token(const struct e2b *e, const char *id, char out[E2B_TOKEN_HEX + 1])
{
    unsigned char mac[32];
    unsigned int n = sizeof mac;
    HMAC(EVP_sha256(), e->secret, sizeof e->secret, (const unsigned char *)id, strlen(id), mac,
         &n);
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[E2B_TOKEN_HEX] = 0;
}

void e2b_api_error(struct http_req *r, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "message", json_string(msg));
    http_reply_json(r, status, o);
}

void e2b_api_err(struct http_req *r, const struct err *e)
{
    int status = e->status ? e->status : 500;
    json_t *o = json_object();
    json_object_set_new(o, "code", json_integer(status));
    json_object_set_new(o, "message", json_string(e->msg));
    if (e->field[0]) json_object_set_new(o, "field", json_string(e->field)); /* ours, extra */
    http_reply_json(r, status, o);
}

static bool is_envd_path(const char *p)
{
    return !strcmp(p, "/health") || !strcmp(p, "/files") || !strncmp(p, "/process.", 9) ||
           !strncmp(p, "/filesystem.", 12);
}

static bool is_rpc_path(const char *p)
{
    return !strncmp(p, "/process.", 9) || !strncmp(p, "/filesystem.", 12);
}

static bool token_eq(const char *a, const char *b)
{
    return a && strlen(a) == strlen(b) && CRYPTO_memcmp(a, b, strlen(b)) == 0;
}

/* Before routing: control-plane calls carry the local token, envd calls their
 * sandbox's access token. */
static bool auth_filter(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    const char *path = http_req_path(r);
    if (is_envd_path(path)) {
        const char *id = http_req_header(r, "E2b-Sandbox-Id");
        const char *tok = http_req_header(r, "X-Access-Token");
        if (id && *id && strlen(id) < 64) {
            char want[E2B_TOKEN_HEX + 1];
            e2b_access_token(e, id, want);
            bool ok = token_eq(tok, want);
            OPENSSL_cleanse(want, sizeof want);
            if (ok) return true;
        }
        /* a signed /files URL carries no headers: files.c checks its signature */
        if (!strcmp(path, "/files") && http_req_query(r, "signature")) return true;
        if (is_rpc_path(path))
            cx_error(r, "unauthenticated",
                     "envd calls need E2b-Sandbox-Id and the X-Access-Token that create or "
                     "connect returned (envdAccessToken)");
        else
            e2b_api_error(r, 401,
                          "envd calls need E2b-Sandbox-Id and the X-Access-Token that create or "
                          "connect returned (envdAccessToken)");
        return false;
    }
    const struct sbxd *d = e->d;
    const char *key = http_req_header(r, "X-API-KEY");
    /* older SDKs insist on E2B's key format, "e2b_" + hex: the token with that prefix */
    if (key && !strncmp(key, "e2b_", 4)) key += 4;
    if (d->local && key && strlen(key) <= 256) {
        char bearer[272];
        snprintf(bearer, sizeof bearer, "Bearer %s", key);
        bool ok = local_auth_check(d->local, bearer);
        OPENSSL_cleanse(bearer, sizeof bearer);
        if (ok) return true;
    }
    e2b_api_error(r, 401,
                  "E2B_API_KEY must be sandboxd's local token (the \"token\" of %s): set "
                  "E2B_API_KEY to it",
                  d->local ? local_auth_path(d->local) : "its local-token file");
    return false;
}

struct sbx *e2b_envd_sandbox(struct e2b *e, struct http_req *r, http_handler_fn fn)
{
    const char *id = http_req_header(r, "E2b-Sandbox-Id");
    struct sbx *s = id ? sbx_find(e->d, id) : NULL;
    return e2b_envd_running(e, r, fn, s && !strcmp(s->id, id) ? s : NULL);
}

struct sbx *e2b_envd_running(struct e2b *e, struct http_req *r, http_handler_fn fn, struct sbx *s)
{
    bool rpc = is_rpc_path(http_req_path(r));
    if (!s) {
        /* E2B's edge answers 502 for a sandbox it does not know, on any envd route */
        json_t *o = json_object();
        json_object_set_new(o, "code", rpc ? json_string("unavailable") : json_integer(502));
        json_object_set_new(o, "message", json_string("the sandbox was not found"));
        http_reply_json(r, 502, o);
        return NULL;
    }
    if (sbx_api_park(s, r, fn, e)) return NULL;
    struct err err = ERR_INIT;
    if (sbx_ensure_running(s, NULL, &err) < 0) {
        if (rpc)
            cx_error_err(r, &err);
        else
            e2b_api_err(r, &err);
        return NULL;
    }
    return s;
}

/* The user of "Authorization: Basic base64(user:)", or NULL. */
static int basic_user(struct http_req *r, char *out, size_t outsz)
{
    const char *h = http_req_header(r, "Authorization");
    if (!h || strncasecmp(h, "Basic ", 6) != 0) return 0;
    struct buf b;
    buf_init(&b, 512);
    int rc = sbx_base64_decode(h + 6, strlen(h + 6), &b);
    if (rc < 0 || !b.len) {
        buf_fini(&b);
        return -1;
    }
    size_t n = 0;
    while (n < b.len && b.data[n] != ':') n++;
    if (n == 0 || n >= outsz) {
        buf_fini(&b);
        return -1;
    }
    memcpy(out, b.data, n);
    out[n] = 0;
    buf_fini(&b);
    return 1;
}

/* E2B's images give their default user passwordless sudo. For a sandbox that allows
 * privilege escalation (E2B-made ones do), the user made here gets it too: a sudoers
 * entry, and, where the image has none (the default image copies no host sudoers or
 * PAM configuration), a /etc/sudoers that reads /etc/sudoers.d and a PAM stack for
 * sudo (no password asked with NOPASSWD; any other rule still asks pam_unix). Nothing
 * the image has is replaced. Written as root beneath the sandbox's root (files.h). */
static const struct {
    const char *path, *text;
    int mode;
} sudo_files[] = {
    {"/etc/sudoers",
     "# made by sandboxd's E2B endpoint: the image had no sudoers\n"
     "Defaults env_reset\n"
     "Defaults secure_path=\"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n"
     "root ALL=(ALL:ALL) ALL\n"
     "@includedir /etc/sudoers.d\n",
     0440},
    {"/etc/sudoers.d/" E2B_DEFAULT_USER, E2B_DEFAULT_USER " ALL=(ALL:ALL) NOPASSWD: ALL\n", 0440},
    {"/etc/pam.d/sudo",
     "#%PAM-1.0\n# made by sandboxd's E2B endpoint: the image had no PAM stack for sudo\n"
     "auth required pam_unix.so\naccount required pam_permit.so\n"
     "session required pam_permit.so\n",
     0644},
};

static int give_sudo(const struct sbx_fs *fs, struct err *err)
{
    static const struct sbx_owner root = {0, 0};
    for (size_t i = 0; i < sizeof sudo_files / sizeof sudo_files[0]; i++) {
        const char *p = sudo_files[i].path;
        json_t *st = sbx_fs_stat(fs, p, err);
        if (st || err->status != 404) {
            json_decref(st);
            if (!st) return -1;
            continue; /* the image's own */
        }
        err_clear(err);
        char dir[64];
        snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(p, '/') - p), p);
        json_t *dst = sbx_fs_stat(fs, dir, err);
        json_decref(dst);
        if (!dst) {
            if (err->status != 404) return -1;
            err_clear(err);
            if (sbx_fs_mkdir(fs, dir, true, 0755, &root, err) < 0) return -1;
        }
        const char *t = sudo_files[i].text;
        if (sbx_fs_replace(fs, p, t, strlen(t), sudo_files[i].mode, &root, err) < 0) return -1;
    }
    return 0;
}

int e2b_user(struct sbx *s, struct http_req *r, const char *name, struct sbx_user *u,
             struct err *err)
{
    char basic[SBX_USER_NAME_MAX + 1];
    if (!name || !*name) {
        int rc = basic_user(r, basic, sizeof basic);
        if (rc < 0) return err_invalid(err, "Authorization", "Authorization must be Basic base64(\"<user>:\")");
        name = rc ? basic : E2B_DEFAULT_USER;
    }
    if (sbx_user_resolve(&s->sess->fs, name, u, err) == 0) return 0;
    if (err->status != 404 || strcmp(name, E2B_DEFAULT_USER) != 0) return -1;
    /* E2B images have a user "user" (home /home/user) that commands run as */
    err_clear(err);
    if (sbx_user_create(&s->sess->fs, name, u, err) < 0) {
        if (err->status != 409) return -1;
    } else if (s->allow_privilege_escalation && give_sudo(&s->sess->fs, err) < 0) {
        return -1;
    }
    err_clear(err);
    return sbx_user_resolve(&s->sess->fs, name, u, err);
}

struct sbx_fs e2b_fs(const struct sbx *s, const struct sbx_user *u)
{
    struct sbx_fs fs = s->sess->fs;
    fs.no_user_links = u->uid != 0;
    return fs;
}

int e2b_path(const char *in, const struct sbx_user *u, const char *field, char *out,
             struct err *err)
{
    if (!in || !*in) return err_invalid(err, field, "%s is required", field);
    const char *home = u->home[0] == '/' ? u->home : "/";
    return sbx_path_normalize(in, home, out, SBX_PATH_MAX + 1, field, err);
}

static void on_cmd(struct sbx_observer *o, struct sbx_cmd *c, int ev)
{
    e2b_process_on_cmd((struct e2b *)o, c, ev);
}

static void on_session_end(struct sbx_observer *o, struct sbx *s)
{
    e2b_watch_session_end((struct e2b *)o, s);
}

static void on_shutdown(struct sbx_observer *o)
{
    e2b_process_kills_end((struct e2b *)o); /* their timers would keep the loop running */
}

static void release(struct sbx_observer *o)
{
    struct e2b *e = (struct e2b *)o;
    e2b_process_kills_end(e);
    e2b_process_shutdown(e);
    e2b_watch_shutdown(e);
    OPENSSL_cleanse(e->secret, sizeof e->secret);
    free(e);
}

static void h_health(struct http_req *r, void *arg)
{
    struct e2b *e = arg;
    const char *id = http_req_header(r, "E2b-Sandbox-Id");
    struct sbx *s = id ? sbx_find(e->d, id) : NULL;
    if (!s || strcmp(s->id, id) != 0 || s->state != SBX_RUNNING) {
        e2b_api_error(r, 502, "the sandbox is not running");
        return;
    }
    http_reply_raw(r, 204, NULL, NULL, 0);
}

void sbx_e2b_register(struct sbxd *d, struct http_server *h)
{
    struct e2b *e = xcalloc(1, sizeof *e);
    e->d = d;
    e->http = h;
    e->o.on_cmd = on_cmd;
    e->o.release = release;
    e->o.on_shutdown = on_shutdown;
    e->o.on_session_end = on_session_end;
    size_t got = 0;
    while (got < sizeof e->secret) {
        ssize_t n = getrandom(e->secret + got, sizeof e->secret - got, 0);
        if (n > 0) got += (size_t)n;
    }
    sbx_observe(d, &e->o);
    http_set_filter(h, auth_filter, e);
    http_route(h, "GET", "/health", h_health, e);
    e2b_control_routes(e);
    e2b_snapshot_routes(e);
    e2b_process_routes(e);
    e2b_files_routes(e);
    e2b_fs_routes(e);
}
