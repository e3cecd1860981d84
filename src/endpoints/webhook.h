/*
 * webhook.h - POST /github/webhook, in the upstream relay's order of checks:
 *   1. X-GitHub-Event not pull_request/push/check_run/check_suite/ping -> 200 {"ignored":true}
 *      (before any signature check, as upstream). The App's `installation` and
 *      `installation_repositories` events are answered the same, whatever their signature; one
 *      with a valid signature makes the outbox forget the installation ids it keeps for the
 *      installation it names (outbox_installation_changed): their body is read and verified
 *      first, like a relayed event's
 *   2. X-Hub-Signature-256 missing -> 400 "No signature"; wrong -> 401 "Bad signature"
 *      (HMAC-SHA256 over the raw body with GITHUB_APP_SECRET, or GITHUB_APP_SECRET_PREVIOUS),
 *      computed as the body arrives (webhook_body_auth); a header that is not "sha256=<64 hex>"
 *      is answered 401 from the headers, before the body is read
 *   3. ping -> 200 {"ok":true,"pong":true}
 *   4. body not a JSON object -> 400 "Invalid JSON body"
 *   5. repository.full_name other than UPSTREAM_REPO (case-insensitive) -> 200 {"ignored":true},
 *      except pull_request synchronize of an allowlisted repository's PR that an open upstream
 *      PR names in a Depends-On line (§3.13): that upstream PR is dispatched again to that
 *      repository only (202 {"ok":true,"delivery_id":..,"queued":[repo],"redispatched":
 *      [{"pull_request":N,"delivery_id":"<id>:prN"}]}; a redelivery: 200 duplicate)
 *   5b. a signed push that changed the allowlist's file (or the CI providers map's) on the branch
 *      of its URL makes that source reload now (allowlist_source_watches), whatever else it does
 *   6. routing: pull_request opened/reopened/synchronize/closed and push -> dispatch (a PR's
 *      supersedes the PR's older dispatches, §3.12; its Depends-On lines pair repositories,
 *      §3.13); pull_request edited of an open PR whose body's Depends-On lines changed ->
 *      dispatch to the repositories whose pair changed only (else {"ignored":true});
 *      pull_request labeled ciflow/crcr/<device> -> mark the head sha wanted for the device's L3
 *      repos and back-fill check runs of jobs already reported (200 {"ok":true,
 *      "created_check_runs":[..]}); check_run rerequested on a crcr check run of an L3+ repo ->
 *      queue rerun-failed-jobs (200 {"ok":true,"rerun":[repo]}); check_suite rerequested ->
 *      queue the suite's full re-runs (200 {"ok":true,"rerun_suite":id});
 *      other actions -> 200 {"ignored":true}
 *   7. dispatch: X-GitHub-Delivery required (400); the delivery and one outbox row per allowlisted
 *      repo are stored in one transaction -> 202 {"ok":true,"delivery_id":..,"queued":[..]};
 *      a known delivery id -> 200 {"ok":true,"duplicate":true}; store failure -> 503.
 */
#ifndef CRCR_WEBHOOK_H
#define CRCR_WEBHOOK_H

#include <stdint.h>

#include "http_server.h"
#include "json.h"
#include "crcr_limits.h"

typedef enum {
    WEBHOOK_IGNORE = 0,  /* 200 {"ignored":true} (reason optional) */
    WEBHOOK_DISPATCH,    /* pull_request opened/reopened/synchronize/closed, push */
    WEBHOOK_LABEL,       /* pull_request labeled ciflow/crcr/<device> */
    WEBHOOK_RERUN_RUN,   /* check_run rerequested on a crcr check run */
    WEBHOOK_RERUN_SUITE, /* check_suite rerequested */
    WEBHOOK_EDIT,        /* pull_request edited with changes.body (a Depends-On change
                            re-dispatches) */
    WEBHOOK_PAIR_PUSH    /* pull_request synchronize of a downstream repository's PR */
} webhook_kind;

typedef struct webhook_route {
    webhook_kind kind;
    const char *reason;            /* WEBHOOK_IGNORE: why, or NULL for the plain answer */
    const char *action;            /* payload action (borrowed), may be NULL */
    const char *device;            /* WEBHOOK_LABEL: the label's device part (borrowed) */
    char repo[CRCR_REPO_NAME_MAX]; /* WEBHOOK_RERUN_RUN: downstream repo from the check name */
    int64_t run_id;                /* WEBHOOK_RERUN_RUN: from external_id */
    int64_t suite_id;              /* WEBHOOK_RERUN_SUITE */
} webhook_route;

/* Decides what a verified, parsed webhook asks for (steps 5-6 above): pure, no I/O, so that it
 * can be unit-tested and fuzzed. `doc` is the parsed body, `event` the X-GitHub-Event. */
void webhook_classify(const char *event, const jv *doc, const char *upstream_repo,
                      webhook_route *r);

/* Route guard (steps 1 and 2's missing header): answers from the headers alone, before the body
 * is read. ctx is the crcr_app. */
bool webhook_guard(void *ctx, const http_request *req, http_response *resp);

/* The route's body check (http_server.h): the HMAC of step 2 under both secrets, fed each chunk of
 * the body as the server reads it, so that a forged body is never kept past the budget of
 * unauthenticated bodies nor read twice. ctx is the crcr_app. */
extern const http_body_auth webhook_body_auth;

/* The route's quick step (http_quick), on the server's reading thread: the signature's verdict,
 * the parse and the route, which never wait. Answers what ends there (a bad signature, a ping,
 * an ignored event, a body that is not JSON: true); otherwise leaves the parsed body and its
 * route in *carry (freed by webhook_carry_free) for webhook_handle. ctx is the crcr_app. */
bool webhook_quick(void *ctx, const http_request *req, http_response *resp, void **carry);
void webhook_carry_free(void *carry);

/* Route handler, behind webhook_guard(); ctx is the crcr_app. Goes on from webhook_quick's carry
 * (req->carry), or does it all itself without one. Uses the body check's verdict
 * (req->body_auth) and verifies the body itself when no check ran. */
void webhook_handle(void *ctx, const http_request *req, http_response *resp);

/* Every path of a webhook body the handlers read (webhook_classify, accept_dispatch, the label
 * and re-run handlers): webhook_handle parses only these (jv_parse_select); the body itself is
 * stored and forwarded verbatim. Add a path here before reading it anywhere from `doc`. */
extern const char *const webhook_json_paths[];
extern const size_t webhook_json_paths_n;

#endif
