/*
 * test_sig.c - X-Hub-Signature-256: GitHub's published vector and every way a header can be
 * malformed; the streaming verification (sig_stream) agreeing with the one-shot one whatever the
 * pieces a body comes in, with both secrets of a rotation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

/* ---- streaming ---- */

static bool stream_verdict(const char *header, const char *const *secrets, size_t n,
                           const char *body, size_t len, size_t piece)
{
    sig_stream *st = sig_stream_new(header, secrets, n);
    assert_non_null(st);
    for (size_t off = 0; off < len; off += piece)
        sig_stream_update(st, body + off, len - off < piece ? len - off : piece);
    bool ok = sig_stream_verify(st);
    assert_int_equal(sig_stream_verify(st), ok); /* the verdict stays */
    sig_stream_update(st, "x", 1);               /* ignored once verified */
    assert_int_equal(sig_stream_verify(st), ok);
    sig_stream_free(st);
    return ok;
}

static void test_stream_matches_github_vector_in_any_pieces(void **state)
{
    const char *secrets[] = {k_secret};
    for (size_t piece = 1; piece <= strlen(k_body); piece++)
        assert_true(stream_verdict(k_header, secrets, 1, k_body, strlen(k_body), piece));
    assert_false(stream_verdict(k_header, secrets, 1, "Hello, World?", 13, 5));
    /* One byte fewer: the MAC covers the exact length. */
    assert_false(stream_verdict(k_header, secrets, 1, k_body, strlen(k_body) - 1, 3));
}

static void test_stream_agrees_with_one_shot_on_a_large_body(void **state)
{
    size_t len = 300000;
    char *body = malloc(len);
    assert_non_null(body);
    for (size_t i = 0; i < len; i++)
        body[i] = (char)(i * 131u + 7u);
    char header[SIG_HEADER_SIZE];
    sig_sign("s", body, len, header);
    assert_true(sig_verify(header, body, len, "s"));
    const char *secrets[] = {"s"};
    size_t pieces[] = {1, 1000, 65536, len};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        assert_true(stream_verdict(header, secrets, 1, body, len, pieces[i]));
    body[len / 2] ^= 1;
    assert_false(stream_verdict(header, secrets, 1, body, len, 4096));
    free(body);
}

static void test_stream_accepts_either_secret_of_a_rotation(void **state)
{
    char header[SIG_HEADER_SIZE];
    sig_sign("old", k_body, strlen(k_body), header);
    const char *both[] = {"new", "old"};
    assert_true(stream_verdict(header, both, 2, k_body, strlen(k_body), 4));
    const char *only_new[] = {"new", NULL};
    assert_false(stream_verdict(header, only_new, 2, k_body, strlen(k_body), 4));
    const char *empty_then_old[] = {"", "old"};
    assert_true(stream_verdict(header, empty_then_old, 2, k_body, strlen(k_body), 4));
}

static void test_stream_refuses_what_can_never_verify(void **state)
{
    const char *secrets[] = {k_secret};
    const char *none[] = {NULL, ""};
    assert_null(sig_stream_new(NULL, secrets, 1));
    assert_null(sig_stream_new("sha256=abc", secrets, 1));
    assert_null(sig_stream_new("sha1=757107ea0eb2509fc211221cce984b8a37570b6d", secrets, 1));
    assert_null(sig_stream_new(k_header, none, 2));
    assert_null(sig_stream_new(k_header, secrets, 0));
    assert_false(sig_stream_verify(NULL));
    sig_stream_update(NULL, "x", 1);
    sig_stream_free(NULL);
    assert_true(sig_header_valid(k_header));
    assert_false(sig_header_valid("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c"
                                  "8b043e1g"));
    assert_false(sig_header_valid(""));
    assert_false(sig_header_valid(NULL));
}

static void test_stream_of_an_empty_body(void **state)
{
    char header[SIG_HEADER_SIZE];
    sig_sign("s", "", 0, header);
    const char *secrets[] = {"s"};
    sig_stream *st = sig_stream_new(header, secrets, 1);
    assert_non_null(st);
    assert_true(sig_stream_verify(st));
    sig_stream_free(st);
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
        cmocka_unit_test(test_stream_matches_github_vector_in_any_pieces),
        cmocka_unit_test(test_stream_agrees_with_one_shot_on_a_large_body),
        cmocka_unit_test(test_stream_accepts_either_secret_of_a_rotation),
        cmocka_unit_test(test_stream_refuses_what_can_never_verify),
        cmocka_unit_test(test_stream_of_an_empty_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
