/* webhook.c - POST /github/webhook; the order of checks is documented in webhook.h. */
#include "webhook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "app.h"
#include "checks.h"
#include "clock.h"
#include "depends_on.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "oncall.h"
#include "run_effects.h"
#include "sig.h"
#include "store.h"
#include "vocab.h"

/* The X-GitHub-Event of a check run's re-run request (not the outbox kind of the same name). */
#define EVENT_CHECK_RUN "check_run" /* vocab-ok: a webhook event name */

static bool event_supported(const char *ev)
{
    static const char *const events[] = {"pull_request", "push", EVENT_CHECK_RUN, "check_suite",
                                         "ping"};
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        if (strcmp(ev, events[i]) == 0)
            return true;
    }
    return false;
}

/* The App's installation events: answered like any event crcr does not relay (200
 * {"ignored":true}, also unsigned or badly signed, as upstream), but a verified one drops the
 * installation ids the outbox keeps for the installation it names (outbox.h). */
static bool event_installation(const char *ev)
{
    return strcmp(ev, "installation") == 0 || strcmp(ev, "installation_repositories") == 0;
}

static void ignored(crcr_app *app, http_response *resp, const char *reason)
{
    metrics_webhook_result("ignored");
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
    metrics_webhook_result(status >= 500 ? "error" : "rejected");
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

/*
 * The delivery row of a verified webhook, one rule for every path that stores one (dispatches,
 * label back-fills, re-runs): the PR number from pull_request.number, else the top-level
 * `number`; the head sha from pull_request.head.sha, else the top-level `after` (a push's new
 * head); the ref. The sha fallback is the dispatch path's rule and the right one for all: the
 * head sha is what the dispatch record gives callbacks (store_dispatch: "push: after"), what the
 * callback token binds and what the HUD groups by; a label or re-run event names no `after`, so
 * for them the fallback changes nothing. Strings are borrowed from `doc` and `req`.
 */
static store_delivery delivery_row(const http_request *req, const char *event, const char *delivery,
                                   const jv *doc, int64_t now)
{
    int64_t pr = 0;
    if (!jv_int(jv_path(doc, "pull_request.number"), &pr))
        jv_int(jv_get(doc, "number"), &pr);
    const char *head_sha = jv_path_str(doc, "pull_request.head.sha");
    if (!head_sha)
        head_sha = jv_path_str(doc, "after");
    return (store_delivery){
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
        .status = ob_state_name(OB_STATE_QUEUED),
    };
}

/* ---- supersession and Depends-On (§3.12, §3.13) ---- */

/* What a supersession's ended runs cause: a cancelled check run on their old sha, only where one
 * was created (store_new_job.after_seq), naming the pair they tested and why they ended. No
 * on-call comment (nothing failed) and no HUD forward (no callback came). */
typedef struct ended_ctx {
    crcr_app *app;
    buf_t body, key; /* the current check run's (store_ended_fn: valid until the next call) */
    char label[CRCR_REPO_NAME_MAX + 48];
} ended_ctx;

static crcr_err ended_effects(void *vctx, const store_run_row *run, const char *pair,
                              size_t pair_len, store_new_job *jobs, size_t max, size_t *n)
{
    ended_ctx *c = vctx;
    *n = 0;
    if (max < 1 || !run->head_sha || !*run->head_sha)
        return CRCR_OK;
    depends_on_pair p;
    bool paired = depends_on_record_parse(pair, pair_len, &p) && p.resolved;
    if (paired)
        depends_on_label(&p, c->label, sizeof(c->label));
    bool closed = end_reason_parse(run->ended) == END_REASON_PR_CLOSED;
    checks_run r = {
        .repo = run->repo,
        .workflow_name = run->workflow_name,
        .job_name = run->job_name,
        .head_sha = run->head_sha,
        .status = run->state,
        .conclusion = run->conclusion,
        .run_id = run->run_id,
        .pr_number = run->pr_number,
        .details_url = run->details_url,
        .web_url = config_web_url(&c->app->cfg),
        .pair = paired ? c->label : NULL,
        .pair_ref = paired ? p.head_ref : NULL,
        .note = closed ? "Ended by the relay: the pull request was closed."
                       : "Superseded: the relay dispatched a newer commit (or Depends-On pair) of "
                         "this pull request; this run's result no longer counts.",
    };
    crcr_err e = run_effects_check_job(&c->app->cfg, &r, &c->body, &c->key, &jobs[0]);
    if (e)
        return e;
    jobs[0].after_seq = true;
    *n = 1;
    return CRCR_OK;
}

static void ended_ctx_init(ended_ctx *c, crcr_app *app)
{
    memset(c, 0, sizeof(*c));
    c->app = app;
    buf_init(&c->body, RUN_EFFECTS_CHECK_BODY_MAX);
    buf_init(&c->key, RUN_EFFECTS_KEY_MAX);
}

static void ended_ctx_free(ended_ctx *c)
{
    buf_free(&c->body);
    buf_free(&c->key);
}

/* How a dispatch of the upstream PR treats its older dispatches and its Depends-On lines. */
typedef struct dispatch_plan {
    const char *reason; /* the end reason of the PR's older dispatches; NULL: none (a push) */
    bool any_sha;       /* every older one (a closed PR, a Depends-On change), not only those of
                           another head or pair */
    const depends_on_line *deps; /* the body's pairs (allowlisted repos get them) */
    size_t n_deps;
    bool edit; /* an edit of the body: only repos whose pair changed from old_deps */
    const depends_on_line *old_deps;
    size_t n_old;
} dispatch_plan;

/* Logs the Depends-On lines naming no allowlisted repository: they change nothing (§3.13). */
static void log_unlisted(const allowlist *al, const char *delivery, const depends_on_line *v,
                         size_t n, size_t ignored)
{
    for (size_t i = 0; i < n; i++) {
        if (!allowlist_find(al, v[i].repo)) {
            char num[24];
            snprintf(num, sizeof(num), "%lld", (long long)v[i].number);
            LOG_INFO("webhook.depends_on_ignored", "delivery", delivery, "repo", v[i].repo, "pr",
                     num, "reason", "not on the allowlist", NULL);
        }
    }
    if (ignored) {
        char k[24];
        snprintf(k, sizeof(k), "%zu", ignored);
        LOG_INFO("webhook.depends_on_ignored", "delivery", delivery, "lines", k, "reason",
                 "malformed, repeated or over the limit", NULL);
    }
}

/* Keeps in repos[0..n) the ones whose pair the edit changed; returns how many. */
static size_t changed_pairs(const dispatch_plan *plan, const char **repos, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (depends_on_find(plan->deps, plan->n_deps, repos[i]) !=
            depends_on_find(plan->old_deps, plan->n_old, repos[i]))
            repos[k++] = repos[i];
    }
    return k;
}

