/*
 * paths.c - lexical normalisation of client paths (see paths.h).
 *
 * Works on a copy in a fixed buffer: components are appended to out one at a time
 * and ".." truncates back to the previous '/', clamped at the root, exactly as
 * RESOLVE_IN_ROOT treats ".." at the root.
 */
#include "sandbox/core/paths.h"

#include <stdio.h>
#include <string.h>

int sbx_path_normalize(const char *in, const char *base, char *out, size_t outlen,
                       const char *field, struct err *err)
{
    if (!in || !*in) return err_invalid(err, field, "%s must not be empty", field);
    size_t inlen = strnlen(in, SBX_PATH_MAX + 1);
    if (inlen > SBX_PATH_MAX)
        return err_invalid(err, field, "%s is longer than %d bytes", field, SBX_PATH_MAX);
    if (outlen < 2) return err_internal(err, "path buffer too small");
    size_t n = 0;
    out[n++] = '/';
    out[n] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const char *s = pass == 0 ? (in[0] == '/' ? "" : base ? base : "/") : in;
        while (*s) {
            while (*s == '/')
                s++;
            if (!*s) break;
            size_t len = strcspn(s, "/");
            if (len > SBX_COMPONENT_MAX)
                return err_invalid(err, field, "a component of %s is longer than %d bytes", field,
                                   SBX_COMPONENT_MAX);
            if (len == 1 && s[0] == '.') {
                /* stay */
            } else if (len == 2 && s[0] == '.' && s[1] == '.') {
                while (n > 1 && out[n - 1] != '/')
                    n--;
                if (n > 1) n--; /* drop the separator too, unless it is the root */
                out[n] = '\0';
            } else {
                if (n + (n > 1) + len + 1 > outlen || n + (n > 1) + len > SBX_PATH_MAX)
                    return err_invalid(err, field, "%s is longer than %d bytes", field,
                                       SBX_PATH_MAX);
                if (n > 1) out[n++] = '/';
                memcpy(out + n, s, len);
                n += len;
                out[n] = '\0';
            }
            s += len;
        }
    }
    return 0;
}

void sbx_path_split(const char *norm, char *parent, size_t plen, const char **leaf)
{
    const char *slash = strrchr(norm, '/');
    if (!slash || norm[1] == '\0') {
        snprintf(parent, plen, ".");
        *leaf = "";
        return;
    }
    *leaf = slash + 1;
    size_t n = (size_t)(slash - norm);
    if (n == 0) {
        snprintf(parent, plen, ".");
        return;
    }
    if (n - 1 >= plen) n = plen; /* callers size parent for SBX_PATH_MAX; cannot happen */
    memcpy(parent, norm + 1, n - 1);
    parent[n - 1] = '\0';
}

const char *sbx_path_rel(const char *norm)
{
    return norm[0] == '/' && norm[1] ? norm + 1 : ".";
}
