/* test_store.c - the stores: SQLite's schema migrations, and what both implementations
 * must do alike (the execution cache, prefetched reads, API keys by hash, the lock of a
 * shared rate limit), run once on SQLite (suite store)
 * and once on PostgreSQL (suite store_pg: when REBUNO_TEST_PG_DSN names a server, as
 * scripts/test.sh does; skipped otherwise). */
#include <criterion/criterion.h>
#include <errno.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

#define EXEC_ID "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"

/* A database as schema 3 left it (events keyed (execution_id, seq) WITHOUT ROWID). */
static const char *schema3 =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;"
    "CREATE TABLE agents(name TEXT PRIMARY KEY, created_at INTEGER NOT NULL) STRICT;"
    "CREATE TABLE executions( id TEXT PRIMARY KEY, agent TEXT NOT NULL, session TEXT, input TEXT NOT NULL,"
    " status TEXT NOT NULL, output TEXT, state TEXT, failure_reason TEXT, created_at INTEGER NOT NULL,"
    " updated_at INTEGER NOT NULL, deadline_at INTEGER NOT NULL, last_seq INTEGER NOT NULL,"
    " dispatch_id TEXT NOT NULL, attempt INTEGER NOT NULL, dstate TEXT NOT NULL, queued_at INTEGER NOT NULL,"
    " worker_id TEXT NOT NULL, lease_deadline INTEGER NOT NULL, lease_ms INTEGER NOT NULL,"
    " max_attempts INTEGER NOT NULL, parent_id TEXT NOT NULL DEFAULT '', forked_from TEXT NOT NULL DEFAULT '',"
    " fork_seq INTEGER NOT NULL DEFAULT 0, restoration TEXT) STRICT;"
    "CREATE INDEX executions_queue ON executions(agent, queued_at) WHERE dstate='queued';"
    "CREATE INDEX executions_lease ON executions(lease_deadline) WHERE dstate='leased';"
    "CREATE INDEX executions_deadline ON executions(deadline_at) WHERE deadline_at > 0"
    " AND status IN ('pending','running','blocked');"
    "CREATE INDEX executions_agent ON executions(agent, id);"
    "CREATE INDEX executions_status ON executions(status, id);"
    "CREATE TABLE events(execution_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,"
    " payload TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(execution_id, seq)) STRICT, WITHOUT ROWID;"
    "CREATE TABLE steps(step_id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, kind TEXT NOT NULL,"
    " target TEXT NOT NULL, args_hash TEXT NOT NULL, occurrence INTEGER NOT NULL, idempotency TEXT NOT NULL,"
    " status TEXT NOT NULL, args TEXT NOT NULL, result TEXT, error TEXT, rule_id TEXT,"
    " approval_id TEXT NOT NULL, runs INTEGER NOT NULL, indeterminate INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, completed_at INTEGER NOT NULL, resources TEXT) STRICT;"
    "CREATE INDEX steps_execution ON steps(execution_id, created_at);"
    "CREATE INDEX steps_indeterminate ON steps(execution_id, kind, target, args_hash) WHERE indeterminate = 1;"
    "CREATE TABLE step_counters(execution_id TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,"
    " args_hash TEXT NOT NULL, consumed INTEGER NOT NULL, last_request TEXT,"
    " PRIMARY KEY(execution_id, kind, target, args_hash)) STRICT, WITHOUT ROWID;"
    "CREATE TABLE approvals(id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, step_id TEXT NOT NULL,"
    " status TEXT NOT NULL, rule_id TEXT, reason TEXT, message TEXT, approvers TEXT,"
    " timeout_at INTEGER NOT NULL, created_at INTEGER NOT NULL, decided_at INTEGER NOT NULL,"
    " decided_by TEXT, rationale TEXT) STRICT;"
    "CREATE INDEX approvals_pending ON approvals(timeout_at) WHERE status='pending';"
    "CREATE INDEX approvals_execution ON approvals(execution_id, created_at);"
    "CREATE INDEX executions_session ON executions(session, id) WHERE session IS NOT NULL;"
    "CREATE TABLE resources(execution_id TEXT NOT NULL, key TEXT NOT NULL, driver_id TEXT NOT NULL,"
    " configuration TEXT NOT NULL, coverage_reuse INTEGER NOT NULL, every_steps INTEGER NOT NULL,"
    " on_completion INTEGER NOT NULL, registered_seq INTEGER NOT NULL, generation INTEGER NOT NULL,"
    " count INTEGER NOT NULL, binding TEXT, checkpoint_ref TEXT, PRIMARY KEY(execution_id, key)) STRICT,"
    " WITHOUT ROWID;"
    "CREATE TABLE checkpoints(execution_id TEXT NOT NULL, key TEXT NOT NULL, generation INTEGER NOT NULL,"
    " ref TEXT NOT NULL, covered_seq INTEGER NOT NULL, invalidated_seq INTEGER NOT NULL,"
    " PRIMARY KEY(execution_id, key, generation, covered_seq)) STRICT, WITHOUT ROWID;"
    "INSERT INTO meta VALUES('schema_version', '3');"
    "INSERT INTO executions(id, agent, input, status, created_at, updated_at, deadline_at, last_seq,"
    " dispatch_id, attempt, dstate, queued_at, worker_id, lease_deadline, lease_ms, max_attempts)"
    " VALUES('" EXEC_ID "', 'hello', '{\"name\":\"world\"}', 'running', 1000, 2000, 0, 0,"
    " '0190a1b2-c3d4-7e5f-8a9b-000000000001', 1, 'leased', 1000, '', 99000, 120000, 5);"
    "INSERT INTO events VALUES('" EXEC_ID "', 1, 'execution.created', '{\"agent\":\"hello\"}', 1000);"
    "INSERT INTO events VALUES('" EXEC_ID "', 2, 'dispatch.queued', '{\"attempt\":1}', 1001);"
    "INSERT INTO events VALUES('" EXEC_ID "', 3, 'dispatch.claimed', '{\"attempt\":1}', 1002);"
    "INSERT INTO step_counters VALUES('" EXEC_ID "', 'tool_call', 'greet', 'h', 0, 'r1');";

