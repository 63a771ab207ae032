/*
 * store.h - persistence of the kernel's event log and projections.
 *
 * The store is an interface (store.c dispatches through a table of functions) with
 * two implementations: the embedded SQLite one (store_sqlite.c, the default) and
 * PostgreSQL (store_pg.c), which several kernel replicas can share. All calls
 * happen on the kernel's loop thread. The caller groups writes in transactions:
 * store_begin() opens a batch (group commit), store_op_begin()/store_op_end()
 * wrap each logical operation in a savepoint so one failing request rolls back
 * alone, and store_commit() makes the whole batch durable with one fsync.
 *
 * Functions return 0, -ENOENT (not found), or another -errno; they never print.
 * Entities read from the store are owned by the caller (free with *_fini).
 */
#ifndef REBUNO_STORE_STORE_H
#define REBUNO_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel/model.h"

struct store;

/* spec: a SQLite database file, "sqlite:PATH", or a PostgreSQL connection URI
 * ("postgres://user@host:port/db" or "postgresql://..."). */
struct store *store_open(const char *spec, char *errbuf, size_t errlen);
/* Is spec a PostgreSQL URI? */
bool store_spec_is_postgres(const char *spec);
/* spec with any password replaced by "***", for logs (caller frees). */
char *store_spec_redacted(const char *spec);
void store_close(struct store *st);
/* Text of the last store error, for logs. */
const char *store_errmsg(struct store *st);
/* Which implementation: "sqlite" or "postgres". */
const char *store_kind(struct store *st);

/* Changes committed by other processes sharing the store (kernel replicas on one
 * PostgreSQL). store_notify records, inside the open batch, that an agent got queued
 * work (kind 'a', name = agent) or an execution got events ('e', its id); the other
 * replicas hear it when the batch commits. store_watch_fd is a descriptor to watch
 * for reading (-1 when nothing can arrive: SQLite, or the listener is reconnecting;
 * it may change, so ask again after each read and on a timer); store_watch_read
 * reports what arrived, kind '*' meaning "anything may have changed" (after a
 * reconnect). -ENOTCONN from any call: the database is unreachable right now. */
void store_notify(struct store *st, char kind, const char *name);
int store_watch_fd(struct store *st);
typedef void (*store_change_fn)(char kind, const char *name, void *arg);
int store_watch_read(struct store *st, store_change_fn fn, void *arg);

int store_begin(struct store *st);
int store_commit(struct store *st);
int store_rollback(struct store *st);
bool store_in_tx(const struct store *st);
int store_op_begin(struct store *st);
/* ok=true releases the savepoint, false rolls back to it. */
int store_op_end(struct store *st, bool ok);

/* agents seen by the kernel (configured or registered by a worker) */
int store_agent_upsert(struct store *st, const char *name, int64_t now);
typedef int (*store_name_fn)(const char *name, void *arg);
int store_agents_each(struct store *st, store_name_fn fn, void *arg);

/* What was set at run time (POST /v0/agents, POST /v0/policies/{agent}) and must survive a
 * restart: the agent's settings as JSON text ({webhook_url?, secret?, lease_ms?, policy?};
 * NULL: none, the agent was only seen). Saving creates the agent's row if needed;
 * settings_each reports only agents that have settings. Delete removes the agent's row. */
int store_agent_save(struct store *st, const char *name, const char *settings, int64_t now);
typedef int (*store_agent_fn)(const char *name, const char *settings, void *arg);
int store_agent_settings_each(struct store *st, store_agent_fn fn, void *arg);
int store_agent_delete(struct store *st, const char *name);

/* Upstream's rate_limit: how many steps rule_id decided since since_ms (created_at), of
 * one execution (exec_id), of one agent's executions (agent), or of all (both NULL);
 * counting stops at cap (the oldest cap of them); *oldest = the earliest created_at counted
 * (0 when none). Inside an operation the count and the step it decides are exact across
 * replicas sharing the store: per execution the execution's lock serialises them; per
 * agent or global (exec_id NULL) the deciders of (rule_id, agent) queue behind each other
 * until their batch commits (PostgreSQL; SQLite has one writer). -EBUSY: another replica
 * is deciding for that key and this batch holds earlier operations' locks, so waiting
 * could deadlock: end the operation (rolled back), commit the batch, and run it again
 * first in a new batch, where it waits. After a count that took the lock,
 * store_batch_should_end is true: until the batch commits it must not wait for anything,
 * so store_exec_get locks NOWAIT (-EAGAIN when another holds the row: again, as for
 * -EBUSY) and only a step's submission or outcome may join it (they touch only their
 * execution's rows); commit it before any other operation. */
