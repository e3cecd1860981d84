/*
 * test_allowlist.c - the allowlist parser and queries (src/config/allowlist.c).
 *
 * Covers upstream test_allowlist.py (reference §3.1) one to one, the production file's shape,
 * every parse rule with its LINE:COL, the allowlist's own limits, the refcount and the
 * `crcr allowlist check` command. The YAML reader's rules and caps are test_yaml_doc.c's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allowlist.h"
#include "cli.h"
#include "crcr_limits.h"
#include "unit_support.h"

/* ---------------------------------------------------------------------------------------- */
/* Helpers. */

static const char *data_dir(void)
{
    const char *d = getenv("CRCR_TEST_DATA");
    return d && *d ? d : "tests/data";
}

/* Returns the fixture's contents (caller frees). */
static char *read_fixture(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/allowlist/%s", data_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open fixture %s (set CRCR_TEST_DATA)", path);
    char *text = malloc(CRCR_ALLOWLIST_MAX_BYTES + 1);
    assert_non_null(text);
    *len = fread(text, 1, CRCR_ALLOWLIST_MAX_BYTES, f);
    text[*len] = '\0';
    fclose(f);
    return text;
}

static void fixture_path(char *out, size_t outsz, const char *name)
{
    snprintf(out, outsz, "%s/allowlist/%s", data_dir(), name);
}

/* Parses a string that must be valid. */
static allowlist *parse_ok(const char *yaml)
{
    buf_t errors;
    buf_init(&errors, 65536);
    allowlist *al = NULL;
    crcr_err rc = allowlist_parse(yaml, strlen(yaml), &al, &errors);
    if (rc != CRCR_OK)
        fail_msg("expected a valid allowlist, got %s:\n%s", crcr_strerror(rc), buf_cstr(&errors));
    assert_string_equal(buf_cstr(&errors), "");
    buf_free(&errors);
    assert_non_null(al);
    return al;
}

static allowlist *parse_fixture_ok(const char *name)
{
    size_t len;
    char *text = read_fixture(name, &len);
    allowlist *al = parse_ok(text);
    free(text);
    return al;
}

/* Parses `len` bytes that must be refused with `want`; returns the error text (caller frees). */
static char *parse_bad_n(const char *yaml, size_t len, crcr_err want)
{
    buf_t errors;
    buf_init(&errors, 65536);
    allowlist *al = (allowlist *)&errors; /* must be reset to NULL */
    crcr_err rc = allowlist_parse(yaml, len, &al, &errors);
    assert_int_equal(rc, want);
    assert_null(al);
    ut_assert_error_lines(buf_cstr(&errors));
    size_t n;
    return buf_detach(&errors, &n);
}

static char *parse_bad(const char *yaml, crcr_err want)
{
    return parse_bad_n(yaml, strlen(yaml), want);
}

/* Asserts that `errors` has exactly `line` (without its '\n') among its lines. */
static void assert_has_line(const char *errors, const char *line)
{
    size_t n = strlen(line);
    for (const char *s = errors; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (len == n && memcmp(s, line, n) == 0)
            return;
        s += len + (nl ? 1 : 0);
    }
    fail_msg("expected the line\n  %s\namong\n%s", line, errors);
}

static void expect_error(const char *yaml, crcr_err want, const char *line)
{
    char *errors = parse_bad(yaml, want);
    assert_has_line(errors, line);
    free(errors);
}

/* ---------------------------------------------------------------------------------------- */
/* Upstream §3.1. */

static void test_upstream_repos_at_or_above_l1_are_sorted_with_level_order_oncalls(void **state)
{
    allowlist *al = parse_fixture_ok("upstream_unit.yml");
    const char *repos[8];
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, repos, 8), 4);
    assert_string_equal(repos[0], "a/1");
    assert_string_equal(repos[1], "b/device1-repo");
    assert_string_equal(repos[2], "b/device2-repo");
    assert_string_equal(repos[3], "c/3");

    /* Oncalls in level order: exactly [oncall_b, oncall_c]. */
    const char *oncalls[8];
    size_t n = 0;
    for (size_t i = 0; i < allowlist_count(al); i++) {
        const allowlist_entry *e = allowlist_at(al, i);
        for (size_t j = 0; j < e->n_oncalls && n < 8; j++)
            oncalls[n++] = e->oncalls[j];
    }
    assert_int_equal(n, 2);
    assert_string_equal(oncalls[0], "oncall_b");
    assert_string_equal(oncalls[1], "oncall_c");
    allowlist_free(al);
}

static void test_upstream_device_repos_and_unknown_device(void **state)
{
    allowlist *al = parse_fixture_ok("upstream_unit.yml");
    const char *repos[4] = {NULL};
    assert_int_equal(allowlist_device_repos(al, "device1", repos, 4), 1);
    assert_string_equal(repos[0], "b/device1-repo");
    const allowlist_entry *e = allowlist_find(al, repos[0]);
    assert_non_null(e);
    assert_int_equal(e->n_oncalls, 1);
    assert_string_equal(e->oncalls[0], "oncall_b");
    assert_int_equal(allowlist_device_repos(al, "unknown", repos, 4), 0);
    assert_int_equal(allowlist_device_repos(al, "device2", repos, 4), 1);
    assert_string_equal(repos[0], "b/device2-repo");
    assert_int_equal(allowlist_find(al, "b/device2-repo")->n_oncalls, 0);
    allowlist_free(al);
}

