/*
 * ring.h - a command's output log: the last `cap` bytes of a stream, addressed by
 * absolute byte offsets (pure, no I/O).
 *
 * Offsets count every byte the stream ever produced, so a client that re-attaches
 * with "from byte N" gets exactly what it missed while it is still held; when the
 * log had to drop old bytes, a read reports where the held data really starts.
 * Memory grows with use up to cap and never beyond.
 */
#ifndef REBUNO_SANDBOX_RING_H
#define REBUNO_SANDBOX_RING_H

#include <stddef.h>
#include <stdint.h>

struct sbx_ring {
    char *data;
    size_t alloc; /* bytes allocated (<= cap) */
    size_t cap;   /* most bytes held */
    size_t head;  /* index of the oldest held byte */
    size_t len;   /* bytes held */
    uint64_t total; /* bytes ever written: held range is [total - len, total) */
};

void sbx_ring_init(struct sbx_ring *r, size_t cap);
void sbx_ring_fini(struct sbx_ring *r);
void sbx_ring_write(struct sbx_ring *r, const void *p, size_t n);
/* Offset of the oldest held byte. */
uint64_t sbx_ring_start(const struct sbx_ring *r);
/*
 * Copy up to max bytes starting at offset off into out. An offset before the held
 * range starts at the oldest held byte; one at or past the end copies nothing. *from
 * (may be NULL) gets the offset of the first byte copied. Returns the count.
 */
size_t sbx_ring_read(const struct sbx_ring *r, uint64_t off, void *out, size_t max,
                     uint64_t *from);

#endif
