/* Unit tests for the store interface on the SQLite backend (and the PostgreSQL backend's SQLSTATE
 * mapping of write faults). */
#include <errno.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>
#include <sqlite3.h>

#include "store.h"
#include "store_pg.h"
#include "store_sqlite.h"

typedef struct fixture {
    char dir[64];
    char uri[128];
    store *st;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/crcr-store-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->uri, sizeof(f->uri), "sqlite:%s/t.db", f->dir);
    char err[256];
    assert_int_equal(store_open(f->uri, &f->st, err, sizeof(err)), CRCR_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->st);
    char path[160];
    const char *suffixes[] = {"", "-wal", "-shm", "-serve.lock"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/t.db%s", f->dir, suffixes[i]);
        unlink(path);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static crcr_err ingest(store *st, const char *id, const char **repos, size_t n, int64_t now)
{
    store_new_job jobs[16];
    for (size_t i = 0; i < n; i++)
        jobs[i] = (store_new_job){.kind = "dispatch", .target = repos[i], .due_at = now};
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "opened",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = 42,
                        .head_sha = "abc",
                        .received_at = now,
                        .payload = "{\"x\":1}",
                        .payload_len = 7};
    return store_ingest(st, &d, jobs, n);
}

static void ingest_then_duplicate_writes_nothing_more(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1", "b/2"};
    assert_int_equal(ingest(f->st, "d1", repos, 2, 1000), CRCR_OK);
    assert_int_equal(ingest(f->st, "d1", repos, 2, 2000), CRCR_E_DUPLICATE);
    store_outbox_stats s;
    assert_int_equal(store_outbox_stats_get(f->st, &s), CRCR_OK);
    assert_int_equal(s.queued, 2);
}

static void claim_returns_due_rows_once_with_payload(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1", "b/2"};
    ingest(f->st, "d1", repos, 2, 1000);
    store_job j1, j2, j3;
    assert_int_equal(store_claim(f->st, 1000, 60000, &j1), CRCR_OK);
    assert_string_equal(j1.kind, "dispatch");
    assert_string_equal(j1.delivery_id, "d1");
    assert_string_equal(j1.event, "pull_request");
    assert_string_equal(buf_cstr(&j1.payload), "{\"x\":1}");
    assert_int_equal(store_claim(f->st, 1000, 60000, &j2), CRCR_OK);
    assert_string_not_equal(j1.target, j2.target);
    assert_int_equal(store_claim(f->st, 1000, 60000, &j3), CRCR_E_NOT_FOUND);
    /* Not yet due: a row created for the future is not claimed early. */
    store_job_free(&j1);
    store_job_free(&j2);
}

static void expired_lease_makes_row_claimable_again(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "d1", repos, 1, 1000);
    store_job j, k;
    assert_int_equal(store_claim(f->st, 1000, 5000, &j), CRCR_OK);
    assert_int_equal(store_claim(f->st, 5999, 5000, &k), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(f->st, 6001, 5000, &k), CRCR_OK);
    assert_int_equal(k.id, j.id);
    store_job_free(&j);
    store_job_free(&k);
}

/* Every fdatasync of this process: crcr_core's calls bind here (linked statically) and so do
 * SQLite's (the definition is exported to the shared libraries that call it). */
static int g_syncs, g_sync_fail;
/* g_hold: 1 = the next sync waits (then 2) until the test sets it back to 0. Under g_hmu. */
static int g_hold;
static pthread_mutex_t g_hmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_hcv = PTHREAD_COND_INITIALIZER;
int fdatasync(int fd)
{
    pthread_mutex_lock(&g_hmu);
    g_syncs++;
    bool fail = g_sync_fail;
    if (g_hold == 1) {
        g_hold = 2;
        pthread_cond_broadcast(&g_hcv);
        while (g_hold == 2)
            pthread_cond_wait(&g_hcv, &g_hmu);
    }
    pthread_mutex_unlock(&g_hmu);
    if (fail) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fdatasync, fd);
}

/* A durable write (an ingest) returns after the WAL's fdatasync; outbox bookkeeping (a claim, a
 * sent mark) syncs nothing. */
