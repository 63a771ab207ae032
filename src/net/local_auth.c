/*
 * local_auth.c - the local token of a daemon without API keys (see local_auth.h).
 *
 * Files are written as a new file opened O_EXCL|O_NOFOLLOW, mode 0600, then renamed
 * over the name: a reader never sees half a file, and a symlink someone planted at the
 * name is replaced, not followed. Folders are opened O_NOFOLLOW below the user's config
 * folder and must belong to this user. The token itself stays in one page of its own.
 */
#include "net/local_auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "net/http.h"

#define ENTRY_MAX 4096 /* a file bigger than this is not ours */
#define KEY_MAX 96     /* "host_port" */

struct local_auth {
    char *token;     /* LOCAL_AUTH_TOKEN_LEN + 1 bytes at the start of its own page */
    size_t page;     /* that page's size */
    char *state_dir; /* absolute */
    char *path;      /* state_dir/local-token */
    char *reg_dir;   /* the registry folder when registered, else NULL */
    char key[KEY_MAX];
    char *service, *key_hint;
};

/* ---- addresses ---- */

/* "HOST_PORT" for host (hlen bytes; the brackets of an IPv6 literal dropped, lower case,
 * localhost as 127.0.0.1) and port: the name of a registry entry, and what two
 * addresses are compared by. -EINVAL for anything else than a plain host name. */
static int addr_key(const char *host, size_t hlen, long port, char *out, size_t n)
{
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') host++, hlen -= 2;
    char h[65];
    if (hlen == 0 || hlen >= sizeof h || port < 1 || port > 65535) return -EINVAL;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char ch = (unsigned char)tolower((unsigned char)host[i]);
        if (!isalnum(ch) && ch != '.' && ch != ':' && ch != '-') return -EINVAL;
        h[i] = (char)ch;
    }
    h[hlen] = '\0';
    int len = snprintf(out, n, "%s_%ld", strcmp(h, "localhost") == 0 ? "127.0.0.1" : h, port);
    return len > 0 && (size_t)len < n ? 0 : -EINVAL;
}

/* The key of "http://HOST[:PORT][/...]" (https: port 443 by default). */
static int url_key(const char *url, char *out, size_t n)
{
    long port;
    if (strncasecmp(url, "http://", 7) == 0) url += 7, port = 80;
    else if (strncasecmp(url, "https://", 8) == 0) url += 8, port = 443;
    else return -EINVAL;
    size_t alen = strcspn(url, "/?#");
    if (memchr(url, '@', alen)) return -EINVAL; /* user info: not an address we make */
    const char *end = url + alen, *colon;
    size_t hlen;
    if (url[0] == '[') {
        const char *rb = memchr(url, ']', alen);
        if (!rb || (rb + 1 != end && rb[1] != ':')) return -EINVAL;
        hlen = (size_t)(rb + 1 - url);
        colon = rb + 1 != end ? rb + 1 : NULL;
    } else {
        colon = memchr(url, ':', alen);
        hlen = colon ? (size_t)(colon - url) : alen;
    }
    if (colon) {
        const char *p = colon + 1;
        if (p == end || end - p > 5) return -EINVAL;
        port = 0;
        for (; p < end; p++) {
            if (!isdigit((unsigned char)*p)) return -EINVAL;
            port = port * 10 + (*p - '0');
        }
    }
    return addr_key(url, hlen, port, out, n);
}

/* ${XDG_CONFIG_HOME:-$HOME/.config} (an XDG_CONFIG_HOME that is not absolute is ignored,
 * as the XDG spec says), or -ENOENT. */
static int config_base(char *out, size_t n)
{
    const char *x = getenv("XDG_CONFIG_HOME");
    int len;
    if (x && x[0] == '/') {
        len = snprintf(out, n, "%s", x);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/') {
            const struct passwd *pw = getpwuid(geteuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home || home[0] != '/') return -ENOENT;
        len = snprintf(out, n, "%s/.config", home);
    }
    return len > 0 && (size_t)len < n ? 0 : -ENAMETOOLONG;
}

