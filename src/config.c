/*
 * config.c - loads, validates and describes the relay's configuration; see config.h.
 *
 * One static table lists every variable with its default, whether it is a secret, its integer
 * range and a one-line description. The table drives loading (a key not in it is an error in a
 * config file), config_describe() and so docs/configuration.md, which a unit test keeps in step.
 *
 * The KEY=VALUE reader and the URL host check are hand-written: the format is a dozen lines of
 * rules (comments, optional quotes, `\n` escapes), and URL parsers in packaged libraries (libcurl's
 * CURLU) accept more than we want to allow and do not answer "is this host loopback".
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "ids.h"
#include "limits.h"

/* A --config file is a few dozen lines; a PEM written on one line is ~2.5 KB. */
#define CONFIG_FILE_MAX_BYTES (1024u * 1024u)
/* An RSA 4096 private key in PEM is ~3.3 KB. */
#define CONFIG_PEM_MAX_BYTES (64u * 1024u)
/* Longest key name echoed back in an "unknown key" error. */
#define CONFIG_KEY_NAME_MAX 64u
/* Longest value quoted back in an error (longer ones are cut with "..."). */
#define CONFIG_QUOTE_MAX 60u
/* Longest GitHub App id or client id. */
#define CONFIG_APP_ID_MAX 64u
/* Longest URL accepted for any URL variable. */
#define CONFIG_URL_MAX 2048u
/* Integer variables without a tighter range are capped here, so that callers may multiply seconds
 * by 1000 in 64-bit arithmetic and cast counts to int without overflow. */
#define CONFIG_INT_MAX 2147483647LL

typedef enum {
    K_GITHUB_APP_ID,
    K_GITHUB_APP_SECRET,
    K_GITHUB_APP_SECRET_PREVIOUS,
    K_GITHUB_APP_PRIVATE_KEY,
    K_GITHUB_APP_PRIVATE_KEY_FILE,
    K_UPSTREAM_REPO,
    K_ALLOWLIST_URL,
    K_ALLOWLIST_FILE,
    K_ALLOWLIST_TTL_SECONDS,
    K_CI_PROVIDERS_URL,
    K_CI_PROVIDERS_FILE,
    K_CRCR_STATUS_TTL,
    K_RATE_LIMIT_PER_MIN,
    K_ZOMBIE_TIMEOUT_SECONDS,
    K_HUD_API_URL,
    K_HUD_BOT_KEY,
    K_HUD_MAX_RETRIES,
    K_MAX_DISPATCH_WORKERS,
    K_CRCR_LISTEN,
    K_CRCR_STORE,
    K_GITHUB_API_URL,
    K_CRCR_OIDC_ISSUERS,
    K_CRCR_OIDC_AUDIENCE,
    K_CRCR_CALLBACK_TOKEN,
    K_CRCR_ADMIN_TOKEN,
    K_CRCR_MAX_BODY,
    K_CRCR_DISPATCH_BUDGET,
    K_CRCR_MAX_ATTEMPTS,
    K_CRCR_SWEEP_SECONDS,
    K_CRCR_RETENTION_SECONDS,
    K_CRCR_LOG,
    K_CRCR_RETRY_BASE_MS,
    K_CRCR_RETRY_MAX_MS,
    K_CRCR_LEASE_SECONDS,
    K_CRCR_REQUEST_DEADLINE_SECONDS,
    K_CRCR_STORE_POOL,
    K_CRCR_HTTP_THREADS,
    K_CRCR_HEALTH_L2_SUCCESS_PCT,
    K_CRCR_HEALTH_L3_SUCCESS_PCT,
    K_CRCR_HEALTH_L4_SUCCESS_PCT,
    K_CRCR_HEALTH_PR_HOURS,
    K_CRCR_MAX_CALLBACK_BODY,
    K_CRCR_NIGHTLY_DAILY_BYTES,
    K_CRCR_HUD_CONCURRENCY,
    K_CRCR_HUD_CACHE_MS,
    K_CRCR_ONCALL_COMMENTS,
    K_COUNT
} key_id;

typedef struct {
    const char *name;
    const char *def; /* the default as text; NULL when unset by default */
    bool secret;     /* never printed, never quoted in an error */
    long long min;   /* integer range; min > max marks a variable that is not an integer */
    long long max;
    const char *desc;
} key_def;

#define NOT_INT 1, 0
#define STR(n) #n
#define XSTR(n) STR(n)

