/* store.c - picks the backend from the URI and forwards every call to it; see store.h. Also the
 * pieces both backends share when reading rows back (store_impl.h). */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "payload_pack.h"
#include "run_state.h"
#include "store_impl.h"
#include "vocab.h"

/* Longest working directory named in a "no store" message. */
#define STORE_CWD_MAX 1024

crcr_err store_open(const char *uri, store **out, char *err, size_t errsz)
{
    return store_open_pool(uri, 0, out, err, errsz);
}

crcr_err store_open_pool(const char *uri, long pool, store **out, char *err, size_t errsz)
{
    *out = NULL;
    if (strncmp(uri, "sqlite:", 7) == 0)
        return store_sqlite_open(uri + 7, out, err, errsz);
    if (strncmp(uri, "postgresql://", 13) == 0 || strncmp(uri, "postgres://", 11) == 0)
        return store_pg_open(uri, pool, out, err, errsz);
    snprintf(err, errsz, "CRCR_STORE: unknown scheme (expected sqlite:PATH or postgresql://...)");
    return CRCR_E_CONFIG;
}

bool store_missing(const char *uri, char *err, size_t errsz)
{
    if (strncmp(uri, "sqlite:", 7) != 0)
        return false;
    const char *path = uri + 7;
    struct stat sb;
    if (!*path || strcmp(path, ":memory:") == 0 || stat(path, &sb) == 0)
        return false;
    char cwd[STORE_CWD_MAX] = "";
    bool relative =
        path[0] != '/' && strncmp(path, "file:", 5) != 0 && getcwd(cwd, sizeof(cwd)) != NULL;
    snprintf(err, errsz,
             "no store at %s%s%s%s (CRCR_STORE=%s): this command never creates one; name the "
             "relay's configuration with --config FILE (the package's, /etc/crcr/crcr.env, is "
             "read by default when it exists) or set CRCR_STORE",
             path, relative ? " (in " : "", relative ? cwd : "", relative ? ")" : "", uri);
    return true;
}

crcr_err store_open_existing(const char *uri, long pool, store **out, char *err, size_t errsz)
{
    *out = NULL;
    if (store_missing(uri, err, errsz))
        return CRCR_E_NOT_FOUND;
    return store_open_pool(uri, pool, out, err, errsz);
}

crcr_err store_backup(const char *uri, const char *dest, int *version, char *err, size_t errsz)
{
    *version = 0;
    if (strncmp(uri, "sqlite:", 7) != 0) {
        snprintf(err, errsz, "only a SQLite store can be backed up by crcr");
        return CRCR_E_INVALID;
    }
    return store_sqlite_backup(uri + 7, dest, version, err, errsz);
}

void store_close(store *st)
{
    if (st)
        st->ops->close(st);
}

crcr_err store_recover(store *st)
{
    return st->ops->recover(st);
}

crcr_err store_ping(store *st)
{
    return st->ops->ping(st);
}

/* ---- write faults ---- */

void store_base_init(store *st, const store_ops *ops)
{
    st->ops = ops;
    atomic_init(&st->fault.kind, STORE_FAULT_NONE);
    pthread_mutex_init(&st->fault.mu, NULL);
    st->fault.why[0] = '\0';
    st->fault.since_ms = 0;
}

void store_base_fini(store *st)
{
    pthread_mutex_destroy(&st->fault.mu);
}

static const char *fault_name(store_fault_kind kind)
{
    return kind == STORE_FAULT_DISK_FULL ? "disk full" : "I/O error";
}

void store_fault_note(store *st, store_fault_kind kind, const char *op, const char *detail)
{
    if (kind == STORE_FAULT_NONE)
        return;
    pthread_mutex_lock(&st->fault.mu);
    store_fault_kind was = (store_fault_kind)atomic_load(&st->fault.kind);
    snprintf(st->fault.why, sizeof(st->fault.why), "%s: %s (during %s)", fault_name(kind),
             detail && *detail ? detail : "?", op ? op : "a write");
    if (was == STORE_FAULT_NONE)
        st->fault.since_ms = clock_now_ms();
    atomic_store(&st->fault.kind, kind);
    char why[STORE_FAULT_WHY_MAX];
    memcpy(why, st->fault.why, sizeof(why));
    pthread_mutex_unlock(&st->fault.mu);
    if (was != kind)
        LOG_ERROR("store.write_fault", "reason", why, "action",
                  "webhooks are answered 503 and /readyz fails until a write goes through again "
                  "(tried every second); free space on the store's disk or fix the I/O error",
                  NULL);
}

