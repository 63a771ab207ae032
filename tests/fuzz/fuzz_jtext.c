/* fuzz_jtext.c - libFuzzer target: jtext_dump against jansson's own json_dumps.
 * Invariant: for any JSON value jansson parses (numbers, escapes, invalid and
 * non-BMP UTF-8 in strings, deep nesting), jtext_dump writes exactly the bytes
 * json_dumps(JSON_COMPACT | JSON_ENCODE_ANY) writes. The event log and every reply
 * are written by jtext, so a difference would change stored and served JSON. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/jtext.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!v) return 0;
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = 0;
    char *got = jtext_dump(v, &len);
    if (!want != !got) abort();
    if (want && (strcmp(want, got) != 0 || len != strlen(want))) abort();
    free(want);
    free(got);
    json_decref(v);
    return 0;
}
