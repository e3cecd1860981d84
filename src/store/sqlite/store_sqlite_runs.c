/*
 * store_sqlite_runs.c - the SQLite store's callback side: run transitions (through the group
 * commit, with their rate-limit hit and side effects in the same transaction), the rate limit,
 * runs listings and zombies, "check run wanted" marks, refused callbacks, dispatch records (read
 * on the hot reader), identity pins and byte budgets. See store_sqlite.c for the connections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "store_sqlite.h"

/* Side-effect jobs one transition may add. */
#define RUN_EFFECTS_MAX 8

/* ---- the rate limit ---- */

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
    store_scalar count = {0}, recounted = {0}, oldest = {0};
    crcr_err err = sq_cached(s, SQ_RATE_COUNT, "rate", "SELECT n FROM rate_counts WHERE repo=?1",
                             ARGS(ARG_TEXT(repo)), store_scalar_row, &count);
    if (!err)
        err =
            sq_cached(s, SQ_RATE_EXPIRE, "rate", "DELETE FROM rate_hits WHERE repo=?1 AND at <= ?2",
                      ARGS(ARG_TEXT(repo), ARG_INT(now - window_ms)), NULL, NULL);
    if (err)
        return err;
    int expired = sqlite3_changes(s->db);
    if (!count.found) /* first hit since rate_counts existed: count what the table holds */
        err =
            sq_cached(s, SQ_RATE_COUNT_INIT, "rate", "SELECT count(*) FROM rate_hits WHERE repo=?1",
                      ARGS(ARG_TEXT(repo)), store_scalar_row, &recounted);
    int64_t n = rate_window_count(count.found, count.v, expired, recounted.v);
    if (!err && n >= limit)
        err = sq_cached(s, SQ_RATE_OLDEST, "rate", "SELECT min(at) FROM rate_hits WHERE repo=?1",
                        ARGS(ARG_TEXT(repo)), store_scalar_row, &oldest);
    if (err)
        return err;
    int64_t next = rate_window_decide(n, limit, oldest.found ? oldest.v : now, now, window_ms,
                                      allowed, retry_after_ms);
    if (*allowed)
        err =
            sq_cached(s, SQ_RATE_INSERT, "rate", "INSERT INTO rate_hits(repo, at) VALUES (?1, ?2)",
                      ARGS(ARG_TEXT(repo), ARG_INT(now)), NULL, NULL);
    if (!err && (!count.found || expired || *allowed))
        err = sq_cached(s, SQ_RATE_COUNT_SET, "rate",
                        "INSERT INTO rate_counts(repo, n) VALUES (?1, ?2) ON CONFLICT(repo) DO "
                        "UPDATE SET n=excluded.n",
                        ARGS(ARG_TEXT(repo), ARG_INT(next)), NULL, NULL);
    return err;
}

static crcr_err sq_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                            bool *allowed, int64_t *retry_after_ms)
{
    sqlite_store *s = sq_store(st);
    *allowed = false;
    *retry_after_ms = 0;
    crcr_err err = sq_begin(s);
    if (err)
        return err;
    err = sq_end(s, rate_hit_tx(s, repo, now, window_ms, limit, allowed, retry_after_ms));
    if (err) {
        *allowed = false;
        err = CRCR_E_STORE;
    }
    return err;
}

/* ---- run transitions ---- */

/* An echoed webhook shorter than this stays in its run's body: apart, it would save less than
 * its run_echoes row and lookup cost. */
#define SQ_ECHO_MIN 1024u

/* A run's body as listings read it (column RUN_PAYLOAD_COLUMN), from a row of runs named `t`:
 * the stored body, or with echo_at set, the body with its dispatch's echo put back at that
 * offset. substr counts bytes in a BLOB; || joins the bytes as text, cast back to a BLOB. */
#define SQ_RUN_PAYLOAD(t)                                                                          \
    "CASE WHEN " t ".echo_at IS NULL THEN " t ".payload ELSE CAST(substr(" t ".payload, 1, " t     \
    ".echo_at) || (SELECT e.echo FROM run_echoes e WHERE e.delivery_id=" t ".delivery_id AND "     \
    "e.repo=" t ".repo) || substr(" t ".payload, " t ".echo_at + 1) AS BLOB) END"