int store_rule_steps_since(struct store *st, const char *rule_id, const char *exec_id, const char *agent,
                           int64_t since_ms, int64_t cap, int64_t *n, int64_t *oldest);
/* The batch holds a rate limit's lock: commit it before an operation that is not a step's
 * submission or outcome (see above). */
bool store_batch_should_end(const struct store *st);
/* Executions a rate limit parked (running, dispatch released with a wake time in
 * lease_deadline): those due by now (at most max ids), and the earliest wake time (0: none). */
int store_exec_parked_due(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n);
int store_exec_parked_next(struct store *st, int64_t *at);

/* API keys made at run time (POST /v0/api-keys): only the token's hash is kept. */
struct api_key_row {
    char id[UUID_STR_LEN];
    const char *name;
    const char *hash;   /* lowercase hex SHA-256 of the token */
    const char *prefix; /* the token's first characters, to recognise it */
    const char *scopes; /* JSON array of scope names */
    int64_t created_at, revoked_at; /* ms; revoked 0 = live */
};
/* Insert or replace (by id). */
int store_api_key_put(struct store *st, const struct api_key_row *k);
typedef int (*store_api_key_fn)(const struct api_key_row *k, void *arg); /* k borrowed for the call */
/* Oldest first. */
int store_api_keys_each(struct store *st, store_api_key_fn fn, void *arg);
/* The key whose token hashes to hash (one indexed read), reported to fn; -ENOENT if none. */
int store_api_key_find(struct store *st, const char *hash, store_api_key_fn fn, void *arg);

/* executions */
int store_exec_insert(struct store *st, const struct execution *e);
int store_exec_get(struct store *st, const char *id, struct execution *out);
int store_exec_update(struct store *st, const struct execution *e);
typedef int (*store_exec_fn)(struct execution *e, void *arg); /* e is freed after the call */
/* Newest first; cursor = id to continue after (exclusive), NULL for the start. */
int store_exec_list(struct store *st, const char *agent, const char *status, const char *session,
                    const char *cursor, int limit, store_exec_fn fn, void *arg);
/* Which executions a query or a count takes; NULL or 0 fields take any. The creation
 * times are ms (after: at or after; before: strictly before). Every filter is an index
 * range: agent, status, session and forked_from lead an index whose next column is id,
 * and ids are UUIDv7, so a time range is also a range of ids (created_at then checks
 * it exactly). */
struct exec_filter {
    const char *agent, *status, *session;
    int64_t created_after, created_before;
    const char *forked_from; /* the forks of this execution */
};
/* store_exec_list with every filter. */
int store_exec_query(struct store *st, const struct exec_filter *f, const char *cursor, int limit,
                     store_exec_fn fn, void *arg);
/* The number of executions in each status (indexed by enum exec_status) that match f
 * (f->status is ignored). */
#define EXEC_STATUS_COUNT 6
int store_exec_counts(struct store *st, const struct exec_filter *f, int64_t counts[EXEC_STATUS_COUNT]);
/* The lowest UUIDv7 text of a millisecond (for id ranges of a time range). */
void store_uuid_floor(int64_t ms, char out[UUID_STR_LEN]);
/* How far a UUIDv7's time may be from its execution's created_at (the clock is read twice). */
#define STORE_ID_CLOCK_SLACK_MS 60000
/* Oldest queued execution of agent; -ENOENT if none. */
int store_exec_next_queued(struct store *st, const char *agent, char id_out[UUID_STR_LEN]);
/* Ids (at most `max`) of leased executions whose lease ended at or before now. */
int store_exec_expired_leases(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max,
                              int *n);
int store_exec_past_deadline(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max,
                             int *n);
/* Earliest lease deadline / execution deadline / approval timeout, 0 when none. */
int64_t store_next_timer(struct store *st);

/* events: append uses e->last_seq + 1 and bumps e->last_seq (the caller persists e). */
int store_event_append(struct store *st, struct execution *e, const char *type,
                       const char *payload, int64_t at);
typedef int (*store_event_fn)(int64_t seq, const char *type, const char *payload, int64_t at,
                              void *arg);
int store_events_each(struct store *st, const char *exec_id, int64_t after, int limit,
                      store_event_fn fn, void *arg);

