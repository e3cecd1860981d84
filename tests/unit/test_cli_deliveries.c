/*
 * test_cli_deliveries.c - `crcr deliveries list|show|redeliver` (src/cli/cli_deliveries.c) in both
 * of its modes over one SQLite store: locally (a --config file naming the store and the
 * allowlist) and through a minimal relay's admin API (--url, unit_support.h's ut_app over
 * ops_routes). Both modes print the same thing; filters, the redeliver --repo allowlist check and
 * --force, the store seeing what redeliver did, and every usage error with its exit status.
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

#include "cli_deliveries.h"
#include "log.h"
#include "ops.h"
#include "unit_support.h"

#define TOKEN "s3cret-admin-token"
#define SHA "0123456789abcdef0123456789abcdef01234567"
#define T0 1800000000000LL /* 2027-01-15T08:00:00Z */

static const char ALLOWLIST[] = "L1:\n  - example-org/one\nL2:\n  - example-org/two\n"
                                "L4:\n  - example-org/four\n";

typedef struct fixture {
    ut_app a;
    int port;
    char config[128]; /* --config FILE: the app's store and allowlist */
    char url[64];     /* --url of its admin API */
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    log_set_level(CRCR_LOG_OFF);
    const char *env[] = {"CRCR_ADMIN_TOKEN", TOKEN, NULL};
    fx->port = ut_app_start(&fx->a, ALLOWLIST, env, ops_routes);
    snprintf(fx->url, sizeof(fx->url), "http://127.0.0.1:%d", fx->port);
    const char *two_targets[] = {"example-org/two", "example-org/four", NULL};
    const char *one_target[] = {"example-org/four", NULL};
    ut_ingest(fx->a.app.st, "del-42", 42, SHA, "{\"pr\":42}", two_targets, T0);
    ut_ingest(fx->a.app.st, "del-7", 7, SHA, "{\"pr\":7}", one_target, T0 + 61000);
    char text[512];
    snprintf(text, sizeof(text), "CRCR_STORE=sqlite:%s/crcr.db\nALLOWLIST_FILE=%s/allowlist.yml\n",
             fx->a.dir.path, fx->a.dir.path);
    ut_write_file(ut_path(&fx->a.dir, "crcr.env", fx->config, sizeof(fx->config)), text);
    /* The environment would override the file. */
    unsetenv("CRCR_STORE");
    unsetenv("ALLOWLIST_FILE");
    unsetenv("ALLOWLIST_URL");
    unsetenv("CRCR_ADMIN_TOKEN");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    ut_app_stop(&fx->a);
    unsetenv("CRCR_ADMIN_TOKEN");
    log_set_level(CRCR_LOG_INFO);
    free(fx);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Running the command. */

enum { LOCAL, REMOTE, AS_IS };

/* Runs cli_deliveries_main over `words` (NULL-terminated), with "--config FILE" appended for
 * LOCAL, "--url URL --token TOKEN" for REMOTE, nothing for AS_IS; stdout and stderr captured. */
static ut_cmd deliveries(fixture *fx, int mode, const char *const *words)
{
    char *argv[32];
    int argc = 0;
    for (; words[argc]; argc++)
        argv[argc] = (char *)words[argc];
    if (mode == LOCAL) {
        argv[argc++] = "--config";
        argv[argc++] = fx->config;
    } else if (mode == REMOTE) {
        argv[argc++] = "--url";
        argv[argc++] = fx->url;
        argv[argc++] = "--token";
        argv[argc++] = TOKEN;
    }
    argv[argc] = NULL;
    ut_cmd c;
    ut_run(&fx->a.dir, cli_deliveries_main, argv, NULL, &c);
    return c;
}

/* Runs `words` in both modes; asserts that they print the same; the local run. */
static ut_cmd both(fixture *fx, const char *const *words)
{
    ut_cmd local = deliveries(fx, LOCAL, words);
    ut_cmd remote = deliveries(fx, REMOTE, words);
    if (local.rc != remote.rc || strcmp(local.out, remote.out) != 0 ||
        strcmp(local.err, remote.err) != 0)
        fail_msg("the modes differ for %s:\nlocal %d\n%s%s\nremote %d\n%s%s", words[0], local.rc,
                 local.out, local.err, remote.rc, remote.out, remote.err);
    return local;
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (; (s = strstr(s, what)); s += strlen(what))
        n++;
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* list and show. */

static void test_list_prints_one_line_per_delivery_newest_first(void **state)
{
    fixture *fx = *state;
    const char *words[] = {"list", NULL};
    ut_cmd c = both(fx, words);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.err, "");
    assert_string_equal(c.out, "2027-01-15T08:01:01Z  del-7                    pull_request   "
                               "synchronize  pr=7        queued\n"
                               "2027-01-15T08:00:00Z  del-42                   pull_request   "
                               "synchronize  pr=42       queued\n");
}

static void test_list_filters(void **state)
{
    fixture *fx = *state;
    const char *by_pr[] = {"list", "--pr", "42", NULL};
    ut_cmd c = both(fx, by_pr);
    assert_int_equal(c.rc, 0);
    assert_int_equal(count(c.out, "\n"), 1);
    assert_non_null(strstr(c.out, " del-42 "));
    const char *by_repo[] = {"list", "--repo", "example-org/two", NULL};
    c = both(fx, by_repo);
    assert_int_equal(count(c.out, "\n"), 1);
    assert_non_null(strstr(c.out, " del-42 "));
    const char *limit[] = {"list", "--limit", "1", NULL};
    c = both(fx, limit);
    assert_int_equal(count(c.out, "\n"), 1);
    assert_non_null(strstr(c.out, " del-7 "));
    const char *by_status[] = {"list", "--status", "dead", NULL};
    c = both(fx, by_status);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "");
    /* Nothing matched is said, on stderr (stdout stays an empty list). */
    assert_string_equal(c.err, "crcr deliveries: no delivery with an outbox row in state dead\n");
    const char *queued[] = {"list", "--status", "queued", "--pr", "7", NULL};
    c = both(fx, queued);
    assert_int_equal(count(c.out, "\n"), 1);
    assert_non_null(strstr(c.out, " del-7 "));
}

