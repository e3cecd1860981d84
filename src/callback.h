/*
 * callback.h - POST /github/callback: downstream CI reports a job's progress.
 *
 * Order (upstream §2.6.1/§2.6.3 plus crcr's improvements, contract §5.5):
 *   0. no bearer token in Authorization              -> 401 "Missing authorization token",
 *      from the headers alone, before the body is read (callback_guard); a body over
 *      CRCR_MAX_CALLBACK_BODY (1 MiB) -> 413 before it is read
 *   1. body not a JSON object                        -> 400 "Invalid JSON body"
 *   2. OIDC token (RS256, issuer, audience, times)    -> 401 with a reason
 *   3. repo below L2 in the allowlist                 -> 200 {"ok":true,"status":"ignored"}
 *  3b. repository ids differ from the pin of its first callback -> 403
 *   4. per-repo sliding 60 s window                   -> 429 + Retry-After
 *   5. required fields, numeric run ids, known status -> 400
 *   6. event_type nightly|periodic: status completed, delivery_id a 40-hex commit sha (400), body
 *      at most 64 KiB (413), the repo's daily byte budget (429 + Retry-After); no dispatch record
 *   7. PR/push: a dispatch of this delivery to this repo -> else 400; the body's head sha or PR
 *      number differing from the delivery's -> 403; callback_token (when present, or required)
 *      vs repo + delivery + the delivery's PR and sha -> 403
 *   8. atomic transition DISPATCHED -> IN_PROGRESS -> COMPLETED (exact repeat: 200 duplicate;
 *      invalid: 400), with its check run (L3/L4) and HUD forward queued in the same transaction;
 *      the run's head sha, PR number and the L3 label decision come from the relay's records
 *   9. 200 {"ok":true,"status":...}; the answer never waits for GitHub or the HUD.
 */
#ifndef CRCR_CALLBACK_H
#define CRCR_CALLBACK_H

#include "allowlist.h"
#include "buf.h"
#include "checks.h"
#include "store.h"
#include "http_server.h"
#include "json.h"

/* What one callback says, after validation. Strings borrow from the parsed body. */
typedef struct cb_fields {
    const char *event_type;
    const char *delivery_id;
    const char *status;
    const char *conclusion;
    const char *workflow_name;
    const char *job_name;
    const char *artifact_url;
    const char *details_url;
    int64_t run_id, run_attempt;
    int64_t pr_number;
    const char *head_sha;
    const char *token;
    const jv *labels; /* payload.pull_request.labels, may be NULL */
    int64_t passed, failed, skipped;
} cb_fields;

/* Validates a callback body (upstream required fields, numeric run ids, known status, named
 * limits) and fills *f. On failure writes the 400 detail into `detail` and returns false. */
bool callback_parse(const jv *body, cb_fields *f, char *detail, size_t dsz);

/* Parses a callback body for callback_parse: validated as jv_parse() does, but only the values
 * callback_parse reads are built. Returns a new reference (caller frees with jv_free()), NULL
 * when the body is not valid JSON. */
jv *callback_body_parse(const char *text, size_t len);

/* Appends the upstream HUD wire format {"trusted":{"ci_metrics":{"queue_time":..,
 * "execution_time":..},"verified_repo":..,"downstream_repo_level":..},"untrusted":
 * {"callback_payload":<callback_json verbatim>}}. Metrics in ms, -1 for null. */
crcr_err callback_hud_body(buf_t *out, const char *repo, crcr_level level, int64_t queue_ms,
                           int64_t exec_ms, const char *callback_json, size_t callback_len);

struct crcr_app;

/* Memory of the request bodies of a transition's side effects (owned by the caller). */
typedef struct callback_bodies {
    buf_t check;     /* check-run request body */
    buf_t check_key; /* its outbox ordering key */
    buf_t hud;       /* HUD forward body */
    buf_t hud_key;   /* its ordering key: one run's forwards go out in order */
} callback_bodies;

/* Prepares the holders (sized for a callback body of `callback_len` bytes) / frees them. */
void callback_bodies_init(callback_bodies *b, size_t callback_len);
void callback_bodies_free(callback_bodies *b);

/* The side effects of a run transition, shared by callbacks and the sweeper: a check run on the
 * upstream PR (when `check` is not NULL) and a HUD forward (when HUD_API_URL is set). Fills
 * jobs[0..*n) whose bodies live in `bodies`. */
crcr_err callback_effects(const struct crcr_app *app, const checks_run *check,
                          const store_run_key *key, crcr_level level, int64_t queue_ms,
                          int64_t exec_ms, const char *callback_json, size_t callback_len,
                          callback_bodies *bodies, store_new_job *jobs, size_t max, size_t *n);

/* Whether a run of `repo` (at `level` now) on the dispatched delivery `delivery_id`, head sha
 * `head_sha`, gets a check run on the upstream PR (§5.3): L4 always; L3 when the webhook the
 * relay dispatched carried the device's ciflow/crcr label, or a labeled event marked the sha.
 * Never decided from a callback body. Shared by callbacks and the sweeper. */
bool callback_check_wanted(const struct crcr_app *app, const allowlist *al, const char *repo,
                           crcr_level level, const char *delivery_id, const char *head_sha);

/* Route guard: a callback without a bearer token is answered 401 "Missing authorization token"
 * before its body is read. ctx is the crcr_app. */
bool callback_guard(void *ctx, const http_request *req, http_response *resp);

/* Route handler, behind callback_guard(); ctx is the crcr_app. */
void callback_handle(void *ctx, const http_request *req, http_response *resp);

#endif
