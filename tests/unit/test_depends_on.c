/* Unit tests for depends_on.c: Depends-On lines of a PR body, pair records and payloads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "depends_on.h"
#include "json.h"

#define WEB "https://github.com"

static size_t parse(const char *body, const char *web, depends_on_line *out, size_t *ignored)
{
    return depends_on_parse(body, body ? strlen(body) : 0, web, out, CRCR_DEPENDS_ON_MAX, ignored);
}

static void both_forms_with_any_key_case_and_blanks(void **state)
{
    depends_on_line v[CRCR_DEPENDS_ON_MAX];
    size_t ignored = 9;
    const char *body = "Fixes the API.\r\n"
                       "Depends-On: l4-org/relay-l4#7\r\n"
                       "  DEPENDS-ON :\thttps://github.com/Other-Org/npu.backend/pull/123/  \n"
                       "depends-on: https://GitHub.com/x/y/pull/5\n"
                       "Depends-On: a/b#12 trailing text\n"
                       "> Depends-On: quoted/out#1\n"
                       "Depends-Onx: c/d#1\n"
                       "Depends-On c/d#1\n";
    size_t n = parse(body, WEB, v, &ignored);
    assert_int_equal(n, 3);
    assert_string_equal(v[0].repo, "l4-org/relay-l4");
    assert_int_equal(v[0].number, 7);
    assert_string_equal(v[1].repo, "Other-Org/npu.backend");
    assert_int_equal(v[1].number, 123);
    assert_string_equal(v[2].repo, "x/y"); /* the host compares case-insensitively */
    assert_int_equal(v[2].number, 5);
    assert_int_equal(ignored, 1); /* "a/b#12 trailing text" looks like one but is not */
    assert_int_equal(depends_on_find(v, n, "L4-ORG/Relay-L4"), 7);
    assert_int_equal(depends_on_find(v, n, "l4-org/relay"), 0);
    assert_int_equal(depends_on_find(v, 0, "l4-org/relay-l4"), 0);
}

static void the_url_form_is_only_on_the_web_host(void **state)
{
    depends_on_line v[CRCR_DEPENDS_ON_MAX];
    size_t ignored = 0;
    const char *body = "Depends-On: https://github.com/o/r/pull/9\n"
                       "Depends-On: https://ghes.example.com/o/s/pull/10\n"
                       "Depends-On: https://ghes.example.com.evil/o/t/pull/11\n"
                       "Depends-On: https://ghes.example.com/o/u/issues/12\n"
                       "Depends-On: https://ghes.example.com/o/pull/13\n";
    size_t n = parse(body, "https://ghes.example.com", v, &ignored);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].repo, "o/s");
    assert_int_equal(v[0].number, 10);
    assert_int_equal(ignored, 4);
    /* No web host given: github.com's. */
    n = parse(body, NULL, v, &ignored);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].repo, "o/r");
}

static void names_and_numbers_follow_githubs_rules(void **state)
{
    static const char *const bad[] = {
        "Depends-On: o/r#0",    "Depends-On: o/r#-1",  "Depends-On: o/r#12345678901",
        "Depends-On: o/r#",     "Depends-On: #5",      "Depends-On: o#5",
        "Depends-On: -o-/r#5x", "Depends-On: o/r/x#5", "Depends-On: o/..#5",
        "Depends-On: o_o/r#5",  "Depends-On: o/r #5",  "Depends-On: o/r#5#6",
        "Depends-On: ",         "Depends-On:",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        depends_on_line v[CRCR_DEPENDS_ON_MAX];
        size_t ignored = 0;
        if (parse(bad[i], WEB, v, &ignored) != 0)
            fail_msg("accepted: %s", bad[i]);
    }
    depends_on_line v[CRCR_DEPENDS_ON_MAX];
    assert_int_equal(parse("Depends-On: o/r#1234567890", WEB, v, NULL), 1);
    assert_int_equal(v[0].number, 1234567890);
}

