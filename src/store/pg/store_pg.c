/*
 * store_pg.c - the PostgreSQL store (libpq), shared by several relay instances: connections and
 * the pool, statements, schema and migrations, open and close. The operations live in
 * store_pg_outbox.c and store_pg_runs.c, the listener (liveness, wake-ups) in store_pg_live.c;
 * what they share is in store_pg.h.
 *
 * Same semantics as the SQLite store, operation for operation; what differs is how several
 * processes stay correct on one database:
 *  - outbox rows are claimed with `FOR UPDATE SKIP LOCKED` and a lease, so instances never take
 *    the same row. A claim records its instance (outbox.owner): store_recover gives the serving
 *    process an id (a sequence) and its listener connection takes the session advisory lock
 *    (PG_LIVE_CLASS, id), held for the life of that session. The lock, not a connection of the
 *    pool, is the instance's liveness: the server drops it as soon as the process dies (its socket
 *    closes; server-side TCP keepalives cover a vanished host), and a claimer sees that with a
 *    shared try-lock on the owner's key, so a dead instance's rows are claimable within a second
 *    instead of after their lease, while a live instance keeps its rows whichever pooled
 *    connection finishes them. The lease stays the fence of finish/retry/renew;
 *  - a callback transition and a rate-limit hit take a transaction-scoped advisory lock on their
 *    key, so concurrent identical callbacks on different instances apply exactly once;
 *  - named leases (periodic work) are one atomic INSERT ... ON CONFLICT ... WHERE;
 *  - writes that add outbox rows send NOTIFY crcr_outbox at commit with the writer's tag and the
 *    number of rows, and store_wait_for_work waits on a dedicated LISTEN connection: other
 *    instances wake their workers, the writer's own process skips its notification (its writers
 *    wake it).
 *
 * Connections: a pool of CRCR_STORE_POOL connections (sized by app.c), opened lazily. Each
 * operation borrows one for its duration. A connection found broken is dropped and the operation
 * retried once on a fresh one (when nothing of it is visible to the caller yet), so the store
 * recovers by itself when the database comes back; while it is away operations return CRCR_E_STORE.
 *
 * Round trips: a statement whose result the operation needs before going on waits for it; one
 * whose result can wait (an insert, an update whose row count is read at the end) is queued with
 * pg_queue: sent at once in libpq's pipeline mode and read with the next statement that waits,
 * or with COMMIT. So a transaction costs a round trip per decision, not per statement: an ingest
 * sends its BEGIN, its delivery, its rows and its supersession's first read together, then its
 * announcement (pg_notify) with COMMIT (four or five round trips before); a settle of 32
 * outcomes is one round trip (33 before); a callback's transition two or three (five to eight).
 * Bench, PostgreSQL ingest at 16 connections: 1,020-1,221 -> 1,196-1,718 webhooks/s in four
 * alternated pairs; callbacks 770-976 -> 950-1,199 per s (bench/RESULTS.md).
 *
 * Bytes (payloads, bodies, kv values) travel as BYTEA in binary parameters and binary results;
 * every result is requested in binary, so integers are decoded from network byte order. Text
 * parameters are made valid UTF-8 first (free text from peers must never make a write fail); the
 * check is a few lines written here because libpq exposes no encoding validator.
 * Repository names compare case-insensitively through lower() and expression indexes.
 */
#include <endian.h>
#include <libpq-fe.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "store_pg.h"
#include "utf8.h"

#define PG_POOL_DEFAULT 8
#define PG_POOL_MAX 256
/* How long an operation waits for a free pooled connection before failing. */
#define PG_ACQUIRE_TIMEOUT_MS 5000
/* Advisory lock key serialising schema creation/migration across starting instances. */
#define PG_MIGRATION_LOCK 7165426221306201601LL
/* Statements one session prepares at most; texts beyond run unprepared. Every text given to
 * pg_result is a constant, a few dozen in all (the two built at run time, NOTIFY and the disk
 * probe, go through pg_cmd). */
#define PG_PREPARED_MAX 128

/* Prepared statements. Every query of the store is one of a few dozen fixed texts, each run many
 * times on every pooled connection, and PostgreSQL parses, analyses and plans a text anew on each
 * PQexecParams. So a session prepares a text the first time it runs it (named "crcr_<n>", n its
 * index here; in the same round trip as that first run) and executes it by name afterwards. The
 * list belongs to the pool slot and is emptied whenever the slot opens a new session (acquire). A
 * connection pooler must run in session mode (deployment.md), which keeps prepared statements. */
typedef struct pg_prepared {
    size_t n;
    char *sql[PG_PREPARED_MAX]; /* owned copies of the texts, in preparation order */
    /* op_bit() of each operation the session ran: set (release) and read (acquire) under s->mu,
     * emptied with the list while the slot is lent (prepared_forget) */
    uint64_t ops;
} pg_prepared;

/* One bit for an operation's name (pgx.op): FNV-1a, 64 bits wide. Two names may share a bit;
 * the bit only steers acquire's choice of slot. */
static uint64_t op_bit(const char *op)
{
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)(op ? op : ""); *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return 1ULL << (h & 63);
}

/* ---- connections ---- */

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* "relation already exists, skipping" and the like */
}

