/*
 * ca.c - per-sandbox CA, leaf minting and the signer thread (see ca.h).
 *
 * Certificates are built with OpenSSL's X509 API and the v3 extension config
 * strings (the same strings `openssl x509 -extfile` takes), which keeps each
 * certificate's profile readable in one place:
 *   CA:   basicConstraints=critical,CA:TRUE,pathlen:0  keyUsage=critical,keyCertSign,cRLSign
 *   leaf: basicConstraints=critical,CA:FALSE  keyUsage=critical,digitalSignature
 *         extendedKeyUsage=serverAuth  subjectAltName=DNS:<host>  + key identifiers
 * Serial numbers are 127 random bits. All leaves of one CA share one P-256 key
 * pair: minting is then one ECDSA signature, and the key is no more exposed than
 * the CA's own.
 *
 * proxy_ca_mint() only reads the CA, so the engine runs it on its signer thread
 * (a one-thread worker.h pool) while the loop keeps relaying.
 */
#include "proxy/ca.h"

#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct proxy_ca {
    int refs;
    EVP_PKEY *key; /* the CA's private key: signer thread only (and free) */
    X509 *cert;
    EVP_PKEY *leaf_key; /* shared by all leaves */
    time_t not_after;
};

static int ossl_fail(struct err *err, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "unknown error";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return err_internal(err, "%s: %s", what, buf);
}

static bool add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex) return false;
    bool ok = X509_add_ext(cert, ex, -1) == 1;
    X509_EXTENSION_free(ex);
    return ok;
}

static bool random_serial(X509 *cert)
{
    unsigned char b[16];
    if (RAND_bytes(b, sizeof b) != 1) return false;
    b[0] &= 0x7f; /* positive */
    b[0] |= 0x40; /* and 16 bytes long */
    BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
    bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != NULL;
    BN_free(bn);
    return ok;
}

static bool set_validity(X509 *cert, time_t from, time_t to)
{
    return X509_time_adj_ex(X509_getm_notBefore(cert), 0, 0, &from) &&
           X509_time_adj_ex(X509_getm_notAfter(cert), 0, 0, &to);
}

struct proxy_ca *proxy_ca_new(const char *name, int valid_hours, struct err *err)
{
    if (valid_hours < 1 || valid_hours > 8760) {
        err_invalid(err, "ca_valid_hours", "CA validity must be 1..8760 hours");
        return NULL;
    }
    struct proxy_ca *ca = xcalloc(1, sizeof *ca);
    ca->refs = 1;
    ca->key = EVP_EC_gen("P-256");
    ca->leaf_key = EVP_EC_gen("P-256");
    ca->cert = X509_new();
    if (!ca->key || !ca->leaf_key || !ca->cert) {
        ossl_fail(err, "generating the sandbox CA key");
        goto fail;
    }
    time_t now = time(NULL);
    ca->not_after = now + (time_t)valid_hours * 3600;
    char cn[96];
    snprintf(cn, sizeof cn, "rebuno sandbox CA %.48s", name && *name ? name : "");
    X509_NAME *subj = X509_get_subject_name(ca->cert);
    if (X509_set_version(ca->cert, 2) != 1 || !random_serial(ca->cert) ||
        !set_validity(ca->cert, now - 3600, ca->not_after) ||
        X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_ASC, (const unsigned char *)"rebuno", -1, -1,
                                   0) != 1 ||
        X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(ca->cert, subj) != 1 || X509_set_pubkey(ca->cert, ca->key) != 1 ||
        !add_ext(ca->cert, ca->cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
        !add_ext(ca->cert, ca->cert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !add_ext(ca->cert, ca->cert, NID_subject_key_identifier, "hash") ||
        !add_ext(ca->cert, ca->cert, NID_authority_key_identifier, "keyid:always") ||
        X509_sign(ca->cert, ca->key, EVP_sha256()) <= 0) {
        ossl_fail(err, "building the sandbox CA certificate");
        goto fail;
    }
    return ca;
fail:
    EVP_PKEY_free(ca->key);
    EVP_PKEY_free(ca->leaf_key);
    X509_free(ca->cert);
    free(ca);
    return NULL;
}

struct proxy_ca *proxy_ca_ref(struct proxy_ca *ca)
{
    ca->refs++;
    return ca;
}

void proxy_ca_unref(struct proxy_ca *ca)
{
    if (!ca || --ca->refs > 0) return;
    EVP_PKEY_free(ca->key); /* OpenSSL clears private key material on free */
    EVP_PKEY_free(ca->leaf_key);
    X509_free(ca->cert);
    free(ca);
}

X509 *proxy_ca_cert(const struct proxy_ca *ca)
{
    return ca->cert;
}

EVP_PKEY *proxy_ca_leaf_key(const struct proxy_ca *ca)
{
    return ca->leaf_key;
}

char *proxy_ca_cert_pem(const struct proxy_ca *ca)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *out = NULL;
    if (b && PEM_write_bio_X509(b, ca->cert) == 1) {
        char *p;
        long n = BIO_get_mem_data(b, &p);
        if (n > 0) out = xstrndup(p, (size_t)n);
    }
    BIO_free(b);
    ASSERT(out != NULL);
    return out;
}

