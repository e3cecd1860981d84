/*
 * test_allowlist_source.c - where the allowlist comes from (src/relay/allowlist_source.c).
 *
 * ALLOWLIST_URL's blob URL, and the file source end to end: first load, refresh on TTL and on
 * reload(), a broken refresh keeping the last good allowlist, status and log events. Blob URLs and
 * the contents API themselves are test_gh_contents.c's; here a small in-process
 * fake contents API serves the URL source for the several-instances behaviour (lease, shared
 * copy in a SQLite store, stale copies, start-up with GitHub down).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allowlist_source.h"
#include "clock.h"
#include "log.h"
#include "store.h"
#include "ut_httpd.h"

/* ---------------------------------------------------------------------------------------- */
/* Blob URLs (gh_blob_url_parse: test_gh_contents.c). */

static void test_blob_url_is_parsed_as_allowlist_url(void **state)
{
    char owner_repo[141], ref[256], path[512], err[512];
    assert_int_equal(allowlist_parse_blob_url("https://github.com/o/r/blob/release%2F2.5/a/b.yml",
                                              owner_repo, sizeof(owner_repo), ref, sizeof(ref),
                                              path, sizeof(path), err, sizeof(err)),
                     0);
    assert_string_equal(owner_repo, "o/r");
    assert_string_equal(ref, "release/2.5");
    assert_string_equal(path, "a/b.yml");
    assert_int_equal(allowlist_parse_blob_url("https://github.com/o/r/tree/main/f", owner_repo,
                                              sizeof(owner_repo), ref, sizeof(ref), path,
                                              sizeof(path), err, sizeof(err)),
                     -1);
    assert_true(strncmp(err, "ALLOWLIST_URL: invalid GitHub blob URL", 38) == 0);
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

/* Reloads `text` over GOOD_V1 in force and checks that GOOD_V1 stays, with a status error
 * starting with the path and `want`. */
static void reload_is_refused(fixture *fx, const char *text, const char *want)
{
    write_file(fx->path, text);
    allowlist_source_reload(fx->src);
    allowlist_source_tick(fx->src, clock_now_ms());
    assert_int_equal(level_now(fx->src, "example-org/two"), CRCR_LEVEL_L2);
    allowlist_status st;
    allowlist_source_status(fx->src, &st);
    assert_true(st.loaded);
    assert_int_equal(st.repos, 2);
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s%s", fx->path, want);
    if (strncmp(st.last_error, prefix, strlen(prefix)) != 0)
        fail_msg("last_error '%s' does not start with '%s'", st.last_error, prefix);
}

/* Issue 14: a misspelt level (`l1:`) is an error, so a reload of it keeps the list in force. */
static void test_reload_with_an_unknown_key_keeps_the_old_allowlist(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    reload_is_refused(fx, "l1:\n  - example-org/one\nL2:\n  - example-org/two\n",
                      ":1:1: unknown top-level key 'l1': did you mean 'L1'?");
}

/* Issue 14: a new list that would take the relay from N > 0 repositories to none is refused
 * like a broken one (the previous list stays, the reason is in the status); a first load of an
 * empty list is allowed. */
static void test_a_reload_to_an_empty_list_is_refused(void **state)
{
    fixture *fx = *state;
    char err[512];
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    static const char *const empties[] = {"", "# all gone\n", "L1: []\nL2:\nL3: {}\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++)
        reload_is_refused(fx, empties[i],
                          ": the new allowlist has no repositories, the one in force has 2: "
                          "refused");
    assert_non_null(strstr(fx->log, "event=allowlist.refresh_failed"));

    /* A first load may be empty: a relay can start before its first downstream exists. */
    allowlist_source *fresh = allowlist_source_new(&fx->cfg, NULL, err, sizeof(err));
    assert_non_null(fresh);
    assert_int_equal(allowlist_source_load(fresh, err, sizeof(err)), CRCR_OK);
    allowlist_status st;
    allowlist_source_status(fresh, &st);
    assert_true(st.loaded);
    assert_int_equal(st.repos, 0);
    assert_string_equal(st.last_error, "");
    /* An empty list in force is replaced by a non-empty one as usual. */
    write_file(fx->path, GOOD_V2);
    allowlist_source_reload(fresh);
    allowlist_source_tick(fresh, clock_now_ms());
    allowlist_source_status(fresh, &st);
    assert_int_equal(st.repos, 2);
    allowlist_source_free(fresh);
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

/* ---------------------------------------------------------------------------------------- */
/* Several instances: the URL source against a fake contents API (support/ut_httpd.h on 127.0.0.1),
 * sources sharing one SQLite store file (each through its own connection, as two processes
 * would). Times are explicit `now` values near the real clock (start-up uses the real clock). */

#define SH_TTL_S 10
#define SH_TTL_MS (SH_TTL_S * 1000)
#define SH_URL "https://github.com/o/r/blob/main/list.yml"
#define SH_CONTENTS_PATH "/repos/o/r/contents/list.yml"

typedef struct fakegh {
    ut_httpd *srv;
    pthread_mutex_t mu;
    char text[4096];  /* the file served */
    unsigned version; /* its ETag is "v<version>" */
    bool down;        /* answer 503 */
    unsigned n_get;   /* contents requests */
    unsigned n_304;
} fakegh;

static void fake_handler(void *cls, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    fakegh *f = cls;
    const char *method = rq->method, *url = rq->path;
    const char *ref = ut_httpd_query(rq, "ref");
    const char *inm = ut_httpd_header(rq, "If-None-Match");
    unsigned status = 404;
    char etag[32] = "";
    char *body = NULL;
    pthread_mutex_lock(&f->mu);
    if (strcmp(method, "GET") == 0 && strcmp(url, SH_CONTENTS_PATH) == 0 && ref &&
        strcmp(ref, "main") == 0) {
        f->n_get++;
        snprintf(etag, sizeof(etag), "\"v%u\"", f->version);
        if (f->down) {
            status = 503;
        } else if (inm && strcmp(inm, etag) == 0) {
            status = 304;
            f->n_304++;
        } else {
            size_t n = strlen(f->text);
            unsigned char *b64 = malloc(4 * ((n + 2) / 3) + 1);
            body = malloc(4 * ((n + 2) / 3) + 128);
            if (b64 && body) {
                EVP_EncodeBlock(b64, (const unsigned char *)f->text, (int)n);
                snprintf(body, 4 * ((n + 2) / 3) + 128,
                         "{\"type\":\"file\",\"encoding\":\"base64\",\"content\":\"%s\"}", b64);
                status = 200;
            }
            free(b64);
        }
    }
    pthread_mutex_unlock(&f->mu);
    ut_httpd_reply(resp, status, body ? body : "");
    free(body);
    if (etag[0] && status != 503)
        ut_httpd_resp_header(resp, "ETag", etag);
}

static void fake_serve(fakegh *f, const char *text)
{
    pthread_mutex_lock(&f->mu);
    snprintf(f->text, sizeof(f->text), "%s", text);
    f->version++;
    pthread_mutex_unlock(&f->mu);
}

static void fake_down(fakegh *f, bool down)
{
    pthread_mutex_lock(&f->mu);
    f->down = down;
    pthread_mutex_unlock(&f->mu);
}

static unsigned fake_gets(fakegh *f)
{
    pthread_mutex_lock(&f->mu);
    unsigned n = f->n_get;
    pthread_mutex_unlock(&f->mu);
    return n;
}

#define SH_MAX 3

typedef struct shared_fx {
    fakegh f;
    char api[64];
    char db[64];
    crcr_config cfg;
    gh_client *gh;
    store *st[SH_MAX];
    allowlist_source *src[SH_MAX];
    char log[65536];
    size_t log_len;
} shared_fx;

static void shared_log_sink(const char *line, size_t len, void *ctx)
{
    shared_fx *x = ctx;
    if (x->log_len + len < sizeof(x->log)) {
        memcpy(x->log + x->log_len, line, len);
        x->log_len += len;
        x->log[x->log_len] = '\0';
    }
}

static int shared_setup(void **state)
{
    shared_fx *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    pthread_mutex_init(&x->f.mu, NULL);
    fake_serve(&x->f, GOOD_V1);
    x->f.srv = ut_httpd_start(fake_handler, &x->f);
    snprintf(x->api, sizeof(x->api), "%s", ut_httpd_base(x->f.srv));

    snprintf(x->db, sizeof(x->db), "/tmp/crcr-allowlist-shared-XXXXXX");
    int fd = mkstemp(x->db);
    assert_true(fd >= 0);
    close(fd);
    char uri[96];
    snprintf(uri, sizeof(uri), "sqlite:%s", x->db);
    char err[256] = "";
    for (int i = 0; i < SH_MAX; i++)
        if (store_open(uri, &x->st[i], err, sizeof(err)) != CRCR_OK)
            fail_msg("store_open: %s", err);

    x->cfg.allowlist_url = SH_URL;
    x->cfg.allowlist_ttl_s = SH_TTL_S;
    x->cfg.github_api_url = x->api;
    x->cfg.dry_run = true;
    x->gh = gh_client_new(&x->cfg, err, sizeof(err));
    if (!x->gh)
        fail_msg("gh_client_new: %s", err);
    for (int i = 0; i < SH_MAX; i++) {
        x->src[i] = allowlist_source_new(&x->cfg, x->gh, err, sizeof(err));
        if (!x->src[i])
            fail_msg("allowlist_source_new: %s", err);
        char owner[16];
        snprintf(owner, sizeof(owner), "instance-%c", 'A' + i);
        allowlist_source_set_store(x->src[i], x->st[i], owner);
    }
    log_set_level(CRCR_LOG_DEBUG);
    log_set_sink(shared_log_sink, x);
    *state = x;
    return 0;
}

static int shared_teardown(void **state)
{
    shared_fx *x = *state;
    log_set_sink(NULL, NULL);
    log_set_level(CRCR_LOG_INFO);
    for (int i = 0; i < SH_MAX; i++) {
        allowlist_source_free(x->src[i]);
        store_close(x->st[i]);
    }
    gh_client_free(x->gh);
    ut_httpd_stop(x->f.srv);
    pthread_mutex_destroy(&x->f.mu);
    char side[96];
    unlink(x->db);
    snprintf(side, sizeof(side), "%s-wal", x->db);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", x->db);
    unlink(side);
    free(x);
    return 0;
}

static void load_ok(allowlist_source *src)
{
    char err[512] = "";
    crcr_err rc = allowlist_source_load(src, err, sizeof(err));
    if (rc != CRCR_OK)
        fail_msg("allowlist_source_load: %s", err);
}

static allowlist_status status_of(allowlist_source *src)
{
    allowlist_status st;
    allowlist_source_status(src, &st);
    return st;
}

/* Writes a copy by hand (the format is documented in allowlist_source.c). */
static void put_copy(store *st, const char *url, int64_t fetched_at, const char *text)
{
    char v[8192];
    int n = snprintf(v, sizeof(v),
                     "crcr-allowlist-copy 1\nurl: %s\netag: \"hand\"\nfetched_at: "
                     "%lld\n\n%s",
                     url, (long long)fetched_at, text);
    assert_true(n > 0 && (size_t)n < sizeof(v));
    assert_int_equal(store_kv_put(st, "allowlist:copy", v, (size_t)n, 0), CRCR_OK);
}

/* The copy's fetched_at (0 when there is none). */
static int64_t copy_fetched_at(store *st)
{
    buf_t v;
    buf_init(&v, 2u * 1024 * 1024);
    int64_t at = 0;
    if (store_kv_get(st, "allowlist:copy", &v, clock_now_ms()) == CRCR_OK) {
        const char *p = strstr(buf_cstr(&v), "\nfetched_at: ");
        if (p)
            at = strtoll(p + 13, NULL, 10);
    }
    buf_free(&v);
    return at;
}

static void test_shared_only_the_lease_holder_calls_github(void **state)
{
    shared_fx *x = *state;
    allowlist_source *a = x->src[0], *b = x->src[1];
    /* A starts first: no copy yet, it fetches, writes the copy and takes the lease. */
    load_ok(a);
    assert_int_equal(fake_gets(&x->f), 1);
    assert_string_equal(status_of(a).origin, "github");
    assert_non_null(strstr(x->log, "event=allowlist.loaded"));
    assert_non_null(strstr(x->log, "from=github"));
    /* B starts within the TTL: it takes the copy, GitHub sees nothing. */
    load_ok(b);
    assert_int_equal(fake_gets(&x->f), 1);
    allowlist_status sb = status_of(b);
    assert_true(sb.loaded);
    assert_int_equal(sb.repos, 2);
    assert_string_equal(sb.origin, "shared_copy");
    assert_string_equal(sb.last_error, "");
    assert_non_null(strstr(x->log, "from=shared_copy"));
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);

    /* Five TTL periods with both ticking every second: one request per period, all by A, each
     * a 304 that also refreshes the copy's fetched_at. */
    int64_t t0 = clock_now_ms();
    for (int s = 1; s <= 5 * SH_TTL_S + 1; s++) {
        allowlist_source_tick(a, t0 + s * 1000);
        allowlist_source_tick(b, t0 + s * 1000);
    }
    assert_int_equal(fake_gets(&x->f), 1 + 5);
    pthread_mutex_lock(&x->f.mu);
    assert_int_equal(x->f.n_304, 5);
    pthread_mutex_unlock(&x->f.mu);
    assert_true(copy_fetched_at(x->st[2]) >= t0 + 5 * SH_TTL_MS);
    /* B read the copy and found it unchanged; its age follows the holder's confirmations. */
    sb = status_of(b);
    assert_string_equal(sb.last_error, "");
    assert_true(sb.loaded_at >= t0 + 4 * SH_TTL_MS);

    /* B alone, however often it ticks while A keeps the lease: no request. */
    unsigned before = fake_gets(&x->f);
    for (int s = 0; s < 10; s++)
        allowlist_source_tick(b, t0 + 5 * SH_TTL_MS + 2000 + s * 1000);
    assert_int_equal(fake_gets(&x->f), before);
}

static void test_shared_a_changed_copy_is_swapped_in(void **state)
{
    shared_fx *x = *state;
    allowlist_source *a = x->src[0], *b = x->src[1];
    load_ok(a);
    load_ok(b);
    int64_t t0 = clock_now_ms();
    fake_serve(&x->f, GOOD_V2);
    /* The holder's refresh is due one TTL after its start-up load and gets the new file. */
    allowlist_source_tick(a, t0 + SH_TTL_MS);
    assert_int_equal(level_now(a, "example-org/four"), CRCR_LEVEL_L4);
    assert_int_equal(fake_gets(&x->f), 2);
    /* B looks one slack (TTL/10) after the copy was due: the new list, from the copy. */
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_NONE);
    allowlist_source_tick(b, t0 + SH_TTL_MS + SH_TTL_MS / 10);
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_NONE);
    assert_int_equal(fake_gets(&x->f), 2);
    allowlist_status sb = status_of(b);
    assert_string_equal(sb.origin, "shared_copy");
    assert_int_equal(sb.repos, 2);
    const char *last = strstr(x->log, "from=shared_copy repos=2");
    assert_non_null(last);

    /* B now holds the copy's ETag: when it takes the lease over, an unchanged file is a 304. */
    allowlist_source_tick(b, t0 + 10 * SH_TTL_MS);
    assert_int_equal(fake_gets(&x->f), 3);
    pthread_mutex_lock(&x->f.mu);
    assert_int_equal(x->f.n_304, 1);
    pthread_mutex_unlock(&x->f.mu);
}

