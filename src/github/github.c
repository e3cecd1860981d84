/*
 * github.c - the GitHub REST client: App JWT, cached installation ids and tokens, and requests over
 * http_loop.h; see github.h for the contract.
 *
 * Requests. Every call is a small state machine (gh_call): installation id, token, request, and
 * the one retry after a refused token or a stale installation id. A step that needs GitHub submits
 * one exchange to the client's http_loop and returns; the loop's thread runs the next step when
 * the answer is in. So no thread waits for GitHub: the blocking functions (gh_request,
 * gh_installation_id, gh_request_url) start a call and wait for its end on a condition variable
 * of their own, and the outbox starts calls with gh_start and hears of their end. Requests to
 * GITHUB_API_URL are the loop's budgeted exchanges (CRCR_GITHUB_CONCURRENCY in flight at most);
 * other URLs (the HUD's) are not.
 *
 * Token cache. repo (lower-cased) -> installation id and installation id -> token, both bounded
 * (CRCR_TOKEN_CACHE_MAX, oldest evicted) and protected by `mu`, which is never held during HTTP.
 * A missing entry is fetched by one call only ("single flight"): it inserts a pending entry and
 * asks GitHub; calls that need the same entry meanwhile are put on the entry's waiting list and
 * resumed (on the loop's thread) once it is settled, instead of minting a second token. Tokens
 * live in their own allocations and are wiped with OPENSSL_cleanse when dropped (our copies only:
 * curl's and jansson's internal buffers are out of reach, so wiping is best effort).
 *
 * App JWT. One JWT (RS256, iat = now - 60, exp = now + 540) serves every App-authenticated request
 * made within GH_JWT_REUSE_S of its signing: a cold fan-out to a hundred installations signed 200
 * JWTs (~0.3-1 ms of CPU each) one after another; GitHub accepts a JWT for as long as it is valid.
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
#include "http_loop.h"
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
/* An App JWT is reused for this long after it was signed (it stays valid for 9 minutes more). */
#define GH_JWT_REUSE_S 10
/* Idle connections the client's loop keeps for reuse. */
#define GH_IDLE_CONNECTIONS 256
/* Items per page of the delivery log GitHub serves at most. */
#define GH_HOOK_PER_PAGE_MAX 100

typedef struct inst_entry {
    char repo[CRCR_REPO_NAME_MAX]; /* lower-cased owner/name */
    int64_t id;
    uint64_t seq;            /* insertion order, for eviction */
    bool pending;            /* being looked up by one call */
    struct gh_call *waiters; /* calls waiting for the lookup (pending only) */
} inst_entry;

typedef struct tok_entry {
    int64_t inst;
    char *token; /* owned, NUL-terminated, wiped before free; NULL while pending */
    size_t len;
    int64_t expires_at; /* epoch seconds */
    uint64_t gen;       /* which mint produced it, so that a 401 drops exactly this token */
    uint64_t seq;
    bool pending;
    struct gh_call *waiters; /* calls waiting for the mint (pending only) */
} tok_entry;

struct gh_client {
    const crcr_config *cfg;
    EVP_PKEY *key; /* App private key; NULL without App credentials */
    char *api_url; /* owned copy without trailing '/' */
    bool url_ok;   /* https, or http to a loopback host */
    bool loopback; /* the API host is loopback: plain http is allowed too */
    bool iss_numeric;

    http_loop *loop; /* every exchange: its thread, connections and budget */

    pthread_mutex_t mu; /* the caches and the JWT below */
    inst_entry *inst;
    size_t n_inst, cap_inst;
    tok_entry *tok;
    size_t n_tok, cap_tok;
    uint64_t seq, gen;
    char *jwt; /* the App JWT being reused (owned, wiped), NULL when none */
    size_t jwt_len;
    int64_t jwt_signed; /* clock seconds when it was signed */

