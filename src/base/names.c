/*
 * names.c - see names.h. A table-free check: names are short and checked once per
 * request.
 */
#include "base/names.h"

#include <stdio.h>
#include <string.h>

bool name_valid(const char *s, size_t max, const char *punct)
{
    if (!s || !*s) return false;
    size_t n = 0;
    for (const char *p = s; *p; p++, n++) {
        char ch = *p;
        if (n >= max) return false;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) continue;
        if (!strchr(punct, ch)) return false;
    }
    return true;
}

bool name_http_url_valid(const char *url, char *why, size_t why_len)
{
    const char *host;
    if (!url || strncmp(url, "http://", 7) == 0) host = url ? url + 7 : NULL;
    else if (strncmp(url, "https://", 8) == 0) host = url + 8;
    else host = NULL;
    if (!host) {
        snprintf(why, why_len, "must start with http:// or https://");
        return false;
    }
    size_t n = strlen(url);
    if (n > NAME_URL_MAX) {
        snprintf(why, why_len, "is %zu bytes long; at most %d", n, NAME_URL_MAX);
        return false;
    }
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f) {
            snprintf(why, why_len, "contains a space or a control or non-ASCII byte at %zu", (size_t)(p - url));
            return false;
        }
    size_t hl = strcspn(host, ":/?#");
    if (hl == 0 || strchr(host, '@')) {
        snprintf(why, why_len, "needs a host (and no user:password@), e.g. http://127.0.0.1:5000/webhook");
        return false;
    }
    if (host[hl] == ':') {
        const char *p = host + hl + 1;
        long port = 0;
        size_t digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++) port = port * 10 + (*p - '0');
        if (!digits || port < 1 || port > 65535 || (*p && *p != '/' && *p != '?')) {
            snprintf(why, why_len, "has a bad port; use 1..65535");
            return false;
        }
    }
    return true;
}
