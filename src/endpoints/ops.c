/*
 * ops.c - GET /metrics and the admin API (/api/v1/admin/deliveries...); see ops.h.
 *
 * /metrics writes the registry's own families (metrics.c: webhooks, outbox attempts, GitHub
 * requests, reconciler passes and redeliveries, HTTP latency) and then gauges read from the app at
 * scrape time: outbox rows by state and the age of the oldest due row (store), outbox retries and
 * rate-limit pauses (outbox counters), GitHub token and installation cache hits (gh_get_stats),
 * callbacks by result, the reconciler's last pass (its state in the store, shared by every
 * instance) and the allowlist's age and state. No label carries a repository or delivery id, so the
 * number of series does not grow with traffic.
 *
 * The admin token is compared as SHA-256 digests with CRYPTO_memcmp: equal-length inputs to a
 * constant-time compare, so neither the token's bytes nor its length leak through timing.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "app.h"
#include "clock.h"
#include "delivery_doc.h"
#include "http_loop.h"
#include "ids.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "reconcile.h"
#include "trust.h"
#include "vocab.h"

#define OPS_DELIVERIES_PATH "/api/v1/admin/deliveries"
#define OPS_TRUST_PATH "/api/v1/admin/trust"
#define OPS_REDELIVERIES_PATH "/api/v1/admin/redeliveries"
/* A scrape is a few hundred lines; this leaves room for many routes. */
#define OPS_METRICS_MAX (4u * 1024u * 1024u)
/* A redeliver request carries no body; a client that sends one anyway gets it ignored. */
#define OPS_ADMIN_MAX_BODY 1024u

/* ---- delivery documents ---- */

/* ---- /metrics ---- */

static crcr_err gauge(buf_t *b, const char *name, const char *type, const char *help, double value)
{
    crcr_err e = metrics_family(b, name, type, help);
    if (!e)
        e = metrics_sample(b, name, NULL, value);
    return e;
}

/* The four gauges of a document source (allowlist_source.h): <prefix>_loaded, _age_seconds,
 * _<count> and _refresh_failing. `article` and `noun` name the document in the help texts. */
static crcr_err source_gauges(buf_t *b, allowlist_source *src, int64_t now, const char *prefix,
                              const char *article, const char *noun, const char *count,
                              const char *count_help)
{
    allowlist_status as;
    memset(&as, 0, sizeof(as));
    if (src)
        allowlist_source_status(src, &as);
    double age = as.loaded && as.loaded_at > 0 && as.loaded_at < now
                     ? (double)(now - as.loaded_at) / 1000.0
                     : 0;
    char name[64], help[160];
    snprintf(name, sizeof(name), "%s_loaded", prefix);
    snprintf(help, sizeof(help), "1 when %s %s is in force.", article, noun);
    crcr_err e = gauge(b, name, "gauge", help, as.loaded ? 1 : 0);
    snprintf(name, sizeof(name), "%s_age_seconds", prefix);
    snprintf(help, sizeof(help), "Seconds since the %s in force was loaded or confirmed unchanged.",
             noun);
    if (!e)
        e = gauge(b, name, "gauge", help, age);
    snprintf(name, sizeof(name), "%s_%s", prefix, count);
    if (!e)
        e = gauge(b, name, "gauge", count_help, (double)as.repos);
    snprintf(name, sizeof(name), "%s_refresh_failing", prefix);
    snprintf(help, sizeof(help),
             "1 when the last %s load failed (the previous one stays in force).", noun);
    if (!e)
        e = gauge(b, name, "gauge", help, as.last_error[0] ? 1 : 0);
    return e;
}

