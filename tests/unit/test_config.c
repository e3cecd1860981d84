/*
 * test_config.c - configuration loading (src/config/config.c): defaults, file syntax, environment
 * precedence, every class of bad value, secrets kept out of errors and output, private keys and
 * the URL variables. The address syntax is test_config_url.c's; the table of variables,
 * config_describe() and docs/configuration.md are test_config_keys.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "buf.h"
#include "config.h"
#include "log.h"

/* Keys made once for the whole group (RSA generation takes a while). */
static char *g_rsa_pkcs1; /* "-----BEGIN RSA PRIVATE KEY-----" */
static char *g_rsa_pkcs8; /* "-----BEGIN PRIVATE KEY-----" */
static char *g_ec_pem;    /* an EC key: valid PEM, wrong type */

/* ---- helpers ---------------------------------------------------------------------------- */

/* A fake environment: NULL-terminated {key, value, key, value, ..., NULL}. */
static const char *fake_get(void *ctx, const char *key)
{
    const char *const *kv = ctx;
    for (size_t i = 0; kv && kv[i]; i += 2)
        if (strcmp(kv[i], key) == 0)
            return kv[i + 1];
    return NULL;
}

/* Loads from an optional file and a fake environment. */
static crcr_err load(crcr_config *cfg, const char *file, const char *const *env, char *err,
                     size_t errsz)
{
    return config_load(cfg, file, fake_get, (void *)env, err, errsz);
}

/* Asserts that loading fails with CRCR_E_CONFIG and an err starting with `prefix`; returns
 * nothing, leaves the message in err for more checks. */
static void expect_fail(const char *const *env, const char *prefix, char *err, size_t errsz)
{
    crcr_config cfg;
    crcr_err e = load(&cfg, NULL, env, err, errsz);
    if (e != CRCR_E_CONFIG || strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("expected failure starting with \"%s\", got %d \"%s\"", prefix, (int)e, err);
    assert_null(memchr(err, '\n', strlen(err)));
}

/* Writes `text` to a new temporary file; returns its path (caller frees and unlinks). */
static char *write_temp(const char *text)
{
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/crcr_test_config_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    char *p = strdup(path);
    assert_non_null(p);
    return p;
}

static void remove_temp(char *path)
{
    unlink(path);
    free(path);
}

/* PEM text of a key; caller frees. */
static char *pem_of(EVP_PKEY *pk, int traditional)
{
    BIO *bio = BIO_new(BIO_s_mem());
    assert_non_null(bio);
    int ok = traditional ? PEM_write_bio_PrivateKey_traditional(bio, pk, NULL, NULL, 0, NULL, NULL)
                         : PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL);
    assert_int_equal(ok, 1);
    char *data = NULL;
    long n = BIO_get_mem_data(bio, &data);
    char *out = malloc((size_t)n + 1);
    assert_non_null(out);
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    BIO_free(bio);
    return out;
}

/* `pem` with every newline written as the two characters \n; caller frees. */
static char *escape_newlines(const char *pem)
{
    size_t n = strlen(pem);
    char *out = malloc(2 * n + 1);
    assert_non_null(out);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (pem[i] == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = pem[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* The whole of config_describe() for cfg; caller frees. */
static char *describe(const crcr_config *cfg)
{
    buf_t b;
    buf_init(&b, 1024 * 1024);
    assert_int_equal(config_describe(cfg, &b), CRCR_OK);
    size_t n;
    char *s = buf_detach(&b, &n);
    assert_non_null(s);
    return s;
}

static int group_setup(void **state)
{
    EVP_PKEY *rsa = EVP_RSA_gen(2048);
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    if (!rsa || !ec)
        return -1;
    g_rsa_pkcs1 = pem_of(rsa, 1);
    g_rsa_pkcs8 = pem_of(rsa, 0);
    g_ec_pem = pem_of(ec, 0);
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);
    return 0;
}

static int group_teardown(void **state)
{
    free(g_rsa_pkcs1);
    free(g_rsa_pkcs8);
    free(g_ec_pem);
    log_clear_secrets();
    return 0;
}

/* Each test starts with no registered log secrets (the table in log.c is small). */
static int test_setup(void **state)
{
    log_clear_secrets();
    return 0;
}

/* ---- defaults and sources --------------------------------------------------------------- */

static void test_defaults_without_file_or_environment(void **state)
{
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, NULL, err, sizeof(err)), CRCR_OK);
    assert_null(cfg.app_id);
    assert_null(cfg.app_secret);
    assert_null(cfg.app_secret_previous);
    assert_null(cfg.private_key_pem);
    assert_true(cfg.dry_run);
    assert_string_equal(cfg.upstream_repo, "pytorch/pytorch");
    assert_null(cfg.allowlist_url);
    assert_null(cfg.allowlist_file);
    assert_int_equal(cfg.allowlist_ttl_s, 900);
    assert_int_equal(cfg.status_ttl_s, 259200);
    assert_int_equal(cfg.rate_limit_per_min, 100);
    assert_int_equal(cfg.zombie_timeout_s, 21600);
    assert_null(cfg.hud_api_url);
    assert_null(cfg.hud_bot_key);
    assert_int_equal(cfg.hud_max_retries, 3);
    assert_int_equal(cfg.max_dispatch_workers, 100);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 8000);
    assert_string_equal(cfg.store_uri, "sqlite:crcr.db");
    assert_string_equal(cfg.github_api_url, "https://api.github.com");
    /* Both upstream issuers: GitHub Actions and Buildkite. */
    assert_int_equal(cfg.n_oidc_issuers, 2);
    assert_string_equal(cfg.oidc_issuers[0], "https://token.actions.githubusercontent.com");
    assert_int_equal(cfg.oidc_issuer_kinds[0], CRCR_ISSUER_GITHUB);
    assert_string_equal(cfg.oidc_issuers[1], "https://agent.buildkite.com");
    assert_int_equal(cfg.oidc_issuer_kinds[1], CRCR_ISSUER_BUILDKITE);
    assert_null(cfg.ci_providers_url);
    assert_null(cfg.ci_providers_file);
    assert_string_equal(cfg.oidc_audience, "pytorch-cross-repo-ci-relay");
    assert_int_equal(cfg.callback_token, CRCR_CB_TOKEN_OPTIONAL);
    assert_null(cfg.admin_token);
    assert_int_equal(cfg.max_body, 25u * 1024u * 1024u);
    assert_int_equal(cfg.dispatch_budget, 65000);
    assert_int_equal(cfg.max_attempts, 12);
    assert_int_equal(cfg.sweep_s, 600);
    assert_int_equal(cfg.retention_s, 604800);
    assert_int_equal(cfg.log_level, CRCR_LOG_INFO);
    assert_int_equal(cfg.retry_base_ms, 1000);
    assert_int_equal(cfg.retry_max_ms, 21600000);
    assert_int_equal(cfg.lease_s, 120);
    config_free(&cfg);
}

