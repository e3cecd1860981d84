/*
 * test_hud_pages.c - the HUD's pages and API (hud.c routing to hud_overview.c, hud_repo.c,
 * hud_pr.c, hud_deliveries.c) served by a minimal relay over a SQLite store filled through
 * store_ingest and store_run_apply: data is escaped (a job name with markup), links are written
 * only for https URLs, stored payloads and bodies never show, the repo matrix pages by 25 rows
 * within bounds, query arguments are checked, and the PR page and blocking answer read the runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "html.h"
#include "hud.h"
#include "json.h"
#include "unit_support.h"

#define SHA "0123456789abcdef0123456789abcdef01234567"
#define L4_REPO "example-org/four"
#define L2_REPO "example-org/two"
#define EVIL_JOB "<script>alert(1)</script>"
#define EVIL_WORKFLOW "CI \"quoted\" & more"
#define GOOD_URL "https://github.com/example-org/four/actions/runs/1002"
#define PAYLOAD_MARKER "PAYLOAD-MARKER-5e1f"
#define TOKEN_MARKER "CALLBACK-TOKEN-MARKER-77aa"
#define PAGE_ROWS 25
#define TWO_PRS 30

static const char ALLOWLIST[] = "L1:\n  - example-org/one\n"
                                "L2:\n  - example-org/two\n"
                                "L3:\n  npu:\n    example-org/npu-ci: [alice]\n"
                                "L4:\n  - example-org/four: [carol]\n";

/* A run that went in progress at `at` and completed a minute later with `conclusion`. */
typedef struct run_spec {
    const char *delivery, *repo, *workflow, *job, *conclusion, *details_url, *artifact_url;
    int64_t run_id, pr;
    int level;
} run_spec;

static void finished_run(store *st, const run_spec *s, int64_t at)
{
    static const char body[] = "{\"callback_token\":\"" TOKEN_MARKER "\"}";
    store_run_update u = ut_run_update(s->delivery, s->repo, s->run_id, s->job, "in_progress", NULL,
                                       s->level, s->pr, SHA, at);
    u.key.workflow_name = s->workflow;
    u.workflow_name = s->workflow;
    u.details_url = s->details_url;
    u.artifact_url = s->artifact_url;
    u.payload = body;
    u.payload_len = strlen(body);
    ut_apply(st, &u);
    if (!s->conclusion)
        return;
    u.status = "completed";
    u.conclusion = s->conclusion;
    u.now = at + 60000;
    ut_apply(st, &u);
}