static crcr_err app_metrics(crcr_app *app, buf_t *b)
{
    int64_t now = clock_now_ms();
    crcr_err e = metrics_family(b, "crcr_build_info", "gauge", "The running version (always 1).");
    if (!e) {
        const char *l[] = {"version", CRCR_VERSION, NULL};
        e = metrics_sample(b, "crcr_build_info", l, 1);
    }
    if (!e)
        e = gauge(b, "crcr_start_time_seconds", "gauge", "Unix time the relay started.",
                  (double)app->started_at / 1000.0);
    if (!e)
        e = gauge(b, "crcr_dry_run", "gauge", "1 when outbound calls are recorded, not sent.",
                  app->cfg.dry_run ? 1 : 0);
    if (!e)
        e = gauge(b, "crcr_sweeper_last_run_timestamp_seconds", "gauge",
                  "Unix time of the last sweeper pass (zombie runs, retention) this process ran "
                  "as the lease holder, once it ended (0 before the first).",
                  (double)atomic_load(&app->last_sweep_at) / 1000.0);
    int64_t last = atomic_load(&app->last_webhook_at);
    if (!e)
        e = gauge(b, "crcr_last_webhook_timestamp_seconds", "gauge",
                  "Unix time of the last webhook request (0 before the first).",
                  (double)last / 1000.0);
    if (!e && app->http)
        e = gauge(b, "crcr_http_inflight_requests", "gauge", "Requests being handled now.",
                  http_server_inflight(app->http));
    uint64_t hits = 0, misses = 0;
    if (!e && app->http && http_server_cache_counts(app->http, &hits, &misses)) {
        e = gauge(b, "crcr_hud_cache_hits_total", "counter",
                  "HUD answers served from the page cache (CRCR_HUD_CACHE_MS).", (double)hits);
        if (!e)
            e = gauge(b, "crcr_hud_cache_misses_total", "counter",
                      "HUD requests the page cache could not answer (rendered).", (double)misses);
    }

    /* Outbox, from the store. */
    store_outbox_stats os;
    memset(&os, 0, sizeof(os));
    bool store_ok = store_outbox_stats_get(app->st, &os) == CRCR_OK;
    if (!e)
        e = gauge(b, "crcr_store_up", "gauge", "1 when the store answered this scrape.",
                  store_ok ? 1 : 0);
    store_fault_kind fault = store_write_fault(app->st, NULL, 0, NULL);
    if (!e)
        e = gauge(b, "crcr_store_write_fault", "gauge",
                  "1 while writes fail for lack of space on the store's disk, 2 on an I/O error "
                  "(webhooks are answered 503; /readyz says why); 0 when writes go through.",
                  (double)fault);
    if (!e && store_ok) {
        e = metrics_family(b, "crcr_outbox_rows", "gauge",
                           "Outbox rows by state (queued is the depth; dead needs an operator).");
        const struct {
            crcr_ob_state state;
            int64_t n;
        } rows[] = {{OB_STATE_QUEUED, os.queued}, {OB_STATE_RUNNING, os.running},
                    {OB_STATE_SENT, os.sent},     {OB_STATE_DRY_RUN, os.dry_run},
                    {OB_STATE_DEAD, os.dead},     {OB_STATE_WITHDRAWN, os.withdrawn}};
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]) && !e; i++) {
            const char *l[] = {"state", ob_state_name(rows[i].state), NULL};
            e = metrics_sample(b, "crcr_outbox_rows", l, (double)rows[i].n);
        }
        double age = os.oldest_due > 0 && os.oldest_due < now ? (double)(now - os.oldest_due) : 0;
        if (!e)
            e = gauge(b, "crcr_outbox_oldest_due_age_seconds", "gauge",
                      "How long the oldest queued row has been due (0 when none is late).",
                      age / 1000.0);
    }

    /* Outbox workers' own counters. */
    outbox_counters oc;
    memset(&oc, 0, sizeof(oc));
    if (app->ob)
        outbox_get_counters(app->ob, &oc);
    if (!e)
        e = gauge(b, "crcr_outbox_retries_total", "counter",
                  "Outbox attempts that failed transiently and were rescheduled.",
                  (double)oc.retried);
    if (!e)
        e = gauge(b, "crcr_outbox_dead_total", "counter",
                  "Outbox rows given up (permanent error or attempts exhausted).", (double)oc.dead);
    if (!e)
        e = gauge(b, "crcr_outbox_rate_limit_pauses_total", "counter",
                  "Installation pauses after a GitHub rate-limit answer.",
                  (double)oc.rate_limit_pauses);

    /* GitHub client caches. */
    gh_stats gs;
    memset(&gs, 0, sizeof(gs));
    if (app->gh)
        gh_get_stats(app->gh, &gs);
    if (!e)
        e = gauge(b, "crcr_github_api_calls_total", "counter", "HTTP requests sent to GitHub.",
                  (double)gs.api_calls);
    if (!e)
        e = metrics_family(b, "crcr_github_cache_lookups_total", "counter",
                           "Installation token and installation id lookups by cache outcome.");
    const struct {
        const char *cache, *result;
        uint64_t n;
    } caches[] = {{"token", "hit", gs.token_hits},
                  {"token", "miss", gs.token_misses},
                  {"installation", "hit", gs.install_hits},
                  {"installation", "miss", gs.install_misses}};
    for (size_t i = 0; i < sizeof(caches) / sizeof(caches[0]) && !e; i++) {
        const char *l[] = {"cache", caches[i].cache, "result", caches[i].result, NULL};
        e = metrics_sample(b, "crcr_github_cache_lookups_total", l, (double)caches[i].n);
    }

    /* The GitHub budget (gh_budget.h): what this instance has out, waits for and may use. */
    http_loop_stats ls;
    memset(&ls, 0, sizeof(ls));
    if (app->gh)
        http_loop_get_stats(gh_loop(app->gh), &ls);
    gh_budget_stats bs;
    memset(&bs, 0, sizeof(bs));
    if (app->budget)
        gh_budget_get_stats(app->budget, &bs);
    size_t rows = 0, max_rows = 0;
    if (app->ob)
        outbox_get_load(app->ob, &rows, &max_rows);
    if (!e)
        e = gauge(b, "crcr_github_requests_in_flight", "gauge",
                  "Requests to the GitHub API this instance has out now.",
                  (double)ls.inflight_budgeted);
    if (!e)
        e = gauge(b, "crcr_github_requests_in_flight_peak", "gauge",
                  "Most requests to the GitHub API this instance had out at once.",
                  (double)ls.peak_budgeted);
    if (!e)
        e = gauge(b, "crcr_github_requests_waiting", "gauge",
                  "Requests to the GitHub API waiting for this instance's share of the budget.",
                  (double)ls.waiting);
    if (!e)
        e = gauge(b, "crcr_github_budget_share", "gauge",
                  "This instance's share of the App's GitHub budget (CRCR_GITHUB_CONCURRENCY).",
                  (double)bs.share);
    if (!e)
        e = gauge(b, "crcr_github_budget", "gauge",
                  "Requests to the GitHub API all instances may have out together "
                  "(CRCR_GITHUB_CONCURRENCY).",
                  (double)bs.total);
    if (!e)
        e = gauge(b, "crcr_outbox_rows_in_flight", "gauge",
                  "Outbox rows this instance is carrying out now (at most MAX_DISPATCH_WORKERS).",
                  (double)rows);

    /* The reconciler (§5.7): its last recorded pass, as every instance sharing the store sees
     * it. Nothing is recorded in dry-run or with CRCR_RECONCILE_SECONDS=0 (all 0). */
    reconcile_status rs;
    memset(&rs, 0, sizeof(rs));
    if (!e && store_ok)
        reconcile_status_get(app->st, &rs);
    if (!e)
        e = gauge(b, "crcr_reconcile_last_pass_timestamp_seconds", "gauge",
                  "Unix time of the last reconciler pass that read GitHub's delivery log (0: "
                  "none).",
                  (double)rs.last_ok_at / 1000.0);
    if (!e)
        e = gauge(b, "crcr_reconcile_missing", "gauge",
                  "Upstream events the last reconciler pass found GitHub failed to deliver and "
                  "the store does not have.",
                  (double)rs.missing);
    if (!e)
        e = gauge(b, "crcr_reconcile_failing", "gauge",
                  "1 when the last reconciler pass failed (its reason is in the log: "
                  "reconcile.failed).",
                  rs.last_error[0] ? 1 : 0);
    if (!e)
        e = gauge(b, "crcr_reconcile_backlog", "gauge",
                  "1 while older pages of the delivery log are still to be read by later passes.",
                  rs.partial ? 1 : 0);
    /* OIDC issuers: whose keys could not be had (callbacks answered 503). The label values are
     * the configured issuers' URLs, at most OIDC_ISSUERS_MAX series. */
    oidc_issuer_stat is;
    if (!e && app->oidc)
        e = metrics_family(b, "crcr_oidc_keys_unavailable_total", "counter",
                           "Callbacks answered 503 because the issuer's signing keys (JWKS) could "
                           "not be fetched, by issuer.");
    for (size_t i = 0; !e && app->oidc && oidc_issuer_stats(app->oidc, i, &is); i++) {
        const char *l[] = {"issuer", is.url, NULL};
        e = metrics_sample(b, "crcr_oidc_keys_unavailable_total", l, (double)is.unavailable);
    }
    if (!e && app->oidc)
        e = metrics_family(b, "crcr_oidc_jwks_failing", "gauge",
                           "1 when the last JWKS fetch of the issuer failed.");
    for (size_t i = 0; !e && app->oidc && oidc_issuer_stats(app->oidc, i, &is); i++) {
        const char *l[] = {"issuer", is.url, NULL};
        e = metrics_sample(b, "crcr_oidc_jwks_failing", l, is.failing ? 1 : 0);
    }

    /* Allowlist, and the CI providers map when there is one. */
    if (!e)
        e = source_gauges(b, app->allow, now, "crcr_allowlist", "an", "allowlist", "repos",
                          "Repositories in the allowlist in force.");
    if (!e && app->providers)
        e = source_gauges(b, app->providers, now, "crcr_ci_providers", "a", "CI providers map",
                          "pipelines", "Buildkite pipelines in the CI providers map in force.");
    return e;
}

