/*
 * test_http_client.c - the libcurl wrapper (http_client.c) against a small server served by
 * libmicrohttpd on 127.0.0.1 inside this process (the pattern of test_github.c): body cap (error
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

#include <arpa/inet.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "http_client.h"

/* ---------------------------------------------------------------- the server */

typedef struct server {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    unsigned n_conns, n_requests;
    /* what the last request carried */
    char method[16];
    char ua[128];
    char auth[128];
    char ctype[128];
    char expect[64];
    char accept[64];
    bool had_expect, had_ctype;
    size_t upload_len;
} server;

static server g_srv;

typedef struct req {
    size_t upload_len;
} req;

/* Bytes to stream from /big/... routes. */
static const uint64_t big_total = 8u * 1024u * 1024u;

static ssize_t fill_x(void *cls, uint64_t pos, char *buf, size_t max)
{
    uint64_t total = *(const uint64_t *)cls;
    if (pos >= total)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = total - pos < max ? (size_t)(total - pos) : max;
    memset(buf, 'x', n);
    return (ssize_t)n;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             const char *const *hdrs)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    for (size_t i = 0; hdrs && hdrs[i]; i += 2)
        MHD_add_response_header(resp, hdrs[i], hdrs[i + 1]);
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

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

static void copy_hdr(struct MHD_Connection *c, const char *name, char *dst, size_t dstsz,
                     bool *present)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(dst, dstsz, "%s", v ? v : "");
    if (present)
        *present = v != NULL;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    server *s = cls;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size) {
        r->upload_len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&s->mu);
    s->n_requests++;
    snprintf(s->method, sizeof(s->method), "%s", method);
    copy_hdr(c, "User-Agent", s->ua, sizeof(s->ua), NULL);
    copy_hdr(c, "Authorization", s->auth, sizeof(s->auth), NULL);
    copy_hdr(c, "Content-Type", s->ctype, sizeof(s->ctype), &s->had_ctype);
    copy_hdr(c, "Expect", s->expect, sizeof(s->expect), &s->had_expect);
    copy_hdr(c, "Accept", s->accept, sizeof(s->accept), NULL);
    s->upload_len = r->upload_len;
    pthread_mutex_unlock(&s->mu);

    if (strcmp(url, "/ok") == 0) {
        const char *h[] = {"ETag",    "\"v1-abc\"",        "X-RateLimit-Remaining",
                           "4999",    "X-RateLimit-Reset", "1700000000",
                           "X-Other", "ignored",           NULL};
        return reply(c, MHD_HTTP_OK, "hello", h);
    }
    if (strcmp(url, "/retry-seconds") == 0) {
        const char *h[] = {"Retry-After", "7", NULL};
        return reply(c, MHD_HTTP_TOO_MANY_REQUESTS, "{\"message\":\"slow down\"}", h);
    }
    if (strcmp(url, "/retry-date") == 0) {
        char date[32];
        imf_fixdate(time(NULL) + 120, date);
        const char *h[] = {"Retry-After", date, NULL};
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "busy", h);
    }
    if (strcmp(url, "/retry-garbage") == 0) {
        const char *h[] = {"Retry-After", "soon", NULL};
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "busy", h);
    }
    if (strcmp(url, "/missing") == 0)
        return reply(c, MHD_HTTP_NOT_FOUND, "{\"message\":\"Not Found\"}", NULL);
    if (strcmp(url, "/redirect") == 0) {
        const char *h[] = {"Location", "/ok", NULL};
        return reply(c, MHD_HTTP_FOUND, "", h);
    }
    if (strcmp(url, "/slow") == 0) {
        usleep(1500 * 1000);
        return reply(c, MHD_HTTP_OK, "late", NULL);
    }
    if (strncmp(url, "/big/", 5) == 0) {
        bool chunked = strcmp(url + 5, "chunked") == 0;
        struct MHD_Response *resp = MHD_create_response_from_callback(
            chunked ? MHD_SIZE_UNKNOWN : big_total, 64 * 1024, fill_x, (void *)&big_total, NULL);
        enum MHD_Result res = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return res;
    }
    return reply(c, MHD_HTTP_OK, "echo", NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)c;
    (void)socket_ctx;
    server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        pthread_mutex_lock(&s->mu);
        s->n_conns++;
        pthread_mutex_unlock(&s->mu);
    }
}

static int server_start(void **state)
{
    (void)state;
    server *s = &g_srv;
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0,
                            NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, 4u, MHD_OPTION_NOTIFY_COMPLETED, completed,
                            s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!s->d)
        return -1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (!info || info->port == 0)
        return -1;
    s->port = info->port;
    return 0;
}

static int server_stop(void **state)
{
    (void)state;
    MHD_stop_daemon(g_srv.d);
    pthread_mutex_destroy(&g_srv.mu);
    return 0;
}

static unsigned sget(const unsigned *field)
{
    pthread_mutex_lock(&g_srv.mu);
    unsigned v = *field;
    pthread_mutex_unlock(&g_srv.mu);
    return v;
}

/* ---------------------------------------------------------------- helpers */

static char g_url[256];

/* http://127.0.0.1:<port><path> (valid until the next call). */
static const char *url_of(const char *path)
{
    snprintf(g_url, sizeof(g_url), "http://127.0.0.1:%d%s", g_srv.port, path);
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
    unsigned before = sget(&g_srv.n_requests);
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    assert_int_equal(a.status, 302);
    assert_int_equal(sget(&g_srv.n_requests), before + 1);
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
    http_call rq = get("/slow");
    rq.timeout_ms = 200;
    http_answer a = {.body = &body};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_NETWORK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    assert_true(ms < 1200);
    assert_int_equal(a.status, 0);
    assert_false(a.permanent);
    assert_non_null(strstr(a.error, "imed out"));
    buf_free(&body);
}

static void test_connection_refused(void **state)
{
    (void)state;
    /* A port nobody listens on: bind one, note it, close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", ntohs(sa.sin_port));

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
    unsigned before = sget(&g_srv.n_requests);
    assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_E_NETWORK);
    assert_true(a.permanent);
    assert_int_equal(sget(&g_srv.n_requests), before);
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
    unsigned before = sget(&g_srv.n_requests);

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

    assert_int_equal(sget(&g_srv.n_requests), before);
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
    unsigned before = sget(&g_srv.n_conns);
    for (int i = 0; i < 5; i++) {
        http_call rq = get("/ok");
        assert_int_equal(http_exchange(pool, &rq, &a), CRCR_OK);
        assert_int_equal(a.status, 200);
    }
    assert_int_equal(sget(&g_srv.n_conns), before + 1);

    /* Without a pool every exchange opens its own connection. */
    before = sget(&g_srv.n_conns);
    for (int i = 0; i < 2; i++) {
        http_call rq = get("/ok");
        assert_int_equal(http_exchange(NULL, &rq, &a), CRCR_OK);
    }
    assert_int_equal(sget(&g_srv.n_conns), before + 2);
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
