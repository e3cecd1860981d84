/*
 * http_client.c - the one libcurl wrapper: pooled or one-shot easy handles, a capped body sink, a
 * header callback that keeps what callers use, and the date parsers; see http_client.h.
 *
 * The date parsers (IMF-fixdate for Retry-After, RFC 3339 for GitHub's expires_at) are
 * hand-written: a few lines, locale-independent, strict (curl_getdate also takes other zones and
 * does not check the day against the month), and without sscanf/strptime.
 */
#include "http_client.h"

#include "http_easy.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include "clock.h"
#include "crcr_limits.h" /* also the system <limits.h>: LONG_MAX */

/* ---------------------------------------------------------------- dates */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
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

bool http_parse_iso8601_utc(const char *s, int64_t *out)
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

long http_parse_retry_after(const char *value, int64_t now)
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

/* ---------------------------------------------------------------- Link */

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* True when the space-separated relation list v[0..n) names `rel` (case-insensitively). */
static bool rel_lists(const char *v, size_t n, const char *rel)
{
    size_t rl = strlen(rel);
    for (size_t i = 0; i < n;) {
        while (i < n && is_ows(v[i]))
            i++;
        size_t start = i;
        while (i < n && !is_ows(v[i]))
            i++;
        if (i - start == rl && strncasecmp(v + start, rel, rl) == 0)
            return true;
    }
    return false;
}

/* Written by hand: libcurl has no Link parser and the grammar (RFC 8288 §3) is a few rules. The
 * scan is linear and reads nothing past v[len). */
bool http_link_find(const char *v, size_t len, const char *rel, char *out, size_t outsz)
{
    size_t i = 0;
    while (i < len) {
        while (i < len && (is_ows(v[i]) || v[i] == ','))
            i++;
        if (i >= len || v[i] != '<')
            return false;
        const char *gt = memchr(v + i + 1, '>', len - i - 1);
        if (!gt)
            return false;
        size_t url_at = i + 1, url_len = (size_t)(gt - v) - url_at;
        i = (size_t)(gt - v) + 1;
        bool matched = false;
        for (;;) {
            while (i < len && is_ows(v[i]))
                i++;
            if (i >= len || v[i] != ';')
                break;
            i++;
            while (i < len && is_ows(v[i]))
                i++;
            size_t name_at = i;
            while (i < len && v[i] != '=' && v[i] != ';' && v[i] != ',' && !is_ows(v[i]))
                i++;
            size_t name_len = i - name_at;
            while (i < len && is_ows(v[i]))
                i++;
            const char *val = v + i;
            size_t val_len = 0;
            if (i < len && v[i] == '=') {
                i++;
                while (i < len && is_ows(v[i]))
                    i++;
                if (i < len && v[i] == '"') {
                    val = v + ++i;
                    while (i < len && v[i] != '"')
                        i += v[i] == '\\' && i + 1 < len ? 2 : 1;
                    val_len = (size_t)(v + (i < len ? i : len) - val);
                    if (i < len)
                        i++; /* the closing quote */
                } else {
                    val = v + i;
                    while (i < len && v[i] != ';' && v[i] != ',' && !is_ows(v[i]))
                        i++;
                    val_len = (size_t)(v + i - val);
                }
            }
            if (name_len == 3 && strncasecmp(v + name_at, "rel", 3) == 0 &&
                rel_lists(val, val_len, rel))
                matched = true;
        }
        while (i < len && v[i] != ',')
            i++;
        if (matched) {
            if (url_len == 0 || url_len >= outsz)
                return false;
            memcpy(out, v + url_at, url_len);
            out[url_len] = '\0';
            return true;
        }
    }
    return false;
}

/* ---------------------------------------------------------------- checks */

