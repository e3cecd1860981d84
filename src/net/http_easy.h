/*
 * http_easy.h - one exchange on a libcurl easy handle, shared by the blocking http_exchange
 * (http_client.c) and the event loop (http_loop.c); internal to net/.
 *
 * http_easy_begin checks the request (http_client.h's rules), builds its header list and sets
 * every option on the handle; the caller then runs the transfer (curl_easy_perform, or a multi
 * handle) and hands libcurl's result to http_easy_end, which fills the answer and leaves the
 * handle without a pointer into `st` or the header list, ready for its next exchange. `st` must
 * stay at one address from begin to end (libcurl writes into it during the transfer).
 */
#ifndef CRCR_HTTP_EASY_H
#define CRCR_HTTP_EASY_H

#include <curl/curl.h>

#include "http_client.h"

typedef struct http_easy_state {
    struct curl_slist *hdrs; /* the request's header lines (wiped when freed) */
    char errbuf[CURL_ERROR_SIZE];
    /* the body and header sink of http_client.c, kept here so that it needs no allocation */
    _Alignas(void *) unsigned char sink[4 * sizeof(void *)];
} http_easy_state;

/* Resets *out (its body buffer emptied) and prepares `h` (reset first) for `rq`; `share` may be
 * NULL. CRCR_OK: run the transfer, then http_easy_end. Otherwise nothing is to be run (and
 * http_easy_end must not be called): CRCR_E_INVALID (malformed request, out->error says why),
 * CRCR_E_NOMEM, CRCR_E_NETWORK (libcurl refused an option; out->sent false). */
crcr_err http_easy_begin(CURL *h, CURLSH *share, const http_call *rq, http_answer *out,
                         http_easy_state *st);

/* Completes an exchange begun on `h` whose transfer ended with `rc`: the return values of
 * http_exchange (http_client.h). Frees the header list. */
crcr_err http_easy_end(CURL *h, CURLcode rc, http_easy_state *st);

#endif
