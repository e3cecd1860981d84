/*
 * github.c - the GitHub REST client: App JWT, cached installation ids and tokens, and requests over
 * libcurl; see github.h for the contract.
 *
 * Connections. Each call borrows an idle curl easy handle from the client's pool (one handle per
 * concurrently running caller, created on demand) and gives it back afterwards. An easy handle
 * keeps its connection alive, so the next call, from whatever thread, reuses the TCP/TLS
 * connection. The CURLSH shares the DNS cache and TLS sessions between handles (both are safe to
 * share across threads with the lock callbacks below). The connection cache is deliberately NOT
 * shared: CURLSHOPT_SHARE documents for CURL_LOCK_DATA_CONNECT that sharing connections between
 * concurrent threads is not supported (curl KNOWN_BUGS "A shared connection cache is not
 * thread-safe", curl issue #4915, still open for the 7.88 Debian 12 ships).
 *
 * Token cache. repo (lower-cased) -> installation id and installation id -> token, both bounded
 * (CRCR_TOKEN_CACHE_MAX, oldest evicted) and protected by `mu`, which is never held during HTTP.
 * A missing entry is fetched by one thread only ("single flight"): it inserts a pending entry,
 * releases the lock for the HTTP call and broadcasts `cond` when done; other threads that need the
 * same entry wait on `cond` instead of minting a second token. Tokens live in their own
 * allocations and are wiped with OPENSSL_cleanse when dropped (our copies only: curl's and
 * jansson's internal buffers are out of reach, so wiping is best effort).
 *
 * Date parsers (ISO-8601 expires_at, IMF-fixdate Retry-After) are hand-written: they are a few
 * lines, locale-independent and avoid sscanf/strptime.
 */
#include "github.h"

#include <arpa/inet.h>
#include <curl/curl.h>
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
#include "limits.h" /* also the system <limits.h>: LONG_MAX */
#include "log.h"
#include "metrics.h"

#ifndef CRCR_VERSION
#define CRCR_VERSION "dev"
#endif

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
/* Extra header lines a caller may add, and the longest one. */
#define GH_EXTRA_HEADERS_MAX 16u
#define GH_HEADER_LINE_MAX 1024u
/* Largest answer of an authentication step (installation object, access token). */
#define GH_AUTH_BODY_MAX (256u * 1024u)
/* Bytes reserved up front for the token answer, so that the buffer holding the token is not
 * reallocated (which would leave an unwiped copy behind) for any normal answer. */
#define GH_AUTH_BODY_RESERVE (16u * 1024u)
/* Longest header value the header callback looks at (Retry-After, rate limits, ETag). */
#define GH_HEADER_VALUE_MAX 256u

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

typedef struct easy_slot {
    CURL *h;
    struct easy_slot *next;
} easy_slot;

struct gh_client {
    const crcr_config *cfg;
    EVP_PKEY *key; /* App private key; NULL without App credentials */
    char *api_url; /* owned copy without trailing '/' */
    bool url_ok;   /* https, or http to a loopback host */
    bool loopback; /* the API host is loopback: plain http is allowed too */
    bool iss_numeric;

    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_mu;
    easy_slot *idle; /* handles not in use (LIFO, so warm connections are reused first) */

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

/* Case-insensitive (ASCII) comparison of `a[0..n)` with the NUL-terminated `b`. */
static bool eq_ci(const char *a, size_t n, const char *b)
{
    size_t bl = strlen(b);
    if (n != bl)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (ascii_lower(a[i]) != ascii_lower(b[i]))
            return false;
    }
    return true;
}

/* Parses exactly `n` decimal digits at `s`. */
static bool parse_fixed_digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* Parses a whole string of 1-18 decimal digits (no sign, no spaces). */
static bool parse_uint(const char *s, int64_t *out)
{
    int64_t v = 0;
    size_t i = 0;
    for (; s[i]; i++) {
        if (!is_digit(s[i]) || i >= 18)
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (i == 0)
        return false;
    *out = v;
    return true;
}

static bool is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int y, int m)
{
    static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : d[m - 1];
}

/* Epoch seconds of a UTC calendar time after range checks; false when out of range. */
static bool utc_epoch(int y, int mo, int d, int h, int mi, int s, int64_t *out)
{
    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59 || s > 60)
        return false;
    struct tm tm = {0};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return false;
    *out = (int64_t)t;
    return true;
}

/* Parses GitHub's expires_at: "YYYY-MM-DDTHH:MM:SSZ", optionally with ".fraction" and with
 * "+00:00" instead of "Z". */