static void test_environment_overrides_file(void **state)
{
    char *file = write_temp("UPSTREAM_REPO=acme/widgets\n"
                            "RATE_LIMIT_PER_MIN=5\n"
                            "CRCR_LOG=debug\n");
    const char *env[] = {"RATE_LIMIT_PER_MIN", "7", "CRCR_LOG", "warn", NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, file, env, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.upstream_repo, "acme/widgets"); /* file only */
    assert_int_equal(cfg.rate_limit_per_min, 7);            /* both: environment wins */
    assert_int_equal(cfg.log_level, CRCR_LOG_WARN);
    config_free(&cfg);
    remove_temp(file);
}

static void test_empty_environment_value_means_default(void **state)
{
    char *file = write_temp("HUD_API_URL=https://hud.example.org/api\n");
    const char *env[] = {"HUD_API_URL", "", "MAX_DISPATCH_WORKERS", "", NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, file, env, err, sizeof(err)), CRCR_OK);
    assert_null(cfg.hud_api_url); /* an empty override turns forwarding off */
    assert_int_equal(cfg.max_dispatch_workers, 100);
    config_free(&cfg);
    remove_temp(file);
}

static void test_config_getenv_reads_process_environment(void **state)
{
    setenv("CRCR_TEST_CONFIG_PROBE", "yes", 1);
    assert_string_equal(config_getenv(NULL, "CRCR_TEST_CONFIG_PROBE"), "yes");
    unsetenv("CRCR_TEST_CONFIG_PROBE");
    assert_null(config_getenv(NULL, "CRCR_TEST_CONFIG_PROBE"));
}

/* ---- file syntax ------------------------------------------------------------------------ */

static void test_file_comments_quotes_blanks_and_crlf(void **state)
{
    char *file = write_temp("# a comment\n"
                            "\n"
                            "   \n"
                            "  # indented comment\n"
                            "UPSTREAM_REPO = \"acme/widgets\"\r\n"
                            "CRCR_OIDC_AUDIENCE=\"  spaced  \"\n"
                            "ALLOWLIST_FILE=/etc/crcr/allow#list.yml\n"
                            "CRCR_LISTEN=0.0.0.0:9000"); /* no final newline */
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.upstream_repo, "acme/widgets");
    assert_string_equal(cfg.oidc_audience, "  spaced  ");
    assert_string_equal(cfg.allowlist_file, "/etc/crcr/allow#list.yml");
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_int_equal(cfg.listen_port, 9000);
    config_free(&cfg);
    remove_temp(file);
}

static void test_file_backslash_n_becomes_newline(void **state)
{
    char *file = write_temp("ALLOWLIST_FILE=\"a\\nb\"\n"
                            "CRCR_OIDC_AUDIENCE=x\\\\ny\n");
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.allowlist_file, "a\nb");
    assert_string_equal(cfg.oidc_audience, "x\\ny"); /* "\\" is one backslash, then "ny" */
    config_free(&cfg);
    remove_temp(file);
}

static void test_file_line_without_equals_is_an_error_with_line_number(void **state)
{
    char *file = write_temp("# ok\nUPSTREAM_REPO=a/b\nJUSTAWORD\n");
    crcr_config cfg;
    char err[512], want[512];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    snprintf(want, sizeof(want), "%s:3: expected KEY=VALUE", file);
    assert_string_equal(err, want);
    remove_temp(file);
}

static void test_file_unknown_key_is_an_error_naming_it(void **state)
{
    char *file = write_temp("GITHUB_APP_SECRETT=topsecretvalue\n");
    crcr_config cfg;
    char err[512], want[512];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    snprintf(want, sizeof(want), "%s:1: unknown key 'GITHUB_APP_SECRETT'", file);
    assert_string_equal(err, want);
    assert_null(strstr(err, "topsecretvalue"));
    remove_temp(file);
}

static void test_file_stray_pem_line_is_never_echoed(void **state)
{
    /* A multi-line PEM pasted into the file: base64 lines may contain '='. */
    char *file = write_temp("GITHUB_APP_PRIVATE_KEY=-----BEGIN RSA PRIVATE KEY-----\n"
                            "MIIEowIBAAKCAQEAx1secretbase64+/abc==\n");
    crcr_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    assert_non_null(strstr(err, ":2: expected KEY=VALUE"));
    assert_null(strstr(err, "MIIE"));
    remove_temp(file);

    file = write_temp("-----BEGIN RSA PRIVATE KEY-----\n");
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    assert_non_null(strstr(err, ":1: a PEM value must be written on one line"));
    remove_temp(file);
}

static void test_file_key_set_twice_is_an_error(void **state)
{
    char *file = write_temp("CRCR_LOG=info\nCRCR_LOG=debug\n");
    crcr_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    assert_non_null(strstr(err, ":2: CRCR_LOG is set twice"));
    remove_temp(file);
}

static void test_missing_config_file_is_an_error(void **state)
{
    crcr_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, "/nonexistent/crcr.env", NULL, err, sizeof(err)), CRCR_E_CONFIG);
    assert_string_equal(err, "/nonexistent/crcr.env: cannot read: No such file or directory");
}

/* ---- bad values ------------------------------------------------------------------------- */

