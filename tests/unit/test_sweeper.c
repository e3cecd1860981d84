/*
 * test_sweeper.c - zombie runs and retention (src/relay/sweeper.c) over a real SQLite store in a
 * temporary directory, with the configuration loaded by config_load and the allowlist from a
 * file source (ALLOWLIST_FILE): a run in progress longer than ZOMBIE_TIMEOUT_SECONDS is completed
 * as timed_out through store_run_apply; L4 (and labelled or marked L3) zombies get a timed_out
 * check run, L2 ones none; the HUD forward carries the stored callback with workflow.status
 * completed / conclusion timed_out; only the holder of the lease sweeps; retention deletes old
 * deliveries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "allowlist_source.h"
#include "clock.h"
#include "json.h"
#include "log.h"
#include "sweeper.h"
#include "unit_support.h"

#define SHA "0123456789abcdef0123456789abcdef01234567"
#define OTHER_SHA "fedcba9876543210fedcba9876543210fedcba98"
#define L2_REPO "example-org/two"
#define L3_REPO "example-org/npu-ci"
#define L4_REPO "example-org/four"
#define HOUR_MS (3600 * 1000LL)

static const char ALLOWLIST[] = "L2:\n"
                                "  - example-org/two\n"
                                "L3:\n"
                                "  npu:\n"
                                "    example-org/npu-ci: [alice]\n"
                                "L4:\n"
                                "  - example-org/four\n";

/* The in_progress callback body the relay stored for a run. */
#define RUNNING_BODY                                                                               \
    "{\"event_type\":\"pull_request\",\"delivery_id\":\"d\",\"payload\":{},"                       \
    "\"workflow\":{\"status\":\"in_progress\",\"conclusion\":null,\"name\":\"CI\","                \
    "\"run_id\":\"1\",\"job_name\":\"build\",\"completed_at\":null}}"

typedef struct fixture {
    ut_dir dir;
    char allowlist_path[128];
    crcr_config cfg;
    store *st;
    allowlist_source *allow;
    sweeper_deps deps;
    int64_t now;
} fixture;

static void quiet(const char *line, size_t len, void *ctx)
{
    (void)line;
    (void)len;
    (void)ctx;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    log_set_sink(quiet, NULL);
    ut_dir_make(&fx->dir);
    ut_path(&fx->dir, "allowlist.yml", fx->allowlist_path, sizeof(fx->allowlist_path));
    ut_write_file(fx->allowlist_path, ALLOWLIST);
    const char *env[] = {"ALLOWLIST_FILE",
                         fx->allowlist_path,
                         "ZOMBIE_TIMEOUT_SECONDS",
                         "3600",
                         "CRCR_RETENTION_SECONDS",
                         "86400",
                         "HUD_API_URL",
                         "https://hud.example.com/api/crcr",
                         "UPSTREAM_REPO",
                         "upstream-org/upstream",
                         NULL};
    ut_config(&fx->cfg, env);
    fx->st = ut_store_open(&fx->dir);
    char err[512] = "";
    fx->allow = allowlist_source_new(&fx->cfg, NULL, err, sizeof(err));
    if (!fx->allow)
        fail_msg("allowlist_source_new: %s", err);
    if (allowlist_source_load(fx->allow, err, sizeof(err)) != CRCR_OK)
        fail_msg("allowlist_source_load: %s", err);
    fx->deps = (sweeper_deps){.st = fx->st, .allow = fx->allow, .ob = NULL, .cfg = &fx->cfg};
    fx->now = clock_now_ms();
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    allowlist_source_free(fx->allow);
    store_close(fx->st);
    config_free(&fx->cfg);
    ut_dir_remove(&fx->dir);
    log_set_sink(NULL, NULL);
    free(fx);
    return 0;
}

