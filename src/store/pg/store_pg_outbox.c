/*
 * store_pg_outbox.c - the PostgreSQL store's deliveries and outbox: ingest, claims (SKIP LOCKED,
 * tied to the claiming instance's liveness), finish/retry/renew under the claim's lease,
 * redeliver, the delivery listings and outbox statistics, the kv cache and named leases,
 * retention. Writes that add outbox rows NOTIFY the listeners at commit. See store_pg.c for the
 * connections and what keeps several instances correct.
 */
#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "jw.h"
#include "store_pg.h"
#include "vocab.h"

/* The JSON document of one batched INSERT at the most (its rows' kind, target, hex body). */
#define PG_JOBS_JSON_MAX (8u * 1024 * 1024)

/* Whether a job goes in the one-statement batch: no order among its rows to keep. */
static bool batched(const store_new_job *j)
{
    return !j->seq_key && !j->after_seq;
}

/* The rows of a batched INSERT as they come back: a claimed one's id goes to its job. */
typedef struct batch_claims {
    const store_new_job *jobs;
    size_t n;
    size_t next;    /* where the next claimed row's job is looked for first */
    int64_t queued; /* rows inserted queued */
} batch_claims;

/* Rows come back in the order inserted, so the search starts past the last match (one step per
 * row); it goes round once when they do not. */
static int batch_claimed(void *ctx, const store_row_source *s)
{
    batch_claims *b = ctx;
    if (s->i64(s->src, 3, 0) <= 0) { /* no lease: queued, or finished (store_new_job.done_state) */
        if (s->i64(s->src, 4, 0))
            b->queued++;
        return 0;
    }
    const char *kind = s->text(s->src, 1), *target = s->text(s->src, 2);
    for (size_t k = 0; kind && target && k < b->n; k++) {
        size_t i = (b->next + k) % b->n;
        const store_new_job *j = &b->jobs[i];
        if (store_new_job_claimed(j) && strcmp(j->kind, kind) == 0 &&
            strcmp(j->target, target) == 0) {
            *j->claimed_id = s->i64(s->src, 0, 0);
            b->next = i + 1;
            break;
        }
    }
    return 0;
}

/* The batched jobs of `jobs` as one INSERT: a JSON array of [kind, target, hex body, due, lease
 * (null: queued), done state (null: not finished)] read by jsonb_array_elements, in the jobs'
 * order (WITH ORDINALITY: ids follow it, as the claims' order does). One round trip instead of one
 * per row: a fan-out's ingest to 100 repositories made 100 INSERTs in its transaction. jsonb, not
 * json: a json element is parsed again by each ->> of it (six per row), a jsonb document once
 * (100 rows: 1.07 -> 0.23 ms in EXPLAIN ANALYZE). *inserted is the number of rows it took, 0 when
 * the document would pass PG_JOBS_JSON_MAX (the caller then inserts them a statement each);
 * *queued how many of them are queued (not claimed). `fresh` (non-NULL): the delivery is inserted
 * in this transaction, so no row of it exists and a row that conflicts repeats a target within
 * the delivery, which fails the ingest (as on SQLite; the allowlist never lists a repository
 * twice). The INSERT then has no ON CONFLICT DO NOTHING, which inserts each row speculatively: 100
 * rows took 1.79-1.98 ms with it and 0.94-0.98 ms without (EXPLAIN ANALYZE), on a warm fan-out's
 * path to its first request. And it is queued (pg_queue), to travel with the delivery's INSERT
 * and the next statement in one round trip: its claimed ids reach the jobs through *fresh, which
 * the caller keeps until the transaction ends, and *queued is counted from the jobs (every row
 * goes in). */
