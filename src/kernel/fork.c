/*
 * fork.c - a new execution that reruns a source execution from one of its events.
 *
 * The fork gets the source's input and a copy of every step the source had
 * *settled* by event at_seq (succeeded, failed or denied at or before it),
 * renamed to fork-scoped step ids (same kind, target, args hash and
 * occurrence), so the fork's agent replays them and runs live afterwards.
 *
 * Each resource registered by at_seq restarts from a checkpoint: the one that
 * covers at_seq, else the newest earlier one, else a fresh resource. The choice
 * is recorded in execution.forked and shown on the execution ("restoration").
 * Copied results may describe changes the restored resource lacks when the
 * point is not covered; that is the price of forking between checkpoints.
 * at_most_once steps that would run live in a fork need approval (rule
 * __fork_effect) unless the policy denies them outright.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "kernel/identity.h"
#include "kernel/kernel_int.h"

#define PAGE 1000

/* --- restoration --- */

struct pick_ctx {
    const char *key;
    int64_t at;
    struct checkpoint best;
    bool have, covering;
};

static int pick_one(struct checkpoint *c, void *arg)
{
    struct pick_ctx *x = arg;
    if (strcmp(c->key, x->key) != 0 || c->covered_seq > x->at) return 0;
    bool covers = c->invalidated_seq == 0 || x->at < c->invalidated_seq;
    /* A covering checkpoint beats any earlier one; among equals the newest wins. */
    if (x->have && x->covering && !covers) return 0;
    if (x->have && covers == x->covering && c->covered_seq < x->best.covered_seq) return 0;
    checkpoint_fini(&x->best);
    x->best = *c;
    x->best.key = xstrdup(c->key);
    x->best.ref = xstrdup(c->ref);
    x->have = true;
    x->covering = covers;
    return 0;
}

struct restore_ctx {
    struct kernel *k;
    const char *src_id;
    int64_t at;
    json_t *restoration; /* key -> {checkpoint_ref, checkpoint_seq, covered} */
    json_t *registered;  /* key -> registered_seq, for fork-points */
    struct resource *list;
    int n;
};

static int restore_one(struct resource *r, void *arg)
{
    struct restore_ctx *x = arg;
    if (r->registered_seq > x->at) return 0;
    struct pick_ctx p = {.key = r->key, .at = x->at};
    int st = store_checkpoints_each(x->k->st, x->src_id, pick_one, &p);
    if (st < 0) return st;
    json_object_set_new(x->restoration, r->key,
                        p.have ? json_pack("{s:s, s:I, s:b}", "checkpoint_ref", p.best.ref, "checkpoint_seq",
                                           (json_int_t)p.best.covered_seq, "covered", p.covering)
                               : json_pack("{s:n, s:n, s:b}", "checkpoint_ref", "checkpoint_seq", "covered", 0));
    x->list = xrealloc(x->list, (size_t)(x->n + 1) * sizeof *x->list);
    struct resource *c = &x->list[x->n++];
    *c = *r;
    c->key = xstrdup(r->key);
    c->driver_id = xstrdup(r->driver_id);
    c->configuration = xstrdup(r->configuration);
    c->binding = NULL;
    c->checkpoint_ref = p.have ? xstrdup(p.best.ref) : NULL;
    checkpoint_fini(&p.best);
    return 0;
}

/* --- copying the source's settled steps --- */

struct copy_ctx {
    struct kernel *k;
    const struct execution *src;
    struct execution *fork;
    int64_t at, now;
    json_t *settled; /* source step_id -> fork step_id */
    struct err *err;
};

static int find_settled(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct copy_ctx *x = arg;
    if (strcmp(type, "step.succeeded") && strcmp(type, "step.failed") && strcmp(type, "step.denied")) return 0;
    json_t *p = k_json(payload);
    const char *sid = json_string_value(json_object_get(p, "step_id"));
    if (sid) json_object_set_new(x->settled, sid, json_null());
    json_decref(p);
    return 0;
}

