/* workpool.c - see workpool.h. */
#include "workpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct workpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void **queue; /* ring of `cap` */
    unsigned cap, head, n;
    pthread_t *threads;
    unsigned started;
    int nice;
    bool stopping;
    workpool_fn fn;
};

static void *worker(void *arg)
{
    workpool *p = arg;
    /* A failure leaves the default priority. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->n && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
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

/* The pool, its queue and thread handles are owned by the caller until workpool_free. */
workpool *workpool_start(unsigned threads, unsigned queue, int nice, workpool_fn fn)
{
    workpool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->cap = queue ? queue : 1;
    p->nice = nice;
    p->fn = fn;
    p->queue = calloc(p->cap, sizeof(*p->queue));
    p->threads = calloc(threads ? threads : 1, sizeof(*p->threads));
    if (!p->queue || !p->threads) {
        workpool_free(p);
        return NULL;
    }
    for (unsigned i = 0; i < (threads ? threads : 1); i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
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
    pthread_cond_signal(&p->cv);
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
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}

void workpool_free(workpool *p)
{
    if (!p)
        return;
    free(p->queue);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
