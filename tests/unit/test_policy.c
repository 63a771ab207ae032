/*
 * test_policy.c - unit tests for src/policy: loading (strictness and exact
 * file:line:col errors), evaluation (document order, globs, argument
 * predicates, built-in outcomes) and duration parsing.
 *
 * Run from the repository root: data files are opened as tests/unit/data/...
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

#define DATA "tests/unit/data/policies/"

/* ------------------------------------------------------------------------- */
/* helpers                                                                   */
/* ------------------------------------------------------------------------- */

static struct policy *load_ok(const char *yaml)
{
    struct err e = ERR_INIT;
    struct policy *p = policy_load_string(yaml, strlen(yaml), "t.yaml", 0, &e);
    cr_assert_not_null(p, "policy should load, got: %s", e.msg);
    return p;
}

static struct policy *load_file_ok(const char *path)
{
    struct err e = ERR_INIT;
    struct policy *p = policy_load_file(path, &e);
    cr_assert_not_null(p, "%s should load, got: %s", path, e.msg);
    return p;
}

/* Load must fail; the message must start with `prefix` ("t.yaml:L:C: ...")
 * and contain `sub` (either may be NULL). */
static void load_fails(const char *yaml, const char *prefix, const char *sub)
{
    struct err e = ERR_INIT;
    struct policy *p = policy_load_string(yaml, strlen(yaml), "t.yaml", 0, &e);
    cr_assert_null(p, "policy should not load:\n%s", yaml);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.code, "policy_invalid");
    if (prefix)
        cr_assert(!strncmp(e.msg, prefix, strlen(prefix)), "message %s should start with %s", e.msg,
                  prefix);
    if (sub) cr_assert(strstr(e.msg, sub), "message %s should contain %s", e.msg, sub);
    /* Every message says what to do about it. */
    cr_assert(strchr(e.msg, ';'), "message has no fix: %s", e.msg);
}

static void file_fails(const char *path, const char *want_msg)
{
    struct err e = ERR_INIT;
    struct policy *p = policy_load_file(path, &e);
    cr_assert_null(p, "%s should not load", path);
    cr_assert_str_eq(e.code, "policy_invalid");
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.msg, want_msg);
}

