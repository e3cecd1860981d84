/*
 * hud_model.c - what the HUD's pages share: the request and its answers, strict parsing of path
 * and query inputs, and the store rows pages are built from, copied into the request's arena;
 * see hud_model.h.
 */
#include "hud_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"
#include "clock.h"
#include "html.h"
#include "ids.h"
#include "crcr_limits.h"
#include "log.h"

/* The headers of every HUD page: a strict CSP (no inline script or style), no sniffing, no
 * framing, no referrer, no caching by intermediaries. */
static void html_response_headers(http_response *resp)
{
    resp->content_type = "text/html; charset=utf-8";
    http_resp_header(resp, "Content-Security-Policy", HTML_CSP);
    http_resp_header(resp, "X-Content-Type-Options", "nosniff");
    http_resp_header(resp, "X-Frame-Options", "DENY");
    http_resp_header(resp, "Referrer-Policy", "no-referrer");
    http_resp_header(resp, "Cache-Control", "no-store");
}

/* Path and query inputs (owner/repo names by ids.h's rules): PR numbers of up to 10 digits,
 * integer query values of up to 12 characters. */
#define HUD_INT_PARAM_MAX 12u

/* The error page is built in a buffer of its own (freed here) and copied into the response. */
void hud_answer_error(hud_req *r, int status, const char *msg)
{
    if (r->api) {
        http_resp_detail(r->resp, status, msg);
        return;
    }
    buf_t b;
    buf_init(&b, 64 * 1024);
    hout o;
    hout_init(&o, &b);
    h_page_begin(&o, status == 404 ? "Not found" : "Error", NULL);
    h_rawf(&o, "<h1>%d</h1><p class=\"err\">", status);
    h_text(&o, msg);
    h_raw(&o, "</p><p><a href=\"/crcr\">Back to the HUD</a></p>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    r->resp->status = status;
    buf_reset(&r->resp->body);
    buf_append(&r->resp->body, buf_cstr(&b), b.len);
    html_response_headers(r->resp);
    buf_free(&b);
}

void hud_answer_out(hud_req *r, crcr_err err)
{
    if (err || r->a.oom) {
        LOG_WARN("hud.render_failed", "path", r->req->path, "error",
                 crcr_strerror(err ? err : CRCR_E_NOMEM), NULL);
        hud_answer_error(r, err == CRCR_E_STORE ? 503 : 500,
                         err == CRCR_E_STORE ? "store unavailable, please retry"
                                             : "could not build this page");
        return;
    }
    r->resp->status = 200;
    buf_reset(&r->resp->body);
    if (buf_append(&r->resp->body, r->out.data ? r->out.data : "", r->out.len) != CRCR_OK) {
        hud_answer_error(r, 500, "answer too large");
        return;
    }
    if (r->api) {
        r->resp->content_type = "application/json";
        http_resp_header(r->resp, "Cache-Control", "no-store");
        http_resp_header(r->resp, "X-Content-Type-Options", "nosniff");
    } else {
        html_response_headers(r->resp);
    }
}

int hud_int_arg(const char *v, long min, long max, long dflt, long *out)
{
    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    if (strlen(v) > HUD_INT_PARAM_MAX)
        return -1;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

int hud_query_int(const http_request *req, const char *name, long min, long max, long dflt,
                  long *out)
{
    return hud_int_arg(http_req_query(req, name), min, max, dflt, out);
}

bool hud_parse_repo(const char *s, size_t n, char *out, size_t outsz)
{
    const char *slash = memchr(s, '/', n);
    if (!slash || n >= outsz)
        return false;
    size_t on = (size_t)(slash - s), rn = n - on - 1;
    if (!ids_owner_valid(s, on) || !ids_repo_name_valid(slash + 1, rn))
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

bool hud_sha_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 7 || n > CRCR_SHA_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

int hud_query_window(const http_request *req, int64_t *ms)
{
    const char *v = http_req_query(req, "window");
    if (!v || !*v) {
        *ms = HEALTH_WINDOW_DEFAULT_MS;
        return 0;
    }
    return health_parse_window(v, ms);
}

/* *rep is the caller's (health_report_free). */
crcr_err hud_build_report(hud_req *r, const char *only_repo, int64_t window, health_report *rep)
{
    allowlist *al = allowlist_source_get(r->app->allow);
    health_thresholds t;
    health_thresholds_from_config(&t, &r->app->cfg);
    crcr_err e = health_report_build(r->app->st, al, only_repo, r->now, window, &t, rep);
    allowlist_free(al);
    return e;
}

/* ------------------------------------------------------------------------------------------ */
/* Runs, as copied out of the store */

/* The run is owned by the arena, l->v by the caller (free). */
void hud_collect_run(void *ctx, const store_run_row *r)
{
    run_list *l = ctx;
    if (l->oom)
        return;
    arena *a = l->a;
    hrun *h = arena_alloc(a, sizeof(*h));
    hrun **slot = h ? vec_push((void **)&l->v, &l->n, &l->cap, sizeof(*l->v)) : NULL;
    if (!slot) {
        l->oom = true;
        return;
    }
    *slot = h;
    h->delivery_id = arena_dup(a, r->delivery_id);
    h->repo = arena_dup(a, r->repo);
    h->workflow = arena_dup(a, r->workflow_name ? r->workflow_name : "");
    h->job = arena_dup(a, r->job_name ? r->job_name : "");
    h->state = arena_dup(a, r->state);
    h->conclusion = arena_dup(a, r->conclusion);
    /* A downstream's artifact link is an https:// URL or nothing: callbacks keep no other since
     * schema 4, and a row of an older store is not shown or served with one either. The details
     * URL is the relay's own (GitHub's web host; a Buildkite run's https://buildkite.com/). */
    h->details_url = arena_dup(a, r->details_url);
    h->artifact_url = html_url_ok(r->artifact_url) ? arena_dup(a, r->artifact_url) : NULL;
    h->head_sha = arena_dup(a, r->head_sha);
    h->event_type = arena_dup(a, r->event_type);
    h->ended = arena_dup(a, r->ended);
    h->run_id = arena_dup(a, r->run_id ? r->run_id : "");
    h->run_attempt = r->run_attempt;
    h->pr_number = r->pr_number;
    h->level = r->level;
    h->dispatched_at = r->dispatched_at;
    h->started_at = r->started_at;
    h->completed_at = r->completed_at;
    h->queue_ms = r->queue_ms;
    h->exec_ms = r->exec_ms;
    h->passed = r->test_passed;
    h->failed = r->test_failed;
    h->skipped = r->test_skipped;
    if (a->oom)
        l->oom = true;
}

int64_t hud_run_time(const hrun *r)
{
    int64_t t = r->completed_at > r->started_at ? r->completed_at : r->started_at;
    return t > r->dispatched_at ? t : r->dispatched_at;
}

const char *hud_run_result(const hrun *r)
{
    return outcome_name(outcome_of_run(r->state, r->conclusion, r->ended));
}

void hud_run_json(jw *w, const hrun *r, bool with_repo)
{
    jw_obj(w);
    if (with_repo) {
        jw_kstr(w, "repo", r->repo);
        jw_kstr(w, "level", crcr_level_name((crcr_level)r->level));
    }
    jw_kstr(w, "workflow", r->workflow);
    jw_kstr(w, "job", r->job);
    jw_kstr(w, "state", r->state);
    jw_kstr(w, "conclusion", r->conclusion);
    jw_kstr(w, "result", hud_run_result(r));
    if (r->ended) /* why the relay ended it (§3.12): the result is then "superseded" */
        jw_kstr(w, "ended", r->ended);
    jw_kstr(w, "run_id", r->run_id);
    jw_kint(w, "run_attempt", r->run_attempt);
    jw_kstr(w, "delivery_id", r->delivery_id);
    jw_kstr(w, "event_type", r->event_type);
    jw_kint(w, "pr_number", r->pr_number);
    jw_kstr(w, "head_sha", r->head_sha);
    jw_kstr(w, "details_url", r->details_url);
    jw_kstr(w, "artifact_url", r->artifact_url);
    jw_ktime(w, "dispatched_at", r->dispatched_at);
    jw_ktime(w, "started_at", r->started_at);
    jw_ktime(w, "completed_at", r->completed_at);
    jw_ksecs(w, "queue_s", r->queue_ms);
    jw_ksecs(w, "exec_s", r->exec_ms);
    jw_key(w, "tests");
    if (r->passed < 0 && r->failed < 0 && r->skipped < 0) {
        jw_null(w);
    } else {
        jw_obj(w);
        jw_key(w, "passed");
        r->passed >= 0 ? jw_int(w, r->passed) : jw_null(w);
        jw_key(w, "failed");
        r->failed >= 0 ? jw_int(w, r->failed) : jw_null(w);
        jw_key(w, "skipped"); /* vocab-ok: a test count, not a conclusion */
        r->skipped >= 0 ? jw_int(w, r->skipped) : jw_null(w);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Deliveries and their outbox rows */

/* The copies are owned by the arena, l->v by the caller (hud_free_deliveries). */
int hud_collect_delivery(void *ctx, const store_delivery_row *r)
{
    delivery_list *l = ctx;
    ddoc_delivery *d = vec_push((void **)&l->v, &l->n, &l->cap, sizeof(*l->v));
    if (!d) {
        l->oom = true;
        return 1;
    }
    ddoc_copy_delivery(l->a, d, r);
    return l->a->oom;
}

/* The copies are owned by the arena. */
void hud_copy_detail_delivery(void *ctx, const store_delivery_row *r, const char *payload,
                              size_t payload_len)
{
    job_ctx *c = ctx;
    ddoc_copy_delivery(c->a, c->d, r);
}

/* The row's copies are owned by the arena, the jobs array by the delivery. */
void hud_collect_job(void *ctx, const store_job_row *j)
{
    job_ctx *c = ctx;
    if (!ddoc_add_job(c->a, c->d, j, DDOC_HUD))
        c->oom = true;
}

/* The rows' copies are owned by the arena, each jobs array by its delivery. */
crcr_err hud_load_jobs(store *st, arena *a, ddoc_delivery *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        job_ctx c = {&v[i], a, false};
        crcr_err e = store_get_delivery(st, v[i].delivery_id, NULL, hud_collect_job, &c);
        if (e == CRCR_E_NOT_FOUND)
            continue; /* removed by retention meanwhile */
        if (e)
            return e;
        if (c.oom || a->oom)
            return CRCR_E_NOMEM;
    }
    return CRCR_OK;
}

void hud_free_deliveries(ddoc_delivery *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ddoc_free_jobs(&v[i]);
    free(v);
}
