/*
 * store_sqlite.c - the embedded SQLite store (WAL): open, schema, connections, statements, the
 * group commit and recovery. The operations live in store_sqlite_outbox.c and store_sqlite_runs.c,
 * the backup in store_sqlite_backup.c; what they share is in store_sqlite.h.
 *
 * One connection guarded by one mutex: SQLite allows a single writer at a time anyway, and every
 * operation here is a short indexed statement, so serialising them costs less than the
 * busy-retry dance of several connections. The transactions whose commit an answer promises (a
 * webhook's 202, a callback's 200) are on disk before the answer, so they survive a power loss:
 * the group commit syncs the WAL after each such commit (see sq_group_commit); the
 * outbox bookkeeping (claims, retries, sent marks) runs with synchronous=NORMAL, which in WAL mode
 * survives a crash of the process and, after a power loss, can only roll back to an earlier state
 * of a row: the row is then sent again (at least once), never lost. Measured on the 2-core VM:
 * one fsync per outbox transition was most of the ingest and fan-out time (bench/RESULTS.md). The
 * store belongs to one process: rows left `running` by a crashed predecessor are re-queued at open
 * instead of waiting for their lease. That is only safe while no other `crcr serve` uses the file,
 * so sq_recover first takes an exclusive flock(2) on a side file "<db>-serve.lock", held until
 * close (the kernel drops it when the process dies). The side file, not the database: closing any
 * descriptor of the database file would drop SQLite's own POSIX locks in this process.
 *
 * Readers. Listings for the HUD, the admin API and reports (deliveries, runs, outbox counts,
 * rejections) run on SQ_READERS connections of their own: WAL lets them read a snapshot while
 * the writer commits, so a page that reads 100,000 runs never holds the lock webhooks and
 * callbacks wait for. Files: the database is created 0600 before SQLite opens it, and SQLite
 * gives its -wal and -shm files the database's mode; a store left wider by an older version is
 * narrowed to 0600 at open (payloads and callback tokens live in it).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "store_sqlite.h"
#include "store_sqlite_vfs.h"

/* Migrations, one per schema version, as PostgreSQL's (store_pg.c): MIGRATIONS[v] brings version v
 * to v + 1, in the open's transaction. A new CRCR_SCHEMA_VERSION without its SQLite migration does
 * not compile (see below). Stores older than the first release (0.1.0's schema 1, the fixture
 * tests/data/stores/schema-v1.db) are not upgraded. */