/* The early hand-over of accept_dispatch's claimed rows (store_visible): run by the store
 * between the ingest's commit and its sync. */
typedef struct take_ctx {
    outbox *ob;
    const store_delivery *d;
    const store_new_job *jobs;
    size_t n, reserved;
    size_t taken;
} take_ctx;

static void take_early(void *vctx)
{
    take_ctx *t = vctx;
    t->taken = outbox_take(t->ob, t->d, t->jobs, t->n, t->reserved);
}

/* Persists the delivery with one dispatch row per allowlisted repo (an edit: per repo whose pair
 * changed), their Depends-On pairs and the supersession of the PR's older dispatches, and
 * answers. */
static void accept_dispatch(crcr_app *app, const http_request *req, http_response *resp,
                            const char *event, const char *delivery, const jv *doc,
                            const dispatch_plan *plan)
{
    allowlist *al = allowlist_source_get(app->allow);
    if (!al) {
        reject(app, resp, 503, "allowlist not loaded", delivery);
        return;
    }
    size_t n = allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, NULL, 0);
    const char **repos = calloc(n ? n : 1, sizeof(*repos));
    store_new_job *jobs = calloc(n ? n : 1, sizeof(*jobs));
    int64_t *claimed = calloc(n ? n : 1, sizeof(*claimed));
    if (!repos || !jobs || !claimed) {
        free(repos);
        free(jobs);
        free(claimed);
        allowlist_free(al);
        reject(app, resp, 503, "out of memory", delivery);
        return;
    }
    allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, repos, n);
    log_unlisted(al, delivery, plan->deps, plan->n_deps, 0);
    if (plan->edit && (n = changed_pairs(plan, repos, n)) == 0) {
        free(repos);
        free(jobs);
        free(claimed);
        allowlist_free(al);
        LOG_DEBUG("webhook.ignored", "delivery", delivery, "event", event, "action", "edited",
                  "reason", "Depends-On unchanged", NULL);
        ignored(app, resp, NULL);
        return;
    }
    int64_t now = clock_now_ms();
    buf_t pair_bodies[CRCR_DEPENDS_ON_MAX];
    size_t n_pairs = 0;
    for (size_t i = 0; i < n; i++) {
        jobs[i] = (store_new_job){
            .kind = ob_kind_name(OB_KIND_DISPATCH), .target = repos[i], .due_at = now};
        int64_t pair = depends_on_find(plan->deps, plan->n_deps, repos[i]);
        if (pair > 0 && n_pairs < CRCR_DEPENDS_ON_MAX) {
            buf_t *b = &pair_bodies[n_pairs];
            buf_init(b, CRCR_REPO_NAME_MAX + 96);
            if (depends_on_request(repos[i], pair, b) == CRCR_OK) {
                jobs[i].pair_number = pair;
                jobs[i].body = b->data;
                jobs[i].body_len = b->len;
            }
            n_pairs++;
        }
    }

    store_delivery d = delivery_row(req, event, delivery, doc, now);
    /* Rows whose outcome is known (dry-run) are stored finished; of the others, those the outbox
     * has room for are claimed by the ingest and handed over after it. */
    size_t known = outbox_known(app->ob, &d, jobs, n);
    int64_t lease_until = 0;
    size_t reserved = outbox_reserve(app->ob, n - known, &lease_until);
    gh_budget_expect(app->budget, (long)reserved); /* their share is taken while this commits */
    for (size_t i = 0, r = 0; i < n && r < reserved; i++) {
        if (!jobs[i].done_state) {
            jobs[i].lease_until = lease_until;
            jobs[i].claimed_id = &claimed[i];
            r++;
        }
    }
    ended_ctx ec;
    ended_ctx_init(&ec, app);
    store_supersede sup = {
        .reason = plan->reason, .any_sha = plan->any_sha, .effects = ended_effects, .ctx = &ec};
    take_ctx tc = {.ob = app->ob, .d = &d, .jobs = jobs, .n = n, .reserved = reserved};
    store_visible vis = {.fn = take_early, .ctx = &tc};
    crcr_err e = store_ingest_superseding(app->st, &d, jobs, n, plan->reason ? &sup : NULL,
                                          reserved ? &vis : NULL);
    ended_ctx_free(&ec);
    if (vis.called) /* the rows were handed over while the disk synced: the slots are theirs */
        reserved = 0;
    if (e == CRCR_E_DUPLICATE) {
        metrics_webhook_result("duplicate");
        LOG_INFO("webhook.duplicate", "delivery", delivery, "event", event, NULL);
        http_resp_json(resp, 200, "{\"ok\":true,\"duplicate\":true}");
    } else if (e) {
        reject(app, resp, 503, "store unavailable, please redeliver", delivery);
    } else {
        /* The workers start on the rows while the answer is built and sent (or started while
         * the ingest's commit was synced). */
        size_t taken = vis.called ? tc.taken : outbox_take(app->ob, &d, jobs, n, reserved);
        reserved = 0;
        outbox_known_recorded(app->ob, &d, jobs, n);
        outbox_wake(app->ob, n - known - taken + (size_t)sup.runs);
        metrics_webhook_result("accepted");
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
        char count[24], ended[64];
        snprintf(count, sizeof(count), "%zu", n);
        snprintf(ended, sizeof(ended), "%d/%d/%d", sup.dispatches, sup.runs, sup.withdrawn);
        LOG_INFO("webhook.accepted", "delivery", delivery, "event", event, "action", d.action,
                 "targets", count, "ended", plan->reason ? ended : NULL, NULL);
    }
    outbox_unreserve(app->ob, reserved); /* not stored: the slots go back */
    for (size_t i = 0; i < n_pairs; i++) /* the rows' bodies, copied by outbox_take */
        buf_free(&pair_bodies[i]);
    free(repos);
    free(jobs);
    free(claimed);
    allowlist_free(al);
}

