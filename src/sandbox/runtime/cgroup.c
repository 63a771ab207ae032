/*
 * cgroup.c - cgroup v1 and v2 backends behind cgroup.h.
 *
 * v1 (these machines): a session group is <mnt>/<parent>/<name> in each of the
 * memory, pids, cpu and freezer hierarchies (found in /proc/self/mounts, so
 * co-mounted "cpu,cpuacct" works too). Freeze writes freezer.state and polls it;
 * kill freezes, SIGKILLs every pid in cgroup.procs, thaws and waits for the group
 * to empty (a frozen task cannot fork, so one pass is enough; we loop anyway).
 *
 * v2: <mnt>/<parent>/<name> with memory, pids and cpu enabled in the parent's
 * subtree_control. Freeze writes cgroup.freeze and polls cgroup.events for
 * "frozen"; kill uses cgroup.kill (Linux 5.14+) and falls back to the v1 dance.
 *
 * Limits fail closed: a daemon does not start on a v2 hierarchy where it cannot get
 * the memory, pids and cpu controllers for its groups (a hybrid host's unified
 * hierarchy has them bound to v1), and a limit whose file is missing fails the
 * group's creation or update instead of being skipped. Only an "unlimited" value may
 * meet a missing file (nothing is lost), which is what lets the unit tests freeze and
 * kill on such a hierarchy (cgroup_int.h).
 *
 * Polling sleeps 100 us between reads and is bounded by the caller's timeout.
 */
#include "sandbox/runtime/cgroup.h"
#include "sandbox/runtime/cgroup_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"

/* C_CPUACCT (v1 only) is optional: it only measures (cpu usage for metrics), so a host
 * without that hierarchy, or with it co-mounted with cpu (then dir[C_CPU] has its
 * files), leaves mnt[C_CPUACCT] and dir[C_CPUACCT] NULL; every loop over C_N skips NULLs. */
enum { C_MEMORY, C_PIDS, C_CPU, C_FREEZER, C_CPUACCT, C_N };
#define C_REQUIRED C_CPUACCT /* the controllers before it are required */
static const char *const ctl_names[C_N] = {"memory", "pids", "cpu", "freezer", "cpuacct"};

struct sbx_cg_root {
    enum sbx_cg_kind kind;
    char *parent;      /* one path component */
    char *mnt[C_N];    /* v1: mount point per controller */
    char *mnt2;        /* v2: unified mount point */
};

struct sbx_cgroup {
    struct sbx_cg_root *root;
    char *name;
    char *dir[C_N]; /* v1: group dir per controller; v2: dir[0] only */
    char desc[PATH_MAX];
    bool frozen;
};

/* ------------------------------------------------------------------ file helpers */

static int write_str(const char *dir, const char *file, const char *val)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p) return -ENAMETOOLONG;
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t n = write(fd, val, strlen(val));
    int e = n < 0 ? -errno : 0;
    close(fd);
    return e;
}

static int read_str(const char *dir, const char *file, char *out, size_t n)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p) return -ENAMETOOLONG;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    ssize_t k = read(fd, out, n - 1);
    int e = k < 0 ? -errno : 0;
    close(fd);
    if (e) return e;
    out[k] = '\0';
    return 0;
}

static int64_t read_int(const char *dir, const char *file)
{
    char b[64];
    if (read_str(dir, file, b, sizeof b) < 0) return -1;
    if (strncmp(b, "max", 3) == 0) return INT64_MAX;
    return strtoll(b, NULL, 10);
}

/* Value of "key N" in a flat keyed file (memory.events, memory.oom_control, cgroup.events). */
static int64_t read_key(const char *dir, const char *file, const char *key)
{
    char b[2048];
    if (read_str(dir, file, b, sizeof b) < 0) return -1;
    size_t kl = strlen(key);
    for (char *line = b; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') return strtoll(line + kl + 1, NULL, 10);
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int mkdir_ok(const char *p)
{
    return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -errno;
}

/* Every pid in dir/cgroup.procs gets sig. Returns how many were signalled, or -errno. */
static int signal_procs(const char *dir, int sig)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/cgroup.procs", dir);
    FILE *f = fopen(p, "re");
    if (!f) return -errno;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1)
        if (pid > 0 && kill((pid_t)pid, sig) == 0) n++;
    fclose(f);
    return n;
}

