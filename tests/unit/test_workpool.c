/* Unit tests for workpool.c: bounded queue, every item finished once, cancellation at stop. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "workpool.h"

/* The pool's single item type: records how it was finished; the gate holds the threads. */
typedef struct item {
    int runs, cancels, accepted;
} item;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static bool g_open;
static int g_running;

static void run(void *v, bool cancelled)
{
    item *it = v;
    pthread_mutex_lock(&g_mu);
    if (cancelled) {
        it->cancels++;
    } else {
        g_running++;
        pthread_cond_broadcast(&g_cv);
        while (!g_open)
            pthread_cond_wait(&g_cv, &g_mu);
        it->runs++;
    }
    pthread_mutex_unlock(&g_mu);
}

static void mark_accepted(void *v)
{
    ((item *)v)->accepted++;
}

static void wait_running(int n)
{
    pthread_mutex_lock(&g_mu);
    while (g_running < n)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

static void open_gate(void)
{
    pthread_mutex_lock(&g_mu);
    g_open = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static int reset(void **state)
{
    g_open = false;
    g_running = 0;
    return 0;
}

static void a_full_queue_refuses_and_everything_runs_once(void **state)
{
    workpool *p = workpool_start(2, 3, 10, run);
    assert_non_null(p);
    item items[8];
    memset(items, 0, sizeof(items));
    /* Two run (held at the gate), three wait, the sixth is refused. */
    assert_true(workpool_submit(p, &items[0], mark_accepted));
    assert_true(workpool_submit(p, &items[1], mark_accepted));
    wait_running(2);
    for (int i = 2; i < 5; i++)
        assert_true(workpool_submit(p, &items[i], mark_accepted));
    assert_int_equal(workpool_waiting(p), 3);
    assert_false(workpool_submit(p, &items[5], mark_accepted));
    assert_int_equal(items[5].accepted, 0); /* refused items are not touched */
    open_gate();
    workpool_stop(p);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(items[i].accepted, 1);
        assert_int_equal(items[i].runs + items[i].cancels, 1);
    }
    assert_false(workpool_submit(p, &items[6], NULL)); /* stopped */
    workpool_free(p);
}

typedef struct stopper {
    workpool *p;
} stopper;

static void *stop_it(void *arg)
{
    workpool_stop(((stopper *)arg)->p);
    return NULL;
}

static void stop_cancels_what_waits(void **state)
{
    workpool *p = workpool_start(1, 4, 0, run);
    item items[4];
    memset(items, 0, sizeof(items));
    assert_true(workpool_submit(p, &items[0], NULL));
    wait_running(1);
    for (int i = 1; i < 4; i++)
        assert_true(workpool_submit(p, &items[i], NULL));
    /* Stop while the first item is held: the others are cancelled, the first still runs. */
    stopper s = {p};
    pthread_t t;
    pthread_create(&t, NULL, stop_it, &s);
    while (!workpool_stopping(p))
        sched_yield(); /* until stop() has begun: from then on what waits is cancelled */
    open_gate();
    pthread_join(t, NULL);
    assert_int_equal(items[0].runs, 1);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(items[i].runs, 0);
        assert_int_equal(items[i].cancels, 1);
    }
    workpool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(a_full_queue_refuses_and_everything_runs_once, reset),
        cmocka_unit_test_setup(stop_cancels_what_waits, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
