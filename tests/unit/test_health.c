/* Unit tests for level health: stats, classification at the threshold edges, the window
 * parser, and the report over a real (in-memory SQLite) store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "allowlist.h"
#include "config.h"
#include "health.h"
#include "store.h"

#define MIN_MS 60000LL
#define HOUR_MS 3600000LL

/* A history built run by run; each run is its own PR head unless `group` is given. */
typedef struct history {
    health_run runs[1024];
    size_t n;
} history;

static void add(history *h, crcr_outcome o, int count)
{
    for (int i = 0; i < count; i++) {
        int64_t base = 1000000 + (int64_t)h->n * 10 * MIN_MS;
        h->runs[h->n] = (health_run){.outcome = o,
                                     .group = 1000 + h->n,
                                     .dispatched_at = base,
                                     .started_at = base + MIN_MS,
                                     .completed_at = o == OUTCOME_RUNNING ? 0 : base + 5 * MIN_MS,
                                     .queue_ms = MIN_MS,
                                     .exec_ms = o == OUTCOME_RUNNING ? -1 : 4 * MIN_MS};
        h->n++;
    }
}

/* One PR head of two runs, dispatched at 0 and finishing at `total_ms`. */
static void add_head(history *h, uint64_t group, int64_t total_ms)
{
    h->runs[h->n++] = (health_run){.outcome = OUTCOME_SUCCESS,
                                   .group = group,
                                   .dispatched_at = 5000,
                                   .started_at = 6000,
                                   .completed_at = 5000 + total_ms / 2,
                                   .queue_ms = 1000,
                                   .exec_ms = 1000};
    h->runs[h->n++] = (health_run){.outcome = OUTCOME_SUCCESS,
                                   .group = group,
                                   .dispatched_at = 5000 + 10,
                                   .started_at = 7000,
                                   .completed_at = 5000 + total_ms,
                                   .queue_ms = 1000,
                                   .exec_ms = 1000};
}

static health_verdict judge(const history *h, crcr_level level, health_stats *s)
{
    health_thresholds t;
    health_thresholds_default(&t);
    assert_int_equal(health_compute(h->runs, h->n, 0, s), CRCR_OK);
    health_verdict v;
    health_classify(s, level, &t, &v);
    assert_true(v.reason[0] != '\0');
    return v;
}

/* success/100 runs at `level` */
static health_verdict judge_rate(int success, int total, crcr_level level)
{
    history *h = calloc(1, sizeof(*h));
    add(h, OUTCOME_SUCCESS, success);
    add(h, OUTCOME_FAILURE, total - success);
    health_stats s;
    health_verdict v = judge(h, level, &s);
    free(h);
    return v;
}

static void success_rate_excludes_cancelled_and_counts_timeouts_as_failures(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 8);
    add(&h, OUTCOME_FAILURE, 1);
    add(&h, OUTCOME_TIMED_OUT, 1);
    add(&h, OUTCOME_CANCELLED, 5);
    add(&h, OUTCOME_OTHER, 0);
    add(&h, OUTCOME_RUNNING, 2);
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.runs, 17);
    assert_int_equal(s.completed, 15);
    assert_int_equal(s.cancelled, 5);
    assert_int_equal(s.timed_out, 1);
    assert_int_equal(s.running, 2);
    assert_int_equal(s.rate_runs, 10);
    assert_true(s.success_pct > 79.99 && s.success_pct < 80.01);
    assert_true(s.timeout_pct > 6.6 && s.timeout_pct < 6.7); /* 1 of 15 completed */
}

static void other_conclusions_count_against_the_success_rate(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 9);
    add(&h, OUTCOME_OTHER, 1);
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.failure, 1);
    assert_true(s.success_pct > 89.99 && s.success_pct < 90.01);
}

static void l2_at_exactly_70_percent_is_below_level_and_recommends_l1(void **state)
{
    health_verdict v = judge_rate(70, 100, CRCR_LEVEL_L2);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    assert_int_equal(v.recommended, CRCR_LEVEL_L1);
    assert_int_equal(v.meets, CRCR_LEVEL_L1);
    assert_non_null(strstr(v.reason, "L2 threshold 70%"));
}

static void l2_just_above_70_percent_is_at_risk(void **state)
{
    health_verdict v = judge_rate(71, 100, CRCR_LEVEL_L2);
    assert_int_equal(v.status, HEALTH_AT_RISK);
    assert_int_equal(v.recommended, CRCR_LEVEL_L2);
}

