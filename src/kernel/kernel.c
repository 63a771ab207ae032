/*
 * kernel.c - durable executions: create, claim, steps, approvals, leases.
 *
 * Each public function is one logical operation inside the caller's store
 * savepoint. The pattern is always: load the execution, check the caller and the
 * dispatch lease, decide (rules.c, policy), then append events and update the
 * projections they describe. Nothing here talks to the network; notifications
 * for after the commit are queued as notes.
 */
#include "kernel/kernel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/jtext.h"
#include "base/log.h"
#include "base/names.h"
#include "base/xalloc.h"
#include "kernel/identity.h"
#include "kernel/rules.h"
#include "policy/policy.h"

#define MAX_ARGS_BYTES (1024 * 1024)
#define SWEEP_BATCH 64

#include "kernel/kernel_int.h"

/* --- small helpers --- */

int k_store_fail(struct err *err, int r, const char *what)
{
    if (r == -ENOENT) return err_notfound(err, "%s not found", what);
    if (r == -ENOTCONN)
        return err_set(err, 503, "storage_unavailable", "", "the database is unreachable while %s; retry shortly", what);
    if (r == -EAGAIN)
        return err_set(err, 503, "storage_conflict", "", "another kernel replica held the same data while %s; retry",
                       what);
    return err_internal(err, "storage error while %s (%d)", what, r);
}

json_t *k_json(const char *text)
{
    if (!text) return json_null();
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!v) v = json_loads(text, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL);
    return v ? v : json_string(text);
}

char *k_text(const json_t *v)
{
    return jtext_dump(v, NULL);
}

json_t *k_time(int64_t ms)
{
    if (ms <= 0) return json_null();
    char buf[40];
    clock_format_iso(ms, buf, sizeof buf);
    return json_string(buf);
}

void k_set_str(char **dst, const char *src)
{
    free(*dst);
    *dst = src ? xstrdup(src) : NULL;
}

void kernel_notes_fini(struct kernel_notes *n)
{
    free(n->execs);
    for (int i = 0; i < n->n_agents; i++) free(n->agents[i]);
    free(n->agents);
    memset(n, 0, sizeof *n);
}

void k_note_exec(struct kernel *k, const char *id)
{
    struct kernel_notes *n = &k->notes;
    for (int i = 0; i < n->n_execs; i++)
        if (strcmp(n->execs[i], id) == 0) return;
    store_notify(k->st, 'e', id); /* other replicas' watchers */
    if (n->n_execs == n->cap_execs)
        n->execs = xrealloc(n->execs, (size_t)(n->cap_execs = n->cap_execs ? n->cap_execs * 2 : 16) * sizeof *n->execs);
    memcpy(n->execs[n->n_execs++], id, UUID_STR_LEN);
}

void k_note_agent(struct kernel *k, const char *agent)
{
    struct kernel_notes *n = &k->notes;
    for (int i = 0; i < n->n_agents; i++)
        if (strcmp(n->agents[i], agent) == 0) return;
    store_notify(k->st, 'a', agent); /* other replicas' long-polling claims */
    if (n->n_agents == n->cap_agents)
        n->agents = xrealloc(n->agents, (size_t)(n->cap_agents = n->cap_agents ? n->cap_agents * 2 : 8) * sizeof *n->agents);
    n->agents[n->n_agents++] = xstrdup(agent);
}

void kernel_take_notes(struct kernel *k, struct kernel_notes *out)
{
    *out = k->notes;
    memset(&k->notes, 0, sizeof k->notes);
}

/* Append one event (payload stolen) and note the execution for watchers. */
int k_emit(struct kernel *k, struct execution *e, const char *type, json_t *payload,
                int64_t now, struct err *err)
{
    char *text = k_text(payload);
    json_decref(payload);
    return k_emit_text(k, e, type, text, now, err);
}

int k_emit_text(struct kernel *k, struct execution *e, const char *type, char *text, int64_t now,
                struct err *err)
{
    int r = store_event_append(k->st, e, type, text, now);
    free(text);
    if (r < 0) return k_store_fail(err, r, "appending an event");
    k_note_exec(k, e->id);
    return 0;
}

/* The payloads of the step round trip's events, written as text: the bytes json_pack
 * and k_text gave (see jtext_obj), at a fraction of the cost. Caller frees. */
static char *step_allowed_text(const struct step *s, const char *rule_id, const char *reason)
{
    struct jtext_obj o;
    jtext_obj_init(&o);
    jtext_obj_str(&o, "step_id", s->step_id);
    jtext_obj_str(&o, "target", s->target);
    jtext_obj_str(&o, "rule_id", rule_id);
    jtext_obj_str(&o, "reason", reason);
    return jtext_obj_end(&o);
}

static char *step_executing_text(const struct step *s, int64_t attempt)
{
    struct jtext_obj o;
    jtext_obj_init(&o);
    jtext_obj_str(&o, "step_id", s->step_id);
    jtext_obj_str(&o, "kind", s->kind);
    jtext_obj_str(&o, "target", s->target);
    jtext_obj_int(&o, "run", s->runs);
    jtext_obj_int(&o, "attempt", attempt);
    return jtext_obj_end(&o);
}

static char *step_proposed_text(const struct step *s)
{
    json_t *args = k_json(s->args);
    char *args_text = k_text(args);
    json_decref(args);
    struct jtext_obj o;
    jtext_obj_init(&o);
    jtext_obj_str(&o, "step_id", s->step_id);
    jtext_obj_str(&o, "kind", s->kind);
    jtext_obj_str(&o, "target", s->target);
    jtext_obj_raw(&o, "args", args_text);
    jtext_obj_str(&o, "args_hash", s->args_hash);
    jtext_obj_int(&o, "occurrence", s->occurrence);
    jtext_obj_str(&o, "idempotency", idempotency_name(s->idem));
    free(args_text);
    return jtext_obj_end(&o);
}

int k_save_exec(struct kernel *k, struct execution *e, int64_t now, struct err *err)
{
    e->updated_at = now;
    int r = store_exec_update(k->st, e);
    return r < 0 ? k_store_fail(err, r, "updating the execution") : 0;
}

/* --- agents and workers --- */

void k_mark(const struct execution *e, struct exec_mark *m)
{
    m->status = e->status;
    m->dstate = e->dstate;
    m->attempt = e->attempt;
    m->lease_deadline = e->lease_deadline;
}

int k_save_exec_changed(struct kernel *k, struct execution *e, const struct exec_mark *m, int64_t now,
                        struct err *err)
{
    int64_t slack = e->lease_ms / 4 < 1000 ? e->lease_ms / 4 : 1000;
    if (e->status == m->status && e->dstate == m->dstate && e->attempt == m->attempt &&
        e->lease_deadline - m->lease_deadline < slack)
        return 0;
    return k_save_exec(k, e, now, err);
}

struct agent_conf *k_find_agent(struct kernel *k, const char *name)
{
    for (int i = 0; i < k->n_agents; i++)
        if (strcmp(k->agents[i].name, name) == 0) return &k->agents[i];
    return NULL;
}

struct agent_conf *k_ensure_agent(struct kernel *k, const char *name)
{
    struct agent_conf *a = k_find_agent(k, name);
    if (a) return a;
    k->agents = xrealloc(k->agents, (size_t)(k->n_agents + 1) * sizeof *k->agents);
    a = &k->agents[k->n_agents++];
    memset(a, 0, sizeof *a);
    a->name = xstrdup(name);
    a->registered_at = clock_now_ms();
    return a;
}

static int64_t agent_lease_ms(struct kernel *k, const struct agent_conf *a)
{
    return a && a->lease_ms > 0 ? a->lease_ms : k->cfg.lease_ms;
}

static int64_t agent_max_attempts(struct kernel *k, const struct agent_conf *a)
{
    return a && a->max_attempts > 0 ? a->max_attempts : k->cfg.max_attempts;
}

static int load_agent_name(const char *name, void *arg)
{
    k_ensure_agent(arg, name);
    return 0;
}

struct kernel *kernel_new(struct store *st, const struct kernel_config *cfg)
{
    struct kernel *k = xcalloc(1, sizeof *k);
    k->st = st;
    k->cfg = *cfg;
    if (k->cfg.lease_ms <= 0) k->cfg.lease_ms = 120000;
    if (k->cfg.max_attempts <= 0) k->cfg.max_attempts = 5;
    if (k->cfg.approval_timeout_ms <= 0) k->cfg.approval_timeout_ms = 900000;
    store_agents_each(st, load_agent_name, k); /* agents seen before a restart */
    if (k_agents_load(k) < 0) log_error("cannot read the agents set at run time", "error=\"%s\"", store_errmsg(st));
    return k;
}

