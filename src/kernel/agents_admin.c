/*
 * agents_admin.c - agents and policies set at run time, kept in the store so a
 * restart (or another replica) has them: what POST /v0/agents and POST
 * /v0/policies/{agent} set is saved as the agent's settings, read back by
 * kernel_new, and DELETE /v0/agents/{id} removes it.
 *
 * The config file is applied after the stored settings at every start (upstream's
 * boot-time provisioning is an upsert): it sets the lease, webhook and secret of the
 * agents it names, and their policy when it gives one; an agent it names without a
 * policy keeps a policy set at run time.
 */
#include "kernel/kernel_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "policy/policy.h"

int k_agent_persist(struct kernel *k, const struct agent_conf *a, struct err *err)
{
    json_t *s = json_object();
    if (a->webhook_url) json_object_set_new(s, "webhook_url", json_string(a->webhook_url));
    if (a->secret) json_object_set_new(s, "secret", json_string(a->secret));
    if (a->lease_ms > 0) json_object_set_new(s, "lease_ms", json_integer(a->lease_ms));
    json_object_set_new(s, "registered_at", json_integer(a->registered_at));
    /* only a policy set at run time: one from the config file is the file's to change */
    if (a->policy && a->policy_runtime) json_object_set_new(s, "policy", json_string(policy_source(a->policy)));
    char *text = k_text(s);
    json_decref(s);
    int r = store_agent_save(k->st, a->name, text, clock_now_ms());
    free(text);
    if (r < 0) return k_store_fail(err, r, "saving the agent");
    store_notify(k->st, 'c', a->name); /* other replicas read it again (kernel_agent_reload) */
    return 0;
}

static void apply(struct kernel *k, const char *name, const char *settings)
{
    json_t *s = k_json(settings);
    struct agent_conf *a = k_ensure_agent(k, name);
    k_set_str(&a->webhook_url, json_string_value(json_object_get(s, "webhook_url")));
    k_set_str(&a->secret, json_string_value(json_object_get(s, "secret")));
    json_t *lease = json_object_get(s, "lease_ms"), *reg = json_object_get(s, "registered_at");
    if (json_is_integer(reg) && json_integer_value(reg) > 0) a->registered_at = json_integer_value(reg);
    if (json_is_integer(lease) && json_integer_value(lease) > 0) a->lease_ms = json_integer_value(lease);
    const char *text = json_string_value(json_object_get(s, "policy"));
    if (text) {
        struct err err = ERR_INIT;
        struct policy *p = policy_load_string(text, strlen(text), "stored policy", 0, &err);
        if (!p) { /* fail closed: a policy that no longer loads must not mean "allow all" */
            log_error("an agent's stored policy does not load; denying its steps until a policy is set",
                      "agent=%s error=\"%s\"", name, err.msg);
            static const char deny[] = "default_action: deny\n";
            p = policy_load_string(deny, sizeof deny - 1, "fallback", 0, &err);
        }
        policy_free(a->policy);
        a->policy = p;
        a->policy_runtime = true;
    }
    json_decref(s);
}

static int load_one(const char *name, const char *settings, void *arg)
{
    apply(arg, name, settings);
    return 0;
}

int k_agents_load(struct kernel *k)
{
    return store_agent_settings_each(k->st, load_one, k);
}

static void forget(struct kernel *k, struct agent_conf *a)
{
    char *name = a->name;
    size_t idx = (size_t)(a - k->agents);
    policy_free(a->policy);
    free(a->webhook_url);
    free(a->secret);
    memmove(a, a + 1, (size_t)(k->n_agents - 1 - (int)idx) * sizeof *a);
    k->n_agents--;
    for (int i = 0; i < k->n_workers;) { /* its workers go with it */
        if (strcmp(k->workers[i].agent, name) == 0) {
            free(k->workers[i].agent);
            free(k->workers[i].name);
            k->workers[i] = k->workers[--k->n_workers];
        } else {
            i++;
        }
    }
    free(name);
}

struct seen_ctx {
    const char *name;
    bool *seen;
};

static int seen_one(const char *name, void *arg)
{
    struct seen_ctx *c = arg;
    if (strcmp(name, c->name) == 0) *c->seen = true;
    return 0;
}

struct find_ctx {
    const char *name;
    char *settings;
};

static int find_one(const char *name, const char *settings, void *arg)
{
    struct find_ctx *f = arg;
    if (strcmp(name, f->name) == 0) f->settings = xstrdup(settings);
    return 0;
}

int kernel_agent_reload(struct kernel *k, const char *name)
{
    struct find_ctx f = {name, NULL};
    bool seen = false;
    int r = store_agent_settings_each(k->st, find_one, &f);
    if (r < 0) return r;
    if (f.settings) {
        apply(k, name, f.settings);
        free(f.settings);
        return 0;
    }
    /* no settings: deleted on another replica, unless the row is still there (only seen) */
    r = store_agents_each(k->st, seen_one, &(struct seen_ctx){name, &seen});
    if (r < 0) return r;
    struct agent_conf *a = k_find_agent(k, name);
    if (!seen && a) forget(k, a);
    return 0;
}

int kernel_agent_delete(struct kernel *k, const char *name, struct err *err)
{
    struct agent_conf *a = k_find_agent(k, name);
    if (!a)
        return err_set(err, 404, "not_found", "id", "no agent named \"%s\"; list them with GET /v0/agents", name);
    static const char *const active[] = {"pending", "running", "blocked"};
    for (size_t i = 0; i < sizeof active / sizeof *active; i++) {
        json_t *out = NULL;
        struct exec_filter f = {.agent = name, .status = active[i]};
        if (kernel_list(k, NULL, &f, NULL, 1, &out, err) < 0) return -1;
        size_t n = json_array_size(json_object_get(out, "executions"));
        json_decref(out);
        if (n)
            return err_set(err, 409, "conflict", "id",
                           "agent \"%s\" has %s executions; cancel them or let them finish before deleting it",
                           name, active[i]);
    }
    int r = store_agent_delete(k->st, name);
    if (r < 0) return k_store_fail(err, r, "deleting the agent");
    store_notify(k->st, 'c', name);
    forget(k, a);
    return 0;
}