void pg_one_line(const char *msg, char *out, size_t outsz)
{
    size_t o = 0;
    for (const char *p = msg ? msg : ""; *p && o + 1 < outsz; p++)
        out[o++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

/*
 * Opens a connection for `uri`. Defaults that the URI may override come before it (connect and
 * keepalive timeouts); client_encoding comes after it (the store speaks UTF-8). Returns a
 * connection the caller owns (PQfinish), or NULL with the reason in `why`.
 */
PGconn *pg_connect(const char *uri, char *why, size_t whysz)
{
    const char *const kw[] = {"connect_timeout",
                              "keepalives",
                              "keepalives_idle",
                              "keepalives_interval",
                              "keepalives_count",
                              "application_name",
                              "dbname",
                              "client_encoding",
                              NULL};
    const char *const val[] = {"5", "1", "30", "10", "3", "crcr", uri, "UTF8", NULL};
    PGconn *c = PQconnectdbParams(kw, val, 1);
    if (!c) {
        snprintf(why, whysz, "out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        pg_one_line(PQerrorMessage(c), why, whysz);
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, quiet_notices, NULL);
    return c;
}

/* Notes a connection attempt's outcome; logs the start and the end of an outage once each. */
static void note_connect(pg_store *s, bool ok, const char *why)
{
    if (ok) {
        if (atomic_exchange(&s->down, false))
            LOG_INFO("store.pg.available", NULL, NULL);
    } else if (!atomic_exchange(&s->down, true)) {
        LOG_ERROR("store.pg.unavailable", "error", why, NULL);
    }
}

/* Forgets a slot's prepared statements (its session is gone). */
static void prepared_forget(pg_prepared *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->sql[i]);
    p->n = 0;
    p->ops = 0;
}

static crcr_err pipe_sync(pgx *x, PGresult **last, bool run);

/*
 * Borrows a pooled connection into x->c (lent to the caller until release(); the pool keeps
 * ownership), connecting the slot when it has none, and sets its session's synchronous_commit
 * to what x->relaxed asks. CRCR_E_STORE when no slot frees up within PG_ACQUIRE_TIMEOUT_MS or the
 * database cannot be reached.
 *
 * Among the free slots it prefers, in this order: an open session in the right mode that ran
 * the same operation before (x->op), one in the right mode, an empty slot, one in the other mode
 * that ran the operation, any open one.
 * - A session that ran the operation has its statements prepared and planned. Their first run on
 *   a session parsed and planned them: the ingest of a fan-out to 100 repositories took 2.4-5 ms
 *   more than its 1.9 ms warm in a statement log.
 * - A session keeps its mode while the pool has room: switching costs a round trip each time,
 *   and two outbox workers alternating outcomes (relaxed) with durable writes on two sessions
 *   switched at every operation. The switches also moved the one session that had run the ingest
 *   out of its mode, so the first warm fan-out after a cold one took a session that had not.
 */
static crcr_err acquire(pg_store *s, pgx *x)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += PG_ACQUIRE_TIMEOUT_MS / 1000;
    uint64_t bit = op_bit(x->op);
    pthread_mutex_lock(&s->mu);
    size_t pick = s->n;
    for (;;) {
        int best = 0; /* the preference above, 5 (right mode, ran the op) down to 1 */
        for (size_t i = 0; i < s->n && best < 5; i++) {
            if (s->busy[i])
                continue;
            bool ran = (s->prepared[i].ops & bit) != 0;
            int rank = !s->conns[i] ? 3 : s->relaxed[i] == x->relaxed ? 4 + ran : 1 + ran;
            if (rank > best) {
                best = rank;
                pick = i;
            }
        }
        if (pick < s->n)
            break;
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) {
            pthread_mutex_unlock(&s->mu);
            LOG_ERROR("store.pg.pool_exhausted", "op", x->op, NULL);
            return CRCR_E_STORE;
        }
    }
    s->busy[pick] = true;
    PGconn *c = s->conns[pick];
    bool relaxed = s->relaxed[pick];
    s->conns[pick] = NULL;
    pthread_mutex_unlock(&s->mu);

    if (c && PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        c = NULL;
    }
    if (!c) {
        char why[PG_ERRTEXT_MAX];
        c = pg_connect(s->uri, why, sizeof(why));
        note_connect(s, c != NULL, why);
        relaxed = false;                     /* a new session: the server's setting (on) */
        prepared_forget(&s->prepared[pick]); /* and none of its statements prepared */
    }
    if (c && relaxed != x->relaxed) {
        PGresult *r = PQexec(c, x->relaxed ? "SET synchronous_commit TO off"
                                           : "SET synchronous_commit TO DEFAULT");
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) { /* the session's mode is unknown: this connection is not used */
            PQfinish(c);
            c = NULL;
        }
        relaxed = x->relaxed;
    }
    if (!c) {
        pthread_mutex_lock(&s->mu);
        s->busy[pick] = false;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return CRCR_E_STORE;
    }
    x->c = c;
    x->slot = pick;
    pthread_mutex_lock(&s->mu);
    s->relaxed[pick] = relaxed;
    pthread_mutex_unlock(&s->mu);
    return CRCR_OK;
}

/* Returns the connection to the pool; one that is broken or left inside a transaction is closed
 * instead (the slot reconnects on its next use). */
static void release(pg_store *s, pgx *x)
{
    PGconn *c = x->c;
    if (c && (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE)) {
        PQfinish(c);
        c = NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->conns[x->slot] = c;
    s->busy[x->slot] = false;
    if (c)
        s->prepared[x->slot].ops |= op_bit(x->op);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    x->c = NULL;
}

static crcr_err with_conn(pg_store *s, const char *op, bool relaxed, pg_op fn, void *arg)
{
    for (int attempt = 0;; attempt++) {
        pgx x = {.s = s, .op = op, .relaxed = relaxed};
        crcr_err err = acquire(s, &x);
        if (err)
            return err;
        err = fn(&x, arg);
        /* Statements queued and never waited for (an operation outside a transaction): their
         * results are read, not handed on (their callbacks' context is gone), so that the
         * session goes back idle. */
        if (x.piped) {
            crcr_err e = pipe_sync(&x, NULL, false);
            err = err ? err : e;
        }
        bool lost = PQstatus(x.c) != CONNECTION_OK;
        release(s, &x);
        if (err != CRCR_E_STORE || !lost || attempt > 0 || x.called_back)
            return err;
        LOG_WARN("store.pg.reconnect", "op", op, NULL);
    }
}

crcr_err pg_with_conn(pg_store *s, const char *op, pg_op fn, void *arg)
{
    return with_conn(s, op, false, fn, arg);
}

crcr_err pg_with_conn_relaxed(pg_store *s, const char *op, pg_op fn, void *arg)
{
    return with_conn(s, op, true, fn, arg);
}

/* ---- statements ---- */

/* Parameters of one statement as libpq takes them. Text values are sent as text, bytes as
 * binary BYTEA. */
typedef struct pgp {
    int n;
    const char *v[PG_PARAMS_MAX];
    int len[PG_PARAMS_MAX];
    int fmt[PG_PARAMS_MAX];
    char num[PG_PARAMS_MAX][24];
    char *owned[PG_PARAMS_MAX]; /* UTF-8-repaired copies, freed by pgp_free */
} pgp;

/* Frees the repaired copies pgp_text() made; the pgp itself lives on the caller's stack. */
static void pgp_free(pgp *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->owned[i]);
}

