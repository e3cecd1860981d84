/* sweeper.c - zombie runs and retention; see sweeper.h. */
#include "sweeper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "clock.h"
#include "depends_on.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "run_effects.h"
#include "vocab.h"

#define SWEEP_BATCH 100
#define SWEEP_LEASE_MS (5 * 60 * 1000)

/* A zombie copied out of the store (the store's row is only valid inside its callback). */
typedef struct zombie {
    char delivery_id[CRCR_DELIVERY_ID_MAX];
    char repo[CRCR_REPO_NAME_MAX];
    char job_name[CRCR_JOB_NAME_MAX + 1];
    char workflow_name[257];
    char head_sha[CRCR_SHA_MAX];
    char event_type[32];
    char run_id[CRCR_RUN_ID_MAX];
    int64_t run_attempt, pr_number, started_at;
    int level;
    char *payload; /* owned: the stored in_progress callback body */
    size_t payload_len;
} zombie;

typedef struct zombie_list {
    zombie items[SWEEP_BATCH];
    size_t n;
} zombie_list;

static void copy_str(char *dst, size_t dsz, const char *src)
{
    snprintf(dst, dsz, "%s", src ? src : "");
}

static void collect(void *ctx, const store_run_row *r)
{
    zombie_list *l = ctx;
    if (l->n >= SWEEP_BATCH)
        return;
    zombie *z = &l->items[l->n];
    memset(z, 0, sizeof(*z));
    copy_str(z->delivery_id, sizeof(z->delivery_id), r->delivery_id);
    copy_str(z->repo, sizeof(z->repo), r->repo);
    copy_str(z->job_name, sizeof(z->job_name), r->job_name);
    copy_str(z->workflow_name, sizeof(z->workflow_name), r->workflow_name);
    copy_str(z->head_sha, sizeof(z->head_sha), r->head_sha);
    copy_str(z->event_type, sizeof(z->event_type), r->event_type);
    copy_str(z->run_id, sizeof(z->run_id), r->run_id);
    z->run_attempt = r->run_attempt;
    z->pr_number = r->pr_number;
    z->started_at = r->started_at;
    z->level = r->level;
    if (r->payload && r->payload_len) {
        z->payload = malloc(r->payload_len);
        if (z->payload) {
            memcpy(z->payload, r->payload, r->payload_len);
            z->payload_len = r->payload_len;
        }
    }
    l->n++;
}

typedef struct sweep_effects {
    run_effects_env env;
    zombie *z;
    crcr_level level;
    bool check_run;
    depends_on_pair pair; /* the dispatch's Depends-On pair, when it had one (§3.13) */
    char pair_label[CRCR_REPO_NAME_MAX + 48];
    const store_run_key *key;
    run_effect_bodies bodies;
    buf_t timed_out_payload;
} sweep_effects;

/* The stored in_progress callback with workflow.status/conclusion/completed_at set as a timeout. */
static void timed_out_payload(const zombie *z, int64_t now, buf_t *out)
{
    jv *doc = z->payload ? jv_parse(z->payload, z->payload_len, NULL, 0) : NULL;
    if (!jv_is_obj(doc)) {
        jv_free(doc);
        buf_puts(out, "{}");
        return;
    }
    jv *wf = jv_get(doc, "workflow");
    if (jv_is_obj(wf)) {
        char ts[32];
        clock_iso8601(now, ts, sizeof(ts));
        jv_set(wf, "status", jv_new_str(run_status_name(RUN_STATUS_COMPLETED)));
        jv_set(wf, "conclusion", jv_new_str(conclusion_name(CONCLUSION_TIMED_OUT)));
        jv_set(wf, "completed_at", jv_new_str(ts));
    }
    if (jv_dump(doc, out) != CRCR_OK) {
        buf_reset(out);
        buf_puts(out, "{}");
    }
    jv_free(doc);
}

static crcr_err sweep_effects_fn(void *vctx, const store_run_result *res, store_new_job *jobs,
                                 size_t max, size_t *n)
{
    sweep_effects *c = vctx;
    *n = 0;
    if (res->ended[0]) /* ended by a newer dispatch meanwhile: nothing to time out (§3.12) */
        return CRCR_OK;
    checks_run r = {
        .repo = c->z->repo,
        .workflow_name = c->z->workflow_name,
        .job_name = c->z->job_name,
        .head_sha = c->z->head_sha,
        .status = run_status_name(RUN_STATUS_COMPLETED),
        .conclusion = conclusion_name(CONCLUSION_TIMED_OUT),
        .run_id = c->z->run_id,
        .pr_number = c->z->pr_number,
        .web_url = config_web_url(c->env.cfg),
        .pair = c->pair_label[0] ? c->pair_label : NULL,
        .pair_ref = c->pair.resolved ? c->pair.head_ref : NULL,
    };
    /* As upstream's sweeper: no queue time, execution time up to now. */
    return run_effects_build(&c->env, c->check_run ? &r : NULL, c->key, c->level, -1, res->exec_ms,
                             c->timed_out_payload.data, c->timed_out_payload.len, &c->bodies, jobs,
                             max, n);
}

