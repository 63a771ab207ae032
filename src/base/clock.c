/* clock.c - time helpers (see clock.h). */
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void clock_format_iso(int64_t ms, char *out, size_t n)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

int clock_parse_iso(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p) return -EINVAL;
    int frac = 0, digits = 0;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (digits < 3) frac = frac * 10 + (*p - '0');
            digits++;
            p++;
        }
        if (digits == 0) return -EINVAL;
        while (digits < 3) frac *= 10, digits++;
    }
    if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0) return -EINVAL;
    time_t t = timegm(&tm);
    if (t == (time_t)-1) return -EINVAL;
    *ms = (int64_t)t * 1000 + frac;
    return 0;
}