static void l2_margin_ends_at_75_percent(void **state)
{
    assert_int_equal(judge_rate(75, 100, CRCR_LEVEL_L2).status, HEALTH_AT_RISK);
    assert_int_equal(judge_rate(76, 100, CRCR_LEVEL_L2).status, HEALTH_HEALTHY);
}

static void l3_at_90_percent_is_below_and_recommends_l2(void **state)
{
    health_verdict v = judge_rate(90, 100, CRCR_LEVEL_L3);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    assert_int_equal(v.recommended, CRCR_LEVEL_L2);
    assert_int_equal(judge_rate(91, 100, CRCR_LEVEL_L3).status, HEALTH_AT_RISK);
    assert_int_equal(judge_rate(95, 100, CRCR_LEVEL_L3).status, HEALTH_AT_RISK);
    assert_int_equal(judge_rate(96, 100, CRCR_LEVEL_L3).status, HEALTH_HEALTHY);
}

static void l4_margin_is_half_the_room_left_so_97_5_is_the_edge(void **state)
{
    health_verdict v = judge_rate(95, 100, CRCR_LEVEL_L4);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    assert_int_equal(v.recommended, CRCR_LEVEL_L3);
    assert_int_equal(judge_rate(96, 100, CRCR_LEVEL_L4).status, HEALTH_AT_RISK);
    assert_int_equal(judge_rate(195, 200, CRCR_LEVEL_L4).status, HEALTH_AT_RISK); /* 97.5 */
    assert_int_equal(judge_rate(196, 200, CRCR_LEVEL_L4).status, HEALTH_HEALTHY); /* 98.0 */
    assert_int_equal(judge_rate(100, 100, CRCR_LEVEL_L4).status, HEALTH_HEALTHY);
}

static void a_failing_l4_repo_can_fall_to_l1(void **state)
{
    health_verdict v = judge_rate(50, 100, CRCR_LEVEL_L4);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    assert_int_equal(v.recommended, CRCR_LEVEL_L1);
}

static void fewer_than_ten_counted_runs_is_at_risk_whatever_the_rate(void **state)
{
    health_verdict v = judge_rate(9, 9, CRCR_LEVEL_L3);
    assert_int_equal(v.status, HEALTH_AT_RISK);
    assert_non_null(strstr(v.reason, "too few runs"));
    assert_int_equal(judge_rate(0, 9, CRCR_LEVEL_L3).status, HEALTH_AT_RISK);
    assert_int_equal(judge_rate(10, 10, CRCR_LEVEL_L3).status, HEALTH_HEALTHY);
    /* cancelled runs are not in the denominator */
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 9);
    add(&h, OUTCOME_CANCELLED, 20);
    health_stats s;
    assert_int_equal(judge(&h, CRCR_LEVEL_L2, &s).status, HEALTH_AT_RISK);
}

static void pr_head_time_limit_is_inclusive_at_three_hours(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 20);
    add_head(&h, 1, 3 * HOUR_MS);
    health_stats s;
    health_verdict v = judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.total_max_ms, 3 * HOUR_MS);
    /* within the limit but past 90 % of it */
    assert_int_equal(v.status, HEALTH_AT_RISK);
    assert_non_null(strstr(v.reason, "close to"));

    history g = {0};
    add(&g, OUTCOME_SUCCESS, 20);
    add_head(&g, 1, 3 * HOUR_MS + 1);
    v = judge(&g, CRCR_LEVEL_L3, &s);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    assert_int_equal(v.recommended, CRCR_LEVEL_L1); /* the time rule is L2's */
    assert_non_null(strstr(v.reason, "slowest PR head"));

    history k = {0};
    add(&k, OUTCOME_SUCCESS, 20);
    add_head(&k, 1, 2 * HOUR_MS);
    assert_int_equal(judge(&k, CRCR_LEVEL_L3, &s).status, HEALTH_HEALTHY);
}

static void a_pr_head_still_running_is_not_timed_yet(void **state)
{
    history h = {0};
    add_head(&h, 7, 10 * HOUR_MS);
    h.runs[1].outcome = OUTCOME_RUNNING;
    h.runs[1].completed_at = 0;
    add_head(&h, 8, 30 * MIN_MS);
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.heads, 1);
    assert_int_equal(s.total_max_ms, 30 * MIN_MS);
    assert_int_equal(s.total_p90_ms, 30 * MIN_MS);
}