void kernel_free(struct kernel *k)
{
    if (!k) return;
    for (int i = 0; i < k->n_agents; i++) {
        free(k->agents[i].name);
        policy_free(k->agents[i].policy);
        free(k->agents[i].webhook_url);
        free(k->agents[i].secret);
    }
    free(k->agents);
    for (int i = 0; i < k->n_workers; i++) {
        free(k->workers[i].agent);
        free(k->workers[i].name);
    }
    free(k->workers);
    kernel_notes_fini(&k->notes);
    kernel_judge_request_fini(&k->judge_req);
    free(k);
}

struct store *kernel_store(struct kernel *k)
{
    return k->st;
}

void kernel_add_agent(struct kernel *k, const char *name, struct policy *policy, int64_t lease_ms,
                      int64_t max_attempts)
{
    struct agent_conf *a = k_ensure_agent(k, name);
    if (policy || !a->policy_runtime) { /* no policy in the config keeps one set at run time */
        policy_free(a->policy);
        a->policy = policy;
        a->policy_runtime = false;
    }
    a->lease_ms = lease_ms;
    a->max_attempts = max_attempts;
}

bool kernel_agent_known(struct kernel *k, const char *name)
{
    return k_find_agent(k, name) != NULL;
}

void kernel_agent_set_endpoint(struct kernel *k, const char *name, const char *webhook_url,
                               const char *secret)
{
    struct agent_conf *a = k_ensure_agent(k, name);
    k_set_str(&a->webhook_url, webhook_url);
    k_set_str(&a->secret, secret);
}

int kernel_agent_register(struct kernel *k, const char *name, int64_t lease_ms, const char *webhook_url,
                          const char *secret, struct err *err)
{
    struct agent_conf *a = k_ensure_agent(k, name);
    if (lease_ms > 0) a->lease_ms = lease_ms;
    k_set_str(&a->webhook_url, webhook_url);
    k_set_str(&a->secret, secret);
    return k_agent_persist(k, a, err);
}

int kernel_agent_set_policy(struct kernel *k, const char *name, struct policy *policy, struct err *err)
{
    struct agent_conf *a = k_find_agent(k, name);
    if (!a) {
        policy_free(policy);
        return err_set(err, 404, "not_found", "agent_id", "no agent named \"%s\"; register it first (POST /v0/agents)",
                       name);
    }
    policy_free(a->policy);
    a->policy = policy;
    a->policy_runtime = true;
    return k_agent_persist(k, a, err);
}

bool kernel_agent_info(struct kernel *k, const char *name, struct kernel_agent_info *out)
{
    struct agent_conf *a = k_find_agent(k, name);
    if (!a) return false;
    out->webhook_url = a->webhook_url;
    out->secret = a->secret;
    out->policy = a->policy;
    out->lease_ms = agent_lease_ms(k, a);
    out->max_attempts = agent_max_attempts(k, a);
    return true;
}

const char *kernel_webhook_agent(struct kernel *k, int i)
{
    for (int j = 0; j < k->n_agents; j++)
        if (k->agents[j].webhook_url && i-- == 0) return k->agents[j].name;
    return NULL;
}

static int require_agent(struct kernel *k, const char *agent, int64_t now, struct err *err)
{
    /* checked before anything else: a name with a newline or an escape would reach
     * the store, the logs and every operator's terminal */
    if (!name_agent_valid(agent))
        return err_invalid(err, "agent_id", "agent_id: use 1..%d letters, digits and _ . : -", NAME_AGENT_MAX);
    if (k_find_agent(k, agent)) return 0;
    if (!k->cfg.open_agents)
        return err_set(err, 404, "not_found", "agent_id",
                       "no agent named \"%s\" is configured; add it under agents: in the config file",
                       agent);
    k_ensure_agent(k, agent);
    int r = store_agent_upsert(k->st, agent, now);
    return r < 0 ? k_store_fail(err, r, "registering the agent") : 0;
}

static int check_caller_agent(const struct caller *c, const char *agent, struct err *err)
{
    if (c && c->agent && strcmp(c->agent, agent) != 0)
        return err_set(err, 403, "forbidden", "", "this API key belongs to agent \"%s\", not \"%s\"",
                       c->agent, agent);
    return 0;
}

/* Load an execution the caller may see. */
int k_load_exec(struct kernel *k, const struct caller *c, const char *id,
                     struct execution *e, struct err *err)
{
    if (!uuid_valid(id)) return err_set(err, 404, "not_found", "id", "no execution with id \"%s\"", id);
    int r = store_exec_get(k->st, id, e);
    if (r == -ENOENT) return err_set(err, 404, "not_found", "id", "no execution with id \"%s\"", id);
    if (r < 0) return k_store_fail(err, r, "reading the execution");
    if (check_caller_agent(c, e->agent, err) < 0) {
        execution_fini(e);
        return -1;
    }
    return 0;
}

/* --- JSON views --- */

/* Views omit an absent field rather than sending null (upstream's typed models declare
 * such fields as plain strings and numbers and refuse a null). Only the view's own
 * members are dropped: a null inside a client's JSON (input, output, result) stays. */
json_t *k_omit_nulls(json_t *view)
{
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(view, tmp, key, v) if (json_is_null(v)) json_object_del(view, key);
    return view;
}

json_t *k_exec_json(const struct execution *e)
{
    json_t *d = json_null();
    if (e->dispatch_id[0]) {
        d = json_pack("{s:s, s:I, s:s, s:o, s:o}", "id", e->dispatch_id, "attempt", (json_int_t)e->attempt,
                      "state", dispatch_state_name(e->dstate), "worker_id",
                      e->worker_id[0] && e->dstate == DISPATCH_LEASED ? json_string(e->worker_id) : json_null(),
                      "lease_deadline", e->dstate == DISPATCH_LEASED ? k_time(e->lease_deadline) : json_null());
        k_omit_nulls(d);
    }
    json_t *j = json_pack("{s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:o}", "id", e->id,
                     "agent_id", e->agent, "session", e->session ? json_string(e->session) : json_null(),
                     "status", exec_status_name(e->status), "input", k_json(e->input),
                     "output", k_json(e->output), "state", k_json(e->state),
                     "failure_reason", e->failure_reason ? json_string(e->failure_reason) : json_null(),
                     "created_at", k_time(e->created_at), "updated_at", k_time(e->updated_at),
                     "deadline_at", k_time(e->deadline_at), "last_seq", (json_int_t)e->last_seq,
                     "dispatch", d);
    json_object_set_new(j, "parent_execution_id", e->parent_id[0] ? json_string(e->parent_id) : json_null());
    json_object_set_new(j, "forked_from", e->forked_from[0] ? json_string(e->forked_from) : json_null());
    json_object_set_new(j, "fork_seq", e->forked_from[0] ? json_integer(e->fork_seq) : json_null());
    json_object_set_new(j, "restoration", k_json(e->restoration));
    return k_omit_nulls(j);
}

json_t *k_opt_str(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *k_step_json(const struct step *s)
{
    return k_omit_nulls(json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:I, s:s, s:s, s:o, s:o, s:o, s:o, s:I, s:o, s:o}",
                     "step_id", s->step_id, "execution_id", s->exec_id, "kind", s->kind, "target", s->target,
                     "args", k_json(s->args), "args_hash", s->args_hash,
                     "occurrence", (json_int_t)s->occurrence, "idempotency", idempotency_name(s->idem),
                     "status", step_status_name(s->status), "result", k_json(s->result),
                     "error", k_json(s->error), "rule_id", k_opt_str(s->rule_id),
                     "approval_id", s->approval_id[0] ? json_string(s->approval_id) : json_null(),
                     "runs", (json_int_t)s->runs, "created_at", k_time(s->created_at),
                     "completed_at", k_time(s->completed_at)));
}

static json_t *approval_json(struct kernel *k, const struct approval *a)
{
    struct step s;
    bool have = store_step_get(k->st, a->exec_id, a->step_id, &s) == 0;
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                          "id", a->id, "execution_id", a->exec_id, "step_id", a->step_id,
                          "kind", have ? json_string(s.kind) : json_null(),
                          "target", have ? json_string(s.target) : json_null(),
                          "args", have ? k_json(s.args) : json_null(),
                          "status", approval_status_name(a->status), "rule_id", k_opt_str(a->rule_id),
                          "reason", k_opt_str(a->reason), "message", k_opt_str(a->message),
                          "approvers", k_json(a->approvers), "timeout_at", k_time(a->timeout_at),
                          "decided_by", k_opt_str(a->decided_by), "decided_at", k_time(a->decided_at),
                          "rationale", k_opt_str(a->rationale), "created_at", k_time(a->created_at));
    if (have) step_fini(&s);
    return k_omit_nulls(j);
}

