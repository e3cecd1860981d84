/*
 * test_http_loop.c - the event loop of outbound exchanges (http_loop.c) against the unit tests'
 * HTTP server (support/ut_httpd.h, a thread per connection), whose handler here holds /hold
 * answers back until the test releases them and counts the requests it is serving at once.
 * So the budget is checked where GitHub would count it: at the server. Covered: every exchange
 * answered on one thread, the budget (never more budgeted requests at the server than the
 * capacity, a raised capacity starting waiting ones at once, an answer's slot refilled before its
 * callback runs, unbudgeted requests passing), the
 * pressure callback, draining (waiting exchanges not sent, those out answered), a malformed
 * request ending through its callback, stopping with requests out, and the sockets the loop
 * keeps in its epoll set while libcurl does not watch them: a closed connection's socket number
 * coming back as a new connection's, an idle connection the server closes (a server of its own,
 * raw_server, that closes a kept-alive connection when told).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "http_loop.h"
#include "ut_httpd.h"

/* ---------------------------------------------------------------- the server */

typedef struct server {
    ut_httpd *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned active, peak, served;
    bool hold; /* /hold requests wait until this is false */
} server;

static server g_srv;

static void handler(void *ctx, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    server *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->active++;
    if (s->active > s->peak)
        s->peak = s->active;
    pthread_cond_broadcast(&s->cv);
    while (strcmp(rq->path, "/hold") == 0 && s->hold)
        pthread_cond_wait(&s->cv, &s->mu);
    s->active--;
    s->served++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    ut_httpd_reply(resp, 200, "ok");
    if (strcmp(rq->path, "/close") == 0)
        ut_httpd_resp_header(resp, "Connection", "close");
}

static int server_start(void **state)
{
    (void)state;
    server *s = &g_srv;
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* A thread per connection: every held request holds one, and up to six are held at once. */
    s->srv = ut_httpd_start_opts(handler, s, true);
    return 0;
}

static int server_stop(void **state)
{
    (void)state;
    pthread_mutex_lock(&g_srv.mu);
    g_srv.hold = false;
    pthread_cond_broadcast(&g_srv.cv);
    pthread_mutex_unlock(&g_srv.mu);
    ut_httpd_stop(g_srv.srv);
    pthread_cond_destroy(&g_srv.cv);
    pthread_mutex_destroy(&g_srv.mu);
    return 0;
}

static void server_reset(bool hold)
{
    pthread_mutex_lock(&g_srv.mu);
    g_srv.hold = hold;
    g_srv.peak = g_srv.active;
    g_srv.served = 0;
    pthread_cond_broadcast(&g_srv.cv);
    pthread_mutex_unlock(&g_srv.mu);
}

static void server_release(void)
{
    server_reset(false);
}

/* Waits (at most 30 s: a failure, not a timing assumption) until the server serves `n` at once. */
static bool server_wait_active(unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&g_srv.mu);
    int rc = 0;
    while (g_srv.active < n && rc == 0)
        rc = pthread_cond_timedwait(&g_srv.cv, &g_srv.mu, &ts);
    bool ok = g_srv.active >= n;
    pthread_mutex_unlock(&g_srv.mu);
    return ok;
}

static unsigned server_peak(void)
{
    pthread_mutex_lock(&g_srv.mu);
    unsigned v = g_srv.peak;
    pthread_mutex_unlock(&g_srv.mu);
    return v;
}

/* ---------------------------------------------------------------- exchanges */

#define MAX_X 256

typedef struct xs {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned done;
    char url[MAX_X][128];
    http_call call[MAX_X];
    buf_t body[MAX_X];
    http_answer ans[MAX_X];
    crcr_err err[MAX_X];
    bool finished[MAX_X];
    int calls[MAX_X]; /* how often each callback ran */
    bool on_loop[MAX_X];
    uint64_t started_at_done[MAX_X]; /* the loop's started count when the callback ran */
    http_loop *loop;
} xs;

typedef struct slot {
    xs *x;
    size_t i;
} slot;

static slot g_slots[MAX_X];