void store_fault_clear(store *st)
{
    if (atomic_load(&st->fault.kind) == STORE_FAULT_NONE)
        return;
    pthread_mutex_lock(&st->fault.mu);
    store_fault_kind was = (store_fault_kind)atomic_exchange(&st->fault.kind, STORE_FAULT_NONE);
    int64_t since = st->fault.since_ms;
    pthread_mutex_unlock(&st->fault.mu);
    if (was == STORE_FAULT_NONE)
        return;
    char secs[24];
    snprintf(secs, sizeof(secs), "%lld", (long long)((clock_now_ms() - since) / 1000));
    LOG_INFO("store.write_recovered", "after_s", secs, NULL);
}

store_fault_kind store_write_fault(store *st, char *why, size_t whysz, int64_t *since_ms)
{
    if (atomic_load(&st->fault.kind) == STORE_FAULT_NONE)
        return STORE_FAULT_NONE;
    pthread_mutex_lock(&st->fault.mu);
    store_fault_kind kind = (store_fault_kind)atomic_load(&st->fault.kind);
    if (why && whysz)
        snprintf(why, whysz, "%s", st->fault.why);
    if (since_ms)
        *since_ms = st->fault.since_ms;
    pthread_mutex_unlock(&st->fault.mu);
    return kind;
}

crcr_err store_probe_write(store *st)
{
    if (atomic_load(&st->fault.kind) == STORE_FAULT_NONE)
        return CRCR_OK;
    crcr_err e = st->ops->probe ? st->ops->probe(st) : st->ops->ping(st);
    if (!e)
        store_fault_clear(st);
    return e;
}

crcr_err store_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n)
{
    crcr_err e = st->ops->outbox->ingest(st, d, jobs, n, NULL, NULL);
    if (!e) /* a durable write went through */
        store_fault_clear(st);
    return e;
}

crcr_err store_ingest_superseding(store *st, const store_delivery *d, const store_new_job *jobs,
                                  size_t n, store_supersede *sup, store_visible *vis)
{
    if (vis)
        vis->called = false;
    store_supersede_uncount(sup);
    if (sup) {
        if (d->pr_number <= 0 || end_reason_parse(sup->reason) == END_REASON_UNKNOWN)
            sup = NULL;
    }
    crcr_err e = st->ops->outbox->ingest(st, d, jobs, n, sup, vis);
    if (!e) /* a durable write went through */
        store_fault_clear(st);
    return e;
}

crcr_err store_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
                               int64_t now, const store_new_job *job, store_supersede *sup,
                               store_pair_hit *hits, size_t max, size_t *n)
{
    *n = 0;
    store_supersede_uncount(sup);
    char probe[CRCR_DELIVERY_ID_MAX];
    if (!repo || number <= 0 || !base_id ||
        !store_pair_delivery_id(base_id, INT64_MAX, probe, sizeof(probe)) ||
        end_reason_parse(sup->reason) == END_REASON_UNKNOWN ||
        ob_kind_parse(job->kind) != OB_KIND_DISPATCH)
        return CRCR_E_INVALID;
    crcr_err e =
        st->ops->outbox->pair_redispatch(st, repo, number, base_id, now, job, sup, hits, max, n);
    if (!e) /* a durable write went through */
        store_fault_clear(st);
    return e;
}

void store_job_free(store_job *job)
{
    if (!job)
        return;
    free(job->kind);
    free(job->delivery_id);
    free(job->target);
    free(job->event);
    free(job->head_sha);
    buf_free(&job->body);
    buf_free(&job->payload);
    memset(job, 0, sizeof(*job));
}

bool store_new_job_claimed(const store_new_job *j)
{
    return j->claimed_id && j->lease_until > 0 && !j->seq_key && !j->after_seq && !j->done_state;
}

void store_new_jobs_unclaim(const store_new_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (jobs[i].claimed_id)
            *jobs[i].claimed_id = 0;
}

void store_supersede_uncount(store_supersede *sup)
{
    if (sup)
        sup->dispatches = sup->runs = sup->withdrawn = 0;
}

/* The largest row body or payload a claimed row carries (the stores' claims have the same). */
#define STORE_JOB_BYTES_MAX (CRCR_MAX_BODY_DEFAULT * 4u)