/* --- dispatch helpers --- */

/* Queue a fresh dispatch for the execution (new id, attempt counter restarts). */
int k_queue_dispatch(struct kernel *k, struct execution *e, int64_t now, struct err *err)
{
    uuid_v7(e->dispatch_id);
    e->attempt = 0;
    e->dstate = DISPATCH_QUEUED;
    e->queued_at = now;
    e->worker_id[0] = '\0';
    e->lease_deadline = 0;
    k_note_agent(k, e->agent);
    return k_emit(k, e, "dispatch.queued", json_pack("{s:s, s:I}", "dispatch_id", e->dispatch_id,
                                                    "attempt", (json_int_t)(e->attempt + 1)), now, err);
}

static void release_dispatch(struct execution *e, enum dispatch_state to)
{
    e->dstate = to;
    e->lease_deadline = 0;
}

/* Check the caller's dispatch and renew its lease. */
int k_check_lease(struct kernel *k, struct execution *e, const struct dispatch_ref *d,
                       int64_t now, struct err *err)
{
    switch (rules_lease_check(e, d ? d->id : NULL, d ? d->attempt : 0)) {
    case LEASE_MISSING:
        return err_set(err, 400, "validation_error", "Rebuno-Dispatch-Id",
                       "agent calls need the Rebuno-Dispatch-Id and Rebuno-Dispatch-Attempt headers from the claim");
    case LEASE_SUPERSEDED:
        return err_set(err, 409, "lease_superseded", "Rebuno-Dispatch-Attempt",
                       "dispatch %s attempt %lld is no longer current (now %s attempt %lld); stop working on execution %s",
                       d->id, (long long)d->attempt, e->dispatch_id[0] ? e->dispatch_id : "none",
                       (long long)e->attempt, e->id);
    case LEASE_EXPIRED:
        return err_set(err, 409, "lease_superseded", "Rebuno-Dispatch-Attempt",
                       "the lease of dispatch %s attempt %lld expired and the execution was queued for another worker",
                       d->id, (long long)d->attempt);
    case LEASE_OK: break;
    }
    if (e->dstate == DISPATCH_LEASED) e->lease_deadline = now + e->lease_ms;
    return 0;
}

/* --- executions --- */