static const key_def k_keys[K_COUNT] = {
    [K_GITHUB_APP_ID] = {"GITHUB_APP_ID", NULL, false, NOT_INT,
                         "GitHub App id (digits) or client id (Iv...). Without an id and a private "
                         "key the relay runs in dry-run."},
    [K_GITHUB_APP_SECRET] = {"GITHUB_APP_SECRET", NULL, true, NOT_INT,
                             "Webhook secret (X-Hub-Signature-256). `crcr serve` requires it; "
                             "when set it must not be empty."},
    [K_GITHUB_APP_SECRET_PREVIOUS] = {"GITHUB_APP_SECRET_PREVIOUS", NULL, true, NOT_INT,
                                      "Previous webhook secret, also accepted while a rotation "
                                      "is in progress."},
    [K_GITHUB_APP_PRIVATE_KEY] = {"GITHUB_APP_PRIVATE_KEY", NULL, true, NOT_INT,
                                  "App private key as PEM text (RSA, PKCS#1 or PKCS#8). Literal "
                                  "`\\n` sequences are turned into newlines."},
    [K_GITHUB_APP_PRIVATE_KEY_FILE] = {"GITHUB_APP_PRIVATE_KEY_FILE", NULL, false, NOT_INT,
                                       "Path of a PEM file holding the App private key; "
                                       "excludes GITHUB_APP_PRIVATE_KEY."},
    [K_UPSTREAM_REPO] = {"UPSTREAM_REPO", "pytorch/pytorch", false, NOT_INT,
                         "owner/repo whose webhooks are relayed (compared case-insensitively)."},
    [K_ALLOWLIST_URL] = {"ALLOWLIST_URL", NULL, false, NOT_INT,
                         "GitHub blob URL of the allowlist "
                         "(https://github.com/OWNER/REPO/blob/REF/PATH)."},
    [K_ALLOWLIST_FILE] = {"ALLOWLIST_FILE", NULL, false, NOT_INT,
                          "Local allowlist file; wins over ALLOWLIST_URL."},
    [K_ALLOWLIST_TTL_SECONDS] = {"ALLOWLIST_TTL_SECONDS", "900", false, 1, CONFIG_INT_MAX,
                                 "Seconds before the allowlist (and the CI providers map) is "
                                 "fetched again."},
    [K_CI_PROVIDERS_URL] = {"CI_PROVIDERS_URL", NULL, false, NOT_INT,
                            "GitHub blob URL of ci_providers.yml, the map from Buildkite "
                            "pipelines to repositories; unset: no pipeline is mapped."},
    [K_CI_PROVIDERS_FILE] = {"CI_PROVIDERS_FILE", NULL, false, NOT_INT,
                             "Local ci_providers.yml; wins over CI_PROVIDERS_URL."},
    [K_CRCR_STATUS_TTL] =
        {"CRCR_STATUS_TTL", "259200", false, 1, CONFIG_INT_MAX,
         "Seconds the callback state of a dispatched run is kept (GitHub may keep a run "
         "pending for 3 days)."},
    [K_RATE_LIMIT_PER_MIN] = {"RATE_LIMIT_PER_MIN", "100", false, 1, CONFIG_INT_MAX,
                              "Callbacks accepted per downstream repo per 60 s window."},
    [K_ZOMBIE_TIMEOUT_SECONDS] = {"ZOMBIE_TIMEOUT_SECONDS", "21600", false, 1, CONFIG_INT_MAX,
                                  "Seconds after which an in-progress run is marked timed_out."},
    [K_HUD_API_URL] = {"HUD_API_URL", NULL, false, NOT_INT,
                       "External HUD API base URL; unset or empty turns HUD forwarding off."},
    [K_HUD_BOT_KEY] = {"HUD_BOT_KEY", NULL, true, NOT_INT,
                       "Key sent to the external HUD (x-hud-internal-bot)."},
    [K_HUD_MAX_RETRIES] = {"HUD_MAX_RETRIES", "3", false, 0, 16,
                           "Retries of one HUD write on 5xx or network errors."},
    [K_MAX_DISPATCH_WORKERS] = {"MAX_DISPATCH_WORKERS", "32", false, 1, 1024,
                                "Outbox worker threads."},
    [K_CRCR_LISTEN] = {"CRCR_LISTEN", "127.0.0.1:8000", false, NOT_INT,
                       "Listen address: IPV4:PORT, [IPV6]:PORT or localhost:PORT; port 0 lets "
                       "the OS choose."},
    [K_CRCR_STORE] = {"CRCR_STORE", "sqlite:crcr.db", false, NOT_INT,
                      "Store: sqlite:PATH or a postgresql:// (postgres://) URI. A password in the "
                      "URI is never printed."},
    [K_GITHUB_API_URL] = {"GITHUB_API_URL", "https://api.github.com", false, NOT_INT,
                          "GitHub REST API base URL."},
    [K_CRCR_OIDC_ISSUERS] = {"CRCR_OIDC_ISSUERS",
                             "https://token.actions.githubusercontent.com,"
                             "buildkite=https://agent.buildkite.com",
                             false, NOT_INT,
                             "Comma-separated OIDC issuers trusted for callbacks (at most " XSTR(
                                 CRCR_MAX_ISSUERS) "): URL (GitHub Actions tokens) or "
                                                   "buildkite=URL (Buildkite tokens)."},
    [K_CRCR_OIDC_AUDIENCE] = {"CRCR_OIDC_AUDIENCE", "pytorch-cross-repo-ci-relay", false, NOT_INT,
                              "Audience (aud) required in callback OIDC tokens."},
    [K_CRCR_CALLBACK_TOKEN] = {"CRCR_CALLBACK_TOKEN", "optional", false, NOT_INT,
                               "optional: a callback without callback_token is accepted; "
                               "required: it is rejected. A wrong token is always rejected."},
    [K_CRCR_ADMIN_TOKEN] = {"CRCR_ADMIN_TOKEN", NULL, true, NOT_INT,
                            "Bearer token of the admin API; unset turns the admin API off."},
    [K_CRCR_MAX_BODY] = {"CRCR_MAX_BODY", "26214400", false, 1024, 100LL * 1024 * 1024,
                         "Largest request body in bytes (413 beyond)."},
    [K_CRCR_DISPATCH_BUDGET] = {"CRCR_DISPATCH_BUDGET", "65000", false, 1024, 65535,
                                "Largest repository_dispatch body in bytes before trimming."},
    [K_CRCR_MAX_ATTEMPTS] = {"CRCR_MAX_ATTEMPTS", "12", false, 1, 1000,
                             "Attempts of one outbound call before its outbox row is dead."},
    [K_CRCR_SWEEP_SECONDS] = {"CRCR_SWEEP_SECONDS", "600", false, 1, CONFIG_INT_MAX,
                              "Seconds between sweeper passes."},
    [K_CRCR_RETENTION_SECONDS] = {"CRCR_RETENTION_SECONDS", "604800", false, 1, CONFIG_INT_MAX,
                                  "Seconds deliveries and finished outbox rows are kept."},
    [K_CRCR_LOG] = {"CRCR_LOG", "info", false, NOT_INT,
                    "Log level: debug, info, warn, error, off."},
    [K_CRCR_RETRY_BASE_MS] = {"CRCR_RETRY_BASE_MS", "1000", false, 1, CONFIG_INT_MAX,
                              "First retry delay of a transient failure, in ms; doubles per "
                              "attempt, with jitter, up to 2 minutes, then the long tail "
                              "(1 minute doubling per attempt)."},
    [K_CRCR_RETRY_MAX_MS] = {"CRCR_RETRY_MAX_MS", "21600000", false, 1, CONFIG_INT_MAX,
                             "Cap of one retry delay, in ms; at least CRCR_RETRY_BASE_MS."},
    [K_CRCR_LEASE_SECONDS] = {"CRCR_LEASE_SECONDS", "120", false, 1, CONFIG_INT_MAX,
                              "Seconds a worker holds a claimed outbox row before another may "
                              "take it."},
    [K_CRCR_REQUEST_DEADLINE_SECONDS] = {"CRCR_REQUEST_DEADLINE_SECONDS", "15", false, 1, 3600,
                                         "Seconds one HTTP request may take, from the accept (or "
                                         "the previous answer on a kept-alive connection) to its "
                                         "answer; slower connections are closed."},
    [K_CRCR_STORE_POOL] = {"CRCR_STORE_POOL", "0", false, 0, 256,
                           "PostgreSQL connections per instance (a postgresql:// store). 0: "
                           "MAX_DISPATCH_WORKERS + HTTP threads + CRCR_HUD_CONCURRENCY + 2 "
                           "(capped at 256), so that no outbox worker waits for a connection "
                           "while its lease runs. The server needs instances x (pool + 1)."},
    [K_CRCR_HTTP_THREADS] = {"CRCR_HTTP_THREADS", "0", false, 0, 256,
                             "Threads serving HTTP requests. 0: 4 per CPU available to the "
                             "process (affinity and cgroup quota), at least 8. A request "
                             "holds its thread while its webhook is committed; concurrent "
                             "webhooks share one commit, so more threads than CPUs means fewer "
                             "commits under load."},
    [K_CRCR_HEALTH_L2_SUCCESS_PCT] = {"CRCR_HEALTH_L2_SUCCESS_PCT", "70", false, 0, 100,
                                      "Level health: L2 needs a weekly success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_L3_SUCCESS_PCT] = {"CRCR_HEALTH_L3_SUCCESS_PCT", "90", false, 0, 100,
                                      "Level health: L3 needs a success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_L4_SUCCESS_PCT] = {"CRCR_HEALTH_L4_SUCCESS_PCT", "95", false, 0, 100,
                                      "Level health: L4 needs a success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_PR_HOURS] = {"CRCR_HEALTH_PR_HOURS", "3", false, 1, 168,
                                "Level health: L2 and above need every PR's runs done within this "
                                "many hours."},
    [K_CRCR_MAX_CALLBACK_BODY] = {"CRCR_MAX_CALLBACK_BODY", "1048576", false, 1024,
                                  100LL * 1024 * 1024,
                                  "Largest callback body in bytes (413 beyond; at most "
                                  "CRCR_MAX_BODY). A callback echoes one webhook, which is far "
                                  "smaller; nightly/periodic reports are held to 64 KiB."},
    [K_CRCR_NIGHTLY_DAILY_BYTES] = {"CRCR_NIGHTLY_DAILY_BYTES", "16777216", false, 0,
                                    CONFIG_INT_MAX,
                                    "Bytes of nightly/periodic reports one downstream repo may "
                                    "have stored per UTC day; past it such callbacks get 429 "
                                    "with Retry-After (the next UTC midnight). 0: no limit."},
    [K_CRCR_HUD_CONCURRENCY] = {"CRCR_HUD_CONCURRENCY", "2", false, 1, 64,
                                "HUD pages and /api/v1 answers rendered at once, on threads of "
                                "their own; up to 8 per slot wait, further ones get 503 with "
                                "Retry-After. Webhooks and callbacks never wait behind them."},
    [K_CRCR_HUD_CACHE_MS] = {"CRCR_HUD_CACHE_MS", "2000", false, 0, 600000,
                             "Milliseconds a rendered HUD page or /api/v1 answer is served "
                             "again from memory (per path and query, 32 MiB in all). 0: off."},
    [K_CRCR_ONCALL_COMMENTS] = {"CRCR_ONCALL_COMMENTS", "1", false, 0, 1,
                                "1: when a crcr check run completes with failure, cancelled or "
                                "timed_out, comment once per PR and downstream repo on the "
                                "upstream PR, mentioning the repo's on-calls from the allowlist. "
                                "0: off."},
};

