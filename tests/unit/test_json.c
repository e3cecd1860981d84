/* Unit tests for json.c: the pitfalls the JSON choice was made on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "limits.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(int64_ids_are_exact),
        cmocka_unit_test(duplicate_keys_are_rejected),
        cmocka_unit_test(lookups_are_case_sensitive),
        cmocka_unit_test(depth_limit_is_enforced_before_parsing),
        cmocka_unit_test(value_count_limit_counts_scalars_not_string_content),
        cmocka_unit_test(invalid_utf8_and_garbage_fail),
        cmocka_unit_test(dump_is_compact_and_keeps_order_and_utf8),
        cmocka_unit_test(quote_escapes_controls_and_quotes),
        cmocka_unit_test(builders_and_edits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
