/* buf.c - capped growable buffer (see buf.h). */
#include "base/buf.h"
#include "base/xalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

void buf_fini(struct buf *b)
{
    free(b->data);
    buf_init(b, b->max);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

static int reserve(struct buf *b, size_t extra)
{
    if (extra > (size_t)-1 - b->len - 1) return -ENOBUFS;
    size_t need = b->len + extra + 1;
    if (b->max && b->len + extra > b->max) return -ENOBUFS;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (reserve(b, n) < 0) return -ENOBUFS;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    int r = buf_append(b, s, (size_t)n);
    free(s);
    return r;
}

char *buf_steal(struct buf *b, size_t *len)
{
    if (reserve(b, 0) < 0) return NULL;
    char *p = b->data;
    if (len) *len = b->len;
    buf_init(b, b->max);
    return p;
}
