/*
 * test_gh_contents.c - one file of a GitHub repository (src/github/gh_contents.c): blob URLs
 * accepted and refused (owner/repo rules, ref, path, percent-escapes, query and fragment, lengths,
 * what a message may echo), and gh_contents_fetch() against a fake contents API served on 127.0.0.1
 * by the unit tests' HTTP server (support/ut_httpd.h): base64 content with GitHub's line breaks,
 * the ETag and a 304, errors (404, no answer, answers that are not a file), a file over the
 * caller's cap, the path and ref escaped in the request, and the anonymous retry after a refused
 * token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>

#include "gh_contents.h"
#include "log.h"
#include "ut_httpd.h"

/* ---------------------------------------------------------------------------------------- */
/* Blob URLs. */

typedef struct blob {
    int rc;
    char owner_repo[141], ref[1100], path[1100], err[512];
} blob;

static blob parse_url(const char *url)
{
    blob b;
    memset(&b, 0, sizeof(b));
    b.rc = gh_blob_url_parse("CI_PROVIDERS_URL", url, b.owner_repo, sizeof(b.owner_repo), b.ref,
                             sizeof(b.ref), b.path, sizeof(b.path), b.err, sizeof(b.err));
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
    assert_blob("https://github.com//o/r/blob/main/f.yml//", "o/r", "main", "f.yml");
    assert_blob("https://github.com/o/r/blob/main/f.yml#L10?x", "o/r", "main", "f.yml");
    /* Scheme and host are case-insensitive; escapes are decoded (and re-encoded at fetch). */
    assert_blob("HTTPS://GitHub.com/o/r/blob/release%2F2.5/my%20dir/list%2Byml", "o/r",
                "release/2.5", "my dir/list+yml");
    assert_blob("https://github.com/o/r/blob/main/%41%62%e2%9c%93.yml", "o/r", "main",
                "Ab\xe2\x9c\x93.yml");
    /* The owner and repo rules: letters, digits, '-' (and '.', '_' in a repo), as GitHub. */
    assert_blob("https://github.com/A-1/r_e.p-0/blob/main/f", "A-1/r_e.p-0", "main", "f");
    assert_blob("https://github.com/o/.github/blob/main/f", "o/.github", "main", "f");
    char url[400], owner[40], repo[101];
    memset(owner, 'o', 39);
    owner[39] = '\0';
    memset(repo, 'r', 100);
    repo[100] = '\0';
    snprintf(url, sizeof(url), "https://github.com/%s/%s/blob/main/f", owner, repo);
    char want[150];
    snprintf(want, sizeof(want), "%s/%s", owner, repo);
    assert_blob(url, want, "main", "f");
}

static void assert_bad_url(const char *url, const char *reason)
{
    blob b = parse_url(url);
    if (b.rc == 0)
        fail_msg("expected %s to be refused", url ? url : "(null)");
    assert_int_equal(b.rc, -1);
    assert_true(strncmp(b.err, "CI_PROVIDERS_URL: invalid GitHub blob URL", 41) == 0);
    if (!strstr(b.err, reason))
        fail_msg("%s: expected '%s' in: %s", url ? url : "(null)", reason, b.err);
    const char *expected = "Expected: https://github.com/<owner>/<repo>/blob/<ref>/<path>";
    assert_string_equal(b.err + strlen(b.err) - strlen(expected), expected);
}