static void test_shared_a_bad_copy_keeps_the_old_list(void **state)
{
    shared_fx *x = *state;
    allowlist_source *a = x->src[0], *b = x->src[1];
    int64_t t0 = clock_now_ms();
    /* A holder that never lets go, so that B only ever reads the copy. */
    bool held = false;
    assert_int_equal(store_lease(x->st[0], "allowlist", "ghost", t0, 100 * SH_TTL_MS, &held),
                     CRCR_OK);
    assert_true(held);
    load_ok(a);
    load_ok(b);
    allowlist_status good = status_of(b);

    /* A copy whose text does not parse: the old list stays, the reason shows. */
    put_copy(x->st[0], SH_URL, t0, BROKEN);
    allowlist_source_tick(b, t0 + 2 * SH_TTL_MS);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);
    allowlist_status sb = status_of(b);
    assert_true(sb.loaded);
    assert_int_equal(sb.repos, 2);
    assert_int_equal(sb.loaded_at, good.loaded_at);
    const char *want = "shared copy of list.yml:4:3: L3 must be a device mapping";
    assert_true(strncmp(sb.last_error, want, strlen(want)) == 0);
    assert_non_null(strstr(x->log, "event=allowlist.refresh_failed"));
    assert_int_equal(fake_gets(&x->f), 1);

    /* Something that is not a copy at all: the same. */
    assert_int_equal(store_kv_put(x->st[0], "allowlist:copy", "garbage\n\nL1: []\n", 16, 0),
                     CRCR_OK);
    allowlist_source_tick(b, t0 + 4 * SH_TTL_MS);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);
    sb = status_of(b);
    assert_non_null(strstr(sb.last_error, "shared copy: not a copy this relay can read"));
    assert_int_equal(fake_gets(&x->f), 1);

    /* A good copy again clears the error. */
    put_copy(x->st[0], SH_URL, t0 + 5 * SH_TTL_MS, GOOD_V2);
    allowlist_source_tick(b, t0 + 6 * SH_TTL_MS);
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    assert_string_equal(status_of(b).last_error, "");
    assert_int_equal(status_of(b).loaded_at, t0 + 5 * SH_TTL_MS);

    /* A copy of another URL is ignored: B fetches for itself (and gets V1 back). */
    put_copy(x->st[0], "https://github.com/o/r/blob/main/other.yml", t0 + 7 * SH_TTL_MS, GOOD_V2);
    allowlist_source_tick(b, t0 + 7 * SH_TTL_MS);
    assert_int_equal(fake_gets(&x->f), 2);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);
    assert_string_equal(status_of(b).origin, "github");
}