static int copy_step(struct copy_ctx *x, const char *src_step_id)
{
    struct step s;
    int st = store_step_get(x->k->st, src_step_id, &s);
    if (st < 0) return k_store_fail(x->err, st, "reading a source step");
    int rc = -1;
    if (!step_status_terminal(s.status) || s.status == STEP_CANCELLED) {
        rc = 0; /* settled in the log by at_seq but changed since (cannot happen today) */
        json_object_del(x->settled, src_step_id);
        goto out;
    }
    identity_step_id(x->fork->id, s.kind, s.target, s.args_hash, s.occurrence, s.step_id);
    memcpy(s.exec_id, x->fork->id, sizeof s.exec_id);
    s.approval_id[0] = '\0';
    if ((st = store_step_insert(x->k->st, &s)) < 0) {
        k_store_fail(x->err, st, "copying a step");
        goto out;
    }
    json_object_set_new(x->settled, src_step_id, json_string(s.step_id));
    rc = 0;
out:
    step_fini(&s);
    return rc;
}

static int copy_event(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct copy_ctx *x = arg;
    if (strncmp(type, "step.", 5) != 0) return 0;
    json_t *p = k_json(payload);
    const char *sid = json_string_value(json_object_get(p, "step_id"));
    json_t *renamed = sid ? json_object_get(x->settled, sid) : NULL;
    if (!renamed || json_is_null(renamed)) {
        json_decref(p);
        return 0; /* a step the fork does not inherit */
    }
    json_object_set(p, "step_id", renamed);
    json_object_set_new(p, "copied_from_seq", json_integer(seq));
    return k_emit(x->k, x->fork, type, p, x->now, x->err) < 0 ? -1 : 0;
}

/* Walk the source's events up to at in pages. */
static int each_event_upto(struct kernel *k, const char *exec_id, int64_t at, store_event_fn fn, void *arg)
{
    for (int64_t after = 0; after < at; after += PAGE) {
        int64_t limit = at - after < PAGE ? at - after : PAGE;
        int r = store_events_each(k->st, exec_id, after, (int)limit, fn, arg);
        if (r != 0) return r;
    }
    return 0;
}

struct count_ctx {
    const char *key;
    int64_t n;
};

static int count_one(struct step *s, void *arg)
{
    struct count_ctx *x = arg;
    if (s->status != STEP_DENIED && strcmp(s->kind, "llm_call") != 0 && k_declares(s->resources, x->key)) x->n++;
    return 0;
}

/* How many copied steps count towards the resource's every_steps cadence. */
static int count_affecting(struct kernel *k, const char *fork_id, const char *key, int64_t *count)
{
    struct count_ctx x = {key, 0};
    int r = store_steps_each(k->st, fork_id, count_one, &x);
    *count = x.n;
    return r;
}