/* Evaluate one step; args is JSON text or NULL. */
static struct policy_result eval(const struct policy *p, const char *kind, const char *target,
                                 const char *agent, const char *args)
{
    json_t *j = NULL;
    if (args) {
        j = json_loads(args, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        cr_assert_not_null(j, "bad test JSON %s", args);
    }
    struct policy_input in = {.kind = kind, .target = target, .agent = agent, .args = j};
    struct policy_result r;
    memset(&r, 0xa5, sizeof r); /* everything must be overwritten */
    policy_eval(p, &in, &r);
    json_decref(j);
    cr_assert_not_null(r.reason);
    cr_assert_not_null(r.rule_id);
    return r;
}

static void expect(const struct policy *p, const char *kind, const char *target, const char *args,
                   enum policy_decision d, const char *rule)
{
    struct policy_result r = eval(p, kind, target, NULL, args);
    cr_assert_eq(r.decision, d, "%s %s %s: got %s by %s, want %s by %s", kind, target,
                 args ? args : "", policy_decision_name(r.decision), r.rule_id,
                 policy_decision_name(d), rule);
    cr_assert_str_eq(r.rule_id, rule, "%s %s %s: rule %s, want %s", kind, target, args ? args : "",
                     r.rule_id, rule);
}

/* A one-rule policy: `when` is the YAML body under "when:" (6-space indent). */
static struct policy *one_rule(const char *when)
{
    char *y = NULL;
    cr_assert(asprintf(&y,
                       "rules:\n"
                       "  - id: r\n"
                       "    when:\n"
                       "%s"
                       "    then:\n"
                       "      decision: allow\n",
                       when) > 0);
    struct policy *p = load_ok(y);
    free(y);
    return p;
}

/* Does the one-rule policy with argument predicate `pred` (YAML flow mapping)
 * match args? */
static bool arg_matches(const char *pred, const char *args)
{
    char *when = NULL;
    cr_assert(asprintf(&when, "      arguments:\n        v: %s\n", pred) > 0);
    struct policy *p = one_rule(when);
    struct policy_result r = eval(p, "tool_call", "t", NULL, args);
    bool m = !strcmp(r.rule_id, "r");
    policy_free(p);
    free(when);
    return m;
}

/* ------------------------------------------------------------------------- */
/* the spec's policy                                                         */
/* ------------------------------------------------------------------------- */

Test(policy_spec, loads)
{
    struct policy *p = load_file_ok(DATA "spec.yaml");
    cr_assert_eq(policy_rule_count(p), 3);
    cr_assert_eq(policy_default_action(p), POLICY_DENY);
    policy_free(p);
}

Test(policy_spec, decisions)
{
    struct policy *p = load_file_ok(DATA "spec.yaml");
    expect(p, "llm_call", "gpt-4o", NULL, POLICY_ALLOW, "allow-llm");
    expect(p, "tool_call", "shell", "{\"command\":\"pytest\"}", POLICY_ALLOW, "allow-sandbox");
    expect(p, "tool_call", "read_file", NULL, POLICY_ALLOW, "allow-sandbox");
    expect(p, "tool_call", "write_file", NULL, POLICY_ALLOW, "allow-sandbox");
    expect(p, "tool_call", "delete_repo", NULL, POLICY_DENY, "default");
    expect(p, "tool_call", "shell_exec", NULL, POLICY_DENY, "default");
    expect(p, "local", "find_sandbox", NULL, POLICY_ALLOW, "local");
    expect(p, "local", "load_conversation", NULL, POLICY_ALLOW, "local");

    struct policy_result r = eval(p, "tool_call", "open_pr", NULL, "{\"title\":\"fix\"}");
    cr_assert_eq(r.decision, POLICY_REQUIRE_APPROVAL);
    cr_assert_str_eq(r.rule_id, "open-pr");
    cr_assert_str_eq(r.reason, "opening a pull request needs approval");
    cr_assert_eq(r.approval_timeout_ms, 0); /* kernel default */
    cr_assert_null(r.approvers);
    cr_assert_null(r.approval_message);

    r = eval(p, "tool_call", "rm", NULL, NULL);
    cr_assert_str_eq(r.reason, "no rule allowed this step (default_action: deny)");
    cr_assert_eq(r.approval_timeout_ms, 0);
    cr_assert_null(r.approvers);
    cr_assert_null(r.approval_message);
    policy_free(p);
}

/* ------------------------------------------------------------------------- */
/* evaluation                                                                */
/* ------------------------------------------------------------------------- */

Test(policy_eval, null_policy_is_permissive)
{
    struct policy_result r = eval(NULL, "tool_call", "anything", NULL, NULL);
    cr_assert_eq(r.decision, POLICY_ALLOW);
    cr_assert_str_eq(r.rule_id, "permissive");
    cr_assert_null(r.approvers);
    cr_assert_eq(policy_rule_count(NULL), 0);
}

Test(policy_eval, default_allow_and_local)
{
    struct policy *p = load_ok("default_action: allow\n"
                               "rules:\n"
                               "  - id: no-local-x\n"
                               "    when: {step_kind: local, target: x}\n"
                               "    then: {decision: deny, reason: no}\n");
    cr_assert_eq(policy_default_action(p), POLICY_ALLOW);
    struct policy_result r = eval(p, "tool_call", "anything", NULL, NULL);
    cr_assert_eq(r.decision, POLICY_ALLOW);
    cr_assert_str_eq(r.rule_id, "default");
    cr_assert_str_eq(r.reason, "default_action: allow");
    /* A rule may still deny a local step; unmatched ones are "local". */
    expect(p, "local", "x", NULL, POLICY_DENY, "no-local-x");
    expect(p, "local", "y", NULL, POLICY_ALLOW, "local");
    policy_free(p);
}

Test(policy_eval, empty_rules_and_defaults)
{
    struct policy *p = load_ok("default_action: deny\n");
    cr_assert_eq(policy_rule_count(p), 0);
    expect(p, "tool_call", "x", NULL, POLICY_DENY, "default");
    expect(p, "local", "x", NULL, POLICY_ALLOW, "local");
    policy_free(p);
    p = load_ok("rules: []\n"); /* default_action defaults to deny */
    cr_assert_eq(policy_default_action(p), POLICY_DENY);
    expect(p, "llm_call", "m", NULL, POLICY_DENY, "default");
    policy_free(p);
}

Test(policy_eval, document_order_first_match_wins)
{
    struct policy *p = load_ok("default_action: allow\n"
                               "rules:\n"
                               "  - id: first\n"
                               "    when: {target: \"shell*\"}\n"
                               "    then: {decision: deny, reason: first}\n"
                               "  - id: second\n"
                               "    when: {target: shell}\n"
                               "    then: {decision: allow}\n"
                               "  - id: catch-all\n"
                               "    then: {decision: require_approval}\n");
    expect(p, "tool_call", "shell", NULL, POLICY_DENY, "first");
    expect(p, "tool_call", "shell_exec", NULL, POLICY_DENY, "first");
    /* A rule without `when` matches everything, so the default is never reached. */
    expect(p, "tool_call", "other", NULL, POLICY_REQUIRE_APPROVAL, "catch-all");
    expect(p, "local", "other", NULL, POLICY_REQUIRE_APPROVAL, "catch-all");
    policy_free(p);

    /* Swapping the rules swaps the outcome. */
    p = load_ok("rules:\n"
                "  - id: second\n"
                "    when: {target: shell}\n"
                "    then: {decision: allow}\n"
                "  - id: first\n"
                "    when: {target: \"shell*\"}\n"
                "    then: {decision: deny}\n");
    expect(p, "tool_call", "shell", NULL, POLICY_ALLOW, "second");
    expect(p, "tool_call", "shell_exec", NULL, POLICY_DENY, "first");
    policy_free(p);
}

Test(policy_eval, globs)
{
    struct policy *p = load_ok("rules:\n"
                               "  - id: star\n"
                               "    when: {target: \"fs_write_*\"}\n"
                               "    then: {decision: allow}\n"
                               "  - id: slash\n"
                               "    when: {target: \"mcp/*\"}\n"
                               "    then: {decision: allow}\n"
                               "  - id: qmark-set\n"
                               "    when: {targets: [\"tool?\", \"v[0-9]\"]}\n"
                               "    then: {decision: allow}\n"
                               "  - id: literal-brackets\n"
                               "    when: {target: \"odd[x]\"}\n"
                               "    then: {decision: allow}\n"
                               "  - id: escaped\n"
                               "    when: {target: 'lit\\*'}\n"
                               "    then: {decision: allow}\n");
    expect(p, "tool_call", "fs_write_file", NULL, POLICY_ALLOW, "star");
    expect(p, "tool_call", "fs_write_", NULL, POLICY_ALLOW, "star");
    expect(p, "tool_call", "fs_read_file", NULL, POLICY_DENY, "default");
    /* '*' crosses '/' (no FNM_PATHNAME). */
    expect(p, "tool_call", "mcp/github/open_pr", NULL, POLICY_ALLOW, "slash");
    expect(p, "tool_call", "tool1", NULL, POLICY_ALLOW, "qmark-set");
    expect(p, "tool_call", "tool12", NULL, POLICY_DENY, "default");
    expect(p, "tool_call", "v7", NULL, POLICY_ALLOW, "qmark-set");
    expect(p, "tool_call", "vx", NULL, POLICY_DENY, "default");
    /* Exact match comes first: "odd[x]" names itself, as well as "oddx". */
    expect(p, "tool_call", "odd[x]", NULL, POLICY_ALLOW, "literal-brackets");
    expect(p, "tool_call", "oddx", NULL, POLICY_ALLOW, "literal-brackets");
    expect(p, "tool_call", "lit*", NULL, POLICY_ALLOW, "escaped");
    expect(p, "tool_call", "litx", NULL, POLICY_DENY, "default");
    /* NULL target is "", which matches nothing here. */
    expect(p, "tool_call", NULL, NULL, POLICY_DENY, "default");
    policy_free(p);
}

Test(policy_eval, step_kinds_and_agents)
{
    struct policy *p = load_ok("rules:\n"
                               "  - id: kinds\n"
                               "    when: {step_kinds: [llm_call, local], agent: coder}\n"
                               "    then: {decision: allow}\n"
                               "  - id: agents\n"
                               "    when: {agents: [a, b], step_kind: tool_call}\n"
                               "    then: {decision: require_approval}\n"
                               "  - id: legacy-agent-id\n"
                               "    when: {agent_id: legacy}\n"
                               "    then: {decision: allow}\n");
    struct policy_result r = eval(p, "llm_call", "m", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "kinds");
    r = eval(p, "local", "m", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "kinds");
    r = eval(p, "tool_call", "m", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "llm_call", "m", "other", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "llm_call", "m", NULL, NULL); /* no agent: agent conditions fail */
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "tool_call", "m", "b", NULL);
    cr_assert_str_eq(r.rule_id, "agents");
    cr_assert_eq(r.decision, POLICY_REQUIRE_APPROVAL);
    r = eval(p, "llm_call", "m", "b", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "tool_call", "m", "legacy", NULL);
    cr_assert_str_eq(r.rule_id, "legacy-agent-id");
    /* Unknown or missing kinds match no step_kind condition. */
    r = eval(p, "bogus", "m", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, NULL, "m", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    policy_free(p);
}

Test(policy_eval, full_policy_file)
{
    struct policy *p = load_file_ok(DATA "full.yaml");
    cr_assert_eq(policy_rule_count(p), 5);
    expect(p, "tool_call", "shell", "{\"command\":\"ls -la\"}", POLICY_ALLOW, "safe-shell");
    expect(p, "tool_call", "shell", "{\"command\":\"  cat x\"}", POLICY_ALLOW, "safe-shell");
    expect(p, "tool_call", "shell", "{\"command\":\"ls; rm -rf /\"}", POLICY_DENY, "deny-rm");
    expect(p, "tool_call", "shell", "{\"command\":\"rm x\"}", POLICY_DENY, "deny-rm");
    expect(p, "tool_call", "shell", "{\"command\":\"cat /etc/shadow\"}", POLICY_REQUIRE_APPROVAL,
           "approve-shell");
    expect(p, "tool_call", "shell", "{\"command\":\"lsblk\"}", POLICY_REQUIRE_APPROVAL,
           "approve-shell");
    /* No args at all: the argument rules cannot match. */
    expect(p, "tool_call", "shell", NULL, POLICY_REQUIRE_APPROVAL, "approve-shell");
    expect(p, "tool_call", "shell", "[\"ls\"]", POLICY_REQUIRE_APPROVAL, "approve-shell");

    struct policy_result r = eval(p, "tool_call", "shell", NULL, "{\"command\":\"make\"}");
    cr_assert_eq(r.approval_timeout_ms, 90LL * 60 * 1000);
    cr_assert_str_eq(r.approval_message, "a human must look at this shell command");
    cr_assert(json_is_array(r.approvers));
    cr_assert_eq(json_array_size(r.approvers), 2);
    cr_assert_str_eq(json_string_value(json_array_get(r.approvers, 0)), "alice");
    cr_assert_str_eq(json_string_value(json_array_get(r.approvers, 1)), "bob");
    cr_assert_str_eq(r.reason, "");

    r = eval(p, "tool_call", "fs_write_file", "coder", NULL);
    cr_assert_str_eq(r.rule_id, "fs-write");
    cr_assert_eq(r.approval_timeout_ms, 900 * 1000); /* approval_config alias, bare seconds */
    cr_assert_null(r.approvers);
    r = eval(p, "tool_call", "fs/a/b", "fixer", NULL);
    cr_assert_str_eq(r.rule_id, "fs-write");
    r = eval(p, "tool_call", "fs/a/b", "other", NULL);
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "llm_call", "shell", NULL, NULL); /* kind check: not a tool call */
    cr_assert_str_eq(r.rule_id, "approve-shell"); /* target-only rules match any kind */
    r = eval(p, "llm_call", "gpt", NULL, NULL);
    cr_assert_str_eq(r.rule_id, "llm");
    policy_free(p);
}

