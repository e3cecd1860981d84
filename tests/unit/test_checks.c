/*
 * test_checks.c - check-run names, ordering keys and request bodies in the upstream relay's
 * shapes (src/github/checks.c): name crcr/{repo}/{workflow}/{job}, external_id "run:pr",
 * details_url, the output title rules ("In progress", the capitalised conclusion, "Completed"),
 * JSON escaping; and reading names and external ids back (checks_parse_name,
 * checks_parse_external_id).
 */
#include <setjmp.h>
#include <ctype.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "checks.h"
#include "json.h"
#include "crcr_limits.h"

static checks_run a_run(void)
{
    return (checks_run){.repo = "example-org/npu-ci",
                        .workflow_name = "CI",
                        .job_name = "build",
                        .head_sha = "abc123",
                        .status = "in_progress",
                        .conclusion = NULL,
                        .run_id = "99999",
                        .pr_number = 42};
}

/* What `fn` (checks_name or checks_seq_key) appends, in static storage (one at a time). */
static const char *text_of(crcr_err (*fn)(const checks_run *, buf_t *), const checks_run *r)
{
    static char out[1024];
    buf_t b;
    buf_init(&b, 4096);
    assert_int_equal(fn(r, &b), CRCR_OK);
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    buf_free(&b);
    return out;
}

static const char *name_of(const checks_run *r)
{
    return text_of(checks_name, r);
}

static const char *seq_key_of(const checks_run *r)
{
    return text_of(checks_seq_key, r);
}

/* The body, parsed (caller frees). */
static jv *body_of(const checks_run *r)
{
    buf_t b;
    buf_init(&b, 64 * 1024);
    assert_int_equal(checks_body(r, &b), CRCR_OK);
    char err[160] = "";
    jv *doc = jv_parse(b.data, b.len, err, sizeof(err));
    if (!doc)
        fail_msg("checks_body is not JSON (%s): %s", err, buf_cstr(&b));
    buf_free(&b);
    return doc;
}

static const char *title_of(const jv *doc)
{
    return jv_path_str(doc, "output.title");
}

static void name_is_crcr_repo_workflow_job(void **state)
{
    checks_run r = a_run();
    assert_string_equal(name_of(&r), "crcr/example-org/npu-ci/CI/build");
    r.job_name = "";
    assert_string_equal(name_of(&r), "crcr/example-org/npu-ci/CI");
    r.job_name = NULL;
    assert_string_equal(name_of(&r), "crcr/example-org/npu-ci/CI");
    r.workflow_name = NULL;
    assert_string_equal(name_of(&r), "crcr/example-org/npu-ci/");
}

static void seq_key_is_check_sha_name(void **state)
{
    checks_run r = a_run();
    assert_string_equal(seq_key_of(&r), "check:abc123:crcr/example-org/npu-ci/CI/build");
    r.head_sha = NULL;
    assert_string_equal(seq_key_of(&r), "check::crcr/example-org/npu-ci/CI/build");
    /* in_progress and completed of one job share the key, so they go out in order */
    checks_run a = a_run(), b = a_run();
    b.status = "completed";
    b.conclusion = "success";
    b.run_id = "1";
    char ka[1024];
    snprintf(ka, sizeof(ka), "%s", seq_key_of(&a));
    assert_string_equal(ka, seq_key_of(&b));
    /* another job or another commit does not */
    b.job_name = "test";
    assert_string_not_equal(ka, seq_key_of(&b));
    b = a_run();
    b.head_sha = "def456";
    assert_string_not_equal(ka, seq_key_of(&b));
}

