/*
 * test_proxy_policy.c - unit tests for the sandbox network policy
 * (src/proxy/policy.c): the JSON forms, host matching (exact, wildcard, "*",
 * case and trailing dot), header merging, validation errors (which must never
 * quote a header value), host-name normalization, and address ranges (subnets:
 * CIDR parsing, the two precedences, hostile input).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proxy/policy.h"

static struct proxy_policy *ok(const char *json)
{
    struct err e = ERR_INIT;
    struct proxy_policy *p = proxy_policy_parse(json, strlen(json), &e);
    cr_assert_not_null(p, "policy should parse: %s: %s", json, e.msg);
    return p;
}

static struct err bad(const char *json)
{
    struct err e = ERR_INIT;
    struct proxy_policy *p = proxy_policy_parse(json, strlen(json), &e);
    cr_assert_null(p, "policy should be rejected: %s", json);
    cr_assert_eq(e.status, 400);
    cr_assert_str_eq(e.code, "validation_error");
    return e;
}

static enum proxy_verdict_kind kind(const struct proxy_policy *p, const char *host)
{
    struct proxy_verdict v;
    proxy_policy_match(p, host, &v);
    return v.kind;
}

static const char *header(const struct proxy_policy *p, const char *host, const char *name)
{
    struct proxy_verdict v;
    proxy_policy_match(p, host, &v);
    if (v.kind != PROXY_INTERCEPT) return NULL;
    for (size_t i = 0; i < v.headers->n; i++)
        if (!strcmp(v.headers->v[i].name, name)) return v.headers->v[i].value;
    return NULL;
}

#define DOC_POLICY                                                                                 \
    "{\"*\": [], \"github.com\": [{\"transform\": [{\"headers\": "                                 \
    "{\"Authorization\": \"Basic eC1hY2Nlc3MtdG9rZW46dG9r\"}}]}]}"

Test(proxy_policy, document_shape)
{
    struct proxy_policy *p = ok(DOC_POLICY);
    cr_assert_eq(proxy_policy_mode(p), PROXY_POLICY_CUSTOM);
    cr_assert_eq(proxy_policy_domain_count(p), 2);
    cr_assert_eq(kind(p, "github.com"), PROXY_INTERCEPT);
    cr_assert_str_eq(header(p, "github.com", "Authorization"), "Basic eC1hY2Nlc3MtdG9rZW46dG9r");
    /* "*" lets everything else through untouched, the API host included */
    cr_assert_eq(kind(p, "api.github.com"), PROXY_PASS);
    cr_assert_eq(kind(p, "pypi.org"), PROXY_PASS);
    struct proxy_verdict v;
    proxy_policy_match(p, "pypi.org", &v);
    cr_assert_str_eq(v.rule, "*");
    proxy_policy_unref(p);
}

Test(proxy_policy, modes)
{
    struct proxy_policy *a = ok("\"allow-all\""), *d = ok("{\"mode\": \"deny-all\"}");
    cr_assert_eq(kind(a, "anything.example"), PROXY_PASS);
    cr_assert_eq(kind(d, "anything.example"), PROXY_DENY);
    struct proxy_policy *a2 = ok("{\"mode\": \"allow-all\"}"), *d2 = ok("\"deny-all\"");
    cr_assert_eq(proxy_policy_mode(a2), PROXY_POLICY_ALLOW_ALL);
    cr_assert_eq(proxy_policy_mode(d2), PROXY_POLICY_DENY_ALL);
    struct proxy_policy *m = proxy_policy_new_mode(PROXY_POLICY_DENY_ALL);
    cr_assert_eq(kind(m, "x.y"), PROXY_DENY);
    proxy_policy_unref(a);
    proxy_policy_unref(d);
    proxy_policy_unref(a2);
    proxy_policy_unref(d2);
    proxy_policy_unref(m);
}

Test(proxy_policy, empty_map_denies_everything)
{
    struct proxy_policy *p = ok("{}");
    cr_assert_eq(kind(p, "github.com"), PROXY_DENY);
    proxy_policy_unref(p);
}

Test(proxy_policy, allow_wrapper_forms)
{
    struct proxy_policy *l = ok("{\"allow\": [\"a.example\", \"*.b.example\"]}");
    cr_assert_eq(kind(l, "a.example"), PROXY_PASS);
    cr_assert_eq(kind(l, "x.b.example"), PROXY_PASS);
    cr_assert_eq(kind(l, "b.example"), PROXY_DENY);
    cr_assert_eq(kind(l, "c.example"), PROXY_DENY);
    struct proxy_policy *m = ok("{\"allow\": {\"a.example\": [{\"transform\": [{\"headers\": "
                                "{\"X-Key\": \"k\"}}]}]}}");
    cr_assert_str_eq(header(m, "a.example", "X-Key"), "k");
    proxy_policy_unref(l);
    proxy_policy_unref(m);
}

