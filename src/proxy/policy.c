/*
 * policy.c - sandbox network policy: JSON forms, validation, host matching
 * (see policy.h).
 *
 * A custom policy compiles to a flat array of domains: exact names and
 * wildcard suffixes (stored without the "*." so a match is a suffix compare on a
 * label boundary) plus a flag for "*". Matching scans the array once: a few
 * hundred entries cost less than one TLS record, and a connection is matched once.
 * Several rules for one domain merge their headers in order; a later header of
 * the same name (any case) replaces an earlier one. The rules without "match" are
 * merged once at parse time (the verdict's headers); a request is evaluated against
 * the rule list only when some rule has a "match" or routes (forward, response).
 * Address ranges (subnets) are two flat arrays of host-order net/mask pairs, scanned
 * once per address resolved.
 */
#include "proxy/policy.h"

#include "base/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum str_op { STR_ANY, STR_EXACT, STR_PREFIX };

struct str_match {
    enum str_op op;
    char *s;
    size_t len;
};

struct kv_match {
    struct str_match key, value;
};

struct rule_match {
    struct str_match path;
    char *methods[PROXY_POLICY_MAX_MATCHERS];
    size_t nmethods;
    struct kv_match query[PROXY_POLICY_MAX_MATCHERS];
    size_t nquery;
    struct kv_match headers[PROXY_POLICY_MAX_MATCHERS];
    size_t nheaders;
};

struct proxy_rule {
    struct rule_match *match;    /* NULL: every request */
    enum proxy_action_kind kind; /* UPSTREAM: a transform */
    bool plain_http;
    struct proxy_headers headers; /* transform */
    struct proxy_forward fwd;
    struct proxy_response resp;
};

struct proxy_domain {
    char *key;   /* as matched: "github.com" or "example.com" for "*.example.com" */
    char *label; /* as written in the policy, normalized ("*.example.com") */
    bool wildcard;
    bool plain_http;              /* some rule without match asked for its headers on port 80 too */
    bool per_request;             /* some rule has a match or routes: evaluate each request */
    bool routes;                  /* some rule forwards or answers */
    bool acts;                    /* some rule sets a header, forwards or answers: intercept */
    struct proxy_headers headers; /* merged headers of the rules without match */
    struct proxy_rule *rules;
    size_t nrules;
};

struct subnet {
    uint32_t net, mask; /* host order */
};

struct subnet_list {
    struct subnet *v;
    size_t n;
};

