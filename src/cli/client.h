/*
 * client.h - the CLI's side of the kernel HTTP API (docs/api.md), on libcurl.
 *
 * A struct client holds the base URL and API key of a kernel (or of sandboxd) and
 * one curl handle (so consecutive requests reuse the connection); given no key, it
 * sends the daemon's local token, found as net/local_auth.h says. client_request()
 * does one JSON request/response; client_stream() follows a Server-Sent Events stream
 * and reconnects with Last-Event-ID when it drops. Both turn every failure into
 * a struct err whose message says what went wrong and what to do: transport
 * failures name the URL and how to start or point at a kernel, HTTP errors carry
 * the kernel's {"error":{"code","message","field"}} verbatim, and a not_found for
 * the id in the path adds the command that lists that kind of object.
 *
 * The bottom half is the plumbing the `rebuno exec` / `rebuno approval` commands
 * share: argument parsing with the global options, error rendering and safe
 * printing of server-supplied text. Nothing here is thread-safe.
 */
#ifndef REBUNO_CLI_CLIENT_H
#define REBUNO_CLI_CLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/err.h"

#define CLIENT_DEFAULT_URL "http://127.0.0.1:8080"
#define CLIENT_MAX_BODY (64u << 20)      /* cap on one response body */
#define CLIENT_MAX_SSE_LINE (8u << 20)   /* cap on one SSE line */
#define CLIENT_MAX_SSE_EVENT (64u << 20) /* cap on one SSE event's data */

struct client {
    char *url;       /* base URL without trailing '/': the one in use of all_urls */
    char *all_urls;  /* as given: several kernel replicas separated by commas */
    int n_urls, cur_url;
    char *api_key;   /* NULL: send no Authorization header */
    char *key_from;  /* the local token file api_key came from, NULL when given */
    char *looked;    /* no key given or found: where the local token was looked for */
    const char *key_var; /* how a key is given, for hints */
    long timeout_ms; /* whole-request cap for client_request (default 60 s) */
    CURL *curl;
};

/* url / api_key: the --url / --api-key values or NULL, which falls back to
 * ("http://a:8080,http://b:8080": replicas, tried in turn when one cannot be reached;
 * a request is resent to the next only if its connection could not be opened)
 * $REBUNO_URL / $REBUNO_API_KEY, then to CLIENT_DEFAULT_URL / the kernel's local token
 * (registered for the URL's address, else in ${REBUNO_STATE_DIR:-.rebuno}/local-token). */
void client_init(struct client *c, const char *url, const char *api_key);
/* The same for sandboxd at url: $REBUNO_SANDBOX_TOKEN, else its local token (else in
 * ${REBUNO_STATE_DIR:-.rebuno}/sandboxes/local-token). */
void client_init_sandbox(struct client *c, const char *url);
void client_fini(struct client *c);
/* Append the Authorization header (when there is a key) and "Expect:" to *l, for a
 * request made with c->curl directly. -1 with err filled when the key is not usable. */
int client_auth_headers(const struct client *c, struct curl_slist **l, struct err *err);

/* Percent-encode s for use as a path segment or query value (caller frees). */
char *client_escape(struct client *c, const char *s);
/* Append "?key=value" (or "&key=value" if path already has a query) to path with the
 * value percent-encoded. Does nothing when value is NULL. */
void client_query_add(struct client *c, struct buf *path, const char *key, const char *value);

/*
 * One request. method "GET"/"POST"/...; path starts with "/v0/..."; body is sent
 * as JSON when non-NULL (not stolen); headers is a NULL-terminated list of extra
 * "Name: value" lines or NULL. On a 2xx reply returns the HTTP status and, when
 * out is non-NULL, stores the parsed reply in *out (NULL for an empty body, e.g.
 * 204; the caller json_decref()s it). Otherwise returns -1 with err filled:
 * the kernel's error for non-2xx replies (err->status = HTTP status), status 0
 * and code "unreachable" / "bad_url" / "bad_response" for everything else.
 */
int client_request(struct client *c, const char *method, const char *path, json_t *body,
                   const char *const *headers, json_t **out, struct err *err);