bool http_url_check(const char *url, bool *loopback_out)
{
    bool ok = false, loopback = false;
    CURLU *u = url ? curl_url() : NULL;
    char *scheme = NULL, *host = NULL, *user = NULL, *query = NULL, *frag = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        bool extra = curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
                     curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
                     curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) == CURLUE_OK;
        unsigned char a4[4];
        size_t hl = strlen(host);
        if (strcasecmp(host, "localhost") == 0) {
            loopback = true;
        } else if (inet_pton(AF_INET, host, a4) == 1) {
            loopback = a4[0] == 127;
        } else if (hl > 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < 64) {
            char v6[64];
            memcpy(v6, host + 1, hl - 2);
            v6[hl - 2] = '\0';
            struct in6_addr a6;
            loopback = inet_pton(AF_INET6, v6, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
        }
        bool https = strcasecmp(scheme, "https") == 0;
        bool http = strcasecmp(scheme, "http") == 0;
        ok = !extra && (https || (http && loopback));
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    if (loopback_out)
        *loopback_out = loopback;
    return ok;
}

crcr_err http_append_escaped(buf_t *url, const char *s)
{
    char *esc = curl_easy_escape(NULL, s, 0);
    if (!esc)
        return CRCR_E_NOMEM;
    crcr_err e = buf_puts(url, esc);
    curl_free(esc);
    return e;
}

crcr_err http_add_query(buf_t *url, const char *name, const char *value)
{
    crcr_err e = buf_putc(url, strchr(buf_cstr(url), '?') ? '&' : '?');
    if (!e)
        e = buf_puts(url, name);
    if (!e)
        e = buf_putc(url, '=');
    return e ? e : http_append_escaped(url, value);
}

bool http_header_token_ok(const char *s, size_t n, size_t max)
{
    if (!s || n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

bool http_header_line_ok(const char *line)
{
    size_t n = line ? strlen(line) : 0;
    const char *colon = n ? memchr(line, ':', n) : NULL;
    return n > 0 && n <= HTTP_HEADER_LINE_MAX && colon && colon != line && !strpbrk(line, "\r\n");
}

/* Case-insensitive (ASCII) test of whether header line `line` is named `name` ("name:" prefix). */
static bool header_named(const char *line, const char *name)
{
    size_t n = strlen(name);
    return strncasecmp(line, name, n) == 0 && line[n] == ':';
}

/* True when `s` is 1..HTTP_AUTH_MAX bytes without control characters (a header value). */
static bool auth_part_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > HTTP_AUTH_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < ' ' || (unsigned char)s[i] == 0x7f)
            return false;
    return true;
}

/* Checks a request before anything is built; a reason goes to out->error. */
static crcr_err check_request(const http_call *rq, http_answer *out)
{
    static const char *methods[] = {"GET", "POST", "PATCH", "PUT", "DELETE"};
    bool known = false;
    for (size_t i = 0; rq->method && i < sizeof(methods) / sizeof(methods[0]); i++)
        known = known || strcmp(rq->method, methods[i]) == 0;
    const char *why = NULL;
    if (!known || !rq->url)
        why = "unsupported method or no URL";
    else if (strcmp(rq->method, "GET") == 0 && rq->body)
        why = "GET with a body";
    else if (!rq->body && rq->body_len)
        why = "request body missing";
    else if (rq->auth_scheme &&
             (!http_header_token_ok(rq->auth_scheme, strlen(rq->auth_scheme), 32) ||
              !auth_part_ok(rq->auth_credential)))
        why = "unusable Authorization credential";
    for (size_t i = 0; !why && rq->headers && rq->headers[i]; i++) {
        if (i >= HTTP_HEADERS_MAX || !http_header_line_ok(rq->headers[i]) ||
            header_named(rq->headers[i], "authorization"))
            why = "invalid header line";
    }
    if (!why)
        return CRCR_OK;
    snprintf(out->error, sizeof(out->error), "%s", why);
    return CRCR_E_INVALID;
}

/* ---------------------------------------------------------------- headers */

/* Wipes every line of a request header list (the Authorization line holds a credential, the
 * others may hold signatures), then frees it. */
