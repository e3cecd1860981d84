/* Unit tests for the HUD's output helpers: escaping, links only for https, durations and the SVG
 * chart. (The JSON writer's tests are in test_jw.c; the fixed class tables of runs and outbox
 * rows are in test_model.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "html.h"

#define XSS_URL "https://example.com/<script>alert('xss')</script>"

typedef struct out {
    buf_t b;
    hout o;
} out;

static void out_init(out *t)
{
    buf_init(&t->b, 1 << 20);
    hout_init(&t->o, &t->b);
}

static const char *out_str(out *t)
{
    assert_int_equal(t->o.err, CRCR_OK);
    return buf_cstr(&t->b);
}

static void text_escapes_the_five_html_specials(void **state)
{
    out t;
    out_init(&t);
    h_text(&t.o, "<a href=\"x\">Tom & 'Jerry'</a>");
    assert_string_equal(out_str(&t),
                        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
    buf_reset(&t.b);
    h_text(&t.o, NULL);
    h_textn(&t.o, "a\0b", 3); /* an embedded NUL is dropped, not written */
    assert_int_equal(t.b.len, 2);
    assert_memory_equal(t.b.data, "ab", 2);
    buf_free(&t.b);
}

static void https_urls_become_links_with_escaped_attributes(void **state)
{
    out t;
    out_init(&t);
    h_link(&t.o, XSS_URL, "artifacts", "artifact");
    const char *s = out_str(&t);
    assert_non_null(strstr(s, "<a href=\"https://example.com/&lt;script&gt;alert(&#39;xss&#39;)"
                              "&lt;/script&gt;\" class=\"artifact\" rel=\"noopener noreferrer "
                              "nofollow\">artifacts</a>"));
    assert_null(strstr(s, "<script"));
    buf_free(&t.b);
}

static void other_urls_are_shown_as_text_only(void **state)
{
    const char *bad[] = {"javascript:alert(1)",
                         "http://example.com/x",
                         "HTTPS://example.com/",
                         "https://",
                         "https://exa mple.com",
                         "https://example.com/\tx",
                         "https://example.com\\@evil",
                         " https://example.com",
                         "data:text/html,<script>alert(1)</script>",
                         "//evil.example/x",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        assert_false(html_url_ok(bad[i]));
        out t;
        out_init(&t);
        h_link(&t.o, bad[i], NULL, NULL);
        assert_null(strstr(out_str(&t), "<a "));
        assert_null(strstr(out_str(&t), "<script"));
        buf_free(&t.b);
    }
    char long_url[HTML_URL_MAX + 16];
    memset(long_url, 'a', sizeof(long_url));
    memcpy(long_url, "https://", 8);
    long_url[sizeof(long_url) - 1] = '\0';
    assert_false(html_url_ok(long_url));
    assert_true(html_url_ok("https://github.com/o/r/actions/runs/1"));
}

static void url_parts_are_percent_encoded(void **state)
{
    out t;
    out_init(&t);
    h_url_part(&t.o, "a b/\"<>&?#%~._-Z9");
    assert_string_equal(out_str(&t), "a%20b%2F%22%3C%3E%26%3F%23%25~._-Z9");
    buf_free(&t.b);
}

static void durations_and_times_read_naturally(void **state)
{
    char b[48];
    html_duration(-1, b, sizeof(b));
    assert_string_equal(b, "-");
    html_duration(350, b, sizeof(b));
    assert_string_equal(b, "350ms");
    html_duration(45000, b, sizeof(b));
    assert_string_equal(b, "45s");
    html_duration(200000, b, sizeof(b));
    assert_string_equal(b, "3m 20s");
    html_duration(3720000, b, sizeof(b));
    assert_string_equal(b, "1h 02m");
    html_duration(2 * 86400000LL + 3 * 3600000LL, b, sizeof(b));
    assert_string_equal(b, "2d 03h");
    html_time(1764464523000LL, b, sizeof(b)); /* 2025-11-30T01:02:03Z */
    assert_string_equal(b, "2025-11-30 01:02 UTC");
    html_time(0, b, sizeof(b));
    assert_string_equal(b, "-");
    html_ago(1000000, 1000000 + 5 * 60000, b, sizeof(b));
    assert_string_equal(b, "5 min ago");
    html_ago(1000000 + 3 * 3600000LL, 1000000, b, sizeof(b));
    assert_string_equal(b, "in 3 h");
    html_ago(0, 5, b, sizeof(b));
    assert_string_equal(b, "never");
}

