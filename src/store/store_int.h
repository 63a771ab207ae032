/*
 * store_int.h - private to src/store: the table of functions each store
 * implementation fills in, and their constructors. store.c dispatches the public
 * store_* calls through it.
 */
#ifndef REBUNO_STORE_STORE_INT_H
#define REBUNO_STORE_STORE_INT_H

#include "store/store.h"

struct store_vt {
    void (*close)(struct store *st);
    const char *(*errmsg)(struct store *st);
    const char *(*kind)(struct store *st);
    void (*notify)(struct store *st, char kind, const char *name);
    int (*watch_fd)(struct store *st);
    int (*watch_read)(struct store *st, store_change_fn fn, void *arg);
    int (*begin)(struct store *st);
    int (*commit)(struct store *st);
    int (*rollback)(struct store *st);
    bool (*in_tx)(const struct store *st);
    int (*op_begin)(struct store *st);
    int (*op_end)(struct store *st, bool ok);
    int (*agent_upsert)(struct store *st, const char *name, int64_t now);
    int (*agents_each)(struct store *st, store_name_fn fn, void *arg);
    int (*agent_save)(struct store *st, const char *name, const char *settings, int64_t now);
    int (*agent_settings_each)(struct store *st, store_agent_fn fn, void *arg);
    int (*agent_delete)(struct store *st, const char *name);
    int (*rule_steps_since)(struct store *st, const char *rule_id, const char *exec_id, const char *agent,
                            int64_t since_ms, int64_t cap, int64_t *n, int64_t *oldest);
    bool (*batch_should_end)(const struct store *st); /* NULL: never */
    int (*exec_parked_due)(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n);
    int (*exec_parked_next)(struct store *st, int64_t *at);
    int (*api_key_put)(struct store *st, const struct api_key_row *k);
    int (*api_keys_each)(struct store *st, store_api_key_fn fn, void *arg);
    int (*api_key_find)(struct store *st, const char *hash, store_api_key_fn fn, void *arg);
    int (*exec_insert)(struct store *st, const struct execution *e);
    int (*exec_get)(struct store *st, const char *id, struct execution *out);
    int (*exec_update)(struct store *st, const struct execution *e);
    int (*exec_list)(struct store *st, const struct exec_filter *f, const char *cursor, int limit, store_exec_fn fn, void *arg);
    int (*exec_counts)(struct store *st, const struct exec_filter *f, int64_t counts[EXEC_STATUS_COUNT]);
    int (*exec_next_queued)(struct store *st, const char *agent, char id_out[UUID_STR_LEN]);
    int (*exec_expired_leases)(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n);
    int (*exec_past_deadline)(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n);
    int64_t (*next_timer)(struct store *st);
    int (*event_append)(struct store *st, struct execution *e, const char *type, const char *payload, int64_t at);
    int (*events_each)(struct store *st, const char *exec_id, int64_t after, int limit, store_event_fn fn, void *arg);
    int (*step_get)(struct store *st, const char *exec_id, const char *step_id, struct step *out);
    /* NULL: the hint is ignored */
    void (*prefetch_step)(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, const char *step_id);
    int (*step_insert)(struct store *st, const struct step *s);
    int (*step_update)(struct store *st, const struct step *s);
    int (*steps_each)(struct store *st, const char *exec_id, store_step_fn fn, void *arg);
    int (*steps_each_status)(struct store *st, const char *exec_id, enum step_status status, store_step_fn fn, void *arg);
    int (*step_has_indeterminate)(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, bool *out);
    int (*counter_get)(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len);
    int (*counter_set)(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, int64_t consumed, const char *request_id);
    int (*counters_clear)(struct store *st, const char *exec_id);
    int (*counters_each)(struct store *st, const char *exec_id, store_counter_fn fn, void *arg);
    int (*approval_insert)(struct store *st, const struct approval *a);
    int (*approval_get)(struct store *st, const char *id, struct approval *out);
    int (*approval_update)(struct store *st, const struct approval *a);
    int (*approvals_each)(struct store *st, const char *status, const char *exec_id, int limit, store_approval_fn fn, void *arg);
    int (*approvals_expired)(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n);
    int (*session_active)(struct store *st, const char *session, char id_out[UUID_STR_LEN]);
    int (*session_next_waiting)(struct store *st, const char *session, char id_out[UUID_STR_LEN]);
    int (*session_last_completed)(struct store *st, const char *session, const char *agent, char id_out[UUID_STR_LEN]);
    int (*session_any)(struct store *st, const char *session, char id_out[UUID_STR_LEN]);
    int (*resource_get)(struct store *st, const char *exec_id, const char *key, struct resource *out);
    int (*resource_insert)(struct store *st, const struct resource *r);
    int (*resource_update)(struct store *st, const struct resource *r);
    int (*resources_each)(struct store *st, const char *exec_id, store_resource_fn fn, void *arg);
    int (*checkpoint_insert)(struct store *st, const struct checkpoint *c);
    int (*checkpoints_each)(struct store *st, const char *exec_id, store_checkpoint_fn fn, void *arg);
    int (*checkpoints_invalidate)(struct store *st, const char *exec_id, const char *key, int64_t generation, int64_t seq);
    int (*checkpoint_covered)(struct store *st, const char *exec_id, const char *key, int64_t generation, bool *out);
    int (*checkpoint_find)(struct store *st, const char *exec_id, const char *key, int64_t generation, const char *ref, int64_t *covered_seq);
};

/* Column lists both implementations use, in the order their row readers expect. Reads
 * derive last_seq from the events index, so appending an event never has to rewrite the
 * execution row. */
#define EXEC_COLS                                                                          \
    "id, agent, session, input, status, output, state, failure_reason, created_at,"       \
    " updated_at, deadline_at, last_seq, dispatch_id, attempt, dstate, queued_at,"        \
    " worker_id, lease_deadline, lease_ms, max_attempts, parent_id, forked_from, fork_seq,"  \
    " restoration"
#define EXEC_SELECT                                                                        \
    "id, agent, session, input, status, output, state, failure_reason, created_at,"       \
    " updated_at, deadline_at,"                                                            \
    " (SELECT coalesce(max(seq), 0) FROM events WHERE execution_id = executions.id),"     \
    " dispatch_id, attempt, dstate, queued_at, worker_id, lease_deadline, lease_ms,"       \
    " max_attempts, parent_id, forked_from, fork_seq, restoration"
#define STEP_COLS                                                                          \
    "step_id, execution_id, kind, target, args_hash, occurrence, idempotency, status,"    \
    " args, result, error, rule_id, approval_id, runs, indeterminate, created_at,"        \
    " completed_at, resources"
#define RESOURCE_COLS                                                                      \
    "execution_id, key, driver_id, configuration, coverage_reuse, every_steps,"           \
    " on_completion, registered_seq, generation, count, binding, checkpoint_ref"
#define APPROVAL_COLS                                                                      \
    "id, execution_id, step_id, status, rule_id, reason, message, approvers, timeout_at,"  \
    " created_at, decided_at, decided_by, rationale"

/* Every implementation's own struct begins with this. */
struct store {
    const struct store_vt *vt;
};

struct store *store_sqlite_open(const char *path, char *errbuf, size_t errlen);
struct store *store_pg_open(const char *uri, char *errbuf, size_t errlen);

/* A deep copy of src (the caches of locked or recently read executions). */
void store_exec_copy(struct execution *dst, const struct execution *src);
/* A deep copy of a step (the steps a PostgreSQL batch holds back). */
void store_step_copy(struct step *dst, const struct step *src);

#endif
