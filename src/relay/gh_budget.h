/*
 * gh_budget.h - one GitHub budget for the App: CRCR_GITHUB_CONCURRENCY requests in flight at
 * most, for every instance on one store together.
 *
 * GitHub counts concurrent requests per App (documented at 100), whichever instance sends them.
 * Each instance holds a share of the budget in the store (store_gh_slots; shares of instances
 * that died are dropped by the liveness every claim relies on) and lets its GitHub client's loop
 * (http_loop.h) have at most that share in flight. A thread of its own adjusts the share to the
 * demand the loop reports (requests out plus those waiting): it asks for more as soon as more
 * requests wait (the loop's pressure callback wakes it) or are announced (gh_budget_expect),
 * asking again every GH_BUDGET_RETRY_MS
 * while others hold the rest, and gives back what it has not used for GH_BUDGET_IDLE_MS, never
 * below what is in flight (while it holds a share it looks every GH_BUDGET_RETRY_MS: completions
 * do not wake it). So an instance alone may use the whole budget, two busy instances share it
 * (first come, first served: a share is given back when its holder's demand falls), and the sum
 * of the shares never passes the budget: a share grows in the store before the loop may use it,
 * and shrinks in the loop before the store hears of it. With a store of one serving process
 * (SQLite) the instance holds the whole budget from the start, and no thread runs.
 */
#ifndef CRCR_GH_BUDGET_H
#define CRCR_GH_BUDGET_H

#include <stdint.h>

#include "github.h"
#include "store.h"

typedef struct gh_budget gh_budget;

/* While requests wait and the share is below the budget, the store is asked again this often. */
#define GH_BUDGET_RETRY_MS 20
/* A share above the demand for this long is given back (another instance may be waiting for it:
 * with 200 ms, two instances sharing a fan-out to 100 repositories took 184-206 ms warm). */
#define GH_BUDGET_IDLE_MS 20

/* Starts the thread; the client's loop may send nothing budgeted until the first share is in.
 * `total` is CRCR_GITHUB_CONCURRENCY. NULL (reason in err) when the thread cannot be started.
 * All pointers must outlive it. */
gh_budget *gh_budget_start(store *st, gh_client *gh, long total, char *err, size_t errsz);

/* `n` requests are about to be asked for (an ingest's claimed rows, handed over once its commit
 * returns): the thread grows the share for them now, while the ingest commits, instead of once
 * they wait (one store transaction, ~2 ms on PostgreSQL, was on the path of every fan-out that
 * came after an idle spell). The announcement counts for GH_BUDGET_IDLE_MS at most; the share it
 * took is given back as any unused share is. NULL, or a whole budget held: nothing. */
void gh_budget_expect(gh_budget *b, long n);

typedef struct gh_budget_stats {
    long total;        /* CRCR_GITHUB_CONCURRENCY */
    long share;        /* this instance's share now */
    uint64_t changes;  /* shares asked of the store */
    uint64_t refusals; /* asks that got less than they wanted */
} gh_budget_stats;
void gh_budget_get_stats(gh_budget *b, gh_budget_stats *out);

/* Stops the thread and gives the share back (the loop keeps what is in flight). NULL is fine. */
void gh_budget_stop(gh_budget *b);

#endif
