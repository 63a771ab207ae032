/*
 * sni.c - ClientHello server_name extraction (see sni.h).
 *
 * Two passes over the input. First the TLS records: each is checked
 * (handshake type 22, version 3.x, length <= 2^14) and its payload copied into a
 * small stack buffer until the handshake message's own 4-byte header says the
 * ClientHello is whole. Then the ClientHello body, read with a bounds-checked
 * cursor: version, random, session id, cipher suites, compression methods and the
 * extensions, looking for server_name (type 0) with a host_name entry.
 */
#include "proxy/sni.h"

#include <stdbool.h>
#include <string.h>

struct cur {
    const uint8_t *p;
    size_t n;
};

static bool take(struct cur *c, size_t k, const uint8_t **out)
{
    if (c->n < k) return false;
    if (out) *out = c->p;
    c->p += k;
    c->n -= k;
    return true;
}

static bool u8(struct cur *c, unsigned *v)
{
    const uint8_t *p;
    if (!take(c, 1, &p)) return false;
    *v = p[0];
    return true;
}

static bool u16(struct cur *c, unsigned *v)
{
    const uint8_t *p;
    if (!take(c, 2, &p)) return false;
    *v = (unsigned)p[0] << 8 | p[1];
    return true;
}

/* A sub-cursor over the next `len`-prefixed vector (prefix of 1 or 2 bytes). */
static bool vec(struct cur *c, int prefix, struct cur *sub)
{
    unsigned len;
    if (!(prefix == 1 ? u8(c, &len) : u16(c, &len))) return false;
    sub->p = c->p;
    sub->n = len;
    return take(c, len, NULL);
}

static enum proxy_sni_result parse_sni_ext(struct cur *ext, char *host)
{
    struct cur list;
    if (!vec(ext, 2, &list) || ext->n != 0 || list.n == 0) return PROXY_SNI_MALFORMED;
    while (list.n) {
        unsigned type;
        struct cur name;
        if (!u8(&list, &type) || !vec(&list, 2, &name)) return PROXY_SNI_MALFORMED;
        if (type != 0) continue; /* only host_name is defined; skip others */
        if (memchr(name.p, 0, name.n) ||
            proxy_host_normalize((const char *)name.p, name.n, false, host) < 0)
            return PROXY_SNI_MALFORMED;
        return PROXY_SNI_OK;
    }
    return PROXY_SNI_NONE;
}

static enum proxy_sni_result parse_hello(const uint8_t *b, size_t n, char *host)
{
    struct cur c = {b, n}, s;
    unsigned ver;
    if (!u16(&c, &ver) || (ver >> 8) != 3) return PROXY_SNI_MALFORMED;
    if (!take(&c, 32, NULL)) return PROXY_SNI_MALFORMED;                   /* random */
    if (!vec(&c, 1, &s) || s.n > 32) return PROXY_SNI_MALFORMED;           /* session id */
    if (!vec(&c, 2, &s) || s.n < 2 || s.n % 2) return PROXY_SNI_MALFORMED; /* suites */
    if (!vec(&c, 1, &s) || s.n < 1) return PROXY_SNI_MALFORMED;            /* compression */
    if (c.n == 0) return PROXY_SNI_NONE; /* no extensions at all */
    struct cur exts;
    if (!vec(&c, 2, &exts) || c.n != 0) return PROXY_SNI_MALFORMED;
    enum proxy_sni_result found = PROXY_SNI_NONE;
    bool seen_sni = false;
    while (exts.n) {
        unsigned type;
        struct cur ext;
        if (!u16(&exts, &type) || !vec(&exts, 2, &ext)) return PROXY_SNI_MALFORMED;
        if (type != 0) continue;
        if (seen_sni) return PROXY_SNI_MALFORMED; /* duplicate extension */
        seen_sni = true;
        found = parse_sni_ext(&ext, host);
        if (found == PROXY_SNI_MALFORMED) return found;
    }
    return found;
}

enum proxy_sni_result proxy_sni_parse(const uint8_t *data, size_t len, char *host)
{
    uint8_t msg[PROXY_SNI_MAX_HELLO + 4];
    size_t have = 0, need = 0; /* handshake bytes gathered; total message size once known */
    size_t off = 0;
    host[0] = '\0';
    for (;;) {
        if (len - off < 5) break;
        const uint8_t *r = data + off;
        size_t rlen = (size_t)r[3] << 8 | r[4];
        if (r[0] != 22 || r[1] != 3 || rlen == 0 || rlen > 16384) return PROXY_SNI_MALFORMED;
        size_t avail = len - off - 5 < rlen ? len - off - 5 : rlen;
        /* Copy the message header first, then at most the rest of the message. */
        size_t pos = 0;
        while (pos < avail) {
            size_t want = need ? need - have : 4 - have;
            size_t cp = avail - pos < want ? avail - pos : want;
            memcpy(msg + have, r + 5 + pos, cp);
            have += cp;
            pos += cp;
            if (need == 0 && have == 4) {
                if (msg[0] != 1) return PROXY_SNI_MALFORMED; /* not a ClientHello */
                size_t mlen = (size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3];
                if (mlen > PROXY_SNI_MAX_HELLO) return PROXY_SNI_TOO_BIG;
                if (mlen < 38) return PROXY_SNI_MALFORMED;
                need = mlen + 4;
            } else if (need && have == need) {
                break;
            }
        }
        if (need && have >= need) return parse_hello(msg + 4, need - 4, host);
        if (avail < rlen) return PROXY_SNI_NEED_MORE; /* this record is still arriving */
        off += 5 + rlen;
    }
    /* Check what we have of a partial record header so junk fails fast. */
    if (len - off >= 1 && data[off] != 22) return PROXY_SNI_MALFORMED;
    if (len - off >= 2 && data[off + 1] != 3) return PROXY_SNI_MALFORMED;
    if (have >= 1 && msg[0] != 1) return PROXY_SNI_MALFORMED;
    return PROXY_SNI_NEED_MORE;
}
