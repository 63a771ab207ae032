/*
 * policy_cases.c - upstream's policy test cases: evaluate a list of would-be steps
 * against a policy and report each decision beside what the case expected.
 *
 * Shared by POST /v0/policies/{agent}/test (cases in the request, or rebuilt from an
 * execution's recorded steps) and `rebuno policy test FILE` (cases from the
 * .policytest.yaml beside the bundle). A case is upstream's
 * {name?, agent_id?, kind?, target, args?, expect?, expect_rule?}; the report is
 * upstream's {results: [case + {decision, rule_id, reason?, pass, failure?}], failed,
 * unexercised_rules?}, each result also naming the matched rule's place (rule:
 * {id, position, priority?}), which upstream leaves to the reader.
 */
#include "policy/policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static const char *const case_keys[] = {"name",   "agent_id", "kind",         "target",  "args",
                                        "expect", "expect_rule", "execution_id", "step_id", "was_rule"};

__attribute__((format(printf, 5, 6))) static int case_err(struct err *err, const char *prefix, size_t i,
                                                          const char *key, const char *fmt, ...)
{
    char field[sizeof err->field];
    snprintf(field, sizeof field, "%s[%zu]%s%s", prefix, i, key ? "." : "", key ? key : "");
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return err_set(err, 400, "validation_error", field, "%s: %s", field, what);
}

static bool known_key(const char *k)
{
    for (size_t i = 0; i < sizeof case_keys / sizeof *case_keys; i++)
        if (!strcmp(case_keys[i], k)) return true;
    return false;
}

static bool is_decision(const char *s)
{
    return !strcmp(s, "allow") || !strcmp(s, "deny") || !strcmp(s, "require_approval") || !strcmp(s, "judge");
}

static bool is_kind(const char *s)
{
    return !strcmp(s, "tool_call") || !strcmp(s, "llm_call") || !strcmp(s, "local");
}

/* A string member no longer than max (or absent). */
static int opt_str(const json_t *c, const char *key, size_t max, const char *prefix, size_t i, const char **out,
                   struct err *err)
{
    const json_t *v = json_object_get(c, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return case_err(err, prefix, i, key, "must be a string");
    if (json_string_length(v) > max || strlen(json_string_value(v)) != json_string_length(v))
        return case_err(err, prefix, i, key, "must be a string of at most %zu bytes without NULs", max);
    *out = json_string_value(v);
    return 0;
}

/* Check one case; on success *norm is it with upstream's defaults applied. */
static int check_case(const json_t *c, const char *default_agent, const char *prefix, size_t i, json_t **norm,
                      struct err *err)
{
    if (!json_is_object(c)) return case_err(err, prefix, i, NULL, "each case must be an object");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)c, k, v) if (!known_key(k))
        return case_err(err, prefix, i, k, "unknown key \"%s\"; a case takes name, agent_id, kind, target, args, "
                        "expect, expect_rule", k);
    const char *name, *agent, *kind, *target, *expect, *rule;
    if (opt_str(c, "name", 4096, prefix, i, &name, err) < 0 || opt_str(c, "agent_id", 4096, prefix, i, &agent, err) < 0 ||
        opt_str(c, "kind", 64, prefix, i, &kind, err) < 0 || opt_str(c, "target", 4096, prefix, i, &target, err) < 0 ||
        opt_str(c, "expect", 64, prefix, i, &expect, err) < 0 ||
        opt_str(c, "expect_rule", 4096, prefix, i, &rule, err) < 0)
        return -1;
    const char *s;
    if (opt_str(c, "execution_id", 64, prefix, i, &s, err) < 0 || opt_str(c, "step_id", 128, prefix, i, &s, err) < 0 ||
        opt_str(c, "was_rule", 4096, prefix, i, &s, err) < 0)
        return -1;
    if (!target || !*target) return case_err(err, prefix, i, "target", "required (the tool name or model)");
    if (kind && !is_kind(kind))
        return case_err(err, prefix, i, "kind", "\"%s\" is not a step kind; use tool_call, llm_call or local", kind);
    if (expect && *expect && !is_decision(expect))
        return case_err(err, prefix, i, "expect", "\"%s\" is not a decision; use allow, deny, require_approval or judge",
                        expect);
    const json_t *args = json_object_get(c, "args");
    if (args && !json_is_null(args) && !json_is_object(args))
        return case_err(err, prefix, i, "args", "must be an object of the step's arguments");
    *norm = json_deep_copy(c);
    if (!kind) json_object_set_new(*norm, "kind", json_string("tool_call"));
    if ((!agent || !*agent) && default_agent) json_object_set_new(*norm, "agent_id", json_string(default_agent));
    return 0;
}

