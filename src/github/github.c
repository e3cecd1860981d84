/*
 * github.c - the GitHub REST client: App JWT, cached installation ids and tokens, and requests over
 * http_client.c; see github.h for the contract.
 *
 * Connections. The client owns an http_pool: each call borrows an idle easy handle (one per
 * concurrently running caller, created on demand) and gives it back, so its kept-alive connection
 * serves the next call from whatever thread; DNS and TLS sessions are shared, connections are not
 * (http_client.h says why).
 *
 * Token cache. repo (lower-cased) -> installation id and installation id -> token, both bounded
 * (CRCR_TOKEN_CACHE_MAX, oldest evicted) and protected by `mu`, which is never held during HTTP.
 * A missing entry is fetched by one thread only ("single flight"): it inserts a pending entry,
 * releases the lock for the HTTP call and broadcasts `cond` when done; other threads that need the
 * same entry wait on `cond` instead of minting a second token. Tokens live in their own
 * allocations and are wiped with OPENSSL_cleanse when dropped (our copies only: curl's and
 * jansson's internal buffers are out of reach, so wiping is best effort).
 */
#include "github.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "json.h"
#include "jwt.h"
#include "http_client.h"
#include "clock.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"

#define GH_DEFAULT_API_URL "https://api.github.com"
#define GH_USER_AGENT "crcr/" CRCR_VERSION
/* A cached token is used until this many seconds before its expires_at. */
#define GH_TOKEN_MARGIN_S 300
/* App JWT: iat this far in the past (clock drift), exp this far ahead (GitHub allows <= 600). */
#define GH_JWT_IAT_SKEW_S 60
#define GH_JWT_LIFETIME_S 540
/* Longest App JWT we build (a 4096-bit key gives about 900 bytes). */
#define GH_JWT_MAX 8192u
/* Longest GITHUB_API_URL accepted, and longest full request URL. */
#define GH_API_URL_MAX 512u
#define GH_URL_MAX (GH_API_URL_MAX + CRCR_MAX_PATH)
/* Largest request body sent (repository_dispatch is < 64 KB, check runs < 1 MB). */
#define GH_REQUEST_BODY_MAX (1024u * 1024u)
/* Extra header lines a caller may add. */
#define GH_EXTRA_HEADERS_MAX 16u
/* Largest answer of an authentication step (installation object, access token). */
#define GH_AUTH_BODY_MAX (256u * 1024u)
/* Bytes reserved up front for the token answer, so that the buffer holding the token is not
 * reallocated (which would leave an unwiped copy behind) for any normal answer. */
#define GH_AUTH_BODY_RESERVE (16u * 1024u)
_Static_assert(sizeof(((gh_resp *)0)->etag) == HTTP_ETAG_MAX,
               "gh_resp.etag is an http_answer.etag");
_Static_assert(sizeof(((gh_resp *)0)->link_next) == HTTP_LINK_URL_MAX,
               "gh_resp.link_next is an http_answer.link_next");
/* Items per page of the delivery log GitHub serves at most. */
#define GH_HOOK_PER_PAGE_MAX 100

typedef struct inst_entry {
    char repo[CRCR_REPO_NAME_MAX]; /* lower-cased owner/name */
    int64_t id;
    uint64_t seq; /* insertion order, for eviction */
    bool pending; /* being looked up by one thread */
} inst_entry;

typedef struct tok_entry {
    int64_t inst;
    char *token; /* owned, NUL-terminated, wiped before free; NULL while pending */
    size_t len;
    int64_t expires_at; /* epoch seconds */
    uint64_t gen;       /* which mint produced it, so that a 401 drops exactly this token */
    uint64_t seq;
    bool pending;
} tok_entry;

struct gh_client {
    const crcr_config *cfg;
    EVP_PKEY *key; /* App private key; NULL without App credentials */
    char *api_url; /* owned copy without trailing '/' */
    bool url_ok;   /* https, or http to a loopback host */
    bool loopback; /* the API host is loopback: plain http is allowed too */
    bool iss_numeric;

    http_pool *pool; /* easy handles with their kept-alive connections */

    pthread_mutex_t mu; /* the caches below */
    pthread_cond_t cond;
    inst_entry *inst;
    size_t n_inst, cap_inst;
    tok_entry *tok;
    size_t n_tok, cap_tok;
    uint64_t seq, gen;

    _Atomic uint64_t st_api_calls, st_token_hits, st_token_misses, st_install_hits,
        st_install_misses;
};

/* ---------------------------------------------------------------- small helpers */

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

long gh_parse_retry_after(const char *value, int64_t now)
{
    return http_parse_retry_after(value, now);
}

/* Fills out->error with printf-formatted text passed through log_scrub, so that no token, JWT or
 * key that an upstream text may echo ever lands in it. */
