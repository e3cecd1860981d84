/*
 * store_sqlite_outbox.c - the SQLite store's deliveries and outbox: ingest (through the group
 * commit), claims, finish/retry/renew under the claim's lease, redeliver, the delivery listings
 * and outbox statistics, the kv cache and named leases, retention. See store_sqlite.c for the
 * connections and the durability of each kind of write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcr_limits.h"
#include "payload_pack.h"
#include "store_sqlite.h"
#include "vocab.h"

/* A claimed row's body or payload at the most. */
#define SQ_JOB_BYTES_MAX (CRCR_MAX_BODY_DEFAULT * 4u)

/* A lease granted or renewed until `until` (s->mu held): the running rows' lease floor follows. */
static void lease_granted(sqlite_store *s, int64_t until)
{
    if (until < s->lease_floor)
        s->lease_floor = until;
}

/* sq_step for an insert whose constraint violation is an answer: CRCR_E_DUPLICATE, not logged. */
static crcr_err insert_step(sqlite_store *s, sqlite3_stmt *q, const char *op, const store_param *v,
                            int n)
{
    int rc = sq_step_raw(q, v, n, NULL, NULL);
    /* Only a known key is a duplicate: any other constraint (a trigger, NOT NULL) is a failure
     * to store, never an answer that says "already stored". */
    int x = rc == SQLITE_CONSTRAINT ? sqlite3_extended_errcode(s->db) : 0;
    if (x == SQLITE_CONSTRAINT_PRIMARYKEY || x == SQLITE_CONSTRAINT_UNIQUE)
        return CRCR_E_DUPLICATE;
    return rc == SQLITE_DONE ? CRCR_OK : sq_fail(s->db, op);
}

/* Inserts one outbox row (s->mu held); CRCR_E_DUPLICATE for a dispatch row that exists. A row
 * `after_seq` is left out (CRCR_OK) when no row of its seq_key exists. */
static crcr_err insert_job(sqlite_store *s, const char *delivery_id, const store_new_job *job,
                           int64_t due, int64_t created, const char *op)
{
    if (job->after_seq) {
        store_scalar started = {0};
        crcr_err err =
            sq_cached(s, SQ_SEQ_EXISTS, op, "SELECT 1 FROM outbox WHERE seq_key=?1 LIMIT 1",
                      ARGS(ARG_TEXT(job->seq_key)), store_scalar_row, &started);
        if (err || !job->seq_key || !started.found)
            return err;
    }
    /* A row the caller claims in this transaction (store.h): running under its lease; a row
     * whose outcome is known: finished. */
    bool done = job->done_state != NULL;
    bool claimed = store_new_job_claimed(job);
    const char *state = done      ? job->done_state
                        : claimed ? ob_state_name(OB_STATE_RUNNING)
                                  : ob_state_name(OB_STATE_QUEUED);
    sqlite3_stmt *q =
        sq_stmt(s, SQ_INS_JOB,
                "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, "
                "next_attempt_at, created_at, seq_key, lease_until, done_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    if (!q)
        return CRCR_E_STORE;
    crcr_err err =
        insert_step(s, q, op,
                    ARGS(ARG_TEXT(job->kind), ARG_TEXT(delivery_id), ARG_TEXT(job->target),
                         ARG_BLOB(job->body, job->body_len), ARG_TEXT(state), ARG_INT(done ? 1 : 0),
                         ARG_INT(due), ARG_INT(created), ARG_TEXT(job->seq_key),
                         ARG_INT_IF(claimed, job->lease_until), ARG_INT_IF(done, due)));
    if (!err && claimed) {
        *job->claimed_id = (int64_t)sqlite3_last_insert_rowid(s->db);
        lease_granted(s, job->lease_until);
    }
    return err;
}

crcr_err sq_insert_jobs(sqlite_store *s, const char *delivery_id, const store_new_job *jobs,
                        size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        crcr_err err = insert_job(s, delivery_id, &jobs[i], jobs[i].due_at ? jobs[i].due_at : now,
                                  now, "insert_jobs");
        if (err && err != CRCR_E_DUPLICATE) /* a dispatch row that exists already is kept */
            return err;
    }
    return CRCR_OK;
}

/* ---- ingest ---- */

