/*
 * store_pg_runs.c - the PostgreSQL store's callback side: run transitions (under an advisory lock
 * of the run's key, so that concurrent identical callbacks on several instances apply once), the
 * rate limit (its own transaction, under an advisory lock and the counter row of the repo), runs
 * listings and zombies, "check run wanted" marks, refused callbacks, dispatch records, identity
 * pins and byte budgets. See store_pg.c for the connections.
 */
#include <stdio.h>
#include <string.h>

#include "store_pg.h"

/* Side-effect jobs one transition may add. */
#define PG_RUN_EFFECTS_MAX 8

/* ---- the rate limit ---- */

typedef struct rate_args {
    const char *repo;
    int64_t now, window_ms;
    long limit;
    bool allowed;
    int64_t retry_after_ms;
} rate_args;

/* What the window holds once its expired hits are out (statement 2 of op_rate_hit). */
typedef struct rate_window_read {
    int64_t expired, recounted, oldest; /* oldest -1: no hit left */
} rate_window_read;

static int rate_window_row(void *ctx, const store_row_source *s)
{
    rate_window_read *w = ctx;
    w->expired = s->i64(s->src, 0, 0);
    w->recounted = s->i64(s->src, 1, 0);
    w->oldest = s->i64(s->src, 2, -1);
    return 1;
}

/*
 * The sliding window of run_state.h (rate_window_*), as on SQLite: O(1) per hit whatever the
 * window holds. Hits of one repo are counted one at a time: the first statement takes the repo's
 * advisory lock (what instances before this version take) and locks its rate_counts row (created
 * with n = -1, "not counted yet", for a repo without one), returning its count. Three statements
 * in all while the lock is held, not six, the last sent with COMMIT: the lock's wait was most of a
 * callback's time when one repo's callbacks came together (bench/RESULTS.md). The second
 * statement's reads see the table as it was before its own DELETE (one snapshot), hence their
 * `at > cutoff`.
 */
static crcr_err op_rate_hit(pgx *x, void *arg)
{
    rate_args *a = arg;
    int64_t cutoff = a->now - a->window_ms;
    store_scalar count = {0};
    crcr_err e = pg_query(x,
                          "WITH l AS (SELECT pg_advisory_xact_lock(hashtextextended('crcr.rate:' "
                          "|| lower($1::text), 0))) INSERT INTO rate_counts(repo, n) SELECT $1, -1 "
                          "FROM l ON CONFLICT (lower(repo)) DO UPDATE SET n=rate_counts.n "
                          "RETURNING n",
                          ARGS(ARG_TEXT(a->repo)), store_scalar_row, &count, NULL);
    bool have = count.found && count.v >= 0;
    rate_window_read w = {0, 0, -1};
    if (!e)
        e = pg_query(x,
                     "WITH d AS (DELETE FROM rate_hits WHERE lower(repo)=lower($1) AND at <= $2 "
                     "RETURNING 1) SELECT (SELECT count(*) FROM d), CASE WHEN $3::boolean THEN "
                     "(SELECT count(*) FROM rate_hits WHERE lower(repo)=lower($1) AND at > $2) "
                     "END, (SELECT min(at) FROM rate_hits WHERE lower(repo)=lower($1) AND at > $2)",
                     ARGS(ARG_TEXT(a->repo), ARG_INT(cutoff), ARG_TEXT(have ? "false" : "true")),
                     rate_window_row, &w, NULL);
    if (e)
        return e;
    int64_t n = rate_window_count(have, count.v, w.expired, w.recounted);
    int64_t next = rate_window_decide(n, a->limit, w.oldest >= 0 ? w.oldest : a->now, a->now,
                                      a->window_ms, &a->allowed, &a->retry_after_ms);
    if (!have || w.expired || a->allowed) /* with COMMIT (pg_queue): one round trip */
        e = pg_queue(x,
                     "WITH h AS (INSERT INTO rate_hits(repo, at) SELECT $1, $2 WHERE $3::boolean) "
                     "UPDATE rate_counts SET n=$4 WHERE lower(repo)=lower($1)",
                     ARGS(ARG_TEXT(a->repo), ARG_INT(a->now),
                          ARG_TEXT(a->allowed ? "true" : "false"), ARG_INT(next)),
                     NULL, NULL, NULL);
    return e;
}

