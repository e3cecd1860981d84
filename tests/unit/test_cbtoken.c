/*
 * test_cbtoken.c - the relay-signed callback token (src/github/cbtoken.c): the exact construction
 * of cbtoken.h recomputed here with OpenSSL, the binding to delivery, repo (case-insensitive), head
 * sha and PR number, rotation with the previous secret, and malformed tokens; tokens of more
 * secrets than the module keeps keyed, one after the other and from several threads at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cbtoken.h"

#define SECRET "webhook-secret-now"
#define PREVIOUS "webhook-secret-before"
#define DELIVERY "72d3162e-cc78-11e3-81ab-4c9367dc0958"
#define REPO "Example-Org/Accelerator-CI"
#define SHA "0123456789abcdef0123456789abcdef01234567"
#define PR 4242

/* The token as cbtoken.h defines it, built independently of cbtoken.c. */
static void reference_token(const char *secret, const char *msg, char out[CBTOKEN_SIZE])
{
    static const char label[] = "crcr callback token key v1";
    unsigned char key[32], mac[32];
    unsigned int klen = 0, mlen = 0;
    assert_non_null(HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)label,
                         strlen(label), key, &klen));
    assert_int_equal(klen, 32);
    assert_non_null(
        HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), mac, &mlen));
    assert_int_equal(mlen, 32);
    int n = snprintf(out, CBTOKEN_SIZE, "v1.");
    for (unsigned i = 0; i < 32; i++)
        n += snprintf(out + n, (size_t)(CBTOKEN_SIZE - n), "%02x", mac[i]);
    assert_int_equal(n, CBTOKEN_SIZE - 1);
}

static void make(const char *secret, const char *delivery, const char *repo, const char *sha,
                 int64_t pr, char out[CBTOKEN_SIZE])
{
    memset(out, 'Z', CBTOKEN_SIZE);
    cbtoken_make(secret, delivery, repo, sha, pr, out);
    assert_int_equal(out[CBTOKEN_SIZE - 1], '\0');
}

static bool verify(const char *secret, const char *previous, const char *tok)
{
    return cbtoken_verify(secret, previous, tok, DELIVERY, REPO, SHA, PR);
}

static void token_is_v1_hmac_of_the_documented_message(void **state)
{
    char tok[CBTOKEN_SIZE], want[CBTOKEN_SIZE];
    make(SECRET, DELIVERY, REPO, SHA, PR, tok);
    /* The repo is lower-cased in the message; fields are joined by newlines. */
    reference_token(SECRET, "v1\n" DELIVERY "\nexample-org/accelerator-ci\n" SHA "\n4242", want);
    assert_string_equal(tok, want);
    assert_int_equal(strlen(tok), CBTOKEN_SIZE - 1);
    assert_memory_equal(tok, "v1.", 3);
    for (size_t i = 3; i < strlen(tok); i++)
        assert_non_null(strchr("0123456789abcdef", tok[i]));
}

static void a_push_without_pr_and_a_missing_sha_are_part_of_the_message(void **state)
{
    char tok[CBTOKEN_SIZE], want[CBTOKEN_SIZE];
    make(SECRET, "d1", "o/r", SHA, 0, tok);
    reference_token(SECRET, "v1\nd1\no/r\n" SHA "\n0", want);
    assert_string_equal(tok, want);
    /* A NULL head sha is the empty field. */
    make(SECRET, "d1", "o/r", NULL, 7, tok);
    reference_token(SECRET, "v1\nd1\no/r\n\n7", want);
    assert_string_equal(tok, want);
    char empty[CBTOKEN_SIZE];
    make(SECRET, "d1", "o/r", "", 7, empty);
    assert_string_equal(tok, empty);
}

static void the_same_inputs_give_the_same_token_and_it_verifies(void **state)
{
    char a[CBTOKEN_SIZE], b[CBTOKEN_SIZE];
    make(SECRET, DELIVERY, REPO, SHA, PR, a);
    make(SECRET, DELIVERY, REPO, SHA, PR, b);
    assert_string_equal(a, b);
    assert_true(verify(SECRET, NULL, a));
    assert_true(verify(SECRET, PREVIOUS, a));
}

static void the_repo_is_compared_case_insensitively(void **state)
{
    char tok[CBTOKEN_SIZE];
    make(SECRET, DELIVERY, "example-org/accelerator-ci", SHA, PR, tok);
    assert_true(cbtoken_verify(SECRET, NULL, tok, DELIVERY, "EXAMPLE-ORG/ACCELERATOR-CI", SHA, PR));
    assert_true(verify(SECRET, NULL, tok)); /* REPO is mixed case */
}

