/*
 * store_pg.c - the PostgreSQL store, which several kernel replicas can share.
 *
 * Like the SQLite store it is used only from the kernel's loop thread, and the API
 * layer groups each loop turn's writes into one transaction (group commit): BEGIN,
 * one savepoint per request, one COMMIT whose WAL flush covers the whole batch, so
 * a reply is sent only after its writes are durable. Statements are prepared once
 * per connection and sent with libpq's blocking calls, those whose rows are not needed at
 * once queued and sent in one pipeline with the next read (see "Deferred writes"); the
 * database is expected close by (a round trip is tens of microseconds on one host, under
 * a millisecond in one data centre), and a lost connection fails fast (-ENOTCONN, which the API
 * answers with 503) instead of waiting: reconnecting is tried at most once a
 * second, never inside a batch (a batch whose connection broke can only roll back).
 *
 * Several replicas. Everything that changes an execution first locks its row
 * (store_exec_get inside a batch is SELECT ... FOR UPDATE, then a fresh read: in
 * READ COMMITTED the next statement sees whatever the previous holder committed),
 * so events get gap-free seq numbers whoever appends, and no two replicas can both
 * decide a step, claim, approval or fork. Rows this batch has locked are cached
 * until it ends (nobody else can change them). Claims and expiry sweeps take rows
 * with FOR UPDATE SKIP LOCKED, so replicas never queue behind each other's work and
 * re-check every row under its lock. A session's admission is serialised with a
 * transaction-scoped advisory lock on its name, and so is deciding a step under a rate
 * limit shared by executions (per agent or global: see pg_rule_steps_since for how that
 * lock cannot deadlock with the execution row locks). Replicas tell each other what a
 * commit changed with NOTIFY on channel "rebuno" (sent in the batch, so delivered
 * only if it commits), heard on a second connection that LISTENs.
 *
 * Schema: tables in the connection's search_path, versioned in meta like SQLite's;
 * migrations run under an advisory lock so replicas starting together do not race,
 * and a database of a newer schema is refused.
 */
#include "store/store_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/xalloc.h"

#define RECONNECT_MS 1000
#define NOTIFY_MAX 7000 /* a NOTIFY payload is limited to 8000 bytes */
#define MIGRATE_LOCK 7405182001LL
#define SESSION_LOCK_SPACE 7405 /* advisory lock spaces; rate limits' is 7406 (in S_RULE_LOCK's text) */

