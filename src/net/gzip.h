/*
 * gzip.h - gzip content-coding of HTTP replies (zlib): whether a client takes it, and
 * compressing one whole reply body.
 */
#ifndef REBUNO_NET_GZIP_H
#define REBUNO_NET_GZIP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/* Replies smaller than this go out as they are (the gzip frame would not pay). */
#define GZIP_MIN_BYTES 1024

/* Does an Accept-Encoding value accept gzip ("gzip", "x-gzip" or "*", without q=0)? */
bool gzip_accepted(const char *accept_encoding);
/* Is a reply of this Content-Type worth compressing (JSON, text, JavaScript, SVG)? */
bool gzip_type_ok(const char *content_type);
/* The gzip stream of data into out (reset first). 0, or -1 when zlib failed. */
int gzip_compress(const void *data, size_t len, struct buf *out);

#endif
