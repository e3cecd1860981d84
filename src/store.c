/* store.c - picks the backend from the URI and forwards every call to it; see store.h. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_impl.h"

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

crcr_err store_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n)
{
    return st->ops->ingest(st, d, jobs, n);
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

crcr_err store_claim(store *st, int64_t now, int64_t lease_ms, store_job *out)
{
    return st->ops->claim(st, now, lease_ms, out);
}

crcr_err store_next_due(store *st, int64_t *due)
{
    return st->ops->next_due(st, due);
}

crcr_err store_job_finish(store *st, const store_job *job, const char *state, long http_status,
                          const char *error, const char *note, const char *body, size_t body_len,
                          int64_t now)
{
    return st->ops->job_finish(st, job->id, job->lease_until, state, http_status, error, note, body,
                               body_len, now);
}

crcr_err store_job_retry(store *st, const store_job *job, int64_t next_at, bool count_attempt,
                         long http_status, const char *error)
{
    return st->ops->job_retry(st, job->id, job->lease_until, next_at, count_attempt, http_status,
                              error);
}

crcr_err store_job_renew(store *st, store_job *job, int64_t now, int64_t lease_ms)
{
    int64_t until = now + lease_ms;
    if (until <= job->lease_until)
        return CRCR_OK; /* a lease never shrinks */
    crcr_err e = st->ops->job_renew(st, job->id, job->lease_until, until);
    if (!e)
        job->lease_until = until;
    return e;
}

crcr_err store_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now, int *n)
{
    return st->ops->redeliver(st, delivery_id, repo, now, n);
}

crcr_err store_list_deliveries(store *st, const store_filter *f,
                               int (*fn)(void *ctx, const store_delivery_row *row), void *ctx)
{
    return st->ops->list_deliveries(st, f, fn, ctx);
}

crcr_err store_get_delivery(store *st, const char *delivery_id,
                            void (*dfn)(void *ctx, const store_delivery_row *row,
                                        const char *payload, size_t payload_len),
                            void (*jfn)(void *ctx, const store_job_row *row), void *ctx)
{
    return st->ops->get_delivery(st, delivery_id, dfn, jfn, ctx);
}

crcr_err store_outbox_stats_get(store *st, store_outbox_stats *out)
{
    return st->ops->outbox_stats(st, out);
}

crcr_err store_kv_get(store *st, const char *key, buf_t *value, int64_t now)
{
    return st->ops->kv_get(st, key, value, now);
}

crcr_err store_kv_put(store *st, const char *key, const char *value, size_t len, int64_t expires_at)
{
    return st->ops->kv_put(st, key, value, len, expires_at);
}

crcr_err store_retention(store *st, int64_t before, int *n)
{
    return st->ops->retention(st, before, n);
}

crcr_err store_run_apply(store *st, const store_run_update *u, store_effects_fn effects, void *ctx,
                         store_run_result *res, char *reason, size_t reasonsz)
{
    return st->ops->run_apply(st, u, effects, ctx, res, reason, reasonsz);
}

crcr_err store_runs_for_sha(store *st, const char *head_sha, const char *repo,
                            void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    return st->ops->runs_for_sha(st, head_sha, repo, fn, ctx);
}

crcr_err store_zombies(store *st, int64_t started_before, int limit,
                       void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    return st->ops->zombies(st, started_before, limit, fn, ctx);
}

crcr_err store_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now)
{
    return st->ops->wanted_set(st, head_sha, repo, now);
}

crcr_err store_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since)
{
    return st->ops->wanted_get(st, head_sha, repo, since);
}

crcr_err store_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                        bool *allowed, int64_t *retry_after_ms)
{
    return st->ops->rate_hit(st, repo, now, window_ms, limit, allowed, retry_after_ms);
}

crcr_err store_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n)
{
    return st->ops->enqueue(st, delivery_id, jobs, n);
}

crcr_err store_lease(store *st, const char *name, const char *owner, int64_t now, int64_t ttl_ms,
                     bool *held)
{
    return st->ops->lease(st, name, owner, now, ttl_ms, held);
}

crcr_err store_list_runs(store *st, const store_run_filter *f,
                         void (*fn)(void *ctx, const store_run_row *row), void *ctx)
{
    return st->ops->list_runs(st, f, fn, ctx);
}

crcr_err store_callback_rejected(store *st, const char *repo, int64_t now, int status)
{
    return st->ops->callback_rejected(st, repo, now, status);
}

crcr_err store_callback_rejections(store *st, const char *repo, int64_t since, int64_t *n)
{
    return st->ops->callback_rejections(st, repo, since, n);
}

crcr_err store_wait_for_work(store *st, int64_t timeout_ms)
{
    if (!st->ops->wait_for_work)
        return CRCR_E_INVALID;
    return st->ops->wait_for_work(st, timeout_ms);
}

crcr_err store_dispatch_get(store *st, const char *delivery_id, const char *repo, bool with_payload,
                            store_dispatch *out)
{
    return st->ops->dispatch_get(st, delivery_id, repo, with_payload, out);
}

crcr_err store_identity_pin(store *st, const char *repo, const char *repository_id,
                            const char *owner_id, int64_t now, store_pin_outcome *outcome,
                            void (*seen)(void *ctx, const store_identity_row *row), void *ctx)
{
    return st->ops->identity_pin(st, repo, repository_id ? repository_id : "",
                                 owner_id ? owner_id : "", now, outcome, seen, ctx);
}

crcr_err store_identity_list(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                             void *ctx)
{
    return st->ops->identity_list(st, fn, ctx);
}

crcr_err store_identity_reset(store *st, const char *repo)
{
    return st->ops->identity_reset(st, repo);
}

crcr_err store_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                           int64_t expires_at, bool *allowed)
{
    return st->ops->budget_take(st, name, amount, limit, expires_at, allowed);
}

void store_stats_count(store_outbox_stats *out, const char *state, int64_t count,
                       int64_t oldest_due)
{
    if (!state)
        return;
    if (strcmp(state, "queued") == 0) {
        out->queued = count;
        out->oldest_due = oldest_due;
    } else if (strcmp(state, "running") == 0) {
        out->running = count;
    } else if (strcmp(state, "sent") == 0) {
        out->sent = count;
    } else if (strcmp(state, "dry_run") == 0) {
        out->dry_run = count;
    } else if (strcmp(state, "dead") == 0) {
        out->dead = count;
    }
}