__attribute__((format(printf, 2, 3))) static void set_error(gh_resp *out, const char *fmt, ...)
{
    char raw[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    buf_t clean;
    buf_init(&clean, 2 * sizeof(raw));
    if (log_scrub(raw, strlen(raw), &clean) == CRCR_OK) {
        size_t n = clean.len < sizeof(out->error) - 1 ? clean.len : sizeof(out->error) - 1;
        memcpy(out->error, buf_cstr(&clean), n);
        out->error[n] = '\0';
    } else {
        snprintf(out->error, sizeof(out->error), "%s", "(error text withheld)");
    }
    buf_free(&clean);
}

/* Frees a buffer that held credential material after overwriting all of its memory. */
static void buf_wipe_free(buf_t *b)
{
    if (b->data)
        OPENSSL_cleanse(b->data, b->cap);
    buf_free(b);
}

/* Validates "owner/name" (GitHub's characters and lengths) and writes it lower-cased to `key`. */
static crcr_err repo_key(const char *repo, char key[CRCR_REPO_NAME_MAX])
{
    if (!repo)
        return CRCR_E_INVALID;
    size_t n = strlen(repo);
    const char *slash = memchr(repo, '/', n);
    if (n >= CRCR_REPO_NAME_MAX || !slash)
        return CRCR_E_INVALID;
    size_t owner_len = (size_t)(slash - repo), name_len = n - owner_len - 1;
    if (owner_len == 0 || owner_len > 39 || name_len == 0 || name_len > 100)
        return CRCR_E_INVALID;
    for (size_t i = 0; i < n; i++) {
        char c = repo[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c);
        bool ok = i < owner_len    ? (alnum || c == '-')
                  : i == owner_len ? true
                                   : (alnum || c == '-' || c == '_' || c == '.');
        if (!ok)
            return CRCR_E_INVALID;
        key[i] = ascii_lower(c);
    }
    key[n] = '\0';
    const char *name = key + owner_len + 1;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return CRCR_E_INVALID;
    return CRCR_OK;
}

/* ---------------------------------------------------------------- HTTP */

/* Resets what an answer's headers describe. */
static void answer_reset(gh_resp *out)
{
    out->retry_after_s = -1;
    out->rl_remaining = -1;
    out->rl_reset = -1;
    out->etag[0] = '\0';
    out->link_next[0] = '\0';
}

/*
 * One HTTP exchange to `base` + `path` (base NULL: GITHUB_API_URL; `loopback` allows plain
 * http) and describes its answer in *out (status, rate-limit headers, ETag, error). The body goes
 * to `sink` (out->body or a private buffer for secret answers); both are emptied first. `bearer`
 * (borrowed, may be NULL) becomes the Authorization header. Counts the request in out->api_calls
 * and the client's stats.
 * Returns CRCR_OK with out->status for any HTTP answer, CRCR_E_TOO_LARGE (status kept) when the
 * answer passed the sink's cap, CRCR_E_NETWORK (status 0) without an answer.
 */
static crcr_err http_to(gh_client *gh, const char *base, bool loopback, const char *method,
                        const char *path, const char *bearer, const char *const *extra,
                        const char *body, size_t body_len, buf_t *sink, gh_resp *out)
{
    out->status = 0;
    out->error[0] = '\0';
    answer_reset(out);
    buf_reset(&out->body);

    buf_t url;
    buf_init(&url, GH_URL_MAX);
    crcr_err err = buf_puts(&url, base ? base : gh->api_url);
    if (!err)
        err = buf_puts(&url, path);
    if (err) {
        buf_free(&url);
        set_error(out, "%s %s: URL too long", method, path);
        return CRCR_E_INVALID;
    }
    const char *hdrs[GH_EXTRA_HEADERS_MAX + 4];
    size_t nh = 0;
    hdrs[nh++] = "Accept: application/vnd.github+json";
    hdrs[nh++] = "X-GitHub-Api-Version: 2022-11-28";
    hdrs[nh++] = body ? "Content-Type: application/json" : "Content-Type:";
    for (size_t i = 0; extra && extra[i] && i < GH_EXTRA_HEADERS_MAX; i++)
        hdrs[nh++] = extra[i];
    hdrs[nh] = NULL;
    http_call rq = {.method = method,
                    .url = url.data,
                    .allow_http = loopback,
                    .user_agent = GH_USER_AGENT,
                    .headers = hdrs,
                    .auth_scheme = bearer ? "Bearer" : NULL,
                    .auth_credential = bearer,
                    .body = body,
                    .body_len = body_len,
                    .connect_timeout_ms = CRCR_GH_CONNECT_TIMEOUT_MS,
                    .timeout_ms = CRCR_GH_TIMEOUT_MS};
    http_answer a = {.body = sink};
    err = http_exchange(gh->pool, &rq, &a);
    buf_free(&url);
    if (a.sent) {
        out->api_calls++;
        atomic_fetch_add_explicit(&gh->st_api_calls, 1, memory_order_relaxed);
        metrics_github_request(base ? NULL : path, a.status);
    }
    out->status = a.status;
    out->retry_after_s = a.retry_after_s;
    out->rl_remaining = a.rl_remaining;
    out->rl_reset = a.rl_reset;
    memcpy(out->etag, a.etag, sizeof(out->etag));
    memcpy(out->link_next, a.link_next, sizeof(out->link_next));
    if (err)
        set_error(out, "%s %s: %s", method, path, a.error);
    return err;
}

static crcr_err http_do(gh_client *gh, const char *method, const char *path, const char *bearer,
                        const char *const *extra, const char *body, size_t body_len, buf_t *sink,
                        gh_resp *out)
{
    return http_to(gh, NULL, gh->loopback, method, path, bearer, extra, body, body_len, sink, out);
}

/* ---------------------------------------------------------------- App JWT */

crcr_err gh_app_jwt(gh_client *gh, int64_t now, buf_t *out)
{
    if (!gh || !gh->key || !out)
        return CRCR_E_INVALID;
    buf_t claims;
    buf_init(&claims, 512);
    crcr_err err = buf_printf(
        &claims, "{\"iat\":%lld,\"exp\":%lld,\"iss\":", (long long)(now - GH_JWT_IAT_SKEW_S),
        (long long)(now + GH_JWT_LIFETIME_S));
    if (!err)
        err = gh->iss_numeric ? buf_puts(&claims, gh->cfg->app_id)
                              : jv_quote(&claims, gh->cfg->app_id, strlen(gh->cfg->app_id));
    if (!err)
        err = buf_putc(&claims, '}');
    if (!err)
        err = jwt_sign_rs256(gh->key, claims.data, out);
    buf_free(&claims);
    return err;
}

/* ---------------------------------------------------------------- caches (callers hold mu) */

static inst_entry *inst_find(gh_client *gh, const char *key)
{
    for (size_t i = 0; i < gh->n_inst; i++) {
        if (strcmp(gh->inst[i].repo, key) == 0)
            return &gh->inst[i];
    }
    return NULL;
}

static void inst_remove(gh_client *gh, inst_entry *e)
{
    *e = gh->inst[--gh->n_inst];
}

/* Adds a pending entry for `key`, evicting the oldest settled entry when full; NULL when there is
 * no room (the caller then works uncached). */
static inst_entry *inst_add_pending(gh_client *gh, const char *key)
{
    inst_entry *e = NULL;
    if (gh->n_inst < gh->cap_inst) {
        e = &gh->inst[gh->n_inst++];
    } else if (gh->cap_inst < CRCR_TOKEN_CACHE_MAX) {
        size_t ncap = gh->cap_inst ? gh->cap_inst * 2 : 16;
        if (ncap > CRCR_TOKEN_CACHE_MAX)
            ncap = CRCR_TOKEN_CACHE_MAX;
        inst_entry *n = realloc(gh->inst, ncap * sizeof(*n));
        if (!n)
            return NULL;
        gh->inst = n;
        gh->cap_inst = ncap;
        e = &gh->inst[gh->n_inst++];
    } else {
        for (size_t i = 0; i < gh->n_inst; i++) {
            if (!gh->inst[i].pending && (!e || gh->inst[i].seq < e->seq))
                e = &gh->inst[i];
        }
        if (!e)
            return NULL;
    }
    size_t kl = strlen(key);
    memcpy(e->repo, key, kl + 1);
    e->id = 0;
    e->seq = ++gh->seq;
    e->pending = true;
    return e;
}

static tok_entry *tok_find(gh_client *gh, int64_t inst)
{
    for (size_t i = 0; i < gh->n_tok; i++) {
        if (gh->tok[i].inst == inst)
            return &gh->tok[i];
    }
    return NULL;
}

static void tok_wipe(tok_entry *e)
{
    if (e->token) {
        OPENSSL_cleanse(e->token, e->len);
        free(e->token);
    }
    e->token = NULL;
    e->len = 0;
    e->expires_at = 0;
}

static void tok_remove(gh_client *gh, tok_entry *e)
{
    tok_wipe(e);
    *e = gh->tok[--gh->n_tok];
}

static tok_entry *tok_add_pending(gh_client *gh, int64_t inst)
{
    tok_entry *e = NULL;
    if (gh->n_tok < gh->cap_tok) {
        e = &gh->tok[gh->n_tok++];
    } else if (gh->cap_tok < CRCR_TOKEN_CACHE_MAX) {
        size_t ncap = gh->cap_tok ? gh->cap_tok * 2 : 16;
        if (ncap > CRCR_TOKEN_CACHE_MAX)
            ncap = CRCR_TOKEN_CACHE_MAX;
        tok_entry *n = realloc(gh->tok, ncap * sizeof(*n));
        if (!n)
            return NULL;
        gh->tok = n;
        gh->cap_tok = ncap;
        e = &gh->tok[gh->n_tok++];
    } else {
        for (size_t i = 0; i < gh->n_tok; i++) {
            if (!gh->tok[i].pending && (!e || gh->tok[i].seq < e->seq))
                e = &gh->tok[i];
        }
        if (!e)
            return NULL;
        tok_wipe(e);
    }
    e->inst = inst;
    e->token = NULL;
    e->len = 0;
    e->expires_at = 0;
    e->gen = 0;
    e->seq = ++gh->seq;
    e->pending = true;
    return e;
}

/* ---------------------------------------------------------------- authentication steps */

/* GET /repos/{key}/installation with the App JWT. */
static crcr_err lookup_http(gh_client *gh, const char *key, int64_t *id, gh_resp *out)
{
    buf_t jwt, path;
    buf_init(&jwt, GH_JWT_MAX);
    buf_init(&path, CRCR_MAX_PATH);
    crcr_err err = gh_app_jwt(gh, clock_now_ms() / 1000, &jwt);
    if (err) {
        set_error(out, "installation lookup: cannot sign the App JWT (%s)", crcr_strerror(err));
        buf_wipe_free(&jwt);
        return err == CRCR_E_NOMEM ? err : CRCR_E_CRYPTO;
    }
    err = buf_printf(&path, "/repos/%s/installation", key);
    if (!err)
        err = http_do(gh, "GET", path.data, jwt.data, NULL, NULL, 0, &out->body, out);
    buf_wipe_free(&jwt);
    buf_free(&path);
    if (err) {
        set_error(out, "installation lookup: %s", out->error);
        return err;
    }
    if (out->status != 200) {
        if (out->status == 404)
            set_error(out, "installation lookup: 404 (App not installed on %s)", key);
        else
            set_error(out, "installation lookup: %ld", out->status);
        return CRCR_E_HTTP;
    }
    jv *doc = jv_parse(buf_cstr(&out->body), out->body.len, NULL, 0);
    int64_t v = 0;
    bool ok = doc && jv_int(jv_get(doc, "id"), &v) && v > 0;
    jv_free(doc);
    if (!ok) {
        set_error(out, "installation lookup: answer without an installation id");
        return CRCR_E_INVALID;
    }
    *id = v;
    return CRCR_OK;
}

/* POST /app/installations/{inst}/access_tokens with the App JWT. On success `tok` holds the
 * token (NUL-terminated) and *expires_at its expiry (0 when unparsable). The answer body, which
 * holds the token, is kept in a private buffer and wiped; out->body stays empty on success. */
static crcr_err mint_http(gh_client *gh, int64_t inst, char tok[CRCR_TOKEN_MAX + 1],
                          int64_t *expires_at, gh_resp *out)
{
    static const char zeros[1024];
    buf_t jwt, scratch;
    char path[64];
    buf_init(&jwt, GH_JWT_MAX);
    buf_init(&scratch, GH_AUTH_BODY_MAX);
    for (size_t i = 0; i < GH_AUTH_BODY_RESERVE / sizeof(zeros); i++)
        buf_append(&scratch, zeros, sizeof(zeros));
    buf_reset(&scratch);
    snprintf(path, sizeof(path), "/app/installations/%lld/access_tokens", (long long)inst);

    crcr_err err = gh_app_jwt(gh, clock_now_ms() / 1000, &jwt);
    if (err) {
        set_error(out, "token mint: cannot sign the App JWT (%s)", crcr_strerror(err));
        err = err == CRCR_E_NOMEM ? err : CRCR_E_CRYPTO;
    } else {
        err = http_do(gh, "POST", path, jwt.data, NULL, NULL, 0, &scratch, out);
        if (err)
            set_error(out, "token mint: %s", out->error);
    }
    if (!err && out->status != 201) {
        /* A failure answer carries no token: hand it to the caller. */
        buf_append(&out->body, buf_cstr(&scratch), scratch.len);
        set_error(out, "token mint: %ld", out->status);
        err = CRCR_E_HTTP;
    }
    if (!err) {
        jv *doc = jv_parse(buf_cstr(&scratch), scratch.len, NULL, 0);
        jv *t = jv_get(doc, "token");
        const char *s = jv_str(t);
        size_t n = jv_str_len(t);
        bool printable = s && n > 0 && strlen(s) == n;
        for (size_t i = 0; printable && i < n; i++)
            printable = s[i] > 0x20 && s[i] < 0x7f; /* it goes into a header line */
        if (!printable) {
            set_error(out, "token mint: answer without a token");
            err = CRCR_E_INVALID;
        } else if (n > CRCR_TOKEN_MAX) {
            set_error(out, "token mint: token longer than %u bytes", CRCR_TOKEN_MAX);
            err = CRCR_E_TOO_LARGE;
        } else {
            memcpy(tok, s, n + 1);
            const char *exp = jv_str(jv_get(doc, "expires_at"));
            if (!exp || !http_parse_iso8601_utc(exp, expires_at))
                *expires_at = 0;
        }
        jv_free(doc);
    }
    buf_wipe_free(&scratch);
    buf_wipe_free(&jwt);
    return err;
}

/* The installation id for the lower-cased repo `key`; *cached says whether it came from the
 * cache. One thread looks a missing id up while the others wait for its result. */
static crcr_err install_id(gh_client *gh, const char *key, int64_t *id, bool *cached, gh_resp *out)
{
    pthread_mutex_lock(&gh->mu);
    inst_entry *e;
    while ((e = inst_find(gh, key)) && e->pending)
        pthread_cond_wait(&gh->cond, &gh->mu);
    if (e) {
        *id = e->id;
        *cached = true;
        pthread_mutex_unlock(&gh->mu);
        atomic_fetch_add_explicit(&gh->st_install_hits, 1, memory_order_relaxed);
        return CRCR_OK;
    }
    bool owner = inst_add_pending(gh, key) != NULL;
    pthread_mutex_unlock(&gh->mu);

    *cached = false;
    atomic_fetch_add_explicit(&gh->st_install_misses, 1, memory_order_relaxed);
    crcr_err err = lookup_http(gh, key, id, out);

    pthread_mutex_lock(&gh->mu);
    if (owner && (e = inst_find(gh, key)) && e->pending) {
        if (err) {
            inst_remove(gh, e);
        } else {
            e->id = *id;
            e->pending = false;
        }
    }
    pthread_cond_broadcast(&gh->cond);
    pthread_mutex_unlock(&gh->mu);
    return err;
}

/* Forgets the cached installation id of `key` if it is still `id`. */
static void install_drop(gh_client *gh, const char *key, int64_t id)
{
    pthread_mutex_lock(&gh->mu);
    inst_entry *e = inst_find(gh, key);
    if (e && !e->pending && e->id == id)
        inst_remove(gh, e);
    pthread_mutex_unlock(&gh->mu);
}

/* An installation token for `inst` in `tok`, from the cache while it is more than
 * GH_TOKEN_MARGIN_S from expiry, else freshly minted (by one thread; the others wait). *gen
 * identifies the token for token_drop(); *cached says whether it came from the cache. */
static crcr_err inst_token(gh_client *gh, int64_t inst, char tok[CRCR_TOKEN_MAX + 1], uint64_t *gen,
                           bool *cached, gh_resp *out)
{
    pthread_mutex_lock(&gh->mu);
    tok_entry *e;
    while ((e = tok_find(gh, inst)) && e->pending)
        pthread_cond_wait(&gh->cond, &gh->mu);
    int64_t now = clock_now_ms() / 1000;
    if (e && e->token && now < e->expires_at - GH_TOKEN_MARGIN_S) {
        memcpy(tok, e->token, e->len + 1);
        *gen = e->gen;
        *cached = true;
        pthread_mutex_unlock(&gh->mu);
        atomic_fetch_add_explicit(&gh->st_token_hits, 1, memory_order_relaxed);
        return CRCR_OK;
    }
    if (e) {
        tok_wipe(e); /* expiring: this thread mints its successor */
        e->pending = true;
    } else {
        e = tok_add_pending(gh, inst);
    }
    bool owner = e != NULL;
    pthread_mutex_unlock(&gh->mu);

    *cached = false;
    atomic_fetch_add_explicit(&gh->st_token_misses, 1, memory_order_relaxed);
    int64_t expires_at = 0;
    crcr_err err = mint_http(gh, inst, tok, &expires_at, out);
    if (!err && expires_at == 0) {
        char idbuf[24];
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)inst);
        LOG_WARN("github.token_expiry_unparsed", "installation", idbuf, NULL);
    }

    pthread_mutex_lock(&gh->mu);
    *gen = ++gh->gen;
    if (owner && (e = tok_find(gh, inst)) && e->pending) {
        size_t n = err ? 0 : strlen(tok);
        char *copy = err ? NULL : malloc(n + 1);
        if (!copy) {
            tok_remove(gh, e); /* failed, or no memory to cache: the next caller mints */
        } else {
            memcpy(copy, tok, n + 1);
            e->token = copy;
            e->len = n;
            e->expires_at = expires_at;
            e->gen = *gen;
            e->pending = false;
        }
    }
    pthread_cond_broadcast(&gh->cond);
    pthread_mutex_unlock(&gh->mu);
    return err;
}

