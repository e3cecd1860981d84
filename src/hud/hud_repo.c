/*
 * hud_repo.c - the repo page: a PR x job matrix of the repo's latest results (or its nightly
 * runs), paged, with the repo's health cards and trend charts over the window; see hud_repo.h.
 *
 * One read of the repo's runs (newest first) serves the matrix, the charts and the health
 * numbers. Rows are PRs (a push is a row of its own head sha; a nightly run one of its
 * delivery), in the order of their newest run; a page's job columns are the (workflow, job)
 * pairs of its rows, sorted; a cell shows the newest run and how many runs are behind it.
 */
#include "hud_repo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"
#include "allowlist_source.h"
#include "clock.h"
#include "html.h"
#include "hud_html.h"
#include "crcr_limits.h"

/* PR (or nightly) rows per page of the repo matrix, and the last page that may be asked for. */
#define HUD_PAGE_ROWS 25
#define HUD_PAGE_MAX 1000
/* Runs read for one repo page (newest first; retention bounds them). The same cap as the level
 * health report's, so the page's numbers are the report's. */
#define HUD_REPO_MAX_RUNS HEALTH_MAX_RUNS_PER_REPO
/* Job columns on one page of the matrix; more are counted, not shown. */
#define HUD_JOBS_MAX 120
/* Points of a trend chart. */
#define HUD_TREND_BUCKETS 14

typedef struct mrow {
    const char *key;   /* "pr:123", "sha:abc", "n:<delivery>" */
    int64_t pr_number; /* 0 for push and nightly rows */
    const char *head_sha, *delivery_id;
    int64_t updated_at;
} mrow;

typedef struct mjob {
    const char *key; /* workflow \x1f job */
    const hrun *sample;
} mjob;

typedef struct trend {
    int64_t start[HUD_TREND_BUCKETS];
    int64_t runs[HUD_TREND_BUCKETS], success[HUD_TREND_BUCKETS], rate_runs[HUD_TREND_BUCKETS];
    int64_t exec_p50[HUD_TREND_BUCKETS];
} trend;

typedef struct repo_model {
    char repo[CRCR_REPO_NAME_MAX];
    bool nightly;
    long page, pages;
    int64_t window;
    health_report rep; /* one entry */
    run_list all;      /* every run of the repo, newest first */
    const hrun **runs; /* those of the tab, newest first */
    size_t n_runs;
    mrow *rows;
    size_t n_rows, cap_rows;
    size_t *run_row; /* row index of each run */
    mjob *jobs;      /* the page's job columns, sorted */
    size_t n_jobs, cap_jobs, jobs_hidden;
    const hrun **cells; /* [page row][job]: the newest run, NULL when none */
    int *attempts;      /* runs behind each cell */
    size_t first_row, page_rows;
    trend tr;
} repo_model;

static void repo_model_free(repo_model *m)
{
    health_report_free(&m->rep);
    free(m->all.v);
    free((void *)m->runs);
    free(m->rows);
    free(m->run_row);
    free(m->jobs);
    free((void *)m->cells);
    free(m->attempts);
}

/* The key is owned by the arena. */
static const char *row_key(arena *a, const hrun *r, bool nightly)
{
    char key[CRCR_DELIVERY_ID_MAX + 32];
    if (nightly)
        snprintf(key, sizeof(key), "n:%s", r->delivery_id ? r->delivery_id : "");
    else if (r->pr_number > 0)
        snprintf(key, sizeof(key), "pr:%lld", (long long)r->pr_number);
    else
        snprintf(key, sizeof(key), "sha:%s", r->head_sha ? r->head_sha : "");
    return arena_dup(a, key);
}

/* The key is owned by the arena. */
static const char *job_key(arena *a, const hrun *r)
{
    size_t wn = strlen(r->workflow), jn = strlen(r->job);
    char *k = arena_alloc(a, wn + jn + 2);
    if (!k)
        return NULL;
    memcpy(k, r->workflow, wn);
    k[wn] = '\x1f';
    memcpy(k + wn + 1, r->job, jn + 1);
    return k;
}

