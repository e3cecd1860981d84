/*
 * test_callback.c - callback body validation (callback_parse, callback.h step 6): the upstream
 * relay's required fields and messages ("callback body missing required field: ..."), crcr's
 * stricter numeric run ids for GitHub tokens (a 400 where upstream crashes into a 500) and
 * Buildkite's build ids (upstream's wrapper sends the build's UUID), the run_attempt default,
 * GitHub's check-run conclusions, link fields kept only as https:// URLs, the named limits, and
 * where the head sha is read from.
 *
 * Bodies are built from the callback action's real shape (upstream reference §2.8 and the unit
 * fixtures of §3: delivery del-123, PR 42, head sha abc123, run 99999), changing one field per
 * case. Every case also checks that the handler's selective parse (callback_body_parse) gives
 * callback_parse the same answer and fields as the full tree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "callback.h"
#include "json.h"
#include "crcr_limits.h"

/* What the crcr callback action posts for a pull_request job that has started. */
static const char pr_body[] =
    "{\"event_type\":\"pull_request\",\"delivery_id\":\"del-123\","
    "\"payload\":{\"action\":\"opened\",\"number\":42,"
    "\"pull_request\":{\"number\":42,\"head\":{\"sha\":\"abc123\",\"ref\":\"feature\"},"
    "\"labels\":[{\"name\":\"ciflow/crcr/device1\"},{\"name\":\"other\"}]},"
    "\"repository\":{\"full_name\":\"pytorch/pytorch\"}},"
    "\"workflow\":{\"schema_version\":\"1\",\"status\":\"in_progress\",\"conclusion\":null,"
    "\"name\":\"CI\",\"url\":\"https://github.com/org/repo/actions/runs/99999\","
    "\"run_id\":\"99999\",\"run_attempt\":\"1\",\"job_name\":\"build\",\"check_run_id\":\"456\","
    "\"started_at\":\"2026-08-30T10:00:00Z\",\"completed_at\":null},"
    "\"callback_token\":\"v1.tok\"}";

/* The nightly self-report of upstream reference §3 (nightly cases 23-30). */
static const char nightly_body[] =
    "{\"event_type\":\"nightly\",\"delivery_id\":\"abc123def456\",\"payload\":{},"
    "\"workflow\":{\"status\":\"completed\",\"conclusion\":\"success\","
    "\"name\":\"CRCR Nightly CI\",\"url\":\"https://github.com/org/repo/actions/runs/12345\","
    "\"run_id\":\"12345\",\"run_attempt\":\"1\",\"job_name\":\"nightly-build\","
    "\"check_run_id\":\"67890\"}}";

typedef struct fixture {
    jv *body;
    crcr_issuer_kind kind; /* of the caller's token: GitHub unless a test says otherwise */
    cb_fields f;
    char detail[512];
} fixture;

static jv *parse(const char *json)
{
    char err[160];
    jv *doc = jv_parse(json, strlen(json), err, sizeof(err));
    if (!doc)
        fail_msg("test JSON does not parse: %s", err);
    return doc;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    fx->body = parse(pr_body);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    jv_free(fx->body);
    free(fx);
    return 0;
}

static jv *wf(fixture *fx)
{
    return jv_get(fx->body, "workflow");
}