static int count_one(struct execution *e, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

/* An explicit parent: a completed execution of the same agent; a session with it is new. */
static int check_parent(struct kernel *k, const char *agent, const char *parent, const char *session,
                        struct err *err)
{
    struct execution p;
    int r = uuid_valid(parent) ? store_exec_get(k->st, parent, &p) : -ENOENT;
    if (r == -ENOENT)
        return err_set(err, 404, "not_found", "parent_execution_id", "no execution with id \"%s\"", parent);
    if (r < 0) return k_store_fail(err, r, "reading the parent");
    int rc = 0;
    if (strcmp(p.agent, agent) != 0)
        rc = err_invalid(err, "parent_execution_id", "parent_execution_id: %s is an execution of agent %s, not %s",
                         parent, p.agent, agent);
    else if (p.status != EXEC_COMPLETED)
        rc = err_set(err, 409, "conflict", "parent_execution_id",
                     "parent_execution_id: %s is %s; only a completed execution can be continued", parent,
                     exec_status_name(p.status));
    execution_fini(&p);
    if (rc < 0 || !session) return rc;
    int n = 0;
    if ((r = store_exec_list(k->st, NULL, NULL, session, NULL, 1, count_one, &n)) < 0)
        return k_store_fail(err, r, "checking the session");
    if (n)
        return err_set(err, 409, "conflict", "session",
                       "session %s already has executions; with parent_execution_id give a new session (or none)",
                       session);
    return 0;
}

int kernel_create(struct kernel *k, const struct caller *c, const char *agent, const json_t *input,
                  const char *session, const char *parent, int64_t deadline_ms, json_t **out,
                  struct err *err)
{
    int64_t now = clock_now_ms();
    if (check_caller_agent(c, agent, err) < 0 || require_agent(k, agent, now, err) < 0) return -1;
    if (parent && check_parent(k, agent, parent, session, err) < 0) return -1;
    struct agent_conf *a = k_find_agent(k, agent);
    struct execution e;
    memset(&e, 0, sizeof e);
    uuid_v7(e.id);
    e.agent = xstrdup(agent);
    e.session = session ? xstrdup(session) : NULL;
    e.input = k_text(input);
    e.status = EXEC_PENDING;
    e.created_at = e.updated_at = now;
    e.deadline_at = deadline_ms > 0 ? now + deadline_ms : 0;
    e.lease_ms = agent_lease_ms(k, a);
    e.max_attempts = agent_max_attempts(k, a);
    if (parent) snprintf(e.parent_id, sizeof e.parent_id, "%s", parent);
    int rc = -1;
    int r = store_exec_insert(k->st, &e);
    if (r < 0) {
        k_store_fail(err, r, "creating the execution");
        goto out;
    }
    if (k_emit(k, &e, "execution.created",
             json_pack("{s:s, s:s, s:O, s:o, s:o}", "execution_id", e.id, "agent", e.agent, "input", input,
                       "session", k_opt_str(e.session), "deadline_at", k_time(e.deadline_at)), now, err) < 0 ||
        k_session_enter(k, &e, now, err) < 0 || k_save_exec(k, &e, now, err) < 0)
        goto out;
    *out = k_exec_json(&e);
    rc = 0;
out:
    execution_fini(&e);
    return rc;
}

int kernel_get(struct kernel *k, const struct caller *c, const char *id, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    *out = k_exec_json(&e);
    execution_fini(&e);
    return 0;
}

static int list_one(struct execution *e, void *arg)
{
    json_array_append_new(arg, k_exec_json(e));
    return 0;
}

/* f with the caller's restriction: an agent's key sees its own agent's executions only. */
static int scoped_filter(const struct caller *c, const struct exec_filter *f, struct exec_filter *out,
                         struct err *err)
{
    *out = *f;
    if (out->agent && !name_agent_valid(out->agent))
        return err_invalid(err, "agent_id", "agent_id: use 1..%d letters, digits and _ . : -", NAME_AGENT_MAX);
    if (c && c->agent) {
        if (out->agent && strcmp(out->agent, c->agent) != 0) return check_caller_agent(c, out->agent, err);
        out->agent = c->agent;
    }
    return 0;
}

int kernel_list(struct kernel *k, const struct caller *c, const struct exec_filter *f, const char *cursor,
                int limit, json_t **out, struct err *err)
{
    struct exec_filter sf;
    if (scoped_filter(c, f, &sf, err) < 0) return -1;
    json_t *arr = json_array();
    int r = store_exec_query(k->st, &sf, cursor, limit + 1, list_one, arr);
    if (r < 0) {
        json_decref(arr);
        return k_store_fail(err, r, "listing executions");
    }
    json_t *next = json_null();
    if ((int)json_array_size(arr) > limit) {
        json_array_remove(arr, (size_t)limit);
        next = json_incref(json_object_get(json_array_get(arr, (size_t)limit - 1), "id"));
    }
    *out = json_pack("{s:o, s:o}", "executions", arr, "next_cursor", next);
    return 0;
}

int kernel_exec_counts(struct kernel *k, const struct caller *c, const struct exec_filter *f, json_t **out,
                       struct err *err)
{
    struct exec_filter sf;
    if (scoped_filter(c, f, &sf, err) < 0) return -1;
    int64_t n[EXEC_STATUS_COUNT];
    int r = store_exec_counts(k->st, &sf, n);
    if (r < 0) return k_store_fail(err, r, "counting executions");
    json_t *counts = json_object();
    int64_t total = 0;
    for (int i = 0; i < EXEC_STATUS_COUNT; i++) {
        json_object_set_new(counts, exec_status_name((enum exec_status)i), json_integer(n[i]));
        total += n[i];
    }
    *out = json_pack("{s:o, s:I}", "counts", counts, "total", (json_int_t)total);
    return 0;
}

int kernel_forks(struct kernel *k, const struct caller *c, const char *id, int limit, json_t **out,
                 struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    struct exec_filter f = {.forked_from = e.id};
    json_t *arr = json_array();
    int r = store_exec_query(k->st, &f, NULL, limit, list_one, arr);
    execution_fini(&e);
    if (r < 0) {
        json_decref(arr);
        return k_store_fail(err, r, "listing forks");
    }
    *out = json_pack("{s:o}", "forks", arr);
    return 0;
}

int kernel_cancel(struct kernel *k, const struct caller *c, const char *id, const char *reason,
                  json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    int64_t now = clock_now_ms();
    int rc = -1;
    if (exec_status_terminal(e.status)) {
        err_set(err, 409, "conflict", "", "execution %s is already %s; there is nothing to cancel", e.id,
                exec_status_name(e.status));
        goto out;
    }
    if (k_finish_exec(k, &e, EXEC_CANCELLED, reason ? reason : "client_cancelled", now, err) < 0) goto out;
    *out = k_exec_json(&e);
    rc = 0;
out:
    execution_fini(&e);
    return rc;
}

struct events_ctx {
    const char *exec_id;
    json_t *arr;
};

static json_t *event_json(const char *exec_id, int64_t seq, const char *type, const char *payload,
                          int64_t at)
{
    return json_pack("{s:s, s:I, s:s, s:o, s:o}", "execution_id", exec_id, "event_seq", (json_int_t)seq,
                     "type", type, "occurred_at", k_time(at), "payload", k_json(payload));
}

static int events_one(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct events_ctx *x = arg;
    json_array_append_new(x->arr, event_json(x->exec_id, seq, type, payload, at));
    return 0;
}

int kernel_events(struct kernel *k, const struct caller *c, const char *id, int64_t after,
                  int limit, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    struct events_ctx x = {e.id, json_array()};
    int r = store_events_each(k->st, e.id, after, limit, events_one, &x);
    if (r < 0) {
        json_decref(x.arr);
        execution_fini(&e);
        return k_store_fail(err, r, "reading events");
    }
    *out = json_pack("{s:o, s:I, s:b}", "events", x.arr, "last_seq", (json_int_t)e.last_seq,
                     "terminal", exec_status_terminal(e.status));
    execution_fini(&e);
    return 0;
}

int kernel_exec_terminal(struct kernel *k, const char *id)
{
    struct execution e;
    if (store_exec_get(k->st, id, &e) < 0) return -1;
    int t = exec_status_terminal(e.status);
    execution_fini(&e);
    return t;
}

static int steps_one(struct step *s, void *arg)
{
    json_array_append_new(arg, k_step_json(s));
    return 0;
}

int kernel_steps(struct kernel *k, const struct caller *c, const char *id, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    json_t *arr = json_array();
    int r = store_steps_each(k->st, e.id, steps_one, arr);
    execution_fini(&e);
    if (r < 0) {
        json_decref(arr);
        return k_store_fail(err, r, "reading steps");
    }
    *out = json_pack("{s:o}", "steps", arr);
    return 0;
}

int k_load_step(struct kernel *k, const struct execution *e, const char *step_id,
                     struct step *s, struct err *err)
{
    int r = store_step_get(k->st, e->id, step_id, s);
    if (r == -ENOENT)
        return err_set(err, 404, "not_found", "step_id", "execution %s has no step %s", e->id, step_id);
    return r < 0 ? k_store_fail(err, r, "reading the step") : 0;
}

int kernel_step_get(struct kernel *k, const struct caller *c, const char *id, const char *step_id,
                    json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    struct step s;
    int r = k_load_step(k, &e, step_id, &s, err);
    execution_fini(&e);
    if (r < 0) return -1;
    *out = k_step_json(&s);
    step_fini(&s);
    return 0;
}

/* --- workers, claims, leases --- */

static struct worker *find_worker(struct kernel *k, const char *id)
{
    for (int i = 0; i < k->n_workers; i++)
        if (strcmp(k->workers[i].id, id) == 0) return &k->workers[i];
    return NULL;
}

static struct worker *add_worker(struct kernel *k, const char *id, const char *agent, const char *name)
{
    /* Forget workers not seen for an hour so the table stays small. */
    int64_t now = clock_now_ms();
    for (int i = 0; i < k->n_workers;) {
        if (now - k->workers[i].last_seen > 3600 * 1000) {
            free(k->workers[i].agent);
            free(k->workers[i].name);
            k->workers[i] = k->workers[--k->n_workers];
        } else {
            i++;
        }
    }
    k->workers = xrealloc(k->workers, (size_t)(k->n_workers + 1) * sizeof *k->workers);
    struct worker *w = &k->workers[k->n_workers++];
    snprintf(w->id, sizeof w->id, "%s", id);
    w->agent = xstrdup(agent);
    w->name = xstrdup(name ? name : "");
    w->last_seen = now;
    return w;
}

int kernel_register_worker(struct kernel *k, const struct caller *c, const char *agent,
                           const char *name, json_t **out, struct err *err)
{
    int64_t now = clock_now_ms();
    if (check_caller_agent(c, agent, err) < 0 || require_agent(k, agent, now, err) < 0) return -1;
    char id[UUID_STR_LEN];
    uuid_v7(id);
    add_worker(k, id, agent, name);
    struct agent_conf *a = k_find_agent(k, agent);
    *out = json_pack("{s:s, s:s, s:I, s:I}", "worker_id", id, "agent", agent, "lease_timeout_seconds",
                     (json_int_t)(agent_lease_ms(k, a) / 1000), "max_attempts",
                     (json_int_t)agent_max_attempts(k, a));
    return 0;
}

int kernel_claim(struct kernel *k, const struct caller *c, const char *agent,
                 const char *worker_id, json_t **out, struct err *err)
{
    int64_t now = clock_now_ms();
    *out = NULL;
    if (check_caller_agent(c, agent, err) < 0 || require_agent(k, agent, now, err) < 0) return -1;
    struct worker *w = find_worker(k, worker_id);
    if (!w) w = add_worker(k, worker_id, agent, NULL); /* a worker from before a kernel restart */
    if (strcmp(w->agent, agent) != 0)
        return err_set(err, 409, "conflict", "worker_id", "worker %s is registered for agent \"%s\"",
                       worker_id, w->agent);
    w->last_seen = now;
    char id[UUID_STR_LEN];
    int r = store_exec_next_queued(k->st, agent, id);
    if (r == -ENOENT) return 0;
    if (r < 0) return k_store_fail(err, r, "looking for queued work");
    struct execution e;
    if ((r = store_exec_get(k->st, id, &e)) < 0) return k_store_fail(err, r, "reading the execution");
    int rc = -1;
    e.attempt++;
    e.dstate = DISPATCH_LEASED;
    snprintf(e.worker_id, sizeof e.worker_id, "%s", worker_id);
    e.lease_deadline = now + e.lease_ms;
    /* Occurrence counting restarts with every attempt, so the re-run regenerates the same ids. */
    if ((r = store_counters_clear(k->st, e.id)) < 0) {
        k_store_fail(err, r, "resetting step counters");
        goto out;
    }
    if (e.status == EXEC_PENDING) {
        e.status = EXEC_RUNNING;
        if (k_emit(k, &e, "execution.started", json_pack("{s:s}", "execution_id", e.id), now, err) < 0) goto out;
    }
    if (k_emit(k, &e, "dispatch.claimed",
             json_pack("{s:s, s:I, s:s, s:s, s:o}", "dispatch_id", e.dispatch_id, "attempt",
                       (json_int_t)e.attempt, "worker_id", worker_id, "worker_name", w->name,
                       "lease_deadline", k_time(e.lease_deadline)), now, err) < 0 ||
        k_save_exec(k, &e, now, err) < 0)
        goto out;
    *out = json_pack("{s:o, s:{s:s, s:I, s:o, s:I}}", "execution", k_exec_json(&e), "dispatch", "id",
                     e.dispatch_id, "attempt", (json_int_t)e.attempt, "lease_deadline",
                     k_time(e.lease_deadline), "lease_timeout_seconds", (json_int_t)(e.lease_ms / 1000));
    rc = 0;
out:
    execution_fini(&e);
    return rc;
}

int kernel_heartbeat(struct kernel *k, const struct caller *c, const char *id,
                     const struct dispatch_ref *d, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    int64_t now = clock_now_ms();
    int rc = -1;
    if (exec_status_terminal(e.status)) {
        err_set(err, 409, "execution_terminal", "", "execution %s is %s", e.id, exec_status_name(e.status));
        goto out;
    }
    if (k_check_lease(k, &e, d, now, err) < 0 || k_save_exec(k, &e, now, err) < 0) goto out;
    *out = json_pack("{s:o, s:s}", "lease_deadline", k_time(e.lease_deadline), "status",
                     exec_status_name(e.status));
    rc = 0;
out:
    execution_fini(&e);
    return rc;
}

/* Expire a pending approval and deny its step (cancel, timeout). */
static int approval_close(struct kernel *k, struct execution *e, struct approval *a,
                          enum approval_status to, const char *by, const char *rationale,
                          const char *step_reason, int64_t now, struct err *err);

struct finish_ctx {
    struct kernel *k;
    struct execution *e;
    int64_t now;
    struct err *err;
};

static int cancel_running_step(struct step *s, void *arg)
{
    struct finish_ctx *x = arg;
    s->status = STEP_CANCELLED;
    s->completed_at = x->now;
    k_set_str(&s->error, "{\"reason\":\"execution_cancelled\"}");
    int r = store_step_update(x->k->st, s);
    if (r < 0) return k_store_fail(x->err, r, "cancelling a step");
    return k_emit(x->k, x->e, "step.cancelled",
                json_pack("{s:s, s:s, s:s, s:{s:s}}", "step_id", s->step_id, "kind", s->kind, "target",
                          s->target, "error", "reason", "execution_cancelled"), x->now, x->err);
}

static int expire_pending_approval(struct approval *a, void *arg)
{
    struct finish_ctx *x = arg;
    return approval_close(x->k, x->e, a, APPROVAL_EXPIRED, NULL, "execution_cancelled",
                          "execution_cancelled", x->now, x->err);
}

int k_finish_exec(struct kernel *k, struct execution *e, enum exec_status to,
                       const char *reason, int64_t now, struct err *err)
{
    ASSERT(rules_exec_transition_ok(e->status, to));
    e->status = to;
    release_dispatch(e, DISPATCH_NONE);
    if (to != EXEC_COMPLETED) k_set_str(&e->failure_reason, reason);
    struct finish_ctx x = {k, e, now, err};
    if (to == EXEC_CANCELLED) {
        int r = store_approvals_each(k->st, "pending", e->id, 1000, expire_pending_approval, &x);
        if (r < 0) return err->status ? -1 : k_store_fail(err, r, "expiring approvals");
    }
    if (to != EXEC_COMPLETED) {
        int r = store_steps_each_status(k->st, e->id, STEP_EXECUTING, cancel_running_step, &x);
        if (r < 0) return err->status ? -1 : k_store_fail(err, r, "cancelling steps");
    }
    const char *type = to == EXEC_COMPLETED ? "execution.completed"
                       : to == EXEC_FAILED  ? "execution.failed"
                                            : "execution.cancelled";
    json_t *p = json_pack("{s:s, s:s}", "execution_id", e->id, "status", exec_status_name(to));
    if (to == EXEC_COMPLETED) {
        json_object_set_new(p, "output", k_json(e->output));
        if (e->state) json_object_set_new(p, "state", k_json(e->state));
    } else {
        json_object_set_new(p, "reason", json_string(reason));
    }
    if (k_emit(k, e, type, p, now, err) < 0 || k_save_exec(k, e, now, err) < 0) return -1;
    return k_session_release(k, e, now, err);
}

static int agent_finish(struct kernel *k, const struct caller *c, const char *id,
                        const struct dispatch_ref *d, enum exec_status to, const json_t *output,
                        const json_t *state, const char *reason, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    int64_t now = clock_now_ms();
    int rc = -1;
    if (exec_status_terminal(e.status)) {
        err_set(err, 409, "execution_terminal", "", "execution %s is already %s", e.id,
                exec_status_name(e.status));
        goto out;
    }
    if (k_check_lease(k, &e, d, now, err) < 0) goto out;
    if (e.status == EXEC_BLOCKED && to == EXEC_COMPLETED) {
        err_set(err, 409, "conflict", "", "execution %s is blocked on an approval; it cannot complete until that is decided",
                e.id);
        goto out;
    }
    if (to == EXEC_COMPLETED) {
        free(e.output);
        e.output = k_text(output ? output : json_null());
        free(e.state);
        e.state = state && !json_is_null(state) ? k_text(state) : NULL;
    }
    if (k_finish_exec(k, &e, to, reason, now, err) < 0) goto out;
    *out = k_exec_json(&e);
    rc = 0;
out:
    execution_fini(&e);
    return rc;
}

int kernel_complete(struct kernel *k, const struct caller *c, const char *id,
                    const struct dispatch_ref *d, const json_t *output, const json_t *state,
                    json_t **out, struct err *err)
{
    return agent_finish(k, c, id, d, EXEC_COMPLETED, output, state, NULL, out, err);
}

int kernel_fail(struct kernel *k, const struct caller *c, const char *id,
                const struct dispatch_ref *d, const char *error, json_t **out, struct err *err)
{
    return agent_finish(k, c, id, d, EXEC_FAILED, NULL, NULL, error, out, err);
}

int kernel_agents(struct kernel *k, json_t **out, struct err *err)
{
    json_t *arr = json_array();
    int64_t now = clock_now_ms();
    for (int i = 0; i < k->n_agents; i++) {
        struct agent_conf *a = &k->agents[i];
        int workers = 0;
        for (int j = 0; j < k->n_workers; j++)
            if (strcmp(k->workers[j].agent, a->name) == 0 &&
                now - k->workers[j].last_seen < 2 * agent_lease_ms(k, a))
                workers++;
        json_t *v = json_pack("{s:s, s:I, s:I, s:b, s:i, s:s}", "id", a->name,
                              "lease_timeout_seconds", (json_int_t)(agent_lease_ms(k, a) / 1000),
                              "max_attempts", (json_int_t)agent_max_attempts(k, a),
                              "has_policy", a->policy != NULL, "workers", workers,
                              "dispatch", a->webhook_url ? "webhook" : "pull");
        if (a->webhook_url) json_object_set_new(v, "webhook_url", json_string(a->webhook_url));
        if (a->policy) json_object_set_new(v, "policy_bundle", json_string(policy_source(a->policy)));
        json_object_set_new(v, "registered_at", k_time(a->registered_at));
        json_array_append_new(arr, v); /* the secret is never shown */
    }
    *out = json_pack("{s:o}", "agents", arr);
    return 0;
}

/* --- steps --- */

json_t *k_decision(const char *d, const char *step_id)
{
    json_t *j = json_pack("{s:s}", "decision", d);
    if (step_id) json_object_set_new(j, "step_id", json_string(step_id));
    return j;
}

static json_t *denied_decision(const struct step *s)
{
    json_t *j = k_decision("denied", s->step_id);
    json_t *e = k_json(s->error);
    json_t *reason = json_object_get(e, "reason");
    json_object_set_new(j, "reason", json_is_string(reason) ? json_incref(reason) : json_string("policy_denied"));
    json_object_set_new(j, "rule_id", k_opt_str(s->rule_id));
    json_decref(e);
    return j;
}

static int start_step_run(struct kernel *k, struct execution *e, struct step *s, int64_t now,
                          json_t **views, struct err *err)
{
    s->status = STEP_EXECUTING;
    s->runs++;
    int r = store_step_update(k->st, s);
    if (r < 0) return k_store_fail(err, r, "updating the step");
    if (k_resources_touch(k, e, s, views, err) < 0) return -1;
    return k_emit_text(k, e, "step.executing", step_executing_text(s, e->attempt), now, err);
}

/* A step with a record is submitted again (replay, approval resume, orphan). */
static int resubmit(struct kernel *k, struct execution *e, struct step *s, enum idempotency idem,
                    int64_t now, json_t **out, struct err *err)
{
    switch (rules_resubmit(s->status, idem)) {
    case RESUBMIT_REPLAY_RESULT:
        *out = k_decision("replay", s->step_id);
        json_object_set_new(*out, "result", k_json(s->result));
        return 0;
    case RESUBMIT_REPLAY_ERROR:
        *out = k_decision("replay", s->step_id);
        json_object_set_new(*out, "error", k_json(s->error));
        return 0;
    case RESUBMIT_DENIED:
        *out = denied_decision(s);
        return 0;
    case RESUBMIT_BLOCKED:
        *out = k_decision("blocked", s->step_id);
        json_object_set_new(*out, "approval_id", json_string(s->approval_id));
        json_object_set_new(*out, "reason", json_string("awaiting_approval"));
        return 0;
    case RESUBMIT_PROCEED: {
        json_t *views = NULL;
        if (start_step_run(k, e, s, now, &views, err) < 0) return -1;
        *out = k_decision("proceed", s->step_id);
        json_object_set_new(*out, "rule_id", k_opt_str(s->rule_id));
        json_object_set_new(*out, "resources", views);
        return 0;
    }
    case RESUBMIT_INDETERMINATE: {
        s->status = STEP_FAILED;
        s->indeterminate = true;
        s->completed_at = now;
        json_t *error = json_pack("{s:s, s:s}", "reason", "indeterminate", "message",
                                  "outcome unknown: the worker stopped while this at_most_once step was running, "
                                  "so it may already have taken effect. Check the state before continuing.");
        free(s->error);
        s->error = k_text(error);
        int r = store_step_update(k->st, s);
        if (r < 0) {
            json_decref(error);
            return k_store_fail(err, r, "failing the step");
        }
        if (k_emit(k, e, "step.failed", json_pack("{s:s, s:s, s:s, s:O}", "step_id", s->step_id, "kind", s->kind,
                                                "target", s->target, "error", error), now, err) < 0) {
            json_decref(error);
            return -1;
        }
        *out = k_decision("replay", s->step_id);
        json_object_set_new(*out, "error", error);
        return 0;
    }
    case RESUBMIT_TERMINAL:
        *out = k_decision("execution_terminal", NULL);
        return 0;
    }
    return err_internal(err, "unhandled step status");
}

/* A new step: record the policy's decision. */
static int first_submit(struct kernel *k, struct execution *e, struct step *s, const json_t *args,
                        int64_t now, json_t **out, struct err *err)
{
    struct agent_conf *a = k_find_agent(k, e->agent);
    struct policy_result pr;
    struct k_gate gate;
    bool retry_refused = false;
    if (s->idem == IDEM_AT_MOST_ONCE) {
        int r = store_step_has_indeterminate(k->st, e->id, s->kind, s->target, s->args_hash, &retry_refused);
        if (r < 0) return k_store_fail(err, r, "checking earlier attempts");
    }
    if (retry_refused) {
        memset(&pr, 0, sizeof pr);
        pr.decision = POLICY_DENY;
        pr.rule_id = "__indeterminate_retry";
        pr.reason = "an earlier attempt of this at_most_once call has an unknown outcome; retry refused";
    } else {
        struct policy_input in = {s->kind, s->target, e->agent, args, e->forked_from[0] != '\0'};
        policy_eval(a ? a->policy : NULL, &in, &pr);
        int gr = k_policy_gates(k, e, s, args, &pr, &gate, now, out, err);
        if (gr != 0) return gr; /* rate_limited (nothing recorded), or an error */
        if (e->forked_from[0] && s->idem == IDEM_AT_MOST_ONCE && pr.decision == POLICY_ALLOW && !pr.fork_rule) {
            /* A fork reruns history; an effect that must not repeat needs a person, unless
             * a rule written for forks (when: {forked: true}) allows it. */
            memset(&pr, 0, sizeof pr);
            pr.decision = POLICY_REQUIRE_APPROVAL;
            pr.rule_id = "__fork_effect";
            pr.reason = "this at_most_once step would run live in a fork; approve it to let it run";
        }
    }
    s->rule_id = xstrdup(pr.rule_id);
    s->created_at = now;
    char *proposed = step_proposed_text(s);
    switch (pr.decision) {
    case POLICY_ALLOW:
        s->status = STEP_EXECUTING;
        s->runs = 1;
        break;
    case POLICY_DENY: {
        s->status = STEP_DENIED;
        s->completed_at = now;
        json_t *error = json_pack("{s:s, s:s}", "reason", pr.reason && *pr.reason ? pr.reason : "policy_denied",
                                  "rule_id", pr.rule_id);
        s->error = k_text(error);
        json_decref(error);
        break;
    }
    case POLICY_REQUIRE_APPROVAL:
        s->status = STEP_AWAITING_APPROVAL;
        uuid_v7(s->approval_id);
        break;
    case POLICY_JUDGE: /* resolved by k_policy_gates */
        free(proposed);
        return err_internal(err, "a judge decision was not resolved");
    }
    int r = store_step_insert(k->st, s);
    if (r < 0) {
        free(proposed);
        return k_store_fail(err, r, "recording the step");
    }
    if (k_emit_text(k, e, "step.proposed", proposed, now, err) < 0) return -1;
    const char *reason = pr.reason ? pr.reason : "";
    switch (pr.decision) {
    case POLICY_ALLOW: {
        json_t *views = NULL;
        if (k_emit_text(k, e, "step.allowed", step_allowed_text(s, pr.rule_id, reason), now, err) < 0 ||
            k_resources_touch(k, e, s, &views, err) < 0 ||
            k_emit_text(k, e, "step.executing", step_executing_text(s, e->attempt), now, err) < 0)
            return -1;
        *out = k_decision("proceed", s->step_id);
        json_object_set_new(*out, "rule_id", json_string(pr.rule_id));
        json_object_set_new(*out, "resources", views);
        return 0;
    }
    case POLICY_DENY:
        if (k_emit(k, e, "step.denied", json_pack("{s:s, s:s, s:s, s:s, s:o}", "step_id", s->step_id, "kind", s->kind,
                                                "target", s->target, "rule_id", pr.rule_id, "error",
                                                k_json(s->error)), now, err) < 0)
            return -1;
        *out = denied_decision(s);
        return 0;
    case POLICY_REQUIRE_APPROVAL: {
        struct approval ap;
        memset(&ap, 0, sizeof ap);
        memcpy(ap.id, s->approval_id, sizeof ap.id);
        memcpy(ap.exec_id, e->id, sizeof ap.exec_id);
        memcpy(ap.step_id, s->step_id, sizeof ap.step_id);
        ap.status = APPROVAL_PENDING;
        ap.rule_id = xstrdup(pr.rule_id);
        ap.reason = xstrdup(reason);
        ap.message = pr.approval_message ? xstrdup(pr.approval_message) : NULL;
        ap.approvers = pr.approvers ? k_text(pr.approvers) : NULL;
        ap.created_at = now;
        ap.timeout_at = now + (pr.approval_timeout_ms > 0 ? pr.approval_timeout_ms : k->cfg.approval_timeout_ms);
        r = store_approval_insert(k->st, &ap);
        int rc = -1;
        if (r < 0) {
            k_store_fail(err, r, "recording the approval");
            goto approval_out;
        }
        e->status = EXEC_BLOCKED;
        release_dispatch(e, DISPATCH_RELEASED);
        if (k_emit(k, e, "step.awaiting_approval", json_pack("{s:s, s:s, s:s, s:s, s:s}", "step_id", s->step_id,
                                                           "kind", s->kind, "target", s->target, "rule_id",
                                                           pr.rule_id, "reason", reason), now, err) < 0 ||
            k_emit(k, e, "approval.requested", json_pack("{s:s, s:s, s:s, s:s, s:o}", "approval_id", ap.id,
                                                       "step_id", s->step_id, "target", s->target, "reason",
                                                       reason, "timeout_at", k_time(ap.timeout_at)), now, err) < 0 ||
            k_emit(k, e, "execution.blocked", json_pack("{s:s, s:s, s:s}", "execution_id", e->id, "approval_id",
                                                      ap.id, "status", "blocked"), now, err) < 0)
            goto approval_out;
        *out = k_decision("blocked", s->step_id);
        json_object_set_new(*out, "approval_id", json_string(ap.id));
        json_object_set_new(*out, "reason", json_string(reason));
        json_object_set_new(*out, "rule_id", json_string(pr.rule_id));
        rc = 0;
    approval_out:
        approval_fini(&ap);
        return rc;
    }
    case POLICY_JUDGE:
        break;
    }
    return err_internal(err, "unhandled policy decision");
}

int kernel_submit_step(struct kernel *k, const struct caller *c, const char *id,
                       const struct dispatch_ref *d, const char *kind, const char *target,
                       const char *args_text, size_t args_len, const json_t *args,
                       const json_t *resources, enum idempotency idem, const char *request_id,
                       json_t **out, struct err *err)
{
    /* The args' hash first (no store), so the store may read the key's counter and steps
     * with the execution (store_prefetch_step); invalid args are still reported where they
     * were, after the execution's own checks. */
    struct buf canon;
    buf_init(&canon, MAX_ARGS_BYTES);
    struct err scratch = ERR_INIT;
    bool canon_ok = identity_canonical_json(args_text ? args_text : "{}", args_text ? args_len : 2, &canon,
                                            &scratch) == 0;
    char args_hash[STEP_ID_LEN];
    if (canon_ok) {
        identity_sha256_hex(canon.data, canon.len, args_hash);
        char first[STEP_ID_LEN]; /* most keys are submitted once: occurrence 0 */
        identity_step_id(id, kind, target, args_hash, 0, first);
        store_prefetch_step(k->st, id, kind, target, args_hash, first);
    }
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) {
        buf_fini(&canon);
        return -1;
    }
    struct exec_mark mark;
    k_mark(&e, &mark);
    int64_t now = clock_now_ms();
    int rc = -1;
    struct step s;
    memset(&s, 0, sizeof s);
    if (exec_status_terminal(e.status)) {
        *out = k_decision("execution_terminal", NULL);
        rc = 0;
        goto out;
    }
    if (k_check_lease(k, &e, d, now, err) < 0) goto out;
    if (resources && k_resources_validate(k, &e, resources, err) < 0) goto out;
    if (!canon_ok) {
        *err = scratch;
        goto out;
    }
    int64_t consumed;
    char last_request[72] = "";
    int r = store_counter_get(k->st, e.id, kind, target, args_hash, &consumed, last_request, sizeof last_request);
    if (r < 0 && r != -ENOENT) {
        k_store_fail(err, r, "reading step counters");
        goto out;
    }
    /* A resend of the last submission of this key (its reply was lost) is the same
     * occurrence, not a new one. */
    bool resend = r == 0 && request_id && strcmp(last_request, request_id) == 0;
    int64_t occurrence = r == -ENOENT ? 0 : resend ? consumed : consumed + 1;
    char step_id[STEP_ID_LEN];
    identity_step_id(e.id, kind, target, args_hash, occurrence, step_id);

    r = store_step_get(k->st, e.id, step_id, &s);
    if (r == 0 && resend && s.status == STEP_EXECUTING) {
        /* Still running from the lost reply's submission: the same go-ahead, no new run. */
        json_t *views;
        if (k_resources_views(k, &e, &s, &views, err) < 0) goto out;
        *out = k_decision("proceed", s.step_id);
        json_object_set_new(*out, "rule_id", k_opt_str(s.rule_id));
        json_object_set_new(*out, "resources", views);
    } else if (r == 0) {
        if (resubmit(k, &e, &s, idem, now, out, err) < 0) goto out;
    } else if (r != -ENOENT) {
        k_store_fail(err, r, "reading the step");
        goto out;
    } else if (e.status == EXEC_BLOCKED) {
        /* Nothing new may start while an approval is pending; nothing is recorded. */
        *out = k_decision("execution_blocked", NULL);
        rc = 0;
        goto out;
    } else {
        memcpy(s.step_id, step_id, sizeof s.step_id);
        memcpy(s.exec_id, e.id, sizeof s.exec_id);
        s.kind = xstrdup(kind);
        s.target = xstrdup(target);
        memcpy(s.args_hash, args_hash, sizeof s.args_hash);
        s.occurrence = occurrence;
        s.idem = idem;
        s.args = buf_steal(&canon, NULL);
        if (resources && json_array_size(resources) > 0 && strcmp(kind, "llm_call") != 0) s.resources = k_text(resources);
        int fr = first_submit(k, &e, &s, args, now, out, err);
        if (fr < 0) goto out;
        if (fr > 0) goto save; /* refused before anything was recorded: the occurrence stays free */
    }
    if ((r = store_counter_set(k->st, e.id, kind, target, args_hash, occurrence, request_id)) < 0) {
        k_store_fail(err, r, "advancing step counters");
        goto out;
    }
save:
    if (k_save_exec_changed(k, &e, &mark, now, err) < 0) goto out;
    rc = 0;
out:
    if (rc < 0 && *out) {
        json_decref(*out);
        *out = NULL;
    }
    buf_fini(&canon);
    step_fini(&s);
    execution_fini(&e);
    return rc;
}