/* Migrations, applied in order to databases older than their version (1-based). */
static const char *migrations[] = {
    /* 1: the schema of SQLite's version 5 */
    "CREATE TABLE agents(name TEXT COLLATE \"C\" PRIMARY KEY, created_at BIGINT NOT NULL);"
    "CREATE TABLE executions("
    " id TEXT COLLATE \"C\" PRIMARY KEY, agent TEXT COLLATE \"C\" NOT NULL, session TEXT COLLATE \"C\","
    " input TEXT NOT NULL, status TEXT NOT NULL, output TEXT, state TEXT, failure_reason TEXT,"
    " created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, deadline_at BIGINT NOT NULL,"
    " last_seq BIGINT NOT NULL, dispatch_id TEXT NOT NULL, attempt BIGINT NOT NULL,"
    " dstate TEXT NOT NULL, queued_at BIGINT NOT NULL, worker_id TEXT NOT NULL,"
    " lease_deadline BIGINT NOT NULL, lease_ms BIGINT NOT NULL, max_attempts BIGINT NOT NULL,"
    " parent_id TEXT NOT NULL DEFAULT '', forked_from TEXT NOT NULL DEFAULT '',"
    " fork_seq BIGINT NOT NULL DEFAULT 0, restoration TEXT);"
    "CREATE INDEX executions_queue ON executions(agent, queued_at) WHERE dstate='queued';"
    "CREATE INDEX executions_lease ON executions(lease_deadline) WHERE dstate='leased';"
    "CREATE INDEX executions_deadline ON executions(deadline_at)"
    " WHERE deadline_at > 0 AND status IN ('pending','running','blocked');"
    "CREATE INDEX executions_agent ON executions(agent, id);"
    "CREATE INDEX executions_status ON executions(status, id);"
    "CREATE INDEX executions_session ON executions(session, id) WHERE session IS NOT NULL;"
    "CREATE TABLE events(execution_id TEXT COLLATE \"C\" NOT NULL, seq BIGINT NOT NULL,"
    " type TEXT NOT NULL, payload TEXT NOT NULL, at BIGINT NOT NULL, PRIMARY KEY(execution_id, seq));"
    "CREATE TABLE steps(ord BIGSERIAL NOT NULL, step_id TEXT COLLATE \"C\" NOT NULL,"
    " execution_id TEXT COLLATE \"C\" NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,"
    " args_hash TEXT NOT NULL, occurrence BIGINT NOT NULL, idempotency TEXT NOT NULL, status TEXT NOT NULL,"
    " args TEXT NOT NULL, result TEXT, error TEXT, rule_id TEXT, approval_id TEXT NOT NULL,"
    " runs BIGINT NOT NULL, indeterminate INTEGER NOT NULL, created_at BIGINT NOT NULL,"
    " completed_at BIGINT NOT NULL, resources TEXT, PRIMARY KEY(execution_id, step_id));"
    "CREATE INDEX steps_indeterminate ON steps(execution_id, kind, target, args_hash)"
    " WHERE indeterminate = 1;"
    "CREATE TABLE step_counters(execution_id TEXT COLLATE \"C\" NOT NULL, kind TEXT NOT NULL,"
    " target TEXT NOT NULL, args_hash TEXT NOT NULL, consumed BIGINT NOT NULL, last_request TEXT,"
    " PRIMARY KEY(execution_id, kind, target, args_hash));"
    "CREATE TABLE approvals(id TEXT COLLATE \"C\" PRIMARY KEY, execution_id TEXT COLLATE \"C\" NOT NULL,"
    " step_id TEXT NOT NULL, status TEXT NOT NULL, rule_id TEXT, reason TEXT, message TEXT,"
    " approvers TEXT, timeout_at BIGINT NOT NULL, created_at BIGINT NOT NULL,"
    " decided_at BIGINT NOT NULL, decided_by TEXT, rationale TEXT);"
    "CREATE INDEX approvals_pending ON approvals(timeout_at) WHERE status='pending';"
    "CREATE INDEX approvals_execution ON approvals(execution_id, created_at);"
    "CREATE TABLE resources(execution_id TEXT COLLATE \"C\" NOT NULL, key TEXT COLLATE \"C\" NOT NULL,"
    " driver_id TEXT NOT NULL, configuration TEXT NOT NULL, coverage_reuse INTEGER NOT NULL,"
    " every_steps BIGINT NOT NULL, on_completion INTEGER NOT NULL, registered_seq BIGINT NOT NULL,"
    " generation BIGINT NOT NULL, count BIGINT NOT NULL, binding TEXT, checkpoint_ref TEXT,"
    " PRIMARY KEY(execution_id, key));"
    "CREATE TABLE checkpoints(execution_id TEXT COLLATE \"C\" NOT NULL, key TEXT COLLATE \"C\" NOT NULL,"
    " generation BIGINT NOT NULL, ref TEXT NOT NULL, covered_seq BIGINT NOT NULL,"
    " invalidated_seq BIGINT NOT NULL, PRIMARY KEY(execution_id, key, generation, covered_seq));",
    /* 2: SQLite's version 6: agents' run-time settings and policies, API keys */
    "ALTER TABLE agents ADD COLUMN settings TEXT;"
    "CREATE TABLE api_keys(id TEXT COLLATE \"C\" PRIMARY KEY, name TEXT NOT NULL,"
    " hash TEXT COLLATE \"C\" NOT NULL UNIQUE, prefix TEXT NOT NULL, scopes TEXT NOT NULL,"
    " created_at BIGINT NOT NULL, revoked_at BIGINT NOT NULL);"
    "CREATE INDEX steps_rule ON steps(rule_id, created_at) WHERE rule_id IS NOT NULL;",
    /* 3: an execution's forks (GET /v0/executions/{id}/forks); only forks are in it */
    "CREATE INDEX executions_forks ON executions(forked_from, id) WHERE forked_from <> '';",
    /* 4: room on each steps page for its rows' completion, so the update stays on the page
     * (HOT: no new entries in the steps indexes); applies to pages written from now on */
    "ALTER TABLE steps SET (fillfactor = 60);",
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

enum stmt_id {
    S_AGENT_UPSERT, S_AGENTS,
    S_EXEC_INSERT, S_EXEC_LOCK, S_EXEC_LOCK_NOWAIT, S_EXEC_LOCK_ROW, S_EXEC_LOCK_ROW_NOWAIT, S_EXEC_GET,
    S_EXEC_UPDATE, S_EXEC_UPDATE_CHECKED, S_EXEC_NEXT_QUEUED, S_EXEC_EXPIRED,
    S_EXEC_PAST_DEADLINE, S_NEXT_TIMER,
    S_EVENT_INSERT, S_EVENTS_INSERT, S_EVENTS,
    S_STEP_GET, S_STEP_GET_FRESH, S_STEP_INSERT, S_STEP_UPDATE, S_STEP_UPDATE_CHECKED, S_STEPS_INSERT, S_STEPS,
    S_STEPS_STATUS, S_STEP_INDET, S_COUNTER_GET, S_COUNTER_SET, S_COUNTERS_UPSERT, S_COUNTERS_CLEAR, S_COUNTERS,
    S_APPROVAL_INSERT, S_APPROVAL_LOCK, S_APPROVAL_GET, S_APPROVAL_UPDATE, S_APPROVALS_EXPIRED,
    S_SESSION_LOCK, S_SESSION_ACTIVE, S_SESSION_WAITING, S_SESSION_LAST_COMPLETED, S_SESSION_EXISTS,
    S_RESOURCE_GET, S_RESOURCE_INSERT, S_RESOURCE_UPDATE, S_RESOURCES,
    S_CHECKPOINT_INSERT, S_CHECKPOINTS, S_CHECKPOINT_INVALIDATE, S_CHECKPOINT_COVERED, S_CHECKPOINT_FIND,
    S_AGENT_SAVE, S_AGENT_SETTINGS, S_AGENT_DELETE, S_API_KEY_PUT, S_API_KEYS, S_API_KEY_FIND,
    S_RULE_STEPS_EXEC, S_RULE_STEPS_AGENT, S_RULE_STEPS_ALL, S_RULE_LOCK, S_RULE_TRY_LOCK, S_PARKED_DUE,
    S_PARKED_NEXT, S_NOTIFY,
    S_COUNT
};

/* An update that must change one row, failing the transaction (division by zero) when it
 * finds none: queued, it may go out in the COMMIT's own message, where a row count read
 * afterwards would come after the commit. */
#define CHECKED(update) "WITH u AS (" update " RETURNING 1) SELECT 1 / (SELECT count(*)::int FROM u)"

static const char *stmt_sql[S_COUNT] = {
    [S_AGENT_UPSERT] = "INSERT INTO agents(name, created_at) VALUES($1, $2) ON CONFLICT DO NOTHING",
    [S_AGENTS] = "SELECT name FROM agents ORDER BY name",
    [S_EXEC_INSERT] = "INSERT INTO executions(" EXEC_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,"
                      "$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24)",
    [S_EXEC_LOCK] = "SELECT 1 FROM executions WHERE id = $1 FOR NO KEY UPDATE",
    [S_EXEC_LOCK_NOWAIT] = "SELECT 1 FROM executions WHERE id = $1 FOR NO KEY UPDATE NOWAIT",
    /* The lock and the row in one statement, for an operation that said what it reads next
     * (store_prefetch_step): FOR NO KEY UPDATE returns the row as its last holder left it,
     * but a subquery would see the snapshot from before the wait, so last_seq (and whether
     * there are resources) come with the step, in S_STEP_GET_FRESH, the next statement. */
    [S_EXEC_LOCK_ROW] = "SELECT id, agent, session, input, status, output, state, failure_reason, created_at,"
                        " updated_at, deadline_at, 0, dispatch_id, attempt, dstate, queued_at, worker_id,"
                        " lease_deadline, lease_ms, max_attempts, parent_id, forked_from, fork_seq, restoration"
                        " FROM executions WHERE id = $1 FOR NO KEY UPDATE",
    [S_EXEC_LOCK_ROW_NOWAIT] = "SELECT id, agent, session, input, status, output, state, failure_reason,"
                               " created_at, updated_at, deadline_at, 0, dispatch_id, attempt, dstate,"
                               " queued_at, worker_id, lease_deadline, lease_ms, max_attempts, parent_id,"
                               " forked_from, fork_seq, restoration"
                               " FROM executions WHERE id = $1 FOR NO KEY UPDATE NOWAIT",
    [S_EXEC_GET] = "SELECT " EXEC_SELECT ", EXISTS(SELECT 1 FROM resources WHERE execution_id = $1)"
                   " FROM executions WHERE id = $1",
#define EXEC_UPDATE                                                                                   \
    "UPDATE executions SET agent=$2, session=$3, input=$4, status=$5, output=$6, state=$7,"         \
    " failure_reason=$8, created_at=$9, updated_at=$10, deadline_at=$11, last_seq=$12,"              \
    " dispatch_id=$13, attempt=$14, dstate=$15, queued_at=$16, worker_id=$17, lease_deadline=$18,"   \
    " lease_ms=$19, max_attempts=$20, parent_id=$21, forked_from=$22, fork_seq=$23, restoration=$24" \
    " WHERE id=$1"
    [S_EXEC_UPDATE] = EXEC_UPDATE,
    [S_EXEC_UPDATE_CHECKED] = CHECKED(EXEC_UPDATE),
#undef EXEC_UPDATE
    [S_EXEC_NEXT_QUEUED] = "SELECT id FROM executions WHERE dstate='queued' AND agent=$1"
                           " ORDER BY queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
    [S_EXEC_EXPIRED] = "SELECT id FROM executions WHERE dstate='leased' AND lease_deadline <= $1"
                       " ORDER BY lease_deadline LIMIT $2 FOR UPDATE SKIP LOCKED",
    [S_EXEC_PAST_DEADLINE] = "SELECT id FROM executions WHERE deadline_at > 0 AND deadline_at <= $1"
                             " AND status IN ('pending','running','blocked') LIMIT $2 FOR UPDATE SKIP LOCKED",
    [S_NEXT_TIMER] = "SELECT (SELECT min(lease_deadline) FROM executions WHERE dstate='leased'),"
                     " (SELECT min(deadline_at) FROM executions WHERE deadline_at > 0"
                     "  AND status IN ('pending','running','blocked')),"
                     " (SELECT min(timeout_at) FROM approvals WHERE status='pending')",
    [S_EVENT_INSERT] = "INSERT INTO events(execution_id, seq, type, payload, at) VALUES($1,$2,$3,$4,$5)",
    /* a batch's events, one row per array element (see "Rows of a batch") */
    [S_EVENTS_INSERT] = "INSERT INTO events(execution_id, seq, type, payload, at) SELECT * FROM"
                        " unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[])",
    [S_EVENTS] = "SELECT seq, type, payload, at FROM events WHERE execution_id=$1 AND seq > $2"
                 " ORDER BY seq LIMIT $3",
    [S_STEP_GET] = "SELECT " STEP_COLS " FROM steps WHERE execution_id = $1 AND step_id = $2",
    /* always one row: the execution's last seq, whether it has resources, then the step or NULLs */
    [S_STEP_GET_FRESH] = "SELECT (SELECT coalesce(max(seq), 0) FROM events WHERE execution_id = $1),"
                         " EXISTS(SELECT 1 FROM resources WHERE execution_id = $1), " STEP_COLS
                         " FROM (SELECT 1) one LEFT JOIN steps ON execution_id = $1 AND step_id = $2",
    [S_STEP_INSERT] = "INSERT INTO steps(" STEP_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
                      "$12,$13,$14,$15,$16,$17,$18)",
#define STEP_UPDATE                                                                                   \
    "UPDATE steps SET status=$8, result=$10, error=$11, rule_id=$12, approval_id=$13, runs=$14,"     \
    " indeterminate=$15, completed_at=$17, idempotency=$7 WHERE execution_id=$2 AND step_id=$1"     \
    " AND kind=$3 AND target=$4 AND args_hash=$5 AND occurrence=$6 AND args=$9 AND created_at=$16"   \
    " AND (resources IS NOT DISTINCT FROM $18)"
    [S_STEP_UPDATE] = STEP_UPDATE,
    [S_STEP_UPDATE_CHECKED] = CHECKED(STEP_UPDATE),
#undef STEP_UPDATE
    /* a batch's steps and counters, one row per array element (see "Rows of a batch") */
#define STEP_ARRAYS                                                                                     \
    "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],"       \
    " $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bigint[],"       \
    " $15::integer[], $16::bigint[], $17::bigint[], $18::text[])"
    [S_STEPS_INSERT] = "INSERT INTO steps(" STEP_COLS ") SELECT * FROM " STEP_ARRAYS,
#undef STEP_ARRAYS
    [S_STEPS] = "SELECT " STEP_COLS " FROM steps WHERE execution_id=$1 ORDER BY created_at, ord",
    [S_STEPS_STATUS] = "SELECT " STEP_COLS " FROM steps WHERE execution_id=$1 AND status=$2"
                       " ORDER BY created_at, ord",
    [S_STEP_INDET] = "SELECT 1 FROM steps WHERE execution_id=$1 AND kind=$2 AND target=$3"
                     " AND args_hash=$4 AND indeterminate=1 LIMIT 1",
    [S_COUNTER_GET] = "SELECT consumed, last_request FROM step_counters WHERE execution_id=$1 AND kind=$2"
                      " AND target=$3 AND args_hash=$4",
    [S_COUNTER_SET] = "INSERT INTO step_counters(execution_id, kind, target, args_hash, consumed, last_request)"
                      " VALUES($1,$2,$3,$4,$5,$6) ON CONFLICT (execution_id, kind, target, args_hash) DO UPDATE SET"
                      " consumed = greatest(step_counters.consumed, excluded.consumed),"
                      " last_request = excluded.last_request",
    [S_COUNTERS_UPSERT] = "INSERT INTO step_counters(execution_id, kind, target, args_hash, consumed, last_request)"
                          " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],"
                          " $6::text[]) ON CONFLICT (execution_id, kind, target, args_hash) DO UPDATE SET"
                          " consumed = greatest(step_counters.consumed, excluded.consumed),"
                          " last_request = excluded.last_request",
    [S_COUNTERS_CLEAR] = "DELETE FROM step_counters WHERE execution_id=$1",
    [S_COUNTERS] = "SELECT kind, target, args_hash, consumed, last_request FROM step_counters"
                   " WHERE execution_id=$1 ORDER BY kind, target, args_hash",
    [S_APPROVAL_INSERT] = "INSERT INTO approvals(" APPROVAL_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,"
                          "$8,$9,$10,$11,$12,$13)",
    /* An approval changes only together with its execution: lock that. */
    [S_APPROVAL_LOCK] = "SELECT 1 FROM executions WHERE id = (SELECT execution_id FROM approvals WHERE id=$1)"
                        " FOR NO KEY UPDATE",
    [S_APPROVAL_GET] = "SELECT " APPROVAL_COLS " FROM approvals WHERE id=$1",
    [S_APPROVAL_UPDATE] = "UPDATE approvals SET status=$2, decided_at=$3, decided_by=$4,"
                          " rationale=$5 WHERE id=$1",
    [S_APPROVALS_EXPIRED] = "SELECT id FROM approvals WHERE status='pending' AND timeout_at <= $1"
                            " ORDER BY timeout_at LIMIT $2",
    [S_SESSION_LOCK] = "SELECT pg_advisory_xact_lock(7405, hashtext($1))",
    [S_SESSION_ACTIVE] = "SELECT id FROM executions WHERE session=$1 AND (status IN ('running','blocked')"
                         " OR (status='pending' AND dstate != 'none')) LIMIT 1",
    [S_SESSION_WAITING] = "SELECT id FROM executions WHERE session=$1 AND status='pending' AND dstate='none'"
                          " ORDER BY id LIMIT 1",
    [S_SESSION_LAST_COMPLETED] = "SELECT id FROM executions WHERE session=$1 AND agent=$2"
                                 " AND status='completed' ORDER BY id DESC LIMIT 1",
    [S_SESSION_EXISTS] = "SELECT id FROM executions WHERE session=$1 LIMIT 1",
    [S_RESOURCE_GET] = "SELECT " RESOURCE_COLS " FROM resources WHERE execution_id=$1 AND key=$2",
    [S_RESOURCE_INSERT] = "INSERT INTO resources(" RESOURCE_COLS ") VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)"
                          " ON CONFLICT DO NOTHING",
    [S_RESOURCE_UPDATE] = "UPDATE resources SET every_steps=$3, on_completion=$4, generation=$5, count=$6,"
                          " binding=$7, checkpoint_ref=$8 WHERE execution_id=$1 AND key=$2",
    [S_RESOURCES] = "SELECT " RESOURCE_COLS " FROM resources WHERE execution_id=$1 ORDER BY registered_seq, key",
    [S_CHECKPOINT_INSERT] = "INSERT INTO checkpoints(execution_id, key, generation, ref, covered_seq,"
                            " invalidated_seq) VALUES($1,$2,$3,$4,$5,$6)"
                            " ON CONFLICT (execution_id, key, generation, covered_seq) DO UPDATE SET"
                            " ref = excluded.ref, invalidated_seq = excluded.invalidated_seq",
    [S_CHECKPOINTS] = "SELECT execution_id, key, generation, ref, covered_seq, invalidated_seq FROM checkpoints"
                      " WHERE execution_id=$1 ORDER BY covered_seq, key",
    [S_CHECKPOINT_INVALIDATE] = "UPDATE checkpoints SET invalidated_seq=$4 WHERE execution_id=$1 AND key=$2"
                                " AND generation=$3 AND invalidated_seq=0",
    [S_CHECKPOINT_COVERED] = "SELECT 1 FROM checkpoints WHERE execution_id=$1 AND key=$2 AND generation=$3"
                             " AND invalidated_seq=0 LIMIT 1",
    [S_CHECKPOINT_FIND] = "SELECT covered_seq FROM checkpoints WHERE execution_id=$1 AND key=$2 AND generation=$3"
                          " AND ref=$4 LIMIT 1",
    [S_AGENT_SAVE] = "INSERT INTO agents(name, created_at, settings) VALUES($1, $2, $3)"
                     " ON CONFLICT (name) DO UPDATE SET settings = excluded.settings",
    [S_AGENT_SETTINGS] = "SELECT name, settings FROM agents WHERE settings IS NOT NULL ORDER BY name",
    [S_AGENT_DELETE] = "DELETE FROM agents WHERE name = $1",
    [S_API_KEY_PUT] = "INSERT INTO api_keys(id, name, hash, prefix, scopes, created_at, revoked_at)"
                      " VALUES($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (id) DO UPDATE SET name = excluded.name,"
                      " hash = excluded.hash, prefix = excluded.prefix, scopes = excluded.scopes,"
                      " revoked_at = excluded.revoked_at",
    [S_API_KEYS] = "SELECT id, name, hash, prefix, scopes, created_at, revoked_at FROM api_keys"
                   " ORDER BY created_at, id",
    [S_API_KEY_FIND] = "SELECT id, name, hash, prefix, scopes, created_at, revoked_at FROM api_keys WHERE hash = $1",
    [S_RULE_STEPS_EXEC] = "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                          " WHERE rule_id = $1 AND created_at >= $2 AND execution_id = $3"
                          " ORDER BY created_at LIMIT $4) x",
    [S_RULE_STEPS_AGENT] = "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                           " WHERE rule_id = $1 AND created_at >= $2"
                           " AND execution_id IN (SELECT id FROM executions WHERE agent = $3)"
                           " ORDER BY created_at LIMIT $4) x",
    [S_RULE_STEPS_ALL] = "SELECT count(*), coalesce(min(c), 0) FROM (SELECT created_at c FROM steps"
                         " WHERE rule_id = $1 AND created_at >= $2 ORDER BY created_at LIMIT $3) x",
    [S_RULE_LOCK] = "SELECT pg_advisory_xact_lock(7406, hashtext($1))",
    [S_RULE_TRY_LOCK] = "SELECT pg_try_advisory_xact_lock(7406, hashtext($1))",
    [S_PARKED_DUE] = "SELECT id FROM executions WHERE dstate = 'released' AND status = 'running'"
                     " AND lease_deadline > 0 AND lease_deadline <= $1 ORDER BY lease_deadline LIMIT $2",
    [S_PARKED_NEXT] = "SELECT coalesce(min(lease_deadline), 0) FROM executions WHERE dstate = 'released'"
                      " AND status = 'running' AND lease_deadline > 0",
    [S_NOTIFY] = "SELECT pg_notify('rebuno', $1)",
};
#undef CHECKED

/* The CHECKED form of an update, or -1. */
static int checked_of(int id)
{
    return id == S_EXEC_UPDATE ? S_EXEC_UPDATE_CHECKED : id == S_STEP_UPDATE ? S_STEP_UPDATE_CHECKED : -1;
}

/* The tables whose rows a batch holds back and writes with one statement each. */
enum table { T_EVENTS, T_STEPS, T_COUNTERS, T_COUNT };
#define T_BIT(t) (1u << (t))

/* A table's held rows: [0, done) written by operations that ended well, [done, n) by the
 * current one; items of the table's own struct (struct pev, pstep, pctr). */
struct rowbuf {
    char *v;
    int n, cap, done;
    size_t bytes;
};

struct pg {
    struct store base; /* first: the public handle */
    char *uri;
    PGconn *c;  /* statements */
    PGconn *lc; /* LISTEN rebuno */
    bool in_tx, in_op;
    int64_t next_connect, next_listen; /* monotonic ms before which no reconnect is tried */
    bool listen_gap;                   /* the listener was down: changes may have been missed */
    char replica[UUID_STR_LEN];        /* tags our own notifications */
    char errmsg[512];
    /* what this batch will NOTIFY: "<replica>\n" then "k name\n" lines */
    char *notes;
    size_t notes_len, notes_cap;
    bool notes_any, notes_overflow;
    /* Statements not sent yet (see "Deferred writes" below): per statement its prepared
     * statement (or SQL text) and parameters, whose text is kept in one arena, and what its
     * result must be */
    char *q; /* the arena: NUL-terminated SQL texts and parameter values */
    size_t q_len, q_cap;
    struct qent *qe;  /* [n_expect], parallel to expect */
    size_t *qv;       /* parameter values: offsets in q, QV_NULL for SQL NULL */
    int n_qv, cap_qv;
    unsigned char *expect;
    int n_expect, cap_expect;
    uint64_t sends; /* q_send calls, to tell whether an operation sent anything */
    int op_x0, op_x1; /* the queue before and after the operation's SAVEPOINT */
    uint64_t op_sends;
    int op_sp;   /* index in the queue of the operation's SAVEPOINT, -1 once sent */
    bool broken; /* a write of an earlier operation failed: the batch can only roll back */
    int batch_ops;   /* operations begun in this batch */
    bool rule_locked; /* the batch holds a rate limit's lock: end it after this operation */
    /* executions this batch has locked, as it last wrote or read them */
    struct execution *locked;
    bool *nores; /* per locked row: it has no resources rows (none can appear while we hold it) */
    int n_locked, cap_locked;
    /* store_prefetch_step: the hint (armed until the execution's next locking read), then
     * the rows read with it, serving the operation's counter and step reads */
    struct {
        bool armed;
        char exec_id[UUID_STR_LEN], step_id[STEP_ID_LEN], args_hash[STEP_ID_LEN];
        char *kind, *target; /* the counter's key; NULL: no counter asked */
        PGresult *counter, *step, *exec;
        int step_col; /* where the step's columns start in pf.step (2 after S_STEP_GET_FRESH) */
    } pf;
    /* Rows written inside operations, not sent yet, per table (see "Rows of a batch") */
    struct rowbuf rb[T_COUNT];
    bool op_sent_done; /* the current operation sent earlier operations' rows after its SAVEPOINT */
};

struct qent {
    int id;    /* prepared statement "r<id>", or -1: SQL text at off */
    int np;    /* parameters, from qv[v0] */
    int v0;
    size_t off;
};
#define QV_NULL ((size_t)-1)

static struct pg *PG(struct store *st)
{
    return (struct pg *)st;
}

/* --- helpers --- */

enum expect { X_OK, X_PF_COUNTER, X_PF_STEP, X_PF_EXEC /* rows kept in p->pf */,
              X_LOCKED /* 't', else -EBUSY */ };

struct params {
    const char *v[26];
    char num[26][24];
    int n;
};

static void p_str(struct params *ps, const char *s)
{
    ps->v[ps->n++] = s;
}

static void p_int(struct params *ps, int64_t x)
{
    snprintf(ps->num[ps->n], sizeof ps->num[0], "%" PRId64, x);
    ps->v[ps->n] = ps->num[ps->n];
    ps->n++;
}

static void set_err(struct pg *p, const char *msg)
{
    snprintf(p->errmsg, sizeof p->errmsg, "%s", msg ? msg : "unknown error");
    size_t n = strlen(p->errmsg);
    while (n && (p->errmsg[n - 1] == '\n' || p->errmsg[n - 1] == ' ')) p->errmsg[--n] = 0;
}

static int result_errno(struct pg *p, PGresult *r)
{
    set_err(p, r ? PQresultErrorMessage(r) : PQerrorMessage(p->c));
    if (!p->c || PQstatus(p->c) != CONNECTION_OK) return -ENOTCONN;
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!state) return -EIO;
    if (strcmp(state, "23505") == 0) return -EEXIST;
    /* deadlock, serialization failure, lock not available: another replica, try again */
    if (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0 || strcmp(state, "55P03") == 0)
        return -EAGAIN;
    /* the server is shutting down or in recovery */
    if (strncmp(state, "57P", 3) == 0 || strncmp(state, "08", 2) == 0) return -ENOTCONN;
    if (strcmp(state, "53100") == 0) return -ENOSPC;
    return -EIO;
}

