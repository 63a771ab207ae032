/*
 * store_sqlite.c - the embedded SQLite store.
 *
 * One connection, used only from the kernel's loop thread. WAL journal with
 * synchronous=FULL: a COMMIT returns only after the WAL is fsynced, so every
 * acknowledged write survives kill -9 and power loss. Throughput comes from group
 * commit (the kernel batches many requests into one transaction), not from
 * weakening durability. Every statement is prepared once at open. The WAL is kept
 * short (wal_bound) and its writes are coalesced into one pwrite per commit
 * (walbuf.h).
 *
 * Tables are STRICT. Executions carry their current dispatch (queue state, lease)
 * inline, so claiming, renewing and expiring a lease is one row update. Events are
 * rows appended in commit order with a unique index on (execution_id, seq) (schema
 * 4), steps rows with one unique index on (execution_id, step_id) (schema 5); see
 * the migrations for why.
 */
#include "store/store_int.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "store/walbuf.h"

static const char *schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;"
    "CREATE TABLE IF NOT EXISTS agents(name TEXT PRIMARY KEY, created_at INTEGER NOT NULL) STRICT;"
    "CREATE TABLE IF NOT EXISTS executions("
    " id TEXT PRIMARY KEY, agent TEXT NOT NULL, session TEXT, input TEXT NOT NULL,"
    " status TEXT NOT NULL, output TEXT, state TEXT, failure_reason TEXT,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, deadline_at INTEGER NOT NULL,"
    " last_seq INTEGER NOT NULL, dispatch_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " dstate TEXT NOT NULL, queued_at INTEGER NOT NULL, worker_id TEXT NOT NULL,"
    " lease_deadline INTEGER NOT NULL, lease_ms INTEGER NOT NULL, max_attempts INTEGER NOT NULL"
    ") STRICT;"
    "CREATE INDEX IF NOT EXISTS executions_queue ON executions(agent, queued_at) WHERE dstate='queued';"
    "CREATE INDEX IF NOT EXISTS executions_lease ON executions(lease_deadline) WHERE dstate='leased';"
    "CREATE INDEX IF NOT EXISTS executions_deadline ON executions(deadline_at)"
    " WHERE deadline_at > 0 AND status IN ('pending','running','blocked');"
    "CREATE INDEX IF NOT EXISTS executions_agent ON executions(agent, id);"
    "CREATE INDEX IF NOT EXISTS executions_status ON executions(status, id);"
    "CREATE TABLE IF NOT EXISTS events(execution_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " type TEXT NOT NULL, payload TEXT NOT NULL, at INTEGER NOT NULL,"
    " PRIMARY KEY(execution_id, seq)) STRICT, WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS steps(step_id TEXT PRIMARY KEY, execution_id TEXT NOT NULL,"
    " kind TEXT NOT NULL, target TEXT NOT NULL, args_hash TEXT NOT NULL, occurrence INTEGER NOT NULL,"
    " idempotency TEXT NOT NULL, status TEXT NOT NULL, args TEXT NOT NULL, result TEXT, error TEXT,"
    " rule_id TEXT, approval_id TEXT NOT NULL, runs INTEGER NOT NULL, indeterminate INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, completed_at INTEGER NOT NULL) STRICT;"
    "CREATE INDEX IF NOT EXISTS steps_execution ON steps(execution_id, created_at);"
    "CREATE INDEX IF NOT EXISTS steps_indeterminate ON steps(execution_id, kind, target, args_hash)"
    " WHERE indeterminate = 1;"
    "CREATE TABLE IF NOT EXISTS step_counters(execution_id TEXT NOT NULL, kind TEXT NOT NULL,"
    " target TEXT NOT NULL, args_hash TEXT NOT NULL, consumed INTEGER NOT NULL,"
    " PRIMARY KEY(execution_id, kind, target, args_hash)) STRICT, WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS approvals(id TEXT PRIMARY KEY, execution_id TEXT NOT NULL,"
    " step_id TEXT NOT NULL, status TEXT NOT NULL, rule_id TEXT, reason TEXT, message TEXT,"
    " approvers TEXT, timeout_at INTEGER NOT NULL, created_at INTEGER NOT NULL,"
    " decided_at INTEGER NOT NULL, decided_by TEXT, rationale TEXT) STRICT;"
    "CREATE INDEX IF NOT EXISTS approvals_pending ON approvals(timeout_at) WHERE status='pending';"
    "CREATE INDEX IF NOT EXISTS approvals_execution ON approvals(execution_id, created_at);"
    "INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '1');";

/* Schema migrations, applied in order to databases older than their version. */
static const char *migrations[] = {
    /* 2: sessions, forks, resources and checkpoints */
    "ALTER TABLE executions ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE executions ADD COLUMN forked_from TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE executions ADD COLUMN fork_seq INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE executions ADD COLUMN restoration TEXT;"
    "ALTER TABLE steps ADD COLUMN resources TEXT;"
    "CREATE INDEX executions_session ON executions(session, id) WHERE session IS NOT NULL;"
    "CREATE TABLE resources(execution_id TEXT NOT NULL, key TEXT NOT NULL, driver_id TEXT NOT NULL,"
    " configuration TEXT NOT NULL, coverage_reuse INTEGER NOT NULL, every_steps INTEGER NOT NULL,"
    " on_completion INTEGER NOT NULL, registered_seq INTEGER NOT NULL, generation INTEGER NOT NULL,"
    " count INTEGER NOT NULL, binding TEXT, checkpoint_ref TEXT,"
    " PRIMARY KEY(execution_id, key)) STRICT, WITHOUT ROWID;"
    "CREATE TABLE checkpoints(execution_id TEXT NOT NULL, key TEXT NOT NULL, generation INTEGER NOT NULL,"
    " ref TEXT NOT NULL, covered_seq INTEGER NOT NULL, invalidated_seq INTEGER NOT NULL,"
    " PRIMARY KEY(execution_id, key, generation, covered_seq)) STRICT, WITHOUT ROWID;",
    /* 3: the request id of the last submission per step key, so a resent submission
     * whose reply was lost maps to the same step */
    "ALTER TABLE step_counters ADD COLUMN last_request TEXT;",
    /* 4: events in a rowid table (appended in commit order) with a unique index on
     * (execution_id, seq). Keyed by (execution_id, seq) WITHOUT ROWID, every commit
     * wrote into one leaf page per active execution, each holding whole events: about
     * 6 pages per round trip at 32 agents. Now the rows of a batch share a few tail
     * pages and only the small index entries go to one page per execution. */
    "CREATE TABLE events4(execution_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,"
    " payload TEXT NOT NULL, at INTEGER NOT NULL) STRICT;"
    "INSERT INTO events4(execution_id, seq, type, payload, at)"
    " SELECT execution_id, seq, type, payload, at FROM events ORDER BY execution_id, seq;"
    "DROP TABLE events;"
    "ALTER TABLE events4 RENAME TO events;"
    "CREATE UNIQUE INDEX events_execution ON events(execution_id, seq);",
    /* 5: steps with one unique index on (execution_id, step_id) instead of a
     * step_id key (a random hash: every insert dirtied a random leaf) plus an
     * (execution_id, created_at) index. Step ids include their execution's id, and
     * every lookup names the execution; listing an execution's steps sorts its rows.
     * Rows keep their rowids, so the listing order (created_at, rowid) is unchanged.
     * The index reuses the name steps_execution so that schema_sql's CREATE INDEX IF
     * NOT EXISTS of the old index, run at every open, leaves it alone. */
    "CREATE TABLE steps5(step_id TEXT NOT NULL, execution_id TEXT NOT NULL, kind TEXT NOT NULL,"
    " target TEXT NOT NULL, args_hash TEXT NOT NULL, occurrence INTEGER NOT NULL, idempotency TEXT NOT NULL,"
    " status TEXT NOT NULL, args TEXT NOT NULL, result TEXT, error TEXT, rule_id TEXT,"
    " approval_id TEXT NOT NULL, runs INTEGER NOT NULL, indeterminate INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, completed_at INTEGER NOT NULL, resources TEXT) STRICT;"
    "INSERT INTO steps5(rowid, step_id, execution_id, kind, target, args_hash, occurrence, idempotency,"
    " status, args, result, error, rule_id, approval_id, runs, indeterminate, created_at, completed_at,"
    " resources)"
    " SELECT rowid, step_id, execution_id, kind, target, args_hash, occurrence, idempotency, status, args,"
    " result, error, rule_id, approval_id, runs, indeterminate, created_at, completed_at, resources"
    " FROM steps ORDER BY rowid;"
    "DROP TABLE steps;"
    "ALTER TABLE steps5 RENAME TO steps;"
    "CREATE UNIQUE INDEX steps_execution ON steps(execution_id, step_id);"
    "CREATE INDEX steps_indeterminate ON steps(execution_id, kind, target, args_hash)"
    " WHERE indeterminate = 1;",
    /* 6: what is set at run time and must survive a restart: agents' settings and
     * policies, and API keys (their tokens' hashes) */
    "ALTER TABLE agents ADD COLUMN settings TEXT;"
    "CREATE TABLE api_keys(id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,"
    " prefix TEXT NOT NULL, scopes TEXT NOT NULL, created_at INTEGER NOT NULL,"
    " revoked_at INTEGER NOT NULL) STRICT;"
    "CREATE INDEX steps_rule ON steps(rule_id, created_at) WHERE rule_id IS NOT NULL;",
    /* 7: an execution's forks (GET /v0/executions/{id}/forks); only forks are in it */
    "CREATE INDEX executions_forks ON executions(forked_from, id) WHERE forked_from != '';",
};

