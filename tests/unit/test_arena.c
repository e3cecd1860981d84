/* Unit tests for the HUD's per-request memory (arena.h): alignment, the cap and its sticky oom
 * flag, reuse after arena_free, the vector's zeroed growth and the string map's growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arena.h"

static void allocations_are_aligned_and_distinct(void **state)
{
    arena a;
    arena_init(&a, 4 * ARENA_BLOCK);
    char *p = arena_alloc(&a, 1);
    char *q = arena_alloc(&a, 3);
    char *r = arena_alloc(&a, 9);
    assert_non_null(p);
    assert_non_null(q);
    assert_non_null(r);
    assert_int_equal((uintptr_t)p % 8, 0);
    assert_int_equal((uintptr_t)q % 8, 0);
    assert_int_equal((uintptr_t)r % 8, 0);
    assert_ptr_equal(q, p + 8);
    assert_ptr_equal(r, q + 8);
    const char *d = arena_dup(&a, "hello");
    assert_string_equal(d, "hello");
    assert_null(arena_dup(&a, NULL));
    assert_false(a.oom);
    arena_free(&a);
}

static void the_cap_fails_allocations_and_stays_failed(void **state)
{
    arena a;
    arena_init(&a, 2 * ARENA_BLOCK);
    /* Two blocks fit; a third does not, and then nothing does. */
    assert_non_null(arena_alloc(&a, ARENA_BLOCK));
    assert_non_null(arena_alloc(&a, ARENA_BLOCK));
    assert_int_equal(a.total, 2 * ARENA_BLOCK);
    assert_null(arena_alloc(&a, 8));
    assert_true(a.oom);
    assert_null(arena_alloc(&a, 0));
    assert_null(arena_dup(&a, "x"));
    /* arena_free keeps the cap and clears the flag: the arena may be used again. */
    arena_free(&a);
    assert_false(a.oom);
    assert_int_equal(a.total, 0);
    assert_int_equal(a.max, 2 * ARENA_BLOCK);
    assert_non_null(arena_alloc(&a, 8));
    arena_free(&a);
}

static void a_large_allocation_gets_its_own_block_within_the_cap(void **state)
{
    arena a;
    arena_init(&a, 3 * ARENA_BLOCK);
    char *big = arena_alloc(&a, 2 * ARENA_BLOCK + 8);
    assert_non_null(big);
    memset(big, 'x', 2 * ARENA_BLOCK + 8); /* all of it is usable */
    assert_int_equal(a.total, 2 * ARENA_BLOCK + 8);
    assert_null(arena_alloc(&a, ARENA_BLOCK)); /* a new block would pass the cap */
    assert_true(a.oom);
    arena_free(&a);

    arena_init(&a, ARENA_BLOCK);
    assert_null(arena_alloc(&a, ARENA_BLOCK + 1));
    assert_true(a.oom);
    arena_free(&a);
}

static void vectors_grow_with_zeroed_slots(void **state)
{
    struct item {
        int64_t a, b;
    } *v = NULL;
    size_t n = 0, cap = 0;
    for (int i = 0; i < 1000; i++) {
        struct item *it = vec_push((void **)&v, &n, &cap, sizeof(*v));
        assert_non_null(it);
        assert_int_equal(it->a, 0);
        assert_int_equal(it->b, 0);
        it->a = i;
        it->b = -i;
    }
    assert_int_equal(n, 1000);
    assert_true(cap >= 1000);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(v[i].a + v[i].b, 0);
    free(v);
}

static void the_map_keeps_the_first_index_of_each_key_across_growth(void **state)
{
    static char keys[3000][16];
    smap m = {0};
    for (size_t i = 0; i < 3000; i++) {
        snprintf(keys[i], sizeof(keys[i]), "key-%zu", i);
        assert_int_equal(smap_get_or_add(&m, keys[i], i), i);
    }
    assert_int_equal(m.n, 3000);
    assert_true(m.cap >= 6000);
    for (size_t i = 0; i < 3000; i++) {
        char probe[16];
        snprintf(probe, sizeof(probe), "key-%zu", i); /* equal text, another pointer */
        assert_int_equal(smap_get_or_add(&m, probe, 99999), i);
    }
    assert_int_equal(m.n, 3000);
    smap_free(&m);
    assert_null(m.keys);
    assert_int_equal(m.cap, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocations_are_aligned_and_distinct),
        cmocka_unit_test(the_cap_fails_allocations_and_stays_failed),
        cmocka_unit_test(a_large_allocation_gets_its_own_block_within_the_cap),
        cmocka_unit_test(vectors_grow_with_zeroed_slots),
        cmocka_unit_test(the_map_keeps_the_first_index_of_each_key_across_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
