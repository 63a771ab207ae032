/*
 * objects.c - the Vercel SDK's objects (its zod validators: times in epoch ms, camelCase
 * names) made from the core's sandboxes, sessions, commands and snapshots, and its
 * network policy shapes mapped to and from /v1's.
 *
 * A Vercel session is one run of a sandbox: its id is "sbs_<sandbox id>_<n>", n the
 * sandbox's session counter, so an id stays meaningful after its session ended (410)
 * and across daemon restarts, with nothing stored.
 */
#include "sandbox/vercel/vc_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "proxy/policy.h"
#include "sandbox/net/net.h"

void vc_sid(const struct sbx *s, int64_t seq, char out[VC_SID_MAX])
{
    snprintf(out, VC_SID_MAX, "sbs_%s_%lld", s->id, (long long)seq);
}

int vc_sid_parse(const char *sid, char id[40], int64_t *seq)
{
    if (!sid || strncmp(sid, "sbs_", 4) != 0) return -1;
    const char *p = sid + 4, *us = strrchr(p, '_');
    if (!us || us == p || (size_t)(us - p) >= 40) return -1;
    if (!us[1] || strlen(us + 1) > 18 || strspn(us + 1, "0123456789") != strlen(us + 1))
        return -1;
    long long n = strtoll(us + 1, NULL, 10);
    snprintf(id, 40, "%.*s", (int)(us - p), p);
    *seq = n;
    return 0;
}

int64_t vc_iso_ms(const json_t *v)
{
    int64_t ms = 0;
    if (!json_is_string(v) || clock_parse_iso(json_string_value(v), &ms) < 0) return 0;
    return ms;
}

static const char *status_of(const struct sbx *s)
{
    if (sbx_busy(s)) return "stopping";
    return s->state == SBX_STOPPED ? "stopped" : "running"; /* paused: resumed on use */
}

static void set_ms(json_t *o, const char *k, int64_t ms)
{
    if (ms > 0) json_object_set_new(o, k, json_integer(ms));
}

/* ------------------------------------------------------------------ network policy */

/* subnets {allow, deny} for the egress proxy's policy (proxy/policy.h: the address the
 * proxy connects to is judged, and deny wins over every allow, as on Vercel), into
 * *ranges (new, or NULL when nothing is left). "Every address" in allow (0.0.0.0/0, or
 * ::/0) also lets every name resolve and pass: *any (the proxy's "*"). IPv6 ranges
 * cannot apply (sandboxes have no IPv6, so ::/0 denied changes nothing); others are
 * refused (400 naming the element). */
static int subnets_in(const json_t *sn, json_t **ranges, bool *any, struct err *err)
{
    *ranges = NULL;
    *any = false;
    if (!sn || json_is_null(sn)) return 0;
    if (!json_is_object(sn))
        return err_invalid(err, "networkPolicy.subnets",
                           "networkPolicy.subnets must be {\"allow\": [CIDR], \"deny\": [CIDR]}");
    static const char *const keys[] = {"allow", "deny"};
    size_t seen = 0;
    json_t *out = json_object();
    for (int k = 0; k < 2; k++) {
        json_t *l = json_object_get(sn, keys[k]);
        if (!l || json_is_null(l)) continue;
        seen++;
        char f[64];
        snprintf(f, sizeof f, "networkPolicy.subnets.%s", keys[k]);
        if (!json_is_array(l) || json_array_size(l) > PROXY_POLICY_MAX_SUBNETS) {
            json_decref(out);
            return err_invalid(err, f, "%s must be a list of at most %d CIDR ranges", f,
                               PROXY_POLICY_MAX_SUBNETS);
        }
        json_t *kept = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(l, i, c) {
            const char *v = json_string_value(c);
            uint32_t nw, mask;
            int rc = v ? proxy_cidr_parse(v, &nw, &mask) : -EINVAL;
            bool v6_all = v && !strcmp(v, "::/0");
            if (k == 0 && ((rc == 0 && mask == 0) || v6_all)) {
                *any = true; /* every address: the proxy's "*" */
                continue;
            }
            if (k == 1 && v6_all) continue; /* no IPv6 to deny */
            if (rc < 0) {
                char fi[96];
                snprintf(fi, sizeof fi, "%.60s[%zu]", f, i);
                json_decref(kept);
                json_decref(out);
                return err_invalid(err, fi,
                                   rc == -EAFNOSUPPORT ? "%s: IPv6 ranges cannot apply: sandboxes "
                                                         "have no IPv6 (give IPv4 ranges)"
                                   : rc == -EDOM ? "%s: bits set beyond the prefix; give the "
                                                   "network's first address (e.g. 10.0.0.0/8)"
                                                 : "%s must be an IPv4 CIDR range or address",
                                   fi);
            }
            json_array_append(kept, c);
        }
        if (json_array_size(kept))
            json_object_set_new(out, keys[k], kept);
        else
            json_decref(kept);
    }
    if (seen != json_object_size(sn)) {
        json_decref(out);
        return err_invalid(err, "networkPolicy.subnets",
                           "networkPolicy.subnets has only \"allow\" and \"deny\"");
    }
    if (json_object_size(out))
        *ranges = out;
    else
        json_decref(out);
    return 0;
}