static void the_first_line_per_repository_counts_and_at_most_the_limit(void **state)
{
    char body[4096] = "Depends-On: a/one#1\nDepends-On: A/ONE#2\n";
    for (unsigned i = 0; i < CRCR_DEPENDS_ON_MAX + 3; i++) {
        char line[64];
        snprintf(line, sizeof(line), "Depends-On: r/n%u#%u\n", i, i + 10);
        strncat(body, line, sizeof(body) - strlen(body) - 1);
    }
    depends_on_line v[CRCR_DEPENDS_ON_MAX];
    size_t ignored = 0;
    size_t n = parse(body, WEB, v, &ignored);
    assert_int_equal(n, CRCR_DEPENDS_ON_MAX);
    assert_int_equal(v[0].number, 1);
    assert_string_equal(v[1].repo, "r/n0");
    assert_int_equal(ignored, 1 + 4); /* the repeat, and the lines past the limit */
    /* A body longer than CRCR_PR_BODY_MAX is read up to it. */
    size_t big = CRCR_PR_BODY_MAX + 64;
    char *huge = malloc(big + 1);
    memset(huge, '\n', big);
    memcpy(huge + big - 20, "Depends-On: z/z#1\n", 18);
    huge[big] = '\0';
    assert_int_equal(depends_on_parse(huge, big, WEB, v, CRCR_DEPENDS_ON_MAX, NULL), 0);
    memcpy(huge + 10, "Depends-On: z/z#1\n", 18);
    assert_int_equal(depends_on_parse(huge, big, WEB, v, CRCR_DEPENDS_ON_MAX, NULL), 1);
    free(huge);
    assert_int_equal(depends_on_parse(NULL, 0, WEB, v, CRCR_DEPENDS_ON_MAX, NULL), 0);
}

static void records_read_back_in_all_three_forms(void **state)
{
    buf_t b;
    buf_init(&b, 8192);
    assert_int_equal(depends_on_request("l4-org/relay-\"l4", 7, &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b),
                        "{\"depends_on\":{\"repository\":\"l4-org/relay-\\\"l4\",\"number\":7}}");
    depends_on_pair p;
    assert_true(depends_on_record_parse(b.data, b.len, &p));
    assert_string_equal(p.repo, "l4-org/relay-\"l4");
    assert_int_equal(p.number, 7);
    assert_false(p.resolved);
    assert_string_equal(p.problem, "");

    snprintf(p.head_sha, sizeof(p.head_sha), "%s", "0123456789abcdef0123456789abcdef01234567");
    snprintf(p.head_ref, sizeof(p.head_ref), "%s", "fix/api");
    snprintf(p.clone_url, sizeof(p.clone_url), "%s", "https://github.com/o/r.git");
    p.resolved = true;
    buf_reset(&b);
    assert_int_equal(depends_on_record(&p, &b), CRCR_OK);
    depends_on_pair q;
    assert_true(depends_on_record_parse(b.data, b.len, &q));
    assert_true(q.resolved);
    assert_string_equal(q.head_ref, "fix/api");
    buf_reset(&b);
    assert_int_equal(depends_on_payload(&q, &b), CRCR_OK);
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_int_equal(jv_obj_len(doc), 5);
    assert_string_equal(jv_path_str(doc, "head_sha"), "0123456789abcdef0123456789abcdef01234567");
    assert_string_equal(jv_path_str(doc, "clone_url"), "https://github.com/o/r.git");
    jv_free(doc);
    char label[256];
    depends_on_label(&q, label, sizeof(label));
    assert_string_equal(label, "l4-org/relay-\"l4#7 @ 0123456");

    q.resolved = false;
    snprintf(q.problem, sizeof(q.problem), "closed");
    buf_reset(&b);
    assert_int_equal(depends_on_record(&q, &b), CRCR_OK);
    assert_true(depends_on_record_parse(b.data, b.len, &p));
    assert_false(p.resolved);
    assert_string_equal(p.problem, "closed");
    assert_string_equal(p.head_sha, "");
    buf_reset(&b);
    assert_int_equal(depends_on_payload(&p, &b), CRCR_E_INVALID);
    depends_on_label(&p, label, sizeof(label));
    assert_string_equal(label, "l4-org/relay-\"l4#7");

    static const char *const none[] = {"",
                                       "{}",
                                       "[1]",
                                       "{\"depends_on\":{\"number\":7}}",
                                       "{\"depends_on\":{\"repository\":\"o/r\",\"number\":0}}",
                                       "not json"};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        assert_false(depends_on_record_parse(none[i], strlen(none[i]), &p));
    assert_false(depends_on_record_parse(NULL, 0, &p));
    buf_free(&b);
}