static void metrics_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    buf_t b;
    buf_init(&b, OPS_METRICS_MAX);
    crcr_err e = metrics_render(&b);
    if (!e)
        e = app_metrics(app, &b);
    if (e) {
        buf_free(&b);
        http_resp_detail(resp, 500, "metrics unavailable");
        return;
    }
    resp->status = 200;
    buf_reset(&resp->body);
    if (buf_append(&resp->body, b.data, b.len) != CRCR_OK) {
        http_resp_detail(resp, 500, "metrics unavailable");
    } else {
        resp->content_type = METRICS_CONTENT_TYPE;
    }
    buf_free(&b);
}

/* ---- admin API ---- */

static bool sha256(const char *s, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    return EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) == 1 && len == 32;
}

/* Checks `Authorization: Bearer <CRCR_ADMIN_TOKEN>`; answers 401 and returns false otherwise. */
static bool admin_auth(crcr_app *app, const http_request *req, http_response *resp)
{
    static const char scheme[] = "Bearer ";
    const char *h = http_req_header(req, "Authorization");
    bool ok = false;
    /* Only the scheme name is compared here; the credential goes through the digests below. */
    bool is_scheme = h && strncasecmp(h, scheme, sizeof(scheme) - 1) == 0;
    if (is_scheme && app->cfg.admin_token) {
        const char *tok = h + sizeof(scheme) - 1;
        while (*tok == ' ')
            tok++;
        unsigned char given[32], want[32];
        ok = sha256(tok, strlen(tok), given) &&
             sha256(app->cfg.admin_token, strlen(app->cfg.admin_token), want) &&
             CRYPTO_memcmp(given, want, sizeof(want)) == 0;
        OPENSSL_cleanse(given, sizeof(given));
        OPENSSL_cleanse(want, sizeof(want));
    }
    if (!ok) {
        LOG_WARN("admin.unauthorized", "method", req->method, "path", req->path, NULL);
        http_resp_detail(resp, 401, "Unauthorized");
        http_resp_header(resp, "WWW-Authenticate", "Bearer realm=\"crcr-admin\"");
    }
    return ok;
}