/* Drops the cached token of `inst` if it is still the one identified by `gen`. */
static void token_drop(gh_client *gh, int64_t inst, uint64_t gen)
{
    pthread_mutex_lock(&gh->mu);
    tok_entry *e = tok_find(gh, inst);
    if (e && !e->pending && e->gen == gen)
        tok_remove(gh, e);
    pthread_mutex_unlock(&gh->mu);
}

/* Installation id and token for `key`. A token mint answered 404 for a cached installation id
 * (the App was reinstalled, so the id changed) drops the id and tries once more. */
static crcr_err auth_for_repo(gh_client *gh, const char *key, int64_t *inst,
                              char tok[CRCR_TOKEN_MAX + 1], uint64_t *gen, bool *tok_cached,
                              gh_resp *out)
{
    for (int attempt = 0;; attempt++) {
        bool inst_cached = false;
        crcr_err err = install_id(gh, key, inst, &inst_cached, out);
        if (err)
            return err;
        err = inst_token(gh, *inst, tok, gen, tok_cached, out);
        if (err == CRCR_E_HTTP && out->status == 404 && inst_cached && attempt == 0) {
            install_drop(gh, key, *inst);
            continue;
        }
        return err;
    }
}

/* ---------------------------------------------------------------- public API */

void gh_resp_init(gh_resp *r)
{
    r->status = 0;
    buf_init(&r->body, CRCR_GH_RESPONSE_MAX);
    r->retry_after_s = -1;
    r->rl_remaining = -1;
    r->rl_reset = -1;
    r->etag[0] = '\0';
    r->link_next[0] = '\0';
    r->error[0] = '\0';
    r->api_calls = 0;
}

