/* Unit tests for the one base64 decoder (base64.h): the standard alphabet as the contents API sends
 * it, and the URL-safe one as tokens carry it (more of it in test_jwt.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base64.h"

static void standard_base64_decodes_with_padding_and_line_breaks(void **state)
{
    static const char *const in[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9v\nYmFy", " Zm9vYg==\r\n"};
    static const char *const want[] = {"", "f", "fo", "foo", "foobar", "foob"};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        buf_t b;
        buf_init(&b, 64);
        assert_int_equal(base64_decode(in[i], strlen(in[i]), &b), CRCR_OK);
        assert_int_equal(b.len, strlen(want[i]));
        assert_memory_equal(b.data ? b.data : "", want[i], b.len);
        buf_free(&b);
    }
}

static void standard_base64_rejects_bad_characters_padding_and_lengths(void **state)
{
    static const char *const bad[] = {
        "Zm9", "Zg=", "Z===", "Zg==Zg==", "Zm=v", "Zm9v-_==", "Zm9v!A==", "Zm9vY==="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_t b;
        buf_init(&b, 64);
        assert_int_equal(base64_decode(bad[i], strlen(bad[i]), &b), CRCR_E_INVALID);
        assert_int_equal(b.len, 0);
        buf_free(&b);
    }
}

static void both_alphabets_read_the_same_bytes(void **state)
{
    /* 0xfb 0xff 0xbf: "+/+/" in the standard alphabet, "-_-_" in the URL-safe one. */
    buf_t a, u;
    buf_init(&a, 16);
    buf_init(&u, 16);
    assert_int_equal(base64_decode("+/+/", 4, &a), CRCR_OK);
    assert_int_equal(base64url_decode("-_-_", 4, &u), CRCR_OK);
    assert_int_equal(a.len, 3);
    assert_int_equal(u.len, 3);
    assert_memory_equal(a.data, u.data, 3);
    assert_int_equal(base64url_decode("+/+/", 4, &u), CRCR_E_INVALID);
    assert_int_equal(base64url_decode("Zg==", 4, &u), CRCR_E_INVALID);
    assert_int_equal(base64url_decode("Zh", 2, &u), CRCR_E_INVALID); /* trailing bits set */
    assert_int_equal(u.len, 3);
    buf_free(&a);
    buf_free(&u);
}

static void output_stays_within_the_cap_and_unchanged_on_error(void **state)
{
    buf_t b;
    buf_init(&b, 5);
    assert_int_equal(base64_decode("Zm9vYmFy", 8, &b), CRCR_E_TOO_LARGE);
    assert_int_equal(b.len, 0);
    assert_int_equal(base64_decode("Zm9vYg==", 8, &b), CRCR_OK);
    assert_int_equal(b.len, 4);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(standard_base64_decodes_with_padding_and_line_breaks),
        cmocka_unit_test(standard_base64_rejects_bad_characters_padding_and_lengths),
        cmocka_unit_test(both_alphabets_read_the_same_bytes),
        cmocka_unit_test(output_stays_within_the_cap_and_unchanged_on_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
