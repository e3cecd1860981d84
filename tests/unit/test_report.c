/*
 * Unit tests for report.c: the callback body `crcr report` sends must be the one the upstream
 * report_callback.py sends (same fields, same rules, same json.dumps bytes), and the option
 * combinations upstream refuses must be refused here too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "report.h"

/* 2023-11-14T22:13:20.123Z */
#define NOW_MS 1700000000123LL
#define NOW_ISO "2023-11-14T22:13:20Z"

/* A repository_dispatch event file as GitHub writes it: client_payload carries the relay's
 * fields plus ones the reporter must echo untouched (callback_token), and the payload has
 * non-ASCII text, floats and characters json.dumps escapes. */
static const char EVENT[] =
    "{\"action\":\"pull_request\",\"branch\":\"main\",\"client_payload\":{"
    "\"event_type\":\"pull_request\",\"delivery_id\":\"d-1\",\"payload\":{\"action\":\"opened\","
    "\"number\":7,\"title\":\"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80\",\"ratio\":0.1,"
    "\"big\":1e16,\"tiny\":1e-05,\"neg\":-0.0,\"ctl\":\"a\\\"b\\\\c\\n\\t\x7f/\"},"
    "\"callback_token\":\"v1.abc\"},\"repository\":{\"full_name\":\"acme/accel\"}}";

/* What report_callback.py sends for EVENT with --status in_progress (json.dumps output). */
static const char EXPECTED_IN_PROGRESS[] =
    "{\"event_type\": \"pull_request\", \"delivery_id\": \"d-1\", \"payload\": {\"action\": \"open"
    "ed\", \"number\": 7, \"title\": \"caf\\u00e9 \\u2713 \\ud83d\\ude00\", \"ratio\": 0.1, "
    "\"big\":"
    " 1e+16, \"tiny\": 1e-05, \"neg\": -0.0, \"ctl\": \"a\\\"b\\\\c\\n\\t\\u007f/\"}, "
    "\"callback_toke"
    "n\": \"v1.abc\", \"workflow\": {\"schema_version\": \"1\", \"status\": \"in_progress\", \"conc"
    "lusion\": null, \"name\": \"PyTorch CI\", \"url\": \"https://github.com/acme/accel/actio"
    "ns/runs/9001\", \"run_attempt\": \"3\", \"job_name\": \"build\", \"check_run_id\": \"9001-3\""
    ", \"run_id\": \"9001\", \"started_at\": \"2023-11-14T22:13:20Z\", \"completed_at\": null}}";

static report_env base_env(void)
{
    report_env e = {0};
    e.event_path = "/unused";
    e.run_id = "9001";
    e.run_attempt = "3";
    e.workflow = "PyTorch CI";
    e.job = "build";
    e.server_url = "https://github.com";
    e.repository = "acme/accel";
    return e;
}

static report_opts opts_status(const char *status, const char *conclusion)
{
    report_opts o = {0};
    o.status = status;
    o.conclusion = conclusion;
    o.callback_url = "https://relay.example/github/callback";
    o.max_time_s = 120;
    return o;
}

/* Builds with `event` and returns the result code; the body text in *body (caller frees). */
static crcr_err build(const report_opts *o, const report_env *env, const char *event, char **body,
                      char *err, size_t errsz)
{
    buf_t b;
    buf_init(&b, REPORT_MAX_BODY);
    crcr_err e =
        report_build_body(o, env, event, event ? strlen(event) : 0, NOW_MS, &b, err, errsz);
    *body = buf_detach(&b, NULL);
    return e;
}

/* Builds, asserts success and returns the parsed body (caller frees with jv_free). */
static jv *build_ok(const report_opts *o, const report_env *env, const char *event)
{
    char err[256] = "";
    char *body = NULL;
    crcr_err e = build(o, env, event, &body, err, sizeof(err));
    if (e != CRCR_OK)
        fail_msg("build failed: %s (%s)", crcr_strerror(e), err);
    jv *doc = jv_parse(body, strlen(body), NULL, 0);
    assert_non_null(doc);
    free(body);
    return doc;
}

