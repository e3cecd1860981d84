/*
 * http_server.h - the one HTTP front door, over libmicrohttpd.
 *
 * Every endpoint is a route: exact method + path (or a path prefix for page trees). The server
 * answers 404 {"detail":"Not found"} for an unknown path and 405 {"detail":"Method not allowed"}
 * for a known path with another method, like the upstream relay. Bodies are read into memory
 * only up to the route's cap: a Content-Length over the cap is answered 413 before any body byte
 * is read, and a chunked body is cut off with 413 when it passes the cap. Request headers are
 * limited by MHD's per-connection memory (431 beyond). Connections are capped, idle connections
 * time out, and a request that has not finished within CRCR_REQUEST_DEADLINE_S is dropped.
 *
 * No client holds the door (spec §8): a peer gets at most opts.max_per_client connections (an IPv4
 * address, or an IPv6 /64: one host's usual allocation), the next is refused at accept; a
 * connection whose header block is not in within opts.header_timeout_ms is cut; and the bodies of
 * requests not yet authenticated share one budget (opts.unauth_body_budget bytes, all connections
 * together), charged as the bytes arrive. A request whose Content-Length does not fit in what is
 * left is answered 503 with Retry-After before a body byte is read; a body that outgrows it midway
 * is read to its end without being kept, and answered 503. A body leaves the budget when its
 * route's body check (http_body_auth, e.g. the webhook HMAC computed as the chunks arrive) passes
 * at its last byte, else when its handler is done with it.
 *
 * Authentication before work: a route may have a guard, called with the request line and headers
 * only (no body byte read yet); it answers requests that lack the credentials the route needs, so
 * that they cost a header lookup and their body is never read.
 *
 * Threads. MHD's threads (opts.io_threads, poll()) read requests, run guards and body checks and
 * queue answers; they never wait on a handler. A request that has arrived whole is handed, its
 * connection suspended, to the handler pool (opts.threads, CRCR_HTTP_THREADS): one FIFO queue in
 * front of all its threads, as long as the connections are many, so it never refuses. A store
 * commit blocks a handler thread for a few milliseconds; the requests behind it wait in the one
 * queue for whichever thread frees first, not behind the connection that happened to share its
 * MHD thread. When handlers ran on MHD's threads, each thread served the connections it had
 * accepted one after the other, and the accepts spread unevenly (64 kept-alive connections on 32
 * threads: 7 threads with one, 12 with two, 5 with three, 5 with four): a request on a thread of
 * four waited for three other commits first, which made the durable ingest's p99 (bench, c64)
 * 30-62 ms where one connection per thread gave 24-25 ms. The hand-over costs ~0.02 ms of CPU
 * per request (a suspend, a pool thread's wake-up, a resume through MHD's inter-thread channel),
 * so a route may have a quick step (http_quick) that runs on the MHD thread first and answers
 * what never waits (the webhook's: a bad signature, a ping, an ignored event): ignored webhooks
 * at 64 connections went from ~16,000 to ~23,500 per second. Routes flagged HTTP_ROUTE_INLINE
 * (/healthz: nothing to wait for) run on the MHD thread. Routes flagged HTTP_ROUTE_OFFLOAD (the
 * HUD: reads that may take tens of milliseconds) run on a small separate pool instead
 * (opts.offload_threads at once, at a lower priority, a short queue behind them, 503 with
 * Retry-After past it), so a slow page never holds a thread that serves webhooks and callbacks.
 * Routes flagged HTTP_ROUTE_CACHE keep their 200 answers for opts.cache_ms per path and query
 * (page_cache.h) and answer repeats from there, on the MHD thread, without running the handler.
 */
#ifndef CRCR_HTTP_SERVER_H
#define CRCR_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

typedef struct http_server http_server;

/* What the route's body check (http_body_auth) found, in http_request.body_auth. */
typedef enum {
    HTTP_BODY_UNCHECKED = 0, /* no check ran (no body_auth, or it could not start) */
    HTTP_BODY_AUTHENTIC = 1,
    HTTP_BODY_FORGED = -1,
} http_body_verdict;

typedef struct http_request {
    const char *method;
    const char *path; /* without the query string */
    const char *body; /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    void *conn; /* opaque: for header and query lookups */
    int64_t started_ms;
    http_body_verdict body_auth;
    void *carry; /* what the route's quick step left for its handler; NULL: none */
} http_request;

#define HTTP_MAX_RESP_HEADERS 8

typedef struct http_response {
    int status;
    const char *content_type; /* static string; default application/json */
    buf_t body;               /* owned by the server; handlers append */
    struct {
        char name[64];
        char value[256];
    } headers[HTTP_MAX_RESP_HEADERS];
    size_t n_headers;
} http_response;

