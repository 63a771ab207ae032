/*
 * sessions.c - turns of a conversation: one active execution per session.
 *
 * An execution created with a session that already has an active execution
 * waits (status pending, no dispatch). When the active one ends, the oldest
 * waiting one is admitted: it gets a dispatch, its parent becomes the newest
 * completed execution of the same agent in the session, and it inherits the
 * parent's resources with their bindings (so the same workspace is reopened).
 * A reopened resource is what the parent left: when a checkpoint of the parent
 * still covers the parent's end (a completion checkpoint, say), it is recorded
 * as the turn's generation-0 checkpoint, so the turn is covered from its start
 * (forks of it before its first capture restore it, and the agent need not take
 * a baseline); otherwise the resource is uncovered until a new baseline.
 * previous() reads the parent's state, or its output when no state was recorded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "kernel/kernel_int.h"

struct inherit_ctx {
    struct kernel *k;
    struct execution *e;
    int64_t now;
    struct err *err;
};

struct newest_ctx {
    const struct resource *r;
    struct checkpoint best;
    bool have;
};

/* The newest checkpoint of the resource's current generation still open. */
static int newest_open(struct checkpoint *c, void *arg)
{
    struct newest_ctx *x = arg;
    if (strcmp(c->key, x->r->key) != 0 || c->generation != x->r->generation || c->invalidated_seq != 0) return 0;
    if (x->have && c->covered_seq < x->best.covered_seq) return 0;
    checkpoint_fini(&x->best);
    x->best = *c;
    x->best.key = xstrdup(c->key);
    x->best.ref = xstrdup(c->ref);
    x->have = true;
    return 0;
}

/* The turn reopens the parent's resource as the parent left it: a checkpoint covering
 * the parent's end covers the turn's start too. */
static int inherit_checkpoint(struct inherit_ctx *x, const struct resource *src)
{
    struct newest_ctx n = {.r = src};
    int rc = store_checkpoints_each(x->k->st, src->exec_id, newest_open, &n);
    if (rc < 0) return k_store_fail(x->err, rc, "reading the previous turn's checkpoints");
    if (!n.have) return 0;
    struct checkpoint cp = {.key = n.best.key, .ref = n.best.ref, .generation = 0, .covered_seq = x->e->last_seq};
    memcpy(cp.exec_id, x->e->id, sizeof cp.exec_id);
    if ((rc = store_checkpoint_insert(x->k->st, &cp)) < 0) rc = k_store_fail(x->err, rc, "inheriting a checkpoint");
    else
        rc = k_emit(x->k, x->e, "resource.checkpointed",
                    json_pack("{s:s, s:i, s:s, s:I, s:s}", "key", cp.key, "generation", 0, "checkpoint_ref", cp.ref,
                              "covered_seq", (json_int_t)cp.covered_seq, "inherited_from", src->exec_id),
                    x->now, x->err);
    checkpoint_fini(&n.best);
    return rc;
}

static int inherit_one(struct resource *src, void *arg)
{
    struct inherit_ctx *x = arg;
    struct resource r = *src;
    memcpy(r.exec_id, x->e->id, sizeof r.exec_id);
    r.generation = 0;
    r.count = 0;
    r.checkpoint_ref = NULL;
    r.registered_seq = x->e->last_seq + 1;
    int rc = store_resource_insert(x->k->st, &r);
    if (rc == -EEXIST) return 0; /* already registered on this execution */
    if (rc < 0) return k_store_fail(x->err, rc, "inheriting a resource");
    if (k_emit(x->k, x->e, "resource.registered",
               json_pack("{s:s, s:s, s:o, s:b, s:I, s:b, s:s}", "key", r.key, "driver_id", r.driver_id,
                         "configuration", k_json(r.configuration), "coverage_reuse", r.coverage_reuse,
                         "every_steps", (json_int_t)r.every_steps, "on_completion", r.on_completion,
                         "inherited_from", src->exec_id), x->now, x->err) < 0)
        return -1;
    if (r.binding && (k_emit(x->k, x->e, "resource.bound",
                             json_pack("{s:s, s:o, s:s}", "key", r.key, "binding", k_json(r.binding),
                                       "inherited_from", src->exec_id), x->now, x->err) < 0 ||
                      inherit_checkpoint(x, src) < 0))
        return -1;
    return 0;
}

