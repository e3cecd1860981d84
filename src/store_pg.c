/*
 * store_pg.c - the PostgreSQL store (libpq), shared by several relay instances.
 *
 * Same semantics as store_sqlite.c, operation for operation; what differs is how several
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
 *  - writes that add outbox rows send NOTIFY crcr_outbox at commit, and store_wait_for_work
 *    waits on a dedicated LISTEN connection, so idle workers of every instance wake at once.
 *
 * Connections: a pool of CRCR_STORE_POOL connections (sized by app.c), opened lazily. Each
 * operation borrows one for its duration. A connection found broken is dropped and the operation
 * retried once on a fresh one (when nothing of it is visible to the caller yet), so the store
 * recovers by itself when the database comes back; while it is away operations return CRCR_E_STORE.
 *
 * Bytes (payloads, bodies, kv values) travel as BYTEA in binary parameters and binary results;
 * every result is requested in binary, so integers are decoded from network byte order. Text
 * parameters are made valid UTF-8 first (free text from peers must never make a write fail); the
 * check is a few lines written here because libpq exposes no encoding validator.
 * Repository names compare case-insensitively through lower() and expression indexes.
 */
#include <endian.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "limits.h"
#include "log.h"
#include "run_state.h"
#include "store_impl.h"
#include "utf8.h"

#define PG_POOL_DEFAULT 8
#define PG_POOL_MAX 256
/* How long an operation waits for a free pooled connection before failing. */
#define PG_ACQUIRE_TIMEOUT_MS 5000
/* Parameters of one statement (the runs upsert has 24). */
#define PG_PARAMS_MAX 32
/* A claimed row's body or payload; the same cap as the SQLite store. */
#define PG_JOB_BYTES_MAX (CRCR_MAX_BODY_DEFAULT * 4u)
/* Side-effect jobs one transition may add. */
#define PG_RUN_EFFECTS_MAX 8
/* The listener reconnects at most this often while the database is away. */
#define PG_LISTEN_RETRY_MS 1000
/* Longest PostgreSQL error text put into a log line. */
#define PG_ERRTEXT_MAX 300
/* Advisory lock key serialising schema creation/migration across starting instances. */
#define PG_MIGRATION_LOCK 7165426221306201601LL
#define PG_CHANNEL "crcr_outbox"
/* Advisory lock class of instance liveness: an instance holds (class, its id) ('crcr'). */
#define PG_LIVE_CLASS 1668440946
/* An instance judges others' liveness only once it has held its own lock this long: after a
 * server restart every instance needs a moment (its listener's reconnect) to take its lock again.
 * No wait when the server had been up PG_LIVE_SERVER_UP_MS when the lock was taken (a restarted
 * instance on a server that stayed up: the usual crash). */
#define PG_LIVE_GRACE_MS 3000
#define PG_LIVE_SERVER_UP_MS 60000
/* Ids tried by store_recover. An id is taken only when another schema of the same database (its
 * own sequence) handed out the same number; a shared key can only delay a takeover to the
 * lease, never make a live instance look dead. */
#define PG_LIVE_ID_TRIES 16

typedef struct pg_store {
    struct store base;
    char *uri; /* owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t n;         /* pool size */
    PGconn **conns;   /* owned, NULL until first used or after a failure */
    bool *busy;       /* slot lent out */
    atomic_bool down; /* the last connection attempt failed (logged once per outage) */
    pthread_mutex_t lmu;
    PGconn *listener; /* LISTEN connection of store_wait_for_work and the instance's liveness
                         session, guarded by lmu */
    int64_t listen_retry_at;
    atomic_int live_id;         /* this instance's id (store_recover); 0: not an instance */
    _Atomic int64_t live_since; /* clock_mono_ms() when the listener took the instance lock;
                                   0 while it is not held */
    atomic_bool live_server_up; /* the server had been up PG_LIVE_SERVER_UP_MS by then */
} pg_store;

static pg_store *PS(store *st)
{
    return (pg_store *)st;
}

/* ---- connections ---- */

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* "relation already exists, skipping" and the like */
}

/* Copies a libpq message onto one line, bounded, for a log field. */
static void one_line(const char *msg, char *out, size_t outsz)
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
static PGconn *pg_connect(const char *uri, char *why, size_t whysz)
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
        one_line(PQerrorMessage(c), why, whysz);
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

/* One borrowed connection and what an operation did with it. */
typedef struct pgx {
    pg_store *s;
    PGconn *c;
    size_t slot;
    const char *op;
    bool called_back; /* a caller-visible callback ran: the operation must not be repeated */
} pgx;

/* Borrows a pooled connection into x->c (lent to the caller until release(); the pool keeps
 * ownership), connecting the slot when it has none. CRCR_E_STORE when no slot frees up within
 * PG_ACQUIRE_TIMEOUT_MS or the database cannot be reached. */
static crcr_err acquire(pg_store *s, pgx *x)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += PG_ACQUIRE_TIMEOUT_MS / 1000;
    pthread_mutex_lock(&s->mu);
    size_t pick = s->n;
    for (;;) {
        /* A free slot with an open connection, else any free slot. */
        for (size_t i = 0; i < s->n; i++) {
            if (s->busy[i])
                continue;
            if (s->conns[i]) {
                pick = i;
                break;
            }
            if (pick == s->n)
                pick = i;
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
        if (!c) {
            pthread_mutex_lock(&s->mu);
            s->busy[pick] = false;
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
            return CRCR_E_STORE;
        }
    }
    x->c = c;
    x->slot = pick;
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
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    x->c = NULL;
}

typedef crcr_err (*pg_op)(pgx *x, void *arg);

/*
 * Runs `fn` on a borrowed connection. When it fails because the connection broke (the server
 * restarted, the network dropped it) and nothing of it reached the caller, it runs once more on
 * a fresh connection: a stale pooled connection must not turn into an error.
 */
static crcr_err with_conn(pg_store *s, const char *op, pg_op fn, void *arg)
{
    for (int attempt = 0;; attempt++) {
        pgx x = {.s = s, .op = op};
        crcr_err err = acquire(s, &x);
        if (err)
            return err;
        err = fn(&x, arg);
        bool lost = PQstatus(x.c) != CONNECTION_OK;
        release(s, &x);
        if (err != CRCR_E_STORE || !lost || attempt > 0 || x.called_back)
            return err;
        LOG_WARN("store.pg.reconnect", "op", op, NULL);
    }
}

/* ---- statements ---- */

/* Parameters of one statement. Text values are sent as text, bytes as binary BYTEA. */
typedef struct pgp {
    int n;
    const char *v[PG_PARAMS_MAX];
    int len[PG_PARAMS_MAX];
    int fmt[PG_PARAMS_MAX];
    char num[PG_PARAMS_MAX][24];
    char *owned[PG_PARAMS_MAX]; /* UTF-8-repaired copies, freed by pgp_free */
} pgp;

/* Frees the repaired copies p_text() made; the pgp itself lives on the caller's stack. */
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

static void p_text(pgp *p, const char *v)
{
    int i = p->n++;
    p->owned[i] = v ? utf8_repair(v) : NULL;
    p->v[i] = p->owned[i] ? p->owned[i] : v;
    p->len[i] = 0;
    p->fmt[i] = 0;
}

static void p_i64(pgp *p, int64_t v)
{
    int i = p->n++;
    p->owned[i] = NULL;
    snprintf(p->num[i], sizeof(p->num[i]), "%lld", (long long)v);
    p->v[i] = p->num[i];
    p->len[i] = 0;
    p->fmt[i] = 0;
}

/* An integer, or SQL NULL when it equals `null_value`. */
static void p_i64_or_null(pgp *p, int64_t v, int64_t null_value)
{
    if (v == null_value)
        p_text(p, NULL);
    else
        p_i64(p, v);
}

/* Bytes as BYTEA; NULL data is SQL NULL. */
static void p_bytes(pgp *p, const void *data, size_t len)
{
    int i = p->n++;
    p->owned[i] = NULL;
    p->v[i] = data;
    p->len[i] = (int)len;
    p->fmt[i] = 1;
}

static void log_result_error(pgx *x, const PGresult *r)
{
    char msg[PG_ERRTEXT_MAX];
    const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    /* The primary message only: DETAIL may quote row values. */
    one_line(primary ? primary : PQerrorMessage(x->c), msg, sizeof(msg));
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    LOG_ERROR("store.pg.error", "op", x->op, "sqlstate", state ? state : "", "error", msg, NULL);
}

/* Runs one statement with binary results. Returns the result (caller PQclear()s) when it
 * succeeded, NULL (logged) otherwise. Frees nothing of `p`. */
static PGresult *q(pgx *x, const char *sql, const pgp *p)
{
    PGresult *r = PQexecParams(x->c, sql, p ? p->n : 0, NULL, p ? p->v : NULL, p ? p->len : NULL,
                               p ? p->fmt : NULL, 1);
    ExecStatusType t = PQresultStatus(r);
    if (t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK)
        return r;
    log_result_error(x, r);
    PQclear(r);
    return NULL;
}

/* Runs a statement whose result is not needed; *rows receives the affected row count. */
static crcr_err qexec(pgx *x, const char *sql, pgp *p, int64_t *rows)
{
    PGresult *r = q(x, sql, p);
    if (p)
        pgp_free(p);
    if (!r)
        return CRCR_E_STORE;
    if (rows) {
        const char *t = PQcmdTuples(r);
        *rows = t && *t ? strtoll(t, NULL, 10) : PQntuples(r);
    }
    PQclear(r);
    return CRCR_OK;
}

