/*
 * cmd_agent.c - `rebuno agent`: the agents a kernel knows (upstream's agent commands).
 *
 *   rebuno agent ls             table: ID, DISPATCH (webhook or pull), WORKERS, LEASE, POLICY
 *   rebuno agent get ID         one agent (its webhook URL; never its secret)
 *
 * Exit status: 0 ok, 1 the request failed, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void agent_usage(FILE *f)
{
    fputs("usage: rebuno agent ls | get ID   [--url URL] [--api-key KEY] [--json]\n"
          "\n"
          "  ls      the kernel's agents: ID, DISPATCH (webhook: the kernel POSTs dispatches to\n"
          "          its webhook_url; pull: it claims or opens the dispatch stream), WORKERS,\n"
          "          LEASE (seconds), POLICY (yes/no)\n"
          "  get ID  one agent\n"
          "\n"
          "exit status: 0 ok, 1 the request failed, 2 bad usage\n",
          f);
}

static void row(const json_t *a)
{
    printf("%-24s %-8s %7lld %6llds  %s\n", cli_str(a, "id") ? cli_str(a, "id") : "?",
           cli_str(a, "dispatch") ? cli_str(a, "dispatch") : "?",
           (long long)json_integer_value(json_object_get(a, "workers")),
           (long long)json_integer_value(json_object_get(a, "lease_timeout_seconds")),
           json_is_true(json_object_get(a, "has_policy")) ? "yes" : "no");
}

int cmd_agent(int argc, char **argv)
{
    int act = cli_find_action(argc, argv);
    if (act < 0 || !strcmp(argv[act], "help")) {
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                agent_usage(stdout);
                return CLI_OK;
            }
        if (act < 0) fputs("error: missing command: say what to do, e.g. rebuno agent ls\n", stderr);
        agent_usage(act < 0 ? stderr : stdout);
        return act < 0 ? CLI_USAGE : CLI_OK;
    }
    const char *sub = argv[act];
    bool ls = !strcmp(sub, "ls") || !strcmp(sub, "list"), get = !strcmp(sub, "get");
    if (!ls && !get) {
        fprintf(stderr, "error: unknown command 'agent %s'; use ls or get\n", sub);
        agent_usage(stderr);
        return CLI_USAGE;
    }
    struct cli_opt opts[] = {{NULL, NULL}};
    struct cli_args a;
    struct err err = ERR_INIT;
    if (cli_parse_action(argc, argv, act, opts, get ? 1 : 0, &a, &err) < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        agent_usage(stderr);
        return CLI_USAGE;
    }
    if (a.help) {
        agent_usage(stdout);
        return CLI_OK;
    }
    if (get && (a.npos < 1 || !*a.pos[0])) {
        fputs("error: missing ID: pass the agent's id (see rebuno agent ls)\n", stderr);
        return CLI_USAGE;
    }
    struct client c;
    client_init(&c, a.url, a.api_key);
    char *path;
    if (get) {
        char *e = client_escape(&c, a.pos[0]);
        path = xasprintf("/v0/agents/%s", e);
        free(e);
    } else {
        path = xstrdup("/v0/agents");
    }
    json_t *reply = NULL;
    int rc = client_request(&c, "GET", path, NULL, NULL, &reply, &err);
    free(path);
    if (rc < 0) {
        cli_print_err(&err);
        client_fini(&c);
        return CLI_FAILED;
    }
    if (a.json) {
        cli_json_line(stdout, reply);
    } else if (get) {
        printf("%-24s %-8s %7s %7s  %s\n", "ID", "DISPATCH", "WORKERS", "LEASE", "POLICY");
        row(reply);
        if (cli_str(reply, "webhook_url")) {
            fputs("webhook: ", stdout);
            cli_put_clean(stdout, cli_str(reply, "webhook_url"), 0);
            fputc('\n', stdout);
        }
    } else if (json_array_size(reply) == 0) {
        puts("no agents");
    } else {
        printf("%-24s %-8s %7s %7s  %s\n", "ID", "DISPATCH", "WORKERS", "LEASE", "POLICY");
        for (size_t i = 0; i < json_array_size(reply); i++) row(json_array_get(reply, i));
    }
    json_decref(reply);
    client_fini(&c);
    return CLI_OK;
}
