/*
 * policy_eval.c - decide one step against a compiled policy (see policy.h).
 *
 * Runs once per step submission, so it is kept pure and cheap: no I/O, no
 * locks, nothing written to the policy, and no allocation unless an argument
 * predicate has to look at an object/array argument whose JSON text exceeds the
 * on-stack buffer. Rules are tried in document order; the first whose `when`
 * holds decides.
 */
#include "policy/policy_int.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *policy_decision_name(enum policy_decision d)
{
    switch (d) {
    case POLICY_ALLOW:
        return "allow";
    case POLICY_DENY:
        return "deny";
    case POLICY_REQUIRE_APPROVAL:
        return "require_approval";
    case POLICY_JUDGE:
        return "judge";
    }
    return "deny";
}

size_t policy_rule_count(const struct policy *p)
{
    return p ? p->n_rules : 0;
}

enum policy_decision policy_default_action(const struct policy *p)
{
    return p ? p->default_action : POLICY_ALLOW;
}

const char *policy_source(const struct policy *p)
{
    return p && p->source ? p->source : "";
}

void policy_rule_info(const struct policy *p, size_t i, struct policy_rule_info *out)
{
    const struct policy_rule *r = &p->rules[i];
    out->id = r->id;
    out->decision = r->decision;
    out->has_priority = r->has_priority;
    out->priority = r->priority;
    out->rate_limit = r->has_rate_limit ? &r->rate_limit : NULL;
    out->budget = r->has_budget ? &r->budget : NULL;
    out->judge = r->decision == POLICY_JUDGE ? &r->judge : NULL;
}

static unsigned kind_bit(const char *kind)
{
    if (!kind) return 0;
    if (!strcmp(kind, "tool_call")) return POLICY_KIND_TOOL_CALL;
    if (!strcmp(kind, "llm_call")) return POLICY_KIND_LLM_CALL;
    if (!strcmp(kind, "local")) return POLICY_KIND_LOCAL;
    return 0; /* unknown kinds match no step_kind condition */
}

static bool glob_match(const struct policy_glob *g, const char *s)
{
    /* Exact equality first, so a target that happens to contain glob
     * metacharacters still matches a rule naming it literally. */
    if (!strcmp(g->pat, s)) return true;
    return !g->literal && fnmatch(g->pat, s, 0) == 0;
}

static bool globset_match(const struct policy_globset *g, const char *s)
{
    for (size_t i = 0; i < g->n; i++)
        if (glob_match(&g->v[i], s)) return true;
    return false;
}

static bool strset_has(const struct policy_strset *s, const char *v, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->len[i] == len && !memcmp(s->v[i], v, len)) return true;
    return false;
}

/* An argument value as the text predicates compare against. */
struct arg_text {
    const char *s; /* NUL-terminated; may contain NULs before len (JSON strings) */
    size_t len;
    char *heap; /* owned when the text did not fit in buf */
    char buf[512];
};

/* Shortest text that reads back as the same double, in jansson's notation
 * ("0.1" rather than jansson's default "0.10000000000000001", "1.0" not "1"),
 * so a policy can say equals: "0.1". */
static bool real_text(const json_t *v, struct arg_text *t)
{
    double d = json_real_value(v);
    for (int prec = 1; prec <= 17; prec++) {
        size_t n =
            json_dumpb(v, t->buf, sizeof t->buf - 1, JSON_ENCODE_ANY | JSON_REAL_PRECISION(prec));
        if (n == 0 || n >= sizeof t->buf) return false;
        t->buf[n] = '\0';
        if (strtod(t->buf, NULL) == d || prec == 17) {
            t->s = t->buf;
            t->len = n;
            return true;
        }
    }
    return false;
}