static char dir[64], path[128];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/rebuno-test-store-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/kernel.db", dir);
}

static void remove_dir(void)
{
    const char *suffix[] = {"", "-wal", "-shm"};
    char p[160];
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", path, suffix[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* --- PostgreSQL: a schema of the test's own on the server REBUNO_TEST_PG_DSN names --- */

static char pg_schema[40], pg_uri[1024];

static void pg_sql(const char *sql)
{
    PGconn *c = PQconnectdb(getenv("REBUNO_TEST_PG_DSN"));
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning")); /* no NOTICE per dropped table */
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

static void pg_make(void)
{
    const char *dsn = getenv("REBUNO_TEST_PG_DSN");
    if (!dsn || !*dsn) cr_skip_test("REBUNO_TEST_PG_DSN is not set: no PostgreSQL to run on");
    snprintf(pg_schema, sizeof pg_schema, "unit_%d", (int)getpid()); /* each test runs in its own process */
    char sql[128];
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", pg_schema);
    pg_sql(sql);
    snprintf(pg_uri, sizeof pg_uri, "%s%coptions=-csearch_path%%3D%s", dsn, strchr(dsn, '?') ? '&' : '?',
             pg_schema);
}

static void pg_drop(void)
{
    if (!pg_schema[0]) return;
    char sql[128];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", pg_schema);
    pg_sql(sql);
}

/* A test of both stores: its body gets the store spec to open. */
#define BOTH_STORES(name)                                                   \
    static void name(const char *spec);                                     \
    Test(store, name, .init = make_dir, .fini = remove_dir) { name(path); } \
    Test(store_pg, name, .fini = pg_drop)                                   \
    {                                                                       \
        pg_make();                                                          \
        name(pg_uri);                                                       \
    }                                                                       \
    static void name(const char *spec)

/* A running execution EXEC_ID of agent "hello" (fields owned: execution_fini). */
static void running_exec(struct execution *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", EXEC_ID);
    e->agent = strdup("hello");
    e->input = strdup("{}");
    e->status = EXEC_RUNNING;
}

static char *query_text(const char *sql)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    char *out = NULL;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) out = strdup((const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

struct seen {
    int n;
    int64_t seq[8];
    char type[8][32], payload[8][64];
};

static int collect(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct seen *s = arg;
    if (s->n < 8) {
        s->seq[s->n] = seq;
        snprintf(s->type[s->n], sizeof s->type[0], "%s", type);
        snprintf(s->payload[s->n], sizeof s->payload[0], "%s", payload);
        s->n++;
    }
    return 0;
}

Test(store, schema3_database_upgrades_in_place_and_keeps_its_data, .init = make_dir, .fini = remove_dir)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, schema3, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(db);

    char why[256];
    struct store *st = store_open(path, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 3);
    cr_assert_str_eq(e.agent, "hello");
    cr_assert_str_eq(e.input, "{\"name\":\"world\"}");
    struct seen seen = {0};
    cr_assert_eq(store_events_each(st, EXEC_ID, 0, 100, collect, &seen), 0);
    cr_assert_eq(seen.n, 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(seen.seq[i], i + 1);
    cr_assert_str_eq(seen.type[1], "dispatch.queued");
    cr_assert_str_eq(seen.payload[0], "{\"agent\":\"hello\"}");
    int64_t consumed = -1;
    char last_request[72];
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last_request,
                                   sizeof last_request), 0);
    cr_assert_eq(consumed, 0);
    cr_assert_str_eq(last_request, "r1");

    /* (execution_id, seq) stays unique, and appending continues the log. */
    cr_assert_eq(store_begin(st), 0);
    e.last_seq = 2;
    cr_assert_eq(store_event_append(st, &e, "step.proposed", "{}", 1003), -EEXIST);
    e.last_seq = 3;
    cr_assert_eq(store_event_append(st, &e, "step.proposed", "{}", 1003), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    store_close(st);

    char *v = query_text("SELECT value FROM meta WHERE key='schema_version'");
    cr_assert_str_eq(v, "7");
    free(v);
    v = query_text("SELECT group_concat(seq || ':' || type, ',') FROM (SELECT seq, type FROM events ORDER BY rowid)");
    cr_assert_str_eq(v, "1:execution.created,2:dispatch.queued,3:dispatch.claimed,4:step.proposed");
    free(v);
    v = query_text("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='events'");
    cr_assert_str_eq(v, "events_execution");
    free(v);

    /* Opening again changes nothing. */
    st = store_open(path, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 4);
    execution_fini(&e);
    store_close(st);
}

/* What migration 4 did to a schema 3 database, and steps to carry through migration 5:
 * three of EXEC_ID (two created at the same time, so only their rowids order them; ids
 * not in rowid order), one of another execution, one indeterminate. */
#define STEP_ROW(id, exec, target, status, indet, created)                                   \
    "INSERT INTO steps VALUES('" id "', '" exec "', 'tool_call', '" target "', 'h', 0,"          \
    " 'at_most_once', '" status "', '{}', NULL, NULL, NULL, '', 1, " #indet ", " #created ", 0, NULL);"
#define OTHER_ID "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"
static const char *schema4_delta =
    "DROP TABLE events;"
    "CREATE TABLE events(execution_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,"
    " payload TEXT NOT NULL, at INTEGER NOT NULL) STRICT;"
    "CREATE UNIQUE INDEX events_execution ON events(execution_id, seq);"
    "UPDATE meta SET value='4' WHERE key='schema_version';"
    STEP_ROW("c3", EXEC_ID, "greet", "succeeded", 0, 5000)
    STEP_ROW("a1", EXEC_ID, "wave", "executing", 0, 5000)
    STEP_ROW("b2", OTHER_ID, "greet", "succeeded", 0, 4000)
    STEP_ROW("d4", EXEC_ID, "bow", "failed", 1, 4500);

struct listed {
    int n;
    char ids[8][STEP_ID_LEN];
};

static int list_step(struct step *p, void *arg)
{
    struct listed *l = arg;
    if (l->n < 8) snprintf(l->ids[l->n++], sizeof l->ids[0], "%s", p->step_id);
    return 0;
}

static char *listing(struct store *st, const char *exec_id)
{
    struct listed l = {0};
    cr_assert_eq(store_steps_each(st, exec_id, list_step, &l), 0);
    char *out = calloc(1, 64);
    for (int i = 0; i < l.n; i++) snprintf(out + strlen(out), 64 - strlen(out), "%s%s", i ? "," : "", l.ids[i]);
    return out;
}

Test(store, schema4_steps_move_to_one_index_and_keep_their_order, .init = make_dir, .fini = remove_dir)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, schema3, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    cr_assert_eq(sqlite3_exec(db, schema4_delta, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(db);
    char *before = query_text("SELECT group_concat(step_id, ',') FROM"
                              " (SELECT step_id FROM steps WHERE execution_id='" EXEC_ID "'"
                              " ORDER BY created_at, rowid)");
    cr_assert_str_eq(before, "d4,c3,a1");

    char why[256];
    struct store *st = store_open(path, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    char *after = listing(st, EXEC_ID);
    cr_assert_str_eq(after, before);
    free(after);
    after = listing(st, OTHER_ID);
    cr_assert_str_eq(after, "b2");
    free(after);

    struct step p;
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &p), 0);
    cr_assert_str_eq(p.target, "wave");
    cr_assert_eq(p.status, STEP_EXECUTING);
    cr_assert_eq(p.created_at, 5000);
    cr_assert_eq(store_step_get(st, OTHER_ID, "a1", &(struct step){0}), -ENOENT); /* another execution's */
    bool indet = false;
    cr_assert_eq(store_step_has_indeterminate(st, EXEC_ID, "tool_call", "bow", "h", &indet), 0);
    cr_assert(indet);
    cr_assert_eq(store_step_has_indeterminate(st, EXEC_ID, "tool_call", "greet", "h", &indet), 0);
    cr_assert(!indet);

    /* Updates find the row; (execution_id, step_id) stays unique; a new step lists last. */
    cr_assert_eq(store_begin(st), 0);
    p.status = STEP_SUCCEEDED;
    p.completed_at = 6000;
    cr_assert_eq(store_step_update(st, &p), 0);
    cr_assert_eq(store_step_insert(st, &p), -EEXIST);
    snprintf(p.step_id, sizeof p.step_id, "%s", "e5");
    cr_assert_eq(store_step_insert(st, &p), 0);
    cr_assert_eq(store_commit(st), 0);
    step_fini(&p);
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &p), 0);
    cr_assert_eq(p.status, STEP_SUCCEEDED);
    cr_assert_eq(p.completed_at, 6000);
    step_fini(&p);
    after = listing(st, EXEC_ID);
    cr_assert_str_eq(after, "d4,c3,a1,e5");
    free(after);
    store_close(st);
    free(before);

    char *v = query_text("SELECT value FROM meta WHERE key='schema_version'");
    cr_assert_str_eq(v, "7");
    free(v);
    v = query_text("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master"
                   " WHERE type='index' AND tbl_name='steps' ORDER BY name)");
    cr_assert_str_eq(v, "steps_execution,steps_indeterminate,steps_rule");
    free(v);
    v = query_text("SELECT sql FROM sqlite_master WHERE name='steps_execution'");
    cr_assert_str_eq(v, "CREATE UNIQUE INDEX steps_execution ON steps(execution_id, step_id)");
    free(v);

    /* Opening again (which runs the schema-1 script) adds no index back. */
    st = store_open(path, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    store_close(st);
    v = query_text("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master"
                   " WHERE type='index' AND tbl_name='steps' ORDER BY name)");
    cr_assert_str_eq(v, "steps_execution,steps_indeterminate,steps_rule");
    free(v);
}

BOTH_STORES(execution_cache_follows_updates_appends_and_rollbacks)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    e.dstate = DISPATCH_LEASED;
    e.lease_deadline = 5000;
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_event_append(st, &e, "execution.created", "{}", 1), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);

    struct execution a, b;
    cr_assert_eq(store_exec_get(st, EXEC_ID, &a), 0); /* now cached */
    cr_assert_eq(a.last_seq, 1);

    /* A savepoint that is rolled back leaves the stored (and cached) row as it was. */
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    a.lease_deadline = 9000;
    free(a.output);
    a.output = strdup("{\"x\":1}");
    cr_assert_eq(store_exec_update(st, &a), 0);
    cr_assert_eq(store_event_append(st, &a, "execution.completed", "{}", 2), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &b), 0);
    cr_assert_eq(b.lease_deadline, 9000);
    cr_assert_eq(b.last_seq, 2);
    cr_assert_str_eq(b.output, "{\"x\":1}");
    execution_fini(&b);
    cr_assert_eq(store_op_end(st, false), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &b), 0);
    cr_assert_eq(b.lease_deadline, 5000);
    cr_assert_eq(b.last_seq, 1);
    cr_assert_null(b.output);
    execution_fini(&b);

    /* A kept savepoint, then a rolled-back batch. */
    cr_assert_eq(store_op_begin(st), 0);
    a.last_seq = 1;
    cr_assert_eq(store_event_append(st, &a, "step.proposed", "{}", 3), 0);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &b), 0);
    cr_assert_eq(b.last_seq, 2);
    execution_fini(&b);
    cr_assert_eq(store_rollback(st), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &b), 0);
    cr_assert_eq(b.last_seq, 1);
    execution_fini(&b);
    execution_fini(&a);
    store_close(st);
}