static void test_blob_url_bad_forms(void **state)
{
    static const char *cases[][2] = {
        {"", "empty"},
        {"github.com/o/r/blob/main/f", "no scheme"},
        {"https:/github.com/o/r/blob/main/f", "no scheme"},
        {"http://github.com/o/r/blob/main/f", "the scheme must be https"},
        {"ftp://github.com/o/r/blob/main/f", "the scheme must be https"},
        {"httpss://github.com/o/r/blob/main/f", "the scheme must be https"},
        {"https://gitlab.com/o/r/blob/main/f", "the host must be exactly github.com"},
        {"https://www.github.com/o/r/blob/main/f", "exactly github.com"},
        {"https://github.com.evil.example/o/r/blob/main/f", "exactly github.com"},
        {"https://github.com:443/o/r/blob/main/f", "exactly github.com"},
        {"https://raw.githubusercontent.com/o/r/main/f", "exactly github.com"},
        {"https://github.com", "fewer than 5 path parts"},
        {"https://github.com?o/r/blob/main/f", "fewer than 5 path parts"},
        {"https://github.com/o/r/blob/main", "fewer than 5 path parts"},
        {"https://github.com/o/r/blob/main/?f", "fewer than 5 path parts"},
        {"https://github.com/o/r/tree/main/f", "the third path part must be 'blob'"},
        {"https://github.com/o/r/raw/main/f", "the third path part must be 'blob'"},
        {"https://github.com/o/r/BLOB/main/f", "the third path part must be 'blob'"},
        {"https://github.com/o//r/blob/main/f", "an empty path part"},
        {"https://github.com/o/r/blob/main/a//b", "an empty path part"},
        {"https://github.com/my_org/r/blob/main/f", "not a valid owner/repo"},
        {"https://github.com/o/../blob/main/f", "not a valid owner/repo"},
        {"https://github.com/o/./blob/main/f", "not a valid owner/repo"},
        {"https://github.com/o/r%2Fx/blob/main/f", "not a valid owner/repo"},
        {"https://github.com/%6F/r/blob/main/f", "not a valid owner/repo"},
        {"https://github.com/o/r~x/blob/main/f", "not a valid owner/repo"},
        {"https://github.com/o/r/blob/main/../../orgs/x", "'.' and '..'"},
        {"https://github.com/o/r/blob/main/a/./b", "'.' and '..'"},
        {"https://github.com/o/r/blob/main/%2E%2E/x", "'.' and '..'"},
        {"https://github.com/o/r/blob/main/a%2Fb", "an encoded '/'"},
        {"https://github.com/o/r/blob/main/a%2fb", "an encoded '/'"},
        {"https://github.com/o/r/blob/main/a%zz", "bad percent-escape"},
        {"https://github.com/o/r/blob/main/a%4", "bad percent-escape"},
        {"https://github.com/o/r/blob/main/a%", "bad percent-escape"},
        {"https://github.com/o/r/blob/ma%g0in/f", "bad percent-escape"},
        {"https://github.com/o/r/blob/main/a%0Ab", "control characters"},
        {"https://github.com/o/r/blob/main/a%00b", "control characters"},
        {"https://github.com/o/r/blob/main/a%7Fb", "control characters"},
        {"https://github.com/o/r/blob/ma%09in/f", "control characters"},
        {"https://github.com/o/r/blob/main/a\tb", "control characters"},
    };
    assert_bad_url(NULL, "empty");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_bad_url(cases[i][0], cases[i][1]);
}

/* Builds "https://github.com/o/r/blob/<ref>/<path>" with a ref of `n` 'x's (and the path "f"), or
 * the ref "main" and a path of `parts` parts of `n` 'x's each. */
static void long_url(char *out, size_t outsz, bool in_ref, size_t n, size_t parts)
{
    buf_t b;
    buf_init(&b, outsz - 1);
    assert_int_equal(buf_puts(&b, "https://github.com/o/r/blob/"), CRCR_OK);
    for (size_t i = 0; in_ref && i < n; i++)
        assert_int_equal(buf_putc(&b, 'x'), CRCR_OK);
    assert_int_equal(buf_puts(&b, in_ref ? "/f" : "main"), CRCR_OK);
    for (size_t p = 0; !in_ref && p < parts; p++) {
        assert_int_equal(buf_putc(&b, '/'), CRCR_OK);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(buf_putc(&b, 'x'), CRCR_OK);
    }
    snprintf(out, outsz, "%s", buf_cstr(&b));
    buf_free(&b);
}

