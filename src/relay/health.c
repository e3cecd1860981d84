/*
 * health.c - level health: stats over a window of runs, classification against the level
 * requirements, the report over the store, and `crcr health`; see health.h.
 *
 * health_compute() and health_classify() are pure (no store, no clock) so that the thresholds
 * can be unit-tested on constructed histories; health_report_build() only gathers runs.
 */
#include "health.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "config.h"
#include "html.h"
#include "jw.h"

uint64_t health_group_key(int64_t pr_number, const char *head_sha)
{
    uint64_t h = 1469598103934665603ULL;
    uint64_t pr = (uint64_t)pr_number;
    for (int i = 0; i < 8; i++) {
        h ^= (pr >> (8 * i)) & 0xff;
        h *= 1099511628211ULL;
    }
    for (const unsigned char *p = (const unsigned char *)(head_sha ? head_sha : ""); *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

health_run health_run_of(const char *state, const char *conclusion, const char *ended,
                         const char *event_type, int64_t pr_number, const char *head_sha,
                         int64_t dispatched_at, int64_t started_at, int64_t completed_at,
                         int64_t queue_ms, int64_t exec_ms)
{
    bool nightly =
        event_type && (strcmp(event_type, "nightly") == 0 || strcmp(event_type, "periodic") == 0);
    return (health_run){
        .outcome = outcome_of_run(state, conclusion, ended),
        .nightly = nightly,
        .group = health_group_key(pr_number, head_sha),
        .dispatched_at = dispatched_at,
        .started_at = started_at,
        .completed_at = completed_at,
        .queue_ms = queue_ms,
        .exec_ms = exec_ms,
    };
}

int64_t health_run_updated(const health_run *r)
{
    int64_t t = r->completed_at > r->started_at ? r->completed_at : r->started_at;
    return t > r->dispatched_at ? t : r->dispatched_at;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n); -1 for n == 0. */
static int64_t percentile(const int64_t *v, size_t n, int p)
{
    if (n == 0)
        return -1;
    size_t rank = ((size_t)p * n + 99) / 100; /* ceil(p/100 * n) */
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

typedef struct head_span {
    uint64_t group;
    int64_t start, end;
    bool done;
} head_span;

static int cmp_span(const void *a, const void *b)
{
    uint64_t x = ((const head_span *)a)->group, y = ((const head_span *)b)->group;
    return (x > y) - (x < y);
}

crcr_err health_compute(const health_run *runs, size_t n, int64_t rejected, health_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->success_pct = out->timeout_pct = out->reject_pct = -1;
    out->queue_p50_ms = out->queue_p90_ms = out->exec_p50_ms = out->exec_p90_ms = -1;
    out->total_p90_ms = out->total_max_ms = -1;
    out->callbacks_rejected = rejected;

    int64_t *queue = NULL, *exec = NULL, *totals = NULL;
    head_span *spans = NULL;
    if (n) {
        queue = malloc(n * sizeof(*queue));
        exec = malloc(n * sizeof(*exec));
        totals = malloc(n * sizeof(*totals));
        spans = malloc(n * sizeof(*spans));
        if (!queue || !exec || !totals || !spans) {
            free(queue);
            free(exec);
            free(totals);
            free(spans);
            return CRCR_E_NOMEM;
        }
    }
    size_t nq = 0, ne = 0, ns = 0, nt = 0;
    for (size_t i = 0; i < n; i++) {
        const health_run *r = &runs[i];
        int64_t last = r->completed_at > r->started_at ? r->completed_at : r->started_at;
        if (r->dispatched_at > last)
            last = r->dispatched_at;
        if (last > out->last_run_at)
            out->last_run_at = last;
        bool superseded = r->outcome == OUTCOME_SUPERSEDED;
        bool completed = r->outcome != OUTCOME_RUNNING && !superseded;
        if (r->started_at > 0)
            out->callbacks_accepted++;
        if (completed && r->outcome != OUTCOME_TIMED_OUT)
            out->callbacks_accepted++;
        if (r->nightly) {
            out->nightly++;
            continue;
        }
        out->runs++;
        if (superseded) { /* its queue time was real; nothing else of it counts */
            out->superseded++;
            if (r->queue_ms >= 0)
                queue[nq++] = r->queue_ms;
            continue;
        }
        switch (r->outcome) {
        case OUTCOME_RUNNING:
            out->running++;
            break;
        case OUTCOME_SUCCESS:
            out->success++;
            break;
        case OUTCOME_CANCELLED:
            out->cancelled++;
            break;
        case OUTCOME_TIMED_OUT:
            out->timed_out++;
            break;
        default: /* OUTCOME_FAILURE, OUTCOME_OTHER */
            out->failure++;
            break;
        }
        if (completed)
            out->completed++;
        if (r->queue_ms >= 0)
            queue[nq++] = r->queue_ms;
        if (completed && r->exec_ms >= 0)
            exec[ne++] = r->exec_ms;
        int64_t start =
            r->dispatched_at ? r->dispatched_at : (r->started_at ? r->started_at : r->completed_at);
        spans[ns++] = (head_span){r->group, start, completed ? r->completed_at : 0, completed};
    }
    out->rate_runs = out->completed - out->cancelled;
    if (out->rate_runs > 0)
        out->success_pct = 100.0 * (double)out->success / (double)out->rate_runs;
    if (out->completed > 0)
        out->timeout_pct = 100.0 * (double)out->timed_out / (double)out->completed;
    int64_t cbs = out->callbacks_accepted + out->callbacks_rejected;
    if (cbs > 0)
        out->reject_pct = 100.0 * (double)out->callbacks_rejected / (double)cbs;

    if (nq)
        qsort(queue, nq, sizeof(*queue), cmp_i64);
    if (ne)
        qsort(exec, ne, sizeof(*exec), cmp_i64);
    out->queue_p50_ms = percentile(queue, nq, 50);
    out->queue_p90_ms = percentile(queue, nq, 90);
    out->exec_p50_ms = percentile(exec, ne, 50);
    out->exec_p90_ms = percentile(exec, ne, 90);

    /* PR heads: runs grouped by key; a head counts once all its runs completed. */
    if (ns)
        qsort(spans, ns, sizeof(*spans), cmp_span);
    for (size_t i = 0; i < ns;) {
        size_t j = i;
        int64_t start = 0, end = 0;
        bool done = true;
        for (; j < ns && spans[j].group == spans[i].group; j++) {
            if (spans[j].start > 0 && (start == 0 || spans[j].start < start))
                start = spans[j].start;
            if (spans[j].end > end)
                end = spans[j].end;
            done = done && spans[j].done;
        }
        if (done && start > 0 && end >= start)
            totals[nt++] = end - start;
        i = j;
    }
    if (nt)
        qsort(totals, nt, sizeof(*totals), cmp_i64);
    out->heads = (int64_t)nt;
    out->total_p90_ms = percentile(totals, nt, 90);
    out->total_max_ms = nt ? totals[nt - 1] : -1;

    free(queue);
    free(exec);
    free(totals);
    free(spans);
    return CRCR_OK;
}

void health_thresholds_default(health_thresholds *t)
{
    memset(t, 0, sizeof(*t));
    t->success_pct[CRCR_LEVEL_L2] = HEALTH_L2_SUCCESS_PCT;
    t->success_pct[CRCR_LEVEL_L3] = HEALTH_L3_SUCCESS_PCT;
    t->success_pct[CRCR_LEVEL_L4] = HEALTH_L4_SUCCESS_PCT;
    t->pr_total_max_ms = HEALTH_PR_TOTAL_MAX_MS;
    t->margin_pct = HEALTH_AT_RISK_MARGIN_PCT;
    t->time_at_risk_pct = HEALTH_TIME_AT_RISK_PCT;
    t->min_runs = HEALTH_MIN_RUNS;
}

void health_thresholds_from_config(health_thresholds *t, const crcr_config *cfg)
{
    health_thresholds_default(t);
    for (int lv = CRCR_LEVEL_L2; lv <= CRCR_LEVEL_L4; lv++)
        t->success_pct[lv] = (int)cfg->health_success_pct[lv];
    t->pr_total_max_ms = (int64_t)cfg->health_pr_hours * 3600 * 1000;
}

const char *health_status_name(health_status s)
{
    switch (s) {
    case HEALTH_HEALTHY:
        return "healthy";
    case HEALTH_AT_RISK:
        return "at_risk";
    case HEALTH_BELOW_LEVEL:
        return "below_level";
    case HEALTH_NOT_MEASURED:
        break;
    }
    return "not_measured";
}

/* success / rate_runs > pct %, in integers. */
static bool rate_above(const health_stats *s, int pct)
{
    return s->rate_runs > 0 && s->success * 100 > (int64_t)pct * s->rate_runs;
}

static bool time_ok(const health_stats *s, const health_thresholds *t)
{
    return s->heads == 0 || s->total_max_ms <= t->pr_total_max_ms;
}

/* Whether the numbers meet `level`'s own requirement (not the lower levels'). */
static bool meets_one(const health_stats *s, crcr_level level, const health_thresholds *t)
{
    if (level <= CRCR_LEVEL_L1)
        return true;
    if (!rate_above(s, t->success_pct[level]))
        return false;
    return time_ok(s, t); /* from L2 on */
}

/* The room above the threshold that still counts as at risk, in tenths of a percent: the margin,
 * but at most half of what is left to 100 %. */
static int64_t margin_permille(const health_thresholds *t, crcr_level level)
{
    int64_t m = (int64_t)t->margin_pct * 10;
    int64_t room = (1000 - (int64_t)t->success_pct[level] * 10) / 2;
    return m < room ? m : room;
}

void health_classify(const health_stats *s, crcr_level level, const health_thresholds *t,
                     health_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->level = level;
    crcr_level meets = CRCR_LEVEL_L1;
    for (int k = CRCR_LEVEL_L2; k <= CRCR_LEVEL_L4; k++) {
        if (!meets_one(s, (crcr_level)k, t))
            break;
        meets = (crcr_level)k;
    }
    v->meets = meets;
    v->recommended = level;
    char rate[32] = "no completed runs", worst[32];
    if (s->success_pct >= 0)
        snprintf(rate, sizeof(rate), "success %.1f%%", s->success_pct);
    html_duration(s->total_max_ms, worst, sizeof(worst));
    char limit[32];
    html_duration(t->pr_total_max_ms, limit, sizeof(limit));

    if (level < CRCR_LEVEL_L2) {
        v->status = HEALTH_NOT_MEASURED;
        snprintf(v->reason, sizeof(v->reason), "%s repos report no results",
                 level == CRCR_LEVEL_L1 ? "L1" : "unlisted");
        return;
    }
    int thr = t->success_pct[level];
    if (s->rate_runs < t->min_runs) {
        v->status = HEALTH_AT_RISK;
        snprintf(v->reason, sizeof(v->reason), "too few runs to judge: %lld counted, %lld needed",
                 (long long)s->rate_runs, (long long)t->min_runs);
        return;
    }
    if (meets < level) {
        v->status = HEALTH_BELOW_LEVEL;
        v->recommended = meets;
        /* Name the first requirement that fails, lowest level first. */
        for (int k = CRCR_LEVEL_L2; k <= (int)level; k++) {
            if (!rate_above(s, t->success_pct[k])) {
                snprintf(v->reason, sizeof(v->reason), "%s is not above the L%d threshold %d%%",
                         rate, k, t->success_pct[k]);
                return;
            }
            if (!time_ok(s, t)) {
                snprintf(v->reason, sizeof(v->reason), "slowest PR head took %s, over the %s limit",
                         worst, limit);
                return;
            }
        }
        return;
    }
    if (s->success * 1000 <= ((int64_t)thr * 10 + margin_permille(t, level)) * s->rate_runs) {
        v->status = HEALTH_AT_RISK;
        snprintf(v->reason, sizeof(v->reason), "%s is within %.1f points of the %s threshold %d%%",
                 rate, (double)margin_permille(t, level) / 10.0, crcr_level_name(level), thr);
        return;
    }
    if (s->heads > 0 && s->total_max_ms * 100 > t->pr_total_max_ms * (int64_t)t->time_at_risk_pct) {
        v->status = HEALTH_AT_RISK;
        snprintf(v->reason, sizeof(v->reason), "slowest PR head took %s, close to the %s limit",
                 worst, limit);
        return;
    }
    v->status = HEALTH_HEALTHY;
    snprintf(v->reason, sizeof(v->reason), "%s > %d%%, slowest PR head %s (limit %s)", rate, thr,
             worst, limit);
}

int health_parse_window(const char *s, int64_t *ms)
{
    if (!s || !*s)
        return -1;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v <= 0 || v > 100000000LL)
        return -1;
    long long unit;
    if (strcmp(end, "d") == 0)
        unit = 86400000LL;
    else if (strcmp(end, "h") == 0)
        unit = 3600000LL;
    else if (strcmp(end, "m") == 0)
        unit = 60000LL;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        unit = 1000LL;
    else
        return -1;
    if (v > HEALTH_WINDOW_MAX_MS / unit)
        return -1;
    long long r = v * unit;
    if (r < HEALTH_WINDOW_MIN_MS || r > HEALTH_WINDOW_MAX_MS)
        return -1;
    *ms = r;
    return 0;
}

void health_window_label(int64_t ms, char *out, size_t n)
{
    if (ms % 86400000LL == 0)
        snprintf(out, n, "%lldd", (long long)(ms / 86400000LL));
    else if (ms % 3600000LL == 0)
        snprintf(out, n, "%lldh", (long long)(ms / 3600000LL));
    else if (ms % 60000LL == 0)
        snprintf(out, n, "%lldm", (long long)(ms / 60000LL));
    else
        snprintf(out, n, "%llds", (long long)(ms / 1000));
}

/* ---- the report over the store ---- */

typedef struct run_vec {
    health_run *v;
    size_t n, cap;
    bool oom;
} run_vec;

static void collect_run(void *ctx, const store_run_row *r)
{
    run_vec *rv = ctx;
    if (rv->oom)
        return;
    if (rv->n == rv->cap) {
        size_t ncap = rv->cap ? rv->cap * 2 : 256;
        health_run *p = realloc(rv->v, ncap * sizeof(*p));
        if (!p) {
            rv->oom = true;
            return;
        }
        rv->v = p;
        rv->cap = ncap;
    }
    rv->v[rv->n++] =
        health_run_of(r->state, r->conclusion, r->ended, r->event_type, r->pr_number, r->head_sha,
                      r->dispatched_at, r->started_at, r->completed_at, r->queue_ms, r->exec_ms);
}

/* Repos seen in runs (no allowlist): name and the level of the newest run. */
typedef struct seen_repos {
    health_entry *e;
    size_t n, cap;
    bool oom;
} seen_repos;

static void collect_repo(void *ctx, const store_run_row *r)
{
    seen_repos *sr = ctx;
    if (sr->oom || !r->repo)
        return;
    for (size_t i = 0; i < sr->n; i++)
        if (strcasecmp(sr->e[i].repo, r->repo) == 0)
            return;
    if (sr->n == sr->cap) {
        size_t ncap = sr->cap ? sr->cap * 2 : 16;
        health_entry *p = realloc(sr->e, ncap * sizeof(*p));
        if (!p) {
            sr->oom = true;
            return;
        }
        sr->e = p;
        sr->cap = ncap;
    }
    health_entry *e = &sr->e[sr->n++];
    memset(e, 0, sizeof(*e));
    snprintf(e->repo, sizeof(e->repo), "%s", r->repo);
    e->level = r->level >= CRCR_LEVEL_L1 && r->level <= CRCR_LEVEL_L4 ? (crcr_level)r->level
                                                                      : CRCR_LEVEL_NONE;
}

static int cmp_entry(const void *a, const void *b)
{
    const health_entry *x = a, *y = b;
    if (x->level != y->level)
        return (int)y->level - (int)x->level;
    return strcasecmp(x->repo, y->repo);
}

static crcr_err fill_entry(store *st, health_entry *e, int64_t since, const health_thresholds *t)
{
    run_vec rv = {0};
    store_run_filter f = {
        .repo = e->repo, .since = since, .limit = HEALTH_MAX_RUNS_PER_REPO, .no_payload = true};
    crcr_err err = store_list_runs(st, &f, collect_run, &rv);
    if (!err && rv.oom)
        err = CRCR_E_NOMEM;
    int64_t rejected = 0;
    if (!err)
        err = store_callback_rejections(st, e->repo, since, &rejected);
    if (!err)
        err = health_entry_compute(e, rv.v, rv.n, rejected, t);
    free(rv.v);
    return err;
}

crcr_err health_entry_compute(health_entry *e, const health_run *runs, size_t n, int64_t rejected,
                              const health_thresholds *t)
{
    crcr_err err = health_compute(runs, n, rejected, &e->stats);
    if (!err)
        health_classify(&e->stats, e->level, t, &e->verdict);
    return err;
}

crcr_err health_report_build(store *st, const allowlist *al, const char *only_repo, int64_t now,
                             int64_t window_ms, const health_thresholds *t, health_report *out)
{
    memset(out, 0, sizeof(*out));
    out->generated_at = now;
    out->window_ms = window_ms;
    out->since = now - window_ms;
    out->t = *t;
    if (al) {
        size_t total = allowlist_count(al);
        out->entries = calloc(total ? total : 1, sizeof(*out->entries));
        if (!out->entries)
            return CRCR_E_NOMEM;
        for (int lvl = CRCR_LEVEL_L4; lvl >= CRCR_LEVEL_L1; lvl--) {
            for (size_t i = 0; i < total; i++) {
                const allowlist_entry *ae = allowlist_at(al, i);
                if ((int)ae->level != lvl)
                    continue;
                if (only_repo && strcasecmp(only_repo, ae->repo) != 0)
                    continue;
                health_entry *e = &out->entries[out->n++];
                snprintf(e->repo, sizeof(e->repo), "%s", ae->repo);
                e->level = ae->level;
                snprintf(e->device, sizeof(e->device), "%s", ae->device ? ae->device : "");
            }
        }
    } else {
        out->from_runs = true;
        seen_repos sr = {0};
        store_run_filter f = {.repo = only_repo,
                              .since = out->since,
                              .limit = HEALTH_MAX_RUNS_PER_REPO,
                              .no_payload = true};
        crcr_err err = store_list_runs(st, &f, collect_repo, &sr);
        if (!err && sr.oom)
            err = CRCR_E_NOMEM;
        if (err) {
            free(sr.e);
            return err;
        }
        if (sr.n)
            qsort(sr.e, sr.n, sizeof(*sr.e), cmp_entry);
        out->entries = sr.e;
        out->n = sr.n;
    }
    for (size_t i = 0; i < out->n; i++) {
        crcr_err err = fill_entry(st, &out->entries[i], out->since, t);
        if (err) {
            health_report_free(out);
            return err;
        }
    }
    return CRCR_OK;
}

void health_report_free(health_report *r)
{
    if (!r)
        return;
    free(r->entries);
    r->entries = NULL;
    r->n = 0;
}

/* ---- output ---- */

static void pct_text(double v, char *out, size_t n)
{
    if (v < 0)
        snprintf(out, n, "-");
    else
        snprintf(out, n, "%.1f%%", v);
}

crcr_err health_entry_json(const health_entry *e, buf_t *out)
{
    jw w;
    jw_init(&w, out);
    const health_stats *s = &e->stats;
    jw_obj(&w);
    jw_kstr(&w, "repo", e->repo);
    jw_kstr(&w, "level", crcr_level_name(e->level));
    jw_key(&w, "device");
    jw_str(&w, e->device[0] ? e->device : NULL);
    jw_kint(&w, "runs", s->runs);
    /* The counts by outcome, named as the API's `result` names them (outcome.h). */
    jw_kint(&w, run_status_name(RUN_STATUS_COMPLETED), s->completed);
    jw_kint(&w, outcome_name(OUTCOME_SUCCESS), s->success);
    jw_kint(&w, outcome_name(OUTCOME_FAILURE), s->failure);
    jw_kint(&w, outcome_name(OUTCOME_CANCELLED), s->cancelled);
    jw_kint(&w, outcome_name(OUTCOME_TIMED_OUT), s->timed_out);
    jw_kint(&w, outcome_name(OUTCOME_RUNNING), s->running);
    jw_kint(&w, outcome_name(OUTCOME_SUPERSEDED), s->superseded);
    jw_kint(&w, "nightly", s->nightly);
    jw_knum(&w, "success_rate_pct", s->success_pct, 1);
    jw_knum(&w, "timeout_rate_pct", s->timeout_pct, 1);
    jw_ksecs(&w, "queue_p50_s", s->queue_p50_ms);
    jw_ksecs(&w, "queue_p90_s", s->queue_p90_ms);
    jw_ksecs(&w, "exec_p50_s", s->exec_p50_ms);
    jw_ksecs(&w, "exec_p90_s", s->exec_p90_ms);
    jw_kint(&w, "pr_heads", s->heads);
    jw_ksecs(&w, "pr_total_p90_s", s->total_p90_ms);
    jw_ksecs(&w, "pr_total_max_s", s->total_max_ms);
    jw_kint(&w, "callbacks_accepted", s->callbacks_accepted);
    jw_kint(&w, "callbacks_rejected", s->callbacks_rejected);
    jw_knum(&w, "callback_rejection_pct", s->reject_pct, 1);
    jw_ktime(&w, "last_run_at", s->last_run_at);
    jw_key(&w, "health");
    jw_obj(&w);
    jw_kstr(&w, "status", health_status_name(e->verdict.status));
    jw_kstr(&w, "meets", crcr_level_name(e->verdict.meets));
    jw_kstr(&w, "recommended_level", crcr_level_name(e->verdict.recommended));
    jw_kstr(&w, "reason", e->verdict.reason);
    jw_obj_end(&w);
    jw_obj_end(&w);
    return w.err;
}

crcr_err health_report_json(const health_report *r, buf_t *out)
{
    jw w;
    jw_init(&w, out);
    jw_obj(&w);
    jw_ktime(&w, "generated_at", r->generated_at);
    jw_ktime(&w, "since", r->since);
    jw_kint(&w, "window_s", r->window_ms / 1000);
    jw_kbool(&w, "levels_from_runs", r->from_runs);
    jw_key(&w, "thresholds");
    jw_obj(&w);
    jw_kint(&w, "L2_success_pct", r->t.success_pct[CRCR_LEVEL_L2]);
    jw_kint(&w, "L3_success_pct", r->t.success_pct[CRCR_LEVEL_L3]);
    jw_kint(&w, "L4_success_pct", r->t.success_pct[CRCR_LEVEL_L4]);
    jw_ksecs(&w, "pr_total_max_s", r->t.pr_total_max_ms);
    jw_kint(&w, "at_risk_margin_pct", r->t.margin_pct);
    jw_kint(&w, "min_runs", r->t.min_runs);
    jw_obj_end(&w);
    jw_key(&w, "repos");
    jw_arr(&w);
    for (size_t i = 0; i < r->n && !w.err; i++) {
        jw_value_begin(&w);
        if (!w.err)
            w.err = health_entry_json(&r->entries[i], out);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    return w.err;
}

crcr_err health_report_text(const health_report *r, buf_t *out)
{
    char win[24], since[48], gen[48];
    health_window_label(r->window_ms, win, sizeof(win));
    html_time(r->since, since, sizeof(since));
    html_time(r->generated_at, gen, sizeof(gen));
    crcr_err err = buf_printf(out, "Level health over %s (%s to %s)%s\n\n", win, since, gen,
                              r->from_runs ? ", levels from the runs (no allowlist)" : "");
    if (!err)
        err = buf_printf(out, "%-40s %-5s %6s %8s %9s %9s %10s %15s %17s %8s  %-12s %s\n", "REPO",
                         "LEVEL", "RUNS", "SUCCESS", "CANCELLED", "TIMED_OUT", "SUPERSEDED",
                         "QUEUE p50/p90", "PR TOTAL p90/max", "REJECTED", "STATUS", "RECOMMENDED");
    for (size_t i = 0; i < r->n && !err; i++) {
        const health_entry *e = &r->entries[i];
        const health_stats *s = &e->stats;
        char rate[16], rej[16], q50[16], q90[16], t90[16], tmax[16], queue[40], total[40];
        pct_text(s->success_pct, rate, sizeof(rate));
        pct_text(s->reject_pct, rej, sizeof(rej));
        html_duration(s->queue_p50_ms, q50, sizeof(q50));
        html_duration(s->queue_p90_ms, q90, sizeof(q90));
        html_duration(s->total_p90_ms, t90, sizeof(t90));
        html_duration(s->total_max_ms, tmax, sizeof(tmax));
        snprintf(queue, sizeof(queue), "%s/%s", q50, q90);
        snprintf(total, sizeof(total), "%s/%s", t90, tmax);
        err = buf_printf(out, "%-40s %-5s %6lld %8s %9lld %9lld %10lld %15s %17s %8s  %-12s %s\n",
                         e->repo, crcr_level_name(e->level), (long long)s->runs, rate,
                         (long long)s->cancelled, (long long)s->timed_out, (long long)s->superseded,
                         queue, total, rej, health_status_name(e->verdict.status),
                         crcr_level_name(e->verdict.recommended));
        if (!err)
            err = buf_printf(out, "%-40s       %s\n", "", e->verdict.reason);
    }
    if (!err)
        err = buf_printf(out,
                         "\nThresholds: L2 success > %d%% and every PR head done within %lldh; "
                         "L3 > %d%%; L4 > %d%% (cumulative).\n",
                         r->t.success_pct[CRCR_LEVEL_L2],
                         (long long)(r->t.pr_total_max_ms / 3600000LL),
                         r->t.success_pct[CRCR_LEVEL_L3], r->t.success_pct[CRCR_LEVEL_L4]);
    return err;
}

crcr_err health_report_md(const health_report *r, buf_t *out)
{
    char win[24], since[48], gen[48];
    health_window_label(r->window_ms, win, sizeof(win));
    html_time(r->since, since, sizeof(since));
    html_time(r->generated_at, gen, sizeof(gen));
    crcr_err err = buf_printf(out, "**Level health over %s (%s to %s)**\n\n", win, since, gen);
    if (!err)
        err = buf_puts(out, "| Repo | Level | Runs | Success | Cancelled | Timed out | "
                            "Superseded | Queue p50 / p90 | PR total p90 / max | "
                            "Callback rejections | Status | Recommended | Why |\n"
                            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n");
    for (size_t i = 0; i < r->n && !err; i++) {
        const health_entry *e = &r->entries[i];
        const health_stats *s = &e->stats;
        char rate[16], tor[16], rej[16], q50[16], q90[16], t90[16], tmax[16];
        pct_text(s->success_pct, rate, sizeof(rate));
        pct_text(s->timeout_pct, tor, sizeof(tor));
        pct_text(s->reject_pct, rej, sizeof(rej));
        html_duration(s->queue_p50_ms, q50, sizeof(q50));
        html_duration(s->queue_p90_ms, q90, sizeof(q90));
        html_duration(s->total_p90_ms, t90, sizeof(t90));
        html_duration(s->total_max_ms, tmax, sizeof(tmax));
        /* repo names are owner/repo characters and reasons this file's own words: no '|' */
        err = buf_printf(out,
                         "| `%s` | %s | %lld | %s | %lld | %lld (%s) | %lld | %s / %s | %s / %s | "
                         "%s | **%s** | %s | %s |\n",
                         e->repo, crcr_level_name(e->level), (long long)s->runs, rate,
                         (long long)s->cancelled, (long long)s->timed_out, tor,
                         (long long)s->superseded, q50, q90, t90, tmax, rej,
                         health_status_name(e->verdict.status),
                         crcr_level_name(e->verdict.recommended), e->verdict.reason);
    }
    if (!err)
        err = buf_printf(
            out,
            "\nSuccess rate = success / (completed - cancelled); failures, timeouts and infra "
            "errors all count; superseded runs (a newer commit of the PR was dispatched, or the PR "
            "was closed) count in none. Thresholds (cumulative): L2 > %d%% and every PR head's "
            "runs "
            "done within %lldh; L3 > %d%%; L4 > %d%%. At risk: fewer than %lld runs, a success "
            "rate at most %.1f / %.1f / %.1f points above the L2 / L3 / L4 threshold, or a PR "
            "head slower than %d%% of the limit. Generated by `crcr health --format md`.\n",
            r->t.success_pct[CRCR_LEVEL_L2], (long long)(r->t.pr_total_max_ms / 3600000LL),
            r->t.success_pct[CRCR_LEVEL_L3], r->t.success_pct[CRCR_LEVEL_L4],
            (long long)r->t.min_runs, (double)margin_permille(&r->t, CRCR_LEVEL_L2) / 10.0,
            (double)margin_permille(&r->t, CRCR_LEVEL_L3) / 10.0,
            (double)margin_permille(&r->t, CRCR_LEVEL_L4) / 10.0, r->t.time_at_risk_pct);
    return err;
}
