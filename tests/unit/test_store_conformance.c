/*
 * One conformance suite for every store backend: the same tests run against SQLite always and
 * against PostgreSQL when CRCR_TEST_PG_URI is set (e.g. from scripts/pg-test-cluster.sh start).
 *
 * PostgreSQL runs happen in a private schema (crcr_conf_<pid>, selected with search_path in the
 * URI) that is dropped and re-created before each test, so a shared test database is never
 * touched outside it. Times are explicit arguments, so nothing sleeps; where PostgreSQL itself
 * decides when (a dead session's end, a NOTIFY), the tests await the event, with a bound that only
 * ends a broken test.
 * Worker threads never assert (cmocka is not thread-safe); they record, the test thread checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>

#include "clock.h"
#include "json.h"
#include "log.h"
#include "store.h"
#include "store_impl.h"
#include "store_pg.h"

#define THREADS 8

/* ---- backends ---- */

static bool g_pg;           /* the group being run */
static char g_uri[2048];    /* what store_open gets */
static char g_sqlite[256];  /* SQLite file of the current test */
static char g_schema[64];   /* PostgreSQL schema of this process */
static char g_app_name[64]; /* application_name of the store's PostgreSQL connections */

static void quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg; /* "drop cascades to ..." */
}

/* Runs SQL on the backend outside the store (test set-up and inspection only). Returns the
 * first column of the first row as an integer, or -1 when there is no row. */
static int64_t raw(const char *sql)
{
    int64_t v = -1;
    if (g_pg) {
        PGconn *c = PQconnectdb(g_uri);
        if (PQstatus(c) != CONNECTION_OK)
            fail_msg("raw connect: %s", PQerrorMessage(c));
        PQsetNoticeProcessor(c, quiet, NULL);
        PGresult *r = PQexec(c, sql);
        ExecStatusType t = PQresultStatus(r);
        if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK)
            fail_msg("raw '%s': %s", sql, PQresultErrorMessage(r));
        if (t == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
            v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        PQfinish(c);
        return v;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open(g_sqlite, &db) != SQLITE_OK)
        fail_msg("raw open: %s", sqlite3_errmsg(db));
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("raw '%s': %s", sql, sqlite3_errmsg(db));
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(q, 0);
    else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        fail_msg("raw '%s': %s", sql, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

static store *open_store(void)
{
    store *st = NULL;
    char err[512] = "";
    crcr_err e = store_open(g_uri, &st, err, sizeof(err));
    if (e != CRCR_OK)
        fail_msg("store_open(%s): %s (%s)", g_pg ? "postgresql" : "sqlite", crcr_strerror(e), err);
    return st;
}

static int setup(void **state)
{
    if (g_pg) {
        char sql[256];
        snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", g_schema,
                 g_schema);
        raw(sql);
    } else {
        const char *suffix[] = {"", "-wal", "-shm"};
        for (int i = 0; i < 3; i++) {
            char p[300];
            snprintf(p, sizeof(p), "%s%s", g_sqlite, suffix[i]);
            unlink(p);
        }
    }
    *state = open_store();
    return 0;
}

static int teardown(void **state)
{
    store_close(*state);
    return 0;
}

static int group_sqlite(void **state)
{
    g_pg = false;
    snprintf(g_sqlite, sizeof(g_sqlite), "/tmp/crcr-conformance-%ld.db", (long)getpid());
    snprintf(g_uri, sizeof(g_uri), "sqlite:%s", g_sqlite);
    return 0;
}

static int group_sqlite_done(void **state)
{
    const char *suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char p[300];
        snprintf(p, sizeof(p), "%s%s", g_sqlite, suffix[i]);
        unlink(p);
    }
    return 0;
}

static int group_pg(void **state)
{
    const char *base = getenv("CRCR_TEST_PG_URI");
    g_pg = true;
    snprintf(g_schema, sizeof(g_schema), "crcr_conf_%ld", (long)getpid());
    snprintf(g_app_name, sizeof(g_app_name), "crcr_conf_%ld", (long)getpid());
    /* The URI's own options win over crcr's defaults: a private schema and a name to find the
     * store's connections by. */
    snprintf(g_uri, sizeof(g_uri), "%s%soptions=-csearch_path%%3D%s&application_name=%s", base,
             strchr(base, '?') ? "&" : "?", g_schema, g_app_name);
    return 0;
}

static int group_pg_done(void **state)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE", g_schema);
    raw(sql);
    return 0;
}

/* ---- helpers ---- */

static crcr_err ingest_full(store *st, const char *id, int64_t at, const char *const *targets,
                            size_t n, const char *payload, size_t payload_len)
{
    store_new_job jobs[16];
    for (size_t i = 0; i < n; i++)
        jobs[i] = (store_new_job){.kind = "dispatch", .target = targets[i], .due_at = at};
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "opened",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = 42,
                        .head_sha = "sha42",
                        .ref = "refs/heads/x",
                        .received_at = at,
                        .payload = payload,
                        .payload_len = payload_len,
                        .status = "queued"};
    return store_ingest(st, &d, jobs, n);
}

static crcr_err ingest(store *st, const char *id, int64_t at, const char *const *targets, size_t n)
{
    return ingest_full(st, id, at, targets, n, "{\"x\":1}", 7);
}

typedef struct jrow {
    int64_t id, next_attempt_at, created_at, done_at;
    char kind[32], target[160], state[16], error[300], note[128], body[512];
    size_t body_len;
    int attempts;
    long last_status;
} jrow;

typedef struct dview {
    bool found;
    char delivery_id[128], event[32], action[32], upstream_repo[160], head_sha[64], ref[64],
        status[16];
    int64_t pr_number, received_at;
    size_t payload_bytes;
    char payload[1024];
    size_t payload_len;
    jrow jobs[64];
    size_t n;
} dview;

static void copy_str(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s ? s : "(null)");
}

static void on_delivery(void *ctx, const store_delivery_row *r, const char *payload, size_t len)
{
    dview *v = ctx;
    v->found = true;
    copy_str(v->delivery_id, sizeof(v->delivery_id), r->delivery_id);
    copy_str(v->event, sizeof(v->event), r->event);
    copy_str(v->action, sizeof(v->action), r->action);
    copy_str(v->upstream_repo, sizeof(v->upstream_repo), r->upstream_repo);
    copy_str(v->head_sha, sizeof(v->head_sha), r->head_sha);
    copy_str(v->ref, sizeof(v->ref), r->ref);
    copy_str(v->status, sizeof(v->status), r->status);
    v->pr_number = r->pr_number;
    v->received_at = r->received_at;
    v->payload_bytes = r->payload_bytes;
    v->payload_len = len < sizeof(v->payload) ? len : sizeof(v->payload);
    memcpy(v->payload, payload, v->payload_len);
}

static void on_job(void *ctx, const store_job_row *r)
{
    dview *v = ctx;
    if (v->n >= 64)
        return;
    jrow *j = &v->jobs[v->n++];
    j->id = r->id;
    copy_str(j->kind, sizeof(j->kind), r->kind);
    copy_str(j->target, sizeof(j->target), r->target);
    copy_str(j->state, sizeof(j->state), r->state);
    copy_str(j->error, sizeof(j->error), r->last_error);
    copy_str(j->note, sizeof(j->note), r->note);
    j->attempts = r->attempts;
    j->last_status = r->last_status;
    j->next_attempt_at = r->next_attempt_at;
    j->created_at = r->created_at;
    j->done_at = r->done_at;
    j->body_len = r->body_len < sizeof(j->body) ? r->body_len : sizeof(j->body);
    if (r->body_len)
        memcpy(j->body, r->body, j->body_len);
}

/* Reads a delivery and its rows; asserts that it exists. */
static dview *view(store *st, const char *id)
{
    dview *v = calloc(1, sizeof(*v));
    assert_int_equal(store_get_delivery(st, id, on_delivery, on_job, v), CRCR_OK);
    assert_true(v->found);
    return v;
}

static size_t count_kind(const dview *v, const char *kind)
{
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++)
        n += strcmp(v->jobs[i].kind, kind) == 0;
    return n;
}

typedef struct rrow {
    char delivery_id[64], repo[160], job_name[64], state[16], conclusion[32], workflow[64],
        event_type[32], details_url[128], artifact_url[128];
    char run_id_text[80]; /* as stored */
    int64_t run_id;       /* its number, for the numeric ones */
    int64_t run_attempt, pr_number, dispatched_at, started_at, completed_at, queue_ms, exec_ms,
        test_passed, test_failed, test_skipped;
    int level;
    size_t payload_len;
} rrow;

typedef struct rlist {
    rrow r[64];
    size_t n;
} rlist;

static void on_run(void *ctx, const store_run_row *r)
{
    rlist *l = ctx;
    if (l->n >= 64)
        return;
    rrow *o = &l->r[l->n++];
    copy_str(o->delivery_id, sizeof(o->delivery_id), r->delivery_id);
    copy_str(o->repo, sizeof(o->repo), r->repo);
    copy_str(o->job_name, sizeof(o->job_name), r->job_name);
    copy_str(o->state, sizeof(o->state), r->state);
    copy_str(o->conclusion, sizeof(o->conclusion), r->conclusion);
    copy_str(o->workflow, sizeof(o->workflow), r->workflow_name);
    copy_str(o->event_type, sizeof(o->event_type), r->event_type);
    copy_str(o->details_url, sizeof(o->details_url), r->details_url);
    copy_str(o->artifact_url, sizeof(o->artifact_url), r->artifact_url);
    copy_str(o->run_id_text, sizeof(o->run_id_text), r->run_id);
    o->run_id = strtoll(o->run_id_text, NULL, 10);
    o->run_attempt = r->run_attempt;
    o->pr_number = r->pr_number;
    o->level = r->level;
    o->dispatched_at = r->dispatched_at;
    o->started_at = r->started_at;
    o->completed_at = r->completed_at;
    o->queue_ms = r->queue_ms;
    o->exec_ms = r->exec_ms;
    o->test_passed = r->test_passed;
    o->test_failed = r->test_failed;
    o->test_skipped = r->test_skipped;
    o->payload_len = r->payload_len;
}

/* The text of run id `n` (run ids are text): a slot of a ring of 256, so that the updates of one
 * test can hold on to theirs. */
/* Per thread: the concurrency tests build their updates on 8 threads at once (a shared ring and
 * counter handed two threads one slot, and a run's id changed under it). */
static const char *rid(int64_t n)
{
    static _Thread_local char ring[256][24];
    static _Thread_local unsigned next;
    char *s = ring[next++ % 256];
    snprintf(s, sizeof(ring[0]), "%lld", (long long)n);
    return s;
}

static store_run_update upd(const char *delivery, const char *repo, int64_t run_id,
                            const char *status, const char *conclusion, int64_t now)
{
    return (store_run_update){
        .key = {.delivery_id = delivery,
                .repo = repo,
                .run_id = rid(run_id),
                .run_attempt = 1,
                .job_name = "build"},
        .status = status,
        .conclusion = conclusion,
        .event_type = "pull_request",
        .level = 3,
        .pr_number = 42,
        .head_sha = "sha42",
        .workflow_name = "ci",
        .details_url = "https://example.test/run",
        .test_passed = -1,
        .test_failed = -1,
        .test_skipped = -1,
        .payload = "{\"status\":1}",
        .payload_len = 12,
        .now = now,
    };
}

/* Effects: one check_run job; counts its calls. */
typedef struct effects_ctx {
    int calls;
    store_run_result seen;
} effects_ctx;

static crcr_err one_check_run(void *vctx, const store_run_result *res, store_new_job *jobs,
                              size_t max, size_t *n)
{
    effects_ctx *c = vctx;
    c->calls++;
    c->seen = *res;
    *n = 0;
    if (max < 1)
        return CRCR_OK;
    jobs[0] = (store_new_job){
        .kind = "check_run", .target = "pytorch/pytorch", .body = "{\"c\":1}", .body_len = 7};
    *n = 1;
    return CRCR_OK;
}

static crcr_err apply(store *st, const store_run_update *u, effects_ctx *c, store_run_result *res,
                      char *reason, size_t reasonsz)
{
    return store_run_apply(st, u, c ? one_check_run : NULL, c, res, reason, reasonsz);
}

/* ---- schema ---- */

static void open_records_the_schema_version_and_reopens(void **state)
{
    store *st = *state;
    assert_int_equal(raw("SELECT max(version) FROM schema_version"), CRCR_SCHEMA_VERSION);
    assert_int_equal(raw("SELECT count(*) FROM schema_version"), 1);
    store_close(st);
    *state = open_store(); /* an existing, current schema opens as it is */
    assert_int_equal(raw("SELECT count(*) FROM schema_version"), 1);
}

static void open_refuses_a_schema_newer_than_the_binary(void **state)
{
    store_close(*state);
    *state = NULL;
    raw("UPDATE schema_version SET version = 999");
    store *st = NULL;
    char err[512] = "";
    assert_int_equal(store_open(g_uri, &st, err, sizeof(err)), CRCR_E_CONFIG);
    assert_null(st);
    assert_non_null(strstr(err, "newer"));
    assert_non_null(strstr(err, "999"));
    raw("UPDATE schema_version SET version = 1"); /* an older store: upgraded at open */
    *state = open_store();
}

/* Schema 4 -> 5 keeps every run and turns run ids into text. PostgreSQL here (its runs of a
 * version-4 database are made by changing the column back); SQLite's upgrade is checked on a real
 * store of the first release (tests/e2e/test_operator.py, tests/data/stores/schema-v1.db). */
