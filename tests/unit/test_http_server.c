/*
 * test_http_server.c - the HTTP front door (src/net/http_server.c) served on 127.0.0.1 (port 0)
 * with a few routes of its own, libcurl as the client (and a raw socket where a client must
 * misbehave): 404/405 bodies, exact and prefix routes, header and query lookups, 413 from
 * Content-Length before any body byte and for a chunked body past the cap, 431, a guard answering
 * from the headers (the handler never runs), HTTP_ROUTE_OFFLOAD handlers running off the MHD
 * threads and a full offload queue answering 503 with Retry-After, HTTP_ROUTE_CACHE answering
 * repeats from the page cache, and the request deadline cutting a client that never finishes its
 * request. The front-door limits (spec §8): the per-client cap refusing a peer's next connection
 * at accept (IPv4 and IPv6, the count given back as connections close), the header timeout
 * cutting a slowloris (and only a connection whose header block is late), the budget of
 * unauthenticated bodies answering 503 with Retry-After before a body byte is read (and at the end
 * of a chunked body that outgrows it), and a route's streaming body check (the webhook HMAC,
 * sig_stream) whose verdict reaches the handler and whose pass gives the body's charge back. The
 * server's threads (MHD's I/O threads, the handler pools) run SCHED_BATCH.
 *
 * Handlers run on server threads and never assert (cmocka is not thread-safe): they record under
 * a mutex and the test thread checks. Waits on the server are condition variables with a
 * generous bound that only turns a hang into a failure.
 */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <setjmp.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "http_server.h"
#include "metrics.h"
#include "sig.h"
#include "unit_support.h"

#define WAIT_BOUND_S 30 /* a wait that takes longer than this is a hang: fail */
#define ECHO_CAP 16
#define BIG_SEEN 8 /* body lengths of /big kept for a test's message */

/* ---- what the handlers saw ---- */

typedef struct seen {
    int hello, echo, guarded, guard_calls, tree, deep, off, cached, block_entered, finished;
    int big, signed_calls, verdict, quick_calls, carried, carry_freed;
    int quick_policy, carried_policy; /* sched_getscheduler() of the last /quick's threads */
    size_t guard_body_len;
    size_t big_len[BIG_SEEN]; /* the body lengths /big answered, the first BIG_SEEN */
    char query[64], header[64], path[128], body[64];
    pthread_t guard_thread, off_thread, hello_thread;
    bool release;
} seen;

/* Guards g; g_cv is signalled whenever a count changes or handlers are released. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static seen g;

/* A copy of what the handlers recorded: tests assert on copies, never while holding g_mu. */
static seen snapshot(void)
{
    pthread_mutex_lock(&g_mu);
    seen s = g;
    pthread_mutex_unlock(&g_mu);
    return s;
}

static void reset_seen(void)
{
    pthread_mutex_lock(&g_mu);
    memset(&g, 0, sizeof(g));
    pthread_mutex_unlock(&g_mu);
}

/* Lets every blocked handler return. */
static void release_handlers(void)
{
    pthread_mutex_lock(&g_mu);
    g.release = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* Waits until *counter >= want; false after WAIT_BOUND_S (a hang, which the caller reports once
 * its threads are joined). */
static bool wait_for(const int *counter, int want)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_BOUND_S;
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    while (*counter < want && rc == 0)
        rc = pthread_cond_timedwait(&g_cv, &g_mu, &until);
    bool ok = *counter >= want;
    pthread_mutex_unlock(&g_mu);
    return ok;
}

/* ---- handlers ---- */

static void hello(void *ctx, const http_request *req, http_response *resp)
{
    const char *q = http_req_query(req, "q");
    const char *h = http_req_header(req, "x-test"); /* sent as X-Test */
    pthread_mutex_lock(&g_mu);
    g.hello++;
    g.hello_thread = pthread_self();
    snprintf(g.query, sizeof(g.query), "%s", q ? q : "(none)");
    snprintf(g.header, sizeof(g.header), "%s", h ? h : "(none)");
    snprintf(g.path, sizeof(g.path), "%s", req->path);
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, 200, "{\"hello\":true}");
    for (int i = 0; i < HTTP_MAX_RESP_HEADERS + 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "X-H%d", i);
        http_resp_header(resp, name, "v");
    }
}

static void echo(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    g.echo++;
    snprintf(g.body, sizeof(g.body), "%.*s", (int)req->body_len, req->body);
    pthread_mutex_unlock(&g_mu);
    resp->status = 201;
    resp->content_type = "text/plain";
    buf_append(&resp->body, req->body, req->body_len);
}

static void guarded(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    g.guarded++;
    snprintf(g.body, sizeof(g.body), "%.*s", (int)req->body_len, req->body);
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, 200, "{\"ok\":true}");
}

/* Lets requests with an X-Key header through; answers the others 401 from the headers. */
static bool key_guard(void *ctx, const http_request *req, http_response *resp)
{
    const char *key = http_req_header(req, "X-Key");
    pthread_mutex_lock(&g_mu);
    g.guard_calls++;
    g.guard_body_len += req->body_len;
    g.guard_thread = pthread_self();
    pthread_mutex_unlock(&g_mu);
    if (key)
        return false;
    http_resp_detail(resp, 401, "need a key");
    http_resp_header(resp, "WWW-Authenticate", "Key");
    return true;
}

static void tree(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    (*(int *)ctx)++;
    snprintf(g.path, sizeof(g.path), "%s", req->path);
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, 200, ctx == &g.deep ? "{\"route\":\"deep\"}" : "{\"route\":\"tree\"}");
}

static void off(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    g.off++;
    g.off_thread = pthread_self();
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, 200, "{\"offloaded\":true}");
}

/* Blocks its thread until the test releases it. */
static void block(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    g.block_entered++;
    pthread_cond_broadcast(&g_cv);
    while (!g.release)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, 200, "{\"blocked\":false}");
}

/* A 200 naming how often it ran, or ?status=N. */
static void cached(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    int n = ++g.cached;
    pthread_mutex_unlock(&g_mu);
    const char *st = http_req_query(req, "status");
    char body[64];
    snprintf(body, sizeof(body), "{\"n\":%d}", n);
    http_resp_json(resp, st ? (int)strtol(st, NULL, 10) : 200, body);
    resp->content_type = "text/html; charset=utf-8";
    http_resp_header(resp, "X-Custom", "kept");
}

