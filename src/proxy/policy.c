/*
 * policy.c - sandbox network policy: JSON forms, validation, host matching
 * (see policy.h).
 *
 * A custom policy compiles to a flat array of domains: exact names and
 * wildcard suffixes (stored without the "*." so a match is a suffix compare on a
 * label boundary) plus a flag for "*". Matching scans the array once: a few
 * hundred entries cost less than one TLS record, and a connection is matched once.
 * Several rules for one domain merge their headers in order; a later header of
 * the same name (any case) replaces an earlier one.
 */
#include "proxy/policy.h"

#include "base/xalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct proxy_domain {
    char *key;   /* as matched: "github.com" or "example.com" for "*.example.com" */
    char *label; /* as written in the policy, normalized ("*.example.com") */
    bool wildcard;
    bool plain_http; /* some rule asked for its headers on port 80 too */
    struct proxy_headers headers;
};

struct proxy_policy {
    int refs;
    enum proxy_policy_mode mode;
    bool any; /* "*" present */
    struct proxy_domain *d;
    size_t n;
};

/* ------------------------------------------------------------------ host names */

static bool host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int proxy_host_normalize(const char *in, size_t n, bool allow_port, char *out)
{
    if (allow_port) {
        /* Strip ":digits" (1..5 digits). A second ':' means IPv6 or junk: refuse. */
        const char *colon = memchr(in, ':', n);
        if (colon) {
            size_t hl = (size_t)(colon - in), pl = n - hl - 1;
            if (pl < 1 || pl > 5) return -EINVAL;
            unsigned port = 0;
            for (size_t i = 0; i < pl; i++) {
                char c = colon[1 + i];
                if (c < '0' || c > '9') return -EINVAL;
                port = port * 10 + (unsigned)(c - '0');
            }
            if (port == 0 || port > 65535) return -EINVAL;
            n = hl;
        }
    }
    if (n > 0 && in[n - 1] == '.') n--;
    if (n == 0 || n > PROXY_HOST_MAX) return -EINVAL;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
        if (c == '.') {
            if (label == 0) return -EINVAL;
            label = 0;
        } else {
            if (!host_char(c) || ++label > 63) return -EINVAL;
        }
        out[i] = (char)c;
    }
    if (label == 0) return -EINVAL;
    out[n] = '\0';
    return 0;
}

bool proxy_header_name_valid(const char *s, size_t n)
{
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) continue;
        if (!strchr("!#$%&'*+-.^_`|~", c) || c == 0) return false;
    }
    return true;
}

/* Headers a policy may not set: they frame the message or the connection, so a
 * value from a policy could desynchronize the proxy and the upstream. */
static const char *const forbidden_headers[] = {
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
    "te",   "trailer",        "upgrade",           "expect",
};

static bool header_forbidden(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(forbidden_headers); i++)
        if (!strcasecmp(name, forbidden_headers[i])) return true;
    return false;
}

/* ------------------------------------------------------------------ lifetime */

static void headers_wipe(struct proxy_headers *h)
{
    for (size_t i = 0; i < h->n; i++) {
        free(h->v[i].name);
        explicit_bzero(h->v[i].value, h->v[i].value_len);
        free(h->v[i].value);
    }
    free(h->v);
    h->v = NULL;
    h->n = 0;
}

static void policy_free(struct proxy_policy *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->d[i].key);
        free(p->d[i].label);
        headers_wipe(&p->d[i].headers);
    }
    free(p->d);
    free(p);
}

struct proxy_policy *proxy_policy_ref(struct proxy_policy *p)
{
    ASSERT(p->refs > 0);
    p->refs++;
    return p;
}

void proxy_policy_unref(struct proxy_policy *p)
{
    if (!p) return;
    ASSERT(p->refs > 0);
    if (--p->refs == 0) policy_free(p);
}

struct proxy_policy *proxy_policy_new_mode(enum proxy_policy_mode mode)
{
    struct proxy_policy *p = xcalloc(1, sizeof *p);
    p->refs = 1;
    p->mode = mode;
    return p;
}

enum proxy_policy_mode proxy_policy_mode(const struct proxy_policy *p)
{
    return p->mode;
}

size_t proxy_policy_domain_count(const struct proxy_policy *p)
{
    return p->n + (p->any ? 1 : 0);
}

/* ------------------------------------------------------------------ parsing */

static int invalid(struct err *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int invalid(struct err *err, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, 400, "validation_error", field, fmt, ap);
    va_end(ap);
    return -1;
}

