/*
 * store_sqlite.h - what the files of the SQLite store share (internal to store_sqlite*.c): the
 * store's struct, its connections and their locks, the statement helpers, the group commit and
 * the operations each file defines for the table in store_sqlite.c.
 *
 *   store_sqlite.c         open, schema, connections, statements, group commit, recovery
 *   store_sqlite_outbox.c  deliveries, the outbox (ingest, claims, finish/retry/renew, redeliver,
 *                          listings, statistics), kv and leases, retention
 *   store_sqlite_runs.c    run transitions, the rate limit, runs listings, zombies, labels,
 *                          rejections, dispatch records, identity pins, budgets
 *   store_sqlite_backup.c  store_backup of a SQLite file
 *   store_sqlite_reconcile.c  the reconciler's redelivery records
 *   store_sqlite_supersede.c  supersession and Depends-On pairs (§3.12, §3.13)
 *
 * Locks: s->mu guards the writer's connection `db` and its cached statements; each reader has a
 * lock of its own (sq_reader). A helper that is given a connection or a statement expects its
 * lock held; sq_locked, sq_listing and sq_begin take it.
 */
#ifndef CRCR_STORE_SQLITE_H
#define CRCR_STORE_SQLITE_H

#include <pthread.h>
#include <semaphore.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "run_state.h"
#include "store_impl.h"

/* Read-only connections for listings (see store_sqlite.c), and one more for the reads on the
 * webhook and callback paths (a dispatch record), which must never wait behind a listing. */
#define SQ_READERS 2
#define SQ_HOT_READER SQ_READERS

/* Statements prepared once and kept (sq_cached), one slot each: a slot has one call site, which
 * passes its SQL. */
enum {
    SQ_INS_DELIVERY,
    SQ_INS_JOB,
    SQ_CLAIM_BATCH,
    SQ_CLAIM_EXPIRED,
    SQ_LEASE_FLOOR,
    SQ_CLAIM_DELIVERY,
    SQ_NEXT_DUE,
    SQ_FINISH,
    SQ_RETRY,
    SQ_RENEW,
    SQ_RECORD,
    SQ_KV_GET,
    SQ_KV_PUT,
    SQ_RUN_DISPATCH,
    SQ_RUN_STATE,
    SQ_RUN_UPSERT,
    SQ_ECHO_GET,
    SQ_ECHO_PUT,
    SQ_RATE_EXPIRE,
    SQ_RATE_COUNT,
    SQ_RATE_COUNT_INIT,
    SQ_RATE_COUNT_SET,
    SQ_RATE_OLDEST,
    SQ_RATE_INSERT,
    SQ_SEQ_EXISTS,
    SQ_RUN_ENDED,
    SQ_INS_PAIR,
    SQ_INS_END,
    SQ_WITHDRAW,
    SQ_WITHDRAW_ID,
    SQ_ENDED_DISPATCHES,
    SQ_PR_OPEN_DISPATCHES,
    SQ_ENDED_RUNS,
    SQ_END_RUN,
    SQ_HEAD_GET,
    SQ_HEAD_SET,
    /* the writer's transaction statements, last: sq_tx, which has their SQL */
    SQ_TX_BEGIN,
    SQ_TX_COMMIT,
    SQ_TX_SAVEPOINT,
    SQ_TX_RELEASE,
    SQ_SLOTS
};

typedef struct sqlite_store sqlite_store;

/* A write waiting for its group commit (sq_group_commit); lives on the calling thread's stack.
 * `apply` writes it inside the group's transaction with s->mu held, as if in its own savepoint:
 * what it wrote is undone when it returns an error unless it set `keep` (what it wrote before
 * failing must still commit). `apply` may run more than once for one commit (the group applied
 * again after another request failed having written: apply_group in store_sqlite.c), each time
 * from the state before it: it sets its outputs afresh, it does not add to them. */
typedef struct sq_group_req {
    crcr_err (*apply)(sqlite_store *s, struct sq_group_req *r);
    void *arg;
    bool relaxed; /* need not survive a power loss (outbox bookkeeping): a group of only such
                   * requests commits with synchronous=NORMAL */
    bool keep;
    store_visible *visible; /* an ingest's early hand-over (store.h), or NULL */
    crcr_err result;
    bool done;                 /* set by the leader before it posts `wake` */
    sem_t wake;                /* posted once: done, or lead the next group */
    struct sq_group_req *next; /* guarded by gmu */
} sq_group_req;