    _Atomic uint64_t st_api_calls, st_token_hits, st_token_misses, st_install_hits,
        st_install_misses, st_jwt_signs;
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

static void jwt_drop(gh_client *gh)
{
    if (gh->jwt) {
        OPENSSL_cleanse(gh->jwt, gh->jwt_len);
        free(gh->jwt);
    }
    gh->jwt = NULL;
    gh->jwt_len = 0;
}

/* The App JWT into `out` (emptied first): the one signed within GH_JWT_REUSE_S, else a new one,
 * which is then kept. A clock moved backwards also signs anew. */
static crcr_err jwt_current(gh_client *gh, buf_t *out)
{
    int64_t now = clock_now_ms() / 1000;
    buf_reset(out);
    pthread_mutex_lock(&gh->mu);
    if (gh->jwt && now >= gh->jwt_signed && now - gh->jwt_signed < GH_JWT_REUSE_S) {
        crcr_err e = buf_append(out, gh->jwt, gh->jwt_len);
        pthread_mutex_unlock(&gh->mu);
        return e;
    }
    pthread_mutex_unlock(&gh->mu);
    crcr_err err = gh_app_jwt(gh, now, out);
    if (err)
        return err;
    atomic_fetch_add_explicit(&gh->st_jwt_signs, 1, memory_order_relaxed);
    char *copy = malloc(out->len + 1);
    if (copy) {
        memcpy(copy, out->data, out->len + 1);
        pthread_mutex_lock(&gh->mu);
        jwt_drop(gh);
        gh->jwt = copy;
        gh->jwt_len = out->len;
        gh->jwt_signed = now;
        pthread_mutex_unlock(&gh->mu);
    }
    return CRCR_OK;
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
    e->waiters = NULL;
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
    e->waiters = NULL;
    return e;
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

/* Drops the cached token of `inst` if it is still the one identified by `gen`. */
static void token_drop(gh_client *gh, int64_t inst, uint64_t gen)
{
    pthread_mutex_lock(&gh->mu);
    tok_entry *e = tok_find(gh, inst);
    if (e && !e->pending && e->gen == gen)
        tok_remove(gh, e);
    pthread_mutex_unlock(&gh->mu);
}

/* ---------------------------------------------------------------- calls */

typedef enum {
    ST_START,      /* authentication chosen: where to begin */
    ST_INST,       /* the installation id: cache, a waiting list, or a lookup */
    ST_INST_WAIT,  /* the lookup is out */
    ST_TOKEN,      /* the installation token: cache, a waiting list, or a mint */
    ST_TOKEN_WAIT, /* the mint is out */
    ST_SEND,       /* the request itself */
    ST_SEND_WAIT   /* the request is out */
} gh_stage;

/* One call (gh_start): owned by the client from gh_start until its `done` runs. */
typedef struct gh_call {
    gh_client *gh;
    gh_stage stage;
    gh_auth auth;
    bool lookup_only;
    bool api;      /* to GITHUB_API_URL (a budgeted exchange), else to `url` */
    bool loopback; /* plain http allowed */
    const char *url;
    const char *method, *path, *body;
    size_t body_len;
    const char *const *extra;
    char key[CRCR_REPO_NAME_MAX];
    int64_t inst;
    bool inst_cached;  /* the id came from a cache (memory, or the caller's store) */
    bool inst_retried; /* a stale id was dropped once already */
    bool tok_cached, tok_retried;
    bool owner;       /* this call settles the pending entry it added */
    int64_t start_by; /* gh_req.start_by_ms */
    uint64_t gen;
    char tok[CRCR_TOKEN_MAX + 1];
    char step_path[64 + CRCR_REPO_NAME_MAX];
    buf_t url_buf, jwt, scratch;
    const char *hdrs[GH_EXTRA_HEADERS_MAX + 4];
    http_call rq;
    http_answer ans;
    gh_resp *out;
    gh_done_fn done;
    void *ud;
    struct gh_call *next_waiter;
} gh_call;

static void advance(gh_call *c);

/* Ends the call: wipes and frees it, then tells the caller. */
static void call_end(gh_call *c, crcr_err err)
{
    gh_done_fn done = c->done;
    void *ud = c->ud;
    OPENSSL_cleanse(c->tok, sizeof(c->tok));
    buf_wipe_free(&c->jwt);
    buf_wipe_free(&c->scratch);
    buf_free(&c->url_buf);
    free(c);
    done(ud, err);
}

/* Resumes the calls of a waiting list (their entry was settled, or failed: they look again). */
static void resume_all(gh_call *w)
{
    while (w) {
        gh_call *next = w->next_waiter;
        w->next_waiter = NULL;
        advance(w);
        w = next;
    }
}

static void on_answer(void *ud, crcr_err err);

/*
 * Submits one exchange to `base` + `path` (base NULL: GITHUB_API_URL) whose answer body goes to
 * `sink` (out->body or the private buffer of a secret answer; emptied first); `bearer` (borrowed
 * until the answer) becomes the Authorization header. The answer resumes the call in
 * c->stage + 1. Returns false (the call ended) when it could not be submitted.
 */
static bool submit(gh_call *c, const char *base, const char *path, const char *bearer,
                   const char *const *extra, const char *body, size_t body_len, buf_t *sink)
{
    gh_client *gh = c->gh;
    gh_resp *out = c->out;
    out->status = 0;
    out->error[0] = '\0';
    out->retry_after_s = -1;
    out->rl_remaining = -1;
    out->rl_reset = -1;
    out->etag[0] = '\0';
    out->link_next[0] = '\0';
    buf_reset(&out->body);
    buf_reset(&c->url_buf);
    crcr_err err = buf_puts(&c->url_buf, base ? base : gh->api_url);
    if (!err)
        err = buf_puts(&c->url_buf, path);
    if (err) {
        set_error(out, "%s %s: URL too long", c->rq.method, path);
        call_end(c, CRCR_E_INVALID);
        return false;
    }
    size_t nh = 0;
    c->hdrs[nh++] = "Accept: application/vnd.github+json";
    c->hdrs[nh++] = "X-GitHub-Api-Version: 2022-11-28";
    c->hdrs[nh++] = body ? "Content-Type: application/json" : "Content-Type:";
    for (size_t i = 0; extra && extra[i] && i < GH_EXTRA_HEADERS_MAX; i++)
        c->hdrs[nh++] = extra[i];
    c->hdrs[nh] = NULL;
    c->rq = (http_call){.method = c->rq.method,
                        .url = c->url_buf.data,
                        .allow_http = base ? c->loopback : gh->loopback,
                        .user_agent = GH_USER_AGENT,
                        .headers = c->hdrs,
                        .auth_scheme = bearer ? "Bearer" : NULL,
                        .auth_credential = bearer,
                        .body = body,
                        .body_len = body_len,
                        .connect_timeout_ms = CRCR_GH_CONNECT_TIMEOUT_MS,
                        .timeout_ms = CRCR_GH_TIMEOUT_MS,
                        .start_by_ms = c->start_by};
    c->ans = (http_answer){.body = sink};
    c->stage++; /* the *_WAIT stage that follows */
    err = http_loop_submit(gh->loop, &c->rq, &c->ans, c->api, on_answer, c);
    if (err) {
        set_error(out, "%s %s: %s", c->rq.method, path, c->ans.error);
        call_end(c, err);
        return false;
    }
    return true;
}

/* What an answer tells about the exchange's request (out->error set when it failed). */
static crcr_err took_answer(gh_call *c, crcr_err err)
{
    gh_resp *out = c->out;
    http_answer *a = &c->ans;
    if (a->sent) {
        out->api_calls++;
        atomic_fetch_add_explicit(&c->gh->st_api_calls, 1, memory_order_relaxed);
        metrics_github_request(c->api ? c->rq.url + strlen(c->gh->api_url) : NULL, a->status);
    }
    out->status = a->status;
    out->retry_after_s = a->retry_after_s;
    out->rl_remaining = a->rl_remaining;
    out->rl_reset = a->rl_reset;
    memcpy(out->etag, a->etag, sizeof(out->etag));
    memcpy(out->link_next, a->link_next, sizeof(out->link_next));
    if (err) {
        const char *path = c->api ? c->rq.url + strlen(c->gh->api_url) : "";
        set_error(out, "%s %s: %s", c->rq.method, path, a->error);
    }
    return err;
}

/* Ends the installation lookup this call made: the entry settled, the waiting calls resumed. */
static void settle_inst(gh_call *c, bool ok, int64_t id)
{
    gh_client *gh = c->gh;
    gh_call *waiters = NULL;
    pthread_mutex_lock(&gh->mu);
    inst_entry *e;
    if (c->owner && (e = inst_find(gh, c->key)) && e->pending) {
        waiters = e->waiters;
        e->waiters = NULL;
        if (ok) {
            e->id = id;
            e->pending = false;
        } else {
            inst_remove(gh, e);
        }
    }
    c->owner = false;
    pthread_mutex_unlock(&gh->mu);
    resume_all(waiters);
}

/* Ends the mint this call made. */
static void settle_tok(gh_call *c, bool ok, int64_t expires_at)
{
    gh_client *gh = c->gh;
    gh_call *waiters = NULL;
    pthread_mutex_lock(&gh->mu);
    c->gen = ++gh->gen;
    tok_entry *e;
    if (c->owner && (e = tok_find(gh, c->inst)) && e->pending) {
        waiters = e->waiters;
        e->waiters = NULL;
        size_t n = ok ? strlen(c->tok) : 0;
        char *copy = ok ? malloc(n + 1) : NULL;
        if (!copy) {
            tok_remove(gh, e); /* failed, or no memory to cache: the next caller mints */
        } else {
            memcpy(copy, c->tok, n + 1);
            e->token = copy;
            e->len = n;
            e->expires_at = expires_at;
            e->gen = c->gen;
            e->pending = false;
        }
    }
    c->owner = false;
    pthread_mutex_unlock(&gh->mu);
    resume_all(waiters);
}

/* ST_INST: the installation id from the cache, by waiting for another call's lookup, or by a
 * lookup of its own (GET /repos/{key}/installation with the App JWT). false: parked or ended. */
static bool step_inst(gh_call *c)
{
    gh_client *gh = c->gh;
    pthread_mutex_lock(&gh->mu);
    inst_entry *e = inst_find(gh, c->key);
    if (e && e->pending) {
        c->next_waiter = e->waiters;
        e->waiters = c;
        pthread_mutex_unlock(&gh->mu);
        return false;
    }
    if (e) {
        c->inst = e->id;
        c->inst_cached = true;
        c->out->installation = e->id;
        pthread_mutex_unlock(&gh->mu);
        atomic_fetch_add_explicit(&gh->st_install_hits, 1, memory_order_relaxed);
        if (c->lookup_only) {
            call_end(c, CRCR_OK);
            return false;
        }
        c->stage = ST_TOKEN;
        return true;
    }
    c->owner = inst_add_pending(gh, c->key) != NULL;
    pthread_mutex_unlock(&gh->mu);
    atomic_fetch_add_explicit(&gh->st_install_misses, 1, memory_order_relaxed);
    crcr_err err = jwt_current(gh, &c->jwt);
    if (err) {
        set_error(c->out, "installation lookup: cannot sign the App JWT (%s)", crcr_strerror(err));
        settle_inst(c, false, 0);
        call_end(c, err == CRCR_E_NOMEM ? err : CRCR_E_CRYPTO);
        return false;
    }
    snprintf(c->step_path, sizeof(c->step_path), "/repos/%s/installation", c->key);
    c->rq.method = "GET";
    c->stage = ST_INST;
    submit(c, NULL, c->step_path, c->jwt.data, NULL, NULL, 0, &c->out->body);
    return false;
}

/* ST_INST_WAIT: the lookup's answer. */
static bool step_inst_answer(gh_call *c, crcr_err err)
{
    gh_resp *out = c->out;
    err = took_answer(c, err);
    int64_t v = 0;
    if (err) {
        set_error(out, "installation lookup: %s", out->error);
    } else if (out->status != 200) {
        if (out->status == 404)
            set_error(out, "installation lookup: 404 (App not installed on %s)", c->key);
        else
            set_error(out, "installation lookup: %ld", out->status);
        err = CRCR_E_HTTP;
    } else {
        jv *doc = jv_parse(buf_cstr(&out->body), out->body.len, NULL, 0);
        bool ok = doc && jv_int(jv_get(doc, "id"), &v) && v > 0;
        jv_free(doc);
        if (!ok) {
            set_error(out, "installation lookup: answer without an installation id");
            err = CRCR_E_INVALID;
        }
    }
    settle_inst(c, !err, v);
    if (err) {
        call_end(c, err);
        return false;
    }
    c->inst = v;
    c->inst_cached = false;
    out->installation = v;
    out->installation_looked_up = true;
    if (c->lookup_only) {
        call_end(c, CRCR_OK);
        return false;
    }
    c->stage = ST_TOKEN;
    return true;
}

/* ST_TOKEN: the installation token from the cache (while more than GH_TOKEN_MARGIN_S from
 * expiry), by waiting for another call's mint, or by a mint of its own (POST
 * /app/installations/{id}/access_tokens with the App JWT). */
static bool step_token(gh_call *c)
{
    gh_client *gh = c->gh;
    pthread_mutex_lock(&gh->mu);
    if (c->inst_cached) {
        /* Resumed after another call found the id stale: look it up again. */
        inst_entry *ie = inst_find(gh, c->key);
        if (!ie || ie->pending || ie->id != c->inst) {
            pthread_mutex_unlock(&gh->mu);
            c->inst = 0;
            c->inst_cached = false;
            c->stage = ST_INST;
            return true;
        }
    }
    tok_entry *e = tok_find(gh, c->inst);
    if (e && e->pending) {
        c->next_waiter = e->waiters;
        e->waiters = c;
        pthread_mutex_unlock(&gh->mu);
        return false;
    }
    int64_t now = clock_now_ms() / 1000;
    if (e && e->token && now < e->expires_at - GH_TOKEN_MARGIN_S) {
        memcpy(c->tok, e->token, e->len + 1);
        c->gen = e->gen;
        c->tok_cached = true;
        pthread_mutex_unlock(&gh->mu);
        atomic_fetch_add_explicit(&gh->st_token_hits, 1, memory_order_relaxed);
        c->stage = ST_SEND;
        return true;
    }
    if (e) {
        tok_wipe(e); /* expiring: this call mints its successor */
        e->pending = true;
        e->waiters = NULL;
    } else {
        e = tok_add_pending(gh, c->inst);
    }
    c->owner = e != NULL;
    pthread_mutex_unlock(&gh->mu);
    c->tok_cached = false;
    atomic_fetch_add_explicit(&gh->st_token_misses, 1, memory_order_relaxed);

    static const char zeros[1024];
    buf_reset(&c->scratch);
    for (size_t i = 0; i < GH_AUTH_BODY_RESERVE / sizeof(zeros); i++)
        buf_append(&c->scratch, zeros, sizeof(zeros));
    buf_reset(&c->scratch);
    snprintf(c->step_path, sizeof(c->step_path), "/app/installations/%lld/access_tokens",
             (long long)c->inst);
    crcr_err err = jwt_current(gh, &c->jwt);
    if (err) {
        set_error(c->out, "token mint: cannot sign the App JWT (%s)", crcr_strerror(err));
        settle_tok(c, false, 0);
        call_end(c, err == CRCR_E_NOMEM ? err : CRCR_E_CRYPTO);
        return false;
    }
    c->rq.method = "POST";
    c->stage = ST_TOKEN;
    submit(c, NULL, c->step_path, c->jwt.data, NULL, NULL, 0, &c->scratch);
    return false;
}

/* ST_TOKEN_WAIT: the mint's answer. The body holding the token stays in c->scratch (wiped);
 * out->body gets only a failure answer, which carries no token. */
static bool step_token_answer(gh_call *c, crcr_err err)
{
    gh_resp *out = c->out;
    err = took_answer(c, err);
    int64_t expires_at = 0;
    if (err) {
        set_error(out, "token mint: %s", out->error);
    } else if (out->status != 201) {
        buf_append(&out->body, buf_cstr(&c->scratch), c->scratch.len);
        set_error(out, "token mint: %ld", out->status);
        err = CRCR_E_HTTP;
    } else {
        jv *doc = jv_parse(buf_cstr(&c->scratch), c->scratch.len, NULL, 0);
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
            memcpy(c->tok, s, n + 1);
            const char *exp = jv_str(jv_get(doc, "expires_at"));
            if (!exp || !http_parse_iso8601_utc(exp, &expires_at))
                expires_at = 0;
        }
        jv_free(doc);
    }
    buf_wipe_free(&c->scratch);
    if (!err && expires_at == 0) {
        char idbuf[24];
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)c->inst);
        LOG_WARN("github.token_expiry_unparsed", "installation", idbuf, NULL);
    }
    settle_tok(c, !err, expires_at);
    if (err == CRCR_E_HTTP && out->status == 404 && c->inst_cached && !c->inst_retried) {
        /* The App was reinstalled: the id changed. Look it up again, once. */
        install_drop(c->gh, c->key, c->inst);
        c->inst_retried = true;
        c->inst = 0;
        c->inst_cached = false;
        out->installation = 0;
        out->installation_dropped = true;
        c->stage = ST_INST;
        return true;
    }
    if (err) {
        call_end(c, err);
        return false;
    }
    c->stage = ST_SEND;
    return true;
}

