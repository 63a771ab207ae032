/*
 * cmd_exec.c - `rebuno exec`: create, inspect, list, follow and cancel executions
 * through the kernel HTTP API (docs/api.md, docs/cli.md).
 *
 *   rebuno exec create AGENT ['<json input>'] [--deadline SECONDS] [--session S]
 *   rebuno exec get ID | list | events ID | watch ID | cancel ID
 *   rebuno exec fork ID --at SEQ [--session S] | fork-points ID
 *   rebuno exec approve|deny ID     (handled by cmd_approval.c)
 *
 * Exit status: 0 ok, 1 the operation failed (HTTP error, or watch saw the execution
 * fail or be cancelled), 2 bad usage.
 */
#include "cli/client.h"
#include "cli/commands.h"

#include "base/clock.h"
#include "base/uuid.h"
#include "base/xalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define SUMMARY_MAX 120
#define FORK_POINTS_PAGE 1000 /* events per fork-points request (the kernel allows 1..10000) */

struct exec_opts {
    const char *deadline, *session, *agent, *status, *limit, *cursor, *after, *reason, *at;
};

struct exec_ctx {
    struct client c;
    struct cli_args a;
    struct exec_opts o;
    const struct exec_sub *sub;
    char full_id[40]; /* a short id prefix, resolved */
    bool failed;      /* need_id printed why it found no execution */
};

struct exec_sub {
    const char *name;
    const char *synopsis; /* after "rebuno exec " */
    const char *help;
    const char *opts[5]; /* option names this subcommand takes */
    int max_pos;
    int (*run)(struct exec_ctx *x);
};

static const char global_help[] =
    "global options (anywhere after the subcommand):\n"
    "  --url URL       kernel address (default: $REBUNO_URL, else " CLIENT_DEFAULT_URL ")\n"
    "  --api-key KEY   API key, sent as a bearer token (default: $REBUNO_API_KEY, else\n"
    "                  the local token of a kernel without api_keys, for its user)\n"
    "  --json          print the kernel's JSON instead of text (NDJSON for events/watch)\n"
    "  -h, --help      show this help\n";

static const char *const exec_statuses[] = {"pending",   "running", "blocked",
                                            "completed", "failed",  "cancelled"};

/* ---- small helpers ----------------------------------------------------------- */

static int usage_error(const struct exec_sub *sub, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(const struct exec_sub *sub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: rebuno exec %s\n", sub->synopsis);
    fprintf(stderr, "run 'rebuno exec %s --help' for details\n", sub->name);
    return CLI_USAGE;
}

static int fail(const struct err *e)
{
    cli_print_err(e);
    return CLI_FAILED;
}

/* A whole decimal number in [lo, hi]. */
static int parse_num(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}


/* The execution ID names: a full id as it is, else the one execution whose id starts with
 * it (upstream's short ids, e.g. 01a23386-91de), looked up newest first. NULL when none is
 * given (usage), or with the error printed and x->failed set. */
static const char *need_id(struct exec_ctx *x)
{
    if (x->a.npos < 1 || !*x->a.pos[0]) return NULL;
    const char *id = x->a.pos[0];
    size_t n = strlen(id);
    /* not a prefix of an id (hex and dashes): the kernel says it knows no such id */
    if (uuid_valid(id) || n >= 36 || strspn(id, "0123456789abcdefABCDEF-") != n) return id;
    struct err err = ERR_INIT;
    if (n < 4) {
        err_set(&err, 400, "validation_error", "id",
                "\"%s\" is too short an id prefix: pass the id, or at least its first 4 characters", id);
        goto fail;
    }
    char *cursor = NULL;
    int found = 0;
    for (int page = 0; page < 1000; page++) {
        struct buf path;
        buf_init(&path, 0);
        buf_puts(&path, "/v0/executions?limit=200");
        client_query_add(&x->c, &path, "cursor", cursor);
        json_t *reply = NULL;
        int rc = client_request(&x->c, "GET", path.data, NULL, NULL, &reply, &err);
        buf_fini(&path);
        free(cursor);
        cursor = NULL;
        if (rc < 0) goto fail;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(reply, "executions"), i, e) {
            const char *eid = cli_str(e, "id");
            if (!eid || strncasecmp(eid, id, n) != 0) continue;
            if (found++ == 0) snprintf(x->full_id, sizeof x->full_id, "%s", eid);
        }
        const char *next = cli_str(reply, "next_cursor");
        if (next && found < 2) cursor = xstrdup(next);
        json_decref(reply);
        if (!cursor) break;
    }
    free(cursor);
    if (found == 1) return x->full_id;
    if (found == 0)
        err_set(&err, 404, "not_found", "id", "no execution id starts with %s; list them with 'rebuno exec ls'", id);
    else
        err_set(&err, 400, "validation_error", "id", "%s is the start of several execution ids; give more of it", id);
fail:
    x->failed = true;
    fail(&err);
    return NULL;
}

static char *exec_path(struct exec_ctx *x, const char *id, const char *suffix)
{
    char *e = client_escape(&x->c, id);
    char *p = xasprintf("/v0/executions/%s%s", e, suffix);
    free(e);
    return p;
}

static bool is_terminal(const char *status)
{
    return status && (!strcmp(status, "completed") || !strcmp(status, "failed") ||
                      !strcmp(status, "cancelled"));
}

