/* Unit tests for json.c: the pitfalls the JSON choice was made on. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "json.h"
#include "webhook.h"
#include "crcr_limits.h"

static jv *parse(const char *s)
{
    return jv_parse(s, strlen(s), NULL, 0);
}

static void int64_ids_are_exact(void **state)
{
    jv *d = parse("{\"id\":28000000000,\"big\":9007199254740993}");
    assert_non_null(d);
    int64_t v = 0;
    assert_true(jv_int(jv_get(d, "id"), &v));
    assert_true(v == 28000000000LL);
    assert_true(jv_int(jv_get(d, "big"), &v));
    assert_true(v == 9007199254740993LL);
    jv_free(d);
}

static void duplicate_keys_are_rejected(void **state)
{
    char err[128] = "";
    const char *s = "{\"action\":\"opened\",\"action\":\"closed\"}";
    assert_null(jv_parse(s, strlen(s), err, sizeof(err)));
    assert_true(strlen(err) > 0);
}

static void lookups_are_case_sensitive(void **state)
{
    jv *d = parse("{\"Action\":\"x\",\"pull_request\":{\"head\":{\"sha\":\"abc\"}}}");
    assert_null(jv_get(d, "action"));
    assert_string_equal(jv_path_str(d, "pull_request.head.sha"), "abc");
    assert_null(jv_path_str(d, "pull_request.Head.sha"));
    assert_null(jv_path_str(d, "pull_request.head.sha.more"));
    jv_free(d);
}

static void depth_limit_is_enforced_before_parsing(void **state)
{
    size_t depth = CRCR_JSON_MAX_DEPTH + 1;
    char *s = malloc(depth * 2 + 1);
    for (size_t i = 0; i < depth; i++) {
        s[i] = '[';
        s[depth * 2 - 1 - i] = ']';
    }
    s[depth * 2] = '\0';
    assert_int_equal(jv_prescan(s, depth * 2, CRCR_JSON_MAX_DEPTH, CRCR_JSON_MAX_VALUES),
                     CRCR_E_TOO_LARGE);
    char err[128] = "";
    assert_null(jv_parse(s, depth * 2, err, sizeof(err)));
    assert_non_null(strstr(err, "limit"));
    /* One level less parses. */
    assert_non_null(strchr(s, ']'));
    jv *ok = jv_parse(s + 1, depth * 2 - 2, NULL, 0);
    assert_non_null(ok);
    jv_free(ok);
    free(s);
}

static void value_count_limit_counts_scalars_not_string_content(void **state)
{
    assert_int_equal(jv_prescan("[1,2,3]", 7, 8, 3), CRCR_E_TOO_LARGE);
    assert_int_equal(jv_prescan("[1,2]", 5, 8, 3), CRCR_OK);
    /* Brackets and commas inside strings are not structure. */
    const char *s = "[\"[[[,,,]]]\\\"[\"]";
    assert_int_equal(jv_prescan(s, strlen(s), 2, 2), CRCR_OK);
}

static void invalid_utf8_and_garbage_fail(void **state)
{
    assert_null(parse("{\"a\":\"\xff\xfe\"}"));
    assert_null(parse("{\"a\":"));
    assert_null(parse("nonsense"));
    jv *scalar = parse("\"just a string\"");
    assert_non_null(scalar);
    assert_false(jv_is_obj(scalar));
    jv_free(scalar);
}

