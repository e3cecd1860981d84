/*
 * test_config_keys.c - the table of the configuration's variables and config_describe()
 * (src/config/config_keys.c): the table's own consistency (names, ranges, defaults, fields), the
 * accessors of integer and string fields, what `crcr config` prints for each kind of value
 * (secrets, the store URI, the listen address, issuers, escapes), its output read back as a
 * config file, and docs/configuration.md listing every variable with its default.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config_keys.h"
#include "log.h"
#include "unit_support.h"

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

/* The value `describe` shows for `key` (static), asserting the key has exactly one line. */
static const char *shown(const char *d, const char *key)
{
    static char out[1024];
    size_t kl = strlen(key);
    const char *found = NULL;
    for (const char *line = d; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        if (strncmp(line, key, kl) == 0 && line[kl] == '=') {
            if (found)
                fail_msg("%s is shown twice", key);
            found = line + kl + 1;
            snprintf(out, sizeof(out), "%.*s", (int)(nl - found), found);
        }
        line = nl + 1;
    }
    if (!found)
        fail_msg("no line for %s in:\n%s", key, d);
    return out;
}

static int test_setup(void **state)
{
    log_clear_secrets();
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The table. */

static bool name_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static void test_table_entries_are_consistent(void **state)
{
    for (int i = 0; i < K_COUNT; i++) {
        const key_def *k = &config_keys[i];
        if (!name_ok(k->name))
            fail_msg("entry %d: bad name '%s'", i, k->name ? k->name : "(null)");
        if (!k->desc || strlen(k->desc) < 10 || k->desc[strlen(k->desc) - 1] != '.')
            fail_msg("%s: the description must be a sentence", k->name);
        for (int j = 0; j < i; j++)
            if (strcmp(config_keys[j].name, k->name) == 0)
                fail_msg("%s is listed twice", k->name);
        /* A secret never has a default and is kept as a string. */
        if (k->secret && (k->def || V_IS_INT(k->kind) || k->kind == V_OWN))
            fail_msg("%s: a secret with a default or of kind %d", k->name, (int)k->kind);
        if (k->kind == V_OWN && k->off != 0)
            fail_msg("%s: V_OWN with a field", k->name);
        /* Every other variable has a field of its own (app_id is the one at offset 0). */
        if (k->kind != V_OWN && k->off == 0 && i != K_GITHUB_APP_ID)
            fail_msg("%s: no field", k->name);
        for (int j = 0; j < i && k->kind != V_OWN; j++)
            if (config_keys[j].kind != V_OWN && config_keys[j].off == k->off)
                fail_msg("%s and %s share a field", config_keys[j].name, k->name);
        if (V_IS_INT(k->kind)) {
            if (k->min > k->max || k->min < 0 || k->max > CONFIG_INT_MAX)
                fail_msg("%s: range %lld..%lld", k->name, k->min, k->max);
            if (k->kind == V_BOOL && (k->min != 0 || k->max != 1))
                fail_msg("%s: a bool is 0 or 1", k->name);
            char *end = NULL;
            long long def = k->def ? strtoll(k->def, &end, 10) : -1;
            if (!k->def || *end || def < k->min || def > k->max)
                fail_msg("%s: default '%s' not in %lld..%lld", k->name, k->def ? k->def : "",
                         k->min, k->max);
        } else if (k->min != 1 || k->max != 0) {
            fail_msg("%s: a range on a variable that is not an integer", k->name);
        }
    }
    assert_int_equal(config_keys[K_GITHUB_APP_ID].off, offsetof(crcr_config, app_id));
}

static void test_fields_are_the_ones_the_table_names(void **state)
{
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    assert_ptr_equal(config_key_str(&cfg, K_CRCR_STORE), &cfg.store_uri);
    assert_ptr_equal(config_key_str(&cfg, K_GITHUB_APP_ID), &cfg.app_id);
    assert_ptr_equal(config_key_str(&cfg, K_GITHUB_APP_PRIVATE_KEY), &cfg.private_key_pem);
    assert_ptr_equal(config_key_str(&cfg, K_HUD_API_URL), &cfg.hud_api_url);
    assert_ptr_equal(config_key_str(&cfg, K_CI_PROVIDERS_URL), &cfg.ci_providers_url);
    /* Integers and variables read by code of their own have no string field. */
    assert_null(config_key_str(&cfg, K_CRCR_MAX_BODY));
    assert_null(config_key_str(&cfg, K_CRCR_LISTEN));
    assert_null(config_key_str(&cfg, K_GITHUB_APP_PRIVATE_KEY_FILE));
    assert_int_equal(config_key_int(&cfg, K_CRCR_LOG), -1);

    /* Each integer kind lands in its own field, whole. */
    config_key_set_int(&cfg, K_CRCR_MAX_BODY, 100LL * 1024 * 1024);
    assert_int_equal(cfg.max_body, 100u * 1024u * 1024u);
    config_key_set_int(&cfg, K_CRCR_NIGHTLY_DAILY_BYTES, CONFIG_INT_MAX);
    assert_true(cfg.nightly_daily_bytes == CONFIG_INT_MAX);
    config_key_set_int(&cfg, K_CRCR_HEALTH_L3_SUCCESS_PCT, 91);
    assert_int_equal(cfg.health_success_pct[3], 91);
    assert_int_equal(cfg.health_success_pct[2], 0);
    assert_int_equal(cfg.health_success_pct[4], 0);
    config_key_set_int(&cfg, K_CRCR_ONCALL_COMMENTS, 1);
    assert_true(cfg.oncall_comments);
    assert_int_equal(config_key_int(&cfg, K_CRCR_ONCALL_COMMENTS), 1);
    config_key_set_int(&cfg, K_CRCR_ONCALL_COMMENTS, 0);
    assert_false(cfg.oncall_comments);
    /* Setting a string variable as an integer changes nothing. */
    config_key_set_int(&cfg, K_CRCR_STORE, 12345);
    assert_null(cfg.store_uri);

    /* Every integer variable reads back its bounds. */
    for (int i = 0; i < K_COUNT; i++) {
        const key_def *k = &config_keys[i];
        if (!V_IS_INT(k->kind))
            continue;
        config_key_set_int(&cfg, (key_id)i, k->max);
        if (config_key_int(&cfg, (key_id)i) != k->max)
            fail_msg("%s: set %lld, read %lld", k->name, k->max, config_key_int(&cfg, (key_id)i));
        config_key_set_int(&cfg, (key_id)i, k->min);
        assert_true(config_key_int(&cfg, (key_id)i) == k->min);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* config_describe. */

static void test_defaults_describe_as_the_table_says(void **state)
{
    crcr_config cfg;
    ut_config(&cfg, NULL);
    char *d = describe(&cfg);
    /* One line per variable, in the table's order. */
    const char *p = d;
    for (int i = 0; i < K_COUNT; i++) {
        size_t n = strlen(config_keys[i].name);
        if (strncmp(p, config_keys[i].name, n) != 0 || p[n] != '=')
            fail_msg("line %d is not %s: %.40s", i + 1, config_keys[i].name, p);
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        const char *v = p + n + 1;
        const char *want = config_keys[i].secret ? "(unset)" : config_keys[i].def;
        if (want ? strncmp(v, want, strlen(want)) != 0 || v + strlen(want) != nl : v != nl)
            fail_msg("%s: shown as '%.*s', default '%s'", config_keys[i].name, (int)(nl - v), v,
                     want ? want : "");
        p = nl + 1;
    }
    assert_string_equal(p, "");
    free(d);
    config_free(&cfg);
}

static void test_each_kind_of_value_is_shown_on_one_line(void **state)
{
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.app_id = "Iv1.abc";
    cfg.app_secret = "Sekrit-Webhook-1";
    cfg.private_key_pem = "-----BEGIN PRIVATE KEY-----\nSekrit\n-----END PRIVATE KEY-----\n";
    cfg.allowlist_file = "/etc/crcr/a\\b\nc\r.yml";
    cfg.store_uri = "postgresql://crcr:Sekrit-Pg@[::1]:5432/crcr?password=Sekrit-Pg-2";
    cfg.listen_host = "::1";
    cfg.listen_port = 0;
    cfg.oidc_issuers[0] = "https://a.example";
    cfg.oidc_issuer_kinds[0] = CRCR_ISSUER_GITHUB;
    cfg.oidc_issuers[1] = "http://127.0.0.1:5";
    cfg.oidc_issuer_kinds[1] = CRCR_ISSUER_BUILDKITE;
    cfg.n_oidc_issuers = 2;
    cfg.callback_token = CRCR_CB_TOKEN_REQUIRED;
    cfg.log_level = CRCR_LOG_OFF;
    cfg.max_body = 4096;
    cfg.nightly_daily_bytes = 0;
    cfg.health_success_pct[4] = 99;
    cfg.oncall_comments = true;
    char *d = describe(&cfg);
    assert_null(strstr(d, "Sekrit"));
    assert_string_equal(shown(d, "GITHUB_APP_ID"), "Iv1.abc");
    assert_string_equal(shown(d, "GITHUB_APP_SECRET"), "(set)");
    assert_string_equal(shown(d, "GITHUB_APP_SECRET_PREVIOUS"), "(unset)");
    assert_string_equal(shown(d, "GITHUB_APP_PRIVATE_KEY"), "(set)");
    assert_string_equal(shown(d, "GITHUB_APP_PRIVATE_KEY_FILE"), "");
    assert_string_equal(shown(d, "ALLOWLIST_FILE"), "/etc/crcr/a\\\\b\\nc?.yml");
    assert_string_equal(shown(d, "ALLOWLIST_URL"), "");
    assert_string_equal(shown(d, "CRCR_STORE"),
                        "postgresql://crcr:***@[::1]:5432/crcr?password=***");
    assert_string_equal(shown(d, "CRCR_LISTEN"), "[::1]:0");
    assert_string_equal(shown(d, "CRCR_OIDC_ISSUERS"),
                        "https://a.example,buildkite=http://127.0.0.1:5");
    assert_string_equal(shown(d, "CRCR_CALLBACK_TOKEN"), "required");
    assert_string_equal(shown(d, "CRCR_LOG"), "off");
    assert_string_equal(shown(d, "CRCR_MAX_BODY"), "4096");
    assert_string_equal(shown(d, "CRCR_NIGHTLY_DAILY_BYTES"), "0");
    assert_string_equal(shown(d, "CRCR_HEALTH_L4_SUCCESS_PCT"), "99");
    assert_string_equal(shown(d, "CRCR_ONCALL_COMMENTS"), "1");
    free(d);

    /* No listen host, no store, no issuers: empty values; an unknown log level reads as info. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen_host = NULL;
    cfg.log_level = (crcr_log_level)42;
    d = describe(&cfg);
    assert_string_equal(shown(d, "CRCR_LISTEN"), "");
    assert_string_equal(shown(d, "CRCR_STORE"), "");
    assert_string_equal(shown(d, "CRCR_OIDC_ISSUERS"), "");
    assert_string_equal(shown(d, "CRCR_LOG"), "info");
    assert_string_equal(shown(d, "CRCR_CALLBACK_TOKEN"), "optional");
    free(d);

    cfg.listen_host = "0.0.0.0";
    cfg.listen_port = 65535;
    d = describe(&cfg);
    assert_string_equal(shown(d, "CRCR_LISTEN"), "0.0.0.0:65535");
    free(d);
}

static void test_describe_reports_an_output_buffer_too_small(void **state)
{
    crcr_config cfg;
    ut_config(&cfg, NULL);
    buf_t b;
    buf_init(&b, 256);
    assert_int_equal(config_describe(&cfg, &b), CRCR_E_TOO_LARGE);
    assert_true(b.len <= 256);
    buf_free(&b);
    config_free(&cfg);
}

static void test_describe_output_loads_back_as_a_config_file(void **state)
{
    const char *env[] = {"UPSTREAM_REPO",
                         "acme/widgets",
                         "CRCR_LISTEN",
                         "[::1]:9001",
                         "ALLOWLIST_FILE",
                         "/tmp/a\\b\nc.yml",
                         "CRCR_LOG",
                         "debug",
                         "CRCR_OIDC_ISSUERS",
                         "https://a.example,http://127.0.0.1:1",
                         NULL};
    crcr_config cfg;
    ut_config(&cfg, env);
    char *d = describe(&cfg);

    /* Drop secret placeholders; everything else must read back to the same configuration. */
    buf_t file;
    buf_init(&file, 64 * 1024);
    for (char *line = d; *line;) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        if (!strstr(line, "=(set)") && !strstr(line, "=(unset)"))
            assert_int_equal(buf_printf(&file, "%s\n", line), CRCR_OK);
        line = nl + 1;
    }
    ut_dir dir;
    ut_dir_make(&dir);
    char path[128];
    ut_write_file(ut_path(&dir, "crcr.env", path, sizeof(path)), buf_cstr(&file));
    crcr_config again;
    char err[256] = "";
    if (config_load(&again, path, ut_env_get, NULL, err, sizeof(err)) != CRCR_OK)
        fail_msg("config_load: %s", err);
    assert_string_equal(again.allowlist_file, "/tmp/a\\b\nc.yml");
    assert_string_equal(again.listen_host, "::1");
    assert_int_equal(again.listen_port, 9001);
    char *d2 = describe(&again);
    char *d1 = describe(&cfg);
    assert_string_equal(d1, d2);
    free(d1);
    free(d2);
    config_free(&again);
    ut_dir_remove(&dir);
    buf_free(&file);
    free(d);
    config_free(&cfg);
}

/* ---------------------------------------------------------------------------------------- */
/* docs/configuration.md. */

static char *read_docs(void)
{
    const char *data = getenv("CRCR_TEST_DATA");
    if (!data)
        fail_msg("CRCR_TEST_DATA is not set (ctest sets it to <repo>/tests/data)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/../../docs/configuration.md", data);
    buf_t b;
    buf_init(&b, 1024 * 1024);
    if (buf_read_file(path, 1024 * 1024, &b) != CRCR_OK)
        fail_msg("cannot read %s", path);
    size_t len;
    return buf_detach(&b, &len);
}

static void test_docs_list_every_variable_and_default(void **state)
{
    char *doc = read_docs();
    crcr_config cfg;
    ut_config(&cfg, NULL);
    char *d = describe(&cfg);
    size_t keys = 0;
    for (char *line = d; *line;) {
        char *nl = strchr(line, '\n');
        char *eq = strchr(line, '=');
        assert_non_null(nl);
        assert_non_null(eq);
        *nl = '\0';
        *eq = '\0';
        char want[128];
        snprintf(want, sizeof(want), "`%s`", line);
        if (!strstr(doc, want))
            fail_msg("docs/configuration.md does not mention %s", want);
        const char *def = eq + 1;
        if (*def && strcmp(def, "(unset)") != 0) {
            snprintf(want, sizeof(want), "`%s`", def);
            if (!strstr(doc, want))
                fail_msg("docs/configuration.md does not show %s's default %s", line, want);
        }
        keys++;
        line = nl + 1;
    }
    assert_int_equal(keys, K_COUNT);
    free(d);
    config_free(&cfg);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_table_entries_are_consistent, test_setup),
        cmocka_unit_test_setup(test_fields_are_the_ones_the_table_names, test_setup),
        cmocka_unit_test_setup(test_defaults_describe_as_the_table_says, test_setup),
        cmocka_unit_test_setup(test_each_kind_of_value_is_shown_on_one_line, test_setup),
        cmocka_unit_test_setup(test_describe_reports_an_output_buffer_too_small, test_setup),
        cmocka_unit_test_setup(test_describe_output_loads_back_as_a_config_file, test_setup),
        cmocka_unit_test_setup(test_docs_list_every_variable_and_default, test_setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    log_clear_secrets();
    return rc;
}
