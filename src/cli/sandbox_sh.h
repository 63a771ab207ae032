/*
 * sandbox_sh.h - `rebuno sandbox sh NAME [-- CMD ARGS...]`: attach this terminal to a
 * terminal in a sandbox (src/cli/cmd_sandbox_sh.c; the server side is
 * docs/sandbox-api.md, "Terminals"). Dispatched from cmd_sandbox.c.
 */
#ifndef REBUNO_CLI_SANDBOX_SH_H
#define REBUNO_CLI_SANDBOX_SH_H

#include <jansson.h>
#include <stdbool.h>

#include "base/err.h"
#include "cli/client.h"

struct sbx_sh_opts {
    const char *name;       /* sandbox name or id */
    const char *user, *cwd; /* or NULL */
    bool sudo;
    json_t *env; /* object of NAME -> value (may be empty) */
    char **cmd;  /* NULL: the server's default shell */
    int ncmd;
};

/*
 * Create the terminal (the sandbox resumes if stopped or paused), attach over a
 * WebSocket, put this terminal in raw mode (restored on every way out, signals
 * included) and relay until the remote process exits. Window-size changes are
 * forwarded. Returns the remote exit code, or CLI_FAILED with err filled when the
 * terminal cannot start or the connection ends before the exit status.
 */
int sbx_cli_sh(struct client *c, const struct sbx_sh_opts *o, struct err *err);

/* Split an http:// URL into host, port (default 80) and path prefix (no trailing
 * '/'). 0, or -1 for another scheme or a malformed URL. */
int sbx_cli_split_url(const char *url, char *host, size_t hn, char *port, size_t pn, char *prefix,
                      size_t xn);

#endif