/* A run of `repo` (recorded at `level`) that went in progress at `at`. */
static void start_run(fixture *fx, const char *delivery, const char *repo, int64_t run_id,
                      int level, const char *sha, int64_t at, const char *body)
{
    store_run_update u =
        ut_run_update(delivery, repo, run_id, "build", "in_progress", NULL, level, 42, sha, at);
    u.payload = body;
    u.payload_len = strlen(body);
    ut_apply(fx->st, &u);
}

static sweeper_result sweep(fixture *fx, const char *owner, int64_t now)
{
    sweeper_result res;
    memset(&res, 0xff, sizeof(res));
    sweeper_run(&fx->deps, owner, now, &res);
    return res;
}

typedef struct run_view {
    char repo[160], state[32], conclusion[32];
    int64_t run_id, exec_ms, completed_at;
} run_view;

typedef struct run_views {
    run_view v[16];
    size_t n;
} run_views;

static void on_run(void *ctx, const store_run_row *r)
{
    run_views *l = ctx;
    if (l->n >= 16)
        return;
    run_view *v = &l->v[l->n++];
    snprintf(v->repo, sizeof(v->repo), "%s", r->repo);
    snprintf(v->state, sizeof(v->state), "%s", r->state);
    snprintf(v->conclusion, sizeof(v->conclusion), "%s", r->conclusion ? r->conclusion : "");
    v->run_id = strtoll(r->run_id, NULL, 10);
    v->exec_ms = r->exec_ms;
    v->completed_at = r->completed_at;
}

/* The run `run_id` as stored now. */
static run_view run_of(fixture *fx, int64_t run_id)
{
    run_views l = {0};
    store_run_filter f = {.limit = 100};
    assert_int_equal(store_list_runs(fx->st, &f, on_run, &l), CRCR_OK);
    for (size_t i = 0; i < l.n; i++)
        if (l.v[i].run_id == run_id)
            return l.v[i];
    fail_msg("run %lld not found", (long long)run_id);
    return l.v[0];
}

/* Rows of `kind` for `delivery` whose body names `repo` (check runs: in the name; HUD forwards:
 * as verified_repo). */
static size_t count_rows(const ut_rows *l, const char *kind, const char *repo)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += strcmp(l->kind[i], kind) == 0 && strstr(l->body[i], repo) != NULL;
    return n;
}

static const char *row_body(const ut_rows *l, const char *kind, const char *repo)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->kind[i], kind) == 0 && strstr(l->body[i], repo))
            return l->body[i];
    fail_msg("no %s row for %s", kind, repo);
    return NULL;
}

static void pr_delivery(fixture *fx, const char *id, const char *sha, const char *labels)
{
    char payload[512];
    snprintf(payload, sizeof(payload),
             "{\"action\":\"synchronize\",\"number\":42,\"pull_request\":{\"number\":42,"
             "\"head\":{\"sha\":\"%s\"},\"labels\":%s}}",
             sha, labels);
    const char *targets[] = {L2_REPO, L3_REPO, L4_REPO, NULL};
    ut_ingest(fx->st, id, 42, sha, payload, targets, fx->now - 3 * HOUR_MS);
}

