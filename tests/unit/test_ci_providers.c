/*
 * test_ci_providers.c - the CI providers map (src/relay/ci_providers.c): parsing ci_providers.yml
 * in upstream's two forms with crcr's limits, the Buildkite check (upstream reference §3.10 8-24),
 * the resolver over a file source (reload, last good map kept, 503 before any map).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_providers.h"
#include "clock.h"
#include "crcr_limits.h"
#include "log.h"

#define ORG "org-uuid-123"
#define PIPE "pipe-uuid-456"

/* Parses `yaml`; fails the test on an error. Caller frees. */
static ci_providers *parse_ok(const char *yaml)
{
    buf_t errors;
    buf_init(&errors, 64 * 1024);
    ci_providers *m = NULL;
    crcr_err rc = ci_providers_parse(yaml, strlen(yaml), &m, &errors);
    if (rc != CRCR_OK)
        fail_msg("parse failed (%d): %s", (int)rc, buf_cstr(&errors));
    assert_non_null(m);
    buf_free(&errors);
    return m;
}

/* Expects `rc` and an error text containing `want`. */
static void parse_bad(const char *yaml, size_t len, crcr_err rc, const char *want)
{
    buf_t errors;
    buf_init(&errors, 64 * 1024);
    ci_providers *m = (ci_providers *)1;
    crcr_err got = ci_providers_parse(yaml, len, &m, &errors);
    if (got != rc || !strstr(buf_cstr(&errors), want))
        fail_msg("expected %d with '%s', got %d: %s", (int)rc, want, (int)got, buf_cstr(&errors));
    assert_null(m);
    buf_free(&errors);
}

/* The claims of a Buildkite token (JSON text plus `extra`, ",..."). Caller frees. */
static jv *claims(const char *org, const char *pipe, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"iss\":\"https://agent.buildkite.com\",\"aud\":\"pytorch-cross-repo-ci-relay\","
             "\"sub\":\"organization:acme:pipeline:ci:ref:refs/heads/main\"%s%s%s%s%s%s%s}",
             org ? ",\"organization_id\":\"" : "", org ? org : "", org ? "\"" : "",
             pipe ? ",\"pipeline_id\":\"" : "", pipe ? pipe : "", pipe ? "\"" : "", extra);
    jv *c = jv_parse(text, strlen(text), NULL, 0);
    assert_non_null(c);
    return c;
}

/* Runs the Buildkite check; returns the status, the reason in `reason`, the repo in `repo`. */
static int check(const ci_providers *m, const jv *c, char *repo, char *reason, size_t reasonsz)
{
    oidc_identity id;
    memset(&id, 0, sizeof(id));
    int st = ci_providers_check_buildkite(m, c, &id, reason, reasonsz);
    snprintf(repo, 141, "%s", id.repository);
    if (st == 0) {
        assert_non_null(strchr(id.pipeline, '/'));
    } else {
        assert_string_equal(id.repository, "");
        assert_true(reason[0] != '\0');
    }
    return st;
}

/* The check's status for a token of <org>/<pipe> with `extra` claims; the reason in
 * reason[0..256). */
static int status_of(const ci_providers *m, const char *org, const char *pipe, const char *extra,
                     char *reason)
{
    jv *c = claims(org, pipe, extra);
    char repo[141];
    int st = check(m, c, repo, reason, 256);
    jv_free(c);
    return st;
}

static const char SIMPLE[] = "providers:\n"
                             "  buildkite:\n"
                             "    repo_map:\n"
                             "      \"" ORG "/" PIPE "\": myorg/myrepo\n";

/* ---------------------------------------------------------------------------------------- */
/* §3.10 8-15: the check. */

static void test_3_10_8_valid_token_maps_to_the_repository(void **state)
{
    ci_providers *m = parse_ok(SIMPLE);
    jv *c = claims(ORG, PIPE, "");
    char repo[141], reason[256];
    assert_int_equal(check(m, c, repo, reason, sizeof(reason)), 0);
    assert_string_equal(repo, "myorg/myrepo");
    assert_string_equal(ci_providers_buildkite_repo(m, ORG, PIPE), "myorg/myrepo");
    jv_free(c);
    ci_providers_free(m);
}

