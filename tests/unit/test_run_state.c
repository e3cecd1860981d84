/* Unit tests for run_state.c: the run state machine as a table, without a database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "run_state.h"

typedef struct row_case {
    const char *prev_state; /* NULL: no row */
    const char *prev_conclusion;
    int64_t prev_started;
    const char *status;
    const char *conclusion;
    bool single_shot;
    int64_t dispatched_at;
    run_outcome want;
    const char *reason;
    int64_t queue_ms, exec_ms, started_at;
} row_case;

#define NOW 100000

static const row_case CASES[] = {
    /* in_progress */
    {NULL, NULL, 0, "in_progress", NULL, false, 70000, RUN_APPLY, NULL, 30000, -1, NOW},
    {NULL, NULL, 0, "in_progress", NULL, false, 0, RUN_APPLY, NULL, -1, -1, NOW},
    {NULL, NULL, 0, "in_progress", NULL, false, NOW + 5, RUN_APPLY, NULL, 0, -1, NOW}, /* clamp */
    {"in_progress", NULL, 90000, "in_progress", NULL, false, 70000, RUN_DUPLICATE, NULL, -1, -1,
     90000},
    {"completed", "success", 90000, "in_progress", NULL, false, 70000, RUN_INVALID,
     "in_progress after completed", -1, -1, 90000},
    /* completed */
    {"in_progress", NULL, 90000, "completed", "success", false, 70000, RUN_APPLY, NULL, -1, 10000,
     90000},
    {"in_progress", NULL, NOW + 7, "completed", "failure", false, 70000, RUN_APPLY, NULL, -1, 0,
     NOW + 7},
    {NULL, NULL, 0, "completed", "success", false, 70000, RUN_INVALID,
     "completed without prior in_progress", -1, -1, 0},
    {"completed", "success", 90000, "completed", "success", false, 70000, RUN_DUPLICATE, NULL, -1,
     -1, 90000},
    {"completed", NULL, 90000, "completed", NULL, false, 70000, RUN_DUPLICATE, NULL, -1, -1, 90000},
    {"completed", "success", 90000, "completed", "failure", false, 70000, RUN_INVALID,
     "already completed with conclusion success", -1, -1, 90000},
    {"completed", NULL, 90000, "completed", "failure", false, 70000, RUN_INVALID,
     "already completed with conclusion null", -1, -1, 90000},
    {"completed", "failure", 90000, "completed", NULL, false, 70000, RUN_INVALID,
     "already completed with conclusion failure", -1, -1, 90000},
    /* single-shot (nightly/periodic): completed without in_progress, once */
    {NULL, NULL, 0, "completed", "success", true, 0, RUN_APPLY, NULL, -1, -1, 0},
    {"completed", "success", 0, "completed", "success", true, 0, RUN_DUPLICATE, NULL, -1, -1, 0},
};

static void transitions_follow_the_table(void **state)
{
    for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        const row_case *c = &CASES[i];
        run_prev prev = {0};
        if (c->prev_state) {
            prev.exists = true;
            snprintf(prev.state, sizeof(prev.state), "%s", c->prev_state);
            prev.has_conclusion = c->prev_conclusion != NULL;
            if (c->prev_conclusion)
                snprintf(prev.conclusion, sizeof(prev.conclusion), "%s", c->prev_conclusion);
            prev.started_at = c->prev_started;
        }
        store_run_update u = {.status = c->status,
                              .conclusion = c->conclusion,
                              .single_shot = c->single_shot,
                              .now = NOW};
        store_run_result res = {.queue_ms = -1, .exec_ms = -1};
        char reason[128] = "";
        run_outcome o = run_state_next(&prev, &u, c->dispatched_at, &res, reason, sizeof(reason));
        if (o != c->want)
            fail_msg("case %zu: outcome %d, want %d (%s)", i, (int)o, (int)c->want, reason);
        assert_string_equal(reason, c->reason ? c->reason : "");
        assert_int_equal(res.duplicate, c->want == RUN_DUPLICATE);
        assert_int_equal(res.dispatched_at, c->dispatched_at);
        if (o == RUN_APPLY) {
            if (res.queue_ms != c->queue_ms || res.exec_ms != c->exec_ms ||
                res.started_at != c->started_at)
                fail_msg("case %zu: queue %lld exec %lld started %lld", i, (long long)res.queue_ms,
                         (long long)res.exec_ms, (long long)res.started_at);
        }
    }
}

