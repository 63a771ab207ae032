/* err.c - filling and wrapping struct err (see err.h). */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

void err_clear(struct err *e)
{
    e->status = 0;
    e->code[0] = e->field[0] = e->msg[0] = '\0';
}

int err_vset(struct err *e, int status, const char *code, const char *field, const char *fmt,
             va_list ap)
{
    if (!e) return -1;
    e->status = status;
    snprintf(e->code, sizeof e->code, "%s", code ? code : "internal_error");
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    return -1;
}

int err_set(struct err *e, int status, const char *code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(e, status, code, field, fmt, ap);
    va_end(ap);
    return -1;
}

int err_wrap(struct err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char ctx[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* Truncation is fine: the message is for people, the code stays exact. */
    size_t n = strlen(ctx);
    if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
    memcpy(e->msg, ctx, n);
    memcpy(e->msg + n, ": ", 2);
    size_t room = sizeof e->msg - n - 3, m = strnlen(old, sizeof old);
    if (m > room) m = room;
    memcpy(e->msg + n + 2, old, m);
    e->msg[n + 2 + m] = '\0';
    return -1;
}