/* The Depends-On lines of the PR body at `path` of `doc`. */
static size_t body_pairs(const crcr_app *app, const jv *doc, const char *path, depends_on_line *out,
                         size_t *ignored)
{
    const jv *body = jv_path(doc, path);
    return depends_on_parse(jv_str(body), jv_str_len(body), config_web_url(&app->cfg), out,
                            CRCR_DEPENDS_ON_MAX, ignored);
}

/* pull_request opened/reopened/synchronize/closed and push: dispatch to every allowlisted repo.
 * A PR's dispatch supersedes its older ones (closed: all of them, as pr_closed) and carries the
 * pairs of its body's Depends-On lines (not when closed: nothing is tested then). */
static void handle_dispatch(crcr_app *app, const http_request *req, http_response *resp,
                            const char *event, const char *delivery, const jv *doc,
                            const char *action)
{
    dispatch_plan plan = {0};
    depends_on_line deps[CRCR_DEPENDS_ON_MAX];
    if (strcmp(event, "pull_request") == 0) {
        bool closed = action && strcmp(action, "closed") == 0;
        plan.reason = end_reason_name(closed ? END_REASON_PR_CLOSED : END_REASON_SUPERSEDED);
        plan.any_sha = closed;
        if (!closed) {
            size_t ignored_lines = 0;
            plan.n_deps = body_pairs(app, doc, "pull_request.body", deps, &ignored_lines);
            plan.deps = deps;
            if (ignored_lines)
                log_unlisted(NULL, delivery, NULL, 0, ignored_lines);
        }
    }
    accept_dispatch(app, req, resp, event, delivery, doc, &plan);
}

/* pull_request edited on an open upstream PR whose body changed: dispatch again to every
 * allowlisted repository whose Depends-On pair changed (added, removed or another PR), and only
 * to them, superseding their older dispatches of the PR (§3.13). Other edits are ignored. */
static void handle_edit(crcr_app *app, const http_request *req, http_response *resp,
                        const char *event, const char *delivery, const jv *doc)
{
    const char *state = jv_path_str(doc, "pull_request.state");
    if (!state || strcmp(state, "open") != 0) {
        ignored(app, resp, NULL);
        return;
    }
    depends_on_line now_deps[CRCR_DEPENDS_ON_MAX], old_deps[CRCR_DEPENDS_ON_MAX];
    size_t ignored_lines = 0;
    dispatch_plan plan = {
        .reason = end_reason_name(END_REASON_SUPERSEDED),
        .any_sha = true,
        .deps = now_deps,
        .edit = true,
        .old_deps = old_deps,
    };
    plan.n_deps = body_pairs(app, doc, "pull_request.body", now_deps, &ignored_lines);
    plan.n_old = body_pairs(app, doc, "changes.body.from", old_deps, NULL);
    if (ignored_lines)
        log_unlisted(NULL, delivery, NULL, 0, ignored_lines);
    accept_dispatch(app, req, resp, event, delivery, doc, &plan);
}

/* Upstream PRs one downstream push re-dispatches at most (more wait for the next push). */
#define WEBHOOK_PAIR_PUSH_MAX 64u

/* pull_request synchronize of an allowlisted downstream repository: every open upstream PR whose
 * latest dispatch to it is paired with that PR is dispatched again to that repository only (a
 * copy of that dispatch's delivery, "<delivery>:pr<N>"), with the new downstream head read at
 * send time, superseding the older run (§3.13). A PR no upstream PR names changes nothing:
 * {"ignored":true}, as every other event of a downstream repository. */
