/*
 * test_store_sqlite_vfs.c - the writer's VFS (store_sqlite_vfs.h): a transaction's WAL frames
 * reach the file in one write, held frames are never lost or read around, and a WAL it wrote,
 * copied as a crash would leave it, recovers every committed row with SQLite's own VFS. Write
 * calls are counted by the kernel (/proc/self/io's syscw: write(2)-family calls of the process;
 * these tests run on one thread).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store_sqlite_vfs.h"

static char g_dir[] = "/tmp/crcr-vfs-XXXXXX";

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(g_dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* The process's write(2)-family calls so far. */
static unsigned long long write_calls(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    assert_non_null(f);
    char line[128];
    unsigned long long n = 0;
    bool found = false;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "syscw:", 6) == 0) {
            char *end = NULL;
            n = strtoull(line + 6, &end, 10);
            found = end != line + 6;
        }
    fclose(f);
    assert_true(found);
    return n;
}

static sqlite3_file *open_file(sqlite3_vfs *vfs, const char *name, int flags)
{
    sqlite3_file *f = calloc(1, (size_t)vfs->szOsFile);
    assert_non_null(f);
    int out = 0;
    assert_int_equal(
        vfs->xOpen(vfs, name, f, flags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &out),
        SQLITE_OK);
    return f;
}

static void close_file(sqlite3_file *f)
{
    assert_int_equal(f->pMethods->xClose(f), SQLITE_OK);
    free(f);
}

/* A frame's header: `commit` non-zero makes it a commit frame's (the database's size after it). */
static void frame_head(unsigned char *h, unsigned char tag, unsigned commit)
{
    memset(h, tag, SQ_VFS_FRAME_HEAD);
    h[4] = (unsigned char)(commit >> 24);
    h[5] = (unsigned char)(commit >> 16);
    h[6] = (unsigned char)(commit >> 8);
    h[7] = (unsigned char)commit;
}

/* The VFS's own calls on a WAL file: a transaction's frames (headers and pages, one after the
 * other) are one write, made when its commit frame's page comes; frames held when something else
 * comes are written first (a read sees them, the size counts them, a sync, a write elsewhere, a
 * close writes them); more than SQ_VFS_HOLD_MAX goes out in parts, every byte in its place. A
 * file that is not a WAL holds nothing. */
