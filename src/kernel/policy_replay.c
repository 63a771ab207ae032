/*
 * policy_replay.c - the cases of upstream's policy replay: an execution's recorded
 * steps, each expecting the decision the policy made when it was first submitted, so
 * POST /v0/policies/{agent}/test {execution_id} (or {executions: {session?, since?,
 * limit?}}, the agent's latest executions) shows which steps a changed bundle would now
 * decide differently.
 *
 * The first decision is read off the step row: a step that went to approval (it has
 * an approval, whatever the person then decided) was require_approval; a denied step
 * without one was deny; every other recorded step was allowed. Decisions the kernel
 * made itself rather than the policy (__indeterminate_retry, __fork_effect) expect
 * nothing.
 */
#include "kernel/kernel_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

struct replay_ctx {
    const char *agent;
    json_t *cases;
};

static int replay_one(struct step *s, void *arg)
{
    struct replay_ctx *x = arg;
    const char *rule = s->rule_id ? s->rule_id : "";
    json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:s}", "execution_id", s->exec_id, "step_id", s->step_id, "agent_id",
                          x->agent, "kind", s->kind, "target", s->target);
    json_t *args = k_json(s->args);
    if (json_is_object(args)) json_object_set_new(c, "args", args);
    else json_decref(args);
    if (strncmp(rule, "__", 2) != 0) {
        const char *expect = s->approval_id[0] ? "require_approval" : s->status == STEP_DENIED ? "deny" : "allow";
        json_object_set_new(c, "expect", json_string(expect));
        if (*rule) json_object_set_new(c, "was_rule", json_string(rule));
    }
    json_array_append_new(x->cases, c);
    return 0;
}

struct range_ctx {
    int64_t since;
    char (*ids)[UUID_STR_LEN];
    int n, max;
};

static int range_one(struct execution *e, void *arg)
{
    struct range_ctx *x = arg;
    if (e->created_at >= x->since && x->n < x->max) memcpy(x->ids[x->n++], e->id, UUID_STR_LEN);
    return 0;
}

int kernel_policy_replay_range(struct kernel *k, const char *agent, const char *session, int64_t since_ms,
                               int limit, json_t **cases, struct err *err)
{
    struct range_ctx x = {since_ms, xcalloc((size_t)limit, UUID_STR_LEN), 0, limit};
    int r = store_exec_list(k->st, agent, NULL, session, NULL, limit, range_one, &x);
    if (r < 0) {
        free(x.ids);
        return k_store_fail(err, r, "listing the agent's executions");
    }
    struct replay_ctx c = {agent, json_array()};
    for (int i = x.n; i-- > 0 && r >= 0;) /* oldest first */
        r = store_steps_each(k->st, x.ids[i], replay_one, &c);
    free(x.ids);
    if (r < 0) {
        json_decref(c.cases);
        return k_store_fail(err, r, "reading the executions' steps");
    }
    *cases = c.cases;
    return 0;
}

int kernel_policy_replay_cases(struct kernel *k, const char *agent, const char *exec_id, json_t **cases,
                               struct err *err)
{
    struct execution e;
    if (k_load_exec(k, NULL, exec_id, &e, err) < 0) {
        snprintf(err->field, sizeof err->field, "execution_id");
        return -1;
    }
    if (strcmp(e.agent, agent) != 0) {
        err_invalid(err, "execution_id", "execution_id: %s is an execution of agent %s, not %s", exec_id, e.agent,
                    agent);
        execution_fini(&e);
        return -1;
    }
    struct replay_ctx x = {agent, json_array()};
    int r = store_steps_each(k->st, e.id, replay_one, &x);
    execution_fini(&e);
    if (r < 0) {
        json_decref(x.cases);
        return k_store_fail(err, r, "reading the execution's steps");
    }
    *cases = x.cases;
    return 0;
}