static void handle_pair_push(crcr_app *app, http_response *resp, const char *delivery,
                             const jv *doc)
{
    allowlist *al = allowlist_source_get(app->allow);
    const allowlist_entry *ent = allowlist_find(al, jv_path_str(doc, "repository.full_name"));
    int64_t number = 0;
    if (!ent || !jv_int(jv_path(doc, "pull_request.number"), &number) || number <= 0) {
        allowlist_free(al);
        ignored(app, resp, NULL);
        return;
    }
    char repo[CRCR_REPO_NAME_MAX];
    snprintf(repo, sizeof(repo), "%s", ent->repo);
    allowlist_free(al);
    buf_t body;
    buf_init(&body, CRCR_REPO_NAME_MAX + 96);
    depends_on_request(repo, number, &body);
    int64_t now = clock_now_ms();
    store_new_job job = {.kind = ob_kind_name(OB_KIND_DISPATCH),
                         .target = repo,
                         .body = body.data,
                         .body_len = body.len,
                         .due_at = now,
                         .pair_number = number};
    ended_ctx ec;
    ended_ctx_init(&ec, app);
    store_supersede sup = {.reason = end_reason_name(END_REASON_SUPERSEDED),
                           .any_sha = true,
                           .effects = ended_effects,
                           .ctx = &ec};
    store_pair_hit hits[WEBHOOK_PAIR_PUSH_MAX];
    size_t n = 0;
    crcr_err e = store_pair_redispatch(app->st, repo, number, delivery, now, &job, &sup, hits,
                                       WEBHOOK_PAIR_PUSH_MAX, &n);
    ended_ctx_free(&ec);
    buf_free(&body);
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++)
        fresh += !hits[i].duplicate;
    if (e == CRCR_E_INVALID) {
        reject(app, resp, 400, "X-GitHub-Delivery too long", delivery);
    } else if (e) {
        reject(app, resp, 503, "store unavailable, please redeliver", delivery);
    } else if (n == 0) {
        LOG_DEBUG("webhook.ignored", "delivery", delivery, "repo", repo, "reason",
                  "not a paired pull request", NULL);
        ignored(app, resp, NULL);
    } else if (fresh == 0) {
        metrics_webhook_result("duplicate");
        http_resp_json(resp, 200, "{\"ok\":true,\"duplicate\":true}");
    } else {
        metrics_webhook_result("accepted");
        buf_t b;
        buf_init(&b, 4096 + WEBHOOK_PAIR_PUSH_MAX * (CRCR_DELIVERY_ID_MAX + 32));
        buf_puts(&b, "{\"ok\":true,\"delivery_id\":");
        jv_quote(&b, delivery, strlen(delivery));
        buf_puts(&b, ",\"queued\":[");
        jv_quote(&b, repo, strlen(repo));
        buf_puts(&b, "],\"redispatched\":[");
        for (size_t i = 0, k = 0; i < n; i++) {
            if (hits[i].duplicate)
                continue;
            buf_printf(&b, "%s{\"pull_request\":%lld,\"delivery_id\":", k++ ? "," : "",
                       (long long)hits[i].pr_number);
            jv_quote(&b, hits[i].delivery_id, strlen(hits[i].delivery_id));
            buf_putc(&b, '}');
        }
        buf_puts(&b, "]}");
        http_resp_json(resp, 202, buf_cstr(&b));
        buf_free(&b);
        char num[24], count[24], ended[64];
        snprintf(num, sizeof(num), "%lld", (long long)number);
        snprintf(count, sizeof(count), "%zu", fresh);
        snprintf(ended, sizeof(ended), "%d/%d/%d", sup.dispatches, sup.runs, sup.withdrawn);
        LOG_INFO("webhook.pair_push", "delivery", delivery, "repo", repo, "pr", num, "redispatched",
                 count, "ended", ended, NULL);
        outbox_wake(app->ob, fresh + (size_t)sup.runs);
    }
}

/* Repositories an installation event names that are looked at (GitHub lists at most a few
 * hundred per event page). */
#define WEBHOOK_INSTALLATION_REPOS_MAX 1024u

/* Files a push's commits list, at most WEBHOOK_PUSH_PATHS_MAX (GitHub lists at most 20 commits
 * in a push payload; each names the files it added, modified or removed). */
#define WEBHOOK_PUSH_PATHS_MAX 4096u

static size_t add_paths(const jv *commit, const char **out, size_t n)
{
    static const char *const lists[] = {"added", "modified", "removed"};
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        const jv *files = jv_get(commit, lists[l]);
        for (size_t i = 0; i < jv_arr_len(files) && n < WEBHOOK_PUSH_PATHS_MAX; i++) {
            const char *f = jv_str(jv_arr_at(files, i));
            if (f)
                out[n++] = f;
        }
    }
    return n;
}

/* A push that changed the allowlist's file (or the CI providers map's) on the branch its URL
 * names: that source reloads now instead of after its TTL, and with a shared store every
 * instance follows (allowlist_source_watches). */
static void push_refresh(crcr_app *app, const char *delivery, const jv *doc)
{
    const char *repo = jv_path_str(doc, "repository.full_name");
    const char *ref = jv_path_str(doc, "ref");
    if (!repo || !ref)
        return;
    const char **paths = malloc(WEBHOOK_PUSH_PATHS_MAX * sizeof(*paths));
    if (!paths)
        return;
    size_t n = 0;
    const jv *commits = jv_get(doc, "commits");
    for (size_t i = 0; i < jv_arr_len(commits); i++)
        n = add_paths(jv_arr_at(commits, i), paths, n);
    n = add_paths(jv_get(doc, "head_commit"), paths, n);
    allowlist_source *sources[] = {app->allow, app->providers};
    static const char *const names[] = {"allowlist", "ci_providers"};
    for (size_t k = 0; k < sizeof(sources) / sizeof(sources[0]); k++) {
        if (allowlist_source_watches(sources[k], repo, ref, paths, n)) {
            LOG_INFO("webhook.push_refresh", "delivery", delivery, "source", names[k], NULL);
            allowlist_source_reload(sources[k]);
        }
    }
    free(paths);
}

