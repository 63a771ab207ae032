/*
 * source.c - filling a new sandbox from a git repository or a tarball, and tar
 * uploads into a sandbox (docs/sandbox-api.md "Sources").
 *
 * The host never parses what it is given: git and tar run inside the sandbox, as
 * its root, through the ordinary command machinery (command.c), so a hostile
 * repository or archive can only affect that sandbox (absolute names, "..",
 * symlinks pointing out, device nodes: root inside cannot leave its root or mknod).
 * Bytes reach tar's stdin from a short-lived helper process that only copies: a
 * host file (a tarball path), an uploaded body, or `tar -c` of a local repository
 * directory (the host reads files; git inside clones from that copy with
 * file://, so --depth works). A remote URL is cloned by git inside the sandbox
 * directly, which needs the sandbox's network (none yet: the network issue adds
 * it, with its URL policy).
 *
 * A job is a few commands run one after another; the HTTP request that started it
 * is answered when the last one ends: the create request with the sandbox (201),
 * or with 400 source_failed and git's or tar's error output, the sandbox then
 * being deleted. Steps continue from a zero-delay event, never from inside the
 * command's notification.
 */
#include "sandbox/core/sandboxd_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "sandbox/core/validate.h"

#define SOURCE_STEP_TIMEOUT_MS (10 * 60 * 1000)
#define URL_MAX 2048
#define STEPS_MAX 6

enum job_kind { JOB_CREATE, JOB_EXTRACT };
enum feed_kind { FEED_NONE, FEED_FILE, FEED_DIR, FEED_BUF };

struct step {
    json_t *argv;
    enum feed_kind feed;
};

struct sbx_srcjob {
    struct sbx_srcjob *next;
    struct sbxd *d;
    enum job_kind kind;
    char sbx_id[40];
    struct http_req *req;
    struct event *next_ev;
    struct step steps[STEPS_MAX];
    int nsteps, cur;
    struct sbx_cmd *cmd;
    bool failed, stop_after;
    char what[32];
    char *feed_path;     /* FEED_FILE, FEED_DIR */
    char *buf;           /* FEED_BUF */
    size_t buf_len;
    char *target;
    char errmsg[1024];
    int64_t t0;
    sbx_extract_done_fn done; /* JOB_EXTRACT: answers the request */
    sbx_source_done_fn created; /* JOB_CREATE: answers it, or NULL for /v1's answers */
};

/* ------------------------------------------------------------------ validation */

