/* test_sandbox_nft.c - the sandbox network's nftables text (src/sandbox/net/nft.c): what a
 * sandbox's veth may reach, generated from integers only. Applying it is covered by
 * tests/integration/test_sandbox_network.py. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/net/nft.h"

static const struct sbx_nft_conf conf = {
    .table = "rebuno_abc123", .ifprefix = "rbabc123h", .proxy_port = 41000, .dns_port = 42000};

static void has(const char *text, const char *needle)
{
    cr_assert(strstr(text, needle), "missing: %s\n---\n%s", needle, text);
}

Test(sandbox_nft, ruleset_replaces_the_table_atomically)
{
    char *r = sbx_nft_ruleset(&conf);
    /* "table X; delete table X; table X {...}" is one transaction: idempotent */
    const char *want = "table inet rebuno_abc123\ndelete table inet rebuno_abc123\n"
                       "table inet rebuno_abc123 {\n";
    bool ok = !strncmp(r, want, strlen(want));
    free(r);
    cr_assert(ok);
}

Test(sandbox_nft, only_the_proxy_is_reachable_and_the_rest_is_refused)
{
    char *r = sbx_nft_ruleset(&conf);
    /* every chain is about the daemon's own veths only */
    has(r, "iifname != \"rbabc123h*\" return");
    has(r, "iifname \"rbabc123h*\" jump from_sandbox");
    /* no IPv6, no metadata, before NAT could send it to the proxy */
    has(r, "type filter hook prerouting priority -150;");
    has(r, "meta nfproto ipv6 drop");
    has(r, "ip daddr { 169.254.0.0/16, 100.100.100.200, 168.63.129.16 } reject with icmpx "
           "admin-prohibited");
    /* 80/443 anywhere and DNS to the host go to the proxy */
    has(r, "tcp dport { 80, 443 } redirect to :41000");
    has(r, "fib daddr type local udp dport 53 redirect to :42000");
    /* private networks bypass the proxy, both in NAT and in filtering */
    has(r, "ip saddr . ip daddr @netpairs return");
    has(r, "ip saddr . ip daddr @netpairs accept");
    /* the proxy ports accept only what was redirected there */
    has(r, "tcp dport 41000 ct original proto-dst { 80, 443 } accept");
    has(r, "udp dport 42000 ct original proto-dst 53 accept");
    /* everything else is refused at once, never silently dropped */
    has(r, "meta l4proto tcp reject with tcp reset\n\t\treject with icmpx admin-prohibited");
    cr_assert(!strstr(r, "policy drop"), "no silent drop policies");
    /* nothing from elsewhere is forwarded into a sandbox */
    has(r, "oifname \"rbabc123h*\" drop");
    /* the proxy's ports refuse connections from anything but a sandbox */
    has(r, "tcp dport 41000 reject with tcp reset");
    /* the order matters: NAT at dstnat between the early and the late filter */
    const char *early = strstr(r, "priority -150"), *nat = strstr(r, "priority dstnat"),
               *late = strstr(r, "hook prerouting priority 0");
    cr_assert(early && nat && late && early < nat && nat < late);
    free(r);
}

Test(sandbox_nft, pairs_go_both_ways)
{
    struct in_addr a[2], b[2];
    inet_pton(AF_INET, "10.200.0.1", &a[0]);
    inet_pton(AF_INET, "10.200.0.3", &b[0]);
    inet_pton(AF_INET, "10.200.0.1", &a[1]);
    inet_pton(AF_INET, "10.200.0.5", &b[1]);
    char *s = sbx_nft_pairs("rebuno_abc123", true, a, b, 2);
    cr_assert_str_eq(s, "add element inet rebuno_abc123 netpairs { 10.200.0.1 . 10.200.0.3, "
                        "10.200.0.3 . 10.200.0.1, 10.200.0.1 . 10.200.0.5, 10.200.0.5 . "
                        "10.200.0.1 }\n");
    free(s);
    s = sbx_nft_pairs("rebuno_abc123", false, a, b, 1);
    cr_assert_str_eq(s, "delete element inet rebuno_abc123 netpairs { 10.200.0.1 . 10.200.0.3, "
                        "10.200.0.3 . 10.200.0.1 }\n");
    free(s);
    s = sbx_nft_drop_table("rebuno_abc123");
    cr_assert_str_eq(s, "table inet rebuno_abc123\ndelete table inet rebuno_abc123\n");
    free(s);
}
