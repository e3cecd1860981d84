/*
 * store_impl.h - what a store backend provides, and what both backends share (internal to
 * store*.c and run_state.c).
 *
 * store.c owns the public functions; each does what both backends would (defaults, outputs
 * zeroed, a filter never NULL, the caller's callbacks wrapped as store_rows) and forwards to the
 * backend's operation of the same name. A backend embeds `struct store` as its first member so
 * that the pointer casts both ways.
 *
 * Both backends write statement parameters with the ARG_* macros and hand each result row, as a
 * store_row_source, to the row functions below (store.c): the column lists (the _COLUMNS
 * macros) and their reading into the public row types have one home. Nothing here allocates
 * except store_row_dup, whose copy the caller owns.
 */
#ifndef CRCR_STORE_IMPL_H
#define CRCR_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "store.h"

/* ---- statement parameters, written the same way for both backends ---- */

typedef enum { STORE_P_TEXT, STORE_P_INT, STORE_P_BLOB } store_param_kind;

/* One value bound to a statement's parameter (?N, $N: N is its index + 1); `is_null` for SQL
 * NULL. Borrowed: what it points to must outlive the statement's run. */
typedef struct store_param {
    store_param_kind kind;
    bool is_null;
    const char *text;
    int64_t i;
    const void *blob;
    size_t len;
} store_param;

#define ARG_TEXT(v) ((store_param){.kind = STORE_P_TEXT, .is_null = (v) == NULL, .text = (v)})
#define ARG_INT(v) ((store_param){.kind = STORE_P_INT, .i = (v)})
/* An integer, or SQL NULL unless `cond`. */
#define ARG_INT_IF(cond, v) ((store_param){.kind = STORE_P_INT, .is_null = !(cond), .i = (v)})
/* Bytes (BLOB, BYTEA); SQL NULL when `p` is NULL. */
#define ARG_BLOB(p, n)                                                                             \
    ((store_param){.kind = STORE_P_BLOB, .is_null = (p) == NULL, .blob = (p), .len = (n)})
/* `values, count` of a list of the above: the (v, n) parameters of the backends' helpers. */
#define ARGS(...)                                                                                  \
    (const store_param[]){__VA_ARGS__},                                                            \
        (int)(sizeof((const store_param[]){__VA_ARGS__}) / sizeof(store_param))

/* ---- rows read back, the same way by both backends ---- */

/* Where a row comes from: accessors over a backend's result row. `text` gives NULL for NULL, `i64`
 * gives `dflt`, `blob` NULL with *len 0. Pointers are the backend's, valid until its next row. */
typedef struct store_row_source {
    const char *(*text)(void *src, int col);
    int64_t (*i64)(void *src, int col, int64_t dflt);
    const void *(*blob)(void *src, int col, size_t *len);
    void *src;
} store_row_source;

/* What a backend's statement helpers call for each row of a result: a non-zero return stops the
 * statement there. The row functions below are of this kind. */
typedef int (*store_row_fn)(void *ctx, const store_row_source *row);

/* A heap copy of a text column (caller frees); NULL for SQL NULL or when out of memory. */
char *store_row_dup(const store_row_source *s, int col);

/* The open's refusal of a store whose schema `version` is newer than CRCR_SCHEMA_VERSION (both
 * backends answer it with CRCR_E_CONFIG). */
void store_schema_too_new(char *err, size_t errsz, int64_t version);
/* Appends a blob column to `out` (nothing for NULL or empty). */
crcr_err store_row_append(const store_row_source *s, int col, buf_t *out);
/* Appends a delivery's payload column to `out`, unpacked when the SQLite store packed it
 * (payload_pack.h); CRCR_E_STORE when a packed one does not unpack. */
crcr_err store_row_payload(const store_row_source *s, int col, buf_t *out);

/* A delivery's status as its outbox rows tell it (the same SQL on both backends, served by the
 * outbox_delivery index). A delivery is stored "queued"; then: "queued" while one of its rows is
 * queued or running, else "done" when none is dead (no rows at all: nothing to do), "dead" when
 * all are, "partly_failed" otherwise. A stored status other than "queued" is shown as it is. */
