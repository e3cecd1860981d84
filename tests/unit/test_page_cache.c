/* Unit tests for page_cache.c: the HUD's bounded answer cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "page_cache.h"

static page_entry meta(int status)
{
    page_entry m = {.status = status, .content_type = "text/html", .n_headers = 1};
    snprintf(m.header_name[0], sizeof(m.header_name[0]), "Content-Security-Policy");
    snprintf(m.header_value[0], sizeof(m.header_value[0]), "script-src 'self'");
    return m;
}

static void an_answer_lives_for_its_ttl_with_its_headers(void **state)
{
    page_cache *c = page_cache_new(2000, 1 << 20);
    assert_non_null(c);
    page_entry m = meta(200), got;
    page_cache_put(c, "GET /crcr", 1000, &m, "<html>a</html>", 14);
    buf_t b;
    buf_init(&b, 1 << 20);
    assert_int_equal(page_cache_get(c, "GET /crcr", 2999, &got, &b), 1);
    assert_int_equal(b.len, 14);
    assert_memory_equal(b.data, "<html>a</html>", 14);
    assert_int_equal(got.status, 200);
    assert_string_equal(got.content_type, "text/html");
    assert_int_equal(got.n_headers, 1);
    assert_string_equal(got.header_value[0], "script-src 'self'");
    buf_reset(&b);
    assert_int_equal(page_cache_get(c, "GET /crcr", 3000, &got, &b), 0);   /* expired */
    assert_int_equal(page_cache_get(c, "GET /crcr?x", 1500, &got, &b), 0); /* another key */
    uint64_t hits = 0, misses = 0;
    page_cache_counts(c, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(misses, 2);
    /* A newer answer replaces the older one of its key. */
    page_cache_put(c, "GET /crcr", 4000, &m, "new", 3);
    assert_int_equal(page_cache_get(c, "GET /crcr", 4001, &got, &b), 1);
    assert_string_equal(b.data, "new");
    buf_free(&b);
    page_cache_free(c);
}

static void memory_and_slots_are_bounded(void **state)
{
    /* 64 KiB for all: an answer over a quarter of it is not kept; older ones make room. */
    page_cache *c = page_cache_new(60000, 64 * 1024);
    page_entry m = meta(200), got;
    static char big[20 * 1024], mid[10 * 1024];
    memset(big, 'b', sizeof(big));
    memset(mid, 'm', sizeof(mid));
    buf_t b;
    buf_init(&b, 1 << 20);
    page_cache_put(c, "big", 1, &m, big, sizeof(big));
    assert_int_equal(page_cache_get(c, "big", 2, &got, &b), 0);
    char key[32];
    for (int i = 0; i < 10; i++) { /* 100 KiB offered, 64 KiB kept: the oldest go */
        snprintf(key, sizeof(key), "k%d", i);
        page_cache_put(c, key, 10 + i, &m, mid, sizeof(mid));
    }
    assert_int_equal(page_cache_get(c, "k0", 30, &got, &b), 0);
    assert_int_equal(page_cache_get(c, "k9", 30, &got, &b), 1);
    int kept = 0;
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        buf_reset(&b);
        kept += page_cache_get(c, key, 30, &got, &b);
    }
    assert_true(kept <= 6 && kept >= 5);
    /* More keys than slots: still at most PAGE_CACHE_SLOTS, the newest kept. */
    for (int i = 0; i < (int)PAGE_CACHE_SLOTS + 10; i++) {
        snprintf(key, sizeof(key), "s%d", i);
        page_cache_put(c, key, 100 + i, &m, "x", 1);
    }
    snprintf(key, sizeof(key), "s%d", (int)PAGE_CACHE_SLOTS + 9);
    buf_reset(&b);
    assert_int_equal(page_cache_get(c, key, 200, &got, &b), 1);
    buf_reset(&b);
    assert_int_equal(page_cache_get(c, "s0", 200, &got, &b), 0);
    /* A body that does not fit the caller's buffer is a miss, not a cut copy. */
    buf_t small;
    buf_init(&small, 4);
    page_cache_put(c, "long", 300, &m, "0123456789", 10);
    assert_int_equal(page_cache_get(c, "long", 301, &got, &small), 0);
    buf_free(&small);
    buf_free(&b);
    page_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_answer_lives_for_its_ttl_with_its_headers),
        cmocka_unit_test(memory_and_slots_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