/* POST /big: a body of up to BIG_CAP bytes; answers its length. */
#define BIG_CAP (1u << 20)
static void big(void *ctx, const http_request *req, http_response *resp)
{
    pthread_mutex_lock(&g_mu);
    if (g.big < BIG_SEEN)
        g.big_len[g.big] = req->body_len;
    g.big++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    char out[64];
    snprintf(out, sizeof(out), "{\"len\":%zu}", req->body_len);
    http_resp_json(resp, 200, out);
}

/* POST /signed: bodies checked with the webhook's streaming HMAC under SIGNED_SECRET (or the
 * previous SIGNED_PREVIOUS); the handler records the verdict and, with ?block=1, waits for the
 * test to release it. */
#define SIGNED_SECRET "front-door-secret"
#define SIGNED_PREVIOUS "old-front-door-secret"
static void *signed_start(void *ctx, const http_request *req)
{
    const char *secrets[] = {SIGNED_SECRET, SIGNED_PREVIOUS};
    return sig_stream_new(http_req_header(req, "X-Hub-Signature-256"), secrets, 2);
}
static void signed_update(void *st, const void *data, size_t len)
{
    sig_stream_update(st, data, len);
}
static bool signed_finish(void *st)
{
    bool ok = sig_stream_verify(st);
    sig_stream_free(st);
    return ok;
}
static const http_body_auth SIGNED_AUTH = {signed_start, signed_update, signed_finish};

static void signed_handler(void *ctx, const http_request *req, http_response *resp)
{
    const char *blk = http_req_query(req, "block");
    pthread_mutex_lock(&g_mu);
    g.signed_calls++;
    g.verdict = req->body_auth;
    pthread_cond_broadcast(&g_cv);
    while (blk && !g.release)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    http_resp_json(resp, req->body_auth == HTTP_BODY_AUTHENTIC ? 200 : 401, "{}");
}

/* GET /quick: the quick step answers ?answer=1 itself; otherwise it leaves a carry (an int, 7)
 * for the handler, which answers what it found in req->carry. */
static bool quick_step(void *ctx, const http_request *req, http_response *resp, void **carry)
{
    pthread_mutex_lock(&g_mu);
    g.quick_calls++;
    g.quick_policy = sched_getscheduler(0);
    pthread_mutex_unlock(&g_mu);
    if (http_req_query(req, "answer")) {
        http_resp_json(resp, 200, "{\"quick\":true}");
        return true;
    }
    int *c = malloc(sizeof(*c));
    if (c)
        *c = 7;
    *carry = c;
    return false;
}

static void carried_handler(void *ctx, const http_request *req, http_response *resp)
{
    int v = req->carry ? *(const int *)req->carry : -1;
    pthread_mutex_lock(&g_mu);
    g.carried++;
    g.carried_policy = sched_getscheduler(0);
    pthread_mutex_unlock(&g_mu);
    char body[32];
    snprintf(body, sizeof(body), "{\"carry\":%d}", v);
    http_resp_json(resp, 200, body);
}

static void carry_release(void *carry)
{
    pthread_mutex_lock(&g_mu);
    g.carry_freed++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    free(carry);
}

static const http_route ROUTES[] = {
    {.method = "GET",
     .path = "/quick",
     .fn = carried_handler,
     .quick = quick_step,
     .carry_free = carry_release},
    {.method = "GET", .path = "/hello", .fn = hello},
    {.method = "POST", .path = "/echo", .max_body = ECHO_CAP, .fn = echo},
    {.method = "POST", .path = "/guarded", .max_body = 1024, .fn = guarded, .guard = key_guard},
    {.method = "GET", .path = "/tree/", .prefix = true, .fn = tree, .ctx = &g.tree},
    {.method = "GET", .path = "/tree/deep/", .prefix = true, .fn = tree, .ctx = &g.deep},
    {.method = "GET", .path = "/off", .fn = off, .guard = key_guard, .flags = HTTP_ROUTE_OFFLOAD},
    {.method = "GET", .path = "/block", .fn = block, .flags = HTTP_ROUTE_OFFLOAD},
    {.method = "GET", .path = "/hold", .fn = block},
    {.method = "GET", .path = "/inline", .fn = hello, .flags = HTTP_ROUTE_INLINE},
    {.method = "GET", .path = "/cached", .fn = cached, .flags = HTTP_ROUTE_CACHE},
    {.method = "GET",
     .path = "/offcached",
     .fn = cached,
     .flags = HTTP_ROUTE_CACHE | HTTP_ROUTE_OFFLOAD},
    {.method = "GET", .path = "/uncached", .fn = cached},
    {.method = "POST", .path = "/big", .max_body = BIG_CAP, .fn = big},
    {.method = "POST",
     .path = "/signed",
     .max_body = BIG_CAP,
     .fn = signed_handler,
     .body_auth = &SIGNED_AUTH},
};

/* ---- the server ---- */

static http_server *start(http_server_opts opts)
{
    opts.host = "127.0.0.1";
    opts.port = 0;
    if (!opts.threads)
        opts.threads = 2;
    char err[256] = "";
    http_server *srv =
        http_server_start(&opts, ROUTES, sizeof(ROUTES) / sizeof(ROUTES[0]), err, sizeof(err));
    if (!srv)
        fail_msg("http_server_start: %s", err);
    assert_true(http_server_port(srv) > 0);
    return srv;
}

static int setup(void **state)
{
    reset_seen();
    *state = start((http_server_opts){.cache_ms = 60000});
    return 0;
}

static void clients_join(void);
static void clients_free(void);

static int teardown(void **state)
{
    release_handlers(); /* never leave a handler blocked, nor a client running */
    clients_join();
    clients_free();
    http_server_stop(*state, 5000);
    return 0;
}

static int port_of(void **state)
{
    return http_server_port(*state);
}

