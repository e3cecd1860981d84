/*
 * test_sig.c - X-Hub-Signature-256: GitHub's published vector and every way a header can be
 * malformed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sig.h"

/* From GitHub's "Validating webhook deliveries" documentation. */
static const char k_secret[] = "It's a Secret to Everybody";
static const char k_body[] = "Hello, World!";
static const char k_header[] =
    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

static void test_sign_matches_github_vector(void **state)
{
    char out[SIG_HEADER_SIZE];
    sig_sign(k_secret, k_body, strlen(k_body), out);
    assert_string_equal(out, k_header);
}

static void test_verify_accepts_github_vector(void **state)
{
    assert_true(sig_verify(k_header, k_body, strlen(k_body), k_secret));
}

static void test_verify_accepts_uppercase_hex(void **state)
{
    char up[SIG_HEADER_SIZE];
    memcpy(up, k_header, sizeof(k_header));
    for (size_t i = 7; up[i]; i++)
        if (up[i] >= 'a' && up[i] <= 'f')
            up[i] = (char)(up[i] - 'a' + 'A');
    assert_true(sig_verify(up, k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_wrong_secret(void **state)
{
    assert_false(sig_verify(k_header, k_body, strlen(k_body), "It's a Secret to Nobody"));
}

static void test_verify_rejects_changed_body(void **state)
{
    assert_false(sig_verify(k_header, "Hello, World?", 13, k_secret));
    /* One byte fewer: the MAC covers the exact length, not a C string. */
    assert_false(sig_verify(k_header, k_body, strlen(k_body) - 1, k_secret));
}

static void test_verify_rejects_one_flipped_hex_digit(void **state)
{
    char bad[SIG_HEADER_SIZE];
    memcpy(bad, k_header, sizeof(k_header));
    bad[SIG_HEADER_LEN - 1] = bad[SIG_HEADER_LEN - 1] == '7' ? '8' : '7';
    assert_false(sig_verify(bad, k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_truncated_header(void **state)
{
    char cut[SIG_HEADER_SIZE];
    memcpy(cut, k_header, sizeof(k_header));
    cut[SIG_HEADER_LEN - 2] = '\0';
    assert_false(sig_verify(cut, k_body, strlen(k_body), k_secret));
    assert_false(sig_verify("sha256=", k_body, strlen(k_body), k_secret));
    assert_false(sig_verify("", k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_header_with_trailing_bytes(void **state)
{
    char longer[SIG_HEADER_SIZE + 2];
    memcpy(longer, k_header, SIG_HEADER_LEN);
    memcpy(longer + SIG_HEADER_LEN, "00", 3);
    assert_false(sig_verify(longer, k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_missing_or_wrong_prefix(void **state)
{
    const char *hex = k_header + 7;
    assert_false(sig_verify(hex, k_body, strlen(k_body), k_secret));
    char sha1[SIG_HEADER_SIZE + 1];
    memcpy(sha1, "sha1=", 5);
    memcpy(sha1 + 5, hex, 65);
    assert_false(sig_verify(sha1, k_body, strlen(k_body), k_secret));
    char upper_prefix[SIG_HEADER_SIZE];
    memcpy(upper_prefix, k_header, sizeof(k_header));
    memcpy(upper_prefix, "SHA256=", 7);
    assert_false(sig_verify(upper_prefix, k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_non_hex_digits(void **state)
{
    char bad[SIG_HEADER_SIZE];
    memcpy(bad, k_header, sizeof(k_header));
    bad[10] = 'g';
    assert_false(sig_verify(bad, k_body, strlen(k_body), k_secret));
    memcpy(bad, k_header, sizeof(k_header));
    bad[20] = ' ';
    assert_false(sig_verify(bad, k_body, strlen(k_body), k_secret));
}

static void test_verify_rejects_null_inputs_and_empty_secret(void **state)
{
    assert_false(sig_verify(NULL, k_body, strlen(k_body), k_secret));
    assert_false(sig_verify(k_header, k_body, strlen(k_body), NULL));
    assert_false(sig_verify(k_header, k_body, strlen(k_body), ""));
    assert_false(sig_verify(k_header, NULL, 5, k_secret));
}

static void test_empty_body_signs_and_verifies(void **state)
{
    char out[SIG_HEADER_SIZE];
    sig_sign(k_secret, "", 0, out);
    assert_int_equal(strlen(out), SIG_HEADER_LEN);
    assert_memory_equal(out, "sha256=", 7);
    assert_true(sig_verify(out, "", 0, k_secret));
    assert_true(sig_verify(out, NULL, 0, k_secret));
    /* The empty body's MAC is not the vector's. */
    assert_string_not_equal(out, k_header);
    assert_false(sig_verify(out, k_body, strlen(k_body), k_secret));
}

static void test_body_with_nul_bytes_is_signed_whole(void **state)
{
    static const char body[] = {'{', '\0', '}'};
    char out[SIG_HEADER_SIZE];
    sig_sign(k_secret, body, sizeof(body), out);
    assert_true(sig_verify(out, body, sizeof(body), k_secret));
    assert_false(sig_verify(out, body, 1, k_secret));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign_matches_github_vector),
        cmocka_unit_test(test_verify_accepts_github_vector),
        cmocka_unit_test(test_verify_accepts_uppercase_hex),
        cmocka_unit_test(test_verify_rejects_wrong_secret),
        cmocka_unit_test(test_verify_rejects_changed_body),
        cmocka_unit_test(test_verify_rejects_one_flipped_hex_digit),
        cmocka_unit_test(test_verify_rejects_truncated_header),
        cmocka_unit_test(test_verify_rejects_header_with_trailing_bytes),
        cmocka_unit_test(test_verify_rejects_missing_or_wrong_prefix),
        cmocka_unit_test(test_verify_rejects_non_hex_digits),
        cmocka_unit_test(test_verify_rejects_null_inputs_and_empty_secret),
        cmocka_unit_test(test_empty_body_signs_and_verifies),
        cmocka_unit_test(test_body_with_nul_bytes_is_signed_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