static const char *const MIGRATIONS[] = {
    /* 0 -> 1: the first release's schema (its runs_repo index dropped since, see SQ_TIDY). */
    "CREATE TABLE IF NOT EXISTS deliveries("
    " delivery_id TEXT PRIMARY KEY, event TEXT NOT NULL, action TEXT, upstream_repo TEXT,"
    " pr_number INTEGER NOT NULL DEFAULT 0, head_sha TEXT, ref TEXT, received_at INTEGER NOT NULL,"
    " payload BLOB NOT NULL, payload_bytes INTEGER NOT NULL, status TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS deliveries_received ON deliveries(received_at);"
    "CREATE TABLE IF NOT EXISTS outbox("
    " id INTEGER PRIMARY KEY, kind TEXT NOT NULL, delivery_id TEXT, target TEXT NOT NULL,"
    " body BLOB, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
    " next_attempt_at INTEGER NOT NULL, lease_until INTEGER, last_status INTEGER,"
    " last_error TEXT, note TEXT, created_at INTEGER NOT NULL, done_at INTEGER, seq_key TEXT);"
    "CREATE UNIQUE INDEX IF NOT EXISTS outbox_dispatch_once ON outbox(kind, delivery_id, target)"
    " WHERE kind='dispatch';"
    "CREATE INDEX IF NOT EXISTS outbox_due ON outbox(state, next_attempt_at);"
    "CREATE INDEX IF NOT EXISTS outbox_delivery ON outbox(delivery_id);"
    "CREATE INDEX IF NOT EXISTS outbox_seq ON outbox(seq_key, id) WHERE seq_key IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS kv(key TEXT PRIMARY KEY, value BLOB, expires_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs("
    " delivery_id TEXT NOT NULL, repo TEXT NOT NULL COLLATE NOCASE, run_id INTEGER NOT NULL,"
    " run_attempt INTEGER NOT NULL, job_name TEXT NOT NULL, event_type TEXT, state TEXT NOT NULL,"
    " level INTEGER, pr_number INTEGER NOT NULL DEFAULT 0, head_sha TEXT,"
    " workflow_name TEXT NOT NULL DEFAULT '',"
    " conclusion TEXT, details_url TEXT, artifact_url TEXT, dispatched_at INTEGER,"
    " started_at INTEGER, completed_at INTEGER, queue_ms INTEGER, exec_ms INTEGER,"
    " test_passed INTEGER, test_failed INTEGER, test_skipped INTEGER, payload BLOB,"
    " updated_at INTEGER NOT NULL,"
    " PRIMARY KEY(delivery_id, repo, run_id, run_attempt, workflow_name, job_name));"
    "CREATE INDEX IF NOT EXISTS runs_sha ON runs(head_sha, repo);"
    "CREATE INDEX IF NOT EXISTS runs_state ON runs(state, started_at);"
    /* The HUD's listings read every column but the payload. A callback row is tens of KB (the
     * echoed webhook), so reading it from the table costs a page or more per row; this covering
     * index answers those listings from a few hundred bytes per row (see sq_list_runs). */
    "CREATE INDEX IF NOT EXISTS runs_hud ON runs(repo, updated_at, event_type, state, conclusion,"
    " pr_number, head_sha, delivery_id, job_name, workflow_name, details_url, artifact_url,"
    " run_id, run_attempt, level, dispatched_at, started_at, completed_at, queue_ms, exec_ms,"
    " test_passed, test_failed, test_skipped);"
    "CREATE INDEX IF NOT EXISTS runs_pr ON runs(pr_number);"
    "CREATE INDEX IF NOT EXISTS deliveries_pr ON deliveries(pr_number);"
    "CREATE TABLE IF NOT EXISTS labels_wanted(head_sha TEXT NOT NULL, repo TEXT NOT NULL COLLATE "
    " NOCASE, created_at INTEGER NOT NULL, PRIMARY KEY(head_sha, repo));"
    "CREATE TABLE IF NOT EXISTS rate_hits(repo TEXT NOT NULL COLLATE NOCASE, at INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS rate_hits_repo ON rate_hits(repo, at);"
    /* The number of rate_hits rows of a repo, kept with them, so that a hit costs O(1) however
     * many hits the window holds. A repo without a row here has it counted at its next hit. */
    "CREATE TABLE IF NOT EXISTS rate_counts(repo TEXT PRIMARY KEY COLLATE NOCASE,"
    " n INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS callback_rejections(repo TEXT NOT NULL COLLATE NOCASE,"
    " at INTEGER NOT NULL, status INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS callback_rejections_repo ON callback_rejections(repo, at);",
    /* 1 -> 2: pinned repository identities and byte budgets. */
    "CREATE TABLE IF NOT EXISTS repo_identity(repo TEXT PRIMARY KEY COLLATE NOCASE,"
    " repository_id TEXT NOT NULL, owner_id TEXT NOT NULL, pinned_at INTEGER NOT NULL,"
    " last_seen_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS budgets(name TEXT PRIMARY KEY, used INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL);",
    /* 2 -> 3: nothing on SQLite (the instance holding a claimed row is PostgreSQL's). */
    "",
    /* 3 -> 4: what the reconciler asked GitHub to redeliver (store_sqlite_reconcile.c). */
    "CREATE TABLE IF NOT EXISTS redeliveries(guid TEXT PRIMARY KEY, hook_id INTEGER NOT NULL,"
    " event TEXT, action TEXT, attempts INTEGER NOT NULL, first_asked_at INTEGER NOT NULL,"
    " last_asked_at INTEGER NOT NULL, last_status INTEGER NOT NULL DEFAULT 0, last_result TEXT);"
    "CREATE INDEX IF NOT EXISTS redeliveries_asked ON redeliveries(last_asked_at);",
    /* 4 -> 5: run ids as text (a Buildkite build's id is a UUID). SQLite cannot change a column's
     * type in place: the table is copied into one with run_id TEXT (SQLite's documented rebuild,
     * rows in rowid order: the rowid breaks ties in sq_runs_for_sha) and its indexes made again.
     * Self-contained: it names every column runs has at version 3. */
    "CREATE TABLE runs_v5("
    " delivery_id TEXT NOT NULL, repo TEXT NOT NULL COLLATE NOCASE, run_id TEXT NOT NULL,"
    " run_attempt INTEGER NOT NULL, job_name TEXT NOT NULL, event_type TEXT, state TEXT NOT NULL,"
    " level INTEGER, pr_number INTEGER NOT NULL DEFAULT 0, head_sha TEXT,"
    " workflow_name TEXT NOT NULL DEFAULT '',"
    " conclusion TEXT, details_url TEXT, artifact_url TEXT, dispatched_at INTEGER,"
    " started_at INTEGER, completed_at INTEGER, queue_ms INTEGER, exec_ms INTEGER,"
    " test_passed INTEGER, test_failed INTEGER, test_skipped INTEGER, payload BLOB,"
    " updated_at INTEGER NOT NULL,"
    " PRIMARY KEY(delivery_id, repo, run_id, run_attempt, workflow_name, job_name));"
    "INSERT INTO runs_v5(delivery_id, repo, run_id, run_attempt, job_name, event_type, state,"
    " level, pr_number, head_sha, workflow_name, conclusion, details_url, artifact_url,"
    " dispatched_at, started_at, completed_at, queue_ms, exec_ms, test_passed, test_failed,"
    " test_skipped, payload, updated_at)"
    " SELECT delivery_id, repo, CAST(run_id AS TEXT), run_attempt, job_name, event_type, state,"
    " level, pr_number, head_sha, workflow_name, conclusion, details_url, artifact_url,"
    " dispatched_at, started_at, completed_at, queue_ms, exec_ms, test_passed, test_failed,"
    " test_skipped, payload, updated_at FROM runs ORDER BY rowid;"
    "DROP TABLE runs;"
    "ALTER TABLE runs_v5 RENAME TO runs;"
    "CREATE INDEX IF NOT EXISTS runs_sha ON runs(head_sha, repo);"
    "CREATE INDEX IF NOT EXISTS runs_state ON runs(state, started_at);"
    "CREATE INDEX IF NOT EXISTS runs_hud ON runs(repo, updated_at, event_type, state, conclusion,"
    " pr_number, head_sha, delivery_id, job_name, workflow_name, details_url, artifact_url,"
    " run_id, run_attempt, level, dispatched_at, started_at, completed_at, queue_ms, exec_ms,"
    " test_passed, test_failed, test_skipped);"
    "CREATE INDEX IF NOT EXISTS runs_pr ON runs(pr_number);",
    /* 5 -> 6: supersession and Depends-On pairs (§3.12, §3.13). runs.ended is why the relay
     * ended a run (NULL: it did not), in runs_hud too, which covers the HUD's listings. */
    "ALTER TABLE runs ADD COLUMN ended TEXT;"
    "DROP INDEX IF EXISTS runs_hud;"
    "CREATE INDEX IF NOT EXISTS runs_hud ON runs(repo, updated_at, event_type, state, conclusion,"
    " pr_number, head_sha, delivery_id, job_name, workflow_name, details_url, artifact_url,"
    " run_id, run_attempt, level, dispatched_at, started_at, completed_at, queue_ms, exec_ms,"
    " test_passed, test_failed, test_skipped, ended);"
    "CREATE TABLE IF NOT EXISTS dispatch_ends(delivery_id TEXT NOT NULL,"
    " repo TEXT NOT NULL COLLATE NOCASE, pr_number INTEGER NOT NULL, reason TEXT NOT NULL,"
    " by_delivery TEXT NOT NULL, ended_at INTEGER NOT NULL, PRIMARY KEY(delivery_id, repo));"
    "CREATE TABLE IF NOT EXISTS pairs(delivery_id TEXT NOT NULL,"
    " repo TEXT NOT NULL COLLATE NOCASE, pr_number INTEGER NOT NULL, number INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, PRIMARY KEY(delivery_id, repo));"
    "CREATE INDEX IF NOT EXISTS pairs_number ON pairs(repo, number);"
    "CREATE TABLE IF NOT EXISTS dispatch_heads(pr_number INTEGER NOT NULL,"
    " repo TEXT NOT NULL COLLATE NOCASE, head_sha TEXT NOT NULL, pair_number INTEGER NOT NULL,"
    " delivery_id TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(pr_number, repo));",
    /* 6 -> 7: every job of a dispatch echoes the same webhook (~30 KB) in its in_progress body,
     * which a run keeps until it completes: the echo is kept once per (delivery, repo) in
     * run_echoes, and a run row whose echo_at is set holds its body without it (the echo goes
     * back in at that byte offset, SQ_RUN_PAYLOAD). refs counts the rows that point at an echo,
     * kept by the triggers whatever statement changes a row; an echo nobody points at goes. */
    "CREATE TABLE IF NOT EXISTS run_echoes(delivery_id TEXT NOT NULL,"
    " repo TEXT NOT NULL COLLATE NOCASE, refs INTEGER NOT NULL, echo BLOB NOT NULL,"
    " PRIMARY KEY(delivery_id, repo));"
    "ALTER TABLE runs ADD COLUMN echo_at INTEGER;"
    "CREATE TRIGGER IF NOT EXISTS runs_echo_insert AFTER INSERT ON runs"
    " WHEN new.echo_at IS NOT NULL BEGIN"
    " UPDATE run_echoes SET refs=refs+1 WHERE delivery_id=new.delivery_id AND repo=new.repo;"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS runs_echo_update AFTER UPDATE OF echo_at ON runs"
    " WHEN (old.echo_at IS NULL) <> (new.echo_at IS NULL) BEGIN"
    " UPDATE run_echoes SET refs=refs+(CASE WHEN new.echo_at IS NULL THEN -1 ELSE 1 END)"
    " WHERE delivery_id=new.delivery_id AND repo=new.repo;"
    " DELETE FROM run_echoes WHERE delivery_id=new.delivery_id AND repo=new.repo AND refs<=0;"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS runs_echo_delete AFTER DELETE ON runs"
    " WHEN old.echo_at IS NOT NULL BEGIN"
    " UPDATE run_echoes SET refs=refs-1 WHERE delivery_id=old.delivery_id AND repo=old.repo;"
    " DELETE FROM run_echoes WHERE delivery_id=old.delivery_id AND repo=old.repo AND refs<=0;"
    " END;",
    /* 7 -> 8: no table changes. New deliveries' payloads are stored packed (payload_pack.h),
     * which a relay of version 7 would hand on as they are: it must refuse the store. */
    "SELECT 1;",
    /* 8 -> 9: no table changes. New payloads are packed with LZ4 (payload_pack.h), which a
     * relay of version 8 would take for unpacked ones: it must refuse the store. Payloads that
     * version 8 packed with zlib read back as they are. */
    "SELECT 1;",
};
_Static_assert(sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]) == CRCR_SCHEMA_VERSION,
               "one SQLite migration per schema version");