void webhook_classify(const char *event, const jv *doc, const char *upstream_repo, webhook_route *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = WEBHOOK_IGNORE;
    r->action = jv_path_str(doc, "action");
    const char *repo = jv_path_str(doc, "repository.full_name");
    const char *action = r->action ? r->action : "";
    if (!repo || strcasecmp(repo, upstream_repo) != 0) {
        /* Another repository's event (the App is installed downstream too): only a push to a
         * downstream PR may matter, when an upstream PR names it (§3.13). */
        if (repo && strcmp(event, "pull_request") == 0 && strcmp(action, "synchronize") == 0)
            r->kind = WEBHOOK_PAIR_PUSH;
        return;
    }
    if (strcmp(event, "push") == 0) {
        r->kind = WEBHOOK_DISPATCH;
        return;
    }
    if (strcmp(event, "pull_request") == 0) {
        const char *label = jv_path_str(doc, "label.name");
        if (pr_action_dispatches(action)) {
            r->kind = WEBHOOK_DISPATCH;
        } else if (strcmp(action, "edited") == 0 && jv_is_str(jv_path(doc, "changes.body.from"))) {
            r->kind = WEBHOOK_EDIT; /* the body changed: its Depends-On lines may have */
        } else if (strcmp(action, "labeled") == 0 && label &&
                   strncmp(label, "ciflow/crcr/", 12) == 0 && label[12] &&
                   strlen(label) < CRCR_LABEL_MAX) {
            r->kind = WEBHOOK_LABEL;
            r->device = label + 12;
        }
        return;
    }
    if (strcmp(action, "rerequested") != 0)
        return;
    if (strcmp(event, EVENT_CHECK_RUN) == 0) {
        r->run_id = checks_parse_external_id(jv_path_str(doc, "check_run.external_id"));
        if (!checks_parse_name(jv_path_str(doc, "check_run.name"), r->repo, sizeof(r->repo)) ||
            r->run_id <= 0) {
            r->reason = "not a crcr check run";
            return;
        }
        r->kind = WEBHOOK_RERUN_RUN;
    } else if (strcmp(event, "check_suite") == 0) {
        if (!jv_int(jv_path(doc, "check_suite.id"), &r->suite_id) || r->suite_id <= 0) {
            r->reason = "missing check_suite id";
            return;
        }
        r->kind = WEBHOOK_RERUN_SUITE;
    }
}

/* Persists a delivery that carries other outbox rows than dispatches (label back-fill, re-runs)
 * and answers `ok_json` (or the duplicate answer). */
static void persist_and_answer(crcr_app *app, const http_request *req, http_response *resp,
                               const char *event, const char *delivery, const jv *doc,
                               const store_new_job *jobs, size_t n, const char *ok_json)
{
    store_delivery d = delivery_row(req, event, delivery, doc, clock_now_ms());
    crcr_err e = store_ingest(app->st, &d, jobs, n);
    if (e == CRCR_E_DUPLICATE) {
        metrics_webhook_result("duplicate");
        http_resp_json(resp, 200, "{\"ok\":true,\"duplicate\":true}");
    } else if (e) {
        reject(app, resp, 503, "store unavailable, please redeliver", delivery);
    } else {
        metrics_webhook_result("accepted");
        http_resp_json(resp, 200, ok_json);
        outbox_wake(app->ob, n);
    }
}

#define LABEL_BACKFILL_MAX 256

typedef struct backfill_ctx {
    crcr_app *app;
    int64_t pr_number;
    const char *head_sha;
    store_new_job jobs[2 * LABEL_BACKFILL_MAX]; /* the check runs, then the on-call comments */
    buf_t bodies[LABEL_BACKFILL_MAX];
    buf_t keys[LABEL_BACKFILL_MAX]; /* ordering keys, shared with the callbacks' check runs */
    size_t n;
    buf_t names; /* JSON array items of "repo/job" */
    const allowlist *al;
    store_new_job oncall_jobs[LABEL_BACKFILL_MAX]; /* comments a completed failure causes */
    buf_t oncall_bodies[LABEL_BACKFILL_MAX];
    buf_t oncall_keys[LABEL_BACKFILL_MAX];
    size_t n_oncall;
} backfill_ctx;

/* A back-filled check run that completed with a failure pings the on-calls, as one created by
 * its callback would have (run_effects_oncall_job). */
static void backfill_oncall(backfill_ctx *c, const checks_run *r)
{
    if (c->n_oncall >= LABEL_BACKFILL_MAX)
        return;
    buf_t *b = &c->oncall_bodies[c->n_oncall];
    buf_t *k = &c->oncall_keys[c->n_oncall];
    buf_init(b, ONCALL_ROW_MAX);
    buf_init(k, ONCALL_KEY_MAX);
    if (run_effects_oncall_job(&c->app->cfg, c->al, r, b, k, &c->oncall_jobs[c->n_oncall])) {
        c->n_oncall++;
        return;
    }
    buf_free(b);
    buf_free(k);
}

