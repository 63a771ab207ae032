/*
 * test_identity.c - unit tests for src/kernel/identity.c (canonical JSON, args
 * hashes, step ids, top-level member lookup).
 *
 * The 12 upstream vectors (tests/unit/data/identity_vectors.json, read relative
 * to the repo root) are checked byte-exact; the raw "args" text is cut out of the
 * file itself so numbers like 1000000000000000000000000000000 and 1.0 reach the
 * canonicalizer exactly as written. The other cases cover what the vectors do
 * not (spec §4.4 gaps); their expected outputs are what Go's
 * Decoder(UseNumber)+Marshal produces, reasoned from encoding/json's unquote and
 * encodeString and stated literally here.
 */
#include "base/buf.h"
#include "base/err.h"
#include "kernel/identity.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VECTORS_PATH "tests/unit/data/identity_vectors.json"

/* Canonicalize in[0..len) into a fresh unbounded buffer; NULL on error. */
static char *canon_n(const char *in, size_t len, struct err *e)
{
    struct buf b;
    buf_init(&b, 0);
    err_clear(e);
    if (identity_canonical_json(in, len, &b, e) < 0) {
        cr_assert_eq(b.len, 0, "output must be untouched on error");
        buf_fini(&b);
        return NULL;
    }
    return buf_steal(&b, NULL);
}

static void expect_canon_n(const char *in, size_t len, const char *want)
{
    struct err e = ERR_INIT;
    char *got = canon_n(in, len, &e);
    cr_assert_not_null(got, "canonicalizing <%s> failed: %s", in, e.msg);
    cr_assert_str_eq(got, want, "canonical of <%s>: got <%s> want <%s>", in, got, want);
    free(got);
}

static void expect_canon(const char *in, const char *want)
{
    expect_canon_n(in, strlen(in), want);
}

/* in must be rejected with 400/validation_error/field args; if offset_text is
 * given the message must contain it (e.g. "byte offset 6"). */
static void expect_invalid_n(const char *in, size_t len, const char *offset_text)
{
    struct err e = ERR_INIT;
    char *got = canon_n(in, len, &e);
    cr_assert_null(got, "<%s> should be rejected, got <%s>", in, got ? got : "");
    cr_assert_eq(e.status, 400, "<%s>: status %d", in, e.status);
    cr_assert_str_eq(e.code, "validation_error");
    cr_assert_str_eq(e.field, "args");
    cr_assert(strstr(e.msg, "byte offset") != NULL, "<%s>: message lacks offset: %s", in, e.msg);
    if (offset_text)
        cr_assert(strstr(e.msg, offset_text) != NULL, "<%s>: want '%s' in: %s", in, offset_text,
                  e.msg);
}

static void expect_invalid(const char *in, const char *offset_text)
{
    expect_invalid_n(in, strlen(in), offset_text);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s (run tests from the repo root)", path);
    struct buf b;
    buf_init(&b, 0);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    return buf_steal(&b, len);
}

/* End of the raw JSON value starting at s[i]; a deliberately naive scanner
 * (independent of the code under test) that is enough for the vector file. */
static size_t raw_value_end(const char *s, size_t len, size_t i)
{
    int depth = 0;
    bool in_str = false;
    for (; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"') {
                in_str = false;
                if (depth == 0) return i + 1;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) return i;
            if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',' || c == '\n')) {
            return i;
        }
    }
    return i;
}

