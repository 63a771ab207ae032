/*
 * ca.h - the per-sandbox certificate authority and the signer thread that mints
 * leaf certificates with it.
 *
 * Each sandbox gets its own ECDSA P-256 CA, generated in memory when the sandbox's
 * proxy context is created. Only the CA's certificate ever leaves the process
 * (proxy_ca_write_cert_pem, for the sandbox's trust store); the private key lives
 * in this process's memory and is wiped when the CA is freed. Leaf certificates
 * (ECDSA P-256, SAN = the one host name, serverAuth, short validity) are signed
 * on request for hosts that have header rules.
 *
 * Signing is kept off the event loop (relayd's lesson, without the separate
 * process): the engine runs proxy_ca_mint() on a signer thread (worker.h) and
 * the CA's private key is only used there. A CA is reference-counted (loop
 * thread only) so a job in flight keeps it alive after its sandbox is gone.
 */
#ifndef REBUNO_PROXY_CA_H
#define REBUNO_PROXY_CA_H

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdint.h>

#include "base/err.h"

struct proxy_ca;

/* A new CA valid from one hour ago for valid_hours (1..8760). `name` goes into the
 * subject ("rebuno sandbox CA <name>"), at most 48 bytes are used. */
struct proxy_ca *proxy_ca_new(const char *name, int valid_hours, struct err *err);
struct proxy_ca *proxy_ca_ref(struct proxy_ca *ca);
void proxy_ca_unref(struct proxy_ca *ca); /* NULL is fine */

/* The CA certificate as PEM (caller frees), or written to path (mode 0644, via a
 * temporary file and rename). Never the key. */
char *proxy_ca_cert_pem(const struct proxy_ca *ca);
int proxy_ca_write_cert_pem(const struct proxy_ca *ca, const char *path, struct err *err);
/* Borrowed. */
X509 *proxy_ca_cert(const struct proxy_ca *ca);
/* The key pair every leaf of this CA carries (borrowed). */
EVP_PKEY *proxy_ca_leaf_key(const struct proxy_ca *ca);

/* Mint a leaf for host (a normalized host name) valid from one hour ago for
 * valid_hours, never past the CA's own expiry. Caller owns the result; NULL with
 * err on failure. Reads the CA only, so it may run on the signer thread. */
X509 *proxy_ca_mint(const struct proxy_ca *ca, const char *host, int valid_hours, struct err *err);

#endif