/* NULL when `s` is valid UTF-8; otherwise a heap copy (caller frees) with each invalid byte
 * replaced by '?'. */
static char *utf8_repair(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s), i = 0;
    while (i < len) {
        size_t k = utf8_seq(u + i, len - i);
        if (!k)
            break;
        i += k;
    }
    if (i == len)
        return NULL;
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (i = 0; i < len;) {
        size_t k = utf8_seq(u + i, len - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            out[o++] = '?';
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

static void pgp_text(pgp *p, const char *v)
{
    int i = p->n++;
    p->owned[i] = v ? utf8_repair(v) : NULL;
    p->v[i] = p->owned[i] ? p->owned[i] : v;
    p->len[i] = 0;
    p->fmt[i] = 0;
}

static void pgp_i64(pgp *p, int64_t v)
{
    int i = p->n++;
    p->owned[i] = NULL;
    snprintf(p->num[i], sizeof(p->num[i]), "%lld", (long long)v);
    p->v[i] = p->num[i];
    p->len[i] = 0;
    p->fmt[i] = 0;
}

/* Bytes as BYTEA; NULL data is SQL NULL. */
static void pgp_bytes(pgp *p, const void *data, size_t len)
{
    int i = p->n++;
    p->owned[i] = NULL;
    p->v[i] = data;
    p->len[i] = (int)len;
    p->fmt[i] = 1;
}

store_fault_kind pg_fault_kind(const char *sqlstate)
{
    if (!sqlstate)
        return STORE_FAULT_NONE;
    if (strcmp(sqlstate, "53100") == 0) /* disk_full */
        return STORE_FAULT_DISK_FULL;
    if (strcmp(sqlstate, "58030") == 0) /* io_error */
        return STORE_FAULT_IO;
    return STORE_FAULT_NONE;
}

static void log_result_error(pgx *x, const PGresult *r)
{
    char msg[PG_ERRTEXT_MAX];
    const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    /* The primary message only: DETAIL may quote row values. */
    pg_one_line(primary ? primary : PQerrorMessage(x->c), msg, sizeof(msg));
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    LOG_ERROR("store.pg.error", "op", x->op, "sqlstate", state ? state : "", "error", msg, NULL);
    store_fault_kind kind = pg_fault_kind(state);
    if (kind != STORE_FAULT_NONE) { /* the server refuses writes: its disk */
        char detail[PG_ERRTEXT_MAX + 48];
        snprintf(detail, sizeof(detail), "%s (PostgreSQL SQLSTATE %s)", msg, state);
        store_fault_note(&x->s->base, kind, x->op, detail);
    }
}

/* Forgets the statements of a slot's list from index `from` on (their preparation failed, or did
 * not run: a pipeline's commands after a failure are skipped). */
static void prepared_truncate(pg_prepared *p, size_t from)
{
    while (p->n > from)
        free(p->sql[--p->n]);
}

/* The index of `sql` in the slot's prepared list (its name is "crcr_<index>"), or the list's
 * length when the session has not prepared it. */
static size_t prepared_index(const pg_prepared *prep, const char *sql)
{
    size_t i = 0;
    while (i < prep->n && prep->sql[i] != sql && strcmp(prep->sql[i], sql) != 0)
        i++;
    return i;
}

/* A statement's outcome: its row count (rows changed, else rows returned) and its rows. */
static void take_result(const PGresult *r, const pg_pending *q)
{
    if (q->rows) {
        const char *t = PQcmdTuples((PGresult *)r);
        *q->rows = t && *t ? strtoll(t, NULL, 10) : PQntuples(r);
    }
    if (q->row)
        pg_each(r, q->row, q->ctx);
}

/* A statement that failed with `r` (NULL: nothing came back; PQerrorMessage says why): a unique
 * violation of a statement queued by pg_queue_new is CRCR_E_DUPLICATE, not logged; anything else
 * is logged, CRCR_E_STORE. */
static crcr_err failed(pgx *x, const PGresult *r, const pg_pending *q)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (q->unique_dup && state && strcmp(state, "23505") == 0) /* unique_violation */
        return CRCR_E_DUPLICATE;
    log_result_error(x, r);
    return CRCR_E_STORE;
}

/* Notes one command sent in the pipeline (`sent` false: libpq could not send it, the connection
 * is unusable and pipe_sync fails). */
static void pend(pgx *x, pg_pending q, int sent)
{
    if (!sent)
        x->pipe_broken = true;
    else
        x->pend[x->npend++] = q;
}

/* Puts x's session in libpq's pipeline mode (no-op when it is), sending the transaction's BEGIN
 * first when it is due. false: libpq would not (nothing was sent; run statements alone). */
static bool pipe_open(pgx *x)
{
    if (x->piped)
        return true;
    if (!PQenterPipelineMode(x->c))
        return false;
    x->piped = true;
    x->pipe_broken = false;
    x->npend = 0;
    if (x->begin_due) {
        x->begin_due = false;
        pend(x, (pg_pending){.what = PG_PEND_BEGIN},
             PQsendQueryParams(x->c, "BEGIN", 0, NULL, NULL, NULL, NULL, 0));
    }
    return true;
}

/*
 * Reads the results of every command sent since the pipeline opened, in order, and leaves
 * pipeline mode. A statement's rows go to its callback and count (`run` false: only read, for a
 * transaction about to be rolled back). The first failure is the result (failed()); the commands
 * after it did not run, and a preparation that did not succeed is forgotten with the ones after
 * it. `last` (may be NULL) receives the last statement's result instead of its callback (the
 * caller PQclear()s it; NULL when it failed or did not run).
 */
static crcr_err pipe_sync(pgx *x, PGresult **last, bool run)
{
    PGconn *c = x->c;
    crcr_err err = CRCR_OK;
    if (last)
        *last = NULL;
    bool synced = !x->pipe_broken && PQpipelineSync(c);
    for (size_t k = 0; k < x->npend; k++) {
        const pg_pending *q = &x->pend[k];
        PGresult *r = synced ? PQgetResult(c) : NULL;
        if (r) /* then the NULL that ends this command's results */
            for (PGresult *more; (more = PQgetResult(c)) != NULL;)
                PQclear(more);
        ExecStatusType t = PQresultStatus(r);
        if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) {
            if (q->what == PG_PEND_PREPARE)
                prepared_truncate(&x->s->prepared[x->slot], q->prep);
            if (!err) /* the first failure; the commands after it report PGRES_PIPELINE_ABORTED */
                err = failed(x, r, q);
        } else if (q->what == PG_PEND_QUERY) {
            if (last && k + 1 == x->npend) {
                *last = r;
                r = NULL;
            } else if (run) {
                take_result(r, q);
            }
        }
        PQclear(r);
    }
    if (!synced && !err)
        err = failed(x, NULL, &(pg_pending){0});
    for (PGresult *r; synced && (r = PQgetResult(c)) != NULL;) { /* the Sync's own result */
        bool sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
        PQclear(r);
        if (sync)
            break;
    }
    x->npend = 0;
    x->piped = false;
    if (!PQexitPipelineMode(c)) {
        /* Results left unread: the session is not usable. release() closes it (it is not idle). */
        LOG_ERROR("store.pg.error", "op", x->op, "error", "pipeline left unfinished", NULL);
        if (!err)
            err = CRCR_E_STORE;
    }
    if (last && err) {
        PQclear(*last);
        *last = NULL;
    }
    return err;
}