static int count_procs(const char *dir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/cgroup.procs", dir);
    FILE *f = fopen(p, "re");
    if (!f) return -errno;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1)
        n++;
    fclose(f);
    return n;
}

/* ------------------------------------------------------------------ discovery */

static bool opt_has(const char *opts, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = opts; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == wl && strncmp(p, word, wl) == 0) return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

static void find_mounts(struct sbx_cg_root *r, const char *table)
{
    FILE *f = fopen(table ? table : "/proc/self/mounts", "re");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        char dev[256], dir[PATH_MAX], type[64], opts[1024];
        if (sscanf(line, "%255s %4095s %63s %1023s", dev, dir, type, opts) != 4) continue;
        if (strcmp(type, "cgroup2") == 0) {
            /* Prefer /sys/fs/cgroup itself (pure v2) over a hybrid's "unified". */
            if (!r->mnt2 || strcmp(dir, "/sys/fs/cgroup") == 0) {
                free(r->mnt2);
                r->mnt2 = xstrdup(dir);
            }
        } else if (strcmp(type, "cgroup") == 0) {
            for (int c = 0; c < C_N; c++)
                if (!r->mnt[c] && opt_has(opts, ctl_names[c])) r->mnt[c] = xstrdup(dir);
        }
    }
    fclose(f);
    if (r->mnt[C_CPUACCT] && r->mnt[C_CPU] && !strcmp(r->mnt[C_CPUACCT], r->mnt[C_CPU])) {
        free(r->mnt[C_CPUACCT]);
        r->mnt[C_CPUACCT] = NULL;
    }
}

static bool v1_complete(const struct sbx_cg_root *r)
{
    for (int c = 0; c < C_REQUIRED; c++)
        if (!r->mnt[c]) return false;
    return true;
}

/* The controllers a v2 group needs for limits, as bits (1 << i). */
static const char *const v2_ctls[] = {"memory", "pids", "cpu"};
#define V2_ALL 7

/* Which of v2_ctls the space-separated list in dir/file lacks (all of them when the
 * file cannot be read). */
