/* client.c - libcurl HTTP/SSE client for the kernel API and shared CLI plumbing (see client.h). */
#include "cli/client.h"
#include "base/clock.h"
#include "base/xalloc.h"
#include "net/local_auth.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CONNECT_TIMEOUT_MS 10000L
#define REQUEST_TIMEOUT_MS 60000L
#define STREAM_STALL_SEC 45L /* the kernel sends a keep-alive every 15 s */
#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000
#define RETRY_WINDOW_MS 30000
#define MAX_ERR_BODY (64u << 10)
#define HINT_START "Start one with 'rebuno dev', or point REBUNO_URL / --url at it"

static int curl_users; /* clients alive; curl_global_* is called around them */

/* key, else the local token of the daemon at c->url (state_file: where its state folder
 * keeps it, relative to the working folder). */
static void set_key(struct client *c, const char *key, const char *state_file)
{
    if (key && *key) {
        c->api_key = xstrdup(key);
        return;
    }
    const char *dir = getenv("REBUNO_STATE_DIR");
    char *path = xasprintf("%s/%s", dir && *dir ? dir : ".rebuno", state_file);
    struct local_auth_found f;
    if (local_auth_find(c->url, path, &f) == 0) {
        c->api_key = xstrdup(f.token);
        c->key_from = xstrdup(f.from);
    } else {
        c->looked = xstrdup(f.looked);
    }
    free(path);
}

/* Make the i-th of c->all_urls (comma-separated, blanks and a trailing '/' trimmed) current. */
static void use_url(struct client *c, int i)
{
    const char *p = c->all_urls;
    for (int k = 0; k < i; k++) p = strchr(p, ',') + 1;
    while (*p == ' ') p++;
    size_t n = strcspn(p, ",");
    while (n > 0 && (p[n - 1] == '/' || p[n - 1] == ' ')) n--;
    free(c->url);
    c->url = xstrndup(p, n);
    c->cur_url = i;
}

/* After a connection that could not be opened: the next replica, unless all were tried
 * (*tried counts them). */
static bool fail_over(struct client *c, CURLcode rc, int *tried)
{
    if (c->n_urls < 2 || *tried + 1 >= c->n_urls) return false;
    if (rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST) return false;
    (*tried)++;
    use_url(c, (c->cur_url + 1) % c->n_urls);
    return true;
}

static void setup(struct client *c, const char *url)
{
    memset(c, 0, sizeof *c);
    if (curl_users++ == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "fatal: cannot initialise libcurl\n");
        abort();
    }
    c->all_urls = xstrdup(url);
    c->n_urls = 1;
    for (const char *p = url; *p; p++) c->n_urls += *p == ',';
    c->cur_url = -1;
    use_url(c, 0);
    c->timeout_ms = REQUEST_TIMEOUT_MS;
    c->curl = curl_easy_init();
    if (!c->curl) {
        fprintf(stderr, "fatal: cannot create a libcurl handle\n");
        abort();
    }
}

void client_init(struct client *c, const char *url, const char *api_key)
{
    if (!url || !*url) url = getenv("REBUNO_URL");
    setup(c, url && *url ? url : CLIENT_DEFAULT_URL);
    c->key_var = "--api-key / REBUNO_API_KEY";
    set_key(c, api_key ? api_key : getenv("REBUNO_API_KEY"), LOCAL_AUTH_FILE);
}

void client_init_sandbox(struct client *c, const char *url)
{
    setup(c, url);
    c->key_var = "REBUNO_SANDBOX_TOKEN";
    set_key(c, getenv("REBUNO_SANDBOX_TOKEN"), "sandboxes/" LOCAL_AUTH_FILE);
}

void client_fini(struct client *c)
{
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->url);
    free(c->all_urls);
    c->all_urls = NULL;
    free(c->api_key);
    free(c->key_from);
    free(c->looked);
    c->curl = NULL;
    c->url = c->api_key = c->key_from = c->looked = NULL;
    if (--curl_users == 0) curl_global_cleanup();
}

char *client_escape(struct client *c, const char *s)
{
    char *e = curl_easy_escape(c->curl, s, (int)strlen(s));
    if (!e) {
        fprintf(stderr, "fatal: out of memory escaping a URL component\n");
        abort();
    }
    char *out = xstrdup(e);
    curl_free(e);
    return out;
}