struct proxy_policy {
    int refs;
    enum proxy_policy_mode mode;
    bool any; /* "*" present */
    struct proxy_domain *d;
    size_t n;
    struct subnet_list sallow, sdeny;
    bool allow_wins; /* subnets.precedence "allow" (E2B) */
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

static void str_match_free(struct str_match *m)
{
    free(m->s);
    m->s = NULL;
}

static void rule_free(struct proxy_rule *r)
{
    if (r->match) {
        str_match_free(&r->match->path);
        for (size_t i = 0; i < r->match->nmethods; i++)
            free(r->match->methods[i]);
        for (size_t i = 0; i < r->match->nquery; i++) {
            str_match_free(&r->match->query[i].key);
            str_match_free(&r->match->query[i].value);
        }
        for (size_t i = 0; i < r->match->nheaders; i++) {
            str_match_free(&r->match->headers[i].key);
            str_match_free(&r->match->headers[i].value);
        }
        free(r->match);
    }
    headers_wipe(&r->headers);
    free(r->fwd.path);
    free(r->fwd.url);
    free(r->resp.content_type);
    headers_wipe(&r->resp.headers);
    free(r->resp.body);
    memset(r, 0, sizeof *r);
}

static void domain_fini(struct proxy_domain *d)
{
    free(d->key);
    free(d->label);
    headers_wipe(&d->headers);
    for (size_t j = 0; j < d->nrules; j++)
        rule_free(&d->rules[j]);
    free(d->rules);
}

static void policy_free(struct proxy_policy *p)
{
    for (size_t i = 0; i < p->n; i++)
        domain_fini(&p->d[i]);
    free(p->d);
    free(p->sallow.v);
    free(p->sdeny.v);
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

/* Set name: value in h, replacing a header of the same name (any case). */
static int header_put(struct proxy_headers *h, const char *k, size_t kl, const char *val, size_t vl,
                      const char *f, struct err *err)
{
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
    return 0;
}

/* Merge a {"Name": "value", ...} object into h (path names it, for errors). */
static int add_headers(struct proxy_headers *h, const json_t *hs, const char *path, struct err *err)
{
    char f[400];
    const char *k;
    json_t *v;
    if (!hs || !json_is_object(hs))
        return invalid(err, path, "%s: must be an object of header name to value", path);
    json_object_foreach((json_t *)hs, k, v)
    {
        size_t kl = strlen(k);
        snprintf(f, sizeof f, "%.200s.%.64s", path, k);
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
        if (header_put(h, k, kl, val, vl, f, err) < 0) return -1;
    }
    return 0;
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
    snprintf(f, sizeof f, "%.200s.headers", path);
    return add_headers(h, json_object_get(t, "headers"), f, err);
}

/* {"exact": s} | {"startsWith": s}: one of them, a string of at most
 * PROXY_POLICY_MAX_MATCH bytes. */
static int parse_str_match(struct str_match *m, const json_t *j, const char *path, struct err *err)
{
    char f[400];
    if (!json_is_object(j) || json_object_size(j) != 1)
        return invalid(err, path,
                       "%s: a matcher is an object with one of \"exact\" or \"startsWith\"", path);
    const char *k = json_object_iter_key(json_object_iter((json_t *)j));
    const json_t *v = json_object_iter_value(json_object_iter((json_t *)j));
    snprintf(f, sizeof f, "%.300s.%.32s", path, k);
    if (!strcmp(k, "regex"))
        return invalid(err, f,
                       "%s: regular expressions are not supported by this egress proxy; use "
                       "\"exact\" or \"startsWith\"",
                       f);
    if (strcmp(k, "exact") && strcmp(k, "startsWith"))
        return invalid(err, f, "%s: unknown matcher; use \"exact\" or \"startsWith\"", f);
    if (!json_is_string(v) || json_string_length(v) > PROXY_POLICY_MAX_MATCH)
        return invalid(err, f, "%s: must be a string of at most 1024 bytes", f);
    const char *sv = json_string_value(v);
    size_t n = json_string_length(v);
    if (memchr(sv, '\0', n)) return invalid(err, f, "%s: must not contain NUL", f);
    m->op = strcmp(k, "exact") ? STR_PREFIX : STR_EXACT;
    free(m->s);
    m->s = xstrndup(sv, n);
    m->len = n;
    return 0;
}

static int parse_kv_list(struct kv_match *out, size_t *n, const json_t *j, const char *path,
                         struct err *err)
{
    char f[400];
    if (!json_is_array(j) || json_array_size(j) > PROXY_POLICY_MAX_MATCHERS)
        return invalid(err, path, "%s: must be a list of at most 16 {\"key\", \"value\"} matchers",
                       path);
    size_t i;
    json_t *x;
    json_array_foreach(j, i, x)
    {
        snprintf(f, sizeof f, "%.300s[%zu]", path, i);
        *n = i + 1; /* counted before parsing: what a failure leaves is freed with the rule */
        if (!json_is_object(x) || json_object_size(x) == 0)
            return invalid(err, f,
                           "%s: must be {\"key\": matcher, \"value\": matcher} (either "
                           "may be left out, not both)",
                           f);
        const char *k;
        json_t *v;
        json_object_foreach(x, k, v)
        {
            char g[420];
            snprintf(g, sizeof g, "%.300s.%.32s", f, k);
            if (strcmp(k, "key") && strcmp(k, "value"))
                return invalid(err, g,
                               "%s: unknown key; a matcher entry takes \"key\" and "
                               "\"value\"",
                               g);
            struct str_match *m = !strcmp(k, "key") ? &out[i].key : &out[i].value;
            if (parse_str_match(m, v, g, err) < 0) return -1;
        }
    }
    return 0;
}

static int parse_match(struct rule_match *m, const json_t *j, const char *path, struct err *err)
{
    char f[400];
    if (!json_is_object(j))
        return invalid(err, path,
                       "%s: must be an object of \"path\", \"method\", \"queryString\" and "
                       "\"headers\"",
                       path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        snprintf(f, sizeof f, "%.300s.%.32s", path, k);
        if (!strcmp(k, "path")) {
            if (parse_str_match(&m->path, v, f, err) < 0) return -1;
            if (m->path.len == 0 || m->path.s[0] != '/')
                return invalid(err, f, "%s: a path starts with '/'", f);
        } else if (!strcmp(k, "method")) {
            if (!json_is_array(v) || json_array_size(v) == 0 ||
                json_array_size(v) > PROXY_POLICY_MAX_MATCHERS)
                return invalid(err, f, "%s: must be a list of 1 to 16 methods", f);
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x)
            {
                const char *ms = json_string_value(x);
                size_t ml = ms ? json_string_length(x) : 0;
                if (!ms || ml > 32 || !proxy_header_name_valid(ms, ml))
                    return invalid(err, f, "%s[%zu]: must be an HTTP method such as \"GET\"", f, i);
                m->methods[m->nmethods++] = xstrndup(ms, ml);
            }
        } else if (!strcmp(k, "queryString")) {
            if (parse_kv_list(m->query, &m->nquery, v, f, err) < 0) return -1;
        } else if (!strcmp(k, "headers")) {
            if (parse_kv_list(m->headers, &m->nheaders, v, f, err) < 0) return -1;
        } else {
            return invalid(err, f,
                           "%s: unknown key; a match takes \"path\", \"method\", "
                           "\"queryString\" and \"headers\"",
                           f);
        }
    }
    return 0;
}

/* http(s)://host[:port][/path], no user info, query or fragment. */
static int parse_forward(struct proxy_forward *fw, const json_t *j, const char *f, struct err *err)
{
    const char *u = json_string_value(j);
    size_t n = u ? json_string_length(j) : 0;
    if (!u || n > PROXY_POLICY_MAX_URL)
        return invalid(err, f, "%s: must be an http:// or https:// URL of at most 2048 bytes", f);
    size_t off;
    if (!strncasecmp(u, "https://", 8)) {
        fw->tls = true;
        off = 8;
    } else if (!strncasecmp(u, "http://", 7)) {
        fw->tls = false;
        off = 7;
    } else {
        return invalid(err, f, "%s: must start with http:// or https://", f);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c <= 0x20 || c >= 0x7f)
            return invalid(err, f,
                           "%s: spaces, control and non-ASCII bytes must be "
                           "percent-encoded",
                           f);
        if (c == '?' || c == '#')
            return invalid(err, f, "%s: must not have a query string or fragment", f);
    }
    const char *auth = u + off, *slash = memchr(auth, '/', n - off);
    size_t al = slash ? (size_t)(slash - auth) : n - off;
    if (memchr(auth, '@', al)) return invalid(err, f, "%s: must not carry user info", f);
    if (al == 0 || auth[0] == '[')
        return invalid(err, f,
                       "%s: needs a host name or IPv4 address (IPv6 literals are not "
                       "supported)",
                       f);
    if (proxy_host_normalize(auth, al, true, fw->host) < 0)
        return invalid(err, f, "%s: not a valid host[:port]", f);
    fw->port = fw->tls ? 443 : 80;
    const char *colon = memchr(auth, ':', al);
    if (colon) fw->port = (uint16_t)strtoul(colon + 1, NULL, 10); /* checked by normalize */
    size_t pl = slash ? n - off - al : 0;
    while (pl && slash[pl - 1] == '/')
        pl--;
    fw->path = xstrndup(slash ? slash : "", pl);
    fw->path_len = pl;
    fw->url = xstrndup(u, n);
    return 0;
}