static crcr_err insert_batch(pgx *x, const char *delivery_id, const store_new_job *jobs, size_t n,
                             int64_t now, batch_claims *fresh, size_t *inserted, int64_t *queued)
{
    *inserted = 0;
    *queued = 0;
    buf_t doc;
    buf_init(&doc, PG_JOBS_JSON_MAX);
    jw w;
    jw_init(&w, &doc);
    jw_arr(&w);
    size_t k = 0;
    int64_t unclaimed = 0; /* rows that go in queued: neither claimed nor finished */
    for (size_t i = 0; i < n; i++) {
        const store_new_job *j = &jobs[i];
        if (!batched(j))
            continue;
        unclaimed += !store_new_job_claimed(j) && !j->done_state;
        jw_arr(&w);
        jw_str(&w, j->kind);
        jw_str(&w, j->target);
        if (j->body) {
            jw_value_begin(&w);
            crcr_err e = buf_putc(&doc, '"');
            if (!e)
                e = buf_append_hex(&doc, j->body, j->body_len);
            if (!e)
                e = buf_putc(&doc, '"');
            if (e && !w.err)
                w.err = e;
        } else {
            jw_null(&w);
        }
        jw_int(&w, j->due_at ? j->due_at : now);
        if (store_new_job_claimed(j))
            jw_int(&w, j->lease_until);
        else
            jw_null(&w);
        if (j->done_state)
            jw_str(&w, j->done_state);
        else
            jw_null(&w);
        jw_arr_end(&w);
        k++;
    }
    jw_arr_end(&w);
    crcr_err e = CRCR_OK;
    if (!w.err) {
        /* Rows with a lease are claimed by this instance (store_new_job.claimed_id), as a claim
         * does: running, its lease, this instance as their owner (none when not one). */
        pg_store *s = x->s;
        int id = atomic_load(&s->live_id);
        bool held = id > 0 && atomic_load(&s->live_since) > 0;
        batch_claims bc = {.jobs = jobs, .n = n};
        bool called_back = x->called_back;
#define PG_BATCH_INSERT(on_conflict)                                                               \
    "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, next_attempt_at, "       \
    "created_at, lease_until, owner, done_at) SELECT r->>0, $1, r->>1, decode(r->>2, 'hex'), "     \
    "CASE WHEN r->>5 IS NOT NULL THEN r->>5 WHEN r->>4 IS NULL THEN 'queued' ELSE 'running' END, " \
    "CASE WHEN r->>5 IS NULL THEN 0 ELSE 1 END, (r->>3)::bigint, $2, (r->>4)::bigint, CASE WHEN "  \
    "r->>4 IS NULL THEN NULL ELSE $4::integer END, CASE WHEN r->>5 IS NULL THEN NULL ELSE "        \
    "(r->>3)::bigint END FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS t(r, i) ORDER "   \
    "BY t.i " on_conflict "RETURNING id, kind, target, lease_until, (state='queued')::integer"
        if (fresh) {
            *fresh = bc;
            e = pg_queue(x, PG_BATCH_INSERT(""),
                         ARGS(ARG_TEXT(delivery_id), ARG_INT(now), ARG_TEXT(buf_cstr(&doc)),
                              ARG_INT_IF(held, id)),
                         batch_claimed, fresh, NULL);
            bc.queued = unclaimed;
        } else {
            e = pg_query(x, PG_BATCH_INSERT("ON CONFLICT DO NOTHING "),
                         ARGS(ARG_TEXT(delivery_id), ARG_INT(now), ARG_TEXT(buf_cstr(&doc)),
                              ARG_INT_IF(held, id)),
                         batch_claimed, &bc, NULL);
        }
#undef PG_BATCH_INSERT
        /* The ids reach the caller only through the outcome of the whole transaction: an
         * attempt retried on a fresh connection writes them again. */
        x->called_back = called_back;
        if (!e) {
            *inserted = k;
            *queued = bc.queued;
        }
    }
    buf_free(&doc);
    return e;
}

/* `fresh`: see insert_batch. */
static crcr_err insert_jobs(pgx *x, const char *delivery_id, const store_new_job *jobs, size_t n,
                            int64_t now, batch_claims *fresh)
{
    size_t n_batched = 0, in_batch = 0;
    int64_t added = 0; /* rows other instances may claim: their wake-up */
    for (size_t i = 0; i < n; i++)
        n_batched += batched(&jobs[i]);
    if (n_batched > 1) {
        crcr_err e = insert_batch(x, delivery_id, jobs, n, now, fresh, &in_batch, &added);
        if (e)
            return e;
    }
    for (size_t i = 0; i < n; i++) {
        const store_new_job *j = &jobs[i];
        if (in_batch && batched(j))
            continue;
        /* A row after_seq only follows a row of its seq_key (store.h). */
        crcr_err e =
            pg_query(x,
                     "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, "
                     "next_attempt_at, created_at, seq_key, done_at) SELECT $1, $2, $3, "
                     "$4::bytea, COALESCE($9::text, 'queued'), CASE WHEN $9::text IS NULL THEN 0 "
                     "ELSE 1 END, $5::bigint, $6, $7, CASE WHEN $9::text IS NULL THEN NULL ELSE "
                     "$5::bigint END WHERE NOT $8::boolean OR EXISTS (SELECT 1 FROM outbox s "
                     "WHERE s.seq_key=$7) ON CONFLICT DO NOTHING",
                     ARGS(ARG_TEXT(j->kind), ARG_TEXT(delivery_id), ARG_TEXT(j->target),
                          ARG_BLOB(j->body, j->body_len), ARG_INT(j->due_at ? j->due_at : now),
                          ARG_INT(now), ARG_TEXT(j->seq_key),
                          ARG_TEXT(j->after_seq ? "true" : "false"), ARG_TEXT(j->done_state)),
                     NULL, NULL, j->after_seq ? &added : NULL);
        if (e)
            return e;
        if (!j->after_seq && !j->done_state)
            added++;
    }
    return added ? pg_notify_rows(x, added) : CRCR_OK;
}

crcr_err pg_insert_jobs(pgx *x, const char *delivery_id, const store_new_job *jobs, size_t n,
                        int64_t now)
{
    return insert_jobs(x, delivery_id, jobs, n, now, NULL);
}

/* ---- ingest ---- */

/* Outbox rows to add: an ingest's with its delivery, or rows of an existing delivery. */
typedef struct jobs_args {
    const store_delivery *d;
    const char *delivery_id;
    const store_new_job *jobs;
    size_t n;
    store_supersede *sup; /* ingest: what it supersedes, or NULL */
    batch_claims claims;  /* ingest: the queued rows' claims (insert_batch), until it commits */
} jobs_args;

