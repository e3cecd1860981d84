/*
 * config.h - the relay's configuration (§7 of the product contract).
 *
 * Values come from a `--config FILE` of KEY=VALUE lines and from the environment; a variable set
 * in the environment overrides the same key in the file. Everything is validated at load: the first
 * bad value stops with CRCR_E_CONFIG and one line in `err` that names the variable and the problem
 * (never its value when the variable is a secret). config_check() runs the same validation
 * without stopping, for `crcr config --check`.
 */
#ifndef CRCR_CONFIG_H
#define CRCR_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "log.h"

#define CRCR_MAX_ISSUERS 8

typedef enum { CRCR_CB_TOKEN_OPTIONAL = 0, CRCR_CB_TOKEN_REQUIRED = 1 } crcr_cb_token_mode;

/* What an OIDC issuer's tokens look like, and so how the repository they speak for is found
 * (CRCR_OIDC_ISSUERS entries "URL" and "KIND=URL"). */
typedef enum {
    CRCR_ISSUER_GITHUB = 0,   /* GitHub Actions: the "repository" claim, pinned by its ids */
    CRCR_ISSUER_BUILDKITE = 1 /* Buildkite: organization_id/pipeline_id through the CI providers
                                 map (ci_providers.h) */
} crcr_issuer_kind;

/* "github" or "buildkite". */
const char *crcr_issuer_kind_name(crcr_issuer_kind kind);

typedef struct crcr_config {
    /* GitHub App. All strings are owned by the config (freed by config_free). */
    char *app_id;              /* GITHUB_APP_ID; NULL in dry-run */
    char *app_secret;          /* GITHUB_APP_SECRET: the webhook secret */
    char *app_secret_previous; /* GITHUB_APP_SECRET_PREVIOUS: accepted too, during rotation */
    char *private_key_pem;     /* GITHUB_APP_PRIVATE_KEY, or the contents of ..._FILE */
    bool dry_run;              /* true when there are no App credentials (no id or no key) */

    char *upstream_repo;       /* UPSTREAM_REPO, default pytorch/pytorch */
    char *allowlist_url;       /* ALLOWLIST_URL (GitHub blob URL) or NULL */
    char *allowlist_file;      /* ALLOWLIST_FILE or NULL; one of the two is required by serve */
    char *ci_providers_url;    /* CI_PROVIDERS_URL (GitHub blob URL) or NULL */
    char *ci_providers_file;   /* CI_PROVIDERS_FILE or NULL; wins over CI_PROVIDERS_URL */
    long allowlist_ttl_s;      /* ALLOWLIST_TTL_SECONDS, default 900 */
    long status_ttl_s;         /* CRCR_STATUS_TTL, default 259200 */
    long rate_limit_per_min;   /* RATE_LIMIT_PER_MIN, default 100 */
    long zombie_timeout_s;     /* ZOMBIE_TIMEOUT_SECONDS, default 21600 */
    char *hud_api_url;         /* HUD_API_URL or NULL (forwarding off) */
    char *hud_bot_key;         /* HUD_BOT_KEY or NULL */
    long hud_max_retries;      /* HUD_MAX_RETRIES, default 3 */
    long max_dispatch_workers; /* MAX_DISPATCH_WORKERS: rows in flight per instance, default 100 */
    long github_concurrency;   /* CRCR_GITHUB_CONCURRENCY: GitHub requests in flight, default 90 */

    char *listen_host;    /* from CRCR_LISTEN host:port, default 127.0.0.1 */
    int listen_port;      /* default 8000; 0 asks the OS for a free port */
    char *store_uri;      /* CRCR_STORE, default sqlite:crcr.db */
    char *github_api_url; /* GITHUB_API_URL, default https://api.github.com (no trailing '/') */
    char *github_web_url; /* derived from it (config_web_url); NULL in a hand-made config */
    char *oidc_issuers[CRCR_MAX_ISSUERS]; /* CRCR_OIDC_ISSUERS, comma separated (URLs only) */
    crcr_issuer_kind oidc_issuer_kinds[CRCR_MAX_ISSUERS]; /* the kind of each */
    size_t n_oidc_issuers;
    char *oidc_audience;               /* CRCR_OIDC_AUDIENCE, default pytorch-cross-repo-ci-relay */
    crcr_cb_token_mode callback_token; /* CRCR_CALLBACK_TOKEN optional|required */
    char *admin_token;                 /* CRCR_ADMIN_TOKEN or NULL (admin API off) */
    size_t max_body;                   /* CRCR_MAX_BODY bytes, default 25 MiB */
    size_t dispatch_budget;            /* CRCR_DISPATCH_BUDGET bytes, default 65000 */
    long max_attempts;                 /* CRCR_MAX_ATTEMPTS, default 12 */
    long sweep_s;                      /* CRCR_SWEEP_SECONDS, default 600 */
    long reconcile_s;                  /* CRCR_RECONCILE_SECONDS, default 300, 0: off */
    long reconcile_window_s;           /* CRCR_RECONCILE_WINDOW_SECONDS, default 259200 */
    long reconcile_max_per_pass;       /* CRCR_RECONCILE_MAX_PER_PASS, default 100 */
    long retention_s;                  /* CRCR_RETENTION_SECONDS, default 604800 */
    crcr_log_level log_level;          /* CRCR_LOG, default info */
    long retry_base_ms;                /* CRCR_RETRY_BASE_MS, first retry delay, default 1000 */
    long retry_max_ms; /* CRCR_RETRY_MAX_MS, cap of one retry delay, default 21600000 (6 h) */
    long lease_s;      /* CRCR_LEASE_SECONDS, outbox claim lease, default 120 */

    long request_deadline_s; /* CRCR_REQUEST_DEADLINE_SECONDS, total per HTTP request, default 15 */
    long store_pool;         /* CRCR_STORE_POOL, PostgreSQL connections per instance, 0: auto */
    long http_threads;       /* CRCR_HTTP_THREADS, 0: 4 per CPU, at least 8 */
    long health_success_pct[5];  /* CRCR_HEALTH_L{2,3,4}_SUCCESS_PCT: level-health thresholds */
    long health_pr_hours;        /* CRCR_HEALTH_PR_HOURS: L2's limit on a PR's total time */
    size_t max_callback_body;    /* CRCR_MAX_CALLBACK_BODY bytes, default 1 MiB */
    int64_t nightly_daily_bytes; /* CRCR_NIGHTLY_DAILY_BYTES per repo and UTC day, 0: none */
    long hud_concurrency;        /* CRCR_HUD_CONCURRENCY: HUD renders at once, default 2 */
    long hud_cache_ms;           /* CRCR_HUD_CACHE_MS: life of a cached HUD answer, 0: off */
    bool oncall_comments;        /* CRCR_ONCALL_COMMENTS: on-call comments on the PR, default on */
    long max_connections_per_client; /* CRCR_MAX_CONNECTIONS_PER_CLIENT, default 64, 0: no cap */
    long header_timeout_ms;          /* CRCR_HEADER_TIMEOUT_MS, whole header block, default 3000 */
    size_t unauth_body_budget;       /* CRCR_UNAUTH_BODY_BUDGET bytes, default 64 MiB */
    char *oncall_trusted_authors;    /* CRCR_ONCALL_TRUSTED_AUTHORS: logins whose on-call marker
                                        counts, comma separated (default pytorch-bot[bot]); "-" for
                                        none, which no login matches */
} crcr_config;

