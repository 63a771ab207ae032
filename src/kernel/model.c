/* model.c - names of the kernel's states and the entity destructors (see model.h). */
#include "kernel/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static const char *exec_names[] = {"pending", "running", "blocked", "completed", "failed", "cancelled"};
static const char *dispatch_names[] = {"none", "queued", "leased", "released"};
static const char *step_names[] = {"executing", "awaiting_approval", "allowed", "succeeded",
                                   "failed", "denied", "cancelled"};
static const char *idem_names[] = {"safe_to_retry", "at_most_once"};
static const char *approval_names[] = {"pending", "granted", "denied", "expired"};

static int parse_name(const char *s, const char **names, int n, int *out)
{
    if (!s) return -EINVAL;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -EINVAL;
}

#define NAME_FUNCS(prefix, type, names)                                                    \
    const char *prefix##_name(type v)                                                      \
    {                                                                                      \
        ASSERT((int)v >= 0 && (size_t)v < ARRAY_LEN(names));                               \
        return names[v];                                                                   \
    }                                                                                      \
    int prefix##_parse(const char *s, type *out)                                           \
    {                                                                                      \
        int i;                                                                             \
        if (parse_name(s, names, (int)ARRAY_LEN(names), &i) < 0) return -EINVAL;           \
        *out = (type)i;                                                                    \
        return 0;                                                                          \
    }

NAME_FUNCS(exec_status, enum exec_status, exec_names)
NAME_FUNCS(dispatch_state, enum dispatch_state, dispatch_names)
NAME_FUNCS(step_status, enum step_status, step_names)
NAME_FUNCS(idempotency, enum idempotency, idem_names)
NAME_FUNCS(approval_status, enum approval_status, approval_names)

bool exec_status_terminal(enum exec_status s)
{
    return s == EXEC_COMPLETED || s == EXEC_FAILED || s == EXEC_CANCELLED;
}

bool step_status_terminal(enum step_status s)
{
    return s == STEP_SUCCEEDED || s == STEP_FAILED || s == STEP_DENIED || s == STEP_CANCELLED;
}

void execution_fini(struct execution *e)
{
    free(e->agent);
    free(e->session);
    free(e->input);
    free(e->output);
    free(e->state);
    free(e->failure_reason);
    free(e->restoration);
    memset(e, 0, sizeof *e);
}

void step_fini(struct step *s)
{
    free(s->kind);
    free(s->target);
    free(s->args);
    free(s->result);
    free(s->error);
    free(s->rule_id);
    free(s->resources);
    memset(s, 0, sizeof *s);
}

void approval_fini(struct approval *a)
{
    free(a->rule_id);
    free(a->reason);
    free(a->message);
    free(a->approvers);
    free(a->decided_by);
    free(a->rationale);
    memset(a, 0, sizeof *a);
}

void resource_fini(struct resource *r)
{
    free(r->key);
    free(r->driver_id);
    free(r->configuration);
    free(r->binding);
    free(r->checkpoint_ref);
    memset(r, 0, sizeof *r);
}

void checkpoint_fini(struct checkpoint *c)
{
    free(c->key);
    free(c->ref);
    memset(c, 0, sizeof *c);
}
