/*
 * store_pg.h - what the files of the PostgreSQL store share (internal to store_pg*.c): the store's
 * struct, the pool's borrowed connections, the statement helpers and the operations each file
 * defines for the table in store_pg.c.
 *
 *   store_pg.c         connections and the pool, statements, schema and migrations, open/close
 *   store_pg_live.c    the listener connection: instance liveness (store_recover) and waking
 *                      workers (store_wait_for_work)
 *   store_pg_outbox.c  deliveries, the outbox (ingest, claims, finish/retry/renew, redeliver,
 *                      listings, statistics), kv and leases, retention
 *   store_pg_runs.c    run transitions, the rate limit, runs listings, zombies, labels,
 *                      rejections, dispatch records, identity pins, budgets
 *   store_pg_reconcile.c  the reconciler's redelivery records
 *   store_pg_supersede.c  supersession and Depends-On pairs (§3.12, §3.13)
 *
 * An operation runs on one borrowed connection (pg_with_conn), retried once on a fresh one when
 * the connection broke before anything reached the caller; single statements go through pg_run.
 */
#ifndef CRCR_STORE_PG_H
#define CRCR_STORE_PG_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "crcr_limits.h"
#include "run_state.h"
#include "store_impl.h"

/* Parameters of one statement (the runs upsert has 25). */
#define PG_PARAMS_MAX 32
/* A claimed row's body or payload; the same cap as the SQLite store. */
#define PG_JOB_BYTES_MAX (CRCR_MAX_BODY_DEFAULT * 4u)
/* Longest PostgreSQL error text put into a log line. */
#define PG_ERRTEXT_MAX 300
/* Channel of NOTIFY at commit of new outbox rows, which the listener waits on. The payload is
 * "<writer tag>:<rows>": listeners skip their own process's notifications (its writers wake its
 * workers directly) and report the rows others announced (store_wait_for_work). */
#define PG_CHANNEL "crcr_outbox"
/* Hex digits of a process's writer tag (random per store handle). */
#define PG_TAG_HEX 16
/* Advisory lock class of instance liveness: an instance holds (class, its id) ('crcr'). */
#define PG_LIVE_CLASS 1668440946
/* An instance judges others' liveness only once it has held its own lock this long: after a
 * server restart every instance needs a moment (its listener's reconnect) to take its lock again.
 * No wait when the server had been up PG_LIVE_SERVER_UP_MS when the lock was taken (a restarted
 * instance on a server that stayed up: the usual crash). */
#define PG_LIVE_GRACE_MS 3000
/* Advisory lock class under which instances change their shares of the GitHub budget
 * (store_gh_slots), one at a time ('crcs'). */
#define PG_SLOTS_CLASS 1668440947
#define PG_LIVE_SERVER_UP_MS 60000

typedef struct pg_store {
    struct store base;
    char *uri; /* owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t n;       /* pool size */
    PGconn **conns; /* owned, NULL until first used or after a failure */
    bool *busy;     /* slot lent out */
    bool *relaxed;  /* the slot's session runs with synchronous_commit=off (pg_with_conn_relaxed) */
    struct pg_prepared *prepared; /* owned: per slot, the statements its session has prepared */
    atomic_bool down;             /* the last connection attempt failed (logged once per outage) */
    pthread_mutex_t lmu;
    PGconn *listener; /* LISTEN connection of store_wait_for_work and the instance's liveness
                         session, guarded by lmu */
    int64_t listen_retry_at;
    atomic_int live_id;         /* this instance's id (store_recover); 0: not an instance */
    _Atomic int64_t live_since; /* clock_mono_ms() when the listener took the instance lock;
                                   0 while it is not held */
    atomic_bool live_server_up; /* the server had been up PG_LIVE_SERVER_UP_MS by then */
    char tag[PG_TAG_HEX + 1];   /* this handle's writer tag in NOTIFY payloads (PG_CHANNEL) */
} pg_store;

static inline pg_store *pg_store_of(store *st)
{
    return (pg_store *)st;
}

/* Commands one session has sent in libpq's pipeline mode without reading their results, at most
 * (pg_queue reads them first when the next would not fit): a settle's 32 updates with their first
 * preparations, BEGIN, the announcement and COMMIT fit. */
#define PG_PENDING_MAX 48

