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
 *   last call  (no more data): suspend the connection and hand the request to the handler pool
 *              (the offload pool for an HTTP_ROUTE_OFFLOAD route), whose thread runs the handler,
 *              keeps the answer in the request state and resumes the connection; MHD then calls
 *              once more and the answer is queued. An HTTP_ROUTE_INLINE route's handler runs
 *              here and its answer is queued at once.
 * MHD's completion callback records the latency and frees the state.
 *
 * Slow clients. MHD's idle timeout (CRCR_IDLE_TIMEOUT_S) only closes a connection that sends
 * nothing; a client trickling one byte a second keeps it open forever, and the access handler
 * never runs while the header block is incomplete. So every connection is tracked
 * (MHD_OPTION_NOTIFY_CONNECTION): its fd, the start of its current request window (the accept,
 * then the end of the previous request on a kept-alive connection) and whether its header block
 * is still coming (until the access handler's first call). A reaper thread shuts down
 * (shutdown(2), SHUT_RDWR) every connection whose header block is not in within the header
 * timeout (CRCR_HEADER_TIMEOUT_MS) and every one whose window is older than the request deadline
 * (the deadline judges the client: while the relay works on a request that has arrived whole the
 * connection is held out of reach, window_hold, and a connection whose bytes wait unread in its
 * socket waits on the relay, so it is spared up to twice its limit, reap); MHD then sees the socket
 * end and closes the connection itself. The reaper ticks at a quarter of the header timeout (at
 * most HTTP_REAPER_TICK_MS), so a connection is cut at most a tick late.
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
 * Per-client cap. MHD's own MHD_OPTION_PER_IP_CONNECTION_LIMIT counts exact addresses, which for
 * IPv6 lets one host (which usually has a /64) open any number of connections; so the count is
 * ours, per peer (IPv4 address or IPv6 /64), in a chained table keyed with SipHash (peers are
 * chosen by the network). MHD's accept policy callback (on_accept) refuses a connection whose peer
 * holds its share already and otherwise counts it; the connection's STARTED notification takes the
 * count over into its tracking entry and CLOSED gives it back. In libmicrohttpd 0.9.75 a worker
 * thread accepts, calls the policy and sends STARTED in one go on the same thread (daemon.c,
 * internal_add_connection -> new_connection_prepare_ -> new_connection_process_), but a connection
 * the policy let through can still fail before STARTED (its memory pool not allocated): the count
 * is then parked in a thread-local slot, which the thread's next accept gives back. So no count
 * leaks, and none is given back twice.
 *
 * The unauthenticated-body budget. A request's body is charged to the server's budget byte for
 * byte as it arrives (what the budget bounds is memory actually held: a client that declares 25 MiB
 * and sends nothing holds nothing), until the route's body check (http_body_auth) passes at the
 * last byte, else until its handler is done with the body. A request whose Content-Length does not
 * fit in what is left now is answered 503 with Retry-After before its body is read; a body that
 * outgrows what is left midway is dropped at once, read to its end without being kept (MHD cannot
 * answer in the middle of a body) and answered 503. The buffer of a declared body is allocated
 * once at its size (above glibc's mmap threshold, app.c, a mapping of its own whose pages become
 * resident as the bytes arrive); a chunked body's buffer grows by doubling.
 *
 * Behind a load balancer or proxy every client has the proxy's address: the proxy then applies the
 * per-client limits (deploy/nginx) and CRCR_MAX_CONNECTIONS_PER_CLIENT is set above its number of
 * upstream connections, or to 0.
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
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cpus.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "page_cache.h"
#include "siphash.h"
#include "thread_sched.h"
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
/* MHD's threads by default at the least (opts.io_threads 0: one per CPU available). */
#define HTTP_IO_THREADS_MIN 2u
/* Retry-After (seconds) of a 503 from a full offload queue. */
#define HTTP_OFFLOAD_RETRY_S "1"
/* Retry-After (seconds) of a 503 from a full unauthenticated-body budget: bodies in flight are
 * read within the request deadline, most within a second. */
#define HTTP_BUDGET_RETRY_S "2"
/* Buckets of the per-peer connection counts (chained; a peer holds a node while it has a
 * connection, so at most max_connections nodes). */
#define HTTP_PEER_BUCKETS 1024u
/* Shortest reaper tick (a header timeout of a few milliseconds in tests). */
#define HTTP_REAPER_TICK_MIN_MS 10
/* A connection past its header timeout or deadline whose bytes wait unread in its socket (the
 * relay is behind, not the client) is cut only past this many times that limit (reap). */
#define HTTP_BEHIND_FACTOR 2

/* A peer as the per-client cap counts it: b[0] is 4 or 6, then the IPv4 address or the first 8
 * bytes (the /64) of the IPv6 address; the rest is zero. */
typedef struct peer_key {
    unsigned char b[9];
} peer_key;

/* Connections of one peer; a node lives while n > 0. */
typedef struct peer_count {
    peer_key key;
    unsigned n;
    struct peer_count *next;
} peer_count;

/* One accepted connection, owned by the tracking list from the STARTED notification until the
 * CLOSED one. */
struct req_state;

typedef struct conn_track {
    int fd;
    dev_t dev;
    ino_t ino;
    _Atomic int64_t since_ms; /* start of the current request window */
    _Atomic bool in_headers;  /* the window's header block is still coming */
    _Atomic bool held;        /* the request is in and the relay is working on it: not reaped */
    bool reaped;              /* shut down once already */
    bool counted;             /* `peer` holds one of this connection's peer's count */
    peer_key peer;
    struct conn_track *prev, *next;
} conn_track;

/* At most one log line per HTTP_REAPER_LOG_MS about one kind of refusal: how many since the last.
 */
typedef struct log_gate {
    _Atomic int64_t last_ms;
    _Atomic uint64_t unlogged;
} log_gate;

struct http_server {
    struct MHD_Daemon *d;
    const http_route *routes;
    size_t n_routes;
    int *route_metric; /* metrics handle per route */
    int unmatched_metric;
    unsigned deadline_s;
    unsigned header_timeout_ms;
    int64_t tick_ms; /* the reaper's */
    int port;
    atomic_uint inflight;

    unsigned max_per_client;    /* 0: no per-peer cap */
    pthread_mutex_t peers_lock; /* guards peers[] */
    peer_count *peers[HTTP_PEER_BUCKETS];
    log_gate refused_log;

    size_t unauth_budget;
    _Atomic size_t unauth_used; /* bytes charged to the budget now */
    log_gate budget_log;

    pthread_mutex_t conns_lock; /* guards the list and every entry's fd use */
    conn_track *conns;
    pthread_t reaper;
    bool reaper_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping; /* under stop_lock */

    workpool *pool;    /* HTTP_ROUTE_OFFLOAD handlers */
    workpool *hpool;   /* every other route's handlers (see http_server.h, Threads) */
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
    bool over_budget;   /* a chunked body outgrew the budget: discard the rest, then answer 503 */
    bool counted;
    size_t charged;            /* bytes of the unauthenticated-body budget this request holds */
    void *auth;                /* the route's body check while it runs */
    http_body_verdict verdict; /* its outcome */
    /* Offloaded requests: the request as the pool thread sees it, and its answer. */
    http_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url; /* MHD's, valid while the connection lives */
    http_response resp;
    bool offloaded; /* handed to the pool (the connection is suspended) */
    bool answered;  /* resp holds the pool's answer; queue it at the next call */
    void *carry;    /* what the route's quick step left for the handler (freed at completion) */
    char cache_key[PAGE_CACHE_KEY_MAX + 1]; /* "" when the answer is not to be cached */
} req_state;

static int64_t now_us(void)
{
    return clock_real_mono_us(); /* deadlines judge real time (clock.h) */
}

static int64_t now_ms(void)
{
    return now_us() / 1000;
}

/* True, with *count set to the refusals since the last line, when a line may be logged now. */
static bool gate_pass(log_gate *g, int64_t now, uint64_t *count)
{
    atomic_fetch_add(&g->unlogged, 1);
    int64_t last = atomic_load(&g->last_ms);
    if (last && now - last < HTTP_REAPER_LOG_MS)
        return false;
    if (!atomic_compare_exchange_strong(&g->last_ms, &last, now))
        return false; /* another thread logs this round */
    *count = atomic_exchange(&g->unlogged, 0);
    return true;
}

/* ---- per-client connection counts ---- */

/* The peer of `addr` (an IPv4-mapped IPv6 address counts as its IPv4 address); false for other
 * families, which are not counted. */
static bool peer_key_of(const struct sockaddr *addr, socklen_t len, peer_key *k)
{
    memset(k, 0, sizeof(*k));
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        k->b[0] = 4;
        memcpy(k->b + 1, &a->sin_addr, 4);
        return true;
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
            k->b[0] = 4;
            memcpy(k->b + 1, a->sin6_addr.s6_addr + 12, 4);
        } else {
            k->b[0] = 6;
            memcpy(k->b + 1, a->sin6_addr.s6_addr, 8);
        }
        return true;
    }
    return false;
}