static bool path_chars_ok(const char *p)
{
    for (; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return false;
    return true;
}

/* An absolute host path without "." / ".." components. */
static int host_path(const json_t *src, const char *key, const char *field, const char **out,
                     struct err *err)
{
    if (sbx_json_str(src, key, PATH_MAX - 1, out, err) < 0) return -1;
    const char *p = *out;
    if (!p || p[0] != '/' || !path_chars_ok(p) || strstr(p, "/../") || strstr(p, "/./") ||
        (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/..")))
        return err_invalid(err, field, "%s must be an absolute path without . or .. components",
                           field);
    return 0;
}

/* A path inside the sandbox: normalised against /root, not "/". */
static int target_path(const json_t *src, char *out, struct err *err)
{
    const char *t = NULL;
    if (sbx_json_str(src, "path", SBX_PATH_MAX, &t, err) < 0) return -1;
    if (sbx_path_normalize(t ? t : "/workspace", "/root", out, SBX_PATH_MAX + 1, "source.path",
                           err) < 0)
        return -1;
    if (!strcmp(out, "/")) return err_invalid(err, "source.path", "source.path must not be /");
    return 0;
}

static bool remote_url_ok(const char *u)
{
    static const char *const schemes[] = {"https://", "http://", "git://", "ssh://", NULL};
    if (u[0] == '-' || !path_chars_ok(u) || strchr(u, ' ')) return false;
    for (const char *const *s = schemes; *s; s++)
        if (!strncmp(u, *s, strlen(*s))) return true;
    const char *at = strchr(u, '@'), *colon = strchr(u, ':');
    return at && colon && at < colon; /* user@host:path */
}

static bool branch_ok(const char *b)
{
    if (!*b || b[0] == '-' || strlen(b) > 255 || strstr(b, "..")) return false;
    for (const char *p = b; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-' || *p == '/'))
            return false;
    return true;
}

int sbx_source_check(const json_t *source, struct err *err)
{
    if (!json_is_object(source))
        return err_invalid(err, "source", "source must be an object with a \"type\"");
    const char *type = NULL;
    if (sbx_json_str(source, "type", 16, &type, err) < 0) return -1;
    if (!type)
        return err_invalid(err, "source.type",
                           "source.type must be snapshot, git, tarball or image");
    char target[SBX_PATH_MAX + 1];
    if (!strcmp(type, "snapshot")) {
        static const char *const known[] = {"type", "snapshot_id", NULL};
        const char *id = NULL;
        if (sbx_json_known(source, known, "a snapshot source", err) < 0 ||
            sbx_json_str(source, "snapshot_id", 64, &id, err) < 0)
            return -1;
        if (!id) return err_invalid(err, "source.snapshot_id", "source.snapshot_id is required");
        return 0;
    }
    if (!strcmp(type, "image")) {
        static const char *const known[] = {"type", "image", NULL};
        const char *img = NULL;
        if (sbx_json_known(source, known, "an image source", err) < 0 ||
            sbx_json_str(source, "image", 500, &img, err) < 0)
            return -1;
        if (img && !sbx_image_ref_valid(img))
            return err_invalid(err, "source.image",
                               "source.image must be \"host\", \"default\", \"sha256:<64 hex "
                               "digits>\" or an image reference (name:tag, name@sha256:...)");
        return 0;
    }
    if (!strcmp(type, "git")) {
        static const char *const known[] = {"type", "url", "branch", "depth", "path", NULL};
        const char *url = NULL, *branch = NULL;
        int64_t depth = 0;
        if (sbx_json_known(source, known, "a git source", err) < 0 ||
            sbx_json_str(source, "url", URL_MAX, &url, err) < 0 ||
            sbx_json_str(source, "branch", 255, &branch, err) < 0 ||
            sbx_json_int(source, "depth", 1, 1000000, &depth, err) < 0 ||
            target_path(source, target, err) < 0)
            return -1;
        if (!url) return err_invalid(err, "source.url", "source.url is required");
        if (branch && !branch_ok(branch))
            return err_invalid(err, "source.branch", "source.branch is not a usable branch name");
        const char *local = !strncmp(url, "file://", 7) ? url + 7 : url[0] == '/' ? url : NULL;
        if (local) {
            struct stat st;
            if (local[0] != '/' || !path_chars_ok(local) || strstr(local, "/../") ||
                strlen(local) >= PATH_MAX)
                return err_invalid(err, "source.url", "a local repository must be an absolute path");
            if (stat(local, &st) < 0 || !S_ISDIR(st.st_mode))
                return err_invalid(err, "source.url", "%s is not a directory on this host", local);
        } else if (!remote_url_ok(url)) {
            return err_invalid(err, "source.url",
                               "source.url must be an absolute path, file://, https://, http://, "
                               "git://, ssh:// or user@host:path");
        }
        return 0;
    }
    if (!strcmp(type, "tarball")) {
        static const char *const known[] = {"type", "path", "file", NULL};
        const char *file = NULL;
        if (sbx_json_known(source, known, "a tarball source", err) < 0 ||
            host_path(source, "file", "source.file", &file, err) < 0 ||
            target_path(source, target, err) < 0)
            return -1;
        struct stat st;
        if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
            return err_invalid(err, "source.file", "%s is not a file on this host", file);
        return 0;
    }
    return err_invalid(err, "source.type", "source.type must be snapshot, git, tarball or image");
}

/* ------------------------------------------------------------------ jobs */

static void job_free(struct sbx_srcjob *j)
{
    for (int i = 0; i < j->nsteps; i++)
        json_decref(j->steps[i].argv);
    if (j->next_ev) event_free(j->next_ev);
    free(j->feed_path);
    free(j->buf);
    free(j->target);
    free(j);
}

static void job_unlink(struct sbx_srcjob *j)
{
    for (struct sbx_srcjob **p = &j->d->srcjobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            return;
        }
}

static void on_req_closed(struct http_req *r, void *arg)
{
    struct sbx_srcjob *j = arg;
    j->req = NULL;
}

static void add_step(struct sbx_srcjob *j, enum feed_kind feed, const char *arg0, ...)
{
    json_t *a = json_array();
    va_list ap;
    va_start(ap, arg0);
    for (const char *s = arg0; s; s = va_arg(ap, const char *))
        json_array_append_new(a, json_string(s));
    va_end(ap);
    j->steps[j->nsteps].argv = a;
    j->steps[j->nsteps].feed = feed;
    j->nsteps++;
}

/* tar's flag for the compression these bytes start with ("" for none). */
static const char *zflag(const unsigned char *m, size_t n)
{
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) return "-z";
    if (n >= 6 && !memcmp(m, "\xfd" "7zXZ\0", 6)) return "-J";
    if (n >= 3 && !memcmp(m, "BZh", 3)) return "-j";
    if (n >= 4 && !memcmp(m, "\x28\xb5\x2f\xfd", 4)) return "--zstd";
    return NULL;
}

static void add_extract(struct sbx_srcjob *j, enum feed_kind feed, const char *z)
{
    add_step(j, FEED_NONE, "mkdir", "-p", "--", j->target, (char *)NULL);
    if (z)
        add_step(j, feed, "tar", "-x", z, "--no-same-owner", "-f", "-", "-C", j->target, (char *)NULL);
    else
        add_step(j, feed, "tar", "-x", "--no-same-owner", "-f", "-", "-C", j->target, (char *)NULL);
}

/* Copy the job's input into fd from a child process (the command's stdin). */
static int spawn_feeder(struct sbx_srcjob *j, enum feed_kind feed, int fd)
{
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid > 0) return 0;
    /* the child: only fd 3 (the pipe) and stderr (the daemon's log) stay open */
    signal(SIGPIPE, SIG_DFL);
    if (dup2(fd, 3) < 0) _exit(1);
    int fl = fcntl(3, F_GETFL);
    fcntl(3, F_SETFL, fl & ~O_NONBLOCK);
    int dn = open("/dev/null", O_RDONLY);
    if (dn >= 0 && dn != 0) dup2(dn, 0);
    syscall(SYS_close_range, 4, ~0U, 0);
    if (feed == FEED_DIR) {
        dup2(3, 1);
        close(3);
        execlp("tar", "tar", "-C", j->feed_path, "-c", "-f", "-", ".", (char *)NULL);
        _exit(127);
    }
    int in = -1;
    if (feed == FEED_FILE) in = open(j->feed_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (feed == FEED_FILE && in < 0) _exit(1);
    size_t off = 0;
    char b[65536];
    for (;;) {
        const char *p;
        ssize_t n;
        if (feed == FEED_BUF) {
            n = (ssize_t)(j->buf_len - off > sizeof b ? sizeof b : j->buf_len - off);
            p = j->buf + off;
            off += (size_t)n;
        } else {
            n = read(in, b, sizeof b);
            p = b;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(n < 0);
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(3, p + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) _exit(1);
            w += k;
        }
    }
}

static void job_done(struct sbx_srcjob *j);

static void run_step(struct sbx_srcjob *j)
{
    struct sbx *s = sbx_find(j->d, j->sbx_id);
    struct err err = ERR_INIT;
    if (!s) {
        snprintf(j->errmsg, sizeof j->errmsg, "the sandbox was deleted");
        j->failed = true;
        job_done(j);
        return;
    }
    if (j->cur >= j->nsteps) {
        job_done(j);
        return;
    }
    struct step *st = &j->steps[j->cur];
    json_t *body = json_object();
    json_object_set(body, "cmd", json_array_get(st->argv, 0));
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(st->argv); i++)
        json_array_append(args, json_array_get(st->argv, i));
    json_object_set_new(body, "args", args);
    json_object_set_new(body, "stdin", json_string(st->feed ? "pipe" : "null"));
    json_object_set_new(body, "timeout_ms", json_integer(SOURCE_STEP_TIMEOUT_MS));
    json_object_set_new(body, "cwd", json_string("/"));
    struct sbx_cmd *c = NULL;
    if (sbx_ensure_running(s, NULL, &err) == 0) c = sbx_cmd_start(s, body, &err);
    json_decref(body);
    if (!c) {
        snprintf(j->errmsg, sizeof j->errmsg, "%s", err.msg);
        j->failed = true;
        job_done(j);
        return;
    }
    j->cmd = c;
    if (st->feed) {
        int e = spawn_feeder(j, st->feed, c->fd_in);
        struct err ignored = ERR_INIT;
        sbx_cmd_stdin(c, "", 0, true, NULL, &ignored); /* our end; the feeder keeps its copy */
        if (e < 0) {
            snprintf(j->errmsg, sizeof j->errmsg, "cannot start the copy: %s", strerror(-e));
            j->failed = true;
        }
    }
}

static void on_next(evutil_socket_t fd, short what, void *arg)
{
    struct sbx_srcjob *j = arg;
    if (j->failed) {
        job_done(j);
        return;
    }
    j->cur++;
    run_step(j);
}

void sbx_source_on_event(struct sbxd *d, struct sbx_cmd *c, int ev)
{
    if (!(ev & (SBX_EV_DONE | SBX_EV_GONE))) return;
    for (struct sbx_srcjob *j = d->srcjobs; j; j = j->next) {
        if (j->cmd != c) continue;
        j->cmd = NULL;
        const char *prog = json_string_value(json_array_get(j->steps[j->cur].argv, 0));
        if (ev & SBX_EV_GONE) {
            j->failed = true;
            snprintf(j->errmsg, sizeof j->errmsg, "the sandbox went away");
        } else if (c->status == CMD_FAILED || c->exit_code != 0 || c->timed_out) {
            char tail[700];
            uint64_t total = c->err.total, from = total > 600 ? total - 600 : 0;
            size_t n = sbx_ring_read(&c->err, from, tail, sizeof tail - 1, NULL);
            tail[n] = '\0';
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)tail[i] < 0x20 && tail[i] != '\n') tail[i] = ' ';
            j->failed = true;
            if (c->status == CMD_FAILED)
                snprintf(j->errmsg, sizeof j->errmsg, "%s: %s", prog, c->error.msg);
            else
                snprintf(j->errmsg, sizeof j->errmsg, "%s %s (exit %d): %s", prog,
                         c->timed_out ? "timed out" : "failed", c->exit_code, tail);
        }
        event_active(j->next_ev, EV_TIMEOUT, 0);
        return;
    }
}

