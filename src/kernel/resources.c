/*
 * resources.c - resources an execution works on, and their checkpoints.
 *
 * A resource (a sandbox workspace, say) is registered by key with the id of the
 * driver that manages it. The kernel stores the driver's binding (where the
 * resource lives) and checkpoint references; the driver stores contents.
 *
 * Coverage: every live step that may change a resource bumps its generation,
 * which closes the open checkpoints of the previous generation at that step's
 * step.executing event. A checkpoint therefore covers the events from the one
 * it was taken at up to the next live change. A step that declares the
 * resource (resources=[key]) counts towards every_steps; on the N-th one the
 * proceed decision says `due` and the agent captures after the step. A step
 * that does not declare it still ends coverage unless coverage_reuse is set.
 * Replays are not live and change nothing here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/names.h"
#include "base/xalloc.h"
#include "kernel/kernel_int.h"

bool kernel_resource_key_valid(const char *key)
{
    return name_valid(key, 128, "_.-");
}

static json_t *view(struct kernel *k, const struct resource *r)
{
    bool covered = false;
    store_checkpoint_covered(k->st, r->exec_id, r->key, r->generation, &covered);
    return k_omit_nulls(json_pack("{s:s, s:s, s:o, s:b, s:I, s:b, s:I, s:I, s:I, s:o, s:o, s:b}", "key", r->key, "driver_id",
                     r->driver_id, "configuration", k_json(r->configuration), "coverage_reuse", r->coverage_reuse,
                     "every_steps", (json_int_t)r->every_steps, "on_completion", r->on_completion,
                     "registered_seq", (json_int_t)r->registered_seq, "generation", (json_int_t)r->generation,
                     "count", (json_int_t)r->count, "binding", k_json(r->binding), "checkpoint_ref",
                     k_opt_str(r->checkpoint_ref), "covered", covered));
}

/* Load the execution for an agent write on its resources: live, current lease. */
static int load_live(struct kernel *k, const struct caller *c, const char *id, const struct dispatch_ref *d,
                     struct execution *e, int64_t now, struct err *err)
{
    if (k_load_exec(k, c, id, e, err) < 0) return -1;
    if (exec_status_terminal(e->status)) {
        err_set(err, 409, "execution_terminal", "", "execution %s is already %s", e->id, exec_status_name(e->status));
        execution_fini(e);
        return -1;
    }
    if (k_check_lease(k, e, d, now, err) < 0) {
        execution_fini(e);
        return -1;
    }
    return 0;
}