static int count(const int *counter)
{
    pthread_mutex_lock(&g_mu);
    int n = *counter;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static void assert_detail(const ut_resp *r, long status, const char *body)
{
    assert_int_equal(r->status, status);
    assert_string_equal(ut_body(r), body);
    char ct[128];
    assert_true(ut_resp_header(r, "Content-Type", ct, sizeof(ct)));
    assert_string_equal(ct, "application/json");
}

/* ---- a raw client, for requests curl will not send ---- */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = WAIT_BOUND_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void raw_send(int fd, const char *text)
{
    assert_int_equal(send(fd, text, strlen(text), MSG_NOSIGNAL), (ssize_t)strlen(text));
}

/* Reads one answer (its header block and Content-Length bytes) into out. Fails when the server
 * neither answers nor closes within WAIT_BOUND_S. */
static void raw_read_answer(int fd, char *out, size_t outsz)
{
    size_t n = 0;
    out[0] = '\0';
    for (;;) {
        const char *end = strstr(out, "\r\n\r\n");
        if (end) {
            const char *cl = strstr(out, "Content-Length: ");
            size_t want = (size_t)(end + 4 - out) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
            if (n >= want)
                return;
        }
        ssize_t got = recv(fd, out + n, outsz - 1 - n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            fail_msg("no answer within %d s; have '%s'", WAIT_BOUND_S, out);
        if (got <= 0)
            return; /* closed */
        n += (size_t)got;
        out[n] = '\0';
        if (n + 1 >= outsz)
            return;
    }
}

/* True when the server closes (or resets) the connection within WAIT_BOUND_S. */
static bool raw_closed_by_server(int fd)
{
    char b[512];
    for (;;) {
        ssize_t got = recv(fd, b, sizeof(b), 0);
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return true;
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return false; /* timed out: still open */
    }
}

/* ---- routing ---- */

static void unknown_paths_are_404_and_other_methods_405(void **state)
{
    int port = port_of(state);
    ut_resp r;
    ut_get(&r, port, "/nope", NULL);
    assert_detail(&r, 404, "{\"detail\":\"Not found\"}");
    ut_resp_free(&r);
    assert_int_equal(ut_http(&r, port, "POST", "/hello", NULL, "x", 1), CURLE_OK);
    assert_detail(&r, 405, "{\"detail\":\"Method not allowed\"}");
    ut_resp_free(&r);
    assert_int_equal(ut_http(&r, port, "DELETE", "/tree/x", NULL, NULL, 0), CURLE_OK);
    assert_detail(&r, 405, "{\"detail\":\"Method not allowed\"}");
    ut_resp_free(&r);
    ut_get(&r, port, "/hello/", NULL); /* exact paths are exact */
    assert_int_equal(r.status, 404);
    ut_resp_free(&r);
    assert_int_equal(count(&g.hello), 0);
}

static void a_handler_reads_path_query_and_headers(void **state)
{
    int port = port_of(state);
    ut_resp r;
    const char *h[] = {"X-Test: value one", NULL};
    ut_get(&r, port, "/hello?q=a%20b&other=1", h);
    assert_int_equal(r.status, 200);
    assert_string_equal(ut_body(&r), "{\"hello\":true}");
    seen v1 = snapshot();
    assert_int_equal(v1.hello, 1);
    assert_string_equal(v1.path, "/hello"); /* without the query */
    assert_string_equal(v1.query, "a b");
    assert_string_equal(v1.header, "value one");
    /* at most HTTP_MAX_RESP_HEADERS response headers are kept */
    char v[16], name[16];
    snprintf(name, sizeof(name), "X-H%d", HTTP_MAX_RESP_HEADERS - 1);
    assert_true(ut_resp_header(&r, name, v, sizeof(v)));
    snprintf(name, sizeof(name), "X-H%d", HTTP_MAX_RESP_HEADERS);
    assert_false(ut_resp_header(&r, name, v, sizeof(v)));
    ut_resp_free(&r);
    ut_expect(port, "GET", "/hello", NULL, 200, NULL);
    seen v2 = snapshot();
    assert_string_equal(v2.query, "(none)");
    assert_string_equal(v2.header, "(none)");
}

static void the_longest_matching_prefix_wins(void **state)
{
    int port = port_of(state);
    ut_expect(port, "GET", "/tree/a/b", NULL, 200, "{\"route\":\"tree\"}");
    ut_expect(port, "GET", "/tree/deep/x", NULL, 200, "{\"route\":\"deep\"}");
    /* not under /tree/deep/ */
    ut_expect(port, "GET", "/tree/deep", NULL, 200, "{\"route\":\"tree\"}");
    ut_expect(port, "GET", "/tree", NULL, 404, NULL);
    assert_int_equal(count(&g.tree), 2);
    assert_int_equal(count(&g.deep), 1);
}

/* ---- body caps ---- */

static void a_body_up_to_the_cap_reaches_the_handler(void **state)
{
    int port = port_of(state);
    ut_resp r;
    assert_int_equal(ut_http(&r, port, "POST", "/echo", NULL, "0123456789abcdef", ECHO_CAP),
                     CURLE_OK);
    assert_int_equal(r.status, 201);
    assert_string_equal(ut_body(&r), "0123456789abcdef");
    ut_resp_free(&r);
    assert_int_equal(ut_http(&r, port, "POST", "/echo", NULL, "0123456789abcdefX", ECHO_CAP + 1),
                     CURLE_OK);
    assert_detail(&r, 413, "{\"detail\":\"Request body too large\"}");
    ut_resp_free(&r);
    assert_int_equal(count(&g.echo), 1);
}

static void content_length_over_the_cap_is_413_before_the_body(void **state)
{
    /* The body is never sent: an answer proves that the server did not wait for it. */
    int fd = raw_connect(port_of(state));
    raw_send(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n");
    char out[4096];
    raw_read_answer(fd, out, sizeof(out));
    close(fd);
    assert_true(strncmp(out, "HTTP/1.1 413", 12) == 0);
    assert_non_null(strstr(out, "{\"detail\":\"Request body too large\"}"));
    assert_int_equal(count(&g.echo), 0);
}

typedef struct chunked_src {
    size_t left;
} chunked_src;

static size_t chunked_read(char *p, size_t size, size_t n, void *ctx)
{
    chunked_src *s = ctx;
    size_t k = size * n < s->left ? size * n : s->left;
    k = k > 5 ? 5 : k; /* several small chunks */
    memset(p, 'c', k);
    s->left -= k;
    return k;
}

/* POSTs `len` bytes as a chunked body (no Content-Length); returns the status. */
static long post_chunked(int port, const char *path, size_t len, ut_resp *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->body, 1 << 20);
    buf_init(&r->headers, 1 << 20);
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    chunked_src src = {len};
    CURL *c = curl_easy_init();
    assert_non_null(c);
    struct curl_slist *h = curl_slist_append(NULL, "Transfer-Encoding: chunked");
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, chunked_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &src);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ut_curl_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)WAIT_BOUND_S * 1000);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK)
        fail_msg("chunked POST: %s", curl_easy_strerror(rc));
    return r->status;
}

static void a_chunked_body_past_the_cap_is_413(void **state)
{
    int port = port_of(state);
    ut_resp r;
    assert_int_equal(post_chunked(port, "/echo", ECHO_CAP, &r), 201);
    assert_int_equal(r.body.len, ECHO_CAP);
    ut_resp_free(&r);
    assert_int_equal(post_chunked(port, "/echo", 4096, &r), 413);
    assert_string_equal(ut_body(&r), "{\"detail\":\"Request body too large\"}");
    ut_resp_free(&r);
    assert_int_equal(count(&g.echo), 1);
}