static void version_4_run_ids_become_text(void **state)
{
    if (!g_pg)
        skip();
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_run_result res;
    char why[128];
    store_run_update u = upd("d", "a/one", 42, "in_progress", NULL, 2000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    store_close(st);
    *state = NULL;
    raw("ALTER TABLE runs ALTER COLUMN run_id TYPE bigint USING run_id::bigint");
    raw("UPDATE schema_version SET version = 4");
    assert_int_equal(raw("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                         "'runs' AND column_name = 'run_id' AND data_type = 'bigint'"),
                     1);
    *state = st = open_store();
    assert_int_equal(raw("SELECT max(version) FROM schema_version"), CRCR_SCHEMA_VERSION);
    assert_int_equal(raw("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                         "'runs' AND column_name = 'run_id' AND data_type = 'text'"),
                     1);
    /* The run is there, under the same key: its completion applies to it. */
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    u = upd("d", "a/one", 42, "completed", "success", 3000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    rlist l = {0};
    assert_int_equal(store_list_runs(st, NULL, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].run_id_text, "42");
    assert_string_equal(l.r[0].state, "completed");
}

/* ---- deliveries and outbox ---- */

/* The delivery's payload of b[i] as store_claim_batch gives it: its own, or, for a later row of a
 * delivery, the payload of the earlier row of that delivery it names (then its own is empty). */
static const buf_t *claimed_payload(const store_job *b, size_t i)
{
    size_t h = b[i].payload_in;
    if (!h)
        return &b[i].payload;
    assert_in_range(h, 1, i); /* an earlier row */
    assert_int_equal(b[i].payload.len, 0);
    assert_int_equal(b[h - 1].payload_in, 0); /* which holds it */
    assert_string_equal(b[h - 1].delivery_id, b[i].delivery_id);
    return &b[h - 1].payload;
}

/* A claim of several deliveries' rows gives each row its own delivery's fields, whatever order
 * the rows come in, and each delivery's payload once: held by the first of its rows, named by the
 * others (a store reads a delivery once per claim). */
static void claimed_rows_carry_their_own_deliverys_payload(void **state)
{
    store *st = *state;
    const char *t3[] = {"a/one", "b/two", "c/three"}, *t2[] = {"d/four", "e/five"};
    char p1[3000], p2[3000];
    memset(p1, 'x', sizeof(p1));
    memset(p2, 'y', sizeof(p2));
    p2[0] = '\0'; /* bytes, not text */
    assert_int_equal(ingest_full(st, "d1", 1000, t3, 3, p1, sizeof(p1)), CRCR_OK);
    assert_int_equal(ingest_full(st, "d2", 1000, t2, 2, p2, sizeof(p2)), CRCR_OK);
    assert_int_equal(ingest_full(st, "d3", 1000, t2, 1, "{}", 2), CRCR_OK);
    store_job j[8];
    size_t got = 0;
    assert_int_equal(store_claim_batch(st, 2000, 60000, j, 8, &got), CRCR_OK);
    assert_int_equal(got, 6);
    size_t holders = 0;
    for (size_t i = 0; i < got; i++) {
        const char *want = strcmp(j[i].delivery_id, "d1") == 0   ? p1
                           : strcmp(j[i].delivery_id, "d2") == 0 ? p2
                                                                 : "{}";
        size_t n = want == p1 ? sizeof(p1) : want == p2 ? sizeof(p2) : 2;
        const buf_t *p = claimed_payload(j, i);
        if (p->len != n || memcmp(p->data, want, n) != 0)
            fail_msg("row %zu (%s, %s): a payload of %zu bytes, not its delivery's", i,
                     j[i].delivery_id, j[i].target, p->len);
        holders += j[i].payload_in == 0;
        assert_string_equal(j[i].event, "pull_request");
        assert_string_equal(j[i].head_sha, "sha42");
        assert_int_equal(j[i].pr_number, 42);
    }
    assert_int_equal(holders, 3); /* one row per delivery holds its payload */
    for (size_t i = 0; i < got; i++)
        store_job_free(&j[i]);
}

static void ingest_keeps_payload_bytes_exactly_and_refuses_a_known_delivery(void **state)
{
    store *st = *state;
    /* A NUL, invalid UTF-8 and every byte value: payloads are bytes, not text. */
    static const char tail[] = "\xff\xfe{\"a\":\"\xc3\x28\"}\0tail";
    char payload[256 + sizeof(tail) - 1];
    for (int i = 0; i < 256; i++)
        payload[i] = (char)i;
    memcpy(payload + 256, tail, sizeof(tail) - 1);
    const char *targets[] = {"a/one", "b/two"};
    assert_int_equal(ingest_full(st, "d1", 1000, targets, 2, payload, sizeof(payload)), CRCR_OK);
    dview *v = view(st, "d1");
    assert_int_equal(v->payload_len, sizeof(payload));
    assert_memory_equal(v->payload, payload, sizeof(payload));
    assert_int_equal(v->payload_bytes, sizeof(payload));
    assert_string_equal(v->event, "pull_request");
    assert_string_equal(v->action, "opened");
    assert_string_equal(v->upstream_repo, "pytorch/pytorch");
    assert_string_equal(v->head_sha, "sha42");
    assert_string_equal(v->ref, "refs/heads/x");
    assert_string_equal(v->status, "queued");
    assert_int_equal(v->pr_number, 42);
    assert_int_equal(v->received_at, 1000);
    assert_int_equal(v->n, 2);
    assert_true(v->jobs[0].id < v->jobs[1].id);
    assert_string_equal(v->jobs[0].target, "a/one");
    assert_string_equal(v->jobs[1].target, "b/two");
    assert_string_equal(v->jobs[0].state, "queued");
    assert_int_equal(v->jobs[0].attempts, 0);
    assert_int_equal(v->jobs[0].done_at, 0);
    free(v);

    const char *others[] = {"c/three", "d/four", "a/one"};
    /* One row, several (on PostgreSQL they go in one batched statement), one of them a target
     * the first had: the same answer, nothing written. */
    assert_int_equal(ingest(st, "d1", 2000, others, 1), CRCR_E_DUPLICATE);
    assert_int_equal(ingest(st, "d1", 2000, others, 2), CRCR_E_DUPLICATE);
    assert_int_equal(ingest(st, "d1", 2000, others, 3), CRCR_E_DUPLICATE);
    v = view(st, "d1");
    assert_int_equal(v->n, 2); /* nothing of the duplicate was written */
    assert_int_equal(v->received_at, 1000);
    assert_string_equal(v->jobs[0].target, "a/one");
    assert_string_equal(v->jobs[1].target, "b/two");
    free(v);
    assert_int_equal(store_get_delivery(st, "nope", on_delivery, on_job, NULL), CRCR_E_NOT_FOUND);
}

/* A known delivery on sessions that have run nothing yet (a store opened again): its refusal
 * stops the statements sent after its INSERT (on PostgreSQL the rows' INSERT and its first
 * preparation travel with it), and the next ingests on those sessions still work: a statement
 * whose preparation did not run is prepared again, not run by a name the session lacks. */
static void a_refused_duplicate_leaves_the_sessions_usable(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two"};
    assert_int_equal(ingest(st, "d", 1000, t, 2), CRCR_OK);
    store_close(st);
    *state = st = open_store();
    assert_int_equal(ingest(st, "d", 2000, t, 2), CRCR_E_DUPLICATE);
    assert_int_equal(ingest(st, "d", 2000, t, 1), CRCR_E_DUPLICATE);
    assert_int_equal(ingest(st, "e", 3000, t, 2), CRCR_OK);
    assert_int_equal(ingest(st, "f", 3000, t, 1), CRCR_OK);
    store_job j[8];
    size_t n = 0;
    assert_int_equal(store_claim_batch(st, 3000, 100, j, 8, &n), CRCR_OK);
    assert_int_equal(n, 5); /* d's two, e's two, f's one: nothing of the refused ingests */
    for (size_t i = 0; i < n; i++)
        store_job_free(&j[i]);
    dview *v = view(st, "d");
    assert_int_equal(v->n, 2);
    assert_int_equal(v->received_at, 1000);
    free(v);
}

/* What an operation's session says about itself (PostgreSQL): its server process and mode. */
typedef struct session_seen {
    int64_t pid;
    bool relaxed; /* the session set synchronous_commit itself (the pool's relaxed mode) */
    pg_op inner;  /* run while this session is held (NULL: none) */
    void *inner_arg;
} session_seen;

static int session_row(void *ctx, const store_row_source *s)
{
    session_seen *w = ctx;
    w->pid = s->i64(s->src, 0, 0);
    w->relaxed = s->i64(s->src, 1, -1) == 1;
    return 0;
}

static crcr_err look_at_session(pgx *x, void *arg)
{
    session_seen *w = arg;
    /* The test cluster's own default is off: the setting's source tells the modes apart. */
    crcr_err e = pg_query(x,
                          "SELECT pg_backend_pid()::bigint, (source = 'session')::integer FROM "
                          "pg_settings WHERE name = 'synchronous_commit'",
                          NULL, 0, session_row, w, NULL);
    if (!e && w->inner)
        e = w->inner(x, w->inner_arg);
    return e;
}

/* Runs op_b while the caller's session is held (pg_op: x is that session). */
static crcr_err look_while_held(pgx *x, void *arg)
{
    return pg_with_conn(x->s, "op_b", look_at_session, arg);
}

/* The pool's choice of session (acquire): an operation goes back to a free session that ran it
 * (its statements are prepared there) before another one in the same mode, and a relaxed
 * operation opens a session of its own while the pool has room instead of switching a durable
 * one. */
static void an_operation_returns_to_its_session_and_sessions_keep_their_mode(void **state)
{
    if (!g_pg)
        skip();
    pg_store *s = pg_store_of(*state);
    assert_true(s->n >= 4);
    session_seen b_nested = {0};
    session_seen a = {.inner = look_while_held, .inner_arg = &b_nested};
    /* op_a holds a session while op_b runs: op_b gets a second one. */
    assert_int_equal(pg_with_conn(s, "op_a", look_at_session, &a), CRCR_OK);
    assert_true(a.pid > 0 && b_nested.pid > 0);
    assert_true(a.pid != b_nested.pid);
    /* Both are free and durable now: each operation gets the session that ran it. */
    session_seen b = {0}, a2 = {0};
    assert_int_equal(pg_with_conn(s, "op_b", look_at_session, &b), CRCR_OK);
    assert_true(b.pid == b_nested.pid);
    assert_int_equal(pg_with_conn(s, "op_a", look_at_session, &a2), CRCR_OK);
    assert_true(a2.pid == a.pid);
    /* A relaxed operation leaves both durable sessions as they are: it opens a third. */
    session_seen r = {0}, a3 = {0}, b3 = {0};
    assert_int_equal(pg_with_conn_relaxed(s, "op_a", look_at_session, &r), CRCR_OK);
    assert_true(r.relaxed);
    assert_true(r.pid != a.pid && r.pid != b.pid);
    assert_int_equal(pg_with_conn(s, "op_a", look_at_session, &a3), CRCR_OK);
    assert_int_equal(pg_with_conn(s, "op_b", look_at_session, &b3), CRCR_OK);
    assert_true(a3.pid == a.pid && b3.pid == b.pid);
    assert_false(a3.relaxed);
    assert_false(b3.relaxed);
}

static void ingest_without_jobs_records_an_ignored_delivery(void **state)
{
    store *st = *state;
    store_delivery d = {.delivery_id = "ign",
                        .event = "issues",
                        .received_at = 5,
                        .payload = "{}",
                        .payload_len = 2,
                        .status = "ignored"};
    assert_int_equal(store_ingest(st, &d, NULL, 0), CRCR_OK);
    dview *v = view(st, "ign");
    assert_string_equal(v->status, "ignored");
    assert_string_equal(v->action, "(null)");
    assert_int_equal(v->pr_number, 0);
    assert_int_equal(v->n, 0);
    free(v);
}

static void claim_hands_out_due_rows_in_due_order_with_their_delivery(void **state)
{
    store *st = *state;
    const char *t1[] = {"a/one"};
    const char *t2[] = {"b/two"};
    assert_int_equal(ingest(st, "late", 2000, t1, 1), CRCR_OK);
    assert_int_equal(ingest(st, "early", 1000, t2, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 999, 60000, &j), CRCR_E_NOT_FOUND);
    int64_t due = 0;
    assert_int_equal(store_next_due(st, &due), CRCR_OK);
    assert_int_equal(due, 1000);

    assert_int_equal(store_claim(st, 5000, 60000, &j), CRCR_OK);
    assert_string_equal(j.kind, "dispatch");
    assert_string_equal(j.delivery_id, "early");
    assert_string_equal(j.target, "b/two");
    assert_string_equal(j.event, "pull_request");
    assert_int_equal(j.attempts, 0);
    assert_int_equal(j.payload.len, 7);
    assert_memory_equal(j.payload.data, "{\"x\":1}", 7);
    assert_int_equal(j.body.len, 0);
    assert_int_equal(j.pr_number, 42);
    assert_string_equal(j.head_sha, "sha42");
    store_job_free(&j);

    assert_int_equal(store_claim(st, 5000, 60000, &j), CRCR_OK);
    assert_string_equal(j.delivery_id, "late");
    store_job_free(&j);
    assert_int_equal(store_claim(st, 5000, 60000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_next_due(st, &due), CRCR_E_NOT_FOUND);
}

static void claim_takes_back_a_row_whose_lease_expired(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job j, again;
    assert_int_equal(store_claim(st, 1000, 100, &j), CRCR_OK);
    assert_int_equal(store_claim(st, 1050, 100, &again), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(st, 1100, 100, &again), CRCR_E_NOT_FOUND); /* lease until 1100 */
    assert_int_equal(store_claim(st, 1101, 100, &again), CRCR_OK);
    assert_int_equal(again.id, j.id);
    store_job_free(&j);
    store_job_free(&again);
}

/* Rows an ingest claims itself (store_new_job.claimed_id, the webhook's hand-over to the outbox)
 * are running under the lease given: no claim hands them out while it holds, the ids written
 * fence their finish as a claim's would, the others stay queued, and an unfinished claimed row
 * comes back once its lease ran out. */
/* A pull_request delivery of PR `pr` at `sha`, received at 1000, with `payload` (static). */
static store_delivery pr_delivery(const char *id, int64_t pr, const char *sha, const char *payload)
{
    return (store_delivery){.delivery_id = id,
                            .event = "pull_request",
                            .action = "opened",
                            .upstream_repo = "pytorch/pytorch",
                            .pr_number = pr,
                            .head_sha = sha,
                            .received_at = 1000,
                            .payload = payload,
                            .payload_len = strlen(payload),
                            .status = "queued"};
}

/* An ingest whose jobs name a dispatch target twice fails and stores nothing (the allowlist
 * never lists a repository twice): PostgreSQL's insert of a new delivery's rows has no conflict
 * check, so a repeat is an error there as on SQLite, not a row dropped in silence. The same
 * delivery with each target once is then stored whole. */
static void ingest_refuses_a_dispatch_target_twice(void **state)
{
    store *st = *state;
    store_new_job jobs[] = {
        {.kind = "dispatch", .target = "a/one", .due_at = 1000},
        {.kind = "dispatch", .target = "b/two", .due_at = 1000},
        {.kind = "hud_forward", .target = "a/one", .due_at = 1000},
        {.kind = "dispatch", .target = "a/one", .due_at = 2000},
    };
    store_delivery d = pr_delivery("d-twice", 8, "sha8", "{\"x\":3}");
    assert_int_equal(store_ingest(st, &d, jobs, 4), CRCR_E_STORE);
    dview none = {0};
    assert_int_equal(store_get_delivery(st, "d-twice", on_delivery, on_job, &none),
                     CRCR_E_NOT_FOUND);
    assert_int_equal(none.n, 0);
    assert_int_equal(store_ingest(st, &d, jobs, 3), CRCR_OK);
    dview *v = view(st, "d-twice");
    assert_true(v->found);
    assert_int_equal(v->n, 3);
    free(v);
}

/* Rows whose outcome is known before they are stored (store_new_job.done_state, a dry-run
 * dispatch) are written finished in the ingest: 1 attempt, done at their due time, never claimed
 * and counted as done. Among claimed and queued rows (PostgreSQL's batched insert), and alone
 * (PostgreSQL inserts a single row by a statement of its own). */
static void ingest_stores_known_outcomes_finished(void **state)
{
    store *st = *state;
    const char *targets[] = {"a/one", "b/two", "c/three", "d/four"};
    store_new_job jobs[4];
    for (size_t i = 0; i < 4; i++)
        jobs[i] = (store_new_job){.kind = "dispatch", .target = targets[i], .due_at = 1000};
    jobs[0].done_state = jobs[2].done_state = "dry_run";
    int64_t ids[4] = {0, 0, 0, 0};
    jobs[1].lease_until = jobs[2].lease_until = 61000; /* a known row is never claimed */
    jobs[1].claimed_id = &ids[1];
    jobs[2].claimed_id = &ids[2];
    store_delivery d = pr_delivery("d-known", 7, "sha7", "{\"x\":2}");
    assert_int_equal(store_ingest(st, &d, jobs, 4), CRCR_OK);
    assert_true(ids[1] > 0);
    assert_int_equal(ids[2], 0);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.dry_run, 2);
    assert_int_equal(s.running, 1);
    assert_int_equal(s.queued, 1);
    dview *v = view(st, "d-known");
    assert_int_equal(v->n, 4);
    for (size_t i = 0; i < 4; i++) {
        const jrow *j = &v->jobs[i];
        bool known = strcmp(j->target, "a/one") == 0 || strcmp(j->target, "c/three") == 0;
        assert_string_equal(j->state, known ? "dry_run" : i == 1 ? "running" : "queued");
        assert_int_equal(j->attempts, known ? 1 : 0);
        assert_int_equal(j->done_at, known ? 1000 : 0);
        assert_int_equal(j->last_status, 0);
        assert_string_equal(j->error, "(null)");
    }
    free(v);
    /* Only the queued row is claimable; once the leases expired, it and the claimed row. */
    store_job j;
    assert_int_equal(store_claim(st, 2000, 60000, &j), CRCR_OK);
    assert_string_equal(j.target, "d/four");
    store_job_free(&j);
    assert_int_equal(store_claim(st, 3000, 60000, &j), CRCR_E_NOT_FOUND);
    int again = 0;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(store_claim(st, 200000, 60000, &j), CRCR_OK);
        again |= strcmp(j.target, "b/two") == 0 ? 1 : strcmp(j.target, "d/four") == 0 ? 2 : 4;
        store_job_free(&j);
    }
    assert_int_equal(again, 3);
    assert_int_equal(store_claim(st, 200001, 60000, &j), CRCR_E_NOT_FOUND);

    /* One known row alone. */
    store_new_job one = {
        .kind = "dispatch", .target = "e/five", .due_at = 5000, .done_state = "dry_run"};
    d.delivery_id = "d-known-one";
    d.received_at = 5000;
    assert_int_equal(store_ingest(st, &d, &one, 1), CRCR_OK);
    v = view(st, "d-known-one");
    assert_int_equal(v->n, 1);
    assert_string_equal(v->jobs[0].state, "dry_run");
    assert_int_equal(v->jobs[0].attempts, 1);
    assert_int_equal(v->jobs[0].done_at, 5000);
    free(v);
    assert_int_equal(store_claim(st, 200002, 60000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.dry_run, 3);
    assert_int_equal(s.queued, 0);
    assert_int_equal(s.running, 2);
}

/* A row an ingest claimed for itself whose outcome never comes (its relay lost it) is handed
 * out again once its lease ran out, also when earlier claims found nothing left running: the
 * SQLite store looks for such rows only once a lease it knows of may have run out, so the lease
 * an ingest gives must count as one. Then nothing is left to take over. */
static void a_claim_takes_over_an_ingests_row_once_its_lease_ran_out(void **state)
{
    store *st = *state;
    store_job j, k;
    assert_int_equal(store_claim(st, 900, 60000, &j), CRCR_E_NOT_FOUND); /* nothing runs */
    /* Two rows: PostgreSQL claims an ingest's rows in its batched insert (a single row is
     * inserted queued, which store.h allows). */
    int64_t ids[2] = {0, 0};
    store_new_job jobs[] = {{.kind = "dispatch",
                             .target = "a/one",
                             .due_at = 1000,
                             .lease_until = 1500,
                             .claimed_id = &ids[0]},
                            {.kind = "dispatch",
                             .target = "b/two",
                             .due_at = 1000,
                             .lease_until = 1500,
                             .claimed_id = &ids[1]}};
    store_delivery d = pr_delivery("d-lost", 9, "sha9", "{\"x\":9}");
    assert_int_equal(store_ingest(st, &d, jobs, 2), CRCR_OK);
    assert_true(ids[0] > 0 && ids[1] > 0);
    assert_int_equal(store_claim(st, 1400, 60000, &j), CRCR_E_NOT_FOUND); /* the leases hold */
    /* One holder records its outcome in time; the other row is taken over after its lease. */
    store_job mine;
    assert_int_equal(store_job_claimed(&mine, &d, &jobs[1]), CRCR_OK);
    assert_int_equal(store_job_finish(st, &mine, "sent", 204, NULL, NULL, NULL, 0, 1450), CRCR_OK);
    store_job_free(&mine);
    assert_int_equal(store_claim(st, 1501, 60000, &j), CRCR_OK);
    assert_int_equal(j.id, ids[0]);
    assert_int_equal(j.lease_until, 61501);
    assert_int_equal(store_claim(st, 1502, 60000, &k), CRCR_E_NOT_FOUND);
    assert_int_equal(store_job_finish(st, &j, "sent", 204, NULL, NULL, NULL, 0, 1600), CRCR_OK);
    store_job_free(&j);
    assert_int_equal(store_claim(st, 99999, 60000, &k), CRCR_E_NOT_FOUND);
}

static void ingest_claims_the_rows_given_a_lease(void **state)
{
    store *st = *state;
    int64_t ids[3] = {0, 0, 0};
    const char *targets[] = {"a/one", "b/two", "c/three"};
    store_new_job jobs[3];
    for (size_t i = 0; i < 3; i++)
        jobs[i] = (store_new_job){.kind = "dispatch", .target = targets[i], .due_at = 1000};
    jobs[0].lease_until = jobs[1].lease_until = 61000;
    jobs[0].claimed_id = &ids[0];
    jobs[1].claimed_id = &ids[1];
    store_delivery d = pr_delivery("d-claimed", 7, "sha7", "{\"x\":2}");
    assert_int_equal(store_ingest(st, &d, jobs, 3), CRCR_OK);
    assert_true(ids[0] > 0);
    assert_true(ids[1] > 0);
    assert_true(ids[0] != ids[1]);
    assert_int_equal(ids[2], 0);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.running, 2);
    assert_int_equal(s.queued, 1);

    /* Only the row without a lease is claimable. */
    store_job j;
    assert_int_equal(store_claim(st, 2000, 60000, &j), CRCR_OK);
    assert_string_equal(j.target, "c/three");
    store_job_free(&j);
    assert_int_equal(store_claim(st, 3000, 60000, &j), CRCR_E_NOT_FOUND);

    /* The caller's row is the claimed one: its finish goes through under the lease. */
    store_job mine;
    assert_int_equal(store_job_claimed(&mine, &d, &jobs[0]), CRCR_OK);
    assert_int_equal(mine.id, ids[0]);
    assert_int_equal(mine.lease_until, 61000);
    assert_string_equal(mine.kind, "dispatch");
    assert_string_equal(mine.target, "a/one");
    assert_string_equal(mine.delivery_id, "d-claimed");
    assert_string_equal(mine.event, "pull_request");
    assert_string_equal(mine.head_sha, "sha7");
    assert_int_equal(mine.pr_number, 7);
    assert_int_equal(mine.attempts, 0);
    assert_int_equal(mine.payload.len, 0); /* shared by the caller (outbox_take) */
    assert_int_equal(store_job_finish(st, &mine, "sent", 204, NULL, NULL, NULL, 0, 4000), CRCR_OK);
    store_job_free(&mine);

    /* The other claimed row, never finished, comes back after its lease. */
    assert_int_equal(store_claim(st, 61000, 60000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(st, 61001, 60000, &j), CRCR_OK);
    assert_int_equal(j.id, ids[1]);
    assert_string_equal(j.target, "b/two");
    assert_int_equal(j.payload.len, 7);
    store_job_free(&j);
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.sent, 1);
}

/* store_visible: what the early hand-over saw and did. */
typedef struct early_seen {
    store *st;
    const store_delivery *d;
    const store_new_job *jobs;
    int64_t id_seen;
    crcr_err finish;
    int calls;
} early_seen;

/* The hand-over of the ingest's claimed row, as a worker would carry it out while the ingest's
 * commit is synced: the row is there, claimed, and its outcome can be recorded. */
static void early_take(void *ctx)
{
    early_seen *e = ctx;
    e->calls++;
    e->id_seen = *e->jobs[0].claimed_id;
    store_job mine;
    e->finish = store_job_claimed(&mine, e->d, &e->jobs[0]);
    if (e->finish == CRCR_OK)
        e->finish = store_job_finish(e->st, &mine, "sent", 204, NULL, NULL, NULL, 0, 2000);
    store_job_free(&mine);
}

/* An ingest's early hand-over (store_visible): on SQLite, an ingest committing alone hands its
 * claimed rows over between its commit and its sync, before it returns; a worker can record the
 * row's outcome then, and the ingest still returns its own result. PostgreSQL's commit is durable
 * when it returns: it never calls the hand-over, and the caller hands the rows over after. A
 * duplicate delivery hands nothing over. */
static void ingest_hands_rows_over_before_its_sync(void **state)
{
    store *st = *state;
    int64_t id = 0;
    const char *targets[] = {"a/one", "b/two"};
    store_new_job jobs[2] = {
        {.kind = "dispatch",
         .target = targets[0],
         .due_at = 1000,
         .lease_until = 61000,
         .claimed_id = &id},
        {.kind = "dispatch", .target = targets[1], .due_at = 1000},
    };
    store_delivery d = pr_delivery("d-early", 9, "sha9", "{\"x\":3}");
    early_seen seen = {.st = st, .d = &d, .jobs = jobs, .finish = CRCR_E_INVALID};
    store_visible vis = {.fn = early_take, .ctx = &seen, .called = true};
    assert_int_equal(store_ingest_superseding(st, &d, jobs, 2, NULL, &vis), CRCR_OK);
    assert_true(id > 0);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.queued, 1); /* the unclaimed row */
    if (g_pg) {
        assert_false(vis.called);
        assert_int_equal(seen.calls, 0);
        assert_int_equal(s.running, 1);
    } else {
        assert_true(vis.called);
        assert_int_equal(seen.calls, 1);
        assert_int_equal(seen.id_seen, id);
        assert_int_equal(seen.finish, CRCR_OK);
        assert_int_equal(s.running, 0);
        assert_int_equal(s.sent, 1);
    }

    /* The same delivery again: a duplicate, nothing handed over. */
    seen.calls = 0;
    id = 0;
    assert_int_equal(store_ingest_superseding(st, &d, jobs, 2, NULL, &vis), CRCR_E_DUPLICATE);
    assert_false(vis.called);
    assert_int_equal(seen.calls, 0);
}

/* A worker whose lease ran out must not change the row any more: neither its late "sent" nor
 * its late retry (which would send the row a third time) may overwrite the new holder's work. */
static void a_lost_lease_fences_finish_retry_and_renew(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job old, cur;
    assert_int_equal(store_claim(st, 1000, 100, &old), CRCR_OK);
    assert_int_equal(old.lease_until, 1100);
    /* Renewing while the lease holds extends it: no other claim before the new end. */
    assert_int_equal(store_job_renew(st, &old, 1090, 100), CRCR_OK);
    assert_int_equal(old.lease_until, 1190);
    assert_int_equal(store_claim(st, 1150, 100, &cur), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(st, 1191, 100, &cur), CRCR_OK);
    assert_int_equal(cur.id, old.id);
    assert_int_equal(cur.lease_until, 1291);
    /* The old holder is fenced off... */
    assert_int_equal(store_job_retry(st, &old, 5000, true, 502, "HTTP 502"), CRCR_E_STATE);
    assert_int_equal(store_job_finish(st, &old, "sent", 204, NULL, NULL, NULL, 0, 1200),
                     CRCR_E_STATE);
    assert_int_equal(store_job_renew(st, &old, 1200, 100), CRCR_E_STATE);
    /* ...the new holder is not, and after its finish nobody can move the row again. */
    assert_int_equal(store_job_finish(st, &cur, "sent", 204, NULL, NULL, NULL, 0, 1210), CRCR_OK);
    assert_int_equal(store_job_retry(st, &cur, 5000, true, 502, "late"), CRCR_E_STATE);
    assert_int_equal(store_job_retry(st, &old, 5000, true, 502, "late"), CRCR_E_STATE);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.sent, 1);
    assert_int_equal(s.queued + s.running, 0);
    store_job_free(&cur);
    assert_int_equal(store_claim(st, 99999, 100, &cur), CRCR_E_NOT_FOUND);
    store_job_free(&old);
}

/* A paired dispatch writes its Depends-On record before the request goes out (outbox.c): a
 * callback reads it while the row is still running, and only the lease's holder may write it. */
static void a_claimed_rows_record_is_read_before_its_outcome_and_fenced(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job old, cur;
    assert_int_equal(store_claim(st, 1000, 100, &old), CRCR_OK);
    static const char rec[] = "{\"depends_on\":{\"repository\":\"o/r\",\"number\":8}}";
    assert_int_equal(store_job_record(st, &old, rec, sizeof(rec) - 1), CRCR_OK);
    store_dispatch d;
    buf_init(&d.payload, 0);
    assert_int_equal(store_dispatch_get(st, "d", "a/one", false, &d), CRCR_OK);
    assert_string_equal(d.pair, rec);
    /* The lease passes to another worker: the old holder's record no longer lands. */
    assert_int_equal(store_claim(st, 1101, 100, &cur), CRCR_OK);
    assert_int_equal(cur.id, old.id);
    assert_int_equal(store_job_record(st, &old, "{}", 2), CRCR_E_STATE);
    assert_int_equal(store_dispatch_get(st, "d", "a/one", false, &d), CRCR_OK);
    assert_string_equal(d.pair, rec);
    /* Once the row is finished nobody records over its outcome. */
    assert_int_equal(store_job_finish(st, &cur, "sent", 204, NULL, NULL, NULL, 0, 1110), CRCR_OK);
    assert_int_equal(store_job_record(st, &cur, "{}", 2), CRCR_E_STATE);
    assert_int_equal(store_dispatch_get(st, "d", "a/one", false, &d), CRCR_OK);
    assert_string_equal(d.pair, rec);
    buf_free(&d.payload);
    store_job_free(&cur);
    store_job_free(&old);
}

static void claim_of_a_job_row_carries_its_own_body(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 1000, 100, &j), CRCR_OK);
    assert_int_equal(store_job_finish(st, &j, "sent", 204, NULL, NULL, NULL, 0, 1001), CRCR_OK);
    store_job_free(&j);
    const char body[] = "{\"b\":\"\x01\x00\xff\"}";
    store_new_job cr = {
        .kind = "check_run", .target = "pytorch/pytorch", .body = body, .body_len = sizeof(body)};
    cr.due_at = 3000;
    assert_int_equal(store_enqueue(st, "d", &cr, 1), CRCR_OK);
    assert_int_equal(store_claim(st, 2999, 100, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(st, 3000, 100, &j), CRCR_OK);
    assert_string_equal(j.kind, "check_run");
    assert_int_equal(j.body.len, sizeof(body));
    assert_memory_equal(j.body.data, body, sizeof(body));
    assert_int_equal(j.payload.len, 7); /* the delivery's payload comes along */
    store_job_free(&j);
}

