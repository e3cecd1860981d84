/*
 * test_dispatch.c - the repository_dispatch body: verbatim envelope on the fast path, and the
 * deterministic, step-ordered trimming of relay.md §5.2 when the body is over the budget.
 *
 * Fixtures (tests/data/dispatch/, found through CRCR_TEST_DATA): a real pull_request "opened" and
 * a real push webhook from @octokit/webhooks-examples. The synthetic payload below is written so
 * that every trimming step removes something; its expected bodies are spelled out by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cbtoken.h"
#include "dispatch.h"
#include "json.h"

#define PAD10 "0123456789"
#define PAD100 PAD10 PAD10 PAD10 PAD10 PAD10 PAD10 PAD10 PAD10 PAD10 PAD10

/* The always-kept fields of §5.2, written out independently of dispatch.c. */
static const char *const kept_scalar_paths[] = {
    "action",
    "number",
    "pull_request.number",
    "pull_request.state",
    "pull_request.merged",
    "pull_request.head.sha",
    "pull_request.head.ref",
    "pull_request.head.repo.full_name",
    "pull_request.base.sha",
    "pull_request.base.ref",
    "pull_request.draft",
    "pull_request.html_url",
    "repository.full_name",
    "ref",
    "before",
    "after",
    "deleted",
    "created",
    "forced",
};

/* ---- helpers ---------------------------------------------------------------------------- */

/* True when `needle[0..m)` occurs in `hay[0..n)` (memmem is a GNU extension). */
static bool contains(const char *hay, size_t n, const char *needle, size_t m)
{
    for (size_t i = 0; m <= n && i <= n - m; i++) {
        if (memcmp(hay + i, needle, m) == 0)
            return true;
    }
    return false;
}

