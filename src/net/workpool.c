/* workpool.c - see workpool.h.
 *
 * Idle threads wait on a stack, each on a condition variable of its own, and an item wakes the
 * one that went idle last (LIFO). One shared condition variable woke them in turn (glibc signals
 * its oldest waiter), so each request of a quiet relay ran on a thread that had not run for
 * longest: cold caches, and with more threads than glibc has arenas (8 per CPU) often a malloc
 * arena no thread had touched lately, whose memory the request faulted in again. Counted by perf
 * stat over six warm fan-outs to 100 repositories: 201-263 page faults of the relay per fan-out
 * (most in the webhook's handler thread, making its 100 jobs), 11.6 us each on the bench's VM;
 * 37 on PostgreSQL and 67 on SQLite with this stack, 34-40 with one malloc arena for all threads
 * (a test, not kept: it slowed the loaded relay). Under load every thread works anyway; the order
 * only matters for the ones that wait (bench/RESULTS.md).
 */
#include "workpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "thread_sched.h"

typedef struct wp_thread {
    struct workpool *p;
    pthread_t th;
    pthread_cond_t cv;
    bool woken; /* taken off the idle stack by workpool_submit */
} wp_thread;

struct workpool {
    pthread_mutex_t mu;
    void **queue; /* ring of `cap` */
    unsigned cap, head, n;
    wp_thread *threads; /* `started` of them run */
    unsigned started;
    bool joined;    /* workpool_stop joined them */
    unsigned *idle; /* stack of indexes into `threads`, the last idle on top */
    unsigned n_idle;
    int nice;
    bool stopping;
    workpool_fn fn;
};

/* Waits on the idle stack until workpool_submit or workpool_stop wakes this thread (p->mu held).
 * Once the pool stops nothing takes from the stack again (submissions are refused). */
static void wait_idle(workpool *p, wp_thread *t)
{
    t->woken = false;
    p->idle[p->n_idle++] = (unsigned)(t - p->threads);
    while (!t->woken && !p->stopping)
        pthread_cond_wait(&t->cv, &p->mu);
}

static void *worker(void *arg)
{
    wp_thread *t = arg;
    workpool *p = t->p;
    /* A failure leaves the default priority. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
    thread_sched_batch(); /* queue work: a woken pool thread does not preempt (thread_sched.c) */
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->n && !p->stopping)
            wait_idle(p, t);
        if (!p->n)
            break; /* stopping, nothing left */
        void *item = p->queue[p->head];
        p->head = (p->head + 1) % p->cap;
        p->n--;
        bool cancelled = p->stopping;
        pthread_mutex_unlock(&p->mu);
        p->fn(item, cancelled);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The pool, its queue, its threads' records and idle stack are owned by the caller until
 * workpool_free. */
workpool *workpool_start(unsigned threads, unsigned queue, int nice, workpool_fn fn)
{
    workpool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    if (!threads)
        threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    p->cap = queue ? queue : 1;
    p->nice = nice;
    p->fn = fn;
    p->queue = calloc(p->cap, sizeof(*p->queue));
    p->threads = calloc(threads, sizeof(*p->threads));
    p->idle = calloc(threads, sizeof(*p->idle));
    if (!p->queue || !p->threads || !p->idle) {
        workpool_free(p);
        return NULL;
    }
    for (unsigned i = 0; i < threads; i++) {
        wp_thread *t = &p->threads[i];
        t->p = p;
        pthread_cond_init(&t->cv, NULL);
        if (pthread_create(&t->th, NULL, worker, t) != 0) {
            pthread_cond_destroy(&t->cv);
            workpool_stop(p);
            workpool_free(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

bool workpool_submit(workpool *p, void *item, void (*accepted)(void *item))
{
    pthread_mutex_lock(&p->mu);
    if (p->stopping || p->n >= p->cap) {
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    if (accepted)
        accepted(item);
    p->queue[(p->head + p->n) % p->cap] = item;
    p->n++;
    if (p->n_idle) {
        wp_thread *t = &p->threads[p->idle[--p->n_idle]];
        t->woken = true;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return true;
}

unsigned workpool_waiting(workpool *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->n;
    pthread_mutex_unlock(&p->mu);
    return n;
}

unsigned workpool_idle(workpool *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->n_idle;
    pthread_mutex_unlock(&p->mu);
    return n;
}

bool workpool_stopping(workpool *p)
{
    pthread_mutex_lock(&p->mu);
    bool stopping = p->stopping;
    pthread_mutex_unlock(&p->mu);
    return stopping;
}

void workpool_stop(workpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    p->n_idle = 0;
    for (unsigned i = 0; i < p->started; i++)
        pthread_cond_signal(&p->threads[i].cv);
    bool joined = p->joined;
    p->joined = true;
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; !joined && i < p->started; i++)
        pthread_join(p->threads[i].th, NULL);
}

void workpool_free(workpool *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->started; i++)
        pthread_cond_destroy(&p->threads[i].cv);
    free(p->queue);
    free(p->threads);
    free(p->idle);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