/* steps */
int store_step_get(struct store *st, const char *exec_id, const char *step_id, struct step *out);
/* A hint that the next store_exec_get(exec_id) inside an operation will be followed by
 * store_step_get(exec_id, step_id) and, when kind is not NULL (a step submission, step_id
 * its guess at the key's next step), by store_counter_get(exec_id, kind, target, args_hash).
 * PostgreSQL reads those rows in the execution's round trip, after its lock, and answers
 * the calls from them unless the operation wrote a step or a counter since; SQLite ignores
 * it. Strings are copied. */
void store_prefetch_step(struct store *st, const char *exec_id, const char *kind, const char *target,
                         const char *args_hash, const char *step_id);
int store_step_insert(struct store *st, const struct step *s);
int store_step_update(struct store *st, const struct step *s);
typedef int (*store_step_fn)(struct step *s, void *arg);
int store_steps_each(struct store *st, const char *exec_id, store_step_fn fn, void *arg);
/* Steps of exec_id in a status (e.g. STEP_EXECUTING at cancel). */
int store_steps_each_status(struct store *st, const char *exec_id, enum step_status status,
                            store_step_fn fn, void *arg);
/* True when an at_most_once twin (same kind/target/args) already failed indeterminate. */
int store_step_has_indeterminate(struct store *st, const char *exec_id, const char *kind,
                                 const char *target, const char *args_hash, bool *out);

/* occurrence counters, scoped to the current dispatch attempt of an execution */
/* consumed: the last occurrence used; last_request: the request id of that submission
 * ("" when none). -ENOENT when the key was not submitted in this attempt. */
int store_counter_get(struct store *st, const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len);
int store_counter_set(struct store *st, const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, int64_t consumed, const char *request_id);
int store_counters_clear(struct store *st, const char *exec_id);
typedef int (*store_counter_fn)(const char *kind, const char *target, const char *args_hash,
                                int64_t consumed, const char *last_request, void *arg);
/* Every counter of exec_id (store copy). last_request NULL when none. */
int store_counters_each(struct store *st, const char *exec_id, store_counter_fn fn, void *arg);

/* approvals */
int store_approval_insert(struct store *st, const struct approval *a);
int store_approval_get(struct store *st, const char *id, struct approval *out);
int store_approval_update(struct store *st, const struct approval *a);
typedef int (*store_approval_fn)(struct approval *a, void *arg);
/* status NULL = any; exec_id NULL = any. Oldest first. */
int store_approvals_each(struct store *st, const char *status, const char *exec_id, int limit,
                         store_approval_fn fn, void *arg);
int store_approvals_expired(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max,
                            int *n);

/* sessions: at most one active execution; the rest wait (pending, no dispatch) */
int store_session_active(struct store *st, const char *session, char id_out[UUID_STR_LEN]);
int store_session_next_waiting(struct store *st, const char *session, char id_out[UUID_STR_LEN]);
int store_session_last_completed(struct store *st, const char *session, const char *agent,
                                 char id_out[UUID_STR_LEN]);
int store_session_any(struct store *st, const char *session, char id_out[UUID_STR_LEN]);

/* resources and checkpoints */
int store_resource_get(struct store *st, const char *exec_id, const char *key, struct resource *out);
int store_resource_insert(struct store *st, const struct resource *r);
/* Updates the checkpoint policy, generation, count, binding and checkpoint_ref. */
int store_resource_update(struct store *st, const struct resource *r);
typedef int (*store_resource_fn)(struct resource *r, void *arg);
int store_resources_each(struct store *st, const char *exec_id, store_resource_fn fn, void *arg);
int store_checkpoint_insert(struct store *st, const struct checkpoint *c);
typedef int (*store_checkpoint_fn)(struct checkpoint *c, void *arg);
/* Ordered by covered_seq. */
int store_checkpoints_each(struct store *st, const char *exec_id, store_checkpoint_fn fn, void *arg);
/* Close the open checkpoints of (key, generation) at seq. */
int store_checkpoints_invalidate(struct store *st, const char *exec_id, const char *key,
                                 int64_t generation, int64_t seq);
int store_checkpoint_covered(struct store *st, const char *exec_id, const char *key,
                             int64_t generation, bool *out);
/* The checkpoint with this ref for (key, generation), if recorded: -ENOENT otherwise. */
int store_checkpoint_find(struct store *st, const char *exec_id, const char *key, int64_t generation,
                          const char *ref, int64_t *covered_seq);

#endif
