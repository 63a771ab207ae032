/*
 * jtext.h - compact JSON text of a jansson value, fast.
 *
 * jtext_dump(v) returns exactly what json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)
 * returns (keys in insertion order, the same string escapes and number formats), at a
 * fraction of its cost: jansson 2.14 formats every object's address with snprintf
 * and files it in a hash table to detect cycles, and writes through a callback per
 * token. Values jtext does not handle itself (a string that is not valid UTF-8)
 * go to json_dumps, so the result is always jansson's.
 */
#ifndef REBUNO_BASE_JTEXT_H
#define REBUNO_BASE_JTEXT_H

#include <jansson.h>
#include <stddef.h>

/* Caller frees. NULL where json_dumps would return NULL. len (may be NULL) gets strlen. */
char *jtext_dump(const json_t *v, size_t *len);

#endif
