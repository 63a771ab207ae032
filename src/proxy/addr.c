/* addr.c - address parsing and classification for the egress proxy (see addr.h). */
#include "proxy/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int proxy_addr_parse(const char *s, struct sockaddr_storage *out, socklen_t *len)
{
    char host[64];
    const char *port;
    memset(out, 0, sizeof *out);
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof host) return -EINVAL;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = '\0';
        port = end + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof host) return -EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port = colon + 1;
    }
    char *e;
    if (!*port || *port == '-' || *port == '+') return -EINVAL;
    unsigned long p = strtoul(port, &e, 10);
    if (*e || p > 65535) return -EINVAL;
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *len = sizeof *v6;
        return 0;
    }
    return -EINVAL;
}

void proxy_addr_format(const struct sockaddr *sa, char *out, size_t n)
{
    char a[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &v4->sin_addr, a, sizeof a);
        snprintf(out, n, "%s:%u", a, ntohs(v4->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &v6->sin6_addr, a, sizeof a);
        snprintf(out, n, "[%s]:%u", a, ntohs(v6->sin6_port));
    } else {
        snprintf(out, n, "?");
    }
}

static bool v4_public(uint32_t a)
{
    static const struct {
        uint32_t net, mask;
    } blocked[] = {
        {0x00000000, 0xff000000}, /* 0/8 "this network" */
        {0x0a000000, 0xff000000}, /* 10/8 */
        {0x64400000, 0xffc00000}, /* 100.64/10 CGNAT */
        {0x7f000000, 0xff000000}, /* 127/8 */
        {0xa9fe0000, 0xffff0000}, /* 169.254/16 link-local, metadata */
        {0xac100000, 0xfff00000}, /* 172.16/12 */
        {0xc0000000, 0xffffff00}, /* 192.0.0/24 IETF protocol assignments */
        {0xc0a80000, 0xffff0000}, /* 192.168/16 */
        {0xc6120000, 0xfffe0000}, /* 198.18/15 benchmarking */
        {0xe0000000, 0xf0000000}, /* 224/4 multicast */
        {0xf0000000, 0xf0000000}, /* 240/4 reserved, broadcast */
    };
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        if ((a & blocked[i].mask) == blocked[i].net) return false;
    return true;
}

bool proxy_addr_is_public(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return v4_public(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6) return false;
    const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const uint8_t zero[10] = {0};
    if (!memcmp(b, zero, 10) && ((b[10] == 0xff && b[11] == 0xff) || (b[10] == 0 && b[11] == 0))) {
        /* ::ffff:a.b.c.d, ::a.b.c.d (and :: and ::1, which land in 0/8) */
        uint32_t a = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return v4_public(a);
    }
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b) { /* 64:ff9b::/96 NAT64 */
        uint32_t a = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return v4_public(a);
    }
    if ((b[0] & 0xfe) == 0xfc) return false;                 /* fc00::/7 unique local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return false; /* fe80::/10 link-local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return false; /* fec0::/10 site-local */
    if (b[0] == 0xff) return false;                          /* multicast */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) return false; /* doc */
    return true;
}

bool proxy_addr_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family) return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
    return false;
}