void client_query_add(struct client *c, struct buf *path, const char *key, const char *value)
{
    if (!value) return;
    char *e = client_escape(c, value);
    bool has_query = path->data && strchr(path->data, '?');
    buf_printf(path, "%c%s=%s", has_query ? '&' : '?', key, e);
    free(e);
}

/* ---- shared request plumbing ------------------------------------------------- */

static struct curl_slist *hdr_add(struct curl_slist *l, const char *h)
{
    struct curl_slist *n = curl_slist_append(l, h);
    if (!n) {
        fprintf(stderr, "fatal: out of memory building request headers\n");
        abort();
    }
    return n;
}

/* A header value must not be able to smuggle in another header line. */
static bool header_safe(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

static struct curl_slist *auth_headers(const struct client *c, struct curl_slist *l)
{
    if (c->api_key) {
        char *h = xasprintf("Authorization: Bearer %s", c->api_key);
        l = hdr_add(l, h);
        free(h);
    }
    return hdr_add(l, "Expect:"); /* no 100-continue round trip */
}

static void common_opts(struct client *c, const char *url, char *errbuf, struct curl_slist *hl)
{
    CURL *h = c->curl;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "rebuno-cli");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
}

static int check_key(const struct client *c, struct err *err)
{
    if (c->api_key && !header_safe(c->api_key))
        return err_set(err, 0, "bad_key", "", "the API key contains control characters: check %s",
                       c->key_var);
    return 0;
}

int client_auth_headers(const struct client *c, struct curl_slist **l, struct err *err)
{
    if (check_key(c, err) < 0) return -1;
    *l = auth_headers(c, *l);
    return 0;
}

/* Turn a libcurl failure into a message that names the URL and what to do. */
static int transport_err(struct client *c, CURLcode rc, const char *errbuf, struct err *err)
{
    const char *detail = errbuf && *errbuf ? errbuf : curl_easy_strerror(rc);
    long oserr = 0;
    curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &oserr);
    switch (rc) {
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return err_set(err, 0, "bad_url", "",
                       "'%s' is not a usable kernel URL (%s): pass --url http://HOST:PORT or "
                       "set REBUNO_URL",
                       c->url, detail);
    case CURLE_COULDNT_CONNECT:
        if (oserr) detail = strerror((int)oserr);
        /* fall through */
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return err_set(err, 0, "unreachable", "", "cannot reach the kernel at %s: %s. " HINT_START,
                       c->url, detail);
    default:
        break;
    }
    curl_off_t connect_us = 0;
    curl_easy_getinfo(c->curl, CURLINFO_CONNECT_TIME_T, &connect_us);
    if (connect_us == 0 && rc == CURLE_OPERATION_TIMEDOUT)
        return err_set(err, 0, "unreachable", "", "cannot reach the kernel at %s: %s. " HINT_START,
                       c->url, detail);
    return err_set(err, 0, "unreachable", "",
                   "lost the connection to the kernel at %s: %s. Check that the kernel is "
                   "running and that REBUNO_URL / --url points at it",
                   c->url, detail);
}

/* Append text to e->msg, cutting it if the message is full. */
static void msg_append(struct err *e, const char *text)
{
    strncat(e->msg, text, sizeof e->msg - 1 - strnlen(e->msg, sizeof e->msg - 1));
}

/* What to do about an id the kernel does not know, by the kind of object the path names.
 * The kernel says which id ("field": "id" for the one in the path); the CLI knows which
 * command lists that kind, so every command that reads an object gets the same hint. */
static const struct {
    const char *prefix; /* path prefix, followed by the id */
    const char *hint;
} not_found_hints[] = {
    {"/v0/executions/", "list executions with 'rebuno exec list'"},
    {"/v0/approvals/", "list approvals with 'rebuno approval ls --status all'"},
};

static void add_hint(const char *path, struct err *err)
{
    if (!path || strcmp(err->code, "not_found") != 0 || strcmp(err->field, "id") != 0) return;
    for (size_t i = 0; i < sizeof not_found_hints / sizeof not_found_hints[0]; i++)
        if (strncmp(path, not_found_hints[i].prefix, strlen(not_found_hints[i].prefix)) == 0) {
            msg_append(err, "; ");
            msg_append(err, not_found_hints[i].hint);
            return;
        }
}