static int cmp_mjob(const void *a, const void *b)
{
    return strcmp(((const mjob *)a)->key, ((const mjob *)b)->key);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Its scratch arrays are freed before it returns. */
static crcr_err trend_build(trend *tr, const hrun *const *runs, size_t n_runs, int64_t since,
                            int64_t window)
{
    memset(tr, 0, sizeof(*tr));
    int64_t width = window / HUD_TREND_BUCKETS;
    if (width <= 0)
        width = 1;
    int64_t *execs = malloc((n_runs ? n_runs : 1) * sizeof(*execs));
    size_t *bucket_of = malloc((n_runs ? n_runs : 1) * sizeof(*bucket_of));
    if (!execs || !bucket_of) {
        free(execs);
        free(bucket_of);
        return CRCR_E_NOMEM;
    }
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        tr->start[b] = since + width * b;
        tr->exec_p50[b] = -1;
    }
    for (size_t i = 0; i < n_runs; i++) {
        const hrun *r = runs[i];
        bucket_of[i] = (size_t)-1;
        if (r->completed_at < since || r->completed_at <= 0)
            continue;
        int64_t b = (r->completed_at - since) / width;
        if (b >= HUD_TREND_BUCKETS)
            b = HUD_TREND_BUCKETS - 1;
        bucket_of[i] = (size_t)b;
        tr->runs[b]++;
        crcr_outcome oc = outcome_of_run(r->state, r->conclusion, r->ended);
        if (oc == OUTCOME_SUCCESS)
            tr->success[b]++;
        if (oc != OUTCOME_CANCELLED && oc != OUTCOME_SUPERSEDED)
            tr->rate_runs[b]++;
    }
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        size_t n = 0;
        for (size_t i = 0; i < n_runs; i++)
            if (bucket_of[i] == (size_t)b && runs[i]->exec_ms >= 0)
                execs[n++] = runs[i]->exec_ms;
        if (n) {
            qsort(execs, n, sizeof(*execs), cmp_i64);
            tr->exec_p50[b] = execs[(n - 1) / 2];
        }
    }
    free(execs);
    free(bucket_of);
    return CRCR_OK;
}

/* Whether the run belongs on the nightly tab. */
static bool run_is_nightly(const hrun *r)
{
    return r->event_type &&
           (strcmp(r->event_type, "nightly") == 0 || strcmp(r->event_type, "periodic") == 0);
}

/* Fills the model; *status 404 when the repo is neither allowlisted nor has runs. One read of
 * the repo's runs serves both the matrix and its health numbers (computed as
 * health_report_build would: runs updated within the window, refused callbacks since then).
 * What it allocates is the model's (repo_model_free); its strings are the arena's. */