/* Runs a parameterless command (BEGIN, COMMIT, NOTIFY ...). */
static crcr_err cmd(pgx *x, const char *sql)
{
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

/* Ends the transaction: COMMIT when err is CRCR_OK and !discard, ROLLBACK otherwise. */
static crcr_err finish_tx(pgx *x, crcr_err err, bool discard)
{
    if (err || discard) {
        if (PQstatus(x->c) == CONNECTION_OK)
            cmd(x, "ROLLBACK");
        return err;
    }
    return cmd(x, "COMMIT");
}

/* ---- result columns (binary format) ---- */

static const char *r_text(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

/* An integer column (int2/int4/int8), or `dflt` when NULL. */
static int64_t r_i64(const PGresult *r, int row, int col, int64_t dflt)
{
    if (PQgetisnull(r, row, col))
        return dflt;
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    switch (PQgetlength(r, row, col)) {
    case 8: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (int64_t)be64toh(v);
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return (int32_t)be32toh(v);
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return (int16_t)be16toh(v);
    }
    default:
        return dflt;
    }
}

static size_t r_len(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : (size_t)PQgetlength(r, row, col);
}

/* A heap copy of a text column (caller frees); NULL for SQL NULL or when out of memory. */
static char *r_dup(const PGresult *r, int row, int col)
{
    const char *t = r_text(r, row, col);
    return t ? strdup(t) : NULL;
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
    "CREATE UNIQUE INDEX IF NOT EXISTS outbox_dispatch_once ON outbox(kind, delivery_id, target)"
    " WHERE kind='dispatch';"
    "CREATE INDEX IF NOT EXISTS outbox_due ON outbox(state, next_attempt_at);"
    "CREATE INDEX IF NOT EXISTS outbox_delivery ON outbox(delivery_id);"
    "CREATE INDEX IF NOT EXISTS outbox_seq ON outbox(seq_key, id) WHERE seq_key IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS kv(key text PRIMARY KEY, value bytea, expires_at bigint NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs("
    " seq bigserial, delivery_id text NOT NULL, repo text NOT NULL, run_id bigint NOT NULL,"
    " run_attempt bigint NOT NULL, job_name text NOT NULL, event_type text, state text NOT NULL,"
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
    "CREATE UNIQUE INDEX IF NOT EXISTS labels_wanted_key ON labels_wanted(head_sha, lower(repo));"
    "CREATE TABLE IF NOT EXISTS rate_hits(repo text NOT NULL, at bigint NOT NULL);"
    "CREATE INDEX IF NOT EXISTS rate_hits_repo ON rate_hits(lower(repo), at);"
    "CREATE TABLE IF NOT EXISTS callback_rejections(repo text NOT NULL, at bigint NOT NULL,"
    " status integer NOT NULL);"
    "CREATE INDEX IF NOT EXISTS callback_rejections_repo ON callback_rejections(lower(repo), at);",
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
};
_Static_assert(sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]) == CRCR_SCHEMA_VERSION,
               "one PostgreSQL migration per schema version");

/* Creates or migrates the schema under an advisory lock (instances may start together). */
static crcr_err migrate(pgx *x, char *err, size_t errsz)
{
    crcr_err e = cmd(x, "BEGIN");
    if (e) {
        snprintf(err, errsz, "CRCR_STORE: cannot start the schema transaction");
        return e;
    }
    pgp p = {0};
    p_i64(&p, PG_MIGRATION_LOCK);
    e = qexec(x, "SELECT 1 FROM (SELECT pg_advisory_xact_lock($1::bigint)) l", &p, NULL);
    if (!e)
        e = cmd(x, "CREATE TABLE IF NOT EXISTS schema_version(version integer NOT NULL)");
    int64_t v = -1;
    if (!e) {
        PGresult *r = q(x, "SELECT COALESCE(max(version), 0)::bigint FROM schema_version", NULL);
        if (r) {
            v = r_i64(r, 0, 0, -1);
            PQclear(r);
        } else {
            e = CRCR_E_STORE;
        }
    }
    if (!e && v > CRCR_SCHEMA_VERSION) {
        finish_tx(x, CRCR_E_CONFIG, true);
        snprintf(err, errsz,
                 "CRCR_STORE: schema version %lld is newer than this crcr understands (%d); "
                 "upgrade crcr",
                 (long long)v, CRCR_SCHEMA_VERSION);
        return CRCR_E_CONFIG;
    }
    for (int64_t i = v; !e && i >= 0 && i < CRCR_SCHEMA_VERSION; i++)
        e = cmd(x, MIGRATIONS[i]);
    if (!e && v < CRCR_SCHEMA_VERSION) {
        e = cmd(x, "DELETE FROM schema_version");
        pgp pv = {0};
        p_i64(&pv, CRCR_SCHEMA_VERSION);
        if (!e)
            e = qexec(x, "INSERT INTO schema_version(version) VALUES ($1::integer)", &pv, NULL);
    }
    e = finish_tx(x, e, false);
    if (e) {
        char msg[PG_ERRTEXT_MAX];
        one_line(PQerrorMessage(x->c), msg, sizeof(msg));
        snprintf(err, errsz, "CRCR_STORE: cannot create the PostgreSQL schema: %s", msg);
    } else if (v < CRCR_SCHEMA_VERSION) {
        char from[24], to[24];
        snprintf(from, sizeof(from), "%lld", (long long)v);
        snprintf(to, sizeof(to), "%d", CRCR_SCHEMA_VERSION);
        LOG_INFO("store.schema_migrated", "backend", "postgresql", "from", from, "to", to, NULL);
    }
    return e;
}

/* ---- operations ---- */

static crcr_err op_ping(pgx *x, void *arg)
{
    (void)arg;
    return cmd(x, "SELECT 1");
}

static crcr_err pg_ping(store *st)
{
    return with_conn(PS(st), "ping", op_ping, NULL);
}

/* ---- instance liveness ---- */

/* Takes this instance's lock in the session of `c` (the listener), with server-side TCP
 * keepalives there so that the server also notices a vanished host within seconds. Caller holds
 * lmu. true when held (live_since set). */
static bool live_lock(pg_store *s, PGconn *c)
{
    int id = atomic_load(&s->live_id);
    if (!id || !c)
        return false;
    /* Ignored (and harmless) on a Unix-domain socket. */
    PGresult *r = PQexec(c, "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
                            "SET tcp_keepalives_count = 3");
    PQclear(r);
    char v[3][24];
    snprintf(v[0], sizeof(v[0]), "%d", PG_LIVE_CLASS);
    snprintf(v[1], sizeof(v[1]), "%d", id);
    snprintf(v[2], sizeof(v[2]), "%d", PG_LIVE_SERVER_UP_MS);
    const char *const vals[3] = {v[0], v[1], v[2]};
    r = PQexecParams(c,
                     "SELECT pg_try_advisory_lock($1::integer, $2::integer), "
                     "pg_postmaster_start_time() < now() - $3::bigint * interval '1 millisecond'",
                     3, NULL, vals, NULL, NULL, 0);
    bool held =
        PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    bool up = held && PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (held) {
        atomic_store(&s->live_server_up, up);
        int64_t now = clock_mono_ms();
        atomic_store(&s->live_since, now > 0 ? now : 1);
    }
    return held;
}

/* Closes the listener (its session's lock goes with it). Caller holds lmu. */
static void listener_drop(pg_store *s)
{
    atomic_store(&s->live_since, 0);
    PQfinish(s->listener);
    s->listener = NULL;
}

/* Opens the listener: LISTEN crcr_outbox and, for an instance, its lock (when that fails the
 * waiting loop tries again). Caller holds lmu and stores the connection in s->listener, which owns
 * it (listener_drop, pg_close). NULL with the reason in `why`. */
static PGconn *listener_open(pg_store *s, char *why, size_t whysz)
{
    PGconn *c = pg_connect(s->uri, why, whysz);
    if (!c)
        return NULL;
    PGresult *r = PQexec(c, "LISTEN " PG_CHANNEL);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        one_line(PQerrorMessage(c), why, whysz);
        PQfinish(c);
        return NULL;
    }
    live_lock(s, c);
    return c;
}

/* The one integer a parameterless query answers into *v; CRCR_E_NOT_FOUND for no row or NULL. */
static crcr_err scalar_i64(pgx *x, const char *sql, int64_t *v)
{
    PGresult *r = q(x, sql, NULL);
    if (!r)
        return CRCR_E_STORE;
    crcr_err e = CRCR_E_NOT_FOUND;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0)) {
        *v = r_i64(r, 0, 0, 0);
        e = CRCR_OK;
    }
    PQclear(r);
    return e;
}

static crcr_err op_next_instance(pgx *x, void *arg)
{
    crcr_err e = scalar_i64(x, "SELECT nextval('outbox_owner_seq')::bigint", arg);
    return e == CRCR_E_NOT_FOUND ? CRCR_E_STORE : e;
}

/* Makes the serving process an instance (see store_claim in store.h). Nothing is requeued: the
 * rows of an instance that died are claimable as soon as its lock is gone. */