/* Looks a key up; returns NULL when unset. Lets tests load a config without touching environ. */
typedef const char *(*config_getter)(void *ctx, const char *key);

/* The getter over the process environment (getenv). */
const char *config_getenv(void *ctx, const char *key);

/*
 * Loads and validates. `file` may be NULL. Values from `get(ctx, KEY)` override the file's.
 * On success fills *cfg (which the caller releases with config_free). On failure returns
 * CRCR_E_CONFIG with a one-line message such as
 *   "CRCR_MAX_BODY: not a positive integer" or "GITHUB_APP_PRIVATE_KEY_FILE: cannot read: ..."
 * and leaves *cfg freed. Secret values never appear in `err`.
 */
crcr_err config_load(crcr_config *cfg, const char *file, config_getter get, void *ctx, char *err,
                     size_t errsz);

/* Receives one problem of a configuration: a line such as "CRCR_MAX_BODY: not a positive integer"
 * (never a secret's value). */
typedef void (*config_problem_fn)(void *ctx, const char *problem);

/* Longest problem line config_check() hands on. */
#define CONFIG_PROBLEM_MAX 512u

/*
 * What `crcr serve` checks before it starts, every problem at once (`crcr config --check`):
 * loads like config_load(), but a bad line of the file or a bad value is passed to `fn` and
 * loading goes on, then the variables `crcr serve` requires (config_require_serve) are checked.
 * A variable already reported is not reported again as missing. Returns the number of problems
 * (0: serve accepts these values). *cfg holds what could be loaded, in every case (the caller
 * frees it with config_free); it is zeroed when the file could not be read at all.
 */
unsigned config_check(crcr_config *cfg, const char *file, config_getter get, void *ctx,
                      config_problem_fn fn, void *fn_ctx);

/* The settings `crcr serve` requires on top of valid values: GITHUB_APP_SECRET, and
 * ALLOWLIST_FILE or ALLOWLIST_URL. Passes each one missing to `fn` and returns how many. */
unsigned config_require_serve(const crcr_config *cfg, config_problem_fn fn, void *ctx);

/* Frees every owned string; accepts a zeroed config. */
void config_free(crcr_config *cfg);

/* True when `url` is https://, or http:// to a loopback host (127.0.0.0/8, ::1, localhost). */
bool config_url_allowed(const char *url);

/* GitHub's web host for the configured API, without a trailing '/': where blob URLs
 * (ALLOWLIST_URL, CI_PROVIDERS_URL), workflow runs and pull requests are. Derived from
 * GITHUB_API_URL: https://HOST for GitHub Enterprise Server's https://HOST/api/v3,
 * https://NAME for an https://api.NAME host (api.github.com, GHE.com's api.SUBDOMAIN.ghe.com),
 * and https://github.com for anything else (a proxy or a test double of api.github.com). */
const char *config_web_url(const crcr_config *cfg);

/* True when `url` is on `web_url` (scheme and host:port equal, case-insensitively, then '/' or
 * the end); NULL or "" stands for https://github.com. */
bool config_url_on_web_host(const char *url, const char *web_url);

/* Appends a store URI (CRCR_STORE) with every password in it replaced by "***": the only form
 * of the URI that may be logged or printed. */
crcr_err config_redact_store(const char *uri, buf_t *out);

/* Writes the documented variables with their effective values, secrets shown as "(set)" or
 * "(unset)", one KEY=VALUE per line (used by `crcr config` and the docs check). */
crcr_err config_describe(const crcr_config *cfg, buf_t *out);

#endif