int kernel_finish_step(struct kernel *k, const struct caller *c, const char *id,
                       const struct dispatch_ref *d, const char *step_id, bool ok,
                       const json_t *value, const json_t *captures, const json_t *failures,
                       json_t **out, struct err *err)
{
    store_prefetch_step(k->st, id, NULL, NULL, NULL, step_id); /* read with the execution */
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    struct exec_mark mark;
    k_mark(&e, &mark);
    int64_t now = clock_now_ms();
    int rc = -1;
    struct step s;
    memset(&s, 0, sizeof s);
    if (exec_status_terminal(e.status)) {
        *out = k_decision("execution_terminal", NULL);
        rc = 0;
        goto out;
    }
    if (k_check_lease(k, &e, d, now, err) < 0 || k_load_step(k, &e, step_id, &s, err) < 0) goto out;
    if (step_status_terminal(s.status)) {
        /* Already settled (a duplicate or a superseded report): the record wins. */
        *out = k_decision("replay", s.step_id);
        json_object_set_new(*out, s.status == STEP_SUCCEEDED ? "result" : "error",
                            k_json(s.status == STEP_SUCCEEDED ? s.result : s.error));
        rc = 0;
        goto out;
    }
    if (s.status != STEP_EXECUTING) {
        err_set(err, 409, "conflict", "step_id", "step %s is %s, not executing; submit it first", s.step_id,
                step_status_name(s.status));
        goto out;
    }
    s.status = ok ? STEP_SUCCEEDED : STEP_FAILED;
    s.completed_at = now;
    char *text = k_text(value ? value : json_null());
    if (ok) s.result = text;
    else s.error = text;
    int r = store_step_update(k->st, &s);
    if (r < 0) {
        k_store_fail(err, r, "recording the step outcome");
        goto out;
    }
    /* The payload embeds the outcome's text just written (jtext, as its dump would be). */
    struct jtext_obj p;
    jtext_obj_init(&p);
    jtext_obj_str(&p, "step_id", s.step_id);
    jtext_obj_str(&p, "kind", s.kind);
    jtext_obj_str(&p, "target", s.target);
    jtext_obj_raw(&p, ok ? "result" : "error", text);
    json_t *capture_out = NULL;
    if (k_emit_text(k, &e, ok ? "step.succeeded" : "step.failed", jtext_obj_end(&p), now, err) < 0 ||
        k_resources_settle(k, &e, &s, err) < 0 ||
        ((captures || failures) && k_record_captures(k, &e, captures, failures, &capture_out, now, err) < 0) ||
        k_save_exec_changed(k, &e, &mark, now, err) < 0)
        goto out;
    *out = k_decision("recorded", s.step_id);
    if (capture_out) json_object_set_new(*out, "captures", capture_out);
    rc = 0;
out:
    step_fini(&s);
    execution_fini(&e);
    return rc;
}

