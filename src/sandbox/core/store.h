/*
 * store.h - sandboxd's metadata on SQLite: one row per sandbox.
 *
 * Files live on disk under the state folder; this table says what sandboxes exist,
 * their configuration and their last stable state (running, paused, stopped).
 * Transitions happen synchronously on the loop, so the table never holds a
 * "starting" or "stopping" state that could get stuck. Single connection, loop
 * thread only, WAL with synchronous=FULL, statements prepared once.
 */
#ifndef REBUNO_SANDBOX_STORE_H
#define REBUNO_SANDBOX_STORE_H

#include <stdint.h>

#include "base/err.h"

struct sbx_store;

/* The region a sandbox records when its create names none (one host is one region). */
#define SBX_REGION_DEFAULT "local"
#define SBX_REGION_MAX 32

/* The persisted part of a sandbox. JSON members are compact JSON text. */
struct sbx_row {
    const char *id, *name, *state, *image, *metadata, *env, *on_timeout, *stop_reason;
    const char *ext; /* JSON of the later additions (snapshot.c); NULL: "{}" */
    const char *region; /* [a-z0-9-], at most SBX_REGION_MAX; NULL: SBX_REGION_DEFAULT */
    int64_t slot, vcpus, memory_mb, pids_max, timeout_ms;
    int64_t created_at, updated_at, started_at, stopped_at, expires_at, session_seq;
};

struct sbx_store *sbx_store_open(const char *path, struct err *err);
/* The connection, for the snapshots and drives tables (snapshot.c, drive.c). */
struct sqlite3 *sbx_store_db(struct sbx_store *st);
void sbx_store_close(struct sbx_store *st);
/* Insert or update the row with this id. */
int sbx_store_save(struct sbx_store *st, const struct sbx_row *r, struct err *err);
int sbx_store_delete(struct sbx_store *st, const char *id, struct err *err);
/* Call fn for every row (strings valid during the call only), in creation order. */
int sbx_store_load(struct sbx_store *st, void (*fn)(const struct sbx_row *r, void *arg),
                   void *arg, struct err *err);

#endif
