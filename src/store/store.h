/*
 * store.h - durable state behind one interface (§4 of the product contract).
 *
 * Backends: SQLite (`sqlite:PATH`, embedded, WAL, one serving process; its files are created
 * 0600) and PostgreSQL (`postgresql://...`, several instances). Callers never see SQL. Every
 * function is safe to call from several threads. Times are milliseconds since the Unix epoch.
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
#include "crcr_limits.h"
#include "err.h"

/* Version 1: the first release. Version 2: repo_identity (pins of callback identities) and
 * budgets (byte budgets such as the nightly one). Version 3: the instance holding a claimed outbox
 * row (PostgreSQL; nothing changes on SQLite). Version 4: redeliveries (what the reconciler asked
 * GitHub to redeliver, §5.7). Version 5: run ids as text (Buildkite's build UUIDs). Version 6:
 * supersession and Depends-On pairs (§3.12, §3.13): runs.ended, dispatch_ends, pairs,
 * dispatch_heads. Version 7: a dispatch's echoed webhook kept once (SQLite: run_echoes,
 * runs.echo_at; nothing changes on PostgreSQL). Version 8: SQLite stores a delivery's payload
 * deflated (payload_pack.h; no table changes, but an older relay could not read such a payload,
 * so it must refuse the store; nothing changes on PostgreSQL). Version 9: SQLite packs payloads
 * with LZ4 instead of zlib (payload_pack.h; the same reasons; nothing changes on PostgreSQL). A
 * store is upgraded in place at open; a newer store than the binary knows is refused. */
#define CRCR_SCHEMA_VERSION 9

typedef struct store store;

/* Opens (creating and migrating the schema). Returns CRCR_E_CONFIG for an unknown scheme or a
 * schema newer than this binary, CRCR_E_STORE when the database cannot be opened. */
crcr_err store_open(const char *uri, store **out, char *err, size_t errsz);
/* The same with a connection pool size for shared stores (CRCR_STORE_POOL; 0: the default). */
crcr_err store_open_pool(const char *uri, long pool, store **out, char *err, size_t errsz);
/* The same for operator commands, which must never create a store: a SQLite file that does not
 * exist is CRCR_E_NOT_FOUND with a message naming the path and how to point at the right one. */
crcr_err store_open_existing(const char *uri, long pool, store **out, char *err, size_t errsz);
/* True, with that message in err, when `uri` names a SQLite file that does not exist. */
bool store_missing(const char *uri, char *err, size_t errsz);
/* Copies a SQLite store to the new file `dest` (created 0600; an existing file is refused with
 * CRCR_E_DUPLICATE) with SQLite's online backup API: safe while `crcr serve` writes the store,
 * the copy is one consistent snapshot in a single file (rollback journal, no -wal), checked with
 * PRAGMA quick_check. The source is opened without migrating anything; a missing one is
 * CRCR_E_NOT_FOUND. *version receives the copy's schema version. Another backend is
 * CRCR_E_INVALID (PostgreSQL is backed up with pg_dump; docs/operations.md). */
crcr_err store_backup(const char *uri, const char *dest, int *version, char *err, size_t errsz);
/* Closes; NULL is fine. */
void store_close(store *st);
/* Called once by `crcr serve` at start, before any claim. SQLite: rows a crashed predecessor left
 * `running` become due now (one serving process per file, enforced by a lock held until
 * store_close; CRCR_E_STATE when another process serves the file). PostgreSQL: this process
 * becomes an instance whose claims are tied to its liveness (see store_claim); nothing is taken
 * from the instances sharing the store. */
crcr_err store_recover(store *st);
/* CRCR_OK when the store answers a trivial query. */
crcr_err store_ping(store *st);

/*
 * Write faults. A write that fails because the store's disk is full (SQLite: SQLITE_FULL;
 * PostgreSQL: SQLSTATE 53100) or on an I/O error (SQLITE_IOERR, a failed fsync of the WAL;
 * SQLSTATE 58030) is recorded as the store's write fault, with a reason an operator can read,
 * until a durable write goes through again: an ingest, a run transition, or store_probe_write.
 * The caller of the failed write has its error (CRCR_E_STORE) as before: a webhook is answered
 * 503, never 202 for something not stored.
 */