#define DELIVERY_STATUS_SQL                                                                        \
    "CASE WHEN d.status <> 'queued' THEN d.status "                                                \
    "WHEN EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.delivery_id AND "                 \
    "o.state IN ('queued', 'running')) THEN 'queued' "                                             \
    "WHEN NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.delivery_id AND "             \
    "o.state = 'dead') THEN 'done' "                                                               \
    "WHEN EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.delivery_id AND "                 \
    "o.state <> 'dead') THEN 'partly_failed' "                                                     \
    "ELSE 'dead' END"
/* Columns of a delivery in store_delivery_row order, from `deliveries d`; DELIVERY_PAYLOAD_COLUMN
 * is where a query that adds ", d.payload" finds it (store_delivery_read_row). The status is
 * DELIVERY_STATUS_SQL's. */
#define DELIVERY_COLUMNS                                                                           \
    "d.delivery_id, d.event, d.action, d.upstream_repo, d.pr_number, d.head_sha, d.ref, "          \
    "d.received_at, d.payload_bytes, " DELIVERY_STATUS_SQL                                         \
    ", COALESCE((SELECT r.attempts FROM redeliveries r WHERE r.guid=d.delivery_id), 0)"
#define DELIVERY_PAYLOAD_COLUMN 11
/* Columns of a redelivery record in store_redelivery_row order, from `redeliveries r LEFT JOIN
 * deliveries d ON d.delivery_id=r.guid`. */
#define REDELIVERY_COLUMNS                                                                         \
    "r.guid, r.event, r.action, r.last_result, r.hook_id, r.attempts, r.last_status, "             \
    "r.first_asked_at, r.last_asked_at, COALESCE(d.received_at, 0)"
/* Columns of an outbox row in store_job_row order, from `outbox o LEFT JOIN dispatch_ends e`
 * (JOB_ENDS_JOIN: a dispatch row's end, NULLs for the others). */
#define JOB_COLUMNS                                                                                \
    "o.id, o.kind, o.delivery_id, o.target, o.state, o.last_error, o.note, o.attempts, "           \
    "o.last_status, o.next_attempt_at, o.created_at, o.done_at, o.body, e.reason, e.by_delivery"
#define JOB_ENDS_JOIN                                                                              \
    " LEFT JOIN dispatch_ends e ON o.kind='dispatch' AND e.delivery_id=o.delivery_id AND "         \
    "lower(e.repo)=lower(o.target)"
/* Columns of a pin in store_identity_row order. */
#define IDENTITY_COLUMNS "repo, repository_id, owner_id, pinned_at, last_seen_at"
/* The dispatch record of a delivery to a repo, from `outbox o JOIN deliveries d` (with the row's
 * Depends-On record, its body), then the delivery's payload when it is wanted (NULL otherwise),
 * as store_dispatch_row reads them. */
#define DISPATCH_COLUMNS                                                                           \
    "COALESCE(o.done_at, o.created_at), d.pr_number, d.head_sha, d.event, o.body"
#define DISPATCH_PAYLOAD_COLUMN 5

/* The caller's callback of a listing (set the one the listing calls) and its context. */
typedef struct store_rows {
    int (*delivery)(void *ctx, const store_delivery_row *row); /* non-zero stops */
    void (*job)(void *ctx, const store_job_row *row);
    void (*run)(void *ctx, const store_run_row *row);
    void (*identity)(void *ctx, const store_identity_row *row);
    void (*redelivery)(void *ctx, const store_redelivery_row *row);
    void *ctx;
} store_rows;

/* The row function of a listing, ctx a store_rows: reads the row of the callback that is set
 * from the columns of its _COLUMNS macro (runs: RUN_COLUMNS, run_state.h) and passes it on. */
int store_listing_row(void *rows, const store_row_source *s);

/* A claimed outbox row (id, kind, delivery_id, target, attempts, body) into `out`, ctx a
 * store_claim_read; the body is appended to out->body. Goes on (a RETURNING statement must run
 * to its end). */
typedef struct store_claim_read {
    store_job *out;
    bool found;
    crcr_err err; /* of the body's copy */
} store_claim_read;
int store_claim_row(void *ctx, const store_row_source *s);

