/*
 * test_http_client.c - the libcurl wrapper (http_client.c) against the unit tests' HTTP server
 * (support/ut_httpd.h) on 127.0.0.1 inside this process: body cap (error
 * and truncate modes, memory bounded), timeouts, Retry-After as seconds and as an HTTP-date,
 * response header capture, non-2xx answers, no redirects, request header hygiene, connection
 * refused, connection reuse through a pool; plus the parsers and checks it exports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <pthread.h>

#include "buf.h"
#include "http_client.h"
#include "ut_httpd.h"

/* ---------------------------------------------------------------- the server */

/* What the last request carried (under mu), and the gate /slow waits at. */
typedef struct seen {
    ut_httpd *srv;
    pthread_mutex_t mu;
    char method[16];
    char ua[128];
    char auth[128];
    char ctype[128];
    char expect[64];
    char accept[64];
    bool had_expect, had_ctype;
    size_t upload_len;
    ut_gate slow;
} seen;

static seen g_srv;

/* Bytes to stream from /big/... routes. */
static const uint64_t big_total = 8u * 1024u * 1024u;

/* IMF-fixdate of epoch second `t`, in the C locale whatever the process locale is. */
static void imf_fixdate(time_t t, char out[32])
{
    static const char *days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, 32, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
             months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void copy_hdr(const ut_httpd_req *rq, const char *name, char *dst, size_t dstsz,
                     bool *present)
{
    const char *v = ut_httpd_header(rq, name);
    snprintf(dst, dstsz, "%s", v ? v : "");
    if (present)
        *present = v != NULL;
}

static void handler(void *ctx, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    seen *s = ctx;
    const char *url = rq->path;
    pthread_mutex_lock(&s->mu);
    snprintf(s->method, sizeof(s->method), "%s", rq->method);
    copy_hdr(rq, "User-Agent", s->ua, sizeof(s->ua), NULL);
    copy_hdr(rq, "Authorization", s->auth, sizeof(s->auth), NULL);
    copy_hdr(rq, "Content-Type", s->ctype, sizeof(s->ctype), &s->had_ctype);
    copy_hdr(rq, "Expect", s->expect, sizeof(s->expect), &s->had_expect);
    copy_hdr(rq, "Accept", s->accept, sizeof(s->accept), NULL);
    s->upload_len = rq->upload_len;
    pthread_mutex_unlock(&s->mu);

    if (strcmp(url, "/ok") == 0) {
        ut_httpd_reply(resp, 200, "hello");
        ut_httpd_resp_header(resp, "ETag", "\"v1-abc\"");
        ut_httpd_resp_header(resp, "X-RateLimit-Remaining", "4999");
        ut_httpd_resp_header(resp, "X-RateLimit-Reset", "1700000000");
        ut_httpd_resp_header(resp, "X-Other", "ignored");
    } else if (strcmp(url, "/retry-seconds") == 0) {
        ut_httpd_reply(resp, 429, "{\"message\":\"slow down\"}");
        ut_httpd_resp_header(resp, "Retry-After", "7");
    } else if (strcmp(url, "/retry-date") == 0) {
        char date[32];
        imf_fixdate(time(NULL) + 120, date);
        ut_httpd_reply(resp, 503, "busy");
        ut_httpd_resp_header(resp, "Retry-After", date);
    } else if (strcmp(url, "/retry-garbage") == 0) {
        ut_httpd_reply(resp, 503, "busy");
        ut_httpd_resp_header(resp, "Retry-After", "soon");
    } else if (strcmp(url, "/missing") == 0) {
        ut_httpd_reply(resp, 404, "{\"message\":\"Not Found\"}");
    } else if (strcmp(url, "/redirect") == 0) {
        ut_httpd_reply(resp, 302, "");
        ut_httpd_resp_header(resp, "Location", "/ok");
    } else if (strcmp(url, "/slow") == 0) {
        ut_gate_wait(&s->slow); /* answers once the test opens the gate */
        ut_httpd_reply(resp, 200, "late");
    } else if (strncmp(url, "/big/", 5) == 0) {
        resp->stream_len = big_total;
        resp->stream_chunked = strcmp(url + 5, "chunked") == 0;
    } else {
        ut_httpd_reply(resp, 200, "echo");
    }
}

static int server_start(void **state)
{
    (void)state;
    seen *s = &g_srv;
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    ut_gate_init(&s->slow);
    s->srv = ut_httpd_start(handler, s);
    return 0;
}

static int server_stop(void **state)
{
    (void)state;
    ut_gate_open(&g_srv.slow);
    ut_httpd_stop(g_srv.srv);
    ut_gate_destroy(&g_srv.slow);
    pthread_mutex_destroy(&g_srv.mu);
    return 0;
}

static unsigned n_requests(void)
{
    return ut_httpd_requests(g_srv.srv);
}

static unsigned n_conns(void)
{
    return ut_httpd_connections(g_srv.srv);
}

/* ---------------------------------------------------------------- helpers */

static char g_url[256];

/* http://127.0.0.1:<port><path> (valid until the next call). */
static const char *url_of(const char *path)
{
    snprintf(g_url, sizeof(g_url), "%s%s", ut_httpd_base(g_srv.srv), path);
    return g_url;
}

static http_call get(const char *path)
{
    http_call rq = {.method = "GET",
                    .url = url_of(path),
                    .allow_http = true,
                    .connect_timeout_ms = 2000,
                    .timeout_ms = 5000};
    return rq;
}

/* ---------------------------------------------------------------- exchanges */

static void test_ok_answer_and_header_capture(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/ok");
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 200);
    assert_string_equal(buf_cstr(&body), "hello");
    assert_string_equal(a.etag, "\"v1-abc\"");
    assert_int_equal(a.rl_remaining, 4999);
    assert_int_equal(a.rl_reset, 1700000000);
    assert_int_equal(a.retry_after_s, -1);
    assert_true(a.sent);
    assert_false(a.truncated);
    assert_string_equal(a.error, "");
    buf_free(&body);
}