Test(proxy_policy, wildcards)
{
    struct proxy_policy *p = ok("{\"*.example.com\": [], \"*.api.example.com\": [{\"transform\": "
                                "[{\"headers\": {\"X-Api\": \"1\"}}]}], \"exact.example.com\": "
                                "[{\"transform\": [{\"headers\": {\"X-Exact\": \"1\"}}]}]}");
    cr_assert_eq(kind(p, "example.com"), PROXY_DENY, "the apex is not covered by *.");
    cr_assert_eq(kind(p, "www.example.com"), PROXY_PASS);
    cr_assert_eq(kind(p, "a.b.c.example.com"), PROXY_PASS, "any depth");
    cr_assert_eq(kind(p, "badexample.com"), PROXY_DENY, "label boundary");
    cr_assert_eq(kind(p, "example.com.evil.net"), PROXY_DENY);
    /* the longest wildcard wins */
    cr_assert_str_eq(header(p, "v1.api.example.com", "X-Api"), "1");
    cr_assert_eq(kind(p, "api.example.com"), PROXY_PASS, "*.example.com, not *.api...");
    /* exact beats wildcard */
    cr_assert_str_eq(header(p, "exact.example.com", "X-Exact"), "1");
    cr_assert_null(header(p, "exact.example.com", "X-Api"));
    struct proxy_verdict v;
    proxy_policy_match(p, "v1.api.example.com", &v);
    cr_assert_str_eq(v.rule, "*.api.example.com");
    proxy_policy_unref(p);
}

Test(proxy_policy, case_and_trailing_dot)
{
    struct proxy_policy *p = ok("{\"GitHub.COM.\": [{\"transform\": [{\"headers\": "
                                "{\"Authorization\": \"t\"}}]}]}");
    cr_assert_eq(kind(p, "github.com"), PROXY_INTERCEPT);
    cr_assert_eq(kind(p, "GITHUB.com."), PROXY_INTERCEPT);
    cr_assert_eq(kind(p, "github.com.."), PROXY_DENY);
    cr_assert_eq(kind(p, ""), PROXY_DENY);
    cr_assert_eq(kind(p, NULL), PROXY_DENY);
    cr_assert_eq(kind(p, "git hub.com"), PROXY_DENY);
    proxy_policy_unref(p);
}

Test(proxy_policy, headers_merge_later_wins_case_insensitively)
{
    struct proxy_policy *p =
        ok("{\"h.example\": [{\"transform\": [{\"headers\": {\"Authorization\": \"one\", \"X-A\": "
           "\"a\"}}, {\"headers\": {\"authorization\": \"two\"}}]}, {\"transform\": [{\"headers\": "
           "{\"X-B\": \"b\"}}]}]}");
    struct proxy_verdict v;
    proxy_policy_match(p, "h.example", &v);
    cr_assert_eq(v.kind, PROXY_INTERCEPT);
    cr_assert_eq(v.headers->n, 3);
    cr_assert_str_eq(v.headers->v[0].name, "authorization");
    cr_assert_str_eq(v.headers->v[0].value, "two");
    cr_assert_str_eq(v.headers->v[1].value, "a");
    cr_assert_str_eq(v.headers->v[2].value, "b");
    proxy_policy_unref(p);
}

Test(proxy_policy, rules_without_headers_pass)
{
    struct proxy_policy *p = ok("{\"a.example\": [{}], \"b.example\": [{\"transform\": []}]}");
    cr_assert_eq(kind(p, "a.example"), PROXY_PASS);
    cr_assert_eq(kind(p, "b.example"), PROXY_PASS);
    proxy_policy_unref(p);
}

/* Headers go over plain HTTP (port 80) only when a rule of the domain says so. */
Test(proxy_policy, plain_http_is_explicit)
{
    struct proxy_policy *p =
        ok("{\"tls.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}]}],"
           " \"old.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}],"
           "                    \"plain_http\": true}],"
           " \"no.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}],"
           "                   \"plain_http\": false}],"
           " \"merged.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}]},"
           "                      {\"plain_http\": true}]}");
    const char *hosts[] = {"tls.example", "old.example", "no.example", "merged.example"};
    bool want[] = {false, true, false, true};
    for (size_t i = 0; i < 4; i++) {
        struct proxy_verdict v;
        proxy_policy_match(p, hosts[i], &v);
        cr_assert_eq(v.kind, PROXY_INTERCEPT, "%s", hosts[i]);
        cr_assert_eq(v.plain_http, want[i], "%s", hosts[i]);
    }
    /* a change of plain_http alone changes how a connection is treated */
    struct proxy_verdict a, b;
    proxy_policy_match(p, "tls.example", &a);
    proxy_policy_match(p, "old.example", &b);
    cr_assert_not(proxy_verdict_same(&a, &b));
    proxy_policy_unref(p);

    struct err e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}],"
                       " \"plain_http\": \"yes\"}]}");
    cr_assert_str_eq(e.field, "a.example[0].plain_http");
    cr_assert(strstr(e.msg, "true or false"), "%s", e.msg);
    e = bad("{\"a.example\": [{\"plain_http\": true}]}");
    cr_assert_str_eq(e.field, "a.example");
    cr_assert(strstr(e.msg, "no rule"), "%s", e.msg);
    e = bad("{\"a.example\": [{\"plainHttp\": true}]}");
    cr_assert(strstr(e.msg, "plain_http"), "the error names the key that exists: %s", e.msg);
}

