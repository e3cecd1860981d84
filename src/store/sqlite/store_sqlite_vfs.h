/*
 * store_sqlite_vfs.h - the writer connection's VFS: SQLite's default one, except that the WAL
 * frames a transaction writes reach the file in one write instead of two per frame.
 *
 * Every other call goes to the default VFS as it is. Writes to a WAL file are held in the file
 * object while each continues the one before it (SQLite writes a transaction's frames one after
 * the other: each frame's 24-byte header, then its page); they go out in one write once the
 * page of the commit frame (the frame whose header carries the database's size) is held, and
 * before anything else (a write elsewhere, a read, a sync, a size, a truncation, a file control,
 * a memory map, a close) or when SQ_VFS_HOLD_MAX would be passed. SQLite publishes a commit in
 * the wal-index and syncs only after its commit frame is written, and reads a frame only through
 * this file (which writes what it holds first), so no reader, checkpoint or sync misses a held
 * frame; a crash loses held frames as it would lose frames written without a sync: a commit is
 * complete in the file, or not there.
 */
#ifndef CRCR_STORE_SQLITE_VFS_H
#define CRCR_STORE_SQLITE_VFS_H

#include <stddef.h>

/* The length of a WAL frame's header (SQLite's file format, WAL_FRAME_HDRSIZE). */
#define SQ_VFS_FRAME_HEAD 24
/* The most a WAL file holds (held writes go out in one call at the latest then): the unix VFS
 * writes at most 0x1ffff bytes per call (its seekAndWriteFd masks the length: a longer write
 * comes back short, as SQLITE_FULL); 31 frames of 4 KiB pages. Its first allocation, doubled as
 * needed. */
#define SQ_VFS_HOLD_MAX 0x1ffff
#define SQ_VFS_HOLD_FIRST (32 * 1024)

/* The VFS's name for sqlite3_open_v2, registered at the first call; NULL when it cannot be
 * registered (no default VFS, out of memory): open with the default then. Thread-safe. */
const char *sq_vfs_name(void);

#endif
