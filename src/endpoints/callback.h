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
 *      vs repo + delivery + the delivery's PR and sha (+ the Depends-On pair the dispatch
 *      carried, §3.13) -> 403
 *   8. atomic transition DISPATCHED -> IN_PROGRESS -> COMPLETED (exact repeat: 200 duplicate;
 *      invalid: 400), with its check run (L3/L4, naming a Depends-On pair) and HUD forward queued
 *      in the same transaction; the run's head sha, PR number and the L3 label decision come from
 *      the relay's records. A run of a dispatch a newer one ended (§3.12) is recorded but causes
 *      nothing: no check run, no comment, no HUD forward, never a refusal for it
 *   9. 200 {"ok":true,"status":...} (+ "ended":"superseded"|"pr_closed" for such a run); the
 *      answer never waits for GitHub or the HUD.
 */
#ifndef CRCR_CALLBACK_H
#define CRCR_CALLBACK_H

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

/* Route guard: a callback without a bearer token is answered 401 "Missing authorization token"
 * before its body is read. ctx is the crcr_app. */
bool callback_guard(void *ctx, const http_request *req, http_response *resp);

/* Route handler, behind callback_guard(); ctx is the crcr_app. */
void callback_handle(void *ctx, const http_request *req, http_response *resp);

#endif