/* Sets or (val == NULL) deletes obj[key]; jv_set steals `val`. */
static void put(jv *obj, const char *key, jv *val)
{
    assert_true(jv_is_obj(obj));
    if (val)
        assert_int_equal(jv_set(obj, key, val), CRCR_OK);
    else
        assert_int_equal(jv_del(obj, key), CRCR_OK);
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* callback_parse of the body, checked against callback_parse of the same text parsed the way
 * the handler parses it (callback_body_parse builds only the selected paths): same answer, same
 * detail, same fields. */
static bool run(fixture *fx)
{
    memset(fx->detail, 0, sizeof(fx->detail));
    bool ok = callback_parse(fx->body, fx->kind, &fx->f, fx->detail, sizeof(fx->detail));
    buf_t text;
    buf_init(&text, 1 << 20);
    assert_int_equal(jv_dump(fx->body, &text), CRCR_OK);
    jv *sel = callback_body_parse(text.data, text.len);
    assert_non_null(sel);
    cb_fields g;
    char detail[sizeof(fx->detail)];
    memset(detail, 0, sizeof(detail));
    assert_int_equal(callback_parse(sel, fx->kind, &g, detail, sizeof(detail)), ok);
    assert_string_equal(detail, fx->detail);
    if (ok) {
        const cb_fields *f = &fx->f;
        assert_true(same_str(g.event_type, f->event_type));
        assert_true(same_str(g.delivery_id, f->delivery_id));
        assert_true(same_str(g.status, f->status));
        assert_true(same_str(g.conclusion, f->conclusion));
        assert_true(same_str(g.workflow_name, f->workflow_name));
        assert_true(same_str(g.job_name, f->job_name));
        assert_true(same_str(g.artifact_url, f->artifact_url));
        assert_true(same_str(g.head_sha, f->head_sha));
        assert_true(same_str(g.token, f->token));
        assert_true(same_str(g.details_url, f->details_url));
        assert_string_equal(g.run_id, f->run_id);
        assert_int_equal(g.clean_body, f->clean_body);
        assert_int_equal(g.run_attempt, f->run_attempt);
        assert_int_equal(g.pr_number, f->pr_number);
        assert_int_equal(g.passed, f->passed);
        assert_int_equal(g.failed, f->failed);
        assert_int_equal(g.skipped, f->skipped);
    }
    jv_free(sel);
    buf_free(&text);
    return ok;
}

/* Asserts that the body is refused with exactly `want`. */
static void assert_refused(fixture *fx, const char *want)
{
    if (run(fx))
        fail_msg("accepted; expected \"%s\"", want);
    assert_string_equal(fx->detail, want);
}

/* A string of `n` copies of `c` (caller frees). */
static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* ---- the accepted shapes ----------------------------------------------------------------- */

static void test_pull_request_body_fields_are_read(void **state)
{
    fixture *fx = *state;
    assert_true(run(fx));
    cb_fields *f = &fx->f;
    assert_string_equal(f->event_type, "pull_request");
    assert_string_equal(f->delivery_id, "del-123");
    assert_string_equal(f->status, "in_progress");
    assert_null(f->conclusion);
    assert_string_equal(f->workflow_name, "CI");
    assert_string_equal(f->job_name, "build");
    assert_string_equal(f->run_id, "99999");
    assert_int_equal(f->run_attempt, 1);
    assert_int_equal(f->pr_number, 42);
    assert_string_equal(f->head_sha, "abc123");
    assert_string_equal(f->token, "v1.tok");
    assert_null(f->artifact_url);
    /* No test_results: the counters read "unknown". */
    assert_int_equal(f->passed, -1);
    assert_int_equal(f->failed, -1);
    assert_int_equal(f->skipped, -1);
}

static void test_run_id_accepted_as_integer_and_as_numeric_string(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "run_id", jv_new_int(12345678901LL)); /* run ids pass 2^32 */
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "12345678901");

    put(wf(fx), "run_id", jv_new_str("12345678901")); /* the same run: the same text */
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "12345678901");

    put(wf(fx), "run_id", jv_new_str("00042")); /* digits are a number, whatever the zeros */
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "42");

    put(wf(fx), "run_id", jv_new_str("999999999999999999")); /* 18 digits: the largest form */
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "999999999999999999");
}

/* Upstream's Buildkite wrapper sends the build's UUID as run_id (RUN_ID=$BUILDKITE_BUILD_ID):
 * kept as text for a Buildkite token, still refused for a GitHub Actions one. */
static void test_buildkite_build_uuid_is_a_run_id_for_buildkite_tokens_only(void **state)
{
    fixture *fx = *state;
    static const char uuid[] = "0190f1a2-0000-4000-8000-00000000b002";
    put(wf(fx), "run_id", jv_new_str(uuid));
    put(wf(fx), "check_run_id", jv_new_str("0190f1a2-0000-4000-8000-00000000b002-1"));
    assert_refused(fx, "workflow.run_id must be a positive integer");
    fx->kind = CRCR_ISSUER_BUILDKITE;
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, uuid);
    /* Numbers are numbers for both (crcr report sent the build number before). */
    put(wf(fx), "run_id", jv_new_str("4242"));
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "4242");
    put(wf(fx), "run_id", jv_new_int(4242));
    assert_true(run(fx));
    assert_string_equal(fx->f.run_id, "4242");
    /* The text rule: what a URL, an external_id ("run:pr") and HTML take without escaping. */
    static const char *const bad[] = {"",    "a b",           "a:b", "<script>",
                                      "a/b", "\u00e9t\u00e9", "0",   "a+b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put(wf(fx), "run_id", jv_new_str(bad[i]));
        assert_refused(fx, "workflow.run_id must be the build's id: 1 to 64 characters of A-Z "
                           "a-z 0-9 . _ -");
    }
    char *long_id = repeat('a', CRCR_RUN_ID_MAX);
    put(wf(fx), "run_id", jv_new_str(long_id));
    assert_false(run(fx));
    long_id[CRCR_RUN_ID_MAX - 1] = '\0'; /* 64 characters: the longest */
    put(wf(fx), "run_id", jv_new_str(long_id));
    assert_true(run(fx));
    free(long_id);
    put(wf(fx), "run_id", jv_new_real(1.5));
    assert_false(run(fx));
}