static void finish_and_retry_record_outcomes_and_attempts(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two", "c/three"};
    assert_int_equal(ingest(st, "d", 1000, t, 3), CRCR_OK);
    store_job a, b, c;
    assert_int_equal(store_claim(st, 1000, 1000, &a), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 1000, &b), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 1000, &c), CRCR_OK);
    assert_int_equal(
        store_job_finish(st, &a, "dry_run", 0, NULL, "trimmed: body", "{\"req\":1}", 9, 1100),
        CRCR_OK);
    /* Free text from a peer may be any bytes; the outcome must still be recorded. */
    assert_int_equal(
        store_job_finish(st, &b, "dead", 422, "bad \xff\xfe bytes", NULL, NULL, 0, 1200), CRCR_OK);
    assert_int_equal(store_job_retry(st, &c, 5000, true, 502, "HTTP 502"), CRCR_OK);

    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.queued, 1);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.dry_run, 1);
    assert_int_equal(s.dead, 1);
    assert_int_equal(s.sent, 0);
    assert_int_equal(s.oldest_due, 5000);

    store_job again;
    assert_int_equal(store_claim(st, 4999, 1000, &again), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(st, 5000, 1000, &again), CRCR_OK);
    assert_int_equal(again.id, c.id);
    assert_int_equal(again.attempts, 1);
    /* A pause that is not the row's fault does not count. */
    assert_int_equal(store_job_retry(st, &again, 6000, false, 0, "paused"), CRCR_OK);
    store_job_free(&again);
    assert_int_equal(store_claim(st, 6000, 1000, &again), CRCR_OK);
    assert_int_equal(again.attempts, 1);
    assert_int_equal(store_job_finish(st, &again, "sent", 204, NULL, NULL, NULL, 0, 6001), CRCR_OK);
    store_job_free(&again);

    dview *v = view(st, "d");
    assert_int_equal(v->n, 3);
    assert_string_equal(v->jobs[0].state, "dry_run");
    assert_int_equal(v->jobs[0].body_len, 9);
    assert_memory_equal(v->jobs[0].body, "{\"req\":1}", 9);
    assert_string_equal(v->jobs[0].note, "trimmed: body");
    assert_int_equal(v->jobs[0].attempts, 1);
    assert_int_equal(v->jobs[0].done_at, 1100);
    assert_int_equal(v->jobs[0].last_status, 0);
    assert_string_equal(v->jobs[1].state, "dead");
    assert_int_equal(v->jobs[1].last_status, 422);
    assert_non_null(strstr(v->jobs[1].error, "bad "));
    assert_non_null(strstr(v->jobs[1].error, " bytes"));
    assert_string_equal(v->jobs[2].state, "sent");
    assert_int_equal(v->jobs[2].attempts, 2);
    assert_int_equal(v->jobs[2].done_at, 6001);
    free(v);
    store_job_free(&a);
    store_job_free(&b);
    store_job_free(&c);
}

static void redeliver_requeues_dispatch_rows_and_adds_a_missing_repo(void **state)
{
    store *st = *state;
    const char *t[] = {"Org/One", "org/two"};
    int n = -1;
    assert_int_equal(store_redeliver(st, "nope", NULL, 1, &n), CRCR_E_NOT_FOUND);
    assert_int_equal(ingest(st, "d", 1000, t, 2), CRCR_OK);
    store_job a, b;
    assert_int_equal(store_claim(st, 1000, 1000, &a), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 1000, &b), CRCR_OK);
    assert_int_equal(store_job_finish(st, &a, "dead", 404, "not installed", NULL, NULL, 0, 1001),
                     CRCR_OK);
    /* b stays running: a row in flight is not touched. */
    assert_int_equal(store_redeliver(st, "d", NULL, 9000, &n), CRCR_OK);
    assert_int_equal(n, 1);
    dview *v = view(st, "d");
    assert_string_equal(v->jobs[0].state, "queued");
    assert_int_equal(v->jobs[0].attempts, 0);
    assert_int_equal(v->jobs[0].next_attempt_at, 9000);
    assert_int_equal(v->jobs[0].done_at, 0);
    assert_string_equal(v->jobs[0].error, "(null)");
    assert_string_equal(v->jobs[1].state, "running");
    free(v);

    assert_int_equal(store_job_finish(st, &b, "sent", 204, NULL, NULL, NULL, 0, 1002), CRCR_OK);
    assert_int_equal(store_redeliver(st, "d", "ORG/TWO", 9100, &n), CRCR_OK); /* any case */
    assert_int_equal(n, 1);
    assert_int_equal(store_redeliver(st, "d", "new/repo", 9200, &n), CRCR_OK);
    assert_int_equal(n, 1);
    v = view(st, "d");
    assert_int_equal(v->n, 3);
    assert_string_equal(v->jobs[1].state, "queued");
    assert_int_equal(v->jobs[1].next_attempt_at, 9100);
    assert_string_equal(v->jobs[2].target, "new/repo");
    assert_string_equal(v->jobs[2].kind, "dispatch");
    assert_string_equal(v->jobs[2].state, "queued");
    free(v);
    store_job_free(&a);
    store_job_free(&b);
}

typedef struct dlist {
    char ids[16][32];
    size_t n;
    size_t stop_after;
} dlist;

static int on_listed(void *ctx, const store_delivery_row *r)
{
    dlist *l = ctx;
    if (l->n < 16)
        copy_str(l->ids[l->n++], sizeof(l->ids[0]), r->delivery_id);
    return l->stop_after && l->n >= l->stop_after;
}

static void list_deliveries_filters_by_state_and_repo_newest_first(void **state)
{
    store *st = *state;
    const char *ta[] = {"a/one"};
    const char *tb[] = {"b/Two", "a/one"};
    assert_int_equal(ingest(st, "d1", 1000, ta, 1), CRCR_OK);
    assert_int_equal(ingest(st, "d2", 2000, tb, 2), CRCR_OK);
    assert_int_equal(ingest(st, "d3", 3000, ta, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 1000, 1000, &j), CRCR_OK);
    assert_string_equal(j.delivery_id, "d1");
    assert_int_equal(store_job_finish(st, &j, "dead", 422, "x", NULL, NULL, 0, 1001), CRCR_OK);
    store_job_free(&j);

    dlist l = {0};
    assert_int_equal(store_list_deliveries(st, NULL, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.ids[0], "d3");
    assert_string_equal(l.ids[2], "d1");

    memset(&l, 0, sizeof(l));
    store_filter f = {.state = "dead"};
    assert_int_equal(store_list_deliveries(st, &f, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.ids[0], "d1");

    memset(&l, 0, sizeof(l));
    f = (store_filter){.repo = "B/TWO"};
    assert_int_equal(store_list_deliveries(st, &f, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.ids[0], "d2");

    memset(&l, 0, sizeof(l));
    f = (store_filter){.limit = 2};
    assert_int_equal(store_list_deliveries(st, &f, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 2);

    memset(&l, 0, sizeof(l));
    l.stop_after = 1;
    assert_int_equal(store_list_deliveries(st, NULL, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
}

typedef struct status_seek {
    const char *id;
    char status[24];
} status_seek;

static int on_status(void *ctx, const store_delivery_row *r)
{
    status_seek *s = ctx;
    if (strcmp(r->delivery_id, s->id) == 0)
        copy_str(s->status, sizeof(s->status), r->status);
    return 0;
}

/* Asserts the status of delivery `id` in store_get_delivery and in the listing. */
static void expect_status(store *st, const char *id, const char *want)
{
    dview *v = view(st, id);
    if (strcmp(v->status, want) != 0)
        fail_msg("delivery %s: status %s, expected %s", id, v->status, want);
    free(v);
    status_seek s = {.id = id};
    assert_int_equal(store_list_deliveries(st, NULL, on_status, &s), CRCR_OK);
    if (strcmp(s.status, want) != 0)
        fail_msg("delivery %s listed with status '%s', expected %s", id, s.status, want);
}

/* Claims the earliest due row, which must belong to `id`, and finishes it in `state`. */
static void finish_next(store *st, const char *id, const char *state, int64_t now)
{
    store_job j;
    assert_int_equal(store_claim(st, now, 1000, &j), CRCR_OK);
    assert_string_equal(j.delivery_id, id);
    assert_int_equal(store_job_finish(st, &j, state, strcmp(state, "dead") == 0 ? 404 : 204, NULL,
                                      NULL, NULL, 0, now + 1),
                     CRCR_OK);
    store_job_free(&j);
}

static void delivery_status_follows_its_rows(void **state)
{
    store *st = *state;
    const char *two[] = {"a/one", "b/two"};
    assert_int_equal(ingest(st, "mixed", 1000, two, 2), CRCR_OK);
    expect_status(st, "mixed", "queued");
    store_job a, b;
    assert_int_equal(store_claim(st, 1000, 1000, &a), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 1000, &b), CRCR_OK);
    expect_status(st, "mixed", "queued"); /* running */
    assert_int_equal(store_job_finish(st, &a, "sent", 204, NULL, NULL, NULL, 0, 1001), CRCR_OK);
    expect_status(st, "mixed", "queued"); /* one still running */
    assert_int_equal(store_job_finish(st, &b, "dead", 404, "not installed", NULL, NULL, 0, 1002),
                     CRCR_OK);
    expect_status(st, "mixed", "partly_failed");
    store_job_free(&a);
    store_job_free(&b);
    /* Redelivered: queued again, then done once the dead row is sent. */
    int n = 0;
    assert_int_equal(store_redeliver(st, "mixed", "b/two", 2000, &n), CRCR_OK);
    assert_int_equal(n, 1);
    expect_status(st, "mixed", "queued");
    finish_next(st, "mixed", "sent", 2000);
    expect_status(st, "mixed", "done");

    const char *one[] = {"a/one"};
    assert_int_equal(ingest(st, "all-dead", 3000, two, 2), CRCR_OK);
    finish_next(st, "all-dead", "dead", 3000);
    expect_status(st, "all-dead", "queued");
    finish_next(st, "all-dead", "dead", 3000);
    expect_status(st, "all-dead", "dead");
    assert_int_equal(ingest(st, "dry", 4000, one, 1), CRCR_OK);
    finish_next(st, "dry", "dry_run", 4000);
    expect_status(st, "dry", "done");
    /* Nothing to do is done; a status stored other than queued is kept. */
    assert_int_equal(ingest(st, "no-rows", 5000, NULL, 0), CRCR_OK);
    expect_status(st, "no-rows", "done");
    store_delivery d = {.delivery_id = "ign",
                        .event = "issues",
                        .received_at = 6000,
                        .payload = "{}",
                        .payload_len = 2,
                        .status = "ignored"};
    assert_int_equal(store_ingest(st, &d, NULL, 0), CRCR_OK);
    expect_status(st, "ign", "ignored");
}

static void enqueue_adds_rows_but_never_a_second_dispatch_of_a_target(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_new_job jobs[] = {
        {.kind = "dispatch", .target = "a/one", .due_at = 2000},
        {.kind = "rerun", .target = "a/one", .body = "{\"run\":7}", .body_len = 9, .due_at = 2000},
        {.kind = "rerun", .target = "a/one", .body = "{\"run\":8}", .body_len = 9, .due_at = 2000},
    };
    assert_int_equal(store_enqueue(st, "d", jobs, 3), CRCR_OK);
    dview *v = view(st, "d");
    assert_int_equal(count_kind(v, "dispatch"), 1);
    assert_int_equal(count_kind(v, "rerun"), 2);
    assert_int_equal(v->jobs[1].created_at, 2000);
    free(v);
}

static void kv_values_are_bytes_with_expiry(void **state)
{
    store *st = *state;
    buf_t b;
    buf_init(&b, 1024);
    assert_int_equal(store_kv_get(st, "k", &b, 0), CRCR_E_NOT_FOUND);
    assert_int_equal(store_kv_put(st, "k", "a\0b\xff", 4, 0), CRCR_OK);
    assert_int_equal(store_kv_get(st, "k", &b, 99999999), CRCR_OK); /* 0: never expires */
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "a\0b\xff", 4);
    buf_reset(&b);
    assert_int_equal(store_kv_put(st, "k", "new", 3, 5000), CRCR_OK);
    assert_int_equal(store_kv_get(st, "k", &b, 4999), CRCR_OK);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "new", 3);
    buf_reset(&b);
    assert_int_equal(store_kv_get(st, "k", &b, 5000), CRCR_E_NOT_FOUND);
    buf_free(&b);
}

static void lease_has_one_holder_until_it_expires(void **state)
{
    store *st = *state;
    bool held = false;
    assert_int_equal(store_lease(st, "sweeper", "host-a:1", 1000, 500, &held), CRCR_OK);
    assert_true(held);
    assert_int_equal(store_lease(st, "sweeper", "host-b:2", 1200, 500, &held), CRCR_OK);
    assert_false(held);
    assert_int_equal(store_lease(st, "sweeper", "host-a:1", 1400, 500, &held), CRCR_OK);
    assert_true(held); /* renewed until 1900 */
    assert_int_equal(store_lease(st, "sweeper", "host-b:2", 1800, 500, &held), CRCR_OK);
    assert_false(held);
    assert_int_equal(store_lease(st, "other", "host-b:2", 1800, 500, &held), CRCR_OK);
    assert_true(held); /* leases are per name */
    assert_int_equal(store_lease(st, "sweeper", "host-b:2", 1901, 500, &held), CRCR_OK);
    assert_true(held);
    assert_int_equal(store_lease(st, "sweeper", "host-a:1", 1902, 500, &held), CRCR_OK);
    assert_false(held);
}

typedef struct lease_race {
    store *st;
    pthread_barrier_t *go;
    char owner[16];
    bool held;
    crcr_err err;
} lease_race;

static void *take_lease(void *arg)
{
    lease_race *r = arg;
    pthread_barrier_wait(r->go);
    r->err = store_lease(r->st, "race", r->owner, 1000, 60000, &r->held);
    return NULL;
}

static void lease_taken_by_concurrent_instances_has_exactly_one_holder(void **state)
{
    store *st = *state;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    lease_race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (lease_race){.st = st, .go = &go};
        snprintf(r[i].owner, sizeof(r[i].owner), "owner-%d", i);
        pthread_create(&th[i], NULL, take_lease, &r[i]);
    }
    int holders = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].err, CRCR_OK);
        holders += r[i].held;
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(holders, 1);
}

#define INGEST_RACE_IDS 40

typedef struct ingest_race {
    store *st;
    pthread_barrier_t *go;
    int first; /* ingests ids first, first+2, ...: two threads share every id */
    int ok, dup, other;
} ingest_race;

static void *race_ingest(void *arg)
{
    ingest_race *r = arg;
    const char *t[] = {"a/one", "b/two"};
    pthread_barrier_wait(r->go);
    for (int i = r->first; i < INGEST_RACE_IDS; i += THREADS / 2) {
        char id[32];
        snprintf(id, sizeof(id), "race-%d", i);
        crcr_err e = ingest(r->st, id, 1000 + i, t, 2);
        r->ok += e == CRCR_OK;
        r->dup += e == CRCR_E_DUPLICATE;
        r->other += e != CRCR_OK && e != CRCR_E_DUPLICATE;
    }
    return NULL;
}

/* Concurrent ingests (committed together on SQLite, see sq_ingest) each get their own answer:
 * every delivery id is posted by two threads at once, exactly one of them stores it with all of
 * its rows, the other is told it is a duplicate. */
static void ingest_from_concurrent_callers_stores_each_delivery_once(void **state)
{
    store *st = *state;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    ingest_race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (ingest_race){.st = st, .go = &go, .first = i % (THREADS / 2)};
        pthread_create(&th[i], NULL, race_ingest, &r[i]);
    }
    int ok = 0, dup = 0, other = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ok += r[i].ok;
        dup += r[i].dup;
        other += r[i].other;
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(other, 0);
    assert_int_equal(ok, INGEST_RACE_IDS);
    assert_int_equal(dup, INGEST_RACE_IDS);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.queued, 2 * INGEST_RACE_IDS);
    for (int i = 0; i < INGEST_RACE_IDS; i += 7) {
        char id[32];
        snprintf(id, sizeof(id), "race-%d", i);
        dview *v = view(st, id);
        assert_int_equal(v->n, 2);
        assert_int_equal(v->received_at, 1000 + i);
        free(v);
    }
}