static void headers_free(struct curl_slist *h)
{
    for (struct curl_slist *i = h; i; i = i->next) {
        if (i->data)
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

/* Builds the request header list (the caller frees it with headers_free): the caller's lines,
 * Authorization, "Expect:" (no 100-continue round trip) and, when the caller sets none, an empty
 * Content-Type so that libcurl adds no form type. NULL when out of memory. */
static struct curl_slist *headers_build(const http_call *rq)
{
    struct curl_slist *hdrs = NULL;
    bool ok = true, has_ctype = false;
    for (size_t i = 0; ok && rq->headers && rq->headers[i]; i++) {
        has_ctype = has_ctype || header_named(rq->headers[i], "content-type");
        ok = header_add(&hdrs, rq->headers[i]);
    }
    if (ok && rq->auth_scheme) {
        buf_t line;
        buf_init(&line, HTTP_AUTH_MAX + 64);
        ok = buf_printf(&line, "Authorization: %s %s", rq->auth_scheme, rq->auth_credential) ==
                 CRCR_OK &&
             header_add(&hdrs, line.data);
        if (line.data)
            OPENSSL_cleanse(line.data, line.cap);
        buf_free(&line);
    }
    ok = ok && header_add(&hdrs, "Expect:");
    if (ok && !has_ctype)
        ok = header_add(&hdrs, "Content-Type:");
    return ok ? hdrs : NULL;
}

/* ---------------------------------------------------------------- answer */

/* Clears what a header block describes (a new status line starts a new block, e.g. after a
 * 100 Continue). */
static void answer_headers_reset(http_answer *out)
{
    out->retry_after_s = -1;
    out->rl_remaining = -1;
    out->rl_reset = -1;
    out->etag[0] = '\0';
    out->link_next[0] = '\0';
}

typedef struct xfer {
    http_answer *out;
    bool truncate;
    bool too_large;
    bool nomem;
} xfer;

/* The one body sink: appends to out->body up to its cap; past it, drops the rest (truncate) or
 * makes libcurl abort the transfer. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    buf_t *b = x->out->body;
    size_t n = size * nmemb, take = n;
    if (x->truncate && take > b->max - b->len) {
        take = b->max - b->len;
        x->out->truncated = true;
    }
    if (take == 0)
        return n;
    crcr_err err = buf_append(b, p, take);
    if (err == CRCR_E_TOO_LARGE)
        x->too_large = true;
    else if (err)
        x->nomem = true;
    return err ? 0 : n; /* a short count makes curl abort the transfer */
}

/* Keeps the response headers callers use; everything else is ignored. */
static size_t on_header(char *p, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        answer_headers_reset(x->out);
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
    if (name_len == 4 && strncasecmp(p, "link", 4) == 0) {
        /* Longer than the other values looked at: a URL or two. */
        if (vlen < HTTP_LINK_HEADER_MAX &&
            !http_link_find(v, vlen, "next", x->out->link_next, sizeof(x->out->link_next)))
            x->out->link_next[0] = '\0';
        return n;
    }
    if (vlen >= HTTP_HEADER_VALUE_MAX)
        return n;
    char name[32], val[HTTP_HEADER_VALUE_MAX];
    if (name_len == 0 || name_len >= sizeof(name))
        return n;
    memcpy(name, p, name_len);
    name[name_len] = '\0';
    memcpy(val, v, vlen);
    val[vlen] = '\0';
    int64_t num;
    if (strcasecmp(name, "retry-after") == 0) {
        x->out->retry_after_s = http_parse_retry_after(val, clock_now_ms() / 1000);
    } else if (strcasecmp(name, "x-ratelimit-remaining") == 0) {
        if (parse_uint(val, &num) && num <= LONG_MAX)
            x->out->rl_remaining = (long)num;
    } else if (strcasecmp(name, "x-ratelimit-reset") == 0) {
        if (parse_uint(val, &num))
            x->out->rl_reset = num;
    } else if (strcasecmp(name, "etag") == 0) {
        if (vlen < sizeof(x->out->etag))
            memcpy(x->out->etag, val, vlen + 1);
    }
    return n;
}

/* ---------------------------------------------------------------- pool */

typedef struct easy_slot {
    CURL *h;
    struct easy_slot *next;
} easy_slot;

struct http_pool {
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    pthread_mutex_t mu;
    easy_slot *idle; /* handles not in use (LIFO, so warm connections are reused first) */
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    http_pool *p = ud;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&p->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    http_pool *p = ud;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&p->share_mu[data]);
}