/* Asserts that building fails with `code` and that the message mentions `needle`. */
static void assert_build_fails(const report_opts *o, const report_env *env, const char *event,
                               crcr_err code, const char *needle)
{
    char err[512] = "";
    char *body = NULL;
    crcr_err e = build(o, env, event, &body, err, sizeof(err));
    free(body);
    if (e != code)
        fail_msg("expected %s, got %s (%s)", crcr_strerror(code), crcr_strerror(e), err);
    if (!strstr(err, needle))
        fail_msg("message '%s' does not mention '%s'", err, needle);
}

static void in_progress_body_is_byte_identical_to_report_callback_py(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    char err[256] = "";
    char *body = NULL;
    assert_int_equal(build(&o, &env, EVENT, &body, err, sizeof(err)), CRCR_OK);
    assert_string_equal(body, EXPECTED_IN_PROGRESS);
    free(body);
}

static void in_progress_has_null_conclusion_started_at_and_null_completed_at(void **state)
{
    /* A conclusion given with in_progress is dropped, as upstream does. */
    report_opts o = opts_status("in_progress", "success");
    report_env env = base_env();
    jv *d = build_ok(&o, &env, EVENT);
    jv *wf = jv_get(d, "workflow");
    assert_string_equal(jv_path_str(wf, "status"), "in_progress");
    assert_true(jv_is_null(jv_get(wf, "conclusion")));
    assert_string_equal(jv_path_str(wf, "started_at"), NOW_ISO);
    assert_true(jv_is_null(jv_get(wf, "completed_at")));
    assert_null(jv_get(wf, "test_results"));
    assert_null(jv_get(wf, "artifact_url"));
    jv_free(d);
}

static void completed_has_conclusion_completed_at_and_null_started_at(void **state)
{
    report_opts o = opts_status("completed", "  failure\n");
    report_env env = base_env();
    jv *d = build_ok(&o, &env, EVENT);
    jv *wf = jv_get(d, "workflow");
    assert_string_equal(jv_path_str(wf, "status"), "completed");
    assert_string_equal(jv_path_str(wf, "conclusion"), "failure"); /* trimmed like upstream */
    assert_true(jv_is_null(jv_get(wf, "started_at")));
    assert_string_equal(jv_path_str(wf, "completed_at"), NOW_ISO);
    jv_free(d);
}

static void workflow_fields_come_from_the_actions_environment(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    env.server_url = "https://ghe.example";
    jv *d = build_ok(&o, &env, EVENT);
    jv *wf = jv_get(d, "workflow");
    assert_string_equal(jv_path_str(wf, "schema_version"), "1");
    assert_string_equal(jv_path_str(wf, "name"), "PyTorch CI");
    assert_string_equal(jv_path_str(wf, "url"), "https://ghe.example/acme/accel/actions/runs/9001");
    /* run ids are strings, not numbers, in upstream's body */
    assert_true(jv_is_str(jv_get(wf, "run_id")));
    assert_string_equal(jv_path_str(wf, "run_id"), "9001");
    assert_true(jv_is_str(jv_get(wf, "run_attempt")));
    assert_string_equal(jv_path_str(wf, "run_attempt"), "3");
    assert_string_equal(jv_path_str(wf, "job_name"), "build");
    jv_free(d);

    env.server_url = NULL; /* GITHUB_SERVER_URL unset: github.com */
    d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.url"),
                        "https://github.com/acme/accel/actions/runs/9001");
    jv_free(d);
}

static void client_payload_is_echoed_with_extra_fields_and_key_order(void **state)
{
    report_opts o = opts_status("completed", "success");
    report_env env = base_env();
    const char *ev = "{\"client_payload\":{\"zeta\":1,\"event_type\":\"push\",\"delivery_id\":"
                     "\"d-2\",\"payload\":{\"ref\":\"refs/heads/main\"},\"callback_token\":"
                     "\"v1.sig\",\"trimmed\":[\"payload.pull_request.body\"]}}";
    char err[256] = "";
    char *body = NULL;
    assert_int_equal(build(&o, &env, ev, &body, err, sizeof(err)), CRCR_OK);
    const char *prefix = "{\"zeta\": 1, \"event_type\": \"push\", \"delivery_id\": \"d-2\", "
                         "\"payload\": {\"ref\": \"refs/heads/main\"}, \"callback_token\": "
                         "\"v1.sig\", \"trimmed\": [\"payload.pull_request.body\"], "
                         "\"workflow\": {";
    assert_memory_equal(body, prefix, strlen(prefix));
    free(body);
}