/* Error for a non-2xx reply to a request for path: the kernel's {"error":{...}} when
 * present, with what to do added where the CLI knows better than the kernel. */
static int http_err(const struct client *c, const char *path, long status, const char *body,
                    size_t len, struct err *err)
{
    json_t *j = len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    if (json_is_object(e)) {
        const char *code = cli_str(e, "code"), *msg = cli_str(e, "message");
        const char *field = cli_str(e, "field");
        err_set(err, (int)status, code ? code : "http_error", field ? field : "", "%s",
                msg && *msg ? msg : "the kernel gave no message");
        add_hint(path, err);
    } else {
        struct buf snip;
        buf_init(&snip, 0);
        if (len) {
            char *s = xstrndup(body, len < 200 ? len : 200);
            cli_buf_clean(&snip, s, 160);
            free(s);
        }
        err_set(err, (int)status, "http_error", "",
                "the kernel answered HTTP %ld without an API error%s%s; is %s a rebuno kernel?",
                status, snip.len ? ": " : "", snip.len ? snip.data : "", c->url);
        buf_fini(&snip);
    }
    json_decref(j);
    if (status == 401) {
        char hint[1400];
        if (c->key_from)
            snprintf(hint, sizeof hint, " (sent the local token of %s; or set %s)", c->key_from,
                     c->key_var);
        else if (c->api_key)
            snprintf(hint, sizeof hint, " (check %s)", c->key_var);
        else
            snprintf(hint, sizeof hint,
                     " (no local token for %s in %s: run this as the user who started it, or set %s)",
                     c->url, c->looked && *c->looked ? c->looked : "the usual places", c->key_var);
        msg_append(err, hint);
    }
    return -1;
}

struct body_sink {
    struct buf b;
    bool overflow;
};

static size_t body_write(char *p, size_t size, size_t n, void *arg)
{
    struct body_sink *s = arg;
    size_t len = size * n;
    if (buf_append(&s->b, p, len) < 0) {
        s->overflow = true;
        return 0;
    }
    return len;
}

int client_request(struct client *c, const char *method, const char *path, json_t *body,
                   const char *const *headers, json_t **out, struct err *err)
{
    if (out) *out = NULL;
    if (check_key(c, err) < 0) return -1;
    CURL *h = c->curl;
    curl_easy_reset(h);
    char errbuf[CURL_ERROR_SIZE];
    errbuf[0] = '\0';
    char *url = xasprintf("%s%s", c->url, path);
    char *payload = NULL;
    struct body_sink sink;
    buf_init(&sink.b, CLIENT_MAX_BODY);
    sink.overflow = false;

    struct curl_slist *hl = hdr_add(NULL, "Accept: application/json");
    hl = auth_headers(c, hl);
    if (body) {
        payload = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        ASSERT(payload != NULL);
        hl = hdr_add(hl, "Content-Type: application/json");
    }
    for (const char *const *p = headers; p && *p; p++)
        hl = hdr_add(hl, *p);

    common_opts(c, url, errbuf, hl);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(method, "POST") == 0)
            curl_easy_setopt(h, CURLOPT_POST, 1L);
        else
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (payload || strcmp(method, "POST") == 0) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(payload ? strlen(payload) : 0));
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload ? payload : "");
        }
    }

    CURLcode rc = curl_easy_perform(h);
    for (int tried = 0; rc != CURLE_OK && fail_over(c, rc, &tried);) { /* nothing was sent */
        free(url);
        url = xasprintf("%s%s", c->url, path);
        curl_easy_setopt(h, CURLOPT_URL, url);
        errbuf[0] = '\0';
        rc = curl_easy_perform(h);
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    int ret = -1;
    if (sink.overflow) {
        err_set(err, 0, "bad_response", "",
                "the reply from the kernel at %s to %s %s is larger than %u MiB; narrow the "
                "request (e.g. --limit)",
                c->url, method, path, CLIENT_MAX_BODY >> 20);
    } else if (rc != CURLE_OK) {
        transport_err(c, rc, errbuf, err);
    } else if (status < 200 || status > 299) {
        http_err(c, path, status, sink.b.data, sink.b.len, err);
    } else if (sink.b.len == 0) {
        ret = (int)status;
    } else {
        json_error_t jerr;
        json_t *j = json_loadb(sink.b.data, sink.b.len, JSON_DECODE_ANY, &jerr);
        if (!j) {
            err_set(err, 0, "bad_response", "",
                    "the kernel at %s sent a reply to %s %s that is not JSON (%s); is it a "
                    "rebuno kernel?",
                    c->url, method, path, jerr.text);
        } else {
            if (out)
                *out = j;
            else
                json_decref(j);
            ret = (int)status;
        }
    }
    curl_slist_free_all(hl);
    free(payload);
    free(url);
    buf_fini(&sink.b);
    return ret;
}

