/*
 * judge.h - upstream's judge policy rules on an OpenAI-compatible chat model: the
 * question sent for a step and the verdict read from the answer.
 *
 * The model is asked, as upstream's judge is, whether the tool call should run
 * unattended (allow), be blocked (deny) or wait for a person (require_approval), and
 * answers with a probability for each as JSON. The most likely choice stands when it
 * reaches the rule's threshold; below it, or when the model cannot be reached or gives
 * no usable answer, the rule's fallback applies. The reason names which.
 */
#ifndef REBUNO_API_JUDGE_H
#define REBUNO_API_JUDGE_H

#include <stddef.h>

#include "kernel/kernel.h"

/* The chat completions request body for q (caller frees; *len its length). */
char *judge_request_body(const char *model, const struct kernel_judge_request *q, size_t *len);
/* The decision from the model's reply (status 0 / why: it could not be reached). */
enum policy_decision judge_verdict(const struct kernel_judge_request *q, long status, const char *why,
                                   const char *reply, char *reason, size_t n);

#endif
