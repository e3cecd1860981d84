/*
 * store_sqlite.c - the embedded SQLite store (WAL).
 *
 * One connection guarded by one mutex: SQLite allows a single writer at a time anyway, and every
 * operation here is a short indexed statement, so serialising them costs less than the
 * busy-retry dance of several connections. The transactions whose commit an answer promises (a
 * webhook's 202, a callback's 200) run with synchronous=FULL, so they survive a power loss; the
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
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits.h"
#include "log.h"
#include "run_state.h"
#include "store_impl.h"

enum {
    S_INS_DELIVERY,
    S_INS_JOB,
    S_CLAIM,
    S_CLAIM_EXPIRED,
    S_GET_DELIVERY_PAYLOAD,
    S_NEXT_DUE,
    S_FINISH,
    S_RETRY,
    S_RENEW,
    S_KV_GET,
    S_KV_PUT,
    S_RUN_DISPATCH,
    S_RUN_STATE,
    S_RUN_UPSERT,
    S_RATE_EXPIRE,
    S_RATE_COUNT,
    S_RATE_COUNT_INIT,
    S_RATE_COUNT_SET,
    S_RATE_OLDEST,
    S_RATE_INSERT,
    S_COUNT
};

static const char *const SQL[S_COUNT] = {
    [S_INS_DELIVERY] =
        "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, head_sha, "
        "ref, received_at, payload, payload_bytes, status) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
    [S_INS_JOB] = "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, "
                  "next_attempt_at, created_at, seq_key) VALUES (?,?,?,?,'queued',0,?,?,?)",
    /* Claims: a row whose lease ran out (its worker died: few rows, read from the state range of
     * outbox_due), else the earliest due queued row in outbox_due's order (next_attempt_at, then
     * rowid = id). Two statements, each walking one index range in order: one statement with an
     * OR over both made SQLite sort every due row on every claim (5.5 ms a claim with 20,000
     * queued rows, quadratic in a fan-out's size; 5.5 us now). */
    [S_CLAIM] = "UPDATE outbox SET state='running', lease_until=?1 WHERE id = (SELECT id FROM "
                "outbox o WHERE state='queued' AND next_attempt_at<=?2 AND (o.seq_key IS NULL OR "
                "NOT EXISTS (SELECT 1 FROM outbox p WHERE p.seq_key=o.seq_key AND p.id<o.id AND "
                "p.state IN ('queued','running'))) ORDER BY next_attempt_at, id LIMIT 1) "
                "RETURNING id, kind, delivery_id, target, attempts, body",
    [S_CLAIM_EXPIRED] = "UPDATE outbox SET state='running', lease_until=?1 WHERE id = (SELECT id "
                        "FROM outbox o WHERE state='running' AND lease_until<?2 ORDER BY "
                        "next_attempt_at, id LIMIT 1) RETURNING id, kind, delivery_id, target, "
                        "attempts, body",
    [S_GET_DELIVERY_PAYLOAD] =
        "SELECT event, payload, pr_number, head_sha FROM deliveries WHERE delivery_id=?",
    [S_NEXT_DUE] = "SELECT min(next_attempt_at) FROM outbox WHERE state='queued'",
    [S_FINISH] = "UPDATE outbox SET state=?1, attempts=attempts+1, last_status=?2, last_error=?3, "
                 "note=?4, body=COALESCE(?5, body), done_at=?6, lease_until=NULL WHERE id=?7 AND "
                 "state='running' AND "
                 "lease_until=?8",
    [S_RETRY] = "UPDATE outbox SET state='queued', attempts=attempts+?1, next_attempt_at=?2, "
                "last_status=?3, last_error=?4, lease_until=NULL WHERE id=?5 AND "
                "state='running' AND lease_until=?6",
    [S_RENEW] = "UPDATE outbox SET lease_until=?1 WHERE id=?2 AND state='running' AND "
                "lease_until=?3",
    [S_KV_GET] = "SELECT value FROM kv WHERE key=? AND (expires_at=0 OR expires_at>?)",
    [S_KV_PUT] = "INSERT INTO kv(key, value, expires_at) VALUES (?,?,?) ON CONFLICT(key) DO "
                 "UPDATE SET value=excluded.value, expires_at=excluded.expires_at",
    /* The dispatch record of a callback: this delivery was sent (or queued) to this repo. */
    [S_RUN_DISPATCH] = "SELECT COALESCE(done_at, created_at) FROM outbox WHERE kind='dispatch' AND "
                       "delivery_id=?1 AND lower(target)=lower(?2) LIMIT 1",
    [S_RUN_STATE] = "SELECT state, conclusion, started_at, dispatched_at FROM runs WHERE "
                    "delivery_id=?1 AND repo=?2 AND run_id=?3 AND run_attempt=?4 AND "
                    "job_name=?5 AND workflow_name=?6",
    [S_RUN_UPSERT] =
        "INSERT INTO runs(" RUN_UPSERT_COLUMNS ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,"
        "?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24) ON CONFLICT(delivery_id, repo, run_id, "
        "run_attempt, workflow_name, job_name) DO UPDATE SET state=excluded.state, "
        "level=excluded.level, "
        "conclusion=excluded.conclusion, completed_at=excluded.completed_at, "
        "exec_ms=excluded.exec_ms, test_passed=excluded.test_passed, "
        "test_failed=excluded.test_failed, test_skipped=excluded.test_skipped, "
        "artifact_url=COALESCE(excluded.artifact_url, runs.artifact_url), "
        "details_url=COALESCE(excluded.details_url, runs.details_url), "
        "payload=excluded.payload, updated_at=excluded.updated_at",
    /* Rate limit (rate_hit_tx): one row per counted hit, and per repo the number of them. */
    [S_RATE_EXPIRE] = "DELETE FROM rate_hits WHERE repo=?1 AND at <= ?2",
    [S_RATE_COUNT] = "SELECT n FROM rate_counts WHERE repo=?1",
    [S_RATE_COUNT_INIT] = "SELECT count(*) FROM rate_hits WHERE repo=?1",
    [S_RATE_COUNT_SET] = "INSERT INTO rate_counts(repo, n) VALUES (?1, ?2) ON CONFLICT(repo) DO "
                         "UPDATE SET n=excluded.n",
    [S_RATE_OLDEST] = "SELECT min(at) FROM rate_hits WHERE repo=?1",
    [S_RATE_INSERT] = "INSERT INTO rate_hits(repo, at) VALUES (?1, ?2)",
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL);"
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
    "CREATE INDEX IF NOT EXISTS runs_repo ON runs(repo, updated_at);"
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
     * many hits the window holds. A repo without a row here has it counted at its next hit
     * (databases written before the table existed). */
    "CREATE TABLE IF NOT EXISTS rate_counts(repo TEXT PRIMARY KEY COLLATE NOCASE,"
    " n INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS callback_rejections(repo TEXT NOT NULL COLLATE NOCASE,"
    " at INTEGER NOT NULL, status INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS callback_rejections_repo ON callback_rejections(repo, at);"
    /* Version 2. */
    "CREATE TABLE IF NOT EXISTS repo_identity(repo TEXT PRIMARY KEY COLLATE NOCASE,"
    " repository_id TEXT NOT NULL, owner_id TEXT NOT NULL, pinned_at INTEGER NOT NULL,"
    " last_seen_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS budgets(name TEXT PRIMARY KEY, used INTEGER NOT NULL,"
    " expires_at INTEGER NOT NULL);";

/* Read-only connections for listings (see the header comment), and one more for the reads on
 * the webhook and callback paths (a dispatch record), which must never wait behind a listing. */
#define SQ_READERS 2
#define SQ_HOT_READER SQ_READERS
/* Most requests (ingests, run transitions) one group commit writes (see group_commit). */
#define SQ_GROUP_MAX 256
/* Longest path of the serve-lock side file (the database path plus "-serve.lock"). */
#define CRCR_PATH_LOCK_MAX 4096

typedef struct sqlite_store sqlite_store;

/* A write waiting for its group commit; lives on the calling thread's stack. `apply` writes it
 * inside the group's transaction with s->mu held, in its own savepoint, which is undone when it
 * returns an error unless it set `keep` (what it wrote before failing must still commit). */
