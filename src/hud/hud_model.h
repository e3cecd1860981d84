/*
 * hud_model.h - what the HUD's pages (hud_overview.c, hud_repo.c, hud_pr.c, hud_deliveries.c)
 * share: the request and its answers, strict parsing of path and query inputs, and the store
 * rows pages are built from, copied into the request's arena: runs (hrun) and deliveries with
 * their outbox rows (ddoc_delivery, delivery_doc.h). Each page builds its own model from these
 * and writes it as JSON or HTML (see hud.c).
 */
#ifndef CRCR_HUD_MODEL_H
#define CRCR_HUD_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "arena.h"
#include "buf.h"
#include "delivery_doc.h"
#include "health.h"
#include "http_server.h"
#include "jw.h"
#include "outcome.h"
#include "store.h"

/* Most bytes one page or API answer may have, and most memory one request's copies may use. */
#define HUD_OUT_MAX (32u * 1024u * 1024u)
#define HUD_ARENA_MAX (128u * 1024u * 1024u)

/* One request: set up and torn down by hud.c's routing, handed to a page. */
typedef struct hud_req {
    crcr_app *app;
    const http_request *req;
    http_response *resp;
    bool api;    /* JSON answer (else HTML) */
    int64_t t0;  /* monotonic ms at the start */
    int64_t now; /* wall ms */
    arena a;     /* the copies of store rows (at most HUD_ARENA_MAX) */
    buf_t out;   /* the answer being written (at most HUD_OUT_MAX) */
} hud_req;

/* ---- answers ---- */

/* Answers `status` with `msg`: {"detail": msg} for the API, an error page otherwise. */
void hud_answer_error(hud_req *r, int status, const char *msg);
/* Sends r->out as the answer (200), or a 500 (503 for a store error) when building it failed or
 * the arena ran out. */
void hud_answer_out(hud_req *r, crcr_err err);

/* ---- inputs: 0 / true when good ---- */

/* An integer argument `v` in [min, max] of at most 12 digits (no sign); `dflt` when absent or
 * empty. -1 when bad. */
int hud_int_arg(const char *v, long min, long max, long dflt, long *out);
/* The same for the query argument `name`. */
int hud_query_int(const http_request *req, const char *name, long min, long max, long dflt,
                  long *out);
/* `n` bytes of "owner/repo" with GitHub's characters and lengths (owner 1-39, name 1-100 of
 * [A-Za-z0-9._-], neither "." nor ".."); copied into out (NUL-terminated, must fit outsz). */
bool hud_parse_repo(const char *s, size_t n, char *out, size_t outsz);
/* A head sha: 7 to CRCR_SHA_MAX hex digits. */
bool hud_sha_ok(const char *s);
/* ?window= as health_parse_window reads it (default HEALTH_WINDOW_DEFAULT_MS); -1 when bad. */
int hud_query_window(const http_request *req, int64_t *ms);

/* The level-health report over `window` (every repo, or only_repo) with the configured
 * thresholds. */
crcr_err hud_build_report(hud_req *r, const char *only_repo, int64_t window, health_report *rep);

/* ---- runs, as copied out of the store ---- */

typedef struct hrun {
    const char *delivery_id, *repo, *workflow, *job, *state, *conclusion, *details_url,
        *artifact_url, *head_sha, *event_type, *run_id;
    const char *ended; /* why the relay ended it (superseded, pr_closed), NULL: it did not */
    int64_t run_attempt, pr_number;
    int level;
    int64_t dispatched_at, started_at, completed_at, queue_ms, exec_ms;
    int64_t passed, failed, skipped;
} hrun;

typedef struct run_list {
    hrun **v; /* pointers into the arena; the array itself is the caller's (free(v)) */
    size_t n, cap;
    arena *a;
    bool oom;
} run_list;

/* store_list_runs callback (ctx: a run_list): appends a copy of the run ("" for a missing
 * workflow or job name; NULL for an artifact URL that is not https://, html_url_ok). Sets
 * l->oom when out of memory. */
void hud_collect_run(void *ctx, const store_run_row *r);
/* When the run last changed: the latest of dispatched, started and completed. */
int64_t hud_run_time(const hrun *r);
/* The result word of a run: its outcome's name (outcome.h): success, failure, cancelled,
 * timed_out, running, other or superseded. */
const char *hud_run_result(const hrun *r);
/* The run as an API object (with its repo and level when `with_repo`). */
void hud_run_json(jw *w, const hrun *r, bool with_repo);

/* ---- deliveries and their outbox rows (the HUD view of delivery_doc.h) ---- */

typedef struct delivery_list {
    ddoc_delivery *v; /* the caller's (hud_free_deliveries) */
    size_t n, cap;
    arena *a;
    bool oom;
} delivery_list;

typedef struct job_ctx {
    ddoc_delivery *d;
    arena *a;
    bool oom;
} job_ctx;

/* store_list_deliveries callback (ctx: a delivery_list): appends a copy of the delivery. */
int hud_collect_delivery(void *ctx, const store_delivery_row *r);
/* store_get_delivery callbacks (ctx: a job_ctx): copy the delivery (not its payload) into c->d
 * and append each outbox row to c->d->jobs as the HUD shows it (DDOC_HUD). */
void hud_copy_detail_delivery(void *ctx, const store_delivery_row *r, const char *payload,
                              size_t payload_len);
void hud_collect_job(void *ctx, const store_job_row *j);
/* Reads the outbox rows of every delivery of v[0..n) (one that retention removed meanwhile
 * keeps none). */
crcr_err hud_load_jobs(store *st, arena *a, ddoc_delivery *v, size_t n);
/* Frees v and every delivery's jobs array (the strings are the arena's). */
void hud_free_deliveries(ddoc_delivery *v, size_t n);

#endif
