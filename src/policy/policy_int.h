/*
 * policy_int.h - the compiled form of a policy, shared by the loader (which
 * builds it) and the evaluator (which only reads it). Not for use outside
 * src/policy/.
 *
 * Everything evaluation needs is precomputed at load: step kinds become a bit
 * mask, globs know whether they are plain literals, regexes are compiled, and
 * approvers are a ready-made JSON array handed out by reference.
 */
#ifndef REBUNO_POLICY_POLICY_INT_H
#define REBUNO_POLICY_POLICY_INT_H

#include <regex.h>
#include <stdbool.h>

#include "policy/policy.h"

/* Step kinds as bits so step_kind/step_kinds conditions are one AND. */
enum {
    POLICY_KIND_TOOL_CALL = 1u << 0,
    POLICY_KIND_LLM_CALL = 1u << 1,
    POLICY_KIND_LOCAL = 1u << 2,
};

struct policy_glob {
    char *pat;
    bool literal; /* no metacharacters: strcmp is enough */
};

/* A non-empty list of globs; matches when any of them does. */
struct policy_globset {
    struct policy_glob *v;
    size_t n;
};

struct policy_strset {
    char **v;
    size_t *len; /* lengths, so values with embedded NULs compare exactly */
    size_t n;
};

/* One string as (pointer, length): YAML scalars may not hold NULs but JSON can. */
struct policy_str {
    char *s;
    size_t len;
};

enum {
    POLICY_PRED_EQUALS = 1u << 0,
    POLICY_PRED_NOT_EQUALS = 1u << 1,
    POLICY_PRED_CONTAINS = 1u << 2,
    POLICY_PRED_PREFIX = 1u << 3,
    POLICY_PRED_ONE_OF = 1u << 4,
    POLICY_PRED_REGEX = 1u << 5,
    POLICY_PRED_GLOB = 1u << 6,
};

/* Constraints on one argument; every present one must pass. */
struct policy_pred {
    char *arg;    /* argument name (key in the args object) */
    unsigned has; /* POLICY_PRED_* bits */
    struct policy_str equals, not_equals, contains, prefix;
    struct policy_strset one_of;
    char *glob;
    regex_t re;
};

struct policy_rule {
    char *id;
    /* when: a zero/empty member means "not checked" */
    unsigned kinds; /* 0 = any kind */
    bool has_target, has_targets, has_agent, has_agents;
    bool has_forked, forked; /* when.forked */
    struct policy_globset target, targets;
    struct policy_strset agent, agents;
    struct policy_pred *preds;
    size_t n_preds;
    /* then */
    enum policy_decision decision;
    char *reason; /* never NULL */
    int64_t approval_timeout_ms;
    json_t *approvers; /* JSON array or NULL */
    char *approval_message;
    bool has_priority; /* upstream's priority: (order of evaluation, lowest first) */
    int64_t priority;
    bool has_rate_limit, has_budget;
    struct policy_rate_limit rate_limit;
    struct policy_budget budget;
    struct policy_judge judge; /* decision == POLICY_JUDGE */
    char *judge_instructions;
};

struct policy {
    char *source; /* the YAML it was compiled from */
    enum policy_decision default_action;
    struct policy_rule *rules;
    size_t n_rules;
};

#endif