Test(proxy_policy, validation_errors)
{
    struct err e;
    e = bad("[1]");
    e = bad("42");
    e = bad("\"open\"");
    cr_assert(strstr(e.msg, "allow-all"));
    e = bad("{\"mode\": \"allow-all\", \"allow\": []}");
    e = bad("{\"mode\": \"allow-all\", \"subnets\": {}}");
    cr_assert(strstr(e.msg, "subnet"));
    e = bad("{\"*\": [{\"transform\": [{\"headers\": {\"Authorization\": \"x\"}}]}]}");
    cr_assert_str_eq(e.field, "*");
    e = bad("{\"bad host!\": []}");
    cr_assert_str_eq(e.field, "bad host!");
    e = bad("{\"a.example\": [], \"A.EXAMPLE\": []}");
    cr_assert(strstr(e.msg, "twice"));
    e = bad("{\"a.example\": {}}");
    e = bad("{\"a.example\": [{\"match\": {\"path\": {\"regex\": \"^/a\"}}, "
            "\"forwardURL\": \"https://f.example\"}]}");
    cr_assert(strstr(e.msg, "not supported"));
    cr_assert_str_eq(e.field, "a.example[0].match.path.regex");
    e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"X\": 1}}]}]}");
    e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"X Y\": \"1\"}}]}]}");
    cr_assert_str_eq(e.field, "a.example[0].transform[0].headers.X Y");
    e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"Host\": \"b.example\"}}]}]}");
    e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"Content-Length\": \"1\"}}]}]}");
    e = bad("{\"a.example\": [{\"transform\": [{\"headers\": {\"X\": \"1\"}, \"body\": 1}]}]}");
    e = bad("{\"a.example\": [], \"a.example\": []}"); /* duplicate JSON keys */
    e = bad("{not json");
}

Test(proxy_policy, bad_values_are_never_quoted)
{
    const char *secrets[] = {"Bearer SECRET\r\nX-Evil: 1", "SECRET\n", "SEC\x01RET"};
    for (size_t i = 0; i < 3; i++) {
        json_t *j = json_pack("{s:[{s:[{s:{s:s}}]}]}", "a.example", "transform", "headers",
                              "Authorization", secrets[i]);
        struct err e = ERR_INIT;
        cr_assert_null(proxy_policy_from_json(j, &e));
        cr_assert(strstr(e.msg, "control character"), "%s", e.msg);
        cr_assert_null(strstr(e.msg, "SECRET"), "the value leaked into: %s", e.msg);
        cr_assert_null(strstr(e.msg, "SEC"), "the value leaked into: %s", e.msg);
        json_decref(j);
    }
}

Test(proxy_policy, size_caps)
{
    char *big = malloc(PROXY_POLICY_MAX_HVALUE + 2);
    memset(big, 'a', PROXY_POLICY_MAX_HVALUE + 1);
    big[PROXY_POLICY_MAX_HVALUE + 1] = '\0';
    json_t *j = json_pack("{s:[{s:[{s:{s:s}}]}]}", "a.example", "transform", "headers", "X", big);
    struct err e = ERR_INIT;
    cr_assert_null(proxy_policy_from_json(j, &e));
    cr_assert(strstr(e.msg, "8192"));
    json_decref(j);
    big[PROXY_POLICY_MAX_HVALUE] = '\0'; /* exactly the cap is fine */
    j = json_pack("{s:[{s:[{s:{s:s}}]}]}", "a.example", "transform", "headers", "X", big);
    struct proxy_policy *p = proxy_policy_from_json(j, &e);
    cr_assert_not_null(p, "%s", e.msg);
    proxy_policy_unref(p);
    json_decref(j);
    free(big);

    json_t *hs = json_object();
    for (int i = 0; i <= PROXY_POLICY_MAX_HEADERS; i++) {
        char n[16];
        snprintf(n, sizeof n, "X-%d", i);
        json_object_set_new(hs, n, json_string("v"));
    }
    j = json_pack("{s:[{s:[{s:o}]}]}", "a.example", "transform", "headers", hs);
    cr_assert_null(proxy_policy_from_json(j, &e));
    cr_assert(strstr(e.msg, "64 headers"));
    json_decref(j);

    char *huge = malloc(PROXY_POLICY_MAX_BYTES + 2);
    memset(huge, ' ', PROXY_POLICY_MAX_BYTES + 1);
    cr_assert_null(proxy_policy_parse(huge, PROXY_POLICY_MAX_BYTES + 1, &e));
    free(huge);
}

Test(proxy_policy, refcount_keeps_old_policy_alive)
{
    struct proxy_policy *p = ok(DOC_POLICY);
    struct proxy_policy *held = proxy_policy_ref(p);
    struct proxy_verdict v;
    proxy_policy_match(held, "github.com", &v);
    proxy_policy_unref(p); /* the sandbox moved on; the connection still holds it */
    cr_assert_eq(v.kind, PROXY_INTERCEPT);
    cr_assert_str_eq(v.headers->v[0].name, "Authorization");
    proxy_policy_unref(held);
}