static void existing_workflow_key_is_replaced_in_place(void **state)
{
    /* Python's client_payload["workflow"] = ... keeps the key where it was. */
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    const char *ev = "{\"client_payload\":{\"a\":1,\"workflow\":\"stale\",\"b\":2}}";
    char err[256] = "";
    char *body = NULL;
    assert_int_equal(build(&o, &env, ev, &body, err, sizeof(err)), CRCR_OK);
    assert_memory_equal(body, "{\"a\": 1, \"workflow\": {\"schema_version\"", 38);
    assert_non_null(strstr(body, "}, \"b\": 2}"));
    assert_null(strstr(body, "stale"));
    free(body);
}

static void test_results_are_sent_parsed_not_as_a_string(void **state)
{
    report_opts o = opts_status("completed", "success");
    o.test_results = " {\"passed\": 50, \"failed\": 0, \"skipped\": 2, \"ratio\": 0.5} ";
    report_env env = base_env();
    char err[256] = "";
    char *body = NULL;
    assert_int_equal(build(&o, &env, EVENT, &body, err, sizeof(err)), CRCR_OK);
    assert_non_null(strstr(body, "\"test_results\": {\"passed\": 50, \"failed\": 0, \"skipped\": "
                                 "2, \"ratio\": 0.5}}}"));
    free(body);
}

static void artifact_url_is_present_only_when_given(void **state)
{
    report_opts o = opts_status("completed", "success");
    report_env env = base_env();
    o.artifact_url = "   "; /* an action input left empty */
    jv *d = build_ok(&o, &env, EVENT);
    assert_null(jv_path(d, "workflow.artifact_url"));
    jv_free(d);

    o.artifact_url = "https://example.com/<script>alert('xss')</script>";
    d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.artifact_url"),
                        "https://example.com/<script>alert('xss')</script>");
    jv_free(d);
}

static void check_run_id_falls_back_to_run_id_dash_attempt(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    o.check_run_id = " ";
    jv *d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.check_run_id"), "9001-3");
    jv_free(d);

    o.check_run_id = "48151623420";
    d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.check_run_id"), "48151623420");
    jv_free(d);
}

static void job_name_option_overrides_github_job(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    o.job_name = "test-L3-matrix-cuda12";
    jv *d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.job_name"), "test-L3-matrix-cuda12");
    jv_free(d);

    o.job_name = ""; /* empty: fall back to GITHUB_JOB */
    d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.job_name"), "build");
    jv_free(d);

    env.job = NULL;
    assert_build_fails(&o, &env, EVENT, CRCR_E_CONFIG, "job name");
}

static void self_report_body_has_upstream_envelope(void **state)
{
    report_opts o = opts_status("completed", "success");
    o.delivery_id = " 0123456789abcdef0123456789abcdef01234567 ";
    o.event_type = "nightly";
    report_env env = base_env();
    char err[256] = "";
    char *body = NULL;
    /* No event file is needed (a cron-triggered run has no client_payload). */
    assert_int_equal(build(&o, &env, NULL, &body, err, sizeof(err)), CRCR_OK);
    const char *expected =
        "{\"event_type\": \"nightly\", \"delivery_id\": "
        "\"0123456789abcdef0123456789abcdef01234567\", \"payload\": {\"repository\": "
        "{\"full_name\": \"pytorch/pytorch\"}, \"head_sha\": "
        "\"0123456789abcdef0123456789abcdef01234567\"}, \"workflow\": {\"schema_version\": "
        "\"1\", \"status\": \"completed\", \"conclusion\": \"success\", \"name\": \"PyTorch CI\", "
        "\"url\": \"https://github.com/acme/accel/actions/runs/9001\", \"run_attempt\": \"3\", "
        "\"job_name\": \"build\", \"check_run_id\": \"9001-3\", \"run_id\": \"9001\", "
        "\"started_at\": \"" NOW_ISO "\", \"completed_at\": \"" NOW_ISO "\"}}";
    assert_string_equal(body, expected);
    free(body);

    o.event_type = "periodic";
    jv *d = build_ok(&o, &env, NULL);
    assert_string_equal(jv_path_str(d, "event_type"), "periodic");
    jv_free(d);
}

