/*
 * test_run_effects.c - what a run transition causes (src/relay/run_effects.c), over a real SQLite
 * store in a temporary directory: the upstream HUD wire format byte for byte, the jobs
 * run_effects_build makes (a check run only when one is given, a HUD forward only when
 * HUD_API_URL is set) and that store_run_apply stores them, and run_effects_check_wanted deciding
 * from the relay's own records only: L4 yes, L2 no, L3 when the dispatched webhook carried the
 * device's ciflow/crcr label or the sha has a recent wanted mark.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "allowlist.h"
#include "clock.h"
#include "json.h"
#include "run_effects.h"
#include "unit_support.h"

#define SHA "0123456789abcdef0123456789abcdef01234567"
#define OTHER_SHA "fedcba9876543210fedcba9876543210fedcba98"
#define NPU "example-org/npu-ci"
#define GPU "example-org/gpu-ci"
#define L2_REPO "example-org/two"
#define L4_REPO "example-org/four"

static const char ALLOWLIST[] = "L1:\n"
                                "  - example-org/one\n"
                                "L2:\n"
                                "  - example-org/two\n"
                                "L3:\n"
                                "  npu:\n"
                                "    example-org/npu-ci: [alice]\n"
                                "  gpu:\n"
                                "    example-org/gpu-ci: [bob]\n"
                                "L4:\n"
                                "  - example-org/four: [carol]\n";

/* A pull_request webhook whose PR carries `labels` (a JSON array of label objects) and whose
 * other fields name `extra` labels where a labels reader must not look. */
#define PR_PAYLOAD(labels, extra)                                                                  \
    "{\"action\":\"labeled\",\"number\":42," extra "\"pull_request\":{\"number\":42,"              \
    "\"head\":{\"sha\":\"" SHA "\"},\"labels\":" labels "}}"

typedef struct fixture {
    ut_dir dir;
    store *st;
    allowlist *al;
    crcr_config cfg;
    run_effects_env env;
} fixture;

static void load_config(fixture *fx, bool hud)
{
    config_free(&fx->cfg);
    const char *env[] = {"UPSTREAM_REPO",
                         "upstream-org/upstream",
                         "CRCR_STATUS_TTL",
                         "3600",
                         hud ? "HUD_API_URL" : NULL,
                         "https://hud.example.com/api/crcr",
                         NULL};
    ut_config(&fx->cfg, env);
    fx->env = (run_effects_env){.st = fx->st, .cfg = &fx->cfg};
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    ut_dir_make(&fx->dir);
    fx->st = ut_store_open(&fx->dir);
    buf_t errors;
    buf_init(&errors, 4096);
    if (allowlist_parse(ALLOWLIST, strlen(ALLOWLIST), &fx->al, &errors) != CRCR_OK)
        fail_msg("allowlist: %s", buf_cstr(&errors));
    buf_free(&errors);
    load_config(fx, false);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    allowlist_free(fx->al);
    config_free(&fx->cfg);
    store_close(fx->st);
    ut_dir_remove(&fx->dir);
    free(fx);
    return 0;
}

static bool wanted(fixture *fx, const char *repo, const char *delivery, const char *sha)
{
    return run_effects_check_wanted(&fx->env, fx->al, repo, allowlist_level(fx->al, repo), delivery,
                                    sha, NULL);
}

/* ---- the HUD wire format ---- */

static const char *hud_body(buf_t *b, const char *repo, crcr_level level, int64_t queue_ms,
                            int64_t exec_ms, const char *payload)
{
    buf_reset(b);
    assert_int_equal(
        run_effects_hud_body(b, repo, level, queue_ms, exec_ms, payload, strlen(payload)), CRCR_OK);
    return buf_cstr(b);
}

static void hud_body_is_upstreams_wire_format_exactly(void **state)
{
    buf_t b;
    buf_init(&b, 1 << 20);
    /* The callback payload is copied verbatim: spacing, key order and escapes stay. */
    const char *payload =
        "{ \"b\":1,\"a\" : \"\\u00e9\\/x\" ,\"workflow\":{\"status\":\"completed\"}}";
    assert_string_equal(
        hud_body(&b, NPU, CRCR_LEVEL_L3, 1500, 62000, payload),
        "{\"trusted\":{\"ci_metrics\":{\"queue_time\":1.500,\"execution_time\":62.000},"
        "\"verified_repo\":\"example-org/npu-ci\",\"downstream_repo_level\":\"L3\"},"
        "\"untrusted\":{\"callback_payload\":{ \"b\":1,\"a\" : \"\\u00e9\\/x\" ,"
        "\"workflow\":{\"status\":\"completed\"}}}}");
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(doc);
    jv_free(doc);
    buf_free(&b);
}

