/*
 * test_proxy_dns.c - unit tests for the sandbox DNS responder (src/proxy/dns.c)
 * with crafted query packets: answers for allowed names only, the question echoed
 * as sent, NXDOMAIN / REFUSED / FORMERR / NOTIMP where due, and no answer at all to
 * responses or runts. Every truncation of a valid query must be handled safely.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "proxy/dns.h"

static bool allow_example(const char *name, void *arg)
{
    size_t n = strlen(name);
    return !strcmp(name, "github.example") || (n > 12 && !strcmp(name + n - 12, ".allowed.net"));
}

static struct proxy_dns_config cfg(bool a, bool aaaa)
{
    struct proxy_dns_config c = {.have_a = a, .have_aaaa = aaaa, .ttl = 30};
    inet_pton(AF_INET, "10.200.0.1", &c.a);
    inet_pton(AF_INET6, "fd00::1", &c.aaaa);
    return c;
}

/* A query for name (dotted) of type qtype. */
static size_t query(uint8_t *q, uint16_t id, const char *name, uint16_t qtype, uint16_t qclass)
{
    size_t n = 0;
    q[n++] = (uint8_t)(id >> 8);
    q[n++] = (uint8_t)id;
    q[n++] = 0x01; /* RD */
    q[n++] = 0x00;
    q[n++] = 0;
    q[n++] = 1; /* QDCOUNT */
    memset(q + n, 0, 6);
    n += 6;
    const char *p = name;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        q[n++] = (uint8_t)l;
        memcpy(q + n, p, l);
        n += l;
        p += l;
        if (*p == '.') p++;
    }
    q[n++] = 0;
    q[n++] = (uint8_t)(qtype >> 8);
    q[n++] = (uint8_t)qtype;
    q[n++] = (uint8_t)(qclass >> 8);
    q[n++] = (uint8_t)qclass;
    return n;
}

static int rcode(const uint8_t *r)
{
    return r[3] & 0x0f;
}

static int ancount(const uint8_t *r)
{
    return r[6] << 8 | r[7];
}

Test(proxy_dns, a_for_allowed_name)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    size_t ql = query(q, 0x1234, "GitHub.Example", PROXY_DNS_TYPE_A, 1);
    char name[PROXY_HOST_MAX + 1];
    int rc = -1;
    int n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, name, &rc);
    cr_assert_eq(n, (int)ql + 16);
    cr_assert_str_eq(name, "github.example");
    cr_assert_eq(rc, PROXY_DNS_NOERROR);
    cr_assert_eq(r[0], 0x12);
    cr_assert_eq(r[1], 0x34);
    cr_assert(r[2] & 0x80, "QR");
    cr_assert(r[2] & 0x04, "AA");
    cr_assert(r[2] & 0x01, "RD copied");
    cr_assert_eq(rcode(r), 0);
    cr_assert_eq(ancount(r), 1);
    cr_assert_eq(memcmp(r + 12, q + 12, ql - 12), 0, "question echoed with its case");
    const uint8_t *a = r + ql;
    cr_assert_eq(a[0], 0xc0);
    cr_assert_eq(a[1], 12);
    cr_assert_eq(a[3], 1, "type A");
    cr_assert_eq(a[5], 1, "class IN");
    cr_assert_eq(a[9], 30, "ttl");
    cr_assert_eq(a[11], 4);
    cr_assert_eq(memcmp(a + 12, &c.a, 4), 0);
}

Test(proxy_dns, aaaa_and_nodata)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    size_t ql = query(q, 1, "x.allowed.net", PROXY_DNS_TYPE_AAAA, 1);
    int n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(n, (int)ql + 28);
    cr_assert_eq(r[ql + 3], 28);
    cr_assert_eq(memcmp(r + ql + 12, &c.aaaa, 16), 0);
    /* no IPv6 address configured: NOERROR without answers */
    c = cfg(true, false);
    n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(n, (int)ql);
    cr_assert_eq(rcode(r), 0);
    cr_assert_eq(ancount(r), 0);
    /* other types for allowed names: NOERROR, no data */
    ql = query(q, 1, "github.example", 16 /* TXT */, 1);
    n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(n, (int)ql);
    cr_assert_eq(rcode(r), 0);
    cr_assert_eq(ancount(r), 0);
    /* ANY gets the A record */
    ql = query(q, 1, "github.example", PROXY_DNS_TYPE_ANY, 1);
    n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(ancount(r), 1);
    cr_assert_eq(r[ql + 3], 1);
}