static void a_header_block_past_32_kib_is_431(void **state)
{
    size_t n = 40 * 1024;
    char *h = malloc(n + 16);
    assert_non_null(h);
    memcpy(h, "X-Big: ", 7);
    memset(h + 7, 'b', n);
    h[7 + n] = '\0';
    const char *headers[] = {h, NULL};
    ut_resp r;
    ut_get(&r, port_of(state), "/hello", headers);
    assert_detail(&r, 431, "{\"detail\":\"Request header fields too large\"}");
    ut_resp_free(&r);
    free(h);
    assert_int_equal(count(&g.hello), 0);
}

/* ---- guards ---- */

static void a_guard_answers_from_the_headers_and_the_handler_never_runs(void **state)
{
    int port = port_of(state);
    ut_resp r;
    assert_int_equal(ut_http(&r, port, "POST", "/guarded", NULL, "{\"x\":1}", 7), CURLE_OK);
    assert_detail(&r, 401, "{\"detail\":\"need a key\"}");
    char v[32];
    assert_true(ut_resp_header(&r, "WWW-Authenticate", v, sizeof(v)));
    assert_string_equal(v, "Key");
    ut_resp_free(&r);
    assert_int_equal(count(&g.guard_calls), 1);
    assert_int_equal(count(&g.guarded), 0);

    /* Its body is never read: the answer comes although the body never does. */
    int fd = raw_connect(port);
    raw_send(fd, "POST /guarded HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n");
    char out[4096];
    raw_read_answer(fd, out, sizeof(out));
    close(fd);
    assert_true(strncmp(out, "HTTP/1.1 401", 12) == 0);

    const char *h[] = {"X-Key: k", NULL};
    assert_int_equal(ut_http(&r, port, "POST", "/guarded", h, "{\"x\":1}", 7), CURLE_OK);
    assert_int_equal(r.status, 200);
    ut_resp_free(&r);
    seen after = snapshot();
    assert_int_equal(after.guard_calls, 3);
    assert_int_equal(after.guarded, 1);
    assert_int_equal(after.guard_body_len, 0); /* the guard never sees a body */
    assert_string_equal(after.body, "{\"x\":1}");
}

/* ---- the offload pool ---- */

static void offloaded_handlers_run_off_the_mhd_threads(void **state)
{
    int port = port_of(state);
    const char *h[] = {"X-Key: k", NULL};
    ut_resp r;
    ut_get(&r, port, "/off", h);
    assert_int_equal(r.status, 200);
    assert_string_equal(ut_body(&r), "{\"offloaded\":true}");
    ut_resp_free(&r);
    ut_get(&r, port, "/hello", NULL);
    ut_resp_free(&r);
    seen v = snapshot();
    assert_int_equal(v.off, 1);
    /* The guard ran on the MHD thread that took the request; the handler on another. */
    assert_false(pthread_equal(v.guard_thread, v.off_thread));
    assert_false(pthread_equal(v.hello_thread, v.off_thread));
    /* A guard of an offloaded route still answers on the MHD thread, without the pool. */
    ut_expect(port, "GET", "/off", NULL, 401, NULL);
    assert_int_equal(count(&g.off), 1);
}

/* Requests sent from threads of their own; file-scope so that a failed test cannot leave a
 * thread writing into a finished stack frame (the teardown joins them). */
typedef struct client {
    pthread_t t;
    bool started;
    int port;
    const char *path;
    ut_resp r;
    CURLcode rc;
    bool done;
} client;

#define MAX_CLIENTS 4
static client g_clients[MAX_CLIENTS];

