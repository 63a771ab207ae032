/*
 * ring.c - bounded output log with absolute offsets (see ring.h).
 *
 * A circular buffer that starts small and doubles (linearising on growth) until it
 * reaches cap; after that new bytes overwrite the oldest ones.
 */
#include "sandbox/runtime/ring.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void sbx_ring_init(struct sbx_ring *r, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->cap = cap ? cap : 1;
}

void sbx_ring_fini(struct sbx_ring *r)
{
    free(r->data);
    r->data = NULL;
    r->alloc = r->len = r->head = 0;
}

static void grow(struct sbx_ring *r, size_t need)
{
    size_t a = r->alloc ? r->alloc : 4096;
    while (a < need && a < r->cap)
        a = a > r->cap / 2 ? r->cap : a * 2;
    if (a > r->cap) a = r->cap;
    if (a <= r->alloc) return;
    char *d = xmalloc(a);
    /* linearise: oldest byte first */
    size_t first = r->alloc - r->head < r->len ? r->alloc - r->head : r->len;
    if (r->len) {
        memcpy(d, r->data + r->head, first);
        memcpy(d + first, r->data, r->len - first);
    }
    free(r->data);
    r->data = d;
    r->alloc = a;
    r->head = 0;
}

void sbx_ring_write(struct sbx_ring *r, const void *p, size_t n)
{
    const char *s = p;
    r->total += n;
    if (n >= r->cap) { /* only the tail survives */
        s += n - r->cap;
        n = r->cap;
        if (r->alloc < r->cap) grow(r, r->cap);
        memcpy(r->data, s, n);
        r->head = 0;
        r->len = n;
        return;
    }
    if (r->len + n > r->alloc && r->alloc < r->cap) grow(r, r->len + n);
    for (size_t done = 0; done < n;) {
        size_t tail = (r->head + r->len) % r->alloc;
        if (r->len == r->alloc) { /* full: drop the oldest byte(s) */
            size_t k = n - done;
            if (k > r->alloc - r->head) k = r->alloc - r->head;
            memcpy(r->data + r->head, s + done, k);
            r->head = (r->head + k) % r->alloc;
            done += k;
            continue;
        }
        size_t room = r->alloc - r->len;
        size_t k = n - done;
        if (k > room) k = room;
        if (k > r->alloc - tail) k = r->alloc - tail;
        memcpy(r->data + tail, s + done, k);
        r->len += k;
        done += k;
    }
}

uint64_t sbx_ring_start(const struct sbx_ring *r)
{
    return r->total - r->len;
}

size_t sbx_ring_read(const struct sbx_ring *r, uint64_t off, void *out, size_t max,
                     uint64_t *from)
{
    uint64_t start = sbx_ring_start(r);
    if (off < start) off = start;
    if (from) *from = off;
    if (off >= r->total || max == 0) return 0;
    size_t skip = (size_t)(off - start);
    size_t n = r->len - skip;
    if (n > max) n = max;
    size_t pos = (r->head + skip) % r->alloc;
    size_t first = r->alloc - pos < n ? r->alloc - pos : n;
    memcpy(out, r->data + pos, first);
    memcpy((char *)out + first, r->data, n - first);
    return n;
}