/* The raw text of every variable while loading. */
typedef struct {
    char *file_val[K_COUNT];  /* owned copies from the config file */
    const char *val[K_COUNT]; /* effective: the getter's, else the file's, else NULL */
    char *pem_scratch;        /* owned: unescaped GITHUB_APP_PRIVATE_KEY from the environment */
} raw_values;

/* Writes a one-line message into err (if any) and returns CRCR_E_CONFIG. */
static crcr_err fail(char *err, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static crcr_err fail(char *err, size_t errsz, const char *fmt, ...)
{
    if (err && errsz > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
        /* One line, whatever went into it. */
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    }
    return CRCR_E_CONFIG;
}

/* Copies a non-secret value into out for quoting in an error: control bytes become '?', and a
 * long value is cut with "...". */
static void quote_value(const char *v, char out[CONFIG_QUOTE_MAX + 4])
{
    size_t i = 0;
    for (; v[i] && i < CONFIG_QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)v[i];
        out[i] = (c < 0x20 || c == 0x7f || c == '\'') ? '?' : (char)c;
    }
    if (v[i]) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

/* Frees a string after wiping it. Accepts NULL. */
static void free_wiped(char *s)
{
    if (s) {
        OPENSSL_cleanse(s, strlen(s));
        free(s);
    }
}

/* Returns a fresh copy of s[0..n) (caller frees), or NULL when out of memory. */
static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Reads a whole regular file of at most `max` bytes into `out` (which the caller frees).
 * Returns 0, or an errno value (EFBIG when larger than max). */
static int read_small_file(const char *path, size_t max, buf_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return EISDIR;
    }
    buf_init(out, max);
    char chunk[4096];
    int rc = 0;
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n > 0) {
            crcr_err e = buf_append(out, chunk, n);
            if (e) {
                rc = e == CRCR_E_TOO_LARGE ? EFBIG : ENOMEM;
                break;
            }
        }
        if (n < sizeof(chunk)) {
            if (ferror(f))
                rc = EIO;
            break;
        }
    }
    fclose(f);
    if (rc) {
        if (out->data)
            OPENSSL_cleanse(out->data, out->len);
        buf_free(out);
    }
    return rc;
}

/* Index of the variable called name[0..n), or -1. */
static int key_index(const char *name, size_t n)
{
    for (int i = 0; i < K_COUNT; i++)
        if (strlen(k_keys[i].name) == n && memcmp(k_keys[i].name, name, n) == 0)
            return i;
    return -1;
}

/* True when s[0..n) looks like a variable name: [A-Z][A-Z0-9_]*, short. Only such names are
 * echoed in an error, so that a stray line of PEM or a secret is never printed. */
static bool looks_like_key(const char *s, size_t n)
{
    if (n == 0 || n > CONFIG_KEY_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* Returns a fresh copy of v[0..n) with "\n" turned into a newline and "\\" into one backslash
 * (caller frees), or NULL when out of memory. Other backslashes are kept as they are. */
static char *unescape(const char *v, size_t n)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\' && i + 1 < n && (v[i + 1] == 'n' || v[i + 1] == '\\')) {
            out[o++] = v[i + 1] == 'n' ? '\n' : '\\';
            i++;
        } else {
            out[o++] = v[i];
        }
    }
    out[o] = '\0';
    return out;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Parses the KEY=VALUE file into raw->file_val. */
static crcr_err read_config_file(const char *path, raw_values *raw, char *err, size_t errsz)
{
    buf_t text;
    int rc = read_small_file(path, CONFIG_FILE_MAX_BYTES, &text);
    if (rc == EFBIG)
        return fail(err, errsz, "%s: larger than %u bytes", path, CONFIG_FILE_MAX_BYTES);
    if (rc)
        return fail(err, errsz, "%s: cannot read: %s", path, strerror(rc));

    crcr_err e = CRCR_OK;
    const char *p = buf_cstr(&text);
    const char *end = p + text.len;
    if (memchr(p, '\0', text.len)) {
        e = fail(err, errsz, "%s: contains a NUL byte", path);
        goto out;
    }
    for (unsigned lineno = 1; p < end && !e; lineno++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        if (le > p && le[-1] == '\r')
            le--;
        while (p < le && is_blank(*p))
            p++;
        if (p == le || *p == '#') {
            p = next;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(le - p));
        if (!eq) {
            if ((size_t)(le - p) >= 10 && memcmp(p, "-----BEGIN", 10) == 0)
                e = fail(err, errsz,
                         "%s:%u: a PEM value must be written on one line with \\n escapes "
                         "(or use GITHUB_APP_PRIVATE_KEY_FILE)",
                         path, lineno);
            else
                e = fail(err, errsz, "%s:%u: expected KEY=VALUE", path, lineno);
            break;
        }
        const char *ke = eq;
        while (ke > p && is_blank(ke[-1]))
            ke--;
        size_t klen = (size_t)(ke - p);
        int id = key_index(p, klen);
        if (id < 0) {
            if (looks_like_key(p, klen))
                e = fail(err, errsz, "%s:%u: unknown key '%.*s'", path, lineno, (int)klen, p);
            else
                e = fail(err, errsz, "%s:%u: expected KEY=VALUE", path, lineno);
            break;
        }
        if (raw->file_val[id]) {
            e = fail(err, errsz, "%s:%u: %s is set twice", path, lineno, k_keys[id].name);
            break;
        }
        const char *v = eq + 1;
        const char *ve = le;
        while (v < ve && is_blank(*v))
            v++;
        while (ve > v && is_blank(ve[-1]))
            ve--;
        if (ve - v >= 2 && *v == '"' && ve[-1] == '"') {
            v++;
            ve--;
        }
        raw->file_val[id] = unescape(v, (size_t)(ve - v));
        if (!raw->file_val[id]) {
            e = CRCR_E_NOMEM;
            fail(err, errsz, "%s: out of memory", path);
        }
        p = next;
    }
out:
    OPENSSL_cleanse(text.data, text.len);
    buf_free(&text);
    return e;
}

/* The variable's value, or NULL when unset or empty (empty is the same as unset). */
static const char *given(const raw_values *raw, key_id id)
{
    const char *v = raw->val[id];
    return v && *v ? v : NULL;
}

/* The variable's value, else its default (may be NULL). */
static const char *value_or_default(const raw_values *raw, key_id id)
{
    const char *v = given(raw, id);
    return v ? v : k_keys[id].def;
}