static crcr_err op_ingest(pgx *x, void *arg)
{
    jobs_args *a = arg;
    const store_delivery *d = a->d;
    store_supersede_uncount(a->sup); /* an attempt retried on a fresh connection counts afresh */
    store_new_jobs_unclaim(a->jobs, a->n); /* ... and claims afresh */
    /* A supersession takes the PR's lock (pg_lock_pr) first: here in the statement that inserts
     * the delivery (its subquery runs before the row is written), one round trip instead of two.
     * Nothing of the supersession is read before it. The INSERT, its rows' and the supersession's
     * first read travel together (pg_queue): a delivery stored already fails the INSERT with a
     * unique violation (CRCR_E_DUPLICATE), and the statements after it do not run. */
#define PG_INSERT_DELIVERY(source)                                                                 \
    "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, head_sha, ref, " \
    "received_at, payload, payload_bytes, status) " source
    bool lock = a->sup && d->pr_number > 0;
    crcr_err e = pg_queue_new(
        x,
        lock ? PG_INSERT_DELIVERY("SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::bytea, $10, $11 FROM "
                                  "(SELECT pg_advisory_xact_lock(" PG_PR_LOCK_KEY("$5") ")) l")
             : PG_INSERT_DELIVERY("VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::bytea, $10, $11)"),
        ARGS(ARG_TEXT(d->delivery_id), ARG_TEXT(d->event), ARG_TEXT(d->action),
             ARG_TEXT(d->upstream_repo), ARG_INT(d->pr_number), ARG_TEXT(d->head_sha),
             ARG_TEXT(d->ref), ARG_INT(d->received_at),
             ARG_BLOB(d->payload ? d->payload : "", d->payload_len),
             ARG_INT((int64_t)d->payload_len),
             ARG_TEXT(d->status ? d->status : ob_state_name(OB_STATE_QUEUED))));
#undef PG_INSERT_DELIVERY
    if (!e) /* the delivery is new: no row of it exists */
        e = insert_jobs(x, d->delivery_id, a->jobs, a->n, d->received_at, &a->claims);
    if (!e)
        e = pg_insert_pairs(x, d->delivery_id, d->pr_number, a->jobs, a->n, d->received_at);
    if (!e && a->sup)
        e = pg_supersede(x, d->delivery_id, d->pr_number, d->head_sha, a->jobs, a->n, a->sup,
                         d->received_at);
    return e;
}

/* No early hand-over (`vis`): the commit is durable when it returns. */
static crcr_err pg_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n,
                          store_supersede *sup, store_visible *vis)
{
    (void)vis;
    jobs_args a = {.d = d, .jobs = jobs, .n = n, .sup = sup};
    crcr_err e = pg_with_tx(pg_store_of(st), "ingest", op_ingest, &a);
    if (e) /* rolled back: nothing was ended */
        store_supersede_uncount(sup);
    return e;
}

static crcr_err op_enqueue(pgx *x, void *arg)
{
    jobs_args *a = arg;
    return pg_insert_jobs(x, a->delivery_id, a->jobs, a->n, a->n ? a->jobs[0].due_at : 0);
}

static crcr_err pg_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    jobs_args a = {.delivery_id = delivery_id, .jobs = jobs, .n = n};
    return pg_with_tx(pg_store_of(st), "enqueue", op_enqueue, &a);
}

/* ---- claims and the claimed row's fences ---- */

typedef struct claim_args {
    int64_t now, lease_ms;
    store_job *out; /* room for max rows */
    size_t max, n;
    crcr_err err; /* of a copy */
} claim_args;

/* One claimed row (store_claim_row), then its delivery's fields and what it was before. */
static int claimed_row(void *ctx, const store_row_source *s)
{
    claim_args *a = ctx;
    if (a->n >= a->max) /* cannot happen (LIMIT max); keeps the array bounded all the same */
        return 0;
    store_job *out = &a->out[a->n++];
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, PG_JOB_BYTES_MAX);
    buf_init(&out->payload, PG_JOB_BYTES_MAX);
    store_claim_read read = {.out = out};
    store_claim_row(&read, s);
    crcr_err err = read.err;
    out->lease_until = a->now + a->lease_ms;
    /* The delivery's fields come with the first of its rows in the result (column 12 is 1);
     * the rows after it share them with that one: a fan-out's claim returns and holds its
     * ~30 KB payload once, not once per row. */
    const store_job *first = NULL;
    if (!s->i64(s->src, 12, 1) && out->delivery_id)
        for (size_t k = a->n - 1; k-- > 0 && !first;)
            if (a->out[k].delivery_id && strcmp(a->out[k].delivery_id, out->delivery_id) == 0)
                first = &a->out[k];
    if (first) {
        if (!err)
            err = store_job_share_delivery(a->out, a->n - 1, (size_t)(first - a->out));
    } else {
        out->event = store_row_dup(s, 6);
        if (!err)
            err = store_row_append(s, 7, &out->payload);
        out->pr_number = s->i64(s->src, 8, 0);
        out->head_sha = store_row_dup(s, 9);
    }
    const char *was = s->text(s->src, 10);
    if (ob_state_parse(was) == OB_STATE_RUNNING)
        out->reclaimed = s->i64(s->src, 11, 0) < a->now ? "lease_expired" : "holder_gone";
    if (!err && (!out->kind || !out->target))
        err = CRCR_E_NOMEM;
    if (err && !a->err)
        a->err = err;
    return 0;
}