/* Reads tests/data/<rel> into a malloc'ed buffer (caller frees). Fails the test if missing. */
static char *read_data(const char *rel, size_t *len)
{
    const char *dir = getenv("CRCR_TEST_DATA");
    if (!dir)
        fail_msg("CRCR_TEST_DATA is not set (ctest sets it to <repo>/tests/data)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    buf_t b;
    buf_init(&b, 4u * 1024u * 1024u);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(buf_append(&b, chunk, n), CRCR_OK);
    fclose(f);
    return buf_detach(&b, len);
}

/* Serialises `v` compactly into a malloc'ed string (caller frees); "<absent>" for NULL. */
static char *dump(const jv *v)
{
    buf_t b;
    buf_init(&b, 64u * 1024u * 1024u);
    if (v)
        assert_int_equal(jv_dump(v, &b), CRCR_OK);
    else
        assert_int_equal(buf_puts(&b, "<absent>"), CRCR_OK);
    return buf_detach(&b, NULL);
}

/* Asserts that `a` and `b` serialise to the same bytes. */
static void assert_same_json(const jv *a, const jv *b, const char *what)
{
    char *da = dump(a), *db = dump(b);
    bool same = strcmp(da, db) == 0;
    if (!same)
        print_error("%s differs:\n  want %.300s\n  got  %.300s\n", what, da, db);
    free(da);
    free(db);
    if (!same)
        fail();
}

static crcr_err build(const char *payload, size_t len, size_t budget, const char *token,
                      dispatch_output *out, char *err, size_t errsz)
{
    dispatch_input in = {
        .event = "pull_request",
        .delivery_id = "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        .payload = payload,
        .payload_len = len,
        .callback_token = token,
        .budget = budget,
    };
    return dispatch_build(&in, out, err, errsz);
}

/* Parses a successful body and returns it (new reference); checks the envelope's fixed parts. */
static jv *parse_body(const dispatch_output *out)
{
    char perr[160];
    jv *body = jv_parse(out->body.data, out->body.len, perr, sizeof(perr));
    if (!body)
        fail_msg("body is not JSON: %s", perr);
    assert_string_equal(jv_path_str(body, "event_type"), "pull_request");
    assert_string_equal(jv_path_str(body, "client_payload.event_type"), "pull_request");
    assert_string_equal(jv_path_str(body, "client_payload.delivery_id"),
                        "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    return body;
}

/* Asserts that client_payload.trimmed lists exactly `want[0..n)`, in order, and that
 * trimmed_note is the same list joined with ' ' (entries may contain commas). */
static void assert_trimmed(const dispatch_output *out, const jv *body, const char *const *want,
                           size_t n)
{
    assert_true(out->trimmed);
    jv *arr = jv_path(body, "client_payload.trimmed");
    assert_true(jv_is_arr(arr));
    assert_int_equal(jv_arr_len(arr), n);
    buf_t note;
    buf_init(&note, 4096);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(jv_str(jv_arr_at(arr, i)), want[i]);
        if (i)
            assert_int_equal(buf_putc(&note, ' '), CRCR_OK);
        assert_int_equal(buf_puts(&note, want[i]), CRCR_OK);
    }
    assert_string_equal(buf_cstr(&out->trimmed_note), buf_cstr(&note));
    buf_free(&note);
}

/* Asserts every always-kept field of `orig` has the same value in `got` (labels[].name too). */
static void assert_kept_fields(const jv *orig, const jv *got)
{
    for (size_t i = 0; i < sizeof(kept_scalar_paths) / sizeof(kept_scalar_paths[0]); i++)
        assert_same_json(jv_path(orig, kept_scalar_paths[i]), jv_path(got, kept_scalar_paths[i]),
                         kept_scalar_paths[i]);
    jv *ol = jv_path(orig, "pull_request.labels"), *gl = jv_path(got, "pull_request.labels");
    assert_int_equal(jv_arr_len(ol), jv_arr_len(gl));
    for (size_t i = 0; i < jv_arr_len(ol); i++)
        assert_same_json(jv_get(jv_arr_at(ol, i), "name"), jv_get(jv_arr_at(gl, i), "name"),
                         "pull_request.labels[].name");
}

/* Loads a fixture, applies `edit` (may be NULL) and returns its compact text (caller frees). */
static char *fixture_text(const char *rel, void (*edit)(jv *), jv **parsed)
{
    size_t len;
    char *raw = read_data(rel, &len);
    jv *root = jv_parse(raw, len, NULL, 0);
    assert_non_null(root);
    free(raw);
    if (edit)
        edit(root);
    char *text = dump(root);
    *parsed = root;
    return text;
}

/* ---- fast path ---------------------------------------------------------------------------- */

static void test_small_payload_is_embedded_verbatim_in_exact_envelope(void **state)
{
    /* Odd spacing and key order must survive: the bytes are copied, not re-serialised. */
    const char *payload = "{\"number\": 1,  \"action\":\"opened\"}";
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(payload, strlen(payload), 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_string_equal(buf_cstr(&out.body),
                        "{\"event_type\":\"pull_request\",\"client_payload\":{\"event_type\":"
                        "\"pull_request\",\"delivery_id\":\"72d3162e-cc78-11e3-81ab-4c9367dc0958\","
                        "\"payload\":{\"number\": 1,  \"action\":\"opened\"}}}");
    assert_false(out.trimmed);
    assert_string_equal(buf_cstr(&out.trimmed_note), "");
    dispatch_output_free(&out);
}

static void test_callback_token_is_added_after_payload(void **state)
{
    const char *payload = "{\"action\":\"opened\"}";
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(
        build(payload, strlen(payload), 65000, "v1.abc_DEF-123", &out, err, sizeof(err)), CRCR_OK);
    assert_string_equal(
        buf_cstr(&out.body),
        "{\"event_type\":\"pull_request\",\"client_payload\":{\"event_type\":"
        "\"pull_request\",\"delivery_id\":\"72d3162e-cc78-11e3-81ab-4c9367dc0958\","
        "\"payload\":{\"action\":\"opened\"},\"callback_token\":\"v1.abc_DEF-123\"}}");
    assert_false(out.trimmed);
    dispatch_output_free(&out);
}

static void test_envelope_strings_are_json_escaped(void **state)
{
    dispatch_input in = {
        .event = "push",
        .delivery_id = "a\"b\\c",
        .payload = "{}",
        .payload_len = 2,
        .budget = 1000,
    };
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_OK);
    assert_string_equal(buf_cstr(&out.body),
                        "{\"event_type\":\"push\",\"client_payload\":{\"event_type\":\"push\","
                        "\"delivery_id\":\"a\\\"b\\\\c\",\"payload\":{}}}");
    dispatch_output_free(&out);
}

static void test_fast_path_does_not_parse_the_payload(void **state)
{
    /* Not JSON at all: under the budget it is still copied as is, proving no parser ran. */
    const char *payload = "{not json";
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(payload, strlen(payload), 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(contains(out.body.data, out.body.len, payload, strlen(payload)));
    assert_false(out.trimmed);
    dispatch_output_free(&out);
}

static void test_real_pull_request_under_budget_is_byte_identical(void **state)
{
    size_t len;
    char *raw = read_data("dispatch/pull_request.opened.json", &len);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(raw, len, 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_false(out.trimmed);
    assert_true(contains(out.body.data, out.body.len, raw, len));
    jv *body = parse_body(&out);
    jv *orig = jv_parse(raw, len, NULL, 0);
    assert_same_json(orig, jv_path(body, "client_payload.payload"), "payload");
    assert_null(jv_path(body, "client_payload.trimmed"));
    jv_free(orig);
    jv_free(body);
    dispatch_output_free(&out);
    free(raw);
}

static void test_body_of_exactly_the_budget_is_not_trimmed(void **state)
{
    const char *payload = "{\"action\": \"opened\"}";
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(payload, strlen(payload), 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    size_t exact = out.body.len;

    assert_int_equal(build(payload, strlen(payload), exact, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_int_equal(out.body.len, exact);
    assert_false(out.trimmed);

    /* One byte less: compacting saves 1 byte (the space) but ,"trimmed":[] costs 13, and there
     * is nothing to remove. */
    assert_int_equal(build(payload, strlen(payload), exact - 1, NULL, &out, err, sizeof(err)),
                     CRCR_E_PERMANENT);
    char want[200];
    snprintf(want, sizeof(want),
             "dispatch body is %zu bytes after trimming, over the budget of %zu bytes",
             exact - 1 + 13, exact - 1);
    assert_string_equal(err, want);
    assert_int_equal(out.body.len, 0);
    assert_false(out.trimmed);
    dispatch_output_free(&out);
}

/* ---- every step, exactly, on a synthetic payload ----------------------------------------- */

#define S_HEAD                                                                                     \
    "{\"event_type\":\"pull_request\",\"client_payload\":{\"event_type\":\"pull_request\","        \
    "\"delivery_id\":\"72d3162e-cc78-11e3-81ab-4c9367dc0958\",\"payload\":"
#define S_BODY                                                                                     \
    "\"body\":\"This PR teaches the relay to trim dispatch bodies. It is long enough that "        \
    "removing it matters. \\u00e9\","
#define S_PR_A                                                                                     \
    "{\"action\":\"opened\",\"number\":5,\"pull_request\":{\"number\":5,\"state\":\"open\","       \
    "\"html_url\":\"https://github.com/pytorch/pytorch/pull/5\","
#define S_DIFF_URL "\"diff_url\":\"https://github.com/pytorch/pytorch/pull/5.diff\","
#define S_PR_USER_FULL                                                                             \
    "\"user\":{\"type\":\"User\",\"login\":\"alice\",\"id\":1,"                                    \
    "\"avatar_url\":\"https://avatars/u/1\",\"site_admin\":false},"
#define S_PR_USER_NOURL                                                                            \
    "\"user\":{\"type\":\"User\",\"login\":\"alice\",\"id\":1,\"site_admin\":false},"
#define S_PR_USER_SMALL "\"user\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\"},"
#define S_LABELS_FULL                                                                              \
    "\"labels\":[{\"id\":9,\"name\":\"ciflow/crcr/npu\",\"color\":\"ffffff\",\"default\":false,"   \
    "\"description\":\"Run the NPU CI\"}],"
#define S_LABELS_SMALL "\"labels\":[{\"name\":\"ciflow/crcr/npu\"}],"
#define S_FLAGS "\"draft\":false,\"merged\":false,"
#define S_HEAD_A "\"head\":{\"sha\":\"aaa\",\"ref\":\"feature\",\"repo\":"
#define S_HEAD_REPO_A                                                                              \
    "{\"id\":2,\"name\":\"pytorch\",\"full_name\":\"alice/pytorch\",\"fork\":true,"
#define S_HEAD_OWNER_FULL                                                                          \
    "\"owner\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\",\"url\":\"https://api/alice\","     \
    "\"gists_url\":\"https://api/alice/gists\"}}},"
#define S_HEAD_OWNER_NOURL                                                                         \
    "\"owner\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\",\"url\":\"https://api/alice\"}}},"
#define S_HEAD_OWNER_SMALL "\"owner\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\"}}},"
#define S_HEAD_REPO_SMALL "{\"full_name\":\"alice/pytorch\",\"id\":2,\"name\":\"pytorch\"}},"
#define S_BASE_FULL                                                                                \
    "\"base\":{\"sha\":\"bbb\",\"ref\":\"main\",\"repo\":{\"id\":3,\"name\":\"pytorch\","          \
    "\"full_name\":\"pytorch/pytorch\",\"fork\":false,\"visibility\":\"public\"}},"
#define S_BASE_SMALL                                                                               \
    "\"base\":{\"sha\":\"bbb\",\"ref\":\"main\",\"repo\":{\"full_name\":\"pytorch/pytorch\","      \
    "\"id\":3,\"name\":\"pytorch\"}},"
#define S_LINKS "\"_links\":{\"self\":{\"href\":\"https://api/pulls/5\"}},"
#define S_PR_END "\"count_url\":7},"
#define S_REPO_A "\"repository\":{\"id\":3,\"node_id\":\"R_3\",\"name\":\"pytorch\","
#define S_REPO_FULLNAME "\"full_name\":\"pytorch/pytorch\",\"private\":false,"
#define S_REPO_OWNER_FULL                                                                          \
    "\"owner\":{\"login\":\"pytorch\",\"id\":4,\"type\":\"Organization\",\"node_id\":\"O_4\"},"
#define S_REPO_OWNER_SMALL "\"owner\":{\"login\":\"pytorch\",\"id\":4,\"type\":\"Organization\"},"
#define S_REPO_REST                                                                                \
    "\"description\":\"Tensors and dynamic neural networks\",\"default_branch\":\"main\","         \
    "\"stargazers_count\":1,\"hooks_url\":\"https://api/hooks\"},"
#define S_REPO_REST_NOURL                                                                          \
    "\"description\":\"Tensors and dynamic neural networks\",\"default_branch\":\"main\","         \
    "\"stargazers_count\":1},"
#define S_REPO_REST_SMALL "\"default_branch\":\"main\"},"
#define S_SENDER_FULL                                                                              \
    "\"sender\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\",\"gravatar_id\":\"\"}}"
#define S_SENDER_SMALL "\"sender\":{\"login\":\"alice\",\"id\":1,\"type\":\"User\"}}"
#define S_TAIL(entries) ",\"trimmed\":[" entries "]}}"
#define E1 "\"payload.pull_request.body\""
#define E2 E1 ",\"payload.**._links\",\"payload.**.*_url\""
#define E3 E2 ",\"payload.**.{user,owner,sender}\""
#define E4 E3 ",\"payload.repository\""
#define E5 E4 ",\"payload.pull_request.{head,base}.repo,labels\""

/* The input: compact, so that re-serialising alone never makes it shorter. */
static const char synthetic[] = S_PR_A S_DIFF_URL S_BODY S_PR_USER_FULL S_LABELS_FULL S_FLAGS
    S_HEAD_A S_HEAD_REPO_A S_HEAD_OWNER_FULL S_BASE_FULL S_LINKS S_PR_END S_REPO_A S_REPO_FULLNAME
        S_REPO_OWNER_FULL S_REPO_REST S_SENDER_FULL;

/* The expected body after each step (jansson writes \u00e9 as the raw UTF-8 "é" only when it
 * survives; step 1 removes it with the PR body). */
static const char *const synthetic_after[] = {
    /* step 1 */
    S_HEAD S_PR_A S_DIFF_URL S_PR_USER_FULL S_LABELS_FULL S_FLAGS S_HEAD_A S_HEAD_REPO_A
        S_HEAD_OWNER_FULL S_BASE_FULL S_LINKS S_PR_END S_REPO_A S_REPO_FULLNAME S_REPO_OWNER_FULL
            S_REPO_REST S_SENDER_FULL S_TAIL(E1),
    /* step 2: _links and string *_url gone, html_url and the numeric count_url kept */
    S_HEAD S_PR_A S_PR_USER_NOURL S_LABELS_FULL S_FLAGS S_HEAD_A S_HEAD_REPO_A S_HEAD_OWNER_NOURL
        S_BASE_FULL S_PR_END S_REPO_A S_REPO_FULLNAME S_REPO_OWNER_FULL S_REPO_REST_NOURL
            S_SENDER_FULL S_TAIL(E2),
    /* step 3: people reduced and reordered to login, id, type */
    S_HEAD S_PR_A S_PR_USER_SMALL S_LABELS_FULL S_FLAGS S_HEAD_A S_HEAD_REPO_A S_HEAD_OWNER_SMALL
        S_BASE_FULL S_PR_END S_REPO_A S_REPO_FULLNAME S_REPO_OWNER_SMALL S_REPO_REST_NOURL
            S_SENDER_SMALL S_TAIL(E3),
    /* step 4: repository identity only */
    S_HEAD S_PR_A S_PR_USER_SMALL S_LABELS_FULL S_FLAGS S_HEAD_A S_HEAD_REPO_A S_HEAD_OWNER_SMALL
        S_BASE_FULL S_PR_END S_REPO_A S_REPO_FULLNAME S_REPO_OWNER_SMALL S_REPO_REST_SMALL
            S_SENDER_SMALL S_TAIL(E4),
    /* step 5: labels to {name}, head/base repo to {full_name, id, name} */
    S_HEAD S_PR_A S_PR_USER_SMALL S_LABELS_SMALL S_FLAGS S_HEAD_A S_HEAD_REPO_SMALL S_BASE_SMALL
        S_PR_END S_REPO_A S_REPO_FULLNAME S_REPO_OWNER_SMALL S_REPO_REST_SMALL S_SENDER_SMALL
            S_TAIL(E5),
};

static void test_each_step_runs_only_when_needed_and_yields_exact_bytes(void **state)
{
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    for (size_t k = 0; k < 5; k++) {
        const char *want = synthetic_after[k];
        size_t budget = strlen(want);
        /* Each step must shrink the body, or the budget could not select it. */
        if (k > 0)
            assert_true(strlen(synthetic_after[k - 1]) > budget);
        crcr_err rc = build(synthetic, strlen(synthetic), budget, NULL, &out, err, sizeof(err));
        if (rc)
            fail_msg("step %zu: rc=%d err=%s", k + 1, rc, err);
        assert_string_equal(buf_cstr(&out.body), want);
        assert_true(out.trimmed);
        /* One byte less needs the next step. */
        rc = build(synthetic, strlen(synthetic), budget - 1, NULL, &out, err, sizeof(err));
        if (k < 4) {
            assert_int_equal(rc, CRCR_OK);
            assert_string_equal(buf_cstr(&out.body), synthetic_after[k + 1]);
        } else {
            assert_int_equal(rc, CRCR_E_PERMANENT);
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "dispatch body is %zu bytes after trimming, over the budget of %zu bytes",
                     budget, budget - 1);
            assert_string_equal(err, msg);
        }
    }
    dispatch_output_free(&out);
}

static void test_trimmed_body_keeps_callback_token_before_trimmed_list(void **state)
{
    /* The step-1 body with the token between the payload and the trimmed list; the budget is
     * exactly its size, so the token is counted against the budget too. */
    static const char want[] = S_HEAD S_PR_A S_DIFF_URL S_PR_USER_FULL S_LABELS_FULL S_FLAGS
        S_HEAD_A S_HEAD_REPO_A S_HEAD_OWNER_FULL S_BASE_FULL S_LINKS S_PR_END S_REPO_A
            S_REPO_FULLNAME S_REPO_OWNER_FULL S_REPO_REST S_SENDER_FULL
        ",\"callback_token\":\"tok.123\"" S_TAIL(E1);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(
        build(synthetic, strlen(synthetic), strlen(want), "tok.123", &out, err, sizeof(err)),
        CRCR_OK);
    assert_string_equal(buf_cstr(&out.body), want);
    /* One byte less: step 2 runs, and the token is still there. */
    assert_int_equal(
        build(synthetic, strlen(synthetic), strlen(want) - 1, "tok.123", &out, err, sizeof(err)),
        CRCR_OK);
    assert_non_null(strstr(buf_cstr(&out.body), "},\"callback_token\":\"tok.123\",\"trimmed\":["));
    assert_string_equal(buf_cstr(&out.trimmed_note),
                        "payload.pull_request.body payload.**._links payload.**.*_url");
    dispatch_output_free(&out);
}

/* ---- the real pull_request fixture ------------------------------------------------------- */

static void pad_body(jv *root)
{
    /* 70 000 bytes of text with a multi-byte character at both ends. */
    size_t n = 70000;
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, 'x', n);
    memcpy(s, "\xc3\xa9", 2);
    memcpy(s + n - 2, "\xc3\xa9", 2);
    s[n] = '\0';
    assert_int_equal(jv_set(jv_get(root, "pull_request"), "body", jv_new_str(s)), CRCR_OK);
    free(s);
}

static void test_padded_pr_body_is_the_only_thing_removed(void **state)
{
    jv *orig;
    char *text = fixture_text("dispatch/pull_request.opened.json", pad_body, &orig);
    assert_true(strlen(text) > 65536);

    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(text, strlen(text), 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= 65000);
    jv *body = parse_body(&out);
    static const char *const want[] = {"payload.pull_request.body"};
    assert_trimmed(&out, body, want, 1);

    jv *got = jv_path(body, "client_payload.payload");
    assert_kept_fields(orig, got);
    /* Everything else is untouched: the original minus the body, in the same order. */
    assert_int_equal(jv_del(jv_get(orig, "pull_request"), "body"), CRCR_OK);
    assert_same_json(orig, got, "payload without pull_request.body");

    jv_free(body);
    jv_free(orig);
    free(text);
    dispatch_output_free(&out);
}

/* Asserts no "_links" member and no string "*_url" member other than pull_request.html_url. */
static void assert_no_links_or_urls(const jv *v, const char *where)
{
    if (jv_is_arr(v)) {
        for (size_t i = 0; i < jv_arr_len(v); i++)
            assert_no_links_or_urls(jv_arr_at(v, i), where);
        return;
    }
    for (void *it = jv_iter((jv *)v); it; it = jv_iter_next((jv *)v, it)) {
        const char *k = jv_iter_key(it);
        size_t n = strlen(k);
        bool url = n >= 4 && strcmp(k + n - 4, "_url") == 0 && jv_is_str(jv_iter_val(it));
        if (strcmp(k, "_links") == 0 || (url && strcmp(where, "pull_request") != 0))
            fail_msg("%s.%s survived step 2", where, k);
        assert_no_links_or_urls(jv_iter_val(it), k);
    }
}

static void test_small_budget_on_real_pr_applies_steps_in_order(void **state)
{
    size_t len;
    char *raw = read_data("dispatch/pull_request.opened.json", &len);
    jv *orig = jv_parse(raw, len, NULL, 0);
    assert_non_null(orig);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];

    /* 12 000: body, _links and *_url are enough. */
    assert_int_equal(build(raw, len, 12000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= 12000);
    jv *body = parse_body(&out);
    static const char *const want3[] = {"payload.pull_request.body", "payload.**._links",
                                        "payload.**.*_url"};
    assert_trimmed(&out, body, want3, 3);
    jv *got = jv_path(body, "client_payload.payload");
    assert_kept_fields(orig, got);
    assert_no_links_or_urls(got, "");
    assert_string_equal(jv_path_str(got, "pull_request.html_url"),
                        "https://github.com/Codertocat/Hello-World/pull/2");
    /* Step 3 was not needed, so people are whole. */
    assert_non_null(jv_path(got, "sender.site_admin"));
    jv_free(body);

    /* 4 500: people and repository reduced too. */
    assert_int_equal(build(raw, len, 4500, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= 4500);
    body = parse_body(&out);
    static const char *const want5[] = {"payload.pull_request.body", "payload.**._links",
                                        "payload.**.*_url", "payload.**.{user,owner,sender}",
                                        "payload.repository"};
    assert_trimmed(&out, body, want5, 5);
    got = jv_path(body, "client_payload.payload");
    assert_kept_fields(orig, got);
    assert_int_equal(jv_obj_len(jv_get(got, "sender")), 3);
    assert_int_equal(jv_obj_len(jv_path(got, "pull_request.user")), 3);
    assert_int_equal(jv_obj_len(jv_path(got, "pull_request.head.repo.owner")), 3);
    assert_string_equal(jv_path_str(got, "repository.owner.login"), "Codertocat");
    assert_int_equal(jv_obj_len(jv_get(got, "repository")), 7);
    jv_free(body);

    /* 3 000: the last step, and the fields it keeps. */
    assert_int_equal(build(raw, len, 3000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= 3000);
    body = parse_body(&out);
    static const char *const want6[] = {
        "payload.pull_request.body", "payload.**._links",
        "payload.**.*_url",          "payload.**.{user,owner,sender}",
        "payload.repository",        "payload.pull_request.{head,base}.repo,labels"};
    assert_trimmed(&out, body, want6, 6);
    got = jv_path(body, "client_payload.payload");
    assert_kept_fields(orig, got);
    assert_int_equal(jv_obj_len(jv_arr_at(jv_path(got, "pull_request.labels"), 0)), 1);
    assert_int_equal(jv_obj_len(jv_path(got, "pull_request.head.repo")), 3);
    assert_int_equal(jv_obj_len(jv_path(got, "pull_request.base.repo")), 3);
    jv_free(body);

    jv_free(orig);
    free(raw);
    dispatch_output_free(&out);
}

static void test_impossible_budget_is_a_permanent_error_with_the_size(void **state)
{
    size_t len;
    char *raw = read_data("dispatch/pull_request.opened.json", &len);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(raw, len, 3000, NULL, &out, err, sizeof(err)), CRCR_OK);
    size_t smallest = out.body.len;

    assert_int_equal(build(raw, len, 1000, NULL, &out, err, sizeof(err)), CRCR_E_PERMANENT);
    char want[200];
    snprintf(want, sizeof(want),
             "dispatch body is %zu bytes after trimming, over the budget of 1000 bytes", smallest);
    assert_string_equal(err, want);
    assert_int_equal(out.body.len, 0);
    assert_false(out.trimmed);
    assert_string_equal(buf_cstr(&out.trimmed_note), "");
    free(raw);
    dispatch_output_free(&out);
}

static void test_pretty_payload_that_fits_once_compacted_loses_nothing(void **state)
{
    /* The fixture is pretty-printed; compact it fits in 25 000 without removing anything. */
    size_t len;
    char *raw = read_data("dispatch/pull_request.opened.json", &len);
    assert_true(len > 25000);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(raw, len, 25000, NULL, &out, err, sizeof(err)), CRCR_OK);
    jv *body = parse_body(&out);
    assert_trimmed(&out, body, NULL, 0);
    jv *orig = jv_parse(raw, len, NULL, 0);
    assert_same_json(orig, jv_path(body, "client_payload.payload"), "payload");
    jv_free(orig);
    jv_free(body);
    free(raw);
    dispatch_output_free(&out);
}

static void test_non_object_payload_over_budget_is_invalid(void **state)
{
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    char big[2000];
    memset(big, ' ', sizeof(big));
    big[0] = '[';
    big[1] = '1';
    big[sizeof(big) - 1] = ']';
    assert_int_equal(build(big, sizeof(big), 500, NULL, &out, err, sizeof(err)), CRCR_E_INVALID);
    assert_non_null(strstr(err, "not a JSON object"));
    assert_int_equal(out.body.len, 0);

    /* Not JSON at all, over the budget: it cannot be trimmed either. */
    big[0] = '{';
    assert_int_equal(build(big, sizeof(big), 500, NULL, &out, err, sizeof(err)), CRCR_E_INVALID);
    assert_non_null(strstr(err, "not valid JSON"));
    dispatch_output_free(&out);
}

static void test_missing_or_oversized_inputs_are_invalid(void **state)
{
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    dispatch_input in = {.event = "push", .delivery_id = "d", .payload = "{}", .payload_len = 2};
    in.delivery_id = NULL;
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_E_INVALID);
    in.delivery_id = "d";
    in.payload_len = 0;
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_E_INVALID);
    in.payload_len = 2;
    char longev[200];
    memset(longev, 'e', sizeof(longev) - 1);
    longev[sizeof(longev) - 1] = '\0';
    in.event = longev;
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_E_INVALID);
    in.event = "push";
    /* Budget 0 means the default, not "nothing fits". */
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_OK);
    dispatch_output_free(&out);
}