static bool arg_to_text(const json_t *v, struct arg_text *t)
{
    t->heap = NULL;
    switch (json_typeof(v)) {
    case JSON_STRING:
        t->s = json_string_value(v);
        t->len = json_string_length(v);
        return true;
    case JSON_INTEGER:
        t->len =
            (size_t)snprintf(t->buf, sizeof t->buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        t->s = t->buf;
        return true;
    case JSON_REAL:
        return real_text(v, t);
    case JSON_TRUE:
        t->s = "true", t->len = 4;
        return true;
    case JSON_FALSE:
        t->s = "false", t->len = 5;
        return true;
    case JSON_NULL:
        t->s = "null", t->len = 4;
        return true;
    case JSON_OBJECT:
    case JSON_ARRAY: {
        const size_t flags = JSON_COMPACT | JSON_SORT_KEYS;
        size_t n = json_dumpb(v, t->buf, sizeof t->buf - 1, flags);
        if (n == 0) return false;
        if (n < sizeof t->buf) {
            t->buf[n] = '\0';
            t->s = t->buf;
            t->len = n;
            return true;
        }
        t->heap = json_dumps(v, flags); /* rare: a large structured argument */
        if (!t->heap) return false;
        t->s = t->heap;
        t->len = strlen(t->heap);
        return true;
    }
    }
    return false;
}

static bool has_prefix(const char *s, size_t len, const struct policy_str *p)
{
    return len >= p->len && !memcmp(s, p->s, p->len);
}

static bool pred_text_match(const struct policy_pred *p, const char *s, size_t len)
{
    unsigned h = p->has;
    if ((h & POLICY_PRED_EQUALS) && !(len == p->equals.len && !memcmp(s, p->equals.s, len)))
        return false;
    if ((h & POLICY_PRED_NOT_EQUALS) && len == p->not_equals.len &&
        !memcmp(s, p->not_equals.s, len))
        return false;
    if ((h & POLICY_PRED_PREFIX) && !has_prefix(s, len, &p->prefix)) return false;
    if ((h & POLICY_PRED_CONTAINS) && !memmem(s, len, p->contains.s, p->contains.len)) return false;
    if ((h & POLICY_PRED_ONE_OF) && !strset_has(&p->one_of, s, len)) return false;
    if (h & POLICY_PRED_GLOB) {
        /* Exact text first, as for targets. fnmatch stops at a NUL; a value
         * hiding text behind one must not pass as the part before it. */
        bool exact = strlen(p->glob) == len && !memcmp(s, p->glob, len);
        if (!exact && (memchr(s, '\0', len) || fnmatch(p->glob, s, 0) != 0)) return false;
    }
    if (h & POLICY_PRED_REGEX) {
        /* REG_STARTEND makes glibc match the whole length, embedded NULs
         * included, instead of stopping at the first one. */
        regmatch_t m[1] = {{.rm_so = 0, .rm_eo = (regoff_t)len}};
        if (regexec(&p->re, s, 1, m, REG_STARTEND) != 0) return false;
    }
    return true;
}

static bool pred_match(const struct policy_pred *p, const json_t *args)
{
    const json_t *v = json_object_get(args, p->arg);
    struct arg_text t;
    if (!v || !arg_to_text(v, &t)) return false;
    bool ok = pred_text_match(p, t.s, t.len);
    free(t.heap);
    return ok;
}

static bool rule_matches(const struct policy_rule *r, unsigned kind, const char *target,
                         const char *agent, const json_t *args, bool forked)
{
    if (r->kinds && !(r->kinds & kind)) return false;
    if (r->has_forked && r->forked != forked) return false;
    if (r->has_target && !globset_match(&r->target, target)) return false;
    if (r->has_targets && !globset_match(&r->targets, target)) return false;
    if (r->has_agent && (!agent || !strset_has(&r->agent, agent, strlen(agent)))) return false;
    if (r->has_agents && (!agent || !strset_has(&r->agents, agent, strlen(agent)))) return false;
    if (r->n_preds) {
        if (!args || !json_is_object(args)) return false;
        for (size_t i = 0; i < r->n_preds; i++)
            if (!pred_match(&r->preds[i], args)) return false;
    }
    return true;
}

static void set_builtin(struct policy_result *out, enum policy_decision d, const char *rule_id,
                        const char *reason)
{
    out->decision = d;
    out->rule_id = rule_id;
    out->reason = reason;
    out->approval_timeout_ms = 0;
    out->approvers = NULL;
    out->approval_message = NULL;
    out->fork_rule = false;
    out->rule_pos = 0;
    out->rate_limit = NULL;
    out->budget = NULL;
    out->judge = NULL;
}

void policy_eval(const struct policy *p, const struct policy_input *in, struct policy_result *out)
{
    if (!p) {
        set_builtin(out, POLICY_ALLOW, "permissive", "no policy configured for this agent");
        return;
    }
    unsigned kind = kind_bit(in->kind);
    const char *target = in->target ? in->target : "";
    for (size_t i = 0; i < p->n_rules; i++) {
        const struct policy_rule *r = &p->rules[i];
        if (!rule_matches(r, kind, target, in->agent, in->args, in->forked)) continue;
        out->decision = r->decision;
        out->rule_id = r->id;
        out->reason = r->reason;
        out->approval_timeout_ms = r->approval_timeout_ms;
        out->approvers = r->approvers;
        out->approval_message = r->approval_message;
        out->fork_rule = r->has_forked && r->forked;
        out->rule_pos = i + 1;
        out->rate_limit = r->has_rate_limit ? &r->rate_limit : NULL;
        out->budget = r->has_budget ? &r->budget : NULL;
        out->judge = r->decision == POLICY_JUDGE ? &r->judge : NULL;
        return;
    }
    /* Local steps (find_sandbox, load_conversation, ...) are the agent's own
     * bookkeeping; a rule may still deny them, but they never need one. */
    if (kind == POLICY_KIND_LOCAL)
        set_builtin(out, POLICY_ALLOW, "local", "local step (no rule needed)");
    else if (p->default_action == POLICY_ALLOW)
        set_builtin(out, POLICY_ALLOW, "default", "default_action: allow");
    else
        set_builtin(out, POLICY_DENY, "default",
                    "no rule allowed this step (default_action: deny)");
}
