/*
 * walbuf.c - a SQLite VFS that coalesces WAL writes (see walbuf.h).
 *
 * A shim over the default VFS: xOpen opens the real file in the memory SQLite gives
 * us; for a WAL file that memory also holds our wrapper (struct wfile) in front, and
 * the wrapper's methods forward to the real file's after emptying the buffer where
 * ordering matters. The buffer holds one contiguous run [off, off + len) of pending
 * bytes; a write inside it (SQLite rewrites a frame it wrote earlier in the same
 * transaction) is applied to the buffer, any other write that does not extend it
 * empties it first. A failed flush is reported by the call that caused it (a sync
 * during COMMIT fails the commit), never silently dropped.
 */
#include "store/walbuf.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define WALBUF_MAX (4 * 1024 * 1024) /* larger writes and runs go straight to the file */

struct wfile {
    sqlite3_file base; /* base.pMethods = &wal_methods */
    sqlite3_file *real;
    char *buf;
    size_t len, cap;
    sqlite3_int64 off;
};

static sqlite3_vfs walbuf_vfs;
static sqlite3_vfs *parent;

/* The unix VFS masks a write's length with 0x1ffff (a 128 KiB write would become 0
 * bytes and fail as SQLITE_FULL), so hand it pieces below that. */
#define WRITE_PIECE (128 * 1024 - 4096)

static int write_pieces(struct wfile *f, const char *data, size_t len, sqlite3_int64 off)
{
    while (len > 0) {
        int n = len > WRITE_PIECE ? WRITE_PIECE : (int)len;
        int rc = f->real->pMethods->xWrite(f->real, data, n, off);
        if (rc != SQLITE_OK) return rc;
        data += n;
        len -= (size_t)n;
        off += n;
    }
    return SQLITE_OK;
}

static int flush(struct wfile *f)
{
    if (f->len == 0) return SQLITE_OK;
    int rc = write_pieces(f, f->buf, f->len, f->off);
    f->len = 0;
    return rc;
}

static int w_close(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    int rc2 = f->real->pMethods->xClose(f->real);
    free(f->buf);
    f->buf = NULL;
    f->cap = 0;
    return rc != SQLITE_OK ? rc : rc2;
}

static int w_read(sqlite3_file *p, void *out, int n, sqlite3_int64 off)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    if (rc != SQLITE_OK) return rc;
    return f->real->pMethods->xRead(f->real, out, n, off);
}

static int w_write(sqlite3_file *p, const void *data, int n, sqlite3_int64 off)
{
    struct wfile *f = (struct wfile *)p;
    size_t len = (size_t)n;
    if (f->len && off >= f->off && off + n <= f->off + (sqlite3_int64)f->len) {
        memcpy(f->buf + (off - f->off), data, len); /* a rewrite of pending bytes */
        return SQLITE_OK;
    }
    if (f->len && off == f->off + (sqlite3_int64)f->len && f->len + len <= WALBUF_MAX) {
        /* follows on */
    } else {
        int rc = flush(f);
        if (rc != SQLITE_OK) return rc;
        if (len >= WALBUF_MAX) return write_pieces(f, data, len, off);
        f->off = off;
    }
    if (f->len + len > f->cap) {
        size_t cap = f->cap ? f->cap : 64 * 1024;
        while (cap < f->len + len) cap *= 2;
        f->buf = xrealloc(f->buf, cap);
        f->cap = cap;
    }
    memcpy(f->buf + f->len, data, len);
    f->len += len;
    return SQLITE_OK;
}

static int w_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static int w_sync(sqlite3_file *p, int flags)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xSync(f->real, flags);
}

static int w_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFileSize(f->real, size);
}

static int w_lock(sqlite3_file *p, int level)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xLock(f->real, level);
}

static int w_unlock(sqlite3_file *p, int level)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xUnlock(f->real, level);
}