static crcr_err pg_recover(store *st)
{
    pg_store *s = PS(st);
    for (int i = 0; i < PG_LIVE_ID_TRIES; i++) {
        int64_t id = 0;
        crcr_err e = with_conn(s, "recover", op_next_instance, &id);
        if (e)
            return e;
        pthread_mutex_lock(&s->lmu);
        atomic_store(&s->live_id, (int)id);
        bool held;
        if (s->listener && PQstatus(s->listener) == CONNECTION_OK) {
            held = live_lock(s, s->listener);
        } else {
            char why[PG_ERRTEXT_MAX] = "";
            if (s->listener)
                listener_drop(s);
            s->listener = listener_open(s, why, sizeof(why));
            if (!s->listener) {
                atomic_store(&s->live_id, 0);
                pthread_mutex_unlock(&s->lmu);
                LOG_ERROR("store.pg.instance_failed", "error", why, NULL);
                return CRCR_E_STORE;
            }
            held = atomic_load(&s->live_since) != 0;
        }
        pthread_mutex_unlock(&s->lmu);
        if (held) {
            char ids[24];
            snprintf(ids, sizeof(ids), "%lld", (long long)id);
            LOG_INFO("store.pg.instance", "id", ids, NULL);
            return CRCR_OK;
        }
    }
    atomic_store(&s->live_id, 0);
    LOG_ERROR("store.pg.instance_failed", "error", "no free instance id", NULL);
    return CRCR_E_STORE;
}

static const char INSERT_JOB[] =
    "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, next_attempt_at, "
    "created_at, seq_key) VALUES ($1, $2, $3, $4::bytea, 'queued', 0, $5, $6, $7) ON CONFLICT DO "
    "NOTHING";

/* Inserts jobs of `delivery_id` inside the caller's transaction; an existing dispatch row of
 * the same target is kept (not an error). Signals waiting workers at commit. */
static crcr_err insert_jobs(pgx *x, const char *delivery_id, const store_new_job *jobs, size_t n,
                            int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        pgp p = {0};
        p_text(&p, jobs[i].kind);
        p_text(&p, delivery_id);
        p_text(&p, jobs[i].target);
        p_bytes(&p, jobs[i].body, jobs[i].body ? jobs[i].body_len : 0);
        p_i64(&p, jobs[i].due_at ? jobs[i].due_at : now);
        p_i64(&p, now);
        p_text(&p, jobs[i].seq_key);
        crcr_err e = qexec(x, INSERT_JOB, &p, NULL);
        if (e)
            return e;
    }
    return n ? cmd(x, "NOTIFY " PG_CHANNEL) : CRCR_OK;
}

typedef struct ingest_args {
    const store_delivery *d;
    const store_new_job *jobs;
    size_t n;
} ingest_args;

static crcr_err op_ingest(pgx *x, void *arg)
{
    ingest_args *a = arg;
    const store_delivery *d = a->d;
    crcr_err e = cmd(x, "BEGIN");
    if (e)
        return e;
    pgp p = {0};
    p_text(&p, d->delivery_id);
    p_text(&p, d->event);
    p_text(&p, d->action);
    p_text(&p, d->upstream_repo);
    p_i64(&p, d->pr_number);
    p_text(&p, d->head_sha);
    p_text(&p, d->ref);
    p_i64(&p, d->received_at);
    p_bytes(&p, d->payload ? d->payload : "", d->payload_len);
    p_i64(&p, (int64_t)d->payload_len);
    p_text(&p, d->status ? d->status : "queued");
    int64_t rows = 0;
    e = qexec(x,
              "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, "
              "head_sha, ref, received_at, payload, payload_bytes, status) VALUES ($1, $2, $3, $4, "
              "$5, $6, $7, $8, $9::bytea, $10, $11) ON CONFLICT (delivery_id) DO NOTHING",
              &p, &rows);
    if (!e && rows == 0)
        e = CRCR_E_DUPLICATE;
    if (!e)
        e = insert_jobs(x, d->delivery_id, a->jobs, a->n, d->received_at);
    return finish_tx(x, e, false);
}

static crcr_err pg_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n)
{
    ingest_args a = {d, jobs, n};
    return with_conn(PS(st), "ingest", op_ingest, &a);
}

typedef struct claim_args {
    int64_t now, lease_ms;
    store_job *out;
} claim_args;

/*
 * A running row is due when its lease expired or, once this instance may judge (PG_LIVE_GRACE_MS),
 * when another instance's lock on its owner is not held: a shared try-lock on the owner's key
 * succeeds exactly then (held only to the end of this statement). An instance never judges
 * itself, and a claim made while this process holds no lock records no owner (lease only).
 */
static crcr_err op_claim(pgx *x, void *arg)
{
    claim_args *a = arg;
    pg_store *s = x->s;
    int id = atomic_load(&s->live_id);
    int64_t since = atomic_load(&s->live_since);
    bool held = id > 0 && since > 0;
    bool may_judge =
        held && (atomic_load(&s->live_server_up) || clock_mono_ms() - since >= PG_LIVE_GRACE_MS);
    pgp p = {0};
    p_i64(&p, a->now + a->lease_ms);
    p_i64(&p, a->now);
    p_i64_or_null(&p, held ? id : 0, 0);
    p_text(&p, may_judge ? "true" : "false");
    p_i64(&p, PG_LIVE_CLASS);
    PGresult *r =
        q(x,
          "WITH c AS (UPDATE outbox u SET state='running', lease_until=$1, "
          "owner=$3::integer FROM (SELECT id, state, lease_until FROM outbox o WHERE "
          "((state='queued' AND next_attempt_at<=$2) OR (state='running' AND "
          "(lease_until<$2 OR ($4::boolean AND o.owner IS NOT NULL AND o.owner IS "
          "DISTINCT FROM $3::integer AND pg_try_advisory_xact_lock_shared($5::integer, "
          "o.owner))))) AND (o.seq_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p "
          "WHERE p.seq_key=o.seq_key AND p.id<o.id AND p.state IN ('queued','running'))) "
          "ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) w WHERE "
          "u.id=w.id RETURNING u.id, u.kind, u.delivery_id, u.target, u.attempts, u.body, "
          "w.state AS was_state, w.lease_until AS was_lease) SELECT c.id, c.kind, "
          "c.delivery_id, c.target, c.attempts, c.body, d.event, d.payload, d.pr_number, "
          "d.head_sha, c.was_state, c.was_lease FROM c LEFT JOIN deliveries d ON "
          "d.delivery_id = c.delivery_id",
          &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return CRCR_E_NOT_FOUND;
    }
    store_job *out = a->out;
    crcr_err e = CRCR_OK;
    out->id = r_i64(r, 0, 0, 0);
    out->kind = r_dup(r, 0, 1);
    out->delivery_id = r_dup(r, 0, 2);
    out->target = r_dup(r, 0, 3);
    out->attempts = (int)r_i64(r, 0, 4, 0);
    out->lease_until = a->now + a->lease_ms;
    if (r_len(r, 0, 5))
        e = buf_append(&out->body, PQgetvalue(r, 0, 5), r_len(r, 0, 5));
    out->event = r_dup(r, 0, 6);
    if (!e && r_len(r, 0, 7))
        e = buf_append(&out->payload, PQgetvalue(r, 0, 7), r_len(r, 0, 7));
    out->pr_number = r_i64(r, 0, 8, 0);
    out->head_sha = r_dup(r, 0, 9);
    const char *was = r_text(r, 0, 10);
    if (was && strcmp(was, "running") == 0)
        out->reclaimed = r_i64(r, 0, 11, 0) < a->now ? "lease_expired" : "holder_gone";
    if (!e && (!out->kind || !out->target))
        e = CRCR_E_NOMEM;
    PQclear(r);
    /* The row is leased now: a retry must not claim a second one on the caller's behalf. */
    x->called_back = true;
    return e;
}

static crcr_err pg_claim(store *st, int64_t now, int64_t lease_ms, store_job *out)
{
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, PG_JOB_BYTES_MAX);
    buf_init(&out->payload, PG_JOB_BYTES_MAX);
    claim_args a = {now, lease_ms, out};
    crcr_err e = with_conn(PS(st), "claim", op_claim, &a);
    if (e)
        store_job_free(out);
    return e;
}

static crcr_err op_next_due(pgx *x, void *arg)
{
    return scalar_i64(x, "SELECT min(next_attempt_at) FROM outbox WHERE state='queued'", arg);
}

static crcr_err pg_next_due(store *st, int64_t *due)
{
    return with_conn(PS(st), "next_due", op_next_due, due);
}

typedef struct finish_args {
    int64_t id, lease;
    const char *state;
    long http_status;
    const char *error, *note, *body;
    size_t body_len;
    int64_t now;
} finish_args;

static crcr_err op_job_finish(pgx *x, void *arg)
{
    finish_args *a = arg;
    pgp p = {0};
    p_text(&p, a->state);
    p_i64_or_null(&p, a->http_status > 0 ? a->http_status : 0, 0);
    p_text(&p, a->error && *a->error ? a->error : NULL);
    p_text(&p, a->note && *a->note ? a->note : NULL);
    p_bytes(&p, a->body, a->body ? a->body_len : 0);
    p_i64(&p, a->now);
    p_i64(&p, a->id);
    p_i64(&p, a->lease);
    int64_t rows = 0;
    crcr_err e =
        qexec(x,
              "UPDATE outbox SET state=$1, attempts=attempts+1, last_status=$2::integer, "
              "last_error=$3, note=$4, body=COALESCE($5::bytea, body), done_at=$6, "
              "lease_until=NULL, owner=NULL WHERE id=$7 AND state='running' AND lease_until=$8",
              &p, &rows);
    return !e && rows == 0 ? CRCR_E_STATE : e; /* 0 rows: the lease was lost (store.h) */
}

