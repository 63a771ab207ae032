/*
 * cmd_policy.c - `rebuno policy`: validate policy files and try decisions offline
 * (check, eval, test), and put them on a kernel (set; test --execution).
 *
 *   rebuno policy check FILE...        load each file strictly; errors as file:line:col
 *   rebuno policy eval FILE --target T [--kind K] [--agent A] [--args JSON]
 *   rebuno policy test FILE [--cases F]      upstream's: run FILE's .policytest.yaml cases
 *   rebuno policy test FILE --execution ID --agent-id A   replay an execution's steps (kernel)
 *   rebuno policy test FILE --target T ...   its probe form (as eval)
 *   rebuno policy set AGENT FILE [--url U] [--api-key K]   check it, then put it on a kernel
 *
 * Exit status: 0 success, 1 a policy failed to load or a test case failed, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"
#include "policy/policy.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void policy_usage(FILE *f)
{
    fputs("usage: rebuno policy check FILE...\n"
          "       rebuno policy eval FILE --target T [--kind tool_call|llm_call|local]\n"
          "                               [--agent A] [--args JSON]\n"
          "       rebuno policy test FILE [--cases CASES.yaml]\n"
          "       rebuno policy test FILE --execution ID --agent-id A [--url URL] [--api-key KEY]\n"
          "       rebuno policy test FILE --target T ...   (the same as eval)\n"
          "       rebuno policy set AGENT FILE [--url URL] [--api-key KEY]\n"
          "\n"
          "  check  load each policy file strictly; prints 'FILE: ok (N rules, default_action\n"
          "         D)' or the first problem as FILE:LINE:COL: what is wrong; how to fix it\n"
          "  eval   decide one step offline; prints decision=D rule=ID reason=\"...\"\n"
          "         --kind defaults to tool_call; --args must be a JSON object\n"
          "  test   run the cases of FILE's .policytest.yaml (shell.yaml: shell.policytest.yaml,\n"
          "         or --cases): {agent_id?, cases: [{name?, target, kind?, args?, expect?,\n"
          "         expect_rule?}]}; prints PASS/FAIL per case (a failure as - want / + got) and\n"
          "         the rules no case reached; exit 1 when a case fails. --execution replays an\n"
          "         execution's recorded steps against FILE on a kernel. --target probes one\n"
          "         input, as eval\n"
          "  set    check FILE here, then make it AGENT's policy on the kernel\n"
          "         (POST /v0/policies/AGENT; the kernel keeps it across restarts)\n"
          "\n"
          "exit status: 0 ok, 1 a policy did not load or a case failed, 2 bad usage\n",
          f);
}

static bool is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

static int policy_check(int argc, char **argv)
{
    int failed = 0;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            policy_usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "rebuno policy check: unknown option %s; it takes only file names\n",
                    argv[i]);
            return 2;
        }
    }
    if (argc == 0) {
        fputs("rebuno policy check: no file given; pass one or more policy YAML files\n", stderr);
        policy_usage(stderr);
        return 2;
    }
    for (int i = 0; i < argc; i++) {
        struct err err = ERR_INIT;
        struct policy *p = policy_load_file(argv[i], &err);
        if (!p) {
            fprintf(stderr, "%s\n", err.msg);
            failed++;
            continue;
        }
        size_t n = policy_rule_count(p);
        printf("%s: ok (%zu rule%s, default_action %s)\n", argv[i], n, n == 1 ? "" : "s",
               policy_decision_name(policy_default_action(p)));
        policy_free(p);
    }
    return failed ? 1 : 0;
}

/* The value of option `name` at argv[*i], as "--name V" or "--name=V"; NULL if
 * argv[*i] is not that option. Sets *missing when the value is absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n)) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* Print s as the inside of a double-quoted string, escaping what would break
 * the one-line output. */
