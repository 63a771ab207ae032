/*
 * policy.h - the step policy: load a YAML policy once, evaluate every step.
 *
 * Every tool/LLM/local call an agent makes is a step; before it runs the kernel
 * asks policy_eval() whether it may (allow), may not (deny) or needs a human
 * (require_approval). Loading is strict: unknown keys, wrong types, bad values,
 * duplicate ids, invalid regexes and YAML syntax errors are all rejected with a
 * "file:line:col: what is wrong; how to fix it" message, so a typo can never
 * silently widen or narrow what an agent may do. Evaluation is pure (no I/O, no
 * locks, no allocation in the common case) and the compiled policy is immutable,
 * so one policy may be evaluated from many threads at once.
 *
 * Language (rules are tried in document order; the first match wins):
 *
 *   default_action: deny              # allow | deny; default deny
 *   rules:
 *     - id: allow-llm                 # required, unique, [A-Za-z0-9_.:-]{1,128}
 *       when:                         # all present conditions AND-ed
 *         step_kind: llm_call         # or step_kinds: [tool_call, local]
 *         target: "shell*"            # fnmatch glob ('*' crosses '/'); targets: [...]
 *         agent: coder                # exact; agents: [...]
 *         forked: true                # only in forks (false: only outside forks)
 *         arguments:
 *           command: {regex: "^ls( |$)"}   # equals not_equals contains prefix
 *                                          # one_of regex glob (all must pass)
 *       then:
 *         decision: require_approval  # allow | deny | require_approval | judge
 *         reason: "..."
 *         approval: {timeout: 15m, approvers: [alice], message: "..."}   # or approval_config
 *         rate_limit: {max_calls: 5, window: 1m, per_what: execution, max_wait: 5m,
 *                      on_limiter_error: allow}
 *         budget: {max_tokens: 200000, on_exceed: deny}     # allow rules only
 *         judge: {instructions: "...", threshold: 0.6, fallback: require_approval}
 *
 * Built-in outcomes: no rule matched -> rule_id "default" (default_action); an
 * unmatched "local" step -> allow, rule_id "local"; NULL policy -> allow,
 * rule_id "permissive".
 */
#ifndef REBUNO_POLICY_POLICY_H
#define REBUNO_POLICY_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct policy;

/* POLICY_JUDGE: the rule hands the call to a model (its judge: settings), which picks one
 * of the other three; the kernel asks it (policy_eval never does). */
enum policy_decision { POLICY_ALLOW, POLICY_DENY, POLICY_REQUIRE_APPROVAL, POLICY_JUDGE };

/* Upstream's rate_limit: at most max_calls steps decided by this rule per window, counted
 * per execution, per agent or over everything. */
enum policy_scope { POLICY_PER_EXECUTION, POLICY_PER_AGENT, POLICY_PER_GLOBAL };
struct policy_rate_limit {
    int64_t max_calls, window_ms;
    int64_t max_wait_ms; /* park the step (once per execution) for up to this long; 0: refuse */
    enum policy_scope per;
    bool deny_on_error; /* on_limiter_error: deny (default allow: fail open) */
};
/* Upstream's budget (allow rules only): the LLM tokens the execution may have spent. */
struct policy_budget {
    int64_t max_tokens;
    bool require_approval; /* on_exceed: require_approval (default deny) */
};
/* Upstream's judge (decision: judge). */
struct policy_judge {
    const char *instructions; /* "" when none */
    double threshold;         /* 0.6 */
    enum policy_decision fallback; /* require_approval */
};

/* Hard limits on what a policy may be. */
#define POLICY_MAX_BYTES (1024 * 1024)
#define POLICY_MAX_RULES 10000

/*
 * Load and compile a policy. NULL on error with err = 400 "policy_invalid", the
 * message "<file>:<line>:<col>: <what is wrong>; <the fix>" and err->field the
 * path of the offending element (e.g. "rules[2].when.targets").
 */
struct policy *policy_load_file(const char *path, struct err *err);
/*
 * Same from memory. `filename` names the source in messages (NULL = "<inline>");
 * `line_offset` is added to every reported line so a policy embedded in another
 * YAML file reports lines of that file (pass the number of lines before it).
 */
