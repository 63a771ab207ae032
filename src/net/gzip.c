/*
 * gzip.c - gzip content-coding of HTTP replies: Accept-Encoding parsing and one-shot
 * compression of a reply body with zlib.
 */
#include "net/gzip.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define GZIP_LEVEL 6   /* zlib's default: at 4 MB of JSON a few ms more than 1, ~15% smaller */
#define GZIP_WBITS 31  /* 15 (32 KiB window) + 16: a gzip header, not zlib's */

/* q of one Accept-Encoding member's parameters (";q=0.5"); 1 when absent. */
static double member_q(const char *p, const char *end)
{
    while (p < end) {
        while (p < end && (*p == ';' || *p == ' ' || *p == '\t')) p++;
        if (end - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
            char num[16];
            size_t n = 0;
            for (p += 2; p < end && n + 1 < sizeof num && (isdigit((unsigned char)*p) || *p == '.'); p++)
                num[n++] = *p;
            num[n] = '\0';
            return n ? strtod(num, NULL) : 0;
        }
        while (p < end && *p != ';') p++;
    }
    return 1;
}

bool gzip_accepted(const char *ae)
{
    if (!ae) return false;
    bool gzip = false, star = false, gzip_named = false;
    const char *p = ae;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        const char *tok = p;
        while (p < end && *p != ';' && *p != ' ' && *p != '\t') p++;
        size_t n = (size_t)(p - tok);
        double q = member_q(p, end);
        if ((n == 4 && strncasecmp(tok, "gzip", 4) == 0) || (n == 6 && strncasecmp(tok, "x-gzip", 6) == 0)) {
            gzip_named = true;
            gzip = gzip || q > 0;
        } else if (n == 1 && *tok == '*') {
            star = q > 0;
        }
        p = *end ? end + 1 : end;
    }
    return gzip || (star && !gzip_named);
}

bool gzip_type_ok(const char *ct)
{
    if (!ct) return false;
    static const char *const types[] = {"application/json", "application/javascript", "text/",
                                        "image/svg+xml", "application/x-ndjson", NULL};
    for (int i = 0; types[i]; i++)
        if (strncasecmp(ct, types[i], strlen(types[i])) == 0) return true;
    return false;
}

int gzip_compress(const void *data, size_t len, struct buf *out)
{
    if (len > UINT_MAX) return -1; /* one deflate call takes a uInt of input */
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, GZIP_LEVEL, Z_DEFLATED, GZIP_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    buf_reset(out);
    int rc = 0;
    char chunk[16384];
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    for (;;) {
        z.next_out = (Bytef *)chunk;
        z.avail_out = sizeof chunk;
        int zr = deflate(&z, Z_FINISH);
        if (zr == Z_STREAM_ERROR) {
            rc = -1;
            break;
        }
        if (buf_append(out, chunk, sizeof chunk - z.avail_out) < 0) {
            rc = -1;
            break;
        }
        if (zr == Z_STREAM_END) break;
    }
    deflateEnd(&z);
    return rc;
}
