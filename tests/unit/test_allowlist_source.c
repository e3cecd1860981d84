/*
 * test_allowlist_source.c - where the allowlist comes from (src/allowlist_source.c).
 *
 * Blob URL parsing, and the file source end to end: first load, refresh on TTL and on reload(),
 * a broken refresh keeping the last good allowlist, status and log events. Fetching through the
 * contents API is covered by the end-to-end tests against a fake GitHub.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allowlist_source.h"
#include "clock.h"
#include "log.h"

/* ---------------------------------------------------------------------------------------- */
/* Blob URLs. */

typedef struct blob {
    int rc;
    char owner_repo[141], ref[256], path[512], err[512];
} blob;

static blob parse_url(const char *url)
{
    blob b;
    memset(&b, 0, sizeof(b));
    b.rc = allowlist_parse_blob_url(url, b.owner_repo, sizeof(b.owner_repo), b.ref, sizeof(b.ref),
                                    b.path, sizeof(b.path), b.err, sizeof(b.err));
    return b;
}

static void assert_blob(const char *url, const char *owner_repo, const char *ref, const char *path)
{
    blob b = parse_url(url);
    if (b.rc != 0)
        fail_msg("expected %s to parse, got: %s", url, b.err);
    assert_string_equal(b.owner_repo, owner_repo);
    assert_string_equal(b.ref, ref);
    assert_string_equal(b.path, path);
}

static void test_blob_url_good_forms(void **state)
{
    assert_blob("https://github.com/pytorch/pytorch/blob/main/.github/allowlist.yml",
                "pytorch/pytorch", "main", ".github/allowlist.yml");
    assert_blob("https://github.com/o/r/blob/0123abc/f.yaml", "o/r", "0123abc", "f.yaml");
    /* Upstream strips slashes around the path; query and fragment are not part of it. */
    assert_blob("https://github.com/example-org/relay.config/blob/v1.2/a/b/c.yml/?plain=1#L3",
                "example-org/relay.config", "v1.2", "a/b/c.yml");
    /* Scheme and host are case-insensitive; escapes are decoded (and re-encoded at fetch). */
    assert_blob("HTTPS://GitHub.com/o/r/blob/release%2F2.5/my%20dir/list%2Byml", "o/r",
                "release/2.5", "my dir/list+yml");
}

static void assert_bad_url(const char *url, const char *reason)
{
    blob b = parse_url(url);
    if (b.rc == 0)
        fail_msg("expected %s to be refused", url ? url : "(null)");
    assert_int_equal(b.rc, -1);
    assert_true(strncmp(b.err, "ALLOWLIST_URL: invalid GitHub blob URL", 38) == 0);
    assert_non_null(strstr(b.err, reason));
    const char *expected = "Expected: https://github.com/<owner>/<repo>/blob/<ref>/<path>";
    assert_string_equal(b.err + strlen(b.err) - strlen(expected), expected);
}

static void test_blob_url_bad_forms(void **state)
{
    assert_bad_url(NULL, "empty");
    assert_bad_url("", "empty");
    assert_bad_url("github.com/o/r/blob/main/f", "no scheme");
    assert_bad_url("http://github.com/o/r/blob/main/f", "the scheme must be https");
    assert_bad_url("ftp://github.com/o/r/blob/main/f", "the scheme must be https");
    assert_bad_url("https://gitlab.com/o/r/blob/main/f", "the host must be exactly github.com");
    assert_bad_url("https://www.github.com/o/r/blob/main/f", "exactly github.com");
    assert_bad_url("https://github.com.evil.example/o/r/blob/main/f", "exactly github.com");
    assert_bad_url("https://github.com:443/o/r/blob/main/f", "exactly github.com");
    assert_bad_url("https://raw.githubusercontent.com/o/r/main/f", "exactly github.com");
    assert_bad_url("https://github.com/o/r/blob/main", "fewer than 5 path parts");
    assert_bad_url("https://github.com/o/r/tree/main/f", "the third path part must be 'blob'");
    assert_bad_url("https://github.com/o/r/raw/main/f", "the third path part must be 'blob'");
    assert_bad_url("https://github.com/o//r/blob/main/f", "an empty path part");
    assert_bad_url("https://github.com/my_org/r/blob/main/f", "not a valid owner/repo");
    assert_bad_url("https://github.com/o/../blob/main/f", "not a valid owner/repo");
    assert_bad_url("https://github.com/o/r%2Fx/blob/main/f", "not a valid owner/repo");
    assert_bad_url("https://github.com/o/r/blob/main/../../orgs/x", "'.' and '..'");
    assert_bad_url("https://github.com/o/r/blob/main/%2E%2E/x", "'.' and '..'");
    assert_bad_url("https://github.com/o/r/blob/main/a%2Fb", "an encoded '/'");
    assert_bad_url("https://github.com/o/r/blob/main/a%zz", "bad percent-escape");
    assert_bad_url("https://github.com/o/r/blob/main/a%4", "bad percent-escape");
    assert_bad_url("https://github.com/o/r/blob/main/a%0Ab", "control characters");
}

