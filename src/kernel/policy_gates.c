/*
 * policy_gates.c - the parts of a policy decision that depend on what already
 * happened: upstream's rate_limit, budget and judge. They run once, when a step is
 * first submitted; what they decide is recorded with the step, so a replay returns it
 * without asking again.
 *
 * - rate_limit counts the steps this rule decided in the last window, from the store
 *   (per execution, per agent or over all), so replicas and restarts agree; the store
 *   serialises deciders of one limit across replicas, so the count is exact (a
 *   storage_conflict asks the API layer to run the submission again, first in a new
 *   batch: store_rule_steps_since). Over the
 *   limit the step is refused as rate_limited: a step.rate_limited event, no step row,
 *   the occurrence not used. With max_wait, the first time in an execution, it parks
 *   instead (k_park): blocked, and a fresh dispatch once the window allows the call.
 * - budget sums the tokens the execution's recorded llm_call results report (usage
 *   input/output or prompt/completion tokens); at or over max_tokens an allow becomes a
 *   deny (or require_approval) with reason execution_token_budget_exceeded. The step that
 *   crosses the line still runs, as upstream's.
 * - judge hands the call to a model. The kernel cannot wait for it inside an operation,
 *   so the first pass records nothing and fails with judge_pending; the API layer asks
 *   the model (kernel_take_judge_request), then runs the submission again with the
 *   verdict (kernel_set_judge_verdict), which this pass then uses.
 */
#include "kernel/kernel_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "policy/policy.h"

/* Tokens one recorded llm_call result reports (0 when it says nothing). */
static int64_t usage_tokens(const json_t *result)
{
    const json_t *u = json_object_get(result, "usage");
    json_t *parsed = NULL;
    if (!u) { /* {status, headers, body} as upstream's SDK records a response */
        const json_t *body = json_object_get(result, "body");
        if (json_is_string(body)) body = parsed = json_loads(json_string_value(body), 0, NULL);
        u = json_object_get(body, "usage");
    }
    int64_t n = 0;
    static const char *const keys[] = {"input_tokens", "output_tokens", "prompt_tokens", "completion_tokens"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const json_t *v = json_object_get(u, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) > 0) n += json_integer_value(v);
    }
    if (n == 0 && json_is_integer(json_object_get(u, "total_tokens")))
        n = json_integer_value(json_object_get(u, "total_tokens"));
    json_decref(parsed);
    return n;
}

/* The tokens of settled steps, by step id: a recorded result never changes, so each is
 * parsed once per process however often a budget rule looks (open addressing; emptied
 * when three quarters full). */
#define USAGE_SLOTS 8192
struct usage_slot {
    char step_id[STEP_ID_LEN];
    int64_t tokens;
};
static struct usage_slot *usage_cache;
static int usage_used;

static struct usage_slot *usage_slot(const char *step_id)
{
    if (!usage_cache) usage_cache = xcalloc(USAGE_SLOTS, sizeof *usage_cache);
    unsigned long h = 0; /* step ids are SHA-256 hex: any 8 of their characters spread well */
    for (int i = 0; i < 8 && step_id[i]; i++) h = h * 31 + (unsigned char)step_id[i];
    for (unsigned i = 0; i < USAGE_SLOTS; i++) {
        struct usage_slot *u = &usage_cache[(h + i) % USAGE_SLOTS];
        if (!u->step_id[0] || !strcmp(u->step_id, step_id)) return u;
    }
    return NULL;
}

static int sum_usage(struct step *s, void *arg)
{
    if (strcmp(s->kind, "llm_call") != 0 || !s->result) return 0;
    bool settled = s->status == STEP_SUCCEEDED || s->status == STEP_FAILED;
    struct usage_slot *u = settled ? usage_slot(s->step_id) : NULL;
    if (u && u->step_id[0]) {
        *(int64_t *)arg += u->tokens;
        return 0;
    }
    json_t *r = k_json(s->result);
    int64_t n = usage_tokens(r);
    json_decref(r);
    *(int64_t *)arg += n;
    if (u) {
        if (usage_used >= USAGE_SLOTS * 3 / 4) { /* full: start over */
            memset(usage_cache, 0, USAGE_SLOTS * sizeof *usage_cache);
            usage_used = 0;
            u = usage_slot(s->step_id);
        }
        snprintf(u->step_id, sizeof u->step_id, "%s", s->step_id);
        u->tokens = n;
        usage_used++;
    }
    return 0;
}

