/* clock.h - wall-clock milliseconds and RFC 3339 formatting (UTC, millisecond precision). */
#ifndef REBUNO_BASE_CLOCK_H
#define REBUNO_BASE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

int64_t clock_now_ms(void);          /* CLOCK_REALTIME in ms since the epoch */
int64_t clock_mono_ms(void);         /* CLOCK_MONOTONIC in ms */
/* "2026-11-29T19:45:52.123Z"; out needs 25 bytes. */
void clock_format_iso(int64_t ms, char *out, size_t n);
/* Parse the format above (also without fraction, or with +00:00). 0 or -EINVAL. */
int clock_parse_iso(const char *s, int64_t *ms);

#endif