Test(proxy_policy, verdict_same)
{
    struct proxy_policy *a =
        ok("{\"h.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}]}]}");
    struct proxy_policy *b =
        ok("{\"h.example\": [{\"transform\": [{\"headers\": {\"A\": \"1\"}}]}]}");
    struct proxy_policy *c =
        ok("{\"h.example\": [{\"transform\": [{\"headers\": {\"A\": \"2\"}}]}]}");
    struct proxy_policy *d = ok("{\"h.example\": []}");
    struct proxy_verdict va, vb, vc, vd;
    proxy_policy_match(a, "h.example", &va);
    proxy_policy_match(b, "h.example", &vb);
    proxy_policy_match(c, "h.example", &vc);
    proxy_policy_match(d, "h.example", &vd);
    cr_assert(proxy_verdict_same(&va, &vb));
    cr_assert_not(proxy_verdict_same(&va, &vc));
    cr_assert_not(proxy_verdict_same(&va, &vd));
    cr_assert_str_eq(proxy_verdict_name(vd.kind), "pass");
    proxy_policy_unref(a);
    proxy_policy_unref(b);
    proxy_policy_unref(c);
    proxy_policy_unref(d);
}

Test(proxy_policy, load_file)
{
    char path[] = "/tmp/rebuno-policy-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(DOC_POLICY, f);
    fclose(f);
    struct err e = ERR_INIT;
    struct proxy_policy *p = proxy_policy_load_file(path, &e);
    cr_assert_not_null(p, "%s", e.msg);
    cr_assert_eq(kind(p, "github.com"), PROXY_INTERCEPT);
    proxy_policy_unref(p);
    unlink(path);
    cr_assert_null(proxy_policy_load_file(path, &e));
    cr_assert(strstr(e.msg, path));
}