typedef struct group_req {
    crcr_err (*apply)(sqlite_store *s, struct group_req *r);
    void *arg;
    bool keep;
    crcr_err result;
    bool done; /* guarded by gmu */
    struct group_req *next;
} group_req;

struct sqlite_store {
    struct store base;
    sqlite3 *db;
    pthread_mutex_t mu;
    sqlite3_stmt *stmts[S_COUNT];
    /* Group commit (group_commit): queue and leader flag, guarded by gmu. */
    pthread_mutex_t gmu;
    pthread_cond_t gcv;
    group_req *ghead, *gtail;
    bool gleading;
    int serve_lock; /* descriptor holding the serve lock (sq_recover), -1 when not taken */
    /* Listing connections, each with its lock; rdb[i] NULL when there are none (in-memory
     * databases), and listings then use db under mu. */
    sqlite3 *rdb[SQ_READERS + 1];
    pthread_mutex_t rmu[SQ_READERS + 1];
    sqlite3_stmt *hot_dispatch; /* on rdb[SQ_HOT_READER], under rmu[SQ_HOT_READER] */
};

static sqlite_store *SS(store *st)
{
    return (sqlite_store *)st;
}

/* Returns the cached prepared statement `id`, reset and unbound; NULL on error (logged). */
static sqlite3_stmt *stmt(sqlite_store *s, int id)
{
    if (!s->stmts[id]) {
        if (sqlite3_prepare_v3(s->db, SQL[id], -1, SQLITE_PREPARE_PERSISTENT, &s->stmts[id],
                               NULL) != SQLITE_OK) {
            LOG_ERROR("store.prepare", "error", sqlite3_errmsg(s->db), NULL);
            return NULL;
        }
    }
    sqlite3_reset(s->stmts[id]);
    sqlite3_clear_bindings(s->stmts[id]);
    return s->stmts[id];
}

static void bind_text(sqlite3_stmt *q, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(q, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(q, i);
}

static crcr_err fail(sqlite_store *s, const char *what)
{
    LOG_ERROR("store.error", "op", what, "error", sqlite3_errmsg(s->db), NULL);
    return CRCR_E_STORE;
}

static crcr_err fail_db(sqlite3 *db, const char *what)
{
    LOG_ERROR("store.error", "op", what, "error", sqlite3_errmsg(db), NULL);
    return CRCR_E_STORE;
}

/* A connection for a listing, locked: a free reader, else the first reader (waiting for it),
 * else the writer's connection when there are no readers. Release with reader_done(). */
static sqlite3 *reader(sqlite_store *s, int *slot)
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

static void reader_done(sqlite_store *s, int slot)
{
    pthread_mutex_unlock(slot < 0 ? &s->mu : &s->rmu[slot]);
}

static crcr_err exec(sqlite_store *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        LOG_ERROR("store.exec", "error", msg ? msg : "?", NULL);
        sqlite3_free(msg);
        return CRCR_E_STORE;
    }
    return CRCR_OK;
}

/* Duplicates a column as a heap string (caller frees); NULL for SQL NULL. */
static char *col_dup(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? strdup((const char *)t) : NULL;
}

static const char *col_text(sqlite3_stmt *q, int i)
{
    return (const char *)sqlite3_column_text(q, i);
}

static void sq_close(store *st)
{
    sqlite_store *s = SS(st);
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(s->stmts[i]);
    sqlite3_close(s->db);
    sqlite3_finalize(s->hot_dispatch);
    for (int i = 0; i <= SQ_READERS; i++) {
        sqlite3_close(s->rdb[i]);
        pthread_mutex_destroy(&s->rmu[i]);
    }
    if (s->serve_lock >= 0)
        close(s->serve_lock);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->gmu);
    pthread_cond_destroy(&s->gcv);
    free(s);
}

static crcr_err sq_ping(store *st)
{
    sqlite_store *s = SS(st);
    pthread_mutex_lock(&s->mu);
    crcr_err err = exec(s, "SELECT 1");
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* Begins a transaction whose commit must survive a power loss (see the header comment). */
static crcr_err begin_durable(sqlite_store *s)
{
    crcr_err err = exec(s, "PRAGMA synchronous=FULL");
    if (!err)
        err = exec(s, "BEGIN IMMEDIATE");
    if (err)
        exec(s, "PRAGMA synchronous=NORMAL");
    return err;
}

/* Ends it: commit (or roll back on `err`), then back to NORMAL. Returns the final error. */
static crcr_err end_durable(sqlite_store *s, crcr_err err, bool rollback_only)
{
    if (err || rollback_only)
        exec(s, "ROLLBACK");
    else if (exec(s, "COMMIT") != CRCR_OK) {
        exec(s, "ROLLBACK");
        err = CRCR_E_STORE;
    }
    exec(s, "PRAGMA synchronous=NORMAL");
    return err;
}

/* Writes one delivery and its rows inside the caller's transaction (s->mu held). */
static crcr_err ingest_one(sqlite_store *s, const store_delivery *d, const store_new_job *jobs,
                           size_t n)
{
    crcr_err err = CRCR_OK;
    sqlite3_stmt *q = stmt(s, S_INS_DELIVERY);
    if (!q) {
        err = CRCR_E_STORE;
        goto out;
    }
    bind_text(q, 1, d->delivery_id);
    bind_text(q, 2, d->event);
    bind_text(q, 3, d->action);
    bind_text(q, 4, d->upstream_repo);
    sqlite3_bind_int64(q, 5, d->pr_number);
    bind_text(q, 6, d->head_sha);
    bind_text(q, 7, d->ref);
    sqlite3_bind_int64(q, 8, d->received_at);
    sqlite3_bind_blob(q, 9, d->payload, (int)d->payload_len, SQLITE_STATIC);
    sqlite3_bind_int64(q, 10, (sqlite3_int64)d->payload_len);
    bind_text(q, 11, d->status ? d->status : "queued");
    int rc = sqlite3_step(q);
    if (rc == SQLITE_CONSTRAINT) {
        err = CRCR_E_DUPLICATE;
        goto out;
    }
    if (rc != SQLITE_DONE) {
        err = fail(s, "ingest.delivery");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        q = stmt(s, S_INS_JOB);
        if (!q) {
            err = CRCR_E_STORE;
            goto out;
        }
        bind_text(q, 1, jobs[i].kind);
        bind_text(q, 2, d->delivery_id);
        bind_text(q, 3, jobs[i].target);
        if (jobs[i].body)
            sqlite3_bind_blob(q, 4, jobs[i].body, (int)jobs[i].body_len, SQLITE_STATIC);
        else
            sqlite3_bind_null(q, 4);
        sqlite3_bind_int64(q, 5, jobs[i].due_at);
        sqlite3_bind_int64(q, 6, d->received_at);
        bind_text(q, 7, jobs[i].seq_key);
        if (sqlite3_step(q) != SQLITE_DONE) {
            err = fail(s, "ingest.job");
            goto out;
        }
    }
out:
    if (q)
        sqlite3_reset(q);
    return err;
}

/*
 * Group commit. Every ingest and every callback transition must be durable (synchronous=FULL)
 * before its answer (202, 200), and the fsync is most of such a write's time, so the writes that
 * arrive while a commit is running are written by the next one together, each inside its own
 * savepoint (a duplicate or a failed insert undoes only its own rows), under one COMMIT and one
 * fsync. The first waiting caller leads: it takes every queued request (at most SQ_GROUP_MAX),
 * applies them in arrival order (a later request sees what an earlier one wrote: two callers of
 * the same transition still make one winner and one duplicate), commits and wakes their callers;
 * nobody returns before the commit that holds its writes. When the transaction is lost (commit
 * failure, or an error that made SQLite roll it back), every request of the group fails with
 * CRCR_E_STORE: nothing of it is stored, whatever its own result was. A single caller commits
 * alone.
 */
static void commit_group(sqlite_store *s, group_req *batch)
{
    pthread_mutex_lock(&s->mu);
    crcr_err txerr = begin_durable(s);
    bool open = !txerr;
    for (group_req *r = batch; r; r = r->next) {
        if (txerr || exec(s, "SAVEPOINT grp") != CRCR_OK) {
            txerr = CRCR_E_STORE;
            break;
        }
        r->keep = false;
        r->result = r->apply(s, r);
        if (r->result && !r->keep)
            exec(s, "ROLLBACK TO grp");
        exec(s, "RELEASE grp");
        if (sqlite3_get_autocommit(s->db)) /* SQLite ended the transaction on an error */
            txerr = CRCR_E_STORE;
    }
    if (open)
        txerr = end_durable(s, txerr, false);
    if (txerr)
        for (group_req *r = batch; r; r = r->next)
            r->result = CRCR_E_STORE;
    pthread_mutex_unlock(&s->mu);
}

/* Queues `me` for the next group commit and returns once it is done; me->result tells. */
static crcr_err group_commit(sqlite_store *s, group_req *me)
{
    pthread_mutex_lock(&s->gmu);
    if (s->gtail)
        s->gtail->next = me;
    else
        s->ghead = me;
    s->gtail = me;
    while (!me->done) {
        if (s->gleading) {
            pthread_cond_wait(&s->gcv, &s->gmu);
            continue;
        }
        /* Lead: take up to SQ_GROUP_MAX queued requests (this one is among them). */
        s->gleading = true;
        group_req *batch = s->ghead, *last = batch;
        for (size_t k = 1; k < SQ_GROUP_MAX && last->next; k++)
            last = last->next;
        s->ghead = last->next;
        if (!s->ghead)
            s->gtail = NULL;
        last->next = NULL;
        pthread_mutex_unlock(&s->gmu);
        commit_group(s, batch);
        pthread_mutex_lock(&s->gmu);
        for (group_req *r = batch, *nx; r; r = nx) {
            nx = r->next; /* r lives on its caller's stack: read before marking it done */
            r->done = true;
        }
        s->gleading = false;
        pthread_cond_broadcast(&s->gcv);
    }
    pthread_mutex_unlock(&s->gmu);
    return me->result;
}

typedef struct ingest_args {
    const store_delivery *d;
    const store_new_job *jobs;
    size_t n;
} ingest_args;

static crcr_err ingest_apply(sqlite_store *s, group_req *r)
{
    const ingest_args *a = r->arg;
    return ingest_one(s, a->d, a->jobs, a->n);
}

static crcr_err sq_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n)
{
    ingest_args a = {.d = d, .jobs = jobs, .n = n};
    group_req me = {.apply = ingest_apply, .arg = &a};
    return group_commit(SS(st), &me);
}