static void on_done(void *ud, crcr_err err)
{
    slot *s = ud;
    xs *x = s->x;
    pthread_mutex_lock(&x->mu);
    x->err[s->i] = err;
    x->finished[s->i] = true;
    x->calls[s->i]++;
    x->on_loop[s->i] = http_loop_on_thread(x->loop);
    http_loop_stats st;
    http_loop_get_stats(x->loop, &st);
    x->started_at_done[s->i] = st.started;
    x->done++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

static xs *xs_new(http_loop *l)
{
    xs *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->loop = l;
    for (size_t i = 0; i < MAX_X; i++)
        buf_init(&x->body[i], 4096);
    return x;
}

static void xs_free(xs *x)
{
    for (size_t i = 0; i < MAX_X; i++)
        buf_free(&x->body[i]);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

/* Submits exchange i: a GET of `url`. */
static void submit_url(xs *x, size_t i, const char *url, bool budgeted)
{
    snprintf(x->url[i], sizeof(x->url[i]), "%s", url);
    x->call[i] = (http_call){.method = "GET",
                             .url = x->url[i],
                             .allow_http = true,
                             .connect_timeout_ms = 5000,
                             .timeout_ms = 30000};
    x->ans[i] = (http_answer){.body = &x->body[i]};
    g_slots[i] = (slot){x, i};
    assert_int_equal(
        http_loop_submit(x->loop, &x->call[i], &x->ans[i], budgeted, on_done, &g_slots[i]),
        CRCR_OK);
}

/* Submits exchange i: a GET of `path` on the test server. */
static void submit(xs *x, size_t i, const char *path, bool budgeted)
{
    char url[128];
    snprintf(url, sizeof(url), "%s%s", ut_httpd_base(g_srv.srv), path);
    submit_url(x, i, url, budgeted);
}

static bool wait_done(xs *x, unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&x->mu);
    int rc = 0;
    while (x->done < n && rc == 0)
        rc = pthread_cond_timedwait(&x->cv, &x->mu, &ts);
    bool ok = x->done >= n;
    pthread_mutex_unlock(&x->mu);
    return ok;
}

/* Waits until the loop reports `inflight` budgeted exchanges out and `waiting` waiting. */
static bool wait_stats(http_loop *l, long inflight, long waiting)
{
    for (int i = 0; i < 3000; i++) {
        http_loop_stats st;
        http_loop_get_stats(l, &st);
        if (st.inflight_budgeted == inflight && st.waiting == waiting)
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* Waits until the loop has dropped `n` idle connections from its set. */
static bool wait_dropped(http_loop *l, uint64_t n)
{
    for (int i = 0; i < 3000; i++) {
        http_loop_stats st;
        http_loop_get_stats(l, &st);
        if (st.dropped >= n)
            return true;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_many_exchanges_answered_on_the_loop_thread(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(64, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(false);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 200; i++)
        submit(x, i, "/ok", i % 2 == 0);
    assert_true(wait_done(x, 200));
    for (size_t i = 0; i < 200; i++) {
        assert_int_equal(x->err[i], CRCR_OK);
        assert_int_equal(x->ans[i].status, 200);
        assert_string_equal(buf_cstr(&x->body[i]), "ok");
        assert_int_equal(x->calls[i], 1);
        assert_true(x->on_loop[i]);
    }
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.started, 200);
    assert_int_equal(st.completed, 200);
    assert_true(st.peak_budgeted <= 64);
    http_loop_free(l);
    xs_free(x);
}

static void test_budget_is_never_exceeded_at_the_server(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(3, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 10; i++)
        submit(x, i, "/hold", true);
    assert_true(server_wait_active(3));
    assert_true(wait_stats(l, 3, 7));
    assert_int_equal(server_peak(), 3);
    /* A larger budget starts waiting exchanges at once. */
    http_loop_set_capacity(l, 6);
    assert_true(server_wait_active(6));
    assert_true(wait_stats(l, 6, 4));
    assert_int_equal(server_peak(), 6);
    /* A smaller one starts none until those out fall below it. */
    http_loop_set_capacity(l, 2);
    server_release();
    assert_true(wait_done(x, 10));
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(x->ans[i].status, 200);
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.peak_budgeted, 6);
    assert_int_equal(st.capacity, 2);
    http_loop_free(l);
    xs_free(x);
}

/* A loop with a budget of one: exchange 0 (/hold) is out and held at the server, and exchange 1
 * (budgeted, to `path`) waits for its slot. The caller frees x->loop and x. */
static xs *one_out_one_waiting(const char *path)
{
    char err[128];
    http_loop *l = http_loop_new(1, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    submit(x, 0, "/hold", true);
    submit(x, 1, path, true);
    assert_true(server_wait_active(1));
    assert_true(wait_stats(l, 1, 1));
    return x;
}

/* An answer's budget slot goes to the next waiting exchange before the answered one's callback
 * runs (the callback's work, e.g. recording an outcome, does not delay the next request). */
static void test_a_freed_slot_is_refilled_before_the_callback_runs(void **state)
{
    /* The first is answered only once the second waits for its slot. */
    xs *x = one_out_one_waiting("/ok");
    http_loop *l = x->loop;
    server_release();
    assert_true(wait_done(x, 2));
    assert_int_equal(x->ans[0].status, 200);
    assert_int_equal(x->ans[1].status, 200);
    assert_int_equal(x->started_at_done[0], 2);
    http_loop_free(l);
    xs_free(x);
}

static void test_unbudgeted_exchanges_pass_a_full_budget(void **state)
{
    xs *x = one_out_one_waiting("/hold");
    http_loop *l = x->loop;
    submit(x, 2, "/ok", false); /* not budgeted: answered while the budget is full */
    assert_true(wait_done(x, 1));
    assert_true(x->finished[2]);
    assert_int_equal(x->ans[2].status, 200);
    server_release();
    assert_true(wait_done(x, 3));
    http_loop_free(l);
    xs_free(x);
}

static atomic_int g_pressure;

static void on_pressure(void *ud)
{
    atomic_fetch_add(&g_pressure, 1);
}

/* Waits (at most 30 s) until the pressure callback has run more than `n` times in all. The loop
 * thread calls it after it has queued or finished exchanges, so after the stats show them. */
static bool wait_pressure_above(int n)
{
    for (int i = 0; i < 3000 && atomic_load(&g_pressure) <= n; i++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&g_pressure) > n;
}

static void test_pressure_is_told_when_exchanges_wait_and_when_idle(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(1, 64, err, sizeof(err));
    assert_non_null(l);
    atomic_store(&g_pressure, 0);
    http_loop_set_pressure(l, on_pressure, NULL);
    server_reset(true);
    xs *x = xs_new(l);
    submit(x, 0, "/hold", true);
    submit(x, 1, "/hold", true);
    assert_true(wait_stats(l, 1, 1));
    assert_true(wait_pressure_above(0)); /* one waits */
    int before = atomic_load(&g_pressure);
    server_release();
    assert_true(wait_done(x, 2));
    assert_true(wait_pressure_above(before)); /* idle again */
    http_loop_free(l);
    xs_free(x);
}

static void test_drain_ends_waiting_exchanges_unsent_and_answers_those_out(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 5; i++)
        submit(x, i, "/hold", true);
    assert_true(wait_stats(l, 2, 3));
    http_loop_drain(l);
    assert_true(wait_done(x, 3));
    submit(x, 5, "/ok", true);  /* after the drain: not sent either */
    submit(x, 6, "/ok", false); /* unbudgeted: still sent */
    assert_true(wait_done(x, 5));
    server_release();
    assert_true(wait_done(x, 7));
    unsigned sent = 0, unsent = 0;
    for (size_t i = 0; i < 7; i++) {
        if (x->err[i] == CRCR_E_STATE) {
            unsent++;
            assert_false(x->ans[i].sent);
            assert_int_equal(x->ans[i].status, 0);
        } else {
            assert_int_equal(x->err[i], CRCR_OK);
            assert_int_equal(x->ans[i].status, 200);
            sent++;
        }
    }
    assert_int_equal(sent, 3);
    assert_int_equal(unsent, 4);
    assert_int_equal(x->err[5], CRCR_E_STATE);
    assert_int_equal(x->err[6], CRCR_OK);
    http_loop_free(l);
    xs_free(x);
}

static void test_malformed_request_ends_through_its_callback(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    xs *x = xs_new(l);
    x->call[0] = (http_call){.method = "BREW", .url = "http://127.0.0.1:1/", .allow_http = true};
    x->ans[0] = (http_answer){.body = &x->body[0]};
    g_slots[0] = (slot){x, 0};
    assert_int_equal(http_loop_submit(l, &x->call[0], &x->ans[0], true, on_done, &g_slots[0]),
                     CRCR_OK);
    assert_true(wait_done(x, 1));
    assert_int_equal(x->err[0], CRCR_E_INVALID);
    assert_false(x->ans[0].sent);
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.inflight_budgeted, 0);
    http_loop_free(l);
    xs_free(x);
}

static void test_free_with_exchanges_out_ends_each_once(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(2, 64, err, sizeof(err));
    assert_non_null(l);
    server_reset(true);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 4; i++)
        submit(x, i, "/hold", true);
    assert_true(wait_stats(l, 2, 2));
    http_loop_free(l);
    assert_int_equal(x->done, 4);
    unsigned network = 0, unsent = 0;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(x->calls[i], 1);
        network += x->err[i] == CRCR_E_NETWORK;
        unsent += x->err[i] == CRCR_E_STATE;
    }
    assert_int_equal(network, 2);
    assert_int_equal(unsent, 2);
    server_release();
    xs_free(x);
}