Test(identity, upstream_vectors)
{
    size_t len;
    char *text = read_file(VECTORS_PATH, &len);
    json_error_t jerr;
    /* INT_AS_REAL: the big int vector would overflow json_int_t otherwise. */
    json_t *root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &jerr);
    cr_assert_not_null(root, "vector file: %s", jerr.text);
    cr_assert(json_is_array(root));
    cr_assert_eq(json_array_size(root), 12);

    const char *cursor = text;
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *v = json_array_get(root, i);
        const char *exec_id = json_string_value(json_object_get(v, "execution_id"));
        const char *kind = json_string_value(json_object_get(v, "kind"));
        const char *target = json_string_value(json_object_get(v, "target"));
        const char *want_canon = json_string_value(json_object_get(v, "canonical"));
        const char *want_hash = json_string_value(json_object_get(v, "args_hash"));
        const char *want_step = json_string_value(json_object_get(v, "step_id"));
        long long occ = (long long)json_number_value(json_object_get(v, "occurrence"));
        cr_assert(exec_id && kind && target && want_canon && want_hash && want_step);

        /* The raw, pretty-printed args text of this vector (not "args_hash"). */
        const char *at = strstr(cursor, "\"args\": ");
        cr_assert_not_null(at, "vector %zu: no raw args", i);
        size_t start = (size_t)(at - text) + strlen("\"args\": ");
        size_t end = raw_value_end(text, len, start);
        cursor = text + end;

        struct err e = ERR_INIT;
        struct buf b;
        buf_init(&b, 1 << 20);
        cr_assert_eq(identity_canonical_json(text + start, end - start, &b, &e), 0,
                     "vector %zu: %s", i, e.msg);
        cr_assert_str_eq(b.data, want_canon, "vector %zu canonical", i);

        char hash[65], hash2[65], step[65];
        identity_sha256_hex(b.data, b.len, hash);
        cr_assert_str_eq(hash, want_hash, "vector %zu args_hash", i);
        cr_assert_eq(identity_args_hash(text + start, end - start, hash2, &e), 0);
        cr_assert_str_eq(hash2, want_hash, "vector %zu identity_args_hash", i);
        identity_step_id(exec_id, kind, target, hash, occ, step);
        cr_assert_str_eq(step, want_step, "vector %zu step_id", i);

        /* The canonical form is a fixed point. */
        buf_reset(&b);
        cr_assert_eq(identity_canonical_json(want_canon, strlen(want_canon), &b, &e), 0);
        cr_assert_str_eq(b.data, want_canon);
        buf_fini(&b);
    }
    json_decref(root);
    free(text);
}

Test(identity, first_vector_literal)
{
    char hash[65], step[65];
    struct err e = ERR_INIT;
    cr_assert_eq(identity_args_hash("{\"greeting\":\"world\"}", 20, hash, &e), 0);
    cr_assert_str_eq(hash, "5c0a68e873cfe9b31497be84c0f8f082bfbcad4409171ac8b0044e1ba3ab34bc");
    identity_step_id("0192f1a0-0000-7000-8000-000000000000", "tool_call", "tool_0", hash, 0, step);
    cr_assert_str_eq(step, "1599d345ba8c140e6c6ae015035dbb95b348b98f8892c2f65c060b2d2e16deb5");
}

