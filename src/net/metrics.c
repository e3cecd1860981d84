/*
 * metrics.c - the Prometheus registry and text format 0.0.4; see metrics.h.
 *
 * Hand-written because Debian 12 packages no Prometheus client library for C; the format is a
 * handful of grammar rules (HELP/TYPE lines, escaped label values, cumulative histogram buckets
 * ending in +Inf) that the unit test and the end-to-end test check with their own parsers.
 *
 * Counters are arrays of _Atomic uint64_t updated with relaxed ordering: a scrape may see one
 * counter a little ahead of another, which Prometheus tolerates; each counter alone never goes
 * backwards. Histograms derive _count from the bucket counts at scrape time, so the +Inf bucket
 * and _count are always equal in one scrape.
 */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "vocab.h"

/* Longest route and method label kept for a latency series. */
#define METRICS_ROUTE_MAX 128u
#define METRICS_METHOD_MAX 16u
/* Path segments looked at when classifying a GitHub API path. */
#define METRICS_MAX_SEGMENTS 12
/* HTTP status codes counted per GitHub endpoint: 0 (no answer) .. 599. */
#define METRICS_STATUS_MAX 600

static const double k_bounds[METRICS_N_BUCKETS] = METRICS_BUCKETS;

/* ---- label value sets ---- */

/* X-GitHub-Event names (webhook.c's supported events), not outbox kinds. */
static const char *const k_wh_events[] = {
    "pull_request", "push", "check_run", /* vocab-ok: the webhook event */
    "check_suite",  "ping", "other"};
#define WH_EV_N 6
#define WH_EV_OTHER 5
static const char *const k_wh_results[] = {"accepted", "duplicate", "ignored", "rejected", "error"};
#define WH_RES_N 5

/* unavailable: a 503 because an OIDC issuer's keys could not be had (the token was not judged). */
static const char *const k_cb_results[] = {"accepted", "duplicate", "rejected", "unavailable"};
#define CB_RES_N 4

/* Outbox kinds are the model's (vocab.h), indexed by crcr_ob_kind; OB_KIND_UNKNOWN is "other" and
 * comes last in the exposition. Results: the three final outbox states, and two of an attempt
 * that did not finish its row. */
enum { OB_RES_SENT, OB_RES_DRY_RUN, OB_RES_RETRY, OB_RES_DEAD, OB_RES_LEASE_LOST, OB_RES_N };

static const char *ob_kind_label(int k)
{
    return k == OB_KIND_UNKNOWN ? "other" : ob_kind_name((crcr_ob_kind)k);
}

static const char *ob_result_label(int r)
{
    switch (r) {
    case OB_RES_SENT:
        return ob_state_name(OB_STATE_SENT);
    case OB_RES_DRY_RUN:
        return ob_state_name(OB_STATE_DRY_RUN);
    case OB_RES_RETRY:
        return "retry";
    case OB_RES_DEAD:
        return ob_state_name(OB_STATE_DEAD);
    default:
        return "lease_lost";
    }
}

enum {
    GH_EP_INSTALLATION,
    GH_EP_ACCESS_TOKENS,
    GH_EP_DISPATCHES,
    GH_EP_CHECK_RUNS,
    GH_EP_RERUNS,
    GH_EP_CONTENTS,
    GH_EP_COMMENTS,
    GH_EP_HOOK_DELIVERIES,
    GH_EP_OTHER,
    GH_EP_EXTERNAL,
    GH_EP_N
};
static const char *const k_gh_endpoints[GH_EP_N] = {
    "installation", "access_tokens", "dispatches",      "check_runs", "reruns",
    "contents",     "comments",      "hook_deliveries", "other",      "external"};

static const char *const k_rc_passes[] = {"ok", "failed", "skipped"}; /* vocab-ok: a pass not run */
#define RC_PASS_N 3
static const char *const k_rc_asks[] = {"accepted", "failed"};
#define RC_ASK_N 2