static const char *terminal_event_status(const char *type)
{
    if (!strcmp(type, "execution.completed")) return "completed";
    if (!strcmp(type, "execution.failed")) return "failed";
    if (!strcmp(type, "execution.cancelled")) return "cancelled";
    return NULL;
}

/* "HH:MM:SS.mmm" in local time from an RFC 3339 timestamp; the raw text if unparsable. */
static void fmt_clock(struct buf *b, const char *iso)
{
    int64_t ms;
    if (!iso || clock_parse_iso(iso, &ms) < 0) {
        cli_buf_clean(b, iso ? iso : "?", 24);
        return;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    buf_printf(b, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Append "  part" (or "part" at the start) to a summary. */
static void add_text(struct buf *b, const char *label, const char *text, size_t max)
{
    if (b->len) buf_puts(b, "  ");
    if (label) buf_printf(b, "%s ", label);
    cli_buf_clean(b, text, max);
}

static void add_json(struct buf *b, const char *label, const json_t *v)
{
    if (json_is_string(v)) {
        add_text(b, label, json_string_value(v), SUMMARY_MAX);
        return;
    }
    char *s = cli_json_short(v, SUMMARY_MAX);
    add_text(b, label, s, 0);
    free(s);
}

/* A fork's restoration ({key: {checkpoint_ref, checkpoint_seq, covered}}), one line per
 * resource, each starting with indent: where the resource restarts from. Printed by
 * `exec fork` and for the execution.forked event of `exec events` / `exec watch`. */
static void print_restoration(json_t *restoration, const char *indent)
{
    const char *key;
    json_t *r;
    json_object_foreach(restoration, key, r) {
        fputs(indent, stdout);
        cli_put_clean(stdout, key, 128);
        if (cli_str(r, "checkpoint_ref")) {
            fputs(": from checkpoint ", stdout);
            cli_put_clean(stdout, cli_str(r, "checkpoint_ref"), 200);
            printf(" (seq %lld, %s)\n", (long long)json_integer_value(json_object_get(r, "checkpoint_seq")),
                   json_is_true(json_object_get(r, "covered")) ? "covers the fork point"
                                                               : "earlier than the fork point: copied results may "
                                                                 "describe changes it lacks");
        } else {
            fputs(": fresh (no checkpoint at or before the fork point)\n", stdout);
        }
    }
}

/* Model calls carry whole OpenAI-style requests and responses; their summary is what a
 * reader wants: the last message of the request, and what the model answered (its tool
 * calls, else its text). false: not that shape (the generic summary is used). */
static bool summarize_llm(struct buf *b, const json_t *p)
{
    const json_t *msgs = json_object_get(json_object_get(p, "args"), "messages");
    if (json_is_array(msgs) && json_array_size(msgs) > 0) {
        const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        const char *role = cli_str(last, "role"), *content = cli_str(last, "content");
        char *s = cli_json_short(content ? json_object_get(last, "content") : last, SUMMARY_MAX);
        char *what = xasprintf("%zu messages, last %s: %s", json_array_size(msgs), role ? role : "?", s);
        add_text(b, NULL, what, 0);
        free(what);
        free(s);
        return true;
    }
    const json_t *choices = json_object_get(json_object_get(p, "result"), "choices");
    const json_t *msg = json_object_get(json_array_get(choices, 0), "message");
    if (!json_is_object(msg)) return false;
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (json_is_array(calls) && json_array_size(calls) > 0) {
        struct buf c;
        buf_init(&c, 0);
        size_t i;
        const json_t *call;
        json_array_foreach(calls, i, call) {
            const json_t *fn = json_object_get(call, "function");
            const char *name = cli_str(fn, "name"), *args = cli_str(fn, "arguments");
            buf_printf(&c, "%s%s(%s)", i ? ", " : "", name ? name : "?", args ? args : "");
        }
        add_text(b, "->", c.data, SUMMARY_MAX);
        buf_fini(&c);
        return true;
    }
    char *s = cli_json_short(json_object_get(msg, "content"), SUMMARY_MAX);
    add_text(b, "->", s, 0);
    free(s);
    return true;
}

/* The short, type-independent summary of an event payload: whatever of the known
 * fields it carries, most telling first; then one JSON value (result, output, args
 * or input) cut to ~120 characters. */
static void summarize(struct buf *b, const json_t *p)
{
    if (!json_is_object(p)) return;
    const char *kind = cli_str(p, "kind"), *target = cli_str(p, "target");
    if (kind || target) {
        char *kt =
            xasprintf("%s%s%s", kind ? kind : "", kind && target ? " " : "", target ? target : "");
        add_text(b, NULL, kt, SUMMARY_MAX);
        free(kt);
    }
    static const struct {
        const char *key, *label;
    } texts[] = {
        {"agent_id", "agent"},       {"session", "session"},
        {"decision", NULL},          {"rule_id", "rule"},
        {"approval_id", "approval"}, {"worker_id", "worker"},
        {"decided_by", "by"},        {"by", "by"},
        {"reason", "reason:"},       {"failure_reason", "reason:"},
        {"message", "message:"},     {"rationale", "rationale:"},
        {"source_execution_id", "from"}, {"forked_from", "forked from"},
        {"key", "resource"},         {"checkpoint_ref", "checkpoint"},
        {"behind", "waiting behind"}, {"parent_execution_id", "parent"},
        {"inherited_from", "inherited from"},
    };
    const json_t *attempt = json_object_get(p, "attempt");
    if (json_is_integer(attempt)) {
        if (b->len) buf_puts(b, "  ");
        buf_printf(b, "attempt %lld", (long long)json_integer_value(attempt));
    }
    const json_t *fork_seq = json_object_get(p, "fork_seq");
    if (json_is_integer(fork_seq)) {
        if (b->len) buf_puts(b, "  ");
        buf_printf(b, "at seq %lld", (long long)json_integer_value(fork_seq));
    }
    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        const char *v = cli_str(p, texts[i].key);
        if (v && *v) add_text(b, texts[i].label, v, SUMMARY_MAX);
    }
    /* checkpoints a fork copied from its source, or restored */
    const json_t *src_seq = json_object_get(p, "source_covered_seq");
    if (json_is_integer(src_seq)) {
        if (b->len) buf_puts(b, "  ");
        buf_printf(b, "copied (source seq %lld)", (long long)json_integer_value(src_seq));
    }
    if (json_is_true(json_object_get(p, "restored"))) buf_puts(b, b->len ? "  restored" : "restored");
    const json_t *error = json_object_get(p, "error");
    if (error && !json_is_null(error)) add_json(b, "error:", error);
    if (kind && !strcmp(kind, "llm_call") && summarize_llm(b, p)) return;
    /* A restoration is not cut short here: print_event lists it one resource a line. */
    static const char *const blobs[] = {"result", "output", "args", "input", "binding"};
    for (size_t i = 0; i < ARRAY_LEN(blobs); i++) {
        const json_t *v = json_object_get(p, blobs[i]);
        if (v && !json_is_null(v)) {
            char *s = cli_json_short(v, SUMMARY_MAX);
            add_text(b, NULL, s, 0);
            free(s);
            break;
        }
    }
}

/* "  12  19:45:52.123  step.proposed       tool_call shell  {"command":"ls"}" */
static void print_event(const json_t *ev)
{
    struct buf b, sum;
    buf_init(&b, 0);
    buf_init(&sum, 0);
    buf_printf(&b, "%4lld  ", (long long)json_integer_value(json_object_get(ev, "event_seq")));
    fmt_clock(&b, cli_str(ev, "occurred_at"));
    buf_puts(&b, "  ");
    size_t at = b.len;
    cli_buf_clean(&b, cli_str(ev, "type") ? cli_str(ev, "type") : "?", 40);
    while (b.len < at + 18)
        buf_puts(&b, " ");
    summarize(&sum, json_object_get(ev, "payload"));
    if (sum.len) buf_printf(&b, "  %s", sum.data);
    while (b.len && b.data[b.len - 1] == ' ')
        b.data[--b.len] = '\0';
    puts(b.data);
    json_t *restoration = json_object_get(json_object_get(ev, "payload"), "restoration");
    if (cli_str(ev, "type") && !strcmp(cli_str(ev, "type"), "execution.forked") && json_is_object(restoration))
        print_restoration(restoration, "        ");
    buf_fini(&b);
    buf_fini(&sum);
}

/* ---- create ------------------------------------------------------------------ */

static int run_create(struct exec_ctx *x)
{
    if (x->a.npos < 1 || !*x->a.pos[0])
        return usage_error(x->sub, "missing AGENT: name the agent to run, e.g. "
                                   "rebuno exec create coder '{\"task\": \"hi\"}'");
    json_t *body = json_pack("{s:s}", "agent_id", x->a.pos[0]);
    if (x->a.npos > 1) {
        json_error_t jerr;
        json_t *input = json_loads(x->a.pos[1], JSON_DECODE_ANY, &jerr);
        if (!input) {
            json_decref(body);
            return usage_error(x->sub,
                               "input is not valid JSON (%s, at line %d column %d): pass one "
                               "JSON value in single quotes, e.g. '{\"task\": \"hi\"}'",
                               jerr.text, jerr.line, jerr.column);
        }
        json_object_set_new(body, "input", input);
    }
    if (x->o.deadline) {
        long long d;
        if (parse_num(x->o.deadline, 1, 31536000, &d) < 0) {
            json_decref(body);
            return usage_error(x->sub,
                               "--deadline must be a whole number of seconds from 1 to 31536000 "
                               "(one year), not '%s'",
                               x->o.deadline);
        }
        json_object_set_new(body, "deadline_seconds", json_integer(d));
    }
    if (x->o.session) {
        if (!*x->o.session) {
            json_decref(body);
            return usage_error(x->sub, "--session needs a non-empty name, e.g. --session chat-42");
        }
        json_object_set_new(body, "session", json_string(x->o.session));
    }
    struct err err = ERR_INIT;
    json_t *ex = NULL;
    int rc = client_request(&x->c, "POST", "/v0/executions", body, NULL, &ex, &err);
    json_decref(body);
    if (rc < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, ex);
    } else {
        fputs("created ", stdout);
        cli_put_clean(stdout, cli_str(ex, "id"), 0);
        fputs(" (agent ", stdout);
        cli_put_clean(stdout, cli_str(ex, "agent_id"), 0);
        fputs(", ", stdout);
        cli_put_clean(stdout, cli_str(ex, "status"), 0);
        fputs(")\n", stdout);
    }
    json_decref(ex);
    return CLI_OK;
}

/* ---- get --------------------------------------------------------------------- */

static void kv(const char *key, const char *val)
{
    printf("%-10s ", key);
    cli_put_clean(stdout, val, 0);
    fputc('\n', stdout);
}

static void kv_json(const char *key, const json_t *v)
{
    if (!v || json_is_null(v)) {
        kv(key, "-");
        return;
    }
    printf("%s\n", key);
    cli_json_pretty(stdout, v, "  ");
}

static void print_execution(const json_t *ex)
{
    kv("id:", cli_str(ex, "id"));
    kv("agent:", cli_str(ex, "agent_id"));
    kv("session:", cli_str(ex, "session"));
    kv("status:", cli_str(ex, "status"));
    kv("created:", cli_str(ex, "created_at"));
    kv("updated:", cli_str(ex, "updated_at"));
    kv("deadline:", cli_str(ex, "deadline_at"));
    const json_t *ls = json_object_get(ex, "last_seq");
    if (json_is_integer(ls)) printf("%-10s %lld\n", "last seq:", (long long)json_integer_value(ls));
    const json_t *d = json_object_get(ex, "dispatch");
    if (json_is_object(d)) {
        struct buf b;
        buf_init(&b, 0);
        cli_buf_clean(&b, cli_str(d, "state") ? cli_str(d, "state") : "?", 40);
        const json_t *att = json_object_get(d, "attempt");
        if (json_is_integer(att))
            buf_printf(&b, ", attempt %lld", (long long)json_integer_value(att));
        if (cli_str(d, "worker_id")) {
            buf_puts(&b, ", worker ");
            cli_buf_clean(&b, cli_str(d, "worker_id"), 80);
        }
        if (cli_str(d, "lease_deadline")) {
            buf_puts(&b, ", lease until ");
            cli_buf_clean(&b, cli_str(d, "lease_deadline"), 40);
        }
        kv("dispatch:", b.data);
        buf_fini(&b);
    } else {
        kv("dispatch:", "-");
    }
    const char *fr = cli_str(ex, "failure_reason");
    if (fr) kv("failure:", fr);
    if (cli_str(ex, "parent_execution_id")) kv("parent:", cli_str(ex, "parent_execution_id"));
    if (cli_str(ex, "forked_from")) {
        char at[32];
        snprintf(at, sizeof at, "%lld", (long long)json_integer_value(json_object_get(ex, "fork_seq")));
        kv("forked:", cli_str(ex, "forked_from"));
        kv("at seq:", at);
        kv_json("restored:", json_object_get(ex, "restoration"));
    }
    kv_json("input:", json_object_get(ex, "input"));
    kv_json("output:", json_object_get(ex, "output"));
    kv_json("state:", json_object_get(ex, "state"));
}

static int run_get(struct exec_ctx *x)
{
    const char *id = need_id(x);
    if (!id)
        return x->failed ? CLI_FAILED : usage_error(x->sub,
                           "missing ID: pass the execution id, e.g. rebuno exec get 0192f1a0-...");
    char *path = exec_path(x, id, "");
    struct err err = ERR_INIT;
    json_t *ex = NULL;
    int rc = client_request(&x->c, "GET", path, NULL, NULL, &ex, &err);
    free(path);
    if (rc < 0) return fail(&err);
    if (x->a.json)
        cli_json_line(stdout, ex);
    else
        print_execution(ex);
    json_decref(ex);
    return CLI_OK;
}

/* ---- list -------------------------------------------------------------------- */

static size_t width_of(const char *s)
{
    size_t n = 0; /* display width ~ UTF-8 code points */
    for (; s && *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) n++;
    return n;
}

static int run_list(struct exec_ctx *x)
{
    if (x->o.status) {
        bool ok = false;
        for (size_t i = 0; i < ARRAY_LEN(exec_statuses); i++)
            ok |= !strcmp(x->o.status, exec_statuses[i]);
        if (!ok)
            return usage_error(x->sub,
                               "--status must be one of pending, running, blocked, "
                               "completed, failed, cancelled; not '%s'",
                               x->o.status);
    }
    long long lim = 0;
    if (x->o.limit && parse_num(x->o.limit, 1, 200, &lim) < 0)
        return usage_error(x->sub, "--limit must be a whole number from 1 to 200, not '%s'",
                           x->o.limit);
    struct buf path;
    buf_init(&path, 0);
    buf_puts(&path, "/v0/executions");
    client_query_add(&x->c, &path, "agent_id", x->o.agent);
    client_query_add(&x->c, &path, "status", x->o.status);
    client_query_add(&x->c, &path, "cursor", x->o.cursor);
    char num[32];
    snprintf(num, sizeof num, "%lld", lim);
    client_query_add(&x->c, &path, "limit", x->o.limit ? num : NULL);
    struct err err = ERR_INIT;
    json_t *reply = NULL;
    int rc = client_request(&x->c, "GET", path.data, NULL, NULL, &reply, &err);
    buf_fini(&path);
    if (rc < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, reply);
        json_decref(reply);
        return CLI_OK;
    }
    const json_t *arr = json_object_get(reply, "executions");
    size_t n = json_array_size(arr);
    /* clean copies of the cells, then column widths */
    static const char *const keys[] = {"id", "agent_id", "status", "created_at"};
    static const char *const heads[] = {"ID", "AGENT", "STATUS", "CREATED"};
    char **cells = xcalloc(n * 4 + 1, sizeof *cells);
    size_t w[4];
    for (int k = 0; k < 4; k++)
        w[k] = strlen(heads[k]);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            struct buf b;
            buf_init(&b, 0);
            cli_buf_clean(&b, cli_str(json_array_get(arr, i), keys[k]), 64);
            cells[i * 4 + k] = buf_steal(&b, NULL);
            size_t cw = width_of(cells[i * 4 + k]);
            if (cw > w[k]) w[k] = cw;
        }
    if (n == 0) {
        puts("no executions");
    } else {
        printf("%-*s  %-*s  %-*s  %s\n", (int)w[0], heads[0], (int)w[1], heads[1], (int)w[2],
               heads[2], heads[3]);
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) {
                const char *cell = cells[i * 4 + k];
                fputs(cell, stdout);
                if (k < 3)
                    for (size_t pad = width_of(cell); pad < w[k] + 2; pad++)
                        fputc(' ', stdout);
                else
                    fputc('\n', stdout);
            }
    }
    for (size_t i = 0; i < n * 4; i++)
        free(cells[i]);
    free(cells);
    const char *next = cli_str(reply, "next_cursor");
    if (next && *next) {
        fputs("next: --cursor ", stdout);
        cli_put_clean(stdout, next, 0);
        fputc('\n', stdout);
    }
    json_decref(reply);
    return CLI_OK;
}