static void test_blob_url_lengths(void **state)
{
    char url[4096];
    /* A ref of CRCR_REF_MAX (1024) bytes fits, one more does not. */
    long_url(url, sizeof(url), true, 1024, 0);
    blob b = parse_url(url);
    assert_int_equal(b.rc, 0);
    assert_int_equal(strlen(b.ref), 1024);
    long_url(url, sizeof(url), true, 1025, 0);
    assert_bad_url(url, "a part is too long");
    /* A path of GH_BLOB_PATH_MAX bytes or more is refused, in one part or in several. */
    long_url(url, sizeof(url), false, GH_BLOB_PATH_MAX - 1, 1);
    assert_int_equal(parse_url(url).rc, 0);
    long_url(url, sizeof(url), false, GH_BLOB_PATH_MAX + 1, 1);
    assert_bad_url(url, "a part is too long");
    long_url(url, sizeof(url), false, 99, 11); /* 11 * 100 - 1 bytes */
    assert_bad_url(url, "the path is too long");
    /* At most 64 parts: owner, repo, "blob", ref and 60 path parts. */
    long_url(url, sizeof(url), false, 1, 60);
    assert_int_equal(parse_url(url).rc, 0);
    long_url(url, sizeof(url), false, 1, 61);
    assert_bad_url(url, "too many path parts");
    /* A URL over GH_BLOB_URL_MAX is refused without being echoed. */
    long_url(url, sizeof(url), false, 1100, 2);
    assert_true(strlen(url) > GH_BLOB_URL_MAX);
    b = parse_url(url);
    assert_int_equal(b.rc, -1);
    assert_non_null(strstr(b.err, "longer than 2048 bytes"));
    assert_null(strstr(b.err, "xxxxxxxx"));
}

static void test_blob_url_error_never_echoes_credentials(void **state)
{
    blob b = parse_url("https://user:ghp_secret123@github.com/o/r/blob/main/f");
    assert_int_equal(b.rc, -1);
    assert_null(strstr(b.err, "ghp_secret123"));
    assert_non_null(strstr(b.err, "exactly github.com"));
    b = parse_url("https://github.com/o/r/blob/main/f@ghp_secret456/%zz");
    assert_int_equal(b.rc, -1);
    assert_null(strstr(b.err, "ghp_secret456"));
    /* Without credentials the URL is named. */
    b = parse_url("https://gitlab.com/o/r/blob/main/f");
    assert_non_null(strstr(b.err, "'https://gitlab.com/o/r/blob/main/f'"));
    assert_true(strncmp(b.err, "CI_PROVIDERS_URL: ", 18) == 0);
}

/* GitHub Enterprise Server: blob URLs on the web host of GITHUB_API_URL (https://HOST/api/v3 ->
 * https://HOST), with its scheme, host and port exactly. */
static void test_blob_url_on_another_web_host(void **state)
{
    char owner_repo[141], ref[64], path[64], err[512];
    assert_int_equal(gh_blob_url_parse_on("ALLOWLIST_URL",
                                          "https://ghes.example.com/pytorch/pytorch/blob/main/"
                                          ".github/allow.yml",
                                          "https://ghes.example.com", owner_repo,
                                          sizeof(owner_repo), ref, sizeof(ref), path, sizeof(path),
                                          err, sizeof(err)),
                     0);
    assert_string_equal(owner_repo, "pytorch/pytorch");
    assert_string_equal(ref, "main");
    assert_string_equal(path, ".github/allow.yml");
    assert_int_equal(gh_blob_url_parse_on("X", "http://127.0.0.1:8123/o/r/blob/v1/a%20b.yml",
                                          "http://127.0.0.1:8123", owner_repo, sizeof(owner_repo),
                                          ref, sizeof(ref), path, sizeof(path), err, sizeof(err)),
                     0);
    assert_string_equal(path, "a b.yml");
    static const char *bad[] = {
        "https://github.com/o/r/blob/main/f",            /* github.com is not the GHES host */
        "http://ghes.example.com/o/r/blob/main/f",       /* the scheme differs */
        "https://ghes.example.com:8443/o/r/blob/main/f", /* the port differs */
        "https://ghes.example.com.evil/o/r/blob/main/f",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(gh_blob_url_parse_on("X", bad[i], "https://ghes.example.com", owner_repo,
                                              sizeof(owner_repo), ref, sizeof(ref), path,
                                              sizeof(path), err, sizeof(err)),
                         -1);
        if (!strstr(err, "not on GitHub's web host") ||
            !strstr(err, "Expected: https://ghes.example.com/<owner>/<repo>/blob/<ref>/<path>"))
            fail_msg("%s: %s", bad[i], err);
    }
    /* NULL is github.com, as gh_blob_url_parse. */
    assert_int_equal(gh_blob_url_parse_on("X", "https://github.com/o/r/blob/main/f", NULL,
                                          owner_repo, sizeof(owner_repo), ref, sizeof(ref), path,
                                          sizeof(path), err, sizeof(err)),
                     0);
}