/* Gives batch[i] the delivery's fields of batch[from_index], an earlier row of the same delivery in
 * the caller's array: copies of its event, PR number and head sha, and its payload by reference
 * (batch[i].payload_in, the payload left empty). A claim reads a delivery once and holds its
 * payload once. */
crcr_err store_job_share_delivery(store_job *batch, size_t i, size_t from_index);
/* Whether an ingest inserts `j` claimed by its caller (store_new_job.claimed_id): asked for,
 * and a row without an order to keep (no seq_key, not after_seq). */
bool store_new_job_claimed(const store_new_job *j);
/* Sets the claimed ids of jobs[0..n) back to 0: an ingest's attempt run again claims afresh. */
void store_new_jobs_unclaim(const store_new_job *jobs, size_t n);
/* Sets a supersession's counts back to 0 (NULL: nothing to do): before an attempt that may run
 * again, and after one whose writes were undone (nothing of it was ended). */
void store_supersede_uncount(store_supersede *sup);

/* ---- supersession (store_supersede), the same for both backends ---- */

/* An older dispatch a supersession ends: its delivery and its row's body (Depends-On record). */
typedef struct store_ended_dispatch {
    int64_t id; /* its outbox row, when the read gave it (0: not known) */
    char delivery_id[CRCR_DELIVERY_ID_MAX];
    char *pair; /* owned (free), NULL when none */
    size_t pair_len;
} store_ended_dispatch;

/* The older dispatches of a supersession (rows of STORE_ENDED_COLUMNS), ctx a store_ended_list;
 * more than STORE_ENDED_MAX at once are left for a later pass. */
#define STORE_ENDED_MAX 64u
#define STORE_ENDED_COLUMNS "o.delivery_id, o.body"
typedef struct store_ended_list {
    store_ended_dispatch v[STORE_ENDED_MAX];
    size_t n;
    crcr_err err;
} store_ended_list;
int store_ended_row(void *ctx, const store_row_source *s);
/* Fills *e from a row's delivery id (column id_col) and Depends-On record (column pair_col, owned
 * by *e). 0: filled; 1: not a row the store wrote (skip it); -1: out of memory. */
int store_ended_fill(store_ended_dispatch *e, const store_row_source *s, int id_col, int pair_col);
/* Room for element `n` in the array *v of *cap elements of `size` bytes (the caller's, owned):
 * doubled from 16, at most `max`. False, the array unchanged, when there is no memory or n is
 * `max`. The supersessions' lists grow as their rows come: made up front for the most one read
 * may return, they cost every fan-out that ends nothing (bench/RESULTS.md). */
bool store_rows_room(void **v, size_t *cap, size_t n, size_t size, size_t max);
void store_ended_list_free(store_ended_list *l);

/* A run in progress a supersession ends, copied out of its row (RUN_COLUMNS_NO_PAYLOAD), as
 * store_ended_fn will see it once ended. */
typedef struct store_ended_run {
    char delivery_id[CRCR_DELIVERY_ID_MAX], repo[CRCR_REPO_NAME_MAX];
    char job_name[CRCR_JOB_NAME_MAX + 1], workflow_name[CRCR_JOB_NAME_MAX + 1];
    char event_type[64], head_sha[CRCR_SHA_MAX + 8], details_url[2200];
    char run_id[CRCR_RUN_ID_MAX];
    int64_t run_attempt, pr_number, level, dispatched_at, started_at, queue_ms;
    int64_t rowid; /* the row's id (SQLite rowid, PostgreSQL seq): column 24, after a NULL
                      payload (RUN_COLUMNS_NO_PAYLOAD ", NULL, rowid") */
    bool cut;      /* a name was longer than its field: no effects for this run */
} store_ended_run;
typedef struct store_ended_runs {
    store_ended_run v[CRCR_SUPERSEDE_BATCH];
    size_t n;
} store_ended_runs;
int store_ended_run_row(void *ctx, const store_row_source *s);
/* The row as the supersession writes it (completed, cancelled, ended `reason` at `now`), its
 * strings borrowed from `e`, for store_ended_fn. */
void store_ended_run_view(const store_ended_run *e, const char *reason, int64_t now,
                          struct store_run_row *out);
/* The delivery id of a pair re-dispatch: "<base>:pr<N>" (false when it does not fit). */
bool store_pair_delivery_id(const char *base, int64_t pr, char *out, size_t outsz);

