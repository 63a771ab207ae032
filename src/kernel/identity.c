/*
 * identity.c - canonical JSON, args hashes and step ids (see identity.h).
 *
 * What Go does (upstream internal/identity): json.Decoder with UseNumber decodes
 * the first value into `any`; objects become map[string]any (last duplicate key
 * wins), strings are unquoted (escapes resolved, every invalid UTF-8 byte and
 * every unpaired surrogate escape becomes U+FFFD), numbers keep their literal.
 * Then it writes objects with slices.Sort'ed keys (bytewise), arrays in order,
 * numbers verbatim, and each string/key through json.Marshal: \" \\ \n \r \t \b
 * \f short escapes, other bytes < 0x20 as \u00xx, < > & as \u003c \u003e
 * \u0026, U+2028/U+2029 as \u2028/\u2029, everything else raw UTF-8.
 *
 * Note on invalid UTF-8: Marshal would escape an invalid byte as the six
 * characters \ufffd, but it never sees one, because the decode step already
 * replaced it with a real U+FFFD, which Marshal writes raw (EF BF BD). We
 * reproduce the end-to-end result, so the output holds raw EF BF BD.
 *
 * How it works: one recursive-descent pass (recursion bounded by
 * IDENTITY_MAX_DEPTH) validates the grammar strictly and writes the canonical
 * form straight into the caller's buffer; each string is decoded and re-escaped
 * in the same loop, copying runs of unremarkable bytes in one go. Objects are
 * written in input order while remembering, per member, its decoded key (in a
 * stack-like arena) and the output span it produced. If, when the object closes,
 * its keys were not already strictly ascending, the members are qsorted by
 * decoded key and the object's output region is rebuilt from a scratch copy,
 * keeping only the last of duplicate keys. Cost: O(n) plus O(m log m) per object
 * of m members plus one copy of an out-of-order object's output per nesting level
 * (at most IDENTITY_MAX_DEPTH) - never quadratic in the input size.
 *
 * Deliberately stricter than Go: Go's Decoder ignores whatever follows the first
 * value (`{"a":1} junk` hashes like `{"a":1}`); we reject anything but whitespace
 * after it, so a truncated or concatenated body is a 400 instead of a silent
 * partial hash. Whitespace-only input is "null" (Go would fail with EOF); nesting
 * beyond 128 is rejected (Go allows 10000).
 */
#include "kernel/identity.h"
#include "base/xalloc.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct member {
    size_t key_off, key_len;   /* decoded key in parser.keys */
    size_t out_start, out_end; /* `"key":value` span in parser.out */
    size_t idx;                /* input order: among equal keys the last one wins */
    const char *key;           /* set just before sorting (keys.data moves while parsing) */
};

struct parser {
    const unsigned char *s;
    size_t len, pos;
    int depth;
    struct buf *out;    /* canonical output; NULL = validate only */
    struct buf keys;    /* decoded keys of the currently open objects (a stack) */
    struct member *mem; /* members of the currently open objects (a stack) */
    size_t nmem, mem_cap;
    char *tmp; /* scratch copy of an object's output while reordering */
    size_t tmp_cap;
    const char *field; /* err field (and name used in messages) */
    struct err *err;
};

/* Printable ASCII that needs neither decoding nor Go escaping: 0x20-0x7f minus
 * " \ < > &. Written as ranges because overriding initializers trip -Wextra. */
static const unsigned char plain_ascii[256] = {
    [0x20 ... 0x21] = 1, [0x23 ... 0x25] = 1, [0x27 ... 0x3b] = 1,
    [0x3d] = 1,          [0x3f ... 0x5b] = 1, [0x5d ... 0x7f] = 1,
};

static const char hex_digits[] = "0123456789abcdef";

