/*
 * registry.c - the OCI distribution (v2) client: references, manifests, token auth,
 * verified blob downloads into the shared blob store (see registry.h for the design).
 *
 * One pull uses one libcurl easy handle for the registry (so its connection is kept
 * alive across the manifest and every blob) and a separate one for token requests
 * (they carry basic credentials, which must never stick to the registry handle).
 * Nothing here runs on the loop: a pull blocks its worker thread.
 */
#include "sandbox/storage/registry.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "sandbox/storage/oci.h"

#define REG_TOKEN_MAX (64 << 10)   /* a token endpoint's answer */
#define REG_BLOB_MAX (64LL << 30)  /* a layer */
#define REG_ERRBODY_MAX (16 << 10) /* an error body kept for the message */
#define REG_AUTHS_MAX 64

static const char *const accept_manifest =
    "Accept: application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json";



struct reg_auth {
    char host[REG_HOST_MAX + 1];
    char *user, *pass;
};

struct inflight {
    struct inflight *next;
    char digest[72];
};

struct reg_client {
    char *store;
    char *ca_file;
    char **plain;
    int nplain;
    int stall_sec, connect_sec;
    bool (*have_layer)(void *arg, const char *digest);
    void *have_arg;
    struct reg_auth auths[REG_AUTHS_MAX];
    int nauths;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct inflight *inflight;
    unsigned seq;
    _Atomic int64_t bytes, blob_gets;
};

/* ------------------------------------------------------------------ the client */

void reg_auth_key_host(const char *key, char *out, size_t outsz)
{
    if (!strncmp(key, "https://", 8)) key += 8;
    else if (!strncmp(key, "http://", 7)) key += 7;
    size_t n = strcspn(key, "/");
    snprintf(out, outsz, "%.*s", (int)(n < 255 ? n : 255), key);
    if (!strcmp(out, "index.docker.io") || !strcmp(out, "registry-1.docker.io") ||
        !strcmp(out, "registry.hub.docker.com"))
        snprintf(out, outsz, "%s", REG_DOCKER_HUB);
}

static int load_auths(struct reg_client *c, const char *path, struct err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, 400, "validation_error", "registry_auth",
                       "registry auth file %s: %s (line %d)", path, je.text, je.line);
    json_t *auths = json_object_get(root, "auths");
    int rc = 0;
    if (auths && !json_is_object(auths)) {
        rc = err_set(err, 400, "validation_error", "registry_auth",
                     "registry auth file %s: \"auths\" must be an object", path);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(auths, key, v)
    {
        if (c->nauths == REG_AUTHS_MAX) break;
        char *user = NULL, *pass = NULL;
        const char *a = json_string_value(json_object_get(v, "auth"));
        if (a) {
            size_t an = strlen(a);
            if (an > 4096) continue;
            unsigned char *dec = xmalloc(an + 4);
            int dn = EVP_DecodeBlock(dec, (const unsigned char *)a, (int)an);
            if (dn > 0) {
                while (dn > 0 && dec[dn - 1] == '\0') dn--; /* base64 padding */
                dec[dn] = '\0';
                char *colon = strchr((char *)dec, ':');
                if (colon) {
                    user = xstrndup((char *)dec, (size_t)(colon - (char *)dec));
                    pass = xstrdup(colon + 1);
                }
            }
            free(dec);
        } else {
            const char *u = json_string_value(json_object_get(v, "username"));
            const char *p = json_string_value(json_object_get(v, "password"));
            if (u && p) user = xstrdup(u), pass = xstrdup(p);
        }
        if (!user) {
            rc = err_set(err, 400, "validation_error", "registry_auth",
                         "registry auth file %s: the entry for %.100s has no \"auth\" "
                         "(base64 of user:password) nor username and password",
                         path, key);
            goto out;
        }
        struct reg_auth *e = &c->auths[c->nauths++];
        reg_auth_key_host(key, e->host, sizeof e->host);
        e->user = user;
        e->pass = pass;
    }
out:
    json_decref(root);
    return rc;
}

static int mkdir_p1(const char *path)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST) return -errno;
    return 0;
}

