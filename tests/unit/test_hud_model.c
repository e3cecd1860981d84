/* Unit tests for what the HUD's pages share (hud_model.h): strict parsing of integer arguments,
 * repositories, PR numbers and shas; run copies (into a capped arena) and their API object; and
 * the HUD's copies of deliveries with their outbox rows, read from a real (in-memory SQLite)
 * store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hud_model.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"

static void integer_arguments_are_digits_within_bounds(void **state)
{
    long v = 0;
    assert_int_equal(hud_int_arg(NULL, 1, 1000, 7, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(hud_int_arg("", 1, 1000, 8, &v), 0);
    assert_int_equal(v, 8);
    assert_int_equal(hud_int_arg("1000", 1, 1000, 7, &v), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(hud_int_arg("0001", 1, 1000, 7, &v), 0);
    assert_int_equal(v, 1);
    v = 42;
    const char *bad[] = {"0",
                         "1001",
                         "-1",
                         "+5",
                         " 5",
                         "5 ",
                         "5x",
                         "0x10",
                         "1e3",
                         "1234567890123" /* 13 characters */,
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(hud_int_arg(bad[i], 1, 1000, 7, &v), -1);
    assert_int_equal(v, 42); /* untouched when refused */
    assert_int_equal(hud_int_arg("123456789012", 1, 999999999999L, 1, &v), 0);
}

static bool repo_ok(const char *s)
{
    char out[CRCR_REPO_NAME_MAX];
    return hud_parse_repo(s, strlen(s), out, sizeof(out));
}

