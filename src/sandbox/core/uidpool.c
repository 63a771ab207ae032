/*
 * uidpool.c - host-wide ownership of sandbox uid ranges in one SQLite table (uidpool.h).
 *
 * Ranges are rows (first host uid, owning state folder). Two ranges overlap when their
 * firsts are less than SBX_IDMAP_COUNT apart; a daemon only ever reserves a slot whose
 * range overlaps no row, so daemons with different --uid-base values stay apart too.
 * Every change runs in one BEGIN IMMEDIATE transaction (SQLite's write lock is the
 * host-wide lock; busy_timeout waits for another daemon's), committed with the default
 * rollback journal and synchronous=FULL, so a range is on disk before a sandbox uses it.
 */
#include "sandbox/core/uidpool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "sandbox/runtime/idmap.h"

struct sbx_uidpool {
    sqlite3 *db;
    char *owner;
    uint32_t first;
    int64_t max_slot;
    uint32_t *mine; /* slots this folder owns, ascending */
    size_t nmine;
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS uid_ranges("
    " first INTEGER NOT NULL," /* first host uid and gid of SBX_IDMAP_COUNT */
    " owner TEXT NOT NULL,"    /* the state folder, absolute */
    " PRIMARY KEY (first, owner)) STRICT";

static int exec(struct sbx_uidpool *p, const char *sql)
{
    return sqlite3_exec(p->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

/* Run sql with ?1 = text, ?2 = integer; for each row, fn(column 0 as text or integer). */
static int query(struct sbx_uidpool *p, const char *sql, const char *text, int64_t num,
                 void (*fn)(sqlite3_stmt *q, void *arg), void *arg)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(p->db, sql, -1, &q, NULL) != SQLITE_OK) return -EIO;
    if (text) sqlite3_bind_text(q, 1, text, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, num);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        if (fn) fn(q, arg);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

static void add_mine(struct sbx_uidpool *p, uint32_t slot)
{
    p->mine = xrealloc(p->mine, (p->nmine + 1) * sizeof *p->mine);
    size_t i = p->nmine++;
    for (; i > 0 && p->mine[i - 1] > slot; i--) /* keep it sorted */
        p->mine[i] = p->mine[i - 1];
    p->mine[i] = slot;
}

static int64_t base_of(const struct sbx_uidpool *p, uint32_t slot)
{
    return (int64_t)p->first + (int64_t)slot * SBX_IDMAP_COUNT;
}

/* ------------------------------------------------------------------ housekeeping */

struct names {
    char **v;
    size_t n;
};

static void collect_gone(sqlite3_stmt *q, void *arg)
{
    struct names *g = arg;
    const char *owner = (const char *)sqlite3_column_text(q, 0);
    char db[PATH_MAX];
    struct stat st;
    if (!owner || snprintf(db, sizeof db, "%s/sandboxd.db", owner) >= (int)sizeof db) return;
    if (stat(db, &st) == 0 || errno != ENOENT) return; /* there, or cannot tell: kept */
    g->v = xrealloc(g->v, (g->n + 1) * sizeof *g->v);
    g->v[g->n++] = xstrdup(owner);
}

/* Ranges of state folders that are gone go back to everyone. */
static int give_back_gone(struct sbx_uidpool *p)
{
    struct names g = {0};
    int e = query(p, "SELECT DISTINCT owner FROM uid_ranges WHERE owner != ?1", p->owner, 0,
                  collect_gone, &g);
    for (size_t i = 0; i < g.n; i++) {
        if (!e) e = query(p, "DELETE FROM uid_ranges WHERE owner = ?1", g.v[i], 0, NULL, NULL);
        free(g.v[i]);
    }
    free(g.v);
    return e;
}

struct firsts {
    int64_t *v;
    size_t n;
};

static void collect_first(sqlite3_stmt *q, void *arg)
{
    struct firsts *f = arg;
    f->v = xrealloc(f->v, (f->n + 1) * sizeof *f->v);
    f->v[f->n++] = sqlite3_column_int64(q, 0);
}

/* Whether [base, base + COUNT) meets a range of the sorted firsts. */
static bool overlaps(const struct firsts *f, int64_t base)
{
    size_t lo = 0, hi = f->n; /* the first first > base - COUNT */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->v[mid] > base - (int64_t)SBX_IDMAP_COUNT)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < f->n && f->v[lo] < base + (int64_t)SBX_IDMAP_COUNT;
}

/* Reserve up to want slots that overlap no recorded range, into got (added to mine once
 * the transaction commits). 0 or -errno. */
static int reserve(struct sbx_uidpool *p, int want, struct firsts *got)
{
    struct firsts f = {0};
    int e = query(p, "SELECT first FROM uid_ranges ORDER BY first", NULL, 0, collect_first, &f);
    for (int64_t slot = 0; !e && (int)got->n < want && slot <= p->max_slot; slot++) {
        int64_t base = base_of(p, (uint32_t)slot);
        if (overlaps(&f, base)) continue;
        e = query(p, "INSERT INTO uid_ranges(owner, first) VALUES(?1, ?2)", p->owner, base, NULL,
                  NULL);
        if (!e) {
            got->v = xrealloc(got->v, (got->n + 1) * sizeof *got->v);
            got->v[got->n++] = slot;
        }
    }
    free(f.v);
    return e;
}

/* COMMIT, then the reserved slots are ours; or ROLLBACK and they are not. */
static int finish(struct sbx_uidpool *p, int e, struct firsts *got)
{
    if (!e) e = exec(p, "COMMIT");
    if (e) exec(p, "ROLLBACK");
    for (size_t i = 0; !e && i < got->n; i++)
        add_mine(p, (uint32_t)got->v[i]);
    free(got->v);
    got->v = NULL;
    got->n = 0;
    return e;
}

static void first_owner(sqlite3_stmt *q, void *arg)
{
    snprintf(arg, PATH_MAX, "%s", (const char *)sqlite3_column_text(q, 0));
}

/* Record the slots our sandboxes use; warn about one another folder holds too. */
static int record_used(struct sbx_uidpool *p, const uint32_t *used, size_t n)
{
    int e = 0;
    for (size_t i = 0; !e && i < n; i++) {
        int64_t base = base_of(p, used[i]);
        char other[PATH_MAX] = "";
        e = query(p,
                  "SELECT owner FROM uid_ranges WHERE owner != ?1 AND first > ?2 - 65536 AND "
                  "first < ?2 + 65536 LIMIT 1",
                  p->owner, base, first_owner, other);
        if (!e && other[0])
            log_warn("a sandbox's uid range is also another state folder's; both keep it (their "
                     "files are owned by it)",
                     "slot=%u uid_base=%lld other=%s", used[i], (long long)base, other);
        if (!e)
            e = query(p, "INSERT OR IGNORE INTO uid_ranges(owner, first) VALUES(?1, ?2)", p->owner,
                      base, NULL, NULL);
        if (!e) add_mine(p, used[i]);
    }
    return e;
}

/* ------------------------------------------------------------------ the pool */

int sbx_uidpool_open(const char *path, const char *state_dir, uint32_t first, int64_t max_slot,
                     const uint32_t *used, size_t nused, struct sbx_uidpool **out,
                     struct err *err)
{
    *out = NULL;
    if (!path) path = SBX_UIDPOOL_PATH;
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        mkdir(dir, 0700);
    }
    free(dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return err_internal(err, "cannot open the host's uid range table %s: %s", path,
                            strerror(errno));
    close(fd);
    struct sbx_uidpool *p = xcalloc(1, sizeof *p);
    p->owner = xstrdup(state_dir);
    p->first = first;
    p->max_slot = max_slot;
    if (sqlite3_open_v2(path, &p->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(p->db, 10000) != SQLITE_OK || exec(p, schema) < 0)
        goto fail;
    if (exec(p, "BEGIN IMMEDIATE") < 0) goto fail;
    /* ours: exactly what our sandboxes use, then a fresh reserve */
    struct firsts got = {0};
    int e = give_back_gone(p);
    if (!e) e = query(p, "DELETE FROM uid_ranges WHERE owner = ?1", p->owner, 0, NULL, NULL);
    if (!e) e = record_used(p, used, nused);
    if (!e) e = reserve(p, SBX_UIDPOOL_BATCH, &got);
    if (finish(p, e, &got) < 0) goto fail;
    *out = p;
    return 0;
fail:
    err_internal(err, "cannot use the host's uid range table %s: %s", path,
                 p->db ? sqlite3_errmsg(p->db) : "out of memory");
    sbx_uidpool_close(p);
    return -1;
}

int sbx_uidpool_take(struct sbx_uidpool *p, bool (*in_use)(uint32_t slot, void *arg), void *arg,
                     uint32_t *slot)
{
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < p->nmine; i++)
            if (!in_use(p->mine[i], arg)) {
                *slot = p->mine[i];
                return 0;
            }
        if (round) break;
        if (exec(p, "BEGIN IMMEDIATE") < 0) return -EIO;
        struct firsts got = {0};
        int e = give_back_gone(p);
        if (!e) e = reserve(p, SBX_UIDPOOL_BATCH, &got);
        size_t n = got.n;
        if (finish(p, e, &got) < 0) return -EIO;
        if (n == 0) return -ENOSPC;
    }
    return -ENOSPC;
}

void sbx_uidpool_close(struct sbx_uidpool *p)
{
    if (!p) return;
    sqlite3_close(p->db);
    free(p->mine);
    free(p->owner);
    free(p);
}
