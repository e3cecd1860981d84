/*
 * http_server.c - routing, body caps, the total request deadline and per-route latency metrics
 * over libmicrohttpd; see http_server.h.
 *
 * Request life cycle in MHD's access handler:
 *   1st call   (no state yet): pick the route, answer 404/405 at once, answer 413 at once when
 *              Content-Length is over the route's cap (no body byte is read), answer from the
 *              page cache (HTTP_ROUTE_CACHE), or let the route's guard answer from the headers
 *              (a request without the credentials its route needs: its body is never read).
 *   Nth call   (body data): append to a capped buffer; past the cap answer 413 and stop reading.
 *   last call  (no more data): run the handler and queue its response; an HTTP_ROUTE_OFFLOAD
 *              route instead suspends the connection and hands the request to the offload pool,
 *              whose thread runs the handler, keeps the answer in the request state and resumes
 *              the connection; MHD then calls once more and the answer is queued.
 * MHD's completion callback records the latency and frees the state.
 *
 * Slow clients. MHD's idle timeout (CRCR_IDLE_TIMEOUT_S) only closes a connection that sends
 * nothing; a client trickling one byte a second keeps it open forever, and the access handler
 * never runs while the header block is incomplete. So every connection is tracked
 * (MHD_OPTION_NOTIFY_CONNECTION): its fd and the start of its current request window (the accept,
 * then the end of the previous request on a kept-alive connection). A reaper thread shuts down
 * (shutdown(2), SHUT_RDWR) every connection whose window is older than the request deadline;
 * MHD then sees the socket end and closes the connection itself. Together with the connection
 * limit this bounds what slow-header and slow-body clients can hold, whatever they send.
 *
 * The fd-reuse race: the reaper must never shut down a socket number that MHD has closed and the
 * kernel has handed to a new connection. The tracking list is guarded by one mutex that the
 * reaper holds while it calls shutdown() and that the CLOSED notification takes to unlink the
 * entry. libmicrohttpd 0.9.75 calls the CLOSED notification before it closes the socket (checked
 * in its source, MHD_cleanup_connections and the new-connection error path, and by a test program
 * that found the fd still open, same inode, in all 400 CLOSED notifications, also for sockets shut
 * down from outside). So while an entry is on the list its fd is still the same socket. As a
 * second guard the reaper compares the fd's device and inode with those seen at accept.
 *
 * No per-IP limit: behind a load balancer or proxy every client has the proxy's address, so a
 * per-IP cap would throttle GitHub itself. The total cap plus the deadline are the defence.
 */
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cpus.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "page_cache.h"
#include "workpool.h"

/* MHD's per-connection memory (request line, headers and the body chunk being read). It is
 * well above CRCR_MAX_HEADER_BYTES so that an oversized header block still reaches the handler,
 * which answers crcr's JSON 431; only header blocks past about half of this (~64 KiB) are refused
 * by libmicrohttpd itself, with its own short HTML 431 body. MHD maps the pool lazily but zeroes
 * all of it between two requests of a keep-alive connection, so each connection holds the whole
 * pool and each request pays a memset of it: 256 KiB cost 4.5 MiB more RSS at 32 connections and
 * ~3 % of a callback's CPU (bench/RESULTS.md). */
#define HTTP_CONNECTION_MEMORY (128u * 1024u)
/* Connections the kernel queues before accept. */
#define HTTP_LISTEN_BACKLOG 1024
/* How often the reaper looks for requests past their deadline. */
#define HTTP_REAPER_TICK_MS 250
/* At most one log line about reaped connections per this many ms (an attack must not flood the
 * log); the count is in crcr_http_requests_reaped_total either way. */
#define HTTP_REAPER_LOG_MS 10000
/* File descriptors kept free for everything but client connections (store, GitHub client pool,
 * ITC pipes, log) when the process limit is raised to fit max_connections. */
#define HTTP_FD_RESERVE 256u
/* Largest response a handler may build. */
#define HTTP_MAX_RESPONSE (64u * 1024u * 1024u)
/* Offload pool defaults (http_server_opts): threads, queued requests per thread, cache bytes. */
#define HTTP_OFFLOAD_THREADS 2u
#define HTTP_OFFLOAD_QUEUE_PER_THREAD 8u
#define HTTP_CACHE_BYTES (32u * 1024u * 1024u)
/* Nice value of the offload threads (0 is the process's). */
#define HTTP_OFFLOAD_NICE 10
/* Retry-After (seconds) of a 503 from a full offload queue. */
#define HTTP_OFFLOAD_RETRY_S "1"

