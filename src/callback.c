/*
 * callback.c - POST /github/callback; the order of checks is documented in callback.h.
 *
 * The answers follow that order; the work does not quite: the rate-limit hit (step 4) of a
 * callback that passes steps 5-7 is counted by store_run_apply in the transition's own durable
 * transaction (on SQLite one group commit for concurrent callbacks), and only a callback refused
 * at 5-7 pays for a separate hit, before its refusal (a rate-limited callback still gets 429).
 * The body is parsed with jv_parse_select: fully validated, but only the values read here built
 * (the body echoes the whole ~30 KB webhook in payload).
 */
#include "callback.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"
#include "app.h"
#include "cbtoken.h"
#include "checks.h"
#include "clock.h"
#include "json.h"
#include "limits.h"
#include "log.h"
#include "oidc.h"
#include "store.h"

#define CALLBACK_RATE_WINDOW_MS 60000
#define CALLBACK_CONCLUSION_MAX 64u
#define CALLBACK_URL_MAX 2048u
#define CALLBACK_WORKFLOW_NAME_MAX 256u

/* A JSON integer, or a string of 1..18 digits: the callback action sends ids as strings. */
static bool int_like(const jv *v, int64_t *out)
{
    if (jv_int(v, out))
        return true;
    const char *s = jv_str(v);
    if (!s)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > 18)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        x = x * 10 + (s[i] - '0');
    }
    *out = x;
    return true;
}

/* Every path callback_parse reads (jv_parse_select builds only these; "workflow" whole). */
static const char *const CALLBACK_JSON_PATHS[] = {
    "event_type",
    "delivery_id",
    "callback_token",
    "workflow",
    "payload.pull_request.number",
    "payload.pull_request.head.sha",
    "payload.pull_request.labels",
    "payload.after",
    "payload.head_sha",
};

static void answer_status(http_response *resp, const char *status, bool duplicate)
{
    buf_t b;
    buf_init(&b, 256);
    buf_puts(&b, "{\"ok\":true,\"status\":");
    jv_quote(&b, status, strlen(status));
    if (duplicate)
        buf_puts(&b, ",\"duplicate\":true");
    buf_putc(&b, '}');
    http_resp_json(resp, 200, buf_cstr(&b));
    buf_free(&b);
}