/* Runs one migration, statement by statement: like CREATE ... IF NOT EXISTS, an ALTER TABLE ...
 * ADD COLUMN of a column the table has already is skipped (SQLite has no IF NOT EXISTS for
 * columns), so that migrations stay idempotent (s->mu held, inside the open's transaction). */
static crcr_err sq_migrate(sqlite_store *s, const char *sql)
{
    while (sql && *sql) {
        sqlite3_stmt *q = NULL;
        const char *tail = NULL;
        if (sqlite3_prepare_v2(s->db, sql, -1, &q, &tail) != SQLITE_OK) {
            bool dup = strstr(sqlite3_errmsg(s->db), "duplicate column name") != NULL;
            if (!dup || strncmp(sql + strspn(sql, " \n"), "ALTER TABLE", 11) != 0)
                return sq_fail(s->db, "migrate");
            /* prepare found the column: the statement ends at its ';' */
            const char *semi = strchr(sql, ';');
            sql = semi ? semi + 1 : NULL;
            continue;
        }
        int rc = q ? sqlite3_step(q) : SQLITE_DONE;
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            return sq_fail(s->db, "migrate");
        sql = tail;
    }
    return CRCR_OK;
}

/* Run at every open after the migrations: what changed within a version. runs_repo(repo,
 * updated_at) was a prefix of runs_hud, so every transition wrote both; stores made before it was
 * dropped (versions 1 and 3 alike) lose it at their next open. */
static const char SQ_TIDY[] = "DROP INDEX IF EXISTS runs_repo;";

/* Free bytes the database's filesystem must have before a write fault of kind "disk full" is
 * probed with a write (sq_probe): a disk with less is still full for a relay whose webhooks are
 * up to 25 MiB. */
#define SQ_PROBE_FREE_MIN (8LL * 1024 * 1024)
/* Longest SQLite message kept for a write fault's reason. */
#define SQ_FAULT_MSG_MAX 200

/* Most requests (ingests, run transitions) one group commit writes (see sq_group_commit). */
#define SQ_GROUP_MAX 256
/* Longest path of a side file (the database path plus "-wal", "-shm" or "-serve.lock"). */
#define SQ_SIDE_PATH_MAX 4096

/* The path of the database's side file `suffix` in `out`; false when it is longer than
 * SQ_SIDE_PATH_MAX. */
static bool side_path(char out[SQ_SIDE_PATH_MAX], const char *path, const char *suffix)
{
    int n = snprintf(out, SQ_SIDE_PATH_MAX, "%s%s", path, suffix);
    return n >= 0 && (size_t)n < SQ_SIDE_PATH_MAX;
}

/* ---- write faults ---- */

/* The last failure this thread saw on a connection (sq_fail, sq_exec, sq_stmt): SQLite's extended
 * result code, its message and the operation, until the write it belongs to ends (sq_note_outcome).
 * Thread-local because the writer's lock is held by the thread that runs the whole write. */
static _Thread_local struct {
    int rc;
    int sys_errno; /* the OS error under an SQLITE_IOERR (sqlite3_system_errno), else 0 */
    const char *op;
    char msg[SQ_FAULT_MSG_MAX];
} tl_fail;

/* The kind of write fault (store.h) an extended result code means; an I/O error whose OS error
 * says there is no room - ENOSPC (growing the -shm file on a full disk is SQLITE_IOERR_SHMSIZE),
 * EDQUOT (a quota), EFBIG (a file size limit) - is a full disk too. */
static store_fault_kind fault_kind(int rc, int sys_errno)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
        return STORE_FAULT_DISK_FULL;
    case SQLITE_IOERR:
        return sys_errno == ENOSPC || sys_errno == EDQUOT || sys_errno == EFBIG
                   ? STORE_FAULT_DISK_FULL
                   : STORE_FAULT_IO;
    default:
        return STORE_FAULT_NONE;
    }
}

static void fail_seen(sqlite3 *db, const char *op, const char *msg)
{
    if (fault_kind(tl_fail.rc, tl_fail.sys_errno) != STORE_FAULT_NONE)
        return; /* the first fault stays: a ROLLBACK after it fails for its own reasons */
    tl_fail.rc = sqlite3_extended_errcode(db);
    tl_fail.sys_errno = sqlite3_system_errno(db);
    tl_fail.op = op;
    snprintf(tl_fail.msg, sizeof(tl_fail.msg), "%s", msg ? msg : "?");
}