/* Copies the variable's value (or default) into *out; NULL stays NULL. */
static crcr_err take_string(const raw_values *raw, key_id id, char **out, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, id);
    *out = NULL;
    if (!v)
        return CRCR_OK;
    *out = strdup(v);
    if (!*out) {
        fail(err, errsz, "%s: out of memory", k_keys[id].name);
        return CRCR_E_NOMEM;
    }
    return CRCR_OK;
}

/* Parses an integer variable within its table range. */
static crcr_err take_int(const raw_values *raw, key_id id, long long *out, char *err, size_t errsz)
{
    const key_def *k = &k_keys[id];
    const char *v = value_or_default(raw, id);
    char q[CONFIG_QUOTE_MAX + 4];
    quote_value(v, q);
    const char *what = k->min > 0 ? "positive" : "non-negative";
    for (const char *c = v; *c; c++)
        if (*c < '0' || *c > '9')
            return fail(err, errsz, "%s: not a %s integer: '%s'", k->name, what, q);
    errno = 0;
    char *endp = NULL;
    long long n = strtoll(v, &endp, 10);
    if (endp == v || *endp)
        return fail(err, errsz, "%s: not a %s integer: '%s'", k->name, what, q);
    if (n == 0 && k->min == 1 && errno == 0)
        return fail(err, errsz, "%s: not a positive integer: '%s'", k->name, q);
    if (errno == ERANGE || n < k->min || n > k->max)
        return fail(err, errsz, "%s: must be between %lld and %lld: '%s'", k->name, k->min, k->max,
                    q);
    *out = n;
    return CRCR_OK;
}

/* Strips trailing '/' from a URL in place (keeps "scheme://"). */
static void strip_trailing_slashes(char *url)
{
    size_t n = strlen(url);
    const char *sep = strstr(url, "://");
    size_t floor = sep ? (size_t)(sep - url) + 3 : 0;
    while (n > floor && url[n - 1] == '/')
        url[--n] = '\0';
}

/* The host part of an http(s) URL. */
typedef struct {
    bool https;
    const char *host; /* into the URL; without brackets for IPv6 */
    size_t host_len;
} url_parts;

/* Splits an http:// or https:// URL far enough to know its host. Rejects whitespace and control
 * bytes anywhere, an empty host, unbalanced brackets and a non-numeric or too large port. */
static bool url_split(const char *url, url_parts *u)
{
    if (!url || strlen(url) > CONFIG_URL_MAX)
        return false;
    for (const char *c = url; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '\\')
            return false;
    const char *rest;
    if (strncasecmp(url, "https://", 8) == 0) {
        u->https = true;
        rest = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        u->https = false;
        rest = url + 7;
    } else {
        return false;
    }
    size_t alen = strcspn(rest, "/?#");
    const char *auth = rest;
    const char *aend = rest + alen;
    /* Userinfo ends at the last '@' of the authority. */
    for (const char *c = aend; c > auth; c--) {
        if (c[-1] == '@') {
            auth = c;
            break;
        }
    }
    const char *port = NULL;
    if (auth < aend && *auth == '[') {
        const char *rb = memchr(auth, ']', (size_t)(aend - auth));
        if (!rb)
            return false;
        u->host = auth + 1;
        u->host_len = (size_t)(rb - auth - 1);
        if (rb + 1 < aend) {
            if (rb[1] != ':')
                return false;
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(auth, ':', (size_t)(aend - auth));
        u->host = auth;
        u->host_len = (size_t)((colon ? colon : aend) - auth);
        if (colon)
            port = colon + 1;
        if (memchr(auth, '[', (size_t)(aend - auth)) || memchr(auth, ']', (size_t)(aend - auth)))
            return false;
    }
    if (u->host_len == 0)
        return false;
    if (port) {
        size_t plen = (size_t)(aend - port);
        if (plen == 0 || plen > 5)
            return false;
        long pv = 0;
        for (size_t i = 0; i < plen; i++) {
            if (port[i] < '0' || port[i] > '9')
                return false;
            pv = pv * 10 + (port[i] - '0');
        }
        if (pv > 65535)
            return false;
    }
    return true;
}

/* True for localhost, a dotted-quad 127.x.x.x and ::1. */
static bool host_is_loopback(const char *host, size_t len)
{
    char h[64];
    if (len == 0 || len >= sizeof(h))
        return false;
    memcpy(h, host, len);
    h[len] = '\0';
    if (strcasecmp(h, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return memcmp(&a6, &in6addr_loopback, sizeof(a6)) == 0;
    return false;
}

bool config_url_allowed(const char *url)
{
    url_parts u;
    if (!url_split(url, &u))
        return false;
    return u.https || host_is_loopback(u.host, u.host_len);
}

/* Copies a URL variable (trailing '/' stripped) after checking config_url_allowed. */
static crcr_err take_url(const raw_values *raw, key_id id, char **out, char *err, size_t errsz)
{
    crcr_err e = take_string(raw, id, out, err, errsz);
    if (e || !*out)
        return e;
    strip_trailing_slashes(*out);
    if (!config_url_allowed(*out))
        return fail(err, errsz, "%s: must be https:// (http:// only for loopback hosts)",
                    k_keys[id].name);
    return CRCR_OK;
}

/* OpenSSL's passphrase callback: there is no passphrase (never prompt on a terminal). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    return 0;
}

/* True when pem[0..len) holds an unencrypted RSA private key (PKCS#1 or PKCS#8 PEM). */
static bool is_rsa_private_key_pem(const char *pem, size_t len)
{
    if (len > CONFIG_PEM_MAX_BYTES)
        return false;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio)
        return false;
    EVP_PKEY *pk = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    bool ok = pk && EVP_PKEY_get_base_id(pk) == EVP_PKEY_RSA;
    EVP_PKEY_free(pk);
    BIO_free(bio);
    ERR_clear_error();
    return ok;
}

/* GITHUB_APP_PRIVATE_KEY or the contents of GITHUB_APP_PRIVATE_KEY_FILE into cfg. */
static crcr_err take_private_key(raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *text = given(raw, K_GITHUB_APP_PRIVATE_KEY);
    const char *path = given(raw, K_GITHUB_APP_PRIVATE_KEY_FILE);
    if (text && path)
        return fail(err, errsz,
                    "GITHUB_APP_PRIVATE_KEY_FILE: cannot be combined with GITHUB_APP_PRIVATE_KEY; "
                    "set only one");
    if (path) {
        buf_t pem;
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(path, q);
        int rc = read_small_file(path, CONFIG_PEM_MAX_BYTES, &pem);
        if (rc == EFBIG)
            return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE: '%s' is larger than %u bytes", q,
                        CONFIG_PEM_MAX_BYTES);
        if (rc)
            return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE: cannot read '%s': %s", q,
                        strerror(rc));
        if (!is_rsa_private_key_pem(buf_cstr(&pem), pem.len)) {
            OPENSSL_cleanse(pem.data, pem.len);
            buf_free(&pem);
            return fail(err, errsz,
                        "GITHUB_APP_PRIVATE_KEY_FILE: '%s' is not an RSA private key in PEM "
                        "format",
                        q);
        }
        size_t n = 0;
        cfg->private_key_pem = buf_detach(&pem, &n);
        if (!cfg->private_key_pem) {
            fail(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE: out of memory");
            return CRCR_E_NOMEM;
        }
        return CRCR_OK;
    }
    if (!text)
        return CRCR_OK;
    /* An environment variable cannot easily hold newlines: accept a PEM written with literal
     * "\n" sequences (the config file reader has already turned its own escapes into
     * newlines). */
    if (!strchr(text, '\n') && strstr(text, "\\n")) {
        raw->pem_scratch = unescape(text, strlen(text));
        if (!raw->pem_scratch) {
            fail(err, errsz, "GITHUB_APP_PRIVATE_KEY: out of memory");
            return CRCR_E_NOMEM;
        }
        text = raw->pem_scratch;
    }
    if (!is_rsa_private_key_pem(text, strlen(text)))
        return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM format");
    cfg->private_key_pem = strdup(text);
    if (!cfg->private_key_pem) {
        fail(err, errsz, "GITHUB_APP_PRIVATE_KEY: out of memory");
        return CRCR_E_NOMEM;
    }
    return CRCR_OK;
}

/* GITHUB_APP_ID: digits (App id) or a client id "Iv..." of letters, digits and '.'. */
static bool app_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > CONFIG_APP_ID_MAX)
        return false;
    bool digits = true;
    for (size_t i = 0; i < n; i++)
        if (id[i] < '0' || id[i] > '9')
            digits = false;
    if (digits)
        return id[0] != '0';
    if (n < 3 || id[0] != 'I' || id[1] != 'v')
        return false;
    for (size_t i = 2; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.'))
            return false;
    }
    return true;
}

