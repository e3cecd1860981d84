/* Unit tests for the relay's vocabularies (vocab.h) and what people are shown of runs and outbox
 * rows (outcome.h): every word parses back to its value, unknown text is the unknown value, and
 * the classes come from fixed tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "outcome.h"
#include "vocab.h"

static void every_word_parses_back_to_its_value(void **state)
{
    for (int k = 1; k < OB_KIND_COUNT; k++) {
        assert_non_null(ob_kind_name((crcr_ob_kind)k));
        assert_int_equal(ob_kind_parse(ob_kind_name((crcr_ob_kind)k)), k);
    }
    for (int s = 1; s < OB_STATE_COUNT; s++) {
        assert_non_null(ob_state_name((crcr_ob_state)s));
        assert_int_equal(ob_state_parse(ob_state_name((crcr_ob_state)s)), s);
    }
    for (int s = 1; s < RUN_STATUS_COUNT; s++) {
        assert_non_null(run_status_name((crcr_run_status)s));
        assert_int_equal(run_status_parse(run_status_name((crcr_run_status)s)), s);
    }
    for (int c = 1; c < CONCLUSION_COUNT; c++) {
        assert_non_null(conclusion_name((crcr_conclusion)c));
        assert_int_equal(conclusion_parse(conclusion_name((crcr_conclusion)c)), c);
    }
}

static void the_words_are_the_stored_ones(void **state)
{
    /* What the store, the APIs and GitHub spell: renaming one is a schema and API change. */
    assert_string_equal(ob_kind_name(OB_KIND_DISPATCH), "dispatch");
    assert_string_equal(ob_kind_name(OB_KIND_CHECK_RUN), "check_run");
    assert_string_equal(ob_kind_name(OB_KIND_RERUN), "rerun");
    assert_string_equal(ob_kind_name(OB_KIND_RERUN_SUITE), "rerun_suite");
    assert_string_equal(ob_kind_name(OB_KIND_HUD_FORWARD), "hud_forward");
    assert_string_equal(ob_kind_name(OB_KIND_COMMENT), "comment");
    assert_string_equal(ob_state_name(OB_STATE_QUEUED), "queued");
    assert_string_equal(ob_state_name(OB_STATE_RUNNING), "running");
    assert_string_equal(ob_state_name(OB_STATE_SENT), "sent");
    assert_string_equal(ob_state_name(OB_STATE_DRY_RUN), "dry_run");
    assert_string_equal(ob_state_name(OB_STATE_DEAD), "dead");
    assert_string_equal(run_status_name(RUN_STATUS_DISPATCHED), "dispatched");
    assert_string_equal(run_status_name(RUN_STATUS_IN_PROGRESS), "in_progress");
    assert_string_equal(run_status_name(RUN_STATUS_COMPLETED), "completed");
    static const char *const github[] = {"action_required", "cancelled", "failure", "neutral",
                                         "success",         "skipped",   "stale",   "timed_out"};
    for (size_t i = 0; i < sizeof(github) / sizeof(github[0]); i++)
        assert_int_not_equal(conclusion_parse(github[i]), CONCLUSION_UNKNOWN);
}

static void unknown_text_is_the_unknown_value(void **state)
{
    assert_int_equal(ob_kind_parse(NULL), OB_KIND_UNKNOWN);
    assert_int_equal(ob_kind_parse("telegram"), OB_KIND_UNKNOWN);
    assert_int_equal(ob_kind_parse("Dispatch"), OB_KIND_UNKNOWN); /* exact words only */
    assert_int_equal(ob_state_parse(""), OB_STATE_UNKNOWN);
    assert_int_equal(ob_state_parse("<b>"), OB_STATE_UNKNOWN);
    assert_int_equal(run_status_parse("queued"), RUN_STATUS_UNKNOWN);
    assert_int_equal(conclusion_parse("startup_failure"), CONCLUSION_UNKNOWN);
    assert_null(ob_kind_name(OB_KIND_UNKNOWN));
    assert_null(ob_state_name(OB_STATE_COUNT));
    assert_null(run_status_name((crcr_run_status)-1));
    assert_null(conclusion_name(CONCLUSION_UNKNOWN));
}

