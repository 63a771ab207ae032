/*
 * cmd_sandbox.c - `rebuno sandbox ...`: the sandbox service's CLI.
 *
 *   create [NAME]   ls   get NAME   exec NAME -- CMD ARGS...   cp SRC DST
 *   stop NAME   pause NAME   resume NAME   rm NAME   sh NAME [-- CMD ARGS...]
 *   (snapshots, forks and images: cmd_drive.c)
 *
 * Talks to sandboxd over HTTP (libcurl, through cli/client.h): --url, else
 * $REBUNO_SANDBOX_URL, else http://127.0.0.1:8090, with $REBUNO_SANDBOX_TOKEN or the
 * daemon's local token (net/local_auth.h). Readable output by default,
 * --json for the API's objects (and for a failure, the error object, on one line of
 * stderr: cli_report_err is the one place an error is rendered). `exec` streams the command's output live (SSE)
 * and exits with the command's exit code; `cp` moves files in 8 MiB chunks by
 * offset, so neither side ever holds a whole large file. `sh` attaches this
 * terminal to a terminal in the sandbox (cmd_sandbox_sh.c).
 */
#include <errno.h>
#include <stdint.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/sandbox_sh.h"
#include "sandbox/core/text.h"

#define DEFAULT_URL "http://127.0.0.1:8090"
#define CHUNK (8u << 20)

struct opts {
    const char *url;
    bool json, help, sudo, interactive, no_start, recursive, escalation;
    const char *pos[4];
    int npos;
    const char *user, *cwd, *timeout, *vcpus, *memory, *pids, *on_timeout, *state, *image;
    const char *region;
    json_t *meta, *env;
    char **cmd;
    int ncmd;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rebuno sandbox <action> [options]\n\n"
            "actions:\n"
            "  create [NAME]            create and start a sandbox\n"
            "      --meta K=V (repeat) --env K=V (repeat) --vcpus N --memory MIB --pids N\n"
            "      --timeout SECONDS (0: none) --on-timeout stop|pause --no-start\n"
            "      --image REF (name:tag, name@sha256:..., sha256:... or host; default: the\n"
            "      image tagged rebuno/default, else host; rebuno sandbox image import PATH)\n"
            "      --region R (recorded: one host is one region; default \"local\")\n"
            "      --allow-privilege-escalation (setuid programs such as sudo work inside,\n"
            "      reaching only the sandbox's own root)\n"
            "  ls                       list sandboxes [--state running,paused,stopped] [--meta K=V]\n"
            "  get NAME                 show one sandbox\n"
            "  exec NAME [opts] -- CMD [ARGS...]\n"
            "                           run a command; exits with its exit code\n"
            "      --user U --sudo --cwd DIR --env K=V --timeout SECONDS -i (send stdin)\n"
            "  sh NAME [opts] [-- CMD [ARGS...]]\n"
            "                           an interactive terminal (default /bin/bash); exits with\n"
            "                           its exit code   --user U --sudo --cwd DIR --env K=V\n"
            "  cp SRC DST               copy a file in or out: NAME:/path on one side,\n"
            "                           a local path (or - for stdin/stdout) on the other;\n"
            "                           --json: {source, destination, bytes} (on stderr when\n"
            "                           DST is -)\n"
            "  stop|pause|resume|rm NAME\n"
            "  snapshot NAME | snapshots [NAME] | snapshot-rm ID | fork NAME [NEW]\n"
            "                           snapshots and forks (rebuno sandbox snapshot -h)\n"
            "  image pull REF           pull an image from an OCI registry (progress bar)\n"
            "  image import PATH | image ls | image get REF | image rm REF | image gc\n"
            "                           self-contained images: OCI layouts, docker archives,\n"
            "                           host folders or tarballs (rebuno sandbox image -h)\n"
            "  image build -f RECIPE [CONTEXT] [--ref NAME:TAG]\n"
            "                           build an image from a Dockerfile-like recipe\n\n"
            "global options: --url URL (else $REBUNO_SANDBOX_URL, else %s), --json, -h\n"
            "token: $REBUNO_SANDBOX_TOKEN, else sandboxd's local token (found for its user)\n"
            "with --json a failure prints {\"error\":{...}} on one line of stderr\n",
            DEFAULT_URL);
}