struct reg_client *reg_client_new(const struct reg_opts *o, const char *store_dir,
                                  struct err *err)
{
    static bool curl_ready;
    if (!curl_ready) { /* once per process, on the loop thread before any worker uses it */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
            err_internal(err, "cannot initialise libcurl");
            return NULL;
        }
        curl_ready = true;
    }
    struct reg_client *c = xcalloc(1, sizeof *c);
    c->store = xstrdup(store_dir);
    c->ca_file = o->ca_file && o->ca_file[0] ? xstrdup(o->ca_file) : NULL;
    c->stall_sec = o->stall_sec > 0 ? o->stall_sec : 30;
    c->connect_sec = o->connect_timeout_sec > 0 ? o->connect_timeout_sec : 15;
    c->have_layer = o->have_layer;
    c->have_arg = o->have_arg;
    if (o->n_plain_http > 0) {
        c->plain = xcalloc((size_t)o->n_plain_http, sizeof *c->plain);
        for (int i = 0; i < o->n_plain_http; i++) c->plain[c->nplain++] = xstrdup(o->plain_http[i]);
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    char p[PATH_MAX];
    int e = mkdir_p1(store_dir);
    snprintf(p, sizeof p, "%s/sha256", store_dir);
    if (!e) e = mkdir_p1(p);
    snprintf(p, sizeof p, "%s/tmp", store_dir);
    if (!e) e = mkdir_p1(p);
    if (e) {
        err_internal(err, "cannot create the blob store %s: %s", store_dir, strerror(-e));
        reg_client_free(c);
        return NULL;
    }
    if (c->ca_file && access(c->ca_file, R_OK) < 0) {
        err_set(err, 400, "validation_error", "registry_ca", "cannot read registry CA %s: %s",
                c->ca_file, strerror(errno));
        reg_client_free(c);
        return NULL;
    }
    if (o->auth_file && o->auth_file[0] && load_auths(c, o->auth_file, err) < 0) {
        reg_client_free(c);
        return NULL;
    }
    return c;
}

void reg_client_free(struct reg_client *c)
{
    if (!c) return;
    for (int i = 0; i < c->nauths; i++) {
        if (c->auths[i].pass) explicit_bzero(c->auths[i].pass, strlen(c->auths[i].pass));
        free(c->auths[i].user);
        free(c->auths[i].pass);
    }
    for (int i = 0; i < c->nplain; i++) free(c->plain[i]);
    free(c->plain);
    free(c->ca_file);
    free(c->store);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

int64_t reg_client_bytes(struct reg_client *c)
{
    return atomic_load(&c->bytes);
}

int64_t reg_client_blob_gets(struct reg_client *c)
{
    return atomic_load(&c->blob_gets);
}

void reg_blob_path(struct reg_client *c, const char *digest, char *out, size_t outsz)
{
    snprintf(out, outsz, "%s/sha256/%s", c->store, digest + 7);
}

/* ------------------------------------------------------------------ one connection */

struct conn {
    struct reg_client *c;
    struct reg_pull *p;
    CURL *h;
    char base[REG_HOST_MAX + 16]; /* "https://host:port" */
    char *token;                  /* "Authorization: Bearer ..." once we have one */
    const struct reg_auth *cred;
    bool basic; /* the registry asked for basic auth: send cred on every request */
    char errbuf[CURL_ERROR_SIZE];
};

/* What the last response said (reset on every status line: redirects). */
struct resp {
    long status;
    char content_type[128];
    char www_auth[1024];
    char location_host[8];
};

/* Where a body goes: a bounded memory buffer, or a file with a running hash. */
struct sink {
    struct conn *k;
    char *mem;
    size_t len, cap, max;
    bool too_big;
    int fd;
    EVP_MD_CTX *md;
    _Atomic int64_t *done;
    int64_t limit; /* bytes at most into fd */
    int write_errno;
    long *status; /* only the final 2xx body is kept */
};

static size_t on_header(char *b, size_t sz, size_t n, void *arg)
{
    struct resp *r = arg;
    size_t len = sz * n;
    if (len >= 5 && !strncmp(b, "HTTP/", 5)) {
        memset(r, 0, sizeof *r);
        const char *sp = memchr(b, ' ', len);
        if (sp) r->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    const char *colon = memchr(b, ':', len);
    if (!colon) return len;
    size_t kn = (size_t)(colon - b);
    const char *v = colon + 1;
    size_t vn = len - kn - 1;
    while (vn && (*v == ' ' || *v == '\t')) v++, vn--;
    while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' ')) vn--;
    if (kn == 12 && !strncasecmp(b, "content-type", 12)) {
        size_t m = strcspn(v, ";\r\n");
        if (m > vn) m = vn;
        snprintf(r->content_type, sizeof r->content_type, "%.*s", (int)m, v);
    } else if (kn == 16 && !strncasecmp(b, "www-authenticate", 16)) {
        snprintf(r->www_auth, sizeof r->www_auth, "%.*s", (int)(vn < 1023 ? vn : 1023), v);
    }
    return len;
}