static void durable_write_returns_after_the_wal_sync(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    g_syncs = 0;
    assert_int_equal(ingest(f->st, "d1", repos, 1, 1000), CRCR_OK);
    assert_int_equal(g_syncs, 1);
    store_job j;
    assert_int_equal(store_claim(f->st, 1000, 5000, &j), CRCR_OK);
    assert_int_equal(store_job_finish(f->st, &j, "sent", 204, NULL, NULL, NULL, 0, 1100), CRCR_OK);
    store_job_free(&j);
    assert_int_equal(g_syncs, 1);
}

/* When the sync fails the write may not be on disk: the caller is told the store failed (its
 * client retries), never that it was stored; and since the kernel may have dropped the pages it
 * could not write, no later durable write is trusted either: they fail and the store reports
 * itself down (readiness) until a restart. */
static void failed_wal_sync_fails_the_write_and_every_later_one(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    assert_int_equal(store_ping(f->st), CRCR_OK);
    g_sync_fail = 1;
    crcr_err e = ingest(f->st, "d1", repos, 1, 1000);
    g_sync_fail = 0;
    assert_int_equal(e, CRCR_E_STORE);
    assert_int_equal(ingest(f->st, "d2", repos, 1, 1000), CRCR_E_STORE);
    assert_int_equal(store_ping(f->st), CRCR_E_STORE);
    /* A write fault that says why, and that no probe clears: the relay must restart. */
    char why[STORE_FAULT_WHY_MAX];
    assert_int_equal(store_write_fault(f->st, why, sizeof(why), NULL), STORE_FAULT_IO);
    assert_non_null(strstr(why, "fsync of the WAL failed"));
    assert_int_equal(store_probe_write(f->st), CRCR_E_STORE);
    assert_int_equal(store_write_fault(f->st, NULL, 0, NULL), STORE_FAULT_IO);
}

/* Writes to regular files fail with ENOSPC while g_disk_full is set: a full disk, as SQLite sees
 * it. SQLite's writes (pwrite64, pwrite or write, by its build) bind here like fdatasync above;
 * the test's own output (a pipe or a terminal) is not a regular file and passes. */
static volatile int g_disk_full;