/* The event log as "seq:type" words, e.g. "1:a 2:b". */
struct ev_log {
    char text[512];
    size_t len;
};

static int log_event(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct ev_log *l = arg;
    int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s%lld:%s", l->len ? " " : "", (long long)seq,
                     type);
    cr_assert(n > 0 && (size_t)n < sizeof l->text - l->len);
    cr_assert_str_eq(payload, "{\"q\":\"a \\\"quoted\\\" \\\\ word\"}"); /* arrives byte for byte */
    l->len += (size_t)n;
    return 0;
}

static void events_are(struct store *st, const char *want)
{
    struct ev_log l = {.len = 0};
    l.text[0] = 0;
    cr_assert_eq(store_events_each(st, EXEC_ID, 0, 100, log_event, &l), 0);
    cr_assert_str_eq(l.text, want);
}

static void append(struct store *st, struct execution *e, const char *type)
{
    cr_assert_eq(store_event_append(st, e, type, "{\"q\":\"a \\\"quoted\\\" \\\\ word\"}", 7), 0);
}

/* The PostgreSQL store sends a batch's events as one INSERT at its commit: the log must be
 * what one statement per event gives, whatever operations of the batch roll back, and a
 * read of the log inside the batch must see the events appended before it. */
BOTH_STORES(events_of_a_batch_survive_later_rollbacks_and_are_read_in_it)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    append(st, &e, "created");
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);

    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0); /* kept */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    append(st, &e, "a");
    append(st, &e, "b");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0); /* rolled back: its event goes, a and b stay */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 3);
    append(st, &e, "x");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, false), 0);
    cr_assert_eq(store_op_begin(st), 0); /* read afresh after the rollback: seq goes on from b */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 3);
    append(st, &e, "c");
    events_are(st, "1:created 2:a 3:b 4:c");
    append(st, &e, "d");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0); /* from the cache */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 5);
    append(st, &e, "e");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0); /* nothing sent yet in it: e goes before its savepoint */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    append(st, &e, "f");
    events_are(st, "1:created 2:a 3:b 4:c 5:d 6:e 7:f");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, false), 0);
    cr_assert_eq(store_commit(st), 0);
    events_are(st, "1:created 2:a 3:b 4:c 5:d 6:e");
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 6);
    execution_fini(&e);

    /* A batch rolled back as a whole leaves nothing of its buffered events. */
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    append(st, &e, "gone");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_rollback(st), 0);
    events_are(st, "1:created 2:a 3:b 4:c 5:d 6:e");
    store_close(st);
}

