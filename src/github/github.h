/*
 * github.h - the GitHub REST client: App JWT, installation tokens, requests over http_client.h.
 *
 * Authentication
 *   GH_AUTH_APP           Bearer <App JWT> (RS256, iat = now-60, exp = now+540, iss = app id).
 *   GH_AUTH_INSTALLATION  Bearer <installation token> of the installation that covers `repo`.
 *                         The installation id is cached per repo (GET /repos/{o}/{r}/installation)
 *                         and the token per installation (POST
 * /app/installations/{id}/access_tokens) until 5 minutes before its expires_at; steady state costs
 * no extra call. A 401 on a cached token drops it and retries the request once. GH_AUTH_NONE no
 * Authorization header (dry-run allowlist download). Every request carries User-Agent, Accept:
 * application/vnd.github+json and X-GitHub-Api-Version: 2022-11-28, connect/total timeouts, and is
 * limited to https except for loopback hosts (config_url_allowed). Answers are capped at
 * CRCR_GH_RESPONSE_MAX bytes. Tokens, JWTs and keys are never logged and never copied into
 * gh_resp.error.
 *
 * Threading: one gh_client is shared by every thread. Its requests go through one http_loop
 * (http_loop.h): a thread of its own drives every exchange, and requests to GITHUB_API_URL are
 * its budgeted exchanges, at most CRCR_GITHUB_CONCURRENCY in flight (http_loop_set_capacity on
 * gh_loop(); relay/gh_budget.c shares that number between instances). gh_start begins a call and
 * returns; `done` hears of its end. The blocking functions (gh_request, gh_installation_id,
 * gh_request_url) are a gh_start and a wait: no thread is spent per request, only the caller's own
 * waits. A 404 to a request made with a cached installation id drops the id and looks it up once
 * more (the repository may have left the installation, or the App was reinstalled).
 */
#ifndef CRCR_GITHUB_H
#define CRCR_GITHUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "config.h"
#include "err.h"

typedef struct gh_client gh_client;

typedef struct gh_resp {
    long status;          /* HTTP status of the answer described; 0 when there was no answer */
    buf_t body;           /* the answer's body (capped) */
    long retry_after_s;   /* Retry-After in seconds, -1 when absent */
    long rl_remaining;    /* x-ratelimit-remaining, -1 when absent */
    int64_t rl_reset;     /* x-ratelimit-reset (epoch seconds), -1 when absent */
    char etag[128];       /* ETag, "" when absent */
    char link_next[2048]; /* the Link header's rel="next" URL, "" when absent (HTTP_LINK_URL_MAX) */
    char error[256];      /* what went wrong, for logs and the outbox row ("" when nothing) */
    int api_calls;        /* HTTP requests this call made, auth steps included */
    /* GH_AUTH_INSTALLATION: the installation id the call used (0 when none was found), whether
     * it asked GitHub for it (a lookup: callers may keep the id), and whether a cached id was
     * found stale on the way (404 to its token mint or to the request: callers drop their copy) */
    int64_t installation;
    bool installation_looked_up;
    bool installation_dropped;
} gh_resp;

typedef enum { GH_AUTH_NONE = 0, GH_AUTH_APP, GH_AUTH_INSTALLATION } gh_auth;

typedef struct gh_stats {
    uint64_t api_calls;      /* every HTTP request sent */
    uint64_t token_hits;     /* installation token served from cache */
    uint64_t token_misses;   /* installation token minted */
    uint64_t install_hits;   /* installation id served from cache */
    uint64_t install_misses; /* installation id looked up */
    uint64_t jwt_signs;      /* App JWTs signed (one serves GH_JWT_REUSE_S of requests) */
} gh_stats;

/* Prepares a response holder. */
void gh_resp_init(gh_resp *r);
/* Frees the body; the holder may be reused after gh_resp_init(). */
void gh_resp_free(gh_resp *r);

/* Creates a client from `cfg` (which must outlive it). Needs App credentials for the App and
 * installation modes; without them only GH_AUTH_NONE works. Returns NULL with a reason in `err`
 * when the private key cannot be loaded. curl_global_init must have been called. */
gh_client *gh_client_new(const crcr_config *cfg, char *err, size_t errsz);
/* Frees the client and its caches (wiping cached tokens). NULL is fine. */
void gh_client_free(gh_client *gh);

/*
 * Sends `method` {GITHUB_API_URL}{path} with an optional JSON body and extra header lines
 * ("Name: value", NULL-terminated array, may be NULL). `out` must be initialised.
 * Returns
 *   CRCR_OK          the request got an HTTP answer (any status; see out->status).
 *   CRCR_E_HTTP      an authentication step got a non-success answer; *out describes that
 *                    answer (status, Retry-After, rate-limit headers) and out->error says which
 *                    step ("installation lookup: 404 Not Found" means the App is not installed).
 *   CRCR_E_NETWORK   no answer (DNS, connect, TLS, timeout); out->status is 0.
 *   CRCR_E_CRYPTO / CRCR_E_NOMEM / CRCR_E_INVALID for local failures.
 */
crcr_err gh_request(gh_client *gh, gh_auth auth, const char *repo, const char *method,
                    const char *path, const char *const *extra_headers, const char *body,
                    size_t body_len, gh_resp *out);

