/*
 * test_proxy_ca.c - unit tests for the per-sandbox CA (src/proxy/ca.c), the
 * worker pool that signs off the loop (src/proxy/worker.c) and the upstream
 * address checks (src/proxy/addr.c).
 *
 * Minted leaves are verified the way a client in the sandbox would: an X509 store
 * holding only the CA certificate, purpose sslserver, host name check.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/addr.h"
#include "proxy/ca.h"
#include "proxy/worker.h"

static int verify(X509 *ca, X509 *leaf, const char *host)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_add_cert(store, ca);
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, leaf, NULL);
    X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set_purpose(p, X509_PURPOSE_SSL_SERVER);
    X509_VERIFY_PARAM_set1_host(p, host, 0);
    X509_VERIFY_PARAM_set_flags(p, X509_V_FLAG_X509_STRICT);
    int ok = X509_verify_cert(ctx);
    int e = X509_STORE_CTX_get_error(ctx);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return ok == 1 ? 0 : e;
}

Test(proxy_ca, mint_verifies_for_its_host_only)
{
    struct err e = ERR_INIT;
    struct proxy_ca *ca = proxy_ca_new("sbx1", 24, &e);
    cr_assert_not_null(ca, "%s", e.msg);
    X509 *leaf = proxy_ca_mint(ca, "github.example", 24, &e);
    cr_assert_not_null(leaf, "%s", e.msg);
    cr_assert_eq(verify(proxy_ca_cert(ca), leaf, "github.example"), 0);
    cr_assert_eq(verify(proxy_ca_cert(ca), leaf, "api.github.example"),
                 X509_V_ERR_HOSTNAME_MISMATCH);
    cr_assert_eq(verify(proxy_ca_cert(ca), leaf, "evil.example"), X509_V_ERR_HOSTNAME_MISMATCH);
    /* the leaf key is P-256 and matches the CA's leaf key */
    EVP_PKEY *pub = X509_get0_pubkey(leaf);
    cr_assert_eq(EVP_PKEY_get_bits(pub), 256);
    cr_assert_eq(EVP_PKEY_eq(pub, proxy_ca_leaf_key(ca)), 1);
    /* another sandbox's CA does not vouch for it */
    struct proxy_ca *other = proxy_ca_new("sbx2", 24, &e);
    cr_assert_neq(verify(proxy_ca_cert(other), leaf, "github.example"), 0);
    /* validity: short, and never past the CA */
    const ASN1_TIME *na = X509_get0_notAfter(leaf);
    int days, secs;
    ASN1_TIME_diff(&days, &secs, NULL, na);
    cr_assert(days == 0 || (days == 1 && secs <= 0), "leaf valid %d days %d s", days, secs);
    X509 *longer = proxy_ca_mint(ca, "b.example", 24 * 365, &e);
    cr_assert_leq(
        ASN1_TIME_compare(X509_get0_notAfter(longer), X509_get0_notAfter(proxy_ca_cert(ca))), 0);
    X509_free(longer);
    X509_free(leaf);
    proxy_ca_unref(other);
    proxy_ca_unref(ca);
}

Test(proxy_ca, long_host_has_san_without_cn)
{
    struct err e = ERR_INIT;
    struct proxy_ca *ca = proxy_ca_new("x", 1, &e);
    char host[120];
    memset(host, 'a', 60);
    strcpy(host + 60, ".bbbbbbbbbb.example"); /* 79 bytes: too long for a CN */
    X509 *leaf = proxy_ca_mint(ca, host, 1, &e);
    cr_assert_not_null(leaf, "%s", e.msg);
    cr_assert_eq(verify(proxy_ca_cert(ca), leaf, host), 0);
    X509_free(leaf);
    proxy_ca_unref(ca);
}

Test(proxy_ca, ca_profile)
{
    struct err e = ERR_INIT;
    struct proxy_ca *ca = proxy_ca_new("profile", 48, &e);
    X509 *c = proxy_ca_cert(ca);
    cr_assert_eq(X509_check_ca(c), 1);
    cr_assert_eq(X509_check_issued(c, c), X509_V_OK, "self-signed");
    cr_assert_eq(EVP_PKEY_get_bits(X509_get0_pubkey(c)), 256);
    char cn[128];
    X509_NAME_get_text_by_NID(X509_get_subject_name(c), NID_commonName, cn, sizeof cn);
    cr_assert_str_eq(cn, "rebuno sandbox CA profile");
    cr_assert_null(proxy_ca_new("bad", 0, &e));
    cr_assert_null(proxy_ca_new("bad", 9000, &e));
    proxy_ca_unref(ca);
}

Test(proxy_ca, written_pem_has_no_key)
{
    struct err e = ERR_INIT;
    struct proxy_ca *ca = proxy_ca_new("pem", 1, &e);
    char dir[] = "/tmp/rebuno-ca-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    cr_assert_eq(proxy_ca_write_cert_pem(ca, path, &e), 0, "%s", e.msg);
    FILE *f = fopen(path, "r");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cr_assert(strstr(buf, "BEGIN CERTIFICATE"));
    cr_assert_null(strstr(buf, "PRIVATE"));
    f = fopen(path, "r");
    X509 *back = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    cr_assert_eq(X509_cmp(back, proxy_ca_cert(ca)), 0);
    X509_free(back);
    char *pem = proxy_ca_cert_pem(ca);
    cr_assert_str_eq(pem, buf);
    free(pem);
    unlink(path);
    rmdir(dir);
    cr_assert_eq(proxy_ca_write_cert_pem(ca, "/nonexistent-dir/ca.pem", &e), -1);
    proxy_ca_unref(ca);
}