static crcr_err repo_model_build(hud_req *r, repo_model *m, int *status)
{
    *status = 0;
    health_entry *en = calloc(1, sizeof(*en));
    if (!en)
        return CRCR_E_NOMEM;
    m->rep.entries = en;
    m->rep.n = 1;
    m->rep.generated_at = r->now;
    m->rep.window_ms = m->window;
    m->rep.since = r->now - m->window;
    health_thresholds_default(&m->rep.t);
    allowlist *al = allowlist_source_get(r->app->allow);
    const allowlist_entry *ae = al ? allowlist_find(al, m->repo) : NULL;
    if (ae) {
        snprintf(m->repo, sizeof(m->repo), "%s", ae->repo); /* as the allowlist writes it */
        en->level = ae->level;
        snprintf(en->device, sizeof(en->device), "%s", ae->device ? ae->device : "");
    }
    snprintf(en->repo, sizeof(en->repo), "%s", m->repo);
    allowlist_free(al);

    run_list *all = &m->all;
    all->a = &r->a;
    store_run_filter f = {.repo = m->repo, .limit = HUD_REPO_MAX_RUNS, .no_payload = true};
    crcr_err e = store_list_runs(r->app->st, &f, hud_collect_run, all);
    if (!e && (all->oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e && !ae && all->n == 0)
        *status = 404;
    if (e || *status)
        return e;
    if (!ae && all->v[0]->level >= CRCR_LEVEL_L1 && all->v[0]->level <= CRCR_LEVEL_L4)
        en->level = (crcr_level)all->v[0]->level; /* delisted: the level it last reported at */

    /* Health over the window, and the matrix's runs of the tab, from the same rows. */
    health_run *hr = malloc((all->n ? all->n : 1) * sizeof(*hr));
    m->runs = malloc((all->n ? all->n : 1) * sizeof(*m->runs));
    if (!hr || !m->runs) {
        free(hr);
        return CRCR_E_NOMEM;
    }
    size_t nh = 0;
    for (size_t i = 0; i < all->n; i++) {
        const hrun *run = all->v[i];
        health_run h = health_run_of(
            run->state, run->conclusion, run->ended, run->event_type, run->pr_number, run->head_sha,
            run->dispatched_at, run->started_at, run->completed_at, run->queue_ms, run->exec_ms);
        if (health_run_updated(&h) >= m->rep.since)
            hr[nh++] = h;
        if (run_is_nightly(run) == m->nightly)
            m->runs[m->n_runs++] = run;
    }
    int64_t rejected = 0;
    e = store_callback_rejections(r->app->st, m->repo, m->rep.since, &rejected);
    if (!e)
        e = health_entry_compute(en, hr, nh, rejected, &m->rep.t);
    free(hr);
    if (e)
        return e;

    /* Rows in order of their newest run (runs come newest first). */
    smap rows = {0};
    m->run_row = malloc((m->n_runs ? m->n_runs : 1) * sizeof(*m->run_row));
    if (!m->run_row)
        return CRCR_E_NOMEM;
    for (size_t i = 0; i < m->n_runs; i++) {
        const hrun *run = m->runs[i];
        const char *k = row_key(&r->a, run, m->nightly);
        if (!k) {
            smap_free(&rows);
            return CRCR_E_NOMEM;
        }
        size_t idx = smap_get_or_add(&rows, k, m->n_rows);
        if (idx == (size_t)-1) {
            smap_free(&rows);
            return CRCR_E_NOMEM;
        }
        if (idx == m->n_rows) {
            mrow *row = vec_push((void **)&m->rows, &m->n_rows, &m->cap_rows, sizeof(*m->rows));
            if (!row) {
                smap_free(&rows);
                return CRCR_E_NOMEM;
            }
            row->key = k;
            row->pr_number = m->nightly ? 0 : run->pr_number;
            row->head_sha = run->head_sha;
            row->delivery_id = run->delivery_id;
        }
        int64_t t_run = hud_run_time(run);
        if (t_run > m->rows[idx].updated_at)
            m->rows[idx].updated_at = t_run;
        m->run_row[i] = idx;
    }
    smap_free(&rows);
    m->pages = m->n_rows ? (long)((m->n_rows + HUD_PAGE_ROWS - 1) / HUD_PAGE_ROWS) : 1;
    m->first_row = (size_t)(m->page - 1) * HUD_PAGE_ROWS;
    m->page_rows = 0;
    if (m->first_row < m->n_rows) {
        m->page_rows = m->n_rows - m->first_row;
        if (m->page_rows > HUD_PAGE_ROWS)
            m->page_rows = HUD_PAGE_ROWS;
    }

    /* Job columns of this page's rows. */
    smap jobs = {0};
    for (size_t i = 0; i < m->n_runs; i++) {
        size_t row = m->run_row[i];
        if (row < m->first_row || row >= m->first_row + m->page_rows)
            continue;
        const char *k = job_key(&r->a, m->runs[i]);
        if (!k) {
            smap_free(&jobs);
            return CRCR_E_NOMEM;
        }
        size_t idx = smap_get_or_add(&jobs, k, m->n_jobs);
        if (idx == (size_t)-1) {
            smap_free(&jobs);
            return CRCR_E_NOMEM;
        }
        if (idx == m->n_jobs) {
            mjob *j = vec_push((void **)&m->jobs, &m->n_jobs, &m->cap_jobs, sizeof(*m->jobs));
            if (!j) {
                smap_free(&jobs);
                return CRCR_E_NOMEM;
            }
            j->key = k;
            j->sample = m->runs[i];
        }
    }
    smap_free(&jobs);
    if (m->n_jobs)
        qsort(m->jobs, m->n_jobs, sizeof(*m->jobs), cmp_mjob);
    if (m->n_jobs > HUD_JOBS_MAX) {
        m->jobs_hidden = m->n_jobs - HUD_JOBS_MAX;
        m->n_jobs = HUD_JOBS_MAX;
    }
    smap cols = {0};
    for (size_t j = 0; j < m->n_jobs; j++)
        if (smap_get_or_add(&cols, m->jobs[j].key, j) == (size_t)-1) {
            smap_free(&cols);
            return CRCR_E_NOMEM;
        }
    size_t ncells = m->page_rows * m->n_jobs;
    m->cells = calloc(ncells ? ncells : 1, sizeof(*m->cells));
    m->attempts = calloc(ncells ? ncells : 1, sizeof(*m->attempts));
    if (!m->cells || !m->attempts) {
        smap_free(&cols);
        return CRCR_E_NOMEM;
    }
    for (size_t i = 0; i < m->n_runs && ncells; i++) {
        size_t row = m->run_row[i];
        if (row < m->first_row || row >= m->first_row + m->page_rows)
            continue;
        const char *k = job_key(&r->a, m->runs[i]);
        if (!k) {
            smap_free(&cols);
            return CRCR_E_NOMEM;
        }
        size_t col = smap_get_or_add(&cols, k, (size_t)-2);
        if (col >= m->n_jobs)
            continue; /* hidden column (or the probe just added it: never looked at again) */
        size_t c = (row - m->first_row) * m->n_jobs + col;
        if (!m->cells[c])
            m->cells[c] = m->runs[i]; /* newest first */
        m->attempts[c]++;
    }
    smap_free(&cols);
    return trend_build(&m->tr, m->runs, m->n_runs, r->now - m->window, m->window);
}

static void repo_json(hud_req *r, repo_model *m)
{
    jw w;
    jw_init(&w, &r->out);
    const health_entry *en = &m->rep.entries[0];
    jw_obj(&w);
    jw_kstr(&w, "repo", m->repo);
    jw_kstr(&w, "level", crcr_level_name(en->level));
    jw_kstr(&w, "tab", m->nightly ? "nightly" : "pr");
    jw_kint(&w, "page", m->page);
    jw_kint(&w, "pages", m->pages);
    jw_kint(&w, "per_page", HUD_PAGE_ROWS);
    jw_kint(&w, "rows_total", (int64_t)m->n_rows);
    jw_kint(&w, "window_s", m->window / 1000);
    jw_key(&w, "health");
    jw_value_begin(&w);
    if (!w.err)
        w.err = health_entry_json(en, &r->out);
    jw_key(&w, "jobs");
    jw_arr(&w);
    for (size_t j = 0; j < m->n_jobs; j++) {
        jw_obj(&w);
        jw_kstr(&w, "workflow", m->jobs[j].sample->workflow);
        jw_kstr(&w, "job", m->jobs[j].sample->job);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_kint(&w, "jobs_hidden", (int64_t)m->jobs_hidden);
    jw_key(&w, "rows");
    jw_arr(&w);
    for (size_t i = 0; i < m->page_rows; i++) {
        const mrow *row = &m->rows[m->first_row + i];
        jw_obj(&w);
        jw_key(&w, "pr_number");
        row->pr_number > 0 ? jw_int(&w, row->pr_number) : jw_null(&w);
        jw_kstr(&w, "head_sha", row->head_sha);
        jw_kstr(&w, "delivery_id", row->delivery_id);
        jw_ktime(&w, "updated_at", row->updated_at);
        jw_key(&w, "cells");
        jw_arr(&w);
        for (size_t j = 0; j < m->n_jobs; j++) {
            const hrun *c = m->cells[i * m->n_jobs + j];
            if (!c) {
                jw_null(&w);
                continue;
            }
            hud_run_json(&w, c, false);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_key(&w, "trend");
    jw_arr(&w);
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        jw_obj(&w);
        jw_ktime(&w, "start", m->tr.start[b]);
        jw_kint(&w, run_status_name(RUN_STATUS_COMPLETED), m->tr.runs[b]);
        jw_kint(&w, outcome_name(OUTCOME_SUCCESS), m->tr.success[b]);
        jw_knum(&w, "success_rate_pct",
                m->tr.rate_runs[b] ? 100.0 * (double)m->tr.success[b] / (double)m->tr.rate_runs[b]
                                   : -1,
                1);
        jw_ksecs(&w, "exec_p50_s", m->tr.exec_p50[b]);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    hud_answer_out(r, w.err);
}

static void h_repo_tab_link(hout *o, const char *repo, bool nightly, long page)
{
    h_raw(o, "/crcr/");
    const char *slash = strchr(repo, '/');
    char owner[CRCR_REPO_NAME_MAX];
    snprintf(owner, sizeof(owner), "%.*s", slash ? (int)(slash - repo) : 0, repo);
    h_url_part(o, owner);
    h_raw(o, "/");
    h_url_part(o, slash ? slash + 1 : repo);
    bool q = false;
    if (nightly) {
        h_raw(o, "?tab=nightly");
        q = true;
    }
    if (page > 1)
        h_rawf(o, "%spage=%ld", q ? "&amp;" : "?", page);
}

static void repo_html(hud_req *r, repo_model *m)
{
    hout o;
    hout_init(&o, &r->out);
    const health_entry *en = &m->rep.entries[0];
    const health_stats *s = &en->stats;
    h_page_begin(&o, m->repo, "repos");
    h_raw(&o, "<h1>");
    h_text(&o, m->repo);
    h_rawf(&o, " <span class=\"badge level\">%s</span> ", crcr_level_name(en->level));
    h_health_badge(&o, en);
    h_raw(&o, "</h1><p class=\"muted\">");
    if (en->device[0]) {
        h_raw(&o, "Device ");
        h_text(&o, en->device);
        h_raw(&o, ". ");
    }
    h_text(&o, en->verdict.reason);
    h_raw(&o, ". <a href=\"");
    h_text(&o, config_web_url(&r->app->cfg));
    h_raw(&o, "/");
    h_text(&o, m->repo);
    h_raw(&o, "\" rel=\"noopener noreferrer nofollow\">Repository</a> &middot; <a href=\"/api/v1/"
              "repos/");
    h_text(&o, m->repo);
    h_raw(&o, "/runs\">JSON</a></p>");
    if (en->level == CRCR_LEVEL_L1)
        h_raw(&o, "<p class=\"note\">L1 repos receive events only; their callbacks are ignored, "
                  "so no results appear here.</p>");

    char win[24];
    health_window_label(m->window, win, sizeof(win));
    h_raw(&o, "<div class=\"cards\" id=\"stats\">");
    h_card(&o, "stat-runs", "Runs");
    h_rawf(&o, "<div class=\"v\">%lld</div><div class=\"s\">last ", (long long)s->runs);
    h_text(&o, win);
    h_rawf(&o, ", %lld running</div></div>", (long long)s->running);
    h_card(&o, "stat-success", "Success rate");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->success_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld of %lld; %lld cancelled not counted</div></div>",
           (long long)s->success, (long long)s->rate_runs, (long long)s->cancelled);
    h_card(&o, "stat-timeouts", "Timed out");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->timeout_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld runs</div></div>", (long long)s->timed_out);
    h_card(&o, "stat-queue", "Queue p50 / p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->queue_p50_ms);
    h_raw(&o, "</div><div class=\"s\">p90 ");
    h_dur(&o, s->queue_p90_ms);
    h_raw(&o, "</div></div>");
    h_card(&o, "stat-exec", "Execution p50 / p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->exec_p50_ms);
    h_raw(&o, "</div><div class=\"s\">p90 ");
    h_dur(&o, s->exec_p90_ms);
    h_raw(&o, "</div></div>");
    h_card(&o, "stat-total", "PR total p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->total_p90_ms);
    h_rawf(&o, "</div><div class=\"s\">worst ");
    h_dur(&o, s->total_max_ms);
    h_rawf(&o, " over %lld heads</div></div>", (long long)s->heads);
    h_card(&o, "stat-rejections", "Callback rejections");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->reject_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld refused, %lld accepted</div></div>",
           (long long)s->callbacks_rejected, (long long)s->callbacks_accepted);
    h_raw(&o, "</div>");

    h_raw(&o, "<nav class=\"tabs\"><a href=\"");
    h_repo_tab_link(&o, m->repo, false, 1);
    h_rawf(&o, "\"%s>PRs and pushes</a><a href=\"", m->nightly ? "" : " class=\"active\"");
    h_repo_tab_link(&o, m->repo, true, 1);
    h_rawf(&o, "\"%s>Nightly / periodic</a></nav>", m->nightly ? " class=\"active\"" : "");

    /* Trend charts over the window. */
    double rate[HUD_TREND_BUCKETS], dur[HUD_TREND_BUCKETS];
    bool has_rate[HUD_TREND_BUCKETS], has_dur[HUD_TREND_BUCKETS];
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        has_rate[b] = m->tr.rate_runs[b] > 0;
        rate[b] = has_rate[b] ? 100.0 * (double)m->tr.success[b] / (double)m->tr.rate_runs[b] : 0;
        has_dur[b] = m->tr.exec_p50[b] >= 0;
        dur[b] = has_dur[b] ? (double)m->tr.exec_p50[b] / 1000.0 : 0;
    }
    html_chart c1 = {.title = "Pass rate",
                     .unit = "%",
                     .values = rate,
                     .has = has_rate,
                     .starts = m->tr.start,
                     .n = HUD_TREND_BUCKETS,
                     .ymax = 100,
                     .end = r->now,
                     .css_class = "rate"};
    html_chart c2 = {.title = "Median execution time",
                     .unit = "s",
                     .values = dur,
                     .has = has_dur,
                     .starts = m->tr.start,
                     .n = HUD_TREND_BUCKETS,
                     .end = r->now,
                     .css_class = "dur"};
    h_raw(&o, "<div class=\"charts\">");
    h_chart(&o, &c1);
    h_chart(&o, &c2);
    h_raw(&o, "</div>");

    h_rawf(&o, "<h2>%s <span class=\"muted\">(%zu row%s)</span></h2>",
           m->nightly ? "Nightly and periodic runs" : "Results by PR", m->n_rows,
           m->n_rows == 1 ? "" : "s");
    if (m->page_rows == 0) {
        h_raw(&o, m->n_rows ? "<p class=\"muted\">No rows on this page.</p>"
                            : "<p class=\"muted\">No runs reported yet.</p>");
    } else {
        h_raw(&o, "<div class=\"scroll\"><table class=\"matrix\"><thead><tr><th>");
        h_raw(&o, m->nightly ? "Upstream commit" : "PR / push");
        h_raw(&o, "</th>");
        for (size_t j = 0; j < m->n_jobs; j++) {
            h_raw(&o, "<th class=\"job\">");
            h_job_label(&o, m->jobs[j].sample);
            h_raw(&o, "</th>");
        }
        h_raw(&o, "</tr></thead><tbody>");
        for (size_t i = 0; i < m->page_rows; i++) {
            const mrow *row = &m->rows[m->first_row + i];
            h_raw(&o, "<tr><td class=\"row\">");
            if (row->pr_number > 0) {
                h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a> ", (long long)row->pr_number,
                       (long long)row->pr_number);
            } else if (!m->nightly) {
                h_raw(&o, "push ");
            }
            h_raw(&o, "<span class=\"mono muted\">");
            h_textn(&o, row->head_sha ? row->head_sha : (row->delivery_id ? row->delivery_id : ""),
                    7);
            h_raw(&o, "</span><br><span class=\"muted\">");
            h_ago(&o, row->updated_at, r->now);
            h_raw(&o, "</span></td>");
            for (size_t j = 0; j < m->n_jobs; j++) {
                size_t c = i * m->n_jobs + j;
                const hrun *run = m->cells[c];
                h_raw(&o, "<td>");
                if (run) {
                    h_chip(&o, run, m->attempts[c]);
                    if (html_url_ok(run->artifact_url)) {
                        h_raw(&o, "<br>");
                        h_link(&o, run->artifact_url, "artifacts", "artifact");
                    }
                } else {
                    h_raw(&o, "<span class=\"muted\">&middot;</span>");
                }
                h_raw(&o, "</td>");
            }
            h_raw(&o, "</tr>");
        }
        h_raw(&o, "</tbody></table></div>");
        if (m->jobs_hidden)
            h_rawf(&o, "<p class=\"muted\">%zu more job columns not shown; see the JSON.</p>",
                   m->jobs_hidden);
    }
    h_rawf(&o, "<nav class=\"pager\"><span>Page %ld of %ld</span>", m->page, m->pages);
    if (m->page > 1) {
        h_raw(&o, "<a rel=\"prev\" href=\"");
        h_repo_tab_link(&o, m->repo, m->nightly, m->page - 1);
        h_raw(&o, "\">&larr; newer</a>");
    }
    if (m->page < m->pages && m->page < HUD_PAGE_MAX) {
        h_raw(&o, "<a rel=\"next\" href=\"");
        h_repo_tab_link(&o, m->repo, m->nightly, m->page + 1);
        h_raw(&o, "\">older &rarr;</a>");
    }
    h_raw(&o, "</nav>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    hud_answer_out(r, o.err);
}

void hud_repo(hud_req *r, const char *rest)
{
    repo_model m;
    memset(&m, 0, sizeof(m));
    size_t n = strlen(rest);
    if (r->api && n > 5 && strcmp(rest + n - 5, "/runs") == 0)
        n -= 5;
    if (!hud_parse_repo(rest, n, m.repo, sizeof(m.repo))) {
        hud_answer_error(r, 404, "Not found");
        return;
    }
    const char *tab = http_req_query(r->req, "tab");
    if (tab && *tab && strcmp(tab, "nightly") != 0 && strcmp(tab, "pr") != 0) {
        hud_answer_error(r, 400, "tab: expected pr or nightly");
        return;
    }
    m.nightly = tab && strcmp(tab, "nightly") == 0;
    if (hud_query_int(r->req, "page", 1, HUD_PAGE_MAX, 1, &m.page) != 0) {
        hud_answer_error(r, 400, "page: expected an integer from 1 to 1000");
        return;
    }
    if (hud_query_window(r->req, &m.window) != 0) {
        hud_answer_error(r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        return;
    }
    int status = 0;
    crcr_err e = repo_model_build(r, &m, &status);
    if (e)
        hud_answer_out(r, e);
    else if (status)
        hud_answer_error(r, status, "Not found: this repo is not allowlisted and has no runs");
    else if (r->api)
        repo_json(r, &m);
    else
        repo_html(r, &m);
    repo_model_free(&m);
}
