/*
 * config.h - one table of settings shared by the config file, env vars and flags.
 *
 * Each setting has a name (the YAML key), an env var (REBUNO_<NAME>), a flag
 * (--name with '_' as '-'), a type, a default and bounds. Precedence: flag > env >
 * file > default. The file also holds the lists that only make sense there:
 * agents (name or id, policy, lease, webhook_url, secret) and api_keys. Errors name file:line:col and the fix.
 */
#ifndef REBUNO_CONFIG_CONFIG_H
#define REBUNO_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

struct config_agent {
    char *name;
    char *policy_file;   /* resolved relative to the config file */
    char *policy_inline; /* YAML text of an inline policy */
    int policy_line;     /* line of the inline policy in the config file */
    int64_t lease_timeout_seconds, max_attempts; /* 0 = default */
    char *webhook_url;   /* upstream's push dispatch: the kernel POSTs each dispatch here */
    char *secret;        /* HMAC key: signs webhooks, verifies the agent's signed calls */
};

struct config_key {
    char *key, *role, *agent;
};

struct config {
    char *path; /* config file, NULL when none */
    char *listen, *state_dir, *store, *log_level, *sandboxes, *sandbox_listen;
    char *sandbox_vercel_listen; /* dev: sandboxd's Vercel-compatible endpoint, or "off" */
    char *sandbox_e2b_listen; /* dev: sandboxd's E2B-compatible endpoint, or "off" */
    char *sandbox_upstream_ca, *sandbox_upstream_overrides; /* dev: passed to sandboxd */
    char *sandbox_registry_auth, *sandbox_registry_ca, *sandbox_registry_http; /* dev: too */
    char *dashboard_sandboxes; /* server: HOST:PORT of a sandboxd whose /v1 the dashboard calls */
    char *judge_url, *judge_model, *judge_api_key; /* the model judge rules ask (OpenAI-compatible) */
    int64_t judge_timeout_seconds;
    int64_t lease_timeout_seconds, max_attempts, approval_timeout_seconds;
    int64_t http_max_connections, http_max_connections_per_peer; /* the API server's limits */
    int64_t http_header_timeout_seconds, http_body_timeout_seconds, http_body_min_rate;
    int64_t http_idle_timeout_seconds;
    struct config_agent *agents;
    int n_agents;
    struct config_key *keys;
    int n_keys;
};

/* Fill c from defaults, --config FILE (or REBUNO_CONFIG), env and the flags in argv
 * (argv[0] is the subcommand). Unknown flags are errors. */
int config_load(struct config *c, int argc, char **argv, struct err *err);
void config_fini(struct config *c);
/* Print the settings table (for --help). */
void config_usage(FILE *out);
/* Path of the SQLite database this config uses. Caller frees. */
char *config_store_path(const struct config *c);

#endif