/* CRCR_LISTEN: IPV4:PORT, [IPV6]:PORT or localhost:PORT (which listens on 127.0.0.1). */
static crcr_err take_listen(const raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, K_CRCR_LISTEN);
    char q[CONFIG_QUOTE_MAX + 4];
    quote_value(v, q);
    const char *host, *port;
    size_t hlen;
    if (*v == '[') {
        const char *rb = strchr(v, ']');
        if (!rb || rb[1] != ':')
            return fail(err, errsz, "CRCR_LISTEN: expected HOST:PORT or [IPV6]:PORT: '%s'", q);
        host = v + 1;
        hlen = (size_t)(rb - host);
        port = rb + 2;
    } else {
        const char *colon = strrchr(v, ':');
        if (!colon || memchr(v, ':', (size_t)(colon - v)))
            return fail(err, errsz, "CRCR_LISTEN: expected HOST:PORT or [IPV6]:PORT: '%s'", q);
        host = v;
        hlen = (size_t)(colon - v);
        port = colon + 1;
    }
    size_t plen = strlen(port);
    long pv = 0;
    bool port_ok = plen > 0 && plen <= 5;
    for (size_t i = 0; port_ok && i < plen; i++) {
        if (port[i] < '0' || port[i] > '9')
            port_ok = false;
        else
            pv = pv * 10 + (port[i] - '0');
    }
    if (!port_ok || pv > 65535)
        return fail(err, errsz, "CRCR_LISTEN: port must be a number from 0 to 65535: '%s'", q);

    char h[INET6_ADDRSTRLEN + 1];
    if (hlen == 0 || hlen >= sizeof(h))
        return fail(err, errsz, "CRCR_LISTEN: not a numeric IP address or localhost: '%s'", q);
    memcpy(h, host, hlen);
    h[hlen] = '\0';
    unsigned char addr[sizeof(struct in6_addr)];
    bool v6 = *v == '[';
    if (!v6 && strcasecmp(h, "localhost") == 0) {
        memcpy(h, "127.0.0.1", sizeof("127.0.0.1"));
    } else if (inet_pton(v6 ? AF_INET6 : AF_INET, h, addr) != 1) {
        return fail(err, errsz, "CRCR_LISTEN: not a numeric IP address or localhost: '%s'", q);
    }
    cfg->listen_host = strdup(h);
    if (!cfg->listen_host) {
        fail(err, errsz, "CRCR_LISTEN: out of memory");
        return CRCR_E_NOMEM;
    }
    cfg->listen_port = (int)pv;
    return CRCR_OK;
}

/* Where the password of a postgresql:// URI starts (userinfo "user:PASSWORD@"), with its
 * length; false when there is none. */
static bool pg_uri_password(const char *uri, size_t *off, size_t *len)
{
    const char *rest = strstr(uri, "://");
    if (!rest)
        return false;
    rest += 3;
    size_t alen = strcspn(rest, "/?#");
    const char *at = NULL;
    for (size_t i = alen; i > 0; i--) {
        if (rest[i - 1] == '@') {
            at = rest + i - 1;
            break;
        }
    }
    if (!at)
        return false;
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (!colon)
        return false;
    *off = (size_t)(colon + 1 - uri);
    *len = (size_t)(at - colon - 1);
    return true;
}

/* Where the value of a "password=" query parameter of a URI starts, with its length. */
static bool pg_query_password(const char *uri, size_t *off, size_t *len)
{
    const char *q = strchr(uri, '?');
    while (q) {
        q++;
        if (strncmp(q, "password=", 9) == 0) {
            *off = (size_t)(q + 9 - uri);
            *len = strcspn(q + 9, "&#");
            return true;
        }
        q = strchr(q, '&');
    }
    return false;
}

/* Registers the passwords inside a store URI as log secrets. */
static void register_store_secrets(const char *uri)
{
    size_t off, len;
    char tmp[512];
    if (pg_uri_password(uri, &off, &len) && len > 0 && len < sizeof(tmp)) {
        memcpy(tmp, uri + off, len);
        tmp[len] = '\0';
        log_add_secret(tmp);
    }
    if (pg_query_password(uri, &off, &len) && len > 0 && len < sizeof(tmp)) {
        memcpy(tmp, uri + off, len);
        tmp[len] = '\0';
        log_add_secret(tmp);
    }
    OPENSSL_cleanse(tmp, sizeof(tmp));
}

static crcr_err take_store(const raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    crcr_err e = take_string(raw, K_CRCR_STORE, &cfg->store_uri, err, errsz);
    if (e)
        return e;
    const char *s = cfg->store_uri;
    /* The value is never quoted: a postgresql:// URI may hold a password. */
    if (strncmp(s, "sqlite:", 7) == 0) {
        if (!s[7])
            return fail(err, errsz, "CRCR_STORE: sqlite: needs a path (sqlite:PATH)");
        return CRCR_OK;
    }
    if (strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0)
        return CRCR_OK;
    return fail(err, errsz,
                "CRCR_STORE: unknown scheme (expected sqlite:PATH or postgresql://...)");
}

/* ALLOWLIST_URL, CI_PROVIDERS_URL: https://github.com/... (any scheme to a loopback host, for
 * tests). */
static crcr_err take_blob_url(const raw_values *raw, key_id id, char **out, char *err, size_t errsz)
{
    crcr_err e = take_string(raw, id, out, err, errsz);
    if (e || !*out)
        return e;
    url_parts u;
    bool ok = url_split(*out, &u) &&
              (host_is_loopback(u.host, u.host_len) ||
               (u.https && u.host_len == 10 && strncasecmp(u.host, "github.com", 10) == 0));
    if (!ok)
        return fail(err, errsz,
                    "%s: must be an https://github.com/ blob URL (http:// only for loopback hosts)",
                    k_keys[id].name);
    return CRCR_OK;
}

const char *crcr_issuer_kind_name(crcr_issuer_kind kind)
{
    return kind == CRCR_ISSUER_BUILDKITE ? "buildkite" : "github";
}

