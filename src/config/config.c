/*
 * config.c - loading the settings table from YAML, env and flags (see config.h).
 *
 * The YAML file is read with libyaml's document API so every node keeps its
 * line and column for errors. Strings may reference environment variables as
 * ${VAR} (an unset variable is an error, so a missing secret never becomes an
 * empty key). Anchors and aliases are rejected.
 */
#include "config/config.h"
#include "store/store.h"

#include <errno.h>
#include <libgen.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/buf.h"
#include "base/names.h"
#include "base/xalloc.h"

enum ctype { C_STR, C_INT };

struct setting {
    const char *name, *env, *help;
    enum ctype type;
    const char *def_str;
    int64_t def_int, min, max;
    size_t off;
};

#define I(name, env, def, min, max, help) {#name, env, help, C_INT, NULL, def, min, max, offsetof(struct config, name)}

static const struct setting settings[] = {
    {"listen", "REBUNO_LISTEN", "address the kernel listens on", C_STR, "127.0.0.1:8080", 0, 0, 0, offsetof(struct config, listen)},
    {"state_dir", "REBUNO_STATE_DIR", "folder for the database and other state", C_STR, ".rebuno", 0, 0, 0, offsetof(struct config, state_dir)},
    {"store", "REBUNO_STORE", "store: sqlite:PATH or postgres://user@host/db (default: sqlite in state_dir)", C_STR, "", 0, 0, 0, offsetof(struct config, store)},
    {"log_level", "REBUNO_LOG_LEVEL", "debug, info, warn or error", C_STR, "info", 0, 0, 0, offsetof(struct config, log_level)},
    {"sandboxes", "REBUNO_SANDBOXES", "dev: run the sandbox service too (auto = when root, on, off)", C_STR, "auto", 0, 0, 0, offsetof(struct config, sandboxes)},
    {"sandbox_listen", "REBUNO_SANDBOX_LISTEN", "dev: address of the sandbox service", C_STR, "127.0.0.1:8090", 0, 0, 0, offsetof(struct config, sandbox_listen)},
    {"sandbox_vercel_listen", "REBUNO_SANDBOX_VERCEL_LISTEN", "dev: address of the sandbox service's Vercel-compatible endpoint (docs/vercel.md), or off", C_STR, "127.0.0.1:8092", 0, 0, 0, offsetof(struct config, sandbox_vercel_listen)},
    {"sandbox_e2b_listen", "REBUNO_SANDBOX_E2B_LISTEN", "dev: address of the sandbox service's E2B-compatible endpoint (docs/e2b.md), or off", C_STR, "127.0.0.1:8091", 0, 0, 0, offsetof(struct config, sandbox_e2b_listen)},
    {"sandbox_upstream_ca", "REBUNO_SANDBOX_UPSTREAM_CA", "dev: extra PEM CA the egress proxy trusts for upstream servers", C_STR, "", 0, 0, 0, offsetof(struct config, sandbox_upstream_ca)},
    {"sandbox_upstream_overrides", "REBUNO_SANDBOX_UPSTREAM_OVERRIDES", "dev: HOST=ADDR:PORT[,...] the egress proxy dials instead of resolving HOST", C_STR, "", 0, 0, 0, offsetof(struct config, sandbox_upstream_overrides)},
    {"sandbox_registry_auth", "REBUNO_SANDBOX_REGISTRY_AUTH", "dev: docker-style auth.json with credentials sandboxd uses to pull images", C_STR, "", 0, 0, 0, offsetof(struct config, sandbox_registry_auth)},
    {"sandbox_registry_ca", "REBUNO_SANDBOX_REGISTRY_CA", "dev: extra PEM CA sandboxd trusts for image registries", C_STR, "", 0, 0, 0, offsetof(struct config, sandbox_registry_ca)},
    {"sandbox_registry_http", "REBUNO_SANDBOX_REGISTRY_HTTP", "dev: HOST[:PORT][,...] registries sandboxd reaches over plain http", C_STR, "", 0, 0, 0, offsetof(struct config, sandbox_registry_http)},
    {"dashboard_sandboxes", "REBUNO_DASHBOARD_SANDBOXES", "server: HOST:PORT of a sandbox service (started with --ui-origin of this kernel) whose sandboxes the dashboard shows", C_STR, "", 0, 0, 0, offsetof(struct config, dashboard_sandboxes)},
    {"judge_url", "REBUNO_JUDGE_URL", "OpenAI-compatible chat completions URL that judge policy rules ask (empty: judge rules deny)", C_STR, "", 0, 0, 0, offsetof(struct config, judge_url)},
    {"judge_model", "REBUNO_JUDGE_MODEL", "model name sent to judge_url", C_STR, "", 0, 0, 0, offsetof(struct config, judge_model)},
    {"judge_api_key", "REBUNO_JUDGE_API_KEY", "bearer key for judge_url (prefer the env var)", C_STR, "", 0, 0, 0, offsetof(struct config, judge_api_key)},
    I(judge_timeout_seconds, "REBUNO_JUDGE_TIMEOUT_SECONDS", 5, 1, 120, "how long a judge rule waits for the model before its fallback"),
    I(lease_timeout_seconds, "REBUNO_LEASE_TIMEOUT_SECONDS", 120, 1, 86400, "default lease of a claimed dispatch"),
    I(max_attempts, "REBUNO_MAX_ATTEMPTS", 5, 1, 1000, "expired leases before an execution fails (dispatch_exhausted)"),
    I(approval_timeout_seconds, "REBUNO_APPROVAL_TIMEOUT_SECONDS", 900, 1, 2592000, "default approval timeout"),
    I(http_max_connections, "REBUNO_HTTP_MAX_CONNECTIONS", 4096, 1, 1000000, "API connections at most; when full, a new one sheds the one waiting longest for a request"),
    I(http_max_connections_per_peer, "REBUNO_HTTP_MAX_CONNECTIONS_PER_PEER", 1024, 1, 1000000, "API connections per client address (IPv6: per /64; every local client is 127.0.0.1)"),
    I(http_header_timeout_seconds, "REBUNO_HTTP_HEADER_TIMEOUT_SECONDS", 10, 1, 3600, "a request head must be complete this long after it began (accept, or its first byte)"),
    I(http_body_timeout_seconds, "REBUNO_HTTP_BODY_TIMEOUT_SECONDS", 10, 1, 3600, "a request body's grace, after which it must average http_body_min_rate"),
    I(http_body_min_rate, "REBUNO_HTTP_BODY_MIN_RATE", 1024, 1, 1073741824, "bytes/s a request body must average after its grace"),
    I(http_idle_timeout_seconds, "REBUNO_HTTP_IDLE_TIMEOUT_SECONDS", 60, 1, 86400, "a keep-alive connection with no request, or a reply making no progress, is closed after this"),
};