static void job_done(struct sbx_srcjob *j)
{
    struct sbxd *d = j->d;
    struct sbx *s = sbx_find(d, j->sbx_id);
    struct err err = ERR_INIT;
    job_unlink(j);
    if (j->kind == JOB_CREATE) {
        if (!j->failed && s) {
            if (s->origin) {
                json_object_del(s->origin, "pending");
                json_object_set_new(s->origin, "ready_ms",
                                    json_integer(clock_mono_ms() - j->t0));
            }
            sbx_save(s, &err);
            if (j->stop_after) sbx_stop_begin(s, "stopped");
            log_info("sandbox source ready", "sandbox=%s type=%s ms=%lld", s->id, j->what,
                     (long long)(clock_mono_ms() - j->t0));
            if (j->req) { /* (once the stop is over, if any) */
                http_req_on_close(j->req, NULL, NULL);
                if (j->created)
                    j->created(j->req, s, NULL);
                else
                    sbx_api_reply_quiet(s, j->req, 201, "X-Rebuno-Create-Ms", j->t0);
            }
        } else {
            log_warn("sandbox source failed; sandbox deleted", "sandbox=%s type=%s error=\"%s\"",
                     j->sbx_id, j->what, j->errmsg);
            if (s) sbx_delete(s, &err);
            if (j->req) {
                http_req_on_close(j->req, NULL, NULL);
                char msg[1100];
                snprintf(msg, sizeof msg, "the %s source could not be set up: %s", j->what,
                         j->errmsg);
                if (j->created)
                    j->created(j->req, NULL, msg);
                else
                    http_reply_error(j->req, 400, "source_failed", "source", "%s", msg);
            }
        }
    } else if (j->req) {
        http_req_on_close(j->req, NULL, NULL);
        j->done(j->req, j->failed ? j->errmsg : NULL, j->target, j->buf_len);
    }
    job_free(j);
}

