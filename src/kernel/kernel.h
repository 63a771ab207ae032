/*
 * kernel.h - durable executions: the operations of the kernel API.
 *
 * Every operation runs inside a store operation (savepoint) opened by the caller
 * (the API layer's group-commit batch) and writes its events and the projections
 * they change (execution, step, approval rows) together, so they commit or vanish
 * as one. Operations return 0 with a new JSON reply in *out, or -1 with err.
 *
 * Side effects that must wait for the commit (waking long-polling workers, pushing
 * events to watchers) are recorded as notes, which the caller takes after commit
 * with kernel_take_notes().
 */
#ifndef REBUNO_KERNEL_KERNEL_H
#define REBUNO_KERNEL_KERNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "kernel/model.h"
#include "policy/policy.h"
#include "store/store.h"

struct policy;

struct kernel_config {
    int64_t lease_ms;            /* default lease (agents may override); 120000 */
    int64_t max_attempts;        /* default dispatch attempts before dispatch_exhausted; 5 */
    int64_t approval_timeout_ms; /* default approval timeout; 900000 */
    bool open_agents;            /* accept agents that are not configured (dev mode) */
    bool judge_configured;       /* a judge model is set up: judge rules ask it (else they deny) */
};

struct kernel;

/* Who is calling: NULL agent = not restricted (admin/client/dev). */
struct caller {
    const char *agent;
};

/* The dispatch an agent call claims to act under (from Rebuno-Dispatch-* headers). */
struct dispatch_ref {
    const char *id;
    int64_t attempt;
};

/* Post-commit notifications. */
struct kernel_notes {
    char (*execs)[UUID_STR_LEN]; /* executions that got new events */
    int n_execs, cap_execs;
    char **agents;               /* agents that got queued work */
    int n_agents, cap_agents;
};
void kernel_notes_fini(struct kernel_notes *n);

struct kernel *kernel_new(struct store *st, const struct kernel_config *cfg);
void kernel_free(struct kernel *k);
struct store *kernel_store(struct kernel *k);

/* Configure an agent (takes ownership of policy, which may be NULL = allow all).
 * lease_ms / max_attempts 0 = defaults. */
void kernel_add_agent(struct kernel *k, const char *name, struct policy *policy, int64_t lease_ms,
                      int64_t max_attempts);
bool kernel_agent_known(struct kernel *k, const char *name);
/* Upstream's agent endpoint: the webhook the kernel POSTs dispatches to (NULL: the agent
 * pulls them) and the secret of its HMAC signatures (NULL: none). Copies both. */
void kernel_agent_set_endpoint(struct kernel *k, const char *name, const char *webhook_url,
                               const char *secret);
/* Upstream's POST /v0/agents: add (or update) an agent at run time with its lease (0:
 * keep/default) and endpoint; its name is recorded in the store. Its policy is kept. */
int kernel_agent_register(struct kernel *k, const char *name, int64_t lease_ms, const char *webhook_url,
                          const char *secret, struct err *err);
/* Upstream's DELETE /v0/agents/{id}: forget the agent (its settings, policy and workers;
 * its finished executions stay readable). 404 unknown, 409 while it has pending, running
 * or blocked executions. */
int kernel_agent_delete(struct kernel *k, const char *name, struct err *err);
/* Another replica changed this agent (store_watch kind 'c'): read its settings again, or
 * forget it when it was deleted there. */
int kernel_agent_reload(struct kernel *k, const char *name);
/* Replace an agent's policy at run time (takes ownership; NULL = allow all). -1 with a
 * 404 when the agent is unknown. Saved in the store (inside the caller's operation). */
int kernel_agent_set_policy(struct kernel *k, const char *name, struct policy *policy, struct err *err);
/* The agent's settings, borrowed (valid until the agent changes): false when unknown. */
struct kernel_agent_info {
    const char *webhook_url, *secret;
    const struct policy *policy; /* NULL: none (every step allowed, rule "permissive") */
    int64_t lease_ms, max_attempts;
};
bool kernel_agent_info(struct kernel *k, const char *name, struct kernel_agent_info *out);
/* Upstream's judge rules (policy_gates.c). A submission whose rule says judge fails with
 * a 202 "judge_pending" and nothing recorded; the caller takes the request, asks the
 * model, sets the verdict and submits again, which then records the verdict's decision. */