/* A statement the database refuses (here a second row with the same primary key) fails its
 * operation only: the batch goes on past it (on PostgreSQL the error arrives with the
 * operation's next read, after its savepoint, and ROLLBACK TO takes the transaction out of
 * its aborted state) and commits what the other operations wrote. */
BOTH_STORES(a_refused_statement_rolls_back_only_its_operation)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    append(st, &e, "created");
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0);
    struct step got;
    int r = store_exec_insert(st, &e); /* SQLite refuses it here, PostgreSQL with the next read */
    if (r == 0) r = store_step_get(st, EXEC_ID, "no-such-step", &got);
    cr_assert_eq(r, -EEXIST);
    cr_assert_eq(store_op_end(st, false), 0);
    execution_fini(&e);
    cr_assert_eq(store_op_begin(st), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 1);
    append(st, &e, "b");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);
    events_are(st, "1:created 2:b");
    store_close(st);
}

/* PostgreSQL only: an operation that had to send earlier operations' buffered events after
 * its own savepoint cannot roll back alone; the batch then fails as a whole (no reply of it
 * is a 2xx), never commits with those events missing. */
Test(store_pg, a_rollback_over_earlier_events_fails_the_batch, .fini = pg_drop)
{
    pg_make();
    char why[512];
    struct store *st = store_open(pg_uri, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    append(st, &e, "created");
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);

    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    append(st, &e, "a");
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0);
    struct step s;
    cr_assert_eq(store_step_get(st, EXEC_ID, "no-such-step", &s), -ENOENT); /* its savepoint is sent */
    events_are(st, "1:created 2:a");
    cr_assert_eq(store_op_end(st, false), 0);
    cr_assert_lt(store_commit(st), 0);
    cr_assert_eq(store_rollback(st), 0);
    events_are(st, "1:created");
    store_close(st);
}