static void percentiles_are_nearest_rank(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 10);
    for (size_t i = 0; i < 10; i++) {
        h.runs[i].queue_ms = (int64_t)(i + 1) * 1000;
        h.runs[i].exec_ms = (int64_t)(10 - i) * 100;
    }
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.queue_p50_ms, 5000);
    assert_int_equal(s.queue_p90_ms, 9000);
    assert_int_equal(s.exec_p50_ms, 500);
    assert_int_equal(s.exec_p90_ms, 900);
}

static void callback_rejection_rate_counts_both_transitions_of_a_run(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 3);   /* 2 callbacks each */
    add(&h, OUTCOME_RUNNING, 1);   /* 1 */
    add(&h, OUTCOME_TIMED_OUT, 1); /* in_progress only: the sweeper completed it */
    health_stats s;
    assert_int_equal(health_compute(h.runs, h.n, 2, &s), CRCR_OK);
    assert_int_equal(s.callbacks_accepted, 8);
    assert_int_equal(s.callbacks_rejected, 2);
    assert_true(s.reject_pct > 19.99 && s.reject_pct < 20.01);
}

static void nightly_runs_are_counted_apart_from_the_rates(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 10);
    add(&h, OUTCOME_FAILURE, 5);
    for (size_t i = 10; i < 15; i++)
        h.runs[i].nightly = true;
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.runs, 10);
    assert_int_equal(s.nightly, 5);
    assert_true(s.success_pct > 99.9);
}

static void l1_and_unlisted_repos_are_not_measured(void **state)
{
    health_verdict v = judge_rate(0, 50, CRCR_LEVEL_L1);
    assert_int_equal(v.status, HEALTH_NOT_MEASURED);
    assert_int_equal(v.recommended, CRCR_LEVEL_L1);
    assert_string_equal(health_status_name(v.status), "not_measured");
}

static void no_runs_at_all_has_unknown_metrics(void **state)
{
    health_stats s;
    assert_int_equal(health_compute(NULL, 0, 0, &s), CRCR_OK);
    assert_true(s.success_pct < 0);
    assert_int_equal(s.queue_p50_ms, -1);
    assert_int_equal(s.total_max_ms, -1);
    assert_int_equal(s.last_run_at, 0);
}

static void window_parser_accepts_units_within_bounds(void **state)
{
    int64_t ms = 0;
    assert_int_equal(health_parse_window("7d", &ms), 0);
    assert_int_equal(ms, 7 * 24 * HOUR_MS);
    assert_int_equal(health_parse_window("36h", &ms), 0);
    assert_int_equal(ms, 36 * HOUR_MS);
    assert_int_equal(health_parse_window("90m", &ms), 0);
    assert_int_equal(ms, 90 * MIN_MS);
    assert_int_equal(health_parse_window("90d", &ms), 0);
    assert_int_equal(health_parse_window("91d", &ms), -1);
    assert_int_equal(health_parse_window("30m", &ms), -1);
    assert_int_equal(health_parse_window("0d", &ms), -1);
    assert_int_equal(health_parse_window("-1d", &ms), -1);
    assert_int_equal(health_parse_window("7x", &ms), -1);
    assert_int_equal(health_parse_window("d", &ms), -1);
    assert_int_equal(health_parse_window("", &ms), -1);
    assert_int_equal(health_parse_window("99999999999999d", &ms), -1);
}

/* ---- the report over a store ---- */

static const char YAML[] = "L1:\n  - one/l1\nL2:\n  - two/l2\nL3:\n  dev:\n    three/l3: [a]\n"
                           "L4:\n  - four/l4\n";

static void window_labels_use_the_largest_exact_unit_and_read_back(void **state)
{
    static const struct {
        int64_t ms;
        const char *label;
    } cases[] = {
        {7 * 24 * HOUR_MS, "7d"}, {24 * HOUR_MS, "1d"},       {36 * HOUR_MS, "36h"},
        {60 * MIN_MS, "1h"},      {90 * MIN_MS, "90m"},       {5430000, "5430s"},
        {3601000, "3601s"},       {90 * 24 * HOUR_MS, "90d"},
    };
    char t[24];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        health_window_label(cases[i].ms, t, sizeof(t));
        assert_string_equal(t, cases[i].label);
        int64_t back = 0;
        assert_int_equal(health_parse_window(t, &back), 0);
        assert_int_equal(back, cases[i].ms);
    }
    health_window_label(90 * MIN_MS, t, 2); /* the buffer's size is kept */
    assert_string_equal(t, "9");
}