/* The claim statement around its choice of rows ($1 lease, $2 now, $3 owner; the limit is the
 * last parameter): leases them and returns them with their delivery's fields, in due order. */
#define PG_CLAIM_HEAD                                                                              \
    "WITH c AS (UPDATE outbox u SET state='running', lease_until=$1, owner=$3::integer FROM "      \
    "(SELECT id, state, lease_until FROM outbox o WHERE "
#define PG_CLAIM_TAIL(limit)                                                                       \
    " AND (o.seq_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p WHERE p.seq_key=o.seq_key "     \
    "AND p.id<o.id AND p.state IN ('queued','running'))) ORDER BY next_attempt_at, id "            \
    "LIMIT " limit                                                                                 \
    " FOR UPDATE SKIP LOCKED) w WHERE u.id=w.id RETURNING u.id, u.kind, u.delivery_id, "           \
    "u.target, u.attempts, u.body, w.state AS was_state, w.lease_until AS was_lease, "             \
    "u.next_attempt_at), f AS (SELECT c.*, (row_number() OVER (PARTITION BY c.delivery_id ORDER "  \
    "BY c.next_attempt_at, c.id) = 1)::integer AS first FROM c) SELECT f.id, f.kind, "             \
    "f.delivery_id, f.target, f.attempts, f.body, CASE WHEN f.first = 1 THEN d.event END, CASE "   \
    "WHEN f.first = 1 THEN d.payload END, d.pr_number, CASE WHEN f.first = 1 THEN d.head_sha "     \
    "END, "                                                                                        \
    "f.was_state, f.was_lease, f.first FROM f LEFT JOIN deliveries d ON d.delivery_id = "          \
    "f.delivery_id ORDER BY f.next_attempt_at, f.id"

/* Running rows that are due again ($4 may judge liveness, $5 the lock class, $6 the limit). */
static const char CLAIM_RUNNING[] =
    PG_CLAIM_HEAD "state='running' AND (lease_until<$2 OR ($4::boolean AND o.owner IS NOT NULL "
                  "AND o.owner IS DISTINCT FROM $3::integer AND "
                  "pg_try_advisory_xact_lock_shared($5::integer, o.owner)))" PG_CLAIM_TAIL("$6");
/* Queued rows whose time has come ($4 the limit): one range of outbox_due, read in order. */
static const char CLAIM_QUEUED[] =
    PG_CLAIM_HEAD "state='queued' AND next_attempt_at<=$2" PG_CLAIM_TAIL("$4");

/*
 * Up to `max` due rows: running rows due again first (few), then queued ones. A running row is
 * due when its lease expired or, once this instance may judge (PG_LIVE_GRACE_MS), when another
 * instance's lock on its owner is not held: a shared try-lock on the owner's key succeeds exactly
 * then (held only to the end of its statement). An instance never judges itself, and a claim
 * made while this process holds no lock records no owner (lease only). Two rows of one seq_key
 * are never claimed together: the later sees the earlier queued or running. Two statements, not
 * one with an OR of both: the OR made PostgreSQL read and sort every due row for every claim
 * (76 ms a claim with 22,600 queued rows, JIT compilation included; bench/RESULTS.md).
 */
static crcr_err op_claim(pgx *x, void *arg)
{
    claim_args *a = arg;
    for (size_t i = 0; i < a->n; i++) /* rows of an attempt that failed (nothing was claimed) */
        store_job_free(&a->out[i]);
    a->n = 0;
    a->err = CRCR_OK;
    pg_store *s = x->s;
    int id = atomic_load(&s->live_id);
    int64_t since = atomic_load(&s->live_since);
    bool held = id > 0 && since > 0;
    bool may_judge =
        held && (atomic_load(&s->live_server_up) || clock_mono_ms() - since >= PG_LIVE_GRACE_MS);
    crcr_err e = pg_query(x, CLAIM_RUNNING,
                          ARGS(ARG_INT(a->now + a->lease_ms), ARG_INT(a->now), ARG_INT_IF(held, id),
                               ARG_TEXT(may_judge ? "true" : "false"), ARG_INT(PG_LIVE_CLASS),
                               ARG_INT((int64_t)a->max)),
                          claimed_row, a, NULL);
    if (!e && a->n > 0) /* leased now: a retry must not claim more on the caller's behalf */
        x->called_back = true;
    if (!e && a->n < a->max) {
        size_t before = a->n;
        e = pg_query(x, CLAIM_QUEUED,
                     ARGS(ARG_INT(a->now + a->lease_ms), ARG_INT(a->now), ARG_INT_IF(held, id),
                          ARG_INT((int64_t)(a->max - a->n))),
                     claimed_row, a, NULL);
        if (a->n > 0)
            x->called_back = true;
        if (e && before > 0) /* the rows of the first statement are ours all the same */
            e = CRCR_OK;
    }
    if (e)
        return e;
    if (a->n == 0)
        return CRCR_E_NOT_FOUND;
    return a->err;
}