static void every_bound_field_changes_the_token(void **state)
{
    char tok[CBTOKEN_SIZE];
    make(SECRET, DELIVERY, REPO, SHA, PR, tok);
    assert_false(cbtoken_verify(SECRET, NULL, tok, "another-delivery", REPO, SHA, PR));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, "example-org/other-ci", SHA, PR));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, REPO,
                                "1123456789abcdef0123456789abcdef01234567", PR));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, REPO, SHA, PR + 1));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, REPO, SHA, 0));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, REPO, NULL, PR));
    /* Another secret signs another token. */
    char other[CBTOKEN_SIZE];
    make("a-different-secret", DELIVERY, REPO, SHA, PR, other);
    assert_string_not_equal(tok, other);
    assert_false(verify(SECRET, NULL, other));
}

static void a_token_of_the_previous_secret_passes_during_rotation(void **state)
{
    char old[CBTOKEN_SIZE], now[CBTOKEN_SIZE], stranger[CBTOKEN_SIZE];
    make(PREVIOUS, DELIVERY, REPO, SHA, PR, old);
    make(SECRET, DELIVERY, REPO, SHA, PR, now);
    make("never-configured", DELIVERY, REPO, SHA, PR, stranger);
    assert_true(verify(SECRET, PREVIOUS, old));
    assert_true(verify(SECRET, PREVIOUS, now));
    assert_false(verify(SECRET, NULL, old)); /* rotation over: the old one is refused */
    assert_false(verify(SECRET, PREVIOUS, stranger));
    /* Only a previous secret configured still verifies what it signed. */
    assert_true(verify(NULL, PREVIOUS, old));
    assert_false(verify(NULL, PREVIOUS, now));
    assert_false(verify(NULL, NULL, now));
    /* The previous secret is bound to the same fields. */
    assert_false(cbtoken_verify(SECRET, PREVIOUS, old, DELIVERY, REPO, SHA, PR + 1));
}

static void malformed_tokens_are_refused(void **state)
{
    char tok[CBTOKEN_SIZE];
    make(SECRET, DELIVERY, REPO, SHA, PR, tok);
    assert_false(verify(SECRET, PREVIOUS, NULL));
    assert_false(verify(SECRET, PREVIOUS, ""));
    assert_false(verify(SECRET, PREVIOUS, "v1."));
    assert_false(verify(SECRET, PREVIOUS, "v1.tok"));

    char bad[CBTOKEN_SIZE + 8];
    snprintf(bad, sizeof(bad), "%.*s", CBTOKEN_SIZE - 2, tok); /* one digit short */
    assert_false(verify(SECRET, PREVIOUS, bad));
    snprintf(bad, sizeof(bad), "%s0", tok); /* one digit more */
    assert_false(verify(SECRET, PREVIOUS, bad));
    snprintf(bad, sizeof(bad), "%s", tok);
    bad[CBTOKEN_SIZE - 2] = bad[CBTOKEN_SIZE - 2] == '0' ? '1' : '0'; /* last digit flipped */
    assert_false(verify(SECRET, PREVIOUS, bad));
    snprintf(bad, sizeof(bad), "%s", tok);
    bad[1] = '2'; /* another version, same MAC */
    assert_false(verify(SECRET, PREVIOUS, bad));
    snprintf(bad, sizeof(bad), "%s", tok);
    for (size_t i = 3; bad[i]; i++) /* the same MAC in upper case */
        if (bad[i] >= 'a' && bad[i] <= 'f')
            bad[i] = (char)(bad[i] - 'a' + 'A');
    assert_string_not_equal(bad, tok); /* the fixed inputs give a MAC with letters */
    assert_false(verify(SECRET, PREVIOUS, bad));
    /* A token with a NUL inside is as long as its C string. */
    snprintf(bad, sizeof(bad), "%s", tok);
    bad[10] = '\0';
    assert_false(verify(SECRET, PREVIOUS, bad));
}