static void dump_is_compact_and_keeps_order_and_utf8(void **state)
{
    jv *d = parse("{ \"b\" : 1, \"a\" : [true, null], \"s\": \"h\\u00e9\" }");
    buf_t b;
    buf_init(&b, 1024);
    assert_int_equal(jv_dump(d, &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "{\"b\":1,\"a\":[true,null],\"s\":\"h\xc3\xa9\"}");
    buf_free(&b);
    jv_free(d);
}

static void dump_indented_is_one_member_a_line_in_order(void **state)
{
    jv *d = parse("{\"b\":1,\"a\":[true,{\"c\":null}],\"s\":\"h\\u00e9\",\"e\":{}}");
    buf_t b;
    buf_init(&b, 1024);
    assert_int_equal(jv_dump_indented(d, &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "{\n"
                                      "  \"b\": 1,\n"
                                      "  \"a\": [\n"
                                      "    true,\n"
                                      "    {\n"
                                      "      \"c\": null\n"
                                      "    }\n"
                                      "  ],\n"
                                      "  \"s\": \"h\xc3\xa9\",\n"
                                      "  \"e\": {}\n"
                                      "}");
    buf_free(&b);
    jv_free(d);
}

static void quote_escapes_controls_and_quotes(void **state)
{
    buf_t b;
    buf_init(&b, 1024);
    const char in[] = "a\"b\\c\nd\x01\xc3\xa9";
    assert_int_equal(jv_quote(&b, in, sizeof(in) - 1), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "\"a\\\"b\\\\c\\nd\\u0001\xc3\xa9\"");
    jv *back = jv_parse(b.data, b.len, NULL, 0);
    assert_string_equal(jv_str(back), in);
    jv_free(back);
    buf_free(&b);
}

static void builders_and_edits(void **state)
{
    jv *o = jv_new_obj();
    assert_int_equal(jv_set(o, "x", jv_new_int(5)), CRCR_OK);
    jv *a = jv_new_arr();
    jv_push(a, jv_new_str("r1"));
    jv_set(o, "list", a);
    assert_int_equal(jv_arr_len(jv_get(o, "list")), 1);
    assert_int_equal(jv_del(o, "x"), CRCR_OK);
    assert_int_equal(jv_del(o, "x"), CRCR_E_NOT_FOUND);
    assert_int_equal(jv_set(a, "k", jv_new_null()), CRCR_E_INVALID); /* not an object */
    jv_free(o);
}

/* ---- jv_parse_select ------------------------------------------------------------------------ */

/* The paths webhook_handle() selects. */
#define wh_paths webhook_json_paths
#define N_WH webhook_json_paths_n

/* jv_parse_select(s[0..n)) with the webhook paths (new reference or NULL); fails the test when
 * jv_parse() answers differently on acceptance, or on any of the paths. */
static jv *sel_checked(const char *s, size_t n, const char *const *paths, size_t np)
{
    char e1[160] = "", e2[160] = "";
    jv *full = jv_parse(s, n, e1, sizeof(e1));
    jv *sel = jv_parse_select(s, n, paths, np, e2, sizeof(e2));
    if ((full == NULL) != (sel == NULL))
        fail_msg("jv_parse: %s, jv_parse_select: %s, on %.60s", full ? "ok" : e1, sel ? "ok" : e2,
                 s);
    if (!sel) {
        assert_true(strlen(e2) > 0);
        return NULL;
    }
    assert_true(jv_is_obj(full) == jv_is_obj(sel));
    for (size_t k = 0; k < np && jv_is_obj(full); k++) {
        const jv *a = jv_path(full, paths[k]), *b = jv_path(sel, paths[k]);
        if (!a || !b) {
            if (a || b)
                fail_msg("path %s: %s in the document, %s in the selection", paths[k],
                         a ? "present" : "absent", b ? "present" : "absent");
        } else if (!jv_equal(a, b)) {
            fail_msg("path %s differs", paths[k]);
        }
    }
    jv_free(full);
    return sel;
}

/* Both parsers refuse s[0..n). */
static void refused_n(const char *s, size_t n)
{
    assert_null(sel_checked(s, n, wh_paths, N_WH));
    jv *full = jv_parse(s, n, NULL, 0);
    assert_null(full);
}
#define refused(s) refused_n(s, strlen(s))

/* Both parsers accept s[0..n). */
static void accepted_n(const char *s, size_t n)
{
    jv *sel = sel_checked(s, n, wh_paths, N_WH);
    if (!sel)
        fail_msg("refused: %.80s", s);
    jv_free(sel);
}
#define accepted(s) accepted_n(s, strlen(s))
/* For literals with NUL bytes in them. */
#define accepted_lit(s) accepted_n(s, sizeof(s) - 1)
#define refused_lit(s) refused_n(s, sizeof(s) - 1)

static void select_refuses_duplicate_keys_anywhere(void **state)
{
    /* At depth 3, far from every selected path. */
    refused("{\"action\":\"opened\",\"x\":{\"y\":{\"k\":1,\"z\":[],\"k\":2}}}");
    /* Inside an array inside an object, and in a selected subtree. */
    refused("{\"x\":[{\"a\":1},{\"b\":1,\"b\":1}]}");
    refused("{\"pull_request\":{\"head\":{\"sha\":\"a\",\"sha\":\"b\"}}}");
    refused("{\"action\":\"a\",\"action\":\"a\"}");
    /* The same key after unescaping: "a" and "\u0061", raw UTF-8 and its \u escape, a surrogate
     * pair and the 4-byte character, "/" and "\/". */
    refused("{\"x\":{\"y\":{\"a\":1,\"\\u0061\":2}}}");
    refused("{\"\xc3\xa9\":1,\"\\u00e9\":2}");
    refused("{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}");
    refused("{\"a/b\":1,\"a\\/b\":2}");
    refused("{\"\":1,\"\":2}");
    /* Not duplicates: case, trailing space, the same key in siblings and in parent and child. */
    accepted("{\"a\":1,\"A\":2,\"a \":3,\"\\u0062\":4,\"b \":5}");
    accepted("{\"x\":[{\"k\":1},{\"k\":2}],\"k\":{\"k\":{\"k\":3}},\"y\":{\"k\":4}}");
}

/* The string scan judges 16 or 8 bytes at a time: a byte that ends the plain run (quote,
 * backslash, control character, UTF-8 lead byte or stray continuation byte) is found at every
 * offset of a string, in values and in keys, and keys of every length are compared whole. */
static void select_finds_each_special_byte_at_every_offset(void **state)
{
    static const struct {
        const char *s;
        bool ok;
    } specials[] = {
        {"\\n", true},
        {"\\u0041", true},
        {"\xc3\xa9", true},
        {"\xf0\x9f\x98\x80", true},
        {"\x7f", true},
        {" ", true},
        {"\x01", false},
        {"\x1f", false},
        {"\x80", false},
        {"\xff", false},
        {"\\x", false},
        /* runs of characters beyond ASCII, checked as a run: every byte still is */
        {"\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9", true},
        {"\xc3\xa9\xc3\xa9\x80", false},
        {"\xc3\xa9\xc3", false},
        {"\xe3\x83\x86\xe3\x82", false},
    };
    char doc[256], body[128];
    for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); k++) {
        for (size_t off = 0; off <= 40; off++) {
            memset(body, 'a', off);
            size_t sl = strlen(specials[k].s);
            memcpy(body + off, specials[k].s, sl);
            memset(body + off + sl, 'b', 20);
            body[off + sl + 20] = '\0';
            for (int in_key = 0; in_key < 2; in_key++) {
                int n = in_key ? snprintf(doc, sizeof(doc), "{\"x\":{\"%s\":1}}", body)
                               : snprintf(doc, sizeof(doc), "{\"x\":\"%s\"}", body);
                if (specials[k].ok)
                    accepted_n(doc, (size_t)n);
                else
                    refused_n(doc, (size_t)n);
            }
        }
    }
    /* A run of characters beyond ASCII in a key hashes as its escaped spelling. */
    refused(
        "{\"x\":{\"a\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9\":1,\"a\\u00e9\\ud83d\\ude00\\u00e9\":2}}");
    accepted(
        "{\"x\":{\"a\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9\":1,\"a\\u00e9\\ud83d\\ude00\\u00e8\":2}}");
    /* Keys of 1..40 bytes: the same key with one character escaped is a duplicate, a key that
     * differs in its last byte is not. */
    char key[48], esc[64];
    for (size_t len = 1; len <= 40; len++) {
        for (size_t i = 0; i < len; i++)
            key[i] = (char)('a' + i % 26);
        key[len] = '\0';
        size_t at = len / 2;
        snprintf(esc, sizeof(esc), "%.*s\\u%04x%s", (int)at, key, (unsigned char)key[at],
                 key + at + 1);
        int n = snprintf(doc, sizeof(doc), "{\"%s\":1,\"%s\":2}", key, esc);
        refused_n(doc, (size_t)n);
        memcpy(esc, key, len + 1);
        esc[len - 1] = 'Z';
        n = snprintf(doc, sizeof(doc), "{\"%s\":1,\"%s\":2}", key, esc);
        accepted_n(doc, (size_t)n);
    }
}