static void test_3_10_9_unknown_pipeline_is_403_not_registered(void **state)
{
    ci_providers *m = parse_ok(SIMPLE);
    char reason[256];
    assert_int_equal(status_of(m, ORG, "other-pipe", "", reason), 403);
    assert_string_equal(reason,
                        "Buildkite pipeline " ORG "/other-pipe is not registered with CRCR");
    /* A "repository" claim in a Buildkite token changes nothing. */
    assert_int_equal(status_of(m, "other-org", PIPE, ",\"repository\":\"myorg/myrepo\"", reason),
                     403);
    /* No map at all (none configured): nothing is registered. */
    assert_int_equal(status_of(NULL, ORG, PIPE, "", reason), 403);
    ci_providers_free(m);
}

static void test_3_10_10_11_missing_ids_are_401(void **state)
{
    ci_providers *m = parse_ok(SIMPLE);
    char reason[256];
    assert_int_equal(status_of(m, NULL, PIPE, "", reason), 401);
    assert_string_equal(reason, "Buildkite OIDC token missing 'organization_id' claim");
    assert_int_equal(status_of(m, ORG, NULL, "", reason), 401);
    assert_string_equal(reason, "Buildkite OIDC token missing 'pipeline_id' claim");
    /* Not strings, empty, with a '/', or over-long: as missing. */
    static const char *bad[] = {",\"organization_id\":42", ",\"organization_id\":\"\"",
                                ",\"organization_id\":\"a/b\"", ",\"organization_id\":null"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(status_of(m, NULL, PIPE, bad[i], reason), 401);
    char longid[CI_PROVIDERS_ID_MAX + 2];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(status_of(m, longid, PIPE, "", reason), 401);
    ci_providers_free(m);
}

static const char CONSTRAINED[] = "providers:\n"
                                  "  buildkite:\n"
                                  "    repo_map:\n"
                                  "      " ORG "/" PIPE ":\n"
                                  "        repo: myorg/myrepo\n"
                                  "        required_claims:\n"
                                  "          build_branch: [main, nightly]\n"
                                  "      " ORG "/clustered:\n"
                                  "        repo: myorg/other\n"
                                  "        required_claims:\n"
                                  "          cluster_id: [cluster-abc]\n"
                                  "          build_number: ['7']\n";

static void test_3_10_13_14_required_claims(void **state)
{
    ci_providers *m = parse_ok(CONSTRAINED);
    char repo[141], reason[256];
    jv *c = claims(ORG, PIPE, ",\"build_branch\":\"main\"");
    assert_int_equal(check(m, c, repo, reason, sizeof(reason)), 0);
    assert_string_equal(repo, "myorg/myrepo");
    jv_free(c);
    assert_int_equal(status_of(m, ORG, PIPE, ",\"build_branch\":\"nightly\"", reason), 0);
    /* A fork's pull request build. */
    assert_int_equal(status_of(m, ORG, PIPE, ",\"build_branch\":\"fork-pr-branch\"", reason), 403);
    assert_string_equal(reason, "Buildkite claim 'build_branch' value 'fork-pr-branch' not in "
                                "allowed set for this pipeline");
    /* Compared exactly. */
    assert_int_equal(status_of(m, ORG, PIPE, ",\"build_branch\":\"Main\"", reason), 403);
    assert_int_equal(status_of(m, ORG, PIPE, ",\"build_branch\":{\"x\":1}", reason), 403);
    assert_non_null(strstr(reason, "'build_branch'"));
    ci_providers_free(m);
}

static void test_3_10_15_absent_required_claim_is_403(void **state)
{
    ci_providers *m = parse_ok(CONSTRAINED);
    char repo[141], reason[256];
    assert_int_equal(status_of(m, ORG, "clustered", ",\"build_number\":7", reason), 403);
    assert_non_null(strstr(reason, "cluster_id"));
    /* An integer claim compares in decimal, as upstream's str(). */
    jv *c = claims(ORG, "clustered", ",\"build_number\":7,\"cluster_id\":\"cluster-abc\"");
    assert_int_equal(check(m, c, repo, reason, sizeof(reason)), 0);
    assert_string_equal(repo, "myorg/other");
    jv_free(c);
    ci_providers_free(m);
}

static void test_reasons_show_a_bounded_printable_value(void **state)
{
    ci_providers *m = parse_ok(CONSTRAINED);
    char reason[256];
    char extra[1200] = ",\"build_branch\":\"x'\\n";
    size_t n = strlen(extra);
    memset(extra + n, 'y', 1000);
    memcpy(extra + n + 1000, "\"", 2);
    assert_int_equal(status_of(m, ORG, PIPE, extra, reason), 403);
    assert_null(strchr(reason, '\n'));
    assert_true(strlen(reason) < 250);
    ci_providers_free(m);
}

/* ---------------------------------------------------------------------------------------- */
/* §3.10 16-24: loading. */

static void test_3_10_16_17_legacy_flat_section(void **state)
{
    ci_providers *m = parse_ok("buildkite:\n"
                               "  a/b: o1/r1\n"
                               "  c/d:\n"
                               "    repo: o2/r2\n"
                               "    required_claims:\n"
                               "      build_branch: [main, release]\n"
                               "      cluster_id: cluster-uuid\n");
    assert_int_equal(ci_providers_count(m), 2);
    assert_string_equal(ci_providers_buildkite_repo(m, "a", "b"), "o1/r1");
    assert_string_equal(ci_providers_buildkite_repo(m, "c", "d"), "o2/r2");
    char reason[256];
    /* A scalar cluster_id is a one-value list. */
    assert_int_equal(status_of(m, "c", "d",
                               ",\"build_branch\":\"release\",\"cluster_id\":\"cluster-uuid\"",
                               reason),
                     0);
    assert_int_equal(
        status_of(m, "c", "d", ",\"build_branch\":\"release\",\"cluster_id\":\"cluster\"", reason),
        403);
    ci_providers_free(m);
}

static void test_3_10_18_19_20_providers_form_and_ignored_keys(void **state)
{
    ci_providers *m = parse_ok("providers:\n"
                               "  buildkite:\n"
                               "    issuer: https://evil.example\n"
                               "    jwks_uri: https://evil.example/jwks\n"
                               "    repo_map:\n"
                               "      a/b: o1/r1\n"
                               "      c/d: {repo: o2/r2, required_claims: {build_branch: main}}\n"
                               "  gitlab: {whatever: 1}\n");
    assert_int_equal(ci_providers_count(m), 2);
    assert_string_equal(ci_providers_buildkite_repo(m, "c", "d"), "o2/r2");
    assert_null(ci_providers_buildkite_repo(m, "a", "c"));
    ci_providers_free(m);
}

static void test_3_10_21_22_empty_and_no_section_are_an_empty_map(void **state)
{
    static const char *empty[] = {"{}",
                                  "",
                                  "# only a comment\n",
                                  "other: 1\n",
                                  "providers:\n",
                                  "providers: {buildkite: {issuer: x}}\n",
                                  "buildkite:\n"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        ci_providers *m = parse_ok(empty[i]);
        assert_int_equal(ci_providers_count(m), 0);
        ci_providers_free(m);
    }
}

static void test_3_10_23_keys_without_slash_are_skipped(void **state)
{
    ci_providers *m = parse_ok("buildkite:\n"
                               "  issuer: https://agent.buildkite.com\n"
                               "  noslash: o/r\n"
                               "  a/b: o1/r1\n");
    assert_int_equal(ci_providers_count(m), 1);
    assert_int_equal(ci_providers_skipped(m), 2);
    assert_string_equal(ci_providers_buildkite_repo(m, "a", "b"), "o1/r1");
    ci_providers_free(m);
}

static void test_3_10_24_legacy_used_when_providers_has_no_repo_map(void **state)
{
    ci_providers *m = parse_ok("providers:\n"
                               "  buildkite:\n"
                               "    issuer: x\n"
                               "buildkite:\n"
                               "  a/b: o1/r1\n");
    assert_string_equal(ci_providers_buildkite_repo(m, "a", "b"), "o1/r1");
    ci_providers_free(m);
    /* With a repo_map the legacy section is not read. */
    m = parse_ok("providers: {buildkite: {repo_map: {x/y: o2/r2}}}\n"
                 "buildkite:\n"
                 "  a/b: o1/r1\n");
    assert_null(ci_providers_buildkite_repo(m, "a", "b"));
    assert_string_equal(ci_providers_buildkite_repo(m, "x", "y"), "o2/r2");
    ci_providers_free(m);
}

/* ---------------------------------------------------------------------------------------- */
/* crcr's rules and limits. */

static void test_strict_rules_refuse_the_whole_file(void **state)
{
#define BAD(y, want) parse_bad(y, strlen(y), CRCR_E_INVALID, want)
    BAD("buildkite:\n  a/b: not-a-repo\n", "expected owner/repo");
    BAD("buildkite:\n  a/b: {repo: o/r, required_claim: {build_branch: main}}\n",
        "unknown key 'required_claim'");
    BAD("buildkite:\n  a/b: {required_claims: {build_branch: main}}\n", "under repo");
    BAD("buildkite:\n  a/b: {repo: o/r, required_claims: [main]}\n", "expected a mapping");
    BAD("buildkite:\n  a/b: {repo: o/r, required_claims: {build_branch: [main, [x]]}}\n",
        "value 2 is not a string");
    BAD("buildkite:\n  a/b: {repo: o/r, required_claims: {build_branch: {x: 1}}}\n",
        "expected a list of values");
    BAD("buildkite:\n  /b: o/r\n", "expected '<organization_id>/<pipeline_id>'");
    BAD("buildkite:\n  a/b/c: o/r\n", "expected '<organization_id>/<pipeline_id>'");
    BAD("buildkite:\n  a b/c: o/r\n", "expected '<organization_id>/<pipeline_id>'");
    BAD("buildkite: [a/b]\n", "buildkite: expected a mapping");
    BAD("providers: [x]\n", "providers: expected a mapping");
    BAD("providers: {buildkite: 3}\n", "providers.buildkite: expected a mapping");
    BAD("- a\n", "expected a mapping");
    /* The allowlist's YAML rules. */
    BAD("buildkite:\n  a/b: &r o/r\n  c/d: *r\n", "anchors and aliases are not allowed");
    BAD("buildkite:\n  a/b: o/r\n  a/b: o/s\n", "duplicate key 'a/b'");
    BAD("buildkite:\n  a/b: o/r\n---\nx: 1\n", "only one YAML document");
    BAD("buildkite: {a/b: o/r\n", "YAML syntax error");
#undef BAD
    const char deep[] = "a: [[[[[[[[[[x]]]]]]]]]]\n";
    parse_bad(deep, strlen(deep), CRCR_E_TOO_LARGE, "nesting deeper than 8 levels");
}

static void test_limits(void **state)
{
    buf_t y;
    buf_init(&y, 4 * 1024 * 1024);
    /* Pipelines. */
    buf_puts(&y, "buildkite:\n");
    for (unsigned i = 0; i <= CRCR_CI_PROVIDERS_MAX_PIPELINES; i++)
        buf_printf(&y, "  o/p%u: a/b\n", i);
    parse_bad(y.data, y.len, CRCR_E_TOO_LARGE, "more than 1000 pipelines");
    /* Exactly the limit loads. */
    buf_reset(&y);
    buf_puts(&y, "buildkite:\n");
    for (unsigned i = 0; i < CRCR_CI_PROVIDERS_MAX_PIPELINES; i++)
        buf_printf(&y, "  o/p%u: a/b\n", i);
    ci_providers *m = parse_ok(buf_cstr(&y));
    assert_int_equal(ci_providers_count(m), CRCR_CI_PROVIDERS_MAX_PIPELINES);
    assert_string_equal(ci_providers_buildkite_repo(m, "o", "p999"), "a/b");
    ci_providers_free(m);
    /* Claims per pipeline and values per claim. */
    buf_reset(&y);
    buf_puts(&y, "buildkite:\n  o/p:\n    repo: a/b\n    required_claims:\n");
    for (unsigned i = 0; i <= CI_PROVIDERS_MAX_CLAIMS; i++)
        buf_printf(&y, "      c%u: x\n", i);
    parse_bad(y.data, y.len, CRCR_E_TOO_LARGE, "more than 16 claims");
    buf_reset(&y);
    buf_puts(&y, "buildkite:\n  o/p:\n    repo: a/b\n    required_claims:\n      c: [");
    for (unsigned i = 0; i <= CI_PROVIDERS_MAX_VALUES; i++)
        buf_printf(&y, "%sv%u", i ? ", " : "", i);
    buf_puts(&y, "]\n");
    parse_bad(y.data, y.len, CRCR_E_TOO_LARGE, "more than 64 allowed values");
    /* Size. */
    buf_reset(&y);
    buf_puts(&y, "# ");
    while (y.len <= CRCR_CI_PROVIDERS_MAX_BYTES)
        buf_puts(&y, "padding padding padding padding\n# ");
    parse_bad(y.data, y.len, CRCR_E_TOO_LARGE, "larger than the limit");
    buf_free(&y);
}

/* ---------------------------------------------------------------------------------------- */
/* The resolver over a file source. */

static char g_path[256];

static void write_file(const char *text)
{
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", g_path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, g_path), 0);
}

static int resolve(doc_source *src, const char *extra, char *reason, size_t reasonsz)
{
    jv *c = claims(ORG, PIPE, extra);
    oidc_identity id;
    memset(&id, 0, sizeof(id));
    int st = ci_providers_resolve_buildkite(src, c, &id, reason, reasonsz);
    jv_free(c);
    return st;
}

static void test_source_reload_keeps_the_last_good_map(void **state)
{
    snprintf(g_path, sizeof(g_path), "/tmp/crcr_test_ci_providers_%ld.yml", (long)getpid());
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.ci_providers_file = g_path;
    cfg.allowlist_ttl_s = 900;
    char err[512] = "";
    /* Not configured: no source, no error; the resolver then maps nothing. */
    crcr_config none;
    memset(&none, 0, sizeof(none));
    assert_null(ci_providers_source_new(&none, NULL, err, sizeof(err)));
    assert_string_equal(err, "");
    char reason[256];
    assert_int_equal(resolve(NULL, "", reason, sizeof(reason)), 403);

    doc_source *src = ci_providers_source_new(&cfg, NULL, err, sizeof(err));
    assert_non_null(src);
    /* Configured, nothing loaded yet: 503, the caller retries. */
    assert_int_equal(resolve(src, "", reason, sizeof(reason)), 503);
    write_file(CONSTRAINED);
    assert_int_equal(allowlist_source_load(src, err, sizeof(err)), CRCR_OK);
    assert_int_equal(resolve(src, ",\"build_branch\":\"main\"", reason, sizeof(reason)), 0);
    allowlist_status st;
    allowlist_source_status(src, &st);
    assert_true(st.loaded);
    assert_int_equal(st.repos, 2);
    assert_string_equal(st.origin, "file");

    /* A broken file keeps the map in force and says why. */
    write_file("buildkite:\n  a/b: &x o/r\n");
    allowlist_source_reload(src);
    allowlist_source_tick(src, clock_now_ms());
    allowlist_source_status(src, &st);
    assert_true(st.loaded);
    assert_non_null(strstr(st.last_error, "anchors and aliases"));
    assert_non_null(strstr(st.last_error, g_path));
    assert_int_equal(resolve(src, ",\"build_branch\":\"main\"", reason, sizeof(reason)), 0);

    /* A good change is swapped in at the next reload. */
    write_file("buildkite:\n  x/y: o/r\n");
    allowlist_source_reload(src);
    allowlist_source_tick(src, clock_now_ms());
    allowlist_source_status(src, &st);
    assert_string_equal(st.last_error, "");
    assert_int_equal(st.repos, 1);
    assert_int_equal(resolve(src, ",\"build_branch\":\"main\"", reason, sizeof(reason)), 403);
    /* The source holds a CI providers map, not an allowlist. */
    assert_null(allowlist_source_get(src));
    allowlist_source_free(src);
    unlink(g_path);
}

int main(void)
{
    log_set_level(CRCR_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3_10_8_valid_token_maps_to_the_repository),
        cmocka_unit_test(test_3_10_9_unknown_pipeline_is_403_not_registered),
        cmocka_unit_test(test_3_10_10_11_missing_ids_are_401),
        cmocka_unit_test(test_3_10_13_14_required_claims),
        cmocka_unit_test(test_3_10_15_absent_required_claim_is_403),
        cmocka_unit_test(test_reasons_show_a_bounded_printable_value),
        cmocka_unit_test(test_3_10_16_17_legacy_flat_section),
        cmocka_unit_test(test_3_10_18_19_20_providers_form_and_ignored_keys),
        cmocka_unit_test(test_3_10_21_22_empty_and_no_section_are_an_empty_map),
        cmocka_unit_test(test_3_10_23_keys_without_slash_are_skipped),
        cmocka_unit_test(test_3_10_24_legacy_used_when_providers_has_no_repo_map),
        cmocka_unit_test(test_strict_rules_refuse_the_whole_file),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_source_reload_keeps_the_last_good_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
