/*
 * test_cli_store.c - `crcr store backup FILE [--config FILE]` (src/cli/cli_store.c): a copy of a
 * SQLite store in use that opens as the same store, an existing file never overwritten, a
 * missing store never created, the pg_dump advice for PostgreSQL with the password hidden, and
 * the usage errors with their exit status.
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

#include "cli_store.h"
#include "unit_support.h"

#define T0 1800000000000LL
#define SHA "0123456789abcdef0123456789abcdef01234567"

typedef ut_store_fx fixture;

/* A --config file naming the fixture's store (the environment would override it). */
static int setup(void **state)
{
    ut_store_setup(state);
    fixture *fx = *state;
    ut_write_store_config(&fx->dir);
    const char *targets[] = {"example-org/two", NULL};
    ut_ingest(fx->st, "del-1", 1, SHA, "{\"n\":1}", targets, T0);
    return 0;
}

/* dir/name (static, one at a time). */
static char *in_dir(fixture *fx, const char *name)
{
    static char path[128];
    return (char *)ut_path(&fx->dir, name, path, sizeof(path));
}

static void backup(fixture *fx, char **argv, ut_cmd *c)
{
    ut_run(&fx->dir, cli_store_main, argv, NULL, c);
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_backup_copies_the_store_in_use(void **state)
{
    fixture *fx = *state;
    char dest[128], config[128], db[128];
    snprintf(dest, sizeof(dest), "%s", in_dir(fx, "copy.db"));
    snprintf(config, sizeof(config), "%s", in_dir(fx, "crcr.env"));
    snprintf(db, sizeof(db), "%s", in_dir(fx, "crcr.db"));
    char *argv[] = {"backup", dest, "--config", config, NULL};
    ut_cmd c;
    backup(fx, argv, &c); /* fx->st is open: the relay would be running */
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.err, "");
    struct stat sb;
    assert_int_equal(stat(dest, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    char head[512];
    snprintf(head, sizeof(head), "backed up %s to %s (schema version ", db, dest);
    assert_true(strncmp(c.out, head, strlen(head)) == 0);
    char tail[64];
    snprintf(tail, sizeof(tail), ", %lld bytes)\n", (long long)sb.st_size);
    assert_string_equal(c.out + strlen(c.out) - strlen(tail), tail);

    /* The copy is a store with the delivery, and its outbox row. */
    char uri[160], err[256] = "";
    snprintf(uri, sizeof(uri), "sqlite:%s", dest);
    store *copy = NULL;
    if (store_open_existing(uri, 0, &copy, err, sizeof(err)) != CRCR_OK)
        fail_msg("store_open_existing(%s): %s", uri, err);
    ut_rows rows;
    ut_rows_of(copy, "del-1", &rows);
    assert_int_equal(rows.n, 1);
    assert_string_equal(rows.target[0], "example-org/two");
    store_close(copy);
}

static void test_an_existing_file_is_never_overwritten(void **state)
{
    fixture *fx = *state;
    char dest[128], config[128];
    snprintf(dest, sizeof(dest), "%s", in_dir(fx, "precious.txt"));
    snprintf(config, sizeof(config), "%s", in_dir(fx, "crcr.env"));
    ut_write_file(dest, "keep me\n");
    char *argv[] = {"backup", dest, "--config", config, NULL};
    ut_cmd c;
    backup(fx, argv, &c);
    assert_int_equal(c.rc, 2);
    assert_string_equal(c.out, "");
    assert_true(strncmp(c.err, "crcr store backup: ", 19) == 0);
    char text[64];
    ut_slurp(dest, text, sizeof(text));
    assert_string_equal(text, "keep me\n");

    /* A directory that does not exist: the copy fails (1). */
    char *nodir[] = {"backup", "/nonexistent/dir/copy.db", "--config", config, NULL};
    backup(fx, nodir, &c);
    assert_int_equal(c.rc, 1);
    assert_true(strncmp(c.err, "crcr store backup: ", 19) == 0);
}

static void test_a_missing_store_is_never_created(void **state)
{
    fixture *fx = *state;
    char config[128], absent[128], dest[128];
    snprintf(absent, sizeof(absent), "%s", in_dir(fx, "absent.db"));
    snprintf(dest, sizeof(dest), "%s", in_dir(fx, "copy.db"));
    snprintf(config, sizeof(config), "%s", in_dir(fx, "other.env"));
    char text[256];
    snprintf(text, sizeof(text), "CRCR_STORE=sqlite:%s\n", absent);
    ut_write_file(config, text);
    char *argv[] = {"backup", dest, "--config", config, NULL};
    ut_cmd c;
    backup(fx, argv, &c);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, absent));
    assert_non_null(strstr(c.err, config)); /* which configuration was read */
    assert_false(exists(absent));
    assert_false(exists(dest));
}