/* ---- events ------------------------------------------------------------------ */

static int run_events(struct exec_ctx *x)
{
    const char *id = need_id(x);
    if (!id)
        return x->failed ? CLI_FAILED : usage_error(
            x->sub, "missing ID: pass the execution id, e.g. rebuno exec events 0192f1a0-...");
    long long after = 0, lim = 0;
    if (x->o.after && parse_num(x->o.after, 0, LLONG_MAX, &after) < 0)
        return usage_error(x->sub, "--after must be an event seq (a whole number >= 0), not '%s'",
                           x->o.after);
    if (x->o.limit && parse_num(x->o.limit, 1, 1000, &lim) < 0)
        return usage_error(x->sub, "--limit must be a whole number from 1 to 1000, not '%s'",
                           x->o.limit);
    char *p = exec_path(x, id, "/events");
    struct buf path;
    buf_init(&path, 0);
    buf_puts(&path, p);
    free(p);
    char num[32];
    snprintf(num, sizeof num, "%lld", after);
    client_query_add(&x->c, &path, "after_seq", x->o.after ? num : NULL);
    snprintf(num, sizeof num, "%lld", lim);
    client_query_add(&x->c, &path, "limit", x->o.limit ? num : NULL);
    struct err err = ERR_INIT;
    json_t *reply = NULL;
    int rc = client_request(&x->c, "GET", path.data, NULL, NULL, &reply, &err);
    buf_fini(&path);
    if (rc < 0) return fail(&err);
    const json_t *arr = reply; /* a bare array */
    long long last = after;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *ev = json_array_get(arr, i);
        if (x->a.json)
            cli_json_line(stdout, ev);
        else
            print_event(ev);
        long long seq = json_integer_value(json_object_get(ev, "event_seq"));
        if (seq > last) last = seq;
    }
    if (!x->a.json) {
        if (json_array_size(arr) == 0) puts("no events");
        /* a full page: there may be more */
        if (json_array_size(arr) > 0 && (long long)json_array_size(arr) == (x->o.limit ? lim : 100))
            printf("next: --after %lld\n", last);
    }
    json_decref(reply);
    return CLI_OK;
}