static crcr_err copy_blob(sqlite3_stmt *q, int i, buf_t *out, size_t max)
{
    buf_init(out, max);
    const void *p = sqlite3_column_blob(q, i);
    int n = sqlite3_column_bytes(q, i);
    if (p && n > 0)
        return buf_append(out, p, (size_t)n);
    return CRCR_OK;
}

static crcr_err sq_claim(store *st, int64_t now, int64_t lease_ms, store_job *out)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, 0);
    buf_init(&out->payload, 0);
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = NULL;
    int rc = SQLITE_DONE;
    for (int which = 0; which < 2 && rc == SQLITE_DONE; which++) {
        if (q)
            sqlite3_reset(q);
        q = stmt(s, which == 0 ? S_CLAIM_EXPIRED : S_CLAIM);
        if (!q) {
            pthread_mutex_unlock(&s->mu);
            return CRCR_E_STORE;
        }
        sqlite3_bind_int64(q, 1, now + lease_ms);
        sqlite3_bind_int64(q, 2, now);
        rc = sqlite3_step(q);
    }
    if (rc == SQLITE_DONE) {
        sqlite3_reset(q);
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_NOT_FOUND;
    }
    if (rc != SQLITE_ROW) {
        err = fail(s, "claim");
        sqlite3_reset(q);
        pthread_mutex_unlock(&s->mu);
        return err;
    }
    out->id = sqlite3_column_int64(q, 0);
    out->kind = col_dup(q, 1);
    out->delivery_id = col_dup(q, 2);
    out->target = col_dup(q, 3);
    out->attempts = sqlite3_column_int(q, 4);
    out->lease_until = now + lease_ms;
    err = copy_blob(q, 5, &out->body, CRCR_MAX_BODY_DEFAULT * 4u);
    /* Step to completion so the UPDATE ... RETURNING is finished before the next statement. */
    while (sqlite3_step(q) == SQLITE_ROW) {
    }
    sqlite3_reset(q);
    if (!err && (!out->kind || !out->target))
        err = CRCR_E_NOMEM;
    if (!err && out->delivery_id) {
        sqlite3_stmt *p = stmt(s, S_GET_DELIVERY_PAYLOAD);
        if (!p) {
            err = CRCR_E_STORE;
        } else {
            bind_text(p, 1, out->delivery_id);
            if (sqlite3_step(p) == SQLITE_ROW) {
                out->event = col_dup(p, 0);
                err = copy_blob(p, 1, &out->payload, CRCR_MAX_BODY_DEFAULT * 4u);
                out->pr_number = sqlite3_column_int64(p, 2);
                out->head_sha = col_dup(p, 3);
            }
            sqlite3_reset(p);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (err)
        store_job_free(out);
    return err;
}

static crcr_err sq_next_due(store *st, int64_t *due)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_E_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_NEXT_DUE);
    if (!q)
        err = CRCR_E_STORE;
    else if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) {
        *due = sqlite3_column_int64(q, 0);
        err = CRCR_OK;
    }
    if (q)
        sqlite3_reset(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_job_finish(store *st, int64_t id, int64_t lease, const char *state,
                              long http_status, const char *error, const char *note,
                              const char *body, size_t body_len, int64_t now)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_FINISH);
    if (!q) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    bind_text(q, 1, state);
    if (http_status > 0)
        sqlite3_bind_int64(q, 2, http_status);
    else
        sqlite3_bind_null(q, 2);
    bind_text(q, 3, error && *error ? error : NULL);
    bind_text(q, 4, note && *note ? note : NULL);
    if (body)
        sqlite3_bind_blob(q, 5, body, (int)body_len, SQLITE_STATIC);
    else
        sqlite3_bind_null(q, 5);
    sqlite3_bind_int64(q, 6, now);
    sqlite3_bind_int64(q, 7, id);
    sqlite3_bind_int64(q, 8, lease);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "finish");
    else if (sqlite3_changes(s->db) == 0)
        err = CRCR_E_STATE; /* the lease was lost: see store.h */
    sqlite3_reset(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_job_retry(store *st, int64_t id, int64_t lease, int64_t next_at,
                             bool count_attempt, long http_status, const char *error)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_RETRY);
    if (!q) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    sqlite3_bind_int(q, 1, count_attempt ? 1 : 0);
    sqlite3_bind_int64(q, 2, next_at);
    if (http_status > 0)
        sqlite3_bind_int64(q, 3, http_status);
    else
        sqlite3_bind_null(q, 3);
    bind_text(q, 4, error && *error ? error : NULL);
    sqlite3_bind_int64(q, 5, id);
    sqlite3_bind_int64(q, 6, lease);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "retry");
    else if (sqlite3_changes(s->db) == 0)
        err = CRCR_E_STATE;
    sqlite3_reset(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_job_renew(store *st, int64_t id, int64_t lease, int64_t new_lease)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_RENEW);
    if (!q) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    sqlite3_bind_int64(q, 1, new_lease);
    sqlite3_bind_int64(q, 2, id);
    sqlite3_bind_int64(q, 3, lease);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "renew");
    else if (sqlite3_changes(s->db) == 0)
        err = CRCR_E_STATE;
    sqlite3_reset(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now,
                             int *n)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    sqlite3_stmt *q = NULL;
    *n = 0;
    pthread_mutex_lock(&s->mu);
    if (exec(s, "BEGIN IMMEDIATE") != CRCR_OK) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM deliveries WHERE delivery_id=?", -1, &q, NULL) !=
        SQLITE_OK) {
        err = fail(s, "redeliver");
        goto out;
    }
    bind_text(q, 1, delivery_id);
    int found = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    q = NULL;
    if (!found) {
        err = CRCR_E_NOT_FOUND;
        goto out;
    }
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE outbox SET state='queued', attempts=0, next_attempt_at=?1, "
                           "done_at=NULL, lease_until=NULL, last_error=NULL, last_status=NULL, "
                           "note=NULL WHERE kind='dispatch' AND delivery_id=?2 AND "
                           "state<>'running' AND (?3 IS NULL OR lower(target)=lower(?3))",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "redeliver");
        goto out;
    }
    sqlite3_bind_int64(q, 1, now);
    bind_text(q, 2, delivery_id);
    bind_text(q, 3, repo);
    if (sqlite3_step(q) != SQLITE_DONE) {
        err = fail(s, "redeliver");
        goto out;
    }
    *n = sqlite3_changes(s->db);
    sqlite3_finalize(q);
    q = NULL;
    if (*n == 0 && repo) {
        /* A repo that had no row for this delivery (added to the allowlist since): create one. */
        if (sqlite3_prepare_v2(s->db,
                               "INSERT INTO outbox(kind, delivery_id, target, state, attempts, "
                               "next_attempt_at, created_at) VALUES ('dispatch',?1,?2,'queued',0,"
                               "?3,?3) ON CONFLICT DO NOTHING",
                               -1, &q, NULL) != SQLITE_OK) {
            err = fail(s, "redeliver");
            goto out;
        }
        bind_text(q, 1, delivery_id);
        bind_text(q, 2, repo);
        sqlite3_bind_int64(q, 3, now);
        if (sqlite3_step(q) != SQLITE_DONE)
            err = fail(s, "redeliver");
        else
            *n = sqlite3_changes(s->db);
    }