/* ---- files ---- */

/* Read a small regular file (never through a symlink at its last component, never
 * blocking on a FIFO) into buf, NUL-terminated. Length, or -errno. */
static ssize_t read_small(int dfd, const char *name, char *buf, size_t cap)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    ssize_t len = 0;
    if (fstat(fd, &st) < 0) len = -errno;
    else if (!S_ISREG(st.st_mode) || st.st_size >= (off_t)cap) len = -EINVAL;
    while (len >= 0 && (size_t)len < cap - 1) {
        ssize_t r = read(fd, buf + len, cap - 1 - (size_t)len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) len = -errno;
        if (r <= 0) break;
        len += r;
    }
    close(fd);
    buf[len > 0 ? len : 0] = '\0';
    return len;
}

/* Write data as name in dfd, mode 0600, through a new file renamed over it. */
static int write_file_at(int dfd, const char *name, const char *data, size_t len)
{
    unsigned char rnd[6];
    if (RAND_bytes(rnd, sizeof rnd) != 1) return -EIO;
    char tmp[128];
    snprintf(tmp, sizeof tmp, ".%s.%d.%02x%02x%02x%02x%02x%02x", name, (int)getpid(), rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5]);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    int r = fchmod(fd, 0600) < 0 ? -errno : 0; /* whatever the umask */
    for (size_t off = 0; r == 0 && off < len;) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) r = w < 0 ? -errno : -EIO;
        else off += (size_t)w;
    }
    if (close(fd) < 0 && r == 0) r = -errno;
    if (r == 0 && renameat(dfd, tmp, dfd, name) < 0) r = -errno;
    if (r < 0) unlinkat(dfd, tmp, 0);
    return r;
}

/* Open (making it, 0700) the folder name in dfd, not through a symlink, and only if it
 * belongs to this user; made private (0700) when it is not. fd or -errno. */
static int open_own_dir(int dfd, const char *name)
{
    if (mkdirat(dfd, name, 0700) < 0 && errno != EEXIST) return -errno;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) < 0) e = -errno;
    else if (st.st_uid != geteuid()) e = -EPERM;
    else if ((st.st_mode & 077) && fchmod(fd, 0700) < 0) e = -errno;
    if (e < 0) {
        close(fd);
        return e;
    }
    return fd;
}

/* Remove dir/name if it still holds token: a newer daemon may have replaced it. */
static void remove_if_ours(const char *dir, const char *name, const char *token)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    char buf[ENTRY_MAX];
    if (read_small(dfd, name, buf, sizeof buf) > 0 && strstr(buf, token)) unlinkat(dfd, name, 0);
    OPENSSL_cleanse(buf, sizeof buf);
    close(dfd);
}

/* ---- server side ---- */

/* Register the daemon's entry in the user's registry folder; a reason on failure. */
static const char *register_entry(struct local_auth *la, const char *entry, size_t len)
{
    char base[PATH_MAX];
    if (config_base(base, sizeof base) < 0) return "neither XDG_CONFIG_HOME nor HOME names a folder";
    int bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (bfd < 0 && errno == ENOENT && mkdir(base, 0700) == 0)
        bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (bfd < 0) return strerror(errno);
    /* a root daemon started with another user's HOME must not write there */
    struct stat st;
    if (fstat(bfd, &st) < 0 || st.st_uid != geteuid()) {
        close(bfd);
        return "the folder belongs to another user";
    }
    int rfd = open_own_dir(bfd, "rebuno");
    close(bfd);
    if (rfd < 0) return strerror(-rfd);
    int lfd = open_own_dir(rfd, "local");
    close(rfd);
    if (lfd < 0) return strerror(-lfd);
    int r = write_file_at(lfd, la->key, entry, len);
    close(lfd);
    if (r < 0) return strerror(-r);
    la->reg_dir = xasprintf("%s/rebuno/local", base);
    return NULL;
}