/* What a client reports: GitHub's words in any ASCII case; the list for messages is the table. */
static void reported_conclusions_are_githubs_in_any_case(void **state)
{
    assert_int_equal(conclusion_parse_reported("success"), CONCLUSION_SUCCESS);
    assert_int_equal(conclusion_parse_reported("Success"), CONCLUSION_SUCCESS);
    assert_int_equal(conclusion_parse_reported("TIMED_OUT"), CONCLUSION_TIMED_OUT);
    assert_int_equal(conclusion_parse_reported("Action_Required"), CONCLUSION_ACTION_REQUIRED);
    static const char *const bad[] = {
        "sucess", "", "success ", " success", "timed-out", "in_progress", "startup_failure"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(conclusion_parse_reported(bad[i]), CONCLUSION_UNKNOWN);
    assert_int_equal(conclusion_parse_reported(NULL), CONCLUSION_UNKNOWN);
    char list[256] = "";
    size_t n = 0;
    for (int c = 1; c < CONCLUSION_COUNT; c++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", c > 1 ? ", " : "",
                              conclusion_name((crcr_conclusion)c));
    assert_string_equal(conclusion_names_list(), list);
}

static void outcomes_classify_status_and_conclusion(void **state)
{
    assert_int_equal(outcome_of("completed", "success"), OUTCOME_SUCCESS);
    assert_int_equal(outcome_of("completed", "failure"), OUTCOME_FAILURE);
    assert_int_equal(outcome_of("completed", "cancelled"), OUTCOME_CANCELLED);
    assert_int_equal(outcome_of("completed", "timed_out"), OUTCOME_TIMED_OUT);
    assert_int_equal(outcome_of("completed", "neutral"), OUTCOME_OTHER);
    assert_int_equal(outcome_of("completed", "startup_failure"), OUTCOME_OTHER);
    assert_int_equal(outcome_of("completed", NULL), OUTCOME_OTHER);
    assert_int_equal(outcome_of("in_progress", "failure"), OUTCOME_RUNNING);
    assert_int_equal(outcome_of(NULL, NULL), OUTCOME_RUNNING);
    /* The API's `result` words. */
    static const char *const words[OUTCOME_COUNT] = {
        "running", "success", "failure", "cancelled", "timed_out", "other", "superseded"};
    for (int o = 0; o < OUTCOME_COUNT; o++)
        assert_string_equal(outcome_name((crcr_outcome)o), words[o]);
}

static void chip_classes_come_from_a_fixed_table(void **state)
{
    assert_string_equal(outcome_chip_class(outcome_of("completed", "success")), "chip-success");
    assert_string_equal(outcome_chip_class(outcome_of("completed", "failure")), "chip-failure");
    assert_string_equal(outcome_chip_class(outcome_of("completed", "cancelled")), "chip-cancelled");
    assert_string_equal(outcome_chip_class(outcome_of("completed", "timed_out")), "chip-timed_out");
    assert_string_equal(outcome_chip_class(outcome_of("in_progress", NULL)), "chip-running");
    assert_string_equal(outcome_chip_class(outcome_of(NULL, "success")), "chip-running");
    assert_string_equal(outcome_chip_class(outcome_of("completed", "x\" onmouseover=\"alert(1)")),
                        "chip-other");
    assert_string_equal(outcome_chip_class(outcome_of("completed", NULL)), "chip-other");
}

static void outbox_states_have_classes_and_words(void **state)
{
    assert_string_equal(ob_state_class(ob_state_parse("queued"), 0), "state-queued");
    assert_string_equal(ob_state_class(ob_state_parse("queued"), 2), "state-retrying");
    assert_string_equal(ob_state_label(ob_state_parse("queued"), 2), "retrying");
    assert_string_equal(ob_state_class(ob_state_parse("dead"), 12), "state-dead");
    assert_string_equal(ob_state_class(ob_state_parse("dry_run"), 1), "state-dry_run");
    assert_string_equal(ob_state_label(ob_state_parse("dry_run"), 1), "dry-run");
    assert_string_equal(ob_state_class(ob_state_parse("sent"), 1), "state-sent");
    assert_string_equal(ob_state_label(ob_state_parse("running"), 0), "sending");
    assert_string_equal(ob_state_class(ob_state_parse("<b>"), 0), "state-other");
    assert_string_equal(ob_state_label(ob_state_parse(NULL), 0), "unknown");
}

static void end_reasons_supersede_every_outcome_and_withdrawn_rows_have_a_word(void **state)
{
    assert_string_equal(end_reason_name(END_REASON_SUPERSEDED), "superseded");
    assert_string_equal(end_reason_name(END_REASON_PR_CLOSED), "pr_closed");
    assert_null(end_reason_name(END_REASON_UNKNOWN));
    assert_int_equal(end_reason_parse("pr_closed"), END_REASON_PR_CLOSED);
    assert_int_equal(end_reason_parse("Superseded"), END_REASON_UNKNOWN);
    assert_int_equal(end_reason_parse(NULL), END_REASON_UNKNOWN);
    assert_int_equal(outcome_of_run("completed", "failure", "superseded"), OUTCOME_SUPERSEDED);
    assert_int_equal(outcome_of_run("in_progress", NULL, "pr_closed"), OUTCOME_SUPERSEDED);
    assert_int_equal(outcome_of_run("completed", "failure", NULL), OUTCOME_FAILURE);
    assert_int_equal(outcome_of_run("completed", "failure", ""), OUTCOME_FAILURE);
    assert_int_equal(outcome_of_run("completed", "failure", "x\"y"), OUTCOME_FAILURE);
    assert_string_equal(outcome_chip_class(OUTCOME_SUPERSEDED), "chip-superseded");
    assert_int_equal(ob_state_parse("withdrawn"), OB_STATE_WITHDRAWN);
    assert_string_equal(ob_state_label(OB_STATE_WITHDRAWN, 1), "withdrawn");
    assert_string_equal(ob_state_class(OB_STATE_WITHDRAWN, 1), "state-withdrawn");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_word_parses_back_to_its_value),
        cmocka_unit_test(the_words_are_the_stored_ones),
        cmocka_unit_test(unknown_text_is_the_unknown_value),
        cmocka_unit_test(reported_conclusions_are_githubs_in_any_case),
        cmocka_unit_test(outcomes_classify_status_and_conclusion),
        cmocka_unit_test(end_reasons_supersede_every_outcome_and_withdrawn_rows_have_a_word),
        cmocka_unit_test(chip_classes_come_from_a_fixed_table),
        cmocka_unit_test(outbox_states_have_classes_and_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