out:
    sqlite3_finalize(q);
    exec(s, err ? "ROLLBACK" : "COMMIT");
    pthread_mutex_unlock(&s->mu);
    return err;
}

static void fill_delivery_row(sqlite3_stmt *q, store_delivery_row *r)
{
    r->delivery_id = col_text(q, 0);
    r->event = col_text(q, 1);
    r->action = col_text(q, 2);
    r->upstream_repo = col_text(q, 3);
    r->pr_number = sqlite3_column_int64(q, 4);
    r->head_sha = col_text(q, 5);
    r->ref = col_text(q, 6);
    r->received_at = sqlite3_column_int64(q, 7);
    r->payload_bytes = (size_t)sqlite3_column_int64(q, 8);
    r->status = col_text(q, 9);
}

static crcr_err sq_list_deliveries(store *st, const store_filter *f,
                                   int (*fn)(void *ctx, const store_delivery_row *row), void *ctx)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    /* A PR filter is written as a plain equality so that deliveries_pr serves it. */
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "SELECT d.delivery_id, d.event, d.action, d.upstream_repo, d.pr_number, d.head_sha, "
             "d.ref, d.received_at, d.payload_bytes, d.status FROM deliveries d WHERE "
             "(?1 IS NULL OR EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND "
             "o.state=?1)) AND (?2 IS NULL OR EXISTS (SELECT 1 FROM outbox o WHERE "
             "o.delivery_id=d.delivery_id AND lower(o.target)=lower(?2))) AND %s "
             "ORDER BY d.received_at DESC, d.rowid DESC LIMIT ?3",
             f && f->pr_number ? "d.pr_number=?4" : "?4=0");
    int slot;
    sqlite3 *db = reader(s, &slot);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "list");
        goto out;
    }
    bind_text(q, 1, f ? f->state : NULL);
    bind_text(q, 2, f ? f->repo : NULL);
    sqlite3_bind_int(q, 3, f && f->limit > 0 ? f->limit : 50);
    sqlite3_bind_int64(q, 4, f ? f->pr_number : 0);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        store_delivery_row r;
        fill_delivery_row(q, &r);
        if (fn(ctx, &r))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        err = fail_db(db, "list");
out:
    sqlite3_finalize(q);
    reader_done(s, slot);
    return err;
}

static crcr_err sq_get_delivery(store *st, const char *delivery_id,
                                void (*dfn)(void *ctx, const store_delivery_row *row,
                                            const char *payload, size_t payload_len),
                                void (*jfn)(void *ctx, const store_job_row *row), void *ctx)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    int slot;
    sqlite3 *db = reader(s, &slot);
    /* Without dfn only the rows are wanted: the primary key's index answers "does it exist"
     * without reading the delivery row (tens of KB of payload before `status`). */
    if (sqlite3_prepare_v2(db,
                           dfn ? "SELECT delivery_id, event, action, upstream_repo, pr_number, "
                                 "head_sha, ref, received_at, payload_bytes, status, payload FROM "
                                 "deliveries WHERE delivery_id=?"
                               : "SELECT 1 FROM deliveries WHERE delivery_id=?",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "get");
        goto out;
    }
    bind_text(q, 1, delivery_id);
    if (sqlite3_step(q) != SQLITE_ROW) {
        err = CRCR_E_NOT_FOUND;
        goto out;
    }
    if (dfn) {
        store_delivery_row r;
        fill_delivery_row(q, &r);
        dfn(ctx, &r, sqlite3_column_blob(q, 10), (size_t)sqlite3_column_bytes(q, 10));
    }
    sqlite3_finalize(q);
    q = NULL;
    if (!jfn)
        goto out;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, kind, delivery_id, target, state, last_error, note, "
                           "attempts, last_status, next_attempt_at, created_at, done_at, body "
                           "FROM outbox WHERE delivery_id=? ORDER BY id",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "get");
        goto out;
    }
    bind_text(q, 1, delivery_id);
    while (sqlite3_step(q) == SQLITE_ROW) {
        store_job_row j;
        j.id = sqlite3_column_int64(q, 0);
        j.kind = col_text(q, 1);
        j.delivery_id = col_text(q, 2);
        j.target = col_text(q, 3);
        j.state = col_text(q, 4);
        j.last_error = col_text(q, 5);
        j.note = col_text(q, 6);
        j.attempts = sqlite3_column_int(q, 7);
        j.last_status = (long)sqlite3_column_int64(q, 8);
        j.next_attempt_at = sqlite3_column_int64(q, 9);
        j.created_at = sqlite3_column_int64(q, 10);
        j.done_at = sqlite3_column_int64(q, 11);
        j.body = sqlite3_column_blob(q, 12);
        j.body_len = (size_t)sqlite3_column_bytes(q, 12);
        jfn(ctx, &j);
    }
out:
    sqlite3_finalize(q);
    reader_done(s, slot);
    return err;
}

static crcr_err sq_outbox_stats(store *st, store_outbox_stats *out)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    memset(out, 0, sizeof(*out));
    int slot;
    sqlite3 *db = reader(s, &slot);
    if (sqlite3_prepare_v2(db,
                           "SELECT state, count(*), min(next_attempt_at) FROM outbox "
                           "GROUP BY state",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "stats");
        goto out;
    }
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *state = col_text(q, 0);
        int64_t c = sqlite3_column_int64(q, 1);
        store_stats_count(out, state, c, sqlite3_column_int64(q, 2));
    }
out:
    sqlite3_finalize(q);
    reader_done(s, slot);
    return err;
}