void gh_resp_free(gh_resp *r)
{
    if (r)
        buf_free(&r->body);
}

gh_client *gh_client_new(const crcr_config *cfg, char *err, size_t errsz)
{
    if (!cfg) {
        snprintf(err, errsz, "github: no configuration");
        return NULL;
    }
    gh_client *gh = calloc(1, sizeof(*gh));
    if (!gh) {
        snprintf(err, errsz, "github: out of memory");
        return NULL;
    }
    gh->cfg = cfg;
    const char *url = cfg->github_api_url ? cfg->github_api_url : GH_DEFAULT_API_URL;
    size_t ul = strlen(url);
    while (ul > 0 && url[ul - 1] == '/')
        ul--;
    if (ul > GH_API_URL_MAX) {
        snprintf(err, errsz, "GITHUB_API_URL: longer than %u bytes", GH_API_URL_MAX);
        free(gh);
        return NULL;
    }
    gh->api_url = malloc(ul + 1);
    if (!gh->api_url) {
        snprintf(err, errsz, "github: out of memory");
        free(gh);
        return NULL;
    }
    memcpy(gh->api_url, url, ul);
    gh->api_url[ul] = '\0';
    gh->url_ok = http_url_check(gh->api_url, &gh->loopback);

    pthread_mutex_init(&gh->mu, NULL);
    pthread_cond_init(&gh->cond, NULL);

    if (cfg->app_id && cfg->app_id[0] && cfg->private_key_pem) {
        crcr_err e = jwt_load_rsa_private(cfg->private_key_pem, &gh->key);
        if (e) {
            snprintf(err, errsz, "GITHUB_APP_PRIVATE_KEY: %s",
                     e == CRCR_E_TOO_LARGE
                         ? "too large"
                         : "not an unencrypted RSA private key (>= 2048 bits) in PEM form");
            gh_client_free(gh);
            return NULL;
        }
        size_t n = strlen(cfg->app_id);
        gh->iss_numeric = n <= 18;
        for (size_t i = 0; i < n; i++)
            gh->iss_numeric = gh->iss_numeric && is_digit(cfg->app_id[i]);
    }

    gh->pool = http_pool_new();
    if (!gh->pool) {
        snprintf(err, errsz, "github: cannot set up the curl share handle");
        gh_client_free(gh);
        return NULL;
    }
    return gh;
}