/* Merge one {"headers": {...}} transform into h. */
static int add_transform(struct proxy_headers *h, const json_t *t, const char *path,
                         struct err *err)
{
    char f[400];
    if (!json_is_object(t))
        return invalid(err, path,
                       "%s: a transform must be an object like "
                       "{\"headers\": {\"Authorization\": \"...\"}}",
                       path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)t, k, v)
    {
        if (strcmp(k, "headers") != 0) {
            snprintf(f, sizeof f, "%.200s.%.64s", path, k);
            return invalid(err, f, "%s: unknown key; a transform takes only \"headers\"", f);
        }
    }
    const json_t *hs = json_object_get(t, "headers");
    snprintf(f, sizeof f, "%.200s.headers", path);
    if (!hs || !json_is_object(hs))
        return invalid(err, f, "%s: must be an object of header name to value", f);
    json_object_foreach((json_t *)hs, k, v)
    {
        size_t kl = strlen(k);
        snprintf(f, sizeof f, "%.200s.headers.%.64s", path, k);
        if (kl > PROXY_POLICY_MAX_HNAME || !proxy_header_name_valid(k, kl))
            return invalid(err, f,
                           "%s: not a valid header name (letters, digits and "
                           "!#$%%&'*+-.^_`|~ only, at most 256 bytes)",
                           f);
        if (header_forbidden(k))
            return invalid(err, f,
                           "%s: this header frames the message or the connection "
                           "and cannot be set by a policy",
                           f);
        if (!json_is_string(v)) return invalid(err, f, "%s: the value must be a string", f);
        const char *val = json_string_value(v);
        size_t vl = json_string_length(v);
        if (vl > PROXY_POLICY_MAX_HVALUE)
            return invalid(err, f, "%s: the value is longer than 8192 bytes", f);
        for (size_t i = 0; i < vl; i++) {
            unsigned char c = (unsigned char)val[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return invalid(err, f,
                               "%s: the value contains a control character "
                               "(CR, LF, NUL, ...); header values must be one line",
                               f);
        }
        size_t j = 0;
        while (j < h->n && strcasecmp(h->v[j].name, k) != 0)
            j++;
        if (j == h->n) {
            if (h->n >= PROXY_POLICY_MAX_HEADERS)
                return invalid(err, f, "%s: more than 64 headers for one domain", f);
            h->v = xrealloc(h->v, (h->n + 1) * sizeof *h->v);
            h->n++;
        } else {
            free(h->v[j].name);
            explicit_bzero(h->v[j].value, h->v[j].value_len);
            free(h->v[j].value);
        }
        h->v[j].name = xstrndup(k, kl);
        h->v[j].name_len = kl;
        h->v[j].value = xstrndup(val, vl);
        h->v[j].value_len = vl;
    }
    return 0;
}

static int add_rules(struct proxy_headers *h, bool *plain_http, const json_t *rules,
                     const char *key, struct err *err)
{
    char f[200];
    if (!json_is_array(rules))
        return invalid(err, key,
                       "%s: the rules must be a list ([] allows the domain "
                       "unchanged)",
                       key);
    if (json_array_size(rules) > PROXY_POLICY_MAX_RULES)
        return invalid(err, key, "%s: more than 32 rules", key);
    size_t i, ti;
    json_t *r, *t;
    json_array_foreach(rules, i, r)
    {
        snprintf(f, sizeof f, "%.100s[%zu]", key, i);
        if (!json_is_object(r))
            return invalid(err, f,
                           "%s: a rule must be an object like "
                           "{\"transform\": [{\"headers\": {...}}]}",
                           f);
        const char *k;
        json_t *v;
        json_object_foreach(r, k, v)
        {
            if (strcmp(k, "transform") == 0) continue;
            char g[300];
            snprintf(g, sizeof g, "%.200s.%.64s", f, k);
            if (strcmp(k, "plain_http") == 0) {
                if (!json_is_boolean(v))
                    return invalid(err, g,
                                   "%s: must be true or false (true also sets the headers on "
                                   "plain HTTP, port 80, where they cross the network in "
                                   "cleartext)",
                                   g);
                if (json_is_true(v)) *plain_http = true;
                continue;
            }
            if (!strcmp(k, "match") || !strcmp(k, "forwardURL") || !strcmp(k, "response"))
                return invalid(err, g,
                               "%s: not supported by this egress proxy; rules take "
                               "only \"transform\" and \"plain_http\"",
                               g);
            return invalid(
                err, g, "%s: unknown key; a rule takes only \"transform\" and \"plain_http\"", g);
        }
        const json_t *tr = json_object_get(r, "transform");
        if (!tr) continue;
        snprintf(f, sizeof f, "%.100s[%zu].transform", key, i);
        if (!json_is_array(tr)) return invalid(err, f, "%s: must be a list of transforms", f);
        if (json_array_size(tr) > PROXY_POLICY_MAX_RULES)
            return invalid(err, f, "%s: more than 32 transforms", f);
        json_array_foreach(tr, ti, t)
        {
            char g[300];
            snprintf(g, sizeof g, "%.200s[%zu]", f, ti);
            if (add_transform(h, t, g, err) < 0) return -1;
        }
    }
    return 0;
}