/* Splits one CRCR_OIDC_ISSUERS entry s[0..n) ("URL" or "KIND=URL", KIND github or buildkite)
 * into its kind and where its URL starts. False for an unknown kind. */
static bool issuer_kind_prefix(const char **s, size_t *n, crcr_issuer_kind *kind)
{
    *kind = CRCR_ISSUER_GITHUB;
    const char *eq = memchr(*s, '=', *n);
    const char *scheme = *n >= 3 ? strstr(*s, "://") : NULL;
    if (!eq || (scheme && scheme < eq && scheme < *s + *n))
        return true; /* a plain URL (an '=' after "://" belongs to it) */
    size_t kl = (size_t)(eq - *s), skip = kl + 1;
    while (kl > 0 && is_blank((*s)[kl - 1]))
        kl--;
    if (kl == 9 && strncasecmp(*s, "buildkite", 9) == 0)
        *kind = CRCR_ISSUER_BUILDKITE;
    else if (!(kl == 6 && strncasecmp(*s, "github", 6) == 0))
        return false;
    *n -= skip;
    *s = eq + 1;
    while (*n > 0 && is_blank(**s)) {
        (*s)++;
        (*n)--;
    }
    return true;
}

static crcr_err take_issuers(const raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, K_CRCR_OIDC_ISSUERS);
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;
        while (s < e && is_blank(*s))
            s++;
        while (e > s && is_blank(e[-1]))
            e--;
        if (e > s) {
            if (cfg->n_oidc_issuers == CRCR_MAX_ISSUERS)
                return fail(err, errsz, "CRCR_OIDC_ISSUERS: more than %d issuers",
                            CRCR_MAX_ISSUERS);
            size_t len = (size_t)(e - s);
            crcr_issuer_kind kind;
            if (!issuer_kind_prefix(&s, &len, &kind))
                return fail(err, errsz,
                            "CRCR_OIDC_ISSUERS: issuer %zu: unknown kind (expected URL, "
                            "github=URL or buildkite=URL)",
                            cfg->n_oidc_issuers + 1);
            cfg->oidc_issuer_kinds[cfg->n_oidc_issuers] = kind;
            char *iss = dup_n(s, len);
            if (!iss) {
                fail(err, errsz, "CRCR_OIDC_ISSUERS: out of memory");
                return CRCR_E_NOMEM;
            }
            cfg->oidc_issuers[cfg->n_oidc_issuers++] = iss;
            strip_trailing_slashes(iss);
            if (!config_url_allowed(iss))
                return fail(err, errsz,
                            "CRCR_OIDC_ISSUERS: issuer %zu must be https:// (http:// only for "
                            "loopback hosts)",
                            cfg->n_oidc_issuers);
            for (size_t j = 0; j + 1 < cfg->n_oidc_issuers; j++)
                if (strcmp(cfg->oidc_issuers[j], iss) == 0)
                    return fail(err, errsz, "CRCR_OIDC_ISSUERS: issuer %zu is listed twice",
                                cfg->n_oidc_issuers);
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (cfg->n_oidc_issuers == 0)
        return fail(err, errsz, "CRCR_OIDC_ISSUERS: no issuer");
    return CRCR_OK;
}