/* Frees the pooled curl handles, the share, the caches (tokens wiped) and the key. Call it only
 * when no request is in flight: handles borrowed by running calls are not in the pool. */
void gh_client_free(gh_client *gh)
{
    if (!gh)
        return;
    http_pool_free(gh->pool);
    for (size_t i = 0; i < gh->n_tok; i++)
        tok_wipe(&gh->tok[i]);
    free(gh->tok);
    free(gh->inst);
    EVP_PKEY_free(gh->key);
    free(gh->api_url);
    pthread_mutex_destroy(&gh->mu);
    pthread_cond_destroy(&gh->cond);
    free(gh);
}

void gh_get_stats(gh_client *gh, gh_stats *out)
{
    out->api_calls = atomic_load(&gh->st_api_calls);
    out->token_hits = atomic_load(&gh->st_token_hits);
    out->token_misses = atomic_load(&gh->st_token_misses);
    out->install_hits = atomic_load(&gh->st_install_hits);
    out->install_misses = atomic_load(&gh->st_install_misses);
}

/* Resets *out for a new call. */
static void resp_start(gh_resp *out)
{
    out->status = 0;
    buf_reset(&out->body);
    answer_reset(out);
    out->error[0] = '\0';
    out->api_calls = 0;
}

/* Checks what a request may carry before anything is sent. */
static crcr_err check_request(gh_client *gh, const char *method, const char *path,
                              const char *const *extra, const char *body, size_t body_len,
                              gh_resp *out)
{
    if (!gh->url_ok) {
        set_error(out, "GITHUB_API_URL refused: only https, or http to a loopback host");
        return CRCR_E_INVALID;
    }
    static const char *methods[] = {"GET", "POST", "PATCH", "PUT", "DELETE"};
    bool known = false;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        known = known || strcmp(method, methods[i]) == 0;
    if (!known || (strcmp(method, "GET") == 0 && body)) {
        set_error(out, "unsupported method or GET with a body");
        return CRCR_E_INVALID;
    }
    size_t pl = strlen(path);
    bool path_ok = pl > 0 && pl <= CRCR_MAX_PATH && path[0] == '/';
    for (size_t i = 0; path_ok && i < pl; i++)
        path_ok = path[i] > 0x20 && path[i] < 0x7f;
    if (!path_ok) {
        set_error(out, "invalid request path");
        return CRCR_E_INVALID;
    }
    if ((!body && body_len) || body_len > GH_REQUEST_BODY_MAX) {
        set_error(out, "%s %s: request body missing or over %u bytes", method, path,
                  GH_REQUEST_BODY_MAX);
        return body_len > GH_REQUEST_BODY_MAX ? CRCR_E_TOO_LARGE : CRCR_E_INVALID;
    }
    for (size_t i = 0; extra && extra[i]; i++) {
        if (i >= GH_EXTRA_HEADERS_MAX || !http_header_line_ok(extra[i])) {
            set_error(out, "invalid extra header line");
            return CRCR_E_INVALID;
        }
    }
    return CRCR_OK;
}