static void test_bad_integers_name_the_variable(void **state)
{
    static const struct {
        const char *key, *value, *want;
    } cases[] = {
        {"MAX_DISPATCH_WORKERS", "abc", "MAX_DISPATCH_WORKERS: not a positive integer: 'abc'"},
        {"MAX_DISPATCH_WORKERS", "0", "MAX_DISPATCH_WORKERS: not a positive integer: '0'"},
        {"RATE_LIMIT_PER_MIN", "-5", "RATE_LIMIT_PER_MIN: not a positive integer: '-5'"},
        {"RATE_LIMIT_PER_MIN", "1.5", "RATE_LIMIT_PER_MIN: not a positive integer: '1.5'"},
        {"RATE_LIMIT_PER_MIN", " 10", "RATE_LIMIT_PER_MIN: not a positive integer: ' 10'"},
        {"RATE_LIMIT_PER_MIN", "+10", "RATE_LIMIT_PER_MIN: not a positive integer: '+10'"},
        {"ZOMBIE_TIMEOUT_SECONDS", "99999999999999999999999",
         "ZOMBIE_TIMEOUT_SECONDS: must be between 1 and 2147483647: '99999999999999999999999'"},
        {"CRCR_RETENTION_SECONDS", "2147483648",
         "CRCR_RETENTION_SECONDS: must be between 1 and 2147483647: '2147483648'"},
        {"HUD_MAX_RETRIES", "-1", "HUD_MAX_RETRIES: not a non-negative integer: '-1'"},
        {"HUD_MAX_RETRIES", "17", "HUD_MAX_RETRIES: must be between 0 and 16: '17'"},
        {"CRCR_MAX_BODY", "1023", "CRCR_MAX_BODY: must be between 1024 and 104857600: '1023'"},
        {"CRCR_MAX_BODY", "104857601",
         "CRCR_MAX_BODY: must be between 1024 and 104857600: '104857601'"},
        {"CRCR_DISPATCH_BUDGET", "65536",
         "CRCR_DISPATCH_BUDGET: must be between 1024 and 65535: '65536'"},
        {"CRCR_DISPATCH_BUDGET", "1000",
         "CRCR_DISPATCH_BUDGET: must be between 1024 and 65535: '1000'"},
        {"ALLOWLIST_TTL_SECONDS", "0", "ALLOWLIST_TTL_SECONDS: not a positive integer: '0'"},
        {"CRCR_STATUS_TTL", "x", "CRCR_STATUS_TTL: not a positive integer: 'x'"},
        {"CRCR_MAX_ATTEMPTS", "0", "CRCR_MAX_ATTEMPTS: not a positive integer: '0'"},
        {"CRCR_SWEEP_SECONDS", "1e3", "CRCR_SWEEP_SECONDS: not a positive integer: '1e3'"},
        {"CRCR_RETRY_BASE_MS", "0", "CRCR_RETRY_BASE_MS: not a positive integer: '0'"},
        {"CRCR_LEASE_SECONDS", "ten", "CRCR_LEASE_SECONDS: not a positive integer: 'ten'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *env[] = {cases[i].key, cases[i].value, NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_E_CONFIG);
        assert_string_equal(err, cases[i].want);
    }
}

static void test_integer_range_edges_are_accepted(void **state)
{
    const char *env[] = {"CRCR_MAX_BODY",
                         "104857600",
                         "CRCR_DISPATCH_BUDGET",
                         "65535",
                         "HUD_MAX_RETRIES",
                         "0",
                         "MAX_DISPATCH_WORKERS",
                         "1",
                         NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_int_equal(cfg.max_body, 100u * 1024u * 1024u);
    assert_int_equal(cfg.dispatch_budget, 65535);
    assert_int_equal(cfg.hud_max_retries, 0);
    assert_int_equal(cfg.max_dispatch_workers, 1);
    config_free(&cfg);

    const char *env2[] = {"CRCR_MAX_BODY", "1024", "CRCR_DISPATCH_BUDGET", "1024", NULL};
    assert_int_equal(load(&cfg, NULL, env2, err, sizeof(err)), CRCR_OK);
    assert_int_equal(cfg.max_body, 1024);
    assert_int_equal(cfg.dispatch_budget, 1024);
    config_free(&cfg);
}

static void test_allowlist_ttl_below_upstream_floor_is_kept(void **state)
{
    /* Upstream floors the TTL at 900 s; crcr keeps the value so tests can use short TTLs. */
    const char *env[] = {"ALLOWLIST_TTL_SECONDS", "2", NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_int_equal(cfg.allowlist_ttl_s, 2);
    config_free(&cfg);
}

static void test_retry_max_below_retry_base_is_rejected(void **state)
{
    const char *env[] = {"CRCR_RETRY_BASE_MS", "5000", "CRCR_RETRY_MAX_MS", "4999", NULL};
    char err[256];
    expect_fail(env, "CRCR_RETRY_MAX_MS: ", err, sizeof(err));
}

static void test_store_schemes(void **state)
{
    static const char *good[] = {"sqlite:/var/lib/crcr/crcr.db",
                                 "sqlite::memory:", "postgresql://crcr@db.internal/crcr",
                                 "postgres://localhost/crcr"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        const char *env[] = {"CRCR_STORE", good[i], NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        assert_string_equal(cfg.store_uri, good[i]);
        config_free(&cfg);
    }
    static const char *bad[] = {"mysql://u:hunter2pass@h/db", "crcr.db", "sqlite:", "SQLITE:x",
                                "postgresql:/x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *env[] = {"CRCR_STORE", bad[i], NULL};
        char err[256];
        expect_fail(env, "CRCR_STORE: ", err, sizeof(err));
        assert_null(strstr(err, "hunter2pass"));
    }
    const char *env[] = {"CRCR_STORE", "mysql://h/db", NULL};
    char err[256];
    expect_fail(env, "CRCR_STORE: unknown scheme", err, sizeof(err));
}

static void test_store_password_is_masked_in_describe_and_logs(void **state)
{
    const char *env[] = {"CRCR_STORE",
                         "postgresql://crcr:Pg-Secret-1@db:5432/crcr?sslmode=require&password="
                         "Pg-Secret-2",
                         NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    char *d = describe(&cfg);
    assert_non_null(strstr(
        d, "\nCRCR_STORE=postgresql://crcr:***@db:5432/crcr?sslmode=require&password=***\n"));
    assert_null(strstr(d, "Pg-Secret"));
    free(d);

    /* Loading registered both passwords as log secrets (config_redact_store()'s forms are
     * test_config_url.c's). */
    buf_t out;
    buf_init(&out, 4096);
    const char *line = "connect failed: password Pg-Secret-1 and Pg-Secret-2";
    assert_int_equal(log_scrub(line, strlen(line), &out), CRCR_OK);
    assert_null(strstr(buf_cstr(&out), "Pg-Secret"));
    buf_free(&out);
    config_free(&cfg);
}

static void test_insecure_urls_are_rejected_naming_the_variable(void **state)
{
    static const char *keys[] = {"GITHUB_API_URL", "HUD_API_URL"};
    for (size_t i = 0; i < 2; i++) {
        const char *env[] = {keys[i], "http://example.com/api", NULL};
        char err[256], want[256];
        snprintf(want, sizeof(want), "%s: must be https:// (http:// only for loopback hosts)",
                 keys[i]);
        expect_fail(env, want, err, sizeof(err));
        assert_string_equal(err, want);
    }
    const char *env[] = {"CRCR_OIDC_ISSUERS",
                         "https://token.actions.githubusercontent.com, http://issuer.example",
                         NULL};
    char err[256];
    expect_fail(env, "CRCR_OIDC_ISSUERS: issuer 2 must be https://", err, sizeof(err));
    const char *env2[] = {"GITHUB_API_URL", "ftp://api.github.com", NULL};
    expect_fail(env2, "GITHUB_API_URL: must be https://", err, sizeof(err));
}

static void test_loopback_urls_are_accepted_and_trailing_slash_stripped(void **state)
{
    const char *env[] = {"GITHUB_API_URL",
                         "http://127.0.0.1:9/",
                         "HUD_API_URL",
                         "https://hud.example.org/api//",
                         "CRCR_OIDC_ISSUERS",
                         " http://localhost:8080/ , http://[::1]:8/iss/,https://token.example",
                         NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.github_api_url, "http://127.0.0.1:9");
    assert_string_equal(cfg.hud_api_url, "https://hud.example.org/api");
    assert_int_equal(cfg.n_oidc_issuers, 3);
    assert_string_equal(cfg.oidc_issuers[0], "http://localhost:8080");
    assert_string_equal(cfg.oidc_issuers[1], "http://[::1]:8/iss");
    assert_string_equal(cfg.oidc_issuers[2], "https://token.example");
    config_free(&cfg);
}

static void test_too_many_or_no_oidc_issuers(void **state)
{
    char list[1024] = "";
    for (int i = 0; i <= CRCR_MAX_ISSUERS; i++) {
        char one[64];
        snprintf(one, sizeof(one), "%shttps://iss%d.example", i ? "," : "", i);
        size_t l = strlen(list);
        memcpy(list + l, one, strlen(one) + 1);
    }
    const char *env[] = {"CRCR_OIDC_ISSUERS", list, NULL};
    char err[256];
    expect_fail(env, "CRCR_OIDC_ISSUERS: more than 8 issuers", err, sizeof(err));
    const char *env2[] = {"CRCR_OIDC_ISSUERS", " , ,", NULL};
    expect_fail(env2, "CRCR_OIDC_ISSUERS: no issuer", err, sizeof(err));
}

static void test_allowlist_url_must_be_on_githubs_web_host(void **state)
{
    static const char *keys[] = {"ALLOWLIST_URL", "CI_PROVIDERS_URL"};
    static const struct {
        const char *api, *url;
    } ok[] = {
        {NULL, "https://github.com/pytorch/pytorch/blob/main/.github/allow.yml"},
        {"https://api.github.com", "https://github.com/o/r/blob/main/allow.yml"},
        /* GitHub Enterprise Server: the API under /api/v3, blob URLs on the host */
        {"https://ghes.example.com/api/v3", "https://ghes.example.com/o/r/blob/main/a.yml"},
        {"http://127.0.0.1:8123/api/v3", "http://127.0.0.1:8123/o/r/blob/main/allow.yml"},
        /* a loopback double of api.github.com: blob URLs stay on github.com */
        {"http://127.0.0.1:8123", "https://github.com/o/r/blob/main/allow.yml"},
    };
    static const struct {
        const char *api, *url, *why;
    } bad[] = {
        {NULL, "http://github.com/o/r/blob/main/a.yml", "must be an https://"},
        {NULL, "https://github.com.evil.com/o/r/blob/main/a.yml", "on https://github.com/"},
        {NULL, "https://evil.com/o/r/blob/main/a.yml", "on https://github.com/"},
        {NULL, "http://127.0.0.1:8123/o/r/blob/main/allow.yml", "on https://github.com/"},
        {"https://ghes.example.com/api/v3", "https://github.com/o/r/blob/main/a.yml",
         "on https://ghes.example.com/"},
        {"https://ghes.example.com/api/v3", "https://ghes.example.com:444/o/r/blob/main/a.yml",
         "on https://ghes.example.com/"},
        {"http://127.0.0.1:8123", "http://127.0.0.1:8123/o/r/blob/main/a.yml",
         "on https://github.com/"},
    };
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
            const char *env[] = {keys[k], ok[i].url, ok[i].api ? "GITHUB_API_URL" : NULL, ok[i].api,
                                 NULL};
            crcr_config cfg;
            char err[256];
            if (load(&cfg, NULL, env, err, sizeof(err)) != CRCR_OK)
                fail_msg("%s=%s with GITHUB_API_URL=%s: %s", keys[k], ok[i].url,
                         ok[i].api ? ok[i].api : "(default)", err);
            assert_string_equal(k ? cfg.ci_providers_url : cfg.allowlist_url, ok[i].url);
            config_free(&cfg);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            const char *env[] = {keys[k], bad[i].url, bad[i].api ? "GITHUB_API_URL" : NULL,
                                 bad[i].api, NULL};
            char err[256], want[64];
            snprintf(want, sizeof(want), "%s: must be", keys[k]);
            expect_fail(env, want, err, sizeof(err));
            if (!strstr(err, bad[i].why))
                fail_msg("%s: expected '%s' in: %s", bad[i].url, bad[i].why, err);
        }
    }
}

static void test_web_url_is_derived_from_the_api_url(void **state)
{
    static const struct {
        const char *api, *web;
    } cases[] = {
        {NULL, "https://github.com"},
        {"https://api.github.com", "https://github.com"},
        {"https://api.github.com/", "https://github.com"},
        {"https://ghes.example.com/api/v3", "https://ghes.example.com"},
        {"https://ghes.example.com:8443/api/v3/", "https://ghes.example.com:8443"},
        {"http://127.0.0.1:9000/api/v3", "http://127.0.0.1:9000"},
        {"https://api.octocorp.ghe.com", "https://octocorp.ghe.com"},
        {"http://127.0.0.1:9000", "https://github.com"},
        {"https://proxy.example.com/github", "https://github.com"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *env[] = {cases[i].api ? "GITHUB_API_URL" : NULL, cases[i].api, NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        if (strcmp(config_web_url(&cfg), cases[i].web) != 0)
            fail_msg("GITHUB_API_URL=%s: web URL %s, want %s",
                     cases[i].api ? cases[i].api : "(default)", config_web_url(&cfg), cases[i].web);
        config_free(&cfg);
    }
    /* A hand-made config (no load) means github.com. */
    crcr_config zero;
    memset(&zero, 0, sizeof(zero));
    assert_string_equal(config_web_url(&zero), "https://github.com");
    assert_true(config_url_on_web_host("https://github.com/o/r", NULL));
    assert_true(config_url_on_web_host("https://GITHUB.com", ""));
    assert_false(config_url_on_web_host("https://github.company.com/o/r", NULL));
    assert_false(config_url_on_web_host(NULL, NULL));
}

static void test_ci_providers_file_is_kept(void **state)
{
    const char *env[] = {"CI_PROVIDERS_FILE", "/etc/crcr/ci_providers.yml", NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.ci_providers_file, "/etc/crcr/ci_providers.yml");
    config_free(&cfg);
}

static void test_oidc_issuer_kinds(void **state)
{
    const char *env[] = {"CRCR_OIDC_ISSUERS",
                         " buildkite = https://agent.buildkite.com/ , github=http://127.0.0.1:5,"
                         "https://a.example/x?y=1,BuildKite=http://localhost:9",
                         NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_int_equal(cfg.n_oidc_issuers, 4);
    assert_string_equal(cfg.oidc_issuers[0], "https://agent.buildkite.com");
    assert_int_equal(cfg.oidc_issuer_kinds[0], CRCR_ISSUER_BUILDKITE);
    assert_string_equal(cfg.oidc_issuers[1], "http://127.0.0.1:5");
    assert_int_equal(cfg.oidc_issuer_kinds[1], CRCR_ISSUER_GITHUB);
    /* An '=' after the scheme belongs to the URL. */
    assert_string_equal(cfg.oidc_issuers[2], "https://a.example/x?y=1");
    assert_int_equal(cfg.oidc_issuer_kinds[2], CRCR_ISSUER_GITHUB);
    assert_string_equal(cfg.oidc_issuers[3], "http://localhost:9");
    assert_int_equal(cfg.oidc_issuer_kinds[3], CRCR_ISSUER_BUILDKITE);
    /* config describe writes the kinds back. */
    buf_t d;
    buf_init(&d, 64 * 1024);
    assert_int_equal(config_describe(&cfg, &d), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&d),
                           "\nCRCR_OIDC_ISSUERS=buildkite=https://agent.buildkite.com,"
                           "http://127.0.0.1:5,https://a.example/x?y=1,"
                           "buildkite=http://localhost:9\n"));
    buf_free(&d);
    config_free(&cfg);

    const char *bad[] = {"CRCR_OIDC_ISSUERS", "https://a.example,gitlab=https://gitlab.com", NULL};
    expect_fail(bad, "CRCR_OIDC_ISSUERS: issuer 2: unknown kind", err, sizeof(err));
    const char *twice[] = {"CRCR_OIDC_ISSUERS", "https://a.example/,buildkite=https://a.example",
                           NULL};
    expect_fail(twice, "CRCR_OIDC_ISSUERS: issuer 2 is listed twice", err, sizeof(err));
    const char *insecure[] = {"CRCR_OIDC_ISSUERS", "buildkite=http://agent.buildkite.com", NULL};
    expect_fail(insecure, "CRCR_OIDC_ISSUERS: issuer 1 must be https://", err, sizeof(err));
}

static void test_listen_addresses(void **state)
{
    static const struct {
        const char *v, *host;
        int port;
    } ok[] = {{"0.0.0.0:9000", "0.0.0.0", 9000},
              {"[::1]:0", "::1", 0},
              {"[::]:65535", "::", 65535},
              {"localhost:8080", "127.0.0.1", 8080}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        const char *env[] = {"CRCR_LISTEN", ok[i].v, NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        assert_string_equal(cfg.listen_host, ok[i].host);
        assert_int_equal(cfg.listen_port, ok[i].port);
        char *d = describe(&cfg);
        char want[128];
        snprintf(want, sizeof(want), "\nCRCR_LISTEN=%s%s%s:%d\n",
                 strchr(ok[i].host, ':') ? "[" : "", ok[i].host, strchr(ok[i].host, ':') ? "]" : "",
                 ok[i].port);
        assert_non_null(strstr(d, want));
        free(d);
        config_free(&cfg);
    }
    static const char *bad[] = {"8000",           "1.2.3.4:70000", "example.com:80", "[::1]8000",
                                "1.2.3.4:",       "::1:80",        ":8000",          "[::1:80",
                                "1.2.3.4:-1",     "[1.2.3.4]:80",  "256.0.0.1:80",   "1.2.3.4:8o",
                                "1.2.3.4:123456", "[::1]:"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *env[] = {"CRCR_LISTEN", bad[i], NULL};
        char err[256];
        expect_fail(env, "CRCR_LISTEN: ", err, sizeof(err));
    }
}

static void test_callback_token_and_log_level_values(void **state)
{
    const char *env[] = {"CRCR_CALLBACK_TOKEN", "required", "CRCR_LOG", "ERROR", NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_int_equal(cfg.callback_token, CRCR_CB_TOKEN_REQUIRED);
    assert_int_equal(cfg.log_level, CRCR_LOG_ERROR);
    config_free(&cfg);

    const char *bad_cb[] = {"CRCR_CALLBACK_TOKEN", "sometimes", NULL};
    expect_fail(bad_cb, "CRCR_CALLBACK_TOKEN: expected optional or required: 'sometimes'", err,
                sizeof(err));
    const char *bad_log[] = {"CRCR_LOG", "verbose", NULL};
    expect_fail(bad_log, "CRCR_LOG: ", err, sizeof(err));
}

static void test_oncall_trusted_authors_are_logins(void **state)
{
    crcr_config cfg;
    char err[256];
    const char *none[] = {NULL};
    assert_int_equal(load(&cfg, NULL, none, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.oncall_trusted_authors, "pytorch-bot[bot]"); /* upstream's bot */
    config_free(&cfg);
    static const char *good[] = {"-", "alice", "pytorch-bot[bot], other-app[bot] ,bob", "a,,b"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        const char *env[] = {"CRCR_ONCALL_TRUSTED_AUTHORS", good[i], NULL};
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        assert_string_equal(cfg.oncall_trusted_authors, good[i]);
        config_free(&cfg);
    }
    static const char *bad[] = {"al ice", "[bot]", "bob[bot]x", "a_b", "x/y", "alice,b c"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *env[] = {"CRCR_ONCALL_TRUSTED_AUTHORS", bad[i], NULL};
        expect_fail(env, "CRCR_ONCALL_TRUSTED_AUTHORS: expected GitHub logins", err, sizeof(err));
    }
}

static void test_upstream_repo_must_be_owner_slash_repo(void **state)
{
    static const char *bad[] = {"pytorch", "/pytorch", "pytorch/", "py torch/pytorch",
                                "a/b/c",   "o/..",     "o_x/r"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *env[] = {"UPSTREAM_REPO", bad[i], NULL};
        char err[256];
        expect_fail(env, "UPSTREAM_REPO: ", err, sizeof(err));
    }
}

/* ---- GitHub App credentials ------------------------------------------------------------- */

static void test_private_key_from_text_pkcs1_and_pkcs8(void **state)
{
    const char *pems[] = {g_rsa_pkcs1, g_rsa_pkcs8};
    assert_non_null(strstr(g_rsa_pkcs1, "BEGIN RSA PRIVATE KEY"));
    assert_non_null(strstr(g_rsa_pkcs8, "BEGIN PRIVATE KEY"));
    for (size_t i = 0; i < 2; i++) {
        const char *env[] = {"GITHUB_APP_ID", "12345", "GITHUB_APP_PRIVATE_KEY", pems[i], NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        assert_string_equal(cfg.app_id, "12345");
        assert_string_equal(cfg.private_key_pem, pems[i]);
        assert_false(cfg.dry_run);
        config_free(&cfg);
    }
}

static void test_private_key_with_escaped_newlines_in_environment(void **state)
{
    char *escaped = escape_newlines(g_rsa_pkcs8);
    const char *env[] = {"GITHUB_APP_ID", "Iv1.0123abcd", "GITHUB_APP_PRIVATE_KEY", escaped, NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.private_key_pem, g_rsa_pkcs8);
    config_free(&cfg);
    free(escaped);
}

static void test_private_key_on_one_line_in_config_file(void **state)
{
    char *escaped = escape_newlines(g_rsa_pkcs1);
    size_t n = strlen(escaped) + 128;
    char *text = malloc(n);
    assert_non_null(text);
    snprintf(text, n, "GITHUB_APP_ID=42\nGITHUB_APP_PRIVATE_KEY=\"%s\"\n", escaped);
    char *file = write_temp(text);
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.private_key_pem, g_rsa_pkcs1);
    assert_false(cfg.dry_run);
    config_free(&cfg);
    remove_temp(file);
    free(text);
    free(escaped);
}

static void test_private_key_from_file(void **state)
{
    char *keyfile = write_temp(g_rsa_pkcs1);
    const char *env[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY_FILE", keyfile, NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.private_key_pem, g_rsa_pkcs1);
    assert_false(cfg.dry_run);
    config_free(&cfg);
    remove_temp(keyfile);
}

static void test_ec_key_is_rejected_as_text_and_as_file(void **state)
{
    const char *env[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY", g_ec_pem, NULL};
    char err[256];
    expect_fail(env, "GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM format", err,
                sizeof(err));
    assert_null(strstr(err, "BEGIN"));

    char *keyfile = write_temp(g_ec_pem);
    const char *env2[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY_FILE", keyfile, NULL};
    expect_fail(env2, "GITHUB_APP_PRIVATE_KEY_FILE: ", err, sizeof(err));
    assert_non_null(strstr(err, "not an RSA private key in PEM format"));
    remove_temp(keyfile);
}

static void test_garbage_key_text_is_rejected_without_echo(void **state)
{
    const char *env[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY",
                         "-----BEGIN RSA PRIVATE KEY-----\nS3cr3tGarbage\n-----END RSA PRIVATE "
                         "KEY-----\n",
                         NULL};
    char err[256];
    expect_fail(env, "GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM format", err,
                sizeof(err));
    assert_null(strstr(err, "S3cr3t"));
    /* A public key is not a private key. */
    const char *env2[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY", "ssh-rsa AAAAB3Nza",
                          NULL};
    expect_fail(env2, "GITHUB_APP_PRIVATE_KEY: not an RSA private key", err, sizeof(err));
}

static void test_unreadable_key_file_names_path_and_reason(void **state)
{
    const char *env[] = {"GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY_FILE",
                         "/nonexistent/key.pem", NULL};
    char err[256];
    expect_fail(env, "GITHUB_APP_PRIVATE_KEY_FILE: cannot read '/nonexistent/key.pem': ", err,
                sizeof(err));
    assert_non_null(strstr(err, "No such file or directory"));
}

static void test_key_text_and_key_file_together_are_rejected(void **state)
{
    char *keyfile = write_temp(g_rsa_pkcs1);
    const char *env[] = {
        "GITHUB_APP_ID", "42", "GITHUB_APP_PRIVATE_KEY_FILE", keyfile, "GITHUB_APP_PRIVATE_KEY",
        g_rsa_pkcs8,     NULL};
    char err[256];
    expect_fail(env, "GITHUB_APP_PRIVATE_KEY_FILE: ", err, sizeof(err));
    assert_non_null(strstr(err, "GITHUB_APP_PRIVATE_KEY;"));
    remove_temp(keyfile);
}

static void test_app_id_and_key_must_come_together(void **state)
{
    const char *id_only[] = {"GITHUB_APP_ID", "42", NULL};
    char err[256];
    expect_fail(id_only, "GITHUB_APP_PRIVATE_KEY: required when GITHUB_APP_ID is set", err,
                sizeof(err));
    const char *key_only[] = {"GITHUB_APP_PRIVATE_KEY", g_rsa_pkcs1, NULL};
    expect_fail(key_only, "GITHUB_APP_ID: required when a private key is set", err, sizeof(err));
}

static void test_app_id_format(void **state)
{
    static const char *good[] = {"1", "123456", "Iv1.abc0123456789", "Iv23liABCdef"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        const char *env[] = {"GITHUB_APP_ID", good[i], "GITHUB_APP_PRIVATE_KEY", g_rsa_pkcs1, NULL};
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
        config_free(&cfg);
    }
    static const char *bad[] = {"abc", "12a", "-1", "0", "Iv", "Iv1-bad", "iv1.abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *env[] = {"GITHUB_APP_ID", bad[i], "GITHUB_APP_PRIVATE_KEY", g_rsa_pkcs1, NULL};
        char err[256];
        expect_fail(env, "GITHUB_APP_ID: ", err, sizeof(err));
    }
}

static void test_app_secret_optional_but_not_empty(void **state)
{
    crcr_config cfg;
    char err[256];
    const char *none[] = {NULL};
    assert_int_equal(load(&cfg, NULL, none, err, sizeof(err)), CRCR_OK);
    assert_null(cfg.app_secret);
    config_free(&cfg);

    const char *set[] = {"GITHUB_APP_SECRET", "whsec-current", "GITHUB_APP_SECRET_PREVIOUS",
                         "whsec-previous", NULL};
    assert_int_equal(load(&cfg, NULL, set, err, sizeof(err)), CRCR_OK);
    assert_string_equal(cfg.app_secret, "whsec-current");
    assert_string_equal(cfg.app_secret_previous, "whsec-previous");
    config_free(&cfg);

    const char *empty[] = {"GITHUB_APP_SECRET", "", NULL};
    expect_fail(empty, "GITHUB_APP_SECRET: ", err, sizeof(err));
}

/* ---- secrets ---------------------------------------------------------------------------- */

static void capture_sink(const char *line, size_t len, void *ctx)
{
    buf_append(ctx, line, len);
}

static void test_secrets_never_appear_in_describe_or_logs(void **state)
{
    const char *env[] = {"GITHUB_APP_ID",
                         "42",
                         "GITHUB_APP_PRIVATE_KEY",
                         g_rsa_pkcs1,
                         "GITHUB_APP_SECRET",
                         "Sekrit-Webhook-0001",
                         "GITHUB_APP_SECRET_PREVIOUS",
                         "Sekrit-Webhook-0000",
                         "HUD_BOT_KEY",
                         "Sekrit-Hud-Key-1",
                         "CRCR_ADMIN_TOKEN",
                         "Sekrit-Admin-Token-1",
                         NULL};
    crcr_config cfg;
    char err[256];
    assert_int_equal(load(&cfg, NULL, env, err, sizeof(err)), CRCR_OK);
    char *d = describe(&cfg);
    assert_null(strstr(d, "Sekrit"));
    assert_null(strstr(d, "PRIVATE KEY"));
    assert_non_null(strstr(d, "\nGITHUB_APP_SECRET=(set)\n"));
    assert_non_null(strstr(d, "\nGITHUB_APP_SECRET_PREVIOUS=(set)\n"));
    assert_non_null(strstr(d, "\nGITHUB_APP_PRIVATE_KEY=(set)\n"));
    assert_non_null(strstr(d, "\nHUD_BOT_KEY=(set)\n"));
    assert_non_null(strstr(d, "\nCRCR_ADMIN_TOKEN=(set)\n"));
    assert_non_null(strstr(d, "GITHUB_APP_ID=42\n"));
    free(d);

    /* Loading registered every secret with the logger. */
    buf_t logs;
    buf_init(&logs, 64 * 1024);
    log_set_sink(capture_sink, &logs);
    LOG_ERROR("test.echo", "a", "Sekrit-Webhook-0001", "b", "x Sekrit-Webhook-0000 y", "c",
              "Sekrit-Hud-Key-1", "d", "Sekrit-Admin-Token-1", NULL);
    log_set_sink(NULL, NULL);
    assert_non_null(strstr(buf_cstr(&logs), "event=test.echo"));
    assert_null(strstr(buf_cstr(&logs), "Sekrit"));
    buf_free(&logs);
    config_free(&cfg);

    const char *none[] = {NULL};
    assert_int_equal(load(&cfg, NULL, none, err, sizeof(err)), CRCR_OK);
    d = describe(&cfg);
    assert_non_null(strstr(d, "\nGITHUB_APP_SECRET=(unset)\n"));
    assert_non_null(strstr(d, "\nCRCR_ADMIN_TOKEN=(unset)\n"));
    free(d);
    config_free(&cfg);
}

static void test_secret_values_never_appear_in_errors(void **state)
{
    /* Every load below fails after (or while) a secret was read; none may echo it. */
    const char *cases[][12] = {
        {"GITHUB_APP_SECRET", "Sekrit-A-123456", "MAX_DISPATCH_WORKERS", "x", NULL},
        {"GITHUB_APP_PRIVATE_KEY", "Sekrit-Key-Text-Not-A-Pem", "GITHUB_APP_ID", "1", NULL},
        {"HUD_BOT_KEY", "Sekrit-Hud-999999", "HUD_API_URL", "http://hud.example", NULL},
        {"CRCR_ADMIN_TOKEN", "Sekrit-Admin-999", "CRCR_LOG", "loud", NULL},
        {"CRCR_STORE", "mongodb://u:Sekrit-Store-1@h/db", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        crcr_config cfg;
        char err[256];
        assert_int_equal(load(&cfg, NULL, cases[i], err, sizeof(err)), CRCR_E_CONFIG);
        assert_true(strlen(err) > 0);
        if (strstr(err, "Sekrit"))
            fail_msg("secret in error: %s", err);
    }
}

/* ---- config_check: every problem at once ------------------------------------------------ */

typedef struct problem_list {
    char lines[16][512];
    unsigned n;
} problem_list;

static void collect_problem(void *ctx, const char *problem)
{
    problem_list *l = ctx;
    assert_null(strchr(problem, '\n'));
    if (l->n < 16)
        snprintf(l->lines[l->n], sizeof(l->lines[0]), "%s", problem);
    l->n++;
}

static unsigned check(const char *file, const char *const *env, problem_list *l)
{
    memset(l, 0, sizeof(*l));
    crcr_config cfg;
    unsigned n = config_check(&cfg, file, fake_get, (void *)env, collect_problem, l);
    config_free(&cfg);
    assert_int_equal(n, l->n);
    return n;
}

static void test_check_lists_every_problem_of_file_and_values(void **state)
{
    char *file = write_temp("# the packaged sample, edited badly\n"
                            "CRCR_LISTEN=127.0.0.1:8000\n"
                            "GITHUB_APP_SECRETT=topsecretvalue\n"
                            "CRCR_MAX_BODY=lots\n"
                            "JUSTAWORD\n"
                            "CRCR_LISTEN=127.0.0.1:8001\n"
                            "GITHUB_APP_PRIVATE_KEY=-----BEGIN RSA PRIVATE KEY-----\n"
                            "MIIEowIBAAKCAQEAx1secretbase64+/abc==\n"
                            "-----END RSA PRIVATE KEY-----\n"
                            "CRCR_CALLBACK_TOKEN=sometimes\n");
    problem_list l;
    assert_int_equal(check(file, NULL, &l), 8);
    char want[512];
    snprintf(want, sizeof(want), "%s:3: unknown key 'GITHUB_APP_SECRETT'", file);
    assert_string_equal(l.lines[0], want);
    snprintf(want, sizeof(want), "%s:5: expected KEY=VALUE", file);
    assert_string_equal(l.lines[1], want);
    snprintf(want, sizeof(want), "%s:6: CRCR_LISTEN is set twice", file);
    assert_string_equal(l.lines[2], want);
    snprintf(want, sizeof(want), "%s:7: a PEM value must be written on one line", file);
    assert_true(strncmp(l.lines[3], want, strlen(want)) == 0);
    assert_string_equal(l.lines[4],
                        "CRCR_CALLBACK_TOKEN: expected optional or required: 'sometimes'");
    assert_string_equal(l.lines[5], "CRCR_MAX_BODY: not a positive integer: 'lots'");
    assert_string_equal(l.lines[6], "GITHUB_APP_SECRET: required (the webhook secret GitHub "
                                    "signs deliveries with)");
    assert_string_equal(l.lines[7], "ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required");
    for (unsigned i = 0; i < l.n; i++) {
        assert_null(strstr(l.lines[i], "topsecretvalue"));
        assert_null(strstr(l.lines[i], "MIIE"));
    }
    /* config_load stops at the first of them. */
    crcr_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, file, NULL, err, sizeof(err)), CRCR_E_CONFIG);
    assert_string_equal(err, l.lines[0]);
    remove_temp(file);
}

static void test_check_of_a_complete_configuration_finds_nothing(void **state)
{
    const char *env[] = {"GITHUB_APP_SECRET", "s3cret-value", "ALLOWLIST_URL",
                         "https://github.com/pytorch/pytorch/blob/main/.github/allowlist.yml",
                         NULL};
    problem_list l;
    assert_int_equal(check(NULL, env, &l), 0);
    /* A variable already found bad is not reported missing as well. */
    const char *empty_secret[] = {"GITHUB_APP_SECRET", "", "ALLOWLIST_FILE", "a.yml", NULL};
    assert_int_equal(check(NULL, empty_secret, &l), 1);
    assert_string_equal(l.lines[0], "GITHUB_APP_SECRET: is set but empty");
    const char *bad_url[] = {"GITHUB_APP_SECRET", "x", "ALLOWLIST_URL", "http://example.org/a",
                             NULL};
    assert_int_equal(check(NULL, bad_url, &l), 1);
    assert_non_null(strstr(l.lines[0], "ALLOWLIST_URL: must be an https:// GitHub blob URL"));
    /* A file that cannot be read is the one problem. */
    assert_int_equal(check("/nonexistent/crcr.env", env, &l), 1);
    assert_string_equal(l.lines[0],
                        "/nonexistent/crcr.env: cannot read: No such file or directory");
}

static void test_require_serve_names_each_missing_setting(void **state)
{
    crcr_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, NULL, NULL, err, sizeof(err)), CRCR_OK);
    problem_list l;
    memset(&l, 0, sizeof(l));
    assert_int_equal(config_require_serve(&cfg, collect_problem, &l), 2);
    assert_non_null(strstr(l.lines[0], "GITHUB_APP_SECRET: required"));
    assert_non_null(strstr(l.lines[1], "ALLOWLIST_FILE or ALLOWLIST_URL"));
    config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults_without_file_or_environment, test_setup),
        cmocka_unit_test_setup(test_environment_overrides_file, test_setup),
        cmocka_unit_test_setup(test_empty_environment_value_means_default, test_setup),
        cmocka_unit_test_setup(test_config_getenv_reads_process_environment, test_setup),
        cmocka_unit_test_setup(test_file_comments_quotes_blanks_and_crlf, test_setup),
        cmocka_unit_test_setup(test_file_backslash_n_becomes_newline, test_setup),
        cmocka_unit_test_setup(test_file_line_without_equals_is_an_error_with_line_number,
                               test_setup),
        cmocka_unit_test_setup(test_file_unknown_key_is_an_error_naming_it, test_setup),
        cmocka_unit_test_setup(test_file_stray_pem_line_is_never_echoed, test_setup),
        cmocka_unit_test_setup(test_file_key_set_twice_is_an_error, test_setup),
        cmocka_unit_test_setup(test_missing_config_file_is_an_error, test_setup),
        cmocka_unit_test_setup(test_bad_integers_name_the_variable, test_setup),
        cmocka_unit_test_setup(test_integer_range_edges_are_accepted, test_setup),
        cmocka_unit_test_setup(test_allowlist_ttl_below_upstream_floor_is_kept, test_setup),
        cmocka_unit_test_setup(test_retry_max_below_retry_base_is_rejected, test_setup),
        cmocka_unit_test_setup(test_store_schemes, test_setup),
        cmocka_unit_test_setup(test_store_password_is_masked_in_describe_and_logs, test_setup),
        cmocka_unit_test_setup(test_insecure_urls_are_rejected_naming_the_variable, test_setup),
        cmocka_unit_test_setup(test_loopback_urls_are_accepted_and_trailing_slash_stripped,
                               test_setup),
        cmocka_unit_test_setup(test_too_many_or_no_oidc_issuers, test_setup),
        cmocka_unit_test_setup(test_allowlist_url_must_be_on_githubs_web_host, test_setup),
        cmocka_unit_test_setup(test_web_url_is_derived_from_the_api_url, test_setup),
        cmocka_unit_test_setup(test_ci_providers_file_is_kept, test_setup),
        cmocka_unit_test_setup(test_oidc_issuer_kinds, test_setup),
        cmocka_unit_test_setup(test_listen_addresses, test_setup),
        cmocka_unit_test_setup(test_callback_token_and_log_level_values, test_setup),
        cmocka_unit_test_setup(test_oncall_trusted_authors_are_logins, test_setup),
        cmocka_unit_test_setup(test_upstream_repo_must_be_owner_slash_repo, test_setup),
        cmocka_unit_test_setup(test_private_key_from_text_pkcs1_and_pkcs8, test_setup),
        cmocka_unit_test_setup(test_private_key_with_escaped_newlines_in_environment, test_setup),
        cmocka_unit_test_setup(test_private_key_on_one_line_in_config_file, test_setup),
        cmocka_unit_test_setup(test_private_key_from_file, test_setup),
        cmocka_unit_test_setup(test_ec_key_is_rejected_as_text_and_as_file, test_setup),
        cmocka_unit_test_setup(test_garbage_key_text_is_rejected_without_echo, test_setup),
        cmocka_unit_test_setup(test_unreadable_key_file_names_path_and_reason, test_setup),
        cmocka_unit_test_setup(test_key_text_and_key_file_together_are_rejected, test_setup),
        cmocka_unit_test_setup(test_app_id_and_key_must_come_together, test_setup),
        cmocka_unit_test_setup(test_app_id_format, test_setup),
        cmocka_unit_test_setup(test_app_secret_optional_but_not_empty, test_setup),
        cmocka_unit_test_setup(test_secrets_never_appear_in_describe_or_logs, test_setup),
        cmocka_unit_test_setup(test_secret_values_never_appear_in_errors, test_setup),
        cmocka_unit_test_setup(test_check_lists_every_problem_of_file_and_values, test_setup),
        cmocka_unit_test_setup(test_check_of_a_complete_configuration_finds_nothing, test_setup),
        cmocka_unit_test_setup(test_require_serve_names_each_missing_setting, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