static void test_list_json_is_an_array_of_delivery_documents(void **state)
{
    fixture *fx = *state;
    const char *words[] = {"list", "--format", "json", NULL};
    ut_cmd c = both(fx, words);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.out[strlen(c.out) - 1], '\n');
    jv *doc = jv_parse(c.out, strlen(c.out), NULL, 0);
    assert_non_null(doc);
    assert_int_equal(jv_arr_len(doc), 2);
    assert_string_equal(jv_path_str(jv_arr_at(doc, 0), "delivery_id"), "del-7");
    assert_string_equal(jv_path_str(jv_arr_at(doc, 1), "delivery_id"), "del-42");
    assert_string_equal(jv_path_str(jv_arr_at(doc, 1), "received_at"), "2027-01-15T08:00:00Z");
    jv_free(doc);
}

static void test_show_prints_the_delivery_and_its_outbox(void **state)
{
    fixture *fx = *state;
    const char *words[] = {"show", "del-42", NULL};
    ut_cmd c = both(fx, words);
    assert_int_equal(c.rc, 0);
    assert_true(strncmp(c.out,
                        "delivery del-42  event=pull_request action=synchronize pr=42 "
                        "received=2027-01-15T08:00:00Z status=queued\n",
                        105) == 0);
    assert_non_null(strstr(c.out, "\n  dispatch   example-org/two"));
    assert_non_null(strstr(c.out, "\n  dispatch   example-org/four"));
    assert_int_equal(count(c.out, "queued   attempts=0\n"), 2);

    const char *json[] = {"show", "del-42", "--format", "json", NULL};
    c = both(fx, json);
    assert_int_equal(c.rc, 0);
    jv *doc = jv_parse(c.out, strlen(c.out), NULL, 0);
    assert_non_null(doc);
    assert_string_equal(jv_path_str(jv_get(doc, "delivery"), "delivery_id"), "del-42");
    assert_int_equal(jv_arr_len(jv_get(doc, "outbox")), 2);
    jv_free(doc);
}