static void in_progress_body_has_every_upstream_field(void **state)
{
    checks_run r = a_run();
    jv *doc = body_of(&r);
    assert_int_equal(jv_obj_len(doc), 6);
    assert_string_equal(jv_path_str(doc, "name"), "crcr/example-org/npu-ci/CI/build");
    assert_string_equal(jv_path_str(doc, "head_sha"), "abc123");
    assert_string_equal(jv_path_str(doc, "status"), "in_progress");
    assert_null(jv_get(doc, "conclusion"));
    assert_string_equal(jv_path_str(doc, "details_url"),
                        "https://github.com/example-org/npu-ci/actions/runs/99999");
    assert_string_equal(jv_path_str(doc, "external_id"), "99999:42");
    assert_int_equal(jv_obj_len(jv_get(doc, "output")), 2);
    assert_string_equal(title_of(doc), "In progress");
    assert_string_equal(jv_path_str(doc, "output.summary"),
                        "example-org/npu-ci workflow: "
                        "https://github.com/example-org/npu-ci/actions/runs/99999");
    jv_free(doc);
}

static void in_progress_ignores_a_conclusion_and_unknown_status_is_in_progress(void **state)
{
    checks_run r = a_run();
    r.conclusion = "success";
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "status"), "in_progress");
    assert_null(jv_get(doc, "conclusion"));
    assert_string_equal(title_of(doc), "In progress");
    jv_free(doc);
    r.status = NULL;
    doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "status"), "in_progress");
    jv_free(doc);
    r.status = "queued";
    doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "status"), "in_progress");
    assert_string_equal(title_of(doc), "In progress");
    jv_free(doc);
}

static void completed_title_is_the_capitalised_conclusion(void **state)
{
    static const struct {
        const char *conclusion, *title;
    } cases[] = {
        {"success", "Success"},     {"failure", "Failure"},
        {"timed_out", "Timed_out"}, {"cancelled", "Cancelled"},
        {"FAILURE", "Failure"},     {"action_required", "Action_required"},
        {"neutral", "Neutral"},     {"x", "X"},
    };
    checks_run r = a_run();
    r.status = "completed";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r.conclusion = cases[i].conclusion;
        jv *doc = body_of(&r);
        assert_string_equal(jv_path_str(doc, "status"), "completed");
        /* the conclusion goes to GitHub in lower case, as its API's enum has it ("FAILURE"
         * would be refused with a 422); the title is capitalised */
        char lower[32];
        size_t n = 0;
        for (const char *c = cases[i].conclusion; *c && n + 1 < sizeof(lower); c++)
            lower[n++] = (char)tolower((unsigned char)*c);
        lower[n] = '\0';
        assert_string_equal(jv_path_str(doc, "conclusion"), lower);
        assert_string_equal(title_of(doc), cases[i].title);
        jv_free(doc);
    }
}

static void completed_without_conclusion_says_completed(void **state)
{
    checks_run r = a_run();
    r.status = "completed";
    r.conclusion = NULL;
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "status"), "completed");
    assert_null(jv_get(doc, "conclusion"));
    assert_string_equal(title_of(doc), "Completed");
    jv_free(doc);
    r.conclusion = "";
    doc = body_of(&r);
    assert_null(jv_get(doc, "conclusion"));
    assert_string_equal(title_of(doc), "Completed");
    jv_free(doc);
}

/* GitHub Enterprise Server: the run's page is on the web host of GITHUB_API_URL. */
static void details_url_is_on_the_web_host(void **state)
{
    checks_run r = a_run();
    r.web_url = "https://ghes.example.com";
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "details_url"),
                        "https://ghes.example.com/example-org/npu-ci/actions/runs/99999");
    assert_string_equal(jv_path_str(doc, "output.summary"),
                        "example-org/npu-ci workflow: "
                        "https://ghes.example.com/example-org/npu-ci/actions/runs/99999");
    jv_free(doc);
    r.web_url = ""; /* none: github.com */
    doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "details_url"),
                        "https://github.com/example-org/npu-ci/actions/runs/99999");
    jv_free(doc);
    r.details_url = "https://buildkite.com/o/p/builds/7"; /* a Buildkite build stays itself */
    r.web_url = "https://ghes.example.com";
    doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "details_url"), "https://buildkite.com/o/p/builds/7");
    jv_free(doc);
}