/* Fills cfg from the collected raw values, stopping at the first bad one. */
static crcr_err fill(raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    crcr_err e;
    long long n;

    /* GitHub App identity. */
    if ((e = take_string(raw, K_GITHUB_APP_ID, &cfg->app_id, err, errsz)))
        return e;
    if (cfg->app_id && !app_id_valid(cfg->app_id)) {
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(cfg->app_id, q);
        return fail(err, errsz, "GITHUB_APP_ID: not an App id (digits) or client id (Iv...): '%s'",
                    q);
    }
    if (raw->val[K_GITHUB_APP_SECRET] && !*raw->val[K_GITHUB_APP_SECRET])
        return fail(err, errsz, "GITHUB_APP_SECRET: is set but empty");
    if ((e = take_string(raw, K_GITHUB_APP_SECRET, &cfg->app_secret, err, errsz)))
        return e;
    if ((e = take_string(raw, K_GITHUB_APP_SECRET_PREVIOUS, &cfg->app_secret_previous, err, errsz)))
        return e;
    if ((e = take_private_key(raw, cfg, err, errsz)))
        return e;
    if (cfg->app_id && !cfg->private_key_pem)
        return fail(err, errsz,
                    "GITHUB_APP_PRIVATE_KEY: required when GITHUB_APP_ID is set (or set "
                    "GITHUB_APP_PRIVATE_KEY_FILE)");
    if (!cfg->app_id && cfg->private_key_pem)
        return fail(err, errsz, "GITHUB_APP_ID: required when a private key is set");
    cfg->dry_run = !(cfg->app_id && cfg->private_key_pem);

    /* Upstream variables. */
    if ((e = take_string(raw, K_UPSTREAM_REPO, &cfg->upstream_repo, err, errsz)))
        return e;
    if (!ids_full_name_valid(cfg->upstream_repo)) {
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(cfg->upstream_repo, q);
        return fail(err, errsz, "UPSTREAM_REPO: expected OWNER/REPO: '%s'", q);
    }
    if ((e = take_blob_url(raw, K_ALLOWLIST_URL, &cfg->allowlist_url, err, errsz)))
        return e;
    if ((e = take_string(raw, K_ALLOWLIST_FILE, &cfg->allowlist_file, err, errsz)))
        return e;
    if ((e = take_blob_url(raw, K_CI_PROVIDERS_URL, &cfg->ci_providers_url, err, errsz)))
        return e;
    if ((e = take_string(raw, K_CI_PROVIDERS_FILE, &cfg->ci_providers_file, err, errsz)))
        return e;
    if ((e = take_int(raw, K_ALLOWLIST_TTL_SECONDS, &n, err, errsz)))
        return e;
    cfg->allowlist_ttl_s = (long)n;
    if ((e = take_int(raw, K_CRCR_STATUS_TTL, &n, err, errsz)))
        return e;
    cfg->status_ttl_s = (long)n;
    if ((e = take_int(raw, K_RATE_LIMIT_PER_MIN, &n, err, errsz)))
        return e;
    cfg->rate_limit_per_min = (long)n;
    if ((e = take_int(raw, K_ZOMBIE_TIMEOUT_SECONDS, &n, err, errsz)))
        return e;
    cfg->zombie_timeout_s = (long)n;
    if ((e = take_url(raw, K_HUD_API_URL, &cfg->hud_api_url, err, errsz)))
        return e;
    if ((e = take_string(raw, K_HUD_BOT_KEY, &cfg->hud_bot_key, err, errsz)))
        return e;
    if ((e = take_int(raw, K_HUD_MAX_RETRIES, &n, err, errsz)))
        return e;
    cfg->hud_max_retries = (long)n;
    if ((e = take_int(raw, K_MAX_DISPATCH_WORKERS, &n, err, errsz)))
        return e;
    cfg->max_dispatch_workers = (long)n;

    /* crcr's own. */
    if ((e = take_listen(raw, cfg, err, errsz)))
        return e;
    if ((e = take_store(raw, cfg, err, errsz)))
        return e;
    if ((e = take_url(raw, K_GITHUB_API_URL, &cfg->github_api_url, err, errsz)))
        return e;
    if ((e = take_issuers(raw, cfg, err, errsz)))
        return e;
    if ((e = take_string(raw, K_CRCR_OIDC_AUDIENCE, &cfg->oidc_audience, err, errsz)))
        return e;

    const char *cb = value_or_default(raw, K_CRCR_CALLBACK_TOKEN);
    if (strcasecmp(cb, "optional") == 0) {
        cfg->callback_token = CRCR_CB_TOKEN_OPTIONAL;
    } else if (strcasecmp(cb, "required") == 0) {
        cfg->callback_token = CRCR_CB_TOKEN_REQUIRED;
    } else {
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(cb, q);
        return fail(err, errsz, "CRCR_CALLBACK_TOKEN: expected optional or required: '%s'", q);
    }
    if ((e = take_string(raw, K_CRCR_ADMIN_TOKEN, &cfg->admin_token, err, errsz)))
        return e;
    if ((e = take_int(raw, K_CRCR_MAX_BODY, &n, err, errsz)))
        return e;
    cfg->max_body = (size_t)n;
    if ((e = take_int(raw, K_CRCR_DISPATCH_BUDGET, &n, err, errsz)))
        return e;
    cfg->dispatch_budget = (size_t)n;
    if ((e = take_int(raw, K_CRCR_MAX_ATTEMPTS, &n, err, errsz)))
        return e;
    cfg->max_attempts = (long)n;
    if ((e = take_int(raw, K_CRCR_SWEEP_SECONDS, &n, err, errsz)))
        return e;
    cfg->sweep_s = (long)n;
    if ((e = take_int(raw, K_CRCR_RETENTION_SECONDS, &n, err, errsz)))
        return e;
    cfg->retention_s = (long)n;

    const char *lvl = value_or_default(raw, K_CRCR_LOG);
    if (log_level_parse(lvl, &cfg->log_level) != 0) {
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(lvl, q);
        return fail(err, errsz, "CRCR_LOG: expected debug, info, warn, error or off: '%s'", q);
    }
    if ((e = take_int(raw, K_CRCR_RETRY_BASE_MS, &n, err, errsz)))
        return e;
    cfg->retry_base_ms = (long)n;
    if ((e = take_int(raw, K_CRCR_RETRY_MAX_MS, &n, err, errsz)))
        return e;
    cfg->retry_max_ms = (long)n;
    if (cfg->retry_max_ms < cfg->retry_base_ms)
        return fail(err, errsz, "CRCR_RETRY_MAX_MS: must not be less than CRCR_RETRY_BASE_MS");
    if ((e = take_int(raw, K_CRCR_LEASE_SECONDS, &n, err, errsz)))
        return e;
    cfg->lease_s = (long)n;
    if ((e = take_int(raw, K_CRCR_REQUEST_DEADLINE_SECONDS, &n, err, errsz)))
        return e;
    cfg->request_deadline_s = (long)n;
    if ((e = take_int(raw, K_CRCR_STORE_POOL, &n, err, errsz)))
        return e;
    cfg->store_pool = (long)n;
    if ((e = take_int(raw, K_CRCR_HTTP_THREADS, &n, err, errsz)))
        return e;
    cfg->http_threads = (long)n;
    static const key_id health_keys[] = {K_CRCR_HEALTH_L2_SUCCESS_PCT, K_CRCR_HEALTH_L3_SUCCESS_PCT,
                                         K_CRCR_HEALTH_L4_SUCCESS_PCT};
    for (int lv = 2; lv <= 4; lv++) {
        if ((e = take_int(raw, health_keys[lv - 2], &n, err, errsz)))
            return e;
        cfg->health_success_pct[lv] = (long)n;
    }
    if ((e = take_int(raw, K_CRCR_HEALTH_PR_HOURS, &n, err, errsz)))
        return e;
    cfg->health_pr_hours = (long)n;
    if ((e = take_int(raw, K_CRCR_MAX_CALLBACK_BODY, &n, err, errsz)))
        return e;
    cfg->max_callback_body = (size_t)n;
    if (cfg->max_callback_body > cfg->max_body) /* the smaller of the two caps applies */
        cfg->max_callback_body = cfg->max_body;
    if ((e = take_int(raw, K_CRCR_NIGHTLY_DAILY_BYTES, &n, err, errsz)))
        return e;
    cfg->nightly_daily_bytes = (int64_t)n;
    if ((e = take_int(raw, K_CRCR_HUD_CONCURRENCY, &n, err, errsz)))
        return e;
    cfg->hud_concurrency = (long)n;
    if ((e = take_int(raw, K_CRCR_HUD_CACHE_MS, &n, err, errsz)))
        return e;
    cfg->hud_cache_ms = (long)n;
    if ((e = take_int(raw, K_CRCR_ONCALL_COMMENTS, &n, err, errsz)))
        return e;
    cfg->oncall_comments = n != 0;
    return CRCR_OK;
}

const char *config_getenv(void *ctx, const char *key)
{
    return getenv(key);
}

crcr_err config_load(crcr_config *cfg, const char *file, config_getter get, void *ctx, char *err,
                     size_t errsz)
{
    raw_values raw;
    memset(&raw, 0, sizeof(raw));
    memset(cfg, 0, sizeof(*cfg));
    if (err && errsz > 0)
        err[0] = '\0';

    crcr_err e = CRCR_OK;
    if (file)
        e = read_config_file(file, &raw, err, errsz);
    for (int i = 0; i < K_COUNT && !e; i++) {
        const char *v = get ? get(ctx, k_keys[i].name) : NULL;
        raw.val[i] = v ? v : raw.file_val[i];
    }
    if (!e)
        e = fill(&raw, cfg, err, errsz);

    for (int i = 0; i < K_COUNT; i++)
        free_wiped(raw.file_val[i]);
    free_wiped(raw.pem_scratch);

    if (e) {
        config_free(cfg);
        return e;
    }
    log_add_secret(cfg->app_secret);
    log_add_secret(cfg->app_secret_previous);
    log_add_secret(cfg->admin_token);
    log_add_secret(cfg->hud_bot_key);
    register_store_secrets(cfg->store_uri);
    return CRCR_OK;
}

void config_free(crcr_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->app_id);
    free_wiped(cfg->app_secret);
    free_wiped(cfg->app_secret_previous);
    free_wiped(cfg->private_key_pem);
    free(cfg->upstream_repo);
    free(cfg->allowlist_url);
    free(cfg->allowlist_file);
    free(cfg->ci_providers_url);
    free(cfg->ci_providers_file);
    free(cfg->hud_api_url);
    free_wiped(cfg->hud_bot_key);
    free(cfg->listen_host);
    free_wiped(cfg->store_uri);
    free(cfg->github_api_url);
    for (size_t i = 0; i < cfg->n_oidc_issuers && i < CRCR_MAX_ISSUERS; i++)
        free(cfg->oidc_issuers[i]);
    free(cfg->oidc_audience);
    free_wiped(cfg->admin_token);
    memset(cfg, 0, sizeof(*cfg));
}

/* Appends a value on one line: newlines and backslashes are escaped as the file reader reads
 * them back. */
static crcr_err put_plain(buf_t *out, const char *v)
{
    crcr_err e = CRCR_OK;
    for (const char *c = v ? v : ""; *c && !e; c++) {
        if (*c == '\n')
            e = buf_puts(out, "\\n");
        else if (*c == '\\')
            e = buf_puts(out, "\\\\");
        else if (*c == '\r')
            e = buf_puts(out, "?");
        else
            e = buf_putc(out, *c);
    }
    return e;
}