static bool no_room(int fd)
{
    struct stat sb;
    if (!g_disk_full || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    errno = ENOSPC;
    return true;
}

/* g_whold: 1 = the next write to a regular file (a commit's WAL frames: the writer holds the
 * store's write lock meanwhile) waits (then 2) until the test sets it back to 0. Under g_hmu. */
static int g_whold;

static void write_hold(int fd)
{
    struct stat sb;
    pthread_mutex_lock(&g_hmu);
    if (g_whold == 1 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        g_whold = 2;
        pthread_cond_broadcast(&g_hcv);
        while (g_whold == 2)
            pthread_cond_wait(&g_hcv, &g_hmu);
    }
    pthread_mutex_unlock(&g_hmu);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    write_hold(fd);
    return no_room(fd) ? -1 : (ssize_t)syscall(SYS_pwrite64, fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    write_hold(fd);
    return no_room(fd) ? -1 : (ssize_t)syscall(SYS_pwrite64, fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    return no_room(fd) ? -1 : (ssize_t)syscall(SYS_write, fd, buf, n);
}

/* A write that finds no room fails and is the store's write fault, with a reason, until a write
 * goes through again: the probe's (once there is room), or the next ingest's. */
static void no_room_is_a_write_fault_until_a_write_goes_through(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    assert_int_equal(ingest(f->st, "d1", repos, 1, 1000), CRCR_OK);
    assert_int_equal(store_write_fault(f->st, NULL, 0, NULL), STORE_FAULT_NONE);
    assert_int_equal(store_probe_write(f->st), CRCR_OK); /* nothing to probe */

    size_t big = 512 * 1024;
    char *payload = malloc(big);
    assert_non_null(payload);
    memset(payload, 'p', big);
    store_new_job job = {.kind = "dispatch", .target = "a/1", .due_at = 1000};
    store_delivery d = {.delivery_id = "d2",
                        .event = "pull_request",
                        .received_at = 1000,
                        .payload = payload,
                        .payload_len = big};
    g_disk_full = 1;
    crcr_err e = store_ingest(f->st, &d, &job, 1);
    char why[STORE_FAULT_WHY_MAX] = "";
    int64_t since = 0;
    store_fault_kind kind = store_write_fault(f->st, why, sizeof(why), &since);
    crcr_err probe_full = store_probe_write(f->st); /* the disk is still full */
    g_disk_full = 0;
    assert_int_equal(e, CRCR_E_STORE);
    if (kind != STORE_FAULT_DISK_FULL)
        fail_msg("fault %d: %s", (int)kind, why);
    assert_true(strncmp(why, "disk full: ", 11) == 0);
    assert_non_null(strstr(why, "(SQLite 13"));
    assert_true(since > 0);
    assert_int_equal(probe_full, CRCR_E_STORE);
    /* Nothing of it was stored. */
    assert_int_equal(store_get_delivery(f->st, "d2", NULL, NULL, NULL), CRCR_E_NOT_FOUND);
    /* Room again: the probe's write goes through and clears the fault; the webhook is stored
     * when GitHub redelivers it. */
    assert_int_equal(store_probe_write(f->st), CRCR_OK);
    assert_int_equal(store_write_fault(f->st, NULL, 0, NULL), STORE_FAULT_NONE);
    assert_int_equal(store_ingest(f->st, &d, &job, 1), CRCR_OK);
    /* The next failure is a new fault; an ingest that goes through ends it as the probe would. */
    g_disk_full = 1;
    d.delivery_id = "d3";
    e = store_ingest(f->st, &d, &job, 1);
    g_disk_full = 0;
    assert_int_equal(e, CRCR_E_STORE);
    assert_int_equal(store_write_fault(f->st, NULL, 0, NULL), STORE_FAULT_DISK_FULL);
    assert_int_equal(store_ingest(f->st, &d, &job, 1), CRCR_OK);
    assert_int_equal(store_write_fault(f->st, NULL, 0, NULL), STORE_FAULT_NONE);
    free(payload);
}

/* The PostgreSQL server's refusals that are write faults: disk_full and io_error; anything else
 * (a constraint, a lost connection, too many connections) is not. */
static void pg_sqlstates_map_to_write_faults(void **state)
{
    assert_int_equal(pg_fault_kind("53100"), STORE_FAULT_DISK_FULL);
    assert_int_equal(pg_fault_kind("58030"), STORE_FAULT_IO);
    assert_int_equal(pg_fault_kind("53300"), STORE_FAULT_NONE);
    assert_int_equal(pg_fault_kind("23505"), STORE_FAULT_NONE);
    assert_int_equal(pg_fault_kind("08006"), STORE_FAULT_NONE);
    assert_int_equal(pg_fault_kind(""), STORE_FAULT_NONE);
    assert_int_equal(pg_fault_kind(NULL), STORE_FAULT_NONE);
}

typedef struct ingester {
    store *st;
    char id[16];
    crcr_err result;
} ingester;

static void *ingest_one(void *arg)
{
    ingester *g = arg;
    const char *repos[] = {"a/1"};
    g->result = ingest(g->st, g->id, repos, 1, 1000);
    return NULL;
}

/* The count a query returns, read on a connection of its own (what is committed). */
static int count_rows(const fixture *f, const char *sql)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/t.db", f->dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    int n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

/* Deliveries a separate connection sees committed. */
static int committed_deliveries(const fixture *f)
{
    return count_rows(f, "SELECT count(*) FROM deliveries");
}

/* One sync at a time, covering every group committed before it began: while a slow sync runs,
 * seven more webhooks commit (each alone: they arrive one after the other) and then share one or
 * two syncs instead of one each. Deterministic: the first sync is held until all seven are
 * committed. */
static void groups_committed_during_a_sync_share_the_next(void **state)
{
    fixture *f = *state;
    enum { N = 8 };
    ingester g[N];
    pthread_t t[N];
    pthread_mutex_lock(&g_hmu);
    g_hold = 1;
    g_syncs = 0;
    pthread_mutex_unlock(&g_hmu);
    for (int i = 0; i < N; i++) {
        g[i] = (ingester){.st = f->st};
        snprintf(g[i].id, sizeof(g[i].id), "d%d", i);
    }
    assert_int_equal(pthread_create(&t[0], NULL, ingest_one, &g[0]), 0);
    pthread_mutex_lock(&g_hmu);
    while (g_hold != 2) /* the first ingest's sync has begun */
        pthread_cond_wait(&g_hcv, &g_hmu);
    pthread_mutex_unlock(&g_hmu);
    for (int i = 1; i < N; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, ingest_one, &g[i]), 0);
        for (int k = 0; k < 10000 && committed_deliveries(f) < i + 1; k++)
            usleep(1000);
        assert_int_equal(committed_deliveries(f), i + 1);
    }
    pthread_mutex_lock(&g_hmu);
    int while_held = g_syncs;
    g_hold = 0;
    pthread_cond_broadcast(&g_hcv);
    pthread_mutex_unlock(&g_hmu);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(while_held, 1); /* the others waited for the one that ran */
    for (int i = 0; i < N; i++)
        assert_int_equal(g[i].result, CRCR_OK);
    assert_in_range(g_syncs, 2, 3);
}

typedef struct group_ingester {
    store *st;
    const char *id;
    const char *repos[2];
    size_t n;
    crcr_err result;
} group_ingester;

static void *group_ingest(void *arg)
{
    group_ingester *g = arg;
    g->result = ingest(g->st, g->id, g->repos, g->n, 1000);
    return NULL;
}

/* Requests queued behind the group commit's leader. */
static int group_queued(const fixture *f)
{
    sqlite_store *s = sq_store(f->st);
    int n = 0;
    pthread_mutex_lock(&s->gmu);
    for (sq_group_req *r = s->ghead; r; r = r->next)
        n++;
    pthread_mutex_unlock(&s->gmu);
    return n;
}

/* One group commit holds four ingests: "b", a duplicate of "a" (refused at its first INSERT:
 * nothing written), "c" whose two rows collide (it fails after writing its delivery and first
 * row), and "d". Each ends as if alone: b and d are stored, the duplicate is told so, c leaves
 * nothing behind. Deterministic: the group forms while the first ingest's commit is held in its
 * WAL write (the write lock held), and each request is queued before the next one starts. */
static void a_group_undoes_only_the_request_that_failed(void **state)
{
    fixture *f = *state;
    group_ingester a = {.st = f->st, .id = "a", .repos = {"o/1"}, .n = 1};
    group_ingester g[4] = {
        {.st = f->st, .id = "b", .repos = {"o/1"}, .n = 1},
        {.st = f->st, .id = "a", .repos = {"o/1"}, .n = 1},
        {.st = f->st, .id = "c", .repos = {"o/1", "o/1"}, .n = 2},
        {.st = f->st, .id = "d", .repos = {"o/1"}, .n = 1},
    };
    pthread_t ta, t[4];
    pthread_mutex_lock(&g_hmu);
    g_whold = 1;
    pthread_mutex_unlock(&g_hmu);
    assert_int_equal(pthread_create(&ta, NULL, group_ingest, &a), 0);
    pthread_mutex_lock(&g_hmu);
    while (g_whold != 2) /* a's commit is writing, under the write lock */
        pthread_cond_wait(&g_hcv, &g_hmu);
    pthread_mutex_unlock(&g_hmu);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, group_ingest, &g[i]), 0);
        for (int k = 0; k < 10000 && group_queued(f) < i + 1; k++)
            usleep(1000);
        assert_int_equal(group_queued(f), i + 1);
    }
    pthread_mutex_lock(&g_hmu);
    g_whold = 0;
    pthread_cond_broadcast(&g_hcv);
    pthread_mutex_unlock(&g_hmu);
    pthread_join(ta, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(a.result, CRCR_OK);
    assert_int_equal(g[0].result, CRCR_OK);
    assert_int_equal(g[1].result, CRCR_E_DUPLICATE);
    assert_int_equal(g[2].result, CRCR_E_STORE);
    assert_int_equal(g[3].result, CRCR_OK);
    assert_int_equal(count_rows(f, "SELECT count(*) FROM deliveries"), 3);
    assert_int_equal(count_rows(f, "SELECT count(*) FROM deliveries WHERE delivery_id='c'"), 0);
    assert_int_equal(count_rows(f, "SELECT count(*) FROM outbox"), 3);
    assert_int_equal(count_rows(f, "SELECT count(*) FROM outbox WHERE delivery_id='c'"), 0);
    assert_int_equal(count_rows(f, "SELECT count(*) FROM outbox WHERE delivery_id IN "
                                   "('a','b','d')"),
                     3);
    /* The store takes further writes. */
    const char *repos[] = {"o/2"};
    assert_int_equal(ingest(f->st, "e", repos, 1, 2000), CRCR_OK);
}