/* ---- watch ------------------------------------------------------------------- */

struct watch {
    struct exec_ctx *x;
    const char *id;
    long long last_seq;
    char final[16];   /* terminal status seen, "" before */
    json_t *final_ev; /* the terminal event */
};

static int on_event(const char *sse_id, const char *type, const char *data, void *arg)
{
    struct watch *w = arg;
    json_error_t jerr;
    json_t *ev = json_loads(data, 0, &jerr);
    if (!json_is_object(ev)) {
        fprintf(stderr, "warning: skipping event %s: its data is not a JSON object (%s)\n", sse_id,
                jerr.text);
        json_decref(ev);
        return 0;
    }
    long long seq = json_integer_value(json_object_get(ev, "event_seq"));
    if (seq && seq <= w->last_seq) { /* already shown (defensive: resume never repeats) */
        json_decref(ev);
        return 0;
    }
    if (seq) w->last_seq = seq;
    const char *etype = cli_str(ev, "type") ? cli_str(ev, "type") : type;
    if (w->x->a.json) {
        cli_json_line(stdout, ev);
    } else {
        print_event(ev);
        if (!strcmp(etype, "approval.requested")) {
            fputs("        approve with: rebuno exec approve ", stdout);
            cli_put_clean(stdout, w->id, 0);
            fputs("   (or deny: rebuno exec deny ", stdout);
            cli_put_clean(stdout, w->id, 0);
            fputs(")\n", stdout);
        }
        fflush(stdout);
    }
    const char *st = terminal_event_status(etype);
    if (st) {
        snprintf(w->final, sizeof w->final, "%s", st);
        w->final_ev = ev;
        return 1;
    }
    json_decref(ev);
    return 0;
}

