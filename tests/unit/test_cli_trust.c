/*
 * test_cli_trust.c - `crcr trust list|reset` (src/cli/cli_trust.c) against a SQLite store in a
 * temporary directory named by a --config file: one line per pin, a reset that the store sees,
 * exit statuses and messages of usage errors, and a missing store never created.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli.h"
#include "unit_support.h"

#define T0 1800000000000LL /* 2027-01-15T08:00:00Z */

typedef ut_store_fx fixture;

/* A --config file naming the fixture's store (the environment would override it). */
static int setup(void **state)
{
    ut_store_setup(state);
    fixture *fx = *state;
    ut_write_store_config(&fx->dir);
    return 0;
}

/* The path of that file (static storage). */
static char *config_of(fixture *fx)
{
    static char path[128];
    return (char *)ut_path(&fx->dir, "crcr.env", path, sizeof(path));
}

/* The pins as the store lists them: "repo=id/owner;" each. */
static void on_pin(void *ctx, const store_identity_row *r)
{
    size_t n = strlen(ctx);
    snprintf((char *)ctx + n, 512 - n, "%s=%s/%s;", r->repo, r->repository_id, r->owner_id);
}

static const char *pins(fixture *fx)
{
    static char out[512];
    out[0] = '\0';
    assert_int_equal(store_identity_list(fx->st, on_pin, out), CRCR_OK);
    return out;
}

typedef struct cli {
    int rc;
    char out[4096], err[4096];
} cli;

static void read_all(const char *path, char *out, size_t outsz)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(out, 1, outsz - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Runs trust_main with stdout and stderr captured in files of the fixture's directory. */
static cli run_cli(fixture *fx, int argc, char **argv)
{
    cli c;
    memset(&c, 0, sizeof(c));
    char out_path[128], err_path[128];
    ut_path(&fx->dir, "stdout", out_path, sizeof(out_path));
    ut_path(&fx->dir, "stderr", err_path, sizeof(err_path));
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved_out >= 0 && saved_err >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    c.rc = trust_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    close(fo);
    close(fe);
    read_all(out_path, c.out, sizeof(c.out));
    read_all(err_path, c.err, sizeof(c.err));
    return c;
}

static void cli_list_prints_one_line_per_pin(void **state)
{
    fixture *fx = *state;
    ut_pin(fx->st, "b-org/two", "5", "6", T0);
    ut_pin(fx->st, "a-org/one", "111", "222", T0 + 123000);
    char *argv[] = {"list", "--config", config_of(fx)};
    cli c = run_cli(fx, 3, argv);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.out, "a-org/one"));
    assert_non_null(
        strstr(c.out, "repository_id=111 owner_id=222 pinned_at=2027-01-15T08:02:03Z\n"));
    assert_non_null(strstr(c.out, "repository_id=5 owner_id=6 pinned_at=2027-01-15T08:00:00Z\n"));
    assert_true(strstr(c.out, "a-org/one") < strstr(c.out, "b-org/two"));
}

static void cli_reset_forgets_a_pin_and_says_when_there_is_none(void **state)
{
    fixture *fx = *state;
    ut_pin(fx->st, "a-org/one", "111", "222", T0);
    char *argv[] = {"reset", "A-ORG/ONE", "--config", config_of(fx)};
    cli c = run_cli(fx, 4, argv);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.out, "reset the pin of A-ORG/ONE"));
    assert_string_equal(pins(fx), "");
    c = run_cli(fx, 4, argv);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, "A-ORG/ONE has no pin"));
}

static void cli_usage_errors_exit_2_without_touching_the_store(void **state)
{
    fixture *fx = *state;
    ut_pin(fx->st, "a-org/one", "111", "222", T0);
    char *no_verb[] = {"--config"};
    char *unknown[] = {"forget", "a-org/one"};
    char *reset_without_repo[] = {"reset", "--config", config_of(fx)};
    char *list_with_repo[] = {"list", "a-org/one", "--config", config_of(fx)};
    char *not_a_repo[] = {"reset", "a-org-one", "--config", config_of(fx)};
    char *bad_option[] = {"list", "--verbose"};
    char *two_repos[] = {"reset", "a/b", "c/d"};
    char *config_without_value[] = {"list", "--config"};
    struct {
        int argc;
        char **argv;
        const char *err;
    } cases[] = {{0, no_verb, "usage: crcr trust"},
                 {2, unknown, "usage: crcr trust"},
                 {3, reset_without_repo, "usage: crcr trust"},
                 {4, list_with_repo, "usage: crcr trust"},
                 {4, not_a_repo, "expected OWNER/REPO, got 'a-org-one'"},
                 {2, bad_option, "unknown option '--verbose'"},
                 {3, two_repos, "unexpected argument 'c/d'"},
                 {2, config_without_value, "--config needs a value"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cli c = run_cli(fx, cases[i].argc, cases[i].argv);
        assert_int_equal(c.rc, 2);
        if (!strstr(c.err, cases[i].err))
            fail_msg("case %zu: stderr '%s' lacks '%s'", i, c.err, cases[i].err);
    }
    assert_string_equal(pins(fx), "a-org/one=111/222;");
}

static void cli_never_creates_a_store(void **state)
{
    fixture *fx = *state;
    char path[128], text[256];
    ut_path(&fx->dir, "other.env", path, sizeof(path));
    snprintf(text, sizeof(text), "CRCR_STORE=sqlite:%s/missing.db\n", fx->dir.path);
    ut_write_file(path, text);
    char *argv[] = {"list", "--config", path};
    cli c = run_cli(fx, 3, argv);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "missing.db"));
    char db[128];
    ut_path(&fx->dir, "missing.db", db, sizeof(db));
    assert_int_equal(access(db, F_OK), -1);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, ut_store_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(cli_list_prints_one_line_per_pin),
        T(cli_reset_forgets_a_pin_and_says_when_there_is_none),
        T(cli_usage_errors_exit_2_without_touching_the_store),
        T(cli_never_creates_a_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