static void test_non_2xx_is_an_answer(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/missing");
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 404);
    assert_string_equal(buf_cstr(&body), "{\"message\":\"Not Found\"}");
    assert_string_equal(a.etag, "");
    assert_int_equal(a.rl_remaining, -1);
    assert_int_equal(a.rl_reset, -1);
    buf_free(&body);
}

static void test_redirect_is_not_followed(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/redirect");
    http_answer a = {.body = &body};
    unsigned before = n_requests();
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 302);
    assert_int_equal(n_requests(), before + 1);
    buf_free(&body);
}

static void test_retry_after_seconds(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/retry-seconds");
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 429);
    assert_int_equal(a.retry_after_s, 7);
    buf_free(&body);
}

static void test_retry_after_http_date(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/retry-date");
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 503);
    assert_in_range(a.retry_after_s, 117, 121);

    rq = get("/retry-garbage");
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 503);
    assert_int_equal(a.retry_after_s, -1);
    buf_free(&body);
}

static void test_body_over_cap_is_an_error_and_memory_stays_bounded(void **state)
{
    (void)state;
    static const char *paths[] = {"/big/chunked", "/big/length"};
    for (size_t i = 0; i < 2; i++) {
        buf_t body;
        buf_init(&body, 64 * 1024);
        http_call rq = get(paths[i]);
        http_answer a = {.body = &body};
        assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_TOO_LARGE);
        assert_int_equal(a.status, 200);
        assert_true(body.len <= body.max);
        assert_true(body.cap <= body.max + 1);
        assert_string_equal(a.error, "answer larger than 65536 bytes");
        buf_free(&body);
    }
}

static void test_body_over_cap_truncates_when_asked(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1000);
    http_call rq = get("/big/chunked");
    rq.truncate = true;
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 200);
    assert_true(a.truncated);
    assert_int_equal(body.len, 1000);
    assert_true(body.cap <= body.max + 1);
    buf_free(&body);
}