static void test_blob_url_respects_caller_buffers(void **state)
{
    char owner_repo[4] = "", ref[64] = "", path[64] = "", err[256];
    assert_int_equal(gh_blob_url_parse("X", "https://github.com/owner/repo/blob/main/f", owner_repo,
                                       sizeof(owner_repo), ref, sizeof(ref), path, sizeof(path),
                                       err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "buffer"));
    /* Nothing is written on failure. */
    assert_string_equal(owner_repo, "");
    assert_string_equal(ref, "");
    char small_ref[4];
    assert_int_equal(gh_blob_url_parse("X", "https://github.com/o/r/blob/main/f", path,
                                       sizeof(path), small_ref, sizeof(small_ref), path,
                                       sizeof(path), err, sizeof(err)),
                     -1);
    char small_path[2];
    assert_int_equal(gh_blob_url_parse("X", "https://github.com/o/r/blob/main/ff", path,
                                       sizeof(path), ref, sizeof(ref), small_path,
                                       sizeof(small_path), err, sizeof(err)),
                     -1);
    /* The message is cut to the caller's buffer; none at all is fine. */
    char small_err[8];
    assert_int_equal(gh_blob_url_parse("X", "nope", owner_repo, sizeof(owner_repo), ref,
                                       sizeof(ref), path, sizeof(path), small_err,
                                       sizeof(small_err)),
                     -1);
    assert_int_equal(strlen(small_err), sizeof(small_err) - 1);
    assert_int_equal(gh_blob_url_parse("X", "nope", owner_repo, sizeof(owner_repo), ref,
                                       sizeof(ref), path, sizeof(path), NULL, 0),
                     -1);
}

/* ---------------------------------------------------------------------------------------- */
/* The fake contents API. */

#define FILE_PATH "/repos/o/r/contents/dir/list.yml"
#define INSTALLATION_PATH "/repos/o/r/installation"

typedef struct fake {
    pthread_mutex_t mu;
    /* What GET FILE_PATH?ref=main answers. */
    int status;
    char body[16384];
    char etag[64]; /* sent with 200 and compared with If-None-Match ("" for none) */
    /* What came. */
    unsigned n_requests;
    char path[512], ref[256], inm[512];
    bool had_inm, had_auth;
} fake;

typedef struct fixture {
    fake f;
    ut_httpd *srv;
    char api[64];
    crcr_config cfg;
    gh_client *gh;
    buf_t log;
} fixture;

static void json_answer(ut_httpd_resp *resp, unsigned status, const char *body)
{
    ut_httpd_reply(resp, status, body);
    ut_httpd_resp_header(resp, "Content-Type", "application/json");
}

