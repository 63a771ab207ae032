/*
 * cmd_approval.c - `rebuno approval`: list, show and decide the approvals that
 * require_approval policy rules park steps on (docs/api.md "Approvals").
 *
 *   rebuno approval ls [--status pending|granted|denied|expired|all] [--execution ID]
 *   rebuno approval get ID
 *   rebuno approval grant|deny ID (approve: the old name of grant) [--by NAME] [--reason R]
 *
 * `rebuno exec approve|deny ID` land here too (cmd_exec passes its argv through;
 * argv[0] names the group for usage text). For approve/deny, ID may be an approval
 * id or an execution id with exactly one pending approval.
 *
 * Exit status: 0 ok, 1 the operation failed, 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/xalloc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct appr_opts {
    const char *status, *execution, *by, *reason;
};

struct appr_ctx {
    struct client c;
    struct cli_args a;
    struct appr_opts o;
    const char *group; /* "approval" or "exec" */
    const struct appr_sub *sub;
};

struct appr_sub {
    const char *name;
    const char *synopsis; /* after "rebuno GROUP " */
    const char *help;
    const char *opts[3];
    int max_pos;
    bool in_exec; /* also reachable as `rebuno exec NAME` */
    int (*run)(struct appr_ctx *x);
};

static const char global_help[] =
    "global options (anywhere after the subcommand):\n"
    "  --url URL       kernel address (default: $REBUNO_URL, else " CLIENT_DEFAULT_URL ")\n"
    "  --api-key KEY   API key, sent as a bearer token (default: $REBUNO_API_KEY, else\n"
    "                  the local token of a kernel without api_keys, for its user)\n"
    "  --json          print the kernel's JSON instead of text\n"
    "  -h, --help      show this help\n";

static int usage_error(const struct appr_ctx *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const struct appr_ctx *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: rebuno %s %s\n", x->group, x->sub->synopsis);
    fprintf(stderr, "run 'rebuno %s %s --help' for details\n", x->group, x->sub->name);
    return CLI_USAGE;
}

static int fail(const struct err *e)
{
    cli_print_err(e);
    return CLI_FAILED;
}

static char *approval_path(struct appr_ctx *x, const char *id, const char *suffix)
{
    char *e = client_escape(&x->c, id);
    char *p = xasprintf("/v0/approvals/%s%s", e, suffix);
    free(e);
    return p;
}

/* "kind target" of an approval, cleaned and cut; caller frees. */
static char *step_label(const json_t *ap, size_t max)
{
    const char *kind = cli_str(ap, "kind"), *target = cli_str(ap, "target");
    char *raw = xasprintf("%s %s", kind ? kind : "?", target ? target : "?");
    struct buf b;
    buf_init(&b, 0);
    cli_buf_clean(&b, raw, max);
    free(raw);
    char *out = buf_steal(&b, NULL);
    return out ? out : xstrdup("");
}

static void kv(const char *key, const char *val)
{
    printf("%-12s ", key);
    cli_put_clean(stdout, val, 0);
    fputc('\n', stdout);
}

