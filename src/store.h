/*
 * store.h - durable state behind one interface (§4 of the product contract).
 *
 * Backends: SQLite (`sqlite:PATH`, embedded, WAL, one process) and, later, PostgreSQL
 * (`postgresql://...`). Callers never see SQL. Every function is safe to call from several
 * threads. Times are milliseconds since the Unix epoch.
 *
 * The outbox holds every outbound side effect. A row moves
 *   queued --claim--> running --done--> sent | dry_run | dead
 *                        \--retry--> queued (later)
 * and a `running` row whose lease has expired (its worker died) is claimable again.
 */
#ifndef CRCR_STORE_H
#define CRCR_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

#define CRCR_SCHEMA_VERSION 1

typedef struct store store;

/* Opens (creating and migrating the schema). Returns CRCR_E_CONFIG for an unknown scheme or a
 * schema newer than this binary, CRCR_E_STORE when the database cannot be opened. */
crcr_err store_open(const char *uri, store **out, char *err, size_t errsz);
/* Closes; NULL is fine. */
void store_close(store *st);
/* Called once by `crcr serve` at start: rows a crashed predecessor left `running` become due now
 * (SQLite: one serving process per file); shared stores rely on leases instead. */
crcr_err store_recover(store *st);
/* CRCR_OK when the store answers a trivial query. */
crcr_err store_ping(store *st);

/* A verified webhook to persist. Strings are borrowed for the call; NULL means absent. */
typedef struct store_delivery {
    const char *delivery_id;
    const char *event;
    const char *action;
    const char *upstream_repo;
    int64_t pr_number; /* 0 when absent */
    const char *head_sha;
    const char *ref;
    int64_t received_at;
    const char *payload;
    size_t payload_len;
    const char *status; /* "queued", "ignored", ... */
} store_delivery;

/* An outbox row to create. */
typedef struct store_new_job {
    const char *kind;   /* "dispatch", "check_run", "rerun", "rerun_suite", "hud_forward", ... */
    const char *target; /* owner/repo (or another key for the kind) */
    const char *body;   /* request body for kinds that carry one; NULL for dispatch */
    size_t body_len;
    int64_t due_at;
} store_new_job;

/* Writes the delivery and its jobs in one transaction. CRCR_E_DUPLICATE (and nothing written)
 * when the delivery id is already known. */
crcr_err store_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n);

/* A claimed outbox row. Owned by the caller: release with store_job_free(). */
typedef struct store_job {
    int64_t id;
    char *kind;
    char *delivery_id; /* NULL when the row has none */
    char *target;
    int attempts;  /* attempts made before this one */
    buf_t body;    /* the row's own body ("" when none) */
    char *event;   /* the delivery's event (rows with a delivery) */
    buf_t payload; /* the delivery's payload (rows with a delivery) */
} store_job;

void store_job_free(store_job *job);

/* Claims the earliest due row (queued and due, or running with an expired lease) and leases it
 * until now + lease_ms. CRCR_E_NOT_FOUND when nothing is due. */
crcr_err store_claim(store *st, int64_t now, int64_t lease_ms, store_job *out);

/* The earliest next_attempt_at among queued rows; CRCR_E_NOT_FOUND when there is none. */
crcr_err store_next_due(store *st, int64_t *due);

/* Finishes a claimed row: `state` is "sent", "dry_run" or "dead". `body` (may be NULL) replaces
 * the stored body (dry-run keeps the exact request it would have sent). `note` describes
 * trimming. Counts this attempt. */
crcr_err store_job_finish(store *st, int64_t id, const char *state, long http_status,
                          const char *error, const char *note, const char *body, size_t body_len,
                          int64_t now);

/* Puts a claimed row back in the queue for `next_at`. `count_attempt` false for a pause that is
 * not the row's fault (its installation is rate limited). */
crcr_err store_job_retry(store *st, int64_t id, int64_t next_at, bool count_attempt,
                         long http_status, const char *error);

/* Re-queues `delivery_id`'s dispatch rows (only `repo`'s when not NULL), whatever their state,
 * due now, with attempts reset. *n receives how many rows. CRCR_E_NOT_FOUND for an unknown id. */
crcr_err store_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now, int *n);

/* Rows as read back for listings. All pointers are valid only during the callback. */
typedef struct store_delivery_row {
    const char *delivery_id, *event, *action, *upstream_repo, *head_sha, *ref, *status;
    int64_t pr_number, received_at;
    size_t payload_bytes;
} store_delivery_row;

typedef struct store_job_row {
    int64_t id;
    const char *kind, *delivery_id, *target, *state, *last_error, *note;
    int attempts;
    long last_status;
    int64_t next_attempt_at, created_at, done_at; /* done_at 0 when not done */
    const char *body;
    size_t body_len;
} store_job_row;

typedef struct store_filter {
    const char *state; /* outbox state a delivery must have a row in, or NULL */
    const char *repo;  /* target a delivery must have a row for, or NULL */
    int limit;         /* most recent first; 0 means 50 */
} store_filter;

/* Calls `fn` for each matching delivery, newest first. A non-zero return from `fn` stops. */
crcr_err store_list_deliveries(store *st, const store_filter *f,
                               int (*fn)(void *ctx, const store_delivery_row *row), void *ctx);

/* Calls `dfn` once for the delivery (with its payload in `payload`) and `jfn` for each of its
 * outbox rows in id order. CRCR_E_NOT_FOUND for an unknown id. */
crcr_err store_get_delivery(store *st, const char *delivery_id,
                            void (*dfn)(void *ctx, const store_delivery_row *row,
                                        const char *payload, size_t payload_len),
                            void (*jfn)(void *ctx, const store_job_row *row), void *ctx);

/* Counts of outbox rows by state, for metrics and /readyz. */
typedef struct store_outbox_stats {
    int64_t queued, running, sent, dry_run, dead;
    int64_t oldest_due; /* next_attempt_at of the oldest queued row, 0 when none */
} store_outbox_stats;
crcr_err store_outbox_stats_get(store *st, store_outbox_stats *out);

/* Small key/value cache with expiry (allowlist copy, JWKS, leases). get: CRCR_E_NOT_FOUND when
 * missing or expired. expires_at 0 means never. */
crcr_err store_kv_get(store *st, const char *key, buf_t *value, int64_t now);
crcr_err store_kv_put(store *st, const char *key, const char *value, size_t len,
                      int64_t expires_at);

/* Deletes deliveries received before `before` and their finished outbox rows. *n = deliveries. */
crcr_err store_retention(store *st, int64_t before, int *n);

#endif