static void event_type_without_delivery_id_is_rejected(void **state)
{
    report_opts o = opts_status("completed", "success");
    report_env env = base_env();
    o.event_type = "nightly";
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "together");
    o.event_type = NULL;
    o.delivery_id = "0123456789abcdef0123456789abcdef01234567";
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "together");
    o.event_type = " "; /* empty inputs count as not given */
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "together");
}

static void self_report_must_be_completed_nightly_or_periodic(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    o.delivery_id = "0123456789abcdef0123456789abcdef01234567";
    o.event_type = "nightly";
    assert_build_fails(&o, &env, NULL, CRCR_E_INVALID, "completed");
    o = opts_status("completed", "success");
    o.delivery_id = "0123456789abcdef0123456789abcdef01234567";
    o.event_type = "pull_request";
    assert_build_fails(&o, &env, NULL, CRCR_E_INVALID, "nightly");
}

static void completed_without_conclusion_is_rejected(void **state)
{
    report_opts o = opts_status("completed", NULL);
    report_env env = base_env();
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "--conclusion");
    o.conclusion = "  ";
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "--conclusion");
}

/* The relay refuses anything but GitHub's check-run conclusions (400): so does crcr report,
 * before any request. Any case, as the relay; sent as given. */
static void completed_needs_one_of_githubs_conclusions(void **state)
{
    report_opts o = opts_status("completed", "sucess");
    report_env env = base_env();
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID,
                       "--conclusion must be one of action_required, cancelled, failure, neutral, "
                       "success, skipped, stale, timed_out with --status completed, got 'sucess'");
    o.conclusion = "Success";
    jv *d = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(d, "workflow.conclusion"), "Success");
    jv_free(d);
    o.conclusion = "timed_out";
    d = build_ok(&o, &env, EVENT);
    jv_free(d);
    /* in_progress: the conclusion is not sent, so not judged. */
    o = opts_status("in_progress", "sucess");
    d = build_ok(&o, &env, EVENT);
    jv_free(d);
}

static void unknown_or_missing_status_is_rejected(void **state)
{
    report_opts o = opts_status("queued", NULL);
    report_env env = base_env();
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "--status");
    o.status = NULL;
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "--status");
}

static void invalid_test_results_json_is_a_usage_error(void **state)
{
    report_opts o = opts_status("completed", "success");
    report_env env = base_env();
    o.test_results = "{\"passed\": 5,";
    assert_build_fails(&o, &env, EVENT, CRCR_E_INVALID, "--test-results");
}

static void event_without_client_payload_object_is_rejected(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    /* a push-triggered workflow's event file */
    assert_build_fails(&o, &env, "{\"ref\":\"refs/heads/main\",\"after\":\"abc\"}", CRCR_E_CONFIG,
                       "client_payload");
    assert_build_fails(&o, &env, "{\"client_payload\":null}", CRCR_E_CONFIG, "client_payload");
    assert_build_fails(&o, &env, "{\"client_payload\":\"x\"}", CRCR_E_CONFIG, "client_payload");
    assert_build_fails(&o, &env, "{not json", CRCR_E_CONFIG, "not valid JSON");
    assert_build_fails(&o, &env, NULL, CRCR_E_CONFIG, "GITHUB_EVENT_PATH");
}

static void missing_run_identity_in_environment_is_rejected(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    env.run_id = NULL;
    assert_build_fails(&o, &env, EVENT, CRCR_E_CONFIG, "GITHUB_RUN_ID");
    env = base_env();
    env.run_attempt = "two";
    assert_build_fails(&o, &env, EVENT, CRCR_E_CONFIG, "GITHUB_RUN_ATTEMPT");
    env = base_env();
    env.repository = NULL;
    assert_build_fails(&o, &env, EVENT, CRCR_E_CONFIG, "GITHUB_REPOSITORY");
    env = base_env();
    env.workflow = NULL;
    assert_build_fails(&o, &env, EVENT, CRCR_E_CONFIG, "GITHUB_WORKFLOW");
}