static void print_approval(const struct appr_ctx *x, const json_t *ap)
{
    kv("id:", cli_str(ap, "id"));
    kv("execution:", cli_str(ap, "execution_id"));
    kv("step:", cli_str(ap, "step_id"));
    char *label = step_label(ap, 0);
    kv("call:", label);
    free(label);
    kv("status:", cli_str(ap, "status"));
    kv("rule:", cli_str(ap, "rule_id"));
    kv("reason:", cli_str(ap, "reason"));
    if (cli_str(ap, "message")) kv("message:", cli_str(ap, "message"));
    const json_t *appr = json_object_get(ap, "approvers");
    if (json_array_size(appr) > 0) {
        struct buf b;
        buf_init(&b, 0);
        for (size_t i = 0; i < json_array_size(appr); i++) {
            if (i) buf_puts(&b, ", ");
            const char *s = json_string_value(json_array_get(appr, i));
            cli_buf_clean(&b, s ? s : "?", 80);
        }
        kv("approvers:", b.data);
        buf_fini(&b);
    } else {
        kv("approvers:", "anyone");
    }
    kv("created:", cli_str(ap, "created_at"));
    kv("times out:", cli_str(ap, "timeout_at"));
    if (cli_str(ap, "decided_by") || cli_str(ap, "decided_at")) {
        kv("decided by:", cli_str(ap, "decided_by"));
        kv("decided at:", cli_str(ap, "decided_at"));
    }
    if (cli_str(ap, "rationale")) kv("rationale:", cli_str(ap, "rationale"));
    printf("args:\n");
    cli_json_pretty(stdout, json_object_get(ap, "args"), "  ");
    const char *st = cli_str(ap, "status");
    if (st && !strcmp(st, "pending")) {
        fputs("\ngrant with: rebuno approval grant ", stdout);
        cli_put_clean(stdout, cli_str(ap, "id"), 0);
        fputs("\n   deny with: rebuno approval deny ", stdout);
        cli_put_clean(stdout, cli_str(ap, "id"), 0);
        fputc('\n', stdout);
    }
    (void)x;
}

/* ---- ls ---------------------------------------------------------------------- */

static void print_table(FILE *f, const json_t *arr)
{
    static const char *const heads[] = {"ID", "EXECUTION", "STATUS", "STEP", "CREATED"};
    size_t n = json_array_size(arr);
    char **cells = xcalloc(n * 5 + 1, sizeof *cells);
    size_t w[5];
    for (int k = 0; k < 5; k++)
        w[k] = strlen(heads[k]);
    for (size_t i = 0; i < n; i++) {
        const json_t *ap = json_array_get(arr, i);
        static const char *const keys[] = {"id", "execution_id", "status", NULL, "created_at"};
        for (int k = 0; k < 5; k++) {
            if (!keys[k]) {
                cells[i * 5 + k] = step_label(ap, 48);
            } else {
                struct buf b;
                buf_init(&b, 0);
                cli_buf_clean(&b, cli_str(ap, keys[k]), 64);
                cells[i * 5 + k] = buf_steal(&b, NULL);
            }
            size_t cw = 0;
            for (const char *s = cells[i * 5 + k]; *s; s++)
                if (((unsigned char)*s & 0xC0) != 0x80) cw++;
            if (cw > w[k]) w[k] = cw;
        }
    }
    fprintf(f, "%-*s  %-*s  %-*s  %-*s  %s\n", (int)w[0], heads[0], (int)w[1], heads[1], (int)w[2],
            heads[2], (int)w[3], heads[3], heads[4]);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 5; k++) {
            const char *cell = cells[i * 5 + k];
            fputs(cell, f);
            if (k < 4) {
                size_t cw = 0;
                for (const char *s = cell; *s; s++)
                    if (((unsigned char)*s & 0xC0) != 0x80) cw++;
                for (; cw < w[k] + 2; cw++)
                    fputc(' ', f);
            } else {
                fputc('\n', f);
            }
        }
    for (size_t i = 0; i < n * 5; i++)
        free(cells[i]);
    free(cells);
}

static int run_ls(struct appr_ctx *x)
{
    const char *status = x->o.status ? x->o.status : "pending";
    static const char *const ok[] = {"pending", "granted", "denied", "expired", "all"};
    bool valid = false;
    for (size_t i = 0; i < ARRAY_LEN(ok); i++)
        valid |= !strcmp(status, ok[i]);
    if (!valid)
        return usage_error(x, "--status must be pending, granted, denied, expired or all; not '%s'",
                           status);
    if (x->o.execution && !*x->o.execution)
        return usage_error(x, "--execution needs an execution id");
    struct buf path;
    buf_init(&path, 0);
    buf_puts(&path, "/v0/approvals");
    client_query_add(&x->c, &path, "status", strcmp(status, "all") ? status : NULL);
    client_query_add(&x->c, &path, "execution_id", x->o.execution);
    struct err err = ERR_INIT;
    json_t *reply = NULL;
    int rc = client_request(&x->c, "GET", path.data, NULL, NULL, &reply, &err);
    buf_fini(&path);
    if (rc < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, reply);
    } else {
        const json_t *arr = reply; /* a bare array */
        if (json_array_size(arr) == 0)
            printf("no %s approvals\n", strcmp(status, "all") ? status : "");
        else
            print_table(stdout, arr);
    }
    json_decref(reply);
    return CLI_OK;
}