enum stmt_id {
    S_BEGIN, S_COMMIT, S_ROLLBACK, S_SAVEPOINT, S_RELEASE, S_ROLLBACK_TO,
    S_AGENT_UPSERT, S_AGENTS,
    S_EXEC_INSERT, S_EXEC_GET, S_EXEC_UPDATE, S_EXEC_NEXT_QUEUED, S_EXEC_EXPIRED,
    S_EXEC_PAST_DEADLINE, S_NEXT_LEASE, S_NEXT_DEADLINE, S_NEXT_APPROVAL,
    S_EVENT_INSERT, S_EVENTS,
    S_STEP_GET, S_STEP_INSERT, S_STEP_UPDATE, S_STEPS, S_STEPS_STATUS, S_STEP_INDET,
    S_COUNTER_GET, S_COUNTER_SET, S_COUNTERS_CLEAR,
    S_APPROVAL_INSERT, S_APPROVAL_GET, S_APPROVAL_UPDATE, S_APPROVALS_EXPIRED,
    S_SESSION_ACTIVE, S_SESSION_WAITING, S_SESSION_LAST_COMPLETED, S_SESSION_EXISTS,
    S_RESOURCE_GET, S_RESOURCE_INSERT, S_RESOURCE_UPDATE, S_RESOURCES,
    S_CHECKPOINT_INSERT, S_CHECKPOINTS, S_CHECKPOINT_INVALIDATE, S_CHECKPOINT_COVERED, S_CHECKPOINT_FIND,
    S_COUNT
};

static const char *stmt_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_SAVEPOINT] = "SAVEPOINT op",
    [S_RELEASE] = "RELEASE op",
    [S_ROLLBACK_TO] = "ROLLBACK TO op",
    [S_AGENT_UPSERT] = "INSERT INTO agents(name, created_at) VALUES(?1, ?2) ON CONFLICT DO NOTHING",
    [S_AGENTS] = "SELECT name FROM agents ORDER BY name",
    [S_EXEC_INSERT] = "INSERT INTO executions(" EXEC_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                      "?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24)",
    [S_EXEC_GET] = "SELECT " EXEC_SELECT " FROM executions WHERE id = ?1",
    [S_EXEC_UPDATE] = "UPDATE executions SET agent=?2, session=?3, input=?4, status=?5, output=?6,"
                      " state=?7, failure_reason=?8, created_at=?9, updated_at=?10,"
                      " deadline_at=?11, last_seq=?12, dispatch_id=?13, attempt=?14, dstate=?15,"
                      " queued_at=?16, worker_id=?17, lease_deadline=?18, lease_ms=?19,"
                      " max_attempts=?20, parent_id=?21, forked_from=?22, fork_seq=?23,"
                      " restoration=?24 WHERE id=?1",
    [S_EXEC_NEXT_QUEUED] = "SELECT id FROM executions WHERE dstate='queued' AND agent=?1"
                           " ORDER BY queued_at, id LIMIT 1",
    [S_EXEC_EXPIRED] = "SELECT id FROM executions WHERE dstate='leased' AND lease_deadline <= ?1"
                       " ORDER BY lease_deadline LIMIT ?2",
    [S_EXEC_PAST_DEADLINE] = "SELECT id FROM executions WHERE deadline_at > 0 AND deadline_at <= ?1"
                             " AND status IN ('pending','running','blocked') LIMIT ?2",
    [S_NEXT_LEASE] = "SELECT min(lease_deadline) FROM executions WHERE dstate='leased'",
    [S_NEXT_DEADLINE] = "SELECT min(deadline_at) FROM executions WHERE deadline_at > 0"
                        " AND status IN ('pending','running','blocked')",
    [S_NEXT_APPROVAL] = "SELECT min(timeout_at) FROM approvals WHERE status='pending'",
    [S_EVENT_INSERT] = "INSERT INTO events(execution_id, seq, type, payload, at) VALUES(?1,?2,?3,?4,?5)",
    [S_EVENTS] = "SELECT seq, type, payload, at FROM events WHERE execution_id=?1 AND seq > ?2"
                 " ORDER BY seq LIMIT ?3",
    [S_STEP_GET] = "SELECT " STEP_COLS " FROM steps WHERE execution_id = ?1 AND step_id = ?2",
    [S_STEP_INSERT] = "INSERT INTO steps(" STEP_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                      "?12,?13,?14,?15,?16,?17,?18)",
    [S_STEP_UPDATE] = "UPDATE steps SET status=?8, result=?10, error=?11, rule_id=?12,"
                      " approval_id=?13, runs=?14, indeterminate=?15, completed_at=?17,"
                      " idempotency=?7 WHERE execution_id=?2 AND step_id=?1 AND kind=?3"
                      " AND target=?4 AND args_hash=?5 AND occurrence=?6 AND args=?9"
                      " AND created_at=?16",
    [S_STEPS] = "SELECT " STEP_COLS " FROM steps WHERE execution_id=?1 ORDER BY created_at, rowid",
    [S_STEPS_STATUS] = "SELECT " STEP_COLS " FROM steps WHERE execution_id=?1 AND status=?2"
                       " ORDER BY created_at, rowid",
    [S_STEP_INDET] = "SELECT 1 FROM steps WHERE execution_id=?1 AND kind=?2 AND target=?3"
                     " AND args_hash=?4 AND indeterminate=1 LIMIT 1",
    [S_COUNTER_GET] = "SELECT consumed, last_request FROM step_counters WHERE execution_id=?1 AND kind=?2"
                      " AND target=?3 AND args_hash=?4",
    [S_COUNTER_SET] = "INSERT INTO step_counters(execution_id, kind, target, args_hash, consumed, last_request)"
                      " VALUES(?1,?2,?3,?4,?5,?6) ON CONFLICT DO UPDATE SET"
                      " consumed = max(consumed, excluded.consumed), last_request = excluded.last_request",
    [S_COUNTERS_CLEAR] = "DELETE FROM step_counters WHERE execution_id=?1",
    [S_APPROVAL_INSERT] = "INSERT INTO approvals(" APPROVAL_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,"
                          "?8,?9,?10,?11,?12,?13)",
    [S_APPROVAL_GET] = "SELECT " APPROVAL_COLS " FROM approvals WHERE id=?1",
    [S_APPROVAL_UPDATE] = "UPDATE approvals SET status=?4, decided_at=?11, decided_by=?12,"
                          " rationale=?13 WHERE id=?1",
    [S_APPROVALS_EXPIRED] = "SELECT id FROM approvals WHERE status='pending' AND timeout_at <= ?1"
                            " ORDER BY timeout_at LIMIT ?2",
    [S_SESSION_ACTIVE] = "SELECT id FROM executions WHERE session=?1 AND (status IN ('running','blocked')"
                         " OR (status='pending' AND dstate != 'none')) LIMIT 1",
    [S_SESSION_WAITING] = "SELECT id FROM executions WHERE session=?1 AND status='pending' AND dstate='none'"
                          " ORDER BY id LIMIT 1",
    [S_SESSION_LAST_COMPLETED] = "SELECT id FROM executions WHERE session=?1 AND agent=?2"
                                 " AND status='completed' ORDER BY id DESC LIMIT 1",
    [S_SESSION_EXISTS] = "SELECT id FROM executions WHERE session=?1 LIMIT 1",
    [S_RESOURCE_GET] = "SELECT " RESOURCE_COLS " FROM resources WHERE execution_id=?1 AND key=?2",
    [S_RESOURCE_INSERT] = "INSERT INTO resources(" RESOURCE_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    [S_RESOURCE_UPDATE] = "UPDATE resources SET every_steps=?6, on_completion=?7, generation=?9, count=?10,"
                          " binding=?11, checkpoint_ref=?12"
                          " WHERE execution_id=?1 AND key=?2",
    [S_RESOURCES] = "SELECT " RESOURCE_COLS " FROM resources WHERE execution_id=?1 ORDER BY registered_seq, key",
    [S_CHECKPOINT_INSERT] = "INSERT OR REPLACE INTO checkpoints(execution_id, key, generation, ref, covered_seq,"
                            " invalidated_seq) VALUES(?1,?2,?3,?4,?5,?6)",
    [S_CHECKPOINTS] = "SELECT execution_id, key, generation, ref, covered_seq, invalidated_seq FROM checkpoints"
                      " WHERE execution_id=?1 ORDER BY covered_seq, key",
    [S_CHECKPOINT_INVALIDATE] = "UPDATE checkpoints SET invalidated_seq=?4 WHERE execution_id=?1 AND key=?2"
                                " AND generation=?3 AND invalidated_seq=0",
    [S_CHECKPOINT_COVERED] = "SELECT 1 FROM checkpoints WHERE execution_id=?1 AND key=?2 AND generation=?3"
                             " AND invalidated_seq=0 LIMIT 1",
    [S_CHECKPOINT_FIND] = "SELECT covered_seq FROM checkpoints WHERE execution_id=?1 AND key=?2 AND generation=?3"
                          " AND ref=?4 LIMIT 1",
};

