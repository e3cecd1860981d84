/* run_effects.c - the side effects of a run transition; see run_effects.h. */
#include "run_effects.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "crcr_limits.h"
#include "oncall.h"
#include "vocab.h"

/* The labels of a stored webhook (only pull_request.labels is built). */
static const char *const LABEL_PATHS[] = {"pull_request.labels"};

/* Whether the dispatched webhook `payload` carried a label of `repo`'s device. */
static bool payload_labelled(const allowlist *al, const char *repo, const buf_t *payload)
{
    if (!payload->len)
        return false;
    jv *doc = jv_parse_select(payload->data, payload->len, LABEL_PATHS, 1, NULL, 0);
    const jv *labels = jv_path(doc, "pull_request.labels");
    const char *names[CRCR_LABELS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < jv_arr_len(labels) && n < CRCR_LABELS_MAX; i++) {
        const char *name = jv_path_str(jv_arr_at(labels, i), "name");
        if (name)
            names[n++] = name;
    }
    bool labelled = allowlist_needs_check_run(al, repo, names, n);
    jv_free(doc);
    return labelled;
}

bool run_effects_check_wanted(const run_effects_env *env, const allowlist *al, const char *repo,
                              crcr_level level, const char *delivery_id, const char *head_sha,
                              const store_dispatch *dispatch)
{
    if (level < CRCR_LEVEL_L3 || !head_sha || !*head_sha)
        return false;
    if (level == CRCR_LEVEL_L4)
        return true;
    /* The PR carried the device's label in the webhook the relay dispatched. */
    bool labelled = false;
    if (dispatch) {
        labelled = payload_labelled(al, repo, &dispatch->payload);
    } else {
        store_dispatch d;
        buf_init(&d.payload, env->cfg->max_body);
        if (store_dispatch_get(env->st, delivery_id, repo, true, &d) == CRCR_OK)
            labelled = payload_labelled(al, repo, &d.payload);
        buf_free(&d.payload);
    }
    if (labelled)
        return true;
    /* Reopened PRs carry stale labels: the label event's mark decides (upstream fallback). */
    int64_t since = clock_now_ms() - env->cfg->status_ttl_s * 1000;
    return store_wanted_get(env->st, head_sha, repo, since) == CRCR_OK;
}

