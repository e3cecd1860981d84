/*
 * health.h - level health (§3.8): how each downstream repo's CI behaves over a rolling window,
 * compared with what its allowlist level requires, and `crcr health`.
 *
 * Measures, per repo, over PR and push runs (nightly/periodic runs only count as callbacks):
 *   success rate   success / (completed - cancelled); every other conclusion (failure,
 *                  timed_out, infra errors, ...) counts against it, cancelled is reported apart
 *   timeout rate   timed_out / completed
 *   queue time     p50 / p90 of (in_progress - dispatched)
 *   exec time      p50 / p90 of (completed - in_progress)
 *   PR total time  per PR head (PR number + head sha, or a push's sha): first dispatch to the last
 *                  completion, for heads whose runs have all completed; p90 and worst
 *   callback rejection rate  refused / (accepted + refused) callbacks after authentication;
 *                  accepted ones are counted from the runs: one per in_progress, one per
 *                  completion except timed_out (which the relay's sweeper sets)
 *   superseded     runs the relay ended because a newer commit of their PR was dispatched or
 *                  the PR was closed (§3.12): counted apart and kept out of every rate, the
 *                  execution times and the PR totals (a contributor who pushes often must not
 *                  push a repository down a level); their queue times count (they were real)
 * Percentiles are nearest-rank.
 *
 * Level requirements are cumulative (a level needs every lower level's too). Defaults, from the
 * RFC's first numbers (upstream reference §1.5), named constants here and configurable with
 * CRCR_HEALTH_L{2,3,4}_SUCCESS_PCT and CRCR_HEALTH_PR_HOURS (health_thresholds_from_config):
 *   L2  success > 70 %, every PR head's runs done within 3 h
 *   L3  success > 90 %
 *   L4  success > 95 %
 * Classification of a repo at level L (L2..L4):
 *   below_level   L's requirements are not met; `recommended` is the highest level whose
 *                 requirements are met (at least L1)
 *   at_risk       met, but fewer than HEALTH_MIN_RUNS runs count towards the success rate, or the
 *                 success rate is within HEALTH_AT_RISK_MARGIN_PCT points above L's threshold
 *                 (at most half the room left to 100 %, so L4 is healthy above 97.5 %), or the
 *                 worst PR head took more than HEALTH_TIME_AT_RISK_PCT % of the time limit
 *   healthy       otherwise
 * L1 repos send no results (their callbacks are ignored), so they are `not_measured`.
 */
#ifndef CRCR_HEALTH_H
#define CRCR_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allowlist.h"
#include "buf.h"
#include "err.h"
#include "crcr_limits.h"
#include "outcome.h"
#include "store.h"

#define HEALTH_WINDOW_DEFAULT_MS (7LL * 24 * 3600 * 1000)
/* --window / ?window= bounds. */
#define HEALTH_WINDOW_MIN_MS (3600LL * 1000)
#define HEALTH_WINDOW_MAX_MS (90LL * 24 * 3600 * 1000)
/* Default thresholds (percent; the success rate must be strictly above). */
#define HEALTH_L2_SUCCESS_PCT 70
#define HEALTH_L3_SUCCESS_PCT 90
#define HEALTH_L4_SUCCESS_PCT 95
/* Every PR head's runs must be done within this (L2 and up). */
#define HEALTH_PR_TOTAL_MAX_MS (3LL * 3600 * 1000)
#define HEALTH_AT_RISK_MARGIN_PCT 5
#define HEALTH_TIME_AT_RISK_PCT 90
/* Fewer runs than this in the success rate's denominator: at risk (too little data). */
#define HEALTH_MIN_RUNS 10
/* Most runs read per repo for one report. */
#define HEALTH_MAX_RUNS_PER_REPO 100000

/* One run, as the computation sees it. */
typedef struct health_run {
    crcr_outcome outcome;  /* outcome_of_run() its stored status, conclusion and end reason;
                              OTHER counts as a failure, SUPERSEDED apart */
    bool nightly;          /* nightly/periodic self-report */
    uint64_t group;        /* same value = same PR head (see health_group_key) */
    int64_t dispatched_at; /* ms, 0 when unknown */
    int64_t started_at;    /* ms of in_progress, 0 when unknown */
    int64_t completed_at;  /* ms, 0 when not completed */
    int64_t queue_ms;      /* -1 when unknown */
    int64_t exec_ms;       /* -1 when unknown */
} health_run;

/* A stable key for (PR number, head sha): FNV-1a 64. */
uint64_t health_group_key(int64_t pr_number, const char *head_sha);

/* The health view of a stored run (all strings may be NULL; `ended` its end reason). */
health_run health_run_of(const char *state, const char *conclusion, const char *ended,
                         const char *event_type, int64_t pr_number, const char *head_sha,
                         int64_t dispatched_at, int64_t started_at, int64_t completed_at,
                         int64_t queue_ms, int64_t exec_ms);

/* When a run was last updated, as the store's window filter sees it: its latest transition. */
int64_t health_run_updated(const health_run *r);

