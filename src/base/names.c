/*
 * names.c - see names.h. A table-free check: names are short and checked once per
 * request.
 */
#include "base/names.h"

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