static crcr_err pg_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                            bool *allowed, int64_t *retry_after_ms)
{
    rate_args a = {repo, now, window_ms, limit, false, 0};
    *allowed = false;
    *retry_after_ms = 0;
    /* Not waited for on the server's disk: a hit a crash of the server loses is one not counted,
     * and the callback's own transition that follows still commits durably. */
    crcr_err e = pg_with_tx_relaxed(pg_store_of(st), "rate", op_rate_hit, &a);
    if (!e) {
        *allowed = a.allowed;
        *retry_after_ms = a.retry_after_ms;
    }
    return e;
}

/* ---- run transitions ---- */

/* The end reason of a dispatch (one text column) into a char[16]; stops. */
static int ended_row(void *ctx, const store_row_source *s)
{
    char *out = ctx;
    const char *t = s->text(s->src, 0);
    snprintf(out, 16, "%s", t ? t : "");
    return 1;
}

static crcr_err op_run_apply(pgx *x, void *arg)
{
    store_run_call *a = arg;
    const store_run_update *u = a->u;
    store_run_result *res = a->res;
    memset(res, 0, sizeof(*res));
    res->queue_ms = -1;
    res->exec_ms = -1;
    /* The run's key: $1 delivery, $2 repo, $3 run_id, $4 run_attempt, $5 job, $6 workflow. */
    const store_param key[] = {ARG_TEXT(u->key.delivery_id),
                               ARG_TEXT(u->key.repo),
                               ARG_TEXT(u->key.run_id),
                               ARG_INT(u->key.run_attempt),
                               ARG_TEXT(u->key.job_name ? u->key.job_name : ""),
                               ARG_TEXT(u->key.workflow_name ? u->key.workflow_name : "")};

    pg_begin(x);
    /* Every transition of this key waits here for the one before it to commit; then, in the
     * same round trip and always in this order (the materialized key lock first), for the PR's
     * lock, shared: a supersession of the PR (exclusive, pg_lock_pr) is not running (§3.12).
     * The sweeper's timeouts take both too. The reads after it go in the same round trip
     * (pg_queue): a pipeline's statements run one after the other, each with its own snapshot,
     * so they read under the locks. */
    const store_param locks[] = {
        key[0], key[1], key[2], key[3], key[4], key[5], ARG_INT(u->pr_number)};
    crcr_err e = pg_queue(
        x,
        "WITH k AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended("
        "'crcr.run:' || $1::text || chr(31) || lower($2::text) || chr(31) || $3::text || "
        "chr(31) || $4::text || chr(31) || $6::text || chr(31) || $5::text, 0)) AS held) "
        "SELECT CASE WHEN $7::bigint > 0 THEN pg_advisory_xact_lock_shared(" PG_PR_LOCK_KEY(
            "$7") ") END FROM k",
        locks, 7, NULL, NULL, NULL);
    res->dispatched_at = u->dispatched_at;
    /* The dispatch record: this delivery was sent (or queued) to this repo. */
    bool need_dispatch = !u->single_shot && !u->dispatched_at;
    store_scalar dispatched = {0};
    if (!e && need_dispatch)
        e = pg_queue(x,
                     "SELECT COALESCE(done_at, created_at) FROM outbox WHERE kind='dispatch' "
                     "AND delivery_id=$1 AND lower(target)=lower($2) LIMIT 1",
                     key, 2, store_scalar_row, &dispatched, NULL);
    /* The key's current row, under the key's lock. */
    run_prev prev = {0};
    if (!e)
        e = pg_queue(x,
                     "SELECT " RUN_PREV_COLUMNS " FROM runs WHERE delivery_id=$1 AND "
                     "lower(repo)=lower($2) AND run_id=$3 AND run_attempt=$4 AND job_name=$5 AND "
                     "workflow_name=$6",
                     key, 6, run_prev_row, &prev, NULL);
    /* Whether a newer dispatch ended this one, read under the PR's lock. */
    if (!e)
        e = pg_query(x,
                     "SELECT reason FROM dispatch_ends WHERE delivery_id=$1 AND "
                     "lower(repo)=lower($2)",
                     key, 2, ended_row, prev.dispatch_ended, NULL);
    if (!e && need_dispatch) {
        if (!dispatched.found)
            e = CRCR_E_NOT_FOUND;
        res->dispatched_at = dispatched.v;
    }
    if (!e) {
        run_outcome o = run_state_next(&prev, u, res->dispatched_at, res, a->reason, a->reasonsz);
        if (o == RUN_INVALID)
            e = CRCR_E_STATE;
    }
    if (e || res->duplicate)
        return pg_finish_tx(x, e, true);

    /* The write goes with the side effects' rows, or with COMMIT (pg_queue). */
    store_param params[RUN_UPSERT_PARAMS];
    run_row_params(u, res, params);
    e = pg_queue(
        x,
        "INSERT INTO runs(" RUN_UPSERT_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8::integer, "
        "$9, $10, $11, $12, $13, $14, $15::bigint, $16::bigint, $17::bigint, $18::bigint, "
        "$19::bigint, $20::bigint, $21::bigint, $22::bigint, $23::bytea, $24, $25) ON CONFLICT "
        "(delivery_id, lower(repo), run_id, run_attempt, workflow_name, job_name) DO UPDATE SET "
        "state=excluded.state, level=excluded.level, conclusion=excluded.conclusion, "
        "ended=excluded.ended, "
        "completed_at=excluded.completed_at, exec_ms=excluded.exec_ms, "
        "test_passed=excluded.test_passed, test_failed=excluded.test_failed, "
        "test_skipped=excluded.test_skipped, "
        "artifact_url=COALESCE(excluded.artifact_url, runs.artifact_url), "
        "details_url=COALESCE(excluded.details_url, runs.details_url), "
        "payload=excluded.payload, updated_at=excluded.updated_at",
        params, RUN_UPSERT_PARAMS, NULL, NULL, NULL);
    if (!e && a->effects) {
        store_new_job jobs[PG_RUN_EFFECTS_MAX];
        size_t n = 0;
        x->called_back = true; /* the callback may append to its buffers: never twice */
        e = a->effects(a->ctx, res, jobs, PG_RUN_EFFECTS_MAX, &n);
        if (!e)
            e = pg_insert_jobs(x, u->key.delivery_id, jobs, n > PG_RUN_EFFECTS_MAX ? 0 : n, u->now);
    }
    return pg_finish_tx(x, e, false);
}