static void rate_hit_counts_a_sliding_window_per_repo(void **state)
{
    store *st = *state;
    bool ok = false;
    int64_t retry = 0;
    assert_int_equal(store_rate_hit(st, "o/r", 1000, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_rate_hit(st, "O/R", 1200, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_rate_hit(st, "o/r", 1400, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_rate_hit(st, "o/R", 1500, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok);
    assert_int_equal(retry, 500); /* the hit at 1000 leaves the window at 2000 */
    assert_int_equal(store_rate_hit(st, "other/repo", 1500, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_rate_hit(st, "o/r", 1999, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok); /* refused hits are not counted ... */
    assert_int_equal(retry, 1);
    assert_int_equal(store_rate_hit(st, "o/r", 2000, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok); /* ... so the window frees up exactly when the oldest hit leaves */
    assert_int_equal(store_rate_hit(st, "o/r", 2001, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok);
    assert_int_equal(retry, 199);
}

typedef struct rate_race {
    store *st;
    pthread_barrier_t *go;
    int allowed;
    crcr_err err;
} rate_race;

static void *hit_rate(void *arg)
{
    rate_race *r = arg;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < 10; i++) {
        bool ok = false;
        int64_t retry = 0;
        crcr_err e = store_rate_hit(r->st, "busy/repo", 1000 + i, 60000, 25, &ok, &retry);
        if (e)
            r->err = e;
        r->allowed += ok;
    }
    return NULL;
}

static void rate_hit_under_concurrency_never_exceeds_the_limit(void **state)
{
    store *st = *state;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    rate_race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (rate_race){.st = st, .go = &go};
        pthread_create(&th[i], NULL, hit_rate, &r[i]);
    }
    int allowed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].err, CRCR_OK);
        allowed += r[i].allowed;
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(allowed, 25);
}

static void retention_deletes_old_finished_data_and_keeps_pending_work(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "old-done", 1000, t, 1), CRCR_OK);
    assert_int_equal(ingest(st, "old-pending", 1001, t, 1), CRCR_OK);
    assert_int_equal(ingest(st, "new", 9000, t, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 1000, 100, &j), CRCR_OK);
    assert_string_equal(j.delivery_id, "old-done");
    assert_int_equal(store_job_finish(st, &j, "sent", 204, NULL, NULL, NULL, 0, 1002), CRCR_OK);
    store_job_free(&j);
    assert_int_equal(store_kv_put(st, "cache:old", "x", 1, 1500), CRCR_OK);
    assert_int_equal(store_kv_put(st, "cache:forever", "x", 1, 0), CRCR_OK);
    assert_int_equal(store_wanted_set(st, "sha-old", "a/one", 1000), CRCR_OK);
    assert_int_equal(store_callback_rejected(st, "a/one", 1000, 403), CRCR_OK);
    /* runs: a completed old one goes, an in-progress old one stays (the sweeper ends it). */
    store_run_update u = upd("old-done", "a/one", 1, "completed", "success", 1100);
    u.single_shot = true;
    store_run_result res;
    char why[128];
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("old-done", "a/one", 2, "in_progress", NULL, 1100);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);

    int n = -1;
    assert_int_equal(store_retention(st, 5000, &n), CRCR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_get_delivery(st, "old-done", NULL, NULL, NULL), CRCR_E_NOT_FOUND);
    assert_int_equal(store_get_delivery(st, "old-pending", NULL, NULL, NULL), CRCR_OK);
    assert_int_equal(store_get_delivery(st, "new", NULL, NULL, NULL), CRCR_OK);
    assert_int_equal(raw("SELECT count(*) FROM outbox WHERE delivery_id='old-done'"), 0);
    buf_t b;
    buf_init(&b, 64);
    assert_int_equal(store_kv_get(st, "cache:old", &b, 0), CRCR_E_NOT_FOUND);
    assert_int_equal(store_kv_get(st, "cache:forever", &b, 0), CRCR_OK);
    buf_free(&b);
    assert_int_equal(store_wanted_get(st, "sha-old", "a/one", 0), CRCR_E_NOT_FOUND);
    int64_t rej = -1;
    assert_int_equal(store_callback_rejections(st, "a/one", 0, &rej), CRCR_OK);
    assert_int_equal(rej, 0);
    rlist l = {0};
    store_run_filter f = {0};
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].state, "in_progress");
    assert_int_equal(store_retention(st, 5000, &n), CRCR_OK);
    assert_int_equal(n, 0);
}

static void claim_keeps_rows_of_one_seq_key_in_creation_order(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 1000, 100000, &j), CRCR_OK); /* the dispatch row */
    int64_t dispatch = j.id;
    store_job_free(&j);
    store_new_job jobs[] = {
        {.kind = "hud_forward", .target = "hud", .seq_key = "run-7", .due_at = 2000},
        {.kind = "hud_forward", .target = "hud", .seq_key = "run-7", .due_at = 2000},
        {.kind = "check_run", .target = "pytorch/pytorch", .due_at = 2000},
    };
    assert_int_equal(store_enqueue(st, "d", jobs, 3), CRCR_OK);
    store_job first, other;
    assert_int_equal(store_claim(st, 2000, 100000, &first), CRCR_OK);
    assert_int_equal(first.id, dispatch + 1);
    assert_int_equal(store_claim(st, 2000, 100000, &other), CRCR_OK);
    assert_string_equal(other.kind, "check_run"); /* the second of run-7 waits for the first */
    store_job_free(&other);
    assert_int_equal(store_claim(st, 2000, 100000, &other), CRCR_E_NOT_FOUND);
    /* Still waiting while the first is queued for a retry ... */
    assert_int_equal(store_job_retry(st, &first, 5000, true, 502, "HTTP 502"), CRCR_OK);
    assert_int_equal(store_claim(st, 3000, 100000, &other), CRCR_E_NOT_FOUND);
    store_job_free(&first);
    assert_int_equal(store_claim(st, 5000, 100000, &first), CRCR_OK);
    assert_int_equal(first.id, dispatch + 1);
    /* ... and free to go once it is finished, dead or not. */
    assert_int_equal(store_job_finish(st, &first, "dead", 422, "x", NULL, NULL, 0, 5001), CRCR_OK);
    assert_int_equal(store_claim(st, 5001, 100000, &other), CRCR_OK);
    assert_int_equal(other.id, dispatch + 2);
    store_job_free(&first);
    store_job_free(&other);
}

/* A batch is what single claims would hand out one after the other: due order, each row with its
 * delivery, never the second row of a seq_key while the first is unfinished, at most `max`. */
static void claim_batch_takes_due_rows_in_order_up_to_its_size(void **state)
{
    store *st = *state;
    const char *ta[] = {"x/1", "x/2", "x/3"};
    const char *tb[] = {"y/1"};
    assert_int_equal(ingest(st, "b", 2000, tb, 1), CRCR_OK);
    assert_int_equal(ingest(st, "a", 1000, ta, 3), CRCR_OK);
    store_new_job jobs[] = {
        {.kind = "hud_forward", .target = "hud", .seq_key = "run-9", .due_at = 1500},
        {.kind = "hud_forward", .target = "hud", .seq_key = "run-9", .due_at = 1500},
    };
    assert_int_equal(store_enqueue(st, "b", jobs, 2), CRCR_OK);
    store_job b[8];
    size_t n = 99;
    assert_int_equal(store_claim_batch(st, 999, 60000, b, 8, &n), CRCR_E_NOT_FOUND);
    assert_int_equal(n, 0);

    assert_int_equal(store_claim_batch(st, 5000, 60000, b, 2, &n), CRCR_OK);
    assert_int_equal(n, 2);
    assert_string_equal(b[0].delivery_id, "a");
    assert_string_equal(b[1].delivery_id, "a");
    assert_int_not_equal(b[0].id, b[1].id);
    assert_int_equal(b[0].payload_in, 0); /* the payload read once, held by the first row */
    assert_int_equal(b[1].payload_in, 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(claimed_payload(b, i)->len, 7);
        assert_memory_equal(claimed_payload(b, i)->data, "{\"x\":1}", 7);
        assert_string_equal(b[i].head_sha, "sha42");
        assert_int_equal(b[i].pr_number, 42);
        assert_string_equal(b[i].event, "pull_request");
        assert_int_equal(b[i].lease_until, 65000);
    }
    for (size_t i = 0; i < n; i++)
        store_job_free(&b[i]);

    assert_int_equal(store_claim_batch(st, 5000, 60000, b, 8, &n), CRCR_OK);
    assert_int_equal(n, 3); /* x/3, the first of run-9, y/1: not the second of run-9 */
    assert_string_equal(b[0].target, "x/3");
    assert_string_equal(b[1].kind, "hud_forward");
    assert_string_equal(b[2].target, "y/1");
    assert_string_equal(b[2].event, "pull_request");
    assert_int_equal(claimed_payload(b, 2)->len, 7); /* shared with b[1], the same delivery's */
    assert_int_equal(store_claim_batch(st, 5000, 60000, b + 3, 8 - 3, &n), CRCR_E_NOT_FOUND);
    assert_int_equal(store_job_finish(st, &b[1], "sent", 200, NULL, NULL, NULL, 0, 5001), CRCR_OK);
    assert_int_equal(store_claim_batch(st, 5001, 60000, b + 3, 8 - 3, &n), CRCR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(b[3].kind, "hud_forward");
    assert_int_equal(b[3].id, b[1].id + 1);
    for (size_t i = 0; i < 4; i++)
        store_job_free(&b[i]);
}

static void list_deliveries_filters_by_pull_request(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "pr42", 1000, t, 1), CRCR_OK);
    store_delivery d = {.delivery_id = "pr7",
                        .event = "pull_request",
                        .pr_number = 7,
                        .received_at = 2000,
                        .payload = "{}",
                        .payload_len = 2,
                        .status = "queued"};
    assert_int_equal(store_ingest(st, &d, NULL, 0), CRCR_OK);
    dlist l = {0};
    store_filter f = {.pr_number = 7};
    assert_int_equal(store_list_deliveries(st, &f, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.ids[0], "pr7");
    memset(&l, 0, sizeof(l));
    f.pr_number = 0;
    assert_int_equal(store_list_deliveries(st, &f, on_listed, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
}

/* ---- runs ---- */

static void run_apply_follows_the_state_machine_and_measures_times(void **state)
{
    store *st = *state;
    const char *t[] = {"Down/Stream"};
    store_run_result res;
    char why[128] = "";
    effects_ctx fx = {0};
    store_run_update u = upd("d", "down/stream", 7, "in_progress", NULL, 5000);
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_NOT_FOUND);
    assert_int_equal(fx.calls, 0);
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);

    u = upd("d", "down/stream", 7, "completed", "success", 5000);
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_STATE);
    assert_string_equal(why, "completed without prior in_progress");

    u = upd("d", "DOWN/stream", 7, "in_progress", NULL, 5000);
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    assert_int_equal(res.dispatched_at, 1000);
    assert_int_equal(res.started_at, 5000);
    assert_int_equal(res.queue_ms, 4000);
    assert_int_equal(res.exec_ms, -1);
    assert_int_equal(fx.calls, 1);
    assert_int_equal(fx.seen.queue_ms, 4000);

    u.now = 5100; /* the same transition again: duplicate, nothing written, no jobs */
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    assert_int_equal(fx.calls, 1);

    u = upd("d", "down/stream", 7, "completed", "failure", 9000);
    u.test_passed = 10;
    u.test_failed = 2;
    u.test_skipped = 0;
    u.artifact_url = "https://example.test/a";
    u.details_url = NULL; /* keeps the one from in_progress */
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    assert_int_equal(res.started_at, 5000);
    assert_int_equal(res.exec_ms, 4000);
    assert_int_equal(u.now, 9000);

    u.now = 9500;
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    u.conclusion = "success";
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_STATE);
    assert_string_equal(why, "already completed with conclusion failure");
    u = upd("d", "down/stream", 7, "in_progress", NULL, 9600);
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_STATE);
    assert_string_equal(why, "in_progress after completed");

    /* Exactly two transitions applied: two check_run jobs, no more. */
    dview *v = view(st, "d");
    assert_int_equal(count_kind(v, "check_run"), 2);
    free(v);

    rlist l = {0};
    assert_int_equal(store_runs_for_sha(st, "sha42", "down/STREAM", on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    rrow *r = &l.r[0];
    assert_string_equal(r->repo, "DOWN/stream"); /* as first reported */
    assert_string_equal(r->state, "completed");
    assert_string_equal(r->conclusion, "failure");
    assert_int_equal(r->run_id, 7);
    assert_int_equal(r->run_attempt, 1);
    assert_string_equal(r->job_name, "build");
    assert_int_equal(r->dispatched_at, 1000);
    assert_int_equal(r->started_at, 5000);
    assert_int_equal(r->completed_at, 9000);
    assert_int_equal(r->queue_ms, 4000);
    assert_int_equal(r->exec_ms, 4000);
    assert_int_equal(r->test_passed, 10);
    assert_int_equal(r->test_failed, 2);
    assert_int_equal(r->test_skipped, 0);
    assert_int_equal(r->level, 3);
    assert_int_equal(r->pr_number, 42);
    assert_string_equal(r->details_url, "https://example.test/run");
    assert_string_equal(r->artifact_url, "https://example.test/a");
    assert_int_equal(r->payload_len, 0); /* the body is kept only while the run is open */
}

static void run_apply_single_shot_needs_no_dispatch_and_completes_once(void **state)
{
    store *st = *state;
    store_run_result res;
    char why[128];
    store_run_update u = upd("nightly-2024", "a/nightly", 1, "completed", NULL, 100);
    u.single_shot = true;
    u.event_type = "nightly";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    assert_int_equal(res.dispatched_at, 0);
    assert_int_equal(res.exec_ms, -1);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate); /* null conclusion twice is the same transition */
    rlist l = {0};
    store_run_filter f = {.kind = 2};
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].conclusion, "(null)");
    assert_int_equal(l.r[0].dispatched_at, 0);
    assert_int_equal(l.r[0].queue_ms, -1);
}

typedef struct apply_race {
    store *st;
    pthread_barrier_t *go;
    store_run_update u;
    effects_ctx fx;
    store_run_result res;
    crcr_err err;
} apply_race;

static void *race_apply(void *arg)
{
    apply_race *r = arg;
    char why[128];
    pthread_barrier_wait(r->go);
    r->err = store_run_apply(r->st, &r->u, one_check_run, &r->fx, &r->res, why, sizeof(why));
    return NULL;
}

/* Runs THREADS concurrent run_apply calls; counts winners, duplicates and refusals. */
static void race(store *st, apply_race *r, int *won, int *dup, int *refused)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i].st = st;
        r[i].go = &go;
        pthread_create(&th[i], NULL, race_apply, &r[i]);
    }
    *won = *dup = *refused = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (r[i].err == CRCR_OK && !r[i].res.duplicate)
            (*won)++;
        else if (r[i].err == CRCR_OK)
            (*dup)++;
        else if (r[i].err == CRCR_E_STATE)
            (*refused)++;
        else
            fail_msg("run_apply in thread %d: %s", i, crcr_strerror(r[i].err));
    }
    pthread_barrier_destroy(&go);
}

static void run_apply_from_concurrent_callers_applies_exactly_once(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    apply_race r[THREADS];
    memset(r, 0, sizeof(r));
    for (int i = 0; i < THREADS; i++)
        r[i].u = upd("d", i % 2 ? "A/One" : "a/one", 99, "in_progress", NULL, 2000 + i);
    int won, dup, refused;
    race(st, r, &won, &dup, &refused);
    assert_int_equal(won, 1);
    assert_int_equal(dup, THREADS - 1);
    assert_int_equal(refused, 0);

    /* Completed with a different conclusion each: one wins, the others are refused. */
    static const char *const conclusions[THREADS] = {"success", "failure",   "cancelled", "skipped",
                                                     "neutral", "timed_out", "stale",     "action"};
    memset(r, 0, sizeof(r));
    for (int i = 0; i < THREADS; i++)
        r[i].u = upd("d", "a/one", 99, "completed", conclusions[i], 3000 + i);
    race(st, r, &won, &dup, &refused);
    assert_int_equal(won, 1);
    assert_int_equal(dup, 0);
    assert_int_equal(refused, THREADS - 1);

    /* One side effect per applied transition, whatever the number of callers. */
    dview *v = view(st, "d");
    assert_int_equal(count_kind(v, "check_run"), 2);
    free(v);
    assert_int_equal(raw("SELECT count(*) FROM runs"), 1);
}

#define APPLY_RUNS 12 /* runs per thread in the tests below */

typedef struct apply_many {
    store *st;
    pthread_barrier_t *go;
    int index;
    long rate_limit;
    effects_ctx fx;
    int won, dup, limited;
    crcr_err err;
} apply_many;

/* Each thread reports in_progress, a repeat of it, then completed for its own runs. */
static void *apply_own_runs(void *arg)
{
    apply_many *r = arg;
    static const char *const steps[3][2] = {
        {"in_progress", NULL}, {"in_progress", NULL}, {"completed", "success"}};
    pthread_barrier_wait(r->go);
    for (int k = 0; k < APPLY_RUNS; k++) {
        for (int s = 0; s < 3; s++) {
            store_run_update u = upd("d", "a/one", 1000 * (r->index + 1) + k, steps[s][0],
                                     steps[s][1], 2000 + k * 3 + s);
            u.rate_limit = r->rate_limit;
            u.rate_window_ms = 60000;
            store_run_result res;
            char why[128];
            crcr_err e = store_run_apply(r->st, &u, one_check_run, &r->fx, &res, why, sizeof(why));
            if (e) {
                r->err = e;
                return NULL;
            }
            if (res.rate_limited)
                r->limited++;
            else if (res.duplicate)
                r->dup++;
            else
                r->won++;
            if (res.rate_limited && s == 0)
                break; /* that run never started */
        }
    }
    return NULL;
}

static void run_many(store *st, apply_many *r, long rate_limit)
{
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (apply_many){.st = st, .go = &go, .index = i, .rate_limit = rate_limit};
        pthread_create(&th[i], NULL, apply_own_runs, &r[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
}

/* Concurrent transitions of different runs (SQLite commits them in groups) all apply, each once,
 * with its own effects and its own result. */
static void run_apply_of_different_runs_from_concurrent_callers_all_apply(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    apply_many r[THREADS];
    run_many(st, r, 0);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(r[i].err, CRCR_OK);
        assert_int_equal(r[i].won, 2 * APPLY_RUNS);
        assert_int_equal(r[i].dup, APPLY_RUNS);
        assert_int_equal(r[i].limited, 0);
        assert_int_equal(r[i].fx.calls, 2 * APPLY_RUNS); /* never for a duplicate */
        assert_int_equal(r[i].fx.seen.exec_ms, 2);       /* its own run's times */
    }
    assert_int_equal(raw("SELECT count(*) FROM runs WHERE state='completed'"),
                     THREADS * APPLY_RUNS);
    assert_int_equal(raw("SELECT count(*) FROM runs"), THREADS * APPLY_RUNS);
    assert_int_equal(raw("SELECT count(*) FROM outbox WHERE kind='check_run'"),
                     2 * THREADS * APPLY_RUNS);
}

/* rate_limit: the hit is store_rate_hit's, counted whatever the transition's outcome; a refused
 * hit applies nothing and is not counted. */
static void run_apply_counts_a_rate_hit_first(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_run_result res;
    char why[128] = "";
    effects_ctx fx = {0};
    store_run_update u = upd("d", "a/one", 1, "in_progress", NULL, 5000);
    u.rate_limit = 3;
    u.rate_window_ms = 1000;
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.rate_limited);
    assert_false(res.duplicate);
    u = upd("d", "a/one", 2, "completed", "success", 5100);
    u.rate_limit = 3;
    u.rate_window_ms = 1000;
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_STATE);
    u = upd("nope", "A/ONE", 3, "in_progress", NULL, 5200);
    u.rate_limit = 3;
    u.rate_window_ms = 1000;
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_E_NOT_FOUND);
    /* Three hits counted: the fourth is refused and applies nothing. */
    u = upd("d", "a/one", 4, "in_progress", NULL, 5300);
    u.rate_limit = 3;
    u.rate_window_ms = 1000;
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.rate_limited);
    assert_false(res.duplicate);
    assert_int_equal(res.retry_after_ms, 700); /* the hit at 5000 leaves at 6000 */
    assert_int_equal(fx.calls, 1);
    assert_int_equal(raw("SELECT count(*) FROM runs"), 1);
    /* The same counter as store_rate_hit's, which did not count the refused hit. */
    bool ok = true;
    int64_t retry = 0;
    assert_int_equal(store_rate_hit(st, "a/one", 5999, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok);
    assert_int_equal(retry, 1);
    assert_int_equal(store_rate_hit(st, "a/one", 6000, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok);
    /* Without a limit there is no hit. */
    u = upd("d", "a/one", 4, "in_progress", NULL, 6001);
    assert_int_equal(apply(st, &u, &fx, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.rate_limited);
    assert_int_equal(raw("SELECT count(*) FROM runs"), 2);
}

/* Concurrent callers of different runs: exactly `limit` hits pass, grouped or not. */
static void run_apply_rate_hits_under_concurrency_never_exceed_the_limit(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    apply_many r[THREADS];
    run_many(st, r, 25);
    int passed = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(r[i].err, CRCR_OK);
        passed += r[i].won + r[i].dup;
    }
    assert_int_equal(passed, 25);
    int started = (int)raw("SELECT count(*) FROM runs");
    assert_true(started > 0 && started <= 25);
    assert_int_equal(raw("SELECT count(*) FROM rate_hits"), 25);
}

/* Hits stored before the counter existed (or by an older binary) count. */
static void rate_hit_counts_hits_already_in_the_table(void **state)
{
    store *st = *state;
    raw("INSERT INTO rate_hits(repo, at) VALUES ('Pre/Existing', 1000), ('pre/existing', 1100), "
        "('pre/existing', 1200)");
    bool ok = true;
    int64_t retry = 0;
    assert_int_equal(store_rate_hit(st, "pre/existing", 1500, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok);
    assert_int_equal(retry, 500);
    assert_int_equal(store_rate_hit(st, "pre/existing", 2050, 1000, 3, &ok, &retry), CRCR_OK);
    assert_true(ok); /* 1000 left the window */
    assert_int_equal(store_rate_hit(st, "pre/existing", 2060, 1000, 3, &ok, &retry), CRCR_OK);
    assert_false(ok); /* 1100, 1200 and 2050 are in the window */
    assert_int_equal(retry, 40);
}

static void run_keys_include_the_workflow_name(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_run_result res;
    char why[128];
    store_run_update u = upd("d", "a/one", 5, "in_progress", NULL, 2000);
    u.key.workflow_name = "linux";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    u.key.workflow_name = "windows"; /* same run id and job, another workflow: another run */
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    u.key.workflow_name = "linux";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    u = upd("d", "a/one", 5, "completed", "success", 3000);
    u.key.workflow_name = "windows";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    rlist l = {0};
    store_run_filter f = {.no_payload = true};
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].workflow, "windows");
    assert_string_equal(l.r[0].state, "completed");
    assert_string_equal(l.r[1].workflow, "linux");
    assert_string_equal(l.r[1].state, "in_progress");
    assert_int_equal(l.r[1].payload_len, 0); /* no_payload */
    memset(&l, 0, sizeof(l));
    f.no_payload = false;
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.r[1].payload_len, 12); /* the open run's body */
    assert_int_equal(l.r[0].payload_len, 0);  /* a completed run keeps none */
}