static int parse_response(struct proxy_response *r, const json_t *j, const char *path,
                          struct err *err)
{
    char f[400];
    if (!json_is_object(j))
        return invalid(err, path,
                       "%s: must be {\"statusCode\": n, \"headers\"?, \"body\"?, "
                       "\"contentType\"?}",
                       path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        snprintf(f, sizeof f, "%.300s.%.32s", path, k);
        if (!strcmp(k, "statusCode")) {
            if (!json_is_integer(v) || json_integer_value(v) < 200 || json_integer_value(v) > 599)
                return invalid(err, f, "%s: must be a status from 200 to 599", f);
            r->status = (int)json_integer_value(v);
        } else if (!strcmp(k, "headers")) {
            if (add_headers(&r->headers, v, f, err) < 0) return -1;
        } else if (!strcmp(k, "body")) {
            if (!json_is_string(v) || json_string_length(v) > PROXY_POLICY_MAX_BODY)
                return invalid(err, f, "%s: must be a string of at most 65536 bytes", f);
            r->body = xmalloc(json_string_length(v) + 1);
            memcpy(r->body, json_string_value(v), json_string_length(v) + 1);
            r->body_len = json_string_length(v);
        } else if (!strcmp(k, "contentType")) {
            const char *ct = json_string_value(v);
            size_t cl = ct ? json_string_length(v) : 0;
            bool okay = ct && cl > 0 && cl <= PROXY_POLICY_MAX_HNAME;
            for (size_t i = 0; okay && i < cl; i++)
                okay = (unsigned char)ct[i] >= 0x20 && (unsigned char)ct[i] < 0x7f;
            if (!okay)
                return invalid(err, f, "%s: must be a media type such as \"application/json\"", f);
            r->content_type = xstrndup(ct, cl);
        } else {
            return invalid(err, f,
                           "%s: unknown key; a response takes \"statusCode\", \"headers\", "
                           "\"body\" and \"contentType\"",
                           f);
        }
    }
    snprintf(f, sizeof f, "%.300s.statusCode", path);
    if (!r->status) return invalid(err, f, "%s: is required", f);
    for (size_t i = 0; r->content_type && i < r->headers.n; i++)
        if (!strcasecmp(r->headers.v[i].name, "content-type"))
            return invalid(err, path,
                           "%s: give Content-Type either in headers or as "
                           "contentType, not both",
                           path);
    return 0;
}