static void parser_init(struct parser *p, const char *text, size_t len, struct buf *out,
                        const char *field, struct err *err)
{
    memset(p, 0, sizeof *p);
    p->s = (const unsigned char *)text;
    p->len = text ? len : 0;
    p->out = out;
    /* Unbounded is safe: the arena only holds decoded keys of the input, which
     * are at most 3x its size (one invalid byte -> 3-byte U+FFFD). */
    buf_init(&p->keys, 0);
    p->field = field;
    p->err = err;
}

static void parser_fini(struct parser *p)
{
    buf_fini(&p->keys);
    free(p->mem);
    free(p->tmp);
}

static void describe_char(unsigned char c, char *d, size_t n)
{
    if (c == '\'')
        snprintf(d, n, "'\\''");
    else if (c >= 0x20 && c < 0x7f)
        snprintf(d, n, "'%c'", c);
    else
        snprintf(d, n, "'\\x%02x'", c);
}

static int syntax_error(struct parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int syntax_error(struct parser *p, size_t at, const char *fmt, ...)
{
    char detail[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return err_invalid(p->err, p->field, "%s is not valid JSON: %s at byte offset %zu", p->field,
                       detail, at);
}

/* Error for the byte at `at` (or end of input), phrased like Go's scanner. */
static int bad_char(struct parser *p, size_t at, const char *context)
{
    if (at >= p->len) return syntax_error(p, at, "unexpected end of JSON input");
    char d[16];
    describe_char(p->s[at], d, sizeof d);
    return syntax_error(p, at, "invalid character %s %s", d, context);
}

static int emit(struct parser *p, const void *d, size_t n)
{
    if (!p->out) return 0;
    if (buf_append(p->out, d, n) == 0) return 0;
    return err_set(p->err, 413, "payload_too_large", p->field,
                   "canonical JSON of %s exceeds the %zu-byte limit; send smaller %s", p->field,
                   p->out->max, p->field);
}

static inline void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Length of the well-formed UTF-8 sequence (2-4 bytes) at s, or 0 when s[0]
 * starts an invalid one. Same acceptance as Go's utf8.DecodeRune: no overlongs,
 * no surrogates, nothing above U+10FFFF; an invalid sequence costs one byte. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0xc2) return 0;
    if (c < 0xe0) return n >= 2 && s[1] >= 0x80 && s[1] <= 0xbf ? 2 : 0;
    if (c < 0xf0) {
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
        return n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c < 0xf5) {
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
        return n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80
                   ? 4
                   : 0;
    }
    return 0;
}