/* Sends `sql` with `p` in the open pipeline: by name when x's session has prepared it, else
 * (`prepare`) preparing it first in the same pipeline when there is room, else as a one-off
 * statement. Reads the pending results first when the commands would not fit (a failure there is
 * returned and nothing is sent). */
static crcr_err pipe_send(pgx *x, const char *sql, const pgp *p, pg_pending q, bool prepare)
{
    if (x->npend + 2 > PG_PENDING_MAX) {
        crcr_err e = pipe_sync(x, NULL, true);
        if (e || !pipe_open(x))
            return e ? e : CRCR_E_STORE;
    }
    pg_prepared *prep = &x->s->prepared[x->slot];
    size_t i = prepare ? prepared_index(prep, sql) : prep->n;
    char name[32];
    snprintf(name, sizeof(name), "crcr_%zu", i);
    if (prepare && i == prep->n && prep->n < PG_PREPARED_MAX) {
        char *copy = strdup(sql);
        if (copy && PQsendPrepare(x->c, name, sql, 0, NULL)) {
            prep->sql[prep->n++] = copy;
            pend(x, (pg_pending){.what = PG_PEND_PREPARE, .prep = i}, 1);
        } else {
            free(copy); /* sent unprepared below */
        }
    }
    q.what = PG_PEND_QUERY;
    pend(x, q,
         i < prep->n ? PQsendQueryPrepared(x->c, name, p->n, p->v, p->len, p->fmt, 1)
                     : PQsendQueryParams(x->c, sql, p->n, NULL, p->v, p->len, p->fmt, 1));
    return CRCR_OK;
}

/*
 * Runs one statement and waits for it, in the pipeline: after the statements queued there and
 * the transaction's BEGIN when it is due, and after its own preparation the first time
 * (`prepare`), all in one round trip. `q` says what to do with its rows, unless `out` (may be
 * NULL) takes its result (the caller PQclear()s it). A failure of a queued statement is this
 * one's. Where libpq has no pipeline mode: BEGIN on its own, then the statement unprepared.
 */
static crcr_err statement(pgx *x, const char *sql, const pgp *p, pg_pending q, bool prepare,
                          PGresult **out)
{
    if (out)
        *out = NULL;
    PGresult *r = NULL;
    crcr_err e;
    if (pipe_open(x)) {
        e = pipe_send(x, sql, p, q, prepare);
        if (!e)
            e = pipe_sync(x, &r, true);
    } else {
        if (x->begin_due) {
            x->begin_due = false;
            PGresult *b = PQexec(x->c, "BEGIN");
            e = PQresultStatus(b) == PGRES_COMMAND_OK ? CRCR_OK : failed(x, b, &q);
            PQclear(b);
            if (e)
                return e;
        }
        r = PQexecParams(x->c, sql, p->n, NULL, p->v, p->len, p->fmt, 1);
        ExecStatusType t = PQresultStatus(r);
        e = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? CRCR_OK : failed(x, r, &q);
    }
    if (!e && out) {
        *out = r;
        return CRCR_OK;
    }
    if (!e)
        take_result(r, &q);
    PQclear(r);
    return e;
}

void pg_begin(pgx *x)
{
    x->begin_due = true;
}

/* The parameters v[0..n) as libpq takes them (pgp_free after). false: too many. */
static bool params_of(pgx *x, const store_param *v, int n, pgp *p)
{
    if (n > PG_PARAMS_MAX) {
        LOG_ERROR("store.pg.error", "op", x->op, "error", "too many parameters", NULL);
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (v[i].is_null)
            pgp_text(p, NULL);
        else if (v[i].kind == STORE_P_TEXT)
            pgp_text(p, v[i].text);
        else if (v[i].kind == STORE_P_INT)
            pgp_i64(p, v[i].i);
        else
            pgp_bytes(p, v[i].blob, v[i].len);
    }
    return true;
}

PGresult *pg_result(pgx *x, const char *sql, const store_param *v, int n)
{
    pgp p = {0};
    PGresult *r = NULL;
    if (params_of(x, v, n, &p))
        statement(x, sql, &p, (pg_pending){0}, true, &r);
    pgp_free(&p);
    return r;
}

/* A result row (binary format) as a store_row_source. */
typedef struct pg_row {
    const PGresult *r;
    int i;
} pg_row;