/* Bytes appended to the store's WAL so far (no checkpoint runs in these short tests: the WAL
 * only grows). */
static long wal_size(const fixture *f)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/t.db-wal", f->dir);
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static store_run_update run_update(const char *status, const char *body, size_t len)
{
    return (store_run_update){.key = {.delivery_id = "d1",
                                      .repo = "org/a",
                                      .run_id = "7",
                                      .run_attempt = 1,
                                      .job_name = "build"},
                              .status = status,
                              .conclusion = strcmp(status, "completed") == 0 ? "success" : NULL,
                              .event_type = "pull_request",
                              .level = 2,
                              .pr_number = 42,
                              .head_sha = "abc",
                              .workflow_name = "ci",
                              .test_passed = -1,
                              .test_failed = -1,
                              .test_skipped = -1,
                              .payload = body,
                              .payload_len = len,
                              .now = 2000};
}

/* A callback body echoes the ~30 KB webhook. The in_progress row keeps it (the sweeper's
 * timed_out callback is built from it); completing the run must not write it again, nor write
 * the pages it frees (Debian's SQLite zeroes freed pages unless secure_delete is FAST): the
 * completing transition appends a few b-tree pages to the WAL, not the body's overflow chain. */
static void completing_a_run_does_not_rewrite_its_body(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"org/a"};
    assert_int_equal(ingest(f->st, "d1", repos, 1, 1000), CRCR_OK);
    enum { BODY = 100 * 1024 };
    char *body = malloc(BODY);
    assert_non_null(body);
    for (size_t i = 0; i < BODY; i++)
        body[i] = (char)('a' + (i * 7919) % 26);
    store_run_result res;
    char why[128];
    long w0 = wal_size(f);
    store_run_update u = run_update("in_progress", body, BODY);
    assert_int_equal(store_run_apply(f->st, &u, NULL, NULL, &res, why, sizeof(why)), CRCR_OK);
    long w1 = wal_size(f);
    u = run_update("completed", body, BODY);
    assert_int_equal(store_run_apply(f->st, &u, NULL, NULL, &res, why, sizeof(why)), CRCR_OK);
    long w2 = wal_size(f);
    free(body);
    assert_true(w0 >= 0);
    assert_true(w1 - w0 > BODY);     /* the open run's body went to the WAL */
    assert_true(w2 - w1 < BODY / 4); /* the completion: a few pages (the code before: > BODY) */
}

