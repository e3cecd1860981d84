/*
 * test_http_loop.c - the event loop of outbound exchanges (http_loop.c) against the unit tests'
 * HTTP server (support/ut_httpd.h, a thread per connection), whose handler here holds /hold
 * answers back until the test releases them and counts the requests it is serving at once.
 * So the budget is checked where GitHub would count it: at the server. Covered: every exchange
 * answered on one thread, the budget (never more budgeted requests at the server than the
 * capacity, a raised capacity starting waiting ones at once, an answer's slot refilled before its
 * callback runs, unbudgeted requests passing), the
 * pressure callback, draining (waiting exchanges not sent, those out answered), a malformed
 * request ending through its callback, and stopping with requests out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <pthread.h>

#include "buf.h"
#include "http_loop.h"
#include "ut_httpd.h"

/* ---------------------------------------------------------------- the server */

typedef struct server {
    ut_httpd *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned active, peak, served;
    bool hold; /* /hold requests wait until this is false */
} server;

static server g_srv;

static void handler(void *ctx, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    server *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->active++;
    if (s->active > s->peak)
        s->peak = s->active;
    pthread_cond_broadcast(&s->cv);
    while (strcmp(rq->path, "/hold") == 0 && s->hold)
        pthread_cond_wait(&s->cv, &s->mu);
    s->active--;
    s->served++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    ut_httpd_reply(resp, 200, "ok");
}

static int server_start(void **state)
{
    (void)state;
    server *s = &g_srv;
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* A thread per connection: every held request holds one, and up to six are held at once. */
    s->srv = ut_httpd_start_opts(handler, s, true);
    return 0;
}

static int server_stop(void **state)
{
    (void)state;
    pthread_mutex_lock(&g_srv.mu);
    g_srv.hold = false;
    pthread_cond_broadcast(&g_srv.cv);
    pthread_mutex_unlock(&g_srv.mu);
    ut_httpd_stop(g_srv.srv);
    pthread_cond_destroy(&g_srv.cv);
    pthread_mutex_destroy(&g_srv.mu);
    return 0;
}

static void server_reset(bool hold)
{
    pthread_mutex_lock(&g_srv.mu);
    g_srv.hold = hold;
    g_srv.peak = g_srv.active;
    g_srv.served = 0;
    pthread_cond_broadcast(&g_srv.cv);
    pthread_mutex_unlock(&g_srv.mu);
}

static void server_release(void)
{
    server_reset(false);
}

/* Waits (at most 30 s: a failure, not a timing assumption) until the server serves `n` at once. */
static bool server_wait_active(unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&g_srv.mu);
    int rc = 0;
    while (g_srv.active < n && rc == 0)
        rc = pthread_cond_timedwait(&g_srv.cv, &g_srv.mu, &ts);
    bool ok = g_srv.active >= n;
    pthread_mutex_unlock(&g_srv.mu);
    return ok;
}

static unsigned server_peak(void)
{
    pthread_mutex_lock(&g_srv.mu);
    unsigned v = g_srv.peak;
    pthread_mutex_unlock(&g_srv.mu);
    return v;
}

/* ---------------------------------------------------------------- exchanges */

#define MAX_X 256

typedef struct xs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned done;
    char url[MAX_X][128];
    http_call call[MAX_X];
    buf_t body[MAX_X];
    http_answer ans[MAX_X];
    crcr_err err[MAX_X];
    bool finished[MAX_X];
    int calls[MAX_X]; /* how often each callback ran */
    bool on_loop[MAX_X];
    uint64_t started_at_done[MAX_X]; /* the loop's started count when the callback ran */
    http_loop *loop;
} xs;

typedef struct slot {
    xs *x;
    size_t i;
} slot;

static slot g_slots[MAX_X];

