/*
 * callback.c - POST /github/callback; the order of checks is documented in callback.h.
 *
 * The answers follow that order; the work does not quite: the rate-limit hit (step 4) of a
 * callback that passes steps 5-7 is counted by store_run_apply in the transition's own durable
 * transaction (on SQLite one group commit for concurrent callbacks), and only a callback refused
 * at 5-7 pays for a separate hit, before its refusal (a rate-limited callback still gets 429).
 * Before the token the body is only validated (jv_validate: nothing built, no key set); after
 * it, it is parsed with jv_parse_select: validated again with duplicate keys refused, and only
 * the values read here built (the body echoes the whole ~30 KB webhook in payload).
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
#include "depends_on.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "html.h"
#include "log.h"
#include "metrics.h"
#include "oidc.h"
#include "outbox.h"
#include "run_effects.h"
#include "store.h"
#include "vocab.h"

#define CALLBACK_RATE_WINDOW_MS 60000
/* Bytes of a refused value (status, conclusion) quoted in a 400's detail, with the NUL. */
#define CALLBACK_SHOWN_MAX 40u
#define CALLBACK_URL_MAX 2048u
#define CALLBACK_WORKFLOW_NAME_MAX 256u
/* Largest nightly/periodic report (issue 12): its fields are a few hundred bytes. */
#define CALLBACK_NIGHTLY_MAX_BODY (64u * 1024u)

/* A JSON integer, or a string of 1..18 digits: the callback action sends ids as strings. */
static bool int_like(const jv *v, int64_t *out)
{
    if (jv_int(v, out))
        return true;
    const char *s = jv_str(v);
    return s && ids_decimal(s, strlen(s), IDS_DECIMAL_DIGITS_MAX, out);
}

/* At most CALLBACK_SHOWN_MAX - 1 bytes of `s` for a message, cut on a UTF-8 character boundary,
 * in out[CALLBACK_SHOWN_MAX]; returns out. */