/* --- approvals --- */

static int approvals_one(struct approval *a, void *arg)
{
    void **x = arg;
    json_array_append_new(x[1], approval_json(x[0], a));
    return 0;
}

int kernel_approvals(struct kernel *k, const char *status, const char *exec_id, json_t **out,
                     struct err *err)
{
    json_t *arr = json_array();
    void *x[2] = {k, arr};
    int r = store_approvals_each(k->st, status, exec_id, 1000, approvals_one, x);
    if (r < 0) {
        json_decref(arr);
        return k_store_fail(err, r, "listing approvals");
    }
    *out = json_pack("{s:o}", "approvals", arr);
    return 0;
}

static int load_approval(struct kernel *k, const char *id, struct approval *a, struct err *err)
{
    int r = uuid_valid(id) ? store_approval_get(k->st, id, a) : -ENOENT;
    if (r == -ENOENT) return err_set(err, 404, "not_found", "id", "no approval with id \"%s\"", id);
    return r < 0 ? k_store_fail(err, r, "reading the approval") : 0;
}

int kernel_approval_get(struct kernel *k, const char *id, json_t **out, struct err *err)
{
    struct approval a;
    if (load_approval(k, id, &a, err) < 0) return -1;
    *out = approval_json(k, &a);
    approval_fini(&a);
    return 0;
}

