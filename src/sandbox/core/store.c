/*
 * store.c - the sandboxes table on SQLite (see store.h).
 */
#include "sandbox/core/store.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static const char *schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;"
    "CREATE TABLE IF NOT EXISTS sandboxes("
    " id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, state TEXT NOT NULL,"
    " slot INTEGER NOT NULL UNIQUE, image TEXT NOT NULL, metadata TEXT NOT NULL,"
    " env TEXT NOT NULL, vcpus INTEGER NOT NULL, memory_mb INTEGER NOT NULL,"
    " pids_max INTEGER NOT NULL, timeout_ms INTEGER NOT NULL, on_timeout TEXT NOT NULL,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, started_at INTEGER NOT NULL,"
    " stopped_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, session_seq INTEGER NOT NULL,"
    " stop_reason TEXT NOT NULL) STRICT;"
    "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '1');";

/*
 * Later columns, added in place so a state folder made by an older daemon still opens:
 *   schema 2: sandboxes.ext, for what later features store per sandbox;
 *   schema 3: sandboxes.region, the region the client asked for ("local" by default).
 * Each step runs in its own transaction and only when its column is missing, so a
 * crash between steps is finished by the next open.
 */
static const struct {
    const char *column, *sql;
} steps[] = {
    {"ext", "ALTER TABLE sandboxes ADD COLUMN ext TEXT NOT NULL DEFAULT '{}'"},
    {"region", "ALTER TABLE sandboxes ADD COLUMN region TEXT NOT NULL DEFAULT '" SBX_REGION_DEFAULT
               "'"},
};

static int migrate(sqlite3 *db, char **msg)
{
    sqlite3_stmt *q;
    bool have[sizeof steps / sizeof steps[0]] = {false};
    if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('sandboxes')", -1, &q, NULL) !=
        SQLITE_OK)
        return -1;
    while (sqlite3_step(q) == SQLITE_ROW)
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
            have[i] |= !strcmp((const char *)sqlite3_column_text(q, 0), steps[i].column);
    sqlite3_finalize(q);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (have[i]) continue;
        char sql[256];
        snprintf(sql, sizeof sql,
                 "BEGIN; %s; UPDATE meta SET value = '%zu' WHERE key = 'schema_version'; COMMIT;",
                 steps[i].sql, i + 2);
        if (sqlite3_exec(db, sql, NULL, NULL, msg) != SQLITE_OK) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    return 0;
}

struct sbx_store {
    sqlite3 *db;
    sqlite3_stmt *save, *del, *load;
};

static int db_err(struct sbx_store *st, struct err *err, const char *what)
{
    return err_set(err, 500, "storage_error", "", "%s: %s", what, sqlite3_errmsg(st->db));
}

