/*
 * cmd_key.c - `rebuno key`: upstream's scoped API keys on a kernel (/v0/api-keys).
 *
 *   rebuno key create NAME --scope S [--scope S | --scope S1,S2]   print the key with its token
 *   rebuno key ls                                                  every key (no tokens)
 *   rebuno key rotate ID                                           a new token, same id and scopes
 *   rebuno key revoke ID                                           revoke it (repeatable)
 *
 * Output is the kernel's JSON, one line per key, as upstream prints it. Needs an admin key
 * (or one with api_keys:manage) in REBUNO_API_KEY / --api-key.
 * Exit status: 0 ok, 1 the request failed, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void key_usage(FILE *f)
{
    fputs("usage: rebuno key create NAME --scope S [--scope S...] | ls | rotate ID | revoke ID\n"
          "                  [--url URL] [--api-key KEY]\n"
          "\n"
          "  create  make a key with these scopes (repeat --scope or separate with commas):\n"
          "          executions:read executions:write approvals:read approvals:write\n"
          "          agents:read agents:write policies:write api_keys:manage\n"
          "          prints it with its token, which is shown only this once\n"
          "  ls      the keys: id, name, scopes, prefix, created_at, revoked_at\n"
          "  rotate  replace a key's token (the old one stops working); prints the new one\n"
          "  revoke  stop a key working (repeatable)\n"
          "\n"
          "exit status: 0 ok, 1 the request failed, 2 bad usage\n",
          f);
}

/* Take --scope values out of argv (into scopes, split at commas); returns the new argc. */
static int take_scopes(int argc, char **argv, char **out, json_t *scopes, struct err *err)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--scope")) {
            if (i + 1 >= argc) return err_invalid(err, "scope", "--scope needs a value, e.g. --scope executions:read");
            v = argv[++i];
        } else if (!strncmp(argv[i], "--scope=", 8)) {
            v = argv[i] + 8;
        } else {
            out[n++] = argv[i];
            continue;
        }
        char *copy = xstrdup(v), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (*t) json_array_append_new(scopes, json_string(t));
        free(copy);
    }
    out[n] = NULL;
    return n;
}

int cmd_key(int argc, char **argv)
{
    struct err err = ERR_INIT;
    json_t *scopes = json_array();
    char **args = xcalloc((size_t)argc + 1, sizeof *args);
    int rc = CLI_USAGE;
    int n = take_scopes(argc, argv, args, scopes, &err);
    if (n < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        goto out;
    }
    int act = cli_find_action(n, args);
    if (act < 0 || !strcmp(args[act], "help")) {
        bool help = false;
        for (int i = 1; i < n; i++) help = help || !strcmp(args[i], "-h") || !strcmp(args[i], "--help");
        if (act < 0 && !help) fputs("error: missing command: say what to do, e.g. rebuno key ls\n", stderr);
        key_usage(act < 0 && !help ? stderr : stdout);
        rc = act < 0 && !help ? CLI_USAGE : CLI_OK;
        goto out;
    }
    const char *sub = args[act];
    bool create = !strcmp(sub, "create"), ls = !strcmp(sub, "ls") || !strcmp(sub, "list");
    bool rotate = !strcmp(sub, "rotate"), revoke = !strcmp(sub, "revoke");
    if (!create && !ls && !rotate && !revoke) {
        fprintf(stderr, "error: unknown command 'key %s'; use create, ls, rotate or revoke\n", sub);
        key_usage(stderr);
        goto out;
    }
    struct cli_opt opts[] = {{NULL, NULL}};
    struct cli_args a;
    if (cli_parse_action(n, args, act, opts, ls ? 0 : 1, &a, &err) < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        key_usage(stderr);
        goto out;
    }
    if (a.help) {
        key_usage(stdout);
        rc = CLI_OK;
        goto out;
    }
    if (!ls && (a.npos < 1 || !*a.pos[0])) {
        fputs(create ? "error: missing NAME: say what the key is for, e.g. rebuno key create ci --scope executions:read\n"
                     : "error: missing ID: pass the key's id (see rebuno key ls)\n",
              stderr);
        goto out;
    }
    if (create && json_array_size(scopes) == 0) {
        fputs("error: missing --scope: give at least one, e.g. --scope executions:read\n", stderr);
        goto out;
    }
    struct client c;
    client_init(&c, a.url, a.api_key);
    json_t *body = NULL, *reply = NULL;
    char *path;
    const char *method = "POST";
    if (create) {
        path = xstrdup("/v0/api-keys");
        body = json_pack("{s:s, s:O}", "name", a.pos[0], "scopes", scopes);
    } else if (ls) {
        path = xstrdup("/v0/api-keys");
        method = "GET";
    } else {
        char *e = client_escape(&c, a.pos[0]);
        path = xasprintf(rotate ? "/v0/api-keys/%s/rotate" : "/v0/api-keys/%s", e);
        free(e);
        if (revoke) method = "DELETE";
    }
    int r = client_request(&c, method, path, body, NULL, &reply, &err);
    json_decref(body);
    free(path);
    client_fini(&c);
    if (r < 0) {
        cli_print_err(&err);
        rc = CLI_FAILED;
        goto out;
    }
    if (ls)
        for (size_t i = 0; i < json_array_size(reply); i++) cli_json_line(stdout, json_array_get(reply, i));
    else if (revoke)
        printf("revoked %s\n", a.pos[0]);
    else
        cli_json_line(stdout, reply);
    json_decref(reply);
    rc = CLI_OK;
out:
    json_decref(scopes);
    free(args);
    return rc;
}
