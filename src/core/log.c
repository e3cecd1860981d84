/*
 * log.c - logfmt lines and the secret scrubber; see log.h.
 *
 * The scrubber is hand-written (no packaged library redacts credentials): it is a single
 * left-to-right scan that recognises GitHub token prefixes, JWT-shaped strings, PEM blocks,
 * `Bearer`/`token` credentials and registered secrets.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "crcr_limits.h"

#define LOG_MAX_SECRETS 16

static crcr_log_level g_level = CRCR_LOG_INFO;
static void (*g_sink)(const char *, size_t, void *);
static void *g_sink_ctx;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_secrets[LOG_MAX_SECRETS];
static size_t g_nsecrets;

int log_level_parse(const char *s, crcr_log_level *out)
{
    static const struct {
        const char *name;
        crcr_log_level lvl;
    } names[] = {{"debug", CRCR_LOG_DEBUG},  {"info", CRCR_LOG_INFO},   {"warn", CRCR_LOG_WARN},
                 {"warning", CRCR_LOG_WARN}, {"error", CRCR_LOG_ERROR}, {"off", CRCR_LOG_OFF}};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].lvl;
            return 0;
        }
    }
    return -1;
}

void log_set_level(crcr_log_level lvl)
{
    g_level = lvl;
}

bool log_enabled(crcr_log_level lvl)
{
    return lvl >= g_level && lvl < CRCR_LOG_OFF;
}

void log_set_sink(void (*sink)(const char *, size_t, void *), void *ctx)
{
    g_sink = sink;
    g_sink_ctx = ctx;
}

void log_add_secret(const char *secret)
{
    if (!secret || strlen(secret) < 6)
        return;
    pthread_mutex_lock(&g_lock);
    size_t len = strlen(secret);
    for (size_t i = 0; i < g_nsecrets; i++) {
        if (strlen(g_secrets[i]) == len && CRYPTO_memcmp(g_secrets[i], secret, len) == 0) {
            pthread_mutex_unlock(&g_lock);
            return;
        }
    }
    if (g_nsecrets < LOG_MAX_SECRETS) {
        char *copy = strdup(secret);
        if (copy)
            g_secrets[g_nsecrets++] = copy;
    }
    pthread_mutex_unlock(&g_lock);
}

void log_clear_secrets(void)
{
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nsecrets; i++)
        free(g_secrets[i]);
    g_nsecrets = 0;
    pthread_mutex_unlock(&g_lock);
}

static int is_tok_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

static int is_b64url(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Length of a JWT-shaped run starting at `p` (eyJ... . ... . ...), or 0. */
static size_t jwt_len(const char *p, size_t n)
{
    if (n < 4 || memcmp(p, "eyJ", 3) != 0)
        return 0;
    size_t i = 0, dots = 0;
    while (i < n && (is_b64url(p[i]) || p[i] == '.')) {
        if (p[i] == '.')
            dots++;
        i++;
    }
    return dots >= 1 ? i : 0;
}

/* Length of a GitHub credential (ghs_, ghp_, gho_, ghu_, ghr_, github_pat_) at `p`, or 0. */
static size_t ghtoken_len(const char *p, size_t n)
{
    static const char *prefixes[] = {"ghs_", "ghp_", "gho_", "ghu_", "ghr_", "github_pat_"};
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
        size_t pl = strlen(prefixes[k]);
        if (n > pl && memcmp(p, prefixes[k], pl) == 0) {
            size_t i = pl;
            while (i < n && is_tok_char(p[i]))
                i++;
            if (i - pl >= 8)
                return i;
        }
    }
    return 0;
}

/* Length of a PEM block starting at `p` ("-----BEGIN" up to the matching "-----END ...-----"
 * or the end of the input), or 0. */
static size_t pem_len(const char *p, size_t n)
{
    static const char begin[] = "-----BEGIN";
    if (n < sizeof(begin) - 1 || memcmp(p, begin, sizeof(begin) - 1) != 0)
        return 0;
    for (size_t i = sizeof(begin) - 1; i + 8 <= n; i++) {
        if (memcmp(p + i, "-----END", 8) == 0) {
            size_t j = i + 8;
            while (j < n && p[j] != '\n' && !(j + 5 <= n && memcmp(p + j, "-----", 5) == 0))
                j++;
            if (j + 5 <= n && memcmp(p + j, "-----", 5) == 0)
                j += 5;
            return j;
        }
    }
    return n;
}