/* Compares a stored echo (one blob column) with the candidate, and stops. */
typedef struct echo_cmp {
    const char *p;
    size_t n;
    bool found, same;
} echo_cmp;

static int echo_cmp_row(void *ctx, const store_row_source *s)
{
    echo_cmp *c = ctx;
    size_t n = 0;
    const void *b = s->blob(s->src, 0, &n);
    c->found = true;
    c->same = b && n == c->n && memcmp(b, c->p, n) == 0;
    return 1;
}

/* The body param of a run row without its echo (the value of the body's top-level "payload",
 * jv_member_span), when the body is stored, its echo is long enough and equals the one kept for
 * the dispatch (kept now when there is none): *body then points at *owned (malloc'd, the caller
 * frees it) and *echo_at is the offset. Else nothing changes (*echo_at NULL): the row holds its
 * body whole. The bytes read back are the body's whatever span is cut out, so a body that is not
 * JSON costs at most a useless run_echoes row. Inside the caller's transaction (s->mu held); a
 * failure undoes the caller's savepoint. */
static crcr_err echo_apart(sqlite_store *s, const store_run_update *u, store_param *body,
                           store_param *echo_at, char **owned)
{
    *echo_at = (store_param){.kind = STORE_P_INT, .is_null = true};
    *owned = NULL;
    size_t off = 0, len = 0;
    if (body->is_null || body->len < SQ_ECHO_MIN ||
        !jv_member_span(body->blob, body->len, "payload", &off, &len) || len < SQ_ECHO_MIN)
        return CRCR_OK;
    const char *all = body->blob;
    echo_cmp c = {.p = all + off, .n = len};
    crcr_err err = sq_cached(
        s, SQ_ECHO_GET, "run_apply", "SELECT echo FROM run_echoes WHERE delivery_id=?1 AND repo=?2",
        ARGS(ARG_TEXT(u->key.delivery_id), ARG_TEXT(u->key.repo)), echo_cmp_row, &c);
    if (!err && !c.found) /* refs counts from 0: the row's trigger counts it */
        err =
            sq_cached(s, SQ_ECHO_PUT, "run_apply",
                      "INSERT INTO run_echoes(delivery_id, repo, refs, echo) VALUES (?1,?2,0,?3)",
                      ARGS(ARG_TEXT(u->key.delivery_id), ARG_TEXT(u->key.repo), ARG_BLOB(c.p, c.n)),
                      NULL, NULL);
    if (err || (c.found && !c.same))
        return err;
    size_t rest = body->len - off - len;
    char *cut = malloc(off + rest + 1); /* + 1: never malloc(0) */
    if (!cut)
        return CRCR_E_NOMEM;
    memcpy(cut, all, off);
    memcpy(cut + off, all + off + len, rest);
    body->blob = cut;
    body->len = off + rest;
    *owned = cut;
    *echo_at = (store_param){.kind = STORE_P_INT, .i = (int64_t)off};
    return CRCR_OK;
}

/* The end reason of a dispatch (one text column) into a char[16]; stops. */
static int ended_row(void *ctx, const store_row_source *s)
{
    char *out = ctx;
    const char *t = s->text(s->src, 0);
    snprintf(out, 16, "%s", t ? t : "");
    return 1;
}

/* One transition (store_run_apply's contract without the rate hit) inside the caller's
 * transaction (s->mu held). Writes nothing unless it returns CRCR_OK with !res->duplicate; on a
 * failure after a write the caller undoes its savepoint. */