static int count_resource(struct resource *r, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

/* The cache remembers that an execution has no resources (sparing the query each step
 * makes); registering one, or rolling back, must never leave that stale. */
BOTH_STORES(execution_cache_knows_when_there_are_no_resources)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0); /* cached */
    execution_fini(&e);

    int n = 0;
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0); /* from the cache */
    cr_assert_eq(n, 0);

    struct resource r;
    memset(&r, 0, sizeof r);
    snprintf(r.exec_id, sizeof r.exec_id, "%s", EXEC_ID);
    r.key = "ws";
    r.driver_id = "sandbox";
    r.configuration = "{}";
    /* Registered, then rolled back: gone again, and found gone. */
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    cr_assert_eq(store_resource_insert(st, &r), 0);
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(store_op_end(st, false), 0);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    execution_fini(&e);
    n = 0;
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 0);
    /* Registered for good after the empty answer was cached. */
    cr_assert_eq(store_resource_insert(st, &r), 0);
    cr_assert_eq(store_commit(st), 0);
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 1);
    /* An update of the row keeps what the cache knows; a new read still sees it. */
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_update(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    n = 0;
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 1);
    execution_fini(&e);
    store_close(st);
}

/* A step of EXEC_ID (fields owned: step_fini). */
static void new_step(struct step *s, const char *step_id, const char *target, const char *args_hash)
{
    memset(s, 0, sizeof *s);
    snprintf(s->step_id, sizeof s->step_id, "%s", step_id);
    snprintf(s->exec_id, sizeof s->exec_id, "%s", EXEC_ID);
    snprintf(s->args_hash, sizeof s->args_hash, "%s", args_hash);
    s->kind = strdup("tool_call");
    s->target = strdup(target);
    s->args = strdup("{}");
    s->status = STEP_EXECUTING;
    s->created_at = 10;
}

/* Locks and reads EXEC_ID inside an operation, after a prefetch hint. */
static void op_read(struct store *st, const char *kind, const char *target, const char *args_hash,
                    const char *step_id)
{
    struct execution e;
    cr_assert_eq(store_op_begin(st), 0);
    store_prefetch_step(st, EXEC_ID, kind, target, args_hash, step_id);
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    execution_fini(&e);
}

/* With a prefetch hint the PostgreSQL store reads the execution's last seq and whether it
 * has resources with the step, not with the row: the same answers as a plain read. */
BOTH_STORES(a_prefetched_read_knows_last_seq_and_resources)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    append(st, &e, "created");
    append(st, &e, "queued");
    append(st, &e, "claimed");
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);

    int n = 0;
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    store_prefetch_step(st, EXEC_ID, "tool_call", "greet", "h", "a1");
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 3);
    cr_assert_str_eq(e.agent, "hello");
    cr_assert_eq(e.status, EXEC_RUNNING);
    execution_fini(&e);
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 0);
    struct resource r;
    memset(&r, 0, sizeof r);
    snprintf(r.exec_id, sizeof r.exec_id, "%s", EXEC_ID);
    r.key = "ws";
    r.driver_id = "sandbox";
    r.configuration = "{}";
    cr_assert_eq(store_resource_insert(st, &r), 0);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);

    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_op_begin(st), 0);
    store_prefetch_step(st, EXEC_ID, NULL, NULL, NULL, "a1");
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    cr_assert_eq(e.last_seq, 3);
    execution_fini(&e);
    cr_assert_eq(store_resources_each(st, EXEC_ID, count_resource, &n), 0);
    cr_assert_eq(n, 1);
    struct step got;
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &got), -ENOENT);
    store_prefetch_step(st, "01890000-0000-7000-8000-00000000dead", NULL, NULL, NULL, "a1");
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_op_begin(st), 0); /* a hint for an execution that does not exist */
    store_prefetch_step(st, "01890000-0000-7000-8000-00000000dead", NULL, NULL, NULL, "a1");
    cr_assert_eq(store_exec_get(st, "01890000-0000-7000-8000-00000000dead", &e), -ENOENT);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);
    store_close(st);
}

/* store_prefetch_step: what is read with the execution answers the counter and step reads
 * as the queries would, and stops answering once the operation wrote a step or counter. */
BOTH_STORES(prefetched_counter_and_step_read_as_the_queries_do)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    struct step s;
    new_step(&s, "a1", "greet", "h");
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_step_insert(st, &s), 0);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 0, "r1"), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    step_fini(&s);

    int64_t consumed = -1;
    char last[72] = "";
    struct step got;
    cr_assert_eq(store_begin(st), 0);
    op_read(st, "tool_call", "greet", "h", "a1"); /* a submission whose key was seen */
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), 0);
    cr_assert_eq(consumed, 0);
    cr_assert_str_eq(last, "r1");
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "bow", "h", &consumed, last, sizeof last), -ENOENT);
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &got), 0);
    cr_assert_str_eq(got.target, "greet");
    cr_assert_eq(got.status, STEP_EXECUTING);
    got.status = STEP_SUCCEEDED;
    got.completed_at = 20;
    cr_assert_eq(store_step_update(st, &got), 0);
    step_fini(&got);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 1, "r2"), 0);
    /* after the writes: what the database now holds */
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), 0);
    cr_assert_eq(consumed, 1);
    cr_assert_str_eq(last, "r2");
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &got), 0);
    cr_assert_eq(got.status, STEP_SUCCEEDED);
    step_fini(&got);
    cr_assert_eq(store_op_end(st, true), 0);

    op_read(st, "tool_call", "wave", "h2", "b1"); /* a new key: no counter, no step yet */
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "wave", "h2", &consumed, last, sizeof last), -ENOENT);
    cr_assert_eq(store_step_get(st, EXEC_ID, "b1", &got), -ENOENT);
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &got), 0); /* not the guess: asked */
    cr_assert_eq(got.status, STEP_SUCCEEDED);
    step_fini(&got);
    new_step(&s, "b1", "wave", "h2");
    cr_assert_eq(store_step_insert(st, &s), 0);
    step_fini(&s);
    cr_assert_eq(store_step_get(st, EXEC_ID, "b1", &got), 0);
    step_fini(&got);
    cr_assert_eq(store_op_end(st, false), 0); /* rolled back: b1 is gone again */

    op_read(st, NULL, NULL, NULL, "b1"); /* a report of a step that does not exist */
    cr_assert_eq(store_step_get(st, EXEC_ID, "b1", &got), -ENOENT);
    cr_assert_eq(store_op_end(st, true), 0);
    op_read(st, NULL, NULL, NULL, "a1"); /* and of one that does */
    cr_assert_eq(store_step_get(st, EXEC_ID, "a1", &got), 0);
    cr_assert_eq(got.status, STEP_SUCCEEDED);
    cr_assert_eq(got.completed_at, 20);
    step_fini(&got);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);

    /* Outside a batch nothing is locked and the hint is never used. */
    store_prefetch_step(st, EXEC_ID, "tool_call", "greet", "h", "a1");
    cr_assert_eq(store_exec_get(st, EXEC_ID, &e), 0);
    execution_fini(&e);
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), 0);
    cr_assert_eq(consumed, 1);
    cr_assert_eq(store_step_get(st, EXEC_ID, "b1", &got), -ENOENT);
    store_close(st);
}

