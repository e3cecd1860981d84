/*
 * outbox.h - carries out every outbound side effect stored in the outbox.
 *
 * Rows are claimed from the store, performed against GitHub (or, in dry-run, recorded with the
 * exact request they would have sent), and marked sent, retried later, or marked dead. At most
 * MAX_DISPATCH_WORKERS rows are carried out at once (upstream's dispatches in flight); their
 * GitHub requests share the App's budget (CRCR_GITHUB_CONCURRENCY) and none of them holds a
 * thread or a store connection while it is out (outbox.c). Kinds of rows:
 *   dispatch     POST /repos/{target}/dispatches (body built at send time from the delivery,
 *                trimmed to CRCR_DISPATCH_BUDGET, with the callback token); a paired row (its
 *                body a Depends-On record, §3.13) first reads GET /repos/{target}/pulls/{n}:
 *                an open PR goes as client_payload.depends_on, a closed, merged, missing or
 *                refused one is recorded as the row's problem and the dispatch goes without it,
 *                an unanswered read retries the row; the row keeps the record of what it sent
 *   check_run    POST /repos/{upstream}/check-runs with the stored body
 *   rerun        POST /repos/{target}/actions/runs/{id}/rerun-failed-jobs (or /rerun);
 *                403 "already running" counts as success
 *   rerun_suite  list the suite's check runs, queue one full `rerun` per downstream run (L3+)
 *   hud_forward  POST {HUD_API_URL}/crcr/results with x-hud-internal-bot (HUD_MAX_RETRIES)
 *   comment      the on-call comment on the upstream PR (oncall.h), once per (PR, repo): the
 *                store's kv record, else GET /repos/{upstream}/issues/{pr}/comments (paginated)
 *                for the marker, else POST there, then the record
 * One retry policy for every kind of row:
 *   - network errors, 5xx, 408 and 401 (a credential refused even after the client renewed its
 *     token: clock skew or a rotation in progress): quick retries first, from CRCR_RETRY_BASE_MS
 *     (1 s) doubling while a delay stays within OUTBOX_QUICK_MAX_MS (2 min), so that a bad
 *     gateway costs seconds; then the long tail, OUTBOX_TAIL_BASE_MS (1 min) doubling per attempt,
 *     so that CRCR_MAX_ATTEMPTS (12) still spans most of a day; every delay capped at
 *     CRCR_RETRY_MAX_MS, with jitter (half fixed, half random), never earlier than Retry-After
 *     (outbox_backoff_ms, the table in docs/configuration.md);
 *   - 429, and 403 that is a primary or secondary rate limit: the whole installation pauses until
 *     Retry-After, or x-ratelimit-reset when x-ratelimit-remaining is 0; when GitHub names no time,
 *     at least a minute, doubling with the row's attempts (GitHub's guidance;
 *     outbox_rate_limit_pause_ms); rows of a paused installation wait without spending an attempt;
 *     pauses are kept in the store's kv too, so a restart or another instance sharing the store
 *     honours them;
 *   - 404 (App not installed), 422 and other 4xx: permanent, the row is dead with the reason;
 *   - after CRCR_MAX_ATTEMPTS attempts the row is dead ("gave up").
 * Leases: a claim leases the row for CRCR_LEASE_SECONDS. Right before each request the lease is
 * renewed once a third of it has gone by (slow token mints, a wait for the budget), and nothing
 * is sent when the row has meanwhile been claimed by another worker; the store fences the outcome
 * too (store.h), so a late worker never overwrites the new holder's.
 */
#ifndef CRCR_OUTBOX_H
#define CRCR_OUTBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "allowlist_source.h"
#include "config.h"
#include "dispatch.h"
#include "github.h"
#include "store.h"

typedef struct outbox outbox;

/* How one answer is handled (exposed for unit tests). */
typedef enum {
    OUTBOX_DONE,       /* success */
    OUTBOX_RETRY,      /* transient: back off */
    OUTBOX_RATE_LIMIT, /* pause the installation */
    OUTBOX_PERMANENT,  /* dead now */
    OUTBOX_LEASE_LOST  /* another worker holds the row now: leave it alone */
} outbox_verdict;

/* Classifies an HTTP answer (status 0 = no answer) with its rate-limit headers and body. */
outbox_verdict outbox_classify(long status, long retry_after_s, long rl_remaining,
                               const char *body);

/* Quick retries last while one delay stays within this; after it comes the long tail. */
#define OUTBOX_QUICK_MAX_MS 120000
/* Base of the long tail: retry k of the tail waits OUTBOX_TAIL_BASE_MS * 2^(k-1). */
#define OUTBOX_TAIL_BASE_MS 60000

