/*
 * callback.h - POST /github/callback: downstream CI reports a job's progress.
 *
 * Order (upstream §2.6.1/§2.6.3 plus crcr's improvements, contract §5.5):
 *   0. no bearer token in Authorization              -> 401 "Missing authorization token",
 *      from the headers alone, before the body is read (callback_guard); a body over
 *      CRCR_MAX_CALLBACK_BODY (1 MiB) -> 413 before it is read
 *   1. body not a JSON object                        -> 400 "Invalid JSON body"
 *      (validated only: nothing built before the token; a duplicate key, which JSON allows,
 *      is refused after step 2 with the same answer)
 *   2. OIDC token (RS256, issuer, audience, times)    -> 401 with a reason; an issuer whose
 *      keys cannot be fetched -> 503 + Retry-After naming the issuer
 *   3. repo below L2 in the allowlist                 -> 200 {"ok":true,"status":"ignored"}
 *  3b. repository ids differ from the pin of its first callback -> 403
 *   4. per-repo sliding 60 s window                   -> 429 + Retry-After
 *   5. required fields, run ids (a GitHub run's a number, a Buildkite build's its id), known
 *      status, GitHub's conclusions when completed -> 400; link fields other than https://
 *      URLs dropped (callback_clean_body)
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

#include "config.h"
#include "crcr_limits.h"
#include "http_server.h"
#include "json.h"

/* What one callback says, after validation. Strings borrow from the parsed body, but for the
 * conclusion, vocab.h's word. */
typedef struct cb_fields {
    const char *event_type;
    const char *delivery_id;
    const char *status;
    const char *conclusion; /* completed: GitHub's lower-case word; in_progress: NULL */
    const char *workflow_name;
    const char *job_name;
    const char *artifact_url;     /* an https:// URL or NULL (another value is dropped) */
    const char *details_url;      /* workflow.url, the same way */
    char run_id[CRCR_RUN_ID_MAX]; /* as the relay keeps it (ids_run_id_valid): a GitHub Actions
                                     run's decimal id, a Buildkite build's id as sent */
    int64_t run_attempt;
    int64_t pr_number;
    const char *head_sha;
    const char *token;
    int64_t passed, failed, skipped;
    /* The body as stored and forwarded must differ from the one received (callback_clean_body):
     * a link field was dropped, or the conclusion was spelled in another case. */
    bool clean_body;
} cb_fields;

/* Validates a callback body (upstream required fields, run ids, known status, GitHub's check-run
 * conclusions, named limits) and fills *f. `kind` is the issuer of the caller's token: a GitHub
 * Actions run id is a positive integer (a JSON number or a string of digits: re-runs name it in
 * GitHub's API), a Buildkite one the build's id (a UUID; ids_run_id_valid). On failure writes the
 * 400 detail into `detail` and returns false. */
bool callback_parse(const jv *body, crcr_issuer_kind kind, cb_fields *f, char *detail, size_t dsz);

/* Appends to `out` the body `text[0..len)` (which callback_parse accepted as `f`) as the relay
 * stores and forwards it when f->clean_body: workflow.conclusion as f->conclusion, and
 * workflow.url and workflow.artifact_url removed where callback_parse dropped them; everything
 * else as received (jansson's serialisation, key order kept). CRCR_E_INVALID when the text does
 * not parse, CRCR_E_TOO_LARGE past out's cap, CRCR_E_NOMEM. */
crcr_err callback_clean_body(const char *text, size_t len, const cb_fields *f, buf_t *out);

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
