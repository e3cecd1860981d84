/*
 * store_pg_supersede.c - the PostgreSQL store's side of supersession and Depends-On pairs
 * (§3.12, §3.13; store.h's store_supersede and store_pair_redispatch), the same statements as
 * the SQLite store's, inside the caller's transaction.
 *
 * Several instances: a supersession holds the PR's advisory lock exclusively for its transaction
 * (pg_lock_pr), a callback's transition of a run of that PR holds it shared (store_pg_runs.c).
 * So a callback either commits before the supersession's statements run (READ COMMITTED: they
 * see its row and end it) or reads dispatch_ends after the supersession committed: no run is
 * left open, and two dispatches of one PR are superseded one after the other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jw.h"
#include "store_pg.h"
#include "vocab.h"

/* Side-effect jobs one ended run may add (a cancelled check run). */
#define PG_ENDED_JOBS_MAX 4

crcr_err pg_lock_pr(pgx *x, int64_t pr, bool exclusive)
{
    if (pr <= 0)
        return CRCR_OK;
    return pg_query(
        x,
        exclusive
            ? "SELECT 1 FROM (SELECT pg_advisory_xact_lock(" PG_PR_LOCK_KEY("$1") ")) l"
            : "SELECT 1 FROM (SELECT pg_advisory_xact_lock_shared(" PG_PR_LOCK_KEY("$1") ")) l",
        ARGS(ARG_INT(pr)), NULL, NULL, NULL);
}

crcr_err pg_insert_pairs(pgx *x, const char *delivery_id, int64_t pr, const store_new_job *jobs,
                         size_t n, int64_t now)
{
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].pair_number <= 0 || ob_kind_parse(jobs[i].kind) != OB_KIND_DISPATCH)
            continue;
        crcr_err e = pg_query(x,
                              "INSERT INTO pairs(delivery_id, repo, pr_number, number, "
                              "created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                              ARGS(ARG_TEXT(delivery_id), ARG_TEXT(jobs[i].target), ARG_INT(pr),
                                   ARG_INT(jobs[i].pair_number), ARG_INT(now)),
                              NULL, NULL, NULL);
        if (e)
            return e;
    }
    return CRCR_OK;
}

/* Ends the in-progress runs of dispatch `old` to `repo`, a batch at a time. */
static crcr_err end_runs(pgx *x, const store_ended_dispatch *old, const char *repo, const char *by,
                         store_supersede *sup, int64_t now)
{
    store_ended_runs *l = malloc(sizeof(*l));
    if (!l)
        return CRCR_E_NOMEM;
    crcr_err e = CRCR_OK;
    do {
        l->n = 0;
        e = pg_query(
            x,
            "SELECT " RUN_COLUMNS_NO_PAYLOAD ", NULL::bytea, seq FROM runs WHERE "
            "delivery_id=$1 AND lower(repo)=lower($2) AND state='in_progress' AND "
            "ended IS NULL LIMIT $3",
            ARGS(ARG_TEXT(old->delivery_id), ARG_TEXT(repo), ARG_INT(CRCR_SUPERSEDE_BATCH)),
            store_ended_run_row, l, NULL);
        for (size_t i = 0; i < l->n && !e; i++) {
            store_ended_run *r = &l->v[i];
            int64_t changed = 0;
            e = pg_query(x,
                         "UPDATE runs SET state='completed', conclusion='cancelled', "
                         "completed_at=$1, exec_ms=CASE WHEN started_at IS NULL THEN NULL ELSE "
                         "GREATEST($1 - started_at, 0) END, ended=$2, payload=NULL, "
                         "updated_at=$1 WHERE seq=$3 AND state='in_progress' AND ended IS NULL",
                         ARGS(ARG_INT(now), ARG_TEXT(sup->reason), ARG_INT(r->rowid)), NULL, NULL,
                         &changed);
            if (e || changed == 0)
                continue;
            sup->runs++;
            if (!sup->effects || r->cut)
                continue;
            store_run_row view;
            store_ended_run_view(r, sup->reason, now, &view);
            store_new_job jobs[PG_ENDED_JOBS_MAX];
            size_t n = 0;
            e = sup->effects(sup->ctx, &view, old->pair, old->pair_len, jobs, PG_ENDED_JOBS_MAX,
                             &n);
            if (!e)
                e = pg_insert_jobs(x, by, jobs, n > PG_ENDED_JOBS_MAX ? 0 : n, now);
        }
    } while (!e && l->n == CRCR_SUPERSEDE_BATCH);
    free(l);
    return e;
}