/* ST_SEND: the request itself, with whatever authentication the call has. */
static bool step_send(gh_call *c)
{
    const char *bearer = NULL;
    if (c->auth == GH_AUTH_INSTALLATION) {
        bearer = c->tok;
    } else if (c->auth == GH_AUTH_APP) {
        crcr_err err = jwt_current(c->gh, &c->jwt);
        if (err) {
            set_error(c->out, "cannot sign the App JWT (%s)", crcr_strerror(err));
            call_end(c, err == CRCR_E_NOMEM ? err : CRCR_E_CRYPTO);
            return false;
        }
        bearer = c->jwt.data;
    }
    c->rq.method = c->method;
    c->stage = ST_SEND;
    submit(c, c->api ? NULL : c->url, c->api ? c->path : "", bearer, c->extra, c->body, c->body_len,
           &c->out->body);
    return false;
}

/* ST_SEND_WAIT: the request's answer, and its one retry with a new token (401 to a cached token)
 * or after a new lookup (404 with a cached installation id: the repository may have left the
 * installation, or the App was reinstalled). */
static bool step_send_answer(gh_call *c, crcr_err err)
{
    gh_resp *out = c->out;
    err = took_answer(c, err);
    if (!err && c->auth == GH_AUTH_INSTALLATION && out->status == 401 && c->tok_cached &&
        !c->tok_retried) {
        char idbuf[24];
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)c->inst);
        LOG_INFO("github.token_rejected", "installation", idbuf, "repo", c->key, NULL);
        token_drop(c->gh, c->inst, c->gen);
        c->tok_retried = true;
        c->stage = ST_TOKEN;
        return true;
    }
    if (!err && c->auth == GH_AUTH_INSTALLATION && out->status == 404 && c->inst_cached &&
        !c->inst_retried) {
        char idbuf[24];
        snprintf(idbuf, sizeof(idbuf), "%lld", (long long)c->inst);
        LOG_INFO("github.installation_stale", "installation", idbuf, "repo", c->key, NULL);
        install_drop(c->gh, c->key, c->inst);
        c->inst_retried = true;
        c->inst = 0;
        c->inst_cached = false;
        out->installation = 0;
        out->installation_dropped = true;
        c->stage = ST_INST;
        return true;
    }
    call_end(c, err);
    return false;
}