static int v2_missing(const char *dir, const char *file)
{
    char b[512];
    if (read_str(dir, file, b, sizeof b) < 0) return V2_ALL;
    int missing = V2_ALL;
    char *save = NULL;
    for (char *t = strtok_r(b, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
        for (int i = 0; i < 3; i++)
            if (!strcmp(t, v2_ctls[i])) missing &= ~(1 << i);
    return missing;
}

static void v2_names(int mask, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; i < 3; i++)
        if (mask & (1 << i))
            snprintf(out + strlen(out), n - strlen(out), "%s%s", out[0] ? ", " : "", v2_ctls[i]);
}

/* Enable in dir's cgroup.subtree_control the controllers of want it does not list yet,
 * one write each (one that fails must not block the others). 0 or the first -errno. */
static int v2_enable(const char *dir, int want)
{
    int e = 0, need = want & v2_missing(dir, "cgroup.subtree_control");
    for (int i = 0; i < 3; i++) {
        if (!(need & (1 << i))) continue;
        char w[16];
        snprintf(w, sizeof w, "+%s", v2_ctls[i]);
        int r = write_str(dir, "cgroup.subtree_control", w);
        if (r < 0 && !e) e = r;
    }
    return e;
}

/* The v2 root: <mnt2>/<parent>, whose children get memory, pids and cpu. */
static int v2_open(struct sbx_cg_root *r, bool no_limits, struct err *err)
{
    const char *mnt = r->mnt2;
    char names[64], have[256] = "";
    int absent = v2_missing(mnt, "cgroup.controllers");
    if (absent && !no_limits) {
        v2_names(absent, names, sizeof names);
        if (read_str(mnt, "cgroup.controllers", have, sizeof have) == 0)
            have[strcspn(have, "\n")] = '\0';
        return err_set(err, 500, "cgroup_unavailable", "",
                       "cgroup v2 at %s lacks the %s controller%s (it has: \"%s\"), so sandboxes "
                       "would run without their limits. On a hybrid host they are bound to the "
                       "v1 hierarchies: use --cgroup v1 (or auto); on a pure v2 host enable them "
                       "in the kernel and in %s/cgroup.subtree_control",
                       mnt, names, strchr(names, ',') ? "s" : "", have, mnt);
    }
    int want = V2_ALL & ~absent;
    int e = v2_enable(mnt, want);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", mnt, r->parent);
    bool made = mkdir(p, 0755) == 0;
    if (!made && errno != EEXIST)
        return err_set(err, 500, "cgroup_unavailable", "", "cannot create cgroup %s: %s", p,
                       strerror(errno));
    int e2 = v2_enable(p, want);
    if (!e) e = e2;
    int missing = v2_missing(p, "cgroup.subtree_control") & want;
    if (missing && !no_limits) {
        if (made) rmdir(p);
        v2_names(missing, names, sizeof names);
        return err_set(err, 500, "cgroup_unavailable", "",
                       "cannot enable the %s controller%s for the sandboxes' groups under %s "
                       "(%s): they must be listed in %s/cgroup.subtree_control and in every "
                       "cgroup.subtree_control above it (echo +memory +pids +cpu > "
                       "%s/cgroup.subtree_control), and no process may sit in %s itself",
                       names, strchr(names, ',') ? "s" : "", p,
                       e ? strerror(-e) : "not listed after enabling", p, mnt, p);
    }
    return 0;
}

int sbx_cg_root_open_ex(const struct sbx_cg_open_opts *o, struct sbx_cg_root **out,
                        struct err *err)
{
    *out = NULL;
    const char *parent = o->parent, *mode = o->mode;
    if (!parent || !*parent || strchr(parent, '/') || !strcmp(parent, ".") ||
        !strcmp(parent, ".."))
        return err_invalid(err, "cgroup_parent", "cgroup parent must be one path component");
    bool want1 = !mode || !strcmp(mode, "auto") || !strcmp(mode, "v1");
    bool want2 = !mode || !strcmp(mode, "auto") || !strcmp(mode, "v2");
    if (!want1 && !want2) return err_invalid(err, "cgroup", "cgroup mode must be auto, v1 or v2");
    struct sbx_cg_root *r = xcalloc(1, sizeof *r);
    r->parent = xstrdup(parent);
    find_mounts(r, o->mounts);
    if (want1 && v1_complete(r)) {
        r->kind = SBX_CG_V1;
        for (int c = 0; c < C_N; c++) {
            if (!r->mnt[c]) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", r->mnt[c], parent);
            int e = mkdir_ok(p);
            if (e < 0) {
                sbx_cg_root_free(r);
                return err_set(err, 500, "cgroup_unavailable", "", "cannot create cgroup %s: %s", p,
                               strerror(-e));
            }
        }
    } else if (want2 && r->mnt2) {
        r->kind = SBX_CG_V2;
        if (v2_open(r, o->no_limits, err) < 0) {
            sbx_cg_root_free(r);
            return -1;
        }
    } else {
        sbx_cg_root_free(r);
        return err_set(err, 500, "cgroup_unavailable", "",
                       "no usable cgroups: need the v1 memory, pids, cpu and freezer hierarchies "
                       "or cgroup v2 with the memory, pids and cpu controllers%s",
                       want2 && !want1 ? " (no cgroup2 file system is mounted)" : "");
    }
    *out = r;
    return 0;
}

int sbx_cg_root_open(const char *mode, const char *parent, struct sbx_cg_root **out,
                     struct err *err)
{
    struct sbx_cg_open_opts o = {.mode = mode, .parent = parent};
    return sbx_cg_root_open_ex(&o, out, err);
}

void sbx_cg_root_free(struct sbx_cg_root *r)
{
    if (!r) return;
    for (int c = 0; c < C_N; c++)
        free(r->mnt[c]);
    free(r->mnt2);
    free(r->parent);
    free(r);
}

enum sbx_cg_kind sbx_cg_root_kind(const struct sbx_cg_root *r)
{
    return r->kind;
}

static struct sbx_cgroup *cg_handle(struct sbx_cg_root *r, const char *name)
{
    struct sbx_cgroup *cg = xcalloc(1, sizeof *cg);
    cg->root = r;
    cg->name = xstrdup(name);
    if (r->kind == SBX_CG_V1) {
        for (int c = 0; c < C_N; c++)
            if (r->mnt[c]) cg->dir[c] = xasprintf("%s/%s/%s", r->mnt[c], r->parent, name);
        snprintf(cg->desc, sizeof cg->desc, "v1:/%s/%s", r->parent, name);
    } else {
        cg->dir[0] = xasprintf("%s/%s/%s", r->mnt2, r->parent, name);
        snprintf(cg->desc, sizeof cg->desc, "v2:/%s/%s", r->parent, name);
    }
    return cg;
}

struct sbx_cgroup *sbx_cg_open(struct sbx_cg_root *r, const char *name)
{
    return cg_handle(r, name);
}

static void cg_free(struct sbx_cgroup *cg)
{
    for (int c = 0; c < C_N; c++)
        free(cg->dir[c]);
    free(cg->name);
    free(cg);
}

void sbx_cg_forget(struct sbx_cgroup *cg)
{
    if (cg) cg_free(cg);
}

static int rmdir_retry(const char *dir, int timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    for (;;) {
        if (rmdir(dir) == 0 || errno == ENOENT) return 0;
        if (errno != EBUSY || clock_mono_ms() >= end) return -errno;
        sleep_us(200);
    }
}

int sbx_cg_root_sweep(struct sbx_cg_root *r)
{
    char p[PATH_MAX];
    const char *base = r->kind == SBX_CG_V1 ? r->mnt[C_FREEZER] : r->mnt2;
    snprintf(p, sizeof p, "%s/%s", base, r->parent);
    DIR *d = opendir(p);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    char **names = NULL;
    size_t nn = 0;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.') continue;
        names = xrealloc(names, (nn + 1) * sizeof *names);
        names[nn++] = xstrdup(de->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < nn; i++) {
        struct sbx_cgroup *cg = cg_handle(r, names[i]);
        sbx_cg_destroy(cg);
        n++;
        free(names[i]);
    }
    /* v1: groups may exist in some hierarchies only (a crash between mkdirs). */
    if (r->kind == SBX_CG_V1) {
        for (int c = 0; c < C_N; c++) {
            if (!r->mnt[c]) continue;
            snprintf(p, sizeof p, "%s/%s", r->mnt[c], r->parent);
            DIR *dd = opendir(p);
            if (!dd) continue;
            while ((de = readdir(dd))) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.') continue;
                char q[PATH_MAX];
                if (snprintf(q, sizeof q, "%s/%s", p, de->d_name) >= (int)sizeof q) continue;
                signal_procs(q, SIGKILL);
                rmdir_retry(q, 1000);
            }
            closedir(dd);
        }
    }
    free(names);
    return n;
}