static void *client_main(void *arg)
{
    client *c = arg;
    c->rc = ut_http(&c->r, c->port, "GET", c->path, NULL, NULL, 0);
    pthread_mutex_lock(&g_mu);
    c->done = true;
    g.finished++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static client *client_start(int port, const char *path)
{
    for (size_t i = 0; i < MAX_CLIENTS; i++) {
        client *c = &g_clients[i];
        if (c->started)
            continue;
        memset(c, 0, sizeof(*c));
        c->port = port;
        c->path = path;
        assert_int_equal(pthread_create(&c->t, NULL, client_main, c), 0);
        c->started = true;
        return c;
    }
    fail_msg("more than %d clients", MAX_CLIENTS);
    return NULL;
}

/* Joins every client thread (their answers stay until clients_free). */
static void clients_join(void)
{
    for (size_t i = 0; i < MAX_CLIENTS; i++)
        if (g_clients[i].started) {
            pthread_join(g_clients[i].t, NULL);
            g_clients[i].started = false;
        }
}

static void clients_free(void)
{
    for (size_t i = 0; i < MAX_CLIENTS; i++)
        ut_resp_free(&g_clients[i].r);
    memset(g_clients, 0, sizeof(g_clients));
}

static bool client_done(const client *c)
{
    pthread_mutex_lock(&g_mu);
    bool done = c->done;
    pthread_mutex_unlock(&g_mu);
    return done;
}

/* The pool of a server with one offload thread and a queue of one, made full: `blocked` holds
 * the thread (its handler waits for release_handlers), one request waits in the queue (it
 * cannot finish while the thread is held) and the other finds the queue full and is answered at
 * once; which of the two is the server's choice. False when that does not happen within
 * WAIT_BOUND_S (the caller releases, joins and then fails). */
typedef struct saturated {
    client *blocked, *queued, *rejected;
} saturated;

static bool saturate(int port, saturated *out)
{
    memset(out, 0, sizeof(*out));
    out->blocked = client_start(port, "/block");
    if (!wait_for(&g.block_entered, 1))
        return false;
    client *b = client_start(port, "/block"), *c = client_start(port, "/block");
    if (!wait_for(&g.finished, 1))
        return false;
    bool b_done = client_done(b), c_done = client_done(c);
    if (client_done(out->blocked) || b_done == c_done)
        return false;
    out->rejected = b_done ? b : c;
    out->queued = b_done ? c : b;
    return true;
}

/* ---- the handler pool ---- */

/* Restarts the server with `opts`, holds a handler thread with /hold (its handler waits until
 * released), sends GET `path`, and checks that `path` is answered while /hold still waits; then
 * releases and joins both. Returns the client of `path` (its answer stays until teardown). */
static client *answered_while_held(void **state, http_server_opts opts, const char *path)
{
    http_server_stop(*state, 0);
    *state = start(opts);
    int port = port_of(state);
    client *held = client_start(port, "/hold");
    bool entered = wait_for(&g.block_entered, 1);
    client *c = client_start(port, path);
    bool answered = wait_for(&g.finished, 1);
    bool first = client_done(c) && !client_done(held);
    release_handlers();
    clients_join();
    assert_true(entered);
    assert_true(answered);
    assert_true(first);
    assert_int_equal(held->r.status, 200);
    assert_int_equal(c->r.status, 200);
    return c;
}

/* One MHD thread serves both connections: while one connection's handler waits (a store commit,
 * here until the test releases it), the other connection's request is answered. With handlers
 * run on the MHD thread, the second request waited for the first's handler. */
static void a_waiting_handler_holds_up_no_other_connection(void **state)
{
    answered_while_held(state, (http_server_opts){.threads = 2, .io_threads = 1}, "/hello");
    assert_int_equal(count(&g.hello), 1);
}

/* An HTTP_ROUTE_INLINE route (/healthz) is answered on the MHD thread, also while every handler
 * thread waits. */
static void an_inline_route_answers_while_every_handler_waits(void **state)
{
    answered_while_held(state, (http_server_opts){.threads = 1}, "/inline");
}

/* A route's quick step answers on the MHD thread, without the handler pool (its one thread is
 * held here); the handler never runs. */
static void a_quick_step_answers_without_the_handler_pool(void **state)
{
    client *quick = answered_while_held(state, (http_server_opts){.threads = 1}, "/quick?answer=1");
    assert_string_equal(ut_body(&quick->r), "{\"quick\":true}");
    seen v = snapshot();
    assert_int_equal(v.quick_calls, 1);
    assert_int_equal(v.carried, 0);
    assert_int_equal(v.carry_freed, 0);
}

/* What a quick step leaves reaches the handler, and is freed once, when the request ends. */
static void a_quick_steps_carry_reaches_the_handler_and_is_freed_once(void **state)
{
    ut_expect(port_of(state), "GET", "/quick", NULL, 200, "{\"carry\":7}");
    ut_expect(port_of(state), "GET", "/quick", NULL, 200, "{\"carry\":7}");
    /* Freed at the request's completion, which may come just after the client has the answer. */
    assert_true(wait_for(&g.carry_freed, 2));
    seen v = snapshot();
    assert_int_equal(v.quick_calls, 2);
    assert_int_equal(v.carried, 2);
    assert_int_equal(v.carry_freed, 2);
    /* Both threads are throughput work (thread_sched.c): the MHD thread that ran the quick step
     * and the handler pool's. */
    assert_int_equal(v.quick_policy, SCHED_BATCH);
    assert_int_equal(v.carried_policy, SCHED_BATCH);
}

static void a_full_offload_queue_answers_503_with_retry_after(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){.offload_threads = 1, .offload_queue = 1});
    metrics_reset();
    saturated s;
    bool full = saturate(port_of(state), &s);
    release_handlers();
    clients_join();
    assert_true(full);
    assert_int_equal(s.rejected->rc, CURLE_OK);
    assert_detail(&s.rejected->r, 503, "{\"detail\":\"Busy, please retry\"}");
    char v[16];
    assert_true(ut_resp_header(&s.rejected->r, "Retry-After", v, sizeof(v)));
    assert_string_equal(v, "1");
    assert_int_equal(s.blocked->r.status, 200);
    assert_int_equal(s.queued->r.status, 200);
    assert_string_equal(ut_body(&s.queued->r), "{\"blocked\":false}");
    assert_int_equal(count(&g.block_entered), 2); /* the rejected one never ran */
    clients_free();

    buf_t m;
    buf_init(&m, 1 << 20);
    assert_int_equal(metrics_render(&m), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&m), "crcr_http_offload_rejected_total 1\n"));
    buf_free(&m);
}

/* ---- the page cache ---- */

static uint64_t hits_of(void **state, uint64_t *misses)
{
    uint64_t hits = 0;
    assert_true(http_server_cache_counts(*state, &hits, misses));
    return hits;
}

static void a_repeat_within_cache_ms_is_answered_from_the_cache(void **state)
{
    int port = port_of(state);
    ut_resp r1, r2;
    ut_get(&r1, port, "/cached?a=1", NULL);
    ut_get(&r2, port, "/cached?a=1", NULL);
    assert_int_equal(count(&g.cached), 1);
    assert_int_equal(r2.status, 200);
    assert_string_equal(ut_body(&r1), "{\"n\":1}");
    assert_string_equal(ut_body(&r2), ut_body(&r1));
    /* content type and headers come back with the cached body */
    char v[64];
    assert_true(ut_resp_header(&r2, "X-Custom", v, sizeof(v)));
    assert_string_equal(v, "kept");
    assert_true(ut_resp_header(&r2, "Content-Type", v, sizeof(v)));
    assert_string_equal(v, "text/html; charset=utf-8");
    ut_resp_free(&r1);
    ut_resp_free(&r2);
    uint64_t misses = 0;
    assert_int_equal(hits_of(state, &misses), 1);
    assert_int_equal(misses, 1);
}

static void another_query_is_another_entry(void **state)
{
    int port = port_of(state);
    const char *paths[] = {"/cached?a=1", "/cached?a=2", "/cached", "/cached?a=b&c",
                           "/cached?a=b%26c"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        char want[32]; /* a run of its own, not a cached answer of another query */
        snprintf(want, sizeof(want), "{\"n\":%zu}", i + 1);
        ut_expect(port, "GET", paths[i], NULL, 200, want);
    }
    assert_int_equal(count(&g.cached), 5);
    ut_expect(port, "GET", "/cached?a=2", NULL, 200, "{\"n\":2}");
    assert_int_equal(count(&g.cached), 5);
}

static void only_200_answers_of_cache_routes_are_kept(void **state)
{
    int port = port_of(state);
    for (int i = 0; i < 2; i++) {
        ut_expect(port, "GET", "/cached?status=404", NULL, 404, NULL);
        ut_expect(port, "GET", "/uncached", NULL, 200, NULL);
    }
    assert_int_equal(count(&g.cached), 4);
    uint64_t misses = 0;
    assert_int_equal(hits_of(state, &misses), 0);
}

static void an_offloaded_route_is_answered_from_the_cache_without_the_pool(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){.cache_ms = 60000, .offload_threads = 1, .offload_queue = 1});
    int port = port_of(state);
    ut_expect(port, "GET", "/offcached", NULL, 200, "{\"n\":1}");
    /* With the pool full, a cached answer still comes (from the MHD thread) while a request the
     * cache cannot answer is refused. */
    saturated s;
    bool full = saturate(port, &s);
    if (full) {
        ut_expect(port, "GET", "/offcached", NULL, 200, "{\"n\":1}");
        ut_expect(port, "GET", "/offcached?other=1", NULL, 503, NULL);
    }
    release_handlers();
    clients_join();
    clients_free();
    assert_true(full);
    assert_int_equal(count(&g.cached), 1);
}

