/*
 * store_sqlite_supersede.c - the SQLite store's side of supersession and Depends-On pairs
 * (§3.12, §3.13; store.h's store_supersede and store_pair_redispatch): the older dispatches of a
 * PR that a new one ends, their runs in progress, their queued rows, the pairs a dispatch was
 * made with, and the re-dispatch of a PR when its paired downstream PR moves. Everything runs
 * inside the caller's transaction (s->mu held; the ingest's savepoint of a group commit), so a
 * supersession is exactly as durable as the dispatch that causes it. One writer (s->mu) orders
 * it with every callback's transition: a callback is applied either before (its run is then
 * ended here) or after (it finds dispatch_ends).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store_sqlite.h"
#include "vocab.h"

/* Side-effect jobs one ended run may add (a cancelled check run). */
#define SQ_ENDED_JOBS_MAX 4

crcr_err sq_insert_pairs(sqlite_store *s, const char *delivery_id, int64_t pr,
                         const store_new_job *jobs, size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].pair_number <= 0 || ob_kind_parse(jobs[i].kind) != OB_KIND_DISPATCH)
            continue;
        crcr_err err =
            sq_cached(s, SQ_INS_PAIR, "pairs",
                      "INSERT INTO pairs(delivery_id, repo, pr_number, number, created_at) VALUES "
                      "(?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                      ARGS(ARG_TEXT(delivery_id), ARG_TEXT(jobs[i].target), ARG_INT(pr),
                           ARG_INT(jobs[i].pair_number), ARG_INT(now)),
                      NULL, NULL);
        if (err)
            return err;
    }
    return CRCR_OK;
}

/* Ends the in-progress runs of dispatch `old` to `repo` (store_supersede), a batch at a time,
 * and inserts what each one causes under the new delivery `by`. */
static crcr_err end_runs(sqlite_store *s, const store_ended_dispatch *old, const char *repo,
                         const char *by, store_supersede *sup, int64_t now)
{
    store_ended_runs *l = malloc(sizeof(*l));
    if (!l)
        return CRCR_E_NOMEM;
    crcr_err err = CRCR_OK;
    do {
        l->n = 0;
        err = sq_cached(
            s, SQ_ENDED_RUNS, "supersede",
            "SELECT " RUN_COLUMNS_NO_PAYLOAD ", NULL, rowid FROM runs WHERE "
            "delivery_id=?1 AND repo=?2 AND state='in_progress' AND ended IS NULL "
            "LIMIT ?3",
            ARGS(ARG_TEXT(old->delivery_id), ARG_TEXT(repo), ARG_INT(CRCR_SUPERSEDE_BATCH)),
            store_ended_run_row, l);
        for (size_t i = 0; i < l->n && !err; i++) {
            store_ended_run *e = &l->v[i];
            err = sq_cached(
                s, SQ_END_RUN, "supersede",
                "UPDATE runs SET state='completed', conclusion='cancelled', "
                "completed_at=?1, exec_ms=CASE WHEN started_at IS NULL THEN NULL "
                "WHEN ?1 > started_at THEN ?1 - started_at ELSE 0 END, ended=?2, "
                "payload=NULL, echo_at=NULL, updated_at=?1 WHERE rowid=?3 AND state='in_progress' "
                "AND ended IS NULL",
                ARGS(ARG_INT(now), ARG_TEXT(sup->reason), ARG_INT(e->rowid)), NULL, NULL);
            if (err || sqlite3_changes(s->db) == 0)
                continue;
            sup->runs++;
            if (!sup->effects || e->cut)
                continue;
            store_run_row view;
            store_ended_run_view(e, sup->reason, now, &view);
            store_new_job jobs[SQ_ENDED_JOBS_MAX];
            size_t n = 0;
            err = sup->effects(sup->ctx, &view, old->pair, old->pair_len, jobs, SQ_ENDED_JOBS_MAX,
                               &n);
            if (!err)
                err = sq_insert_jobs(s, by, jobs, n > SQ_ENDED_JOBS_MAX ? 0 : n, now);
        }
    } while (!err && l->n == CRCR_SUPERSEDE_BATCH);
    free(l);
    return err;
}