static int count_step(struct step *s, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static void counter_is(struct store *st, const char *target, int64_t want, const char *want_last)
{
    int64_t consumed = -1;
    char last[72] = "";
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", target, "h", &consumed, last, sizeof last), 0);
    cr_assert_eq(consumed, want);
    cr_assert_str_eq(last, want_last);
}

static void step_status_is(struct store *st, const char *step_id, enum step_status want, int64_t completed_at)
{
    struct step got;
    cr_assert_eq(store_step_get(st, EXEC_ID, step_id, &got), 0);
    cr_assert_eq(got.status, want);
    cr_assert_eq(got.completed_at, completed_at);
    step_fini(&got);
}

/* The PostgreSQL store holds a batch's steps and counters for one statement per table at
 * the commit: every read inside the batch must still see them (by key, in listings and
 * counts), an operation that rolls back must take only its own, and what commits must be
 * what the statements one by one leave. */
BOTH_STORES(steps_and_counters_of_a_batch_are_read_in_it_and_survive_rollbacks)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);

    struct step s, got;
    int n = 0;
    cr_assert_eq(store_begin(st), 0);
    op_read(st, "tool_call", "greet", "h", "a1"); /* submitted */
    new_step(&s, "a1", "greet", "h");
    s.rule_id = strdup("lim");
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 0, "r1"), 0);
    cr_assert_eq(store_step_insert(st, &s), 0);
    step_status_is(st, "a1", STEP_EXECUTING, 0);
    cr_assert_eq(store_op_end(st, true), 0);
    op_read(st, NULL, NULL, NULL, "a1"); /* completed in the same batch */
    step_status_is(st, "a1", STEP_EXECUTING, 0);
    s.status = STEP_SUCCEEDED;
    s.completed_at = 20;
    cr_assert_eq(store_step_update(st, &s), 0);
    step_status_is(st, "a1", STEP_SUCCEEDED, 20);
    counter_is(st, "greet", 0, "r1");
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 1, "r2"), 0);
    counter_is(st, "greet", 1, "r2");
    cr_assert_eq(store_op_end(st, true), 0);

    op_read(st, "tool_call", "wave", "h", "b1"); /* rolled back: its writes go, the others stay */
    s.completed_at = 99;
    cr_assert_eq(store_step_update(st, &s), 0);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 5, "r3"), 0);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "wave", "h", 0, "r3"), 0);
    new_step(&got, "b1", "wave", "h");
    cr_assert_eq(store_step_insert(st, &got), 0);
    step_fini(&got);
    step_status_is(st, "a1", STEP_SUCCEEDED, 99);
    cr_assert_eq(store_op_end(st, false), 0);

    op_read(st, NULL, NULL, NULL, "a1");
    step_status_is(st, "a1", STEP_SUCCEEDED, 20);
    cr_assert_eq(store_step_get(st, EXEC_ID, "b1", &got), -ENOENT);
    counter_is(st, "greet", 1, "r2");
    int64_t consumed = -1;
    char last[72] = "";
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "wave", "h", &consumed, last, sizeof last), -ENOENT);
    /* A rate limit's counts take the batch's steps: of the execution, of its agent's */
    int64_t counted = -1, oldest = -1;
    cr_assert_eq(store_rule_steps_since(st, "lim", EXEC_ID, NULL, 0, 10, &counted, &oldest), 0);
    cr_assert_eq(counted, 1);
    cr_assert_eq(oldest, 10);
    cr_assert_eq(store_rule_steps_since(st, "lim", NULL, "hello", 11, 10, &counted, &oldest), 0);
    cr_assert_eq(counted, 0);
    cr_assert_eq(store_rule_steps_since(st, "lim", NULL, "hello", 0, 10, &counted, &oldest), 0);
    cr_assert_eq(counted, 1);
    /* An update that does not name the step's immutable columns finds no row. */
    struct step other;
    new_step(&other, "a1", "greet", "h");
    free(other.args);
    other.args = strdup("{\"x\":1}");
    cr_assert_eq(store_step_update(st, &other), -ENOENT);
    step_fini(&other);
    cr_assert_eq(store_steps_each(st, EXEC_ID, count_step, &n), 0); /* a listing sees the batch's */
    cr_assert_eq(n, 1);
    /* A smaller count does not take the counter back; the request is the last one. */
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 0, "r4"), 0);
    counter_is(st, "greet", 1, "r4");
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);

    step_status_is(st, "a1", STEP_SUCCEEDED, 20);
    counter_is(st, "greet", 1, "r4");
    n = 0;
    cr_assert_eq(store_steps_each(st, EXEC_ID, count_step, &n), 0);
    cr_assert_eq(n, 1);

    /* A committed step updated and its counter set again in a later batch. */
    cr_assert_eq(store_begin(st), 0);
    op_read(st, NULL, NULL, NULL, "a1");
    s.completed_at = 30;
    cr_assert_eq(store_step_update(st, &s), 0);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 2, "r5"), 0);
    cr_assert_eq(store_op_end(st, true), 0);
    op_read(st, NULL, NULL, NULL, "a1");
    step_status_is(st, "a1", STEP_SUCCEEDED, 30);
    counter_is(st, "greet", 2, "r5");
    cr_assert_eq(store_counters_clear(st, EXEC_ID), 0); /* after the held counter: none left */
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), -ENOENT);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);
    step_status_is(st, "a1", STEP_SUCCEEDED, 30);
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), -ENOENT);
    step_fini(&s);
    store_close(st);
}

