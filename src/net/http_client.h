/*
 * http_client.h - the one libcurl wrapper every outbound caller uses (GitHub REST, the HUD API,
 * OIDC key sets, `crcr report`, `crcr webhook send`, `crcr deliveries --url`).
 *
 * One exchange = one http_call in, one http_answer out:
 *   - the answer body goes to a buffer the caller owns, capped at that buffer's `max`: past it
 *     the exchange fails with CRCR_E_TOO_LARGE (memory stays bounded), or, with
 *     `truncate`, the first `max` bytes are kept and the rest is read and dropped;
 *   - connect and whole-exchange timeouts on every request;
 *   - header hygiene: only https (plus http when the caller allows it, for loopback peers), never
 *     a redirect, no `Expect: 100-continue`, no default form Content-Type, a User-Agent always;
 *     header lines with CR/LF are refused; the Authorization line is built here from scheme and
 *     credential and every copy of it is wiped; nothing of the request is logged;
 *   - the response headers callers use are kept (Retry-After as seconds, x-ratelimit-remaining
 *     and -reset, ETag, the rel="next" URL of a Link header); of interim 1xx answers nothing is
 *     kept;
 *   - one Retry-After parser (delta-seconds or HTTP-date).
 *
 * Connections. With a pool (http_pool_new), an exchange borrows an idle easy handle (LIFO, so a
 * warm kept-alive connection serves the next exchange from whatever thread) and gives it back; a
 * CURLSH shares DNS and TLS sessions between the pool's handles. Connections themselves are not
 * shared between handles: libcurl 7.88 does not support sharing live connections across threads
 * (CURL_LOCK_DATA_CONNECT; curl KNOWN_BUGS, issue #4915). Without a pool (NULL) the exchange
 * uses a fresh handle and closes it, which suits the one-shot command-line callers. The relay's
 * own requests (GitHub, the HUD) go through http_loop.h instead: the same exchange, driven with
 * many others by one thread, within a budget.
 *
 * CA settings are libcurl's defaults (the system trust store). curl_global_init must have run.
 */
#ifndef CRCR_HTTP_CLIENT_H
#define CRCR_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

#ifndef CRCR_VERSION
#define CRCR_VERSION "dev"
#endif

/* User-Agent when the request names none. */
#define HTTP_USER_AGENT "crcr/" CRCR_VERSION
/* Header lines a request may carry (besides Authorization), and the longest one. */
#define HTTP_HEADERS_MAX 24u
#define HTTP_HEADER_LINE_MAX 1024u
/* Longest Authorization value (scheme, space, credential): an App JWT or an OIDC token fits. */
#define HTTP_AUTH_MAX (20u * 1024u)
/* Longest response header value looked at (Retry-After, rate limits, ETag). */
#define HTTP_HEADER_VALUE_MAX 256u
/* Size of http_answer.etag and http_answer.error. */
#define HTTP_ETAG_MAX 128u
#define HTTP_ERROR_MAX 256u
/* Longest Link header looked at, and longest rel="next" URL kept from it (cursor pagination). */
#define HTTP_LINK_HEADER_MAX 8192u
#define HTTP_LINK_URL_MAX 2048u

typedef struct http_pool http_pool;

typedef struct http_call {
    const char *method;          /* GET, POST, PATCH, PUT or DELETE */
    const char *url;             /* absolute; the caller vetted it (http_url_check) */
    bool allow_http;             /* plain http too (loopback peers); else https only */
    const char *user_agent;      /* NULL: HTTP_USER_AGENT */
    const char *const *headers;  /* "Name: value" lines, NULL-terminated; NULL for none */
    const char *auth_scheme;     /* "Bearer", "bearer"...; NULL: no Authorization header */
    const char *auth_credential; /* the token after the scheme (a secret: wiped, never logged) */
    const char *body;            /* request body, NULL for none */
    size_t body_len;
    long connect_timeout_ms; /* values below 1 count as 1 (0 would mean "none" to libcurl) */
    long timeout_ms;         /* the whole exchange; likewise at least 1 */
    bool truncate;           /* over the body cap: keep the first bytes instead of failing */
    int64_t start_by_ms;     /* http_loop only: a budgeted exchange still waiting for the
                                budget at this time (clock_now_ms) ends unsent; 0: no limit */
} http_call;