struct sqlite_store {
    struct store base;
    sqlite3 *db;
    pthread_mutex_t mu;
    sqlite3_stmt *stmts[SQ_SLOTS];
    /* Under mu: no running row's lease ends before this (INT64_MIN: not known, INT64_MAX: no
     * running row). Every lease granted or renewed lowers it; a claim looks for rows whose lease
     * ran out only once the clock has passed it (store_sqlite_outbox.c, sq_claim). */
    int64_t lease_floor;
    /* Group commit (sq_group_commit): queue and leader flag, guarded by gmu. */
    pthread_mutex_t gmu;
    sq_group_req *ghead, *gtail;
    bool gleading;
    int serve_lock; /* descriptor holding the serve lock (sq_recover), -1 when not taken */
    /* The WAL file, read-only: a durable group commits at synchronous=NORMAL and is made durable
     * by an fdatasync of this descriptor after the write lock is released (sq_group_commit);
     * -1 (no file of its own: in-memory, URI) and such groups commit at synchronous=FULL. */
    int walfd;
    /* The sync stage (sq_group_commit), guarded by smu: groups committed so far (their WAL
     * writes done), groups the last finished fdatasync covered, whether one runs (at most one
     * does; scv tells its end). sync_failed is set when an fdatasync of the WAL failed: the
     * kernel may have dropped the pages it could not write, so no later commit can be trusted on
     * disk; every durable group then fails and the store reports itself down (sq_ping) until the
     * relay is restarted. */
    pthread_mutex_t smu;
    pthread_cond_t scv;
    uint64_t committed, synced;
    bool syncing, sync_failed;
    /* Listing connections, each with its lock; rdb[i] NULL when there are none (in-memory
     * databases), and listings then use db under mu. */
    sqlite3 *rdb[SQ_READERS + 1];
    pthread_mutex_t rmu[SQ_READERS + 1];
    sqlite3_stmt *hot_dispatch, *hot_identity; /* on rdb[SQ_HOT_READER], under its rmu */
    /* The checkpointer (store_sqlite_checkpoint.c): its connection and thread (none for a store
     * without a file of its own), woken through ckmu/ckcv when ckpt_due; how many checkpoints it
     * ran and how many the writer ran in a commit instead. */
    sqlite3 *ckdb;
    pthread_t ckthread;
    bool ckpt_running;
    pthread_mutex_t ckmu;
    pthread_cond_t ckcv;
    bool ckpt_due, ckpt_stop;
    atomic_int ckpt_mark; /* the WAL's frames when the last checkpoint ran */
    atomic_uint_fast64_t ckpt_background, ckpt_inline;
};

static inline sqlite_store *sq_store(store *st)
{
    return (sqlite_store *)st;
}

/* ---- statements ---- */

/* Binds v[0..n) to ?1..?n, steps `q` calling `row` (may be NULL: rows are passed over) with each
 * row (store_impl.h), then resets it and clears its bindings. Returns the last step's code:
 * SQLITE_DONE at the end, SQLITE_ROW when `row` stopped it, else the error (not logged; the
 * connection keeps its message). */
int sq_step_raw(sqlite3_stmt *q, const store_param *v, int n, store_row_fn row, void *ctx);
/* The same with the outcome as an error: CRCR_E_STORE (logged with `op`) for a failed step. */
crcr_err sq_step(sqlite3 *db, sqlite3_stmt *q, const char *op, const store_param *v, int n,
                 store_row_fn row, void *ctx);
/* Prepares `sql` once on `db` (its lock held), runs it as sq_step does and finalizes it. */
crcr_err sq_run(sqlite3 *db, const char *op, const char *sql, const store_param *v, int n,
                store_row_fn row, void *ctx);
/* The statement of `slot`, prepared from `sql` on first use, reset and unbound; NULL on error
 * (logged). Writer's connection, s->mu held. */
sqlite3_stmt *sq_stmt(sqlite_store *s, int slot, const char *sql);
/* A statement on the writer's connection (s->mu held), run as sq_step does: the cached one of
 * `slot`, or with slot SQ_ONCE, `sql` prepared for this run only. */