/* The closing lines of a watch: final status and output or failure reason. */
static void print_outcome(const char *id, const char *status, const json_t *ex,
                          const json_t *payload)
{
    fputs("execution ", stdout);
    cli_put_clean(stdout, id, 0);
    printf(" %s", status);
    const char *why = ex ? cli_str(ex, "failure_reason") : NULL;
    if (!why && json_is_object(payload))
        why = cli_str(payload, "failure_reason") ? cli_str(payload, "failure_reason")
                                                 : cli_str(payload, "reason");
    if (strcmp(status, "completed") != 0 && why) {
        fputs(": ", stdout);
        cli_put_clean(stdout, why, 0);
    }
    fputc('\n', stdout);
    if (!strcmp(status, "completed")) {
        const json_t *out = ex ? json_object_get(ex, "output") : NULL;
        if (!out || json_is_null(out)) out = json_object_get(payload, "output");
        if (out && !json_is_null(out)) {
            puts("output:");
            cli_json_pretty(stdout, out, "  ");
        }
    }
    fflush(stdout);
}

static int run_watch(struct exec_ctx *x)
{
    const char *id = need_id(x);
    if (!id)
        return x->failed ? CLI_FAILED : usage_error(
            x->sub, "missing ID: pass the execution id, e.g. rebuno exec watch 0192f1a0-...");
    long long after = 0;
    if (x->o.after && parse_num(x->o.after, 0, LLONG_MAX, &after) < 0)
        return usage_error(x->sub, "--after must be an event seq (a whole number >= 0), not '%s'",
                           x->o.after);

    /* Look first: an unknown id fails fast, and a finished execution with nothing
     * after --after has no stream left to follow. */
    struct err err = ERR_INIT;
    json_t *ex = NULL;
    char *path = exec_path(x, id, "");
    int rc = client_request(&x->c, "GET", path, NULL, NULL, &ex, &err);
    free(path);
    if (rc < 0) return fail(&err);
    const char *status = cli_str(ex, "status");
    long long last_seq = json_integer_value(json_object_get(ex, "last_seq"));
    if (is_terminal(status) && json_is_integer(json_object_get(ex, "last_seq")) &&
        after >= last_seq) {
        if (!x->a.json) print_outcome(id, status, ex, NULL);
        rc = !strcmp(status, "completed") ? CLI_OK : CLI_FAILED;
        json_decref(ex);
        return rc;
    }
    json_decref(ex);

    struct watch w = {.x = x, .id = id, .last_seq = after};
    char last_id[32];
    snprintf(last_id, sizeof last_id, "%lld", after);
    path = exec_path(x, id, "/events/stream");
    rc = client_stream(&x->c, path, after > 0 ? last_id : NULL, on_event, &w, &err);
    free(path);
    if (rc < 0) {
        json_decref(w.final_ev);
        return fail(&err);
    }
    if (!w.final[0]) { /* the stream closed after a terminal event we did not parse */
        struct err e2 = ERR_INIT;
        err_set(&e2, 0, "bad_response", "",
                "the event stream ended without a readable terminal event; check with "
                "'rebuno exec get %s'",
                id);
        return fail(&e2);
    }
    if (!x->a.json) {
        /* the execution row has the authoritative output / failure reason */
        json_t *fin = NULL;
        struct err e2 = ERR_INIT;
        path = exec_path(x, id, "");
        if (client_request(&x->c, "GET", path, NULL, NULL, &fin, &e2) < 0) fin = NULL;
        free(path);
        fputc('\n', stdout);
        print_outcome(id, w.final, fin, json_object_get(w.final_ev, "payload"));
        json_decref(fin);
    }
    json_decref(w.final_ev);
    return !strcmp(w.final, "completed") ? CLI_OK : CLI_FAILED;
}