struct sq {
    struct store base; /* first: the public handle */
    sqlite3 *db;
    sqlite3_stmt *stmt[S_COUNT];
    bool in_tx;
    /* WAL checkpoints run on a thread of their own (own connection), so copying
     * pages back into the database never stalls a commit on the loop thread. */
    pthread_t ckpt_thread;
    bool ckpt_running;
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;
    bool ckpt_stop, ckpt_kick;
    /* Under ckpt_mu: frames the thread's last checkpoint had copied back, and the WAL
     * generation it belongs to (bumped whenever the loop thread restarts the WAL). */
    int ckpt_done, ckpt_gen;
    int wal_frames; /* frames in the WAL after the last commit (loop thread only) */
    char *path;
    /* Write-through cache of execution rows (exec_cache_*), so the two requests of a
     * step round trip do not each read the row and derive last_seq from the events. */
    struct exec_slot *exec_cache;
};

#define CHECKPOINT_INTERVAL_MS 100
/* Restarting the WAL. SQLite rewrites the WAL from its start only when a write
 * transaction begins while every frame has been copied back. The checkpoint thread
 * can only copy frames older than the loop connection's snapshot, and the loop opens
 * the next batch right after a commit, so under steady load that never happens and
 * the WAL grows without bound (a GiB in seconds at 32 agents): every commit then
 * appends to fresh blocks, which the file system must allocate and zero, and the
 * fsync also writes the inode. Once the WAL holds WAL_RESTART_FRAMES, the loop thread
 * therefore copies back the small tail the thread has not (at most WAL_TAIL_FRAMES,
 * else it wakes the thread and tries after a later commit) right after a commit,
 * while no transaction is open: the next batch then rewrites the WAL from its start,
 * over blocks that are already allocated and cached. */
#define WAL_RESTART_FRAMES 4096
#define WAL_TAIL_FRAMES 1024

static void *checkpointer(void *arg)
{
    struct sq *st = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(st->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL; /* the main connection still works; the WAL just grows until close */
    }
    sqlite3_busy_timeout(db, 1000);
    sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
    pthread_mutex_lock(&st->ckpt_mu);
    while (!st->ckpt_stop) {
        if (!st->ckpt_kick) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += CHECKPOINT_INTERVAL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&st->ckpt_cv, &st->ckpt_mu, &ts);
            if (st->ckpt_stop) break;
        }
        st->ckpt_kick = false;
        int gen = st->ckpt_gen, done = 0;
        pthread_mutex_unlock(&st->ckpt_mu);
        if (sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, &done) != SQLITE_OK) done = 0;
        pthread_mutex_lock(&st->ckpt_mu);
        if (gen == st->ckpt_gen) st->ckpt_done = done;
    }
    pthread_mutex_unlock(&st->ckpt_mu);
    sqlite3_close(db);
    return NULL;
}

/* --- the execution cache ---
 *
 * Every write to executions and events goes through this file (store_exec_insert,
 * store_exec_update, store_event_append), so a cached row can be kept equal to the
 * stored one: an update replaces it, an appended event advances its last_seq, and
 * anything that may undo writes (rolling back a savepoint or the batch) empties the
 * cache. Only rows read by store_exec_get are cached; direct-mapped by id, a
 * collision evicts. The cache holds committed and uncommitted rows alike, exactly as
 * the connection itself sees them. */
#define EXEC_CACHE_SLOTS 1024 /* power of two */

struct exec_slot {
    bool used;
    /* The execution has no resources rows: found by store_resources_each, cleared by
     * store_resource_insert. Most executions declare none, and every step that runs
     * asks (k_resources_touch); this spares that query. */
    bool no_resources;
    struct execution e;
};

static struct exec_slot *exec_slot_of(struct sq *st, const char *id)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return &st->exec_cache[h & (EXEC_CACHE_SLOTS - 1)];
}

/* The cached row of id, or NULL. */
static struct exec_slot *exec_cache_find(struct sq *st, const char *id)
{
    struct exec_slot *s = exec_slot_of(st, id);
    return s->used && strcmp(s->e.id, id) == 0 ? s : NULL;
}

static void exec_cache_put(struct sq *st, const struct execution *e)
{
    struct exec_slot *s = exec_slot_of(st, e->id);
    bool same = s->used && strcmp(s->e.id, e->id) == 0;
    if (s->used) execution_fini(&s->e);
    store_exec_copy(&s->e, e);
    s->used = true;
    if (!same) s->no_resources = false;
}

static void exec_cache_clear(struct sq *st)
{
    for (int i = 0; st->exec_cache && i < EXEC_CACHE_SLOTS; i++) {
        if (!st->exec_cache[i].used) continue;
        execution_fini(&st->exec_cache[i].e);
        st->exec_cache[i].used = false;
    }
}

/* --- helpers --- */

static int rc_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK: case SQLITE_DONE: case SQLITE_ROW: return 0;
    case SQLITE_CONSTRAINT: return -EEXIST;
    case SQLITE_BUSY: case SQLITE_LOCKED: return -EBUSY;
    case SQLITE_FULL: return -ENOSPC;
    case SQLITE_NOMEM: return -ENOMEM;
    default: return -EIO;
    }
}

static sqlite3_stmt *use(struct sq *st, enum stmt_id id)
{
    sqlite3_stmt *s = st->stmt[id];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else sqlite3_bind_null(s, i);
}

static char *col_dup(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? xstrndup((const char *)t, (size_t)sqlite3_column_bytes(s, i)) : NULL;
}

static void col_copy(sqlite3_stmt *s, int i, char *dst, size_t n)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    snprintf(dst, n, "%s", t ? (const char *)t : "");
}

/* Run a statement that returns no rows. */
static int run(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc_errno(rc);
    sqlite3_reset(s);
    return r;
}

/* --- open / close / transactions --- */

static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    ((struct sq *)arg)->wal_frames = frames;
    return SQLITE_OK;
}

