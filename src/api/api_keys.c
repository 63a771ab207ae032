/*
 * api_keys.c - upstream's run-time API keys (see api_keys.h): create, list, rotate,
 * revoke, and the lookup the auth layer does beside the config file's keys.
 *
 * Tokens are "rbk_" + 48 hex characters (24 random bytes); the store keeps their
 * SHA-256 and the first 12 characters (prefix) so a listing can tell keys apart.
 * Entries are allocated one by one and never freed before api_keys_free, because a
 * request in flight holds a pointer to its key's entry.
 *
 * The store is the truth, for every replica sharing it: on PostgreSQL a lookup of a live
 * key reads its row by hash (one indexed read), so a key made on another replica is
 * accepted and a key revoked or rotated there is refused at once, announcement or not
 * (SQLite has one kernel, which made every change itself: it judges known keys from
 * memory). What stays final is answered from memory: a revoked key never comes back,
 * and a token the store did not have never will (tokens are random and shown only after
 * their key committed), so such tokens are remembered in a small ring (MISS_SLOTS) and
 * refused without a read. New unknown tokens are read at most MISS_READS_PER_S a second:
 * a flood of made-up tokens costs the database that and no more (past it they are
 * refused unread, which may refuse a key made elsewhere in the last instant; the client
 * retries). Well-formed tokens only.
 */
#include "api/api_keys.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/uuid.h"
#include "base/xalloc.h"
#include "kernel/identity.h"

#define TOKEN_RANDOM 24
#define PREFIX_LEN 12
#define NAME_MAX_LEN 128
#define TOKEN_LEN (4 + 2 * TOKEN_RANDOM)
#define MISS_SLOTS 1024
#define MISS_READS_PER_S 100
#define RELOAD_EVERY_MS 5000

static const char *const scope_names[] = {"executions:read", "executions:write", "approvals:read",
                                          "approvals:write", "agents:read",      "agents:write",
                                          "policies:write",  "api_keys:manage"};
#define N_SCOPES (sizeof scope_names / sizeof *scope_names)

struct rkey {
    struct key_entry e; /* first: what requests point at */
    char id[UUID_STR_LEN];
    char *name;
    char prefix[PREFIX_LEN + 1];
    int64_t created_at, revoked_at;
};

struct api_keys {
    struct store *st;
    struct rkey **v;
    int n;
    int64_t loaded_at; /* monotonic ms of the last read from the store */
    bool dirty;        /* another replica changed a key: read them again at the next chance */
    bool shared;       /* other replicas share the store: a live key is read at each lookup */
    char (*miss)[STEP_ID_LEN]; /* hashes of tokens the store did not have (ring of MISS_SLOTS) */
    int miss_next;
    int64_t miss_second; /* monotonic second of miss_reads */
    int miss_reads;      /* store reads for unknown tokens in that second */
    long long unknown_read, unknown_unread; /* for /metrics */
};

const char *api_scope_names(unsigned scopes, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_SCOPES; i++)
        if (scopes & (1u << i)) {
            int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", scope_names[i]);
            if (w < 0 || (size_t)w >= n - used) break;
            used += (size_t)w;
        }
    return buf;
}

static json_t *scopes_json(unsigned scopes)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < N_SCOPES; i++)
        if (scopes & (1u << i)) json_array_append_new(arr, json_string(scope_names[i]));
    return arr;
}

static unsigned scopes_from_text(const char *text)
{
    json_t *arr = json_loads(text ? text : "[]", 0, NULL);
    unsigned m = 0;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) for (size_t j = 0; j < N_SCOPES; j++) if (json_is_string(v) &&
                                                                           !strcmp(json_string_value(v),
                                                                                   scope_names[j])) m |= 1u << j;
    json_decref(arr);
    return m;
}

static struct rkey *find_id(struct api_keys *ks, const char *id)
{
    for (int i = 0; i < ks->n; i++)
        if (!strcmp(ks->v[i]->id, id)) return ks->v[i];
    return NULL;
}