static void fake_handler(void *ctx, const ut_httpd_req *req, ut_httpd_resp *resp)
{
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->n_requests++;
    const char *ref = ut_httpd_query(req, "ref");
    const char *inm = ut_httpd_header(req, "If-None-Match");
    snprintf(f->path, sizeof(f->path), "%s", req->path);
    snprintf(f->ref, sizeof(f->ref), "%s", ref ? ref : "(none)");
    f->had_inm = inm != NULL;
    snprintf(f->inm, sizeof(f->inm), "%s", inm ? inm : "");
    f->had_auth = ut_httpd_header(req, "Authorization") != NULL;
    if (strcmp(req->method, "GET") != 0) {
        ut_httpd_reply(resp, 405, "");
    } else if (strcmp(req->path, INSTALLATION_PATH) == 0) {
        json_answer(resp, 404, "{\"message\":\"Not Found\"}");
    } else if (strcmp(req->path, FILE_PATH) != 0 || !ref || strcmp(ref, "main") != 0) {
        json_answer(resp, 404, "{\"message\":\"Not Found\"}");
    } else if (f->etag[0] && inm && strcmp(inm, f->etag) == 0) {
        resp->status = 304;
    } else {
        json_answer(resp, (unsigned)f->status, f->body);
        if (f->etag[0])
            ut_httpd_resp_header(resp, "ETag", f->etag);
    }
    pthread_mutex_unlock(&f->mu);
}

/* The fake answers `status` with `body`. */
static void fake_answer(fixture *x, int status, const char *body)
{
    pthread_mutex_lock(&x->f.mu);
    x->f.status = status;
    snprintf(x->f.body, sizeof(x->f.body), "%s", body);
    pthread_mutex_unlock(&x->f.mu);
}

/* The fake serves `text` as GitHub does: base64 in lines of 60 characters, each ending in \n. */
static void fake_serve_file(fixture *x, const char *text, size_t n)
{
    unsigned char *b64 = malloc(4 * ((n + 2) / 3) + 1);
    assert_non_null(b64);
    int len = EVP_EncodeBlock(b64, (const unsigned char *)text, (int)n);
    buf_t body;
    buf_init(&body, sizeof(x->f.body) - 1);
    assert_int_equal(buf_puts(&body, "{\"type\":\"file\",\"encoding\":\"base64\",\"size\":"),
                     CRCR_OK);
    assert_int_equal(buf_printf(&body, "%zu,\"content\":\"", n), CRCR_OK);
    for (int i = 0; i < len; i += 60)
        assert_int_equal(buf_printf(&body, "%.*s\\n", len - i < 60 ? len - i : 60, b64 + i),
                         CRCR_OK);
    assert_int_equal(buf_puts(&body, "\"}"), CRCR_OK);
    fake_answer(x, 200, buf_cstr(&body));
    buf_free(&body);
    free(b64);
}

static void log_sink(const char *line, size_t len, void *ctx)
{
    buf_append(ctx, line, len);
}

static int fx_setup(void **state)
{
    fixture *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    pthread_mutex_init(&x->f.mu, NULL);
    x->srv = ut_httpd_start(fake_handler, &x->f);
    char err[256] = "";
    snprintf(x->api, sizeof(x->api), "%s", ut_httpd_base(x->srv));
    x->cfg.github_api_url = x->api;
    x->cfg.dry_run = true;
    x->gh = gh_client_new(&x->cfg, err, sizeof(err));
    if (!x->gh)
        fail_msg("gh_client_new: %s", err);
    buf_init(&x->log, 1024 * 1024);
    log_set_sink(log_sink, &x->log);
    *state = x;
    return 0;
}

static int fx_teardown(void **state)
{
    fixture *x = *state;
    log_set_sink(NULL, NULL);
    gh_client_free(x->gh);
    ut_httpd_stop(x->srv);
    pthread_mutex_destroy(&x->f.mu);
    buf_free(&x->log);
    free(x);
    return 0;
}

/* One fetch. */
typedef struct fetched {
    gh_contents_result res;
    crcr_err rc;
    buf_t text;
    char etag[GH_CONTENTS_ETAG_MAX];
    char why[512];
} fetched;