void sbx_cg_root_remove(struct sbx_cg_root *r)
{
    char p[PATH_MAX];
    if (r->kind == SBX_CG_V1) {
        for (int c = 0; c < C_N; c++) {
            if (!r->mnt[c]) continue;
            snprintf(p, sizeof p, "%s/%s", r->mnt[c], r->parent);
            rmdir(p);
        }
    } else {
        snprintf(p, sizeof p, "%s/%s", r->mnt2, r->parent);
        rmdir(p);
    }
}

/* ------------------------------------------------------------------ groups */

void sbx_cg_cpu_max(const struct sbx_cg_limits *l, char *out, size_t n)
{
    int64_t period = l->cpu_period_us > 0 ? l->cpu_period_us : 100000;
    if (l->cpu_quota_us > 0)
        snprintf(out, n, "%lld %lld", (long long)l->cpu_quota_us, (long long)period);
    else
        snprintf(out, n, "max %lld", (long long)period);
}

/* Write one limit. A missing file is an error unless the value is "unlimited"
 * (unlimited: there is nothing to enforce, so nothing is skipped). */
static int put_limit(const char *dir, const char *file, const char *val, bool unlimited,
                     const char **failed)
{
    int e = write_str(dir, file, val);
    if (e == -ENOENT && unlimited) return 0;
    if (e < 0) *failed = file;
    return e;
}

