/*
 * vocab.h - the relay's vocabularies: one enum and one name table per concept, with the words
 * the store keeps, the APIs show and GitHub speaks.
 *
 *   outbox kind    what an outbox row does: dispatch, check_run, rerun, rerun_suite,
 *                  hud_forward, comment (the `kind` column, the metrics' `kind` label)
 *   outbox state   where an outbox row is: queued --claim--> running --> sent | dry_run | dead
 *                  (the `state` column; store.h); a queued dispatch a newer one supersedes
 *                  goes queued --> withdrawn. A delivery's own status is "queued" too.
 *   run status     where a downstream run is: dispatched -> in_progress -> completed (the runs'
 *                  `state` column, a callback's workflow.status; run_state.h is the machine)
 *   conclusion     how a completed run or check run ended, GitHub's list for check runs:
 *                  action_required, cancelled, failure, neutral, success, skipped, stale,
 *                  timed_out. A completed callback must name one (conclusion_parse_reported);
 *                  rows of older stores may hold another (CONCLUSION_UNKNOWN).
 *   end reason     why the relay ended a dispatch's open runs itself (§3.12): superseded (a
 *                  newer dispatch of the same PR to the same repository) or pr_closed (the
 *                  PR was closed). The `ended` column of runs and the `reason` of dispatch_ends.
 *
 * Each name function returns the word of a known value and NULL for the UNKNOWN value (or any
 * out of range); each parse function returns the value of a word, the UNKNOWN value for NULL or
 * any other text (exact, case-sensitive: the words are what the relay itself writes). The store
 * keeps the words as text, so a database stays readable and its SQL says what it selects;
 * scripts/check-source.py fails on any of these words spelled as a string literal elsewhere in
 * src/, and on a word in the store's SQL that is not in these tables.
 *
 * What people are shown of a run or an outbox row (success, running, "retrying"...) is
 * outcome.h's.
 */
#ifndef CRCR_VOCAB_H
#define CRCR_VOCAB_H

typedef enum {
    OB_KIND_UNKNOWN = 0,
    OB_KIND_DISPATCH,    /* repository_dispatch to a downstream repo */
    OB_KIND_CHECK_RUN,   /* a check run on the upstream PR */
    OB_KIND_RERUN,       /* re-run of a downstream workflow run */
    OB_KIND_RERUN_SUITE, /* "re-run all checks": list the suite, queue its re-runs */
    OB_KIND_HUD_FORWARD, /* a result forwarded to the external HUD */
    OB_KIND_COMMENT,     /* the on-call comment on the upstream PR */
    OB_KIND_COUNT
} crcr_ob_kind;

typedef enum {
    OB_STATE_UNKNOWN = 0,
    OB_STATE_QUEUED,    /* due at next_attempt_at */
    OB_STATE_RUNNING,   /* claimed by a worker under a lease */
    OB_STATE_SENT,      /* done */
    OB_STATE_DRY_RUN,   /* done without sending (no App credentials) */
    OB_STATE_DEAD,      /* given up: needs an operator */
    OB_STATE_WITHDRAWN, /* a dispatch never sent: superseded (or its PR closed) while queued */
    OB_STATE_COUNT
} crcr_ob_state;

typedef enum {
    RUN_STATUS_UNKNOWN = 0,
    RUN_STATUS_DISPATCHED,  /* dispatched, no callback yet (the dispatch record, no run row) */
    RUN_STATUS_IN_PROGRESS, /* its in_progress callback came */
    RUN_STATUS_COMPLETED,   /* its completed callback came (or the sweeper timed it out) */
    RUN_STATUS_COUNT
} crcr_run_status;

typedef enum {
    CONCLUSION_UNKNOWN = 0, /* none, or a word GitHub does not list for check runs */
    CONCLUSION_ACTION_REQUIRED,
    CONCLUSION_CANCELLED,
    CONCLUSION_FAILURE,
    CONCLUSION_NEUTRAL,
    CONCLUSION_SUCCESS,
    CONCLUSION_SKIPPED,
    CONCLUSION_STALE,
    CONCLUSION_TIMED_OUT,
    CONCLUSION_COUNT
} crcr_conclusion;

typedef enum {
    END_REASON_UNKNOWN = 0, /* not ended (NULL), or a word the relay never writes */
    END_REASON_SUPERSEDED,  /* a newer dispatch of the PR to the repository */
    END_REASON_PR_CLOSED,   /* the PR was closed */
    END_REASON_COUNT
} crcr_end_reason;

const char *ob_kind_name(crcr_ob_kind k);
crcr_ob_kind ob_kind_parse(const char *s);

const char *ob_state_name(crcr_ob_state s);
crcr_ob_state ob_state_parse(const char *s);

const char *run_status_name(crcr_run_status s);
crcr_run_status run_status_parse(const char *s);

const char *conclusion_name(crcr_conclusion c);
crcr_conclusion conclusion_parse(const char *s);
/* A conclusion as a client reports it: one of GitHub's words in any ASCII case ("Success" and
 * "SUCCESS" are success; upstream's action passes ${{ job.status }}, which is lower case), else
 * CONCLUSION_UNKNOWN. The relay keeps and sends conclusion_name() of it. */
crcr_conclusion conclusion_parse_reported(const char *s);
/* GitHub's conclusions for messages: "action_required, cancelled, ..., timed_out". */
const char *conclusion_names_list(void);

const char *end_reason_name(crcr_end_reason r);
crcr_end_reason end_reason_parse(const char *s);

#endif