struct policy *policy_load_string(const char *yaml, size_t len, const char *filename,
                                  int line_offset, struct err *err);
void policy_free(struct policy *p);

size_t policy_rule_count(const struct policy *p);
/* The YAML text the policy was compiled from (borrowed; what was passed to load). */
const char *policy_source(const struct policy *p);

/* One rule as the evaluator orders it (i from 0, < policy_rule_count). Borrowed. */
struct policy_rule_info {
    const char *id;
    enum policy_decision decision;
    bool has_priority; /* upstream's priority: was given */
    int64_t priority;
    const struct policy_rate_limit *rate_limit; /* NULL when none */
    const struct policy_budget *budget;
    const struct policy_judge *judge; /* decision judge */
};
void policy_rule_info(const struct policy *p, size_t i, struct policy_rule_info *out);
/* POLICY_ALLOW or POLICY_DENY: what happens when no rule matches. */
enum policy_decision policy_default_action(const struct policy *p);

struct policy_input {
    const char *kind;   /* "tool_call" | "llm_call" | "local" */
    const char *target; /* tool name / model; NULL is treated as "" */
    const char *agent;  /* agent id; NULL matches no agent condition */
    const json_t *args; /* step arguments; may be NULL */
    bool forked;        /* the step belongs to a fork of another execution */
};

struct policy_result {
    enum policy_decision decision;
    const char *rule_id;          /* borrowed from policy (or static) */
    const char *reason;           /* borrowed; never NULL ("" allowed) */
    int64_t approval_timeout_ms;  /* 0 = use the kernel default */
    const json_t *approvers;      /* borrowed JSON array or NULL */
    const char *approval_message; /* borrowed or NULL */
    bool fork_rule;               /* the matched rule names forks (when: {forked: true}) */
    size_t rule_pos;              /* 1-based place of the matched rule in evaluation order;
                                   * 0 = a built-in outcome (default, local, permissive) */
    const struct policy_rate_limit *rate_limit; /* the matched rule's, or NULL */
    const struct policy_budget *budget;         /* the same */
    const struct policy_judge *judge;           /* set when decision is POLICY_JUDGE */
};

/* Decide one step. `p` may be NULL (no policy configured: allow everything). */
void policy_eval(const struct policy *p, const struct policy_input *in, struct policy_result *out);

/*
 * Upstream's policy test cases (policy_cases.c). `cases` is a JSON array of
 * {name?, agent_id?, kind? (tool_call), target, args?, expect?, expect_rule?} (also
 * execution_id/step_id/was_rule, carried through); each is evaluated against p (NULL =
 * no policy: permissive) with agent_id defaulting to default_agent. Returns the report
 * {results: [case + {decision, rule_id, reason?, rule?: {id, position, priority?}, pass,
 * failure?}], failed, unexercised_rules?}, or NULL with a 400 whose field names the bad
 * member ("<prefix>[i].target").
 */
#define POLICY_MAX_CASES 10000
json_t *policy_run_cases(const struct policy *p, const json_t *cases, const char *default_agent,
                         const char *prefix, struct err *err);
/* A YAML file of plain data (a .policytest.yaml) as JSON: plain scalars typed as YAML
 * 1.2's core schema (null, bool, int, float), quoted ones strings; anchors, aliases,
 * tags and duplicate keys refused. NULL with "file:line:col: ..." in err. */
json_t *policy_yaml_file_json(const char *path, struct err *err);
/* [{id, position, decision, priority?}] of p's rules in evaluation order. */
json_t *policy_rules_json(const struct policy *p);

/* "allow" "deny" "require_approval" "judge" */
const char *policy_decision_name(enum policy_decision d);

/*
 * Parse a duration: bare integer seconds ("900") or Go-like unit groups
 * ("90s" "15m" "1h30m" "2h" "30d" "1500ms"; units d h m s ms, integers only).
 * 0 with *ms set, or -EINVAL (empty, negative, unknown unit, overflow).
 */
int policy_parse_duration(const char *s, int64_t *ms);

#endif