/* A body that does not fit is an error at whatever byte it stops, never a cut body that the
 * outbox would send ("..."callback_payload":}}"). */
static void hud_body_that_does_not_fit_is_an_error(void **state)
{
    const char *payload = "{\"workflow\":{\"status\":\"completed\",\"conclusion\":\"success\"}}";
    for (size_t cap = 8; cap < 260; cap++) {
        buf_t b;
        buf_init(&b, cap);
        crcr_err e =
            run_effects_hud_body(&b, NPU, CRCR_LEVEL_L3, 1500, -1, payload, strlen(payload));
        if (e == CRCR_OK)
            assert_non_null(strstr(buf_cstr(&b), "\"callback_payload\":{\"workflow\""));
        else
            assert_int_equal(e, CRCR_E_TOO_LARGE);
        buf_free(&b);
    }
}

static void hud_metrics_are_seconds_with_three_decimals_or_null(void **state)
{
    static const struct {
        int64_t ms;
        const char *text;
    } cases[] = {{0, "0.000"},          {5, "0.005"}, {999, "0.999"},         {1000, "1.000"},
                 {1234567, "1234.567"}, {-1, "null"}, {86400001, "86400.001"}};
    buf_t b;
    buf_init(&b, 1 << 20);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char want[256];
        snprintf(want, sizeof(want),
                 "{\"trusted\":{\"ci_metrics\":{\"queue_time\":%s,\"execution_time\":null},"
                 "\"verified_repo\":\"o/r\",\"downstream_repo_level\":\"L4\"},"
                 "\"untrusted\":{\"callback_payload\":{}}}",
                 cases[i].text);
        assert_string_equal(hud_body(&b, "o/r", CRCR_LEVEL_L4, cases[i].ms, -1, "{}"), want);
    }
    buf_free(&b);
}

static void hud_body_quotes_the_repo_and_names_every_level(void **state)
{
    buf_t b;
    buf_init(&b, 1 << 20);
    hud_body(&b, "o/\"r\\", CRCR_LEVEL_L2, -1, -1, "{}");
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(doc);
    assert_string_equal(jv_path_str(doc, "trusted.verified_repo"), "o/\"r\\");
    assert_string_equal(jv_path_str(doc, "trusted.downstream_repo_level"), "L2");
    assert_true(jv_is_null(jv_path(doc, "trusted.ci_metrics.queue_time")));
    assert_true(jv_is_null(jv_path(doc, "trusted.ci_metrics.execution_time")));
    jv_free(doc);
    assert_non_null(strstr(hud_body(&b, "o/r", CRCR_LEVEL_L1, -1, -1, "{}"),
                           "\"downstream_repo_level\":\"L1\""));
    assert_non_null(strstr(hud_body(&b, "o/r", CRCR_LEVEL_NONE, -1, -1, "{}"),
                           "\"downstream_repo_level\":\"none\""));
    buf_free(&b);
}

/* ---- run_effects_build ---- */

static const store_run_key KEY = {.delivery_id = "del-1",
                                  .repo = NPU,
                                  .run_id = "99999",
                                  .run_attempt = 2,
                                  .workflow_name = "CI",
                                  .job_name = "build"};

static checks_run a_check(void)
{
    return (checks_run){.repo = NPU,
                        .workflow_name = "CI",
                        .job_name = "build",
                        .head_sha = SHA,
                        .status = "completed",
                        .conclusion = "failure",
                        .run_id = "99999",
                        .pr_number = 42};
}

typedef struct built {
    run_effect_bodies bodies;
    store_new_job jobs[4];
    size_t n;
    int64_t before, after;
} built;

static void build(fixture *fx, built *b, const checks_run *check, size_t max)
{
    static const char payload[] = "{\"workflow\":{\"status\":\"completed\"}}";
    run_effect_bodies_init(&b->bodies, sizeof(payload));
    memset(b->jobs, 0, sizeof(b->jobs));
    b->n = 99;
    b->before = clock_now_ms();
    assert_int_equal(run_effects_build(&fx->env, check, &KEY, CRCR_LEVEL_L3, 1500, 62000, payload,
                                       strlen(payload), &b->bodies, b->jobs, max, &b->n),
                     CRCR_OK);
    b->after = clock_now_ms();
}

