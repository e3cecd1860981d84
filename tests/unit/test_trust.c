/*
 * test_trust.c - repository identity pins as operators see them (src/relay/trust.c): the JSON
 * document of the admin API over pins created with store_identity_pin in a SQLite store. `crcr
 * trust` is test_cli_trust.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "trust.h"
#include "unit_support.h"

#define T0 1800000000000LL /* 2027-01-15T08:00:00Z */

typedef ut_store_fx fixture;

/* trust_doc into a static string. */
static const char *doc(fixture *fx)
{
    static char out[8192];
    buf_t b;
    buf_init(&b, 1 << 20);
    assert_int_equal(trust_doc(fx->st, &b), CRCR_OK);
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    jv *parsed = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(parsed); /* always valid JSON */
    jv_free(parsed);
    buf_free(&b);
    return out;
}

static void no_pins_is_an_empty_list(void **state)
{
    fixture *fx = *state;
    assert_string_equal(doc(fx), "{\"pins\":[]}");
    /* a callback without ids does not pin */
    assert_int_equal(ut_pin(fx->st, "o/r", "", "", T0), STORE_PIN_NONE);
    assert_string_equal(doc(fx), "{\"pins\":[]}");
}

static void pins_are_listed_by_repo_with_ids_and_pin_time(void **state)
{
    fixture *fx = *state;
    assert_int_equal(ut_pin(fx->st, "zeta-org/ci", "900", "901", T0 + 123000), STORE_PIN_MATCH);
    assert_int_equal(ut_pin(fx->st, "Alpha-Org/CI", "111", "222", T0), STORE_PIN_MATCH);
    assert_string_equal(doc(fx),
                        "{\"pins\":[{\"repo\":\"Alpha-Org/CI\",\"repository_id\":\"111\","
                        "\"owner_id\":\"222\",\"pinned_at\":\"2027-01-15T08:00:00Z\"},"
                        "{\"repo\":\"zeta-org/ci\",\"repository_id\":\"900\",\"owner_id\":\"901\","
                        "\"pinned_at\":\"2027-01-15T08:02:03Z\"}]}");
}

static void the_first_pin_wins_and_a_reset_removes_it(void **state)
{
    fixture *fx = *state;
    assert_int_equal(ut_pin(fx->st, "o/r", "111", "222", T0), STORE_PIN_MATCH);
    char before[8192];
    snprintf(before, sizeof(before), "%s", doc(fx));
    /* a re-created repository (other ids) is refused and changes nothing */
    assert_int_equal(ut_pin(fx->st, "o/r", "999", "222", T0 + 5000), STORE_PIN_MISMATCH);
    assert_int_equal(ut_pin(fx->st, "O/R", "111", "222", T0 + 5000), STORE_PIN_MATCH);
    assert_string_equal(doc(fx), before);
    assert_int_equal(store_identity_reset(fx->st, "o/r"), CRCR_OK);
    assert_string_equal(doc(fx), "{\"pins\":[]}");
    assert_int_equal(ut_pin(fx->st, "o/r", "999", "222", T0 + 6000), STORE_PIN_MATCH);
    assert_non_null(strstr(doc(fx), "\"repository_id\":\"999\""));
}

static void names_are_json_escaped(void **state)
{
    fixture *fx = *state;
    assert_int_equal(ut_pin(fx->st, "o/r\"}]", "1", "2", T0), STORE_PIN_MATCH);
    buf_t b;
    buf_init(&b, 1 << 20);
    assert_int_equal(trust_doc(fx->st, &b), CRCR_OK);
    jv *parsed = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(parsed);
    assert_int_equal(jv_arr_len(jv_get(parsed, "pins")), 1);
    assert_string_equal(jv_path_str(jv_arr_at(jv_get(parsed, "pins"), 0), "repo"), "o/r\"}]");
    jv_free(parsed);
    buf_free(&b);
}

static void a_document_that_does_not_fit_is_an_error_not_a_cut(void **state)
{
    fixture *fx = *state;
    assert_int_equal(ut_pin(fx->st, "o/r", "111", "222", T0), STORE_PIN_MATCH);
    buf_t b;
    buf_init(&b, 24);
    assert_int_equal(trust_doc(fx->st, &b), CRCR_E_TOO_LARGE);
    buf_free(&b);
    /* Room for the head of the pin but not its tail: an error too, never a cut document that
     * looks whole ("..."pinned_at":"}]}"). */
    for (size_t cap = 40; cap < 120; cap++) {
        buf_init(&b, cap);
        crcr_err e = trust_doc(fx->st, &b);
        if (e == CRCR_OK)
            assert_non_null(strstr(buf_cstr(&b), "\"pinned_at\":\"20"));
        else
            assert_int_equal(e, CRCR_E_TOO_LARGE);
        buf_free(&b);
    }
}

#define T(name) cmocka_unit_test_setup_teardown(name, ut_store_setup, ut_store_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(no_pins_is_an_empty_list),
        T(pins_are_listed_by_repo_with_ids_and_pin_time),
        T(the_first_pin_wins_and_a_reset_removes_it),
        T(names_are_json_escaped),
        T(a_document_that_does_not_fit_is_an_error_not_a_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