crcr_err store_job_claimed(store_job *out, const store_delivery *d, const store_new_job *j)
{
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, STORE_JOB_BYTES_MAX);
    buf_init(&out->payload, STORE_JOB_BYTES_MAX);
    out->id = *j->claimed_id;
    out->lease_until = j->lease_until;
    out->pr_number = d->pr_number;
    if (!(out->kind = strdup(j->kind)) || !(out->target = strdup(j->target)) ||
        (d->delivery_id && !(out->delivery_id = strdup(d->delivery_id))) ||
        (d->event && !(out->event = strdup(d->event))) ||
        (d->head_sha && !(out->head_sha = strdup(d->head_sha))) ||
        buf_append(&out->body, j->body ? j->body : "", j->body_len) != CRCR_OK)
        return CRCR_E_NOMEM;
    return CRCR_OK;
}

crcr_err store_claim(store *st, int64_t now, int64_t lease_ms, store_job *out)
{
    size_t n = 0;
    memset(out, 0, sizeof(*out));
    return store_claim_batch(st, now, lease_ms, out, 1, &n);
}

crcr_err store_claim_batch(store *st, int64_t now, int64_t lease_ms, store_job *out, size_t max,
                           size_t *n)
{
    *n = 0;
    if (max == 0)
        return CRCR_E_INVALID;
    crcr_err e = st->ops->outbox->claim(st, now, lease_ms, out, max, n);
    if (!e && *n == 0)
        e = CRCR_E_NOT_FOUND;
    return e;
}

crcr_err store_next_due(store *st, int64_t *due)
{
    return st->ops->outbox->next_due(st, due);
}

crcr_err store_job_finish(store *st, const store_job *job, const char *state, long http_status,
                          const char *error, const char *note, const char *body, size_t body_len,
                          int64_t now)
{
    return st->ops->outbox->job_finish(st, job->id, job->lease_until, state, http_status, error,
                                       note, body, body_len, now);
}

crcr_err store_job_retry(store *st, const store_job *job, int64_t next_at, bool count_attempt,
                         long http_status, const char *error)
{
    return st->ops->outbox->job_retry(st, job->id, job->lease_until, next_at, count_attempt,
                                      http_status, error);
}

crcr_err store_job_renew(store *st, store_job *job, int64_t now, int64_t lease_ms)
{
    int64_t until = now + lease_ms;
    if (until <= job->lease_until)
        return CRCR_OK; /* a lease never shrinks */
    crcr_err e = st->ops->outbox->job_renew(st, job->id, job->lease_until, until);
    if (!e)
        job->lease_until = until;
    return e;
}

crcr_err store_job_record(store *st, const store_job *job, const char *body, size_t body_len)
{
    return st->ops->outbox->job_record(st, job->id, job->lease_until, body, body_len);
}

crcr_err store_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now, int *n)
{
    *n = 0;
    return st->ops->outbox->redeliver(st, delivery_id, repo, now, n);
}

crcr_err store_list_deliveries(store *st, const store_filter *f,
                               int (*fn)(void *ctx, const store_delivery_row *row), void *ctx)
{
    static const store_filter none = {0};
    store_rows rows = {.delivery = fn, .ctx = ctx};
    return st->ops->outbox->list_deliveries(st, f ? f : &none, &rows);
}

crcr_err store_get_delivery(store *st, const char *delivery_id,
                            void (*dfn)(void *ctx, const store_delivery_row *row,
                                        const char *payload, size_t payload_len),
                            void (*jfn)(void *ctx, const store_job_row *row), void *ctx)
{
    store_delivery_read delivery = {.dfn = dfn, .ctx = ctx};
    store_rows jobs = {.job = jfn, .ctx = ctx};
    return st->ops->outbox->get_delivery(st, delivery_id, &delivery, &jobs);
}

crcr_err store_outbox_stats_get(store *st, store_outbox_stats *out)
{
    memset(out, 0, sizeof(*out));
    return st->ops->outbox->outbox_stats(st, out);
}

crcr_err store_kv_get(store *st, const char *key, buf_t *value, int64_t now)
{
    store_kv_read k = {.value = value};
    crcr_err e = st->ops->outbox->kv_get(st, key, now, &k);
    if (e) /* a failed read is not "no value" */
        return e;
    return k.found ? k.err : CRCR_E_NOT_FOUND;
}

crcr_err store_kv_put(store *st, const char *key, const char *value, size_t len, int64_t expires_at)
{
    return st->ops->outbox->kv_put(st, key, value, len, expires_at);
}

crcr_err store_retention(store *st, int64_t before, int *n)
{
    *n = 0;
    return st->ops->outbox->retention(st, before, n);
}

crcr_err store_jobs_settle(store *st, store_settle *items, size_t n)
{
    if (n == 0)
        return CRCR_OK;
    for (size_t i = 0; i < n; i++)
        items[i].result = CRCR_E_STORE;
    crcr_err e = st->ops->outbox->jobs_settle(st, items, n);
    if (e) {
        for (size_t i = 0; i < n; i++)
            items[i].result = e;
    }
    return e;
}