static void test_non_numeric_run_id_is_a_400_not_a_crash(void **state)
{
    fixture *fx = *state;
    /* Upstream raises ValueError here and answers 500; crcr answers 400. */
    static const char *const bad[] = {
        "abc", "12a", "", " 1", "1.0", "-5", "0", "+5", "1e3", "0x10", "1234567890123456789"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put(wf(fx), "run_id", jv_new_str(bad[i]));
        assert_refused(fx, "workflow.run_id must be a positive integer");
    }
    /* A Buildkite build id is no GitHub run id (re-runs name GitHub's in its API). */
    put(wf(fx), "run_id", jv_new_str("0190f1a2-0000-4000-8000-00000000b002"));
    assert_refused(fx, "workflow.run_id must be a positive integer");
    put(wf(fx), "run_id", jv_new_int(-1));
    assert_refused(fx, "workflow.run_id must be a positive integer");
    put(wf(fx), "run_id", jv_new_real(1.5));
    assert_refused(fx, "workflow.run_id must be a positive integer");
    put(wf(fx), "run_id", jv_new_bool(true));
    assert_refused(fx, "workflow.run_id must be a positive integer");
}

static void test_run_attempt_defaults_to_one(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "run_attempt", NULL);
    assert_true(run(fx));
    assert_int_equal(fx->f.run_attempt, 1);

    put(wf(fx), "run_attempt", jv_new_null());
    assert_true(run(fx));
    assert_int_equal(fx->f.run_attempt, 1);

    put(wf(fx), "run_attempt", jv_new_str("3")); /* a re-run */
    assert_true(run(fx));
    assert_int_equal(fx->f.run_attempt, 3);

    put(wf(fx), "run_attempt", jv_new_int(4));
    assert_true(run(fx));
    assert_int_equal(fx->f.run_attempt, 4);
}

static void test_bad_run_attempt_is_refused(void **state)
{
    fixture *fx = *state;
    static const char *const bad[] = {"x", "0", "", "-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put(wf(fx), "run_attempt", jv_new_str(bad[i]));
        assert_refused(fx, "workflow.run_attempt must be a positive integer");
    }
    put(wf(fx), "run_attempt", jv_new_int(0));
    assert_refused(fx, "workflow.run_attempt must be a positive integer");
}

static void test_completed_keeps_conclusion_and_test_results(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "status", jv_new_str("completed"));
    put(wf(fx), "conclusion", jv_new_str("failure"));
    put(wf(fx), "artifact_url", jv_new_str("https://example.com/logs.zip"));
    jv *tr = jv_new_obj();
    put(tr, "passed", jv_new_int(10));
    put(tr, "failed", jv_new_str("2")); /* the action may send numbers as strings */
    put(tr, "skipped", jv_new_int(0));
    put(wf(fx), "test_results", tr);
    assert_true(run(fx));
    assert_string_equal(fx->f.status, "completed");
    assert_string_equal(fx->f.conclusion, "failure");
    assert_string_equal(fx->f.artifact_url, "https://example.com/logs.zip");
    assert_int_equal(fx->f.passed, 10);
    assert_int_equal(fx->f.failed, 2);
    assert_int_equal(fx->f.skipped, 0);
}

static void test_in_progress_drops_a_conclusion(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "conclusion", jv_new_str("success"));
    assert_true(run(fx));
    assert_null(fx->f.conclusion);
    /* Whatever it is: upstream's reporter sends null with in_progress. */
    put(wf(fx), "conclusion", jv_new_str("sucess"));
    assert_true(run(fx));
    assert_null(fx->f.conclusion);
    assert_false(fx->f.clean_body);
}

