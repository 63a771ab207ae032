/*
 * cmd_image_build.c - `rebuno sandbox image build -f RECIPE [CONTEXT] [--ref NAME:TAG]`.
 *
 * POST /v1/images {"type":"build","recipe":<the file's text>,"context":<abs CONTEXT>}
 * gives a job; its SSE stream (GET /v1/images/builds/:id/stream) is printed as it comes:
 * the build log on stderr (STEP lines, the RUN output, one "-> sha256:..." per layer),
 * then the image's digest on stdout (--json: the final job as one line).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/image_job.h"

#define RECIPE_MAX (256u << 10)
#define DEFAULT_URL "http://127.0.0.1:8090" /* as cmd_sandbox.c */

static void usage(FILE *f)
{
    fprintf(f, "usage: rebuno sandbox image build -f RECIPE [CONTEXT] [--ref NAME:TAG]\n"
               "  builds an image from a Dockerfile-like RECIPE (FROM, RUN, COPY, ENV, WORKDIR,\n"
               "  USER): each RUN in a sandbox, each step a cached layer. COPY reads from the\n"
               "  CONTEXT folder (default: none). The log goes to stderr, the digest to stdout.\n"
               "  e.g. rebuno sandbox image build -f Recipe . --ref team/tool:v1\n");
}

struct view {
    bool json, ok, seen; /* seen: the log so far was printed (the first progress event) */
    json_t *final;
};

static int on_event(const char *id, const char *event, const char *data, void *arg)
{
    (void)id;
    struct view *v = arg;
    json_t *o = json_loads(data, 0, NULL);
    if (!o) return 0;
    if (!strcmp(event, "log")) {
        if (!v->json) {
            cli_put_clean(stderr, cli_str(o, "line"), 8192);
            fputc('\n', stderr);
        }
    } else if ((!strcmp(event, "progress") || !strcmp(event, "done") || !strcmp(event, "error")) &&
               !v->seen) {
        /* the first event holds the log so far (all of it, when the build was over
         * before the stream opened) */
        v->seen = true;
        const json_t *log = json_object_get(o, "log");
        for (size_t i = 0; !v->json && i < json_array_size(log); i++) {
            cli_put_clean(stderr, json_string_value(json_array_get(log, i)), 8192);
            fputc('\n', stderr);
        }
    }
    if (!strcmp(event, "done") || !strcmp(event, "error")) {
        json_decref(v->final);
        v->final = o;
        v->ok = !strcmp(event, "done");
        return 1;
    }
    json_decref(o);
    return 0;
}

static int read_recipe(const char *path, char **out, struct err *err)
{
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f)
        return err_set(err, 0, "local_file", "file", "cannot read the recipe %s: %s", path,
                       strerror(errno));
    char *b = xmalloc(RECIPE_MAX + 2);
    size_t n = fread(b, 1, RECIPE_MAX + 1, f);
    if (f != stdin) fclose(f);
    if (n > RECIPE_MAX) {
        free(b);
        return err_set(err, 0, "local_file", "file", "the recipe %s is over 256 KiB", path);
    }
    b[n] = '\0';
    *out = b;
    return 0;
}

int cmd_sandbox_image_build(int argc, char **argv)
{
    /* -f is --file */
    char **args = xcalloc((size_t)argc + 1, sizeof *args);
    for (int i = 0; i < argc; i++)
        args[i] = !strcmp(argv[i], "-f") ? "--file" : argv[i];
    struct cli_args a; /* pos: "image", "build", [CONTEXT] */
    struct err err = ERR_INIT;
    const char *file = NULL, *ref = NULL;
    const struct cli_opt opts[] = {{"file", &file}, {"ref", &ref}, {NULL, NULL}};
    int prc = cli_parse(argc, args, opts, 3, &a, &err);
    free(args);
    if (prc < 0) {
        cli_report_err(&err, cli_wants_json(argc, argv), true);
        return CLI_USAGE;
    }
    if (a.help) {
        usage(stdout);
        return CLI_OK;
    }
    if (!file) {
        err_invalid(&err, "file",
                    "which recipe? rebuno sandbox image build -f RECIPE [CONTEXT] "
                    "(- reads it from stdin)");
        cli_report_err(&err, a.json, true);
        return CLI_USAGE;
    }
    char *recipe = NULL;
    char ctx[PATH_MAX] = "";
    if (read_recipe(file, &recipe, &err) < 0) {
        cli_report_err(&err, a.json, true);
        return CLI_FAILED;
    }
    if (a.npos >= 3) { /* the daemon reads the folder itself: make it absolute */
        struct stat st;
        if (!realpath(a.pos[2], ctx) || stat(ctx, &st) < 0 || !S_ISDIR(st.st_mode)) {
            err_set(&err, 0, "local_file", "context", "cannot use the context folder %s: %s",
                    a.pos[2], errno ? strerror(errno) : "not a folder");
            cli_report_err(&err, a.json, true);
            free(recipe);
            return CLI_FAILED;
        }
    }
    const char *url = a.url;
    if (!url || !*url) url = getenv("REBUNO_SANDBOX_URL");
    if (!url || !*url) url = DEFAULT_URL;
    struct client c;
    client_init_sandbox(&c, url);
    json_t *body = json_pack("{s:s, s:s}", "type", "build", "recipe", recipe);
    free(recipe);
    if (ctx[0]) json_object_set_new(body, "context", json_string(ctx));
    if (ref) json_object_set_new(body, "ref", json_string(ref));
    json_t *job = NULL;
    int rc = client_request(&c, "POST", "/v1/images", body, NULL, &job, &err) < 0 ? -1 : 0;
    json_decref(body);
    struct view v = {.json = a.json};
    if (rc == 0)
        rc = image_job_follow(&c, job, "/v1/images/builds", "build", on_event, &v, &v.final,
                              &err);
    json_decref(job);
    int ret = image_job_report(rc, &err, v.final, v.ok, a.json, "build");
    json_decref(v.final);
    client_fini(&c);
    return ret;
}