static crcr_err sq_kv_get(store *st, const char *key, buf_t *value, int64_t now)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_E_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_KV_GET);
    if (!q) {
        err = CRCR_E_STORE;
    } else {
        bind_text(q, 1, key);
        sqlite3_bind_int64(q, 2, now);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            const void *p = sqlite3_column_blob(q, 0);
            int n = sqlite3_column_bytes(q, 0);
            err = buf_append(value, p ? p : "", (size_t)n);
        } else if (rc != SQLITE_DONE) {
            err = fail(s, "kv_get"); /* a failed read is not "no value" */
        }
        sqlite3_reset(q);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_kv_put(store *st, const char *key, const char *value, size_t len,
                          int64_t expires_at)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *q = stmt(s, S_KV_PUT);
    if (!q) {
        err = CRCR_E_STORE;
    } else {
        bind_text(q, 1, key);
        sqlite3_bind_blob(q, 2, value, (int)len, SQLITE_STATIC);
        sqlite3_bind_int64(q, 3, expires_at);
        if (sqlite3_step(q) != SQLITE_DONE)
            err = fail(s, "kv_put");
        sqlite3_reset(q);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_retention(store *st, int64_t before, int *n)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    *n = 0;
    pthread_mutex_lock(&s->mu);
    if (exec(s, "BEGIN IMMEDIATE") != CRCR_OK) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    /* Deliveries old enough and with nothing left to send go, with their outbox rows. */
    static const char *const steps[] = {
        "CREATE TEMP TABLE IF NOT EXISTS old_deliveries(id TEXT PRIMARY KEY)",
        "DELETE FROM old_deliveries",
        "INSERT INTO old_deliveries SELECT delivery_id FROM deliveries d WHERE received_at < ?1 "
        "AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND "
        "o.state IN ('queued','running'))",
        "DELETE FROM outbox WHERE delivery_id IN (SELECT id FROM old_deliveries)",
        "DELETE FROM deliveries WHERE delivery_id IN (SELECT id FROM old_deliveries)",
        "DELETE FROM kv WHERE expires_at<>0 AND expires_at < ?1",
        "DELETE FROM runs WHERE updated_at < ?1 AND state<>'in_progress'",
        "DELETE FROM labels_wanted WHERE created_at < ?1",
        "DELETE FROM callback_rejections WHERE at < ?1",
        "DELETE FROM budgets WHERE expires_at < ?1",
        /* Finished rows of no delivery (nightly HUD forwards) go after the same time. */
        "DELETE FROM outbox WHERE done_at < ?1 AND state IN ('sent','dry_run','dead') AND NOT "
        "EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id=outbox.delivery_id)",
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !err; i++) {
        if (sqlite3_prepare_v2(s->db, steps[i], -1, &q, NULL) != SQLITE_OK) {
            err = fail(s, "retention");
            break;
        }
        if (sqlite3_bind_parameter_count(q) > 0)
            sqlite3_bind_int64(q, 1, before);
        if (sqlite3_step(q) != SQLITE_DONE)
            err = fail(s, "retention");
        else if (i == 4)
            *n = sqlite3_changes(s->db);
        sqlite3_finalize(q);
        q = NULL;
    }
    exec(s, err ? "ROLLBACK" : "COMMIT");
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* ---- runs ---- */

static int64_t col_i64_or(sqlite3_stmt *q, int i, int64_t dflt)
{
    return sqlite3_column_type(q, i) == SQLITE_NULL ? dflt : sqlite3_column_int64(q, i);
}

static const char *src_text(void *q, int col)
{
    return col_text(q, col);
}

static int64_t src_i64(void *q, int col, int64_t dflt)
{
    return col_i64_or(q, col, dflt);
}

static const void *src_blob(void *q, int col, size_t *len)
{
    *len = (size_t)sqlite3_column_bytes(q, col);
    return sqlite3_column_blob(q, col);
}

static void fill_run_row(sqlite3_stmt *q, store_run_row *r)
{
    run_row_source src = {src_text, src_i64, src_blob, q};
    run_row_fill(r, &src);
}

/* Binds the run upsert's parameters (run_row_params) without copies: the caller clears the
 * bindings after the step. */
static void bind_run_params(sqlite3_stmt *q, const run_param *p)
{
    for (int i = 0; i < RUN_UPSERT_PARAMS; i++) {
        if (p[i].is_null)
            sqlite3_bind_null(q, i + 1);
        else if (p[i].kind == RUN_P_TEXT)
            sqlite3_bind_text(q, i + 1, p[i].text, -1, SQLITE_STATIC);
        else if (p[i].kind == RUN_P_INT)
            sqlite3_bind_int64(q, i + 1, p[i].i);
        else
            sqlite3_bind_blob(q, i + 1, p[i].blob, (int)p[i].len, SQLITE_STATIC);
    }
}

/* Inserts jobs for `delivery_id` with the prepared insert statement; caller holds the lock and
 * an open transaction. */
static crcr_err insert_jobs(sqlite_store *s, const char *delivery_id, const store_new_job *jobs,
                            size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *q = stmt(s, S_INS_JOB);
        if (!q)
            return CRCR_E_STORE;
        bind_text(q, 1, jobs[i].kind);
        bind_text(q, 2, delivery_id);
        bind_text(q, 3, jobs[i].target);
        if (jobs[i].body)
            sqlite3_bind_blob(q, 4, jobs[i].body, (int)jobs[i].body_len, SQLITE_STATIC);
        else
            sqlite3_bind_null(q, 4);
        sqlite3_bind_int64(q, 5, jobs[i].due_at ? jobs[i].due_at : now);
        sqlite3_bind_int64(q, 6, now);
        bind_text(q, 7, jobs[i].seq_key);
        int rc = sqlite3_step(q);
        sqlite3_reset(q);
        if (rc == SQLITE_CONSTRAINT)
            continue; /* a dispatch row that exists already */
        if (rc != SQLITE_DONE)
            return fail(s, "insert_jobs");
    }
    return CRCR_OK;
}

#define RUN_EFFECTS_MAX 8

/*
 * One sliding-window rate-limit hit (store_rate_hit's contract) inside the caller's transaction
 * (s->mu held). Expired hits are deleted and rate_counts keeps how many are left, so a hit costs
 * a few indexed statements however many hits the window holds (the bench runs with a limit of
 * 2e9 per minute; count(*) over the window grew with the rate).
 */
static crcr_err rate_hit_tx(sqlite_store *s, const char *repo, int64_t now, int64_t window_ms,
                            long limit, bool *allowed, int64_t *retry_after_ms)
{
    *allowed = false;
    *retry_after_ms = 0;
    sqlite3_stmt *q = stmt(s, S_RATE_COUNT);
    if (!q)
        return CRCR_E_STORE;
    bind_text(q, 1, repo);
    int rc = sqlite3_step(q);
    bool have = rc == SQLITE_ROW;
    int64_t count = have ? sqlite3_column_int64(q, 0) : 0;
    sqlite3_reset(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return fail(s, "rate");
    if (!(q = stmt(s, S_RATE_EXPIRE)))
        return CRCR_E_STORE;
    bind_text(q, 1, repo);
    sqlite3_bind_int64(q, 2, now - window_ms);
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    if (rc != SQLITE_DONE)
        return fail(s, "rate");
    int expired = sqlite3_changes(s->db);
    int64_t recounted = 0, oldest = now;
    if (!have) { /* first hit since rate_counts existed: count what the table holds */
        if (!(q = stmt(s, S_RATE_COUNT_INIT)))
            return CRCR_E_STORE;
        bind_text(q, 1, repo);
        rc = sqlite3_step(q);
        recounted = rc == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
        sqlite3_reset(q);
        if (rc != SQLITE_ROW)
            return fail(s, "rate");
    }
    int64_t n = rate_window_count(have, count, expired, recounted);
    if (n >= limit) {
        if (!(q = stmt(s, S_RATE_OLDEST)))
            return CRCR_E_STORE;
        bind_text(q, 1, repo);
        if (sqlite3_step(q) == SQLITE_ROW)
            oldest = col_i64_or(q, 0, now);
        sqlite3_reset(q);
    }
    count = rate_window_decide(n, limit, oldest, now, window_ms, allowed, retry_after_ms);
    if (*allowed) {
        if (!(q = stmt(s, S_RATE_INSERT)))
            return CRCR_E_STORE;
        bind_text(q, 1, repo);
        sqlite3_bind_int64(q, 2, now);
        rc = sqlite3_step(q);
        sqlite3_reset(q);
        if (rc != SQLITE_DONE)
            return fail(s, "rate");
    }
    if (!have || expired || *allowed) {
        if (!(q = stmt(s, S_RATE_COUNT_SET)))
            return CRCR_E_STORE;
        bind_text(q, 1, repo);
        sqlite3_bind_int64(q, 2, count);
        rc = sqlite3_step(q);
        sqlite3_reset(q);
        if (rc != SQLITE_DONE)
            return fail(s, "rate");
    }
    return CRCR_OK;
}

/* One transition (store_run_apply's contract without the rate hit) inside the caller's
 * transaction (s->mu held). Writes nothing unless it returns CRCR_OK with !res->duplicate; on a
 * failure after a write the caller undoes its savepoint. */
static crcr_err run_apply_tx(sqlite_store *s, const store_run_update *u, store_effects_fn effects,
                             void *ctx, store_run_result *res, char *reason, size_t reasonsz)
{
    int64_t dispatched_at = 0;
    sqlite3_stmt *q;
    if (!u->single_shot) {
        if (!(q = stmt(s, S_RUN_DISPATCH)))
            return CRCR_E_STORE;
        bind_text(q, 1, u->key.delivery_id);
        bind_text(q, 2, u->key.repo);
        int rc = sqlite3_step(q);
        if (rc == SQLITE_ROW)
            dispatched_at = sqlite3_column_int64(q, 0);
        sqlite3_reset(q);
        if (rc == SQLITE_DONE)
            return CRCR_E_NOT_FOUND;
        if (rc != SQLITE_ROW)
            return fail(s, "run_apply");
    }
    /* The current state of this key. */
    if (!(q = stmt(s, S_RUN_STATE)))
        return CRCR_E_STORE;
    bind_text(q, 1, u->key.delivery_id);
    bind_text(q, 2, u->key.repo);
    sqlite3_bind_int64(q, 3, u->key.run_id);
    sqlite3_bind_int64(q, 4, u->key.run_attempt);
    bind_text(q, 5, u->key.job_name ? u->key.job_name : "");
    bind_text(q, 6, u->key.workflow_name ? u->key.workflow_name : "");
    run_prev prev = {0};
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        prev.exists = true;
        snprintf(prev.state, sizeof(prev.state), "%s", col_text(q, 0) ? col_text(q, 0) : "");
        prev.has_conclusion = col_text(q, 1) != NULL;
        if (prev.has_conclusion)
            snprintf(prev.conclusion, sizeof(prev.conclusion), "%s", col_text(q, 1));
        prev.started_at = col_i64_or(q, 2, 0);
    }
    sqlite3_reset(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return fail(s, "run_apply");

    run_outcome o = run_state_next(&prev, u, dispatched_at, res, reason, reasonsz);
    if (o == RUN_INVALID)
        return CRCR_E_STATE;
    if (o == RUN_DUPLICATE)
        return CRCR_OK;

    if (!(q = stmt(s, S_RUN_UPSERT)))
        return CRCR_E_STORE;
    run_param params[RUN_UPSERT_PARAMS];
    run_row_params(u, res, params);
    bind_run_params(q, params);
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q); /* bound without copies */
    if (rc != SQLITE_DONE)
        return fail(s, "run_apply");
    crcr_err err = CRCR_OK;
    if (effects) {
        store_new_job jobs[RUN_EFFECTS_MAX];
        size_t n = 0;
        err = effects(ctx, res, jobs, RUN_EFFECTS_MAX, &n);
        if (!err)
            err = insert_jobs(s, u->key.delivery_id, jobs, n, u->now);
    }
    return err;
}