static crcr_err run_apply_tx(sqlite_store *s, const store_run_update *u, store_effects_fn effects,
                             void *ctx, store_run_result *res, char *reason, size_t reasonsz)
{
    store_scalar dispatched = {.v = u->dispatched_at};
    if (!u->single_shot && !u->dispatched_at) {
        /* The dispatch record of a callback: this delivery was sent (or queued) to this repo. */
        crcr_err err = sq_cached(s, SQ_RUN_DISPATCH, "run_apply",
                                 "SELECT COALESCE(done_at, created_at) FROM outbox WHERE "
                                 "kind='dispatch' AND delivery_id=?1 AND lower(target)=lower(?2) "
                                 "LIMIT 1",
                                 ARGS(ARG_TEXT(u->key.delivery_id), ARG_TEXT(u->key.repo)),
                                 store_scalar_row, &dispatched);
        if (err)
            return err;
        if (!dispatched.found)
            return CRCR_E_NOT_FOUND;
    }
    /* The current state of this key. */
    run_prev prev = {0};
    crcr_err err = sq_cached(
        s, SQ_RUN_STATE, "run_apply",
        "SELECT " RUN_PREV_COLUMNS " FROM runs WHERE delivery_id=?1 AND repo=?2 AND run_id=?3 AND "
        "run_attempt=?4 AND job_name=?5 AND workflow_name=?6",
        ARGS(ARG_TEXT(u->key.delivery_id), ARG_TEXT(u->key.repo), ARG_TEXT(u->key.run_id),
             ARG_INT(u->key.run_attempt), ARG_TEXT(u->key.job_name ? u->key.job_name : ""),
             ARG_TEXT(u->key.workflow_name ? u->key.workflow_name : "")),
        run_prev_row, &prev);
    if (err)
        return err;
    /* Whether a newer dispatch ended this one (§3.12): the single writer orders this read with
     * every supersession. */
    err = sq_cached(s, SQ_RUN_ENDED, "run_apply",
                    "SELECT reason FROM dispatch_ends WHERE delivery_id=?1 AND repo=?2",
                    ARGS(ARG_TEXT(u->key.delivery_id), ARG_TEXT(u->key.repo)), ended_row,
                    prev.dispatch_ended);
    if (err)
        return err;

    run_outcome o = run_state_next(&prev, u, dispatched.v, res, reason, reasonsz);
    if (o == RUN_INVALID)
        return CRCR_E_STATE;
    if (o == RUN_DUPLICATE)
        return CRCR_OK;

    store_param params[RUN_UPSERT_PARAMS + 1]; /* + echo_at */
    run_row_params(u, res, params);
    char *cut = NULL;
    err = echo_apart(s, u, &params[RUN_UPSERT_PAYLOAD_PARAM], &params[RUN_UPSERT_PARAMS], &cut);
    if (!err)
        err = sq_cached(
            s, SQ_RUN_UPSERT, "run_apply",
            "INSERT INTO runs(" RUN_UPSERT_COLUMNS ", echo_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,"
            "?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26) ON "
            "CONFLICT(delivery_id, repo, run_id, run_attempt, workflow_name, job_name) DO "
            "UPDATE SET state=excluded.state, level=excluded.level, "
            "conclusion=excluded.conclusion, completed_at=excluded.completed_at, "
            "ended=excluded.ended, "
            "exec_ms=excluded.exec_ms, test_passed=excluded.test_passed, "
            "test_failed=excluded.test_failed, test_skipped=excluded.test_skipped, "
            "artifact_url=COALESCE(excluded.artifact_url, runs.artifact_url), "
            "details_url=COALESCE(excluded.details_url, runs.details_url), "
            "payload=excluded.payload, echo_at=excluded.echo_at, updated_at=excluded.updated_at",
            params, RUN_UPSERT_PARAMS + 1, NULL, NULL);
    free(cut);
    if (!err && effects) {
        store_new_job jobs[RUN_EFFECTS_MAX];
        size_t n = 0;
        err = effects(ctx, res, jobs, RUN_EFFECTS_MAX, &n);
        if (!err)
            err = sq_insert_jobs(s, u->key.delivery_id, jobs, n, u->now);
    }
    return err;
}

/* A callback's request of a group commit: its rate hit (when asked), then its transition. A
 * counted hit stays counted when the transition is refused or fails, as with a separate
 * store_rate_hit: the transition runs in a savepoint of its own. */