/* Serialises `doc` as the answer with `status`; 500 when it does not fit. */
static void answer_json(http_response *resp, int status, const jv *doc)
{
    buf_reset(&resp->body);
    if (jv_dump(doc, &resp->body) != CRCR_OK) {
        http_resp_detail(resp, 500, "answer too large");
        return;
    }
    resp->status = status;
    resp->content_type = "application/json";
}

static void store_error(http_response *resp, crcr_err e)
{
    if (e == CRCR_E_NOT_FOUND)
        http_resp_detail(resp, 404, "delivery not found");
    else
        http_resp_detail(resp, 503, "store unavailable");
}

static void admin_list(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    store_filter f = {0};
    const char *status = http_req_query(req, "status");
    const char *repo = http_req_query(req, "repo");
    const char *limit = http_req_query(req, "limit");
    const char *pr = http_req_query(req, "pr");
    if (status && *status) {
        if (ob_state_parse(status) == OB_STATE_UNKNOWN) {
            http_resp_detail(resp, 400, "status: expected queued, running, sent, dry_run or dead");
            return;
        }
        f.state = status;
    }
    if (repo && *repo) {
        if (strlen(repo) >= CRCR_REPO_NAME_MAX || !strchr(repo, '/')) {
            http_resp_detail(resp, 400, "repo: expected owner/name");
            return;
        }
        f.repo = repo;
    }
    if (limit && *limit) {
        char *end = NULL;
        long v = strtol(limit, &end, 10);
        if (*end || v <= 0 || v > DDOC_LIST_MAX) {
            http_resp_detail(resp, 400, "limit: expected 1 to 10000");
            return;
        }
        f.limit = (int)v;
    }
    if (pr && *pr) {
        char *end = NULL;
        long long v = strtoll(pr, &end, 10);
        if (*end || v <= 0) {
            http_resp_detail(resp, 400, "pr: expected a positive pull request number");
            return;
        }
        f.pr_number = v;
    }
    jv *arr = NULL;
    crcr_err e = ddoc_admin_list_jv(app->st, &f, &arr);
    if (e) {
        store_error(resp, e);
        return;
    }
    jv *doc = jv_new_obj();
    if (!doc || jv_set(doc, "deliveries", arr) != CRCR_OK) {
        jv_free(doc);
        http_resp_detail(resp, 500, "out of memory");
        return;
    }
    answer_json(resp, 200, doc);
    jv_free(doc);
}

