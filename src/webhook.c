/* webhook.c - POST /github/webhook; the order of checks is documented in webhook.h. */
#include "webhook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "app.h"
#include "clock.h"
#include "json.h"
#include "limits.h"
#include "log.h"
#include "sig.h"
#include "store.h"

static bool event_supported(const char *ev)
{
    static const char *const events[] = {"pull_request", "push", "check_run", "check_suite",
                                         "ping"};
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        if (strcmp(ev, events[i]) == 0)
            return true;
    }
    return false;
}

/* A delivery id is a GUID in practice; accept 1..CRCR_DELIVERY_ID_MAX-1 safe characters. */
static bool delivery_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= CRCR_DELIVERY_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.' || c == ':';
        if (!ok)
            return false;
    }
    return true;
}

static void ignored(crcr_app *app, http_response *resp, const char *reason)
{
    atomic_fetch_add(&app->webhooks_ignored, 1);
    if (reason) {
        buf_t b;
        buf_init(&b, 512);
        buf_puts(&b, "{\"ignored\":true,\"reason\":");
        jv_quote(&b, reason, strlen(reason));
        buf_putc(&b, '}');
        http_resp_json(resp, 200, buf_cstr(&b));
        buf_free(&b);
    } else {
        http_resp_json(resp, 200, "{\"ignored\":true}");
    }
}

static void reject(crcr_app *app, http_response *resp, int status, const char *detail,
                   const char *delivery)
{
    atomic_fetch_add(&app->webhooks_rejected, 1);
    char code[8];
    snprintf(code, sizeof(code), "%d", status);
    LOG_INFO("webhook.rejected", "delivery", delivery, "status", code, "detail", detail, NULL);
    http_resp_detail(resp, status, detail);
}

/* Whether the action of a pull_request event leads to a dispatch. */
static bool pr_action_dispatches(const char *action)
{
    static const char *const actions[] = {"opened", "reopened", "synchronize", "closed"};
    for (size_t i = 0; action && i < sizeof(actions) / sizeof(actions[0]); i++) {
        if (strcmp(action, actions[i]) == 0)
            return true;
    }
    return false;
}

/* Persists the delivery with one dispatch row per allowlisted repo and answers. */
static void accept_dispatch(crcr_app *app, const http_request *req, http_response *resp,
                            const char *event, const char *delivery, const jv *doc)
{
    allowlist *al = allowlist_source_get(app->allow);
    if (!al) {
        reject(app, resp, 503, "allowlist not loaded", delivery);
        return;
    }
    size_t n = allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, NULL, 0);
    const char **repos = calloc(n ? n : 1, sizeof(*repos));
    store_new_job *jobs = calloc(n ? n : 1, sizeof(*jobs));
    if (!repos || !jobs) {
        free(repos);
        free(jobs);
        allowlist_free(al);
        reject(app, resp, 503, "out of memory", delivery);
        return;
    }
    allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, repos, n);
    int64_t now = clock_now_ms();
    for (size_t i = 0; i < n; i++)
        jobs[i] = (store_new_job){.kind = "dispatch", .target = repos[i], .due_at = now};

    int64_t pr = 0;
    const jv *num = jv_path(doc, "pull_request.number");
    if (!jv_int(num, &pr))
        jv_int(jv_get(doc, "number"), &pr);
    const char *head_sha = jv_path_str(doc, "pull_request.head.sha");
    if (!head_sha)
        head_sha = jv_path_str(doc, "after");
    store_delivery d = {
        .delivery_id = delivery,
        .event = event,
        .action = jv_path_str(doc, "action"),
        .upstream_repo = jv_path_str(doc, "repository.full_name"),
        .pr_number = pr,
        .head_sha = head_sha,
        .ref = jv_path_str(doc, "ref"),
        .received_at = now,
        .payload = req->body,
        .payload_len = req->body_len,
        .status = "queued",
    };
    crcr_err e = store_ingest(app->st, &d, jobs, n);
    if (e == CRCR_E_DUPLICATE) {
        atomic_fetch_add(&app->webhooks_duplicate, 1);
        LOG_INFO("webhook.duplicate", "delivery", delivery, "event", event, NULL);
        http_resp_json(resp, 200, "{\"ok\":true,\"duplicate\":true}");
    } else if (e) {
        reject(app, resp, 503, "store unavailable, please redeliver", delivery);
    } else {
        atomic_fetch_add(&app->webhooks_accepted, 1);
        buf_t b;
        buf_init(&b, 64u * 1024u + n * (CRCR_REPO_NAME_MAX + 4));
        buf_puts(&b, "{\"ok\":true,\"delivery_id\":");
        jv_quote(&b, delivery, strlen(delivery));
        buf_puts(&b, ",\"queued\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                buf_putc(&b, ',');
            jv_quote(&b, repos[i], strlen(repos[i]));
        }
        buf_puts(&b, "]}");
        http_resp_json(resp, 202, buf_cstr(&b));
        buf_free(&b);
        char count[24];
        snprintf(count, sizeof(count), "%zu", n);
        LOG_INFO("webhook.accepted", "delivery", delivery, "event", event, "action", d.action,
                 "targets", count, NULL);
        outbox_notify(app->ob);
    }
    free(repos);
    free(jobs);
    allowlist_free(al);
}