static void test_timeout(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    /* Real time is the subject here (libcurl's transfer timeout), bounded by 200 ms: /slow does
     * not answer before the test opens its gate, so only the timeout can end the exchange. */
    http_call rq = get("/slow");
    rq.timeout_ms = 200;
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_NETWORK);
    ut_gate_open(&g_srv.slow);
    assert_int_equal(a.status, 0);
    assert_false(a.permanent);
    assert_non_null(strstr(a.error, "imed out"));
    buf_free(&body);
}

static void test_connection_refused(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", ut_refused_port());

    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/ok");
    rq.url = url;
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_NETWORK);
    assert_int_equal(a.status, 0);
    assert_true(a.sent);
    assert_false(a.permanent);
    assert_int_equal(a.retry_after_s, -1);
    assert_true(a.error[0] != '\0');
    buf_free(&body);
}

static void test_https_only_unless_allowed(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/ok");
    rq.allow_http = false;
    http_answer a = {.body = &body};
    unsigned before = n_requests();
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_NETWORK);
    assert_true(a.permanent);
    assert_int_equal(n_requests(), before);
    buf_free(&body);
}

static void test_request_headers(void **state)
{
    (void)state;
    /* Over a megabyte, where libcurl would otherwise send "Expect: 100-continue". */
    size_t n = 1536 * 1024;
    char *payload = malloc(n);
    assert_non_null(payload);
    memset(payload, 'p', n);
    const char *hdrs[] = {"Accept: application/json", NULL};
    buf_t body;
    buf_init(&body, 1024);
    http_call rq = get("/echo");
    rq.method = "POST";
    rq.headers = hdrs;
    rq.auth_scheme = "Bearer";
    rq.auth_credential = "tok-123";
    rq.body = payload;
    rq.body_len = n;
    http_answer a = {.body = &body};
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 200);
    pthread_mutex_lock(&g_srv.mu);
    assert_string_equal(g_srv.method, "POST");
    assert_string_equal(g_srv.ua, HTTP_USER_AGENT);
    assert_string_equal(g_srv.auth, "Bearer tok-123");
    assert_string_equal(g_srv.accept, "application/json");
    assert_false(g_srv.had_expect);
    assert_false(g_srv.had_ctype); /* no default form type */
    assert_int_equal(g_srv.upload_len, n);
    pthread_mutex_unlock(&g_srv.mu);

    /* A named User-Agent and Content-Type, an empty POST. */
    const char *hdrs2[] = {"Content-Type: application/json", NULL};
    rq = get("/echo");
    rq.method = "POST";
    rq.headers = hdrs2;
    rq.user_agent = "crcr-test/1";
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    pthread_mutex_lock(&g_srv.mu);
    assert_string_equal(g_srv.ua, "crcr-test/1");
    assert_string_equal(g_srv.ctype, "application/json");
    assert_string_equal(g_srv.auth, "");
    assert_int_equal(g_srv.upload_len, 0);
    pthread_mutex_unlock(&g_srv.mu);

    /* PATCH carries its body with a custom method. */
    rq = get("/echo");
    rq.method = "PATCH";
    rq.body = "{}";
    rq.body_len = 2;
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    pthread_mutex_lock(&g_srv.mu);
    assert_string_equal(g_srv.method, "PATCH");
    assert_int_equal(g_srv.upload_len, 2);
    pthread_mutex_unlock(&g_srv.mu);
    free(payload);
    buf_free(&body);
}

static void test_malformed_requests_are_not_sent(void **state)
{
    (void)state;
    buf_t body;
    buf_init(&body, 1024);
    http_answer a = {.body = &body};
    unsigned before = n_requests();

    const char *injected[] = {"X-A: 1\r\nX-B: 2", NULL};
    http_call rq = get("/echo");
    rq.headers = injected;
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_INVALID);
    assert_false(a.sent);

    const char *auth_line[] = {"Authorization: Bearer x", NULL};
    rq = get("/echo");
    rq.headers = auth_line; /* credentials only through auth_scheme/auth_credential */
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_INVALID);

    rq = get("/echo");
    rq.auth_scheme = "Bearer";
    rq.auth_credential = "tok\r\nX-Evil: 1";
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_INVALID);
    assert_null(strstr(a.error, "tok")); /* the credential is not echoed */

    rq = get("/echo");
    rq.body = "{}";
    rq.body_len = 2;
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_INVALID); /* GET with a body */

    rq = get("/echo");
    rq.method = "TRACE";
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_INVALID);

    assert_int_equal(n_requests(), before);
    buf_free(&body);
}