static void test_upstream_repo_device(void **state)
{
    allowlist *al = parse_fixture_ok("upstream_unit.yml");
    assert_string_equal(allowlist_repo_device(al, "b/device1-repo"), "device1");
    assert_string_equal(allowlist_repo_device(al, "b/device2-repo"), "device2");
    assert_null(allowlist_repo_device(al, "a/1"));
    assert_null(allowlist_repo_device(al, "not/listed"));
    allowlist_free(al);
}

static void test_upstream_duplicate_across_levels_is_an_error(void **state)
{
    expect_error("L1: [org/repo]\nL2: [org/repo]\n", CRCR_E_INVALID,
                 "2:6: duplicate repo 'org/repo' (first at 1:6)");
}

static void test_upstream_l3_as_list_is_an_error(void **state)
{
    size_t len;
    char *text = read_fixture("l3_list.yml", &len);
    char *errors = parse_bad_n(text, len, CRCR_E_INVALID);
    assert_string_equal(errors,
                        "2:3: L3 must be a device mapping (e.g. 'device:\\n  org/repo: [oncall]'), "
                        "got list\n");
    free(errors);
    free(text);
}

/* ---------------------------------------------------------------------------------------- */
/* The production file. */

static void test_production_allowlist_parses_to_expected_levels(void **state)
{
    allowlist *al = parse_fixture_ok("production.yml");
    static const char *const l1[] = {"riseproject-dev/pytorch-ci",
                                     "NVIDIA-dev/pytorch-oot-internal", "NVIDIA/pytorch-windows-ci",
                                     "google-pytorch/torch_tpu", "RBLN-SW/torch-rbln"};
    static const char *const l2[] = {"TorchedHat/pytorch-redhat-ci", "Ascend/pytorch",
                                     "torch-spyre/torch-spyre", "vllm-project/vllm"};
    assert_int_equal(allowlist_count(al), 10);
    /* allowlist_at: level order, file order within a level. */
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(allowlist_at(al, i)->repo, l1[i]);
        assert_int_equal(allowlist_at(al, i)->level, CRCR_LEVEL_L1);
        assert_int_equal(allowlist_at(al, i)->n_oncalls, 0);
    }
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(allowlist_at(al, 5 + i)->repo, l2[i]);
        assert_int_equal(allowlist_at(al, 5 + i)->level, CRCR_LEVEL_L2);
    }
    const allowlist_entry *e = allowlist_at(al, 9);
    assert_string_equal(e->repo, "pytorch/crcr-test");
    assert_int_equal(e->level, CRCR_LEVEL_L3);
    assert_string_equal(e->device, "crcr-test");
    static const char *const oncalls[] = {"atalman",   "can-gaa-hou", "fffrog",
                                          "jewelkm89", "KarhouTam",   "subinz1"};
    assert_int_equal(e->n_oncalls, 6);
    for (size_t i = 0; i < 6; i++)
        assert_string_equal(e->oncalls[i], oncalls[i]);
    assert_int_equal(e->line, 37);
    assert_int_equal(e->col, 5);
    assert_null(allowlist_at(al, 10));

    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L4, NULL, 0), 0);
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L3, NULL, 0), 1);
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L2, NULL, 0), 5);
    /* Byte order: upper case sorts before lower case. */
    const char *repos[10];
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, repos, 10), 10);
    assert_string_equal(repos[0], "Ascend/pytorch");
    assert_string_equal(repos[9], "vllm-project/vllm");
    for (size_t i = 1; i < 10; i++)
        assert_true(strcmp(repos[i - 1], repos[i]) < 0);
    allowlist_free(al);
}

static void test_production_check_run_needs_the_exact_device_label(void **state)
{
    allowlist *al = parse_fixture_ok("production.yml");
    const char *good[] = {"ciflow/trunk", "ciflow/crcr/crcr-test"};
    const char *upper[] = {"ciflow/crcr/CRCR-test"};
    const char *prefix[] = {"ciflow/crcr/", "ciflow/crcr/crcr", "ciflow/crcr/crcr-test2"};
    const char *with_null[] = {NULL, "ciflow/crcr/crcr-test"};
    assert_true(allowlist_needs_check_run(al, "pytorch/crcr-test", good, 2));
    assert_true(allowlist_needs_check_run(al, "PyTorch/CRCR-test", good, 2));
    assert_false(allowlist_needs_check_run(al, "pytorch/crcr-test", good, 1));
    assert_false(allowlist_needs_check_run(al, "pytorch/crcr-test", upper, 1));
    assert_false(allowlist_needs_check_run(al, "pytorch/crcr-test", prefix, 3));
    assert_false(allowlist_needs_check_run(al, "pytorch/crcr-test", NULL, 0));
    assert_true(allowlist_needs_check_run(al, "pytorch/crcr-test", with_null, 2));
    /* L1 and L2 never need a check run, label or not. */
    const char *l2_label[] = {"ciflow/crcr/crcr-test"};
    assert_false(allowlist_needs_check_run(al, "Ascend/pytorch", l2_label, 1));
    assert_false(allowlist_needs_check_run(al, "RBLN-SW/torch-rbln", l2_label, 1));
    assert_false(allowlist_needs_check_run(al, "not/listed", l2_label, 1));
    allowlist_free(al);
}

