/*
 * outcome.h - what people are shown of a run and of an outbox row: one classifier for the HUD's
 * pages, the JSON API's `result` field and level health, from the words the store keeps
 * (vocab.h).
 *
 * A run's outcome: running while its status is not completed; completed, its conclusion decides:
 * success, failure, cancelled, timed_out, and other for anything else (none, neutral, skipped,
 * startup_failure...). Health counts `other` as a failure (health.h).
 *
 * An outbox row's state for people: queued ("retrying" once an attempt failed), "sending"
 * (running), sent, "dry-run", dead, "unknown" for a word the relay never writes.
 *
 * CSS classes come from these fixed tables, never from stored text (html.h's rule).
 */
#ifndef CRCR_OUTCOME_H
#define CRCR_OUTCOME_H

#include "vocab.h"

typedef enum {
    OUTCOME_RUNNING = 0, /* not completed yet */
    OUTCOME_SUCCESS,
    OUTCOME_FAILURE,
    OUTCOME_CANCELLED,
    OUTCOME_TIMED_OUT,
    OUTCOME_OTHER, /* completed with any other conclusion, or none */
    OUTCOME_COUNT
} crcr_outcome;

/* The outcome of a run from its stored status and conclusion (either may be NULL). */
crcr_outcome outcome_of(const char *status, const char *conclusion);
/* The API's word: running, success, failure, cancelled, timed_out or other. */
const char *outcome_name(crcr_outcome o);
/* The HUD's chip class: "chip-" and the word ("chip-other" for anything out of range). */
const char *outcome_chip_class(crcr_outcome o);

/* An outbox row's state as the HUD and the API label it: "queued" or "retrying" (attempts > 0),
 * "sending", "sent", "dry-run", "dead", "unknown". */
const char *ob_state_label(crcr_ob_state s, int attempts);
/* Its CSS class: "state-queued", "state-retrying", "state-running", "state-sent",
 * "state-dry_run", "state-dead", "state-other". */
const char *ob_state_class(crcr_ob_state s, int attempts);

#endif