/* An operation that writes more rows than a batch holds (a fork copying a long history)
 * has them sent as it goes: all are read back inside the batch and all commit. */
BOTH_STORES(an_operation_writing_many_steps_keeps_every_one)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    enum { N = 1300 };
    cr_assert_eq(store_begin(st), 0);
    op_read(st, NULL, NULL, NULL, "s0");
    for (int i = 0; i < N; i++) {
        char id[16];
        struct step s;
        snprintf(id, sizeof id, "s%d", i);
        new_step(&s, id, "greet", "h");
        cr_assert_eq(store_step_insert(st, &s), 0);
        step_fini(&s);
        cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", id, "h", i, "r"), 0);
    }
    step_status_is(st, "s0", STEP_EXECUTING, 0);
    step_status_is(st, "s1299", STEP_EXECUTING, 0);
    counter_is(st, "s7", 7, "r");
    int n = 0;
    cr_assert_eq(store_steps_each(st, EXEC_ID, count_step, &n), 0);
    cr_assert_eq(n, N);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);
    n = 0;
    cr_assert_eq(store_steps_each(st, EXEC_ID, count_step, &n), 0);
    cr_assert_eq(n, N);
    counter_is(st, "s1299", 1299, "r");
    store_close(st);
}

/* A held step's text goes into array literals: quotes, backslashes, braces, commas, a
 * literal NULL word and non-ASCII must come back byte for byte, and NULL stays NULL. */
BOTH_STORES(held_steps_keep_hostile_text_byte_for_byte)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    const char *target = "NULL", *args = "{\"q\":\"a \\\"quoted\\\" \\\\ word\",\"x\":\"{1,2}\",\"u\":\"\xc3\xa9\"}";
    struct step s, got;
    new_step(&s, "h1", target, "h");
    free(s.args);
    s.args = strdup(args);
    cr_assert_eq(store_begin(st), 0);
    op_read(st, NULL, NULL, NULL, "h1");
    cr_assert_eq(store_step_insert(st, &s), 0);
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", target, "h", 0, "r,\"1\"}"), 0);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_eq(store_commit(st), 0);
    cr_assert_eq(store_step_get(st, EXEC_ID, "h1", &got), 0);
    cr_assert_str_eq(got.target, "NULL");
    cr_assert_str_eq(got.args, args);
    cr_assert_null(got.result);
    cr_assert_null(got.resources);
    step_fini(&got);
    counter_is(st, "NULL", 0, "r,\"1\"}");
    step_fini(&s);
    store_close(st);
}

/* PostgreSQL only: an update held or queued for the batch whose row the database does not
 * have fails the batch at its commit (never a 2xx for it) and leaves nothing of the batch,
 * even when it goes out in the COMMIT's own message. */
Test(store_pg, a_held_update_without_its_row_fails_the_batch, .fini = pg_drop)
{
    pg_make();
    char why[512];
    struct store *st = store_open(pg_uri, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(st), 0);
    cr_assert_eq(store_exec_insert(st, &e), 0);
    cr_assert_eq(store_commit(st), 0);
    execution_fini(&e);
    struct step s;
    new_step(&s, "gone", "greet", "h");
    cr_assert_eq(store_begin(st), 0);
    op_read(st, NULL, NULL, NULL, "gone");
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 0, "r1"), 0);
    cr_assert_eq(store_step_update(st, &s), 0); /* checked when it runs */
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_lt(store_commit(st), 0);
    cr_assert_eq(store_rollback(st), 0);
    int64_t consumed = -1;
    char last[72] = "";
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), -ENOENT);
    step_fini(&s);

    /* So does a queued execution update that finds no row, going out with the COMMIT. */
    cr_assert_eq(store_begin(st), 0);
    op_read(st, NULL, NULL, NULL, "gone");
    cr_assert_eq(store_counter_set(st, EXEC_ID, "tool_call", "greet", "h", 0, "r1"), 0);
    running_exec(&e);
    snprintf(e.id, sizeof e.id, "%s", "01890000-0000-7000-8000-00000000dead");
    cr_assert_eq(store_exec_update(st, &e), 0); /* checked when it runs */
    execution_fini(&e);
    cr_assert_eq(store_op_end(st, true), 0);
    cr_assert_lt(store_commit(st), 0);
    cr_assert_eq(store_rollback(st), 0);
    cr_assert_eq(store_counter_get(st, EXEC_ID, "tool_call", "greet", "h", &consumed, last, sizeof last), -ENOENT);
    store_close(st);
}