/* ------------------------------------------------------------------ worker pool */

struct job {
    int in, out;
    int *done_count, *drop_count;
    struct event_base *base;
    int total;
};

static void work(void *arg)
{
    struct job *j = arg;
    j->out = j->in * 2;
}

static void done(void *arg)
{
    struct job *j = arg;
    cr_assert_eq(j->out, j->in * 2);
    if (++*j->done_count + *j->drop_count == j->total) event_base_loopbreak(j->base);
}

static void drop(void *arg)
{
    struct job *j = arg;
    if (*j->done_count + ++*j->drop_count == j->total) event_base_loopbreak(j->base);
}

Test(proxy_worker, results_on_the_loop_and_cancel)
{
    struct event_base *base = event_base_new();
    struct err e = ERR_INIT;
    struct proxy_worker *w = proxy_worker_new(base, 3, &e);
    cr_assert_not_null(w);
    enum { N = 200 };
    static struct job jobs[N];
    struct proxy_job *handles[N];
    int dn = 0, dr = 0;
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct job){i, 0, &dn, &dr, base, N};
        handles[i] = proxy_worker_submit(w, work, done, drop, &jobs[i]);
    }
    for (int i = 0; i < N; i += 10)
        proxy_worker_cancel(handles[i]);
    event_base_dispatch(base);
    cr_assert_eq(dn, N - N / 10);
    cr_assert_eq(dr, N / 10);
    proxy_worker_free(w);
    event_base_free(base);
}

Test(proxy_worker, free_drops_pending)
{
    struct event_base *base = event_base_new();
    struct err e = ERR_INIT;
    struct proxy_worker *w = proxy_worker_new(base, 1, &e);
    static struct job jobs[50];
    int dn = 0, dr = 0;
    for (int i = 0; i < 50; i++) {
        jobs[i] = (struct job){i, 0, &dn, &dr, base, 1000};
        proxy_worker_submit(w, work, done, drop, &jobs[i]);
    }
    proxy_worker_free(w); /* the loop never ran: nothing was delivered */
    cr_assert_eq(dn, 0);
    cr_assert_eq(dr, 50);
    event_base_free(base);
}

/* ------------------------------------------------------------------ addresses */

static bool pub(const char *s)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char a[80];
    snprintf(a, sizeof a, strchr(s, ':') ? "[%s]:1" : "%s:1", s);
    cr_assert_eq(proxy_addr_parse(a, &ss, &len), 0, "%s", a);
    return proxy_addr_is_public((struct sockaddr *)&ss);
}

Test(proxy_addr, public_or_not)
{
    const char *blocked[] = {"0.0.0.0",
                             "127.0.0.1",
                             "127.9.9.9",
                             "10.1.2.3",
                             "172.16.0.1",
                             "172.31.255.255",
                             "192.168.1.1",
                             "169.254.169.254",
                             "100.64.0.1",
                             "224.0.0.1",
                             "255.255.255.255",
                             "240.0.0.1",
                             "::",
                             "::1",
                             "::ffff:127.0.0.1",
                             "::ffff:169.254.169.254",
                             "::10.0.0.1",
                             "64:ff9b::a9fe:a9fe",
                             "fe80::1",
                             "fc00::1",
                             "fd12::1",
                             "ff02::1",
                             "fec0::1",
                             "2001:db8::1"};
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        cr_assert_not(pub(blocked[i]), "%s should be refused", blocked[i]);
    const char *allowed[] = {"1.1.1.1",   "140.82.112.3",    "172.32.0.1",
                             "192.0.2.1", "2606:4700::1111", "::ffff:140.82.112.3"};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        cr_assert(pub(allowed[i]), "%s should be allowed", allowed[i]);
}

Test(proxy_addr, parse_format)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char out[80];
    cr_assert_eq(proxy_addr_parse("127.0.0.1:8443", &ss, &len), 0);
    proxy_addr_format((struct sockaddr *)&ss, out, sizeof out);
    cr_assert_str_eq(out, "127.0.0.1:8443");
    cr_assert_eq(proxy_addr_parse("[::1]:0", &ss, &len), 0);
    cr_assert_eq(len, sizeof(struct sockaddr_in6));
    proxy_addr_format((struct sockaddr *)&ss, out, sizeof out);
    cr_assert_str_eq(out, "[::1]:0");
    const char *bad[] = {"127.0.0.1",    "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                         "localhost:80", "[::1:80",    "::1:80x",         "1.2.3.4:8a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(proxy_addr_parse(bad[i], &ss, &len), -EINVAL, "%s", bad[i]);
    struct sockaddr_storage b;
    proxy_addr_parse("[::1]:0", &ss, &len);
    proxy_addr_parse("[::1]:9", &b, &len);
    cr_assert(proxy_addr_same_host((struct sockaddr *)&ss, (struct sockaddr *)&b));
    proxy_addr_parse("127.0.0.1:9", &b, &len);
    cr_assert_not(proxy_addr_same_host((struct sockaddr *)&ss, (struct sockaddr *)&b));
}
