/*
 * config_keys.c - the table of the configuration's variables and config_describe(); see
 * config_keys.h and config.h.
 *
 * The table drives loading (config.c: a key not in it is an error in a config file),
 * config_describe() and so docs/configuration.md, which a unit test keeps in step.
 */
#include "config_keys.h"
#include "crcr_limits.h"

#include <stdint.h>
#include <string.h>

#define NOT_INT 1, 0 /* no range: not an integer */
#define AS(kind, field) kind, offsetof(crcr_config, field)
#define OWN V_OWN, 0
#define STR(n) #n
#define XSTR(n) STR(n)

const key_def config_keys[K_COUNT] = {
    [K_GITHUB_APP_ID] = {"GITHUB_APP_ID", NULL, false, NOT_INT, AS(V_STRING, app_id),
                         "GitHub App id (digits) or client id (Iv...). Without an id and a private "
                         "key the relay runs in dry-run."},
    [K_GITHUB_APP_SECRET] = {"GITHUB_APP_SECRET", NULL, true, NOT_INT, AS(V_STRING, app_secret),
                             "Webhook secret (X-Hub-Signature-256). `crcr serve` requires it; "
                             "when set it must not be empty."},
    [K_GITHUB_APP_SECRET_PREVIOUS] = {"GITHUB_APP_SECRET_PREVIOUS", NULL, true, NOT_INT,
                                      AS(V_STRING, app_secret_previous),
                                      "Previous webhook secret, also accepted while a rotation "
                                      "is in progress."},
    [K_GITHUB_APP_PRIVATE_KEY] = {"GITHUB_APP_PRIVATE_KEY", NULL, true, NOT_INT,
                                  AS(V_PEM, private_key_pem),
                                  "App private key as PEM text (RSA, PKCS#1 or PKCS#8). Literal "
                                  "`\\n` sequences are turned into newlines."},
    [K_GITHUB_APP_PRIVATE_KEY_FILE] = {"GITHUB_APP_PRIVATE_KEY_FILE", NULL, false, NOT_INT, OWN,
                                       "Path of a PEM file holding the App private key; "
                                       "excludes GITHUB_APP_PRIVATE_KEY."},
    [K_UPSTREAM_REPO] = {"UPSTREAM_REPO", "pytorch/pytorch", false, NOT_INT,
                         AS(V_STRING, upstream_repo),
                         "owner/repo whose webhooks are relayed (compared case-insensitively)."},
    [K_ALLOWLIST_URL] = {"ALLOWLIST_URL", NULL, false, NOT_INT, AS(V_BLOB_URL, allowlist_url),
                         "GitHub blob URL of the allowlist "
                         "(https://github.com/OWNER/REPO/blob/REF/PATH)."},
    [K_ALLOWLIST_FILE] = {"ALLOWLIST_FILE", NULL, false, NOT_INT, AS(V_STRING, allowlist_file),
                          "Local allowlist file; wins over ALLOWLIST_URL."},
    [K_ALLOWLIST_TTL_SECONDS] = {"ALLOWLIST_TTL_SECONDS", "900", false, 1, CONFIG_INT_MAX,
                                 AS(V_LONG, allowlist_ttl_s),
                                 "Seconds before the allowlist (and the CI providers map) is "
                                 "fetched again."},
    [K_CI_PROVIDERS_URL] = {"CI_PROVIDERS_URL", NULL, false, NOT_INT,
                            AS(V_BLOB_URL, ci_providers_url),
                            "GitHub blob URL of ci_providers.yml, the map from Buildkite "
                            "pipelines to repositories; unset: no pipeline is mapped."},
    [K_CI_PROVIDERS_FILE] = {"CI_PROVIDERS_FILE", NULL, false, NOT_INT,
                             AS(V_STRING, ci_providers_file),
                             "Local ci_providers.yml; wins over CI_PROVIDERS_URL."},
    [K_CRCR_STATUS_TTL] =
        {"CRCR_STATUS_TTL", "259200", false, 1, CONFIG_INT_MAX, AS(V_LONG, status_ttl_s),
         "Seconds the callback state of a dispatched run is kept (GitHub may keep a run "
         "pending for 3 days)."},
    [K_RATE_LIMIT_PER_MIN] = {"RATE_LIMIT_PER_MIN", "100", false, 1, CONFIG_INT_MAX,
                              AS(V_LONG, rate_limit_per_min),
                              "Callbacks accepted per downstream repo per 60 s window."},
    [K_ZOMBIE_TIMEOUT_SECONDS] = {"ZOMBIE_TIMEOUT_SECONDS", "21600", false, 1, CONFIG_INT_MAX,
                                  AS(V_LONG, zombie_timeout_s),
                                  "Seconds after which an in-progress run is marked timed_out."},
    [K_HUD_API_URL] = {"HUD_API_URL", NULL, false, NOT_INT, AS(V_URL, hud_api_url),
                       "External HUD API base URL; unset or empty turns HUD forwarding off."},
    [K_HUD_BOT_KEY] = {"HUD_BOT_KEY", NULL, true, NOT_INT, AS(V_STRING, hud_bot_key),
                       "Key sent to the external HUD (x-hud-internal-bot)."},
    [K_HUD_MAX_RETRIES] = {"HUD_MAX_RETRIES", "3", false, 0, 16, AS(V_LONG, hud_max_retries),
                           "Retries of one HUD write on 5xx or network errors."},
    [K_MAX_DISPATCH_WORKERS] = {"MAX_DISPATCH_WORKERS", XSTR(CRCR_DISPATCH_WORKERS_DEFAULT), false,
                                1, CRCR_MAX_DISPATCH_WORKERS, AS(V_LONG, max_dispatch_workers),
                                "Outbox rows (dispatches, check runs, comments...) one instance "
                                "carries out at once; their requests share "
                                "CRCR_GITHUB_CONCURRENCY. No thread per row."},
    [K_CRCR_GITHUB_CONCURRENCY] = {"CRCR_GITHUB_CONCURRENCY", XSTR(CRCR_GITHUB_CONCURRENCY_DEFAULT),
                                   false, 1, CRCR_MAX_DISPATCH_WORKERS,
                                   AS(V_LONG, github_concurrency),
                                   "Requests to the GitHub API in flight at once for the whole "
                                   "App: every instance on one PostgreSQL store together (GitHub "
                                   "allows 100 concurrent requests)."},
    [K_CRCR_LISTEN] = {"CRCR_LISTEN", "127.0.0.1:8000", false, NOT_INT, OWN,
                       "Listen address: IPV4:PORT, [IPV6]:PORT or localhost:PORT; port 0 lets "
                       "the OS choose."},
    [K_CRCR_STORE] = {"CRCR_STORE", "sqlite:crcr.db", false, NOT_INT, AS(V_STRING, store_uri),
                      "Store: sqlite:PATH or a postgresql:// (postgres://) URI. A password in the "
                      "URI is never printed."},
    [K_GITHUB_API_URL] = {"GITHUB_API_URL", "https://api.github.com", false, NOT_INT,
                          AS(V_URL, github_api_url), "GitHub REST API base URL."},
    [K_CRCR_OIDC_ISSUERS] = {"CRCR_OIDC_ISSUERS",
                             "https://token.actions.githubusercontent.com,"
                             "buildkite=https://agent.buildkite.com",
                             false, NOT_INT, OWN,
                             "Comma-separated OIDC issuers trusted for callbacks (at most " XSTR(
                                 CRCR_MAX_ISSUERS) "): URL (GitHub Actions tokens) or "
                                                   "buildkite=URL (Buildkite tokens)."},
    [K_CRCR_OIDC_AUDIENCE] = {"CRCR_OIDC_AUDIENCE", "pytorch-cross-repo-ci-relay", false, NOT_INT,
                              AS(V_STRING, oidc_audience),
                              "Audience (aud) required in callback OIDC tokens."},
    [K_CRCR_CALLBACK_TOKEN] = {"CRCR_CALLBACK_TOKEN", "optional", false, NOT_INT, OWN,
                               "optional: a callback without callback_token is accepted; "
                               "required: it is rejected. A wrong token is always rejected."},
    [K_CRCR_ADMIN_TOKEN] = {"CRCR_ADMIN_TOKEN", NULL, true, NOT_INT, AS(V_STRING, admin_token),
                            "Bearer token of the admin API; unset turns the admin API off."},
    [K_CRCR_MAX_BODY] = {"CRCR_MAX_BODY", "26214400", false, 1024, 100LL * 1024 * 1024,
                         AS(V_SIZE, max_body), "Largest request body in bytes (413 beyond)."},
    [K_CRCR_DISPATCH_BUDGET] = {"CRCR_DISPATCH_BUDGET", "65000", false, 1024, 65535,
                                AS(V_SIZE, dispatch_budget),
                                "Largest repository_dispatch body in bytes before trimming."},
    [K_CRCR_MAX_ATTEMPTS] = {"CRCR_MAX_ATTEMPTS", "12", false, 1, 1000, AS(V_LONG, max_attempts),
                             "Attempts of one outbound call before its outbox row is dead."},
    [K_CRCR_SWEEP_SECONDS] = {"CRCR_SWEEP_SECONDS", "600", false, 1, CONFIG_INT_MAX,
                              AS(V_LONG, sweep_s), "Seconds between sweeper passes."},
    [K_CRCR_RECONCILE_SECONDS] = {"CRCR_RECONCILE_SECONDS", "300", false, 0, CONFIG_INT_MAX,
                                  AS(V_LONG, reconcile_s),
                                  "Seconds between reconciler passes (App mode: webhooks GitHub "
                                  "failed to deliver are asked again); one pass at start-up. 0: "
                                  "off."},
    [K_CRCR_RECONCILE_WINDOW_SECONDS] = {"CRCR_RECONCILE_WINDOW_SECONDS", "259200", false, 60,
                                         CONFIG_INT_MAX, AS(V_LONG, reconcile_window_s),
                                         "How far back the reconciler reads the App's delivery "
                                         "log (GitHub keeps 3 days)."},
    [K_CRCR_RECONCILE_MAX_PER_PASS] = {"CRCR_RECONCILE_MAX_PER_PASS", "100", false, 1, 10000,
                                       AS(V_LONG, reconcile_max_per_pass),
                                       "Redeliveries the reconciler asks for in one pass at "
                                       "most."},
    [K_CRCR_RETENTION_SECONDS] = {"CRCR_RETENTION_SECONDS", "604800", false, 1, CONFIG_INT_MAX,
                                  AS(V_LONG, retention_s),
                                  "Seconds deliveries and finished outbox rows are kept."},
    [K_CRCR_LOG] = {"CRCR_LOG", "info", false, NOT_INT, OWN,
                    "Log level: debug, info, warn, error, off."},
    [K_CRCR_RETRY_BASE_MS] = {"CRCR_RETRY_BASE_MS", "1000", false, 1, CONFIG_INT_MAX,
                              AS(V_LONG, retry_base_ms),
                              "First retry delay of a transient failure, in ms; doubles per "
                              "attempt, with jitter, up to 2 minutes, then the long tail "
                              "(1 minute doubling per attempt)."},
    [K_CRCR_RETRY_MAX_MS] = {"CRCR_RETRY_MAX_MS", "21600000", false, 1, CONFIG_INT_MAX,
                             AS(V_LONG, retry_max_ms),
                             "Cap of one retry delay, in ms; at least CRCR_RETRY_BASE_MS."},
    [K_CRCR_LEASE_SECONDS] = {"CRCR_LEASE_SECONDS", "120", false, 1, CONFIG_INT_MAX,
                              AS(V_LONG, lease_s),
                              "Seconds a worker holds a claimed outbox row before another may "
                              "take it."},
    [K_CRCR_REQUEST_DEADLINE_SECONDS] = {"CRCR_REQUEST_DEADLINE_SECONDS", "15", false, 1, 3600,
                                         AS(V_LONG, request_deadline_s),
                                         "Seconds one HTTP request may take, from the accept (or "
                                         "the previous answer on a kept-alive connection) to its "
                                         "answer; slower connections are closed."},
    [K_CRCR_STORE_POOL] = {"CRCR_STORE_POOL", "0", false, 0, 256, AS(V_LONG, store_pool),
                           "PostgreSQL connections per instance (a postgresql:// store). 0: "
                           "MAX_DISPATCH_WORKERS + HTTP threads + CRCR_HUD_CONCURRENCY + 2 "
                           "(capped at 256), so that no outbox worker waits for a connection "
                           "while its lease runs. The server needs instances x (pool + 1)."},
    [K_CRCR_HTTP_THREADS] = {"CRCR_HTTP_THREADS", "0", false, 0, 256, AS(V_LONG, http_threads),
                             "Threads serving HTTP requests. 0: 4 per CPU available to the "
                             "process (affinity and cgroup quota), at least 8. A request "
                             "holds its thread while its webhook is committed; concurrent "
                             "webhooks share one commit, so more threads than CPUs means fewer "
                             "commits under load."},
    [K_CRCR_HEALTH_L2_SUCCESS_PCT] = {"CRCR_HEALTH_L2_SUCCESS_PCT", "70", false, 0, 100,
                                      AS(V_LONG, health_success_pct[2]),
                                      "Level health: L2 needs a weekly success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_L3_SUCCESS_PCT] = {"CRCR_HEALTH_L3_SUCCESS_PCT", "90", false, 0, 100,
                                      AS(V_LONG, health_success_pct[3]),
                                      "Level health: L3 needs a success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_L4_SUCCESS_PCT] = {"CRCR_HEALTH_L4_SUCCESS_PCT", "95", false, 0, 100,
                                      AS(V_LONG, health_success_pct[4]),
                                      "Level health: L4 needs a success rate above this "
                                      "percentage."},
    [K_CRCR_HEALTH_PR_HOURS] = {"CRCR_HEALTH_PR_HOURS", "3", false, 1, 168,
                                AS(V_LONG, health_pr_hours),
                                "Level health: L2 and above need every PR's runs done within this "
                                "many hours."},
    [K_CRCR_MAX_CALLBACK_BODY] = {"CRCR_MAX_CALLBACK_BODY", "1048576", false, 1024,
                                  100LL * 1024 * 1024, AS(V_SIZE, max_callback_body),
                                  "Largest callback body in bytes (413 beyond; at most "
                                  "CRCR_MAX_BODY). A callback echoes one webhook, which is far "
                                  "smaller; nightly/periodic reports are held to 64 KiB."},
    [K_CRCR_NIGHTLY_DAILY_BYTES] = {"CRCR_NIGHTLY_DAILY_BYTES", "16777216", false, 0,
                                    CONFIG_INT_MAX, AS(V_INT64, nightly_daily_bytes),
                                    "Bytes of nightly/periodic reports one downstream repo may "
                                    "have stored per UTC day; past it such callbacks get 429 "
                                    "with Retry-After (the next UTC midnight). 0: no limit."},
    [K_CRCR_HUD_CONCURRENCY] = {"CRCR_HUD_CONCURRENCY", "2", false, 1, 64,
                                AS(V_LONG, hud_concurrency),
                                "HUD pages and /api/v1 answers rendered at once, on threads of "
                                "their own; up to 8 per slot wait, further ones get 503 with "
                                "Retry-After. Webhooks and callbacks never wait behind them."},
    [K_CRCR_HUD_CACHE_MS] = {"CRCR_HUD_CACHE_MS", "2000", false, 0, 600000,
                             AS(V_LONG, hud_cache_ms),
                             "Milliseconds a rendered HUD page or /api/v1 answer is served "
                             "again from memory (per path and query, 32 MiB in all). 0: off."},
    [K_CRCR_ONCALL_COMMENTS] = {"CRCR_ONCALL_COMMENTS", "1", false, 0, 1,
                                AS(V_BOOL, oncall_comments),
                                "1: when a crcr check run completes with failure, cancelled or "
                                "timed_out, comment once per PR and downstream repo on the "
                                "upstream PR, mentioning the repo's on-calls from the allowlist. "
                                "0: off."},
    [K_CRCR_MAX_CONNECTIONS_PER_CLIENT] = {"CRCR_MAX_CONNECTIONS_PER_CLIENT", "64", false, 0, 65535,
                                           AS(V_LONG, max_connections_per_client),
                                           "Connections one peer (an IPv4 address, an IPv6 /64) "
                                           "may hold; the next is refused at accept. 0: no cap "
                                           "(behind a proxy that applies its own)."},
    [K_CRCR_HEADER_TIMEOUT_MS] = {"CRCR_HEADER_TIMEOUT_MS", "3000", false, 1, 600000,
                                  AS(V_LONG, header_timeout_ms),
                                  "Milliseconds the whole header block of a request may take, "
                                  "from the accept (or the previous answer on a kept-alive "
                                  "connection); slower connections are closed."},
    [K_CRCR_UNAUTH_BODY_BUDGET] = {"CRCR_UNAUTH_BODY_BUDGET", "67108864", false, 1024,
                                   CONFIG_INT_MAX, AS(V_SIZE, unauth_body_budget),
                                   "Bytes of request bodies not yet authenticated that all "
                                   "connections together may hold, at least CRCR_MAX_BODY (unset: "
                                   "64 MiB, or CRCR_MAX_BODY when that is larger); a request past "
                                   "it is answered 503 with Retry-After."},
    [K_CRCR_ONCALL_TRUSTED_AUTHORS] = {"CRCR_ONCALL_TRUSTED_AUTHORS", "pytorch-bot[bot]", false,
                                       NOT_INT, AS(V_STRING, oncall_trusted_authors),
                                       "Comma-separated GitHub logins whose on-call marker at the "
                                       "start of a PR comment counts as the on-call comment "
                                       "(besides this App's own comments). The default is "
                                       "upstream's bot, so that it and crcr never both comment. "
                                       "-: nobody, only this App's own comments."},
};