/* Ends dispatch `old` of PR `pr` to `repo` for the new delivery `by`. */
static crcr_err end_dispatch(sqlite_store *s, const store_ended_dispatch *old, const char *repo,
                             int64_t pr, const char *by, store_supersede *sup, int64_t now)
{
    crcr_err err = sq_cached(s, SQ_INS_END, "supersede",
                             "INSERT INTO dispatch_ends(delivery_id, repo, pr_number, reason, "
                             "by_delivery, ended_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT "
                             "DO NOTHING",
                             ARGS(ARG_TEXT(old->delivery_id), ARG_TEXT(repo), ARG_INT(pr),
                                  ARG_TEXT(sup->reason), ARG_TEXT(by), ARG_INT(now)),
                             NULL, NULL);
    if (err)
        return err;
    sup->dispatches++;
    /* A newer commit (or pair) makes an unsent dispatch of the older one wasted CI: withdrawn. A
     * closed PR's are still sent, as upstream relays a PR's events in order (their runs, if any,
     * are recorded as ended). */
    if (end_reason_parse(sup->reason) != END_REASON_SUPERSEDED)
        return end_runs(s, old, repo, by, sup, now);
    if (old->id > 0) /* its row is known: by its key, not a walk of its delivery's rows */
        err = sq_cached(s, SQ_WITHDRAW_ID, "supersede",
                        "UPDATE outbox SET state='withdrawn', done_at=?1, lease_until=NULL WHERE "
                        "id=?2 AND state='queued'",
                        ARGS(ARG_INT(now), ARG_INT(old->id)), NULL, NULL);
    else
        err = sq_cached(s, SQ_WITHDRAW, "supersede",
                        "UPDATE outbox SET state='withdrawn', done_at=?1, lease_until=NULL WHERE "
                        "kind='dispatch' AND delivery_id=?2 AND lower(target)=lower(?3) AND "
                        "state='queued'",
                        ARGS(ARG_INT(now), ARG_TEXT(old->delivery_id), ARG_TEXT(repo)), NULL, NULL);
    if (err)
        return err;
    sup->withdrawn += sqlite3_changes(s->db);
    return end_runs(s, old, repo, by, sup, now);
}

/* The head (sha, pair) of the latest dispatch of a PR to a repository, as dispatch_heads keeps
 * it: found, and whether it equals the new dispatch's. */
typedef struct head_read {
    const char *sha;
    int64_t pair;
    bool found, same;
} head_read;

static int head_row(void *ctx, const store_row_source *s)
{
    head_read *h = ctx;
    const char *sha = s->text(s->src, 0);
    h->found = true;
    h->same = sha && strcmp(sha, h->sha) == 0 && s->i64(s->src, 1, -1) == h->pair;
    return 1;
}

/* Reads the head of `job`'s target into *head (set up for the new head_sha and pair). */
static crcr_err head_get(sqlite_store *s, int64_t pr, const char *head_sha,
                         const store_new_job *job, head_read *head)
{
    *head = (head_read){.sha = head_sha ? head_sha : "", .pair = job->pair_number};
    return sq_cached(s, SQ_HEAD_GET, "supersede",
                     "SELECT head_sha, pair_number FROM dispatch_heads WHERE pr_number=?1 AND "
                     "repo=?2",
                     ARGS(ARG_INT(pr), ARG_TEXT(job->target)), head_row, head);
}

/* Writes the new head of `job`'s target: the dispatch `by` at `sha` and the job's pair. */
static crcr_err head_set(sqlite_store *s, int64_t pr, const char *sha, const store_new_job *job,
                         const char *by, int64_t now)
{
    return sq_cached(s, SQ_HEAD_SET, "supersede",
                     "INSERT INTO dispatch_heads(pr_number, repo, head_sha, pair_number, "
                     "delivery_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(pr_number, "
                     "repo) DO UPDATE SET head_sha=excluded.head_sha, "
                     "pair_number=excluded.pair_number, delivery_id=excluded.delivery_id, "
                     "at=excluded.at",
                     ARGS(ARG_INT(pr), ARG_TEXT(job->target), ARG_TEXT(sha),
                          ARG_INT(job->pair_number), ARG_TEXT(by), ARG_INT(now)),
                     NULL, NULL);
}

/* The supersession of one target (a dispatch row of the new delivery). dispatch_heads keeps the
 * head of the PR's latest dispatch to the repository: every older dispatch of another head was
 * ended when that head came, so a dispatch of the same head has nothing to end and costs one
 * read (a PR re-dispatched at one head thousands of times, as the benchmarks do, never scans). */
