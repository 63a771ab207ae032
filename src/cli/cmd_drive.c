/*
 * cmd_drive.c - `rebuno drive ...` and the snapshot actions of `rebuno sandbox`.
 *
 *   rebuno drive create NAME [--max-size BYTES] | ls [--name PREFIX] | get NAME
 *                | fork NAME NEW | rm NAME
 *   rebuno sandbox snapshot NAME [--expiration MS] [--name N] | snapshots [NAME] [--name N]
 *                | snapshot-rm ID | fork NAME [NEW]
 *   rebuno sandbox image import PATH | ls | get REF | rm REF | gc
 *
 * Talks to sandboxd (docs/sandbox-api.md "Snapshots and forks", "Drives", "Images") like
 * cmd_sandbox.c: --url, else $REBUNO_SANDBOX_URL, else http://127.0.0.1:8090;
 * readable output, or --json for the API's objects (and for a failure, the error object
 * on one line of stderr: cli_report_err).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "cli/client.h"
#include "cli/commands.h"

#define DEFAULT_URL "http://127.0.0.1:8090"

static void usage_drive(FILE *f)
{
    fprintf(f, "usage: rebuno drive <action> [options]\n\n"
               "actions:\n"
               "  create NAME [--max-size BYTES]  get or create a drive (default 10 GiB)\n"
               "  ls [--name PREFIX]              list drives\n"
               "  get NAME                        show one drive\n"
               "  fork NAME NEW                   a new drive from NAME's committed data\n"
               "  rm NAME                         delete a drive (refused while mounted)\n\n"
               "global options: --url URL (else $REBUNO_SANDBOX_URL, else %s), --json, -h\n",
            DEFAULT_URL);
}

static void usage_snap(FILE *f)
{
    fprintf(f, "usage: rebuno sandbox snapshot NAME [--expiration MS] [--name N]\n"
               "           snapshot it (never stops it); N: the snapshot's own name\n"
               "       rebuno sandbox snapshots [NAME] [--name N]   list snapshots\n"
               "       rebuno sandbox snapshot-rm ID                delete a snapshot\n"
               "       rebuno sandbox fork NAME [NEW]               fork a sandbox\n");
}

static void open_client(struct client *c, const struct cli_args *a)
{
    const char *url = a->url;
    if (!url || !*url) url = getenv("REBUNO_SANDBOX_URL");
    if (!url || !*url) url = DEFAULT_URL;
    client_init_sandbox(c, url);
}

static char *pathf(struct client *c, const char *prefix, const char *ref, const char *suffix)
{
    char *e = client_escape(c, ref);
    struct buf b;
    buf_init(&b, 0);
    buf_printf(&b, "%s%s%s", prefix, e, suffix);
    free(e);
    char *p = strdup(b.data);
    buf_fini(&b);
    return p;
}

static void print_drive(const json_t *v)
{
    cli_put_clean(stdout, cli_str(v, "name"), 64);
    printf("  %s  max %lld MiB  %s", cli_str(v, "id") ? cli_str(v, "id") : "-",
           (long long)(json_integer_value(json_object_get(v, "max_size_bytes")) >> 20),
           json_is_true(json_object_get(v, "initialized")) ? "initialized" : "empty");
    json_t *att = json_object_get(v, "attached_to");
    if (json_is_object(att)) {
        printf("  attached to ");
        cli_put_clean(stdout, cli_str(att, "sandbox_name"), 64);
    }
    if (cli_str(v, "parent_drive_id")) printf("  forked from %s", cli_str(v, "parent_drive_id"));
    printf("\n");
}

static void print_snap(const json_t *v)
{
    printf("%s  ", cli_str(v, "id") ? cli_str(v, "id") : "-");
    cli_put_clean(stdout, cli_str(v, "sandbox_name"), 64);
    printf("  %s  expires %s", cli_str(v, "created_at") ? cli_str(v, "created_at") : "-",
           cli_str(v, "expires_at") ? cli_str(v, "expires_at") : "never");
    if (cli_str(v, "name")) {
        printf("  name ");
        cli_put_clean(stdout, cli_str(v, "name"), 128);
    }
    printf("\n");
}

static int finish(const struct cli_args *a, json_t *out, void (*print)(const json_t *),
                  const char *list_key)
{
    if (a->json) {
        cli_json_pretty(stdout, out, "");
    } else if (list_key) {
        json_t *arr = json_object_get(out, list_key);
        for (size_t i = 0; i < json_array_size(arr); i++)
            print(json_array_get(arr, i));
    } else if (out) {
        print(out);
    }
    json_decref(out);
    return CLI_OK;
}

/* A bad use of the command line, reported like any error (JSON with --json); returns
 * CLI_USAGE. */