static const char *const k_code_classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
#define CODE_CLASS_N 5

/* ---- the registry ---- */

typedef struct route_series {
    char method[METRICS_METHOD_MAX];
    char route[METRICS_ROUTE_MAX];
    metrics_hist latency;
    _Atomic uint64_t responses[CODE_CLASS_N];
} route_series;

static struct {
    _Atomic uint64_t webhooks[WH_EV_N][WH_RES_N];
    _Atomic uint64_t callbacks[CB_RES_N];
    _Atomic uint64_t outbox[OB_KIND_COUNT][OB_RES_N];
    _Atomic uint64_t github[GH_EP_N][METRICS_STATUS_MAX];
    _Atomic int64_t connections;
    _Atomic uint64_t reaped;
    _Atomic uint64_t offload_rejected;
    _Atomic uint64_t reconcile_passes[RC_PASS_N];
    _Atomic uint64_t reconcile_asks[RC_ASK_N];
    _Atomic uint64_t header_timeouts;
    _Atomic uint64_t client_refused;
    _Atomic uint64_t budget_refused;
    _Atomic int64_t unauth_bytes;
    route_series routes[METRICS_MAX_ROUTES];
    _Atomic int n_routes; /* published with release after the entry is filled */
} g_reg;

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int t_webhook_event = WH_EV_OTHER;

static void inc(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t get(const _Atomic uint64_t *c)
{
    return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

static int index_of(const char *const *names, int n, const char *s, int fallback)
{
    if (!s)
        return fallback;
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], s) == 0)
            return i;
    }
    return fallback;
}

/* ---- histograms ---- */

void metrics_hist_observe(metrics_hist *h, double seconds)
{
    if (!(seconds > 0)) /* also NaN */
        seconds = 0;
    int i = 0;
    while (i < METRICS_N_BUCKETS && seconds > k_bounds[i])
        i++;
    inc(&h->bucket[i], 1);
    double us = seconds * 1e6;
    inc(&h->sum_us, us < 1.8e19 ? (uint64_t)us : UINT64_MAX / 2);
}

/* ---- writers ---- */

bool metrics_name_valid(const char *name)
{
    if (!name || !*name)
        return false;
    for (const char *p = name; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        bool digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && p != name))
            return false;
    }
    return true;
}

/* Writes a number as the text format wants it: integral values without a fraction. */
static crcr_err put_value(buf_t *out, double v)
{
    if (isnan(v))
        return buf_puts(out, "NaN");
    if (isinf(v))
        return buf_puts(out, v > 0 ? "+Inf" : "-Inf");
    if (v == floor(v) && fabs(v) < 1e15)
        return buf_printf(out, "%.0f", v);
    if (fabs(v) < 1 || fabs(v) >= 1e15)
        return buf_printf(out, "%.9g", v);
    /* Timestamps and sums: microsecond precision, without trailing zeros. */
    char num[64];
    int n = snprintf(num, sizeof(num), "%.6f", v);
    while (n > 0 && num[n - 1] == '0')
        num[--n] = '\0';
    if (n > 0 && num[n - 1] == '.')
        num[--n] = '\0';
    return buf_puts(out, num);
}

static crcr_err put_label_value(buf_t *out, const char *v)
{
    crcr_err e = buf_putc(out, '"');
    for (const char *p = v; *p && !e; p++) {
        if (*p == '\\')
            e = buf_puts(out, "\\\\");
        else if (*p == '"')
            e = buf_puts(out, "\\\"");
        else if (*p == '\n')
            e = buf_puts(out, "\\n");
        else
            e = buf_putc(out, *p);
    }
    if (!e)
        e = buf_putc(out, '"');
    return e;
}