/* Owner: the caller, through http_pool_free. */
http_pool *http_pool_new(void)
{
    http_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&p->share_mu[i], NULL);
    pthread_mutex_init(&p->mu, NULL);
    p->share = curl_share_init();
    if (!p->share || curl_share_setopt(p->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(p->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(p->share, CURLSHOPT_USERDATA, p) != CURLSHE_OK ||
        curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
        http_pool_free(p);
        return NULL;
    }
    return p;
}

void http_pool_free(http_pool *p)
{
    if (!p)
        return;
    for (easy_slot *s = p->idle, *next; s; s = next) {
        next = s->next;
        curl_easy_cleanup(s->h);
        free(s);
    }
    if (p->share)
        curl_share_cleanup(p->share);
    for (size_t i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&p->share_mu[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Takes an idle easy handle of `p`, or creates one (p NULL: always a new one). Owner: the
 * caller, who hands it to easy_release. */
static easy_slot *easy_acquire(http_pool *p)
{
    easy_slot *s = NULL;
    if (p) {
        pthread_mutex_lock(&p->mu);
        s = p->idle;
        if (s)
            p->idle = s->next;
        pthread_mutex_unlock(&p->mu);
        if (s)
            return s;
    }
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

/* Gives a handle back to `p`, or closes it when there is no pool. */
static void easy_release(http_pool *p, easy_slot *s)
{
    if (!p) {
        curl_easy_cleanup(s->h);
        free(s);
        return;
    }
    pthread_mutex_lock(&p->mu);
    s->next = p->idle;
    p->idle = s;
    pthread_mutex_unlock(&p->mu);
}

/* ---------------------------------------------------------------- exchange */

/* Sets the options of one exchange on `h` (freshly reset). */
static CURLcode set_options(CURL *h, CURLSH *share, const http_call *rq, struct curl_slist *hdrs,
                            xfer *x, char *errbuf)
{
    long total = rq->timeout_ms < 1 ? 1 : rq->timeout_ms;
    long connect = rq->connect_timeout_ms < 1 ? 1 : rq->connect_timeout_ms;
    CURLcode rc = CURLE_OK;
#define SETOPT(opt, val)                                                                           \
    do {                                                                                           \
        if (rc == CURLE_OK)                                                                        \
            rc = curl_easy_setopt(h, opt, val);                                                    \
    } while (0)
    if (share)
        SETOPT(CURLOPT_SHARE, share);
    SETOPT(CURLOPT_URL, rq->url);
    SETOPT(CURLOPT_PROTOCOLS_STR, rq->allow_http ? "http,https" : "https");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, connect);
    SETOPT(CURLOPT_TIMEOUT_MS, total);
    SETOPT(CURLOPT_USERAGENT, rq->user_agent ? rq->user_agent : HTTP_USER_AGENT);
    SETOPT(CURLOPT_HTTPHEADER, hdrs);
    SETOPT(CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(CURLOPT_WRITEDATA, x);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, x);
    SETOPT(CURLOPT_ERRORBUFFER, errbuf);
    /* HTTP/2 where TLS negotiates it (ALPN), HTTP/1.1 otherwise. Over TLS, on a multi handle
     * (http_loop.h), a request waits for a connection being set up rather than opening another:
     * ALPN tells at the handshake whether requests to that host can share one HTTP/2
     * connection. Not for plain http, where libcurl would learn it only from the first answer
     * and every other request would wait for it. */
    SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    SETOPT(CURLOPT_PIPEWAIT, strncasecmp(rq->url, "https:", 6) == 0 ? 1L : 0L);
    if (!rq->truncate)
        SETOPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->out->body->max);
    if (strcmp(rq->method, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(rq->method, "POST") != 0)
            SETOPT(CURLOPT_CUSTOMREQUEST, rq->method);
        if (rq->body || strcmp(rq->method, "DELETE") != 0) {
            /* POST, PATCH and PUT always carry a body (possibly empty: Content-Length: 0). */
            SETOPT(CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
            SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(rq->body ? rq->body_len : 0));
        }
    }
#undef SETOPT
    return rc;
}

/* True for transport failures that a retry cannot fix. */
static bool permanent_failure(CURLcode rc)
{
    return rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL ||
           rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
           rc == CURLE_OUT_OF_MEMORY;
}

_Static_assert(sizeof(((http_easy_state *)0)->errbuf) >= CURL_ERROR_SIZE,
               "the error buffer holds what libcurl writes");
_Static_assert(sizeof(((http_easy_state *)0)->sink) >= sizeof(xfer), "the sink fits");

crcr_err http_easy_begin(CURL *h, CURLSH *share, const http_call *rq, http_answer *out,
                         http_easy_state *st)
{
    memset(st, 0, sizeof(*st));
    out->status = 0;
    out->truncated = false;
    out->sent = false;
    out->permanent = false;
    out->error[0] = '\0';
    answer_headers_reset(out);
    if (!out->body)
        return CRCR_E_INVALID;
    buf_reset(out->body);
    crcr_err err = check_request(rq, out);
    if (err)
        return err;
    st->hdrs = headers_build(rq);
    if (!st->hdrs) {
        snprintf(out->error, sizeof(out->error), "out of memory");
        return CRCR_E_NOMEM;
    }
    xfer *x = (xfer *)st->sink;
    *x = (xfer){.out = out, .truncate = rq->truncate};
    curl_easy_reset(h);
    CURLcode rc = set_options(h, share, rq, st->hdrs, x, st->errbuf);
    if (rc != CURLE_OK) {
        /* Nothing was sent: finish as a transport failure that names the refused option. */
        snprintf(out->error, sizeof(out->error), "curl option refused: %s", curl_easy_strerror(rc));
        headers_free(st->hdrs);
        st->hdrs = NULL;
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
        out->permanent = permanent_failure(rc);
        return CRCR_E_NETWORK;
    }
    out->sent = true;
    return CRCR_OK;
}

crcr_err http_easy_end(CURL *h, CURLcode rc, http_easy_state *st)
{
    xfer *x = (xfer *)st->sink;
    http_answer *out = x->out;
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    /* A reused handle must not keep pointers into the state or the header list. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
    headers_free(st->hdrs);
    st->hdrs = NULL;

    if (rc == CURLE_OK) {
        out->status = status;
        return CRCR_OK;
    }
    if (x->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
        out->status = status;
        snprintf(out->error, sizeof(out->error), "answer larger than %zu bytes", out->body->max);
        return CRCR_E_TOO_LARGE;
    }
    if (x->nomem) {
        out->status = status;
        snprintf(out->error, sizeof(out->error), "out of memory");
        return CRCR_E_NOMEM;
    }
    answer_headers_reset(out);
    out->permanent = permanent_failure(rc);
    snprintf(out->error, sizeof(out->error), "%s",
             st->errbuf[0] ? st->errbuf : curl_easy_strerror(rc));
    return CRCR_E_NETWORK;
}

crcr_err http_exchange(http_pool *pool, const http_call *rq, http_answer *out)
{
    easy_slot *slot = easy_acquire(pool);
    if (!slot) {
        out->status = 0;
        out->sent = false;
        snprintf(out->error, sizeof(out->error), "out of memory");
        return CRCR_E_NOMEM;
    }
    http_easy_state st;
    crcr_err err = http_easy_begin(slot->h, pool ? pool->share : NULL, rq, out, &st);
    if (!err)
        err = http_easy_end(slot->h, curl_easy_perform(slot->h), &st);
    easy_release(pool, slot);
    return err;
}