static void test_l4_always_needs_a_check_run(void **state)
{
    allowlist *al = parse_fixture_ok("upstream_unit.yml");
    assert_true(allowlist_needs_check_run(al, "c/3", NULL, 0));
    assert_false(allowlist_needs_check_run(NULL, "c/3", NULL, 0));
    allowlist_free(al);
}

/* ---------------------------------------------------------------------------------------- */
/* Queries. */

static void test_level_lookup_is_case_insensitive(void **state)
{
    allowlist *al = parse_fixture_ok("production.yml");
    assert_int_equal(allowlist_level(al, "ascend/PYTORCH"), CRCR_LEVEL_L2);
    assert_int_equal(allowlist_level(al, "riseproject-dev/pytorch-ci"), CRCR_LEVEL_L1);
    assert_int_equal(allowlist_level(al, "pytorch/crcr-test"), CRCR_LEVEL_L3);
    assert_int_equal(allowlist_level(al, "pytorch/pytorch"), CRCR_LEVEL_NONE);
    assert_int_equal(allowlist_level(al, "Ascend/pytorch "), CRCR_LEVEL_NONE);
    assert_int_equal(allowlist_level(al, NULL), CRCR_LEVEL_NONE);
    assert_int_equal(allowlist_level(NULL, "Ascend/pytorch"), CRCR_LEVEL_NONE);
    /* The entry keeps the spelling of the file. */
    assert_string_equal(allowlist_find(al, "ascend/pytorch")->repo, "Ascend/pytorch");
    allowlist_free(al);
}

static void test_repos_at_or_above_fills_at_most_max_and_counts_all(void **state)
{
    allowlist *al = parse_fixture_ok("upstream_unit.yml");
    const char *repos[2] = {NULL, NULL};
    const char *sentinel[3] = {NULL, NULL, "untouched"};
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, sentinel, 2), 4);
    assert_string_equal(sentinel[0], "a/1");
    assert_string_equal(sentinel[1], "b/device1-repo");
    assert_string_equal(sentinel[2], "untouched");
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L3, repos, 2), 3);
    assert_string_equal(repos[0], "b/device1-repo");
    assert_string_equal(repos[1], "b/device2-repo");
    assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L4, repos, 2), 1);
    assert_string_equal(repos[0], "c/3");
    assert_int_equal(allowlist_repos_at_or_above(NULL, CRCR_LEVEL_L1, repos, 2), 0);
    allowlist_free(al);
}

static void test_entries_are_in_level_order_whatever_the_key_order(void **state)
{
    allowlist *al = parse_ok("L4: [d/4]\nL3: {dev: {c/3: []}}\nL2: [b/2]\nL1: [a/1, a/0]\n");
    static const char *const want[] = {"a/1", "a/0", "b/2", "c/3", "d/4"};
    assert_int_equal(allowlist_count(al), 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(allowlist_at(al, i)->repo, want[i]);
        assert_int_equal(allowlist_at(al, i)->level, i < 2 ? 1 : (int)i);
    }
    assert_string_equal(crcr_level_name(CRCR_LEVEL_L1), "L1");
    assert_string_equal(crcr_level_name(CRCR_LEVEL_L4), "L4");
    assert_string_equal(crcr_level_name(CRCR_LEVEL_NONE), "none");
    allowlist_free(al);
}

static void test_device_repos_keep_file_order(void **state)
{
    allowlist *al = parse_ok("L3:\n  npu:\n    z/last: []\n    a/first: []\n  gpu:\n"
                             "    m/mid: []\n");
    const char *repos[4];
    assert_int_equal(allowlist_device_repos(al, "npu", repos, 4), 2);
    assert_string_equal(repos[0], "z/last");
    assert_string_equal(repos[1], "a/first");
    assert_int_equal(allowlist_device_repos(al, "NPU", repos, 4), 0);
    assert_int_equal(allowlist_device_repos(al, "npu", repos, 1), 2);
    allowlist_free(al);
}

/* ---------------------------------------------------------------------------------------- */
/* Entries and oncalls. */

static void test_oncalls_string_and_list_forms(void **state)
{
    allowlist *al = parse_fixture_ok("oncall_forms.yml");
    const allowlist_entry *e;
    e = allowlist_find(al, "example-org/plain");
    assert_int_equal(e->n_oncalls, 0);
    e = allowlist_find(al, "example-org/comma");
    assert_int_equal(e->n_oncalls, 3);
    assert_string_equal(e->oncalls[0], "alice");
    assert_string_equal(e->oncalls[1], "bob");
    assert_string_equal(e->oncalls[2], "carol");
    e = allowlist_find(al, "example-org/list");
    assert_int_equal(e->n_oncalls, 2);
    assert_string_equal(e->oncalls[0], "dave");
    assert_string_equal(e->oncalls[1], "erin");
    e = allowlist_find(al, "example-org/none");
    assert_int_equal(e->level, CRCR_LEVEL_L1);
    assert_int_equal(e->n_oncalls, 0);
    e = allowlist_find(al, "example-org/block");
    assert_int_equal(e->n_oncalls, 2);
    assert_string_equal(e->oncalls[1], "grace");
    e = allowlist_find(al, "example-org/npu-ci");
    assert_int_equal(e->n_oncalls, 2);
    assert_string_equal(e->oncalls[0], "heidi");
    assert_string_equal(e->oncalls[1], "ivan");
    assert_int_equal(allowlist_find(al, "example-org/npu-nightly")->n_oncalls, 0);
    allowlist_free(al);
}