/* What a pending command's result is (store_pg.c). */
enum { PG_PEND_QUERY, PG_PEND_BEGIN, PG_PEND_PREPARE };

/* A command sent in pipeline mode whose result is still to be read. */
typedef struct pg_pending {
    unsigned char what; /* PG_PEND_* */
    bool unique_dup;    /* a unique violation is CRCR_E_DUPLICATE, not an error (pg_queue_new) */
    size_t prep;        /* PG_PEND_PREPARE: the statement's index in the slot's prepared list */
    store_row_fn row;   /* a statement's rows, count (both may be NULL) */
    void *ctx;
    int64_t *rows;
} pg_pending;

/* One borrowed connection and what an operation did with it. */
typedef struct pgx {
    pg_store *s;
    PGconn *c;
    size_t slot;
    const char *op;
    bool relaxed;     /* asked for a connection with synchronous_commit=off */
    bool called_back; /* a caller-visible callback ran: the operation must not be repeated */
    bool begin_due;   /* pg_begin: BEGIN goes with the transaction's first statement */
    bool piped;       /* in pipeline mode: pend[0..npend) sent, their results not read yet */
    bool pipe_broken; /* a command could not be sent: the session is unusable */
    size_t npend;
    pg_pending pend[PG_PENDING_MAX];
    int64_t notify_rows; /* outbox rows to announce at COMMIT (pg_notify_rows) */
} pgx;

/* ---- connections ---- */

/* Opens a connection for `uri` (caller owns it: PQfinish), or NULL with the reason in `why`. */
PGconn *pg_connect(const char *uri, char *why, size_t whysz);
/* The write fault (store.h) a SQLSTATE means: 53100 disk_full, 58030 io_error; else none. */
store_fault_kind pg_fault_kind(const char *sqlstate);
/* Copies a libpq message onto one line, bounded, for a log field. */
void pg_one_line(const char *msg, char *out, size_t outsz);

typedef crcr_err (*pg_op)(pgx *x, void *arg);

/* Announces `rows` new outbox rows to every listener at commit (pg_notify on PG_CHANNEL with this
 * handle's tag): counted here, sent by pg_finish_tx with COMMIT, so inside a transaction only. */
crcr_err pg_notify_rows(pgx *x, int64_t rows);

/* Runs `fn` on a borrowed connection. When it fails because the connection broke (the server
 * restarted, the network dropped it) and nothing of it reached the caller (x->called_back), it
 * runs once more on a fresh connection: a stale pooled connection must not turn into an error. */
crcr_err pg_with_conn(pg_store *s, const char *op, pg_op fn, void *arg);
/* pg_with_conn for the outbox's bookkeeping (claims; finish, retry and renew of a claimed row)
 * and the callbacks' rate hits (a hit the server loses in a crash is one request not counted):
 * on a connection whose session has synchronous_commit=off. Its commits are not waited for on
 * the server's disk: a crash of the server can undo the last moments of them, which puts a row
 * back to an earlier state (sent again: at least once), never loses one; the same bargain as
 * SQLite's synchronous=NORMAL for these writes. Everything else keeps synchronous commits. */
crcr_err pg_with_conn_relaxed(pg_store *s, const char *op, pg_op fn, void *arg);
/* pg_run on such a connection. */
crcr_err pg_run_relaxed(pg_store *s, const char *op, const char *sql, const store_param *v, int n,
                        store_row_fn row, void *ctx, int64_t *rows);
/* pg_with_conn with `fn` inside a transaction: COMMIT when it returns CRCR_OK, else ROLLBACK. */
crcr_err pg_with_tx(pg_store *s, const char *op, pg_op fn, void *arg);
/* pg_with_tx on a connection of pg_with_conn_relaxed. */
crcr_err pg_with_tx_relaxed(pg_store *s, const char *op, pg_op fn, void *arg);

/* ---- statements ---- */

/* Runs `sql` with v[0..n) as $1..$n, results in binary, calling `row` (may be NULL) with each row
 * of the result (store_impl.h) until it returns non-zero. *rows (may be NULL) receives the rows
 * the statement changed or returned. CRCR_E_STORE (logged) when it fails. */
crcr_err pg_query(pgx *x, const char *sql, const store_param *v, int n, store_row_fn row, void *ctx,
                  int64_t *rows);