static void fetch(fixture *x, const gh_contents_req *q, fetched *out)
{
    buf_init(&out->text, 1024 * 1024);
    snprintf(out->etag, sizeof(out->etag), "untouched");
    out->why[0] = '\0';
    out->rc = CRCR_E_STATE; /* never an outcome of a fetch */
    out->res = gh_contents_fetch(q, &out->text, out->etag, sizeof(out->etag), &out->rc, out->why,
                                 sizeof(out->why));
    if (out->res != GH_CONTENTS_FAILED)
        assert_int_equal(out->rc, CRCR_OK);
    else
        assert_true(out->rc != CRCR_OK && strncmp(out->why, "contents API: ", 14) == 0);
}

static gh_contents_req req_of(fixture *x, size_t max)
{
    return (gh_contents_req){.gh = x->gh,
                             .anonymous = true,
                             .owner_repo = "o/r",
                             .ref = "main",
                             .path = "dir/list.yml",
                             .max = max,
                             .fallback_event = "test.contents_fallback"};
}

static const char TEXT[] = "L1:\n  - example-org/one # a comment long enough to need a second\n"
                           "  - example-org/two\nL2: [example-org/three]\n";

static void test_fetch_decodes_base64_content_and_keeps_the_etag(void **state)
{
    fixture *x = *state;
    snprintf(x->f.etag, sizeof(x->f.etag), "\"v1\"");
    fake_serve_file(x, TEXT, strlen(TEXT));
    gh_contents_req q = req_of(x, 4096);
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, strlen(TEXT));
    assert_memory_equal(r.text.data, TEXT, strlen(TEXT));
    assert_string_equal(r.etag, "\"v1\"");
    assert_int_equal(x->f.n_requests, 1);
    assert_string_equal(x->f.path, FILE_PATH);
    assert_string_equal(x->f.ref, "main");
    assert_false(x->f.had_inm);
    assert_false(x->f.had_auth);
    buf_free(&r.text);

    /* Binary content, NUL bytes included, comes whole; an empty file is a file. */
    static const char bin[] = {'a', '\0', '\xff', '\n', 'b'};
    fake_serve_file(x, bin, sizeof(bin));
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, sizeof(bin));
    assert_memory_equal(r.text.data, bin, sizeof(bin));
    buf_free(&r.text);
    fake_serve_file(x, "", 0);
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, 0);
    buf_free(&r.text);
}

static void test_fetch_with_the_current_etag_is_unchanged(void **state)
{
    fixture *x = *state;
    snprintf(x->f.etag, sizeof(x->f.etag), "W/\"abc123\"");
    fake_serve_file(x, TEXT, strlen(TEXT));
    gh_contents_req q = req_of(x, 4096);
    q.if_none_match = "W/\"abc123\"";
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_UNCHANGED);
    assert_int_equal(r.text.len, 0);
    assert_string_equal(r.etag, "untouched");
    assert_true(x->f.had_inm);
    assert_string_equal(x->f.inm, "W/\"abc123\"");
    buf_free(&r.text);

    /* Another ETag: the new copy and its ETag. */
    q.if_none_match = "\"old\"";
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_string_equal(r.etag, "W/\"abc123\"");
    assert_string_equal(x->f.inm, "\"old\"");
    buf_free(&r.text);

    /* An empty ETag, or one too long to be one GitHub sent, is not sent. */
    q.if_none_match = "";
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_false(x->f.had_inm);
    buf_free(&r.text);
    char long_tag[GH_CONTENTS_ETAG_MAX + 1];
    memset(long_tag, 'e', sizeof(long_tag) - 1);
    long_tag[sizeof(long_tag) - 1] = '\0';
    q.if_none_match = long_tag;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_false(x->f.had_inm);
    buf_free(&r.text);

    /* No ETag in the answer: none kept. */
    x->f.etag[0] = '\0';
    q.if_none_match = NULL;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_string_equal(r.etag, "");
    buf_free(&r.text);
}

