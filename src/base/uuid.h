/*
 * uuid.h - UUIDv7 ids (RFC 9562): 48-bit ms timestamp, then random bits, so id
 * order is creation order. Within one millisecond a process-wide counter in the
 * random field keeps ids strictly increasing.
 */
#ifndef REBUNO_BASE_UUID_H
#define REBUNO_BASE_UUID_H

#include <stdbool.h>

#define UUID_STR_LEN 37 /* 36 chars + NUL */

void uuid_v7(char out[UUID_STR_LEN]);
/* True when s is a canonical lowercase/uppercase 8-4-4-4-12 hex UUID. */
bool uuid_valid(const char *s);

#endif