/* The char * field of a string variable, else NULL. */
static char *const *str_field(const crcr_config *cfg, key_id id)
{
    const key_def *k = &config_keys[id];
    if (k->kind == V_OWN || V_IS_INT(k->kind))
        return NULL;
    return (char *const *)((const char *)cfg + k->off);
}

char **config_key_str(crcr_config *cfg, key_id id)
{
    return (char **)str_field(cfg, id);
}

long long config_key_int(const crcr_config *cfg, key_id id)
{
    const key_def *k = &config_keys[id];
    const void *p = (const char *)cfg + k->off;
    switch (k->kind) {
    case V_LONG:
        return *(const long *)p;
    case V_SIZE:
        return (long long)*(const size_t *)p;
    case V_INT64:
        return *(const int64_t *)p;
    case V_BOOL:
        return *(const bool *)p ? 1 : 0;
    default:
        return -1;
    }
}

void config_key_set_int(crcr_config *cfg, key_id id, long long n)
{
    const key_def *k = &config_keys[id];
    void *p = (char *)cfg + k->off;
    switch (k->kind) {
    case V_LONG:
        *(long *)p = (long)n;
        break;
    case V_SIZE:
        *(size_t *)p = (size_t)n;
        break;
    case V_INT64:
        *(int64_t *)p = (int64_t)n;
        break;
    case V_BOOL:
        *(bool *)p = n != 0;
        break;
    default:
        break;
    }
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

/* Appends the value of one variable as `crcr config` shows it: secrets as "(set)" or "(unset)",
 * unset strings as nothing. */
static crcr_err put_value(buf_t *out, const crcr_config *cfg, key_id id)
{
    const key_def *k = &config_keys[id];
    crcr_err e = CRCR_OK;
    switch (id) {
    case K_CRCR_LISTEN:
        if (cfg->listen_host && strchr(cfg->listen_host, ':'))
            return buf_printf(out, "[%s]:%d", cfg->listen_host, cfg->listen_port);
        if (cfg->listen_host)
            return buf_printf(out, "%s:%d", cfg->listen_host, cfg->listen_port);
        return CRCR_OK;
    case K_CRCR_STORE:
        return put_store(out, cfg->store_uri);
    case K_CRCR_OIDC_ISSUERS:
        for (size_t j = 0; j < cfg->n_oidc_issuers && j < CRCR_MAX_ISSUERS && !e; j++) {
            if (j > 0)
                e = buf_putc(out, ',');
            if (!e && cfg->oidc_issuer_kinds[j] != CRCR_ISSUER_GITHUB)
                e = buf_printf(out, "%s=", crcr_issuer_kind_name(cfg->oidc_issuer_kinds[j]));
            if (!e)
                e = put_plain(out, cfg->oidc_issuers[j]);
        }
        return e;
    case K_CRCR_CALLBACK_TOKEN:
        return buf_puts(out,
                        cfg->callback_token == CRCR_CB_TOKEN_REQUIRED ? "required" : "optional");
    case K_CRCR_LOG: {
        static const char *names[] = {"debug", "info", "warn", "error", "off"};
        unsigned lv = (unsigned)cfg->log_level;
        return buf_puts(out, lv < sizeof(names) / sizeof(names[0]) ? names[lv] : "info");
    }
    default:
        break;
    }
    char *const *s = str_field(cfg, id);
    if (k->secret)
        return buf_puts(out, s && *s ? "(set)" : "(unset)");
    if (V_IS_INT(k->kind))
        return buf_printf(out, "%lld", config_key_int(cfg, id));
    return s ? put_plain(out, *s) : CRCR_OK; /* GITHUB_APP_PRIVATE_KEY_FILE: the path is not kept */
}

crcr_err config_describe(const crcr_config *cfg, buf_t *out)
{
    crcr_err e = CRCR_OK;
    for (int i = 0; i < K_COUNT && !e; i++) {
        e = buf_printf(out, "%s=", config_keys[i].name);
        if (!e)
            e = put_value(out, cfg, (key_id)i);
        if (!e)
            e = buf_putc(out, '\n');
    }
    return e;
}