/* Run ids are text (schema 4): a Buildkite build's UUID is a run id, kept as sent; a number's
 * text is another key than a UUID's, and "7" is one run however often it is reported. */
static void run_ids_are_text(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_run_result res;
    char why[128];
    static const char uuid[] = "0190f1a2-0000-4000-8000-00000000b002";
    store_run_update u = upd("d", "a/one", 0, "in_progress", NULL, 2000);
    u.key.run_id = uuid;
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate); /* the same text: the same run */
    u = upd("d", "a/one", 7, "in_progress", NULL, 2500);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    u = upd("d", "a/one", 0, "completed", "success", 3000);
    u.key.run_id = uuid;
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    rlist l = {0};
    store_run_filter f = {.repo = "a/one"};
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].run_id_text, uuid); /* newest update first */
    assert_string_equal(l.r[0].state, "completed");
    assert_string_equal(l.r[1].run_id_text, "7");
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_zombies(st, 99999, 10, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].run_id_text, "7");
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_runs_for_sha(st, "sha42", "a/one", on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1); /* one (workflow, job): the latest, the UUID run */
    assert_string_equal(l.r[0].run_id_text, uuid);
}

static void runs_for_sha_gives_the_latest_row_per_workflow_and_job(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two"};
    assert_int_equal(ingest(st, "d", 1000, t, 2), CRCR_OK);
    store_run_result res;
    char why[128];
    store_run_update u = upd("d", "a/one", 1, "in_progress", NULL, 2000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "a/one", 1, "completed", "failure", 3000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "a/one", 1, "in_progress", NULL, 4000); /* re-run: attempt 2 */
    u.key.run_attempt = 2;
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "a/one", 1, "in_progress", NULL, 4000);
    u.key.job_name = "test";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "b/two", 5, "in_progress", NULL, 4000); /* another repo */
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);

    rlist l = {0};
    assert_int_equal(store_runs_for_sha(st, "sha42", "A/ONE", on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].job_name, "build");
    assert_int_equal(l.r[0].run_attempt, 2);
    assert_string_equal(l.r[0].state, "in_progress");
    assert_string_equal(l.r[1].job_name, "test");
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_runs_for_sha(st, "other", "a/one", on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 0);
}

/* Bodies of open runs as read back: (run id, bytes) by run id. */
typedef struct body_list {
    struct {
        int64_t run_id;
        char body[4096];
        size_t len;
    } r[8];
    size_t n;
} body_list;

static void on_body(void *ctx, const store_run_row *r)
{
    body_list *l = ctx;
    if (l->n >= 8 || r->payload_len > sizeof(l->r[0].body))
        fail_msg("body_list: %zu rows, a body of %zu bytes", l->n, r->payload_len);
    l->r[l->n].run_id = strtoll(r->run_id, NULL, 10);
    memcpy(l->r[l->n].body, r->payload, r->payload_len);
    l->r[l->n].len = r->payload_len;
    l->n++;
}

/* Run `run_id`'s body in `l` is exactly `want`. */
static void body_is(const body_list *l, int64_t run_id, const char *want)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->r[i].run_id == run_id) {
            if (l->r[i].len != strlen(want) || memcmp(l->r[i].body, want, l->r[i].len) != 0)
                fail_msg("run %lld: body of %zu bytes, not the %zu given", (long long)run_id,
                         l->r[i].len, strlen(want));
            return;
        }
    fail_msg("run %lld not listed", (long long)run_id);
}

/* A callback body echoing `echo` (its workflow names run k), as `u`'s body. */
static void echo_body(store_run_update *u, char *out, size_t cap, const char *echo, int k)
{
    snprintf(out, cap,
             "{\"event_type\":\"pull_request\",\"payload\":%s,\"workflow\":{\"run_id\":%d}}", echo,
             k);
    u->payload = out;
    u->payload_len = strlen(out);
    size_t off = 0, n = 0; /* the body echoes `echo` where callbacks do */
    assert_true(jv_member_span(out, u->payload_len, "payload", &off, &n));
}

/* Every job of a dispatch echoes the same webhook: a store may keep it once (SQLite does), but an
 * open run's body reads back exactly as given, whatever the other runs of the dispatch sent, and
 * the echo goes when no open run needs it. */
static void open_runs_bodies_read_back_whole_when_jobs_echo_one_webhook(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two"};
    assert_int_equal(ingest(st, "d", 1000, t, 2), CRCR_OK);
    char e1[2100], e2[2100], small[64];
    snprintf(e1, sizeof(e1), "{\"pull_request\":{\"body\":\"%02000d\"}}", 7);
    snprintf(e2, sizeof(e2), "{\"pull_request\":{\"body\":\"%02000d\"}}", 8); /* one byte off */
    snprintf(small, sizeof(small), "{\"after\":\"abc\"}");
    static char bodies[7][2300];
    struct {
        const char *repo;
        int run;
        const char *echo;
    } runs[] = {{"a/one", 1, e1}, {"a/one", 2, e1},    {"a/one", 3, e2},
                {"B/TWO", 4, e1}, {"a/one", 5, small}, {"b/two", 6, e1}};
    store_run_result res;
    char why[128];
    for (int i = 0; i < 6; i++) {
        store_run_update u = upd("d", runs[i].repo, runs[i].run, "in_progress", NULL, 2000 + i);
        echo_body(&u, bodies[i], sizeof(bodies[i]), runs[i].echo, runs[i].run);
        assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
        assert_false(res.duplicate);
    }
    body_list l = {0};
    assert_int_equal(store_zombies(st, 99999, 10, on_body, &l), CRCR_OK);
    assert_int_equal(l.n, 6);
    for (int i = 0; i < 6; i++)
        body_is(&l, runs[i].run, bodies[i]);
    memset(&l, 0, sizeof(l));
    store_run_filter f = {.repo = "a/one", .limit = 10};
    assert_int_equal(store_list_runs(st, &f, on_body, &l), CRCR_OK);
    assert_int_equal(l.n, 4);
    body_is(&l, 2, bodies[1]);
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_runs_for_sha(st, "sha42", "b/two", on_body, &l), CRCR_OK);
    assert_int_equal(l.n, 1); /* runs 4 and 6 are one (workflow, job): the latest */
    body_is(&l, 6, bodies[5]);
    if (!g_pg) { /* one echo per (delivery, repo); the rows hold the rest */
        assert_int_equal(raw("SELECT count(*) FROM run_echoes"), 2);
        assert_int_equal(raw("SELECT sum(refs) FROM run_echoes"), 4);
        assert_true(raw("SELECT max(length(payload)) FROM runs WHERE echo_at IS NOT NULL") < 100);
        assert_int_equal(raw("SELECT count(*) FROM runs WHERE echo_at IS NULL"), 2); /* 3, 5 */
    }
    /* Completed runs keep no body; the echo stays while an open run points at it. */
    for (int run = 1; run <= 4; run++) {
        store_run_update u =
            upd("d", run == 4 ? "b/two" : "a/one", run, "completed", "success", 9000 + run);
        assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    }
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_zombies(st, 99999, 10, on_body, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
    body_is(&l, 5, bodies[4]);
    body_is(&l, 6, bodies[5]);
    if (!g_pg)
        assert_int_equal(raw("SELECT count(*) FROM run_echoes"), 1); /* b/two's, for run 6 */
    /* A re-run of run 1 after its echo went: kept again, read back whole. */
    store_run_update u = upd("d", "a/one", 1, "in_progress", NULL, 12000);
    u.key.run_attempt = 2;
    echo_body(&u, bodies[6], sizeof(bodies[6]), e1, 1);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "b/two", 6, "completed", "failure", 12001);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_zombies(st, 99999, 10, on_body, &l), CRCR_OK);
    assert_int_equal(l.n, 2);
    body_is(&l, 1, bodies[6]);
    body_is(&l, 5, bodies[4]);
    if (!g_pg)
        assert_int_equal(raw("SELECT count(*) FROM run_echoes"), 1); /* a/one's again */
}

static void zombies_are_in_progress_runs_started_before_the_cutoff(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_run_result res;
    char why[128];
    for (int i = 0; i < 4; i++) {
        store_run_update u = upd("d", "a/one", 10 + i, "in_progress", NULL, 2000 + i * 1000);
        assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    }
    store_run_update u = upd("d", "a/one", 10, "completed", "success", 9000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    rlist l = {0};
    assert_int_equal(store_zombies(st, 4500, 10, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 2); /* runs 11 (3000) and 12 (4000); 10 is completed, 13 too young */
    assert_int_equal(l.r[0].run_id, 11);
    assert_int_equal(l.r[1].run_id, 12);
    assert_int_equal(l.r[0].payload_len, 12); /* an open run keeps its body for the sweeper */
    memset(&l, 0, sizeof(l));
    store_run_filter f = {.repo = "a/one", .limit = 10};
    assert_int_equal(store_list_runs(st, &f, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 4);
    for (size_t i = 0; i < l.n; i++) /* a completed run keeps none */
        assert_int_equal(l.r[i].payload_len, l.r[i].run_id == 10 ? 0 : 12);
    memset(&l, 0, sizeof(l));
    assert_int_equal(store_zombies(st, 99999, 1, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.r[0].run_id, 11);
}

static void list_runs_filters_orders_and_pages(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two"};
    assert_int_equal(ingest(st, "d", 1000, t, 2), CRCR_OK);
    store_run_result res;
    char why[128];
    store_run_update u = upd("d", "a/one", 1, "in_progress", NULL, 2000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("d", "b/two", 2, "in_progress", NULL, 3000);
    u.pr_number = 7;
    u.head_sha = "other";
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    u = upd("n1", "a/one", 3, "completed", "success", 4000);
    u.single_shot = true;
    u.event_type = "periodic";
    u.pr_number = 0;
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);

    rlist l = {0};
    assert_int_equal(store_list_runs(st, NULL, on_run, &l), CRCR_OK);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.r[0].run_id, 3); /* newest update first */
    assert_int_equal(l.r[2].run_id, 1);

    struct {
        store_run_filter f;
        size_t n;
        int64_t first;
    } cases[] = {
        {{.repo = "A/ONE"}, 2, 3},     {{.pr_number = 7}, 1, 2},
        {{.head_sha = "other"}, 1, 2}, {{.kind = 1}, 2, 2},
        {{.kind = 2}, 1, 3},           {{.since = 3000}, 2, 3},
        {{.limit = 1}, 1, 3},          {{.limit = 1, .offset = 1}, 1, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&l, 0, sizeof(l));
        assert_int_equal(store_list_runs(st, &cases[i].f, on_run, &l), CRCR_OK);
        if (l.n != cases[i].n || (l.n && l.r[0].run_id != cases[i].first))
            fail_msg("case %zu: %zu rows, first run %lld", i, l.n,
                     l.n ? (long long)l.r[0].run_id : -1LL);
    }
}

static void wanted_marks_are_per_sha_and_repo_since_a_time(void **state)
{
    store *st = *state;
    assert_int_equal(store_wanted_get(st, "s1", "a/one", 0), CRCR_E_NOT_FOUND);
    assert_int_equal(store_wanted_set(st, "s1", "a/one", 1000), CRCR_OK);
    assert_int_equal(store_wanted_get(st, "s1", "A/One", 1000), CRCR_OK);
    assert_int_equal(store_wanted_get(st, "s1", "a/one", 1001), CRCR_E_NOT_FOUND);
    assert_int_equal(store_wanted_get(st, "s2", "a/one", 0), CRCR_E_NOT_FOUND);
    assert_int_equal(store_wanted_set(st, "s1", "A/ONE", 2000), CRCR_OK); /* refreshes */
    assert_int_equal(store_wanted_get(st, "s1", "a/one", 1500), CRCR_OK);
    assert_int_equal(raw("SELECT count(*) FROM labels_wanted"), 1);
}

static void callback_rejections_are_counted_per_repo_since_a_time(void **state)
{
    store *st = *state;
    assert_int_equal(store_callback_rejected(st, "a/one", 1000, 403), CRCR_OK);
    assert_int_equal(store_callback_rejected(st, "A/ONE", 2000, 429), CRCR_OK);
    assert_int_equal(store_callback_rejected(st, "b/two", 2000, 403), CRCR_OK);
    int64_t n = -1;
    assert_int_equal(store_callback_rejections(st, "a/One", 0, &n), CRCR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(store_callback_rejections(st, "a/one", 1500, &n), CRCR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_callback_rejections(st, "c/three", 0, &n), CRCR_OK);
    assert_int_equal(n, 0);
}

/* ---- dispatch records, identity pins, budgets (schema 2) ---- */

static void dispatch_get_returns_the_relays_record_of_a_dispatch(void **state)
{
    store *st = *state;
    static const char payload[] = "{\"pull_request\":{\"labels\":[]}}";
    const char *targets[] = {"a/one", "b/two"};
    assert_int_equal(ingest_full(st, "d1", 1000, targets, 2, payload, sizeof(payload) - 1),
                     CRCR_OK);
    store_dispatch d;
    buf_init(&d.payload, 1 << 20);
    assert_int_equal(store_dispatch_get(st, "d1", "A/One", true, &d), CRCR_OK);
    assert_string_equal(d.head_sha, "sha42");
    assert_int_equal(d.pr_number, 42);
    assert_string_equal(d.event, "pull_request");
    assert_int_equal(d.dispatched_at, 1000); /* queued: its creation time */
    assert_int_equal(d.payload.len, sizeof(payload) - 1);
    assert_memory_equal(d.payload.data, payload, d.payload.len);
    buf_free(&d.payload);
    buf_init(&d.payload, 1 << 20);
    assert_int_equal(store_dispatch_get(st, "d1", "b/two", false, &d), CRCR_OK);
    assert_int_equal(d.payload.len, 0);
    /* Not dispatched to that repository, or never received: no record. */
    assert_int_equal(store_dispatch_get(st, "d1", "c/three", false, &d), CRCR_E_NOT_FOUND);
    assert_int_equal(store_dispatch_get(st, "nope", "a/one", false, &d), CRCR_E_NOT_FOUND);
    buf_free(&d.payload);
}

/* A webhook-sized payload (the SQLite store packs it, payload_pack.h): 24,000 bytes of JSON. */
static char *big_payload(size_t *len)
{
    static const char head[] = "{\"pull_request\":{\"labels\":[],\"body\":\"";
    static const char tail[] = "\"}}";
    size_t n = 24000, k = strlen(head);
    char *p = malloc(n + 1);
    assert_non_null(p);
    memcpy(p, head, k);
    for (size_t i = k; i < n - strlen(tail); i++) /* URLs, as in GitHub's payloads */
        p[i] = "https://api.github.com/repos/pytorch/pytorch/pulls/"[i % 51];
    memcpy(p + n - strlen(tail), tail, strlen(tail));
    p[n] = '\0';
    *len = n;
    return p;
}

static void got_delivery_payload(void *ctx, const store_delivery_row *row, const char *payload,
                                 size_t len)
{
    buf_t *b = ctx;
    assert_int_equal(row->payload_bytes, 24000);
    assert_int_equal(buf_append(b, payload, len), CRCR_OK);
}

/* Every way a payload is read back gives the bytes stored, whatever form the store keeps them in
 * (SQLite packs them: the row must be smaller than the payload). */
static void a_webhook_sized_payload_reads_back_whole(void **state)
{
    store *st = *state;
    size_t len;
    char *payload = big_payload(&len);
    const char *targets[] = {"a/one", "b/two"};
    assert_int_equal(ingest_full(st, "big", 1000, targets, 2, payload, len), CRCR_OK);
    assert_int_equal(raw("SELECT payload_bytes FROM deliveries WHERE delivery_id='big'"), 24000);
    if (!g_pg) /* PostgreSQL compresses the column itself */
        assert_true(raw("SELECT length(payload) FROM deliveries WHERE delivery_id='big'") < 4000);

    store_dispatch d;
    buf_init(&d.payload, 1 << 20);
    assert_int_equal(store_dispatch_get(st, "big", "a/one", true, &d), CRCR_OK);
    assert_int_equal(d.payload.len, len);
    assert_memory_equal(d.payload.data, payload, len);
    buf_free(&d.payload);

    buf_t got;
    buf_init(&got, 1 << 20);
    assert_int_equal(store_get_delivery(st, "big", got_delivery_payload, NULL, &got), CRCR_OK);
    assert_int_equal(got.len, len);
    assert_memory_equal(got.data, payload, len);
    buf_free(&got);

    store_job j;
    for (int i = 0; i < 2; i++) { /* the second row's payload comes from the first's read */
        assert_int_equal(store_claim(st, 5000, 60000, &j), CRCR_OK);
        assert_int_equal(j.payload.len, len);
        assert_memory_equal(j.payload.data, payload, len);
        store_job_free(&j);
    }
    free(payload);
}

typedef struct pin_seen {
    int calls;
    char repository_id[32], owner_id[32];
} pin_seen;

static void on_pin_seen(void *ctx, const store_identity_row *r)
{
    pin_seen *p = ctx;
    p->calls++;
    copy_str(p->repository_id, sizeof(p->repository_id), r->repository_id);
    copy_str(p->owner_id, sizeof(p->owner_id), r->owner_id);
}

static void on_pin_count(void *ctx, const store_identity_row *r)
{
    (*(int *)ctx)++;
}

static void identity_pin_holds_the_first_ids_of_a_name(void **state)
{
    store *st = *state;
    store_pin_outcome o = STORE_PIN_MATCH;
    pin_seen seen = {0};
    assert_int_equal(store_identity_pin(st, "a/one", "", "", 900, &o, on_pin_seen, &seen), CRCR_OK);
    assert_int_equal(o, STORE_PIN_NONE); /* no ids, no pin: nothing recorded */
    assert_int_equal(store_identity_pin(st, "a/one", "111", "222", 1000, &o, on_pin_seen, &seen),
                     CRCR_OK);
    assert_int_equal(o, STORE_PIN_MATCH);
    assert_int_equal(store_identity_pin(st, "A/ONE", "111", "222", 2000, &o, on_pin_seen, &seen),
                     CRCR_OK);
    assert_int_equal(o, STORE_PIN_MATCH);
    assert_int_equal(seen.calls, 0);
    const char *ids[][2] = {{"999", "222"}, {"111", "999"}, {"", ""}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(
            store_identity_pin(st, "a/one", ids[i][0], ids[i][1], 3000, &o, on_pin_seen, &seen),
            CRCR_OK);
        assert_int_equal(o, STORE_PIN_MISMATCH);
        assert_string_equal(seen.repository_id, "111");
        assert_string_equal(seen.owner_id, "222");
    }
    int n = 0;
    assert_int_equal(store_identity_pin(st, "b/two", "5", "6", 1000, &o, NULL, NULL), CRCR_OK);
    assert_int_equal(store_identity_list(st, on_pin_count, &n), CRCR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(store_identity_reset(st, "A/One"), CRCR_OK);
    assert_int_equal(store_identity_reset(st, "a/one"), CRCR_E_NOT_FOUND);
    /* After a reset the next identity pins itself. */
    assert_int_equal(store_identity_pin(st, "a/one", "999", "222", 4000, &o, NULL, NULL), CRCR_OK);
    assert_int_equal(o, STORE_PIN_MATCH);
    assert_int_equal(store_identity_pin(st, "a/one", "111", "222", 4000, &o, NULL, NULL), CRCR_OK);
    assert_int_equal(o, STORE_PIN_MISMATCH);
}

static void budget_take_stays_within_its_limit(void **state)
{
    store *st = *state;
    bool ok = false;
    assert_int_equal(store_budget_take(st, "n:a/one:1", 400, 1000, 5000, &ok), CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_budget_take(st, "n:a/one:1", 600, 1000, 5000, &ok), CRCR_OK);
    assert_true(ok); /* exactly the limit */
    assert_int_equal(store_budget_take(st, "n:a/one:1", 1, 1000, 5000, &ok), CRCR_OK);
    assert_false(ok);
    assert_int_equal(store_budget_take(st, "n:b/two:1", 1000, 1000, 5000, &ok), CRCR_OK);
    assert_true(ok); /* budgets are per name */
    assert_int_equal(store_budget_take(st, "n:c/three:1", 1001, 1000, 5000, &ok), CRCR_OK);
    assert_false(ok); /* more than the whole budget */
    assert_int_equal(raw("SELECT used FROM budgets WHERE name='n:a/one:1'"), 1000);
    int n = 0;
    assert_int_equal(store_retention(st, 6000, &n), CRCR_OK);
    assert_int_equal(raw("SELECT count(*) FROM budgets"), 0);
}

typedef struct budget_race {
    store *st;
    pthread_barrier_t *go;
    int allowed;
    crcr_err err;
} budget_race;

static void *take_budget(void *arg)
{
    budget_race *r = arg;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < 10; i++) {
        bool ok = false;
        crcr_err e = store_budget_take(r->st, "shared", 10, 250, 99999, &ok);
        if (e)
            r->err = e;
        r->allowed += ok;
    }
    return NULL;
}

static void budget_take_under_concurrency_never_exceeds_the_limit(void **state)
{
    store *st = *state;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    budget_race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (budget_race){.st = st, .go = &go};
        pthread_create(&th[i], NULL, take_budget, &r[i]);
    }
    int allowed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].err, CRCR_OK);
        allowed += r[i].allowed;
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(allowed, 25);
    assert_int_equal(raw("SELECT used FROM budgets WHERE name='shared'"), 250);
}

/* ---- the reconciler's redelivery records ---- */

typedef struct rd_view {
    size_t n;
    char guid[8][64];
    int attempts[8];
    int64_t hook_id[8], received_at[8];
    long status[8];
    bool result_null[8];
} rd_view;

static void on_redelivery(void *ctx, const store_redelivery_row *r)
{
    rd_view *v = ctx;
    if (v->n >= 8)
        return;
    snprintf(v->guid[v->n], sizeof(v->guid[v->n]), "%s", r->guid);
    v->attempts[v->n] = r->attempts;
    v->hook_id[v->n] = r->hook_id;
    v->received_at[v->n] = r->received_at;
    v->status[v->n] = r->last_status;
    v->result_null[v->n] = r->last_result == NULL;
    v->n++;
}

static int on_listed_asks(void *ctx, const store_delivery_row *r)
{
    *(int *)ctx = r->redelivery_asks;
    return 0;
}

static void redelivery_asks_are_bounded_and_wait_for_a_newer_attempt(void **state)
{
    store *st = *state;
    bool ok = false;
    int n = -1;
    /* First ask; the same attempt again is a redelivery on its way: not asked twice. */
    assert_int_equal(
        store_redelivery_begin(st, "g1", 10, "pull_request", "opened", 1000, 3, 0, &ok, &n),
        CRCR_OK);
    assert_true(ok);
    assert_int_equal(n, 1);
    assert_int_equal(
        store_redelivery_begin(st, "g1", 10, "pull_request", "opened", 2000, 3, 0, &ok, &n),
        CRCR_OK);
    assert_false(ok);
    assert_int_equal(n, 1);
    assert_int_equal(store_redelivery_done(st, "g1", 202, "accepted", true), CRCR_OK);
    /* GitHub made a newer attempt (it failed): asked again, up to the limit. */
    assert_int_equal(
        store_redelivery_begin(st, "g1", 11, "pull_request", "opened", 3000, 3, 0, &ok, &n),
        CRCR_OK);
    assert_true(ok);
    assert_int_equal(n, 2);
    assert_int_equal(
        store_redelivery_begin(st, "g1", 12, "pull_request", "opened", 4000, 3, 0, &ok, &n),
        CRCR_OK);
    assert_true(ok);
    assert_int_equal(n, 3);
    assert_int_equal(
        store_redelivery_begin(st, "g1", 13, "pull_request", "opened", 5000, 3, 0, &ok, &n),
        CRCR_OK);
    assert_false(ok);
    assert_int_equal(n, 3);
    /* An ask GitHub never acted on is made again once it is stale. */
    assert_int_equal(store_redelivery_begin(st, "g2", 5, "push", NULL, 1000, 3, 0, &ok, &n),
                     CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_redelivery_begin(st, "g2", 5, "push", NULL, 1500, 3, 500, &ok, &n),
                     CRCR_OK);
    assert_false(ok);
    assert_int_equal(store_redelivery_begin(st, "g2", 5, "push", NULL, 6000, 3, 2000, &ok, &n),
                     CRCR_OK);
    assert_true(ok);
    assert_int_equal(n, 2);
    /* A transient failure is taken back: the count drops and the next pass may ask. */
    assert_int_equal(store_redelivery_begin(st, "g3", 7, "push", NULL, 7000, 3, 0, &ok, &n),
                     CRCR_OK);
    assert_true(ok);
    assert_int_equal(store_redelivery_done(st, "g3", 502, "502 Bad Gateway", false), CRCR_OK);
    /* Listed newest ask first, with the delivery's arrival when it came. */
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "g1", 8000, t, 1), CRCR_OK);
    rd_view v = {0};
    assert_int_equal(store_redelivery_list(st, 10, false, on_redelivery, &v), CRCR_OK);
    assert_int_equal(v.n, 3);
    assert_string_equal(v.guid[0], "g3");
    assert_int_equal(v.attempts[0], 0);
    assert_int_equal(v.hook_id[0], 0);
    assert_int_equal(v.status[0], 502);
    assert_string_equal(v.guid[1], "g2");
    assert_true(v.result_null[1]); /* asking */
    assert_string_equal(v.guid[2], "g1");
    assert_int_equal(v.attempts[2], 3);
    assert_int_equal(v.hook_id[2], 12);
    assert_int_equal(v.received_at[2], 8000);
    assert_int_equal(store_redelivery_begin(st, "g3", 7, "push", NULL, 7100, 3, 0, &ok, &n),
                     CRCR_OK);
    assert_true(ok);
    assert_int_equal(n, 1);
    memset(&v, 0, sizeof(v));
    assert_int_equal(store_redelivery_list(st, 10, true, on_redelivery, &v), CRCR_OK);
    assert_int_equal(v.n, 2); /* g1 arrived */
    /* The delivery listing says how many asks recovered a delivery. */
    int asks = -1;
    store_filter f = {.limit = 10};
    assert_int_equal(store_list_deliveries(st, &f, on_listed_asks, &asks), CRCR_OK);
    assert_int_equal(asks, 3);
    /* Retention forgets old records. */
    int deleted = 0;
    assert_int_equal(store_retention(st, 7050, &deleted), CRCR_OK);
    memset(&v, 0, sizeof(v));
    assert_int_equal(store_redelivery_list(st, 10, false, on_redelivery, &v), CRCR_OK);
    assert_int_equal(v.n, 1);
    assert_string_equal(v.guid[0], "g3");
}