static void the_cache_is_off_without_cache_ms(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){0});
    int port = port_of(state);
    for (int i = 0; i < 2; i++)
        ut_expect(port, "GET", "/cached", NULL, 200, NULL);
    assert_int_equal(count(&g.cached), 2);
    uint64_t hits = 0, misses = 0;
    assert_false(http_server_cache_counts(*state, &hits, &misses));
}

/* ---- the request deadline ---- */

static void a_request_that_never_finishes_is_cut_at_the_deadline(void **state)
{
    http_server_stop(*state, 0);
    /* Real time is the subject: the deadline cuts a client that is slow in real time (clock.h
     * keeps the server's deadlines on the real clock), so this waits it out, 1 s. An idle
     * timeout far beyond the bound: only the deadline can close these. */
    *state = start((http_server_opts){.request_deadline_s = 1, .idle_timeout_s = 600});
    int port = port_of(state);
    metrics_reset();
    int slow_headers = raw_connect(port);
    raw_send(slow_headers, "GET /hello HTTP/1.1\r\nHost: t\r\n");
    int slow_body = raw_connect(port);
    raw_send(slow_body, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n12");
    assert_true(raw_closed_by_server(slow_headers));
    assert_true(raw_closed_by_server(slow_body));
    close(slow_headers);
    close(slow_body);
    assert_int_equal(count(&g.hello), 0);
    assert_int_equal(count(&g.echo), 0);
    /* the server goes on serving */
    ut_expect(port, "GET", "/hello", NULL, 200, NULL);
    /* The reaper counts after its shutdown() calls: read the count once it has stopped. */
    http_server_stop(*state, 0);
    *state = NULL;
    buf_t m;
    buf_init(&m, 1 << 20);
    assert_int_equal(metrics_render(&m), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&m), "crcr_http_requests_reaped_total 2\n"));
    buf_free(&m);
}

/* ---- the front door's limits (spec §8) ---- */

/* A metric's value in the registry's text ("name value\n"), or -1 when absent. */
static double metric(const char *name)
{
    buf_t m;
    buf_init(&m, 1 << 20);
    assert_int_equal(metrics_render(&m), CRCR_OK);
    char key[128];
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *at = strstr(buf_cstr(&m), key);
    double v = at ? strtod(at + strlen(key), NULL) : -1;
    buf_free(&m);
    return v;
}