/* Longest prefix store_kv_scan takes. */
#define STORE_KV_PREFIX_MAX 64u

crcr_err store_kv_scan(store *st, const char *prefix, int64_t now, size_t max, store_kv_fn fn,
                       void *ctx)
{
    size_t n = prefix ? strlen(prefix) : 0;
    if (n == 0 || n > STORE_KV_PREFIX_MAX || !fn)
        return CRCR_E_INVALID;
    char hi[STORE_KV_PREFIX_MAX + 1];
    memcpy(hi, prefix, n + 1);
    if ((unsigned char)hi[n - 1] >= 0x7e)
        return CRCR_E_INVALID; /* ASCII below '~': the range's end is the next character */
    hi[n - 1]++;
    return st->ops->outbox->kv_scan(st, prefix, hi, now, max, fn, ctx);
}

int store_kv_scan_row(void *ctx, const store_row_source *s)
{
    store_kv_scan_read *r = ctx;
    if (r->left == 0)
        return 1;
    r->left--;
    const char *key = s->text(s->src, 0);
    size_t len = 0;
    const void *v = s->blob(s->src, 1, &len);
    if (key)
        r->fn(r->ctx, key, v ? v : "", v ? len : 0);
    return r->left == 0;
}

crcr_err store_kv_delete(store *st, const char *key)
{
    return key ? st->ops->outbox->kv_delete(st, key) : CRCR_E_INVALID;
}

bool store_gh_slots_shared(const store *st)
{
    return st->ops->outbox->gh_slots != NULL;
}

crcr_err store_gh_slots(store *st, long total, long want, long *granted)
{
    if (want < 0)
        want = 0;
    if (!st->ops->outbox->gh_slots) {
        *granted = want < total ? want : total;
        return CRCR_OK;
    }
    *granted = 0;
    return st->ops->outbox->gh_slots(st, total, want, granted);
}

crcr_err store_run_apply(store *st, const store_run_update *u, store_effects_fn effects, void *ctx,
                         store_run_result *res, char *reason, size_t reasonsz)
{
    store_run_call call = {u, effects, ctx, res, reason, reasonsz};
    store_run_result_init(res);
    return st->ops->runs->run_apply(st, &call);
}

void store_run_result_init(store_run_result *res)
{
    memset(res, 0, sizeof(*res));
    res->queue_ms = -1;
    res->exec_ms = -1;
}

crcr_err store_runs_for_sha(store *st, const char *head_sha, const char *repo,
                            void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    store_rows rows = {.run = fn, .ctx = ctx};
    return st->ops->runs->runs_for_sha(st, head_sha, repo, &rows);
}

crcr_err store_zombies(store *st, int64_t started_before, int limit,
                       void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    store_rows rows = {.run = fn, .ctx = ctx};
    return st->ops->runs->zombies(st, started_before, limit > 0 ? limit : 100, &rows);
}

crcr_err store_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    return st->ops->runs->wanted_set(st, head_sha, repo, now);
}

crcr_err store_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since)
{
    store_scalar mark = {0};
    crcr_err e = st->ops->runs->wanted_get(st, head_sha, repo, since, &mark);
    if (e)
        return e;
    return mark.found ? CRCR_OK : CRCR_E_NOT_FOUND;
}

crcr_err store_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                        bool *allowed, int64_t *retry_after_ms)
{
    return st->ops->runs->rate_hit(st, repo, now, window_ms, limit, allowed, retry_after_ms);
}

crcr_err store_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    return st->ops->outbox->enqueue(st, delivery_id, jobs, n);
}

crcr_err store_lease(store *st, const char *name, const char *owner, int64_t now, int64_t ttl_ms,
                     bool *held)
{
    char key[128];
    snprintf(key, sizeof(key), "lease:%s", name);
    *held = false;
    return st->ops->outbox->lease(st, key, owner, now, ttl_ms, held);
}

crcr_err store_list_runs(store *st, const store_run_filter *f,
                         void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    static const store_run_filter none = {0};
    store_rows rows = {.run = fn, .ctx = ctx};
    return st->ops->runs->list_runs(st, f ? f : &none, &rows);
}

crcr_err store_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    return st->ops->runs->callback_rejected(st, repo, now, status);
}

crcr_err store_callback_rejections(store *st, const char *repo, int64_t since, int64_t *n)
{
    store_scalar count = {0};
    crcr_err e = st->ops->runs->callback_rejections(st, repo, since, &count);
    *n = e ? 0 : count.v;
    return e;
}

