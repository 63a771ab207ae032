/*
 * cmd_agent.c - `rebuno agent`: the agents a kernel knows (upstream's agent commands).
 *
 *   rebuno agent ls             table: ID, DISPATCH (webhook or pull), WORKERS, LEASE, POLICY
 *   rebuno agent get ID         one agent (its webhook URL and policy; never its secret)
 *   rebuno agent add FILE       register the agents of a config file / upstream manifest
 *                               (POST /v0/agents, then POST /v0/policies/{id} for a policy)
 *   rebuno agent rm ID          delete an agent (DELETE /v0/agents/{id})
 *
 * Exit status: 0 ok, 1 the request failed, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"
#include "config/config.h"
#include "policy/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void agent_usage(FILE *f)
{
    fputs("usage: rebuno agent ls | get ID | add FILE | rm ID   [--url URL] [--api-key KEY] [--json]\n"
          "\n"
          "  ls        the kernel's agents: ID, DISPATCH (webhook: the kernel POSTs dispatches to\n"
          "            its webhook_url; pull: it claims or opens the dispatch stream), WORKERS,\n"
          "            LEASE (seconds), POLICY (yes/no)\n"
          "  get ID    one agent, with its webhook URL and policy\n"
          "  add FILE  register every agent of FILE (a config file or upstream's manifest:\n"
          "            agents: [{id, webhook_url?, secret?, lease_timeout_seconds?, policy? |\n"
          "            policy_file?}]); policies are checked here first. Kept by the kernel\n"
          "  rm ID     delete an agent (refused while it has pending, running or blocked\n"
          "            executions)\n"
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

/* Register the agents of a config file: checks every policy before sending anything. */
static int agent_add(struct client *c, const char *file, bool json)
{
    struct config cfg;
    struct err err = ERR_INIT;
    char *argv[] = {"agent", "--config", (char *)file, NULL};
    if (config_load(&cfg, 3, argv, &err) < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        config_fini(&cfg);
        return CLI_FAILED;
    }
    if (cfg.n_agents == 0) {
        fprintf(stderr, "error: %s names no agents; write agents: [{id: ...}]\n", file);
        config_fini(&cfg);
        return CLI_FAILED;
    }
    struct policy **pols = xcalloc((size_t)cfg.n_agents, sizeof *pols);
    int rc = CLI_OK;
    for (int i = 0; i < cfg.n_agents && rc == CLI_OK; i++) {
        const struct config_agent *ag = &cfg.agents[i];
        if (ag->policy_file) pols[i] = policy_load_file(ag->policy_file, &err);
        else if (ag->policy_inline)
            pols[i] = policy_load_string(ag->policy_inline, strlen(ag->policy_inline), cfg.path, ag->policy_line, &err);
        if ((ag->policy_file || ag->policy_inline) && !pols[i]) {
            fprintf(stderr, "error: agent %s: %s\n", ag->name, err.msg);
            rc = CLI_FAILED;
        }
    }
    for (int i = 0; i < cfg.n_agents && rc == CLI_OK; i++) {
        const struct config_agent *ag = &cfg.agents[i];
        json_t *body = json_pack("{s:s}", "id", ag->name), *view = NULL;
        if (ag->webhook_url) json_object_set_new(body, "webhook_url", json_string(ag->webhook_url));
        if (ag->secret) json_object_set_new(body, "secret", json_string(ag->secret));
        if (ag->lease_timeout_seconds)
            json_object_set_new(body, "lease_timeout_seconds", json_integer(ag->lease_timeout_seconds));
        int r = client_request(c, "POST", "/v0/agents", body, NULL, &view, &err);
        json_decref(body);
        if (r >= 0 && pols[i]) {
            char *e = client_escape(c, ag->name);
            char *path = xasprintf("/v0/policies/%s", e);
            free(e);
            body = json_pack("{s:s}", "bundle", policy_source(pols[i]));
            r = client_request(c, "POST", path, body, NULL, NULL, &err);
            json_decref(body);
            free(path);
        }
        if (r < 0) {
            fprintf(stderr, "error: agent %s: ", ag->name);
            cli_print_err(&err);
            rc = CLI_FAILED;
        } else if (json) {
            cli_json_line(stdout, view);
        } else {
            printf("agent %s registered (%s%s)\n", ag->name, ag->webhook_url ? "webhook" : "pull",
                   pols[i] ? ", policy set" : "");
        }
        if (ag->max_attempts && !json)
            fprintf(stderr, "note: agent %s: max_attempts is read from the kernel's own config only\n", ag->name);
        json_decref(view);
    }
    for (int i = 0; i < cfg.n_agents; i++) policy_free(pols[i]);
    free(pols);
    config_fini(&cfg);
    return rc;
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
    bool add = !strcmp(sub, "add"), rm = !strcmp(sub, "rm") || !strcmp(sub, "delete");
    if (!ls && !get && !add && !rm) {
        fprintf(stderr, "error: unknown command 'agent %s'; use ls, get, add or rm\n", sub);
        agent_usage(stderr);
        return CLI_USAGE;
    }
    struct cli_opt opts[] = {{NULL, NULL}};
    struct cli_args a;
    struct err err = ERR_INIT;
    if (cli_parse_action(argc, argv, act, opts, ls ? 0 : 1, &a, &err) < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        agent_usage(stderr);
        return CLI_USAGE;
    }
    if (a.help) {
        agent_usage(stdout);
        return CLI_OK;
    }
    if (!ls && (a.npos < 1 || !*a.pos[0])) {
        fputs(add ? "error: missing FILE: pass a config file with agents: [...]\n"
                  : "error: missing ID: pass the agent's id (see rebuno agent ls)\n",
              stderr);
        return CLI_USAGE;
    }
    struct client c;
    client_init(&c, a.url, a.api_key);
    if (add) {
        int rc = agent_add(&c, a.pos[0], a.json);
        client_fini(&c);
        return rc;
    }
    if (rm) {
        char *e = client_escape(&c, a.pos[0]);
        char *p = xasprintf("/v0/agents/%s", e);
        free(e);
        int rc = client_request(&c, "DELETE", p, NULL, NULL, NULL, &err);
        free(p);
        client_fini(&c);
        if (rc < 0) {
            cli_print_err(&err);
            return CLI_FAILED;
        }
        printf("agent %s deleted\n", a.pos[0]);
        return CLI_OK;
    }
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
        const char *bundle = cli_str(reply, "policy_bundle");
        if (bundle) { /* upstream's agent get shows it: line by line, each made safe to print */
            puts("policy:");
            char *copy = xstrdup(bundle), *save = NULL;
            for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                fputs("  ", stdout);
                cli_put_clean(stdout, line, 0);
                fputc('\n', stdout);
            }
            free(copy);
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