static int key_seen(const struct api_key_row *k, void *arg)
{
    snprintf(arg, 64, "%s %s %lld", k->name, k->scopes, (long long)k->revoked_at);
    return 0;
}

BOTH_STORES(api_key_found_by_hash_alone)
{
    char why[512];
    struct store *st = store_open(spec, why, sizeof why);
    cr_assert_not_null(st, "%s", why);
    struct api_key_row k = {.id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c", .name = "ci", .hash = "aa11",
                            .prefix = "rbk_aa", .scopes = "[\"agents:read\"]", .created_at = 5};
    cr_assert_eq(store_api_key_put(st, &k), 0);
    char got[64] = "";
    cr_assert_eq(store_api_key_find(st, "aa11", key_seen, got), 0);
    cr_assert_str_eq(got, "ci [\"agents:read\"] 0");
    cr_assert_eq(store_api_key_find(st, "bb22", key_seen, got), -ENOENT);
    k.revoked_at = 9; /* revoked: still found, with its revocation */
    cr_assert_eq(store_api_key_put(st, &k), 0);
    cr_assert_eq(store_api_key_find(st, "aa11", key_seen, got), 0);
    cr_assert_str_eq(got, "ci [\"agents:read\"] 9");
    store_close(st);
}

/* Deciders of one shared rate limit (per agent or global) across two stores on one
 * database: the first operation of a batch waits for the key, a later one only tries it
 * (-EBUSY while another holds it), and a batch holding it takes rows NOWAIT (-EAGAIN).
 * SQLite (one writer) only counts. */
BOTH_STORES(rate_limit_key_serialises_replicas_without_deadlock)
{
    char why[512];
    struct store *a = store_open(spec, why, sizeof why);
    cr_assert_not_null(a, "%s", why);
    int64_t n = -1, oldest = -1;
    if (strcmp(store_kind(a), "sqlite") == 0) { /* one writer: counts, and nothing to end early */
        cr_assert_eq(store_begin(a), 0);
        cr_assert_eq(store_op_begin(a), 0);
        cr_assert_eq(store_rule_steps_since(a, "lim", NULL, "hello", 0, 5, &n, &oldest), 0);
        cr_assert_eq(n, 0);
        cr_assert_eq(store_batch_should_end(a), false);
        cr_assert_eq(store_op_end(a, true), 0);
        cr_assert_eq(store_commit(a), 0);
        store_close(a);
        return;
    }
    struct store *b = store_open(spec, why, sizeof why);
    cr_assert_not_null(b, "%s", why);
    struct execution e;
    running_exec(&e);
    cr_assert_eq(store_begin(a), 0);
    cr_assert_eq(store_exec_insert(a, &e), 0);
    cr_assert_eq(store_commit(a), 0);
    execution_fini(&e);

    cr_assert_eq(store_begin(a), 0); /* a: first operation of its batch: takes the key */
    cr_assert_eq(store_op_begin(a), 0);
    cr_assert_eq(store_rule_steps_since(a, "lim", NULL, "hello", 0, 5, &n, &oldest), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(store_batch_should_end(a), true);
    cr_assert_eq(store_op_end(a, true), 0);

    cr_assert_eq(store_begin(b), 0); /* b: an earlier operation holds the execution's row */
    cr_assert_eq(store_op_begin(b), 0);
    cr_assert_eq(store_exec_get(b, EXEC_ID, &e), 0);
    execution_fini(&e);
    cr_assert_eq(store_op_end(b, true), 0);
    cr_assert_eq(store_op_begin(b), 0); /* so b only tries the key, which a holds */
    cr_assert_eq(store_rule_steps_since(b, "lim", NULL, "hello", 0, 5, &n, &oldest), -EBUSY);
    cr_assert_eq(store_op_end(b, false), 0);
    cr_assert_eq(store_op_begin(b), 0); /* another agent's key is free */
    cr_assert_eq(store_rule_steps_since(b, "lim", NULL, "other", 0, 5, &n, &oldest), 0);
    cr_assert_eq(store_op_end(b, true), 0);
    cr_assert_eq(store_op_begin(a), 0); /* a, holding its key, never waits for b's row */
    cr_assert_eq(store_exec_get(a, EXEC_ID, &e), -EAGAIN);
    cr_assert_eq(store_op_end(a, false), 0);
    cr_assert_eq(store_commit(b), 0);
    cr_assert_eq(store_batch_should_end(b), false);
    cr_assert_eq(store_commit(a), 0); /* a's commit releases the key */
    cr_assert_eq(store_batch_should_end(a), false);

    cr_assert_eq(store_begin(b), 0); /* now b gets it even as a later operation */
    cr_assert_eq(store_op_begin(b), 0);
    cr_assert_eq(store_exec_get(b, EXEC_ID, &e), 0);
    execution_fini(&e);
    cr_assert_eq(store_op_end(b, true), 0);
    cr_assert_eq(store_op_begin(b), 0);
    cr_assert_eq(store_rule_steps_since(b, "lim", NULL, "hello", 0, 5, &n, &oldest), 0);
    cr_assert_eq(store_op_end(b, true), 0);
    cr_assert_eq(store_commit(b), 0);
    store_close(a);
    store_close(b);
}