/* Whether a timed-out zombie gets a check run: it was L3+ when it started, is L3+ now, has a
 * head sha, and is L4 or was labelled (the wanted mark). */
static bool zombie_wants_check_run(const run_effects_env *env, const allowlist *al, const zombie *z)
{
    if (z->level < CRCR_LEVEL_L3 || !z->head_sha[0])
        return false;
    crcr_level cur = allowlist_level(al, z->repo);
    if (cur < CRCR_LEVEL_L3)
        return false;
    /* L4 always; L3 when the dispatched webhook carried the device's label, or the sha is marked
     * wanted: the relay's records decide, not the echoed callback body. */
    return run_effects_check_wanted(env, al, z->repo, cur, z->delivery_id, z->head_sha, NULL);
}

void sweeper_run(const sweeper_deps *d, const char *owner, int64_t now, sweeper_result *res)
{
    memset(res, 0, sizeof(*res));
    bool held = false;
    if (store_lease(d->st, "sweeper", owner, now, SWEEP_LEASE_MS, &held) != CRCR_OK || !held)
        return;
    res->leader = true;
    zombie_list *l = calloc(1, sizeof(*l));
    if (!l)
        return;
    allowlist *al = allowlist_source_get(d->allow);
    store_zombies(d->st, now - d->cfg->zombie_timeout_s * 1000, SWEEP_BATCH, collect, l);
    for (size_t i = 0; i < l->n; i++) {
        zombie *z = &l->items[i];
        sweep_effects c = {
            .env = {d->st, d->cfg, al}, .z = z, .level = allowlist_level(al, z->repo)};
        if (c.level == CRCR_LEVEL_NONE)
            c.level = (crcr_level)z->level;
        c.check_run = zombie_wants_check_run(&c.env, al, z);
        if (c.check_run) { /* its check run names the pair it tested, as the others did */
            store_dispatch rec;
            buf_init(&rec.payload, 0);
            if (store_dispatch_get(d->st, z->delivery_id, z->repo, false, &rec) == CRCR_OK &&
                depends_on_record_parse(rec.pair, strlen(rec.pair), &c.pair) && c.pair.resolved)
                depends_on_label(&c.pair, c.pair_label, sizeof(c.pair_label));
            buf_free(&rec.payload);
        }
        run_effect_bodies_init(&c.bodies, z->payload_len + 4096);
        buf_init(&c.timed_out_payload, z->payload_len + 4096);
        timed_out_payload(z, now, &c.timed_out_payload);
        store_run_update u = {
            .key = {.delivery_id = z->delivery_id,
                    .repo = z->repo,
                    .run_id = z->run_id,
                    .run_attempt = z->run_attempt,
                    .workflow_name = z->workflow_name,
                    .job_name = z->job_name},
            .status = run_status_name(RUN_STATUS_COMPLETED),
            .conclusion = conclusion_name(CONCLUSION_TIMED_OUT),
            .event_type = z->event_type,
            .level = z->level,
            .pr_number = z->pr_number,
            .head_sha = z->head_sha,
            .workflow_name = z->workflow_name,
            .test_passed = -1,
            .test_failed = -1,
            .test_skipped = -1,
            .payload = c.timed_out_payload.data,
            .payload_len = c.timed_out_payload.len,
            .now = now,
            .single_shot = true, /* the dispatch record may be gone; the run row is proof */
            .only_open = true,   /* a run a supersession ended meanwhile stays as it is */
        };
        c.key = &u.key;
        store_run_result rr;
        char why[128] = "";
        crcr_err e = store_run_apply(d->st, &u, sweep_effects_fn, &c, &rr, why, sizeof(why));
        const char *run_s = z->run_id;
        if (e == CRCR_OK || e == CRCR_E_STATE) {
            res->cleaned += e == CRCR_OK && !rr.duplicate;
            LOG_INFO("sweeper.timed_out", "delivery", z->delivery_id, "repo", z->repo, "run", run_s,
                     "job", z->job_name, ob_kind_name(OB_KIND_CHECK_RUN),
                     c.check_run ? ob_state_name(OB_STATE_QUEUED) : NULL, NULL);
        } else {
            res->errors++;
            LOG_WARN("sweeper.error", "delivery", z->delivery_id, "repo", z->repo, "run", run_s,
                     "error", crcr_strerror(e), NULL);
        }
        run_effect_bodies_free(&c.bodies);
        buf_free(&c.timed_out_payload);
        free(z->payload);
    }
    allowlist_free(al);
    free(l);
    store_retention(d->st, now - d->cfg->retention_s * 1000, &res->deleted);
    if (res->cleaned || res->deleted) {
        char a[16], b[16];
        snprintf(a, sizeof(a), "%d", res->cleaned);
        snprintf(b, sizeof(b), "%d", res->deleted);
        LOG_INFO("sweeper.done", conclusion_name(CONCLUSION_TIMED_OUT), a, "deleted", b, NULL);
        if (d->ob)
            outbox_notify(d->ob);
    }
}