json_t *policy_rules_json(const struct policy *p)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < policy_rule_count(p); i++) {
        struct policy_rule_info ri;
        policy_rule_info(p, i, &ri);
        json_t *r = json_pack("{s:s, s:I, s:s}", "id", ri.id, "position", (json_int_t)(i + 1), "decision",
                              policy_decision_name(ri.decision));
        if (ri.has_priority) json_object_set_new(r, "priority", json_integer(ri.priority));
        if (ri.rate_limit) {
            static const char *const per[] = {"execution", "agent", "global"};
            json_object_set_new(r, "rate_limit",
                                json_pack("{s:I, s:I, s:s, s:s}", "max_calls", (json_int_t)ri.rate_limit->max_calls,
                                          "window_seconds", (json_int_t)(ri.rate_limit->window_ms / 1000),
                                          "per_what", per[ri.rate_limit->per], "on_limiter_error",
                                          ri.rate_limit->deny_on_error ? "deny" : "allow"));
            if (ri.rate_limit->max_wait_ms)
                json_object_set_new(json_object_get(r, "rate_limit"), "max_wait_seconds",
                                    json_integer(ri.rate_limit->max_wait_ms / 1000));
        }
        if (ri.budget)
            json_object_set_new(r, "budget", json_pack("{s:I, s:s}", "max_tokens", (json_int_t)ri.budget->max_tokens,
                                                       "on_exceed", ri.budget->require_approval ? "require_approval"
                                                                                                : "deny"));
        if (ri.judge)
            json_object_set_new(r, "judge", json_pack("{s:s, s:f, s:s}", "instructions", ri.judge->instructions,
                                                      "threshold", ri.judge->threshold, "fallback",
                                                      policy_decision_name(ri.judge->fallback)));
        json_array_append_new(arr, r);
    }
    return arr;
}

json_t *policy_run_cases(const struct policy *p, const json_t *cases, const char *default_agent, const char *prefix,
                         struct err *err)
{
    if (!json_is_array(cases)) {
        err_set(err, 400, "validation_error", prefix, "%s: must be a list of cases", prefix);
        return NULL;
    }
    if (json_array_size(cases) > POLICY_MAX_CASES) {
        err_set(err, 400, "validation_error", prefix, "%s: at most %d cases per run", prefix, POLICY_MAX_CASES);
        return NULL;
    }
    size_t n_rules = policy_rule_count(p);
    bool *hit = xcalloc(n_rules + 1, sizeof *hit);
    json_t *results = json_array();
    int failed = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *r = NULL;
        if (check_case(c, default_agent, prefix, i, &r, err) < 0) {
            json_decref(results);
            free(hit);
            return NULL;
        }
        const json_t *args = json_object_get(r, "args");
        struct policy_input in = {json_string_value(json_object_get(r, "kind")),
                                  json_string_value(json_object_get(r, "target")),
                                  json_string_value(json_object_get(r, "agent_id")),
                                  json_is_object(args) ? args : NULL, false};
        struct policy_result pr;
        policy_eval(p, &in, &pr);
        const char *decision = policy_decision_name(pr.decision);
        hit[pr.rule_pos] = true;
        json_object_set_new(r, "decision", json_string(decision));
        json_object_set_new(r, "rule_id", json_string(pr.rule_id));
        if (pr.reason && *pr.reason) json_object_set_new(r, "reason", json_string(pr.reason));
        if (pr.rule_pos) {
            struct policy_rule_info ri;
            policy_rule_info(p, pr.rule_pos - 1, &ri);
            json_t *rule = json_pack("{s:s, s:I}", "id", ri.id, "position", (json_int_t)pr.rule_pos);
            if (ri.has_priority) json_object_set_new(rule, "priority", json_integer(ri.priority));
            json_object_set_new(r, "rule", rule);
        }
        const char *expect = json_string_value(json_object_get(r, "expect"));
        const char *want_rule = json_string_value(json_object_get(r, "expect_rule"));
        char failure[512] = "";
        if (expect && *expect && strcmp(expect, decision) != 0)
            snprintf(failure, sizeof failure, "%s, want %s", decision, expect);
        else if (want_rule && *want_rule && strcmp(want_rule, pr.rule_id) != 0)
            snprintf(failure, sizeof failure, "rule %s, want %s", pr.rule_id, want_rule);
        json_object_set_new(r, "pass", json_boolean(!failure[0]));
        if (failure[0]) {
            json_object_set_new(r, "failure", json_string(failure));
            failed++;
        }
        json_array_append_new(results, r);
    }
    json_t *report = json_pack("{s:o, s:i}", "results", results, "failed", failed);
    json_t *unexercised = json_array();
    for (size_t j = 0; j < n_rules; j++)
        if (!hit[j + 1]) {
            struct policy_rule_info ri;
            policy_rule_info(p, j, &ri);
            json_array_append_new(unexercised, json_string(ri.id));
        }
    if (json_array_size(unexercised)) json_object_set_new(report, "unexercised_rules", unexercised);
    else json_decref(unexercised);
    free(hit);
    return report;
}
