/*
 * cmd_store.c - `rebuno store copy`: move a kernel's whole store into another one, e.g.
 * from the embedded SQLite file into PostgreSQL when one machine is no longer enough.
 *
 *   rebuno store copy --from sqlite:PATH --to postgres://user@host/db
 *
 * Goes through the store interface (store.h), so any store can be copied into any other:
 * agents (with their run-time settings and policies), API keys, executions with their
 * events (same seq), steps (in order), occurrence counters,
 * approvals, resources and checkpoints. The target must hold no executions. Written in
 * transactions of COPY_BATCH executions, each durable before the next starts. Stop the
 * kernel(s) on the source first: a copy of a store still being written misses the rest.
 *
 * Exit status: 0 copied, 1 a store could not be opened or a write failed, 2 bad usage.
 */
#include "cli/commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "store/store.h"

#define COPY_BATCH 100
#define LIST_PAGE 500

static void store_usage(FILE *f)
{
    fputs("usage: rebuno store copy --from STORE --to STORE\n"
          "\n"
          "  Copies every agent, execution, event, step, step counter, approval, resource and\n"
          "  checkpoint from one store into another, e.g. from the embedded SQLite file into\n"
          "  PostgreSQL so several kernel replicas can share it. The target must hold no\n"
          "  executions. Stop the kernels on the source first.\n"
          "\n"
          "  STORE is sqlite:PATH (e.g. sqlite:.rebuno/kernel.db) or\n"
          "  postgres://user[:password]@host[:port]/database\n"
          "\n"
          "exit status: 0 copied, 1 a store failed, 2 bad usage\n",
          f);
}

struct ids {
    char (*v)[UUID_STR_LEN];
    size_t n, cap;
};

static int collect(struct execution *e, void *arg)
{
    struct ids *ids = arg;
    if (ids->n == ids->cap) ids->v = xrealloc(ids->v, (ids->cap = ids->cap ? ids->cap * 2 : 256) * sizeof *ids->v);
    memcpy(ids->v[ids->n++], e->id, UUID_STR_LEN);
    return 0;
}

struct copy {
    struct store *src, *dst;
    struct execution view; /* the target's view while its events are appended (strings borrowed) */
    struct execution *e;   /* &view */
    int64_t events, steps, counters, approvals, resources, checkpoints, agents;
    const char *what; /* what failed, for the message */
};

static int copy_agent(const char *name, void *arg)
{
    struct copy *c = arg;
    c->agents++;
    return store_agent_upsert(c->dst, name, clock_now_ms());
}

static int copy_agent_settings(const char *name, const char *settings, void *arg)
{
    return store_agent_save(((struct copy *)arg)->dst, name, settings, clock_now_ms());
}

static int copy_api_key(const struct api_key_row *k, void *arg)
{
    return store_api_key_put(((struct copy *)arg)->dst, k);
}

static int copy_event(int64_t seq, const char *type, const char *payload, int64_t at, void *arg)
{
    struct copy *c = arg;
    if (seq != c->e->last_seq + 1) {
        c->what = "an event (the source's seq has a gap)";
        return -EPROTO;
    }
    c->events++;
    return store_event_append(c->dst, c->e, type, payload, at);
}

static int copy_step(struct step *s, void *arg)
{
    struct copy *c = arg;
    c->steps++;
    return store_step_insert(c->dst, s);
}

static int copy_counter(const char *kind, const char *target, const char *args_hash, int64_t consumed,
                        const char *last_request, void *arg)
{
    struct copy *c = arg;
    c->counters++;
    return store_counter_set(c->dst, c->e->id, kind, target, args_hash, consumed, last_request);
}

static int copy_approval(struct approval *a, void *arg)
{
    struct copy *c = arg;
    c->approvals++;
    return store_approval_insert(c->dst, a);
}

static int copy_resource(struct resource *r, void *arg)
{
    struct copy *c = arg;
    c->resources++;
    return store_resource_insert(c->dst, r);
}

static int copy_checkpoint(struct checkpoint *k, void *arg)
{
    struct copy *c = arg;
    c->checkpoints++;
    return store_checkpoint_insert(c->dst, k);
}

static int copy_exec(struct copy *c, const char *id)
{
    struct execution e;
    int r = store_exec_get(c->src, id, &e);
    if (r < 0) {
        c->what = "reading an execution";
        return r;
    }
    int64_t last = e.last_seq;
    c->what = "an execution";
    if ((r = store_exec_insert(c->dst, &e)) < 0) goto out;
    c->view = e; /* appends count from 0 again; the strings stay e's */
    c->view.last_seq = 0;
    c->e = &c->view;
    c->what = "an event";
    while (r == 0 && c->view.last_seq < last) {
        int64_t before = c->view.last_seq;
        r = store_events_each(c->src, id, c->view.last_seq, 1000, copy_event, c);
        if (r == 0 && c->view.last_seq == before) break;
    }
    if (r == 0 && c->view.last_seq != last) {
        c->what = "the events (fewer than the execution's last seq)";
        r = -EPROTO;
    }
    if (r == 0) c->what = "a step", r = store_steps_each(c->src, id, copy_step, c);
    if (r == 0) c->what = "a step counter", r = store_counters_each(c->src, id, copy_counter, c);
    if (r == 0) c->what = "an approval", r = store_approvals_each(c->src, NULL, id, 1 << 30, copy_approval, c);
    if (r == 0) c->what = "a resource", r = store_resources_each(c->src, id, copy_resource, c);
    if (r == 0) c->what = "a checkpoint", r = store_checkpoints_each(c->src, id, copy_checkpoint, c);
out:
    execution_fini(&e);
    return r;
}