/* Runs the call's steps until one waits (for GitHub or another call) or the call ends. */
static void advance(gh_call *c)
{
    bool go = true;
    while (go) {
        switch (c->stage) {
        case ST_START:
            c->stage = c->auth == GH_AUTH_INSTALLATION ? (c->inst ? ST_TOKEN : ST_INST) : ST_SEND;
            if (c->lookup_only && c->inst) {
                c->out->installation = c->inst;
                call_end(c, CRCR_OK);
                return;
            }
            break;
        case ST_INST:
            go = step_inst(c);
            break;
        case ST_TOKEN:
            go = step_token(c);
            break;
        case ST_SEND:
            go = step_send(c);
            break;
        default: /* the *_WAIT stages are left by on_answer only */
            go = false;
            break;
        }
    }
}

/* An exchange's answer (on the loop's thread). */
static void on_answer(void *ud, crcr_err err)
{
    gh_call *c = ud;
    bool go = false;
    switch (c->stage) {
    case ST_INST_WAIT:
        go = step_inst_answer(c, err);
        break;
    case ST_TOKEN_WAIT:
        go = step_token_answer(c, err);
        break;
    default:
        go = step_send_answer(c, err);
        break;
    }
    if (go)
        advance(c);
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
    r->installation = 0;
    r->installation_looked_up = false;
    r->installation_dropped = false;
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

    long cap =
        cfg->github_concurrency > 0 ? cfg->github_concurrency : CRCR_GITHUB_CONCURRENCY_DEFAULT;
    char lerr[128] = "";
    gh->loop = http_loop_new(cap, GH_IDLE_CONNECTIONS, lerr, sizeof(lerr));
    if (!gh->loop) {
        snprintf(err, errsz, "github: %s", lerr);
        gh_client_free(gh);
        return NULL;
    }
    return gh;
}