static void test_shared_a_stale_copy_makes_an_instance_fetch_itself(void **state)
{
    shared_fx *x = *state;
    allowlist_source *b = x->src[1];
    int64_t t0 = clock_now_ms();
    /* Someone holds the lease but has not refreshed the copy for 3 TTLs less a second... */
    bool held = false;
    assert_int_equal(store_lease(x->st[0], "allowlist", "ghost", t0, 100 * SH_TTL_MS, &held),
                     CRCR_OK);
    assert_true(held);
    put_copy(x->st[0], SH_URL, t0 - SH_TTL_MS / 2, GOOD_V2);
    load_ok(b);
    assert_int_equal(fake_gets(&x->f), 0);
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    allowlist_source_tick(b, t0 + 3 * SH_TTL_MS - SH_TTL_MS / 2 - 1000);
    assert_int_equal(fake_gets(&x->f), 0);
    /* ...and a moment later the copy is too old: B fetches itself and shares what it got. */
    allowlist_source_tick(b, t0 + 3 * SH_TTL_MS);
    assert_int_equal(fake_gets(&x->f), 1);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);
    assert_non_null(strstr(x->log, "event=allowlist.copy_stale"));
    assert_int_equal(copy_fetched_at(x->st[2]), t0 + 3 * SH_TTL_MS);
    assert_string_equal(status_of(b).origin, "github");
}