static size_t on_body(char *b, size_t sz, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = sz * n;
    if (atomic_load(&s->k->p->cancel)) return 0;
    long st = s->status ? *s->status : 200;
    if (s->fd >= 0 && st >= 200 && st < 300) {
        if ((int64_t)len > s->limit) {
            s->too_big = true;
            return 0;
        }
        size_t off = 0;
        while (off < len) {
            ssize_t w = write(s->fd, b + off, len - off);
            if (w < 0) {
                if (errno == EINTR) continue;
                s->write_errno = errno;
                return 0;
            }
            off += (size_t)w;
        }
        EVP_DigestUpdate(s->md, b, len);
        s->limit -= (int64_t)len;
        if (s->done) atomic_fetch_add(s->done, (int64_t)len);
        atomic_fetch_add(&s->k->c->bytes, (int64_t)len);
        atomic_fetch_add(&s->k->p->fetched, (int64_t)len);
        return len;
    }
    /* memory: a manifest, a token, or an error body */
    size_t max = (st >= 200 && st < 300) ? s->max : REG_ERRBODY_MAX;
    if (s->len + len > max) {
        if (st >= 200 && st < 300) {
            s->too_big = true;
            return 0;
        }
        len = max - s->len; /* keep the start of an error body */
        if (!len) return sz * n;
    }
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 16384;
        while (cap < s->len + len + 1) cap *= 2;
        s->mem = xrealloc(s->mem, cap);
        s->cap = cap;
    }
    memcpy(s->mem + s->len, b, len);
    s->len += len;
    s->mem[s->len] = '\0';
    if (st >= 200 && st < 300) {
        atomic_fetch_add(&s->k->c->bytes, (int64_t)len);
        atomic_fetch_add(&s->k->p->fetched, (int64_t)len);
    }
    return sz * n;
}

static int ssl_ctx_cb(CURL *h, void *ctx, void *arg)
{
    (void)h;
    const char *ca = arg;
    X509_STORE *st = SSL_CTX_get_cert_store((SSL_CTX *)ctx);
    if (!st || !X509_STORE_load_file(st, ca)) return CURLE_SSL_CACERT_BADFILE;
    return CURLE_OK;
}

static void setup_handle(struct conn *k, CURL *h)
{
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, k->errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)k->c->connect_sec);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)k->c->stall_sec);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "rebuno-sandboxd");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    if (k->c->ca_file) {
        curl_easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION, ssl_ctx_cb);
        curl_easy_setopt(h, CURLOPT_SSL_CTX_DATA, k->c->ca_file);
    }
}

static const struct reg_auth *find_cred(struct reg_client *c, const char *host)
{
    for (int i = 0; i < c->nauths; i++)
        if (!strcmp(c->auths[i].host, host)) return &c->auths[i];
    return NULL;
}

static void conn_init(struct conn *k, struct reg_client *c, struct reg_pull *p)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->p = p;
    k->h = curl_easy_init();
    ASSERT(k->h);
    setup_handle(k, k->h);
    const char *host = p->ref.registry;
    bool plain = false;
    for (int i = 0; i < c->nplain; i++)
        if (!strcmp(c->plain[i], host)) plain = true;
    if (!strcmp(host, REG_DOCKER_HUB)) host = "registry-1.docker.io";
    snprintf(k->base, sizeof k->base, "%s://%s", plain ? "http" : "https", host);
    k->cred = find_cred(c, p->ref.registry);
}

static void conn_fini(struct conn *k)
{
    if (k->h) curl_easy_cleanup(k->h);
    if (k->token) explicit_bzero(k->token, strlen(k->token));
    free(k->token);
}

static const char *status_text(long st)
{
    switch (st) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

/* A transfer that did not complete: say why, naming the registry. */
static int curl_fail(struct conn *k, CURLcode cc, const struct sink *s, const char *what,
                     struct err *err)
{
    const char *host = k->p->ref.registry;
    if (atomic_load(&k->p->cancel))
        return err_set(err, 503, "shutting_down", "", "the pull of %s was stopped", what);
    if (s && s->write_errno == ENOSPC)
        return err_set(err, 507, "no_space", "",
                       "no space left for %s from %s; free some (delete unused images)", what,
                       host);
    if (s && s->write_errno)
        return err_set(err, 500, "storage_error", "", "cannot store %s: %s", what,
                       strerror(s->write_errno));
    if (s && s->too_big)
        return err_set(err, 502, "registry_error", "",
                       "registry %s sent more bytes for %s than its manifest declares (or than "
                       "the %d-byte limit of a manifest)",
                       host, what, REG_MANIFEST_MAX);
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return err_set(err, 504, "registry_timeout", "",
                       "registry %s stalled while sending %s (under 1 KiB/s for %d s)", host, what,
                       k->c->stall_sec);
    if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST)
        return err_set(err, 502, "registry_unreachable", "", "cannot reach registry %s: %s", host,
                       k->errbuf[0] ? k->errbuf : curl_easy_strerror(cc));
    return err_set(err, 502, "registry_error", "", "registry %s, %s: %s", host, what,
                   k->errbuf[0] ? k->errbuf : curl_easy_strerror(cc));
}

/* The message of a registry's JSON error body ({"errors":[{"code","message"}]}), or "". */
static void error_detail(const char *body, size_t len, char *out, size_t outsz)
{
    out[0] = '\0';
    if (!body || !len) return;
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e0 = json_array_get(json_object_get(j, "errors"), 0);
    const char *code = json_string_value(json_object_get(e0, "code"));
    const char *msg = json_string_value(json_object_get(e0, "message"));
    if (code || msg) snprintf(out, outsz, ": %.40s %.160s", code ? code : "", msg ? msg : "");
    json_decref(j);
}