static void retry_reschedules_and_counts_attempts(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "d1", repos, 1, 1000);
    store_job j;
    store_claim(f->st, 1000, 5000, &j);
    assert_int_equal(store_job_retry(f->st, &j, 9000, true, 502, "HTTP 502"), CRCR_OK);
    store_job_free(&j);
    assert_int_equal(store_claim(f->st, 8999, 5000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_claim(f->st, 9000, 5000, &j), CRCR_OK);
    assert_int_equal(j.attempts, 1);
    /* A pause does not spend an attempt. */
    store_job_retry(f->st, &j, 9500, false, 0, "paused");
    store_job_free(&j);
    assert_int_equal(store_claim(f->st, 9500, 5000, &j), CRCR_OK);
    assert_int_equal(j.attempts, 1);
    store_job_free(&j);
}

typedef struct collected {
    int rows;
    char state[8][16];
    char body[256];
    long status[8];
} collected;

static void collect_job(void *ctx, const store_job_row *r)
{
    collected *c = ctx;
    if (c->rows < 8) {
        snprintf(c->state[c->rows], sizeof(c->state[0]), "%s", r->state);
        c->status[c->rows] = r->last_status;
    }
    if (r->body)
        snprintf(c->body, sizeof(c->body), "%.*s", (int)r->body_len, r->body);
    c->rows++;
}

