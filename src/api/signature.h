/*
 * signature.h - upstream Rebuno's HMAC-SHA256 signatures with an agent's secret.
 *
 * v1 request signatures (agent -> kernel): Rebuno-Signature: v1=<hex> over the six lines
 * "rebuno-request-v1", METHOD, request target (path and raw query), Rebuno-Timestamp,
 * Rebuno-Dispatch-Id, Rebuno-Dispatch-Attempt (each ended by \n; empty when absent), then
 * the raw body. Webhooks (kernel -> agent): Rebuno-Signature: sha256=<hex> over the body.
 */
#ifndef REBUNO_API_SIGNATURE_H
#define REBUNO_API_SIGNATURE_H

#include <stdbool.h>
#include <stddef.h>

#define SIG_HEX_LEN 65 /* 64 lowercase hex digits and a NUL */

void sig_request_v1(const char *secret, const char *method, const char *target, const char *timestamp,
                    const char *dispatch_id, const char *attempt, const char *body, size_t body_len,
                    char out[SIG_HEX_LEN]);
void sig_body(const char *secret, const char *body, size_t body_len, char out[SIG_HEX_LEN]);
/* Constant-time comparison of two hex signatures. */
bool sig_equal(const char *a, const char *b);

#endif