static void select_refuses_duplicates_among_many_keys(void **state)
{
    /* 5000 keys in one object (the key set grows and rehashes), then the first one again. */
    buf_t b;
    buf_init(&b, 1u << 20);
    buf_putc(&b, '{');
    for (int k = 0; k < 5000; k++)
        buf_printf(&b, "%s\"key%d\":{\"key%d\":%d}", k ? "," : "", k, k, k);
    buf_putc(&b, '}');
    accepted_n(b.data, b.len);
    b.len--;
    buf_puts(&b, ",\"key0\":0}");
    refused_n(b.data, b.len);
    buf_free(&b);
}

static void select_refuses_bad_utf8_surrogates_and_nul(void **state)
{
    refused("{\"a\":\"\xff\"}");
    refused("{\"a\":\"\xc0\xaf\"}");         /* overlong '/' */
    refused("{\"a\":\"\xe0\x80\x80\"}");     /* overlong 3 bytes */
    refused("{\"a\":\"\xed\xa0\x80\"}");     /* an encoded surrogate */
    refused("{\"a\":\"\xf4\x90\x80\x80\"}"); /* above U+10FFFF */
    refused("{\"a\":\"\xc3\"}");             /* truncated */
    refused("{\"a\":\"\x80\"}");             /* a lone continuation byte */
    refused("{\"x\":{\"y\":{\"\xfe\":1}}}"); /* in a key, off the selection */
    refused("{\"a\":1}\xc3\xa9");
    accepted("{\"a\":\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \x7f\"}");
    /* Lone and malformed surrogate escapes. */
    refused("{\"a\":\"\\ud800\"}");
    refused("{\"a\":\"\\udc00\"}");
    refused("{\"a\":\"\\ud800\\u0041\"}");
    refused("{\"a\":\"\\ud800x\"}");
    refused("{\"a\":\"\\udc00\\ud800\"}");
    refused("{\"a\":\"\\ud800\\ud800\"}");
    refused("{\"a\":\"\\ud800\\u12\"}");
    /* \u0000, in a value and in a key; escapes and control characters. */
    refused("{\"action\":\"a\\u0000b\"}");
    refused("{\"x\":{\"a\\u0000\":1}}");
    refused("{\"a\":\"\\x\"}");
    refused("{\"a\":\"\\u12g4\"}");
    refused("{\"a\":\"tab\there\"}");
    refused_lit("{\"a\":\"nul\0\"}");
    refused("{\"a\":\"unterminated}");
    jv *v = sel_checked("{\"action\":\"\\ud83d\\ude00\\u00e9\\n\\t\\/\\\\\\\"\\b\\f\\r\"}",
                        strlen("{\"action\":\"\\ud83d\\ude00\\u00e9\\n\\t\\/\\\\\\\"\\b\\f\\r\"}"),
                        wh_paths, N_WH);
    assert_string_equal(jv_path_str(v, "action"), "\xf0\x9f\x98\x80\xc3\xa9\n\t/\\\"\b\f\r");
    jv_free(v);
    /* Selected strings are decoded by the selective parser itself (sel_string): the empty string,
     * escapes at either end and back to back, raw UTF-8 next to escapes, whitespace around. */
    accepted("{\"action\":\"\"}");
    accepted("{\"action\":\"\\n\"}");
    accepted("{\"action\":\"\\\"\\\"\"}");
    accepted("{\"action\":\"\\u00e9\xc3\xa9\\ud83d\\ude00x\\\\\"}");
    accepted("{\"pull_request\":{\"body\":  \"a\\\"b\\/\"  ,\"state\":\"open\"}}");
    v = sel_checked("{\"pull_request\":{\"body\":\"\\\\x\\u0041\\ud83d\\ude00\"}}",
                    strlen("{\"pull_request\":{\"body\":\"\\\\x\\u0041\\ud83d\\ude00\"}}"),
                    wh_paths, N_WH);
    assert_string_equal(jv_path_str(v, "pull_request.body"), "\\xA\xf0\x9f\x98\x80");
    jv_free(v);
}