/* ---- cancel ------------------------------------------------------------------ */

static int run_cancel(struct exec_ctx *x)
{
    const char *id = need_id(x);
    if (!id)
        return x->failed ? CLI_FAILED : usage_error(
            x->sub, "missing ID: pass the execution id, e.g. rebuno exec cancel 0192f1a0-...");
    json_t *body = json_object();
    if (x->o.reason) json_object_set_new(body, "reason", json_string(x->o.reason));
    char *path = exec_path(x, id, "/cancel");
    struct err err = ERR_INIT;
    json_t *ex = NULL;
    int rc = client_request(&x->c, "POST", path, body, NULL, NULL, &err); /* 204 */
    free(path);
    json_decref(body);
    if (rc < 0) return fail(&err);
    path = exec_path(x, id, "");
    rc = client_request(&x->c, "GET", path, NULL, NULL, &ex, &err);
    free(path);
    if (rc < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, ex);
    } else {
        fputs("cancelled ", stdout);
        cli_put_clean(stdout, cli_str(ex, "id") ? cli_str(ex, "id") : id, 0);
        fputs(" (agent ", stdout);
        cli_put_clean(stdout, cli_str(ex, "agent_id"), 0);
        fputs(", ", stdout);
        cli_put_clean(stdout, cli_str(ex, "status"), 0);
        fputs(")\n", stdout);
    }
    json_decref(ex);
    return CLI_OK;
}

/* ---- fork -------------------------------------------------------------------- */

