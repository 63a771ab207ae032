/* log.c - logfmt lines on stderr (see log.h). */
#include "base/log.h"
#include "base/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static enum log_level min_level = LOG_INFO;
static const char *names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level lvl)
{
    min_level = lvl;
}

int log_parse_level(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return -EINVAL;
}

void log_emit(enum log_level lvl, const char *msg, const char *kvfmt, ...)
{
    if (lvl < min_level) return;
    char ts[40], kv[1024] = "";
    clock_format_iso(clock_now_ms(), ts, sizeof ts);
    if (kvfmt && *kvfmt) {
        va_list ap;
        va_start(ap, kvfmt);
        vsnprintf(kv, sizeof kv, kvfmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "ts=%s level=%s msg=\"%s\"%s%s\n", ts, names[lvl], msg, *kv ? " " : "", kv);
}