static struct sbx_srcjob *job_new(struct sbxd *d, struct sbx *s, struct http_req *r,
                                  enum job_kind kind)
{
    struct sbx_srcjob *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->kind = kind;
    j->req = r;
    j->t0 = clock_mono_ms();
    snprintf(j->sbx_id, sizeof j->sbx_id, "%s", s->id);
    j->next_ev = event_new(d->base, -1, 0, on_next, j);
    j->cur = 0;
    return j;
}

static void job_start(struct sbx_srcjob *j)
{
    j->next = j->d->srcjobs;
    j->d->srcjobs = j;
    if (j->req) http_req_on_close(j->req, on_req_closed, j);
    run_step(j);
}

bool sbx_source_begin(struct sbxd *d, struct sbx *s, struct http_req *r)
{
    return sbx_source_begin_ex(d, s, r, NULL);
}

bool sbx_source_begin_ex(struct sbxd *d, struct sbx *s, struct http_req *r,
                         sbx_source_done_fn done)
{
    if (!s->origin || !json_is_true(json_object_get(s->origin, "pending"))) return false;
    json_t *src = s->origin;
    const char *type = json_string_value(json_object_get(src, "type"));
    struct sbx_srcjob *j = job_new(d, s, r, JOB_CREATE);
    j->created = done;
    snprintf(j->what, sizeof j->what, "%s", type);
    j->stop_after = json_is_true(json_object_get(src, "stop_after"));
    json_object_del(src, "stop_after");
    char target[SBX_PATH_MAX + 1];
    struct err err = ERR_INIT;
    target_path(src, target, &err);
    j->target = xstrdup(target);
    if (!strcmp(type, "git")) {
        const char *url = json_string_value(json_object_get(src, "url"));
        const char *branch = json_string_value(json_object_get(src, "branch"));
        json_int_t depth = json_integer_value(json_object_get(src, "depth"));
        const char *local = !strncmp(url, "file://", 7) ? url + 7 : url[0] == '/' ? url : NULL;
        char tmp[64], furl[80], dep[32];
        snprintf(tmp, sizeof tmp, "/tmp/.rebuno-source-%lld", (long long)clock_mono_ms());
        snprintf(furl, sizeof furl, "file://%s", tmp);
        snprintf(dep, sizeof dep, "--depth=%lld", (long long)depth);
        if (local) {
            j->feed_path = xstrdup(local);
            add_step(j, FEED_NONE, "mkdir", "-p", "--", tmp, (char *)NULL);
            add_step(j, FEED_DIR, "tar", "-x", "--no-same-owner", "-f", "-", "-C", tmp, (char *)NULL);
        }
        json_t *a = json_array();
        static const char *const pre[] = {"git", "-c", "advice.detachedHead=false", "-c",
                                          "protocol.file.allow=always", "clone", "--quiet"};
        for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
            json_array_append_new(a, json_string(pre[i]));
        if (branch) {
            json_array_append_new(a, json_string("--branch"));
            json_array_append_new(a, json_string(branch));
        }
        if (depth > 0) json_array_append_new(a, json_string(dep));
        json_array_append_new(a, json_string("--"));
        json_array_append_new(a, json_string(local ? furl : url));
        json_array_append_new(a, json_string(target));
        j->steps[j->nsteps].argv = a;
        j->steps[j->nsteps].feed = FEED_NONE;
        j->nsteps++;
        if (local) add_step(j, FEED_NONE, "rm", "-rf", "--", tmp, (char *)NULL);
    } else { /* tarball */
        j->feed_path = xstrdup(json_string_value(json_object_get(src, "file")));
        unsigned char m[8] = {0};
        int fd = open(j->feed_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = fd >= 0 ? read(fd, m, sizeof m) : -1;
        if (fd >= 0) close(fd);
        add_extract(j, FEED_FILE, zflag(m, n > 0 ? (size_t)n : 0));
    }
    log_info("sandbox source started", "sandbox=%s type=%s steps=%d", s->id, type, j->nsteps);
    job_start(j);
    return true;
}

void sbx_extract_begin(struct sbxd *d, struct sbx *s, struct http_req *r, const char *target,
                       const void *body, size_t len, sbx_extract_done_fn done)
{
    struct sbx_srcjob *j = job_new(d, s, r, JOB_EXTRACT);
    snprintf(j->what, sizeof j->what, "extract");
    j->done = done;
    j->target = xstrdup(target);
    j->buf = xmalloc(len ? len : 1);
    memcpy(j->buf, body, len);
    j->buf_len = len;
    add_extract(j, FEED_BUF, zflag((const unsigned char *)body, len));
    job_start(j);
}

static void extract_done(struct http_req *r, const char *error, const char *target, size_t bytes)
{
    if (error) {
        http_reply_error(r, 400, "extract_failed", "", "%s", error);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(target));
    json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
    http_reply_json(r, 200, o);
}

/* POST /v1/sandboxes/:ref/files/extract?path=DIR with a tar (maybe compressed) body. */
static void h_extract(struct http_req *r, void *arg)
{
    struct sbxd *d = arg;
    struct sbx *s = sbx_api_sandbox(d, r);
    if (!s || sbx_api_park(s, r, h_extract, d)) return;
    size_t len;
    const char *body = http_req_body(r, &len);
    const char *path = http_req_query(r, "path");
    char target[SBX_PATH_MAX + 1];
    struct err err = ERR_INIT;
    if (sbx_path_normalize(path ? path : "/workspace", "/root", target, sizeof target, "path",
                           &err) < 0 ||
        sbx_ensure_running(s, http_req_query(r, "session"), &err) < 0) {
        http_reply_err(r, &err);
        return;
    }
    if (len == 0) {
        http_reply_error(r, 400, "validation_error", "body", "the body must be a tar archive");
        return;
    }
    sbx_extract_begin(d, s, r, target, body, len, extract_done);
}

void sbx_sources_register(struct sbxd *d)
{
    http_route(d->http, "POST", "/v1/sandboxes/:ref/files/extract", h_extract, d);
}

void sbx_sources_close(struct sbxd *d)
{
    while (d->srcjobs) {
        struct sbx_srcjob *j = d->srcjobs;
        d->srcjobs = j->next;
        if (j->req) {
            http_req_on_close(j->req, NULL, NULL);
            http_reply_error(j->req, 503, "shutting_down", "", "sandboxd is shutting down");
        }
        job_free(j);
    }
}