struct sbx_store *sbx_store_open(const char *path, struct err *err)
{
    struct sbx_store *st = xcalloc(1, sizeof *st);
    if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        err_set(err, 500, "storage_error", "", "cannot open %s: %s", path,
                st->db ? sqlite3_errmsg(st->db) : "out of memory");
        sbx_store_close(st);
        return NULL;
    }
    sqlite3_busy_timeout(st->db, 5000);
    char *msg = NULL;
    if (sqlite3_exec(st->db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
                     NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(st->db, schema_sql, NULL, NULL, &msg) != SQLITE_OK ||
        migrate(st->db, &msg) < 0) {
        err_set(err, 500, "storage_error", "", "cannot initialise %s: %s", path,
                msg ? msg : "?");
        sqlite3_free(msg);
        sbx_store_close(st);
        return NULL;
    }
    static const char *save_sql =
        "INSERT INTO sandboxes(id, name, state, slot, image, metadata, env, vcpus, memory_mb,"
        " pids_max, timeout_ms, on_timeout, created_at, updated_at, started_at, stopped_at,"
        " expires_at, session_seq, stop_reason, ext, region)"
        " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21)"
        " ON CONFLICT(id) DO UPDATE SET name=?2, state=?3, slot=?4, image=?5, metadata=?6,"
        " env=?7, vcpus=?8, memory_mb=?9, pids_max=?10, timeout_ms=?11, on_timeout=?12,"
        " created_at=?13, updated_at=?14, started_at=?15, stopped_at=?16, expires_at=?17,"
        " session_seq=?18, stop_reason=?19, ext=?20, region=?21";
    if (sqlite3_prepare_v2(st->db, save_sql, -1, &st->save, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->db, "DELETE FROM sandboxes WHERE id = ?1", -1, &st->del, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(st->db,
                           "SELECT id, name, state, slot, image, metadata, env, vcpus, memory_mb,"
                           " pids_max, timeout_ms, on_timeout, created_at, updated_at, started_at,"
                           " stopped_at, expires_at, session_seq, stop_reason, ext, region FROM sandboxes"
                           " ORDER BY created_at, id",
                           -1, &st->load, NULL) != SQLITE_OK) {
        db_err(st, err, "prepare");
        sbx_store_close(st);
        return NULL;
    }
    return st;
}

struct sqlite3 *sbx_store_db(struct sbx_store *st)
{
    return st->db;
}

void sbx_store_close(struct sbx_store *st)
{
    if (!st) return;
    sqlite3_finalize(st->save);
    sqlite3_finalize(st->del);
    sqlite3_finalize(st->load);
    if (st->db) sqlite3_close(st->db);
    free(st);
}

int sbx_store_save(struct sbx_store *st, const struct sbx_row *r, struct err *err)
{
    sqlite3_stmt *s = st->save;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, r->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, r->state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, r->slot);
    sqlite3_bind_text(s, 5, r->image, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, r->metadata, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, r->env, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, r->vcpus);
    sqlite3_bind_int64(s, 9, r->memory_mb);
    sqlite3_bind_int64(s, 10, r->pids_max);
    sqlite3_bind_int64(s, 11, r->timeout_ms);
    sqlite3_bind_text(s, 12, r->on_timeout, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 13, r->created_at);
    sqlite3_bind_int64(s, 14, r->updated_at);
    sqlite3_bind_int64(s, 15, r->started_at);
    sqlite3_bind_int64(s, 16, r->stopped_at);
    sqlite3_bind_int64(s, 17, r->expires_at);
    sqlite3_bind_int64(s, 18, r->session_seq);
    sqlite3_bind_text(s, 19, r->stop_reason ? r->stop_reason : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 20, r->ext ? r->ext : "{}", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 21, r->region ? r->region : SBX_REGION_DEFAULT, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE) return db_err(st, err, "save sandbox");
    return 0;
}

int sbx_store_delete(struct sbx_store *st, const char *id, struct err *err)
{
    sqlite3_stmt *s = st->del;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE) return db_err(st, err, "delete sandbox");
    return 0;
}

static const char *col(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

int sbx_store_load(struct sbx_store *st, void (*fn)(const struct sbx_row *r, void *arg),
                   void *arg, struct err *err)
{
    sqlite3_stmt *s = st->load;
    sqlite3_reset(s);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct sbx_row r = {
            .id = col(s, 0), .name = col(s, 1), .state = col(s, 2),
            .slot = sqlite3_column_int64(s, 3), .image = col(s, 4), .metadata = col(s, 5),
            .env = col(s, 6), .vcpus = sqlite3_column_int64(s, 7),
            .memory_mb = sqlite3_column_int64(s, 8), .pids_max = sqlite3_column_int64(s, 9),
            .timeout_ms = sqlite3_column_int64(s, 10), .on_timeout = col(s, 11),
            .created_at = sqlite3_column_int64(s, 12), .updated_at = sqlite3_column_int64(s, 13),
            .started_at = sqlite3_column_int64(s, 14), .stopped_at = sqlite3_column_int64(s, 15),
            .expires_at = sqlite3_column_int64(s, 16), .session_seq = sqlite3_column_int64(s, 17),
            .stop_reason = col(s, 18), .ext = col(s, 19), .region = col(s, 20),
        };
        fn(&r, arg);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return db_err(st, err, "load sandboxes");
    return 0;
}