/* One accepted connection, owned by the tracking list from the STARTED notification until the
 * CLOSED one. */
struct req_state;

typedef struct conn_track {
    int fd;
    dev_t dev;
    ino_t ino;
    _Atomic int64_t since_ms; /* start of the current request window */
    bool reaped;              /* shut down once already */
    struct conn_track *prev, *next;
} conn_track;

struct http_server {
    struct MHD_Daemon *d;
    const http_route *routes;
    size_t n_routes;
    int *route_metric; /* metrics handle per route */
    int unmatched_metric;
    unsigned deadline_s;
    int port;
    atomic_uint inflight;

    pthread_mutex_t conns_lock; /* guards the list and every entry's fd use */
    conn_track *conns;
    pthread_t reaper;
    bool reaper_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping; /* under stop_lock */

    workpool *pool;    /* HTTP_ROUTE_OFFLOAD handlers */
    page_cache *cache; /* NULL when HTTP_ROUTE_CACHE is off */
};

/* Per-request state, owned by MHD's connection slot until the completion callback frees it. */
typedef struct req_state {
    const http_route *route;
    buf_t body;
    int64_t started_ms;
    int64_t started_us; /* for the latency histogram */
    int status;         /* answer queued early (404/405/413/431), 0 otherwise */
    bool too_large;     /* the body passed the cap: discard the rest, then answer 413 */
    bool counted;
    /* Offloaded requests: the request as the pool thread sees it, and its answer. */
    http_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url; /* MHD's, valid while the connection lives */
    http_response resp;
    bool offloaded; /* handed to the pool (the connection is suspended) */
    bool answered;  /* resp holds the pool's answer; queue it at the next call */
    char cache_key[PAGE_CACHE_KEY_MAX + 1]; /* "" when the answer is not to be cached */
} req_state;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void)
{
    return now_us() / 1000;
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

typedef struct key_builder {
    buf_t *b;
} key_builder;

static enum MHD_Result add_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    buf_t *b = cls;
    /* Unit separators keep "a=b&c" and "a=b%26c" apart. */
    buf_putc(b, '\x1f');
    buf_puts(b, key);
    buf_putc(b, '\x1e');
    buf_puts(b, value ? value : "");
    return MHD_YES;
}

/* The page-cache key of a request (method, path, query in order) into st->cache_key; "" when
 * it does not fit. */
static void make_cache_key(req_state *st, struct MHD_Connection *conn, const char *method,
                           const char *url)
{
    buf_t b;
    buf_init(&b, PAGE_CACHE_KEY_MAX);
    buf_puts(&b, method);
    buf_putc(&b, ' ');
    buf_puts(&b, url);
    if (MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_query_arg, &b) >= 0 &&
        b.len < PAGE_CACHE_KEY_MAX && b.data)
        memcpy(st->cache_key, b.data, b.len + 1);
    else
        st->cache_key[0] = '\0';
    buf_free(&b);
}

/* Answers from the page cache; MHD_NO with *hit false when there is nothing live. */
static enum MHD_Result answer_cached(http_server *srv, req_state *st, struct MHD_Connection *conn,
                                     bool *hit)
{
    http_response resp = {0};
    page_entry meta;
    buf_init(&resp.body, HTTP_MAX_RESPONSE);
    *hit = page_cache_get(srv->cache, st->cache_key, now_ms(), &meta, &resp.body) == 1;
    if (!*hit) {
        buf_free(&resp.body);
        return MHD_NO;
    }
    resp.status = meta.status;
    resp.content_type = meta.content_type;
    for (size_t i = 0; i < meta.n_headers; i++)
        http_resp_header(&resp, meta.header_name[i], meta.header_value[i]);
    st->status = resp.status;
    st->cache_key[0] = '\0';
    enum MHD_Result ret = send_response(conn, &resp);
    buf_free(&resp.body);
    return ret;
}