static crcr_err supersede_target(sqlite_store *s, const char *by, int64_t pr, const char *head_sha,
                                 const store_new_job *job, store_supersede *sup, int64_t now)
{
    head_read head;
    crcr_err err = head_get(s, pr, head_sha, job, &head);
    if (err || (!sup->any_sha && head.found && head.same))
        return err;
    store_ended_list l;
    do {
        memset(&l, 0, sizeof(l));
        /* The older, not yet ended dispatches of this PR to this repository (deliveries_pr, then
         * outbox_delivery), of another head or pair unless every one is wanted. */
        err = sq_cached(
            s, SQ_ENDED_DISPATCHES, "supersede",
            "SELECT " STORE_ENDED_COLUMNS " FROM outbox o JOIN deliveries d ON "
            "d.delivery_id=o.delivery_id LEFT JOIN pairs p ON p.delivery_id=o.delivery_id AND "
            "p.repo=o.target WHERE d.pr_number=?1 AND o.kind='dispatch' AND "
            "lower(o.target)=lower(?2) AND o.delivery_id<>?3 AND NOT EXISTS (SELECT 1 FROM "
            "dispatch_ends e WHERE e.delivery_id=o.delivery_id AND e.repo=o.target) AND (?4 OR "
            "d.head_sha IS NOT ?5 OR COALESCE(p.number, 0)<>?6) ORDER BY o.id LIMIT ?7",
            ARGS(ARG_INT(pr), ARG_TEXT(job->target), ARG_TEXT(by), ARG_INT(sup->any_sha ? 1 : 0),
                 ARG_TEXT(head_sha), ARG_INT(job->pair_number), ARG_INT(STORE_ENDED_MAX)),
            store_ended_row, &l);
        if (!err)
            err = l.err;
        for (size_t i = 0; i < l.n && !err; i++)
            err = end_dispatch(s, &l.v[i], job->target, pr, by, sup, now);
        size_t got = l.n;
        store_ended_list_free(&l);
        if (got < STORE_ENDED_MAX)
            break;
    } while (!err);
    if (!err)
        err = head_set(s, pr, head.sha, job, by, now);
    return err;
}

/* The PR's older dispatches not ended yet, read once for a fan-out (pr_open_row). */
#define SQ_PR_OPEN_MAX 4096u

typedef struct open_dispatch {
    char *target; /* owned */
    int64_t pair; /* its pair's number, 0: none */
    bool other_sha, done;
    store_ended_dispatch d;
} open_dispatch;

typedef struct open_list {
    open_dispatch *v; /* owned, grown as rows come (store_rows_room) */
    size_t n, cap;
    const char *head_sha;
    crcr_err err;
} open_list;

/* Row: id, target, delivery id, body, head sha, pair number. */
static int pr_open_row(void *ctx, const store_row_source *s)
{
    open_list *l = ctx;
    const char *target = s->text(s->src, 1);
    if (l->n >= SQ_PR_OPEN_MAX || !target)
        return 0;
    if (!store_rows_room((void **)&l->v, &l->cap, l->n, sizeof(*l->v), SQ_PR_OPEN_MAX)) {
        l->err = CRCR_E_NOMEM;
        return 1;
    }
    open_dispatch *o = &l->v[l->n];
    memset(o, 0, sizeof(*o));
    int r = store_ended_fill(&o->d, s, 2, 3);
    if (r > 0)
        return 0;
    if (r < 0 || !(o->target = strdup(target))) {
        free(o->d.pair);
        l->err = CRCR_E_NOMEM;
        return 1;
    }
    o->d.id = s->i64(s->src, 0, 0);
    const char *sha = s->text(s->src, 4);
    /* d.head_sha IS NOT the new head (NULL equals NULL, as in supersede_target's query) */
    o->other_sha = (!sha != !l->head_sha) || (sha && l->head_sha && strcmp(sha, l->head_sha) != 0);
    o->pair = s->i64(s->src, 5, 0);
    l->n++;
    return 0;
}

static void open_list_free(open_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].target);
        free(l->v[i].d.pair);
    }
    free(l->v);
}

/* Order of open_list rows: by target (as SQLite's NOCASE compares: ASCII letters folded), then
 * by row id. */
static int open_cmp(const void *a, const void *b)
{
    const open_dispatch *x = *(open_dispatch *const *)a, *y = *(open_dispatch *const *)b;
    int c = strcasecmp(x->target, y->target);
    return c ? c : (x->d.id > y->d.id) - (x->d.id < y->d.id);
}

/* A fan-out's targets: the PR's older dispatches not yet ended are read once (deliveries_pr, then
 * outbox_delivery) and matched to the targets here, instead of one read per target, each of
 * which walked the PR's whole history (a new head's fan-out to 100 repositories, 4 earlier ones
 * open: 100 walks of 400 rows). Then each target as supersede_target: its matches (another head
 * or pair) ended in row order, its head written. More than SQ_PR_OPEN_MAX open dispatches, or a
 * single target, or every one wanted (any_sha): supersede_target for each. */
