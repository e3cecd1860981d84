/*
 * test_opts.c - opts_take (src/core/opts.c), the "--name VALUE" / "--name=VALUE" options of the
 * `crcr` commands: both forms, where the index ends up, a missing value, and words that are not
 * the option (another option, a longer name sharing the prefix, a positional argument).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "opts.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_separate_value_advances_past_it(void **state)
{
    char *argv[] = {"send", "--event", "push", "file.json"};
    int i = 1;
    const char *v = NULL;
    assert_int_equal(opts_take(ARGC(argv), argv, &i, "--event", &v), 1);
    assert_ptr_equal(v, argv[2]); /* borrowed, not copied */
    assert_int_equal(i, 2);       /* the caller's i++ then moves to "file.json" */
}

static void test_equals_form_stays_on_the_word(void **state)
{
    char *argv[] = {"send", "--url=http://127.0.0.1:9/x?a=b", "--event", "push"};
    int i = 1;
    const char *v = NULL;
    assert_int_equal(opts_take(ARGC(argv), argv, &i, "--url", &v), 1);
    assert_string_equal(v, "http://127.0.0.1:9/x?a=b"); /* only the first '=' splits */
    assert_ptr_equal(v, argv[1] + strlen("--url="));
    assert_int_equal(i, 1);

    /* An empty value after '=' is a value; the option at the end of argv does not matter. */
    char *empty[] = {"send", "--secret="};
    i = 1;
    v = NULL;
    assert_int_equal(opts_take(ARGC(empty), empty, &i, "--secret", &v), 1);
    assert_string_equal(v, "");
    assert_int_equal(i, 1);
}

static void test_missing_value_is_minus_one(void **state)
{
    char *argv[] = {"send", "file.json", "--event"};
    int i = 2;
    const char *v = "untouched";
    assert_int_equal(opts_take(ARGC(argv), argv, &i, "--event", &v), -1);
    assert_string_equal(v, "untouched");
    assert_int_equal(i, 2);
}

static void test_a_value_may_look_like_an_option(void **state)
{
    /* "--name VALUE" takes the next word whatever it is. */
    char *argv[] = {"send", "--delivery", "--event", "x"};
    int i = 1;
    const char *v = NULL;
    assert_int_equal(opts_take(ARGC(argv), argv, &i, "--delivery", &v), 1);
    assert_string_equal(v, "--event");
    assert_int_equal(i, 2);
}

static void test_other_words_do_not_match(void **state)
{
    static const char *words[] = {
        "--events",   /* a longer name sharing the prefix */
        "--event-id", /* likewise, with a dash */
        "--even",     /* a shorter one */
        "--url",      /* another option */
        "-event",     /* one dash */
        "event",      /* a positional argument */
        "--EVENT",    /* names are case-sensitive */
        "",           /* an empty word */
    };
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
        char *argv[] = {"send", (char *)words[k], "value"};
        int i = 1;
        const char *v = "untouched";
        if (opts_take(ARGC(argv), argv, &i, "--event", &v) != 0)
            fail_msg("'%s' matched --event", words[k]);
        assert_string_equal(v, "untouched");
        assert_int_equal(i, 1);
    }
}

static void test_a_loop_reads_mixed_forms(void **state)
{
    /* How the commands use it: one pass over argv, each option tried in turn. */
    char *argv[] = {"send", "in.json", "--event=push", "--url", "http://h/x", "--delivery", "d-1"};
    static const char *names[] = {"--event", "--url", "--delivery"};
    const char *vals[3] = {NULL, NULL, NULL};
    const char *positional = NULL;
    for (int i = 1; i < ARGC(argv); i++) {
        int rc = 0;
        for (size_t k = 0; k < 3 && rc == 0; k++)
            rc = opts_take(ARGC(argv), argv, &i, names[k], &vals[k]);
        assert_true(rc >= 0);
        if (rc == 0)
            positional = argv[i];
    }
    assert_string_equal(positional, "in.json");
    assert_string_equal(vals[0], "push");
    assert_string_equal(vals[1], "http://h/x");
    assert_string_equal(vals[2], "d-1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_separate_value_advances_past_it),
        cmocka_unit_test(test_equals_form_stays_on_the_word),
        cmocka_unit_test(test_missing_value_is_minus_one),
        cmocka_unit_test(test_a_value_may_look_like_an_option),
        cmocka_unit_test(test_other_words_do_not_match),
        cmocka_unit_test(test_a_loop_reads_mixed_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