/* Keeps a 200 answer of a cacheable route. */
static void cache_store(http_server *srv, const req_state *st, const http_response *resp)
{
    if (!srv->cache || !st->cache_key[0] || resp->status != 200)
        return;
    page_entry meta = {.status = resp->status,
                       .content_type = resp->content_type ? resp->content_type : "application/json",
                       .n_headers = 0};
    for (size_t i = 0; i < resp->n_headers && i < PAGE_CACHE_HEADERS; i++) {
        snprintf(meta.header_name[i], sizeof(meta.header_name[i]), "%s", resp->headers[i].name);
        snprintf(meta.header_value[i], sizeof(meta.header_value[i]), "%s", resp->headers[i].value);
        meta.n_headers++;
    }
    page_cache_put(srv->cache, st->cache_key, now_ms(), &meta, resp->body.data, resp->body.len);
}

/* Runs the route's handler for the request in `st` into st->resp (any thread). */
static void run_handler(req_state *st)
{
    http_request req = {
        .method = st->method,
        .path = st->url,
        .body = buf_cstr(&st->body),
        .body_len = st->body.len,
        .conn = st->conn,
        .started_ms = st->started_ms,
    };
    st->resp = (http_response){.status = 200, .content_type = "application/json"};
    buf_init(&st->resp.body, HTTP_MAX_RESPONSE);
    st->route->fn(st->route->ctx, &req, &st->resp);
    cache_store(st->srv, st, &st->resp);
}

/* Queues the answer the handler left in st->resp. */
static enum MHD_Result answer_from_state(req_state *st, struct MHD_Connection *conn)
{
    st->status = st->resp.status;
    enum MHD_Result ret = send_response(conn, &st->resp);
    buf_free(&st->resp.body);
    return ret;
}

/* Under the pool's lock, before a pool thread can see the request: its connection is suspended
 * (the thread that finishes it resumes it). */
static void suspend_offloaded(void *item)
{
    req_state *st = item;
    MHD_suspend_connection(st->conn);
    st->offloaded = true;
}

/* A pool thread: runs the handler (or answers 503 when the pool stops first), then resumes the
 * connection, whose next call queues the answer. */
static void run_offloaded(void *item, bool cancelled)
{
    req_state *st = item;
    if (cancelled) {
        st->resp = (http_response){.content_type = "application/json"};
        buf_init(&st->resp.body, 1024);
        http_resp_detail(&st->resp, 503, "Shutting down");
    } else {
        run_handler(st);
    }
    st->answered = true;
    MHD_resume_connection(st->conn);
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
        st->started_us = now_us();
        st->started_ms = st->started_us / 1000;
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
        st->srv = srv;
        st->conn = conn;
        st->method = method;
        st->url = url;
        if (srv->cache && (st->route->flags & HTTP_ROUTE_CACHE)) {
            make_cache_key(st, conn, method, url);
            bool hit = false;
            enum MHD_Result ret = st->cache_key[0] ? answer_cached(srv, st, conn, &hit) : MHD_NO;
            if (hit)
                return ret;
        }
        if (st->route->guard) {
            http_request req = {.method = method,
                                .path = url,
                                .body = "",
                                .body_len = 0,
                                .conn = conn,
                                .started_ms = st->started_ms};
            st->resp = (http_response){.status = 200, .content_type = "application/json"};
            buf_init(&st->resp.body, HTTP_MAX_RESPONSE);
            if (st->route->guard(st->route->ctx, &req, &st->resp))
                return answer_from_state(st, conn);
            buf_free(&st->resp.body);
        }
        return MHD_YES;
    }

    if (st->answered) /* back from the offload pool */
        return answer_from_state(st, conn);
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

    if (st->offloaded)
        return MHD_YES; /* a spurious call while the pool has it */
    if (st->route->flags & HTTP_ROUTE_OFFLOAD) {
        if (workpool_submit(srv->pool, st, suspend_offloaded))
            return MHD_YES;
        http_response resp = {.content_type = "application/json"};
        buf_init(&resp.body, 1024);
        http_resp_detail(&resp, 503, "Busy, please retry");
        http_resp_header(&resp, "Retry-After", HTTP_OFFLOAD_RETRY_S);
        metrics_http_offload_rejected();
        st->status = 503;
        enum MHD_Result ret = send_response(conn, &resp);
        buf_free(&resp.body);
        return ret;
    }
    run_handler(st);
    LOG_DEBUG("http.request", "method", method, "path", url, NULL);
    return answer_from_state(st, conn);
}