static struct rkey *add(struct api_keys *ks, const char *id)
{
    struct rkey *k = xcalloc(1, sizeof *k);
    snprintf(k->id, sizeof k->id, "%s", id);
    k->e.role = ROLE_CLIENT; /* never consulted: scopes decide */
    ks->v = xrealloc(ks->v, (size_t)(ks->n + 1) * sizeof *ks->v);
    ks->v[ks->n++] = k;
    return k;
}

static void set_row(struct rkey *k, const struct api_key_row *row)
{
    snprintf(k->e.hash, sizeof k->e.hash, "%s", row->hash ? row->hash : "");
    free(k->name);
    k->name = xstrdup(row->name ? row->name : "");
    snprintf(k->prefix, sizeof k->prefix, "%s", row->prefix ? row->prefix : "");
    k->e.scopes = scopes_from_text(row->scopes);
    if (!k->e.scopes) k->e.revoked = true; /* a row this kernel cannot read grants nothing */
    k->created_at = row->created_at;
    k->revoked_at = row->revoked_at;
    k->e.revoked = k->e.revoked || row->revoked_at > 0;
}

static int load_row(const struct api_key_row *row, void *arg)
{
    struct api_keys *ks = arg;
    struct rkey *k = find_id(ks, row->id);
    if (!k) k = add(ks, row->id);
    k->e.revoked = false;
    set_row(k, row);
    return 0;
}

static void reload(struct api_keys *ks)
{
    ks->loaded_at = clock_mono_ms();
    ks->dirty = false;
    if (store_api_keys_each(ks->st, load_row, ks) < 0)
        log_warn("cannot read the API keys from the store", "error=\"%s\"", store_errmsg(ks->st));
}

struct api_keys *api_keys_new(struct store *st)
{
    struct api_keys *ks = xcalloc(1, sizeof *ks);
    ks->st = st;
    ks->miss = xcalloc(MISS_SLOTS, sizeof *ks->miss);
    ks->shared = strcmp(store_kind(st), "sqlite") != 0;
    reload(ks);
    return ks;
}

void api_keys_free(struct api_keys *ks)
{
    if (!ks) return;
    for (int i = 0; i < ks->n; i++) {
        free(ks->v[i]->name);
        free(ks->v[i]);
    }
    free(ks->v);
    free(ks->miss);
    free(ks);
}

static struct rkey *match(struct api_keys *ks, const char *h)
{
    struct rkey *found = NULL;
    for (int i = 0; i < ks->n; i++) /* constant time per entry, and every entry compared */
        if (CRYPTO_memcmp(h, ks->v[i]->e.hash, 64) == 0) found = ks->v[i];
    return found;
}

static bool missed(const struct api_keys *ks, const char *h)
{
    for (int i = 0; i < MISS_SLOTS; i++)
        if (ks->miss[i][0] && memcmp(ks->miss[i], h, 64) == 0) return true;
    return false;
}

static void remember_miss(struct api_keys *ks, const char *h)
{
    memcpy(ks->miss[ks->miss_next], h, STEP_ID_LEN);
    ks->miss_next = (ks->miss_next + 1) % MISS_SLOTS;
}

/* May an unknown token cost a store read now? */
static bool miss_budget(struct api_keys *ks)
{
    int64_t sec = clock_mono_ms() / 1000;
    if (sec != ks->miss_second) {
        ks->miss_second = sec;
        ks->miss_reads = 0;
    }
    return ks->miss_reads++ < MISS_READS_PER_S;
}