static crcr_err run_apply_group(sqlite_store *s, sq_group_req *r)
{
    store_run_call *a = r->arg;
    const store_run_update *u = a->u;
    store_run_result_init(a->res); /* an apply run again starts afresh (sq_group_req) */
    if (u->rate_limit > 0) {
        bool allowed = false;
        crcr_err err = rate_hit_tx(s, u->key.repo, u->now, u->rate_window_ms, u->rate_limit,
                                   &allowed, &a->res->retry_after_ms);
        if (err || !allowed) {
            a->res->rate_limited = !err;
            return err;
        }
        if (sq_exec(s, "SAVEPOINT run") != CRCR_OK)
            return CRCR_E_STORE;
        r->keep = true;
    }
    crcr_err err = run_apply_tx(s, u, a->effects, a->ctx, a->res, a->reason, a->reasonsz);
    if (r->keep) {
        if (err)
            sq_exec(s, "ROLLBACK TO run");
        sq_exec(s, "RELEASE run");
    }
    return err;
}

/* Concurrent transitions share one durable commit (sq_group_commit). */
static crcr_err sq_run_apply(store *st, store_run_call *call)
{
    sq_group_req me = {.apply = run_apply_group, .arg = call};
    crcr_err err = sq_group_commit(sq_store(st), &me);
    if (err == CRCR_E_STORE) { /* nothing of it is stored */
        call->res->duplicate = call->res->rate_limited = false;
    }
    return err;
}

/* ---- runs read back ---- */

static crcr_err sq_runs_for_sha(store *st, const char *head_sha, const char *repo, store_rows *rows)
{
    /* The latest row per (workflow, job): highest run_attempt, then last update. */
    return sq_locked(
        sq_store(st), SQ_ONCE, "runs",
        "SELECT " RUN_COLUMNS_NO_PAYLOAD ", " SQ_RUN_PAYLOAD(
            "r") " FROM runs r WHERE head_sha=?1 AND repo=?2 AND "
                 "NOT EXISTS (SELECT 1 FROM runs o WHERE o.head_sha=r.head_sha AND "
                 "o.repo=r.repo AND o.workflow_name IS r.workflow_name AND "
                 "o.job_name=r.job_name AND (o.updated_at>r.updated_at OR "
                 "(o.updated_at=r.updated_at AND o.rowid>r.rowid))) ORDER BY workflow_name, "
                 "job_name",
        ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo)), store_listing_row, rows, NULL);
}

static crcr_err sq_zombies(store *st, int64_t started_before, int limit, store_rows *rows)
{
    return sq_locked(sq_store(st), SQ_ONCE, "zombies",
                     "SELECT " RUN_COLUMNS_NO_PAYLOAD ", " SQ_RUN_PAYLOAD(
                         "runs") " FROM runs WHERE state='in_progress' AND "
                                 "started_at < ?1 AND ended IS NULL ORDER BY started_at LIMIT ?2",
                     ARGS(ARG_INT(started_before), ARG_INT(limit)), store_listing_row, rows, NULL);
}

/* The WHERE clause names only the filters that are set, so that SQLite picks the matching index
 * (runs_hud for a repo, runs_pr for a PR, runs_sha for a sha): a generic
 * "(?1 IS NULL OR repo=?1)" form makes it scan every row, and reading `updated_at` (stored after
 * the payload) walks each row's overflow pages. A repo listing without payloads is answered from
 * the covering index runs_hud alone (named, so that no other index is walked for a row of tens
 * of KB per hit). Parameters keep their numbers whatever is left out. */