static bool parse_iso8601_utc(const char *s, int64_t *out)
{
    int y, mo, d, h, mi, sec;
    size_t n = strlen(s);
    if (n < 20 || !parse_fixed_digits(s, 4, &y) || s[4] != '-' ||
        !parse_fixed_digits(s + 5, 2, &mo) || s[7] != '-' || !parse_fixed_digits(s + 8, 2, &d) ||
        (s[10] != 'T' && s[10] != 't') || !parse_fixed_digits(s + 11, 2, &h) || s[13] != ':' ||
        !parse_fixed_digits(s + 14, 2, &mi) || s[16] != ':' || !parse_fixed_digits(s + 17, 2, &sec))
        return false;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (!is_digit(*p))
            return false;
        while (is_digit(*p))
            p++;
    }
    if (!((p[0] == 'Z' || p[0] == 'z') && p[1] == '\0') && strcmp(p, "+00:00") != 0)
        return false;
    return utc_epoch(y, mo, d, h, mi, sec, out);
}

/* Parses an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110 §5.6.7). */
static bool parse_imf_fixdate(const char *s, int64_t *out)
{
    static const char *days[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    if (strlen(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
        s[16] != ' ' || s[19] != ':' || s[22] != ':' || s[25] != ' ' || strcmp(s + 26, "GMT") != 0)
        return false;
    bool day_ok = false;
    for (size_t i = 0; i < 7; i++)
        day_ok = day_ok || memcmp(s, days[i], 3) == 0;
    int mo = 0;
    for (int i = 0; i < 12; i++) {
        if (memcmp(s + 8, months[i], 3) == 0)
            mo = i + 1;
    }
    int d, y, h, mi, sec;
    if (!day_ok || !mo || !parse_fixed_digits(s + 5, 2, &d) || !parse_fixed_digits(s + 12, 4, &y) ||
        !parse_fixed_digits(s + 17, 2, &h) || !parse_fixed_digits(s + 20, 2, &mi) ||
        !parse_fixed_digits(s + 23, 2, &sec))
        return false;
    return utc_epoch(y, mo, d, h, mi, sec, out);
}

long gh_parse_retry_after(const char *value, int64_t now)
{
    if (!value)
        return -1;
    int64_t v;
    if (is_digit(value[0])) {
        if (!parse_uint(value, &v) || v > LONG_MAX)
            return -1;
        return (long)v;
    }
    if (!parse_imf_fixdate(value, &v))
        return -1;
    if (v <= now)
        return 0;
    return v - now > LONG_MAX ? LONG_MAX : (long)(v - now);
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

/* ---------------------------------------------------------------- curl plumbing */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    gh_client *gh = ud;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&gh->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    gh_client *gh = ud;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&gh->share_mu[data]);
}

/* Takes an idle easy handle, or creates one. The caller gives it back with easy_release(). */
static easy_slot *easy_acquire(gh_client *gh)
{
    pthread_mutex_lock(&gh->pool_mu);
    easy_slot *s = gh->idle;
    if (s)
        gh->idle = s->next;
    pthread_mutex_unlock(&gh->pool_mu);
    if (s)
        return s;
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->h = curl_easy_init();
    if (!s->h) {
        free(s);
        return NULL;
    }
    return s;
}

static void easy_release(gh_client *gh, easy_slot *s)
{
    pthread_mutex_lock(&gh->pool_mu);
    s->next = gh->idle;
    gh->idle = s;
    pthread_mutex_unlock(&gh->pool_mu);
}

typedef struct xfer {
    gh_resp *out;
    buf_t *sink;
    bool too_large;
    bool nomem;
} xfer;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    crcr_err err = buf_append(x->sink, p, n);
    if (err == CRCR_E_TOO_LARGE)
        x->too_large = true;
    else if (err)
        x->nomem = true;
    return err ? 0 : n; /* a short count makes curl abort the transfer */
}

/* Resets what a header block describes (a new status line starts a new block, e.g. after a
 * 100 Continue). */
static void answer_reset(gh_resp *out)
{
    out->retry_after_s = -1;
    out->rl_remaining = -1;
    out->rl_reset = -1;
    out->etag[0] = '\0';
}

static size_t on_header(char *p, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        answer_reset(x->out);
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return n;
    size_t name_len = (size_t)(colon - p);
    const char *v = colon + 1, *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t vlen = (size_t)(end - v);
    if (vlen >= GH_HEADER_VALUE_MAX)
        return n;
    char val[GH_HEADER_VALUE_MAX];
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    int64_t num;
    if (eq_ci(p, name_len, "retry-after")) {
        x->out->retry_after_s = gh_parse_retry_after(val, (int64_t)time(NULL));
    } else if (eq_ci(p, name_len, "x-ratelimit-remaining")) {
        if (parse_uint(val, &num) && num <= LONG_MAX)
            x->out->rl_remaining = (long)num;
    } else if (eq_ci(p, name_len, "x-ratelimit-reset")) {
        if (parse_uint(val, &num))
            x->out->rl_reset = num;
    } else if (eq_ci(p, name_len, "etag")) {
        if (vlen < sizeof(x->out->etag)) {
            memcpy(x->out->etag, val, vlen + 1);
        }
    }
    return n;
}