/* Writes one delivery (its payload in the stored form `stored`, payload_pack.h), its rows and
 * its pairs inside the caller's transaction (s->mu held), then what it supersedes (`sup` may be
 * NULL). */
static crcr_err ingest_one(sqlite_store *s, const store_delivery *d, const void *stored,
                           size_t stored_len, const store_new_job *jobs, size_t n,
                           store_supersede *sup)
{
    sqlite3_stmt *q = sq_stmt(s, SQ_INS_DELIVERY,
                              "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, "
                              "pr_number, head_sha, ref, received_at, payload, payload_bytes, "
                              "status) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    if (!q)
        return CRCR_E_STORE;
    crcr_err err =
        insert_step(s, q, "ingest.delivery",
                    ARGS(ARG_TEXT(d->delivery_id), ARG_TEXT(d->event), ARG_TEXT(d->action),
                         ARG_TEXT(d->upstream_repo), ARG_INT(d->pr_number), ARG_TEXT(d->head_sha),
                         ARG_TEXT(d->ref), ARG_INT(d->received_at), ARG_BLOB(stored, stored_len),
                         ARG_INT((int64_t)d->payload_len),
                         ARG_TEXT(d->status ? d->status : ob_state_name(OB_STATE_QUEUED))));
    for (size_t i = 0; i < n && !err; i++) {
        err = insert_job(s, d->delivery_id, &jobs[i], jobs[i].due_at, d->received_at, "ingest.job");
        if (err == CRCR_E_DUPLICATE) /* within one delivery a repeated row is a failure */
            err = sq_fail(s->db, "ingest.job");
    }
    if (!err)
        err = sq_insert_pairs(s, d->delivery_id, d->pr_number, jobs, n, d->received_at);
    if (!err && sup)
        err = sq_supersede(s, d->delivery_id, d->pr_number, d->head_sha, jobs, n, sup,
                           d->received_at);
    return err;
}

typedef struct ingest_args {
    const store_delivery *d;
    const void *stored; /* the payload's stored form */
    size_t stored_len;
    const store_new_job *jobs;
    size_t n;
    store_supersede *sup;
} ingest_args;

static crcr_err ingest_apply(sqlite_store *s, sq_group_req *r)
{
    const ingest_args *a = r->arg;
    store_new_jobs_unclaim(a->jobs, a->n); /* an apply run again claims afresh */
    store_supersede_uncount(a->sup);       /* and counts afresh */
    crcr_err err = ingest_one(s, a->d, a->stored, a->stored_len, a->jobs, a->n, a->sup);
    if (err) /* its savepoint is undone: nothing was ended */
        store_supersede_uncount(a->sup);
    return err;
}

/* Concurrent ingests share one durable commit (sq_group_commit). The payload is packed here, on
 * the caller's thread, before it joins the group: the group's leader writes every member's rows
 * under the write lock, one after the other, and packing there (~0.06 ms for the bench's 30 KB
 * webhook) serialised what the HTTP threads can do side by side. */
static crcr_err sq_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n,
                          store_supersede *sup, store_visible *vis)
{
    buf_t packed; /* the payload's stored form (payload_pack.h), freed here */
    buf_init(&packed, PAYLOAD_PACK_OUT_MAX);
    ingest_args a = {.d = d, .jobs = jobs, .n = n, .sup = sup};
    crcr_err err = payload_pack(d->payload, d->payload_len, &packed, &a.stored, &a.stored_len);
    if (!err) {
        sq_group_req me = {.apply = ingest_apply, .arg = &a, .visible = vis};
        err = sq_group_commit(sq_store(st), &me);
    }
    buf_free(&packed);
    if (err) /* the group's transaction was lost */
        store_supersede_uncount(sup);
    return err;
}

/* ---- claims and the claimed row's fences ---- */

static int claimed_delivery(void *ctx, const store_row_source *s)
{
    store_claim_read *c = ctx;
    store_job *out = c->out;
    out->event = store_row_dup(s, 0);
    c->err = store_row_payload(s, 1, &out->payload);
    out->pr_number = s->i64(s->src, 2, 0);
    out->head_sha = store_row_dup(s, 3);
    return 1;
}