typedef struct health_stats {
    int64_t runs;                 /* PR/push runs in the window */
    int64_t completed;            /* of them, completed */
    int64_t success, failure;     /* failure: every completed outcome that is not success,
                                     cancelled or timed_out */
    int64_t cancelled, timed_out; /* reported apart */
    int64_t superseded;           /* ended by the relay (§3.12): in runs, in no rate */
    int64_t running;
    int64_t nightly;                    /* nightly/periodic runs (not in the rates) */
    int64_t rate_runs;                  /* the success rate's denominator: completed - cancelled */
    double success_pct;                 /* -1 when rate_runs is 0 */
    double timeout_pct;                 /* -1 when nothing completed */
    int64_t queue_p50_ms, queue_p90_ms; /* -1 when unknown */
    int64_t exec_p50_ms, exec_p90_ms;
    int64_t heads; /* PR heads whose runs all completed */
    int64_t total_p90_ms, total_max_ms;
    int64_t callbacks_accepted, callbacks_rejected;
    double reject_pct;   /* -1 when there were no callbacks */
    int64_t last_run_at; /* ms of the latest dispatch/start/completion, 0 when none */
} health_stats;

/* Computes the stats of `n` runs plus `rejected` refused callbacks. CRCR_E_NOMEM only. */
crcr_err health_compute(const health_run *runs, size_t n, int64_t rejected, health_stats *out);

typedef struct health_thresholds {
    int success_pct[5]; /* by level; index 2..4 used */
    int64_t pr_total_max_ms;
    int margin_pct;
    int time_at_risk_pct;
    int64_t min_runs;
} health_thresholds;

void health_thresholds_default(health_thresholds *t);

struct crcr_config;
/* The defaults with the configured success rates and PR time limit (CRCR_HEALTH_*). */
void health_thresholds_from_config(health_thresholds *t, const struct crcr_config *cfg);

typedef enum {
    HEALTH_NOT_MEASURED = 0,
    HEALTH_HEALTHY,
    HEALTH_AT_RISK,
    HEALTH_BELOW_LEVEL
} health_status;

/* "not_measured", "healthy", "at_risk", "below_level". */
const char *health_status_name(health_status s);

typedef struct health_verdict {
    health_status status;
    crcr_level level;       /* the allowlist level judged */
    crcr_level meets;       /* highest level whose requirements the numbers meet (L1 at least) */
    crcr_level recommended; /* the level to keep: `level`, or `meets` when below it */
    char reason[160];       /* one line: why (never empty) */
} health_verdict;

/* Classifies `s` for a repo at `level`; pure. */
void health_classify(const health_stats *s, crcr_level level, const health_thresholds *t,
                     health_verdict *v);

/* Parses a window such as "7d", "36h", "90m" or "3600s" into ms within
 * [HEALTH_WINDOW_MIN_MS, HEALTH_WINDOW_MAX_MS]. 0 on success, -1 otherwise. */
int health_parse_window(const char *s, int64_t *ms);
/* A window as health_parse_window reads it, in its largest exact unit: "7d", "36h", "90m" or
 * "5430s". Used by the HUD's pages and the text reports alike. */
void health_window_label(int64_t ms, char *out, size_t n);

/* One repo of a report. */
typedef struct health_entry {
    char repo[CRCR_REPO_NAME_MAX];
    crcr_level level;
    char device[64]; /* L3 device, "" otherwise */
    health_stats stats;
    health_verdict verdict;
} health_entry;

typedef struct health_report {
    int64_t generated_at, window_ms, since;
    health_thresholds t;
    bool from_runs;        /* no allowlist: repos and levels come from the runs themselves */
    health_entry *entries; /* owned; level order L4..L1, allowlist order within a level */
    size_t n;
} health_report;

/*
 * Builds the report at `now` over [now - window_ms, now] for every repo of `al` (or only
 * `only_repo` when not NULL). Without an allowlist (`al` NULL) the repos seen in the window's
 * runs are reported at the level their latest run recorded. The report owns its memory
 * (health_report_free). CRCR_E_STORE / CRCR_E_NOMEM on failure.
 */
crcr_err health_report_build(store *st, const allowlist *al, const char *only_repo, int64_t now,
                             int64_t window_ms, const health_thresholds *t, health_report *out);
void health_report_free(health_report *r);

/* Fills e->stats and e->verdict from `n` runs of the window and `rejected` refused callbacks,
 * e->level being set; what health_report_build does per repo once it has read the runs. */
crcr_err health_entry_compute(health_entry *e, const health_run *runs, size_t n, int64_t rejected,
                              const health_thresholds *t);

/* Appends the report as text (aligned columns), as a markdown table for an allowlist PR, or as
 * JSON (the /api/v1/health document). */
crcr_err health_report_text(const health_report *r, buf_t *out);
crcr_err health_report_md(const health_report *r, buf_t *out);
crcr_err health_report_json(const health_report *r, buf_t *out);
/* Appends one entry as a JSON object (shared with the HUD's API). */
crcr_err health_entry_json(const health_entry *e, buf_t *out);

#endif