static const char *row_text(void *src, int col)
{
    pg_row *p = src;
    return PQgetisnull(p->r, p->i, col) ? NULL : PQgetvalue(p->r, p->i, col);
}

/* An integer column (int2/int4/int8), or `dflt` when NULL. */
static int64_t row_i64(void *src, int col, int64_t dflt)
{
    pg_row *p = src;
    if (PQgetisnull(p->r, p->i, col))
        return dflt;
    const unsigned char *v = (const unsigned char *)PQgetvalue(p->r, p->i, col);
    switch (PQgetlength(p->r, p->i, col)) {
    case 8: {
        uint64_t u;
        memcpy(&u, v, 8);
        return (int64_t)be64toh(u);
    }
    case 4: {
        uint32_t u;
        memcpy(&u, v, 4);
        return (int32_t)be32toh(u);
    }
    case 2: {
        uint16_t u;
        memcpy(&u, v, 2);
        return (int16_t)be16toh(u);
    }
    default:
        return dflt;
    }
}

static const void *row_blob(void *src, int col, size_t *len)
{
    pg_row *p = src;
    bool null = PQgetisnull(p->r, p->i, col);
    *len = null ? 0 : (size_t)PQgetlength(p->r, p->i, col);
    return null ? NULL : PQgetvalue(p->r, p->i, col);
}

void pg_each(const PGresult *r, store_row_fn row, void *ctx)
{
    for (int i = 0; i < PQntuples(r); i++) {
        pg_row at = {r, i};
        const store_row_source src = {row_text, row_i64, row_blob, &at};
        if (row(ctx, &src))
            break;
    }
}

crcr_err pg_query(pgx *x, const char *sql, const store_param *v, int n, store_row_fn row, void *ctx,
                  int64_t *rows)
{
    pgp p = {0};
    crcr_err e =
        params_of(x, v, n, &p)
            ? statement(x, sql, &p, (pg_pending){.row = row, .ctx = ctx, .rows = rows}, true, NULL)
            : CRCR_E_STORE;
    pgp_free(&p);
    return e;
}

/* pg_queue and pg_queue_new. */
static crcr_err queue(pgx *x, const char *sql, const store_param *v, int n, pg_pending q)
{
    pgp p = {0};
    crcr_err e = CRCR_E_STORE;
    if (params_of(x, v, n, &p))
        e = pipe_open(x) ? pipe_send(x, sql, &p, q, true)
                         : statement(x, sql, &p, q, true, NULL); /* no pipeline: now */
    pgp_free(&p);
    return e;
}

crcr_err pg_queue(pgx *x, const char *sql, const store_param *v, int n, store_row_fn row, void *ctx,
                  int64_t *rows)
{
    return queue(x, sql, v, n, (pg_pending){.row = row, .ctx = ctx, .rows = rows});
}

crcr_err pg_queue_new(pgx *x, const char *sql, const store_param *v, int n)
{
    return queue(x, sql, v, n, (pg_pending){.unique_dup = true});
}

typedef struct run_args {
    const char *sql;
    const store_param *v;
    int n;
    store_row_fn row;
    void *ctx;
    int64_t *rows;
} run_args;

static crcr_err op_run(pgx *x, void *arg)
{
    run_args *a = arg;
    crcr_err e = pg_query(x, a->sql, a->v, a->n, a->row, a->ctx, a->rows);
    x->called_back = !e && a->row; /* rows reached the caller: never twice */
    return e;
}

crcr_err pg_run(pg_store *s, const char *op, const char *sql, const store_param *v, int n,
                store_row_fn row, void *ctx, int64_t *rows)
{
    run_args a = {sql, v, n, row, ctx, rows};
    return pg_with_conn(s, op, op_run, &a);
}

crcr_err pg_run_relaxed(pg_store *s, const char *op, const char *sql, const store_param *v, int n,
                        store_row_fn row, void *ctx, int64_t *rows)
{
    run_args a = {sql, v, n, row, ctx, rows};
    return pg_with_conn_relaxed(s, op, op_run, &a);
}

typedef struct tx_args {
    pg_op fn;
    void *arg;
} tx_args;

static crcr_err op_tx(pgx *x, void *arg)
{
    tx_args *t = arg;
    pg_begin(x);
    return pg_finish_tx(x, t->fn(x, t->arg), false);
}

crcr_err pg_with_tx(pg_store *s, const char *op, pg_op fn, void *arg)
{
    tx_args t = {fn, arg};
    return pg_with_conn(s, op, op_tx, &t);
}

crcr_err pg_with_tx_relaxed(pg_store *s, const char *op, pg_op fn, void *arg)
{
    tx_args t = {fn, arg};
    return pg_with_conn_relaxed(s, op, op_tx, &t);
}

crcr_err pg_cmd(pgx *x, const char *sql)
{
    static const pgp none = {0};
    if (x->piped || x->begin_due) /* with what is pending, or with BEGIN: one statement */
        return statement(x, sql, &none, (pg_pending){0}, false, NULL);
    PGresult *r = PQexec(x->c, sql);
    ExecStatusType t = PQresultStatus(r);
    crcr_err err = CRCR_OK;
    if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) {
        log_result_error(x, r);
        err = CRCR_E_STORE;
    }
    PQclear(r);
    return err;
}

crcr_err pg_notify_rows(pgx *x, int64_t rows)
{
    if (rows > 0 && x->notify_rows <= INT64_MAX - rows)
        x->notify_rows += rows;
    return CRCR_OK;
}

