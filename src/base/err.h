/*
 * err.h - the error object every fallible domain/API function fills.
 *
 * Low-level helpers return 0 or -errno and never print. Domain and API level
 * functions take `struct err *err` last, return -1 on failure and fill it with an
 * HTTP status, a stable machine code ("validation_error", "not_found", ...), the
 * offending field (if any) and a human message. Exactly one place renders an
 * error: the HTTP adapter (as {"error":{"code","message","field"}}) or the CLI's
 * main. Callers may prepend context with err_wrap().
 */
#ifndef REBUNO_BASE_ERR_H
#define REBUNO_BASE_ERR_H

#include <stdarg.h>

struct err {
    int status;       /* HTTP status this maps to (400, 404, 409, 500 ...) */
    char code[40];    /* stable machine-readable code */
    char field[96];   /* offending input field, "" when not about one field */
    char msg[512];    /* human message saying what is wrong and what to do */
};

#define ERR_INIT {0, "", "", ""}

void err_clear(struct err *e);
/* Fill e; always returns -1 so callers can `return err_set(...)`. */
int err_set(struct err *e, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int err_vset(struct err *e, int status, const char *code, const char *field, const char *fmt,
             va_list ap);
/* Prepend "context: " to the message. Returns -1. */
int err_wrap(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Shorthands for the common codes. */
#define err_invalid(e, field, ...) err_set((e), 400, "validation_error", (field), __VA_ARGS__)
#define err_notfound(e, ...) err_set((e), 404, "not_found", "", __VA_ARGS__)
#define err_conflict(e, ...) err_set((e), 409, "conflict", "", __VA_ARGS__)
#define err_internal(e, ...) err_set((e), 500, "internal_error", "", __VA_ARGS__)

#endif
