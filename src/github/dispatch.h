/*
 * dispatch.h - the repository_dispatch request body, exactly as the upstream relay sends it:
 *
 *   {"event_type":"<event>","client_payload":{"event_type":"<event>","delivery_id":"<id>",
 *    "payload":<the webhook body, byte for byte>[,"depends_on":{..}][,"callback_token":"<t>"]}}
 *
 * depends_on is crcr's (§3.13, depends_on.h): the downstream PR a Depends-On line of the PyTorch
 * PR named, resolved at dispatch time. client_payload has at most 6 keys (GitHub allows 10); the
 * pair counts in the budget like the rest of the envelope.
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
#include <stdint.h>

#include "buf.h"
#include "config.h"
#include "err.h"

typedef struct dispatch_input {
    const char *event;       /* X-GitHub-Event: pull_request or push */
    const char *delivery_id; /* X-GitHub-Delivery */
    const char *payload;     /* the verified webhook body */
    size_t payload_len;
    const char *callback_token; /* relay-signed token for callbacks, or NULL */
    const char *depends_on;     /* client_payload.depends_on, a JSON object, or NULL */
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

/* What a dispatch outbox row's request is built from: the row's delivery and target (borrowed). */
typedef struct dispatch_src {
    const char *event, *delivery_id;
    const char *payload;
    size_t payload_len;
    const char *target, *head_sha;
    int64_t pr_number;
    const char *pair; /* the row's Depends-On record (depends_on.h), NULL or "" when unpaired:
                         a resolved pair is sent as client_payload.depends_on and bound by the
                         callback token */
    size_t pair_len;
} dispatch_src;

/* Builds the exact repository_dispatch body a dispatch row sends: dispatch_build's envelope around
 * the delivery's payload, trimmed to CRCR_DISPATCH_BUDGET, with the relay-signed callback token
 * (cbtoken.h) for the row's target, delivery, head sha, PR and resolved pair under
 * GITHUB_APP_SECRET. `out` is
 * initialised by dispatch_output_init and owned by the caller. The outbox workers use it to send,
 * and the delivery document (delivery_doc.h) to show a dry-run row's request, which is not
 * stored: the same bytes while GITHUB_APP_SECRET and CRCR_DISPATCH_BUDGET are unchanged. */
crcr_err dispatch_row_body(const crcr_config *cfg, const dispatch_src *src, dispatch_output *out,
                           char *err, size_t errsz);

/* True when dispatch_row_body would build `src`'s body without trimming and without an error
 * (short of memory): well-formed inputs, no Depends-On record, and the payload fits the budget
 * beside the longest envelope its event and delivery id can make. Nothing is built: a dry-run
 * row, which sends nothing and stores no request, is done without its body (outbox.c). */
bool dispatch_row_verbatim(const crcr_config *cfg, const dispatch_src *src);

#endif