static void test_repo_strings_are_stripped_of_whitespace_then_slashes(void **state)
{
    allowlist *al = parse_ok("L1:\n  - '  /org/repo/ '\n  - \"//a/b//\": x\n");
    assert_string_equal(allowlist_at(al, 0)->repo, "org/repo");
    assert_string_equal(allowlist_at(al, 1)->repo, "a/b");
    assert_int_equal(allowlist_at(al, 0)->line, 2);
    assert_int_equal(allowlist_at(al, 0)->col, 5);
    allowlist_free(al);
    /* Whitespace inside the slashes is not stripped (upstream strips whitespace first). */
    expect_error("L1: ['/ a/b /']\n", CRCR_E_INVALID,
                 "1:6: L1[0]: invalid repo '/ a/b /': the owner must be 1-39 characters of A-Z, "
                 "a-z, 0-9 and '-'");
}

static void test_missing_and_null_levels_are_empty(void **state)
{
    allowlist *al = parse_ok("L1:\nL2: ~\nL3: null\nL4: []\n");
    assert_int_equal(allowlist_count(al), 0);
    allowlist_free(al);
    al = parse_ok("L2: [o/r]\n");
    assert_int_equal(allowlist_count(al), 1);
    assert_int_equal(allowlist_level(al, "o/r"), CRCR_LEVEL_L2);
    allowlist_free(al);
}

/* Issue 14: a file with `l1:` and `L5:` used to load as "OK, 0 repos". Every top-level key
 * must be a level; anything else is an error at its LINE:COL, with a hint for a lower-case one. */
static void test_unknown_top_level_keys_are_errors(void **state)
{
    char *errors = parse_bad("l1:\n  - a/one\nL5:\n  - b/two\n", CRCR_E_INVALID);
    assert_string_equal(errors,
                        "1:1: unknown top-level key 'l1': did you mean 'L1'? (keys are "
                        "case-sensitive)\n"
                        "3:1: unknown top-level key 'L5' (the keys are L1, L2, L3 and L4)\n");
    free(errors);
    /* Next to valid levels too: nothing half-loads. */
    errors = parse_bad("L1: [a/one]\nowners: {a: b}\nL2: [b/two]\n", CRCR_E_INVALID);
    assert_string_equal(errors,
                        "2:1: unknown top-level key 'owners' (the keys are L1, L2, L3 and L4)\n");
    free(errors);
    errors = parse_bad("L1: [a/one]\n? [x]\n: y\n", CRCR_E_INVALID);
    assert_string_equal(errors, "2:3: a top-level key must be L1, L2, L3 or L4, got a list\n");
    free(errors);
    errors = parse_bad("\"L1 \": [a/one]\n", CRCR_E_INVALID);
    assert_non_null(strstr(errors, "1:1: unknown top-level key 'L1 '"));
    free(errors);
    /* Quoted level names are the levels themselves. */
    allowlist *al = parse_ok("\"L1\": [a/one]\n'L4': [b/two]\n");
    assert_int_equal(allowlist_count(al), 2);
    allowlist_free(al);
}

static void test_empty_file_comments_and_empty_document_are_an_empty_allowlist(void **state)
{
    static const char *const empties[] = {"",    "# only a comment\n", "---\n", "--- ~\n", "{}",
                                          "\n\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        allowlist *al = parse_ok(empties[i]);
        assert_int_equal(allowlist_count(al), 0);
        assert_int_equal(allowlist_repos_at_or_above(al, CRCR_LEVEL_L1, NULL, 0), 0);
        assert_null(allowlist_find(al, "a/b"));
        allowlist_free(al);
    }
    allowlist *al = NULL;
    assert_int_equal(allowlist_parse(NULL, 0, &al, NULL), CRCR_OK);
    assert_int_equal(allowlist_count(al), 0);
    allowlist_free(al);
}

static void test_valid_github_names_are_accepted(void **state)
{
    allowlist *al = parse_ok("L1:\n"
                             "  - a/b\n"
                             "  - 0-9/x.y_z-1\n"
                             "  - abcdefghijklmnopqrstuvwxyz0123456789-ab/.github\n"
                             "  - o/...\n");
    assert_int_equal(allowlist_count(al), 4);
    allowlist_free(al);
}

/* ---------------------------------------------------------------------------------------- */
/* Errors, each with its LINE:COL. */

static void test_root_must_be_a_mapping(void **state)
{
    expect_error("- a/b\n", CRCR_E_INVALID, "1:1: expected a mapping with L1-L4 keys, got list");
    expect_error("just text\n", CRCR_E_INVALID,
                 "1:1: expected a mapping with L1-L4 keys, got string");
}

static void test_list_levels_must_be_lists(void **state)
{
    expect_error("L1: []\nL2: {a/b: x}\n", CRCR_E_INVALID, "2:5: L2 must be a list, got mapping");
    expect_error("L4: a/b\n", CRCR_E_INVALID, "1:5: L4 must be a list, got string");
    expect_error("L1: ''\n", CRCR_E_INVALID, "1:5: L1 must be a list, got string");
}