Test(proxy_host, normalize)
{
    char out[PROXY_HOST_MAX + 1];
    cr_assert_eq(proxy_host_normalize("GitHub.Com.", 11, false, out), 0);
    cr_assert_str_eq(out, "github.com");
    cr_assert_eq(proxy_host_normalize("a.b:443", 7, true, out), 0);
    cr_assert_str_eq(out, "a.b");
    cr_assert_eq(proxy_host_normalize("a.b:443", 7, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("a.b:0", 5, true, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("a.b:65536", 9, true, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("a.b:", 4, true, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("[::1]:80", 8, true, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("10.0.0.1", 8, false, out), 0);
    cr_assert_eq(proxy_host_normalize("a..b", 4, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize(".a", 2, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("", 0, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize(".", 1, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("a\0b", 3, false, out), -EINVAL);
    cr_assert_eq(proxy_host_normalize("a/b", 3, false, out), -EINVAL);
    char label[80];
    memset(label, 'a', 64);
    cr_assert_eq(proxy_host_normalize(label, 63, false, out), 0);
    cr_assert_eq(proxy_host_normalize(label, 64, false, out), -EINVAL);
    char longname[300];
    for (int i = 0; i < 300; i += 2) {
        longname[i] = 'a';
        longname[i + 1] = '.';
    }
    cr_assert_eq(proxy_host_normalize(longname, 253, false, out), 0);
    cr_assert_eq(proxy_host_normalize(longname, 255, false, out), -EINVAL);
}

Test(proxy_host, header_names)
{
    cr_assert(proxy_header_name_valid("Authorization", 13));
    cr_assert(proxy_header_name_valid("X-a_b.c!#$%&'*+^`|~", 19));
    cr_assert_not(proxy_header_name_valid("", 0));
    cr_assert_not(proxy_header_name_valid("A B", 3));
    cr_assert_not(proxy_header_name_valid("A:B", 3));
    cr_assert_not(proxy_header_name_valid("A\0B", 3));
    cr_assert_not(proxy_header_name_valid("A\r", 2));
    cr_assert_not(proxy_header_name_valid("Ä", 2));
}

/* ------------------------------------------------------------------ per-request rules */

static struct proxy_request req(const char *method, const char *target,
                                const struct proxy_req_header *h, size_t nh)
{
    struct proxy_request r = {method, target, strlen(target), NULL, 0, h, nh};
    const char *q = strchr(target, '?');
    if (q) {
        r.path_len = (size_t)(q - target);
        r.query = q + 1;
        r.query_len = strlen(q + 1);
    }
    return r;
}

/* The action for one request to host under policy p; hdr: the value set for name (or NULL). */
static struct proxy_action eval(const struct proxy_policy *p, const char *host,
                                const struct proxy_request *r, struct proxy_header *scratch)
{
    struct proxy_verdict v;
    struct proxy_action a;
    proxy_policy_match(p, host, &v);
    proxy_policy_eval(&v, r, scratch, &a);
    return a;
}

static const char *set_value(const struct proxy_action *a, const char *name)
{
    for (size_t i = 0; i < a->headers.n; i++)
        if (!strcasecmp(a->headers.v[i].name, name)) return a->headers.v[i].value;
    return NULL;
}

#define ROUTED_POLICY                                                                              \
    "{\"allow\": {\"api.example\": ["                                                              \
    "{\"match\": {\"path\": {\"startsWith\": \"/fwd/\"}, \"method\": [\"post\", \"PUT\"]},"        \
    " \"forwardURL\": \"http://proxy.example:8080/base/\"},"                                       \
    "{\"match\": {\"path\": {\"exact\": \"/blocked\"}}, \"response\": {\"statusCode\": 451,"       \
    " \"body\": \"no\", \"contentType\": \"text/plain\", \"headers\": {\"X-Why\": \"policy\"}}},"  \
    "{\"match\": {\"queryString\": [{\"key\": {\"exact\": \"a b\"}, \"value\": {\"startsWith\": "  \
    "\"x&\"}}]}, \"response\": {\"statusCode\": 204}},"                                            \
    "{\"match\": {\"headers\": [{\"key\": {\"exact\": \"x-api-key\"}, \"value\": {\"exact\": "     \
    "\"placeholder\"}}]}, \"transform\": [{\"headers\": {\"Authorization\": \"Bearer real\"}}]},"  \
    "{\"transform\": [{\"headers\": {\"X-Always\": \"1\"}}]},"                                     \
    "{\"response\": {\"statusCode\": 200, \"body\": \"fallback\"}, \"match\": {\"method\": "       \
    "[\"DELETE\"]}}"                                                                               \
    "], \"plain.example\": []}}"

Test(proxy_policy, per_request_rules_first_route_wins_transforms_merge)
{
    struct proxy_policy *p = ok(ROUTED_POLICY);
    struct proxy_header scratch[PROXY_POLICY_MAX_HEADERS];
    struct proxy_verdict v;
    proxy_policy_match(p, "api.example", &v);
    cr_assert_eq(v.kind, PROXY_INTERCEPT);
    cr_assert(v.routes);
    proxy_policy_match(p, "plain.example", &v);
    cr_assert_eq(v.kind, PROXY_PASS);
    cr_assert(!v.routes);

    /* path prefix + method (any case in the policy) */
    struct proxy_request r = req("POST", "/fwd/x?y=1", NULL, 0);
    struct proxy_action a = eval(p, "api.example", &r, scratch);
    cr_assert_eq(a.kind, PROXY_ACT_FORWARD);
    cr_assert_eq(a.rule, 0);
    cr_assert_str_eq(a.forward->host, "proxy.example");
    cr_assert_eq(a.forward->port, 8080);
    cr_assert(!a.forward->tls);
    cr_assert_str_eq(a.forward->path, "/base");       /* trailing '/' dropped */
    cr_assert_str_eq(set_value(&a, "X-Always"), "1"); /* transforms still apply */
    r = req("GET", "/fwd/x", NULL, 0);                /* method not listed */
    a = eval(p, "api.example", &r, scratch);
    cr_assert_eq(a.kind, PROXY_ACT_UPSTREAM);
    cr_assert_eq(a.rule, -1);
    r = req("POST", "/fwd", NULL, 0); /* "/fwd" does not start with "/fwd/" */
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);

    /* exact path: not a prefix, and the query is not part of the path */
    r = req("GET", "/blocked?z=1", NULL, 0);
    a = eval(p, "api.example", &r, scratch);
    cr_assert_eq(a.kind, PROXY_ACT_RESPOND);
    cr_assert_eq(a.response->status, 451);
    cr_assert_str_eq(a.response->body, "no");
    cr_assert_str_eq(a.response->content_type, "text/plain");
    cr_assert_eq(a.response->headers.n, 1);
    r = req("GET", "/blocked/more", NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);

    /* query: decoded key and value ("a+b" and "a%20b" are "a b"; %26 is '&') */
    r = req("GET", "/q?z=0&a+b=x%26y", NULL, 0);
    a = eval(p, "api.example", &r, scratch);
    cr_assert_eq(a.kind, PROXY_ACT_RESPOND);
    cr_assert_eq(a.response->status, 204);
    r = req("GET", "/q?a%20b=x%26", NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_RESPOND);
    r = req("GET", "/q?a+b=x&y", NULL, 0); /* raw '&' splits: value "x" */
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);
    r = req("GET", "/q?a+b", NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);

    /* header: the name in any case, the value exactly (surrounding whitespace ignored) */
    struct proxy_req_header h[] = {{"Accept", "*/*", 6, 3}, {"X-API-Key", " placeholder ", 9, 13}};
    r = req("GET", "/h", h, 2);
    a = eval(p, "api.example", &r, scratch);
    cr_assert_eq(a.kind, PROXY_ACT_UPSTREAM);
    cr_assert_str_eq(set_value(&a, "Authorization"), "Bearer real");
    cr_assert_str_eq(set_value(&a, "X-Always"), "1");
    struct proxy_req_header h2[] = {{"x-api-key", "Placeholder", 9, 11}};
    r = req("GET", "/h", h2, 1);
    a = eval(p, "api.example", &r, scratch);
    cr_assert_null(set_value(&a, "Authorization"));
    cr_assert_str_eq(set_value(&a, "X-Always"), "1");

    /* the first route wins: DELETE /blocked answers 451, not the DELETE fallback */
    r = req("DELETE", "/blocked", NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).response->status, 451);
    r = req("DELETE", "/other", NULL, 0);
    cr_assert_str_eq(eval(p, "api.example", &r, scratch).response->body, "fallback");
    proxy_policy_unref(p);
}

Test(proxy_policy, per_request_rules_validation)
{
    struct err e;
    e = bad("{\"a.example\": [{\"forwardURL\": \"ftp://x.example/\"}]}");
    cr_assert_str_eq(e.field, "a.example[0].forwardURL");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example/p?q=1\"}]}");
    cr_assert(strstr(e.msg, "query"));
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://u:p@x.example/\"}]}");
    cr_assert(strstr(e.msg, "user info"));
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example:0/\"}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example:99999/\"}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://[::1]/\"}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example/a b\"}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https:///p\"}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": 7}]}");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example\", "
            "\"transform\": [{\"headers\": {\"A\": \"1\"}}]}]}");
    cr_assert(strstr(e.msg, "one of"));
    cr_assert_str_eq(e.field, "a.example[0]");
    e = bad("{\"a.example\": [{\"forwardURL\": \"https://x.example\", \"response\": "
            "{\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"response\": {}}]}");
    cr_assert_str_eq(e.field, "a.example[0].response.statusCode");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 101}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 600}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": \"200\"}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200, \"headers\": "
            "{\"Content-Length\": \"5\"}}}]}");
    cr_assert_str_eq(e.field, "a.example[0].response.headers.Content-Length");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200, \"headers\": "
            "{\"X\": \"a\\r\\nY: b\"}}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200, \"contentType\": "
            "\"text/html\\r\\nX: 1\"}}]}");
    cr_assert_str_eq(e.field, "a.example[0].response.contentType");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200, \"contentType\": \"a/b\", "
            "\"headers\": {\"content-type\": \"c/d\"}}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200, \"status\": 1}}]}");
    e = bad("{\"a.example\": [{\"response\": {\"statusCode\": 200}, \"plain_http\": true}]}");
    e = bad("{\"a.example\": [{\"match\": {\"path\": {\"exact\": \"a\"}}, "
            "\"response\": {\"statusCode\": 200}}]}");
    cr_assert_str_eq(e.field, "a.example[0].match.path");
    e = bad("{\"a.example\": [{\"match\": {\"path\": {\"exact\": \"/a\", \"startsWith\": \"/\"}}, "
            "\"response\": {\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"match\": {\"path\": {}}, \"response\": {\"statusCode\": 200}}]}");
    e = bad(
        "{\"a.example\": [{\"match\": {\"method\": []}, \"response\": {\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"match\": {\"method\": [\"G T\"]}, \"response\": "
            "{\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"match\": {\"headers\": [{}]}, \"response\": "
            "{\"statusCode\": 200}}]}");
    cr_assert_str_eq(e.field, "a.example[0].match.headers[0]");
    e = bad("{\"a.example\": [{\"match\": {\"headers\": [{\"name\": {\"exact\": \"a\"}}]}, "
            "\"response\": {\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"match\": {\"queryString\": [{\"key\": {\"regex\": \".*\"}}]}, "
            "\"response\": {\"statusCode\": 200}}]}");
    cr_assert_str_eq(e.field, "a.example[0].match.queryString[0].key.regex");
    e = bad("{\"a.example\": [{\"match\": {\"host\": {\"exact\": \"a\"}}, \"response\": "
            "{\"statusCode\": 200}}]}");
    e = bad("{\"a.example\": [{\"match\": {\"path\": {\"exact\": \"/a\\u0000b\"}}, "
            "\"response\": {\"statusCode\": 200}}]}");

    /* bounds: body size, matcher size and count */
    size_t big = PROXY_POLICY_MAX_BODY + 1;
    char *j = malloc(big + 200);
    int n = snprintf(j, 200, "{\"a.example\": [{\"response\": {\"statusCode\": 200, \"body\": \"");
    memset(j + n, 'x', big);
    strcpy(j + n + big, "\"}}]}");
    e = bad(j);
    cr_assert_str_eq(e.field, "a.example[0].response.body");
    strcpy(j + n + big - 1, "\"}}]}"); /* exactly the limit */
    proxy_policy_unref(ok(j));
    n = snprintf(j, 200, "{\"a.example\": [{\"match\": {\"path\": {\"startsWith\": \"/");
    memset(j + n, 'p', PROXY_POLICY_MAX_MATCH);
    strcpy(j + n + PROXY_POLICY_MAX_MATCH, "\"}}, \"response\": {\"statusCode\": 200}}]}");
    e = bad(j);
    free(j);
    char m[4096] = "{\"a.example\": [{\"match\": {\"headers\": [";
    for (int i = 0; i < PROXY_POLICY_MAX_MATCHERS + 1; i++)
        strcat(m, i ? ", {\"key\": {\"exact\": \"a\"}}" : "{\"key\": {\"exact\": \"a\"}}");
    strcat(m, "]}, \"response\": {\"statusCode\": 200}}]}");
    e = bad(m);
    cr_assert_str_eq(e.field, "a.example[0].match.headers");
}