static int kv_into(json_t *obj, const char *s, const char *what, struct err *err)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s)
        return err_invalid(err, what, "--%s takes KEY=VALUE, got \"%s\"", what, s);
    char *k = xstrndup(s, (size_t)(eq - s));
    json_object_set_new(obj, k, json_string(eq + 1));
    free(k);
    return 0;
}

static int parse(int argc, char **argv, struct opts *o, struct err *err)
{
    memset(o, 0, sizeof *o);
    o->meta = json_object();
    o->env = json_object();
    struct {
        const char *name;
        const char **val;
    } vals[] = {{"url", &o->url},         {"user", &o->user},     {"cwd", &o->cwd},
                {"timeout", &o->timeout}, {"vcpus", &o->vcpus},   {"memory", &o->memory},
                {"pids", &o->pids},       {"on-timeout", &o->on_timeout},
                {"state", &o->state},     {"image", &o->image},   {"region", &o->region}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            o->cmd = argv + i + 1;
            o->ncmd = argc - i - 1;
            break;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->npos >= (int)(sizeof o->pos / sizeof o->pos[0]))
                return err_invalid(err, "", "unexpected argument \"%s\"", a);
            o->pos[o->npos++] = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) o->help = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--sudo")) o->sudo = true;
        else if (!strcmp(a, "-i") || !strcmp(a, "--interactive")) o->interactive = true;
        else if (!strcmp(a, "--no-start")) o->no_start = true;
        else if (!strcmp(a, "--allow-privilege-escalation")) o->escalation = true;
        else if (!strcmp(a, "-r") || !strcmp(a, "--recursive")) o->recursive = true;
        else {
            if (strncmp(a, "--", 2) != 0) return err_invalid(err, "", "unknown option %s", a);
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t nl = eq ? (size_t)(eq - name) : strlen(name);
            const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) return err_invalid(err, "", "--%.*s needs a value", (int)nl, name);
            bool known = false;
            for (size_t k = 0; k < sizeof vals / sizeof vals[0] && !known; k++)
                if (strlen(vals[k].name) == nl && !strncmp(vals[k].name, name, nl)) {
                    *vals[k].val = v;
                    known = true;
                }
            if (known) continue;
            if (nl == 4 && !strncmp(name, "meta", 4)) {
                if (kv_into(o->meta, v, "meta", err) < 0) return -1;
            } else if (nl == 3 && !strncmp(name, "env", 3)) {
                if (kv_into(o->env, v, "env", err) < 0) return -1;
            } else {
                return err_invalid(err, "", "unknown option --%.*s", (int)nl, name);
            }
        }
    }
    return 0;
}

static int num(const char *s, const char *what, long long min, long long max, long long *out,
               struct err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || !*s || v < min || v > max)
        return err_invalid(err, what, "--%s must be a number between %lld and %lld", what, min,
                           max);
    *out = v;
    return 0;
}

/* Transport errors from the shared client talk about "the kernel": say sandboxd. */
static void fix_err(struct client *c, struct err *err)
{
    if (!strcmp(err->code, "unreachable"))
        err_set(err, 0, "unreachable", "",
                "cannot reach sandboxd at %s. Start it with 'sudo rebuno sandboxd', or point "
                "REBUNO_SANDBOX_URL / --url at it",
                c->url);
}

static int req(struct client *c, const char *method, const char *path, json_t *body,
               json_t **out, struct err *err)
{
    int r = client_request(c, method, path, body, NULL, out, err);
    if (r < 0) fix_err(c, err);
    return r;
}

/* ---- raw bodies (files) ---- */

struct sink {
    struct buf b;
    bool overflow;
};

static size_t sink_write(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    if (buf_append(&s->b, p, size * n) < 0) {
        s->overflow = true;
        return 0;
    }
    return size * n;
}

struct hdrs {
    char eof[16], size[32];
};

static size_t hdr_cb(char *p, size_t size, size_t n, void *arg)
{
    struct hdrs *h = arg;
    size_t len = size * n;
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), p);
    line[strcspn(line, "\r\n")] = '\0';
    if (!strncasecmp(line, "X-Rebuno-Eof: ", 14))
        snprintf(h->eof, sizeof h->eof, "%.15s", line + 14);
    if (!strncasecmp(line, "X-Rebuno-File-Size: ", 20))
        snprintf(h->size, sizeof h->size, "%.31s", line + 20);
    return len;
}