static conn_track *track_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    req_state *st = *con_cls;
    if (!st)
        return;
    int64_t now = now_us();
    if (st->status) {
        int h = st->route ? srv->route_metric[st->route - srv->routes] : srv->unmatched_metric;
        metrics_http_observe(h, st->status, (double)(now - st->started_us) / 1e6);
    }
    /* The next request on this connection gets a fresh window. */
    conn_track *ct = track_of(conn);
    if (ct)
        atomic_store(&ct->since_ms, now / 1000);
    if (st->counted)
        atomic_fetch_sub(&srv->inflight, 1);
    buf_free(&st->body);
    buf_free(&st->resp.body);
    free(st);
    *con_cls = NULL;
}

/* STARTED: allocates the connection's tracking entry and links it; CLOSED: unlinks and frees it.
 * MHD calls CLOSED before it closes the socket, so the fd stays valid while the entry is linked.
 */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = NULL;
        metrics_http_connections(1);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_track *ct = ci ? calloc(1, sizeof(*ct)) : NULL;
        struct stat sb;
        if (!ct || fstat(ci->connect_fd, &sb) != 0) {
            free(ct); /* untracked: only the idle timeout applies to it */
            return;
        }
        ct->fd = ci->connect_fd;
        ct->dev = sb.st_dev;
        ct->ino = sb.st_ino;
        atomic_init(&ct->since_ms, now_ms());
        pthread_mutex_lock(&srv->conns_lock);
        ct->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = ct;
        srv->conns = ct;
        pthread_mutex_unlock(&srv->conns_lock);
        *socket_context = ct;
        return;
    }
    metrics_http_connections(-1);
    conn_track *ct = *socket_context;
    if (!ct)
        return;
    pthread_mutex_lock(&srv->conns_lock);
    if (ct->prev)
        ct->prev->next = ct->next;
    else
        srv->conns = ct->next;
    if (ct->next)
        ct->next->prev = ct->prev;
    pthread_mutex_unlock(&srv->conns_lock);
    free(ct);
    *socket_context = NULL;
}

/* Shuts down every connection whose request window passed the deadline; returns how many. */
static unsigned reap(http_server *srv, int64_t now)
{
    unsigned n = 0;
    int64_t limit = (int64_t)srv->deadline_s * 1000;
    pthread_mutex_lock(&srv->conns_lock);
    for (conn_track *ct = srv->conns; ct; ct = ct->next) {
        if (ct->reaped || now - atomic_load(&ct->since_ms) <= limit)
            continue;
        struct stat sb;
        ct->reaped = true;
        if (fstat(ct->fd, &sb) != 0 || sb.st_dev != ct->dev || sb.st_ino != ct->ino)
            continue; /* not the socket we saw at accept: leave it alone */
        if (shutdown(ct->fd, SHUT_RDWR) == 0)
            n++;
    }
    pthread_mutex_unlock(&srv->conns_lock);
    return n;
}

static void *reaper_main(void *arg)
{
    http_server *srv = arg;
    uint64_t unlogged = 0;
    int64_t last_log = 0;
    pthread_mutex_lock(&srv->stop_lock);
    while (!srv->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)HTTP_REAPER_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv->stop_cond, &srv->stop_lock, &until);
        if (srv->stopping)
            break;
        pthread_mutex_unlock(&srv->stop_lock);
        int64_t now = now_ms();
        unsigned n = reap(srv, now);
        if (n) {
            metrics_http_reaped(n);
            unlogged += n;
        }
        if (unlogged && now - last_log >= HTTP_REAPER_LOG_MS) {
            char count[24], secs[24];
            snprintf(count, sizeof(count), "%llu", (unsigned long long)unlogged);
            snprintf(secs, sizeof(secs), "%u", srv->deadline_s);
            LOG_WARN("http.deadline_reaped", "connections", count, "deadline_s", secs, NULL);
            unlogged = 0;
            last_log = now;
        }
        pthread_mutex_lock(&srv->stop_lock);
    }
    pthread_mutex_unlock(&srv->stop_lock);
    return NULL;
}

/* Raises the soft open-file limit so that `want` connections fit next to the relay's own fds,
 * and returns how many connections the limit allows. */
