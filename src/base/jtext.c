/*
 * jtext.c - compact JSON text of a jansson value (see jtext.h).
 *
 * One recursive walk into a growable buffer. Escapes follow jansson's dump.c:
 * '"' and '\\' and the control characters below 0x20 (\b \f \n \r \t by name,
 * others as \u00XX with upper-case hex); '/' and non-ASCII text are copied as they
 * are. Integers print as "%lld"; reals as jansson's jsonp_dtostr with its default
 * precision 17 ("%.17g", ".0" appended when there is neither '.' nor 'e', exponent
 * without '+' or leading zeros). Invalid UTF-8 stops the walk and the whole value
 * goes to json_dumps, which decides (it fails, as jansson does).
 */
#include "base/jtext.h"

#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

struct out {
    char *p;
    size_t len, cap;
};

static char *room(struct out *o, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n + 1) cap *= 2;
        o->p = xrealloc(o->p, cap);
        o->cap = cap;
    }
    return o->p + o->len;
}

static void put(struct out *o, const char *s, size_t n)
{
    memcpy(room(o, n), s, n);
    o->len += n;
}

static void putc1(struct out *o, char c)
{
    *room(o, 1) = c;
    o->len++;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        else if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

static int put_string(struct out *o, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    putc1(o, '"');
    size_t run = 0; /* start of the bytes not yet copied */
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t l = utf8_len(s + i, n - i);
            if (!l) return -1;
            i += l;
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        put(o, str + run, i - run);
        char esc[8];
        const char *e = esc;
        size_t el = 2;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default: {
            static const char hex[] = "0123456789ABCDEF";
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            el = 6;
        }
        }
        put(o, e, el);
        i++;
        run = i;
    }
    put(o, str + run, n - run);
    putc1(o, '"');
    return 0;
}

static void put_int(struct out *o, json_int_t v)
{
    char tmp[24];
    char *end = tmp + sizeof tmp, *p = end;
    /* Negate in unsigned arithmetic so INT64_MIN works. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    put(o, p, (size_t)(end - p));
}

/* jansson's jsonp_dtostr(buffer, 100, value, 17). */
static int put_real(struct out *o, double value)
{
    char buf[100];
    int ret = snprintf(buf, sizeof buf, "%.17g", value);
    if (ret < 0 || (size_t)ret >= sizeof buf) return -1;
    size_t length = (size_t)ret;
    /* from_locale: the locale's decimal point becomes '.' */
    const char *point = localeconv()->decimal_point;
    if (point[0] != '.' || point[1]) {
        if (point[1]) return -1; /* multi-byte decimal point: let jansson decide */
        char *pos = strchr(buf, point[0]);
        if (pos) *pos = '.';
    }
    if (!strchr(buf, '.') && !strchr(buf, 'e')) {
        if (length + 3 >= sizeof buf) return -1;
        buf[length] = '.';
        buf[length + 1] = '0';
        buf[length + 2] = '\0';
        length += 2;
    }
    char *start = strchr(buf, 'e');
    if (start) {
        start++;
        char *end = start + 1;
        if (*start == '-') start++;
        while (*end == '0') end++;
        if (end != start) {
            memmove(start, end, length - (size_t)(end - buf));
            length -= (size_t)(end - start);
        }
    }
    put(o, buf, length);
    return 0;
}

static int put_value(struct out *o, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        putc1(o, '{');
        bool first = true;
        for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
            if (!first) putc1(o, ',');
            first = false;
            if (put_string(o, json_object_iter_key(it), json_object_iter_key_len(it)) < 0) return -1;
            putc1(o, ':');
            if (put_value(o, json_object_iter_value(it)) < 0) return -1;
        }
        putc1(o, '}');
        return 0;
    }
    case JSON_ARRAY: {
        putc1(o, '[');
        size_t n = json_array_size(v);
        for (size_t i = 0; i < n; i++) {
            if (i) putc1(o, ',');
            if (put_value(o, json_array_get(v, i)) < 0) return -1;
        }
        putc1(o, ']');
        return 0;
    }
    case JSON_STRING:
        return put_string(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        put_int(o, json_integer_value(v));
        return 0;
    case JSON_REAL:
        return put_real(o, json_real_value(v));
    case JSON_TRUE:
        put(o, "true", 4);
        return 0;
    case JSON_FALSE:
        put(o, "false", 5);
        return 0;
    case JSON_NULL:
        put(o, "null", 4);
        return 0;
    }
    return -1;
}

char *jtext_dump(const json_t *v, size_t *len)
{
    if (!v) return NULL;
    struct out o = {0};
    if (put_value(&o, v) < 0) {
        free(o.p);
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (len) *len = s ? strlen(s) : 0;
        return s;
    }
    room(&o, 0)[0] = '\0';
    if (len) *len = o.len;
    return o.p;
}

/* --- flat objects written member by member --- */

void jtext_obj_init(struct jtext_obj *o)
{
    memset(o, 0, sizeof *o);
}

/* The object's buffer as a struct out (same fields), for the writers above. */
static void obj_key(struct jtext_obj *o, struct out *w, const char *key)
{
    w->p = o->p, w->len = o->len, w->cap = o->cap;
    putc1(w, o->len ? ',' : '{');
    put_string(w, key, strlen(key));
    putc1(w, ':');
}

static void obj_done(struct jtext_obj *o, const struct out *w)
{
    o->p = w->p, o->len = w->len, o->cap = w->cap;
}

void jtext_obj_str(struct jtext_obj *o, const char *key, const char *val)
{
    struct out w;
    obj_key(o, &w, key);
    if (!val || put_string(&w, val, strlen(val)) < 0) o->failed = 1;
    obj_done(o, &w);
}

void jtext_obj_int(struct jtext_obj *o, const char *key, json_int_t val)
{
    struct out w;
    obj_key(o, &w, key);
    put_int(&w, val);
    obj_done(o, &w);
}

void jtext_obj_raw(struct jtext_obj *o, const char *key, const char *val)
{
    struct out w;
    obj_key(o, &w, key);
    if (val) put(&w, val, strlen(val));
    else o->failed = 1;
    obj_done(o, &w);
}

char *jtext_obj_end(struct jtext_obj *o)
{
    struct out w = {o->p, o->len, o->cap};
    if (!w.len) putc1(&w, '{');
    putc1(&w, '}');
    room(&w, 0)[0] = '\0';
    char *text = o->failed ? NULL : w.p;
    if (o->failed) free(w.p);
    memset(o, 0, sizeof *o);
    return text;
}