static void l4_zombie_times_out_with_a_check_run_and_l2_without(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    int64_t t0 = fx->now - 2 * HOUR_MS;
    start_run(fx, "d", L4_REPO, 1, 4, SHA, t0, RUNNING_BODY);
    start_run(fx, "d", L2_REPO, 2, 2, SHA, t0 + 1000, RUNNING_BODY);

    sweeper_result res = sweep(fx, "instance-a", fx->now);
    assert_true(res.leader);
    assert_int_equal(res.cleaned, 2);
    assert_int_equal(res.errors, 0);
    assert_int_equal(res.deleted, 0);

    run_view r = run_of(fx, 1);
    assert_string_equal(r.state, "completed");
    assert_string_equal(r.conclusion, "timed_out");
    assert_int_equal(r.completed_at, fx->now);
    assert_int_equal(r.exec_ms, fx->now - t0);
    r = run_of(fx, 2);
    assert_string_equal(r.state, "completed");
    assert_string_equal(r.conclusion, "timed_out");

    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(l.n, 3 + 3); /* three dispatches, a check run and two HUD forwards */
    assert_int_equal(count_rows(&l, "check_run", L4_REPO), 1);
    assert_int_equal(count_rows(&l, "check_run", L2_REPO), 0);
    assert_int_equal(count_rows(&l, "hud_forward", L4_REPO), 1);
    assert_int_equal(count_rows(&l, "hud_forward", L2_REPO), 1);

    const char *body = row_body(&l, "check_run", L4_REPO);
    jv *check = jv_parse(body, strlen(body), NULL, 0);
    assert_non_null(check);
    assert_string_equal(jv_path_str(check, "name"), "crcr/example-org/four/CI/build");
    assert_string_equal(jv_path_str(check, "head_sha"), SHA);
    assert_string_equal(jv_path_str(check, "status"), "completed");
    assert_string_equal(jv_path_str(check, "conclusion"), "timed_out");
    assert_string_equal(jv_path_str(check, "output.title"), "Timed_out");
    assert_string_equal(jv_path_str(check, "external_id"), "1:42");
    jv_free(check);
    for (size_t i = 0; i < l.n; i++)
        if (strcmp(l.kind[i], "check_run") == 0)
            assert_string_equal(l.target[i], "upstream-org/upstream");
}

static void hud_forward_says_completed_timed_out_in_the_stored_callback(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    int64_t t0 = fx->now - 2 * HOUR_MS - 1234;
    start_run(fx, "d", L4_REPO, 1, 4, SHA, t0, RUNNING_BODY);
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 1);
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    const char *body = row_body(&l, "hud_forward", L4_REPO);
    jv *doc = jv_parse(body, strlen(body), NULL, 0);
    assert_non_null(doc);
    assert_string_equal(jv_path_str(doc, "trusted.verified_repo"), L4_REPO);
    assert_string_equal(jv_path_str(doc, "trusted.downstream_repo_level"), "L4");
    assert_true(jv_is_null(jv_path(doc, "trusted.ci_metrics.queue_time")));
    char exec[64];
    int64_t ms = fx->now - t0;
    snprintf(exec, sizeof(exec), "\"execution_time\":%lld.%03lld}", (long long)(ms / 1000),
             (long long)(ms % 1000));
    assert_non_null(strstr(body, exec));
    const jv *cb = jv_path(doc, "untrusted.callback_payload");
    assert_string_equal(jv_path_str(cb, "workflow.status"), "completed");
    assert_string_equal(jv_path_str(cb, "workflow.conclusion"), "timed_out");
    char when[40];
    clock_iso8601(fx->now, when, sizeof(when));
    assert_string_equal(jv_path_str(cb, "workflow.completed_at"), when);
    /* the rest of the stored callback is kept */
    assert_string_equal(jv_path_str(cb, "workflow.name"), "CI");
    assert_string_equal(jv_path_str(cb, "workflow.job_name"), "build");
    assert_string_equal(jv_path_str(cb, "event_type"), "pull_request");
    jv_free(doc);
}

static void a_stored_callback_that_is_not_an_object_forwards_an_empty_one(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    start_run(fx, "d", L2_REPO, 1, 2, SHA, fx->now - 2 * HOUR_MS, "[1,2]");
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 1);
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_non_null(strstr(row_body(&l, "hud_forward", L2_REPO), "\"callback_payload\":{}}}"));
}

static void young_runs_and_finished_runs_are_left_alone(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    start_run(fx, "d", L4_REPO, 1, 4, SHA, fx->now - HOUR_MS + 60000, RUNNING_BODY);
    start_run(fx, "d", L2_REPO, 2, 2, SHA, fx->now - 2 * HOUR_MS, RUNNING_BODY);
    store_run_update u = ut_run_update("d", L2_REPO, 2, "build", "completed", "success", 2, 42, SHA,
                                       fx->now - HOUR_MS - 1);
    ut_apply(fx->st, &u);
    sweeper_result res = sweep(fx, "instance-a", fx->now);
    assert_true(res.leader);
    assert_int_equal(res.cleaned, 0);
    assert_string_equal(run_of(fx, 1).state, "in_progress");
    assert_string_equal(run_of(fx, 2).conclusion, "success");
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(l.n, 3); /* the dispatches only */
}