crcr_err store_wait_for_work(store *st, int64_t timeout_ms, size_t *rows)
{
    *rows = 0;
    if (!st->ops->wait_for_work)
        return CRCR_E_INVALID;
    return st->ops->wait_for_work(st, timeout_ms, rows);
}

crcr_err store_dispatch_get(store *st, const char *delivery_id, const char *repo, bool with_payload,
                            store_dispatch *out)
{
    store_dispatch_read d = {.out = out, .with_payload = with_payload};
    out->dispatched_at = out->pr_number = 0;
    out->head_sha[0] = out->event[0] = '\0';
    crcr_err e = st->ops->runs->dispatch_get(st, delivery_id, repo, &d);
    if (!e && !d.found)
        e = CRCR_E_NOT_FOUND;
    return e ? e : d.err;
}

crcr_err store_identity_pin(store *st, const char *repo, const char *repository_id,
                            const char *owner_id, int64_t now, store_pin_outcome *outcome,
                            void (*seen)(void *ctx, const store_identity_row *row), void *ctx)
{
    store_pin_check c = {.repository_id = repository_id ? repository_id : "",
                         .owner_id = owner_id ? owner_id : "",
                         .seen = seen,
                         .ctx = ctx};
    crcr_err e = st->ops->runs->identity_pin(st, repo, now, &c);
    if (!e)
        *outcome = c.found ? c.outcome : STORE_PIN_NONE;
    return e;
}

crcr_err store_identity_list(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                             void *ctx)
{
    store_rows rows = {.identity = fn, .ctx = ctx};
    return st->ops->runs->identity_list(st, &rows);
}

crcr_err store_identity_reset(store *st, const char *repo)
{
    int64_t n = 0;
    crcr_err e = st->ops->runs->identity_reset(st, repo, &n);
    if (e)
        return e;
    return n > 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

crcr_err store_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                           int64_t expires_at, bool *allowed)
{
    *allowed = false;
    if (amount > limit)
        return CRCR_OK; /* never within the budget: nothing to take */
    return st->ops->runs->budget_take(st, name, amount, limit, expires_at, allowed);
}

crcr_err store_redelivery_begin(store *st, const char *guid, int64_t hook_id, const char *event,
                                const char *action, int64_t now, int max_attempts,
                                int64_t stale_before, bool *allowed, int *attempts)
{
    *allowed = false;
    *attempts = 0;
    if (!guid || max_attempts < 1)
        return CRCR_E_INVALID;
    return st->ops->reconcile->redelivery_begin(st, guid, hook_id, event, action, now, max_attempts,
                                                stale_before, allowed, attempts);
}

crcr_err store_redelivery_done(store *st, const char *guid, long status, const char *result,
                               bool counted)
{
    return st->ops->reconcile->redelivery_done(st, guid, status, result, counted);
}

crcr_err store_redelivery_list(store *st, int limit, bool pending_only,
                               void (*fn)(void *ctx, const store_redelivery_row *row), void *ctx)
{
    store_rows rows = {.redelivery = fn, .ctx = ctx};
    return st->ops->reconcile->redelivery_list(st, limit > 0 ? limit : 50, pending_only, &rows);
}

static void stats_count(store_outbox_stats *out, const char *state, int64_t count,
                        int64_t oldest_due)
{
    switch (ob_state_parse(state)) {
    case OB_STATE_QUEUED:
        out->queued = count;
        out->oldest_due = oldest_due;
        break;
    case OB_STATE_RUNNING:
        out->running = count;
        break;
    case OB_STATE_SENT:
        out->sent = count;
        break;
    case OB_STATE_DRY_RUN:
        out->dry_run = count;
        break;
    case OB_STATE_DEAD:
        out->dead = count;
        break;
    case OB_STATE_WITHDRAWN:
        out->withdrawn = count;
        break;
    default:
        break;
    }
}

void store_schema_too_new(char *err, size_t errsz, int64_t version)
{
    snprintf(err, errsz,
             "CRCR_STORE: schema version %lld is newer than this crcr understands (%d); "
             "upgrade crcr",
             (long long)version, CRCR_SCHEMA_VERSION);
}

/* ---- rows read back (store_impl.h) ---- */

char *store_row_dup(const store_row_source *s, int col)
{
    const char *t = s->text(s->src, col);
    return t ? strdup(t) : NULL;
}

crcr_err store_row_append(const store_row_source *s, int col, buf_t *out)
{
    size_t len;
    const void *p = s->blob(s->src, col, &len);
    return p && len ? buf_append(out, p, len) : CRCR_OK;
}