static int connect_main(struct pg *p, char *errbuf, size_t errlen);

/* A usable connection, reconnecting when it broke outside a batch (rate-limited). */
static int ensure(struct pg *p)
{
    if (p->c && PQstatus(p->c) == CONNECTION_OK) {
        if (!p->broken) return 0;
        set_err(p, "a write of an earlier request in this batch failed; the batch is rolled back");
        return -EIO;
    }
    if (p->in_tx) return -ENOTCONN; /* the batch died with its connection */
    int64_t now = clock_mono_ms();
    if (now < p->next_connect) return -ENOTCONN;
    p->next_connect = now + RECONNECT_MS;
    char why[512];
    if (connect_main(p, why, sizeof why) < 0) {
        set_err(p, why);
        return -ENOTCONN;
    }
    return 0;
}

/* Run prepared statement id; *rc = 0 with the result (caller clears), or -errno and NULL. */
static int q_send(struct pg *p, PGresult **last);
static int q_stmt(struct pg *p, int id, const struct params *ps, enum expect x);

static PGresult *exec_stmt(struct pg *p, enum stmt_id id, const struct params *ps, int *rc)
{
    if ((*rc = ensure(p)) < 0) return NULL;
    if (p->n_expect > 0) { /* the queued writes and this statement in one round trip */
        PGresult *r = NULL;
        if ((*rc = q_stmt(p, (int)id, ps, X_OK)) < 0 || (*rc = q_send(p, &r)) < 0) return NULL;
        return r;
    }
    char name[16];
    snprintf(name, sizeof name, "r%d", (int)id);
    PGresult *r = PQexecPrepared(p->c, name, ps ? ps->n : 0, ps ? ps->v : NULL, NULL, NULL, 0);
    ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return r;
    *rc = result_errno(p, r);
    PQclear(r);
    if (p->in_tx && !p->in_op) p->broken = true; /* no savepoint to go back to */
    return NULL;
}

/* A statement whose rows do not matter; *changed (if not NULL) = rows affected. */
static bool deferrable(enum stmt_id id);

static int run(struct pg *p, enum stmt_id id, const struct params *ps, int64_t *changed)
{
    int rc;
    if (p->in_op && deferrable(id)) { /* checked when it is sent */
        if ((rc = ensure(p)) < 0) return rc;
        if (changed) *changed = 1; /* else the CHECKED form fails the transaction */
        return q_stmt(p, changed && checked_of(id) >= 0 ? checked_of(id) : (int)id, ps, X_OK);
    }
    PGresult *r = exec_stmt(p, id, ps, &rc);
    if (!r) return rc;
    if (changed) *changed = strtoll(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return 0;
}

static int simple(struct pg *p, const char *sql)
{
    if (!p->c || PQstatus(p->c) != CONNECTION_OK) {
        set_err(p, "the connection to PostgreSQL is lost");
        return -ENOTCONN;
    }
    PGresult *r = PQexec(p->c, sql);
    ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? 0 : result_errno(p, r);
    PQclear(r);
    return rc;
}

static char *g_dup(PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : xstrdup(PQgetvalue(r, row, col));
}

static void g_copy(PGresult *r, int row, int col, char *dst, size_t n)
{
    snprintf(dst, n, "%s", PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col));
}

static int64_t g_int(PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* --- rows <-> structs ---
 *
 * Each entity is a table of its fields in the order of its *_COLS list: reading a row and
 * binding an insert walk the table instead of a line per field. */
enum fkind {
    F_STR,  /* char *, NULL = SQL NULL */
    F_BUF,  /* char[], NULL reads as "" */
    F_INT,  /* int64_t */
    F_BOOL, /* bool, stored as 0/1 */
    F_EXEC_STATUS, F_DSTATE, F_STEP_STATUS, F_IDEM, F_APPROVAL_STATUS,
};

struct field {
    unsigned char kind;
    unsigned short off, size;
};

#define FIELD(kind, type, member) {kind, offsetof(type, member), sizeof(((type *)0)->member)}

#define E(kind, member) FIELD(kind, struct execution, member)
static const struct field exec_fields[] = {
    E(F_BUF, id), E(F_STR, agent), E(F_STR, session), E(F_STR, input), E(F_EXEC_STATUS, status),
    E(F_STR, output), E(F_STR, state), E(F_STR, failure_reason), E(F_INT, created_at), E(F_INT, updated_at),
    E(F_INT, deadline_at), E(F_INT, last_seq), E(F_BUF, dispatch_id), E(F_INT, attempt), E(F_DSTATE, dstate),
    E(F_INT, queued_at), E(F_BUF, worker_id), E(F_INT, lease_deadline), E(F_INT, lease_ms),
    E(F_INT, max_attempts), E(F_BUF, parent_id), E(F_BUF, forked_from), E(F_INT, fork_seq),
    E(F_STR, restoration),
};
#undef E
#define E(kind, member) FIELD(kind, struct step, member)
static const struct field step_fields[] = {
    E(F_BUF, step_id), E(F_BUF, exec_id), E(F_STR, kind), E(F_STR, target), E(F_BUF, args_hash),
    E(F_INT, occurrence), E(F_IDEM, idem), E(F_STEP_STATUS, status), E(F_STR, args), E(F_STR, result),
    E(F_STR, error), E(F_STR, rule_id), E(F_BUF, approval_id), E(F_INT, runs), E(F_BOOL, indeterminate),
    E(F_INT, created_at), E(F_INT, completed_at), E(F_STR, resources),
};
#undef E
#define E(kind, member) FIELD(kind, struct approval, member)
static const struct field approval_fields[] = {
    E(F_BUF, id), E(F_BUF, exec_id), E(F_BUF, step_id), E(F_APPROVAL_STATUS, status), E(F_STR, rule_id),
    E(F_STR, reason), E(F_STR, message), E(F_STR, approvers), E(F_INT, timeout_at), E(F_INT, created_at),
    E(F_INT, decided_at), E(F_STR, decided_by), E(F_STR, rationale),
};
#undef E
#define E(kind, member) FIELD(kind, struct resource, member)
static const struct field resource_fields[] = {
    E(F_BUF, exec_id), E(F_STR, key), E(F_STR, driver_id), E(F_STR, configuration), E(F_BOOL, coverage_reuse),
    E(F_INT, every_steps), E(F_BOOL, on_completion), E(F_INT, registered_seq), E(F_INT, generation),
    E(F_INT, count), E(F_STR, binding), E(F_STR, checkpoint_ref),
};
#undef E
#define E(kind, member) FIELD(kind, struct checkpoint, member)
static const struct field checkpoint_fields[] = {
    E(F_BUF, exec_id), E(F_STR, key), E(F_INT, generation), E(F_STR, ref), E(F_INT, covered_seq),
    E(F_INT, invalidated_seq),
};
#undef E
#define FIELDS(t) t, sizeof t / sizeof t[0]

/* Row i of r, columns from col0, into the zeroed struct at obj (its strings owned by it). */
static void read_row(PGresult *r, int i, int col0, void *obj, const struct field *f, size_t n)
{
    for (size_t fc = 0; fc < n; fc++) {
        char *at = (char *)obj + f[fc].off;
        int c = col0 + (int)fc;
        const char *v = PQgetvalue(r, i, c);
        switch (f[fc].kind) {
        case F_STR: *(char **)at = g_dup(r, i, c); break;
        case F_BUF: g_copy(r, i, c, at, f[fc].size); break;
        case F_INT: *(int64_t *)at = g_int(r, i, c); break;
        case F_BOOL: *(bool *)at = g_int(r, i, c) != 0; break;
        case F_EXEC_STATUS: exec_status_parse(v, (enum exec_status *)(void *)at); break;
        case F_DSTATE: dispatch_state_parse(v, (enum dispatch_state *)(void *)at); break;
        case F_STEP_STATUS: step_status_parse(v, (enum step_status *)(void *)at); break;
        case F_IDEM: idempotency_parse(v, (enum idempotency *)(void *)at); break;
        case F_APPROVAL_STATUS: approval_status_parse(v, (enum approval_status *)(void *)at); break;
        }
    }
}

/* Row i into *obj, zeroed first. */
#define READ_ROW_AT(r, i, col0, obj, fields) \
    (memset((obj), 0, sizeof *(obj)), read_row((r), (i), (col0), (obj), FIELDS(fields)))
#define READ_ROW(r, i, obj, fields) READ_ROW_AT(r, i, 0, obj, fields)

/* The text of field f of obj as PostgreSQL takes it (NULL: SQL NULL); num holds a number's
 * digits. */
static const char *field_text(const void *obj, const struct field *f, char num[24])
{
    const char *at = (const char *)obj + f->off;
    switch (f->kind) {
    case F_STR: return *(char *const *)at;
    case F_BUF: return at;
    case F_INT: snprintf(num, 24, "%" PRId64, *(const int64_t *)at); return num;
    case F_BOOL: return *(const bool *)at ? "1" : "0";
    case F_EXEC_STATUS: return exec_status_name(*(const enum exec_status *)(const void *)at);
    case F_DSTATE: return dispatch_state_name(*(const enum dispatch_state *)(const void *)at);
    case F_STEP_STATUS: return step_status_name(*(const enum step_status *)(const void *)at);
    case F_IDEM: return idempotency_name(*(const enum idempotency *)(const void *)at);
    case F_APPROVAL_STATUS: return approval_status_name(*(const enum approval_status *)(const void *)at);
    }
    return NULL;
}

/* The struct at obj as the next parameters of ps (it must outlive ps). */
static void bind_row(struct params *ps, const void *obj, const struct field *f, size_t n)
{
    for (size_t c = 0; c < n; c++, ps->n++) ps->v[ps->n] = field_text(obj, &f[c], ps->num[ps->n]);
}

/* Free the strings (F_STR fields) of the struct at obj. */
static void fields_free(void *obj, const struct field *f, size_t n)
{
    for (size_t c = 0; c < n; c++)
        if (f[c].kind == F_STR) free(*(char **)((char *)obj + f[c].off));
}

/* --- deferred writes ---
 *
 * Inside a batch, statements whose result the kernel does not read (inserts, updates,
 * BEGIN, SAVEPOINT/ROLLBACK TO, the row lock before a read) are not sent one by one: they
 * are queued (the prepared statement and copies of its parameters) and go out in one
 * pipeline (libpq's pipeline mode: Bind/Execute of each prepared statement, one Sync, one
 * write) with the next statement whose rows are needed, which may be the next request's
 * first read, or with the COMMIT. Nothing is parsed per statement on the server (an
 * EXECUTE in a simple query was: its text, every parameter as a literal). Each queued
 * statement's result is still checked; an update that must find its row goes in its
 * CHECKED form, which fails the transaction when it does not (so also when it rides
 * with the COMMIT). A failure after the current request's SAVEPOINT is that request's
 * (it rolls back to it); one before it belongs to a request already answered as done,
 * so the batch is marked broken: its COMMIT fails and every reply in it becomes an error,
 * never a wrong 2xx. A round trip per read instead of one per statement. */
static size_t q_add(struct pg *p, const char *text, size_t n)
{
    if (p->q_len + n + 1 > p->q_cap) {
        size_t cap = p->q_cap ? p->q_cap : 4096;
        while (cap < p->q_len + n + 1) cap *= 2;
        p->q = xrealloc(p->q, p->q_cap = cap);
    }
    size_t off = p->q_len;
    memcpy(p->q + off, text, n);
    p->q[off + n] = 0;
    p->q_len += n + 1;
    return off;
}

static void q_push(struct pg *p, int id, size_t off, int np, int v0, enum expect x)
{
    if (p->n_expect == p->cap_expect) {
        p->cap_expect = p->cap_expect ? p->cap_expect * 2 : 64;
        p->expect = xrealloc(p->expect, (size_t)p->cap_expect);
        p->qe = xrealloc(p->qe, (size_t)p->cap_expect * sizeof *p->qe);
    }
    p->qe[p->n_expect] = (struct qent){.id = id, .np = np, .v0 = v0, .off = off};
    p->expect[p->n_expect++] = (unsigned char)x;
}

/* Queue one statement of plain SQL (no parameters). */
static void q_sql(struct pg *p, const char *sql, enum expect x)
{
    q_push(p, -1, q_add(p, sql, strlen(sql)), 0, 0, x);
}

/* Queue prepared statement id with (copies of) the parameters ps. */
static int q_stmt(struct pg *p, int id, const struct params *ps, enum expect x)
{
    int np = ps ? ps->n : 0, v0 = p->n_qv;
    if (p->n_qv + np > p->cap_qv) {
        while (p->n_qv + np > p->cap_qv) p->cap_qv = p->cap_qv ? p->cap_qv * 2 : 256;
        p->qv = xrealloc(p->qv, (size_t)p->cap_qv * sizeof *p->qv);
    }
    for (int i = 0; i < np; i++) p->qv[p->n_qv++] = ps->v[i] ? q_add(p, ps->v[i], strlen(ps->v[i])) : QV_NULL;
    q_push(p, id, 0, np, v0, x);
    return 0;
}

/* Forget the prefetch hint and the rows read with it. */
static void pf_drop(struct pg *p)
{
    PQclear(p->pf.counter);
    PQclear(p->pf.step);
    PQclear(p->pf.exec);
    p->pf.counter = p->pf.step = p->pf.exec = NULL;
    p->pf.step_col = 0;
    p->pf.armed = false;
    free(p->pf.kind);
    free(p->pf.target);
    p->pf.kind = p->pf.target = NULL;
}

static void q_reset(struct pg *p)
{
    p->q_len = 0;
    p->n_qv = 0;
    p->n_expect = 0;
}

/* Send statements [0, n_expect) in pipeline mode, then the Sync; 0 or a libpq failure. */
static int q_pipeline(struct pg *p)
{
    if (!PQenterPipelineMode(p->c)) return -1;
    for (int i = 0; i < p->n_expect; i++) {
        const struct qent *e = &p->qe[i];
        const char *v[26];
        for (int k = 0; k < e->np && k < 26; k++) {
            size_t off = p->qv[e->v0 + k];
            v[k] = off == QV_NULL ? NULL : p->q + off;
        }
        char name[16];
        snprintf(name, sizeof name, "r%d", e->id);
        int ok = e->id >= 0 ? PQsendQueryPrepared(p->c, name, e->np, v, NULL, NULL, 0)
                            : PQsendQueryParams(p->c, p->q + e->off, 0, NULL, NULL, NULL, NULL, 0);
        if (!ok) return -1;
    }
    return PQpipelineSync(p->c) ? 0 : -1;
}

/* Send what is queued (and whatever the caller queued last); *last = the last statement's
 * result when asked (caller clears). Each result is checked against its expectation. */
static int q_send(struct pg *p, PGresult **last)
{
    if (last) *last = NULL;
    if (p->n_expect == 0) return 0;
    p->sends++;
    if (!p->c || PQstatus(p->c) != CONNECTION_OK) {
        q_reset(p);
        set_err(p, "the connection to PostgreSQL is lost");
        return -ENOTCONN;
    }
    int rc = 0, i = 0, failed_at = -1, sp = p->op_sp;
    p->op_sp = -1;
    if (q_pipeline(p) < 0) { /* the connection is gone, or was never in a state to pipeline */
        rc = result_errno(p, NULL);
        q_reset(p);
        PQfinish(p->c);
        p->c = NULL;
        return rc == -EIO ? -ENOTCONN : rc;
    }
    PGresult *r, *keep = NULL;
    bool synced = false;
    /* per statement: its result (an error, or PIPELINE_ABORTED after one), then NULL */
    while (i < p->n_expect && (r = PQgetResult(p->c)) != NULL) {
        ExecStatusType s = PQresultStatus(r);
        if (s == PGRES_PIPELINE_SYNC) { /* fewer results than statements */
            synced = true;
            PQclear(r);
            break;
        }
        if (rc == 0 && s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
            rc = result_errno(p, r);
            failed_at = i;
            if ((p->qe[i].id == S_STEP_UPDATE_CHECKED || p->qe[i].id == S_EXEC_UPDATE_CHECKED) && rc == -EIO) {
                set_err(p, "a row to update was not found");
                rc = -ENOENT;
            }
        } else if (rc == 0 && i < p->n_expect && p->expect[i] == X_LOCKED &&
                   (PQntuples(r) != 1 || strcmp(PQgetvalue(r, 0, 0), "t") != 0)) {
            set_err(p, "another replica holds the rate limit's lock");
            rc = -EBUSY;
            failed_at = i;
        }
        PGresult **pf = rc != 0 || i >= p->n_expect ? NULL
                        : p->expect[i] == X_PF_COUNTER ? &p->pf.counter
                        : p->expect[i] == X_PF_STEP   ? &p->pf.step
                        : p->expect[i] == X_PF_EXEC   ? &p->pf.exec
                                                       : NULL;
        i++;
        if (pf) {
            PQclear(*pf);
            *pf = r;
        } else if (last && rc == 0) {
            PQclear(keep);
            keep = r;
        } else {
            PQclear(r);
        }
        while ((r = PQgetResult(p->c)) != NULL) PQclear(r); /* the end of this statement's results */
    }
    if (rc == 0 && i < p->n_expect) { /* fewer results than statements: cut off */
        rc = result_errno(p, NULL);
        if (rc == 0) rc = -EIO;
    }
    while (!synced && p->c && PQstatus(p->c) == CONNECTION_OK && (r = PQgetResult(p->c)) != NULL) {
        synced = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
        PQclear(r);
    }
    if (!PQexitPipelineMode(p->c)) { /* results still pending: this connection cannot go on */
        if (rc == 0) rc = -ENOTCONN;
        set_err(p, "the connection to PostgreSQL is out of step; it is reopened");
        PQfinish(p->c);
        p->c = NULL;
    }
    q_reset(p);
    if (rc == 0 && last) *last = keep;
    else PQclear(keep);
    if (rc < 0) pf_drop(p);
    /* A failure after the current operation's SAVEPOINT is that operation's (it rolls
     * back to it); one before it hit an earlier operation, already answered as done:
     * only the whole batch can go now (its COMMIT fails, every reply becomes an error). */
    if (rc < 0 && p->in_tx && !(p->in_op && (sp < 0 || failed_at > sp))) p->broken = true;
    return rc;
}

static bool deferrable(enum stmt_id id)
{
    switch (id) {
    case S_AGENT_UPSERT: case S_EXEC_INSERT: case S_EXEC_UPDATE: case S_EVENT_INSERT: case S_STEP_INSERT:
    case S_STEP_UPDATE: case S_COUNTER_SET: case S_COUNTERS_CLEAR: case S_APPROVAL_INSERT:
    case S_APPROVAL_UPDATE: case S_RESOURCE_UPDATE: case S_CHECKPOINT_INSERT: case S_CHECKPOINT_INVALIDATE:
        return true;
    default:
        return false;
    }
}

/* --- rows of a batch ---
 *
 * Most of a step round trip's rows are events (four), a step (inserted at the submission,
 * updated at the outcome) and a step counter. Inside operations they are not queued one
 * statement each: they wait in p->rb[table] and go out as one multi-row statement per
 * table and batch (arrays unnested: S_EVENTS_INSERT, S_STEPS_INSERT, S_COUNTERS_UPSERT),
 * queued just before the COMMIT; a step's update is its own statement then (see
 * queue_steps), unless the batch inserted the step: then it is one insert of its last
 * state. A counter set twice is one upsert (the larger count, the last request: what the
 * upserts one by one leave). Reads inside the batch see them: a step or counter read by
 * its key is answered from the held rows first, a rate limit's count adds the held steps
 * it takes (held_rule_steps), and a statement that reads such a table some other way (a
 * listing, the indeterminate check) first sends that table's rows. Where they sit in the queue then
 * matters for the savepoints: rows of operations that ended well must never be inside a
 * later operation's savepoint that may roll back. So the earlier ones go before the
 * current operation's SAVEPOINT when that is still queued, else after it (if that
 * operation then rolls back, the batch can only fail: p->broken), and the current
 * operation's own at the end of the queue. When an operation fails its rows are dropped.
 * Events are held only for executions this batch holds locked, whose last_seq the cache
 * keeps, so reading such an execution never needs them; after a rollback (which empties
 * that cache) the earlier operations' events are queued at once. A step update's check
 * (the row exists, with the same immutable columns) is made against a held row at once,
 * and against the database's when it runs (S_STEP_UPDATE_CHECKED): a late failure fails
 * the batch, as a queued statement's does. Each table's buffer has a cap: past it
 * the earlier operations' rows are queued when the next operation begins, and an operation
 * that writes more than that alone (a fork copying a long history) has its own queued as
 * it goes. */
#define BATCH_MAX_ROWS 512 /* also bounds the steps' coalescing (quadratic) and lookups */
#define BATCH_MAX_BYTES (4u << 20)

struct pev {
    char exec_id[UUID_STR_LEN];
    int64_t seq;
    char *type, *payload;
    int64_t at;
};

struct pstep {
    struct step s;
    bool insert; /* else an update of a row inserted before */
};

struct pctr {
    char exec_id[UUID_STR_LEN];
    char *kind, *target;
    char args_hash[STEP_ID_LEN];
    int64_t consumed;
    char *last_request;
};

#define E(kind, member) FIELD(kind, struct pev, member)
static const struct field pev_fields[] = {E(F_BUF, exec_id), E(F_INT, seq), E(F_STR, type), E(F_STR, payload),
                                          E(F_INT, at)};
#undef E
#define E(kind, member) FIELD(kind, struct pctr, member)
static const struct field pctr_fields[] = {E(F_BUF, exec_id), E(F_STR, kind),     E(F_STR, target),
                                           E(F_BUF, args_hash), E(F_INT, consumed), E(F_STR, last_request)};
#undef E

static int queue_events(struct pg *p, int from, int to);
static int queue_steps(struct pg *p, int from, int to);
static int queue_counters(struct pg *p, int from, int to);

/* Per table: its item, the fields of the row in it (at offset row), and what queues the
 * statements for items [from, to). */
static const struct table_def {
    size_t size, row;
    const struct field *f;
    size_t nf;
    int (*queue)(struct pg *p, int from, int to);
} tables[T_COUNT] = {
    [T_EVENTS] = {sizeof(struct pev), 0, FIELDS(pev_fields), queue_events},
    [T_STEPS] = {sizeof(struct pstep), offsetof(struct pstep, s), FIELDS(step_fields), queue_steps},
    [T_COUNTERS] = {sizeof(struct pctr), 0, FIELDS(pctr_fields), queue_counters},
};

static void *rb_at(struct pg *p, enum table t, int i)
{
    return p->rb[t].v + (size_t)i * tables[t].size;
}

static int rb_queue(struct pg *p, enum table t, int from, int to);

/* A new zeroed item at the end of table t's buffer, counted as bytes in its cap. */
static void *rb_push(struct pg *p, enum table t, size_t bytes)
{
    struct rowbuf *b = &p->rb[t];
    if (b->n - b->done >= BATCH_MAX_ROWS) rb_queue(p, t, b->done, b->n); /* a failure breaks the batch */
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = xrealloc(b->v, (size_t)b->cap * tables[t].size);
    }
    b->bytes += bytes + 64;
    return memset(rb_at(p, t, b->n++), 0, tables[t].size);
}