typedef struct run_apply_args {
    const store_run_update *u;
    store_effects_fn effects;
    void *ctx;
    store_run_result *res;
    char *reason;
    size_t reasonsz;
} run_apply_args;

/* A callback's request of a group commit: its rate hit (when asked), then its transition. A
 * counted hit stays counted when the transition is refused or fails, as with a separate
 * store_rate_hit: the transition runs in a savepoint of its own. */
static crcr_err run_apply_group(sqlite_store *s, group_req *r)
{
    run_apply_args *a = r->arg;
    const store_run_update *u = a->u;
    if (u->rate_limit > 0) {
        bool allowed = false;
        crcr_err err = rate_hit_tx(s, u->key.repo, u->now, u->rate_window_ms, u->rate_limit,
                                   &allowed, &a->res->retry_after_ms);
        if (err || !allowed) {
            a->res->rate_limited = !err;
            return err;
        }
        if (exec(s, "SAVEPOINT run") != CRCR_OK)
            return CRCR_E_STORE;
        r->keep = true;
    }
    crcr_err err = run_apply_tx(s, u, a->effects, a->ctx, a->res, a->reason, a->reasonsz);
    if (r->keep) {
        if (err)
            exec(s, "ROLLBACK TO run");
        exec(s, "RELEASE run");
    }
    return err;
}

/* Concurrent transitions share one durable commit (group_commit). */
static crcr_err sq_run_apply(store *st, const store_run_update *u, store_effects_fn effects,
                             void *ctx, store_run_result *res, char *reason, size_t reasonsz)
{
    memset(res, 0, sizeof(*res));
    res->queue_ms = -1;
    res->exec_ms = -1;
    run_apply_args a = {u, effects, ctx, res, reason, reasonsz};
    group_req me = {.apply = run_apply_group, .arg = &a};
    crcr_err err = group_commit(SS(st), &me);
    if (err == CRCR_E_STORE) { /* nothing of it is stored */
        res->duplicate = res->rate_limited = false;
    }
    return err;
}

static crcr_err run_query(sqlite_store *s, const char *sql, const char *a, const char *b, int64_t i,
                          void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "runs");
        goto out;
    }
    int np = sqlite3_bind_parameter_count(q);
    if (np >= 1)
        bind_text(q, 1, a);
    if (np >= 2)
        bind_text(q, 2, b);
    if (np >= 3)
        sqlite3_bind_int64(q, 3, i);
    while (sqlite3_step(q) == SQLITE_ROW) {
        store_run_row r;
        fill_run_row(q, &r);
        fn(ctx, &r);
    }
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_runs_for_sha(store *st, const char *head_sha, const char *repo,
                                void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    /* The latest row per (workflow, job): highest run_attempt, then last update. */
    return run_query(SS(st),
                     "SELECT " RUN_COLUMNS " FROM runs r WHERE head_sha=?1 AND repo=?2 AND "
                     "NOT EXISTS (SELECT 1 FROM runs o WHERE o.head_sha=r.head_sha AND "
                     "o.repo=r.repo AND o.workflow_name IS r.workflow_name AND "
                     "o.job_name=r.job_name AND (o.updated_at>r.updated_at OR "
                     "(o.updated_at=r.updated_at AND o.rowid>r.rowid))) ORDER BY workflow_name, "
                     "job_name",
                     head_sha, repo, 0, fn, ctx);
}

static crcr_err sq_zombies(store *st, int64_t started_before, int limit,
                           void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT " RUN_COLUMNS " FROM runs WHERE state='in_progress' AND "
                           "started_at < ?1 ORDER BY started_at LIMIT ?2",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "zombies");
        goto out;
    }
    sqlite3_bind_int64(q, 1, started_before);
    sqlite3_bind_int(q, 2, limit > 0 ? limit : 100);
    while (sqlite3_step(q) == SQLITE_ROW) {
        store_run_row r;
        fill_run_row(q, &r);
        fn(ctx, &r);
    }
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err simple_exec(sqlite_store *s, const char *sql, const char *a, const char *b,
                            int64_t i, int *changes, bool *row)
{
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "exec");
        goto out;
    }
    bind_text(q, 1, a);
    bind_text(q, 2, b);
    sqlite3_bind_int64(q, 3, i);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        err = fail(s, "exec");
    if (row)
        *row = rc == SQLITE_ROW;
    if (changes)
        *changes = sqlite3_changes(s->db);
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    return simple_exec(SS(st),
                       "INSERT INTO labels_wanted(head_sha, repo, created_at) VALUES (?1,?2,?3) "
                       "ON CONFLICT(head_sha, repo) DO UPDATE SET created_at=excluded.created_at",
                       head_sha, repo, now, NULL, NULL);
}

static crcr_err sq_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since)
{
    bool row = false;
    crcr_err err = simple_exec(SS(st),
                               "SELECT 1 FROM labels_wanted WHERE head_sha=?1 AND repo=?2 AND "
                               "created_at >= ?3",
                               head_sha, repo, since, NULL, &row);
    if (err)
        return err;
    return row ? CRCR_OK : CRCR_E_NOT_FOUND;
}

