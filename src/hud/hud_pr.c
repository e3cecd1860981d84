/*
 * hud_pr.c - the PR page: every downstream result of one upstream PR, per head sha: the
 * webhooks with each target's dispatch state, the runs with their links, and the check runs
 * posted on the PR; and the merge-blocking answer for L4 repos; see hud_pr.h.
 */
#include "hud_pr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "allowlist_source.h"
#include "clock.h"
#include "html.h"
#include "hud_html.h"
#include "ids.h"
#include "crcr_limits.h"

/* Runs and deliveries read for one PR page. */
#define HUD_PR_MAX_RUNS 5000
#define HUD_PR_MAX_DELIVERIES 200

/* Tests passed / failed / skipped, "-" when the run reported none. */
static void h_tests(hout *o, const hrun *r)
{
    if (r->passed < 0 && r->failed < 0 && r->skipped < 0) {
        h_raw(o, "-");
        return;
    }
    h_rawf(o, "%lld / %lld / %lld", (long long)(r->passed < 0 ? 0 : r->passed),
           (long long)(r->failed < 0 ? 0 : r->failed),
           (long long)(r->skipped < 0 ? 0 : r->skipped));
}

/* {web host}/{upstream}/pull/{n}: https://github.com, or GitHub Enterprise Server's host. */
static void h_upstream_pr_link(hout *o, const char *web, const char *upstream, int64_t pr,
                               const char *text)
{
    buf_t url;
    buf_init(&url, strlen(web) + CRCR_REPO_NAME_MAX + 32);
    if (buf_printf(&url, "%s/%s/pull/%lld", web, upstream, (long long)pr) == CRCR_OK)
        h_link(o, buf_cstr(&url), text, NULL);
    buf_free(&url);
}

typedef struct pr_model {
    int64_t pr;
    delivery_list dl;
    run_list runs;
    const char **shas;
    size_t n_shas, cap_shas;
} pr_model;

static int cmp_run_for_pr(const void *a, const void *b)
{
    const hrun *x = *(const hrun *const *)a, *y = *(const hrun *const *)b;
    int c = strcasecmp(x->repo ? x->repo : "", y->repo ? y->repo : "");
    if (c)
        return c;
    c = strcmp(x->workflow, y->workflow);
    if (c)
        return c;
    c = strcmp(x->job, y->job);
    if (c)
        return c;
    return (y->run_attempt > x->run_attempt) - (y->run_attempt < x->run_attempt);
}

