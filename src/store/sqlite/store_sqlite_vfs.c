/*
 * store_sqlite_vfs.c - the writer connection's VFS; see store_sqlite_vfs.h.
 *
 * Why: SQLite's unix VFS writes each WAL frame as two pwrite(2)s, its 24-byte header and its
 * page, and the WAL takes most of the store's writes. In the App-mode ingest (bench, c64, 4
 * targets) that was 15-16 pwrite calls per webhook of ~52 system calls, on a host where each
 * system call costs several microseconds (a paravirtualised guest: 18-21 % of the relay's
 * samples were the kernel's interrupt enabling around them). A frame joined into one call made
 * it 9.2-10 per webhook; a transaction's frames in one call, fewer still (bench/RESULTS.md).
 *
 * Why hand-written: SQLite has no option for it (its write coalescing, SQLITE_IOCAP_BATCH_ATOMIC,
 * is for F2FS's atomic batches and not for the WAL) and no packaged shim does it. A VFS over
 * the default one is SQLite's documented way to change how files are written (sqlite.org/vfs.html);
 * this one forwards everything and holds the WAL's writes until the transaction's last frame.
 */
#include "store_sqlite_vfs.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include <sqlite3.h>

#define SQ_VFS_NAME "crcr-wal"

/* A file of this VFS: ours, then (at `real`) the default VFS's file of szOsFile bytes. */
typedef struct vfile {
    sqlite3_file base; /* pMethods: &vfile_io */
    sqlite3_file *real;
    bool wal;              /* a WAL file: its writes are held (see store_sqlite_vfs.h) */
    bool commit_next;      /* the last held write was a commit frame's header: its page ends
                              the transaction's frames */
    sqlite3_int64 held_at; /* the file offset of held[0] */
    size_t held_len;       /* bytes held; 0: none */
    size_t held_cap;
    unsigned char *held; /* sqlite3_malloc'd at the first hold, grown, freed at close */
} vfile;

static sqlite3_vfs g_vfs;
static sqlite3_vfs *g_real;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;

/* The file's real part, after ours (aligned for any type). */
static size_t head_size(void)
{
    size_t a = sizeof(sqlite3_int64) > sizeof(void *) ? sizeof(sqlite3_int64) : sizeof(void *);
    return (sizeof(vfile) + a - 1) / a * a;
}

/* Writes what is held out, in one call. */
static int flush(vfile *f)
{
    if (f->held_len == 0)
        return SQLITE_OK;
    size_t len = f->held_len;
    f->held_len = 0;
    f->commit_next = false;
    return f->real->pMethods->xWrite(f->real, f->held, (int)len, f->held_at);
}

/* Holds `amt` bytes written at `ofst` after what is held (they continue it); false when they do
 * not (another offset, SQ_VFS_HOLD_MAX passed, no memory): the caller writes them. */
static bool hold(vfile *f, const void *data, int amt, sqlite3_int64 ofst)
{
    if (amt <= 0 || (f->held_len > 0 && ofst != f->held_at + (sqlite3_int64)f->held_len))
        return false;
    size_t need = f->held_len + (size_t)amt;
    if (need > SQ_VFS_HOLD_MAX)
        return false;
    if (need > f->held_cap) {
        size_t cap = f->held_cap ? f->held_cap : SQ_VFS_HOLD_FIRST;
        while (cap < need)
            cap *= 2;
        if (cap > SQ_VFS_HOLD_MAX)
            cap = SQ_VFS_HOLD_MAX;
        unsigned char *p = sqlite3_realloc64(f->held, cap);
        if (!p)
            return false;
        f->held = p;
        f->held_cap = cap;
    }
    if (f->held_len == 0)
        f->held_at = ofst;
    memcpy(f->held + f->held_len, data, (size_t)amt);
    f->held_len = need;
    return true;
}

/* ---------------------------------------------------------------- the file's methods */

static int v_close(sqlite3_file *file)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    int rc2 = f->real->pMethods ? f->real->pMethods->xClose(f->real) : SQLITE_OK;
    sqlite3_free(f->held);
    f->held = NULL;
    f->held_cap = 0;
    return rc != SQLITE_OK ? rc : rc2;
}

static int v_read(sqlite3_file *file, void *out, int amt, sqlite3_int64 ofst)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xRead(f->real, out, amt, ofst);
}

/* A frame's header: its second field (big-endian) is the database's size in pages after a
 * commit, 0 in the other frames of a transaction (SQLite's WAL format). */
static bool commit_header(const void *data, int amt)
{
    const unsigned char *h = data;
    return amt == SQ_VFS_FRAME_HEAD && (h[4] | h[5] | h[6] | h[7]) != 0;
}

static int v_write(sqlite3_file *file, const void *data, int amt, sqlite3_int64 ofst)
{
    vfile *f = (vfile *)file;
    if (!f->wal)
        return f->real->pMethods->xWrite(f->real, data, amt, ofst);
    bool page_of_commit = f->commit_next && amt != SQ_VFS_FRAME_HEAD;
    if (!hold(f, data, amt, ofst)) {
        int rc = flush(f);
        if (rc != SQLITE_OK)
            return rc;
        if (!hold(f, data, amt, ofst))
            return f->real->pMethods->xWrite(f->real, data, amt, ofst);
    }
    f->commit_next = commit_header(data, amt);
    /* The commit frame is whole: the transaction's frames go out before SQLite publishes it. */
    return page_of_commit ? flush(f) : SQLITE_OK;
}