/* Bring an older database up to the current schema, one version per transaction. */
static int migrate(struct sq *st, char *errbuf, size_t errlen)
{
    for (;;) {
        sqlite3_stmt *q;
        int version = 0;
        if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key='schema_version'", -1, &q, NULL) != SQLITE_OK)
            goto fail;
        if (sqlite3_step(q) == SQLITE_ROW) version = sqlite3_column_int(q, 0);
        sqlite3_finalize(q);
        int n = (int)(sizeof migrations / sizeof migrations[0]);
        if (version > n + 1) {
            snprintf(errbuf, errlen, "the database has schema %d, newer than this rebuno's %d: run a newer rebuno",
                     version, n + 1);
            return -1;
        }
        if (version == n + 1) return 0;
        char *sql = xasprintf("BEGIN IMMEDIATE; %s UPDATE meta SET value='%d' WHERE key='schema_version'; COMMIT;",
                              migrations[version - 1], version + 1);
        char *msg = NULL;
        int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);
        free(sql);
        if (rc != SQLITE_OK) {
            snprintf(errbuf, errlen, "cannot migrate the database to schema %d: %s", version + 1, msg ? msg : "?");
            sqlite3_free(msg);
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
fail:
    snprintf(errbuf, errlen, "cannot read the schema version: %s", sqlite3_errmsg(st->db));
    return -1;
}

static const struct store_vt sqlite_vt;
static void sq_close(struct store *base_);

struct store *store_sqlite_open(const char *path, char *errbuf, size_t errlen)
{
    struct sq *st = xcalloc(1, sizeof *st);
    st->base.vt = &sqlite_vt;
    st->exec_cache = xcalloc(EXEC_CACHE_SLOTS, sizeof *st->exec_cache);
    /* WAL writes coalesced into one pwrite per commit (walbuf.h); needs synchronous=FULL,
     * which the pragmas below set and nothing changes. */
    int rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             walbuf_vfs_name());
    if (rc != SQLITE_OK) {
        snprintf(errbuf, errlen, "cannot open %s: %s", path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    char *msg = NULL;
    const char *pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=0;"
                          " PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
                          " PRAGMA cache_size=-65536;";
    if (sqlite3_exec(st->db, pragmas, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(st->db, schema_sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(errbuf, errlen, "cannot initialise %s: %s", path, msg ? msg : "unknown error");
        sqlite3_free(msg);
        goto fail;
    }
    if (migrate(st, errbuf, errlen) < 0) goto fail;
    st->path = xstrdup(path);
    sqlite3_wal_hook(st->db, wal_hook, st);
    pthread_mutex_init(&st->ckpt_mu, NULL);
    pthread_cond_init(&st->ckpt_cv, NULL);
    st->ckpt_running = pthread_create(&st->ckpt_thread, NULL, checkpointer, st) == 0;
    for (int i = 0; i < S_COUNT; i++) {
        if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                               NULL) != SQLITE_OK) {
            snprintf(errbuf, errlen, "cannot prepare statement %d: %s", i, sqlite3_errmsg(st->db));
            goto fail;
        }
    }
    return &st->base;
fail:
    sq_close(&st->base);
    return NULL;
}

static void sq_close(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    if (!st) return;
    if (st->ckpt_running) {
        pthread_mutex_lock(&st->ckpt_mu);
        st->ckpt_stop = true;
        pthread_cond_signal(&st->ckpt_cv);
        pthread_mutex_unlock(&st->ckpt_mu);
        pthread_join(st->ckpt_thread, NULL);
        pthread_mutex_destroy(&st->ckpt_mu);
        pthread_cond_destroy(&st->ckpt_cv);
    }
    if (st->db) sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    free(st->path);
    exec_cache_clear(st);
    free(st->exec_cache);
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(st->stmt[i]);
    sqlite3_close(st->db);
    free(st);
}

static const char *sq_errmsg(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    return sqlite3_errmsg(st->db);
}

static int sq_begin(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    int r = run(use(st, S_BEGIN));
    if (r == 0) st->in_tx = true;
    return r;
}

/* After a commit, with no transaction open: let the next batch restart the WAL once it
 * is long (see WAL_RESTART_FRAMES). */
static void wal_bound(struct sq *st)
{
    if (st->wal_frames < WAL_RESTART_FRAMES) return;
    if (st->ckpt_running) {
        pthread_mutex_lock(&st->ckpt_mu);
        int done = st->ckpt_done;
        bool tail = done <= st->wal_frames && st->wal_frames - done <= WAL_TAIL_FRAMES;
        if (!tail) {
            st->ckpt_kick = true;
            pthread_cond_signal(&st->ckpt_cv);
        }
        pthread_mutex_unlock(&st->ckpt_mu);
        if (!tail) return;
    }
    int log = 0, done = 0;
    /* PASSIVE never waits: SQLITE_BUSY while the thread checkpoints, retried later. */
    if (sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done) != SQLITE_OK || done < log)
        return;
    if (st->ckpt_running) {
        pthread_mutex_lock(&st->ckpt_mu);
        st->ckpt_gen++;
        st->ckpt_done = 0;
        pthread_mutex_unlock(&st->ckpt_mu);
    }
    st->wal_frames = 0;
}

static int sq_commit(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    int r = run(use(st, S_COMMIT));
    if (r == 0) {
        st->in_tx = false;
        wal_bound(st);
    }
    return r;
}

static int sq_rollback(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    exec_cache_clear(st);
    int r = run(use(st, S_ROLLBACK));
    st->in_tx = false;
    return r;
}

static bool sq_in_tx(const struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    return st->in_tx;
}

static int sq_op_begin(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    return run(use(st, S_SAVEPOINT));
}

static int sq_op_end(struct store *base_, bool ok)
{
    struct sq *st = (struct sq *)base_;
    if (!ok) {
        exec_cache_clear(st);
        int r = run(use(st, S_ROLLBACK_TO));
        if (r < 0) return r;
    }
    return run(use(st, S_RELEASE));
}

/* --- agents --- */

static int sq_agent_upsert(struct store *base_, const char *name, int64_t now)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_AGENT_UPSERT);
    bind_text(s, 1, name);
    sqlite3_bind_int64(s, 2, now);
    return run(s);
}

static int sq_agents_each(struct store *base_, store_name_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_AGENTS);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) r = fn((const char *)sqlite3_column_text(s, 0), arg);
    sqlite3_reset(s);
    return r;
}

/* --- executions --- */

static void bind_exec(sqlite3_stmt *s, const struct execution *e)
{
    bind_text(s, 1, e->id);
    bind_text(s, 2, e->agent);
    bind_text(s, 3, e->session);
    bind_text(s, 4, e->input);
    bind_text(s, 5, exec_status_name(e->status));
    bind_text(s, 6, e->output);
    bind_text(s, 7, e->state);
    bind_text(s, 8, e->failure_reason);
    sqlite3_bind_int64(s, 9, e->created_at);
    sqlite3_bind_int64(s, 10, e->updated_at);
    sqlite3_bind_int64(s, 11, e->deadline_at);
    sqlite3_bind_int64(s, 12, e->last_seq);
    bind_text(s, 13, e->dispatch_id);
    sqlite3_bind_int64(s, 14, e->attempt);
    bind_text(s, 15, dispatch_state_name(e->dstate));
    sqlite3_bind_int64(s, 16, e->queued_at);
    bind_text(s, 17, e->worker_id);
    sqlite3_bind_int64(s, 18, e->lease_deadline);
    sqlite3_bind_int64(s, 19, e->lease_ms);
    sqlite3_bind_int64(s, 20, e->max_attempts);
    bind_text(s, 21, e->parent_id);
    bind_text(s, 22, e->forked_from);
    sqlite3_bind_int64(s, 23, e->fork_seq);
    bind_text(s, 24, e->restoration);
}

static void read_exec(sqlite3_stmt *s, struct execution *e)
{
    memset(e, 0, sizeof *e);
    col_copy(s, 0, e->id, sizeof e->id);
    e->agent = col_dup(s, 1);
    e->session = col_dup(s, 2);
    e->input = col_dup(s, 3);
    exec_status_parse((const char *)sqlite3_column_text(s, 4), &e->status);
    e->output = col_dup(s, 5);
    e->state = col_dup(s, 6);
    e->failure_reason = col_dup(s, 7);
    e->created_at = sqlite3_column_int64(s, 8);
    e->updated_at = sqlite3_column_int64(s, 9);
    e->deadline_at = sqlite3_column_int64(s, 10);
    e->last_seq = sqlite3_column_int64(s, 11);
    col_copy(s, 12, e->dispatch_id, sizeof e->dispatch_id);
    e->attempt = sqlite3_column_int64(s, 13);
    dispatch_state_parse((const char *)sqlite3_column_text(s, 14), &e->dstate);
    e->queued_at = sqlite3_column_int64(s, 15);
    col_copy(s, 16, e->worker_id, sizeof e->worker_id);
    e->lease_deadline = sqlite3_column_int64(s, 17);
    e->lease_ms = sqlite3_column_int64(s, 18);
    e->max_attempts = sqlite3_column_int64(s, 19);
    col_copy(s, 20, e->parent_id, sizeof e->parent_id);
    col_copy(s, 21, e->forked_from, sizeof e->forked_from);
    e->fork_seq = sqlite3_column_int64(s, 22);
    e->restoration = col_dup(s, 23);
}

