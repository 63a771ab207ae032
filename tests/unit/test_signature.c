/* test_signature.c - upstream's v1 request signature test vector and the webhook form. */
#include <criterion/criterion.h>
#include <string.h>

#include "api/signature.h"

Test(signature, upstream_v1_vector)
{
    static const char body[] = "{\"kind\":\"tool_call\",\"target\":\"send_email\",\"args\":{\"to\":\"ops@example.com\"},"
                               "\"idempotency\":\"safe_to_retry\"}";
    char out[SIG_HEX_LEN];
    sig_request_v1("test-secret", "POST", "/v0/executions/018f3a2b-4c5d-7e6f-8a9b-0c1d2e3f4a5b/steps", "1700000000",
                   "01920000-0000-7000-8000-000000000001", "3", body, strlen(body), out);
    cr_assert_str_eq(out, "017dff4039ba40e90d3d8d566fdf51db427672f92d45ef41b738672238ea0058");
    cr_assert(sig_equal(out, "017dff4039ba40e90d3d8d566fdf51db427672f92d45ef41b738672238ea0058"));
    cr_assert(!sig_equal(out, "017dff4039ba40e90d3d8d566fdf51db427672f92d45ef41b738672238ea0059"));
    cr_assert(!sig_equal(out, "017dff"));
}

Test(signature, webhook_body)
{
    char out[SIG_HEX_LEN];
    /* RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?" */
    sig_body("Jefe", "what do ya want for nothing?", 28, out);
    cr_assert_str_eq(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}
