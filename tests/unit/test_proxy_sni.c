/*
 * test_proxy_sni.c - unit tests for the ClientHello SNI parser (src/proxy/sni.c).
 *
 * Two sources of ClientHellos: real ones produced by OpenSSL (a client SSL over
 * memory BIOs, read back from its write BIO) and hand-crafted ones, so every
 * length field can be made wrong on purpose. Fragmentation is tested by feeding
 * every prefix (what the proxy sees as bytes trickle in) and by re-packing the
 * handshake message into many small TLS records.
 */
#include <criterion/criterion.h>

#include <openssl/ssl.h>
#include <stdint.h>
#include <string.h>

#include "proxy/sni.h"

/* A real ClientHello from OpenSSL, with the given SNI (NULL = none). */
static size_t openssl_hello(const char *sni, uint8_t *out, size_t cap)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = SSL_new(ctx);
    BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, r, w);
    if (sni) SSL_set_tlsext_host_name(ssl, sni);
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    SSL_set_alpn_protos(ssl, alpn, sizeof alpn - 1);
    SSL_set_connect_state(ssl);
    cr_assert_eq(SSL_do_handshake(ssl), -1);
    char *p;
    long n = BIO_get_mem_data(w, &p);
    cr_assert(n > 0 && (size_t)n <= cap);
    memcpy(out, p, (size_t)n);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return (size_t)n;
}

static void put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* A ClientHello body with optional extensions (raw bytes). */
static size_t body(uint8_t *b, const uint8_t *exts, size_t exts_len, bool ext_block)
{
    size_t n = 0;
    b[n++] = 3;
    b[n++] = 3;
    memset(b + n, 0xab, 32);
    n += 32;
    b[n++] = 0; /* session id */
    put16(b + n, 2);
    n += 2;
    b[n++] = 0x13;
    b[n++] = 0x01;
    b[n++] = 1; /* compression */
    b[n++] = 0;
    if (ext_block) {
        put16(b + n, exts_len);
        n += 2;
        memcpy(b + n, exts, exts_len);
        n += exts_len;
    }
    return n;
}

static size_t sni_ext(uint8_t *e, const char *name)
{
    size_t nl = strlen(name);
    put16(e, 0);
    put16(e + 2, nl + 5);
    put16(e + 4, nl + 3);
    e[6] = 0;
    put16(e + 7, nl);
    memcpy(e + 9, name, nl);
    return 9 + nl;
}

/* Wrap a ClientHello body in a handshake header and records of at most `rec` bytes. */
static size_t wrap(uint8_t *out, const uint8_t *b, size_t bl, size_t rec)
{
    uint8_t msg[20000];
    msg[0] = 1;
    msg[1] = (uint8_t)(bl >> 16);
    msg[2] = (uint8_t)(bl >> 8);
    msg[3] = (uint8_t)bl;
    memcpy(msg + 4, b, bl);
    size_t ml = bl + 4, n = 0;
    for (size_t off = 0; off < ml; off += rec) {
        size_t k = ml - off < rec ? ml - off : rec;
        out[n++] = 22;
        out[n++] = 3;
        out[n++] = 1;
        put16(out + n, k);
        n += 2;
        memcpy(out + n, msg + off, k);
        n += k;
    }
    return n;
}

static enum proxy_sni_result parse(const uint8_t *d, size_t n, char *host)
{
    return proxy_sni_parse(d, n, host);
}

Test(proxy_sni, real_openssl_hello)
{
    uint8_t h[4096];
    char host[PROXY_HOST_MAX + 1];
    size_t n = openssl_hello("GitHub.Example", h, sizeof h);
    cr_assert_eq(parse(h, n, host), PROXY_SNI_OK);
    cr_assert_str_eq(host, "github.example");
    n = openssl_hello(NULL, h, sizeof h);
    cr_assert_eq(parse(h, n, host), PROXY_SNI_NONE);
}

Test(proxy_sni, every_prefix_needs_more)
{
    uint8_t h[4096];
    char host[PROXY_HOST_MAX + 1];
    size_t n = openssl_hello("api.example", h, sizeof h);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(parse(h, i, host), PROXY_SNI_NEED_MORE, "prefix of %zu bytes", i);
    cr_assert_eq(parse(h, n, host), PROXY_SNI_OK);
    /* trailing bytes after the hello (early data) do not matter */
    h[n] = 23;
    cr_assert_eq(parse(h, n + 1, host), PROXY_SNI_OK);
}

Test(proxy_sni, split_over_many_records)
{
    uint8_t e[300], b[1000], rec[20000];
    char host[PROXY_HOST_MAX + 1];
    size_t el = sni_ext(e, "split.example");
    size_t bl = body(b, e, el, true);
    size_t sizes[] = {1, 2, 3, 7, 40, 16384};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = wrap(rec, b, bl, sizes[i]);
        cr_assert_eq(parse(rec, n, host), PROXY_SNI_OK, "records of %zu", sizes[i]);
        cr_assert_str_eq(host, "split.example");
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(parse(rec, k, host), PROXY_SNI_NEED_MORE, "records of %zu, prefix %zu",
                         sizes[i], k);
    }
}

Test(proxy_sni, no_extensions_at_all)
{
    uint8_t b[200], rec[400];
    char host[PROXY_HOST_MAX + 1];
    size_t n = wrap(rec, b, body(b, NULL, 0, false), 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_NONE);
}

