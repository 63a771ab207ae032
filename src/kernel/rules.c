/* rules.c - pure decision logic of the kernel (see rules.h). */
#include "kernel/rules.h"

#include <string.h>

enum resubmit_action rules_resubmit(enum step_status status, enum idempotency requested)
{
    switch (status) {
    case STEP_SUCCEEDED: return RESUBMIT_REPLAY_RESULT;
    case STEP_FAILED: return RESUBMIT_REPLAY_ERROR;
    case STEP_DENIED: return RESUBMIT_DENIED;
    case STEP_AWAITING_APPROVAL: return RESUBMIT_BLOCKED;
    case STEP_ALLOWED: return RESUBMIT_PROCEED; /* approved; the body never ran */
    case STEP_EXECUTING:
        /* Started and never finished: the worker died or lost its lease mid-effect. */
        return requested == IDEM_AT_MOST_ONCE ? RESUBMIT_INDETERMINATE : RESUBMIT_PROCEED;
    case STEP_CANCELLED: return RESUBMIT_TERMINAL;
    }
    return RESUBMIT_TERMINAL;
}

bool rules_exec_transition_ok(enum exec_status from, enum exec_status to)
{
    switch (from) {
    case EXEC_PENDING: return to == EXEC_RUNNING || to == EXEC_CANCELLED || to == EXEC_FAILED;
    case EXEC_RUNNING:
        return to == EXEC_BLOCKED || to == EXEC_COMPLETED || to == EXEC_FAILED || to == EXEC_CANCELLED;
    case EXEC_BLOCKED: return to == EXEC_RUNNING || to == EXEC_CANCELLED || to == EXEC_FAILED;
    case EXEC_COMPLETED: case EXEC_FAILED: case EXEC_CANCELLED: return false;
    }
    return false;
}

enum lease_check rules_lease_check(const struct execution *e, const char *dispatch_id,
                                   int64_t attempt)
{
    if (!dispatch_id || !*dispatch_id || attempt <= 0) return LEASE_MISSING;
    if (strcmp(dispatch_id, e->dispatch_id) != 0 || attempt != e->attempt) return LEASE_SUPERSEDED;
    if (e->dstate == DISPATCH_QUEUED || e->dstate == DISPATCH_NONE) return LEASE_EXPIRED;
    return LEASE_OK;
}