static void rb_free(struct pg *p, enum table t, int from, int to)
{
    for (int i = from; i < to; i++) fields_free((char *)rb_at(p, t, i) + tables[t].row, tables[t].f, tables[t].nf);
}

/* Forget the current operation's rows of every table (keep) or all rows (!keep). */
static void rb_drop(struct pg *p, bool keep)
{
    for (int t = 0; t < T_COUNT; t++) {
        struct rowbuf *b = &p->rb[t];
        rb_free(p, t, keep ? b->done : 0, b->n);
        b->n = b->done = keep ? b->done : 0;
        if (b->n == 0) b->bytes = 0;
    }
}

/* One element of a text[] literal: quoted, backslash before '"' and '\'. */
static void arr_text(struct buf *b, const char *s)
{
    buf_append(b, "\"", 1);
    for (const char *q = s;;) {
        size_t run = strcspn(q, "\"\\");
        buf_append(b, q, run);
        q += run;
        if (!*q) break;
        buf_append(b, "\\", 1);
        buf_append(b, q++, 1);
    }
    buf_append(b, "\"", 1);
}

/* Queue prepared statement id with the rows rows[0..n) of table t as one array parameter
 * per column. */
static int q_rows(struct pg *p, enum stmt_id id, enum table t, const void *const *rows, int n)
{
    const struct table_def *d = &tables[t];
    struct buf a[26];
    for (size_t k = 0; k < d->nf; k++) buf_init(&a[k], 0), buf_append(&a[k], "{", 1);
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < d->nf; k++) {
            char num[24];
            const char *v = field_text(rows[i], &d->f[k], num);
            if (i > 0) buf_append(&a[k], ",", 1);
            if (v) arr_text(&a[k], v);
            else buf_append(&a[k], "NULL", 4);
        }
    struct params ps = {0};
    for (size_t k = 0; k < d->nf; k++) buf_append(&a[k], "}", 1), p_str(&ps, a[k].data);
    int rc = q_stmt(p, id, &ps, X_OK);
    for (size_t k = 0; k < d->nf; k++) buf_fini(&a[k]);
    return rc;
}

static int queue_events(struct pg *p, int from, int to)
{
    const void **rows = xcalloc((size_t)(to - from), sizeof *rows);
    for (int i = from; i < to; i++) rows[i - from] = rb_at(p, T_EVENTS, i);
    int rc = q_rows(p, S_EVENTS_INSERT, T_EVENTS, rows, to - from);
    free(rows);
    return rc;
}

static bool same_step(const struct step *a, const struct step *b)
{
    return strcmp(a->step_id, b->step_id) == 0 && strcmp(a->exec_id, b->exec_id) == 0;
}

/* Steps [from, to): per step its last state, in one insert with the others when the range
 * inserted it (at the place of the insert, so steps keep their order), else as an update. */
static int queue_steps(struct pg *p, int from, int to)
{
    const void **ins = xcalloc((size_t)(to - from), sizeof *ins), **upd = xcalloc((size_t)(to - from), sizeof *upd);
    int n_ins = 0, n_upd = 0, rc = 0;
    for (int i = from; i < to; i++) {
        const struct pstep *x = rb_at(p, T_STEPS, i), *last = x;
        bool covered = false; /* an update that an insert before it or a later update writes */
        for (int j = from; j < to; j++) {
            const struct pstep *y = rb_at(p, T_STEPS, j);
            if (j == i || !same_step(&y->s, &x->s)) continue;
            if (j > i) last = y, covered = true;
            else if (y->insert) covered = true;
        }
        if (x->insert) ins[n_ins++] = &last->s;
        else if (!covered) upd[n_upd++] = &x->s; /* the last update of a step inserted before */
    }
    if (n_ins) rc = q_rows(p, S_STEPS_INSERT, T_STEPS, ins, n_ins);
    /* Updates go one statement each: an UPDATE ... FROM unnest(...) is a join whose plan
     * (made once, while the table may still be small) can hash the whole steps table. */
    for (int i = 0; rc == 0 && i < n_upd; i++) {
        struct params ps = {0};
        bind_row(&ps, upd[i], FIELDS(step_fields));
        rc = q_stmt(p, S_STEP_UPDATE_CHECKED, &ps, X_OK);
    }
    free(ins);
    free(upd);
    return rc;
}

static bool same_counter(const struct pctr *a, const struct pctr *b)
{
    return strcmp(a->exec_id, b->exec_id) == 0 && strcmp(a->args_hash, b->args_hash) == 0 &&
           strcmp(a->kind, b->kind) == 0 && strcmp(a->target, b->target) == 0;
}

/* Counters [from, to): one upsert per key, with the largest count and the last request. */
static int queue_counters(struct pg *p, int from, int to)
{
    struct pctr *one = xcalloc((size_t)(to - from), sizeof *one);
    const void **rows = xcalloc((size_t)(to - from), sizeof *rows);
    int n = 0;
    for (int i = from; i < to; i++) {
        const struct pctr *x = rb_at(p, T_COUNTERS, i);
        int k = 0;
        while (k < n && !same_counter(&one[k], x)) k++;
        if (k == n) one[n++] = *x; /* borrowed strings */
        if (x->consumed > one[k].consumed) one[k].consumed = x->consumed;
        one[k].last_request = x->last_request;
    }
    for (int k = 0; k < n; k++) rows[k] = &one[k];
    int rc = q_rows(p, S_COUNTERS_UPSERT, T_COUNTERS, rows, n);
    free(rows);
    free(one);
    return rc;
}

/* Queue table t's rows [from, to) at the end of the queue and take them out of its buffer
 * (from is 0 or done, to is done or n). */