static void nothing_is_built_without_a_check_and_without_hud(void **state)
{
    fixture *fx = *state;
    built b;
    build(fx, &b, NULL, 4);
    assert_int_equal(b.n, 0);
    run_effect_bodies_free(&b.bodies);
}

static void a_check_run_job_only_when_a_check_is_given(void **state)
{
    fixture *fx = *state;
    checks_run c = a_check();
    built b;
    build(fx, &b, &c, 4);
    assert_int_equal(b.n, 1);
    const store_new_job *j = &b.jobs[0];
    assert_string_equal(j->kind, "check_run");
    assert_string_equal(j->target, "upstream-org/upstream"); /* UPSTREAM_REPO */
    assert_string_equal(j->seq_key, "check:" SHA ":crcr/example-org/npu-ci/CI/build");
    assert_true(j->due_at >= b.before && j->due_at <= b.after); /* due at once */
    buf_t want;
    buf_init(&want, 64 * 1024);
    assert_int_equal(checks_body(&c, &want), CRCR_OK);
    assert_int_equal(j->body_len, want.len);
    assert_memory_equal(j->body, want.data, want.len);
    buf_free(&want);
    run_effect_bodies_free(&b.bodies);
}

static void a_hud_forward_only_when_hud_api_url_is_set(void **state)
{
    fixture *fx = *state;
    load_config(fx, true);
    built b;
    build(fx, &b, NULL, 4);
    assert_int_equal(b.n, 1);
    const store_new_job *j = &b.jobs[0];
    assert_string_equal(j->kind, "hud_forward");
    assert_string_equal(j->target, "hud");
    assert_string_equal(j->seq_key, "hud:" NPU ":del-1:99999:2:CI:build");
    assert_true(j->due_at >= b.before && j->due_at <= b.after);
    const char *want = "{\"trusted\":{\"ci_metrics\":{\"queue_time\":1.500,\"execution_time\":"
                       "62.000},\"verified_repo\":\"example-org/npu-ci\",\"downstream_repo_level\":"
                       "\"L3\"},\"untrusted\":{\"callback_payload\":{\"workflow\":{\"status\":"
                       "\"completed\"}}}}";
    assert_int_equal(j->body_len, strlen(want));
    assert_memory_equal(j->body, want, strlen(want));
    run_effect_bodies_free(&b.bodies);
}

static void both_jobs_check_run_first_and_max_is_respected(void **state)
{
    fixture *fx = *state;
    load_config(fx, true);
    checks_run c = a_check();
    built b;
    build(fx, &b, &c, 4);
    assert_int_equal(b.n, 2);
    assert_string_equal(b.jobs[0].kind, "check_run");
    assert_string_equal(b.jobs[1].kind, "hud_forward");
    run_effect_bodies_free(&b.bodies);
    build(fx, &b, &c, 1);
    assert_int_equal(b.n, 1);
    assert_string_equal(b.jobs[0].kind, "check_run");
    assert_null(b.jobs[1].kind);
    run_effect_bodies_free(&b.bodies);
    build(fx, &b, &c, 0);
    assert_int_equal(b.n, 0);
    run_effect_bodies_free(&b.bodies);
}

/* Effects of a transition the way callback.c builds them. */
typedef struct apply_ctx {
    fixture *fx;
    const checks_run *check;
    const store_run_key *key;
    run_effect_bodies bodies;
    const char *payload;
} apply_ctx;

static crcr_err effects(void *vctx, const store_run_result *res, store_new_job *jobs, size_t max,
                        size_t *n)
{
    apply_ctx *c = vctx;
    return run_effects_build(&c->fx->env, c->check, c->key, CRCR_LEVEL_L3, res->queue_ms,
                             res->exec_ms, c->payload, strlen(c->payload), &c->bodies, jobs, max,
                             n);
}