static crcr_err supersede_fan_out(sqlite_store *s, const char *by, int64_t pr, const char *head_sha,
                                  const store_new_job *jobs, size_t n, store_supersede *sup,
                                  int64_t now, bool *done)
{
    *done = false;
    /* First the heads, as supersede_target reads them: a target at this head (a PR dispatched
     * again at one head, as the ingest benchmarks do thousands of times) has nothing to end, and
     * a fan-out whose targets all are reads nothing more. */
    bool *need = calloc(n, sizeof(*need));
    if (!need)
        return CRCR_OK; /* no memory for it: one target at a time */
    size_t needy = 0;
    crcr_err err = CRCR_OK;
    for (size_t i = 0; i < n && !err; i++) {
        if (ob_kind_parse(jobs[i].kind) != OB_KIND_DISPATCH)
            continue;
        head_read head;
        err = head_get(s, pr, head_sha, &jobs[i], &head);
        need[i] = !(head.found && head.same);
        needy += need[i];
    }
    if (err || needy == 0) {
        *done = !err;
        free(need);
        return err;
    }
    /* The list grows as its rows come (store_rows_room), not made up front for SQ_PR_OPEN_MAX
     * (~800 KB, cleared) for a new commit, which usually finds a few older dispatches. */
    open_list l = {.head_sha = head_sha};
    err = sq_cached(
        s, SQ_PR_OPEN_DISPATCHES, "supersede",
        "SELECT o.id, o.target, o.delivery_id, o.body, d.head_sha, COALESCE(p.number, 0) FROM "
        "deliveries d JOIN outbox o ON o.delivery_id=d.delivery_id AND o.kind='dispatch' LEFT "
        "JOIN pairs p ON p.delivery_id=o.delivery_id AND p.repo=o.target WHERE d.pr_number=?1 "
        "AND o.delivery_id<>?2 AND NOT EXISTS (SELECT 1 FROM dispatch_ends e WHERE "
        "e.delivery_id=o.delivery_id AND e.repo=o.target) ORDER BY o.id LIMIT ?3",
        ARGS(ARG_INT(pr), ARG_TEXT(by), ARG_INT(SQ_PR_OPEN_MAX)), pr_open_row, &l);
    if (!err)
        err = l.err;
    open_dispatch **by_target = NULL;
    if (!err && l.n < SQ_PR_OPEN_MAX) {
        by_target = calloc(l.n ? l.n : 1, sizeof(*by_target));
        if (!by_target) { /* no memory for it: one target at a time */
            open_list_free(&l);
            free(need);
            return CRCR_OK;
        }
        *done = true;
        for (size_t k = 0; k < l.n; k++)
            by_target[k] = &l.v[k];
        qsort(by_target, l.n, sizeof(*by_target), open_cmp);
        for (size_t i = 0; i < n && !err; i++) {
            const store_new_job *job = &jobs[i];
            if (!need[i])
                continue;
            /* the first row of this target, then its others in row order */
            size_t lo = 0, hi = l.n;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcasecmp(by_target[mid]->target, job->target) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            for (size_t k = lo;
                 k < l.n && !err && strcasecmp(by_target[k]->target, job->target) == 0; k++) {
                open_dispatch *o = by_target[k];
                if (o->done || !(o->other_sha || o->pair != job->pair_number))
                    continue;
                o->done = true; /* a target named twice ends it once */
                err = end_dispatch(s, &o->d, job->target, pr, by, sup, now);
            }
            if (!err)
                err = head_set(s, pr, head_sha ? head_sha : "", job, by, now);
        }
    }
    free(by_target);
    open_list_free(&l);
    free(need);
    return err;
}

crcr_err sq_supersede(sqlite_store *s, const char *by, int64_t pr, const char *head_sha,
                      const store_new_job *jobs, size_t n, store_supersede *sup, int64_t now)
{
    crcr_err err = CRCR_OK;
    bool done = false;
    if (n > 1 && !sup->any_sha)
        err = supersede_fan_out(s, by, pr, head_sha, jobs, n, sup, now, &done);
    for (size_t i = 0; i < n && !err && !done; i++) {
        if (ob_kind_parse(jobs[i].kind) == OB_KIND_DISPATCH)
            err = supersede_target(s, by, pr, head_sha, &jobs[i], sup, now);
    }
    return err;
}

/* ---- store_pair_redispatch ---- */

typedef struct redispatch_args {
    const char *repo, *base_id;
    int64_t number, now;
    const store_new_job *job;
    store_supersede *sup;
    store_pair_hit *hits;
    size_t max, *n;
} redispatch_args;

