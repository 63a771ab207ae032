/* signature.c - HMAC-SHA256 request and webhook signatures (see signature.h). */
#include "api/signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

#include "base/buf.h"

static void hex(const unsigned char *md, unsigned n, char out[SIG_HEX_LEN])
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n && i < 32; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[64] = '\0';
}

void sig_request_v1(const char *secret, const char *method, const char *target, const char *timestamp,
                    const char *dispatch_id, const char *attempt, const char *body, size_t body_len,
                    char out[SIG_HEX_LEN])
{
    const char *lines[] = {"rebuno-request-v1", method, target, timestamp, dispatch_id, attempt};
    struct buf m;
    buf_init(&m, 0); /* every part is bounded by the HTTP limits */
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        buf_puts(&m, lines[i] ? lines[i] : "");
        buf_puts(&m, "\n");
    }
    if (body_len) buf_append(&m, body, body_len);
    sig_body(secret, m.data, m.len, out);
    buf_fini(&m);
}

void sig_body(const char *secret, const char *body, size_t body_len, char out[SIG_HEX_LEN])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)(body ? body : ""), body_len, md, &n);
    hex(md, n, out);
}

bool sig_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    return n == 64 && strlen(b) == 64 && CRYPTO_memcmp(a, b, 64) == 0;
}