/* Wipes the Authorization line's copy inside a curl header list, then frees the list. */
static void headers_free(struct curl_slist *h)
{
    for (struct curl_slist *i = h; i; i = i->next) {
        if (i->data && strlen(i->data) >= 14 && eq_ci(i->data, 14, "authorization:"))
            OPENSSL_cleanse(i->data, strlen(i->data));
    }
    curl_slist_free_all(h);
}

/* Appends a header line; false on allocation failure (the list is then freed). */
static bool header_add(struct curl_slist **list, const char *line)
{
    struct curl_slist *n = curl_slist_append(*list, line);
    if (!n) {
        headers_free(*list);
        *list = NULL;
        return false;
    }
    *list = n;
    return true;
}

/*
 * Sends one HTTP request and describes its answer in *out (status, rate-limit headers, ETag,
 * error). The body goes to `sink` (out->body or a private buffer for secret answers); both are
 * emptied first. `bearer` (borrowed, may be NULL) becomes the Authorization header. Counts the
 * request in out->api_calls and the client's stats.
 * Returns CRCR_OK with out->status for any HTTP answer, CRCR_E_TOO_LARGE (status kept) when the
 * answer passed the sink's cap, CRCR_E_NETWORK (status 0) without an answer.
 */
/* One HTTP exchange to `base` + `path` (base NULL: GITHUB_API_URL). `loopback` allows plain
 * http. */
static crcr_err http_to(gh_client *gh, const char *base, bool loopback, const char *method,
                        const char *path, const char *bearer, const char *const *extra,
                        const char *body, size_t body_len, buf_t *sink, gh_resp *out)
{
    out->status = 0;
    out->error[0] = '\0';
    answer_reset(out);
    buf_reset(&out->body);
    buf_reset(sink);

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

    struct curl_slist *hdrs = NULL;
    bool ok = header_add(&hdrs, "Accept: application/vnd.github+json") &&
              header_add(&hdrs, "X-GitHub-Api-Version: 2022-11-28") &&
              header_add(&hdrs, "Expect:") &&
              header_add(&hdrs, body ? "Content-Type: application/json" : "Content-Type:");
    if (ok && bearer) {
        buf_t auth;
        buf_init(&auth, GH_JWT_MAX + CRCR_TOKEN_MAX + 32);
        ok = buf_puts(&auth, "Authorization: Bearer ") == CRCR_OK &&
             buf_puts(&auth, bearer) == CRCR_OK && header_add(&hdrs, auth.data);
        buf_wipe_free(&auth);
    }
    for (size_t i = 0; ok && extra && extra[i]; i++)
        ok = header_add(&hdrs, extra[i]);
    easy_slot *slot = ok ? easy_acquire(gh) : NULL;
    if (!slot) {
        headers_free(hdrs);
        buf_free(&url);
        set_error(out, "%s %s: out of memory", method, path);
        return CRCR_E_NOMEM;
    }

    CURL *h = slot->h;
    xfer x = {.out = out, .sink = sink};
    char errbuf[CURL_ERROR_SIZE] = "";
    CURLcode rc = CURLE_OK;
#define SETOPT(opt, val)                                                                           \
    do {                                                                                           \
        if (rc == CURLE_OK)                                                                        \
            rc = curl_easy_setopt(h, opt, val);                                                    \
    } while (0)
    curl_easy_reset(h);
    SETOPT(CURLOPT_SHARE, gh->share);
    SETOPT(CURLOPT_URL, url.data);
    SETOPT(CURLOPT_PROTOCOLS_STR, loopback ? "http,https" : "https");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, CRCR_GH_CONNECT_TIMEOUT_MS);
    SETOPT(CURLOPT_TIMEOUT_MS, CRCR_GH_TIMEOUT_MS);
    SETOPT(CURLOPT_USERAGENT, GH_USER_AGENT);
    SETOPT(CURLOPT_HTTPHEADER, hdrs);
    SETOPT(CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(CURLOPT_WRITEDATA, &x);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, &x);
    SETOPT(CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)sink->max);
    if (strcmp(method, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(method, "POST") != 0)
            SETOPT(CURLOPT_CUSTOMREQUEST, method);
        if (body || strcmp(method, "DELETE") != 0) {
            /* POST, PATCH and PUT always carry a body (possibly empty: Content-Length: 0). */
            SETOPT(CURLOPT_POSTFIELDS, body ? body : "");
            SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        }
    }