static void test_trimming_is_deterministic(void **state)
{
    size_t len;
    char *raw = read_data("dispatch/pull_request.opened.json", &len);
    dispatch_output a, b;
    dispatch_output_init(&a);
    dispatch_output_init(&b);
    char err[256];
    static const size_t budgets[] = {25000, 12000, 4500, 3000};
    for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
        assert_int_equal(build(raw, len, budgets[i], "t", &a, err, sizeof(err)), CRCR_OK);
        assert_int_equal(build(raw, len, budgets[i], "t", &b, err, sizeof(err)), CRCR_OK);
        assert_int_equal(a.body.len, b.body.len);
        assert_memory_equal(a.body.data, b.body.data, a.body.len);
        assert_string_equal(buf_cstr(&a.trimmed_note), buf_cstr(&b.trimmed_note));
    }
    free(raw);
    dispatch_output_free(&a);
    dispatch_output_free(&b);
}

static void set_utf8_title(jv *root)
{
    pad_body(root);
    assert_int_equal(jv_set(jv_get(root, "pull_request"), "title",
                            jv_new_str("na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80 \xe4\xb8\xad")),
                     CRCR_OK);
}

static void test_utf8_survives_trimming_unescaped(void **state)
{
    jv *orig;
    char *text = fixture_text("dispatch/pull_request.opened.json", set_utf8_title, &orig);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(text, strlen(text), 65000, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.trimmed);
    const char *title = "\"title\":\"na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80 \xe4\xb8\xad\"";
    assert_true(contains(out.body.data, out.body.len, title, strlen(title)));
    jv *body = parse_body(&out);
    assert_string_equal(jv_path_str(body, "client_payload.payload.pull_request.title"),
                        "na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80 \xe4\xb8\xad");
    jv_free(body);

    /* An escaped character in the input comes out as raw UTF-8 once re-serialised. */
    const char *esc =
        "{\"action\":\"opened\",\"pull_request\":{\"title\":\"caf\\u00e9\","
        "\"body\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}";
    assert_int_equal(build(esc, strlen(esc), 250, NULL, &out, err, sizeof(err)), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&out.body), "\"title\":\"caf\xc3\xa9\""));

    jv_free(orig);
    free(text);
    dispatch_output_free(&out);
}