#define CONCLUSIONS                                                                                \
    "action_required, cancelled, failure, neutral, success, skipped, stale, timed_out"

static void test_completed_needs_one_of_githubs_conclusions(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "status", jv_new_str("completed"));
    static const char *const good[] = {"action_required", "cancelled", "failure", "neutral",
                                       "success",         "skipped",   "stale",   "timed_out"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        put(wf(fx), "conclusion", jv_new_str(good[i]));
        assert_true(run(fx));
        assert_string_equal(fx->f.conclusion, good[i]);
        assert_false(fx->f.clean_body);
    }
    put(wf(fx), "conclusion", jv_new_str("sucess"));
    assert_refused(fx, "workflow.conclusion must be one of " CONCLUSIONS
                       " when status is completed, got 'sucess'");
    static const char *const bad[] = {"", "succeeded", "success ", "in_progress", "ok"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put(wf(fx), "conclusion", jv_new_str(bad[i]));
        assert_false(run(fx));
        assert_non_null(strstr(fx->detail, "workflow.conclusion must be one of " CONCLUSIONS));
    }
    put(wf(fx), "conclusion", jv_new_null());
    assert_refused(fx,
                   "workflow.conclusion must be one of " CONCLUSIONS " when status is completed");
    put(wf(fx), "conclusion", NULL);
    assert_refused(fx,
                   "workflow.conclusion must be one of " CONCLUSIONS " when status is completed");
    put(wf(fx), "conclusion", jv_new_int(1));
    assert_refused(fx,
                   "workflow.conclusion must be one of " CONCLUSIONS " when status is completed");
    char *long_word = repeat('x', 5000);
    put(wf(fx), "conclusion", jv_new_str(long_word));
    assert_false(run(fx));
    assert_true(strlen(fx->detail) < 200); /* the word is quoted cut */
    free(long_word);
}

/* Any ASCII case is GitHub's word: kept and sent in lower case, the body cleaned to match. */
static void test_conclusion_case_is_githubs(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "status", jv_new_str("completed"));
    put(wf(fx), "conclusion", jv_new_str("Success"));
    assert_true(run(fx));
    assert_string_equal(fx->f.conclusion, "success");
    assert_true(fx->f.clean_body);
    put(wf(fx), "conclusion", jv_new_str("TIMED_OUT"));
    assert_true(run(fx));
    assert_string_equal(fx->f.conclusion, "timed_out");

    buf_t text, out;
    buf_init(&text, 1 << 20);
    buf_init(&out, 1 << 20);
    assert_int_equal(jv_dump(fx->body, &text), CRCR_OK);
    assert_int_equal(callback_clean_body(text.data, text.len, &fx->f, &out), CRCR_OK);
    jv *clean = parse(buf_cstr(&out));
    assert_string_equal(jv_path_str(clean, "workflow.conclusion"), "timed_out");
    /* Everything else as received. */
    jv_del(jv_get(clean, "workflow"), "conclusion");
    jv_del(wf(fx), "conclusion");
    assert_true(jv_equal(clean, fx->body));
    jv_free(clean);
    buf_free(&text);
    buf_free(&out);
}

/* Link fields keep https:// URLs only; anything else is dropped from the fields and from the
 * body as stored and forwarded (callback_clean_body). */