/* Adds one `SELECT state, count(*), min(next_attempt_at) ... GROUP BY state` row to the
 * store_outbox_stats `out` (both backends' outbox statistics). */
int store_stats_row(void *out, const store_row_source *s);

/* The delivery of store_get_delivery (DELIVERY_COLUMNS, then its payload), ctx a
 * store_delivery_read: `found`, and passed to `dfn` when set. Stops. */
typedef struct store_delivery_read {
    void (*dfn)(void *ctx, const store_delivery_row *row, const char *payload, size_t len);
    void *ctx;
    bool found;
    crcr_err err; /* the payload could not be read back (payload_unpack) */
} store_delivery_read;
int store_delivery_read_row(void *ctx, const store_row_source *s);

/* A kv value (one column) appended to `value`, ctx a store_kv_read. Stops. */
typedef struct store_kv_read {
    buf_t *value;
    bool found;
    crcr_err err; /* of the append */
} store_kv_read;
int store_kv_row(void *ctx, const store_row_source *s);

/* One value a statement answers: `found` when it gave a row whose first column is not NULL (its
 * `text` is NULL only then), `v` that column. store_scalar_row (ctx: a store_scalar) stops at the
 * first row. */
typedef struct store_scalar {
    bool found;
    int64_t v;
} store_scalar;
int store_scalar_row(void *ctx, const store_row_source *s);

/* A pair re-dispatch's sources (both stores): a pair whose dispatch is not ended, by its delivery
 * and upstream PR. store_pair_src_row (ctx: a store_pair_srcs over the caller's array of `max`)
 * keeps the first, latest, pair of each PR from rows that come by PR, newest first, and stops
 * when the array is full. */
typedef struct store_pair_src {
    char delivery_id[CRCR_DELIVERY_ID_MAX];
    int64_t pr;
} store_pair_src;
typedef struct store_pair_srcs {
    store_pair_src *v;
    size_t n, max;
} store_pair_srcs;
int store_pair_src_row(void *ctx, const store_row_source *s);

/* A text column into a char[CRCR_SHA_MAX + 8] ("" when NULL or longer); stops. */
int store_sha_text_row(void *ctx, const store_row_source *s);

/* A dispatch record (DISPATCH_COLUMNS) into `out`, its payload appended when `with_payload`;
 * ctx: a store_dispatch_read. */
typedef struct store_dispatch_read {
    store_dispatch *out;
    bool with_payload;
    bool found;
    crcr_err err; /* of the payload's copy */
} store_dispatch_read;
int store_dispatch_row(void *ctx, const store_row_source *s);

/* store_identity_pin's check of a pinned row (IDENTITY_COLUMNS), ctx a store_pin_check: a match
 * needs both ids, equal; `seen` (may be NULL) is told of a mismatch. */
typedef struct store_pin_check {
    const char *repository_id, *owner_id;
    void (*seen)(void *ctx, const store_identity_row *row);
    void *ctx;
    bool found;
    store_pin_outcome outcome;
} store_pin_check;
int store_pin_row(void *ctx, const store_row_source *s);

/* ---- the operations a backend provides ---- */

/* The operations come in groups, as the backends' files define them; what store.c has already
 * done for an operation is said beside it. */

/* store_run_apply's arguments as one, which the backends pass on through their callbacks; `res`
 * is initialised (zero, queue_ms = exec_ms = -1). */
typedef struct store_run_call {
    const store_run_update *u;
    store_effects_fn effects;
    void *ctx;
    store_run_result *res;
    char *reason;
    size_t reasonsz;
} store_run_call;

/* Sets `res` as store_run_apply hands it to a backend (zero, queue_ms = exec_ms = -1): also for
 * a backend that applies a transition again. */
void store_run_result_init(store_run_result *res);