static void a_long_conclusion_is_cut_in_the_title_only(void **state)
{
    char longc[200];
    memset(longc, 'z', sizeof(longc) - 1);
    longc[sizeof(longc) - 1] = '\0';
    checks_run r = a_run();
    r.status = "completed";
    r.conclusion = longc;
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "conclusion"), longc);
    const char *t = title_of(doc);
    assert_true(strlen(t) > 0 && strlen(t) < 64);
    assert_int_equal(t[0], 'Z');
    jv_free(doc);
}

static void without_pr_the_external_id_is_the_run_id(void **state)
{
    checks_run r = a_run();
    r.pr_number = 0;
    r.run_id = "12345678901"; /* run ids pass 2^32 */
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "external_id"), "12345678901");
    assert_int_equal(checks_parse_external_id(jv_path_str(doc, "external_id")), 12345678901LL);
    jv_free(doc);
    r.pr_number = 7;
    doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "external_id"), "12345678901:7");
    assert_int_equal(checks_parse_external_id(jv_path_str(doc, "external_id")), 12345678901LL);
    jv_free(doc);
}

/* A Buildkite run (its build's UUID as run id): the external_id carries it, and reads back as no
 * GitHub run, so a re-run request of its check run asks GitHub for nothing. */
static void a_buildkite_build_id_is_no_github_run_id(void **state)
{
    checks_run r = a_run();
    r.run_id = "0190f1a2-0000-4000-8000-00000000b002";
    r.details_url = "https://buildkite.com/acme/vllm-ci/builds/42";
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "external_id"), "0190f1a2-0000-4000-8000-00000000b002:42");
    assert_int_equal(checks_parse_external_id(jv_path_str(doc, "external_id")), 0);
    assert_string_equal(jv_path_str(doc, "details_url"),
                        "https://buildkite.com/acme/vllm-ci/builds/42");
    jv_free(doc);
    r.run_id = "12345678-aaaa";
    doc = body_of(&r);
    assert_int_equal(checks_parse_external_id(jv_path_str(doc, "external_id")), 0);
    jv_free(doc);
}

static void names_with_json_specials_stay_valid_json(void **state)
{
    checks_run r = a_run();
    r.workflow_name = "CI \"nightly\"\\";
    r.job_name = "build\n<script>\x01";
    r.head_sha = NULL;
    jv *doc = body_of(&r);
    assert_string_equal(jv_path_str(doc, "name"),
                        "crcr/example-org/npu-ci/CI \"nightly\"\\/build\n<script>\x01");
    assert_string_equal(jv_path_str(doc, "head_sha"), "");
    jv_free(doc);
}

static void names_read_back_to_the_downstream_repo(void **state)
{
    char repo[CRCR_REPO_NAME_MAX];
    checks_run r = a_run();
    assert_true(checks_parse_name(name_of(&r), repo, sizeof(repo)));
    assert_string_equal(repo, "example-org/npu-ci");
    r.job_name = NULL;
    assert_true(checks_parse_name(name_of(&r), repo, sizeof(repo)));
    assert_string_equal(repo, "example-org/npu-ci");
    assert_true(checks_parse_name("crcr/o/r/wf/job/with/slashes", repo, sizeof(repo)));
    assert_string_equal(repo, "o/r");
    assert_true(checks_parse_name("crcr/o/r/w", repo, sizeof(repo)));
    assert_string_equal(repo, "o/r");
}

static void names_that_are_not_crcr_check_runs_are_refused(void **state)
{
    char repo[CRCR_REPO_NAME_MAX];
    static const char *const bad[] = {
        "",
        "crcr",
        "crcr/",
        "crcr/o",
        "crcr/o/",
        "crcr/o/r",
        "crcr/o/r/",
        "crcr//r/wf",
        "crcr/o//wf",
        "CRCR/o/r/wf",
        "crcr /o/r/wf",
        "other/o/r/wf",
        "xcrcr/o/r/wf",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(repo, sizeof(repo), "untouched");
        if (checks_parse_name(bad[i], repo, sizeof(repo)))
            fail_msg("accepted '%s' as a crcr check run", bad[i]);
    }
    assert_false(checks_parse_name(NULL, repo, sizeof(repo)));
}