static void finish_and_redeliver_dead_row(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "d1", repos, 1, 1000);
    store_job j;
    store_claim(f->st, 1000, 5000, &j);
    assert_int_equal(store_job_finish(f->st, &j, "dead", 404, "not installed", NULL, NULL, 0, 1100),
                     CRCR_OK);
    store_job_free(&j);
    collected c = {0};
    assert_int_equal(store_get_delivery(f->st, "d1", NULL, collect_job, &c), CRCR_OK);
    assert_int_equal(c.rows, 1);
    assert_string_equal(c.state[0], "dead");
    assert_int_equal(c.status[0], 404);

    int n = 0;
    assert_int_equal(store_redeliver(f->st, "d1", NULL, 2000, &n), CRCR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_claim(f->st, 2000, 5000, &j), CRCR_OK);
    assert_int_equal(j.attempts, 0);
    store_job_free(&j);
    assert_int_equal(store_redeliver(f->st, "nope", NULL, 2000, &n), CRCR_E_NOT_FOUND);
    /* A repo without a row for the delivery gets one. */
    assert_int_equal(store_redeliver(f->st, "d1", "new/repo", 2000, &n), CRCR_OK);
    assert_int_equal(n, 1);
}

static void dry_run_body_is_kept(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "d1", repos, 1, 1000);
    store_job j;
    store_claim(f->st, 1000, 5000, &j);
    store_job_finish(f->st, &j, "dry_run", 0, NULL, NULL, "{\"event_type\":\"x\"}", 18, 1001);
    store_job_free(&j);
    collected c = {0};
    store_get_delivery(f->st, "d1", NULL, collect_job, &c);
    assert_string_equal(c.state[0], "dry_run");
    assert_string_equal(c.body, "{\"event_type\":\"x\"}");
}

static void recover_requeues_running_rows(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "d1", repos, 1, 1000);
    store_job j;
    store_claim(f->st, 1000, 3600000, &j);
    store_job_free(&j);
    assert_int_equal(store_claim(f->st, 1001, 5000, &j), CRCR_E_NOT_FOUND);
    assert_int_equal(store_recover(f->st), CRCR_OK);
    assert_int_equal(store_claim(f->st, 1001, 5000, &j), CRCR_OK);
    store_job_free(&j);
}

static void newer_schema_is_refused(void **state)
{
    fixture *f = *state;
    char path[160];
    snprintf(path, sizeof(path), "%s/t.db", f->dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE schema_version SET version=99", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    store *st2 = NULL;
    char err[256] = "";
    assert_int_equal(store_open(f->uri, &st2, err, sizeof(err)), CRCR_E_CONFIG);
    assert_non_null(strstr(err, "newer"));
    assert_null(st2);
}

static void unknown_scheme_is_a_config_error(void **state)
{
    store *st2 = NULL;
    char err[256] = "";
    assert_int_equal(store_open("mysql://x", &st2, err, sizeof(err)), CRCR_E_CONFIG);
    assert_non_null(strstr(err, "CRCR_STORE"));
}

static void kv_expires(void **state)
{
    fixture *f = *state;
    assert_int_equal(store_kv_put(f->st, "k", "v1", 2, 5000), CRCR_OK);
    buf_t b;
    buf_init(&b, 64);
    assert_int_equal(store_kv_get(f->st, "k", &b, 4999), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "v1");
    buf_reset(&b);
    assert_int_equal(store_kv_get(f->st, "k", &b, 5000), CRCR_E_NOT_FOUND);
    buf_free(&b);
}

static void retention_keeps_unfinished_deliveries(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1"};
    ingest(f->st, "old-done", repos, 1, 1000);
    ingest(f->st, "old-queued", repos, 1, 1000);
    ingest(f->st, "new", repos, 1, 50000);
    store_job j;
    store_claim(f->st, 1000, 5000, &j); /* old-done (lowest id) */
    assert_string_equal(j.delivery_id, "old-done");
    store_job_finish(f->st, &j, "sent", 204, NULL, NULL, NULL, 0, 1100);
    store_job_free(&j);
    int n = 0;
    assert_int_equal(store_retention(f->st, 10000, &n), CRCR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_get_delivery(f->st, "old-done", NULL, NULL, NULL), CRCR_E_NOT_FOUND);
    assert_int_equal(store_get_delivery(f->st, "old-queued", NULL, NULL, NULL), CRCR_OK);
    assert_int_equal(store_get_delivery(f->st, "new", NULL, NULL, NULL), CRCR_OK);
}

typedef struct claim_ctx {
    store *st;
    int claimed;
    int64_t ids[400];
} claim_ctx;

/* store_open_existing never creates a SQLite file: the typo that read an empty ./crcr.db. */
static void open_existing_never_creates_a_store(void **state)
{
    fixture *f = *state;
    char uri[192], path[160], err[1024] = "";
    snprintf(path, sizeof(path), "%s/typo.db", f->dir);
    snprintf(uri, sizeof(uri), "sqlite:%s", path);
    store *st = NULL;
    assert_int_equal(store_open_existing(uri, 0, &st, err, sizeof(err)), CRCR_E_NOT_FOUND);
    assert_null(st);
    assert_int_equal(access(path, F_OK), -1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "--config FILE"));
    /* The existing one opens. */
    assert_int_equal(store_open_existing(f->uri, 0, &st, err, sizeof(err)), CRCR_OK);
    store_close(st);
}

