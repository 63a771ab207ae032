/*
 * image_job.c - following an image job's stream and printing its outcome, for
 * cmd_image_build.c and cmd_image_pull.c (see image_job.h).
 */
#include "cli/image_job.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/buf.h"

int image_job_follow(struct client *c, const json_t *job, const char *prefix, const char *what,
                     client_event_fn on_event, void *arg, json_t *const *final, struct err *err)
{
    const char *jid = cli_str(job, "id");
    char *e = client_escape(c, jid ? jid : "");
    struct buf p;
    buf_init(&p, 0);
    buf_printf(&p, "%s/%s/stream", prefix, e);
    free(e);
    int sr = client_stream(c, p.data, NULL, on_event, arg, err);
    buf_fini(&p);
    if (sr < 0) return -1;
    if (!*final)
        return err_set(err, 502, "stream_ended", "",
                       "the %s's stream ended without an outcome; see GET %s/%s", what, prefix,
                       jid ? jid : "?");
    return 0;
}

int image_job_report(int rc, struct err *err, const json_t *final, bool ok, bool json,
                     const char *what)
{
    if (rc < 0) {
        cli_report_err(err, json, false);
        return CLI_FAILED;
    }
    if (!ok) {
        const json_t *e = json_object_get(final, "error");
        char code[32], msg[64];
        snprintf(code, sizeof code, "%s_failed", what);
        snprintf(msg, sizeof msg, "the %s failed", what);
        err_set(err, (int)json_integer_value(json_object_get(e, "status")),
                cli_str(e, "code") ? cli_str(e, "code") : code,
                cli_str(e, "field") ? cli_str(e, "field") : "", "%s",
                cli_str(e, "message") ? cli_str(e, "message") : msg);
        cli_report_err(err, json, false);
        return CLI_FAILED;
    }
    if (json) {
        cli_json_line(stdout, final);
    } else {
        const json_t *img = json_object_get(final, "image");
        printf("%s\n", cli_str(img, "digest") ? cli_str(img, "digest") : "-");
    }
    return CLI_OK;
}
