/*
 * test_vercel.c - unit tests for the pure parts of the Vercel-compatible endpoint
 * (src/sandbox/vercel/): session ids (hostile ones included), the UTF-8 boundary that
 * keeps a split character out of an NDJSON line, the network policy shapes the SDK
 * sends, and the epoch-ms times made from the core's ISO strings.
 */
#include "sandbox/vercel/vc_int.h"

#include <criterion/criterion.h>
#include <string.h>

Test(vercel, sid_roundtrip_and_hostile)
{
    char id[40];
    int64_t seq = -1;
    cr_assert_eq(vc_sid_parse("sbs_01a23526-210a-7372-8b53-99a382b4ec34_12", id, &seq), 0);
    cr_assert_str_eq(id, "01a23526-210a-7372-8b53-99a382b4ec34");
    cr_assert_eq(seq, 12);
    static const char *const bad[] = {NULL, "", "sbs_", "sbs__1", "sbs_x_", "sbs_x_-1", "sbs_x_1a",
                                      "sbx_abc_1", "sbs_abc", "sbs_abc_99999999999999999999999",
                                      "sbs_0123456789012345678901234567890123456789_1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(vc_sid_parse(bad[i], id, &seq), -1, "%s", bad[i] ? bad[i] : "(null)");
}

Test(vercel, utf8_boundary)
{
    const unsigned char snow[] = {'a', 0xE2, 0x98, 0x83}; /* a + U+2603 */
    cr_assert_eq(vc_utf8_whole(snow, 4), 4);
    cr_assert_eq(vc_utf8_whole(snow, 3), 1); /* two of three bytes: wait for the third */
    cr_assert_eq(vc_utf8_whole(snow, 2), 1);
    cr_assert_eq(vc_utf8_whole(snow, 1), 1);
    const unsigned char emoji[] = {0xF0, 0x9F, 0x98, 0x80};
    cr_assert_eq(vc_utf8_whole(emoji, 4), 4);
    cr_assert_eq(vc_utf8_whole(emoji, 3), 0);
    const unsigned char junk[] = {'x', 0x80, 0x80, 0x80, 0x80}; /* not UTF-8: passed on */
    cr_assert_eq(vc_utf8_whole(junk, 5), 5);
    cr_assert_eq(vc_utf8_whole(junk, 0), 0);
}

Test(vercel, policy_in)
{
    struct err err = ERR_INIT;
    json_t *p = json_loads("{\"mode\":\"deny-all\"}", 0, NULL), *out = vc_policy_in(p, &err);
    cr_assert(json_is_string(out) && !strcmp(json_string_value(out), "deny-all"));
    json_decref(out), json_decref(p);
    p = json_loads("{\"allow\":[\"pypi.org\"]}", 0, NULL);
    out = vc_policy_in(p, &err);
    cr_assert(json_is_array(json_object_get(out, "allow")));
    json_decref(out), json_decref(p);
    /* subnets: the ranges go to the proxy (which judges the address it connects to, deny
     * winning); every address allowed also lets every name pass ("*"); ::/0 denied is a
     * no-op (no IPv6) */
    static const char *const ok[][2] = {
        {"{\"allow\":[\"a.com\"],\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}",
         "{\"allow\": {\"a.com\": [], \"*\": []}}"},
        {"{\"subnets\":{\"allow\":[\"::/0\"]}}", "\"allow-all\""},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/0\"],\"deny\":[\"0.0.0.0/0\"]}}",
         "{\"allow\": {\"*\": []}, \"subnets\": {\"deny\": [\"0.0.0.0/0\"]}}"},
        {"{\"allow\":[\"a.com\"],\"subnets\":{\"deny\":[\"0.0.0.0/0\", \"::/0\"]}}",
         "{\"allow\": [\"a.com\"], \"subnets\": {\"deny\": [\"0.0.0.0/0\"]}}"},
        {"{\"subnets\":{\"deny\":[\"10.0.0.0/8\"]}}",
         "{\"allow\": {}, \"subnets\": {\"deny\": [\"10.0.0.0/8\"]}}"},
        {"{\"allow\":{\"a.com\":[]},\"subnets\":{\"allow\":[\"10.1.2.3/32\", \"198.51.100.0/24\"],"
         "\"deny\":[\"198.51.100.7\"]}}",
         "{\"allow\": {\"a.com\": []}, \"subnets\": {\"allow\": [\"10.1.2.3/32\", "
         "\"198.51.100.0/24\"], \"deny\": [\"198.51.100.7\"]}}"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        p = json_loads(ok[i][0], 0, NULL);
        json_t *want = json_loads(ok[i][1], JSON_DECODE_ANY, NULL);
        out = vc_policy_in(p, &err);
        cr_assert(out && json_equal(out, want), "%s", ok[i][0]);
        json_decref(out), json_decref(p), json_decref(want);
    }
    static const char *const bad[] = {"{\"mode\":\"custom\"}", "{\"subnets\":{\"deny\":[\"10.0.0.1/8\"]}}",
                                      "{\"subnets\":{\"allow\":[\"2001:db8::/32\"]}}", "{\"subnets\":[]}",
                                      "{\"subnets\":{\"allow\":[\"10.0.0.0/33\"]}}",
                                      "{\"subnets\":{\"deny\":[\"example.com\"]}}",
                                      "{\"subnets\":{\"allow\":[7]}}", "{\"subnets\":{\"x\":[]}}", "{}",
                                      "{\"allow\":[],\"x\":1}", "[1]", "{\"mode\":7}",
                                      "{\"allow\":\"a.com\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct err e = ERR_INIT;
        p = json_loads(bad[i], 0, NULL);
        cr_assert_null(vc_policy_in(p, &e), "%s", bad[i]);
        cr_assert_eq(e.status, 400, "%s", bad[i]);
        cr_assert(!strncmp(e.field, "networkPolicy", 13), "%s: %s", bad[i], e.field);
        json_decref(p);
    }
}

Test(vercel, iso_ms)
{
    json_t *t = json_string("2026-12-02T05:05:21.081Z");
    cr_assert_eq(vc_iso_ms(t), 1796187921081LL);
    json_decref(t);
    t = json_string("yesterday");
    cr_assert_eq(vc_iso_ms(t), 0);
    json_decref(t);
    cr_assert_eq(vc_iso_ms(json_null()), 0);
}

Test(vercel, interactive_path)
{
    cr_assert(vc_interactive_path("GET", "/v2/sandboxes/sessions/sbs_x_1/interactive/ws"));
    cr_assert(!vc_interactive_path("POST", "/v2/sandboxes/sessions/sbs_x_1/interactive/ws"));
    cr_assert(!vc_interactive_path("GET", "/v2/sandboxes/sessions/sbs_x_1/interactive"));
    cr_assert(!vc_interactive_path("GET", "/v2/sandboxes/sessions//interactive/ws"));
    cr_assert(!vc_interactive_path("GET", "/v2/sandboxes/sessions/a/b/interactive/ws"));
    cr_assert(!vc_interactive_path("GET", "/v2/sandboxes/sessions/a/interactive/ws/x"));
    cr_assert(!vc_interactive_path("GET", "/v2/sandboxes/x/interactive/ws"));
}
