/*
 * main.c - the rebuno binary: dispatch to one subcommand.
 *
 * Servers: dev, server. Clients of the HTTP API: exec, approval, agent, policy set.
 * Local tools: policy check|eval|test. Each subcommand lives in its own cmd_*.c and gets argv starting at
 * its own name.
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

#define REBUNO_VERSION "0.1.0"

static void usage(FILE *out)
{
    fprintf(out,
            "rebuno %s - durable execution for AI agents\n\n"
            "usage: rebuno <command> [options]\n\n"
            "servers:\n"
            "  dev       run the kernel for local development (SQLite under .rebuno/)\n"
            "  server    run the kernel for configured agents only\n"
            "  sandboxd  run the sandbox service (needs root)\n"
            "clients (REBUNO_URL, default http://127.0.0.1:8080):\n"
            "  exec      create, list, watch, cancel, approve executions\n"
            "  approval  list and decide approvals\n"
            "  agent     list, add and remove the kernel's agents\n"
            "  key       create, list, rotate, revoke scoped API keys\n"
            "  sandbox   create, list, exec in, copy to/from sandboxes (REBUNO_SANDBOX_URL)\n"
            "  drive     create, list, fork, delete drives for sandboxes\n"
            "tools:\n"
            "  policy    check, try (eval, test) or set (on a kernel) a policy file\n"
            "  store     copy a kernel store into another (SQLite -> PostgreSQL)\n"
            "  version   print the version\n\n"
            "Run 'rebuno <command> --help' for a command's options.\n",
            REBUNO_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "dev") || !strcmp(cmd, "server")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "exec")) return cmd_exec(argc - 1, argv + 1);
    if (!strcmp(cmd, "approval")) return cmd_approval(argc - 1, argv + 1);
    if (!strcmp(cmd, "agent")) return cmd_agent(argc - 1, argv + 1);
    if (!strcmp(cmd, "key")) return cmd_key(argc - 1, argv + 1);
    if (!strcmp(cmd, "policy")) return cmd_policy(argc - 1, argv + 1);
    if (!strcmp(cmd, "sandboxd")) return cmd_sandboxd(argc - 1, argv + 1);
    if (!strcmp(cmd, "sandbox")) return cmd_sandbox(argc - 1, argv + 1);
    if (!strcmp(cmd, "drive")) return cmd_drive(argc - 1, argv + 1);
    if (!strcmp(cmd, "store")) return cmd_store(argc - 1, argv + 1);
    if (!strcmp(cmd, "egress-proxy")) return cmd_egress_proxy(argc - 1, argv + 1); /* dev/tests */
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("rebuno %s\n", REBUNO_VERSION);
        return 0;
    }
    fprintf(stderr, "error: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