static void body_over_its_cap_is_refused(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    report_env env = base_env();
    buf_t b;
    buf_init(&b, 100);
    char err[256] = "";
    assert_int_equal(
        report_build_body(&o, &env, EVENT, strlen(EVENT), NOW_MS, &b, err, sizeof(err)),
        CRCR_E_TOO_LARGE);
    buf_free(&b);
}

/* Python json.dumps() forms of values a payload can hold (checked against CPython 3.11). */
static void values_serialise_like_python_json_dumps(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"[0.1,1.5,100.0,1e2,123456789.125]", "[0.1, 1.5, 100.0, 100.0, 123456789.125]"},
        {"[1e15,1e16,1.5e16,1e22,1e-4,1e-5,1.5e-7]",
         "[1000000000000000.0, 1e+16, 1.5e+16, 1e+22, 0.0001, 1e-05, 1.5e-07]"},
        {"[-0.0,0.0,-2.5,5e-324,1.7976931348623157e308]",
         "[-0.0, 0.0, -2.5, 5e-324, 1.7976931348623157e+308]"},
        {"[9223372036854775807,-9223372036854775807,0,-0]",
         "[9223372036854775807, -9223372036854775807, 0, 0]"},
        {"{\"k\":\"\\u0001\\b\\f\\r\\u001f /\"}", "{\"k\": \"\\u0001\\b\\f\\r\\u001f /\"}"},
        {"[\"\xe2\x82\xac\",\"\xf4\x8f\xbf\xbf\"]", "[\"\\u20ac\", \"\\udbff\\udfff\"]"},
        {"{\"\xc3\xa9\":[true,false,null,{},[]]}", "{\"\\u00e9\": [true, false, null, {}, []]}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf_t b;
        buf_init(&b, 4096);
        assert_int_equal(report_pydump_text(cases[i].in, strlen(cases[i].in), &b), CRCR_OK);
        assert_string_equal(buf_cstr(&b), cases[i].out);
        buf_free(&b);
    }
}

static void retry_delay_honours_retry_after_else_doubles_capped(void **state)
{
    assert_int_equal(report_retry_delay_s(0, -1), 1);
    assert_int_equal(report_retry_delay_s(1, -1), 2);
    assert_int_equal(report_retry_delay_s(2, -1), 4);
    assert_int_equal(report_retry_delay_s(3, -1), 8);
    assert_int_equal(report_retry_delay_s(6, -1), 60);
    assert_int_equal(report_retry_delay_s(40, -1), 60);
    assert_int_equal(report_retry_delay_s(5, 1), 1);
    assert_int_equal(report_retry_delay_s(0, 0), 0);
    assert_int_equal(report_retry_delay_s(0, 3600), 60);
}

/* ---- Buildkite (report_callback_buildkite.sh's mapping) ---- */

/* A fake environment: NULL-terminated name/value pairs in g_vars. */
static const char *const *g_vars;

static const char *fake_getenv(const char *name)
{
    for (size_t i = 0; g_vars[i]; i += 2)
        if (strcmp(g_vars[i], name) == 0)
            return g_vars[i + 1];
    return NULL;
}

static const char *const BUILDKITE_VARS[] = {
    "BUILDKITE", "true", "BUILDKITE_BUILD_NUMBER", "4242", "BUILDKITE_BUILD_ID",
    "0190f7e2-aaaa-bbbb-cccc-000000000001", "BUILDKITE_RETRY_COUNT", "2", "BUILDKITE_PIPELINE_SLUG",
    "vllm-ci", "BUILDKITE_LABEL", ":pytorch: Nightly", "BUILDKITE_STEP_KEY", "nightly",
    "BUILDKITE_BUILD_URL", "https://buildkite.com/acme/vllm-ci/builds/4242",
    "BUILDKITE_COMMAND_EXIT_STATUS", "3",
    /* GitHub's variables are not looked at on Buildkite. */
    "GITHUB_RUN_ID", "1", "GITHUB_REPOSITORY", "x/y", NULL};