/* The rate hit (u->rate_limit) is its own transaction before the transition's, as when the
 * caller makes both calls: it counts whatever the transition's outcome. */
static crcr_err pg_run_apply(store *st, store_run_call *call)
{
    const store_run_update *u = call->u;
    if (u->rate_limit > 0) {
        bool allowed = false;
        int64_t retry = 0;
        crcr_err e = pg_rate_hit(st, u->key.repo, u->now, u->rate_window_ms, u->rate_limit,
                                 &allowed, &retry);
        if (e)
            return e;
        if (!allowed) {
            call->res->rate_limited = true;
            call->res->retry_after_ms = retry;
            return CRCR_OK;
        }
    }
    return pg_with_conn(pg_store_of(st), "run_apply", op_run_apply, call);
}

/* ---- runs read back ---- */

static crcr_err pg_runs_for_sha(store *st, const char *head_sha, const char *repo, store_rows *rows)
{
    /* The latest row per (workflow, job): last update, then insertion order. */
    return pg_run(pg_store_of(st), "runs_for_sha",
                  "SELECT " RUN_COLUMNS " FROM runs r WHERE head_sha=$1 AND "
                  "lower(repo)=lower($2) AND NOT EXISTS (SELECT 1 FROM runs o WHERE "
                  "o.head_sha=r.head_sha AND lower(o.repo)=lower(r.repo) AND o.workflow_name "
                  "IS NOT DISTINCT FROM r.workflow_name AND o.job_name=r.job_name AND "
                  "(o.updated_at>r.updated_at OR (o.updated_at=r.updated_at AND o.seq>r.seq))) "
                  "ORDER BY workflow_name COLLATE \"C\" NULLS FIRST, job_name COLLATE \"C\"",
                  ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo)), store_listing_row, rows, NULL);
}