/* One rule into r; all is the domain's merged headers (their count is capped). */
static int parse_rule(struct proxy_rule *r, struct proxy_headers *all, const json_t *j,
                      const char *f, struct err *err)
{
    char g[300];
    if (!json_is_object(j))
        return invalid(err, f,
                       "%s: a rule must be an object like "
                       "{\"transform\": [{\"headers\": {...}}]}",
                       f);
    const char *k;
    json_t *v;
    int actions = 0;
    json_object_foreach((json_t *)j, k, v)
    {
        snprintf(g, sizeof g, "%.200s.%.64s", f, k);
        bool action = !strcmp(k, "transform") || !strcmp(k, "forwardURL") || !strcmp(k, "response");
        if ((action && actions) || (!strcmp(k, "match") && r->match))
            return invalid(err, f,
                           "%s: give one of \"transform\", \"forwardURL\" or \"response\" "
                           "per rule, and one \"match\"",
                           f);
        if (!strcmp(k, "transform")) {
            actions++;
            if (!json_is_array(v)) return invalid(err, g, "%s: must be a list of transforms", g);
            if (json_array_size(v) > PROXY_POLICY_MAX_RULES)
                return invalid(err, g, "%s: more than 32 transforms", g);
            size_t ti;
            json_t *t;
            json_array_foreach(v, ti, t)
            {
                char h[340];
                snprintf(h, sizeof h, "%.300s[%zu]", g, ti);
                if (add_transform(&r->headers, t, h, err) < 0) return -1;
                if (add_transform(all, t, h, err) < 0) return -1;
            }
        } else if (!strcmp(k, "plain_http")) {
            if (!json_is_boolean(v))
                return invalid(err, g,
                               "%s: must be true or false (true also sets the headers on "
                               "plain HTTP, port 80, where they cross the network in "
                               "cleartext)",
                               g);
            r->plain_http = json_is_true(v);
        } else if (!strcmp(k, "match")) {
            r->match = xcalloc(1, sizeof *r->match);
            if (parse_match(r->match, v, g, err) < 0) return -1;
        } else if (!strcmp(k, "forwardURL")) {
            actions++;
            r->kind = PROXY_ACT_FORWARD;
            if (parse_forward(&r->fwd, v, g, err) < 0) return -1;
        } else if (!strcmp(k, "response")) {
            actions++;
            r->kind = PROXY_ACT_RESPOND;
            if (parse_response(&r->resp, v, g, err) < 0) return -1;
        } else {
            return invalid(err, g,
                           "%s: unknown key; a rule takes \"match\", \"plain_http\" and one "
                           "of \"transform\", \"forwardURL\" or \"response\"",
                           g);
        }
    }
    if (r->plain_http && r->kind != PROXY_ACT_UPSTREAM)
        return invalid(err, f,
                       "%s: \"plain_http\" applies to the headers a rule sets, and this "
                       "rule forwards or answers",
                       f);
    return 0;
}