/* Delay in ms before retry number `attempts` (1 = the first retry) of a transient failure:
 * base * 2^(attempts-1) while that is at most OUTBOX_QUICK_MAX_MS, else the long tail's
 * OUTBOX_TAIL_BASE_MS * 2^(attempts-1) (never less than the former); capped at max_ms, then
 * jittered into [delay/2, delay] with `rnd` in [0,1). */
int64_t outbox_backoff_ms(long base_ms, long max_ms, int attempts, double rnd);

/* Pause in ms of an installation after a rate-limit answer that names no time (no Retry-After,
 * no x-ratelimit-reset with x-ratelimit-remaining 0), at the row's retry number `attempts`: the
 * long tail (OUTBOX_TAIL_BASE_MS doubling, capped at max_ms, jittered), and never less than a
 * minute, however small max_ms is. */
int64_t outbox_rate_limit_pause_ms(long max_ms, int attempts, double rnd);

/* Starts the workers. `gh` NULL means dry-run (every row is recorded as `dry_run`). `allow` is
 * read by re-run suites (only L3+ repos are re-run). All pointers must outlive the outbox. */
outbox *outbox_start(const crcr_config *cfg, store *st, gh_client *gh, allowlist_source *allow,
                     char *err, size_t errsz);

/* New rows were written (how many is unknown): outbox_wake with any n > 0. */
void outbox_notify(outbox *ob);
/* `n` new rows were written (0: none, nothing happens): marks rows as pending and wakes one idle
 * worker, which claims them for every idle worker (see outbox.c). */
void outbox_wake(outbox *ob, size_t n);

/* Rows an ingest claims in its own transaction (store_new_job.claimed_id) and hands over at once,
 * saving a claim's transaction and the wait for it (a fan-out's first requests leave sooner).
 * outbox_reserve takes up to `n` free job slots (0 while stopping, full, or rows wait for a
 * claim, which keeps the order of due rows; NULL ob: 0) and says the lease to claim under; each
 * reserved slot then goes to outbox_take (its row was claimed) or back through outbox_unreserve
 * (the ingest failed, or its store left the row queued). */
size_t outbox_reserve(outbox *ob, size_t n, int64_t *lease_until);
void outbox_unreserve(outbox *ob, size_t n);
/* After a successful ingest of `d`: takes over the rows it claimed among jobs[0..n) (those with
 * a claimed_id, one per reserved slot; a row its store left queued has claimed_id 0) and gives
 * back the `reserved` slots of the others. The workers run their steps as for rows they claimed,
 * with one copy of the delivery's payload shared by all; a row without memory for its job goes
 * back to the queue. How many it took. */
size_t outbox_take(outbox *ob, const store_delivery *d, const store_new_job *jobs, size_t n,
                   size_t reserved);

/* Rows whose outcome is known before they are stored, recorded finished by the ingest itself
 * (store_new_job.done_state) instead of being claimed and settled by a worker: in dry-run, a
 * dispatch row of `d` without a Depends-On pair whose request would be sent as it is
 * (dispatch_row_verbatim) ends `dry_run` with nothing to build. outbox_known marks such rows
 * among jobs[0..n) and returns how many (0 with App credentials: every row is sent); after the
 * ingest stored them, outbox_known_recorded counts and logs each as a worker does when it
 * records one (outbox.dry_run). */
size_t outbox_known(const outbox *ob, const store_delivery *d, store_new_job *jobs, size_t n);
void outbox_known_recorded(outbox *ob, const store_delivery *d, const store_new_job *jobs,
                           size_t n);

/* Stops: requests not yet sent are not sent (their rows go back to the queue without an
 * attempt), those out are answered and recorded, then the workers exit. NULL ok. */
void outbox_stop(outbox *ob);

/* Worker threads outbox_start runs for `cfg` (a few per CPU, never more than
 * MAX_DISPATCH_WORKERS): each may use one store connection at a time. */
size_t outbox_threads(const crcr_config *cfg);

/* GitHub says installation `installation` changed (an `installation` or
 * `installation_repositories` webhook): its ids are forgotten (memory and store), and those of
 * `repos` (n_repos names, may be 0). How many were forgotten. */
size_t outbox_installation_changed(outbox *ob, int64_t installation, const char *const *repos,
                                   size_t n_repos);

/* Rows being carried out now, and the most there may be. */
void outbox_get_load(outbox *ob, size_t *jobs, size_t *max_jobs);

typedef struct outbox_counters {
    uint64_t sent, dry_run, retried, dead, rate_limit_pauses;
} outbox_counters;
void outbox_get_counters(outbox *ob, outbox_counters *out);

#endif