int proxy_ca_write_cert_pem(const struct proxy_ca *ca, const char *path, struct err *err)
{
    char *pem = proxy_ca_cert_pem(ca);
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        err_set(err, 500, "internal_error", "", "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    size_t n = strlen(pem), off = 0;
    while (off < n) {
        ssize_t w = write(fd, pem + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err_set(err, 500, "internal_error", "", "%s: write failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
        off += (size_t)w;
    }
    if (fchmod(fd, 0644) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        err_set(err, 500, "internal_error", "", "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    free(pem);
    return rc;
}

X509 *proxy_ca_mint(const struct proxy_ca *ca, const char *host, int valid_hours, struct err *err)
{
    X509 *leaf = X509_new();
    if (!leaf) {
        ossl_fail(err, "allocating a leaf certificate");
        return NULL;
    }
    time_t now = time(NULL), to = now + (time_t)valid_hours * 3600;
    if (to > ca->not_after) to = ca->not_after;
    char san[320];
    X509_NAME *subj = X509_get_subject_name(leaf);
    bool ok = X509_set_version(leaf, 2) == 1 && random_serial(leaf) &&
              set_validity(leaf, now - 3600, to) &&
              X509_set_issuer_name(leaf, X509_get_subject_name(ca->cert)) == 1 &&
              X509_set_pubkey(leaf, ca->leaf_key) == 1;
    /* CN is limited to 64 characters; the SAN is what clients check anyway, and it is
     * made critical when there is no CN (RFC 5280: strict verifiers insist). */
    bool cn = strlen(host) <= 64;
    if (cn)
        snprintf(san, sizeof san, "DNS:%s", host);
    else
        snprintf(san, sizeof san, "critical,DNS:%s", host);
    ok = ok && X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_ASC,
                                          (const unsigned char *)"rebuno sandbox", -1, -1, 0) == 1;
    if (ok && cn)
        ok = X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)host, -1,
                                        -1, 0) == 1;
    ok = ok && add_ext(leaf, ca->cert, NID_basic_constraints, "critical,CA:FALSE") &&
         add_ext(leaf, ca->cert, NID_key_usage, "critical,digitalSignature") &&
         add_ext(leaf, ca->cert, NID_ext_key_usage, "serverAuth") &&
         add_ext(leaf, ca->cert, NID_subject_alt_name, san) &&
         add_ext(leaf, ca->cert, NID_subject_key_identifier, "hash") &&
         add_ext(leaf, ca->cert, NID_authority_key_identifier, "keyid:always") &&
         X509_sign(leaf, ca->key, EVP_sha256()) > 0;
    if (!ok) {
        ossl_fail(err, "minting a leaf certificate");
        X509_free(leaf);
        return NULL;
    }
    return leaf;
}
