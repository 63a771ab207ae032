/* test_rules.c - the kernel's pure decision logic: resubmission, transitions, leases. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernel/rules.h"

Test(rules, resubmit_replays_settled_steps)
{
    cr_assert_eq(rules_resubmit(STEP_SUCCEEDED, IDEM_SAFE_TO_RETRY), RESUBMIT_REPLAY_RESULT);
    cr_assert_eq(rules_resubmit(STEP_SUCCEEDED, IDEM_AT_MOST_ONCE), RESUBMIT_REPLAY_RESULT);
    cr_assert_eq(rules_resubmit(STEP_FAILED, IDEM_SAFE_TO_RETRY), RESUBMIT_REPLAY_ERROR);
    cr_assert_eq(rules_resubmit(STEP_DENIED, IDEM_AT_MOST_ONCE), RESUBMIT_DENIED);
    cr_assert_eq(rules_resubmit(STEP_AWAITING_APPROVAL, IDEM_SAFE_TO_RETRY), RESUBMIT_BLOCKED);
    cr_assert_eq(rules_resubmit(STEP_CANCELLED, IDEM_SAFE_TO_RETRY), RESUBMIT_TERMINAL);
}

Test(rules, approved_step_proceeds_even_when_at_most_once)
{
    /* The body never ran before approval, so running it now is its first run. */
    cr_assert_eq(rules_resubmit(STEP_ALLOWED, IDEM_AT_MOST_ONCE), RESUBMIT_PROCEED);
}

Test(rules, orphans_depend_on_idempotency)
{
    cr_assert_eq(rules_resubmit(STEP_EXECUTING, IDEM_SAFE_TO_RETRY), RESUBMIT_PROCEED);
    cr_assert_eq(rules_resubmit(STEP_EXECUTING, IDEM_AT_MOST_ONCE), RESUBMIT_INDETERMINATE);
}

Test(rules, execution_transitions)
{
    cr_assert(rules_exec_transition_ok(EXEC_PENDING, EXEC_RUNNING));
    cr_assert(rules_exec_transition_ok(EXEC_PENDING, EXEC_CANCELLED));
    cr_assert(!rules_exec_transition_ok(EXEC_PENDING, EXEC_BLOCKED));
    cr_assert(!rules_exec_transition_ok(EXEC_PENDING, EXEC_COMPLETED));
    cr_assert(rules_exec_transition_ok(EXEC_RUNNING, EXEC_BLOCKED));
    cr_assert(rules_exec_transition_ok(EXEC_BLOCKED, EXEC_RUNNING));
    cr_assert(!rules_exec_transition_ok(EXEC_BLOCKED, EXEC_COMPLETED));
    for (int t = EXEC_PENDING; t <= EXEC_CANCELLED; t++) {
        cr_assert(!rules_exec_transition_ok(EXEC_COMPLETED, (enum exec_status)t));
        cr_assert(!rules_exec_transition_ok(EXEC_FAILED, (enum exec_status)t));
        cr_assert(!rules_exec_transition_ok(EXEC_CANCELLED, (enum exec_status)t));
    }
}

static struct execution leased(void)
{
    struct execution e;
    memset(&e, 0, sizeof e);
    strcpy(e.dispatch_id, "01920000-0000-7000-8000-000000000001");
    e.attempt = 2;
    e.dstate = DISPATCH_LEASED;
    return e;
}

Test(rules, lease_check)
{
    struct execution e = leased();
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000001", 2), LEASE_OK);
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000001", 1), LEASE_SUPERSEDED);
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000002", 2), LEASE_SUPERSEDED);
    cr_assert_eq(rules_lease_check(&e, NULL, 2), LEASE_MISSING);
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000001", 0), LEASE_MISSING);
    e.dstate = DISPATCH_QUEUED; /* expired and waiting for the next claim */
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000001", 2), LEASE_EXPIRED);
    e.dstate = DISPATCH_RELEASED; /* blocked on approval: still the holder */
    cr_assert_eq(rules_lease_check(&e, "01920000-0000-7000-8000-000000000001", 2), LEASE_OK);
}
