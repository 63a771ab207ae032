/*
 * network.c - E2B's network settings (create's `network`, updateNetwork's PUT
 * /sandboxes/{id}/network) as the egress proxy's policy (docs/sandbox-api.md,
 * Network), applied live by the core like /v1's PATCH network_policy.
 *
 *   base: all traffic allowed ("*"), unless allow_internet_access is false or denyOut
 *         holds 0.0.0.0/0 (ALL_TRAFFIC); allowOut's 0.0.0.0/0 allows everything again,
 *         and then no denyOut entry applies (allowOut wins)
 *   allowOut domains ("x.com", "*.x.com"): allowed hosts
 *   allowOut addresses and CIDR ranges: subnets.allow
 *   denyOut addresses and CIDR ranges (never domains, as in E2B): subnets.deny
 *   rules {host: [{transform: {headers}}]}: the proxy sets those headers on that host's
 *         HTTPS requests, outside the sandbox (the host is allowed)
 * with subnets.precedence "allow": an allowed domain or range wins over denyOut (the
 * proxy judges the address it connects to, proxy/policy.h). IPv6 ranges are refused
 * (sandboxes have no IPv6), as is an egressProxy (400, naming the field).
 *
 * e2b_network_info turns a stored policy back into E2B's network object for getInfo.
 */
#include "sandbox/e2b/e2b_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proxy/policy.h"
#include "sandbox/net/net.h"

#define ALL_TRAFFIC "0.0.0.0/0"
#define LIST_MAX 256

static int string_list(const json_t *v, const char *field, struct err *err)
{
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) > LIST_MAX)
        return err_invalid(err, field, "%s must be a list of at most %d strings", field, LIST_MAX);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_string(x) || !json_string_length(x) || json_string_length(x) > 253)
            return err_invalid(err, field, "%s[%zu] must be a host name, an address or a CIDR",
                               field, i);
    }
    return 0;
}

/* The 400 for entry i of list (allowOut, denyOut) that proxy_cidr_parse refused with prc;
 * other is what to say when it is neither IPv6 nor a misaligned range. */
static int range_invalid(struct err *err, const char *list, size_t i, int prc, const char *other)
{
    char f[32];
    snprintf(f, sizeof f, "%s[%zu]", list, i);
    if (prc == -EAFNOSUPPORT)
        return err_invalid(err, f, "%s: IPv6 cannot apply: sandboxes have no IPv6", f);
    if (prc == -EDOM)
        return err_invalid(err, f,
                           "%s: bits set beyond the prefix; give the network's first address "
                           "(e.g. 10.0.0.0/8)",
                           f);
    return err_invalid(err, f, "%s: %s", f, other);
}

static bool has(const json_t *list, const char *s)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (!strcmp(json_string_value(json_array_get(list, i)), s)) return true;
    return false;
}

