/*
 * dispatch.h - the repository_dispatch request body, exactly as the upstream relay sends it:
 *
 *   {"event_type":"<event>","client_payload":{"event_type":"<event>","delivery_id":"<id>",
 *    "payload":<the webhook body, byte for byte>[,"callback_token":"<t>"]}}
 *
 * The payload bytes are embedded verbatim. Only when the serialised body exceeds the budget
 * (CRCR_DISPATCH_BUDGET) is the payload parsed and trimmed, deterministically, in this order
 * until it fits (§5.2):
 *   1. payload.pull_request.body
 *   2. every "*_url" string and "_links" object outside the always-kept fields
 *   3. user / owner / sender objects reduced to {login, id, type}
 *   4. repository reduced to its identity fields
 * Never removed: action, number, pull_request.{number,state,merged,head.{sha,ref,repo.full_name},
 * base.{sha,ref},labels[].name,draft,html_url}, repository.full_name, ref, before, after,
 * deleted, created, forced. The removed steps are listed in client_payload.trimmed.
 */
#ifndef CRCR_DISPATCH_H
#define CRCR_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"

typedef struct dispatch_input {
    const char *event;       /* X-GitHub-Event: pull_request or push */
    const char *delivery_id; /* X-GitHub-Delivery */
    const char *payload;     /* the verified webhook body */
    size_t payload_len;
    const char *callback_token; /* relay-signed token for callbacks, or NULL */
    size_t budget;              /* largest body allowed, bytes */
} dispatch_input;

typedef struct dispatch_output {
    buf_t body;         /* the request body (caller frees with dispatch_output_free) */
    bool trimmed;       /* true when the payload had to be trimmed */
    buf_t trimmed_note; /* space-separated trimmed paths, "" when not trimmed */
} dispatch_output;

void dispatch_output_init(dispatch_output *o);
void dispatch_output_free(dispatch_output *o);

/*
 * Builds the body. Returns CRCR_OK, or CRCR_E_PERMANENT when it cannot fit the budget even after
 * every trimming step (with the reason in `err`), or CRCR_E_INVALID when trimming is needed but the
 * payload is not a JSON object.
 */
crcr_err dispatch_build(const dispatch_input *in, dispatch_output *out, char *err, size_t errsz);

#endif
