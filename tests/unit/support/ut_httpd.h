/*
 * ut_httpd.h - the one HTTP test server of the unit tests: libmicrohttpd on 127.0.0.1 (an
 * ephemeral port) inside the test process, answering every request through one handler the test
 * writes. The server reads the whole request body (up to UT_HTTPD_BODY_MAX) before calling the
 * handler, counts requests and connections, and answers what the handler put in the response: a
 * status, headers and a body, or a stream of 'x' bytes of a given length (with or without a
 * Content-Length) for the body-cap tests. Handlers run on the server's threads (a pool of
 * UT_HTTPD_THREADS), so they may block; a ut_gate lets a test hold an answer back until it says so
 * (a timeout that real time is the subject of, without a sleep in the server).
 *
 * Used by test_http_client, test_github, test_gh_contents, test_oidc, test_allowlist_source,
 * test_webhook_send and test_http_loop; compiled into every unit test binary (CMakeLists.txt).
 */
#ifndef CRCR_UT_HTTPD_H
#define CRCR_UT_HTTPD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Largest request body the server collects (bigger uploads are counted, not kept). */
#define UT_HTTPD_BODY_MAX (32u * 1024u * 1024u)
/* Largest answer body a handler can set. */
#define UT_HTTPD_ANSWER_MAX (8u * 1024u * 1024u)
/* Response headers a handler can add. */
#define UT_HTTPD_HEADERS_MAX 16
/* Threads answering (a handler that blocks holds one). */
#define UT_HTTPD_THREADS 4u

typedef struct ut_httpd_req {
    const char *method;
    const char *path;  /* without the query string */
    const char *body;  /* NUL-terminated copy of the body (at most UT_HTTPD_BODY_MAX bytes) */
    size_t body_len;   /* bytes kept */
    size_t upload_len; /* bytes received (more than body_len when the upload was larger) */
    void *conn;        /* the server's connection, for ut_httpd_header/ut_httpd_query */
} ut_httpd_req;

typedef struct ut_httpd_resp {
    unsigned status; /* 200 unless the handler sets it */
    buf_t body;
    /* When stream_len > 0, that many 'x' bytes are streamed instead of `body`: with a
     * Content-Length, or chunked when stream_chunked. */
    uint64_t stream_len;
    bool stream_chunked;
    size_t n_headers;
    char *headers[UT_HTTPD_HEADERS_MAX][2]; /* owned copies */
    bool drop;                              /* close the connection without an answer */
} ut_httpd_resp;

typedef void (*ut_httpd_fn)(void *ctx, const ut_httpd_req *req, ut_httpd_resp *resp);

typedef struct ut_httpd ut_httpd;

/* Starts the server; fails the test when it cannot. Stop with ut_httpd_stop(). */
ut_httpd *ut_httpd_start(ut_httpd_fn fn, void *ctx);
/* The same with a thread per connection when `thread_per_connection`: as many handlers can block
 * at once as there are connections (a test that holds more answers than UT_HTTPD_THREADS). */
ut_httpd *ut_httpd_start_opts(ut_httpd_fn fn, void *ctx, bool thread_per_connection);
/* Stops listening (the port then refuses connections), waits for the handlers and frees. */
void ut_httpd_stop(ut_httpd *s);
int ut_httpd_port(const ut_httpd *s);
/* A port on 127.0.0.1 nothing listens on (bound for its number, then closed): a connection to it
 * is refused. */
int ut_refused_port(void);
/* "http://127.0.0.1:<port>" (lives as long as the server). */
const char *ut_httpd_base(const ut_httpd *s);
/* Requests answered (or being answered) and connections accepted so far. */
unsigned ut_httpd_requests(ut_httpd *s);
unsigned ut_httpd_connections(ut_httpd *s);

/* A request header (case-insensitive name) or query parameter, or NULL. */
const char *ut_httpd_header(const ut_httpd_req *req, const char *name);
const char *ut_httpd_query(const ut_httpd_req *req, const char *name);

/* Sets the status and the body text. */
void ut_httpd_reply(ut_httpd_resp *resp, unsigned status, const char *body);
/* Adds a response header (copied). */
void ut_httpd_resp_header(ut_httpd_resp *resp, const char *name, const char *value);

/* A gate a handler waits at until the test opens it: the test decides when an answer leaves. */
typedef struct ut_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    unsigned waiting; /* handlers waiting now */
} ut_gate;

void ut_gate_init(ut_gate *g);
/* Waits until the gate is open (returns at once when it is). */
void ut_gate_wait(ut_gate *g);
/* Opens the gate for every waiter, now and later. */
void ut_gate_open(ut_gate *g);
/* Waits (up to a generous bound, then fails the test) until `n` handlers wait at the gate. */
void ut_gate_wait_waiting(ut_gate *g, unsigned n);
void ut_gate_destroy(ut_gate *g);

#endif
