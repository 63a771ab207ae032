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
    char *webhook_url; /* NULL: the agent pulls (claims or the dispatch stream) */
    char *secret;      /* NULL: no signed calls */
    bool policy_runtime; /* the policy was set at run time (kept when the config gives none) */
    int64_t registered_at; /* ms: first registered at run time, else when this kernel first knew it */
};

struct worker {
    char id[UUID_STR_LEN];
    char *agent, *name;
    int64_t last_seen;
};

struct kernel {
    struct store *st;
    struct kernel_config cfg;
    struct kernel_judge_request judge_req; /* the last judge_pending's question */
    struct {
        bool set;
        char step_id[STEP_ID_LEN];
        enum policy_decision decision;
        char reason[320];
    } verdict; /* the answer, for the next submission of that step */
    int64_t parked_next;    /* earliest wake time of a parked execution (0: none known) */
    int64_t parked_checked; /* monotonic ms when parked_next was last read from the store */
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
json_t *k_omit_nulls(json_t *view); /* drop the null members of a view object */
void k_set_str(char **dst, const char *src);
void k_note_exec(struct kernel *k, const char *id);
void k_note_agent(struct kernel *k, const char *agent);
/* Append an event (payload stolen) and note the execution for watchers. */
int k_emit(struct kernel *k, struct execution *e, const char *type, json_t *payload, int64_t now,
           struct err *err);
/* The same with the payload's text (stolen; NULL stores what a failed json_pack would). */
int k_emit_text(struct kernel *k, struct execution *e, const char *type, char *text, int64_t now,
                struct err *err);
int k_save_exec(struct kernel *k, struct execution *e, int64_t now, struct err *err);
/* What a hot-path operation compares against to skip rewriting an unchanged row. */
struct exec_mark {
    enum exec_status status;
    enum dispatch_state dstate;
    int64_t attempt, lease_deadline;
};
void k_mark(const struct execution *e, struct exec_mark *m);
/* Save e only if its status or dispatch changed, or its lease moved far enough that the
 * stored deadline could expire a live worker (a quarter lease, at most 1 s). */
int k_save_exec_changed(struct kernel *k, struct execution *e, const struct exec_mark *m, int64_t now,
                        struct err *err);
struct agent_conf *k_find_agent(struct kernel *k, const char *name);
struct agent_conf *k_ensure_agent(struct kernel *k, const char *name);
/* policy_gates.c: rate_limit, judge and budget of a matched rule (see there). 0 go on
 * (pr may now say something else, its reason in g), 1 *out is the reply and nothing is
 * recorded (rate_limited), -1 err (judge_pending included). */
struct k_gate {
    char reason[320];
};
int k_policy_gates(struct kernel *k, struct execution *e, struct step *s, const json_t *args,
                   struct policy_result *pr, struct k_gate *g, int64_t now, json_t **out, struct err *err);
/* Rate-limit parking (policy_gates.c): the execution parked before; park it; queue the
 * parked ones that are due (returns how many); the earliest wake time. */
int k_exec_parked_before(struct kernel *k, const char *exec_id);
int k_park(struct kernel *k, struct execution *e, struct step *s, const char *rule_id, int64_t wait, int64_t now,
           json_t **out, struct err *err);
int k_unpark_due(struct kernel *k, int64_t now, struct err *err);
int64_t k_parked_next(struct kernel *k);
/* Tokens the execution's recorded llm_call results report. */
int k_exec_tokens(struct kernel *k, const char *exec_id, int64_t *out);
/* agents_admin.c: save an agent's run-time settings; load them all (at start). */
int k_agent_persist(struct kernel *k, const struct agent_conf *a, struct err *err);
int k_agents_load(struct kernel *k);
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

/* sessions.c */
/* Admit e to its session (or start it): parent, inherited resources, a dispatch. */
int k_admit(struct kernel *k, struct execution *e, bool waited, int64_t now, struct err *err);
/* A new execution: admit it, or make it wait when its session is held. */
int k_session_enter(struct kernel *k, struct execution *e, int64_t now, struct err *err);
/* An execution ended: admit the next waiting turn of its session. */
int k_session_release(struct kernel *k, const struct execution *ended, int64_t now, struct err *err);

/* resources.c */
/* Does the JSON array text of resource keys contain key? */
bool k_declares(const char *resources_json, const char *key);
/* Every declared key (JSON array of strings) is registered on e, else 400. */
int k_resources_validate(struct kernel *k, const struct execution *e, const json_t *declared, struct err *err);
/* A live step starts: end coverage, bump generations, say which captures are due. */
int k_resources_touch(struct kernel *k, struct execution *e, const struct step *s, json_t **views,
                      struct err *err);
/* The {key, generation, due} views of a running step's resources, changing nothing. */
int k_resources_views(struct kernel *k, struct execution *e, const struct step *s, json_t **views,
                      struct err *err);
/* A live step settled: count it towards its resources' cadence. */
int k_resources_settle(struct kernel *k, struct execution *e, const struct step *s, struct err *err);
int k_record_captures(struct kernel *k, struct execution *e, const json_t *captures, const json_t *failures,
                      json_t **out, int64_t now, struct err *err);

#endif
