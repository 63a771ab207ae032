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
 * is recorded in the fork's first event (execution.created), in
 * execution.forked and on the execution ("restoration"). Copied results may
 * describe changes the restored resource lacks when the point is not covered;
 * that is the price of forking between checkpoints. at_most_once steps that
 * would run live in a fork need approval (rule __fork_effect) unless the
 * policy denies them outright.
 *
 * The fork's log is the source's history up to at_seq, renumbered:
 *
 *   execution.created, execution.forked,
 *   the copied events in source order: step events of the copied steps, and
 *   each resource's resource.registered + resource.initialized where the
 *   source registered it (so the resource exists from the same logical point),
 *   resource.checkpointed for the source's checkpoints taken by at_seq,
 *   resource.checkpointed {restored} where no copied checkpoint covers at_seq,
 *   then admission (execution.started / dispatch.queued, or a session wait).
 *
 * A copied checkpoint's covered_seq and invalidated_seq are mapped onto the
 * fork's seqs: to the first copied event at or after the source seq, or to the
 * first event after the copies when there is none; an invalidation after
 * at_seq is dropped (the checkpoint is open in the fork). So a copied event is
 * covered in the fork exactly when its source event was, and forking the fork
 * at a copied event restores what forking the source at the original event
 * would. The fork's resource continues the generation of the covering
 * checkpoint (that checkpoint then covers the fork's start until its first live
 * change); at an uncovered point it gets a new generation and the restored
 * checkpoint is recorded once more as covering the fork from the end of the
 * copies, since that is exactly what the agent will create: the driver need not
 * snapshot what it just restored.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "kernel/identity.h"
#include "kernel/kernel_int.h"

#define PAGE 1000

/* --- the source's checkpoints, and what each resource restarts from --- */

struct fork_res {
    struct resource r; /* the fork's row: exec_id, generation, count set on registration */
    bool registered;   /* emitted into the fork's log yet */
    bool covering;     /* the chosen checkpoint covers at_seq */
    int64_t cp_seq;    /* the chosen checkpoint's covered_seq in the source */
};

struct fork_plan {
    int64_t at;
    struct checkpoint *cps; /* the source's checkpoints with covered_seq <= at, by covered_seq */
    int n_cps, cap_cps;
    struct fork_res *res;
    int n_res;
    json_t *restoration; /* key -> {checkpoint_ref, checkpoint_seq, covered} */
};

static int plan_cp(struct checkpoint *c, void *arg)
{
    struct fork_plan *x = arg;
    if (c->covered_seq > x->at) return 0;
    if (x->n_cps == x->cap_cps)
        x->cps = xrealloc(x->cps, (size_t)(x->cap_cps = x->cap_cps ? 2 * x->cap_cps : 8) * sizeof *x->cps);
    struct checkpoint *d = &x->cps[x->n_cps++];
    *d = *c;
    d->key = xstrdup(c->key);
    d->ref = xstrdup(c->ref);
    return 0;
}

static bool cp_covers(const struct checkpoint *c, int64_t seq)
{
    return c->covered_seq <= seq && (c->invalidated_seq == 0 || seq < c->invalidated_seq);
}

static int plan_res(struct resource *r, void *arg)
{
    struct fork_plan *x = arg;
    if (r->registered_seq > x->at) return 0;
    /* A covering checkpoint beats any earlier one; among equals the newest wins. */
    const struct checkpoint *best = NULL;
    bool covering = false, any = false;
    int64_t max_gen = 0;
    for (int i = 0; i < x->n_cps; i++) {
        const struct checkpoint *c = &x->cps[i];
        if (strcmp(c->key, r->key) != 0) continue;
        if (!any || c->generation > max_gen) max_gen = c->generation;
        any = true;
        bool covers = cp_covers(c, x->at);
        if (best && covering && !covers) continue;
        if (best && covers == covering && c->covered_seq < best->covered_seq) continue;
        best = c;
        covering = covers;
    }
    json_object_set_new(x->restoration, r->key,
                        best ? json_pack("{s:s, s:I, s:b}", "checkpoint_ref", best->ref, "checkpoint_seq",
                                         (json_int_t)best->covered_seq, "covered", covering)
                             : json_pack("{s:n, s:n, s:b}", "checkpoint_ref", "checkpoint_seq", "covered", 0));
    x->res = xrealloc(x->res, (size_t)(x->n_res + 1) * sizeof *x->res);
    struct fork_res *f = &x->res[x->n_res++];
    memset(f, 0, sizeof *f);
    f->r = *r;
    f->r.key = xstrdup(r->key);
    f->r.driver_id = xstrdup(r->driver_id);
    f->r.configuration = xstrdup(r->configuration);
    f->r.binding = NULL;
    f->r.checkpoint_ref = best ? xstrdup(best->ref) : NULL;
    f->r.count = 0;
    /* Covered: continue that checkpoint's generation, so it covers the fork's start.
     * Otherwise a generation no copied checkpoint has. */
    f->r.generation = covering ? best->generation : any ? max_gen + 1 : 0;
    f->covering = covering;
    f->cp_seq = best ? best->covered_seq : 0;
    return 0;
}