static void buildkite_variables_are_mapped_like_upstreams_wrapper(void **state)
{
    g_vars = BUILDKITE_VARS;
    report_env env;
    report_env_load(&env, fake_getenv);
    assert_true(env.buildkite);
    assert_string_equal(env.run_id, "0190f7e2-aaaa-bbbb-cccc-000000000001"); /* the build's UUID */
    assert_string_equal(env.run_attempt, "3");                               /* retry count + 1 */
    assert_string_equal(env.workflow, "vllm-ci");
    assert_string_equal(env.job, ":pytorch: Nightly");
    assert_string_equal(env.run_url, "https://buildkite.com/acme/vllm-ci/builds/4242");
    assert_null(env.repository);
    assert_null(env.token_url);
    assert_string_equal(report_buildkite_conclusion(&env), "failure");

    report_opts o = opts_status("completed", "success");
    o.delivery_id = "0123456789abcdef0123456789abcdef01234567";
    o.event_type = "nightly";
    jv *doc = build_ok(&o, &env, NULL);
    const jv *wf = jv_get(doc, "workflow");
    assert_string_equal(jv_path_str(wf, "name"), "vllm-ci");
    assert_string_equal(jv_path_str(wf, "url"), "https://buildkite.com/acme/vllm-ci/builds/4242");
    assert_string_equal(jv_path_str(wf, "run_id"), "0190f7e2-aaaa-bbbb-cccc-000000000001");
    assert_string_equal(jv_path_str(wf, "run_attempt"), "3");
    assert_string_equal(jv_path_str(wf, "job_name"), ":pytorch: Nightly");
    assert_string_equal(jv_path_str(wf, "check_run_id"), "0190f7e2-aaaa-bbbb-cccc-000000000001-3");
    jv_free(doc);
}

static void buildkite_job_name_falls_back_to_step_key_then_unknown(void **state)
{
    static const char *const no_label[] = {"BUILDKITE",
                                           "true",
                                           "BUILDKITE_LABEL",
                                           "",
                                           "BUILDKITE_STEP_KEY",
                                           "gpu",
                                           "BUILDKITE_RETRY_COUNT",
                                           "",
                                           NULL};
    g_vars = no_label;
    report_env env;
    report_env_load(&env, fake_getenv);
    assert_string_equal(env.job, "gpu");
    assert_string_equal(env.run_attempt, "1"); /* no retry count: the first attempt */
    assert_null(report_buildkite_conclusion(&env));
    static const char *const nothing[] = {"BUILDKITE", "true", NULL};
    g_vars = nothing;
    report_env_load(&env, fake_getenv);
    assert_string_equal(env.job, "unknown");
    static const char *const zero[] = {"BUILDKITE", "true", "BUILDKITE_COMMAND_EXIT_STATUS", "0",
                                       NULL};
    g_vars = zero;
    report_env_load(&env, fake_getenv);
    assert_string_equal(report_buildkite_conclusion(&env), "success");
    /* Not Buildkite: GitHub's variables. */
    static const char *const gha[] = {"BUILDKITE", "false", "GITHUB_RUN_ID", "7", NULL};
    g_vars = gha;
    report_env_load(&env, fake_getenv);
    assert_false(env.buildkite);
    assert_string_equal(env.run_id, "7");
    assert_null(report_buildkite_conclusion(&env));
}