static void test_long_key_is_never_dropped_at_any_budget(void **state)
{
    /* Regression (found by fuzz_dispatch): a key longer than the room left under the budget was
     * once silently dropped by the serialiser, producing a "fitting" but broken body. Every
     * budget from too small to ample must give either a complete, valid body or an error. */
    char key[151];
    memset(key, 'D', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    char payload[512];
    snprintf(payload, sizeof(payload),
             "{\"ref\":\"refs/heads/main\",\"%s\":{\"gists_url\":\"https://api/g\",\"type\":1}}",
             key);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    size_t ok = 0;
    for (size_t budget = 100; budget <= 600; budget++) {
        crcr_err rc = build(payload, strlen(payload), budget, NULL, &out, err, sizeof(err));
        if (rc == CRCR_E_PERMANENT)
            continue;
        assert_int_equal(rc, CRCR_OK);
        assert_true(out.body.len <= budget);
        jv *body = parse_body(&out);
        jv *got = jv_path(body, "client_payload.payload");
        assert_non_null(jv_get(got, key));
        assert_string_equal(jv_path_str(got, "ref"), "refs/heads/main");
        jv_free(body);
        ok++;
    }
    assert_true(ok > 0);
    dispatch_output_free(&out);
}

#define K_ACTION                                                                                   \
    "{\"action\":{\"avatar_url\":\"https://a\",\"_links\":{},\"sender\":{\"login\":\"x\","         \
    "\"node_id\":\"N\"}},\"pull_request\":{\"html_url\":\"https://h\",\"labels\":[{\"name\":{"     \
    "\"user\":{\"login\":\"y\",\"node_id\":\"M\"}},\"id\":1}]},"
#define K_PAD "\"padding\":\"" PAD100 PAD100 "\"}"

static void test_kept_fields_are_not_trimmed_inside(void **state)
{
    /* Odd but valid input: always-kept fields holding objects. Steps 2 and 3 must leave them
     * whole (action, labels[].name), while the same members elsewhere (sender) are trimmed. */
    static const char payload[] =
        K_ACTION "\"sender\":{\"login\":\"z\",\"node_id\":\"MDQ6VXNlcjIxMDMxMDY3\",\"site_admin\":"
                 "false,\"gravatar_id\":\"\",\"avatar_url\":\"https://avatars.example/u/1\","
                 "\"repos_url\":\"https://api.example/users/z/repos\"}," K_PAD;
    static const char want[] = S_HEAD K_ACTION "\"sender\":{\"login\":\"z\"}," K_PAD S_TAIL(
        "\"payload.**.*_url\",\"payload.**.{user,owner,sender}\"");
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(build(payload, strlen(payload), strlen(want), NULL, &out, err, sizeof(err)),
                     CRCR_OK);
    assert_string_equal(buf_cstr(&out.body), want);
    dispatch_output_free(&out);
}

/* ---- the real push fixture ---------------------------------------------------------------- */

static void test_push_over_budget_keeps_ref_fields(void **state)
{
    size_t len;
    char *raw = read_data("dispatch/push.json", &len);
    jv *orig = jv_parse(raw, len, NULL, 0);
    assert_non_null(orig);
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    dispatch_input in = {.event = "push",
                         .delivery_id = "d-push",
                         .payload = raw,
                         .payload_len = len,
                         .budget = 2500};
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= 2500);
    assert_true(out.trimmed);
    jv *body = jv_parse(out.body.data, out.body.len, NULL, 0);
    assert_non_null(body);
    assert_string_equal(jv_path_str(body, "event_type"), "push");
    /* A push has no pull_request, hence no body step and no step 5. */
    assert_string_equal(buf_cstr(&out.trimmed_note),
                        "payload.**.*_url payload.**.{user,owner,sender} payload.repository");
    jv *got = jv_path(body, "client_payload.payload");
    assert_kept_fields(orig, got);
    assert_string_equal(jv_path_str(got, "ref"), "refs/heads/master");
    assert_string_equal(jv_path_str(got, "repository.full_name"), "pytorch/pytorch");
    assert_true(jv_is_bool(jv_get(got, "forced")));
    jv_free(body);
    jv_free(orig);
    free(raw);
    dispatch_output_free(&out);
}