/* NULL and "" are the same (unknown) sha. */
static bool same_sha(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* What it allocates is the model's (pr_model_free); its strings are the arena's. */
static crcr_err pr_model_build(hud_req *r, pr_model *m)
{
    m->dl.a = &r->a;
    m->runs.a = &r->a;
    store_filter f = {.pr_number = m->pr, .limit = HUD_PR_MAX_DELIVERIES};
    crcr_err e = store_list_deliveries(r->app->st, &f, hud_collect_delivery, &m->dl);
    if (!e && (m->dl.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e)
        e = hud_load_jobs(r->app->st, &r->a, m->dl.v, m->dl.n);
    store_run_filter rf = {
        .pr_number = m->pr, .kind = 1, .limit = HUD_PR_MAX_RUNS, .no_payload = true};
    if (!e)
        e = store_list_runs(r->app->st, &rf, hud_collect_run, &m->runs);
    if (!e && (m->runs.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (e)
        return e;
    /* Head shas, newest first: from the deliveries, then any only runs know. */
    for (size_t i = 0; i < m->dl.n + m->runs.n; i++) {
        const char *sha = i < m->dl.n ? m->dl.v[i].head_sha : m->runs.v[i - m->dl.n]->head_sha;
        bool seen = false;
        for (size_t k = 0; k < m->n_shas && !seen; k++)
            seen = same_sha(m->shas[k], sha);
        if (seen)
            continue;
        const char **slot = vec_push((void **)&m->shas, &m->n_shas, &m->cap_shas, sizeof(*m->shas));
        if (!slot)
            return CRCR_E_NOMEM;
        *slot = sha ? sha : "";
    }
    if (m->runs.n)
        qsort(m->runs.v, m->runs.n, sizeof(*m->runs.v), cmp_run_for_pr);
    return CRCR_OK;
}

static void pr_model_free(pr_model *m)
{
    hud_free_deliveries(m->dl.v, m->dl.n);
    free(m->runs.v);
    free((void *)m->shas);
}

static void pr_json(hud_req *r, pr_model *m)
{
    jw w;
    jw_init(&w, &r->out);
    jw_obj(&w);
    jw_kint(&w, "pr_number", m->pr);
    jw_kstr(&w, "upstream_repo", r->app->cfg.upstream_repo);
    jw_key(&w, "shas");
    jw_arr(&w);
    for (size_t s = 0; s < m->n_shas; s++) {
        const char *sha = m->shas[s];
        jw_obj(&w);
        jw_kstr(&w, "head_sha", *sha ? sha : NULL);
        jw_key(&w, "deliveries");
        jw_arr(&w);
        for (size_t i = 0; i < m->dl.n; i++) {
            if (!same_sha(m->dl.v[i].head_sha, sha))
                continue;
            jw_obj(&w);
            ddoc_write_head(&w, &m->dl.v[i]);
            jw_key(&w, "dispatches");
            jw_arr(&w);
            for (size_t j = 0; j < m->dl.v[i].n_jobs; j++)
                if (ob_kind_parse(m->dl.v[i].jobs[j].kind) == OB_KIND_DISPATCH)
                    ddoc_write_job(&w, &m->dl.v[i].jobs[j], DDOC_HUD);
            jw_arr_end(&w);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_key(&w, "runs");
        jw_arr(&w);
        for (size_t i = 0; i < m->runs.n; i++)
            if (same_sha(m->runs.v[i]->head_sha, sha))
                hud_run_json(&w, m->runs.v[i], true);
        jw_arr_end(&w);
        jw_key(&w, "check_runs");
        jw_arr(&w);
        for (size_t i = 0; i < m->dl.n; i++) {
            if (!same_sha(m->dl.v[i].head_sha, sha))
                continue;
            for (size_t j = 0; j < m->dl.v[i].n_jobs; j++)
                if (ob_kind_parse(m->dl.v[i].jobs[j].kind) == OB_KIND_CHECK_RUN)
                    ddoc_write_job(&w, &m->dl.v[i].jobs[j], DDOC_HUD);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    hud_answer_out(r, w.err);
}

static void pr_html(hud_req *r, pr_model *m)
{
    hout o;
    hout_init(&o, &r->out);
    char title[48];
    snprintf(title, sizeof(title), "PR #%lld", (long long)m->pr);
    h_page_begin(&o, title, "repos");
    h_rawf(&o, "<h1>PR #%lld</h1><p class=\"muted\">", (long long)m->pr);
    h_upstream_pr_link(&o, config_web_url(&r->app->cfg), r->app->cfg.upstream_repo, m->pr,
                       "Open on GitHub");
    h_rawf(&o,
           " &middot; <a href=\"/api/v1/pr/%lld\">JSON</a> &middot; %zu head sha%s, %zu "
           "deliveries, %zu downstream runs</p>",
           (long long)m->pr, m->n_shas, m->n_shas == 1 ? "" : "s", m->dl.n, m->runs.n);
    if (!m->n_shas)
        h_raw(&o, "<p class=\"muted\">Nothing recorded for this PR.</p>");
    for (size_t s = 0; s < m->n_shas; s++) {
        const char *sha = m->shas[s];
        h_raw(&o, "<section class=\"sha\" data-sha=\"");
        h_text(&o, sha);
        h_raw(&o, "\"><h2>Head <code>");
        h_text(&o, *sha ? sha : "(unknown)");
        h_raw(&o, "</code></h2>");

        h_raw(&o, "<h3>Webhooks</h3><div class=\"scroll\"><table class=\"deliveries\"><thead>"
                  "<tr><th>Received</th><th>Delivery</th><th>Event</th><th>Dispatch</th></tr>"
                  "</thead><tbody>");
        size_t nd = 0;
        for (size_t i = 0; i < m->dl.n; i++) {
            const ddoc_delivery *d = &m->dl.v[i];
            if (!same_sha(d->head_sha, sha))
                continue;
            nd++;
            h_raw(&o, "<tr>");
            h_delivery_cells(&o, d, r->now);
            h_dispatch_targets(&o, d, r->now);
            h_raw(&o, "</td></tr>");
        }
        if (!nd)
            h_raw(&o, "<tr><td colspan=\"4\" class=\"muted\">No stored webhook (past "
                      "retention).</td></tr>");
        h_raw(&o, "</tbody></table></div>");

        h_raw(&o, "<h3>Downstream results</h3><div class=\"scroll\"><table class=\"results\">"
                  "<thead><tr><th>Repo</th><th>Level</th><th>Workflow / job</th><th>Result</th>"
                  "<th class=\"num hide-sm\">Queue</th><th class=\"num\">Exec</th>"
                  "<th class=\"num hide-sm\">Tests p/f/s</th><th>Links</th></tr></thead><tbody>");
        size_t nr = 0;
        for (size_t i = 0; i < m->runs.n; i++) {
            const hrun *run = m->runs.v[i];
            if (!same_sha(run->head_sha, sha))
                continue;
            nr++;
            h_raw(&o, "<tr data-repo=\"");
            h_text(&o, run->repo);
            h_raw(&o, "\"><td class=\"repo\">");
            h_repo_link(&o, run->repo);
            h_rawf(&o, "</td><td>%s</td><td class=\"job\">",
                   crcr_level_name((crcr_level)run->level));
            h_job_label(&o, run);
            if (run->run_attempt > 1)
                h_rawf(&o, " <span class=\"muted\">attempt %lld</span>",
                       (long long)run->run_attempt);
            h_raw(&o, "</td><td>");
            h_chip(&o, run, 1);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, run->queue_ms);
            h_raw(&o, "</td><td class=\"num\">");
            h_dur(&o, run->exec_ms);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_tests(&o, run);
            h_raw(&o, "</td><td>");
            h_link(&o, run->details_url, "run", NULL);
            if (run->artifact_url) {
                /* linked when https, shown as text otherwise */
                h_raw(&o, " &middot; ");
                h_link(&o, run->artifact_url,
                       html_url_ok(run->artifact_url) ? "artifacts" : run->artifact_url,
                       "artifact");
            }
            h_raw(&o, "</td></tr>");
        }
        if (!nr)
            h_raw(&o, "<tr><td colspan=\"8\" class=\"muted\">No downstream run has reported yet."
                      "</td></tr>");
        h_raw(&o, "</tbody></table></div>");

        h_raw(&o, "<h3>Check runs on the PR</h3><div class=\"scroll\"><table class=\"checks\">"
                  "<thead><tr><th>Name</th><th>Status</th><th>Outbox</th>"
                  "<th class=\"num\">Attempts</th><th>Queued</th></tr></thead><tbody>");
        size_t nc = 0;
        for (size_t i = 0; i < m->dl.n; i++) {
            const ddoc_delivery *d = &m->dl.v[i];
            if (!same_sha(d->head_sha, sha))
                continue;
            for (size_t j = 0; j < d->n_jobs; j++) {
                const ddoc_job *jb = &d->jobs[j];
                if (ob_kind_parse(jb->kind) != OB_KIND_CHECK_RUN)
                    continue;
                nc++;
                h_raw(&o, "<tr><td class=\"mono\">");
                h_text(&o, jb->check_name ? jb->check_name : "(unreadable)");
                h_raw(&o, "</td><td>");
                h_text(&o, jb->check_status);
                if (jb->check_conclusion) {
                    h_raw(&o, " / ");
                    h_text(&o, jb->check_conclusion);
                }
                h_raw(&o, "</td><td>");
                h_state(&o, jb);
                if (jb->last_error) {
                    h_raw(&o, " <span class=\"err\">");
                    h_text(&o, jb->last_error);
                    h_raw(&o, "</span>");
                }
                h_rawf(&o, "</td><td class=\"num\">%d</td><td>", jb->attempts);
                h_ago(&o, jb->created_at, r->now);
                h_raw(&o, "</td></tr>");
            }
        }
        if (!nc)
            h_raw(&o, "<tr><td colspan=\"5\" class=\"muted\">No check runs (L3 without the "
                      "label, or L2 and below).</td></tr>");
        h_raw(&o, "</tbody></table></div></section>");
    }
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    hud_answer_out(r, o.err);
}

/* GET /api/v1/pr/{n}/blocking?sha=SHA: L4 repos whose latest result per job for the sha failed
 * or is still running (upstream §2.5: cancelled and timed_out do not block). */
static void pr_blocking(hud_req *r, int64_t pr)
{
    const char *sha = http_req_query(r->req, "sha");
    if (!sha || !hud_sha_ok(sha)) {
        hud_answer_error(r, 400, "sha: required, 7 to 64 hex digits");
        return;
    }
    allowlist *al = allowlist_source_get(r->app->allow);
    if (!al) {
        hud_answer_error(r, 503, "allowlist not loaded");
        return;
    }
    size_t total = allowlist_count(al);
    jw w;
    jw_init(&w, &r->out);
    jw_obj(&w);
    jw_kint(&w, "pr_number", pr);
    jw_kstr(&w, "head_sha", sha);
    jw_key(&w, "l4_repos");
    jw_arr(&w);
    for (size_t i = 0; i < total; i++)
        if (allowlist_at(al, i)->level == CRCR_LEVEL_L4)
            jw_str(&w, allowlist_at(al, i)->repo);
    jw_arr_end(&w);
    jw_key(&w, "blocking");
    jw_arr(&w);
    size_t blocking = 0;
    crcr_err e = CRCR_OK;
    for (size_t i = 0; i < total && !e; i++) {
        const char *repo = allowlist_at(al, i)->repo;
        if (allowlist_at(al, i)->level != CRCR_LEVEL_L4)
            continue;
        /* This PR's runs of the sha, newest first: the first of each (workflow, job) is the
         * latest result (as store_runs_for_sha picks it), the rest are older attempts. */
        run_list rl = {.a = &r->a};
        store_run_filter f = {.repo = repo,
                              .pr_number = pr,
                              .head_sha = sha,
                              .kind = 1,
                              .limit = HUD_PR_MAX_RUNS,
                              .no_payload = true};
        e = store_list_runs(r->app->st, &f, hud_collect_run, &rl);
        if (!e && (rl.oom || r->a.oom))
            e = CRCR_E_NOMEM;
        bool open = false;
        for (size_t k = 0; k < rl.n && !e; k++) {
            const hrun *run = rl.v[k];
            bool older = false;
            for (size_t p = 0; p < k && !older; p++)
                older = strcmp(rl.v[p]->workflow, run->workflow) == 0 &&
                        strcmp(rl.v[p]->job, run->job) == 0;
            if (older)
                continue;
            crcr_outcome oc = outcome_of_run(run->state, run->conclusion, run->ended);
            if (oc != OUTCOME_RUNNING && oc != OUTCOME_FAILURE)
                continue;
            if (!open) {
                jw_obj(&w);
                jw_kstr(&w, "repo", repo);
                jw_key(&w, "jobs");
                jw_arr(&w);
                open = true;
                blocking++;
            }
            jw_obj(&w);
            jw_kstr(&w, "workflow", run->workflow);
            jw_kstr(&w, "job", run->job);
            jw_kstr(&w, "state", run->state);
            jw_kstr(&w, "conclusion", run->conclusion);
            jw_kstr(&w, "reason", oc == OUTCOME_RUNNING ? "still running" : "failed");
            jw_kstr(&w, "details_url", run->details_url);
            jw_obj_end(&w);
        }
        if (open) {
            jw_arr_end(&w);
            jw_obj_end(&w);
        }
        free(rl.v);
    }
    jw_arr_end(&w);
    jw_kbool(&w, "blocked", blocking > 0);
    jw_obj_end(&w);
    allowlist_free(al);
    hud_answer_out(r, e ? e : w.err);
}

void hud_pr(hud_req *r, const char *rest)
{
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    int64_t pr = 0;
    if (!ids_pr_number(rest, n, &pr)) {
        hud_answer_error(r, 404, "Not found");
        return;
    }
    if (slash) {
        if (r->api && strcmp(slash, "/blocking") == 0)
            pr_blocking(r, pr);
        else
            hud_answer_error(r, 404, "Not found");
        return;
    }
    pr_model m;
    memset(&m, 0, sizeof(m));
    m.pr = pr;
    crcr_err e = pr_model_build(r, &m);
    if (e)
        hud_answer_out(r, e);
    else if (r->api)
        pr_json(r, &m);
    else
        pr_html(r, &m);
    pr_model_free(&m);
}
