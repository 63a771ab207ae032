/*
 * image_job.h - what `rebuno sandbox image build` and `... image pull` share: follow an
 * image job's SSE stream to its outcome, then print that outcome (the digest on stdout,
 * the final job with --json, or the job's error).
 */
#ifndef REBUNO_CLI_IMAGE_JOB_H
#define REBUNO_CLI_IMAGE_JOB_H

#include <jansson.h>
#include <stdbool.h>

#include "base/err.h"
#include "cli/client.h"

/* Follows GET <prefix>/<job's id>/stream with on_event until it stops; *final is where
 * on_event keeps the last ("done" or "error") job. what names the job in errors
 * ("build", "pull"). 0, or -1 with err filled (also when the stream ended with no
 * outcome). */
int image_job_follow(struct client *c, const json_t *job, const char *prefix, const char *what,
                     client_event_fn on_event, void *arg, json_t *const *final, struct err *err);

/* Prints the outcome: rc < 0 -> err; !ok -> the final job's error (code <what>_failed
 * when it names none); else the digest, or the final job as one line with json.
 * CLI_OK or CLI_FAILED. */
int image_job_report(int rc, struct err *err, const json_t *final, bool ok, bool json,
                     const char *what);

#endif
