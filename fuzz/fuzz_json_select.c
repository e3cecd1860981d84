/*
 * fuzz_json_select.c - differential libFuzzer target: jv_parse_select() against jv_parse().
 *
 * Input: the whole input is a JSON document (any bytes), parsed by both functions with one fixed
 * selection: the paths webhook_handle() reads plus short generic ones ("a", "a.b", "a.b.c", ...)
 * that mutated inputs reach easily, a path with an escaped-looking and a non-ASCII key, and the
 * jv_path() oddities "a..b" (an empty key) and "b." (a trailing dot).
 *
 * Invariants checked (abort on violation), from json.h:
 *   - jv_parse_select() succeeds exactly when jv_parse() does (same validation, same limits), and
 *     jv_validate() (which builds nothing and compares no keys) too but for a duplicate key,
 *     telling whether the root is an object;
 *   - on success, for every selected path p, jv_path(selected, p) is json-equal to
 *     jv_path(full, p), and both are absent together;
 *   - every proper prefix of a selected path names an object in the result exactly when it names
 *     an object in the document;
 *   - the result is an object exactly when the document is; an array root gives an empty array,
 *     a scalar root the equal scalar;
 *   - a failure always leaves a non-empty reason in err;
 *   - for every key k without a backslash of a valid object document, jv_member_span(k), when it
 *     finds k as written, gives a span whose bytes parse to a value json-equal to jv_get(full, k).
 * Seeds: fuzz/corpus/json_select/ (small documents for each rule, regressions as regress-*).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "webhook.h"
#include "fuzz_check.h"

/* Generic paths, selected together with webhook_json_paths. */
static const char *const extra_paths[] = {
    "a", "a.b", "a.b.c", "b", "c.d", "x", "\xc3\xa9.a", "a..b", "b.", "pull_request", "d.e.f.g",
};
#define N_EXTRA (sizeof(extra_paths) / sizeof(extra_paths[0]))
#define PATHS_MAX 64 /* CRCR_JSON_SELECT_MAX_PATHS */

static const char *paths[PATHS_MAX];
static size_t N_PATHS;

/* The selection: webhook_json_paths, then extra_paths (built once). */
static void init_paths(void)
{
    if (N_PATHS)
        return;
    for (size_t i = 0; i < webhook_json_paths_n && N_PATHS < PATHS_MAX; i++)
        paths[N_PATHS++] = webhook_json_paths[i];
    for (size_t i = 0; i < N_EXTRA && N_PATHS < PATHS_MAX; i++)
        paths[N_PATHS++] = extra_paths[i];
}

/* Whether jv_path(root, prefix of p up to n bytes) is an object. */
static int prefix_is_obj(const jv *root, const char *p, size_t n)
{
    char buf[256];
    if (n >= sizeof(buf))
        return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return jv_is_obj(jv_path(root, buf));
}

/* jv_member_span of every member of `full` (a valid object document `text`) gives its value. */
static void check_member_spans(const char *text, size_t size, jv *full)
{
    if (!jv_is_obj(full))
        return;
    for (void *it = jv_iter(full); it; it = jv_iter_next(full, it)) {
        const char *k = jv_iter_key(it);
        size_t off = 0, n = 0;
        if (strchr(k, '\\')) /* as written, another member's spelling may equal it */
            continue;
        if (!jv_member_span(text, size, k, &off, &n))
            continue; /* written with escapes, or a NUL-containing key: not found as written */
        CHECK(off + n <= size);
        jv *v = jv_parse(text + off, n, NULL, 0);
        CHECK(v != NULL && jv_equal(v, jv_iter_val(it)));
        jv_free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_paths();
    const char *text = (const char *)data;
    char e1[160] = "", e2[160] = "";
    jv *full = jv_parse(text, size, e1, sizeof(e1));
    jv *sel = jv_parse_select(text, size, paths, N_PATHS, e2, sizeof(e2));
    bool is_obj = false;
    char e3[160] = "";
    bool valid = jv_validate(text, size, &is_obj, e3, sizeof(e3));
    CHECK(!full || valid);
    CHECK(full || !valid || strstr(e1, "duplicate") != NULL);
    CHECK(valid ? !full || is_obj == jv_is_obj(full) : e3[0] != '\0');
    if (!full || !sel) {
        if (full || sel)
            fprintf(stderr, "jv_parse: %s\njv_parse_select: %s\n", full ? "ok" : e1,
                    sel ? "ok" : e2);
        CHECK(!full && !sel);
        CHECK(e2[0] != '\0');
        return 0;
    }
    CHECK(jv_is_obj(full) == jv_is_obj(sel));
    check_member_spans(text, size, full);
    if (jv_is_arr(full))
        CHECK(jv_is_arr(sel) && jv_arr_len(sel) == 0);
    else if (!jv_is_obj(full))
        CHECK(jv_equal(full, sel));
    for (size_t k = 0; k < N_PATHS; k++) {
        const jv *a = jv_path(full, paths[k]);
        const jv *b = jv_path(sel, paths[k]);
        if (jv_is_obj(full)) {
            if (!a || !b) {
                if (a || b)
                    fprintf(stderr, "path %s: document %s, selection %s\n", paths[k],
                            a ? "has it" : "absent", b ? "has it" : "absent");
                CHECK(!a && !b);
            } else {
                CHECK(jv_equal(a, b));
            }
            for (size_t n = 0; paths[k][n]; n++) {
                if (paths[k][n] == '.')
                    CHECK(prefix_is_obj(full, paths[k], n) == prefix_is_obj(sel, paths[k], n));
            }
        }
    }
    jv_free(full);
    jv_free(sel);
    return 0;
}