/* Claims: rows whose lease ran out (their worker died: few rows, read from the state range of
 * outbox_due), else the earliest due queued rows in outbox_due's order (next_attempt_at, then
 * rowid = id). Two statements, each walking one index range in order: one statement with an OR
 * over both made SQLite sort every due row on every claim (5.5 ms a claim with 20,000 queued
 * rows, quadratic in a fan-out's size; 5.5 us now). The first takes one row at a time and runs
 * until it finds nothing: it walks every running row, and the rows the batch claims are not
 * expired (claiming a fan-out's 100 rows that way walked ~5,000 running rows, 16 % of the relay's
 * samples in a fan-out). The second takes up to SQ_CLAIM_BATCH_MAX rows in one statement: a
 * statement per row was most of a claim's time in the App-mode ingest (batches of a dozen rows,
 * one after another). Its subquery reads the rows as they were before it: a later row of a
 * seq_key whose earlier row it takes is left, as it was when the earlier one was `running`. */
#define SQ_CLAIM_BATCH_MAX 64

static crcr_err claim_expired(sqlite_store *s, int64_t now, int64_t lease_ms, store_job *out)
{
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, SQ_JOB_BYTES_MAX);
    buf_init(&out->payload, SQ_JOB_BYTES_MAX);
    store_claim_read c = {.out = out};
    crcr_err err = sq_cached(
        s, SQ_CLAIM_EXPIRED, "claim",
        "UPDATE outbox SET state='running', lease_until=?1 WHERE id = (SELECT id FROM outbox o "
        "WHERE state='running' AND lease_until<?2 ORDER BY next_attempt_at, id LIMIT 1) "
        "RETURNING id, kind, delivery_id, target, attempts, body",
        ARGS(ARG_INT(now + lease_ms), ARG_INT(now)), store_claim_row, &c);
    if (!err && !c.found)
        err = CRCR_E_NOT_FOUND;
    if (!err) {
        out->lease_until = now + lease_ms;
        lease_granted(s, out->lease_until);
        err = c.err;
    }
    if (!err && (!out->kind || !out->target))
        err = CRCR_E_NOMEM;
    if (err)
        store_job_free(out);
    return err;
}

/* The queued rows one statement claims, as its RETURNING gives them (claim_batch_row). */
typedef struct claim_batch {
    store_job *out; /* out[0..n) filled, cap at most */
    size_t n, cap;
    int64_t due[SQ_CLAIM_BATCH_MAX]; /* each row's next_attempt_at, for the order */
    crcr_err err;                    /* the first failure to copy a row */
} claim_batch;

static int claim_batch_row(void *ctx, const store_row_source *s)
{
    claim_batch *b = ctx;
    if (b->n >= b->cap) { /* the statement's LIMIT is cap: never */
        b->err = CRCR_E_STORE;
        return 0;
    }
    store_job *j = &b->out[b->n];
    memset(j, 0, sizeof(*j));
    buf_init(&j->body, SQ_JOB_BYTES_MAX);
    buf_init(&j->payload, SQ_JOB_BYTES_MAX);
    store_claim_read c = {.out = j};
    (void)store_claim_row(&c, s);
    b->due[b->n++] = s->i64(s->src, 6, 0);
    if (!b->err && c.err)
        b->err = c.err;
    if (!b->err && (!j->kind || !j->target))
        b->err = CRCR_E_NOMEM;
    return 0; /* every row: the statement has claimed them all at its first step */
}