#define SQ_ONCE (-1)
crcr_err sq_cached(sqlite_store *s, int slot, const char *op, const char *sql, const store_param *v,
                   int n, store_row_fn row, void *ctx);
/* sq_cached taking s->mu; *changes (may be NULL) receives the rows the statement changed. */
crcr_err sq_locked(sqlite_store *s, int slot, const char *op, const char *sql, const store_param *v,
                   int n, store_row_fn row, void *ctx, int *changes);
/* sq_run for a listing, on a reader (sq_reader). */
crcr_err sq_listing(sqlite_store *s, const char *op, const char *sql, const store_param *v, int n,
                    store_row_fn row, void *ctx);

/* Runs `sql` (no parameters) on the writer's connection, s->mu held. */
crcr_err sq_exec(sqlite_store *s, const char *sql);
/* Logs SQLite's message about `op` on `db`; returns CRCR_E_STORE. */
crcr_err sq_fail(sqlite3 *db, const char *op);
/* Takes s->mu and begins a write transaction (BEGIN IMMEDIATE); on failure nothing is held. */
crcr_err sq_begin(sqlite_store *s);
/* Ends it: COMMIT when `err` is CRCR_OK (CRCR_E_STORE when that fails), else ROLLBACK; releases
 * s->mu. Returns the final error. */
crcr_err sq_end(sqlite_store *s, crcr_err err);

/* A connection for a listing, locked: a free reader, else the first reader (waiting for it), else
 * the writer's connection when there are no readers. Release with sq_reader_done(). */
sqlite3 *sq_reader(sqlite_store *s, int *slot);
void sq_reader_done(sqlite_store *s, int slot);

/* The schema version a database records (0 for a new one), -1 when it cannot be read. */
int sq_schema_version(sqlite3 *db);

/* ---- group commit ---- */

/* Queues `me` for the next group commit (see store_sqlite.c) and returns once it is done;
 * me->result tells. */
crcr_err sq_group_commit(sqlite_store *s, sq_group_req *me);

/* The WAL's checkpoints on a thread of their own (store_sqlite_checkpoint.c): start once the
 * store is open (`path` its file), stop before its connections close (also when never started). */
crcr_err sq_checkpointer_start(sqlite_store *s, const char *path, char *err, size_t errsz);
void sq_checkpointer_stop(sqlite_store *s);
/* Checkpoints so far: run by the checkpointer, and by the writer in a commit (its backstop). */
void sq_checkpoints(store *st, uint64_t *background, uint64_t *in_commit);

/* ---- operations ---- */

/* Inserts outbox rows of `delivery_id` inside the caller's transaction (s->mu held); a dispatch
 * row that exists already is kept, not an error. A job without due_at is due `now`. */
crcr_err sq_insert_jobs(sqlite_store *s, const char *delivery_id, const store_new_job *jobs,
                        size_t n, int64_t now);

/* The pairs rows of the paired dispatch rows among jobs[0..n) of `delivery_id` (PR `pr`), inside
 * the caller's transaction (store_sqlite_supersede.c). */
crcr_err sq_insert_pairs(sqlite_store *s, const char *delivery_id, int64_t pr,
                         const store_new_job *jobs, size_t n, int64_t now);
/* The supersession `sup` (store.h) by the new delivery `by` of PR `pr` at head `head_sha`, for
 * the dispatch rows among jobs[0..n), inside the caller's transaction; counts into `sup`. */
crcr_err sq_supersede(sqlite_store *s, const char *by, int64_t pr, const char *head_sha,
                      const store_new_job *jobs, size_t n, store_supersede *sup, int64_t now);
/* store_pair_redispatch (its own group commit). */
crcr_err sq_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
                            int64_t now, const store_new_job *job, store_supersede *sup,
                            store_pair_hit *hits, size_t max, size_t *n);

/* The operations of store_sqlite_outbox.c, store_sqlite_runs.c and store_sqlite_reconcile.c. */
extern const store_outbox_ops SQ_OUTBOX_OPS;
extern const store_run_ops SQ_RUN_OPS;
extern const store_reconcile_ops SQ_RECONCILE_OPS;

#endif
