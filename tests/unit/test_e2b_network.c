/*
 * test_e2b_network.c - unit tests for the E2B endpoint's network settings
 * (src/sandbox/e2b/network.c): allowOut/denyOut domains, addresses and CIDR ranges
 * mapped onto the egress proxy's policy (subnets with precedence "allow", E2B's
 * "allowOut wins over denyOut"), the policy that makes, and the 400s naming the element.
 */
#include "sandbox/e2b/e2b_int.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <string.h>

#include "proxy/policy.h"

static json_t *map(const char *net, bool internet)
{
    json_t *in = json_loads(net, 0, NULL);
    cr_assert_not_null(in, "%s", net);
    struct err err = ERR_INIT;
    json_t *out = NULL;
    cr_assert_eq(e2b_network_policy(in, internet, &out, &err), 0, "%s: %s", net, err.msg);
    json_decref(in);
    return out;
}

static void maps_to(const char *net, bool internet, const char *want)
{
    json_t *out = map(net, internet), *w = json_loads(want, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(w, "%s", want);
    char *got = json_dumps(out, JSON_SORT_KEYS | JSON_ENCODE_ANY);
    cr_assert(json_equal(out, w), "%s -> %s, want %s", net, got, want);
    free(got);
    /* and the proxy takes it */
    struct err err = ERR_INIT;
    struct proxy_policy *p = proxy_policy_from_json(out, &err);
    cr_assert_not_null(p, "%s: %s", want, err.msg);
    proxy_policy_unref(p);
    json_decref(out), json_decref(w);
}

static void refused(const char *net, const char *field)
{
    json_t *in = json_loads(net, 0, NULL);
    struct err err = ERR_INIT;
    json_t *out = NULL;
    cr_assert_eq(e2b_network_policy(in, true, &out, &err), -1, "%s", net);
    cr_assert_eq(err.status, 400);
    cr_assert_str_eq(err.field, field, "%s: %s", net, err.msg);
    cr_assert_null(out);
    json_decref(in);
}

Test(e2b_network, maps_addresses_onto_subnets)
{
    maps_to("{}", true, "\"allow-all\"");
    maps_to("{}", false, "\"deny-all\"");
    maps_to("{\"allowOut\": [\"pypi.org\"], \"denyOut\": [\"0.0.0.0/0\"]}", true,
            "{\"pypi.org\": []}");
    maps_to("{\"denyOut\": [\"8.8.8.8\"]}", true,
            "{\"allow\": {\"*\": []}, \"subnets\": {\"deny\": [\"8.8.8.8\"], "
            "\"precedence\": \"allow\"}}");
    maps_to("{\"allowOut\": [\"1.2.3.4\", \"10.0.0.0/8\", \"x.com\"], \"denyOut\": [\"0.0.0.0/0\"]}",
            true,
            "{\"allow\": {\"x.com\": []}, \"subnets\": {\"allow\": [\"1.2.3.4\", \"10.0.0.0/8\"], "
            "\"precedence\": \"allow\"}}");
    /* allowOut 0.0.0.0/0 wins over everything denyOut says */
    maps_to("{\"allowOut\": [\"0.0.0.0/0\"], \"denyOut\": [\"8.8.8.8\", \"0.0.0.0/0\"]}", true,
            "\"allow-all\"");
    maps_to("{\"allowOut\": [\"203.0.113.7\"]}", false,
            "{\"allow\": {}, \"subnets\": {\"allow\": [\"203.0.113.7\"], \"precedence\": \"allow\"}}");
}

Test(e2b_network, precedence_is_allow_out_wins)
{
    json_t *out = map("{\"allowOut\": [\"a.example\", \"198.51.100.7\"], "
                      "\"denyOut\": [\"198.51.100.0/24\"]}", true);
    struct err err = ERR_INIT;
    struct proxy_policy *p = proxy_policy_from_json(out, &err);
    cr_assert_not_null(p, "%s", err.msg);
    struct sockaddr_in a = {.sin_family = AF_INET};
    struct proxy_verdict name, v;
    inet_pton(AF_INET, "198.51.100.9", &a.sin_addr);
    proxy_policy_match(p, "a.example", &name);
    proxy_policy_match_addr(p, &name, (struct sockaddr *)&a, &v);
    cr_assert_eq(v.kind, PROXY_PASS, "an allowed domain wins over denyOut");
    proxy_policy_match(p, "b.example", &name);
    proxy_policy_match_addr(p, &name, (struct sockaddr *)&a, &v);
    cr_assert_eq(v.kind, PROXY_DENY, "the base (\"*\") does not");
    inet_pton(AF_INET, "198.51.100.7", &a.sin_addr);
    proxy_policy_match_addr(p, &name, (struct sockaddr *)&a, &v);
    cr_assert_eq(v.kind, PROXY_PASS, "an allowed address wins over denyOut");
    proxy_policy_unref(p);
    json_decref(out);
}

Test(e2b_network, refusals_name_the_element)
{
    refused("{\"denyOut\": [\"8.8.8.8\", \"evil.com\"]}", "denyOut[1]");
    refused("{\"denyOut\": [\"10.1.2.3/8\"]}", "denyOut[0]");
    refused("{\"denyOut\": [\"2001:db8::/32\"]}", "denyOut[0]");
    refused("{\"allowOut\": [\"x.com\", \"1.2.3.4/33\"]}", "allowOut[1]");
    refused("{\"allowOut\": [\"999.1.1.1\"]}", "allowOut[0]");
    refused("{\"allowOut\": [\"::1\"]}", "allowOut[0]");
    refused("{\"allowOut\": [\"10.0.0.1/8\"]}", "allowOut[0]");
    refused("{\"allowOut\": \"x.com\"}", "allowOut");
    refused("{\"egressProxy\": {\"address\": \"p:1\"}}", "egressProxy");
}