/* Claims up to `cap` (<= SQ_CLAIM_BATCH_MAX) due queued rows into out[0..*n), in due order. */
static crcr_err claim_queued(sqlite_store *s, int64_t now, int64_t lease_ms, store_job *out,
                             size_t cap, size_t *n)
{
    claim_batch b = {.out = out, .cap = cap};
    crcr_err err = sq_cached(
        s, SQ_CLAIM_BATCH, "claim",
        "UPDATE outbox SET state='running', lease_until=?1 WHERE id IN (SELECT id FROM outbox o "
        "WHERE state='queued' AND next_attempt_at<=?2 AND (o.seq_key IS NULL OR NOT EXISTS "
        "(SELECT 1 FROM outbox p WHERE p.seq_key=o.seq_key AND p.id<o.id AND p.state IN "
        "('queued','running'))) ORDER BY next_attempt_at, id LIMIT ?3) RETURNING id, kind, "
        "delivery_id, target, attempts, body, next_attempt_at",
        ARGS(ARG_INT(now + lease_ms), ARG_INT(now), ARG_INT((int64_t)cap)), claim_batch_row, &b);
    if (!err)
        err = b.err;
    if (err) {
        for (size_t i = 0; i < b.n; i++)
            store_job_free(&out[i]);
        return err;
    }
    /* RETURNING's order is not the claim's: sorted (insertion, a few dozen rows at most) */
    for (size_t i = 1; i < b.n; i++) {
        store_job j = out[i];
        int64_t d = b.due[i];
        size_t k = i;
        for (; k > 0 && (b.due[k - 1] > d || (b.due[k - 1] == d && out[k - 1].id > j.id)); k--) {
            out[k] = out[k - 1];
            b.due[k] = b.due[k - 1];
        }
        out[k] = j;
        b.due[k] = d;
    }
    for (size_t i = 0; i < b.n; i++)
        out[i].lease_until = now + lease_ms;
    if (b.n > 0)
        lease_granted(s, now + lease_ms);
    *n = b.n;
    return CRCR_OK;
}

/* Reads out[i]'s delivery fields, or shares those of out[i - 1] when it belongs to the same
 * delivery (a fan-out's rows are claimed together: one read and one copy of the payload, not one
 * per row). */
static crcr_err claim_delivery(sqlite_store *s, store_job *batch, size_t i)
{
    store_job *out = &batch[i];
    if (!out->delivery_id)
        return CRCR_OK;
    if (i > 0 && batch[i - 1].delivery_id &&
        strcmp(batch[i - 1].delivery_id, out->delivery_id) == 0)
        return store_job_share_delivery(batch, i, i - 1);
    sqlite3_stmt *p = sq_stmt(s, SQ_CLAIM_DELIVERY,
                              "SELECT event, payload, pr_number, head_sha FROM deliveries "
                              "WHERE delivery_id=?");
    if (!p)
        return CRCR_E_STORE;
    store_claim_read c = {.out = out};
    /* a failed read leaves the delivery's fields empty, as a missing delivery does */
    (void)sq_step_raw(p, ARGS(ARG_TEXT(out->delivery_id)), claimed_delivery, &c);
    return c.err;
}

/* Up to `max` rows in one transaction (synchronous=NORMAL, see store_sqlite.c): one commit and one
 * lock round for a batch instead of one per row. Rows claimed before a failure are given back by
 * the rollback. */
static crcr_err sq_claim(store *st, int64_t now, int64_t lease_ms, store_job *out, size_t max,
                         size_t *n)
{
    sqlite_store *s = sq_store(st);
    *n = 0;
    crcr_err err = sq_begin(s);
    if (err)
        return err;
    size_t got = 0;
    /* Expired leases first, one at a time, but only once one may have run out: finding none walks
     * every running row (up to MAX_DISPATCH_WORKERS of them, each read from the table for its
     * lease), 1 % of the relay's CPU in the App-mode ingest, where every claim found none. When
     * a walk finds no more, the floor is read again (the earliest lease still running). */
    if (now > s->lease_floor) {
        while (!err && got < max) {
            err = claim_expired(s, now, lease_ms, &out[got]);
            if (!err)
                got++;
        }
        if (err == CRCR_E_NOT_FOUND) {
            store_scalar min = {0};
            err = sq_cached(s, SQ_LEASE_FLOOR, "claim",
                            "SELECT min(lease_until) FROM outbox WHERE state='running'", NULL, 0,
                            store_scalar_row, &min);
            if (!err)
                s->lease_floor = min.found ? min.v : INT64_MAX;
        }
    }
    while (!err && got < max) {
        size_t cap = max - got < SQ_CLAIM_BATCH_MAX ? max - got : SQ_CLAIM_BATCH_MAX, k = 0;
        err = claim_queued(s, now, lease_ms, &out[got], cap, &k);
        got += k;
        if (k < cap)
            break; /* no more due */
    }
    for (size_t i = 0; !err && i < got; i++)
        err = claim_delivery(s, out, i);
    if (!err && got == 0)
        err = CRCR_E_NOT_FOUND;
    if (err && err != CRCR_E_NOT_FOUND)
        s->lease_floor = INT64_MIN; /* rolled back: the floor read in it may not hold */
    crcr_err end = sq_end(s, err == CRCR_E_NOT_FOUND ? CRCR_OK : err);
    if (!err && end)
        err = end;
    if (err) {
        for (size_t i = 0; i < got; i++)
            store_job_free(&out[i]);
        return err;
    }
    *n = got;
    return CRCR_OK;
}