static crcr_err end_dispatch(pgx *x, const store_ended_dispatch *old, const char *repo, int64_t pr,
                             const char *by, store_supersede *sup, int64_t now)
{
    crcr_err e = pg_query(x,
                          "INSERT INTO dispatch_ends(delivery_id, repo, pr_number, reason, "
                          "by_delivery, ended_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT "
                          "DO NOTHING",
                          ARGS(ARG_TEXT(old->delivery_id), ARG_TEXT(repo), ARG_INT(pr),
                               ARG_TEXT(sup->reason), ARG_TEXT(by), ARG_INT(now)),
                          NULL, NULL, NULL);
    if (e)
        return e;
    sup->dispatches++;
    /* A newer commit (or pair) makes an unsent dispatch of the older one wasted CI: withdrawn. A
     * closed PR's are still sent (see store_sqlite_supersede.c). */
    if (end_reason_parse(sup->reason) != END_REASON_SUPERSEDED)
        return end_runs(x, old, repo, by, sup, now);
    int64_t withdrawn = 0;
    e = pg_query(x,
                 "UPDATE outbox SET state='withdrawn', done_at=$1, lease_until=NULL WHERE "
                 "kind='dispatch' AND delivery_id=$2 AND lower(target)=lower($3) AND "
                 "state='queued'",
                 ARGS(ARG_INT(now), ARG_TEXT(old->delivery_id), ARG_TEXT(repo)), NULL, NULL,
                 &withdrawn);
    if (e)
        return e;
    sup->withdrawn += (int)withdrawn;
    return end_runs(x, old, repo, by, sup, now);
}

/* The head (sha, pair) of the latest dispatch of a PR to a repository (dispatch_heads). */
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

/* As SQLite's (store_sqlite_supersede.c): a dispatch at the head of the PR's latest dispatch to
 * the repository has nothing to end and costs one read. */
static crcr_err supersede_target(pgx *x, const char *by, int64_t pr, const char *head_sha,
                                 const store_new_job *job, store_supersede *sup, int64_t now)
{
    head_read head = {.sha = head_sha ? head_sha : "", .pair = job->pair_number};
    crcr_err e = pg_query(x,
                          "SELECT head_sha, pair_number FROM dispatch_heads WHERE pr_number=$1 "
                          "AND lower(repo)=lower($2)",
                          ARGS(ARG_INT(pr), ARG_TEXT(job->target)), head_row, &head, NULL);
    if (e || (!sup->any_sha && head.found && head.same))
        return e;
    store_ended_list l;
    for (;;) {
        memset(&l, 0, sizeof(l));
        e = pg_query(
            x,
            "SELECT " STORE_ENDED_COLUMNS " FROM outbox o JOIN deliveries d ON "
            "d.delivery_id=o.delivery_id LEFT JOIN pairs p ON p.delivery_id=o.delivery_id AND "
            "lower(p.repo)=lower(o.target) WHERE d.pr_number=$1 AND o.kind='dispatch' AND "
            "lower(o.target)=lower($2) AND o.delivery_id<>$3 AND NOT EXISTS (SELECT 1 FROM "
            "dispatch_ends e WHERE e.delivery_id=o.delivery_id AND lower(e.repo)=lower(o.target)) "
            "AND ($4::boolean OR d.head_sha IS DISTINCT FROM $5::text OR COALESCE(p.number, "
            "0)<>$6) "
            "ORDER BY o.id LIMIT $7",
            ARGS(ARG_INT(pr), ARG_TEXT(job->target), ARG_TEXT(by),
                 ARG_TEXT(sup->any_sha ? "true" : "false"), ARG_TEXT(head_sha),
                 ARG_INT(job->pair_number), ARG_INT(STORE_ENDED_MAX)),
            store_ended_row, &l, NULL);
        if (!e)
            e = l.err;
        for (size_t i = 0; i < l.n && !e; i++)
            e = end_dispatch(x, &l.v[i], job->target, pr, by, sup, now);
        size_t got = l.n;
        store_ended_list_free(&l);
        if (e || got < STORE_ENDED_MAX)
            break;
    }
    if (!e)
        e = pg_query(x,
                     "INSERT INTO dispatch_heads(pr_number, repo, head_sha, pair_number, "
                     "delivery_id, at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (pr_number, "
                     "lower(repo)) DO UPDATE SET head_sha=excluded.head_sha, "
                     "pair_number=excluded.pair_number, delivery_id=excluded.delivery_id, "
                     "at=excluded.at",
                     ARGS(ARG_INT(pr), ARG_TEXT(job->target), ARG_TEXT(head.sha),
                          ARG_INT(job->pair_number), ARG_TEXT(by), ARG_INT(now)),
                     NULL, NULL, NULL);
    return e;
}