bool callback_parse(const jv *body, cb_fields *f, char *detail, size_t dsz)
{
    memset(f, 0, sizeof(*f));
    f->passed = f->failed = f->skipped = -1;
    f->event_type = jv_path_str(body, "event_type");
    const jv *wf = jv_get(body, "workflow");
    f->delivery_id = jv_path_str(body, "delivery_id");
    if (!f->delivery_id || !*f->delivery_id) {
        snprintf(detail, dsz, "callback body missing required field: 'delivery_id'");
        return false;
    }
    if (strlen(f->delivery_id) >= CRCR_DELIVERY_ID_MAX) {
        snprintf(detail, dsz, "delivery_id too long");
        return false;
    }
    if (!jv_is_obj(wf)) {
        snprintf(detail, dsz, "callback body missing required field: 'workflow'");
        return false;
    }
    f->status = jv_path_str(wf, "status");
    if (!f->status) {
        snprintf(detail, dsz, "callback body missing required field: 'workflow.status'");
        return false;
    }
    const jv *run_id = jv_get(wf, "run_id");
    if (!run_id || jv_is_null(run_id)) {
        snprintf(detail, dsz, "callback body missing required field: 'workflow.run_id'");
        return false;
    }
    if (!int_like(run_id, &f->run_id) || f->run_id <= 0) {
        snprintf(detail, dsz, "workflow.run_id must be a positive integer");
        return false;
    }
    f->workflow_name = jv_path_str(wf, "name");
    if (!f->workflow_name) {
        snprintf(detail, dsz, "callback body missing required field: 'workflow.name'");
        return false;
    }
    if (strlen(f->workflow_name) > CALLBACK_WORKFLOW_NAME_MAX) {
        snprintf(detail, dsz, "workflow.name longer than %u bytes", CALLBACK_WORKFLOW_NAME_MAX);
        return false;
    }
    f->run_attempt = 1;
    const jv *attempt = jv_get(wf, "run_attempt");
    if (attempt && !jv_is_null(attempt) &&
        (!int_like(attempt, &f->run_attempt) || f->run_attempt <= 0)) {
        snprintf(detail, dsz, "workflow.run_attempt must be a positive integer");
        return false;
    }
    const jv *job = jv_get(wf, "job_name");
    if (job && !jv_is_null(job)) {
        f->job_name = jv_str(job);
        if (!f->job_name) {
            snprintf(detail, dsz, "workflow.job_name must be a string");
            return false;
        }
        if (strlen(f->job_name) > CRCR_JOB_NAME_MAX) {
            snprintf(detail, dsz, "workflow.job_name longer than %u bytes", CRCR_JOB_NAME_MAX);
            return false;
        }
    }
    if (strcmp(f->status, "in_progress") != 0 && strcmp(f->status, "completed") != 0) {
        /* At most 39 bytes of the status, cut on a UTF-8 character boundary. */
        char shown[40];
        size_t n = strlen(f->status);
        if (n >= sizeof(shown)) {
            n = sizeof(shown) - 1;
            while (n > 0 && ((unsigned char)f->status[n] & 0xC0) == 0x80)
                n--;
        }
        memcpy(shown, f->status, n);
        shown[n] = '\0';
        snprintf(detail, dsz, "unknown callback status: '%s'", shown);
        return false;
    }
    f->conclusion = jv_path_str(wf, "conclusion");
    if (f->conclusion && strlen(f->conclusion) > CALLBACK_CONCLUSION_MAX) {
        snprintf(detail, dsz, "workflow.conclusion too long");
        return false;
    }
    if (strcmp(f->status, "in_progress") == 0)
        f->conclusion = NULL;
    f->artifact_url = jv_path_str(wf, "artifact_url");
    if (f->artifact_url && strlen(f->artifact_url) > CALLBACK_URL_MAX)
        f->artifact_url = NULL;
    const jv *tr = jv_get(wf, "test_results");
    if (jv_is_obj(tr)) {
        int_like(jv_get(tr, "passed"), &f->passed);
        int_like(jv_get(tr, "failed"), &f->failed);
        int_like(jv_get(tr, "skipped"), &f->skipped);
    }
    const jv *payload = jv_get(body, "payload");
    int_like(jv_path(payload, "pull_request.number"), &f->pr_number);
    f->head_sha = jv_path_str(payload, "pull_request.head.sha");
    if (!f->head_sha)
        f->head_sha = jv_path_str(payload, "after");
    if (!f->head_sha)
        f->head_sha = jv_path_str(payload, "head_sha");
    if (f->head_sha && strlen(f->head_sha) >= CRCR_SHA_MAX)
        f->head_sha = NULL;
    f->labels = jv_path(payload, "pull_request.labels");
    f->token = jv_path_str(body, "callback_token");
    return true;
}

jv *callback_body_parse(const char *text, size_t len)
{
    return jv_parse_select(text, len, CALLBACK_JSON_PATHS,
                           sizeof(CALLBACK_JSON_PATHS) / sizeof(CALLBACK_JSON_PATHS[0]), NULL, 0);
}

/* Whether this run's result belongs on the upstream PR as a check run (§5.3). */
static bool wants_check_run(crcr_app *app, const allowlist *al, const char *repo,
                            const cb_fields *f, crcr_level level)
{
    if (level < CRCR_LEVEL_L3 || !f->head_sha || !*f->head_sha)
        return false;
    if (level == CRCR_LEVEL_L4)
        return true;
    const char *labels[CRCR_LABELS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < jv_arr_len(f->labels) && n < CRCR_LABELS_MAX; i++) {
        const char *name = jv_path_str(jv_arr_at(f->labels, i), "name");
        if (name)
            labels[n++] = name;
    }
    if (allowlist_needs_check_run(al, repo, labels, n))
        return true;
    /* Reopened PRs echo stale labels: the label event's mark decides (upstream fallback). */
    int64_t since = clock_now_ms() - app->cfg.status_ttl_s * 1000;
    return store_wanted_get(app->st, f->head_sha, repo, since) == CRCR_OK;
}