static crcr_err sq_next_due(store *st, int64_t *due)
{
    store_scalar min = {0};
    crcr_err err = sq_locked(sq_store(st), SQ_NEXT_DUE, "next_due",
                             "SELECT min(next_attempt_at) FROM outbox WHERE state='queued'", NULL,
                             0, store_scalar_row, &min, NULL);
    if (err)
        return err;
    if (!min.found)
        return CRCR_E_NOT_FOUND;
    *due = min.v;
    return CRCR_OK;
}

/* An update of a claimed row under its lease (the fences of store.h), as a relaxed request of
 * the group commit (outcomes of concurrent workers share a transaction): CRCR_E_STATE when it
 * changed nothing, the lease was lost. */
typedef struct fenced_args {
    int slot;
    const char *op, *sql;
    const store_param *v;
    int n;
    int64_t lease; /* a renewal's new lease (lease_granted), 0: none */
} fenced_args;

static crcr_err fenced_apply(sqlite_store *s, sq_group_req *r)
{
    const fenced_args *a = r->arg;
    if (a->lease)
        lease_granted(s, a->lease);
    crcr_err err = sq_cached(s, a->slot, a->op, a->sql, a->v, a->n, NULL, NULL);
    return !err && sqlite3_changes(s->db) == 0 ? CRCR_E_STATE : err;
}

static crcr_err fenced(sqlite_store *s, int slot, const char *op, const char *sql,
                       const store_param *v, int n, int64_t lease)
{
    fenced_args a = {.slot = slot, .op = op, .sql = sql, .v = v, .n = n, .lease = lease};
    sq_group_req me = {.apply = fenced_apply, .arg = &a, .relaxed = true};
    return sq_group_commit(s, &me);
}

/* The fenced updates of finish and retry, shared by the single calls and store_jobs_settle. */
#define SQ_FINISH_SQL                                                                              \
    "UPDATE outbox SET state=?1, attempts=attempts+1, last_status=?2, "                            \
    "last_error=?3, note=?4, body=COALESCE(?5, body), done_at=?6, "                                \
    "lease_until=NULL WHERE id=?7 AND state='running' AND lease_until=?8"
#define SQ_RETRY_SQL                                                                               \
    "UPDATE outbox SET state='queued', attempts=attempts+?1, next_attempt_at=?2, "                 \
    "last_status=?3, last_error=?4, lease_until=NULL WHERE id=?5 AND "                             \
    "state='running' AND lease_until=?6"

static crcr_err sq_job_finish(store *st, int64_t id, int64_t lease, const char *state,
                              long http_status, const char *error, const char *note,
                              const char *body, size_t body_len, int64_t now)
{
    return fenced(sq_store(st), SQ_FINISH, "finish", SQ_FINISH_SQL,
                  ARGS(ARG_TEXT(state), ARG_INT_IF(http_status > 0, http_status),
                       ARG_TEXT(error && *error ? error : NULL),
                       ARG_TEXT(note && *note ? note : NULL), ARG_BLOB(body, body_len),
                       ARG_INT(now), ARG_INT(id), ARG_INT(lease)),
                  0);
}

static crcr_err sq_job_retry(store *st, int64_t id, int64_t lease, int64_t next_at,
                             bool count_attempt, long http_status, const char *error)
{
    return fenced(sq_store(st), SQ_RETRY, "retry", SQ_RETRY_SQL,
                  ARGS(ARG_INT(count_attempt ? 1 : 0), ARG_INT(next_at),
                       ARG_INT_IF(http_status > 0, http_status),
                       ARG_TEXT(error && *error ? error : NULL), ARG_INT(id), ARG_INT(lease)),
                  0);
}