static int run_fork(struct exec_ctx *x)
{
    const char *id = need_id(x);
    long long at;
    if (!id) return x->failed ? CLI_FAILED : usage_error(x->sub, "missing ID: pass the execution to fork, e.g. rebuno exec fork 0192f1a0-... --at 12");
    if (!x->o.at || parse_num(x->o.at, 1, LLONG_MAX, &at) < 0)
        return usage_error(x->sub, "--at SEQ is required: the event to fork at (see rebuno exec fork-points %s)", id);
    json_t *body = json_pack("{s:I}", "at_seq", (json_int_t)at);
    if (x->o.session) json_object_set_new(body, "session", json_string(x->o.session));
    char *path = exec_path(x, id, "/fork");
    struct err err = ERR_INIT;
    json_t *ex = NULL;
    int rc = client_request(&x->c, "POST", path, body, NULL, &ex, &err);
    free(path);
    json_decref(body);
    if (rc < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, ex);
    } else {
        fputs("forked ", stdout);
        cli_put_clean(stdout, cli_str(ex, "id"), 0);
        printf(" from %s at seq %lld", id, at);
        if (cli_str(ex, "session")) {
            fputs(" (session ", stdout);
            cli_put_clean(stdout, cli_str(ex, "session"), 0);
            fputs(")", stdout);
        }
        fputc('\n', stdout);
        print_restoration(json_object_get(ex, "restoration"), "  ");
    }
    json_decref(ex);
    return CLI_OK;
}

/* All of the fork points of id, page by page (after the last event seen until the reply
 * reaches latest_seq): one object like the kernel's reply (caller frees), with every
 * event, and the checkpoints, resources and latest_seq of the last page. */
static int fetch_fork_points(struct exec_ctx *x, const char *id, json_t **out, struct err *err)
{
    json_t *all = NULL;
    long long after = 0;
    for (;;) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "/fork-points?after=%lld&limit=%d", after, FORK_POINTS_PAGE);
        char *path = exec_path(x, id, suffix);
        json_t *page = NULL;
        int rc = client_request(&x->c, "GET", path, NULL, NULL, &page, err);
        free(path);
        if (rc < 0) {
            json_decref(all);
            return -1;
        }
        json_t *events = json_object_get(page, "events");
        size_t n = json_array_size(events);
        if (n) after = json_integer_value(json_object_get(json_array_get(events, n - 1), "event_seq"));
        if (!all) {
            all = page;
        } else {
            json_array_extend(json_object_get(all, "events"), events);
            static const char *const newest[] = {"latest_seq", "resources", "checkpoints"};
            for (size_t i = 0; i < ARRAY_LEN(newest); i++)
                json_object_set(all, newest[i], json_object_get(page, newest[i]));
            json_decref(page);
        }
        if (n == 0 || after >= json_integer_value(json_object_get(all, "latest_seq"))) break;
    }
    *out = all;
    return 0;
}

static int run_fork_points(struct exec_ctx *x)
{
    const char *id = need_id(x);
    if (!id) return x->failed ? CLI_FAILED : usage_error(x->sub, "missing ID: pass the execution id");
    json_t *fp = NULL;
    struct err err = ERR_INIT;
    if (fetch_fork_points(x, id, &fp, &err) < 0) return fail(&err);
    if (x->a.json) {
        cli_json_line(stdout, fp);
        json_decref(fp);
        return CLI_OK;
    }
    size_t i;
    json_t *v;
    printf("checkpoints:\n");
    if (json_array_size(json_object_get(fp, "checkpoints")) == 0) printf("  (none: forks start from fresh resources)\n");
    json_array_foreach(json_object_get(fp, "checkpoints"), i, v) {
        json_t *inv = json_object_get(v, "invalidated_seq");
        printf("  %-12s covers seq %lld..", cli_str(v, "key") ? cli_str(v, "key") : "?",
               (long long)json_integer_value(json_object_get(v, "covered_seq")));
        if (json_is_integer(inv)) printf("%-6lld", (long long)json_integer_value(inv) - 1);
        else printf("%-6s", "end");
        fputs(" ref ", stdout);
        cli_put_clean(stdout, cli_str(v, "checkpoint_ref"), 200);
        fputc('\n', stdout);
    }
    printf("events (fork with --at SEQ; * = covered by a checkpoint of every resource):\n");
    json_array_foreach(json_object_get(fp, "events"), i, v) {
        printf("  %c %5lld  %-24s ", json_is_true(json_object_get(v, "covered")) ? '*' : ' ',
               (long long)json_integer_value(json_object_get(v, "event_seq")), cli_str(v, "type") ? cli_str(v, "type") : "");
        cli_put_clean(stdout, cli_str(v, "target"), 80);
        fputc('\n', stdout);
    }
    json_decref(fp);
    return CLI_OK;
}

/* ---- dispatch ---------------------------------------------------------------- */