static void test_shared_the_lease_moves_when_its_holder_stops(void **state)
{
    shared_fx *x = *state;
    allowlist_source *a = x->src[0], *b = x->src[1];
    load_ok(a);
    load_ok(b);
    int64_t t0 = clock_now_ms();
    allowlist_source_tick(a, t0 + SH_TTL_MS);
    allowlist_source_tick(b, t0 + SH_TTL_MS + SH_TTL_MS / 10);
    assert_int_equal(fake_gets(&x->f), 2);
    /* A is gone. Its lease (2 TTLs from its last refresh) still stands until t0 + 3 TTLs... */
    for (int s = 2; s <= 2 * SH_TTL_S; s++)
        allowlist_source_tick(b, t0 + SH_TTL_MS + s * 1000);
    assert_int_equal(fake_gets(&x->f), 2);
    /* ...then B takes it and fetches, before the copy is 3 TTLs old. */
    allowlist_source_tick(b, t0 + 3 * SH_TTL_MS + 1000);
    assert_int_equal(fake_gets(&x->f), 3);
    assert_null(strstr(x->log, "allowlist.copy_stale"));
    bool held = true;
    assert_int_equal(store_lease(x->st[2], "allowlist", "instance-A", t0 + 3 * SH_TTL_MS + 2000,
                                 SH_TTL_MS, &held),
                     CRCR_OK);
    assert_false(held);
}