/* One outcome of store_jobs_settle (s->mu held, inside the group's transaction). */
static crcr_err settle_one(sqlite_store *s, const store_settle *it)
{
    const store_job *j = it->job;
    crcr_err err;
    if (it->finish)
        err = sq_cached(s, SQ_FINISH, "finish", SQ_FINISH_SQL,
                        ARGS(ARG_TEXT(it->state), ARG_INT_IF(it->http_status > 0, it->http_status),
                             ARG_TEXT(it->error && *it->error ? it->error : NULL),
                             ARG_TEXT(it->note && *it->note ? it->note : NULL),
                             ARG_BLOB(it->body, it->body_len), ARG_INT(it->now), ARG_INT(j->id),
                             ARG_INT(j->lease_until)),
                        NULL, NULL);
    else
        err = sq_cached(s, SQ_RETRY, "retry", SQ_RETRY_SQL,
                        ARGS(ARG_INT(it->count_attempt ? 1 : 0), ARG_INT(it->next_at),
                             ARG_INT_IF(it->http_status > 0, it->http_status),
                             ARG_TEXT(it->error && *it->error ? it->error : NULL), ARG_INT(j->id),
                             ARG_INT(j->lease_until)),
                        NULL, NULL);
    return !err && sqlite3_changes(s->db) == 0 ? CRCR_E_STATE : err;
}

typedef struct settle_args {
    store_settle *items;
    size_t n;
} settle_args;

static crcr_err settle_apply(sqlite_store *s, sq_group_req *r)
{
    settle_args *a = r->arg;
    for (size_t i = 0; i < a->n; i++) {
        crcr_err err = settle_one(s, &a->items[i]);
        if (err && err != CRCR_E_STATE)
            return err; /* the savepoint is undone: no item written */
        a->items[i].result = err;
    }
    return CRCR_OK;
}

/* n outcomes as one relaxed request of the group commit. */
static crcr_err sq_jobs_settle(store *st, store_settle *items, size_t n)
{
    settle_args a = {items, n};
    sq_group_req me = {.apply = settle_apply, .arg = &a, .relaxed = true};
    return sq_group_commit(sq_store(st), &me);
}

static crcr_err sq_job_renew(store *st, int64_t id, int64_t lease, int64_t new_lease)
{
    return fenced(sq_store(st), SQ_RENEW, "renew",
                  "UPDATE outbox SET lease_until=?1 WHERE id=?2 AND state='running' AND "
                  "lease_until=?3",
                  ARGS(ARG_INT(new_lease), ARG_INT(id), ARG_INT(lease)), new_lease);
}

static crcr_err sq_job_record(store *st, int64_t id, int64_t lease, const char *body,
                              size_t body_len)
{
    return fenced(sq_store(st), SQ_RECORD, "record",
                  "UPDATE outbox SET body=?1 WHERE id=?2 AND state='running' AND lease_until=?3",
                  ARGS(ARG_BLOB(body, body_len), ARG_INT(id), ARG_INT(lease)), 0);
}

static crcr_err sq_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now,
                             int *n)
{
    sqlite_store *s = sq_store(st);
    crcr_err err = sq_begin(s);
    if (err)
        return err;
    store_scalar found = {0};
    err = sq_run(s->db, "redeliver", "SELECT 1 FROM deliveries WHERE delivery_id=?",
                 ARGS(ARG_TEXT(delivery_id)), store_scalar_row, &found);
    if (!err && !found.found)
        err = CRCR_E_NOT_FOUND;
    int rows = 0;
    if (!err) {
        err = sq_run(s->db, "redeliver",
                     "UPDATE outbox SET state='queued', attempts=0, next_attempt_at=?1, "
                     "done_at=NULL, lease_until=NULL, last_error=NULL, last_status=NULL, "
                     "note=NULL WHERE kind='dispatch' AND delivery_id=?2 AND "
                     "state<>'running' AND (?3 IS NULL OR lower(target)=lower(?3))",
                     ARGS(ARG_INT(now), ARG_TEXT(delivery_id), ARG_TEXT(repo)), NULL, NULL);
        rows = err ? 0 : sqlite3_changes(s->db);
    }
    if (!err && rows == 0 && repo) {
        /* A repo that had no row for this delivery (added to the allowlist since): create one. */
        err = sq_run(s->db, "redeliver",
                     "INSERT INTO outbox(kind, delivery_id, target, state, attempts, "
                     "next_attempt_at, created_at) VALUES ('dispatch',?1,?2,'queued',0,"
                     "?3,?3) ON CONFLICT DO NOTHING",
                     ARGS(ARG_TEXT(delivery_id), ARG_TEXT(repo), ARG_INT(now)), NULL, NULL);
        rows = err ? 0 : sqlite3_changes(s->db);
    }
    err = sq_end(s, err);
    if (!err)
        *n = rows;
    return err;
}