static void test_blob_url_error_never_echoes_credentials(void **state)
{
    blob b = parse_url("https://user:ghp_secret123@github.com/o/r/blob/main/f");
    assert_int_equal(b.rc, -1);
    assert_null(strstr(b.err, "ghp_secret123"));
    assert_non_null(strstr(b.err, "exactly github.com"));
    /* Without credentials the URL is named. */
    b = parse_url("https://gitlab.com/o/r/blob/main/f");
    assert_non_null(strstr(b.err, "'https://gitlab.com/o/r/blob/main/f'"));
}

static void test_blob_url_respects_caller_buffers(void **state)
{
    char owner_repo[4], ref[64], path[64], err[256];
    assert_int_equal(allowlist_parse_blob_url("https://github.com/owner/repo/blob/main/f",
                                              owner_repo, sizeof(owner_repo), ref, sizeof(ref),
                                              path, sizeof(path), err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "buffer"));
    char small_err[8];
    assert_int_equal(allowlist_parse_blob_url("nope", owner_repo, sizeof(owner_repo), ref,
                                              sizeof(ref), path, sizeof(path), small_err,
                                              sizeof(small_err)),
                     -1);
    assert_int_equal(strlen(small_err), sizeof(small_err) - 1);
}

/* ---------------------------------------------------------------------------------------- */
/* The file source. */

static const char GOOD_V1[] = "L1:\n  - example-org/one\nL2:\n  - example-org/two\n";
static const char GOOD_V2[] = "L1: [example-org/one]\nL4: [example-org/four]\n";
static const char BROKEN[] = "L1:\n  - example-org/one\nL3:\n  - example-org/oops\n";

typedef struct fixture {
    char path[64];
    crcr_config cfg;
    allowlist_source *src;
    char log[16384];
    size_t log_len;
} fixture;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void log_sink(const char *line, size_t len, void *ctx)
{
    fixture *fx = ctx;
    if (fx->log_len + len < sizeof(fx->log)) {
        memcpy(fx->log + fx->log_len, line, len);
        fx->log_len += len;
        fx->log[fx->log_len] = '\0';
    }
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    snprintf(fx->path, sizeof(fx->path), "/tmp/crcr-allowlist-src-XXXXXX");
    int fd = mkstemp(fx->path);
    assert_true(fd >= 0);
    close(fd);
    write_file(fx->path, GOOD_V1);
    fx->cfg.allowlist_file = fx->path;
    fx->cfg.allowlist_ttl_s = 900;
    fx->cfg.dry_run = true;
    char err[256] = "";
    fx->src = allowlist_source_new(&fx->cfg, NULL, err, sizeof(err));
    if (!fx->src)
        fail_msg("allowlist_source_new: %s", err);
    log_set_level(CRCR_LOG_DEBUG);
    log_set_sink(log_sink, fx);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    log_set_sink(NULL, NULL);
    log_set_level(CRCR_LOG_INFO);
    allowlist_source_free(fx->src);
    unlink(fx->path);
    free(fx);
    return 0;
}

static crcr_level level_now(allowlist_source *src, const char *repo)
{
    allowlist *al = allowlist_source_get(src);
    crcr_level l = allowlist_level(al, repo);
    allowlist_free(al);
    return l;
}

static void test_nothing_is_loaded_before_load(void **state)
{
    fixture *fx = *state;
    assert_null(allowlist_source_get(fx->src));
    allowlist_status st;
    allowlist_source_status(fx->src, &st);
    assert_false(st.loaded);
    assert_int_equal(st.repos, 0);
    char want[128];
    snprintf(want, sizeof(want), "file:%s", fx->path);
    assert_string_equal(st.source, want);
}