/* A request authenticated as the installation covering `repo`, with one retry on a 401 answer to
 * a cached token. */
static crcr_err request_as_installation(gh_client *gh, const char *repo, const char *method,
                                        const char *path, const char *const *extra,
                                        const char *body, size_t body_len, gh_resp *out)
{
    char key[CRCR_REPO_NAME_MAX];
    if (repo_key(repo, key) != CRCR_OK) {
        set_error(out, "invalid repository name");
        return CRCR_E_INVALID;
    }
    char tok[CRCR_TOKEN_MAX + 1];
    int64_t inst = 0;
    uint64_t gen = 0;
    bool cached = false;
    crcr_err err = auth_for_repo(gh, key, &inst, tok, &gen, &cached, out);
    if (!err)
        err = http_do(gh, method, path, tok, extra, body, body_len, &out->body, out);
    if (!err && out->status == 401 && cached) {
        char idbuf[24];
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)inst);
        LOG_INFO("github.token_rejected", "installation", idbuf, "repo", key, NULL);
        token_drop(gh, inst, gen);
        err = auth_for_repo(gh, key, &inst, tok, &gen, &cached, out);
        if (!err)
            err = http_do(gh, method, path, tok, extra, body, body_len, &out->body, out);
    }
    OPENSSL_cleanse(tok, sizeof(tok));
    return err;
}

