/* outcome.c - runs and outbox rows as people are shown them; see outcome.h. */
#include "outcome.h"

static const char *const OUTCOME_NAMES[OUTCOME_COUNT] = {
    [OUTCOME_RUNNING] = "running",     [OUTCOME_SUCCESS] = "success",
    [OUTCOME_FAILURE] = "failure",     [OUTCOME_CANCELLED] = "cancelled",
    [OUTCOME_TIMED_OUT] = "timed_out", [OUTCOME_OTHER] = "other",
};

static const char *const OUTCOME_CHIPS[OUTCOME_COUNT] = {
    [OUTCOME_RUNNING] = "chip-running",     [OUTCOME_SUCCESS] = "chip-success",
    [OUTCOME_FAILURE] = "chip-failure",     [OUTCOME_CANCELLED] = "chip-cancelled",
    [OUTCOME_TIMED_OUT] = "chip-timed_out", [OUTCOME_OTHER] = "chip-other",
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

const char *outcome_name(crcr_outcome o)
{
    return o >= 0 && o < OUTCOME_COUNT ? OUTCOME_NAMES[o] : OUTCOME_NAMES[OUTCOME_OTHER];
}

const char *outcome_chip_class(crcr_outcome o)
{
    return o >= 0 && o < OUTCOME_COUNT ? OUTCOME_CHIPS[o] : OUTCOME_CHIPS[OUTCOME_OTHER];
}

const char *ob_state_label(crcr_ob_state s, int attempts)
{
    switch (s) {
    case OB_STATE_QUEUED:
        return attempts > 0 ? "retrying" : "queued";
    case OB_STATE_RUNNING:
        return "sending";
    case OB_STATE_SENT:
        return "sent";
    case OB_STATE_DRY_RUN:
        return "dry-run";
    case OB_STATE_DEAD:
        return "dead";
    default:
        return "unknown";
    }
}

const char *ob_state_class(crcr_ob_state s, int attempts)
{
    switch (s) {
    case OB_STATE_QUEUED:
        return attempts > 0 ? "state-retrying" : "state-queued";
    case OB_STATE_RUNNING:
        return "state-running";
    case OB_STATE_SENT:
        return "state-sent";
    case OB_STATE_DRY_RUN:
        return "state-dry_run";
    case OB_STATE_DEAD:
        return "state-dead";
    default:
        return "state-other";
    }
}