crcr_err pg_finish_tx(pgx *x, crcr_err err, bool discard)
{
    int64_t notify = x->notify_rows;
    x->notify_rows = 0;
    if (x->begin_due) { /* no statement ran: no transaction was opened */
        x->begin_due = false;
        return err;
    }
    if (err || discard) {
        if (x->piped) /* read, not used: rolled back */
            pipe_sync(x, NULL, false);
        if (PQstatus(x->c) == CONNECTION_OK)
            pg_cmd(x, "ROLLBACK");
        return err;
    }
    /* The announcement and COMMIT go with the statements still pending: one round trip. */
    crcr_err e = CRCR_OK;
    if (notify > 0) {
        char payload[PG_TAG_HEX + 24];
        snprintf(payload, sizeof(payload), "%s:%lld", x->s->tag, (long long)notify);
        e = pg_queue(x, "SELECT pg_notify('" PG_CHANNEL "', $1)", ARGS(ARG_TEXT(payload)), NULL,
                     NULL, NULL);
    }
    if (!e)
        e = pg_cmd(x, "COMMIT");
    if (e && PQstatus(x->c) == CONNECTION_OK) {
        if (x->piped)
            pipe_sync(x, NULL, false);
        if (PQtransactionStatus(x->c) != PQTRANS_IDLE) { /* a statement before COMMIT failed */
            PGresult *r = PQexec(x->c, "ROLLBACK");
            PQclear(r);
        }
    }
    return e;
}

/* ---- schema ---- */

/* Migrations, one per schema version: MIGRATIONS[v] brings version v to v + 1. A new
 * CRCR_SCHEMA_VERSION without its PostgreSQL migration does not compile (see below). */
static const char *const MIGRATIONS[] = {
    /* 0 -> 1: the initial schema (`seq` orders rows like SQLite's rowid). */
    "CREATE TABLE IF NOT EXISTS deliveries("
    " seq bigserial, delivery_id text PRIMARY KEY, event text NOT NULL, action text,"
    " upstream_repo text, pr_number bigint NOT NULL DEFAULT 0, head_sha text, ref text,"
    " received_at bigint NOT NULL, payload bytea NOT NULL, payload_bytes bigint NOT NULL,"
    " status text NOT NULL);"
    "CREATE INDEX IF NOT EXISTS deliveries_received ON deliveries(received_at);"
    "CREATE TABLE IF NOT EXISTS outbox("
    " id bigserial PRIMARY KEY, kind text NOT NULL, delivery_id text, target text NOT NULL,"
    " body bytea, state text NOT NULL, attempts integer NOT NULL DEFAULT 0,"
    " next_attempt_at bigint NOT NULL, lease_until bigint, last_status integer,"
    " last_error text, note text, created_at bigint NOT NULL, done_at bigint, seq_key text);"
    "CREATE UNIQUE INDEX IF NOT EXISTS outbox_dispatch_once ON outbox(kind, delivery_id, "
    "target)"
    " WHERE kind='dispatch';"
    "CREATE INDEX IF NOT EXISTS outbox_due ON outbox(state, next_attempt_at);"
    "CREATE INDEX IF NOT EXISTS outbox_delivery ON outbox(delivery_id);"
    "CREATE INDEX IF NOT EXISTS outbox_seq ON outbox(seq_key, id) WHERE seq_key IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS kv(key text PRIMARY KEY, value bytea, expires_at bigint NOT "
    "NULL);"
    "CREATE TABLE IF NOT EXISTS runs("
    " seq bigserial, delivery_id text NOT NULL, repo text NOT NULL, run_id bigint NOT NULL,"
    " run_attempt bigint NOT NULL, job_name text NOT NULL, event_type text, state text NOT "
    "NULL,"
    " level integer, pr_number bigint NOT NULL DEFAULT 0, head_sha text,"
    " workflow_name text NOT NULL DEFAULT '',"
    " conclusion text, details_url text, artifact_url text, dispatched_at bigint,"
    " started_at bigint, completed_at bigint, queue_ms bigint, exec_ms bigint,"
    " test_passed bigint, test_failed bigint, test_skipped bigint, payload bytea,"
    " updated_at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_key ON runs(delivery_id, lower(repo), run_id,"
    " run_attempt, workflow_name, job_name);"
    "CREATE INDEX IF NOT EXISTS runs_sha ON runs(head_sha, lower(repo));"
    "CREATE INDEX IF NOT EXISTS runs_state ON runs(state, started_at);"
    "CREATE INDEX IF NOT EXISTS runs_repo ON runs(lower(repo), updated_at);"
    "CREATE INDEX IF NOT EXISTS runs_updated ON runs(updated_at);"
    "CREATE INDEX IF NOT EXISTS runs_pr ON runs(pr_number);"
    "CREATE INDEX IF NOT EXISTS deliveries_pr ON deliveries(pr_number);"
    "CREATE TABLE IF NOT EXISTS labels_wanted(head_sha text NOT NULL, repo text NOT NULL,"
    " created_at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS labels_wanted_key ON labels_wanted(head_sha, "
    "lower(repo));"
    "CREATE TABLE IF NOT EXISTS rate_hits(repo text NOT NULL, at bigint NOT NULL);"
    "CREATE INDEX IF NOT EXISTS rate_hits_repo ON rate_hits(lower(repo), at);"
    "CREATE TABLE IF NOT EXISTS callback_rejections(repo text NOT NULL, at bigint NOT NULL,"
    " status integer NOT NULL);"
    "CREATE INDEX IF NOT EXISTS callback_rejections_repo ON callback_rejections(lower(repo), "
    "at);",
    /* 1 -> 2: pinned repository identities and byte budgets. */
    "CREATE TABLE IF NOT EXISTS repo_identity(repo text NOT NULL, repository_id text NOT NULL,"
    " owner_id text NOT NULL, pinned_at bigint NOT NULL, last_seen_at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS repo_identity_key ON repo_identity(lower(repo));"
    "CREATE TABLE IF NOT EXISTS budgets(name text PRIMARY KEY, used bigint NOT NULL,"
    " expires_at bigint NOT NULL);"
    /* The callback rate limit counts hits per repo in O(1), as on SQLite (run_state.h). */
    "CREATE TABLE IF NOT EXISTS rate_counts(repo text NOT NULL, n bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS rate_counts_key ON rate_counts(lower(repo));",
    /* 2 -> 3: the instance holding a running outbox row, and instance ids. rate_counts again:
     * databases made version 2 before it was part of 1 -> 2 have none. */
    "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS owner integer;"
    "CREATE SEQUENCE IF NOT EXISTS outbox_owner_seq AS integer CYCLE;"
    "CREATE TABLE IF NOT EXISTS rate_counts(repo text NOT NULL, n bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS rate_counts_key ON rate_counts(lower(repo));",
    /* 3 -> 4: what the reconciler asked GitHub to redeliver (store_pg_reconcile.c). */
    "CREATE TABLE IF NOT EXISTS redeliveries(guid text PRIMARY KEY, hook_id bigint NOT NULL,"
    " event text, action text, attempts integer NOT NULL, first_asked_at bigint NOT NULL,"
    " last_asked_at bigint NOT NULL, last_status integer NOT NULL DEFAULT 0, last_result text);"
    "CREATE INDEX IF NOT EXISTS redeliveries_asked ON redeliveries(last_asked_at);",
    /* 4 -> 5: run ids as text (a Buildkite build's id is a UUID); runs_key follows the column. */
    "ALTER TABLE runs ALTER COLUMN run_id TYPE text USING run_id::text;",
    /* 5 -> 6: supersession and Depends-On pairs (§3.12, §3.13): why the relay ended a run
     * (NULL: it did not), the dispatches it ended, the pairs dispatches were made with. */
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS ended text;"
    "CREATE TABLE IF NOT EXISTS dispatch_ends(delivery_id text NOT NULL, repo text NOT NULL,"
    " pr_number bigint NOT NULL, reason text NOT NULL, by_delivery text NOT NULL,"
    " ended_at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS dispatch_ends_key ON dispatch_ends(delivery_id,"
    " lower(repo));"
    "CREATE TABLE IF NOT EXISTS pairs(seq bigserial, delivery_id text NOT NULL, repo text NOT NULL,"
    " pr_number bigint NOT NULL, number bigint NOT NULL, created_at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS pairs_key ON pairs(delivery_id, lower(repo));"
    "CREATE INDEX IF NOT EXISTS pairs_number ON pairs(lower(repo), number);"
    "CREATE TABLE IF NOT EXISTS dispatch_heads(pr_number bigint NOT NULL, repo text NOT NULL,"
    " head_sha text NOT NULL, pair_number bigint NOT NULL, delivery_id text NOT NULL,"
    " at bigint NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS dispatch_heads_key ON dispatch_heads(pr_number,"
    " lower(repo));",
    /* 6 -> 7: nothing here. SQLite keeps a dispatch's echoed webhook once (run_echoes); on
     * PostgreSQL each in_progress body is one TOAST value, compressed (PAYLOAD_LZ4 below). */
    "SELECT 1;",
    /* 7 -> 8: nothing here. SQLite packs payloads (payload_pack.h); PostgreSQL compresses the
     * column itself (PAYLOAD_LZ4 below). */
    "SELECT 1;",
    /* 8 -> 9: nothing here. SQLite packs payloads with LZ4 now. */
    "SELECT 1;",
};
_Static_assert(sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]) == CRCR_SCHEMA_VERSION,
               "one PostgreSQL migration per schema version");