static void select_numbers_as_jansson(void **state)
{
    jv *v = sel_checked(
        "{\"number\":9223372036854775807,\"check_suite\":{\"id\":-9223372036854775808}}",
        strlen("{\"number\":9223372036854775807,\"check_suite\":{\"id\":-"
               "9223372036854775808}}"),
        wh_paths, N_WH);
    int64_t i = 0;
    assert_true(jv_int(jv_get(v, "number"), &i));
    assert_true(i == INT64_MAX);
    assert_true(jv_int(jv_path(v, "check_suite.id"), &i));
    assert_true(i == INT64_MIN);
    jv_free(v);
    refused("{\"x\":[9223372036854775808]}");
    refused("{\"x\":[-9223372036854775809]}");
    refused("[12345678901234567890123]");
    accepted("[0,-0,1,-1,0.5,-0.0,1e5,1E+5,1e-5,1.25e2]");
    refused("[01]");
    refused("[-]");
    refused("[1.]");
    refused("[.5]");
    refused("[+1]");
    refused("[1e]");
    refused("[1e+]");
    refused("[0x10]");
    refused("[Infinity]");
    refused("[NaN]");
    /* Reals: jansson refuses what strtod() rounds to infinity, and nothing smaller. */
    accepted("[1.7976931348623158e308,-1.7976931348623158e308]");
    refused("[1.7976931348623159e308]");
    refused("[-1e309]");
    refused("[1e99999999999999999999999]");
    accepted("[1e-400,0e99999999999,0.0000e400,1e-99999999999999999999]");
    accepted("[0.00017976931348623158e312,17976931348623158e292]");
    refused("[0.00017976931348623159e312]");
    /* The exact threshold 2^1024 - 2^970 rounds up (a tie goes to the even side); one below
     * it does not. */
    const char *thr =
        "179769313486231580793728971405303415079934132710037826936173778980444968292764750946"
        "649017977587207096330286416692887910946555547851940402630657488671505820681908902000"
        "708383676273854845817711531764475730270069855571366959622842914819860834936475292719"
        "074168444365510704342711559699508093042880177904174497792";
    char doc[400];
    snprintf(doc, sizeof(doc), "[%s.0]", thr);
    refused(doc);
    snprintf(doc, sizeof(doc), "[%s0000e-4]", thr);
    refused(doc);
    snprintf(doc, sizeof(doc), "[%.*s.9e1]", (int)strlen(thr) - 1, thr); /* ...7799 */
    refused(doc);
    snprintf(doc, sizeof(doc), "[%.*s1.99999]", (int)strlen(thr) - 1, thr); /* ...7791.99999 */
    accepted(doc);
    snprintf(doc, sizeof(doc), "[-%.*s1e0]", (int)strlen(thr) - 1, thr);
    accepted(doc);
}

static void select_enforces_depth_and_value_limits(void **state)
{
    /* Depth: CRCR_JSON_MAX_DEPTH nested containers parse, one more does not. */
    for (size_t depth = CRCR_JSON_MAX_DEPTH; depth <= CRCR_JSON_MAX_DEPTH + 1; depth++) {
        buf_t b;
        buf_init(&b, 4096);
        for (size_t k = 0; k < depth; k++)
            buf_puts(&b, k % 2 ? "[" : "{\"a\":");
        for (size_t k = depth; k-- > 0;)
            buf_puts(&b, k % 2 ? "]" : "}");
        if (depth == CRCR_JSON_MAX_DEPTH)
            accepted_n(b.data, b.len);
        else
            refused_n(b.data, b.len);
        buf_free(&b);
    }
    /* Values: the array and its elements count; so do keys. */
    for (unsigned long n = CRCR_JSON_MAX_VALUES - 1; n <= CRCR_JSON_MAX_VALUES; n++) {
        buf_t b;
        buf_init(&b, 4u * 1024u * 1024u);
        buf_putc(&b, '[');
        for (unsigned long k = 0; k < n; k++)
            buf_puts(&b, k ? ",0" : "0");
        buf_putc(&b, ']');
        if (n + 1 <= CRCR_JSON_MAX_VALUES)
            accepted_n(b.data, b.len);
        else
            refused_n(b.data, b.len);
        buf_free(&b);
    }
    for (unsigned long n = CRCR_JSON_MAX_VALUES / 2 - 1; n <= CRCR_JSON_MAX_VALUES / 2; n++) {
        buf_t b;
        buf_init(&b, 16u * 1024u * 1024u);
        buf_putc(&b, '{');
        for (unsigned long k = 0; k < n; k++)
            buf_printf(&b, "%s\"%lu\":0", k ? "," : "", k);
        buf_putc(&b, '}');
        if (2 * n + 1 <= CRCR_JSON_MAX_VALUES)
            accepted_n(b.data, b.len);
        else
            refused_n(b.data, b.len);
        buf_free(&b);
    }
}