static void a_transactions_frames_are_one_write_and_held_frames_are_never_lost(void **state)
{
    (void)state;
    const char *name = sq_vfs_name();
    assert_non_null(name);
    sqlite3_vfs *vfs = sqlite3_vfs_find(name);
    assert_non_null(vfs);
    char path[256];
    snprintf(path, sizeof(path), "%s/a.db", g_dir);
    FILE *db = fopen(path, "wb"); /* the unix VFS looks at a WAL's database (its mode) */
    assert_non_null(db);
    fclose(db);
    snprintf(path, sizeof(path), "%s/a.db-wal", g_dir);
    sqlite3_file *f = open_file(vfs, path, SQLITE_OPEN_WAL);

    enum { FRAME = SQ_VFS_FRAME_HEAD + 4096 };
    unsigned char head[SQ_VFS_FRAME_HEAD], page[4096], back[3 * FRAME];
    unsigned char wal_head[32];
    memset(wal_head, 'w', sizeof(wal_head));
    memset(page, 'p', sizeof(page));
    unsigned long long w0 = write_calls();
    /* the WAL's header, then three frames, the last one a commit */
    assert_int_equal(f->pMethods->xWrite(f, wal_head, 32, 0), SQLITE_OK);
    for (int i = 0; i < 3; i++) {
        frame_head(head, (unsigned char)('a' + i), i == 2 ? 7 : 0);
        page[0] = (unsigned char)('0' + i);
        assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, 32 + i * FRAME),
                         SQLITE_OK);
        assert_int_equal(write_calls() - w0, 0); /* held */
        assert_int_equal(f->pMethods->xWrite(f, page, 4096, 32 + i * FRAME + SQ_VFS_FRAME_HEAD),
                         SQLITE_OK);
        assert_int_equal(write_calls() - w0, i == 2 ? 1 : 0); /* out with the commit frame */
    }
    assert_int_equal(f->pMethods->xRead(f, back, 32, 0), SQLITE_OK);
    assert_memory_equal(back, wal_head, 32);
    assert_int_equal(f->pMethods->xRead(f, back, sizeof(back), 32), SQLITE_OK);
    for (int i = 0; i < 3; i++) {
        frame_head(head, (unsigned char)('a' + i), i == 2 ? 7 : 0);
        assert_memory_equal(back + i * FRAME, head, SQ_VFS_FRAME_HEAD);
        assert_int_equal(back[i * FRAME + SQ_VFS_FRAME_HEAD], '0' + i);
    }
    sqlite3_int64 end = 32 + 3 * FRAME;

    /* frames of a transaction not yet committed, then a sync: written */
    w0 = write_calls();
    frame_head(head, 's', 0);
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    assert_int_equal(f->pMethods->xWrite(f, page, 4096, end + SQ_VFS_FRAME_HEAD), SQLITE_OK);
    assert_int_equal(write_calls() - w0, 0);
    assert_int_equal(f->pMethods->xSync(f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    assert_int_equal(write_calls() - w0, 1);
    end += FRAME;

    /* a transaction larger than what is held at most: in parts, every byte in place */
    int frames = SQ_VFS_HOLD_MAX / FRAME + 3;
    w0 = write_calls();
    for (int i = 0; i < frames; i++) {
        frame_head(head, (unsigned char)('A' + i % 26), i == frames - 1 ? 9 : 0);
        memset(page, 'A' + i % 26, sizeof(page));
        assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end + i * FRAME),
                         SQLITE_OK);
        assert_int_equal(f->pMethods->xWrite(f, page, 4096, end + i * FRAME + SQ_VFS_FRAME_HEAD),
                         SQLITE_OK);
    }
    assert_int_equal(write_calls() - w0, 2);
    for (int i = 0; i < frames; i++) {
        assert_int_equal(f->pMethods->xRead(f, back, FRAME, end + i * FRAME), SQLITE_OK);
        frame_head(head, (unsigned char)('A' + i % 26), i == frames - 1 ? 9 : 0);
        assert_memory_equal(back, head, SQ_VFS_FRAME_HEAD);
        assert_int_equal(back[SQ_VFS_FRAME_HEAD], 'A' + i % 26);
        assert_int_equal(back[FRAME - 1], 'A' + i % 26);
    }
    end += frames * FRAME;
    memset(page, 'p', sizeof(page));
    frame_head(head, 'h', 0);

    /* held, then read: the read sees it */
    head[0] = '1';
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    assert_int_equal(f->pMethods->xRead(f, back, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    assert_memory_equal(back, head, SQ_VFS_FRAME_HEAD);
    /* held, then the size: counted */
    end += SQ_VFS_FRAME_HEAD;
    head[0] = '2';
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    sqlite3_int64 size = 0;
    assert_int_equal(f->pMethods->xFileSize(f, &size), SQLITE_OK);
    assert_int_equal(size, end + SQ_VFS_FRAME_HEAD);
    /* held, then a write somewhere else: both there */
    end += SQ_VFS_FRAME_HEAD;
    head[0] = '3';
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    assert_int_equal(f->pMethods->xWrite(f, page, 100, 0), SQLITE_OK);
    assert_int_equal(f->pMethods->xRead(f, back, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    assert_memory_equal(back, head, SQ_VFS_FRAME_HEAD);
    assert_int_equal(f->pMethods->xRead(f, back, 100, 0), SQLITE_OK);
    assert_memory_equal(back, page, 100);
    /* held, then closed: written */
    end += SQ_VFS_FRAME_HEAD;
    head[0] = '4';
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, end), SQLITE_OK);
    close_file(f);
    FILE *raw = fopen(path, "rb");
    assert_non_null(raw);
    assert_int_equal(fseek(raw, (long)end, SEEK_SET), 0);
    assert_int_equal(fread(back, 1, SQ_VFS_FRAME_HEAD, raw), SQ_VFS_FRAME_HEAD);
    fclose(raw);
    assert_memory_equal(back, head, SQ_VFS_FRAME_HEAD);

    /* not a WAL: a 24-byte write is written at once */
    snprintf(path, sizeof(path), "%s/a.db", g_dir);
    f = open_file(vfs, path, SQLITE_OPEN_MAIN_DB);
    w0 = write_calls();
    assert_int_equal(f->pMethods->xWrite(f, head, SQ_VFS_FRAME_HEAD, 0), SQLITE_OK);
    assert_int_equal(write_calls() - w0, 1);
    close_file(f);
}

static void exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg ? msg : "?");
}

