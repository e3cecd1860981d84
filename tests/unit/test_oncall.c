/* Unit tests for oncall.c: the on-call comment's text, the sanitising of downstream text, the
 * marker, the outbox row and its keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "oncall.h"

#define SHA "0123456789ABCDEF0123456789abcdef01234567"

static char *text_of(const char *s)
{
    buf_t b;
    buf_init(&b, 4096);
    assert_int_equal(oncall_text(s, &b), CRCR_OK);
    size_t n;
    return buf_detach(&b, &n);
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void only_failures_cancellations_and_timeouts_alert(void **state)
{
    assert_true(oncall_alerting("failure"));
    assert_true(oncall_alerting("cancelled"));
    assert_true(oncall_alerting("timed_out"));
    const char *quiet[] = {"success",  "neutral", "skipped", "action_required", "stale", "FAILURE",
                           "failure ", "",        NULL};
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
        assert_false(oncall_alerting(quiet[i]));
}

static void mentions_are_valid_handles_only(void **state)
{
    static const struct {
        const char *in, *want; /* want NULL: refused */
    } cases[] = {
        {"alice", "@alice"},
        {"@alice", "@alice"},
        {"can-gaa-hou", "@can-gaa-hou"},
        {"pytorch/crcr-oncall", "@pytorch/crcr-oncall"},
        {"@pytorch/crcr.team_2", "@pytorch/crcr.team_2"},
        {"", NULL},
        {"@", NULL},
        {"@@alice", NULL},
        {"a b", NULL},
        {"<b>x</b>", NULL},
        {"a/b/c", NULL},
        {"x@y", NULL},
        {"under_score", NULL}, /* GitHub user names have none */
        {"alice\n@bob", NULL},
        {"/team", NULL},
        {"org/", NULL},
        {"a123456789a123456789a123456789a123456789", NULL}, /* 40 characters */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf_t b;
        buf_init(&b, 256);
        bool ok = oncall_mention(cases[i].in, &b);
        if (ok != (cases[i].want != NULL))
            fail_msg("'%s': got %d", cases[i].in, ok);
        assert_string_equal(buf_cstr(&b), cases[i].want ? cases[i].want : "");
        buf_free(&b);
    }
    assert_false(oncall_mention(NULL, NULL));
}

static void downstream_text_cannot_mention_link_break_the_table_or_inject_html(void **state)
{
    char *t = text_of("build (ubuntu-22.04, 3.11) #3: a/b+c=d");
    assert_string_equal(t, "build (ubuntu-22.04, 3.11) #3: a/b+c=d");
    free(t);
    t = text_of("@everyone `x` | <img src=x onerror=alert(1)> [a](b) \\ &amp;\nnext\r\tend");
    assert_string_equal(t, "_everyone _x_ _ _img src=x onerror=alert(1)_ _a_(b) _ _amp;_next__end");
    free(t);
    /* Non-ASCII: one '_' per character; an ill-formed byte is one '_' too. */
    t = text_of("t\xe3\x83\x86st \xff\xc3(\xf0\x9f\x98\x80)");
    assert_string_equal(t, "t_st __(_)");
    free(t);
    /* Bidi overrides and zero-width characters are not ASCII either. */
    t = text_of("a\xe2\x80\xae"
                "b\xe2\x80\x8b"
                "c");
    assert_string_equal(t, "a_b_c");
    free(t);
    t = text_of(NULL);
    assert_string_equal(t, "");
    free(t);
}

static void long_text_is_cut_at_the_limit(void **state)
{
    char in[1000];
    memset(in, 'a', sizeof(in) - 1);
    in[sizeof(in) - 1] = '\0';
    char *t = text_of(in);
    assert_int_equal(strlen(t), ONCALL_TEXT_MAX + 3);
    assert_string_equal(t + ONCALL_TEXT_MAX, "...");
    free(t);
    in[ONCALL_TEXT_MAX] = '\0'; /* exactly the limit: no ellipsis */
    t = text_of(in);
    assert_int_equal(strlen(t), ONCALL_TEXT_MAX);
    free(t);
}