static void test_depends_on_goes_before_the_token_and_counts_in_the_budget(void **state)
{
    const char *payload = "{\"action\":\"opened\"}";
    dispatch_input in = {.event = "pull_request",
                         .delivery_id = "d1",
                         .payload = payload,
                         .payload_len = strlen(payload),
                         .callback_token = "v1.t",
                         .depends_on = "{\"repository\":\"o/r\",\"number\":7}",
                         .budget = 65000};
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_OK);
    assert_string_equal(buf_cstr(&out.body),
                        "{\"event_type\":\"pull_request\",\"client_payload\":{\"event_type\":"
                        "\"pull_request\",\"delivery_id\":\"d1\",\"payload\":{\"action\":"
                        "\"opened\"},\"depends_on\":{\"repository\":\"o/r\",\"number\":7},"
                        "\"callback_token\":\"v1.t\"}}");
    /* A spaced-out payload over that budget: re-encoded to fit with the pair counted. */
    in.budget = out.body.len + 20;
    in.payload = "{\"action\":\"opened\"                                        }";
    in.payload_len = strlen(in.payload);
    assert_int_equal(dispatch_build(&in, &out, err, sizeof(err)), CRCR_OK);
    assert_true(out.body.len <= in.budget);
    assert_true(out.trimmed); /* re-encoded: "trimmed":[] */
    assert_non_null(strstr(buf_cstr(&out.body), "\"depends_on\":{\"repository\":\"o/r\""));
    dispatch_output_free(&out);
}

