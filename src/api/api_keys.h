/*
 * api_keys.h - upstream's scoped API keys made at run time (/v0/api-keys), and the
 * key entries the API's auth hands to handlers (shared by api.c and api_keys.c).
 *
 * A run-time key is a random token shown once at creation (and at rotation); the
 * kernel keeps only its SHA-256 (in the store, so a restart and every replica have
 * it) and its scopes. Config-file keys (api_keys: in the config) keep their roles and
 * sit beside them: an admin key there is upstream's full-access bootstrap token.
 */
#ifndef REBUNO_API_API_KEYS_H
#define REBUNO_API_API_KEYS_H

#include <jansson.h>
#include <stdbool.h>

#include "api/api.h"
#include "base/err.h"
#include "kernel/model.h"
#include "store/store.h"

/* Upstream's scopes; write does not include read. */
enum {
    SCOPE_EXEC_READ = 1u << 0,     /* executions:read */
    SCOPE_EXEC_WRITE = 1u << 1,    /* executions:write */
    SCOPE_APPR_READ = 1u << 2,     /* approvals:read */
    SCOPE_APPR_WRITE = 1u << 3,    /* approvals:write */
    SCOPE_AGENTS_READ = 1u << 4,   /* agents:read */
    SCOPE_AGENTS_WRITE = 1u << 5,  /* agents:write */
    SCOPE_POLICIES_WRITE = 1u << 6, /* policies:write */
    SCOPE_KEYS_MANAGE = 1u << 7,   /* api_keys:manage */
};

/* Who a request's key is (http_req_data). scopes 0: a config key, judged by role. */
struct key_entry {
    char hash[STEP_ID_LEN];
    enum api_role role;
    char *agent;
    unsigned scopes;
    bool revoked;
};

struct api_keys;

struct api_keys *api_keys_new(struct store *st);
void api_keys_free(struct api_keys *ks);
/* The run-time key whose token this is (revoked ones too: check ->revoked), or NULL.
 * On a shared store (PostgreSQL) a live key's row is read each time, so a key made,
 * revoked or rotated on another replica is judged as the store has it at once; unknown
 * tokens are read at most 100 a second and remembered (api_keys.c). Entries stay valid
 * until api_keys_free. */
const struct key_entry *api_keys_lookup(struct api_keys *ks, const char *token);
/* Read every key again (revocations on other replicas); at most every few seconds. */
void api_keys_refresh(struct api_keys *ks, bool force);
/* Another replica changed a key (store_watch kind 'k'): read them again before the next
 * lookup that misses or the next refresh. */
void api_keys_changed(struct api_keys *ks);
/* Tokens this replica did not know: how many it read from the store, and how many it
 * refused unread (remembered as unknown, or past the reads allowed per second). */
void api_keys_stats(const struct api_keys *ks, long long *unknown_read, long long *unknown_unread);
/* "executions:read, ..." of a mask, into buf. */
const char *api_scope_names(unsigned scopes, char *buf, size_t n);

/* The operations of the routes, each inside the caller's store operation. */
int api_keys_create(struct api_keys *ks, const json_t *body, json_t **out, struct err *err);
int api_keys_list(struct api_keys *ks, json_t **out, struct err *err);
int api_keys_rotate(struct api_keys *ks, const char *id, json_t **out, struct err *err);
int api_keys_revoke(struct api_keys *ks, const char *id, struct err *err);

#endif