typedef struct ask_race {
    store *st;
    pthread_barrier_t *go;
    bool allowed;
    crcr_err err;
} ask_race;

static void *ask_once(void *arg)
{
    ask_race *r = arg;
    pthread_barrier_wait(r->go);
    int n = 0;
    r->err =
        store_redelivery_begin(r->st, "shared-guid", 42, "push", NULL, 1000, 3, 0, &r->allowed, &n);
    return NULL;
}

static void redelivery_asked_by_concurrent_instances_is_asked_once(void **state)
{
    store *st = *state;
    store *other = open_store();
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    ask_race r[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i] = (ask_race){.st = i % 2 ? other : st, .go = &go};
        pthread_create(&th[i], NULL, ask_once, &r[i]);
    }
    int allowed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].err, CRCR_OK);
        allowed += r[i].allowed;
    }
    pthread_barrier_destroy(&go);
    store_close(other);
    assert_int_equal(allowed, 1);
    assert_int_equal(raw("SELECT attempts FROM redeliveries WHERE guid='shared-guid'"), 1);
}

/* ---- concurrency, recovery, wake-ups ---- */

typedef struct claimer {
    store *st;
    pthread_barrier_t *go;
    int64_t ids[256];
    size_t n, batch;
    crcr_err err;
} claimer;

/* Claims until nothing is due, in batches of 1 to 4 rows (by thread), finishing each row. */
static void *claim_all(void *arg)
{
    claimer *c = arg;
    pthread_barrier_wait(c->go);
    for (;;) {
        store_job j[4];
        size_t n = 0;
        crcr_err e = store_claim_batch(c->st, 10000, 60000, j, c->batch, &n);
        if (e == CRCR_E_NOT_FOUND)
            break;
        if (e) {
            c->err = e;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            if (c->n < 256)
                c->ids[c->n++] = j[i].id;
            store_job_finish(c->st, &j[i], "sent", 204, NULL, NULL, NULL, 0, 10001);
            store_job_free(&j[i]);
        }
    }
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void claim_by_concurrent_workers_hands_out_each_row_once(void **state)
{
    store *st = *state;
    enum { DELIVERIES = 40, TARGETS = 5 };
    const char *t[TARGETS] = {"r/0", "r/1", "r/2", "r/3", "r/4"};
    for (int i = 0; i < DELIVERIES; i++) {
        char id[16];
        snprintf(id, sizeof(id), "d%d", i);
        assert_int_equal(ingest(st, id, 1000 + i, t, TARGETS), CRCR_OK);
    }
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    pthread_t th[THREADS];
    claimer *c = calloc(THREADS, sizeof(*c));
    for (int i = 0; i < THREADS; i++) {
        c[i].st = st;
        c[i].go = &go;
        c[i].batch = 1 + (size_t)i % 4;
        pthread_create(&th[i], NULL, claim_all, &c[i]);
    }
    int64_t all[DELIVERIES * TARGETS + 8 * 256];
    size_t n = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(c[i].err, CRCR_OK);
        for (size_t k = 0; k < c[i].n; k++)
            all[n++] = c[i].ids[k];
    }
    pthread_barrier_destroy(&go);
    free(c);
    assert_int_equal(n, DELIVERIES * TARGETS);
    qsort(all, n, sizeof(all[0]), cmp_i64);
    for (size_t i = 1; i < n; i++)
        if (all[i] == all[i - 1])
            fail_msg("row %lld claimed twice", (long long)all[i]);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.sent, DELIVERIES * TARGETS);
    assert_int_equal(s.queued + s.running, 0);
}

static void recover_requeues_running_rows_only_for_a_single_process_store(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "d", 1000, t, 1), CRCR_OK);
    store_job j;
    assert_int_equal(store_claim(st, 1000, 60000, &j), CRCR_OK);
    store_job_free(&j);
    assert_int_equal(store_recover(st), CRCR_OK);
    crcr_err e = store_claim(st, 2000, 60000, &j);
    if (g_pg) {
        /* Shared store: another instance may be working on the row; its lease decides. */
        assert_int_equal(e, CRCR_E_NOT_FOUND);
        assert_int_equal(store_claim(st, 61001, 60000, &j), CRCR_OK);
    } else {
        assert_int_equal(e, CRCR_OK);
    }
    store_job_free(&j);
}

/* A store that serves (store_recover done), as `crcr serve` opens it. */
static store *open_instance(void)
{
    store *st = open_store();
    assert_int_equal(store_recover(st), CRCR_OK);
    return st;
}

/* Claims at `now` until a row comes or `timeout_ms` of real time passed. Real time is the subject
 * here: a dead holder's session ends on the server when the server notices it, not at an instant
 * the test can choose; the bound only ends a broken test. */
static crcr_err claim_within(store *st, int64_t now, int64_t timeout_ms, store_job *j)
{
    int64_t t0 = clock_mono_ms();
    for (;;) {
        crcr_err e = store_claim(st, now, 60000, j);
        if (e != CRCR_E_NOT_FOUND || clock_mono_ms() - t0 >= timeout_ms)
            return e;
        usleep(20 * 1000);
    }
}

static void claims_of_a_dead_holder_come_back_before_their_lease_and_a_live_ones_stay(void **state)
{
    const char *t0[] = {"a/zero"}, *t1[] = {"a/one"};
    store_job j, mine;
    if (!g_pg) {
        /* One serving process per file: a live holder keeps its rows, its successor takes them
         * over at start. */
        store *a = *state;
        assert_int_equal(store_recover(a), CRCR_OK);
        assert_int_equal(ingest(a, "d0", 1000, t0, 1), CRCR_OK);
        assert_int_equal(store_claim(a, 1000, 60000, &mine), CRCR_OK);
        store *b = open_store();
        assert_int_equal(store_recover(b), CRCR_E_STATE); /* a serves the file */
        assert_int_equal(store_claim(b, 2000, 60000, &j), CRCR_E_NOT_FOUND);
        assert_int_equal(store_claim(a, 2000, 60000, &j), CRCR_E_NOT_FOUND);
        store_close(a); /* gone without finishing, as in a crash */
        *state = b;
        assert_int_equal(store_recover(b), CRCR_OK);
        assert_int_equal(store_claim(b, 2000, 60000, &j), CRCR_OK); /* long before 61000 */
        assert_int_equal(j.id, mine.id);
        assert_int_equal(store_job_finish(b, &j, "sent", 204, NULL, NULL, NULL, 0, 2100), CRCR_OK);
        store_job_free(&j);
        store_job_free(&mine);
        return;
    }
    store *a = *state;
    assert_int_equal(store_recover(a), CRCR_OK);
    store *b = open_instance();
    /* An instance that claims a row and dies: its lock goes with its session. */
    store *c = open_instance();
    assert_int_equal(ingest(a, "d0", 1000, t0, 1), CRCR_OK);
    store_job gone;
    assert_int_equal(store_claim(c, 1000, 60000, &gone), CRCR_OK);
    assert_int_equal(store_claim(b, 2000, 60000, &j), CRCR_E_NOT_FOUND); /* c is alive */
    store_close(c);
    assert_int_equal(claim_within(b, 2000, 30000, &j), CRCR_OK); /* lease until 61000 */
    assert_int_equal(j.id, gone.id);
    assert_non_null(j.reclaimed);
    assert_string_equal(j.reclaimed, "holder_gone");
    assert_int_equal(store_job_finish(b, &j, "sent", 204, NULL, NULL, NULL, 0, 2100), CRCR_OK);
    store_job_free(&j);
    store_job_free(&gone);

    /* A live instance keeps its row, even when every pooled connection it used is gone: the
     * claim belongs to the instance, whose lock lives on its listener's session. */
    assert_int_equal(ingest(a, "d1", 3000, t1, 1), CRCR_OK);
    assert_int_equal(store_claim(a, 3000, 60000, &mine), CRCR_OK);
    assert_int_equal(store_claim(b, 4000, 60000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(a, 4000, 60000, &j), CRCR_E_NOT_FOUND); /* never its own */
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
             "application_name='%s' AND pid <> pg_backend_pid() AND pid NOT IN (SELECT pid FROM "
             "pg_locks WHERE locktype='advisory' AND classid=1668440946 AND granted)",
             g_app_name);
    assert_true(raw(sql) >= 1);
    /* Once the terminated sessions are gone from the server, the claim is decided: a's lock
     * (on its listener's session) still holds the row. */
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE application_name='%s' AND pid <> "
             "pg_backend_pid() AND pid NOT IN (SELECT pid FROM pg_locks WHERE "
             "locktype='advisory' AND classid=1668440946 AND granted)",
             g_app_name);
    int64_t t = clock_mono_ms();
    while (raw(sql) > 0) {
        assert_true(clock_mono_ms() - t < 30000); /* ends a broken test only */
        usleep(10 * 1000);
    }
    assert_int_equal(store_claim(b, 5000, 60000, &j), CRCR_E_NOT_FOUND);
    /* The statements a's ended sessions had prepared run on its fresh ones (prepared anew). */
    assert_int_equal(store_claim(a, 5000, 60000, &j), CRCR_E_NOT_FOUND);
    /* It finishes on a fresh connection, under its lease. */
    assert_int_equal(store_job_finish(a, &mine, "sent", 204, NULL, NULL, NULL, 0, 5000), CRCR_OK);
    store_job_free(&mine);
    /* Past its lease a row is due whatever its holder (the fence of a slow holder). */
    assert_int_equal(ingest(a, "d2", 6000, t0, 1), CRCR_OK);
    assert_int_equal(store_claim(a, 6000, 100, &mine), CRCR_OK);
    assert_int_equal(store_claim(b, 6101, 60000, &j), CRCR_OK);
    assert_non_null(j.reclaimed);
    assert_string_equal(j.reclaimed, "lease_expired");
    assert_int_equal(store_job_finish(a, &mine, "sent", 204, NULL, NULL, NULL, 0, 6200),
                     CRCR_E_STATE);
    store_job_free(&j);
    store_job_free(&mine);
    store_close(b);
}

static void wait_for_work_wakes_on_rows_written_by_another_instance(void **state)
{
    store *st = *state;
    if (!g_pg) {
        /* One process per SQLite file: the in-process notify is the wake-up. */
        size_t rows = 1;
        assert_int_equal(store_wait_for_work(st, 10, &rows), CRCR_E_INVALID);
        assert_int_equal(rows, 0);
        return;
    }
    store *other = open_store();
    /* The first call (re)connects the listener and reports possible missed work. */
    int64_t t0 = clock_mono_ms();
    size_t reconnected = 0;
    while (store_wait_for_work(st, 50, &reconnected) != CRCR_E_NOT_FOUND)
        assert_true(clock_mono_ms() - t0 < 30000); /* ends a broken test only */
    const char *t[] = {"a/one", "a/two", "a/three"};
    assert_int_equal(ingest(other, "from-other", 1000, t, 3), CRCR_OK);
    /* CRCR_OK is the NOTIFY (a wait that runs out is CRCR_E_NOT_FOUND); the bound only ends a
     * broken test. */
    size_t rows = 0;
    assert_int_equal(store_wait_for_work(st, 30000, &rows), CRCR_OK);
    assert_int_equal(rows, 3); /* as many workers to wake as rows, not all of them */
    /* Nothing new: the wait runs out (its timeout, real time, is the subject: 100 ms). */
    assert_int_equal(store_wait_for_work(st, 100, &rows), CRCR_E_NOT_FOUND);
    /* Rows this process wrote are not announced to it (its writers woke its own workers): with
     * one row of its own and two of the other's written, the wake-up counts the other's two. */
    assert_int_equal(ingest(st, "from-self", 1000, t, 1), CRCR_OK);
    const char *t2[] = {"c/one", "c/two"};
    assert_int_equal(ingest(other, "from-other-2", 1000, t2, 2), CRCR_OK);
    size_t total = 0; /* a wait that saw only its own notification ends without work */
    t0 = clock_mono_ms();
    while (total < 2) {
        crcr_err e = store_wait_for_work(st, 1000, &rows);
        if (e == CRCR_OK)
            total += rows;
        else
            assert_int_equal(e, CRCR_E_NOT_FOUND);
        assert_true(clock_mono_ms() - t0 < 30000); /* ends a broken test only */
    }
    assert_int_equal(total, 2);
    /* Redeliver and enqueue wake too. */
    int n = 0;
    assert_int_equal(store_redeliver(other, "from-other", "b/two", 2000, &n), CRCR_OK);
    assert_int_equal(store_wait_for_work(st, 30000, &rows), CRCR_OK);
    assert_int_equal(rows, 1);
    store_close(other);
}

