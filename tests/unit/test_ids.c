/*
 * test_ids.c - the identifier rules of src/core/ids.c: X-GitHub-Delivery ids (and nightly report
 * ids), owners and repository names by GitHub's limits, owner/repo, hex digits, commit shas.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ids.h"
#include "crcr_limits.h"

/* `n` copies of `c` followed by `tail` into out. */
static const char *repeat(char *out, size_t outsz, char c, size_t n, const char *tail)
{
    assert_true(n + strlen(tail) < outsz);
    memset(out, c, n);
    snprintf(out + n, outsz - n, "%s", tail);
    return out;
}

static bool owner_ok(const char *s)
{
    return ids_owner_valid(s, strlen(s));
}

static bool name_ok(const char *s)
{
    return ids_repo_name_valid(s, strlen(s));
}

/* Fails when `ok` accepts any of bad[0..n). */
static void assert_all_refused(bool (*ok)(const char *), const char *const *bad, size_t n,
                               const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (ok(bad[i]))
            fail_msg("%s '%s' accepted", what, bad[i]);
}

#define REFUSED(ok, bad, what) assert_all_refused(ok, bad, sizeof(bad) / sizeof(bad[0]), what)

static void delivery_ids_are_guids_and_similar(void **state)
{
    assert_true(ids_delivery_valid("72d3162e-cc78-11e3-81ab-4c9367dc0958"));
    assert_true(ids_delivery_valid("a"));
    assert_true(ids_delivery_valid("nightly:abc_123.v2")); /* every allowed punctuation */
    assert_true(ids_delivery_valid("0123456789abcdef0123456789abcdef01234567")); /* a sha */
    char id[CRCR_DELIVERY_ID_MAX + 2];
    assert_true(ids_delivery_valid(repeat(id, sizeof(id), 'd', CRCR_DELIVERY_ID_MAX - 1, "")));
    assert_false(ids_delivery_valid(repeat(id, sizeof(id), 'd', CRCR_DELIVERY_ID_MAX, "")));
    static const char *const bad[] = {"",     "a b",  "a/b",  "../etc",    "a\nb", "a%20b", "<x>",
                                      "a\"b", "a'b",  "a\\b", "d\xc3\xa9", "a?b",  "a#b",   "a;b",
                                      "a,b",  "a\tb", "a+b",  "a=b",       "a&b",  "a*b"};
    REFUSED(ids_delivery_valid, bad, "delivery id");
    assert_false(ids_delivery_valid(NULL));
}

static void owners_follow_github_limits(void **state)
{
    assert_true(owner_ok("pytorch"));
    assert_true(owner_ok("Example-Org"));
    assert_true(owner_ok("a"));
    assert_true(owner_ok("0"));
    assert_true(owner_ok("-edge-")); /* old accounts may start or end with '-' */
    char s[64];
    assert_true(owner_ok(repeat(s, sizeof(s), 'o', 39, "")));
    assert_false(owner_ok(repeat(s, sizeof(s), 'o', 40, "")));
    static const char *const bad[] = {"",    "a.b", "a b", "a/b",        "ä",
                                      "a@b", "a:b", "a~b", "old_account"};
    REFUSED(owner_ok, bad, "owner"); /* '_' is a repository name's, not an owner's */
    /* Only the n bytes given count. */
    assert_true(ids_owner_valid("owner/repo", 5));
    assert_false(ids_owner_valid("owner/repo", 6));
}

static void repository_names_follow_github_limits(void **state)
{
    assert_true(name_ok("pytorch"));
    assert_true(name_ok("relay.config"));
    assert_true(name_ok("a_b-c.d"));
    assert_true(name_ok(".github"));
    assert_true(name_ok("..."));
    assert_true(name_ok(".a"));
    char s[128];
    assert_true(name_ok(repeat(s, sizeof(s), 'n', 100, "")));
    assert_false(name_ok(repeat(s, sizeof(s), 'n', 101, "")));
    static const char *const bad[] = {"", ".", "..", "a/b", "a b", "a%2F", "é", "a:b", "a\n"};
    REFUSED(name_ok, bad, "repository name");
    /* Only the n bytes given count: "." and ".." are refused as whole names. */
    assert_false(ids_repo_name_valid(".x", 1));
    assert_true(ids_repo_name_valid(".x", 2));
    assert_false(ids_repo_name_valid("..x", 2));
    assert_true(ids_repo_name_valid("..x", 3));
}

static void full_names_are_owner_slash_name(void **state)
{
    assert_true(ids_full_name_valid("pytorch/pytorch"));
    assert_true(ids_full_name_valid("Example-Org/relay.config"));
    char s[160];
    repeat(s, sizeof(s), 'o', 39, "/");
    size_t n = strlen(s);
    repeat(s + n, sizeof(s) - n, 'r', 100, "");
    assert_true(ids_full_name_valid(s)); /* 140 characters: CRCR_REPO_NAME_MAX - 1 */
    assert_int_equal(strlen(s), CRCR_REPO_NAME_MAX - 1);
    static const char *const bad[] = {"",    "pytorch", "/pytorch", "pytorch/", "a/b/c", "a//b",
                                      "a/.", "a/..",    "a b/c",    "a/b c",    "o.x/r"};
    REFUSED(ids_full_name_valid, bad, "full name");
    assert_false(ids_full_name_valid(NULL));
}

static void hex_digits_have_their_value_in_either_case(void **state)
{
    const char *digits = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        assert_int_equal(ids_hex_value(digits[i]), i);
        if (i >= 10)
            assert_int_equal(ids_hex_value((char)(digits[i] - 'a' + 'A')), i);
    }
    static const char bad[] = {'g', 'G', '/', ':', '@', '`', ' ', '\0', 'x', (char)0xc3};
    for (size_t i = 0; i < sizeof(bad); i++)
        assert_int_equal(ids_hex_value(bad[i]), -1);
}

static void shas_are_40_or_64_hex_digits(void **state)
{
    assert_true(ids_sha_valid("0123456789abcdef0123456789abcdef01234567"));
    assert_true(ids_sha_valid("0123456789ABCDEF0123456789abcdef01234567"));
    char s[80];
    assert_true(ids_sha_valid(repeat(s, sizeof(s), 'f', 64, "")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 39, "")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 41, "")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 63, "")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 65, "")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 39, "g")));
    assert_false(ids_sha_valid(repeat(s, sizeof(s), 'f', 39, " ")));
    assert_false(ids_sha_valid("abc1234")); /* short shas are the HUD's business, not an id */
    assert_false(ids_sha_valid(""));
    assert_false(ids_sha_valid(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(delivery_ids_are_guids_and_similar),
        cmocka_unit_test(owners_follow_github_limits),
        cmocka_unit_test(repository_names_follow_github_limits),
        cmocka_unit_test(full_names_are_owner_slash_name),
        cmocka_unit_test(hex_digits_have_their_value_in_either_case),
        cmocka_unit_test(shas_are_40_or_64_hex_digits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