static void test_links_are_https_or_dropped(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "artifact_url", jv_new_str("https://example.com/logs.zip"));
    assert_true(run(fx));
    assert_string_equal(fx->f.artifact_url, "https://example.com/logs.zip");
    assert_string_equal(fx->f.details_url, "https://github.com/org/repo/actions/runs/99999");
    assert_false(fx->f.clean_body);

    static const char *const bad[] = {"javascript:alert(document.cookie)",
                                      "JAVASCRIPT:alert(1)",
                                      "http://example.com/logs.zip",
                                      "data:text/html,<script>alert(1)</script>",
                                      "https://",
                                      "https://example.com/a b",
                                      "https://example.com/\\evil",
                                      " https://example.com/x",
                                      "//example.com/x",
                                      ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (int which = 0; which < 2; which++) {
            const char *key = which ? "url" : "artifact_url";
            put(wf(fx), "artifact_url", jv_new_str("https://example.com/ok"));
            put(wf(fx), "url", jv_new_str("https://github.com/org/repo/actions/runs/99999"));
            put(wf(fx), key, jv_new_str(bad[i]));
            assert_true(run(fx));
            assert_null(which ? fx->f.details_url : fx->f.artifact_url);
            assert_non_null(which ? fx->f.artifact_url : fx->f.details_url);
            assert_true(fx->f.clean_body);

            buf_t text, out;
            buf_init(&text, 1 << 20);
            buf_init(&out, 1 << 20);
            assert_int_equal(jv_dump(fx->body, &text), CRCR_OK);
            assert_int_equal(callback_clean_body(text.data, text.len, &fx->f, &out), CRCR_OK);
            if (strlen(bad[i]) > 8) /* not a part of the kept URLs */
                assert_null(strstr(buf_cstr(&out), bad[i]));
            jv *clean = parse(buf_cstr(&out));
            assert_null(jv_get(jv_get(clean, "workflow"), key));
            assert_non_null(jv_get(jv_get(clean, "workflow"), which ? "artifact_url" : "url"));
            jv_free(clean);
            buf_free(&text);
            buf_free(&out);
        }
    }
    put(wf(fx), "url", jv_new_str("https://github.com/org/repo/actions/runs/99999"));
    put(wf(fx), "artifact_url", jv_new_int(5)); /* not even a string */
    assert_true(run(fx));
    assert_null(fx->f.artifact_url);
    assert_true(fx->f.clean_body);
    put(wf(fx), "artifact_url", jv_new_null()); /* null is "none", nothing to drop */
    assert_true(run(fx));
    assert_false(fx->f.clean_body);
}

static void test_nightly_body_is_accepted(void **state)
{
    fixture *fx = *state;
    jv_free(fx->body);
    fx->body = parse(nightly_body);
    assert_true(run(fx));
    assert_string_equal(fx->f.event_type, "nightly");
    assert_string_equal(fx->f.delivery_id, "abc123def456");
    assert_string_equal(fx->f.status, "completed");
    assert_string_equal(fx->f.conclusion, "success");
    assert_string_equal(fx->f.workflow_name, "CRCR Nightly CI");
    assert_string_equal(fx->f.job_name, "nightly-build");
    assert_string_equal(fx->f.run_id, "12345");
    assert_int_equal(fx->f.run_attempt, 1);
    /* payload {}: no PR, no sha, no token. */
    assert_int_equal(fx->f.pr_number, 0);
    assert_null(fx->f.head_sha);
    assert_null(fx->f.token);
}

/* ---- required fields, with the upstream message --------------------------------------- */

static void test_missing_required_fields_name_the_field(void **state)
{
    fixture *fx = *state;
    static const struct {
        const char *parent, *key, *detail;
    } cases[] = {
        {NULL, "delivery_id", "callback body missing required field: 'delivery_id'"},
        {NULL, "workflow", "callback body missing required field: 'workflow'"},
        {"workflow", "status", "callback body missing required field: 'workflow.status'"},
        {"workflow", "run_id", "callback body missing required field: 'workflow.run_id'"},
        {"workflow", "name", "callback body missing required field: 'workflow.name'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        jv_free(fx->body);
        fx->body = parse(pr_body);
        put(cases[i].parent ? wf(fx) : fx->body, cases[i].key, NULL);
        assert_refused(fx, cases[i].detail);
    }
}

static void test_null_or_wrong_type_required_fields_count_as_missing(void **state)
{
    fixture *fx = *state;
    put(fx->body, "delivery_id", jv_new_str(""));
    assert_refused(fx, "callback body missing required field: 'delivery_id'");
    put(fx->body, "delivery_id", jv_new_int(5));
    assert_refused(fx, "callback body missing required field: 'delivery_id'");
    put(fx->body, "delivery_id", jv_new_str("del-123"));

    put(wf(fx), "run_id", jv_new_null());
    assert_refused(fx, "callback body missing required field: 'workflow.run_id'");
    put(wf(fx), "run_id", jv_new_str("99999"));

    put(wf(fx), "status", jv_new_int(1));
    assert_refused(fx, "callback body missing required field: 'workflow.status'");
    put(wf(fx), "status", jv_new_str("in_progress"));

    put(fx->body, "workflow", jv_new_str("CI"));
    assert_refused(fx, "callback body missing required field: 'workflow'");
}

static void test_unknown_status_is_refused_with_upstream_message(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "status", jv_new_str("queued"));
    assert_refused(fx, "unknown callback status: 'queued'");
    put(wf(fx), "status", jv_new_str("Completed"));
    assert_refused(fx, "unknown callback status: 'Completed'");
}