static crcr_err sq_list_runs(store *st, const store_run_filter *f, store_rows *rows)
{
    /* A sha or PR narrows more than a repo does: runs_sha / runs_pr then serve, named because
     * the planner otherwise walks runs_hud to save the final sort. */
    bool hud_index = f->no_payload && f->repo && !f->head_sha && !f->pr_number;
    const char *index = hud_index      ? " INDEXED BY runs_hud"
                        : f->head_sha  ? " INDEXED BY runs_sha"
                        : f->pr_number ? " INDEXED BY runs_pr"
                                       : "";
    char sql[2048];
    size_t n = 0;
    n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                          "SELECT " RUN_COLUMNS_NO_PAYLOAD ", %s FROM runs%s WHERE 1=1",
                          f->no_payload ? "NULL" : SQ_RUN_PAYLOAD("runs"), index);
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

    /* Every value is bound; those the SQL leaves out are not read (?4, the kind, is written). */
    return sq_listing(sq_store(st), "list_runs", sql,
                      ARGS(ARG_TEXT(f->repo), ARG_INT(f->pr_number), ARG_TEXT(f->head_sha),
                           ARG_INT(f->kind), ARG_INT(f->since), ARG_INT(run_list_limit(f)),
                           ARG_INT(run_list_offset(f))),
                      store_listing_row, rows);
}

/* ---- labels wanted, refused callbacks ---- */

static crcr_err sq_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    return sq_locked(sq_store(st), SQ_ONCE, "exec",
                     "INSERT INTO labels_wanted(head_sha, repo, created_at) VALUES (?1,?2,?3) "
                     "ON CONFLICT(head_sha, repo) DO UPDATE SET created_at=excluded.created_at",
                     ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo), ARG_INT(now)), NULL, NULL, NULL);
}

static crcr_err sq_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since,
                              store_scalar *mark)
{
    return sq_locked(sq_store(st), SQ_ONCE, "exec",
                     "SELECT 1 FROM labels_wanted WHERE head_sha=?1 AND repo=?2 AND "
                     "created_at >= ?3",
                     ARGS(ARG_TEXT(head_sha), ARG_TEXT(repo), ARG_INT(since)), store_scalar_row,
                     mark, NULL);
}

static crcr_err sq_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    return sq_locked(sq_store(st), SQ_ONCE, "rejected",
                     "INSERT INTO callback_rejections(repo, at, status) VALUES (?1, ?2, ?3)",
                     ARGS(ARG_TEXT(repo), ARG_INT(now), ARG_INT(status)), NULL, NULL, NULL);
}

static crcr_err sq_callback_rejections(store *st, const char *repo, int64_t since, store_scalar *n)
{
    return sq_listing(sq_store(st), "rejections",
                      "SELECT count(*) FROM callback_rejections WHERE repo=?1 AND at>=?2",
                      ARGS(ARG_TEXT(repo), ARG_INT(since)), store_scalar_row, n);
}

/* ---- dispatch records, identity pins, budgets ---- */

/* A read on the callback path on the hot reader (store_sqlite.h): it never waits for the
 * writer's commit or a listing. Its statement is kept in *kept, prepared at first use; without
 * readers (in-memory stores) it runs on the writer's connection, prepared for the call. */
static crcr_err hot_read(sqlite_store *s, sqlite3_stmt **kept, const char *op, const char *sql,
                         const store_param *args, int n, store_row_fn row, void *ctx)
{
    bool hot = s->rdb[SQ_HOT_READER] != NULL;
    sqlite3 *db = hot ? s->rdb[SQ_HOT_READER] : s->db;
    pthread_mutex_t *mu = hot ? &s->rmu[SQ_HOT_READER] : &s->mu;
    pthread_mutex_lock(mu);
    crcr_err err;
    if (!hot)
        err = sq_run(db, op, sql, args, n, row, ctx);
    else if (!*kept && sqlite3_prepare_v2(db, sql, -1, kept, NULL) != SQLITE_OK)
        err = sq_fail(db, op);
    else
        err = sq_step(db, *kept, op, args, n, row, ctx);
    pthread_mutex_unlock(mu);
    return err;
}

static crcr_err sq_dispatch_get(store *st, const char *delivery_id, const char *repo,
                                store_dispatch_read *d)
{
    sqlite_store *s = sq_store(st);
    return hot_read(s, &s->hot_dispatch, "dispatch_get",
                    "SELECT " DISPATCH_COLUMNS ", CASE WHEN ?3 THEN d.payload END FROM outbox o "
                    "JOIN deliveries d ON d.delivery_id=o.delivery_id WHERE o.kind='dispatch' AND "
                    "o.delivery_id=?1 AND lower(o.target)=lower(?2) LIMIT 1",
                    ARGS(ARG_TEXT(delivery_id), ARG_TEXT(repo), ARG_INT(d->with_payload ? 1 : 0)),
                    store_dispatch_row, d);
}