/* The heads of several targets read at once: row i of the ordinality is job i. */
typedef struct heads_read {
    head_read *h;
    size_t n;
} heads_read;

static int heads_row(void *ctx, const store_row_source *s)
{
    heads_read *a = ctx;
    int64_t i = s->i64(s->src, 0, 0);
    if (i >= 1 && (uint64_t)i <= a->n) {
        head_read *h = &a->h[i - 1];
        const char *sha = s->text(s->src, 1);
        h->found = true;
        h->same = sha && strcmp(sha, h->sha) == 0 && s->i64(s->src, 2, -1) == h->pair;
    }
    return 0;
}

/* The JSON array of a fan-out's targets read in one statement at the most. */
#define PG_HEADS_JSON_MAX (1024u * 1024)

/* Reads the dispatch heads of every job's target in one statement (owned array of n, NULL when
 * there is no memory or the targets do not fit PG_HEADS_JSON_MAX: each target reads its own). */
static head_read *heads_of(pgx *x, int64_t pr, const char *head_sha, const store_new_job *jobs,
                           size_t n, crcr_err *err)
{
    *err = CRCR_OK;
    head_read *h = calloc(n, sizeof(*h));
    if (!h)
        return NULL;
    buf_t doc;
    buf_init(&doc, PG_HEADS_JSON_MAX);
    jw w;
    jw_init(&w, &doc);
    jw_arr(&w);
    for (size_t i = 0; i < n; i++) {
        h[i] = (head_read){.sha = head_sha ? head_sha : "", .pair = jobs[i].pair_number};
        jw_str(&w, jobs[i].target ? jobs[i].target : "");
    }
    jw_arr_end(&w);
    if (!w.err) {
        heads_read a = {h, n};
        *err = pg_query(x,
                        "SELECT t.i, h.head_sha, h.pair_number FROM json_array_elements_text($2::"
                        "json) WITH ORDINALITY AS t(repo, i) JOIN dispatch_heads h ON "
                        "h.pr_number=$1 AND lower(h.repo)=lower(t.repo)",
                        ARGS(ARG_INT(pr), ARG_TEXT(buf_cstr(&doc))), heads_row, &a, NULL);
    }
    buf_free(&doc);
    if (w.err || *err) {
        free(h);
        return NULL;
    }
    return h;
}

/* What pg_supersede does with each job's target. */
enum { TARGET_PASS, TARGET_HEAD };

/* Older dispatches one statement of pg_supersede reads for all its targets at most. More are
 * left to supersede_target, which pages through the rest target by target. */
#define PG_ENDED_BATCH_MAX 1024u

/* An older dispatch of one of the targets (job index `job`), in job then row order. */
typedef struct ended_hit {
    size_t job;
    bool runs; /* it has runs in progress */
    store_ended_dispatch d;
} ended_hit;