static void ingest(store *st, const char *id, int64_t pr, const char *sha, const char *repo,
                   int64_t now)
{
    store_new_job job = {.kind = "dispatch", .target = repo, .due_at = now};
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "synchronize",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = pr,
                        .head_sha = sha,
                        .received_at = now,
                        .payload = "{}",
                        .payload_len = 2,
                        .status = "queued"};
    assert_int_equal(store_ingest(st, &d, &job, 1), CRCR_OK);
}

static void run(store *st, const char *id, const char *repo, int64_t run_id, const char *status,
                const char *conclusion, int64_t pr, const char *sha, int64_t now)
{
    char run_text[24];
    snprintf(run_text, sizeof(run_text), "%lld", (long long)run_id);
    store_run_update u = {.key = {.delivery_id = id,
                                  .repo = repo,
                                  .run_id = run_text,
                                  .run_attempt = 1,
                                  .job_name = "build"},
                          .status = status,
                          .conclusion = conclusion,
                          .event_type = "pull_request",
                          .level = 4,
                          .pr_number = pr,
                          .head_sha = sha,
                          .workflow_name = "ci",
                          .details_url = "https://github.com/x/y/actions/runs/1",
                          .test_passed = -1,
                          .test_failed = -1,
                          .test_skipped = -1,
                          .payload = "{\"callback_token\":\"secret\"}",
                          .payload_len = 27,
                          .now = now};
    store_run_result res;
    char why[128];
    assert_int_equal(store_run_apply(st, &u, NULL, NULL, &res, why, sizeof(why)), CRCR_OK);
}

typedef struct seen {
    int n;
    int with_payload;
} seen;

static void count_row(void *ctx, const store_run_row *r)
{
    seen *s = ctx;
    s->n++;
    if (r->payload)
        s->with_payload++;
}

static int count_delivery(void *ctx, const store_delivery_row *r)
{
    (*(int *)ctx)++;
    return 0;
}