/* Stops the loop (calls still out end with CRCR_E_NETWORK), frees the caches (tokens wiped) and
 * the key. Call it once nothing starts calls any more. */
void gh_client_free(gh_client *gh)
{
    if (!gh)
        return;
    http_loop_free(gh->loop);
    for (size_t i = 0; i < gh->n_tok; i++)
        tok_wipe(&gh->tok[i]);
    free(gh->tok);
    free(gh->inst);
    jwt_drop(gh);
    EVP_PKEY_free(gh->key);
    free(gh->api_url);
    pthread_mutex_destroy(&gh->mu);
    free(gh);
}

void gh_get_stats(gh_client *gh, gh_stats *out)
{
    out->api_calls = atomic_load(&gh->st_api_calls);
    out->token_hits = atomic_load(&gh->st_token_hits);
    out->token_misses = atomic_load(&gh->st_token_misses);
    out->install_hits = atomic_load(&gh->st_install_hits);
    out->install_misses = atomic_load(&gh->st_install_misses);
    out->jwt_signs = atomic_load(&gh->st_jwt_signs);
}

/* Resets *out for a new call. */
static void resp_start(gh_resp *out)
{
    out->status = 0;
    buf_reset(&out->body);
    out->retry_after_s = -1;
    out->rl_remaining = -1;
    out->rl_reset = -1;
    out->etag[0] = '\0';
    out->link_next[0] = '\0';
    out->error[0] = '\0';
    out->api_calls = 0;
    out->installation = 0;
    out->installation_looked_up = false;
    out->installation_dropped = false;
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

crcr_err gh_start(gh_client *gh, const gh_req *rq, gh_resp *out, gh_done_fn done, void *ud)
{
    if (!out)
        return CRCR_E_INVALID;
    resp_start(out);
    if (!gh || !rq || !rq->method || (!rq->path && !rq->url) || !done) {
        set_error(out, "missing client, method or path");
        return CRCR_E_INVALID;
    }
    bool loopback = false;
    if (rq->url) {
        if (!http_url_check(rq->url, &loopback)) {
            set_error(out, "URL refused: only https, or http to a loopback host");
            return CRCR_E_INVALID;
        }
    }
    crcr_err err = check_request(gh, rq->method, rq->url ? "/" : rq->path, rq->headers, rq->body,
                                 rq->body_len, out);
    if (err)
        return err;
    gh_auth auth = rq->url ? GH_AUTH_NONE : rq->auth;
    if (auth != GH_AUTH_NONE && !gh->key) {
        set_error(out, "no GitHub App credentials (dry run)");
        return CRCR_E_INVALID;
    }
    if (auth != GH_AUTH_NONE && auth != GH_AUTH_APP && auth != GH_AUTH_INSTALLATION) {
        set_error(out, "unknown authentication mode");
        return CRCR_E_INVALID;
    }
    gh_call *c = calloc(1, sizeof(*c));
    if (!c) {
        set_error(out, "out of memory");
        return CRCR_E_NOMEM;
    }
    if (auth == GH_AUTH_INSTALLATION && repo_key(rq->repo, c->key) != CRCR_OK) {
        free(c);
        set_error(out, "invalid repository name");
        return CRCR_E_INVALID;
    }
    c->gh = gh;
    c->stage = ST_START;
    c->auth = auth;
    c->lookup_only = rq->lookup_only && auth == GH_AUTH_INSTALLATION;
    c->api = rq->url == NULL;
    c->loopback = loopback;
    c->url = rq->url;
    c->method = rq->method;
    c->path = rq->path;
    c->body = rq->body;
    c->body_len = rq->body_len;
    c->extra = rq->headers;
    c->start_by = rq->start_by_ms;
    c->out = out;
    c->done = done;
    c->ud = ud;
    buf_init(&c->url_buf, GH_URL_MAX);
    buf_init(&c->jwt, GH_JWT_MAX);
    buf_init(&c->scratch, GH_AUTH_BODY_MAX);
    if (auth == GH_AUTH_INSTALLATION && rq->installation > 0) {
        /* The caller's id (its store's): a cached id, dropped like one when found stale. */
        c->inst = rq->installation;
        c->inst_cached = true;
        gh_installation_seed(gh, rq->repo, rq->installation);
    }
    advance(c);
    return CRCR_OK;
}

/* ---- the blocking calls: a call and a wait for its end ---- */

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    crcr_err err;
} sync_wait;