int k_admit(struct kernel *k, struct execution *e, bool waited, int64_t now, struct err *err)
{
    if (e->parent_id[0] && !e->forked_from[0]) { /* an explicit parent (created with one) */
        struct inherit_ctx x = {k, e, now, err};
        int r = store_resources_each(k->st, e->parent_id, inherit_one, &x);
        if (r < 0) return err->status ? -1 : k_store_fail(err, r, "inheriting resources");
    } else if (e->session && !e->forked_from[0]) {
        char parent[UUID_STR_LEN];
        int r = store_session_last_completed(k->st, e->session, e->agent, parent);
        if (r < 0 && r != -ENOENT) return k_store_fail(err, r, "finding the previous turn");
        if (r == 0) {
            memcpy(e->parent_id, parent, sizeof e->parent_id);
            struct inherit_ctx x = {k, e, now, err};
            r = store_resources_each(k->st, parent, inherit_one, &x);
            if (r < 0) return err->status ? -1 : k_store_fail(err, r, "inheriting resources");
        }
    }
    if (waited && k_emit(k, e, "execution.admitted",
                         json_pack("{s:s, s:o, s:o}", "execution_id", e->id, "session", k_opt_str(e->session),
                                   "parent_execution_id", e->parent_id[0] ? json_string(e->parent_id) : json_null()),
                         now, err) < 0)
        return -1;
    return k_queue_dispatch(k, e, now, err);
}

int k_session_enter(struct kernel *k, struct execution *e, int64_t now, struct err *err)
{
    if (e->session) {
        char active[UUID_STR_LEN];
        int r = store_session_active(k->st, e->session, active);
        if (r == 0 && strcmp(active, e->id) != 0) {
            /* Someone holds the session: wait for our turn without a dispatch. */
            e->dstate = DISPATCH_NONE;
            return k_emit(k, e, "execution.waiting",
                          json_pack("{s:s, s:s, s:s}", "execution_id", e->id, "session", e->session,
                                    "behind", active), now, err);
        }
        if (r < 0 && r != -ENOENT) return k_store_fail(err, r, "checking the session");
    }
    return k_admit(k, e, false, now, err);
}

int k_session_release(struct kernel *k, const struct execution *ended, int64_t now, struct err *err)
{
    if (!ended->session) return 0;
    char id[UUID_STR_LEN];
    int r = store_session_active(k->st, ended->session, id);
    if (r == 0) return 0; /* still held (the ended one was only waiting) */
    if (r != -ENOENT) return k_store_fail(err, r, "checking the session");
    r = store_session_next_waiting(k->st, ended->session, id);
    if (r == -ENOENT) return 0;
    if (r < 0) return k_store_fail(err, r, "finding the next turn");
    struct execution next;
    if ((r = store_exec_get(k->st, id, &next)) < 0) return k_store_fail(err, r, "reading the next turn");
    int rc = k_admit(k, &next, true, now, err) < 0 ? -1 : k_save_exec(k, &next, now, err);
    execution_fini(&next);
    return rc;
}

int kernel_previous(struct kernel *k, const struct caller *c, const char *id, json_t **out,
                    struct err *err)
{
    struct execution e;
    if (k_load_exec(k, c, id, &e, err) < 0) return -1;
    json_t *state = json_null();
    if (e.parent_id[0]) {
        struct execution p;
        if (store_exec_get(k->st, e.parent_id, &p) == 0) {
            json_decref(state);
            state = p.state ? k_json(p.state) : k_json(p.output);
            execution_fini(&p);
        }
    }
    /* state stays even when null (upstream sends it so); a first turn has no parent */
    *out = json_pack("{s:o}", "state", state);
    if (e.parent_id[0]) json_object_set_new(*out, "parent_execution_id", json_string(e.parent_id));
    execution_fini(&e);
    return 0;
}