int e2b_network_policy(const json_t *net, bool internet, json_t **out, struct err *err)
{
    *out = NULL;
    if (net && !json_is_null(net) && !json_is_object(net))
        return err_invalid(err, "network", "network must be an object");
    static const char *const known[] = {"allowOut",
                                        "denyOut",
                                        "rules",
                                        "egressProxy",
                                        "allowPublicTraffic",
                                        "maskRequestHost",
                                        "httpsPorts",
                                        "allow_internet_access",
                                        NULL};
    const json_t *empty = json_object();
    if (!net || json_is_null(net)) net = empty;
    int rc = sbx_json_known(net, known, "network", err);
    json_t *allow = json_object_get(net, "allowOut"), *deny = json_object_get(net, "denyOut");
    json_t *rules = json_object_get(net, "rules"), *proxy = json_object_get(net, "egressProxy");
    json_t *ai = json_object_get(net, "allow_internet_access");
    if (rc == 0 && ai && !json_is_null(ai)) {
        if (!json_is_boolean(ai))
            rc = err_invalid(err, "allow_internet_access",
                             "allow_internet_access must be a boolean");
        else
            internet = json_is_true(ai);
    }
    if (rc == 0) rc = string_list(allow, "allowOut", err);
    if (rc == 0) rc = string_list(deny, "denyOut", err);
    if (rc == 0 && proxy && !json_is_null(proxy))
        rc = err_invalid(err, "egressProxy",
                         "an egress proxy cannot be set here: sandboxd's own proxy carries all "
                         "egress");
    if (rc == 0 && rules && !json_is_null(rules) && !json_is_object(rules))
        rc = err_invalid(err, "rules", "rules must be an object of host -> rules");
    if (rc < 0) {
        json_decref((json_t *)empty);
        return -1;
    }
    bool all_out = allow && has(allow, ALL_TRAFFIC);
    bool base_allow = (internet && !(deny && has(deny, ALL_TRAFFIC))) || all_out;
    json_t *map = json_object(), *sallow = json_array(), *sdeny = json_array();
    size_t i;
    json_t *x;
    json_array_foreach(all_out ? NULL : deny, i, x)
    { /* allowOut 0.0.0.0/0 wins over all */
        const char *c = json_string_value(x);
        uint32_t nw, mask;
        if (!strcmp(c, ALL_TRAFFIC)) continue;
        int prc = proxy_cidr_parse(c, &nw, &mask);
        if (prc < 0) {
            rc = range_invalid(err, "denyOut", i, prc,
                               "must be an IPv4 address or CIDR range (domains cannot be denied: "
                               "allow the ones you need)");
            break;
        }
        json_array_append(sdeny, x);
    }
    json_array_foreach(rc < 0 ? NULL : allow, i, x)
    {
        const char *h = json_string_value(x);
        uint32_t nw, mask;
        if (!strcmp(h, ALL_TRAFFIC)) continue;
        int prc = proxy_cidr_parse(h, &nw, &mask);
        if (prc == 0) {
            json_array_append(sallow, x);
            continue;
        }
        /* a name has a letter somewhere (or is "*.x"); anything else meant an address */
        if (prc == -EAFNOSUPPORT || prc == -EDOM || strchr(h, '/') ||
            strspn(h, "0123456789.") == strlen(h)) {
            rc = range_invalid(err, "allowOut", i, prc,
                               "must be a host name, an IPv4 address or a CIDR range");
            break;
        }
        if (!json_object_get(map, h)) json_object_set_new(map, h, json_array());
    }
    if (rc < 0) {
        json_decref(map);
        json_decref(sallow);
        json_decref(sdeny);
        json_decref((json_t *)empty);
        return -1;
    }
    if (base_allow) json_object_set_new(map, "*", json_array());
    const char *host;
    json_t *rl;
    json_object_foreach(rules, host, rl)
    {
        char field[300];
        snprintf(field, sizeof field, "rules.%.250s", host);
        if (!json_is_array(rl)) {
            json_decref(map);
            json_decref(sallow);
            json_decref(sdeny);
            json_decref((json_t *)empty);
            return err_invalid(err, field, "%s must be a list of rules", field);
        }
        json_t *ours = json_array();
        json_t *rule;
        json_array_foreach(rl, i, rule)
        {
            json_t *t = json_is_object(rule) ? json_object_get(rule, "transform") : NULL;
            json_t *hd = json_is_object(t) ? json_object_get(t, "headers") : NULL;
            if (!json_is_object(rule) || json_object_size(rule) != (t ? 1u : 0u) ||
                (t && (!json_is_object(t) || json_object_size(t) != (hd ? 1u : 0u)))) {
                json_decref(ours);
                json_decref(map);
                json_decref(sallow);
                json_decref(sdeny);
                json_decref((json_t *)empty);
                return err_invalid(err, field,
                                   "%s[%zu]: only {\"transform\": {\"headers\": {...}}} rules are "
                                   "served here",
                                   field, i);
            }
            if (hd && json_object_size(hd))
                json_array_append_new(ours, json_pack("{s:[{s:O}]}", "transform", "headers", hd));
        }
        json_object_set_new(map, host, ours);
    }
    json_decref((json_t *)empty);
    if (json_array_size(sallow) || json_array_size(sdeny)) {
        json_t *sn = json_pack("{s:s}", "precedence", "allow");
        if (json_array_size(sallow)) json_object_set(sn, "allow", sallow);
        if (json_array_size(sdeny)) json_object_set(sn, "deny", sdeny);
        *out = json_pack("{s:o, s:o}", "allow", map, "subnets", sn);
    } else if (json_object_size(map) == 0) {
        json_decref(map);
        *out = json_string("deny-all");
    } else if (json_object_size(map) == 1 && base_allow) {
        json_decref(map);
        *out = json_string("allow-all");
    } else {
        *out = map;
    }
    json_decref(sallow);
    json_decref(sdeny);
    return 0;
}

/* Our stored transform rules [{transform: [{headers}]}] (values redacted) in E2B's
 * form [{transform: {headers}}]. */
static json_t *rules_out(const json_t *rl)
{
    json_t *out = json_array();
    size_t i, j;
    json_t *rule, *t;
    json_array_foreach(rl, i, rule)
    {
        json_array_foreach(json_object_get(rule, "transform"), j, t)
        {
            json_t *hd = json_object_get(t, "headers");
            if (json_is_object(hd))
                json_array_append_new(out, json_pack("{s:{s:O}}", "transform", "headers", hd));
        }
    }
    return out;
}

json_t *e2b_network_info(const struct sbx *s)
{
    json_t *o = json_object();
    sbx_net_json(s, o, false); /* header values redacted */
    const json_t *p = json_object_get(o, "network_policy");
    json_t *allow = json_array(), *deny = json_array(), *rules = json_object();
    bool any = false;
    const json_t *mode = json_is_object(p) ? json_object_get(p, "mode") : p;
    if (json_is_string(mode)) {
        any = !strcmp(json_string_value(mode), "allow-all");
    } else if (json_is_object(p)) {
        const json_t *map = p, *sn = json_object_get(p, "subnets");
        if (json_object_get(p, "allow") || json_is_object(sn))
            map = json_object_get(p, "allow");
        else
            sn = NULL;
        size_t i;
        json_t *x;
        json_array_foreach(map, i, x)
        { /* the list form */
            if (!strcmp(json_string_value(x), "*"))
                any = true;
            else
                json_array_append(allow, x);
        }
        const char *k;
        json_object_foreach((json_t *)map, k, x)
        {
            if (!strcmp(k, "*")) {
                any = true;
                continue;
            }
            json_array_append_new(allow, json_string(k));
            json_t *r = rules_out(x);
            if (json_array_size(r))
                json_object_set_new(rules, k, r);
            else
                json_decref(r);
        }
        json_array_extend(allow, json_object_get(sn, "allow"));
        json_array_extend(deny, json_object_get(sn, "deny"));
    }
    if (!any) json_array_append_new(deny, json_string(ALL_TRAFFIC));
    json_t *out = json_pack("{s:o, s:o}", "allowOut", allow, "denyOut", deny);
    if (json_object_size(rules))
        json_object_set_new(out, "rules", rules);
    else
        json_decref(rules);
    json_decref(o);
    return out;
}