/* The WAL's checkpoints run on the checkpointer's thread, not in a commit holding the write lock
 * (store_sqlite_checkpoint.c): ~2,400 frames of writes pass SQLite's 1,000-frame mark. */
static void the_wal_is_checkpointed_off_the_writers_commits(void **state)
{
    fixture *f = *state;
    static char value[3000];
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < sizeof(value); i++) { /* xorshift: one page of its own per value */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        value[i] = (char)(x >> 24);
    }
    for (int i = 0; i < 1200; i++) {
        char key[32];
        snprintf(key, sizeof(key), "ckpt:%d", i);
        value[0] = (char)i;
        assert_int_equal(store_kv_put(f->st, key, value, sizeof(value), INT64_MAX), CRCR_OK);
    }
    uint64_t background = 0, in_commit = 0;
    for (int i = 0; i < 1000 && background == 0; i++) { /* awaited: at most 10 s */
        sq_checkpoints(f->st, &background, &in_commit);
        if (background == 0)
            usleep(10000);
    }
    assert_true(background >= 1);
    assert_int_equal(in_commit, 0);
    buf_t v;
    buf_init(&v, sizeof(value));
    assert_int_equal(store_kv_get(f->st, "ckpt:7", &v, 0), CRCR_OK);
    assert_int_equal(v.len, sizeof(value));
    buf_free(&v);
}

/* store_backup: a copy made while the store is open in this process holds
 * every committed row, is one file of mode 0600 with no -wal, and is never written over. */
static void backup_copies_a_live_store(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1", "b/2"};
    assert_int_equal(ingest(f->st, "d1", repos, 2, 1000), CRCR_OK);
    assert_int_equal(store_kv_put(f->st, "k", "v", 1, INT64_MAX), CRCR_OK);
    char dest[160], wal[170], err[512] = "";
    snprintf(dest, sizeof(dest), "%s/backup.db", f->dir);
    snprintf(wal, sizeof(wal), "%s-wal", dest);
    int version = -1;
    assert_int_equal(store_backup(f->uri, dest, &version, err, sizeof(err)), CRCR_OK);
    assert_int_equal(version, CRCR_SCHEMA_VERSION);
    struct stat sb;
    assert_int_equal(stat(dest, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(access(wal, F_OK), -1);

    /* The copy is a store of its own with the same rows. */
    char uri[192];
    snprintf(uri, sizeof(uri), "sqlite:%s", dest);
    store *copy = NULL;
    assert_int_equal(store_open_existing(uri, 0, &copy, err, sizeof(err)), CRCR_OK);
    store_outbox_stats os;
    assert_int_equal(store_outbox_stats_get(copy, &os), CRCR_OK);
    assert_int_equal(os.queued, 2);
    buf_t v;
    buf_init(&v, 64);
    assert_int_equal(store_kv_get(copy, "k", &v, 0), CRCR_OK);
    assert_string_equal(buf_cstr(&v), "v");
    buf_free(&v);
    store_close(copy);

    /* Never over an existing file; never from a store that does not exist; SQLite only. */
    assert_int_equal(store_backup(f->uri, dest, &version, err, sizeof(err)), CRCR_E_DUPLICATE);
    assert_non_null(strstr(err, "never overwrites"));
    char missing[192], dest2[160];
    snprintf(missing, sizeof(missing), "sqlite:%s/none.db", f->dir);
    snprintf(dest2, sizeof(dest2), "%s/backup2.db", f->dir);
    assert_int_equal(store_backup(missing, dest2, &version, err, sizeof(err)), CRCR_E_NOT_FOUND);
    assert_int_equal(access(dest2, F_OK), -1);
    snprintf(missing, sizeof(missing), "%s/none.db", f->dir);
    assert_int_equal(access(missing, F_OK), -1);
    assert_int_equal(store_backup("postgresql://h/db", dest2, &version, err, sizeof(err)),
                     CRCR_E_INVALID);
    assert_int_equal(access(dest2, F_OK), -1);
    unlink(dest);
    char journal[180];
    snprintf(journal, sizeof(journal), "%s-journal", dest);
    unlink(journal);
}

static void *claimer(void *arg)
{
    claim_ctx *c = arg;
    store_job j;
    while (store_claim(c->st, 10000, 60000, &j) == CRCR_OK) {
        c->ids[c->claimed++] = j.id;
        store_job_finish(c->st, &j, "sent", 204, NULL, NULL, NULL, 0, 10001);
        store_job_free(&j);
    }
    return NULL;
}

static void concurrent_claims_hand_out_each_row_once(void **state)
{
    fixture *f = *state;
    const char *repos[] = {"a/1", "b/2", "c/3", "d/4", "e/5", "f/6", "g/7", "h/8", "i/9", "j/10"};
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof(id), "d%d", i);
        assert_int_equal(ingest(f->st, id, repos, 10, 1000 + i), CRCR_OK);
    }
    claim_ctx ctx[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        ctx[i] = (claim_ctx){.st = f->st};
        pthread_create(&th[i], NULL, claimer, &ctx[i]);
    }
    int total = 0;
    char seen[1024] = {0};
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += ctx[i].claimed;
        for (int k = 0; k < ctx[i].claimed; k++) {
            assert_true(ctx[i].ids[k] < 1024);
            assert_int_equal(seen[ctx[i].ids[k]], 0);
            seen[ctx[i].ids[k]] = 1;
        }
    }
    assert_int_equal(total, 200);
}