static void transition_effects_are_stored_with_the_metrics_of_the_transition(void **state)
{
    fixture *fx = *state;
    load_config(fx, true);
    const char *targets[] = {NPU, NULL};
    int64_t t0 = clock_now_ms() - 100000;
    ut_ingest(fx->st, "del-1", 42, SHA, "{}", targets, t0);
    checks_run c = a_check();
    c.status = "in_progress";
    apply_ctx ctx = {.fx = fx, .check = &c, .payload = "{\"n\":1}"};
    store_run_update u =
        ut_run_update("del-1", NPU, 99999, "build", "in_progress", NULL, 3, 42, SHA, t0 + 1500);
    u.key.run_attempt = 2;
    ctx.key = &u.key;
    store_run_result res;
    char why[128] = "";
    run_effect_bodies_init(&ctx.bodies, 64);
    assert_int_equal(store_run_apply(fx->st, &u, effects, &ctx, &res, why, sizeof(why)), CRCR_OK);
    run_effect_bodies_free(&ctx.bodies);
    /* completed 62 s later: the forward carries the execution time (the queue time went with
     * in_progress) */
    c.status = "completed";
    ctx.payload = "{\"n\":2}";
    u = ut_run_update("del-1", NPU, 99999, "build", "completed", "failure", 3, 42, SHA, t0 + 63500);
    u.key.run_attempt = 2;
    ctx.key = &u.key;
    run_effect_bodies_init(&ctx.bodies, 64);
    assert_int_equal(store_run_apply(fx->st, &u, effects, &ctx, &res, why, sizeof(why)), CRCR_OK);
    run_effect_bodies_free(&ctx.bodies);

    ut_rows l;
    ut_rows_of(fx->st, "del-1", &l);
    assert_int_equal(l.n, 5); /* the dispatch, then two effects per transition */
    assert_string_equal(l.kind[0], "dispatch");
    assert_string_equal(l.kind[1], "check_run");
    assert_string_equal(l.target[1], "upstream-org/upstream");
    assert_non_null(strstr(l.body[1], "\"status\":\"in_progress\""));
    assert_string_equal(l.kind[2], "hud_forward");
    assert_non_null(strstr(l.body[2], "\"queue_time\":1.500,\"execution_time\":null"));
    assert_non_null(strstr(l.body[2], "\"callback_payload\":{\"n\":1}}}"));
    assert_string_equal(l.kind[3], "check_run");
    assert_non_null(strstr(l.body[3], "\"conclusion\":\"failure\""));
    assert_string_equal(l.kind[4], "hud_forward");
    assert_non_null(strstr(l.body[4], "\"queue_time\":null,\"execution_time\":62.000"));
    assert_non_null(strstr(l.body[4], "\"callback_payload\":{\"n\":2}}}"));
}

/* ---- run_effects_check_wanted ---- */

static void l4_always_wants_a_check_run_with_a_head_sha(void **state)
{
    fixture *fx = *state;
    /* no delivery, no mark: the level alone decides */
    assert_true(wanted(fx, L4_REPO, "unknown-delivery", SHA));
    assert_false(wanted(fx, L4_REPO, "unknown-delivery", ""));
    assert_false(wanted(fx, L4_REPO, "unknown-delivery", NULL));
}

static void l2_and_below_never_want_one_whatever_the_records_say(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {L2_REPO, "example-org/one", NULL};
    ut_ingest(fx->st, "del-l2", 42, SHA,
              PR_PAYLOAD("[{\"name\":\"ciflow/crcr/npu\"},{\"name\":\"ciflow/crcr/two\"}]", ""),
              targets, clock_now_ms());
    assert_int_equal(store_wanted_set(fx->st, SHA, L2_REPO, clock_now_ms()), CRCR_OK);
    assert_false(wanted(fx, L2_REPO, "del-l2", SHA));
    assert_false(wanted(fx, "example-org/one", "del-l2", SHA));
    assert_false(wanted(fx, "not-listed/repo", "del-l2", SHA));
}

static void l3_wants_one_when_the_dispatched_webhook_carried_the_device_label(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {NPU, GPU, NULL};
    ut_ingest(fx->st, "del-label", 42, SHA,
              PR_PAYLOAD("[{\"name\":\"ciflow/trunk\"},{\"name\":\"ciflow/crcr/npu\"}]", ""),
              targets, clock_now_ms());
    assert_true(wanted(fx, NPU, "del-label", SHA));
    assert_true(wanted(fx, "EXAMPLE-ORG/NPU-CI", "del-label", SHA)); /* repo in any case */
    /* another device's label does not count for gpu-ci */
    assert_false(wanted(fx, GPU, "del-label", SHA));
    /* without a head sha nothing is wanted */
    assert_false(wanted(fx, NPU, "del-label", ""));
}