json_t *vc_policy_in(const json_t *p, struct err *err)
{
    if (json_is_string(p)) return json_incref((json_t *)p); /* "allow-all" ... as /v1 */
    if (!json_is_object(p)) {
        err_invalid(err, "networkPolicy", "networkPolicy must be an object such as "
                                          "{\"mode\":\"deny-all\"} or {\"allow\":[...]}");
        return NULL;
    }
    json_t *mode = json_object_get(p, "mode");
    if (mode) {
        const char *m = json_string_value(mode);
        if (!m || (strcmp(m, "allow-all") && strcmp(m, "deny-all"))) {
            err_invalid(err, "networkPolicy.mode",
                        "networkPolicy.mode must be \"allow-all\" or \"deny-all\"");
            return NULL;
        }
        return json_string(m);
    }
    json_t *allow = json_object_get(p, "allow"), *subnets = json_object_get(p, "subnets");
    size_t known = (allow ? 1u : 0u) + (subnets ? 1u : 0u);
    if (!known || json_object_size(p) != known) {
        err_invalid(err, "networkPolicy", "networkPolicy must have \"allow\" (a list of "
                                          "domains, or a map of domains to rules), \"subnets\" "
                                          "or \"mode\"");
        return NULL;
    }
    json_t *ranges;
    bool any;
    if (subnets_in(subnets, &ranges, &any, err) < 0) return NULL;
    json_t *map;
    if (json_is_array(allow) && json_array_size(allow) && !any)
        return ranges ? json_pack("{s:O, s:o}", "allow", allow, "subnets", ranges)
                      : json_pack("{s:O}", "allow", allow); /* /v1 validates the domains */
    if (!allow || json_is_null(allow)) {
        map = json_object();
    } else if (json_is_array(allow)) {
        map = json_object();
        size_t i;
        json_t *d;
        json_array_foreach(allow, i, d) {
            if (!json_is_string(d)) {
                json_decref(map);
                json_decref(ranges);
                err_invalid(err, "networkPolicy.allow", "networkPolicy.allow[%zu] must be a domain", i);
                return NULL;
            }
            json_object_set_new(map, json_string_value(d), json_array());
        }
    } else if (json_is_object(allow)) {
        map = json_deep_copy(allow); /* /v1 validates the rules */
    } else {
        json_decref(ranges);
        err_invalid(err, "networkPolicy.allow",
                    "networkPolicy.allow must be a list of domains or a map of domains to rules");
        return NULL;
    }
    if (any && !json_object_get(map, "*")) json_object_set_new(map, "*", json_array());
    if (ranges) return json_pack("{s:o, s:o}", "allow", map, "subnets", ranges);
    if (!json_object_size(map)) {
        json_decref(map);
        return json_string("deny-all");
    }
    if (json_object_size(map) == 1 && json_object_get(map, "*")) {
        json_decref(map);
        return json_string("allow-all");
    }
    return json_pack("{s:o}", "allow", map);
}