static crcr_err pg_claim(store *st, int64_t now, int64_t lease_ms, store_job *out, size_t max,
                         size_t *n)
{
    claim_args a = {.now = now, .lease_ms = lease_ms, .out = out, .max = max};
    crcr_err e = pg_with_conn_relaxed(pg_store_of(st), "claim", op_claim, &a);
    if (e)
        for (size_t i = 0; i < a.n; i++)
            store_job_free(&out[i]);
    *n = e ? 0 : a.n;
    return e;
}

static crcr_err pg_next_due(store *st, int64_t *due)
{
    store_scalar min = {0};
    crcr_err e = pg_run(pg_store_of(st), "next_due",
                        "SELECT min(next_attempt_at) FROM outbox WHERE state='queued'", NULL, 0,
                        store_scalar_row, &min, NULL);
    if (e)
        return e;
    if (!min.found)
        return CRCR_E_NOT_FOUND;
    *due = min.v;
    return CRCR_OK;
}

/* An update of a claimed row under its lease (the fences of store.h), committed without waiting
 * for the server's disk (pg_with_conn_relaxed): CRCR_E_STATE when it changed nothing, the lease
 * was lost. */
static crcr_err fenced(store *st, const char *op, const char *sql, const store_param *v, int n)
{
    int64_t rows = 0;
    crcr_err e = pg_run_relaxed(pg_store_of(st), op, sql, v, n, NULL, NULL, &rows);
    return !e && rows == 0 ? CRCR_E_STATE : e;
}

/* The fenced updates of finish and retry, shared by the single calls and store_jobs_settle. */
#define PG_FINISH_SQL                                                                              \
    "UPDATE outbox SET state=$1, attempts=attempts+1, last_status=$2::integer, "                   \
    "last_error=$3, note=$4, body=COALESCE($5::bytea, body), done_at=$6, "                         \
    "lease_until=NULL, owner=NULL WHERE id=$7 AND state='running' AND lease_until=$8"
#define PG_RETRY_SQL                                                                               \
    "UPDATE outbox SET state='queued', attempts=attempts+$1::integer, "                            \
    "next_attempt_at=$2, last_status=$3::integer, last_error=$4, "                                 \
    "lease_until=NULL, owner=NULL WHERE id=$5 AND state='running' AND lease_until=$6"

static crcr_err pg_job_finish(store *st, int64_t id, int64_t lease, const char *state,
                              long http_status, const char *error, const char *note,
                              const char *body, size_t body_len, int64_t now)
{
    return fenced(st, "finish", PG_FINISH_SQL,
                  ARGS(ARG_TEXT(state), ARG_INT_IF(http_status > 0, http_status),
                       ARG_TEXT(error && *error ? error : NULL),
                       ARG_TEXT(note && *note ? note : NULL), ARG_BLOB(body, body_len),
                       ARG_INT(now), ARG_INT(id), ARG_INT(lease)));
}

static crcr_err pg_job_retry(store *st, int64_t id, int64_t lease, int64_t next_at,
                             bool count_attempt, long http_status, const char *error)
{
    return fenced(st, "retry", PG_RETRY_SQL,
                  ARGS(ARG_INT(count_attempt ? 1 : 0), ARG_INT(next_at),
                       ARG_INT_IF(http_status > 0, http_status),
                       ARG_TEXT(error && *error ? error : NULL), ARG_INT(id), ARG_INT(lease)));
}

typedef struct settle_args {
    store_settle *items;
    size_t n;
    int64_t *rows; /* per item: the rows its update changed, read at COMMIT (owned by
                      pg_jobs_settle) */
} settle_args;

/* Every outcome in one transaction on a relaxed connection, the updates queued (pg_queue) so
 * that they and COMMIT make one round trip, not one each; an item whose fence no longer holds is
 * CRCR_E_STATE (pg_jobs_settle), the others are written. */
static crcr_err op_settle(pgx *x, void *arg)
{
    settle_args *a = arg;
    for (size_t i = 0; i < a->n; i++) {
        store_settle *it = &a->items[i];
        const store_job *j = it->job;
        crcr_err e;
        if (it->finish)
            e = pg_queue(x, PG_FINISH_SQL,
                         ARGS(ARG_TEXT(it->state), ARG_INT_IF(it->http_status > 0, it->http_status),
                              ARG_TEXT(it->error && *it->error ? it->error : NULL),
                              ARG_TEXT(it->note && *it->note ? it->note : NULL),
                              ARG_BLOB(it->body, it->body_len), ARG_INT(it->now), ARG_INT(j->id),
                              ARG_INT(j->lease_until)),
                         NULL, NULL, &a->rows[i]);
        else
            e = pg_queue(x, PG_RETRY_SQL,
                         ARGS(ARG_INT(it->count_attempt ? 1 : 0), ARG_INT(it->next_at),
                              ARG_INT_IF(it->http_status > 0, it->http_status),
                              ARG_TEXT(it->error && *it->error ? it->error : NULL), ARG_INT(j->id),
                              ARG_INT(j->lease_until)),
                         NULL, NULL, &a->rows[i]);
        if (e)
            return e;
    }
    return CRCR_OK;
}