void webhook_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    const char *event = http_req_header(req, "X-GitHub-Event");
    const char *delivery = http_req_header(req, "X-GitHub-Delivery");
    atomic_store(&app->last_webhook_at, clock_now_ms());

    if (!event || strlen(event) >= CRCR_EVENT_NAME_MAX || !event_supported(event)) {
        ignored(app, resp, NULL);
        return;
    }

    const char *sig = http_req_header(req, "X-Hub-Signature-256");
    if (!sig || !*sig) {
        reject(app, resp, 400, "No signature", NULL);
        return;
    }
    bool ok = app->cfg.app_secret && sig_verify(sig, req->body, req->body_len, app->cfg.app_secret);
    if (!ok && app->cfg.app_secret_previous)
        ok = sig_verify(sig, req->body, req->body_len, app->cfg.app_secret_previous);
    if (!ok) {
        reject(app, resp, 401, "Bad signature", NULL);
        return;
    }
    if (delivery && !delivery_id_valid(delivery)) {
        reject(app, resp, 400, "Invalid X-GitHub-Delivery", NULL);
        return;
    }

    if (strcmp(event, "ping") == 0) {
        LOG_INFO("webhook.ping", "delivery", delivery, NULL);
        http_resp_json(resp, 200, "{\"ok\":true,\"pong\":true}");
        return;
    }

    char perr[160] = "";
    jv *doc = req->body_len ? jv_parse(req->body, req->body_len, perr, sizeof(perr)) : jv_new_obj();
    if (!doc || !jv_is_obj(doc)) {
        LOG_DEBUG("webhook.invalid_json", "delivery", delivery, "error", perr, NULL);
        jv_free(doc);
        reject(app, resp, 400, "Invalid JSON body", delivery);
        return;
    }

    const char *repo = jv_path_str(doc, "repository.full_name");
    if (!repo || strcasecmp(repo, app->cfg.upstream_repo) != 0) {
        LOG_DEBUG("webhook.foreign_repo", "delivery", delivery, "repo", repo, NULL);
        jv_free(doc);
        ignored(app, resp, NULL);
        return;
    }

    const char *action = jv_path_str(doc, "action");
    bool dispatch = false;
    if (strcmp(event, "push") == 0)
        dispatch = true;
    else if (strcmp(event, "pull_request") == 0)
        dispatch = pr_action_dispatches(action);

    if (!dispatch) {
        LOG_DEBUG("webhook.ignored", "delivery", delivery, "event", event, "action", action, NULL);
        jv_free(doc);
        ignored(app, resp, NULL);
        return;
    }
    if (!delivery || !*delivery) {
        jv_free(doc);
        reject(app, resp, 400, "Missing X-GitHub-Delivery", NULL);
        return;
    }
    accept_dispatch(app, req, resp, event, delivery, doc);
    jv_free(doc);
}