static void row_params_are_the_upsert_columns_in_order(void **state)
{
    store_run_update u = {.key = {.delivery_id = "d",
                                  .repo = "o/r",
                                  .run_id = "7",
                                  .run_attempt = 2,
                                  .workflow_name = NULL,
                                  .job_name = "build"},
                          .status = "in_progress",
                          .conclusion = "ignored-while-in-progress",
                          .event_type = "push",
                          .level = 4,
                          .pr_number = 0,
                          .head_sha = "abc",
                          .details_url = "https://x",
                          .test_passed = 3,
                          .test_failed = -1,
                          .test_skipped = -1,
                          .payload = "{}",
                          .payload_len = 2,
                          .now = NOW};
    store_run_result res = {.dispatched_at = 0, .started_at = NOW, .queue_ms = -1, .exec_ms = -1};
    store_param p[RUN_UPSERT_PARAMS];
    run_row_params(&u, &res, p);
    assert_string_equal(p[0].text, "d");
    assert_string_equal(p[4].text, "build");
    assert_string_equal(p[10].text, ""); /* no workflow name: "" is part of the key */
    assert_true(p[11].is_null);          /* a conclusion only once completed */
    assert_true(p[14].is_null);          /* dispatched_at unknown */
    assert_false(p[15].is_null);
    assert_int_equal(p[15].i, NOW);
    assert_true(p[16].is_null); /* completed_at */
    assert_true(p[17].is_null && p[18].is_null);
    assert_int_equal(p[19].i, 3);
    assert_true(p[20].is_null);
    assert_int_equal(p[22].kind, STORE_P_BLOB);
    assert_int_equal(p[22].len, 2);
    assert_int_equal(p[23].i, NOW);
    u.status = "completed";
    run_row_params(&u, &res, p);
    assert_string_equal(p[11].text, "ignored-while-in-progress");
    assert_int_equal(p[16].i, NOW);
}

static void list_limits_are_clamped(void **state)
{
    assert_int_equal(run_list_limit(NULL), 1000);
    store_run_filter f = {.limit = 0};
    assert_int_equal(run_list_limit(&f), 1000);
    f.limit = 5;
    assert_int_equal(run_list_limit(&f), 5);
    f.limit = 1000000;
    assert_int_equal(run_list_limit(&f), 100000);
    f.offset = -3;
    assert_int_equal(run_list_offset(&f), 0);
    f.offset = 40;
    assert_int_equal(run_list_offset(&f), 40);
}

static void rate_window_counts_and_decides(void **state)
{
    /* A stored count less what expired; without a count row, the recount. */
    assert_int_equal(rate_window_count(true, 10, 3, 99), 7);
    assert_int_equal(rate_window_count(true, 2, 5, 99), 0);
    assert_int_equal(rate_window_count(false, 10, 3, 4), 4);
    bool ok = false;
    int64_t retry = -1;
    assert_int_equal(rate_window_decide(4, 5, 0, 1000, 60000, &ok, &retry), 5);
    assert_true(ok);
    assert_int_equal(retry, 0);
    assert_int_equal(rate_window_decide(5, 5, 30000, 70000, 60000, &ok, &retry), 5);
    assert_false(ok);
    assert_int_equal(retry, 20000); /* the oldest hit leaves the window at 90 s */
    rate_window_decide(5, 5, 0, 70000, 60000, &ok, &retry);
    assert_int_equal(retry, 1); /* at least 1 ms */
}

