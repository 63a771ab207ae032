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

/*
 * A flat object's text written member by member, for payloads of a fixed shape:
 * the bytes jtext_dump writes for the object json_pack builds from the same
 * members in the same order (e.g. "{s:s, s:I, s:O}"), without building it. Where
 * json_pack would fail (a NULL or invalid UTF-8 string, a NULL raw value) the
 * object is marked failed and jtext_obj_end returns NULL, as the json_pack + dump
 * pair would. Keys are the caller's constants (valid, escape-free).
 */
struct jtext_obj {
    char *p;
    size_t len, cap;
    int failed;
};

void jtext_obj_init(struct jtext_obj *o);
void jtext_obj_str(struct jtext_obj *o, const char *key, const char *val);
void jtext_obj_int(struct jtext_obj *o, const char *key, json_int_t val);
/* val: the text of a JSON value as jtext_dump wrote it (copied as is). */
void jtext_obj_raw(struct jtext_obj *o, const char *key, const char *val);
/* The object's text (caller frees), or NULL if a member failed; o is emptied. */
char *jtext_obj_end(struct jtext_obj *o);

#endif