static size_t utf8_encode(uint32_t cp, char *u)
{
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    u[0] = (char)(0xf0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One decoded code point that is not part of a plain run: append its UTF-8 to
 * dec (if any) and its json.Marshal form to the output. */
static int put_cp(struct parser *p, struct buf *dec, uint32_t cp)
{
    char u[4];
    size_t un = utf8_encode(cp, u);
    if (dec) buf_append(dec, u, un);
    if (!p->out) return 0;
    if (cp >= 0x20 && cp != '"' && cp != '\\' && cp != '<' && cp != '>' && cp != '&' &&
        cp != 0x2028 && cp != 0x2029)
        return emit(p, u, un);
    char e[6] = {'\\', 0, 0, 0, 0, 0};
    size_t en = 2;
    switch (cp) {
    case '"':
        e[1] = '"';
        break;
    case '\\':
        e[1] = '\\';
        break;
    case '\n':
        e[1] = 'n';
        break;
    case '\r':
        e[1] = 'r';
        break;
    case '\t':
        e[1] = 't';
        break;
    case '\b': /* \b and \f have short forms since Go 1.22 */
        e[1] = 'b';
        break;
    case '\f':
        e[1] = 'f';
        break;
    default:
        e[1] = 'u';
        e[2] = hex_digits[(cp >> 12) & 0xf];
        e[3] = hex_digits[(cp >> 8) & 0xf];
        e[4] = hex_digits[(cp >> 4) & 0xf];
        e[5] = hex_digits[cp & 0xf];
        en = 6;
    }
    return emit(p, e, en);
}

static int hex4(const unsigned char *s, size_t n, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if ((size_t)i >= n) return -1 - i; /* input ends inside the escape */
        unsigned char c = s[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1 - i; /* which digit was bad, for the error offset */
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* The string starting at s[pos] == '"': validate, write its canonical form to
 * the output and (if dec) its decoded bytes to dec. */
static int parse_string(struct parser *p, struct buf *dec)
{
    const unsigned char *s = p->s;
    size_t len = p->len, i = p->pos + 1, run = i;
    if (emit(p, "\"", 1) < 0) return -1;
    for (;;) {
        /* Plain ASCII and well-formed multi-byte UTF-8 extend the current run,
         * which is copied verbatim to both sinks when something else shows up. */
        while (i < len && plain_ascii[s[i]])
            i++;
        if (i >= len) return syntax_error(p, i, "unexpected end of JSON input in string literal");
        unsigned char c = s[i];
        size_t n = 0;
        if (c >= 0x80) {
            n = utf8_seq_len(s + i, len - i);
            /* U+2028/U+2029 (E2 80 A8/A9) are valid but Go escapes them. */
            if (n > 0 && !(n == 3 && c == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] & 0xfe) == 0xa8)) {
                i += n;
                continue;
            }
        }
        if (i > run) {
            if (dec) buf_append(dec, s + run, i - run);
            if (emit(p, s + run, i - run) < 0) return -1;
        }
        if (c == '"') {
            p->pos = i + 1;
            return emit(p, "\"", 1);
        }
        uint32_t cp;
        if (c == '\\') {
            if (i + 1 >= len) return syntax_error(p, i + 1, "unexpected end of JSON input");
            switch (s[i + 1]) {
            case '"':
                cp = '"';
                break;
            case '\\':
                cp = '\\';
                break;
            case '/':
                cp = '/';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 't':
                cp = '\t';
                break;
            case 'u': {
                int r = hex4(s + i + 2, len - (i + 2), &cp);
                if (r < 0) {
                    size_t at = i + 2 + (size_t)(-1 - r);
                    return bad_char(p, at, "in \\u hexadecimal character escape");
                }
                i += 6;
                /* Go's unquote: a high surrogate followed by a \u low surrogate is
                 * one code point; any other surrogate becomes U+FFFD, and the
                 * following escape (if not consumed) is decoded on its own. */
                if (cp >= 0xd800 && cp < 0xe000) {
                    uint32_t lo;
                    if (cp < 0xdc00 && i + 6 <= len && s[i] == '\\' && s[i + 1] == 'u' &&
                        hex4(s + i + 2, 4, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        i += 6;
                    } else {
                        cp = 0xfffd;
                    }
                }
                if (put_cp(p, dec, cp) < 0) return -1;
                run = i;
                continue;
            }
            default:
                return bad_char(p, i + 1, "in string escape code");
            }
            i += 2;
        } else if (c < 0x20) {
            return bad_char(p, i, "in string literal");
        } else if (c < 0x80) {
            cp = c; /* < > & */
            i++;
        } else if (n == 0) {
            cp = 0xfffd; /* each invalid byte, as utf8.DecodeRune reports it */
            i++;
        } else {
            cp = (c == 0xe2 && s[i + 2] == 0xa8) ? 0x2028 : 0x2029;
            i += 3;
        }
        if (put_cp(p, dec, cp) < 0) return -1;
        run = i;
    }
}

static bool is_digit(const struct parser *p, size_t i)
{
    return i < p->len && p->s[i] >= '0' && p->s[i] <= '9';
}

/* Strict JSON number grammar; the literal is copied unchanged (UseNumber). */
static int parse_number(struct parser *p)
{
    size_t start = p->pos, i = start;
    if (i < p->len && p->s[i] == '-') i++;
    if (i < p->len && p->s[i] == '0') {
        i++;
    } else if (is_digit(p, i)) {
        while (is_digit(p, i))
            i++;
    } else {
        return bad_char(p, i, "in numeric literal");
    }
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (!is_digit(p, i)) return bad_char(p, i, "after decimal point in numeric literal");
        while (is_digit(p, i))
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (!is_digit(p, i)) return bad_char(p, i, "in exponent of numeric literal");
        while (is_digit(p, i))
            i++;
    }
    p->pos = i;
    return emit(p, p->s + start, i - start);
}

static int parse_literal(struct parser *p, const char *lit, size_t n)
{
    for (size_t k = 1; k < n; k++) {
        size_t at = p->pos + k;
        if (at >= p->len || p->s[at] != (unsigned char)lit[k]) {
            char ctx[48];
            snprintf(ctx, sizeof ctx, "in literal %s (expecting '%c')", lit, lit[k]);
            return bad_char(p, at, ctx);
        }
    }
    p->pos += n;
    return emit(p, lit, n);
}

static int parse_value(struct parser *p);

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = n ? memcmp(x->key, y->key, n) : 0;
    if (c) return c;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool same_key(const struct member *x, const struct member *y)
{
    return x->key_len == y->key_len && (x->key_len == 0 || !memcmp(x->key, y->key, x->key_len));
}

/* Rebuild the output of the object whose members are mem[base..nmem) and whose
 * member text starts at region_start: sorted by decoded key, last duplicate
 * wins. The result is never longer than the region, so it is written in place
 * from a scratch copy. */
static void reorder_members(struct parser *p, size_t base, size_t region_start)
{
    struct buf *out = p->out;
    struct member *m = p->mem + base;
    size_t n = p->nmem - base, region_len = out->len - region_start;
    for (size_t i = 0; i < n; i++)
        m[i].key = p->keys.data + m[i].key_off;
    qsort(m, n, sizeof *m, member_cmp);
    if (p->tmp_cap < region_len) {
        free(p->tmp);
        p->tmp_cap = region_len > 2 * p->tmp_cap ? region_len : 2 * p->tmp_cap;
        p->tmp = xmalloc(p->tmp_cap);
    }
    memcpy(p->tmp, out->data + region_start, region_len);
    char *w = out->data + region_start;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && same_key(&m[i], &m[i + 1])) continue; /* a later duplicate wins */
        if (!first) *w++ = ',';
        first = false;
        size_t l = m[i].out_end - m[i].out_start;
        memcpy(w, p->tmp + (m[i].out_start - region_start), l);
        w += l;
    }
    out->len = (size_t)(w - out->data);
    out->data[out->len] = '\0';
}