/* Add one domain key with its rules (rules NULL = the list form: no rules). */
static int add_domain(struct proxy_policy *p, const char *key, const json_t *rules, struct err *err)
{
    char f[96];
    snprintf(f, sizeof f, "%.80s", key);
    if (!strcmp(key, "*")) {
        if (p->any) return invalid(err, f, "%s: listed twice", f);
        if (rules && (!json_is_array(rules) || json_array_size(rules) != 0))
            return invalid(err, f,
                           "%s: \"*\" allows every other host unchanged and takes no "
                           "rules (write [] ); put header rules on a named domain",
                           f);
        p->any = true;
        return 0;
    }
    bool wild = !strncmp(key, "*.", 2);
    const char *name = wild ? key + 2 : key;
    char norm[PROXY_HOST_MAX + 1];
    if (proxy_host_normalize(name, strlen(name), false, norm) < 0)
        return invalid(err, f,
                       "%s: not a host name; use \"example.com\", \"*.example.com\" "
                       "or \"*\" (letters, digits, '-', '_', dot-separated labels)",
                       f);
    for (size_t i = 0; i < p->n; i++)
        if (p->d[i].wildcard == wild && !strcmp(p->d[i].key, norm))
            return invalid(err, f, "%s: listed twice (names are case-insensitive)", f);
    if (p->n >= PROXY_POLICY_MAX_DOMAINS) return invalid(err, f, "%s: more than 4096 domains", f);
    struct proxy_headers h = {NULL, 0};
    bool plain_http = false;
    if (rules && add_rules(&h, &plain_http, rules, f, err) < 0) {
        headers_wipe(&h);
        return -1;
    }
    if (plain_http && h.n == 0)
        return invalid(err, f,
                       "%s: \"plain_http\" applies to the headers a rule sets, and no rule "
                       "of this domain sets any",
                       f);
    p->d = xrealloc(p->d, (p->n + 1) * sizeof *p->d);
    struct proxy_domain *d = &p->d[p->n++];
    d->key = xstrdup(norm);
    d->label = wild ? xasprintf("*.%s", norm) : xstrdup(norm);
    d->wildcard = wild;
    d->plain_http = plain_http;
    d->headers = h;
    return 0;
}

static struct proxy_policy *parse_map(const json_t *m, struct err *err)
{
    struct proxy_policy *p = proxy_policy_new_mode(PROXY_POLICY_CUSTOM);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v)
    {
        if (add_domain(p, k, v, err) < 0) {
            policy_free(p);
            return NULL;
        }
    }
    return p;
}

static struct proxy_policy *parse_mode(const char *s, const char *field, struct err *err)
{
    if (!strcmp(s, "allow-all")) return proxy_policy_new_mode(PROXY_POLICY_ALLOW_ALL);
    if (!strcmp(s, "deny-all")) return proxy_policy_new_mode(PROXY_POLICY_DENY_ALL);
    invalid(err, field,
            "%s: unknown mode; use \"allow-all\", \"deny-all\" or a map of "
            "domains to rules",
            field);
    return NULL;
}

struct proxy_policy *proxy_policy_from_json(const json_t *j, struct err *err)
{
    if (json_is_string(j)) return parse_mode(json_string_value(j), "mode", err);
    if (!json_is_object(j)) {
        invalid(err, "", "%s",
                "a network policy is \"allow-all\", \"deny-all\" or an object "
                "mapping domains to rules");
        return NULL;
    }
    const json_t *mode = json_object_get(j, "mode");
    const json_t *allow = json_object_get(j, "allow");
    if (mode || allow) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            if (strcmp(k, "mode") && strcmp(k, "allow")) {
                char f[96];
                snprintf(f, sizeof f, "%.80s", k);
                invalid(err, f,
                        "%s: unknown key beside \"mode\"/\"allow\" (subnet rules are "
                        "not supported by the egress proxy)",
                        f);
                return NULL;
            }
        }
        if (mode && allow) {
            invalid(err, "mode", "%s", "give either \"mode\" or \"allow\", not both");
            return NULL;
        }
        if (mode) {
            if (!json_is_string(mode)) {
                invalid(err, "mode", "%s", "mode must be \"allow-all\" or \"deny-all\"");
                return NULL;
            }
            return parse_mode(json_string_value(mode), "mode", err);
        }
        if (json_is_object(allow)) return parse_map(allow, err);
        if (!json_is_array(allow)) {
            invalid(err, "allow", "%s",
                    "allow must be a list of domains or a map of domains "
                    "to rules");
            return NULL;
        }
        struct proxy_policy *p = proxy_policy_new_mode(PROXY_POLICY_CUSTOM);
        size_t i;
        json_t *item;
        json_array_foreach(allow, i, item)
        {
            if (!json_is_string(item)) {
                char f[32];
                snprintf(f, sizeof f, "allow[%zu]", i);
                invalid(err, f, "%s: must be a domain name string", f);
                policy_free(p);
                return NULL;
            }
            if (add_domain(p, json_string_value(item), NULL, err) < 0) {
                policy_free(p);
                return NULL;
            }
        }
        return p;
    }
    return parse_map(j, err);
}

