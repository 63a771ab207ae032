/*
 * dns.c - the sandbox resolver's protocol (see dns.h).
 *
 * The response echoes the question exactly as received (case included: some
 * resolvers randomize it and check) and, for an allowed name with a configured
 * address of the asked type, one answer record pointing back at the question's
 * name (compression pointer 0xc00c). Additional records (EDNS OPT) in the query
 * are ignored and not echoed, which RFC 6891 allows.
 */
#include "proxy/dns.h"

#include <errno.h>
#include <string.h>

enum {
    HDR = 12,
    F_QR = 0x8000,
    F_AA = 0x0400,
    F_TC = 0x0200,
    F_RD = 0x0100,
    F_RA = 0x0080,
    CLASS_IN = 1,
};

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static unsigned get16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* Read the wire name at q[off..qlen) into dotted text. Returns the wire length,
 * -EINVAL when malformed (pointer, overrun, over 255 bytes), or -ENOENT when the
 * name is well-formed but not a host name (caller answers NXDOMAIN). */
static int read_qname(const uint8_t *q, size_t qlen, size_t off, char *text, size_t textsz)
{
    size_t pos = off, tl = 0;
    bool bad_chars = false;
    for (;;) {
        if (pos >= qlen) return -EINVAL;
        unsigned l = q[pos];
        if (l & 0xc0) return -EINVAL; /* compression or extended label types */
        pos++;
        if (l == 0) break;
        if (pos + l > qlen || pos + l - off > 255) return -EINVAL;
        for (unsigned i = 0; i < l; i++) {
            unsigned char c = q[pos + i];
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
            if (!ok) bad_chars = true;
            if (tl + 2 < textsz) text[tl++] = ok ? (char)c : '?';
        }
        if (tl + 2 < textsz) text[tl++] = '.';
        pos += l;
    }
    if (tl) tl--; /* drop the last dot */
    text[tl] = '\0';
    if (pos - off > 255) return -EINVAL;
    return bad_chars || tl == 0 ? -ENOENT : (int)(pos - off);
}

static int header_only(const uint8_t *q, uint8_t *out, unsigned flags, int rcode, int *rcode_out)
{
    memcpy(out, q, 2); /* id */
    put16(out + 2, F_QR | (flags & (0x7800 | F_RD)) | F_RA | (unsigned)rcode);
    memset(out + 4, 0, 8);
    if (rcode_out) *rcode_out = rcode;
    return HDR;
}

int proxy_dns_answer(const uint8_t *q, size_t qlen, uint8_t *out,
                     const struct proxy_dns_config *cfg, proxy_dns_allowed_fn allowed, void *arg,
                     char *qname_out, int *rcode_out)
{
    char name[PROXY_HOST_MAX + 64];
    if (qname_out) qname_out[0] = '\0';
    if (qlen < HDR || qlen > 65535) return -EINVAL;
    unsigned flags = get16(q + 2);
    if (flags & F_QR) return -EINVAL; /* a response: never answer (no reflection loops) */
    unsigned opcode = (flags >> 11) & 0xf;
    if (opcode != 0) return header_only(q, out, flags, PROXY_DNS_NOTIMP, rcode_out);
    if (get16(q + 4) != 1) return header_only(q, out, flags, PROXY_DNS_FORMERR, rcode_out);

    int wl = read_qname(q, qlen, HDR, name, sizeof name);
    if (wl == -EINVAL) return header_only(q, out, flags, PROXY_DNS_FORMERR, rcode_out);
    size_t nl = 0;
    if (wl == -ENOENT) {
        /* find the wire length again for echoing; read_qname validated the structure */
        size_t pos = HDR;
        while (q[pos])
            pos += 1 + q[pos];
        nl = pos + 1 - HDR;
    } else {
        nl = (size_t)wl;
    }
    if (HDR + nl + 4 > qlen) return header_only(q, out, flags, PROXY_DNS_FORMERR, rcode_out);
    unsigned qtype = get16(q + HDR + nl), qclass = get16(q + HDR + nl + 2);

    char norm[PROXY_HOST_MAX + 1] = "";
    int rcode = PROXY_DNS_NOERROR;
    if (wl == -ENOENT || proxy_host_normalize(name, strlen(name), false, norm) < 0) {
        rcode = PROXY_DNS_NXDOMAIN;
    } else {
        if (qname_out) memcpy(qname_out, norm, strlen(norm) + 1);
        if (qclass != CLASS_IN)
            rcode = PROXY_DNS_REFUSED;
        else if (!allowed(norm, arg))
            rcode = PROXY_DNS_NXDOMAIN;
    }

    /* header + echoed question */
    memcpy(out, q, 2);
    put16(out + 2, F_QR | F_AA | (flags & F_RD) | F_RA | (unsigned)rcode);
    put16(out + 4, 1);
    memset(out + 6, 0, 6);
    memcpy(out + HDR, q + HDR, nl + 4);
    size_t len = HDR + nl + 4;
    if (rcode_out) *rcode_out = rcode;
    if (rcode != PROXY_DNS_NOERROR) return (int)len;

    const uint8_t *rdata = NULL;
    unsigned rtype = 0, rdlen = 0;
    if ((qtype == PROXY_DNS_TYPE_A || qtype == PROXY_DNS_TYPE_ANY) && cfg->have_a) {
        rtype = PROXY_DNS_TYPE_A;
        rdata = (const uint8_t *)&cfg->a;
        rdlen = 4;
    } else if ((qtype == PROXY_DNS_TYPE_AAAA || qtype == PROXY_DNS_TYPE_ANY) && cfg->have_aaaa) {
        rtype = PROXY_DNS_TYPE_AAAA;
        rdata = (const uint8_t *)&cfg->aaaa;
        rdlen = 16;
    }
    if (!rdata) return (int)len; /* NOERROR, no data */
    uint8_t *a = out + len;
    put16(a, 0xc000 | HDR); /* the question's name */
    put16(a + 2, rtype);
    put16(a + 4, CLASS_IN);
    put32(a + 6, cfg->ttl);
    put16(a + 10, rdlen);
    memcpy(a + 12, rdata, rdlen);
    put16(out + 6, 1);
    return (int)(len + 12 + rdlen);
}