static void backfill_row(void *vctx, const store_run_row *row)
{
    backfill_ctx *c = vctx;
    if (c->n >= LABEL_BACKFILL_MAX || !row->state ||
        (run_status_parse(row->state) != RUN_STATUS_IN_PROGRESS &&
         run_status_parse(row->state) != RUN_STATUS_COMPLETED))
        return;
    checks_run r = {
        .repo = row->repo,
        .workflow_name = row->workflow_name,
        .job_name = row->job_name,
        .head_sha = c->head_sha,
        .status = row->state,
        .conclusion = row->conclusion,
        .run_id = row->run_id,
        .pr_number = c->pr_number,
        .web_url = config_web_url(&c->app->cfg),
    };
    buf_t *b = &c->bodies[c->n];
    buf_t *k = &c->keys[c->n];
    buf_init(b, RUN_EFFECTS_CHECK_BODY_MAX);
    buf_init(k, RUN_EFFECTS_KEY_MAX);
    if (run_effects_check_job(&c->app->cfg, &r, b, k, &c->jobs[c->n]) != CRCR_OK) {
        buf_free(b);
        buf_free(k);
        return;
    }
    char name[CRCR_REPO_NAME_MAX + CRCR_JOB_NAME_MAX + 2];
    snprintf(name, sizeof(name), "%s/%s", row->repo,
             row->job_name && *row->job_name ? row->job_name : row->workflow_name);
    if (c->names.len > 1)
        buf_putc(&c->names, ',');
    jv_quote(&c->names, name, strlen(name));
    c->n++;
    backfill_oncall(c, &r);
}

/* pull_request labeled ciflow/crcr/<device>: mark the head sha wanted for the device's repos and
 * back-fill check runs for jobs they already reported (upstream §2.3.4, §1.7 scenarios 2-3). */
static void handle_label(crcr_app *app, const http_request *req, http_response *resp,
                         const char *event, const char *delivery, const jv *doc, const char *device)
{
    allowlist *al = allowlist_source_get(app->allow);
    const char *repos[64];
    size_t n = al ? allowlist_device_repos(al, device, repos, 64) : 0;
    if (n > 64)
        n = 64;
    if (n == 0) {
        allowlist_free(al);
        http_resp_json(resp, 200, "{\"ok\":true,\"created_check_runs\":[]}");
        return;
    }
    backfill_ctx *c = calloc(1, sizeof(*c));
    int64_t pr = 0;
    const char *sha = jv_path_str(doc, "pull_request.head.sha");
    if (!c || !jv_int(jv_path(doc, "pull_request.number"), &pr) || !sha || !*sha ||
        strlen(sha) >= CRCR_SHA_MAX) {
        free(c);
        allowlist_free(al);
        ignored(app, resp, "missing pr context");
        return;
    }
    c->app = app;
    c->al = al;
    c->pr_number = pr;
    c->head_sha = sha;
    buf_init(&c->names, 64 * 1024);
    buf_putc(&c->names, '[');
    int64_t now = clock_now_ms();
    crcr_err e = CRCR_OK;
    for (size_t i = 0; i < n && !e; i++) {
        e = store_wanted_set(app->st, sha, repos[i], now);
        if (!e)
            e = store_runs_for_sha(app->st, sha, repos[i], backfill_row, c);
    }
    buf_putc(&c->names, ']');
    if (e) {
        reject(app, resp, 503, "store unavailable, please redeliver", delivery);
    } else {
        buf_t ok;
        buf_init(&ok, c->names.len + 64);
        buf_printf(&ok, "{\"ok\":true,\"created_check_runs\":%s}", buf_cstr(&c->names));
        LOG_INFO("webhook.label", "delivery", delivery, "device", device, NULL);
        memcpy(&c->jobs[c->n], c->oncall_jobs, c->n_oncall * sizeof(c->oncall_jobs[0]));
        persist_and_answer(app, req, resp, event, delivery, doc, c->jobs, c->n + c->n_oncall,
                           buf_cstr(&ok));
        buf_free(&ok);
    }
    for (size_t i = 0; i < c->n; i++) {
        buf_free(&c->bodies[i]);
        buf_free(&c->keys[i]);
    }
    for (size_t i = 0; i < c->n_oncall; i++) {
        buf_free(&c->oncall_bodies[i]);
        buf_free(&c->oncall_keys[i]);
    }
    buf_free(&c->names);
    free(c);
    allowlist_free(al);
}

/* check_run rerequested on a crcr check run: re-run the downstream run's failed jobs (L3+). */
static void handle_check_run_rerun(crcr_app *app, const http_request *req, http_response *resp,
                                   const char *event, const char *delivery, const jv *doc,
                                   const webhook_route *r)
{
    const char *repo = r->repo;
    int64_t run_id = r->run_id;
    allowlist *al = allowlist_source_get(app->allow);
    const allowlist_entry *ent = allowlist_find(al, repo);
    if (!ent || ent->level < CRCR_LEVEL_L3) {
        allowlist_free(al);
        ignored(app, resp, "downstream repo not L3+");
        return;
    }
    char canonical[CRCR_REPO_NAME_MAX];
    snprintf(canonical, sizeof(canonical), "%s", ent->repo);
    allowlist_free(al);
    char body[64];
    snprintf(body, sizeof(body), "{\"run_id\":%lld,\"failed_only\":true}", (long long)run_id);
    store_new_job job = {.kind = ob_kind_name(OB_KIND_RERUN),
                         .target = canonical,
                         .body = body,
                         .body_len = strlen(body),
                         .due_at = clock_now_ms()};
    buf_t ok;
    buf_init(&ok, 512);
    buf_puts(&ok, "{\"ok\":true,\"rerun\":[");
    jv_quote(&ok, canonical, strlen(canonical));
    buf_puts(&ok, "]}");
    persist_and_answer(app, req, resp, event, delivery, doc, &job, 1, buf_cstr(&ok));
    buf_free(&ok);
}