int kernel_fork(struct kernel *k, const struct caller *c, const char *src_id, int64_t at_seq,
                const char *session, json_t **out, struct err *err)
{
    struct execution src, f;
    if (k_load_exec(k, c, src_id, &src, err) < 0) return -1;
    memset(&f, 0, sizeof f);
    int64_t now = clock_now_ms();
    int rc = -1;
    struct restore_ctx rx = {k, src.id, at_seq, json_object(), NULL, NULL, 0};
    struct copy_ctx cx = {k, &src, &f, at_seq, now, json_object(), err};
    if (at_seq < 1 || at_seq > src.last_seq) {
        err_set(err, 400, "validation_error", "at_seq", "at_seq: must be between 1 and %lld (the source's last event)",
                (long long)src.last_seq);
        goto out;
    }
    if (session) {
        char any[UUID_STR_LEN];
        int st = store_session_any(k->st, session, any);
        if (st == 0) {
            err_set(err, 409, "conflict", "session", "session \"%s\" already has executions; name a new session for the fork",
                    session);
            goto out;
        }
        if (st != -ENOENT) {
            k_store_fail(err, st, "checking the session");
            goto out;
        }
    }
    struct agent_conf *a = k_find_agent(k, src.agent);
    uuid_v7(f.id);
    f.agent = xstrdup(src.agent);
    f.session = session ? xstrdup(session) : NULL;
    f.input = xstrdup(src.input);
    f.status = EXEC_PENDING;
    f.created_at = f.updated_at = now;
    f.lease_ms = a && a->lease_ms > 0 ? a->lease_ms : k->cfg.lease_ms;
    f.max_attempts = a && a->max_attempts > 0 ? a->max_attempts : k->cfg.max_attempts;
    memcpy(f.parent_id, src.parent_id, sizeof f.parent_id);
    memcpy(f.forked_from, src.id, sizeof f.forked_from);
    f.fork_seq = at_seq;
    int st = store_resources_each(k->st, src.id, restore_one, &rx);
    if (st < 0) {
        k_store_fail(err, st, "choosing checkpoints");
        goto out;
    }
    f.restoration = k_text(rx.restoration);
    if ((st = store_exec_insert(k->st, &f)) < 0) {
        k_store_fail(err, st, "creating the fork");
        goto out;
    }
    if (k_emit(k, &f, "execution.created",
               json_pack("{s:s, s:s, s:o, s:o, s:s}", "execution_id", f.id, "agent", f.agent, "input", k_json(f.input),
                         "session", k_opt_str(f.session), "forked_from", src.id), now, err) < 0 ||
        k_emit(k, &f, "execution.forked",
               json_pack("{s:s, s:I, s:O}", "source_execution_id", src.id, "fork_seq", (json_int_t)at_seq,
                         "restoration", rx.restoration), now, err) < 0)
        goto out;
    /* Settled steps, then their events in source order with the ids renamed. */
    if ((st = each_event_upto(k, src.id, at_seq, find_settled, &cx)) < 0) {
        k_store_fail(err, st, "reading the source's events");
        goto out;
    }
    const char *sid;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(cx.settled, tmp, sid, v) if (copy_step(&cx, sid) < 0) goto out;
    if ((st = each_event_upto(k, src.id, at_seq, copy_event, &cx)) != 0) {
        if (!err->status) k_store_fail(err, st, "copying events");
        goto out;
    }
    /* Resources restart unbound from the selected checkpoint; the agent's driver
     * creates them from checkpoint_ref and takes a new baseline. */
    for (int i = 0; i < rx.n; i++) {
        struct resource *r = &rx.list[i];
        memcpy(r->exec_id, f.id, sizeof r->exec_id);
        r->generation = 0;
        if ((st = count_affecting(k, f.id, r->key, &r->count)) < 0) {
            k_store_fail(err, st, "counting copied steps");
            goto out;
        }
        r->registered_seq = f.last_seq + 1;
        if ((st = store_resource_insert(k->st, r)) < 0) {
            k_store_fail(err, st, "copying a resource");
            goto out;
        }
        if (k_emit(k, &f, "resource.registered",
                   json_pack("{s:s, s:s, s:o, s:b, s:I, s:b}", "key", r->key, "driver_id", r->driver_id,
                             "configuration", k_json(r->configuration), "coverage_reuse", r->coverage_reuse,
                             "every_steps", (json_int_t)r->every_steps, "on_completion", r->on_completion), now, err) < 0 ||
            k_emit(k, &f, "resource.initialized",
                   json_pack("{s:s, s:i, s:o}", "key", r->key, "generation", 0, "checkpoint_ref",
                             k_opt_str(r->checkpoint_ref)), now, err) < 0)
            goto out;
        if (r->checkpoint_ref) {
            /* The fork starts as exactly that checkpoint: it covers the fork from here, so the
             * driver need not snapshot what it just restored, and forks of the fork can use it. */
            struct checkpoint cp = {.key = r->key, .ref = r->checkpoint_ref, .generation = 0,
                                    .covered_seq = f.last_seq};
            memcpy(cp.exec_id, f.id, sizeof cp.exec_id);
            if ((st = store_checkpoint_insert(k->st, &cp)) < 0) {
                k_store_fail(err, st, "recording the restored checkpoint");
                goto out;
            }
            if (k_emit(k, &f, "resource.checkpointed",
                       json_pack("{s:s, s:i, s:s, s:I, s:b}", "key", r->key, "generation", 0, "checkpoint_ref",
                                 r->checkpoint_ref, "covered_seq", (json_int_t)cp.covered_seq, "restored", 1),
                       now, err) < 0)
                goto out;
        }
    }
    if (k_session_enter(k, &f, now, err) < 0 || k_save_exec(k, &f, now, err) < 0) goto out;
    *out = k_exec_json(&f);
    rc = 0;
out:
    for (int i = 0; i < rx.n; i++) resource_fini(&rx.list[i]);
    free(rx.list);
    json_decref(rx.restoration);
    json_decref(cx.settled);
    execution_fini(&f);
    execution_fini(&src);
    return rc;
}