/* ------------------------------------------------------------------------- */
/* argument predicates                                                       */
/* ------------------------------------------------------------------------- */

Test(policy_args, equals_not_equals)
{
    cr_assert(arg_matches("{equals: ls}", "{\"v\":\"ls\"}"));
    cr_assert(!arg_matches("{equals: ls}", "{\"v\":\"ls -l\"}"));
    cr_assert(!arg_matches("{equals: ls}", "{\"w\":\"ls\"}")); /* key must exist */
    cr_assert(!arg_matches("{equals: ls}", NULL));
    cr_assert(!arg_matches("{equals: ls}", "\"ls\"")); /* args must be an object */
    cr_assert(arg_matches("{equals: \"\"}", "{\"v\":\"\"}"));
    cr_assert(arg_matches("{not_equals: rm}", "{\"v\":\"ls\"}"));
    cr_assert(!arg_matches("{not_equals: rm}", "{\"v\":\"rm\"}"));
    cr_assert(!arg_matches("{not_equals: rm}", "{}")); /* still must exist */
    /* Embedded NULs are compared exactly, not up to the NUL. */
    cr_assert(!arg_matches("{equals: ls}", "{\"v\":\"ls\\u0000; rm -rf /\"}"));
}

Test(policy_args, contains_prefix_one_of)
{
    cr_assert(arg_matches("{contains: \"--force\"}", "{\"v\":\"git push --force x\"}"));
    cr_assert(!arg_matches("{contains: \"--force\"}", "{\"v\":\"git push\"}"));
    cr_assert(arg_matches("{prefix: \"git \"}", "{\"v\":\"git status\"}"));
    cr_assert(!arg_matches("{prefix: \"git \"}", "{\"v\":\"gitk\"}"));
    cr_assert(!arg_matches("{prefix: \"git \"}", "{\"v\":\"gi\"}"));
    cr_assert(arg_matches("{one_of: [main, dev]}", "{\"v\":\"dev\"}"));
    cr_assert(!arg_matches("{one_of: [main, dev]}", "{\"v\":\"de\"}"));
    /* Several constraints are AND-ed. */
    cr_assert(arg_matches("{prefix: git, contains: push, not_equals: git push}",
                          "{\"v\":\"git push origin\"}"));
    cr_assert(!arg_matches("{prefix: git, contains: push, not_equals: git push}",
                           "{\"v\":\"git push\"}"));
}

Test(policy_args, regex_and_glob)
{
    /* Unanchored unless the pattern anchors itself. */
    cr_assert(arg_matches("{regex: \"rm -rf\"}", "{\"v\":\"sudo rm -rf /\"}"));
    cr_assert(!arg_matches("{regex: \"^rm\"}", "{\"v\":\"sudo rm\"}"));
    cr_assert(arg_matches("{regex: \"^(ls|pwd)( |$)\"}", "{\"v\":\"pwd\"}"));
    cr_assert(!arg_matches("{regex: \"^(ls|pwd)( |$)\"}", "{\"v\":\"lsblk\"}"));
    cr_assert(arg_matches("{regex: \"^[0-9]+$\"}", "{\"v\":\"123\"}"));
    /* The regex sees the whole value, even past an embedded NUL. */
    cr_assert(arg_matches("{regex: \"rm\"}", "{\"v\":\"ls\\u0000rm\"}"));
    cr_assert(!arg_matches("{regex: \"^ls$\"}", "{\"v\":\"ls\\u0000rm\"}"));
    cr_assert(arg_matches("{glob: \"*.txt\"}", "{\"v\":\"a/b/c.txt\"}"));
    cr_assert(!arg_matches("{glob: \"*.txt\"}", "{\"v\":\"c.txt.gz\"}"));
    cr_assert(!arg_matches("{glob: \"*.txt\"}", "{\"v\":\"x\\u0000.txt\"}"));
}