crcr_err store_row_payload(const store_row_source *s, int col, buf_t *out)
{
    size_t len;
    const void *p = s->blob(s->src, col, &len);
    crcr_err e = p && len ? payload_unpack(p, len, out) : CRCR_OK;
    if (e == CRCR_E_INVALID) {
        LOG_ERROR("store.payload", "error", "a stored payload does not unpack", NULL);
        e = CRCR_E_STORE;
    }
    return e;
}

static void delivery_fill(store_delivery_row *r, const store_row_source *s)
{
    void *src = s->src;
    r->delivery_id = s->text(src, 0);
    r->event = s->text(src, 1);
    r->action = s->text(src, 2);
    r->upstream_repo = s->text(src, 3);
    r->pr_number = s->i64(src, 4, 0);
    r->head_sha = s->text(src, 5);
    r->ref = s->text(src, 6);
    r->received_at = s->i64(src, 7, 0);
    r->payload_bytes = (size_t)s->i64(src, 8, 0);
    r->status = s->text(src, 9);
    r->redelivery_asks = (int)s->i64(src, 10, 0);
}

int store_delivery_read_row(void *ctx, const store_row_source *s)
{
    store_delivery_read *d = ctx;
    d->found = true;
    if (d->dfn) {
        store_delivery_row r;
        delivery_fill(&r, s);
        size_t len;
        const void *payload = s->blob(s->src, DELIVERY_PAYLOAD_COLUMN, &len);
        if (!payload_packed(payload, len)) {
            d->dfn(d->ctx, &r, payload, len);
            return 1;
        }
        buf_t b; /* the unpacked payload, freed here */
        buf_init(&b, PAYLOAD_PACK_MAX);
        d->err = store_row_payload(s, DELIVERY_PAYLOAD_COLUMN, &b);
        if (!d->err)
            d->dfn(d->ctx, &r, buf_cstr(&b), b.len);
        buf_free(&b);
    }
    return 1;
}

static void job_fill(store_job_row *r, const store_row_source *s)
{
    void *src = s->src;
    r->id = s->i64(src, 0, 0);
    r->kind = s->text(src, 1);
    r->delivery_id = s->text(src, 2);
    r->target = s->text(src, 3);
    r->state = s->text(src, 4);
    r->last_error = s->text(src, 5);
    r->note = s->text(src, 6);
    r->attempts = (int)s->i64(src, 7, 0);
    r->last_status = (long)s->i64(src, 8, 0);
    r->next_attempt_at = s->i64(src, 9, 0);
    r->created_at = s->i64(src, 10, 0);
    r->done_at = s->i64(src, 11, 0);
    r->body = s->blob(src, 12, &r->body_len);
    r->ended = s->text(src, 13);
    r->ended_by = s->text(src, 14);
}

static void identity_fill(store_identity_row *r, const store_row_source *s)
{
    void *src = s->src;
    r->repo = s->text(src, 0);
    r->repository_id = s->text(src, 1);
    r->owner_id = s->text(src, 2);
    r->pinned_at = s->i64(src, 3, 0);
    r->last_seen_at = s->i64(src, 4, 0);
}

static void redelivery_fill(store_redelivery_row *r, const store_row_source *s)
{
    void *src = s->src;
    r->guid = s->text(src, 0);
    r->event = s->text(src, 1);
    r->action = s->text(src, 2);
    r->last_result = s->text(src, 3);
    r->hook_id = s->i64(src, 4, 0);
    r->attempts = (int)s->i64(src, 5, 0);
    r->last_status = (long)s->i64(src, 6, 0);
    r->first_asked_at = s->i64(src, 7, 0);
    r->last_asked_at = s->i64(src, 8, 0);
    r->received_at = s->i64(src, 9, 0);
}

int store_listing_row(void *rows, const store_row_source *s)
{
    const store_rows *to = rows;
    if (to->delivery) {
        store_delivery_row r;
        delivery_fill(&r, s);
        return to->delivery(to->ctx, &r);
    }
    if (to->job) {
        store_job_row r;
        job_fill(&r, s);
        to->job(to->ctx, &r);
    } else if (to->run) {
        store_run_row r;
        run_row_fill(&r, s);
        to->run(to->ctx, &r);
    } else if (to->identity) {
        store_identity_row r;
        identity_fill(&r, s);
        to->identity(to->ctx, &r);
    } else if (to->redelivery) {
        store_redelivery_row r;
        redelivery_fill(&r, s);
        to->redelivery(to->ctx, &r);
    }
    return 0;
}