static int add_rules(struct proxy_domain *d, const json_t *rules, const char *key, struct err *err)
{
    char f[200];
    if (!json_is_array(rules))
        return invalid(err, key,
                       "%s: the rules must be a list ([] allows the domain "
                       "unchanged)",
                       key);
    if (json_array_size(rules) > PROXY_POLICY_MAX_RULES)
        return invalid(err, key, "%s: more than 32 rules", key);
    struct proxy_headers all = {NULL, 0};
    d->rules = xcalloc(json_array_size(rules) + 1, sizeof *d->rules);
    size_t i;
    json_t *j;
    int rc = 0;
    json_array_foreach(rules, i, j)
    {
        snprintf(f, sizeof f, "%.100s[%zu]", key, i);
        struct proxy_rule *r = &d->rules[d->nrules++];
        if ((rc = parse_rule(r, &all, j, f, err)) < 0) break;
        if (r->kind != PROXY_ACT_UPSTREAM) d->routes = d->per_request = d->acts = true;
        if (r->headers.n) d->acts = true;
        if (r->match) d->per_request = true;
        if (!r->match && r->kind == PROXY_ACT_UPSTREAM) {
            for (size_t h = 0; h < r->headers.n && rc == 0; h++)
                rc = header_put(&d->headers, r->headers.v[h].name, r->headers.v[h].name_len,
                                r->headers.v[h].value, r->headers.v[h].value_len, f, err);
            if (rc < 0) break;
            if (r->plain_http) d->plain_http = true; /* for the whole domain, as before */
        }
    }
    size_t nall = all.n;
    headers_wipe(&all);
    if (rc == 0 && d->plain_http && nall == 0)
        return invalid(err, key,
                       "%s: \"plain_http\" applies to the headers a rule sets, and no rule "
                       "of this domain sets any",
                       key);
    return rc;
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
    struct proxy_domain d;
    memset(&d, 0, sizeof d);
    if (rules && add_rules(&d, rules, f, err) < 0) {
        domain_fini(&d);
        return -1;
    }
    p->d = xrealloc(p->d, (p->n + 1) * sizeof *p->d);
    d.key = xstrdup(norm);
    d.label = wild ? xasprintf("*.%s", norm) : xstrdup(norm);
    d.wildcard = wild;
    p->d[p->n++] = d;
    return 0;
}


/* ------------------------------------------------------------------ address ranges */

int proxy_cidr_parse(const char *s, uint32_t *net, uint32_t *mask)
{
    char a[INET6_ADDRSTRLEN + 8];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof a) return -EINVAL;
    memcpy(a, s, n + 1);
    char *slash = strchr(a, '/');
    unsigned bits = 32;
    if (slash) {
        *slash = '\0';
        const char *d = slash + 1;
        size_t dl = strlen(d);
        /* 1..2 digits, no sign, no leading zero ("/08" is a typo, not 8) */
        if (dl < 1 || dl > 2 || (dl == 2 && d[0] == '0')) return -EINVAL;
        bits = 0;
        for (size_t i = 0; i < dl; i++) {
            if (d[i] < '0' || d[i] > '9') return -EINVAL;
            bits = bits * 10 + (unsigned)(d[i] - '0');
        }
    }
    struct in_addr v4;
    struct in6_addr v6;
    if (inet_pton(AF_INET, a, &v4) != 1) /* strict: four decimal octets */
        return inet_pton(AF_INET6, a, &v6) == 1 ? -EAFNOSUPPORT : -EINVAL;
    if (bits > 32) return -EINVAL;
    uint32_t m = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
    uint32_t h = ntohl(v4.s_addr);
    if (h & ~m) return -EDOM;
    *net = h;
    *mask = m;
    return 0;
}

