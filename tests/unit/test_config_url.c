/*
 * test_config_url.c - the syntax of the configuration's addresses (src/config/config_url.c): which
 * URLs are allowed (https, http only to a loopback host: IPv4, IPv6, localhost), blob URLs, TCP
 * ports with their bounds, trailing slashes, and the passwords inside a store URI: replaced by
 * "***" wherever they are (userinfo with or without a user, query parameters, IPv6 hosts) and
 * registered as log secrets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "config.h"
#include "config_url.h"
#include "log.h"

/* Each test starts with no registered log secrets. */
static int test_setup(void **state)
{
    log_clear_secrets();
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* URLs. */

static void test_config_url_allowed_loopback_rules(void **state)
{
    static const char *ok[] = {
        "http://127.0.0.1:9/",
        "http://localhost",
        "http://LOCALHOST:80/x",
        "http://[::1]:8",
        "http://127.255.0.9/path",
        "https://anything",
        "https://api.github.com",
        "HTTPS://example.com:443/a",
        "http://u:p@127.0.0.1:5/",
        "https://[2001:db8::1]:443",
        "http://localhost?q=1",
        "http://[0:0:0:0:0:0:0:1]/",
        "http://[::1]",
        "http://127.0.0.1:0/",
        "http://127.0.0.1:65535",
        "http://127.0.0.1:00080/",
        "https://h:1",
    };
    static const char *bad[] = {
        "http://example.com",
        "http://127.0.0.1.evil.com",
        "http://127.0.0.1.evil.com:80/",
        "http://evil.com#@127.0.0.1",
        "http://127.0.0.1@evil.com",
        "http://127.0.0.1:80@evil.com/",
        "http://[::1].evil.com/",
        "http://[::2]:8",
        "http://128.0.0.1",
        "http://127.1",
        "http://localhost.evil.com",
        "http://0.0.0.0:8000",
        "http://[::ffff:127.0.0.1]/", /* IPv4-mapped: not ::1 */
        "http://[::]:80",
        "http://[::1",
        "http://[::1]x/",
        "http://h[::1]/",
        "http://[]:80/",
        "http://127.0.0.1:65536/",
        "http://127.0.0.1:000080/", /* six digits */
        "http://127.0.0.1:-1/",
        "http://",
        "https://",
        "https://:443/",
        "https://host:99999/",
        "https://host:8a/",
        "https://host:/",
        "https://exa mple.com",
        "https://exa\tmple.com",
        "https://example.com/\x7f",
        "http://evil.com\\@127.0.0.1",
        "ftp://127.0.0.1",
        "127.0.0.1",
        "",
        NULL,
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!config_url_allowed(ok[i]))
            fail_msg("expected allowed: %s", ok[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (config_url_allowed(bad[i]))
            fail_msg("expected rejected: %s", bad[i] ? bad[i] : "(null)");
}

static void test_url_length_is_capped(void **state)
{
    /* CONFIG_URL_MAX is 2048 bytes. */
    char url[2100];
    size_t head = strlen("https://h/");
    memcpy(url, "https://h/", head);
    memset(url + head, 'a', sizeof(url) - head);
    url[2048] = '\0';
    assert_true(config_url_allowed(url));
    url[2048] = 'a';
    url[2049] = '\0';
    assert_false(config_url_allowed(url));
}

/* The scheme rule only: which host is checked against GITHUB_API_URL's web host
 * (test_config.c, test_allowlist_url_must_be_on_githubs_web_host). */
static void test_blob_urls_are_https_or_loopback(void **state)
{
    static const char *ok[] = {
        "https://github.com/pytorch/pytorch/blob/main/.github/allow.yml",
        "HTTPS://GitHub.COM/o/r/blob/main/a.yml",
        "https://ghes.example.com/o/r/blob/main/a.yml", /* GitHub Enterprise Server */
        "http://127.0.0.1:8123/o/r/blob/main/allow.yml",
        "https://localhost/o/r/blob/main/a.yml",
        "http://[::1]:8/o/r/blob/main/a.yml",
    };
    static const char *bad[] = {
        "http://github.com/o/r/blob/main/a.yml", /* http only to loopback hosts */
        "http://ghes.example.com/o/r/blob/main/a.yml",
        "ftp://127.0.0.1/o/r/blob/main/a.yml",
        "https://github.com/o/r/blob/ main/a.yml",
        "",
        NULL,
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!config_blob_url_allowed(ok[i]))
            fail_msg("expected allowed: %s", ok[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (config_blob_url_allowed(bad[i]))
            fail_msg("expected rejected: %s", bad[i] ? bad[i] : "(null)");
}

static void test_trailing_slashes_are_stripped_down_to_the_scheme(void **state)
{
    static const char *cases[][2] = {
        {"https://h/a///", "https://h/a"},
        {"http://h/", "http://h"},
        {"https://h", "https://h"},
        {"https://", "https://"},
        {"https:///", "https://"},
        {"https://h/a/b", "https://h/a/b"},
        {"no-scheme///", "no-scheme"},
        {"///", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char url[64];
        snprintf(url, sizeof(url), "%s", cases[i][0]);
        config_url_strip_slashes(url);
        if (strcmp(url, cases[i][1]) != 0)
            fail_msg("'%s' became '%s', want '%s'", cases[i][0], url, cases[i][1]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Ports. */

static void test_port_bounds_and_syntax(void **state)
{
    static const struct {
        const char *s;
        long want;
    } ok[] = {{"0", 0}, {"1", 1}, {"80", 80}, {"8000", 8000}, {"65535", 65535}, {"00080", 80}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        long v = -1;
        if (!config_port_parse(ok[i].s, strlen(ok[i].s), &v))
            fail_msg("expected port %s to parse", ok[i].s);
        assert_int_equal(v, ok[i].want);
    }
    static const char *bad[] = {"65536", "99999", "",    "123456", "000080", "-1",
                                "+1",    " 80",   "80 ", "8a",     "0x50",   "\xd9\xa8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        long v = -1;
        if (config_port_parse(bad[i], strlen(bad[i]), &v))
            fail_msg("expected port '%s' to be refused", bad[i]);
    }
    /* Only `n` bytes are read: the port inside "host:8080/path". */
    long v = -1;
    const char *hp = "host:8080/path";
    assert_true(config_port_parse(hp + 5, 4, &v));
    assert_int_equal(v, 8080);
    assert_false(config_port_parse(hp + 5, 5, &v));
}

/* ---------------------------------------------------------------------------------------- */
/* Store URIs. */

/* config_redact_store() of `uri` (static). */
static const char *redacted(const char *uri)
{
    static char out[1024];
    buf_t b;
    buf_init(&b, sizeof(out));
    crcr_err e = config_redact_store(uri, &b);
    if (e != CRCR_OK)
        fail_msg("config_redact_store(%s): %s", uri, crcr_strerror(e));
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    buf_free(&b);
    return out;
}

static void test_store_passwords_are_redacted(void **state)
{
    static const char *cases[][2] = {
        /* The form `crcr serve` logs at start (relay.started): short passwords too, which the log
         * scrubber would let through (it skips values under 6 bytes). */
        {"postgresql://crcr:pw@db/crcr", "postgresql://crcr:***@db/crcr"},
        {"postgres://u:p@h:5432/d?sslmode=verify-full&password=x",
         "postgres://u:***@h:5432/d?sslmode=verify-full&password=***"},
        {"sqlite:/var/lib/crcr/crcr.db", "sqlite:/var/lib/crcr/crcr.db"},
        /* A password without a user. */
        {"postgresql://:Pw-Secret-1@db/crcr", "postgresql://:***@db/crcr"},
        /* A user without a password, or no userinfo: the port's ':' is no password. */
        {"postgresql://crcr@db:5432/crcr", "postgresql://crcr@db:5432/crcr"},
        {"postgresql://db:5432/crcr", "postgresql://db:5432/crcr"},
        /* IPv6 hosts: their colons are no password either. */
        {"postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"},
        {"postgresql://u@[2001:db8::1]:5432/db", "postgresql://u@[2001:db8::1]:5432/db"},
        {"postgresql://[::1]:5432/db", "postgresql://[::1]:5432/db"},
        {"postgresql://:pw@[::1]/db", "postgresql://:***@[::1]/db"},
        /* The userinfo ends at the authority's last '@'; the password at its first ':'. */
        {"postgresql://u:p@ss:w@h/db", "postgresql://u:***@h/db"},
        {"postgresql://u:pw@h/db#x@y", "postgresql://u:***@h/db#x@y"},
        {"postgresql://h/db?x=a@b:c", "postgresql://h/db?x=a@b:c"},
        /* Query parameters: exactly "password", wherever it is. */
        {"postgresql:///crcr?host=/run/postgresql&password=Pw-2",
         "postgresql:///crcr?host=/run/postgresql&password=***"},
        {"postgresql://h/db?password=a-b-c&user=u", "postgresql://h/db?password=***&user=u"},
        {"postgresql://h/db?password=abc#frag", "postgresql://h/db?password=***#frag"},
        {"postgresql://h/db?xpassword=1&password_x=2",
         "postgresql://h/db?xpassword=1&password_x=2"},
        {"postgresql://h/password=1", "postgresql://h/password=1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = redacted(cases[i][0]);
        if (strcmp(got, cases[i][1]) != 0)
            fail_msg("'%s' became '%s', want '%s'", cases[i][0], got, cases[i][1]);
    }
    /* No URI: nothing written. */
    buf_t b;
    buf_init(&b, 16);
    assert_int_equal(config_redact_store(NULL, &b), CRCR_OK);
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

/* An empty password was written as "***" over and over until the output buffer was full:
 * `crcr config` failed (CRCR_E_TOO_LARGE) and relay.started logged 8 KB of '*'. */
static void test_empty_passwords_are_redacted_once(void **state)
{
    assert_string_equal(redacted("postgresql://u:@h/db"), "postgresql://u:***@h/db");
    assert_string_equal(redacted("postgresql://:@h/db"), "postgresql://:***@h/db");
    assert_string_equal(redacted("postgresql://h/db?password=&sslmode=require"),
                        "postgresql://h/db?password=***&sslmode=require");
    assert_string_equal(redacted("postgresql://u:@h/db?password=#f"),
                        "postgresql://u:***@h/db?password=***#f");
    /* At the very end there is nothing to hide, nor anything to repeat. */
    assert_string_equal(redacted("postgresql://h/db?password="), "postgresql://h/db?password=");
}

/* libpq takes the last of repeated parameters: every "password=" is hidden, not the first only. */
static void test_every_password_parameter_is_redacted(void **state)
{
    assert_string_equal(redacted("postgresql://h/db?password=decoy&password=Pw-Real-9"),
                        "postgresql://h/db?password=***&password=***");
    assert_string_equal(
        redacted("postgresql://u:Pw-1@h/db?password=&sslmode=require&password=Pw-Real-9"),
        "postgresql://u:***@h/db?password=***&sslmode=require&password=***");
}

/* log_scrub() of `line` (static). */
static const char *scrubbed(const char *line)
{
    static char out[1024];
    buf_t b;
    buf_init(&b, sizeof(out));
    assert_int_equal(log_scrub(line, strlen(line), &b), CRCR_OK);
    snprintf(out, sizeof(out), "%s", buf_cstr(&b));
    buf_free(&b);
    return out;
}

static void test_store_passwords_become_log_secrets(void **state)
{
    const char *line = "connect failed: Pg-Secret-1 Pg-Secret-2 Pg-Secret-3 crcr-user db.internal";
    /* Nothing registered yet: the line passes as it is. */
    assert_string_equal(scrubbed(line), line);
    config_store_add_secrets("postgresql://crcr-user:Pg-Secret-1@db.internal:5432/crcr"
                             "?password=Pg-Secret-2&sslmode=require&password=Pg-Secret-3");
    const char *s = scrubbed(line);
    assert_null(strstr(s, "Pg-Secret"));
    /* The user and the host are no secrets. */
    assert_non_null(strstr(s, "crcr-user"));
    assert_non_null(strstr(s, "db.internal"));

    /* A URI without a password registers nothing. */
    log_clear_secrets();
    config_store_add_secrets("postgresql://crcr-user@db.internal/crcr?sslmode=require");
    config_store_add_secrets("sqlite:/var/lib/crcr/Pg-Secret-1.db");
    assert_string_equal(scrubbed(line), line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_config_url_allowed_loopback_rules, test_setup),
        cmocka_unit_test_setup(test_url_length_is_capped, test_setup),
        cmocka_unit_test_setup(test_blob_urls_are_https_or_loopback, test_setup),
        cmocka_unit_test_setup(test_trailing_slashes_are_stripped_down_to_the_scheme, test_setup),
        cmocka_unit_test_setup(test_port_bounds_and_syntax, test_setup),
        cmocka_unit_test_setup(test_store_passwords_are_redacted, test_setup),
        cmocka_unit_test_setup(test_empty_passwords_are_redacted_once, test_setup),
        cmocka_unit_test_setup(test_every_password_parameter_is_redacted, test_setup),
        cmocka_unit_test_setup(test_store_passwords_become_log_secrets, test_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