/* Starts a write on the writer's connection: no failure seen yet. */
static void fail_reset(void)
{
    tl_fail.rc = SQLITE_OK;
    tl_fail.sys_errno = 0;
    tl_fail.op = NULL;
    tl_fail.msg[0] = '\0';
}

/* After a write on the writer's connection ended with `err`: a failure whose SQLite code means a
 * full disk or an I/O error becomes the store's write fault. */
static void sq_note_outcome(sqlite_store *s, crcr_err err)
{
    if (!err)
        return;
    store_fault_kind kind = fault_kind(tl_fail.rc, tl_fail.sys_errno);
    if (kind == STORE_FAULT_NONE)
        return;
    char detail[SQ_FAULT_MSG_MAX + 32];
    if (tl_fail.sys_errno)
        snprintf(detail, sizeof(detail), "%s: %s (SQLite %d)", tl_fail.msg,
                 strerror(tl_fail.sys_errno), tl_fail.rc);
    else
        snprintf(detail, sizeof(detail), "%s (SQLite %d)", tl_fail.msg, tl_fail.rc);
    store_fault_note(&s->base, kind, tl_fail.op ? tl_fail.op : "write", detail);
}

/* ---- statements ---- */

crcr_err sq_fail(sqlite3 *db, const char *op)
{
    fail_seen(db, op, sqlite3_errmsg(db));
    LOG_ERROR("store.error", "op", op, "error", sqlite3_errmsg(db), NULL);
    return CRCR_E_STORE;
}

/* Notes and logs the failure of `sql` (sq_exec, sq_tx), named as the write-fault report names
 * it: a commit, a begin, or a statement. */
static void exec_failed(sqlite_store *s, const char *sql, const char *msg)
{
    fail_seen(s->db,
              strncmp(sql, "COMMIT", 6) == 0  ? "commit"
              : strncmp(sql, "BEGIN", 5) == 0 ? "begin"
                                              : "a statement",
              msg);
    LOG_ERROR("store.exec", "error", msg ? msg : "?", NULL);
}

crcr_err sq_exec(sqlite_store *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        exec_failed(s, sql, msg);
        sqlite3_free(msg);
        return CRCR_E_STORE;
    }
    return CRCR_OK;
}

sqlite3_stmt *sq_stmt(sqlite_store *s, int slot, const char *sql)
{
    if (!s->stmts[slot]) {
        if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->stmts[slot], NULL) !=
            SQLITE_OK) {
            fail_seen(s->db, "prepare", sqlite3_errmsg(s->db));
            LOG_ERROR("store.prepare", "error", sqlite3_errmsg(s->db), NULL);
            return NULL;
        }
    }
    sqlite3_reset(s->stmts[slot]);
    sqlite3_clear_bindings(s->stmts[slot]);
    return s->stmts[slot];
}

/* The writer's transaction statements, by SQ_TX_* slot. */
static const char *const TX_SQL[] = {
    [SQ_TX_BEGIN - SQ_TX_BEGIN] = "BEGIN IMMEDIATE",
    [SQ_TX_COMMIT - SQ_TX_BEGIN] = "COMMIT",
    [SQ_TX_SAVEPOINT - SQ_TX_BEGIN] = "SAVEPOINT grp",
    [SQ_TX_RELEASE - SQ_TX_BEGIN] = "RELEASE grp",
};
_Static_assert(sizeof(TX_SQL) / sizeof(TX_SQL[0]) == SQ_SLOTS - SQ_TX_BEGIN,
               "every SQ_TX_ slot has its statement");

/* Runs the writer's transaction statement `slot` (SQ_TX_*), prepared once: sqlite3_exec compiled
 * it again each time, and a group commit runs two per request and two per group (their
 * compiling alone was 1.3 % of the App-mode ingest's CPU, bench/RESULTS.md). Fails as sq_exec
 * does. */
static crcr_err sq_tx(sqlite_store *s, int slot)
{
    const char *sql = TX_SQL[slot - SQ_TX_BEGIN];
    sqlite3_stmt *q = sq_stmt(s, slot, sql);
    if (q && sq_step_raw(q, NULL, 0, NULL, NULL) == SQLITE_DONE)
        return CRCR_OK;
    exec_failed(s, sql, sqlite3_errmsg(s->db));
    return CRCR_E_STORE;
}

/* A statement's current row as a store_row_source (store_impl.h). */
static const char *col_text(void *q, int col)
{
    return (const char *)sqlite3_column_text(q, col);
}

static int64_t col_i64(void *q, int col, int64_t dflt)
{
    return sqlite3_column_type(q, col) == SQLITE_NULL ? dflt : sqlite3_column_int64(q, col);
}

static const void *col_blob(void *q, int col, size_t *len)
{
    const void *p = sqlite3_column_blob(q, col); /* before its size: SQLite's order */
    *len = (size_t)sqlite3_column_bytes(q, col);
    return p;
}

int sq_step_raw(sqlite3_stmt *q, const store_param *v, int n, store_row_fn row, void *ctx)
{
    const store_row_source src = {col_text, col_i64, col_blob, q};
    for (int i = 0; i < n; i++) {
        if (v[i].is_null)
            sqlite3_bind_null(q, i + 1);
        else if (v[i].kind == STORE_P_TEXT)
            sqlite3_bind_text(q, i + 1, v[i].text, -1, SQLITE_STATIC);
        else if (v[i].kind == STORE_P_INT)
            sqlite3_bind_int64(q, i + 1, v[i].i);
        else
            sqlite3_bind_blob(q, i + 1, v[i].blob, (int)v[i].len, SQLITE_STATIC);
    }
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (row && row(ctx, &src))
            break;
    }
    sqlite3_reset(q);
    sqlite3_clear_bindings(q); /* bound without copies */
    return rc;
}

crcr_err sq_step(sqlite3 *db, sqlite3_stmt *q, const char *op, const store_param *v, int n,
                 store_row_fn row, void *ctx)
{
    int rc = sq_step_raw(q, v, n, row, ctx);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? CRCR_OK : sq_fail(db, op);
}

crcr_err sq_run(sqlite3 *db, const char *op, const char *sql, const store_param *v, int n,
                store_row_fn row, void *ctx)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return sq_fail(db, op);
    crcr_err err = sq_step(db, q, op, v, n, row, ctx);
    sqlite3_finalize(q);
    return err;
}

