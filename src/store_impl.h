/*
 * store_impl.h - what a store backend provides (internal to store*.c).
 *
 * store.c owns the public functions; each forwards to the backend's operation of the same name.
 * A backend embeds `struct store` as its first member so that the pointer casts both ways.
 */
#ifndef CRCR_STORE_IMPL_H
#define CRCR_STORE_IMPL_H

#include "store.h"

typedef struct store_ops {
    void (*close)(store *st);
    crcr_err (*recover)(store *st);
    crcr_err (*ping)(store *st);
    crcr_err (*ingest)(store *st, const store_delivery *d, const store_new_job *jobs, size_t n);
    crcr_err (*claim)(store *st, int64_t now, int64_t lease_ms, store_job *out);
    crcr_err (*next_due)(store *st, int64_t *due);
    /* finish/retry/renew: `lease` is the claim's lease_until, the fence (store.h). */
    crcr_err (*job_finish)(store *st, int64_t id, int64_t lease, const char *state,
                           long http_status, const char *error, const char *note, const char *body,
                           size_t body_len, int64_t now);
    crcr_err (*job_retry)(store *st, int64_t id, int64_t lease, int64_t next_at, bool count_attempt,
                          long http_status, const char *error);
    crcr_err (*job_renew)(store *st, int64_t id, int64_t lease, int64_t new_lease);
    crcr_err (*redeliver)(store *st, const char *delivery_id, const char *repo, int64_t now,
                          int *n);
    crcr_err (*list_deliveries)(store *st, const store_filter *f,
                                int (*fn)(void *ctx, const store_delivery_row *row), void *ctx);
    crcr_err (*get_delivery)(store *st, const char *delivery_id,
                             void (*dfn)(void *ctx, const store_delivery_row *row,
                                         const char *payload, size_t payload_len),
                             void (*jfn)(void *ctx, const store_job_row *row), void *ctx);
    crcr_err (*outbox_stats)(store *st, store_outbox_stats *out);
    crcr_err (*kv_get)(store *st, const char *key, buf_t *value, int64_t now);
    crcr_err (*kv_put)(store *st, const char *key, const char *value, size_t len,
                       int64_t expires_at);
    crcr_err (*retention)(store *st, int64_t before, int *n);
    crcr_err (*run_apply)(store *st, const store_run_update *u, store_effects_fn effects, void *ctx,
                          store_run_result *res, char *reason, size_t reasonsz);
    crcr_err (*runs_for_sha)(store *st, const char *head_sha, const char *repo,
                             void (*fn)(void *ctx, const store_run_row *row), void *ctx);
    crcr_err (*zombies)(store *st, int64_t started_before, int limit,
                        void (*fn)(void *ctx, const store_run_row *row), void *ctx);
    crcr_err (*wanted_set)(store *st, const char *head_sha, const char *repo, int64_t now);
    crcr_err (*wanted_get)(store *st, const char *head_sha, const char *repo, int64_t since);
    crcr_err (*rate_hit)(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                         bool *allowed, int64_t *retry_after_ms);
    crcr_err (*enqueue)(store *st, const char *delivery_id, const store_new_job *jobs, size_t n);
    crcr_err (*lease)(store *st, const char *name, const char *owner, int64_t now, int64_t ttl_ms,
                      bool *held);
    crcr_err (*list_runs)(store *st, const store_run_filter *f,
                          void (*fn)(void *ctx, const store_run_row *row), void *ctx);
    crcr_err (*callback_rejected)(store *st, const char *repo, int64_t now, int status);
    crcr_err (*callback_rejections)(store *st, const char *repo, int64_t since, int64_t *n);
    crcr_err (*dispatch_get)(store *st, const char *delivery_id, const char *repo,
                             bool with_payload, store_dispatch *out);
    crcr_err (*identity_pin)(store *st, const char *repo, const char *repository_id,
                             const char *owner_id, int64_t now, store_pin_outcome *outcome,
                             void (*seen)(void *ctx, const store_identity_row *row), void *ctx);
    crcr_err (*identity_list)(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                              void *ctx);
    crcr_err (*identity_reset)(store *st, const char *repo);
    crcr_err (*budget_take)(store *st, const char *name, int64_t amount, int64_t limit,
                            int64_t expires_at, bool *allowed);
    /* Optional (NULL when the backend has no cross-process wake-up, e.g. SQLite): waits up to
     * timeout_ms for new outbox rows written by any process. CRCR_OK when woken, CRCR_E_NOT_FOUND
     * on timeout, CRCR_E_STORE when the database is away (after waiting out the timeout). */
    crcr_err (*wait_for_work)(store *st, int64_t timeout_ms);
} store_ops;

struct store {
    const store_ops *ops;
};

/* Adds one `SELECT state, count(*), min(next_attempt_at) ... GROUP BY state` row to *out (both
 * backends' outbox statistics). */
void store_stats_count(store_outbox_stats *out, const char *state, int64_t count,
                       int64_t oldest_due);

/* Backend constructors: `location` is the URI without its scheme prefix for SQLite
 * ("sqlite:PATH" -> "PATH") and the whole URI for PostgreSQL. */
crcr_err store_sqlite_open(const char *path, store **out, char *err, size_t errsz);
/* store_backup for a SQLite file (store.h). */
crcr_err store_sqlite_backup(const char *path, const char *dest, int *version, char *err,
                             size_t errsz);
crcr_err store_pg_open(const char *uri, long pool, store **out, char *err, size_t errsz);

#endif