static int rb_queue(struct pg *p, enum table t, int from, int to)
{
    struct rowbuf *b = &p->rb[t];
    if (from >= to) return 0;
    int rc = tables[t].queue(p, from, to);
    /* They are gone from the buffer either way: the batch cannot commit without them. */
    if (rc < 0 && p->in_tx) {
        set_err(p, "cannot quote the batch's rows for PostgreSQL");
        p->broken = true;
    }
    rb_free(p, t, from, to);
    memmove(rb_at(p, t, from), rb_at(p, t, to), (size_t)(b->n - to) * tables[t].size);
    b->n -= to - from;
    if (b->done >= to) b->done -= to - from;
    else if (b->done > from) b->done = from;
    if (b->n == 0) b->bytes = 0;
    return rc;
}

/* Move queue entry from to index to (to < from). */
static void q_move(struct pg *p, int from, int to)
{
    struct qent e = p->qe[from];
    unsigned char x = p->expect[from];
    memmove(p->qe + to + 1, p->qe + to, (size_t)(from - to) * sizeof *p->qe);
    memmove(p->expect + to + 1, p->expect + to, (size_t)(from - to));
    p->qe[to] = e;
    p->expect[to] = x;
}

/* The held rows of the tables in mask must be in the database before the next statement
 * (which reads those tables some other way than by key). */
static int rows_flush(struct pg *p, unsigned mask)
{
    for (int t = 0; t < T_COUNT; t++) {
        struct rowbuf *b = &p->rb[t];
        int rc;
        if (!(mask & T_BIT(t))) continue;
        if (b->done > 0) {
            int x0 = p->n_expect;
            if ((rc = rb_queue(p, t, 0, b->done)) < 0) return rc;
            if (p->in_op && p->op_sp >= 0) { /* before the operation's SAVEPOINT, still queued */
                for (int x = x0; x < p->n_expect; x++) {
                    q_move(p, x, p->op_sp);
                    p->op_x0++, p->op_sp++, p->op_x1++;
                }
            } else if (p->in_op) {
                p->op_sent_done = true;
            }
        }
        if ((rc = rb_queue(p, t, b->done, b->n)) < 0) return rc;
    }
    return 0;
}

/* --- connections, schema --- */

/* host:port of a connection (or of its options when it failed), for messages. */
static void where(PGconn *c, const char *uri, char *out, size_t n)
{
    const char *host = c ? PQhost(c) : NULL, *port = c ? PQport(c) : NULL, *db = c ? PQdb(c) : NULL;
    char *red = store_spec_redacted(uri);
    if (host && *host)
        snprintf(out, n, "%s%s port %s, database \"%s\"", host[0] == '/' ? "socket folder " : "host ", host,
                 port && *port ? port : "5432", db ? db : "?");
    else
        snprintf(out, n, "%s", red);
    free(red);
}

static PGconn *open_conn(const char *uri, char *errbuf, size_t errlen)
{
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *vals[] = {uri, "3", "rebuno", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c && PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, "SET client_min_messages = warning");
        PQclear(r);
        return c;
    }
    char at[300];
    where(c, uri, at, sizeof at);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", c ? PQerrorMessage(c) : "out of memory");
    /* libpq's message spans lines: one line, no trailing blanks or full stop */
    char *w = msg;
    for (const char *q = msg; *q; q++) {
        char ch = *q == '\n' || *q == '\t' ? ' ' : *q;
        if (ch == ' ' && (w == msg || w[-1] == ' ')) continue;
        *w++ = ch;
    }
    while (w > msg && (w[-1] == ' ' || w[-1] == '.')) w--;
    *w = 0;
    snprintf(errbuf, errlen,
             "cannot connect to PostgreSQL at %s: %s; check that PostgreSQL runs there and accepts this "
             "user, and that the store setting (store: in the config, REBUNO_STORE or --store) names the "
             "right host, port, database, user and password",
             at, msg);
    PQfinish(c);
    return NULL;
}

static int migrate(struct pg *p, char *errbuf, size_t errlen)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)", MIGRATE_LOCK);
    if (simple(p, sql) < 0) goto fail;
    int rc = -1;
    for (;;) {
        int version = 0;
        if (simple(p, "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)") < 0)
            goto fail_locked;
        PGresult *r = PQexec(p->c, "SELECT value FROM meta WHERE key='schema_version'");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            set_err(p, PQresultErrorMessage(r));
            PQclear(r);
            goto fail_locked;
        }
        if (PQntuples(r) == 1) version = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (version > SCHEMA_VERSION) {
            snprintf(errbuf, errlen,
                     "the PostgreSQL database has rebuno schema %d, newer than this rebuno's %d: run a newer "
                     "rebuno (or point store at another database)",
                     version, SCHEMA_VERSION);
            goto out;
        }
        if (version == SCHEMA_VERSION) break;
        char *m = xasprintf("BEGIN; %s INSERT INTO meta(key, value) VALUES('schema_version', '%d')"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value; COMMIT;",
                            migrations[version], version + 1);
        int mr = simple(p, m);
        free(m);
        if (mr < 0) {
            snprintf(errbuf, errlen, "cannot migrate the PostgreSQL database to schema %d: %s", version + 1,
                     p->errmsg);
            simple(p, "ROLLBACK");
            goto out;
        }
    }
    rc = 0;
out:
    snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)", MIGRATE_LOCK);
    simple(p, sql);
    return rc;
fail_locked:
    snprintf(errbuf, errlen, "cannot read the schema version: %s", p->errmsg);
    goto out;
fail:
    snprintf(errbuf, errlen, "cannot lock the schema for migration: %s", p->errmsg);
    return -1;
}

static int connect_main(struct pg *p, char *errbuf, size_t errlen)
{
    PQfinish(p->c);
    p->c = open_conn(p->uri, errbuf, errlen);
    if (!p->c) return -1;
    for (int i = 0; i < S_COUNT; i++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", i);
        PGresult *r = PQprepare(p->c, name, stmt_sql[i], 0, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(errbuf, errlen, "cannot prepare statement %d: %s", i, PQresultErrorMessage(r));
            PQclear(r);
            PQfinish(p->c);
            p->c = NULL;
            return -1;
        }
        PQclear(r);
    }
    return 0;
}

static int connect_listener(struct pg *p)
{
    char why[512];
    PQfinish(p->lc);
    p->lc = open_conn(p->uri, why, sizeof why);
    if (!p->lc) return -1;
    PGresult *r = PQexec(p->lc, "LISTEN rebuno");
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok || PQsetnonblocking(p->lc, 1) < 0) {
        PQfinish(p->lc);
        p->lc = NULL;
        return -1;
    }
    p->listen_gap = true;
    return 0;
}

static void pg_close(struct store *st);
static const struct store_vt pg_vt;

struct store *store_pg_open(const char *uri, char *errbuf, size_t errlen)
{
    struct pg *p = xcalloc(1, sizeof *p);
    p->base.vt = &pg_vt;
    p->uri = xstrdup(uri);
    uuid_v7(p->replica);
    if (!(p->c = open_conn(uri, errbuf, errlen))) goto fail;
    if (migrate(p, errbuf, errlen) < 0 || connect_main(p, errbuf, errlen) < 0) goto fail;
    if (connect_listener(p) < 0) {
        snprintf(errbuf, errlen, "cannot LISTEN on PostgreSQL: %s", PQerrorMessage(p->c));
        goto fail;
    }
    p->listen_gap = false;
    return &p->base;
fail:
    pg_close(&p->base);
    return NULL;
}

static void unlock_all(struct pg *p)
{
    for (int i = 0; i < p->n_locked; i++) execution_fini(&p->locked[i]);
    p->n_locked = 0;
}

static void pg_close(struct store *st)
{
    struct pg *p = PG(st);
    unlock_all(p);
    pf_drop(p);
    rb_drop(p, false);
    for (int t = 0; t < T_COUNT; t++) free(p->rb[t].v);
    free(p->locked);
    free(p->nores);
    PQfinish(p->c);
    PQfinish(p->lc);
    free(p->notes);
    free(p->q);
    free(p->qe);
    free(p->qv);
    free(p->expect);
    free(p->uri);
    free(p);
}

static const char *pg_errmsg(struct store *st)
{
    return PG(st)->errmsg;
}

static const char *pg_kind(struct store *st)
{
    return "postgres";
}

/* --- transactions --- */

static void notes_reset(struct pg *p)
{
    p->notes_len = 0;
    p->notes_any = p->notes_overflow = false;
}

static int pg_begin(struct store *st)
{
    struct pg *p = PG(st);
    int r = ensure(p);
    if (r < 0) return r;
    q_reset(p);
    pf_drop(p);
    p->broken = false;
    p->op_sp = -1;
    rb_drop(p, false);
    p->batch_ops = 0;
    p->rule_locked = false;
    q_sql(p, "BEGIN", X_OK); /* goes out with the batch's first statement */
    p->in_tx = true;
    notes_reset(p);
    return 0;
}

static int pg_commit(struct store *st)
{
    struct pg *p = PG(st);
    int r = ensure(p); /* -EIO when broken */
    if (r < 0) return r;
    for (int t = 0; t < T_COUNT; t++) /* the batch's rows: one statement per table */
        if ((r = rb_queue(p, t, 0, p->rb[t].n)) < 0) return r;
    if (p->notes_any || p->notes_overflow) {
        char *payload = p->notes_overflow ? xasprintf("%s\n* \n", p->replica) : NULL;
        struct params ps = {0};
        p_str(&ps, payload ? payload : p->notes);
        q_stmt(p, S_NOTIFY, &ps, X_OK); /* copied */
        free(payload);
    }
    q_sql(p, "COMMIT", X_OK); /* the batch's last writes, the notification and the commit: one round trip */
    if ((r = q_send(p, NULL)) < 0) return r;
    p->in_tx = p->in_op = p->rule_locked = false;
    unlock_all(p);
    pf_drop(p);
    notes_reset(p);
    return 0;
}

static int pg_rollback(struct store *st)
{
    struct pg *p = PG(st);
    unlock_all(p);
    pf_drop(p);
    notes_reset(p);
    q_reset(p);
    rb_drop(p, false);
    p->in_tx = p->in_op = p->broken = p->rule_locked = false;
    int r = simple(p, "ROLLBACK");
    return r == -ENOTCONN ? 0 : r; /* a lost connection rolled it back already */
}

static bool pg_in_tx(const struct store *st)
{
    return ((const struct pg *)st)->in_tx;
}

static int pg_op_begin(struct store *st)
{
    struct pg *p = PG(st);
    int r = ensure(p);
    if (r < 0) return r;
    pf_drop(p);
    for (int t = 0; t < T_COUNT; t++)
        if ((p->rb[t].n >= BATCH_MAX_ROWS || p->rb[t].bytes >= BATCH_MAX_BYTES) &&
            (r = rb_queue(p, t, 0, p->rb[t].done)) < 0)
            return r;
    /* One SAVEPOINT per operation and no RELEASE: the next operation's savepoint nests in
     * this one, ROLLBACK TO finds the innermost, and the COMMIT ends them all (a RELEASE
     * per operation was a statement each to the server, for nothing). */
    p->op_x0 = p->n_expect;
    q_sql(p, "SAVEPOINT op", X_OK);
    p->op_x1 = p->n_expect, p->op_sends = p->sends;
    p->op_sp = p->n_expect - 1;
    p->op_sent_done = false;
    p->in_op = true;
    p->batch_ops++;
    return 0;
}

/* The operation reached the store with nothing: forget its SAVEPOINT. */
static bool op_untouched(struct pg *p)
{
    if (p->sends != p->op_sends || p->n_expect != p->op_x1) return false;
    for (int t = 0; t < T_COUNT; t++)
        if (p->rb[t].n > p->rb[t].done) return false;
    p->n_expect = p->op_x0; /* its entries' text stays in the arena until the next send */
    return true;
}

static int pg_op_end(struct store *st, bool ok)
{
    struct pg *p = PG(st);
    p->in_op = false;
    p->op_sp = -1;
    pf_drop(p);
    if (op_untouched(p)) return 0;
    if (ok) {
        /* Its writes stay queued: they go out with the next request's first read or the
         * COMMIT, and its events with the COMMIT; a failure then fails the batch (q_send). */
        for (int t = 0; t < T_COUNT; t++) p->rb[t].done = p->rb[t].n;
        return 0;
    }
    rb_drop(p, true);
    if (p->sends == p->op_sends) { /* nothing of it reached the server: forget it all */
        p->n_expect = p->op_x0;
    } else {
        q_sql(p, "ROLLBACK TO SAVEPOINT op", X_OK);
        q_sql(p, "RELEASE SAVEPOINT op", X_OK);
        /* earlier operations' rows it sent after its savepoint are rolled back too */
        if (p->op_sent_done) p->broken = true;
    }
    unlock_all(p); /* rows it inserted were cached; the locks taken since the savepoint are gone */
    /* Buffered events are for cached rows only: queue the earlier ones now, after the rollback. */
    return rb_queue(p, T_EVENTS, 0, p->rb[T_EVENTS].done);
}

/* --- notifications between replicas --- */

static void pg_notify(struct store *st, char kind, const char *name)
{
    struct pg *p = PG(st);
    if (!p->in_tx || p->notes_overflow) return;
    char line[300];
    int n = snprintf(line, sizeof line, "%c %s\n", kind, name);
    if (n <= 0 || (size_t)n >= sizeof line) {
        p->notes_overflow = true;
        return;
    }
    if (p->notes_len == 0) {
        if (p->notes_cap < 64) p->notes = xrealloc(p->notes, p->notes_cap = 1024);
        p->notes_len = (size_t)snprintf(p->notes, p->notes_cap, "%s\n", p->replica);
    }
    if (memmem(p->notes, p->notes_len, line, (size_t)n)) return;
    if (p->notes_len + (size_t)n > NOTIFY_MAX) {
        p->notes_overflow = true;
        return;
    }
    if (p->notes_len + (size_t)n + 1 > p->notes_cap) p->notes = xrealloc(p->notes, p->notes_cap *= 2);
    memcpy(p->notes + p->notes_len, line, (size_t)n + 1);
    p->notes_len += (size_t)n;
    p->notes_any = true;
}

static int pg_watch_fd(struct store *st)
{
    struct pg *p = PG(st);
    if (p->lc && PQstatus(p->lc) == CONNECTION_OK) return PQsocket(p->lc);
    int64_t now = clock_mono_ms();
    if (now < p->next_listen) return -1;
    p->next_listen = now + RECONNECT_MS;
    return connect_listener(p) == 0 ? PQsocket(p->lc) : -1;
}