typedef struct ended_hits {
    ended_hit *v; /* owned, grown as rows come (store_rows_room): most fan-outs end nothing */
    size_t n, cap, n_jobs;
    crcr_err err;
} ended_hits;

/* Row: job index + 1, delivery id, body (the Depends-On record). */
static int ended_hit_row(void *ctx, const store_row_source *s)
{
    ended_hits *h = ctx;
    int64_t i = s->i64(s->src, 0, 0);
    if (h->n >= PG_ENDED_BATCH_MAX || i < 1 || (uint64_t)i > h->n_jobs)
        return 0; /* cannot be a row the store wrote */
    if (!store_rows_room((void **)&h->v, &h->cap, h->n, sizeof(*h->v), PG_ENDED_BATCH_MAX)) {
        h->err = CRCR_E_NOMEM;
        return 1;
    }
    ended_hit *e = &h->v[h->n];
    memset(e, 0, sizeof(*e));
    int r = store_ended_fill(&e->d, s, 1, 2);
    if (r < 0) {
        h->err = CRCR_E_NOMEM;
        return 1;
    }
    if (r == 0) {
        e->job = (size_t)(i - 1);
        e->runs = false;
        h->n++;
    }
    return 0;
}

/* Row: the index of a hit with runs in progress. */
static int hit_runs_row(void *ctx, const store_row_source *s)
{
    ended_hits *h = ctx;
    int64_t k = s->i64(s->src, 0, -1);
    if (k >= 0 && (uint64_t)k < h->n)
        h->v[k].runs = true;
    return 0;
}

/* [[delivery, target, k], ...] of the hits: the older dispatch, its target as the job names it
 * (what dispatch_ends records), its index. */
static crcr_err hits_json(const ended_hits *h, const store_new_job *jobs, buf_t *doc)
{
    jw w;
    jw_init(&w, doc);
    jw_arr(&w);
    for (size_t k = 0; k < h->n; k++) {
        jw_arr(&w);
        jw_str(&w, h->v[k].d.delivery_id);
        jw_str(&w, jobs[h->v[k].job].target ? jobs[h->v[k].job].target : "");
        jw_int(&w, (int64_t)k);
        jw_arr_end(&w);
    }
    jw_arr_end(&w);
    return w.err ? CRCR_E_NOMEM : CRCR_OK;
}

/* [[i + 1, repo, pair], ...] of the jobs marked TARGET_HEAD; how many, or 0 with *err set. */
static size_t targets_json(const store_new_job *jobs, const unsigned char *m, size_t n, buf_t *doc,
                           crcr_err *err)
{
    jw w;
    jw_init(&w, doc);
    jw_arr(&w);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (m[i] != TARGET_HEAD)
            continue;
        jw_arr(&w);
        jw_int(&w, (int64_t)i + 1);
        jw_str(&w, jobs[i].target ? jobs[i].target : "");
        jw_int(&w, jobs[i].pair_number);
        jw_arr_end(&w);
        k++;
    }
    jw_arr_end(&w);
    if (w.err) {
        *err = CRCR_E_NOMEM;
        return 0;
    }
    return k;
}

/* Ends the older dispatches `h` found, as end_dispatch would one by one: their dispatch_ends
 * rows in one statement, their queued rows withdrawn in one, then the runs in progress of those
 * that have some (one statement says which), dispatch by dispatch. */