static const char *shown_cut(const char *s, char out[CALLBACK_SHOWN_MAX])
{
    size_t n = strlen(s);
    if (n >= CALLBACK_SHOWN_MAX) {
        n = CALLBACK_SHOWN_MAX - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* A link field of the workflow object (url, artifact_url): kept when it is an https:// URL of at
 * most CALLBACK_URL_MAX bytes without blanks, control characters or backslashes (html_url_ok),
 * the only links the HUD shows, the API serves and the external HUD is sent. Any other value
 * (javascript:, http:, a number) is dropped: NULL, and *dropped set (the body is then stored and
 * forwarded without it, callback_clean_body). */
static const char *link_field(const jv *wf, const char *key, bool *dropped)
{
    const jv *v = jv_get(wf, key);
    if (!v || jv_is_null(v))
        return NULL;
    const char *s = jv_str(v);
    if (s && strlen(s) <= CALLBACK_URL_MAX && html_url_ok(s))
        return s;
    *dropped = true;
    return NULL;
}

/* The run id as the relay keeps it, written to out[CRCR_RUN_ID_MAX]: a number (a JSON integer or
 * a string of digits) as its decimal, for any issuer, so that 42 and "42" name one run; else, for
 * a Buildkite token only, the string as sent when ids_run_id_valid (upstream's Buildkite wrapper
 * sends the build's UUID). A GitHub Actions run id must be a positive integer: re-runs name it in
 * GitHub's API (/actions/runs/{run_id}/rerun). */
static bool run_id_text(const jv *v, crcr_issuer_kind kind, char out[CRCR_RUN_ID_MAX])
{
    int64_t n = 0;
    if (int_like(v, &n)) {
        if (n <= 0)
            return false;
        snprintf(out, CRCR_RUN_ID_MAX, "%lld", (long long)n);
        return true;
    }
    const char *s = jv_str(v);
    if (kind == CRCR_ISSUER_GITHUB || !ids_run_id_valid(s))
        return false;
    snprintf(out, CRCR_RUN_ID_MAX, "%s", s);
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
    "payload.after",
    "payload.head_sha",
};

/* {"ok":true,"status":S[,"duplicate":true][,"ended":R]}: `ended` (a run of a dispatch a newer one
 * ended, §3.12) tells the downstream that the relay recorded it and nothing follows from it. */
static void answer_status(http_response *resp, const char *status, bool duplicate,
                          const char *ended)
{
    buf_t b;
    buf_init(&b, 256);
    buf_puts(&b, "{\"ok\":true,\"status\":");
    jv_quote(&b, status, strlen(status));
    if (duplicate)
        buf_puts(&b, ",\"duplicate\":true");
    if (ended && *ended) {
        buf_puts(&b, ",\"ended\":");
        jv_quote(&b, ended, strlen(ended));
    }
    buf_putc(&b, '}');
    http_resp_json(resp, 200, buf_cstr(&b));
    buf_free(&b);
}

bool callback_parse(const jv *body, crcr_issuer_kind kind, cb_fields *f, char *detail, size_t dsz)
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
    if (!run_id_text(run_id, kind, f->run_id)) {
        snprintf(detail, dsz, "%s",
                 kind == CRCR_ISSUER_GITHUB
                     ? "workflow.run_id must be a positive integer"
                     : "workflow.run_id must be the build's id: 1 to 64 characters of A-Z a-z "
                       "0-9 . _ -");
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
    crcr_run_status status = run_status_parse(f->status);
    char shown[CALLBACK_SHOWN_MAX];
    if (status != RUN_STATUS_IN_PROGRESS && status != RUN_STATUS_COMPLETED) {
        snprintf(detail, dsz, "unknown callback status: '%s'", shown_cut(f->status, shown));
        return false;
    }
    /* GitHub's check-run conclusions only (a check run with another is refused by GitHub, and a
     * typo stored would be final: the run is completed). Any ASCII case: the relay keeps and
     * sends the lower-case word. An in_progress report's conclusion is ignored (upstream sends
     * null). */
    const char *concl = jv_path_str(wf, "conclusion");
    if (status == RUN_STATUS_COMPLETED) {
        crcr_conclusion c = conclusion_parse_reported(concl);
        if (c == CONCLUSION_UNKNOWN) {
            if (concl)
                snprintf(detail, dsz,
                         "workflow.conclusion must be one of %s when status is completed, got "
                         "'%s'",
                         conclusion_names_list(), shown_cut(concl, shown));
            else
                snprintf(detail, dsz,
                         "workflow.conclusion must be one of %s when status is completed",
                         conclusion_names_list());
            return false;
        }
        f->conclusion = conclusion_name(c);
        f->clean_body = strcmp(concl, f->conclusion) != 0;
    }
    f->artifact_url = link_field(wf, "artifact_url", &f->clean_body);
    f->details_url = link_field(wf, "url", &f->clean_body);
    const jv *tr = jv_get(wf, "test_results");
    if (jv_is_obj(tr)) {
        int_like(jv_get(tr, "passed"), &f->passed);
        int_like(jv_get(tr, "failed"), &f->failed);
        int_like(jv_get(tr, "skipped"), &f->skipped); /* vocab-ok: a test count, not a conclusion */
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
    f->token = jv_path_str(body, "callback_token");
    return true;
}

crcr_err callback_clean_body(const char *text, size_t len, const cb_fields *f, buf_t *out)
{
    jv *doc = jv_parse(text, len, NULL, 0);
    jv *wf = jv_get(doc, "workflow");
    if (!jv_is_obj(wf)) {
        jv_free(doc);
        return CRCR_E_INVALID;
    }
    crcr_err e = CRCR_OK;
    if (f->conclusion)
        e = jv_set(wf, "conclusion", jv_new_str(f->conclusion));
    const struct {
        const char *key, *kept;
    } links[] = {{"url", f->details_url}, {"artifact_url", f->artifact_url}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]) && !e; i++) {
        const jv *v = jv_get(wf, links[i].key);
        if (v && !jv_is_null(v) && !links[i].kept)
            e = jv_del(wf, links[i].key);
    }
    if (!e)
        e = jv_dump(doc, out);
    jv_free(doc);
    return e;
}

jv *callback_body_parse(const char *text, size_t len)
{
    return jv_parse_select(text, len, CALLBACK_JSON_PATHS,
                           sizeof(CALLBACK_JSON_PATHS) / sizeof(CALLBACK_JSON_PATHS[0]), NULL, 0);
}

/* Everything the side-effect builder needs, and the memory of the bodies it builds. */
typedef struct effects_ctx {
    crcr_app *app;
    const allowlist *al; /* the on-calls of the repo */
    const char *repo;
    const char *details_url; /* of the run: its check run links there */
    crcr_level level;
    const cb_fields *f;
    bool check_run;
    const char *raw_body;
    size_t raw_len;
    const store_run_key *key;
    run_effect_bodies bodies;
    size_t n_jobs;    /* how many the transition queued */
    const char *pair; /* the Depends-On pair tested, "o/r#N @ sha7", or NULL */
    const char *pair_ref;
    const char *note; /* why a named pair was not tested, or NULL */
} effects_ctx;

static crcr_err build_effects(void *vctx, const store_run_result *res, store_new_job *jobs,
                              size_t max, size_t *n)
{
    effects_ctx *c = vctx;
    if (res->ended[0]) { /* a run a newer dispatch ended: recorded, nothing follows (§3.12) */
        *n = c->n_jobs = 0;
        return CRCR_OK;
    }
    checks_run r = {
        .repo = c->repo,
        .workflow_name = c->f->workflow_name,
        .job_name = c->f->job_name,
        .head_sha = c->f->head_sha,
        .status = c->f->status,
        .conclusion = c->f->conclusion,
        .run_id = c->f->run_id,
        .pr_number = c->f->pr_number,
        .details_url = c->details_url,
        .web_url = config_web_url(&c->app->cfg),
        .pair = c->pair,
        .pair_ref = c->pair_ref,
        .note = c->note,
    };
    run_effects_env env = {c->app->st, &c->app->cfg, c->al};
    crcr_err err =
        run_effects_build(&env, c->check_run ? &r : NULL, c->key, c->level, res->queue_ms,
                          res->exec_ms, c->raw_body, c->raw_len, &c->bodies, jobs, max, n);
    c->n_jobs = err ? 0 : *n;
    return err;
}

/* Refuses an authenticated callback and remembers it for the repo's level health. */
static void refuse(crcr_app *app, http_response *resp, const char *repo, int status,
                   const char *detail)
{
    metrics_callback_result("rejected");
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

bool callback_guard(void *ctx, const http_request *req, http_response *resp)
{
    if (oidc_token_present(http_req_header(req, "Authorization")))
        return false;
    metrics_callback_result("rejected");
    LOG_INFO("callback.unauthorized", "reason", "Missing authorization token", NULL);
    http_resp_detail(resp, 401, "Missing authorization token");
    return true;
}

/* A callback being answered: what the checks found, for the refusal and the transition. */
typedef struct cb_request {
    crcr_app *app;
    const http_request *req;
    const char *repo;      /* OIDC-verified */
    crcr_issuer_kind kind; /* of the token's issuer */
    crcr_level level;
    cb_fields f;
    bool nightly;
    store_dispatch dispatch; /* PR/push: the relay's record of what it sent to `repo` (its
                                payload only at L3; freed by callback_handle) */
    depends_on_pair pair;    /* the record's Depends-On pair (§3.13), when it had one */
    bool paired;
    const char *body; /* the body as stored and forwarded: the request's, or `clean` */
    size_t body_len;
    buf_t clean; /* callback_clean_body's, when the fields asked for it */
    int refusal; /* 0, or the status of the refusal in `detail` */
    char detail[512];
    const char *log_event;  /* log line of the refusal, NULL for none */
    int64_t retry_after_ms; /* refusal 429 (byte budget): when to come back */
} cb_request;

/* Nightly/periodic self-reports: no dispatch record to check them against, so they are held to a
 * named shape and size (issue 12): a commit sha as delivery id, CALLBACK_NIGHTLY_MAX_BODY bytes. */
static void check_nightly(cb_request *c)
{
    if (run_status_parse(c->f.status) != RUN_STATUS_COMPLETED) {
        snprintf(c->detail, sizeof(c->detail),
                 "nightly/periodic callbacks must have status 'completed', got '%s'", c->f.status);
        c->refusal = 400;
    } else if (!ids_sha_valid(c->f.delivery_id) || strlen(c->f.delivery_id) != 40) {
        snprintf(c->detail, sizeof(c->detail),
                 "nightly/periodic callbacks must name the tested commit: delivery_id must be a "
                 "40-character hex sha");
        c->refusal = 400;
    } else if (c->req->body_len > CALLBACK_NIGHTLY_MAX_BODY) {
        snprintf(c->detail, sizeof(c->detail),
                 "nightly/periodic callback body larger than %u bytes", CALLBACK_NIGHTLY_MAX_BODY);
        c->refusal = 413;
    }
}

/* PR/push callbacks (step 7): the delivery must have been dispatched to the calling repository
 * (400 otherwise, as upstream), and what the body says of the upstream commit must be what the
 * relay dispatched (403 otherwise, with or without a callback token): check runs and HUD rows
 * take the head sha and the PR number from the relay's record, never from the body. */
static void check_dispatched(cb_request *c)
{
    /* The one read of the record per callback: with the dispatched webhook at L3, whose check run
     * depends on its labels (run_effects_check_wanted); the transition trusts its time
     * (store_run_update.dispatched_at). */
    bool labels = c->level == CRCR_LEVEL_L3;
    buf_init(&c->dispatch.payload, labels ? c->app->cfg.max_body : 0);
    crcr_err e = store_dispatch_get(c->app->st, c->f.delivery_id, c->repo, labels, &c->dispatch);
    if (e == CRCR_E_TOO_LARGE) /* found, with a webhook past today's cap: read as unlabelled */
        e = CRCR_OK;
    if (e == CRCR_E_NOT_FOUND) {
        snprintf(c->detail, sizeof(c->detail), "callback rejected: no matching dispatch record");
        c->refusal = 400;
        c->log_event = "callback.no_dispatch";
        return;
    }
    if (e) {
        c->refusal = 503;
        snprintf(c->detail, sizeof(c->detail), "store unavailable, please retry");
        return;
    }
    const store_dispatch *d = &c->dispatch;
    c->paired = depends_on_record_parse(d->pair, strlen(d->pair), &c->pair);
    bool bound = c->paired && c->pair.resolved; /* what the token was minted with */
    if (c->f.token) {
        /* The token binds the echoed PR and sha (an absent one too) to this delivery and repo,
         * and the pair the relay sent with it (its record); the relay minted it over its own
         * record, so a token that verifies against the body's values means the body says what
         * was dispatched. */
        if (!cbtoken_verify_pair(c->app->cfg.app_secret, c->app->cfg.app_secret_previous,
                                 c->f.token, c->f.delivery_id, c->repo, c->f.head_sha,
                                 c->f.pr_number, bound ? c->pair.number : 0,
                                 bound ? c->pair.head_sha : NULL)) {
            snprintf(c->detail, sizeof(c->detail), "%s",
                     "callback_token does not match this repository, delivery, pull request and "
                     "head sha");
            c->refusal = 403;
            c->log_event = "callback.token_mismatch";
            return;
        }
    } else if (c->app->cfg.callback_token == CRCR_CB_TOKEN_REQUIRED) {
        snprintf(c->detail, sizeof(c->detail), "callback_token required");
        c->refusal = 403;
        c->log_event = "callback.token_missing";
        return;
    } else {
        /* Accepted (optional mode): logged, so that the repositories CRCR_CALLBACK_TOKEN=required
         * would refuse can be found before it is switched on (docs/go-live.md). */
        LOG_INFO("callback.token_absent", "delivery", c->f.delivery_id, "repo", c->repo, NULL);
    }
    /* Without a token (upstream's reporter): whatever the body says of the upstream commit must be
     * what the relay dispatched; what it leaves out comes from the record anyway. Shas compare
     * exactly: GitHub writes them in lower case, another spelling is not what was sent. */
    bool sha_differs = c->f.head_sha && strcmp(c->f.head_sha, d->head_sha) != 0;
    bool pr_differs = c->f.pr_number != 0 && c->f.pr_number != d->pr_number;
    if (sha_differs || pr_differs) {
        snprintf(c->detail, sizeof(c->detail),
                 "callback does not match the dispatched delivery: %s",
                 sha_differs ? "head sha differs" : "pull request number differs");
        c->refusal = 403;
        c->log_event = "callback.forged_target";
    }
}

/* Logs a pin that does not hold (the ids pinned at the first callback). */
static void pin_mismatch_log(void *ctx, const store_identity_row *row)
{
    const oidc_identity *id = ctx;
    LOG_WARN("callback.identity_changed", "repo", row->repo, "pinned_repository_id",
             row->repository_id, "pinned_owner_id", row->owner_id, "token_repository_id",
             id->repository_id, "token_owner_id", id->repository_owner_id, NULL);
}

/* Step 3b (issue 12): the first callback of a repository pins its immutable GitHub ids; a later
 * token with the same name and other ids (a deleted and re-created repository, a released and
 * re-claimed organisation name) is refused until an operator resets the pin. Only GitHub tokens
 * take part: a Buildkite token carries no GitHub ids (it would read as another identity), and its
 * identity is the immutable organization/pipeline UUID pair the CI providers map names. */
static void check_identity(cb_request *c, const oidc_identity *id)
{
    if (id->kind != CRCR_ISSUER_GITHUB)
        return;
    store_pin_outcome pin = STORE_PIN_NONE;
    crcr_err e = store_identity_pin(c->app->st, c->repo, id->repository_id, id->repository_owner_id,
                                    clock_now_ms(), &pin, pin_mismatch_log, (void *)id);
    if (e) {
        c->refusal = 503;
        snprintf(c->detail, sizeof(c->detail), "store unavailable, please retry");
    } else if (pin == STORE_PIN_MISMATCH) {
        snprintf(c->detail, sizeof(c->detail),
                 "repository identity changed: %s is pinned to other GitHub ids (a re-created "
                 "repository or a new owner); an operator must run crcr trust reset",
                 c->repo);
        c->refusal = 403;
    }
}

/* The nightly byte budget (issue 12): what a repository's self-reports store per UTC day. The
 * stored bytes are the report (a HUD forward holds it once more). */
static void take_nightly_budget(cb_request *c)
{
    crcr_app *app = c->app;
    if (app->cfg.nightly_daily_bytes <= 0)
        return;
    int64_t now = clock_now_ms();
    int64_t day_ms = 86400000;
    int64_t day = now / day_ms, next_midnight = (day + 1) * day_ms;
    char name[CRCR_REPO_NAME_MAX + 48];
    snprintf(name, sizeof(name), "nightly:%s:%lld", c->repo, (long long)day);
    for (char *p = name; *p; p++)
        *p = (char)((*p >= 'A' && *p <= 'Z') ? *p + ('a' - 'A') : *p);
    int64_t bytes = (int64_t)c->req->body_len * (app->cfg.hud_api_url ? 2 : 1);
    bool allowed = false;
    if (store_budget_take(app->st, name, bytes, app->cfg.nightly_daily_bytes,
                          next_midnight + day_ms, &allowed) != CRCR_OK) {
        c->refusal = 503;
        snprintf(c->detail, sizeof(c->detail), "store unavailable, please retry");
    } else if (!allowed) {
        snprintf(c->detail, sizeof(c->detail),
                 "nightly/periodic byte budget of %lld bytes per day exceeded for %s",
                 (long long)app->cfg.nightly_daily_bytes, c->repo);
        c->refusal = 429;
        c->retry_after_ms = next_midnight - now;
        c->log_event = "callback.nightly_budget";
    }
}

/* Answers the refusal in c (c->refusal != 0). */
static void send_refusal(cb_request *c, http_response *resp)
{
    if (c->refusal == 503) {
        http_resp_detail(resp, 503, c->detail);
        return;
    }
    if (c->log_event)
        LOG_WARN(c->log_event, "delivery", c->f.delivery_id, "repo", c->repo, "detail", c->detail,
                 NULL);
    refuse(c->app, resp, c->repo, c->refusal, c->detail);
    if (c->refusal == 429) {
        char secs[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)((c->retry_after_ms + 999) / 1000));
        http_resp_header(resp, "Retry-After", secs);
    }
}

/* Takes the rate hit (step 4) separately and answers what it or an earlier check refused: a
 * rate-limited repository gets 429 whatever else is wrong. Returns true when answered. */
static bool hit_and_refuse(cb_request *c, http_response *resp)
{
    crcr_app *app = c->app;
    bool allowed = false;
    int64_t retry_ms = 0;
    if (store_rate_hit(app->st, c->repo, clock_now_ms(), CALLBACK_RATE_WINDOW_MS,
                       app->cfg.rate_limit_per_min, &allowed, &retry_ms) != CRCR_OK) {
        http_resp_detail(resp, 503, "store unavailable, please retry");
        return true;
    }
    if (!allowed) {
        rate_limited(app, resp, c->repo, retry_ms);
        return true;
    }
    if (!c->refusal)
        return false;
    send_refusal(c, resp);
    return true;
}

/* `url` when it is a https://buildkite.com/ page (printable ASCII, no blanks), else NULL. */
static const char *buildkite_url(const char *url)
{
    static const char prefix[] = "https://buildkite.com/";
    if (!url || strncmp(url, prefix, sizeof(prefix) - 1) != 0 || !url[sizeof(prefix) - 1])
        return NULL;
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return NULL;
    return url;
}

/* Steps 9-10: the atomic transition with its side effects, and the answer. */
static void apply_transition(cb_request *c, http_response *resp, const allowlist *al,
                             bool hit_in_apply)
{
    crcr_app *app = c->app;
    const cb_fields *f = &c->f;
    const char *head_sha =
        c->nightly ? NULL : (c->dispatch.head_sha[0] ? c->dispatch.head_sha : NULL);
    int64_t pr_number = c->nightly ? 0 : c->dispatch.pr_number;
    run_effects_env env = {app->st, &app->cfg, al};
    cb_fields eff = *f; /* what the check run and the run row say: the relay's record */
    eff.head_sha = head_sha;
    eff.pr_number = pr_number;
    effects_ctx ec = {
        .app = app,
        .al = al,
        .repo = c->repo,
        .level = c->level,
        .f = &eff,
        .check_run =
            !c->nightly && run_effects_check_wanted(&env, al, c->repo, c->level, f->delivery_id,
                                                    head_sha, &c->dispatch),
        .raw_body = c->body,
        .raw_len = c->body_len,
    };
    /* The check run names the pair the dispatch carried, or why a named one was not tested. */
    char pair_label[CRCR_REPO_NAME_MAX + 48], pair_note[CRCR_REPO_NAME_MAX + 400];
    if (!c->nightly && c->paired) {
        depends_on_label(&c->pair, pair_label, sizeof(pair_label));
        if (c->pair.resolved) {
            ec.pair = pair_label;
            ec.pair_ref = c->pair.head_ref;
        } else if (c->pair.problem[0]) {
            snprintf(pair_note, sizeof(pair_note), "Depends-On %s was not tested: %s.", pair_label,
                     c->pair.problem);
            ec.note = pair_note;
        }
    }
    run_effect_bodies_init(&ec.bodies, c->body_len);
    store_run_update u = {
        .key = {.delivery_id = f->delivery_id,
                .repo = c->repo,
                .run_id = f->run_id,
                .run_attempt = f->run_attempt,
                .workflow_name = f->workflow_name,
                .job_name = f->job_name ? f->job_name : ""},
        .status = f->status,
        .conclusion = f->conclusion,
        .event_type = c->nightly ? f->event_type : c->dispatch.event,
        .level = (int)c->level,
        .pr_number = pr_number,
        .head_sha = head_sha,
        .workflow_name = f->workflow_name,
        .artifact_url = f->artifact_url,
        .test_passed = f->passed,
        .test_failed = f->failed,
        .test_skipped = f->skipped,
        /* A nightly report keeps only what the HUD shows (the row's columns), not its body. */
        .payload = c->nightly ? NULL : c->body,
        .payload_len = c->nightly ? 0 : c->body_len,
        .now = clock_now_ms(),
        .single_shot = c->nightly,
        .dispatched_at = c->nightly ? 0 : c->dispatch.dispatched_at,
        .rate_limit = hit_in_apply ? app->cfg.rate_limit_per_min : 0,
        .rate_window_ms = CALLBACK_RATE_WINDOW_MS,
    };
    buf_t details_buf;
    buf_init(&details_buf, CHECKS_DETAILS_URL_MAX);
    checks_run page = {.repo = c->repo, .run_id = f->run_id, .web_url = config_web_url(&app->cfg)};
    const char *details =
        checks_details_url(&page, &details_buf) == CRCR_OK ? buf_cstr(&details_buf) : NULL;
    /* The run's page: GitHub's for a GitHub token; for a Buildkite one its build, when the body
     * names one on buildkite.com (else none: the GitHub URL would name another run). */
    u.details_url = c->kind == CRCR_ISSUER_GITHUB ? details : buildkite_url(f->details_url);
    ec.details_url = c->kind == CRCR_ISSUER_GITHUB ? NULL : u.details_url;
    ec.key = &u.key;
    store_run_result res;
    char why[128] = "", detail[512];
    crcr_err e = store_run_apply(app->st, &u, build_effects, &ec, &res, why, sizeof(why));
    const char *run_s = f->run_id;
    if (e == CRCR_OK && res.rate_limited) {
        rate_limited(app, resp, c->repo, res.retry_after_ms);
    } else if (e == CRCR_E_NOT_FOUND) {
        LOG_INFO("callback.no_dispatch", "delivery", f->delivery_id, "repo", c->repo, NULL);
        refuse(app, resp, c->repo, 400, "callback rejected: no matching dispatch record");
    } else if (e == CRCR_E_STATE) {
        snprintf(detail, sizeof(detail),
                 "callback rejected: invalid state transition delivery_id=%s repo=%s status=%s "
                 "(%s)",
                 f->delivery_id, c->repo, f->status, why);
        LOG_INFO("callback.invalid_transition", "delivery", f->delivery_id, "repo", c->repo, "run",
                 run_s, "status", f->status, "reason", why, NULL);
        refuse(app, resp, c->repo, 400, detail);
    } else if (e) {
        http_resp_detail(resp, 503, "store unavailable, please retry");
    } else {
        metrics_callback_result(res.duplicate ? "duplicate" : "accepted");
        bool queued = ec.check_run && !res.duplicate && !res.ended[0];
        LOG_INFO(res.duplicate ? "callback.duplicate" : "callback.accepted", "delivery",
                 f->delivery_id, "repo", c->repo, "run", run_s, "job", f->job_name, "status",
                 f->status, "conclusion", f->conclusion, ob_kind_name(OB_KIND_CHECK_RUN),
                 queued ? ob_state_name(OB_STATE_QUEUED) : NULL, "ended",
                 res.ended[0] ? res.ended : NULL, NULL);
        answer_status(resp, f->status, res.duplicate, res.ended);
        if (!res.duplicate) /* nothing when no job was queued */
            outbox_wake(app->ob, ec.n_jobs);
    }
    run_effect_bodies_free(&ec.bodies);
    buf_free(&details_buf);
}

void callback_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    /* Upstream's order: the body must be JSON before the token is looked at. Before the token
     * it is only validated (jv_validate: one linear pass, nothing built or allocated, duplicate
     * keys not looked for), so what an unauthenticated request costs is a read of at most
     * CRCR_MAX_CALLBACK_BODY bytes whatever its shape (docs/security.md); a request without a
     * token never gets here (callback_guard). */
    bool is_object = true;
    if (req->body_len &&
        (!jv_validate(req->body, req->body_len, &is_object, NULL, 0) || !is_object)) {
        metrics_callback_result("rejected");
        http_resp_detail(resp, 400, "Invalid JSON body");
        return;
    }

    oidc_identity id;
    char reason[OIDC_REASON_MAX] = "";
    int64_t retry_after_s = 0;
    int st = oidc_verify_ex(app->oidc, http_req_header(req, "Authorization"), clock_now_ms() / 1000,
                            &id, reason, sizeof(reason), &retry_after_s);
    if (st == 503) {
        /* The issuer's keys cannot be had (its JWKS host is down, answers 5xx or garbage): the
         * token may be fine, so the caller is asked to come back rather than told it is not. */
        metrics_callback_result("unavailable");
        LOG_WARN("callback.issuer_unavailable", "reason", reason, NULL);
        char secs[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)(retry_after_s > 0 ? retry_after_s : 1));
        http_resp_detail(resp, 503, reason);
        http_resp_header(resp, "Retry-After", secs);
        return;
    }
    if (st != 0) {
        metrics_callback_result("rejected");
        LOG_INFO("callback.unauthorized", "reason", reason, NULL);
        http_resp_detail(resp, st, reason[0] ? reason : "Invalid authorization token");
        return;
    }
    /* Authenticated: now the values callback_parse reads are built, and a duplicate key (JSON
     * that jv_validate lets through, Python's json.loads too) refused as jansson refuses it. */
    jv *body = req->body_len ? callback_body_parse(req->body, req->body_len) : jv_new_obj();
    if (!body || !jv_is_obj(body)) {
        jv_free(body);
        metrics_callback_result("rejected");
        http_resp_detail(resp, 400, "Invalid JSON body");
        return;
    }
    cb_request c = {.app = app,
                    .req = req,
                    .repo = id.repository,
                    .kind = id.kind,
                    .body = req->body,
                    .body_len = req->body_len};
    buf_init(&c.clean, 0);
    if (id.kind != CRCR_ISSUER_GITHUB)
        LOG_DEBUG("callback.mapped_identity", "issuer_kind", crcr_issuer_kind_name(id.kind),
                  "pipeline", id.pipeline, "repo", id.repository, NULL);

    allowlist *al = allowlist_source_get(app->allow);
    c.level = allowlist_level(al, c.repo);
    if (c.level < CRCR_LEVEL_L2) {
        LOG_INFO("callback.ignored", "repo", c.repo, "level", crcr_level_name(c.level), NULL);
        allowlist_free(al);
        jv_free(body);
        http_resp_json(resp, 200, "{\"ok\":true,\"status\":\"ignored\"}");
        return;
    }

    /* Steps 3b-8: every refusal is answered after the rate hit (step 4) that precedes it. */
    check_identity(&c, &id);
    if (!c.refusal && !callback_parse(body, c.kind, &c.f, c.detail, sizeof(c.detail)))
        c.refusal = 400;
    if (!c.refusal && c.f.clean_body) {
        /* What is stored and forwarded keeps no dropped link and GitHub's spelling of the
         * conclusion. The cap leaves room for jansson's spelling of reals ("1e300" is written
         * "1.0000000000000001e+300"). */
        buf_init(&c.clean, 8 * req->body_len + 64);
        if (callback_clean_body(req->body, req->body_len, &c.f, &c.clean) == CRCR_OK) {
            c.body = c.clean.data;
            c.body_len = c.clean.len;
        } else {
            c.refusal = 503;
            snprintf(c.detail, sizeof(c.detail), "out of memory, please retry");
        }
    }
    if (!c.refusal) {
        c.nightly = c.f.event_type && (strcmp(c.f.event_type, "nightly") == 0 ||
                                       strcmp(c.f.event_type, "periodic") == 0);
        if (c.nightly)
            check_nightly(&c);
        else
            check_dispatched(&c);
    }
    /* The hit of a callback that passes is counted in its transition's transaction (SQLite: one
     * group commit); a refusal, a nightly report (its byte budget comes after the hit) and a
     * limit below 1 take a separate hit first. */
    bool hit_in_apply = !c.refusal && !c.nightly && app->cfg.rate_limit_per_min > 0;
    if (!hit_in_apply) {
        if (hit_and_refuse(&c, resp))
            goto out;
        if (c.nightly) {
            take_nightly_budget(&c);
            if (c.refusal) {
                send_refusal(&c, resp);
                goto out;
            }
        }
    }
    apply_transition(&c, resp, al, hit_in_apply);
out:
    buf_free(&c.clean);
    buf_free(&c.dispatch.payload);
    allowlist_free(al);
    jv_free(body);
}