crcr_err sq_cached(sqlite_store *s, int slot, const char *op, const char *sql, const store_param *v,
                   int n, store_row_fn row, void *ctx)
{
    if (slot == SQ_ONCE)
        return sq_run(s->db, op, sql, v, n, row, ctx);
    sqlite3_stmt *q = sq_stmt(s, slot, sql);
    return q ? sq_step(s->db, q, op, v, n, row, ctx) : CRCR_E_STORE;
}

crcr_err sq_locked(sqlite_store *s, int slot, const char *op, const char *sql, const store_param *v,
                   int n, store_row_fn row, void *ctx, int *changes)
{
    pthread_mutex_lock(&s->mu);
    fail_reset();
    crcr_err err = sq_cached(s, slot, op, sql, v, n, row, ctx);
    if (changes)
        *changes = err ? 0 : sqlite3_changes(s->db);
    sq_note_outcome(s, err);
    pthread_mutex_unlock(&s->mu);
    return err;
}

sqlite3 *sq_reader(sqlite_store *s, int *slot)
{
    if (!s->rdb[0]) {
        pthread_mutex_lock(&s->mu);
        *slot = -1;
        return s->db;
    }
    for (int i = 0; i < SQ_READERS; i++) {
        if (s->rdb[i] && pthread_mutex_trylock(&s->rmu[i]) == 0) {
            *slot = i;
            return s->rdb[i];
        }
    }
    pthread_mutex_lock(&s->rmu[0]);
    *slot = 0;
    return s->rdb[0];
}

void sq_reader_done(sqlite_store *s, int slot)
{
    pthread_mutex_unlock(slot < 0 ? &s->mu : &s->rmu[slot]);
}

crcr_err sq_listing(sqlite_store *s, const char *op, const char *sql, const store_param *v, int n,
                    store_row_fn row, void *ctx)
{
    int slot;
    sqlite3 *db = sq_reader(s, &slot);
    crcr_err err = sq_run(db, op, sql, v, n, row, ctx);
    sq_reader_done(s, slot);
    return err;
}

crcr_err sq_begin(sqlite_store *s)
{
    pthread_mutex_lock(&s->mu);
    fail_reset();
    crcr_err err = sq_tx(s, SQ_TX_BEGIN);
    if (err) {
        sq_note_outcome(s, err);
        pthread_mutex_unlock(&s->mu);
    }
    return err;
}

/* Ends the open transaction (s->mu held): commits it, or rolls it back on `err` or when the
 * commit fails. Returns the final error. */
static crcr_err end_tx(sqlite_store *s, crcr_err err)
{
    if (!err && sq_tx(s, SQ_TX_COMMIT) != CRCR_OK)
        err = CRCR_E_STORE;
    if (err)
        sq_exec(s, "ROLLBACK");
    return err;
}