static crcr_err end_hits(pgx *x, ended_hits *h, const store_new_job *jobs, int64_t pr,
                         const char *by, store_supersede *sup, int64_t now)
{
    buf_t doc;
    buf_init(&doc, PG_HEADS_JSON_MAX);
    crcr_err e = hits_json(h, jobs, &doc);
    if (!e)
        e = pg_query(x,
                     "INSERT INTO dispatch_ends(delivery_id, repo, pr_number, reason, "
                     "by_delivery, ended_at) SELECT t.e->>0, t.e->>1, $2, $3, $4, $5 FROM "
                     "jsonb_array_elements($1::jsonb) AS t(e) ON CONFLICT DO NOTHING",
                     ARGS(ARG_TEXT(buf_cstr(&doc)), ARG_INT(pr), ARG_TEXT(sup->reason),
                          ARG_TEXT(by), ARG_INT(now)),
                     NULL, NULL, NULL);
    if (!e)
        sup->dispatches += (int)h->n;
    /* A newer commit (or pair) makes an unsent dispatch of the older one wasted CI: withdrawn
     * (as end_dispatch). */
    if (!e && end_reason_parse(sup->reason) == END_REASON_SUPERSEDED) {
        int64_t withdrawn = 0;
        e = pg_query(x,
                     "UPDATE outbox o SET state='withdrawn', done_at=$2, lease_until=NULL FROM "
                     "jsonb_array_elements($1::jsonb) AS t(e) WHERE o.kind='dispatch' AND "
                     "o.delivery_id=t.e->>0 AND lower(o.target)=lower(t.e->>1) AND "
                     "o.state='queued'",
                     ARGS(ARG_TEXT(buf_cstr(&doc)), ARG_INT(now)), NULL, NULL, &withdrawn);
        sup->withdrawn += (int)withdrawn;
    }
    if (!e)
        e = pg_query(x,
                     "SELECT DISTINCT (t.e->>2)::bigint FROM jsonb_array_elements($1::jsonb) AS "
                     "t(e) JOIN runs r ON r.delivery_id=t.e->>0 AND lower(r.repo)=lower(t.e->>1) "
                     "WHERE r.state='in_progress' AND r.ended IS NULL",
                     ARGS(ARG_TEXT(buf_cstr(&doc))), hit_runs_row, h, NULL);
    buf_free(&doc);
    for (size_t k = 0; k < h->n && !e; k++)
        if (h->v[k].runs)
            e = end_runs(x, &h->v[k].d, jobs[h->v[k].job].target, by, sup, now);
    return e;
}

/*
 * The heads of a fan-out's targets are read in one statement first: a target whose latest
 * dispatch for the PR is at this head (the same sha and pair) has nothing to end and is passed
 * over, as supersede_target would after its own read (which changes nothing, so a target named
 * twice is judged alike). For the others one statement reads the older dispatches to end, which
 * are ended together (end_hits), and one writes their new heads. Target by target, as
 * supersede_target does it, a PR's first fan-out to 100 repositories made 300 round trips in its
 * ingest's transaction (43 ms of its 202 in a statement log), and a new commit's fan-out ~600
 * (the 202 after 128-200 ms, SQLite's after 18-26); now 3 and 6, and one more per older
 * dispatch with runs in progress, each of those ended as before (end_runs).
 */