static void plan_fini(struct fork_plan *x)
{
    for (int i = 0; i < x->n_cps; i++) checkpoint_fini(&x->cps[i]);
    free(x->cps);
    for (int i = 0; i < x->n_res; i++) resource_fini(&x->res[i].r);
    free(x->res);
    json_decref(x->restoration);
}

/* --- copying the source's settled steps --- */

struct seq_pair {
    int64_t src, dst;
};

struct copy_ctx {
    struct kernel *k;
    struct execution *fork;
    struct fork_plan *plan;
    int64_t now;
    json_t *settled;      /* source step_id -> fork step_id */
    struct seq_pair *map; /* source seq -> fork seq of every copied event, ascending */
    int n_map, cap_map;
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
    int st = store_step_get(x->k->st, x->fork->forked_from, src_step_id, &s);
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

static void map_add(struct copy_ctx *x, int64_t src, int64_t dst)
{
    if (x->n_map == x->cap_map)
        x->map = xrealloc(x->map, (size_t)(x->cap_map = x->cap_map ? 2 * x->cap_map : 64) * sizeof *x->map);
    x->map[x->n_map++] = (struct seq_pair){src, dst};
}

/* The fork seq of the first copied event at or after source seq src; end when none. */
static int64_t map_seq(const struct copy_ctx *x, int64_t src, int64_t end)
{
    int lo = 0, hi = x->n_map;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (x->map[mid].src < src) lo = mid + 1;
        else hi = mid;
    }
    return lo < x->n_map ? x->map[lo].dst : end;
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

/* The fork's resource starts unbound from the selected checkpoint (the agent's driver
 * creates it from checkpoint_ref), counting the copied steps that declared it towards
 * its every_steps cadence. */
static int register_res(struct copy_ctx *x, struct fork_res *f)
{
    struct resource *r = &f->r;
    struct count_ctx cc = {r->key, 0};
    int st = store_steps_each(x->k->st, x->fork->id, count_one, &cc);
    if (st < 0) return k_store_fail(x->err, st, "counting copied steps");
    memcpy(r->exec_id, x->fork->id, sizeof r->exec_id);
    r->count = cc.n;
    r->registered_seq = x->fork->last_seq + 1;
    if ((st = store_resource_insert(x->k->st, r)) < 0) return k_store_fail(x->err, st, "copying a resource");
    f->registered = true;
    if (k_emit(x->k, x->fork, "resource.registered",
               json_pack("{s:s, s:s, s:o, s:b, s:I, s:b}", "key", r->key, "driver_id", r->driver_id,
                         "configuration", k_json(r->configuration), "coverage_reuse", r->coverage_reuse,
                         "every_steps", (json_int_t)r->every_steps, "on_completion", r->on_completion),
               x->now, x->err) < 0 ||
        k_emit(x->k, x->fork, "resource.initialized",
               json_pack("{s:s, s:I, s:o}", "key", r->key, "generation", (json_int_t)r->generation,
                         "checkpoint_ref", k_opt_str(r->checkpoint_ref)), x->now, x->err) < 0)
        return -1;
    return 0;
}

static int copy_event(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct copy_ctx *x = arg;
    if (strcmp(type, "resource.registered") == 0) {
        json_t *p = k_json(payload);
        const char *key = json_string_value(json_object_get(p, "key"));
        struct fork_res *f = NULL;
        for (int i = 0; key && i < x->plan->n_res && !f; i++)
            if (!x->plan->res[i].registered && strcmp(x->plan->res[i].r.key, key) == 0) f = &x->plan->res[i];
        json_decref(p);
        if (!f) return 0;
        int64_t registered = x->fork->last_seq + 1;
        if (register_res(x, f) < 0) return -1;
        map_add(x, seq, registered);
        return 0;
    }
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
    if (k_emit(x->k, x->fork, type, p, x->now, x->err) < 0) return -1;
    map_add(x, seq, x->fork->last_seq);
    return 0;
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

/* The source's checkpoints taken by at_seq, remapped onto the fork's seqs (the newest
 * per key and remapped covered_seq), then a restored record for each resource whose
 * checkpoint does not cover at_seq. */
static int copy_checkpoints(struct copy_ctx *x)
{
    struct fork_plan *pl = x->plan;
    int64_t end = x->fork->last_seq + 1; /* the first event after the copies */
    int64_t *cov = xcalloc((size_t)pl->n_cps + 1, sizeof *cov);
    for (int i = 0; i < pl->n_cps; i++) cov[i] = map_seq(x, pl->cps[i].covered_seq, end);
    int rc = -1;
    for (int i = 0; i < pl->n_cps; i++) {
        const struct checkpoint *c = &pl->cps[i];
        /* Remapped seqs never decrease, so checkpoints mapped to the same seq are adjacent;
         * keep the newest of a key (it covers whatever an older one there covers). */
        bool newer = false;
        for (int j = i + 1; j < pl->n_cps && cov[j] == cov[i] && !newer; j++)
            newer = strcmp(pl->cps[j].key, c->key) == 0;
        const struct fork_res *f = NULL;
        for (int j = 0; j < pl->n_res && !f; j++)
            if (strcmp(pl->res[j].r.key, c->key) == 0) f = &pl->res[j];
        if (newer || !f) continue;
        struct checkpoint cp = {.key = c->key, .ref = c->ref, .generation = c->generation, .covered_seq = cov[i],
                                .invalidated_seq = c->invalidated_seq == 0 || c->invalidated_seq > pl->at
                                                       ? 0 : map_seq(x, c->invalidated_seq, end)};
        memcpy(cp.exec_id, x->fork->id, sizeof cp.exec_id);
        int st = store_checkpoint_insert(x->k->st, &cp);
        if (st < 0) {
            k_store_fail(x->err, st, "copying a checkpoint");
            goto out;
        }
        json_t *p = json_pack("{s:s, s:I, s:s, s:I, s:o, s:I}", "key", cp.key, "generation", (json_int_t)cp.generation,
                              "checkpoint_ref", cp.ref, "covered_seq", (json_int_t)cp.covered_seq, "invalidated_seq",
                              cp.invalidated_seq ? json_integer(cp.invalidated_seq) : json_null(),
                              "source_covered_seq", (json_int_t)c->covered_seq);
        if (f->covering && f->cp_seq == c->covered_seq && f->r.generation == c->generation)
            json_object_set_new(p, "restored", json_true()); /* the fork starts as this one */
        if (k_emit(x->k, x->fork, "resource.checkpointed", p, x->now, x->err) < 0) goto out;
    }
    for (int j = 0; j < pl->n_res; j++) {
        const struct fork_res *f = &pl->res[j];
        if (f->covering || !f->r.checkpoint_ref) continue;
        struct checkpoint cp = {.key = f->r.key, .ref = f->r.checkpoint_ref, .generation = f->r.generation,
                                .covered_seq = end};
        memcpy(cp.exec_id, x->fork->id, sizeof cp.exec_id);
        int st = store_checkpoint_insert(x->k->st, &cp);
        if (st < 0) {
            k_store_fail(x->err, st, "recording the restored checkpoint");
            goto out;
        }
        if (k_emit(x->k, x->fork, "resource.checkpointed",
                   json_pack("{s:s, s:I, s:s, s:I, s:b}", "key", cp.key, "generation", (json_int_t)cp.generation,
                             "checkpoint_ref", cp.ref, "covered_seq", (json_int_t)cp.covered_seq, "restored", 1),
                   x->now, x->err) < 0)
            goto out;
    }
    rc = 0;
out:
    free(cov);
    return rc;
}

int kernel_fork(struct kernel *k, const struct caller *c, const char *src_id, int64_t at_seq,
                const char *session, json_t **out, struct err *err)
{
    struct execution src, f;
    if (k_load_exec(k, c, src_id, &src, err) < 0) return -1;
    memset(&f, 0, sizeof f);
    int64_t now = clock_now_ms();
    int rc = -1;
    struct fork_plan plan = {.at = at_seq, .restoration = json_object()};
    struct copy_ctx cx = {.k = k, .fork = &f, .plan = &plan, .now = now, .settled = json_object(), .err = err};
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
    int st = store_checkpoints_each(k->st, src.id, plan_cp, &plan);
    if (st == 0) st = store_resources_each(k->st, src.id, plan_res, &plan);
    if (st < 0) {
        k_store_fail(err, st, "choosing checkpoints");
        goto out;
    }
    f.restoration = k_text(plan.restoration);
    if ((st = store_exec_insert(k->st, &f)) < 0) {
        k_store_fail(err, st, "creating the fork");
        goto out;
    }
    if (k_emit(k, &f, "execution.created",
               json_pack("{s:s, s:s, s:o, s:o, s:s, s:I, s:O}", "execution_id", f.id, "agent", f.agent, "input",
                         k_json(f.input), "session", k_opt_str(f.session), "forked_from", src.id, "fork_seq",
                         (json_int_t)at_seq, "restoration", plan.restoration), now, err) < 0 ||
        k_emit(k, &f, "execution.forked",
               json_pack("{s:s, s:I, s:O}", "source_execution_id", src.id, "fork_seq", (json_int_t)at_seq,
                         "restoration", plan.restoration), now, err) < 0)
        goto out;
    /* Settled steps, then the events in source order with the ids renamed. */
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
    /* A resource whose registration event was not found (cannot happen today) still
     * exists in the fork, from here. */
    for (int i = 0; i < plan.n_res; i++)
        if (!plan.res[i].registered && register_res(&cx, &plan.res[i]) < 0) goto out;
    if (copy_checkpoints(&cx) < 0) goto out;
    if (k_session_enter(k, &f, now, err) < 0 || k_save_exec(k, &f, now, err) < 0) goto out;
    *out = k_exec_json(&f);
    rc = 0;
out:
    plan_fini(&plan);
    json_decref(cx.settled);
    free(cx.map);
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
    json_array_append_new(x->events, json_pack("{s:I, s:s, s:O, s:b}", "event_seq", (json_int_t)seq, "type", type, "target",
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