static void l3_zombie_gets_a_check_run_only_when_labelled_or_marked(void **state)
{
    fixture *fx = *state;
    int64_t t0 = fx->now - 2 * HOUR_MS;
    /* labelled on the dispatched webhook */
    pr_delivery(fx, "d-label", SHA, "[{\"name\":\"ciflow/crcr/npu\"}]");
    start_run(fx, "d-label", L3_REPO, 1, 3, SHA, t0, RUNNING_BODY);
    /* not labelled, no mark */
    pr_delivery(fx, "d-plain", OTHER_SHA, "[{\"name\":\"ciflow/trunk\"}]");
    start_run(fx, "d-plain", L3_REPO, 2, 3, OTHER_SHA, t0 + 1, RUNNING_BODY);
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 2);
    ut_rows l;
    ut_rows_of(fx->st, "d-label", &l);
    assert_int_equal(count_rows(&l, "check_run", L3_REPO), 1);
    assert_non_null(strstr(row_body(&l, "check_run", L3_REPO), "\"conclusion\":\"timed_out\""));
    ut_rows_of(fx->st, "d-plain", &l);
    assert_int_equal(count_rows(&l, "check_run", L3_REPO), 0);
    assert_int_equal(count_rows(&l, "hud_forward", L3_REPO), 1);

    /* the same unlabelled case with a wanted mark on its sha */
    assert_int_equal(store_wanted_set(fx->st, OTHER_SHA, L3_REPO, fx->now - 1000), CRCR_OK);
    pr_delivery(fx, "d-marked", OTHER_SHA, "[]");
    start_run(fx, "d-marked", L3_REPO, 3, 3, OTHER_SHA, t0 + 2, RUNNING_BODY);
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 1);
    ut_rows_of(fx->st, "d-marked", &l);
    assert_int_equal(count_rows(&l, "check_run", L3_REPO), 1);
}

static void a_check_run_needs_l3_both_when_the_run_started_and_now(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    int64_t t0 = fx->now - 2 * HOUR_MS;
    start_run(fx, "d", L2_REPO, 1, 4, SHA, t0, RUNNING_BODY);     /* was L4, is L2 now */
    start_run(fx, "d", L4_REPO, 2, 2, SHA, t0 + 1, RUNNING_BODY); /* was L2, is L4 now */
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 2);
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(count_rows(&l, "check_run", "example-org"), 0);
    /* the HUD forward names the level in force now */
    assert_non_null(
        strstr(row_body(&l, "hud_forward", L2_REPO), "\"downstream_repo_level\":\"L2\""));
    assert_non_null(
        strstr(row_body(&l, "hud_forward", L4_REPO), "\"downstream_repo_level\":\"L4\""));
}

static void a_delisted_repo_keeps_the_level_it_ran_at(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {"gone-org/gone", NULL};
    ut_ingest(fx->st, "d", 42, SHA, "{}", targets, fx->now - 3 * HOUR_MS);
    start_run(fx, "d", "gone-org/gone", 1, 4, SHA, fx->now - 2 * HOUR_MS, RUNNING_BODY);
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 1);
    assert_string_equal(run_of(fx, 1).conclusion, "timed_out");
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(count_rows(&l, "check_run", "gone-org/gone"), 0);
    assert_non_null(
        strstr(row_body(&l, "hud_forward", "gone-org/gone"), "\"downstream_repo_level\":\"L4\""));
}