static void repositories_follow_github_names(void **state)
{
    char out[CRCR_REPO_NAME_MAX];
    assert_true(hud_parse_repo("pytorch/pytorch/runs", 15, out, sizeof(out)));
    assert_string_equal(out, "pytorch/pytorch"); /* only the n bytes given */
    assert_true(repo_ok("a-b/c_d.e"));
    assert_true(repo_ok("x/..."));
    char owner39[64], name100[128];
    memset(owner39, 'o', 39);
    snprintf(owner39 + 39, sizeof(owner39) - 39, "/r");
    assert_true(repo_ok(owner39));
    owner39[39] = 'o';
    snprintf(owner39 + 40, sizeof(owner39) - 40, "/r");
    assert_false(repo_ok(owner39)); /* owner of 40 */
    name100[0] = 'o';
    name100[1] = '/';
    memset(name100 + 2, 'n', 100);
    name100[102] = '\0';
    assert_true(repo_ok(name100));
    name100[102] = 'n';
    name100[103] = '\0';
    assert_false(repo_ok(name100)); /* name of 101 */
    const char *bad[] = {"",     "norepo", "/r",    "o/",         "./r",    "../r", "o/.",
                         "o/..", "a/b/c",  "a b/c", "o/<script>", "o/r%20", "o/r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_false(repo_ok(bad[i]));
    /* The copy must fit the caller's buffer. */
    char small[8];
    assert_false(hud_parse_repo("owner/repo", 10, small, sizeof(small)));
    assert_true(hud_parse_repo("own/rep", 7, small, sizeof(small)));
}

static void pr_numbers_and_shas_are_strict(void **state)
{
    int64_t pr = 0;
    assert_true(ids_pr_number("5012/blocking", 4, &pr));
    assert_int_equal(pr, 5012);
    assert_true(ids_pr_number("9999999999", 10, &pr));
    assert_int_equal(pr, 9999999999LL);
    pr = 7;
    assert_false(ids_pr_number("", 0, &pr));
    assert_false(ids_pr_number("0", 1, &pr));
    assert_false(ids_pr_number("00", 2, &pr));
    assert_false(ids_pr_number("12345678901", 11, &pr));
    assert_false(ids_pr_number("-1", 2, &pr));
    assert_false(ids_pr_number("1a", 2, &pr));
    assert_int_equal(pr, 7);

    assert_true(hud_sha_ok("abcdef1"));
    assert_true(hud_sha_ok("ABCDEF0123456789abcdef0123456789abcdef01"));
    char sha64[65];
    memset(sha64, 'a', 64);
    sha64[64] = '\0';
    assert_true(hud_sha_ok(sha64));
    char sha65[66];
    memset(sha65, 'a', 65);
    sha65[65] = '\0';
    assert_false(hud_sha_ok(sha65));
    assert_false(hud_sha_ok("abcdef"));
    assert_false(hud_sha_ok("abcdefg"));
    assert_false(hud_sha_ok(""));
}

static store_run_row a_run(void)
{
    return (store_run_row){.delivery_id = "d1",
                           .repo = "o/r",
                           .job_name = NULL,
                           .workflow_name = "ci",
                           .event_type = "pull_request",
                           .state = "completed",
                           .conclusion = "timed_out",
                           .head_sha = "abc1234",
                           .details_url = "https://example.com/run/1",
                           .run_id = "9000000000",
                           .run_attempt = 2,
                           .pr_number = 77,
                           .level = 4,
                           .dispatched_at = 1000,
                           .started_at = 5000,
                           .completed_at = 3000, /* out of order: the latest still wins */
                           .queue_ms = 1500,
                           .exec_ms = -1,
                           .test_passed = 10,
                           .test_failed = -1,
                           .test_skipped = -1};
}

static void runs_are_copied_and_written_as_api_objects(void **state)
{
    arena a;
    arena_init(&a, HUD_ARENA_MAX);
    run_list l = {.a = &a};
    store_run_row row = a_run();
    char conclusion[16];
    snprintf(conclusion, sizeof(conclusion), "%s", row.conclusion);
    row.conclusion = conclusion;
    hud_collect_run(&l, &row);
    conclusion[0] = 'X'; /* the copy does not follow the store's memory */
    assert_false(l.oom);
    assert_int_equal(l.n, 1);
    const hrun *r = l.v[0];
    assert_string_equal(r->conclusion, "timed_out");
    assert_string_equal(r->job, ""); /* a missing job name reads as "" */
    assert_null(r->artifact_url);
    assert_int_equal(hud_run_time(r), 5000);
    assert_string_equal(hud_run_result(r), "timed_out");

    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    hud_run_json(&w, r, true);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(
        buf_cstr(&b),
        "{\"repo\":\"o/r\",\"level\":\"L4\",\"workflow\":\"ci\",\"job\":\"\",\"state\":"
        "\"completed\",\"conclusion\":\"timed_out\",\"result\":\"timed_out\",\"run_id\":"
        "\"9000000000\","
        "\"run_attempt\":2,\"delivery_id\":\"d1\",\"event_type\":\"pull_request\",\"pr_number\":77,"
        "\"head_sha\":\"abc1234\",\"details_url\":\"https://example.com/run/1\",\"artifact_url\":"
        "null,\"dispatched_at\":\"1970-01-01T00:00:01Z\",\"started_at\":\"1970-01-01T00:00:05Z\","
        "\"completed_at\":\"1970-01-01T00:00:03Z\",\"queue_s\":1.500,\"exec_s\":null,\"tests\":{"
        "\"passed\":10,\"failed\":null,\"skipped\":null}}");
    /* Without the repo, and a run that reported no tests at all. */
    row = a_run();
    row.state = "in_progress";
    row.conclusion = NULL;
    row.test_passed = -1;
    hud_collect_run(&l, &row);
    buf_reset(&b);
    jw_init(&w, &b);
    hud_run_json(&w, l.v[1], false);
    assert_non_null(strstr(buf_cstr(&b), "{\"workflow\":\"ci\","));
    assert_non_null(strstr(buf_cstr(&b), "\"result\":\"running\""));
    assert_non_null(strstr(buf_cstr(&b), "\"tests\":null}"));
    assert_null(strstr(buf_cstr(&b), "\"repo\""));
    buf_free(&b);
    free(l.v);
    arena_free(&a);
}

/* A row of a store older than schema 4 may hold any artifact link: only https:// ones are
 * copied. The details URL is the relay's own, copied as it is. */
static void links_that_are_not_https_are_not_copied(void **state)
{
    arena a;
    arena_init(&a, HUD_ARENA_MAX);
    run_list l = {.a = &a};
    store_run_row row = a_run();
    row.artifact_url = "javascript:alert(document.domain)";
    row.details_url = "http://127.0.0.1:8080/o/r/actions/runs/1"; /* a loopback test host */
    hud_collect_run(&l, &row);
    row.artifact_url = "https://example.com/artifacts/1";
    row.details_url = "https://buildkite.com/acme/vllm-ci/builds/42";
    hud_collect_run(&l, &row);
    assert_int_equal(l.n, 2);
    assert_null(l.v[0]->artifact_url);
    assert_string_equal(l.v[0]->details_url, "http://127.0.0.1:8080/o/r/actions/runs/1");
    assert_string_equal(l.v[1]->artifact_url, "https://example.com/artifacts/1");
    assert_string_equal(l.v[1]->details_url, "https://buildkite.com/acme/vllm-ci/builds/42");
    free(l.v);
    arena_free(&a);
}

static void a_full_arena_marks_the_list_and_stops_collecting(void **state)
{
    arena a;
    arena_init(&a, ARENA_BLOCK);
    run_list l = {.a = &a};
    store_run_row row = a_run();
    char big[ARENA_BLOCK];
    memset(big, 'u', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    row.workflow_name = big; /* does not fit next to the run itself */
    hud_collect_run(&l, &row);
    assert_true(l.oom);
    assert_true(a.oom);
    size_t n = l.n;
    hud_collect_run(&l, &row);
    assert_int_equal(l.n, n); /* nothing more is collected */
    free(l.v);
    arena_free(&a);
}

#define CHECK_BODY "{\"name\":\"crcr / o/one\",\"head_sha\":\"abc\",\"status\":\"queued\"}"

static void ingest(store *st, const char *id, int64_t pr, int64_t now)
{
    store_new_job jobs[] = {
        {.kind = "dispatch", .target = "o/one", .due_at = now},
        {.kind = "check_run",
         .target = "pytorch/pytorch",
         .body = CHECK_BODY,
         .body_len = strlen(CHECK_BODY),
         .due_at = now + 60000},
    };
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "opened",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = pr,
                        .head_sha = "abc",
                        .received_at = now,
                        .payload = "{}",
                        .payload_len = 2,
                        .status = "queued"};
    assert_int_equal(store_ingest(st, &d, jobs, 2), CRCR_OK);
}

static void deliveries_are_listed_with_their_outbox_rows(void **state)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    int64_t now = 1800000000000LL;
    ingest(st, "d-old", 1, now - 1000);
    ingest(st, "d-new", 2, now);
    arena a;
    arena_init(&a, HUD_ARENA_MAX);
    delivery_list dl = {.a = &a};
    store_filter f = {.limit = 10};
    assert_int_equal(store_list_deliveries(st, &f, hud_collect_delivery, &dl), CRCR_OK);
    assert_int_equal(dl.n, 2);
    assert_string_equal(dl.v[0].delivery_id, "d-new"); /* newest first */
    assert_int_equal(dl.v[0].pr_number, 2);
    assert_int_equal(dl.v[0].n_jobs, 0);
    assert_int_equal(hud_load_jobs(st, &a, dl.v, dl.n), CRCR_OK);
    assert_int_equal(dl.v[1].n_jobs, 2);
    const ddoc_job *cr = &dl.v[1].jobs[1];
    assert_string_equal(cr->kind, "check_run");
    assert_string_equal(cr->check_name, "crcr / o/one");
    assert_string_equal(cr->check_status, "queued");
    assert_null(cr->check_conclusion);
    assert_null(cr->body); /* the HUD never holds a body */
    hud_free_deliveries(dl.v, dl.n);

    /* One delivery with its rows, as the delivery page reads it. */
    ddoc_delivery d;
    memset(&d, 0, sizeof(d));
    job_ctx c = {&d, &a, false};
    assert_int_equal(store_get_delivery(st, "d-old", hud_copy_detail_delivery, hud_collect_job, &c),
                     CRCR_OK);
    assert_false(c.oom);
    assert_string_equal(d.event, "pull_request");
    assert_string_equal(d.action, "opened");
    assert_int_equal(d.payload_bytes, 2);
    assert_int_equal(d.n_jobs, 2);
    assert_string_equal(d.jobs[0].target, "o/one");
    ddoc_free_jobs(&d);
    assert_int_equal(store_get_delivery(st, "nope", hud_copy_detail_delivery, hud_collect_job, &c),
                     CRCR_E_NOT_FOUND);
    arena_free(&a);
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(integer_arguments_are_digits_within_bounds),
        cmocka_unit_test(repositories_follow_github_names),
        cmocka_unit_test(pr_numbers_and_shas_are_strict),
        cmocka_unit_test(runs_are_copied_and_written_as_api_objects),
        cmocka_unit_test(links_that_are_not_https_are_not_copied),
        cmocka_unit_test(a_full_arena_marks_the_list_and_stops_collecting),
        cmocka_unit_test(deliveries_are_listed_with_their_outbox_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