/* A run of a dispatch a newer one ended (§3.12): recorded, never reopened, never refused. */
static void runs_of_an_ended_dispatch_are_recorded_and_reopen_nothing(void **state)
{
    static const struct {
        const char *prev_state, *prev_conclusion, *prev_ended, *dispatch_ended;
        const char *status, *conclusion;
        bool only_open;
        run_outcome want;
        const char *ended;
        int64_t exec_ms;
    } cases[] = {
        /* no row yet, the dispatch ended: the first callback is recorded, ended */
        {NULL, NULL, "", "superseded", "in_progress", NULL, false, RUN_APPLY, "superseded", -1},
        {NULL, NULL, "", "pr_closed", "completed", "success", false, RUN_APPLY, "pr_closed", -1},
        /* the relay ended it: a late completed is recorded whatever came before */
        {"completed", "cancelled", "superseded", "superseded", "completed", "success", false,
         RUN_APPLY, "superseded", 10000},
        {"completed", "success", "superseded", "superseded", "completed", "failure", false,
         RUN_APPLY, "superseded", 10000},
        {"completed", "cancelled", "superseded", "superseded", "completed", "cancelled", false,
         RUN_DUPLICATE, "superseded", -1},
        {"completed", "cancelled", "superseded", "superseded", "in_progress", NULL, false,
         RUN_DUPLICATE, "superseded", -1},
        {"in_progress", NULL, "superseded", "superseded", "in_progress", NULL, false, RUN_DUPLICATE,
         "superseded", -1},
        /* the sweeper's timeout leaves an ended run, and a completed one, alone */
        {"in_progress", NULL, "pr_closed", "pr_closed", "completed", "timed_out", true,
         RUN_DUPLICATE, "pr_closed", -1},
        {"completed", "success", "", "", "completed", "timed_out", true, RUN_DUPLICATE, "", -1},
        {"in_progress", NULL, "", "", "completed", "timed_out", true, RUN_APPLY, "", 10000},
        /* a run that completed before its dispatch was ended follows the normal rules */
        {"completed", "success", "", "superseded", "completed", "failure", false, RUN_INVALID, "",
         -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_prev prev = {0};
        if (cases[i].prev_state) {
            prev.exists = true;
            snprintf(prev.state, sizeof(prev.state), "%s", cases[i].prev_state);
            prev.has_conclusion = cases[i].prev_conclusion != NULL;
            snprintf(prev.conclusion, sizeof(prev.conclusion), "%s",
                     cases[i].prev_conclusion ? cases[i].prev_conclusion : "");
            prev.started_at = 90000;
            snprintf(prev.ended, sizeof(prev.ended), "%s", cases[i].prev_ended);
        }
        snprintf(prev.dispatch_ended, sizeof(prev.dispatch_ended), "%s", cases[i].dispatch_ended);
        store_run_update u = {.status = cases[i].status,
                              .conclusion = cases[i].conclusion,
                              .only_open = cases[i].only_open,
                              .single_shot = cases[i].only_open,
                              .now = NOW};
        store_run_result res = {.queue_ms = -1, .exec_ms = -1};
        char reason[128] = "";
        run_outcome o = run_state_next(&prev, &u, 70000, &res, reason, sizeof(reason));
        if (o != cases[i].want || strcmp(res.ended, cases[i].ended) != 0 ||
            (o == RUN_APPLY && res.exec_ms != cases[i].exec_ms))
            fail_msg("case %zu: outcome %d ended '%s' exec %lld (%s)", i, (int)o, res.ended,
                     (long long)res.exec_ms, reason);
        assert_int_equal(res.duplicate, o == RUN_DUPLICATE);
    }
    /* The row keeps the reason: the upsert's last parameter. */
    store_run_update u = {.key = {.delivery_id = "d", .repo = "o/r", .job_name = ""},
                          .status = "completed",
                          .conclusion = "success",
                          .now = NOW};
    store_run_result res = {.queue_ms = -1, .exec_ms = -1};
    snprintf(res.ended, sizeof(res.ended), "superseded");
    store_param p[RUN_UPSERT_PARAMS];
    run_row_params(&u, &res, p);
    assert_string_equal(p[24].text, "superseded");
    res.ended[0] = '\0';
    run_row_params(&u, &res, p);
    assert_true(p[24].is_null);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(transitions_follow_the_table),
        cmocka_unit_test(runs_of_an_ended_dispatch_are_recorded_and_reopen_nothing),
        cmocka_unit_test(row_params_are_the_upsert_columns_in_order),
        cmocka_unit_test(list_limits_are_clamped),
        cmocka_unit_test(rate_window_counts_and_decides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