static int status_fail(struct conn *k, long st, const char *what, const struct sink *s,
                       struct err *err)
{
    const char *host = k->p->ref.registry;
    char detail[220];
    error_detail(s ? s->mem : NULL, s ? s->len : 0, detail, sizeof detail);
    if (st == 401 || st == 403)
        return err_set(err, 401, "registry_unauthorized", "ref",
                       "registry %s answered HTTP %ld %s for %s%s; give the daemon credentials "
                       "for it (--registry-auth FILE, a docker-style auth.json)",
                       host, st, status_text(st), what, detail);
    return err_set(err, 502, "registry_error", "", "registry %s answered HTTP %ld %s for %s%s",
                   host, st, status_text(st), what, detail);
}

/* ------------------------------------------------------------------ auth */

bool reg_challenge_param(const char *ch, const char *key, char *out, size_t outsz)
{
    size_t kl = strlen(key);
    for (const char *c = ch; *c;) {
        while (*c == ' ' || *c == ',') c++;
        const char *eq = strchr(c, '=');
        if (!eq) return false;
        bool match = (size_t)(eq - c) == kl && !strncasecmp(c, key, kl);
        const char *v = eq + 1;
        size_t n = 0;
        char val[1024];
        if (*v == '"') {
            v++;
            while (*v && *v != '"') { /* past the end even when val is full */
                if (*v == '\\' && v[1]) v++;
                if (n < sizeof val - 1) val[n++] = *v;
                v++;
            }
            if (*v == '"') v++;
        } else {
            for (; *v && *v != ',' && *v != ' '; v++)
                if (n < sizeof val - 1) val[n++] = *v;
        }
        val[n] = '\0';
        if (match) {
            snprintf(out, outsz, "%s", val);
            return true;
        }
        c = v;
    }
    return false;
}