/* The peer as text for a log line: "a.b.c.d" or "x:x:x:x::/64". */
static void peer_text(const peer_key *k, char *out, size_t outsz)
{
    if (k->b[0] == 4) {
        if (!inet_ntop(AF_INET, k->b + 1, out, (socklen_t)outsz))
            snprintf(out, outsz, "?");
        return;
    }
    unsigned char a6[16] = {0};
    memcpy(a6, k->b + 1, 8);
    char t[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, a6, t, sizeof(t)))
        snprintf(t, sizeof(t), "?");
    snprintf(out, outsz, "%s/64", t);
}

static peer_count **peer_bucket(http_server *srv, const peer_key *k)
{
    uint64_t h = siphash(siphash_process_key(), 1, 3, k->b, sizeof(k->b));
    return &srv->peers[h % HTTP_PEER_BUCKETS];
}

/* Counts one more connection of `k` unless it holds max_per_client already (or the node cannot
 * be allocated); false when refused. */
static bool peer_take(http_server *srv, const peer_key *k)
{
    bool ok = false;
    pthread_mutex_lock(&srv->peers_lock);
    peer_count **b = peer_bucket(srv, k), *p = *b;
    while (p && memcmp(p->key.b, k->b, sizeof(k->b)) != 0)
        p = p->next;
    if (!p && (p = calloc(1, sizeof(*p))) != NULL) {
        p->key = *k;
        p->next = *b;
        *b = p;
    }
    if (p && p->n < srv->max_per_client) {
        p->n++;
        ok = true;
    }
    pthread_mutex_unlock(&srv->peers_lock);
    return ok;
}