static void test_postgresql_gets_the_pg_dump_advice_without_the_password(void **state)
{
    fixture *fx = *state;
    char config[128], dest[128];
    snprintf(config, sizeof(config), "%s", in_dir(fx, "pg.env"));
    snprintf(dest, sizeof(dest), "%s", in_dir(fx, "pg.dump"));
    ut_write_file(config, "CRCR_STORE=postgresql://crcr:Pg-Secret-1@db.internal:5432/crcr"
                          "?sslmode=require&password=Pg-Secret-2\n");
    char *argv[] = {"backup", dest, "--config", config, NULL};
    ut_cmd c;
    backup(fx, argv, &c);
    assert_int_equal(c.rc, 2);
    assert_string_equal(c.out, "");
    char want[512];
    snprintf(want, sizeof(want),
             "  pg_dump --format=custom --file=%s 'postgresql://crcr:***@db.internal:5432/crcr"
             "?sslmode=require&password=***'\n",
             dest);
    assert_non_null(strstr(c.err, want));
    assert_non_null(strstr(c.err, "pg_restore --clean --if-exists --no-owner"));
    assert_null(strstr(c.err, "Pg-Secret"));
    assert_false(exists(dest));
}

static void test_usage_errors_exit_2(void **state)
{
    fixture *fx = *state;
    static const struct {
        const char *argv[6];
        const char *err;
    } cases[] = {
        {{NULL}, "usage: crcr store backup FILE [--config FILE]\n"},
        {{"restore", "x.db", NULL}, "crcr store: unknown verb 'restore'\n"},
        {{"backup", NULL}, "crcr store backup: FILE is required\n"},
        {{"backup", "", NULL}, "crcr store backup: FILE is required\n"},
        {{"backup", "a.db", "b.db", NULL}, "crcr store: unexpected argument 'b.db'\n"},
        {{"backup", "a.db", "--force", NULL}, "crcr store: unknown option '--force'\n"},
        {{"backup", "a.db", "--config", NULL}, "crcr store: --config needs a value\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[6];
        size_t n = 0;
        for (; cases[i].argv[n]; n++)
            argv[n] = (char *)cases[i].argv[n];
        argv[n] = NULL;
        ut_cmd c;
        backup(fx, argv, &c);
        if (c.rc != 2 || strncmp(c.err, cases[i].err, strlen(cases[i].err)) != 0)
            fail_msg("case %zu: rc %d, stderr:\n%s\nwant: %s", i, c.rc, c.err, cases[i].err);
        assert_non_null(strstr(c.err, "usage: crcr store backup FILE [--config FILE]\n"));
        assert_string_equal(c.out, "");
    }
    assert_false(exists("a.db"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_backup_copies_the_store_in_use, setup,
                                        ut_store_teardown),
        cmocka_unit_test_setup_teardown(test_an_existing_file_is_never_overwritten, setup,
                                        ut_store_teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_store_is_never_created, setup,
                                        ut_store_teardown),
        cmocka_unit_test_setup_teardown(
            test_postgresql_gets_the_pg_dump_advice_without_the_password, setup, ut_store_teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors_exit_2, setup, ut_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