static void the_marker_is_recognised_by_repo(void **state)
{
    buf_t m;
    buf_init(&m, 256);
    assert_int_equal(oncall_marker("Org/Repo", &m), CRCR_OK);
    assert_string_equal(buf_cstr(&m), "<!-- crcr-oncall:Org/Repo -->");
    buf_free(&m);
    const char *body = "<!-- crcr-oncall:ORG/repo -->\n## :x: CRCR downstream CI failure";
    assert_true(oncall_marker_leads(body, strlen(body), "org/repo"));
    assert_true(oncall_marker_leads(body, strlen(body), "Org/Repo"));
    assert_false(oncall_marker_leads(body, strlen(body), "org/rep"));
    assert_false(oncall_marker_leads(body, strlen(body), "org/repo2"));
    assert_false(oncall_marker_leads(body, strlen(body), "other/repo"));
    const char *blanks = " \r\n\t<!-- crcr-oncall:org/repo -->";
    assert_true(oncall_marker_leads(blanks, strlen(blanks), "org/repo"));
    /* Only at the start: a marker quoted further down a comment does not count. */
    const char *quoted = "hello\n<!-- crcr-oncall:org/repo -->\n## :x: CRCR downstream CI failure";
    assert_false(oncall_marker_leads(quoted, strlen(quoted), "org/repo"));
    const char *quote = "> <!-- crcr-oncall:org/repo -->";
    assert_false(oncall_marker_leads(quote, strlen(quote), "org/repo"));
    const char *other = "<!-- crcr-oncall:org/repo2 --> <!-- crcr-oncall -->";
    assert_false(oncall_marker_leads(other, strlen(other), "org/repo"));
    /* The length bounds the text: a marker cut by it does not count. */
    assert_false(oncall_marker_leads(body, 20, "org/repo"));
    const char *cut = "<!-- crcr-oncall:org/repo --";
    assert_false(oncall_marker_leads(cut, strlen(cut), "org/repo"));
    assert_false(oncall_marker_leads(NULL, 0, "org/repo"));
    assert_false(oncall_marker_leads(body, strlen(body), NULL));
}

/* An issue comment as GitHub's API lists it: `body` by `login`, through the App `app_id` (0: by
 * a person or another integration's token, performed_via_github_app null). */
static jv *comment(const char *body, const char *login, int64_t app_id)
{
    char json[1024];
    if (app_id)
        snprintf(json, sizeof(json),
                 "{\"id\":1,\"user\":{\"login\":\"%s\",\"type\":\"Bot\"},\"body\":\"%s\","
                 "\"performed_via_github_app\":{\"id\":%lld,\"slug\":\"crcr-test\","
                 "\"client_id\":\"Iv1.abc123\"}}",
                 login, body, (long long)app_id);
    else
        snprintf(json, sizeof(json),
                 "{\"id\":1,\"user\":{\"login\":\"%s\",\"type\":\"User\"},\"body\":\"%s\","
                 "\"performed_via_github_app\":null}",
                 login, body);
    jv *doc = jv_parse(json, strlen(json), NULL, 0);
    assert_non_null(doc);
    return doc;
}