static crcr_err pg_job_finish(store *st, int64_t id, int64_t lease, const char *state,
                              long http_status, const char *error, const char *note,
                              const char *body, size_t body_len, int64_t now)
{
    finish_args a = {id, lease, state, http_status, error, note, body, body_len, now};
    return with_conn(PS(st), "finish", op_job_finish, &a);
}

typedef struct retry_args {
    int64_t id, lease, next_at;
    bool count_attempt;
    long http_status;
    const char *error;
} retry_args;

static crcr_err op_job_retry(pgx *x, void *arg)
{
    retry_args *a = arg;
    pgp p = {0};
    p_i64(&p, a->count_attempt ? 1 : 0);
    p_i64(&p, a->next_at);
    p_i64_or_null(&p, a->http_status > 0 ? a->http_status : 0, 0);
    p_text(&p, a->error && *a->error ? a->error : NULL);
    p_i64(&p, a->id);
    p_i64(&p, a->lease);
    int64_t rows = 0;
    crcr_err e =
        qexec(x,
              "UPDATE outbox SET state='queued', attempts=attempts+$1::integer, "
              "next_attempt_at=$2, last_status=$3::integer, last_error=$4, "
              "lease_until=NULL, owner=NULL WHERE id=$5 AND state='running' AND lease_until=$6",
              &p, &rows);
    return !e && rows == 0 ? CRCR_E_STATE : e;
}

static crcr_err pg_job_retry(store *st, int64_t id, int64_t lease, int64_t next_at,
                             bool count_attempt, long http_status, const char *error)
{
    retry_args a = {id, lease, next_at, count_attempt, http_status, error};
    return with_conn(PS(st), "retry", op_job_retry, &a);
}

typedef struct renew_args {
    int64_t id, lease, new_lease;
} renew_args;

static crcr_err op_job_renew(pgx *x, void *arg)
{
    renew_args *a = arg;
    pgp p = {0};
    p_i64(&p, a->new_lease);
    p_i64(&p, a->id);
    p_i64(&p, a->lease);
    int64_t rows = 0;
    crcr_err e = qexec(x,
                       "UPDATE outbox SET lease_until=$1 WHERE id=$2 AND state='running' AND "
                       "lease_until=$3",
                       &p, &rows);
    return !e && rows == 0 ? CRCR_E_STATE : e;
}

static crcr_err pg_job_renew(store *st, int64_t id, int64_t lease, int64_t new_lease)
{
    renew_args a = {id, lease, new_lease};
    return with_conn(PS(st), "renew", op_job_renew, &a);
}

typedef struct redeliver_args {
    const char *delivery_id, *repo;
    int64_t now;
    int *n;
} redeliver_args;

static crcr_err op_redeliver(pgx *x, void *arg)
{
    redeliver_args *a = arg;
    *a->n = 0;
    crcr_err e = cmd(x, "BEGIN");
    if (e)
        return e;
    pgp p = {0};
    p_text(&p, a->delivery_id);
    int64_t found = 0;
    /* FOR SHARE: retention must not delete the delivery under the re-queued rows. */
    e = qexec(x, "SELECT 1 FROM deliveries WHERE delivery_id=$1 FOR SHARE", &p, &found);
    if (!e && found == 0)
        e = CRCR_E_NOT_FOUND;
    int64_t rows = 0;
    if (!e) {
        pgp u = {0};
        p_i64(&u, a->now);
        p_text(&u, a->delivery_id);
        p_text(&u, a->repo);
        e = qexec(x,
                  "UPDATE outbox SET state='queued', attempts=0, next_attempt_at=$1, "
                  "done_at=NULL, lease_until=NULL, owner=NULL, last_error=NULL, last_status=NULL, "
                  "note=NULL "
                  "WHERE kind='dispatch' AND delivery_id=$2 AND state<>'running' AND "
                  "($3::text IS NULL OR lower(target)=lower($3::text))",
                  &u, &rows);
    }
    if (!e && rows == 0 && a->repo) {
        /* A repo that had no row for this delivery (added to the allowlist since): create one. */
        pgp ins = {0};
        p_text(&ins, a->delivery_id);
        p_text(&ins, a->repo);
        p_i64(&ins, a->now);
        e = qexec(x,
                  "INSERT INTO outbox(kind, delivery_id, target, state, attempts, "
                  "next_attempt_at, created_at) VALUES ('dispatch', $1, $2, 'queued', 0, $3, $3) "
                  "ON CONFLICT DO NOTHING",
                  &ins, &rows);
    }
    if (!e && rows > 0)
        e = cmd(x, "NOTIFY " PG_CHANNEL);
    e = finish_tx(x, e, false);
    if (!e)
        *a->n = (int)rows;
    return e;
}

static crcr_err pg_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now,
                             int *n)
{
    redeliver_args a = {delivery_id, repo, now, n};
    return with_conn(PS(st), "redeliver", op_redeliver, &a);
}

#define DELIVERY_COLUMNS                                                                           \
    "d.delivery_id, d.event, d.action, d.upstream_repo, d.pr_number, d.head_sha, d.ref, "          \
    "d.received_at, d.payload_bytes, d.status"

static void fill_delivery_row(const PGresult *r, int i, store_delivery_row *row)
{
    row->delivery_id = r_text(r, i, 0);
    row->event = r_text(r, i, 1);
    row->action = r_text(r, i, 2);
    row->upstream_repo = r_text(r, i, 3);
    row->pr_number = r_i64(r, i, 4, 0);
    row->head_sha = r_text(r, i, 5);
    row->ref = r_text(r, i, 6);
    row->received_at = r_i64(r, i, 7, 0);
    row->payload_bytes = (size_t)r_i64(r, i, 8, 0);
    row->status = r_text(r, i, 9);
}

typedef struct list_args {
    const store_filter *f;
    int (*fn)(void *ctx, const store_delivery_row *row);
    void *ctx;
} list_args;

static crcr_err op_list_deliveries(pgx *x, void *arg)
{
    list_args *a = arg;
    pgp p = {0};
    p_text(&p, a->f ? a->f->state : NULL);
    p_text(&p, a->f ? a->f->repo : NULL);
    p_i64(&p, a->f && a->f->limit > 0 ? a->f->limit : 50);
    p_i64(&p, a->f ? a->f->pr_number : 0);
    PGresult *r = q(x,
                    "SELECT " DELIVERY_COLUMNS " FROM deliveries d WHERE ($1::text IS NULL OR "
                    "EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND "
                    "o.state=$1::text)) AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM outbox o "
                    "WHERE o.delivery_id=d.delivery_id AND lower(o.target)=lower($2::text))) "
                    "AND ($4::bigint=0 OR d.pr_number=$4::bigint) "
                    "ORDER BY d.received_at DESC, d.seq DESC LIMIT $3",
                    &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    x->called_back = PQntuples(r) > 0;
    for (int i = 0; i < PQntuples(r); i++) {
        store_delivery_row row;
        fill_delivery_row(r, i, &row);
        if (a->fn(a->ctx, &row))
            break;
    }
    PQclear(r);
    return CRCR_OK;
}

static crcr_err pg_list_deliveries(store *st, const store_filter *f,
                                   int (*fn)(void *ctx, const store_delivery_row *row), void *ctx)
{
    list_args a = {f, fn, ctx};
    return with_conn(PS(st), "list", op_list_deliveries, &a);
}

typedef struct get_args {
    const char *delivery_id;
    void (*dfn)(void *ctx, const store_delivery_row *row, const char *payload, size_t len);
    void (*jfn)(void *ctx, const store_job_row *row);
    void *ctx;
} get_args;

static crcr_err op_get_delivery(pgx *x, void *arg)
{
    get_args *a = arg;
    pgp p = {0};
    p_text(&p, a->delivery_id);
    PGresult *d = q(x,
                    "SELECT " DELIVERY_COLUMNS ", d.payload FROM deliveries d WHERE "
                    "d.delivery_id=$1",
                    &p);
    if (!d) {
        pgp_free(&p);
        return CRCR_E_STORE;
    }
    if (PQntuples(d) == 0) {
        pgp_free(&p);
        PQclear(d);
        return CRCR_E_NOT_FOUND;
    }
    PGresult *j = NULL;
    if (a->jfn) {
        /* Both reads first: a failure must not follow a callback. */
        j = q(x,
              "SELECT id, kind, delivery_id, target, state, last_error, note, attempts, "
              "last_status, next_attempt_at, created_at, done_at, body FROM outbox WHERE "
              "delivery_id=$1 ORDER BY id",
              &p);
        if (!j) {
            pgp_free(&p);
            PQclear(d);
            return CRCR_E_STORE;
        }
    }
    pgp_free(&p);
    x->called_back = true;
    if (a->dfn) {
        store_delivery_row row;
        fill_delivery_row(d, 0, &row);
        a->dfn(a->ctx, &row, PQgetvalue(d, 0, 10), r_len(d, 0, 10));
    }
    for (int i = 0; j && i < PQntuples(j); i++) {
        store_job_row row;
        row.id = r_i64(j, i, 0, 0);
        row.kind = r_text(j, i, 1);
        row.delivery_id = r_text(j, i, 2);
        row.target = r_text(j, i, 3);
        row.state = r_text(j, i, 4);
        row.last_error = r_text(j, i, 5);
        row.note = r_text(j, i, 6);
        row.attempts = (int)r_i64(j, i, 7, 0);
        row.last_status = (long)r_i64(j, i, 8, 0);
        row.next_attempt_at = r_i64(j, i, 9, 0);
        row.created_at = r_i64(j, i, 10, 0);
        row.done_at = r_i64(j, i, 11, 0);
        row.body = r_text(j, i, 12);
        row.body_len = r_len(j, i, 12);
        a->jfn(a->ctx, &row);
    }
    PQclear(j);
    PQclear(d);
    return CRCR_OK;
}

static crcr_err pg_get_delivery(store *st, const char *delivery_id,
                                void (*dfn)(void *ctx, const store_delivery_row *row,
                                            const char *payload, size_t payload_len),
                                void (*jfn)(void *ctx, const store_job_row *row), void *ctx)
{
    get_args a = {delivery_id, dfn, jfn, ctx};
    return with_conn(PS(st), "get", op_get_delivery, &a);
}

static crcr_err op_outbox_stats(pgx *x, void *arg)
{
    store_outbox_stats *out = arg;
    PGresult *r =
        q(x, "SELECT state, count(*), min(next_attempt_at) FROM outbox GROUP BY state", NULL);
    if (!r)
        return CRCR_E_STORE;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *state = r_text(r, i, 0);
        int64_t c = r_i64(r, i, 1, 0);
        store_stats_count(out, state, c, r_i64(r, i, 2, 0));
    }
    PQclear(r);
    return CRCR_OK;
}