static void report_reads_runs_per_repo_in_level_order(void **state)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    int64_t now = 1800000000000LL;
    const char *sha = "1111111111111111111111111111111111111111";
    for (int i = 0; i < 12; i++) {
        char id[32];
        snprintf(id, sizeof(id), "d%d", i);
        ingest(st, id, 100 + i, sha, "four/l4", now - 100000);
        run(st, id, "four/l4", 500 + i, "in_progress", NULL, 100 + i, sha, now - 90000);
        run(st, id, "four/l4", 500 + i, "completed", i < 11 ? "success" : "failure", 100 + i, sha,
            now - 80000);
    }
    ingest(st, "old", 7, sha, "two/l2", now - 30LL * 86400000);
    run(st, "old", "two/l2", 9, "in_progress", NULL, 7, sha, now - 30LL * 86400000);
    run(st, "old", "two/l2", 9, "completed", "failure", 7, sha, now - 30LL * 86400000);
    assert_int_equal(store_callback_rejected(st, "FOUR/l4", now - 1000, 403), CRCR_OK);

    allowlist *al = NULL;
    assert_int_equal(allowlist_parse(YAML, strlen(YAML), &al, NULL), CRCR_OK);
    health_thresholds t;
    health_thresholds_default(&t);
    health_report rep;
    assert_int_equal(health_report_build(st, al, NULL, now, HEALTH_WINDOW_DEFAULT_MS, &t, &rep),
                     CRCR_OK);
    assert_int_equal(rep.n, 4);
    assert_string_equal(rep.entries[0].repo, "four/l4");
    assert_string_equal(rep.entries[1].repo, "three/l3");
    assert_string_equal(rep.entries[1].device, "dev");
    assert_string_equal(rep.entries[3].repo, "one/l1");
    const health_stats *s = &rep.entries[0].stats;
    assert_int_equal(s->runs, 12);
    assert_int_equal(s->success, 11);
    assert_int_equal(s->callbacks_accepted, 24);
    assert_int_equal(s->callbacks_rejected, 1);
    assert_int_equal(s->queue_p50_ms, 10000);
    assert_int_equal(s->exec_p50_ms, 10000);
    assert_int_equal(s->heads, 12);
    assert_int_equal(s->total_max_ms, 20000);
    assert_int_equal(rep.entries[0].verdict.status, HEALTH_BELOW_LEVEL); /* 91.7 % at L4 */
    assert_int_equal(rep.entries[0].verdict.recommended, CRCR_LEVEL_L3);
    /* the 30-day-old run is outside the 7-day window */
    assert_int_equal(rep.entries[2].stats.runs, 0);
    assert_int_equal(rep.entries[2].verdict.status, HEALTH_AT_RISK);

    buf_t b;
    buf_init(&b, 1 << 20);
    assert_int_equal(health_report_md(&rep, &b), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&b), "| Repo | Level | Runs | Success |"));
    assert_non_null(strstr(buf_cstr(&b), "| `four/l4` | L4 | 12 | 91.7% |"));
    assert_non_null(strstr(buf_cstr(&b), "**below_level** | L3 |"));
    buf_reset(&b);
    assert_int_equal(health_report_json(&rep, &b), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&b), "\"repos\":[{\"repo\":\"four/l4\",\"level\":\"L4\""));
    assert_non_null(strstr(buf_cstr(&b), "\"recommended_level\":\"L3\""));
    assert_null(strstr(buf_cstr(&b), "secret"));
    buf_reset(&b);
    assert_int_equal(health_report_text(&rep, &b), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&b), "four/l4"));
    buf_free(&b);
    health_report_free(&rep);

    /* one repo only, and without an allowlist: levels from the runs */
    assert_int_equal(
        health_report_build(st, al, "Four/L4", now, HEALTH_WINDOW_DEFAULT_MS, &t, &rep), CRCR_OK);
    assert_int_equal(rep.n, 1);
    health_report_free(&rep);
    assert_int_equal(health_report_build(st, NULL, NULL, now, 40LL * 86400000, &t, &rep), CRCR_OK);
    assert_true(rep.from_runs);
    assert_int_equal(rep.n, 2);
    assert_string_equal(rep.entries[0].repo, "four/l4");
    assert_int_equal(rep.entries[0].level, CRCR_LEVEL_L4);
    health_report_free(&rep);

    /* the store filters the HUD relies on; a second, still open run of PR 103 keeps its body
     * (completed runs keep none) */
    run(st, "d3", "four/l4", 900, "in_progress", NULL, 103, sha, now - 1000);
    seen sn = {0};
    store_run_filter f = {.repo = "FOUR/L4", .pr_number = 103, .no_payload = true};
    assert_int_equal(store_list_runs(st, &f, count_row, &sn), CRCR_OK);
    assert_int_equal(sn.n, 2);
    assert_int_equal(sn.with_payload, 0);
    memset(&sn, 0, sizeof(sn));
    store_run_filter g = {.head_sha = sha, .kind = 1, .since = now - 86400000};
    assert_int_equal(store_list_runs(st, &g, count_row, &sn), CRCR_OK);
    assert_int_equal(sn.n, 13);
    assert_int_equal(sn.with_payload, 1);
    memset(&sn, 0, sizeof(sn));
    store_run_filter k = {.kind = 2};
    assert_int_equal(store_list_runs(st, &k, count_row, &sn), CRCR_OK);
    assert_int_equal(sn.n, 0);
    int nd = 0;
    store_filter df = {.pr_number = 105};
    assert_int_equal(store_list_deliveries(st, &df, count_delivery, &nd), CRCR_OK);
    assert_int_equal(nd, 1);

    allowlist_free(al);
    store_close(st);
}

/* CRCR_HEALTH_* replace the defaults: with L3 at 80 % an 85 % repo is fine, and the PR time
 * limit follows CRCR_HEALTH_PR_HOURS. */