/* Deliveries, the outbox, kv and leases, retention. */
typedef struct store_outbox_ops {
    /* `sup` NULL: no supersession (store.c passes none for a delivery without a PR); `vis`
     * NULL: no early hand-over (store_visible). */
    crcr_err (*ingest)(store *st, const store_delivery *d, const store_new_job *jobs, size_t n,
                       store_supersede *sup, store_visible *vis);
    /* store_pair_redispatch; `sup`'s counts are zero, *n is 0, base_id fits. */
    crcr_err (*pair_redispatch)(store *st, const char *repo, int64_t number, const char *base_id,
                                int64_t now, const store_new_job *job, store_supersede *sup,
                                store_pair_hit *hits, size_t max, size_t *n);
    /* up to `max` rows into out[0..*n) (store_claim_batch) */
    crcr_err (*claim)(store *st, int64_t now, int64_t lease_ms, store_job *out, size_t max,
                      size_t *n);
    crcr_err (*next_due)(store *st, int64_t *due);
    /* finish/retry/renew: `lease` is the claim's lease_until, the fence (store.h). */
    crcr_err (*job_finish)(store *st, int64_t id, int64_t lease, const char *state,
                           long http_status, const char *error, const char *note, const char *body,
                           size_t body_len, int64_t now);
    crcr_err (*job_retry)(store *st, int64_t id, int64_t lease, int64_t next_at, bool count_attempt,
                          long http_status, const char *error);
    crcr_err (*job_renew)(store *st, int64_t id, int64_t lease, int64_t new_lease);
    crcr_err (*job_record)(store *st, int64_t id, int64_t lease, const char *body, size_t body_len);
    /* *n is 0 until it succeeds. */
    crcr_err (*redeliver)(store *st, const char *delivery_id, const char *repo, int64_t now,
                          int *n);
    crcr_err (*enqueue)(store *st, const char *delivery_id, const store_new_job *jobs, size_t n);
    /* `f` is never NULL. */
    crcr_err (*list_deliveries)(store *st, const store_filter *f, store_rows *rows);
    /* The delivery to store_delivery_read_row, then its outbox rows in id order to `jobs` when
     * jobs->job is set; CRCR_E_NOT_FOUND for an unknown id. */
    crcr_err (*get_delivery)(store *st, const char *delivery_id, store_delivery_read *delivery,
                             store_rows *jobs);
    crcr_err (*outbox_stats)(store *st, store_outbox_stats *out); /* out zeroed */
    /* The live value to store_kv_row. */
    crcr_err (*kv_get)(store *st, const char *key, int64_t now, store_kv_read *value);
    crcr_err (*kv_put)(store *st, const char *key, const char *value, size_t len,
                       int64_t expires_at);
    /* `key` is the kv key of the named lease; *held is false. */
    crcr_err (*lease)(store *st, const char *key, const char *owner, int64_t now, int64_t ttl_ms,
                      bool *held);
    crcr_err (*retention)(store *st, int64_t before, int *n); /* *n is 0 */
    /* store_jobs_settle: items' results set by the backend */
    crcr_err (*jobs_settle)(store *st, store_settle *items, size_t n);
    /* store_kv_scan with the prefix's key range [lo, hi) (hi: the prefix, its last byte + 1) */
    crcr_err (*kv_scan)(store *st, const char *lo, const char *hi, int64_t now, size_t max,
                        store_kv_fn fn, void *ctx);
    crcr_err (*kv_delete)(store *st, const char *key);
    /* store_gh_slots; NULL: one serving process (min(want, total)) */
    crcr_err (*gh_slots)(store *st, long total, long want, long *granted);
} store_outbox_ops;

/* A kv row (key, value) handed to a store_kv_fn; ctx a store_kv_scan_read. */
typedef struct store_kv_scan_read {
    store_kv_fn fn;
    void *ctx;
    size_t left;
} store_kv_scan_read;
int store_kv_scan_row(void *ctx, const store_row_source *s);