static void test_entries_must_be_owner_repo(void **state)
{
    expect_error("L1:\n  - ok/repo\n  - x\n", CRCR_E_INVALID,
                 "3:5: L1[1] must be in owner/repo format, got 'x'");
    expect_error("L2: ['  /  ']\n", CRCR_E_INVALID,
                 "1:6: L2[0] must be in owner/repo format, got '  /  '");
    expect_error("L4:\n  - noslash: oncall\n", CRCR_E_INVALID,
                 "2:5: L4[0] must be in owner/repo format, got 'noslash'");
}

static void test_names_are_checked_like_github(void **state)
{
    expect_error("L1: [a/b/c]\n", CRCR_E_INVALID,
                 "1:6: L1[0]: invalid repo 'a/b/c': owner/repo must contain exactly one '/'");
    expect_error("L1: [a//b]\n", CRCR_E_INVALID,
                 "1:6: L1[0]: invalid repo 'a//b': owner/repo must contain exactly one '/'");
    /* Owner: 40 characters is one too many; '_' and '.' are not allowed. */
    expect_error("L1: [abcdefghijklmnopqrstuvwxyz0123456789-abc/r]\n", CRCR_E_INVALID,
                 "1:6: L1[0]: invalid repo 'abcdefghijklmnopqrstuvwxyz0123456789-abc/r': the owner "
                 "must be 1-39 characters of A-Z, a-z, 0-9 and '-'");
    expect_error("L1: [my_org/r]\n", CRCR_E_INVALID,
                 "1:6: L1[0]: invalid repo 'my_org/r': the owner must be 1-39 characters of A-Z, "
                 "a-z, 0-9 and '-'");
    const char *name_msg = ": the name must be 1-100 characters of A-Z, a-z, 0-9, '.', '_' and "
                           "'-' (and not '.' or '..')";
    char line[512];
    snprintf(line, sizeof(line), "1:6: L1[0]: invalid repo 'o/..'%s", name_msg);
    expect_error("L1: [o/..]\n", CRCR_E_INVALID, line);
    snprintf(line, sizeof(line), "1:6: L1[0]: invalid repo 'o/r p'%s", name_msg);
    expect_error("L1: [o/r p]\n", CRCR_E_INVALID, line);
    snprintf(line, sizeof(line), "1:6: L1[0]: invalid repo 'o/r\\x09x'%s", name_msg);
    expect_error("L1: [\"o/r\\tx\"]\n", CRCR_E_INVALID, line);
    /* 100 characters pass, 101 do not. */
    char yaml[256], name[128];
    memset(name, 'n', 101);
    name[101] = '\0';
    snprintf(yaml, sizeof(yaml), "L1: [o/%s]\n", name);
    char *errors = parse_bad(yaml, CRCR_E_INVALID);
    assert_non_null(strstr(errors, "the name must be 1-100"));
    free(errors);
    name[100] = '\0';
    snprintf(yaml, sizeof(yaml), "L1: [o/%s]\n", name);
    allowlist *al = parse_ok(yaml);
    allowlist_free(al);
}

static void test_entry_must_be_a_string_or_a_single_key_mapping(void **state)
{
    expect_error("L4:\n  - {a/b: x, c/d: y}\n", CRCR_E_INVALID,
                 "2:5: L4[0]: mapping must have exactly one repo key");
    expect_error("L4:\n  - {}\n", CRCR_E_INVALID,
                 "2:5: L4[0]: mapping must have exactly one repo key");
    expect_error("L1:\n  - [a/b]\n", CRCR_E_INVALID,
                 "2:5: L1[0] must be a string or mapping, got list");
    expect_error("L1:\n  -\n  - a/b\n", CRCR_E_INVALID,
                 "2:4: L1[0] must be a string or mapping, got null");
    expect_error("L1:\n  - a/b: {x: y}\n", CRCR_E_INVALID,
                 "2:10: L1[0]: oncalls must be a string or a list, got mapping");
    expect_error("L1:\n  - a/b: [x, [y]]\n", CRCR_E_INVALID,
                 "2:14: L1[0]: each oncall must be a string, got list");
    expect_error("L1:\n  - ? [a/b]\n    : x\n", CRCR_E_INVALID,
                 "2:7: L1[0]: the repo key must be a string, got list");
}

static void test_l3_shape_errors(void **state)
{
    expect_error("L3: org/repo\n", CRCR_E_INVALID,
                 "1:5: L3 must be a device mapping (e.g. 'device:\\n  org/repo: [oncall]'), got "
                 "string");
    expect_error("L3:\n  ' ':\n    a/b: []\n", CRCR_E_INVALID,
                 "2:3: L3 device name must not be empty");
    expect_error("L3:\n  ~:\n    a/b: []\n", CRCR_E_INVALID,
                 "2:3: L3 device name must not be empty");
    expect_error("L3: {'': {a/b: []}}\n", CRCR_E_INVALID, "1:6: L3 device name must not be empty");
    expect_error("L3:\n  npu: [a/b]\n", CRCR_E_INVALID,
                 "2:8: L3.npu must be a repo mapping, got list");
    expect_error("L3:\n  npu:\n", CRCR_E_INVALID, "2:7: L3.npu must be a repo mapping, got null");
    expect_error("L3:\n  npu:\n    bad: []\n", CRCR_E_INVALID,
                 "3:5: L3.npu[0] must be in owner/repo format, got 'bad'");
    expect_error("L3:\n  npu: {a/b: [x]}\n  ' npu ': {c/d: []}\n", CRCR_E_INVALID,
                 "3:3: duplicate L3 device 'npu' (first at 2:3)");
    expect_error("L3:\n  npu:\n    a/b: {x: 1}\n", CRCR_E_INVALID,
                 "3:10: L3.npu[0]: oncalls must be a string or a list, got mapping");
    /* A stripped device name is what the label uses. */
    allowlist *al = parse_ok("L3:\n  ' npu ':\n    a/b: [x]\n");
    assert_string_equal(allowlist_repo_device(al, "a/b"), "npu");
    allowlist_free(al);
}

