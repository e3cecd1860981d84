/*
 * test_cli_health.c - `crcr health` (src/cli/cli_health.c) over a SQLite store and an allowlist
 * named by a --config file: the three formats, --repo and --window, thresholds from the
 * configuration, levels from the runs when there is no allowlist, a missing store never created,
 * and the usage errors with their exit status. The report itself is test_health.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/stat.h>

#include "cli.h"
#include "json.h"
#include "log.h"
#include "unit_support.h"

#define SHA "0123456789abcdef0123456789abcdef01234567"
#define FOUR "example-org/four"

static const char ALLOWLIST[] = "L2:\n  - example-org/two\nL4:\n  - example-org/four\n";

typedef ut_store_fx fixture;

/* Writes the --config file "crcr.env": the store, the allowlist and `extra` lines. */
static void write_config(fixture *fx, const char *extra)
{
    char path[128], text[512];
    snprintf(text, sizeof(text),
             "CRCR_STORE=sqlite:%s/crcr.db\nALLOWLIST_FILE=%s/allowlist.yml\n%s", fx->dir.path,
             fx->dir.path, extra);
    ut_write_file(ut_path(&fx->dir, "crcr.env", path, sizeof(path)), text);
}

/* 12 runs of FOUR at L4, two hours ago: 11 successes and a failure (91.7 %). */
static int setup(void **state)
{
    ut_store_setup(state);
    fixture *fx = *state;
    char path[128];
    ut_write_file(ut_path(&fx->dir, "allowlist.yml", path, sizeof(path)), ALLOWLIST);
    write_config(fx, "");
    unsetenv("CRCR_STORE");
    unsetenv("ALLOWLIST_FILE");
    unsetenv("ALLOWLIST_URL");
    log_set_level(CRCR_LOG_OFF); /* as main() sets it for every command but serve */
    int64_t t = clock_now_ms() - 2 * 3600 * 1000;
    const char *targets[] = {FOUR, NULL};
    for (int i = 0; i < 12; i++) {
        char id[32];
        snprintf(id, sizeof(id), "del-%d", i);
        ut_ingest(fx->st, id, 100 + i, SHA, "{}", targets, t);
        store_run_update u = ut_run_update(id, FOUR, 500 + i, "build", "in_progress", NULL, 4,
                                           100 + i, SHA, t + 10000);
        ut_apply(fx->st, &u);
        u = ut_run_update(id, FOUR, 500 + i, "build", "completed", i < 11 ? "success" : "failure",
                          4, 100 + i, SHA, t + 20000);
        ut_apply(fx->st, &u);
    }
    return 0;
}

static int teardown(void **state)
{
    log_set_level(CRCR_LOG_INFO);
    return ut_store_teardown(state);
}

/* Runs `crcr health WORDS... --config <crcr.env>`. */
static void health(fixture *fx, const char *const *words, ut_cmd *c)
{
    char config[128];
    ut_path(&fx->dir, "crcr.env", config, sizeof(config));
    char *argv[16] = {"health"};
    int n = 1;
    for (; words[n - 1]; n++)
        argv[n] = (char *)words[n - 1];
    argv[n++] = "--config";
    argv[n++] = config;
    argv[n] = NULL;
    ut_run(&fx->dir, health_main, argv, NULL, c);
}

/* The line of `repo` in a text report (static). */
static const char *row_of(const char *text, const char *repo)
{
    static char line[512];
    char head[64];
    snprintf(head, sizeof(head), "\n%s ", repo);
    const char *p = strstr(text, head);
    if (!p)
        fail_msg("no row for %s in:\n%s", repo, text);
    p++;
    snprintf(line, sizeof(line), "%.*s", (int)strcspn(p, "\n"), p);
    return line;
}

static void test_text_report_over_the_allowlist(void **state)
{
    fixture *fx = *state;
    const char *words[] = {NULL};
    ut_cmd c;
    health(fx, words, &c);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.err, "");
    assert_true(strncmp(c.out, "Level health over 7d (", 22) == 0);
    assert_null(strstr(c.out, "levels from the runs"));
    const char *four = row_of(c.out, FOUR);
    assert_non_null(strstr(four, " L4 "));
    assert_non_null(strstr(four, "    12 "));
    assert_non_null(strstr(four, " 91.7% "));
    assert_non_null(strstr(four, " below_level  L3"));
    /* On the allowlist without runs: listed all the same. */
    const char *two = row_of(c.out, "example-org/two");
    assert_non_null(strstr(two, " L2 "));
    assert_non_null(strstr(two, "     0 "));
    assert_non_null(strstr(c.out, "\nThresholds: L2 success > 70% and every PR head done within "
                                  "3h; L3 > 90%; L4 > 95% (cumulative).\n"));
}

static void test_json_and_markdown(void **state)
{
    fixture *fx = *state;
    const char *json[] = {"--format", "json", NULL};
    ut_cmd c;
    health(fx, json, &c);
    assert_int_equal(c.rc, 0);
    size_t n = strlen(c.out);
    assert_true(n > 2 && c.out[n - 1] == '\n');
    jv *doc = jv_parse(c.out, n, NULL, 0);
    assert_non_null(doc);
    jv *repos = jv_get(doc, "repos");
    assert_int_equal(jv_arr_len(repos), 2);
    jv *four = jv_arr_at(repos, 0);
    assert_non_null(jv_path_str(four, "repo"));
    assert_string_equal(jv_path_str(four, "repo"), FOUR);
    int64_t runs = 0;
    assert_true(jv_int(jv_get(four, "runs"), &runs) && runs == 12);
    jv *verdict = jv_get(four, "health");
    assert_non_null(jv_path_str(verdict, "status"));
    assert_string_equal(jv_path_str(verdict, "status"), "below_level");
    assert_string_equal(jv_path_str(verdict, "recommended_level"), "L3");
    jv_free(doc);

    const char *md[] = {"--format", "md", NULL};
    health(fx, md, &c);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.out, "| Repo | Level | Runs | Success |"));
    assert_non_null(strstr(c.out, "| `example-org/four` | L4 | 12 | 91.7% |"));
}

