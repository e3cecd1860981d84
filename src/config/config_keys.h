/*
 * config_keys.h - the table of the configuration's variables (internal to config*.c).
 *
 * One entry per variable: its name, its default, whether it is a secret, its integer range, how
 * crcr_config keeps it (the kind and the field) and a one-line description. config.c loads by it,
 * config_keys.c holds it and describes a loaded configuration by it. Other modules read
 * crcr_config (config.h) and never this table.
 */
#ifndef CRCR_CONFIG_KEYS_H
#define CRCR_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* Integer variables without a tighter range are capped here, so that callers may multiply seconds
 * by 1000 in 64-bit arithmetic and cast counts to int without overflow. */
#define CONFIG_INT_MAX 2147483647LL

/* The variables, in the order `crcr config` lists them and config_load() reads them (but for
 * ALLOWLIST_TTL_SECONDS: see fill() in config.c). */
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
    K_CRCR_GITHUB_CONCURRENCY,
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
    K_CRCR_RECONCILE_SECONDS,
    K_CRCR_RECONCILE_WINDOW_SECONDS,
    K_CRCR_RECONCILE_MAX_PER_PASS,
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
    K_CRCR_MAX_CONNECTIONS_PER_CLIENT,
    K_CRCR_HEADER_TIMEOUT_MS,
    K_CRCR_UNAUTH_BODY_BUDGET,
    K_CRCR_ONCALL_TRUSTED_AUTHORS,
    K_COUNT
} key_id;

/* How crcr_config keeps a variable, and so how config_load() reads it and config_describe()
 * shows it. The rules of single variables (GITHUB_APP_ID's syntax, CRCR_STORE's schemes...) come
 * on top, in config.c. */
typedef enum {
    V_OWN,      /* read and shown by code of its own (or, for ..._PRIVATE_KEY_FILE, not kept) */
    V_STRING,   /* char *: the value, else the default (NULL when none) */
    V_URL,      /* char *: https:// (http:// only for loopback hosts), no trailing '/' */
    V_BLOB_URL, /* char *: an https://github.com/ blob URL (any scheme to a loopback host) */
    V_PEM,      /* char *: the App's private key, from the variable or from ..._PRIVATE_KEY_FILE */
    V_LONG,     /* from here on integers within [min, max]: long */
    V_SIZE,     /* size_t */
    V_INT64,    /* int64_t */
    V_BOOL      /* bool, from 0 or 1 */
} value_kind;

#define V_IS_INT(kind) ((kind) >= V_LONG)

typedef struct {
    const char *name;
    const char *def; /* the default as text; NULL when unset by default */
    bool secret;     /* never printed, never quoted in an error */
    long long min;   /* the range of an integer kind (V_LONG to V_BOOL) */
    long long max;
    value_kind kind;
    size_t off; /* offsetof the crcr_config field; 0 for V_OWN */
    const char *desc;
} key_def;

extern const key_def config_keys[K_COUNT];

/* The field of a string variable (V_STRING to V_PEM) in `cfg`, else NULL. */
char **config_key_str(crcr_config *cfg, key_id id);

/* The value of an integer variable (V_LONG to V_BOOL) in `cfg`. */
long long config_key_int(const crcr_config *cfg, key_id id);

/* Stores `n`, already within the variable's range, into its integer field. */
void config_key_set_int(crcr_config *cfg, key_id id, long long n);

#endif