static void a_dispatch_with_a_pair_binds_its_number_and_head(void **state)
{
    static const char pair_sha[] = "fedcba9876543210fedcba9876543210fedcba98";
    char tok[CBTOKEN_SIZE], want[CBTOKEN_SIZE], plain[CBTOKEN_SIZE];
    cbtoken_make_pair(SECRET, DELIVERY, REPO, SHA, PR, 7, pair_sha, tok);
    reference_token(SECRET,
                    "v1\n" DELIVERY "\nexample-org/accelerator-ci\n" SHA "\n4242\npair\n7\n"
                    "fedcba9876543210fedcba9876543210fedcba98",
                    want);
    assert_string_equal(tok, want);
    /* Without a pair the message, and so the token, is cbtoken_make's. */
    cbtoken_make_pair(SECRET, DELIVERY, REPO, SHA, PR, 0, pair_sha, plain);
    make(SECRET, DELIVERY, REPO, SHA, PR, want);
    assert_string_equal(plain, want);
    assert_true(cbtoken_verify_pair(SECRET, NULL, tok, DELIVERY, REPO, SHA, PR, 7, pair_sha));
    /* Another pair, another head of it, or none at all: refused. */
    assert_false(cbtoken_verify_pair(SECRET, NULL, tok, DELIVERY, REPO, SHA, PR, 8, pair_sha));
    assert_false(cbtoken_verify_pair(SECRET, NULL, tok, DELIVERY, REPO, SHA, PR, 7,
                                     "0000000000000000000000000000000000000000"));
    assert_false(cbtoken_verify(SECRET, NULL, tok, DELIVERY, REPO, SHA, PR));
    assert_false(cbtoken_verify_pair(SECRET, NULL, plain, DELIVERY, REPO, SHA, PR, 7, pair_sha));
    /* Rotation works for paired tokens too. */
    cbtoken_make_pair(PREVIOUS, DELIVERY, REPO, SHA, PR, 7, pair_sha, tok);
    assert_true(cbtoken_verify_pair(SECRET, PREVIOUS, tok, DELIVERY, REPO, SHA, PR, 7, pair_sha));
}

/* Secrets in turn, more of them than cbtoken.c keeps keyed (CBTOKEN_KEYS, 4): each token is the
 * construction's, whichever secret came before it. */
#define N_SECRETS 7
static const char *const g_secrets[N_SECRETS] = {"s-one",  "s-two", "s-three",           "s-four",
                                                 "s-five", "s-six", "webhook-secret-now"};

static void expected(const char *secret, int i, char out[CBTOKEN_SIZE])
{
    char msg[256];
    snprintf(msg, sizeof(msg), "v1\n" DELIVERY "\nexample-org/accelerator-ci\n" SHA "\n%d", i);
    reference_token(secret, msg, out);
}

static void tokens_of_more_secrets_than_are_kept_are_each_the_constructions(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N_SECRETS; i++) {
            int k = round % 2 ? N_SECRETS - 1 - i : i; /* forwards, then backwards */
            char tok[CBTOKEN_SIZE], want[CBTOKEN_SIZE];
            make(g_secrets[k], DELIVERY, REPO, SHA, 100 + i, tok);
            expected(g_secrets[k], 100 + i, want);
            assert_string_equal(tok, want);
            assert_true(cbtoken_verify(g_secrets[k], NULL, tok, DELIVERY, REPO, SHA, 100 + i));
            assert_false(cbtoken_verify(g_secrets[(k + 1) % N_SECRETS], NULL, tok, DELIVERY, REPO,
                                        SHA, 100 + i));
        }
}

typedef struct maker {
    int first; /* the secret it starts with */
    int wrong; /* tokens that were not the construction's */
    char want[N_SECRETS][CBTOKEN_SIZE];
} maker;

static void *make_many(void *arg)
{
    maker *m = arg;
    for (int i = 0; i < 300; i++) {
        int k = (m->first + i) % N_SECRETS;
        char tok[CBTOKEN_SIZE];
        cbtoken_make(g_secrets[k], DELIVERY, REPO, SHA, 7, tok);
        m->wrong += strcmp(tok, m->want[k]) != 0;
    }
    return NULL;
}

static void
threads_making_tokens_of_several_secrets_at_once_get_each_the_constructions(void **state)
{
    (void)state;
    enum { THREADS = 6 };
    maker m[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        m[i] = (maker){.first = i};
        for (int k = 0; k < N_SECRETS; k++)
            expected(g_secrets[k], 7, m[i].want[k]);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, make_many, &m[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(m[i].wrong, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(token_is_v1_hmac_of_the_documented_message),
        cmocka_unit_test(a_push_without_pr_and_a_missing_sha_are_part_of_the_message),
        cmocka_unit_test(the_same_inputs_give_the_same_token_and_it_verifies),
        cmocka_unit_test(the_repo_is_compared_case_insensitively),
        cmocka_unit_test(every_bound_field_changes_the_token),
        cmocka_unit_test(a_token_of_the_previous_secret_passes_during_rotation),
        cmocka_unit_test(malformed_tokens_are_refused),
        cmocka_unit_test(a_dispatch_with_a_pair_binds_its_number_and_head),
        cmocka_unit_test(tokens_of_more_secrets_than_are_kept_are_each_the_constructions),
        cmocka_unit_test(
            threads_making_tokens_of_several_secrets_at_once_get_each_the_constructions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