/* The id part of /api/v1/admin/deliveries/<id>[/<action>] copied into `id`; *action points at
 * what follows the id ("" when nothing). False when the path has no valid id. */
static bool split_path(const char *path, char id[CRCR_DELIVERY_ID_MAX], const char **action)
{
    const char *p = path + strlen(OPS_DELIVERIES_PATH "/");
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= CRCR_DELIVERY_ID_MAX)
        return false;
    memcpy(id, p, n);
    id[n] = '\0';
    *action = p[n] == '/' ? p + n + 1 : "";
    return ids_delivery_valid(id);
}

static void admin_show(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    char id[CRCR_DELIVERY_ID_MAX];
    const char *action = NULL;
    if (!split_path(req->path, id, &action) || *action) {
        bool is_post_only = action && strcmp(action, "redeliver") == 0;
        http_resp_detail(resp, is_post_only ? 405 : 404,
                         is_post_only ? "Method not allowed" : "Not found");
        return;
    }
    jv *doc = NULL;
    crcr_err e = ddoc_admin_jv(app->st, &app->cfg, id, &doc);
    if (e) {
        store_error(resp, e);
        return;
    }
    answer_json(resp, 200, doc);
    jv_free(doc);
}

/* True when `repo` is on the allowlist in force. */
static bool repo_listed(crcr_app *app, const char *repo)
{
    allowlist *al = allowlist_source_get(app->allow);
    bool listed = allowlist_level(al, repo) != CRCR_LEVEL_NONE;
    allowlist_free(al);
    return listed;
}