/* Two `crcr serve` on one SQLite file would re-queue each other's rows in flight: the second
 * one's store_recover is refused while the first holds the store, and allowed once it closed. */
static void recover_is_refused_while_another_handle_serves_the_file(void **state)
{
    fixture *f = *state;
    char err[256];
    store *other = NULL;
    assert_int_equal(store_open(f->uri, &other, err, sizeof(err)), CRCR_OK);
    assert_int_equal(store_recover(f->st), CRCR_OK);
    assert_int_equal(store_recover(other), CRCR_E_STATE);
    /* Reading and writing through the other handle still work (the command-line tools). */
    const char *t[] = {"a/one"};
    assert_int_equal(ingest(other, "d1", t, 1, 1000), CRCR_OK);
    store_close(f->st);
    f->st = other;
    assert_int_equal(store_recover(f->st), CRCR_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ingest_then_duplicate_writes_nothing_more, setup, teardown),
        cmocka_unit_test_setup_teardown(claim_returns_due_rows_once_with_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_lease_makes_row_claimable_again, setup, teardown),
        cmocka_unit_test_setup_teardown(durable_write_returns_after_the_wal_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_wal_sync_fails_the_write_and_every_later_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(no_room_is_a_write_fault_until_a_write_goes_through, setup,
                                        teardown),
        cmocka_unit_test(pg_sqlstates_map_to_write_faults),
        cmocka_unit_test_setup_teardown(a_group_undoes_only_the_request_that_failed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(groups_committed_during_a_sync_share_the_next, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(completing_a_run_does_not_rewrite_its_body, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(retry_reschedules_and_counts_attempts, setup, teardown),
        cmocka_unit_test_setup_teardown(finish_and_redeliver_dead_row, setup, teardown),
        cmocka_unit_test_setup_teardown(dry_run_body_is_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(recover_requeues_running_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(recover_is_refused_while_another_handle_serves_the_file,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(open_existing_never_creates_a_store, setup, teardown),
        cmocka_unit_test_setup_teardown(the_wal_is_checkpointed_off_the_writers_commits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(backup_copies_a_live_store, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_scheme_is_a_config_error, setup, teardown),
        cmocka_unit_test_setup_teardown(kv_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(retention_keeps_unfinished_deliveries, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_claims_hand_out_each_row_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