static void select_whitespace_trailing_data_and_roots(void **state)
{
    refused("");
    refused(" \t\r\n");
    refused("{} x");
    refused("{}{}");
    refused("{},");
    refused("1 2");
    refused("\f{}");
    refused("{}\v");
    refused("\xc2\xa0{}");
    refused("{\"a\":1,}");
    refused("[1,]");
    refused("{\"a\" 1}");
    refused("{\"a\":}");
    refused("{1:2}");
    refused("[tru]");
    refused("[truex]");
    refused("[nul]");
    refused("{\"a\":[}");
    refused("[");
    accepted(" \t\r\n{ \"action\" \t: \"x\" \r\n, \"b\" : [ ] } \n\t\r");
    /* jansson's quirk: one NUL byte right after a number or literal is lost, not refused. */
    accepted_lit("[1\0]");
    accepted_lit("[true\0,false\0,null\0]");
    accepted_lit("{\"number\":7\0}");
    accepted_lit("{\"number\":-1.5e3\0 }");
    refused_lit("{\"number\":-1.5e3\0 }\0");
    refused_lit("[1\0\0]");
    refused_lit("[\"a\"\0]");
    refused_lit("[1,\0 2]");
    refused_lit("[1 \0]");
    refused_lit("\0{}");
    refused_lit("{}\0");
    /* Roots that are not objects: not objects in the result either. */
    jv *v = sel_checked("[1,{\"action\":\"x\"}]", 18, wh_paths, N_WH);
    assert_true(jv_is_arr(v));
    assert_int_equal(jv_arr_len(v), 0);
    jv_free(v);
    v = sel_checked(" \"s\" ", 5, wh_paths, N_WH);
    assert_string_equal(jv_str(v), "s");
    jv_free(v);
    v = sel_checked("-12.5", 5, wh_paths, N_WH);
    assert_false(jv_is_obj(v));
    assert_true(jv_number(v) == -12.5);
    jv_free(v);
    v = sel_checked("null", 4, wh_paths, N_WH);
    assert_true(jv_is_null(v));
    jv_free(v);
}

static void select_builds_only_the_selected_paths(void **state)
{
    const char *s = "{\"action\":\"opened\",\"number\":5,\"sender\":{\"login\":\"u\"},"
                    "\"pull_request\":{\"title\":\"t\",\"number\":5,\"labels\":[{\"name\":\"l\"}],"
                    "\"head\":{\"sha\":\"abc\",\"ref\":\"r\"},\"base\":{\"sha\":\"def\"}},"
                    "\"repository\":{\"full_name\":\"o/r\",\"id\":1},"
                    "\"label\":{\"name\":{\"not\":\"a string\"}},\"check_run\":[1,2],"
                    "\"check_suite\":\"x\"}";
    jv *v = sel_checked(s, strlen(s), wh_paths, N_WH);
    assert_non_null(v);
    /* Scalars. */
    assert_string_equal(jv_path_str(v, "action"), "opened");
    assert_string_equal(jv_path_str(v, "pull_request.head.sha"), "abc");
    assert_string_equal(jv_path_str(v, "repository.full_name"), "o/r");
    /* A selected value that is an object comes whole. */
    assert_int_equal(jv_obj_len(jv_path(v, "label.name")), 1);
    /* Only selected keys, with objects on the way holding nothing else. */
    assert_int_equal(jv_obj_len(v), 5); /* action number pull_request repository label */
    assert_int_equal(jv_obj_len(jv_get(v, "pull_request")), 2);
    assert_int_equal(jv_obj_len(jv_path(v, "pull_request.head")), 1);
    assert_int_equal(jv_obj_len(jv_get(v, "repository")), 1);
    assert_null(jv_get(v, "sender"));
    assert_null(jv_path(v, "pull_request.title"));
    /* Paths through a non-object (an array, a string) are absent, and so is the way there. */
    assert_null(jv_path(v, "check_run.name"));
    assert_null(jv_get(v, "check_run"));
    assert_null(jv_path(v, "check_suite.id"));
    assert_null(jv_get(v, "check_suite"));
    /* Absent paths. */
    assert_null(jv_get(v, "after"));
    assert_null(jv_get(v, "ref"));
    jv_free(v);

    /* Arrays and whole subtrees, nested and overlapping paths, an empty key ("a..b"), a trailing
     * dot, a key with an escape and a non-ASCII key. */
    static const char *const p2[] = {
        "pull_request.labels", "pull_request", "pull_request.head", "a..b", "c.",
        "\xc3\xa9.k",          "q\"r",         "missing.deep.path"};
    s = "{\"pull_request\":{\"labels\":[{\"name\":\"x\"},[],{}],\"head\":{\"sha\":\"s\"}},"
        "\"a\":{\"\":{\"b\":[true]}},\"c\":1.5,\"\\u00e9\":{\"k\":null},\"q\\\"r\":\"quoted\"}";
    v = sel_checked(s, strlen(s), p2, sizeof(p2) / sizeof(p2[0]));
    assert_non_null(v);
    assert_int_equal(jv_arr_len(jv_path(v, "pull_request.labels")), 3);
    assert_true(jv_is_true(jv_arr_at(jv_path(v, "a..b"), 0)));
    assert_true(jv_number(jv_get(v, "c")) == 1.5);
    assert_true(jv_is_null(jv_path(v, "\xc3\xa9.k")));
    assert_string_equal(jv_path_str(v, "q\"r"), "quoted");
    jv_free(v);

    /* Selections that are not valid. */
    static const char *const empty[] = {""};
    char err[64] = "";
    assert_null(jv_parse_select("{}", 2, empty, 1, err, sizeof(err)));
    assert_true(strlen(err) > 0);
    assert_null(jv_parse_select(NULL, 0, wh_paths, N_WH, NULL, 0));
    v = jv_parse_select("{\"a\":1}", 7, NULL, 0, NULL, 0);
    assert_int_equal(jv_obj_len(v), 0);
    jv_free(v);
}