crcr_err sq_end(sqlite_store *s, crcr_err err)
{
    err = end_tx(s, err);
    sq_note_outcome(s, err);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* ---- group commit ---- */

/* Begins a transaction whose commit must survive a power loss, where SQLite must sync it itself
 * (no WAL descriptor; see the header comment). */
static crcr_err begin_durable(sqlite_store *s)
{
    crcr_err err = sq_exec(s, "PRAGMA synchronous=FULL");
    if (!err)
        err = sq_tx(s, SQ_TX_BEGIN);
    if (err)
        sq_exec(s, "PRAGMA synchronous=NORMAL");
    return err;
}

/* Ends it: commit (or roll back on `err`), then back to NORMAL. Returns the final error. */
static crcr_err end_durable(sqlite_store *s, crcr_err err)
{
    err = end_tx(s, err);
    sq_exec(s, "PRAGMA synchronous=NORMAL");
    return err;
}

/* Applies the group's requests in order inside the open transaction (s->mu held). With `marks`
 * each runs inside a savepoint of its own, undone when it fails (unless it keeps its writes,
 * r->keep). Without, nothing marks them: a request that fails having written nothing (a
 * duplicate's refused INSERT, a fenced UPDATE that matched no row: SQLite undoes a failed
 * statement by itself, and sqlite3_total_changes64 counts only completed ones) leaves nothing
 * to undo, and the first that fails after writing something stops the pass: *redo is then set,
 * and the caller rolls the whole transaction back and applies the group again with marks, which
 * ends as if every request had had its savepoint (an apply runs again from the start: its
 * outputs are set afresh, store_sqlite.h). A savepoint and its release were two statements per
 * request, about 1.5 % of the relay's CPU in the App-mode ingest (bench/RESULTS.md), for a case
 * (a request failing after a write) that a group rarely holds. Returns the transaction's error:
 * CRCR_E_STORE when it was lost. */
static crcr_err apply_group(sqlite_store *s, sq_group_req *batch, bool marks, bool *redo)
{
    *redo = false;
    for (sq_group_req *r = batch; r; r = r->next) {
        if (marks && sq_tx(s, SQ_TX_SAVEPOINT) != CRCR_OK)
            return CRCR_E_STORE;
        sqlite3_int64 before = sqlite3_total_changes64(s->db);
        r->keep = false;
        r->result = r->apply(s, r);
        bool undo = r->result && !r->keep;
        if (marks) {
            if (undo)
                sq_exec(s, "ROLLBACK TO grp");
            sq_tx(s, SQ_TX_RELEASE);
        }
        if (sqlite3_get_autocommit(s->db)) /* SQLite ended the transaction on an error */
            return CRCR_E_STORE;
        if (!marks && undo && sqlite3_total_changes64(s->db) != before) {
            *redo = true;
            return CRCR_OK;
        }
    }
    return CRCR_OK;
}

/*
 * Group commit. Every ingest and every callback transition must be durable before its answer (202,
 * 200), and the fsync is most of such a write's time, so the writes that arrive while a commit is
 * running are written by the next one together, each as if inside its own savepoint (a duplicate or
 * a failed insert undoes only its own rows; see apply_group), under one COMMIT and one fsync. The
 * first waiting caller leads: it takes every queued request (at most SQ_GROUP_MAX), applies them in
 * arrival order (a later request sees what an earlier one wrote: two callers of the same transition
 * still make one winner and one duplicate), commits and wakes their callers; nobody returns before
 * the commit that holds its writes is on disk. When the transaction is lost (commit failure, or an
 * error that made SQLite roll it back, or the fsync failed), every request of the group fails with
 * CRCR_E_STORE: whatever its own result was, it may not be stored. A single caller commits alone.
 * The outbox's outcomes (finish, retry) go through it too, marked `relaxed`: they share the commit
 * of whatever is being written, and a group of only such requests is not synced.
 *
 * The fsync runs after the write lock is released (commit_group returns the group's number):
 * the commit itself runs at synchronous=NORMAL, which in WAL mode appends the group's pages to
 * the WAL without a sync, and the leader then has the WAL (s->walfd) fdatasync()ed before anyone
 * of the group is told (sync_ok: one sync at a time, each covering every group committed before
 * it began). The next group is led and written meanwhile, so the disk's sync latency overlaps
 * the next group's work instead of adding to it. The WAL is append-only until a checkpoint has
 * copied it into the database, and a checkpoint syncs the WAL first (SQLite's rule at NORMAL), so
 * once the fdatasync returns the group's pages are on disk - as with synchronous=FULL, which syncs
 * the same file inside COMMIT. What changes is that other connections can read a group's rows
 * during its fdatasync: a power loss in that window can lose rows that an outbox claim has
 * already acted on, which at-least-once allows (the caller was never answered). For the same
 * reason an ingest that commits alone hands its claimed rows to the outbox in that window
 * (store_visible, called by the leader between commit_group and sync_ok): the fdatasync of its
 * 30 KB body and rows, 1.2-2.9 ms in a trace of warm fan-outs to 100 repositories, no longer
 * comes before the first dispatch.
 */
static uint64_t commit_group(sqlite_store *s, sq_group_req *batch)
{
    bool durable = false;
    for (sq_group_req *r = batch; r && !durable; r = r->next)
        durable = !r->relaxed;
    bool self_sync = durable && s->walfd < 0; /* SQLite syncs inside COMMIT */
    pthread_mutex_lock(&s->mu);
    fail_reset();
    crcr_err txerr = self_sync ? begin_durable(s) : sq_tx(s, SQ_TX_BEGIN);
    bool open = !txerr, redo = false;
    if (!txerr)
        txerr = apply_group(s, batch, false, &redo);
    if (!txerr && redo) { /* a request to undo alone: again, each in its savepoint */
        if (sq_exec(s, "ROLLBACK") != CRCR_OK || sq_tx(s, SQ_TX_BEGIN) != CRCR_OK) {
            txerr = CRCR_E_STORE;
            if (sqlite3_get_autocommit(s->db)) { /* no transaction is open any more */
                open = false;
                if (self_sync)
                    sq_exec(s, "PRAGMA synchronous=NORMAL");
            }
        } else {
            txerr = apply_group(s, batch, true, &redo);
        }
    }
    if (open)
        txerr = self_sync ? end_durable(s, txerr) : end_tx(s, txerr);
    if (txerr)
        for (sq_group_req *r = batch; r; r = r->next)
            r->result = CRCR_E_STORE;
    crcr_err worst = txerr;
    for (sq_group_req *r = batch; r && !worst; r = r->next)
        if (r->result == CRCR_E_STORE)
            worst = CRCR_E_STORE;
    sq_note_outcome(s, worst);
    uint64_t seq = 0;
    if (!txerr && durable && !self_sync) { /* its WAL writes are done: number it for the sync */
        pthread_mutex_lock(&s->smu);
        seq = ++s->committed;
        pthread_mutex_unlock(&s->smu);
    }
    pthread_mutex_unlock(&s->mu);
    return seq;
}

/* Makes group `seq` (its number in s->committed) durable: the sync stage. One fdatasync runs at
 * a time and covers every group committed before it started; a group committed meanwhile waits
 * for it, then one of the waiting leaders syncs for all of them. So the commits of one sync
 * share it, as they did when the sync ran inside COMMIT, while the next group's writes go on.
 * After one failure nothing is trusted again (the kernel reports a failed write-back once and
 * may drop its pages, so a later sync can succeed over a hole in the WAL): false from then on,
 * as PostgreSQL stops on a failed fsync. */
static bool sync_ok(sqlite_store *s, uint64_t seq)
{
    pthread_mutex_lock(&s->smu);
    while (!s->sync_failed && s->synced < seq) {
        if (s->syncing) {
            pthread_cond_wait(&s->scv, &s->smu);
            continue;
        }
        s->syncing = true;
        uint64_t upto = s->committed;
        pthread_mutex_unlock(&s->smu);
        int rc = fdatasync(s->walfd);
        int e = errno;
        pthread_mutex_lock(&s->smu);
        s->syncing = false;
        if (rc == 0) {
            s->synced = upto;
        } else {
            s->sync_failed = true;
            LOG_ERROR("store.fsync", "error", strerror(e), "action",
                      "durable writes refused until the relay restarts", NULL);
            char detail[160];
            snprintf(detail, sizeof(detail),
                     "fsync of the WAL failed: %s; restart the relay once the disk is fixed",
                     strerror(e));
            store_fault_note(&s->base,
                             e == ENOSPC || e == EDQUOT ? STORE_FAULT_DISK_FULL : STORE_FAULT_IO,
                             "fsync", detail);
        }
        pthread_cond_broadcast(&s->scv);
    }
    bool ok = !s->sync_failed;
    pthread_mutex_unlock(&s->smu);
    return ok;
}

/* Each waiter sleeps on its own semaphore and is woken once: when its request is done, or to
 * lead the next group. One condition variable for all woke every waiter at every commit. */
crcr_err sq_group_commit(sqlite_store *s, sq_group_req *me)
{
    sem_init(&me->wake, 0, 0);
    pthread_mutex_lock(&s->gmu);
    if (s->gtail)
        s->gtail->next = me;
    else
        s->ghead = me;
    s->gtail = me;
    bool lead = !s->gleading;
    s->gleading = true;
    pthread_mutex_unlock(&s->gmu);
    if (!lead) {
        while (sem_wait(&me->wake) != 0) /* EINTR */
            ;
        /* Done, or handed the lead: the leader before gives it to the head of the queue. */
    }
    if (!me->done) {
        pthread_mutex_lock(&s->gmu);
        /* Lead: take up to SQ_GROUP_MAX queued requests (this one is at their head). */
        sq_group_req *batch = s->ghead, *last = batch;
        for (size_t k = 1; k < SQ_GROUP_MAX && last->next; k++)
            last = last->next;
        s->ghead = last->next;
        if (!s->ghead)
            s->gtail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->gmu);
        uint64_t seq = commit_group(s, batch);
        pthread_mutex_lock(&s->gmu);
        sq_group_req *next_leader = s->ghead;
        if (!next_leader)
            s->gleading = false;
        pthread_mutex_unlock(&s->gmu);
        if (next_leader) /* it writes the next group while this one's sync runs */
            sem_post(&next_leader->wake);
        if (seq && !batch->next && me->visible && me->result == CRCR_OK) {
            /* Committed alone, visible, not yet synced: the caller's rows go out meanwhile. */
            me->visible->called = true;
            me->visible->fn(me->visible->ctx);
        }
        if (seq && !sync_ok(s, seq))
            for (sq_group_req *r = batch; r; r = r->next)
                r->result = CRCR_E_STORE;
        for (sq_group_req *r = batch, *nx; r; r = nx) {
            nx = r->next; /* r lives on its caller's stack: read before waking it */
            r->done = true;
            if (r != me)
                sem_post(&r->wake);
        }
    }
    sem_destroy(&me->wake);
    return me->result;
}