static void test_a_row_sends_its_resolved_pair_and_binds_it_in_the_token(void **state)
{
    crcr_config cfg = {.app_secret = "s3cret", .dispatch_budget = 65000};
    const char *payload = "{\"action\":\"opened\"}";
    static const char resolved[] =
        "{\"depends_on\":{\"repository\":\"o/r\",\"number\":7,\"head_sha\":"
        "\"0123456789abcdef0123456789abcdef01234567\",\"head_ref\":\"fix\",\"clone_url\":"
        "\"https://github.com/o/r.git\"}}";
    static const char unresolved[] =
        "{\"depends_on\":{\"repository\":\"o/r\",\"number\":7},\"problem\":\"closed\"}";
    dispatch_src src = {.event = "pull_request",
                        .delivery_id = "d1",
                        .payload = payload,
                        .payload_len = strlen(payload),
                        .target = "o/r",
                        .head_sha = "abc",
                        .pr_number = 5,
                        .pair = resolved,
                        .pair_len = sizeof(resolved) - 1};
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    assert_int_equal(dispatch_row_body(&cfg, &src, &out, err, sizeof(err)), CRCR_OK);
    jv *doc = jv_parse(out.body.data, out.body.len, NULL, 0);
    const jv *cp = jv_get(doc, "client_payload");
    assert_string_equal(jv_path_str(cp, "depends_on.head_sha"),
                        "0123456789abcdef0123456789abcdef01234567");
    assert_string_equal(jv_path_str(cp, "depends_on.clone_url"), "https://github.com/o/r.git");
    assert_int_equal(jv_obj_len(jv_get(cp, "depends_on")), 5);
    char want[CBTOKEN_SIZE];
    cbtoken_make_pair("s3cret", "d1", "o/r", "abc", 5, 7,
                      "0123456789abcdef0123456789abcdef01234567", want);
    assert_string_equal(jv_path_str(cp, "callback_token"), want);
    jv_free(doc);
    /* Not resolved (or no record): no pair in the envelope, the unpaired token. */
    src.pair = unresolved;
    src.pair_len = sizeof(unresolved) - 1;
    assert_int_equal(dispatch_row_body(&cfg, &src, &out, err, sizeof(err)), CRCR_OK);
    doc = jv_parse(out.body.data, out.body.len, NULL, 0);
    cp = jv_get(doc, "client_payload");
    assert_null(jv_get(cp, "depends_on"));
    cbtoken_make("s3cret", "d1", "o/r", "abc", 5, want);
    assert_string_equal(jv_path_str(cp, "callback_token"), want);
    jv_free(doc);
    dispatch_output_free(&out);
}