static int pg_watch_read(struct store *st, store_change_fn fn, void *arg)
{
    struct pg *p = PG(st);
    if (p->listen_gap) {
        p->listen_gap = false;
        fn('*', "", arg);
    }
    if (!p->lc) return -ENOTCONN;
    if (!PQconsumeInput(p->lc) || PQstatus(p->lc) != CONNECTION_OK) {
        PQfinish(p->lc);
        p->lc = NULL;
        return -ENOTCONN;
    }
    PGnotify *n;
    size_t self = strlen(p->replica);
    while ((n = PQnotifies(p->lc)) != NULL) {
        const char *s = n->extra;
        if (strncmp(s, p->replica, self) != 0 || s[self] != '\n') {
            const char *line = strchr(s, '\n');
            while (line && line[1]) {
                line++;
                const char *end = strchr(line, '\n');
                size_t len = end ? (size_t)(end - line) : strlen(line);
                if (len >= 2 && line[1] == ' ') {
                    char name[300];
                    snprintf(name, sizeof name, "%.*s", (int)(len - 2), line + 2);
                    fn(line[0], name, arg);
                }
                line = end;
            }
        }
        PQfreemem(n);
    }
    return 0;
}

/* --- agents --- */

static int pg_agent_upsert(struct store *st, const char *name, int64_t now)
{
    struct params ps = {0};
    p_str(&ps, name);
    p_int(&ps, now);
    return run(PG(st), S_AGENT_UPSERT, &ps, NULL);
}

static int pg_agents_each(struct store *st, store_name_fn fn, void *arg)
{
    int rc;
    PGresult *r = exec_stmt(PG(st), S_AGENTS, NULL, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) rc = fn(PQgetvalue(r, i, 0), arg);
    PQclear(r);
    return rc;
}

/* --- executions --- */

static struct execution *locked_find(struct pg *p, const char *id)
{
    for (int i = 0; i < p->n_locked; i++)
        if (strcmp(p->locked[i].id, id) == 0) return &p->locked[i];
    return NULL;
}

/* Remember (or refresh) a row this batch holds locked, keeping the cached last_seq
 * when it is ahead (store_exec_update writes the caller's, which may lag). */
static void locked_put(struct pg *p, const struct execution *e)
{
    struct execution *c = locked_find(p, e->id);
    if (c) {
        int64_t seq = c->last_seq;
        execution_fini(c);
        store_exec_copy(c, e);
        if (seq > c->last_seq) c->last_seq = seq;
        return;
    }
    if (p->n_locked == p->cap_locked) {
        p->cap_locked = p->cap_locked ? p->cap_locked * 2 : 16;
        p->locked = xrealloc(p->locked, (size_t)p->cap_locked * sizeof *p->locked);
        p->nores = xrealloc(p->nores, (size_t)p->cap_locked * sizeof *p->nores);
    }
    p->nores[p->n_locked] = false;
    store_exec_copy(&p->locked[p->n_locked++], e);
}

static int pg_exec_insert(struct store *st, const struct execution *e)
{
    struct pg *p = PG(st);
    struct params ps = {0};
    bind_row(&ps, e, FIELDS(exec_fields));
    int r = run(p, S_EXEC_INSERT, &ps, NULL);
    if (r == 0 && p->in_tx) {
        locked_put(p, e); /* a new row is ours until commit */
        p->nores[locked_find(p, e->id) - p->locked] = true;
    }
    return r;
}

static int pg_exec_update(struct store *st, const struct execution *e)
{
    struct pg *p = PG(st);
    struct params ps = {0};
    bind_row(&ps, e, FIELDS(exec_fields));
    int64_t n = 0;
    int r = run(p, S_EXEC_UPDATE, &ps, &n);
    if (r == 0 && n != 1) return -ENOENT;
    if (r == 0 && p->in_tx) locked_put(p, e);
    return r;
}

/* An operation's first read of execution id, with the rows store_prefetch_step named:
 * the lock and the row, the counter, then the step with the execution's last seq and
 * whether it has resources (fresh: that statement starts after the lock is held), in one
 * round trip and one statement fewer than the lock, the row and the step apart. */
static int exec_get_prefetched(struct pg *p, const char *id, struct execution *out)
{
    int rc;
    struct params ps = {0}, pc = {0}, pst = {0};
    p_str(&ps, id);
    p_str(&pc, id), p_str(&pc, p->pf.kind), p_str(&pc, p->pf.target), p_str(&pc, p->pf.args_hash);
    p_str(&pst, id), p_str(&pst, p->pf.step_id);
    p->pf.armed = false;
    if ((rc = ensure(p)) < 0 || (rc = q_stmt(p, p->rule_locked ? S_EXEC_LOCK_ROW_NOWAIT : S_EXEC_LOCK_ROW, &ps, X_PF_EXEC)) < 0 ||
        (p->pf.kind && (rc = q_stmt(p, S_COUNTER_GET, &pc, X_PF_COUNTER)) < 0) ||
        (rc = q_stmt(p, S_STEP_GET_FRESH, &pst, X_PF_STEP)) < 0 || (rc = q_send(p, NULL)) < 0)
        return rc;
    PGresult *x = p->pf.exec, *f = p->pf.step;
    if (!x || !f || PQntuples(f) != 1) {
        pf_drop(p);
        set_err(p, "the prefetched rows are missing");
        return -EIO;
    }
    if (PQntuples(x) == 0) {
        pf_drop(p);
        return -ENOENT;
    }
    READ_ROW(x, 0, out, exec_fields);
    out->last_seq = g_int(f, 0, 0);
    bool nores = strcmp(PQgetvalue(f, 0, 1), "f") == 0;
    p->pf.step_col = 2;
    PQclear(p->pf.exec);
    p->pf.exec = NULL;
    locked_put(p, out);
    p->nores[locked_find(p, id) - p->locked] = nores;
    return 0;
}

static int pg_exec_get(struct store *st, const char *id, struct execution *out)
{
    struct pg *p = PG(st);
    struct execution *c = p->in_tx ? locked_find(p, id) : NULL;
    if (c) {
        store_exec_copy(out, c);
        return 0;
    }
    struct params ps = {0};
    p_str(&ps, id);
    int rc;
    /* Inside an operation: lock, then read what the last holder committed. A read between
     * operations (GET while a batch is open) locks nothing: a lock error there would
     * abort the whole batch, not one savepoint. */
    bool lock = p->in_tx && p->in_op;
    if (lock && p->pf.armed && strcmp(p->pf.exec_id, id) == 0) return exec_get_prefetched(p, id, out);
    if (lock) { /* queued: the lock and the read in one round trip (no row: -ENOENT below) */
        /* holding a rate limit's lock, never wait (pg_rule_steps_since): 55P03 is -EAGAIN */
        if ((rc = ensure(p)) < 0 || (rc = q_stmt(p, p->rule_locked ? S_EXEC_LOCK_NOWAIT : S_EXEC_LOCK, &ps, X_OK)) < 0)
            return rc;
    }
    PGresult *r = exec_stmt(p, S_EXEC_GET, &ps, &rc);
    if (!r) return rc;
    bool nores = false;
    if (PQntuples(r) == 0) {
        rc = -ENOENT;
    } else {
        READ_ROW(r, 0, out, exec_fields);
        nores = strcmp(PQgetvalue(r, 0, 24), "f") == 0;
    }
    PQclear(r);
    if (rc < 0) pf_drop(p);
    if (rc == 0 && lock) {
        locked_put(p, out);
        p->nores[locked_find(p, id) - p->locked] = nores;
    }
    return rc;
}

/* One " AND <test> $n" of a listing's WHERE clause, none when value is NULL. */
static void filter(char *sql, size_t cap, int *len, struct params *ps, const char *test, const char *value)
{
    if (!value) return;
    p_str(ps, value);
    *len += snprintf(sql + *len, cap - (size_t)*len, " AND %s $%d", test, ps->n);
}

/* Append the WHERE terms of a filter to sql (after "WHERE true") with their parameters;
 * lo/hi hold the id range of the times and must outlive the query. */
static int pg_filter_where(const struct exec_filter *f, bool status, const char *cursor, struct params *ps,
                           char *sql, size_t size, int len, char lo[UUID_STR_LEN], char hi[UUID_STR_LEN])
{
#define ADD(...) (len += snprintf(sql + len, size - (size_t)len, __VA_ARGS__))
    if (f->agent) p_str(ps, f->agent), ADD(" AND agent = $%d", ps->n);
    if (status && f->status) p_str(ps, f->status), ADD(" AND status = $%d", ps->n);
    if (cursor) p_str(ps, cursor), ADD(" AND id < $%d", ps->n);
    if (f->session) p_str(ps, f->session), ADD(" AND session = $%d", ps->n);
    if (f->created_after) {
        store_uuid_floor(f->created_after - STORE_ID_CLOCK_SLACK_MS, lo);
        p_str(ps, lo), ADD(" AND id >= $%d", ps->n);
        p_int(ps, f->created_after), ADD(" AND created_at >= $%d", ps->n);
    }
    if (f->created_before) {
        store_uuid_floor(f->created_before + STORE_ID_CLOCK_SLACK_MS, hi);
        p_str(ps, hi), ADD(" AND id < $%d", ps->n);
        p_int(ps, f->created_before), ADD(" AND created_at < $%d", ps->n);
    }
    if (f->forked_from) p_str(ps, f->forked_from), ADD(" AND forked_from = $%d AND forked_from <> ''", ps->n);
#undef ADD
    return len;
}

static PGresult *pg_query(struct pg *p, const char *sql, const struct params *ps, int *rc)
{
    *rc = ensure(p);
    if (*rc == 0) *rc = rows_flush(p, T_BIT(T_EVENTS)); /* listings read last_seq, from events */
    if (*rc == 0) *rc = q_send(p, NULL); /* what is queued runs first */
    if (*rc < 0) return NULL;
    PGresult *r = PQexecParams(p->c, sql, ps->n, NULL, ps->v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        *rc = result_errno(p, r);
        PQclear(r);
        return NULL;
    }
    return r;
}

static int pg_exec_list(struct store *st, const struct exec_filter *f, const char *cursor, int limit,
                        store_exec_fn fn, void *arg)
{
    struct pg *p = PG(st);
    char sql[1000], lo[UUID_STR_LEN], hi[UUID_STR_LEN];
    struct params ps = {0};
    int len = snprintf(sql, sizeof sql, "SELECT " EXEC_SELECT " FROM executions WHERE true");
    len = pg_filter_where(f, true, cursor, &ps, sql, sizeof sql, len, lo, hi);
    p_int(&ps, limit);
    snprintf(sql + len, sizeof sql - (size_t)len, " ORDER BY id DESC LIMIT $%d", ps.n);
    int rc;
    PGresult *r = pg_query(p, sql, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct execution e;
        READ_ROW(r, i, &e, exec_fields);
        rc = fn(&e, arg);
        execution_fini(&e);
    }
    PQclear(r);
    return rc;
}

static int pg_exec_counts(struct store *st, const struct exec_filter *f, int64_t counts[EXEC_STATUS_COUNT])
{
    struct pg *p = PG(st);
    char sql[700], lo[UUID_STR_LEN], hi[UUID_STR_LEN];
    struct params ps = {0};
    int len = snprintf(sql, sizeof sql, "SELECT status, count(*) FROM executions WHERE true");
    len = pg_filter_where(f, false, NULL, &ps, sql, sizeof sql, len, lo, hi);
    snprintf(sql + len, sizeof sql - (size_t)len, " GROUP BY status");
    int rc;
    PGresult *r = pg_query(p, sql, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; i < PQntuples(r); i++) {
        enum exec_status es;
        if (exec_status_parse(PQgetvalue(r, i, 0), &es) == 0) counts[es] = strtoll(PQgetvalue(r, i, 1), NULL, 10);
    }
    PQclear(r);
    return 0;
}

static int one_id(struct pg *p, enum stmt_id id, const struct params *ps, char out[UUID_STR_LEN])
{
    int rc;
    PGresult *r = exec_stmt(p, id, ps, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 0) rc = -ENOENT;
    else g_copy(r, 0, 0, out, UUID_STR_LEN);
    PQclear(r);
    return rc;
}

static int pg_exec_next_queued(struct store *st, const char *agent, char id_out[UUID_STR_LEN])
{
    struct params ps = {0};
    p_str(&ps, agent);
    return one_id(PG(st), S_EXEC_NEXT_QUEUED, &ps, id_out);
}

static int collect_ids(struct pg *p, enum stmt_id id, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    struct params ps = {0};
    p_int(&ps, now);
    p_int(&ps, max);
    int rc;
    *n = 0;
    PGresult *r = exec_stmt(p, id, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; i < PQntuples(r) && *n < max; i++) g_copy(r, i, 0, ids[(*n)++], UUID_STR_LEN);
    PQclear(r);
    return 0;
}

static int pg_exec_expired_leases(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return collect_ids(PG(st), S_EXEC_EXPIRED, now, ids, max, n);
}

static int pg_exec_past_deadline(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return collect_ids(PG(st), S_EXEC_PAST_DEADLINE, now, ids, max, n);
}

static int pg_approvals_expired(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return collect_ids(PG(st), S_APPROVALS_EXPIRED, now, ids, max, n);
}

static int64_t pg_next_timer(struct store *st)
{
    int rc;
    PGresult *r = exec_stmt(PG(st), S_NEXT_TIMER, NULL, &rc);
    if (!r) return 0;
    int64_t best = 0;
    for (int i = 0; i < 3 && PQntuples(r) == 1; i++) {
        int64_t v = g_int(r, 0, i);
        if (v > 0 && (best == 0 || v < best)) best = v;
    }
    PQclear(r);
    return best;
}

/* --- events --- */

static int pg_event_append(struct store *st, struct execution *e, const char *type, const char *payload,
                           int64_t at)
{
    struct pg *p = PG(st);
    struct execution *c = p->in_tx ? locked_find(p, e->id) : NULL;
    int r;
    if (p->in_op && c) { /* buffered: one INSERT per batch ("Rows of a batch") */
        if ((r = ensure(p)) < 0) return r;
        struct pev *v = rb_push(p, T_EVENTS, strlen(type) + strlen(payload));
        snprintf(v->exec_id, sizeof v->exec_id, "%s", e->id);
        v->seq = e->last_seq + 1, v->at = at;
        v->type = xstrdup(type);
        v->payload = xstrdup(payload);
    } else {
        struct params ps = {0};
        p_str(&ps, e->id);
        p_int(&ps, e->last_seq + 1);
        p_str(&ps, type);
        p_str(&ps, payload);
        p_int(&ps, at);
        if ((r = run(p, S_EVENT_INSERT, &ps, NULL)) < 0) return r;
    }
    e->last_seq++;
    if (c && c->last_seq < e->last_seq) c->last_seq = e->last_seq;
    return 0;
}