Test(proxy_policy, per_request_hostile_requests)
{
    struct proxy_policy *p = ok(ROUTED_POLICY);
    struct proxy_header scratch[PROXY_POLICY_MAX_HEADERS];
    /* a huge query value: decoding is capped, matching still decides */
    size_t n = 200000;
    char *t = malloc(n + 32);
    strcpy(t, "/q?a+b=x%26");
    memset(t + 11, '%', n);
    t[11 + n] = '\0';
    struct proxy_request r = req("GET", t, NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_RESPOND);
    /* a lone '%' at the end, '%' with one digit, '&&&&' */
    strcpy(t, "/q?&&&a+b=x%2&b=%");
    r = req("GET", t, NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);
    strcpy(t, "/q?&&&a+b=x%26%");
    r = req("GET", t, NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_RESPOND);
    /* an empty path and a request without a query */
    r = req("GET", "", NULL, 0);
    cr_assert_eq(eval(p, "api.example", &r, scratch).kind, PROXY_ACT_UPSTREAM);
    free(t);
    /* a verdict that is not intercept yields the plain upstream action */
    struct proxy_verdict v;
    struct proxy_action a;
    proxy_policy_match(p, "plain.example", &v);
    proxy_policy_eval(&v, &r, scratch, &a);
    cr_assert_eq(a.kind, PROXY_ACT_UPSTREAM);
    cr_assert_eq(a.headers.n, 0);
    proxy_policy_unref(p);
}