/* pg_query without waiting, inside a transaction: `sql` is sent now (libpq's pipeline mode, and
 * with the transaction's BEGIN when that is due) and its result read with the next statement that
 * waits (pg_query, pg_result, pg_cmd) or with COMMIT (pg_finish_tx), all in one round trip: `row`,
 * `ctx` and `rows` must stay valid until then. A failure of it is that later call's, and the
 * statements after it in the same round trip do not run. Runs at once, as pg_query, when libpq
 * has no pipeline mode. */
crcr_err pg_queue(pgx *x, const char *sql, const store_param *v, int n, store_row_fn row, void *ctx,
                  int64_t *rows);
/* pg_queue of an INSERT whose unique violation means "already stored": that failure is
 * CRCR_E_DUPLICATE and not logged. */
crcr_err pg_queue_new(pgx *x, const char *sql, const store_param *v, int n);
/* One statement as a whole operation (pg_with_conn under `op`). */
crcr_err pg_run(pg_store *s, const char *op, const char *sql, const store_param *v, int n,
                store_row_fn row, void *ctx, int64_t *rows);
/* The result of `sql` itself (caller PQclear()s), to read after further statements; NULL
 * (logged) when it failed. */
PGresult *pg_result(pgx *x, const char *sql, const store_param *v, int n);
/* Calls `row` with each row of `r` until it returns non-zero. */
void pg_each(const PGresult *r, store_row_fn row, void *ctx);
/* Runs a parameterless command (COMMIT, NOTIFY ...). */
crcr_err pg_cmd(pgx *x, const char *sql);
/* Starts a transaction: BEGIN is sent with its first statement, in one round trip (libpq's
 * pipeline mode), not alone; a transaction that runs none sends nothing (pg_finish_tx). */
void pg_begin(pgx *x);
/* Ends the transaction: COMMIT when err is CRCR_OK and !discard, ROLLBACK otherwise. */
crcr_err pg_finish_tx(pgx *x, crcr_err err, bool discard);

/* ---- operations ---- */

/* Inserts outbox rows of `delivery_id` inside the caller's transaction; an existing dispatch row
 * of the same target is kept (not an error). A job without due_at is due `now`. Signals waiting
 * workers at commit. */
crcr_err pg_insert_jobs(pgx *x, const char *delivery_id, const store_new_job *jobs, size_t n,
                        int64_t now);

/* The advisory lock key of an upstream PR, `param` a parameter holding its number ("$1"): one
 * text for pg_lock_pr, the ingest that takes the lock in its delivery's INSERT and a run's
 * transitions, which must all name the same lock. */
#define PG_PR_LOCK_KEY(param) "hashtextextended('crcr.pr:' || " param "::bigint::text, 0)"

/* Supersession (store_pg_supersede.c). The advisory lock of upstream PR `pr` for the
 * transaction: exclusive for a supersession, shared for a callback's transition of one of its
 * runs (pr <= 0: none taken). */
crcr_err pg_lock_pr(pgx *x, int64_t pr, bool exclusive);
/* The pairs rows of the paired dispatch rows among jobs[0..n) of `delivery_id` (PR `pr`). */
crcr_err pg_insert_pairs(pgx *x, const char *delivery_id, int64_t pr, const store_new_job *jobs,
                         size_t n, int64_t now);
/* The supersession `sup` by the new delivery `by` (PR `pr`, head `head_sha`) for the dispatch
 * rows among jobs[0..n), inside the caller's transaction, which holds the PR's lock. */
crcr_err pg_supersede(pgx *x, const char *by, int64_t pr, const char *head_sha,
                      const store_new_job *jobs, size_t n, store_supersede *sup, int64_t now);
crcr_err pg_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
                            int64_t now, const store_new_job *job, store_supersede *sup,
                            store_pair_hit *hits, size_t max, size_t *n);

/* The operations of store_pg_live.c, store_pg_outbox.c, store_pg_runs.c and
 * store_pg_reconcile.c. */
crcr_err pg_recover(store *st);
crcr_err pg_wait_for_work(store *st, int64_t timeout_ms, size_t *rows);
extern const store_outbox_ops PG_OUTBOX_OPS;
extern const store_run_ops PG_RUN_OPS;
extern const store_reconcile_ops PG_RECONCILE_OPS;

#endif