/* A connection from `family` (AF_INET: 127.0.0.1, AF_INET6: ::1) to `port`. */
static int raw_connect_family(int family, int port)
{
    if (family == AF_INET)
        return raw_connect(port);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = WAIT_BOUND_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    inet_pton(AF_INET6, "::1", &a.sin6_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* A kept-alive connection that got one answer (so the server holds it), or -1 when the server
 * closed it without answering (refused at accept). */
static int held_connection(int family, int port)
{
    int fd = raw_connect_family(family, port);
    if (send(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 32, MSG_NOSIGNAL) != 32) {
        close(fd);
        return -1;
    }
    char out[4096];
    raw_read_answer(fd, out, sizeof(out));
    if (strncmp(out, "HTTP/1.1 200", 12) != 0) {
        assert_string_equal(out, ""); /* nothing at all: refused, never a partial answer */
        close(fd);
        return -1;
    }
    return fd;
}

/* Waits until a new connection of `family` is let in (the server gave a closed one's count
 * back); returns it. */
static int held_connection_eventually(int family, int port)
{
    for (int i = 0; i < WAIT_BOUND_S * 100; i++) {
        int fd = held_connection(family, port);
        if (fd >= 0)
            return fd;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("a peer under its share stayed refused for %d s", WAIT_BOUND_S);
    return -1;
}

#define PER_CLIENT 3

static void check_per_client_cap(int family, int port)
{
    int fds[PER_CLIENT];
    for (int i = 0; i < PER_CLIENT; i++) {
        fds[i] = held_connection(family, port);
        assert_true(fds[i] >= 0);
    }
    /* One more: refused at accept - closed without a byte of answer. */
    assert_int_equal(held_connection(family, port), -1);
    /* A closed connection gives its count back. */
    close(fds[0]);
    fds[0] = held_connection_eventually(family, port);
    assert_int_equal(held_connection(family, port), -1);
    for (int i = 0; i < PER_CLIENT; i++)
        close(fds[i]);
    /* Many connections opened and closed one after another leak no count. */
    for (int i = 0; i < 40; i++)
        close(held_connection_eventually(family, port));
    for (int i = 0; i < PER_CLIENT; i++)
        fds[i] = held_connection_eventually(family, port);
    assert_int_equal(held_connection(family, port), -1);
    for (int i = 0; i < PER_CLIENT; i++)
        close(fds[i]);
}

static void a_peer_past_its_share_is_refused_at_accept(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){.max_per_client = PER_CLIENT});
    metrics_reset();
    check_per_client_cap(AF_INET, port_of(state));
    assert_true(metric("crcr_http_client_refused_total") >= 3);
}

static void an_ipv6_peer_past_its_share_is_refused_at_accept(void **state)
{
    http_server_stop(*state, 0);
    *state = NULL;
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::1", &a.sin6_addr);
    bool have_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (probe >= 0)
        close(probe);
    if (!have_v6) {
        print_message("no IPv6 loopback here: IPv6 part not run\n");
        skip();
    }
    http_server_opts opts = {.host = "::1", .threads = 2, .max_per_client = PER_CLIENT};
    char err[256] = "";
    *state = http_server_start(&opts, ROUTES, sizeof(ROUTES) / sizeof(ROUTES[0]), err, sizeof(err));
    if (!*state)
        fail_msg("http_server_start on ::1: %s", err);
    check_per_client_cap(AF_INET6, port_of(state));
}

static void without_a_per_client_cap_a_peer_may_hold_more(void **state)
{
    int port = port_of(state); /* the fixture's server: max_per_client 0 */
    int fds[3 * PER_CLIENT];
    for (int i = 0; i < 3 * PER_CLIENT; i++) {
        fds[i] = held_connection(AF_INET, port);
        assert_true(fds[i] >= 0);
    }
    for (int i = 0; i < 3 * PER_CLIENT; i++)
        close(fds[i]);
}

/* True when the server has not closed `fd` within `ms` (recv times out). */
static bool still_open_after(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b[64];
    ssize_t got = recv(fd, b, sizeof(b), 0);
    bool open = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    struct timeval back = {.tv_sec = WAIT_BOUND_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &back, sizeof(back));
    return open;
}

static void a_slowloris_is_cut_at_the_header_timeout(void **state)
{
    http_server_stop(*state, 0);
    /* A request deadline and an idle timeout far beyond the bound: only the header timeout can
     * cut the slowloris within it. */
    *state = start((http_server_opts){
        .header_timeout_ms = 300, .request_deadline_s = 600, .idle_timeout_s = 600});
    int port = port_of(state);
    metrics_reset();
    /* A slowloris: one header byte at a time, never idle for long, never done. */
    int loris = raw_connect(port);
    raw_send(loris, "GET /hello HTTP/1.1\r\nHost: t\r\nX-Slow: ");
    bool cut = false;
    for (int i = 0; i < WAIT_BOUND_S * 20 && !cut; i++) {
        if (send(loris, "a", 1, MSG_NOSIGNAL) != 1) {
            cut = true;
            break;
        }
        cut = !still_open_after(loris, 50);
    }
    close(loris);
    assert_true(cut);
    assert_int_equal(count(&g.hello), 0);
    /* A request whose headers came in time but whose body trickles is not the header timeout's:
     * it is still open after several header timeouts (the request deadline will cut it). */
    int slow_body = raw_connect(port);
    raw_send(slow_body, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n12");
    assert_true(still_open_after(slow_body, 1500));
    raw_send(slow_body, "34567890");
    char out[4096];
    raw_read_answer(slow_body, out, sizeof(out));
    assert_true(strncmp(out, "HTTP/1.1 201", 12) == 0);
    /* The kept-alive connection's next header block has the same timeout: idle, it is cut. */
    assert_true(raw_closed_by_server(slow_body));
    close(slow_body);
    http_server_stop(*state, 0); /* the reaper counts after its shutdown() calls */
    *state = NULL;
    assert_int_equal(metric("crcr_http_header_timeouts_total"), 2);
    assert_int_equal(metric("crcr_http_requests_reaped_total"), 0);
}

/* Sends a POST head with Content-Length `len` to `path` on a new connection; returns it. */
static int post_head(int port, const char *path, size_t len, const char *extra)
{
    int fd = raw_connect(port);
    char head[512];
    snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n%s\r\n",
             path, len, extra ? extra : "");
    raw_send(fd, head);
    return fd;
}

static void send_bytes(int fd, char c, size_t n)
{
    char b[1024];
    memset(b, c, sizeof(b));
    while (n > 0) {
        size_t k = n < sizeof(b) ? n : sizeof(b);
        assert_int_equal(send(fd, b, k, MSG_NOSIGNAL), (ssize_t)k);
        n -= k;
    }
}

#define BUDGET 1000u

/* Waits until the budget in use reads `want` bytes (the server has read what was sent). */
static void wait_budget(double want)
{
    for (int i = 0; i < WAIT_BOUND_S * 100; i++) {
        if (metric("crcr_http_unauth_body_bytes") == want)
            return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the budget in use never read %.0f bytes (it reads %.0f)", want,
             metric("crcr_http_unauth_body_bytes"));
}

static void assert_budget_503(const char *out)
{
    assert_true(strncmp(out, "HTTP/1.1 503", 12) == 0);
    assert_non_null(strstr(out, "Retry-After: 2\r\n"));
    assert_non_null(strstr(out, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(out, "{\"detail\":\"Too many request bodies awaiting authentication, "
                                "please retry shortly"));
}

static void a_body_past_the_budget_is_503_with_retry_after_before_it_is_read(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){.unauth_body_budget = BUDGET});
    int port = port_of(state);
    metrics_reset();
    char out[4096];
    /* Bytes are charged as they arrive: 910 declared and 850 sent hold 850. */
    int holder = post_head(port, "/big", 910, NULL);
    send_bytes(holder, 'a', 850);
    wait_budget(850);
    /* A body declared larger than what is left (150) is refused at once, before a byte of it. */
    int refused = post_head(port, "/big", 200, NULL);
    raw_read_answer(refused, out, sizeof(out));
    close(refused);
    assert_budget_503(out);
    assert_int_equal(metric("crcr_http_unauth_budget_refused_total"), 1);
    /* One that fits is served. */
    int small = post_head(port, "/big", 100, NULL);
    send_bytes(small, 'b', 100);
    raw_read_answer(small, out, sizeof(out));
    close(small);
    assert_non_null(strstr(out, "{\"len\":100}"));
    /* A request gives its charge back once its answer is sent (on_completed), which may come
     * after the client has read it: each step below starts from a known budget. */
    wait_budget(850);
    /* A body that outgrows what is left midway: it is dropped, read to its end and answered 503;
     * the others go on. */
    int second = post_head(port, "/big", 140, NULL);
    send_bytes(second, 'c', 100);
    wait_budget(950);
    send_bytes(holder, 'a', 50); /* 1000 would fit... */
    wait_budget(1000);
    send_bytes(second, 'c', 40); /* ...but 1040 does not: the second's 100 are dropped */
    raw_read_answer(second, out, sizeof(out));
    close(second);
    assert_budget_503(out);
    wait_budget(900);
    send_bytes(holder, 'a', 10);
    raw_read_answer(holder, out, sizeof(out));
    close(holder);
    assert_non_null(strstr(out, "{\"len\":910}"));
    wait_budget(0);
    /* A chunked body is charged the same way. */
    int chunked = raw_connect(port);
    raw_send(chunked, "POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    char chunk[700];
    memset(chunk, 'd', sizeof(chunk));
    for (int i = 0; i < 3; i++) {
        raw_send(chunked, "2bc\r\n");
        assert_int_equal(send(chunked, chunk, sizeof(chunk), MSG_NOSIGNAL), (ssize_t)sizeof(chunk));
        raw_send(chunked, "\r\n");
    }
    raw_send(chunked, "0\r\n\r\n");
    raw_read_answer(chunked, out, sizeof(out));
    close(chunked);
    assert_budget_503(out);
    wait_budget(0);
    /* Declared bytes that never come hold nothing: a client announcing far more than the budget
     * in pieces that fit does not block others. */
    int quiet = post_head(port, "/big", 900, "Expect: 100-continue\r\n");
    /* Its 100 Continue says its declared length passed the budget's check: only then do the
     * other's bytes arrive (otherwise the server may read them first, and 900 declared would
     * rightly not fit beside 900 held). */
    raw_read_answer(quiet, out, sizeof(out));
    assert_true(strncmp(out, "HTTP/1.1 100", 12) == 0);
    int other = post_head(port, "/big", 900, NULL);
    send_bytes(other, 'e', 900);
    raw_read_answer(other, out, sizeof(out));
    close(other);
    assert_non_null(strstr(out, "{\"len\":900}"));
    close(quiet);
    /* The handler ran for the three bodies that fit, and only for them. */
    seen s = snapshot();
    if (s.big != 3 || s.big_len[0] != 100 || s.big_len[1] != 910 || s.big_len[2] != 900)
        fail_msg("/big answered %d bodies (lengths %zu %zu %zu %zu), not 100 910 900", s.big,
                 s.big_len[0], s.big_len[1], s.big_len[2], s.big_len[3]);
    assert_int_equal(metric("crcr_http_unauth_budget_refused_total"), 3);
    http_server_stop(*state, 0);
    *state = NULL;
    assert_int_equal(metric("crcr_http_unauth_body_bytes"), 0); /* every charge given back */
}

/* POSTs `body` to /signed[?block=1] signed with `secret` (NULL: a well-formed wrong signature),
 * in pieces of `piece` bytes; returns the connection (the answer is not read). */
static int post_signed(int port, const char *body, const char *secret, size_t piece, bool blk)
{
    char sig[SIG_HEADER_SIZE];
    sig_sign(secret ? secret : "not-the-secret", body, strlen(body), sig);
    char extra[128];
    snprintf(extra, sizeof(extra), "X-Hub-Signature-256: %s\r\n", sig);
    int fd = post_head(port, blk ? "/signed?block=1" : "/signed", strlen(body), extra);
    for (size_t off = 0; off < strlen(body); off += piece) {
        size_t k = strlen(body) - off < piece ? strlen(body) - off : piece;
        assert_int_equal(send(fd, body + off, k, MSG_NOSIGNAL), (ssize_t)k);
    }
    return fd;
}

static int answer_status(int fd)
{
    char out[4096];
    raw_read_answer(fd, out, sizeof(out));
    return strncmp(out, "HTTP/1.1 ", 9) == 0 ? (int)strtol(out + 9, NULL, 10) : 0;
}

static void the_streaming_body_check_decides_and_ends_the_charge(void **state)
{
    http_server_stop(*state, 0);
    *state = start((http_server_opts){.unauth_body_budget = BUDGET, .threads = 2});
    int port = port_of(state);
    metrics_reset();
    char body[901];
    for (size_t i = 0; i < 900; i++)
        body[i] = (char)('a' + i % 26);
    body[900] = '\0';
    /* The verdict reaches the handler, whatever the pieces the body came in; the previous
     * secret is accepted too. */
    size_t pieces[] = {1, 7, 900};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        int fd = post_signed(port, body, SIGNED_SECRET, pieces[i], false);
        assert_int_equal(answer_status(fd), 200);
        close(fd);
        assert_int_equal(snapshot().verdict, HTTP_BODY_AUTHENTIC);
        fd = post_signed(port, body, NULL, pieces[i], false);
        assert_int_equal(answer_status(fd), 401);
        close(fd);
        assert_int_equal(snapshot().verdict, HTTP_BODY_FORGED);
        wait_budget(0); /* a forged body's charge goes back once its answer is sent */
    }
    int fd = post_signed(port, body, SIGNED_PREVIOUS, 64, false);
    assert_int_equal(answer_status(fd), 200);
    close(fd);
    /* An authentic body leaves the budget at its last byte: while its handler still runs, 900
     * other bytes fit. */
    int calls = snapshot().signed_calls;
    int held = post_signed(port, body, SIGNED_SECRET, 900, true);
    assert_true(wait_for(&g.signed_calls, calls + 1));
    int other = post_head(port, "/big", 900, NULL);
    send_bytes(other, 'x', 900);
    assert_int_equal(answer_status(other), 200);
    close(other);
    release_handlers();
    assert_int_equal(answer_status(held), 200);
    close(held);
    wait_budget(0); /* /big's charge goes back once its answer is sent */
    /* A forged one keeps its charge until its request ends: 900 more do not fit meanwhile. */
    pthread_mutex_lock(&g_mu);
    g.release = false;
    calls = g.signed_calls;
    pthread_mutex_unlock(&g_mu);
    held = post_signed(port, body, NULL, 900, true);
    assert_true(wait_for(&g.signed_calls, calls + 1));
    other = post_head(port, "/big", 900, NULL);
    assert_int_equal(answer_status(other), 503);
    close(other);
    release_handlers();
    assert_int_equal(answer_status(held), 401);
    close(held);
}