int kernel_resource_register(struct kernel *k, const struct caller *c, const char *id,
                             const struct dispatch_ref *d, const struct resource_spec *spec, json_t **out,
                             struct err *err)
{
    int64_t now = clock_now_ms();
    struct execution e;
    if (load_live(k, c, id, d, &e, now, err) < 0) return -1;
    int rc = -1;
    char *config = spec->configuration ? json_dumps(spec->configuration, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                                       : xstrdup("{}");
    struct resource r;
    int st = store_resource_get(k->st, e.id, spec->key, &r);
    if (st == 0) {
        /* Registering again (re-dispatch, session turn) returns the current view; the
         * resource's identity may not change under the same key. */
        if (strcmp(r.driver_id, spec->driver_id) != 0 || strcmp(r.configuration, config) != 0 ||
            r.coverage_reuse != spec->coverage_reuse) {
            err_set(err, 409, "conflict", "key",
                    "resource \"%s\" is already registered with driver %s and another configuration; use a new key",
                    spec->key, r.driver_id);
            resource_fini(&r);
            goto out;
        }
        if (r.every_steps != spec->every_steps || r.on_completion != spec->on_completion) {
            r.every_steps = spec->every_steps; /* the checkpoint policy may change between turns */
            r.on_completion = spec->on_completion;
            if ((st = store_resource_update(k->st, &r)) < 0) {
                k_store_fail(err, st, "updating the resource");
                resource_fini(&r);
                goto out;
            }
        }
        *out = view(k, &r);
        resource_fini(&r);
        rc = k_save_exec(k, &e, now, err);
        goto out;
    }
    if (st != -ENOENT) {
        k_store_fail(err, st, "reading the resource");
        goto out;
    }
    memset(&r, 0, sizeof r);
    memcpy(r.exec_id, e.id, sizeof r.exec_id);
    r.key = xstrdup(spec->key);
    r.driver_id = xstrdup(spec->driver_id);
    r.configuration = config;
    config = NULL;
    r.coverage_reuse = spec->coverage_reuse;
    r.every_steps = spec->every_steps;
    r.on_completion = spec->on_completion;
    r.registered_seq = e.last_seq + 1;
    st = store_resource_insert(k->st, &r);
    if (st < 0) {
        k_store_fail(err, st, "registering the resource");
        resource_fini(&r);
        goto out;
    }
    if (k_emit(k, &e, "resource.registered",
               json_pack("{s:s, s:s, s:o, s:b, s:I, s:b}", "key", r.key, "driver_id", r.driver_id, "configuration",
                         k_json(r.configuration), "coverage_reuse", r.coverage_reuse, "every_steps",
                         (json_int_t)r.every_steps, "on_completion", r.on_completion), now, err) < 0 ||
        k_save_exec(k, &e, now, err) < 0) {
        resource_fini(&r);
        goto out;
    }
    *out = view(k, &r);
    resource_fini(&r);
    rc = 0;
out:
    free(config);
    execution_fini(&e);
    return rc;
}

int kernel_resource_bind(struct kernel *k, const struct caller *c, const char *id, const struct dispatch_ref *d,
                         const char *key, const json_t *binding, struct err *err)
{
    int64_t now = clock_now_ms();
    struct execution e;
    if (load_live(k, c, id, d, &e, now, err) < 0) return -1;
    int rc = -1;
    struct resource r;
    int st = store_resource_get(k->st, e.id, key, &r);
    if (st == -ENOENT) {
        err_set(err, 404, "not_found", "key", "execution %s has no resource \"%s\"; register it first", e.id, key);
        goto out;
    }
    if (st < 0) {
        k_store_fail(err, st, "reading the resource");
        goto out;
    }
    char *text = json_dumps(binding, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (r.binding && strcmp(r.binding, text) != 0) {
        err_set(err, 409, "conflict", "binding", "resource \"%s\" is already bound to %s", key, r.binding);
        free(text);
    } else if (r.binding) {
        free(text); /* same binding again: nothing to do */
        rc = k_save_exec(k, &e, now, err);
    } else {
        r.binding = text;
        if ((st = store_resource_update(k->st, &r)) < 0) k_store_fail(err, st, "binding the resource");
        else if (k_emit(k, &e, "resource.bound", json_pack("{s:s, s:O}", "key", key, "binding", binding), now,
                        err) == 0)
            rc = k_save_exec(k, &e, now, err);
    }
    resource_fini(&r);
out:
    execution_fini(&e);
    return rc;
}

static int list_one(struct resource *r, void *arg)
{
    void **x = arg;
    json_array_append_new(x[1], view(x[0], r));
    return 0;
}

int kernel_resources(struct kernel *k, const struct caller *c, const char *id, json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    json_t *arr = json_array();
    void *x[2] = {k, arr};
    int r = store_resources_each(k->st, e.id, list_one, x);
    execution_fini(&e);
    if (r < 0) {
        json_decref(arr);
        return k_store_fail(err, r, "listing resources");
    }
    *out = json_pack("{s:o}", "resources", arr);
    return 0;
}

bool k_declares(const char *resources_json, const char *key)
{
    if (!resources_json) return false;
    json_t *arr = k_json(resources_json);
    bool found = false;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (json_is_string(v) && strcmp(json_string_value(v), key) == 0) found = true;
    json_decref(arr);
    return found;
}

int k_resources_validate(struct kernel *k, const struct execution *e, const json_t *declared, struct err *err)
{
    size_t i;
    json_t *v;
    json_array_foreach(declared, i, v) {
        struct resource r;
        int st = store_resource_get(k->st, e->id, json_string_value(v), &r);
        if (st == -ENOENT)
            return err_set(err, 400, "validation_error", "resources",
                           "resources: execution %s has no resource \"%s\"; register it before declaring it",
                           e->id, json_string_value(v));
        if (st < 0) return k_store_fail(err, st, "reading a resource");
        resource_fini(&r);
    }
    return 0;
}

struct touch_ctx {
    struct kernel *k;
    struct execution *e;
    const struct step *s;
    json_t *views;
    struct err *err;
};

static int touch_one(struct resource *r, void *arg)
{
    struct touch_ctx *x = arg;
    bool affects = strcmp(x->s->kind, "llm_call") != 0 && k_declares(x->s->resources, r->key);
    if (!affects && r->coverage_reuse) return 0;
    /* The step's step.executing event is the next one: coverage ends there. */
    int st = store_checkpoints_invalidate(x->k->st, r->exec_id, r->key, r->generation, x->e->last_seq + 1);
    if (st < 0) return k_store_fail(x->err, st, "closing checkpoint coverage");
    r->generation++;
    bool due = affects && r->every_steps > 0 && (r->count + 1) % r->every_steps == 0;
    if ((st = store_resource_update(x->k->st, r)) < 0) return k_store_fail(x->err, st, "updating the resource");
    if (affects)
        json_array_append_new(x->views, json_pack("{s:s, s:I, s:b}", "key", r->key, "generation",
                                                  (json_int_t)r->generation, "due", due));
    return 0;
}

int k_resources_touch(struct kernel *k, struct execution *e, const struct step *s, json_t **views,
                      struct err *err)
{
    struct touch_ctx x = {k, e, s, json_array(), err};
    int r = store_resources_each(k->st, e->id, touch_one, &x);
    if (r < 0) {
        json_decref(x.views);
        return err->status ? -1 : k_store_fail(err, r, "touching resources");
    }
    *views = x.views;
    return 0;
}

struct views_ctx {
    const struct step *s;
    json_t *views;
};

static int view_one(struct resource *r, void *arg)
{
    struct views_ctx *x = arg;
    if (!k_declares(x->s->resources, r->key)) return 0;
    bool due = r->every_steps > 0 && (r->count + 1) % r->every_steps == 0;
    json_array_append_new(x->views, json_pack("{s:s, s:I, s:b}", "key", r->key, "generation",
                                              (json_int_t)r->generation, "due", due));
    return 0;
}

int k_resources_views(struct kernel *k, struct execution *e, const struct step *s, json_t **views,
                      struct err *err)
{
    struct views_ctx x = {s, json_array()};
    int r = strcmp(s->kind, "llm_call") == 0 ? 0 : store_resources_each(k->st, e->id, view_one, &x);
    if (r < 0) {
        json_decref(x.views);
        return k_store_fail(err, r, "reading resources");
    }
    *views = x.views;
    return 0;
}

int k_resources_settle(struct kernel *k, struct execution *e, const struct step *s, struct err *err)
{
    if (!s->resources || strcmp(s->kind, "llm_call") == 0) return 0;
    json_t *arr = k_json(s->resources);
    size_t i;
    json_t *v;
    int rc = 0;
    json_array_foreach(arr, i, v) {
        struct resource r;
        int st = store_resource_get(k->st, e->id, json_string_value(v), &r);
        if (st == -ENOENT) continue;
        if (st < 0 || (r.count++, st = store_resource_update(k->st, &r)) < 0) rc = k_store_fail(err, st, "settling a resource");
        if (st == 0) resource_fini(&r);
        if (rc < 0) break;
    }
    json_decref(arr);
    return rc;
}

struct writers_ctx {
    struct store *st;
    const char *key;
};

/* A running step that declares the key and was started by the current dispatch attempt.
 * One left executing by an earlier attempt (its worker died) is an orphan, not a writer:
 * the current attempt re-runs it when it resubmits it, or fails it as indeterminate.
 * Occurrence counters restart with every claim, so the current attempt has reached the
 * step exactly when its counter has consumed the step's occurrence. */
static int writers_of(struct step *s, void *arg)
{
    struct writers_ctx *x = arg;
    if (!k_declares(s->resources, x->key)) return 0;
    int64_t consumed;
    char last[72];
    int r = store_counter_get(x->st, s->exec_id, s->kind, s->target, s->args_hash, &consumed, last, sizeof last);
    if (r == -ENOENT || (r == 0 && consumed < s->occurrence)) return 0;
    return r < 0 ? r : 1;
}

static int refuse(struct kernel *k, struct execution *e, const char *key, int64_t gen, const char *why,
                  json_t *refused, int64_t now, struct err *err)
{
    json_array_append_new(refused, json_pack("{s:s, s:s}", "key", key, "reason", why));
    return k_emit(k, e, "resource.checkpoint_failed",
                  json_pack("{s:s, s:I, s:s}", "key", key, "generation", (json_int_t)gen, "error", why), now, err);
}

int k_record_captures(struct kernel *k, struct execution *e, const json_t *captures, const json_t *failures,
                      json_t **out, int64_t now, struct err *err)
{
    json_t *recorded = json_array(), *refused = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(captures, i, c) {
        const char *key = json_string_value(json_object_get(c, "key"));
        const char *ref = json_string_value(json_object_get(c, "checkpoint_ref"));
        int64_t gen = json_integer_value(json_object_get(c, "generation"));
        bool dup = false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(json_string_value(json_object_get(json_array_get(captures, j), "key")), key) == 0) dup = true;
        struct resource r;
        int st = store_resource_get(k->st, e->id, key, &r);
        const char *why = NULL;
        struct writers_ctx wx = {k->st, key};
        int w = 0;
        if (st == -ENOENT) why = "unknown_resource";
        else if (st < 0) goto fail_store;
        else if (!ref || !*ref) why = "missing_checkpoint_ref";
        else if (dup) why = "duplicate_capture";
        else if (r.generation != gen) why = "stale_generation";
        else if ((w = store_steps_each_status(k->st, e->id, STEP_EXECUTING, writers_of, &wx)) == 1)
            why = "writers_active";
        if (st == 0) resource_fini(&r);
        if (w < 0) goto fail_store;
        if (why) {
            if (refuse(k, e, key, gen, why, refused, now, err) < 0) goto fail;
            continue;
        }
        int64_t had;
        if (store_checkpoint_find(k->st, e->id, key, gen, ref, &had) == 0) {
            /* A resend of a capture already recorded (its reply was lost): nothing new. */
            json_array_append_new(recorded, json_pack("{s:s, s:I, s:I}", "key", key, "generation", (json_int_t)gen,
                                                      "covered_seq", (json_int_t)had));
            continue;
        }
        struct checkpoint cp = {.key = (char *)key, .ref = (char *)ref, .generation = gen,
                                .covered_seq = e->last_seq, .invalidated_seq = 0};
        memcpy(cp.exec_id, e->id, sizeof cp.exec_id);
        if ((st = store_checkpoint_insert(k->st, &cp)) < 0) goto fail_store;
        if (k_emit(k, e, "resource.checkpointed",
                   json_pack("{s:s, s:I, s:s, s:I}", "key", key, "generation", (json_int_t)gen, "checkpoint_ref", ref,
                             "covered_seq", (json_int_t)cp.covered_seq), now, err) < 0)
            goto fail;
        json_array_append_new(recorded, json_pack("{s:s, s:I, s:I}", "key", key, "generation", (json_int_t)gen,
                                                  "covered_seq", (json_int_t)cp.covered_seq));
    }
    json_array_foreach(failures, i, c) {
        const char *key = json_string_value(json_object_get(c, "key"));
        const char *msg = json_string_value(json_object_get(c, "error"));
        if (k_emit(k, e, "resource.checkpoint_failed",
                   json_pack("{s:s, s:I, s:s}", "key", key, "generation",
                             (json_int_t)json_integer_value(json_object_get(c, "generation")), "error",
                             msg ? msg : "capture failed"), now, err) < 0)
            goto fail;
    }
    if (out) *out = json_pack("{s:o, s:o}", "recorded", recorded, "refused", refused);
    else {
        json_decref(recorded);
        json_decref(refused);
    }
    return 0;
fail_store:
    k_store_fail(err, -EIO, "recording a checkpoint");
fail:
    json_decref(recorded);
    json_decref(refused);
    return -1;
}

int kernel_checkpoints(struct kernel *k, const struct caller *c, const char *id, const struct dispatch_ref *d,
                       const json_t *captures, const json_t *failures, json_t **out, struct err *err)
{
    int64_t now = clock_now_ms();
    struct execution e;
    if (load_live(k, c, id, d, &e, now, err) < 0) return -1;
    int rc = k_record_captures(k, &e, captures, failures, out, now, err);
    if (rc == 0) rc = k_save_exec(k, &e, now, err);
    execution_fini(&e);
    return rc;
}