static unsigned fit_fd_limit(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    rlim_t need = (rlim_t)want + HTTP_FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = old;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return want;
    unsigned fit = rl.rlim_cur > HTTP_FD_RESERVE * 2 ? (unsigned)(rl.rlim_cur - HTTP_FD_RESERVE)
                                                     : (unsigned)(rl.rlim_cur / 2);
    char have[24], asked[24], got[24];
    snprintf(have, sizeof(have), "%llu", (unsigned long long)rl.rlim_cur);
    snprintf(asked, sizeof(asked), "%u", want);
    snprintf(got, sizeof(got), "%u", fit);
    LOG_WARN("http.fd_limit", "nofile", have, "max_connections", asked, "using", got, NULL);
    return fit;
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    LOG_DEBUG("http.mhd", "msg", msg, NULL);
}

/*
 * Opens the listening socket itself, so that a failure says why (MHD only logs it, at debug
 * level) and so that its options are ours: SO_REUSEADDR, which lets a restarted relay bind while
 * connections of its predecessor are in TIME_WAIT, and never SO_REUSEPORT, with which a second
 * relay would bind the same port and take half of the connections. Returns the socket, or -1
 * with "cannot listen on HOST:PORT: <step>: <strerror>" in err.
 */
static int open_listener(const struct sockaddr_storage *ss, socklen_t len, const char *host,
                         int port, char *err, size_t errsz)
{
    const char *step = "socket";
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int on = 1;
    if (fd >= 0) {
        step = "setsockopt";
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == 0 &&
            (ss->ss_family != AF_INET6 ||
             setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) == 0)) {
            step = "bind";
            if (bind(fd, (const struct sockaddr *)ss, len) == 0) {
                step = "listen";
                if (listen(fd, HTTP_LISTEN_BACKLOG) == 0)
                    return fd;
            }
        }
    }
    int saved = errno;
    if (fd >= 0)
        close(fd);
    snprintf(err, errsz, "cannot listen on %s:%d: %s: %s", host, port, step, strerror(saved));
    return -1;
}

/* The port `fd` is bound to (the one the OS chose for port 0), or `fallback`. */
static int bound_port(int fd, int fallback)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return fallback;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return fallback;
}

/* Frees a server that never started MHD or whose daemon is stopped. */
static void server_free(http_server *srv)
{
    conn_track *ct = srv->conns;
    while (ct) {
        conn_track *next = ct->next;
        free(ct);
        ct = next;
    }
    workpool_free(srv->pool);
    page_cache_free(srv->cache);
    pthread_mutex_destroy(&srv->conns_lock);
    pthread_mutex_destroy(&srv->stop_lock);
    pthread_cond_destroy(&srv->stop_cond);
    free(srv->route_metric);
    free(srv);
}

static void reaper_stop(http_server *srv)
{
    if (!srv->reaper_running)
        return;
    pthread_mutex_lock(&srv->stop_lock);
    srv->stopping = true;
    pthread_cond_signal(&srv->stop_cond);
    pthread_mutex_unlock(&srv->stop_lock);
    pthread_join(srv->reaper, NULL);
    srv->reaper_running = false;
}