/* 0 or -errno with *failed naming the file that could not be written. */
static int set_limits(struct sbx_cgroup *cg, const struct sbx_cg_limits *l, const char **failed)
{
    char v[64];
    int e;
    if (cg->root->kind == SBX_CG_V1) {
        snprintf(v, sizeof v, "%lld", l->memory_bytes > 0 ? (long long)l->memory_bytes : -1LL);
        /* memsw (memory + swap, only with swap accounting) must stay >= the memory
         * limit: raise it first when raising, lower it after when lowering. Without
         * swap accounting the file does not exist and swap is not charged at all. */
        e = write_str(cg->dir[C_MEMORY], "memory.limit_in_bytes", v);
        if (e == -EINVAL) {
            write_str(cg->dir[C_MEMORY], "memory.memsw.limit_in_bytes", v);
            e = write_str(cg->dir[C_MEMORY], "memory.limit_in_bytes", v);
        }
        if (e < 0) {
            *failed = "memory.limit_in_bytes";
            return e;
        }
        if ((e = write_str(cg->dir[C_MEMORY], "memory.memsw.limit_in_bytes", v)) < 0 &&
            e != -ENOENT) {
            *failed = "memory.memsw.limit_in_bytes";
            return e;
        }
        if (l->pids_max > 0)
            snprintf(v, sizeof v, "%lld", (long long)l->pids_max);
        else
            snprintf(v, sizeof v, "max");
        if ((e = put_limit(cg->dir[C_PIDS], "pids.max", v, false, failed)) < 0) return e;
        snprintf(v, sizeof v, "%lld", (long long)(l->cpu_period_us > 0 ? l->cpu_period_us : 100000));
        if ((e = put_limit(cg->dir[C_CPU], "cpu.cfs_period_us", v, false, failed)) < 0) return e;
        snprintf(v, sizeof v, "%lld", l->cpu_quota_us > 0 ? (long long)l->cpu_quota_us : -1LL);
        if ((e = put_limit(cg->dir[C_CPU], "cpu.cfs_quota_us", v, false, failed)) < 0) return e;
        return 0;
    }
    const char *d = cg->dir[0];
    if (l->memory_bytes > 0)
        snprintf(v, sizeof v, "%lld", (long long)l->memory_bytes);
    else
        snprintf(v, sizeof v, "max");
    if ((e = put_limit(d, "memory.max", v, l->memory_bytes <= 0, failed)) < 0) return e;
    /* no swap beyond the memory limit; absent without swap accounting (nothing to charge) */
    if ((e = write_str(d, "memory.swap.max", "0")) < 0 && e != -ENOENT) {
        *failed = "memory.swap.max";
        return e;
    }
    if (l->pids_max > 0)
        snprintf(v, sizeof v, "%lld", (long long)l->pids_max);
    else
        snprintf(v, sizeof v, "max");
    if ((e = put_limit(d, "pids.max", v, l->pids_max <= 0, failed)) < 0) return e;
    sbx_cg_cpu_max(l, v, sizeof v);
    if ((e = put_limit(d, "cpu.max", v, l->cpu_quota_us <= 0, failed)) < 0) return e;
    return 0;
}

int sbx_cg_set_limits(struct sbx_cgroup *cg, const struct sbx_cg_limits *l, struct err *err)
{
    const char *failed = "?";
    int e = set_limits(cg, l, &failed);
    if (e == 0) return 0;
    char ctl[16];
    snprintf(ctl, sizeof ctl, "%.*s", (int)strcspn(failed, "."), failed);
    if (e == -ENOENT)
        return err_set(err, 500, "cgroup_failed", "",
                       "cannot set the %s limit of cgroup %s: it has no %s file (the %s controller "
                       "is not enabled for it); the sandbox would run without that limit",
                       ctl, cg->desc, failed, ctl);
    if (e == -EBUSY) /* v1: a memory limit below what the group uses */
        return err_set(err, 409, "busy", "resources",
                       "cannot set the %s limit of cgroup %s: %s: %s (is it below what the "
                       "sandbox uses now?)",
                       ctl, cg->desc, failed, strerror(-e));
    return err_set(err, 500, "cgroup_failed", "", "cannot set the %s limit of cgroup %s: %s: %s",
                   ctl, cg->desc, failed, strerror(-e));
}