static int sq_exec_insert(struct store *base_, const struct execution *e)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_EXEC_INSERT);
    bind_exec(s, e);
    return run(s);
}

static int sq_exec_update(struct store *base_, const struct execution *e)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_EXEC_UPDATE);
    bind_exec(s, e);
    int r = run(s);
    if (r == 0 && sqlite3_changes(st->db) != 1) return -ENOENT;
    struct exec_slot *c = exec_cache_find(st, e->id);
    if (c) {
        /* last_seq is the events', which the cache tracks itself (store_event_append). */
        int64_t last_seq = c->e.last_seq;
        if (r == 0) exec_cache_put(st, e), c->e.last_seq = last_seq;
        else execution_fini(&c->e), c->used = false;
    }
    return r;
}

static int sq_exec_get(struct store *base_, const char *id, struct execution *out)
{
    struct sq *st = (struct sq *)base_;
    struct exec_slot *c = exec_cache_find(st, id);
    if (c) {
        store_exec_copy(out, &c->e);
        return 0;
    }
    sqlite3_stmt *s = use(st, S_EXEC_GET);
    bind_text(s, 1, id);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) read_exec(s, out);
    sqlite3_reset(s);
    if (r == 0) exec_cache_put(st, out);
    return r;
}

/* The WHERE terms of a filter; parameters ?1 agent, ?2 status, ?3 cursor, ?5 session,
 * ?6/?7 created after/before, ?8 forked_from, ?9/?10 the id range of the times (?4: the
 * limit). Built per call: the combinations are few and listing is not a hot path. */
static void sq_filter_where(const struct exec_filter *f, bool status, const char *cursor, char *out, size_t n)
{
    snprintf(out, n, "1=1%s%s%s%s%s%s%s", f->agent ? " AND agent = ?1" : "",
             status && f->status ? " AND status = ?2" : "", cursor ? " AND id < ?3" : "",
             f->session ? " AND session = ?5" : "", f->created_after ? " AND id >= ?9 AND created_at >= ?6" : "",
             f->created_before ? " AND id < ?10 AND created_at < ?7" : "",
             f->forked_from ? " AND forked_from = ?8 AND forked_from != ''" : "");
}

static void sq_filter_bind(sqlite3_stmt *s, const struct exec_filter *f, bool status, const char *cursor,
                           char lo[UUID_STR_LEN], char hi[UUID_STR_LEN])
{
    if (f->agent) bind_text(s, 1, f->agent);
    if (status && f->status) bind_text(s, 2, f->status);
    if (cursor) bind_text(s, 3, cursor);
    if (f->session) bind_text(s, 5, f->session);
    if (f->created_after) {
        sqlite3_bind_int64(s, 6, f->created_after);
        store_uuid_floor(f->created_after - STORE_ID_CLOCK_SLACK_MS, lo);
        bind_text(s, 9, lo);
    }
    if (f->created_before) {
        sqlite3_bind_int64(s, 7, f->created_before);
        store_uuid_floor(f->created_before + STORE_ID_CLOCK_SLACK_MS, hi);
        bind_text(s, 10, hi);
    }
    if (f->forked_from) bind_text(s, 8, f->forked_from);
}

static int sq_exec_list(struct store *base_, const struct exec_filter *f, const char *cursor, int limit,
                        store_exec_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    char where[400], sql[900], lo[UUID_STR_LEN], hi[UUID_STR_LEN];
    sq_filter_where(f, true, cursor, where, sizeof where);
    snprintf(sql, sizeof sql, "SELECT " EXEC_SELECT " FROM executions WHERE %s ORDER BY id DESC LIMIT ?4", where);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) return -EIO;
    sq_filter_bind(s, f, true, cursor, lo, hi);
    sqlite3_bind_int(s, 4, limit);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct execution e;
        read_exec(s, &e);
        r = fn(&e, arg);
        execution_fini(&e);
    }
    sqlite3_finalize(s);
    return r;
}

static int sq_exec_counts(struct store *base_, const struct exec_filter *f, int64_t counts[EXEC_STATUS_COUNT])
{
    struct sq *st = (struct sq *)base_;
    char where[400], sql[600], lo[UUID_STR_LEN], hi[UUID_STR_LEN];
    sq_filter_where(f, false, NULL, where, sizeof where);
    snprintf(sql, sizeof sql, "SELECT status, count(*) FROM executions WHERE %s GROUP BY status", where);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) return -EIO;
    sq_filter_bind(s, f, false, NULL, lo, hi);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        enum exec_status es;
        if (exec_status_parse((const char *)sqlite3_column_text(s, 0), &es) == 0)
            counts[es] = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : rc_errno(rc);
}

static int sq_exec_next_queued(struct store *base_, const char *agent, char id_out[UUID_STR_LEN])
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_EXEC_NEXT_QUEUED);
    bind_text(s, 1, agent);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) col_copy(s, 0, id_out, UUID_STR_LEN);
    sqlite3_reset(s);
    return r;
}

static int collect_ids(struct sq *st, enum stmt_id id, int64_t now, char (*ids)[UUID_STR_LEN],
                       int max, int *n)
{
    sqlite3_stmt *s = use(st, id);
    sqlite3_bind_int64(s, 1, now);
    sqlite3_bind_int(s, 2, max);
    int rc;
    *n = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && *n < max) col_copy(s, 0, ids[(*n)++], UUID_STR_LEN);
    sqlite3_reset(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : rc_errno(rc);
}

static int sq_exec_expired_leases(struct store *base_, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    struct sq *st = (struct sq *)base_;
    return collect_ids(st, S_EXEC_EXPIRED, now, ids, max, n);
}

static int sq_exec_past_deadline(struct store *base_, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    struct sq *st = (struct sq *)base_;
    return collect_ids(st, S_EXEC_PAST_DEADLINE, now, ids, max, n);
}

static int sq_approvals_expired(struct store *base_, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    struct sq *st = (struct sq *)base_;
    return collect_ids(st, S_APPROVALS_EXPIRED, now, ids, max, n);
}

static int64_t scalar(struct sq *st, enum stmt_id id)
{
    sqlite3_stmt *s = use(st, id);
    int64_t v = 0;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) v = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return v;
}

static int64_t sq_next_timer(struct store *base_)
{
    struct sq *st = (struct sq *)base_;
    int64_t best = 0;
    enum stmt_id ids[] = {S_NEXT_LEASE, S_NEXT_DEADLINE, S_NEXT_APPROVAL};
    for (size_t i = 0; i < ARRAY_LEN(ids); i++) {
        int64_t v = scalar(st, ids[i]);
        if (v > 0 && (best == 0 || v < best)) best = v;
    }
    return best;
}

/* --- events --- */

static int sq_event_append(struct store *base_, struct execution *e, const char *type, const char *payload,
                       int64_t at)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_EVENT_INSERT);
    bind_text(s, 1, e->id);
    sqlite3_bind_int64(s, 2, e->last_seq + 1);
    bind_text(s, 3, type);
    bind_text(s, 4, payload);
    sqlite3_bind_int64(s, 5, at);
    int r = run(s);
    if (r == 0) {
        e->last_seq++;
        struct exec_slot *c = exec_cache_find(st, e->id);
        if (c && c->e.last_seq < e->last_seq) c->e.last_seq = e->last_seq;
    }
    return r;
}

static int sq_events_each(struct store *base_, const char *exec_id, int64_t after, int limit,
                      store_event_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_EVENTS);
    bind_text(s, 1, exec_id);
    sqlite3_bind_int64(s, 2, after);
    sqlite3_bind_int(s, 3, limit);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW)
        r = fn(sqlite3_column_int64(s, 0), (const char *)sqlite3_column_text(s, 1),
               (const char *)sqlite3_column_text(s, 2), sqlite3_column_int64(s, 3), arg);
    sqlite3_reset(s);
    return r;
}

/* --- steps --- */

