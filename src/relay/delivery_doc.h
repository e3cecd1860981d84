/*
 * delivery_doc.h - the delivery document: one webhook delivery and its outbox rows as JSON, read
 * from the store by one loader and written by one writer for every place that shows it:
 *
 *   HUD API    /api/v1/deliveries[/{id}]        DDOC_HUD    {<head>,"outbox":[<row>,..]}
 *              /api/v1/pr/{n}                   DDOC_HUD    heads and rows inside the PR's document
 *   admin API  /api/v1/admin/deliveries[/{id}]  DDOC_ADMIN  {"delivery":{<head>},"outbox":[..]}
 *   `crcr deliveries show|list --format json`   DDOC_ADMIN  the same (ddoc_admin_jv)
 *
 * The head (delivery_id, event, action, upstream_repo, pr_number, head_sha, ref, received_at,
 * payload_bytes, status, recovered: true when it arrived because the reconciler asked GitHub to
 * redeliver it) is the same in both views. An outbox row differs by audience:
 *   - DDOC_HUD, shown without authentication: no body (a dispatch body carries the callback
 *     token); error texts and notes scrubbed of credentials and cut at DDOC_ERROR_MAX;
 *     "dispatch_state" (ob_state_label, outcome.h) and "created_at"; "next_attempt_at" only while
 * the row is queued; a check run's name, status and conclusion as "check_run".
 *   - DDOC_ADMIN, behind the admin token: texts as stored, "next_attempt_at" always, and "body":
 *     the request body (null when empty, not well-formed UTF-8 or holding a NUL; a dispatch row
 *     stores none, so a dry-run one's is rebuilt exactly as the worker built it, see
 *     dispatch_row_body in dispatch.h).
 * A dispatch row has, in both views, "depends_on" when it is paired: its Depends-On pair (§3.13:
 * repository, number and, once sent, head_sha, head_ref, clone_url, or the problem that kept it
 * out), and "ended": {"reason","by"} when a newer dispatch ended it (§3.12).
 */
#ifndef CRCR_DELIVERY_DOC_H
#define CRCR_DELIVERY_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "buf.h"
#include "config.h"
#include "err.h"
#include "json.h"
#include "jw.h"
#include "store.h"

/* Longest error text or note looked at in the HUD view, and longest check-run body parsed. */
#define DDOC_ERROR_MAX 1024u
#define DDOC_CHECK_BODY_MAX (64u * 1024u)
/* Largest `limit` of a delivery listing (admin API and `crcr deliveries`). */
#define DDOC_LIST_MAX 10000
/* Most bytes of one admin document (its copies in memory and its JSON text alike). */
#define DDOC_ADMIN_MAX (256u * 1024u * 1024u)

typedef enum ddoc_view {
    DDOC_HUD,
    DDOC_ADMIN,
} ddoc_view;

/* One outbox row. Strings are borrowed (the HUD's and the admin loader's live in an arena). */
typedef struct ddoc_job {
    int64_t id;
    const char *kind, *target, *state, *last_error, *note;
    int attempts;
    long last_status;
    int64_t next_attempt_at, created_at, done_at;
    const char *check_name, *check_status, *check_conclusion; /* DDOC_HUD: check_run rows */
    const char *delivery_id;
    const char *body; /* DDOC_ADMIN: well-formed UTF-8 or NULL */
    size_t body_len;
    /* dispatch rows */
    const char *ended, *ended_by; /* a newer dispatch ended it: why, which (NULL otherwise) */
    const char *dep_repo;         /* its Depends-On pair, NULL when unpaired */
    int64_t dep_number;
    const char *dep_head_sha, *dep_head_ref, *dep_clone_url, *dep_problem; /* NULL when none */
} ddoc_job;

/* One delivery with its outbox rows. The jobs array is owned by the delivery (ddoc_free_jobs). */
typedef struct ddoc_delivery {
    const char *delivery_id, *event, *action, *upstream_repo, *head_sha, *ref, *status;
    int64_t pr_number, received_at;
    size_t payload_bytes;
    int redelivery_asks; /* the reconciler asked GitHub to redeliver it (reconcile.h) */
    ddoc_job *jobs;
    size_t n_jobs, cap_jobs;
} ddoc_delivery;

/* Copies the delivery row's fields into `d` (strings into the arena); d->jobs is left alone. */
void ddoc_copy_delivery(arena *a, ddoc_delivery *d, const store_delivery_row *r);
/* Appends outbox row `j` to d->jobs as view `v` shows it (strings copied into the arena; no body
 * in DDOC_HUD). False when out of memory (check a->oom as well). */
bool ddoc_add_job(arena *a, ddoc_delivery *d, const store_job_row *j, ddoc_view v);
/* Frees d->jobs (the strings stay in the arena). */
void ddoc_free_jobs(ddoc_delivery *d);

/* The head's members, written into an object the caller has opened. */
void ddoc_write_head(jw *w, const ddoc_delivery *d);
/* One outbox row as an object. */
void ddoc_write_job(jw *w, const ddoc_job *j, ddoc_view v);
/* The whole document in view `v`'s shape (see above). */
void ddoc_write(jw *w, const ddoc_delivery *d, ddoc_view v);

/* Appends the DDOC_ADMIN document of delivery `id` to `out`. A dry-run dispatch row's body is
 * rebuilt with `cfg`'s secret and budget (cfg NULL: shown as null). CRCR_E_NOT_FOUND for an
 * unknown id, CRCR_E_NOMEM past DDOC_ADMIN_MAX, or the store's error. */
crcr_err ddoc_admin(store *st, const crcr_config *cfg, const char *id, buf_t *out);
/* Appends the array of the heads of the deliveries matching `f` (newest first) to `out`. */
crcr_err ddoc_admin_list(store *st, const store_filter *f, buf_t *out);

/* The same documents as jv values (*out a new reference the caller frees with jv_free), for the
 * admin API and `crcr deliveries`, which print them as they print any document. *out is NULL on
 * failure. */
crcr_err ddoc_admin_jv(store *st, const crcr_config *cfg, const char *id, jv **out);
crcr_err ddoc_admin_list_jv(store *st, const store_filter *f, jv **out);

/* The reconciler's redelivery records (store_redelivery_list), most recently asked first, as a
 * JSON array of {guid, event, action, hook_delivery_id, asks, max_asks, first_asked_at,
 * last_asked_at, last_status, last_result, state, received_at}; state is recovered (the delivery
 * arrived), asking (an ask is being made), asked (GitHub accepted the last ask; not arrived yet)
 * or refused (GitHub did not accept the last ask). For the admin API and `crcr deliveries list
 * --recovered`; *out is a new reference the caller frees (NULL on failure). */
crcr_err ddoc_redeliveries_jv(store *st, int limit, bool pending_only, jv **out);

#endif