/* Writes `{k="v",...,extra_k="extra_v"}` (nothing when there are no labels). */
static crcr_err put_labels(buf_t *out, const char *const *labels, const char *extra_k,
                           const char *extra_v)
{
    bool any = (labels && labels[0]) || extra_k;
    if (!any)
        return CRCR_OK;
    crcr_err e = buf_putc(out, '{');
    bool first = true;
    for (size_t i = 0; labels && labels[i] && !e; i += 2) {
        if (!first)
            e = buf_putc(out, ',');
        if (!e)
            e = buf_puts(out, labels[i]);
        if (!e)
            e = buf_putc(out, '=');
        if (!e)
            e = put_label_value(out, labels[i + 1] ? labels[i + 1] : "");
        first = false;
    }
    if (extra_k && !e) {
        if (!first)
            e = buf_putc(out, ',');
        if (!e)
            e = buf_printf(out, "%s=", extra_k);
        if (!e)
            e = put_label_value(out, extra_v);
    }
    if (!e)
        e = buf_putc(out, '}');
    return e;
}

crcr_err metrics_family(buf_t *out, const char *name, const char *type, const char *help)
{
    /* HELP text escapes only backslash and newline; ours are constants without either. */
    return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static crcr_err sample_ex(buf_t *out, const char *name, const char *suffix,
                          const char *const *labels, const char *extra_k, const char *extra_v,
                          double value)
{
    crcr_err e = buf_puts(out, name);
    if (!e && suffix)
        e = buf_puts(out, suffix);
    if (!e)
        e = put_labels(out, labels, extra_k, extra_v);
    if (!e)
        e = buf_putc(out, ' ');
    if (!e)
        e = put_value(out, value);
    if (!e)
        e = buf_putc(out, '\n');
    return e;
}

crcr_err metrics_sample(buf_t *out, const char *name, const char *const *labels, double value)
{
    return sample_ex(out, name, NULL, labels, NULL, NULL, value);
}

crcr_err metrics_hist_write(buf_t *out, const char *name, const metrics_hist *h,
                            const char *const *labels)
{
    uint64_t counts[METRICS_N_BUCKETS + 1];
    for (int i = 0; i <= METRICS_N_BUCKETS; i++)
        counts[i] = get(&h->bucket[i]);
    uint64_t sum_us = get(&h->sum_us);
    uint64_t cum = 0;
    crcr_err e = CRCR_OK;
    for (int i = 0; i < METRICS_N_BUCKETS && !e; i++) {
        cum += counts[i];
        char le[32];
        if (k_bounds[i] == floor(k_bounds[i]))
            snprintf(le, sizeof(le), "%.1f", k_bounds[i]);
        else
            snprintf(le, sizeof(le), "%.9g", k_bounds[i]);
        e = sample_ex(out, name, "_bucket", labels, "le", le, (double)cum);
    }
    cum += counts[METRICS_N_BUCKETS];
    if (!e)
        e = sample_ex(out, name, "_bucket", labels, "le", "+Inf", (double)cum);
    if (!e)
        e = sample_ex(out, name, "_sum", labels, NULL, NULL, (double)sum_us / 1e6);
    if (!e)
        e = sample_ex(out, name, "_count", labels, NULL, NULL, (double)cum);
    return e;
}

/* ---- webhooks, outbox, GitHub ---- */

void metrics_webhook_begin(const char *event)
{
    t_webhook_event = index_of(k_wh_events, WH_EV_N - 1, event, WH_EV_OTHER);
}

void metrics_webhook_count(const char *event, const char *result)
{
    int ev = index_of(k_wh_events, WH_EV_N - 1, event, WH_EV_OTHER);
    int res = index_of(k_wh_results, WH_RES_N, result, -1);
    if (res >= 0)
        inc(&g_reg.webhooks[ev][res], 1);
}

uint64_t metrics_webhook_total(const char *result)
{
    int res = index_of(k_wh_results, WH_RES_N, result, -1);
    uint64_t n = 0;
    for (int ev = 0; res >= 0 && ev < WH_EV_N; ev++)
        n += get(&g_reg.webhooks[ev][res]);
    return n;
}

void metrics_callback_result(const char *result)
{
    int res = index_of(k_cb_results, CB_RES_N, result, -1);
    if (res >= 0)
        inc(&g_reg.callbacks[res], 1);
}

uint64_t metrics_callback_total(const char *result)
{
    int res = index_of(k_cb_results, CB_RES_N, result, -1);
    return res >= 0 ? get(&g_reg.callbacks[res]) : 0;
}

void metrics_webhook_result(const char *result)
{
    int res = index_of(k_wh_results, WH_RES_N, result, -1);
    if (res >= 0)
        inc(&g_reg.webhooks[t_webhook_event][res], 1);
}

void metrics_outbox_result(const char *kind, const char *result)
{
    int k = (int)ob_kind_parse(kind);
    int r = -1;
    for (int i = 0; result && i < OB_RES_N && r < 0; i++)
        r = strcmp(result, ob_result_label(i)) == 0 ? i : -1;
    if (r >= 0)
        inc(&g_reg.outbox[k][r], 1);
}

typedef struct seg {
    const char *p;
    size_t n;
} seg;

static bool seg_is(const seg *s, const char *word)
{
    size_t wl = strlen(word);
    return s->n == wl && memcmp(s->p, word, wl) == 0;
}

static int classify(const char *path)
{
    if (!path)
        return GH_EP_EXTERNAL;
    size_t len = strcspn(path, "?#");
    seg s[METRICS_MAX_SEGMENTS];
    int n = 0;
    size_t i = 0;
    while (i < len && n < METRICS_MAX_SEGMENTS) {
        while (i < len && path[i] == '/')
            i++;
        size_t start = i;
        while (i < len && path[i] != '/')
            i++;
        if (i > start)
            s[n++] = (seg){path + start, i - start};
    }
    if (n == 0)
        return GH_EP_OTHER;
    const seg *last = &s[n - 1];
    if (seg_is(&s[0], "app") && n >= 3 && seg_is(&s[1], "installations"))
        return seg_is(last, "access_tokens") ? GH_EP_ACCESS_TOKENS : GH_EP_INSTALLATION;
    if (seg_is(&s[0], "app") && n >= 3 && seg_is(&s[1], "hook") && seg_is(&s[2], "deliveries"))
        return GH_EP_HOOK_DELIVERIES;
    if ((seg_is(&s[0], "orgs") || seg_is(&s[0], "users")) && n == 3 &&
        seg_is(&s[2], "installation"))
        return GH_EP_INSTALLATION;
    if (!seg_is(&s[0], "repos") || n < 4)
        return GH_EP_OTHER;
    const seg *what = &s[3];
    if (seg_is(what, "installation") && n == 4)
        return GH_EP_INSTALLATION;
    if (seg_is(what, "dispatches") && n == 4)
        return GH_EP_DISPATCHES;
    if (seg_is(what, "check-runs") || (seg_is(what, "check-suites") && seg_is(last, "check-runs")))
        return GH_EP_CHECK_RUNS;
    /* vocab-ok: GitHub's path segment "rerun", not the outbox kind */
    if (seg_is(what, "actions") && (seg_is(last, "rerun") || seg_is(last, "rerun-failed-jobs")))
        return GH_EP_RERUNS;
    if (seg_is(what, "contents"))
        return GH_EP_CONTENTS;
    if (seg_is(what, "issues") && n == 6 && seg_is(last, "comments"))
        return GH_EP_COMMENTS;
    return GH_EP_OTHER;
}

const char *metrics_github_endpoint(const char *path)
{
    return k_gh_endpoints[classify(path)];
}

void metrics_github_request(const char *path, long status)
{
    if (status < 0 || status >= METRICS_STATUS_MAX)
        status = 0;
    inc(&g_reg.github[classify(path)][status], 1);
}

/* ---- the reconciler ---- */

void metrics_reconcile_pass(const char *result)
{
    int r = index_of(k_rc_passes, RC_PASS_N, result, -1);
    if (r >= 0)
        inc(&g_reg.reconcile_passes[r], 1);
}

void metrics_reconcile_redelivery(const char *result)
{
    int r = index_of(k_rc_asks, RC_ASK_N, result, -1);
    if (r >= 0)
        inc(&g_reg.reconcile_asks[r], 1);
}

/* ---- HTTP ---- */

int metrics_http_route(const char *method, const char *route)
{
    if (!method || !route)
        return -1;
    pthread_mutex_lock(&g_reg_lock);
    int n = atomic_load_explicit(&g_reg.n_routes, memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        if (strcmp(g_reg.routes[i].method, method) == 0 &&
            strcmp(g_reg.routes[i].route, route) == 0) {
            pthread_mutex_unlock(&g_reg_lock);
            return i;
        }
    }
    int h = -1;
    if (n < METRICS_MAX_ROUTES) {
        route_series *r = &g_reg.routes[n];
        snprintf(r->method, sizeof(r->method), "%s", method);
        snprintf(r->route, sizeof(r->route), "%s", route);
        atomic_store_explicit(&g_reg.n_routes, n + 1, memory_order_release);
        h = n;
    }
    pthread_mutex_unlock(&g_reg_lock);
    return h;
}

void metrics_http_observe(int h, int status, double seconds)
{
    if (h < 0 || h >= atomic_load_explicit(&g_reg.n_routes, memory_order_acquire))
        return;
    route_series *r = &g_reg.routes[h];
    metrics_hist_observe(&r->latency, seconds);
    if (status >= 100 && status < 600)
        inc(&r->responses[status / 100 - 1], 1);
}

void metrics_http_connections(int delta)
{
    atomic_fetch_add_explicit(&g_reg.connections, delta, memory_order_relaxed);
}

void metrics_http_offload_rejected(void)
{
    inc(&g_reg.offload_rejected, 1);
}

void metrics_http_reaped(unsigned n)
{
    inc(&g_reg.reaped, n);
}

void metrics_http_header_timeouts(unsigned n)
{
    inc(&g_reg.header_timeouts, n);
}

void metrics_http_client_refused(void)
{
    inc(&g_reg.client_refused, 1);
}

void metrics_http_budget_refused(void)
{
    inc(&g_reg.budget_refused, 1);
}

void metrics_http_unauth_bytes(int64_t delta)
{
    atomic_fetch_add_explicit(&g_reg.unauth_bytes, delta, memory_order_relaxed);
}

/* ---- rendering ---- */

crcr_err metrics_render(buf_t *out)
{
    crcr_err e = metrics_family(out, "crcr_webhooks_total", "counter",
                                "Signed or unsigned webhook deliveries by event and outcome.");
    for (int ev = 0; ev < WH_EV_N && !e; ev++) {
        for (int r = 0; r < WH_RES_N && !e; r++) {
            const char *l[] = {"event", k_wh_events[ev], "result", k_wh_results[r], NULL};
            e = metrics_sample(out, "crcr_webhooks_total", l, (double)get(&g_reg.webhooks[ev][r]));
        }
    }
    if (!e)
        e = metrics_family(out, "crcr_callbacks_total", "counter",
                           "Downstream callbacks by outcome.");
    for (int r = 0; r < CB_RES_N && !e; r++) {
        const char *l[] = {"result", k_cb_results[r], NULL};
        e = metrics_sample(out, "crcr_callbacks_total", l, (double)get(&g_reg.callbacks[r]));
    }
    if (!e)
        e = metrics_family(out, "crcr_outbox_jobs_total", "counter",
                           "Outbox row attempts (dispatches and other outbound calls) by kind "
                           "and outcome.");
    for (int i = 1; i <= OB_KIND_COUNT && !e; i++) {
        int k = i % OB_KIND_COUNT; /* the kinds in the model's order, then "other" */
        for (int r = 0; r < OB_RES_N && !e; r++) {
            const char *l[] = {"kind", ob_kind_label(k), "result", ob_result_label(r), NULL};
            e = metrics_sample(out, "crcr_outbox_jobs_total", l, (double)get(&g_reg.outbox[k][r]));
        }
    }
    if (!e)
        e = metrics_family(out, "crcr_github_requests_total", "counter",
                           "HTTP requests to GitHub by endpoint class and status (0: no answer).");
    for (int ep = 0; ep < GH_EP_N && !e; ep++) {
        for (int st = 0; st < METRICS_STATUS_MAX && !e; st++) {
            uint64_t v = get(&g_reg.github[ep][st]);
            if (v == 0)
                continue;
            char code[8];
            snprintf(code, sizeof(code), "%d", st);
            const char *l[] = {"endpoint", k_gh_endpoints[ep], "status", code, NULL};
            e = metrics_sample(out, "crcr_github_requests_total", l, (double)v);
        }
    }
    if (!e)
        e = metrics_family(out, "crcr_reconcile_passes_total", "counter",
                           "Reconciler passes of this instance: ok, failed (GitHub or the store "
                           "refused; retried at the next pass) or skipped (another instance "
                           "is passing, or passed less than half a period ago).");
    for (int r = 0; r < RC_PASS_N && !e; r++) {
        const char *l[] = {"result", k_rc_passes[r], NULL};
        e = metrics_sample(out, "crcr_reconcile_passes_total", l,
                           (double)get(&g_reg.reconcile_passes[r]));
    }
    if (!e)
        e = metrics_family(out, "crcr_reconcile_redeliveries_total", "counter",
                           "Redeliveries this instance asked GitHub for: accepted (202) or "
                           "failed.");
    for (int r = 0; r < RC_ASK_N && !e; r++) {
        const char *l[] = {"result", k_rc_asks[r], NULL};
        e = metrics_sample(out, "crcr_reconcile_redeliveries_total", l,
                           (double)get(&g_reg.reconcile_asks[r]));
    }
    int n = atomic_load_explicit(&g_reg.n_routes, memory_order_acquire);
    if (!e)
        e = metrics_family(out, "crcr_http_request_duration_seconds", "histogram",
                           "Time from a request's head to its answer, by route.");
    for (int i = 0; i < n && !e; i++) {
        const char *l[] = {"method", g_reg.routes[i].method, "route", g_reg.routes[i].route, NULL};
        e = metrics_hist_write(out, "crcr_http_request_duration_seconds", &g_reg.routes[i].latency,
                               l);
    }
    if (!e)
        e = metrics_family(out, "crcr_http_responses_total", "counter",
                           "HTTP answers by route and status class.");
    for (int i = 0; i < n && !e; i++) {
        for (int c = 0; c < CODE_CLASS_N && !e; c++) {
            uint64_t v = get(&g_reg.routes[i].responses[c]);
            if (v == 0)
                continue;
            const char *l[] = {"method", g_reg.routes[i].method, "route", g_reg.routes[i].route,
                               "code",   k_code_classes[c],      NULL};
            e = metrics_sample(out, "crcr_http_responses_total", l, (double)v);
        }
    }
    if (!e)
        e = metrics_family(out, "crcr_http_connections", "gauge", "Open client connections.");
    if (!e)
        e = metrics_sample(out, "crcr_http_connections", NULL,
                           (double)atomic_load_explicit(&g_reg.connections, memory_order_relaxed));
    if (!e)
        e = metrics_family(out, "crcr_http_requests_reaped_total", "counter",
                           "Connections closed because a request passed the total request "
                           "deadline.");
    if (!e)
        e = metrics_sample(out, "crcr_http_requests_reaped_total", NULL,
                           (double)get(&g_reg.reaped));
    if (!e)
        e = metrics_family(out, "crcr_http_offload_rejected_total", "counter",
                           "HUD requests answered 503 because every HUD render slot and its "
                           "queue were busy (CRCR_HUD_CONCURRENCY).");
    if (!e)
        e = metrics_sample(out, "crcr_http_offload_rejected_total", NULL,
                           (double)get(&g_reg.offload_rejected));
    if (!e)
        e = metrics_family(out, "crcr_http_header_timeouts_total", "counter",
                           "Connections closed because their header block did not arrive within "
                           "CRCR_HEADER_TIMEOUT_MS.");
    if (!e)
        e = metrics_sample(out, "crcr_http_header_timeouts_total", NULL,
                           (double)get(&g_reg.header_timeouts));
    if (!e)
        e = metrics_family(out, "crcr_http_client_refused_total", "counter",
                           "Connections refused at accept because their peer address already "
                           "held CRCR_MAX_CONNECTIONS_PER_CLIENT.");
    if (!e)
        e = metrics_sample(out, "crcr_http_client_refused_total", NULL,
                           (double)get(&g_reg.client_refused));
    if (!e)
        e = metrics_family(out, "crcr_http_unauth_budget_refused_total", "counter",
                           "Requests answered 503 because the bodies of requests not yet "
                           "authenticated filled CRCR_UNAUTH_BODY_BUDGET.");
    if (!e)
        e = metrics_sample(out, "crcr_http_unauth_budget_refused_total", NULL,
                           (double)get(&g_reg.budget_refused));
    if (!e)
        e = metrics_family(out, "crcr_http_unauth_body_bytes", "gauge",
                           "Bytes of CRCR_UNAUTH_BODY_BUDGET held now by request bodies not yet "
                           "authenticated.");
    if (!e)
        e = metrics_sample(out, "crcr_http_unauth_body_bytes", NULL,
                           (double)atomic_load_explicit(&g_reg.unauth_bytes, memory_order_relaxed));
    return e;
}

void metrics_reset(void)
{
    pthread_mutex_lock(&g_reg_lock);
    for (int i = 0; i < WH_EV_N; i++)
        for (int j = 0; j < WH_RES_N; j++)
            atomic_store(&g_reg.webhooks[i][j], 0);
    for (int i = 0; i < OB_KIND_COUNT; i++)
        for (int j = 0; j < OB_RES_N; j++)
            atomic_store(&g_reg.outbox[i][j], 0);
    for (int i = 0; i < GH_EP_N; i++)
        for (int j = 0; j < METRICS_STATUS_MAX; j++)
            atomic_store(&g_reg.github[i][j], 0);
    atomic_store(&g_reg.connections, 0);
    atomic_store(&g_reg.reaped, 0);
    atomic_store(&g_reg.offload_rejected, 0);
    for (int i = 0; i < RC_PASS_N; i++)
        atomic_store(&g_reg.reconcile_passes[i], 0);
    for (int i = 0; i < RC_ASK_N; i++)
        atomic_store(&g_reg.reconcile_asks[i], 0);
    atomic_store(&g_reg.header_timeouts, 0);
    atomic_store(&g_reg.client_refused, 0);
    atomic_store(&g_reg.budget_refused, 0);
    atomic_store(&g_reg.unauth_bytes, 0);
    for (int i = 0; i < CB_RES_N; i++)
        atomic_store(&g_reg.callbacks[i], 0);
    for (int i = 0; i < METRICS_MAX_ROUTES; i++) {
        route_series *r = &g_reg.routes[i];
        for (int b = 0; b <= METRICS_N_BUCKETS; b++)
            atomic_store(&r->latency.bucket[b], 0);
        atomic_store(&r->latency.sum_us, 0);
        for (int c = 0; c < CODE_CLASS_N; c++)
            atomic_store(&r->responses[c], 0);
    }
    pthread_mutex_unlock(&g_reg_lock);
}