static void test_a_file_over_the_cap_comes_as_cap_plus_one_bytes(void **state)
{
    fixture *x = *state;
    char big[3000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    fake_serve_file(x, big, sizeof(big));
    gh_contents_req q = req_of(x, 100);
    fetched r;
    fetch(x, &q, &r);
    /* The caller's parser reports the size: it sees more than `max` bytes, not the whole file. */
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, 101);
    assert_memory_equal(r.text.data, big, 101);
    buf_free(&r.text);
    /* Exactly at the cap: the whole file. */
    q.max = sizeof(big);
    fetch(x, &q, &r);
    assert_int_equal(r.text.len, sizeof(big));
    buf_free(&r.text);

    /* A file GitHub does not serve inline (over 1 MB). */
    fake_answer(x, 200,
                "{\"type\":\"file\",\"encoding\":\"none\",\"content\":\"\",\"size\":5000000}");
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_FAILED);
    assert_int_equal(r.rc, CRCR_E_TOO_LARGE);
    assert_string_equal(r.why, "contents API: the file is too large to be served inline");
    buf_free(&r.text);
}

static void test_answers_that_are_not_a_base64_file_fail(void **state)
{
    fixture *x = *state;
    static const struct {
        const char *body, *why;
    } cases[] = {
        /* The raw file instead of the JSON document. */
        {"L1:\n  - example-org/one\n", "contents API: invalid JSON"},
        {"[{\"type\":\"file\",\"name\":\"a.yml\"}]",
         "contents API: the path is a directory, not a file"},
        {"\"text\"", "contents API: expected a JSON object"},
        {"{\"type\":\"symlink\",\"target\":\"x\"}", "contents API: the path is a symlink, not a "
                                                    "file"},
        {"{\"type\":\"file\",\"encoding\":\"utf-8\",\"content\":\"L1: []\"}",
         "contents API: expected base64 content"},
        {"{\"type\":\"file\",\"content\":\"TDE6IFtdCg==\"}",
         "contents API: expected base64 content"},
        {"{\"type\":\"file\",\"encoding\":\"base64\",\"content\":42}",
         "contents API: expected base64 content"},
        {"{\"type\":\"file\",\"encoding\":\"base64\",\"content\":\"TDE6I@@@\"}",
         "contents API: invalid base64 content"},
        {"{\"type\":\"file\",\"encoding\":\"base64\",\"content\":\"TD=6IFtdCg==\"}",
         "contents API: invalid base64 content"},
        {"{\"type\":\"file\",\"encoding\":\"base64\",\"content\":\"TDE6IFtdCg\"}",
         "contents API: invalid base64 content"},
        {"{\"type\":\"file\",\"encoding\":\"base64\",\"content\":\"TDE6IFtdC===\"}",
         "contents API: invalid base64 content"},
    };
    gh_contents_req q = req_of(x, 4096);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_answer(x, 200, cases[i].body);
        fetched r;
        fetch(x, &q, &r);
        if (r.res != GH_CONTENTS_FAILED || strncmp(r.why, cases[i].why, strlen(cases[i].why)))
            fail_msg("%s: got %d '%s', want '%s'", cases[i].body, (int)r.res, r.why, cases[i].why);
        assert_int_equal(r.rc, CRCR_E_INVALID);
        assert_int_equal(r.text.len, 0);
        buf_free(&r.text);
    }
    /* Without a type the document is taken for a file. */
    fake_answer(x, 200, "{\"encoding\":\"base64\",\"content\":\"TDE6IFtdCg==\"}");
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, 7);
    assert_memory_equal(r.text.data, "L1: []\n", 7);
    buf_free(&r.text);
}

static void test_http_errors_and_no_answer_fail(void **state)
{
    fixture *x = *state;
    gh_contents_req q = req_of(x, 4096);
    q.path = "missing.yml";
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_FAILED);
    assert_int_equal(r.rc, CRCR_E_HTTP);
    assert_true(strncmp(r.why, "contents API: HTTP 404", 22) == 0);
    assert_string_equal(r.etag, "untouched");
    buf_free(&r.text);

    fake_answer(x, 503, "{\"message\":\"unavailable\"}");
    q.path = "dir/list.yml";
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_FAILED);
    assert_int_equal(r.rc, CRCR_E_HTTP);
    assert_true(strncmp(r.why, "contents API: HTTP 503", 22) == 0);
    buf_free(&r.text);

    /* Nobody listening: no answer at all. */
    ut_httpd_stop(x->srv);
    x->srv = NULL;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_FAILED);
    assert_int_equal(r.rc, CRCR_E_NETWORK);
    buf_free(&r.text);
}