/* One raw request: body out as application/octet-stream, reply into out. */
static int raw(struct client *c, const char *method, const char *path, const void *body,
               size_t len, struct buf *out, struct hdrs *h, struct err *err)
{
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    if (client_auth_headers(c, &hl, err) < 0) {
        curl_slist_free_all(hl);
        return -1;
    }
    CURL *cu = c->curl;
    curl_easy_reset(cu);
    char *url = xasprintf("%s%s", c->url, path);
    char errbuf[CURL_ERROR_SIZE] = "";
    struct sink s;
    buf_init(&s.b, CHUNK + (1u << 20));
    s.overflow = false;
    curl_easy_setopt(cu, CURLOPT_URL, url);
    curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(cu, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(cu, CURLOPT_TIMEOUT_MS, 300000L);
    curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(cu, CURLOPT_WRITEDATA, &s);
    if (h) {
        memset(h, 0, sizeof *h);
        curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, hdr_cb);
        curl_easy_setopt(cu, CURLOPT_HEADERDATA, h);
    }
    if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(cu, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(cu, CURLOPT_POSTFIELDS, len ? body : "");
    }
    CURLcode rc = curl_easy_perform(cu);
    long status = 0;
    curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hl);
    free(url);
    int ret = 0;
    if (rc != CURLE_OK) {
        ret = err_set(err, 0, "unreachable", "", "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
        fix_err(c, err);
    } else if (status < 200 || status > 299) {
        json_t *j = json_loadb(s.b.data ? s.b.data : "", s.b.len, 0, NULL);
        json_t *e = json_object_get(j, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *code = json_string_value(json_object_get(e, "code"));
        ret = err_set(err, (int)status, code ? code : "http_error", "", "%s",
                      msg ? msg : "sandboxd answered with an error");
        json_decref(j);
    } else if (out) {
        buf_append(out, s.b.data ? s.b.data : "", s.b.len);
    }
    buf_fini(&s.b);
    return ret;
}

/* ---- output ---- */

static void print_sandbox(const json_t *s)
{
    const char *keys[] = {"name", "id", "state", "image", "region", "created_at", "expires_at"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        printf("%-12s ", keys[i]);
        cli_put_clean(stdout, cli_str(s, keys[i]), 0);
        putchar('\n');
    }
    json_t *res = json_object_get(s, "resources");
    printf("%-12s %lld vcpus, %lld MiB, %lld pids\n", "resources",
           (long long)json_integer_value(json_object_get(res, "vcpus")),
           (long long)json_integer_value(json_object_get(res, "memory")),
           (long long)json_integer_value(json_object_get(res, "pids")));
    printf("%-12s %lld ms, then %s\n", "timeout",
           (long long)json_integer_value(json_object_get(s, "timeout_ms")),
           cli_str(s, "on_timeout") ? cli_str(s, "on_timeout") : "-");
    char *m = cli_json_short(json_object_get(s, "metadata"), 200);
    printf("%-12s %s\n", "metadata", m);
    free(m);
    json_t *sess = json_object_get(s, "session");
    if (json_is_object(sess)) {
        printf("%-12s ", "session");
        cli_put_clean(stdout, cli_str(sess, "id"), 0);
        printf(" (since ");
        cli_put_clean(stdout, cli_str(sess, "started_at"), 0);
        printf(")\n");
    } else {
        printf("%-12s ", "stopped");
        cli_put_clean(stdout, cli_str(s, "stop_reason"), 0);
        putchar('\n');
    }
    json_t *u = json_object_get(s, "usage");
    if (json_is_object(u))
        printf("%-12s %.1f MiB, %lld pids, %lld OOM kills\n", "usage",
               (double)json_integer_value(json_object_get(u, "memory_bytes")) / (1 << 20),
               (long long)json_integer_value(json_object_get(u, "pids")),
               (long long)json_integer_value(json_object_get(u, "oom_kills")));
}

static char *sbx_path(struct client *c, const char *name, const char *suffix)
{
    char *e = client_escape(c, name);
    char *p = xasprintf("/v1/sandboxes/%s%s", e, suffix);
    free(e);
    return p;
}

/* ---- actions ---- */

static int do_create(struct client *c, struct opts *o, struct err *err)
{
    json_t *body = json_object();
    if (o->npos > 1) json_object_set_new(body, "name", json_string(o->pos[1]));
    if (json_object_size(o->meta)) json_object_set(body, "metadata", o->meta);
    if (json_object_size(o->env)) json_object_set(body, "env", o->env);
    json_t *res = json_object();
    long long v;
    int rc = 0;
    if (o->vcpus && (rc = num(o->vcpus, "vcpus", 1, 64, &v, err)) == 0)
        json_object_set_new(res, "vcpus", json_integer(v));
    if (!rc && o->memory && (rc = num(o->memory, "memory", 1, 1 << 30, &v, err)) == 0)
        json_object_set_new(res, "memory", json_integer(v));
    if (!rc && o->pids && (rc = num(o->pids, "pids", 1, 1 << 30, &v, err)) == 0)
        json_object_set_new(res, "pids", json_integer(v));
    if (!rc && o->timeout && (rc = num(o->timeout, "timeout", 0, 7 * 86400, &v, err)) == 0)
        json_object_set_new(body, "timeout_ms", json_integer(v * 1000));
    if (o->on_timeout) json_object_set_new(body, "on_timeout", json_string(o->on_timeout));
    if (o->image) json_object_set_new(body, "image", json_string(o->image));
    if (o->region) json_object_set_new(body, "region", json_string(o->region));
    if (o->no_start) json_object_set_new(body, "start", json_false());
    if (o->escalation) json_object_set_new(body, "allow_privilege_escalation", json_true());
    if (json_object_size(res)) json_object_set(body, "resources", res);
    json_decref(res);
    json_t *out = NULL;
    if (!rc) rc = req(c, "POST", "/v1/sandboxes", body, &out, err) < 0 ? -1 : 0;
    json_decref(body);
    if (rc < 0) return CLI_FAILED;
    if (o->json) {
        cli_json_pretty(stdout, out, "");
    } else {
        printf("created ");
        cli_put_clean(stdout, cli_str(out, "name"), 0);
        printf(" (");
        cli_put_clean(stdout, cli_str(out, "id"), 0);
        printf("), %s\n", cli_str(out, "state") ? cli_str(out, "state") : "?");
    }
    json_decref(out);
    return CLI_OK;
}

static int do_ls(struct client *c, struct opts *o, struct err *err)
{
    struct buf path;
    buf_init(&path, 0);
    buf_puts(&path, "/v1/sandboxes?limit=1000");
    if (o->state) client_query_add(c, &path, "state", o->state);
    if (json_object_size(o->meta)) {
        char *m = json_dumps(o->meta, JSON_COMPACT);
        client_query_add(c, &path, "metadata", m);
        free(m);
    }
    json_t *out = NULL;
    int rc = req(c, "GET", path.data, NULL, &out, err);
    buf_fini(&path);
    if (rc < 0) return CLI_FAILED;
    json_t *arr = json_object_get(out, "sandboxes");
    if (o->json) {
        cli_json_pretty(stdout, arr, "");
    } else if (json_array_size(arr) == 0) {
        printf("no sandboxes\n");
    } else {
        printf("%-24s %-8s %-36s %-24s %s\n", "NAME", "STATE", "ID", "CREATED", "METADATA");
        size_t i;
        json_t *s;
        json_array_foreach(arr, i, s) {
            struct buf line;
            buf_init(&line, 0);
            char *m = cli_json_short(json_object_get(s, "metadata"), 60);
            cli_buf_clean(&line, cli_str(s, "name"), 24);
            printf("%-24s %-8s %-36s %-24s %s\n", line.data, cli_str(s, "state"),
                   cli_str(s, "id"), cli_str(s, "created_at"), m);
            free(m);
            buf_fini(&line);
        }
    }
    json_decref(out);
    return CLI_OK;
}

static int simple(struct client *c, struct opts *o, const char *method, const char *suffix,
                  const char *done, struct err *err)
{
    if (o->npos < 2) return err_invalid(err, "", "which sandbox? give its name"), CLI_USAGE;
    char *path = sbx_path(c, o->pos[1], suffix);
    json_t *out = NULL, *body = strcmp(method, "POST") == 0 ? json_object() : NULL;
    int rc = req(c, method, path, body, &out, err);
    json_decref(body);
    free(path);
    if (rc < 0) return CLI_FAILED;
    if (o->json && out)
        cli_json_pretty(stdout, out, "");
    else if (!done)
        print_sandbox(out);
    else {
        cli_put_clean(stdout, o->pos[1], 0);
        printf(" %s\n", done);
    }
    json_decref(out);
    return CLI_OK;
}

struct exec_state {
    int exit_code;
    bool done;
};

static int on_event(const char *id, const char *event, const char *data, void *arg)
{
    struct exec_state *st = arg;
    json_t *j = json_loads(data, 0, NULL);
    if (!strcmp(event, "stdout") || !strcmp(event, "stderr")) {
        const char *b64 = cli_str(j, "data");
        struct buf b;
        buf_init(&b, 0);
        if (b64 && sbx_base64_decode(b64, strlen(b64), &b) == 0 && b.len) {
            FILE *f = !strcmp(event, "stdout") ? stdout : stderr;
            fwrite(b.data, 1, b.len, f);
            fflush(f);
        }
        buf_fini(&b);
    } else if (!strcmp(event, "gap")) {
        fprintf(stderr, "[rebuno: some output was dropped (over the kept limit)]\n");
    } else if (!strcmp(event, "exit")) {
        json_t *ec = json_object_get(j, "exit_code");
        st->exit_code = json_is_integer(ec) ? (int)json_integer_value(ec) : 1;
        st->done = true;
        json_decref(j);
        return 1;
    }
    json_decref(j);
    return 0;
}

static int do_exec(struct client *c, struct opts *o, struct err *err)
{
    if (o->npos < 2 || o->ncmd < 1)
        return err_invalid(err, "", "usage: rebuno sandbox exec NAME [options] -- CMD [ARGS...]"),
               CLI_USAGE;
    json_t *body = json_object();
    json_object_set_new(body, "cmd", json_string(o->cmd[0]));
    json_t *args = json_array();
    for (int i = 1; i < o->ncmd; i++)
        json_array_append_new(args, json_string(o->cmd[i]));
    json_object_set_new(body, "args", args);
    if (o->user) json_object_set_new(body, "user", json_string(o->user));
    if (o->cwd) json_object_set_new(body, "cwd", json_string(o->cwd));
    if (o->sudo) json_object_set_new(body, "sudo", json_true());
    if (json_object_size(o->env)) json_object_set(body, "env", o->env);
    long long t;
    if (o->timeout) {
        if (num(o->timeout, "timeout", 0, 7 * 86400, &t, err) < 0) {
            json_decref(body);
            return CLI_USAGE;
        }
        json_object_set_new(body, "timeout_ms", json_integer(t * 1000));
    }
    if (o->interactive) json_object_set_new(body, "stdin", json_string("pipe"));
    if (o->json) json_object_set_new(body, "wait", json_true());
    char *path = sbx_path(c, o->pos[1], "/commands");
    json_t *out = NULL;
    int rc = req(c, "POST", path, body, &out, err);
    json_decref(body);
    free(path);
    if (rc < 0) return CLI_FAILED;
    if (o->json) {
        cli_json_pretty(stdout, out, "");
        json_t *ec = json_object_get(out, "exit_code");
        int code = json_is_integer(ec) ? (int)json_integer_value(ec) : 1;
        json_decref(out);
        return code;
    }
    char *base = xasprintf("/commands/%s", cli_str(out, "id"));
    json_decref(out);
    if (o->interactive) { /* stdin to the command in chunks, then close it */
        char *sp = sbx_path(c, o->pos[1], base), *p1 = xasprintf("%s/stdin", sp);
        char *p2 = xasprintf("%s/stdin?close=true", sp);
        char *chunk = xmalloc(1 << 20);
        for (;;) {
            size_t n = fread(chunk, 1, 1 << 20, stdin);
            bool last = n < (1 << 20);
            if (raw(c, "POST", last ? p2 : p1, chunk, n, NULL, NULL, err) < 0) {
                if (strcmp(err->code, "stdin_closed") != 0) break;
                err_clear(err); /* the command stopped reading: fine */
                break;
            }
            if (last) break;
        }
        free(chunk);
        free(sp);
        free(p1);
        free(p2);
        if (err->msg[0]) {
            free(base);
            return CLI_FAILED;
        }
    }
    char *sp = sbx_path(c, o->pos[1], base);
    char *stream = xasprintf("%s/stream", sp);
    struct exec_state st = {1, false};
    c->timeout_ms = 0;
    rc = client_stream(c, stream, NULL, on_event, &st, err);
    free(sp);
    free(stream);
    free(base);
    if (rc < 0) {
        fix_err(c, err);
        return CLI_FAILED;
    }
    return st.exit_code;
}

static int do_sh(struct client *c, struct opts *o, struct err *err)
{
    if (o->npos < 2)
        return err_invalid(err, "", "usage: rebuno sandbox sh NAME [options] [-- CMD [ARGS...]]"),
               CLI_USAGE;
    struct sbx_sh_opts so = {.name = o->pos[1], .user = o->user, .cwd = o->cwd, .sudo = o->sudo,
                             .env = o->env, .cmd = o->cmd, .ncmd = o->ncmd};
    int rc = sbx_cli_sh(c, &so, err);
    if (err->msg[0]) {
        fix_err(c, err);
        return CLI_FAILED;
    }
    return rc;
}

/* "NAME:/path" -> name and path (allocated), or 0 when s is a local path. */
static int remote(const char *s, char **name, char **path)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || strchr(s, '/') < colon) return 0;
    *name = xstrndup(s, (size_t)(colon - s));
    *path = xstrdup(colon + 1);
    return 1;
}