/* ---- get --------------------------------------------------------------------- */

static int run_get(struct appr_ctx *x)
{
    if (x->a.npos < 1 || !*x->a.pos[0])
        return usage_error(x, "missing ID: pass the approval id (see rebuno approval ls)");
    char *path = approval_path(x, x->a.pos[0], "");
    struct err err = ERR_INIT;
    json_t *ap = NULL;
    int rc = client_request(&x->c, "GET", path, NULL, NULL, &ap, &err);
    free(path);
    if (rc < 0) return fail(&err);
    if (x->a.json)
        cli_json_line(stdout, ap);
    else
        print_approval(x, ap);
    json_decref(ap);
    return CLI_OK;
}

/* ---- approve / deny ---------------------------------------------------------- */

/* A lookup by id failed because nothing has that id: 404, or 400 when the kernel
 * rejects the id's format for this kind of object. */
static bool no_such(int status)
{
    return status == 404 || status == 400;
}

/* The pending approval ID names: the approval itself, or the only pending one of
 * execution ID. NULL with the error printed (*rc set) otherwise. */
static json_t *resolve(struct appr_ctx *x, const char *id, int *rc)
{
    struct err err = ERR_INIT;
    json_t *ap = NULL;
    char *path = approval_path(x, id, "");
    int r = client_request(&x->c, "GET", path, NULL, NULL, &ap, &err);
    free(path);
    if (r >= 0) return ap;
    if (!no_such(err.status)) {
        *rc = fail(&err);
        return NULL;
    }

    /* not an approval id: maybe an execution id */
    struct buf q;
    buf_init(&q, 0);
    buf_puts(&q, "/v0/approvals?status=pending");
    client_query_add(&x->c, &q, "execution_id", id);
    json_t *reply = NULL;
    err_clear(&err);
    r = client_request(&x->c, "GET", q.data, NULL, NULL, &reply, &err);
    buf_fini(&q);
    if (r < 0 && !no_such(err.status)) {
        *rc = fail(&err);
        return NULL;
    }
    json_t *pending = json_array();
    const json_t *arr = reply; /* a bare array */
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *a = json_array_get(arr, i);
        const char *st = cli_str(a, "status"), *eid = cli_str(a, "execution_id");
        if ((!st || !strcmp(st, "pending")) && (!eid || !strcmp(eid, id)))
            json_array_append(pending, a);
    }
    json_decref(reply);
    size_t n = json_array_size(pending);
    if (n == 1) {
        ap = json_incref(json_array_get(pending, 0));
        json_decref(pending);
        return ap;
    }
    if (n == 0) {
        /* say whether the id names an execution at all */
        json_t *ex = NULL;
        struct err e2 = ERR_INIT;
        char *ep = client_escape(&x->c, id);
        char *xp = xasprintf("/v0/executions/%s", ep);
        free(ep);
        r = client_request(&x->c, "GET", xp, NULL, NULL, &ex, &e2);
        free(xp);
        if (r < 0 && no_such(e2.status))
            err_set(&err, 404, "not_found", "",
                    "no approval or execution has id %s; list pending approvals with "
                    "'rebuno approval ls'",
                    id);
        else if (r >= 0 && cli_str(ex, "status"))
            err_set(&err, 404, "not_found", "", "execution %s has no pending approval (it is %s)",
                    id, cli_str(ex, "status"));
        else
            err_set(&err, 404, "not_found", "", "execution %s has no pending approval", id);
        json_decref(ex);
        json_decref(pending);
        *rc = fail(&err);
        return NULL;
    }
    fprintf(stderr, "error: execution %s has %zu pending approvals; pick one by approval id:\n", id,
            n);
    print_table(stderr, pending);
    fprintf(stderr, "then run: rebuno %s %s APPROVAL_ID\n", x->group, x->sub->name);
    json_decref(pending);
    *rc = CLI_FAILED;
    return NULL;
}

