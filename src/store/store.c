/*
 * store.c - picks the store implementation from the spec and forwards every call
 * to it (store_int.h).
 */
#include "store/store_int.h"

#include <stdio.h>

#include <string.h>

#include "base/xalloc.h"

bool store_spec_is_postgres(const char *spec)
{
    return strncmp(spec, "postgres://", 11) == 0 || strncmp(spec, "postgresql://", 13) == 0;
}

char *store_spec_redacted(const char *spec)
{
    if (!store_spec_is_postgres(spec)) return xstrdup(spec);
    /* scheme://user:password@host... -> scheme://user:***@host... */
    const char *auth = strstr(spec, "://") + 3;
    const char *at = strchr(auth, '@');
    const char *slash = strchr(auth, '/');
    if (!at || (slash && slash < at)) return xstrdup(spec);
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (!colon) return xstrdup(spec);
    return xasprintf("%.*s:***%s", (int)(colon - spec), spec, at);
}

void store_exec_copy(struct execution *dst, const struct execution *src)
{
    *dst = *src;
    dst->agent = src->agent ? xstrdup(src->agent) : NULL;
    dst->session = src->session ? xstrdup(src->session) : NULL;
    dst->input = src->input ? xstrdup(src->input) : NULL;
    dst->output = src->output ? xstrdup(src->output) : NULL;
    dst->state = src->state ? xstrdup(src->state) : NULL;
    dst->failure_reason = src->failure_reason ? xstrdup(src->failure_reason) : NULL;
    dst->restoration = src->restoration ? xstrdup(src->restoration) : NULL;
}

void store_step_copy(struct step *dst, const struct step *src)
{
    *dst = *src;
    dst->kind = src->kind ? xstrdup(src->kind) : NULL;
    dst->target = src->target ? xstrdup(src->target) : NULL;
    dst->args = src->args ? xstrdup(src->args) : NULL;
    dst->result = src->result ? xstrdup(src->result) : NULL;
    dst->error = src->error ? xstrdup(src->error) : NULL;
    dst->rule_id = src->rule_id ? xstrdup(src->rule_id) : NULL;
    dst->resources = src->resources ? xstrdup(src->resources) : NULL;
}

struct store *store_open(const char *spec, char *errbuf, size_t errlen)
{
    if (store_spec_is_postgres(spec)) return store_pg_open(spec, errbuf, errlen);
    if (strncmp(spec, "sqlite:", 7) == 0) spec += 7;
    return store_sqlite_open(spec, errbuf, errlen);
}

void store_close(struct store *st)
{
    if (st) st->vt->close(st);
}

const char *store_errmsg(struct store *st)
{
    return st->vt->errmsg(st);
}

const char *store_kind(struct store *st)
{
    return st->vt->kind(st);
}

void store_notify(struct store *st, char kind, const char *name)
{
    st->vt->notify(st, kind, name);
}

int store_watch_fd(struct store *st)
{
    return st->vt->watch_fd(st);
}

int store_watch_read(struct store *st, store_change_fn fn, void *arg)
{
    return st->vt->watch_read(st, fn, arg);
}

int store_begin(struct store *st)
{
    return st->vt->begin(st);
}

int store_commit(struct store *st)
{
    return st->vt->commit(st);
}

int store_rollback(struct store *st)
{
    return st->vt->rollback(st);
}

bool store_in_tx(const struct store *st)
{
    return st->vt->in_tx(st);
}

int store_op_begin(struct store *st)
{
    return st->vt->op_begin(st);
}

int store_op_end(struct store *st, bool ok)
{
    return st->vt->op_end(st, ok);
}

int store_agent_upsert(struct store *st, const char *name, int64_t now)
{
    return st->vt->agent_upsert(st, name, now);
}

int store_agents_each(struct store *st, store_name_fn fn, void *arg)
{
    return st->vt->agents_each(st, fn, arg);
}

int store_agent_save(struct store *st, const char *name, const char *settings, int64_t now)
{
    return st->vt->agent_save(st, name, settings, now);
}

int store_agent_settings_each(struct store *st, store_agent_fn fn, void *arg)
{
    return st->vt->agent_settings_each(st, fn, arg);
}

int store_agent_delete(struct store *st, const char *name)
{
    return st->vt->agent_delete(st, name);
}