static void admin_redeliver(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    char id[CRCR_DELIVERY_ID_MAX];
    const char *action = NULL;
    if (!split_path(req->path, id, &action) || strcmp(action, "redeliver") != 0) {
        bool is_get_only = action && !*action;
        http_resp_detail(resp, is_get_only ? 405 : 404,
                         is_get_only ? "Method not allowed" : "Not found");
        return;
    }
    const char *repo = http_req_query(req, "repo");
    if (repo && !*repo)
        repo = NULL;
    if (repo && (strlen(repo) >= CRCR_REPO_NAME_MAX || !strchr(repo, '/'))) {
        http_resp_detail(resp, 400, "repo: expected owner/name");
        return;
    }
    const char *force = http_req_query(req, "force");
    if (repo && !(force && strcmp(force, "1") == 0) && !repo_listed(app, repo)) {
        http_resp_detail(resp, 422,
                         "repo is not on the allowlist in force (force=1 redelivers anyway)");
        return;
    }
    int n = 0;
    crcr_err e = store_redeliver(app->st, id, repo, clock_now_ms(), &n);
    if (e) {
        store_error(resp, e);
        return;
    }
    char count[16];
    snprintf(count, sizeof(count), "%d", n);
    LOG_INFO("admin.redeliver", "delivery", id, "repo", repo, "requeued", count, NULL);
    if (n > 0 && app->ob)
        outbox_notify(app->ob);
    buf_t b;
    buf_init(&b, 512);
    buf_puts(&b, "{\"ok\":true,\"delivery_id\":");
    jv_quote(&b, id, strlen(id));
    buf_puts(&b, ",\"repo\":");
    if (repo)
        jv_quote(&b, repo, strlen(repo));
    else
        buf_puts(&b, "null");
    buf_printf(&b, ",\"requeued\":%d}", n);
    http_resp_json(resp, 200, buf_cstr(&b));
    buf_free(&b);
}

/* GET /api/v1/admin/redeliveries[?limit=N][&pending=1]: what the reconciler asked GitHub to
 * redeliver (delivery_doc.h, ddoc_redeliveries_jv). */
static void admin_redeliveries(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    const char *limit = http_req_query(req, "limit");
    const char *pending = http_req_query(req, "pending");
    long n = 50;
    if (limit && *limit) {
        char *end = NULL;
        n = strtol(limit, &end, 10);
        if (*end || n <= 0 || n > DDOC_LIST_MAX) {
            http_resp_detail(resp, 400, "limit: expected 1 to 10000");
            return;
        }
    }
    bool pending_only = false;
    if (pending && *pending) {
        if (strcmp(pending, "1") != 0 && strcmp(pending, "0") != 0) {
            http_resp_detail(resp, 400, "pending: expected 1 (only those not arrived) or 0");
            return;
        }
        pending_only = strcmp(pending, "1") == 0;
    }
    jv *arr = NULL;
    crcr_err e = ddoc_redeliveries_jv(app->st, (int)n, pending_only, &arr);
    if (e) {
        http_resp_detail(resp, 503, "store unavailable");
        return;
    }
    jv *doc = jv_new_obj();
    if (!doc || jv_set(doc, "redeliveries", arr) != CRCR_OK) {
        jv_free(doc);
        http_resp_detail(resp, 500, "out of memory");
        return;
    }
    answer_json(resp, 200, doc);
    jv_free(doc);
}