int k_exec_tokens(struct kernel *k, const char *exec_id, int64_t *out)
{
    *out = 0;
    return store_steps_each(k->st, exec_id, sum_usage, out);
}

int k_policy_gates(struct kernel *k, struct execution *e, struct step *s, const json_t *args,
                   struct policy_result *pr, struct k_gate *g, int64_t now, json_t **out, struct err *err)
{
    if (pr->rate_limit) {
        const struct policy_rate_limit *rl = pr->rate_limit;
        int64_t n = 0, oldest = 0;
        int r = store_rule_steps_since(k->st, pr->rule_id, rl->per == POLICY_PER_EXECUTION ? e->id : NULL,
                                       rl->per == POLICY_PER_AGENT ? e->agent : NULL, now - rl->window_ms,
                                       rl->max_calls, &n, &oldest);
        if (r == -EBUSY) /* another replica decides under this limit: again, first in a new batch */
            return err_set(err, 503, "storage_conflict", "", "another kernel replica is deciding a step under "
                           "rule %s; retry", pr->rule_id);
        const char *why = NULL;
        if (r < 0) why = rl->deny_on_error ? "rate_limiter_unavailable" : NULL;
        else if (n >= rl->max_calls) why = "rate_limit_exceeded";
        int64_t wait = oldest + rl->window_ms - now; /* until the oldest counted step leaves the window */
        if (wait < 1) wait = 1;
        if (why && r == 0 && rl->max_wait_ms && wait <= rl->max_wait_ms) {
            int parked = k_exec_parked_before(k, e->id);
            if (parked < 0) return k_store_fail(err, parked, "reading the execution's events");
            if (!parked) return k_park(k, e, s, pr->rule_id, wait, now, out, err);
        }
        if (why) {
            if (k_emit(k, e, "step.rate_limited",
                       json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "step_id", s->step_id, "kind", s->kind,
                                 "target", s->target, "rule_id", pr->rule_id, "error", "reason", why, "rule_id",
                                 pr->rule_id), now, err) < 0)
                return -1;
            *out = json_pack("{s:s, s:s, s:s}", "decision", "rate_limited", "reason", why, "rule_id", pr->rule_id);
            return 1;
        }
    }
    if (pr->decision == POLICY_JUDGE) {
        const struct policy_judge *j = pr->judge;
        if (!k->cfg.judge_configured) {
            pr->decision = POLICY_DENY;
            pr->reason = "judge not configured";
        } else if (k->verdict.set && !strcmp(k->verdict.step_id, s->step_id)) {
            pr->decision = k->verdict.decision;
            snprintf(g->reason, sizeof g->reason, "%s", k->verdict.reason);
            pr->reason = g->reason;
            k->verdict.set = false;
        } else {
            kernel_judge_request_fini(&k->judge_req);
            struct kernel_judge_request *q = &k->judge_req;
            q->pending = true;
            memcpy(q->exec_id, e->id, sizeof q->exec_id);
            memcpy(q->step_id, s->step_id, sizeof q->step_id);
            q->agent = xstrdup(e->agent);
            q->kind = xstrdup(s->kind);
            q->target = xstrdup(s->target);
            q->args = args ? json_deep_copy(args) : json_object();
            q->instructions = xstrdup(j->instructions ? j->instructions : "");
            q->threshold = j->threshold;
            q->fallback = j->fallback;
            return err_set(err, 202, "judge_pending", "", "the step waits for the judge's verdict");
        }
    }
    if (pr->decision == POLICY_ALLOW && pr->budget) {
        int64_t used = 0;
        if (k_exec_tokens(k, e->id, &used) < 0) return 0; /* the meter cannot be read: let it through */
        if (used >= pr->budget->max_tokens) {
            pr->decision = pr->budget->require_approval ? POLICY_REQUIRE_APPROVAL : POLICY_DENY;
            snprintf(g->reason, sizeof g->reason, "execution_token_budget_exceeded");
            pr->reason = g->reason;
        }
    }
    return 0;
}