static int do_cp(struct client *c, struct opts *o, struct err *err)
{
    if (o->npos < 3)
        return err_invalid(err, "", "usage: rebuno sandbox cp NAME:/path LOCAL | LOCAL NAME:/path"),
               CLI_USAGE;
    char *name = NULL, *rpath = NULL;
    int ret = CLI_FAILED;
    bool down = remote(o->pos[1], &name, &rpath);
    if (!down && !remote(o->pos[2], &name, &rpath))
        return err_invalid(err, "", "one side of cp must be NAME:/path"), CLI_USAGE;
    const char *local = down ? o->pos[2] : o->pos[1];
    char *esc = client_escape(c, rpath);
    char *base = sbx_path(c, name, "/files/content?path=");
    FILE *f = !strcmp(local, "-") ? (down ? stdout : stdin) : fopen(local, down ? "wb" : "rb");
    if (!f) {
        err_set(err, 0, "local_file", "", "%s: %s", local, strerror(errno));
        goto out;
    }
    uint64_t off = 0;
    if (down) {
        for (;;) {
            char *p = xasprintf("%s%s&offset=%llu&length=%u", base, esc, (unsigned long long)off,
                                CHUNK);
            struct buf b;
            buf_init(&b, 0);
            struct hdrs h;
            int r = raw(c, "GET", p, NULL, 0, &b, &h, err);
            free(p);
            if (r == 0 && b.len && fwrite(b.data, 1, b.len, f) != b.len)
                r = err_set(err, 0, "local_file", "", "%s: %s", local, strerror(errno));
            size_t got = b.len;
            off += got;
            buf_fini(&b);
            if (r < 0) goto out;
            if (!strcmp(h.eof, "true") || got == 0) break;
        }
    } else {
        char *chunk = xmalloc(CHUNK);
        bool first = true;
        for (;;) {
            size_t n = fread(chunk, 1, CHUNK, f);
            if (n == 0 && !first) break;
            char *p = xasprintf("%s%s&offset=%llu", base, esc, (unsigned long long)off);
            int r = raw(c, "PUT", p, chunk, n, NULL, NULL, err);
            free(p);
            if (r < 0) {
                free(chunk);
                goto out;
            }
            off += n;
            first = false;
            if (n < CHUNK) break;
        }
        free(chunk);
    }
    if (o->json) { /* stdout, unless the file itself went there */
        json_t *sum = json_object();
        json_object_set_new(sum, "source", cli_json_text(o->pos[1]));
        json_object_set_new(sum, "destination", cli_json_text(o->pos[2]));
        json_object_set_new(sum, "bytes", json_integer((json_int_t)off));
        cli_json_pretty(f == stdout ? stderr : stdout, sum, "");
        json_decref(sum);
    } else if (f != stdout) {
        fprintf(stderr, "copied %llu bytes %s %s:%s\n", (unsigned long long)off,
                down ? "from" : "to", name, rpath);
    }
    ret = CLI_OK;
out:
    if (f && f != stdin && f != stdout) fclose(f);
    free(esc);
    free(base);
    free(name);
    free(rpath);
    return ret;
}

