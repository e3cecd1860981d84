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
 * Handlers run on MHD's pool threads (one per core, epoll) and must not block for long.
 */
#ifndef CRCR_HTTP_SERVER_H
#define CRCR_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

typedef struct http_server http_server;

typedef struct http_request {
    const char *method;
    const char *path; /* without the query string */
    const char *body; /* NUL-terminated copy of the body ("" when none) */
    size_t body_len;
    void *conn; /* opaque: for header and query lookups */
    int64_t started_ms;
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

typedef struct http_route {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* exact path, or a prefix ending in '/' when `prefix` is true */
    bool prefix;
    size_t max_body; /* bytes; 0 for routes that take no body */
    http_handler fn;
    void *ctx;
} http_route;

typedef struct http_server_opts {
    const char *host; /* numeric IPv4/IPv6 address to bind */
    int port;         /* 0: any free port (see http_server_port) */
    unsigned threads; /* 0: number of online CPUs */
    unsigned max_connections;
    unsigned idle_timeout_s;
    unsigned request_deadline_s;
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
