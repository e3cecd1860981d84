/* Unit tests for buf.c: the cap is hard and content stays NUL-terminated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"

static void append_within_cap_keeps_text_terminated(void **state)
{
    buf_t b;
    buf_init(&b, 16);
    assert_int_equal(buf_puts(&b, "hello"), CRCR_OK);
    assert_int_equal(buf_printf(&b, " %d", 42), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "hello 42");
    assert_int_equal(b.len, 8);
    buf_free(&b);
}

static void growth_past_cap_fails_and_leaves_content(void **state)
{
    buf_t b;
    buf_init(&b, 8);
    assert_int_equal(buf_puts(&b, "12345678"), CRCR_OK);
    assert_int_equal(buf_putc(&b, 'x'), CRCR_E_TOO_LARGE);
    assert_int_equal(buf_printf(&b, "%s", "y"), CRCR_E_TOO_LARGE);
    assert_string_equal(buf_cstr(&b), "12345678");
    buf_free(&b);
}

static void hex_is_two_lower_case_digits_a_byte_within_the_cap(void **state)
{
    buf_t b;
    buf_init(&b, 9);
    assert_int_equal(buf_putc(&b, '"'), CRCR_OK);
    assert_int_equal(buf_append_hex(&b, "\x00\x7f\xAB\xff", 4), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "\"007fabff");
    assert_int_equal(buf_append_hex(&b, "\x01", 1), CRCR_E_TOO_LARGE); /* 11 > 9 */
    assert_string_equal(buf_cstr(&b), "\"007fabff");
    assert_int_equal(buf_append_hex(&b, "", 0), CRCR_OK);
    assert_int_equal(buf_append_hex(&b, "x", SIZE_MAX), CRCR_E_TOO_LARGE);
    assert_int_equal(b.len, 9);
    buf_free(&b);
}

static void huge_length_does_not_overflow(void **state)
{
    buf_t b;
    buf_init(&b, 100);
    assert_int_equal(buf_puts(&b, "a"), CRCR_OK);
    assert_int_equal(buf_append(&b, "x", SIZE_MAX), CRCR_E_TOO_LARGE);
    assert_int_equal(b.len, 1);
    buf_free(&b);
}

static void detach_hands_over_memory(void **state)
{
    buf_t b;
    buf_init(&b, 64);
    size_t n = 99;
    char *empty = buf_detach(&b, &n);
    assert_non_null(empty);
    assert_int_equal(n, 0);
    assert_string_equal(empty, "");
    free(empty);
    buf_puts(&b, "abc");
    char *p = buf_detach(&b, &n);
    assert_string_equal(p, "abc");
    assert_int_equal(n, 3);
    assert_null(b.data);
    free(p);
    buf_free(&b);
}

static void reset_keeps_capacity(void **state)
{
    buf_t b;
    buf_init(&b, 64);
    buf_puts(&b, "abcdef");
    size_t cap = b.cap;
    buf_reset(&b);
    assert_string_equal(buf_cstr(&b), "");
    assert_int_equal(b.cap, cap);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(append_within_cap_keeps_text_terminated),
        cmocka_unit_test(growth_past_cap_fails_and_leaves_content),
        cmocka_unit_test(huge_length_does_not_overflow),
        cmocka_unit_test(hex_is_two_lower_case_digits_a_byte_within_the_cap),
        cmocka_unit_test(detach_hands_over_memory),
        cmocka_unit_test(reset_keeps_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