static char **str_field(struct config *c, const struct setting *s)
{
    return (char **)((char *)c + s->off);
}

static int64_t *int_field(struct config *c, const struct setting *s)
{
    return (int64_t *)((char *)c + s->off);
}

/* where names the source for errors ("rebuno.yaml:3:8", "environment variable REBUNO_X",
 * "--flag"); fix is what to do about a bad value there. */
static int set_value(struct config *c, const struct setting *s, const char *v, const char *where,
                     const char *fix, struct err *err)
{
    if (s->type == C_STR) {
        free(*str_field(c, s));
        *str_field(c, s) = xstrdup(v);
        return 0;
    }
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < s->min || n > s->max)
        return err_invalid(err, s->name, "%s: %s must be an integer between %lld and %lld (got \"%s\"); %s",
                           where, s->name, (long long)s->min, (long long)s->max, v, fix);
    *int_field(c, s) = n;
    return 0;
}

static const struct setting *find_setting(const char *name)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (strcmp(settings[i].name, name) == 0) return &settings[i];
    return NULL;
}

/* --- YAML file --- */

struct yctx {
    yaml_document_t doc;
    const char *file;
    struct err *err;
};

static int yerr(struct yctx *y, yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int yerr(struct yctx *y, yaml_node_t *n, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(y->err, 400, "config_invalid", "", "%s:%zu:%zu: %s", y->file,
                   n ? n->start_mark.line + 1 : 0, n ? n->start_mark.column + 1 : 0, msg);
}

/* Expand ${VAR}; an unset variable is an error. Caller frees. */
static char *expand_env(struct yctx *y, yaml_node_t *n, const char *s)
{
    struct buf b;
    buf_init(&b, 0);
    for (const char *p = s; *p;) {
        if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p, '}');
            if (!end) {
                yerr(y, n, "unterminated ${ in \"%s\"; write ${NAME}", s);
                buf_fini(&b);
                return NULL;
            }
            char *name = xstrndup(p + 2, (size_t)(end - p - 2));
            const char *v = getenv(name);
            if (!v) {
                yerr(y, n, "environment variable %s is not set; export it or remove the reference", name);
                free(name);
                buf_fini(&b);
                return NULL;
            }
            buf_puts(&b, v);
            free(name);
            p = end + 1;
        } else {
            buf_append(&b, p++, 1);
        }
    }
    if (!b.data) buf_append(&b, "", 0);
    return buf_steal(&b, NULL);
}