static void parse_name_needs_room_for_the_repo(void **state)
{
    char small[4];
    assert_false(checks_parse_name("crcr/ab/c/wf", small, 4)); /* "ab/c" needs 5 */
    char fits[5];
    assert_true(checks_parse_name("crcr/ab/c/wf", fits, sizeof(fits)));
    assert_string_equal(fits, "ab/c");
}

static void external_ids_give_the_run_id_or_zero(void **state)
{
    assert_int_equal(checks_parse_external_id("99999:42"), 99999);
    assert_int_equal(checks_parse_external_id("99999"), 99999);
    assert_int_equal(checks_parse_external_id("1"), 1);
    assert_int_equal(checks_parse_external_id("12:"), 12);
    assert_int_equal(checks_parse_external_id("9223372036854775807"), INT64_MAX);
    static const char *const bad[] = {"",
                                      "0",
                                      "0:42",
                                      "-1",
                                      "+5",
                                      " 5",
                                      ":42",
                                      "5x",
                                      "5 ",
                                      "abc",
                                      "1.5",
                                      "5;42",
                                      "0x10",
                                      "9223372036854775808",
                                      "99999999999999999999:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (checks_parse_external_id(bad[i]) != 0)
            fail_msg("'%s' gave a run id", bad[i]);
    assert_int_equal(checks_parse_external_id(NULL), 0);
}

static void a_pair_is_named_in_the_title_and_the_summary_and_a_note_is_added(void **state)
{
    checks_run r = a_run();
    r.status = "completed";
    r.conclusion = "success";
    r.pair = "l4-org/relay-l4#7 @ abcdef1";
    r.pair_ref = "fix-api";
    jv *doc = body_of(&r);
    assert_string_equal(title_of(doc), "Success - tested with l4-org/relay-l4#7 @ abcdef1");
    const char *summary = jv_path_str(doc, "output.summary");
    assert_non_null(strstr(summary, "\n\nTested with l4-org/relay-l4#7 @ abcdef1 (fix-api)."));
    assert_string_equal(jv_path_str(doc, "name"), "crcr/example-org/npu-ci/CI/build");
    jv_free(doc);
    r.pair = NULL;
    r.conclusion = "cancelled";
    r.note = "Superseded: a newer commit.";
    doc = body_of(&r);
    assert_string_equal(title_of(doc), "Cancelled");
    summary = jv_path_str(doc, "output.summary");
    const char *note = strstr(summary, "\n\nSuperseded: a newer commit.");
    assert_non_null(note);
    assert_string_equal(note, "\n\nSuperseded: a newer commit."); /* the last paragraph */
    jv_free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(name_is_crcr_repo_workflow_job),
        cmocka_unit_test(a_pair_is_named_in_the_title_and_the_summary_and_a_note_is_added),
        cmocka_unit_test(seq_key_is_check_sha_name),
        cmocka_unit_test(in_progress_body_has_every_upstream_field),
        cmocka_unit_test(in_progress_ignores_a_conclusion_and_unknown_status_is_in_progress),
        cmocka_unit_test(completed_title_is_the_capitalised_conclusion),
        cmocka_unit_test(completed_without_conclusion_says_completed),
        cmocka_unit_test(details_url_is_on_the_web_host),
        cmocka_unit_test(a_long_conclusion_is_cut_in_the_title_only),
        cmocka_unit_test(without_pr_the_external_id_is_the_run_id),
        cmocka_unit_test(a_buildkite_build_id_is_no_github_run_id),
        cmocka_unit_test(names_with_json_specials_stay_valid_json),
        cmocka_unit_test(names_read_back_to_the_downstream_repo),
        cmocka_unit_test(names_that_are_not_crcr_check_runs_are_refused),
        cmocka_unit_test(parse_name_needs_room_for_the_repo),
        cmocka_unit_test(external_ids_give_the_run_id_or_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
