/*
 * outcome.h - what people are shown of a run and of an outbox row: one classifier for the HUD's
 * pages, the JSON API's `result` field and level health, from the words the store keeps
 * (vocab.h).
 *
 * A run's outcome: superseded when the relay ended it (its `ended` reason: superseded or
 * pr_closed, §3.12), whatever it reported before or after; else running while its status is not
 * completed; completed, its conclusion decides: success, failure, cancelled, timed_out, and other
 * for anything else (none, neutral, skipped, startup_failure...). Health counts `other` as a
 * failure and keeps `superseded` out of its rates (health.h).
 *
 * An outbox row's state for people: queued ("retrying" once an attempt failed), "sending"
 * (running), sent, "dry-run", dead, withdrawn (a dispatch superseded before it was sent),
 * "unknown" for a word the relay never writes.
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
    OUTCOME_OTHER,      /* completed with any other conclusion, or none */
    OUTCOME_SUPERSEDED, /* ended by the relay: a newer dispatch, or the PR closed */
    OUTCOME_COUNT
} crcr_outcome;

/* The outcome of a run from its stored status and conclusion (either may be NULL). */
crcr_outcome outcome_of(const char *status, const char *conclusion);
/* The same for a stored run with its `ended` reason (NULL: not ended): superseded when it names
 * an end reason (vocab.h), else outcome_of(status, conclusion). */
crcr_outcome outcome_of_run(const char *status, const char *conclusion, const char *ended);
/* The API's word: running, success, failure, cancelled, timed_out, other or superseded. */
const char *outcome_name(crcr_outcome o);
/* The HUD's chip class: "chip-" and the word ("chip-other" for anything out of range). */
const char *outcome_chip_class(crcr_outcome o);

/* An outbox row's state as the HUD and the API label it: "queued" or "retrying" (attempts > 0),
 * "sending", "sent", "dry-run", "dead", "withdrawn", "unknown". */
const char *ob_state_label(crcr_ob_state s, int attempts);
/* Its CSS class: "state-queued", "state-retrying", "state-running", "state-sent",
 * "state-dry_run", "state-dead", "state-withdrawn", "state-other". */
const char *ob_state_class(crcr_ob_state s, int attempts);

#endif