int store_claim_row(void *ctx, const store_row_source *s)
{
    store_claim_read *c = ctx;
    store_job *out = c->out;
    c->found = true;
    out->id = s->i64(s->src, 0, 0);
    out->kind = store_row_dup(s, 1);
    out->delivery_id = store_row_dup(s, 2);
    out->target = store_row_dup(s, 3);
    out->attempts = (int)s->i64(s->src, 4, 0);
    c->err = store_row_append(s, 5, &out->body);
    return 0;
}

crcr_err store_job_share_delivery(store_job *batch, size_t i, size_t from_index)
{
    store_job *out = &batch[i];
    const store_job *from = &batch[from_index];
    out->pr_number = from->pr_number;
    out->payload_in = from->payload_in ? from->payload_in : from_index + 1;
    if ((from->event && !(out->event = strdup(from->event))) ||
        (from->head_sha && !(out->head_sha = strdup(from->head_sha))))
        return CRCR_E_NOMEM;
    return CRCR_OK;
}

int store_stats_row(void *out, const store_row_source *s)
{
    stats_count(out, s->text(s->src, 0), s->i64(s->src, 1, 0), s->i64(s->src, 2, 0));
    return 0;
}

int store_kv_row(void *ctx, const store_row_source *s)
{
    store_kv_read *k = ctx;
    size_t len;
    const void *p = s->blob(s->src, 0, &len);
    k->found = true;
    k->err = buf_append(k->value, p ? p : "", len);
    return 1;
}

int store_scalar_row(void *ctx, const store_row_source *s)
{
    store_scalar *r = ctx;
    r->found = s->text(s->src, 0) != NULL;
    r->v = s->i64(s->src, 0, 0);
    return 1;
}

int store_pair_src_row(void *ctx, const store_row_source *s)
{
    store_pair_srcs *l = ctx;
    const char *id = s->text(s->src, 0);
    int64_t pr = s->i64(s->src, 1, 0);
    if (!id || strlen(id) >= CRCR_DELIVERY_ID_MAX || pr <= 0)
        return 0;
    if (l->n > 0 && l->v[l->n - 1].pr == pr)
        return 0;
    if (l->n >= l->max)
        return 1;
    memcpy(l->v[l->n].delivery_id, id, strlen(id) + 1);
    l->v[l->n++].pr = pr;
    return 0;
}

int store_sha_text_row(void *ctx, const store_row_source *s)
{
    char *out = ctx;
    const char *t = s->text(s->src, 0);
    snprintf(out, CRCR_SHA_MAX + 8, "%s", t && strlen(t) < CRCR_SHA_MAX + 8 ? t : "");
    return 1;
}

int store_dispatch_row(void *ctx, const store_row_source *s)
{
    store_dispatch_read *d = ctx;
    store_dispatch *out = d->out;
    const char *sha = s->text(s->src, 2), *event = s->text(s->src, 3);
    d->found = true;
    out->dispatched_at = s->i64(s->src, 0, 0);
    out->pr_number = s->i64(s->src, 1, 0);
    snprintf(out->head_sha, sizeof(out->head_sha), "%s", sha ? sha : "");
    snprintf(out->event, sizeof(out->event), "%s", event ? event : "");
    size_t pair_len = 0;
    const void *pair = s->blob(s->src, 4, &pair_len);
    out->pair[0] = '\0';
    if (pair && pair_len < sizeof(out->pair)) {
        memcpy(out->pair, pair, pair_len);
        out->pair[pair_len] = '\0';
    }
    if (d->with_payload)
        d->err = store_row_payload(s, DISPATCH_PAYLOAD_COLUMN, &out->payload);
    return 1;
}

/* ---- supersession (store_impl.h) ---- */

bool store_rows_room(void **v, size_t *cap, size_t n, size_t size, size_t max)
{
    if (n < *cap)
        return true;
    if (n >= max)
        return false;
    size_t want = *cap ? *cap * 2 : 16;
    if (want > max)
        want = max;
    void *grown = realloc(*v, want * size);
    if (!grown)
        return false;
    *v = grown;
    *cap = want;
    return true;
}

int store_ended_fill(store_ended_dispatch *e, const store_row_source *s, int id_col, int pair_col)
{
    const char *id = s->text(s->src, id_col);
    if (!id || strlen(id) >= sizeof(e->delivery_id))
        return 1; /* cannot be a delivery id the store wrote */
    memset(e, 0, sizeof(*e));
    memcpy(e->delivery_id, id, strlen(id) + 1);
    size_t len = 0;
    const void *pair = s->blob(s->src, pair_col, &len);
    if (pair && len) {
        if (!(e->pair = malloc(len + 1)))
            return -1;
        memcpy(e->pair, pair, len);
        e->pair[len] = '\0';
        e->pair_len = len;
    }
    return 0;
}