/* The payload columns (30 KB webhooks, and callbacks that echo them) compressed with lz4 instead
 * of the server's default pglz: pglz was the largest single item of the server's CPU under a
 * callback load (bench/RESULTS.md). Only columns not yet set are altered (new values only; the
 * ALTER locks the table for a moment), and a server without lz4 (built without it, or before
 * PostgreSQL 14) keeps pglz: the block swallows its error. */
static const char PAYLOAD_LZ4[] =
    "DO $$DECLARE c record; BEGIN FOR c IN SELECT a.attrelid::regclass::text AS t FROM "
    "pg_attribute a WHERE a.attrelid IN ('deliveries'::regclass, 'runs'::regclass) AND "
    "a.attname = 'payload' AND a.attcompression IS DISTINCT FROM 'l' LOOP EXECUTE "
    "format('ALTER TABLE %s ALTER COLUMN payload SET COMPRESSION lz4', c.t); END LOOP; "
    "EXCEPTION WHEN others THEN NULL; END$$";

/* Creates or migrates the schema under an advisory lock (instances may start together). */
static crcr_err migrate(pgx *x, char *err, size_t errsz)
{
    crcr_err e = pg_cmd(x, "BEGIN");
    if (e) {
        snprintf(err, errsz, "CRCR_STORE: cannot start the schema transaction");
        return e;
    }
    e = pg_query(x, "SELECT 1 FROM (SELECT pg_advisory_xact_lock($1::bigint)) l",
                 ARGS(ARG_INT(PG_MIGRATION_LOCK)), NULL, NULL, NULL);
    if (!e)
        e = pg_cmd(x, "CREATE TABLE IF NOT EXISTS schema_version(version integer NOT NULL)");
    store_scalar version = {.v = -1};
    if (!e)
        e = pg_query(x, "SELECT COALESCE(max(version), 0)::bigint FROM schema_version", NULL, 0,
                     store_scalar_row, &version, NULL);
    int64_t v = e ? -1 : version.v;
    if (!e && v > CRCR_SCHEMA_VERSION) {
        pg_finish_tx(x, CRCR_E_CONFIG, true);
        store_schema_too_new(err, errsz, v);
        return CRCR_E_CONFIG;
    }
    for (int64_t i = v; !e && i >= 0 && i < CRCR_SCHEMA_VERSION; i++)
        e = pg_cmd(x, MIGRATIONS[i]);
    if (!e)
        e = pg_cmd(x, PAYLOAD_LZ4);
    if (!e && v < CRCR_SCHEMA_VERSION) {
        e = pg_cmd(x, "DELETE FROM schema_version");
        if (!e)
            e = pg_query(x, "INSERT INTO schema_version(version) VALUES ($1::integer)",
                         ARGS(ARG_INT(CRCR_SCHEMA_VERSION)), NULL, NULL, NULL);
    }
    e = pg_finish_tx(x, e, false);
    if (e) {
        char msg[PG_ERRTEXT_MAX];
        pg_one_line(PQerrorMessage(x->c), msg, sizeof(msg));
        snprintf(err, errsz, "CRCR_STORE: cannot create the PostgreSQL schema: %s", msg);
    } else if (v < CRCR_SCHEMA_VERSION) {
        char from[24], to[24];
        snprintf(from, sizeof(from), "%lld", (long long)v);
        snprintf(to, sizeof(to), "%d", CRCR_SCHEMA_VERSION);
        LOG_INFO("store.schema_migrated", "backend", "postgresql", "from", from, "to", to, NULL);
    }
    return e;
}

