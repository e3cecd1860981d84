/*
 * http_loop.h - outbound HTTP without a thread per request: one thread drives every exchange
 * submitted to it on a libcurl multi handle.
 *
 * An exchange is the http_exchange of http_client.h (same checks, caps, timeouts, header hygiene
 * and answer), but http_loop_submit returns at once and `done` is called on the loop's thread
 * when the exchange is over. Requests to one host share its connections: HTTP/2 streams on one
 * connection where TLS negotiates HTTP/2 (libcurl's CURLPIPE_MULTIPLEX; a request waits for a
 * connection being set up instead of opening another), kept-alive HTTP/1.1 connections
 * otherwise. DNS and TLS sessions are cached for the loop's handles.
 *
 * The budget. An exchange submitted as `budgeted` (the GitHub API's) starts only while fewer than
 * the loop's capacity of budgeted exchanges are in flight; the others wait, in submission order,
 * in the loop's queue (no thread waits). In flight means from the moment libcurl is given the
 * request until its answer (or failure) is complete, so the number of requests GitHub is serving
 * for this loop is never above the capacity. The capacity can be changed at any time
 * (http_loop_set_capacity): a larger one starts waiting exchanges at once; a smaller one starts
 * none until the exchanges in flight fall below it. Exchanges that are not budgeted start at
 * once. A budgeted exchange whose call names a start_by_ms (http_client.h) and is still waiting
 * then ends with CRCR_E_STATE, unsent (its caller's claim on the work may have run out meanwhile).
 * `pressure` (optional) is called on the loop's thread when more exchanges wait for the budget
 * than at its previous turn and when the loop has nothing left in flight or waiting, so that
 * whoever sets the capacity (relay/gh_budget.c) hears of growing demand without polling.
 *
 * Callbacks run on the loop's thread and must not block: no store access, no blocking HTTP. They
 * may submit further exchanges. The strings and buffers of a submitted call and its answer are
 * borrowed until `done` has run.
 *
 * Stopping: http_loop_drain makes every budgeted exchange that has not started (now or later)
 * finish with CRCR_E_STATE ("not sent"), while those in flight run to their answer or timeout;
 * http_loop_free ends whatever is still in flight with CRCR_E_NETWORK and joins the thread.
 * curl_global_init must have run.
 */
#ifndef CRCR_HTTP_LOOP_H
#define CRCR_HTTP_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "http_client.h"

typedef struct http_loop http_loop;

/* `err` is the return value http_exchange would give (CRCR_E_STATE: not sent, see above and
 * below). */
typedef void (*http_loop_done_fn)(void *ud, crcr_err err);
typedef void (*http_loop_pressure_fn)(void *ud);

typedef struct http_loop_stats {
    long capacity;          /* budgeted exchanges allowed in flight */
    long inflight_budgeted; /* budgeted exchanges in flight now */
    long waiting;           /* budgeted exchanges waiting for the budget */
    long inflight;          /* every exchange in flight now */
    long peak_budgeted;     /* most budgeted exchanges in flight at once since the start */
    uint64_t started, completed;
    uint64_t dropped; /* idle connections whose socket became ready (closed by the server) */
} http_loop_stats;

/* Starts the loop's thread with a capacity of `capacity` budgeted exchanges (0: none starts
 * until a capacity is set) and at
 * most `idle_conns` idle connections kept for reuse. NULL (reason in err) when the thread or
 * libcurl's handles cannot be had. Owned by the caller: http_loop_free. */
http_loop *http_loop_new(long capacity, long idle_conns, char *err, size_t errsz);

/* Submits one exchange. CRCR_OK: `done(ud, err)` will be called exactly once, on the loop's
 * thread (a malformed request too: CRCR_E_INVALID, *out says why, as http_exchange). Otherwise
 * (no memory, a NULL argument) `done` is never called. */
crcr_err http_loop_submit(http_loop *l, const http_call *rq, http_answer *out, bool budgeted,
                          http_loop_done_fn done, void *ud);

/* Sets the capacity (0: no budgeted exchange starts). Safe from any thread. */
void http_loop_set_capacity(http_loop *l, long capacity);
/* Sets the demand callback (NULL: none); it runs with the loop's lock held, so it must only
 * signal. Once this returns, the previous callback is not running and will not run again. */
void http_loop_set_pressure(http_loop *l, http_loop_pressure_fn fn, void *ud);
/* Copies the counters. Safe from any thread. */
void http_loop_get_stats(http_loop *l, http_loop_stats *out);
/* True when called on the loop's own thread. */
bool http_loop_on_thread(http_loop *l);

/* From now on budgeted exchanges that have not started end with CRCR_E_STATE. */
void http_loop_drain(http_loop *l);
/* Ends what is in flight (CRCR_E_NETWORK), joins the thread, frees. NULL is fine. Never from
 * the loop's own thread. */
void http_loop_free(http_loop *l);

#endif