static void print_quoted(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static int policy_eval_cmd(int argc, char **argv)
{
    const char *file = NULL, *target = NULL, *kind = "tool_call", *agent = NULL, *args_text = NULL;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (is_help(argv[i])) {
            policy_usage(stdout);
            return 0;
        }
        if ((v = opt_value(argc, argv, &i, "--target", &missing)))
            target = v;
        else if ((v = opt_value(argc, argv, &i, "--kind", &missing)))
            kind = v;
        else if ((v = opt_value(argc, argv, &i, "--agent", &missing)))
            agent = v;
        else if ((v = opt_value(argc, argv, &i, "--args", &missing)))
            args_text = v;
        else if (missing) {
            fprintf(stderr, "rebuno policy eval: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr,
                    "rebuno policy eval: unknown option %s; use --target, --kind, --agent or "
                    "--args\n",
                    argv[i]);
            return 2;
        } else if (file) {
            fprintf(stderr, "rebuno policy eval: one policy file only (got %s and %s)\n", file,
                    argv[i]);
            return 2;
        } else {
            file = argv[i];
        }
    }
    if (!file || !target) {
        fprintf(stderr, "rebuno policy eval: %s\n",
                !file ? "no policy file given" : "--target is required (the tool or model name)");
        policy_usage(stderr);
        return 2;
    }
    if (strcmp(kind, "tool_call") && strcmp(kind, "llm_call") && strcmp(kind, "local")) {
        fprintf(stderr,
                "rebuno policy eval: --kind \"%s\" is not a step kind; use tool_call, llm_call "
                "or local\n",
                kind);
        return 2;
    }
    json_t *args = NULL;
    if (args_text) {
        json_error_t jerr;
        args = json_loads(args_text, JSON_DECODE_ANY, &jerr);
        if (!args) {
            fprintf(stderr,
                    "rebuno policy eval: --args is not valid JSON (column %d: %s); pass a JSON "
                    "object in single quotes, e.g. --args '{\"command\": \"ls -l\"}'\n",
                    jerr.column, jerr.text);
            return 2;
        }
        if (!json_is_object(args)) {
            fprintf(stderr, "rebuno policy eval: --args must be a JSON object of argument names to "
                            "values, e.g. --args '{\"command\": \"ls -l\"}'\n");
            json_decref(args);
            return 2;
        }
    }
    struct err err = ERR_INIT;
    struct policy *p = policy_load_file(file, &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        json_decref(args);
        return 1;
    }
    struct policy_input in = {.kind = kind, .target = target, .agent = agent, .args = args};
    struct policy_result res;
    policy_eval(p, &in, &res);
    printf("decision=%s rule=%s reason=", policy_decision_name(res.decision), res.rule_id);
    print_quoted(res.reason);
    putchar('\n');
    policy_free(p);
    json_decref(args);
    return 0;
}

/* The label of a result: its name, else target and arguments (as upstream prints). */
static void print_label(const json_t *r)
{
    const char *name = cli_str(r, "name");
    if (name) {
        cli_put_clean(stdout, name, 120);
        return;
    }
    cli_put_clean(stdout, cli_str(r, "target"), 80);
    const json_t *args = json_object_get(r, "args");
    if (json_object_size(args)) {
        char *a = cli_json_short(args, 100);
        putchar(' ');
        fputs(a, stdout);
        free(a);
    }
    const char *step = cli_str(r, "step_id");
    if (step) printf(" (step %.12s)", step);
}

/* One line per case; a failing one shows what was wanted against what came, as a diff. */
static int print_report(const json_t *rep)
{
    const json_t *results = json_object_get(rep, "results"), *r;
    size_t i, failed = 0;
    json_array_foreach(results, i, r) {
        bool pass = json_is_true(json_object_get(r, "pass"));
        const char *decision = cli_str(r, "decision"), *rule = cli_str(r, "rule_id"), *reason = cli_str(r, "reason");
        fputs(pass ? "PASS " : "FAIL ", stdout);
        print_label(r);
        if (pass) {
            printf(": %s (rule %s)\n", decision, rule);
            continue;
        }
        failed++;
        putchar('\n');
        const char *want = cli_str(r, "expect"), *want_rule = cli_str(r, "expect_rule");
        if (want && strcmp(want, decision) != 0) {
            printf("  - want: %s\n  + got:  %s (rule %s", want, decision, rule);
        } else {
            printf("  - want rule: %s\n  + got rule:  %s (%s", want_rule ? want_rule : "?", rule, decision);
        }
        if (reason) {
            fputs(": ", stdout);
            cli_put_clean(stdout, reason, 160);
        }
        puts(")");
        if (cli_str(r, "was_rule") && strcmp(cli_str(r, "was_rule"), rule) != 0)
            printf("    (recorded by rule %s)\n", cli_str(r, "was_rule"));
    }
    size_t n = json_array_size(results);
    printf("%zu case%s: %zu passed, %zu failed\n", n, n == 1 ? "" : "s", n - failed, failed);
    const json_t *un = json_object_get(rep, "unexercised_rules"), *u;
    if (json_array_size(un)) {
        fputs("rules no case reached:", stdout);
        json_array_foreach(un, i, u) {
            printf(" %s", json_string_value(u));
        }
        putchar('\n');
    }
    return failed ? 1 : 0;
}

