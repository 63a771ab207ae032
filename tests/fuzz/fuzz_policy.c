/* fuzz_policy.c - libFuzzer target: the policy loader on hostile YAML, then one evaluation.
 * Invariants: never crashes or leaks; every error message starts with the file name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct err err = ERR_INIT;
    struct policy *p = policy_load_string((const char *)data, size, "fuzz.yaml", 0, &err);
    if (!p) {
        if (strncmp(err.msg, "fuzz.yaml", 9) != 0) abort();
        return 0;
    }
    json_t *args = json_pack("{s:s, s:i}", "command", "ls -la", "n", 3);
    struct policy_input in = {"tool_call", "shell", "coder", args};
    struct policy_result r;
    policy_eval(p, &in, &r);
    json_decref(args);
    policy_free(p);
    return 0;
}