static void test_duplicate_is_case_insensitive_and_names_the_first(void **state)
{
    size_t len;
    char *text = read_fixture("duplicate_case.yml", &len);
    char *errors = parse_bad_n(text, len, CRCR_E_INVALID);
    assert_string_equal(errors, "4:5: duplicate repo 'example-org/repo' (first at 2:5)\n");
    free(errors);
    free(text);
    /* Within one level and within L3 too; the first one written is "first", whatever the level. */
    expect_error("L4: [x/Y]\nL1: [x/y]\n", CRCR_E_INVALID,
                 "2:6: duplicate repo 'x/y' (first at 1:6)");
    expect_error("L3:\n  a: {o/r: []}\n  b: {O/R: []}\n", CRCR_E_INVALID,
                 "3:7: duplicate repo 'O/R' (first at 2:7)");
    /* Normalisation happens before the comparison. */
    expect_error("L1: [o/r, ' /o/r/ ']\n", CRCR_E_INVALID,
                 "1:11: duplicate repo 'o/r' (first at 1:6)");
}

static void test_duplicate_top_level_key_is_an_error(void **state)
{
    expect_error("L1: [a/b]\nL2: []\nL1: [c/d]\n", CRCR_E_INVALID,
                 "3:1: duplicate key 'L1' (first at 1:1)");
}

static void test_every_problem_is_reported_in_file_order(void **state)
{
    size_t len;
    char *text = read_fixture("invalid_many.yml", &len);
    char *errors = parse_bad_n(text, len, CRCR_E_INVALID);
    assert_string_equal(errors, "3:5: L1[1] must be in owner/repo format, got 'not-a-repo'\n"
                                "4:5: L2 must be a list, got string\n"
                                "6:3: L3 device name must not be empty\n");
    free(errors);
    free(text);
}

static void test_truncated_inputs_never_crash_or_half_load(void **state)
{
    size_t len;
    char *text = read_fixture("production.yml", &len);
    size_t valid = 0;
    for (size_t n = 0; n <= len; n++) {
        buf_t errors;
        buf_init(&errors, 65536);
        allowlist *al = NULL;
        crcr_err rc = allowlist_parse(text, n, &al, &errors);
        if (rc == CRCR_OK) {
            assert_non_null(al);
            assert_int_equal(errors.len, 0);
            valid++;
        } else {
            assert_null(al);
            ut_assert_error_lines(buf_cstr(&errors));
        }
        allowlist_free(al);
        buf_free(&errors);
    }
    assert_true(valid > 0);
    free(text);
}

/* ---------------------------------------------------------------------------------------- */
/* YAML safety. */

/* The allowlist is read by the bounded YAML reader (test_yaml_doc.c covers its rules and caps):
 * an anchor, a second document and nesting past the depth cap are refused here too. */
static void test_the_yaml_reader_rules_and_caps_apply(void **state)
{
    size_t len;
    char *text = read_fixture("billion_laughs.yml", &len);
    char *errors = parse_bad_n(text, len, CRCR_E_INVALID);
    assert_string_equal(errors, "1:4: anchors and aliases are not allowed (anchor '&a')\n");
    free(errors);
    free(text);
    expect_error("L1: [a/b]\n---\nL1: [c/d]\n", CRCR_E_INVALID,
                 "2:1: only one YAML document is allowed (found a second one here)");
    errors = parse_bad("L1: [[[[[[[[a/b]]]]]]]]\n", CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "1:12: nesting deeper than 8 levels\n");
    free(errors);
}

static void test_oversize_input_is_refused_before_parsing(void **state)
{
    size_t n = CRCR_ALLOWLIST_MAX_BYTES + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, '#', n); /* one long comment: valid YAML if it were parsed */
    char *errors = parse_bad_n(big, n, CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "1:1: the allowlist is larger than the limit of 1048576 bytes\n");
    free(errors);
    /* Exactly at the limit is parsed. */
    allowlist *al = NULL;
    assert_int_equal(allowlist_parse(big, n - 1, &al, NULL), CRCR_OK);
    allowlist_free(al);
    free(big);
}

static void test_more_repos_per_level_than_the_limit_are_refused(void **state)
{
    buf_t b;
    buf_init(&b, CRCR_ALLOWLIST_MAX_BYTES);
    assert_int_equal(buf_puts(&b, "L2:\n"), CRCR_OK);
    for (unsigned i = 0; i < CRCR_ALLOWLIST_MAX_REPOS; i++)
        assert_int_equal(buf_printf(&b, "  - o/r%u\n", i), CRCR_OK);
    allowlist *al = parse_ok(b.data);
    assert_int_equal(allowlist_count(al), CRCR_ALLOWLIST_MAX_REPOS);
    assert_int_equal(allowlist_level(al, "O/R4999"), CRCR_LEVEL_L2);
    allowlist_free(al);
    assert_int_equal(buf_puts(&b, "  - o/one-too-many\n"), CRCR_OK);
    char *errors = parse_bad_n(b.data, b.len, CRCR_E_TOO_LARGE);
    assert_string_equal(errors, "5002:5: L2 has more than 5000 repos\n");
    free(errors);
    buf_free(&b);
}