static const char *scalar(yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int want_scalar(struct yctx *y, yaml_node_t *n, const char *key, char **out)
{
    const char *s = scalar(n);
    if (!s) return yerr(y, n, "%s must be a single value, not a list or mapping", key);
    *out = expand_env(y, n, s);
    return *out ? 0 : -1;
}

static int want_int(struct yctx *y, yaml_node_t *n, const char *key, int64_t min, int64_t max, int64_t *out)
{
    const char *s = scalar(n);
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < min || v > max)
        return yerr(y, n, "%s must be an integer between %lld and %lld", key, (long long)min, (long long)max);
    *out = v;
    return 0;
}

static char *resolve_relative(const char *config_path, const char *p)
{
    if (p[0] == '/') return xstrdup(p);
    char *copy = xstrdup(config_path);
    char *out = xasprintf("%s/%s", dirname(copy), p);
    free(copy);
    return out;
}

static int load_agent(struct yctx *y, struct config *c, yaml_node_t *n)
{
    if (n->type != YAML_MAPPING_NODE) return yerr(y, n, "each agent must be a mapping with at least name:");
    c->agents = xrealloc(c->agents, (size_t)(c->n_agents + 1) * sizeof *c->agents);
    struct config_agent *a = &c->agents[c->n_agents++];
    memset(a, 0, sizeof *a);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = scalar(k);
        char *tmp = NULL;
        if (!key) return yerr(y, k, "keys must be plain strings");
        if (strcmp(key, "name") == 0 || strcmp(key, "id") == 0) {
            if (a->name) return yerr(y, k, "agent has both name and id; keep one");
            if (want_scalar(y, v, key, &a->name) < 0) return -1;
        } else if (strcmp(key, "policy_file") == 0) {
            if (want_scalar(y, v, key, &tmp) < 0) return -1;
            a->policy_file = resolve_relative(y->file, tmp);
            free(tmp);
        } else if (strcmp(key, "policy") == 0) {
            if (!scalar(v))
                return yerr(y, v, "policy must be a block string (policy: |) holding the policy YAML, or use policy_file:");
            a->policy_inline = xstrdup(scalar(v));
            a->policy_line = (int)v->start_mark.line + 1; /* block content starts the line after "|" */
        } else if (strcmp(key, "lease_timeout_seconds") == 0) {
            if (want_int(y, v, key, 1, 86400, &a->lease_timeout_seconds) < 0) return -1;
        } else if (strcmp(key, "max_attempts") == 0) {
            if (want_int(y, v, key, 1, 1000, &a->max_attempts) < 0) return -1;
        } else if (strcmp(key, "webhook_url") == 0) {
            if (want_scalar(y, v, key, &a->webhook_url) < 0) return -1;
            char why[160];
            if (*a->webhook_url && !name_http_url_valid(a->webhook_url, why, sizeof why))
                return yerr(y, v, "webhook_url \"%.200s\" %s", a->webhook_url, why);
        } else if (strcmp(key, "secret") == 0) {
            if (want_scalar(y, v, key, &a->secret) < 0) return -1;
            if (strlen(a->secret) > 1024) return yerr(y, v, "secret: at most 1024 bytes");
        } else {
            return yerr(y, k, "unknown agent key \"%s\"; expected one of: id (or name), policy, policy_file, webhook_url, secret, lease_timeout_seconds, max_attempts", key);
        }
    }
    if (!a->name || !*a->name) return yerr(y, n, "agent needs a name:");
    if (!name_agent_valid(a->name))
        return yerr(y, n, "agent name \"%s\": use 1..%d letters, digits and _ . : -", a->name, NAME_AGENT_MAX);
    if (a->policy_file && a->policy_inline) return yerr(y, n, "agent %s has both policy and policy_file; keep one", a->name);
    if (a->webhook_url && !*a->webhook_url) {
        free(a->webhook_url);
        a->webhook_url = NULL;
    }
    if (a->secret && !*a->secret) {
        free(a->secret);
        a->secret = NULL;
    }
    if (a->webhook_url && !a->secret)
        return yerr(y, n, "agent %s has a webhook_url but no secret: the kernel signs every webhook with it; add secret:", a->name);
    for (int i = 0; i < c->n_agents - 1; i++)
        if (strcmp(c->agents[i].name, a->name) == 0) return yerr(y, n, "agent %s is listed twice", a->name);
    return 0;
}