static void test_show_of_an_unknown_delivery_exits_1(void **state)
{
    fixture *fx = *state;
    const char *words[] = {"show", "del-404", NULL};
    ut_cmd c = both(fx, words);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.out, "");
    char want[128];
    snprintf(want, sizeof(want), "crcr: delivery del-404: %s\n", crcr_strerror(CRCR_E_NOT_FOUND));
    assert_string_equal(c.err, want);
}

/* ---------------------------------------------------------------------------------------- */
/* redeliver. */

static void test_redeliver_requeues_every_dispatch(void **state)
{
    fixture *fx = *state;
    ut_rows rows;
    const char *words[] = {"redeliver", "del-42", NULL};
    ut_cmd c = deliveries(fx, LOCAL, words);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "re-queued 2 dispatches of del-42\n");
    ut_rows_of(fx->a.app.st, "del-42", &rows);
    assert_int_equal(rows.n, 2);
    c = deliveries(fx, REMOTE, words);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "re-queued 2 dispatches of del-42\n");

    /* One target: singular. */
    const char *one[] = {"redeliver", "del-42", "--repo", "example-org/four", NULL};
    c = both(fx, one);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "re-queued 1 dispatch of del-42\n");
    ut_rows_of(fx->a.app.st, "del-42", &rows);
    for (size_t i = 0; i < rows.n; i++)
        assert_string_equal(rows.state[i], "queued");

    const char *unknown[] = {"redeliver", "del-404", NULL};
    c = deliveries(fx, LOCAL, unknown);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, "crcr: delivery del-404: "));
}

static void test_redeliver_to_a_repo_off_the_allowlist_needs_force(void **state)
{
    fixture *fx = *state;
    ut_rows rows;
    const char *typo[] = {"redeliver", "del-42", "--repo", "example-org/tow", NULL};
    ut_cmd c = deliveries(fx, LOCAL, typo);
    assert_int_equal(c.rc, 2);
    assert_string_equal(c.out, "");
    assert_non_null(strstr(c.err, "crcr: redeliver --repo example-org/tow: not on the allowlist "
                                  "in force ("));
    assert_non_null(strstr(c.err, "3 repos); nothing re-queued"));
    c = deliveries(fx, REMOTE, typo);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "crcr: redeliver --repo example-org/tow: "));
    assert_non_null(strstr(c.err, "nothing re-queued (--force redelivers anyway)"));
    ut_rows_of(fx->a.app.st, "del-42", &rows);
    assert_int_equal(rows.n, 2); /* nothing created */

    /* --force creates the dispatch (locally, then through the API for the other delivery). */
    const char *forced[] = {"redeliver", "del-42", "--repo", "example-org/tow", "--force", NULL};
    c = deliveries(fx, LOCAL, forced);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "re-queued 1 dispatch of del-42\n");
    ut_rows_of(fx->a.app.st, "del-42", &rows);
    assert_int_equal(rows.n, 3);
    assert_string_equal(rows.target[2], "example-org/tow");
    const char *forced7[] = {"redeliver", "del-7", "--repo", "example-org/tow", "--force", NULL};
    c = deliveries(fx, REMOTE, forced7);
    assert_int_equal(c.rc, 0);
    ut_rows_of(fx->a.app.st, "del-7", &rows);
    assert_int_equal(rows.n, 2);

    /* Locally, without an allowlist to check against: refused too. */
    ut_write_store_config(&fx->a.dir);
    c = deliveries(fx, LOCAL, typo);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "cannot check it against the allowlist: no ALLOWLIST_FILE or "
                                  "ALLOWLIST_URL; nothing re-queued"));
}

/* ---------------------------------------------------------------------------------------- */
/* Errors. */