static void on_done(void *ud, crcr_err err)
{
    slot *s = ud;
    xs *x = s->x;
    pthread_mutex_lock(&x->mu);
    x->err[s->i] = err;
    x->finished[s->i] = true;
    x->calls[s->i]++;
    x->on_loop[s->i] = http_loop_on_thread(x->loop);
    http_loop_stats st;
    http_loop_get_stats(x->loop, &st);
    x->started_at_done[s->i] = st.started;
    x->done++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

static xs *xs_new(http_loop *l)
{
    xs *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->loop = l;
    for (size_t i = 0; i < MAX_X; i++)
        buf_init(&x->body[i], 4096);
    return x;
}

static void xs_free(xs *x)
{
    for (size_t i = 0; i < MAX_X; i++)
        buf_free(&x->body[i]);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

static void submit(xs *x, size_t i, const char *path, bool budgeted)
{
    snprintf(x->url[i], sizeof(x->url[i]), "%s%s", ut_httpd_base(g_srv.srv), path);
    x->call[i] = (http_call){.method = "GET",
                             .url = x->url[i],
                             .allow_http = true,
                             .connect_timeout_ms = 5000,
                             .timeout_ms = 30000};
    x->ans[i] = (http_answer){.body = &x->body[i]};
    g_slots[i] = (slot){x, i};
    assert_int_equal(
        http_loop_submit(x->loop, &x->call[i], &x->ans[i], budgeted, on_done, &g_slots[i]),
        CRCR_OK);
}

static bool wait_done(xs *x, unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&x->mu);
    int rc = 0;
    while (x->done < n && rc == 0)
        rc = pthread_cond_timedwait(&x->cv, &x->mu, &ts);
    bool ok = x->done >= n;
    pthread_mutex_unlock(&x->mu);
    return ok;
}

/* Waits until the loop reports `inflight` budgeted exchanges out and `waiting` waiting. */
static bool wait_stats(http_loop *l, long inflight, long waiting)
{
    for (int i = 0; i < 3000; i++) {
        http_loop_stats st;
        http_loop_get_stats(l, &st);
        if (st.inflight_budgeted == inflight && st.waiting == waiting)
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_many_exchanges_answered_on_the_loop_thread(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(64, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(false);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 200; i++)
        submit(x, i, "/ok", i % 2 == 0);
    assert_true(wait_done(x, 200));
    for (size_t i = 0; i < 200; i++) {
        assert_int_equal(x->err[i], CRCR_OK);
        assert_int_equal(x->ans[i].status, 200);
        assert_string_equal(buf_cstr(&x->body[i]), "ok");
        assert_int_equal(x->calls[i], 1);
        assert_true(x->on_loop[i]);
    }
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.started, 200);
    assert_int_equal(st.completed, 200);
    assert_true(st.peak_budgeted <= 64);
    http_loop_free(l);
    xs_free(x);
}

static void test_budget_is_never_exceeded_at_the_server(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(3, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 10; i++)
        submit(x, i, "/hold", true);
    assert_true(server_wait_active(3));
    assert_true(wait_stats(l, 3, 7));
    assert_int_equal(server_peak(), 3);
    /* A larger budget starts waiting exchanges at once. */
    http_loop_set_capacity(l, 6);
    assert_true(server_wait_active(6));
    assert_true(wait_stats(l, 6, 4));
    assert_int_equal(server_peak(), 6);
    /* A smaller one starts none until those out fall below it. */
    http_loop_set_capacity(l, 2);
    server_release();
    assert_true(wait_done(x, 10));
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(x->ans[i].status, 200);
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.peak_budgeted, 6);
    assert_int_equal(st.capacity, 2);
    http_loop_free(l);
    xs_free(x);
}

/* A loop with a budget of one: exchange 0 (/hold) is out and held at the server, and exchange 1
 * (budgeted, to `path`) waits for its slot. The caller frees x->loop and x. */
static xs *one_out_one_waiting(const char *path)
{
    char err[128];
    http_loop *l = http_loop_new(1, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    submit(x, 0, "/hold", true);
    submit(x, 1, path, true);
    assert_true(server_wait_active(1));
    assert_true(wait_stats(l, 1, 1));
    return x;
}

/* An answer's budget slot goes to the next waiting exchange before the answered one's callback
 * runs (the callback's work, e.g. recording an outcome, does not delay the next request). */
static void test_a_freed_slot_is_refilled_before_the_callback_runs(void **state)
{
    /* The first is answered only once the second waits for its slot. */
    xs *x = one_out_one_waiting("/ok");
    http_loop *l = x->loop;
    server_release();
    assert_true(wait_done(x, 2));
    assert_int_equal(x->ans[0].status, 200);
    assert_int_equal(x->ans[1].status, 200);
    assert_int_equal(x->started_at_done[0], 2);
    http_loop_free(l);
    xs_free(x);
}

static void test_unbudgeted_exchanges_pass_a_full_budget(void **state)
{
    xs *x = one_out_one_waiting("/hold");
    http_loop *l = x->loop;
    submit(x, 2, "/ok", false); /* not budgeted: answered while the budget is full */
    assert_true(wait_done(x, 1));
    assert_true(x->finished[2]);
    assert_int_equal(x->ans[2].status, 200);
    server_release();
    assert_true(wait_done(x, 3));
    http_loop_free(l);
    xs_free(x);
}

static atomic_int g_pressure;

static void on_pressure(void *ud)
{
    atomic_fetch_add(&g_pressure, 1);
}

static void test_pressure_is_told_when_exchanges_wait_and_when_idle(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(1, 64, err, sizeof(err));
    assert_non_null(l);
    atomic_store(&g_pressure, 0);
    http_loop_set_pressure(l, on_pressure, NULL);
    server_reset(true);
    xs *x = xs_new(l);
    submit(x, 0, "/hold", true);
    submit(x, 1, "/hold", true);
    assert_true(wait_stats(l, 1, 1));
    assert_true(atomic_load(&g_pressure) >= 1); /* one waits */
    int before = atomic_load(&g_pressure);
    server_release();
    assert_true(wait_done(x, 2));
    for (int i = 0; i < 3000 && atomic_load(&g_pressure) == before; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_true(atomic_load(&g_pressure) > before); /* idle again */
    http_loop_free(l);
    xs_free(x);
}

static void test_drain_ends_waiting_exchanges_unsent_and_answers_those_out(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 5; i++)
        submit(x, i, "/hold", true);
    assert_true(wait_stats(l, 2, 3));
    http_loop_drain(l);
    assert_true(wait_done(x, 3));
    submit(x, 5, "/ok", true);  /* after the drain: not sent either */
    submit(x, 6, "/ok", false); /* unbudgeted: still sent */
    assert_true(wait_done(x, 5));
    server_release();
    assert_true(wait_done(x, 7));
    unsigned sent = 0, unsent = 0;
    for (size_t i = 0; i < 7; i++) {
        if (x->err[i] == CRCR_E_STATE) {
            unsent++;
            assert_false(x->ans[i].sent);
            assert_int_equal(x->ans[i].status, 0);
        } else {
            assert_int_equal(x->err[i], CRCR_OK);
            assert_int_equal(x->ans[i].status, 200);
            sent++;
        }
    }
    assert_int_equal(sent, 3);
    assert_int_equal(unsent, 4);
    assert_int_equal(x->err[5], CRCR_E_STATE);
    assert_int_equal(x->err[6], CRCR_OK);
    http_loop_free(l);
    xs_free(x);
}

static void test_malformed_request_ends_through_its_callback(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    xs *x = xs_new(l);
    x->call[0] = (http_call){.method = "BREW", .url = "http://127.0.0.1:1/", .allow_http = true};
    x->ans[0] = (http_answer){.body = &x->body[0]};
    g_slots[0] = (slot){x, 0};
    assert_int_equal(http_loop_submit(l, &x->call[0], &x->ans[0], true, on_done, &g_slots[0]),
                     CRCR_OK);
    assert_true(wait_done(x, 1));
    assert_int_equal(x->err[0], CRCR_E_INVALID);
    assert_false(x->ans[0].sent);
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.inflight_budgeted, 0);
    http_loop_free(l);
    xs_free(x);
}

static void test_free_with_exchanges_out_ends_each_once(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 4; i++)
        submit(x, i, "/hold", true);
    assert_true(wait_stats(l, 2, 2));
    http_loop_free(l);
    assert_int_equal(x->done, 4);
    unsigned network = 0, unsent = 0;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(x->calls[i], 1);
        network += x->err[i] == CRCR_E_NETWORK;
        unsent += x->err[i] == CRCR_E_STATE;
    }
    assert_int_equal(network, 2);
    assert_int_equal(unsent, 2);
    server_release();
    xs_free(x);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_exchanges_answered_on_the_loop_thread),
        cmocka_unit_test(test_budget_is_never_exceeded_at_the_server),
        cmocka_unit_test(test_a_freed_slot_is_refilled_before_the_callback_runs),
        cmocka_unit_test(test_unbudgeted_exchanges_pass_a_full_budget),
        cmocka_unit_test(test_pressure_is_told_when_exchanges_wait_and_when_idle),
        cmocka_unit_test(test_drain_ends_waiting_exchanges_unsent_and_answers_those_out),
        cmocka_unit_test(test_malformed_request_ends_through_its_callback),
        cmocka_unit_test(test_free_with_exchanges_out_ends_each_once),
    };
    int rc = cmocka_run_group_tests(tests, server_start, server_stop);
    curl_global_cleanup();
    return rc;
}