struct proxy_policy *proxy_policy_parse(const char *text, size_t len, struct err *err)
{
    if (len > PROXY_POLICY_MAX_BYTES) {
        invalid(err, "", "%s", "the network policy is larger than 1 MiB");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j) {
        /* jansson's message quotes no input bytes beyond a key name */
        err_set(err, 400, "validation_error", "",
                "network policy is not valid JSON: line %d "
                "column %d: %s",
                je.line, je.column, je.text);
        return NULL;
    }
    struct proxy_policy *p = proxy_policy_from_json(j, err);
    json_decref(j);
    return p;
}

struct proxy_policy *proxy_policy_load_file(const char *path, struct err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, 400, "validation_error", "", "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *data = xmalloc(PROXY_POLICY_MAX_BYTES + 1);
    size_t n = fread(data, 1, PROXY_POLICY_MAX_BYTES + 1, f);
    bool bad = ferror(f);
    fclose(f);
    struct proxy_policy *p = NULL;
    if (bad)
        err_set(err, 400, "validation_error", "", "%s: read error", path);
    else if ((p = proxy_policy_parse(data, n, err)) == NULL)
        err_wrap(err, "%s", path);
    explicit_bzero(data, n);
    free(data);
    return p;
}

/* ------------------------------------------------------------------ matching */

void proxy_policy_match(const struct proxy_policy *p, const char *host, struct proxy_verdict *out)
{
    out->kind = PROXY_DENY;
    out->headers = NULL;
    out->rule = "";
    out->plain_http = false;
    char h[PROXY_HOST_MAX + 1];
    if (!host || proxy_host_normalize(host, strlen(host), false, h) < 0) return;
    if (p->mode == PROXY_POLICY_ALLOW_ALL) {
        out->kind = PROXY_PASS;
        out->rule = "allow-all";
        return;
    }
    if (p->mode == PROXY_POLICY_DENY_ALL) return;
    size_t hl = strlen(h);
    const struct proxy_domain *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct proxy_domain *d = &p->d[i];
        if (!d->wildcard) {
            if (!strcmp(d->key, h)) {
                best = d;
                break; /* exact beats any wildcard */
            }
            continue;
        }
        size_t kl = strlen(d->key);
        if (hl > kl + 1 && h[hl - kl - 1] == '.' && !memcmp(h + hl - kl, d->key, kl) &&
            kl + 1 > best_len) {
            best = d;
            best_len = kl + 1;
        }
    }
    if (best) {
        out->rule = best->label;
        if (best->headers.n) {
            out->kind = PROXY_INTERCEPT;
            out->headers = &best->headers;
            out->plain_http = best->plain_http;
        } else {
            out->kind = PROXY_PASS;
        }
        return;
    }
    if (p->any) {
        out->kind = PROXY_PASS;
        out->rule = "*";
    }
}

bool proxy_verdict_same(const struct proxy_verdict *a, const struct proxy_verdict *b)
{
    if (a->kind != b->kind) return false;
    if (a->kind != PROXY_INTERCEPT) return true;
    if (a->plain_http != b->plain_http || a->headers->n != b->headers->n) return false;
    for (size_t i = 0; i < a->headers->n; i++) {
        const struct proxy_header *x = &a->headers->v[i], *y = &b->headers->v[i];
        if (strcmp(x->name, y->name) || x->value_len != y->value_len ||
            memcmp(x->value, y->value, x->value_len))
            return false;
    }
    return true;
}

const char *proxy_verdict_name(enum proxy_verdict_kind k)
{
    switch (k) {
    case PROXY_DENY:
        return "deny";
    case PROXY_PASS:
        return "pass";
    case PROXY_INTERCEPT:
        return "intercept";
    }
    return "?";
}