int store_rule_steps_since(struct store *st, const char *rule_id, const char *exec_id, const char *agent,
                           int64_t since_ms, int64_t cap, int64_t *n, int64_t *oldest)
{
    return st->vt->rule_steps_since(st, rule_id, exec_id, agent, since_ms, cap, n, oldest);
}

bool store_batch_should_end(const struct store *st)
{
    return st->vt->batch_should_end && st->vt->batch_should_end(st);
}

int store_exec_parked_due(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return st->vt->exec_parked_due(st, now, ids, max, n);
}

int store_exec_parked_next(struct store *st, int64_t *at)
{
    return st->vt->exec_parked_next(st, at);
}

int store_api_key_put(struct store *st, const struct api_key_row *k)
{
    return st->vt->api_key_put(st, k);
}

int store_api_keys_each(struct store *st, store_api_key_fn fn, void *arg)
{
    return st->vt->api_keys_each(st, fn, arg);
}

int store_api_key_find(struct store *st, const char *hash, store_api_key_fn fn, void *arg)
{
    return st->vt->api_key_find(st, hash, fn, arg);
}

int store_exec_insert(struct store *st, const struct execution *e)
{
    return st->vt->exec_insert(st, e);
}

int store_exec_get(struct store *st, const char *id, struct execution *out)
{
    return st->vt->exec_get(st, id, out);
}

int store_exec_update(struct store *st, const struct execution *e)
{
    return st->vt->exec_update(st, e);
}

int store_exec_list(struct store *st, const char *agent, const char *status, const char *session, const char *cursor, int limit, store_exec_fn fn, void *arg)
{
    struct exec_filter f = {.agent = agent, .status = status, .session = session};
    return st->vt->exec_list(st, &f, cursor, limit, fn, arg);
}

int store_exec_query(struct store *st, const struct exec_filter *f, const char *cursor, int limit,
                     store_exec_fn fn, void *arg)
{
    return st->vt->exec_list(st, f, cursor, limit, fn, arg);
}

int store_exec_counts(struct store *st, const struct exec_filter *f, int64_t counts[EXEC_STATUS_COUNT])
{
    for (int i = 0; i < EXEC_STATUS_COUNT; i++) counts[i] = 0;
    return st->vt->exec_counts(st, f, counts);
}

void store_uuid_floor(int64_t ms, char out[UUID_STR_LEN])
{
    uint64_t t = ms < 0 ? 0 : ms > 0xffffffffffffLL ? 0xffffffffffffULL : (uint64_t)ms;
    snprintf(out, UUID_STR_LEN, "%08llx-%04llx-0000-0000-000000000000", (unsigned long long)(t >> 16),
             (unsigned long long)(t & 0xffff));
}

int store_exec_next_queued(struct store *st, const char *agent, char id_out[UUID_STR_LEN])
{
    return st->vt->exec_next_queued(st, agent, id_out);
}

int store_exec_expired_leases(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return st->vt->exec_expired_leases(st, now, ids, max, n);
}

int store_exec_past_deadline(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return st->vt->exec_past_deadline(st, now, ids, max, n);
}

int64_t store_next_timer(struct store *st)
{
    return st->vt->next_timer(st);
}

int store_event_append(struct store *st, struct execution *e, const char *type, const char *payload, int64_t at)
{
    return st->vt->event_append(st, e, type, payload, at);
}

int store_events_each(struct store *st, const char *exec_id, int64_t after, int limit, store_event_fn fn, void *arg)
{
    return st->vt->events_each(st, exec_id, after, limit, fn, arg);
}

int store_step_get(struct store *st, const char *exec_id, const char *step_id, struct step *out)
{
    return st->vt->step_get(st, exec_id, step_id, out);
}

void store_prefetch_step(struct store *st, const char *exec_id, const char *kind, const char *target,
                         const char *args_hash, const char *step_id)
{
    if (st->vt->prefetch_step) st->vt->prefetch_step(st, exec_id, kind, target, args_hash, step_id);
}

int store_step_insert(struct store *st, const struct step *s)
{
    return st->vt->step_insert(st, s);
}

int store_step_update(struct store *st, const struct step *s)
{
    return st->vt->step_update(st, s);
}