/* Did a rate limit park this execution before? (It parks once; then it is refused.) */
static int parked_one(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    if (!strcmp(type, "step.rate_limited") && strstr(payload, "\"parked\":true")) *(bool *)arg = true;
    return 0;
}

int k_exec_parked_before(struct kernel *k, const char *exec_id)
{
    bool seen = false;
    int r = store_events_each(k->st, exec_id, 0, INT32_MAX, parked_one, &seen);
    return r < 0 ? r : seen;
}

/* Upstream's max_wait: the step parks. The agent is told blocked (reason rate_limited)
 * and ends its dispatch; the execution stays running with no dispatch until wait has
 * passed, when the sweep queues a fresh one (kernel_unpark). Nothing else is recorded. */
int k_park(struct kernel *k, struct execution *e, struct step *s, const char *rule_id, int64_t wait, int64_t now,
           json_t **out, struct err *err)
{
    int64_t until = now + wait;
    if (k_emit(k, e, "step.rate_limited",
               json_pack("{s:s, s:s, s:s, s:s, s:b, s:o, s:{s:s, s:s}}", "step_id", s->step_id, "kind", s->kind,
                         "target", s->target, "rule_id", rule_id, "parked", 1, "until", k_time(until), "error",
                         "reason", "rate_limit_exceeded", "rule_id", rule_id), now, err) < 0)
        return -1;
    e->dstate = DISPATCH_RELEASED;
    e->lease_deadline = until; /* the wake time while parked */
    if (!k->parked_next || until < k->parked_next) k->parked_next = until;
    *out = json_pack("{s:s, s:s, s:s}", "decision", "blocked", "reason", "rate_limited", "rule_id", rule_id);
    return 1;
}

int k_unpark_due(struct kernel *k, int64_t now, struct err *err)
{
    char ids[64][UUID_STR_LEN];
    int n = 0, r = store_exec_parked_due(k->st, now, ids, 64, &n);
    if (r < 0) return k_store_fail(err, r, "finding parked executions");
    for (int i = 0; i < n; i++) {
        struct execution e;
        if ((r = store_exec_get(k->st, ids[i], &e)) < 0) return k_store_fail(err, r, "reading the execution");
        int rc = 0;
        if (e.status == EXEC_RUNNING && e.dstate == DISPATCH_RELEASED && e.lease_deadline > 0 &&
            e.lease_deadline <= now) { /* still parked under the row lock (another replica may have woken it) */
            e.lease_deadline = 0;
            rc = k_queue_dispatch(k, &e, now, err) < 0 || k_save_exec(k, &e, now, err) < 0 ? -1 : 0;
        }
        execution_fini(&e);
        if (rc < 0) return -1;
    }
    k->parked_next = 0;
    k->parked_checked = 0; /* read the next wake time again */
    return n;
}

int64_t k_parked_next(struct kernel *k)
{
    int64_t mono = clock_mono_ms();
    if (!k->parked_checked || mono - k->parked_checked > 5000) { /* other replicas park too */
        int64_t at = 0;
        if (store_exec_parked_next(k->st, &at) == 0) {
            k->parked_next = at;
            k->parked_checked = mono;
        }
    }
    return k->parked_next;
}

void kernel_judge_request_fini(struct kernel_judge_request *q)
{
    free(q->agent);
    free(q->kind);
    free(q->target);
    json_decref(q->args);
    free(q->instructions);
    memset(q, 0, sizeof *q);
}

bool kernel_take_judge_request(struct kernel *k, struct kernel_judge_request *out)
{
    if (!k->judge_req.pending) return false;
    *out = k->judge_req;
    memset(&k->judge_req, 0, sizeof k->judge_req);
    return true;
}

void kernel_set_judge_verdict(struct kernel *k, const char *step_id, enum policy_decision d, const char *reason)
{
    k->verdict.set = true;
    snprintf(k->verdict.step_id, sizeof k->verdict.step_id, "%s", step_id);
    k->verdict.decision = d;
    snprintf(k->verdict.reason, sizeof k->verdict.reason, "%s", reason ? reason : "");
}