json_t *vc_policy_out(struct sbx *s)
{
    json_t *o = json_object();
    sbx_net_json(s, o, false);
    json_t *p = json_object_get(o, "network_policy"), *out;
    if (json_is_object(p) && json_is_string(json_object_get(p, "mode"))) p = json_object_get(p, "mode");
    if (json_is_string(p)) {
        out = json_pack("{s:s}", "mode", json_string_value(p));
    } else {
        json_t *sn = json_object_get(p, "subnets");
        if (!json_is_object(sn)) sn = NULL; /* a bare map may name a host "subnets" */
        json_t *map = json_is_object(json_object_get(p, "allow")) || sn ? json_object_get(p, "allow")
                                                                         : p;
        json_t *domains = json_array(), *inj = json_array(), *cidrs = NULL;
        json_t *fw = json_array(), *answers = json_array();
        json_t *list = json_object_get(p, "allow");
        if (json_is_array(list)) {
            json_array_extend(domains, list);
        } else if (json_is_object(map)) {
            const char *k;
            json_t *rules;
            json_object_foreach(map, k, rules) {
                if (!strcmp(k, "*")) { /* any other host: every address, as subnets */
                    cidrs = json_pack("[s]", "0.0.0.0/0");
                    continue;
                }
                json_array_append_new(domains, json_string(k));
                size_t i;
                json_t *rule;
                json_array_foreach(rules, i, rule) {
                    json_t *match = json_object_get(rule, "match");
                    json_t *fwd = json_object_get(rule, "forwardURL");
                    json_t *resp = json_object_get(rule, "response");
                    json_t *r = json_pack("{s:s}", "domain", k);
                    if (json_is_object(match)) json_object_set(r, "match", match);
                    if (json_is_string(fwd)) { /* the URL is no secret: as given */
                        json_object_set(r, "forwardURL", fwd);
                        json_array_append_new(fw, r);
                        continue;
                    }
                    if (json_is_object(resp)) { /* ours; the SDK's validator passes it */
                        json_object_set(r, "response", resp);
                        json_array_append_new(answers, r);
                        continue;
                    }
                    json_t *names = json_array();
                    size_t j;
                    json_t *t;
                    json_array_foreach(json_object_get(rule, "transform"), j, t) {
                        const char *h;
                        json_t *hv;
                        json_object_foreach(json_object_get(t, "headers"), h, hv) {
                            json_array_append_new(names, json_string(h));
                        }
                    }
                    if (json_array_size(names)) {
                        json_object_set_new(r, "headerNames", names);
                        json_array_append_new(inj, r);
                    } else {
                        json_decref(names);
                        json_decref(r);
                    }
                }
            }
        }
        out = json_pack("{s:s, s:o, s:o}", "mode", "custom", "allowedDomains", domains,
                        "injectionRules", inj);
        if (json_array_size(fw))
            json_object_set_new(out, "forwardRules", fw);
        else
            json_decref(fw);
        if (json_array_size(answers))
            json_object_set_new(out, "responseRules", answers);
        else
            json_decref(answers);
        json_t *sa = json_object_get(sn, "allow"), *sd = json_object_get(sn, "deny");
        if (json_array_size(sa)) {
            if (!cidrs) cidrs = json_array();
            json_array_extend(cidrs, sa);
        }
        if (cidrs) json_object_set_new(out, "allowedCIDRs", cidrs);
        if (json_array_size(sd)) json_object_set_new(out, "deniedCIDRs", json_deep_copy(sd));
    }
    json_decref(o);
    return out;
}

/* ------------------------------------------------------------------ objects */

json_t *vc_session_json(struct sbx *s)
{
    char sid[VC_SID_MAX];
    vc_sid(s, s->session_seq, sid);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(sid));
    json_object_set_new(o, "memory", json_integer(s->memory_mb));
    json_object_set_new(o, "vcpus", json_integer(s->vcpus));
    json_object_set_new(o, "region", json_string(s->region));
    json_object_set_new(o, "status", json_string(status_of(s)));
    int64_t start = s->started_at > 0 ? s->started_at : s->created_at;
    /* the SDK computes expiresAt as startedAt + timeout: extensions are in timeout */
    int64_t timeout = s->sess && s->expires_at > start ? s->expires_at - start : s->timeout_ms;
    json_object_set_new(o, "timeout", json_integer(timeout));
    json_object_set_new(o, "requestedAt", json_integer(start));
    json_object_set_new(o, "createdAt", json_integer(start));
    set_ms(o, "startedAt", start);
    if (!s->sess) set_ms(o, "stoppedAt", s->stopped_at);
    if (!s->sess && s->stopped_at > start) set_ms(o, "duration", s->stopped_at - start);
    json_object_set_new(o, "updatedAt", json_integer(s->updated_at));
    json_object_set_new(o, "cwd", json_string(VC_CWD));
    json_object_set_new(o, "networkPolicy", vc_policy_out(s));
    if (s->origin && json_is_string(json_object_get(s->origin, "snapshot_id")))
        json_object_set(o, "sourceSnapshotId", json_object_get(s->origin, "snapshot_id"));
    return o;
}