struct local_auth *local_auth_new(const struct local_auth_opts *o, struct err *err)
{
    const char *colon = strrchr(o->listen, ':');
    char key[KEY_MAX];
    if (!colon || addr_key(o->listen, (size_t)(colon - o->listen), o->port, key, sizeof key) < 0) {
        err_invalid(err, "listen", "cannot make a local token for the address %s", o->listen);
        return NULL;
    }
    if (mkdir(o->state_dir, 0700) < 0 && errno != EEXIST) {
        err_set(err, 500, "state_dir", "state_dir", "cannot create state folder %s: %s", o->state_dir,
                strerror(errno));
        return NULL;
    }
    int dfd = open(o->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    char real[PATH_MAX];
    if (dfd < 0 || fstat(dfd, &st) < 0 || !realpath(o->state_dir, real)) {
        err_set(err, 500, "state_dir", "state_dir", "cannot use state folder %s: %s", o->state_dir,
                strerror(errno));
        if (dfd >= 0) close(dfd);
        return NULL;
    }
    if (st.st_uid != geteuid()) {
        err_set(err, 500, "state_dir", "state_dir",
                "state folder %s belongs to uid %u, not to uid %u that runs the %s: its local token "
                "must live in a folder of its own user (pick another --state-dir)",
                real, (unsigned)st.st_uid, (unsigned)geteuid(), o->service);
        close(dfd);
        return NULL;
    }
    if ((st.st_mode & 077) && fchmod(dfd, 0700) < 0) {
        err_set(err, 500, "state_dir", "state_dir", "cannot make state folder %s private: %s", real,
                strerror(errno));
        close(dfd);
        return NULL;
    }

    struct local_auth *la = xcalloc(1, sizeof *la);
    la->page = (size_t)sysconf(_SC_PAGESIZE);
    la->token = mmap(NULL, la->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(la->token != MAP_FAILED);
    /* a fork() child (an init, a cleaner) sees zeros here; core dumps leave it out */
    madvise(la->token, la->page, MADV_WIPEONFORK);
    madvise(la->token, la->page, MADV_DONTDUMP);
    unsigned char raw[LOCAL_AUTH_TOKEN_LEN / 2];
    ASSERT(RAND_bytes(raw, sizeof raw) == 1);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(la->token + 2 * i, 3, "%02x", raw[i]);
    OPENSSL_cleanse(raw, sizeof raw);
    snprintf(la->key, sizeof la->key, "%s", key);
    la->state_dir = xstrdup(real);
    la->path = xasprintf("%s/%s", real, LOCAL_AUTH_FILE);
    la->service = xstrdup(o->service);
    la->key_hint = xstrdup(o->key_hint);

    char *us = strrchr(key, '_');
    *us = '\0';
    bool v6 = strchr(key, ':') != NULL;
    char entry[512];
    int len = snprintf(entry, sizeof entry,
                       "{\"service\":\"%s\",\"url\":\"http://%s%s%s:%s\",\"token\":\"%s\",\"pid\":%d}\n",
                       o->service, v6 ? "[" : "", key, v6 ? "]" : "", us + 1, la->token, (int)getpid());
    ASSERT(len > 0 && (size_t)len < sizeof entry);
    int r = write_file_at(dfd, LOCAL_AUTH_FILE, entry, (size_t)len);
    close(dfd);
    if (r < 0) {
        OPENSSL_cleanse(entry, sizeof entry);
        err_set(err, 500, "state_dir", "state_dir", "cannot write the local token %s: %s", la->path,
                strerror(-r));
        local_auth_free(la);
        return NULL;
    }
    const char *why = register_entry(la, entry, (size_t)len);
    OPENSSL_cleanse(entry, sizeof entry);
    if (why)
        log_warn("local token not registered; clients find it only in the state folder",
                 "service=%s reason=\"%s\" token_file=%s", o->service, why, la->path);
    return la;
}

bool local_auth_check(const struct local_auth *la, const char *hdr)
{
    if (!hdr || strncasecmp(hdr, "Bearer ", 7) != 0) return false;
    const char *t = hdr + 7;
    if (strlen(t) != LOCAL_AUTH_TOKEN_LEN) return false;
    return CRYPTO_memcmp(t, la->token, LOCAL_AUTH_TOKEN_LEN) == 0;
}

void local_auth_refuse(const struct local_auth *la, struct http_req *r)
{
    http_add_header(r, "WWW-Authenticate", "Bearer realm=\"rebuno\"");
    if (!http_req_header(r, "Authorization"))
        http_reply_error(r, 401, "unauthorized", "Authorization",
                         "this %s needs its local token: send 'Authorization: Bearer <token>' with the "
                         "token of %s, which only the user who started it can read (that user's "
                         "rebuno CLI and SDK send it by themselves; %s sets it explicitly)",
                         la->service, la->path, la->key_hint);
    else
        http_reply_error(r, 401, "unauthorized", "Authorization",
                         "wrong token in Authorization: this %s's local token is in %s (a new one "
                         "at every start; %s sets it explicitly)",
                         la->service, la->path, la->key_hint);
}

const char *local_auth_path(const struct local_auth *la)
{
    return la->path;
}

void local_auth_free(struct local_auth *la)
{
    if (!la) return;
    if (la->reg_dir) remove_if_ours(la->reg_dir, la->key, la->token);
    remove_if_ours(la->state_dir, LOCAL_AUTH_FILE, la->token);
    OPENSSL_cleanse(la->token, la->page);
    munmap(la->token, la->page);
    free(la->state_dir);
    free(la->path);
    free(la->reg_dir);
    free(la->service);
    free(la->key_hint);
    free(la);
}

/* ---- client side ---- */

/* Whether the entry in file path was made for the address key; its token into out. */
static bool try_entry(const char *path, const char *key, struct local_auth_found *out)
{
    size_t used = strlen(out->looked);
    snprintf(out->looked + used, sizeof out->looked - used, "%s%s", used ? " or " : "", path);
    char buf[ENTRY_MAX];
    ssize_t len = read_small(AT_FDCWD, path, buf, sizeof buf);
    if (len <= 0) return false;
    json_t *j = json_loadb(buf, (size_t)len, 0, NULL);
    OPENSSL_cleanse(buf, sizeof buf);
    const char *url = json_string_value(json_object_get(j, "url"));
    const char *tok = json_string_value(json_object_get(j, "token"));
    char k[KEY_MAX];
    bool ok = url && tok && url_key(url, k, sizeof k) == 0 && strcmp(k, key) == 0 &&
              strlen(tok) == LOCAL_AUTH_TOKEN_LEN &&
              strspn(tok, "0123456789abcdef") == LOCAL_AUTH_TOKEN_LEN;
    if (ok) {
        memcpy(out->token, tok, LOCAL_AUTH_TOKEN_LEN + 1);
        snprintf(out->from, sizeof out->from, "%s", path);
    }
    json_decref(j);
    return ok;
}

int local_auth_find(const char *url, const char *state_file, struct local_auth_found *out)
{
    memset(out, 0, sizeof *out);
    char key[KEY_MAX], base[PATH_MAX];
    if (url_key(url, key, sizeof key) < 0) return -ENOENT;
    if (config_base(base, sizeof base) == 0) {
        char *p = xasprintf("%s/rebuno/local/%s", base, key);
        bool ok = try_entry(p, key, out);
        free(p);
        if (ok) return 0;
    }
    if (state_file && *state_file && try_entry(state_file, key, out)) return 0;
    return -ENOENT;
}