static long long scalar(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    long long v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), a)) > 0)
        assert_int_equal(fwrite(chunk, 1, n, b), n);
    fclose(a);
    assert_int_equal(fclose(b), 0);
}

/* Through SQLite: transactions in WAL mode, no checkpoint, take one write each (and the WAL's
 * own header), not one per frame; the database and its WAL copied while the
 * connection is still open (what a crash leaves) open with SQLite's default VFS with every
 * committed row, intact. */
static void a_wal_it_wrote_recovers_every_committed_row(void **state)
{
    (void)state;
    char path[256], copy[256], from[300], to[300];
    snprintf(path, sizeof(path), "%s/b.db", g_dir);
    snprintf(copy, sizeof(copy), "%s/copy.db", g_dir);
    sqlite3 *db = NULL;
    assert_int_equal(
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, sq_vfs_name()),
        SQLITE_OK);
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0;"
             "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL);");
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"); /* an empty WAL to count from */
    unsigned long long w0 = write_calls();
    for (int i = 0; i < 40; i++) {
        char sql[160];
        snprintf(sql, sizeof(sql),
                 "BEGIN; INSERT INTO t(v) VALUES (randomblob(%d)); INSERT INTO t(v) VALUES "
                 "(zeroblob(%d)); COMMIT;",
                 100 + 97 * i, 3000 + i);
        exec(db, sql);
    }
    unsigned long long writes = write_calls() - w0;
    long long frames = 0;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(PASSIVE)", -1, &q, NULL),
                     SQLITE_OK);
    /* (busy, frames in the WAL, frames checkpointed): this checkpoint copies them too, but the
     * WAL file itself stays as it was written */
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    frames = sqlite3_column_int64(q, 1);
    sqlite3_finalize(q);
    assert_true(frames >= 80);
    assert_true(writes <= 40 + 1); /* a commit each (157 frames); the WAL's header may be one */

    /* more commits after the checkpoint, then the files as a crash would leave them */
    exec(db, "BEGIN; INSERT INTO t(v) VALUES (randomblob(5000)); COMMIT;");
    exec(db, "BEGIN; INSERT INTO t(v) VALUES (randomblob(10)); COMMIT;");
    long long rows = scalar(db, "SELECT count(*) FROM t");
    assert_int_equal(rows, 82);
    long long sum = scalar(db, "SELECT sum(length(v)) FROM t");
    copy_file(path, copy);
    snprintf(from, sizeof(from), "%s-wal", path);
    snprintf(to, sizeof(to), "%s-wal", copy);
    copy_file(from, to);

    sqlite3 *c = NULL;
    assert_int_equal(sqlite3_open_v2(copy, &c, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(scalar(c, "SELECT count(*) FROM t"), rows);
    assert_int_equal(scalar(c, "SELECT sum(length(v)) FROM t"), sum);
    sqlite3_stmt *ic = NULL;
    assert_int_equal(sqlite3_prepare_v2(c, "PRAGMA integrity_check", -1, &ic, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(ic), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(ic, 0), "ok");
    sqlite3_finalize(ic);
    sqlite3_close(c);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_transactions_frames_are_one_write_and_held_frames_are_never_lost),
        cmocka_unit_test(a_wal_it_wrote_recovers_every_committed_row),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
