/* fuzz_registry.c - libFuzzer target: what a registry sends that the client parses itself
 * (src/sandbox/storage/registry.c): WWW-Authenticate challenge parameters and auth.json
 * keys. Invariants: no crash, no overread (ASan), the value always fits and is
 * NUL-terminated within the buffer given, whatever its size. The manifests and indexes a
 * registry sends are oci.c's (fuzz_oci.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/storage/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const char *const keys[] = {"realm", "service", "scope", "error", ""};
    const char *key = keys[data[0] % 5];
    size_t outsz = (size_t)(data[0] >> 3) + 1; /* 1..32: truncation paths too */
    char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    char *out = malloc(outsz);
    if (reg_challenge_param(s, key, out, outsz) && strnlen(out, outsz) >= outsz) abort();
    char host[256];
    reg_auth_key_host(s, host, sizeof host);
    if (strnlen(host, sizeof host) >= sizeof host) abort();
    free(out);
    free(s);
    return 0;
}
