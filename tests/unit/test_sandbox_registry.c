/*
 * test_sandbox_registry.c - unit tests for the image reference grammar the registry
 * client pulls by (sbx_oci_ref_parse, oci.c): Docker Hub defaults (docker.io + library/), hosts with
 * ports, tags, digests, and the references that must be refused (with the field named).
 * The network half of the client is tested against a real registry in
 * tests/integration/test_sandbox_registry.py.
 */
#include "sandbox/storage/oci.h"
#include "sandbox/storage/registry.h"

#include <criterion/criterion.h>
#include <string.h>

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static struct sbx_oci_ref parse_ok(const char *s)
{
    struct sbx_oci_ref r;
    struct err err = ERR_INIT;
    cr_assert_eq(sbx_oci_ref_parse(s, &r, &err), 0, "%s: %s", s, err.msg);
    return r;
}

static void parse_bad(const char *s)
{
    struct sbx_oci_ref r;
    struct err err = ERR_INIT;
    cr_assert_eq(sbx_oci_ref_parse(s, &r, &err), -1, "%s was accepted", s);
    cr_assert_eq(err.status, 400);
    cr_assert_str_eq(err.field, "image");
}

Test(registry_ref, docker_hub_defaults)
{
    struct sbx_oci_ref r = parse_ok("debian");
    cr_assert_str_eq(r.registry, "docker.io");
    cr_assert_str_eq(r.repository, "library/debian");
    cr_assert_str_eq(r.tag, "latest");
    cr_assert_str_eq(r.digest, "");
    r = parse_ok("debian:bookworm-slim");
    cr_assert_str_eq(r.repository, "library/debian");
    cr_assert_str_eq(r.tag, "bookworm-slim");
    r = parse_ok("team/tool:1.2");
    cr_assert_str_eq(r.registry, "docker.io");
    cr_assert_str_eq(r.repository, "team/tool");
    cr_assert_str_eq(r.canonical, "docker.io/team/tool:1.2");
}

Test(registry_ref, hosts_ports_digests)
{
    struct sbx_oci_ref r = parse_ok("registry.example:5000/team/name:tag");
    cr_assert_str_eq(r.registry, "registry.example:5000");
    cr_assert_str_eq(r.repository, "team/name");
    cr_assert_str_eq(r.tag, "tag");
    r = parse_ok("127.0.0.1:5000/name");
    cr_assert_str_eq(r.registry, "127.0.0.1:5000");
    cr_assert_str_eq(r.repository, "name"); /* no library/ outside Docker Hub */
    cr_assert_str_eq(r.tag, "latest");
    r = parse_ok("localhost/a/b/c");
    cr_assert_str_eq(r.registry, "localhost");
    cr_assert_str_eq(r.repository, "a/b/c");
    r = parse_ok("name@sha256:" HEX64);
    cr_assert_str_eq(r.repository, "library/name");
    cr_assert_str_eq(r.tag, "");
    cr_assert_str_eq(r.digest, "sha256:" HEX64);
    r = parse_ok("ghcr.io/o/n:v1@sha256:" HEX64);
    cr_assert_str_eq(r.registry, "ghcr.io");
    cr_assert_str_eq(r.tag, "v1");
    cr_assert_str_eq(r.digest, "sha256:" HEX64);
    cr_assert_str_eq(r.canonical, "ghcr.io/o/n:v1@sha256:" HEX64);
    r = parse_ok("team/my_repo.name-x/sub__part:TAG_1.0-rc");
    cr_assert_str_eq(r.repository, "team/my_repo.name-x/sub__part");
    cr_assert_str_eq(r.tag, "TAG_1.0-rc");
}

Test(registry_ref, refused)
{
    parse_bad("");
    parse_bad("Debian");               /* uppercase */
    parse_bad("a//b");                 /* empty component */
    parse_bad("a/");                   /* trailing slash */
    parse_bad("../etc");               /* no path tricks */
    parse_bad("a/../b");
    parse_bad("-a");
    parse_bad("a:");                   /* empty tag */
    parse_bad("a:-x");
    parse_bad("a@sha256:abc");         /* short digest */
    parse_bad("a@sha512:" HEX64);      /* only sha256 */
    parse_bad("a@sha256:" HEX64 "0");
    parse_bad("ho_st.x/a");            /* host characters */
    parse_bad("a b");
    parse_bad("a\nb");
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    parse_bad(big);
    cr_assert(sbx_oci_digest_ok("sha256:" HEX64));
    cr_assert(!sbx_oci_digest_ok("sha256:" HEX64 "a"));
    cr_assert(!sbx_oci_digest_ok("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
}

Test(registry_auth, challenge_params)
{
    const char *ch = "realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
                     "scope=\"repository:library/debian:pull\"";
    char v[256];
    cr_assert(reg_challenge_param(ch, "realm", v, sizeof v));
    cr_assert_str_eq(v, "https://auth.docker.io/token");
    cr_assert(reg_challenge_param(ch, "service", v, sizeof v));
    cr_assert_str_eq(v, "registry.docker.io");
    cr_assert(reg_challenge_param(ch, "scope", v, sizeof v));
    cr_assert_str_eq(v, "repository:library/debian:pull");
    cr_assert(!reg_challenge_param(ch, "error", v, sizeof v));
    /* commas inside quotes, escapes, unquoted tokens, case-insensitive keys, spaces */
    const char *odd = "Realm=\"http://h/t?a=1,b=2\", error=insufficient_scope ,x=\"q\\\"uote\"";
    cr_assert(reg_challenge_param(odd, "realm", v, sizeof v));
    cr_assert_str_eq(v, "http://h/t?a=1,b=2");
    cr_assert(reg_challenge_param(odd, "error", v, sizeof v));
    cr_assert_str_eq(v, "insufficient_scope");
    cr_assert(reg_challenge_param(odd, "x", v, sizeof v));
    cr_assert_str_eq(v, "q\"uote");
    /* truncation, never an overflow; an unterminated quote ends the value */
    char small[5];
    cr_assert(reg_challenge_param(ch, "realm", small, sizeof small));
    cr_assert_str_eq(small, "http");
    cr_assert(reg_challenge_param("realm=\"abc", "realm", v, sizeof v));
    cr_assert_str_eq(v, "abc");
    cr_assert(!reg_challenge_param("", "realm", v, sizeof v));
    cr_assert(!reg_challenge_param("garbage without equals", "realm", v, sizeof v));
}

Test(registry_auth, auth_json_keys)
{
    char h[256];
    reg_auth_key_host("https://index.docker.io/v1/", h, sizeof h);
    cr_assert_str_eq(h, "docker.io");
    reg_auth_key_host("registry-1.docker.io", h, sizeof h);
    cr_assert_str_eq(h, "docker.io");
    reg_auth_key_host("ghcr.io", h, sizeof h);
    cr_assert_str_eq(h, "ghcr.io");
    reg_auth_key_host("http://127.0.0.1:5000/v2/", h, sizeof h);
    cr_assert_str_eq(h, "127.0.0.1:5000");
}