/*
 * Called once per SSE event. id is the event's id ("" when it had none), event its
 * type ("message" when it had none), data its data lines joined by '\n'. Return
 * nonzero to stop following the stream.
 */
typedef int (*client_event_fn)(const char *id, const char *event, const char *data, void *arg);

/*
 * Follow the SSE stream at path (GET), starting after last_event_id (sent as
 * Last-Event-ID; NULL or "" for the beginning). When the connection fails, drops,
 * or the server ends the stream before a terminal event (execution.completed,
 * execution.failed or execution.cancelled), reconnects from the last event id
 * received, backing off 0.2 s doubling to 5 s; gives up after 30 s without
 * receiving an event. A 4xx reply is not retried.
 * Returns 0 when cb asked to stop, 1 when the server ended the stream right after
 * a terminal event, -1 with err filled on failure.
 */
int client_stream(struct client *c, const char *path, const char *last_event_id, client_event_fn cb,
                  void *arg, struct err *err);

/* ---- shared CLI plumbing ------------------------------------------------------ */

enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

/* A command-specific option taking a value: --name VALUE or --name=VALUE. The
 * parser stores the value (a pointer into argv) in *value; the last one wins. */
struct cli_opt {
    const char *name;
    const char **value;
};

#define CLI_MAX_POS 8

struct cli_args {
    const char *url;     /* --url */
    const char *api_key; /* --api-key */
    bool json;           /* --json */
    bool help;           /* -h / --help */
    const char *pos[CLI_MAX_POS];
    int npos;
};

/*
 * Parse argv[1..argc-1] (argv[0] is the subcommand's name) in order, options and
 * positional arguments mixed; "--" ends the options. Knows the global options
 * --url, --api-key, --json, -h/--help plus opts (terminated by {NULL, NULL}).
 * More than max_pos positional arguments, unknown options and missing values are
 * usage errors: returns -1 with err->msg saying what to fix.
 */
int cli_parse(int argc, char **argv, const struct cli_opt *opts, int max_pos, struct cli_args *a,
              struct err *err);

/*
 * `rebuno GROUP [globals] ACTION args...`: returns the index in argv of the action
 * (the first argument that is neither a global option nor its value), or -1 when
 * there is none. Used so global options may also come before the action.
 */
int cli_find_action(int argc, char **argv);

/* cli_parse for `rebuno GROUP ... ACTION ...`: argv[act] is the action (see
 * cli_find_action); options may stand before or after it. */
int cli_parse_action(int argc, char **argv, int act, const struct cli_opt *opts, int max_pos,
                     struct cli_args *a, struct err *err);

/* Print "error: <msg>" (and "field: <field>" when set) to stderr. */
void cli_print_err(const struct err *e);

/* The sandbox commands' one place an error is printed. Text: cli_print_err. json: the
 * API's error object {"error":{"code","message","field"?,"status"?}} on one line of
 * stderr, all ASCII; status (the HTTP status the service answered with) unless local. */
void cli_report_err(const struct err *e, bool json, bool local);

/* Whether --json is among argv's options (before any "--"), so that even a failure to
 * parse the rest can be reported as JSON. */
bool cli_wants_json(int argc, char **argv);

/* A JSON string of s even when s is not UTF-8 (bytes >= 0x80 become '?'). */
json_t *cli_json_text(const char *s);

/* Write s to f replacing control characters (terminal escapes, newlines) with a
 * space; when max > 0 cut it to at most max bytes (on a UTF-8 boundary) ending
 * in "...". NULL prints "-". */
void cli_put_clean(FILE *f, const char *s, size_t max);
/* The same into a buffer. */
void cli_buf_clean(struct buf *b, const char *s, size_t max);

/* Compact JSON of v (any value) cut like cli_put_clean; caller frees. */
char *cli_json_short(const json_t *v, size_t max);
/* Print v pretty (indent 2), each line prefixed with indent; "null" for NULL. */
void cli_json_pretty(FILE *f, const json_t *v, const char *indent);
/* Print v as one compact line (NDJSON) and flush. */
void cli_json_line(FILE *f, const json_t *v);

/* Member `key` of object o as a string, or NULL when absent, null or not a string. */
const char *cli_str(const json_t *o, const char *key);

#endif