/* Answer a 401's challenge: get a bearer token (or switch to basic). 0 or -1 with err. */
static int authenticate(struct conn *k, const struct resp *r, const char *what, struct err *err)
{
    const char *ch = r->www_auth;
    const char *host = k->p->ref.registry;
    if (!strncasecmp(ch, "Basic", 5)) {
        if (!k->cred || k->basic) return status_fail(k, 401, what, NULL, err);
        k->basic = true;
        curl_easy_setopt(k->h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(k->h, CURLOPT_USERNAME, k->cred->user);
        curl_easy_setopt(k->h, CURLOPT_PASSWORD, k->cred->pass);
        return 0;
    }
    if (strncasecmp(ch, "Bearer ", 7) != 0) return status_fail(k, 401, what, NULL, err);
    if (k->token) { /* expired during a long pull, or another scope: get a new one (once per
                     * request, see get()) */
        explicit_bzero(k->token, strlen(k->token));
        free(k->token);
        k->token = NULL;
    }
    char realm[1024], service[256] = "", scope[600] = "";
    if (!reg_challenge_param(ch + 7, "realm", realm, sizeof realm) ||
        (strncmp(realm, "https://", 8) != 0 && strncmp(realm, "http://", 7) != 0))
        return err_set(err, 502, "registry_error", "",
                       "registry %s asked for a token without a usable realm", host);
    reg_challenge_param(ch + 7, "service", service, sizeof service);
    if (!reg_challenge_param(ch + 7, "scope", scope, sizeof scope))
        snprintf(scope, sizeof scope, "repository:%s:pull", k->p->ref.repository);
    CURL *t = curl_easy_init();
    ASSERT(t);
    setup_handle(k, t);
    char *es = curl_easy_escape(t, service, 0), *esc = curl_easy_escape(t, scope, 0);
    char *url = xasprintf("%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
                          es ? es : "", esc ? esc : "");
    curl_free(es);
    curl_free(esc);
    struct resp tr = {0};
    struct sink s = {.k = k, .fd = -1, .max = REG_TOKEN_MAX, .status = &tr.status};
    curl_easy_setopt(t, CURLOPT_URL, url);
    curl_easy_setopt(t, CURLOPT_HEADERDATA, &tr);
    curl_easy_setopt(t, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(t, CURLOPT_TIMEOUT, 60L);
    if (k->cred) {
        curl_easy_setopt(t, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(t, CURLOPT_USERNAME, k->cred->user);
        curl_easy_setopt(t, CURLOPT_PASSWORD, k->cred->pass);
    }
    CURLcode cc = curl_easy_perform(t);
    int rc = 0;
    if (cc != CURLE_OK) {
        rc = curl_fail(k, cc, &s, "a token", err);
        err_wrap(err, "token server %.200s", realm);
    } else if (tr.status != 200) {
        rc = err_set(err, 401, "registry_unauthorized", "ref",
                     "the token server of registry %s (%.200s) answered HTTP %ld %s%s", host,
                     realm, tr.status, status_text(tr.status),
                     k->cred ? ""
                             : "; give the daemon credentials for it (--registry-auth FILE, a "
                               "docker-style auth.json)");
    } else {
        json_t *j = s.mem ? json_loadb(s.mem, s.len, 0, NULL) : NULL;
        const char *tok = json_string_value(json_object_get(j, "token"));
        if (!tok) tok = json_string_value(json_object_get(j, "access_token"));
        if (!tok || !*tok || strpbrk(tok, "\r\n"))
            rc = err_set(err, 502, "registry_error", "",
                         "the token server of registry %s answered without a token", host);
        else k->token = xasprintf("Authorization: Bearer %s", tok);
        json_decref(j);
    }
    if (s.mem) explicit_bzero(s.mem, s.len);
    free(s.mem);
    free(url);
    curl_easy_cleanup(t);
    return rc;
}

/* GET base+path into s; answers 401 once with the challenge. Sets *status. 0 or -1. */
static int get(struct conn *k, const char *path, const char *accept, struct sink *s,
               struct resp *r, const char *what, struct err *err)
{
    char url[2048];
    snprintf(url, sizeof url, "%s%s", k->base, path);
    for (int attempt = 0;; attempt++) {
        struct curl_slist *hl = NULL;
        if (accept) hl = curl_slist_append(hl, accept);
        if (k->token) hl = curl_slist_append(hl, k->token);
        memset(r, 0, sizeof *r);
        s->status = &r->status;
        k->errbuf[0] = '\0';
        curl_easy_setopt(k->h, CURLOPT_URL, url);
        curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(k->h, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(k->h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(k->h, CURLOPT_HTTPGET, 1L);
        CURLcode cc = curl_easy_perform(k->h);
        curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hl);
        if (cc != CURLE_OK) return curl_fail(k, cc, s, what, err);
        if (r->status == 401 && attempt == 0) {
            if (authenticate(k, r, what, err) < 0) return -1;
            s->len = 0; /* the 401's body */
            continue;
        }
        return 0;
    }
}

/* ------------------------------------------------------------------ the blob store */

static void hex_of(const unsigned char md[32], char out[65])
{
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void sha256_hex(const void *b, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(b, n, md, &len, EVP_sha256(), NULL);
    hex_of(md, out);
}

static bool blob_present(struct reg_client *c, const char *digest, int64_t size)
{
    char p[PATH_MAX];
    reg_blob_path(c, digest, p, sizeof p);
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && (size < 0 || st.st_size == size);
}

/* Take the right to fetch digest: 1 = ours (release with blob_release), 0 = it is in the
 * store (perhaps fetched by another pull meanwhile), -1 = canceled. */
static int blob_claim(struct reg_client *c, struct reg_pull *p, const char *digest, int64_t size)
{
    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct inflight *f = c->inflight;
        while (f && strcmp(f->digest, digest) != 0) f = f->next;
        if (!f) break;
        if (atomic_load(&p->cancel)) {
            pthread_mutex_unlock(&c->mu);
            return -1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    int rc = 0;
    if (!blob_present(c, digest, size)) {
        struct inflight *f = xcalloc(1, sizeof *f);
        snprintf(f->digest, sizeof f->digest, "%s", digest);
        f->next = c->inflight;
        c->inflight = f;
        rc = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void blob_release(struct reg_client *c, const char *digest)
{
    pthread_mutex_lock(&c->mu);
    for (struct inflight **pp = &c->inflight; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->digest, digest)) {
            struct inflight *f = *pp;
            *pp = f->next;
            free(f);
            break;
        }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int tmp_open(struct reg_client *c, const char *digest, char *tmp, size_t tmpsz)
{
    pthread_mutex_lock(&c->mu);
    unsigned n = ++c->seq;
    pthread_mutex_unlock(&c->mu);
    snprintf(tmp, tmpsz, "%s/tmp/%.16s-%d-%u", c->store, digest + 7, (int)getpid(), n);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    return fd < 0 ? -errno : fd;
}

static int storage_fail(int e, const char *what, struct err *err)
{
    if (e == ENOSPC || e == EDQUOT)
        return err_set(err, 507, "no_space", "",
                       "no space left to store %s; free some (delete unused images)", what);
    return err_set(err, 500, "storage_error", "", "cannot store %s: %s", what, strerror(e));
}

/* Put bytes already in memory (a manifest) into the store under their digest. */
static int store_bytes(struct reg_client *c, const char *digest, const char *b, size_t n,
                       struct err *err)
{
    if (blob_present(c, digest, (int64_t)n)) return 0;
    char tmp[PATH_MAX], fin[PATH_MAX];
    int fd = tmp_open(c, digest, tmp, sizeof tmp);
    if (fd < 0) return storage_fail(-fd, "a manifest", err);
    size_t off = 0;
    int e = 0;
    while (off < n) {
        ssize_t w = write(fd, b + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            e = errno;
            break;
        }
        off += (size_t)w;
    }
    if (!e && fdatasync(fd) < 0) e = errno;
    close(fd);
    reg_blob_path(c, digest, fin, sizeof fin);
    if (!e && rename(tmp, fin) < 0) e = errno;
    if (e) {
        unlink(tmp);
        return storage_fail(e, "a manifest", err);
    }
    return 0;
}

/* Fetch one blob into the store, verified, unless it is there. 0 or -1 with err. */
static bool layer_unpacked(struct reg_client *c, const char *digest)
{
    return c->have_layer && c->have_layer(c->have_arg, digest);
}

static int blob_fetch(struct conn *k, struct reg_blob *b, bool layer, struct err *err)
{
    struct reg_client *c = k->c;
    if (layer && layer_unpacked(c, b->digest)) { /* pulled before: never again */
        atomic_store(&b->cached, true);
        atomic_store(&b->done, b->size);
        return 0;
    }
    int cl = blob_claim(c, k->p, b->digest, b->size);
    if (cl < 0) return err_set(err, 503, "shutting_down", "", "the pull was stopped");
    if (cl == 0) {
        atomic_store(&b->cached, true);
        atomic_store(&b->done, b->size);
        return 0;
    }
    char what[128];
    snprintf(what, sizeof what, "blob %.19s", b->digest);
    char tmp[PATH_MAX], fin[PATH_MAX];
    int fd = tmp_open(c, b->digest, tmp, sizeof tmp);
    if (fd < 0) {
        blob_release(c, b->digest);
        return storage_fail(-fd, what, err);
    }
    struct sink s = {.k = k, .fd = fd, .md = EVP_MD_CTX_new(), .done = &b->done, .limit = b->size};
    ASSERT(s.md);
    EVP_DigestInit_ex(s.md, EVP_sha256(), NULL);
    atomic_fetch_add(&c->blob_gets, 1);
    char path[REG_REPO_MAX + 128];
    snprintf(path, sizeof path, "/v2/%s/blobs/%s", k->p->ref.repository, b->digest);
    struct resp r;
    int rc = get(k, path, NULL, &s, &r, what, err);
    if (rc == 0 && (r.status < 200 || r.status >= 300)) rc = status_fail(k, r.status, what, &s, err);
    int64_t got = b->size - s.limit;
    if (rc == 0 && got != b->size)
        rc = err_set(err, 502, "registry_error", "",
                     "registry %s sent %lld bytes of %s, its manifest says %lld", k->p->ref.registry,
                     (long long)got, what, (long long)b->size);
    if (rc == 0) {
        unsigned char md[32];
        unsigned int ml = 0;
        char hex[65];
        EVP_DigestFinal_ex(s.md, md, &ml);
        hex_of(md, hex);
        if (strcmp(hex, b->digest + 7) != 0)
            rc = err_set(err, 502, "digest_mismatch", "",
                         "registry %s sent %s with the wrong content (its sha256 is %.16s...); "
                         "the registry's storage is corrupt or something altered the transfer",
                         k->p->ref.registry, b->digest, hex);
    }
    if (rc == 0 && fdatasync(fd) < 0) rc = storage_fail(errno, what, err);
    close(fd);
    EVP_MD_CTX_free(s.md);
    free(s.mem);
    reg_blob_path(c, b->digest, fin, sizeof fin);
    if (rc == 0 && rename(tmp, fin) < 0) rc = storage_fail(errno, what, err);
    if (rc < 0) {
        unlink(tmp);
        atomic_store(&b->done, 0);
    }
    blob_release(c, b->digest);
    return rc;
}

/* ------------------------------------------------------------------ manifests */

/* A registry's document failed oci.h's checks: its fault, not the caller's (502). */
static int bad_doc(struct conn *k, struct err *err)
{
    if (err->status == 400) {
        err->status = 502;
        err->field[0] = '\0';
    }
    return err_wrap(err, "registry %s", k->p->ref.registry);
}

static int blob_of(struct conn *k, const struct sbx_oci_desc *d, const char *what, int64_t max,
                   struct reg_blob *b, struct err *err)
{
    if (d->size > max)
        return err_set(err, 502, "invalid_image", "",
                       "registry %s: the manifest gives its %s a size of %lld (at most %lld)",
                       k->p->ref.registry, what, (long long)d->size, (long long)max);
    snprintf(b->digest, sizeof b->digest, "%s", d->digest);
    snprintf(b->media_type, sizeof b->media_type, "%s", d->media_type ? d->media_type : "");
    b->size = d->size;
    return 0;
}

/* GET one manifest by tag or digest into *out (caller frees), verified against want
 * when given; its digest into dg and its type into mt. 0 or -1. */
static int fetch_manifest(struct conn *k, const char *ref, const char *want, char **out,
                          size_t *outlen, char dg[72], char mt[128], struct err *err)
{
    char path[REG_REPO_MAX + 256];
    snprintf(path, sizeof path, "/v2/%s/manifests/%s", k->p->ref.repository, ref);
    struct sink s = {.k = k, .fd = -1, .max = REG_MANIFEST_MAX};
    struct resp r;
    char what[REG_REF_MAX + 64];
    snprintf(what, sizeof what, "manifest %s:%s", k->p->ref.repository, ref);
    int rc = get(k, path, accept_manifest, &s, &r, what, err);
    if (rc == 0 && r.status == 404) {
        rc = err_set(err, 404, "image_not_found", "ref",
                     "registry %s has no image %s (HTTP 404 for %s)", k->p->ref.registry, k->p->ref.canonical, what);
    } else if (rc == 0 && r.status != 200) {
        rc = status_fail(k, r.status, what, &s, err);
    }
    if (rc == 0 && s.too_big)
        rc = err_set(err, 502, "registry_error", "", "registry %s: %s is over %d bytes",
                     k->p->ref.registry, what, REG_MANIFEST_MAX);
    if (rc < 0) {
        free(s.mem);
        return -1;
    }
    char hex[65];
    sha256_hex(s.mem ? s.mem : "", s.len, hex);
    snprintf(dg, 72, "sha256:%s", hex);
    if (want && strcmp(dg, want) != 0) {
        free(s.mem);
        return err_set(err, 502, "digest_mismatch", "",
                       "registry %s sent a manifest for %s whose digest is %s", k->p->ref.registry,
                       want, dg);
    }
    snprintf(mt, 128, "%s", r.content_type);
    *out = s.mem ? s.mem : xstrdup("");
    *outlen = s.len;
    return 0;
}

int reg_pull_run(struct reg_client *c, struct reg_pull *p, struct err *err)
{
    struct conn k;
    conn_init(&k, c, p);
    atomic_store(&p->phase, REG_RESOLVING);
    int64_t t0 = clock_mono_ms();
    char *body = NULL;
    size_t len = 0;
    char dg[72], mt[128];
    int rc = -1;
    const char *first = p->ref.digest[0] ? p->ref.digest : p->ref.tag;
    if (fetch_manifest(&k, first, p->ref.digest[0] ? p->ref.digest : NULL, &body, &len, dg, mt,
                       err) < 0)
        goto out;
    char what[REG_REF_MAX + 32];
    snprintf(what, sizeof what, "the manifest of %s:%s", p->ref.repository, first);
    enum sbx_oci_kind kind = sbx_oci_doc_kind(body, len);
    if (kind == SBX_OCI_INDEX) {
        snprintf(p->index_digest, sizeof p->index_digest, "%s", dg);
        struct sbx_oci_index ix;
        if (sbx_oci_parse_index(body, len, what, &ix, err) < 0) {
            bad_doc(&k, err);
            goto out;
        }
        int at = sbx_oci_select(&ix, "linux", "amd64", err);
        char want[72];
        if (at >= 0) snprintf(want, sizeof want, "%s", ix.manifests[at].digest);
        sbx_oci_index_fini(&ix);
        if (at < 0) {
            snprintf(err->field, sizeof err->field, "ref");
            err_wrap(err, "registry %s", p->ref.registry);
            goto out;
        }
        if (store_bytes(c, dg, body, len, err) < 0) goto out;
        free(body);
        body = NULL;
        if (fetch_manifest(&k, want, want, &body, &len, dg, mt, err) < 0) goto out;
        snprintf(what, sizeof what, "the linux/amd64 manifest of %s:%s", p->ref.repository, first);
        kind = sbx_oci_doc_kind(body, len);
    }
    if (kind != SBX_OCI_MANIFEST) {
        err_set(err, 502, "unsupported_media_type", "",
                "registry %s sent %s of type \"%.100s\"; supported: OCI and Docker v2 image "
                "manifests and indexes",
                p->ref.registry, what, mt);
        goto out;
    }
    struct sbx_oci_manifest m;
    if (sbx_oci_parse_manifest(body, len, what, &m, err) < 0) {
        bad_doc(&k, err);
        goto out;
    }
    int bad = m.nlayers > REG_LAYERS_MAX ||
              blob_of(&k, &m.config, "config", SBX_OCI_DOC_MAX, &p->config, err) < 0;
    for (size_t i = 0; !bad && i < m.nlayers; i++) {
        char lw[32];
        snprintf(lw, sizeof lw, "layer %zu", i + 1);
        bad = blob_of(&k, &m.layers[i], lw, REG_BLOB_MAX, &p->layers[i], err) < 0;
    }
    snprintf(p->manifest_type, sizeof p->manifest_type, "%s",
             m.media_type ? m.media_type : (mt[0] ? mt : SBX_MT_OCI_MANIFEST));
    if (!bad) atomic_store(&p->nlayers, (int)m.nlayers);
    sbx_oci_manifest_fini(&m);
    if (bad) {
        if (!err->msg[0])
            err_set(err, 502, "invalid_image", "", "registry %s: too many layers", p->ref.registry);
        goto out;
    }
    snprintf(p->manifest_digest, sizeof p->manifest_digest, "%s", dg);
    p->manifest_size = (int64_t)len;
    atomic_store(&p->phase, REG_FETCHING);
    if (blob_fetch(&k, &p->config, false, err) < 0) goto out;
    int n = atomic_load(&p->nlayers);
    for (int i = 0; i < n; i++)
        if (blob_fetch(&k, &p->layers[i], true, err) < 0) goto out;
    if (store_bytes(c, dg, body, len, err) < 0) goto out; /* last: the image is complete */
    atomic_store(&p->phase, REG_DONE);
    p->download_ms = clock_mono_ms() - t0;
    rc = 0;
out:
    free(body);
    conn_fini(&k);
    return rc;
}

/* ------------------------------------------------------------------ OCI layout */

static int link_blob(struct reg_client *c, const char *digest, bool layer, const char *dir,
                     struct err *err)
{
    char src[PATH_MAX], dst[PATH_MAX];
    reg_blob_path(c, digest, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/blobs/sha256/%s", dir, digest + 7);
    if (link(src, dst) == 0 || errno == EEXIST) return 0;
    if (errno == ENOENT && layer && layer_unpacked(c, digest)) return 0; /* install skips it */
    if (errno != EXDEV) return storage_fail(errno, "an image layout", err);
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, e = 0;
    if (in < 0) return storage_fail(errno, "an image layout", err);
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) e = errno;
    char b[65536];
    while (!e) {
        ssize_t n = read(in, b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n < 0) e = errno;
            break;
        }
        if (write(out, b, (size_t)n) != n) e = errno ? errno : EIO;
    }
    close(in);
    if (out >= 0) close(out);
    return e ? storage_fail(e, "an image layout", err) : 0;
}

static int write_file(const char *path, const char *text, struct err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return storage_fail(errno, "an image layout", err);
    size_t n = strlen(text);
    int e = write(fd, text, n) == (ssize_t)n ? 0 : (errno ? errno : EIO);
    close(fd);
    return e ? storage_fail(e, "an image layout", err) : 0;
}

int reg_layout_write(struct reg_client *c, const struct reg_pull *p, const char *dir,
                     struct err *err)
{
    char sub[PATH_MAX];
    if (mkdir(dir, 0700) < 0) return storage_fail(errno, "an image layout", err);
    snprintf(sub, sizeof sub, "%s/blobs", dir);
    if (mkdir(sub, 0700) < 0) return storage_fail(errno, "an image layout", err);
    snprintf(sub, sizeof sub, "%s/blobs/sha256", dir);
    if (mkdir(sub, 0700) < 0) return storage_fail(errno, "an image layout", err);
    if (link_blob(c, p->manifest_digest, false, dir, err) < 0 ||
        link_blob(c, p->config.digest, false, dir, err) < 0)
        return -1;
    int n = atomic_load(&p->nlayers);
    for (int i = 0; i < n; i++)
        if (link_blob(c, p->layers[i].digest, true, dir, err) < 0) return -1;
    snprintf(sub, sizeof sub, "%s/oci-layout", dir);
    if (write_file(sub, "{\"imageLayoutVersion\":\"1.0.0\"}\n", err) < 0) return -1;
    const char *ref = p->ref.canonical;
    json_t *ann = json_object();
    json_object_set_new(ann, "org.opencontainers.image.ref.name",
                        json_string(p->ref.tag[0] ? p->ref.tag : p->manifest_digest));
    json_object_set_new(ann, "io.rebuno.image.ref", json_string(ref));
    if (p->index_digest[0])
        json_object_set_new(ann, "io.rebuno.image.index", json_string(p->index_digest));
    json_t *m = json_pack("{s:s, s:s, s:I, s:o}", "mediaType", p->manifest_type, "digest",
                          p->manifest_digest, "size", (json_int_t)p->manifest_size, "annotations",
                          ann);
    json_t *idx = json_pack("{s:i, s:s, s:[o]}", "schemaVersion", 2, "mediaType", SBX_MT_OCI_INDEX,
                            "manifests", m);
    char *text = json_dumps(idx, JSON_COMPACT);
    json_decref(idx);
    snprintf(sub, sizeof sub, "%s/index.json", dir);
    int rc = write_file(sub, text, err);
    free(text);
    return rc;
}

void reg_drop_layer_blobs(struct reg_client *c, const struct reg_pull *p)
{
    int n = atomic_load(&p->nlayers);
    for (int i = 0; i < n; i++) {
        if (!layer_unpacked(c, p->layers[i].digest)) continue;
        char path[PATH_MAX];
        reg_blob_path(c, p->layers[i].digest, path, sizeof path);
        unlink(path); /* missing already: fine */
    }
}