typedef struct http_answer {
    long status;              /* HTTP status; 0 when there was no answer */
    buf_t *body;              /* the caller's buffer (capped at its max), emptied first */
    bool truncated;           /* with `truncate`: bytes past the cap were dropped */
    long retry_after_s;       /* Retry-After in seconds from now, -1 when absent or unreadable */
    long rl_remaining;        /* x-ratelimit-remaining, -1 when absent */
    int64_t rl_reset;         /* x-ratelimit-reset (epoch seconds), -1 when absent */
    char etag[HTTP_ETAG_MAX]; /* ETag, "" when absent or longer */
    char link_next[HTTP_LINK_URL_MAX]; /* the URL of the Link header's rel="next" (RFC 8288),
                                          "" when there is none (or it is longer) */
    bool sent;                  /* the request was handed to libcurl (count it as one call) */
    bool permanent;             /* no answer, and retrying cannot help (bad URL, TLS trust) */
    char error[HTTP_ERROR_MAX]; /* what went wrong, "" when nothing; never holds a credential */
} http_answer;

/* Creates a pool of easy handles with a share for DNS and TLS sessions. NULL when out of memory.
 * The caller owns it and frees it with http_pool_free. */
http_pool *http_pool_new(void);
/* Frees the pool's idle handles and the share. Only once no exchange is in flight. NULL is fine. */
void http_pool_free(http_pool *p);

/*
 * Performs one exchange. `out->body` must point at an initialised buffer; everything else in
 * *out is reset here. `pool` may be NULL (fresh handle, closed afterwards).
 * Returns
 *   CRCR_OK          an HTTP answer (any status, see out->status; out->truncated may be set).
 *   CRCR_E_TOO_LARGE the answer body passed out->body->max (status and headers kept).
 *   CRCR_E_NOMEM     no memory for the answer body or the request (status kept if any).
 *   CRCR_E_INVALID   the request is malformed (method, header line, credential, body); nothing
 *                    was sent.
 *   CRCR_E_NETWORK   no answer (DNS, connect, TLS, timeout...); status 0, headers cleared,
 *                    out->error says why (libcurl's text) and out->permanent whether a retry
 *                    could help.
 */
crcr_err http_exchange(http_pool *pool, const http_call *rq, http_answer *out);

/* Decides whether `url` may be fetched: https, or http to a loopback host (127.0.0.0/8, ::1,
 * localhost); never with user info, query or fragment. Judged with libcurl's own URL parser, so
 * that the host checked is the host connected to. *loopback (may be NULL) tells whether the host
 * is a loopback one. */
bool http_url_check(const char *url, bool *loopback);

/* Appends `s` percent-encoded (everything but RFC 3986 unreserved characters) to `url`.
 * CRCR_E_TOO_LARGE past the buffer's cap, CRCR_E_NOMEM. */
crcr_err http_append_escaped(buf_t *url, const char *s);
/* Appends "?name=<escaped value>", or "&..." when `url` already has a query. */
crcr_err http_add_query(buf_t *url, const char *name, const char *value);

/* True when `line` is a "Name: value" header line of at most HTTP_HEADER_LINE_MAX bytes without
 * CR or LF. */
bool http_header_line_ok(const char *line);

/* True when s[0..n) is 1..max bytes of visible ASCII without spaces: usable as a header value
 * token (credential, event name, delivery id). */
bool http_header_token_ok(const char *s, size_t n, size_t max);

/* The target of the link with relation `rel` in a Link header value (RFC 8288: `<URL>; rel="next",
 * <URL>; rel="prev"`; a rel may list several space-separated relations) copied into out (NUL
 * terminated). False when there is none, or when its URL does not fit in outsz. */
bool http_link_find(const char *value, size_t len, const char *rel, char *out, size_t outsz);

/* A Retry-After value as seconds from `now` (epoch seconds): delta-seconds (1-18 digits) or an
 * HTTP-date in the IMF-fixdate form ("Sun, 06 Nov 1994 08:49:37 GMT"), 0 for a date in the
 * past; -1 when absent or unreadable (no surrounding blanks allowed). Callers clamp the wait. */
long http_parse_retry_after(const char *value, int64_t now);

/* Parses an RFC 3339 UTC timestamp as GitHub's API writes them ("2024-05-01T12:00:00Z",
 * optionally with a fraction and "+00:00" for "Z") into epoch seconds. */
bool http_parse_iso8601_utc(const char *s, int64_t *out);

#endif