/* Sockets libcurl closes give their number to the next one, and the loop keeps sockets in its
 * set while libcurl does not watch them: after a refused connection and after an answer with
 * Connection: close, each next request, on a new socket of that number, must be watched and
 * answered, not run into its timeout. (libcurl 7.88 watches a new connection for writing first,
 * so even a stale entry would meet a different registration and be corrected by the failed
 * EPOLL_CTL_MOD; on_close keeps the table true for any libcurl.) */
static void test_a_closed_sockets_number_is_watched_anew(void **state)
{
    char err[128];
    http_loop *l = http_loop_new(4, 4, err, sizeof(err));
    assert_non_null(l);
    server_reset(false);
    xs *x = xs_new(l);
    int dead = ut_refused_port();
    unsigned conns = ut_httpd_connections(g_srv.srv);
    for (size_t i = 0; i < 12; i++) {
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/", dead);
        if (i % 3 == 0)
            submit_url(x, i, url, true);
        else
            submit(x, i, i % 3 == 2 ? "/ok" : "/close", true);
        assert_true(wait_done(x, (unsigned)i + 1));
        if (i % 3 == 0) {
            assert_int_equal(x->err[i], CRCR_E_NETWORK);
            assert_int_equal(x->ans[i].status, 0);
        } else {
            assert_int_equal(x->err[i], CRCR_OK);
            assert_int_equal(x->ans[i].status, 200);
        }
    }
    /* a new connection for the first /close and for each /ok (each next /close reuses it) */
    assert_int_equal(ut_httpd_connections(g_srv.srv) - conns, 5);
    http_loop_free(l);
    xs_free(x);
}

