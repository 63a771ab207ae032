/*
 * cmd_policy.c - `rebuno policy`: validate policy files and try decisions
 * offline, without a kernel.
 *
 *   rebuno policy check FILE...        load each file strictly; errors as file:line:col
 *   rebuno policy eval FILE --target T [--kind K] [--agent A] [--args JSON]
 *   rebuno policy test FILE --target T ...   upstream's name of eval (its probe form)
 *   rebuno policy set AGENT FILE [--url U] [--api-key K]   check it, then put it on a kernel
 *
 * Exit status: 0 success, 1 a policy failed to load, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"
#include "policy/policy.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void policy_usage(FILE *f)
{
    fputs("usage: rebuno policy check FILE...\n"
          "       rebuno policy eval FILE --target T [--kind tool_call|llm_call|local]\n"
          "                               [--agent A] [--args JSON]\n"
          "\n"
          "  check  load each policy file strictly; prints 'FILE: ok (N rules, default_action\n"
          "         D)' or the first problem as FILE:LINE:COL: what is wrong; how to fix it\n"
          "       rebuno policy test FILE --target T ...   (the same as eval)\n"
          "       rebuno policy set AGENT FILE [--url URL] [--api-key KEY]\n"
          "\n"
          "  eval   decide one step offline; prints decision=D rule=ID reason=\"...\"\n"
          "         --kind defaults to tool_call; --args must be a JSON object\n"
          "  test   upstream's name of eval; --target is required (case files are not read)\n"
          "  set    check FILE here, then make it AGENT's policy on the kernel\n"
          "         (POST /v0/policies/AGENT; lasts until the kernel restarts)\n"
          "\n"
          "exit status: 0 ok, 1 a policy did not load, 2 bad usage\n",
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
    if (!strcmp(sub, "eval") || !strcmp(sub, "test")) return policy_eval_cmd(argc - 2, argv + 2);
    if (!strcmp(sub, "set")) return policy_set(argc - 1, argv + 1);
    fprintf(stderr, "rebuno policy: unknown subcommand \"%s\"; use check, eval, test or set\n", sub);
    policy_usage(stderr);
    return 2;
}