static int w_check_reserved(sqlite3_file *p, int *out)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int w_file_control(sqlite3_file *p, int op, void *arg)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    if (rc != SQLITE_OK) return rc;
    if (op == SQLITE_FCNTL_VFSNAME) {
        *(char **)arg = sqlite3_mprintf("%s", walbuf_vfs.zName);
        return SQLITE_OK;
    }
    return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int w_sector_size(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xSectorSize(f->real);
}

static int w_device_characteristics(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

/* Version 1: a WAL file is never memory-mapped and has no shared memory of its own. */
static const sqlite3_io_methods wal_methods = {
    .iVersion = 1,
    .xClose = w_close,
    .xRead = w_read,
    .xWrite = w_write,
    .xTruncate = w_truncate,
    .xSync = w_sync,
    .xFileSize = w_file_size,
    .xLock = w_lock,
    .xUnlock = w_unlock,
    .xCheckReservedLock = w_check_reserved,
    .xFileControl = w_file_control,
    .xSectorSize = w_sector_size,
    .xDeviceCharacteristics = w_device_characteristics,
};

static int w_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *p, int flags, int *out_flags)
{
    if (!(flags & SQLITE_OPEN_WAL)) return parent->xOpen(parent, name, p, flags, out_flags);
    struct wfile *f = (struct wfile *)p;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)(f + 1);
    int rc = parent->xOpen(parent, name, f->real, flags, out_flags);
    /* On failure the real file's pMethods may be set, and SQLite would call our
     * xClose only if ours were: leave ours NULL and close the real one here. */
    if (rc != SQLITE_OK) {
        if (f->real->pMethods) f->real->pMethods->xClose(f->real);
        return rc;
    }
    f->base.pMethods = &wal_methods;
    return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    return parent->xDelete(parent, name, sync_dir);
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    return parent->xAccess(parent, name, flags, out);
}

static int v_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    return parent->xFullPathname(parent, name, n, out);
}

static void *v_dl_open(sqlite3_vfs *vfs, const char *name)
{
    return parent->xDlOpen(parent, name);
}

static void v_dl_error(sqlite3_vfs *vfs, int n, char *msg)
{
    parent->xDlError(parent, n, msg);
}

static void (*v_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    return parent->xDlSym(parent, h, sym);
}

static void v_dl_close(sqlite3_vfs *vfs, void *h)
{
    parent->xDlClose(parent, h);
}

static int v_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    return parent->xRandomness(parent, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us)
{
    return parent->xSleep(parent, us);
}

static int v_current_time(sqlite3_vfs *vfs, double *out)
{
    return parent->xCurrentTime(parent, out);
}

static int v_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    return parent->xGetLastError ? parent->xGetLastError(parent, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    return parent->xCurrentTimeInt64(parent, out);
}

static int registered = SQLITE_ERROR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void do_register(void)
{
    /* Before SQLite initialises (sqlite3_vfs_find does): without memory statistics
     * every SQLite allocation skips a global mutex. Nothing here reads them. A no-op
     * (SQLITE_MISUSE) if SQLite is already initialised. */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    parent = sqlite3_vfs_find(NULL);
    if (!parent || parent->iVersion < 2 || !parent->xCurrentTimeInt64) return;
    walbuf_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct wfile) + parent->szOsFile,
        .mxPathname = parent->mxPathname,
        .zName = "rebuno-walbuf",
        .xOpen = w_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_full_pathname,
        .xDlOpen = v_dl_open,
        .xDlError = v_dl_error,
        .xDlSym = v_dl_sym,
        .xDlClose = v_dl_close,
        .xRandomness = v_randomness,
        .xSleep = v_sleep,
        .xCurrentTime = v_current_time,
        .xGetLastError = v_get_last_error,
        .xCurrentTimeInt64 = v_current_time_int64,
    };
    registered = sqlite3_vfs_register(&walbuf_vfs, 0);
}

const char *walbuf_vfs_name(void)
{
    pthread_once(&once, do_register);
    return registered == SQLITE_OK ? walbuf_vfs.zName : NULL;
}