/* The .policytest.yaml beside a bundle: shell.yaml -> shell.policytest.yaml. */
static char *sibling_cases(const char *file)
{
    size_t n = strlen(file);
    if (n > 5 && !strcmp(file + n - 5, ".yaml")) return xasprintf("%.*s.policytest.yaml", (int)(n - 5), file);
    if (n > 4 && !strcmp(file + n - 4, ".yml")) return xasprintf("%.*s.policytest.yaml", (int)(n - 4), file);
    return xasprintf("%s.policytest.yaml", file);
}

/* Upstream's case file {agent_id?, cases: [...]}, evaluated here. */
static int run_case_file(const struct policy *p, const char *cases_path)
{
    struct err err = ERR_INIT;
    json_t *doc = policy_yaml_file_json(cases_path, &err);
    if (!doc) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *k;
    json_t *v;
    if (!json_is_object(doc)) {
        fprintf(stderr, "%s: must be a mapping with cases: [...] (and agent_id:)\n", cases_path);
        json_decref(doc);
        return 1;
    }
    json_object_foreach(doc, k, v) if (strcmp(k, "agent_id") && strcmp(k, "cases")) {
        fprintf(stderr, "%s: unknown key \"%s\"; a case file has agent_id and cases\n", cases_path, k);
        json_decref(doc);
        return 1;
    }
    const json_t *agent = json_object_get(doc, "agent_id"), *cases = json_object_get(doc, "cases");
    if (agent && !json_is_string(agent)) {
        fprintf(stderr, "%s: agent_id must be a string\n", cases_path);
        json_decref(doc);
        return 1;
    }
    if (!cases) {
        fprintf(stderr, "%s: no cases: write cases: [{target: ..., expect: allow}]\n", cases_path);
        json_decref(doc);
        return 1;
    }
    json_t *rep = policy_run_cases(p, cases, json_string_value(agent), "cases", &err);
    json_decref(doc);
    if (!rep) {
        fprintf(stderr, "%s: %s\n", cases_path, err.msg);
        return 1;
    }
    int rc = print_report(rep);
    json_decref(rep);
    return rc;
}

/* `policy test FILE`: upstream's. Cases from FILE's .policytest.yaml (or --cases), or an
 * execution's recorded steps replayed on a kernel (--execution ID --agent-id A); with
 * --target it probes one input (as policy eval). */