static bool well_formed(const char *token)
{
    if (strncmp(token, "rbk_", 4) != 0 || strlen(token) != TOKEN_LEN) return false;
    for (const char *c = token + 4; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

struct found {
    struct api_keys *ks;
    struct rkey *k;
};

static int found_row(const struct api_key_row *row, void *arg)
{
    struct found *f = arg;
    load_row(row, f->ks);
    f->k = find_id(f->ks, row->id);
    return 0;
}

const struct key_entry *api_keys_lookup(struct api_keys *ks, const char *token)
{
    if (!well_formed(token)) return NULL;
    char h[STEP_ID_LEN];
    identity_sha256_hex(token, strlen(token), h);
    if (missed(ks, h)) {
        ks->unknown_unread++;
        return NULL;
    }
    struct rkey *k = match(ks, h);
    if (k && (k->e.revoked || !ks->shared)) return &k->e; /* final, or nobody else changes it */
    if (!k && !miss_budget(ks)) {
        ks->unknown_unread++;
        return NULL;
    }
    if (!k) ks->unknown_read++;
    struct found f = {ks, NULL};
    int r = store_api_key_find(ks->st, h, found_row, &f);
    if (r == -ENOENT) { /* never made, or rotated away (on another replica: read them again) */
        if (k) ks->dirty = true;
        remember_miss(ks, h);
        return NULL;
    }
    if (r < 0) { /* the store cannot say: what this replica knew (its calls need the store anyway) */
        log_warn("cannot read an API key from the store", "error=\"%s\"", store_errmsg(ks->st));
        return k ? &k->e : NULL;
    }
    return f.k && CRYPTO_memcmp(f.k->e.hash, h, 64) == 0 ? &f.k->e : NULL;
}

void api_keys_refresh(struct api_keys *ks, bool force)
{
    if ((force || ks->dirty || clock_mono_ms() - ks->loaded_at >= RELOAD_EVERY_MS) && !store_in_tx(ks->st))
        reload(ks);
}

void api_keys_stats(const struct api_keys *ks, long long *unknown_read, long long *unknown_unread)
{
    *unknown_read = ks->unknown_read;
    *unknown_unread = ks->unknown_unread;
}

void api_keys_changed(struct api_keys *ks)
{
    ks->dirty = true;
}

/* A fresh token, its hash and prefix. */
static void new_token(char token[4 + 2 * TOKEN_RANDOM + 1], char hash[STEP_ID_LEN])
{
    unsigned char raw[TOKEN_RANDOM];
    if (RAND_bytes(raw, sizeof raw) != 1) abort(); /* no randomness: never issue a guessable key */
    memcpy(token, "rbk_", 4);
    for (size_t i = 0; i < sizeof raw; i++) snprintf(token + 4 + 2 * i, 3, "%02x", raw[i]);
    identity_sha256_hex(token, strlen(token), hash);
    OPENSSL_cleanse(raw, sizeof raw);
}

static json_t *view(const struct rkey *k)
{
    char t[40];
    clock_format_iso(k->created_at, t, sizeof t);
    json_t *v = json_pack("{s:s, s:s, s:o, s:s, s:s}", "id", k->id, "name", k->name, "scopes",
                          scopes_json(k->e.scopes), "created_at", t, "prefix", k->prefix);
    if (k->revoked_at > 0) {
        clock_format_iso(k->revoked_at, t, sizeof t);
        json_object_set_new(v, "revoked_at", json_string(t));
    }
    return v;
}

static int save(struct api_keys *ks, const struct rkey *k, struct err *err)
{
    json_t *sc = scopes_json(k->e.scopes);
    char *scopes = json_dumps(sc, JSON_COMPACT);
    json_decref(sc);
    struct api_key_row row = {.name = k->name, .hash = k->e.hash, .prefix = k->prefix, .scopes = scopes,
                              .created_at = k->created_at, .revoked_at = k->revoked_at};
    snprintf(row.id, sizeof row.id, "%s", k->id);
    int r = store_api_key_put(ks->st, &row);
    free(scopes);
    if (r == 0) store_notify(ks->st, 'k', k->id); /* other replicas: api_keys_changed */
    if (r < 0)
        return err_set(err, 503, "storage_unavailable", "", "cannot save the API key: %s; retry shortly",
                       store_errmsg(ks->st));
    return 0;
}

/* The issued key: its view plus the token, which is never shown again. */
static json_t *issued(const struct rkey *k, const char *token)
{
    json_t *v = view(k);
    json_object_set_new(v, "token", json_string(token));
    return v;
}

int api_keys_create(struct api_keys *ks, const json_t *body, json_t **out, struct err *err)
{
    const json_t *name = json_object_get(body, "name"), *scopes = json_object_get(body, "scopes");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return err_invalid(err, "name", "name: required (what the key is for, e.g. \"ci-reader\")");
    if (json_string_length(name) > NAME_MAX_LEN || strlen(json_string_value(name)) != json_string_length(name))
        return err_invalid(err, "name", "name: at most %d bytes, no NUL", NAME_MAX_LEN);
    for (const unsigned char *c = (const unsigned char *)json_string_value(name); *c; c++)
        if (*c < 0x20 || *c == 0x7f) return err_invalid(err, "name", "name: no control characters");
    if (!json_is_array(scopes) || json_array_size(scopes) == 0)
        return err_invalid(err, "scopes", "scopes: required, a non-empty list of: executions:read, "
                                          "executions:write, approvals:read, approvals:write, agents:read, "
                                          "agents:write, policies:write, api_keys:manage");
    unsigned m = 0;
    size_t i;
    const json_t *v;
    json_array_foreach(scopes, i, v) {
        unsigned bit = 0;
        for (size_t j = 0; j < N_SCOPES && json_is_string(v); j++)
            if (!strcmp(json_string_value(v), scope_names[j])) bit = 1u << j;
        if (!bit)
            return err_set(err, 400, "validation_error", "scopes", "scopes[%zu]: %s is not a scope; use one of "
                           "executions:read, executions:write, approvals:read, approvals:write, agents:read, "
                           "agents:write, policies:write, api_keys:manage", i,
                           json_is_string(v) ? json_string_value(v) : "a non-string");
        m |= bit;
    }
    char id[UUID_STR_LEN], token[4 + 2 * TOKEN_RANDOM + 1];
    uuid_v7(id);
    struct rkey *k = add(ks, id);
    new_token(token, k->e.hash);
    k->name = xstrdup(json_string_value(name));
    snprintf(k->prefix, sizeof k->prefix, "%.*s", PREFIX_LEN, token);
    k->e.scopes = m;
    k->created_at = clock_now_ms();
    if (save(ks, k, err) < 0) {
        k->e.revoked = true; /* not in the store: never usable (the entry stays, see top) */
        OPENSSL_cleanse(token, sizeof token);
        return -1;
    }
    *out = issued(k, token);
    OPENSSL_cleanse(token, sizeof token);
    return 0;
}

int api_keys_list(struct api_keys *ks, json_t **out, struct err *err)
{
    api_keys_refresh(ks, true);
    json_t *arr = json_array();
    for (int i = 0; i < ks->n; i++)
        if (ks->v[i]->created_at > 0) json_array_append_new(arr, view(ks->v[i]));
    *out = arr;
    return 0;
}

static struct rkey *need(struct api_keys *ks, const char *id, struct err *err)
{
    struct rkey *k = find_id(ks, id);
    if (!k || k->created_at == 0)
        err_set(err, 404, "not_found", "id", "no API key with id \"%.64s\"; list them with GET /v0/api-keys", id);
    return k && k->created_at ? k : NULL;
}

int api_keys_rotate(struct api_keys *ks, const char *id, json_t **out, struct err *err)
{
    struct rkey *k = need(ks, id, err);
    if (!k) return -1;
    if (k->revoked_at > 0)
        return err_set(err, 409, "conflict", "id", "API key %s is revoked; create a new one", id);
    char token[4 + 2 * TOKEN_RANDOM + 1], old[STEP_ID_LEN], old_prefix[PREFIX_LEN + 1];
    memcpy(old, k->e.hash, sizeof old);
    memcpy(old_prefix, k->prefix, sizeof old_prefix);
    new_token(token, k->e.hash);
    snprintf(k->prefix, sizeof k->prefix, "%.*s", PREFIX_LEN, token);
    if (save(ks, k, err) < 0) {
        memcpy(k->e.hash, old, sizeof old);
        memcpy(k->prefix, old_prefix, sizeof old_prefix);
        OPENSSL_cleanse(token, sizeof token);
        return -1;
    }
    *out = issued(k, token);
    OPENSSL_cleanse(token, sizeof token);
    return 0;
}

int api_keys_revoke(struct api_keys *ks, const char *id, struct err *err)
{
    struct rkey *k = need(ks, id, err);
    if (!k) return -1;
    if (k->revoked_at > 0) return 0; /* repeatable */
    k->revoked_at = clock_now_ms();
    if (save(ks, k, err) < 0) {
        k->revoked_at = 0;
        return -1;
    }
    k->e.revoked = true;
    return 0;
}