/* ------------------------------------------------------------------ address ranges */

static struct sockaddr_storage v4(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;
    s->sin_family = AF_INET;
    cr_assert_eq(inet_pton(AF_INET, a, &s->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
    s->sin6_family = AF_INET6;
    cr_assert_eq(inet_pton(AF_INET6, a, &s->sin6_addr), 1);
    return ss;
}

/* The verdict for host connected at address a. */
static struct proxy_verdict at(const struct proxy_policy *p, const char *host,
                               struct sockaddr_storage a)
{
    struct proxy_verdict name, out;
    proxy_policy_match(p, host, &name);
    proxy_policy_match_addr(p, &name, (struct sockaddr *)&a, &out);
    return out;
}

Test(proxy_cidr, parse)
{
    uint32_t n, m;
    cr_assert_eq(proxy_cidr_parse("10.0.0.0/8", &n, &m), 0);
    cr_assert_eq(n, 0x0a000000u);
    cr_assert_eq(m, 0xff000000u);
    cr_assert_eq(proxy_cidr_parse("203.0.113.7", &n, &m), 0);
    cr_assert_eq(m, 0xffffffffu);
    cr_assert_eq(proxy_cidr_parse("203.0.113.7/32", &n, &m), 0);
    cr_assert_eq(n, 0xcb007107u);
    cr_assert_eq(proxy_cidr_parse("0.0.0.0/0", &n, &m), 0);
    cr_assert_eq(m, 0);
    cr_assert_eq(proxy_cidr_parse("10.1.2.3/8", &n, &m), -EDOM, "host bits set");
    cr_assert_eq(proxy_cidr_parse("::/0", &n, &m), -EAFNOSUPPORT);
    cr_assert_eq(proxy_cidr_parse("2001:db8::1", &n, &m), -EAFNOSUPPORT);
    static const char *const hostile[] = {
        "", "/", "/8", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/08",
        "10.0.0.0/8/8", "10.0.0.0/ 8", " 10.0.0.0", "10.0.0", "10.0.0.0.0", "010.0.0.0",
        "256.0.0.0", "0x0a.0.0.0", "10.0.0.0/999", "example.com", "10.0.0.0/8\n", "1.2.3.4 ",
        "10.0.0.0/100000000000000000000", "::ffff:1.2.3.4/129",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        int rc = proxy_cidr_parse(hostile[i], &n, &m);
        cr_assert(rc == -EINVAL || rc == -EAFNOSUPPORT, "\"%s\" must be refused (%d)", hostile[i],
                  rc);
    }
    char big[300];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(proxy_cidr_parse(big, &n, &m), -EINVAL);
}

Test(proxy_policy, subnets_deny_precedence_vercel)
{
    /* Vercel: subnets.allow bypasses the domains; subnets.deny beats every allow */
    struct proxy_policy *p =
        ok("{\"allow\": [\"a.example\"], \"subnets\": {\"allow\": [\"10.0.0.0/8\"], "
           "\"deny\": [\"10.1.0.0/16\", \"198.51.100.9\"]}}");
    cr_assert(proxy_policy_has_subnets(p));
    cr_assert(proxy_policy_subnets_allow(p));
    cr_assert_eq(at(p, "a.example", v4("192.0.2.1")).kind, PROXY_PASS);
    struct proxy_verdict v = at(p, "a.example", v4("198.51.100.9"));
    cr_assert_eq(v.kind, PROXY_DENY, "deny beats an allowed domain");
    cr_assert_str_eq(v.rule, "subnets.deny");
    cr_assert_eq(at(p, "a.example", v4("10.1.2.3")).kind, PROXY_DENY);
    v = at(p, "other.example", v4("10.2.0.1"));
    cr_assert_eq(v.kind, PROXY_PASS, "an allowed range needs no domain");
    cr_assert_str_eq(v.rule, "subnets.allow");
    cr_assert_eq(at(p, "other.example", v4("10.1.0.1")).kind, PROXY_DENY, "deny beats allow");
    cr_assert_eq(at(p, "other.example", v4("11.0.0.1")).kind, PROXY_DENY);
    cr_assert_eq(at(p, "10.2.0.1", v4("10.2.0.1")).kind, PROXY_PASS, "an IP literal");
    /* IPv4-mapped IPv6 counts as IPv4; other IPv6 upstreams cannot be judged by IPv4
     * ranges, so a policy with ranges uses none (a deny must not leak over IPv6) */
    cr_assert_eq(at(p, "other.example", v6("::ffff:10.2.0.1")).kind, PROXY_PASS);
    cr_assert_eq(at(p, "a.example", v6("::ffff:10.1.0.1")).kind, PROXY_DENY);
    cr_assert_eq(at(p, "other.example", v6("2001:db8::1")).kind, PROXY_DENY);
    v = at(p, "a.example", v6("2001:db8::1"));
    cr_assert_eq(v.kind, PROXY_DENY);
    cr_assert_str_eq(v.rule, "subnets.ipv6");
    /* names alone are unchanged: DNS answers only allowed domains */
    cr_assert_eq(kind(p, "other.example"), PROXY_DENY);
    proxy_policy_unref(p);
}

Test(proxy_policy, subnets_allow_precedence_e2b)
{
    /* E2B: allowOut (domain or range) wins over denyOut; "*" does not */
    struct proxy_policy *p = ok("{\"allow\": {\"*\": [], \"a.example\": [], \"*.w.example\": []}, "
                                "\"subnets\": {\"allow\": [\"198.51.100.0/24\"], \"deny\": "
                                "[\"198.51.100.0/24\", \"203.0.113.0/24\"], "
                                "\"precedence\": \"allow\"}}");
    cr_assert_eq(at(p, "a.example", v4("203.0.113.5")).kind, PROXY_PASS, "a domain wins");
    cr_assert_eq(at(p, "x.w.example", v4("203.0.113.5")).kind, PROXY_PASS, "a wildcard wins");
    cr_assert_eq(at(p, "any.example", v4("203.0.113.5")).kind, PROXY_DENY, "\"*\" does not");
    cr_assert_eq(at(p, "any.example", v4("198.51.100.5")).kind, PROXY_PASS, "a range wins");
    cr_assert_eq(at(p, "any.example", v4("192.0.2.5")).kind, PROXY_PASS);
    proxy_policy_unref(p);
    /* without "*": a name nobody allowed, at an address nobody allowed */
    p = ok("{\"subnets\": {\"allow\": [\"198.51.100.7\"], \"deny\": [\"0.0.0.0/0\"], "
           "\"precedence\": \"allow\"}}");
    cr_assert_eq(proxy_policy_domain_count(p), 0);
    cr_assert_eq(at(p, "n.example", v4("198.51.100.7")).kind, PROXY_PASS);
    cr_assert_eq(at(p, "n.example", v4("198.51.100.8")).kind, PROXY_DENY);
    proxy_policy_unref(p);
}

Test(proxy_policy, subnets_keep_domain_rules)
{
    /* an intercepting domain stays intercepting when its address is fine */
    struct proxy_policy *p = ok("{\"allow\": {\"a.example\": [{\"transform\": [{\"headers\": "
                                "{\"X-K\": \"v\"}}]}]}, \"subnets\": {\"deny\": [\"10.0.0.0/8\"]}}");
    cr_assert(!proxy_policy_subnets_allow(p));
    cr_assert_eq(at(p, "a.example", v4("192.0.2.1")).kind, PROXY_INTERCEPT);
    cr_assert_eq(at(p, "a.example", v4("10.0.0.1")).kind, PROXY_DENY);
    proxy_policy_unref(p);
    /* no ranges: the address changes nothing */
    p = ok("{\"a.example\": []}");
    cr_assert(!proxy_policy_has_subnets(p));
    cr_assert_eq(at(p, "a.example", v4("10.0.0.1")).kind, PROXY_PASS);
    cr_assert_eq(at(p, "b.example", v4("10.0.0.1")).kind, PROXY_DENY);
    proxy_policy_unref(p);
    /* a bare map may still name a host "subnets" */
    p = ok("{\"subnets\": []}");
    cr_assert_eq(kind(p, "subnets"), PROXY_PASS);
    proxy_policy_unref(p);
}

Test(proxy_policy, subnets_validation)
{
    struct err e = bad("{\"subnets\": {\"deny\": [\"10.0.0.0/8\", \"10.1.2.3/8\"]}}");
    cr_assert_str_eq(e.field, "subnets.deny[1]");
    cr_assert(strstr(e.msg, "10.0.0.0/8"), "%s", e.msg);
    e = bad("{\"subnets\": {\"allow\": [\"2001:db8::/32\"]}}");
    cr_assert_str_eq(e.field, "subnets.allow[0]");
    cr_assert(strstr(e.msg, "IPv6"), "%s", e.msg);
    e = bad("{\"subnets\": {\"allow\": [7]}}");
    cr_assert_str_eq(e.field, "subnets.allow[0]");
    e = bad("{\"subnets\": {\"allow\": \"10.0.0.0/8\"}}");
    cr_assert_str_eq(e.field, "subnets.allow");
    e = bad("{\"subnets\": {\"allowed\": []}}");
    cr_assert_str_eq(e.field, "subnets.allowed");
    e = bad("{\"subnets\": {\"precedence\": \"first\"}}");
    cr_assert_str_eq(e.field, "subnets.precedence");
    e = bad("{\"allow\": [], \"subnets\": []}");
    cr_assert_str_eq(e.field, "subnets");
    e = bad("{\"allow\": [], \"subnets\": {}, \"extra\": 1}");
    cr_assert_str_eq(e.field, "extra");
    /* the bound */
    char *big = malloc(300 * 24 + 64);
    size_t n = (size_t)sprintf(big, "{\"subnets\": {\"deny\": [");
    for (int i = 0; i < PROXY_POLICY_MAX_SUBNETS + 1; i++)
        n += (size_t)sprintf(big + n, "%s\"10.0.%d.%d\"", i ? "," : "", i / 256, i % 256);
    sprintf(big + n, "]}}");
    e = bad(big);
    cr_assert_str_eq(e.field, "subnets.deny");
    free(big);
}