static void configured_thresholds_replace_the_defaults(void **state)
{
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.health_success_pct[2] = 60;
    cfg.health_success_pct[3] = 80;
    cfg.health_success_pct[4] = 99;
    cfg.health_pr_hours = 5;
    health_thresholds t;
    health_thresholds_from_config(&t, &cfg);
    assert_int_equal(t.success_pct[CRCR_LEVEL_L2], 60);
    assert_int_equal(t.success_pct[CRCR_LEVEL_L3], 80);
    assert_int_equal(t.success_pct[CRCR_LEVEL_L4], 99);
    assert_true(t.pr_total_max_ms == 5LL * 3600 * 1000);

    history *h = calloc(1, sizeof(*h));
    add(h, OUTCOME_SUCCESS, 85);
    add(h, OUTCOME_FAILURE, 15);
    health_stats s;
    assert_int_equal(health_compute(h->runs, h->n, 0, &s), CRCR_OK);
    health_verdict v;
    health_classify(&s, CRCR_LEVEL_L3, &t, &v);
    assert_int_not_equal(v.status, HEALTH_BELOW_LEVEL);
    health_thresholds d;
    health_thresholds_default(&d);
    health_classify(&s, CRCR_LEVEL_L3, &d, &v);
    assert_int_equal(v.status, HEALTH_BELOW_LEVEL);
    free(h);
}

static void superseded_runs_count_apart_and_in_no_rate(void **state)
{
    history h = {0};
    add(&h, OUTCOME_SUCCESS, 9);
    add(&h, OUTCOME_FAILURE, 1);
    add(&h, OUTCOME_SUPERSEDED, 40); /* a repository whose contributors push often */
    health_stats s;
    judge(&h, CRCR_LEVEL_L2, &s);
    assert_int_equal(s.runs, 50);
    assert_int_equal(s.superseded, 40);
    assert_int_equal(s.completed, 10);
    assert_int_equal(s.rate_runs, 10);
    assert_int_equal(s.timed_out, 0);
    assert_int_equal(s.failure, 1);
    assert_int_equal(s.running, 0);
    assert_true(s.success_pct > 89.99 && s.success_pct < 90.01);
    assert_true(s.timeout_pct > -0.01 && s.timeout_pct < 0.01);
    assert_int_equal(s.heads, 10); /* their PR heads are not waited for */
    /* A stored run: its end reason decides, whatever it reported. */
    health_run r = health_run_of("completed", "failure", "superseded", "pull_request", 7, "abc", 1,
                                 2, 3, 1, 1);
    assert_int_equal(r.outcome, OUTCOME_SUPERSEDED);
    r = health_run_of("in_progress", NULL, "pr_closed", "pull_request", 7, "abc", 1, 2, 0, 1, -1);
    assert_int_equal(r.outcome, OUTCOME_SUPERSEDED);
    r = health_run_of("completed", "failure", NULL, "pull_request", 7, "abc", 1, 2, 3, 1, 1);
    assert_int_equal(r.outcome, OUTCOME_FAILURE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(success_rate_excludes_cancelled_and_counts_timeouts_as_failures),
        cmocka_unit_test(other_conclusions_count_against_the_success_rate),
        cmocka_unit_test(superseded_runs_count_apart_and_in_no_rate),
        cmocka_unit_test(l2_at_exactly_70_percent_is_below_level_and_recommends_l1),
        cmocka_unit_test(l2_just_above_70_percent_is_at_risk),
        cmocka_unit_test(l2_margin_ends_at_75_percent),
        cmocka_unit_test(l3_at_90_percent_is_below_and_recommends_l2),
        cmocka_unit_test(configured_thresholds_replace_the_defaults),
        cmocka_unit_test(l4_margin_is_half_the_room_left_so_97_5_is_the_edge),
        cmocka_unit_test(a_failing_l4_repo_can_fall_to_l1),
        cmocka_unit_test(fewer_than_ten_counted_runs_is_at_risk_whatever_the_rate),
        cmocka_unit_test(pr_head_time_limit_is_inclusive_at_three_hours),
        cmocka_unit_test(a_pr_head_still_running_is_not_timed_yet),
        cmocka_unit_test(percentiles_are_nearest_rank),
        cmocka_unit_test(callback_rejection_rate_counts_both_transitions_of_a_run),
        cmocka_unit_test(nightly_runs_are_counted_apart_from_the_rates),
        cmocka_unit_test(l1_and_unlisted_repos_are_not_measured),
        cmocka_unit_test(no_runs_at_all_has_unknown_metrics),
        cmocka_unit_test(window_parser_accepts_units_within_bounds),
        cmocka_unit_test(window_labels_use_the_largest_exact_unit_and_read_back),
        cmocka_unit_test(report_reads_runs_per_repo_in_level_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