static crcr_err pg_zombies(store *st, int64_t started_before, int limit, store_rows *rows)
{
    return pg_run(pg_store_of(st), "zombies",
                  "SELECT " RUN_COLUMNS " FROM runs WHERE state='in_progress' AND started_at < "
                  "$1 AND ended IS NULL ORDER BY started_at, seq LIMIT $2",
                  ARGS(ARG_INT(started_before), ARG_INT(limit)), store_listing_row, rows, NULL);
}

/* Planned with the actual parameter values, so that unset filters fold away and the matching
 * index is used. */
#define RUNS_LIST_FROM                                                                             \
    " FROM runs WHERE ($1::text IS NULL OR lower(repo)=lower($1::text)) "                          \
    "AND ($2::bigint=0 OR pr_number=$2::bigint) AND ($3::text IS NULL OR head_sha=$3::text) "      \
    "AND ($4::integer=0 OR ($4::integer=1 AND COALESCE(event_type,'') NOT IN "                     \
    "('nightly','periodic')) OR ($4::integer=2 AND event_type IN ('nightly','periodic'))) AND "    \
    "updated_at >= $5 ORDER BY updated_at DESC, seq DESC LIMIT $6 OFFSET $7"

static crcr_err pg_list_runs(store *st, const store_run_filter *f, store_rows *rows)
{
    /* Listings may leave the payloads out. */
    return pg_run(pg_store_of(st), "list_runs",
                  f->no_payload ? "SELECT " RUN_COLUMNS_NO_PAYLOAD ", NULL::bytea" RUNS_LIST_FROM
                                : "SELECT " RUN_COLUMNS RUNS_LIST_FROM,
                  ARGS(ARG_TEXT(f->repo), ARG_INT(f->pr_number), ARG_TEXT(f->head_sha),
                       ARG_INT(f->kind), ARG_INT(f->since), ARG_INT(run_list_limit(f)),
                       ARG_INT(run_list_offset(f))),
                  store_listing_row, rows, NULL);
}

/* ---- labels wanted, refused callbacks ---- */

static crcr_err pg_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    return pg_run(pg_store_of(st), "wanted_set",
                  "INSERT INTO labels_wanted(head_sha, repo, created_at) VALUES ($1, $2, $3) ON "
                  "CONFLICT (head_sha, lower(repo)) DO UPDATE SET created_at=excluded.created_at",
                  ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo), ARG_INT(now)), NULL, NULL, NULL);
}

static crcr_err pg_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since,
                              store_scalar *mark)
{
    return pg_run(pg_store_of(st), "wanted_get",
                  "SELECT 1 FROM labels_wanted WHERE head_sha=$1 AND lower(repo)=lower($2) AND "
                  "created_at >= $3",
                  ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo), ARG_INT(since)), store_scalar_row, mark,
                  NULL);
}

static crcr_err pg_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    return pg_run(pg_store_of(st), "rejected",
                  "INSERT INTO callback_rejections(repo, at, status) VALUES ($1, $2, "
                  "$3::integer)",
                  ARGS(ARG_TEXT(repo), ARG_INT(now), ARG_INT(status)), NULL, NULL, NULL);
}

static crcr_err pg_callback_rejections(store *st, const char *repo, int64_t since, store_scalar *n)
{
    return pg_run(pg_store_of(st), "rejections",
                  "SELECT count(*) FROM callback_rejections WHERE lower(repo)=lower($1) AND "
                  "at>=$2",
                  ARGS(ARG_TEXT(repo), ARG_INT(since)), store_scalar_row, n, NULL);
}

/* ---- dispatch records, identity pins, budgets ---- */