static int parse_subnet_list(struct subnet_list *l, const json_t *j, const char *key,
                             struct err *err)
{
    char f[48];
    snprintf(f, sizeof f, "subnets.%s", key);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_array(j) || json_array_size(j) > PROXY_POLICY_MAX_SUBNETS)
        return invalid(err, f, "%s must be a list of at most %d IPv4 addresses or CIDR ranges",
                       f, PROXY_POLICY_MAX_SUBNETS);
    size_t i;
    json_t *x;
    json_array_foreach((json_t *)j, i, x)
    {
        char fi[96];
        snprintf(fi, sizeof fi, "%s[%zu]", f, i);
        uint32_t net, mask;
        int rc = json_is_string(x) ? proxy_cidr_parse(json_string_value(x), &net, &mask)
                                   : -EINVAL;
        if (rc == -EAFNOSUPPORT)
            return invalid(err, fi,
                           "%s: IPv6 ranges cannot apply: sandboxes have no IPv6 (it is "
                           "dropped); give IPv4 ranges",
                           fi);
        if (rc == -EDOM)
            return invalid(err, fi,
                           "%s: the address has bits set beyond the prefix; give the "
                           "network's first address (e.g. 10.0.0.0/8)",
                           fi);
        if (rc < 0)
            return invalid(err, fi, "%s: must be an IPv4 address or CIDR range (\"10.0.0.0/8\", "
                           "\"203.0.113.7\")", fi);
        l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
        l->v[l->n].net = net;
        l->v[l->n].mask = mask;
        l->n++;
    }
    return 0;
}

/* {"allow": [...], "deny": [...], "precedence": "deny"|"allow"} into p. */
static int parse_subnets(struct proxy_policy *p, const json_t *j, struct err *err)
{
    if (!json_is_object(j))
        return invalid(err, "subnets", "%s",
                       "subnets must be {\"allow\": [CIDR], \"deny\": [CIDR]}");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)j, k, v)
    {
        if (strcmp(k, "allow") && strcmp(k, "deny") && strcmp(k, "precedence")) {
            char f[96];
            snprintf(f, sizeof f, "subnets.%.70s", k);
            return invalid(err, f, "%s: unknown key; subnets takes allow, deny and precedence",
                           f);
        }
    }
    const json_t *prec = json_object_get(j, "precedence");
    if (prec) {
        const char *s = json_is_string(prec) ? json_string_value(prec) : "";
        if (strcmp(s, "deny") && strcmp(s, "allow"))
            return invalid(err, "subnets.precedence", "%s",
                           "subnets.precedence must be \"deny\" (subnets.deny wins over every "
                           "allow) or \"allow\" (an allowed domain or range wins over "
                           "subnets.deny)");
        p->allow_wins = !strcmp(s, "allow");
    }
    if (parse_subnet_list(&p->sallow, json_object_get(j, "allow"), "allow", err) < 0) return -1;
    return parse_subnet_list(&p->sdeny, json_object_get(j, "deny"), "deny", err);
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

