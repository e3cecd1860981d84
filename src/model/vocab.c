/*
 * vocab.c - the name tables of the relay's vocabularies; see vocab.h.
 *
 * These tables are the only place in src/ where the words are spelled (scripts/check-source.py
 * reads them from here: keep one table per concept, indexed by its enum).
 */
#include "vocab.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

static const char *const OB_KIND_NAMES[OB_KIND_COUNT] = {
    [OB_KIND_DISPATCH] = "dispatch",
    [OB_KIND_CHECK_RUN] = "check_run",
    [OB_KIND_RERUN] = "rerun",
    [OB_KIND_RERUN_SUITE] = "rerun_suite",
    [OB_KIND_HUD_FORWARD] = "hud_forward",
    [OB_KIND_COMMENT] = "comment",
};

static const char *const OB_STATE_NAMES[OB_STATE_COUNT] = {
    [OB_STATE_QUEUED] = "queued", [OB_STATE_RUNNING] = "running",
    [OB_STATE_SENT] = "sent",     [OB_STATE_DRY_RUN] = "dry_run",
    [OB_STATE_DEAD] = "dead",     [OB_STATE_WITHDRAWN] = "withdrawn",
};

static const char *const RUN_STATUS_NAMES[RUN_STATUS_COUNT] = {
    [RUN_STATUS_DISPATCHED] = "dispatched",
    [RUN_STATUS_IN_PROGRESS] = "in_progress",
    [RUN_STATUS_COMPLETED] = "completed",
};

static const char *const CONCLUSION_NAMES[CONCLUSION_COUNT] = {
    [CONCLUSION_ACTION_REQUIRED] = "action_required",
    [CONCLUSION_CANCELLED] = "cancelled",
    [CONCLUSION_FAILURE] = "failure",
    [CONCLUSION_NEUTRAL] = "neutral",
    [CONCLUSION_SUCCESS] = "success",
    [CONCLUSION_SKIPPED] = "skipped",
    [CONCLUSION_STALE] = "stale",
    [CONCLUSION_TIMED_OUT] = "timed_out",
};

static const char *const END_REASON_NAMES[END_REASON_COUNT] = {
    [END_REASON_SUPERSEDED] = "superseded",
    [END_REASON_PR_CLOSED] = "pr_closed",
};

/* The word of value `v` of a table of `n` (index 0 is the unknown value, without a word). */
static const char *name_of(const char *const *names, int n, int v)
{
    return v > 0 && v < n ? names[v] : NULL;
}

/* The value of word `s` in a table of `n`, 0 (unknown) when it is none of them. */
static int parse_of(const char *const *names, int n, const char *s)
{
    for (int v = 1; s && v < n; v++) {
        if (names[v] && strcmp(s, names[v]) == 0)
            return v;
    }
    return 0;
}

const char *ob_kind_name(crcr_ob_kind k)
{
    return name_of(OB_KIND_NAMES, OB_KIND_COUNT, (int)k);
}

crcr_ob_kind ob_kind_parse(const char *s)
{
    return (crcr_ob_kind)parse_of(OB_KIND_NAMES, OB_KIND_COUNT, s);
}

const char *ob_state_name(crcr_ob_state s)
{
    return name_of(OB_STATE_NAMES, OB_STATE_COUNT, (int)s);
}

crcr_ob_state ob_state_parse(const char *s)
{
    return (crcr_ob_state)parse_of(OB_STATE_NAMES, OB_STATE_COUNT, s);
}

const char *run_status_name(crcr_run_status s)
{
    return name_of(RUN_STATUS_NAMES, RUN_STATUS_COUNT, (int)s);
}

crcr_run_status run_status_parse(const char *s)
{
    return (crcr_run_status)parse_of(RUN_STATUS_NAMES, RUN_STATUS_COUNT, s);
}

const char *conclusion_name(crcr_conclusion c)
{
    return name_of(CONCLUSION_NAMES, CONCLUSION_COUNT, (int)c);
}

crcr_conclusion conclusion_parse(const char *s)
{
    return (crcr_conclusion)parse_of(CONCLUSION_NAMES, CONCLUSION_COUNT, s);
}

crcr_conclusion conclusion_parse_reported(const char *s)
{
    for (int v = 1; s && v < CONCLUSION_COUNT; v++) {
        if (strcasecmp(s, CONCLUSION_NAMES[v]) == 0)
            return (crcr_conclusion)v;
    }
    return CONCLUSION_UNKNOWN;
}

const char *conclusion_names_list(void)
{
    /* CONCLUSION_NAMES in enum order, as GitHub's documentation lists them. */
    return "action_required, cancelled, failure, neutral, success, skipped, stale, timed_out";
}

const char *end_reason_name(crcr_end_reason r)
{
    return name_of(END_REASON_NAMES, END_REASON_COUNT, (int)r);
}

crcr_end_reason end_reason_parse(const char *s)
{
    return (crcr_end_reason)parse_of(END_REASON_NAMES, END_REASON_COUNT, s);
}