static void test_more_oncalls_per_repo_than_the_limit_are_refused(void **state)
{
    buf_t b;
    buf_init(&b, 65536);
    assert_int_equal(buf_puts(&b, "L4:\n  - o/r: ["), CRCR_OK);
    for (unsigned i = 0; i < CRCR_ALLOWLIST_MAX_ONCALLS; i++)
        assert_int_equal(buf_printf(&b, "u%u, ", i), CRCR_OK);
    assert_int_equal(buf_puts(&b, "]\n"), CRCR_OK);
    allowlist *al = parse_ok(b.data);
    assert_int_equal(allowlist_find(al, "o/r")->n_oncalls, CRCR_ALLOWLIST_MAX_ONCALLS);
    allowlist_free(al);
    b.len -= 2;
    assert_int_equal(buf_puts(&b, "extra]\n"), CRCR_OK);
    char *errors = parse_bad_n(b.data, b.len, CRCR_E_TOO_LARGE);
    assert_non_null(strstr(errors, "L4[0]: more than 64 oncalls"));
    free(errors);
    buf_free(&b);
}

static void test_error_output_is_bounded(void **state)
{
    buf_t b;
    buf_init(&b, 65536);
    assert_int_equal(buf_puts(&b, "L1:\n"), CRCR_OK);
    for (unsigned i = 0; i < 200; i++)
        assert_int_equal(buf_puts(&b, "  - bad\n"), CRCR_OK);
    char *errors = parse_bad_n(b.data, b.len, CRCR_E_INVALID);
    size_t lines = 0;
    for (const char *s = errors; (s = strchr(s, '\n')); s++)
        lines++;
    assert_int_equal(lines, 50);
    assert_non_null(strstr(errors, "too many problems"));
    free(errors);
    buf_free(&b);
}

/* ---------------------------------------------------------------------------------------- */
/* Refcount. */

static void test_refcount_keeps_the_allowlist_until_the_last_reference(void **state)
{
    allowlist *al = parse_fixture_ok("production.yml");
    allowlist *again = allowlist_ref(al);
    assert_ptr_equal(again, al);
    allowlist_free(al);
    /* Still usable through the second reference (ASan would catch a use after free). */
    assert_int_equal(allowlist_level(again, "vllm-project/vllm"), CRCR_LEVEL_L2);
    allowlist_free(again);
    allowlist_free(NULL);
    assert_null(allowlist_ref(NULL));
}

static void *ref_worker(void *arg)
{
    allowlist *al = arg;
    for (int i = 0; i < 20000; i++) {
        allowlist *r = allowlist_ref(al);
        if (allowlist_level(r, "Ascend/pytorch") != CRCR_LEVEL_L2)
            return (void *)1;
        allowlist_free(r);
    }
    allowlist_free(al); /* the reference this thread was given */
    return NULL;
}

static void test_refcount_is_thread_safe(void **state)
{
    allowlist *al = parse_fixture_ok("production.yml");
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, ref_worker, allowlist_ref(al)), 0);
    allowlist_free(al); /* the threads may now hold the last references */
    for (int i = 0; i < 4; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* `crcr allowlist check`. */

typedef struct captured {
    int rc;
    char out[8192];
    char err[8192];
} captured;

static void slurp(FILE *f, char *dst, size_t dstsz)
{
    rewind(f);
    size_t n = fread(dst, 1, dstsz - 1, f);
    dst[n] = '\0';
    fclose(f);
}

/* Runs allowlist_check_main with stdout and stderr sent to temporary files. */
static void run_check(captured *c, int argc, char **argv)
{
    FILE *out = tmpfile(), *err = tmpfile();
    assert_non_null(out);
    assert_non_null(err);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(out), 1);
    dup2(fileno(err), 2);
    c->rc = allowlist_check_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    slurp(out, c->out, sizeof(c->out));
    slurp(err, c->err, sizeof(c->err));
}

static void test_check_prints_a_summary_and_exits_0(void **state)
{
    char path[1024];
    fixture_path(path, sizeof(path), "production.yml");
    char *argv[] = {"check", path, NULL};
    captured c;
    run_check(&c, 2, argv);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.err, "");
    char head[1100];
    snprintf(head, sizeof(head), "%s: OK, 10 repos\nL1: 5 repos\n", path);
    assert_true(strncmp(c.out, head, strlen(head)) == 0);
    assert_non_null(strstr(c.out, "\n  riseproject-dev/pytorch-ci\n"));
    assert_non_null(strstr(c.out, "\nL2: 4 repos\n"));
    assert_non_null(strstr(c.out, "\nL3: 1 repo in 1 device\n"
                                  "  crcr-test (label ciflow/crcr/crcr-test):\n"
                                  "    pytorch/crcr-test  oncalls: atalman, can-gaa-hou, fffrog, "
                                  "jewelkm89, KarhouTam, subinz1\n"
                                  "L4: 0 repos\n"));
}