/* Callback runs and what they are checked against. */
typedef struct store_run_ops {
    crcr_err (*run_apply)(store *st, store_run_call *call);
    crcr_err (*rate_hit)(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                         bool *allowed, int64_t *retry_after_ms);
    crcr_err (*runs_for_sha)(store *st, const char *head_sha, const char *repo, store_rows *rows);
    /* `limit` is above 0. */
    crcr_err (*zombies)(store *st, int64_t started_before, int limit, store_rows *rows);
    /* `f` is never NULL. */
    crcr_err (*list_runs)(store *st, const store_run_filter *f, store_rows *rows);
    crcr_err (*wanted_set)(store *st, const char *head_sha, const char *repo, int64_t now);
    /* A mark to store_scalar_row. */
    crcr_err (*wanted_get)(store *st, const char *head_sha, const char *repo, int64_t since,
                           store_scalar *mark);
    crcr_err (*callback_rejected)(store *st, const char *repo, int64_t now, int status);
    /* The count to store_scalar_row. */
    crcr_err (*callback_rejections)(store *st, const char *repo, int64_t since, store_scalar *n);
    /* The record to store_dispatch_row (its `out` cleared). */
    crcr_err (*dispatch_get)(store *st, const char *delivery_id, const char *repo,
                             store_dispatch_read *d);
    /* The pin of `repo` to store_pin_row, created first with the check's ids when the name has
     * none and both ids are given (check->found false: no pin). */
    crcr_err (*identity_pin)(store *st, const char *repo, int64_t now, store_pin_check *check);
    crcr_err (*identity_list)(store *st, store_rows *rows);
    crcr_err (*identity_reset)(store *st, const char *repo, int64_t *n); /* *n: pins deleted */
    /* Only called when amount <= limit; *allowed is false. */
    crcr_err (*budget_take)(store *st, const char *name, int64_t amount, int64_t limit,
                            int64_t expires_at, bool *allowed);
} store_run_ops;

/* The reconciler's records (store.h, "Redeliveries"). */
typedef struct store_reconcile_ops {
    /* *allowed is false and *attempts 0. */
    crcr_err (*redelivery_begin)(store *st, const char *guid, int64_t hook_id, const char *event,
                                 const char *action, int64_t now, int max_attempts,
                                 int64_t stale_before, bool *allowed, int *attempts);
    crcr_err (*redelivery_done)(store *st, const char *guid, long status, const char *result,
                                bool counted);
    /* `limit` is above 0; rows to store_listing_row with rows->redelivery set. */
    crcr_err (*redelivery_list)(store *st, int limit, bool pending_only, store_rows *rows);
} store_reconcile_ops;

typedef struct store_ops {
    void (*close)(store *st);
    crcr_err (*recover)(store *st);
    crcr_err (*ping)(store *st);
    /* store_probe_write's check, called only while a fault is recorded: CRCR_OK when writes
     * would go through (store.c then clears the fault). */
    crcr_err (*probe)(store *st);
    /* Optional (NULL when the backend has no cross-process wake-up, e.g. SQLite): waits up to
     * timeout_ms for new outbox rows written by other processes (see store_wait_for_work). */
    crcr_err (*wait_for_work)(store *st, int64_t timeout_ms, size_t *rows);
    const store_outbox_ops *outbox;
    const store_run_ops *runs;
    const store_reconcile_ops *reconcile;
} store_ops;

/* The write fault of a store (store_write_fault): `kind` is read without the lock (a cleared
 * fault costs an ingest one atomic load); the reason and its time under `mu`. */
typedef struct store_fault {
    _Atomic int kind; /* store_fault_kind */
    pthread_mutex_t mu;
    char why[STORE_FAULT_WHY_MAX];
    int64_t since_ms;
} store_fault;

struct store {
    const store_ops *ops;
    store_fault fault;
};

/* What both backends do with their embedded `struct store` at open and at close. */
void store_base_init(store *st, const store_ops *ops);
void store_base_fini(store *st);

/* Records a write fault (see store.h) of `kind`: `detail` is the backend's message, `op` what
 * failed. Logged once when the fault begins or changes kind; the failing operation logs its own
 * error as before. */
void store_fault_note(store *st, store_fault_kind kind, const char *op, const char *detail);
/* Clears the fault after a durable write went through (logged when there was one). */
void store_fault_clear(store *st);

/* Backend constructors: `location` is the URI without its scheme prefix for SQLite
 * ("sqlite:PATH" -> "PATH") and the whole URI for PostgreSQL. */
crcr_err store_sqlite_open(const char *path, store **out, char *err, size_t errsz);
/* store_backup for a SQLite file (store.h). */
crcr_err store_sqlite_backup(const char *path, const char *dest, int *version, char *err,
                             size_t errsz);
crcr_err store_pg_open(const char *uri, long pool, store **out, char *err, size_t errsz);

#endif
