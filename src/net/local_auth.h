/*
 * local_auth.h - the token that guards a daemon run with no API keys, and how the
 * clients of the user who started it find that token with no set-up.
 *
 * A kernel without api_keys and sandboxd (always) make a random 256-bit token at every
 * start and require "Authorization: Bearer <token>" on every route but health. The
 * token is written, mode 0600, to <state_dir>/local-token, and registered for the
 * daemon's address in the starting user's own folder
 * ${XDG_CONFIG_HOME:-$HOME/.config}/rebuno/local/<host>_<port> (0700). Both files hold
 * one JSON object:
 *
 *   {"service":"kernel","url":"http://127.0.0.1:8080","token":"<64 hex>","pid":1234}
 *
 * Clients look for an explicit key first (their flag or variable), then the registry
 * entry of the URL's host:port, then the state file relative to the working folder;
 * an entry is used only when its "url" names the address asked for, so a token is
 * never sent to another address than the one it was made for. Both files are removed
 * on a graceful stop. Another local user can read neither, so gets 401.
 *
 * The server keeps the token in a page that a fork() child sees zeroed
 * (MADV_WIPEONFORK), so no child process (sandbox inits, cleaners) inherits it; it is
 * never logged, and never passed in argv or the environment.
 */
#ifndef REBUNO_NET_LOCAL_AUTH_H
#define REBUNO_NET_LOCAL_AUTH_H

#include <stdbool.h>

#include "base/err.h"

struct http_req;

#define LOCAL_AUTH_FILE "local-token"
#define LOCAL_AUTH_TOKEN_LEN 64 /* hex digits of 32 random bytes */

/* ---- server side ---- */

struct local_auth_opts {
    const char *state_dir; /* the token file goes here; created 0700 if missing */
    const char *service;   /* "kernel", "sandboxd": in the file and the 401 messages */
    const char *key_hint;  /* how a client sets a token explicitly, for the 401 messages */
    const char *listen;    /* the listen address, "HOST:PORT" */
    int port;              /* the port actually bound (listen may say 0) */
};

struct local_auth;

/* Make the token and write both files. The state folder must belong to this user (it is
 * made 0700); a registry that cannot be written is only logged. NULL with err filled. */
struct local_auth *local_auth_new(const struct local_auth_opts *o, struct err *err);
/* Whether hdr (the Authorization header, NULL when absent) is "Bearer <the token>";
 * compared in constant time. */
bool local_auth_check(const struct local_auth *la, const char *hdr);
/* Answer r 401 unauthorized (field Authorization), saying where the token is. */
void local_auth_refuse(const struct local_auth *la, struct http_req *r);
/* Absolute path of the token file. */
const char *local_auth_path(const struct local_auth *la);
/* Remove both files (those still holding this token) and forget the token. NULL is ok. */
void local_auth_free(struct local_auth *la);

/* ---- client side ---- */

struct local_auth_found {
    char token[LOCAL_AUTH_TOKEN_LEN + 1]; /* "" when none was found */
    char from[512];                       /* the file it came from */
    char looked[1024];                    /* the files looked at, "A or B", for hints */
};

/*
 * Find the token of the daemon at url ("http://HOST:PORT[/prefix]"): the registry entry
 * of HOST:PORT, else state_file (a path, relative to the working folder unless
 * absolute; NULL for none), whichever was made for that address. 0 with out->token
 * filled, or -ENOENT (out->looked says where it looked).
 */
int local_auth_find(const char *url, const char *state_file, struct local_auth_found *out);

#endif
