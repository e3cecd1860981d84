/*
 * webhook.h - POST /github/webhook, in the upstream relay's order of checks:
 *   1. X-GitHub-Event not pull_request/push/check_run/check_suite/ping -> 200 {"ignored":true}
 *      (before any signature check, as upstream)
 *   2. X-Hub-Signature-256 missing -> 400 "No signature"; wrong -> 401 "Bad signature"
 *      (HMAC-SHA256 over the raw body with GITHUB_APP_SECRET, or GITHUB_APP_SECRET_PREVIOUS)
 *   3. ping -> 200 {"ok":true,"pong":true}
 *   4. body not a JSON object -> 400 "Invalid JSON body"
 *   5. repository.full_name other than UPSTREAM_REPO (case-insensitive) -> 200 {"ignored":true}
 *   6. routing: pull_request opened/reopened/synchronize/closed and push -> dispatch;
 *      other actions -> 200 {"ignored":true}
 *   7. dispatch: X-GitHub-Delivery required (400); the delivery and one outbox row per allowlisted
 *      repo are stored in one transaction -> 202 {"ok":true,"delivery_id":..,"queued":[..]};
 *      a known delivery id -> 200 {"ok":true,"duplicate":true}; store failure -> 503.
 */
#ifndef CRCR_WEBHOOK_H
#define CRCR_WEBHOOK_H

#include "http_server.h"

/* Route handler; ctx is the crcr_app. */
void webhook_handle(void *ctx, const http_request *req, http_response *resp);

#endif