int store_steps_each(struct store *st, const char *exec_id, store_step_fn fn, void *arg)
{
    return st->vt->steps_each(st, exec_id, fn, arg);
}

int store_steps_each_status(struct store *st, const char *exec_id, enum step_status status, store_step_fn fn, void *arg)
{
    return st->vt->steps_each_status(st, exec_id, status, fn, arg);
}

int store_step_has_indeterminate(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, bool *out)
{
    return st->vt->step_has_indeterminate(st, exec_id, kind, target, args_hash, out);
}

int store_counter_get(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, int64_t *consumed, char *last_request, size_t lr_len)
{
    return st->vt->counter_get(st, exec_id, kind, target, args_hash, consumed, last_request, lr_len);
}

int store_counter_set(struct store *st, const char *exec_id, const char *kind, const char *target, const char *args_hash, int64_t consumed, const char *request_id)
{
    return st->vt->counter_set(st, exec_id, kind, target, args_hash, consumed, request_id);
}

int store_counters_clear(struct store *st, const char *exec_id)
{
    return st->vt->counters_clear(st, exec_id);
}

int store_counters_each(struct store *st, const char *exec_id, store_counter_fn fn, void *arg)
{
    return st->vt->counters_each(st, exec_id, fn, arg);
}

int store_approval_insert(struct store *st, const struct approval *a)
{
    return st->vt->approval_insert(st, a);
}

int store_approval_get(struct store *st, const char *id, struct approval *out)
{
    return st->vt->approval_get(st, id, out);
}

int store_approval_update(struct store *st, const struct approval *a)
{
    return st->vt->approval_update(st, a);
}

int store_approvals_each(struct store *st, const char *status, const char *exec_id, int limit, store_approval_fn fn, void *arg)
{
    return st->vt->approvals_each(st, status, exec_id, limit, fn, arg);
}

int store_approvals_expired(struct store *st, int64_t now, char (*ids)[UUID_STR_LEN], int max, int *n)
{
    return st->vt->approvals_expired(st, now, ids, max, n);
}

int store_session_active(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    return st->vt->session_active(st, session, id_out);
}

int store_session_next_waiting(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    return st->vt->session_next_waiting(st, session, id_out);
}

int store_session_last_completed(struct store *st, const char *session, const char *agent, char id_out[UUID_STR_LEN])
{
    return st->vt->session_last_completed(st, session, agent, id_out);
}

int store_session_any(struct store *st, const char *session, char id_out[UUID_STR_LEN])
{
    return st->vt->session_any(st, session, id_out);
}

int store_resource_get(struct store *st, const char *exec_id, const char *key, struct resource *out)
{
    return st->vt->resource_get(st, exec_id, key, out);
}

int store_resource_insert(struct store *st, const struct resource *r)
{
    return st->vt->resource_insert(st, r);
}

int store_resource_update(struct store *st, const struct resource *r)
{
    return st->vt->resource_update(st, r);
}

int store_resources_each(struct store *st, const char *exec_id, store_resource_fn fn, void *arg)
{
    return st->vt->resources_each(st, exec_id, fn, arg);
}

int store_checkpoint_insert(struct store *st, const struct checkpoint *c)
{
    return st->vt->checkpoint_insert(st, c);
}

int store_checkpoints_each(struct store *st, const char *exec_id, store_checkpoint_fn fn, void *arg)
{
    return st->vt->checkpoints_each(st, exec_id, fn, arg);
}

int store_checkpoints_invalidate(struct store *st, const char *exec_id, const char *key, int64_t generation, int64_t seq)
{
    return st->vt->checkpoints_invalidate(st, exec_id, key, generation, seq);
}

int store_checkpoint_covered(struct store *st, const char *exec_id, const char *key, int64_t generation, bool *out)
{
    return st->vt->checkpoint_covered(st, exec_id, key, generation, out);
}

int store_checkpoint_find(struct store *st, const char *exec_id, const char *key, int64_t generation, const char *ref, int64_t *covered_seq)
{
    return st->vt->checkpoint_find(st, exec_id, key, generation, ref, covered_seq);
}

_Static_assert(EXEC_CANCELLED + 1 == EXEC_STATUS_COUNT, "EXEC_STATUS_COUNT counts every enum exec_status");
