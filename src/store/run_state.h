/*
 * run_state.h - the callback state machine of one run (§4 `runs`), and the row both stores keep
 * for it: DISPATCHED -> IN_PROGRESS -> COMPLETED per (delivery, repo, run_id, run_attempt,
 * workflow, job).
 *
 * The stores read the key's current row inside their transaction (under the key's lock;
 * RUN_PREV_COLUMNS, run_prev_row), call run_state_next() and write what it decided with the same
 * parameters in the same order (run_row_params); listings fill store_run_row from the same column
 * order (RUN_COLUMNS, run_row_fill). Nothing here touches a database: the transition rules have
 * one home and a table-driven unit test (tests/unit/test_run_state.c).
 *
 * Rules (upstream reference §2.6.5, plus crcr's idempotence, contract §3.5):
 *   in_progress over nothing         -> applied; queue time = now - dispatched
 *   in_progress over in_progress     -> duplicate (no write, no side effect)
 *   in_progress over completed       -> invalid "in_progress after completed"
 *   completed over in_progress       -> applied; execution time = now - started
 *   completed over nothing           -> invalid "completed without prior in_progress"
 *                                       (applied for single-shot nightly/periodic reports)
 *   completed over completed         -> duplicate when the conclusion is the same, else invalid
 *                                       "already completed with conclusion X"
 * A run of a dispatch the relay ended (§3.12: its row carries `ended`, or it has no row yet and
 * its dispatch is in dispatch_ends) is recorded but reopens nothing, and the row keeps (or gets)
 * the reason in `ended` (res->ended, for the caller to add no side effect):
 *   in_progress over nothing         -> applied (recorded in progress, ended)
 *   in_progress over anything else   -> duplicate
 *   completed over the same conclusion -> duplicate
 *   completed over anything else     -> applied: the late report is recorded (the truth shown)
 * The sweeper's timeout (only_open) is a duplicate over anything but an open, not ended run.
 */
#ifndef CRCR_RUN_STATE_H
#define CRCR_RUN_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "store_impl.h"

/* The key's current row, as the store read it. */
typedef struct run_prev {
    bool exists;
    char state[16];      /* "in_progress" or "completed" */
    bool has_conclusion; /* conclusion not NULL */
    char conclusion[64];
    int64_t started_at; /* ms, 0 when unknown */
    char ended[16];     /* the row's end reason, "" when it was not ended */
    /* what the store read of the dispatch in the same transaction: its end reason from
     * dispatch_ends, "" when it was not ended (set by the store after run_prev_row) */
    char dispatch_ended[16];
} run_prev;

typedef enum {
    RUN_APPLY = 0, /* write the row (run_row_params) and the side effects */
    RUN_DUPLICATE, /* the same transition again: change nothing */
    RUN_INVALID    /* refuse; `reason` says why */
} run_outcome;

/* Decides transition `u` over `prev`. `dispatched_at` is the dispatch record's time (0 when
 * unknown or single-shot). Fills res->started_at, queue_ms, exec_ms and duplicate (res must be
 * initialised as store_run_apply does: queue_ms = exec_ms = -1) and `reason` for RUN_INVALID. */
run_outcome run_state_next(const run_prev *prev, const store_run_update *u, int64_t dispatched_at,
                           store_run_result *res, char *reason, size_t reasonsz);

/* ---- the row, as both stores write and read it ---- */

/* Columns of a listed run in store_run_row order; RUN_COLUMNS adds the payload (column 23). */
#define RUN_COLUMNS_NO_PAYLOAD                                                                     \
    "delivery_id, repo, job_name, event_type, state, head_sha, workflow_name, conclusion, "        \
    "details_url, artifact_url, run_id, run_attempt, pr_number, level, dispatched_at, "            \
    "started_at, completed_at, queue_ms, exec_ms, test_passed, test_failed, test_skipped, ended"
#define RUN_COLUMNS RUN_COLUMNS_NO_PAYLOAD ", payload"
#define RUN_PAYLOAD_COLUMN 23

/* Columns of the upsert, in run_row_params order. */
#define RUN_UPSERT_COLUMNS                                                                         \
    "delivery_id, repo, run_id, run_attempt, job_name, event_type, state, level, pr_number, "      \
    "head_sha, workflow_name, conclusion, details_url, artifact_url, dispatched_at, started_at, "  \
    "completed_at, queue_ms, exec_ms, test_passed, test_failed, test_skipped, payload, "           \
    "updated_at, "                                                                                 \
    "ended"
#define RUN_UPSERT_PARAMS 25
#define RUN_UPSERT_PAYLOAD_PARAM 22 /* index of `payload` among them */

/* The upsert's values for an applied transition (RUN_APPLY) with its decided `res`, borrowed from
 * the update for the call. */
void run_row_params(const store_run_update *u, const store_run_result *res,
                    store_param out[RUN_UPSERT_PARAMS]);

/* Fills `r` from the columns RUN_COLUMNS (the payload from column 23) of a listing's row. */
void run_row_fill(store_run_row *r, const store_row_source *s);

/* Columns of the key's current row, as run_prev_row reads them. */
#define RUN_PREV_COLUMNS "state, conclusion, started_at, ended"

/* A store_row_fn: fills the run_prev `prev` from a row of RUN_PREV_COLUMNS (the key's row exists)
 * and stops. */
int run_prev_row(void *prev, const store_row_source *s);

/* A listing's row count and offset from a filter: 1000 by default, at most 100,000. */
int run_list_limit(const store_run_filter *f);
int run_list_offset(const store_run_filter *f);

/* ---- the per-repository callback rate limit (sliding window, O(1) per hit) ---- */

/* Both stores keep one row per counted hit (rate_hits) and, per repo, how many there are
 * (rate_counts). A hit first deletes the repo's hits older than the window (`expired` of them);
 * rate_window_count() gives the hits left: the stored `count` minus `expired`, or, when the repo
 * has no count row yet (`have` false), `recounted` (what rate_hits holds after the expiry). */
int64_t rate_window_count(bool have, int64_t count, int64_t expired, int64_t recounted);

/* Decides a hit over `n` hits in the window: *allowed when n < limit, and returns the count after
 * the hit. When refused, *retry_after_ms is when `oldest` (the oldest hit left) leaves the
 * window, at least 1 ms. */
int64_t rate_window_decide(int64_t n, long limit, int64_t oldest, int64_t now, int64_t window_ms,
                           bool *allowed, int64_t *retry_after_ms);

#endif