static int load_key(struct yctx *y, struct config *c, yaml_node_t *n)
{
    if (n->type != YAML_MAPPING_NODE) return yerr(y, n, "each api key must be a mapping with key: and role:");
    c->keys = xrealloc(c->keys, (size_t)(c->n_keys + 1) * sizeof *c->keys);
    struct config_key *kk = &c->keys[c->n_keys++];
    memset(kk, 0, sizeof *kk);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y->doc, p->key), *v = yaml_document_get_node(&y->doc, p->value);
        const char *key = scalar(k);
        char **dst = !key ? NULL : strcmp(key, "key") == 0 ? &kk->key : strcmp(key, "role") == 0 ? &kk->role
                                  : strcmp(key, "agent") == 0 ? &kk->agent : NULL;
        if (!dst) return yerr(y, k, "unknown api key field \"%s\"; expected key, role, agent", key ? key : "");
        if (want_scalar(y, v, key, dst) < 0) return -1;
    }
    if (!kk->key || strlen(kk->key) < 16) return yerr(y, n, "api key needs key: with at least 16 characters (e.g. ${REBUNO_ADMIN_KEY})");
    if (!kk->role || (strcmp(kk->role, "admin") && strcmp(kk->role, "client") && strcmp(kk->role, "agent")))
        return yerr(y, n, "api key needs role: admin, client or agent");
    if (!strcmp(kk->role, "agent") != !!kk->agent)
        return yerr(y, n, "agent: is required for role agent and only allowed there");
    if (kk->agent && !name_agent_valid(kk->agent))
        return yerr(y, n, "agent name \"%s\": use 1..%d letters, digits and _ . : -", kk->agent, NAME_AGENT_MAX);
    return 0;
}

static int load_file(struct config *c, const char *path, struct err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, 400, "config_invalid", "config", "cannot open config file %s: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    struct yctx y = {.file = path, .err = err};
    int rc = -1;
    if (!yaml_parser_load(&parser, &y.doc)) {
        err_set(err, 400, "config_invalid", "", "%s:%zu:%zu: %s; fix the YAML syntax", path,
                parser.problem_mark.line + 1, parser.problem_mark.column + 1, parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        fclose(f);
        return -1;
    }
    yaml_node_t *root = yaml_document_get_root_node(&y.doc);
    if (!root) {
        rc = 0; /* an empty file is an empty config */
        goto out;
    }
    if (root->type != YAML_MAPPING_NODE) {
        yerr(&y, root, "the config file must be a mapping of settings");
        goto out;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&y.doc, p->key), *v = yaml_document_get_node(&y.doc, p->value);
        const char *key = scalar(k);
        if (!key) {
            yerr(&y, k, "keys must be plain strings");
            goto out;
        }
        if (strcmp(key, "agents") == 0 || strcmp(key, "api_keys") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                yerr(&y, v, "%s must be a list (- item per entry)", key);
                goto out;
            }
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *item = yaml_document_get_node(&y.doc, *it);
                if ((key[0] == 'a' && key[1] == 'g' ? load_agent(&y, c, item) : load_key(&y, c, item)) < 0) goto out;
            }
            continue;
        }
        const struct setting *s = find_setting(key);
        if (!s) {
            char list[400] = "agents, api_keys";
            for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
                strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, settings[i].name, sizeof list - strlen(list) - 1);
            }
            yerr(&y, k, "unknown setting \"%s\"; expected one of: %s", key, list);
            goto out;
        }
        char *val;
        if (want_scalar(&y, v, key, &val) < 0) goto out;
        char where[300];
        snprintf(where, sizeof where, "%s:%zu:%zu", path, v->start_mark.line + 1, v->start_mark.column + 1);
        int r = set_value(c, s, val, where, "fix it in the config file", err);
        free(val);
        if (r < 0) goto out;
    }
    rc = 0;