struct kernel_judge_request {
    bool pending;
    char exec_id[UUID_STR_LEN], step_id[STEP_ID_LEN];
    char *agent, *kind, *target, *instructions;
    json_t *args;
    double threshold;
    enum policy_decision fallback;
};
bool kernel_take_judge_request(struct kernel *k, struct kernel_judge_request *out);
void kernel_judge_request_fini(struct kernel_judge_request *q);
void kernel_set_judge_verdict(struct kernel *k, const char *step_id, enum policy_decision d, const char *reason);
/* Upstream's policy replay (policy_replay.c): *cases = the recorded steps of exec_id (an
 * execution of agent) as policy test cases expecting their first decision. */
int kernel_policy_replay_cases(struct kernel *k, const char *agent, const char *exec_id, json_t **cases,
                               struct err *err);
/* The same over the agent's latest `limit` executions (of session, if given) created at or
 * after since_ms, oldest first. */
int kernel_policy_replay_range(struct kernel *k, const char *agent, const char *session, int64_t since_ms,
                               int limit, json_t **cases, struct err *err);
/* Names of the agents with a webhook, one per call (i from 0; NULL past the end). */
const char *kernel_webhook_agent(struct kernel *k, int i);
/* Move the notes accumulated since the last call into *out (which it initialises). */
void kernel_take_notes(struct kernel *k, struct kernel_notes *out);

/* executions */
/* session NULL = none; a session with an active execution makes this one wait. */
/* parent NULL = none; else upstream's parent_execution_id: a completed execution of the
 * same agent whose turn this continues (its state, its resources), session then new. */
int kernel_create(struct kernel *k, const struct caller *c, const char *agent, const json_t *input,
                  const char *session, const char *parent, int64_t deadline_ms, json_t **out,
                  struct err *err);
int kernel_get(struct kernel *k, const struct caller *c, const char *id, json_t **out,
               struct err *err);
struct exec_filter;
/* Newest first, a page of limit after cursor (NULL: the newest); f as store_exec_query's. */
int kernel_list(struct kernel *k, const struct caller *c, const struct exec_filter *f, const char *cursor,
                int limit, json_t **out, struct err *err);
/* {"counts": {status: n, ...every status}, "total": n} of the executions f matches
 * (f->status ignored). */
int kernel_exec_counts(struct kernel *k, const struct caller *c, const struct exec_filter *f, json_t **out,
                       struct err *err);
/* {"forks": [...]}: the executions forked from id, newest first, at most limit. */
int kernel_forks(struct kernel *k, const struct caller *c, const char *id, int limit, json_t **out,
                 struct err *err);
int kernel_cancel(struct kernel *k, const struct caller *c, const char *id, const char *reason,
                  json_t **out, struct err *err);
/* Events with seq > after, at most limit. Sets *terminal when the execution is over. */
int kernel_events(struct kernel *k, const struct caller *c, const char *id, int64_t after,
                  int limit, json_t **out, struct err *err);
int kernel_steps(struct kernel *k, const struct caller *c, const char *id, json_t **out,
                 struct err *err);
int kernel_step_get(struct kernel *k, const struct caller *c, const char *id, const char *step_id,
                    json_t **out, struct err *err);

/* workers and dispatch */
int kernel_register_worker(struct kernel *k, const struct caller *c, const char *agent,
                           const char *name, json_t **out, struct err *err);
/* *out = NULL when nothing is queued for the agent. */
int kernel_claim(struct kernel *k, const struct caller *c, const char *agent,
                 const char *worker_id, json_t **out, struct err *err);
int kernel_heartbeat(struct kernel *k, const struct caller *c, const char *id,
                     const struct dispatch_ref *d, json_t **out, struct err *err);
int kernel_complete(struct kernel *k, const struct caller *c, const char *id,
                    const struct dispatch_ref *d, const json_t *output, const json_t *state,
                    json_t **out, struct err *err);