static void test_pool_reuses_the_connection(void **state)
{
    (void)state;
    http_pool *pool = http_pool_new();
    assert_non_null(pool);
    buf_t body;
    buf_init(&body, 1024);
    http_answer a = {.body = &body};
    unsigned before = n_conns();
    for (int i = 0; i < 5; i++) {
        http_call rq = get("/ok");
        assert_int_equal(http_exchange(pool, &rq, &a), CRCR_OK);
        assert_int_equal(a.status, 200);
    }
    assert_int_equal(n_conns(), before + 1);

    /* Without a pool every exchange opens its own connection. */
    before = n_conns();
    for (int i = 0; i < 2; i++) {
        http_call rq = get("/ok");
        assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    }
    assert_int_equal(n_conns(), before + 2);
    http_pool_free(pool);
    buf_free(&body);
}

/* ---------------------------------------------------------------- parsers and checks */

/* Cases beyond test_github.c's (which tests the same parser under its github.h name). */
static void test_parse_retry_after(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        int64_t now;
        long want;
    } cases[] = {
        {"1", 5, 1},
        {"000042", 0, 42},
        {"999999999999999999", 0, 999999999999999999L}, /* 18 digits: the most taken */
        {"Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 3600, 3600},
        {"Sun, 06 Nov 1994 08:49:37 GMT", 784111777, 0},
        {"Sat, 01 Jan 2000 00:00:00 GMT", 946684800 - 1, 1},
        {"Sun, 06 Nov 1994 08:49:37 gmt", 0, -1},
        {"Sunday, 06-Nov-94 08:49:37 GMT", 0, -1}, /* RFC 850 form: not taken */
        {"Sun Nov  6 08:49:37 1994", 0, -1},       /* asctime form: not taken */
        {"Sun, 06 Nov 1994 08:49:37 +0000", 0, -1},
        {"Sun, 31 Nov 1994 08:49:37 GMT", 0, -1},
        {"Sun, 06 Nov 1969 08:49:37 GMT", 0, -1},
        {"7 ", 0, -1},
        {"+7", 0, -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(http_parse_retry_after(cases[i].value, cases[i].now), cases[i].want);
}

static void test_parse_iso8601(void **state)
{
    (void)state;
    int64_t t = 0;
    assert_true(http_parse_iso8601_utc("2015-10-21T07:28:00Z", &t));
    assert_int_equal(t, 1445412480);
    assert_true(http_parse_iso8601_utc("2015-10-21T07:28:00.123+00:00", &t));
    assert_int_equal(t, 1445412480);
    assert_false(http_parse_iso8601_utc("2015-10-21 07:28:00Z", &t));
    assert_false(http_parse_iso8601_utc("2015-10-21T07:28:00+02:00", &t));
    assert_false(http_parse_iso8601_utc("2015-02-30T07:28:00Z", &t));
}

static void test_url_check(void **state)
{
    (void)state;
    bool lb = true;
    assert_true(http_url_check("https://api.github.com", &lb));
    assert_false(lb);
    assert_true(http_url_check("http://127.0.0.1:8080/x", &lb));
    assert_true(lb);
    assert_true(http_url_check("http://[::1]:80", &lb));
    assert_true(lb);
    assert_true(http_url_check("http://localhost", NULL));
    assert_false(http_url_check("http://example.com", &lb));
    assert_false(http_url_check("https://user:pw@example.com", NULL));
    assert_false(http_url_check("https://example.com/?q=1", NULL));
    assert_false(http_url_check("https://example.com/#f", NULL));
    assert_false(http_url_check("ftp://127.0.0.1/", NULL));
    assert_false(http_url_check(NULL, NULL));
}

static void test_header_checks(void **state)
{
    (void)state;
    assert_true(http_header_token_ok("abc.DEF-1", 9, 16));
    assert_false(http_header_token_ok("a b", 3, 16));
    assert_false(http_header_token_ok("a\r", 2, 16));
    assert_false(http_header_token_ok("", 0, 16));
    assert_false(http_header_token_ok("abcdef", 6, 5));
    assert_true(http_header_line_ok("X-A: 1"));
    assert_false(http_header_line_ok(": 1"));
    assert_false(http_header_line_ok("no colon"));
    assert_false(http_header_line_ok("X-A: 1\n"));
}

static void test_query_building(void **state)
{
    (void)state;
    buf_t url;
    buf_init(&url, 64);
    assert_int_equal(buf_puts(&url, "https://h/x"), CRCR_OK);
    assert_int_equal(http_add_query(&url, "a", "b c&d/é"), CRCR_OK);
    assert_int_equal(http_add_query(&url, "e", "f-_.~"), CRCR_OK);
    assert_string_equal(buf_cstr(&url), "https://h/x?a=b%20c%26d%2F%C3%A9&e=f-_.~");
    assert_int_equal(http_add_query(&url, "long", "0123456789012345678901234567890123456789"),
                     CRCR_E_TOO_LARGE);
    buf_free(&url);
}

static void test_link_header(void **state)
{
    char u[64];
    const char *v = "<https://a/x?cursor=v0_1>; rel=\"prev\", <https://a/x?cursor=v1_9>; "
                    "rel=\"next\"";
    assert_true(http_link_find(v, strlen(v), "next", u, sizeof(u)));
    assert_string_equal(u, "https://a/x?cursor=v1_9");
    assert_true(http_link_find(v, strlen(v), "prev", u, sizeof(u)));
    assert_string_equal(u, "https://a/x?cursor=v0_1");
    /* Several relations in one rel, unquoted values, other parameters, any case. */
    const char *w = "<https://a/1>; title=\"a, b; rel=next\"; rel=\"first\", <https://a/2>;"
                    " type=x; REL=\"last Next\"";
    assert_true(http_link_find(w, strlen(w), "next", u, sizeof(u)));
    assert_string_equal(u, "https://a/2");
    const char *x = "<https://a/3>;rel=next";
    assert_true(http_link_find(x, strlen(x), "next", u, sizeof(u)));
    assert_string_equal(u, "https://a/3");
    /* None, malformed, or a target longer than the room. */
    assert_false(http_link_find(v, strlen(v), "last", u, sizeof(u)));
    assert_false(http_link_find("https://a/x; rel=next", 21, "next", u, sizeof(u)));
    assert_false(http_link_find("<https://a/x; rel=next", 22, "next", u, sizeof(u)));
    assert_false(http_link_find(v, strlen(v), "next", u, 8));
    assert_false(http_link_find("", 0, "next", u, sizeof(u)));
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_answer_and_header_capture),
        cmocka_unit_test(test_non_2xx_is_an_answer),
        cmocka_unit_test(test_redirect_is_not_followed),
        cmocka_unit_test(test_retry_after_seconds),
        cmocka_unit_test(test_retry_after_http_date),
        cmocka_unit_test(test_body_over_cap_is_an_error_and_memory_stays_bounded),
        cmocka_unit_test(test_body_over_cap_truncates_when_asked),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_https_only_unless_allowed),
        cmocka_unit_test(test_request_headers),
        cmocka_unit_test(test_malformed_requests_are_not_sent),
        cmocka_unit_test(test_pool_reuses_the_connection),
        cmocka_unit_test(test_parse_retry_after),
        cmocka_unit_test(test_parse_iso8601),
        cmocka_unit_test(test_url_check),
        cmocka_unit_test(test_header_checks),
        cmocka_unit_test(test_query_building),
        cmocka_unit_test(test_link_header),
    };
    int rc = cmocka_run_group_tests(tests, server_start, server_stop);
    curl_global_cleanup();
    return rc;
}