int store_ended_row(void *ctx, const store_row_source *s)
{
    store_ended_list *l = ctx;
    if (l->n >= STORE_ENDED_MAX)
        return 1;
    int r = store_ended_fill(&l->v[l->n], s, 0, 1);
    if (r < 0) {
        l->err = CRCR_E_NOMEM;
        return 1;
    }
    l->n += r == 0;
    return 0;
}

void store_ended_list_free(store_ended_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].pair);
    l->n = 0;
}

/* Copies `t` into out[sz]; false when it does not fit (NULL copies as ""). */
static bool copy_text(char *out, size_t sz, const char *t)
{
    size_t n = t ? strlen(t) : 0;
    if (n >= sz) {
        out[0] = '\0';
        return false;
    }
    memcpy(out, t ? t : "", n + 1);
    return true;
}

int store_ended_run_row(void *ctx, const store_row_source *s)
{
    store_ended_runs *l = ctx;
    if (l->n >= CRCR_SUPERSEDE_BATCH)
        return 1;
    store_run_row r;
    run_row_fill(&r, s);
    store_ended_run *e = &l->v[l->n++];
    memset(e, 0, sizeof(*e));
    bool ok = copy_text(e->delivery_id, sizeof(e->delivery_id), r.delivery_id);
    ok = copy_text(e->repo, sizeof(e->repo), r.repo) && ok;
    ok = copy_text(e->job_name, sizeof(e->job_name), r.job_name) && ok;
    ok = copy_text(e->workflow_name, sizeof(e->workflow_name), r.workflow_name) && ok;
    ok = copy_text(e->event_type, sizeof(e->event_type), r.event_type) && ok;
    ok = copy_text(e->head_sha, sizeof(e->head_sha), r.head_sha) && ok;
    ok = copy_text(e->run_id, sizeof(e->run_id), r.run_id) && ok;
    copy_text(e->details_url, sizeof(e->details_url), r.details_url); /* not part of the key */
    e->cut = !ok;
    e->run_attempt = r.run_attempt;
    e->pr_number = r.pr_number;
    e->level = r.level;
    e->dispatched_at = r.dispatched_at;
    e->started_at = r.started_at;
    e->queue_ms = r.queue_ms;
    e->rowid = s->i64(s->src, RUN_PAYLOAD_COLUMN + 1, 0);
    return 0;
}

void store_ended_run_view(const store_ended_run *e, const char *reason, int64_t now,
                          store_run_row *out)
{
    memset(out, 0, sizeof(*out));
    out->delivery_id = e->delivery_id;
    out->repo = e->repo;
    out->job_name = e->job_name;
    out->workflow_name = e->workflow_name;
    out->event_type = e->event_type;
    out->head_sha = e->head_sha[0] ? e->head_sha : NULL;
    out->details_url = e->details_url[0] ? e->details_url : NULL;
    out->state = run_status_name(RUN_STATUS_COMPLETED);
    out->conclusion = conclusion_name(CONCLUSION_CANCELLED);
    out->ended = reason;
    out->run_id = e->run_id;
    out->run_attempt = e->run_attempt;
    out->pr_number = e->pr_number;
    out->level = (int)e->level;
    out->dispatched_at = e->dispatched_at;
    out->started_at = e->started_at;
    out->completed_at = now;
    out->queue_ms = e->queue_ms;
    out->exec_ms = e->started_at && now > e->started_at ? now - e->started_at : -1;
    out->test_passed = out->test_failed = out->test_skipped = -1;
}

bool store_pair_delivery_id(const char *base, int64_t pr, char *out, size_t outsz)
{
    int k = snprintf(out, outsz, "%s:pr%lld", base, (long long)pr);
    return k > 0 && (size_t)k < outsz;
}

int store_pin_row(void *ctx, const store_row_source *s)
{
    store_pin_check *c = ctx;
    store_identity_row r;
    identity_fill(&r, s);
    bool same = *c->repository_id && *c->owner_id &&
                strcmp(r.repository_id, c->repository_id) == 0 &&
                strcmp(r.owner_id, c->owner_id) == 0;
    c->found = true;
    c->outcome = same ? STORE_PIN_MATCH : STORE_PIN_MISMATCH;
    if (!same && c->seen)
        c->seen(c->ctx, &r);
    return 1;
}