static const struct exec_sub subs[] = {
    {"fork",
     "fork ID --at SEQ [--session S]",
     "Start a new execution that reruns ID's input, replays the steps ID had settled\n"
     "by event SEQ, and runs live after it. Each resource restarts from the checkpoint\n"
     "covering SEQ, else the newest earlier one, else fresh; the choice is printed.\n"
     "\n"
     "  --at SEQ      the event to fork at (see 'rebuno exec fork-points ID')\n"
     "  --session S   a new session for the fork\n",
     {"at", "session"},
     1,
     run_fork},
    {"fork-points",
     "fork-points ID",
     "List the checkpoints of ID and the events a fork can start from, marking those\n"
     "a checkpoint covers.\n",
     {NULL},
     1,
     run_fork_points},
    {"create",
     "create AGENT ['<json input>'] [--deadline SECONDS] [--session S]",
     "Start an execution of AGENT. The input is one JSON value (default {}); quote it for\n"
     "the shell, e.g. '{\"task\": \"hi\"}'. Prints: created ID (agent AGENT, STATUS).\n"
     "\n"
     "  --deadline SECONDS   fail the execution if it is not done in time (1..31536000)\n"
     "  --session S          group the execution under session S\n",
     {"deadline", "session"},
     2,
     run_create},
    {"get",
     "get ID",
     "Show one execution: status, timestamps, dispatch, failure reason, input, output\n"
     "and state.\n",
     {NULL},
     1,
     run_get},
    {"ls",
     "ls [--agent A] [--status S] [--limit N] [--cursor C]",
     "List executions, newest first, as a table. When there are more, the last line\n"
     "is 'next: --cursor C': pass it to get the next page.\n"
     "\n"
     "  --agent A    only executions of agent A\n"
     "  --status S   pending, running, blocked, completed, failed or cancelled\n"
     "  --limit N    page size, 1..200 (default 50)\n"
     "  --cursor C   continue from a previous page\n",
     {"agent", "status", "limit", "cursor"},
     0,
     run_list},
    {"events",
     "events ID [--after N] [--limit M]",
     "Print an execution's recorded events, one line each:\n"
     "   SEQ  TIME(local)   TYPE                SUMMARY\n"
     "With --json, one event JSON object per line (NDJSON).\n"
     "\n"
     "  --after N    only events with seq > N (default 0)\n"
     "  --limit M    at most M events, 1..1000 (default 100); 'next: --after N' shows\n"
     "               where to continue\n",
     {"after", "limit"},
     1,
     run_events},
    {"watch",
     "watch ID [--after N]",
     "Follow an execution's events live until it completes, fails or is cancelled,\n"
     "reconnecting if the connection drops. Exits 0 when it completed, 1 when it\n"
     "failed or was cancelled. With --json, prints NDJSON events only.\n"
     "\n"
     "  --after N    start after event seq N (default: from the first event)\n",
     {"after"},
     1,
     run_watch},
    {"cancel",
     "cancel ID [--reason R]",
     "Cancel an execution that has not finished.\n"
     "\n"
     "  --reason R   why; recorded on the execution\n",
     {"reason"},
     1,
     run_cancel},
};

static const char *const delegated[][2] = {
    {"approve", "approve ID [--by NAME] [--reason R]"},
    {"grant", "grant ID [--by NAME] [--reason R]"},
    {"deny", "deny ID [--by NAME] [--reason R]"},
};

static void group_usage(FILE *f)
{
    fputs("usage: rebuno exec <command> [options]\n\n"
          "Create, inspect, follow and steer executions on a rebuno kernel.\n\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < ARRAY_LEN(subs); i++)
        fprintf(f, "  rebuno exec %s\n", subs[i].synopsis);
    for (size_t i = 0; i < ARRAY_LEN(delegated); i++)
        fprintf(f, "  rebuno exec %s\n", delegated[i][1]);
    fputs("\napprove/deny take an approval id, or an execution id with exactly one pending\n"
          "approval.\n\n",
          f);
    fputs(global_help, f);
    fputs("\nexit status: 0 ok, 1 the operation failed, 2 bad usage\n", f);
}

static void sub_usage(FILE *f, const struct exec_sub *sub)
{
    fprintf(f, "usage: rebuno exec %s\n\n%s\n%s", sub->synopsis, sub->help, global_help);
}

static const char **opt_slot(struct exec_opts *o, const char *name)
{
    if (!strcmp(name, "deadline")) return &o->deadline;
    if (!strcmp(name, "session")) return &o->session;
    if (!strcmp(name, "agent")) return &o->agent;
    if (!strcmp(name, "status")) return &o->status;
    if (!strcmp(name, "limit")) return &o->limit;
    if (!strcmp(name, "cursor")) return &o->cursor;
    if (!strcmp(name, "after")) return &o->after;
    if (!strcmp(name, "reason")) return &o->reason;
    if (!strcmp(name, "at")) return &o->at;
    ASSERT(!"unknown exec option");
    return NULL;
}

int cmd_exec(int argc, char **argv)
{
    int act = cli_find_action(argc, argv);
    if (act < 0) {
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
                group_usage(stdout);
                return CLI_OK;
            }
        fputs("error: missing command: say what to do, e.g. rebuno exec ls\n", stderr);
        group_usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[act];
    if (!strcmp(name, "help")) {
        group_usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < ARRAY_LEN(delegated); i++)
        if (!strcmp(name, delegated[i][0])) return cmd_approval(argc, argv);
    const struct exec_sub *sub = NULL;
    if (!strcmp(name, "list")) name = "ls"; /* the old name */
    for (size_t i = 0; i < ARRAY_LEN(subs); i++)
        if (!strcmp(name, subs[i].name)) sub = &subs[i];
    if (!sub) {
        fprintf(stderr, "error: unknown command 'exec ");
        cli_put_clean(stderr, name, 64);
        fputs("'; see the list below\n", stderr);
        group_usage(stderr);
        return CLI_USAGE;
    }


    struct exec_ctx *x = xcalloc(1, sizeof *x);
    x->sub = sub;
    struct cli_opt opts[6];
    size_t k = 0;
    for (; k < ARRAY_LEN(sub->opts) && sub->opts[k]; k++)
        opts[k] = (struct cli_opt){sub->opts[k], opt_slot(&x->o, sub->opts[k])};
    opts[k] = (struct cli_opt){NULL, NULL};

    struct err err = ERR_INIT;
    int rc;
    if (cli_parse_action(argc, argv, act, opts, sub->max_pos, &x->a, &err) < 0) {
        rc = usage_error(sub, "%s", err.msg);
    } else if (x->a.help) {
        sub_usage(stdout, sub);
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