static int run_decide(struct appr_ctx *x)
{
    const char *verb = x->sub->name; /* "grant" or "deny" */
    if (x->a.npos < 1 || !*x->a.pos[0])
        return usage_error(x, "missing ID: pass an approval id, or an execution id with one "
                              "pending approval");
    const char *by = x->o.by;
    if (!by) by = getenv("USER");
    if (!by || !*by) by = "cli";
    if (x->o.by && !*x->o.by) return usage_error(x, "--by needs a name, e.g. --by alice");

    int rc = CLI_FAILED;
    json_t *ap = resolve(x, x->a.pos[0], &rc);
    if (!ap) return rc;
    const char *aid = cli_str(ap, "id");
    const char *st = cli_str(ap, "status");
    struct err err = ERR_INIT;
    if (!aid) {
        err_set(&err, 0, "bad_response", "", "the kernel returned an approval without an id");
        json_decref(ap);
        return fail(&err);
    }
    if (st && strcmp(st, "pending") != 0) {
        const char *who = cli_str(ap, "decided_by");
        err_set(&err, 409, "conflict", "", "approval %s is already %s%s%s; nothing to %s", aid, st,
                who ? " by " : "", who ? who : "", verb);
        json_decref(ap);
        return fail(&err);
    }

    json_t *body = json_pack("{s:s}", "decided_by", by);
    if (x->o.reason) json_object_set_new(body, "rationale", json_string(x->o.reason));
    char *path = approval_path(x, aid, !strcmp(verb, "deny") ? "/deny" : "/grant");
    json_t *done = NULL;
    int r = client_request(&x->c, "POST", path, body, NULL, NULL, &err); /* 204 */
    free(path);
    json_decref(body);
    if (r >= 0) { /* read the decided approval back */
        path = approval_path(x, aid, "");
        if (client_request(&x->c, "GET", path, NULL, NULL, &done, &err) < 0) done = NULL;
        err_clear(&err);
        free(path);
    }
    if (r < 0) {
        const json_t *who = json_object_get(ap, "approvers");
        if (err.status == 403 && json_array_size(who) > 0) {
            struct buf b;
            buf_init(&b, 0);
            buf_puts(&b, " (approvers: ");
            for (size_t i = 0; i < json_array_size(who); i++) {
                const char *s = json_string_value(json_array_get(who, i));
                buf_printf(&b, "%s%s", i ? ", " : "", s ? s : "?");
            }
            buf_puts(&b, "; pass --by NAME)");
            strncat(err.msg, b.data, sizeof err.msg - 1 - strnlen(err.msg, sizeof err.msg - 1));
            buf_fini(&b);
        }
        json_decref(ap);
        return fail(&err);
    }
    if (x->a.json) {
        cli_json_line(stdout, done);
    } else {
        const char *result = cli_str(done, "status");
        cli_put_clean(stdout, result ? result : (!strcmp(verb, "deny") ? "denied" : "granted"),
                      0);
        fputc(' ', stdout);
        cli_put_clean(stdout, aid, 0);
        fputs(" (execution ", stdout);
        cli_put_clean(stdout, cli_str(ap, "execution_id"), 0);
        fputs(", ", stdout);
        char *label = step_label(ap, 80);
        fputs(label, stdout);
        free(label);
        fputs(") by ", stdout);
        cli_put_clean(stdout, cli_str(done, "decided_by") ? cli_str(done, "decided_by") : by, 0);
        fputc('\n', stdout);
    }
    json_decref(done);
    json_decref(ap);
    return CLI_OK;
}

/* ---- dispatch ---------------------------------------------------------------- */