static void a_late_callback_cannot_complete_a_timed_out_run_again(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    start_run(fx, "d", L4_REPO, 1, 4, SHA, fx->now - 2 * HOUR_MS, RUNNING_BODY);
    assert_int_equal(sweep(fx, "instance-a", fx->now).cleaned, 1);
    store_run_update u =
        ut_run_update("d", L4_REPO, 1, "build", "completed", "success", 4, 42, SHA, fx->now + 1000);
    store_run_result rr;
    char why[128] = "";
    assert_int_equal(store_run_apply(fx->st, &u, NULL, NULL, &rr, why, sizeof(why)), CRCR_E_STATE);
    assert_string_equal(run_of(fx, 1).conclusion, "timed_out");
    /* a second sweep finds nothing more to do */
    sweeper_result res = sweep(fx, "instance-a", fx->now + 2000);
    assert_int_equal(res.cleaned, 0);
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(count_rows(&l, "check_run", L4_REPO), 1);
}

static void only_the_lease_holder_sweeps(void **state)
{
    fixture *fx = *state;
    pr_delivery(fx, "d", SHA, "[]");
    assert_true(sweep(fx, "instance-a", fx->now - 1000).leader);
    const char *none[] = {NULL};
    ut_ingest(fx->st, "old", 0, SHA, "{}", none, fx->now - 86400 * 1000LL - HOUR_MS);

    start_run(fx, "d", L4_REPO, 1, 4, SHA, fx->now - 2 * HOUR_MS, RUNNING_BODY);
    sweeper_result res = sweep(fx, "instance-b", fx->now);
    assert_false(res.leader);
    assert_int_equal(res.cleaned, 0);
    assert_int_equal(res.deleted, 0);
    assert_string_equal(run_of(fx, 1).state, "in_progress");
    assert_int_equal(store_get_delivery(fx->st, "old", NULL, NULL, NULL), CRCR_OK);
    ut_rows l;
    ut_rows_of(fx->st, "d", &l);
    assert_int_equal(l.n, 3);

    res = sweep(fx, "instance-a", fx->now + 1000);
    assert_true(res.leader);
    assert_int_equal(res.cleaned, 1);
    assert_int_equal(res.deleted, 1);
    assert_string_equal(run_of(fx, 1).state, "completed");

    /* once the holder stops renewing (5 minutes), another instance takes over */
    assert_true(sweep(fx, "instance-b", fx->now + 1000 + 5 * 60 * 1000 + 1).leader);
}

static void retention_deletes_deliveries_past_the_retention_time(void **state)
{
    fixture *fx = *state;
    const char *none[] = {NULL};
    ut_ingest(fx->st, "old", 0, SHA, "{}", none, fx->now - 86400 * 1000LL - 1000);
    ut_ingest(fx->st, "recent", 0, SHA, "{}", none, fx->now - 86400 * 1000LL + HOUR_MS);
    sweeper_result res = sweep(fx, "instance-a", fx->now);
    assert_true(res.leader);
    assert_int_equal(res.deleted, 1);
    assert_int_equal(store_get_delivery(fx->st, "old", NULL, NULL, NULL), CRCR_E_NOT_FOUND);
    assert_int_equal(store_get_delivery(fx->st, "recent", NULL, NULL, NULL), CRCR_OK);
    assert_int_equal(sweep(fx, "instance-a", fx->now).deleted, 0);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(l4_zombie_times_out_with_a_check_run_and_l2_without),
        T(hud_forward_says_completed_timed_out_in_the_stored_callback),
        T(a_stored_callback_that_is_not_an_object_forwards_an_empty_one),
        T(young_runs_and_finished_runs_are_left_alone),
        T(l3_zombie_gets_a_check_run_only_when_labelled_or_marked),
        T(a_check_run_needs_l3_both_when_the_run_started_and_now),
        T(a_delisted_repo_keeps_the_level_it_ran_at),
        T(a_late_callback_cannot_complete_a_timed_out_run_again),
        T(only_the_lease_holder_sweeps),
        T(retention_deletes_deliveries_past_the_retention_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