crcr_err gh_request(gh_client *gh, gh_auth auth, const char *repo, const char *method,
                    const char *path, const char *const *extra_headers, const char *body,
                    size_t body_len, gh_resp *out)
{
    if (!out)
        return CRCR_E_INVALID;
    resp_start(out);
    if (!gh || !method || !path) {
        set_error(out, "missing client, method or path");
        return CRCR_E_INVALID;
    }
    crcr_err err = check_request(gh, method, path, extra_headers, body, body_len, out);
    if (err)
        return err;
    if (auth != GH_AUTH_NONE && !gh->key) {
        set_error(out, "no GitHub App credentials (dry run)");
        return CRCR_E_INVALID;
    }
    switch (auth) {
    case GH_AUTH_NONE:
        return http_do(gh, method, path, NULL, extra_headers, body, body_len, &out->body, out);
    case GH_AUTH_APP: {
        buf_t jwt;
        buf_init(&jwt, GH_JWT_MAX);
        err = gh_app_jwt(gh, clock_now_ms() / 1000, &jwt);
        if (err)
            set_error(out, "cannot sign the App JWT (%s)", crcr_strerror(err));
        else
            err =
                http_do(gh, method, path, jwt.data, extra_headers, body, body_len, &out->body, out);
        buf_wipe_free(&jwt);
        return err;
    }
    case GH_AUTH_INSTALLATION:
        return request_as_installation(gh, repo, method, path, extra_headers, body, body_len, out);
    }
    set_error(out, "unknown authentication mode");
    return CRCR_E_INVALID;
}