crcr_err config_redact_store(const char *uri, buf_t *out)
{
    if (!uri)
        return CRCR_OK;
    size_t off1 = 0, len1 = 0, off2 = 0, len2 = 0;
    bool p1 = pg_uri_password(uri, &off1, &len1);
    bool p2 = pg_query_password(uri, &off2, &len2);
    crcr_err e = CRCR_OK;
    for (size_t i = 0; uri[i] && !e;) {
        if (p1 && i == off1) {
            e = buf_puts(out, "***");
            i += len1;
        } else if (p2 && i == off2) {
            e = buf_puts(out, "***");
            i += len2;
        } else {
            e = buf_putc(out, uri[i++]);
        }
    }
    return e;
}

/* Appends the store URI with any password replaced by "***". */
static crcr_err put_store(buf_t *out, const char *uri)
{
    if (!uri)
        return CRCR_OK;
    buf_t tmp;
    buf_init(&tmp, strlen(uri) + 16);
    crcr_err e = config_redact_store(uri, &tmp);
    if (!e)
        e = put_plain(out, buf_cstr(&tmp));
    buf_free(&tmp);
    return e;
}

crcr_err config_describe(const crcr_config *cfg, buf_t *out)
{
    crcr_err e = CRCR_OK;
    for (int i = 0; i < K_COUNT && !e; i++) {
        const key_def *k = &k_keys[i];
        e = buf_printf(out, "%s=", k->name);
        if (e)
            break;
        const char *s = NULL;
        const void *secret = NULL;
        long long num = -1;
        switch ((key_id)i) {
        case K_GITHUB_APP_ID:
            s = cfg->app_id;
            break;
        case K_GITHUB_APP_SECRET:
            secret = cfg->app_secret;
            break;
        case K_GITHUB_APP_SECRET_PREVIOUS:
            secret = cfg->app_secret_previous;
            break;
        case K_GITHUB_APP_PRIVATE_KEY:
            secret = cfg->private_key_pem;
            break;
        case K_GITHUB_APP_PRIVATE_KEY_FILE:
            s = NULL;
            break; /* the path is not kept */
        case K_UPSTREAM_REPO:
            s = cfg->upstream_repo;
            break;
        case K_ALLOWLIST_URL:
            s = cfg->allowlist_url;
            break;
        case K_ALLOWLIST_FILE:
            s = cfg->allowlist_file;
            break;
        case K_ALLOWLIST_TTL_SECONDS:
            num = cfg->allowlist_ttl_s;
            break;
        case K_CI_PROVIDERS_URL:
            s = cfg->ci_providers_url;
            break;
        case K_CI_PROVIDERS_FILE:
            s = cfg->ci_providers_file;
            break;
        case K_CRCR_STATUS_TTL:
            num = cfg->status_ttl_s;
            break;
        case K_RATE_LIMIT_PER_MIN:
            num = cfg->rate_limit_per_min;
            break;
        case K_ZOMBIE_TIMEOUT_SECONDS:
            num = cfg->zombie_timeout_s;
            break;
        case K_HUD_API_URL:
            s = cfg->hud_api_url;
            break;
        case K_HUD_BOT_KEY:
            secret = cfg->hud_bot_key;
            break;
        case K_HUD_MAX_RETRIES:
            num = cfg->hud_max_retries;
            break;
        case K_MAX_DISPATCH_WORKERS:
            num = cfg->max_dispatch_workers;
            break;
        case K_CRCR_LISTEN:
            if (cfg->listen_host && strchr(cfg->listen_host, ':'))
                e = buf_printf(out, "[%s]:%d", cfg->listen_host, cfg->listen_port);
            else if (cfg->listen_host)
                e = buf_printf(out, "%s:%d", cfg->listen_host, cfg->listen_port);
            break;
        case K_CRCR_STORE:
            e = put_store(out, cfg->store_uri);
            break;
        case K_GITHUB_API_URL:
            s = cfg->github_api_url;
            break;
        case K_CRCR_OIDC_ISSUERS:
            for (size_t j = 0; j < cfg->n_oidc_issuers && j < CRCR_MAX_ISSUERS && !e; j++) {
                if (j > 0)
                    e = buf_putc(out, ',');
                if (!e && cfg->oidc_issuer_kinds[j] != CRCR_ISSUER_GITHUB)
                    e = buf_printf(out, "%s=", crcr_issuer_kind_name(cfg->oidc_issuer_kinds[j]));
                if (!e)
                    e = put_plain(out, cfg->oidc_issuers[j]);
            }
            break;
        case K_CRCR_OIDC_AUDIENCE:
            s = cfg->oidc_audience;
            break;
        case K_CRCR_CALLBACK_TOKEN:
            s = cfg->callback_token == CRCR_CB_TOKEN_REQUIRED ? "required" : "optional";
            break;
        case K_CRCR_ADMIN_TOKEN:
            secret = cfg->admin_token;
            break;
        case K_CRCR_MAX_BODY:
            num = (long long)cfg->max_body;
            break;
        case K_CRCR_DISPATCH_BUDGET:
            num = (long long)cfg->dispatch_budget;
            break;
        case K_CRCR_MAX_ATTEMPTS:
            num = cfg->max_attempts;
            break;
        case K_CRCR_SWEEP_SECONDS:
            num = cfg->sweep_s;
            break;
        case K_CRCR_RETENTION_SECONDS:
            num = cfg->retention_s;
            break;
        case K_CRCR_LOG: {
            static const char *names[] = {"debug", "info", "warn", "error", "off"};
            unsigned lv = (unsigned)cfg->log_level;
            s = lv < sizeof(names) / sizeof(names[0]) ? names[lv] : "info";
            break;
        }
        case K_CRCR_RETRY_BASE_MS:
            num = cfg->retry_base_ms;
            break;
        case K_CRCR_RETRY_MAX_MS:
            num = cfg->retry_max_ms;
            break;
        case K_CRCR_LEASE_SECONDS:
            num = cfg->lease_s;
            break;
        case K_CRCR_REQUEST_DEADLINE_SECONDS:
            num = cfg->request_deadline_s;
            break;
        case K_CRCR_STORE_POOL:
            num = cfg->store_pool;
            break;
        case K_CRCR_HTTP_THREADS:
            num = cfg->http_threads;
            break;
        case K_CRCR_HEALTH_L2_SUCCESS_PCT:
            num = cfg->health_success_pct[2];
            break;
        case K_CRCR_HEALTH_L3_SUCCESS_PCT:
            num = cfg->health_success_pct[3];
            break;
        case K_CRCR_HEALTH_L4_SUCCESS_PCT:
            num = cfg->health_success_pct[4];
            break;
        case K_CRCR_HEALTH_PR_HOURS:
            num = cfg->health_pr_hours;
            break;
        case K_CRCR_MAX_CALLBACK_BODY:
            num = (long long)cfg->max_callback_body;
            break;
        case K_CRCR_NIGHTLY_DAILY_BYTES:
            num = cfg->nightly_daily_bytes;
            break;
        case K_CRCR_HUD_CONCURRENCY:
            num = cfg->hud_concurrency;
            break;
        case K_CRCR_HUD_CACHE_MS:
            num = cfg->hud_cache_ms;
            break;
        case K_CRCR_ONCALL_COMMENTS:
            num = cfg->oncall_comments ? 1 : 0;
            break;
        case K_COUNT:
            break;
        }
        if (e)
            break;
        if (k->secret)
            e = buf_puts(out, secret ? "(set)" : "(unset)");
        else if (k->min <= k->max)
            e = buf_printf(out, "%lld", num);
        else if (s)
            e = put_plain(out, s);
        if (!e)
            e = buf_putc(out, '\n');
    }
    return e;
}
