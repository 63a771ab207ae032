/*
 * model.h - the kernel's entities as plain structs: executions, steps, approvals,
 * and the names of their states. Shared by the store (which persists them) and
 * the kernel (which changes them). JSON-valued fields are kept as compact JSON
 * text (heap strings owned by the struct; free with the *_fini functions).
 */
#ifndef REBUNO_KERNEL_MODEL_H
#define REBUNO_KERNEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/uuid.h"

#define STEP_ID_LEN 65 /* 64 hex + NUL */

enum exec_status { EXEC_PENDING, EXEC_RUNNING, EXEC_BLOCKED, EXEC_COMPLETED, EXEC_FAILED, EXEC_CANCELLED };
enum dispatch_state { DISPATCH_NONE, DISPATCH_QUEUED, DISPATCH_LEASED, DISPATCH_RELEASED };
enum step_status {
    STEP_EXECUTING, STEP_AWAITING_APPROVAL, STEP_ALLOWED, STEP_SUCCEEDED, STEP_FAILED,
    STEP_DENIED, STEP_CANCELLED
};
enum idempotency { IDEM_SAFE_TO_RETRY, IDEM_AT_MOST_ONCE };
enum approval_status { APPROVAL_PENDING, APPROVAL_GRANTED, APPROVAL_DENIED, APPROVAL_EXPIRED };

struct execution {
    char id[UUID_STR_LEN];
    char *agent;
    char *session;        /* NULL when none */
    char *input;          /* JSON text */
    enum exec_status status;
    char *output;         /* JSON text or NULL */
    char *state;          /* JSON text or NULL */
    char *failure_reason; /* or NULL */
    int64_t created_at, updated_at, deadline_at; /* ms; deadline 0 = none */
    int64_t last_seq;
    /* the current dispatch */
    char dispatch_id[UUID_STR_LEN]; /* "" when never dispatched */
    int64_t attempt;
    enum dispatch_state dstate;
    int64_t queued_at;
    char worker_id[UUID_STR_LEN];
    int64_t lease_deadline;
    int64_t lease_ms;
    int64_t max_attempts;
    /* sessions and forks */
    char parent_id[UUID_STR_LEN];   /* completed turn this one continues, "" = none */
    char forked_from[UUID_STR_LEN]; /* source execution of a fork, "" = not a fork */
    int64_t fork_seq;               /* event of the source the fork starts after */
    char *restoration;              /* fork: JSON of what each resource restored from */
};

struct step {
    char step_id[STEP_ID_LEN];
    char exec_id[UUID_STR_LEN];
    char *kind, *target;
    char args_hash[STEP_ID_LEN];
    int64_t occurrence;
    enum idempotency idem;
    enum step_status status;
    char *args;    /* canonical JSON text */
    char *result;  /* JSON text or NULL */
    char *error;   /* JSON text or NULL */
    char *rule_id; /* or NULL */
    char approval_id[UUID_STR_LEN];
    int64_t runs;  /* how many times the effect was started */
    bool indeterminate;
    int64_t created_at, completed_at;
    char *resources; /* JSON array of the resource keys this step changes, or NULL */
};

/* A resource (e.g. a sandbox workspace) registered by an execution. The kernel
 * keeps bindings and checkpoint references; the driver keeps contents. */
struct resource {
    char exec_id[UUID_STR_LEN];
    char *key, *driver_id, *configuration; /* configuration: JSON text */
    bool coverage_reuse, on_completion;
    int64_t every_steps;    /* 0 = no checkpoints */
    int64_t registered_seq;
    int64_t generation;     /* bumps at every live step that may change it */
    int64_t count;          /* settled live steps that declared it */
    char *binding;          /* JSON locator, NULL until bound */
    char *checkpoint_ref;   /* fork: where create() starts from, NULL = fresh */
};

/* A checkpoint covers events covered_seq <= seq < invalidated_seq (0 = open). */
struct checkpoint {
    char exec_id[UUID_STR_LEN];
    char *key, *ref;
    int64_t generation, covered_seq, invalidated_seq;
};

struct approval {
    char id[UUID_STR_LEN];
    char exec_id[UUID_STR_LEN];
    char step_id[STEP_ID_LEN];
    enum approval_status status;
    char *rule_id, *reason, *message;
    char *approvers; /* JSON array text or NULL */
    int64_t timeout_at, created_at, decided_at;
    char *decided_by, *rationale;
};

void execution_fini(struct execution *e);
void step_fini(struct step *s);
void approval_fini(struct approval *a);
void resource_fini(struct resource *r);
void checkpoint_fini(struct checkpoint *c);

const char *exec_status_name(enum exec_status s);
int exec_status_parse(const char *s, enum exec_status *out);
bool exec_status_terminal(enum exec_status s);
const char *dispatch_state_name(enum dispatch_state s);
int dispatch_state_parse(const char *s, enum dispatch_state *out);
const char *step_status_name(enum step_status s);
int step_status_parse(const char *s, enum step_status *out);
bool step_status_terminal(enum step_status s);
const char *idempotency_name(enum idempotency i);
int idempotency_parse(const char *s, enum idempotency *out);
const char *approval_status_name(enum approval_status s);
int approval_status_parse(const char *s, enum approval_status *out);

#endif