int cmd_sandbox(int argc, char **argv)
{
    int ai = cli_find_action(argc, argv); /* snapshots and forks: cmd_drive.c */
    if (ai > 0 && ai + 1 < argc && !strcmp(argv[ai], "image") && !strcmp(argv[ai + 1], "build"))
        return cmd_sandbox_image_build(argc, argv); /* cmd_image_build.c */
    if (ai > 0 && (!strcmp(argv[ai], "snapshot") || !strcmp(argv[ai], "snapshots") ||
                   !strcmp(argv[ai], "snapshot-rm") || !strcmp(argv[ai], "fork")))
        return cmd_sandbox_snap(argc, argv);
    if (ai > 0 && ai + 1 < argc && !strcmp(argv[ai], "image") && !strcmp(argv[ai + 1], "pull"))
        return cmd_sandbox_image_pull(argc, argv); /* cmd_image_pull.c */
    if (ai > 0 && (!strcmp(argv[ai], "image") || !strcmp(argv[ai], "images") ||
                   !strcmp(argv[ai], "image-rm")))
        return cmd_sandbox_image(argc, argv);
    struct opts o;
    struct err err = ERR_INIT;
    if (parse(argc, argv, &o, &err) < 0) {
        cli_report_err(&err, cli_wants_json(argc, argv), true);
        if (!cli_wants_json(argc, argv)) fprintf(stderr, "run 'rebuno sandbox --help' for usage\n");
        json_decref(o.meta);
        json_decref(o.env);
        return CLI_USAGE;
    }
    if (o.help || o.npos == 0) {
        if (!o.help && o.json) {
            err_invalid(&err, "", "which action? run 'rebuno sandbox --help' for the list");
            cli_report_err(&err, true, true);
        } else {
            usage(o.help ? stdout : stderr);
        }
        json_decref(o.meta);
        json_decref(o.env);
        return o.help ? CLI_OK : CLI_USAGE;
    }
    const char *url = o.url;
    if (!url || !*url) url = getenv("REBUNO_SANDBOX_URL");
    if (!url || !*url) url = DEFAULT_URL;
    struct client c;
    client_init_sandbox(&c, url);
    const char *a = o.pos[0];
    int rc;
    if (!strcmp(a, "create")) rc = do_create(&c, &o, &err);
    else if (!strcmp(a, "ls") || !strcmp(a, "list")) rc = do_ls(&c, &o, &err);
    else if (!strcmp(a, "get")) rc = simple(&c, &o, "GET", "", NULL, &err);
    else if (!strcmp(a, "stop")) rc = simple(&c, &o, "POST", "/stop", "stopped", &err);
    else if (!strcmp(a, "pause")) rc = simple(&c, &o, "POST", "/pause", "paused", &err);
    else if (!strcmp(a, "resume")) rc = simple(&c, &o, "POST", "/resume", "running", &err);
    else if (!strcmp(a, "rm") || !strcmp(a, "delete")) rc = simple(&c, &o, "DELETE", "", "deleted", &err);
    else if (!strcmp(a, "exec")) rc = do_exec(&c, &o, &err);
    else if (!strcmp(a, "cp")) rc = do_cp(&c, &o, &err);
    else if (!strcmp(a, "sh") || !strcmp(a, "shell")) rc = do_sh(&c, &o, &err);
    else {
        err_invalid(&err, "", "unknown action \"%s\"", a);
        rc = CLI_USAGE;
    }
    if (err.msg[0] && (rc == CLI_FAILED || rc == CLI_USAGE))
        cli_report_err(&err, o.json, rc == CLI_USAGE);
    client_fini(&c);
    json_decref(o.meta);
    json_decref(o.env);
    return rc;
}
