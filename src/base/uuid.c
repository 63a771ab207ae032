/* uuid.c - UUIDv7 generation with a monotonic counter (see uuid.h). */
#include "base/uuid.h"
#include "base/clock.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

void uuid_v7(char out[UUID_STR_LEN])
{
    static int64_t last_ms;
    static uint16_t seq;
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        /* getrandom on Linux >= 3.17 does not fail for 16 bytes; keep going. */
    }
    int64_t ms = clock_now_ms();
    if (ms <= last_ms) {
        ms = last_ms;
        seq++;
        if (seq > 0x0fff) { /* counter exhausted: borrow the next millisecond */
            ms++;
            seq = 0;
        }
    } else {
        seq = (uint16_t)(((b[6] << 8) | b[7]) & 0x07ff); /* random start, room to grow */
    }
    last_ms = ms;
    for (int i = 0; i < 6; i++) b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)(0x70 | ((seq >> 8) & 0x0f));
    b[7] = (uint8_t)(seq & 0xff);
    b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
    snprintf(out, UUID_STR_LEN,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}

bool uuid_valid(const char *s)
{
    if (!s || strlen(s) != 36) return false;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return false;
        } else if (!isxdigit((unsigned char)s[i])) {
            return false;
        }
    }
    return true;
}