static crcr_err pg_outbox_stats(store *st, store_outbox_stats *out)
{
    memset(out, 0, sizeof(*out));
    return with_conn(PS(st), "stats", op_outbox_stats, out);
}

typedef struct kv_args {
    const char *key;
    buf_t *value;
    const char *in;
    size_t len;
    int64_t t;
} kv_args;

static crcr_err op_kv_get(pgx *x, void *arg)
{
    kv_args *a = arg;
    pgp p = {0};
    p_text(&p, a->key);
    p_i64(&p, a->t);
    PGresult *r = q(x, "SELECT value FROM kv WHERE key=$1 AND (expires_at=0 OR expires_at>$2)", &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    crcr_err e = CRCR_E_NOT_FOUND;
    if (PQntuples(r) == 1)
        e = buf_append(a->value, r_len(r, 0, 0) ? PQgetvalue(r, 0, 0) : "", r_len(r, 0, 0));
    PQclear(r);
    return e;
}

static crcr_err pg_kv_get(store *st, const char *key, buf_t *value, int64_t now)
{
    kv_args a = {.key = key, .value = value, .t = now};
    return with_conn(PS(st), "kv_get", op_kv_get, &a);
}

static crcr_err op_kv_put(pgx *x, void *arg)
{
    kv_args *a = arg;
    pgp p = {0};
    p_text(&p, a->key);
    p_bytes(&p, a->in, a->in ? a->len : 0);
    p_i64(&p, a->t);
    return qexec(x,
                 "INSERT INTO kv(key, value, expires_at) VALUES ($1, $2::bytea, $3) ON CONFLICT "
                 "(key) DO UPDATE SET value=excluded.value, expires_at=excluded.expires_at",
                 &p, NULL);
}

static crcr_err pg_kv_put(store *st, const char *key, const char *value, size_t len,
                          int64_t expires_at)
{
    kv_args a = {.key = key, .in = value, .len = len, .t = expires_at};
    return with_conn(PS(st), "kv_put", op_kv_put, &a);
}

typedef struct retention_args {
    int64_t before;
    int *n;
} retention_args;

static crcr_err op_retention(pgx *x, void *arg)
{
    retention_args *a = arg;
    *a->n = 0;
    static const char *const steps[] = {
        /* Deliveries old enough and with nothing left to send go, with their outbox rows. */
        "WITH old AS (SELECT delivery_id FROM deliveries d WHERE received_at < $1 AND NOT "
        "EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND o.state IN "
        "('queued','running')) FOR UPDATE), gone AS (DELETE FROM outbox WHERE delivery_id IN "
        "(SELECT delivery_id FROM old)) DELETE FROM deliveries WHERE delivery_id IN (SELECT "
        "delivery_id FROM old)",
        "DELETE FROM kv WHERE expires_at<>0 AND expires_at < $1",
        "DELETE FROM runs WHERE updated_at < $1 AND state<>'in_progress'",
        "DELETE FROM labels_wanted WHERE created_at < $1",
        "DELETE FROM callback_rejections WHERE at < $1",
        "DELETE FROM budgets WHERE expires_at < $1",
        /* Finished rows of no delivery (nightly HUD forwards) go after the same time. */
        "DELETE FROM outbox o WHERE o.done_at < $1 AND o.state IN ('sent','dry_run','dead') AND "
        "NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id=o.delivery_id)",
    };
    crcr_err e = cmd(x, "BEGIN");
    int64_t deleted = 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !e; i++) {
        pgp p = {0};
        p_i64(&p, a->before);
        int64_t rows = 0;
        e = qexec(x, steps[i], &p, &rows);
        if (i == 0)
            deleted = rows;
    }
    e = finish_tx(x, e, false);
    if (!e)
        *a->n = (int)deleted;
    return e;
}

static crcr_err pg_retention(store *st, int64_t before, int *n)
{
    retention_args a = {before, n};
    return with_conn(PS(st), "retention", op_retention, &a);
}

/* ---- runs ---- */

/* A result row for run_row_fill. */
typedef struct pg_row {
    const PGresult *r;
    int i;
} pg_row;

static const char *row_text(void *src, int col)
{
    pg_row *p = src;
    return r_text(p->r, p->i, col);
}

static int64_t row_i64(void *src, int col, int64_t dflt)
{
    pg_row *p = src;
    return r_i64(p->r, p->i, col, dflt);
}

static const void *row_blob(void *src, int col, size_t *len)
{
    pg_row *p = src;
    *len = r_len(p->r, p->i, col);
    return r_text(p->r, p->i, col);
}

static void fill_run_row(const PGresult *r, int i, store_run_row *row)
{
    pg_row src = {r, i};
    run_row_source s = {row_text, row_i64, row_blob, &src};
    run_row_fill(row, &s);
}

/* Runs a runs query and calls `fn` for each row (after the query succeeded). */
static crcr_err run_rows(pgx *x, const char *sql, pgp *p,
                         void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    PGresult *r = q(x, sql, p);
    pgp_free(p);
    if (!r)
        return CRCR_E_STORE;
    x->called_back = PQntuples(r) > 0;
    for (int i = 0; i < PQntuples(r); i++) {
        store_run_row row;
        fill_run_row(r, i, &row);
        fn(ctx, &row);
    }
    PQclear(r);
    return CRCR_OK;
}

typedef struct apply_args {
    const store_run_update *u;
    store_effects_fn effects;
    void *ctx;
    store_run_result *res;
    char *reason;
    size_t reasonsz;
} apply_args;

static const char RUN_UPSERT[] =
    "INSERT INTO runs(" RUN_UPSERT_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8::integer, $9, "
    "$10, $11, $12, $13, $14, $15::bigint, $16::bigint, $17::bigint, $18::bigint, $19::bigint, "
    "$20::bigint, $21::bigint, $22::bigint, $23::bytea, $24) ON CONFLICT (delivery_id, "
    "lower(repo), run_id, run_attempt, workflow_name, job_name) DO UPDATE SET "
    "state=excluded.state, "
    "level=excluded.level, conclusion=excluded.conclusion, completed_at=excluded.completed_at, "
    "exec_ms=excluded.exec_ms, test_passed=excluded.test_passed, "
    "test_failed=excluded.test_failed, test_skipped=excluded.test_skipped, "
    "artifact_url=COALESCE(excluded.artifact_url, runs.artifact_url), "
    "details_url=COALESCE(excluded.details_url, runs.details_url), "
    "payload=excluded.payload, updated_at=excluded.updated_at";