static int policy_test_cmd(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--target") || !strncmp(argv[i], "--target=", 9)) return policy_eval_cmd(argc, argv);
    const char *file = NULL, *cases = NULL, *exec_id = NULL, *agent = NULL, *url = NULL, *key = NULL;
    for (int i = 0; i < argc; i++) {
        bool missing = false;
        const char *v;
        if (is_help(argv[i])) {
            policy_usage(stdout);
            return 0;
        }
        if ((v = opt_value(argc, argv, &i, "--cases", &missing))) cases = v;
        else if ((v = opt_value(argc, argv, &i, "--execution", &missing))) exec_id = v;
        else if ((v = opt_value(argc, argv, &i, "--agent-id", &missing))) agent = v;
        else if ((v = opt_value(argc, argv, &i, "--url", &missing))) url = v;
        else if ((v = opt_value(argc, argv, &i, "--api-key", &missing))) key = v;
        else if (missing) {
            fprintf(stderr, "rebuno policy test: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "rebuno policy test: unknown option %s; use --cases, --target, --execution, "
                            "--agent-id\n", argv[i]);
            return 2;
        } else if (file) {
            fprintf(stderr, "rebuno policy test: one policy file only (got %s and %s)\n", file, argv[i]);
            return 2;
        } else {
            file = argv[i];
        }
    }
    if (!file) {
        fputs("rebuno policy test: no policy file given\n", stderr);
        policy_usage(stderr);
        return 2;
    }
    if (exec_id && !agent) {
        fputs("rebuno policy test: --execution needs --agent-id (the agent whose steps they are)\n", stderr);
        return 2;
    }
    struct err err = ERR_INIT;
    struct policy *p = policy_load_file(file, &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int rc;
    if (exec_id) {
        struct client c;
        client_init(&c, url, key);
        char *e = client_escape(&c, agent);
        char *path = xasprintf("/v0/policies/%s/test", e);
        free(e);
        json_t *body = json_pack("{s:s, s:s}", "bundle", policy_source(p), "execution_id", exec_id), *rep = NULL;
        rc = client_request(&c, "POST", path, body, NULL, &rep, &err) < 0 ? -1 : 0;
        json_decref(body);
        free(path);
        client_fini(&c);
        if (rc < 0) {
            cli_print_err(&err);
            rc = 1;
        } else {
            rc = print_report(rep);
        }
        json_decref(rep);
    } else {
        char *sib = cases ? NULL : sibling_cases(file);
        rc = run_case_file(p, cases ? cases : sib);
        free(sib);
    }
    policy_free(p);
    return rc;
}

/* `policy set AGENT FILE`: refuse a bad file here (file:line:col), then POST it. */
static int policy_set(int argc, char **argv)
{
    struct cli_opt opts[] = {{NULL, NULL}};
    struct cli_args a;
    struct err err = ERR_INIT;
    if (cli_parse(argc, argv, opts, 2, &a, &err) < 0) {
        fprintf(stderr, "rebuno policy set: %s\n", err.msg);
        return 2;
    }
    if (a.help) {
        policy_usage(stdout);
        return 0;
    }
    if (a.npos < 2) {
        fputs("rebuno policy set: pass the agent and the policy file, e.g. rebuno policy set coder policy.yaml\n",
              stderr);
        return 2;
    }
    struct policy *p = policy_load_file(a.pos[1], &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    policy_free(p);
    FILE *f = fopen(a.pos[1], "rb");
    struct buf text;
    buf_init(&text, 1 << 20);
    char chunk[4096];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (buf_append(&text, chunk, n) < 0) break;
    if (f) fclose(f);
    struct client c;
    client_init(&c, a.url, a.api_key);
    char *e = client_escape(&c, a.pos[0]);
    char *path = xasprintf("/v0/policies/%s", e);
    free(e);
    json_t *body = json_pack("{s:s%}", "bundle", text.data ? text.data : "", text.len);
    int rc = client_request(&c, "POST", path, body, NULL, NULL, &err);
    json_decref(body);
    free(path);
    buf_fini(&text);
    client_fini(&c);
    if (rc < 0) {
        cli_print_err(&err);
        return 1;
    }
    printf("policy of %s set from %s\n", a.pos[0], a.pos[1]);
    return 0;
}

int cmd_policy(int argc, char **argv)
{
    if (argc < 2) {
        fputs("rebuno policy: missing subcommand (check or eval)\n", stderr);
        policy_usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (is_help(sub) || !strcmp(sub, "help")) {
        policy_usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "check")) return policy_check(argc - 2, argv + 2);
    if (!strcmp(sub, "eval")) return policy_eval_cmd(argc - 2, argv + 2);
    if (!strcmp(sub, "test")) return policy_test_cmd(argc - 2, argv + 2);
    if (!strcmp(sub, "set")) return policy_set(argc - 1, argv + 1);
    fprintf(stderr, "rebuno policy: unknown subcommand \"%s\"; use check, eval, test or set\n", sub);
    policy_usage(stderr);
    return 2;
}
