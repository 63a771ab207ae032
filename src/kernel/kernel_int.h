/*
 * kernel_int.h - private to src/kernel: the kernel struct and the helpers its
 * files (kernel.c, sessions.c, resources.c, fork.c) share. Not for other modules.
 */
#ifndef REBUNO_KERNEL_KERNEL_INT_H
#define REBUNO_KERNEL_KERNEL_INT_H

#include "kernel/kernel.h"

struct agent_conf {
    char *name;
    struct policy *policy;
    int64_t lease_ms, max_attempts;
};

struct worker {
    char id[UUID_STR_LEN];
    char *agent, *name;
    int64_t last_seen;
};

struct kernel {
    struct store *st;
    struct kernel_config cfg;
    struct agent_conf *agents;
    int n_agents;
    struct worker *workers;
    int n_workers;
    struct kernel_notes notes;
};

/* Map a store error to an API error (404 for -ENOENT). Returns -1. */
int k_store_fail(struct err *err, int r, const char *what);
/* Stored JSON text -> new JSON value (NULL text -> null). */
json_t *k_json(const char *text);
/* JSON value -> compact text (caller frees). */
char *k_text(const json_t *v);
json_t *k_time(int64_t ms);
json_t *k_opt_str(const char *s);
void k_set_str(char **dst, const char *src);
void k_note_exec(struct kernel *k, const char *id);
void k_note_agent(struct kernel *k, const char *agent);
/* Append an event (payload stolen) and note the execution for watchers. */
int k_emit(struct kernel *k, struct execution *e, const char *type, json_t *payload, int64_t now,
           struct err *err);
int k_save_exec(struct kernel *k, struct execution *e, int64_t now, struct err *err);
struct agent_conf *k_find_agent(struct kernel *k, const char *name);
int k_load_exec(struct kernel *k, const struct caller *c, const char *id, struct execution *e,
                struct err *err);
int k_load_step(struct kernel *k, const struct execution *e, const char *step_id, struct step *s,
                struct err *err);
int k_check_lease(struct kernel *k, struct execution *e, const struct dispatch_ref *d, int64_t now,
                  struct err *err);
json_t *k_exec_json(const struct execution *e);
json_t *k_step_json(const struct step *s);
json_t *k_decision(const char *d, const char *step_id);
/* Queue a fresh dispatch (new id; attempts restart). */
int k_queue_dispatch(struct kernel *k, struct execution *e, int64_t now, struct err *err);
/* Move to a terminal status; releases the session and admits the next turn. */
int k_finish_exec(struct kernel *k, struct execution *e, enum exec_status to, const char *reason,
                  int64_t now, struct err *err);

#endif