static void test_shared_reload_fetches_at_once_and_the_others_follow(void **state)
{
    shared_fx *x = *state;
    allowlist_source *a = x->src[0], *b = x->src[1], *c = x->src[2];
    load_ok(a);
    load_ok(b);
    load_ok(c);
    assert_int_equal(fake_gets(&x->f), 1);
    int64_t t0 = clock_now_ms();
    fake_serve(&x->f, GOOD_V2);
    /* SIGHUP on B, which does not hold the lease: it fetches now. */
    allowlist_source_reload(b);
    allowlist_source_tick(b, t0 + 1000);
    assert_int_equal(fake_gets(&x->f), 2);
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    assert_int_equal(copy_fetched_at(x->st[0]), t0 + 1000);
    /* C follows on its next tick, from the copy. */
    allowlist_source_tick(c, t0 + SH_TTL_MS + SH_TTL_MS / 10);
    assert_int_equal(level_now(c, "example-org/four"), CRCR_LEVEL_L4);
    assert_string_equal(status_of(c).origin, "shared_copy");
    assert_int_equal(fake_gets(&x->f), 2);
    (void)a;
}

static void test_shared_start_with_github_down_uses_a_copy_of_any_age(void **state)
{
    shared_fx *x = *state;
    allowlist_source *b = x->src[1];
    fake_down(&x->f, true);
    int64_t fetched = clock_now_ms() - 3600 * 1000;
    put_copy(x->st[0], SH_URL, fetched, GOOD_V2);
    char err[512] = "";
    assert_int_equal(allowlist_source_load(b, err, sizeof(err)), CRCR_OK);
    assert_int_equal(fake_gets(&x->f), 1); /* the copy is old: it tried GitHub first */
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    allowlist_status sb = status_of(b);
    assert_true(sb.loaded); /* /readyz: ready, as with any list in force */
    assert_string_equal(sb.origin, "shared_copy");
    assert_int_equal(sb.loaded_at, fetched); /* crcr_allowlist_age_seconds shows the hour */
    assert_non_null(strstr(sb.last_error, "HTTP 503"));
    assert_non_null(strstr(sb.last_error, "the shared copy fetched 3600 s ago"));
    assert_non_null(strstr(x->log, "event=allowlist.stale_copy"));
    assert_non_null(strstr(x->log, "age_s=3600"));
    /* The failure did not replace the copy. */
    assert_int_equal(copy_fetched_at(x->st[2]), fetched);

    /* Without any copy, a start with GitHub down fails as before. */
    allowlist_source *c = x->src[2];
    assert_int_equal(store_kv_put(x->st[0], "allowlist:copy", "", 0, 1), CRCR_OK); /* expired */
    assert_int_not_equal(allowlist_source_load(c, err, sizeof(err)), CRCR_OK);
    assert_non_null(strstr(err, "HTTP 503"));
    assert_false(status_of(c).loaded);
}