static void the_marker_counts_only_from_this_app_or_a_trusted_login(void **state)
{
    static const char marker[] =
        "<!-- crcr-oncall:org/repo -->\\n## :x: CRCR downstream CI failure";
    static const char trusted[] = "pytorch-bot[bot], Other-Bot[bot]";
    struct {
        jv *c;
        bool counts;
    } cases[] = {
        {comment(marker, "crcr-test[bot]", 42), true},   /* this App, by its id */
        {comment(marker, "crcr-test[bot]", 43), false},  /* another App */
        {comment(marker, "pytorch-bot[bot]", 99), true}, /* upstream's bot (trusted login) */
        {comment(marker, "other-bot[bot]", 0), true},    /* case-insensitive */
        {comment(marker, "mallory", 0), false},          /* any user can write a marker */
        {comment(marker, "pytorch-bot", 0), false},      /* a user, not the bot */
        {comment("see <!-- crcr-oncall:org/repo -->", "pytorch-bot[bot]", 99), false},
        {comment("<!-- crcr-oncall:org/other -->", "crcr-test[bot]", 42), false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (oncall_comment_is_marker(cases[i].c, "org/repo", "42", trusted) != cases[i].counts)
            fail_msg("case %zu: expected %s", i, cases[i].counts ? "a marker" : "no marker");
    }
    /* A client id as GITHUB_APP_ID: the App's client_id names it. */
    assert_true(oncall_comment_is_marker(cases[0].c, "org/repo", "Iv1.abc123", NULL));
    assert_false(oncall_comment_is_marker(cases[0].c, "org/repo", "Iv1.other", NULL));
    /* No trusted logins: only this App's. */
    assert_false(oncall_comment_is_marker(cases[2].c, "org/repo", "42", ""));
    assert_false(oncall_comment_is_marker(cases[2].c, "org/repo", "42", NULL));
    /* Dry-run (no App id): only trusted logins. */
    assert_false(oncall_comment_is_marker(cases[0].c, "org/repo", NULL, trusted));
    assert_true(oncall_comment_is_marker(cases[2].c, "org/repo", NULL, trusted));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        jv_free(cases[i].c);
}

/* A failure of o/r's job j on SHA with `oncalls`; each test changes what it looks at. */
static oncall_failure failure_of(const char *const *oncalls, size_t n)
{
    return (oncall_failure){.repo = "o/r",
                            .check_name = "crcr/o/r/CI/j",
                            .details_url = "https://github.com/o/r/actions/runs/1",
                            .head_sha = SHA,
                            .conclusion = "failure",
                            .oncalls = oncalls,
                            .n_oncalls = n};
}

static char *comment_of(const oncall_failure *f, crcr_err want)
{
    buf_t b;
    buf_init(&b, ONCALL_COMMENT_MAX);
    assert_int_equal(oncall_comment(f, &b), want);
    size_t n;
    return buf_detach(&b, &n);
}

static void the_comment_has_upstreams_shape(void **state)
{
    const char *oncalls[] = {"alice", "@pytorch/accel-oncall", "not a handle", "bob"};
    oncall_failure f = failure_of(oncalls, 4);
    f.repo = "org4/repo4";
    f.check_name = "crcr/org4/repo4/CI/build (linux)";
    f.details_url = "https://github.com/org4/repo4/actions/runs/20000000001";
    char *c = comment_of(&f, CRCR_OK);
    assert_string_equal(
        c, "<!-- crcr-oncall:org4/repo4 -->\n"
           "## :x: CRCR downstream CI failure\n"
           "\n"
           "The downstream CI of `org4/repo4` failed on commit `0123456`.\n"
           "\n"
           "@alice @pytorch/accel-oncall @bob please investigate.\n"
           "\n"
           "| Check Run | Commit | Conclusion |\n"
           "|---|---|---|\n"
           "| [`crcr/org4/repo4/CI/build (linux)`]"
           "(https://github.com/org4/repo4/actions/runs/20000000001) | `0123456` | `failure` |\n");
    assert_true(oncall_marker_leads(c, strlen(c), "org4/repo4"));
    free(c);
}

static void a_hostile_job_name_stays_inside_its_cell(void **state)
{
    const char *oncalls[] = {"alice"};
    oncall_failure f = failure_of(oncalls, 1);
    f.repo = "org4/repo4";
    f.check_name = "crcr/org4/repo4/CI/x` | @pytorch/everyone <script>alert(1)</script>\n"
                   "| [evil](https://evil.example) | #1234 |\n<!-- crcr-oncall:org5/repo5 -->";
    f.conclusion = "timed_out";
    char *c = comment_of(&f, CRCR_OK);
    const char *row = strstr(c, "| [`");
    assert_non_null(row);
    assert_int_equal(count_char(row, '|'), 4);  /* one row of three cells */
    assert_int_equal(count_char(row, '\n'), 1); /* on one line */
    assert_int_equal(count_char(row, '`'), 6);  /* three code spans */
    assert_int_equal(count_char(c, '@'), 1);    /* only the on-call */
    assert_null(strstr(c, "<script"));
    assert_int_equal(count_char(c, '<'), 1); /* only the marker's */
    const char *link = strstr(c, "](");
    assert_non_null(link);
    assert_null(strstr(link + 1, "](")); /* one link: ours */
    /* A marker in the job name is no marker: it cannot silence another repo's comment. */
    assert_true(oncall_marker_leads(c, strlen(c), "org4/repo4"));
    assert_false(oncall_marker_leads(c, strlen(c), "org5/repo5"));
    free(c);
}

static void links_are_https_only(void **state)
{
    const char *oncalls[] = {"alice"};
    const char *bad[] = {"http://github.com/o/r/actions/runs/1",
                         "javascript:alert(1)",
                         "https://github.com/o/r/actions/runs/1) [x](https://evil",
                         "https://github.com/o/r/actions runs",
                         "https://",
                         NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        oncall_failure f = failure_of(oncalls, 1);
        f.details_url = bad[i];
        f.conclusion = "cancelled";
        char *c = comment_of(&f, CRCR_OK);
        assert_non_null(strstr(c, "| `crcr/o/r/CI/j` | `0123456` | `cancelled` |\n"));
        assert_null(strstr(c, "]("));
        free(c);
    }
}

static void no_valid_on_call_or_repo_means_no_comment(void **state)
{
    const char *oncalls[] = {"not valid", "<x>"};
    oncall_failure f = failure_of(oncalls, 2);
    char *c = comment_of(&f, CRCR_E_NOT_FOUND);
    assert_string_equal(c, "");
    free(c);
    f.n_oncalls = 0;
    c = comment_of(&f, CRCR_E_NOT_FOUND);
    free(c);
    const char *good[] = {"alice"};
    f.oncalls = good;
    f.n_oncalls = 1;
    f.repo = "o/r` @x";
    c = comment_of(&f, CRCR_E_INVALID);
    assert_string_equal(c, "");
    free(c);
    f.repo = NULL;
    c = comment_of(&f, CRCR_E_INVALID);
    free(c);
}

static void a_sha_that_is_not_hex_is_unknown(void **state)
{
    const char *oncalls[] = {"alice"};
    const char *shas[] = {"@alice1", "", NULL, "abc`def"};
    for (size_t i = 0; i < sizeof(shas) / sizeof(shas[0]); i++) {
        oncall_failure f = failure_of(oncalls, 1);
        f.head_sha = shas[i];
        char *c = comment_of(&f, CRCR_OK);
        assert_non_null(strstr(c, "failed on commit `unknown`."));
        free(c);
    }
}

static void a_full_allowlist_of_long_handles_fits(void **state)
{
    static char names[CRCR_ALLOWLIST_MAX_ONCALLS][CRCR_REPO_NAME_MAX];
    const char *oncalls[CRCR_ALLOWLIST_MAX_ONCALLS];
    for (size_t i = 0; i < CRCR_ALLOWLIST_MAX_ONCALLS; i++) {
        char org[40], team[101];
        memset(org, 'o', 39);
        org[39] = '\0';
        memset(team, 't', 100);
        team[100] = '\0';
        snprintf(names[i], sizeof(names[i]), "%s/%s", org, team);
        oncalls[i] = names[i];
    }
    char name[1200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    oncall_failure f = failure_of(oncalls, CRCR_ALLOWLIST_MAX_ONCALLS);
    f.check_name = name;
    char *c = comment_of(&f, CRCR_OK);
    assert_true(strlen(c) < ONCALL_COMMENT_MAX);
    assert_int_equal(count_char(c, '@'), CRCR_ALLOWLIST_MAX_ONCALLS);
    free(c);
}

static void the_row_body_round_trips(void **state)
{
    const char *comment = "<!-- crcr-oncall:o/r -->\n## \"quoted\" \\ text\n";
    buf_t b;
    buf_init(&b, ONCALL_ROW_MAX);
    assert_int_equal(oncall_row_body(4242, "o/r", comment, strlen(comment), &b), CRCR_OK);
    oncall_row row;
    assert_true(oncall_row_parse(b.data, b.len, &row));
    assert_int_equal(row.pr, 4242);
    assert_string_equal(row.repo, "o/r");
    assert_string_equal(row.comment, comment);
    oncall_row_free(&row);
    assert_null(row.doc);
    buf_free(&b);
    const char *bad[] = {
        "",
        "not json",
        "[]",
        "{\"pr\":0,\"repo\":\"o/r\",\"body\":\"x\"}",
        "{\"pr\":-1,\"repo\":\"o/r\",\"body\":\"x\"}",
        "{\"pr\":\"1\",\"repo\":\"o/r\",\"body\":\"x\"}",
        "{\"pr\":1,\"repo\":\"o r\",\"body\":\"x\"}",
        "{\"pr\":1,\"repo\":\"o/r\",\"body\":\"\"}",
        "{\"pr\":1,\"repo\":\"o/r\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (oncall_row_parse(bad[i], strlen(bad[i]), &row))
            fail_msg("accepted %s", bad[i]);
        assert_null(row.doc);
    }
    assert_false(oncall_row_parse(NULL, 0, &row));
}

static void keys_are_lower_case(void **state)
{
    buf_t b;
    buf_init(&b, ONCALL_KEY_MAX);
    assert_int_equal(oncall_seq_key(17, "Org4/Repo4", &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "oncall:17:org4/repo4");
    buf_reset(&b);
    assert_int_equal(oncall_record_key("PyTorch/PyTorch", 17, "Org4/Repo4", &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "oncall:pytorch/pytorch#17:org4/repo4");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_failures_cancellations_and_timeouts_alert),
        cmocka_unit_test(mentions_are_valid_handles_only),
        cmocka_unit_test(downstream_text_cannot_mention_link_break_the_table_or_inject_html),
        cmocka_unit_test(long_text_is_cut_at_the_limit),
        cmocka_unit_test(the_marker_is_recognised_by_repo),
        cmocka_unit_test(the_marker_counts_only_from_this_app_or_a_trusted_login),
        cmocka_unit_test(the_comment_has_upstreams_shape),
        cmocka_unit_test(a_hostile_job_name_stays_inside_its_cell),
        cmocka_unit_test(links_are_https_only),
        cmocka_unit_test(no_valid_on_call_or_repo_means_no_comment),
        cmocka_unit_test(a_sha_that_is_not_hex_is_unknown),
        cmocka_unit_test(a_full_allowlist_of_long_handles_fits),
        cmocka_unit_test(the_row_body_round_trips),
        cmocka_unit_test(keys_are_lower_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
