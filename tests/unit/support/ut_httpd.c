/* ut_httpd.c - see ut_httpd.h. */
#include "ut_httpd.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

struct ut_httpd {
    struct MHD_Daemon *d;
    int port;
    char base[64];
    ut_httpd_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    unsigned n_requests, n_conns;
};

/* One request being received: its body so far. Owned by the connection (freed in completed). */
typedef struct pending {
    buf_t body;
    size_t upload_len;
} pending;

static ssize_t fill_x(void *cls, uint64_t pos, char *out, size_t max)
{
    uint64_t total = *(const uint64_t *)cls;
    if (pos >= total)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = total - pos < max ? (size_t)(total - pos) : max;
    memset(out, 'x', n);
    return (ssize_t)n;
}

static void resp_free(ut_httpd_resp *r)
{
    buf_free(&r->body);
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i][0]);
        free(r->headers[i][1]);
    }
    r->n_headers = 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    ut_httpd *s = cls;
    pending *p = *con_cls;
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p)
            return MHD_NO;
        buf_init(&p->body, UT_HTTPD_BODY_MAX);
        *con_cls = p;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t room = UT_HTTPD_BODY_MAX - p->body.len;
        size_t keep = *upload_size < room ? *upload_size : room;
        if (keep)
            (void)buf_append(&p->body, upload, keep);
        p->upload_len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&s->mu);
    s->n_requests++;
    pthread_mutex_unlock(&s->mu);

    ut_httpd_req req = {.method = method,
                        .path = url,
                        .body = buf_cstr(&p->body),
                        .body_len = p->body.len,
                        .upload_len = p->upload_len,
                        .conn = c};
    ut_httpd_resp resp = {.status = 200};
    buf_init(&resp.body, UT_HTTPD_ANSWER_MAX);
    s->fn(s->ctx, &req, &resp);
    if (resp.drop) {
        resp_free(&resp);
        return MHD_NO;
    }
    struct MHD_Response *r;
    if (resp.stream_len > 0) {
        uint64_t *total = malloc(sizeof(*total));
        if (!total) {
            resp_free(&resp);
            return MHD_NO;
        }
        *total = resp.stream_len;
        r = MHD_create_response_from_callback(resp.stream_chunked ? MHD_SIZE_UNKNOWN : *total,
                                              64 * 1024, fill_x, total, free);
    } else {
        r = MHD_create_response_from_buffer(resp.body.len, resp.body.len ? resp.body.data : "",
                                            MHD_RESPMEM_MUST_COPY);
    }
    if (!r) {
        resp_free(&resp);
        return MHD_NO;
    }
    for (size_t i = 0; i < resp.n_headers; i++)
        MHD_add_response_header(r, resp.headers[i][0], resp.headers[i][1]);
    enum MHD_Result ret = MHD_queue_response(c, resp.status, r);
    MHD_destroy_response(r);
    resp_free(&resp);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    pending *p = *con_cls;
    if (p) {
        buf_free(&p->body);
        free(p);
    }
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)c;
    (void)socket_ctx;
    ut_httpd *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        pthread_mutex_lock(&s->mu);
        s->n_conns++;
        pthread_mutex_unlock(&s->mu);
    }
}

ut_httpd *ut_httpd_start(ut_httpd_fn fn, void *ctx)
{
    return ut_httpd_start_opts(fn, ctx, false);
}

ut_httpd *ut_httpd_start_opts(ut_httpd_fn fn, void *ctx, bool thread_per_connection)
{
    ut_httpd *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->fn = fn;
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (thread_per_connection)
        s->d = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
            NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
            on_connection, s, MHD_OPTION_CONNECTION_LIMIT, 512u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
            MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                MHD_OPTION_THREAD_POOL_SIZE, UT_HTTPD_THREADS,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!s->d)
        fail_msg("ut_httpd_start: libmicrohttpd could not listen on 127.0.0.1");
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    s->port = info->port;
    assert_true(s->port > 0);
    snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%d", s->port);
    return s;
}

void ut_httpd_stop(ut_httpd *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int ut_refused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

int ut_httpd_port(const ut_httpd *s)
{
    return s->port;
}

const char *ut_httpd_base(const ut_httpd *s)
{
    return s->base;
}

unsigned ut_httpd_requests(ut_httpd *s)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->n_requests;
    pthread_mutex_unlock(&s->mu);
    return n;
}

unsigned ut_httpd_connections(ut_httpd *s)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

const char *ut_httpd_header(const ut_httpd_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *ut_httpd_query(const ut_httpd_req *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

void ut_httpd_reply(ut_httpd_resp *resp, unsigned status, const char *body)
{
    resp->status = status;
    buf_reset(&resp->body);
    if (body && *body)
        assert_int_equal(buf_puts(&resp->body, body), CRCR_OK);
}

void ut_httpd_resp_header(ut_httpd_resp *resp, const char *name, const char *value)
{
    assert_true(resp->n_headers < UT_HTTPD_HEADERS_MAX);
    char *n = strdup(name), *v = strdup(value);
    assert_non_null(n);
    assert_non_null(v);
    resp->headers[resp->n_headers][0] = n;
    resp->headers[resp->n_headers][1] = v;
    resp->n_headers++;
}

/* ---- gates ---- */

void ut_gate_init(ut_gate *g)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

void ut_gate_wait(ut_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->waiting++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    g->waiting--;
    pthread_mutex_unlock(&g->mu);
}

void ut_gate_open(ut_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ut_gate_wait_waiting(ut_gate *g, unsigned n)
{
    /* The bound only ends a broken test; the event is what the test waits for. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    while (g->waiting < n && rc == 0)
        rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
    bool ok = g->waiting >= n;
    pthread_mutex_unlock(&g->mu);
    if (!ok)
        fail_msg("ut_gate: %u handler(s) never reached the gate", n);
}

void ut_gate_destroy(ut_gate *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}
