/*
 * text.c - UTF-8 repair and base64 (see text.h).
 */
#include "sandbox/core/text.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c >= 0x01 && c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

bool sbx_utf8_valid(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

json_t *sbx_json_text(const char *p, size_t n)
{
    if (sbx_utf8_valid(p, n)) return json_stringn(p, n);
    struct buf b;
    buf_init(&b, 0);
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (k) {
            buf_append(&b, s + i, k);
            i += k;
        } else {
            buf_append(&b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    buf_fini(&b);
    return j;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void sbx_base64_encode(const void *p, size_t n, struct buf *out)
{
    const unsigned char *s = p;
    char q[4];
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        q[0] = b64[v >> 18];
        q[1] = b64[(v >> 12) & 63];
        q[2] = b64[(v >> 6) & 63];
        q[3] = b64[v & 63];
        buf_append(out, q, 4);
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        q[0] = b64[v >> 18];
        q[1] = b64[(v >> 12) & 63];
        q[2] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        q[3] = '=';
        buf_append(out, q, 4);
    }
    if (!out->data) buf_append(out, "", 0);
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int sbx_base64_decode(const char *s, size_t n, struct buf *out)
{
    while (n > 0 && s[n - 1] == '=')
        n--;
    if (n % 4 == 1) return -EINVAL;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64val(s[i]);
        if (v < 0) return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            unsigned char c = (unsigned char)(acc >> bits);
            if (buf_append(out, &c, 1) < 0) return -ENOBUFS;
        }
    }
    if (!out->data) buf_append(out, "", 0);
    return 0;
}
