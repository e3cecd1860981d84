/* outcome.c - runs and outbox rows as people are shown them; see outcome.h. */
#include "outcome.h"

static const char *const OUTCOME_NAMES[OUTCOME_COUNT] = {
    [OUTCOME_RUNNING] = "running",       [OUTCOME_SUCCESS] = "success",
    [OUTCOME_FAILURE] = "failure",       [OUTCOME_CANCELLED] = "cancelled",
    [OUTCOME_TIMED_OUT] = "timed_out",   [OUTCOME_OTHER] = "other",
    [OUTCOME_SUPERSEDED] = "superseded",
};

static const char *const OUTCOME_CHIPS[OUTCOME_COUNT] = {
    [OUTCOME_RUNNING] = "chip-running",       [OUTCOME_SUCCESS] = "chip-success",
    [OUTCOME_FAILURE] = "chip-failure",       [OUTCOME_CANCELLED] = "chip-cancelled",
    [OUTCOME_TIMED_OUT] = "chip-timed_out",   [OUTCOME_OTHER] = "chip-other",
    [OUTCOME_SUPERSEDED] = "chip-superseded",
};

crcr_outcome outcome_of(const char *status, const char *conclusion)
{
    if (run_status_parse(status) != RUN_STATUS_COMPLETED)
        return OUTCOME_RUNNING;
    switch (conclusion_parse(conclusion)) {
    case CONCLUSION_SUCCESS:
        return OUTCOME_SUCCESS;
    case CONCLUSION_FAILURE:
        return OUTCOME_FAILURE;
    case CONCLUSION_CANCELLED:
        return OUTCOME_CANCELLED;
    case CONCLUSION_TIMED_OUT:
        return OUTCOME_TIMED_OUT;
    default:
        return OUTCOME_OTHER;
    }
}

crcr_outcome outcome_of_run(const char *status, const char *conclusion, const char *ended)
{
    if (end_reason_parse(ended) != END_REASON_UNKNOWN)
        return OUTCOME_SUPERSEDED;
    return outcome_of(status, conclusion);
}

const char *outcome_name(crcr_outcome o)
{
    return o >= 0 && o < OUTCOME_COUNT ? OUTCOME_NAMES[o] : OUTCOME_NAMES[OUTCOME_OTHER];
}

const char *outcome_chip_class(crcr_outcome o)
{
    return o >= 0 && o < OUTCOME_COUNT ? OUTCOME_CHIPS[o] : OUTCOME_CHIPS[OUTCOME_OTHER];
}

/* An outbox state's label and class for people; a queued row that has failed an attempt is
 * "retrying" instead. */
static const struct {
    const char *label, *cls;
} OB_STATE_PEOPLE[OB_STATE_COUNT] = {
    [OB_STATE_UNKNOWN] = {"unknown", "state-other"},
    [OB_STATE_QUEUED] = {"queued", "state-queued"},
    [OB_STATE_RUNNING] = {"sending", "state-running"},
    [OB_STATE_SENT] = {"sent", "state-sent"},
    [OB_STATE_DRY_RUN] = {"dry-run", "state-dry_run"},
    [OB_STATE_DEAD] = {"dead", "state-dead"},
    [OB_STATE_WITHDRAWN] = {"withdrawn", "state-withdrawn"},
};

static int ob_state_index(crcr_ob_state s)
{
    return s > OB_STATE_UNKNOWN && s < OB_STATE_COUNT ? (int)s : OB_STATE_UNKNOWN;
}

const char *ob_state_label(crcr_ob_state s, int attempts)
{
    if (s == OB_STATE_QUEUED && attempts > 0)
        return "retrying";
    return OB_STATE_PEOPLE[ob_state_index(s)].label;
}

const char *ob_state_class(crcr_ob_state s, int attempts)
{
    if (s == OB_STATE_QUEUED && attempts > 0)
        return "state-retrying";
    return OB_STATE_PEOPLE[ob_state_index(s)].cls;
}