crcr_err pg_supersede(pgx *x, const char *by, int64_t pr, const char *head_sha,
                      const store_new_job *jobs, size_t n, store_supersede *sup, int64_t now)
{
    crcr_err e = CRCR_OK;
    head_read *heads = NULL;
    if (n > 1 && !sup->any_sha) {
        heads = heads_of(x, pr, head_sha, jobs, n, &e);
        if (e)
            return e;
    }
    /* The hits' array grows as they come (store_rows_room): made up front for PG_ENDED_BATCH_MAX
     * (172 KB), it took 0.44-0.46 ms of each warm fan-out's ingest, which ended nothing. */
    unsigned char *m = heads ? calloc(n, 1) : NULL;
    ended_hits h = {.n_jobs = n};
    if (!m) { /* one by one: a single target, any_sha, or no memory for the batch */
        for (size_t i = 0; i < n && !e; i++)
            if (ob_kind_parse(jobs[i].kind) == OB_KIND_DISPATCH &&
                !(heads && heads[i].found && heads[i].same))
                e = supersede_target(x, by, pr, head_sha, &jobs[i], sup, now);
        free(heads);
        free(m);
        return e;
    }
    for (size_t i = 0; i < n; i++)
        m[i] = ob_kind_parse(jobs[i].kind) != OB_KIND_DISPATCH || (heads[i].found && heads[i].same)
                   ? TARGET_PASS
                   : TARGET_HEAD;
    free(heads);
    buf_t doc;
    buf_init(&doc, PG_HEADS_JSON_MAX);
    size_t todo = targets_json(jobs, m, n, &doc, &e);
    if (todo) /* an older dispatch named by two targets (one spelt otherwise) is ended once */
        e = pg_query(
            x,
            "SELECT i, delivery_id, body FROM (SELECT DISTINCT ON (o.id) (t.e->>0)::bigint AS i, "
            "o.id, o.delivery_id, o.body FROM jsonb_array_elements($2::jsonb) AS t(e) JOIN outbox "
            "o ON o.kind='dispatch' AND lower(o.target)=lower(t.e->>1) AND o.delivery_id<>$3 JOIN "
            "deliveries d ON d.delivery_id=o.delivery_id AND d.pr_number=$1 LEFT JOIN pairs p ON "
            "p.delivery_id=o.delivery_id AND lower(p.repo)=lower(o.target) WHERE NOT EXISTS "
            "(SELECT 1 FROM dispatch_ends de WHERE de.delivery_id=o.delivery_id AND "
            "lower(de.repo)=lower(o.target)) AND (d.head_sha IS DISTINCT FROM $4::text OR "
            "COALESCE(p.number, 0)<>(t.e->>2)::bigint) ORDER BY o.id, (t.e->>0)::bigint) s "
            "ORDER BY i, id LIMIT $5",
            ARGS(ARG_INT(pr), ARG_TEXT(buf_cstr(&doc)), ARG_TEXT(by), ARG_TEXT(head_sha),
                 ARG_INT(PG_ENDED_BATCH_MAX)),
            ended_hit_row, &h, NULL);
    if (!e)
        e = h.err;
    if (!e && h.n)
        e = end_hits(x, &h, jobs, pr, by, sup, now);
    if (!e && h.n >= PG_ENDED_BATCH_MAX) { /* more than one statement reads: the rest one by one */
        for (size_t i = 0; i < n && !e; i++)
            if (m[i] == TARGET_HEAD)
                e = supersede_target(x, by, pr, head_sha, &jobs[i], sup, now);
    } else if (!e && todo) { /* the last of a target named twice wins, as one by one */
        e = pg_query(x,
                     "INSERT INTO dispatch_heads(pr_number, repo, head_sha, pair_number, "
                     "delivery_id, at) SELECT DISTINCT ON (lower(t.e->>1)) $1, t.e->>1, $3, "
                     "(t.e->>2)::bigint, $4, $5 FROM jsonb_array_elements($2::jsonb) AS t(e) "
                     "ORDER BY lower(t.e->>1), (t.e->>0)::bigint DESC ON CONFLICT (pr_number, "
                     "lower(repo)) DO UPDATE SET head_sha=excluded.head_sha, "
                     "pair_number=excluded.pair_number, delivery_id=excluded.delivery_id, "
                     "at=excluded.at",
                     ARGS(ARG_INT(pr), ARG_TEXT(buf_cstr(&doc)), ARG_TEXT(head_sha ? head_sha : ""),
                          ARG_TEXT(by), ARG_INT(now)),
                     NULL, NULL, NULL);
    }
    for (size_t k = 0; k < h.n; k++)
        free(h.v[k].d.pair);
    free(h.v);
    buf_free(&doc);
    free(m);
    return e;
}

/* ---- store_pair_redispatch ---- */

typedef struct redispatch_args {
    const char *repo, *base_id;
    int64_t number, now;
    const store_new_job *job;
    store_supersede *sup;
    store_pair_hit *hits;
    size_t max, n;
} redispatch_args;

/* One upstream PR: under its lock, the pair is looked at again (a supersession may have ended it
 * since the listing), then the copied delivery, its row and pair, the supersession. */