static int approval_close(struct kernel *k, struct execution *e, struct approval *a,
                          enum approval_status to, const char *by, const char *rationale,
                          const char *step_reason, int64_t now, struct err *err)
{
    a->status = to;
    a->decided_at = now;
    k_set_str(&a->decided_by, by);
    k_set_str(&a->rationale, rationale);
    int r = store_approval_update(k->st, a);
    if (r < 0) return k_store_fail(err, r, "updating the approval");
    const char *type = to == APPROVAL_GRANTED ? "approval.granted"
                       : to == APPROVAL_DENIED ? "approval.denied"
                                               : "approval.expired";
    if (k_emit(k, e, type, json_pack("{s:s, s:s, s:o, s:o}", "approval_id", a->id, "step_id", a->step_id,
                                   "decided_by", k_opt_str(by), "rationale", k_opt_str(rationale)), now, err) < 0)
        return -1;
    struct step s;
    if (k_load_step(k, e, a->step_id, &s, err) < 0) return -1;
    int rc = -1;
    if (to == APPROVAL_GRANTED) {
        s.status = STEP_ALLOWED;
        if ((r = store_step_update(k->st, &s)) < 0) {
            k_store_fail(err, r, "updating the step");
            goto out;
        }
        if (k_emit(k, e, "step.allowed", json_pack("{s:s, s:s, s:s, s:o}", "step_id", s.step_id, "target", s.target,
                                                 "approval_id", a->id, "decided_by", k_opt_str(by)), now, err) < 0)
            goto out;
    } else {
        s.status = STEP_DENIED;
        s.completed_at = now;
        json_t *error = json_pack("{s:s, s:s}", "reason", step_reason, "rule_id", s.rule_id ? s.rule_id : "");
        free(s.error);
        s.error = k_text(error);
        if ((r = store_step_update(k->st, &s)) < 0) {
            json_decref(error);
            k_store_fail(err, r, "updating the step");
            goto out;
        }
        if (k_emit(k, e, "step.denied", json_pack("{s:s, s:s, s:s, s:o}", "step_id", s.step_id, "kind", s.kind,
                                                "target", s.target, "error", error), now, err) < 0)
            goto out;
    }
    rc = 0;
out:
    step_fini(&s);
    return rc;
}