static void sync_done(void *ud, crcr_err err)
{
    sync_wait *w = ud;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    w->err = err;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static crcr_err run_sync(gh_client *gh, const gh_req *rq, gh_resp *out)
{
    if (gh && http_loop_on_thread(gh->loop)) {
        resp_start(out);
        set_error(out, "a blocking GitHub call on the HTTP loop's thread");
        return CRCR_E_STATE;
    }
    sync_wait w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    crcr_err err = gh_start(gh, rq, out, sync_done, &w);
    if (!err) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        err = w.err;
        pthread_mutex_unlock(&w.mu);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return err;
}

crcr_err gh_request(gh_client *gh, gh_auth auth, const char *repo, const char *method,
                    const char *path, const char *const *extra_headers, const char *body,
                    size_t body_len, gh_resp *out)
{
    gh_req rq = {.auth = auth,
                 .repo = repo,
                 .method = method,
                 .path = path,
                 .headers = extra_headers,
                 .body = body,
                 .body_len = body_len};
    return run_sync(gh, &rq, out);
}

crcr_err gh_installation_id(gh_client *gh, const char *repo, int64_t *id, gh_resp *out)
{
    if (!out)
        return CRCR_E_INVALID;
    if (!id) {
        resp_start(out);
        set_error(out, "missing client or id");
        return CRCR_E_INVALID;
    }
    gh_req rq = {.auth = GH_AUTH_INSTALLATION,
                 .repo = repo,
                 .method = "GET",
                 .path = "/",
                 .lookup_only = true};
    crcr_err err = run_sync(gh, &rq, out);
    if (!err)
        *id = out->installation;
    return err;
}

crcr_err gh_request_url(gh_client *gh, const char *method, const char *url,
                        const char *const *extra_headers, const char *body, size_t body_len,
                        gh_resp *out)
{
    if (!out)
        return CRCR_E_INVALID;
    if (!url) {
        resp_start(out);
        set_error(out, "missing client, method or URL");
        return CRCR_E_INVALID;
    }
    gh_req rq = {
        .method = method, .url = url, .headers = extra_headers, .body = body, .body_len = body_len};
    return run_sync(gh, &rq, out);
}

/* ---- the installation id cache, for callers that keep ids elsewhere too ---- */

bool gh_installation_cached(gh_client *gh, const char *repo, int64_t *id)
{
    char key[CRCR_REPO_NAME_MAX];
    if (!gh || repo_key(repo, key) != CRCR_OK)
        return false;
    pthread_mutex_lock(&gh->mu);
    inst_entry *e = inst_find(gh, key);
    bool hit = e && !e->pending;
    if (hit)
        *id = e->id;
    pthread_mutex_unlock(&gh->mu);
    return hit;
}

void gh_installation_seed(gh_client *gh, const char *repo, int64_t id)
{
    char key[CRCR_REPO_NAME_MAX];
    if (!gh || id <= 0 || repo_key(repo, key) != CRCR_OK)
        return;
    pthread_mutex_lock(&gh->mu);
    inst_entry *e = inst_find(gh, key);
    if (!e) {
        e = inst_add_pending(gh, key);
        if (e) {
            e->id = id;
            e->pending = false;
        }
    }
    pthread_mutex_unlock(&gh->mu);
}

size_t gh_installation_forget(gh_client *gh, int64_t id)
{
    size_t n = 0;
    if (!gh)
        return 0;
    pthread_mutex_lock(&gh->mu);
    for (size_t i = 0; i < gh->n_inst;) {
        if (!gh->inst[i].pending && gh->inst[i].id == id) {
            inst_remove(gh, &gh->inst[i]);
            n++;
        } else {
            i++;
        }
    }
    tok_entry *t = tok_find(gh, id);
    if (t && !t->pending)
        tok_remove(gh, t);
    pthread_mutex_unlock(&gh->mu);
    return n;
}

http_loop *gh_loop(gh_client *gh)
{
    return gh ? gh->loop : NULL;
}

void gh_drain(gh_client *gh)
{
    if (gh)
        http_loop_drain(gh->loop);
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