/* One upstream PR of a pair re-dispatch: the copied delivery, its dispatch row and pair, the
 * supersession. hit->delivery_id is left empty when the source delivery is gone (retention),
 * hit->duplicate set when the new one existed (a redelivered push). */
static crcr_err redispatch_one(sqlite_store *s, const redispatch_args *a, const store_pair_src *src,
                               store_pair_hit *hit)
{
    memset(hit, 0, sizeof(*hit));
    hit->pr_number = src->pr;
    if (!store_pair_delivery_id(a->base_id, src->pr, hit->delivery_id, sizeof(hit->delivery_id)))
        return CRCR_E_INVALID;
    store_scalar known = {0};
    crcr_err err = sq_run(s->db, "pair_redispatch", "SELECT 1 FROM deliveries WHERE delivery_id=?1",
                          ARGS(ARG_TEXT(hit->delivery_id)), store_scalar_row, &known);
    if (err)
        return err;
    if (known.found) {
        hit->duplicate = true;
        return CRCR_OK;
    }
    err = sq_run(s->db, "pair_redispatch",
                 "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, "
                 "head_sha, ref, received_at, payload, payload_bytes, status) SELECT ?1, event, "
                 "action, upstream_repo, pr_number, head_sha, ref, ?2, payload, payload_bytes, "
                 "'queued' FROM deliveries WHERE delivery_id=?3",
                 ARGS(ARG_TEXT(hit->delivery_id), ARG_INT(a->now), ARG_TEXT(src->delivery_id)),
                 NULL, NULL);
    if (err)
        return err;
    if (sqlite3_changes(s->db) == 0) { /* its delivery is gone (retention): nothing to send */
        hit->delivery_id[0] = '\0';
        return CRCR_OK;
    }
    char sha[CRCR_SHA_MAX + 8] = "";
    err = sq_run(s->db, "pair_redispatch", "SELECT head_sha FROM deliveries WHERE delivery_id=?1",
                 ARGS(ARG_TEXT(hit->delivery_id)), store_sha_text_row, sha);
    if (!err)
        err = sq_insert_jobs(s, hit->delivery_id, a->job, 1, a->now);
    if (!err)
        err = sq_insert_pairs(s, hit->delivery_id, src->pr, a->job, 1, a->now);
    if (!err) /* any_sha: every older dispatch of the PR to the repository */
        err = sq_supersede(s, hit->delivery_id, src->pr, sha, a->job, 1, a->sup, a->now);
    return err;
}

static crcr_err redispatch_apply(sqlite_store *s, sq_group_req *r)
{
    redispatch_args *a = r->arg;
    *a->n = 0; /* an apply run again counts afresh (sq_group_req) */
    store_supersede_uncount(a->sup);
    store_pair_src *v = calloc(a->max ? a->max : 1, sizeof(*v));
    if (!v)
        return CRCR_E_NOMEM;
    store_pair_srcs l = {v, 0, a->max};
    crcr_err err = sq_run(s->db, "pair_redispatch",
                          "SELECT p.delivery_id, p.pr_number FROM pairs p WHERE p.repo=?1 AND "
                          "p.number=?2 AND NOT EXISTS (SELECT 1 FROM dispatch_ends e WHERE "
                          "e.delivery_id=p.delivery_id AND e.repo=p.repo) ORDER BY p.pr_number, "
                          "p.created_at DESC, p.rowid DESC",
                          ARGS(ARG_TEXT(a->repo), ARG_INT(a->number)), store_pair_src_row, &l);
    for (size_t i = 0; i < l.n && !err; i++) {
        err = redispatch_one(s, a, &l.v[i], &a->hits[*a->n]);
        if (!err && a->hits[*a->n].delivery_id[0])
            (*a->n)++;
    }
    free(v);
    if (err) {
        *a->n = 0;
        store_supersede_uncount(a->sup);
    }
    return err;
}

crcr_err sq_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
                            int64_t now, const store_new_job *job, store_supersede *sup,
                            store_pair_hit *hits, size_t max, size_t *n)
{
    redispatch_args a = {.repo = repo,
                         .base_id = base_id,
                         .number = number,
                         .now = now,
                         .job = job,
                         .sup = sup,
                         .hits = hits,
                         .max = max,
                         .n = n};
    sq_group_req me = {.apply = redispatch_apply, .arg = &a};
    crcr_err err = sq_group_commit(sq_store(st), &me);
    if (err) {
        *n = 0;
        store_supersede_uncount(sup);
    }
    return err;
}