static int enter(struct parser *p)
{
    if (++p->depth > IDENTITY_MAX_DEPTH)
        return syntax_error(p, p->pos, "nesting deeper than %d levels", IDENTITY_MAX_DEPTH);
    p->pos++; /* the '{' or '[' */
    return 0;
}

static int parse_object(struct parser *p)
{
    if (enter(p) < 0 || emit(p, "{", 1) < 0) return -1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        p->depth--;
        return emit(p, "}", 1);
    }
    size_t base = p->nmem, keys_base = p->keys.len;
    size_t region_start = p->out ? p->out->len : 0;
    bool sorted = true;
    for (size_t idx = 0;; idx++) {
        if (p->pos >= p->len || p->s[p->pos] != '"')
            return bad_char(p, p->pos, "looking for beginning of object key string");
        size_t out_start = p->out ? p->out->len : 0, key_off = p->keys.len;
        if (parse_string(p, p->out ? &p->keys : NULL) < 0) return -1;
        size_t key_len = p->keys.len - key_off;
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':') return bad_char(p, p->pos, "after object key");
        p->pos++;
        if (emit(p, ":", 1) < 0) return -1;
        skip_ws(p);
        if (parse_value(p) < 0) return -1;
        if (p->out) {
            if (p->nmem == p->mem_cap) {
                p->mem_cap = p->mem_cap ? 2 * p->mem_cap : 32;
                p->mem = xrealloc(p->mem, p->mem_cap * sizeof *p->mem);
            }
            struct member *m = &p->mem[p->nmem++];
            *m = (struct member){key_off, key_len, out_start, p->out->len, idx, NULL};
            /* Already-ascending keys (the common case) need no reordering. */
            if (sorted && idx > 0) {
                const struct member *prev = m - 1;
                size_t n = prev->key_len < key_len ? prev->key_len : key_len;
                const char *k = p->keys.data;
                int c = n ? memcmp(k + prev->key_off, k + key_off, n) : 0;
                if (c > 0 || (c == 0 && prev->key_len >= key_len)) sorted = false;
            }
        }
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            if (emit(p, ",", 1) < 0) return -1;
            skip_ws(p);
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            break;
        }
        return bad_char(p, p->pos, "after object key:value pair");
    }
    if (p->out) {
        if (!sorted) reorder_members(p, base, region_start);
        p->nmem = base;
        p->keys.len = keys_base;
    }
    p->depth--;
    return emit(p, "}", 1);
}