/* ---------------------------------------------------------------- a server that closes */

/* One connection at a time: answers every request on it ("ok", kept alive) and closes it only
 * when told (raw_close), then takes the next. */
typedef struct raw_server {
    int lfd, port;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool close_now, stop;
    unsigned conns, answered, closed;
} raw_server;

static void *raw_main(void *arg)
{
    raw_server *r = arg;
    for (;;) {
        int c = accept(r->lfd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        pthread_mutex_lock(&r->mu);
        r->conns++;
        pthread_mutex_unlock(&r->mu);
        char req[4096];
        size_t have = 0;
        for (;;) {
            pthread_mutex_lock(&r->mu);
            bool close_now = r->close_now || r->stop;
            r->close_now = false;
            pthread_mutex_unlock(&r->mu);
            if (close_now)
                break;
            struct pollfd pf = {.fd = c, .events = POLLIN};
            if (poll(&pf, 1, 10) <= 0)
                continue; /* look at the flags again */
            ssize_t n = recv(c, req + have, sizeof(req) - 1 - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
            req[have] = '\0';
            if (!strstr(req, "\r\n\r\n"))
                continue; /* a GET: the head is the whole request */
            /* counted before the answer leaves: the test reads the count once it has it */
            pthread_mutex_lock(&r->mu);
            r->answered++;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            assert_int_equal(send(c, ok, sizeof(ok) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(ok) - 1);
            have = 0;
        }
        close(c);
        pthread_mutex_lock(&r->mu);
        r->closed++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

static void raw_start(raw_server *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(r->lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(r->lfd, 8), 0);
    socklen_t len = sizeof(sa);
    assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&sa, &len), 0);
    r->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&r->th, NULL, raw_main, r), 0);
}

/* Closes the connection being served and waits (30 s at most: a failure) until it is closed. */
static void raw_close(raw_server *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&r->mu);
    unsigned before = r->closed;
    r->close_now = true;
    int rc = 0;
    while (r->closed == before && rc == 0)
        rc = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(rc, 0);
}

