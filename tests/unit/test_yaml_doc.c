/*
 * test_yaml_doc.c - the bounded YAML reader (src/json/yaml_doc.c) behind the allowlist and the CI
 * providers map: the tree yaml_doc_build() makes, yaml_doc_to_jv()'s JSON value (strings only,
 * keys once), anchors, aliases and second documents refused, the caps on size, depth and nodes,
 * problems as sorted "LINE:COL: message" lines (at most 50), and the quoting of values in
 * messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crcr_limits.h"
#include "unit_support.h"
#include "yaml_doc.h"

/* ---------------------------------------------------------------------------------------- */
/* Helpers. */

/* yaml_doc_to_jv() on a string that must be accepted; the value as compact JSON (static). */
static const char *to_json(const char *yaml, size_t len, size_t max)
{
    static char out[4096];
    buf_t errors, dump;
    buf_init(&errors, 65536);
    buf_init(&dump, sizeof(out));
    jv *doc = NULL;
    crcr_err rc = yaml_doc_to_jv(yaml, len, max, &doc, &errors);
    if (rc != CRCR_OK)
        fail_msg("expected a document, got %s:\n%s", crcr_strerror(rc), buf_cstr(&errors));
    assert_int_equal(errors.len, 0);
    assert_non_null(doc);
    assert_int_equal(jv_dump(doc, &dump), CRCR_OK);
    snprintf(out, sizeof(out), "%s", buf_cstr(&dump));
    jv_free(doc);
    buf_free(&dump);
    buf_free(&errors);
    return out;
}

static const char *json_of(const char *yaml)
{
    return to_json(yaml, strlen(yaml), CRCR_ALLOWLIST_MAX_BYTES);
}

/* yaml_doc_to_jv() on `len` bytes that must be refused with `want`; the problems (caller
 * frees). */
static char *refused_n(const char *yaml, size_t len, size_t max, crcr_err want)
{
    buf_t errors;
    buf_init(&errors, 1024 * 1024);
    jv *doc = jv_new_null(); /* must be reset to NULL */
    jv *was = doc;
    crcr_err rc = yaml_doc_to_jv(yaml, len, max, &doc, &errors);
    jv_free(was);
    if (rc != want)
        fail_msg("expected %s, got %s:\n%s", crcr_strerror(want), crcr_strerror(rc),
                 buf_cstr(&errors));
    assert_null(doc);
    ut_assert_error_lines(buf_cstr(&errors));
    size_t n;
    return buf_detach(&errors, &n);
}

static char *refused(const char *yaml, crcr_err want)
{
    return refused_n(yaml, strlen(yaml), CRCR_ALLOWLIST_MAX_BYTES, want);
}

/* Asserts that `yaml` is refused with exactly the one problem `line`. */
static void expect_only(const char *yaml, crcr_err want, const char *line)
{
    char *errors = refused(yaml, want);
    char whole[1024];
    snprintf(whole, sizeof(whole), "%s\n", line);
    assert_string_equal(errors, whole);
    free(errors);
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; (s = strchr(s, '\n')); s++)
        n++;
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* The document as JSON. */

static void test_scalars_are_strings_whatever_their_tag(void **state)
{
    assert_string_equal(json_of("a: !!int 5\nb: !!bool true\nc: !!null ''\nd: !custom x\n"
                                "e: !!str null\nf: \"null\"\ng: ~\nh:\ni: [1, {j: k}]\n"
                                "k: 1.5e3\nl: NULL\nm: 'Null'\n"),
                        "{\"a\":\"5\",\"b\":\"true\",\"c\":null,\"d\":\"x\",\"e\":\"null\","
                        "\"f\":\"null\",\"g\":null,\"h\":null,\"i\":[\"1\",{\"j\":\"k\"}],"
                        "\"k\":\"1.5e3\",\"l\":null,\"m\":\"Null\"}");
    /* A tag on a collection changes nothing either. */
    assert_string_equal(json_of("!!map {a: !!seq [b]}"), "{\"a\":[\"b\"]}");
    assert_string_equal(json_of("- a\n- - b\n  - c\n"), "[\"a\",[\"b\",\"c\"]]");
    assert_string_equal(json_of("plain text"), "\"plain text\"");
}

