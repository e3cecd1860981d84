/*
 * gh_budget.c - this instance's share of the App's GitHub budget; see gh_budget.h.
 *
 * One thread, woken by the loop's pressure callback (more requests wait, or the loop went idle)
 * and by its own timer. Everything it decides comes from the loop's counters: it never waits for
 * GitHub, and its store calls (one small transaction each) happen only when the share changes.
 *
 * A store of one serving process (SQLite: store_gh_slots_shared false) has no one to share with:
 * the instance holds the whole budget from the start and no thread runs. Growing a share step by
 * step there only delayed requests: a fan-out's rows are claimed 16 at a time, so its demand
 * arrived in steps and each step waited for the thread (a warm fan-out to 100 repositories took
 * 128-131 ms instead of 108-110 in one run of three; bench/RESULTS.md, 2026-12-03 05:40).
 */
#include "gh_budget.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "http_loop.h"
#include "log.h"

/* The thread's sleep while nothing changes. */
#define GH_BUDGET_POLL_MS 1000

struct gh_budget {
    store *st;
    gh_client *gh;
    http_loop *loop;
    long total;
    bool fixed; /* the whole budget, no thread (a store of one serving process) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    bool poked; /* the loop reported pressure since the thread last looked */
    atomic_long share;
    atomic_uint_fast64_t changes, refusals;
    atomic_long expect;            /* gh_budget_expect: requests about to be asked for */
    atomic_int_fast64_t expect_at; /* when (clock_mono_ms), 0: none */
};

static void on_pressure(void *ud)
{
    gh_budget *b = ud;
    http_loop_stats ls;
    http_loop_get_stats(b->loop, &ls);
    /* More demand while the whole budget is held already: nothing to ask for. */
    if (atomic_load(&b->share) >= b->total && ls.inflight_budgeted + ls.waiting > 0)
        return;
    pthread_mutex_lock(&b->mu);
    b->poked = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Asks the store for `want`; the loop gets the new share after a growth, before a shrink. */
static void reshare(gh_budget *b, long want)
{
    long share = atomic_load(&b->share);
    if (want < share)
        http_loop_set_capacity(b->loop, want);
    long got = share;
    crcr_err e = store_gh_slots(b->st, b->total, want, &got);
    atomic_fetch_add(&b->changes, 1);
    if (e) {
        /* The store keeps the old share: a smaller loop capacity is still within it. */
        LOG_WARN("github.budget_unavailable", "error", crcr_strerror(e), NULL);
        return;
    }
    if (got < want)
        atomic_fetch_add(&b->refusals, 1);
    atomic_store(&b->share, got);
    http_loop_set_capacity(b->loop, got);
}

static void *keeper(void *arg)
{
    gh_budget *b = arg;
    int64_t surplus_since = 0;
    pthread_mutex_lock(&b->mu);
    while (!b->stopping) {
        b->poked = false;
        pthread_mutex_unlock(&b->mu);

        http_loop_stats ls;
        http_loop_get_stats(b->loop, &ls);
        long share = atomic_load(&b->share);
        int64_t now = clock_mono_ms();
        /* Requests announced by gh_budget_expect count as waiting for GH_BUDGET_IDLE_MS, unless
         * more wait already (they are among them once asked for). */
        int64_t at = atomic_load(&b->expect_at);
        long expected = at && now - at < GH_BUDGET_IDLE_MS ? atomic_load(&b->expect) : 0;
        long waiting = ls.waiting > expected ? ls.waiting : expected;
        long demand = ls.inflight_budgeted + waiting;
        long want = share;
        if (waiting > 0 && share < b->total && (ls.waiting > 0 || demand > share)) {
            want = demand < b->total ? demand : b->total;
            surplus_since = 0;
        } else if (share > demand) {
            if (!surplus_since)
                surplus_since = now;
            if (now - surplus_since >= GH_BUDGET_IDLE_MS) {
                want = demand > ls.inflight_budgeted ? demand : ls.inflight_budgeted;
                surplus_since = 0;
            }
        } else {
            surplus_since = 0;
        }
        if (want != share)
            reshare(b, want);

        share = atomic_load(&b->share);
        int64_t wait = GH_BUDGET_POLL_MS;
        if (waiting > 0 && share < b->total)
            wait = GH_BUDGET_RETRY_MS; /* others hold the rest: ask again soon */
        else if (surplus_since)
            wait = GH_BUDGET_IDLE_MS - (now - surplus_since) + 1;
        else if (share > 0)
            wait = GH_BUDGET_RETRY_MS; /* demand falls without a word from the loop: look */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (wait % 1000) * 1000000;
        ts.tv_sec += (time_t)(wait / 1000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_mutex_lock(&b->mu);
        if (!b->poked && !b->stopping)
            (void)pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Owner: the caller, through gh_budget_stop. */
gh_budget *gh_budget_start(store *st, gh_client *gh, long total, char *err, size_t errsz)
{
    gh_budget *b = calloc(1, sizeof(*b));
    if (!b) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    b->st = st;
    b->gh = gh;
    b->loop = gh_loop(gh);
    b->total = total > 0 ? total : 1;
    if (!store_gh_slots_shared(st)) {
        b->fixed = true;
        atomic_store(&b->share, b->total);
        http_loop_set_capacity(b->loop, b->total);
        return b;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    http_loop_set_capacity(b->loop, 0); /* nothing budgeted before the first share */
    http_loop_set_pressure(b->loop, on_pressure, b);
    if (pthread_create(&b->thread, NULL, keeper, b) != 0) {
        http_loop_set_pressure(b->loop, NULL, NULL);
        http_loop_set_capacity(b->loop, b->total);
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        snprintf(err, errsz, "cannot start the GitHub budget thread");
        return NULL;
    }
    return b;
}

void gh_budget_expect(gh_budget *b, long n)
{
    if (!b || b->fixed || n <= 0)
        return;
    if (atomic_load(&b->share) >= b->total)
        return; /* the whole budget is held: nothing to ask for */
    atomic_store(&b->expect, n);
    atomic_store(&b->expect_at, clock_mono_ms());
    pthread_mutex_lock(&b->mu);
    b->poked = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void gh_budget_get_stats(gh_budget *b, gh_budget_stats *out)
{
    out->total = b->total;
    out->share = atomic_load(&b->share);
    out->changes = atomic_load(&b->changes);
    out->refusals = atomic_load(&b->refusals);
}

void gh_budget_stop(gh_budget *b)
{
    if (!b)
        return;
    if (b->fixed) {
        free(b);
        return;
    }
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    http_loop_set_pressure(b->loop, NULL, NULL);
    /* Give the share back, keeping what is still in flight (nothing, once the outbox stopped). */
    http_loop_stats ls;
    http_loop_get_stats(b->loop, &ls);
    reshare(b, ls.inflight_budgeted);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}