Test(policy_args, stringification)
{
    cr_assert(arg_matches("{equals: 5}", "{\"v\":5}"));
    cr_assert(arg_matches("{equals: \"-12\"}", "{\"v\":-12}"));
    cr_assert(arg_matches("{equals: \"0.1\"}", "{\"v\":0.1}"));
    cr_assert(arg_matches("{equals: \"1.0\"}", "{\"v\":1.0}"));
    cr_assert(arg_matches("{equals: \"1.5\"}", "{\"v\":1.5}"));
    cr_assert(arg_matches("{regex: \"^[0-9]+$\"}", "{\"v\":8080}"));
    cr_assert(arg_matches("{equals: true}", "{\"v\":true}"));
    cr_assert(arg_matches("{equals: \"false\"}", "{\"v\":false}"));
    cr_assert(arg_matches("{equals: \"null\"}", "{\"v\":null}"));
    cr_assert(!arg_matches("{equals: \"true\"}", "{\"v\":\"True\"}"));
    /* Objects and arrays: compact JSON with sorted keys. */
    cr_assert(arg_matches("{equals: '{\"a\":[1,true],\"b\":null}'}",
                          "{\"v\":{\"b\":null, \"a\":[1, true]}}"));
    cr_assert(arg_matches("{equals: '[\"x\",{\"k\":\"y\"}]'}", "{\"v\":[\"x\", {\"k\":\"y\"}]}"));
    cr_assert(arg_matches("{contains: '\"force\":true'}", "{\"v\":{\"force\": true}}"));
}

Test(policy_args, large_object_argument)
{
    /* Bigger than the on-stack buffer: takes the allocating path. */
    char big[4096];
    int n = snprintf(big, sizeof big, "{\"v\":{\"data\":\"");
    memset(big + n, 'x', 3000);
    snprintf(big + n + 3000, sizeof big - (size_t)n - 3000, "\",\"secret\":1}}");
    cr_assert(arg_matches("{contains: '\"secret\":1'}", big));
    cr_assert(arg_matches("{prefix: '{\"data\":\"xxx'}", big));
}

Test(policy_args, several_arguments_all_must_match)
{
    struct policy *p = one_rule("      arguments:\n"
                                "        repo: {equals: rebuno}\n"
                                "        branch: {one_of: [main, master]}\n");
    struct policy_result r =
        eval(p, "tool_call", "t", NULL, "{\"repo\":\"rebuno\",\"branch\":\"main\"}");
    cr_assert_str_eq(r.rule_id, "r");
    r = eval(p, "tool_call", "t", NULL, "{\"repo\":\"rebuno\",\"branch\":\"dev\"}");
    cr_assert_str_eq(r.rule_id, "default");
    r = eval(p, "tool_call", "t", NULL, "{\"repo\":\"rebuno\"}");
    cr_assert_str_eq(r.rule_id, "default");
    policy_free(p);
}

/* ------------------------------------------------------------------------- */
/* durations                                                                 */
/* ------------------------------------------------------------------------- */

static int64_t dur(const char *s)
{
    int64_t ms = -1;
    cr_assert_eq(policy_parse_duration(s, &ms), 0, "%s should parse", s);
    return ms;
}

Test(policy_duration, valid)
{
    cr_assert_eq(dur("90s"), 90000);
    cr_assert_eq(dur("15m"), 15 * 60000);
    cr_assert_eq(dur("1h30m"), 90 * 60000);
    cr_assert_eq(dur("2h"), 2 * 3600000);
    cr_assert_eq(dur("30d"), 30LL * 86400000);
    cr_assert_eq(dur("900"), 900000);
    cr_assert_eq(dur("1500ms"), 1500);
    cr_assert_eq(dur("1m30s"), 90000);
    cr_assert_eq(dur("1d2h3m4s5ms"), 86400000 + 2 * 3600000 + 3 * 60000 + 4000 + 5);
    cr_assert_eq(dur("0"), 0);
    cr_assert_eq(dur("0s"), 0);
}

Test(policy_duration, invalid)
{
    const char *bad[] = {"",
                         "-5s",
                         "5x",
                         "1.5h",
                         "h",
                         "1h30",
                         " 5s",
                         "5s ",
                         "5 s",
                         "+5s",
                         "99999999999999999999",
                         "9223372036854775807d",
                         "5S",
                         "1us"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = 42;
        cr_assert_eq(policy_parse_duration(bad[i], &ms), -EINVAL, "\"%s\" should not parse",
                     bad[i]);
        cr_assert_eq(ms, 42, "output touched for \"%s\"", bad[i]);
    }
    int64_t ms;
    cr_assert_eq(policy_parse_duration(NULL, &ms), -EINVAL);
}

#define TPL_TIMEOUT                                                                                \
    "rules:\n"                                                                                     \
    "  - id: a\n"                                                                                  \
    "    then:\n"                                                                                  \
    "      decision: require_approval\n"                                                           \
    "      approval:\n"                                                                            \
    "        timeout: %s\n"

Test(policy_duration, approval_timeout_range)
{
    struct policy *p = load_ok("rules:\n"
                               "  - id: a\n"
                               "    then:\n"
                               "      decision: require_approval\n"
                               "      approval: {timeout: 30d}\n"
                               "  - id: b\n"
                               "    then:\n"
                               "      decision: require_approval\n"
                               "      approval: {timeout: 1s}\n");
    policy_free(p);
    const char *bad[] = {"0s", "999ms", "31d", "721h", "abc", "15 m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char y[256];
        snprintf(y, sizeof y, TPL_TIMEOUT, bad[i]);
        load_fails(y, "t.yaml:6:18: timeout", NULL);
    }
}

/* ------------------------------------------------------------------------- */
/* load errors: exact messages from files                                    */
/* ------------------------------------------------------------------------- */

Test(policy_load_errors, unknown_key)
{
    file_fails(DATA "bad_unknown_key.yaml",
               DATA "bad_unknown_key.yaml:10:7: unknown key \"targett\" in when; expected one "
                    "of: step_kind, step_kinds, target, targets, agent, agents, arguments, forked");
}