__attribute__((format(printf, 2, 3))) static int bad_usage(const struct cli_args *a,
                                                           const char *fmt, ...)
{
    struct err err = ERR_INIT;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_invalid(&err, "", "%s", msg);
    cli_report_err(&err, a->json, true);
    return CLI_USAGE;
}

/* Parse the options; -1 to go on, else the exit code (usage printed, or the error). */
static int parse_args(int argc, char **argv, const struct cli_opt *opts, void (*usage)(FILE *),
                      struct cli_args *a)
{
    struct err err = ERR_INIT;
    if (cli_parse(argc, argv, opts, 3, a, &err) < 0) {
        cli_report_err(&err, cli_wants_json(argc, argv), true);
        return CLI_USAGE;
    }
    if (a->help || a->npos == 0) {
        usage(a->help ? stdout : stderr);
        return a->help ? CLI_OK : CLI_USAGE;
    }
    return -1;
}

int cmd_drive(int argc, char **argv)
{
    const char *max = NULL, *prefix = NULL;
    const struct cli_opt opts[] = {{"max-size", &max}, {"name", &prefix}, {NULL, NULL}};
    struct cli_args a;
    int done = parse_args(argc, argv, opts, usage_drive, &a);
    if (done >= 0) return done;
    struct err err = ERR_INIT;
    const char *act = a.pos[0];
    bool needs_name = strcmp(act, "ls") != 0 && strcmp(act, "list") != 0;
    if (needs_name && a.npos < 2) return bad_usage(&a, "which drive? give its name");
    struct client c;
    open_client(&c, &a);
    json_t *out = NULL;
    int rc = CLI_OK;
    char *path = NULL;
    if (!strcmp(act, "create")) {
        json_t *body = json_pack("{s:s}", "name", a.pos[1]);
        if (max) json_object_set_new(body, "max_size_bytes", json_integer(strtoll(max, NULL, 10)));
        rc = client_request(&c, "POST", "/v1/drives", body, NULL, &out, &err) < 0 ? CLI_FAILED
                                                                                 : CLI_OK;
        json_decref(body);
        if (!rc) rc = finish(&a, out, print_drive, NULL);
    } else if (!strcmp(act, "ls") || !strcmp(act, "list")) {
        struct buf b;
        buf_init(&b, 0);
        buf_printf(&b, "/v1/drives?limit=1000");
        client_query_add(&c, &b, "name", prefix);
        rc = client_request(&c, "GET", b.data, NULL, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        buf_fini(&b);
        if (!rc) rc = finish(&a, out, print_drive, "drives");
    } else if (!strcmp(act, "get")) {
        path = pathf(&c, "/v1/drives/", a.pos[1], "");
        rc = client_request(&c, "GET", path, NULL, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc) rc = finish(&a, out, print_drive, NULL);
    } else if (!strcmp(act, "fork")) {
        if (a.npos < 3) {
            client_fini(&c);
            return bad_usage(&a, "give the new drive's name: rebuno drive fork NAME NEW");
        }
        path = pathf(&c, "/v1/drives/", a.pos[1], "/fork");
        json_t *body = json_pack("{s:s}", "name", a.pos[2]);
        rc = client_request(&c, "POST", path, body, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        json_decref(body);
        if (!rc) rc = finish(&a, out, print_drive, NULL);
    } else if (!strcmp(act, "rm") || !strcmp(act, "delete")) {
        path = pathf(&c, "/v1/drives/", a.pos[1], "");
        rc = client_request(&c, "DELETE", path, NULL, NULL, NULL, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc) {
            cli_put_clean(stdout, a.pos[1], 0);
            printf(" deleted\n");
        }
    } else {
        rc = bad_usage(&a, "unknown action \"%s\"; run 'rebuno drive --help' for usage", act);
    }
    if (rc == CLI_FAILED) cli_report_err(&err, a.json, false);
    free(path);
    client_fini(&c);
    return rc;
}

int cmd_sandbox_snap(int argc, char **argv)
{
    const char *exp = NULL, *name = NULL;
    const struct cli_opt opts[] = {{"expiration", &exp}, {"name", &name}, {NULL, NULL}};
    struct cli_args a;
    int done = parse_args(argc, argv, opts, usage_snap, &a);
    if (done >= 0) return done;
    struct err err = ERR_INIT;
    const char *act = a.pos[0];
    if (strcmp(act, "snapshots") != 0 && a.npos < 2)
        return bad_usage(&a, "which sandbox (or snapshot)? give its name or id");
    struct client c;
    open_client(&c, &a);
    json_t *out = NULL;
    int rc;
    char *path = NULL;
    if (!strcmp(act, "snapshot")) {
        path = pathf(&c, "/v1/sandboxes/", a.pos[1], "/snapshots");
        json_t *body = json_object();
        if (exp) json_object_set_new(body, "expiration_ms", json_integer(strtoll(exp, NULL, 10)));
        if (name) json_object_set_new(body, "name", json_string(name));
        rc = client_request(&c, "POST", path, body, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        json_decref(body);
        if (!rc) rc = finish(&a, out, print_snap, NULL);
    } else if (!strcmp(act, "snapshots")) {
        struct buf b;
        buf_init(&b, 0);
        buf_printf(&b, "/v1/snapshots?limit=1000");
        client_query_add(&c, &b, "sandbox", a.npos > 1 ? a.pos[1] : NULL);
        client_query_add(&c, &b, "name", name);
        rc = client_request(&c, "GET", b.data, NULL, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        buf_fini(&b);
        if (!rc) rc = finish(&a, out, print_snap, "snapshots");
    } else if (!strcmp(act, "snapshot-rm")) {
        path = pathf(&c, "/v1/snapshots/", a.pos[1], "");
        rc = client_request(&c, "DELETE", path, NULL, NULL, NULL, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc) printf("%s deleted\n", a.pos[1]);
    } else { /* fork */
        path = pathf(&c, "/v1/sandboxes/", a.pos[1], "/fork");
        json_t *body = json_object();
        if (a.npos > 2) json_object_set_new(body, "name", json_string(a.pos[2]));
        rc = client_request(&c, "POST", path, body, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        json_decref(body);
        if (!rc && a.json) {
            rc = finish(&a, out, NULL, NULL);
        } else if (!rc) {
            cli_put_clean(stdout, cli_str(out, "name"), 64);
            printf(" %s (forked from ", cli_str(out, "id") ? cli_str(out, "id") : "-");
            cli_put_clean(stdout, a.pos[1], 64);
            printf(")\n");
            json_decref(out);
        }
    }
    if (rc == CLI_FAILED) cli_report_err(&err, a.json, false);
    free(path);
    client_fini(&c);
    return rc;
}

static void usage_image(FILE *f)
{
    fprintf(f,
            "usage: rebuno sandbox image pull REF  from an OCI registry (name[:tag],\n"
            "           host[:port]/path/name:tag, ...@sha256:...), with a progress bar\n"
            "       rebuno sandbox image import PATH [--type T] [--ref NAME:TAG]\n"
            "           an image from this host, cached by digest. T: oci-layout (an OCI image\n"
            "           layout folder, or a tar of one), docker-archive (a `docker save` tar),\n"
            "           dir or tarball (a folder or tarball as one layer). Default: a folder\n"
            "           with an oci-layout file is oci-layout, another folder dir, a file\n"
            "           tarball. --ref tags it (then: --image NAME:TAG).\n"
            "       rebuno sandbox image ls            list imported images (and the default)\n"
            "       rebuno sandbox image get REF       one image (REF: name:tag, name@sha256:...,\n"
            "                                          sha256:..., or host)\n"
            "       rebuno sandbox image rm REF        delete one (refused while a sandbox or a\n"
            "                                          snapshot uses it); its unshared layers go\n"
            "       rebuno sandbox image gc            remove layers no image uses\n"
            "       rebuno sandbox image build -f RECIPE [CONTEXT] [--ref NAME:TAG]\n"
            "                                          from a Dockerfile-like recipe (-h: more)\n"
            "then: rebuno sandbox create NAME --image REF\n");
}

static void print_image(const json_t *v)
{
    const json_t *src = json_object_get(v, "source");
    const json_t *ls = json_object_get(v, "layers");
    printf("%s  %lld KiB  %zu layer%s  %s ",
           cli_str(v, "reference") ? cli_str(v, "reference") : "-",
           (long long)(json_integer_value(json_object_get(v, "size_bytes")) >> 10),
           json_array_size(ls), json_array_size(ls) == 1 ? "" : "s",
           cli_str(src, "type") ? cli_str(src, "type") : "-");
    cli_put_clean(stdout, cli_str(src, "path"), 200);
    printf("\n");
    const json_t *refs = json_object_get(v, "references");
    for (size_t i = 0; i < json_array_size(refs); i++) {
        printf("  tag ");
        cli_put_clean(stdout, json_string_value(json_array_get(refs, i)), 300);
        printf("\n");
    }
}

int cmd_sandbox_image(int argc, char **argv)
{
    const char *type = NULL, *ref = NULL;
    const struct cli_opt opts[] = {{"type", &type}, {"ref", &ref}, {NULL, NULL}};
    struct cli_args a;
    int done = parse_args(argc, argv, opts, usage_image, &a);
    if (done >= 0) return done;
    struct err err = ERR_INIT;
    /* "image ACTION ...", and the older "images" / "image-rm REF" */
    const char *act = !strcmp(a.pos[0], "images")     ? "ls"
                      : !strcmp(a.pos[0], "image-rm") ? "rm"
                      : a.npos > 1                    ? a.pos[1]
                                                      : "";
    int argi = !strcmp(a.pos[0], "image") ? 2 : 1; /* first operand */
    bool import = !strcmp(act, "import");
    if (import && a.npos <= argi)
        return bad_usage(&a, "rebuno sandbox image import PATH: give a host folder or tarball");
    if ((!strcmp(act, "rm") || !strcmp(act, "get")) && a.npos <= argi)
        return bad_usage(&a, "which image? give its reference or digest (rebuno sandbox image "
                             "ls lists them)");
    if (!import && strcmp(act, "ls") && strcmp(act, "rm") && strcmp(act, "get") &&
        strcmp(act, "gc"))
        return bad_usage(&a, "rebuno sandbox image: import, ls, get, rm or gc (see -h)");
    /* the daemon reads the path itself: make it absolute, and say what it is */
    char abs[PATH_MAX];
    if (import) {
        struct stat st;
        if (!realpath(a.pos[argi], abs) || stat(abs, &st) < 0) {
            err_set(&err, 0, "local_file", "", "cannot use %s: %s", a.pos[argi], strerror(errno));
            cli_report_err(&err, a.json, true);
            return CLI_FAILED;
        }
        if (!type) {
            char lay[PATH_MAX + 16];
            snprintf(lay, sizeof lay, "%s/oci-layout", abs);
            type = S_ISDIR(st.st_mode) ? (access(lay, F_OK) == 0 ? "oci-layout" : "dir")
                                       : "tarball";
        }
    }
    struct client c;
    open_client(&c, &a);
    json_t *out = NULL;
    int rc;
    char *path = NULL;
    if (import) {
        json_t *body = json_pack("{s:s, s:s}", "type", type, "path", abs);
        if (ref) json_object_set_new(body, "ref", json_string(ref));
        rc = client_request(&c, "POST", "/v1/images", body, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        json_decref(body);
        if (!rc) rc = finish(&a, out, print_image, NULL);
    } else if (!strcmp(act, "ls")) {
        rc = client_request(&c, "GET", "/v1/images", NULL, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc && !a.json) {
            printf("default: ");
            cli_put_clean(stdout, cli_str(out, "default") ? cli_str(out, "default") : "host", 300);
            printf("\n");
        }
        if (!rc) rc = finish(&a, out, print_image, "images");
    } else if (!strcmp(act, "get")) {
        path = pathf(&c, "/v1/images/", a.pos[argi], "");
        rc = client_request(&c, "GET", path, NULL, NULL, &out, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc) rc = finish(&a, out, print_image, NULL);
    } else if (!strcmp(act, "gc")) {
        json_t *body = json_object();
        rc = client_request(&c, "POST", "/v1/images/gc", body, NULL, &out, &err) < 0 ? CLI_FAILED
                                                                                   : CLI_OK;
        json_decref(body);
        if (!rc && !a.json)
            printf("%zu layer(s) removed\n", json_array_size(json_object_get(out, "removed_layers")));
        if (!rc && a.json) rc = finish(&a, out, NULL, NULL);
        else json_decref(out);
    } else {
        path = pathf(&c, "/v1/images/", a.pos[argi], "");
        rc = client_request(&c, "DELETE", path, NULL, NULL, NULL, &err) < 0 ? CLI_FAILED : CLI_OK;
        if (!rc) {
            cli_put_clean(stdout, a.pos[argi], 300);
            printf(" deleted\n");
        }
    }
    if (rc == CLI_FAILED) cli_report_err(&err, a.json, false);
    free(path);
    client_fini(&c);
    return rc;
}
