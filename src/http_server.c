/*
 * http_server.c - routing, body caps and shutdown over libmicrohttpd; see http_server.h.
 *
 * Request life cycle in MHD's access handler:
 *   1st call   (no state yet): pick the route, answer 404/405 at once, answer 413 at once when
 *              Content-Length is over the route's cap (no body byte is read), else allocate state.
 *   Nth call   (body data): append to a capped buffer; past the cap answer 413 and stop reading.
 *   last call  (no more data): run the handler and queue its response.
 * MHD's completion callback frees the state. A request that keeps sending after its deadline is
 * cut off by returning MHD_NO, which makes MHD close the connection.
 */
#include "http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "limits.h"
#include "log.h"

/* MHD's per-connection memory (request line, headers and the body chunk being read). It is
 * well above CRCR_MAX_HEADER_BYTES so that an oversized header block still reaches the handler,
 * which answers crcr's JSON 431; only header blocks past about half of this (~128 KiB) are refused
 * by libmicrohttpd itself, with its own short HTML 431 body. MHD maps the pool lazily. */
#define HTTP_CONNECTION_MEMORY (256u * 1024u)

struct http_server {
    struct MHD_Daemon *d;
    const http_route *routes;
    size_t n_routes;
    unsigned deadline_s;
    int port;
    atomic_uint inflight;
};

/* Per-request state, owned by MHD's connection slot until the completion callback frees it. */
typedef struct req_state {
    const http_route *route;
    buf_t body;
    int64_t started_ms;
    int status;     /* answer queued early (404/405/413/431), 0 otherwise */
    bool too_large; /* the body passed the cap: discard the rest, then answer 413 */
    bool counted;
} req_state;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *status_text(int status)
{
    switch (status) {
    case 404:
        return "Not found";
    case 405:
        return "Method not allowed";
    case 413:
        return "Request body too large";
    case 408:
        return "Request timeout";
    case 431:
        return "Request header fields too large";
    default:
        return "Error";
    }
}

void http_resp_json(http_response *resp, int status, const char *json)
{
    resp->status = status;
    resp->content_type = "application/json";
    buf_reset(&resp->body);
    buf_puts(&resp->body, json);
}

void http_resp_detail(http_response *resp, int status, const char *msg)
{
    resp->status = status;
    resp->content_type = "application/json";
    buf_reset(&resp->body);
    buf_puts(&resp->body, "{\"detail\":");
    jv_quote(&resp->body, msg, strlen(msg));
    buf_putc(&resp->body, '}');
}

void http_resp_header(http_response *resp, const char *name, const char *value)
{
    if (resp->n_headers >= HTTP_MAX_RESP_HEADERS)
        return;
    size_t nl = strlen(name), vl = strlen(value);
    if (nl >= sizeof(resp->headers[0].name) || vl >= sizeof(resp->headers[0].value))
        return;
    memcpy(resp->headers[resp->n_headers].name, name, nl + 1);
    memcpy(resp->headers[resp->n_headers].value, value, vl + 1);
    resp->n_headers++;
}

const char *http_req_header(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value((struct MHD_Connection *)req->conn, MHD_HEADER_KIND, name);
}

const char *http_req_query(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value((struct MHD_Connection *)req->conn, MHD_GET_ARGUMENT_KIND,
                                       name);
}

/* Queues `resp` on `conn`. The response's body memory is handed to MHD. */
static enum MHD_Result send_response(struct MHD_Connection *conn, http_response *resp)
{
    size_t len = 0;
    char *data = buf_detach(&resp->body, &len);
    if (!data)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    for (size_t i = 0; i < resp->n_headers; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_detail(struct MHD_Connection *conn, int status)
{
    http_response resp = {0};
    buf_init(&resp.body, 1024);
    http_resp_detail(&resp, status, status_text(status));
    enum MHD_Result ret = send_response(conn, &resp);
    buf_free(&resp.body);
    return ret;
}

/* Finds the route for method+path. *path_known tells whether any route has this path. */
static const http_route *find_route(const http_server *srv, const char *method, const char *path,
                                    bool *path_known)
{
    const http_route *best = NULL;
    size_t best_len = 0;
    *path_known = false;
    for (size_t i = 0; i < srv->n_routes; i++) {
        const http_route *r = &srv->routes[i];
        size_t plen = strlen(r->path);
        bool match = r->prefix ? strncmp(path, r->path, plen) == 0 : strcmp(path, r->path) == 0;
        if (!match)
            continue;
        *path_known = true;
        if (strcmp(method, r->method) != 0)
            continue;
        size_t score = r->prefix ? plen : (size_t)-1;
        if (!best || score > best_len) {
            best = r;
            best_len = score;
        }
    }
    return best;
}

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    size_t *total = cls;
    *total += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* Bytes of request headers as received (names, values and separators). */
static size_t header_bytes(struct MHD_Connection *conn)
{
    size_t total = 0;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header_size, &total);
    return total;
}

/* Content-Length as a number, or -1 when absent or malformed. */
static long long content_length(struct MHD_Connection *conn)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (!v || !*v)
        return -1;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (*end != '\0' || n < 0)
        return -1;
    return n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    http_server *srv = cls;
    req_state *st = *con_cls;

