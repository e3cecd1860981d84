/*
 * test_siphash.c - SipHash (src/core/siphash.h, src/core/siphash.c): the paper's reference vectors
 * for SipHash-2-4 at every length from 0 to 63, SipHash-1-3 (what the JSON validator's key table
 * uses) against published vectors, byte-at-a-time and split feeding agreeing with the one-shot
 * hash, and the per-process key: drawn once, the same for every caller and thread of a process,
 * another in another process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "siphash.h"

/* The reference key, bytes 00..0f read as two little-endian words. */
static const siphash_key REF_KEY = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};

/* SipHash-2-4 of the messages 00, 00 01, ..., 00..3e under REF_KEY: the reference
 * implementation's vectors (github.com/veorq/SipHash; the paper's Appendix A gives length 15). */
static const uint64_t VEC24[64] = {
    0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
    0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
    0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
    0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
    0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
    0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
    0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
    0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
    0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
    0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
    0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
    0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
    0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
    0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
    0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull,
};

static unsigned char g_msg[64];

static int group_setup(void **state)
{
    for (int i = 0; i < 64; i++)
        g_msg[i] = (unsigned char)i;
    return 0;
}

static void fail_hash(const char *what, size_t len, uint64_t got, uint64_t want)
{
    fail_msg("%s, length %zu: got %016llx, want %016llx", what, len, (unsigned long long)got,
             (unsigned long long)want);
}

static void test_siphash24_matches_every_reference_vector(void **state)
{
    for (size_t n = 0; n < 64; n++) {
        uint64_t h = siphash(&REF_KEY, 2, 4, g_msg, n);
        if (h != VEC24[n])
            fail_hash("SipHash-2-4", n, h, VEC24[n]);
    }
}

/* SipHash-1-3 under REF_KEY: the vectors other implementations publish (Swift's standard library
 * tests, the Go and Rust sip13 ports) for lengths 0, 1, 7, 8 and 9; the others from an independent
 * implementation written from the paper, which reproduces VEC24. */
static void test_siphash13_matches_published_vectors(void **state)
{
    static const struct {
        size_t len;
        uint64_t want;
    } v[] = {
        {0, 0xabac0158050fc4dcull},  {1, 0xc9f49bf37d57ca93ull},  {7, 0xd3927d989bb11140ull},
        {8, 0x369095118d299a8eull},  {9, 0x25a48eb36c063de4ull},  {15, 0xd320d86d2a519956ull},
        {16, 0xcc4fdd1a7d908b66ull}, {63, 0x9d199062b7bbb3a8ull},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t h = siphash(&REF_KEY, 1, 3, g_msg, v[i].len);
        if (h != v[i].want)
            fail_hash("SipHash-1-3", v[i].len, h, v[i].want);
    }
}

/* Fed in any pieces (the JSON validator feeds a key byte by byte across its escapes), the hash is
 * the one-shot hash. */
static void test_split_feeding_equals_one_shot(void **state)
{
    for (size_t n = 0; n < 64; n++) {
        for (size_t cut = 0; cut <= n; cut++) {
            siphash_state st;
            siphash_init(&st, &REF_KEY, 2, 4);
            siphash_bytes(&st, g_msg, cut);
            for (size_t i = cut; i < n; i++)
                siphash_byte(&st, g_msg[i]);
            assert_int_equal(st.total, n);
            assert_int_equal(st.mlen, n % 8);
            uint64_t h = siphash_final(&st);
            if (h != VEC24[n])
                fail_hash("split SipHash-2-4", n, h, VEC24[n]);
        }
    }
}

/* siphash_bytes takes whole words once the pending word is complete: entered with 0..7 bytes
 * pending and cut anywhere, it gives the reference hash. */
static void test_word_feeding_from_any_pending_count(void **state)
{
    for (size_t n = 0; n < 64; n++) {
        for (size_t pre = 0; pre < 8 && pre <= n; pre++) {
            for (size_t cut = pre; cut <= n; cut++) {
                siphash_state st;
                siphash_init(&st, &REF_KEY, 2, 4);
                for (size_t i = 0; i < pre; i++)
                    siphash_byte(&st, g_msg[i]);
                siphash_bytes(&st, g_msg + pre, cut - pre);
                siphash_bytes(&st, g_msg + cut, n - cut);
                assert_int_equal(st.total, n);
                uint64_t h = siphash_final(&st);
                if (h != VEC24[n])
                    fail_hash("word-fed SipHash-2-4", n, h, VEC24[n]);
            }
        }
    }
}