http_server *http_server_start(const http_server_opts *opts, const http_route *routes,
                               size_t n_routes, char *err, size_t errsz)
{
    http_server *srv = calloc(1, sizeof(*srv));
    int *metric = calloc(n_routes ? n_routes : 1, sizeof(*metric));
    if (!srv || !metric) {
        free(srv);
        free(metric);
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    srv->routes = routes;
    srv->n_routes = n_routes;
    srv->route_metric = metric;
    srv->deadline_s = opts->request_deadline_s ? opts->request_deadline_s : CRCR_REQUEST_DEADLINE_S;
    atomic_init(&srv->inflight, 0);
    pthread_mutex_init(&srv->conns_lock, NULL);
    pthread_mutex_init(&srv->stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < n_routes; i++)
        srv->route_metric[i] = metrics_http_route(routes[i].method, routes[i].path);
    srv->unmatched_metric = metrics_http_route("*", "unmatched");

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t ss_len = sizeof(struct sockaddr_in);
    /* poll(), not epoll: libmicrohttpd 0.9.75's MHD_quiesce_daemon races its own epoll threads
     * (each removes the listen socket from the epoll set; the loser's ENOENT is a panic, an
     * abort at shutdown, seen in the ASan suite), while with poll() quiesce only wakes them.
     * poll() costs O(connections of the thread) per wake-up: at most CRCR_MAX_CONNECTIONS
     * (2,048) spread over the thread pool. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    const char *host = opts->host ? opts->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)opts->port);
    } else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)opts->port);
        ss_len = sizeof(struct sockaddr_in6);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errsz, "CRCR_LISTEN: '%s' is not a numeric IP address", host);
        server_free(srv);
        return NULL;
    }

    unsigned threads = opts->threads ? opts->threads : cpus_available();
    unsigned max_conn =
        fit_fd_limit(opts->max_connections ? opts->max_connections : CRCR_MAX_CONNECTIONS);
    if (max_conn < threads)
        max_conn = threads;
    unsigned off_threads = opts->offload_threads ? opts->offload_threads : HTTP_OFFLOAD_THREADS;
    unsigned off_queue =
        opts->offload_queue ? opts->offload_queue : off_threads * HTTP_OFFLOAD_QUEUE_PER_THREAD;
    if (opts->cache_ms) {
        srv->cache = page_cache_new(opts->cache_ms,
                                    opts->cache_bytes ? opts->cache_bytes : HTTP_CACHE_BYTES);
        if (!srv->cache) {
            snprintf(err, errsz, "out of memory");
            server_free(srv);
            return NULL;
        }
    }
    int lfd = open_listener(&ss, ss_len, host, opts->port, err, errsz);
    if (lfd < 0) {
        server_free(srv);
        return NULL;
    }
    int port = bound_port(lfd, opts->port);
    srv->pool = workpool_start(off_threads, off_queue, HTTP_OFFLOAD_NICE, run_offloaded);
    if (!srv->pool) {
        close(lfd);
        snprintf(err, errsz, "cannot start the offload threads");
        server_free(srv);
        return NULL;
    }
    srv->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, srv,
                              MHD_OPTION_LISTEN_SOCKET, lfd, MHD_OPTION_THREAD_POOL_SIZE, threads,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
                              MHD_OPTION_CONNECTION_LIMIT, max_conn, MHD_OPTION_CONNECTION_TIMEOUT,
                              opts->idle_timeout_s ? opts->idle_timeout_s : CRCR_IDLE_TIMEOUT_S,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!srv->d) {
        /* lfd is not closed here: whether MHD closed it on its way out is not documented, and
         * closing a number another thread may have reused would be worse than a descriptor
         * kept until the exit that follows a failed start. */
        workpool_stop(srv->pool);
        snprintf(err, errsz, "cannot start the HTTP server on %s:%d (CRCR_LOG=debug shows why)",
                 host, port);
        server_free(srv);
        return NULL;
    }
    int rc = pthread_create(&srv->reaper, NULL, reaper_main, srv);
    if (rc != 0) {
        workpool_stop(srv->pool);
        MHD_stop_daemon(srv->d);
        snprintf(err, errsz, "cannot start the request reaper: %s", strerror(rc));
        server_free(srv);
        return NULL;
    }
    srv->reaper_running = true;
    srv->port = port;
    return srv;
}

int http_server_port(const http_server *srv)
{
    return srv->port;
}

bool http_server_cache_counts(const http_server *srv, uint64_t *hits, uint64_t *misses)
{
    if (!srv->cache)
        return false;
    page_cache_counts(srv->cache, hits, misses);
    return true;
}

unsigned http_server_inflight(const http_server *srv)
{
    return atomic_load(&((http_server *)srv)->inflight);
}

void http_server_stop(http_server *srv, int grace_ms)
{
    if (!srv)
        return;
    /* No new connections from here on. The listen socket stays open until MHD_stop_daemon has
     * joined MHD's threads (MHD_quiesce_daemon's contract: a thread may still use it); it only
     * stops listening now, so that connections are refused, not queued. */
    MHD_socket fd = MHD_quiesce_daemon(srv->d);
    if (fd != MHD_INVALID_SOCKET)
        shutdown(fd, SHUT_RDWR);
    int64_t until = now_ms() + grace_ms;
    while (atomic_load(&srv->inflight) > 0 && now_ms() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    reaper_stop(srv);
    workpool_stop(srv->pool); /* resumes every suspended connection: MHD must not stop with one */
    MHD_stop_daemon(srv->d);  /* CLOSED notifications unlink every remaining entry */
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    server_free(srv);
}