static crcr_err sq_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                            bool *allowed, int64_t *retry_after_ms)
{
    sqlite_store *s = SS(st);
    *allowed = false;
    *retry_after_ms = 0;
    pthread_mutex_lock(&s->mu);
    if (exec(s, "BEGIN IMMEDIATE") != CRCR_OK) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    crcr_err err = rate_hit_tx(s, repo, now, window_ms, limit, allowed, retry_after_ms);
    if (err || exec(s, "COMMIT") != CRCR_OK) {
        exec(s, "ROLLBACK");
        *allowed = false;
        err = CRCR_E_STORE;
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    sqlite_store *s = SS(st);
    pthread_mutex_lock(&s->mu);
    if (exec(s, "BEGIN IMMEDIATE") != CRCR_OK) {
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    int64_t now = n ? jobs[0].due_at : 0;
    crcr_err err = insert_jobs(s, delivery_id, jobs, n, now);
    exec(s, err ? "ROLLBACK" : "COMMIT");
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_lease(store *st, const char *name, const char *owner, int64_t now,
                         int64_t ttl_ms, bool *held)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    char key[128];
    snprintf(key, sizeof(key), "lease:%s", name);
    *held = false;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO kv(key, value, expires_at) VALUES (?1, ?2, ?3) ON "
                           "CONFLICT(key) DO UPDATE SET value=excluded.value, "
                           "expires_at=excluded.expires_at WHERE kv.value=excluded.value OR "
                           "kv.expires_at < ?4",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "lease");
        goto out;
    }
    bind_text(q, 1, key);
    sqlite3_bind_blob(q, 2, owner, (int)strlen(owner), SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, now + ttl_ms);
    sqlite3_bind_int64(q, 4, now);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "lease");
    else
        *held = sqlite3_changes(s->db) > 0;
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* The WHERE clause names only the filters that are set, so that SQLite picks the matching index
 * (runs_hud or runs_repo for a repo, runs_pr for a PR, runs_sha for a sha): a generic
 * "(?1 IS NULL OR repo=?1)" form makes it scan every row, and reading `updated_at` (stored after
 * the payload) walks each row's overflow pages. A repo listing without payloads is answered from
 * the covering index runs_hud alone (named, because the planner cannot tell that the smaller
 * runs_repo costs a table row of tens of KB per hit). Parameters keep their numbers whatever is
 * left out. */
static crcr_err sq_list_runs(store *st, const store_run_filter *f,
                             void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    static const store_run_filter none = {0};
    if (!f)
        f = &none;
    /* A sha or PR narrows more than a repo does: runs_sha / runs_pr then serve, named because
     * the planner otherwise walks runs_repo to save the final sort. */
    bool hud_index = f->no_payload && f->repo && !f->head_sha && !f->pr_number;
    const char *index = hud_index      ? " INDEXED BY runs_hud"
                        : f->head_sha  ? " INDEXED BY runs_sha"
                        : f->pr_number ? " INDEXED BY runs_pr"
                                       : "";
    char sql[1024];
    size_t n = 0;
    n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                          "SELECT " RUN_COLUMNS_NO_PAYLOAD ", %s FROM runs%s WHERE 1=1",
                          f->no_payload ? "NULL" : "payload", index);
    if (f->since > 0)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, " AND updated_at >= ?5");
    if (f->repo)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, " AND repo=?1");
    if (f->pr_number)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, " AND pr_number=?2");
    if (f->head_sha)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, " AND head_sha=?3");
    if (f->kind == 1)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                              " AND COALESCE(event_type,'') NOT IN ('nightly','periodic')");
    else if (f->kind == 2)
        n +=
            (size_t)snprintf(sql + n, sizeof(sql) - n, " AND event_type IN ('nightly','periodic')");
    /* From runs_hud, rows of the same millisecond come in index order: a rowid tie-break would
     * make SQLite sort each run of equal times apart (a sorter reset per row). */
    snprintf(sql + n, sizeof(sql) - n, " ORDER BY updated_at DESC%s LIMIT ?6 OFFSET ?7",
             hud_index ? "" : ", rowid DESC");

    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    int slot;
    sqlite3 *db = reader(s, &slot);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "list_runs");
        goto out;
    }
    if (f->repo)
        bind_text(q, 1, f->repo);
    if (f->pr_number)
        sqlite3_bind_int64(q, 2, f->pr_number);
    if (f->head_sha)
        bind_text(q, 3, f->head_sha);
    if (f->since > 0)
        sqlite3_bind_int64(q, 5, f->since);
    sqlite3_bind_int(q, 6, run_list_limit(f));
    sqlite3_bind_int(q, 7, run_list_offset(f));
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        store_run_row r;
        fill_run_row(q, &r);
        fn(ctx, &r);
    }
    if (rc != SQLITE_DONE)
        err = fail_db(db, "list_runs");
out:
    sqlite3_finalize(q);
    reader_done(s, slot);
    return err;
}

static crcr_err sq_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO callback_rejections(repo, at, status) VALUES (?1, ?2, ?3)",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "rejected");
        goto out;
    }
    bind_text(q, 1, repo);
    sqlite3_bind_int64(q, 2, now);
    sqlite3_bind_int(q, 3, status);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "rejected");
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_callback_rejections(store *st, const char *repo, int64_t since, int64_t *n)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    *n = 0;
    int slot;
    sqlite3 *db = reader(s, &slot);
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM callback_rejections WHERE repo=?1 AND at>=?2",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "rejections");
        goto out;
    }
    bind_text(q, 1, repo);
    sqlite3_bind_int64(q, 2, since);
    if (sqlite3_step(q) == SQLITE_ROW)
        *n = sqlite3_column_int64(q, 0);
out:
    sqlite3_finalize(q);
    reader_done(s, slot);
    return err;
}

/* ---- dispatch records, identity pins, budgets ---- */

static crcr_err sq_dispatch_get(store *st, const char *delivery_id, const char *repo,
                                bool with_payload, store_dispatch *out)
{
    sqlite_store *s = SS(st);
    crcr_err err = CRCR_OK;
    out->dispatched_at = out->pr_number = 0;
    out->head_sha[0] = out->event[0] = '\0';
    /* The hot reader: a read on the callback path never waits for the writer or a listing. */
    bool hot = s->rdb[SQ_HOT_READER] != NULL;
    sqlite3 *db = hot ? s->rdb[SQ_HOT_READER] : s->db;
    pthread_mutex_t *mu = hot ? &s->rmu[SQ_HOT_READER] : &s->mu;
    pthread_mutex_lock(mu);
    sqlite3_stmt *q = hot ? s->hot_dispatch : NULL;
    if (!q &&
        sqlite3_prepare_v2(db,
                           "SELECT COALESCE(o.done_at, o.created_at), d.pr_number, d.head_sha, "
                           "d.event, CASE WHEN ?3 THEN d.payload END FROM outbox o JOIN "
                           "deliveries d ON d.delivery_id=o.delivery_id WHERE "
                           "o.kind='dispatch' AND o.delivery_id=?1 AND "
                           "lower(o.target)=lower(?2) LIMIT 1",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail_db(db, "dispatch_get");
        pthread_mutex_unlock(mu);
        return err;
    }
    if (hot)
        s->hot_dispatch = q;
    bind_text(q, 1, delivery_id);
    bind_text(q, 2, repo);
    sqlite3_bind_int(q, 3, with_payload ? 1 : 0);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        err = CRCR_E_NOT_FOUND;
    } else if (rc != SQLITE_ROW) {
        err = fail_db(db, "dispatch_get");
    } else {
        out->dispatched_at = sqlite3_column_int64(q, 0);
        out->pr_number = sqlite3_column_int64(q, 1);
        snprintf(out->head_sha, sizeof(out->head_sha), "%s", col_text(q, 2) ? col_text(q, 2) : "");
        snprintf(out->event, sizeof(out->event), "%s", col_text(q, 3) ? col_text(q, 3) : "");
        if (with_payload)
            err = copy_blob(q, 4, &out->payload, out->payload.max);
    }
    if (hot)
        sqlite3_reset(q);
    else
        sqlite3_finalize(q);
    pthread_mutex_unlock(mu);
    return err;
}

static void fill_identity_row(sqlite3_stmt *q, store_identity_row *r)
{
    r->repo = col_text(q, 0);
    r->repository_id = col_text(q, 1);
    r->owner_id = col_text(q, 2);
    r->pinned_at = sqlite3_column_int64(q, 3);
    r->last_seen_at = sqlite3_column_int64(q, 4);
}