Test(proxy_dns, denied_names_nxdomain)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    const char *names[] = {"evil.example", "allowed.net", "github.example.evil", "metadata"};
    for (size_t i = 0; i < 4; i++) {
        size_t ql = query(q, 7, names[i], PROXY_DNS_TYPE_A, 1);
        int rc = -1;
        int n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, &rc);
        cr_assert_eq(n, (int)ql, "%s", names[i]);
        cr_assert_eq(rcode(r), PROXY_DNS_NXDOMAIN, "%s", names[i]);
        cr_assert_eq(rc, PROXY_DNS_NXDOMAIN);
        cr_assert_eq(ancount(r), 0);
    }
}

Test(proxy_dns, odd_labels_nxdomain)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    /* one label "github.example" (a dot inside a label) must not match github.example */
    size_t ql = query(q, 7, "x", PROXY_DNS_TYPE_A, 1);
    uint8_t crafted[64] = {0};
    memcpy(crafted, q, 12);
    crafted[12] = 14;
    memcpy(crafted + 13, "github.example", 14);
    crafted[27] = 0;
    crafted[29] = 1;
    crafted[31] = 1;
    ql = 32;
    int n = proxy_dns_answer(crafted, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(n, (int)ql);
    cr_assert_eq(rcode(r), PROXY_DNS_NXDOMAIN);
    /* the root name */
    ql = query(q, 7, "", PROXY_DNS_TYPE_A, 1);
    n = proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_NXDOMAIN);
}

Test(proxy_dns, wrong_class_refused)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    size_t ql = query(q, 7, "github.example", PROXY_DNS_TYPE_A, 3 /* CH */);
    proxy_dns_answer(q, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_REFUSED);
    cr_assert_eq(ancount(r), 0);
}

Test(proxy_dns, malformed)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    size_t ql = query(q, 7, "github.example", PROXY_DNS_TYPE_A, 1);
    /* runts and responses get nothing */
    cr_assert_eq(proxy_dns_answer(q, 11, r, &c, allow_example, NULL, NULL, NULL), -EINVAL);
    uint8_t resp[512];
    memcpy(resp, q, ql);
    resp[2] |= 0x80;
    cr_assert_eq(proxy_dns_answer(resp, ql, r, &c, allow_example, NULL, NULL, NULL), -EINVAL);
    /* every truncation of the question: FORMERR, never a read past the end */
    for (size_t n = 12; n < ql; n++) {
        int len = proxy_dns_answer(q, n, r, &c, allow_example, NULL, NULL, NULL);
        cr_assert_eq(len, 12, "truncated to %zu", n);
        cr_assert_eq(rcode(r), PROXY_DNS_FORMERR, "truncated to %zu", n);
    }
    /* compression pointer in the question */
    uint8_t p[64];
    memcpy(p, q, 12);
    p[12] = 0xc0;
    p[13] = 12;
    p[14] = 0;
    p[15] = 1;
    p[16] = 0;
    p[17] = 1;
    proxy_dns_answer(p, 18, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_FORMERR);
    /* two questions */
    memcpy(p, q, ql);
    p[5] = 2;
    proxy_dns_answer(p, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_FORMERR);
    /* no question */
    p[5] = 0;
    proxy_dns_answer(p, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_FORMERR);
    /* opcode other than QUERY */
    memcpy(p, q, ql);
    p[2] |= 0x10; /* opcode 2, STATUS */
    proxy_dns_answer(p, ql, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_NOTIMP);
    /* a name longer than 255 bytes */
    uint8_t longq[600];
    memcpy(longq, q, 12);
    size_t n = 12;
    for (int i = 0; i < 5; i++) {
        longq[n++] = 63;
        memset(longq + n, 'a', 63);
        n += 63;
    }
    longq[n++] = 0;
    memset(longq + n, 0, 4);
    n += 4;
    proxy_dns_answer(longq, n, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(rcode(r), PROXY_DNS_FORMERR);
}

Test(proxy_dns, edns_additional_ignored)
{
    uint8_t q[512], r[PROXY_DNS_MAX_PACKET];
    struct proxy_dns_config c = cfg(true, true);
    size_t ql = query(q, 9, "github.example", PROXY_DNS_TYPE_A, 1);
    q[11] = 1; /* ARCOUNT */
    uint8_t opt[] = {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0};
    memcpy(q + ql, opt, sizeof opt);
    int n = proxy_dns_answer(q, ql + sizeof opt, r, &c, allow_example, NULL, NULL, NULL);
    cr_assert_eq(n, (int)ql + 16);
    cr_assert_eq(ancount(r), 1);
    cr_assert_eq(r[11], 0, "no additional records echoed");
}