static int one_exec(struct execution *e, void *arg)
{
    *(bool *)arg = true;
    return 0;
}

static int store_copy(const char *from, const char *to)
{
    if (strcmp(from, to) == 0) {
        fputs("rebuno store copy: --from and --to are the same store; name another target\n", stderr);
        return 2;
    }
    if (!store_spec_is_postgres(from)) {
        const char *path = strncmp(from, "sqlite:", 7) == 0 ? from + 7 : from;
        if (access(path, R_OK) < 0) {
            fprintf(stderr, "rebuno store copy: cannot read %s: %s; pass --from sqlite:PATH of an existing "
                    "kernel.db (by default STATE_DIR/kernel.db)\n", path, strerror(errno));
            return 1;
        }
    }
    char why[1024];
    char *shown_from = store_spec_redacted(from), *shown_to = store_spec_redacted(to);
    struct copy c = {0};
    struct ids ids = {0};
    int rc = 1, r = 0;
    if (!(c.src = store_open(from, why, sizeof why))) {
        fprintf(stderr, "rebuno store copy: source %s: %s\n", shown_from, why);
        goto out;
    }
    if (!(c.dst = store_open(to, why, sizeof why))) {
        fprintf(stderr, "rebuno store copy: target %s: %s\n", shown_to, why);
        goto out;
    }
    bool any = false;
    if ((r = store_exec_list(c.dst, NULL, NULL, NULL, NULL, 1, one_exec, &any)) < 0) {
        c.what = "reading the target";
        goto failed;
    }
    if (any) {
        fprintf(stderr, "rebuno store copy: the target %s already holds executions; copy into an empty "
                "database (or another schema: ?options=-csearch_path%%3Dname)\n", shown_to);
        goto out;
    }
    /* Every id first (newest first, by pages), then copied oldest first. */
    char cursor[UUID_STR_LEN] = "";
    for (;;) {
        size_t before = ids.n;
        if ((r = store_exec_list(c.src, NULL, NULL, NULL, cursor[0] ? cursor : NULL, LIST_PAGE, collect, &ids)) < 0) {
            c.what = "listing the source's executions";
            goto failed;
        }
        if (ids.n == before) break;
        memcpy(cursor, ids.v[ids.n - 1], UUID_STR_LEN);
    }
    if ((r = store_begin(c.dst)) < 0) goto failed;
    c.what = "an agent";
    if ((r = store_agents_each(c.src, copy_agent, &c)) < 0) goto failed;
    if ((r = store_agent_settings_each(c.src, copy_agent_settings, &c)) < 0) goto failed;
    c.what = "an API key";
    if ((r = store_api_keys_each(c.src, copy_api_key, &c)) < 0) goto failed;
    for (size_t i = ids.n; i-- > 0;) {
        if ((r = copy_exec(&c, ids.v[i])) < 0) goto failed;
        if ((ids.n - i) % COPY_BATCH == 0) {
            c.what = "a commit";
            if ((r = store_commit(c.dst)) < 0 || (r = store_begin(c.dst)) < 0) goto failed;
        }
    }
    c.what = "the last commit";
    if ((r = store_commit(c.dst)) < 0) goto failed;
    printf("copied %zu executions, %lld events, %lld steps, %lld step counters, %lld approvals, %lld resources, "
           "%lld checkpoints and %lld agents from %s to %s\n",
           ids.n, (long long)c.events, (long long)c.steps, (long long)c.counters, (long long)c.approvals,
           (long long)c.resources, (long long)c.checkpoints, (long long)c.agents, shown_from, shown_to);
    rc = 0;
    goto out;
failed:
    fprintf(stderr, "rebuno store copy: copying %s failed (%s): %s; the target may hold part of the copy: "
            "empty it before trying again\n", c.what ? c.what : "", strerror(-r),
            store_errmsg(r == -EPROTO || !c.dst ? c.src : c.dst));
    if (c.dst && store_in_tx(c.dst)) store_rollback(c.dst);
out:
    store_close(c.src);
    store_close(c.dst);
    free(ids.v);
    free(shown_from);
    free(shown_to);
    return rc;
}

int cmd_store(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        store_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "copy") != 0) {
        fprintf(stderr, "rebuno store: unknown command %s; the only one is copy\n", argv[1]);
        return 2;
    }
    const char *from = NULL, *to = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            store_usage(stdout);
            return 0;
        }
        if (!strncmp(a, "--from", 6)) dst = &from;
        else if (!strncmp(a, "--to", 4)) dst = &to;
        const char *eq = dst ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        if (!dst || (name_len != 6 && dst == &from) || (name_len != 4 && dst == &to)) {
            fprintf(stderr, "rebuno store copy: unknown option %s; it takes --from STORE --to STORE\n", a);
            return 2;
        }
        if (eq) {
            *dst = eq + 1;
        } else if (i + 1 < argc) {
            *dst = argv[++i];
        } else {
            fprintf(stderr, "rebuno store copy: %s needs a value (sqlite:PATH or postgres://...)\n", a);
            return 2;
        }
    }
    if (!from || !to || !*from || !*to) {
        fputs("rebuno store copy: give both --from STORE and --to STORE\n", stderr);
        store_usage(stderr);
        return 2;
    }
    return store_copy(from, to);
}