/* Sends a request to an absolute URL outside the GitHub API (the HUD's API), without GitHub
 * authentication; `extra_headers` carries whatever the peer needs. Same limits, return values and
 * https-only rule (http only for loopback hosts) as gh_request. */
crcr_err gh_request_url(gh_client *gh, const char *method, const char *url,
                        const char *const *extra_headers, const char *body, size_t body_len,
                        gh_resp *out);

/* The installation id covering `repo` (from cache, or one lookup). Return values as gh_request. */
crcr_err gh_installation_id(gh_client *gh, const char *repo, int64_t *id, gh_resp *out);

/* ---- calls that do not block ---- */

/* The end of a call started with gh_start: `err` as gh_request's. It runs on the client's loop
 * thread (or on the thread that started the call, when it ended without a request); it must not
 * block (no store, no blocking GitHub call). */
typedef void (*gh_done_fn)(void *ud, crcr_err err);

typedef struct gh_req {
    gh_auth auth;
    const char *repo;           /* GH_AUTH_INSTALLATION: the repository whose installation */
    int64_t installation;       /* ...its id when the caller knows it (0: the client's cache, or
                                   a lookup); a stale one is dropped and looked up once */
    bool lookup_only;           /* GH_AUTH_INSTALLATION: only the id (out->installation) */
    const char *method;         /* GET, POST, PATCH, PUT, DELETE */
    const char *path;           /* under GITHUB_API_URL; or NULL with `url` */
    const char *url;            /* an absolute URL outside the API (no GitHub authentication) */
    const char *const *headers; /* extra "Name: value" lines, NULL-terminated; may be NULL */
    const char *body;           /* JSON request body, NULL for none */
    size_t body_len;
    int64_t start_by_ms; /* a request to GitHub still waiting for the budget at this
                            time (clock_now_ms) is not sent: CRCR_E_STATE; 0: none */
} gh_req;

/*
 * Starts a call; every pointer of *rq and `out` is borrowed until `done` has run. CRCR_OK: `done`
 * will be called exactly once; CRCR_E_STATE there means a request was not sent (the client is
 * draining, gh_drain, or a start_by_ms passed). Otherwise (the request is refused before anything
 * is sent: the checks of gh_request, out->error says why) `done` is never called.
 */
crcr_err gh_start(gh_client *gh, const gh_req *rq, gh_resp *out, gh_done_fn done, void *ud);

/* The cached installation id of `repo` (no request); false when none. */
bool gh_installation_cached(gh_client *gh, const char *repo, int64_t *id);
/* Remembers `repo`'s installation id (kept elsewhere, e.g. the store) unless one is cached. */
void gh_installation_seed(gh_client *gh, const char *repo, int64_t id);
/* Forgets every repository cached as installation `id`, and its token; how many repositories. */
size_t gh_installation_forget(gh_client *gh, int64_t id);

/* The client's loop (its budget: http_loop_set_capacity, stats). */
struct http_loop *gh_loop(gh_client *gh);
/* Stopping: budgeted requests not yet sent end with CRCR_E_STATE from now on (http_loop_drain). */
void gh_drain(gh_client *gh);

/* ---- the App's webhook delivery log (§5.7; apps/list-webhook-deliveries and
 *      apps/redeliver-webhook-delivery), both with the App JWT ---- */

/* Longest pagination cursor taken from a Link header. */
#define GH_CURSOR_MAX 256u

/* One page of GET /app/hook/deliveries?per_page=N[&cursor=C], newest first; `cursor` NULL or ""
 * for the newest page. On a 200 the page (a JSON array) is out->body and `next_cursor` receives
 * the `cursor` parameter of the Link header's rel="next" URL ("" on the last page; a cursor that
 * is not URL-safe text of at most GH_CURSOR_MAX-1 bytes ends the listing with an error). Only the
 * cursor is taken from the link: the request always goes to GITHUB_API_URL. `cursor` and
 * `next_cursor` may be the same buffer. Return values as gh_request; any status other than 200
 * is CRCR_E_HTTP with out->error saying which. */
crcr_err gh_hook_deliveries(gh_client *gh, int per_page, const char *cursor,
                            char next_cursor[GH_CURSOR_MAX], gh_resp *out);

/* Asks GitHub to send delivery attempt `delivery_id` again: POST
 * /app/hook/deliveries/{delivery_id}/attempts. CRCR_OK when GitHub accepted it (202); any other
 * status is CRCR_E_HTTP (out->status and out->error say which). */
crcr_err gh_hook_redeliver(gh_client *gh, int64_t delivery_id, gh_resp *out);

/* The `cursor` query parameter of URL `url` into `out`: true when there is one of 1 to
 * GH_CURSOR_MAX-1 URL-safe characters ([A-Za-z0-9._~%+=-]), kept as written (exposed for tests). */
bool gh_link_cursor(const char *url, char out[GH_CURSOR_MAX]);

/* Builds an App JWT for `now` into `out` (exposed for tests). */
crcr_err gh_app_jwt(gh_client *gh, int64_t now, buf_t *out);

/* Copies the counters. */
void gh_get_stats(gh_client *gh, gh_stats *out);

/* http_parse_retry_after (http_client.h) under its older name. */
long gh_parse_retry_after(const char *value, int64_t now);

#endif