static int pg_events_each(struct store *st, const char *exec_id, int64_t after, int limit, store_event_fn fn,
                          void *arg)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_int(&ps, after);
    p_int(&ps, limit);
    int rc = rows_flush(PG(st), T_BIT(T_EVENTS));
    if (rc < 0) return rc;
    PGresult *r = exec_stmt(PG(st), S_EVENTS, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++)
        rc = fn(g_int(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), g_int(r, i, 3), arg);
    PQclear(r);
    return rc;
}

/* --- steps --- */

/* --- prefetched step rows (store_prefetch_step) --- */

static void pg_prefetch_step(struct store *st, const char *exec_id, const char *kind, const char *target,
                             const char *args_hash, const char *step_id)
{
    struct pg *p = PG(st);
    pf_drop(p);
    if (!exec_id || strlen(exec_id) >= sizeof p->pf.exec_id || !step_id || strlen(step_id) >= sizeof p->pf.step_id)
        return;
    if (kind) {
        if (!target || !args_hash || strlen(args_hash) >= sizeof p->pf.args_hash) return;
        p->pf.kind = xstrdup(kind);
        p->pf.target = xstrdup(target);
        snprintf(p->pf.args_hash, sizeof p->pf.args_hash, "%s", args_hash);
    }
    snprintf(p->pf.exec_id, sizeof p->pf.exec_id, "%s", exec_id);
    snprintf(p->pf.step_id, sizeof p->pf.step_id, "%s", step_id);
    p->pf.armed = true;
}

/* The prefetched counter of the key, if that is what was read: true with *rc set. */
static bool pf_counter(struct pg *p, const char *exec_id, const char *kind, const char *target,
                       const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len, int *rc)
{
    PGresult *r = p->pf.counter;
    if (!r || strcmp(p->pf.exec_id, exec_id) || strcmp(p->pf.kind, kind) || strcmp(p->pf.target, target) ||
        strcmp(p->pf.args_hash, args_hash))
        return false;
    *rc = PQntuples(r) == 0 ? -ENOENT : 0;
    if (*rc == 0) {
        *consumed = g_int(r, 0, 0);
        g_copy(r, 0, 1, last_request, lr_len);
    }
    return true;
}

/* The prefetched step step_id (or that it does not exist), if it was read: true with *rc set. */
static bool pf_step(struct pg *p, const char *exec_id, const char *step_id, struct step *out, int *rc)
{
    PGresult *r = p->pf.step;
    if (!r || strcmp(p->pf.exec_id, exec_id) || strcmp(p->pf.step_id, step_id)) return false;
    int c0 = p->pf.step_col; /* S_STEP_GET_FRESH: one row, NULL step_id when there is no step */
    *rc = PQntuples(r) == 0 || PQgetisnull(r, 0, c0) ? -ENOENT : 0;
    if (*rc == 0) READ_ROW_AT(r, 0, c0, out, step_fields);
    return true;
}

/* The newest held row of step step_id (this batch wrote it), or NULL. */
static struct pstep *held_step(struct pg *p, const char *exec_id, const char *step_id)
{
    for (int i = p->rb[T_STEPS].n - 1; i >= 0; i--) {
        struct pstep *x = rb_at(p, T_STEPS, i);
        if (strcmp(x->s.step_id, step_id) == 0 && strcmp(x->s.exec_id, exec_id) == 0) return x;
    }
    return NULL;
}

static int pg_step_get(struct store *st, const char *exec_id, const char *step_id, struct step *out)
{
    int rc;
    struct pstep *held = held_step(PG(st), exec_id, step_id);
    if (held) {
        store_step_copy(out, &held->s);
        return 0;
    }
    if (pf_step(PG(st), exec_id, step_id, out, &rc)) return rc;
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, step_id);
    PGresult *r = exec_stmt(PG(st), S_STEP_GET, &ps, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 0) rc = -ENOENT;
    else READ_ROW(r, 0, out, step_fields);
    PQclear(r);
    return rc;
}

static size_t step_bytes(const struct step *s)
{
    size_t n = 0;
    const char *v[] = {s->kind, s->target, s->args, s->result, s->error, s->rule_id, s->resources};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) n += v[i] ? strlen(v[i]) : 0;
    return n;
}

/* Inside an operation a step is held for the batch (one insert, or its own update: "Rows of a batch"). */
static void hold_step(struct pg *p, const struct step *s, bool insert)
{
    struct pstep *x = rb_push(p, T_STEPS, step_bytes(s));
    store_step_copy(&x->s, s);
    x->insert = insert;
}

static bool nullable_eq(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static int pg_step_insert(struct store *st, const struct step *s)
{
    struct pg *p = PG(st);
    pf_drop(p);
    if (p->in_op) {
        int rc = ensure(p);
        if (rc == 0) hold_step(p, s, true);
        return rc;
    }
    struct params ps = {0};
    bind_row(&ps, s, FIELDS(step_fields));
    return run(PG(st), S_STEP_INSERT, &ps, NULL);
}

static int pg_step_update(struct store *st, const struct step *s)
{
    /* The WHERE clause pins the immutable columns, as in the SQLite store. */
    struct pg *p = PG(st);
    pf_drop(p);
    if (p->in_op) { /* checked now against a held row, else when it runs (CHECKED) */
        int rc = ensure(p);
        if (rc < 0) return rc;
        const struct pstep *h = held_step(p, s->exec_id, s->step_id);
        if (h && (strcmp(h->s.kind, s->kind) || strcmp(h->s.target, s->target) ||
                  strcmp(h->s.args_hash, s->args_hash) || h->s.occurrence != s->occurrence ||
                  strcmp(h->s.args, s->args) || h->s.created_at != s->created_at ||
                  !nullable_eq(h->s.resources, s->resources)))
            return -ENOENT;
        hold_step(p, s, false);
        return 0;
    }
    struct params ps = {0};
    bind_row(&ps, s, FIELDS(step_fields));
    int64_t n = 0;
    int r = run(PG(st), S_STEP_UPDATE, &ps, &n);
    return r == 0 && n != 1 ? -ENOENT : r;
}

static int steps_rows(struct pg *p, enum stmt_id id, const struct params *ps, store_step_fn fn, void *arg)
{
    /* The whole result is read before the callbacks run, so they may update rows. */
    int rc = rows_flush(p, T_BIT(T_STEPS));
    if (rc < 0) return rc;
    PGresult *r = exec_stmt(p, id, ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct step s;
        READ_ROW(r, i, &s, step_fields);
        rc = fn(&s, arg);
        step_fini(&s);
    }
    PQclear(r);
    return rc;
}

static int pg_steps_each(struct store *st, const char *exec_id, store_step_fn fn, void *arg)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    return steps_rows(PG(st), S_STEPS, &ps, fn, arg);
}

static int pg_steps_each_status(struct store *st, const char *exec_id, enum step_status status,
                                store_step_fn fn, void *arg)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, step_status_name(status));
    return steps_rows(PG(st), S_STEPS_STATUS, &ps, fn, arg);
}

static int exists(struct pg *p, enum stmt_id id, const struct params *ps, bool *out)
{
    int rc;
    PGresult *r = exec_stmt(p, id, ps, &rc);
    *out = false;
    if (!r) return rc;
    *out = PQntuples(r) > 0;
    PQclear(r);
    return 0;
}

static int pg_step_has_indeterminate(struct store *st, const char *exec_id, const char *kind, const char *target,
                                     const char *args_hash, bool *out)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, kind);
    p_str(&ps, target);
    p_str(&ps, args_hash);
    int rc = rows_flush(PG(st), T_BIT(T_STEPS));
    return rc < 0 ? rc : exists(PG(st), S_STEP_INDET, &ps, out);
}

/* --- counters --- */

static int pg_counter_get(struct store *st, const char *exec_id, const char *kind, const char *target,
                          const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len)
{
    int rc;
    if (!pf_counter(PG(st), exec_id, kind, target, args_hash, consumed, last_request, lr_len, &rc)) {
        struct params ps = {0};
        p_str(&ps, exec_id);
        p_str(&ps, kind);
        p_str(&ps, target);
        p_str(&ps, args_hash);
        PGresult *r = exec_stmt(PG(st), S_COUNTER_GET, &ps, &rc);
        if (!r) return rc;
        if (PQntuples(r) == 0) {
            rc = -ENOENT;
        } else {
            *consumed = g_int(r, 0, 0);
            g_copy(r, 0, 1, last_request, lr_len);
        }
        PQclear(r);
    }
    if (rc < 0 && rc != -ENOENT) return rc;
    /* what this batch set since, as the upserts one by one would leave it */
    struct pctr key = {.kind = (char *)kind, .target = (char *)target};
    snprintf(key.exec_id, sizeof key.exec_id, "%s", exec_id);
    snprintf(key.args_hash, sizeof key.args_hash, "%s", args_hash);
    for (int i = 0; i < PG(st)->rb[T_COUNTERS].n; i++) {
        const struct pctr *x = rb_at(PG(st), T_COUNTERS, i);
        if (!same_counter(x, &key)) continue;
        if (rc == -ENOENT || x->consumed > *consumed) *consumed = x->consumed;
        snprintf(last_request, lr_len, "%s", x->last_request ? x->last_request : "");
        rc = 0;
    }
    return rc;
}

static int pg_counter_set(struct store *st, const char *exec_id, const char *kind, const char *target,
                          const char *args_hash, int64_t consumed, const char *request_id)
{
    struct pg *p = PG(st);
    pf_drop(p);
    if (p->in_op) { /* held for the batch's one upsert ("Rows of a batch") */
        int rc = ensure(p);
        if (rc < 0) return rc;
        if (strlen(exec_id) >= UUID_STR_LEN || strlen(args_hash) >= STEP_ID_LEN) return -EINVAL;
        struct pctr *x = rb_push(p, T_COUNTERS, strlen(kind) + strlen(target) + (request_id ? strlen(request_id) : 0));
        snprintf(x->exec_id, sizeof x->exec_id, "%s", exec_id);
        snprintf(x->args_hash, sizeof x->args_hash, "%s", args_hash);
        x->kind = xstrdup(kind);
        x->target = xstrdup(target);
        x->consumed = consumed;
        x->last_request = request_id ? xstrdup(request_id) : NULL;
        return 0;
    }
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, kind);
    p_str(&ps, target);
    p_str(&ps, args_hash);
    p_int(&ps, consumed);
    p_str(&ps, request_id);
    return run(PG(st), S_COUNTER_SET, &ps, NULL);
}

static int pg_counters_clear(struct store *st, const char *exec_id)
{
    pf_drop(PG(st));
    struct params ps = {0};
    p_str(&ps, exec_id);
    int rc = rows_flush(PG(st), T_BIT(T_COUNTERS)); /* the delete goes after them */
    return rc < 0 ? rc : run(PG(st), S_COUNTERS_CLEAR, &ps, NULL);
}

static int pg_counters_each(struct store *st, const char *exec_id, store_counter_fn fn, void *arg)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    int rc = rows_flush(PG(st), T_BIT(T_COUNTERS));
    if (rc < 0) return rc;
    PGresult *r = exec_stmt(PG(st), S_COUNTERS, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++)
        rc = fn(PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), g_int(r, i, 3),
                PQgetisnull(r, i, 4) ? NULL : PQgetvalue(r, i, 4), arg);
    PQclear(r);
    return rc;
}

/* --- approvals --- */

static int pg_approval_insert(struct store *st, const struct approval *a)
{
    struct params ps = {0};
    bind_row(&ps, a, FIELDS(approval_fields));
    return run(PG(st), S_APPROVAL_INSERT, &ps, NULL);
}

static int pg_approval_get(struct store *st, const char *id, struct approval *out)
{
    struct pg *p = PG(st);
    struct params ps = {0};
    p_str(&ps, id);
    int rc;
    if (p->in_tx && p->in_op && ((rc = ensure(p)) < 0 || (rc = q_stmt(p, S_APPROVAL_LOCK, &ps, X_OK)) < 0))
        return rc;
    PGresult *r = exec_stmt(p, S_APPROVAL_GET, &ps, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 0) rc = -ENOENT;
    else READ_ROW(r, 0, out, approval_fields);
    PQclear(r);
    return rc;
}

static int pg_approval_update(struct store *st, const struct approval *a)
{
    struct params ps = {0};
    p_str(&ps, a->id);
    p_str(&ps, approval_status_name(a->status));
    p_int(&ps, a->decided_at);
    p_str(&ps, a->decided_by);
    p_str(&ps, a->rationale);
    return run(PG(st), S_APPROVAL_UPDATE, &ps, NULL);
}

static int pg_approvals_each(struct store *st, const char *status, const char *exec_id, int limit,
                             store_approval_fn fn, void *arg)
{
    char sql[400];
    struct params ps = {0};
    int len = snprintf(sql, sizeof sql, "SELECT " APPROVAL_COLS " FROM approvals WHERE true");
    filter(sql, sizeof sql, &len, &ps, "status =", status);
    filter(sql, sizeof sql, &len, &ps, "execution_id =", exec_id);
    p_int(&ps, limit);
    snprintf(sql + len, sizeof sql - (size_t)len, " ORDER BY created_at, id LIMIT $%d", ps.n);
    int rc;
    PGresult *r = pg_query(PG(st), sql, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct approval a;
        READ_ROW(r, i, &a, approval_fields);
        rc = fn(&a, arg);
        approval_fini(&a);
    }
    PQclear(r);
    return rc;
}

/* --- sessions --- */

/* Inside a batch, admissions to one session queue behind each other on every replica. */
static int session_lock(struct pg *p, const char *session)
{
    if (!p->in_tx || !p->in_op) return 0;
    struct params ps = {0};
    p_str(&ps, session);
    int rc = ensure(p);
    return rc < 0 ? rc : q_stmt(p, S_SESSION_LOCK, &ps, X_OK); /* sent with the query it guards */
}

static int pg_session_active(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    struct params ps = {0};
    p_str(&ps, session);
    int rc = session_lock(PG(st), session);
    return rc < 0 ? rc : one_id(PG(st), S_SESSION_ACTIVE, &ps, id_out);
}

static int pg_session_next_waiting(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    struct params ps = {0};
    p_str(&ps, session);
    int rc = session_lock(PG(st), session);
    return rc < 0 ? rc : one_id(PG(st), S_SESSION_WAITING, &ps, id_out);
}

static int pg_session_last_completed(struct store *st, const char *session, const char *agent,
                                     char id_out[UUID_STR_LEN])
{
    struct params ps = {0};
    p_str(&ps, session);
    p_str(&ps, agent);
    return one_id(PG(st), S_SESSION_LAST_COMPLETED, &ps, id_out);
}

static int pg_session_any(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    struct params ps = {0};
    p_str(&ps, session);
    return one_id(PG(st), S_SESSION_EXISTS, &ps, id_out);
}

/* --- resources --- */