Test(identity, sha256_known_answers)
{
    char h[65];
    identity_sha256_hex("", 0, h);
    cr_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    identity_sha256_hex(NULL, 0, h);
    cr_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    identity_sha256_hex("abc", 3, h);
    cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(identity, step_id_preimage)
{
    /* Spec §4.2 example preimage, built by hand. */
    const char *ah = "5c0a68e873cfe9b31497be84c0f8f082bfbcad4409171ac8b0044e1ba3ab34bc";
    char pre[256], want[65], got[65];
    snprintf(pre, sizeof pre, "36:0192f1a0-0000-7000-8000-0000000000009:tool_call6:tool_064:%s1:0",
             ah);
    identity_sha256_hex(pre, strlen(pre), want);
    identity_step_id("0192f1a0-0000-7000-8000-000000000000", "tool_call", "tool_0", ah, 0, got);
    cr_assert_str_eq(got, want);

    /* Multi-digit and negative occurrences are plain decimal (strconv.Itoa). */
    snprintf(pre, sizeof pre, "1:e1:k1:t1:h2:12");
    identity_sha256_hex(pre, strlen(pre), want);
    identity_step_id("e", "k", "t", "h", 12, got);
    cr_assert_str_eq(got, want);
    snprintf(pre, sizeof pre, "1:e1:k1:t1:h2:-1");
    identity_sha256_hex(pre, strlen(pre), want);
    identity_step_id("e", "k", "t", "h", -1, got);
    cr_assert_str_eq(got, want);

    /* Empty fields still get their "0:" prefix. */
    snprintf(pre, sizeof pre, "0:0:0:0:1:0");
    identity_sha256_hex(pre, strlen(pre), want);
    identity_step_id("", "", "", "", 0, got);
    cr_assert_str_eq(got, want);
}

Test(identity, step_id_long_target)
{
    /* Longer than the internal stack buffer: exercises the heap path. */
    char target[2001];
    memset(target, 'x', 2000);
    target[2000] = '\0';
    struct buf pre;
    buf_init(&pre, 0);
    buf_printf(&pre, "1:e1:k2000:%s1:h1:3", target);
    char want[65], got[65];
    identity_sha256_hex(pre.data, pre.len, want);
    identity_step_id("e", "k", target, "h", 3, got);
    cr_assert_str_eq(got, want);
    buf_fini(&pre);
}

Test(identity, short_escapes_b_f)
{
    /* Go >= 1.22 Marshal writes \b and \f in short form. */
    expect_canon("\"a\\bb\\fc\"", "\"a\\bb\\fc\"");
    expect_canon("\"\\u0008\\u000C\"", "\"\\b\\f\"");
    expect_canon("\"\\n\\r\\t\\\"\\\\\"", "\"\\n\\r\\t\\\"\\\\\"");
}

Test(identity, other_control_chars)
{
    expect_canon("\"\\u0001\"", "\"\\u0001\"");
    expect_canon("\"\\u0000\"", "\"\\u0000\"");
    expect_canon("\"\\u001F\\u000b\"", "\"\\u001f\\u000b\""); /* lowercase hex */
    /* DEL and '/' are written raw; "\/" decodes to '/'. */
    expect_canon("\"\\/\x7f\\u007f/\"", "\"/\x7f\x7f/\"");
}

Test(identity, html_chars)
{
    expect_canon("\"<a>&</a>\"", "\"\\u003ca\\u003e\\u0026\\u003c/a\\u003e\"");
    expect_canon("\"\\u003C\\u003E\\u0026\"", "\"\\u003c\\u003e\\u0026\"");
}

Test(identity, line_separators)
{
    /* U+2028 / U+2029, raw or escaped, come out escaped; U+2027 stays raw. */
    expect_canon("\"\xe2\x80\xa8\"", "\"\\u2028\"");
    expect_canon("\"a\xe2\x80\xa9z\"", "\"a\\u2029z\"");
    expect_canon("\"\\u2028\\u2029\"", "\"\\u2028\\u2029\"");
    expect_canon("\"\xe2\x80\xa7\"", "\"\xe2\x80\xa7\"");
}

Test(identity, unicode_escapes_decoded)
{
    expect_canon("\"caf\\u00e9\"", "\"caf\xc3\xa9\"");
    expect_canon("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"");
    expect_canon("\"\\uD83D\\uDE00\"", "\"\xf0\x9f\x98\x80\"");
    expect_canon("\"\\u65e5\"", "\"\xe6\x97\xa5\"");
}

Test(identity, lone_surrogates)
{
    /* Go's unquote turns an unpaired surrogate escape into U+FFFD, which Marshal
     * then writes raw; an escape that did not pair is decoded on its own. */
    expect_canon("\"\\ud800\"", "\"\xef\xbf\xbd\"");
    expect_canon("\"\\udc00x\"", "\"\xef\xbf\xbdx\"");
    expect_canon("\"\\ud800\\ud83d\\ude00\"", "\"\xef\xbf\xbd\xf0\x9f\x98\x80\"");
    expect_canon("\"\\ud800\\u007a\"", "\"\xef\xbf\xbdz\"");
    expect_canon("\"\\ud800\\n\"", "\"\xef\xbf\xbd\\n\"");
    expect_canon("\"\\ude00\\ud83d\"", "\"\xef\xbf\xbd\xef\xbf\xbd\"");
}

Test(identity, invalid_utf8)
{
    /* Each invalid byte becomes U+FFFD at decode time (utf8.DecodeRune returns
     * (RuneError, 1)); Marshal then sees a valid U+FFFD and writes it raw
     * (EF BF BD), not as the escape \ufffd. */
    expect_canon("\"a\xffz\"", "\"a\xef\xbf\xbdz\"");
    expect_canon("\"\x80\"", "\"\xef\xbf\xbd\"");
    expect_canon("\"\xe6\x97\"", "\"\xef\xbf\xbd\xef\xbf\xbd\"");                 /* truncated */
    expect_canon("\"\xc0\xaf\"", "\"\xef\xbf\xbd\xef\xbf\xbd\"");                 /* overlong */
    expect_canon("\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
    expect_canon("\"\xf4\x90\x80\x80\"",
                 "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* > U+10FFFF */
    expect_canon("\"\xe6\x97<\"", "\"\xef\xbf\xbd\xef\xbf\xbd\\u003c\"");
    /* Well-formed edge sequences stay raw, including a literal U+FFFD. */
    expect_canon("\"\xf0\x9f\x98\x80\xef\xbf\xbd\xf4\x8f\xbf\xbf\xc2\x80\"",
                 "\"\xf0\x9f\x98\x80\xef\xbf\xbd\xf4\x8f\xbf\xbf\xc2\x80\"");
    /* Keys are sorted after coercion: \xff becomes EF BF BD, which sorts before
     * F0 9F 98 80; and two different invalid bytes collide (last wins). */
    expect_canon("{\"\xf0\x9f\x98\x80\":1,\"\xff\":2}",
                 "{\"\xef\xbf\xbd\":2,\"\xf0\x9f\x98\x80\":1}");
    expect_canon("{\"\xff\":1,\"\xfe\":2}", "{\"\xef\xbf\xbd\":2}");
}

Test(identity, duplicate_keys_last_wins)
{
    expect_canon("{\"a\":1,\"b\":2,\"a\":3}", "{\"a\":3,\"b\":2}");
    expect_canon("{\"a\":1,\"a\":2}", "{\"a\":2}");
    expect_canon("{\"a\":1,\"b\":2,\"b\":3,\"c\":4}", "{\"a\":1,\"b\":3,\"c\":4}");
    expect_canon("{\"a\":1,\"\\u0061\":2}", "{\"a\":2}"); /* same key once decoded */
    expect_canon("{\"b\":{\"x\":1},\"a\":0,\"b\":[2]}", "{\"a\":0,\"b\":[2]}");
    expect_canon("{\"k\":{\"z\":1,\"z\":{\"q\":2,\"p\":1}}}", "{\"k\":{\"z\":{\"p\":1,\"q\":2}}}");
    expect_canon("{\"\":1,\"\":2}", "{\"\":2}");
}

Test(identity, numbers_preserved)
{
    expect_canon("[1E+10,-0,0.5e-3,1.0,1e3,-1.5E-7,0,1e-0,-0.0,10E5]",
                 "[1E+10,-0,0.5e-3,1.0,1e3,-1.5E-7,0,1e-0,-0.0,10E5]");
    expect_canon("{\"n\":123456789012345678901234567890123456789}",
                 "{\"n\":123456789012345678901234567890123456789}");
    expect_canon("-12345678901234567890.000000000000000000001e-999",
                 "-12345678901234567890.000000000000000000001e-999");
}

Test(identity, literals_and_scalars)
{
    expect_canon("[true,false,null]", "[true,false,null]");
    expect_canon("true", "true");
    expect_canon("\"\"", "\"\"");
    expect_canon("[]", "[]");
    expect_canon("{}", "{}");
    expect_canon("[[],{},[{}]]", "[[],{},[{}]]");
}

Test(identity, nested_sorting)
{
    expect_canon("{\"z\":{\"y\":1,\"x\":[{\"b\":1,\"a\":2}]},\"a\":[3,{\"d\":0,\"c\":0}]}",
                 "{\"a\":[3,{\"c\":0,\"d\":0}],\"z\":{\"x\":[{\"a\":2,\"b\":1}],\"y\":1}}");
}

Test(identity, bytewise_key_order)
{
    /* memcmp order, shorter prefix first, UTF-8 bytes compare above ASCII. */
    expect_canon("{\"b\":1,\"B\":2,\"a\":3,\"\xc3\xa9\":4,\"ab\":5,\"\":6}",
                 "{\"\":6,\"B\":2,\"a\":3,\"ab\":5,\"b\":1,\"\xc3\xa9\":4}");
}

Test(identity, escaped_keys_sorted_after_decoding)
{
    /* Decoded '<' (0x3c) sorts between ';' and '='; its escaped form \u003c
     * (starting with 0x5c) would sort last. */
    expect_canon("{\"\\u003c\":1,\"=\":2,\";\":3}", "{\";\":3,\"\\u003c\":1,\"=\":2}");
    expect_canon("{\"\\u00e9\":1,\"z\":2}", "{\"z\":2,\"\xc3\xa9\":1}");
    /* '\n' (0x0a) sorts before ' ' (0x20) although "\n" starts with 0x5c. */
    expect_canon("{\" \":2,\"\\n\":1}", "{\"\\n\":1,\" \":2}");
}

Test(identity, whitespace_and_empty)
{
    expect_canon("", "null");
    expect_canon_n(NULL, 0, "null");
    expect_canon(" \t\r\n ", "null");
    expect_canon(" \t\r\n {  \"a\" :\n[ 1 , 2 ] ,\"b\" : { } } \n", "{\"a\":[1,2],\"b\":{}}");
    expect_canon("  42  ", "42");
}

static char *nested(const char *open, const char *mid, const char *close, int depth)
{
    struct buf b;
    buf_init(&b, 0);
    for (int i = 0; i < depth; i++)
        buf_puts(&b, open);
    buf_puts(&b, mid);
    for (int i = 0; i < depth; i++)
        buf_puts(&b, close);
    return buf_steal(&b, NULL);
}

Test(identity, depth_limit)
{
    char *ok = nested("[", "", "]", IDENTITY_MAX_DEPTH);
    expect_canon(ok, ok);
    free(ok);
    char *ok_obj = nested("{\"a\":", "1", "}", IDENTITY_MAX_DEPTH);
    expect_canon(ok_obj, ok_obj);
    free(ok_obj);
    char *deep = nested("[", "", "]", IDENTITY_MAX_DEPTH + 1);
    expect_invalid(deep, "byte offset 128");
    struct err e = ERR_INIT;
    cr_assert_null(canon_n(deep, strlen(deep), &e));
    cr_assert(strstr(e.msg, "nesting deeper than 128") != NULL, "%s", e.msg);
    free(deep);
    /* Far deeper input fails the same way without deep recursion. */
    char *very = nested("[", "", "]", 100000);
    expect_invalid(very, NULL);
    free(very);
}

Test(identity, deep_reordering)
{
    /* Every level is out of order, so every level is rebuilt. */
    struct buf in, want;
    buf_init(&in, 0);
    buf_init(&want, 0);
    for (int i = 0; i < IDENTITY_MAX_DEPTH; i++)
        buf_puts(&in, "{\"b\":");
    buf_puts(&in, "\"<leaf>\"");
    for (int i = 0; i < IDENTITY_MAX_DEPTH; i++)
        buf_printf(&in, ",\"a\":%d}", i);
    for (int i = 0; i < IDENTITY_MAX_DEPTH; i++)
        buf_printf(&want, "{\"a\":%d,\"b\":", IDENTITY_MAX_DEPTH - 1 - i);
    buf_puts(&want, "\"\\u003cleaf\\u003e\"");
    for (int i = 0; i < IDENTITY_MAX_DEPTH; i++)
        buf_puts(&want, "}");
    expect_canon(in.data, want.data);
    buf_fini(&in);
    buf_fini(&want);
}

Test(identity, many_keys_reverse_order)
{
    struct buf in, want;
    buf_init(&in, 0);
    buf_init(&want, 0);
    buf_puts(&in, "{");
    for (int i = 19999; i >= 0; i--)
        buf_printf(&in, "%s\"k%05d\": [%d]", i == 19999 ? "" : ", ", i, i);
    buf_puts(&in, "}");
    buf_puts(&want, "{");
    for (int i = 0; i < 20000; i++)
        buf_printf(&want, "%s\"k%05d\":[%d]", i ? "," : "", i, i);
    buf_puts(&want, "}");
    expect_canon(in.data, want.data);
    buf_fini(&in);
    buf_fini(&want);
}

Test(identity, invalid_json_rejected)
{
    expect_invalid("{\"a\":1,}", "byte offset 7"); /* trailing comma in object */
    expect_invalid("[1,]", "byte offset 3");       /* trailing comma in array */
    expect_invalid("01", "byte offset 1");         /* leading zero */
    expect_invalid("{\"a\":01}", "byte offset 6");
    expect_invalid("[-01]", "byte offset 3");
    expect_invalid("+1", "byte offset 0");
    expect_invalid("\"abc", "byte offset 4"); /* unterminated string */
    expect_invalid("\"a\x01"
                   "b\"",
                   "byte offset 2");                /* raw control char */
    expect_invalid("\"a\tb\"", "byte offset 2");    /* raw tab too */
    expect_invalid("{\"a\":1} x", "byte offset 8"); /* trailing garbage (stricter than Go) */
    expect_invalid("1 2", "byte offset 2");
    expect_invalid("{}{}", "byte offset 2");
    expect_invalid(".5", "byte offset 0");
    expect_invalid("1.", "byte offset 2");
    expect_invalid("1.e5", "byte offset 2");
    expect_invalid("1e", "byte offset 2");
    expect_invalid("1e+", "byte offset 3");
    expect_invalid("-", "byte offset 1");
    expect_invalid("-a", "byte offset 1");
    expect_invalid("tru", "byte offset 3");
    expect_invalid("nul1", "byte offset 3");
    expect_invalid("True", "byte offset 0");
    expect_invalid("NaN", "byte offset 0");
    expect_invalid("Infinity", "byte offset 0");
    expect_invalid("'a'", "byte offset 0");
    expect_invalid("{a:1}", "byte offset 1");
    expect_invalid("{\"a\" 1}", "byte offset 5");
    expect_invalid("{\"a\":1 \"b\":2}", "byte offset 7");
    expect_invalid("[1 2]", "byte offset 3");
    expect_invalid("{\"a\":}", "byte offset 5");
    expect_invalid("[", "byte offset 1");
    expect_invalid("{", "byte offset 1");
    expect_invalid("{\"a\"", "byte offset 4");
    expect_invalid("]", "byte offset 0");
    expect_invalid("\"\\x\"", "byte offset 2");     /* unknown escape */
    expect_invalid("\"\\u12G4\"", "byte offset 5"); /* bad hex digit */
    expect_invalid("\"\\u12", "byte offset 5");     /* input ends inside \u */
    expect_invalid("\"\\", "byte offset 2");
    expect_invalid("\xef\xbb\xbf{}", "byte offset 0"); /* BOM, as Go */
    expect_invalid_n("[1,\0]", 5, "byte offset 3");    /* NUL byte */
}

Test(identity, invalid_message_is_clear)
{
    struct err e = ERR_INIT;
    cr_assert_null(canon_n("{\"a\":01}", 8, &e));
    cr_assert_str_eq(e.msg, "args is not valid JSON: invalid character '1' after object "
                            "key:value pair at byte offset 6");
    cr_assert_null(canon_n("[1,", 3, &e));
    cr_assert_str_eq(e.msg,
                     "args is not valid JSON: unexpected end of JSON input at byte offset 3");
}

Test(identity, output_cap_and_append)
{
    struct buf b;
    struct err e = ERR_INIT;
    buf_init(&b, 14); /* exactly enough */
    buf_puts(&b, "X");
    cr_assert_eq(identity_canonical_json("{\"b\":1,\"a\":2}", 13, &b, &e), 0, "%s", e.msg);
    cr_assert_str_eq(b.data, "X{\"a\":2,\"b\":1}");
    buf_fini(&b);

    buf_init(&b, 10);
    buf_puts(&b, "X");
    cr_assert_eq(identity_canonical_json("{\"key\":\"a long value\"}", 22, &b, &e), -1);
    cr_assert_eq(e.status, 413);
    cr_assert_str_eq(e.code, "payload_too_large");
    cr_assert_str_eq(b.data, "X", "output restored on error");
    cr_assert_eq(b.len, 1);

    /* Escaping grows the output: 2 input chars of '<' need 14 output bytes. */
    buf_reset(&b);
    cr_assert_eq(identity_canonical_json("\"<<\"", 4, &b, &e), -1);
    cr_assert_eq(e.status, 413);
    buf_fini(&b);

    /* Invalid JSON also leaves the buffer as it was. */
    buf_init(&b, 0);
    buf_puts(&b, "keep");
    cr_assert_eq(identity_canonical_json("{\"b\":1,\"a\":", 11, &b, &e), -1);
    cr_assert_str_eq(b.data, "keep");
    buf_fini(&b);
}

Test(identity, args_hash_matches_canonical_and_rejects)
{
    char h1[65], h2[65];
    struct err e = ERR_INIT;
    cr_assert_eq(identity_args_hash("{ \"y\": 2, \"x\": 1 }", 18, h1, &e), 0);
    identity_sha256_hex("{\"x\":1,\"y\":2}", 13, h2);
    cr_assert_str_eq(h1, h2);
    cr_assert_eq(identity_args_hash("", 0, h1, &e), 0);
    identity_sha256_hex("null", 4, h2);
    cr_assert_str_eq(h1, h2);
    /* Worst-case expansion (every byte a '<') still fits the internal cap. */
    cr_assert_eq(identity_args_hash("\"<<<<<<<<\"", 10, h1, &e), 0);
    cr_assert_eq(identity_args_hash("{\"a\":", 5, h1, &e), -1);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.field, "args");
}

static int find(const char *text, const char *key, const char **val, size_t *vlen, struct err *e)
{
    err_clear(e);
    return identity_find_member(text, strlen(text), key, val, vlen, e);
}

Test(identity, find_member_found)
{
    const char *text = " {\"a\":1, \"args\" :  {\"x\": [1, 2]} ,\"b\":\"s\"} ";
    const char *val;
    size_t vlen;
    struct err e = ERR_INIT;
    cr_assert_eq(find(text, "args", &val, &vlen, &e), 1, "%s", e.msg);
    cr_assert_eq(vlen, strlen("{\"x\": [1, 2]}"));
    cr_assert(strncmp(val, "{\"x\": [1, 2]}", vlen) == 0);
    cr_assert_eq(find(text, "b", &val, &vlen, &e), 1);
    cr_assert(vlen == 3 && strncmp(val, "\"s\"", 3) == 0); /* strings keep their quotes */
    cr_assert_eq(find(text, "a", &val, &vlen, &e), 1);
    cr_assert(vlen == 1 && val[0] == '1');
    /* Escaped key matches after decoding; last duplicate wins. */
    cr_assert_eq(find("{\"\\u0061rgs\":5}", "args", &val, &vlen, &e), 1);
    cr_assert(vlen == 1 && val[0] == '5');
    cr_assert_eq(find("{\"k\":1,\"k\":[2]}", "k", &val, &vlen, &e), 1);
    cr_assert(vlen == 3 && strncmp(val, "[2]", 3) == 0);
    cr_assert_eq(find("{\"\":null}", "", &val, &vlen, &e), 1);
    cr_assert(vlen == 4 && strncmp(val, "null", 4) == 0);
}

Test(identity, find_member_absent)
{
    const char *val = "junk";
    size_t vlen = 99;
    struct err e = ERR_INIT;
    cr_assert_eq(find("{}", "args", &val, &vlen, &e), 0);
    cr_assert(val == NULL && vlen == 0);
    cr_assert_eq(find("{\"Args\":1,\"arg\":2,\"argss\":3}", "args", &val, &vlen, &e), 0);
    /* A nested "args" is not a top-level member. */
    cr_assert_eq(find("{\"outer\":{\"args\":1},\"list\":[{\"args\":2}],\"s\":\"args\"}", "args",
                      &val, &vlen, &e),
                 0);
    cr_assert_null(val);
}

Test(identity, find_member_errors)
{
    const char *val;
    size_t vlen;
    struct err e = ERR_INIT;
    const char *not_objects[] = {"[1]", "\"s\"", "42", "null", "", "   "};
    for (size_t i = 0; i < sizeof not_objects / sizeof *not_objects; i++) {
        cr_assert_eq(find(not_objects[i], "args", &val, &vlen, &e), -1, "<%s>", not_objects[i]);
        cr_assert_eq(e.status, 400);
        cr_assert_str_eq(e.code, "validation_error");
        cr_assert_str_eq(e.field, "body");
        cr_assert_null(val);
    }
    /* Invalid JSON anywhere fails even when the member was already found. */
    cr_assert_eq(find("{\"args\":1,}", "args", &val, &vlen, &e), -1);
    cr_assert_str_eq(e.field, "body");
    cr_assert(strstr(e.msg, "byte offset 10") != NULL, "%s", e.msg);
    cr_assert_null(val);
    cr_assert_eq(find("{\"args\":1} x", "args", &val, &vlen, &e), -1);
    cr_assert_eq(find("{\"args\":1", "args", &val, &vlen, &e), -1);
    cr_assert_eq(find("[1", "args", &val, &vlen, &e), -1);
    cr_assert_str_eq(e.field, "body");
    /* An error inside the wanted member's value names that member. */
    cr_assert_eq(find("{\"args\":[1,}", "args", &val, &vlen, &e), -1);
    cr_assert_str_eq(e.field, "args");
    cr_assert_eq(find("{\"other\":[1,],\"args\":1}", "args", &val, &vlen, &e), -1);
    cr_assert_str_eq(e.field, "body");
    /* Depth counts the top-level object: 1 + 127 arrays is the limit. */
    char *at_limit = nested("{\"a\":", "", "}", 1);
    char *inner_ok = nested("[", "", "]", IDENTITY_MAX_DEPTH - 1);
    char *inner_deep = nested("[", "", "]", IDENTITY_MAX_DEPTH);
    struct buf t;
    buf_init(&t, 0);
    buf_printf(&t, "{\"a\":%s}", inner_ok);
    cr_assert_eq(find(t.data, "a", &val, &vlen, &e), 1, "%s", e.msg);
    cr_assert_eq(vlen, strlen(inner_ok));
    buf_reset(&t);
    buf_printf(&t, "{\"a\":%s}", inner_deep);
    cr_assert_eq(find(t.data, "a", &val, &vlen, &e), -1);
    cr_assert_str_eq(e.field, "a");
    buf_fini(&t);
    free(at_limit);
    free(inner_ok);
    free(inner_deep);
}