static void a_dropped_connection_is_replaced_without_an_error(void **state)
{
    store *st = *state;
    if (!g_pg) {
        assert_int_equal(store_ping(st), CRCR_OK); /* an embedded file has no connection */
        return;
    }
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(st, "before", 1000, t, 1), CRCR_OK);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
             "application_name='%s' AND pid <> pg_backend_pid()",
             g_app_name);
    assert_true(raw(sql) >= 1);
    /* Every pooled connection is dead now; each next use reconnects and retries once. */
    assert_int_equal(store_ping(st), CRCR_OK);
    assert_int_equal(ingest(st, "after", 1000, t, 1), CRCR_OK);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(st, &s), CRCR_OK);
    assert_int_equal(s.queued, 2);
}

static void a_bad_uri_is_a_configuration_error(void **state)
{
    store *st = NULL;
    char err[256] = "";
    assert_int_equal(store_open("postgresql://[::1", &st, err, sizeof(err)), CRCR_E_CONFIG);
    assert_null(st);
    assert_non_null(strstr(err, "CRCR_STORE"));
    assert_int_equal(store_open("mysql://x", &st, err, sizeof(err)), CRCR_E_CONFIG);
    /* A database that is not there: a store error (the relay exits and is restarted). */
    assert_int_equal(
        store_open("postgresql://nobody@127.0.0.1:1/x?connect_timeout=2", &st, err, sizeof(err)),
        CRCR_E_STORE);
    assert_null(st);
    assert_non_null(strstr(err, "cannot connect"));
}

static void jobs_settle_records_each_outcome_under_its_own_fence(void **state)
{
    store *st = *state;
    const char *t[] = {"a/one", "b/two", "c/three"};
    assert_int_equal(ingest(st, "d", 1000, t, 3), CRCR_OK);
    store_job a, b, c, c2;
    assert_int_equal(store_claim(st, 1000, 1000, &a), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 1000, &b), CRCR_OK);
    assert_int_equal(store_claim(st, 1000, 100, &c), CRCR_OK);
    assert_int_equal(store_claim(st, 1101, 1000, &c2), CRCR_OK); /* c's lease ran out */
    assert_int_equal(c2.id, c.id);
    store_settle items[3] = {
        {.job = &a, .finish = true, .state = "sent", .http_status = 204, .now = 1200},
        {.job = &b,
         .next_at = 5000,
         .count_attempt = true,
         .http_status = 502,
         .error = "HTTP 502"},
        {.job = &c, .finish = true, .state = "sent", .http_status = 204, .now = 1200},
    };
    assert_int_equal(store_jobs_settle(st, items, 3), CRCR_OK);
    assert_int_equal(items[0].result, CRCR_OK);
    assert_int_equal(items[1].result, CRCR_OK);
    assert_int_equal(items[2].result, CRCR_E_STATE); /* fenced off: c2 holds the row */
    store_settle late = {.job = &c2,
                         .finish = true,
                         .state = "dead",
                         .http_status = 422,
                         .error = "Unprocessable",
                         .note = "n",
                         .now = 1300};
    assert_int_equal(store_jobs_settle(st, &late, 1), CRCR_OK);
    assert_int_equal(late.result, CRCR_OK);
    dview *v = view(st, "d");
    assert_int_equal(v->n, 3);
    assert_string_equal(v->jobs[0].state, "sent");
    assert_int_equal(v->jobs[0].last_status, 204);
    assert_int_equal(v->jobs[0].done_at, 1200);
    assert_string_equal(v->jobs[1].state, "queued");
    assert_int_equal(v->jobs[1].attempts, 1);
    assert_int_equal(v->jobs[1].next_attempt_at, 5000);
    assert_string_equal(v->jobs[1].error, "HTTP 502");
    assert_string_equal(v->jobs[2].state, "dead");
    assert_int_equal(v->jobs[2].last_status, 422);
    assert_string_equal(v->jobs[2].note, "n");
    free(v);
    store_job_free(&a);
    store_job_free(&b);
    store_job_free(&c);
    store_job_free(&c2);
}

typedef struct kv_seen {
    char keys[8][32];
    char vals[8][16];
    size_t n;
} kv_seen;

static void on_kv(void *ctx, const char *key, const char *value, size_t len)
{
    kv_seen *s = ctx;
    if (s->n >= 8)
        return;
    snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", key);
    snprintf(s->vals[s->n], sizeof(s->vals[0]), "%.*s", (int)len, value);
    s->n++;
}

static void kv_scan_lists_live_keys_of_a_prefix_and_delete_removes_one(void **state)
{
    store *st = *state;
    assert_int_equal(store_kv_put(st, "p:b", "2", 1, 0), CRCR_OK);
    assert_int_equal(store_kv_put(st, "p:a", "1", 1, 9000), CRCR_OK);
    assert_int_equal(store_kv_put(st, "p:c", "3", 1, 500), CRCR_OK); /* expired at 1000 */
    assert_int_equal(store_kv_put(st, "p", "x", 1, 0), CRCR_OK);
    assert_int_equal(store_kv_put(st, "p;", "x", 1, 0), CRCR_OK);  /* the byte after ':' */
    assert_int_equal(store_kv_put(st, "P:z", "x", 1, 0), CRCR_OK); /* prefixes are exact */
    assert_int_equal(store_kv_put(st, "q:a", "x", 1, 0), CRCR_OK);
    kv_seen s = {0};
    assert_int_equal(store_kv_scan(st, "p:", 1000, 10, on_kv, &s), CRCR_OK);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.keys[0], "p:a");
    assert_string_equal(s.vals[0], "1");
    assert_string_equal(s.keys[1], "p:b");
    assert_string_equal(s.vals[1], "2");
    memset(&s, 0, sizeof(s));
    assert_int_equal(store_kv_scan(st, "p:", 1000, 1, on_kv, &s), CRCR_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(store_kv_delete(st, "p:a"), CRCR_OK);
    assert_int_equal(store_kv_delete(st, "p:none"), CRCR_OK);
    memset(&s, 0, sizeof(s));
    assert_int_equal(store_kv_scan(st, "p:", 1000, 10, on_kv, &s), CRCR_OK);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.keys[0], "p:b");
    assert_int_equal(store_kv_scan(st, "", 1000, 10, on_kv, &s), CRCR_E_INVALID);
}

/* store_gh_slots until it grants `want` or `timeout_ms` of real time passed (a dead instance's
 * share is dropped once the server has seen it go). */
static long slots_within(store *st, long total, long want, int64_t timeout_ms)
{
    int64_t t0 = clock_mono_ms();
    long got = -1;
    for (;;) {
        assert_int_equal(store_gh_slots(st, total, want, &got), CRCR_OK);
        if (got >= want || clock_mono_ms() - t0 >= timeout_ms)
            return got;
        usleep(20 * 1000);
    }
}

static void gh_slots_share_the_budget_between_live_instances(void **state)
{
    long got = -1;
    if (!g_pg) { /* one serving process: the whole budget, never more */
        store *a = *state;
        assert_int_equal(store_recover(a), CRCR_OK);
        assert_int_equal(store_gh_slots(a, 10, 15, &got), CRCR_OK);
        assert_int_equal(got, 10);
        assert_int_equal(store_gh_slots(a, 10, 4, &got), CRCR_OK);
        assert_int_equal(got, 4);
        return;
    }
    store *a = *state;
    assert_int_equal(store_recover(a), CRCR_OK);
    store *b = open_instance();
    assert_int_equal(store_gh_slots(a, 10, 7, &got), CRCR_OK);
    assert_int_equal(got, 7);
    assert_int_equal(store_gh_slots(b, 10, 7, &got), CRCR_OK);
    assert_int_equal(got, 3); /* what a left */
    assert_int_equal(store_gh_slots(a, 10, 2, &got), CRCR_OK);
    assert_int_equal(got, 2); /* a gives 5 back... */
    assert_int_equal(store_gh_slots(b, 10, 7, &got), CRCR_OK);
    assert_int_equal(got, 7); /* ...which b may take */
    assert_int_equal(store_gh_slots(b, 10, 0, &got), CRCR_OK);
    assert_int_equal(got, 0);
    assert_int_equal(store_gh_slots(a, 10, 10, &got), CRCR_OK);
    assert_int_equal(got, 10); /* alone, an instance may use all of it */
    /* A crashed instance's share comes back: c takes what a held once a is gone. */
    store *c = open_instance();
    assert_int_equal(store_gh_slots(c, 10, 4, &got), CRCR_OK);
    assert_int_equal(got, 0);
    store_close(a);
    assert_int_equal(slots_within(c, 10, 4, 30000), 4);
    assert_int_equal(store_gh_slots(b, 10, 10, &got), CRCR_OK);
    assert_int_equal(got, 6);
    /* A store that is not an instance (a command) shares nothing. */
    store *cmd = open_store();
    assert_int_equal(store_gh_slots(cmd, 10, 3, &got), CRCR_OK);
    assert_int_equal(got, 3);
    store_close(cmd);
    store_close(c);
    *state = b;
}

/* ---- supersession and Depends-On pairs (schema 4, §3.12, §3.13) ---- */

/* A pull_request delivery of PR 42 at head `sha` to targets[0..n), target i paired with PR
 * pairs[i] (0: none; pairs may be NULL), superseding per `sup` (NULL: a plain ingest). */
static crcr_err ingest_pr(store *st, const char *id, int64_t at, const char *sha,
                          const char *const *targets, size_t n, const int64_t *pairs,
                          store_supersede *sup)
{
    store_new_job jobs[16];
    char bodies[16][96];
    for (size_t i = 0; i < n; i++) {
        jobs[i] = (store_new_job){.kind = "dispatch", .target = targets[i], .due_at = at};
        if (pairs && pairs[i]) {
            snprintf(bodies[i], sizeof(bodies[i]),
                     "{\"depends_on\":{\"repository\":\"%s\",\"number\":%lld}}", targets[i],
                     (long long)pairs[i]);
            jobs[i].pair_number = pairs[i];
            jobs[i].body = bodies[i];
            jobs[i].body_len = strlen(bodies[i]);
        }
    }
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "synchronize",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = 42,
                        .head_sha = sha,
                        .received_at = at,
                        .payload = "{\"x\":1}",
                        .payload_len = 7,
                        .status = "queued"};
    return store_ingest_superseding(st, &d, jobs, n, sup, NULL);
}

/* store_ended_fn: a check run per ended run, keyed "k:<job>", after its seq_key only. */
typedef struct ended_fx {
    int calls;
    char jobs[8][64], reasons[8][16], pair[256];
    char key[64];
} ended_fx;

static crcr_err on_ended(void *ctx, const store_run_row *run, const char *pair, size_t pair_len,
                         store_new_job *jobs, size_t max, size_t *n)
{
    ended_fx *fx = ctx;
    if (fx->calls < 8) {
        copy_str(fx->jobs[fx->calls], sizeof(fx->jobs[0]), run->job_name);
        copy_str(fx->reasons[fx->calls], sizeof(fx->reasons[0]), run->ended);
    }
    fx->calls++;
    snprintf(fx->pair, sizeof(fx->pair), "%.*s", (int)pair_len, pair ? pair : "");
    snprintf(fx->key, sizeof(fx->key), "k:%s", run->job_name);
    *n = 0;
    if (max < 1 || strcmp(run->state, "completed") != 0 || strcmp(run->conclusion, "cancelled"))
        return CRCR_OK;
    jobs[0] = (store_new_job){.kind = "check_run",
                              .target = "pytorch/pytorch",
                              .seq_key = fx->key,
                              .body = "{\"c\":0}",
                              .body_len = 7,
                              .after_seq = true};
    *n = 1;
    return CRCR_OK;
}

static store_run_update job_upd(const char *delivery, const char *repo, const char *job,
                                const char *status, const char *conclusion, int64_t now)
{
    store_run_update u = upd(delivery, repo, 7, status, conclusion, now);
    u.key.job_name = job;
    return u;
}

/* The run of (delivery, repo, job) as listed, with its end reason. */
typedef struct ended_row {
    bool found;
    char state[16], conclusion[32], ended[16];
    int64_t completed_at, exec_ms;
} ended_row;

typedef struct ended_find {
    const char *delivery, *job;
    ended_row out;
} ended_find;

static void on_ended_row(void *ctx, const store_run_row *r)
{
    ended_find *f = ctx;
    if (strcmp(r->delivery_id, f->delivery) != 0 || strcmp(r->job_name, f->job) != 0)
        return;
    f->out.found = true;
    copy_str(f->out.state, sizeof(f->out.state), r->state);
    copy_str(f->out.conclusion, sizeof(f->out.conclusion), r->conclusion);
    copy_str(f->out.ended, sizeof(f->out.ended), r->ended);
    f->out.completed_at = r->completed_at;
    f->out.exec_ms = r->exec_ms;
}

static ended_row run_row(store *st, const char *delivery, const char *job)
{
    ended_find f = {.delivery = delivery, .job = job};
    store_run_filter filter = {.pr_number = 42, .limit = 100, .no_payload = true};
    assert_int_equal(store_list_runs(st, &filter, on_ended_row, &f), CRCR_OK);
    assert_true(f.out.found);
    return f.out;
}

static const jrow *job_of(const dview *v, const char *kind, const char *target)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->jobs[i].kind, kind) == 0 && strcmp(v->jobs[i].target, target) == 0)
            return &v->jobs[i];
    fail_msg("no %s row for %s", kind, target);
    return NULL;
}

/* The end of a delivery's dispatch to `target` as get_delivery reads it. */
typedef struct end_of {
    const char *target;
    char ended[16], by[64];
} end_of;

static void on_end_job(void *ctx, const store_job_row *r)
{
    end_of *e = ctx;
    if (strcmp(r->kind, "dispatch") == 0 && strcmp(r->target, e->target) == 0) {
        copy_str(e->ended, sizeof(e->ended), r->ended);
        copy_str(e->by, sizeof(e->by), r->ended_by);
    }
}

static end_of dispatch_end(store *st, const char *id, const char *target)
{
    end_of e = {.target = target};
    assert_int_equal(store_get_delivery(st, id, NULL, on_end_job, &e), CRCR_OK);
    return e;
}