static int parse_array(struct parser *p)
{
    if (enter(p) < 0 || emit(p, "[", 1) < 0) return -1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        p->depth--;
        return emit(p, "]", 1);
    }
    for (;;) {
        if (parse_value(p) < 0) return -1;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            if (emit(p, ",", 1) < 0) return -1;
            skip_ws(p);
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            break;
        }
        return bad_char(p, p->pos, "after array element");
    }
    p->depth--;
    return emit(p, "]", 1);
}

/* A value starting at s[pos] (whitespace already skipped). */
static int parse_value(struct parser *p)
{
    if (p->pos >= p->len) return syntax_error(p, p->pos, "unexpected end of JSON input");
    switch (p->s[p->pos]) {
    case '{':
        return parse_object(p);
    case '[':
        return parse_array(p);
    case '"':
        return parse_string(p, NULL);
    case 't':
        return parse_literal(p, "true", 4);
    case 'f':
        return parse_literal(p, "false", 5);
    case 'n':
        return parse_literal(p, "null", 4);
    case '-':
    case '0' ... '9':
        return parse_number(p);
    default:
        return bad_char(p, p->pos, "looking for beginning of value");
    }
}

/* Only whitespace may follow the value (stricter than Go; see the top). */
static int expect_end(struct parser *p)
{
    skip_ws(p);
    if (p->pos < p->len)
        return bad_char(p, p->pos, "after top-level value (only whitespace may follow it)");
    return 0;
}

int identity_canonical_json(const char *text, size_t len, struct buf *out, struct err *err)
{
    struct parser p;
    size_t mark = out->len;
    int rc;
    parser_init(&p, text, len, out, "args", err);
    skip_ws(&p);
    if (p.pos == p.len)
        rc = emit(&p, "null", 4);
    else
        rc = parse_value(&p) < 0 ? -1 : expect_end(&p);
    parser_fini(&p);
    if (rc < 0) {
        out->len = mark;
        if (out->data) out->data[mark] = '\0';
    }
    return rc;
}