/* After "Bearer " / "token " (case-insensitive) at `p`: length of the prefix and credential. */
static size_t bearer_len(const char *p, size_t n, size_t *cred_start)
{
    static const char *words[] = {"bearer ", "token "};
    for (size_t k = 0; k < 2; k++) {
        size_t wl = strlen(words[k]);
        if (n > wl && strncasecmp(p, words[k], wl) == 0) {
            size_t i = wl;
            while (i < n && p[i] == ' ')
                i++;
            size_t s = i;
            while (i < n && (is_tok_char(p[i]) || p[i] == '=' || p[i] == '+' || p[i] == '/'))
                i++;
            if (i - s >= 8) {
                *cred_start = s;
                return i;
            }
        }
    }
    return 0;
}

/* The scrubber proper; the caller holds g_lock (the registered secrets). */
static crcr_err scrub_locked(const char *in, size_t n, buf_t *out)
{
    crcr_err err = CRCR_OK;
    size_t i = 0;
    while (i < n && !err) {
        size_t m, cs = 0;
        /* Only look for a pattern at a token boundary, so "xghs_" is still caught but the
         * scan stays linear. */
        if ((m = pem_len(in + i, n - i)) > 0) {
            err = buf_puts(out, "[REDACTED-PEM]");
            i += m;
            continue;
        }
        if ((m = ghtoken_len(in + i, n - i)) > 0) {
            err = buf_append(out, in + i, 4);
            if (!err)
                err = buf_puts(out, "[REDACTED]");
            i += m;
            continue;
        }
        if ((m = jwt_len(in + i, n - i)) > 0) {
            err = buf_puts(out, "[REDACTED-JWT]");
            i += m;
            continue;
        }
        if ((i == 0 || !is_tok_char(in[i - 1])) && (m = bearer_len(in + i, n - i, &cs)) > 0) {
            err = buf_append(out, in + i, cs);
            if (!err)
                err = buf_puts(out, "[REDACTED]");
            i += m;
            continue;
        }
        int hit = 0;
        for (size_t k = 0; k < g_nsecrets; k++) {
            size_t sl = strlen(g_secrets[k]);
            if (sl <= n - i && CRYPTO_memcmp(in + i, g_secrets[k], sl) == 0) {
                err = buf_puts(out, "[REDACTED]");
                i += sl;
                hit = 1;
                break;
            }
        }
        if (!hit)
            err = buf_putc(out, in[i++]);
    }
    return err;
}

crcr_err log_scrub(const char *in, size_t n, buf_t *out)
{
    pthread_mutex_lock(&g_lock);
    crcr_err err = scrub_locked(in, n, out);
    pthread_mutex_unlock(&g_lock);
    return err;
}

static int needs_quotes(const char *s)
{
    if (!*s)
        return 1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= 0x7f)
            return 1;
    }
    return 0;
}

static void put_value(buf_t *line, const char *v)
{
    buf_t clean;
    buf_init(&clean, CRCR_LOG_LINE_MAX);
    crcr_err err = log_scrub(v, strlen(v), &clean);
    const char *s = err ? "[unprintable]" : buf_cstr(&clean);
    if (!needs_quotes(s)) {
        buf_puts(line, s);
    } else {
        buf_putc(line, '"');
        for (; *s; s++) {
            unsigned char c = (unsigned char)*s;
            if (c == '"' || c == '\\') {
                buf_putc(line, '\\');
                buf_putc(line, (char)c);
            } else if (c == '\n') {
                buf_puts(line, "\\n");
            } else if (c < ' ' || c == 0x7f) {
                buf_printf(line, "\\x%02x", c);
            } else {
                buf_putc(line, (char)c);
            }
        }
        buf_putc(line, '"');
    }
    buf_free(&clean);
}

void log_kv(crcr_log_level lvl, const char *event, ...)
{
    static const char *lvl_names[] = {"debug", "info", "warn", "error"};
    if (!log_enabled(lvl))
        return;
    buf_t line;
    buf_init(&line, CRCR_LOG_LINE_MAX);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    buf_printf(&line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=", tm.tm_year + 1900,
               tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
               lvl_names[lvl]);
    put_value(&line, event ? event : "unknown");

    va_list ap;
    va_start(ap, event);
    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        const char *v = va_arg(ap, const char *);
        if (!v)
            continue;
        buf_putc(&line, ' ');
        buf_puts(&line, k);
        buf_putc(&line, '=');
        put_value(&line, v);
    }
    va_end(ap);
    /* A line that hit the cap still ends with a newline: make room for it. */
    if (buf_putc(&line, '\n') != CRCR_OK && line.len > 0) {
        line.data[line.len - 1] = '\n';
    }
    if (g_sink) {
        g_sink(buf_cstr(&line), line.len, g_sink_ctx);
    } else {
        ssize_t w = write(STDERR_FILENO, buf_cstr(&line), line.len);
        (void)w;
    }
    buf_free(&line);
}