static void admin_trust_list(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    buf_reset(&resp->body);
    crcr_err e = trust_doc(app->st, &resp->body);
    if (e) {
        http_resp_detail(resp, e == CRCR_E_TOO_LARGE ? 500 : 503, "store unavailable");
        return;
    }
    resp->status = 200;
    resp->content_type = "application/json";
}

/* POST /api/v1/admin/trust/OWNER/REPO/reset */
static void admin_trust_reset(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    if (!admin_auth(app, req, resp))
        return;
    static const char suffix[] = "/reset";
    const char *name = req->path + sizeof(OPS_TRUST_PATH); /* past ".../trust/" */
    size_t n = strlen(name), sl = sizeof(suffix) - 1;
    if (n <= sl || strcmp(name + n - sl, suffix) != 0 || n - sl >= CRCR_REPO_NAME_MAX) {
        http_resp_detail(resp, 404, "Not found");
        return;
    }
    char repo[CRCR_REPO_NAME_MAX];
    memcpy(repo, name, n - sl);
    repo[n - sl] = '\0';
    const char *slash = strchr(repo, '/');
    if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/')) {
        http_resp_detail(resp, 400, "expected /api/v1/admin/trust/OWNER/REPO/reset");
        return;
    }
    crcr_err e = store_identity_reset(app->st, repo);
    if (e == CRCR_E_NOT_FOUND) {
        http_resp_detail(resp, 404, "no pin for this repository");
        return;
    }
    if (e) {
        http_resp_detail(resp, 503, "store unavailable");
        return;
    }
    LOG_WARN("admin.trust_reset", "repo", repo, NULL);
    buf_t b;
    buf_init(&b, 512);
    buf_puts(&b, "{\"ok\":true,\"reset\":");
    jv_quote(&b, repo, strlen(repo));
    buf_putc(&b, '}');
    http_resp_json(resp, 200, buf_cstr(&b));
    buf_free(&b);
}

size_t ops_routes(struct crcr_app *app, http_route *out, size_t max)
{
    const http_route all[] = {
        {.method = "GET",
         .path = "/metrics",
         .prefix = false,
         .max_body = 0,
         .fn = metrics_handle,
         .ctx = app},
        {.method = "GET",
         .path = OPS_DELIVERIES_PATH,
         .prefix = false,
         .max_body = 0,
         .fn = admin_list,
         .ctx = app},
        {.method = "GET",
         .path = OPS_DELIVERIES_PATH "/",
         .prefix = true,
         .max_body = 0,
         .fn = admin_show,
         .ctx = app},
        {.method = "POST",
         .path = OPS_DELIVERIES_PATH "/",
         .prefix = true,
         .max_body = OPS_ADMIN_MAX_BODY,
         .fn = admin_redeliver,
         .ctx = app},
        {.method = "GET",
         .path = OPS_TRUST_PATH,
         .prefix = false,
         .max_body = 0,
         .fn = admin_trust_list,
         .ctx = app},
        {.method = "POST",
         .path = OPS_TRUST_PATH "/",
         .prefix = true,
         .max_body = OPS_ADMIN_MAX_BODY,
         .fn = admin_trust_reset,
         .ctx = app},
        {.method = "GET",
         .path = OPS_REDELIVERIES_PATH,
         .prefix = false,
         .max_body = 0,
         .fn = admin_redeliveries,
         .ctx = app},
    };
    bool admin = app->cfg.admin_token && *app->cfg.admin_token;
    size_t want = admin ? sizeof(all) / sizeof(all[0]) : 1;
    size_t n = 0;
    for (; n < want && n < max; n++)
        out[n] = all[n];
    return n;
}