static crcr_err sq_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    sqlite_store *s = sq_store(st);
    crcr_err err = sq_begin(s);
    if (err)
        return err;
    int64_t now = n ? jobs[0].due_at : 0;
    return sq_end(s, sq_insert_jobs(s, delivery_id, jobs, n, now));
}

/* ---- listings (on the readers) ---- */

static crcr_err sq_list_deliveries(store *st, const store_filter *f, store_rows *rows)
{
    /* A PR filter is written as a plain equality so that deliveries_pr serves it. */
    char sql[4096];
    snprintf(sql, sizeof(sql),
             "SELECT " DELIVERY_COLUMNS " FROM deliveries d WHERE "
             "(?1 IS NULL OR EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id=d.delivery_id AND "
             "o.state=?1)) AND (?2 IS NULL OR EXISTS (SELECT 1 FROM outbox o WHERE "
             "o.delivery_id=d.delivery_id AND lower(o.target)=lower(?2))) AND %s "
             "ORDER BY d.received_at DESC, d.rowid DESC LIMIT ?3",
             f->pr_number ? "d.pr_number=?4" : "?4=0");
    return sq_listing(sq_store(st), "list", sql,
                      ARGS(ARG_TEXT(f->state), ARG_TEXT(f->repo),
                           ARG_INT(f->limit > 0 ? f->limit : 50), ARG_INT(f->pr_number)),
                      store_listing_row, rows);
}

static crcr_err sq_get_delivery(store *st, const char *delivery_id, store_delivery_read *delivery,
                                store_rows *jobs)
{
    sqlite_store *s = sq_store(st);
    int slot;
    sqlite3 *db = sq_reader(s, &slot);
    /* Without dfn only the rows are wanted: the primary key's index answers "does it exist"
     * without reading the delivery row (tens of KB of payload before `status`). */
    crcr_err err = sq_run(db, "get",
                          delivery->dfn ? "SELECT " DELIVERY_COLUMNS ", d.payload FROM deliveries "
                                          "d WHERE d.delivery_id=?"
                                        : "SELECT 1 FROM deliveries WHERE delivery_id=?",
                          ARGS(ARG_TEXT(delivery_id)), store_delivery_read_row, delivery);
    if (!err && !delivery->found)
        err = CRCR_E_NOT_FOUND;
    if (!err && delivery->err)
        err = delivery->err;
    if (!err && jobs->job)
        err = sq_run(db, "get",
                     "SELECT " JOB_COLUMNS " FROM outbox o" JOB_ENDS_JOIN " WHERE o.delivery_id=? "
                     "ORDER BY o.id",
                     ARGS(ARG_TEXT(delivery_id)), store_listing_row, jobs);
    sq_reader_done(s, slot);
    return err;
}

static crcr_err sq_outbox_stats(store *st, store_outbox_stats *out)
{
    return sq_listing(sq_store(st), "stats",
                      "SELECT state, count(*), min(next_attempt_at) FROM outbox GROUP BY state",
                      NULL, 0, store_stats_row, out);
}

/* ---- kv and leases ---- */

static crcr_err sq_kv_get(store *st, const char *key, int64_t now, store_kv_read *value)
{
    return sq_locked(sq_store(st), SQ_KV_GET, "kv_get",
                     "SELECT value FROM kv WHERE key=? AND (expires_at=0 OR expires_at>?)",
                     ARGS(ARG_TEXT(key), ARG_INT(now)), store_kv_row, value, NULL);
}

static crcr_err sq_kv_put(store *st, const char *key, const char *value, size_t len,
                          int64_t expires_at)
{
    return sq_locked(sq_store(st), SQ_KV_PUT, "kv_put",
                     "INSERT INTO kv(key, value, expires_at) VALUES (?,?,?) ON CONFLICT(key) DO "
                     "UPDATE SET value=excluded.value, expires_at=excluded.expires_at",
                     ARGS(ARG_TEXT(key), ARG_BLOB(value, len), ARG_INT(expires_at)), NULL, NULL,
                     NULL);
}