static void bind_step(sqlite3_stmt *s, const struct step *p)
{
    bind_text(s, 1, p->step_id);
    bind_text(s, 2, p->exec_id);
    bind_text(s, 3, p->kind);
    bind_text(s, 4, p->target);
    bind_text(s, 5, p->args_hash);
    sqlite3_bind_int64(s, 6, p->occurrence);
    bind_text(s, 7, idempotency_name(p->idem));
    bind_text(s, 8, step_status_name(p->status));
    bind_text(s, 9, p->args);
    bind_text(s, 10, p->result);
    bind_text(s, 11, p->error);
    bind_text(s, 12, p->rule_id);
    bind_text(s, 13, p->approval_id);
    sqlite3_bind_int64(s, 14, p->runs);
    sqlite3_bind_int(s, 15, p->indeterminate);
    sqlite3_bind_int64(s, 16, p->created_at);
    sqlite3_bind_int64(s, 17, p->completed_at);
    bind_text(s, 18, p->resources);
}

static void read_step(sqlite3_stmt *s, struct step *p)
{
    memset(p, 0, sizeof *p);
    col_copy(s, 0, p->step_id, sizeof p->step_id);
    col_copy(s, 1, p->exec_id, sizeof p->exec_id);
    p->kind = col_dup(s, 2);
    p->target = col_dup(s, 3);
    col_copy(s, 4, p->args_hash, sizeof p->args_hash);
    p->occurrence = sqlite3_column_int64(s, 5);
    idempotency_parse((const char *)sqlite3_column_text(s, 6), &p->idem);
    step_status_parse((const char *)sqlite3_column_text(s, 7), &p->status);
    p->args = col_dup(s, 8);
    p->result = col_dup(s, 9);
    p->error = col_dup(s, 10);
    p->rule_id = col_dup(s, 11);
    col_copy(s, 12, p->approval_id, sizeof p->approval_id);
    p->runs = sqlite3_column_int64(s, 13);
    p->indeterminate = sqlite3_column_int(s, 14) != 0;
    p->created_at = sqlite3_column_int64(s, 15);
    p->completed_at = sqlite3_column_int64(s, 16);
    p->resources = col_dup(s, 17);
}

static int sq_step_get(struct store *base_, const char *exec_id, const char *step_id, struct step *out)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_STEP_GET);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, step_id);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) read_step(s, out);
    sqlite3_reset(s);
    return r;
}

static int sq_step_insert(struct store *base_, const struct step *p)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_STEP_INSERT);
    bind_step(s, p);
    return run(s);
}

static int sq_step_update(struct store *base_, const struct step *p)
{
    struct sq *st = (struct sq *)base_;
    /* The WHERE clause pins the immutable columns: an update can change a step's
     * outcome, never its identity or arguments. */
    sqlite3_stmt *s = use(st, S_STEP_UPDATE);
    bind_step(s, p);
    int r = run(s);
    if (r == 0 && sqlite3_changes(st->db) != 1) return -ENOENT;
    return r;
}

static int steps_loop(sqlite3_stmt *s, store_step_fn fn, void *arg)
{
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct step p;
        read_step(s, &p);
        r = fn(&p, arg);
        step_fini(&p);
    }
    sqlite3_reset(s);
    return r;
}

static int sq_steps_each(struct store *base_, const char *exec_id, store_step_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_STEPS);
    bind_text(s, 1, exec_id);
    return steps_loop(s, fn, arg);
}

static int sq_steps_each_status(struct store *base_, const char *exec_id, enum step_status status,
                            store_step_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    /* Collected first: the callback may update the rows being iterated. */
    sqlite3_stmt *s = use(st, S_STEPS_STATUS);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, step_status_name(status));
    struct step *list = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) list = xrealloc(list, (cap = cap ? cap * 2 : 8) * sizeof *list);
        read_step(s, &list[n++]);
    }
    sqlite3_reset(s);
    int r = rc == SQLITE_DONE ? 0 : rc_errno(rc);
    for (size_t i = 0; i < n; i++) {
        if (r == 0) r = fn(&list[i], arg);
        step_fini(&list[i]);
    }
    free(list);
    return r;
}

static int sq_step_has_indeterminate(struct store *base_, const char *exec_id, const char *kind,
                                 const char *target, const char *args_hash, bool *out)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_STEP_INDET);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, kind);
    bind_text(s, 3, target);
    bind_text(s, 4, args_hash);
    int rc = sqlite3_step(s);
    *out = rc == SQLITE_ROW;
    sqlite3_reset(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : rc_errno(rc);
}

/* --- counters --- */

static int sq_counter_get(struct store *base_, const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_COUNTER_GET);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, kind);
    bind_text(s, 3, target);
    bind_text(s, 4, args_hash);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) {
        *consumed = sqlite3_column_int64(s, 0);
        col_copy(s, 1, last_request, lr_len);
    }
    sqlite3_reset(s);
    return r;
}

static int sq_counter_set(struct store *base_, const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, int64_t consumed, const char *request_id)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_COUNTER_SET);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, kind);
    bind_text(s, 3, target);
    bind_text(s, 4, args_hash);
    sqlite3_bind_int64(s, 5, consumed);
    bind_text(s, 6, request_id);
    return run(s);
}

static int sq_counters_clear(struct store *base_, const char *exec_id)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_COUNTERS_CLEAR);
    bind_text(s, 1, exec_id);
    return run(s);
}

static int sq_counters_each(struct store *base_, const char *exec_id, store_counter_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, "SELECT kind, target, args_hash, consumed, last_request FROM step_counters"
                           " WHERE execution_id = ?1 ORDER BY kind, target, args_hash", -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    bind_text(s, 1, exec_id);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW)
        r = fn((const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 1),
               (const char *)sqlite3_column_text(s, 2), sqlite3_column_int64(s, 3),
               (const char *)sqlite3_column_text(s, 4), arg);
    sqlite3_finalize(s);
    return r;
}

/* --- approvals --- */

static void bind_approval(sqlite3_stmt *s, const struct approval *a)
{
    bind_text(s, 1, a->id);
    bind_text(s, 2, a->exec_id);
    bind_text(s, 3, a->step_id);
    bind_text(s, 4, approval_status_name(a->status));
    bind_text(s, 5, a->rule_id);
    bind_text(s, 6, a->reason);
    bind_text(s, 7, a->message);
    bind_text(s, 8, a->approvers);
    sqlite3_bind_int64(s, 9, a->timeout_at);
    sqlite3_bind_int64(s, 10, a->created_at);
    sqlite3_bind_int64(s, 11, a->decided_at);
    bind_text(s, 12, a->decided_by);
    bind_text(s, 13, a->rationale);
}

static void read_approval(sqlite3_stmt *s, struct approval *a)
{
    memset(a, 0, sizeof *a);
    col_copy(s, 0, a->id, sizeof a->id);
    col_copy(s, 1, a->exec_id, sizeof a->exec_id);
    col_copy(s, 2, a->step_id, sizeof a->step_id);
    approval_status_parse((const char *)sqlite3_column_text(s, 3), &a->status);
    a->rule_id = col_dup(s, 4);
    a->reason = col_dup(s, 5);
    a->message = col_dup(s, 6);
    a->approvers = col_dup(s, 7);
    a->timeout_at = sqlite3_column_int64(s, 8);
    a->created_at = sqlite3_column_int64(s, 9);
    a->decided_at = sqlite3_column_int64(s, 10);
    a->decided_by = col_dup(s, 11);
    a->rationale = col_dup(s, 12);
}

static int sq_approval_insert(struct store *base_, const struct approval *a)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_APPROVAL_INSERT);
    bind_approval(s, a);
    return run(s);
}

static int sq_approval_get(struct store *base_, const char *id, struct approval *out)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_APPROVAL_GET);
    bind_text(s, 1, id);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) read_approval(s, out);
    sqlite3_reset(s);
    return r;
}

static int sq_approval_update(struct store *base_, const struct approval *a)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_APPROVAL_UPDATE);
    bind_approval(s, a);
    return run(s);
}

static int sq_approvals_each(struct store *base_, const char *status, const char *exec_id, int limit,
                         store_approval_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    char sql[384];
    snprintf(sql, sizeof sql, "SELECT " APPROVAL_COLS " FROM approvals WHERE 1=1%s%s"
             " ORDER BY created_at, id LIMIT ?3",
             status ? " AND status = ?1" : "", exec_id ? " AND execution_id = ?2" : "");
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) return -EIO;
    if (status) bind_text(s, 1, status);
    if (exec_id) bind_text(s, 2, exec_id);
    sqlite3_bind_int(s, 3, limit);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct approval a;
        read_approval(s, &a);
        r = fn(&a, arg);
        approval_fini(&a);
    }
    sqlite3_finalize(s);
    return r;
}

