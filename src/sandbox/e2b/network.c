/*
 * network.c - E2B's network settings (create's `network`, updateNetwork's PUT
 * /sandboxes/{id}/network) as the egress proxy's policy (docs/sandbox-api.md,
 * Network), applied live by the core like /v1's PATCH network_policy.
 *
 *   base: all traffic allowed, unless allow_internet_access is false or denyOut holds
 *         0.0.0.0/0 (ALL_TRAFFIC); allowOut's 0.0.0.0/0 allows everything again
 *   allowOut domains ("x.com", "*.x.com") and addresses: allowed hosts
 *   rules {host: [{transform: {headers}}]}: the proxy sets those headers on that host's
 *         HTTPS requests, outside the sandbox (the host is allowed)
 *
 * The proxy filters by name, so other CIDR ranges, and denying single hosts while
 * everything else is allowed, cannot be enforced: they are refused (400, naming the
 * field), never silently dropped. An egressProxy is refused the same way.
 */
#include "sandbox/e2b/e2b_int.h"

#include <stdio.h>
#include <string.h>

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
    static const char *const known[] = {"allowOut", "denyOut", "rules", "egressProxy",
                                        "allowPublicTraffic", "maskRequestHost", "httpsPorts",
                                        "allow_internet_access", NULL};
    const json_t *empty = json_object();
    if (!net || json_is_null(net)) net = empty;
    int rc = sbx_json_known(net, known, "network", err);
    json_t *allow = json_object_get(net, "allowOut"), *deny = json_object_get(net, "denyOut");
    json_t *rules = json_object_get(net, "rules"), *proxy = json_object_get(net, "egressProxy");
    json_t *ai = json_object_get(net, "allow_internet_access");
    if (rc == 0 && ai && !json_is_null(ai)) {
        if (!json_is_boolean(ai))
            rc = err_invalid(err, "allow_internet_access", "allow_internet_access must be a boolean");
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
    bool base_allow = internet && !(deny && has(deny, ALL_TRAFFIC));
    if (allow && has(allow, ALL_TRAFFIC)) base_allow = true;
    size_t i;
    json_t *x;
    json_array_foreach(deny, i, x) {
        if (!strcmp(json_string_value(x), ALL_TRAFFIC)) continue;
        json_decref((json_t *)empty);
        return err_invalid(err, "denyOut",
                           "denyOut[%zu]: only 0.0.0.0/0 (all traffic) can be denied here; the "
                           "egress proxy filters by host name (allow the hosts you need)", i);
    }
    json_t *map = json_object();
    if (base_allow) json_object_set_new(map, "*", json_array());
    json_array_foreach(allow, i, x) {
        const char *h = json_string_value(x);
        if (!strcmp(h, ALL_TRAFFIC)) continue;
        if (strchr(h, '/')) {
            json_decref(map);
            json_decref((json_t *)empty);
            return err_invalid(err, "allowOut",
                               "allowOut[%zu]: CIDR ranges other than 0.0.0.0/0 cannot be "
                               "enforced here; name the hosts", i);
        }
        if (!json_object_get(map, h)) json_object_set_new(map, h, json_array());
    }
    const char *host;
    json_t *rl;
    json_object_foreach(rules, host, rl) {
        char field[300];
        snprintf(field, sizeof field, "rules.%.250s", host);
        if (!json_is_array(rl)) {
            json_decref(map);
            json_decref((json_t *)empty);
            return err_invalid(err, field, "%s must be a list of rules", field);
        }
        json_t *ours = json_array();
        json_t *rule;
        json_array_foreach(rl, i, rule) {
            json_t *t = json_is_object(rule) ? json_object_get(rule, "transform") : NULL;
            json_t *hd = json_is_object(t) ? json_object_get(t, "headers") : NULL;
            if (!json_is_object(rule) || json_object_size(rule) != (t ? 1u : 0u) ||
                (t && (!json_is_object(t) || json_object_size(t) != (hd ? 1u : 0u)))) {
                json_decref(ours);
                json_decref(map);
                json_decref((json_t *)empty);
                return err_invalid(err, field,
                                   "%s[%zu]: only {\"transform\": {\"headers\": {...}}} rules are "
                                   "served here", field, i);
            }
            if (hd && json_object_size(hd))
                json_array_append_new(ours, json_pack("{s:[{s:O}]}", "transform", "headers", hd));
        }
        json_object_set_new(map, host, ours);
    }
    json_decref((json_t *)empty);
    if (json_object_size(map) == 0) {
        json_decref(map);
        *out = json_string("deny-all");
    } else if (json_object_size(map) == 1 && base_allow) {
        json_decref(map);
        *out = json_string("allow-all");
    } else {
        *out = map;
    }
    return 0;
}