static crcr_err sq_identity_pin(store *st, const char *repo, const char *repository_id,
                                const char *owner_id, int64_t now, store_pin_outcome *outcome,
                                void (*seen)(void *ctx, const store_identity_row *row), void *ctx)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    bool have_ids = *repository_id && *owner_id;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT repo, repository_id, owner_id, pinned_at, last_seen_at FROM "
                           "repo_identity WHERE repo=?1",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "identity_pin");
        goto out;
    }
    bind_text(q, 1, repo);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        bool same = have_ids && strcmp(col_text(q, 1), repository_id) == 0 &&
                    strcmp(col_text(q, 2), owner_id) == 0;
        *outcome = same ? STORE_PIN_MATCH : STORE_PIN_MISMATCH;
        if (!same && seen) {
            store_identity_row r;
            fill_identity_row(q, &r);
            seen(ctx, &r);
        }
        goto out;
    }
    if (rc != SQLITE_DONE) {
        err = fail(s, "identity_pin");
        goto out;
    }
    if (!have_ids) {
        *outcome = STORE_PIN_NONE;
        goto out;
    }
    sqlite3_finalize(q);
    q = NULL;
    /* First callback of this name: pin it. A concurrent pin of the same name keeps the first. */
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO repo_identity(repo, repository_id, owner_id, pinned_at, "
                           "last_seen_at) VALUES (?1,?2,?3,?4,?4) ON CONFLICT(repo) DO NOTHING",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "identity_pin");
        goto out;
    }
    bind_text(q, 1, repo);
    bind_text(q, 2, repository_id);
    bind_text(q, 3, owner_id);
    sqlite3_bind_int64(q, 4, now);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "identity_pin");
    else
        *outcome = STORE_PIN_MATCH;
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_identity_list(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                                 void *ctx)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT repo, repository_id, owner_id, pinned_at, last_seen_at FROM "
                           "repo_identity ORDER BY lower(repo)",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "identity_list");
        goto out;
    }
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        store_identity_row r;
        fill_identity_row(q, &r);
        fn(ctx, &r);
    }
    if (rc != SQLITE_DONE)
        err = fail(s, "identity_list");
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_identity_reset(store *st, const char *repo)
{
    int changes = 0;
    crcr_err err = simple_exec(SS(st), "DELETE FROM repo_identity WHERE repo=?1", repo, NULL, 0,
                               &changes, NULL);
    if (err)
        return err;
    return changes > 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

static crcr_err sq_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                               int64_t expires_at, bool *allowed)
{
    sqlite_store *s = SS(st);
    sqlite3_stmt *q = NULL;
    crcr_err err = CRCR_OK;
    *allowed = false;
    if (amount > limit)
        return CRCR_OK;
    pthread_mutex_lock(&s->mu);
    /* One statement: a new budget starts at `amount`; an existing one grows only within limit. */
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO budgets(name, used, expires_at) VALUES (?1, ?2, ?3) ON "
                           "CONFLICT(name) DO UPDATE SET used=used+excluded.used WHERE "
                           "used+excluded.used <= ?4",
                           -1, &q, NULL) != SQLITE_OK) {
        err = fail(s, "budget_take");
        goto out;
    }
    bind_text(q, 1, name);
    sqlite3_bind_int64(q, 2, amount);
    sqlite3_bind_int64(q, 3, expires_at);
    sqlite3_bind_int64(q, 4, limit);
    if (sqlite3_step(q) != SQLITE_DONE)
        err = fail(s, "budget_take");
    else
        *allowed = sqlite3_changes(s->db) > 0;
out:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* Rows a crashed predecessor left running: the serving process is the only worker on the file,
 * so they are due again at once instead of after their lease. */
/* Takes the serve lock (see the header comment). CRCR_E_STATE when another process holds it. */
static crcr_err take_serve_lock(sqlite_store *s)
{
    const char *db = sqlite3_db_filename(s->db, "main");
    if (!db || !*db || s->serve_lock >= 0)
        return CRCR_OK; /* in-memory or temporary database: nobody else can open it */
    char path[CRCR_PATH_LOCK_MAX];
    int n = snprintf(path, sizeof(path), "%s-serve.lock", db);
    if (n < 0 || (size_t)n >= sizeof(path)) {
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

static crcr_err sq_recover(store *st)
{
    sqlite_store *s = SS(st);
    crcr_err lk = take_serve_lock(s);
    if (lk)
        return lk;
    pthread_mutex_lock(&s->mu);
    crcr_err err =
        exec(s, "UPDATE outbox SET state='queued', lease_until=NULL WHERE state='running'");
    int n = err ? 0 : sqlite3_changes(s->db);
    pthread_mutex_unlock(&s->mu);
    if (n > 0) { /* a crashed predecessor's rows: due now, not after their lease */
        char rows[16];
        snprintf(rows, sizeof(rows), "%d", n);
        LOG_INFO("store.recovered", "rows", rows, NULL);
    }
    return err;
}

static const store_ops SQLITE_OPS = {
    .recover = sq_recover,
    .close = sq_close,
    .ping = sq_ping,
    .ingest = sq_ingest,
    .claim = sq_claim,
    .next_due = sq_next_due,
    .job_finish = sq_job_finish,
    .job_retry = sq_job_retry,
    .job_renew = sq_job_renew,
    .redeliver = sq_redeliver,
    .list_deliveries = sq_list_deliveries,
    .get_delivery = sq_get_delivery,
    .outbox_stats = sq_outbox_stats,
    .kv_get = sq_kv_get,
    .kv_put = sq_kv_put,
    .retention = sq_retention,
    .run_apply = sq_run_apply,
    .runs_for_sha = sq_runs_for_sha,
    .zombies = sq_zombies,
    .wanted_set = sq_wanted_set,
    .wanted_get = sq_wanted_get,
    .rate_hit = sq_rate_hit,
    .enqueue = sq_enqueue,
    .lease = sq_lease,
    .list_runs = sq_list_runs,
    .callback_rejected = sq_callback_rejected,
    .callback_rejections = sq_callback_rejections,
    .dispatch_get = sq_dispatch_get,
    .identity_pin = sq_identity_pin,
    .identity_list = sq_identity_list,
    .identity_reset = sq_identity_reset,
    .budget_take = sq_budget_take,
};

/* Reads the recorded schema version (0 for a new database). */
static int schema_version(sqlite_store *s)
{
    sqlite3_stmt *q = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT max(version) FROM schema_version", -1, &q, NULL) ==
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
    char p[CRCR_PATH_LOCK_MAX];
    int n = snprintf(p, sizeof(p), "%s%s", path, suffix);
    struct stat sb;
    if (n > 0 && (size_t)n < sizeof(p) && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) &&
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

crcr_err store_sqlite_open(const char *path, store **out, char *err, size_t errsz)
{
    sqlite_store *s = calloc(1, sizeof(*s));
    if (!s)
        return CRCR_E_NOMEM;
    s->base.ops = &SQLITE_OPS;
    s->serve_lock = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    pthread_cond_init(&s->gcv, NULL);
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
    int rc = sqlite3_open_v2(
        path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errsz, "CRCR_STORE: cannot open '%s': %s", path,
                 s->db ? sqlite3_errmsg(s->db) : "out of memory");
        sqlite3_close(s->db);
        free(s);
        return CRCR_E_STORE;
    }
    sqlite3_busy_timeout(s->db, 5000);
    crcr_err e = exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                         "PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;");
    if (!e)
        e = exec(s, "BEGIN IMMEDIATE");
    if (!e)
        e = exec(s, SCHEMA);
    int v = e ? -1 : schema_version(s);
    if (!e && v > CRCR_SCHEMA_VERSION) {
        exec(s, "ROLLBACK");
        snprintf(err, errsz,
                 "CRCR_STORE: schema version %d is newer than this crcr understands (%d); "
                 "upgrade crcr",
                 v, CRCR_SCHEMA_VERSION);
        sq_close(&s->base);
        return CRCR_E_CONFIG;
    }
    if (!e && v < CRCR_SCHEMA_VERSION) {
        char sql[96];
        snprintf(sql, sizeof(sql),
                 "DELETE FROM schema_version; INSERT INTO schema_version "
                 "VALUES (%d)",
                 CRCR_SCHEMA_VERSION);
        e = exec(s, sql);
    }
    if (!e)
        e = exec(s, "COMMIT");
    if (e) {
        snprintf(err, errsz, "CRCR_STORE: cannot initialise '%s': %s", path, sqlite3_errmsg(s->db));
        sq_close(&s->base);
        return CRCR_E_STORE;
    }
    if (on_disk) { /* the -wal and -shm files SQLite has just made */
        narrow_mode(path, "-wal");
        narrow_mode(path, "-shm");
    }
    if (on_disk && open_readers(s, path, err, errsz) != CRCR_OK) {
        sq_close(&s->base);
        return CRCR_E_STORE;
    }
    *out = &s->base;
    return CRCR_OK;
}

/* ---- backup (store_backup) ---- */

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
    if (sqlite3_prepare_v2(dst, "SELECT max(version) FROM schema_version", -1, &q, NULL) ==
            SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        *version = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
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