static void test_path_and_ref_are_escaped(void **state)
{
    fixture *x = *state;
    fake_serve_file(x, TEXT, strlen(TEXT));
    /* Without escaping, '?' and '#' would end the path, '&' the ref and %41 would arrive as 'A'. */
    gh_contents_req q = req_of(x, 4096);
    q.path = "my dir/100%41 a?b#c+d.yml";
    q.ref = "rel/1.0&x=y #z";
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_FAILED); /* the fake knows only FILE_PATH */
    assert_string_equal(x->f.path, "/repos/o/r/contents/my dir/100%41 a?b#c+d.yml");
    assert_string_equal(x->f.ref, "rel/1.0&x=y #z");
    buf_free(&r.text);
}

/* ---------------------------------------------------------------------------------------- */
/* With App credentials: the installation token is refused, the public file is read anyway. */

static char *rsa_pem(void)
{
    EVP_PKEY *pk = EVP_RSA_gen(2048);
    assert_non_null(pk);
    BIO *bio = BIO_new(BIO_s_mem());
    assert_non_null(bio);
    assert_int_equal(PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL), 1);
    char *data = NULL;
    long n = BIO_get_mem_data(bio, &data);
    char *out = malloc((size_t)n + 1);
    assert_non_null(out);
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    BIO_free(bio);
    EVP_PKEY_free(pk);
    return out;
}

static void test_a_refused_token_falls_back_to_an_anonymous_read(void **state)
{
    fixture *x = *state;
    char *pem = rsa_pem();
    crcr_config cfg = x->cfg;
    cfg.app_id = "12345";
    cfg.private_key_pem = pem;
    cfg.dry_run = false;
    char err[256] = "";
    gh_client *app = gh_client_new(&cfg, err, sizeof(err));
    if (!app)
        fail_msg("gh_client_new: %s", err);
    fake_serve_file(x, TEXT, strlen(TEXT));
    gh_contents_req q = req_of(x, 4096);
    q.gh = app;
    q.anonymous = false;
    fetched r;
    fetch(x, &q, &r);
    assert_int_equal(r.res, GH_CONTENTS_NEW);
    assert_int_equal(r.text.len, strlen(TEXT));
    /* The installation lookup (404: the App is not installed there), then the file without a
     * token. */
    assert_int_equal(x->f.n_requests, 2);
    assert_string_equal(x->f.path, FILE_PATH);
    assert_false(x->f.had_auth);
    const char *logs = buf_cstr(&x->log);
    assert_non_null(strstr(logs, "event=test.contents_fallback"));
    assert_non_null(strstr(logs, "repo=o/r"));
    assert_null(strstr(logs, "BEGIN"));
    buf_free(&r.text);
    gh_client_free(app);
    free(pem);
}

static int group_setup(void **state)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blob_url_good_forms),
        cmocka_unit_test(test_blob_url_bad_forms),
        cmocka_unit_test(test_blob_url_lengths),
        cmocka_unit_test(test_blob_url_error_never_echoes_credentials),
        cmocka_unit_test(test_blob_url_on_another_web_host),
        cmocka_unit_test(test_blob_url_respects_caller_buffers),
        cmocka_unit_test_setup_teardown(test_fetch_decodes_base64_content_and_keeps_the_etag,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_fetch_with_the_current_etag_is_unchanged, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_file_over_the_cap_comes_as_cap_plus_one_bytes,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_answers_that_are_not_a_base64_file_fail, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_http_errors_and_no_answer_fail, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_path_and_ref_are_escaped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_a_refused_token_falls_back_to_an_anonymous_read,
                                        fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