static int pg_resource_get(struct store *st, const char *exec_id, const char *key, struct resource *out)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, key);
    int rc;
    PGresult *r = exec_stmt(PG(st), S_RESOURCE_GET, &ps, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 0) rc = -ENOENT;
    else READ_ROW(r, 0, out, resource_fields);
    PQclear(r);
    return rc;
}

static int pg_resource_insert(struct store *st, const struct resource *res)
{
    /* ON CONFLICT DO NOTHING: a duplicate is -EEXIST without aborting the batch. */
    struct params ps = {0};
    bind_row(&ps, res, FIELDS(resource_fields));
    int64_t n = 0;
    struct pg *p = PG(st);
    struct execution *c = p->in_tx ? locked_find(p, res->exec_id) : NULL;
    if (c) p->nores[c - p->locked] = false;
    int r = run(p, S_RESOURCE_INSERT, &ps, &n);
    return r == 0 && n == 0 ? -EEXIST : r;
}

static int pg_resource_update(struct store *st, const struct resource *res)
{
    struct params ps = {0};
    p_str(&ps, res->exec_id);
    p_str(&ps, res->key);
    p_int(&ps, res->every_steps);
    p_int(&ps, res->on_completion);
    p_int(&ps, res->generation);
    p_int(&ps, res->count);
    p_str(&ps, res->binding);
    p_str(&ps, res->checkpoint_ref);
    return run(PG(st), S_RESOURCE_UPDATE, &ps, NULL);
}

static int pg_resources_each(struct store *st, const char *exec_id, store_resource_fn fn, void *arg)
{
    struct pg *p = PG(st);
    struct execution *c = p->in_tx ? locked_find(p, exec_id) : NULL;
    if (c && p->nores[c - p->locked]) return 0; /* most executions have none: no round trip */
    struct params ps = {0};
    p_str(&ps, exec_id);
    int rc;
    PGresult *r = exec_stmt(p, S_RESOURCES, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct resource res;
        READ_ROW(r, i, &res, resource_fields);
        rc = fn(&res, arg);
        resource_fini(&res);
    }
    PQclear(r);
    return rc;
}

/* --- checkpoints --- */

static int pg_checkpoint_insert(struct store *st, const struct checkpoint *c)
{
    struct params ps = {0};
    bind_row(&ps, c, FIELDS(checkpoint_fields));
    return run(PG(st), S_CHECKPOINT_INSERT, &ps, NULL);
}

static int pg_checkpoints_each(struct store *st, const char *exec_id, store_checkpoint_fn fn, void *arg)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    int rc;
    PGresult *r = exec_stmt(PG(st), S_CHECKPOINTS, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct checkpoint c;
        READ_ROW(r, i, &c, checkpoint_fields);
        rc = fn(&c, arg);
        checkpoint_fini(&c);
    }
    PQclear(r);
    return rc;
}

static int pg_checkpoints_invalidate(struct store *st, const char *exec_id, const char *key, int64_t generation,
                                     int64_t seq)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, key);
    p_int(&ps, generation);
    p_int(&ps, seq);
    return run(PG(st), S_CHECKPOINT_INVALIDATE, &ps, NULL);
}

static int pg_checkpoint_covered(struct store *st, const char *exec_id, const char *key, int64_t generation,
                                 bool *out)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, key);
    p_int(&ps, generation);
    return exists(PG(st), S_CHECKPOINT_COVERED, &ps, out);
}

static int pg_checkpoint_find(struct store *st, const char *exec_id, const char *key, int64_t generation,
                              const char *ref, int64_t *covered_seq)
{
    struct params ps = {0};
    p_str(&ps, exec_id);
    p_str(&ps, key);
    p_int(&ps, generation);
    p_str(&ps, ref);
    int rc;
    PGresult *r = exec_stmt(PG(st), S_CHECKPOINT_FIND, &ps, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 0) rc = -ENOENT;
    else *covered_seq = g_int(r, 0, 0);
    PQclear(r);
    return rc;
}

/* --- run-time agents and API keys (rare; sent at once, after anything queued) --- */

static int pg_write_now(struct pg *p, enum stmt_id id, const struct params *ps)
{
    int rc;
    PGresult *r = exec_stmt(p, id, ps, &rc);
    PQclear(r);
    return r ? 0 : rc;
}

static int pg_agent_save(struct store *st, const char *name, const char *settings, int64_t now)
{
    struct params ps = {0};
    p_str(&ps, name);
    p_int(&ps, now);
    p_str(&ps, settings);
    return pg_write_now(PG(st), S_AGENT_SAVE, &ps);
}

static int pg_agent_settings_each(struct store *st, store_agent_fn fn, void *arg)
{
    int rc;
    PGresult *r = exec_stmt(PG(st), S_AGENT_SETTINGS, NULL, &rc);
    if (!r) return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) rc = fn(PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), arg);
    PQclear(r);
    return rc;
}

static int pg_agent_delete(struct store *st, const char *name)
{
    struct params ps = {0};
    p_str(&ps, name);
    return pg_write_now(PG(st), S_AGENT_DELETE, &ps);
}

/* A count shared by executions (per agent, or global) must see every replica's decisions:
 * deciders of one (rule, agent) key queue on a transaction-scoped advisory lock, taken
 * after the execution's row lock and held to the batch's COMMIT, then count in a new
 * statement (READ COMMITTED: it sees what the previous holder committed). A batch holds
 * locks of all its operations until it commits, so to rule out a deadlock with row locks:
 * only the batch's first operation (holding just its execution's row) waits for the lock;
 * a later one only tries it and, when another replica has it, fails with -EBUSY (the
 * caller commits the batch and runs the operation again, first in a new one); and once
 * the batch holds it, it never waits for anything: row locks are taken NOWAIT (failing
 * with -EAGAIN, run again the same way), and only step submissions join the batch (the
 * caller commits it before any other operation: store_batch_should_end), which take no
 * other lock. So rate-limited submissions still share a commit. The lock rides with the
 * count: no extra round trip. Per execution, the execution's row lock already serialises
 * the deciders. */
static int rule_lock(struct pg *p, const char *rule_id, const char *agent)
{
    if (!p->in_tx || !p->in_op) return 0;
    int rc = ensure(p);
    if (rc < 0) return rc;
    char *key = xasprintf("%s\x1f%s", rule_id, agent ? agent : "");
    struct params ps = {0};
    p_str(&ps, key);
    bool first = p->batch_ops <= 1;
    rc = q_stmt(p, first ? S_RULE_LOCK : S_RULE_TRY_LOCK, &ps, first ? X_OK : X_LOCKED);
    free(key);
    if (rc == 0) p->rule_locked = true;
    return rc;
}

/* The steps this batch holds that a rate limit's count takes (inserted with rule_id since
 * since_ms: of exec_id, of agent's executions, or all): *n and the earliest *at. A held
 * update changes no count (a step's rule and creation time never change). False when an
 * execution's agent is not known here: the rows must be sent then. Sending them would
 * put earlier operations' rows inside this operation's savepoint, which is already sent,
 * so that a refusal of the limit's lock (which rolls it back) would fail the batch. */
static bool held_rule_steps(struct pg *p, const char *rule_id, const char *exec_id, const char *agent,
                            int64_t since_ms, int64_t *n, int64_t *at)
{
    *n = 0, *at = 0;
    for (int i = 0; i < p->rb[T_STEPS].n; i++) {
        const struct pstep *x = rb_at(p, T_STEPS, i);
        if (!x->insert || !x->s.rule_id || strcmp(x->s.rule_id, rule_id) != 0 || x->s.created_at < since_ms ||
            (exec_id && strcmp(x->s.exec_id, exec_id) != 0))
            continue;
        if (agent && !exec_id) {
            const struct execution *c = locked_find(p, x->s.exec_id);
            if (!c || !c->agent) return false;
            if (strcmp(c->agent, agent) != 0) continue;
        }
        if (*n == 0 || x->s.created_at < *at) *at = x->s.created_at;
        (*n)++;
    }
    return true;
}

static int pg_rule_steps_since(struct store *st, const char *rule_id, const char *exec_id, const char *agent,
                               int64_t since_ms, int64_t cap, int64_t *n, int64_t *oldest)
{
    int64_t held = 0, held_at = 0;
    int rc = exec_id ? 0 : rule_lock(PG(st), rule_id, agent);
    if (rc == 0 && !held_rule_steps(PG(st), rule_id, exec_id, agent, since_ms, &held, &held_at))
        rc = rows_flush(PG(st), T_BIT(T_STEPS)); /* the count takes this batch's steps too */
    if (rc < 0) return rc;
    struct params ps = {0};
    p_str(&ps, rule_id);
    p_int(&ps, since_ms);
    if (exec_id || agent) p_str(&ps, exec_id ? exec_id : agent);
    p_int(&ps, cap);
    PGresult *r = exec_stmt(PG(st), exec_id ? S_RULE_STEPS_EXEC : agent ? S_RULE_STEPS_AGENT : S_RULE_STEPS_ALL,
                            &ps, &rc);
    if (!r) return rc;
    *n = PQntuples(r) == 1 ? g_int(r, 0, 0) : 0;
    *oldest = PQntuples(r) == 1 ? g_int(r, 0, 1) : 0;
    PQclear(r);
    if (held > 0 && *n < cap) { /* the held ones are the newest: counted after the database's */
        if (*n == 0 || held_at < *oldest) *oldest = held_at;
        *n = *n + held < cap ? *n + held : cap;
    }
    return 0;
}

static bool pg_batch_should_end(const struct store *st)
{
    return ((const struct pg *)st)->rule_locked;
}

static int pg_exec_parked_due(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    struct params ps = {0};
    p_int(&ps, now);
    p_int(&ps, max);
    int rc;
    *n = 0;
    PGresult *r = exec_stmt(PG(st), S_PARKED_DUE, &ps, &rc);
    if (!r) return rc;
    for (int i = 0; i < PQntuples(r) && *n < max; i++) g_copy(r, i, 0, ids[(*n)++], UUID_STR_LEN);
    PQclear(r);
    return 0;
}

static int pg_exec_parked_next(struct store *st, int64_t *at)
{
    int rc;
    *at = 0;
    PGresult *r = exec_stmt(PG(st), S_PARKED_NEXT, NULL, &rc);
    if (!r) return rc;
    if (PQntuples(r) == 1) *at = g_int(r, 0, 0);
    PQclear(r);
    return 0;
}

static int pg_api_key_put(struct store *st, const struct api_key_row *k)
{
    struct params ps = {0};
    p_str(&ps, k->id);
    p_str(&ps, k->name);
    p_str(&ps, k->hash);
    p_str(&ps, k->prefix);
    p_str(&ps, k->scopes);
    p_int(&ps, k->created_at);
    p_int(&ps, k->revoked_at);
    return pg_write_now(PG(st), S_API_KEY_PUT, &ps);
}

/* fn for each api_keys row of r (the columns of S_API_KEYS); fn's first non-zero stops it. */
static int key_rows(PGresult *r, store_api_key_fn fn, void *arg)
{
    int rc = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct api_key_row k = {.name = PQgetvalue(r, i, 1), .hash = PQgetvalue(r, i, 2),
                                .prefix = PQgetvalue(r, i, 3), .scopes = PQgetvalue(r, i, 4),
                                .created_at = g_int(r, i, 5), .revoked_at = g_int(r, i, 6)};
        g_copy(r, i, 0, k.id, sizeof k.id);
        rc = fn(&k, arg);
    }
    return rc;
}

static int pg_api_keys_each(struct store *st, store_api_key_fn fn, void *arg)
{
    int rc;
    PGresult *r = exec_stmt(PG(st), S_API_KEYS, NULL, &rc);
    if (!r) return rc;
    rc = key_rows(r, fn, arg);
    PQclear(r);
    return rc;
}

static int pg_api_key_find(struct store *st, const char *hash, store_api_key_fn fn, void *arg)
{
    struct params ps = {0};
    p_str(&ps, hash);
    int rc;
    PGresult *r = exec_stmt(PG(st), S_API_KEY_FIND, &ps, &rc);
    if (!r) return rc;
    rc = PQntuples(r) == 1 ? key_rows(r, fn, arg) : -ENOENT;
    PQclear(r);
    return rc;
}

static const struct store_vt pg_vt = {
    .close = pg_close,
    .errmsg = pg_errmsg,
    .kind = pg_kind,
    .notify = pg_notify,
    .watch_fd = pg_watch_fd,
    .watch_read = pg_watch_read,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .in_tx = pg_in_tx,
    .op_begin = pg_op_begin,
    .op_end = pg_op_end,
    .agent_upsert = pg_agent_upsert,
    .agents_each = pg_agents_each,
    .agent_save = pg_agent_save,
    .agent_settings_each = pg_agent_settings_each,
    .agent_delete = pg_agent_delete,
    .rule_steps_since = pg_rule_steps_since,
    .batch_should_end = pg_batch_should_end,
    .exec_parked_due = pg_exec_parked_due,
    .exec_parked_next = pg_exec_parked_next,
    .api_key_put = pg_api_key_put,
    .api_keys_each = pg_api_keys_each,
    .api_key_find = pg_api_key_find,
    .exec_insert = pg_exec_insert,
    .exec_get = pg_exec_get,
    .exec_update = pg_exec_update,
    .exec_list = pg_exec_list,
    .exec_counts = pg_exec_counts,
    .exec_next_queued = pg_exec_next_queued,
    .exec_expired_leases = pg_exec_expired_leases,
    .exec_past_deadline = pg_exec_past_deadline,
    .next_timer = pg_next_timer,
    .event_append = pg_event_append,
    .events_each = pg_events_each,
    .step_get = pg_step_get,
    .prefetch_step = pg_prefetch_step,
    .step_insert = pg_step_insert,
    .step_update = pg_step_update,
    .steps_each = pg_steps_each,
    .steps_each_status = pg_steps_each_status,
    .step_has_indeterminate = pg_step_has_indeterminate,
    .counter_get = pg_counter_get,
    .counter_set = pg_counter_set,
    .counters_clear = pg_counters_clear,
    .counters_each = pg_counters_each,
    .approval_insert = pg_approval_insert,
    .approval_get = pg_approval_get,
    .approval_update = pg_approval_update,
    .approvals_each = pg_approvals_each,
    .approvals_expired = pg_approvals_expired,
    .session_active = pg_session_active,
    .session_next_waiting = pg_session_next_waiting,
    .session_last_completed = pg_session_last_completed,
    .session_any = pg_session_any,
    .resource_get = pg_resource_get,
    .resource_insert = pg_resource_insert,
    .resource_update = pg_resource_update,
    .resources_each = pg_resources_each,
    .checkpoint_insert = pg_checkpoint_insert,
    .checkpoints_each = pg_checkpoints_each,
    .checkpoints_invalidate = pg_checkpoints_invalidate,
    .checkpoint_covered = pg_checkpoint_covered,
    .checkpoint_find = pg_checkpoint_find,
};