typedef void (*http_handler)(void *ctx, const http_request *req, http_response *resp);
/* A route's quick step: called on the MHD thread once the request has arrived whole, before the
 * handler pool, for what never waits (a parse, a check). Returns true when it answered in `resp`
 * (the handler never runs), false to go on; it may leave `*carry` for the handler (req->carry),
 * which the server frees with the route's carry_free once the request ends. */
typedef bool (*http_quick)(void *ctx, const http_request *req, http_response *resp, void **carry);
/* Called once per request before any body byte is read (req->body is "" and body_len 0). Returns
 * true when it answered in `resp` (the body is then never read), false to go on. */
typedef bool (*http_guard)(void *ctx, const http_request *req, http_response *resp);

/* A check of a body's authenticity run as the body arrives (the webhook's HMAC). `start` is called
 * with the headers once the guard has let the request through, before any body byte; NULL means it
 * could not start (the handler then checks by itself: HTTP_BODY_UNCHECKED). `update` takes every
 * chunk in order; `finish` gives the verdict and frees the state. The server calls finish exactly
 * once per started check, also for a request that never completes (the verdict is then unused). */
typedef struct http_body_auth {
    void *(*start)(void *ctx, const http_request *req);
    void (*update)(void *state, const void *data, size_t len);
    bool (*finish)(void *state);
} http_body_auth;

#define HTTP_ROUTE_OFFLOAD 1u /* the handler runs on the offload pool (see above) */
#define HTTP_ROUTE_CACHE 2u   /* 200 answers are kept for opts.cache_ms per path + query */
#define HTTP_ROUTE_INLINE 4u  /* the handler runs on MHD's thread: it never blocks (see above) */

typedef struct http_route {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* exact path, or a prefix ending in '/' when `prefix` is true */
    bool prefix;
    size_t max_body; /* bytes; 0 for routes that take no body */
    http_handler fn;
    void *ctx;
    http_guard guard;                /* NULL: none */
    unsigned flags;                  /* HTTP_ROUTE_* */
    const http_body_auth *body_auth; /* NULL: the body is authenticated by its handler */
    http_quick quick;                /* NULL: none */
    void (*carry_free)(void *carry); /* frees what `quick` left (NULL: free()) */
} http_route;

typedef struct http_server_opts {
    const char *host;    /* numeric IPv4/IPv6 address to bind */
    int port;            /* 0: any free port (see http_server_port) */
    unsigned threads;    /* handlers at once (the handler pool); 0: number of online CPUs */
    unsigned io_threads; /* MHD's threads (reads, answers); 0: one per CPU, at least 2 */
    unsigned max_connections;
    unsigned idle_timeout_s;
    unsigned request_deadline_s;
    unsigned offload_threads;   /* handlers of HTTP_ROUTE_OFFLOAD routes at once; 0: 2 */
    unsigned offload_queue;     /* such requests waiting for a thread; 0: 8 per thread */
    unsigned cache_ms;          /* life of a cached answer; 0: HTTP_ROUTE_CACHE is off */
    size_t cache_bytes;         /* all cached answers together; 0: 32 MiB */
    unsigned max_per_client;    /* connections of one peer (IPv4 address, IPv6 /64); 0: no cap */
    unsigned header_timeout_ms; /* the whole header block; 0: CRCR_HEADER_TIMEOUT_MS_DEFAULT */
    size_t unauth_body_budget;  /* bytes; 0: CRCR_UNAUTH_BODY_BUDGET_DEFAULT */
} http_server_opts;

/* Starts serving `routes` (the array must outlive the server). NULL with a reason in `err`. */
http_server *http_server_start(const http_server_opts *opts, const http_route *routes,
                               size_t n_routes, char *err, size_t errsz);

/* The bound port. */
int http_server_port(const http_server *srv);

/* Stops accepting, waits up to `grace_ms` for in-flight requests to finish, then stops and frees.
 * NULL is fine. */
void http_server_stop(http_server *srv, int grace_ms);

/* Requests in flight now (for shutdown and tests). */
unsigned http_server_inflight(const http_server *srv);

/* Page-cache hits and misses so far; false when HTTP_ROUTE_CACHE is off (opts.cache_ms 0). */
bool http_server_cache_counts(const http_server *srv, uint64_t *hits, uint64_t *misses);

/* A request header (case-insensitive), or NULL. */
const char *http_req_header(const http_request *req, const char *name);
/* A query argument (decoded), or NULL. */
const char *http_req_query(const http_request *req, const char *name);

/* Sets status and a JSON body (the text is copied). */
void http_resp_json(http_response *resp, int status, const char *json);
/* Sets status and {"detail": <msg>} with proper JSON escaping. */
void http_resp_detail(http_response *resp, int status, const char *msg);
/* Adds a response header (silently ignored past HTTP_MAX_RESP_HEADERS or when too long). */
void http_resp_header(http_response *resp, const char *name, const char *value);

#endif