static void test_file_source_loads(void **state)
{
    fixture *fx = *state;
    char err[512] = "unchanged";
    int64_t before = clock_now_ms();
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    int64_t after = clock_now_ms();
    allowlist *al = allowlist_source_get(fx->src);
    assert_non_null(al);
    assert_int_equal(allowlist_count(al), 2);
    assert_int_equal(allowlist_level(al, "example-org/two"), CRCR_LEVEL_L2);
    allowlist_free(al);

    allowlist_status st;
    allowlist_source_status(fx->src, &st);
    assert_true(st.loaded);
    assert_int_equal(st.repos, 2);
    assert_string_equal(st.last_error, "");
    assert_true(st.loaded_at >= before && st.loaded_at <= after);
    assert_true(st.last_attempt >= before && st.last_attempt <= after);
    assert_non_null(strstr(fx->log, "event=allowlist.loaded"));
    assert_non_null(strstr(fx->log, "repos=2"));
}

static void test_first_load_of_a_broken_file_fails_with_line_col(void **state)
{
    fixture *fx = *state;
    write_file(fx->path, BROKEN);
    char err[512] = "";
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_E_INVALID);
    char want[512];
    snprintf(want, sizeof(want),
             "%s:4:3: L3 must be a device mapping (e.g. 'device:\\n  org/repo: [oncall]'), got "
             "list",
             fx->path);
    assert_string_equal(err, want);
    assert_null(allowlist_source_get(fx->src));
    allowlist_status st;
    allowlist_source_status(fx->src, &st);
    assert_false(st.loaded);
    assert_string_equal(st.last_error, want);
    assert_non_null(strstr(fx->log, "event=allowlist.load_failed"));
}

static void test_missing_file_fails_with_the_reason(void **state)
{
    fixture *fx = *state;
    unlink(fx->path);
    char err[512] = "";
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_E_IO);
    char want[256];
    snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", fx->path);
    assert_string_equal(err, want);
    assert_null(allowlist_source_get(fx->src));
}

static void test_failed_reload_keeps_the_old_allowlist_and_sets_last_error(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    allowlist_status good;
    allowlist_source_status(fx->src, &good);

    write_file(fx->path, BROKEN);
    allowlist_source_reload(fx->src);
    allowlist_source_tick(fx->src, clock_now_ms());

    /* The old list is still in force... */
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_L2);
    allowlist_status st;
    allowlist_source_status(fx->src, &st);
    assert_true(st.loaded);
    assert_int_equal(st.repos, 2);
    assert_int_equal(st.loaded_at, good.loaded_at);
    assert_true(st.last_attempt >= good.last_attempt);
    /* ...and the failure is reported with where it is. */
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "%s:4:3: L3 must be a device mapping", fx->path);
    assert_true(strncmp(st.last_error, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(fx->log, "event=allowlist.refresh_failed"));
    assert_non_null(strstr(fx->log, "kept=previous"));

    /* A fixed file is picked up by the next reload and clears the error. */
    write_file(fx->path, GOOD_V2);
    allowlist_source_reload(fx->src);
    allowlist_source_tick(fx->src, clock_now_ms());
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_NONE);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_L4);
    allowlist_source_status(fx->src, &st);
    assert_string_equal(st.last_error, "");
    assert_int_equal(st.repos, 2);
}

static void test_tick_reloads_only_when_asked_or_after_the_ttl(void **state)
{
    fixture *fx = *state;
    char err[512];
    int64_t t0 = clock_now_ms();
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    write_file(fx->path, GOOD_V2);

    /* Not due: nothing happens, however often tick runs. */
    for (int i = 0; i < 3; i++)
        allowlist_source_tick(fx->src, t0 + 1000);
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_L2);

    /* reload() only sets a flag; the next tick does the work. */
    allowlist_source_reload(fx->src);
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_L2);
    allowlist_source_tick(fx->src, t0 + 2000);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_L4);

    /* The flag is consumed: the next change waits for the TTL (900 s after that load). */
    write_file(fx->path, GOOD_V1);
    allowlist_source_tick(fx->src, t0 + 3000);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_L4);
    allowlist_source_tick(fx->src, t0 + 2000 + 899 * 1000);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_L4);
    allowlist_source_tick(fx->src, t0 + 2000 + 900 * 1000);
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_L2);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_NONE);
}