Test(policy_load_errors, wrong_type)
{
    file_fails(DATA "bad_wrong_type.yaml",
               DATA "bad_wrong_type.yaml:5:16: targets must be a list, not a string; write it "
                    "like targets: [shell, read_file] (or target: shell for a single one)");
}

Test(policy_load_errors, bad_decision)
{
    file_fails(DATA "bad_decision.yaml",
               DATA "bad_decision.yaml:4:17: decision \"maybe\" is not valid; use one of: "
                    "allow, deny, require_approval, judge");
}

Test(policy_load_errors, duplicate_id)
{
    file_fails(DATA "bad_duplicate_id.yaml",
               DATA "bad_duplicate_id.yaml:4:9: duplicate rule id \"same\" (first used at line "
                    "2); ids must be unique - rename one of the rules");
}

Test(policy_load_errors, bad_regex)
{
    struct err e = ERR_INIT;
    cr_assert_null(policy_load_file(DATA "bad_regex.yaml", &e));
    const char *want = DATA "bad_regex.yaml:7:18: regex \"^(ls|cat\" does not compile: ";
    cr_assert(!strncmp(e.msg, want, strlen(want)), "got %s", e.msg);
    cr_assert_str_eq(e.field, "rules[0].when.arguments.command");
}

Test(policy_load_errors, syntax_error)
{
    struct err e = ERR_INIT;
    cr_assert_null(policy_load_file(DATA "bad_syntax.yaml", &e));
    const char *want = DATA "bad_syntax.yaml:6:6: invalid YAML: ";
    cr_assert(!strncmp(e.msg, want, strlen(want)), "got %s", e.msg);
}

Test(policy_load_errors, anchor_rejected)
{
    file_fails(DATA "bad_alias.yaml",
               DATA "bad_alias.yaml:4:11: YAML anchor &allow is not supported in a policy; "
                    "write the value out in full instead of using anchors and aliases");
}

Test(policy_load_errors, approval_on_allow_rule)
{
    file_fails(DATA "bad_approval_on_allow.yaml",
               DATA "bad_approval_on_allow.yaml:7:7: approval is only valid with decision: "
                    "require_approval or judge, or a budget with on_exceed: require_approval (this "
                    "rule's decision is allow); remove approval or change the decision");
}

Test(policy_load_errors, empty_file)
{
    file_fails(DATA "empty.yaml",
               DATA "empty.yaml:1:1: empty policy; write at least default_action: deny (and "
                    "rules: ...)");
}

Test(policy_load_errors, missing_file)
{
    struct err e = ERR_INIT;
    cr_assert_null(policy_load_file(DATA "does-not-exist.yaml", &e));
    cr_assert_str_eq(e.code, "policy_invalid");
    cr_assert(strstr(e.msg, "does-not-exist.yaml: cannot open policy file: No such file"), "%s",
              e.msg);
    cr_assert_null(policy_load_file("tests/unit/data/policies", &e)); /* a directory */
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
}

/* ------------------------------------------------------------------------- */
/* load errors: every class, from strings                                    */
/* ------------------------------------------------------------------------- */

Test(policy_load_errors, empty_documents)
{
    load_fails("", "t.yaml:1:1: empty policy;", NULL);
    load_fails("# only a comment\n", "t.yaml:1:1: empty policy;", NULL);
    load_fails("---\n", "t.yaml:1:1: empty policy;", NULL);
    load_fails("~\n", "t.yaml:1:1: empty policy;", NULL);
    struct err e = ERR_INIT;
    cr_assert_null(policy_load_string(NULL, 0, NULL, 0, &e));
    cr_assert_str_eq(e.msg, "<inline>:1:1: empty policy; write at least default_action: deny "
                            "(and rules: ...)");
}

Test(policy_load_errors, top_level)
{
    load_fails("- a\n- b\n", "t.yaml:1:1: the policy is a list;", "mapping");
    load_fails("default_action: maybe\n", "t.yaml:1:17: default_action \"maybe\" is not valid;",
               "use allow or deny");
    load_fails("default_action: require_approval\n", "t.yaml:1:17:", "allow or deny");
    load_fails("default_action: deny\nversion: 2\n",
               "t.yaml:2:1: unknown key \"version\" in the "
               "policy; expected one of: default_action, "
               "rules",
               NULL);
    load_fails("rules: allow\n", "t.yaml:1:8: rules must be a list, not a string;", NULL);
    load_fails("rules:\n  - just-a-string\n", "t.yaml:2:5: rule 1 is a string;", NULL);
    load_fails("rules:\n  - {}\n", "t.yaml:2:5: rule 1 is an empty mapping;", NULL);
    load_fails("default_action: deny\ndefault_action: allow\n",
               "t.yaml:2:1: duplicate key \"default_action\" in the policy (first at line 1);",
               NULL);
    load_fails("a: 1\n---\nb: 2\n", "t.yaml:2:1: a second YAML document", NULL);
}

Test(policy_load_errors, rule_structure)
{
    load_fails("rules:\n  - when: {target: x}\n    then: {decision: allow}\n",
               "t.yaml:2:5: rule 1 has no id;", NULL);
    load_fails("rules:\n  - id: a\n    when: {target: x}\n", "t.yaml:2:5: rule \"a\" has no then;",
               NULL);
    load_fails("rules:\n  - id: a\n    then:\n", "t.yaml:3:5: then has no decision;", NULL);
    load_fails("rules:\n  - id: a\n    then: {reason: x}\n", "t.yaml:3:11: then has no decision;",
               NULL);
    load_fails("rules:\n  - id: a\n    then: allow\n",
               "t.yaml:3:11: then must be a mapping, not a string;", NULL);
    load_fails("rules:\n  - id: a\n    priority: 1\n    then: {decision: allow}\n  - id: b\n"
               "    then: {decision: deny}\n",
               "t.yaml:5:9: rule \"b\" has no priority but other rules do;", NULL);
    load_fails("rules:\n  - id: a\n    priority: 1\n    then: {decision: allow}\n  - id: b\n"
               "    priority: 1\n    then: {decision: deny}\n",
               "t.yaml:5:9: rules \"a\" and \"b\" have the same priority 1;", NULL);
    load_fails("rules:\n  - id: a\n    priority: high\n    then: {decision: allow}\n",
               "t.yaml:3:15: priority \"high\" is not a whole number;", NULL);
    load_fails("rules:\n  - id: a\n    id: b\n    then: {decision: allow}\n",
               "t.yaml:3:5: duplicate key \"id\" in rule (first at line 2);", NULL);
    load_fails("rules:\n  - id: a\n    then: {decision: allow, rate_limit: {max_calls: 1}}\n",
               "t.yaml:3:41: rate_limit needs max_calls and window;", NULL);
    load_fails("rules:\n  - id: a\n    then: {decision: allow, tokens: 1}\n",
               "t.yaml:3:29: unknown key \"tokens\" in then; expected one of: decision, "
               "reason, approval, rate_limit, budget, judge",
               NULL);
    load_fails("rules:\n  - id: a\n    then: {decision: judge, judge: {threshold: 7}}\n",
               "t.yaml:3:48: threshold \"7\" is not a probability", NULL);
    load_fails("rules:\n  - id: a\n    then: {decision: [allow]}\n",
               "t.yaml:3:22: decision must be a string, not a list;", NULL);
    load_fails("rules:\n  - id: a\n    then: {decision: allow, reason: [x]}\n",
               "t.yaml:3:37: reason must be a string, not a list;", NULL);
}