static void test_shared_start_fetches_when_the_copy_is_older_than_the_ttl(void **state)
{
    shared_fx *x = *state;
    allowlist_source *b = x->src[1];
    put_copy(x->st[0], SH_URL, clock_now_ms() - SH_TTL_MS - 1000, GOOD_V2);
    load_ok(b);
    assert_int_equal(fake_gets(&x->f), 1);
    assert_int_equal(level_now(b, "example-org/two"), CRCR_LEVEL_L2);
    assert_string_equal(status_of(b).origin, "github");
    assert_true(copy_fetched_at(x->st[2]) > clock_now_ms() - 60 * 1000);
}

static void test_shared_store_failures_mean_fetching_as_alone(void **state)
{
    shared_fx *x = *state;
    allowlist_source *b = x->src[1];
    load_ok(b);
    assert_int_equal(fake_gets(&x->f), 1);
    /* The kv table disappears under the store: every lease and copy call fails. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(x->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE kv", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    fake_serve(&x->f, GOOD_V2);
    int64_t t0 = clock_now_ms();
    allowlist_source_tick(b, t0 + SH_TTL_MS);
    assert_int_equal(fake_gets(&x->f), 2);
    assert_int_equal(level_now(b, "example-org/four"), CRCR_LEVEL_L4);
    assert_string_equal(status_of(b).last_error, "");
}

static void test_a_file_source_ignores_the_store(void **state)
{
    fixture *fx = *state;
    char uri[96], err[256] = "";
    snprintf(uri, sizeof(uri), "sqlite:%s.db", fx->path);
    store *st = NULL;
    assert_int_equal(store_open(uri, &st, err, sizeof(err)), CRCR_OK);
    allowlist_source_set_store(fx->src, st, "x");
    assert_int_equal(allowlist_source_load(fx->src, err, sizeof(err)), CRCR_OK);
    assert_string_equal(status_of(fx->src).origin, "file");
    buf_t v;
    buf_init(&v, 1024);
    assert_int_equal(store_kv_get(st, "allowlist:copy", &v, clock_now_ms()), CRCR_E_NOT_FOUND);
    buf_free(&v);
    store_close(st);
    char side[128];
    snprintf(side, sizeof(side), "%s.db", fx->path);
    unlink(side);
    snprintf(side, sizeof(side), "%s.db-wal", fx->path);
    unlink(side);
    snprintf(side, sizeof(side), "%s.db-shm", fx->path);
    unlink(side);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blob_url_is_parsed_as_allowlist_url),
        cmocka_unit_test_setup_teardown(test_nothing_is_loaded_before_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_source_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_load_of_a_broken_file_fails_with_line_col, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_missing_file_fails_with_the_reason, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_failed_reload_keeps_the_old_allowlist_and_sets_last_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_with_an_unknown_key_keeps_the_old_allowlist,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reload_to_an_empty_list_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tick_reloads_only_when_asked_or_after_the_ttl, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_refresh_is_retried_before_the_ttl, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_reference_outlives_the_swap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_never_see_a_half_loaded_list_during_reloads,
                                        setup, teardown),
        cmocka_unit_test(test_new_needs_a_source_and_prefers_the_file),
        cmocka_unit_test_setup_teardown(test_a_file_source_ignores_the_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_only_the_lease_holder_calls_github,
                                        shared_setup, shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_a_changed_copy_is_swapped_in, shared_setup,
                                        shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_a_bad_copy_keeps_the_old_list, shared_setup,
                                        shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_a_stale_copy_makes_an_instance_fetch_itself,
                                        shared_setup, shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_the_lease_moves_when_its_holder_stops,
                                        shared_setup, shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_reload_fetches_at_once_and_the_others_follow,
                                        shared_setup, shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_start_with_github_down_uses_a_copy_of_any_age,
                                        shared_setup, shared_teardown),
        cmocka_unit_test_setup_teardown(
            test_shared_start_fetches_when_the_copy_is_older_than_the_ttl, shared_setup,
            shared_teardown),
        cmocka_unit_test_setup_teardown(test_shared_store_failures_mean_fetching_as_alone,
                                        shared_setup, shared_teardown),
    };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
