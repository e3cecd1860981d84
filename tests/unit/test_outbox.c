/* Unit tests for the outbox retry policy: how answers are classified and how long to wait. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "outbox.h"

static void success_and_transient_answers(void **state)
{
    assert_int_equal(outbox_classify(204, -1, -1, ""), OUTBOX_DONE);
    assert_int_equal(outbox_classify(201, -1, -1, ""), OUTBOX_DONE);
    assert_int_equal(outbox_classify(0, -1, -1, NULL), OUTBOX_RETRY);
    assert_int_equal(outbox_classify(500, -1, -1, ""), OUTBOX_RETRY);
    assert_int_equal(outbox_classify(502, -1, -1, ""), OUTBOX_RETRY);
    assert_int_equal(outbox_classify(503, 10, -1, ""), OUTBOX_RETRY);
    /* A refused credential is retried (the client already renewed the token once). */
    assert_int_equal(outbox_classify(401, -1, -1, "{\"message\":\"Bad credentials\"}"),
                     OUTBOX_RETRY);
}

static void rate_limits_pause_the_installation(void **state)
{
    assert_int_equal(outbox_classify(429, -1, -1, ""), OUTBOX_RATE_LIMIT);
    assert_int_equal(outbox_classify(403, 30, -1, ""), OUTBOX_RATE_LIMIT);
    assert_int_equal(outbox_classify(403, -1, 0, ""), OUTBOX_RATE_LIMIT);
    assert_int_equal(
        outbox_classify(403, -1, 4000,
                        "{\"message\":\"You have exceeded a secondary rate limit. Please wait\"}"),
        OUTBOX_RATE_LIMIT);
}

static void client_errors_are_permanent(void **state)
{
    assert_int_equal(outbox_classify(404, -1, -1, "{\"message\":\"Not Found\"}"), OUTBOX_PERMANENT);
    assert_int_equal(outbox_classify(422, -1, -1, "{\"message\":\"client_payload is too large\"}"),
                     OUTBOX_PERMANENT);
    assert_int_equal(outbox_classify(403, -1, 4999, "{\"message\":\"Resource not accessible\"}"),
                     OUTBOX_PERMANENT);
    assert_int_equal(outbox_classify(400, -1, -1, ""), OUTBOX_PERMANENT);
}

static void backoff_doubles_with_bounded_jitter(void **state)
{
    /* Jitter keeps the delay within [d/2, d]. */
    assert_int_equal(outbox_backoff_ms(1000, 60000, 1, 0.0), 500);
    assert_int_equal(outbox_backoff_ms(1000, 60000, 1, 0.999999), 999);
    assert_int_equal(outbox_backoff_ms(1000, 60000, 2, 0.0), 1000);
    assert_int_equal(outbox_backoff_ms(1000, 60000, 3, 0.0), 2000);
    /* Capped. */
    assert_int_equal(outbox_backoff_ms(1000, 60000, 30, 0.0), 30000);
    int64_t hi = outbox_backoff_ms(1000, 60000, 30, 0.9999999);
    assert_true(hi <= 60000 && hi > 59000);
}

static void default_schedule_retries_quickly_then_spans_about_a_day(void **state)
{
    /* CRCR_MAX_ATTEMPTS=12 with the defaults (1 s base, 6 h cap): 11 waits. The quick retries
     * 1 s .. 64 s (2 min in all: a bad gateway costs seconds), then the long tail 2 h 8 min,
     * 4 h 16 min, 6 h, 6 h: 18 h 26 min nominal; jitter takes each wait down to half at most. */
    const int64_t nominal[11] = {1000,  2000,    4000,     8000,     16000,   32000,
                                 64000, 7680000, 15360000, 21600000, 21600000};
    int64_t lo = 0, hi = 0, quick = 0;
    for (int a = 1; a <= 11; a++) {
        int64_t l = outbox_backoff_ms(1000, 21600000, a, 0.0);
        int64_t h = outbox_backoff_ms(1000, 21600000, a, 0.9999999);
        assert_int_equal(l, nominal[a - 1] / 2);
        assert_true(h <= nominal[a - 1] && h > nominal[a - 1] - nominal[a - 1] / 1000 - 1);
        lo += l;
        hi += h;
        if (a <= 7)
            quick += h;
    }
    assert_true(quick <= 127000); /* 7 quick retries within ~2 minutes */
    assert_true(outbox_backoff_ms(1000, 21600000, 1, 0.9999999) <= 1000); /* about 1 s */
    assert_true(hi >= 18 * 3600 * 1000LL && hi <= 19 * 3600 * 1000LL);
    assert_true(lo >= 9 * 3600 * 1000LL);
}

static void a_base_beyond_the_quick_range_is_kept(void **state)
{
    /* A first delay longer than the quick range (tests that park a failed row) stays as set. */
    assert_int_equal(outbox_backoff_ms(600000, 600000, 1, 0.9999999), 599999);
    assert_int_equal(outbox_backoff_ms(600000, 600000, 5, 0.0), 300000);
    /* Short caps (tests) keep every delay under the cap. */
    for (int a = 1; a <= 40; a++)
        assert_true(outbox_backoff_ms(200, 2000, a, 0.9999999) <= 2000);
}

static void rate_limits_without_a_time_wait_at_least_a_minute_then_back_off(void **state)
{
    /* GitHub: no Retry-After and no x-ratelimit-reset: wait at least a minute, then back off. */
    assert_int_equal(outbox_rate_limit_pause_ms(21600000, 1, 0.0), 60000);
    assert_int_equal(outbox_rate_limit_pause_ms(21600000, 1, 0.9999999), 60000);
    assert_int_equal(outbox_rate_limit_pause_ms(21600000, 2, 0.0), 60000);
    assert_true(outbox_rate_limit_pause_ms(21600000, 2, 0.9999999) > 119000);
    assert_int_equal(outbox_rate_limit_pause_ms(21600000, 4, 0.0), 240000);
    /* However small CRCR_RETRY_MAX_MS is (tests). */
    assert_int_equal(outbox_rate_limit_pause_ms(2000, 1, 0.5), 60000);
    assert_int_equal(outbox_rate_limit_pause_ms(2000, 9, 0.9999999), 60000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(success_and_transient_answers),
        cmocka_unit_test(rate_limits_pause_the_installation),
        cmocka_unit_test(client_errors_are_permanent),
        cmocka_unit_test(backoff_doubles_with_bounded_jitter),
        cmocka_unit_test(default_schedule_retries_quickly_then_spans_about_a_day),
        cmocka_unit_test(a_base_beyond_the_quick_range_is_kept),
        cmocka_unit_test(rate_limits_without_a_time_wait_at_least_a_minute_then_back_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
