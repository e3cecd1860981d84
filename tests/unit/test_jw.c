/* Unit tests for the streaming JSON writer (jw.h): separators, escaping as jv_quote does, the
 * "unknown" markers, and the sticky errors (buffer cap, nesting depth, unbalanced close). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "jw.h"

static void json_writer_nests_and_separates(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_kstr(&w, "s", "a\"b</script>");
    jw_kint(&w, "i", -42);
    jw_knum(&w, "pct", 66.6666, 1);
    jw_knum(&w, "unknown", -1, 1);
    jw_ksecs(&w, "secs", 1234);
    jw_ksecs(&w, "nosecs", -1);
    jw_ktime(&w, "t", 0);
    jw_key(&w, "arr");
    jw_arr(&w);
    jw_int(&w, 1);
    jw_str(&w, NULL);
    jw_obj(&w);
    jw_obj_end(&w);
    jw_value_begin(&w);
    buf_puts(&b, "{\"raw\":true}");
    jw_arr_end(&w);
    jw_kbool(&w, "b", false);
    jw_obj_end(&w);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(buf_cstr(&b),
                        "{\"s\":\"a\\\"b</script>\",\"i\":-42,\"pct\":66.7,\"unknown\":null,"
                        "\"secs\":1.234,\"nosecs\":null,\"t\":null,\"arr\":[1,null,{},"
                        "{\"raw\":true}],\"b\":false}");
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(doc);
    jv_free(doc);
    buf_free(&b);
}

static void json_writer_refuses_unbalanced_close(void **state)
{
    buf_t b;
    buf_init(&b, 64);
    jw w;
    jw_init(&w, &b);
    jw_arr_end(&w);
    assert_int_equal(w.err, CRCR_E_INVALID);
    buf_free(&b);
}

static void strings_are_escaped_and_parse_back_to_the_same_bytes(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    const char tricky[] = "q\" b\\ n\n r\r t\t x\x01 y\x1f z\x7f \xc3\xa9 </script>";
    jw_arr(&w);
    jw_str(&w, tricky);
    jw_strn(&w, "abcdef", 3); /* only the first n bytes */
    jw_arr_end(&w);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(buf_cstr(&b), "[\"q\\\" b\\\\ n\\n r\\r t\\t x\\u0001 y\\u001f z\x7f "
                                      "\xc3\xa9 </script>\",\"abc\"]");
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(doc);
    assert_string_equal(jv_str(jv_arr_at(doc, 0)), tricky);
    jv_free(doc);
    /* An embedded NUL is escaped, not taken for the end. */
    buf_reset(&b);
    jw_init(&w, &b);
    jw_strn(&w, "a\0b", 3);
    assert_string_equal(buf_cstr(&b), "\"a\\u0000b\"");
    buf_free(&b);
}

static void unknown_numbers_and_times_are_null(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    jw_arr(&w);
    jw_num(&w, NAN, 1);
    jw_num(&w, INFINITY, 1);
    jw_num(&w, -0.5, 1);
    jw_num(&w, 0, 2);
    jw_num(&w, 99.95, 0);
    jw_secs(&w, 0);
    jw_secs(&w, 59999);
    jw_time(&w, -1);
    jw_time(&w, 1764547200999);
    jw_int(&w, INT64_MIN);
    jw_int(&w, INT64_MAX);
    jw_bool(&w, true);
    jw_arr_end(&w);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(buf_cstr(&b), "[null,null,null,0.00,100,0.000,59.999,null,"
                                      "\"2025-12-01T00:00:00Z\",-9223372036854775808,"
                                      "9223372036854775807,true]");
    buf_free(&b);
}

static void nesting_past_the_maximum_depth_is_refused(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    for (int i = 0; i < JW_MAX_DEPTH; i++)
        jw_arr(&w);
    assert_int_equal(w.err, CRCR_OK);
    size_t len = b.len;
    jw_arr(&w);
    assert_int_equal(w.err, CRCR_E_TOO_LARGE);
    for (int i = 0; i < JW_MAX_DEPTH; i++)
        jw_arr_end(&w); /* sticky: nothing more is written */
    assert_int_equal(b.len, len);
    assert_int_equal(w.err, CRCR_E_TOO_LARGE);
    buf_free(&b);
}

static void the_buffer_cap_stops_the_writer(void **state)
{
    buf_t b;
    buf_init(&b, 16);
    jw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_kstr(&w, "k", "12345678901234567890");
    assert_int_equal(w.err, CRCR_E_TOO_LARGE);
    size_t len = b.len;
    assert_true(len <= 16);
    jw_kint(&w, "i", 1);
    jw_obj_end(&w);
    assert_int_equal(b.len, len);
    assert_int_equal(w.err, CRCR_E_TOO_LARGE);
    buf_free(&b);
}

static void values_after_a_key_take_no_comma(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    jw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "a");
    jw_obj(&w);
    jw_obj_end(&w);
    jw_key(&w, "b");
    jw_value_begin(&w);
    buf_puts(&b, "7");
    jw_kstr(&w, "c", NULL);
    jw_obj_end(&w);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(buf_cstr(&b), "{\"a\":{},\"b\":7,\"c\":null}");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_writer_nests_and_separates),
        cmocka_unit_test(json_writer_refuses_unbalanced_close),
        cmocka_unit_test(strings_are_escaped_and_parse_back_to_the_same_bytes),
        cmocka_unit_test(unknown_numbers_and_times_are_null),
        cmocka_unit_test(nesting_past_the_maximum_depth_is_refused),
        cmocka_unit_test(the_buffer_cap_stops_the_writer),
        cmocka_unit_test(values_after_a_key_take_no_comma),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
