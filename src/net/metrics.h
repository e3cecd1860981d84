/*
 * metrics.h - the process-wide Prometheus registry and the text exposition format 0.0.4.
 *
 * Why hand-written: Debian 12 packages no Prometheus client library for C (prometheus-client-c
 * and its libprom are not in bookworm), and the text format is a few lines of grammar: "# HELP",
 * "# TYPE", then `name{label="value",...} number` samples. The registry is small and fixed:
 *
 *   - counters with bounded label sets are plain arrays of _Atomic uint64_t, indexed by enums;
 *     label values outside a known set are counted as "other", so no input can grow the
 *     number of series (no repository or delivery id is ever a label);
 *   - histograms have fixed buckets (METRICS_BUCKETS) and are registered once per HTTP route
 *     at server start; an observation is two relaxed atomic additions, no lock;
 *   - gauges that describe the app (outbox depth, allowlist age, caches) are computed when
 *     /metrics is scraped, by ops.c, with the writer functions below.
 *
 * Every function here is thread-safe. Nothing allocates after start-up except the scrape's
 * output buffer.
 */
#ifndef CRCR_METRICS_H
#define CRCR_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* Content-Type of the text exposition format. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Upper bounds (seconds) of the request latency histogram buckets; +Inf is implied. */
#define METRICS_BUCKETS                                                                            \
    {                                                                                              \
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0         \
    }
#define METRICS_N_BUCKETS 14

/* Histograms the registry can hold (HTTP routes + the "unmatched" series). */
#define METRICS_MAX_ROUTES 96

/* A histogram: per-bucket (non-cumulative) counts, the overflow (+Inf only) count last, and
 * the sum in microseconds. The count is the sum of all buckets, so +Inf always equals it. */
typedef struct metrics_hist {
    _Atomic uint64_t bucket[METRICS_N_BUCKETS + 1];
    _Atomic uint64_t sum_us;
} metrics_hist;

/* Adds one observation of `seconds` (negative values count as 0). */
void metrics_hist_observe(metrics_hist *h, double seconds);

/* Writes a histogram's samples (`name`_bucket{...,le=...}, _sum, _count) with the labels given
 * as NULL-terminated key/value pairs in `labels` (may be NULL). The family header is the
 * caller's (metrics_family). */
crcr_err metrics_hist_write(buf_t *out, const char *name, const metrics_hist *h,
                            const char *const *labels);

/* ---- the registry's own families ---- */

/* The webhook of the request being handled on this thread: call at the top of the handler. The
 * event is mapped to pull_request|push|check_run|check_suite|ping|other (NULL: other). */
void metrics_webhook_begin(const char *event);
/* Counts the current webhook (see metrics_webhook_begin) with `result`:
 * accepted|duplicate|ignored|rejected|error. */
void metrics_webhook_result(const char *result);
/* The same with an explicit event, for callers outside a request. */
void metrics_webhook_count(const char *event, const char *result);
/* Webhooks counted with `result`, over every event (for the HUD's relay box). */
uint64_t metrics_webhook_total(const char *result);

/* A callback's outcome: accepted|duplicate|rejected (crcr_callbacks_total). */
void metrics_callback_result(const char *result);
/* Callbacks counted with `result`. */
uint64_t metrics_callback_total(const char *result);

/* An outbox row attempt finished: kind an outbox kind (vocab.h) or other, result
 * sent|dry_run|retry|dead|lease_lost. */
void metrics_outbox_result(const char *kind, const char *result);

/* One HTTP request to GitHub: `path` is the API path (query allowed), or NULL for a request to
 * an absolute URL outside the GitHub API (counted as endpoint "external"). `status` is the HTTP
 * status, 0 when there was no answer. */
void metrics_github_request(const char *path, long status);
/* The endpoint class of an API path: installation|access_tokens|dispatches|check_runs|reruns|
 * contents|comments|hook_deliveries|other (static string; exposed for tests). */
const char *metrics_github_endpoint(const char *path);

/* A reconciler pass (§5.7) ended: ok|failed|skipped (crcr_reconcile_passes_total). */
void metrics_reconcile_pass(const char *result);
/* A redelivery asked of GitHub: accepted|failed (crcr_reconcile_redeliveries_total). */
void metrics_reconcile_redelivery(const char *result);

/* Registers (or finds) the latency series of an HTTP route and returns its handle, or -1 when
 * the registry is full. `method` and `route` are copied. */
int metrics_http_route(const char *method, const char *route);
/* One finished request on route handle `h` (-1 is ignored) answered `status` after `seconds`. */
void metrics_http_observe(int h, int status, double seconds);
/* Open connections: +1 on accept, -1 on close. */
void metrics_http_connections(int delta);
/* Connections cut by the request deadline. */
void metrics_http_reaped(unsigned n);
/* A request of a slow route refused because the offload pool's queue was full (503). */
void metrics_http_offload_rejected(void);
/* Connections cut because their header block was not in within the header timeout. */
void metrics_http_header_timeouts(unsigned n);
/* A connection refused at accept: its peer address held its share of connections. */
void metrics_http_client_refused(void);
/* A request answered 503 because the unauthenticated-body budget was full. */
void metrics_http_budget_refused(void);
/* Bytes of that budget taken (+) or given back (-). */
void metrics_http_unauth_bytes(int64_t delta);

/* Appends every registry family in the text format. */
crcr_err metrics_render(buf_t *out);

/* Zeroes every counter and histogram (registrations stay). Tests only. */
void metrics_reset(void);

/* ---- writers, for gauges computed at scrape time ---- */

/* Writes "# HELP name help" and "# TYPE name type" (type: counter|gauge|histogram). */
crcr_err metrics_family(buf_t *out, const char *name, const char *type, const char *help);
/* Writes one sample line `name{k="v",...} value`. `labels` is a NULL-terminated key/value list
 * (may be NULL); values are escaped (\\, \", \n). Integral values print without a fraction. */
crcr_err metrics_sample(buf_t *out, const char *name, const char *const *labels, double value);

/* True when `name` matches the metric name grammar [a-zA-Z_:][a-zA-Z0-9_:]*. */
bool metrics_name_valid(const char *name);

#endif