typedef enum {
    STORE_FAULT_NONE = 0,
    STORE_FAULT_DISK_FULL,
    STORE_FAULT_IO,
} store_fault_kind;
/* Longest reason of a write fault (store_write_fault). */
#define STORE_FAULT_WHY_MAX 384
/* The fault recorded now; when there is one, its reason into why[0..whysz) (may be NULL) and the
 * wall-clock time it began into *since_ms (may be NULL). */
store_fault_kind store_write_fault(store *st, char *why, size_t whysz, int64_t *since_ms);
/* While a fault is recorded, checks whether writes would go through again (SQLite: room on the
 * database's filesystem and a small durable write; PostgreSQL: a small durable write) and clears
 * the fault when they would. CRCR_OK when there is no fault (any more). */
crcr_err store_probe_write(store *st);

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
    const char *kind;    /* "dispatch", "check_run", "rerun", "rerun_suite", "hud_forward", ... */
    const char *target;  /* owner/repo (or another key for the kind) */
    const char *seq_key; /* rows with the same key are carried out in creation order: a row is
                            not claimed while an earlier one with its key is unfinished; NULL:
                            no ordering */
    const char *body;    /* request body for kinds that carry one; a dispatch row's is its
                            Depends-On record (NULL: unpaired), see store_dispatch.pair */
    size_t body_len;
    int64_t due_at;
    /* dispatch rows: the PR of the target repository that a Depends-On line of the upstream PR
     * named (§3.13), recorded in `pairs` (what store_pair_redispatch looks up); 0: none */
    int64_t pair_number;
    /* inserted only when a row with the same seq_key exists already: a cancelled check run
     * completes one that was created, it never starts one */
    bool after_seq;
    /* A row the caller carries out itself at once (outbox_take), claimed in the ingest's own
     * transaction instead of by a claim after it: with claimed_id set (and no seq_key, not
     * after_seq), store_ingest inserts it `running` under this lease (its store_job_claimed)
     * and writes its id there; a store that cannot leaves the row queued and the id as it was
     * (set it to 0 first). Read it only when the ingest succeeded. */
    int64_t lease_until;
    int64_t *claimed_id;
    /* A row whose outcome is known before it is stored (a dry-run dispatch whose request needs
     * no building, outbox_known): inserted finished in this state ("dry_run"), with 1
     * attempt and done_at = its due time, as if claimed and finished at once; never claimed,
     * never withdrawn. NULL: queued, or claimed as above. */
    const char *done_state;
} store_new_job;

/* Writes the delivery and its jobs in one transaction. CRCR_E_DUPLICATE (and nothing written)
 * when the delivery id is already known. */
crcr_err store_ingest(store *st, const store_delivery *d, const store_new_job *jobs, size_t n);

/* ---- supersession (§3.12) ---- */

/* Builds the rows a run ended by a supersession causes (a cancelled check run), inside the
 * transaction: `run` is the row as now written (completed, cancelled, `ended` set), `pair` the
 * ended dispatch row's body (its Depends-On record, NULL when none). Fills up to `max` jobs whose
 * memory the ctx owns until the next call. */
struct store_run_row;
typedef crcr_err (*store_ended_fn)(void *ctx, const struct store_run_row *run, const char *pair,
                                   size_t pair_len, store_new_job *jobs, size_t max, size_t *n);

/*
 * What a dispatch of PR N ends, in the transaction that stores it. For every target of its
 * dispatch rows, every older dispatch of N to that repository that is not ended yet (other
 * deliveries, whatever their state) gets a dispatch_ends row (reason, the new delivery, now):
 *   - its runs in progress become completed/cancelled with `ended` = reason (completed runs
 *     stay as they are), and `effects` is called for each;
 *   - its dispatch row, when still queued, is withdrawn (never sent) when the reason is
 *     superseded (a newer commit or pair: the older run would be wasted CI); a closed PR's queued
 *     rows are still sent, as upstream relays a PR's events in order;
 *   - a callback that comes later for it is recorded with `ended` set and causes nothing
 *     (store_run_apply).
 * Without any_sha only older dispatches of another head sha, or paired with another Depends-On
 * PR number than the new row's, are ended: a re-opened PR with the same head supersedes nothing.
 * On PostgreSQL the PR's supersessions and the callbacks of its runs serialise on an advisory
 * lock of the PR (exclusive here, shared in store_run_apply), so that no run is left open by a
 * callback racing the ingest.
 */
