/*
 * buf.h - a growable byte buffer with a hard maximum.
 *
 * Every buffer fed by untrusted input has a cap: appends past `max` fail with
 * -ENOBUFS and leave the buffer unchanged. The data is always NUL-terminated
 * (the terminator is not counted in len) so text can be used in place.
 */
#ifndef REBUNO_BASE_BUF_H
#define REBUNO_BASE_BUF_H

#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max; /* 0 = unbounded (only for trusted, internally produced data) */
};

void buf_init(struct buf *b, size_t max);
void buf_fini(struct buf *b);
void buf_reset(struct buf *b);
int buf_append(struct buf *b, const void *p, size_t n);   /* 0 or -ENOBUFS */
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Give the heap block to the caller (NUL-terminated); the buffer becomes empty. */
char *buf_steal(struct buf *b, size_t *len);

#endif