/* Gives one connection of `k` back; the node goes when its count reaches 0. */
static void peer_release(http_server *srv, const peer_key *k)
{
    pthread_mutex_lock(&srv->peers_lock);
    peer_count **pp = peer_bucket(srv, k);
    while (*pp && memcmp((*pp)->key.b, k->b, sizeof(k->b)) != 0)
        pp = &(*pp)->next;
    peer_count *p = *pp;
    if (p && p->n > 0 && --p->n == 0) {
        *pp = p->next;
        free(p);
    }
    pthread_mutex_unlock(&srv->peers_lock);
}

/* The count on_accept took for the connection this thread accepted last, until that connection's
 * STARTED notification takes it over (see the header comment). */
static _Thread_local struct {
    http_server *srv; /* NULL: nothing parked */
    peer_key key;
} tl_parked;

/* Whether this thread (one of MHD's I/O threads) was marked SCHED_BATCH. */
static _Thread_local bool tl_batch;

/* MHD's accept policy: refuses a connection whose peer holds max_per_client connections. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *srv = cls;
    if (tl_parked.srv) { /* the previous connection this thread let in never started */
        peer_release(tl_parked.srv, &tl_parked.key);
        tl_parked.srv = NULL;
    }
    peer_key k;
    if (!srv->max_per_client || !addr || !peer_key_of(addr, addrlen, &k))
        return MHD_YES;
    if (peer_take(srv, &k)) {
        tl_parked.srv = srv;
        tl_parked.key = k;
        return MHD_YES;
    }
    metrics_http_client_refused();
    uint64_t n = 0;
    if (gate_pass(&srv->refused_log, now_ms(), &n)) {
        char peer[INET6_ADDRSTRLEN + 8], count[24], cap[24];
        peer_text(&k, peer, sizeof(peer));
        snprintf(count, sizeof(count), "%llu", (unsigned long long)n);
        snprintf(cap, sizeof(cap), "%u", srv->max_per_client);
        LOG_WARN("http.client_limit", "peer", peer, "refused", count, "max_per_client", cap, NULL);
    }
    return MHD_NO;
}

/* ---- the unauthenticated-body budget ---- */