json_t *vc_sandbox_json(struct sbx *s)
{
    char sid[VC_SID_MAX], iname[900];
    vc_sid(s, s->session_seq, sid);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(s->name));
    json_object_set_new(o, "persistent", json_true()); /* stop always keeps files here */
    json_object_set_new(o, "region", json_string(s->region));
    json_object_set_new(o, "vcpus", json_integer(s->vcpus));
    json_object_set_new(o, "memory", json_integer(s->memory_mb));
    sbx_image_name(s->d, s->image, iname, sizeof iname);
    json_object_set_new(o, "image", json_string(iname));
    json_object_set_new(o, "timeout", json_integer(s->timeout_ms));
    json_object_set_new(o, "networkPolicy", vc_policy_out(s));
    json_object_set_new(o, "createdAt", json_integer(s->created_at));
    json_object_set_new(o, "updatedAt", json_integer(s->updated_at));
    if (s->sess) set_ms(o, "expiresAt", s->expires_at);
    json_object_set_new(o, "currentSessionId", json_string(sid));
    json_object_set_new(o, "status", json_string(status_of(s)));
    json_object_set_new(o, "cwd", json_string(VC_CWD));
    json_object_set_new(o, "tags", json_deep_copy(s->metadata));
    if (json_object_size(s->mounts)) json_object_set_new(o, "mounts", vc_mounts_out(s));
    if (s->snap_expiration_ms >= 0)
        json_object_set_new(o, "snapshotExpiration", json_integer(s->snap_expiration_ms));
    json_object_set_new(o, "id", json_string(s->id)); /* ours, beside Vercel's fields */
    return o;
}

/* Published ports: the loopback URL they have while a session runs. Vercel's subdomain
 * (the SDK's domain() turns it into https://<it>.vercel.run) cannot exist locally. */
json_t *vc_routes_json(struct sbx *s)
{
    json_t *o = json_object(), *out = json_array();
    sbx_net_json(s, o, false);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(o, "ports"), i, p) {
        json_int_t hp = json_integer_value(json_object_get(p, "host_port"));
        if (!hp) continue;
        char sub[48];
        snprintf(sub, sizeof sub, "127-0-0-1-%lld", (long long)hp);
        json_array_append_new(out, json_pack("{s:O, s:s, s:O}", "url", json_object_get(p, "url"),
                                             "subdomain", sub, "port", json_object_get(p, "port")));
    }
    json_decref(o);
    return out;
}

json_t *vc_sandbox_reply(struct sbx *s, int resumed)
{
    json_t *o = json_object();
    json_object_set_new(o, "sandbox", vc_sandbox_json(s));
    json_object_set_new(o, "session", vc_session_json(s));
    json_object_set_new(o, "routes", vc_routes_json(s));
    if (resumed >= 0) json_object_set_new(o, "resumed", json_boolean(resumed));
    return o;
}

json_t *vc_cmd_json(const struct sbx_cmd *c)
{
    const struct sbx *s = c->sbx;
    char sid[VC_SID_MAX];
    /* the session it ran in: the current one, unless that is a later one */
    vc_sid(s, s->sess && strcmp(s->sess->id, c->session_id) ? s->session_seq - 1 : s->session_seq,
           sid);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "name", json_copy(json_array_get(c->argv, 0)));
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(c->argv); i++)
        json_array_append(args, json_array_get(c->argv, i));
    json_object_set_new(o, "args", args);
    json_object_set_new(o, "cwd", json_string(c->cwd[0] ? c->cwd : VC_CWD));
    json_object_set_new(o, "sessionId", json_string(sid));
    int64_t start = c->started_at > 0 ? c->started_at : clock_now_ms();
    json_object_set_new(o, "startedAt", json_integer(start));
    if (c->status == CMD_EXITED || c->status == CMD_FAILED) {
        /* a command that could not start is "command not found", as a shell says */
        json_object_set_new(o, "exitCode", json_integer(c->status == CMD_FAILED ? 127 : c->exit_code));
        int64_t end = c->ended_at > 0 ? c->ended_at : start;
        json_object_set_new(o, "durationMs", json_integer(end > start ? end - start : 0));
    } else {
        json_object_set_new(o, "exitCode", json_null());
    }
    return o;
}

json_t *vc_snapshot_json(struct sbxd *d, json_t *snap)
{
    json_t *o = json_object();
    json_object_set(o, "id", json_object_get(snap, "id"));
    struct sbx *s = sbx_find_id(d, json_string_value(json_object_get(snap, "sandbox_id")));
    char sid[VC_SID_MAX] = "";
    if (s) vc_sid(s, s->session_seq, sid);
    json_object_set_new(o, "sourceSessionId", json_string(sid));
    json_object_set_new(o, "region", json_string(VC_REGION));
    json_object_set_new(o, "status", json_string("created"));
    json_object_set_new(o, "sizeBytes", json_integer(0)); /* trees share their blocks */
    int64_t created = vc_iso_ms(json_object_get(snap, "created_at"));
    json_object_set_new(o, "createdAt", json_integer(created));
    json_object_set_new(o, "updatedAt", json_integer(created));
    set_ms(o, "expiresAt", vc_iso_ms(json_object_get(snap, "expires_at")));
    json_object_set_new(o, "creationMethod", json_string("snapshot"));
    json_decref(snap);
    return o;
}
