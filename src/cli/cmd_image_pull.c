/*
 * cmd_image_pull.c - `rebuno sandbox image pull REF`: pull an image from a registry
 * through sandboxd (docs/sandbox-api.md "Pulling from a registry") and show its progress.
 *
 * POST /v1/images {"type":"pull","ref"} gives a job; its SSE stream
 * (GET /v1/images/jobs/:id/stream) drives the display: on a terminal (stderr) one
 * progress bar redrawn in place (bytes done of total, the layers done), otherwise one
 * plain line whenever a layer completes or the status changes, so logs stay short. The
 * image's digest goes to stdout at the end (or the final job object with --json);
 * failures print the job's error like every other command (cli_report_err).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/image_job.h"

#define DEFAULT_URL "http://127.0.0.1:8090"
#define BAR_WIDTH 30

struct pull_view {
    bool tty, json;
    char status[32];
    int layers_done;
    bool drawn;
    json_t *final; /* the last job object */
    bool ok;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rebuno sandbox image pull REF [--json]\n\n"
            "Pull an image from an OCI registry into sandboxd: REF is name[:tag],\n"
            "name@sha256:..., or host[:port]/path/name:tag (Docker Hub by default).\n"
            "Credentials come from the daemon's --registry-auth file, never from here.\n"
            "Prints the image's digest (sha256:...) when done.\n\n"
            "global options: --url URL (else $REBUNO_SANDBOX_URL, else %s), --json, -h\n",
            DEFAULT_URL);
}

static void human(int64_t n, char *out, size_t outsz)
{
    if (n >= (1LL << 30))
        snprintf(out, outsz, "%.1f GiB", (double)n / (1 << 30));
    else if (n >= (1 << 20))
        snprintf(out, outsz, "%.1f MiB", (double)n / (1 << 20));
    else if (n >= (1 << 10))
        snprintf(out, outsz, "%.1f KiB", (double)n / (1 << 10));
    else
        snprintf(out, outsz, "%lld B", (long long)n);
}

static void draw(struct pull_view *v, const json_t *job)
{
    const char *st = cli_str(job, "status") ? cli_str(job, "status") : "?";
    int64_t total = json_integer_value(json_object_get(job, "bytes_total"));
    int64_t done = json_integer_value(json_object_get(job, "bytes_done"));
    const json_t *layers = json_object_get(job, "layers");
    int n = (int)json_array_size(layers), ldone = 0;
    for (int i = 0; i < n; i++) {
        const json_t *l = json_array_get(layers, (size_t)i);
        if (json_integer_value(json_object_get(l, "done")) >=
            json_integer_value(json_object_get(l, "size")))
            ldone++;
    }
    char a[32], b[32];
    human(done, a, sizeof a);
    human(total, b, sizeof b);
    if (v->tty) {
        int fill = total > 0 ? (int)(done * BAR_WIDTH / total) : 0;
        char bar[BAR_WIDTH + 1];
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        fprintf(stderr, "\r\033[K%-11s [%s] %s / %s  layers %d/%d", st, bar, a, b, ldone, n);
        v->drawn = true;
    } else if (strcmp(st, v->status) != 0 || ldone != v->layers_done) {
        fprintf(stderr, "%s: %s / %s, layers %d/%d\n", st, a, b, ldone, n);
    }
    snprintf(v->status, sizeof v->status, "%s", st);
    v->layers_done = ldone;
    fflush(stderr);
}

static int on_event(const char *id, const char *event, const char *data, void *arg)
{
    (void)id;
    struct pull_view *v = arg;
    json_t *job = json_loads(data, 0, NULL);
    if (!job) return 0;
    bool end = !strcmp(event, "done") || !strcmp(event, "error");
    if (!v->json) draw(v, job);
    if (end) {
        json_decref(v->final);
        v->final = job;
        v->ok = !strcmp(event, "done");
        return 1;
    }
    json_decref(job);
    return 0;
}

int cmd_sandbox_image_pull(int argc, char **argv)
{
    struct cli_args a; /* pos: "image", "pull", REF */
    struct err err = ERR_INIT;
    const struct cli_opt opts[] = {{NULL, NULL}};
    if (cli_parse(argc, argv, opts, 3, &a, &err) < 0) {
        cli_report_err(&err, cli_wants_json(argc, argv), true);
        return CLI_USAGE;
    }
    if (a.help) {
        usage(stdout);
        return CLI_OK;
    }
    if (a.npos < 3) {
        err_invalid(&err, "ref",
                    "which image? rebuno sandbox image pull REF (e.g. "
                    "debian:bookworm or registry.example:5000/team/tool:1.2)");
        cli_report_err(&err, a.json, true);
        return CLI_USAGE;
    }
    const char *url = a.url;
    if (!url || !*url) url = getenv("REBUNO_SANDBOX_URL");
    if (!url || !*url) url = DEFAULT_URL;
    struct client c;
    client_init_sandbox(&c, url);
    json_t *body = json_pack("{s:s, s:s}", "type", "pull", "ref", a.pos[2]);
    json_t *job = NULL;
    int rc = client_request(&c, "POST", "/v1/images", body, NULL, &job, &err) < 0 ? -1 : 0;
    json_decref(body);
    struct pull_view v = {.tty = isatty(2) == 1, .json = a.json};
    if (rc == 0)
        rc = image_job_follow(&c, job, "/v1/images/jobs", "pull", on_event, &v, &v.final,
                              &err);
    json_decref(job);
    if (v.drawn) fprintf(stderr, "\n");
    int ret = image_job_report(rc, &err, v.final, v.ok, a.json, "pull");
    json_decref(v.final);
    client_fini(&c);
    return ret;
}