typedef struct store_supersede {
    const char *reason; /* "superseded" or "pr_closed" (vocab.h) */
    bool any_sha;       /* a closed PR, a Depends-On re-dispatch: every older dispatch */
    store_ended_fn effects;
    void *ctx;
    /* counted by the call (0 on failure) */
    int dispatches; /* older dispatches ended */
    int runs;       /* runs in progress ended */
    int withdrawn;  /* queued dispatch rows withdrawn */
} store_supersede;

/* An ingest's early hand-over of the rows it claimed (store_new_job.claimed_id). A store whose
 * commit makes rows visible to other connections before it makes them durable (SQLite's group
 * commit: the WAL is synced after the write lock is released) calls fn(ctx) once, on the
 * calling thread, in between - when the ingest committed alone (a group of others' durable
 * writes is not held up for it) - and sets `called`. The caller then carries its claimed rows
 * out while the disk syncs: if the sync fails the ingest still returns CRCR_E_STORE, and the
 * rows, stored but perhaps not durable, are carried out at least once, as a claim that read them
 * during the sync would. Not called (`called` false; always on PostgreSQL, whose commit is
 * durable when it returns): hand the rows over after a successful return, as before. */
typedef struct store_visible {
    void (*fn)(void *ctx);
    void *ctx;
    bool called;
} store_visible;

/* store_ingest, then (same transaction) the supersession `sup` of the delivery's PR
 * (d->pr_number > 0; NULL or no PR: store_ingest), with the early hand-over `vis` (NULL: none). */
crcr_err store_ingest_superseding(store *st, const store_delivery *d, const store_new_job *jobs,
                                  size_t n, store_supersede *sup, store_visible *vis);

/* One upstream PR store_pair_redispatch dispatched again. */
typedef struct store_pair_hit {
    char delivery_id[CRCR_DELIVERY_ID_MAX]; /* the new delivery */
    int64_t pr_number;
    bool duplicate; /* the delivery existed already (a redelivered push): nothing done */
} store_pair_hit;

/*
 * A push to PR `number` of the downstream repository `repo` (§3.13). For every upstream PR whose
 * latest dispatch to `repo` is paired with that PR and not ended, in one transaction: the new
 * delivery "<base_id>:pr<N>" copying that dispatch's delivery (event, action, PR, head sha,
 * payload; received `now`), its dispatch row `job` (target `repo`, pair_number `number`) and
 * the supersession `sup` (any_sha) of N x repo. hits[0..*n) say what was done (at most `max`
 * PRs; more are left for the next push). base_id must leave room for ":pr" and 19 digits
 * (CRCR_E_INVALID otherwise).
 */
crcr_err store_pair_redispatch(store *st, const char *repo, int64_t number, const char *base_id,
                               int64_t now, const store_new_job *job, store_supersede *sup,
                               store_pair_hit *hits, size_t max, size_t *n);

/* A claimed outbox row. Owned by the caller: release with store_job_free(). */
typedef struct store_job {
    int64_t id;
    char *kind;
    char *delivery_id; /* NULL when the row has none */
    char *target;
    int attempts;  /* attempts made before this one */
    buf_t body;    /* the row's own body ("" when none) */
    char *event;   /* the delivery's event (rows with a delivery) */
    buf_t payload; /* the delivery's payload (rows with a delivery; see payload_in) */
    /* store_claim_batch: 0, or 1 + the index in the caller's array of an earlier row of this
     * batch, of the same delivery, whose `payload` holds the delivery's payload; this row's
     * `payload` is then left empty (a fan-out's rows claimed together read and hold it once). */
    size_t payload_in;
    int64_t pr_number;   /* the delivery's PR number, 0 when none */
    char *head_sha;      /* the delivery's head sha (push: after), NULL when none */
    int64_t lease_until; /* the lease this claim holds: the fence of finish/retry/renew */
    /* PostgreSQL, for a `running` row taken over: why (static text), "lease_expired" or
     * "holder_gone" (the instance that held it is no longer alive); NULL otherwise, and always
     * on SQLite (whose rows left running come back at start, see store_recover) */
    const char *reclaimed;
} store_job;

