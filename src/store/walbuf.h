/*
 * walbuf.h - private to src/store: a SQLite VFS that coalesces WAL writes.
 *
 * SQLite writes every WAL frame with two pwrite() calls (24-byte header, page), so a
 * group commit of ~150 dirty pages costs ~300 system calls before its fsync. This VFS
 * wraps the default one and, for WAL files only, gathers contiguous writes in a
 * buffer that goes to the file in one pwrite() before any sync, read, size query,
 * truncation, file control or close, or when a write does not follow on. Every other
 * file is the default VFS's own.
 *
 * Only for connections with synchronous=FULL (or EXTRA): SQLite publishes new frames
 * to other connections after syncing the WAL, and the sync is what empties the
 * buffer. With synchronous=NORMAL a commit does not sync, so readers on other
 * connections could look for frames still in the buffer.
 */
#ifndef REBUNO_STORE_WALBUF_H
#define REBUNO_STORE_WALBUF_H

/* Registers the VFS (once; not as the default) and returns its name for
 * sqlite3_open_v2, or NULL if it could not be registered (use the default VFS). */
const char *walbuf_vfs_name(void);

#endif