/* ---- Server-Sent Events ------------------------------------------------------ */

struct sse {
    struct client *c;
    client_event_fn cb;
    void *arg;
    /* per connection */
    long status;      /* reply status, 0 until the first body bytes */
    bool not_sse;     /* 2xx but not text/event-stream */
    struct buf line;  /* the line being read (capped) */
    bool skip_lf;     /* the previous byte was CR: an LF right after it ends nothing */
    struct buf data;  /* data lines of the event being built (capped) */
    struct buf event; /* its event type */
    struct buf errbody;
    int events; /* events dispatched on this connection */
    /* across connections */
    struct buf id_buf; /* the WHATWG "last event ID buffer" */
    char *last_id;     /* id of the last dispatched event: sent as Last-Event-ID */
    char last_type[64];
    bool stopped;  /* cb said stop */
    bool overflow; /* a line or an event over its cap */
};

static bool terminal_type(const char *t)
{
    return strcmp(t, "execution.completed") == 0 || strcmp(t, "execution.failed") == 0 ||
           strcmp(t, "execution.cancelled") == 0;
}

/* Blank line: hand the event to the callback. Returns nonzero to abort the transfer. */
static int sse_dispatch(struct sse *s)
{
    free(s->last_id);
    s->last_id = xstrdup(s->id_buf.data ? s->id_buf.data : "");
    if (s->data.len == 0) {
        buf_reset(&s->event);
        return 0;
    }
    s->data.data[--s->data.len] = '\0'; /* the '\n' after the last data line */
    const char *type = s->event.len ? s->event.data : "message";
    snprintf(s->last_type, sizeof s->last_type, "%s", type);
    s->events++;
    int stop = s->cb(s->last_id, type, s->data.data, s->arg);
    buf_reset(&s->data);
    buf_reset(&s->event);
    if (stop) s->stopped = true;
    return stop;
}

static int sse_line(struct sse *s, const char *line, size_t len)
{
    if (len == 0) return sse_dispatch(s);
    if (line[0] == ':') return 0; /* comment, e.g. keep-alive */
    const char *colon = memchr(line, ':', len);
    size_t flen = colon ? (size_t)(colon - line) : len;
    const char *val = colon ? colon + 1 : line + len;
    size_t vlen = len - (size_t)(val - line);
    if (vlen && *val == ' ') val++, vlen--;
    if (flen == 4 && memcmp(line, "data", 4) == 0) {
        if (buf_append(&s->data, val, vlen) < 0 || buf_append(&s->data, "\n", 1) < 0) {
            s->overflow = true;
            return 1;
        }
    } else if (flen == 5 && memcmp(line, "event", 5) == 0) {
        buf_reset(&s->event);
        buf_append(&s->event, val, vlen < 256 ? vlen : 256);
    } else if (flen == 2 && memcmp(line, "id", 2) == 0) {
        if (!memchr(val, '\0', vlen) && vlen < 256) {
            buf_reset(&s->id_buf);
            buf_append(&s->id_buf, val, vlen);
        }
    }
    /* "retry" and unknown fields are ignored: we keep our own backoff */
    return 0;
}