static const struct appr_sub subs[] = {
    {"ls",
     "ls [--status pending|granted|denied|expired|all] [--execution ID]",
     "List approvals as a table (default: the pending ones).\n"
     "\n"
     "  --status S      pending (default), granted, denied, expired or all\n"
     "  --execution ID  only approvals of execution ID\n",
     {"status", "execution"},
     0,
     false,
     run_ls},
    {"get",
     "get ID",
     "Show one approval: the parked step (kind, target, args), the rule and reason,\n"
     "who may approve, when it times out and how it was decided.\n",
     {NULL},
     1,
     false,
     run_get},
    {"grant",
     "grant ID [--by NAME] [--reason R]",
     "Grant an approval; the execution resumes and the step proceeds. ID is an\n"
     "approval id, or an execution id with exactly one pending approval.\n"
     "\n"
     "  --by NAME    who decides (default: $USER, else 'cli'); must be one of the\n"
     "               rule's approvers when it lists any\n"
     "  --reason R   why; recorded as the approval's rationale\n",
     {"by", "reason"},
     1,
     true,
     run_decide},
    {"deny",
     "deny ID [--by NAME] [--reason R]",
     "Deny an approval; the execution resumes and the step is denied. ID is an\n"
     "approval id, or an execution id with exactly one pending approval.\n"
     "\n"
     "  --by NAME    who decides (default: $USER, else 'cli')\n"
     "  --reason R   why; recorded as the approval's rationale\n",
     {"by", "reason"},
     1,
     true,
     run_decide},
};

static void group_usage(FILE *f)
{
    fputs("usage: rebuno approval <command> [options]\n\n"
          "List, inspect and decide approvals that policy rules (require_approval) wait on.\n\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < ARRAY_LEN(subs); i++)
        fprintf(f, "  rebuno approval %s\n", subs[i].synopsis);
    fputs("\n", f);
    fputs(global_help, f);
    fputs("\nexit status: 0 ok, 1 the operation failed, 2 bad usage\n", f);
}

static const char **opt_slot(struct appr_opts *o, const char *name)
{
    if (!strcmp(name, "status")) return &o->status;
    if (!strcmp(name, "execution")) return &o->execution;
    if (!strcmp(name, "by")) return &o->by;
    if (!strcmp(name, "reason")) return &o->reason;
    ASSERT(!"unknown approval option");
    return NULL;
}

int cmd_approval(int argc, char **argv)
{
    const char *group = argc > 0 && !strcmp(argv[0], "exec") ? "exec" : "approval";
    int act = cli_find_action(argc, argv);
    if (act < 0) {
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                group_usage(stdout);
                return CLI_OK;
            }
        fputs("error: missing command: say what to do, e.g. rebuno approval ls\n", stderr);
        group_usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[act];
    if (!strcmp(name, "help")) {
        group_usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "approve")) name = "grant"; /* the old name */
    const struct appr_sub *sub = NULL;
    for (size_t i = 0; i < ARRAY_LEN(subs); i++)
        if (!strcmp(name, subs[i].name) && (subs[i].in_exec || !strcmp(group, "approval")))
            sub = &subs[i];
    if (!sub) {
        fprintf(stderr, "error: unknown command '%s ", group);
        cli_put_clean(stderr, name, 64);
        fputs("'; see the list below\n", stderr);
        group_usage(stderr);
        return CLI_USAGE;
    }


    struct appr_ctx *x = xcalloc(1, sizeof *x);
    x->group = group;
    x->sub = sub;
    struct cli_opt opts[4];
    size_t k = 0;
    for (; k < ARRAY_LEN(sub->opts) && sub->opts[k]; k++)
        opts[k] = (struct cli_opt){sub->opts[k], opt_slot(&x->o, sub->opts[k])};
    opts[k] = (struct cli_opt){NULL, NULL};

    struct err err = ERR_INIT;
    int rc;
    if (cli_parse_action(argc, argv, act, opts, sub->max_pos, &x->a, &err) < 0) {
        rc = usage_error(x, "%s", err.msg);
    } else if (x->a.help) {
        fprintf(stdout, "usage: rebuno %s %s\n\n%s\n%s", group, sub->synopsis, sub->help,
                global_help);
        rc = CLI_OK;
    } else {
        client_init(&x->c, x->a.url, x->a.api_key);
        rc = sub->run(x);
        client_fini(&x->c);
    }
    fflush(stdout);
    free(x);
    return rc;
}