static void l3_label_counts_only_on_a_delivery_dispatched_to_the_repo(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {GPU, NULL}; /* npu-ci was never sent this delivery */
    ut_ingest(fx->st, "del-gpu-only", 42, SHA, PR_PAYLOAD("[{\"name\":\"ciflow/crcr/npu\"}]", ""),
              targets, clock_now_ms());
    assert_false(wanted(fx, NPU, "del-gpu-only", SHA));
    assert_false(wanted(fx, NPU, "no-such-delivery", SHA));
}

static void l3_label_is_read_from_pull_request_labels_only(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {NPU, NULL};
    /* The label named by a labeled event, issue labels, top-level labels: none of them is the
     * PR's label set. */
    ut_ingest(fx->st, "del-elsewhere", 42, SHA,
              PR_PAYLOAD("[{\"name\":\"ciflow/trunk\"}]",
                         "\"label\":{\"name\":\"ciflow/crcr/npu\"},"
                         "\"labels\":[{\"name\":\"ciflow/crcr/npu\"}],"
                         "\"issue\":{\"labels\":[{\"name\":\"ciflow/crcr/npu\"}]},"),
              targets, clock_now_ms());
    assert_false(wanted(fx, NPU, "del-elsewhere", SHA));
    /* label names must be exact */
    ut_ingest(fx->st, "del-near", 42, SHA,
              PR_PAYLOAD("[{\"name\":\"ciflow/crcr/npu2\"},{\"name\":\"ciflow/crcr/NPU \"},"
                         "{\"name\":\"ciflow/crcr\"},\"ciflow/crcr/npu\",{\"id\":1}]",
                         ""),
              targets, clock_now_ms());
    assert_false(wanted(fx, NPU, "del-near", SHA));
    /* a payload that is not JSON is no label */
    ut_ingest(fx->st, "del-garbage", 42, SHA, "ciflow/crcr/npu", targets, clock_now_ms());
    assert_false(wanted(fx, NPU, "del-garbage", SHA));
}

static void l3_wants_one_when_the_sha_has_a_recent_wanted_mark(void **state)
{
    fixture *fx = *state;
    const char *targets[] = {NPU, GPU, NULL};
    ut_ingest(fx->st, "del-stale", 42, SHA, PR_PAYLOAD("[]", ""), targets, clock_now_ms());
    assert_false(wanted(fx, NPU, "del-stale", SHA));
    /* a mark older than CRCR_STATUS_TTL (3600 s here) does not count */
    assert_int_equal(store_wanted_set(fx->st, SHA, NPU, clock_now_ms() - 3600 * 1000 - 60000),
                     CRCR_OK);
    assert_false(wanted(fx, NPU, "del-stale", SHA));
    /* another sha's mark or another repo's mark does not count either */
    assert_int_equal(store_wanted_set(fx->st, OTHER_SHA, NPU, clock_now_ms()), CRCR_OK);
    assert_false(wanted(fx, NPU, "del-stale", SHA));
    /* a fresh mark for the sha and the repo does, on any delivery of the sha */
    assert_int_equal(store_wanted_set(fx->st, SHA, NPU, clock_now_ms() - 1000), CRCR_OK);
    assert_true(wanted(fx, NPU, "del-stale", SHA));
    assert_true(wanted(fx, NPU, "no-such-delivery", SHA));
    assert_false(wanted(fx, GPU, "del-stale", SHA));
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hud_body_is_upstreams_wire_format_exactly),
        cmocka_unit_test(hud_metrics_are_seconds_with_three_decimals_or_null),
        cmocka_unit_test(hud_body_that_does_not_fit_is_an_error),
        cmocka_unit_test(hud_body_quotes_the_repo_and_names_every_level),
        T(nothing_is_built_without_a_check_and_without_hud),
        T(a_check_run_job_only_when_a_check_is_given),
        T(a_hud_forward_only_when_hud_api_url_is_set),
        T(both_jobs_check_run_first_and_max_is_respected),
        T(transition_effects_are_stored_with_the_metrics_of_the_transition),
        T(l4_always_wants_a_check_run_with_a_head_sha),
        T(l2_and_below_never_want_one_whatever_the_records_say),
        T(l3_wants_one_when_the_dispatched_webhook_carried_the_device_label),
        T(l3_label_counts_only_on_a_delivery_dispatched_to_the_repo),
        T(l3_label_is_read_from_pull_request_labels_only),
        T(l3_wants_one_when_the_sha_has_a_recent_wanted_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