void store_job_free(store_job *job);

/* The claimed row of a successful ingest (a store_new_job with claimed_id, now set), as a claim
 * would return it but for the delivery's payload, left empty (the rows of one delivery share
 * one copy, see outbox_take): fills `out` with copies of the row's and the delivery's other
 * fields. Owner: the caller, through store_job_free (also on failure: CRCR_E_NOMEM). */
crcr_err store_job_claimed(store_job *out, const store_delivery *d, const store_new_job *j);

/*
 * Claims the earliest due row and leases it until now + lease_ms. Due: queued with its time come,
 * or running under a lease that has expired, or (PostgreSQL) running for an instance that is no
 * longer alive. A claim belongs to the process that took it, not to a connection: on PostgreSQL
 * store_recover makes the process an instance, alive while the session of its listener
 * connection holds the instance's advisory lock (the server drops it the moment the process dies),
 * so rows of a dead instance are claimable again within a second, while a live instance keeps
 * its rows until their lease runs out, whichever pooled connection finishes them. On a server
 * that started less than a minute before the claiming instance took its lock, liveness verdicts
 * wait until that lock is a few seconds old (after a server restart every instance needs a moment
 * to take its lock again). Rows claimed without an instance (a store without store_recover) rely
 * on their lease alone. CRCR_E_NOT_FOUND when nothing is due.
 */
crcr_err store_claim(store *st, int64_t now, int64_t lease_ms, store_job *out);

/* store_claim for up to `max` rows at once (one transaction), in the order single claims would
 * take them; two rows of one seq_key are never in one batch. A delivery's payload comes once:
 * the later rows of its delivery may leave `payload` empty and name the row that holds it
 * (payload_in). out[0..*n) are owned by the caller (store_job_free each). CRCR_E_NOT_FOUND (and
 * *n = 0) when nothing is due. */
crcr_err store_claim_batch(store *st, int64_t now, int64_t lease_ms, store_job *out, size_t max,
                           size_t *n);

/* The earliest next_attempt_at among queued rows; CRCR_E_NOT_FOUND when there is none. */
crcr_err store_next_due(store *st, int64_t *due);

/*
 * Leases are fences. finish, retry and renew change the row only while it is still `running`
 * under the lease `job` was claimed with (job->lease_until); otherwise they change nothing and
 * return CRCR_E_STATE: the lease ran out and another worker (of this or another instance) has
 * claimed the row, or an operator re-queued it. A worker that lost its lease must not act on
 * the row any more; whoever holds it now records the outcome.
 */

/* Finishes a claimed row: `state` is "sent", "dry_run" or "dead". `body` (may be NULL) replaces
 * the stored body (dry-run keeps the exact request it would have sent). `note` describes
 * trimming. Counts this attempt. */
crcr_err store_job_finish(store *st, const store_job *job, const char *state, long http_status,
                          const char *error, const char *note, const char *body, size_t body_len,
                          int64_t now);

/* Puts a claimed row back in the queue for `next_at`. `count_attempt` false for a pause that is
 * not the row's fault (its installation is rate limited). */
crcr_err store_job_retry(store *st, const store_job *job, int64_t next_at, bool count_attempt,
                         long http_status, const char *error);

/* Extends the lease of a claimed row to now + lease_ms (job->lease_until is updated). */
crcr_err store_job_renew(store *st, store_job *job, int64_t now, int64_t lease_ms);

/* Replaces a claimed row's stored body under its lease, the row staying `running`: what a
 * callback is checked against must be in the store before the request that lets the downstream
 * call back goes out (a paired dispatch's Depends-On record, §3.13). CRCR_E_STATE when the lease
 * was lost. */
crcr_err store_job_record(store *st, const store_job *job, const char *body, size_t body_len);

/* The outcome of one claimed row for store_jobs_settle: a finish (store_job_finish's arguments)
 * or a retry (store_job_retry's). `result` receives what the single call would have returned
 * (CRCR_E_STATE: the lease was lost). */
typedef struct store_settle {
    const store_job *job;
    bool finish;
    /* finish */
    const char *state;
    const char *note;
    const char *body;
    size_t body_len;
    int64_t now;
    /* retry */
    int64_t next_at;
    bool count_attempt;
    /* both */
    long http_status;
    const char *error;
    crcr_err result;
} store_settle;