/* Reads the key's current row (under the key's lock) into *prev. */
static crcr_err read_prev(pgx *x, const store_run_update *u, run_prev *prev)
{
    pgp p = {0};
    p_text(&p, u->key.delivery_id);
    p_text(&p, u->key.repo);
    p_i64(&p, u->key.run_id);
    p_i64(&p, u->key.run_attempt);
    p_text(&p, u->key.job_name ? u->key.job_name : "");
    p_text(&p, u->key.workflow_name ? u->key.workflow_name : "");
    PGresult *r = q(x,
                    "SELECT state, conclusion, started_at FROM runs WHERE delivery_id=$1 AND "
                    "lower(repo)=lower($2) AND run_id=$3 AND run_attempt=$4 AND job_name=$5 AND "
                    "workflow_name=$6",
                    &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    memset(prev, 0, sizeof(*prev));
    if (PQntuples(r) > 0) {
        prev->exists = true;
        snprintf(prev->state, sizeof(prev->state), "%s", r_text(r, 0, 0) ? r_text(r, 0, 0) : "");
        prev->has_conclusion = r_text(r, 0, 1) != NULL;
        if (prev->has_conclusion)
            snprintf(prev->conclusion, sizeof(prev->conclusion), "%s", r_text(r, 0, 1));
        prev->started_at = r_i64(r, 0, 2, 0);
    }
    PQclear(r);
    return CRCR_OK;
}

/* Binds the run upsert's parameters (run_row_params). */
static void bind_run_params(pgp *p, const run_param *v)
{
    for (int i = 0; i < RUN_UPSERT_PARAMS; i++) {
        if (v[i].is_null)
            p_text(p, NULL);
        else if (v[i].kind == RUN_P_TEXT)
            p_text(p, v[i].text);
        else if (v[i].kind == RUN_P_INT)
            p_i64(p, v[i].i);
        else
            p_bytes(p, v[i].blob, v[i].len);
    }
}

static crcr_err op_run_apply(pgx *x, void *arg)
{
    apply_args *a = arg;
    const store_run_update *u = a->u;
    store_run_result *res = a->res;
    memset(res, 0, sizeof(*res));
    res->queue_ms = -1;
    res->exec_ms = -1;
    const char *job = u->key.job_name ? u->key.job_name : "";
    const char *wf = u->key.workflow_name ? u->key.workflow_name : "";

    crcr_err e = cmd(x, "BEGIN");
    if (e)
        return e;
    /* Every transition of this key waits here for the one before it to commit. */
    pgp l = {0};
    p_text(&l, u->key.delivery_id);
    p_text(&l, u->key.repo);
    p_i64(&l, u->key.run_id);
    p_i64(&l, u->key.run_attempt);
    p_text(&l, job);
    p_text(&l, wf);
    e = qexec(x,
              "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended('crcr.run:' || "
              "$1::text || chr(31) || lower($2::text) || chr(31) || $3::text || chr(31) || "
              "$4::text || chr(31) || $6::text || chr(31) || $5::text, 0))) l",
              &l, NULL);
    if (!e && !u->single_shot) {
        /* The dispatch record: this delivery was sent (or queued) to this repo. */
        pgp p = {0};
        p_text(&p, u->key.delivery_id);
        p_text(&p, u->key.repo);
        PGresult *r = q(x,
                        "SELECT COALESCE(done_at, created_at) FROM outbox WHERE kind='dispatch' "
                        "AND delivery_id=$1 AND lower(target)=lower($2) LIMIT 1",
                        &p);
        pgp_free(&p);
        if (!r)
            e = CRCR_E_STORE;
        else if (PQntuples(r) == 0)
            e = CRCR_E_NOT_FOUND;
        else
            res->dispatched_at = r_i64(r, 0, 0, 0);
        PQclear(r);
    }
    run_prev prev;
    if (!e)
        e = read_prev(x, u, &prev);
    if (!e) {
        run_outcome o = run_state_next(&prev, u, res->dispatched_at, res, a->reason, a->reasonsz);
        if (o == RUN_INVALID)
            e = CRCR_E_STATE;
    }
    if (e || res->duplicate)
        return finish_tx(x, e, true);

    run_param params[RUN_UPSERT_PARAMS];
    run_row_params(u, res, params);
    pgp p = {0};
    bind_run_params(&p, params);
    e = qexec(x, RUN_UPSERT, &p, NULL);
    if (!e && a->effects) {
        store_new_job jobs[PG_RUN_EFFECTS_MAX];
        size_t n = 0;
        x->called_back = true; /* the callback may append to its buffers: never twice */
        e = a->effects(a->ctx, res, jobs, PG_RUN_EFFECTS_MAX, &n);
        if (!e)
            e = insert_jobs(x, u->key.delivery_id, jobs, n > PG_RUN_EFFECTS_MAX ? 0 : n, u->now);
    }
    return finish_tx(x, e, false);
}

static crcr_err pg_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                            bool *allowed, int64_t *retry_after_ms);

/* The rate hit (u->rate_limit) is its own transaction before the transition's, as when the
 * caller makes both calls: it counts whatever the transition's outcome. */
static crcr_err pg_run_apply(store *st, const store_run_update *u, store_effects_fn effects,
                             void *ctx, store_run_result *res, char *reason, size_t reasonsz)
{
    if (u->rate_limit > 0) {
        bool allowed = false;
        int64_t retry = 0;
        crcr_err e = pg_rate_hit(st, u->key.repo, u->now, u->rate_window_ms, u->rate_limit,
                                 &allowed, &retry);
        if (e)
            return e;
        if (!allowed) {
            *res = (store_run_result){
                .queue_ms = -1, .exec_ms = -1, .rate_limited = true, .retry_after_ms = retry};
            return CRCR_OK;
        }
    }
    apply_args a = {u, effects, ctx, res, reason, reasonsz};
    return with_conn(PS(st), "run_apply", op_run_apply, &a);
}

typedef struct runs_args {
    const char *a, *b;
    int64_t i, j;
    const store_run_filter *f;
    void (*fn)(void *ctx, const store_run_row *row);
    void *ctx;
} runs_args;

static crcr_err op_runs_for_sha(pgx *x, void *arg)
{
    runs_args *a = arg;
    pgp p = {0};
    p_text(&p, a->a);
    p_text(&p, a->b);
    /* The latest row per (workflow, job): last update, then insertion order. */
    return run_rows(x,
                    "SELECT " RUN_COLUMNS " FROM runs r WHERE head_sha=$1 AND "
                    "lower(repo)=lower($2) AND NOT EXISTS (SELECT 1 FROM runs o WHERE "
                    "o.head_sha=r.head_sha AND lower(o.repo)=lower(r.repo) AND o.workflow_name "
                    "IS NOT DISTINCT FROM r.workflow_name AND o.job_name=r.job_name AND "
                    "(o.updated_at>r.updated_at OR (o.updated_at=r.updated_at AND o.seq>r.seq))) "
                    "ORDER BY workflow_name COLLATE \"C\" NULLS FIRST, job_name COLLATE \"C\"",
                    &p, a->fn, a->ctx);
}

static crcr_err pg_runs_for_sha(store *st, const char *head_sha, const char *repo,
                                void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    runs_args a = {.a = head_sha, .b = repo, .fn = fn, .ctx = ctx};
    return with_conn(PS(st), "runs_for_sha", op_runs_for_sha, &a);
}

static crcr_err op_zombies(pgx *x, void *arg)
{
    runs_args *a = arg;
    pgp p = {0};
    p_i64(&p, a->i);
    p_i64(&p, a->j);
    return run_rows(x,
                    "SELECT " RUN_COLUMNS " FROM runs WHERE state='in_progress' AND started_at < "
                    "$1 ORDER BY started_at, seq LIMIT $2",
                    &p, a->fn, a->ctx);
}

static crcr_err pg_zombies(store *st, int64_t started_before, int limit,
                           void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    runs_args a = {.i = started_before, .j = limit > 0 ? limit : 100, .fn = fn, .ctx = ctx};
    return with_conn(PS(st), "zombies", op_zombies, &a);
}

typedef struct simple_args {
    const char *sql;
    const char *a, *b;
    int64_t i;
    int64_t rows;
} simple_args;

/* A statement over ($1 text, $2 text, $3 bigint); rows receives the affected/returned rows. */
static crcr_err op_simple(pgx *x, void *arg)
{
    simple_args *a = arg;
    pgp p = {0};
    p_text(&p, a->a);
    p_text(&p, a->b);
    p_i64(&p, a->i);
    return qexec(x, a->sql, &p, &a->rows);
}

static crcr_err pg_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    simple_args a = {.sql = "INSERT INTO labels_wanted(head_sha, repo, created_at) VALUES ($1, "
                            "$2, $3) ON CONFLICT (head_sha, lower(repo)) DO UPDATE SET "
                            "created_at=excluded.created_at",
                     .a = head_sha,
                     .b = repo,
                     .i = now};
    return with_conn(PS(st), "wanted_set", op_simple, &a);
}

static crcr_err pg_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since)
{
    simple_args a = {.sql = "SELECT 1 FROM labels_wanted WHERE head_sha=$1 AND "
                            "lower(repo)=lower($2) AND created_at >= $3",
                     .a = head_sha,
                     .b = repo,
                     .i = since};
    crcr_err e = with_conn(PS(st), "wanted_get", op_simple, &a);
    if (e)
        return e;
    return a.rows > 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

typedef struct rate_args {
    const char *repo;
    int64_t now, window_ms;
    long limit;
    bool *allowed;
    int64_t *retry_after_ms;
} rate_args;

/* One count for a repo: `sql` over ($1 repo[, $2 bigint]); *have tells whether a row came. */
static crcr_err rate_scalar(pgx *x, const char *sql, const char *repo, const int64_t *arg,
                            int64_t *out, bool *have)
{
    pgp p = {0};
    p_text(&p, repo);
    if (arg)
        p_i64(&p, *arg);
    PGresult *r = q(x, sql, &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    bool row = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0);
    if (have)
        *have = row;
    if (row)
        *out = r_i64(r, 0, 0, *out);
    PQclear(r);
    return CRCR_OK;
}

/* The sliding window of run_state.h (rate_window_*), as on SQLite: O(1) per hit whatever the
 * window holds. Hits of one repo are counted one at a time (an advisory lock per repo). */
static crcr_err op_rate_hit(pgx *x, void *arg)
{
    rate_args *a = arg;
    *a->allowed = false;
    *a->retry_after_ms = 0;
    crcr_err e = cmd(x, "BEGIN");
    if (e)
        return e;
    pgp l = {0};
    p_text(&l, a->repo);
    e = qexec(x,
              "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended('crcr.rate:' || "
              "lower($1::text), 0))) l",
              &l, NULL);
    bool have = false;
    int64_t count = 0, expired = 0, recounted = 0, oldest = a->now;
    if (!e)
        e = rate_scalar(x, "SELECT n FROM rate_counts WHERE lower(repo)=lower($1)", a->repo, NULL,
                        &count, &have);
    if (!e) {
        pgp p = {0};
        p_text(&p, a->repo);
        p_i64(&p, a->now - a->window_ms);
        e = qexec(x, "DELETE FROM rate_hits WHERE lower(repo)=lower($1) AND at <= $2", &p,
                  &expired);
    }
    if (!e && !have) /* first hit since rate_counts existed: count what the table holds */
        e = rate_scalar(x, "SELECT count(*) FROM rate_hits WHERE lower(repo)=lower($1)", a->repo,
                        NULL, &recounted, NULL);
    int64_t n = rate_window_count(have, count, expired, recounted);
    if (!e && n >= a->limit)
        e = rate_scalar(x, "SELECT min(at) FROM rate_hits WHERE lower(repo)=lower($1)", a->repo,
                        NULL, &oldest, NULL);
    bool allow = false;
    int64_t retry = 0;
    if (!e) {
        count = rate_window_decide(n, a->limit, oldest, a->now, a->window_ms, &allow, &retry);
        if (allow) {
            pgp p = {0};
            p_text(&p, a->repo);
            p_i64(&p, a->now);
            e = qexec(x, "INSERT INTO rate_hits(repo, at) VALUES ($1, $2)", &p, NULL);
        }
    }
    if (!e && (!have || expired || allow)) {
        pgp p = {0};
        p_text(&p, a->repo);
        p_i64(&p, count);
        e = qexec(x,
                  "INSERT INTO rate_counts(repo, n) VALUES ($1, $2) ON CONFLICT (lower(repo)) DO "
                  "UPDATE SET n=excluded.n",
                  &p, NULL);
    }
    e = finish_tx(x, e, false);
    if (!e) {
        *a->allowed = allow;
        *a->retry_after_ms = retry;
    }
    return e;
}

static crcr_err pg_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                            bool *allowed, int64_t *retry_after_ms)
{
    rate_args a = {repo, now, window_ms, limit, allowed, retry_after_ms};
    return with_conn(PS(st), "rate", op_rate_hit, &a);
}