    if (!st) {
        st = calloc(1, sizeof(*st));
        if (!st)
            return MHD_NO;
        st->started_ms = now_ms();
        *con_cls = st;
        atomic_fetch_add(&srv->inflight, 1);
        st->counted = true;

        bool known = false;
        if (header_bytes(conn) + strlen(url) > CRCR_MAX_HEADER_BYTES) {
            st->status = 431;
            return send_detail(conn, 431);
        }
        if (strlen(url) > CRCR_MAX_PATH) {
            st->status = 404;
            return send_detail(conn, 404);
        }
        st->route = find_route(srv, method, url, &known);
        if (!st->route) {
            st->status = known ? 405 : 404;
            return send_detail(conn, st->status);
        }
        long long cl = content_length(conn);
        if (cl >= 0 && (unsigned long long)cl > st->route->max_body) {
            st->status = 413;
            return send_detail(conn, 413);
        }
        buf_init(&st->body, st->route->max_body);
        return MHD_YES;
    }

    if (st->status) {
        /* An early answer is queued; drop whatever body still arrives. */
        *upload_data_size = 0;
        return MHD_YES;
    }

    if (*upload_data_size > 0) {
        if (now_ms() - st->started_ms > (int64_t)srv->deadline_s * 1000) {
            LOG_WARN("http.deadline", "path", url, NULL);
            return MHD_NO;
        }
        /* MHD cannot queue an answer while a body is being read, so a body past the cap is
         * discarded (memory stays bounded, the deadline bounds time) and answered 413 at its end.
         */
        if (!st->too_large && buf_append(&st->body, upload_data, *upload_data_size) != CRCR_OK) {
            st->too_large = true;
            buf_free(&st->body);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_large) {
        st->status = 413;
        return send_detail(conn, 413);
    }

    http_request req = {
        .method = method,
        .path = url,
        .body = buf_cstr(&st->body),
        .body_len = st->body.len,
        .conn = conn,
        .started_ms = st->started_ms,
    };
    http_response resp = {.status = 200, .content_type = "application/json"};
    buf_init(&resp.body, 64u * 1024u * 1024u);
    st->route->fn(st->route->ctx, &req, &resp);
    st->status = resp.status;
    enum MHD_Result ret = send_response(conn, &resp);
    buf_free(&resp.body);
    LOG_DEBUG("http.request", "method", method, "path", url, NULL);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    req_state *st = *con_cls;
    if (!st)
        return;
    if (st->counted)
        atomic_fetch_sub(&srv->inflight, 1);
    buf_free(&st->body);
    free(st);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    LOG_DEBUG("http.mhd", "msg", msg, NULL);
}

http_server *http_server_start(const http_server_opts *opts, const http_route *routes,
                               size_t n_routes, char *err, size_t errsz)
{
    http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    srv->routes = routes;
    srv->n_routes = n_routes;
    srv->deadline_s = opts->request_deadline_s ? opts->request_deadline_s : CRCR_REQUEST_DEADLINE_S;
    atomic_init(&srv->inflight, 0);

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned int flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    const char *host = opts->host ? opts->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)opts->port);
    } else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)opts->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errsz, "CRCR_LISTEN: '%s' is not a numeric IP address", host);
        free(srv);
        return NULL;
    }

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = opts->threads ? opts->threads : (cpus > 0 ? (unsigned)cpus : 1);
    srv->d =
        MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, on_request, srv,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
                         threads, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                         (size_t)HTTP_CONNECTION_MEMORY, MHD_OPTION_CONNECTION_LIMIT,
                         opts->max_connections ? opts->max_connections : CRCR_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT,
                         opts->idle_timeout_s ? opts->idle_timeout_s : CRCR_IDLE_TIMEOUT_S,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_EXTERNAL_LOGGER,
                         mhd_log, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                         MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    if (!srv->d) {
        snprintf(err, errsz, "cannot listen on %s:%d", host, opts->port);
        free(srv);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opts->port;
    return srv;
}

int http_server_port(const http_server *srv)
{
    return srv->port;
}

unsigned http_server_inflight(const http_server *srv)
{
    return atomic_load(&((http_server *)srv)->inflight);
}

void http_server_stop(http_server *srv, int grace_ms)
{
    if (!srv)
        return;
    MHD_socket fd = MHD_quiesce_daemon(srv->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    int64_t until = now_ms() + grace_ms;
    while (atomic_load(&srv->inflight) > 0 && now_ms() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(srv->d);
    free(srv);
}