static crcr_err pg_jobs_settle(store *st, store_settle *items, size_t n)
{
    settle_args a = {items, n, calloc(n ? n : 1, sizeof(int64_t))};
    if (!a.rows)
        return CRCR_E_NOMEM;
    crcr_err e = pg_with_tx_relaxed(pg_store_of(st), "settle", op_settle, &a);
    for (size_t i = 0; !e && i < n; i++)
        items[i].result = a.rows[i] == 0 ? CRCR_E_STATE : CRCR_OK;
    free(a.rows);
    return e;
}

static crcr_err pg_job_renew(store *st, int64_t id, int64_t lease, int64_t new_lease)
{
    return fenced(st, "renew",
                  "UPDATE outbox SET lease_until=$1 WHERE id=$2 AND state='running' AND "
                  "lease_until=$3",
                  ARGS(ARG_INT(new_lease), ARG_INT(id), ARG_INT(lease)));
}

static crcr_err pg_job_record(store *st, int64_t id, int64_t lease, const char *body,
                              size_t body_len)
{
    return fenced(st, "record",
                  "UPDATE outbox SET body=$1::bytea WHERE id=$2 AND state='running' AND "
                  "lease_until=$3",
                  ARGS(ARG_BLOB(body, body_len), ARG_INT(id), ARG_INT(lease)));
}

typedef struct redeliver_args {
    const char *delivery_id, *repo;
    int64_t now;
    int64_t rows;
} redeliver_args;

static crcr_err op_redeliver(pgx *x, void *arg)
{
    redeliver_args *a = arg;
    int64_t found = 0;
    /* FOR SHARE: retention must not delete the delivery under the re-queued rows. */
    crcr_err e = pg_query(x, "SELECT 1 FROM deliveries WHERE delivery_id=$1 FOR SHARE",
                          ARGS(ARG_TEXT(a->delivery_id)), NULL, NULL, &found);
    if (!e && found == 0)
        e = CRCR_E_NOT_FOUND;
    a->rows = 0;
    if (!e)
        e = pg_query(x,
                     "UPDATE outbox SET state='queued', attempts=0, next_attempt_at=$1, "
                     "done_at=NULL, lease_until=NULL, owner=NULL, last_error=NULL, "
                     "last_status=NULL, note=NULL WHERE kind='dispatch' AND delivery_id=$2 AND "
                     "state<>'running' AND ($3::text IS NULL OR lower(target)=lower($3::text))",
                     ARGS(ARG_INT(a->now), ARG_TEXT(a->delivery_id), ARG_TEXT(a->repo)), NULL, NULL,
                     &a->rows);
    if (!e && a->rows == 0 && a->repo) {
        /* A repo that had no row for this delivery (added to the allowlist since): create one. */
        e = pg_query(x,
                     "INSERT INTO outbox(kind, delivery_id, target, state, attempts, "
                     "next_attempt_at, created_at) VALUES ('dispatch', $1, $2, 'queued', 0, $3, "
                     "$3) ON CONFLICT DO NOTHING",
                     ARGS(ARG_TEXT(a->delivery_id), ARG_TEXT(a->repo), ARG_INT(a->now)), NULL, NULL,
                     &a->rows);
    }
    if (!e && a->rows > 0)
        e = pg_notify_rows(x, a->rows);
    return e;
}

static crcr_err pg_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now,
                             int *n)
{
    redeliver_args a = {delivery_id, repo, now, 0};
    crcr_err e = pg_with_tx(pg_store_of(st), "redeliver", op_redeliver, &a);
    if (!e)
        *n = (int)a.rows;
    return e;
}

/* ---- listings ---- */

static crcr_err pg_list_deliveries(store *st, const store_filter *f, store_rows *rows)
{
    return pg_run(pg_store_of(st), "list",
                  "SELECT " DELIVERY_COLUMNS " FROM deliveries d WHERE ($1::text IS NULL OR "
                  "EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND "
                  "o.state=$1::text)) AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM outbox o "
                  "WHERE o.delivery_id=d.delivery_id AND lower(o.target)=lower($2::text))) "
                  "AND ($4::bigint=0 OR d.pr_number=$4::bigint) "
                  "ORDER BY d.received_at DESC, d.seq DESC LIMIT $3",
                  ARGS(ARG_TEXT(f->state), ARG_TEXT(f->repo), ARG_INT(f->limit > 0 ? f->limit : 50),
                       ARG_INT(f->pr_number)),
                  store_listing_row, rows, NULL);
}

typedef struct get_args {
    const char *delivery_id;
    store_delivery_read *delivery;
    store_rows *jobs;
} get_args;