#undef SETOPT
    if (rc == CURLE_OK) {
        out->api_calls++;
        atomic_fetch_add_explicit(&gh->st_api_calls, 1, memory_order_relaxed);
        rc = curl_easy_perform(h);
    } else {
        snprintf(errbuf, sizeof(errbuf), "curl option refused: %s", curl_easy_strerror(rc));
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    metrics_github_request(base ? NULL : path, status);
    /* Drop the references to our stack and header list before the handle goes back. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    easy_release(gh, slot);
    headers_free(hdrs);
    buf_free(&url);

    if (rc == CURLE_OK) {
        out->status = status;
        return CRCR_OK;
    }
    if (x.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
        out->status = status;
        set_error(out, "%s %s: answer larger than %zu bytes", method, path, sink->max);
        return CRCR_E_TOO_LARGE;
    }
    if (x.nomem) {
        out->status = status;
        set_error(out, "%s %s: out of memory", method, path);
        return CRCR_E_NOMEM;
    }
    answer_reset(out);
    set_error(out, "%s %s: %s", method, path, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    return CRCR_E_NETWORK;
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
    crcr_err err = gh_app_jwt(gh, (int64_t)time(NULL), &jwt);
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

    crcr_err err = gh_app_jwt(gh, (int64_t)time(NULL), &jwt);
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
            if (!exp || !parse_iso8601_utc(exp, expires_at))
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
    int64_t now = (int64_t)time(NULL);
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
    r->error[0] = '\0';
    r->api_calls = 0;
}

void gh_resp_free(gh_resp *r)
{
    if (r)
        buf_free(&r->body);
}

/* Decides whether `url` may be used: https, or http to 127.0.0.0/8, ::1 or localhost; no user
 * info, query or fragment. Uses curl's own URL parser so that the host checked is the host curl
 * connects to. */
static void classify_url(const char *url, bool *ok, bool *loopback)
{
    *ok = false;
    *loopback = false;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        bool extra = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
                     curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
                     curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK;
        unsigned char a[16];
        size_t hl = strlen(host);
        if (eq_ci(host, hl, "localhost")) {
            *loopback = true;
        } else if (inet_pton(AF_INET, host, a) == 1) {
            *loopback = a[0] == 127;
        } else if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
            char v6[64];
            if (hl - 2 < sizeof(v6)) {
                memcpy(v6, host + 1, hl - 2);
                v6[hl - 2] = '\0';
                struct in6_addr in6;
                *loopback = inet_pton(AF_INET6, v6, &in6) == 1 && IN6_IS_ADDR_LOOPBACK(&in6);
            }
        }
        bool https = eq_ci(scheme, strlen(scheme), "https");
        bool http = eq_ci(scheme, strlen(scheme), "http");
        *ok = !extra && (https || (http && *loopback));
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
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
    classify_url(gh->api_url, &gh->url_ok, &gh->loopback);

    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&gh->share_mu[i], NULL);
    pthread_mutex_init(&gh->pool_mu, NULL);
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

    gh->share = curl_share_init();
    if (!gh->share || curl_share_setopt(gh->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(gh->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(gh->share, CURLSHOPT_USERDATA, gh) != CURLSHE_OK ||
        curl_share_setopt(gh->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(gh->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
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
    for (easy_slot *s = gh->idle, *next; s; s = next) {
        next = s->next;
        curl_easy_cleanup(s->h);
        free(s);
    }
    if (gh->share)
        curl_share_cleanup(gh->share);
    for (size_t i = 0; i < gh->n_tok; i++)
        tok_wipe(&gh->tok[i]);
    free(gh->tok);
    free(gh->inst);
    EVP_PKEY_free(gh->key);
    free(gh->api_url);
    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&gh->share_mu[i]);
    pthread_mutex_destroy(&gh->pool_mu);
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
        size_t hl = strlen(extra[i]);
        const char *colon = memchr(extra[i], ':', hl);
        if (i >= GH_EXTRA_HEADERS_MAX || hl > GH_HEADER_LINE_MAX || !colon || colon == extra[i] ||
            strpbrk(extra[i], "\r\n")) {
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
        err = gh_app_jwt(gh, (int64_t)time(NULL), &jwt);
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
    bool ok = false, loopback = false;
    classify_url(url, &ok, &loopback);
    if (!ok) {
        set_error(out, "URL refused: only https, or http to a loopback host");
        return CRCR_E_INVALID;
    }
    crcr_err err = check_request(gh, method, "/", extra_headers, body, body_len, out);
    if (err)
        return err;
    return http_to(gh, url, loopback, method, "", NULL, extra_headers, body, body_len, &out->body,
                   out);
}