static size_t sse_write(char *p, size_t size, size_t n, void *arg)
{
    struct sse *s = arg;
    size_t len = size * n;
    if (s->status == 0) {
        curl_easy_getinfo(s->c->curl, CURLINFO_RESPONSE_CODE, &s->status);
        char *ct = NULL;
        curl_easy_getinfo(s->c->curl, CURLINFO_CONTENT_TYPE, &ct);
        if (s->status >= 200 && s->status <= 299 && ct &&
            strncasecmp(ct, "text/event-stream", 17) != 0) {
            s->not_sse = true;
            return 0;
        }
    }
    if (s->status < 200 || s->status > 299) {
        buf_append(&s->errbody, p, len); /* beyond the cap the rest is dropped */
        return len;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        if (s->skip_lf) {
            s->skip_lf = false;
            if (ch == '\n') continue;
        }
        if (ch == '\r' || ch == '\n') {
            s->skip_lf = ch == '\r';
            int stop = sse_line(s, s->line.data ? s->line.data : "", s->line.len);
            buf_reset(&s->line);
            if (stop) return 0;
            continue;
        }
        size_t j = i;
        while (j < len && p[j] != '\r' && p[j] != '\n')
            j++;
        if (buf_append(&s->line, p + i, j - i) < 0) {
            s->overflow = true;
            return 0;
        }
        i = j - 1;
    }
    return len;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

int client_stream(struct client *c, const char *path, const char *last_event_id, client_event_fn cb,
                  void *arg, struct err *err)
{
    if (check_key(c, err) < 0) return -1;
    if (last_event_id && !header_safe(last_event_id))
        return err_set(err, 0, "bad_request", "", "the event id to resume after is not valid");
    struct sse s;
    memset(&s, 0, sizeof s);
    s.c = c;
    s.cb = cb;
    s.arg = arg;
    buf_init(&s.line, CLIENT_MAX_SSE_LINE);
    buf_init(&s.data, CLIENT_MAX_SSE_EVENT);
    buf_init(&s.event, 0);
    buf_init(&s.errbody, MAX_ERR_BODY);
    buf_init(&s.id_buf, 0);
    s.last_id = xstrdup(last_event_id ? last_event_id : "");
    buf_puts(&s.id_buf, s.last_id);
    char *url = xasprintf("%s%s", c->url, path);
    int64_t fail_since = 0;
    long backoff = RETRY_MIN_MS;
    int moved = 0; /* replicas tried since the last back-off */
    int ret;

    for (;;) {
        s.status = 0;
        s.not_sse = s.skip_lf = false;
        s.events = 0;
        buf_reset(&s.line);
        buf_reset(&s.data);
        buf_reset(&s.event);
        buf_reset(&s.errbody);
        buf_reset(&s.id_buf);
        buf_puts(&s.id_buf, s.last_id);

        CURL *h = c->curl;
        curl_easy_reset(h);
        char errbuf[CURL_ERROR_SIZE];
        errbuf[0] = '\0';
        struct curl_slist *hl = hdr_add(NULL, "Accept: text/event-stream");
        hl = hdr_add(hl, "Cache-Control: no-cache");
        hl = auth_headers(c, hl);
        if (s.last_id[0]) {
            char *hdr = xasprintf("Last-Event-ID: %s", s.last_id);
            hl = hdr_add(hl, hdr);
            free(hdr);
        }
        common_opts(c, url, errbuf, hl);
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, STREAM_STALL_SEC);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        CURLcode rc = curl_easy_perform(h);
        long status = s.status;
        if (!status) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_slist_free_all(hl);

        if (s.stopped) {
            ret = 0;
            break;
        }
        if (s.overflow) {
            err_set(err, 0, "bad_response", "",
                    "the event stream from %s has a line or event over its size cap (%u MiB)",
                    c->url, CLIENT_MAX_SSE_LINE >> 20);
            ret = -1;
            break;
        }
        if (s.not_sse) {
            err_set(err, 0, "bad_response", "",
                    "%s did not answer %s with an event stream; is it a rebuno kernel?", c->url,
                    path);
            ret = -1;
            break;
        }
        struct err attempt = ERR_INIT;
        if (rc == CURLE_OK && status >= 200 && status <= 299) {
            if (terminal_type(s.last_type)) {
                ret = 1;
                break;
            }
            err_set(&attempt, 0, "unreachable", "",
                    "the kernel at %s kept ending the event stream before the execution finished",
                    c->url);
        } else if (rc == CURLE_OK) {
            http_err(c, path, status, s.errbody.data, s.errbody.len, &attempt);
            if (status < 500) {
                *err = attempt;
                ret = -1;
                break;
            }
        } else {
            transport_err(c, rc, errbuf, &attempt);
            if (strcmp(attempt.code, "bad_url") == 0) {
                *err = attempt;
                ret = -1;
                break;
            }
            if (fail_over(c, rc, &moved)) { /* the next replica at once; resumes at Last-Event-ID */
                free(url);
                url = xasprintf("%s%s", c->url, path);
                continue;
            }
        }

        int64_t now = clock_mono_ms();
        if (s.events > 0 || fail_since == 0) {
            fail_since = now;
            if (s.events > 0) backoff = RETRY_MIN_MS;
        }
        if (now - fail_since >= RETRY_WINDOW_MS) {
            *err = attempt;
            msg_append(err, " (gave up after 30 s of reconnecting)");
            ret = -1;
            break;
        }
        sleep_ms(backoff);
        moved = 0;
        backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
    }

    free(url);
    free(s.last_id);
    buf_fini(&s.line);
    buf_fini(&s.data);
    buf_fini(&s.event);
    buf_fini(&s.errbody);
    buf_fini(&s.id_buf);
    return ret;
}

