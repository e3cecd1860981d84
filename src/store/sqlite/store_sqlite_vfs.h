/*
 * store_sqlite_vfs.h - the writer connection's VFS: SQLite's default one, except that a WAL
 * frame's 24-byte header and the page after it reach the file in one write instead of two.
 *
 * Every other call goes to the default VFS as it is. A header write is held in the file object
 * until the next call on that file: the write of the page right after it joins it (one pwrite of
 * header and page), anything else (another write, a read, a sync, a size, a truncation, a file
 * control, a memory map, a close) writes it out first. SQLite writes a frame's header and then
 * its page (walWriteOneFrame), and reads, syncs and publishes frames (the wal-index) only after
 * the page, so no reader, checkpoint or sync ever misses a held header, and a crash between the
 * two loses the frame as it would have lost it half-written.
 */
#ifndef CRCR_STORE_SQLITE_VFS_H
#define CRCR_STORE_SQLITE_VFS_H

#include <stddef.h>

/* The length of a WAL frame's header (SQLite's file format, WAL_FRAME_HDRSIZE). */
#define SQ_VFS_FRAME_HEAD 24
/* The largest page joined to its header (SQLite's largest page size); a larger write goes as it
 * is, after the header. */
#define SQ_VFS_JOIN_MAX 65536

/* The VFS's name for sqlite3_open_v2, registered at the first call; NULL when it cannot be
 * registered (no default VFS, out of memory): open with the default then. Thread-safe. */
const char *sq_vfs_name(void);

#endif
