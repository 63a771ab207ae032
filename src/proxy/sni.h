/*
 * sni.h - find the server name in a TLS ClientHello, from the first bytes a
 * client sends, without consuming them.
 *
 * The parser is given everything received so far and says whether it needs more.
 * The ClientHello may be split over several TLS records and over any number of
 * reads; it is capped at PROXY_SNI_MAX_HELLO bytes of handshake message. Every
 * length is checked against what encloses it; anything inconsistent is malformed.
 * Pure: no I/O, no allocation.
 */
#ifndef REBUNO_PROXY_SNI_H
#define REBUNO_PROXY_SNI_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/policy.h"

#define PROXY_SNI_MAX_HELLO (16 * 1024)

enum proxy_sni_result {
    PROXY_SNI_OK,        /* host filled (normalized: lowercase, no trailing dot) */
    PROXY_SNI_NEED_MORE, /* a prefix of a plausible ClientHello: read more */
    PROXY_SNI_NONE,      /* a complete ClientHello without a server_name */
    PROXY_SNI_MALFORMED, /* not TLS, not a ClientHello, bad lengths, bad name */
    PROXY_SNI_TOO_BIG,   /* larger than PROXY_SNI_MAX_HELLO */
};

/* host needs PROXY_HOST_MAX + 1 bytes. */
enum proxy_sni_result proxy_sni_parse(const uint8_t *data, size_t len, char *host);

#endif