static void a_pull_request_answer_resolves_an_open_pr_only(void **state)
{
    depends_on_pair p = {.repo = "o/r", .number = 7};
    const char *open = "{\"state\":\"open\",\"merged\":false,\"head\":{\"sha\":"
                       "\"0123456789abcdef0123456789abcdef01234567\",\"ref\":\"fix\",\"repo\":"
                       "{\"clone_url\":\"https://github.com/fork/r.git\"}},\"base\":{\"repo\":"
                       "{\"clone_url\":\"https://github.com/o/r.git\"}}}";
    depends_on_from_pull(open, strlen(open), &p);
    assert_true(p.resolved);
    assert_string_equal(p.clone_url, "https://github.com/fork/r.git");
    assert_string_equal(p.head_ref, "fix");
    /* A deleted fork: the base repository's clone URL. */
    const char *gone =
        "{\"state\":\"open\",\"head\":{\"sha\":"
        "\"0123456789abcdef0123456789abcdef01234567\",\"ref\":\"fix\",\"repo\":null},"
        "\"base\":{\"repo\":{\"clone_url\":\"https://github.com/o/r.git\"}}}";
    depends_on_from_pull(gone, strlen(gone), &p);
    assert_true(p.resolved);
    assert_string_equal(p.clone_url, "https://github.com/o/r.git");
    static const struct {
        const char *json, *problem;
    } not_open[] = {
        {"{\"state\":\"closed\",\"merged\":true}", "merged"},
        {"{\"state\":\"closed\",\"merged\":false}", "closed"},
        {"{\"message\":\"x\"}", "unreadable answer"},
        {"{\"state\":\"open\",\"head\":{\"sha\":\"not-a-sha\",\"ref\":\"x\"}}",
         "no valid head in GitHub's answer"},
        {"{\"state\":\"open\",\"head\":{\"sha\":\"0123456789abcdef0123456789abcdef01234567\","
         "\"ref\":\"x\"}}",
         "no clone URL in GitHub's answer"},
    };
    for (size_t i = 0; i < sizeof(not_open) / sizeof(not_open[0]); i++) {
        depends_on_from_pull(not_open[i].json, strlen(not_open[i].json), &p);
        assert_false(p.resolved);
        assert_string_equal(p.problem, not_open[i].problem);
        assert_string_equal(p.head_sha, "");
    }
    depends_on_from_pull(NULL, 0, &p);
    assert_string_equal(p.problem, "unreadable answer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(both_forms_with_any_key_case_and_blanks),
        cmocka_unit_test(the_url_form_is_only_on_the_web_host),
        cmocka_unit_test(names_and_numbers_follow_githubs_rules),
        cmocka_unit_test(the_first_line_per_repository_counts_and_at_most_the_limit),
        cmocka_unit_test(records_read_back_in_all_three_forms),
        cmocka_unit_test(a_pull_request_answer_resolves_an_open_pr_only),
    };
    return cmocka_run_group_tests_name("depends_on", tests, NULL, NULL);
}