typedef struct enqueue_args {
    const char *delivery_id;
    const store_new_job *jobs;
    size_t n;
} enqueue_args;

static crcr_err op_enqueue(pgx *x, void *arg)
{
    enqueue_args *a = arg;
    crcr_err e = cmd(x, "BEGIN");
    if (e)
        return e;
    int64_t now = a->n ? a->jobs[0].due_at : 0;
    e = insert_jobs(x, a->delivery_id, a->jobs, a->n, now);
    return finish_tx(x, e, false);
}

static crcr_err pg_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    enqueue_args a = {delivery_id, jobs, n};
    return with_conn(PS(st), "enqueue", op_enqueue, &a);
}

typedef struct lease_args {
    const char *name, *owner;
    int64_t now, ttl_ms;
    bool *held;
} lease_args;

static crcr_err op_lease(pgx *x, void *arg)
{
    lease_args *a = arg;
    char key[128];
    snprintf(key, sizeof(key), "lease:%s", a->name);
    pgp p = {0};
    p_text(&p, key);
    p_bytes(&p, a->owner, strlen(a->owner));
    p_i64(&p, a->now + a->ttl_ms);
    p_i64(&p, a->now);
    int64_t rows = 0;
    /* One statement: taken when free, expired, or already ours; otherwise nothing changes. */
    crcr_err e = qexec(x,
                       "INSERT INTO kv(key, value, expires_at) VALUES ($1, $2::bytea, $3) ON "
                       "CONFLICT (key) DO UPDATE SET value=excluded.value, "
                       "expires_at=excluded.expires_at WHERE kv.value=excluded.value OR "
                       "kv.expires_at < $4",
                       &p, &rows);
    *a->held = !e && rows > 0;
    return e;
}

static crcr_err pg_lease(store *st, const char *name, const char *owner, int64_t now,
                         int64_t ttl_ms, bool *held)
{
    *held = false;
    lease_args a = {name, owner, now, ttl_ms, held};
    return with_conn(PS(st), "lease", op_lease, &a);
}

/* Planned with the actual parameter values, so that unset filters fold away and the matching
 * index is used. */
#define RUNS_LIST_FROM                                                                             \
    " FROM runs WHERE ($1::text IS NULL OR lower(repo)=lower($1::text)) "                          \
    "AND ($2::bigint=0 OR pr_number=$2::bigint) AND ($3::text IS NULL OR head_sha=$3::text) "      \
    "AND ($4::integer=0 OR ($4::integer=1 AND COALESCE(event_type,'') NOT IN "                     \
    "('nightly','periodic')) OR ($4::integer=2 AND event_type IN ('nightly','periodic'))) AND "    \
    "updated_at >= $5 ORDER BY updated_at DESC, seq DESC LIMIT $6 OFFSET $7"

static crcr_err op_list_runs(pgx *x, void *arg)
{
    runs_args *a = arg;
    const store_run_filter *f = a->f;
    pgp p = {0};
    p_text(&p, f ? f->repo : NULL);
    p_i64(&p, f ? f->pr_number : 0);
    p_text(&p, f ? f->head_sha : NULL);
    p_i64(&p, f ? f->kind : 0);
    p_i64(&p, f ? f->since : 0);
    p_i64(&p, run_list_limit(f));
    p_i64(&p, run_list_offset(f));
    /* Listings may leave the payloads out. */
    return run_rows(x,
                    f && f->no_payload ? "SELECT " RUN_COLUMNS_NO_PAYLOAD
                                         ", NULL::bytea" RUNS_LIST_FROM
                                       : "SELECT " RUN_COLUMNS RUNS_LIST_FROM,
                    &p, a->fn, a->ctx);
}

static crcr_err pg_list_runs(store *st, const store_run_filter *f,
                             void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    runs_args a = {.f = f, .fn = fn, .ctx = ctx};
    return with_conn(PS(st), "list_runs", op_list_runs, &a);
}

static crcr_err pg_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    simple_args a = {.sql = "INSERT INTO callback_rejections(repo, at, status) VALUES ($1, $3, "
                            "$2::integer)",
                     .a = repo,
                     .i = now};
    char num[16];
    snprintf(num, sizeof(num), "%d", status);
    a.b = num;
    return with_conn(PS(st), "rejected", op_simple, &a);
}

typedef struct count_args {
    const char *repo;
    int64_t since;
    int64_t *n;
} count_args;