int identity_find_member(const char *text, size_t len, const char *key, const char **val,
                         size_t *vlen, struct err *err)
{
    struct parser p;
    struct buf k; /* decoded key; unbounded is fine, it is <= 3x the input */
    size_t key_len = strlen(key);
    int rc = 0;
    *val = NULL;
    *vlen = 0;
    parser_init(&p, text, len, NULL, "body", err);
    buf_init(&k, 0);
    skip_ws(&p);
    if (p.pos == p.len) {
        rc = err_invalid(err, "body", "body is empty; expected a JSON object");
        goto done;
    }
    if (p.s[p.pos] != '{') {
        rc = parse_value(&p) < 0 || expect_end(&p) < 0
                 ? -1
                 : err_invalid(err, "body", "body must be a JSON object");
        goto done;
    }
    p.depth = 1;
    p.pos++;
    skip_ws(&p);
    if (p.pos < p.len && p.s[p.pos] == '}') {
        p.pos++;
    } else {
        for (;;) {
            if (p.pos >= p.len || p.s[p.pos] != '"') {
                rc = bad_char(&p, p.pos, "looking for beginning of object key string");
                goto done;
            }
            buf_reset(&k);
            if (parse_string(&p, &k) < 0) {
                rc = -1;
                goto done;
            }
            skip_ws(&p);
            if (p.pos >= p.len || p.s[p.pos] != ':') {
                rc = bad_char(&p, p.pos, "after object key");
                goto done;
            }
            p.pos++;
            skip_ws(&p);
            bool match = k.len == key_len && (key_len == 0 || !memcmp(k.data, key, key_len));
            size_t start = p.pos;
            if (match) p.field = key;
            if (parse_value(&p) < 0) {
                rc = -1;
                goto done;
            }
            p.field = "body";
            if (match) { /* keep going: a later duplicate wins, and the rest must be valid */
                rc = 1;
                *val = text + start;
                *vlen = p.pos - start;
            }
            skip_ws(&p);
            if (p.pos < p.len && p.s[p.pos] == ',') {
                p.pos++;
                skip_ws(&p);
                continue;
            }
            if (p.pos < p.len && p.s[p.pos] == '}') {
                p.pos++;
                break;
            }
            rc = bad_char(&p, p.pos, "after object key:value pair");
            goto done;
        }
    }
    if (expect_end(&p) < 0) rc = -1;
done:
    if (rc < 0) {
        *val = NULL;
        *vlen = 0;
    }
    buf_fini(&k);
    parser_fini(&p);
    return rc;
}

/* The digest implementation is fetched once: SHA256() looks it up on every call,
 * which costs more than hashing a small step's arguments. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void identity_sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    pthread_once(&sha256_once, sha256_fetch);
    if (!sha256_md || !EVP_Digest(n ? p : (const void *)"", n, md, NULL, sha256_md, NULL))
        SHA256(n ? p : (const void *)"", n, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex_digits[md[i] >> 4];
        out[2 * i + 1] = hex_digits[md[i] & 0xf];
    }
    out[64] = '\0';
}

void identity_step_id(const char *exec_id, const char *kind, const char *target,
                      const char *args_hash, long long occurrence, char out[65])
{
    char occ[24];
    snprintf(occ, sizeof occ, "%lld", occurrence);
    const char *f[5] = {exec_id, kind, target, args_hash, occ};
    size_t fl[5], total = 0;
    for (int i = 0; i < 5; i++) {
        ASSERT(f[i] != NULL);
        fl[i] = strlen(f[i]);
        total += fl[i] + 21; /* digits of a size_t + ':' */
    }
    /* Preimages are ~130 bytes; only an unusually long target needs the heap. */
    char stack[512];
    char *pre = total <= sizeof stack ? stack : xmalloc(total);
    size_t n = 0;
    for (int i = 0; i < 5; i++) {
        n += (size_t)snprintf(pre + n, total - n, "%zu:", fl[i]);
        memcpy(pre + n, f[i], fl[i]);
        n += fl[i];
    }
    identity_sha256_hex(pre, n, out);
    if (pre != stack) free(pre);
}

int identity_args_hash(const char *text, size_t len, char out[65], struct err *err)
{
    /* Canonical output is at most 6x the input (one '<' becomes \u003c), so this
     * cap never trips; it only keeps the buffer formally bounded. */
    struct buf b;
    buf_init(&b, len < ((size_t)-1 - 8) / 6 ? 6 * len + 8 : 0);
    if (identity_canonical_json(text, len, &b, err) < 0) {
        buf_fini(&b);
        return -1;
    }
    identity_sha256_hex(b.data, b.len, out);
    buf_fini(&b);
    return 0;
}