/* --- sessions --- */

static int one_id(struct sq *st, enum stmt_id id, const char *a, const char *b, char out[UUID_STR_LEN])
{
    sqlite3_stmt *s = use(st, id);
    bind_text(s, 1, a);
    if (b) bind_text(s, 2, b);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) col_copy(s, 0, out, UUID_STR_LEN);
    sqlite3_reset(s);
    return r;
}

static int sq_session_active(struct store *base_, const char *session, char id_out[UUID_STR_LEN])
{
    struct sq *st = (struct sq *)base_;
    return one_id(st, S_SESSION_ACTIVE, session, NULL, id_out);
}

static int sq_session_next_waiting(struct store *base_, const char *session, char id_out[UUID_STR_LEN])
{
    struct sq *st = (struct sq *)base_;
    return one_id(st, S_SESSION_WAITING, session, NULL, id_out);
}

static int sq_session_last_completed(struct store *base_, const char *session, const char *agent,
                                 char id_out[UUID_STR_LEN])
{
    struct sq *st = (struct sq *)base_;
    return one_id(st, S_SESSION_LAST_COMPLETED, session, agent, id_out);
}

static int sq_session_any(struct store *base_, const char *session, char id_out[UUID_STR_LEN])
{
    struct sq *st = (struct sq *)base_;
    return one_id(st, S_SESSION_EXISTS, session, NULL, id_out);
}

/* --- resources --- */

static void bind_resource(sqlite3_stmt *s, const struct resource *r)
{
    bind_text(s, 1, r->exec_id);
    bind_text(s, 2, r->key);
    bind_text(s, 3, r->driver_id);
    bind_text(s, 4, r->configuration);
    sqlite3_bind_int(s, 5, r->coverage_reuse);
    sqlite3_bind_int64(s, 6, r->every_steps);
    sqlite3_bind_int(s, 7, r->on_completion);
    sqlite3_bind_int64(s, 8, r->registered_seq);
    sqlite3_bind_int64(s, 9, r->generation);
    sqlite3_bind_int64(s, 10, r->count);
    bind_text(s, 11, r->binding);
    bind_text(s, 12, r->checkpoint_ref);
}

static void read_resource(sqlite3_stmt *s, struct resource *r)
{
    memset(r, 0, sizeof *r);
    col_copy(s, 0, r->exec_id, sizeof r->exec_id);
    r->key = col_dup(s, 1);
    r->driver_id = col_dup(s, 2);
    r->configuration = col_dup(s, 3);
    r->coverage_reuse = sqlite3_column_int(s, 4) != 0;
    r->every_steps = sqlite3_column_int64(s, 5);
    r->on_completion = sqlite3_column_int(s, 6) != 0;
    r->registered_seq = sqlite3_column_int64(s, 7);
    r->generation = sqlite3_column_int64(s, 8);
    r->count = sqlite3_column_int64(s, 9);
    r->binding = col_dup(s, 10);
    r->checkpoint_ref = col_dup(s, 11);
}

static int sq_resource_get(struct store *base_, const char *exec_id, const char *key, struct resource *out)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_RESOURCE_GET);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, key);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) read_resource(s, out);
    sqlite3_reset(s);
    return r;
}

static int sq_resource_insert(struct store *base_, const struct resource *r)
{
    struct sq *st = (struct sq *)base_;
    struct exec_slot *c = exec_cache_find(st, r->exec_id);
    if (c) c->no_resources = false;
    sqlite3_stmt *s = use(st, S_RESOURCE_INSERT);
    bind_resource(s, r);
    return run(s);
}

static int sq_resource_update(struct store *base_, const struct resource *r)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_RESOURCE_UPDATE);
    bind_resource(s, r);
    return run(s);
}

static int sq_resources_each(struct store *base_, const char *exec_id, store_resource_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    struct exec_slot *c = exec_cache_find(st, exec_id);
    if (c && c->no_resources) return 0;
    /* Collected first: callers update the rows they visit. */
    sqlite3_stmt *s = use(st, S_RESOURCES);
    bind_text(s, 1, exec_id);
    struct resource *list = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) list = xrealloc(list, (cap = cap ? cap * 2 : 4) * sizeof *list);
        read_resource(s, &list[n++]);
    }
    sqlite3_reset(s);
    int r = rc == SQLITE_DONE ? 0 : rc_errno(rc);
    if (r == 0 && n == 0 && (c = exec_cache_find(st, exec_id)) != NULL) c->no_resources = true;
    for (size_t i = 0; i < n; i++) {
        if (r == 0) r = fn(&list[i], arg);
        resource_fini(&list[i]);
    }
    free(list);
    return r;
}

/* --- checkpoints --- */

static int sq_checkpoint_insert(struct store *base_, const struct checkpoint *c)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_CHECKPOINT_INSERT);
    bind_text(s, 1, c->exec_id);
    bind_text(s, 2, c->key);
    sqlite3_bind_int64(s, 3, c->generation);
    bind_text(s, 4, c->ref);
    sqlite3_bind_int64(s, 5, c->covered_seq);
    sqlite3_bind_int64(s, 6, c->invalidated_seq);
    return run(s);
}

static int sq_checkpoints_each(struct store *base_, const char *exec_id, store_checkpoint_fn fn, void *arg)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_CHECKPOINTS);
    bind_text(s, 1, exec_id);
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct checkpoint c;
        memset(&c, 0, sizeof c);
        col_copy(s, 0, c.exec_id, sizeof c.exec_id);
        c.key = col_dup(s, 1);
        c.generation = sqlite3_column_int64(s, 2);
        c.ref = col_dup(s, 3);
        c.covered_seq = sqlite3_column_int64(s, 4);
        c.invalidated_seq = sqlite3_column_int64(s, 5);
        r = fn(&c, arg);
        checkpoint_fini(&c);
    }
    sqlite3_reset(s);
    return r;
}

static int sq_checkpoints_invalidate(struct store *base_, const char *exec_id, const char *key,
                                 int64_t generation, int64_t seq)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_CHECKPOINT_INVALIDATE);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, key);
    sqlite3_bind_int64(s, 3, generation);
    sqlite3_bind_int64(s, 4, seq);
    return run(s);
}

static int sq_checkpoint_covered(struct store *base_, const char *exec_id, const char *key,
                             int64_t generation, bool *out)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_CHECKPOINT_COVERED);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, key);
    sqlite3_bind_int64(s, 3, generation);
    int rc = sqlite3_step(s);
    *out = rc == SQLITE_ROW;
    sqlite3_reset(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : rc_errno(rc);
}

static int sq_checkpoint_find(struct store *base_, const char *exec_id, const char *key, int64_t generation,
                          const char *ref, int64_t *covered_seq)
{
    struct sq *st = (struct sq *)base_;
    sqlite3_stmt *s = use(st, S_CHECKPOINT_FIND);
    bind_text(s, 1, exec_id);
    bind_text(s, 2, key);
    sqlite3_bind_int64(s, 3, generation);
    bind_text(s, 4, ref);
    int rc = sqlite3_step(s);
    int r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : rc_errno(rc);
    if (r == 0) *covered_seq = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return r;
}

/* --- one process owns the file: nothing to hear from others --- */

static const char *sq_kind(struct store *st)
{
    return "sqlite";
}

static void sq_notify(struct store *st, char kind, const char *name)
{
}

static int sq_watch_fd(struct store *st)
{
    return -1;
}

static int sq_watch_read(struct store *st, store_change_fn fn, void *arg)
{
    return 0;
}

/* --- run-time agents and API keys (rare: statements prepared per call) --- */

static int sq_once(struct sq *st, const char *sql, sqlite3_stmt **out)
{
    return sqlite3_prepare_v2(st->db, sql, -1, out, NULL) == SQLITE_OK ? 0 : -EIO;
}

static int sq_run_once(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : rc_errno(rc);
}

static int sq_agent_save(struct store *base_, const char *name, const char *settings, int64_t now)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "INSERT INTO agents(name, created_at, settings) VALUES(?1, ?2, ?3)"
                " ON CONFLICT(name) DO UPDATE SET settings = excluded.settings", &s) < 0)
        return -EIO;
    bind_text(s, 1, name);
    sqlite3_bind_int64(s, 2, now);
    bind_text(s, 3, settings);
    return sq_run_once(s);
}