/* check_suite rerequested: list the suite's check runs later, in the outbox, and re-run each
 * distinct downstream run in full. */
static void handle_suite_rerun(crcr_app *app, const http_request *req, http_response *resp,
                               const char *event, const char *delivery, const jv *doc,
                               const webhook_route *r)
{
    int64_t suite = r->suite_id;
    char body[64];
    snprintf(body, sizeof(body), "{\"check_suite_id\":%lld}", (long long)suite);
    store_new_job job = {.kind = ob_kind_name(OB_KIND_RERUN_SUITE),
                         .target = app->cfg.upstream_repo,
                         .body = body,
                         .body_len = strlen(body),
                         .due_at = clock_now_ms()};
    char ok[96];
    snprintf(ok, sizeof(ok), "{\"ok\":true,\"rerun_suite\":%lld}", (long long)suite);
    persist_and_answer(app, req, resp, event, delivery, doc, &job, 1, ok);
}

/* Every path of the body the handlers read (webhook_classify, accept_dispatch, handle_label,
 * persist_and_answer, the rerun handlers); the body is only parsed for these. Add a path here
 * before reading it anywhere from `doc`. */
const char *const webhook_json_paths[] = {
    "action",
    "repository.full_name",
    "pull_request.number",
    "number",
    "pull_request.head.sha",
    "after",
    "ref",
    "label.name",
    "check_run.external_id",
    "check_run.name",
    "check_suite.id",
    "commits",
    "head_commit",
    "pull_request.body",
    "pull_request.state",
    "changes.body.from",
};
const size_t webhook_json_paths_n = sizeof(webhook_json_paths) / sizeof(webhook_json_paths[0]);

bool webhook_guard(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    const char *event = http_req_header(req, "X-GitHub-Event");
    atomic_store(&app->last_webhook_at, clock_now_ms());
    metrics_webhook_begin(event);

    const char *sig = http_req_header(req, "X-Hub-Signature-256");
    if (event && event_installation(event) && sig && sig_header_valid(sig))
        return false; /* read and verified, then answered as ignored (installation_changed) */
    if (!event || strlen(event) >= CRCR_EVENT_NAME_MAX || !event_supported(event)) {
        ignored(app, resp, NULL);
        return true;
    }
    if (!sig || !*sig) {
        reject(app, resp, 400, "No signature", NULL);
        return true;
    }
    if (!sig_header_valid(sig)) { /* can match no body: the body is not worth reading */
        reject(app, resp, 401, "Bad signature", NULL);
        return true;
    }
    return false;
}

static void *body_auth_start(void *ctx, const http_request *req)
{
    crcr_app *app = ctx;
    const char *secrets[] = {app->cfg.app_secret, app->cfg.app_secret_previous};
    return sig_stream_new(http_req_header(req, "X-Hub-Signature-256"), secrets,
                          sizeof(secrets) / sizeof(secrets[0]));
}

static void body_auth_update(void *state, const void *data, size_t len)
{
    sig_stream_update(state, data, len);
}

static bool body_auth_finish(void *state)
{
    bool ok = sig_stream_verify(state);
    sig_stream_free(state);
    return ok;
}

const http_body_auth webhook_body_auth = {body_auth_start, body_auth_update, body_auth_finish};

/* A verified installation event: the installation's ids (and those of the repositories it
 * names) are forgotten; the answer is the ignored one all the same. */
static void installation_changed(crcr_app *app, const http_request *req, const char *event,
                                 const char *delivery)
{
    jv *doc = req->body_len ? jv_parse(req->body, req->body_len, NULL, 0) : NULL;
    int64_t id = 0;
    if (!jv_int(jv_path(doc, "installation.id"), &id) || id <= 0) {
        jv_free(doc);
        return;
    }
    static const char *const lists[] = {"repositories", "repositories_added",
                                        "repositories_removed"};
    const char *repos[WEBHOOK_INSTALLATION_REPOS_MAX];
    size_t n = 0;
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        const jv *arr = jv_get(doc, lists[l]);
        for (size_t i = 0; i < jv_arr_len(arr) && n < WEBHOOK_INSTALLATION_REPOS_MAX; i++) {
            const char *name = jv_path_str(jv_arr_at(arr, i), "full_name");
            if (name && ids_full_name_valid(name))
                repos[n++] = name;
        }
    }
    size_t dropped = outbox_installation_changed(app->ob, id, repos, n);
    char ids[24], count[24];
    snprintf(ids, sizeof(ids), "%lld", (long long)id);
    snprintf(count, sizeof(count), "%zu", dropped);
    LOG_INFO("webhook.installation_changed", "delivery", delivery, "event", event, "action",
             jv_path_str(doc, "action"), "installation", ids, "forgotten", count, NULL);
    jv_free(doc);
}

/* What webhook_front leaves for webhook_back. */
typedef struct webhook_carry {
    bool installation; /* an installation event: installation_changed when `authentic` */
    bool authentic;
    jv *doc;         /* otherwise the parsed body (owned) */
    webhook_route r; /* and its route */
} webhook_carry;