static void a_host_that_is_not_a_numeric_address_is_refused(void **state)
{
    http_server_opts opts = {.host = "localhost", .port = 0};
    char err[256] = "";
    assert_null(http_server_start(&opts, ROUTES, 1, err, sizeof(err)));
    assert_string_equal(err, "CRCR_LISTEN: 'localhost' is not a numeric IP address");
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        T(unknown_paths_are_404_and_other_methods_405),
        T(a_handler_reads_path_query_and_headers),
        T(the_longest_matching_prefix_wins),
        T(a_body_up_to_the_cap_reaches_the_handler),
        T(content_length_over_the_cap_is_413_before_the_body),
        T(a_chunked_body_past_the_cap_is_413),
        T(a_header_block_past_32_kib_is_431),
        T(a_guard_answers_from_the_headers_and_the_handler_never_runs),
        T(offloaded_handlers_run_off_the_mhd_threads),
        T(a_waiting_handler_holds_up_no_other_connection),
        T(a_quick_step_answers_without_the_handler_pool),
        T(a_quick_steps_carry_reaches_the_handler_and_is_freed_once),
        T(an_inline_route_answers_while_every_handler_waits),
        T(a_full_offload_queue_answers_503_with_retry_after),
        T(a_repeat_within_cache_ms_is_answered_from_the_cache),
        T(another_query_is_another_entry),
        T(only_200_answers_of_cache_routes_are_kept),
        T(an_offloaded_route_is_answered_from_the_cache_without_the_pool),
        T(the_cache_is_off_without_cache_ms),
        T(a_request_that_never_finishes_is_cut_at_the_deadline),
        T(a_peer_past_its_share_is_refused_at_accept),
        T(an_ipv6_peer_past_its_share_is_refused_at_accept),
        T(without_a_per_client_cap_a_peer_may_hold_more),
        T(a_slowloris_is_cut_at_the_header_timeout),
        T(a_body_past_the_budget_is_503_with_retry_after_before_it_is_read),
        T(the_streaming_body_check_decides_and_ends_the_charge),
        cmocka_unit_test(a_host_that_is_not_a_numeric_address_is_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