static crcr_err metric_json(buf_t *b, int64_t ms)
{
    if (ms < 0)
        return buf_puts(b, "null");
    return buf_printf(b, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

/* The upstream HUD wire format: {"trusted":{...},"untrusted":{"callback_payload":<body>}}. */
crcr_err run_effects_hud_body(buf_t *out, const char *repo, crcr_level level, int64_t queue_ms,
                              int64_t exec_ms, const char *callback_json, size_t callback_len)
{
    /* Every append counts: a body cut in the middle must not pass as whole. */
    const char *ln = crcr_level_name(level);
    crcr_err err = buf_puts(out, "{\"trusted\":{\"ci_metrics\":{\"queue_time\":");
    if (!err)
        err = metric_json(out, queue_ms);
    if (!err)
        err = buf_puts(out, ",\"execution_time\":");
    if (!err)
        err = metric_json(out, exec_ms);
    if (!err)
        err = buf_puts(out, "},\"verified_repo\":");
    if (!err)
        err = jv_quote(out, repo, strlen(repo));
    if (!err)
        err = buf_puts(out, ",\"downstream_repo_level\":");
    if (!err)
        err = jv_quote(out, ln, strlen(ln));
    if (!err)
        err = buf_puts(out, "},\"untrusted\":{\"callback_payload\":");
    if (!err)
        err = buf_append(out, callback_json, callback_len);
    if (!err)
        err = buf_puts(out, "}}");
    return err;
}

void run_effect_bodies_init(run_effect_bodies *b, size_t callback_len)
{
    buf_init(&b->check, RUN_EFFECTS_CHECK_BODY_MAX);
    buf_init(&b->check_key, RUN_EFFECTS_KEY_MAX);
    buf_init(&b->hud, callback_len + 8192);
    buf_init(&b->hud_key, RUN_EFFECTS_KEY_MAX);
    buf_init(&b->oncall, ONCALL_ROW_MAX);
    buf_init(&b->oncall_key, ONCALL_KEY_MAX);
}

void run_effect_bodies_free(run_effect_bodies *b)
{
    buf_free(&b->check);
    buf_free(&b->check_key);
    buf_free(&b->hud);
    buf_free(&b->hud_key);
    buf_free(&b->oncall);
    buf_free(&b->oncall_key);
}

/* A row of `kind` on the upstream repository, due now, with its body and ordering key (borrowed
 * from `body` and `key`). */
static store_new_job upstream_row(const crcr_config *cfg, crcr_ob_kind kind, const buf_t *body,
                                  const buf_t *key)
{
    return (store_new_job){.kind = ob_kind_name(kind),
                           .target = cfg->upstream_repo,
                           .seq_key = key->data,
                           .body = body->data,
                           .body_len = body->len,
                           .due_at = clock_now_ms()};
}

crcr_err run_effects_check_job(const crcr_config *cfg, const checks_run *check, buf_t *body,
                               buf_t *key, store_new_job *job)
{
    buf_reset(body);
    buf_reset(key);
    crcr_err err = checks_body(check, body);
    if (!err)
        err = checks_seq_key(check, key);
    if (!err)
        *job = upstream_row(cfg, OB_KIND_CHECK_RUN, body, key);
    return err;
}

bool run_effects_oncall_job(const crcr_config *cfg, const allowlist *al, const checks_run *check,
                            buf_t *body, buf_t *key, store_new_job *job)
{
    if (!cfg->oncall_comments || !al || !check || check->pr_number <= 0 ||
        run_status_parse(check->status) != RUN_STATUS_COMPLETED ||
        !oncall_alerting(check->conclusion))
        return false;
    const allowlist_entry *entry = allowlist_find(al, check->repo);
    if (!entry || entry->n_oncalls == 0)
        return false;
    buf_reset(body);
    buf_reset(key);
    buf_t name, details, text;
    buf_init(&name, 4 * CRCR_JOB_NAME_MAX + CRCR_REPO_NAME_MAX);
    buf_init(&details, CHECKS_DETAILS_URL_MAX);
    buf_init(&text, ONCALL_COMMENT_MAX);
    crcr_err err = checks_name(check, &name);
    if (!err)
        err = checks_details_url(check, &details);
    oncall_failure f = {
        .repo = check->repo,
        .check_name = buf_cstr(&name),
        .details_url = buf_cstr(&details),
        .head_sha = check->head_sha,
        .conclusion = check->conclusion,
        .oncalls = entry->oncalls,
        .n_oncalls = entry->n_oncalls,
    };
    if (!err)
        err = oncall_comment(&f, &text); /* CRCR_E_NOT_FOUND: no on-call is a valid handle */
    if (!err)
        err = oncall_row_body(check->pr_number, check->repo, buf_cstr(&text), text.len, body);
    if (!err)
        err = oncall_seq_key(check->pr_number, check->repo, key);
    if (!err)
        *job = upstream_row(cfg, OB_KIND_COMMENT, body, key);
    buf_free(&name);
    buf_free(&details);
    buf_free(&text);
    return err == CRCR_OK;
}

crcr_err run_effects_build(const run_effects_env *env, const checks_run *check,
                           const store_run_key *key, crcr_level level, int64_t queue_ms,
                           int64_t exec_ms, const char *callback_json, size_t callback_len,
                           run_effect_bodies *bodies, store_new_job *jobs, size_t max, size_t *n)
{
    *n = 0;
    int64_t now = clock_now_ms();
    if (check && *n < max) {
        crcr_err err =
            run_effects_check_job(env->cfg, check, &bodies->check, &bodies->check_key, &jobs[*n]);
        if (err)
            return err;
        (*n)++;
        if (*n < max && run_effects_oncall_job(env->cfg, env->al, check, &bodies->oncall,
                                               &bodies->oncall_key, &jobs[*n]))
            (*n)++;
    }
    if (env->cfg->hud_api_url && *n < max) {
        buf_reset(&bodies->hud); /* built afresh: a store may run its effects again */
        buf_reset(&bodies->hud_key);
        crcr_err err = run_effects_hud_body(&bodies->hud, key->repo, level, queue_ms, exec_ms,
                                            callback_json, callback_len);
        if (!err)
            err = buf_printf(
                &bodies->hud_key, "hud:%s:%s:%s:%lld:%s:%s", key->repo, key->delivery_id,
                key->run_id ? key->run_id : "", (long long)key->run_attempt,
                key->workflow_name ? key->workflow_name : "", key->job_name ? key->job_name : "");
        if (err)
            return err;
        jobs[(*n)++] = (store_new_job){.kind = ob_kind_name(OB_KIND_HUD_FORWARD),
                                       .target = "hud",
                                       .seq_key = bodies->hud_key.data,
                                       .body = bodies->hud.data,
                                       .body_len = bodies->hud.len,
                                       .due_at = now};
    }
    return CRCR_OK;
}