static void test_key_rounds_and_length_change_the_hash(void **state)
{
    uint64_t base = siphash(&REF_KEY, 1, 3, g_msg, 16);
    siphash_key k = REF_KEY;
    k.k0 ^= 1;
    assert_true(siphash(&k, 1, 3, g_msg, 16) != base);
    k = REF_KEY;
    k.k1 ^= 1ull << 63;
    assert_true(siphash(&k, 1, 3, g_msg, 16) != base);
    assert_true(siphash(&REF_KEY, 2, 4, g_msg, 16) != base);
    /* The length is part of the last block: a trailing zero byte is another message. */
    static const unsigned char zeros[9] = {0};
    for (size_t n = 0; n + 1 <= sizeof(zeros); n++)
        assert_true(siphash(&REF_KEY, 1, 3, zeros, n) != siphash(&REF_KEY, 1, 3, zeros, n + 1));
}

/* ---------------------------------------------------------------------------------------- */
/* The process key. */

#define THREADS 8

typedef struct {
    const siphash_key *ptr;
    siphash_key value;
} seen_key;

static void *take_key(void *p)
{
    seen_key *s = p;
    s->ptr = siphash_process_key();
    s->value = *s->ptr;
    return NULL;
}

static void test_process_key_is_drawn_once_for_every_thread(void **state)
{
    /* First calls race from several threads: pthread_once gives them all one key. */
    pthread_t t[THREADS];
    seen_key seen[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, take_key, &seen[i]), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    const siphash_key *k = siphash_process_key();
    assert_true(k->k0 != 0 || k->k1 != 0);
    for (int i = 0; i < THREADS; i++) {
        assert_ptr_equal(seen[i].ptr, k);
        assert_true(seen[i].value.k0 == k->k0 && seen[i].value.k1 == k->k1);
    }
    /* And it stays: later calls, and hashes under it, are the same. */
    siphash_key copy = *k;
    uint64_t h = siphash(k, 1, 3, "repository", 10);
    for (int i = 0; i < 1000; i++)
        assert_ptr_equal(siphash_process_key(), k);
    assert_true(copy.k0 == k->k0 && copy.k1 == k->k1);
    assert_true(siphash(siphash_process_key(), 1, 3, "repository", 10) == h);
    assert_true(h != siphash(&REF_KEY, 1, 3, "repository", 10));
}

/* With this argument the binary prints its process key and exits (see main). */
#define PRINT_KEY_ARG "--print-process-key"

/* Runs this binary again with PRINT_KEY_ARG; its key. */
static siphash_key key_of_another_process(void)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        char *argv[] = {"test_siphash", PRINT_KEY_ARG, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fd[1]);
    char text[128] = "";
    size_t got = 0;
    ssize_t n;
    while (got + 1 < sizeof(text) && (n = read(fd[0], text + got, sizeof(text) - 1 - got)) > 0)
        got += (size_t)n;
    text[got] = '\0';
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *end = NULL;
    siphash_key k;
    k.k0 = strtoull(text, &end, 16);
    assert_true(end == text + 16 && *end == ' ');
    k.k1 = strtoull(end + 1, &end, 16);
    assert_true(*end == '\n');
    return k;
}

static void test_another_process_draws_another_key(void **state)
{
    const siphash_key *mine = siphash_process_key();
    siphash_key a = key_of_another_process();
    siphash_key b = key_of_another_process();
    /* 128 random bits: equal keys would mean a constant or a reused key. */
    assert_false(a.k0 == mine->k0 && a.k1 == mine->k1);
    assert_false(b.k0 == mine->k0 && b.k1 == mine->k1);
    assert_false(a.k0 == b.k0 && a.k1 == b.k1);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], PRINT_KEY_ARG) == 0) {
        const siphash_key *k = siphash_process_key();
        printf("%016llx %016llx\n", (unsigned long long)k->k0, (unsigned long long)k->k1);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siphash24_matches_every_reference_vector),
        cmocka_unit_test(test_siphash13_matches_published_vectors),
        cmocka_unit_test(test_split_feeding_equals_one_shot),
        cmocka_unit_test(test_word_feeding_from_any_pending_count),
        cmocka_unit_test(test_key_rounds_and_length_change_the_hash),
        cmocka_unit_test(test_process_key_is_drawn_once_for_every_thread),
        cmocka_unit_test(test_another_process_draws_another_key),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