/* Decide or expire an approval and resume its execution with a new dispatch. */
static int approval_resolve(struct kernel *k, struct approval *a, enum approval_status to,
                            const char *by, const char *rationale, int64_t now, struct err *err)
{
    struct execution e;
    int r = store_exec_get(k->st, a->exec_id, &e);
    if (r < 0) return k_store_fail(err, r, "reading the execution");
    int rc = -1;
    const char *step_reason = to == APPROVAL_EXPIRED ? "approval_timeout"
                              : rationale && *rationale ? rationale
                                                        : "approval_denied";
    if (approval_close(k, &e, a, to, by, rationale, step_reason, now, err) < 0) goto out;
    if (e.status == EXEC_BLOCKED) {
        e.status = EXEC_RUNNING;
        if (k_emit(k, &e, "execution.resumed", json_pack("{s:s, s:s, s:s}", "execution_id", e.id, "approval_id",
                                                       a->id, "status", "running"), now, err) < 0 ||
            k_queue_dispatch(k, &e, now, err) < 0)
            goto out;
    }
    rc = k_save_exec(k, &e, now, err);
out:
    execution_fini(&e);
    return rc;
}

int kernel_approval_decide(struct kernel *k, const char *id, bool approve, const char *by,
                           const char *reason, json_t **out, struct err *err)
{
    struct approval a;
    if (load_approval(k, id, &a, err) < 0) return -1;
    int rc = -1;
    if (a.status != APPROVAL_PENDING) {
        err_set(err, 409, "conflict", "", "approval %s is already %s", a.id, approval_status_name(a.status));
        goto out;
    }
    if (a.approvers) {
        json_t *list = k_json(a.approvers);
        bool listed = false;
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (json_is_string(v) && strcmp(json_string_value(v), by) == 0) listed = true;
        json_decref(list);
        if (!listed) {
            err_set(err, 403, "forbidden", "by", "\"%s\" is not among this approval's approvers %s", by, a.approvers);
            goto out;
        }
    }
    if (approval_resolve(k, &a, approve ? APPROVAL_GRANTED : APPROVAL_DENIED, by, reason, clock_now_ms(), err) < 0)
        goto out;
    *out = approval_json(k, &a);
    rc = 0;
out:
    approval_fini(&a);
    return rc;
}

/* --- timers --- */

/* End the current attempt (its lease expired, or its webhook delivery failed): queue the
 * execution again, or fail it with dispatch_exhausted after max_attempts. */
static int end_attempt(struct kernel *k, struct execution *e, int64_t now, struct err *err);

static int expire_lease(struct kernel *k, const char *id, int64_t now, struct err *err)
{
    struct execution e;
    int r = store_exec_get(k->st, id, &e);
    if (r < 0) return k_store_fail(err, r, "reading the execution");
    int rc = 0;
    if (e.dstate != DISPATCH_LEASED || e.lease_deadline > now) goto out;
    rc = -1;
    if (k_emit(k, &e, "dispatch.expired", json_pack("{s:s, s:I, s:s}", "dispatch_id", e.dispatch_id, "attempt",
                                                  (json_int_t)e.attempt, "worker_id", e.worker_id), now, err) < 0)
        goto out;
    rc = end_attempt(k, &e, now, err);
out:
    execution_fini(&e);
    return rc;
}

/* The webhook dispatcher's outcome for the attempt it delivered: NULL e when it is no
 * longer current (superseded, expired, finished). */
static int load_delivered(struct kernel *k, const char *exec_id, const struct dispatch_ref *d,
                          struct execution *e, struct err *err)
{
    int r = store_exec_get(k->st, exec_id, e);
    if (r == -ENOENT) return 0;
    if (r < 0) return k_store_fail(err, r, "reading the execution");
    if (e->dstate != DISPATCH_LEASED || rules_lease_check(e, d->id, d->attempt) != LEASE_OK) {
        execution_fini(e);
        return 0;
    }
    return 1;
}

int kernel_dispatch_acked(struct kernel *k, const char *exec_id, const struct dispatch_ref *d,
                          struct err *err)
{
    struct execution e;
    int r = load_delivered(k, exec_id, d, &e, err);
    if (r <= 0) return r;
    r = k_emit(k, &e, "dispatch.acked", json_pack("{s:s, s:I}", "dispatch_id", e.dispatch_id, "attempt",
                                                  (json_int_t)e.attempt), clock_now_ms(), err);
    execution_fini(&e);
    return r < 0 ? -1 : 0;
}

int kernel_dispatch_failed(struct kernel *k, const char *exec_id, const struct dispatch_ref *d,
                           const char *error, struct err *err)
{
    struct execution e;
    int r = load_delivered(k, exec_id, d, &e, err);
    if (r <= 0) return r;
    int64_t now = clock_now_ms();
    int rc = -1;
    if (k_emit(k, &e, "dispatch.failed", json_pack("{s:s, s:I, s:s}", "dispatch_id", e.dispatch_id, "attempt",
                                                 (json_int_t)e.attempt, "error", error), now, err) < 0)
        goto out;
    rc = end_attempt(k, &e, now, err);
out:
    execution_fini(&e);
    return rc;
}

static int end_attempt(struct kernel *k, struct execution *ep, int64_t now, struct err *err)
{
    struct execution e = *ep; /* the caller finis it */
    int rc = -1;
    if (e.attempt >= e.max_attempts) {
        if (k_finish_exec(k, &e, EXEC_FAILED, "dispatch_exhausted", now, err) < 0) goto out;
    } else {
        e.dstate = DISPATCH_QUEUED;
        e.queued_at = now;
        e.lease_deadline = 0;
        k_note_agent(k, e.agent);
        if (k_emit(k, &e, "dispatch.queued", json_pack("{s:s, s:I}", "dispatch_id", e.dispatch_id, "attempt",
                                                     (json_int_t)(e.attempt + 1)), now, err) < 0 ||
            k_save_exec(k, &e, now, err) < 0)
            goto out;
    }
    rc = 0;
out:
    *ep = e;
    return rc;
}

static int expire_deadline(struct kernel *k, const char *id, int64_t now, struct err *err)
{
    struct execution e;
    int r = store_exec_get(k->st, id, &e);
    if (r < 0) return k_store_fail(err, r, "reading the execution");
    int rc = 0;
    if (!exec_status_terminal(e.status) && e.deadline_at > 0 && e.deadline_at <= now)
        rc = k_finish_exec(k, &e, EXEC_CANCELLED, "deadline_exceeded", now, err);
    execution_fini(&e);
    return rc;
}

static int expire_approval(struct kernel *k, const char *id, int64_t now, struct err *err)
{
    struct approval a;
    int r = store_approval_get(k->st, id, &a);
    if (r < 0) return k_store_fail(err, r, "reading the approval");
    int rc = 0;
    if (a.status == APPROVAL_PENDING && a.timeout_at <= now)
        rc = approval_resolve(k, &a, APPROVAL_EXPIRED, NULL, "timeout", now, err);
    approval_fini(&a);
    return rc;
}

int kernel_sweep(struct kernel *k, int64_t now, struct err *err)
{
    char ids[SWEEP_BATCH][UUID_STR_LEN];
    int n, handled = 0, r;
    if ((r = store_exec_expired_leases(k->st, now, ids, SWEEP_BATCH, &n)) < 0) return k_store_fail(err, r, "finding expired leases");
    for (int i = 0; i < n; i++, handled++)
        if (expire_lease(k, ids[i], now, err) < 0) return -1;
    if ((r = store_exec_past_deadline(k->st, now, ids, SWEEP_BATCH, &n)) < 0) return k_store_fail(err, r, "finding deadlines");
    for (int i = 0; i < n; i++, handled++)
        if (expire_deadline(k, ids[i], now, err) < 0) return -1;
    if ((r = store_approvals_expired(k->st, now, ids, SWEEP_BATCH, &n)) < 0) return k_store_fail(err, r, "finding expired approvals");
    for (int i = 0; i < n; i++, handled++)
        if (expire_approval(k, ids[i], now, err) < 0) return -1;
    int64_t parked = k_parked_next(k);
    if (parked && parked <= now) {
        if ((r = k_unpark_due(k, now, err)) < 0) return -1;
        handled += r;
    }
    return handled;
}

int64_t kernel_next_due(struct kernel *k)
{
    int64_t due = store_next_timer(k->st), parked = k_parked_next(k);
    return parked && (!due || parked < due) ? parked : due;
}
