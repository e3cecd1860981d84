/* Unit tests for workpool.c: bounded queue, every item finished once, cancellation at stop, the
 * threads' scheduling. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

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

/* Records the thread that ran it. */
typedef struct tagged {
    pthread_t who;
    bool done;
} tagged;

static void run_tagged(void *v, bool cancelled)
{
    tagged *t = v;
    pthread_mutex_lock(&g_mu);
    if (!cancelled)
        t->who = pthread_self();
    t->done = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void wait_done(tagged *t)
{
    pthread_mutex_lock(&g_mu);
    while (!t->done)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

static void wait_all_idle(workpool *p, unsigned n)
{
    while (workpool_idle(p) < n)
        sched_yield(); /* until each thread waits: the order below is then the pool's choice */
}

/* One item at a time on a pool of eight: each goes to the thread that went idle last, so a quiet
 * relay's requests keep running on one warm thread instead of going round all of them. With one
 * shared condition variable (glibc wakes its oldest waiter) the eight items ran on eight
 * threads. */
static void items_one_at_a_time_run_on_the_thread_idle_last(void **state)
{
    workpool *p = workpool_start(8, 8, 0, run_tagged);
    assert_non_null(p);
    tagged t[8];
    memset(t, 0, sizeof(t));
    wait_all_idle(p, 8);
    for (int i = 0; i < 8; i++) {
        assert_true(workpool_submit(p, &t[i], NULL));
        wait_done(&t[i]);
        wait_all_idle(p, 8);
    }
    for (int i = 1; i < 8; i++)
        assert_true(pthread_equal(t[i].who, t[0].who));
    workpool_stop(p);
    workpool_stop(p); /* a second stop joins nothing twice */
    workpool_free(p);
}

/* How the thread that ran an item was scheduled. */
typedef struct sched_seen {
    int policy, nice, nice_errno;
    bool done;
} sched_seen;

static void run_sched(void *v, bool cancelled)
{
    sched_seen *s = v;
    pthread_mutex_lock(&g_mu);
    if (!cancelled) {
        s->policy = sched_getscheduler(0);
        errno = 0;
        s->nice = getpriority(PRIO_PROCESS, 0); /* the calling thread's (Linux) */
        s->nice_errno = errno;
    }
    s->done = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* The pool's threads are throughput work: SCHED_BATCH (a woken thread does not preempt the one
 * running, thread_sched.c), at the nice value the pool was started with. */
static void threads_run_batch_at_their_nice_value(void **state)
{
    workpool *p = workpool_start(2, 4, 7, run_sched);
    assert_non_null(p);
    sched_seen s[4];
    memset(s, 0, sizeof(s));
    for (int i = 0; i < 4; i++)
        assert_true(workpool_submit(p, &s[i], NULL));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 4; i++)
        while (!s[i].done)
            pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(s[i].policy, SCHED_BATCH);
        assert_int_equal(s[i].nice_errno, 0);
        assert_int_equal(s[i].nice, 7);
    }
    assert_int_equal(sched_getscheduler(0), SCHED_OTHER); /* the caller's is its own */
    workpool_stop(p);
    workpool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(a_full_queue_refuses_and_everything_runs_once, reset),
        cmocka_unit_test_setup(stop_cancels_what_waits, reset),
        cmocka_unit_test_setup(items_one_at_a_time_run_on_the_thread_idle_last, reset),
        cmocka_unit_test_setup(threads_run_batch_at_their_nice_value, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