static void raw_stop(raw_server *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_mutex_unlock(&r->mu);
    shutdown(r->lfd, SHUT_RDWR); /* ends the accept */
    pthread_join(r->th, NULL);
    close(r->lfd);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* The server closes a kept-alive connection while no request is on it: the loop, which kept the
 * socket in its set, sees the close on a socket libcurl does not watch and drops it; the next
 * request finds the connection dead and is answered on a new one. Three rounds. */
static void test_an_idle_connection_the_server_closes_gives_way_to_a_new_one(void **state)
{
    raw_server r;
    raw_start(&r);
    char err[128];
    http_loop *l = http_loop_new(4, 4, err, sizeof(err));
    assert_non_null(l);
    xs *x = xs_new(l);
    for (size_t i = 0; i < 6; i++) {
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/r%zu", r.port, i);
        submit_url(x, i, url, true);
        assert_true(wait_done(x, (unsigned)i + 1));
        assert_int_equal(x->err[i], CRCR_OK);
        assert_int_equal(x->ans[i].status, 200);
        assert_string_equal(buf_cstr(&x->body[i]), "ok");
        if (i % 2 == 1 && i < 5) { /* after every second request: the next one reconnects */
            raw_close(&r);
            assert_true(wait_dropped(l, (i + 1) / 2)); /* the loop saw the close */
        }
    }
    /* each close seen once (taken out of the set, not reported again and again) */
    http_loop_stats st;
    http_loop_get_stats(l, &st);
    assert_int_equal(st.dropped, 2);
    http_loop_free(l);
    pthread_mutex_lock(&r.mu);
    unsigned conns = r.conns, answered = r.answered;
    pthread_mutex_unlock(&r.mu);
    assert_int_equal(answered, 6);
    assert_int_equal(conns, 3); /* requests 0-1, 2-3 and 4-5 each shared one */
    raw_stop(&r);
    xs_free(x);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_exchanges_answered_on_the_loop_thread),
        cmocka_unit_test(test_budget_is_never_exceeded_at_the_server),
        cmocka_unit_test(test_a_freed_slot_is_refilled_before_the_callback_runs),
        cmocka_unit_test(test_unbudgeted_exchanges_pass_a_full_budget),
        cmocka_unit_test(test_pressure_is_told_when_exchanges_wait_and_when_idle),
        cmocka_unit_test(test_drain_ends_waiting_exchanges_unsent_and_answers_those_out),
        cmocka_unit_test(test_malformed_request_ends_through_its_callback),
        cmocka_unit_test(test_free_with_exchanges_out_ends_each_once),
        cmocka_unit_test(test_a_closed_sockets_number_is_watched_anew),
        cmocka_unit_test(test_an_idle_connection_the_server_closes_gives_way_to_a_new_one),
    };
    int rc = cmocka_run_group_tests(tests, server_start, server_stop);
    curl_global_cleanup();
    return rc;
}