struct sbx_cgroup *sbx_cg_create(struct sbx_cg_root *r, const char *name,
                                 const struct sbx_cg_limits *l, struct err *err)
{
    if (!name || !*name || strchr(name, '/') || name[0] == '.') {
        err_internal(err, "bad cgroup name");
        return NULL;
    }
    struct sbx_cgroup *cg = cg_handle(r, name);
    int ndirs = r->kind == SBX_CG_V1 ? C_N : 1;
    for (int c = 0; c < ndirs; c++)
        if (cg->dir[c] && access(cg->dir[c], F_OK) == 0) { /* left over from a crash: sweep it first */
            sbx_cg_destroy(cg_handle(r, name));
            break;
        }
    for (int c = 0; c < ndirs; c++) {
        if (!cg->dir[c] || mkdir(cg->dir[c], 0755) == 0) continue;
        int e = errno;
        err_set(err, 500, "cgroup_failed", "", "cannot create cgroup %s: %s", cg->dir[c],
                strerror(e));
        sbx_cg_destroy(cg);
        return NULL;
    }
    if (sbx_cg_set_limits(cg, l, err) < 0) {
        sbx_cg_destroy(cg);
        return NULL;
    }
    return cg;
}

int sbx_cg_attach(struct sbx_cgroup *cg, pid_t pid)
{
    char v[32];
    snprintf(v, sizeof v, "%d", (int)pid);
    int ndirs = cg->root->kind == SBX_CG_V1 ? C_N : 1;
    for (int c = 0; c < ndirs; c++) {
        int e = cg->dir[c] ? write_str(cg->dir[c], "cgroup.procs", v) : 0;
        if (e < 0) return e;
    }
    return 0;
}

static int v1_wait_state(struct sbx_cgroup *cg, const char *want, int timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    char b[32];
    for (;;) {
        int e = read_str(cg->dir[C_FREEZER], "freezer.state", b, sizeof b);
        if (e < 0) return e;
        if (strncmp(b, want, strlen(want)) == 0) return 0;
        if (clock_mono_ms() >= end) return -ETIMEDOUT;
        sleep_us(100);
    }
}

static int v2_wait_frozen(struct sbx_cgroup *cg, int want, int timeout_ms)
{
    int64_t end = clock_mono_ms() + timeout_ms;
    for (;;) {
        int64_t f = read_key(cg->dir[0], "cgroup.events", "frozen");
        if (f < 0) return -EIO;
        if (f == want) return 0;
        if (clock_mono_ms() >= end) return -ETIMEDOUT;
        sleep_us(100);
    }
}

int sbx_cg_freeze(struct sbx_cgroup *cg, int timeout_ms)
{
    int e;
    if (cg->root->kind == SBX_CG_V1) {
        if ((e = write_str(cg->dir[C_FREEZER], "freezer.state", "FROZEN")) < 0) return e;
        e = v1_wait_state(cg, "FROZEN", timeout_ms);
    } else {
        if ((e = write_str(cg->dir[0], "cgroup.freeze", "1")) < 0) return e;
        e = v2_wait_frozen(cg, 1, timeout_ms);
    }
    if (e == 0) cg->frozen = true;
    return e;
}

int sbx_cg_thaw(struct sbx_cgroup *cg, int timeout_ms)
{
    int e;
    if (cg->root->kind == SBX_CG_V1) {
        if ((e = write_str(cg->dir[C_FREEZER], "freezer.state", "THAWED")) < 0) return e;
        e = v1_wait_state(cg, "THAWED", timeout_ms);
    } else {
        if ((e = write_str(cg->dir[0], "cgroup.freeze", "0")) < 0) return e;
        e = v2_wait_frozen(cg, 0, timeout_ms);
    }
    if (e == 0) cg->frozen = false;
    return e;
}