static void a_newer_dispatch_ends_the_older_ones_runs_and_queued_rows_at_once(void **state)
{
    store *st = *state;
    const char *t[] = {"r/one", "r/two"};
    assert_int_equal(ingest_pr(st, "a", 1000, "s1", t, 2, NULL, NULL), CRCR_OK);
    /* r/one's dispatch went out, r/two's failed once and waits queued. */
    store_job j[2];
    size_t got = 0;
    assert_int_equal(store_claim_batch(st, 1000, 60000, j, 2, &got), CRCR_OK);
    assert_int_equal(got, 2);
    for (size_t i = 0; i < got; i++) {
        if (strcmp(j[i].target, "r/one") == 0)
            assert_int_equal(store_job_finish(st, &j[i], "sent", 204, NULL, NULL, NULL, 0, 1100),
                             CRCR_OK);
        else
            assert_int_equal(store_job_retry(st, &j[i], 99000, true, 502, "bad gateway"), CRCR_OK);
        store_job_free(&j[i]);
    }
    store_run_result res;
    char why[128] = "";
    static const char *const jobs[] = {"build", "test", "done"};
    /* The jobs echo one webhook (SQLite keeps it once, until no open run points at it). */
    char echo[1200], bodies[3][1400];
    snprintf(echo, sizeof(echo), "{\"after\":\"%01100d\"}", 5);
    for (size_t i = 0; i < 3; i++) {
        store_run_update u = job_upd("a", "R/One", jobs[i], "in_progress", NULL, 2000);
        echo_body(&u, bodies[i], sizeof(bodies[i]), echo, (int)i);
        assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    }
    if (!g_pg)
        assert_int_equal(raw("SELECT refs FROM run_echoes"), 3);
    store_run_update u = job_upd("a", "r/one", "done", "completed", "success", 2500);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    store_new_job started = {.kind = "check_run",
                             .target = "pytorch/pytorch",
                             .seq_key = "k:build",
                             .body = "{}",
                             .body_len = 2,
                             .due_at = 2000};
    assert_int_equal(store_enqueue(st, "a", &started, 1), CRCR_OK);

    ended_fx fx = {0};
    store_supersede sup = {.reason = "superseded", .effects = on_ended, .ctx = &fx};
    assert_int_equal(ingest_pr(st, "b", 3000, "s2", t, 2, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 2);
    assert_int_equal(sup.runs, 2); /* build and test; done had completed */
    if (!g_pg)                     /* the runs it ended point at no echo any more */
        assert_int_equal(raw("SELECT count(*) FROM run_echoes"), 0);
    assert_int_equal(sup.withdrawn, 1);
    assert_int_equal(fx.calls, 2);
    assert_string_equal(fx.reasons[0], "superseded");
    /* A cancelled check run only where one was started (build's seq_key). */
    dview *v = view(st, "b");
    assert_int_equal(count_kind(v, "check_run"), 1);
    free(v);
    for (size_t i = 0; i < 2; i++) {
        ended_row r = run_row(st, "a", jobs[i]);
        assert_string_equal(r.state, "completed");
        assert_string_equal(r.conclusion, "cancelled");
        assert_string_equal(r.ended, "superseded");
        assert_int_equal(r.completed_at, 3000);
        assert_int_equal(r.exec_ms, 1000);
    }
    ended_row done = run_row(st, "a", "done");
    assert_string_equal(done.conclusion, "success");
    assert_string_equal(done.ended, "(null)");
    v = view(st, "a");
    assert_string_equal(job_of(v, "dispatch", "r/one")->state, "sent");
    assert_string_equal(job_of(v, "dispatch", "r/two")->state, "withdrawn");
    free(v);
    end_of e = dispatch_end(st, "a", "r/two");
    assert_string_equal(e.ended, "superseded");
    assert_string_equal(e.by, "b");
    assert_string_equal(dispatch_end(st, "b", "r/one").ended, "(null)");
    store_outbox_stats os;
    assert_int_equal(store_outbox_stats_get(st, &os), CRCR_OK);
    assert_int_equal(os.withdrawn, 1);
    /* Nothing of it is a zombie, and a withdrawn row is never claimed. */
    rlist z = {0};
    assert_int_equal(store_zombies(st, 1 << 30, 10, on_run, &z), CRCR_OK);
    assert_int_equal(z.n, 0);

    /* A late completed is recorded, keeps the end and says so; an in_progress is a duplicate. */
    effects_ctx cfx = {0};
    u = job_upd("a", "r/one", "build", "completed", "success", 4000);
    assert_int_equal(apply(st, &u, &cfx, &res, why, sizeof(why)), CRCR_OK);
    assert_false(res.duplicate);
    assert_string_equal(res.ended, "superseded");
    assert_int_equal(cfx.calls, 1);
    assert_string_equal(cfx.seen.ended, "superseded");
    ended_row late = run_row(st, "a", "build");
    assert_string_equal(late.conclusion, "success");
    assert_string_equal(late.ended, "superseded");
    assert_int_equal(apply(st, &u, &cfx, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    u = job_upd("a", "r/one", "build", "in_progress", NULL, 4100);
    assert_int_equal(apply(st, &u, &cfx, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    /* A first callback of a dispatch ended before any: recorded in progress, ended. */
    u = job_upd("a", "r/two", "late", "in_progress", NULL, 4200);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_string_equal(res.ended, "superseded");
    ended_row first = run_row(st, "a", "late");
    assert_string_equal(first.state, "in_progress");
    assert_string_equal(first.ended, "superseded");
    memset(&z, 0, sizeof(z));
    assert_int_equal(store_zombies(st, 1 << 30, 10, on_run, &z), CRCR_OK);
    assert_int_equal(z.n, 0);
    /* The sweeper's timeout (only_open) changes nothing of an ended run. */
    u = job_upd("a", "r/two", "late", "completed", "timed_out", 5000);
    u.single_shot = u.only_open = true;
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_true(res.duplicate);
    /* The newer dispatch's runs are not ended. */
    u = job_upd("b", "r/one", "build", "in_progress", NULL, 5000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    assert_string_equal(res.ended, "");
}

/* A write the database refuses, in the first statement of its transaction (the delivery: on
 * PostgreSQL BEGIN and the PR's lock travel with it) or in a later one (its outbox rows): the
 * ingest fails, nothing of it stays, and the store goes on with the next ones, the PR's lock
 * free again (the supersession of the next delivery of that PR runs). */
static void an_ingest_the_database_refuses_leaves_nothing_and_the_next_goes_through(void **state)
{
    store *st = *state;
    if (g_pg) {
        raw("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'refused by the test'; END$$");
        raw("CREATE TRIGGER refuse_delivery BEFORE INSERT ON deliveries FOR EACH ROW WHEN "
            "(NEW.delivery_id LIKE 'refused-%') EXECUTE FUNCTION refuse()");
        raw("CREATE TRIGGER refuse_rows BEFORE INSERT ON outbox FOR EACH ROW WHEN "
            "(NEW.delivery_id LIKE 'rows-refused-%') EXECUTE FUNCTION refuse()");
    } else {
        raw("CREATE TRIGGER refuse_delivery BEFORE INSERT ON deliveries WHEN NEW.delivery_id "
            "LIKE 'refused-%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
        raw("CREATE TRIGGER refuse_rows BEFORE INSERT ON outbox WHEN NEW.delivery_id LIKE "
            "'rows-refused-%' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
    }
    const char *t[] = {"a/one", "a/two"};
    store_supersede sup = {.reason = "superseded"};
    assert_int_equal(ingest_pr(st, "first", 1000, "s1", t, 2, NULL, &sup), CRCR_OK);
    /* Several times over: a session the failure spoilt would fail the next ingest on it. */
    for (int i = 0; i < 3; i++) {
        char refused[32], rows_refused[32], next[32];
        snprintf(refused, sizeof(refused), "refused-%d", i);
        snprintf(rows_refused, sizeof(rows_refused), "rows-refused-%d", i);
        snprintf(next, sizeof(next), "next-%d", i);
        sup = (store_supersede){.reason = "superseded"};
        assert_int_equal(ingest_pr(st, refused, 2000 + i, "s2", t, 2, NULL, &sup), CRCR_E_STORE);
        assert_int_equal(ingest(st, refused, 2000 + i, t, 2), CRCR_E_STORE); /* no PR, no lock */
        sup = (store_supersede){.reason = "superseded"};
        assert_int_equal(ingest_pr(st, rows_refused, 2000 + i, "s2", t, 2, NULL, &sup),
                         CRCR_E_STORE);
        assert_int_equal(sup.dispatches, 0); /* rolled back: nothing was ended */
        /* The PR's next delivery supersedes the one before it, as if nothing had happened. */
        sup = (store_supersede){.reason = "superseded"};
        assert_int_equal(ingest_pr(st, next, 3000 + i, i % 2 ? "s3" : "s4", t, 2, NULL, &sup),
                         CRCR_OK);
        assert_int_equal(sup.dispatches, 2);
    }
    assert_int_equal(raw("SELECT count(*) FROM deliveries WHERE delivery_id LIKE '%refused-%'"), 0);
    assert_int_equal(raw("SELECT count(*) FROM outbox WHERE delivery_id LIKE '%refused-%'"), 0);
    assert_int_equal(raw("SELECT count(*) FROM deliveries"), 4);
    assert_int_equal(raw("SELECT count(*) FROM outbox WHERE kind='dispatch'"), 8);
}

static void only_another_head_or_pair_is_superseded_unless_every_one_is(void **state)
{
    store *st = *state;
    const char *t[] = {"r/one"};
    ended_fx fx = {0};
    store_supersede sup = {.reason = "superseded", .effects = on_ended, .ctx = &fx};
    assert_int_equal(ingest_pr(st, "a", 1000, "s1", t, 1, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 0);
    /* The same head again (a re-opened PR): nothing ended. */
    assert_int_equal(ingest_pr(st, "b", 2000, "s1", t, 1, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 0);
    /* A redelivery: nothing written, nothing ended; to one target or several (on PostgreSQL
     * rows in one batched statement, the delivery's INSERT taking the PR's lock). */
    assert_int_equal(ingest_pr(st, "b", 2500, "s9", t, 1, NULL, &sup), CRCR_E_DUPLICATE);
    assert_int_equal(sup.dispatches, 0);
    const char *two[] = {"r/one", "r/two"};
    assert_int_equal(ingest_pr(st, "b", 2500, "s9", two, 2, NULL, &sup), CRCR_E_DUPLICATE);
    assert_int_equal(sup.dispatches, 0);
    assert_int_equal(raw("SELECT count(*) FROM outbox WHERE delivery_id='b'"), 1);
    assert_string_equal(dispatch_end(st, "a", "r/one").ended, "(null)");
    /* The same head paired with another PR: both older ones end. */
    const int64_t seven[] = {7};
    assert_int_equal(ingest_pr(st, "c", 3000, "s1", t, 1, seven, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 2);
    assert_string_equal(dispatch_end(st, "b", "r/one").by, "c");
    /* The same head and pair: nothing; a closed PR (every one): c and d as pr_closed. */
    assert_int_equal(ingest_pr(st, "d", 4000, "s1", t, 1, seven, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 0);
    store_supersede closed = {.reason = "pr_closed", .any_sha = true};
    assert_int_equal(ingest_pr(st, "e", 5000, "s1", t, 1, NULL, &closed), CRCR_OK);
    assert_int_equal(closed.dispatches, 2);
    assert_string_equal(dispatch_end(st, "d", "r/one").ended, "pr_closed");
    assert_string_equal(dispatch_end(st, "a", "r/one").ended, "superseded"); /* kept */
    /* No PR (a push) or no reason: a plain ingest. */
    store_supersede none = {.reason = "not-a-reason"};
    assert_int_equal(ingest_pr(st, "f", 6000, "s2", t, 1, NULL, &none), CRCR_OK);
    assert_int_equal(none.dispatches, 0);
    assert_string_equal(dispatch_end(st, "e", "r/one").ended, "(null)");
}

/* A fan-out whose targets differ: one with an older dispatch at another head (ended), one at
 * this head already (passed over), one new to the PR (its head written). PostgreSQL judges them
 * in one statement and writes the new heads in one; the outcome is the one-by-one one. */
static void a_fan_out_ends_only_the_targets_at_another_head(void **state)
{
    store *st = *state;
    const char *ab[] = {"r/a", "r/b"}, *a[] = {"r/a"}, *abc[] = {"r/a", "r/b", "r/c"};
    store_supersede sup = {.reason = "superseded"};
    assert_int_equal(ingest_pr(st, "a", 1000, "s1", ab, 2, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 0);
    assert_int_equal(raw("SELECT count(*) FROM dispatch_heads WHERE head_sha='s1'"), 2);
    assert_int_equal(ingest_pr(st, "b", 2000, "s2", a, 1, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 1); /* a's r/a */

    /* r/a: b is at s2, ended; r/b: at s1, passed over; r/c: new, its head written. */
    assert_int_equal(ingest_pr(st, "c", 3000, "s1", abc, 3, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 1);
    assert_string_equal(dispatch_end(st, "b", "r/a").by, "c");
    assert_string_equal(dispatch_end(st, "a", "r/b").ended, "(null)");
    assert_int_equal(raw("SELECT count(*) FROM dispatch_heads WHERE head_sha='s1' AND "
                         "delivery_id='c'"),
                     2); /* r/a and r/c; r/b's head stays a's */
    assert_int_equal(raw("SELECT count(*) FROM dispatch_heads WHERE head_sha='s1'"), 3);

    /* All at s1 now: nothing ended. Then a new head ends every open one: r/a c; r/b a, c, d;
     * r/c c, d; and r/a's d. */
    assert_int_equal(ingest_pr(st, "d", 4000, "s1", abc, 3, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 0);
    assert_int_equal(ingest_pr(st, "e", 5000, "s3", abc, 3, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 7);
    assert_string_equal(dispatch_end(st, "a", "r/b").by, "e");
    assert_string_equal(dispatch_end(st, "d", "r/c").by, "e");
    assert_int_equal(raw("SELECT count(*) FROM dispatch_heads WHERE head_sha='s3'"), 3);
}

/* More open older dispatches than a fan-out's supersession reads at once (PostgreSQL 1,024,
 * SQLite 4,096 in one statement): the rest are ended target by target, and every one ends. */
static void a_new_head_past_one_read_ends_every_older_dispatch(void **state)
{
    store *st = *state;
    const char *t[16];
    char names[16][8];
    for (size_t i = 0; i < 16; i++) {
        snprintf(names[i], sizeof(names[i]), "r/%02zu", i);
        t[i] = names[i];
    }
    /* At one head every dispatch stays open: 16 per delivery, past the read's size. */
    size_t deliveries = g_pg ? 65 : 257;
    store_supersede sup = {.reason = "superseded"};
    char id[32];
    for (size_t k = 0; k < deliveries; k++) {
        snprintf(id, sizeof(id), "old-%zu", k);
        assert_int_equal(ingest_pr(st, id, 1000 + (int64_t)k, "s1", t, 16, NULL, &sup), CRCR_OK);
        assert_int_equal(sup.dispatches, 0);
    }
    assert_int_equal(ingest_pr(st, "new", 100000, "s2", t, 16, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, (int)(deliveries * 16));
    assert_int_equal(raw("SELECT count(*) FROM dispatch_ends WHERE by_delivery='new'"),
                     (int64_t)(deliveries * 16));
    assert_string_equal(dispatch_end(st, "old-0", "r/00").by, "new");
    assert_string_equal(dispatch_end(st, "old-64", "r/15").by, "new");
}

static void a_push_to_a_paired_pr_redispatches_the_latest_dispatch_of_each_upstream_pr(void **state)
{
    store *st = *state;
    const char *t[] = {"r/one", "r/two"};
    const int64_t pairs[] = {7, 0};
    assert_int_equal(ingest_pr(st, "p1", 1000, "s1", t, 2, pairs, NULL), CRCR_OK);
    store_dispatch d;
    buf_init(&d.payload, 0);
    assert_int_equal(store_dispatch_get(st, "p1", "r/one", false, &d), CRCR_OK);
    assert_string_equal(d.pair, "{\"depends_on\":{\"repository\":\"r/one\",\"number\":7}}");
    assert_int_equal(store_dispatch_get(st, "p1", "r/two", false, &d), CRCR_OK);
    assert_string_equal(d.pair, "");

    const char body[] = "{\"depends_on\":{\"repository\":\"r/one\",\"number\":7}}";
    store_new_job job = {.kind = "dispatch",
                         .target = "r/one",
                         .body = body,
                         .body_len = sizeof(body) - 1,
                         .due_at = 2000,
                         .pair_number = 7};
    store_supersede sup = {.reason = "superseded", .any_sha = true};
    store_pair_hit hits[4];
    size_t n = 9;
    /* Another PR of the repository, or another repository: nothing. */
    assert_int_equal(store_pair_redispatch(st, "r/one", 8, "g0", 2000, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(store_pair_redispatch(st, "r/two", 7, "g0", 2000, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 0);

    assert_int_equal(store_pair_redispatch(st, "R/ONE", 7, "g1", 2000, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(hits[0].delivery_id, "g1:pr42");
    assert_int_equal(hits[0].pr_number, 42);
    assert_false(hits[0].duplicate);
    assert_int_equal(sup.dispatches, 1);
    dview *v = view(st, "g1:pr42");
    assert_string_equal(v->head_sha, "s1");
    assert_int_equal(v->pr_number, 42);
    assert_string_equal(v->action, "synchronize");
    assert_int_equal(v->payload_len, 7);
    assert_memory_equal(v->payload, "{\"x\":1}", 7);
    assert_int_equal(v->n, 1);
    assert_string_equal(v->jobs[0].target, "r/one");
    assert_int_equal(v->jobs[0].body_len, sizeof(body) - 1);
    free(v);
    assert_string_equal(dispatch_end(st, "p1", "r/one").by, "g1:pr42");
    assert_string_equal(dispatch_end(st, "p1", "r/two").ended, "(null)");

    /* The same push again: a duplicate, nothing done. */
    assert_int_equal(store_pair_redispatch(st, "r/one", 7, "g1", 2100, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 1);
    assert_true(hits[0].duplicate);
    assert_int_equal(sup.dispatches, 0);
    /* The next push copies the latest dispatch and ends it. */
    assert_int_equal(store_pair_redispatch(st, "r/one", 7, "g2", 2200, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 1);
    assert_string_equal(dispatch_end(st, "g1:pr42", "r/one").by, "g2:pr42");
    /* A closed PR is paired no more. */
    store_supersede closed = {.reason = "pr_closed", .any_sha = true};
    assert_int_equal(ingest_pr(st, "c", 3000, "s1", t, 2, NULL, &closed), CRCR_OK);
    assert_int_equal(store_pair_redispatch(st, "r/one", 7, "g3", 3100, &job, &sup, hits, 4, &n),
                     CRCR_OK);
    assert_int_equal(n, 0);
    /* A base id without room for ":pr<N>" is refused. */
    char longid[CRCR_DELIVERY_ID_MAX];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(store_pair_redispatch(st, "r/one", 7, longid, 3100, &job, &sup, hits, 4, &n),
                     CRCR_E_INVALID);
}

/* Schema 5 -> 6 keeps every run and adds what supersession needs: runs.ended (NULL: none ended),
 * dispatch_ends, pairs and dispatch_heads. The version-5 store is made by taking them away again;
 * a run in progress of it is then superseded like any other. */
static void version_5_runs_can_be_superseded_after_the_upgrade(void **state)
{
    store *st = *state;
    const char *t[] = {"r/one"};
    assert_int_equal(ingest_pr(st, "a", 1000, "s1", t, 1, NULL, NULL), CRCR_OK);
    store_run_result res;
    char why[128] = "";
    store_run_update u = job_upd("a", "r/one", "build", "in_progress", NULL, 2000);
    assert_int_equal(apply(st, &u, NULL, &res, why, sizeof(why)), CRCR_OK);
    store_close(st);
    *state = NULL;
    raw("DROP INDEX IF EXISTS runs_hud"); /* SQLite's covers runs.ended */
    raw("ALTER TABLE runs DROP COLUMN ended");
    raw("DROP TABLE dispatch_ends");
    raw("DROP TABLE pairs");
    raw("DROP TABLE dispatch_heads");
    raw("UPDATE schema_version SET version = 5");
    *state = st = open_store();
    assert_int_equal(raw("SELECT max(version) FROM schema_version"), CRCR_SCHEMA_VERSION);
    assert_int_equal(raw("SELECT count(*) FROM runs WHERE ended IS NULL"), 1);
    assert_int_equal(raw("SELECT count(*) FROM dispatch_ends"), 0);
    assert_int_equal(raw("SELECT count(*) FROM pairs"), 0);
    assert_int_equal(raw("SELECT count(*) FROM dispatch_heads"), 0);
    ended_row before = run_row(st, "a", "build");
    assert_string_equal(before.state, "in_progress");
    assert_string_equal(before.ended, "(null)");
    /* The older store's run is superseded by a dispatch of a new head. */
    store_supersede sup = {.reason = "superseded"};
    assert_int_equal(ingest_pr(st, "b", 3000, "s2", t, 1, NULL, &sup), CRCR_OK);
    assert_int_equal(sup.dispatches, 1);
    assert_int_equal(sup.runs, 1);
    ended_row after = run_row(st, "a", "build");
    assert_string_equal(after.state, "completed");
    assert_string_equal(after.conclusion, "cancelled");
    assert_string_equal(after.ended, "superseded");
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

/* No argument: both stores. "sqlite" or "postgresql": that one (ctest runs them as two entries,
 * side by side); "postgresql" without CRCR_TEST_PG_URI exits 77 (skipped). */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    if (only && strcmp(only, "sqlite") != 0 && strcmp(only, "postgresql") != 0) {
        fprintf(stderr, "usage: %s [sqlite|postgresql]\n", argv[0]);
        return 2;
    }
    log_set_level(CRCR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        T(open_records_the_schema_version_and_reopens),
        T(version_4_run_ids_become_text),
        T(open_refuses_a_schema_newer_than_the_binary),
        T(ingest_keeps_payload_bytes_exactly_and_refuses_a_known_delivery),
        T(claimed_rows_carry_their_own_deliverys_payload),
        T(a_refused_duplicate_leaves_the_sessions_usable),
        T(an_operation_returns_to_its_session_and_sessions_keep_their_mode),
        T(ingest_without_jobs_records_an_ignored_delivery),
        T(claim_hands_out_due_rows_in_due_order_with_their_delivery),
        T(claim_takes_back_a_row_whose_lease_expired),
        T(ingest_stores_known_outcomes_finished),
        T(a_claim_takes_over_an_ingests_row_once_its_lease_ran_out),
        T(ingest_refuses_a_dispatch_target_twice),
        T(ingest_claims_the_rows_given_a_lease),
        T(ingest_hands_rows_over_before_its_sync),
        T(a_lost_lease_fences_finish_retry_and_renew),
        T(a_claimed_rows_record_is_read_before_its_outcome_and_fenced),
        T(claim_of_a_job_row_carries_its_own_body),
        T(finish_and_retry_record_outcomes_and_attempts),
        T(redeliver_requeues_dispatch_rows_and_adds_a_missing_repo),
        T(list_deliveries_filters_by_state_and_repo_newest_first),
        T(delivery_status_follows_its_rows),
        T(enqueue_adds_rows_but_never_a_second_dispatch_of_a_target),
        T(claim_keeps_rows_of_one_seq_key_in_creation_order),
        T(claim_batch_takes_due_rows_in_order_up_to_its_size),
        T(list_deliveries_filters_by_pull_request),
        T(kv_values_are_bytes_with_expiry),
        T(lease_has_one_holder_until_it_expires),
        T(lease_taken_by_concurrent_instances_has_exactly_one_holder),
        T(ingest_from_concurrent_callers_stores_each_delivery_once),
        T(rate_hit_counts_a_sliding_window_per_repo),
        T(rate_hit_under_concurrency_never_exceeds_the_limit),
        T(retention_deletes_old_finished_data_and_keeps_pending_work),
        T(run_apply_follows_the_state_machine_and_measures_times),
        T(run_apply_single_shot_needs_no_dispatch_and_completes_once),
        T(run_apply_from_concurrent_callers_applies_exactly_once),
        T(run_apply_of_different_runs_from_concurrent_callers_all_apply),
        T(run_apply_counts_a_rate_hit_first),
        T(run_apply_rate_hits_under_concurrency_never_exceed_the_limit),
        T(rate_hit_counts_hits_already_in_the_table),
        T(run_keys_include_the_workflow_name),
        T(run_ids_are_text),
        T(runs_for_sha_gives_the_latest_row_per_workflow_and_job),
        T(zombies_are_in_progress_runs_started_before_the_cutoff),
        T(open_runs_bodies_read_back_whole_when_jobs_echo_one_webhook),
        T(list_runs_filters_orders_and_pages),
        T(wanted_marks_are_per_sha_and_repo_since_a_time),
        T(callback_rejections_are_counted_per_repo_since_a_time),
        T(dispatch_get_returns_the_relays_record_of_a_dispatch),
        T(a_webhook_sized_payload_reads_back_whole),
        T(a_newer_dispatch_ends_the_older_ones_runs_and_queued_rows_at_once),
        T(only_another_head_or_pair_is_superseded_unless_every_one_is),
        T(an_ingest_the_database_refuses_leaves_nothing_and_the_next_goes_through),
        T(a_fan_out_ends_only_the_targets_at_another_head),
        T(a_new_head_past_one_read_ends_every_older_dispatch),
        T(a_push_to_a_paired_pr_redispatches_the_latest_dispatch_of_each_upstream_pr),
        T(version_5_runs_can_be_superseded_after_the_upgrade),
        T(identity_pin_holds_the_first_ids_of_a_name),
        T(budget_take_stays_within_its_limit),
        T(budget_take_under_concurrency_never_exceeds_the_limit),
        T(redelivery_asks_are_bounded_and_wait_for_a_newer_attempt),
        T(redelivery_asked_by_concurrent_instances_is_asked_once),
        T(claim_by_concurrent_workers_hands_out_each_row_once),
        T(recover_requeues_running_rows_only_for_a_single_process_store),
        T(claims_of_a_dead_holder_come_back_before_their_lease_and_a_live_ones_stay),
        T(wait_for_work_wakes_on_rows_written_by_another_instance),
        T(a_dropped_connection_is_replaced_without_an_error),
        T(jobs_settle_records_each_outcome_under_its_own_fence),
        T(kv_scan_lists_live_keys_of_a_prefix_and_delete_removes_one),
        T(gh_slots_share_the_budget_between_live_instances),
        cmocka_unit_test(a_bad_uri_is_a_configuration_error),
    };
    int failed = 0;
    if (!only || strcmp(only, "sqlite") == 0)
        failed += cmocka_run_group_tests_name("store conformance: sqlite", tests, group_sqlite,
                                              group_sqlite_done);
    if (only && strcmp(only, "sqlite") == 0)
        return failed;
    const char *pg = getenv("CRCR_TEST_PG_URI");
    if (pg && *pg) {
        failed += cmocka_run_group_tests_name("store conformance: postgresql", tests, group_pg,
                                              group_pg_done);
    } else {
        printf("[  SKIPPED ] store conformance: postgresql (CRCR_TEST_PG_URI is not set)\n");
        if (only)
            return 77;
    }
    return failed;
}