static void test_long_unknown_status_is_cut_in_the_message(void **state)
{
    fixture *fx = *state;
    char *status = repeat('s', 5000);
    put(wf(fx), "status", jv_new_str(status));
    assert_false(run(fx));
    assert_true(strncmp(fx->detail, "unknown callback status: 'sss", 29) == 0);
    assert_true(strlen(fx->detail) < 100);
    free(status);
}

/* ---- limits ------------------------------------------------------------------------------ */

static void test_job_name_longer_than_limit_is_refused(void **state)
{
    fixture *fx = *state;
    char *name = repeat('j', CRCR_JOB_NAME_MAX);
    put(wf(fx), "job_name", jv_new_str(name));
    assert_true(run(fx)); /* exactly the limit */
    assert_int_equal(strlen(fx->f.job_name), CRCR_JOB_NAME_MAX);
    free(name);

    name = repeat('j', CRCR_JOB_NAME_MAX + 1);
    put(wf(fx), "job_name", jv_new_str(name));
    char want[80];
    snprintf(want, sizeof(want), "workflow.job_name longer than %u bytes", CRCR_JOB_NAME_MAX);
    assert_refused(fx, want);
    free(name);
}

static void test_job_name_is_optional_but_must_be_a_string(void **state)
{
    fixture *fx = *state;
    put(wf(fx), "job_name", NULL);
    assert_true(run(fx));
    assert_null(fx->f.job_name);
    put(wf(fx), "job_name", jv_new_null());
    assert_true(run(fx));
    assert_null(fx->f.job_name);
    put(wf(fx), "job_name", jv_new_int(7));
    assert_refused(fx, "workflow.job_name must be a string");
}

static void test_delivery_id_longer_than_limit_is_refused(void **state)
{
    fixture *fx = *state;
    char *id = repeat('d', CRCR_DELIVERY_ID_MAX - 1);
    put(fx->body, "delivery_id", jv_new_str(id));
    assert_true(run(fx));
    free(id);
    id = repeat('d', CRCR_DELIVERY_ID_MAX);
    put(fx->body, "delivery_id", jv_new_str(id));
    assert_refused(fx, "delivery_id too long");
    free(id);
}

static void test_detail_is_cut_safely_in_a_small_buffer(void **state)
{
    fixture *fx = *state;
    put(fx->body, "delivery_id", NULL);
    char small[12];
    memset(small, 'x', sizeof(small));
    assert_false(callback_parse(fx->body, fx->kind, &fx->f, small, sizeof(small)));
    assert_string_equal(small, "callback bo");
}

/* ---- head sha, PR number and labels ------------------------------------------------------ */

static void test_head_sha_from_pull_request_head(void **state)
{
    fixture *fx = *state;
    /* A push-shaped "after" next to a PR must not win over pull_request.head.sha. */
    put(jv_get(fx->body, "payload"), "after", jv_new_str("ffff"));
    assert_true(run(fx));
    assert_string_equal(fx->f.head_sha, "abc123");
    assert_int_equal(fx->f.pr_number, 42);
}

static void test_head_sha_from_push_after(void **state)
{
    fixture *fx = *state;
    jv *payload = jv_new_obj();
    put(payload, "ref", jv_new_str("refs/heads/main"));
    put(payload, "after", jv_new_str("0123456789abcdef0123456789abcdef01234567"));
    put(fx->body, "payload", payload);
    assert_true(run(fx));
    assert_string_equal(fx->f.head_sha, "0123456789abcdef0123456789abcdef01234567");
    assert_int_equal(fx->f.pr_number, 0);
}

static void test_overlong_head_sha_is_dropped(void **state)
{
    fixture *fx = *state;
    char *sha = repeat('a', CRCR_SHA_MAX);
    put(jv_path(fx->body, "payload.pull_request.head"), "sha", jv_new_str(sha));
    assert_true(run(fx));
    assert_null(fx->f.head_sha);
    free(sha);
    sha = repeat('a', CRCR_SHA_MAX - 1); /* a SHA-256 commit id fits */
    put(jv_path(fx->body, "payload.pull_request.head"), "sha", jv_new_str(sha));
    assert_true(run(fx));
    assert_string_equal(fx->f.head_sha, sha);
    free(sha);
}