Test(policy_load_errors, ids)
{
    load_fails("rules:\n  - id: \"has space\"\n    then: {decision: allow}\n",
               "t.yaml:2:9: id \"has space\" contains ' ';", NULL);
    load_fails("rules:\n  - id:\n    then: {decision: allow}\n", "t.yaml:2:5: id has no value;",
               NULL);
    load_fails("rules:\n  - id: default\n    then: {decision: allow}\n",
               "t.yaml:2:9: id \"default\" is reserved", NULL);
    char y[512];
    char id[130];
    memset(id, 'a', 129);
    id[129] = '\0';
    snprintf(y, sizeof y, "rules:\n  - id: %s\n    then: {decision: allow}\n", id);
    load_fails(y, "t.yaml:2:9: id is 129 characters long; use at most 128", NULL);
    id[128] = '\0';
    snprintf(y, sizeof y, "rules:\n  - id: %s\n    then: {decision: allow}\n", id);
    policy_free(load_ok(y));
    policy_free(load_ok("rules:\n  - id: A-z_0.9:x\n    then: {decision: allow}\n"));
    /* Control characters are escaped so a message stays on one line. */
    load_fails("rules:\n  - id: \"a\\tb\"\n    then: {decision: allow}\n",
               "t.yaml:2:9: id \"a\\tb\" contains byte 0x09;", NULL);
    load_fails("\"x\\ny\": 1\n", "t.yaml:1:1: unknown key \"x\\ny\" in the policy;", NULL);
}

Test(policy_load_errors, when_values)
{
    load_fails("rules:\n  - id: a\n    when: {step_kind: tool}\n    then: {decision: allow}\n",
               "t.yaml:3:23: step_kind \"tool\" is not a step kind; use one of: tool_call, "
               "llm_call, local",
               NULL);
    load_fails("rules:\n  - id: a\n    when: {step_kind: [local]}\n    then: {decision: allow}\n",
               "t.yaml:3:23: step_kind must be a single kind, not a list; use step_kinds", NULL);
    load_fails("rules:\n  - id: a\n    when: {step_kinds: []}\n    then: {decision: allow}\n",
               "t.yaml:3:24: step_kinds is empty", NULL);
    load_fails("rules:\n  - id: a\n    when: {step_kind: local, step_kinds: [llm_call]}\n"
               "    then: {decision: allow}\n",
               "t.yaml:3:30: step_kind and step_kinds have no kind in common", NULL);
    load_fails("rules:\n  - id: a\n    when: {target: [a, b]}\n    then: {decision: allow}\n",
               "t.yaml:3:20: target must be a single pattern, not a list; use targets", NULL);
    load_fails("rules:\n  - id: a\n    when: {targets: [a, [b]]}\n    then: {decision: allow}\n",
               "t.yaml:3:25: item 2 of targets is a list;", NULL);
    load_fails("rules:\n  - id: a\n    when: {targets: []}\n    then: {decision: allow}\n",
               "t.yaml:3:21: targets is empty", NULL);
    load_fails("rules:\n  - id: a\n    when: {target: \"x[\"}\n    then: {decision: allow}\n",
               "t.yaml:3:20: pattern \"x[\" has a '[' without a closing ']';", NULL);
    load_fails("rules:\n  - id: a\n    when: {target: 'x\\'}\n    then: {decision: allow}\n",
               "t.yaml:3:20: pattern \"x\\\" ends with a lone backslash;", NULL);
    load_fails("rules:\n  - id: a\n    when: {agent: [a]}\n    then: {decision: allow}\n",
               "t.yaml:3:19: agent must be a single agent id, not a list;", NULL);
    load_fails(
        "rules:\n  - id: a\n    when: {agent: x, agent_id: y}\n    then: {decision: allow}\n",
        "t.yaml:3:22: keys \"agent\" (line 3) and \"agent_id\" in when mean the same", NULL);
    load_fails("rules:\n  - id: a\n    when: [target]\n    then: {decision: allow}\n",
               "t.yaml:3:11: when must be a mapping, not a list;", NULL);
    /* An empty or null `when` is allowed: the rule always matches. */
    policy_free(load_ok("rules:\n  - id: a\n    when:\n    then: {decision: allow}\n"));
    policy_free(load_ok("rules:\n  - id: a\n    when: {}\n    then: {decision: allow}\n"));
}

#define TPL_PRED                                                                                   \
    "rules:\n"                                                                                     \
    "  - id: a\n"                                                                                  \
    "    when:\n"                                                                                  \
    "      arguments:\n"                                                                           \
    "        cmd: %s\n"                                                                            \
    "    then: {decision: allow}\n"