static void test_failed_refresh_is_retried_before_the_ttl(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    int64_t t0 = clock_now_ms();
    write_file(fx->path, BROKEN);
    allowlist_source_reload(fx->src);
    allowlist_source_tick(fx->src, t0);
    write_file(fx->path, GOOD_V2);
    /* 30 s after a failure, not 900 s. */
    allowlist_source_tick(fx->src, t0 + 29 * 1000);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_NONE);
    allowlist_source_tick(fx->src, t0 + 30 * 1000);
    assert_int_equal(level_now(fx->src, "example-org/four"), CRCR_LEVEL_L4);
}

static void test_a_reference_outlives_the_swap(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    allowlist *old = allowlist_source_get(fx->src);
    write_file(fx->path, GOOD_V2);
    allowlist_source_reload(fx->src);
    allowlist_source_tick(fx->src, clock_now_ms());
    /* The caller's reference still reads the old list (ASan would flag a freed one). */
    assert_int_equal(allowlist_level(old, "example-org/two"), CRCR_LEVEL_L2);
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_NONE);
    allowlist_free(old);
}

typedef struct reader_arg {
    allowlist_source *src;
    int failures;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    for (int i = 0; i < 20000; i++) {
        allowlist *al = allowlist_source_get(a->src);
        /* Either version is fine; a half-loaded or empty list is not. */
        if (!al || allowlist_level(al, "example-org/one") != CRCR_LEVEL_L1 ||
            allowlist_count(al) != 2)
            a->failures++;
        allowlist_free(al);
    }
    return NULL;
}

static void test_readers_never_see_a_half_loaded_list_during_reloads(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    log_set_sink(NULL, NULL);
    log_set_level(CRCR_LOG_OFF);
    reader_arg args[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (reader_arg){fx->src, 0};
        assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 200; i++) {
        write_file(fx->path, i % 2 ? GOOD_V1 : GOOD_V2);
        allowlist_source_reload(fx->src);
        allowlist_source_tick(fx->src, clock_now_ms());
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failures, 0);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Construction. */

static void test_new_needs_a_source_and_prefers_the_file(void **state)
{
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    char err[512] = "";
    assert_null(allowlist_source_new(&cfg, NULL, err, sizeof(err)));
    assert_string_equal(err, "ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required");

    cfg.allowlist_url = "https://example.com/not/a/blob";
    assert_null(allowlist_source_new(&cfg, NULL, err, sizeof(err)));
    assert_true(strncmp(err, "ALLOWLIST_URL: invalid GitHub blob URL", 38) == 0);

    /* A valid URL still needs a GitHub client. */
    cfg.allowlist_url = "https://github.com/o/r/blob/main/f.yml";
    assert_null(allowlist_source_new(&cfg, NULL, err, sizeof(err)));
    assert_string_equal(err, "ALLOWLIST_URL: needs a GitHub client");

    /* ALLOWLIST_FILE wins, even next to an invalid URL. */
    cfg.allowlist_url = "not a url";
    cfg.allowlist_file = "/some/where.yml";
    allowlist_source *src = allowlist_source_new(&cfg, NULL, err, sizeof(err));
    assert_non_null(src);
    allowlist_status st;
    allowlist_source_status(src, &st);
    assert_string_equal(st.source, "file:/some/where.yml");
    allowlist_source_free(src);
    allowlist_source_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blob_url_good_forms),
        cmocka_unit_test(test_blob_url_bad_forms),
        cmocka_unit_test(test_blob_url_error_never_echoes_credentials),
        cmocka_unit_test(test_blob_url_respects_caller_buffers),
        cmocka_unit_test_setup_teardown(test_nothing_is_loaded_before_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_source_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_load_of_a_broken_file_fails_with_line_col, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_missing_file_fails_with_the_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_failed_reload_keeps_the_old_allowlist_and_sets_last_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tick_reloads_only_when_asked_or_after_the_ttl, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_refresh_is_retried_before_the_ttl, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_reference_outlives_the_swap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_never_see_a_half_loaded_list_during_reloads,
                                        setup, teardown),
        cmocka_unit_test(test_new_needs_a_source_and_prefers_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