static void test_usage_errors_exit_2(void **state)
{
    fixture *fx = *state;
    static const struct {
        const char *words[8];
        const char *err;
    } cases[] = {
        {{NULL}, "usage: crcr deliveries list"},
        {{"lst", NULL}, "crcr deliveries: unknown verb 'lst' (list, show or redeliver)"},
        {{"list", "del-42", NULL}, "crcr deliveries: unexpected argument 'del-42'"},
        {{"show", NULL}, "crcr deliveries: show needs a delivery ID"},
        {{"redeliver", NULL}, "crcr deliveries: redeliver needs a delivery ID"},
        {{"show", "a", "b", NULL}, "crcr deliveries: unexpected argument 'b'"},
        {{"redeliver", "del-42", "--force", NULL}, "--force goes with redeliver --repo R"},
        {{"list", "--force", NULL}, "--force goes with redeliver --repo R"},
        {{"list", "--format", "xml", NULL}, "--format: expected text or json"},
        {{"list", "--status", "lost", NULL}, "--status: expected queued, running, sent"},
        {{"list", "--limit", "0", NULL}, "--limit: expected a number from 1 to 10000"},
        {{"list", "--limit", "10001", NULL}, "--limit: expected a number from 1 to 10000"},
        {{"list", "--limit", "5x", NULL}, "--limit: expected a number from 1 to 10000"},
        {{"list", "--pr", "-1", NULL}, "--pr: expected a number\n"},
        {{"list", "--pr", NULL}, "--pr: expected a number\n"},
        {{"list", "--repo", NULL}, "crcr deliveries: --repo needs a value"},
        {{"list", "--verbose", NULL}, "crcr deliveries: unknown option '--verbose'"},
        {{"show", "bad id!", NULL}, "crcr: 'bad id!' is not a delivery id"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ut_cmd c = deliveries(fx, AS_IS, cases[i].words);
        if (c.rc != 2 || !strstr(c.err, cases[i].err))
            fail_msg("case %zu: rc %d, stderr:\n%s\nwant: %s", i, c.rc, c.err, cases[i].err);
        assert_string_equal(c.out, "");
    }
}

static void test_url_and_token_are_checked(void **state)
{
    fixture *fx = *state;
    static const char *refused[] = {"http://relay.example.com", "ftp://127.0.0.1:1",
                                    "http://127.0.0.1.evil.example/"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        const char *words[] = {"list", "--url", refused[i], "--token", TOKEN, NULL};
        ut_cmd c = deliveries(fx, LOCAL, words); /* --config too: --url wins */
        assert_int_equal(c.rc, 2);
        assert_non_null(strstr(c.err, "crcr: --url: must be https:// (http:// only for loopback"));
    }
    /* No token: not even asked. */
    const char *no_token[] = {"list", "--url", fx->url, NULL};
    ut_cmd c = deliveries(fx, LOCAL, no_token);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "--url needs the admin token: --token T or CRCR_ADMIN_TOKEN"));
    /* The token from the environment. */
    setenv("CRCR_ADMIN_TOKEN", TOKEN, 1);
    c = deliveries(fx, LOCAL, no_token);
    assert_int_equal(c.rc, 0);
    assert_int_equal(count(c.out, "\n"), 2);
    /* A wrong token is refused by the relay. */
    const char *wrong[] = {"list", "--url", fx->url, "--token", "not-the-token", NULL};
    c = deliveries(fx, LOCAL, wrong);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, "401 Unauthorized: the admin token was refused"));
    /* Nothing listening. */
    const char *down[] = {"list", "--url", "http://127.0.0.1:1", "--token", TOKEN, NULL};
    c = deliveries(fx, LOCAL, down);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, "crcr: http://127.0.0.1:1: "));
}

static void test_a_missing_store_is_never_created(void **state)
{
    fixture *fx = *state;
    char path[128], text[256], db[160];
    snprintf(db, sizeof(db), "%s/absent.db", fx->a.dir.path);
    snprintf(text, sizeof(text), "CRCR_STORE=sqlite:%s\n", db);
    ut_write_file(ut_path(&fx->a.dir, "crcr.env", path, sizeof(path)), text);
    const char *words[] = {"list", NULL};
    ut_cmd c = deliveries(fx, LOCAL, words);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, db));
    assert_non_null(strstr(c.err, path)); /* the configuration read is named */
    struct stat sb;
    assert_int_equal(stat(db, &sb), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list_prints_one_line_per_delivery_newest_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_list_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_json_is_an_array_of_delivery_documents, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_show_prints_the_delivery_and_its_outbox, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_show_of_an_unknown_delivery_exits_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redeliver_requeues_every_dispatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_redeliver_to_a_repo_off_the_allowlist_needs_force,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors_exit_2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url_and_token_are_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_store_is_never_created, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
