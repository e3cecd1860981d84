/* Unit tests for log.c: logfmt lines, levels, and the secret scrubber. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "log.h"

static buf_t captured;

static void capture(const char *line, size_t len, void *ctx)
{
    buf_append(&captured, line, len);
}

static int setup(void **state)
{
    buf_init(&captured, 1 << 20);
    log_set_sink(capture, NULL);
    log_set_level(CRCR_LOG_DEBUG);
    return 0;
}

static int teardown(void **state)
{
    log_set_sink(NULL, NULL);
    log_clear_secrets();
    buf_free(&captured);
    return 0;
}

static char *scrub(const char *in)
{
    buf_t out;
    buf_init(&out, 1 << 16);
    assert_int_equal(log_scrub(in, strlen(in), &out), CRCR_OK);
    return buf_detach(&out, NULL);
}

static void line_is_logfmt_with_quoting(void **state)
{
    buf_reset(&captured);
    log_kv(CRCR_LOG_INFO, "webhook.accepted", "delivery", "abc-123", "msg", "two words \"q\"",
           "skipped", NULL, "repo", "o/r", NULL);
    const char *l = buf_cstr(&captured);
    assert_non_null(strstr(l, "level=info event=webhook.accepted delivery=abc-123 "));
    assert_non_null(strstr(l, "msg=\"two words \\\"q\\\"\""));
    assert_non_null(strstr(l, " repo=o/r\n"));
    assert_null(strstr(l, "skipped"));
    assert_int_equal(strncmp(l, "ts=", 3), 0);
}

static void level_filter_drops_lower_levels(void **state)
{
    buf_reset(&captured);
    log_set_level(CRCR_LOG_WARN);
    log_kv(CRCR_LOG_INFO, "dropped", NULL);
    assert_int_equal(captured.len, 0);
    log_kv(CRCR_LOG_ERROR, "kept", NULL);
    assert_non_null(strstr(buf_cstr(&captured), "event=kept"));
    log_set_level(CRCR_LOG_DEBUG);
    crcr_log_level lvl;
    assert_int_equal(log_level_parse("WARNING", &lvl), 0);
    assert_int_equal(lvl, CRCR_LOG_WARN);
    assert_int_equal(log_level_parse("loud", &lvl), -1);
}

static void scrubber_removes_github_tokens(void **state)
{
    char *s = scrub("token=ghs_16C7e42F292c6912E7710c838347Ae178B4a and more");
    assert_null(strstr(s, "16C7e42F292c6912E7710c838347Ae178B4a"));
    assert_non_null(strstr(s, "ghs_[REDACTED] and more"));
    free(s);
    /* The new ~520-character stateless format contains dots. */
    char big[700] = "ghs_1234_";
    size_t n = strlen(big);
    for (int i = 0; i < 500; i++)
        big[n++] = (i % 50 == 49) ? '.' : (char)('a' + i % 26);
    big[n] = '\0';
    s = scrub(big);
    assert_string_equal(s, "ghs_[REDACTED]");
    free(s);
}

static void scrubber_removes_jwts_and_bearer(void **state)
{
    char *s =
        scrub("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjMifQ.c2lnbmF0dXJl end");
    assert_null(strstr(s, "eyJ"));
    assert_null(strstr(s, "c2lnbmF0dXJl"));
    assert_non_null(strstr(s, " end"));
    free(s);
    s = scrub("authorization: token abcdefghijklmnop123");
    assert_null(strstr(s, "abcdefghijklmnop123"));
    free(s);
}

static void scrubber_removes_pem_blocks(void **state)
{
    char *s = scrub("key=-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE "
                    "KEY----- tail");
    assert_null(strstr(s, "MIIEowIBAAKCAQEA"));
    assert_non_null(strstr(s, "[REDACTED-PEM] tail"));
    free(s);
    s = scrub("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC truncated");
    assert_null(strstr(s, "MIIEvQ"));
    free(s);
}

static void registered_secrets_never_print(void **state)
{
    log_add_secret("my-webhook-secret-value");
    buf_reset(&captured);
    log_kv(CRCR_LOG_ERROR, "oops", "detail", "echo my-webhook-secret-value back", NULL);
    assert_null(strstr(buf_cstr(&captured), "my-webhook-secret-value"));
    assert_non_null(strstr(buf_cstr(&captured), "[REDACTED]"));
    log_clear_secrets();
}

static void ordinary_text_is_untouched(void **state)
{
    char *s = scrub("dispatch to org/repo failed: HTTP 502 Bad Gateway (token cache hit)");
    assert_string_equal(s, "dispatch to org/repo failed: HTTP 502 Bad Gateway (token cache hit)");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(line_is_logfmt_with_quoting),
        cmocka_unit_test(level_filter_drops_lower_levels),
        cmocka_unit_test(scrubber_removes_github_tokens),
        cmocka_unit_test(scrubber_removes_jwts_and_bearer),
        cmocka_unit_test(scrubber_removes_pem_blocks),
        cmocka_unit_test(registered_secrets_never_print),
        cmocka_unit_test(ordinary_text_is_untouched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