static void test_repo_and_window_narrow_the_report(void **state)
{
    fixture *fx = *state;
    const char *one[] = {"--repo", "Example-Org/Four", NULL};
    ut_cmd c;
    health(fx, one, &c);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(row_of(c.out, FOUR), " 91.7% "));
    assert_null(strstr(c.out, "example-org/two"));

    /* The runs are two hours old: outside a one-hour window. */
    const char *hour[] = {"--window", "1h", NULL};
    health(fx, hour, &c);
    assert_int_equal(c.rc, 0);
    assert_true(strncmp(c.out, "Level health over 1h (", 22) == 0);
    assert_non_null(strstr(row_of(c.out, FOUR), "     0 "));
    const char *three[] = {"--window", "3h", NULL};
    health(fx, three, &c);
    assert_non_null(strstr(row_of(c.out, FOUR), "    12 "));
}

static void test_thresholds_come_from_the_configuration(void **state)
{
    fixture *fx = *state;
    write_config(fx, "CRCR_HEALTH_L4_SUCCESS_PCT=80\nCRCR_HEALTH_PR_HOURS=5\n");
    const char *words[] = {NULL};
    ut_cmd c;
    health(fx, words, &c);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.out, "\nThresholds: L2 success > 70% and every PR head done within "
                                  "5h; L3 > 90%; L4 > 80% (cumulative).\n"));
    /* 91.7 % is enough for L4 now. */
    const char *four = row_of(c.out, FOUR);
    assert_null(strstr(four, "below_level"));
    assert_non_null(strstr(four, " L4"));
}

static void test_without_an_allowlist_levels_come_from_the_runs(void **state)
{
    fixture *fx = *state;
    ut_write_store_config(&fx->dir);
    const char *words[] = {NULL};
    ut_cmd c;
    health(fx, words, &c);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.err,
                        "crcr: allowlist: no ALLOWLIST_FILE or ALLOWLIST_URL: levels come from the "
                        "runs\n");
    assert_non_null(strstr(c.out, ", levels from the runs (no allowlist)\n"));
    assert_non_null(strstr(row_of(c.out, FOUR), " L4 "));
    assert_null(strstr(c.out, "example-org/two"));

    /* A broken allowlist file: the same, with its problem named. */
    char path[128];
    ut_write_file(ut_path(&fx->dir, "allowlist.yml", path, sizeof(path)), "L4: [&a x]\n");
    write_config(fx, "");
    health(fx, words, &c);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.err, "anchors and aliases are not allowed"));
    assert_non_null(strstr(c.err, ": levels come from the runs\n"));
}

static void test_a_missing_store_is_never_created(void **state)
{
    fixture *fx = *state;
    char absent[160];
    snprintf(absent, sizeof(absent), "%s/absent.db", fx->dir.path);
    char extra[200];
    snprintf(extra, sizeof(extra), "CRCR_STORE=sqlite:%s\n", absent);
    char path[128], text[512];
    snprintf(text, sizeof(text), "%sALLOWLIST_FILE=%s/allowlist.yml\n", extra, fx->dir.path);
    ut_write_file(ut_path(&fx->dir, "crcr.env", path, sizeof(path)), text);
    const char *words[] = {NULL};
    ut_cmd c;
    health(fx, words, &c);
    assert_int_equal(c.rc, 2);
    assert_string_equal(c.out, "");
    assert_non_null(strstr(c.err, absent));
    struct stat sb;
    assert_int_equal(stat(absent, &sb), -1);
}

static void test_usage_errors_exit_2(void **state)
{
    fixture *fx = *state;
    static const struct {
        const char *words[4];
        const char *err;
    } cases[] = {
        {{"--verbose", NULL}, "crcr health: unknown option '--verbose'\n"},
        {{"report", NULL}, "crcr health: unexpected argument 'report'\n"},
        {{"--format", "html", NULL}, "usage: crcr health"},
        {{"--window", "7w", NULL}, "crcr: --window: expected e.g. 7d, 36h or 90m"},
        {{"--window", "59m", NULL}, "crcr: --window: expected e.g. 7d, 36h or 90m"},
        {{"--window", "91d", NULL}, "crcr: --window: expected e.g. 7d, 36h or 90m"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ut_cmd c;
        health(fx, cases[i].words, &c);
        if (c.rc != 2 || strncmp(c.err, cases[i].err, strlen(cases[i].err)) != 0)
            fail_msg("case %zu: rc %d, stderr:\n%s\nwant: %s", i, c.rc, c.err, cases[i].err);
        assert_string_equal(c.out, "");
    }
    /* A value missing at the end (no --config after it). */
    char *argv[] = {"health", "--repo", NULL};
    ut_cmd c;
    ut_run(&fx->dir, health_main, argv, NULL, &c);
    assert_int_equal(c.rc, 2);
    assert_true(strncmp(c.err, "crcr health: --repo needs a value\n", 34) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_report_over_the_allowlist, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_and_markdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repo_and_window_narrow_the_report, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thresholds_come_from_the_configuration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_without_an_allowlist_levels_come_from_the_runs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_store_is_never_created, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors_exit_2, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