/* --- fork points --- */

struct points_ctx {
    json_t *checkpoints, *events, *registered;
    struct checkpoint *cps;
    int n_cps;
};

static int points_cp(struct checkpoint *c, void *arg)
{
    struct points_ctx *x = arg;
    json_array_append_new(x->checkpoints,
                          json_pack("{s:s, s:I, s:s, s:I, s:o}", "key", c->key, "generation", (json_int_t)c->generation,
                                    "checkpoint_ref", c->ref, "covered_seq", (json_int_t)c->covered_seq,
                                    "invalidated_seq", c->invalidated_seq ? json_integer(c->invalidated_seq) : json_null()));
    x->cps = xrealloc(x->cps, (size_t)(x->n_cps + 1) * sizeof *x->cps);
    struct checkpoint *d = &x->cps[x->n_cps++];
    *d = *c;
    d->key = xstrdup(c->key);
    d->ref = xstrdup(c->ref);
    return 0;
}

static int points_res(struct resource *r, void *arg)
{
    json_object_set_new(((struct points_ctx *)arg)->registered, r->key, json_integer(r->registered_seq));
    return 0;
}

/* Every resource registered by seq has a checkpoint covering seq. */
static bool covered_at(struct points_ctx *x, int64_t seq)
{
    const char *key;
    json_t *reg;
    json_object_foreach(x->registered, key, reg) {
        if (json_integer_value(reg) > seq) continue;
        bool ok = false;
        for (int i = 0; i < x->n_cps && !ok; i++)
            ok = strcmp(x->cps[i].key, key) == 0 && x->cps[i].covered_seq <= seq &&
                 (x->cps[i].invalidated_seq == 0 || seq < x->cps[i].invalidated_seq);
        if (!ok) return false;
    }
    return true;
}

static int points_event(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct points_ctx *x = arg;
    json_t *p = k_json(payload);
    json_t *target = json_object_get(p, "target");
    json_array_append_new(x->events, json_pack("{s:I, s:s, s:O, s:b}", "seq", (json_int_t)seq, "type", type, "target",
                                               target ? target : json_null(), "covered", covered_at(x, seq)));
    json_decref(p);
    return 0;
}

int kernel_fork_points(struct kernel *k, const struct caller *c, const char *id, int64_t after, int limit,
                       json_t **out, struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    struct points_ctx x = {json_array(), json_array(), json_object(), NULL, 0};
    int st = store_checkpoints_each(k->st, e.id, points_cp, &x);
    if (st == 0) st = store_resources_each(k->st, e.id, points_res, &x);
    if (st == 0) st = store_events_each(k->st, e.id, after, limit, points_event, &x);
    int rc = 0;
    if (st < 0) {
        rc = k_store_fail(err, st, "reading fork points");
        json_decref(x.checkpoints);
        json_decref(x.events);
        json_decref(x.registered);
    } else {
        *out = json_pack("{s:I, s:o, s:o, s:o}", "latest_seq", (json_int_t)e.last_seq, "resources", x.registered,
                         "checkpoints", x.checkpoints, "events", x.events);
    }
    for (int i = 0; i < x.n_cps; i++) checkpoint_fini(&x.cps[i]);
    free(x.cps);
    execution_fini(&e);
    return rc;
}
