/*
 * rules.h - the kernel's pure decision logic: no I/O, no allocation.
 *
 * What happens when a step that already has a record is submitted again (replay,
 * orphan handling), which execution transitions are legal, and how a dispatch's
 * lease is checked. kernel.c applies these decisions to the store; the unit tests
 * exercise them directly.
 */
#ifndef REBUNO_KERNEL_RULES_H
#define REBUNO_KERNEL_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "kernel/model.h"

enum resubmit_action {
    RESUBMIT_REPLAY_RESULT,   /* succeeded: return the recorded result */
    RESUBMIT_REPLAY_ERROR,    /* failed: return the recorded error */
    RESUBMIT_DENIED,          /* denied: repeat the refusal */
    RESUBMIT_BLOCKED,         /* awaiting approval: still blocked */
    RESUBMIT_PROCEED,         /* approved, or a safe_to_retry orphan: run it (again) */
    RESUBMIT_INDETERMINATE,   /* an at_most_once orphan: fail it as indeterminate */
    RESUBMIT_TERMINAL,        /* cancelled with its execution */
};

/* A step with this status is submitted again with this idempotency. The request's
 * idempotency decides orphan handling (the caller knows the effect best). */
enum resubmit_action rules_resubmit(enum step_status status, enum idempotency requested);

bool rules_exec_transition_ok(enum exec_status from, enum exec_status to);

enum lease_check { LEASE_OK, LEASE_MISSING, LEASE_SUPERSEDED, LEASE_EXPIRED };
/* Is (dispatch_id, attempt) the execution's current dispatch attempt? A queued dispatch
 * (lease expired, waiting for the next claim) no longer belongs to anyone. */
enum lease_check rules_lease_check(const struct execution *e, const char *dispatch_id,
                                   int64_t attempt);

#endif