bool sbx_cg_frozen(const struct sbx_cgroup *cg)
{
    return cg->frozen;
}

int sbx_cg_count(const struct sbx_cgroup *cg)
{
    return count_procs(cg->root->kind == SBX_CG_V1 ? cg->dir[C_FREEZER] : cg->dir[0]);
}

int sbx_cg_kill(struct sbx_cgroup *cg, int timeout_ms)
{
    const char *dir = cg->root->kind == SBX_CG_V1 ? cg->dir[C_FREEZER] : cg->dir[0];
    int64_t end = clock_mono_ms() + timeout_ms;
    if (cg->root->kind == SBX_CG_V2 && write_str(dir, "cgroup.kill", "1") == 0) {
        /* done below: wait for empty */
    } else {
        for (int pass = 0; pass < 16; pass++) {
            /* Frozen tasks cannot fork, so a frozen group is killed in one pass. */
            sbx_cg_freeze(cg, 200);
            int n = signal_procs(dir, SIGKILL);
            if (cg->root->kind == SBX_CG_V1) {
                /* every hierarchy: a task could have been moved out of the freezer group */
                for (int c = 0; c < C_N; c++)
                    if (c != C_FREEZER && cg->dir[c]) signal_procs(cg->dir[c], SIGKILL);
            }
            sbx_cg_thaw(cg, 200);
            if (n <= 0) break;
            if (clock_mono_ms() >= end) break;
        }
    }
    for (;;) {
        int n = count_procs(dir);
        if (n <= 0) return n < 0 && n != -ENOENT ? n : 0;
        if (clock_mono_ms() >= end) return -ETIMEDOUT;
        signal_procs(dir, SIGKILL);
        sleep_us(200);
    }
}

int sbx_cg_stats(const struct sbx_cgroup *cg, struct sbx_cg_stats *st)
{
    if (cg->root->kind == SBX_CG_V1) {
        st->memory_bytes = read_int(cg->dir[C_MEMORY], "memory.usage_in_bytes");
        st->memory_peak = read_int(cg->dir[C_MEMORY], "memory.max_usage_in_bytes");
        st->pids = read_int(cg->dir[C_PIDS], "pids.current");
        st->oom_kills = read_key(cg->dir[C_MEMORY], "memory.oom_control", "oom_kill");
        int64_t ns = read_int(cg->dir[C_CPUACCT] ? cg->dir[C_CPUACCT] : cg->dir[C_CPU],
                              "cpuacct.usage");
        st->cpu_usage_us = ns < 0 ? -1 : ns / 1000;
    } else {
        st->memory_bytes = read_int(cg->dir[0], "memory.current");
        st->memory_peak = read_int(cg->dir[0], "memory.peak");
        st->pids = read_int(cg->dir[0], "pids.current");
        st->oom_kills = read_key(cg->dir[0], "memory.events", "oom_kill");
        st->cpu_usage_us = read_key(cg->dir[0], "cpu.stat", "usage_usec");
    }
    return 0;
}

int sbx_cg_destroy(struct sbx_cgroup *cg)
{
    if (!cg) return 0;
    sbx_cg_kill(cg, 2000);
    int ret = 0;
    int ndirs = cg->root->kind == SBX_CG_V1 ? C_N : 1;
    for (int c = 0; c < ndirs; c++) {
        int e = cg->dir[c] ? rmdir_retry(cg->dir[c], 1000) : 0;
        if (e < 0 && !ret) ret = e;
    }
    cg_free(cg);
    return ret;
}

int sbx_cg_procs_files(const struct sbx_cgroup *cg, char out[][512], int max)
{
    int ndirs = cg->root->kind == SBX_CG_V1 ? C_N : 1, n = 0;
    for (int c = 0; c < ndirs && n < max; c++)
        if (cg->dir[c] && snprintf(out[n], 512, "%s/cgroup.procs", cg->dir[c]) < 512) n++;
    return n;
}

const char *sbx_cg_path(const struct sbx_cgroup *cg)
{
    return cg->desc;
}
