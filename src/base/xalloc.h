/*
 * xalloc.h - allocation that aborts on failure, and always-on assertions.
 *
 * Allocation failure is not a recoverable condition for a daemon of this size,
 * so no code path handles NULL from these. ASSERT stays on in release builds and
 * prints file:line before aborting.
 */
#ifndef REBUNO_BASE_XALLOC_H
#define REBUNO_BASE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Formatted allocation; the caller owns the result. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define ASSERT(x) ((x) ? (void)0 : assert_fail(#x, __FILE__, __LINE__))

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