static crcr_err pg_dispatch_get(store *st, const char *delivery_id, const char *repo,
                                store_dispatch_read *d)
{
    return pg_run(pg_store_of(st), "dispatch_get",
                  "SELECT " DISPATCH_COLUMNS ", CASE WHEN $3::bigint=1 THEN d.payload END FROM "
                  "outbox o JOIN deliveries d ON d.delivery_id=o.delivery_id WHERE "
                  "o.kind='dispatch' AND o.delivery_id=$1 AND lower(o.target)=lower($2) LIMIT 1",
                  ARGS(ARG_TEXT(delivery_id), ARG_TEXT(repo), ARG_INT(d->with_payload ? 1 : 0)),
                  store_dispatch_row, d, NULL);
}

typedef struct pin_args {
    const char *repo;
    int64_t now;
    store_pin_check *check;
} pin_args;

/* The pin, created first when the name has none and ids are given: one statement either way (a
 * concurrent first callback of the same name on another instance keeps the first pin). */
static crcr_err op_identity_pin(pgx *x, void *arg)
{
    pin_args *a = arg;
    store_pin_check *c = a->check;
    if (*c->repository_id && *c->owner_id) {
        crcr_err e = pg_query(x,
                              "INSERT INTO repo_identity(repo, repository_id, owner_id, "
                              "pinned_at, last_seen_at) VALUES ($1, $2, $3, $4, $4) ON CONFLICT "
                              "(lower(repo)) DO NOTHING",
                              ARGS(ARG_TEXT(a->repo), ARG_TEXT(c->repository_id),
                                   ARG_TEXT(c->owner_id), ARG_INT(a->now)),
                              NULL, NULL, NULL);
        if (e)
            return e;
    }
    c->found = false;
    return pg_query(x, "SELECT " IDENTITY_COLUMNS " FROM repo_identity WHERE lower(repo)=lower($1)",
                    ARGS(ARG_TEXT(a->repo)), store_pin_row, c, NULL);
}

static crcr_err pg_identity_pin(store *st, const char *repo, int64_t now, store_pin_check *check)
{
    pin_args a = {repo, now, check};
    return pg_with_conn(pg_store_of(st), "identity_pin", op_identity_pin, &a);
}

static crcr_err pg_identity_list(store *st, store_rows *rows)
{
    return pg_run(pg_store_of(st), "identity_list",
                  "SELECT " IDENTITY_COLUMNS " FROM repo_identity ORDER BY lower(repo)", NULL, 0,
                  store_listing_row, rows, NULL);
}

static crcr_err pg_identity_reset(store *st, const char *repo, int64_t *n)
{
    return pg_run(pg_store_of(st), "identity_reset",
                  "DELETE FROM repo_identity WHERE lower(repo)=lower($1)", ARGS(ARG_TEXT(repo)),
                  NULL, NULL, n);
}

static crcr_err pg_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                               int64_t expires_at, bool *allowed)
{
    int64_t rows = 0;
    crcr_err e = pg_run(pg_store_of(st), "budget_take",
                        "INSERT INTO budgets(name, used, expires_at) VALUES ($1, $2, $3) ON "
                        "CONFLICT (name) DO UPDATE SET used=budgets.used+excluded.used WHERE "
                        "budgets.used+excluded.used <= $4",
                        ARGS(ARG_TEXT(name), ARG_INT(amount), ARG_INT(expires_at), ARG_INT(limit)),
                        NULL, NULL, &rows);
    if (!e)
        *allowed = rows > 0;
    return e;
}

/* This file's operations (store_impl.h). */
const store_run_ops PG_RUN_OPS = {
    .run_apply = pg_run_apply,
    .rate_hit = pg_rate_hit,
    .runs_for_sha = pg_runs_for_sha,
    .zombies = pg_zombies,
    .list_runs = pg_list_runs,
    .wanted_set = pg_wanted_set,
    .wanted_get = pg_wanted_get,
    .callback_rejected = pg_callback_rejected,
    .callback_rejections = pg_callback_rejections,
    .dispatch_get = pg_dispatch_get,
    .identity_pin = pg_identity_pin,
    .identity_list = pg_identity_list,
    .identity_reset = pg_identity_reset,
    .budget_take = pg_budget_take,
};