/* Records the outcomes of n claimed rows at once: one store transaction (on SQLite one request of
 * the group commit) instead of one per row, each row still under its own fence. Returns CRCR_OK
 * when the transaction went through (each item's `result` says how its row fared), or the
 * store's error (every item's `result` is that error). */
crcr_err store_jobs_settle(store *st, store_settle *items, size_t n);

/* Re-queues `delivery_id`'s dispatch rows (only `repo`'s when not NULL), whatever their state,
 * due now, with attempts reset. *n receives how many rows. CRCR_E_NOT_FOUND for an unknown id. */
crcr_err store_redeliver(store *st, const char *delivery_id, const char *repo, int64_t now, int *n);

/* Rows as read back for listings. All pointers are valid only during the callback. A delivery
 * row's status follows its outbox rows: "queued" while one is queued or running, then "done"
 * (none dead), "partly_failed" (some dead) or "dead" (all dead). */
typedef struct store_delivery_row {
    const char *delivery_id, *event, *action, *upstream_repo, *head_sha, *ref, *status;
    int64_t pr_number, received_at;
    size_t payload_bytes;
    int redelivery_asks; /* redeliveries the reconciler asked GitHub for before it arrived (0:
                            it arrived by itself) */
} store_delivery_row;

typedef struct store_job_row {
    int64_t id;
    const char *kind, *delivery_id, *target, *state, *last_error, *note;
    /* a dispatch row whose dispatch a newer one ended (§3.12): the reason and the newer
     * delivery (NULL otherwise) */
    const char *ended, *ended_by;
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
    int64_t pr_number; /* only deliveries of this PR, or 0 */
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
    int64_t queued, running, sent, dry_run, dead, withdrawn;
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

/* Calls fn with each live kv entry whose key starts with `prefix` (ASCII, at most 64 bytes), at
 * most `max` of them. The pointers are valid during the call only. */
typedef void (*store_kv_fn)(void *ctx, const char *key, const char *value, size_t len);
crcr_err store_kv_scan(store *st, const char *prefix, int64_t now, size_t max, store_kv_fn fn,
                       void *ctx);
/* Deletes the kv entry `key` (CRCR_OK also when there is none). */
crcr_err store_kv_delete(store *st, const char *key);

/*
 * The App's GitHub budget shared by the instances of one store (relay/gh_budget.c): sets this
 * instance's share to as much of `want` as `total` less the shares of the other live instances
 * allows, and returns it in *granted (never above want). Shares of instances that are no longer
 * alive (store_claim's liveness) are dropped on the way, so a crashed instance's share comes back
 * within a second. A store of one serving process (SQLite) grants min(want, total).
 */
crcr_err store_gh_slots(store *st, long total, long want, long *granted);
/* Whether instances share the budget through this store (PostgreSQL); false for a store of one
 * serving process (SQLite), whose only instance holds the whole budget. */
bool store_gh_slots_shared(const store *st);

/* ---- Callback runs (§4 `runs`): DISPATCHED -> IN_PROGRESS -> COMPLETED per key ---- */

typedef struct store_run_key {
    const char *delivery_id;
    const char *repo;   /* the OIDC-verified repository; compared case-insensitively */
    const char *run_id; /* text (ids_run_id_valid): a GitHub run's number, a Buildkite build's id */
    int64_t run_attempt;
    const char *workflow_name; /* "" when absent */
    const char *job_name;      /* "" when the callback named no job */
} store_run_key;

typedef struct store_run_update {
    store_run_key key;
    const char *status;     /* "in_progress" or "completed" */
    const char *conclusion; /* completed only; NULL when not given */
    const char *event_type; /* pull_request, push, nightly, periodic */
    int level;              /* the repo's allowlist level now (crcr_level) */
    int64_t pr_number;      /* 0 when none */
    const char *head_sha;
    const char *workflow_name;
    const char *details_url;
    const char *artifact_url;
    int64_t test_passed, test_failed, test_skipped; /* -1 when not reported */
    /* The callback body as received; read back byte for byte (a store may keep the webhook
     * every job of a dispatch echoes once: SQLite's run_echoes). */
    const char *payload;
    size_t payload_len;
    int64_t now;
    bool single_shot; /* nightly/periodic: no dispatch record; one completed row per key */
    /* the sweeper's timeout: applied only over a run still in progress and not ended (else a
     * duplicate: nothing changes) */
    bool only_open;
    /* The dispatch record's time (store_dispatch.dispatched_at) when the caller has read the
     * record already (a callback checks it first): the transition trusts it and reads no
     * record. 0: the transition reads the record itself (CRCR_E_NOT_FOUND without one). */
    int64_t dispatched_at;
    /* When rate_limit > 0, a store_rate_hit() for key.repo at `now` over rate_window_ms is
     * counted first, in the same transaction where the backend can (SQLite); a refused hit
     * applies nothing (res->rate_limited). A counted hit stays counted whatever the transition's
     * outcome, as with a separate store_rate_hit(). 0: no hit. */
    long rate_limit;
    int64_t rate_window_ms;
} store_run_update;

typedef struct store_run_result {
    bool duplicate;         /* the same transition was already applied: nothing changed */
    int64_t dispatched_at;  /* ms, 0 when unknown */
    int64_t started_at;     /* ms of in_progress, 0 when unknown */
    int64_t queue_ms;       /* in_progress - dispatched, -1 when unknown */
    int64_t exec_ms;        /* completed - in_progress, -1 when unknown */
    bool rate_limited;      /* the rate hit was refused: nothing applied (CRCR_OK returned) */
    int64_t retry_after_ms; /* when rate_limited: as store_rate_hit's */
    /* the run belongs to a dispatch a newer one ended (§3.12): its reason ("" otherwise). Such a
     * callback is recorded (the run keeps `ended`) but reopens nothing: in_progress over it is a
     * duplicate, any completed is recorded, and the caller's effects must add nothing. */
    char ended[16];
} store_run_result;

/* Builds the side-effect jobs of a transition, inside its transaction, once its metrics are
 * known. Fills up to `max` jobs (memory owned by ctx until store_run_apply returns). */
typedef crcr_err (*store_effects_fn)(void *ctx, const store_run_result *res, store_new_job *jobs,
                                     size_t max, size_t *n);

/*
 * Applies one transition atomically: reads the current state, checks the transition, writes the
 * new state and inserts the side-effect jobs from `effects` (may be NULL) in one transaction.
 * Returns CRCR_OK (res->duplicate tells an exact repeat, with no write and no jobs;
 * res->rate_limited a refused rate hit, see rate_limit),
 * CRCR_E_NOT_FOUND when no dispatch of this delivery to this repo exists (not for single_shot,
 * nor when u->dispatched_at says the caller found one),
 * CRCR_E_STATE for an invalid transition (reason says which), CRCR_E_STORE on failure.
 */
crcr_err store_run_apply(store *st, const store_run_update *u, store_effects_fn effects, void *ctx,
                         store_run_result *res, char *reason, size_t reasonsz);

/* A run as read back. Pointers valid during the callback only. */
typedef struct store_run_row {
    const char *delivery_id, *repo, *job_name, *event_type, *state, *head_sha, *workflow_name,
        *conclusion, *details_url, *artifact_url, *run_id;
    const char *ended; /* why the relay ended it (superseded, pr_closed), NULL when it did not */
    int64_t run_attempt, pr_number;
    int level;
    int64_t dispatched_at, started_at, completed_at, queue_ms, exec_ms;
    int64_t test_passed, test_failed, test_skipped;
    const char *payload;
    size_t payload_len;
} store_run_row;

/* Latest run per (workflow, job) reported for `head_sha` by `repo`, for the L3 label back-fill. */
crcr_err store_runs_for_sha(store *st, const char *head_sha, const char *repo,
                            void (*fn)(void *ctx, const store_run_row *row), void *ctx);

/* In-progress runs that started before `started_before` and were not ended by a supersession
 * (zombies), at most `limit`. */
crcr_err store_zombies(store *st, int64_t started_before, int limit,
                       void (*fn)(void *ctx, const store_run_row *row), void *ctx);

/* L3 "check run wanted" marks (§4 labels_wanted). */
crcr_err store_wanted_set(store *st, const char *head_sha, const char *repo, int64_t now);
/* CRCR_OK when marked at or after `since`, CRCR_E_NOT_FOUND otherwise. */
crcr_err store_wanted_get(store *st, const char *head_sha, const char *repo, int64_t since);

/* Sliding-window rate limit: counts a hit for `repo` at `now` when fewer than `limit` hits lie in
 * (now - window_ms, now]. *allowed tells the outcome; when refused, *retry_after_ms is when the
 * oldest hit leaves the window. Refused hits are not counted. */
crcr_err store_rate_hit(store *st, const char *repo, int64_t now, int64_t window_ms, long limit,
                        bool *allowed, int64_t *retry_after_ms);

/* Adds outbox rows outside an ingest (re-runs found by a suite listing, label back-fill). */
crcr_err store_enqueue(store *st, const char *delivery_id, const store_new_job *jobs, size_t n);

/* Takes or renews the named lease for `owner` until now + ttl_ms. *held tells whether `owner`
 * holds it now. Used so that one instance runs periodic work. */
crcr_err store_lease(store *st, const char *name, const char *owner, int64_t now, int64_t ttl_ms,
                     bool *held);

/* Runs for listings (HUD, API, health). Newest first (by last update). */
typedef struct store_run_filter {
    const char *repo;     /* only this downstream repo (case-insensitive), or NULL */
    int64_t pr_number;    /* only this PR, or 0 */
    const char *head_sha; /* only this upstream sha, or NULL */
    int kind;             /* 0 all, 1 PR/push runs only, 2 nightly/periodic only */
    int64_t since;        /* updated at or after (ms), or 0 */
    int limit;            /* rows; 0 means 1000, at most 100000 */
    int offset;
    bool no_payload; /* rows come without their payload (NULL, 0): listings stay cheap */
} store_run_filter;

crcr_err store_list_runs(store *st, const store_run_filter *f,
                         void (*fn)(void *ctx, const store_run_row *row), void *ctx);

/* ---- Dispatch records as the relay wrote them: what callbacks are checked against ---- */

/* Longest Depends-On record of a dispatch row (repository, number, head sha and ref, clone URL
 * on a web host of up to 2048 bytes, or a problem). */
#define STORE_PAIR_MAX 4096u

typedef struct store_dispatch {
    int64_t dispatched_at; /* ms: when the dispatch was sent (or queued, while it is not yet) */
    int64_t pr_number;     /* the delivery's PR number, 0 when none */
    char head_sha[72];     /* the delivery's head sha (push: after), "" when none */
    char event[64];        /* the delivery's X-GitHub-Event */
    /* the dispatch row's Depends-On record (§3.13, JSON as the outbox wrote it: what was
     * requested, then what was sent), "" when unpaired or longer than STORE_PAIR_MAX */
    char pair[STORE_PAIR_MAX];
    buf_t payload; /* the delivery's webhook body when asked for; the caller inits it
                      (buf_init with its cap) and frees it */
} store_dispatch;

/* The dispatch of `delivery_id` to `repo` (case-insensitive) with its delivery's fields, and the
 * delivery's payload into out->payload when `with_payload`. CRCR_E_NOT_FOUND when the relay never
 * dispatched that delivery to that repository. */
crcr_err store_dispatch_get(store *st, const char *delivery_id, const char *repo, bool with_payload,
                            store_dispatch *out);

/* ---- Repository identity pins (issue 12: identity is not just a name) ---- */

#define STORE_ID_MAX 32 /* decimal GitHub ids */

typedef enum {
    STORE_PIN_MATCH = 0, /* the pin holds these ids (or was just created with them) */
    STORE_PIN_MISMATCH,  /* the name is pinned to other ids: a re-created repo or a new owner */
    STORE_PIN_NONE       /* no ids given and no pin: nothing recorded */
} store_pin_outcome;

typedef struct store_identity_row {
    const char *repo, *repository_id, *owner_id;
    int64_t pinned_at, last_seen_at;
} store_identity_row;

/* Checks `repo`'s pin against the ids of an authenticated callback, pinning them when the name has
 * no pin yet (the first callback wins). Empty ids: a pinned name is a mismatch (a GitHub token
 * always carries them), an unpinned one STORE_PIN_NONE. On a mismatch the pinned row is passed to
 * `seen` (may be NULL) for the log. */
crcr_err store_identity_pin(store *st, const char *repo, const char *repository_id,
                            const char *owner_id, int64_t now, store_pin_outcome *outcome,
                            void (*seen)(void *ctx, const store_identity_row *row), void *ctx);
/* Every pin, by repo name. */
crcr_err store_identity_list(store *st, void (*fn)(void *ctx, const store_identity_row *row),
                             void *ctx);
/* Forgets `repo`'s pin (the next callback pins again). CRCR_E_NOT_FOUND when there was none. */
crcr_err store_identity_reset(store *st, const char *repo);

/* ---- Byte budgets ---- */

/* Takes `amount` from the budget `name` (e.g. "nightly:owner/repo:20261201") when what it used so
 * far plus `amount` stays within `limit`; *allowed tells. A budget is forgotten after
 * `expires_at` (retention removes it). Atomic across instances. */
crcr_err store_budget_take(store *st, const char *name, int64_t amount, int64_t limit,
                           int64_t expires_at, bool *allowed);

/* Waits up to timeout_ms for new outbox rows written by other processes (PostgreSQL:
 * LISTEN/NOTIFY): CRCR_OK when woken, with *rows the number of rows announced (SIZE_MAX: unknown,
 * e.g. after the listener reconnected, when notifications may have been missed); CRCR_E_NOT_FOUND
 * on timeout; CRCR_E_STORE when the database is away (after waiting out the timeout);
 * CRCR_E_INVALID at once for a store without cross-process wake-ups (SQLite: an in-process notify
 * is all a single-process store needs). Rows this process wrote itself are not announced: its
 * writers wake their own workers. Used by the outbox's wake-up thread. */
crcr_err store_wait_for_work(store *st, int64_t timeout_ms, size_t *rows);

/* ---- Redeliveries the reconciler asked GitHub for (§5.7) ---- */

/* A redelivery record as read back. Pointers valid during the callback only. */
typedef struct store_redelivery_row {
    const char *guid;        /* the X-GitHub-Delivery of the event */
    const char *event;       /* its X-GitHub-Event, NULL when unknown */
    const char *action;      /* its action, NULL when none */
    const char *last_result; /* what the last ask came to ("accepted", an error), NULL: asking */
    int64_t hook_id;         /* the delivery attempt (GitHub's id) last asked to be sent again;
                                0 after an ask that failed */
    int attempts;            /* asks that counted (accepted, or not answered yet) */
    long last_status;        /* HTTP status of the last ask, 0 while asking or without answer */
    int64_t first_asked_at, last_asked_at;
    int64_t received_at; /* when the delivery then reached the store, 0 while it has not */
} store_redelivery_row;

/* Records an ask for `guid` before it is made, atomically across instances: allowed (*allowed
 * true, *attempts the new count) when the guid has no record, or its record has fewer than
 * `max_attempts` asks and either GitHub has made a newer attempt since the last ask (`hook_id` is
 * larger than the recorded one) or the last ask is older than `stale_before` (GitHub never acted
 * on it). Otherwise nothing changes, *allowed is false and *attempts the record's count: another
 * instance asked already, the guid's redelivery is on its way, or it has had its asks. */
crcr_err store_redelivery_begin(store *st, const char *guid, int64_t hook_id, const char *event,
                                const char *action, int64_t now, int max_attempts,
                                int64_t stale_before, bool *allowed, int *attempts);
/* Records the outcome of the ask store_redelivery_begin allowed: its HTTP status (0: no answer)
 * and a result text. `counted` false takes the ask back (it did not reach GitHub or GitHub
 * refused it for now: a network error, 5xx, 403, 429) so that the next pass asks again. */
crcr_err store_redelivery_done(store *st, const char *guid, long status, const char *result,
                               bool counted);
/* The records, most recently asked first, at most `limit` (0: 50); `pending_only` leaves out
 * those whose delivery has arrived. */
crcr_err store_redelivery_list(store *st, int limit, bool pending_only,
                               void (*fn)(void *ctx, const store_redelivery_row *row), void *ctx);

/* Callbacks refused after authentication (for the level-health callback error rate). */
crcr_err store_callback_rejected(store *st, const char *repo, int64_t now, int status);
/* Refusals of `repo` since `since` (ms) into *n. */
crcr_err store_callback_rejections(store *st, const char *repo, int64_t since, int64_t *n);

#endif