static crcr_err op_callback_rejections(pgx *x, void *arg)
{
    count_args *a = arg;
    pgp p = {0};
    p_text(&p, a->repo);
    p_i64(&p, a->since);
    PGresult *r = q(x,
                    "SELECT count(*) FROM callback_rejections WHERE lower(repo)=lower($1) AND "
                    "at>=$2",
                    &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    *a->n = r_i64(r, 0, 0, 0);
    PQclear(r);
    return CRCR_OK;
}

static crcr_err pg_callback_rejections(store *st, const char *repo, int64_t since, int64_t *n)
{
    *n = 0;
    count_args a = {repo, since, n};
    return with_conn(PS(st), "rejections", op_callback_rejections, &a);
}

/* ---- dispatch records, identity pins, budgets ---- */

typedef struct dispatch_args {
    const char *delivery_id, *repo;
    bool with_payload;
    store_dispatch *out;
} dispatch_args;

static crcr_err op_dispatch_get(pgx *x, void *arg)
{
    dispatch_args *a = arg;
    pgp p = {0};
    p_text(&p, a->delivery_id);
    p_text(&p, a->repo);
    p_i64(&p, a->with_payload ? 1 : 0);
    PGresult *r = q(x,
                    "SELECT COALESCE(o.done_at, o.created_at), d.pr_number, d.head_sha, d.event, "
                    "CASE WHEN $3::bigint=1 THEN d.payload END FROM outbox o JOIN deliveries d "
                    "ON d.delivery_id=o.delivery_id WHERE o.kind='dispatch' AND "
                    "o.delivery_id=$1 AND lower(o.target)=lower($2) LIMIT 1",
                    &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    crcr_err e = CRCR_OK;
    if (PQntuples(r) == 0) {
        e = CRCR_E_NOT_FOUND;
    } else {
        store_dispatch *o = a->out;
        o->dispatched_at = r_i64(r, 0, 0, 0);
        o->pr_number = r_i64(r, 0, 1, 0);
        snprintf(o->head_sha, sizeof(o->head_sha), "%s", r_text(r, 0, 2) ? r_text(r, 0, 2) : "");
        snprintf(o->event, sizeof(o->event), "%s", r_text(r, 0, 3) ? r_text(r, 0, 3) : "");
        if (a->with_payload && r_len(r, 0, 4))
            e = buf_append(&o->payload, PQgetvalue(r, 0, 4), r_len(r, 0, 4));
    }
    PQclear(r);
    return e;
}

static crcr_err pg_dispatch_get(store *st, const char *delivery_id, const char *repo,
                                bool with_payload, store_dispatch *out)
{
    out->dispatched_at = out->pr_number = 0;
    out->head_sha[0] = out->event[0] = '\0';
    dispatch_args a = {delivery_id, repo, with_payload, out};
    return with_conn(PS(st), "dispatch_get", op_dispatch_get, &a);
}

typedef struct pin_args {
    const char *repo, *repository_id, *owner_id;
    int64_t now;
    store_pin_outcome *outcome;
    void (*seen)(void *ctx, const store_identity_row *row);
    void *ctx;
} pin_args;

static void identity_row(const PGresult *r, int i, store_identity_row *row)
{
    row->repo = r_text(r, i, 0);
    row->repository_id = r_text(r, i, 1);
    row->owner_id = r_text(r, i, 2);
    row->pinned_at = r_i64(r, i, 3, 0);
    row->last_seen_at = r_i64(r, i, 4, 0);
}

/* The pin, created first when the name has none and ids are given: one statement either way (a
 * concurrent first callback of the same name on another instance keeps the first pin). */
static crcr_err op_identity_pin(pgx *x, void *arg)
{
    pin_args *a = arg;
    bool have_ids = *a->repository_id && *a->owner_id;
    if (have_ids) {
        pgp p = {0};
        p_text(&p, a->repo);
        p_text(&p, a->repository_id);
        p_text(&p, a->owner_id);
        p_i64(&p, a->now);
        crcr_err e = qexec(x,
                           "INSERT INTO repo_identity(repo, repository_id, owner_id, pinned_at, "
                           "last_seen_at) VALUES ($1, $2, $3, $4, $4) ON CONFLICT (lower(repo)) "
                           "DO NOTHING",
                           &p, NULL);
        if (e)
            return e;
    }
    pgp p = {0};
    p_text(&p, a->repo);
    PGresult *r = q(x,
                    "SELECT repo, repository_id, owner_id, pinned_at, last_seen_at FROM "
                    "repo_identity WHERE lower(repo)=lower($1)",
                    &p);
    pgp_free(&p);
    if (!r)
        return CRCR_E_STORE;
    if (PQntuples(r) == 0) {
        *a->outcome = STORE_PIN_NONE;
    } else {
        store_identity_row row;
        identity_row(r, 0, &row);
        bool same = have_ids && strcmp(row.repository_id, a->repository_id) == 0 &&
                    strcmp(row.owner_id, a->owner_id) == 0;
        *a->outcome = same ? STORE_PIN_MATCH : STORE_PIN_MISMATCH;
        if (!same && a->seen)
            a->seen(a->ctx, &row);
    }
    PQclear(r);
    return CRCR_OK;
}

static crcr_err pg_identity_pin(store *st, const char *repo, const char *repository_id,
                                const char *owner_id, int64_t now, store_pin_outcome *outcome,
                                void (*seen)(void *ctx, const store_identity_row *row), void *ctx)
{
    pin_args a = {repo, repository_id, owner_id, now, outcome, seen, ctx};
    return with_conn(PS(st), "identity_pin", op_identity_pin, &a);
}

typedef struct identity_list_args {
    void (*fn)(void *ctx, const store_identity_row *row);
    void *ctx;
} identity_list_args;

static crcr_err op_identity_list(pgx *x, void *arg)
{
    identity_list_args *a = arg;
    PGresult *r = q(x,
                    "SELECT repo, repository_id, owner_id, pinned_at, last_seen_at FROM "
                    "repo_identity ORDER BY lower(repo)",
                    NULL);
    if (!r)
        return CRCR_E_STORE;
    for (int i = 0; i < PQntuples(r); i++) {
        store_identity_row row;
        identity_row(r, i, &row);
        a->fn(a->ctx, &row);
    }
    PQclear(r);
    return CRCR_OK;
}

static crcr_err pg_identity_list(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                                 void *ctx)
{
    identity_list_args a = {fn, ctx};
    return with_conn(PS(st), "identity_list", op_identity_list, &a);
}

static crcr_err pg_identity_reset(store *st, const char *repo)
{
    simple_args a = {.sql = "DELETE FROM repo_identity WHERE lower(repo)=lower($1) AND $2::text "
                            "IS NULL AND $3::bigint=0",
                     .a = repo};
    crcr_err e = with_conn(PS(st), "identity_reset", op_simple, &a);
    if (e)
        return e;
    return a.rows > 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

typedef struct budget_args {
    const char *name;
    int64_t amount, limit, expires_at;
    bool *allowed;
} budget_args;

static crcr_err op_budget_take(pgx *x, void *arg)
{
    budget_args *a = arg;
    pgp p = {0};
    p_text(&p, a->name);
    p_i64(&p, a->amount);
    p_i64(&p, a->expires_at);
    p_i64(&p, a->limit);
    int64_t rows = 0;
    crcr_err e = qexec(x,
                       "INSERT INTO budgets(name, used, expires_at) VALUES ($1, $2, $3) ON "
                       "CONFLICT (name) DO UPDATE SET used=budgets.used+excluded.used WHERE "
                       "budgets.used+excluded.used <= $4",
                       &p, &rows);
    if (!e)
        *a->allowed = rows > 0;
    return e;
}

static crcr_err pg_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                               int64_t expires_at, bool *allowed)
{
    *allowed = false;
    if (amount > limit)
        return CRCR_OK;
    budget_args a = {name, amount, limit, expires_at, allowed};
    return with_conn(PS(st), "budget_take", op_budget_take, &a);
}

/* ---- waking workers ---- */

/* Takes every pending notification; true when there was at least one. */
static bool drain_notifies(PGconn *c)
{
    bool any = false;
    PGnotify *n;
    while ((n = PQnotifies(c)) != NULL) {
        any = true;
        PQfreemem(n);
    }
    return any;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * Waits up to timeout_ms for a NOTIFY on crcr_outbox from any instance. CRCR_OK: new outbox rows
 * may be due (also right after the listener (re)connected, since notifications may have been
 * missed). CRCR_E_NOT_FOUND: the time passed. CRCR_E_STORE: the database is away (after waiting
 * out the timeout, so that callers can loop without spinning).
 */
static crcr_err pg_wait_for_work(store *st, int64_t timeout_ms)
{
    pg_store *s = PS(st);
    pthread_mutex_lock(&s->lmu);
    if (s->listener && PQstatus(s->listener) != CONNECTION_OK)
        listener_drop(s);
    if (!s->listener) {
        int64_t now = clock_mono_ms();
        if (now >= s->listen_retry_at) {
            char why[PG_ERRTEXT_MAX] = "";
            PGconn *c = listener_open(s, why, sizeof(why));
            s->listener = c;
            if (!c) {
                s->listen_retry_at = now + PG_LISTEN_RETRY_MS;
                LOG_DEBUG("store.pg.listen_failed", "error", why, NULL);
            }
        }
        if (s->listener) {
            pthread_mutex_unlock(&s->lmu);
            return CRCR_OK;
        }
        pthread_mutex_unlock(&s->lmu);
        sleep_ms(timeout_ms);
        return CRCR_E_STORE;
    }
    /* The lock could not be taken when the listener (re)connected: the session that held it had
     * not ended yet (the server notices a dropped connection late). Until then it protects this
     * instance's rows; claims made meanwhile record no owner. */
    if (atomic_load(&s->live_id) && !atomic_load(&s->live_since))
        live_lock(s, s->listener);
    crcr_err e = CRCR_E_NOT_FOUND;
    if (drain_notifies(s->listener)) {
        e = CRCR_OK;
    } else {
        struct pollfd pfd = {.fd = PQsocket(s->listener), .events = POLLIN};
        int rc = poll(&pfd, 1, timeout_ms > 0 ? (int)timeout_ms : 0);
        if (rc > 0) {
            if (!PQconsumeInput(s->listener)) {
                listener_drop(s);
                e = CRCR_E_STORE;
            } else if (drain_notifies(s->listener)) {
                e = CRCR_OK;
            }
        }
    }
    pthread_mutex_unlock(&s->lmu);
    return e;
}

/* ---- open / close ---- */

/* Closes every connection and frees the store; NULL is fine. */
static void pg_close(store *st)
{
    pg_store *s = PS(st);
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        PQfinish(s->conns ? s->conns[i] : NULL);
    PQfinish(s->listener);
    free(s->conns);
    free(s->busy);
    if (s->uri) {
        memset(s->uri, 0, strlen(s->uri)); /* may hold a password */
        free(s->uri);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->lmu);
    free(s);
}

static const store_ops PG_OPS = {
    .close = pg_close,
    .recover = pg_recover,
    .ping = pg_ping,
    .ingest = pg_ingest,
    .claim = pg_claim,
    .next_due = pg_next_due,
    .job_finish = pg_job_finish,
    .job_retry = pg_job_retry,
    .job_renew = pg_job_renew,
    .redeliver = pg_redeliver,
    .list_deliveries = pg_list_deliveries,
    .get_delivery = pg_get_delivery,
    .outbox_stats = pg_outbox_stats,
    .kv_get = pg_kv_get,
    .kv_put = pg_kv_put,
    .retention = pg_retention,
    .run_apply = pg_run_apply,
    .runs_for_sha = pg_runs_for_sha,
    .zombies = pg_zombies,
    .wanted_set = pg_wanted_set,
    .wanted_get = pg_wanted_get,
    .rate_hit = pg_rate_hit,
    .enqueue = pg_enqueue,
    .lease = pg_lease,
    .list_runs = pg_list_runs,
    .callback_rejected = pg_callback_rejected,
    .callback_rejections = pg_callback_rejections,
    .dispatch_get = pg_dispatch_get,
    .identity_pin = pg_identity_pin,
    .identity_list = pg_identity_list,
    .identity_reset = pg_identity_reset,
    .budget_take = pg_budget_take,
    .wait_for_work = pg_wait_for_work,
};

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
        one_line(perr ? perr : "out of memory", msg, sizeof(msg));
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
    s->base.ops = &PG_OPS;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->lmu, NULL);
    s->n = n;
    s->uri = strdup(uri);
    s->conns = calloc(n, sizeof(*s->conns));
    s->busy = calloc(n, sizeof(*s->busy));
    if (!s->uri || !s->conns || !s->busy) {
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