static void fill(store *st)
{
    int64_t now = clock_now_ms();
    const char *targets[] = {L4_REPO, L2_REPO, NULL};
    ut_ingest(st, "del-pr-42", 42, SHA, "{\"note\":\"" PAYLOAD_MARKER "\"}", targets,
              now - 3600000);
    const run_spec runs[] = {
        {"del-pr-42", L4_REPO, EVIL_WORKFLOW, EVIL_JOB, "failure", "javascript:alert(1)", NULL,
         1001, 42, 4},
        {"del-pr-42", L4_REPO, "CI", "test", "success", GOOD_URL,
         "http://insecure.example.com/a.zip", 1002, 42, 4},
        {"del-pr-42", L4_REPO, "CI", "lint", "cancelled", "https://example.com/x y",
         "https://example.com/artifacts.zip", 1003, 42, 4},
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
        finished_run(st, &runs[i], now - 3000000 + (int64_t)i * 1000);

    /* The dispatch to four was sent in dry-run: its stored body carries the callback token. */
    store_job j;
    assert_int_equal(store_claim(st, now, 60000, &j), CRCR_OK);
    static const char dispatch_body[] =
        "{\"event_type\":\"pull_request\",\"client_payload\":{\"callback_token\":\"" TOKEN_MARKER
        "\"}}";
    assert_int_equal(store_job_finish(st, &j, "dry_run", 0, NULL, NULL, dispatch_body,
                                      strlen(dispatch_body), now),
                     CRCR_OK);
    store_job_free(&j);

    /* A push whose ref carries markup. */
    store_delivery push = {.delivery_id = "del-push",
                           .event = "push",
                           .upstream_repo = "pytorch/pytorch",
                           .head_sha = SHA,
                           .ref = "refs/heads/<img src=x onerror=alert(1)>",
                           .received_at = now - 1000,
                           .payload = "{}",
                           .payload_len = 2,
                           .status = "queued"};
    store_new_job job = {.kind = "dispatch", .target = L4_REPO, .due_at = now};
    assert_int_equal(store_ingest(st, &push, &job, 1), CRCR_OK);

    /* TWO_PRS pull requests with one run each on the L2 repo, PR n newer than PR n-1. */
    for (int pr = 1; pr <= TWO_PRS; pr++) {
        char id[32];
        snprintf(id, sizeof(id), "del-two-%d", pr);
        const char *two[] = {L2_REPO, NULL};
        int64_t at = now - 2000000 + pr * 10000;
        ut_ingest(st, id, 100 + pr, SHA, "{}", two, at);
        run_spec s = {id,       L2_REPO, "CI",      "build",  "success",
                      GOOD_URL, NULL,    2000 + pr, 100 + pr, 2};
        finished_run(st, &s, at + 1000);
    }
}

static int setup(void **state)
{
    ut_app *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    ut_app_start(a, ALLOWLIST, NULL, hud_routes);
    fill(a->app.st);
    *state = a;
    return 0;
}

/* GET, asserting the status. */
static void get(void **state, const char *path, long status, ut_resp *r)
{
    ut_get(r, ut_app_port(state), path, NULL);
    if (r->status != status)
        fail_msg("GET %s: %ld, want %ld: %.300s", path, r->status, status, ut_body(r));
}

/* GET of an API document, parsed (caller frees). */
static jv *get_json(void **state, const char *path)
{
    ut_resp r;
    get(state, path, 200, &r);
    jv *doc = jv_parse(r.body.data, r.body.len, NULL, 0);
    if (!doc)
        fail_msg("GET %s: not JSON", path);
    ut_resp_free(&r);
    return doc;
}

static void assert_absent(const char *page, const char *path, const char *what)
{
    if (strstr(page, what))
        fail_msg("%s shows '%s'", path, what);
}

static void assert_present(const char *page, const char *path, const char *what)
{
    if (!strstr(page, what))
        fail_msg("%s lacks '%s'", path, what);
}

/* GETs `path` (200): each of `present` is in the body, none of `absent` (NULL-terminated). */
static void check_page(void **state, const char *path, const char *const *present,
                       const char *const *absent)
{
    ut_resp r;
    get(state, path, 200, &r);
    for (size_t i = 0; present && present[i]; i++)
        assert_present(ut_body(&r), path, present[i]);
    for (size_t i = 0; absent && absent[i]; i++)
        assert_absent(ut_body(&r), path, absent[i]);
    ut_resp_free(&r);
}

/* The pages that show the L4 repo's runs. */
static const char *const RUN_PAGES[] = {"/crcr/example-org/four", "/crcr/pr/42"};

/* ---- escaping and links ---- */

static void markup_in_job_and_workflow_names_is_escaped(void **state)
{
    static const char *const escaped[] = {"&lt;script&gt;alert(1)&lt;/script&gt;",
                                          "CI &quot;quoted&quot; &amp; more", NULL};
    static const char *const raw[] = {"<script", EVIL_WORKFLOW, NULL};
    for (size_t i = 0; i < sizeof(RUN_PAGES) / sizeof(RUN_PAGES[0]); i++)
        check_page(state, RUN_PAGES[i], escaped, raw);
    ut_resp r;
    get(state, RUN_PAGES[0], 200, &r);
    char csp[256];
    assert_true(ut_resp_header(&r, "Content-Security-Policy", csp, sizeof(csp)));
    assert_string_equal(csp, HTML_CSP);
    ut_resp_free(&r);
    /* the API carries the names as they are, JSON-escaped */
    jv *doc = get_json(state, "/api/v1/repos/example-org/four/runs");
    const jv *jobs = jv_get(doc, "jobs");
    bool found = false;
    for (size_t i = 0; i < jv_arr_len(jobs); i++) {
        const char *job = jv_path_str(jv_arr_at(jobs, i), "job");
        const char *wf = jv_path_str(jv_arr_at(jobs, i), "workflow");
        found =
            found || (job && wf && strcmp(job, EVIL_JOB) == 0 && strcmp(wf, EVIL_WORKFLOW) == 0);
    }
    assert_true(found);
    jv_free(doc);
}

static void markup_in_a_stored_ref_is_escaped(void **state)
{
    static const char *const escaped[] = {"refs/heads/&lt;img src=x onerror=alert(1)&gt;", NULL};
    static const char *const raw[] = {"<img", NULL};
    check_page(state, "/crcr/deliveries", escaped, raw);
    check_page(state, "/crcr/deliveries/del-push", escaped, raw);
}

static void only_https_urls_become_links(void **state)
{
    static const char *const linked[] = {"href=\"" GOOD_URL "\"", NULL};
    static const char *const not_linked[] = {"href=\"javascript:", "javascript:alert",
                                             "href=\"http://insecure",
                                             "href=\"https://example.com/x", NULL};
    for (size_t i = 0; i < sizeof(RUN_PAGES) / sizeof(RUN_PAGES[0]); i++)
        check_page(state, RUN_PAGES[i], linked, not_linked);
    /* the PR page links an https artifact; an http one (a row of an older store: callbacks
     * keep https:// links only) is neither linked nor shown nor served by the API */
    static const char *const artifacts[] = {"href=\"https://example.com/artifacts.zip\"", NULL};
    static const char *const dropped[] = {"insecure.example.com", NULL};
    check_page(state, "/crcr/pr/42", artifacts, dropped);
    static const char *const served[] = {"https://example.com/artifacts.zip", NULL};
    check_page(state, "/api/v1/pr/42", served, dropped);
}

static void stored_payloads_and_bodies_never_show(void **state)
{
    static const char *const paths[] = {"/crcr",
                                        "/crcr/example-org/four",
                                        "/crcr/example-org/two",
                                        "/crcr/pr/42",
                                        "/crcr/deliveries",
                                        "/crcr/deliveries/del-pr-42",
                                        "/api/v1/repos",
                                        "/api/v1/repos/example-org/four/runs",
                                        "/api/v1/pr/42",
                                        "/api/v1/deliveries",
                                        "/api/v1/deliveries/del-pr-42",
                                        "/api/v1/health"};
    static const char *const secrets[] = {PAYLOAD_MARKER, TOKEN_MARKER, "callback_token", NULL};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        check_page(state, paths[i], NULL, secrets);
    /* the delivery page says the dry-run dispatch happened, without its body */
    static const char *const shown[] = {"data-target=\"example-org/four\"", "dry", "bytes", NULL};
    check_page(state, "/crcr/deliveries/del-pr-42", shown, secrets);
}

/* ---- pagination ---- */

static void the_repo_matrix_pages_by_25_rows_newest_first(void **state)
{
    jv *doc = get_json(state, "/api/v1/repos/example-org/two/runs");
    int64_t v = 0;
    assert_true(jv_int(jv_get(doc, "page"), &v) && v == 1);
    assert_true(jv_int(jv_get(doc, "pages"), &v) && v == 2);
    assert_true(jv_int(jv_get(doc, "per_page"), &v) && v == PAGE_ROWS);
    assert_true(jv_int(jv_get(doc, "rows_total"), &v) && v == TWO_PRS);
    const jv *rows = jv_get(doc, "rows");
    assert_int_equal(jv_arr_len(rows), PAGE_ROWS);
    assert_true(jv_int(jv_get(jv_arr_at(rows, 0), "pr_number"), &v) && v == 100 + TWO_PRS);
    assert_true(jv_int(jv_get(jv_arr_at(rows, PAGE_ROWS - 1), "pr_number"), &v) &&
                v == 100 + TWO_PRS - PAGE_ROWS + 1);
    jv_free(doc);

    doc = get_json(state, "/api/v1/repos/example-org/two/runs?page=2");
    rows = jv_get(doc, "rows");
    assert_int_equal(jv_arr_len(rows), TWO_PRS - PAGE_ROWS);
    assert_true(jv_int(jv_get(jv_arr_at(rows, TWO_PRS - PAGE_ROWS - 1), "pr_number"), &v) &&
                v == 101);
    jv_free(doc);

    /* past the last page: an empty page, not an error */
    doc = get_json(state, "/api/v1/repos/example-org/two/runs?page=3");
    assert_int_equal(jv_arr_len(jv_get(doc, "rows")), 0);
    assert_true(jv_int(jv_get(doc, "pages"), &v) && v == 2);
    jv_free(doc);
}

static void the_pager_links_only_to_pages_that_exist(void **state)
{
    static const char *const p1[] = {"Page 1 of 2",
                                     "rel=\"next\" href=\"/crcr/example-org/two?page=2\"",
                                     "<a href=\"/crcr/pr/130\">#130</a>", NULL};
    static const char *const not_p1[] = {"rel=\"prev\"", "<a href=\"/crcr/pr/105\">", NULL};
    check_page(state, "/crcr/example-org/two", p1, not_p1);
    static const char *const p2[] = {"Page 2 of 2", "rel=\"prev\" href=\"/crcr/example-org/two\"",
                                     "<a href=\"/crcr/pr/105\">#105</a>", NULL};
    static const char *const not_p2[] = {"rel=\"next\"", "<a href=\"/crcr/pr/106\">", NULL};
    check_page(state, "/crcr/example-org/two?page=2", p2, not_p2);
    static const char *const p3[] = {"No rows on this page.",
                                     "rel=\"prev\" href=\"/crcr/example-org/two?page=2\"", NULL};
    static const char *const not_p3[] = {"rel=\"next\"", NULL};
    check_page(state, "/crcr/example-org/two?page=3", p3, not_p3);
}

static void bad_query_arguments_are_400(void **state)
{
    static const struct {
        const char *path, *detail;
    } cases[] = {
        {"/api/v1/repos/example-org/two/runs?page=0",
         "{\"detail\":\"page: expected an integer from 1 to 1000\"}"},
        {"/api/v1/repos/example-org/two/runs?page=1001",
         "{\"detail\":\"page: expected an integer from 1 to 1000\"}"},
        {"/api/v1/repos/example-org/two/runs?page=-1",
         "{\"detail\":\"page: expected an integer from 1 to 1000\"}"},
        {"/api/v1/repos/example-org/two/runs?page=2x",
         "{\"detail\":\"page: expected an integer from 1 to 1000\"}"},
        {"/api/v1/repos/example-org/two/runs?tab=all",
         "{\"detail\":\"tab: expected pr or nightly\"}"},
        {"/api/v1/deliveries?limit=201",
         "{\"detail\":\"limit: expected an integer from 1 to 200\"}"},
        {"/api/v1/deliveries?limit=0", "{\"detail\":\"limit: expected an integer from 1 to 200\"}"},
        {"/api/v1/deliveries?state=lost",
         "{\"detail\":\"state: expected queued, running, sent, dry_run or dead\"}"},
        {"/api/v1/deliveries?repo=a/b/c", "{\"detail\":\"repo: expected owner/repo\"}"},
        {"/api/v1/pr/42/blocking", "{\"detail\":\"sha: required, 7 to 64 hex digits\"}"},
        {"/api/v1/pr/42/blocking?sha=xyz1234",
         "{\"detail\":\"sha: required, 7 to 64 hex digits\"}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ut_expect(ut_app_port(state), "GET", cases[i].path, NULL, 400, cases[i].detail);
    /* the HTML pages answer the same with an error page */
    ut_resp r;
    get(state, "/crcr/example-org/two?page=1001", 400, &r);
    assert_present(ut_body(&r), "error page", "page: expected an integer from 1 to 1000");
    ut_resp_free(&r);
}

static void unknown_things_are_404(void **state)
{
    static const char *const paths[] = {"/crcr/nobody/nothing",
                                        "/crcr/pr/0",
                                        "/crcr/pr/abc",
                                        "/crcr/deliveries/no-such-delivery",
                                        "/crcr/deliveries/bad%20id",
                                        "/crcr/static/other.css",
                                        "/api/v1/repos/nobody/nothing/runs",
                                        "/api/v1/pr/42/other",
                                        "/api/v1/deliveries/no-such-delivery",
                                        "/api/v1/nope"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        ut_expect(ut_app_port(state), "GET", paths[i], NULL, 404, NULL);
}

/* ---- listings and the PR ---- */

static void the_deliveries_listing_filters_by_target_and_limit(void **state)
{
    jv *doc = get_json(state, "/api/v1/deliveries?limit=2");
    const jv *list = jv_get(doc, "deliveries");
    assert_int_equal(jv_arr_len(list), 2);
    assert_string_equal(jv_path_str(jv_arr_at(list, 0), "delivery_id"), "del-push"); /* newest */
    jv_free(doc);
    doc = get_json(state, "/api/v1/deliveries?repo=example-org/four&limit=200");
    list = jv_get(doc, "deliveries");
    assert_int_equal(jv_arr_len(list), 2); /* del-push and del-pr-42 */
    jv_free(doc);
    doc = get_json(state, "/api/v1/deliveries?state=dry_run");
    list = jv_get(doc, "deliveries");
    assert_int_equal(jv_arr_len(list), 1);
    assert_string_equal(jv_path_str(jv_arr_at(list, 0), "delivery_id"), "del-pr-42");
    jv_free(doc);
}

static void the_pr_page_groups_runs_and_the_blocking_answer_reads_l4_results(void **state)
{
    jv *doc = get_json(state, "/api/v1/pr/42");
    const jv *shas = jv_get(doc, "shas");
    assert_int_equal(jv_arr_len(shas), 1);
    assert_string_equal(jv_path_str(jv_arr_at(shas, 0), "head_sha"), SHA);
    assert_int_equal(jv_arr_len(jv_get(jv_arr_at(shas, 0), "runs")), 3);
    assert_int_equal(jv_arr_len(jv_get(jv_arr_at(shas, 0), "deliveries")), 1);
    jv_free(doc);

    doc = get_json(state, "/api/v1/pr/42/blocking?sha=" SHA);
    assert_true(jv_is_true(jv_get(doc, "blocked")));
    const jv *blocking = jv_get(doc, "blocking");
    assert_int_equal(jv_arr_len(blocking), 1);
    const jv *b = jv_arr_at(blocking, 0);
    assert_string_equal(jv_path_str(b, "repo"), L4_REPO);
    /* the failed job blocks; the cancelled and successful ones do not */
    assert_int_equal(jv_arr_len(jv_get(b, "jobs")), 1);
    assert_string_equal(jv_path_str(jv_arr_at(jv_get(b, "jobs"), 0), "job"), EVIL_JOB);
    assert_string_equal(jv_path_str(jv_arr_at(jv_get(b, "jobs"), 0), "reason"), "failed");
    jv_free(doc);

    /* another sha has no result: nothing blocks */
    doc = get_json(state, "/api/v1/pr/42/blocking?sha=abcdef1");
    assert_false(jv_is_true(jv_get(doc, "blocked")));
    assert_int_equal(jv_arr_len(jv_get(doc, "blocking")), 0);
    jv_free(doc);
}

static void the_overview_lists_every_allowlisted_repo_by_level(void **state)
{
    jv *doc = get_json(state, "/api/v1/repos");
    const jv *repos = jv_get(doc, "repos");
    assert_int_equal(jv_arr_len(repos), 4);
    assert_true(jv_is_true(jv_path(doc, "relay.allowlist.loaded")));
    assert_true(jv_is_true(jv_path(doc, "relay.dry_run")));
    jv_free(doc);
    ut_resp r;
    get(state, "/crcr", 200, &r);
    const char *b = ut_body(&r);
    assert_present(b, "/crcr", "<section class=\"level\" id=\"level-L4\">");
    assert_present(b, "/crcr", "<a href=\"/crcr/example-org/four\">example-org/four</a>");
    assert_present(b, "/crcr", "<tr data-repo=\"example-org/npu-ci\"");
    ut_resp_free(&r);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, ut_app_teardown)

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        T(markup_in_job_and_workflow_names_is_escaped),
        T(markup_in_a_stored_ref_is_escaped),
        T(only_https_urls_become_links),
        T(stored_payloads_and_bodies_never_show),
        T(the_repo_matrix_pages_by_25_rows_newest_first),
        T(the_pager_links_only_to_pages_that_exist),
        T(bad_query_arguments_are_400),
        T(unknown_things_are_404),
        T(the_deliveries_listing_filters_by_target_and_limit),
        T(the_pr_page_groups_runs_and_the_blocking_answer_reads_l4_results),
        T(the_overview_lists_every_allowlisted_repo_by_level),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