static int sq_agent_settings_each(struct store *base_, store_agent_fn fn, void *arg)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "SELECT name, settings FROM agents WHERE settings IS NOT NULL ORDER BY name",
                &s) < 0)
        return -EIO;
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW)
        r = fn((const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 1), arg);
    sqlite3_finalize(s);
    return r;
}

static int sq_agent_delete(struct store *base_, const char *name)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "DELETE FROM agents WHERE name = ?1", &s) < 0) return -EIO;
    bind_text(s, 1, name);
    return sq_run_once(s);
}

static int sq_rule_steps_since(struct store *base_, const char *rule_id, const char *exec_id, const char *agent,
                               int64_t since_ms, int64_t cap, int64_t *n, int64_t *oldest)
{
    sqlite3_stmt *s;
    const char *sql = exec_id ? "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                                " WHERE rule_id = ?1 AND created_at >= ?2 AND execution_id = ?3"
                                " ORDER BY created_at LIMIT ?4)"
                      : agent ? "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                                " WHERE rule_id = ?1 AND created_at >= ?2"
                                " AND execution_id IN (SELECT id FROM executions WHERE agent = ?3)"
                                " ORDER BY created_at LIMIT ?4)"
                              : "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                                " WHERE rule_id = ?1 AND created_at >= ?2 AND ?3 IS NULL"
                                " ORDER BY created_at LIMIT ?4)";
    if (sq_once((struct sq *)base_, sql, &s) < 0) return -EIO;
    bind_text(s, 1, rule_id);
    sqlite3_bind_int64(s, 2, since_ms);
    bind_text(s, 3, exec_id ? exec_id : agent);
    sqlite3_bind_int64(s, 4, cap);
    int rc = sqlite3_step(s);
    *n = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    *oldest = rc == SQLITE_ROW ? sqlite3_column_int64(s, 1) : 0;
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? 0 : rc_errno(rc) ? rc_errno(rc) : -EIO;
}

static int sq_exec_parked_due(struct store *base_, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    sqlite3_stmt *s;
    *n = 0;
    if (sq_once((struct sq *)base_, "SELECT id FROM executions WHERE dstate = 'released' AND status = 'running'"
                " AND lease_deadline > 0 AND lease_deadline <= ?1 ORDER BY lease_deadline LIMIT ?2", &s) < 0)
        return -EIO;
    sqlite3_bind_int64(s, 1, now);
    sqlite3_bind_int(s, 2, max);
    int rc;
    while (*n < max && (rc = sqlite3_step(s)) == SQLITE_ROW) col_copy(s, 0, ids[(*n)++], UUID_STR_LEN);
    sqlite3_finalize(s);
    return 0;
}

static int sq_exec_parked_next(struct store *base_, int64_t *at)
{
    sqlite3_stmt *s;
    *at = 0;
    if (sq_once((struct sq *)base_, "SELECT coalesce(min(lease_deadline), 0) FROM executions WHERE dstate = 'released'"
                " AND status = 'running' AND lease_deadline > 0", &s) < 0)
        return -EIO;
    if (sqlite3_step(s) == SQLITE_ROW) *at = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return 0;
}

static int sq_api_key_put(struct store *base_, const struct api_key_row *k)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "INSERT OR REPLACE INTO api_keys(id, name, hash, prefix, scopes, created_at,"
                " revoked_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)", &s) < 0)
        return -EIO;
    bind_text(s, 1, k->id);
    bind_text(s, 2, k->name);
    bind_text(s, 3, k->hash);
    bind_text(s, 4, k->prefix);
    bind_text(s, 5, k->scopes);
    sqlite3_bind_int64(s, 6, k->created_at);
    sqlite3_bind_int64(s, 7, k->revoked_at);
    return sq_run_once(s);
}

/* fn for the api_keys row s stands on (id, name, hash, prefix, scopes, created_at, revoked_at). */
static int key_row(sqlite3_stmt *s, store_api_key_fn fn, void *arg)
{
    struct api_key_row k = {.name = (const char *)sqlite3_column_text(s, 1),
                            .hash = (const char *)sqlite3_column_text(s, 2),
                            .prefix = (const char *)sqlite3_column_text(s, 3),
                            .scopes = (const char *)sqlite3_column_text(s, 4),
                            .created_at = sqlite3_column_int64(s, 5),
                            .revoked_at = sqlite3_column_int64(s, 6)};
    col_copy(s, 0, k.id, sizeof k.id);
    return fn(&k, arg);
}

static int sq_api_keys_each(struct store *base_, store_api_key_fn fn, void *arg)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "SELECT id, name, hash, prefix, scopes, created_at, revoked_at FROM api_keys"
                " ORDER BY created_at, id", &s) < 0)
        return -EIO;
    int rc, r = 0;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        r = key_row(s, fn, arg);
    }
    sqlite3_finalize(s);
    return r;
}

static int sq_api_key_find(struct store *base_, const char *hash, store_api_key_fn fn, void *arg)
{
    sqlite3_stmt *s;
    if (sq_once((struct sq *)base_, "SELECT id, name, hash, prefix, scopes, created_at, revoked_at FROM api_keys"
                " WHERE hash = ?1", &s) < 0)
        return -EIO;
    bind_text(s, 1, hash);
    int rc = sqlite3_step(s), r;
    if (rc == SQLITE_ROW) {
        r = key_row(s, fn, arg);
    } else {
        r = rc == SQLITE_DONE ? -ENOENT : rc_errno(rc) ? rc_errno(rc) : -EIO;
    }
    sqlite3_finalize(s);
    return r;
}

static const struct store_vt sqlite_vt = {
    .close = sq_close,
    .errmsg = sq_errmsg,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .in_tx = sq_in_tx,
    .op_begin = sq_op_begin,
    .op_end = sq_op_end,
    .agent_upsert = sq_agent_upsert,
    .agents_each = sq_agents_each,
    .agent_save = sq_agent_save,
    .agent_settings_each = sq_agent_settings_each,
    .agent_delete = sq_agent_delete,
    .rule_steps_since = sq_rule_steps_since,
    .exec_parked_due = sq_exec_parked_due,
    .exec_parked_next = sq_exec_parked_next,
    .api_key_put = sq_api_key_put,
    .api_keys_each = sq_api_keys_each,
    .api_key_find = sq_api_key_find,
    .exec_insert = sq_exec_insert,
    .exec_update = sq_exec_update,
    .exec_get = sq_exec_get,
    .exec_list = sq_exec_list,
    .exec_counts = sq_exec_counts,
    .exec_next_queued = sq_exec_next_queued,
    .exec_expired_leases = sq_exec_expired_leases,
    .exec_past_deadline = sq_exec_past_deadline,
    .approvals_expired = sq_approvals_expired,
    .next_timer = sq_next_timer,
    .event_append = sq_event_append,
    .events_each = sq_events_each,
    .step_get = sq_step_get,
    .step_insert = sq_step_insert,
    .step_update = sq_step_update,
    .steps_each = sq_steps_each,
    .steps_each_status = sq_steps_each_status,
    .step_has_indeterminate = sq_step_has_indeterminate,
    .counter_get = sq_counter_get,
    .counter_set = sq_counter_set,
    .counters_clear = sq_counters_clear,
    .counters_each = sq_counters_each,
    .approval_insert = sq_approval_insert,
    .approval_get = sq_approval_get,
    .approval_update = sq_approval_update,
    .approvals_each = sq_approvals_each,
    .session_active = sq_session_active,
    .session_next_waiting = sq_session_next_waiting,
    .session_last_completed = sq_session_last_completed,
    .session_any = sq_session_any,
    .resource_get = sq_resource_get,
    .resource_insert = sq_resource_insert,
    .resource_update = sq_resource_update,
    .resources_each = sq_resources_each,
    .checkpoint_insert = sq_checkpoint_insert,
    .checkpoints_each = sq_checkpoints_each,
    .checkpoints_invalidate = sq_checkpoints_invalidate,
    .checkpoint_covered = sq_checkpoint_covered,
    .checkpoint_find = sq_checkpoint_find,
    .kind = sq_kind,
    .notify = sq_notify,
    .watch_fd = sq_watch_fd,
    .watch_read = sq_watch_read,
};