/* Reads a whole file into a malloc'ed buffer (caller frees), NULL if it cannot. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    buf_t b;
    buf_init(&b, 16u * 1024u * 1024u);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(buf_append(&b, chunk, n), CRCR_OK);
    fclose(f);
    return buf_detach(&b, len);
}

/* Checks jv_parse_select against jv_parse on one document for `paths`, and that selecting every
 * key of `obj` (batches of CRCR_JSON_SELECT_MAX_PATHS) rebuilds it equal. */
static void differential_on(const char *text, size_t len, const jv *obj, const char *prefix)
{
    char names[CRCR_JSON_SELECT_MAX_PATHS][256];
    const char *paths[CRCR_JSON_SELECT_MAX_PATHS];
    size_t n = 0;
    void *it = jv_iter((jv *)obj);
    while (it || n) {
        if (it) {
            const char *k = jv_iter_key(it);
            it = jv_iter_next((jv *)obj, it);
            if (strchr(k, '.') || strlen(prefix) + strlen(k) + 2 > sizeof(names[0]))
                continue;
            int w = snprintf(names[n], sizeof(names[n]), "%s%s%s", prefix, *prefix ? "." : "", k);
            assert_true(w > 0 && (size_t)w < sizeof(names[n])); /* checked above: never cut */
            paths[n] = names[n];
            n++;
        }
        if (n == CRCR_JSON_SELECT_MAX_PATHS || (!it && n)) {
            jv *sel = sel_checked(text, len, paths, n);
            assert_non_null(sel);
            jv_free(sel);
            n = 0;
        }
    }
}

