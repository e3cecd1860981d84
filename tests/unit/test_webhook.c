/*
 * test_webhook.c - webhook routing (webhook_classify, webhook.h steps 5-6): which verified,
 * parsed webhook leads to a dispatch, a label back-fill, a check-run re-run or a suite re-run,
 * and which ones are answered {"ignored":true}. Every body goes through the handler's selective
 * parse (jv_parse_select over webhook_json_paths), so a path the classifier reads without adding
 * it there fails here.
 *
 * Fixtures (tests/data/webhooks/, found through CRCR_TEST_DATA): real payloads from
 * @octokit/webhooks-examples whose repository.full_name reads pytorch/pytorch. Each test changes
 * only the fields its route depends on, so the rest of the body stays as GitHub sends it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "json.h"
#include "crcr_limits.h"
#include "webhook.h"

#define UPSTREAM "pytorch/pytorch"

/* ---- helpers ---------------------------------------------------------------------------- */

/* Parses tests/data/webhooks/<name> (new reference, caller frees). Fails the test if missing. */
static jv *load(const char *name)
{
    const char *dir = getenv("CRCR_TEST_DATA");
    if (!dir)
        fail_msg("CRCR_TEST_DATA is not set (ctest sets it to <repo>/tests/data)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/webhooks/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    buf_t b;
    buf_init(&b, 1024u * 1024u);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(buf_append(&b, chunk, n), CRCR_OK);
    fclose(f);
    char err[160];
    jv *doc = jv_parse(b.data, b.len, err, sizeof(err));
    if (!doc)
        fail_msg("%s: %s", path, err);
    buf_free(&b);
    return doc;
}

/* Parses a JSON literal written in the test (new reference). */
static jv *parse(const char *json)
{
    char err[160];
    jv *doc = jv_parse(json, strlen(json), err, sizeof(err));
    if (!doc)
        fail_msg("test JSON does not parse: %s", err);
    return doc;
}

/* Sets obj[key] (obj found at `path` of `doc`, "" for the root) to a string. */
static void set_str(jv *doc, const char *path, const char *key, const char *value)
{
    jv *obj = *path ? jv_path(doc, path) : doc;
    assert_true(jv_is_obj(obj));
    assert_int_equal(jv_set(obj, key, jv_new_str(value)), CRCR_OK);
}

static void set_int(jv *doc, const char *path, const char *key, int64_t value)
{
    jv *obj = *path ? jv_path(doc, path) : doc;
    assert_true(jv_is_obj(obj));
    assert_int_equal(jv_set(obj, key, jv_new_int(value)), CRCR_OK);
}

/* The documents classify() parsed selectively: a route borrows strings from its document, so
 * they live until the end of the run (freed in main). */
#define SELECTED_MAX 256
static jv *g_selected[SELECTED_MAX];
static size_t g_n_selected;

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Classifies `doc` as the handler does: serialised, parsed again with jv_parse_select() over
 * webhook_json_paths (webhook_handle's parse), then webhook_classify(). The fully parsed `doc`
 * must be classified the same way: a path the classifier reads that is missing from
 * webhook_json_paths shows up here as a different route. Returns the route of the selective
 * parse (its strings live until the end of the run). */
static webhook_route classify(const char *event, const jv *doc, const char *upstream)
{
    buf_t text;
    buf_init(&text, 64u * 1024u * 1024u);
    assert_int_equal(jv_dump(doc, &text), CRCR_OK);
    char err[160] = "";
    jv *sel = jv_parse_select(text.data, text.len, webhook_json_paths, webhook_json_paths_n, err,
                              sizeof(err));
    buf_free(&text);
    if (!sel)
        fail_msg("jv_parse_select: %s", err);
    assert_true(g_n_selected < SELECTED_MAX);
    g_selected[g_n_selected++] = sel;

    webhook_route r, full;
    memset(&r, 0x5a, sizeof(r)); /* the function must set every field itself */
    webhook_classify(event, sel, upstream, &r);
    memset(&full, 0xa5, sizeof(full));
    webhook_classify(event, doc, upstream, &full);
    assert_int_equal(r.kind, full.kind);
    assert_true(same_str(r.reason, full.reason));
    assert_true(same_str(r.action, full.action));
    assert_true(same_str(r.device, full.device));
    if (r.kind == WEBHOOK_RERUN_RUN) {
        assert_string_equal(r.repo, full.repo);
        assert_int_equal(r.run_id, full.run_id);
    }
    if (r.kind == WEBHOOK_RERUN_SUITE)
        assert_int_equal(r.suite_id, full.suite_id);
    return r;
}

/* The document the last classify() call classified (the selective parse). */
static const jv *last_selected(void)
{
    assert_true(g_n_selected > 0);
    return g_selected[g_n_selected - 1];
}

/* A labeled pull_request from upstream carrying `label` (new reference). */
static jv *labeled(const char *label)
{
    jv *doc = load("pull_request.labeled.json");
    set_str(doc, "label", "name", label);
    return doc;
}

/* A check_run rerequested from upstream on check `name` with `external_id` (new reference). */
static jv *check_run_rerequested(const char *name, const char *external_id)
{
    jv *doc = load("check_run.rerequested.json");
    set_str(doc, "check_run", "name", name);
    set_str(doc, "check_run", "external_id", external_id);
    return doc;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

static void test_push_from_upstream_dispatches(void **state)
{
    (void)state;
    jv *doc = load("push.json");
    webhook_route r = classify("push", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_DISPATCH);
    assert_null(r.action); /* push bodies carry no action */
    assert_null(r.reason);
    jv_free(doc);

    doc = load("push.deleted.json"); /* a branch deletion is still forwarded, like upstream */
    r = classify("push", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_DISPATCH);
    jv_free(doc);
}

static void test_pull_request_lifecycle_actions_dispatch(void **state)
{
    (void)state;
    static const char *const files[] = {"pull_request.opened.json", "pull_request.reopened.json",
                                        "pull_request.synchronize.json",
                                        "pull_request.closed.json"};
    static const char *const actions[] = {"opened", "reopened", "synchronize", "closed"};
    for (size_t i = 0; i < 4; i++) {
        jv *doc = load(files[i]);
        webhook_route r = classify("pull_request", doc, UPSTREAM);
        assert_int_equal(r.kind, WEBHOOK_DISPATCH);
        assert_string_equal(r.action, actions[i]);
        /* borrowed from the body as the handler parsed it */
        assert_ptr_equal(r.action, jv_path_str(last_selected(), "action"));
        assert_null(r.device);
        jv_free(doc);
    }
}

static void test_upstream_repo_matches_ignoring_case(void **state)
{
    (void)state;
    jv *doc = load("pull_request.opened.json");
    set_str(doc, "repository", "full_name", "PyTorch/PyTorch");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_DISPATCH);
    assert_int_equal(classify("pull_request", doc, "PYTORCH/pytorch").kind, WEBHOOK_DISPATCH);
    jv_free(doc);
}

/* ---- ignored ----------------------------------------------------------------------------- */

static void test_event_from_foreign_repo_is_ignored(void **state)
{
    (void)state;
    /* The App is installed downstream too: their events must never fan out. */
    static const char *const foreign[] = {"someone/pytorch", "pytorch/pytorch-fork",
                                          "pytorch/pytorc", "pytorch/pytorch ", ""};
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        jv *doc = load("pull_request.opened.json");
        set_str(doc, "repository", "full_name", foreign[i]);
        webhook_route r = classify("pull_request", doc, UPSTREAM);
        assert_int_equal(r.kind, WEBHOOK_IGNORE);
        assert_null(r.reason);
        jv_free(doc);

        doc = load("push.json");
        set_str(doc, "repository", "full_name", foreign[i]);
        assert_int_equal(classify("push", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
        jv_free(doc);
    }
}

static void test_missing_or_non_string_repository_is_ignored(void **state)
{
    (void)state;
    jv *doc = parse("{\"action\":\"opened\",\"pull_request\":{\"number\":1}}");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
    doc = parse("{\"action\":\"opened\",\"repository\":{\"full_name\":42}}");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
    doc = parse("{\"action\":\"opened\",\"repository\":\"pytorch/pytorch\"}");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
    doc = parse("[\"pytorch/pytorch\"]"); /* not an object at all */
    webhook_route r = classify("push", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_null(r.action);
    jv_free(doc);
}

static void test_other_pull_request_actions_are_ignored(void **state)
{
    (void)state;
    jv *doc = load("pull_request.assigned.json");
    webhook_route r = classify("pull_request", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_string_equal(r.action, "assigned");
    assert_null(r.reason);
    jv_free(doc);

    static const char *const others[] = {"edited", "unlabeled", "ready_for_review",
                                         "Opened", "opened ",   ""};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        doc = load("pull_request.opened.json");
        set_str(doc, "", "action", others[i]);
        assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
        jv_free(doc);
    }
    doc = parse("{\"repository\":{\"full_name\":\"pytorch/pytorch\"}}"); /* no action */
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

static void test_events_the_router_does_not_handle_are_ignored(void **state)
{
    (void)state;
    jv *doc = load("issues.opened.json");
    assert_int_equal(classify("issues", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
    /* check_run / check_suite actions other than rerequested. */
    doc = check_run_rerequested("crcr/org/repo/CI/build", "123:45");
    set_str(doc, "", "action", "completed");
    assert_int_equal(classify("check_run", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
    doc = load("check_suite.rerequested.json");
    set_str(doc, "", "action", "requested");
    assert_int_equal(classify("check_suite", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

/* ---- labels ------------------------------------------------------------------------------ */

static void test_ciflow_crcr_label_routes_to_device(void **state)
{
    (void)state;
    jv *doc = labeled("ciflow/crcr/npu");
    webhook_route r = classify("pull_request", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_LABEL);
    assert_string_equal(r.device, "npu");
    assert_string_equal(r.action, "labeled");
    /* The device borrows from the body's label. */
    assert_ptr_equal(r.device, jv_path_str(last_selected(), "label.name") + strlen("ciflow/crcr/"));
    assert_int_equal(r.run_id, 0);
    assert_int_equal(r.suite_id, 0);
    jv_free(doc);
}

static void test_labeled_with_other_label_is_ignored(void **state)
{
    (void)state;
    jv *doc = load("pull_request.labeled.json"); /* the real example: label "bug" */
    assert_string_equal(jv_path_str(doc, "label.name"), "bug");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);

    static const char *const others[] = {"ciflow/trunk", "ciflow/crcr", "ciflow/oot/npu",
                                         "CIFLOW/CRCR/npu", "xciflow/crcr/npu"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        doc = labeled(others[i]);
        webhook_route r = classify("pull_request", doc, UPSTREAM);
        assert_int_equal(r.kind, WEBHOOK_IGNORE);
        assert_null(r.device);
        jv_free(doc);
    }
}

static void test_ciflow_crcr_label_with_empty_device_is_ignored(void **state)
{
    (void)state;
    jv *doc = labeled("ciflow/crcr/");
    webhook_route r = classify("pull_request", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_null(r.device);
    jv_free(doc);
}

static void test_label_at_the_label_limit_is_ignored(void **state)
{
    (void)state;
    char label[CRCR_LABEL_MAX + 1];
    memset(label, 'd', sizeof(label));
    memcpy(label, "ciflow/crcr/", 12);
    label[CRCR_LABEL_MAX - 1] = '\0'; /* longest accepted: CRCR_LABEL_MAX - 1 bytes */
    jv *doc = labeled(label);
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_LABEL);
    jv_free(doc);

    label[CRCR_LABEL_MAX - 1] = 'd';
    label[CRCR_LABEL_MAX] = '\0';
    doc = labeled(label);
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

static void test_label_event_without_label_object_is_ignored(void **state)
{
    (void)state;
    jv *doc = parse("{\"action\":\"labeled\",\"repository\":{\"full_name\":\"pytorch/pytorch\"},"
                    "\"label\":{\"name\":null}}");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

/* ---- check_run rerequested --------------------------------------------------------------- */

static void test_rerequested_crcr_check_run_reruns_the_downstream_run(void **state)
{
    (void)state;
    jv *doc = check_run_rerequested("crcr/org/l3repo/CI/build", "123:45");
    webhook_route r = classify("check_run", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_RERUN_RUN);
    assert_string_equal(r.repo, "org/l3repo");
    assert_int_equal(r.run_id, 123);
    assert_string_equal(r.action, "rerequested");
    assert_null(r.reason);
    jv_free(doc);

    /* Without a PR the external_id is the bare run id; without a job the name has 3 parts. */
    doc = check_run_rerequested("crcr/org/repo/Nightly", "9876543210123");
    r = classify("check_run", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_RERUN_RUN);
    assert_string_equal(r.repo, "org/repo");
    assert_int_equal(r.run_id, 9876543210123LL);
    jv_free(doc);
}

static void test_rerequested_non_crcr_check_run_is_ignored(void **state)
{
    (void)state;
    jv *doc = load("check_run.rerequested.json"); /* the real example: "randscape", id "" */
    webhook_route r = classify("check_run", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_string_equal(r.reason, "not a crcr check run");
    jv_free(doc);

    static const char *const names[] = {"build (ubuntu)", "crcr/org/repo",  "crcr//repo/CI",
                                        "crcr/org//CI",   "crcr/org/repo/", "CRCR/org/repo/CI",
                                        "oot/org/repo/CI"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        doc = check_run_rerequested(names[i], "123:45");
        r = classify("check_run", doc, UPSTREAM);
        assert_int_equal(r.kind, WEBHOOK_IGNORE);
        assert_string_equal(r.reason, "not a crcr check run");
        jv_free(doc);
    }
}

static void test_rerequested_check_run_without_usable_external_id_is_ignored(void **state)
{
    (void)state;
    static const char *const ids[] = {"", "0", "0:45", "-5", "abc", "12a", " 12", ":45", "+7"};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        jv *doc = check_run_rerequested("crcr/org/repo/CI/build", ids[i]);
        webhook_route r = classify("check_run", doc, UPSTREAM);
        if (r.kind != WEBHOOK_IGNORE)
            fail_msg("external_id '%s' was accepted (run_id %lld)", ids[i], (long long)r.run_id);
        assert_string_equal(r.reason, "not a crcr check run");
        jv_free(doc);
    }
    jv *doc = load("check_run.rerequested.json");
    set_str(doc, "check_run", "name", "crcr/org/repo/CI/build");
    set_int(doc, "check_run", "external_id", 123); /* a number, not the string GitHub sends */
    assert_int_equal(classify("check_run", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

static void test_check_run_repo_that_does_not_fit_is_ignored(void **state)
{
    (void)state;
    char name[CRCR_REPO_NAME_MAX + 32];
    memset(name, 'r', sizeof(name));
    memcpy(name, "crcr/o/", 7);
    /* "o/" + repo of CRCR_REPO_NAME_MAX - 2 bytes: one more than the field can hold. */
    size_t end = 7 + CRCR_REPO_NAME_MAX - 2;
    memcpy(name + end, "/CI", 4);
    jv *doc = check_run_rerequested(name, "5");
    assert_int_equal(classify("check_run", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);

    memcpy(name + end - 1, "/CI", 4); /* one byte shorter: fits */
    doc = check_run_rerequested(name, "5");
    webhook_route r = classify("check_run", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_RERUN_RUN);
    assert_int_equal(strlen(r.repo), CRCR_REPO_NAME_MAX - 1);
    jv_free(doc);
}

static void test_check_run_from_foreign_repo_is_ignored(void **state)
{
    (void)state;
    jv *doc = check_run_rerequested("crcr/org/repo/CI/build", "123:45");
    set_str(doc, "repository", "full_name", "org/repo");
    webhook_route r = classify("check_run", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_int_equal(r.run_id, 0);
    jv_free(doc);
}

/* ---- check_suite rerequested ------------------------------------------------------------- */

static void test_rerequested_check_suite_reruns_the_suite(void **state)
{
    (void)state;
    jv *doc = load("check_suite.rerequested.json");
    webhook_route r = classify("check_suite", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_RERUN_SUITE);
    assert_int_equal(r.suite_id, 118578147);
    assert_null(r.reason);
    jv_free(doc);

    doc = load("check_suite.rerequested.json");
    set_int(doc, "check_suite", "id", 5000000000LL); /* ids pass 2^32 */
    assert_int_equal(classify("check_suite", doc, UPSTREAM).suite_id, 5000000000LL);
    jv_free(doc);
}

static void test_check_suite_without_id_is_ignored(void **state)
{
    (void)state;
    jv *doc =
        parse("{\"action\":\"rerequested\",\"repository\":{\"full_name\":\"pytorch/pytorch\"},"
              "\"check_suite\":{\"head_sha\":\"abc\"}}");
    webhook_route r = classify("check_suite", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_string_equal(r.reason, "missing check_suite id");
    jv_free(doc);

    doc = load("check_suite.rerequested.json");
    set_str(doc, "check_suite", "id", "118578147"); /* a string is not an id */
    assert_int_equal(classify("check_suite", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);

    doc = load("check_suite.rerequested.json");
    set_int(doc, "check_suite", "id", 0);
    r = classify("check_suite", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    assert_string_equal(r.reason, "missing check_suite id");
    jv_free(doc);
}

/* Fuzzer finding: an external_id beyond int64 used to saturate to INT64_MAX and be re-run. */
static void test_external_id_overflowing_int64_is_ignored(void **state)
{
    (void)state;
    jv *doc = parse("{\"action\":\"rerequested\",\"repository\":{\"full_name\":"
                    "\"pytorch/pytorch\"},\"check_run\":{\"name\":\"crcr/o/r/CI\","
                    "\"external_id\":\"99999999999999999999:1\"}}");
    webhook_route r;
    webhook_classify("check_run", doc, "pytorch/pytorch", &r);
    assert_int_equal(r.kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

/* §3.13: a body edit may change Depends-On lines; a push to a downstream PR may be a pair's. */
static void test_body_edits_and_downstream_pushes_are_routed_for_depends_on(void **state)
{
    (void)state;
    jv *doc = load("pull_request.opened.json");
    set_str(doc, "", "action", "edited");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE); /* title */
    assert_int_equal(jv_set(doc, "changes", jv_new_obj()), CRCR_OK);
    assert_int_equal(jv_set(jv_get(doc, "changes"), "body", jv_new_obj()), CRCR_OK);
    set_str(doc, "changes.body", "from", "Depends-On: o/r#1");
    webhook_route r = classify("pull_request", doc, UPSTREAM);
    assert_int_equal(r.kind, WEBHOOK_EDIT);
    assert_string_equal(r.action, "edited");
    set_str(doc, "repository", "full_name", "org/downstream"); /* a downstream PR's edit */
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);

    doc = load("pull_request.synchronize.json");
    set_str(doc, "repository", "full_name", "org/downstream");
    assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_PAIR_PUSH);
    static const char *const others[] = {"opened", "closed", "edited", "labeled"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        set_str(doc, "", "action", others[i]);
        assert_int_equal(classify("pull_request", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    }
    jv_free(doc);
    doc = load("push.json");
    set_str(doc, "repository", "full_name", "org/downstream");
    assert_int_equal(classify("push", doc, UPSTREAM).kind, WEBHOOK_IGNORE);
    jv_free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_external_id_overflowing_int64_is_ignored),
        cmocka_unit_test(test_push_from_upstream_dispatches),
        cmocka_unit_test(test_pull_request_lifecycle_actions_dispatch),
        cmocka_unit_test(test_upstream_repo_matches_ignoring_case),
        cmocka_unit_test(test_event_from_foreign_repo_is_ignored),
        cmocka_unit_test(test_body_edits_and_downstream_pushes_are_routed_for_depends_on),
        cmocka_unit_test(test_missing_or_non_string_repository_is_ignored),
        cmocka_unit_test(test_other_pull_request_actions_are_ignored),
        cmocka_unit_test(test_events_the_router_does_not_handle_are_ignored),
        cmocka_unit_test(test_ciflow_crcr_label_routes_to_device),
        cmocka_unit_test(test_labeled_with_other_label_is_ignored),
        cmocka_unit_test(test_ciflow_crcr_label_with_empty_device_is_ignored),
        cmocka_unit_test(test_label_at_the_label_limit_is_ignored),
        cmocka_unit_test(test_label_event_without_label_object_is_ignored),
        cmocka_unit_test(test_rerequested_crcr_check_run_reruns_the_downstream_run),
        cmocka_unit_test(test_rerequested_non_crcr_check_run_is_ignored),
        cmocka_unit_test(test_rerequested_check_run_without_usable_external_id_is_ignored),
        cmocka_unit_test(test_check_run_repo_that_does_not_fit_is_ignored),
        cmocka_unit_test(test_check_run_from_foreign_repo_is_ignored),
        cmocka_unit_test(test_rerequested_check_suite_reruns_the_suite),
        cmocka_unit_test(test_check_suite_without_id_is_ignored),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (size_t i = 0; i < g_n_selected; i++)
        jv_free(g_selected[i]);
    return rc;
}