/* ---- close, ping, recovery ---- */

static void sq_close(store *st)
{
    sqlite_store *s = sq_store(st);
    sq_checkpointer_stop(s);
    for (int i = 0; i < SQ_SLOTS; i++)
        sqlite3_finalize(s->stmts[i]);
    sqlite3_close(s->db);
    sqlite3_finalize(s->hot_dispatch);
    sqlite3_finalize(s->hot_identity);
    for (int i = 0; i <= SQ_READERS; i++) {
        sqlite3_close(s->rdb[i]);
        pthread_mutex_destroy(&s->rmu[i]);
    }
    if (s->serve_lock >= 0)
        close(s->serve_lock);
    if (s->walfd >= 0)
        close(s->walfd);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->gmu);
    pthread_mutex_destroy(&s->smu);
    pthread_cond_destroy(&s->scv);
    pthread_mutex_destroy(&s->ckmu);
    pthread_cond_destroy(&s->ckcv);
    store_base_fini(&s->base);
    free(s);
}

static crcr_err sq_ping(store *st)
{
    sqlite_store *s = sq_store(st);
    pthread_mutex_lock(&s->smu);
    bool failed = s->sync_failed;
    pthread_mutex_unlock(&s->smu);
    if (failed) /* see sync_ok */
        return CRCR_E_STORE;
    pthread_mutex_lock(&s->mu);
    crcr_err err = sq_exec(s, "SELECT 1");
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* The probe's write: one small kv row, durable (through the group commit). */
static crcr_err probe_apply(sqlite_store *s, sq_group_req *r)
{
    int64_t now = clock_now_ms();
    return sq_cached(s, SQ_ONCE, "probe",
                     "INSERT INTO kv(key, value, expires_at) VALUES ('crcr.store_probe', ?1, ?2) "
                     "ON CONFLICT(key) DO UPDATE SET value=excluded.value, "
                     "expires_at=excluded.expires_at",
                     ARGS(ARG_INT(now), ARG_INT(now + 86400000)), NULL, NULL);
}

/* store_probe_write: the database's filesystem has SQ_PROBE_FREE_MIN bytes free (a write into
 * space SQLite already holds - the WAL restarted at its beginning, pages on the freelist - goes
 * through on a full disk, so a write alone would call a full disk mended), and a small durable
 * write goes through. */
static crcr_err sq_probe(store *st)
{
    sqlite_store *s = sq_store(st);
    pthread_mutex_lock(&s->mu);
    const char *path = sqlite3_db_filename(s->db, "main");
    struct statvfs vfs;
    bool room = !path || !*path || statvfs(path, &vfs) != 0 ||
                (long long)vfs.f_bavail * (long long)vfs.f_frsize >= SQ_PROBE_FREE_MIN;
    pthread_mutex_unlock(&s->mu);
    if (!room)
        return CRCR_E_STORE;
    sq_group_req me = {.apply = probe_apply};
    return sq_group_commit(s, &me);
}

/* Takes the serve lock (see the header comment). CRCR_E_STATE when another process holds it. */
static crcr_err take_serve_lock(sqlite_store *s)
{
    const char *db = sqlite3_db_filename(s->db, "main");
    if (!db || !*db || s->serve_lock >= 0)
        return CRCR_OK; /* in-memory or temporary database: nobody else can open it */
    char path[SQ_SIDE_PATH_MAX];
    if (!side_path(path, db, "-serve.lock")) {
        LOG_ERROR("store.serve_lock", "error", "database path too long", NULL);
        return CRCR_E_STORE;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        LOG_ERROR("store.serve_lock", "path", path, "error", strerror(errno), NULL);
        return CRCR_E_STORE;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        crcr_err e = errno == EWOULDBLOCK ? CRCR_E_STATE : CRCR_E_STORE;
        if (e == CRCR_E_STORE)
            LOG_ERROR("store.serve_lock", "path", path, "error", strerror(errno), NULL);
        close(fd);
        return e;
    }
    s->serve_lock = fd;
    return CRCR_OK;
}

/* Rows a crashed predecessor left running: the serving process is the only worker on the file,
 * so they are due again at once instead of after their lease. */
static crcr_err sq_recover(store *st)
{
    sqlite_store *s = sq_store(st);
    crcr_err lk = take_serve_lock(s);
    if (lk)
        return lk;
    pthread_mutex_lock(&s->mu);
    crcr_err err =
        sq_exec(s, "UPDATE outbox SET state='queued', lease_until=NULL WHERE state='running'");
    int n = err ? 0 : sqlite3_changes(s->db);
    if (!err)
        s->lease_floor = INT64_MAX; /* nothing runs now */
    pthread_mutex_unlock(&s->mu);
    if (n > 0) { /* a crashed predecessor's rows: due now, not after their lease */
        char rows[16];
        snprintf(rows, sizeof(rows), "%d", n);
        LOG_INFO("store.recovered", "rows", rows, NULL);
    }
    return err;
}

static const store_ops SQLITE_OPS = {
    .close = sq_close,
    .recover = sq_recover,
    .ping = sq_ping,
    .probe = sq_probe,
    .outbox = &SQ_OUTBOX_OPS,
    .runs = &SQ_RUN_OPS,
    .reconcile = &SQ_RECONCILE_OPS,
};

int sq_schema_version(sqlite3 *db)
{
    sqlite3_stmt *q = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "SELECT max(version) FROM schema_version", -1, &q, NULL) ==
            SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* Narrows a store file to 0600 when an older version (or the umask) left it wider. By path:
 * opening and closing a descriptor of the database would drop SQLite's POSIX locks. */
static void narrow_mode(const char *path, const char *suffix)
{
    char p[SQ_SIDE_PATH_MAX];
    struct stat sb;
    if (side_path(p, path, suffix) && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) &&
        (sb.st_mode & 077))
        chmod(p, sb.st_mode & 0700);
}