crcr_err gh_installation_id(gh_client *gh, const char *repo, int64_t *id, gh_resp *out)
{
    if (!out)
        return CRCR_E_INVALID;
    resp_start(out);
    if (!gh || !id) {
        set_error(out, "missing client or id");
        return CRCR_E_INVALID;
    }
    if (!gh->url_ok) {
        set_error(out, "GITHUB_API_URL refused: only https, or http to a loopback host");
        return CRCR_E_INVALID;
    }
    if (!gh->key) {
        set_error(out, "no GitHub App credentials (dry run)");
        return CRCR_E_INVALID;
    }
    char key[CRCR_REPO_NAME_MAX];
    if (repo_key(repo, key) != CRCR_OK) {
        set_error(out, "invalid repository name");
        return CRCR_E_INVALID;
    }
    bool cached;
    return install_id(gh, key, id, &cached, out);
}

crcr_err gh_request_url(gh_client *gh, const char *method, const char *url,
                        const char *const *extra_headers, const char *body, size_t body_len,
                        gh_resp *out)
{
    if (!out)
        return CRCR_E_INVALID;
    resp_start(out);
    if (!gh || !method || !url) {
        set_error(out, "missing client, method or URL");
        return CRCR_E_INVALID;
    }
    bool loopback = false;
    if (!http_url_check(url, &loopback)) {
        set_error(out, "URL refused: only https, or http to a loopback host");
        return CRCR_E_INVALID;
    }
    crcr_err err = check_request(gh, method, "/", extra_headers, body, body_len, out);
    if (err)
        return err;
    return http_to(gh, url, loopback, method, "", NULL, extra_headers, body, body_len, &out->body,
                   out);
}

/* ---------------------------------------------------------------- the App's delivery log */

static bool cursor_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' ||
           c == '_' || c == '~' || c == '%' || c == '+' || c == '=' || c == '-';
}

bool gh_link_cursor(const char *url, char out[GH_CURSOR_MAX])
{
    out[0] = '\0';
    const char *q = url ? strchr(url, '?') : NULL;
    while (q && *q) {
        q++; /* past '?' or '&' */
        size_t n = strcspn(q, "&#");
        if (n > 7 && strncmp(q, "cursor=", 7) == 0) {
            size_t vn = n - 7;
            if (vn >= GH_CURSOR_MAX)
                return false;
            for (size_t i = 0; i < vn; i++) {
                if (!cursor_char(q[7 + i]))
                    return false;
            }
            memcpy(out, q + 7, vn);
            out[vn] = '\0';
            return true;
        }
        q += n;
        if (*q != '&')
            break;
    }
    return false;
}

crcr_err gh_hook_deliveries(gh_client *gh, int per_page, const char *cursor,
                            char next_cursor[GH_CURSOR_MAX], gh_resp *out)
{
    if (per_page < 1 || per_page > GH_HOOK_PER_PAGE_MAX)
        per_page = GH_HOOK_PER_PAGE_MAX;
    char path[64 + GH_CURSOR_MAX];
    size_t cl = cursor ? strlen(cursor) : 0;
    bool cursor_ok = cl < GH_CURSOR_MAX;
    for (size_t i = 0; cursor_ok && i < cl; i++)
        cursor_ok = cursor_char(cursor[i]);
    if (cursor_ok && cl)
        snprintf(path, sizeof(path), "/app/hook/deliveries?per_page=%d&cursor=%s", per_page,
                 cursor);
    else
        snprintf(path, sizeof(path), "/app/hook/deliveries?per_page=%d", per_page);
    next_cursor[0] = '\0'; /* after the cursor was read: they may be one buffer */
    if (!cursor_ok) {
        resp_start(out);
        set_error(out, "hook deliveries: unusable cursor");
        return CRCR_E_INVALID;
    }
    crcr_err err = gh_request(gh, GH_AUTH_APP, NULL, "GET", path, NULL, NULL, 0, out);
    if (err)
        return err;
    if (out->status != 200) {
        set_error(out, "GET /app/hook/deliveries: %ld", out->status);
        return CRCR_E_HTTP;
    }
    if (out->link_next[0] && !gh_link_cursor(out->link_next, next_cursor)) {
        set_error(out, "GET /app/hook/deliveries: a rel=\"next\" link without a usable cursor");
        return CRCR_E_INVALID;
    }
    return CRCR_OK;
}

crcr_err gh_hook_redeliver(gh_client *gh, int64_t delivery_id, gh_resp *out)
{
    if (delivery_id <= 0) {
        resp_start(out);
        set_error(out, "hook redelivery: invalid delivery id");
        return CRCR_E_INVALID;
    }
    char path[96];
    snprintf(path, sizeof(path), "/app/hook/deliveries/%lld/attempts", (long long)delivery_id);
    crcr_err err = gh_request(gh, GH_AUTH_APP, NULL, "POST", path, NULL, NULL, 0, out);
    if (err)
        return err;
    if (out->status != 202) {
        set_error(out, "POST /app/hook/deliveries/%lld/attempts: %ld", (long long)delivery_id,
                  out->status);
        return CRCR_E_HTTP;
    }
    return CRCR_OK;
}