Test(proxy_sni, other_extensions_only)
{
    uint8_t e[] = {0x00, 0x0b, 0x00, 0x02, 0x01, 0x00, 0x00, 0x17, 0x00, 0x00};
    uint8_t b[200], rec[400];
    char host[PROXY_HOST_MAX + 1];
    size_t n = wrap(rec, b, body(b, e, sizeof e, true), 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_NONE);
}

Test(proxy_sni, not_tls)
{
    char host[PROXY_HOST_MAX + 1];
    const char *http = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    cr_assert_eq(parse((const uint8_t *)http, strlen(http), host), PROXY_SNI_MALFORMED);
    cr_assert_eq(parse((const uint8_t *)"G", 1, host), PROXY_SNI_MALFORMED, "fails on 1 byte");
    uint8_t v2[] = {0x80, 0x2e, 0x01, 0x03, 0x01}; /* SSLv2-style hello */
    cr_assert_eq(parse(v2, sizeof v2, host), PROXY_SNI_MALFORMED);
    uint8_t alert[] = {21, 3, 3, 0, 2, 2, 40};
    cr_assert_eq(parse(alert, sizeof alert, host), PROXY_SNI_MALFORMED);
    uint8_t server_hello[] = {22, 3, 3, 0, 4, 2, 0, 0, 0};
    cr_assert_eq(parse(server_hello, sizeof server_hello, host), PROXY_SNI_MALFORMED);
    uint8_t zero_rec[] = {22, 3, 1, 0, 0};
    cr_assert_eq(parse(zero_rec, sizeof zero_rec, host), PROXY_SNI_MALFORMED);
    uint8_t big_rec[] = {22, 3, 1, 0x40, 0x01};
    cr_assert_eq(parse(big_rec, sizeof big_rec, host), PROXY_SNI_MALFORMED);
    cr_assert_eq(parse(NULL, 0, host), PROXY_SNI_NEED_MORE);
}

Test(proxy_sni, malformed_lengths)
{
    uint8_t e[300], b[1000], rec[2000];
    char host[PROXY_HOST_MAX + 1];
    size_t el = sni_ext(e, "x.example");
    size_t bl = body(b, e, el, true);
    size_t ext_off = bl - el; /* first extension's type */

    /* Each corruption, one at a time, of a correct hello. */
    struct {
        size_t off;
        uint8_t val;
        const char *what;
    } cases[] = {
        {34, 33, "session id longer than 32"},
        {34, 200, "session id past the end"},
        {35, 0xff, "cipher suites past the end"},
        {36, 3, "odd cipher suites length"},
        {39, 0, "no compression methods"},
        {ext_off - 2, 0xff, "extensions block past the end"},
        {ext_off + 2, 0xff, "extension longer than the block"},
        {ext_off + 4, 0xff, "server name list past the extension"},
        {ext_off + 7, 0xff, "name longer than the list"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t c[1000];
        memcpy(c, b, bl);
        c[cases[i].off] = cases[i].val;
        size_t n = wrap(rec, c, bl, 16384);
        cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED, "%s", cases[i].what);
    }
    /* extension block shorter than the data after it */
    uint8_t c[1000];
    memcpy(c, b, bl);
    put16(c + ext_off - 2, el - 1);
    size_t n = wrap(rec, c, bl, 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED);
    /* handshake length smaller than the body says */
    n = wrap(rec, b, 20, 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED);
}

Test(proxy_sni, bad_names)
{
    const char *names[] = {"bad name.example", "a..b", "x.example\x01", ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        uint8_t e[300], b[1000], rec[2000];
        char host[PROXY_HOST_MAX + 1];
        size_t n = wrap(rec, b, body(b, e, sni_ext(e, names[i]), true), 16384);
        cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED, "name \"%s\"", names[i]);
    }
    /* a NUL inside the name */
    uint8_t e[300], b[1000], rec[2000];
    char host[PROXY_HOST_MAX + 1];
    size_t el = sni_ext(e, "evil.example.good.example");
    e[9 + 12] = '\0';
    size_t n = wrap(rec, b, body(b, e, el, true), 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED);
}

Test(proxy_sni, duplicate_sni_extension)
{
    uint8_t e[600], b[1000], rec[2000];
    char host[PROXY_HOST_MAX + 1];
    size_t el = sni_ext(e, "a.example");
    el += sni_ext(e + el, "b.example");
    size_t n = wrap(rec, b, body(b, e, el, true), 16384);
    cr_assert_eq(parse(rec, n, host), PROXY_SNI_MALFORMED);
}

Test(proxy_sni, too_big)
{
    /* a handshake message announcing more than 16 KiB */
    uint8_t rec[] = {22, 3, 1, 0, 4, 1, 0x00, 0x40, 0x01};
    char host[PROXY_HOST_MAX + 1];
    cr_assert_eq(parse(rec, sizeof rec, host), PROXY_SNI_TOO_BIG);
    /* a real one padded to just under the cap is fine */
    static uint8_t e[17000], b[17500], out[18000];
    size_t el = sni_ext(e, "pad.example");
    size_t pad = PROXY_SNI_MAX_HELLO - 100 - el;
    put16(e + el, 21); /* padding extension */
    put16(e + el + 2, pad);
    memset(e + el + 4, 0, pad);
    el += 4 + pad;
    size_t bl = body(b, e, el, true);
    cr_assert(bl + 4 <= PROXY_SNI_MAX_HELLO);
    size_t n = wrap(out, b, bl, 16384);
    cr_assert_eq(parse(out, n, host), PROXY_SNI_OK);
    cr_assert_str_eq(host, "pad.example");
}