Test(policy_load_errors, argument_predicates)
{
    struct {
        const char *pred, *prefix;
    } cases[] = {
        {"{}", "t.yaml:5:14: argument \"cmd\" has no constraint;"},
        {"", "t.yaml:5:9: argument \"cmd\" has no constraint;"},
        {"ls", "t.yaml:5:14: argument \"cmd\" must be a mapping of constraints, not a string;"},
        {"{equal: ls}", "t.yaml:5:15: unknown key \"equal\" in an argument predicate; expected "
                        "one of: equals, not_equals, contains, prefix, one_of, regex, glob"},
        {"{equals: [ls]}", "t.yaml:5:23: equals must be a string, not a list;"},
        {"{equals: }", "t.yaml:5:15: equals has no value;"},
        {"{contains: \"\"}", "t.yaml:5:25: contains \"\" matches every value;"},
        {"{one_of: []}", "t.yaml:5:23: one_of is empty"},
        {"{one_of: ls}", "t.yaml:5:23: one_of must be a list, not a string;"},
        {"{regex: \"a(b\"}", "t.yaml:5:22: regex \"a(b\" does not compile: "},
        {"{regex: \"[z-a]\"}", "t.yaml:5:22: regex \"[z-a]\" does not compile: "},
        {"{regex: '\\d+'}", "t.yaml:5:22: regex \"\\d+\" uses \\d"},
        {"{regex: \"\"}", "t.yaml:5:22: regex \"\" matches every value;"},
        {"{glob: \"[ab\"}", "t.yaml:5:21: glob \"[ab\" has a '[' without a closing ']'"},
        {"{equals: a, equals: b}", "t.yaml:5:26: duplicate key \"equals\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char y[512];
        snprintf(y, sizeof y, TPL_PRED, cases[i].pred);
        load_fails(y, cases[i].prefix, NULL);
    }
    load_fails("rules:\n  - id: a\n    when:\n      arguments: {}\n    then: {decision: allow}\n",
               "t.yaml:4:18: arguments is empty;", NULL);
    load_fails("rules:\n  - id: a\n    when:\n      arguments:\n        x: {equals: a}\n"
               "        x: {prefix: b}\n    then: {decision: allow}\n",
               "t.yaml:6:9: duplicate argument \"x\" in arguments (first at line 5);", NULL);
    /* Bracket expressions are POSIX: \d inside [] is a literal, not rejected. */
    policy_free(one_rule("      arguments:\n        v: {regex: '[\\d]'}\n"));
}

#define TPL_APPROVAL                                                                               \
    "rules:\n"                                                                                     \
    "  - id: a\n"                                                                                  \
    "    then:\n"                                                                                  \
    "      decision: require_approval\n"                                                           \
    "      approval: %s\n"

Test(policy_load_errors, approval_values)
{
    struct {
        const char *approval, *prefix;
    } cases[] = {
        {"{timeout: 5m, approvers: alice}", "t.yaml:5:42: approvers must be a list, not a string;"},
        {"{approvers: [alice, [bob]]}", "t.yaml:5:37: item 2 of approvers is a list;"},
        {"{timout: 5m}", "t.yaml:5:18: unknown key \"timout\" in approval; expected one of: "
                         "timeout, approvers, message"},
        {"{message: [x]}", "t.yaml:5:27: message must be a string, not a list;"},
        {"{timeout: soon}", "t.yaml:5:27: timeout \"soon\" is not a duration;"},
        {"yes", "t.yaml:5:17: approval must be a mapping, not a string;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char y[512];
        snprintf(y, sizeof y, TPL_APPROVAL, cases[i].approval);
        load_fails(y, cases[i].prefix, NULL);
    }
    load_fails("rules:\n  - id: a\n    then:\n      decision: require_approval\n"
               "      approval: {timeout: 5m}\n      approval_config: {timeout: 6m}\n",
               "t.yaml:6:7: keys \"approval\" (line 5) and \"approval_config\" in then mean the "
               "same thing;",
               NULL);
    load_fails("rules:\n  - id: a\n    then:\n      decision: deny\n      approval_config: {}\n",
               "t.yaml:5:7: approval_config is only valid with decision: require_approval", NULL);
    /* Empty approvers list = anyone may approve. */
    struct policy *p = load_ok("rules:\n  - id: a\n    then:\n      decision: require_approval\n"
                               "      approval: {approvers: []}\n");
    struct policy_result r = eval(p, "tool_call", "x", NULL, NULL);
    cr_assert(json_is_array(r.approvers));
    cr_assert_eq(json_array_size(r.approvers), 0);
    cr_assert_eq(r.approval_timeout_ms, 0);
    policy_free(p);
}

Test(policy_load_errors, yaml_features_rejected)
{
    load_fails("rules:\n  - id: a\n    then: *x\n", "t.yaml:3:11: ", NULL);
    load_fails("x: &a 1\n", "t.yaml:1:4: YAML anchor &a is not supported", NULL);
    load_fails("rules:\n  - id: a\n    then:\n      decision: !!str allow\n",
               "t.yaml:4:17: YAML tag", NULL);
    load_fails("rules:\n  - id: a\n    then:\n      decision: \"al\\0low\"\n",
               "t.yaml:4:17: value contains a NUL character;", NULL);
    load_fails("rules:\n  - id: a\x01\n", "t.yaml:2:10: invalid YAML: control characters", NULL);
    load_fails("rules: [\n", "t.yaml:2:1: invalid YAML: ", NULL);
    load_fails("rules:\n  - id: \"unclosed\n", "t.yaml:", "invalid YAML: ");
    /* A billion-laughs document fails at its first anchor. */
    load_fails("a: &a [\"lol\",\"lol\"]\nb: &b [*a,*a]\nc: &c [*b,*b]\n",
               "t.yaml:1:4: YAML anchor &a", NULL);
    /* Absurd nesting is refused before it can hurt. */
    char deep[256] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    load_fails(deep, "t.yaml:1:33: nesting is deeper than 32 levels;", NULL);
    /* Error field names the offending element. */
    struct err e = ERR_INIT;
    const char *y = "rules:\n  - id: a\n    then: {decision: allow}\n"
                    "  - id: b\n    when: {targets: x}\n    then: {decision: allow}\n";
    cr_assert_null(policy_load_string(y, strlen(y), "t.yaml", 0, &e));
    cr_assert_str_eq(e.field, "rules[1].when.targets");
}

Test(policy_load_errors, line_offset)
{
    const char *y = "default_action: deny\n"
                    "rules:\n"
                    "  - id: a\n"
                    "    when: {targett: x}\n"
                    "    then: {decision: allow}\n";
    struct err e = ERR_INIT;
    cr_assert_null(policy_load_string(y, strlen(y), "rebuno.yaml", 12, &e));
    const char *want = "rebuno.yaml:16:12: unknown key \"targett\" in when;";
    cr_assert(!strncmp(e.msg, want, strlen(want)), "got %s", e.msg);
    /* Syntax errors and empty policies are offset too. */
    cr_assert_null(policy_load_string("rules: [\n", 9, "rebuno.yaml", 40, &e));
    cr_assert(!strncmp(e.msg, "rebuno.yaml:42:1: invalid YAML", 30), "got %s", e.msg);
    cr_assert_null(policy_load_string("", 0, "rebuno.yaml", 7, &e));
    cr_assert(!strncmp(e.msg, "rebuno.yaml:8:1: empty policy", 29), "got %s", e.msg);
}

Test(policy_load_errors, limits)
{
    /* 10000 rules load; 10001 do not. */
    size_t cap = 64 + 10001 * 48;
    char *y = malloc(cap);
    size_t off = (size_t)snprintf(y, cap, "rules:\n");
    for (int i = 0; i < 10000; i++)
        off += (size_t)snprintf(y + off, cap - off, "- {id: r%d, then: {decision: allow}}\n", i);
    struct err e = ERR_INIT;
    struct policy *p = policy_load_string(y, off, "t.yaml", 0, &e);
    cr_assert_not_null(p, "%s", e.msg);
    cr_assert_eq(policy_rule_count(p), 10000);
    /* The last rule is still found (a linear scan; make sure nothing truncates). */
    struct policy_result r = eval(p, "tool_call", "x", NULL, NULL);
    cr_assert_str_eq(r.rule_id, "r0");
    policy_free(p);
    off += (size_t)snprintf(y + off, cap - off, "- {id: r10000, then: {decision: allow}}\n");
    cr_assert_null(policy_load_string(y, off, "t.yaml", 0, &e));
    cr_assert(!strncmp(e.msg, "t.yaml:10002:3: too many rules (10001);", 39), "got %s", e.msg);
    free(y);

    /* Duplicate ids are found among many rules. */
    y = malloc(cap);
    off = (size_t)snprintf(y, cap, "rules:\n");
    for (int i = 0; i < 5000; i++)
        off += (size_t)snprintf(y + off, cap - off, "- {id: r%d, then: {decision: allow}}\n", i);
    off += (size_t)snprintf(y + off, cap - off, "- {id: r4321, then: {decision: allow}}\n");
    cr_assert_null(policy_load_string(y, off, "t.yaml", 0, &e));
    cr_assert(!strncmp(e.msg,
                       "t.yaml:5002:8: duplicate rule id \"r4321\" (first used at line "
                       "4323)",
                       66),
              "got %s", e.msg);
    free(y);

    /* Over 1 MiB is refused before parsing. */
    size_t big = POLICY_MAX_BYTES + 1;
    y = malloc(big + 1);
    memset(y, '#', big);
    y[big] = '\0';
    cr_assert_null(policy_load_string(y, big, "t.yaml", 0, &e));
    cr_assert_str_eq(e.msg, "t.yaml: policy is larger than 1 MiB; split it or simplify the rules");
    FILE *f = fopen("/tmp/rebuno_test_policy_big.yaml", "w");
    cr_assert_not_null(f);
    fwrite(y, 1, big, f);
    fclose(f);
    cr_assert_null(policy_load_file("/tmp/rebuno_test_policy_big.yaml", &e));
    cr_assert(strstr(e.msg, "larger than 1 MiB"), "%s", e.msg);
    remove("/tmp/rebuno_test_policy_big.yaml");
    free(y);
}

Test(policy_load, null_values_and_quoting)
{
    /* rules: with nothing = no rules; quoted "" is a real (empty) reason. */
    struct policy *p = load_ok("default_action: allow\nrules:\n");
    cr_assert_eq(policy_rule_count(p), 0);
    policy_free(p);
    p = load_ok("rules:\n  - id: a\n    then: {decision: deny, reason: \"\"}\n");
    struct policy_result r = eval(p, "tool_call", "x", NULL, NULL);
    cr_assert_eq(r.decision, POLICY_DENY);
    cr_assert_str_eq(r.reason, "");
    policy_free(p);
    /* Numbers and booleans written as ids/targets are read as their text. */
    p = load_ok("rules:\n  - id: 42\n    when: {target: 7}\n    then: {decision: allow}\n");
    r = eval(p, "tool_call", "7", NULL, NULL);
    cr_assert_str_eq(r.rule_id, "42");
    policy_free(p);
    /* Flow and block styles are equivalent. */
    p = load_ok("{default_action: deny, rules: [{id: a, when: {step_kind: llm_call}, then: "
                "{decision: allow}}]}");
    expect(p, "llm_call", "m", NULL, POLICY_ALLOW, "a");
    policy_free(p);
}

Test(policy_misc, decision_names)
{
    cr_assert_str_eq(policy_decision_name(POLICY_ALLOW), "allow");
    cr_assert_str_eq(policy_decision_name(POLICY_DENY), "deny");
    cr_assert_str_eq(policy_decision_name(POLICY_REQUIRE_APPROVAL), "require_approval");
}

Test(policy_eval, forked_condition)
{
    static const char y[] = "default_action: deny\n"
                            "rules:\n"
                            "  - id: prs-in-forks\n"
                            "    when: {target: open_pr, forked: true}\n"
                            "    then: {decision: allow}\n"
                            "  - id: prs\n"
                            "    when: {target: open_pr, forked: false}\n"
                            "    then: {decision: require_approval}\n";
    struct err e = ERR_INIT;
    struct policy *p = policy_load_string(y, sizeof y - 1, "forked.yaml", 0, &e);
    cr_assert_not_null(p, "%s", e.msg);
    struct policy_result r;
    struct policy_input in = {"tool_call", "open_pr", "coder", NULL, true};
    policy_eval(p, &in, &r);
    cr_assert_str_eq(r.rule_id, "prs-in-forks");
    cr_assert(r.fork_rule);
    in.forked = false;
    policy_eval(p, &in, &r);
    cr_assert_str_eq(r.rule_id, "prs");
    cr_assert(!r.fork_rule);
    policy_free(p);
    static const char bad[] = "rules:\n  - id: a\n    when: {forked: maybe}\n    then: {decision: allow}\n";
    cr_assert_null(policy_load_string(bad, sizeof bad - 1, "bad.yaml", 0, &e));
    cr_assert(strstr(e.msg, "bad.yaml:3:") && strstr(e.msg, "forked must be true"), "%s", e.msg);
}

/* Upstream's bundles order rules with priority: lowest first, whatever the document order. */
Test(policy_eval, priority_orders_rules)
{
    struct policy *p = load_ok("default_action: deny\nrules:\n"
                               "  - id: ask-shell\n    priority: 20\n    when: {target: shell}\n"
                               "    then: {decision: require_approval}\n"
                               "  - id: safe-shell\n    priority: 10\n    when:\n      target: shell\n"
                               "      arguments: {command: {regex: '^ls'}}\n    then: {decision: allow}\n");
    expect(p, "tool_call", "shell", "{\"command\": \"ls -l\"}", POLICY_ALLOW, "safe-shell");
    expect(p, "tool_call", "shell", "{\"command\": \"rm x\"}", POLICY_REQUIRE_APPROVAL, "ask-shell");
    policy_free(p);
}