static crcr_err sq_kv_scan(store *st, const char *lo, const char *hi, int64_t now, size_t max,
                           store_kv_fn fn, void *ctx)
{
    store_kv_scan_read r = {.fn = fn, .ctx = ctx, .left = max};
    if (max == 0)
        return CRCR_OK;
    return sq_locked(sq_store(st), SQ_ONCE, "kv_scan",
                     "SELECT key, value FROM kv WHERE key>=?1 AND key<?2 AND (expires_at=0 OR "
                     "expires_at>?3) ORDER BY key",
                     ARGS(ARG_TEXT(lo), ARG_TEXT(hi), ARG_INT(now)), store_kv_scan_row, &r, NULL);
}

static crcr_err sq_kv_delete(store *st, const char *key)
{
    return sq_locked(sq_store(st), SQ_ONCE, "kv_delete", "DELETE FROM kv WHERE key=?1",
                     ARGS(ARG_TEXT(key)), NULL, NULL, NULL);
}

static crcr_err sq_lease(store *st, const char *key, const char *owner, int64_t now, int64_t ttl_ms,
                         bool *held)
{
    int changes = 0;
    crcr_err err = sq_locked(
        sq_store(st), SQ_ONCE, "lease",
        "INSERT INTO kv(key, value, expires_at) VALUES (?1, ?2, ?3) ON "
        "CONFLICT(key) DO UPDATE SET value=excluded.value, "
        "expires_at=excluded.expires_at WHERE kv.value=excluded.value OR "
        "kv.expires_at < ?4",
        ARGS(ARG_TEXT(key), ARG_BLOB(owner, strlen(owner)), ARG_INT(now + ttl_ms), ARG_INT(now)),
        NULL, NULL, &changes);
    *held = !err && changes > 0;
    return err;
}

/* ---- retention ---- */

static crcr_err sq_retention(store *st, int64_t before, int *n)
{
    sqlite_store *s = sq_store(st);
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
        /* Supersession and pair records live as long as their delivery. */
        "DELETE FROM dispatch_ends WHERE ended_at < ?1 AND NOT EXISTS (SELECT 1 FROM deliveries "
        "d WHERE d.delivery_id=dispatch_ends.delivery_id)",
        "DELETE FROM pairs WHERE created_at < ?1 AND NOT EXISTS (SELECT 1 FROM deliveries d "
        "WHERE d.delivery_id=pairs.delivery_id)",
        "DELETE FROM dispatch_heads WHERE at < ?1",
        "DELETE FROM redeliveries WHERE last_asked_at < ?1",
        /* Finished rows of no delivery (nightly HUD forwards) go after the same time. */
        "DELETE FROM outbox WHERE done_at < ?1 AND state IN ('sent','dry_run','dead') AND NOT "
        "EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id=outbox.delivery_id)",
    };
    crcr_err err = sq_begin(s);
    if (err)
        return err;
    int deleted = 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !err; i++) {
        /* A step without ?1 ignores the value. */
        err = sq_run(s->db, "retention", steps[i], ARGS(ARG_INT(before)), NULL, NULL);
        if (!err && i == 4)
            deleted = sqlite3_changes(s->db);
    }
    err = sq_end(s, err);
    if (!err)
        *n = deleted;
    return err;
}

/* This file's operations (store_impl.h). */
const store_outbox_ops SQ_OUTBOX_OPS = {
    .ingest = sq_ingest,
    .pair_redispatch = sq_pair_redispatch,
    .claim = sq_claim,
    .next_due = sq_next_due,
    .job_finish = sq_job_finish,
    .job_retry = sq_job_retry,
    .job_renew = sq_job_renew,
    .job_record = sq_job_record,
    .redeliver = sq_redeliver,
    .enqueue = sq_enqueue,
    .list_deliveries = sq_list_deliveries,
    .get_delivery = sq_get_delivery,
    .outbox_stats = sq_outbox_stats,
    .kv_get = sq_kv_get,
    .kv_put = sq_kv_put,
    .lease = sq_lease,
    .retention = sq_retention,
    .jobs_settle = sq_jobs_settle,
    .kv_scan = sq_kv_scan,
    .kv_delete = sq_kv_delete,
    .gh_slots = NULL, /* one serving process per SQLite file */
};