static void select_agrees_with_parse_on_real_webhooks(void **state)
{
    const char *dir = getenv("CRCR_TEST_DATA");
    if (!dir)
        fail_msg("CRCR_TEST_DATA is not set (ctest sets it to <repo>/tests/data)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/webhooks", dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || strcmp(de->d_name + nl - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/webhooks/%s", dir, de->d_name);
        size_t len = 0;
        char *text = read_file(path, &len);
        assert_non_null(text);
        jv *full = jv_parse(text, len, NULL, 0);
        assert_non_null(full);
        jv *sel = sel_checked(text, len, wh_paths, N_WH);
        assert_non_null(sel);
        jv_free(sel);
        /* Every top-level key (the whole document, rebuilt), and every key one level down. */
        differential_on(text, len, full, "");
        for (void *it = jv_iter(full); it; it = jv_iter_next(full, it)) {
            if (jv_is_obj(jv_iter_val(it)) && !strchr(jv_iter_key(it), '.'))
                differential_on(text, len, jv_iter_val(it), jv_iter_key(it));
        }
        /* The whole document, selected key by key, equals the full parse. */
        const char *tops[CRCR_JSON_SELECT_MAX_PATHS];
        size_t nt = 0;
        for (void *it = jv_iter(full); it && nt < CRCR_JSON_SELECT_MAX_PATHS;
             it = jv_iter_next(full, it))
            tops[nt++] = jv_iter_key(it);
        if (jv_obj_len(full) <= CRCR_JSON_SELECT_MAX_PATHS) {
            sel = jv_parse_select(text, len, tops, nt, NULL, 0);
            assert_true(jv_equal(sel, full));
            jv_free(sel);
        }
        jv_free(full);
        free(text);
        files++;
    }
    closedir(d);
    assert_true(files >= 5);
}

/* The hash the validator used before (FNV-1a, 32 bits), for building an attack input. */
static uint32_t old_fnv(const char *s, size_t n, uint32_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

#define COLL_BLOCK 4u
#define COLL_BLOCKS 14u /* 2^14 = 16,384 keys, as in the report */
#define COLL_MAP (1u << 19)

static uint64_t xs_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Two different COLL_BLOCK-byte blocks that take FNV-1a from state `h` to the same state: a
 * birthday search (~80,000 random blocks). Returns the common state. */
static uint32_t fnv_block_pair(uint32_t h, uint64_t *rng, char a[COLL_BLOCK], char b[COLL_BLOCK])
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint32_t *seen_h = calloc(COLL_MAP, sizeof(*seen_h));
    uint32_t *seen_b = calloc(COLL_MAP, sizeof(*seen_b)); /* block bytes, 0 = empty slot */
    assert_non_null(seen_h);
    assert_non_null(seen_b);
    for (;;) {
        char blk[COLL_BLOCK];
        uint64_t r = xs_next(rng);
        for (unsigned i = 0; i < COLL_BLOCK; i++)
            blk[i] = alpha[(r >> (8 * i)) % 62];
        uint32_t v = old_fnv(blk, COLL_BLOCK, h), packed;
        memcpy(&packed, blk, 4);
        for (uint32_t slot = v & (COLL_MAP - 1);; slot = (slot + 1) & (COLL_MAP - 1)) {
            if (!seen_b[slot]) {
                seen_h[slot] = v;
                seen_b[slot] = packed;
                break;
            }
            if (seen_h[slot] == v && seen_b[slot] != packed) {
                memcpy(a, &seen_b[slot], 4);
                memcpy(b, blk, 4);
                free(seen_h);
                free(seen_b);
                return v;
            }
            if (seen_h[slot] == v)
                break; /* the same block again */
        }
    }
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Issue 12: 16,384 keys that all share one FNV-1a hash (so one chain of the old table: quadratic,
 * 721 ms) cost the validator work linear in the number of keys now. The work is counted in
 * key comparisons (deterministic), not in time; the CPU times are printed for the record. */
/* jv_validate: jv_parse()'s answer on every document but one with a duplicate key, the root's
 * kind, and no key compared (nothing allocated for keys). */
static void validate_agrees_with_parse_but_for_duplicates(void **state)
{
    static const struct {
        const char *text;
        bool parses, valid, object;
    } cases[] = {
        {"{}", true, true, true},
        {"{\"a\":[1,2.5,\"x\",null,true,{\"b\":{}}]}", true, true, true},
        {"[1,2]", true, true, false},
        {"\"str\"", true, true, false},
        {"17", true, true, false},
        {"{\"a\":1,\"a\":2}", false, true, true}, /* JSON allows it; jv_parse does not */
        {"{\"a\":{\"b\":1,\"\\u0062\":2}}", false, true, true}, /* the same key, escaped */
        {"{\"a\":1,}", false, false, false},
        {"{\"a\":\"\\u0000\"}", false, false, false},
        {"{\"a\":\"\\ud800\"}", false, false, false},
        {"{\"a\":1e400}", false, false, false},
        {"{\"a\":9223372036854775808}", false, false, false},
        {"{\"a\":\"\xff\"}", false, false, false},
        {"{} x", false, false, false},
        {"", false, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *t = cases[i].text;
        jv *full = jv_parse(t, strlen(t), NULL, 0);
        if ((full != NULL) != cases[i].parses)
            fail_msg("case %zu: jv_parse %s", i, full ? "accepts" : "refuses");
        jv_free(full);
        bool obj = !cases[i].object;
        char err[160] = "";
        if (jv_validate(t, strlen(t), &obj, err, sizeof(err)) != cases[i].valid)
            fail_msg("case %zu: jv_validate %s (%s)", i, cases[i].valid ? "refuses" : "accepts",
                     err);
        if (cases[i].valid)
            assert_int_equal(obj, cases[i].object);
        else
            assert_true(err[0] != '\0');
    }
    /* Limits as jv_parse: depth and value count. */
    char deep[CRCR_JSON_MAX_DEPTH + 2];
    memset(deep, '[', sizeof(deep));
    assert_false(jv_validate(deep, sizeof(deep), NULL, NULL, 0));
    /* 100,000 distinct keys: no comparison is made (the duplicate check is jv_parse_select's). */
    buf_t b;
    buf_init(&b, 4u << 20);
    buf_putc(&b, '{');
    for (int i = 0; i < 100000; i++)
        buf_printf(&b, "%s\"k%d\":0", i ? "," : "", i);
    buf_putc(&b, '}');
    uint64_t before = jv_select_key_probes();
    assert_true(jv_validate(b.data, b.len, NULL, NULL, 0));
    assert_int_equal(jv_select_key_probes(), before);
    buf_free(&b);
}

/* jv_member_span: the top-level member's value as its bytes, whatever precedes it. */
static void member_span_finds_a_top_level_value(void **state)
{
    (void)state;
    static const struct {
        const char *text, *key, *want; /* want NULL: not found */
    } cases[] = {
        {"{\"payload\":{\"a\":[1,{\"b\":\"}\"}]},\"w\":1}", "payload", "{\"a\":[1,{\"b\":\"}\"}]}"},
        {" { \"x\" : \"pay\\\"load\" , \"payload\" :\t[ \"\\\\\" ] } ", "payload", "[ \"\\\\\" ]"},
        {"{\"a\":{\"payload\":1},\"b\":true}", "payload", NULL}, /* not at the top */
        {"{\"a\":-1.5e3,\"payload\":null}", "payload", "null"},
        {"{\"pay\\u006coad\":1}", "payload", NULL}, /* spelled with an escape */
        {"[\"payload\",1]", "payload", NULL},
        {"{}", "payload", NULL},
        {"{\"payload\":\"\\u00e9\"}", "payload", "\"\\u00e9\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *t = cases[i].text;
        assert_true(jv_validate(t, strlen(t), NULL, NULL, 0));
        size_t off = 0, n = 0;
        bool found = jv_member_span(t, strlen(t), cases[i].key, &off, &n);
        if (found != (cases[i].want != NULL))
            fail_msg("case %zu: %s", i, found ? "found" : "not found");
        if (found && (n != strlen(cases[i].want) || memcmp(t + off, cases[i].want, n) != 0))
            fail_msg("case %zu: span \"%.*s\"", i, (int)n, t + off);
    }
}

static void select_work_is_linear_for_colliding_keys(void **state)
{
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char pair[COLL_BLOCKS][2][COLL_BLOCK];
    uint32_t h = 2166136261u;
    for (unsigned j = 0; j < COLL_BLOCKS; j++)
        h = fnv_block_pair(h, &rng, pair[j][0], pair[j][1]);
    size_t nkeys = (size_t)1 << COLL_BLOCKS, keylen = COLL_BLOCKS * COLL_BLOCK;
    buf_t colliding, random_keys;
    buf_init(&colliding, 4u << 20);
    buf_init(&random_keys, 4u << 20);
    buf_putc(&colliding, '{');
    buf_putc(&random_keys, '{');
    char key[COLL_BLOCKS * COLL_BLOCK + 1];
    uint32_t common = 0;
    for (size_t i = 0; i < nkeys; i++) {
        for (unsigned j = 0; j < COLL_BLOCKS; j++)
            memcpy(key + j * COLL_BLOCK, pair[j][(i >> j) & 1], COLL_BLOCK);
        key[keylen] = '\0';
        uint32_t fh = old_fnv(key, keylen, 2166136261u);
        if (i == 0)
            common = fh;
        assert_true(fh == common); /* the attack input is real: one hash for all keys */
        buf_printf(&colliding, "%s\"%s\":0", i ? "," : "", key);
        for (unsigned j = 0; j < keylen; j++)
            key[j] = (char)('a' + xs_next(&rng) % 26);
        buf_printf(&random_keys, "%s\"%s\":0", i ? "," : "", key);
    }
    buf_putc(&colliding, '}');
    buf_putc(&random_keys, '}');
    const char *paths[] = {"x"};

    uint64_t p0 = jv_select_key_probes();
    double t0 = cpu_ms();
    jv *d = jv_parse_select(colliding.data, colliding.len, paths, 1, NULL, 0);
    double t_coll = cpu_ms() - t0;
    uint64_t probes_coll = jv_select_key_probes() - p0;
    assert_non_null(d);
    jv_free(d);

    p0 = jv_select_key_probes();
    t0 = cpu_ms();
    d = jv_parse_select(random_keys.data, random_keys.len, paths, 1, NULL, 0);
    double t_rand = cpu_ms() - t0;
    uint64_t probes_rand = jv_select_key_probes() - p0;
    assert_non_null(d);
    jv_free(d);
    /* A chained table kept at load <= 1 probes about one key per insert on average; the old hash
     * made it nkeys^2/2 = 134 million here. */
    assert_true(probes_coll <= 4 * nkeys);
    assert_true(probes_rand <= 4 * nkeys);

    /* Duplicates among colliding keys are still found. */
    buf_reset(&colliding);
    buf_putc(&colliding, '{');
    for (size_t i = 0; i < 64; i++) {
        for (unsigned j = 0; j < COLL_BLOCKS; j++)
            memcpy(key + j * COLL_BLOCK, pair[j][(i >> j) & 1], COLL_BLOCK);
        key[keylen] = '\0';
        buf_printf(&colliding, "\"%s\":0,", key);
    }
    buf_printf(&colliding, "\"%.*s\":1}", (int)keylen, key);
    assert_null(jv_parse_select(colliding.data, colliding.len, paths, 1, NULL, 0));
    fprintf(stderr,
            "    [figures] %zu keys, %zu bytes: FNV-colliding %.1f ms CPU / %llu probes, random "
            "%.1f ms CPU / %llu probes\n",
            nkeys, random_keys.len, t_coll, (unsigned long long)probes_coll, t_rand,
            (unsigned long long)probes_rand);
    buf_free(&colliding);
    buf_free(&random_keys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(int64_ids_are_exact),
        cmocka_unit_test(duplicate_keys_are_rejected),
        cmocka_unit_test(dump_indented_is_one_member_a_line_in_order),
        cmocka_unit_test(lookups_are_case_sensitive),
        cmocka_unit_test(depth_limit_is_enforced_before_parsing),
        cmocka_unit_test(value_count_limit_counts_scalars_not_string_content),
        cmocka_unit_test(invalid_utf8_and_garbage_fail),
        cmocka_unit_test(dump_is_compact_and_keeps_order_and_utf8),
        cmocka_unit_test(quote_escapes_controls_and_quotes),
        cmocka_unit_test(builders_and_edits),
        cmocka_unit_test(select_refuses_duplicate_keys_anywhere),
        cmocka_unit_test(select_finds_each_special_byte_at_every_offset),
        cmocka_unit_test(select_refuses_duplicates_among_many_keys),
        cmocka_unit_test(select_refuses_bad_utf8_surrogates_and_nul),
        cmocka_unit_test(select_numbers_as_jansson),
        cmocka_unit_test(select_enforces_depth_and_value_limits),
        cmocka_unit_test(select_whitespace_trailing_data_and_roots),
        cmocka_unit_test(select_builds_only_the_selected_paths),
        cmocka_unit_test(select_agrees_with_parse_on_real_webhooks),
        cmocka_unit_test(select_work_is_linear_for_colliding_keys),
        cmocka_unit_test(validate_agrees_with_parse_but_for_duplicates),
        cmocka_unit_test(member_span_finds_a_top_level_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