static crcr_err op_get_delivery(pgx *x, void *arg)
{
    get_args *a = arg;
    PGresult *d = pg_result(x,
                            "SELECT " DELIVERY_COLUMNS ", d.payload FROM deliveries d WHERE "
                            "d.delivery_id=$1",
                            ARGS(ARG_TEXT(a->delivery_id)));
    if (!d)
        return CRCR_E_STORE;
    if (PQntuples(d) == 0) {
        PQclear(d);
        return CRCR_E_NOT_FOUND;
    }
    PGresult *j = NULL;
    if (a->jobs->job) {
        /* Both reads first: a failure must not follow a callback. */
        j = pg_result(x,
                      "SELECT " JOB_COLUMNS " FROM outbox o" JOB_ENDS_JOIN
                      " WHERE o.delivery_id=$1 ORDER BY o.id",
                      ARGS(ARG_TEXT(a->delivery_id)));
        if (!j) {
            PQclear(d);
            return CRCR_E_STORE;
        }
    }
    x->called_back = true;
    pg_each(d, store_delivery_read_row, a->delivery);
    if (j)
        pg_each(j, store_listing_row, a->jobs);
    PQclear(j);
    PQclear(d);
    return a->delivery->err; /* the shared reader's (store_row_payload) */
}

static crcr_err pg_get_delivery(store *st, const char *delivery_id, store_delivery_read *delivery,
                                store_rows *jobs)
{
    get_args a = {delivery_id, delivery, jobs};
    return pg_with_conn(pg_store_of(st), "get", op_get_delivery, &a);
}

static crcr_err pg_outbox_stats(store *st, store_outbox_stats *out)
{
    return pg_run(pg_store_of(st), "stats",
                  "SELECT state, count(*), min(next_attempt_at) FROM outbox GROUP BY state", NULL,
                  0, store_stats_row, out, NULL);
}

/* ---- kv and leases ---- */

static crcr_err pg_kv_get(store *st, const char *key, int64_t now, store_kv_read *value)
{
    return pg_run(pg_store_of(st), "kv_get",
                  "SELECT value FROM kv WHERE key=$1 AND (expires_at=0 OR expires_at>$2)",
                  ARGS(ARG_TEXT(key), ARG_INT(now)), store_kv_row, value, NULL);
}

static crcr_err pg_kv_put(store *st, const char *key, const char *value, size_t len,
                          int64_t expires_at)
{
    return pg_run(pg_store_of(st), "kv_put",
                  "INSERT INTO kv(key, value, expires_at) VALUES ($1, $2::bytea, $3) ON CONFLICT "
                  "(key) DO UPDATE SET value=excluded.value, expires_at=excluded.expires_at",
                  ARGS(ARG_TEXT(key), ARG_BLOB(value, len), ARG_INT(expires_at)), NULL, NULL, NULL);
}

/* A prefix's range compared byte-wise (COLLATE "C"), whatever the database's collation. */
static crcr_err pg_kv_scan(store *st, const char *lo, const char *hi, int64_t now, size_t max,
                           store_kv_fn fn, void *ctx)
{
    store_kv_scan_read r = {.fn = fn, .ctx = ctx, .left = max};
    if (max == 0)
        return CRCR_OK;
    return pg_run(pg_store_of(st), "kv_scan",
                  "SELECT key, value FROM kv WHERE key COLLATE \"C\" >= $1 AND key COLLATE \"C\" < "
                  "$2 AND (expires_at=0 OR expires_at>$3) ORDER BY key COLLATE \"C\"",
                  ARGS(ARG_TEXT(lo), ARG_TEXT(hi), ARG_INT(now)), store_kv_scan_row, &r, NULL);
}

static crcr_err pg_kv_delete(store *st, const char *key)
{
    return pg_run(pg_store_of(st), "kv_delete", "DELETE FROM kv WHERE key=$1", ARGS(ARG_TEXT(key)),
                  NULL, NULL, NULL);
}

/* The shares of the GitHub budget live in kv as "ghslots:<instance id>" = the share (decimal),
 * without expiry: an instance's share counts while the instance is alive (its advisory lock,
 * store_pg_live.c) and is dropped by the next instance that changes its own once it is not. One
 * change at a time (a transaction-scoped advisory lock of class PG_SLOTS_CLASS). */
#define PG_SLOTS_PREFIX "ghslots:"

typedef struct slots_args {
    long total, want, granted;
} slots_args;