out:
    yaml_document_delete(&y.doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

/* --- public --- */

int config_load(struct config *c, int argc, char **argv, struct err *err)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        if (settings[i].type == C_STR) *str_field(c, &settings[i]) = xstrdup(settings[i].def_str);
        else *int_field(c, &settings[i]) = settings[i].def_int;
    }
    const char *path = getenv("REBUNO_CONFIG");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) {
            if (i + 1 >= argc) return err_invalid(err, "config", "--config needs a file: --config rebuno.yaml");
            path = argv[i + 1];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        }
    if (path && *path) {
        c->path = xstrdup(path);
        if (load_file(c, path, err) < 0) return -1;
    }
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const char *v = getenv(settings[i].env);
        if (!v) continue;
        char where[96], fix[96];
        snprintf(where, sizeof where, "environment variable %s", settings[i].env);
        snprintf(fix, sizeof fix, "fix it or unset %s", settings[i].env);
        if (set_value(c, &settings[i], v, where, fix, err) < 0) return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--config=", 9) == 0) continue;
        if (strncmp(a, "--", 2) != 0)
            return err_invalid(err, a, "unexpected argument \"%s\"; settings are flags like --listen 127.0.0.1:8080", a);
        char name[64];
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, a + 2, n);
        name[n] = '\0';
        for (char *p = name; *p; p++)
            if (*p == '-') *p = '_';
        const struct setting *s = find_setting(name);
        if (!s) return err_invalid(err, a, "unknown flag %s; run with --help for the settings", a);
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) return err_invalid(err, a, "%s needs a value", a);
        if (set_value(c, s, v, a, "pass a whole number in that range", err) < 0) return -1;
    }
    return 0;
}

void config_fini(struct config *c)
{
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
        if (settings[i].type == C_STR) free(*str_field(c, &settings[i]));
    for (int i = 0; i < c->n_agents; i++) {
        free(c->agents[i].name);
        free(c->agents[i].policy_file);
        free(c->agents[i].policy_inline);
        free(c->agents[i].webhook_url);
        free(c->agents[i].secret);
    }
    free(c->agents);
    for (int i = 0; i < c->n_keys; i++) {
        free(c->keys[i].key);
        free(c->keys[i].role);
        free(c->keys[i].agent);
    }
    free(c->keys);
    free(c->path);
    memset(c, 0, sizeof *c);
}

void config_usage(FILE *out)
{
    fprintf(out, "Settings (flag > environment > config file > default):\n");
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const struct setting *s = &settings[i];
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", s->name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        if (s->type == C_STR)
            fprintf(out, "  %-30s %-32s %s (default \"%s\")\n", flag, s->env, s->help, s->def_str);
        else
            fprintf(out, "  %-30s %-32s %s (default %lld, %lld..%lld)\n", flag, s->env, s->help,
                    (long long)s->def_int, (long long)s->min, (long long)s->max);
    }
    fprintf(out, "  %-30s %-32s %s\n", "--config FILE", "REBUNO_CONFIG", "YAML file with the settings above, agents: and api_keys:");
}

char *config_store_path(const struct config *c)
{
    if (c->store && strncmp(c->store, "sqlite:", 7) == 0) return xstrdup(c->store + 7);
    if (c->store && store_spec_is_postgres(c->store)) return xstrdup(c->store);
    return xasprintf("%s/kernel.db", c->state_dir);
}
