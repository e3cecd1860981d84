/*
 * store_sqlite_backup.c - store_backup for a SQLite file: SQLite's online backup API copies the
 * store into a new file (0600, never over an existing one) in one read transaction, safe while
 * `crcr serve` writes it; the copy is sealed as a single file (rollback journal) and checked with
 * PRAGMA quick_check. Nothing here goes through an open store: the source is opened as it is,
 * without migrating anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "store_sqlite.h"

/* Attempts of a backup that finds the store busy, and the pause between them. */
#define SQ_BACKUP_TRIES 100
#define SQ_BACKUP_PAUSE_MS 100

/* Runs `sql` on db; false with SQLite's message in err. */
static bool backup_exec(sqlite3 *db, const char *sql, const char *what, char *err, size_t errsz)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
        return true;
    snprintf(err, errsz, "%s: %s", what, sqlite3_errmsg(db));
    return false;
}

/* Copies every page of src into dst in one step (one read transaction on src: a consistent
 * snapshot, and WAL lets `crcr serve` go on writing meanwhile), retrying while src is locked. */
static bool backup_copy(sqlite3 *src, sqlite3 *dst, char *err, size_t errsz)
{
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (!b) {
        snprintf(err, errsz, "cannot start the backup: %s", sqlite3_errmsg(dst));
        return false;
    }
    int rc = SQLITE_OK;
    for (int i = 0; i < SQ_BACKUP_TRIES; i++) {
        rc = sqlite3_backup_step(b, -1);
        if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED)
            break;
        sqlite3_sleep(SQ_BACKUP_PAUSE_MS);
    }
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        snprintf(err, errsz, "backup: %s", sqlite3_errstr(rc));
        return false;
    }
    if (sqlite3_errcode(dst) != SQLITE_OK) {
        snprintf(err, errsz, "backup: %s", sqlite3_errmsg(dst));
        return false;
    }
    return true;
}

/* The copy as a standalone file (rollback journal: no -wal beside it), checked, and its schema
 * version in *version. */
static bool backup_seal(sqlite3 *dst, int *version, char *err, size_t errsz)
{
    if (!backup_exec(dst, "PRAGMA journal_mode=DELETE", "the copy's journal mode", err, errsz))
        return false;
    sqlite3_stmt *q = NULL;
    bool ok = false;
    if (sqlite3_prepare_v2(dst, "PRAGMA quick_check", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        const char *res = (const char *)sqlite3_column_text(q, 0);
        ok = res && strcmp(res, "ok") == 0;
        snprintf(err, errsz, "the copy fails PRAGMA quick_check: %s", res ? res : "?");
    } else {
        snprintf(err, errsz, "the copy cannot be checked: %s", sqlite3_errmsg(dst));
    }
    sqlite3_finalize(q);
    if (!ok)
        return false;
    err[0] = '\0';
    int v = sq_schema_version(dst);
    if (v >= 0)
        *version = v;
    return true;
}

crcr_err store_sqlite_backup(const char *path, const char *dest, int *version, char *err,
                             size_t errsz)
{
    struct stat sb;
    if (!*path || stat(path, &sb) != 0) {
        snprintf(err, errsz, "no store at %s: %s", *path ? path : "(empty path)",
                 *path ? strerror(errno) : "CRCR_STORE names no file");
        return CRCR_E_NOT_FOUND;
    }
    int fd = open(dest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int saved = errno;
        snprintf(err, errsz, "%s: %s%s", dest, strerror(saved),
                 saved == EEXIST ? " (a backup never overwrites a file: name a new one)" : "");
        return saved == EEXIST ? CRCR_E_DUPLICATE : CRCR_E_IO;
    }
    fchmod(fd, 0600); /* whatever the umask */
    close(fd);

    sqlite3 *src = NULL, *dst = NULL;
    bool ok = false;
    if (sqlite3_open_v2(path, &src, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "cannot open %s: %s", path,
                 src ? sqlite3_errmsg(src) : "out of memory");
    } else if (sqlite3_open_v2(dest, &dst, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        snprintf(err, errsz, "cannot open %s: %s", dest,
                 dst ? sqlite3_errmsg(dst) : "out of memory");
    } else {
        sqlite3_busy_timeout(src, 5000);
        ok = backup_exec(src, "PRAGMA query_only=1", "the store", err, errsz) &&
             backup_copy(src, dst, err, errsz) && backup_seal(dst, version, err, errsz);
    }
    sqlite3_close(src);
    if (sqlite3_close(dst) != SQLITE_OK && ok) {
        snprintf(err, errsz, "%s: cannot close the copy", dest);
        ok = false;
    }
    if (!ok) {
        unlink(dest);
        return CRCR_E_STORE;
    }
    return CRCR_OK;
}