/* The domains of the wrapped form's "allow" (a map or a list), into a new policy. */
static struct proxy_policy *parse_allow(const json_t *allow, struct err *err)
{
    if (!allow) return proxy_policy_new_mode(PROXY_POLICY_CUSTOM);
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
    /* A bare map's values are rule lists, so an object under "subnets" is the range form */
    const json_t *subnets = json_object_get(j, "subnets");
    if (subnets && !json_is_object(subnets) && !mode && !allow) subnets = NULL;
    if (mode || allow || subnets) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            if (strcmp(k, "mode") && strcmp(k, "allow") && strcmp(k, "subnets")) {
                char f[96];
                snprintf(f, sizeof f, "%.80s", k);
                invalid(err, f, "%s: unknown key beside \"mode\"/\"allow\"/\"subnets\"", f);
                return NULL;
            }
        }
        if (mode && (allow || subnets)) {
            invalid(err, "mode", "%s",
                    "give either \"mode\" or \"allow\"/\"subnets\", not both");
            return NULL;
        }
        if (mode) {
            if (!json_is_string(mode)) {
                invalid(err, "mode", "%s", "mode must be \"allow-all\" or \"deny-all\"");
                return NULL;
            }
            return parse_mode(json_string_value(mode), "mode", err);
        }
        struct proxy_policy *p = parse_allow(allow, err);
        if (p && subnets && parse_subnets(p, subnets, err) < 0) {
            policy_free(p);
            return NULL;
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
    out->routes = false;
    out->domain = NULL;
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
        if (best->acts) {
            out->kind = PROXY_INTERCEPT;
            out->headers = &best->headers;
            out->plain_http = best->plain_http;
            out->routes = best->routes;
            out->domain = best;
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

static bool in_list(const struct subnet_list *l, uint32_t a)
{
    for (size_t i = 0; i < l->n; i++)
        if ((a & l->v[i].mask) == l->v[i].net) return true;
    return false;
}

/* The IPv4 address of sa (plain or IPv4-mapped IPv6), host order. */
static bool addr_v4(const struct sockaddr *sa, uint32_t *out)
{
    if (sa->sa_family == AF_INET) {
        *out = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        return true;
    }
    if (sa->sa_family != AF_INET6) return false;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (!IN6_IS_ADDR_V4MAPPED(a6)) return false;
    const uint8_t *b = a6->s6_addr;
    *out = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
    return true;
}

bool proxy_policy_has_subnets(const struct proxy_policy *p)
{
    return p->sallow.n || p->sdeny.n;
}

bool proxy_policy_subnets_allow(const struct proxy_policy *p)
{
    return p->sallow.n > 0;
}

void proxy_policy_match_addr(const struct proxy_policy *p, const struct proxy_verdict *name,
                             const struct sockaddr *sa, struct proxy_verdict *out)
{
    *out = *name;
    if (!proxy_policy_has_subnets(p)) return;
    uint32_t a = 0;
    if (!addr_v4(sa, &a)) {
        /* the ranges are IPv4: an IPv6 upstream could never be judged, so a policy with
         * ranges does not use one (a deny of 0.0.0.0/0 must not leak over IPv6) */
        memset(out, 0, sizeof *out);
        out->kind = PROXY_DENY;
        out->rule = "subnets.ipv6";
        return;
    }
    bool in_allow = in_list(&p->sallow, a), in_deny = in_list(&p->sdeny, a);
    bool named = name->kind != PROXY_DENY && strcmp(name->rule, "*"); /* a domain key */
    if (p->allow_wins && (named || in_allow)) {
        if (name->kind != PROXY_DENY) return;
    } else if (in_deny) {
        memset(out, 0, sizeof *out);
        out->kind = PROXY_DENY;
        out->rule = "subnets.deny";
        return;
    }
    if (name->kind != PROXY_DENY) return;
    if (in_allow) {
        out->kind = PROXY_PASS;
        out->rule = "subnets.allow";
    }
}

/* ------------------------------------------------------------------ per-request rules */

static bool str_matches(const struct str_match *m, const char *s, size_t n, bool icase)
{
    int (*cmp)(const char *, const char *, size_t) = icase ? strncasecmp : strncmp;
    switch (m->op) {
    case STR_ANY:
        return true;
    case STR_EXACT:
        return n == m->len && (n == 0 || cmp(s, m->s, n) == 0);
    case STR_PREFIX:
        return n >= m->len && (m->len == 0 || cmp(s, m->s, m->len) == 0);
    }
    return false;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode a query component (%XX, '+' as space, as URLSearchParams does). Only the first
 * PROXY_POLICY_MAX_MATCH + 1 bytes are kept: no matcher is longer, so a longer value
 * compares the same. A '%' not followed by two hex digits stays as it is. */
static size_t query_decode(const char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o <= PROXY_POLICY_MAX_MATCH; i++) {
        char c = in[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%' && i + 2 < n && hexval(in[i + 1]) >= 0 && hexval(in[i + 2]) >= 0) {
            c = (char)(hexval(in[i + 1]) * 16 + hexval(in[i + 2]));
            i += 2;
        }
        out[o++] = c;
    }
    return o;
}

static bool query_has(const struct kv_match *m, const char *q, size_t qn)
{
    char k[PROXY_POLICY_MAX_MATCH + 1], v[PROXY_POLICY_MAX_MATCH + 1];
    size_t i = 0;
    while (i < qn) {
        size_t e = i;
        while (e < qn && q[e] != '&')
            e++;
        if (e > i) {
            const char *eq = memchr(q + i, '=', e - i);
            size_t kl = eq ? (size_t)(eq - (q + i)) : e - i;
            size_t dk = query_decode(q + i, kl, k);
            size_t dv = eq ? query_decode(eq + 1, (size_t)(q + e - eq - 1), v) : 0;
            if (str_matches(&m->key, k, dk, false) && str_matches(&m->value, v, dv, false))
                return true;
        }
        i = e + 1;
    }
    return false;
}

static bool header_has(const struct kv_match *m, const struct proxy_request *rq)
{
    for (size_t i = 0; i < rq->nh; i++) {
        const char *v = rq->h[i].value;
        size_t vl = rq->h[i].value_len;
        while (vl && (v[0] == ' ' || v[0] == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (str_matches(&m->key, rq->h[i].name, rq->h[i].name_len, true) &&
            str_matches(&m->value, v, vl, false))
            return true;
    }
    return false;
}

static bool rule_matches(const struct rule_match *m, const struct proxy_request *rq)
{
    if (!str_matches(&m->path, rq->path, rq->path_len, false)) return false;
    if (m->nmethods) {
        size_t i = 0;
        while (i < m->nmethods && strcasecmp(m->methods[i], rq->method) != 0)
            i++;
        if (i == m->nmethods) return false;
    }
    for (size_t i = 0; i < m->nquery; i++)
        if (!query_has(&m->query[i], rq->query ? rq->query : "", rq->query ? rq->query_len : 0))
            return false;
    for (size_t i = 0; i < m->nheaders; i++)
        if (!header_has(&m->headers[i], rq)) return false;
    return true;
}

static void scratch_put(struct proxy_headers *h, const struct proxy_header *x)
{
    size_t j = 0;
    while (j < h->n && strcasecmp(h->v[j].name, x->name) != 0)
        j++;
    if (j == h->n) {
        if (h->n >= PROXY_POLICY_MAX_HEADERS) return; /* cannot happen: capped at parse */
        h->n++;
    }
    h->v[j] = *x;
}

void proxy_policy_eval(const struct proxy_verdict *v, const struct proxy_request *rq,
                       struct proxy_header *scratch, struct proxy_action *out)
{
    out->kind = PROXY_ACT_UPSTREAM;
    out->headers.v = scratch;
    out->headers.n = 0;
    out->plain_http = false;
    out->forward = NULL;
    out->response = NULL;
    out->rule = -1;
    const struct proxy_domain *d = v->domain;
    if (v->kind != PROXY_INTERCEPT || !d) return;
    if (!d->per_request) {
        for (size_t i = 0; i < d->headers.n; i++)
            scratch_put(&out->headers, &d->headers.v[i]);
        out->plain_http = d->plain_http;
        return;
    }
    out->plain_http = d->plain_http;
    for (size_t i = 0; i < d->nrules; i++) {
        const struct proxy_rule *r = &d->rules[i];
        if (r->match && !rule_matches(r->match, rq)) continue;
        if (r->kind == PROXY_ACT_UPSTREAM) {
            for (size_t k = 0; k < r->headers.n; k++)
                scratch_put(&out->headers, &r->headers.v[k]);
            if (r->plain_http) out->plain_http = true;
        } else if (out->rule < 0) {
            out->kind = r->kind;
            out->rule = (int)i;
            out->forward = r->kind == PROXY_ACT_FORWARD ? &r->fwd : NULL;
            out->response = r->kind == PROXY_ACT_RESPOND ? &r->resp : NULL;
        }
    }
}

bool proxy_verdict_same(const struct proxy_verdict *a, const struct proxy_verdict *b)
{
    if (a->kind != b->kind) return false;
    if (a->kind != PROXY_INTERCEPT) return true;
    if (a->plain_http != b->plain_http || a->routes != b->routes || a->headers->n != b->headers->n)
        return false;
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
