/*
 * test_jtext.c - unit tests for src/base/jtext.c: its text must be byte-identical
 * to json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) for every value, since event
 * payloads and replies are written with it.
 */
#include "base/jtext.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void same(const json_t *v)
{
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = 12345;
    char *got = jtext_dump(v, &len);
    if (!want) {
        cr_assert_null(got, "jansson fails, jtext gave %s", got ? got : "");
        return;
    }
    cr_assert_not_null(got, "jtext failed where jansson gave %s", want);
    cr_assert_str_eq(got, want);
    cr_assert_eq(len, strlen(want));
    free(want);
    free(got);
}

static void same_text(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    cr_assert_not_null(v, "%s: %s", text, e.text);
    same(v);
    json_decref(v);
}

Test(jtext, scalars_and_containers)
{
    const char *cases[] = {
        "null", "true", "false", "0", "-1", "9223372036854775807", "-9223372036854775808",
        "\"\"", "{}", "[]", "[[],{},[{}]]", "{\"a\":1,\"b\":[1,2,{\"c\":null}],\"d\":\"x\"}",
        "{\"z\":1,\"a\":2,\"m\":3}", "\"a/b\"", "\"quote \\\" back \\\\ slash\"",
        "\"\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\\u0000x\"", "\"h\\u00e9llo \\u20ac \\ud83d\\ude00\"",
        "{\"key\":\"v\\u0000\"}", "{\"\\n\":{\"\\t\":[\"\\u001e\"]}}",
        "1.5", "-0.0", "0.1", "1e300", "1e-300", "123456789012345678901234567890.0", "3.0",
        "2.5e-5", "1e22", "1e21", "100000000000000000.0", "[1.0,2.25,-3.5e10]",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) same_text(cases[i]);
}

Test(jtext, reals)
{
    srand(7);
    for (int i = 0; i < 20000; i++) {
        double d;
        unsigned long long bits = ((unsigned long long)rand() << 42) ^ ((unsigned long long)rand() << 21) ^ (unsigned long long)rand();
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d)) continue;
        json_t *v = json_real(d);
        same(v);
        json_decref(v);
        v = json_real((double)rand() / 1000.0);
        same(v);
        json_decref(v);
    }
}

Test(jtext, invalid_utf8_falls_back_to_jansson)
{
    const char *bad[] = {"\x80", "a\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = json_stringn_nocheck(bad[i], strlen(bad[i]));
        same(v);
        json_t *o = json_pack("{s:o}", "k", v);
        same(o);
        json_decref(o);
    }
}

/* A random value; strings mix ASCII, escapes and multi-byte UTF-8, some invalid. */
static json_t *random_value(int depth)
{
    int kind = rand() % (depth > 4 ? 6 : 8);
    switch (kind) {
    case 0: return json_null();
    case 1: return json_boolean(rand() & 1);
    case 2: return json_integer((json_int_t)rand() * (rand() & 1 ? -1 : 1) * (rand() % 1000));
    case 3: return json_real((double)rand() / (rand() % 1000 + 1));
    case 4:
    case 5: {
        static const char *pieces[] = {"a", "Z", "/", "\"", "\\", "\n", "\x01", "\x1f", " ", "\xc3\xa9",
                                       "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x7f", "\xc3", "\xa9"};
        char s[64] = "";
        size_t n = 0;
        int parts = rand() % 8;
        for (int i = 0; i < parts; i++) {
            const char *p = pieces[rand() % (sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(p);
            if (n + l >= sizeof s) break;
            memcpy(s + n, p, l);
            n += l;
        }
        return json_stringn_nocheck(s, n);
    }
    case 6: {
        json_t *a = json_array();
        for (int i = rand() % 5; i > 0; i--) json_array_append_new(a, random_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = rand() % 5; i > 0; i--) {
            char key[16];
            snprintf(key, sizeof key, "k%d\n%c", rand() % 50, "a\"\\\x02"[rand() % 4]);
            json_object_set_new(o, key, random_value(depth + 1));
        }
        return o;
    }
    }
}

Test(jtext, random_values)
{
    srand(42);
    for (int i = 0; i < 5000; i++) {
        json_t *v = random_value(0);
        same(v);
        json_decref(v);
    }
}

/* jtext_obj writes what json_pack + jtext_dump write for the same flat object. */
Test(jtext, obj_matches_json_pack)
{
    const char *strs[] = {"", "plain", "quote \" back \\ slash", "tab\tnl\n\x01", "h\xc3\xa9llo \xe2\x82\xac",
                          "a/b <&>"};
    json_int_t ints[] = {0, 1, -1, 9223372036854775807LL, -9223372036854775807LL - 1};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        json_int_t n = ints[i % (sizeof ints / sizeof ints[0])];
        json_t *raw = json_pack("{s:[i, s, f], s:n}", "x", 1, strs[i], 2.5, "y");
        char *raw_text = jtext_dump(raw, NULL);
        json_t *want = json_pack("{s:s, s:I, s:O, s:s}", "step_id", strs[i], "run", n, "args", raw, "k", "v");
        char *want_text = jtext_dump(want, NULL);
        struct jtext_obj o;
        jtext_obj_init(&o);
        jtext_obj_str(&o, "step_id", strs[i]);
        jtext_obj_int(&o, "run", n);
        jtext_obj_raw(&o, "args", raw_text);
        jtext_obj_str(&o, "k", "v");
        char *got = jtext_obj_end(&o);
        cr_assert_str_eq(got, want_text);
        free(got);
        free(want_text);
        free(raw_text);
        json_decref(want);
        json_decref(raw);
    }
    struct jtext_obj o;
    jtext_obj_init(&o);
    char *empty = jtext_obj_end(&o);
    cr_assert_str_eq(empty, "{}");
    free(empty);
}

/* Where json_pack fails (NULL or invalid UTF-8 string), so does jtext_obj. */
Test(jtext, obj_fails_where_json_pack_fails)
{
    cr_assert_null(json_pack("{s:s}", "a", "bad \xff"));
    struct jtext_obj o;
    jtext_obj_init(&o);
    jtext_obj_str(&o, "a", "bad \xff");
    jtext_obj_int(&o, "b", 1);
    cr_assert_null(jtext_obj_end(&o));
    jtext_obj_init(&o);
    jtext_obj_str(&o, "a", NULL);
    cr_assert_null(jtext_obj_end(&o));
    jtext_obj_init(&o);
    jtext_obj_raw(&o, "a", NULL);
    cr_assert_null(jtext_obj_end(&o));
}