static crcr_err pg_ping(store *st)
{
    return pg_run(pg_store_of(st), "ping", "SELECT 1", NULL, 0, NULL, NULL, NULL);
}

/* store_probe_write: a write that needs new space on the server's disk. A small row would prove
 * nothing - on a full disk a write that fits in pages the server holds already goes through - so
 * the probe makes a temporary table of PG_PROBE_ROWS rows (~512 KiB in new blocks of a new file;
 * PostgreSQL extends a relation block by block, a full disk failing with SQLSTATE 53100) and
 * drops it at commit. Runs only while a fault is recorded (once a second, app.c). */
#define PG_PROBE_ROWS 16000

static crcr_err op_probe(pgx *x, void *arg)
{
    (void)arg;
    char sql[160];
    snprintf(sql, sizeof(sql),
             "CREATE TEMP TABLE crcr_store_probe ON COMMIT DROP AS "
             "SELECT g::bigint AS n FROM generate_series(1, %d) g",
             PG_PROBE_ROWS);
    return pg_cmd(x, sql);
}

static crcr_err pg_probe(store *st)
{
    return pg_with_tx(pg_store_of(st), "probe", op_probe, NULL);
}

/* ---- open / close ---- */

/* Closes every connection and frees the store; NULL is fine. */
static void pg_close(store *st)
{
    pg_store *s = pg_store_of(st);
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        PQfinish(s->conns ? s->conns[i] : NULL);
    PQfinish(s->listener);
    for (size_t i = 0; s->prepared && i < s->n; i++)
        prepared_forget(&s->prepared[i]);
    free(s->prepared);
    free(s->conns);
    free(s->busy);
    free(s->relaxed);
    if (s->uri) {
        memset(s->uri, 0, strlen(s->uri)); /* may hold a password */
        free(s->uri);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->lmu);
    store_base_fini(&s->base);
    free(s);
}

static const store_ops PG_OPS = {
    .close = pg_close,
    .recover = pg_recover,
    .ping = pg_ping,
    .probe = pg_probe,
    .wait_for_work = pg_wait_for_work,
    .outbox = &PG_OUTBOX_OPS,
    .runs = &PG_RUN_OPS,
    .reconcile = &PG_RECONCILE_OPS,
};

/* A random tag for this handle's NOTIFY payloads (PG_CHANNEL): listeners tell their own
 * process's notifications from others' by it. Not a secret; a clock-and-pid fallback when the
 * kernel has no randomness yet only risks a tag shared with another process, which costs that
 * process's listener its wake-ups until the 1 s poll. */
static void writer_tag(char out[PG_TAG_HEX + 1])
{
    unsigned char raw[PG_TAG_HEX / 2];
    if (RAND_bytes(raw, (int)sizeof(raw)) != 1) {
        uint64_t v = (uint64_t)clock_mono_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
        for (size_t i = 0; i < sizeof(raw); i++)
            raw[i] = (unsigned char)(v >> (8 * (i % 8)));
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[PG_TAG_HEX] = '\0';
}

/* The pool size (CRCR_STORE_POOL, validated by config.c; `crcr serve` turns 0 into its own
 * default): 1..PG_POOL_MAX, 0 for PG_POOL_DEFAULT (the command-line tools). */
static crcr_err pool_size(long pool, size_t *n, char *err, size_t errsz)
{
    *n = PG_POOL_DEFAULT;
    if (pool == 0)
        return CRCR_OK;
    if (pool < 1 || pool > PG_POOL_MAX) {
        snprintf(err, errsz, "CRCR_STORE_POOL: expected an integer from 1 to %d", PG_POOL_MAX);
        return CRCR_E_CONFIG;
    }
    *n = (size_t)pool;
    return CRCR_OK;
}

/* Opens the store for `uri` (copied; the caller keeps its string). On success *out is owned by
 * the caller and released with store_close(). The first connection creates or migrates the
 * schema; the others are opened as operations need them. */
crcr_err store_pg_open(const char *uri, long pool, store **out, char *err, size_t errsz)
{
    *out = NULL;
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(uri, &perr);
    if (!opts) {
        char msg[PG_ERRTEXT_MAX];
        pg_one_line(perr ? perr : "out of memory", msg, sizeof(msg));
        snprintf(err, errsz, "CRCR_STORE: not a valid PostgreSQL URI: %s", msg);
        PQfreemem(perr);
        return CRCR_E_CONFIG;
    }
    PQconninfoFree(opts);
    size_t n;
    crcr_err e = pool_size(pool, &n, err, errsz);
    if (e)
        return e;

    pg_store *s = calloc(1, sizeof(*s));
    if (!s)
        return CRCR_E_NOMEM;
    store_base_init(&s->base, &PG_OPS);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->lmu, NULL);
    s->n = n;
    writer_tag(s->tag);
    s->uri = strdup(uri);
    s->conns = calloc(n, sizeof(*s->conns));
    s->busy = calloc(n, sizeof(*s->busy));
    s->relaxed = calloc(n, sizeof(*s->relaxed));
    s->prepared = calloc(n, sizeof(*s->prepared));
    if (!s->uri || !s->conns || !s->busy || !s->relaxed || !s->prepared) {
        pg_close(&s->base);
        return CRCR_E_NOMEM;
    }
    char why[PG_ERRTEXT_MAX];
    PGconn *c = pg_connect(uri, why, sizeof(why));
    if (!c) {
        snprintf(err, errsz, "CRCR_STORE: cannot connect to PostgreSQL: %s", why);
        pg_close(&s->base);
        return CRCR_E_STORE;
    }
    pgx x = {.s = s, .c = c, .slot = 0, .op = "migrate"};
    e = migrate(&x, err, errsz);
    if (e) {
        PQfinish(c);
        pg_close(&s->base);
        return e;
    }
    s->conns[0] = c;
    *out = &s->base;
    return CRCR_OK;
}