static void test_strings_point_into_the_body(void **state)
{
    fixture *fx = *state;
    assert_true(run(fx));
    /* Strings are borrowed: no copies to free. */
    assert_ptr_equal(fx->f.delivery_id, jv_path_str(fx->body, "delivery_id"));
    assert_ptr_equal(fx->f.job_name, jv_path_str(fx->body, "workflow.job_name"));
}

/* Before its token a body is only validated (jv_validate); afterwards the handler builds only
 * what callback_parse reads. The echoed labels are not among it (the relay decides check runs
 * from its own record), so even 732 KB of {} under them builds nothing. */
static void test_the_echoed_labels_are_never_built(void **state)
{
    (void)state;
    buf_t text;
    buf_init(&text, 2u << 20);
    buf_puts(&text, "{\"delivery_id\":\"d\",\"payload\":{\"pull_request\":{\"labels\":[");
    for (int i = 0; i < 366000; i++)
        buf_puts(&text, i ? ",{}" : "{}");
    buf_puts(&text, "]}},\"workflow\":{\"status\":\"in_progress\",\"run_id\":1,\"name\":\"CI\"}}");
    bool is_obj = false;
    assert_true(jv_validate(text.data, text.len, &is_obj, NULL, 0));
    assert_true(is_obj);
    jv *sel = callback_body_parse(text.data, text.len);
    assert_non_null(sel);
    assert_null(jv_path(sel, "payload.pull_request.labels"));
    cb_fields f;
    char detail[512];
    assert_true(callback_parse(sel, CRCR_ISSUER_GITHUB, &f, detail, sizeof(detail)));
    jv_free(sel);
    buf_free(&text);
}

static void test_pr_number_accepted_as_string(void **state)
{
    fixture *fx = *state;
    put(jv_path(fx->body, "payload.pull_request"), "number", jv_new_str("77"));
    assert_true(run(fx));
    assert_int_equal(fx->f.pr_number, 77);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

/* Fuzzer finding: the unknown-status detail must not cut a UTF-8 character in half. */
static void test_unknown_status_detail_stays_valid_utf8(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 4096);
    buf_puts(&body, "{\"delivery_id\":\"d\",\"workflow\":{\"status\":\"");
    for (int i = 0; i < 22; i++)
        buf_puts(&body, "\xc3\xa9");
    buf_puts(&body, "\",\"run_id\":1,\"name\":\"CI\"}}");
    jv *doc = jv_parse(body.data, body.len, NULL, 0);
    assert_non_null(doc);
    cb_fields f;
    char detail[512];
    assert_false(callback_parse(doc, CRCR_ISSUER_GITHUB, &f, detail, sizeof(detail)));
    assert_non_null(strstr(detail, "unknown callback status"));
    /* The detail must be valid UTF-8: jansson refuses invalid strings. */
    jv *s = jv_new_str(detail);
    assert_non_null(s);
    jv_free(s);
    jv_free(doc);
    buf_free(&body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_status_detail_stays_valid_utf8),
        T(test_pull_request_body_fields_are_read),
        T(test_run_id_accepted_as_integer_and_as_numeric_string),
        T(test_buildkite_build_uuid_is_a_run_id_for_buildkite_tokens_only),
        T(test_non_numeric_run_id_is_a_400_not_a_crash),
        T(test_run_attempt_defaults_to_one),
        T(test_bad_run_attempt_is_refused),
        T(test_completed_keeps_conclusion_and_test_results),
        T(test_in_progress_drops_a_conclusion),
        T(test_completed_needs_one_of_githubs_conclusions),
        T(test_conclusion_case_is_githubs),
        T(test_links_are_https_or_dropped),
        T(test_nightly_body_is_accepted),
        T(test_missing_required_fields_name_the_field),
        T(test_null_or_wrong_type_required_fields_count_as_missing),
        T(test_unknown_status_is_refused_with_upstream_message),
        T(test_long_unknown_status_is_cut_in_the_message),
        T(test_job_name_longer_than_limit_is_refused),
        T(test_job_name_is_optional_but_must_be_a_string),
        T(test_delivery_id_longer_than_limit_is_refused),
        T(test_detail_is_cut_safely_in_a_small_buffer),
        T(test_head_sha_from_pull_request_head),
        T(test_head_sha_from_push_after),
        T(test_overlong_head_sha_is_dropped),
        T(test_strings_point_into_the_body),
        cmocka_unit_test(test_the_echoed_labels_are_never_built),
        T(test_pr_number_accepted_as_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
