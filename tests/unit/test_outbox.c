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

static void default_schedule_spans_about_a_day(void **state)
{
    /* CRCR_MAX_ATTEMPTS=12 with the defaults (60 s base, 6 h cap): 11 waits of nominally
     * 60 s .. 4.3 h, then 6 h twice = 20.5 h; jitter takes each down to half at most. */
    int64_t lo = 0, hi = 0;
    for (int a = 1; a <= 11; a++) {
        lo += outbox_backoff_ms(60000, 21600000, a, 0.0);
        hi += outbox_backoff_ms(60000, 21600000, a, 0.9999999);
    }
    assert_true(lo >= 10 * 3600 * 1000LL);
    assert_true(hi <= 21 * 3600 * 1000LL && hi >= 20 * 3600 * 1000LL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(success_and_transient_answers),
        cmocka_unit_test(rate_limits_pause_the_installation),
        cmocka_unit_test(client_errors_are_permanent),
        cmocka_unit_test(backoff_doubles_with_bounded_jitter),
        cmocka_unit_test(default_schedule_spans_about_a_day),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