/* ---- shared CLI plumbing ----------------------------------------------------- */

enum { OPT_URL = 0x100, OPT_KEY, OPT_JSON, OPT_HELP, OPT_USER = 0x200 };

static const char *opt_name(int val, const struct cli_opt *opts)
{
    switch (val) {
    case OPT_URL:
        return "url";
    case OPT_KEY:
        return "api-key";
    case OPT_JSON:
        return "json";
    case OPT_HELP:
        return "help";
    default:
        return val >= OPT_USER ? opts[val - OPT_USER].name : NULL;
    }
}

static int extra_arg(const char *arg, int max_pos, struct err *err)
{
    if (max_pos == 0)
        return err_set(err, 0, "usage", "",
                       "unexpected argument '%s': this command takes only options", arg);
    return err_set(err, 0, "usage", "",
                   "unexpected argument '%s': this command takes at most %d; quote a value that "
                   "contains spaces",
                   arg, max_pos);
}

int cli_parse(int argc, char **argv, const struct cli_opt *opts, int max_pos, struct cli_args *a,
              struct err *err)
{
    memset(a, 0, sizeof *a);
    size_t n = 0;
    while (opts && opts[n].name)
        n++;
    struct option *lo = xcalloc(n + 5, sizeof *lo);
    lo[0] = (struct option){"url", required_argument, NULL, OPT_URL};
    lo[1] = (struct option){"api-key", required_argument, NULL, OPT_KEY};
    lo[2] = (struct option){"json", no_argument, NULL, OPT_JSON};
    lo[3] = (struct option){"help", no_argument, NULL, OPT_HELP};
    for (size_t i = 0; i < n; i++)
        lo[4 + i] = (struct option){opts[i].name, required_argument, NULL, OPT_USER + (int)i};

    int failed = 0, ch;
    if (max_pos > CLI_MAX_POS) max_pos = CLI_MAX_POS;
    optind = 0; /* full re-initialisation of GNU getopt */
    opterr = 0;
    /* '-': positional arguments come back in order as option 1; ':': report missing values */
    while ((ch = getopt_long(argc, argv, "-:h", lo, NULL)) != -1) {
        if (failed && ch != 'h' && ch != OPT_HELP) continue;
        switch (ch) {
        case 1:
            if (a->npos >= max_pos) {
                failed = extra_arg(optarg, max_pos, err);
                break;
            }
            a->pos[a->npos++] = optarg;
            break;
        case 'h':
        case OPT_HELP:
            a->help = true;
            break;
        case OPT_URL:
            a->url = optarg;
            break;
        case OPT_KEY:
            a->api_key = optarg;
            break;
        case OPT_JSON:
            a->json = true;
            break;
        case ':': {
            const char *name = opt_name(optopt, opts);
            failed = err_set(err, 0, "usage", "", "option --%s needs a value",
                             name ? name : argv[optind - 1]);
            break;
        }
        case '?': {
            const char *name = opt_name(optopt, opts);
            if (name)
                failed = err_set(err, 0, "usage", "", "option --%s takes no value", name);
            else if (optopt)
                failed = err_set(err, 0, "usage", "", "unknown option '-%c'", optopt);
            else
                failed = err_set(err, 0, "usage", "", "unknown or ambiguous option '%s'",
                                 argv[optind - 1]);
            break;
        }
        default:
            if (ch >= OPT_USER && ch < OPT_USER + (int)n) *opts[ch - OPT_USER].value = optarg;
            break;
        }
    }
    for (; !failed && optind < argc; optind++) { /* what follows "--" */
        if (a->npos >= max_pos) {
            failed = extra_arg(argv[optind], max_pos, err);
            break;
        }
        a->pos[a->npos++] = argv[optind];
    }
    free(lo);
    return failed && !a->help ? -1 : 0;
}

