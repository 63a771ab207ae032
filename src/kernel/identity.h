/*
 * identity.h - step identity: canonical JSON, args hashes and step ids.
 *
 * A step is identified by sha256 over (execution id, kind, target, args hash,
 * occurrence), and the args hash is sha256 over the canonical JSON of the args.
 * Both must be byte-exact with the upstream Go kernel (internal/identity), whose
 * canonical form is: decode the first JSON value with UseNumber, re-emit with no
 * whitespace, object keys sorted bytewise (last duplicate wins), number literals
 * unchanged, strings escaped by encoding/json's Marshal rules. See identity.c for
 * the exact string rules and where we are deliberately stricter than Go.
 */
#ifndef REBUNO_KERNEL_IDENTITY_H
#define REBUNO_KERNEL_IDENTITY_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

/* Deepest array/object nesting accepted (Go allows 10000; we cap the recursion). */
#define IDENTITY_MAX_DEPTH 128

/* Canonical JSON of the first JSON value in text (Go-compatible, see identity.c).
 * Empty input (len 0 or only whitespace) => "null".
 * Appends to out (out has a cap; -1 with err 413 payload_too_large if exceeded).
 * Invalid JSON => -1, err 400 validation_error field "args" with a message naming
 * the byte offset. Max nesting depth IDENTITY_MAX_DEPTH (deeper => 400).
 * On failure out is left exactly as it was. */
int identity_canonical_json(const char *text, size_t len, struct buf *out, struct err *err);

/* Locate top-level object member `key` in JSON text: 1 found (*val,*vlen = exact
 * raw value span, no surrounding whitespace), 0 absent (*val = NULL, *vlen = 0),
 * -1 invalid JSON / not an object (err filled, field = key when the error is
 * inside that member's value, else "body"). The whole text is validated as one
 * JSON object. Keys are compared after decoding escapes; when a key repeats, the
 * last occurrence wins (as Go's decoder does). */
int identity_find_member(const char *text, size_t len, const char *key, const char **val,
                         size_t *vlen, struct err *err);

/* Lowercase hex SHA-256. */
void identity_sha256_hex(const void *p, size_t n, char out[65]);

/* step_id = sha256 hex of len-prefixed fields: for each of exec_id, kind, target,
 * args_hash, decimal occurrence: "<byte length>:<field>" concatenated. */
void identity_step_id(const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, long long occurrence, char out[65]);

/* Convenience: canonicalize args then hash (args_hash). */
int identity_args_hash(const char *text, size_t len, char out[65], struct err *err);

#endif