static void test_check_prints_file_line_col_and_exits_1(void **state)
{
    char path[1024];
    fixture_path(path, sizeof(path), "invalid_many.yml");
    char *argv[] = {"check", path, NULL};
    captured c;
    run_check(&c, 2, argv);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.out, "");
    char want[4096];
    snprintf(want, sizeof(want),
             "%s:3:5: L1[1] must be in owner/repo format, got 'not-a-repo'\n"
             "%s:4:5: L2 must be a list, got string\n"
             "%s:6:3: L3 device name must not be empty\n",
             path, path, path);
    assert_string_equal(c.err, want);
}

static void test_check_usage_and_unreadable_file(void **state)
{
    captured c;
    char *none[] = {NULL};
    run_check(&c, 0, none);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "usage: crcr allowlist check FILE"));
    char *wrong[] = {"lint", "x.yml", NULL};
    run_check(&c, 2, wrong);
    assert_int_equal(c.rc, 2);
    char *extra[] = {"check", "a", "b", NULL};
    run_check(&c, 3, extra);
    assert_int_equal(c.rc, 2);

    char *missing[] = {"check", "/nonexistent/allowlist.yml", NULL};
    run_check(&c, 2, missing);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.err,
                        "/nonexistent/allowlist.yml: cannot read: No such file or directory\n");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/allowlist", data_dir());
    char *isdir[] = {"check", dir, NULL};
    run_check(&c, 2, isdir);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, ": cannot read: Is a directory\n"));
}

static void test_check_reports_an_oversize_file(void **state)
{
    char path[] = "/tmp/crcr-allowlist-big-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char block[4096];
    memset(block, '#', sizeof(block));
    for (size_t i = 0; i <= CRCR_ALLOWLIST_MAX_BYTES / sizeof(block); i++)
        assert_int_equal(write(fd, block, sizeof(block)), (ssize_t)sizeof(block));
    close(fd);
    char *argv[] = {"check", path, NULL};
    captured c;
    run_check(&c, 2, argv);
    unlink(path);
    assert_int_equal(c.rc, 1);
    char want[256];
    snprintf(want, sizeof(want),
             "%s:1:1: the allowlist is larger than the limit of 1048576 bytes\n", path);
    assert_string_equal(c.err, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upstream_repos_at_or_above_l1_are_sorted_with_level_order_oncalls),
        cmocka_unit_test(test_upstream_device_repos_and_unknown_device),
        cmocka_unit_test(test_upstream_repo_device),
        cmocka_unit_test(test_upstream_duplicate_across_levels_is_an_error),
        cmocka_unit_test(test_upstream_l3_as_list_is_an_error),
        cmocka_unit_test(test_production_allowlist_parses_to_expected_levels),
        cmocka_unit_test(test_production_check_run_needs_the_exact_device_label),
        cmocka_unit_test(test_l4_always_needs_a_check_run),
        cmocka_unit_test(test_level_lookup_is_case_insensitive),
        cmocka_unit_test(test_repos_at_or_above_fills_at_most_max_and_counts_all),
        cmocka_unit_test(test_entries_are_in_level_order_whatever_the_key_order),
        cmocka_unit_test(test_device_repos_keep_file_order),
        cmocka_unit_test(test_oncalls_string_and_list_forms),
        cmocka_unit_test(test_repo_strings_are_stripped_of_whitespace_then_slashes),
        cmocka_unit_test(test_missing_and_null_levels_are_empty),
        cmocka_unit_test(test_unknown_top_level_keys_are_errors),
        cmocka_unit_test(test_empty_file_comments_and_empty_document_are_an_empty_allowlist),
        cmocka_unit_test(test_valid_github_names_are_accepted),
        cmocka_unit_test(test_root_must_be_a_mapping),
        cmocka_unit_test(test_list_levels_must_be_lists),
        cmocka_unit_test(test_entries_must_be_owner_repo),
        cmocka_unit_test(test_names_are_checked_like_github),
        cmocka_unit_test(test_entry_must_be_a_string_or_a_single_key_mapping),
        cmocka_unit_test(test_l3_shape_errors),
        cmocka_unit_test(test_duplicate_is_case_insensitive_and_names_the_first),
        cmocka_unit_test(test_duplicate_top_level_key_is_an_error),
        cmocka_unit_test(test_every_problem_is_reported_in_file_order),
        cmocka_unit_test(test_truncated_inputs_never_crash_or_half_load),
        cmocka_unit_test(test_the_yaml_reader_rules_and_caps_apply),
        cmocka_unit_test(test_oversize_input_is_refused_before_parsing),
        cmocka_unit_test(test_more_repos_per_level_than_the_limit_are_refused),
        cmocka_unit_test(test_more_oncalls_per_repo_than_the_limit_are_refused),
        cmocka_unit_test(test_error_output_is_bounded),
        cmocka_unit_test(test_refcount_keeps_the_allowlist_until_the_last_reference),
        cmocka_unit_test(test_refcount_is_thread_safe),
        cmocka_unit_test(test_check_prints_a_summary_and_exits_0),
        cmocka_unit_test(test_check_prints_file_line_col_and_exits_1),
        cmocka_unit_test(test_check_usage_and_unreadable_file),
        cmocka_unit_test(test_check_reports_an_oversize_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