static void chart_draws_points_with_escaped_tooltips_or_says_no_data(void **state)
{
    double v[3] = {50, 0, 100};
    bool has[3] = {true, false, true};
    int64_t starts[3] = {1764464523000LL, 1764468123000LL, 1764471723000LL};
    html_chart c = {.title = "Pass <rate>",
                    .unit = "%",
                    .values = v,
                    .has = has,
                    .starts = starts,
                    .n = 3,
                    .ymax = 100,
                    .css_class = "rate"};
    out t;
    out_init(&t);
    h_chart(&t.o, &c);
    const char *s = out_str(&t);
    assert_non_null(strstr(s, "<svg viewBox="));
    assert_non_null(strstr(s, "aria-label=\"Pass &lt;rate&gt;\""));
    assert_non_null(strstr(s, "<polyline class=\"line\""));
    /* two points with data, two tooltips */
    int circles = 0;
    for (const char *p = s; (p = strstr(p, "<circle")); p++)
        circles++;
    assert_int_equal(circles, 2);
    assert_non_null(strstr(s, "<title>2025-11-30 01:02 UTC: 50.0%</title>"));
    buf_free(&t.b);

    bool none[3] = {false, false, false};
    c.has = none;
    out u;
    out_init(&u);
    h_chart(&u.o, &c);
    assert_null(strstr(out_str(&u), "<svg"));
    assert_non_null(strstr(out_str(&u), "No completed runs"));
    buf_free(&u.b);
}

static void page_shell_links_the_stylesheet_and_no_script(void **state)
{
    out t;
    out_init(&t);
    h_page_begin(&t.o, "a<b>", "repos");
    h_page_end(&t.o, 1764464523000LL, 7);
    const char *s = out_str(&t);
    assert_non_null(strstr(s, "<title>a&lt;b&gt; - crcr</title>"));
    assert_non_null(strstr(s, "href=\"/crcr/static/style.css\""));
    assert_non_null(strstr(s, "<a href=\"/crcr\" class=\"active\">Repos</a>"));
    assert_non_null(strstr(s, "in 7 ms"));
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "style=\""));
    buf_free(&t.b);
    assert_null(strstr(HTML_STYLESHEET, "url(")); /* no external assets */
    assert_null(strstr(HTML_STYLESHEET, "@import"));
}

static void writer_stops_at_the_buffer_cap(void **state)
{
    buf_t b;
    buf_init(&b, 8);
    hout o;
    hout_init(&o, &b);
    h_raw(&o, "12345");
    h_text(&o, "&&&");
    assert_int_equal(o.err, CRCR_E_TOO_LARGE);
    h_raw(&o, "x"); /* sticky: nothing more is written */
    assert_string_equal(buf_cstr(&b), "12345");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_escapes_the_five_html_specials),
        cmocka_unit_test(https_urls_become_links_with_escaped_attributes),
        cmocka_unit_test(other_urls_are_shown_as_text_only),
        cmocka_unit_test(url_parts_are_percent_encoded),
        cmocka_unit_test(durations_and_times_read_naturally),
        cmocka_unit_test(chart_draws_points_with_escaped_tooltips_or_says_no_data),
        cmocka_unit_test(page_shell_links_the_stylesheet_and_no_script),
        cmocka_unit_test(writer_stops_at_the_buffer_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