/* The rest of a webhook's handling, from its route on (it may wait on the store or GitHub). */
static void webhook_back(crcr_app *app, const http_request *req, http_response *resp,
                         const webhook_carry *c)
{
    const char *event = http_req_header(req, "X-GitHub-Event");
    const char *delivery = http_req_header(req, "X-GitHub-Delivery");
    if (c->installation) {
        if (c->authentic)
            installation_changed(app, req, event, delivery);
        ignored(app, resp, NULL);
        return;
    }
    jv *doc = c->doc;
    const webhook_route r = c->r;
    if (strcmp(event, "push") == 0)
        push_refresh(app, delivery, doc);
    if (r.kind == WEBHOOK_IGNORE) {
        LOG_DEBUG("webhook.ignored", "delivery", delivery, "event", event, "action", r.action,
                  "reason", r.reason, NULL);
        ignored(app, resp, r.reason);
        return;
    }
    if (!delivery || !*delivery) {
        reject(app, resp, 400, "Missing X-GitHub-Delivery", NULL);
        return;
    }
    switch (r.kind) {
    case WEBHOOK_LABEL:
        handle_label(app, req, resp, event, delivery, doc, r.device);
        break;
    case WEBHOOK_RERUN_RUN:
        handle_check_run_rerun(app, req, resp, event, delivery, doc, &r);
        break;
    case WEBHOOK_RERUN_SUITE:
        handle_suite_rerun(app, req, resp, event, delivery, doc, &r);
        break;
    case WEBHOOK_EDIT:
        handle_edit(app, req, resp, event, delivery, doc);
        break;
    case WEBHOOK_PAIR_PUSH:
        handle_pair_push(app, resp, delivery, doc);
        break;
    default:
        handle_dispatch(app, req, resp, event, delivery, doc, r.action);
        break;
    }
}

/* The part of a webhook's handling that never waits: the signature's verdict, the parse and the
 * route. Answers (true) what ends there - a bad signature or delivery id, a ping, a body that is
 * not JSON, an ignored event, a missing delivery id - and otherwise fills *c (the caller frees
 * c->doc) for webhook_back. A push and an installation event always go on to webhook_back
 * (push_refresh, installation_changed). */
static bool webhook_front(crcr_app *app, const http_request *req, http_response *resp,
                          webhook_carry *c)
{
    /* webhook_guard() passed: a supported event with a signature header. */
    const char *event = http_req_header(req, "X-GitHub-Event");
    const char *delivery = http_req_header(req, "X-GitHub-Delivery");
    const char *sig = http_req_header(req, "X-Hub-Signature-256");
    /* The thread's webhook event again: this thread may have run other connections' guards
     * since this request's. */
    metrics_webhook_begin(event);
    if (!event || !sig) { /* cannot happen behind the guard; never crash on it */
        reject(app, resp, 400, "No signature", NULL);
        return true;
    }
    bool ok = req->body_auth == HTTP_BODY_AUTHENTIC;
    if (req->body_auth == HTTP_BODY_UNCHECKED) { /* no streaming check ran: verify here */
        ok = app->cfg.app_secret && sig_verify(sig, req->body, req->body_len, app->cfg.app_secret);
        if (!ok && app->cfg.app_secret_previous)
            ok = sig_verify(sig, req->body, req->body_len, app->cfg.app_secret_previous);
    }
    if (event_installation(event)) {
        c->installation = true;
        c->authentic = ok && (!delivery || ids_delivery_valid(delivery));
        return false;
    }
    if (!ok) {
        reject(app, resp, 401, "Bad signature", NULL);
        return true;
    }
    if (delivery && !ids_delivery_valid(delivery)) {
        reject(app, resp, 400, "Invalid X-GitHub-Delivery", NULL);
        return true;
    }

    if (strcmp(event, "ping") == 0) {
        LOG_INFO("webhook.ping", "delivery", delivery, NULL);
        metrics_webhook_result("accepted");
        http_resp_json(resp, 200, "{\"ok\":true,\"pong\":true}");
        return true;
    }

    char perr[160] = "";
    /* Validated in full (duplicate keys, UTF-8, limits) as jv_parse() would, but only the
     * webhook_json_paths are built: the body itself is stored and forwarded verbatim. */
    jv *doc = req->body_len ? jv_parse_select(req->body, req->body_len, webhook_json_paths,
                                              webhook_json_paths_n, perr, sizeof(perr))
                            : jv_new_obj();
    if (!doc || !jv_is_obj(doc)) {
        LOG_DEBUG("webhook.invalid_json", "delivery", delivery, "error", perr, NULL);
        jv_free(doc);
        reject(app, resp, 400, "Invalid JSON body", delivery);
        return true;
    }
    c->doc = doc;
    webhook_classify(event, doc, app->cfg.upstream_repo, &c->r);
    if (strcmp(event, "push") != 0 &&
        (c->r.kind == WEBHOOK_IGNORE || !delivery || !*delivery)) { /* nothing to wait for */
        webhook_back(app, req, resp, c);
        jv_free(doc);
        c->doc = NULL;
        return true;
    }
    return false;
}

bool webhook_quick(void *ctx, const http_request *req, http_response *resp, void **carry)
{
    webhook_carry *c = calloc(1, sizeof(*c));
    if (!c)
        return false; /* webhook_handle does it all */
    if (webhook_front(ctx, req, resp, c)) {
        free(c);
        return true;
    }
    *carry = c;
    return false;
}

void webhook_carry_free(void *carry)
{
    webhook_carry *c = carry;
    if (c)
        jv_free(c->doc);
    free(c);
}

void webhook_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    webhook_carry own = {0};
    const webhook_carry *c = req->carry;
    if (c) {
        metrics_webhook_begin(http_req_header(req, "X-GitHub-Event")); /* this thread's */
    } else {
        if (webhook_front(app, req, resp, &own))
            return;
        c = &own;
    }
    webhook_back(app, req, resp, c);
    jv_free(own.doc);
}