/* dispatch_row_verbatim says yes only where dispatch_row_body builds the body as it is (what a
 * dry-run row skips relies on it): payloads of every size across the budget's edge, with an event
 * and a delivery id that need escaping; never for a paired row or a malformed input. */
static void test_row_verbatim_only_where_the_body_is_built_as_it_is(void **state)
{
    (void)state;
    crcr_config cfg = {.app_secret = "s3cret", .dispatch_budget = 2048};
    static char payload[2200];
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    size_t yes = 0, no = 0;
    for (size_t n = 1700; n < 2100; n++) {
        memset(payload, 'x', n);
        memcpy(payload, "{\"a\":\"", 6);
        memcpy(payload + n - 2, "\"}", 2);
        dispatch_src src = {.event = "pull_request\t",
                            .delivery_id = "d\"1\x01",
                            .payload = payload,
                            .payload_len = n,
                            .target = "o/r",
                            .head_sha = "abc",
                            .pr_number = 5};
        bool verbatim = dispatch_row_verbatim(&cfg, &src);
        crcr_err e = dispatch_row_body(&cfg, &src, &out, err, sizeof(err));
        if (verbatim) {
            yes++;
            assert_int_equal(e, CRCR_OK);
            assert_false(out.trimmed);
            assert_true(out.body.len <= cfg.dispatch_budget);
            const char *at = strstr(buf_cstr(&out.body), "\"payload\":");
            assert_non_null(at);
            assert_memory_equal(at + 10, payload, n); /* the payload as it is */
        } else {
            no++;
        }
    }
    assert_true(yes > 0 && no > 0);
    /* The longest envelope of "pull_request" and "d1" is 323 bytes: 1,725 of 2,048 are left. */
    dispatch_src edge = {.event = "pull_request",
                         .delivery_id = "d1",
                         .payload = payload,
                         .payload_len = 1725,
                         .target = "o/r",
                         .head_sha = "abc"};
    assert_true(dispatch_row_verbatim(&cfg, &edge));
    edge.payload_len = 1726;
    assert_false(dispatch_row_verbatim(&cfg, &edge));
    edge.payload_len = 2049;
    assert_false(dispatch_row_verbatim(&cfg, &edge));
    edge.payload_len = 100;
    edge.pair = "{}";
    edge.pair_len = 2;
    assert_false(dispatch_row_verbatim(&cfg, &edge)); /* paired: built to know its pair */
    edge.pair = NULL;
    edge.pair_len = 0;
    edge.event = "";
    assert_false(dispatch_row_verbatim(&cfg, &edge));
    edge.event = "push";
    edge.payload_len = 0;
    assert_false(dispatch_row_verbatim(&cfg, &edge));
    dispatch_output_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_payload_is_embedded_verbatim_in_exact_envelope),
        cmocka_unit_test(test_row_verbatim_only_where_the_body_is_built_as_it_is),
        cmocka_unit_test(test_callback_token_is_added_after_payload),
        cmocka_unit_test(test_depends_on_goes_before_the_token_and_counts_in_the_budget),
        cmocka_unit_test(test_a_row_sends_its_resolved_pair_and_binds_it_in_the_token),
        cmocka_unit_test(test_envelope_strings_are_json_escaped),
        cmocka_unit_test(test_fast_path_does_not_parse_the_payload),
        cmocka_unit_test(test_real_pull_request_under_budget_is_byte_identical),
        cmocka_unit_test(test_body_of_exactly_the_budget_is_not_trimmed),
        cmocka_unit_test(test_each_step_runs_only_when_needed_and_yields_exact_bytes),
        cmocka_unit_test(test_trimmed_body_keeps_callback_token_before_trimmed_list),
        cmocka_unit_test(test_padded_pr_body_is_the_only_thing_removed),
        cmocka_unit_test(test_small_budget_on_real_pr_applies_steps_in_order),
        cmocka_unit_test(test_impossible_budget_is_a_permanent_error_with_the_size),
        cmocka_unit_test(test_pretty_payload_that_fits_once_compacted_loses_nothing),
        cmocka_unit_test(test_non_object_payload_over_budget_is_invalid),
        cmocka_unit_test(test_missing_or_oversized_inputs_are_invalid),
        cmocka_unit_test(test_trimming_is_deterministic),
        cmocka_unit_test(test_utf8_survives_trimming_unescaped),
        cmocka_unit_test(test_long_key_is_never_dropped_at_any_budget),
        cmocka_unit_test(test_kept_fields_are_not_trimmed_inside),
        cmocka_unit_test(test_push_over_budget_keeps_ref_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