static int v_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static int v_sync(sqlite3_file *file, int flags)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xSync(f->real, flags);
}

static int v_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFileSize(f->real, size);
}

static int v_lock(sqlite3_file *file, int level)
{
    vfile *f = (vfile *)file;
    return f->real->pMethods->xLock(f->real, level);
}

static int v_unlock(sqlite3_file *file, int level)
{
    vfile *f = (vfile *)file;
    return f->real->pMethods->xUnlock(f->real, level);
}

static int v_check_reserved(sqlite3_file *file, int *out)
{
    vfile *f = (vfile *)file;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int v_file_control(sqlite3_file *file, int op, void *arg)
{
    vfile *f = (vfile *)file;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFileControl(f->real, op, arg);
}

static int v_sector_size(sqlite3_file *file)
{
    vfile *f = (vfile *)file;
    return f->real->pMethods->xSectorSize(f->real);
}

static int v_device_characteristics(sqlite3_file *file)
{
    vfile *f = (vfile *)file;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int v_shm_map(sqlite3_file *file, int pg, int pgsz, int extend, void volatile **out)
{
    vfile *f = (vfile *)file;
    if (f->real->pMethods->iVersion < 2 || !f->real->pMethods->xShmMap)
        return SQLITE_IOERR_SHMMAP;
    return f->real->pMethods->xShmMap(f->real, pg, pgsz, extend, out);
}

static int v_shm_lock(sqlite3_file *file, int offset, int n, int flags)
{
    vfile *f = (vfile *)file;
    if (f->real->pMethods->iVersion < 2 || !f->real->pMethods->xShmLock)
        return SQLITE_IOERR_SHMLOCK;
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void v_shm_barrier(sqlite3_file *file)
{
    vfile *f = (vfile *)file;
    if (f->real->pMethods->iVersion >= 2 && f->real->pMethods->xShmBarrier)
        f->real->pMethods->xShmBarrier(f->real);
}

static int v_shm_unmap(sqlite3_file *file, int delete_flag)
{
    vfile *f = (vfile *)file;
    if (f->real->pMethods->iVersion < 2 || !f->real->pMethods->xShmUnmap)
        return SQLITE_OK;
    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

static int v_fetch(sqlite3_file *file, sqlite3_int64 ofst, int amt, void **out)
{
    vfile *f = (vfile *)file;
    *out = NULL;
    int rc = flush(f);
    if (rc != SQLITE_OK || f->real->pMethods->iVersion < 3 || !f->real->pMethods->xFetch)
        return rc; /* no mapping: SQLite reads instead */
    return f->real->pMethods->xFetch(f->real, ofst, amt, out);
}

static int v_unfetch(sqlite3_file *file, sqlite3_int64 ofst, void *p)
{
    vfile *f = (vfile *)file;
    if (f->real->pMethods->iVersion < 3 || !f->real->pMethods->xUnfetch)
        return SQLITE_OK;
    return f->real->pMethods->xUnfetch(f->real, ofst, p);
}

static const sqlite3_io_methods vfile_io = {
    3,
    v_close,
    v_read,
    v_write,
    v_truncate,
    v_sync,
    v_file_size,
    v_lock,
    v_unlock,
    v_check_reserved,
    v_file_control,
    v_sector_size,
    v_device_characteristics,
    v_shm_map,
    v_shm_lock,
    v_shm_barrier,
    v_shm_unmap,
    v_fetch,
    v_unfetch,
};

/* ---------------------------------------------------------------- the VFS */

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags)
{
    (void)vfs;
    vfile *f = (vfile *)file;
    memset(f, 0, sizeof(*f));
    f->real = (sqlite3_file *)((char *)file + head_size());
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = g_real->xOpen(g_real, name, f->real, flags, out_flags);
    /* pMethods set only when the real file is open: SQLite then closes it (v_close) */
    f->base.pMethods = f->real->pMethods ? &vfile_io : NULL;
    return rc;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return g_real->xDelete(g_real, name, sync_dir);
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return g_real->xAccess(g_real, name, flags, out);
}

static int v_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return g_real->xFullPathname(g_real, name, n, out);
}

static void *v_dl_open(sqlite3_vfs *vfs, const char *name)
{
    (void)vfs;
    return g_real->xDlOpen(g_real, name);
}

static void v_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    g_real->xDlError(g_real, n, out);
}

static void (*v_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    (void)vfs;
    return g_real->xDlSym(g_real, h, sym);
}

static void v_dl_close(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    g_real->xDlClose(g_real, h);
}

static int v_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return g_real->xRandomness(g_real, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return g_real->xSleep(g_real, us);
}

static int v_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return g_real->xCurrentTime(g_real, out);
}

static int v_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return g_real->xGetLastError ? g_real->xGetLastError(g_real, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return g_real->xCurrentTimeInt64(g_real, out);
}

static void register_once(void)
{
    g_real = sqlite3_vfs_find(NULL);
    if (!g_real || g_real->iVersion < 2 || !g_real->xCurrentTimeInt64)
        return;
    g_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)head_size() + g_real->szOsFile,
        .mxPathname = g_real->mxPathname,
        .zName = SQ_VFS_NAME,
        .xOpen = v_open,
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
    g_ok = sqlite3_vfs_register(&g_vfs, 0) == SQLITE_OK;
}

const char *sq_vfs_name(void)
{
    pthread_once(&g_once, register_once);
    return g_ok ? SQ_VFS_NAME : NULL;
}