/* Charges `n` more bytes to the budget; false (nothing charged) when they do not fit. */
static bool budget_take(http_server *srv, size_t n)
{
    size_t cur = atomic_load(&srv->unauth_used);
    do {
        if (n > srv->unauth_budget || cur > srv->unauth_budget - n)
            return false;
    } while (!atomic_compare_exchange_weak(&srv->unauth_used, &cur, cur + n));
    metrics_http_unauth_bytes((int64_t)n);
    return true;
}

/* Whether `n` more bytes would fit in the budget now (nothing charged). */
static bool budget_fits(http_server *srv, size_t n)
{
    size_t cur = atomic_load(&srv->unauth_used);
    return n <= srv->unauth_budget && cur <= srv->unauth_budget - n;
}

/* Gives back what `st` holds of the budget. */
static void budget_give(http_server *srv, req_state *st)
{
    if (!st->charged)
        return;
    atomic_fetch_sub(&srv->unauth_used, st->charged);
    metrics_http_unauth_bytes(-(int64_t)st->charged);
    st->charged = 0;
}

/* Ends the request's body check, if one runs; its verdict is kept in st->verdict. */
static void auth_finish(req_state *st)
{
    if (!st->auth)
        return;
    bool ok = st->route->body_auth->finish(st->auth);
    st->auth = NULL;
    st->verdict = ok ? HTTP_BODY_AUTHENTIC : HTTP_BODY_FORGED;
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

/* The request as a route's quick step and handler see it. */
static http_request request_of(req_state *st)
{
    return (http_request){
        .method = st->method,
        .path = st->url,
        .body = buf_cstr(&st->body),
        .body_len = st->body.len,
        .conn = st->conn,
        .started_ms = st->started_ms,
        .body_auth = st->verdict,
        .carry = st->carry,
    };
}

/* The body is done with: its memory and its charge go now, not once the answer is out. */
static void body_done(req_state *st)
{
    buf_free(&st->body);
    budget_give(st->srv, st);
}

/* Runs the route's handler for the request in `st` into st->resp (any thread). */
static void run_handler(req_state *st)
{
    http_request req = request_of(st);
    st->resp = (http_response){.status = 200, .content_type = "application/json"};
    buf_init(&st->resp.body, HTTP_MAX_RESPONSE);
    st->route->fn(st->route->ctx, &req, &st->resp);
    cache_store(st->srv, st, &st->resp);
    body_done(st);
}

/* Runs the route's quick step, if it has one; true when it answered (st->resp). */
static bool run_quick(req_state *st)
{
    if (!st->route->quick)
        return false;
    http_request req = request_of(st);
    st->resp = (http_response){.status = 200, .content_type = "application/json"};
    buf_init(&st->resp.body, HTTP_MAX_RESPONSE);
    if (st->route->quick(st->route->ctx, &req, &st->resp, &st->carry)) {
        body_done(st);
        return true;
    }
    buf_free(&st->resp.body);
    return false;
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

static conn_track *track_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request deadline judges the client's time, not the relay's: from the request's last byte
 * until its answer is queued (the handler, the offload pool's queue, a store commit waiting on a
 * busy disk) the connection is held out of the reaper's reach; when the answer is queued the
 * window starts again, so a client that is slow to read the answer is still cut. */
static void window_hold(struct MHD_Connection *conn, bool hold)
{
    conn_track *ct = track_of(conn);
    if (!ct)
        return;
    if (!hold)
        atomic_store(&ct->since_ms, now_ms());
    atomic_store(&ct->held, hold);
}

/* Answers 503 with Retry-After: the unauthenticated-body budget has no room for this body. */
static enum MHD_Result answer_over_budget(http_server *srv, req_state *st,
                                          struct MHD_Connection *conn, const char *url)
{
    http_response resp = {.content_type = "application/json"};
    buf_init(&resp.body, 1024);
    http_resp_detail(&resp, 503,
                     "Too many request bodies awaiting authentication, please retry shortly "
                     "(GitHub: redeliver the delivery)");
    http_resp_header(&resp, "Retry-After", HTTP_BUDGET_RETRY_S);
    metrics_http_budget_refused();
    uint64_t n = 0;
    if (gate_pass(&srv->budget_log, now_ms(), &n)) {
        char count[24], budget[24];
        snprintf(count, sizeof(count), "%llu", (unsigned long long)n);
        snprintf(budget, sizeof(budget), "%zu", srv->unauth_budget);
        LOG_WARN("http.unauth_budget_full", "path", url, "refused", count, "budget_bytes", budget,
                 NULL);
    }
    st->status = 503;
    enum MHD_Result ret = send_response(conn, &resp);
    buf_free(&resp.body);
    return ret;
}

/* Keeps a chunk of a body, charged to the budget as it arrives; past the route's cap or the budget
 * the body is dropped (its charge given back) and the request marked for its 413 or 503. */
static void keep_chunk(http_server *srv, req_state *st, const char *data, size_t n)
{
    if (st->too_large || st->over_budget)
        return;
    size_t need = st->body.len + n;
    if (need < st->body.len || need > st->route->max_body) {
        st->too_large = true;
    } else if (!budget_take(srv, n)) {
        st->over_budget = true;
    } else {
        st->charged += n;
        if (buf_append(&st->body, data, n) != CRCR_OK)
            st->over_budget = true; /* out of memory: the same answer */
    }
    if (st->too_large || st->over_budget) {
        buf_free(&st->body);
        budget_give(srv, st);
        auth_finish(st);
        return;
    }
    if (st->auth)
        st->route->body_auth->update(st->auth, data, n);
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
        conn_track *ct = track_of(conn);
        if (ct) /* the header block is in: from here the request deadline applies */
            atomic_store(&ct->in_headers, false);

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
        http_request req = {.method = method,
                            .path = url,
                            .body = "",
                            .body_len = 0,
                            .conn = conn,
                            .started_ms = st->started_ms};
        if (st->route->guard) {
            st->resp = (http_response){.status = 200, .content_type = "application/json"};
            buf_init(&st->resp.body, HTTP_MAX_RESPONSE);
            if (st->route->guard(st->route->ctx, &req, &st->resp))
                return answer_from_state(st, conn);
            buf_free(&st->resp.body);
        }
        /* A declared body that cannot fit in what is left of the budget now is refused before
         * a byte of it is read; the bytes themselves are charged as they arrive (keep_chunk). */
        if (cl > 0 && !budget_fits(srv, (size_t)cl))
            return answer_over_budget(srv, st, conn, url);
        /* The buffer of a declared body is allocated once, at its size: a large one is a mapping
         * of its own (app.c), resident only as far as bytes arrive, and given back whole. */
        if (cl > 0 && buf_ensure(&st->body, (size_t)cl) != CRCR_OK)
            return answer_over_budget(srv, st, conn, url);
        if (st->route->body_auth)
            st->auth = st->route->body_auth->start(st->route->ctx, &req);
        return MHD_YES;
    }

    if (st->answered) { /* back from the offload pool */
        window_hold(conn, false);
        return answer_from_state(st, conn);
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
        /* MHD cannot queue an answer while a body is being read, so a body past the cap (or the
         * budget) is discarded (memory stays bounded, the deadline bounds time) and answered at
         * its end. */
        keep_chunk(srv, st, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->too_large) {
        st->status = 413;
        return send_detail(conn, 413);
    }
    if (st->over_budget)
        return answer_over_budget(srv, st, conn, url);
    if (st->auth) {
        auth_finish(st);
        if (st->verdict == HTTP_BODY_AUTHENTIC)
            budget_give(srv, st); /* authenticated: no longer part of the budget */
    }

    if (st->offloaded)
        return MHD_YES; /* a spurious call while the pool has it */
    if (run_quick(st))
        return answer_from_state(st, conn);
    if (!(st->route->flags & HTTP_ROUTE_INLINE)) {
        window_hold(conn, true);
        workpool *pool = st->route->flags & HTTP_ROUTE_OFFLOAD ? srv->pool : srv->hpool;
        if (workpool_submit(pool, st, suspend_offloaded))
            return MHD_YES;
        window_hold(conn, false);
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
    window_hold(conn, true);
    run_handler(st);
    window_hold(conn, false);
    LOG_DEBUG("http.request", "method", method, "path", url, NULL);
    return answer_from_state(st, conn);
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
    if (st->auth) /* a request that ended before its body did */
        st->route->body_auth->finish(st->auth);
    st->auth = NULL;
    budget_give(srv, st);
    /* The next request on this connection gets a fresh window, header block first. */
    conn_track *ct = track_of(conn);
    if (ct) {
        atomic_store(&ct->since_ms, now / 1000);
        atomic_store(&ct->in_headers, true);
        atomic_store(&ct->held, false);
    }
    if (st->counted)
        atomic_fetch_sub(&srv->inflight, 1);
    if (st->carry) {
        if (st->route && st->route->carry_free)
            st->route->carry_free(st->carry);
        else
            free(st->carry);
    }
    buf_free(&st->body);
    buf_free(&st->resp.body);
    free(st);
    *con_cls = NULL;
}

/* STARTED: allocates the connection's tracking entry, takes over the peer's count that on_accept
 * parked and links the entry; CLOSED: unlinks and frees it and gives the count back. MHD calls
 * CLOSED before it closes the socket, so the fd stays valid while the entry is linked. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server *srv = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!tl_batch) { /* the first connection of this I/O thread (MHD starts them) */
            tl_batch = true;
            thread_sched_batch(); /* woken by a client, it does not preempt (thread_sched.c) */
        }
        *socket_context = NULL;
        metrics_http_connections(1);
        bool counted = tl_parked.srv == srv;
        peer_key peer = tl_parked.key;
        if (counted)
            tl_parked.srv = NULL;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_track *ct = ci ? calloc(1, sizeof(*ct)) : NULL;
        struct stat sb;
        if (!ct || fstat(ci->connect_fd, &sb) != 0) {
            free(ct); /* untracked: only the idle timeout applies to it, and it is not counted */
            if (counted)
                peer_release(srv, &peer);
            return;
        }
        ct->fd = ci->connect_fd;
        ct->dev = sb.st_dev;
        ct->ino = sb.st_ino;
        ct->counted = counted;
        ct->peer = peer;
        atomic_init(&ct->since_ms, now_ms());
        atomic_init(&ct->in_headers, true);
        atomic_init(&ct->held, false);
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
    if (ct->counted)
        peer_release(srv, &ct->peer);
    free(ct);
    *socket_context = NULL;
}

/* Whether the socket holds bytes the relay has not read yet (the kernel's receive queue). */
static bool unread_bytes(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* Shuts down every connection whose header block is late or whose request window passed the
 * deadline; adds how many of each to *headers and *deadline. A connection whose socket still holds
 * bytes the relay has not read is waiting on the relay (its HTTP thread busy with another
 * request's handler, or short of CPU), not on its client: it is spared until HTTP_BEHIND_FACTOR
 * times its limit (a client that trickles bytes gains that much only while the relay is behind). */
static void reap(http_server *srv, int64_t now, unsigned *headers, unsigned *deadline)
{
    int64_t limit = (int64_t)srv->deadline_s * 1000;
    int64_t header_limit = (int64_t)srv->header_timeout_ms;
    pthread_mutex_lock(&srv->conns_lock);
    for (conn_track *ct = srv->conns; ct; ct = ct->next) {
        if (ct->reaped || atomic_load(&ct->held))
            continue;
        int64_t age = now - atomic_load(&ct->since_ms);
        bool late_headers = atomic_load(&ct->in_headers) && age > header_limit;
        if (!late_headers && age <= limit)
            continue;
        struct stat sb;
        if (fstat(ct->fd, &sb) != 0 || sb.st_dev != ct->dev || sb.st_ino != ct->ino) {
            ct->reaped = true;
            continue; /* not the socket we saw at accept: leave it alone */
        }
        int64_t missed = late_headers && header_limit < limit ? header_limit : limit;
        if (age <= HTTP_BEHIND_FACTOR * missed && unread_bytes(ct->fd))
            continue;
        ct->reaped = true;
        if (shutdown(ct->fd, SHUT_RDWR) == 0)
            (*(late_headers ? headers : deadline))++;
    }
    pthread_mutex_unlock(&srv->conns_lock);
}

static void *reaper_main(void *arg)
{
    http_server *srv = arg;
    uint64_t unlogged = 0, unlogged_headers = 0;
    int64_t last_log = 0;
    pthread_mutex_lock(&srv->stop_lock);
    while (!srv->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)srv->tick_ms * 1000000L;
        while (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv->stop_cond, &srv->stop_lock, &until);
        if (srv->stopping)
            break;
        pthread_mutex_unlock(&srv->stop_lock);
        int64_t now = now_ms();
        unsigned headers = 0, deadline = 0;
        reap(srv, now, &headers, &deadline);
        if (deadline) {
            metrics_http_reaped(deadline);
            unlogged += deadline;
        }
        if (headers) {
            metrics_http_header_timeouts(headers);
            unlogged_headers += headers;
        }
        if ((unlogged || unlogged_headers) && now - last_log >= HTTP_REAPER_LOG_MS) {
            char count[24], secs[24], hcount[24], hms[24];
            snprintf(count, sizeof(count), "%llu", (unsigned long long)unlogged);
            snprintf(secs, sizeof(secs), "%u", srv->deadline_s);
            snprintf(hcount, sizeof(hcount), "%llu", (unsigned long long)unlogged_headers);
            snprintf(hms, sizeof(hms), "%u", srv->header_timeout_ms);
            LOG_WARN("http.deadline_reaped", "connections", count, "deadline_s", secs,
                     "header_timeouts", hcount, "header_timeout_ms", hms, NULL);
            unlogged = unlogged_headers = 0;
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
    for (size_t i = 0; i < HTTP_PEER_BUCKETS; i++) {
        for (peer_count *p = srv->peers[i], *next; p; p = next) {
            next = p->next;
            free(p);
        }
    }
    workpool_free(srv->pool);
    workpool_free(srv->hpool);
    page_cache_free(srv->cache);
    pthread_mutex_destroy(&srv->peers_lock);
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
    srv->header_timeout_ms =
        opts->header_timeout_ms ? opts->header_timeout_ms : CRCR_HEADER_TIMEOUT_MS_DEFAULT;
    srv->tick_ms = srv->header_timeout_ms / 4;
    if (srv->tick_ms > HTTP_REAPER_TICK_MS)
        srv->tick_ms = HTTP_REAPER_TICK_MS;
    if (srv->tick_ms < HTTP_REAPER_TICK_MIN_MS)
        srv->tick_ms = HTTP_REAPER_TICK_MIN_MS;
    srv->max_per_client = opts->max_per_client;
    srv->unauth_budget =
        opts->unauth_body_budget ? opts->unauth_body_budget : CRCR_UNAUTH_BODY_BUDGET_DEFAULT;
    atomic_init(&srv->unauth_used, 0);
    atomic_init(&srv->inflight, 0);
    pthread_mutex_init(&srv->peers_lock, NULL);
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
    unsigned io_threads = opts->io_threads ? opts->io_threads : cpus_available();
    if (!opts->io_threads && io_threads < HTTP_IO_THREADS_MIN)
        io_threads = HTTP_IO_THREADS_MIN;
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
    /* A connection has one request at a time in a handler's hands: a queue as long as the
     * connections are many is never full. */
    srv->hpool = srv->pool ? workpool_start(threads, max_conn, 0, run_offloaded) : NULL;
    if (!srv->hpool) {
        workpool_stop(srv->pool);
        close(lfd);
        snprintf(err, errsz, "cannot start the handler threads");
        server_free(srv);
        return NULL;
    }
    srv->d = MHD_start_daemon(
        flags, (uint16_t)port, on_accept, srv, on_request, srv, MHD_OPTION_LISTEN_SOCKET, lfd,
        MHD_OPTION_THREAD_POOL_SIZE, io_threads, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)HTTP_CONNECTION_MEMORY, MHD_OPTION_CONNECTION_LIMIT, max_conn,
        MHD_OPTION_CONNECTION_TIMEOUT,
        opts->idle_timeout_s ? opts->idle_timeout_s : CRCR_IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!srv->d) {
        /* lfd is not closed here: whether MHD closed it on its way out is not documented, and
         * closing a number another thread may have reused would be worse than a descriptor
         * kept until the exit that follows a failed start. */
        workpool_stop(srv->pool);
        workpool_stop(srv->hpool);
        snprintf(err, errsz, "cannot start the HTTP server on %s:%d (CRCR_LOG=debug shows why)",
                 host, port);
        server_free(srv);
        return NULL;
    }
    int rc = pthread_create(&srv->reaper, NULL, reaper_main, srv);
    if (rc != 0) {
        workpool_stop(srv->pool);
        workpool_stop(srv->hpool);
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
    /* Both resume every suspended connection: MHD must not stop with one. */
    workpool_stop(srv->hpool);
    workpool_stop(srv->pool);
    MHD_stop_daemon(srv->d); /* CLOSED notifications unlink every remaining entry */
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    server_free(srv);
}