/* Everything the side-effect builder needs, and the memory of the bodies it builds. */
typedef struct effects_ctx {
    crcr_app *app;
    const char *repo;
    crcr_level level;
    const cb_fields *f;
    bool check_run;
    const char *raw_body;
    size_t raw_len;
    const store_run_key *key;
    callback_bodies bodies;
} effects_ctx;

static void metric_json(buf_t *b, int64_t ms)
{
    if (ms < 0)
        buf_puts(b, "null");
    else
        buf_printf(b, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

/* The upstream HUD wire format: {"trusted":{...},"untrusted":{"callback_payload":<body>}}. */
crcr_err callback_hud_body(buf_t *out, const char *repo, crcr_level level, int64_t queue_ms,
                           int64_t exec_ms, const char *callback_json, size_t callback_len)
{
    crcr_err err = buf_puts(out, "{\"trusted\":{\"ci_metrics\":{\"queue_time\":");
    metric_json(out, queue_ms);
    buf_puts(out, ",\"execution_time\":");
    metric_json(out, exec_ms);
    buf_puts(out, "},\"verified_repo\":");
    jv_quote(out, repo, strlen(repo));
    buf_puts(out, ",\"downstream_repo_level\":");
    const char *ln = crcr_level_name(level);
    jv_quote(out, ln, strlen(ln));
    buf_puts(out, "},\"untrusted\":{\"callback_payload\":");
    buf_append(out, callback_json, callback_len);
    if (!err)
        err = buf_puts(out, "}}");
    return err;
}

void callback_bodies_init(callback_bodies *b, size_t callback_len)
{
    buf_init(&b->check, 64 * 1024);
    buf_init(&b->check_key, 4 * CRCR_JOB_NAME_MAX + 256);
    buf_init(&b->hud, callback_len + 8192);
    buf_init(&b->hud_key, 4 * CRCR_JOB_NAME_MAX + 256);
}

void callback_bodies_free(callback_bodies *b)
{
    buf_free(&b->check);
    buf_free(&b->check_key);
    buf_free(&b->hud);
    buf_free(&b->hud_key);
}

crcr_err callback_effects(const crcr_app *app, const checks_run *check, const store_run_key *key,
                          crcr_level level, int64_t queue_ms, int64_t exec_ms,
                          const char *callback_json, size_t callback_len, callback_bodies *bodies,
                          store_new_job *jobs, size_t max, size_t *n)
{
    *n = 0;
    int64_t now = clock_now_ms();
    if (check && *n < max) {
        crcr_err err = checks_body(check, &bodies->check);
        if (!err)
            err = checks_seq_key(check, &bodies->check_key);
        if (err)
            return err;
        jobs[(*n)++] = (store_new_job){.kind = "check_run",
                                       .target = app->cfg.upstream_repo,
                                       .seq_key = bodies->check_key.data,
                                       .body = bodies->check.data,
                                       .body_len = bodies->check.len,
                                       .due_at = now};
    }
    if (app->cfg.hud_api_url && *n < max) {
        crcr_err err = callback_hud_body(&bodies->hud, key->repo, level, queue_ms, exec_ms,
                                         callback_json, callback_len);
        if (!err)
            err = buf_printf(&bodies->hud_key, "hud:%s:%s:%lld:%lld:%s:%s", key->repo,
                             key->delivery_id, (long long)key->run_id, (long long)key->run_attempt,
                             key->workflow_name ? key->workflow_name : "",
                             key->job_name ? key->job_name : "");
        if (err)
            return err;
        jobs[(*n)++] = (store_new_job){.kind = "hud_forward",
                                       .target = "hud",
                                       .seq_key = bodies->hud_key.data,
                                       .body = bodies->hud.data,
                                       .body_len = bodies->hud.len,
                                       .due_at = now};
    }
    return CRCR_OK;
}

static crcr_err build_effects(void *vctx, const store_run_result *res, store_new_job *jobs,
                              size_t max, size_t *n)
{
    effects_ctx *c = vctx;
    checks_run r = {
        .repo = c->repo,
        .workflow_name = c->f->workflow_name,
        .job_name = c->f->job_name,
        .head_sha = c->f->head_sha,
        .status = c->f->status,
        .conclusion = c->f->conclusion,
        .run_id = c->f->run_id,
        .pr_number = c->f->pr_number,
    };
    return callback_effects(c->app, c->check_run ? &r : NULL, c->key, c->level, res->queue_ms,
                            res->exec_ms, c->raw_body, c->raw_len, &c->bodies, jobs, max, n);
}

/* Refuses an authenticated callback and remembers it for the repo's level health. */
static void refuse(crcr_app *app, http_response *resp, const char *repo, int status,
                   const char *detail)
{
    atomic_fetch_add(&app->callbacks_rejected, 1);
    store_callback_rejected(app->st, repo, clock_now_ms(), status);
    http_resp_detail(resp, status, detail);
}

/* Answers 429 with Retry-After for a refused rate-limit hit (step 4). */
static void rate_limited(crcr_app *app, http_response *resp, const char *repo, int64_t retry_ms)
{
    char secs[24], detail[CRCR_REPO_NAME_MAX + 64];
    snprintf(secs, sizeof(secs), "%lld", (long long)((retry_ms + 999) / 1000));
    snprintf(detail, sizeof(detail), "rate limit exceeded for %s", repo);
    LOG_WARN("callback.rate_limited", "repo", repo, "retry_after", secs, NULL);
    refuse(app, resp, repo, 429, detail);
    http_resp_header(resp, "Retry-After", secs);
}

void callback_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    char detail[512];
    jv *body = req->body_len ? callback_body_parse(req->body, req->body_len) : jv_new_obj();
    if (!body || !jv_is_obj(body)) {
        jv_free(body);
        atomic_fetch_add(&app->callbacks_rejected, 1);
        http_resp_detail(resp, 400, "Invalid JSON body");
        return;
    }

    oidc_identity id;
    char reason[160] = "";
    int st = oidc_verify(app->oidc, http_req_header(req, "Authorization"), clock_now_ms() / 1000,
                         &id, reason, sizeof(reason));
    if (st != 0) {
        jv_free(body);
        atomic_fetch_add(&app->callbacks_rejected, 1);
        LOG_INFO("callback.unauthorized", "reason", reason, NULL);
        http_resp_detail(resp, st, reason[0] ? reason : "Invalid authorization token");
        return;
    }
    const char *repo = id.repository;

    allowlist *al = allowlist_source_get(app->allow);
    crcr_level level = allowlist_level(al, repo);
    if (level < CRCR_LEVEL_L2) {
        LOG_INFO("callback.ignored", "repo", repo, "level", crcr_level_name(level), NULL);
        allowlist_free(al);
        jv_free(body);
        http_resp_json(resp, 200, "{\"ok\":true,\"status\":\"ignored\"}");
        return;
    }

    /* Steps 5-7; a refusal is answered after the rate hit (step 4) that precedes it. */
    cb_fields f;
    int refusal = 0;
    bool nightly = false, token_mismatch = false;
    if (!callback_parse(body, &f, detail, sizeof(detail))) {
        refusal = 400;
    } else {
        nightly = f.event_type &&
                  (strcmp(f.event_type, "nightly") == 0 || strcmp(f.event_type, "periodic") == 0);
        if (nightly && strcmp(f.status, "completed") != 0) {
            snprintf(detail, sizeof(detail),
                     "nightly/periodic callbacks must have status 'completed', got '%s'", f.status);
            refusal = 400;
        } else if (!nightly && f.token) {
            if (!cbtoken_verify(app->cfg.app_secret, app->cfg.app_secret_previous, f.token,
                                f.delivery_id, repo, f.head_sha, f.pr_number)) {
                snprintf(detail, sizeof(detail), "%s",
                         "callback_token does not match this repository, delivery, pull request "
                         "and head sha");
                refusal = 403;
                token_mismatch = true;
            }
        } else if (!nightly && app->cfg.callback_token == CRCR_CB_TOKEN_REQUIRED) {
            snprintf(detail, sizeof(detail), "callback_token required");
            refusal = 403;
        }
    }
    /* A limit below 1 refuses every hit: store_run_apply takes 0 as "no hit", so such a limit
     * (like any refusal above) takes the separate hit. */
    bool hit_in_apply = refusal == 0 && app->cfg.rate_limit_per_min > 0;
    if (!hit_in_apply) {
        bool allowed = false;
        int64_t retry_ms = 0;
        if (store_rate_hit(app->st, repo, clock_now_ms(), CALLBACK_RATE_WINDOW_MS,
                           app->cfg.rate_limit_per_min, &allowed, &retry_ms) != CRCR_OK) {
            allowlist_free(al);
            jv_free(body);
            http_resp_detail(resp, 503, "store unavailable, please retry");
            return;
        }
        if (!allowed) {
            rate_limited(app, resp, repo, retry_ms);
        } else if (refusal) {
            if (token_mismatch)
                LOG_WARN("callback.token_mismatch", "delivery", f.delivery_id, "repo", repo, NULL);
            refuse(app, resp, repo, refusal, detail);
        }
        if (!allowed || refusal) {
            allowlist_free(al);
            jv_free(body);
            return;
        }
    }

    effects_ctx ec = {
        .app = app,
        .repo = repo,
        .level = level,
        .f = &f,
        .check_run = !nightly && wants_check_run(app, al, repo, &f, level),
        .raw_body = req->body,
        .raw_len = req->body_len,
    };
    callback_bodies_init(&ec.bodies, req->body_len);
    store_run_update u = {
        .key = {.delivery_id = f.delivery_id,
                .repo = repo,
                .run_id = f.run_id,
                .run_attempt = f.run_attempt,
                .workflow_name = f.workflow_name,
                .job_name = f.job_name ? f.job_name : ""},
        .status = f.status,
        .conclusion = f.conclusion,
        .event_type = f.event_type,
        .level = (int)level,
        .pr_number = f.pr_number,
        .head_sha = f.head_sha,
        .workflow_name = f.workflow_name,
        .artifact_url = f.artifact_url,
        .test_passed = f.passed,
        .test_failed = f.failed,
        .test_skipped = f.skipped,
        .payload = req->body,
        .payload_len = req->body_len,
        .now = clock_now_ms(),
        .single_shot = nightly,
        .rate_limit = hit_in_apply ? app->cfg.rate_limit_per_min : 0,
        .rate_window_ms = CALLBACK_RATE_WINDOW_MS,
    };
    char details[CRCR_REPO_NAME_MAX + 64];
    snprintf(details, sizeof(details), "https://github.com/%s/actions/runs/%lld", repo,
             (long long)f.run_id);
    u.details_url = details;
    ec.key = &u.key;
    store_run_result res;
    char why[128] = "";
    crcr_err e = store_run_apply(app->st, &u, build_effects, &ec, &res, why, sizeof(why));
    char run_s[24];
    snprintf(run_s, sizeof(run_s), "%lld", (long long)f.run_id);
    if (e == CRCR_OK && res.rate_limited) {
        rate_limited(app, resp, repo, res.retry_after_ms);
    } else if (e == CRCR_E_NOT_FOUND) {
        LOG_INFO("callback.no_dispatch", "delivery", f.delivery_id, "repo", repo, NULL);
        refuse(app, resp, repo, 400, "callback rejected: no matching dispatch record");
    } else if (e == CRCR_E_STATE) {
        snprintf(detail, sizeof(detail),
                 "callback rejected: invalid state transition delivery_id=%s repo=%s status=%s "
                 "(%s)",
                 f.delivery_id, repo, f.status, why);
        LOG_INFO("callback.invalid_transition", "delivery", f.delivery_id, "repo", repo, "run",
                 run_s, "status", f.status, "reason", why, NULL);
        refuse(app, resp, repo, 400, detail);
    } else if (e) {
        http_resp_detail(resp, 503, "store unavailable, please retry");
    } else {
        atomic_fetch_add(res.duplicate ? &app->callbacks_duplicate : &app->callbacks_accepted, 1);
        LOG_INFO(res.duplicate ? "callback.duplicate" : "callback.accepted", "delivery",
                 f.delivery_id, "repo", repo, "run", run_s, "job", f.job_name, "status", f.status,
                 "conclusion", f.conclusion, "check_run", ec.check_run ? "queued" : NULL, NULL);
        answer_status(resp, f.status, res.duplicate);
        if (!res.duplicate) /* as many workers as jobs were queued, none when none were */
            outbox_wake(app->ob, (size_t)ec.check_run + (app->cfg.hud_api_url ? 1u : 0u));
    }
    callback_bodies_free(&ec.bodies);
    allowlist_free(al);
    jv_free(body);
}