#define IDENTITY_GET "SELECT " IDENTITY_COLUMNS " FROM repo_identity WHERE repo=?1"

/* A pinned name (every callback but a repository's first) is checked on the hot reader: the
 * writer's lock, held through each group commit's fsync, was the longest wait of a callback. */
static crcr_err sq_identity_pin(store *st, const char *repo, int64_t now, store_pin_check *c)
{
    sqlite_store *s = sq_store(st);
    crcr_err err = hot_read(s, &s->hot_identity, "identity_pin", IDENTITY_GET, ARGS(ARG_TEXT(repo)),
                            store_pin_row, c);
    if (err || c->found)
        return err;
    /* Not pinned when read: look again and pin under the writer's lock, so that of two first
     * callbacks racing, the second sees the first one's pin. */
    pthread_mutex_lock(&s->mu);
    err = sq_run(s->db, "identity_pin", IDENTITY_GET, ARGS(ARG_TEXT(repo)), store_pin_row, c);
    if (!err && !c->found && *c->repository_id && *c->owner_id) {
        err = sq_run(
            s->db, "identity_pin",
            "INSERT INTO repo_identity(repo, repository_id, owner_id, pinned_at, "
            "last_seen_at) VALUES (?1,?2,?3,?4,?4) ON CONFLICT(repo) DO NOTHING",
            ARGS(ARG_TEXT(repo), ARG_TEXT(c->repository_id), ARG_TEXT(c->owner_id), ARG_INT(now)),
            NULL, NULL);
        c->found = !err;
        c->outcome = STORE_PIN_MATCH;
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

static crcr_err sq_identity_list(store *st, store_rows *rows)
{
    return sq_locked(sq_store(st), SQ_ONCE, "identity_list",
                     "SELECT " IDENTITY_COLUMNS " FROM repo_identity ORDER BY lower(repo)", NULL, 0,
                     store_listing_row, rows, NULL);
}

static crcr_err sq_identity_reset(store *st, const char *repo, int64_t *n)
{
    int changes = 0;
    crcr_err err =
        sq_locked(sq_store(st), SQ_ONCE, "exec", "DELETE FROM repo_identity WHERE repo=?1",
                  ARGS(ARG_TEXT(repo)), NULL, NULL, &changes);
    *n = changes;
    return err;
}

static crcr_err sq_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                               int64_t expires_at, bool *allowed)
{
    int changes = 0;
    /* One statement: a new budget starts at `amount`; an existing one grows only within limit. */
    crcr_err err =
        sq_locked(sq_store(st), SQ_ONCE, "budget_take",
                  "INSERT INTO budgets(name, used, expires_at) VALUES (?1, ?2, ?3) ON "
                  "CONFLICT(name) DO UPDATE SET used=used+excluded.used WHERE "
                  "used+excluded.used <= ?4",
                  ARGS(ARG_TEXT(name), ARG_INT(amount), ARG_INT(expires_at), ARG_INT(limit)), NULL,
                  NULL, &changes);
    *allowed = !err && changes > 0;
    return err;
}

/* This file's operations (store_impl.h). */
const store_run_ops SQ_RUN_OPS = {
    .run_apply = sq_run_apply,
    .rate_hit = sq_rate_hit,
    .runs_for_sha = sq_runs_for_sha,
    .zombies = sq_zombies,
    .list_runs = sq_list_runs,
    .wanted_set = sq_wanted_set,
    .wanted_get = sq_wanted_get,
    .callback_rejected = sq_callback_rejected,
    .callback_rejections = sq_callback_rejections,
    .dispatch_get = sq_dispatch_get,
    .identity_pin = sq_identity_pin,
    .identity_list = sq_identity_list,
    .identity_reset = sq_identity_reset,
    .budget_take = sq_budget_take,
};
