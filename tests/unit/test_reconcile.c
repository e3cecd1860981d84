/*
 * Unit tests of the reconciler's pure parts (reconcile.h): which events it recovers, and the
 * status every instance reads from the store. The passes themselves run against the fake GitHub
 * in tests/e2e/test_reconcile.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "reconcile.h"
#include "store.h"

static void the_recovered_events_are_those_the_webhook_route_stores(void **state)
{
    /* Dispatched, label back-fill and re-runs: stored by the webhook route. */
    assert_true(reconcile_event_handled("push", NULL));
    assert_true(reconcile_event_handled("push", "anything"));
    static const char *const pr[] = {"opened", "reopened", "synchronize", "closed", "labeled"};
    for (size_t i = 0; i < sizeof(pr) / sizeof(pr[0]); i++)
        assert_true(reconcile_event_handled("pull_request", pr[i]));
    assert_true(reconcile_event_handled("check_run", "rerequested"));
    assert_true(reconcile_event_handled("check_suite", "rerequested"));
    /* Answered 200 ignored, or not routed at all: nothing to recover. */
    assert_false(reconcile_event_handled("pull_request", "assigned"));
    assert_false(reconcile_event_handled("pull_request", "edited"));
    assert_false(reconcile_event_handled("pull_request", NULL));
    assert_false(reconcile_event_handled("check_run", "completed"));
    assert_false(reconcile_event_handled("check_suite", "requested"));
    assert_false(reconcile_event_handled("issues", "opened"));
    assert_false(reconcile_event_handled("ping", NULL));
    assert_false(reconcile_event_handled(NULL, "opened"));
}

static void the_status_is_unknown_before_a_pass_and_read_from_the_store_after(void **state)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    reconcile_status s;
    assert_int_equal(reconcile_status_get(st, &s), CRCR_OK);
    assert_false(s.known);
    assert_int_equal(s.last_ok_at, 0);
    static const char state_json[] = "{\"mark\":1700000000,\"backlog\":\"v1_5\",\"backlog_floor\":"
                                     "1699990000,\"last_ok_at\":1700000001000,\"last_pass_at\":"
                                     "1700000002000,\"missing\":4,\"asked\":3,\"error\":\"boom\"}";
    assert_int_equal(store_kv_put(st, "reconcile:state", state_json, sizeof(state_json) - 1, 0),
                     CRCR_OK);
    assert_int_equal(reconcile_status_get(st, &s), CRCR_OK);
    assert_true(s.known);
    assert_int_equal(s.last_ok_at, 1700000001000LL);
    assert_int_equal(s.last_pass_at, 1700000002000LL);
    assert_int_equal(s.missing, 4);
    assert_int_equal(s.asked, 3);
    assert_true(s.partial);
    assert_string_equal(s.last_error, "boom");
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_recovered_events_are_those_the_webhook_route_stores),
        cmocka_unit_test(the_status_is_unknown_before_a_pass_and_read_from_the_store_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
