/*
 * test_uuid.c - unit tests for src/base/uuid.c: UUIDv7 layout (RFC 9562 version and
 * variant bits, the millisecond timestamp in the first 48 bits), ids made one after
 * another sort in the order they were made (the kernel lists and pages by id), and
 * no id repeats, including across the per-millisecond counter running out.
 */
#include "base/uuid.h"
#include "base/clock.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MANY 100000

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The 48-bit Unix millisecond timestamp in the first 12 hex digits. */
static int64_t stamp_ms(const char *id)
{
    char hex[13];
    memcpy(hex, id, 8);
    memcpy(hex + 8, id + 9, 4);
    hex[12] = '\0';
    return strtoll(hex, NULL, 16);
}

Test(uuid, layout_version_and_variant)
{
    for (int i = 0; i < 1000; i++) {
        char id[UUID_STR_LEN];
        uuid_v7(id);
        cr_assert_eq(strlen(id), 36, "%s", id);
        cr_assert(uuid_valid(id), "%s", id);
        for (int j = 0; j < 36; j++) {
            if (j == 8 || j == 13 || j == 18 || j == 23) cr_assert_eq(id[j], '-', "%s", id);
            else cr_assert(isxdigit((unsigned char)id[j]) && !isupper((unsigned char)id[j]), "%s", id);
        }
        cr_assert_eq(id[14], '7', "version nibble must be 7: %s", id);
        cr_assert(strchr("89ab", id[19]) != NULL, "variant bits must be 10: %s", id);
    }
}

Test(uuid, timestamp_is_creation_time)
{
    int64_t before = clock_now_ms();
    char id[UUID_STR_LEN];
    uuid_v7(id);
    int64_t after = clock_now_ms();
    int64_t ms = stamp_ms(id);
    /* Earlier ids in this process may have borrowed a millisecond or two ahead when their
     * counter ran out, never more than a few. */
    cr_assert(ms >= before && ms <= after + 100, "stamp %lld not in [%lld, %lld]", (long long)ms,
              (long long)before, (long long)after);
}

Test(uuid, ids_in_sequence_sort_in_creation_order_and_are_unique)
{
    /* Far more than fit in one millisecond's counter (at most 4096), so the borrow path
     * runs too. */
    char **ids = malloc(MANY * sizeof *ids);
    cr_assert_not_null(ids);
    for (int i = 0; i < MANY; i++) {
        ids[i] = malloc(UUID_STR_LEN);
        cr_assert_not_null(ids[i]);
        uuid_v7(ids[i]);
        if (i > 0)
            cr_assert(strcmp(ids[i - 1], ids[i]) < 0, "id %d (%s) does not sort after id %d (%s)", i,
                      ids[i], i - 1, ids[i - 1]);
        cr_assert(stamp_ms(ids[i]) >= (i ? stamp_ms(ids[i - 1]) : 0));
    }
    char **sorted = malloc(MANY * sizeof *sorted);
    cr_assert_not_null(sorted);
    memcpy(sorted, ids, MANY * sizeof *ids);
    qsort(sorted, MANY, sizeof *sorted, cmp_str);
    for (int i = 0; i < MANY; i++) {
        cr_assert_eq(sorted[i], ids[i], "sorting changed the order at %d", i);
        if (i > 0) cr_assert_str_neq(sorted[i - 1], sorted[i], "duplicate id %s", sorted[i]);
    }
    for (int i = 0; i < MANY; i++) free(ids[i]);
    free(ids);
    free(sorted);
}

Test(uuid, random_bits_differ)
{
    /* The last 62 bits are random: two ids made in the same millisecond differ there. */
    char a[UUID_STR_LEN], b[UUID_STR_LEN];
    uuid_v7(a);
    uuid_v7(b);
    cr_assert_str_neq(a + 19, b + 19, "%s and %s share their random tail", a, b);
}

Test(uuid, valid_rejects_malformed)
{
    cr_assert(uuid_valid("0192f1a0-0000-7000-8000-000000000000"));
    cr_assert(uuid_valid("0192F1A0-0000-7000-8000-00000000ABCD"));
    const char *bad[] = {"", "w1", "0192f1a0-0000-7000-8000-00000000000",
                         "0192f1a0-0000-7000-8000-0000000000000", "0192f1a000000-7000-8000-000000000000",
                         "0192f1a0-0000-7000-8000-00000000000g", "0192f1a0_0000-7000-8000-000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) cr_assert_not(uuid_valid(bad[i]), "%s", bad[i]);
    cr_assert_not(uuid_valid(NULL));
}