static crcr_err op_slots(pgx *x, void *arg)
{
    slots_args *a = arg;
    pg_store *s = x->s;
    int id = atomic_load(&s->live_id);
    int64_t since = atomic_load(&s->live_since);
    bool held = id > 0 && since > 0;
    bool may_judge =
        held && (atomic_load(&s->live_server_up) || clock_mono_ms() - since >= PG_LIVE_GRACE_MS);
    char me[48];
    snprintf(me, sizeof(me), PG_SLOTS_PREFIX "%d", id);
    store_scalar others = {0};
    /* The lock and the clean-up travel with the read (pg_queue), the write with COMMIT: two
     * round trips, not four or five. The read still runs after the lock is held: a pipeline's
     * statements run one after the other, each with a snapshot of its own. */
    crcr_err e = pg_queue(x, "SELECT pg_advisory_xact_lock($1::integer, 0)",
                          ARGS(ARG_INT(PG_SLOTS_CLASS)), NULL, NULL, NULL);
    if (!e && may_judge)
        e = pg_queue(x,
                     "DELETE FROM kv WHERE key LIKE '" PG_SLOTS_PREFIX "%' AND key<>$1 AND "
                     "pg_try_advisory_xact_lock_shared($2::integer, substr(key, $3)::integer)",
                     ARGS(ARG_TEXT(me), ARG_INT(PG_LIVE_CLASS),
                          ARG_INT((int64_t)strlen(PG_SLOTS_PREFIX) + 1)),
                     NULL, NULL, NULL);
    if (!e)
        e = pg_query(x,
                     "SELECT COALESCE(sum(convert_from(value, 'UTF8')::bigint), 0)::bigint FROM kv "
                     "WHERE key LIKE '" PG_SLOTS_PREFIX "%' AND key<>$1",
                     ARGS(ARG_TEXT(me)), store_scalar_row, &others, NULL);
    if (e)
        return e;
    long left = a->total - (long)others.v;
    a->granted = a->want < left ? a->want : (left > 0 ? left : 0);
    char v[24];
    snprintf(v, sizeof(v), "%ld", a->granted);
    return pg_queue(x,
                    "INSERT INTO kv(key, value, expires_at) VALUES ($1, $2::bytea, 0) ON CONFLICT "
                    "(key) DO UPDATE SET value=excluded.value, expires_at=0",
                    ARGS(ARG_TEXT(me), ARG_BLOB(v, strlen(v))), NULL, NULL, NULL);
}

static crcr_err pg_gh_slots(store *st, long total, long want, long *granted)
{
    pg_store *s = pg_store_of(st);
    if (!atomic_load(&s->live_id)) { /* not an instance (a command): nobody to share with */
        *granted = want < total ? want : total;
        return CRCR_OK;
    }
    slots_args a = {.total = total, .want = want};
    crcr_err e = pg_with_tx_relaxed(s, "gh_slots", op_slots, &a);
    if (!e)
        *granted = a.granted;
    return e;
}

static crcr_err pg_lease(store *st, const char *key, const char *owner, int64_t now, int64_t ttl_ms,
                         bool *held)
{
    int64_t rows = 0;
    /* One statement: taken when free, expired, or already ours; otherwise nothing changes. */
    crcr_err e = pg_run(
        pg_store_of(st), "lease",
        "INSERT INTO kv(key, value, expires_at) VALUES ($1, $2::bytea, $3) ON "
        "CONFLICT (key) DO UPDATE SET value=excluded.value, "
        "expires_at=excluded.expires_at WHERE kv.value=excluded.value OR "
        "kv.expires_at < $4",
        ARGS(ARG_TEXT(key), ARG_BLOB(owner, strlen(owner)), ARG_INT(now + ttl_ms), ARG_INT(now)),
        NULL, NULL, &rows);
    *held = !e && rows > 0;
    return e;
}

/* ---- retention ---- */

typedef struct retention_args {
    int64_t before, deleted;
} retention_args;

static crcr_err op_retention(pgx *x, void *arg)
{
    retention_args *a = arg;
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
        /* Supersession and pair records live as long as their delivery. */
        "DELETE FROM dispatch_ends e WHERE e.ended_at < $1 AND NOT EXISTS (SELECT 1 FROM "
        "deliveries d WHERE d.delivery_id=e.delivery_id)",
        "DELETE FROM pairs p WHERE p.created_at < $1 AND NOT EXISTS (SELECT 1 FROM deliveries d "
        "WHERE d.delivery_id=p.delivery_id)",
        "DELETE FROM dispatch_heads WHERE at < $1",
        "DELETE FROM redeliveries WHERE last_asked_at < $1",
        /* Finished rows of no delivery (nightly HUD forwards) go after the same time. */
        "DELETE FROM outbox o WHERE o.done_at < $1 AND o.state IN ('sent','dry_run','dead') AND "
        "NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id=o.delivery_id)",
    };
    crcr_err e = CRCR_OK;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !e; i++)
        e = pg_query(x, steps[i], ARGS(ARG_INT(a->before)), NULL, NULL,
                     i == 0 ? &a->deleted : NULL);
    return e;
}

static crcr_err pg_retention(store *st, int64_t before, int *n)
{
    retention_args a = {before, 0};
    crcr_err e = pg_with_tx(pg_store_of(st), "retention", op_retention, &a);
    if (!e)
        *n = (int)a.deleted;
    return e;
}

/* This file's operations (store_impl.h). */
const store_outbox_ops PG_OUTBOX_OPS = {
    .ingest = pg_ingest,
    .pair_redispatch = pg_pair_redispatch,
    .claim = pg_claim,
    .next_due = pg_next_due,
    .job_finish = pg_job_finish,
    .job_retry = pg_job_retry,
    .job_renew = pg_job_renew,
    .job_record = pg_job_record,
    .redeliver = pg_redeliver,
    .enqueue = pg_enqueue,
    .list_deliveries = pg_list_deliveries,
    .get_delivery = pg_get_delivery,
    .outbox_stats = pg_outbox_stats,
    .kv_get = pg_kv_get,
    .kv_put = pg_kv_put,
    .lease = pg_lease,
    .retention = pg_retention,
    .jobs_settle = pg_jobs_settle,
    .kv_scan = pg_kv_scan,
    .kv_delete = pg_kv_delete,
    .gh_slots = pg_gh_slots,
};