int kernel_fail(struct kernel *k, const struct caller *c, const char *id,
                const struct dispatch_ref *d, const char *error, json_t **out, struct err *err);
int kernel_agents(struct kernel *k, json_t **out, struct err *err);
/* The webhook dispatcher's outcomes for a dispatch it delivered under (exec_id, d):
 * acked records dispatch.acked; failed records dispatch.failed {error} and ends the
 * attempt as an expired lease would (queued again, or dispatch_exhausted after
 * max_attempts). Both do nothing when the attempt is no longer current. */
int kernel_dispatch_acked(struct kernel *k, const char *exec_id, const struct dispatch_ref *d,
                          struct err *err);
int kernel_dispatch_failed(struct kernel *k, const char *exec_id, const struct dispatch_ref *d,
                           const char *error, struct err *err);

/* steps. args_text is the raw JSON text of "args" (NULL = {}); args its parsed value;
 * resources the keys (JSON array of strings) of resources the step may change, or NULL;
 * request_id (or NULL) identifies this submission so a resend after a lost reply maps to
 * the same step instead of a new occurrence. */
int kernel_submit_step(struct kernel *k, const struct caller *c, const char *id,
                       const struct dispatch_ref *d, const char *kind, const char *target,
                       const char *args_text, size_t args_len, const json_t *args,
                       const json_t *resources, enum idempotency idem, const char *request_id,
                       json_t **out, struct err *err);
/* captures / failures as for kernel_checkpoints, recorded after the outcome (may be NULL). */
int kernel_finish_step(struct kernel *k, const struct caller *c, const char *id,
                       const struct dispatch_ref *d, const char *step_id, bool ok,
                       const json_t *value, const json_t *captures, const json_t *failures,
                       json_t **out, struct err *err);

/* approvals */
int kernel_approvals(struct kernel *k, const char *status, const char *exec_id, json_t **out,
                     struct err *err);
int kernel_approval_get(struct kernel *k, const char *id, json_t **out, struct err *err);
int kernel_approval_decide(struct kernel *k, const char *id, bool approve, const char *by,
                           const char *reason, json_t **out, struct err *err);

/* sessions */
int kernel_previous(struct kernel *k, const struct caller *c, const char *id, json_t **out,
                    struct err *err);

/* resources and checkpoints */
/* Resource keys: 1..128 of [A-Za-z0-9_.-]. */
bool kernel_resource_key_valid(const char *key);
struct resource_spec {
    const char *key, *driver_id;
    const json_t *configuration; /* may be NULL */
    bool coverage_reuse, on_completion;
    int64_t every_steps;
};
int kernel_resource_register(struct kernel *k, const struct caller *c, const char *id,
                             const struct dispatch_ref *d, const struct resource_spec *spec,
                             json_t **out, struct err *err);
int kernel_resource_bind(struct kernel *k, const struct caller *c, const char *id,
                         const struct dispatch_ref *d, const char *key, const json_t *binding,
                         struct err *err);
int kernel_resources(struct kernel *k, const struct caller *c, const char *id, json_t **out,
                     struct err *err);
/* captures: [{key, generation, checkpoint_ref}], failures: [{key, generation, error}] (validated). */
int kernel_checkpoints(struct kernel *k, const struct caller *c, const char *id,
                       const struct dispatch_ref *d, const json_t *captures, const json_t *failures,
                       json_t **out, struct err *err);

/* forks */
int kernel_fork(struct kernel *k, const struct caller *c, const char *src_id, int64_t at_seq,
                const char *session, json_t **out, struct err *err);
int kernel_fork_points(struct kernel *k, const struct caller *c, const char *id, int64_t after,
                       int limit, json_t **out, struct err *err);

/* Expire leases, deadlines and approvals due at `now`. Returns the number handled. */
int kernel_sweep(struct kernel *k, int64_t now, struct err *err);
/* When the next sweep is due (ms since epoch), 0 when nothing is pending. */
int64_t kernel_next_due(struct kernel *k);

/* Is the execution terminal? (for SSE: close after the terminal event). -1 when unknown. */
int kernel_exec_terminal(struct kernel *k, const char *id);

#endif
