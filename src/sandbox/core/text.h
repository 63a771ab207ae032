/*
 * text.h - bytes to JSON text and back (pure).
 *
 * Command output and file names are bytes; JSON strings must be UTF-8. The API
 * offers both: valid UTF-8 with invalid sequences replaced by U+FFFD (for people
 * and for text), or base64 (for exact bytes).
 */
#ifndef REBUNO_SANDBOX_TEXT_H
#define REBUNO_SANDBOX_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/* A JSON string of p[0..n) with invalid UTF-8 (and NUL) replaced by U+FFFD. */
json_t *sbx_json_text(const char *p, size_t n);
/* Whether p[0..n) is valid UTF-8 without NUL. */
bool sbx_utf8_valid(const char *p, size_t n);
/* Standard base64 with padding, appended to out. */
void sbx_base64_encode(const void *p, size_t n, struct buf *out);
/* Decode standard base64 (padding optional, no whitespace) into out. 0 or -EINVAL/-ENOBUFS. */
int sbx_base64_decode(const char *s, size_t n, struct buf *out);

#endif