int cli_find_action(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) return i + 1 < argc ? i + 1 : -1;
        if (s[0] != '-' || s[1] == '\0') return i;
        if (strcmp(s, "--url") == 0 || strcmp(s, "--api-key") == 0) i++;
    }
    return -1;
}

void cli_print_err(const struct err *e)
{
    fputs("error: ", stderr);
    cli_put_clean(stderr, e->msg, 0);
    fputc('\n', stderr);
    if (e->field[0]) {
        fputs("field: ", stderr);
        cli_put_clean(stderr, e->field, 0);
        fputc('\n', stderr);
    }
}

json_t *cli_json_text(const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (j) return j;
    char *c = xstrdup(s);
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

void cli_report_err(const struct err *e, bool json, bool local)
{
    if (!json) {
        cli_print_err(e);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "code", cli_json_text(e->code[0] ? e->code : "error"));
    json_object_set_new(o, "message", cli_json_text(e->msg));
    if (e->field[0]) json_object_set_new(o, "field", cli_json_text(e->field));
    if (!local && e->status > 0) json_object_set_new(o, "status", json_integer(e->status));
    json_t *root = json_object();
    json_object_set_new(root, "error", o);
    char *t = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    fprintf(stderr, "%s\n", t ? t : "{\"error\":{\"code\":\"error\",\"message\":\"?\"}}");
    free(t);
    json_decref(root);
}

bool cli_wants_json(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "--json")) return true;
    return false;
}

void cli_buf_clean(struct buf *b, const char *s, size_t max)
{
    if (!s) {
        buf_puts(b, "-");
        return;
    }
    size_t len = strlen(s), cut = len;
    bool trunc = false;
    if (max > 3 && len > max) {
        cut = max - 3;
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
            cut--;
        trunc = true;
    }
    for (size_t i = 0; i < cut; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f) {
            buf_append(b, " ", 1);
        } else if (ch == 0xC2 && i + 1 < cut && (unsigned char)s[i + 1] >= 0x80 &&
                   (unsigned char)s[i + 1] <= 0x9F) {
            buf_append(b, " ", 1); /* C1 control (e.g. 8-bit CSI) */
            i++;
        } else {
            buf_append(b, &s[i], 1);
        }
    }
    if (trunc) buf_puts(b, "...");
}

void cli_put_clean(FILE *f, const char *s, size_t max)
{
    struct buf b;
    buf_init(&b, 0);
    cli_buf_clean(&b, s, max);
    if (b.len) fwrite(b.data, 1, b.len, f);
    buf_fini(&b);
}

char *cli_json_short(const json_t *v, size_t max)
{
    char *j = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    struct buf b;
    buf_init(&b, 0);
    cli_buf_clean(&b, j ? j : "null", max);
    free(j);
    char *out = buf_steal(&b, NULL);
    return out ? out : xstrdup("");
}

void cli_json_pretty(FILE *f, const json_t *v, const char *indent)
{
    char *j = v ? json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY) : NULL;
    const char *p = j ? j : "null";
    for (;;) {
        const char *nl = strchr(p, '\n');
        char *line = nl ? xstrndup(p, (size_t)(nl - p)) : xstrdup(p);
        fputs(indent, f);
        cli_put_clean(f, line, 0);
        fputc('\n', f);
        free(line);
        if (!nl) break;
        p = nl + 1;
    }
    free(j);
}

void cli_json_line(FILE *f, const json_t *v)
{
    json_dumpf(v, f, JSON_COMPACT | JSON_ENCODE_ANY);
    fputc('\n', f);
    fflush(f);
}

const char *cli_str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

int cli_parse_action(int argc, char **argv, int act, const struct cli_opt *opts, int max_pos,
                     struct cli_args *a, struct err *err)
{
    /* The parser wants the action first, then everything else in its order. */
    char **args = xcalloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    args[n++] = argv[act];
    for (int i = 1; i < argc; i++)
        if (i != act) args[n++] = argv[i];
    int rc = cli_parse(n, args, opts, max_pos, a, err); /* a->pos keeps the strings, not args */
    free(args);
    return rc;
}
