/* fuzz_canonical_json.c - libFuzzer target: canonical JSON of hostile step args.
 * Invariants: never crashes; output, when produced, is valid JSON that canonicalizes to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "kernel/identity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf out, again;
    struct err err = ERR_INIT;
    buf_init(&out, 8 * 1024 * 1024);
    buf_init(&again, 8 * 1024 * 1024);
    if (identity_canonical_json((const char *)data, size, &out, &err) == 0) {
        if (identity_canonical_json(out.data, out.len, &again, &err) != 0 || again.len != out.len ||
            memcmp(again.data, out.data, out.len) != 0)
            abort(); /* canonical form must be a fixed point */
    }
    const char *v;
    size_t vlen;
    identity_find_member((const char *)data, size, "args", &v, &vlen, &err);
    buf_fini(&out);
    buf_fini(&again);
    return 0;
}