/* Before SQLite opens the database: creates it 0600 when it does not exist yet (SQLite would
 * create it 0644 minus the umask, and its -wal and -shm files take the database's mode), and
 * narrows the database and its side files when they exist. */
static crcr_err private_files(const char *path, char *err, size_t errsz)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        fchmod(fd, 0600); /* whatever the umask */
        close(fd);
    } else if (errno != EEXIST) {
        snprintf(err, errsz, "CRCR_STORE: cannot create '%s': %s", path, strerror(errno));
        return CRCR_E_STORE;
    }
    static const char *const files[] = {"", "-wal", "-shm", "-serve.lock"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        narrow_mode(path, files[i]);
    return CRCR_OK;
}

/* The WAL file for the group commit's fdatasync, read-only (fsync of any descriptor of a file
 * flushes the file on Linux); -1 when it cannot be opened, and durable groups are then synced
 * by SQLite itself. The writer's connection stays open until close, so SQLite neither deletes nor
 * replaces the file meanwhile (a checkpoint may only truncate it). Closing this descriptor drops
 * no lock: SQLite takes none on the WAL file itself. */
static int open_wal(const char *path)
{
    char p[SQ_SIDE_PATH_MAX];
    if (!side_path(p, path, "-wal"))
        return -1;
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        LOG_WARN("store.wal_open", "path", p, "error", strerror(errno), NULL);
    return fd;
}

/* Opens the listing connections (see the header comment). */
static crcr_err open_readers(sqlite_store *s, const char *path, char *err, size_t errsz)
{
    for (int i = 0; i <= SQ_READERS; i++) {
        if (sqlite3_open_v2(path, &s->rdb[i], SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
                SQLITE_OK ||
            sqlite3_exec(s->rdb[i], "PRAGMA query_only=1; PRAGMA temp_store=MEMORY;", NULL, NULL,
                         NULL) != SQLITE_OK) {
            snprintf(err, errsz, "CRCR_STORE: cannot open a reader of '%s': %s", path,
                     s->rdb[i] ? sqlite3_errmsg(s->rdb[i]) : "out of memory");
            return CRCR_E_STORE;
        }
        sqlite3_busy_timeout(s->rdb[i], 5000);
    }
    return CRCR_OK;
}

/* SQLite's allocation statistics off (SQLITE_CONFIG_MEMSTATUS), before SQLite initialises: with
 * them every allocation and free of every connection takes one process-wide mutex, 1.5 % of the
 * relay's samples in the App-mode ingest; nothing reads them (sqlite3_memory_used). A process
 * that used SQLite before keeps them (sqlite3_config then fails, harmlessly). */
static pthread_once_t g_sqlite_config_once = PTHREAD_ONCE_INIT;

static void sqlite_config_once(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

crcr_err store_sqlite_open(const char *path, store **out, char *err, size_t errsz)
{
    pthread_once(&g_sqlite_config_once, sqlite_config_once);
    sqlite_store *s = calloc(1, sizeof(*s));
    if (!s)
        return CRCR_E_NOMEM;
    store_base_init(&s->base, &SQLITE_OPS);
    s->serve_lock = -1;
    s->walfd = -1;
    s->lease_floor = INT64_MIN; /* rows left running by an earlier process: not known yet */
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    pthread_mutex_init(&s->smu, NULL);
    pthread_cond_init(&s->scv, NULL);
    pthread_mutex_init(&s->ckmu, NULL);
    pthread_cond_init(&s->ckcv, NULL);
    if (!*path) {
        snprintf(err, errsz, "CRCR_STORE: empty SQLite path");
        free(s);
        return CRCR_E_CONFIG;
    }
    for (int i = 0; i <= SQ_READERS; i++)
        pthread_mutex_init(&s->rmu[i], NULL);
    bool on_disk = strcmp(path, ":memory:") != 0 && strncmp(path, "file:", 5) != 0;
    if (on_disk && private_files(path, err, errsz) != CRCR_OK) {
        sq_close(&s->base);
        return CRCR_E_STORE;
    }
    /* the writer's connection on the VFS that writes a WAL frame in one call (store_sqlite_vfs.h;
     * the default VFS when it cannot be had) */
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             sq_vfs_name());
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "CRCR_STORE: cannot open '%s': %s", path,
                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
        sqlite3_close(s->db);
        free(s);
        return CRCR_E_STORE;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /* secure_delete=FAST: Debian's SQLite zeroes every freed page by default, which writes each
     * page a transition frees (a run body's overflow chain) to the WAL; FAST zeroes deleted
     * content only where that costs no write (docs/internals.md, "Threads and locks"). */
    crcr_err e = sq_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                            "PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY; "
                            "PRAGMA secure_delete=FAST;");
    if (!e)
        e = sq_exec(s, "BEGIN IMMEDIATE");
    if (!e)
        e = sq_exec(s, "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)");
    int v = e ? -1 : sq_schema_version(s->db); /* 0: a new store */
    if (!e && v < 0)
        e = CRCR_E_STORE;
    if (!e && v > CRCR_SCHEMA_VERSION) {
        sq_exec(s, "ROLLBACK");
        store_schema_too_new(err, errsz, v);
        sq_close(&s->base);
        return CRCR_E_CONFIG;
    }
    for (int i = v; !e && i >= 0 && i < CRCR_SCHEMA_VERSION; i++)
        e = sq_migrate(s, MIGRATIONS[i]);
    if (!e)
        e = sq_exec(s, SQ_TIDY);
    if (!e && v < CRCR_SCHEMA_VERSION) {
        char sql[96];
        snprintf(sql, sizeof(sql),
                 "DELETE FROM schema_version; INSERT INTO schema_version "
                 "VALUES (%d)",
                 CRCR_SCHEMA_VERSION);
        e = sq_exec(s, sql);
    }
    if (!e)
        e = sq_exec(s, "COMMIT");
    if (e) {
        snprintf(err, errsz, "CRCR_STORE: cannot initialise '%s': %s", path, sqlite3_errmsg(s->db));
        sq_close(&s->base);
        return CRCR_E_STORE;
    }
    if (on_disk) { /* the -wal and -shm files SQLite has just made */
        narrow_mode(path, "-wal");
        narrow_mode(path, "-shm");
        s->walfd = open_wal(path);
    }
    if (on_disk && (open_readers(s, path, err, errsz) != CRCR_OK ||
                    sq_checkpointer_start(s, path, err, errsz) != CRCR_OK)) {
        sq_close(&s->base);
        return CRCR_E_STORE;
    }
    *out = &s->base;
    return CRCR_OK;
}