static void test_empty_inputs_are_a_null_document(void **state)
{
    static const char *empty[] = {"", "# only a comment\n", "\n\n  \n", "---\n", "--- \n...\n"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
        assert_string_equal(json_of(empty[i]), "null");
    /* No pointer and no length is no input; a pointer missing for some length is refused. */
    assert_string_equal(to_json(NULL, 0, 16), "null");
    char *errors = refused_n(NULL, 5, 16, CRCR_E_INVALID);
    assert_string_equal(errors, "1:1: no input\n");
    free(errors);
}

static void test_duplicate_keys_are_refused_at_the_second(void **state)
{
    expect_only("a: 1\nb: 2\na: 3\n", CRCR_E_INVALID, "3:1: duplicate key 'a'");
    /* Quoting does not make another key. */
    expect_only("a: 1\n'a': 2\n", CRCR_E_INVALID, "2:1: duplicate key 'a'");
    expect_only("{x: 1, x: 2}", CRCR_E_INVALID, "1:8: duplicate key 'x'");
    /* In a nested mapping, with the key's control bytes quoted in the message. */
    expect_only("top:\n  \"a\\tb\": 1\n  \"a\\tb\": 2\n", CRCR_E_INVALID,
                "3:3: duplicate key 'a\\x09b'");
    /* The same key in two mappings is no duplicate; keys differing in case are two keys. */
    assert_string_equal(json_of("a: {k: 1}\nb: {k: 2}\nA: 3\n"),
                        "{\"a\":{\"k\":\"1\"},\"b\":{\"k\":\"2\"},\"A\":\"3\"}");
}

static void test_mapping_keys_must_be_strings(void **state)
{
    expect_only("? [a]\n: b\n", CRCR_E_INVALID, "1:3: a mapping key must be a string, got list");
    expect_only("? {a: b}\n: c\n", CRCR_E_INVALID,
                "1:3: a mapping key must be a string, got mapping");
    expect_only("~: b\n", CRCR_E_INVALID, "1:1: a mapping key must be a string, got null");
    expect_only("x:\n  null: b\n", CRCR_E_INVALID, "2:3: a mapping key must be a string, got null");
    /* An empty quoted key is a string. */
    assert_string_equal(json_of("'': b\n"), "{\"\":\"b\"}");
}

/* ---------------------------------------------------------------------------------------- */
/* What the reader refuses. */

static void test_anchors_and_aliases_are_refused_where_declared(void **state)
{
    expect_only("x: &a 1\n", CRCR_E_INVALID,
                "1:4: anchors and aliases are not allowed (anchor '&a')");
    expect_only("x: &l [a]\n", CRCR_E_INVALID,
                "1:4: anchors and aliases are not allowed (anchor '&l')");
    expect_only("x: &m {a: b}\n", CRCR_E_INVALID,
                "1:4: anchors and aliases are not allowed (anchor '&m')");
    expect_only("x: [*y]\n", CRCR_E_INVALID,
                "1:5: anchors and aliases are not allowed (alias '*y')");
    /* A key with an anchor, after valid content. */
    expect_only("a: 1\n&k b: 2\n", CRCR_E_INVALID,
                "2:1: anchors and aliases are not allowed (anchor '&k')");
}

static void test_billion_laughs_stops_at_its_first_anchor(void **state)
{
    const char *data = getenv("CRCR_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof(path), "%s/allowlist/billion_laughs.yml", data && *data ? data : "");
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (set CRCR_TEST_DATA)", path);
    char text[8192];
    size_t len = fread(text, 1, sizeof(text), f);
    fclose(f);
    assert_true(len > 0 && len < sizeof(text));
    /* One problem: nothing after the first anchor is expanded, or even read. */
    char *errors = refused_n(text, len, sizeof(text), CRCR_E_INVALID);
    assert_string_equal(errors, "1:4: anchors and aliases are not allowed (anchor '&a')\n");
    free(errors);
}

static void test_only_one_document(void **state)
{
    expect_only("a: 1\n---\nb: 2\n", CRCR_E_INVALID,
                "2:1: only one YAML document is allowed (found a second one here)");
    expect_only("--- a\n--- b\n", CRCR_E_INVALID,
                "2:1: only one YAML document is allowed (found a second one here)");
    /* One explicit document, with its end marker, is fine. */
    assert_string_equal(json_of("---\na: 1\n...\n"), "{\"a\":\"1\"}");
}

static void test_nul_characters_are_refused(void **state)
{
    expect_only("a: \"x\\0y\"\n", CRCR_E_INVALID, "1:4: NUL characters are not allowed");
    expect_only("a: [\"\\0\"]\n", CRCR_E_INVALID, "1:5: NUL characters are not allowed");
}

static void test_syntax_errors_carry_line_and_column(void **state)
{
    expect_only("a:\n  - b\n - c\n", CRCR_E_INVALID,
                "3:2: YAML syntax error: while parsing a block mapping did not find expected key "
                "(started at 1:1)");
    expect_only("a: [b\n", CRCR_E_INVALID,
                "2:1: YAML syntax error: while parsing a flow sequence did not find expected ',' "
                "or ']' (started at 1:4)");
    expect_only("a: b: c\n", CRCR_E_INVALID,
                "1:5: YAML syntax error: mapping values are not allowed in this context");
    /* Invalid UTF-8 is a reader error, which libyaml reports as a byte offset only: the 0xff is
     * byte 8, the sixth column of line 2. */
    expect_only("a:\n  - b\xff\n", CRCR_E_INVALID,
                "2:6: YAML syntax error: invalid leading UTF-8 octet");
}

/* ---------------------------------------------------------------------------------------- */
/* The caps. */

static void test_size_cap_is_checked_before_parsing(void **state)
{
    /* Exactly the cap is read. */
    assert_string_equal(to_json("a: bcdef", 8, 8), "{\"a\":\"bcdef\"}");
    char *errors = refused_n("a: bcdefg", 9, 8, CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "1:1: the document is larger than the limit of 8 bytes\n");
    free(errors);
    /* Nothing is parsed past the cap: a broken document yields the size problem alone. */
    errors = refused_n("[&a *a", 6, 5, CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "1:1: the document is larger than the limit of 5 bytes\n");
    free(errors);
}

/* `n` nested flow sequences, "[[...]]". */
static void nested(char *out, size_t outsz, unsigned n)
{
    assert_true(2u * n < outsz);
    memset(out, '[', n);
    memset(out + n, ']', n);
    out[2u * n] = '\0';
}

static void test_depth_cap(void **state)
{
    char yaml[64];
    nested(yaml, sizeof(yaml), CRCR_ALLOWLIST_MAX_DEPTH);
    assert_string_equal(json_of(yaml), "[[[[[[[[]]]]]]]]");
    nested(yaml, sizeof(yaml), CRCR_ALLOWLIST_MAX_DEPTH + 1);
    expect_only(yaml, CRCR_E_TOO_LARGE, "1:9: nesting deeper than 8 levels");
    /* Mappings count as levels too: 8 levels of mapping, then a list. */
    expect_only("a: {b: {c: {d: {e: {f: {g: {h: [x]}}}}}}}\n", CRCR_E_TOO_LARGE,
                "1:32: nesting deeper than 8 levels");
}

static void test_deep_nesting_attack_stops_at_the_limit(void **state)
{
    size_t n = 200000;
    char *yaml = malloc(n + 1);
    assert_non_null(yaml);
    memset(yaml, '[', n);
    yaml[n] = '\0';
    /* One problem, at the ninth bracket: the reader stopped there (no "unclosed" error for the
     * 199,991 brackets after it). */
    expect_only(yaml, CRCR_E_TOO_LARGE, "1:9: nesting deeper than 8 levels");
    free(yaml);
}

static void test_node_cap(void **state)
{
    /* The root list and MAX_NODES - 1 scalars: exactly the cap. */
    buf_t b;
    buf_init(&b, CRCR_ALLOWLIST_MAX_BYTES);
    assert_int_equal(buf_putc(&b, '['), CRCR_OK);
    for (unsigned i = 0; i + 1 < CRCR_ALLOWLIST_MAX_NODES; i++)
        assert_int_equal(buf_puts(&b, "0,"), CRCR_OK);
    assert_int_equal(buf_putc(&b, ']'), CRCR_OK);
    jv *doc = NULL;
    assert_int_equal(yaml_doc_to_jv(b.data, b.len, CRCR_ALLOWLIST_MAX_BYTES, &doc, NULL), CRCR_OK);
    assert_int_equal(jv_arr_len(doc), CRCR_ALLOWLIST_MAX_NODES - 1);
    jv_free(doc);
    /* One more scalar: refused at that scalar (column 2 + 2 * 99,999). */
    b.len--;
    assert_int_equal(buf_puts(&b, "0]"), CRCR_OK);
    char *errors = refused_n(b.data, b.len, CRCR_ALLOWLIST_MAX_BYTES, CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "1:200000: more than 100000 YAML nodes\n");
    free(errors);
    buf_free(&b);
}

static void test_truncated_inputs_never_crash_or_half_load(void **state)
{
    static const char text[] = "# providers\n"
                               "buildkite:\n"
                               "  org-1:\n"
                               "    - pipeline: p1\n"
                               "      repo: \"o/r\"\n"
                               "    - {pipeline: p2, repo: 'o/s'}\n"
                               "other: [a, b, ~]\n";
    size_t valid = 0;
    for (size_t n = 0; n < sizeof(text); n++) {
        buf_t errors;
        buf_init(&errors, 65536);
        jv *doc = NULL;
        crcr_err rc = yaml_doc_to_jv(text, n, sizeof(text), &doc, &errors);
        if (rc == CRCR_OK) {
            assert_non_null(doc);
            assert_int_equal(errors.len, 0);
            valid++;
        } else {
            assert_int_equal(rc, CRCR_E_INVALID);
            assert_null(doc);
            ut_assert_error_lines(buf_cstr(&errors));
        }
        jv_free(doc);
        buf_free(&errors);
    }
    assert_true(valid > 0 && valid < sizeof(text));
}

/* ---------------------------------------------------------------------------------------- */
/* The tree and the problems, for readers of other formats (allowlist.c). */

static void test_the_tree_keeps_positions_and_children(void **state)
{
    static const char text[] = "a: [x, ~]\nb: {}\nc: ''\n";
    yaml_doc d;
    yaml_doc_init(&d, text, strlen(text));
    assert_true(yaml_doc_build(&d));
    assert_true(d.root != YN_NONE);
    const ynode *root = &d.nodes[d.root];
    assert_int_equal(root->type, YN_MAP);
    assert_int_equal(root->nchild, 6); /* key, value, key, value, key, value */
    assert_string_equal(yaml_doc_type_name(root), "mapping");

    size_t ka = root->first;
    assert_string_equal(d.nodes[ka].text, "a");
    assert_int_equal(d.nodes[ka].line, 1);
    assert_int_equal(d.nodes[ka].col, 1);
    const ynode *va = &d.nodes[d.nodes[ka].next];
    assert_int_equal(va->type, YN_SEQ);
    assert_int_equal(va->nchild, 2);
    assert_int_equal(va->col, 4);
    assert_null(va->text);
    assert_string_equal(d.nodes[va->first].text, "x");
    assert_false(d.nodes[va->first].is_null);
    assert_true(d.nodes[va->last].is_null);
    assert_string_equal(yaml_doc_type_name(&d.nodes[va->last]), "null");
    assert_int_equal(d.nodes[va->last].next, YN_NONE);

    size_t kb = yaml_doc_next_key(&d, ka);
    assert_string_equal(d.nodes[kb].text, "b");
    assert_int_equal(d.nodes[kb].line, 2);
    assert_int_equal(d.nodes[d.nodes[kb].next].nchild, 0);
    size_t kc = yaml_doc_next_key(&d, kb);
    const ynode *vc = &d.nodes[d.nodes[kc].next];
    assert_false(vc->is_null); /* quoted: an empty string */
    assert_int_equal(vc->len, 0);
    assert_string_equal(yaml_doc_type_name(vc), "string");
    assert_int_equal(yaml_doc_next_key(&d, kc), YN_NONE);
    assert_string_equal(yaml_doc_type_name(NULL), "nothing");

    buf_t errors;
    buf_init(&errors, 1024);
    assert_int_equal(yaml_doc_finish(&d, &errors), CRCR_OK);
    assert_int_equal(errors.len, 0);
    assert_null(d.nodes);
    buf_free(&errors);

    /* Only a comment: no root. */
    yaml_doc_init(&d, "# nothing\n", 10);
    assert_true(yaml_doc_build(&d));
    assert_int_equal(d.root, YN_NONE);
    assert_int_equal(yaml_doc_finish(&d, NULL), CRCR_OK);
}

static void test_problems_come_out_sorted_by_position(void **state)
{
    yaml_doc d;
    yaml_doc_init(&d, "", 0);
    yaml_doc_error(&d, 3, 1, false, "third %s", "line");
    yaml_doc_error(&d, 1, 5, false, "first line, column %d (recorded first)", 5);
    yaml_doc_error(&d, 1, 2, false, "first line, column 2");
    yaml_doc_error(&d, 1, 5, false, "first line, column 5 (recorded second)");
    buf_t errors;
    buf_init(&errors, 4096);
    assert_int_equal(yaml_doc_finish(&d, &errors), CRCR_E_INVALID);
    assert_string_equal(buf_cstr(&errors), "1:2: first line, column 2\n"
                                           "1:5: first line, column 5 (recorded first)\n"
                                           "1:5: first line, column 5 (recorded second)\n"
                                           "3:1: third line\n");
    assert_null(d.errs);
    assert_int_equal(d.nerrs, 0);
    buf_free(&errors);

    /* A problem marked as a limit makes the outcome CRCR_E_TOO_LARGE. */
    yaml_doc_init(&d, "", 0);
    yaml_doc_error(&d, 1, 1, false, "a rule");
    yaml_doc_error(&d, 2, 1, true, "a limit");
    assert_int_equal(yaml_doc_finish(&d, NULL), CRCR_E_TOO_LARGE);
}

static void test_problems_stop_at_fifty(void **state)
{
    yaml_doc d;
    yaml_doc_init(&d, "", 0);
    for (unsigned i = 1; i <= 200; i++)
        yaml_doc_error(&d, i, 1, false, "problem %u", i);
    assert_true(d.stopped);
    /* Past the stop a limit still counts for the outcome, though it is not written. */
    yaml_doc_error(&d, 201, 1, true, "a limit");
    buf_t errors;
    buf_init(&errors, 65536);
    assert_int_equal(yaml_doc_finish(&d, &errors), CRCR_E_TOO_LARGE);
    const char *e = buf_cstr(&errors);
    assert_int_equal(count_lines(e), 50);
    assert_true(strncmp(e, "1:1: problem 1\n", 15) == 0);
    assert_non_null(strstr(e, "\n49:1: problem 49\n50:1: too many problems; stopping after 49\n"));
    assert_null(strstr(e, "problem 50"));
    assert_null(strstr(e, "a limit"));
    buf_free(&errors);
}

static void test_messages_are_copied_and_bounded(void **state)
{
    yaml_doc d;
    yaml_doc_init(&d, "", 0);
    char msg[16] = "original";
    yaml_doc_error(&d, 1, 1, false, "%s", msg);
    memcpy(msg, "changed!", 9);
    char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    yaml_doc_error(&d, 2, 1, false, "%s", big);
    buf_t errors;
    buf_init(&errors, 65536);
    assert_int_equal(yaml_doc_finish(&d, &errors), CRCR_E_INVALID);
    const char *e = buf_cstr(&errors);
    assert_true(strncmp(e, "1:1: original\n2:1: xxx", 22) == 0);
    /* A message is cut to fit its 768-byte buffer (767 bytes and the NUL), never dropped. */
    assert_int_equal(strlen(e), strlen("1:1: original\n2:1: ") + 767 + 1);
    buf_free(&errors);
}

/* ---------------------------------------------------------------------------------------- */
/* Quoting values in messages. */

static void test_quote_escapes_and_bounds(void **state)
{
    char q[YAML_DOC_QUOTE_SIZE];
    yaml_doc_quote(q, sizeof(q), "a\tb'c\\d\x7f\n", 9);
    assert_string_equal(q, "a\\x09b\\x27c\\x5cd\\x7f\\x0a");
    /* Bytes >= 0x80 are copied as they are. */
    yaml_doc_quote(q, sizeof(q), "caf\xc3\xa9", 5);
    assert_string_equal(q, "caf\xc3\xa9");
    /* Only `n` bytes are read. */
    yaml_doc_quote(q, sizeof(q), "abcdef", 3);
    assert_string_equal(q, "abc");

    char s[200];
    memset(s, 'a', sizeof(s));
    yaml_doc_quote(q, sizeof(q), s, YAML_DOC_QUOTE_MAX);
    assert_int_equal(strlen(q), YAML_DOC_QUOTE_MAX);
    yaml_doc_quote(q, sizeof(q), s, YAML_DOC_QUOTE_MAX + 1);
    assert_int_equal(strlen(q), YAML_DOC_QUOTE_MAX + 3);
    assert_string_equal(q + YAML_DOC_QUOTE_MAX, "...");

    /* A two-byte character across the cut is dropped whole. */
    memcpy(s + YAML_DOC_QUOTE_MAX - 1, "\xc3\xa9zz", 4);
    yaml_doc_quote(q, sizeof(q), s, YAML_DOC_QUOTE_MAX + 3);
    assert_int_equal(strlen(q), YAML_DOC_QUOTE_MAX - 1 + 3);
    assert_string_equal(q + YAML_DOC_QUOTE_MAX - 1, "...");

    /* Escapes fill the output: every byte a control byte still fits YAML_DOC_QUOTE_SIZE. */
    memset(s, '\x01', sizeof(s));
    yaml_doc_quote(q, sizeof(q), s, sizeof(s));
    assert_true(strlen(q) < sizeof(q));
    assert_int_equal(strlen(q), 4u * YAML_DOC_QUOTE_MAX + 3);

    /* A small buffer cuts early, still NUL-terminated and marked. */
    char small[16];
    yaml_doc_quote(small, sizeof(small), "abcdefghijklmnopqrstuvwxyz", 26);
    assert_string_equal(small, "abcdefgh...");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars_are_strings_whatever_their_tag),
        cmocka_unit_test(test_empty_inputs_are_a_null_document),
        cmocka_unit_test(test_duplicate_keys_are_refused_at_the_second),
        cmocka_unit_test(test_mapping_keys_must_be_strings),
        cmocka_unit_test(test_anchors_and_aliases_are_refused_where_declared),
        cmocka_unit_test(test_billion_laughs_stops_at_its_first_anchor),
        cmocka_unit_test(test_only_one_document),
        cmocka_unit_test(test_nul_characters_are_refused),
        cmocka_unit_test(test_syntax_errors_carry_line_and_column),
        cmocka_unit_test(test_size_cap_is_checked_before_parsing),
        cmocka_unit_test(test_depth_cap),
        cmocka_unit_test(test_deep_nesting_attack_stops_at_the_limit),
        cmocka_unit_test(test_node_cap),
        cmocka_unit_test(test_truncated_inputs_never_crash_or_half_load),
        cmocka_unit_test(test_the_tree_keeps_positions_and_children),
        cmocka_unit_test(test_problems_come_out_sorted_by_position),
        cmocka_unit_test(test_problems_stop_at_fifty),
        cmocka_unit_test(test_messages_are_copied_and_bounded),
        cmocka_unit_test(test_quote_escapes_and_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