static void buildkite_environment_problems_name_buildkite_variables(void **state)
{
    report_opts o = opts_status("in_progress", NULL);
    o.delivery_id = NULL;
    static const struct {
        const char *var, *value, *needle;
    } cases[] = {
        {"BUILDKITE_BUILD_ID", "", "BUILDKITE_BUILD_ID"},
        {"BUILDKITE_BUILD_ID", "0190 f7e2", "BUILDKITE_BUILD_ID is not set or not a build id"},
        {"BUILDKITE_RETRY_COUNT", "-1", "BUILDKITE_RETRY_COUNT is not a number: '-1'"},
        {"BUILDKITE_PIPELINE_SLUG", "", "BUILDKITE_PIPELINE_SLUG"},
        {"BUILDKITE_BUILD_URL", "", "BUILDKITE_BUILD_URL"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *vars[sizeof(BUILDKITE_VARS) / sizeof(BUILDKITE_VARS[0])];
        memcpy(vars, BUILDKITE_VARS, sizeof(vars));
        for (size_t k = 0; vars[k]; k += 2)
            if (strcmp(vars[k], cases[i].var) == 0)
                vars[k + 1] = cases[i].value;
        g_vars = vars;
        report_env env;
        report_env_load(&env, fake_getenv);
        assert_build_fails(&o, &env, "{}", CRCR_E_CONFIG, cases[i].needle);
    }
}

static void buildkite_client_payload_is_the_root_without_an_event_file(void **state)
{
    g_vars = BUILDKITE_VARS;
    report_env env;
    report_env_load(&env, fake_getenv);
    report_opts o = opts_status("in_progress", NULL);
    jv *doc =
        build_ok(&o, &env,
                 "{\"event_type\":\"pull_request\",\"delivery_id\":\"d-9\",\"callback_token\":"
                 "\"v1.x\",\"payload\":{\"action\":\"opened\"}}");
    assert_string_equal(jv_path_str(doc, "delivery_id"), "d-9");
    assert_string_equal(jv_path_str(doc, "callback_token"), "v1.x");
    assert_string_equal(jv_path_str(doc, "workflow.status"), "in_progress");
    jv_free(doc);
    assert_build_fails(&o, &env, "[1]", CRCR_E_CONFIG, "CLIENT_PAYLOAD: not a JSON object");
    assert_build_fails(&o, &env, "{", CRCR_E_CONFIG, "CLIENT_PAYLOAD: not valid JSON");
    /* With an event file (a Buildkite build a GitHub workflow started), its client_payload. */
    env.event_path = "/some/event.json";
    doc = build_ok(&o, &env, EVENT);
    assert_string_equal(jv_path_str(doc, "delivery_id"), "d-1");
    jv_free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buildkite_variables_are_mapped_like_upstreams_wrapper),
        cmocka_unit_test(buildkite_job_name_falls_back_to_step_key_then_unknown),
        cmocka_unit_test(buildkite_environment_problems_name_buildkite_variables),
        cmocka_unit_test(buildkite_client_payload_is_the_root_without_an_event_file),
        cmocka_unit_test(in_progress_body_is_byte_identical_to_report_callback_py),
        cmocka_unit_test(in_progress_has_null_conclusion_started_at_and_null_completed_at),
        cmocka_unit_test(completed_has_conclusion_completed_at_and_null_started_at),
        cmocka_unit_test(workflow_fields_come_from_the_actions_environment),
        cmocka_unit_test(client_payload_is_echoed_with_extra_fields_and_key_order),
        cmocka_unit_test(existing_workflow_key_is_replaced_in_place),
        cmocka_unit_test(test_results_are_sent_parsed_not_as_a_string),
        cmocka_unit_test(artifact_url_is_present_only_when_given),
        cmocka_unit_test(check_run_id_falls_back_to_run_id_dash_attempt),
        cmocka_unit_test(job_name_option_overrides_github_job),
        cmocka_unit_test(self_report_body_has_upstream_envelope),
        cmocka_unit_test(event_type_without_delivery_id_is_rejected),
        cmocka_unit_test(self_report_must_be_completed_nightly_or_periodic),
        cmocka_unit_test(completed_without_conclusion_is_rejected),
        cmocka_unit_test(completed_needs_one_of_githubs_conclusions),
        cmocka_unit_test(unknown_or_missing_status_is_rejected),
        cmocka_unit_test(invalid_test_results_json_is_a_usage_error),
        cmocka_unit_test(event_without_client_payload_object_is_rejected),
        cmocka_unit_test(missing_run_identity_in_environment_is_rejected),
        cmocka_unit_test(body_over_its_cap_is_refused),
        cmocka_unit_test(values_serialise_like_python_json_dumps),
        cmocka_unit_test(retry_delay_honours_retry_after_else_doubles_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