static crcr_err redispatch_one(pgx *x, redispatch_args *a, const store_pair_src *src,
                               store_pair_hit *hit)
{
    memset(hit, 0, sizeof(*hit));
    hit->pr_number = src->pr;
    if (!store_pair_delivery_id(a->base_id, src->pr, hit->delivery_id, sizeof(hit->delivery_id)))
        return CRCR_E_INVALID;
    crcr_err e = pg_lock_pr(x, src->pr, true);
    store_scalar known = {0};
    if (!e)
        e = pg_query(x, "SELECT 1::bigint FROM deliveries WHERE delivery_id=$1",
                     ARGS(ARG_TEXT(hit->delivery_id)), store_scalar_row, &known, NULL);
    if (e)
        return e;
    if (known.found) {
        hit->duplicate = true;
        return CRCR_OK;
    }
    int64_t copied = 0;
    e = pg_query(x,
                 "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, "
                 "head_sha, ref, received_at, payload, payload_bytes, status) SELECT $1, event, "
                 "action, upstream_repo, pr_number, head_sha, ref, $2, payload, payload_bytes, "
                 "'queued' FROM deliveries d WHERE d.delivery_id=$3 AND NOT EXISTS (SELECT 1 "
                 "FROM dispatch_ends e WHERE e.delivery_id=$3 AND lower(e.repo)=lower($4)) ON "
                 "CONFLICT (delivery_id) DO NOTHING",
                 ARGS(ARG_TEXT(hit->delivery_id), ARG_INT(a->now), ARG_TEXT(src->delivery_id),
                      ARG_TEXT(a->repo)),
                 NULL, NULL, &copied);
    if (e)
        return e;
    if (copied == 0) { /* gone (retention), or ended meanwhile: nothing to send */
        hit->delivery_id[0] = '\0';
        return CRCR_OK;
    }
    char sha[CRCR_SHA_MAX + 8] = "";
    e = pg_query(x, "SELECT head_sha FROM deliveries WHERE delivery_id=$1",
                 ARGS(ARG_TEXT(hit->delivery_id)), store_sha_text_row, sha, NULL);
    if (!e)
        e = pg_insert_jobs(x, hit->delivery_id, a->job, 1, a->now);
    if (!e)
        e = pg_insert_pairs(x, hit->delivery_id, src->pr, a->job, 1, a->now);
    if (!e) /* any_sha: every older dispatch of the PR to the repository */
        e = pg_supersede(x, hit->delivery_id, src->pr, sha, a->job, 1, a->sup, a->now);
    return e;
}

static crcr_err op_pair_redispatch(pgx *x, void *arg)
{
    redispatch_args *a = arg;
    a->n = 0;
    store_supersede_uncount(a->sup);
    store_pair_src *v = calloc(a->max ? a->max : 1, sizeof(*v));
    if (!v)
        return CRCR_E_NOMEM;
    store_pair_srcs l = {v, 0, a->max};
    crcr_err e =
        pg_query(x,
                 "SELECT p.delivery_id, p.pr_number FROM pairs p WHERE "
                 "lower(p.repo)=lower($1) AND p.number=$2 AND NOT EXISTS (SELECT 1 FROM "
                 "dispatch_ends e WHERE e.delivery_id=p.delivery_id AND "
                 "lower(e.repo)=lower(p.repo)) ORDER BY p.pr_number, p.created_at DESC, "
                 "p.seq DESC",
                 ARGS(ARG_TEXT(a->repo), ARG_INT(a->number)), store_pair_src_row, &l, NULL);
    for (size_t i = 0; i < l.n && !e; i++) {
        e = redispatch_one(x, a, &l.v[i], &a->hits[a->n]);
        if (!e && a->hits[a->n].delivery_id[0])
            a->n++;
    }
    free(v);
    return e;
}

crcr_err pg_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
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
                         .max = max};
    crcr_err e = pg_with_tx(pg_store_of(st), "pair_redispatch", op_pair_redispatch, &a);
    *n = e ? 0 : a.n;
    if (e)
        store_supersede_uncount(sup);
    return e;
}
