/*
 * test_oidc.c - GitHub Actions OIDC verification (oidc.c) against a real JWKS endpoint: the unit
 * tests' HTTP server (support/ut_httpd.h) on 127.0.0.1 serves /.well-known/jwks, counts fetches and
 * can swap its key set (rotation) or fail. Tokens are signed here with freshly generated RSA keys.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include <curl/curl.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "buf.h"
#include "json.h"
#include "jwt.h"
#include "log.h"
#include "oidc.h"
#include "oidc_cache.h"
#include "ut_httpd.h"

#define AUD "pytorch-cross-repo-ci-relay"
#define NOW ((int64_t)1700000000)

static EVP_PKEY *g_k1;   /* published as kid "k1" */
static EVP_PKEY *g_k2;   /* published as kid "k2" after a rotation */
static EVP_PKEY *g_evil; /* never published under the kid it claims */

/* ---------------------------------------------------------------- captured log lines */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static buf_t g_log;

static void log_capture(const char *line, size_t len, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&g_log_mu);
    buf_append(&g_log, line, len);
    pthread_mutex_unlock(&g_log_mu);
}

/* ---------------------------------------------------------------- JWKS server */

typedef struct jwks_server {
    ut_httpd *srv;   /* NULL once stopped */
    char issuer[64]; /* http://127.0.0.1:<port> */
    pthread_mutex_t mu;
    char *body; /* current JWKS document (owned), guarded by mu */
    int status; /* HTTP status answered, guarded by mu */
    atomic_int fetches;
} jwks_server;

static void on_request(void *cls, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    jwks_server *s = cls;
    if (strcmp(rq->method, "GET") == 0 && strcmp(rq->path, "/.well-known/jwks") == 0) {
        atomic_fetch_add(&s->fetches, 1);
        pthread_mutex_lock(&s->mu);
        ut_httpd_reply(resp, (unsigned)s->status, s->body);
        pthread_mutex_unlock(&s->mu);
    } else {
        ut_httpd_reply(resp, 404, "");
    }
    ut_httpd_resp_header(resp, "Content-Type", "application/json");
}

/* Starts a server on 127.0.0.1 with an ephemeral port serving `body` (copied). */
static jwks_server *server_start(const char *body)
{
    jwks_server *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    pthread_mutex_init(&s->mu, NULL);
    s->body = strdup(body);
    s->status = 200;
    s->srv = ut_httpd_start(on_request, s);
    snprintf(s->issuer, sizeof(s->issuer), "%s", ut_httpd_base(s->srv));
    return s;
}

static void server_set(jwks_server *s, const char *body, int status)
{
    pthread_mutex_lock(&s->mu);
    if (body) {
        free(s->body);
        s->body = strdup(body);
    }
    s->status = status;
    pthread_mutex_unlock(&s->mu);
}

/* Stops the listener (the port then refuses connections) but keeps the record. */
static void server_stop(jwks_server *s)
{
    ut_httpd_stop(s->srv);
    s->srv = NULL;
}

static void server_free(jwks_server *s)
{
    if (!s)
        return;
    server_stop(s);
    free(s->body);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---------------------------------------------------------------- keys and tokens */

/* The base64url modulus or exponent of an RSA key, appended to `out`. */
static void rsa_param_b64(EVP_PKEY *k, const char *name, buf_t *out)
{
    BIGNUM *bn = NULL;
    assert_int_equal(EVP_PKEY_get_bn_param(k, name, &bn), 1);
    unsigned char bin[1024];
    int n = BN_bn2bin(bn, bin);
    assert_true(n > 0);
    assert_int_equal(jwt_b64url_encode(bin, (size_t)n, out), CRCR_OK);
    BN_free(bn);
}

/* Appends a JWK for `k` with kid `kid` (none when NULL) and extra members `extra` (",..." or
 * ""). */
static void jwk_append(buf_t *out, EVP_PKEY *k, const char *kid, const char *extra)
{
    buf_puts(out, "{\"kty\":\"RSA\"");
    if (kid)
        buf_printf(out, ",\"kid\":\"%s\"", kid);
    buf_puts(out, ",\"n\":\"");
    rsa_param_b64(k, OSSL_PKEY_PARAM_RSA_N, out);
    buf_puts(out, "\",\"e\":\"");
    rsa_param_b64(k, OSSL_PKEY_PARAM_RSA_E, out);
    buf_printf(out, "\"%s}", extra);
}

/* A JWKS document with the given keys; `kids[i]` names `keys[i]`. Caller frees. */
static char *jwks_doc(size_t n, EVP_PKEY *const *keys, const char *const *kids)
{
    buf_t b;
    buf_init(&b, OIDC_JWKS_MAX_BYTES);
    buf_puts(&b, "{\"keys\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(&b, ',');
        jwk_append(&b, keys[i], kids[i], ",\"alg\":\"RS256\",\"use\":\"sig\"");
    }
    buf_puts(&b, "]}");
    return buf_detach(&b, NULL);
}

static char *jwks_k1(void)
{
    EVP_PKEY *keys[] = {g_k1};
    const char *kids[] = {"k1"};
    return jwks_doc(1, keys, kids);
}

/* "<b64 header>.<b64 claims>.<b64 RS256 signature>" over arbitrary header text. Caller frees. */
static char *sign_with_header(EVP_PKEY *k, const char *header, const char *claims)
{
    buf_t out;
    buf_init(&out, CRCR_JWT_MAX);
    assert_int_equal(jwt_b64url_encode(header, strlen(header), &out), CRCR_OK);
    assert_int_equal(buf_putc(&out, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode(claims, strlen(claims), &out), CRCR_OK);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char sig[1024];
    size_t siglen = sizeof(sig);
    assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k), 1);
    assert_int_equal(EVP_DigestSign(md, sig, &siglen, (const unsigned char *)out.data, out.len), 1);
    EVP_MD_CTX_free(md);
    assert_int_equal(buf_putc(&out, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode(sig, siglen, &out), CRCR_OK);
    return buf_detach(&out, NULL);
}

/* An RS256 token signed by `k` whose header names `kid` (no kid member when NULL). */
static char *sign_token(EVP_PKEY *k, const char *kid, const char *claims)
{
    char header[128];
    if (kid)
        snprintf(header, sizeof(header), "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"%s\"}", kid);
    else
        snprintf(header, sizeof(header), "{\"alg\":\"RS256\",\"typ\":\"JWT\"}");
    return sign_with_header(k, header, claims);
}

/* Claims like GitHub's, with `iss`, and exp/iat/nbf relative to NOW. `extra` (",...") is
 * appended inside the object and `aud` is the raw JSON value of "aud". Caller frees. */
static char *claims_full(const char *iss, const char *aud, int64_t exp_off, const char *extra)
{
    buf_t b;
    buf_init(&b, 8192);
    buf_printf(&b,
               "{\"jti\":\"6f3c-11ee\",\"sub\":\"repo:pytorch/vllm-ci:ref:refs/heads/main\","
               "\"aud\":%s,\"ref\":\"refs/heads/main\",\"repository\":\"pytorch/vllm-ci\","
               "\"repository_id\":\"123456789\",\"repository_owner_id\":\"21003710\","
               "\"event_name\":\"push\",\"iss\":\"%s\",\"nbf\":%lld,\"exp\":%lld,\"iat\":%lld%s}",
               aud, iss, (long long)(NOW - 5), (long long)(NOW + exp_off), (long long)(NOW - 5),
               extra);
    return buf_detach(&b, NULL);
}

static char *claims_ok(const char *iss)
{
    return claims_full(iss, "\"" AUD "\"", 300, "");
}

/* "Bearer <token>" (caller frees). */
static char *bearer(const char *token)
{
    size_t n = strlen(token) + 8;
    char *h = malloc(n);
    assert_non_null(h);
    snprintf(h, n, "Bearer %s", token);
    return h;
}

/* ---------------------------------------------------------------- fixture */

typedef struct fixture {
    jwks_server *srv;
    oidc_verifier *v;
} fixture;

static oidc_verifier *verifier_for(const char *issuer)
{
    char err[256] = "";
    const char *iss[] = {issuer};
    oidc_verifier *v = oidc_new(iss, 1, AUD, err, sizeof(err));
    assert_non_null(v);
    return v;
}

static int fx_setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    char *doc = jwks_k1();
    f->srv = server_start(doc);
    free(doc);
    f->v = verifier_for(f->srv->issuer);
    pthread_mutex_lock(&g_log_mu);
    buf_reset(&g_log);
    pthread_mutex_unlock(&g_log_mu);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fixture *f = *state;
    oidc_free(f->v);
    server_free(f->srv);
    free(f);
    return 0;
}

/* Verifies `header` at `now`; returns the status and leaves the reason in `reason`. Also checks
 * what must hold for every answer. */
static int check(fixture *f, const char *header, int64_t now, oidc_identity *id, char *reason,
                 size_t reasonsz)
{
    int rc = oidc_verify(f->v, header, now, id, reason, reasonsz);
    if (rc != 0) {
        if (rc != 503) /* the issuer's keys could not be had: see the JWKS outage tests */
            assert_int_equal(rc, 401);
        assert_true(reason[0] != '\0');
        assert_string_equal(id->repository, "");
    }
    return rc;
}

static uint64_t fetches(fixture *f)
{
    uint64_t n = 0;
    oidc_stats(f->v, &n, NULL, NULL);
    assert_int_equal(n, (uint64_t)atomic_load(&f->srv->fetches));
    return n;
}

/* Signs `claims` with k1 (kid k1) and expects `want_rc` and, when given, the reason. */
static void expect_claims(fixture *f, const char *claims, int64_t now, int want_rc,
                          const char *want_reason)
{
    char *tok = sign_token(g_k1, "k1", claims);
    char *h = bearer(tok);
    oidc_identity id;
    char reason[256];
    assert_int_equal(check(f, h, now, &id, reason, sizeof(reason)), want_rc);
    if (want_reason)
        assert_string_equal(reason, want_reason);
    assert_null(strstr(reason, tok));
    free(h);
    free(tok);
}

/* ---------------------------------------------------------------- accepted tokens */

static void test_valid_token_is_accepted_and_identity_copied(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_k1, "k1", claims);
    char *h = bearer(tok);
    oidc_identity id;
    char reason[128] = "junk";
    assert_int_equal(check(f, h, NOW, &id, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "");
    assert_string_equal(id.repository, "pytorch/vllm-ci");
    assert_string_equal(id.repository_id, "123456789");
    assert_string_equal(id.repository_owner_id, "21003710");
    assert_string_equal(id.issuer, f->srv->issuer);
    assert_string_equal(id.jti, "6f3c-11ee");
    assert_string_equal(id.event_name, "push");
    assert_int_equal(id.exp, NOW + 300);
    uint64_t nf, ok, bad;
    oidc_stats(f->v, &nf, &ok, &bad);
    assert_int_equal(nf, 1);
    assert_int_equal(ok, 1);
    assert_int_equal(bad, 0);
    /* The second token is served from the cache. */
    assert_int_equal(check(f, h, NOW + 1, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 1);
    free(h);
    free(tok);
    free(claims);
}

static void test_bearer_prefix_any_case_and_blanks_are_accepted(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_k1, "k1", claims);
    const char *forms[][2] = {
        {"bearer ", ""}, {"BEARER ", ""}, {"  Bearer \t ", "  "}, {"", ""}, {"\t", " "}};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        char h[4096];
        snprintf(h, sizeof(h), "%s%s%s", forms[i][0], tok, forms[i][1]);
        oidc_identity id;
        char reason[128];
        assert_int_equal(check(f, h, NOW, &id, reason, sizeof(reason)), 0);
        assert_string_equal(id.repository, "pytorch/vllm-ci");
    }
    free(tok);
    free(claims);
}

static void test_expired_within_leeway_is_accepted(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", -60, "");
    expect_claims(f, claims, NOW, 0, "");
    free(claims);
}

static void test_audience_array_containing_audience_is_accepted(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "[\"other\",\"" AUD "\"]", 300, "");
    expect_claims(f, claims, NOW, 0, "");
    free(claims);
}

static void test_numeric_ids_are_copied_as_decimal(void **state)
{
    fixture *f = *state;
    char claims[1024];
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":%lld,\"repository\":\"a/b\","
             "\"repository_id\":9007199254740993,\"repository_owner_id\":7}",
             f->srv->issuer, (long long)(NOW + 60));
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_string_equal(id.repository_id, "9007199254740993");
    assert_string_equal(id.repository_owner_id, "7");
    assert_string_equal(id.jti, "");
    assert_string_equal(id.event_name, "");
    free(tok);
}

static void test_token_without_kid_is_checked_against_every_key(void **state)
{
    fixture *f = *state;
    EVP_PKEY *keys[] = {g_k1, g_k2};
    const char *kids[] = {"k1", "k2"};
    char *doc = jwks_doc(2, keys, kids);
    server_set(f->srv, doc, 200);
    char *claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_k2, NULL, claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    free(tok);
    /* Signed by a key the issuer never published: no key matches. */
    tok = sign_token(g_evil, NULL, claims);
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    assert_int_equal(fetches(f), 1);
    free(tok);
    free(claims);
    free(doc);
}

static void test_issuer_trailing_slash_is_ignored_on_both_sides(void **state)
{
    fixture *f = *state;
    char iss_slash[80];
    snprintf(iss_slash, sizeof(iss_slash), "%s/", f->srv->issuer);
    /* Configured without '/', token with '/'. */
    char *claims = claims_ok(iss_slash);
    expect_claims(f, claims, NOW, 0, "");
    free(claims);
    /* Configured with '/', token without; the JWKS URL has no double slash. */
    oidc_verifier *v2 = verifier_for(iss_slash);
    claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(oidc_verify(v2, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_string_equal(id.issuer, f->srv->issuer);
    oidc_free(v2);
    free(tok);
    free(claims);
}

/* ---------------------------------------------------------------- rejected headers and tokens */

static void test_missing_header_is_rejected(void **state)
{
    fixture *f = *state;
    const char *headers[] = {NULL, "", "   ", "Bearer", "Bearer ", "bearer \t "};
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        oidc_identity id;
        char reason[128];
        assert_int_equal(check(f, headers[i], NOW, &id, reason, sizeof(reason)), 401);
        assert_string_equal(reason, "Missing authorization token");
    }
    assert_int_equal(fetches(f), 0);
}

static void test_garbage_is_rejected_without_fetching(void **state)
{
    fixture *f = *state;
    const char *headers[] = {"Bearer abc",
                             "Bearer a.b.c",
                             "Bearer ..",
                             "Basic dXNlcjpwYXNz",
                             "Bearer eyJhbGciOiJSUzI1NiJ9.eyJ9.AAAA",
                             "Bearer e30.e30.e30.e30"};
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        oidc_identity id;
        char reason[128];
        assert_int_equal(check(f, headers[i], NOW, &id, reason, sizeof(reason)), 401);
        assert_string_equal(reason, "Invalid authorization token");
    }
    /* Longer than CRCR_JWT_MAX. */
    size_t n = CRCR_JWT_MAX + 10;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'A', n);
    big[100] = '.';
    big[200] = '.';
    big[n] = '\0';
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, big, NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    free(big);
    assert_int_equal(fetches(f), 0);
}

static void test_alg_none_unsigned_token_is_rejected(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    buf_t b;
    buf_init(&b, CRCR_JWT_MAX);
    const char *hdr = "{\"alg\":\"none\",\"typ\":\"JWT\",\"kid\":\"k1\"}";
    jwt_b64url_encode(hdr, strlen(hdr), &b);
    buf_putc(&b, '.');
    jwt_b64url_encode(claims, strlen(claims), &b);
    buf_putc(&b, '.'); /* empty signature */
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, buf_cstr(&b), NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    /* The shortest form: {"alg":"none"}.{}. */
    assert_int_equal(check(f, "eyJhbGciOiJub25lIn0.e30.", NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    /* A valid RS256 signature under another alg name ("rs256", "RS512", "PS256") does not pass
     * either: the name must be exactly RS256. */
    char *lower = sign_with_header(g_k1, "{\"alg\":\"rs256\",\"kid\":\"k1\"}", claims);
    assert_int_equal(check(f, lower, NOW, &id, reason, sizeof(reason)), 401);
    free(lower);
    char *tok = sign_with_header(g_k1, "{\"alg\":\"RS512\",\"kid\":\"k1\"}", claims);
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    free(tok);
    tok = sign_with_header(g_k1, "{\"alg\":\"PS256\",\"kid\":\"k1\"}", claims);
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    free(tok);
    assert_int_equal(fetches(f), 0);
    buf_free(&b);
    free(claims);
}

static void test_hs256_signed_with_public_key_pem_is_rejected(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    /* Load the cache first, so that the key the attack targets is there. */
    expect_claims(f, claims, NOW, 0, "");

    BIO *bio = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PUBKEY(bio, g_k1), 1);
    char *pem = NULL;
    long pem_len = BIO_get_mem_data(bio, &pem);
    buf_t b;
    buf_init(&b, CRCR_JWT_MAX);
    const char *hdr = "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"k1\"}";
    jwt_b64url_encode(hdr, strlen(hdr), &b);
    buf_putc(&b, '.');
    jwt_b64url_encode(claims, strlen(claims), &b);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    assert_non_null(
        HMAC(EVP_sha256(), pem, (int)pem_len, (const unsigned char *)b.data, b.len, mac, &mac_len));
    buf_putc(&b, '.');
    jwt_b64url_encode(mac, mac_len, &b);
    BIO_free(bio);

    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, buf_cstr(&b), NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    assert_int_equal(fetches(f), 1);
    buf_free(&b);
    free(claims);
}

static void test_signature_by_other_key_with_same_kid_is_rejected(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_evil, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    /* A known kid with a bad signature is not a reason to refetch. */
    assert_int_equal(check(f, tok, NOW + 120, &id, reason, sizeof(reason)), 401);
    assert_int_equal(fetches(f), 1);
    /* A flipped payload byte under the right key fails too. */
    free(tok);
    tok = sign_token(g_k1, "k1", claims);
    char *dot = strchr(tok, '.');
    dot[3] = dot[3] == 'A' ? 'B' : 'A';
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    free(tok);
    free(claims);
}

static void test_expired_beyond_leeway_is_rejected(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", -61, "");
    expect_claims(f, claims, NOW, 401, "Token expired");
    free(claims);
}

static void test_missing_or_non_numeric_exp_is_rejected(void **state)
{
    fixture *f = *state;
    char claims[512];
    snprintf(claims, sizeof(claims), "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"repository\":\"a/b\"}",
             f->srv->issuer);
    expect_claims(f, claims, NOW, 401, "Invalid authorization token");
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":\"%lld\",\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 100));
    expect_claims(f, claims, NOW, 401, "Invalid authorization token");
    /* A huge exp does not overflow into the past. */
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":9223372036854775807,"
             "\"iat\":-9223372036854775807,\"repository\":\"a/b\"}",
             f->srv->issuer);
    expect_claims(f, claims, NOW, 0, "");
}

static void test_nbf_in_future_beyond_leeway_is_rejected(void **state)
{
    fixture *f = *state;
    char claims[512];
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD
             "\",\"exp\":%lld,\"nbf\":%lld,\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 600), (long long)(NOW + 61));
    expect_claims(f, claims, NOW, 401, "Token not yet valid");
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD
             "\",\"exp\":%lld,\"nbf\":%lld,\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 600), (long long)(NOW + 60));
    expect_claims(f, claims, NOW, 0, "");
}

static void test_iat_in_future_beyond_leeway_is_rejected(void **state)
{
    fixture *f = *state;
    char claims[512];
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD
             "\",\"exp\":%lld,\"iat\":%lld,\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 600), (long long)(NOW + 61));
    expect_claims(f, claims, NOW, 401, "Token issued in the future");
    snprintf(claims, sizeof(claims),
             "{\"iss\":\"%s\",\"aud\":\"" AUD
             "\",\"exp\":%lld,\"iat\":%lld,\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 600), (long long)(NOW + 60));
    expect_claims(f, claims, NOW, 0, "");
}

static void test_wrong_or_missing_audience_is_rejected(void **state)
{
    fixture *f = *state;
    const char *auds[] = {"\"other\"",
                          "\"" AUD "x\"",
                          "[\"other\"]",
                          "[]",
                          "null",
                          "42",
                          "\"PYTORCH-CROSS-REPO-CI-RELAY\""};
    for (size_t i = 0; i < sizeof(auds) / sizeof(auds[0]); i++) {
        char *claims = claims_full(f->srv->issuer, auds[i], 300, "");
        expect_claims(f, claims, NOW, 401, "Invalid audience");
        free(claims);
    }
    char claims[512];
    snprintf(claims, sizeof(claims), "{\"iss\":\"%s\",\"exp\":%lld,\"repository\":\"a/b\"}",
             f->srv->issuer, (long long)(NOW + 600));
    expect_claims(f, claims, NOW, 401, "Invalid audience");
}

static void test_unknown_issuer_is_named_in_reason_without_fetch(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok("https://evil.example.com");
    expect_claims(f, claims, NOW, 401, "Unsupported OIDC issuer: https://evil.example.com");
    free(claims);
    /* Prefixes and case variants of the trusted issuer are not it. */
    char iss[128];
    snprintf(iss, sizeof(iss), "%s/x", f->srv->issuer);
    claims = claims_ok(iss);
    expect_claims(f, claims, NOW, 401, NULL);
    free(claims);
    snprintf(iss, sizeof(iss), "HTTP://127.0.0.1:%d", ut_httpd_port(f->srv->srv));
    claims = claims_ok(iss);
    expect_claims(f, claims, NOW, 401, NULL);
    free(claims);
    /* A long issuer with control characters is cut and made printable. */
    char longiss[300];
    memset(longiss, 'a', sizeof(longiss) - 1);
    longiss[sizeof(longiss) - 1] = '\0';
    memcpy(longiss, "\\u0007\\n", 8);
    claims = claims_ok(longiss);
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[256];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
    assert_true(strncmp(reason, "Unsupported OIDC issuer: ??aaa", 30) == 0);
    assert_int_equal(strlen(reason), strlen("Unsupported OIDC issuer: ") + 100);
    free(tok);
    free(claims);
    assert_int_equal(fetches(f), 0);
}

static void test_missing_or_malformed_repository_is_rejected(void **state)
{
    fixture *f = *state;
    const char *repos[] = {NULL,        "\"noslash\"",      "\"/repo\"", "\"owner/\"",
                           "\"a/b/c\"", "\"a b/c\"",        "42",        "\"a/..\"",
                           "[\"a/b\"]", "\"owner/re\\npo\""};
    for (size_t i = 0; i < sizeof(repos) / sizeof(repos[0]); i++) {
        char claims[512];
        if (repos[i])
            snprintf(claims, sizeof(claims),
                     "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":%lld,\"repository\":%s}",
                     f->srv->issuer, (long long)(NOW + 600), repos[i]);
        else
            snprintf(claims, sizeof(claims), "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":%lld}",
                     f->srv->issuer, (long long)(NOW + 600));
        expect_claims(f, claims, NOW, 401, "GitHub OIDC token missing 'repository' claim");
    }
}

static void test_malformed_optional_claims_are_rejected(void **state)
{
    fixture *f = *state;
    const char *extras[] = {",\"repository_id\":\"12a\"", ",\"repository_owner_id\":-1",
                            ",\"repository_id\":true", ",\"event_name\":\"pu\\u0001sh\""};
    for (size_t i = 0; i < sizeof(extras) / sizeof(extras[0]); i++) {
        char claims[512];
        snprintf(claims, sizeof(claims),
                 "{\"iss\":\"%s\",\"aud\":\"" AUD "\",\"exp\":%lld,\"repository\":\"a/b\"%s}",
                 f->srv->issuer, (long long)(NOW + 600), extras[i]);
        expect_claims(f, claims, NOW, 401, "Invalid authorization token");
    }
}

/* ---------------------------------------------------------------- JWKS cache */

static void test_key_rotation_refetches_at_most_once_a_minute(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 600, "");
    oidc_identity id;
    char reason[128];

    char *t1 = sign_token(g_k1, "k1", claims);
    assert_int_equal(check(f, t1, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 1);

    /* The issuer rotates in k2 (more than a minute later): a token with the unknown kid triggers
     * one refetch. */
    EVP_PKEY *keys[] = {g_k1, g_k2, g_evil};
    const char *kids[] = {"k1", "k2", "k3"};
    char *doc2 = jwks_doc(2, keys, kids);
    server_set(f->srv, doc2, 200);
    char *t2 = sign_token(g_k2, "k2", claims);
    /* Within a minute of the first fetch even a genuine new kid waits. */
    assert_int_equal(check(f, t2, NOW + 59, &id, reason, sizeof(reason)), 401);
    assert_int_equal(fetches(f), 1);
    assert_int_equal(check(f, t2, NOW + 100, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 2);

    /* Another unknown kid within the minute: no fetch, rejected. */
    char *doc3 = jwks_doc(3, keys, kids);
    server_set(f->srv, doc3, 200);
    char *t3 = sign_token(g_evil, "k3", claims);
    assert_int_equal(check(f, t3, NOW + 110, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Invalid authorization token");
    assert_int_equal(check(f, t3, NOW + 159, &id, reason, sizeof(reason)), 401);
    assert_int_equal(fetches(f), 2);
    /* Known kids keep working meanwhile. */
    assert_int_equal(check(f, t1, NOW + 130, &id, reason, sizeof(reason)), 0);

    /* A minute after the last fetch (NOW + 100), the refetch is allowed. */
    assert_int_equal(check(f, t3, NOW + 100 + 61, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 3);
    free(t1);
    free(t2);
    free(t3);
    free(doc2);
    free(doc3);
    free(claims);
}

/* oidc_verify_ex at `now`: its status, the reason in `reason`, the Retry-After in *retry. */
static int check_ex(fixture *f, const char *header, int64_t now, char *reason, size_t reasonsz,
                    int64_t *retry)
{
    oidc_identity id;
    return oidc_verify_ex(f->v, header, now, &id, reason, reasonsz, retry);
}

/* The issuer's keys cannot be had: not the caller's fault. 503, the issuer and the cause named,
 * when to retry; one fetch per OIDC_JWKS_RETRY_S meanwhile; counted per issuer. */
static void test_jwks_server_down_answers_503_with_retry_after(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 600, "");
    char *tok = sign_token(g_k1, "k1", claims);
    char reason[OIDC_REASON_MAX], want[OIDC_REASON_MAX];
    int64_t retry = -1;

    /* The server answers 500. */
    server_set(f->srv, NULL, 500);
    assert_int_equal(check_ex(f, tok, NOW, reason, sizeof(reason), &retry), 503);
    snprintf(want, sizeof(want),
             "the relay cannot get the signing keys of OIDC issuer %s (HTTP status 500); the "
             "token was not judged, please retry",
             f->srv->issuer);
    assert_string_equal(reason, want);
    assert_int_equal(retry, OIDC_JWKS_RETRY_S);
    assert_int_equal(fetches(f), 1);
    /* Within the retry interval: no fetch, the time left. */
    assert_int_equal(check_ex(f, tok, NOW + 2, reason, sizeof(reason), &retry), 503);
    assert_int_equal(retry, OIDC_JWKS_RETRY_S - 2);
    assert_int_equal(fetches(f), 1);

    /* Not a JWKS document. */
    server_set(f->srv, "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"k1\"}]}", 200);
    assert_int_equal(check_ex(f, tok, NOW + OIDC_JWKS_RETRY_S, reason, sizeof(reason), &retry),
                     503);
    assert_non_null(strstr(reason, "not a JWKS document"));
    assert_int_equal(fetches(f), 2);

    /* Nothing listens any more; oidc_verify() answers the same. */
    server_stop(f->srv);
    oidc_identity id;
    assert_int_equal(
        oidc_verify(f->v, tok, NOW + 2 * OIDC_JWKS_RETRY_S, &id, reason, sizeof(reason)), 503);
    assert_non_null(strstr(reason, f->srv->issuer));
    assert_string_equal(id.repository, "");
    uint64_t nf;
    oidc_stats(f->v, &nf, NULL, NULL);
    assert_int_equal(nf, 3);
    oidc_issuer_stat st;
    assert_true(oidc_issuer_stats(f->v, 0, &st));
    assert_string_equal(st.url, f->srv->issuer);
    assert_true(st.failing);
    assert_int_equal(st.unavailable, 4);
    assert_false(oidc_issuer_stats(f->v, 1, &st));
    free(tok);
    free(claims);
}

/* A token the keys the relay has can judge stays a 401 while the issuer is down; a kid those
 * keys lack is a 503 (it may be a new key the relay cannot fetch). */
static void test_keys_the_relay_has_still_judge_during_an_outage(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 3600, "");
    char *good = sign_token(g_k1, "k1", claims);
    char *forged = sign_token(g_evil, "k1", claims);
    char *rotated = sign_token(g_k2, "k2", claims);
    char reason[OIDC_REASON_MAX];
    int64_t retry = -1;
    assert_int_equal(check_ex(f, good, NOW, reason, sizeof(reason), &retry), 0);
    assert_int_equal(retry, 0);
    server_set(f->srv, NULL, 502);
    /* k2 is unknown: a fetch (after the refetch interval), which fails: 503. */
    assert_int_equal(check_ex(f, rotated, NOW + 61, reason, sizeof(reason), &retry), 503);
    assert_int_equal(fetches(f), 2);
    assert_true(retry >= 1 && retry <= OIDC_JWKS_RETRY_S);
    /* k1 is known: a forgery under its kid is judged by it, the real one passes. */
    assert_int_equal(check_ex(f, forged, NOW + 62, reason, sizeof(reason), &retry), 401);
    assert_string_equal(reason, "Invalid authorization token");
    assert_int_equal(retry, 0);
    assert_int_equal(check_ex(f, good, NOW + 62, reason, sizeof(reason), &retry), 0);
    oidc_issuer_stat st;
    assert_true(oidc_issuer_stats(f->v, 0, &st));
    assert_int_equal(st.unavailable, 1);
    free(good);
    free(forged);
    free(rotated);
    free(claims);
}

static void test_server_recovering_is_used_after_the_retry_interval(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 600, "");
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[OIDC_REASON_MAX];
    server_set(f->srv, NULL, 503);
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 503);
    server_set(f->srv, NULL, 200);
    /* Within the retry interval the failed attempt still counts. */
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_RETRY_S - 1, &id, reason, sizeof(reason)), 503);
    assert_int_equal(fetches(f), 1);
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_RETRY_S, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 2);
    oidc_issuer_stat st;
    assert_true(oidc_issuer_stats(f->v, 0, &st));
    assert_false(st.failing);
    free(tok);
    free(claims);
}

static void test_old_key_set_is_refreshed_after_max_age_and_kept_on_failure(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 2 * OIDC_JWKS_MAX_AGE_S, "");
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 1);

    /* After the maximum age a refresh is attempted; when it fails the old keys still serve. */
    server_set(f->srv, NULL, 500);
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_MAX_AGE_S, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 2);

    /* A successful refresh replaces the set: k1 withdrawn means k1 tokens stop passing. */
    EVP_PKEY *keys[] = {g_k2};
    const char *kids[] = {"k2"};
    char *doc = jwks_doc(1, keys, kids);
    server_set(f->srv, doc, 200);
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_MAX_AGE_S + 61, &id, reason, sizeof(reason)),
                     401);
    assert_int_equal(fetches(f), 3);
    free(doc);
    free(tok);
    free(claims);
}

static void test_unusable_jwks_entries_are_skipped(void **state)
{
    fixture *f = *state;
    buf_t b;
    buf_init(&b, OIDC_JWKS_MAX_BYTES);
    buf_puts(&b, "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"ec\",\"crv\":\"P-256\",\"x\":\"AA\","
                 "\"y\":\"AA\"},");
    jwk_append(&b, g_k1, "enc", ",\"use\":\"enc\"");
    buf_putc(&b, ',');
    jwk_append(&b, g_k1, "rs384", ",\"alg\":\"RS384\"");
    buf_putc(&b, ',');
    buf_puts(&b, "{\"kty\":\"RSA\",\"kid\":\"short\",\"n\":\"AQAB\",\"e\":\"AQAB\"},");
    jwk_append(&b, g_k2, "k2", "");
    buf_puts(&b, "]}");
    server_set(f->srv, buf_cstr(&b), 200);
    buf_free(&b);

    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 600, "");
    const char *bad_kids[] = {"enc", "rs384", "ec", "short"};
    for (size_t i = 0; i < 4; i++) {
        char *tok = sign_token(g_k1, bad_kids[i], claims);
        oidc_identity id;
        char reason[128];
        assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 401);
        free(tok);
    }
    char *tok = sign_token(g_k2, "k2", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 1);
    free(tok);
    free(claims);
}

static void test_set_jwks_installs_keys_without_fetching(void **state)
{
    fixture *f = *state;
    char *doc = jwks_k1();
    assert_int_equal(oidc_set_jwks(f->v, "https://other.example", doc, strlen(doc), NOW),
                     CRCR_E_NOT_FOUND);
    assert_int_equal(oidc_set_jwks(f->v, f->srv->issuer, "{\"keys\":[]}", 11, NOW), CRCR_E_INVALID);
    assert_int_equal(oidc_set_jwks(f->v, f->srv->issuer, "[1,2", 4, NOW), CRCR_E_INVALID);
    assert_int_equal(oidc_set_jwks(f->v, f->srv->issuer, doc, strlen(doc), NOW), CRCR_OK);
    char *claims = claims_ok(f->srv->issuer);
    expect_claims(f, claims, NOW, 0, "");
    assert_int_equal(fetches(f), 0);
    free(claims);
    free(doc);
}

/* ---------------------------------------------------------------- secrecy */

static void test_reasons_and_logs_never_contain_the_token(void **state)
{
    fixture *f = *state;
    log_set_level(CRCR_LOG_DEBUG);
    char *good = claims_ok(f->srv->issuer);
    char *expired = claims_full(f->srv->issuer, "\"" AUD "\"", -3600, "");
    char *badaud = claims_full(f->srv->issuer, "\"nope\"", 300, "");
    char *badiss = claims_ok("https://token.actions.githubusercontent.com.evil");
    char *toks[] = {sign_token(g_k1, "k1", expired), sign_token(g_k1, "k1", badaud),
                    sign_token(g_k1, "k1", badiss),  sign_token(g_evil, "k1", good),
                    sign_token(g_evil, "zz", good),  sign_token(g_k1, "k1", good)};
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++) {
        char *h = bearer(toks[i]);
        oidc_identity id;
        char reason[256];
        int rc = check(f, h, NOW, &id, reason, sizeof(reason));
        assert_int_equal(rc, i + 1 == sizeof(toks) / sizeof(toks[0]) ? 0 : 401);
        /* Neither the token nor any of its three parts. */
        char *copy = strdup(toks[i]);
        for (char *part = copy, *next; part; part = next) {
            next = strchr(part, '.');
            if (next)
                *next++ = '\0';
            assert_null(strstr(reason, part));
            pthread_mutex_lock(&g_log_mu);
            assert_null(strstr(buf_cstr(&g_log), part));
            pthread_mutex_unlock(&g_log_mu);
        }
        free(copy);
        free(h);
    }
    pthread_mutex_lock(&g_log_mu);
    assert_non_null(strstr(buf_cstr(&g_log), "event=oidc.rejected"));
    assert_non_null(strstr(buf_cstr(&g_log), "Token expired"));
    pthread_mutex_unlock(&g_log_mu);
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++)
        free(toks[i]);
    free(good);
    free(expired);
    free(badaud);
    free(badiss);
    log_set_level(CRCR_LOG_OFF);
}

/* ---------------------------------------------------------------- concurrency */

typedef struct worker {
    oidc_verifier *v;
    const char *good;
    const char *bad;
    int ok, rejected;
} worker;

#define THREADS 8
#define ROUNDS 25

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        oidc_identity id;
        char reason[128];
        if (oidc_verify(w->v, w->good, NOW, &id, reason, sizeof(reason)) == 0 &&
            strcmp(id.repository, "pytorch/vllm-ci") == 0)
            w->ok++;
        if (oidc_verify(w->v, w->bad, NOW, &id, reason, sizeof(reason)) == 401)
            w->rejected++;
    }
    return NULL;
}

static void test_eight_threads_verify_concurrently_with_one_fetch(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    char *good = sign_token(g_k1, "k1", claims);
    char *bad = sign_token(g_evil, "k9", claims); /* unknown kid: may not refetch */
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.v = f->v, .good = good, .bad = bad};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].ok, ROUNDS);
        assert_int_equal(w[i].rejected, ROUNDS);
    }
    uint64_t nf, ok, bad_n;
    oidc_stats(f->v, &nf, &ok, &bad_n);
    assert_int_equal(nf, 1);
    assert_int_equal(ok, THREADS * ROUNDS);
    assert_int_equal(bad_n, THREADS * ROUNDS);
    free(good);
    free(bad);
    free(claims);
}

/* ---------------------------------------------------------------- construction */

static void test_new_refuses_bad_issuers_and_audience(void **state)
{
    (void)state;
    char err[256];
    const char *ok[] = {"https://token.actions.githubusercontent.com"};
    const char *bad[] = {"http://token.actions.githubusercontent.com",
                         "ftp://127.0.0.1/x",
                         "https://user:pw@example.com",
                         "https://example.com/?q=1",
                         "https://example.com/#f",
                         "",
                         "not a url",
                         "http://127.0.0.2.example"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *one[] = {bad[i]};
        err[0] = '\0';
        assert_null(oidc_new(one, 1, AUD, err, sizeof(err)));
        assert_true(err[0] != '\0');
    }
    assert_null(oidc_new(ok, 0, AUD, err, sizeof(err)));
    assert_null(oidc_new(ok, 1, "", err, sizeof(err)));
    assert_null(oidc_new(ok, 1, NULL, NULL, 0));
    const char *many[OIDC_ISSUERS_MAX + 1];
    for (size_t i = 0; i <= OIDC_ISSUERS_MAX; i++)
        many[i] = ok[0];
    assert_null(oidc_new(many, OIDC_ISSUERS_MAX + 1, AUD, err, sizeof(err)));

    const char *loop[] = {"https://token.actions.githubusercontent.com/", "http://localhost:1",
                          "http://[::1]:8080", "http://127.9.9.9"};
    oidc_verifier *v = oidc_new(loop, 4, AUD, err, sizeof(err));
    assert_non_null(v);
    oidc_free(v);
    oidc_free(NULL);

    oidc_identity id;
    char reason[64];
    assert_int_equal(oidc_verify(NULL, "Bearer x", NOW, &id, reason, sizeof(reason)), 500);
}

static void test_check_claims_directly(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof(text),
             "{\"aud\":[\"" AUD "\"],\"exp\":%lld.9,\"repository\":\"Owner-1/repo_x.y\"}",
             (long long)NOW);
    jv *c = jv_parse(text, strlen(text), NULL, 0);
    assert_non_null(c);
    oidc_identity id;
    char reason[128];
    assert_int_equal(oidc_check_claims(c, AUD, NOW, &id, reason, sizeof(reason)), 0);
    assert_string_equal(id.repository, "Owner-1/repo_x.y");
    assert_int_equal(id.exp, NOW);
    assert_string_equal(id.issuer, "");
    assert_int_equal(oidc_check_claims(c, AUD, NOW + 61, &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Token expired");
    assert_string_equal(id.repository, "");
    assert_int_equal(oidc_check_claims(NULL, AUD, NOW, &id, reason, sizeof(reason)), 401);
    jv_free(c);
}

/* ---------------------------------------------------------------- issuer kinds */

static atomic_int g_resolver_calls;

/* A resolver for the tests: pipeline "p1" of organization "o1" is acme/accel, "p-none" names no
 * repository (a buggy resolver), anything else is refused 403. */
static int test_resolver(void *ctx, const jv *claims, oidc_identity *id, char *reason,
                         size_t reasonsz)
{
    atomic_fetch_add(&g_resolver_calls, 1);
    assert_string_equal((const char *)ctx, "ctx");
    const char *p = jv_str(jv_get(claims, "pipeline_id"));
    if (p && strcmp(p, "p1") == 0) {
        snprintf(id->repository, sizeof(id->repository), "acme/accel");
        snprintf(id->pipeline, sizeof(id->pipeline), "o1/p1");
        return 0;
    }
    if (p && strcmp(p, "p-none") == 0)
        return 0;
    snprintf(reason, reasonsz, "pipeline %s is not mapped", p ? p : "(none)");
    return 403;
}

/* A verifier trusting the fixture's issuer as a Buildkite issuer. */
static oidc_verifier *buildkite_verifier(fixture *f)
{
    char err[256] = "";
    const char *iss[] = {f->srv->issuer};
    crcr_issuer_kind kinds[] = {CRCR_ISSUER_BUILDKITE};
    oidc_verifier *v = oidc_new_kinds(iss, kinds, 1, AUD, err, sizeof(err));
    assert_non_null(v);
    return v;
}

/* Verifies a token with Buildkite-shaped claims (plus `extra`) signed by k1. */
static int verify_buildkite(oidc_verifier *v, fixture *f, int64_t exp_off, const char *extra,
                            oidc_identity *id, char *reason, size_t reasonsz)
{
    char more[512];
    snprintf(more, sizeof(more),
             ",\"organization_id\":\"o1\",\"build_branch\":\"main\",\"pipeline_slug\":\"ci\"%s",
             extra);
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", exp_off, more);
    char *tok = sign_token(g_k1, "k1", claims);
    char *h = bearer(tok);
    int rc = oidc_verify(v, h, NOW, id, reason, reasonsz);
    assert_null(strstr(reason, tok));
    free(h);
    free(tok);
    free(claims);
    return rc;
}

static void test_buildkite_issuer_takes_the_repository_from_its_resolver(void **state)
{
    fixture *f = *state;
    oidc_verifier *v = buildkite_verifier(f);
    oidc_identity id;
    char reason[256];
    /* No resolver: nothing can name the repository, so the issuer is as good as unknown (and its
     * keys are not even fetched). */
    atomic_store(&g_resolver_calls, 0);
    assert_int_equal(
        verify_buildkite(v, f, 300, ",\"pipeline_id\":\"p1\"", &id, reason, sizeof(reason)), 401);
    assert_non_null(strstr(reason, "Unsupported OIDC issuer"));
    assert_int_equal(atomic_load(&f->srv->fetches), 0);

    oidc_set_resolver(v, CRCR_ISSUER_BUILDKITE, test_resolver, "ctx");
    /* claims_full() also writes GitHub's repository claims: a Buildkite issuer ignores them. */
    assert_int_equal(
        verify_buildkite(v, f, 300, ",\"pipeline_id\":\"p1\"", &id, reason, sizeof(reason)), 0);
    assert_string_equal(id.repository, "acme/accel");
    assert_string_equal(id.pipeline, "o1/p1");
    assert_int_equal(id.kind, CRCR_ISSUER_BUILDKITE);
    assert_string_equal(id.repository_id, "");
    assert_string_equal(id.repository_owner_id, "");
    assert_string_equal(id.issuer, f->srv->issuer);
    assert_string_equal(id.jti, "6f3c-11ee");
    assert_int_equal(atomic_load(&g_resolver_calls), 1);

    /* The resolver's refusal, status and reason, is the answer. */
    assert_int_equal(
        verify_buildkite(v, f, 300, ",\"pipeline_id\":\"p2\"", &id, reason, sizeof(reason)), 403);
    assert_string_equal(reason, "pipeline p2 is not mapped");
    assert_string_equal(id.repository, "");
    /* Times and audience are checked before the resolver is asked. */
    atomic_store(&g_resolver_calls, 0);
    assert_int_equal(
        verify_buildkite(v, f, -3600, ",\"pipeline_id\":\"p1\"", &id, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Token expired");
    assert_int_equal(atomic_load(&g_resolver_calls), 0);
    /* A resolver that names no repository is refused, never trusted. */
    assert_int_equal(
        verify_buildkite(v, f, 300, ",\"pipeline_id\":\"p-none\"", &id, reason, sizeof(reason)),
        500);
    uint64_t ok = 0, bad = 0;
    oidc_stats(v, NULL, &ok, &bad);
    assert_int_equal(ok, 1);
    assert_int_equal(bad, 4);
    oidc_free(v);
}

static void test_github_issuer_never_asks_a_resolver(void **state)
{
    fixture *f = *state;
    oidc_set_resolver(f->v, CRCR_ISSUER_BUILDKITE, test_resolver, "ctx");
    oidc_set_resolver(f->v, CRCR_ISSUER_GITHUB, test_resolver, "ctx"); /* ignored */
    atomic_store(&g_resolver_calls, 0);
    oidc_identity id;
    char reason[256];
    assert_int_equal(
        verify_buildkite(f->v, f, 300, ",\"pipeline_id\":\"p1\"", &id, reason, sizeof(reason)), 0);
    assert_string_equal(id.repository, "pytorch/vllm-ci");
    assert_string_equal(id.repository_id, "123456789");
    assert_int_equal(id.kind, CRCR_ISSUER_GITHUB);
    assert_string_equal(id.pipeline, "");
    assert_int_equal(atomic_load(&g_resolver_calls), 0);
}

static void test_new_kinds_refuses_duplicates_and_unknown_kinds(void **state)
{
    (void)state;
    char err[256];
    const char *two[] = {"https://agent.buildkite.com", "https://agent.buildkite.com/"};
    crcr_issuer_kind kinds[] = {CRCR_ISSUER_GITHUB, CRCR_ISSUER_BUILDKITE};
    assert_null(oidc_new_kinds(two, kinds, 2, AUD, err, sizeof(err)));
    assert_non_null(strstr(err, "listed twice"));
    const char *one[] = {"https://agent.buildkite.com"};
    crcr_issuer_kind bad[] = {(crcr_issuer_kind)7};
    assert_null(oidc_new_kinds(one, bad, 1, AUD, err, sizeof(err)));
    assert_non_null(strstr(err, "unknown kind"));
}

/* ---------------------------------------------------------------- verified tokens (cache) */

/* A job reports in_progress and then completed with one token: the second report is accepted
 * from the cache (no signature check, no fetch) with the same identity, until the token expires
 * on the relay's clock, where the answer is the full path's. */
static void test_a_verified_token_is_taken_from_the_cache_until_it_expires(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 600, "");
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity first, again;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &first, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_cache_hits(f->v), 0);
    assert_int_equal(check(f, tok, NOW + 300, &again, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_cache_hits(f->v), 1);
    assert_memory_equal(&first, &again, sizeof(first));
    assert_int_equal(fetches(f), 1);
    /* Within the leeway after exp still; past it refused as the full path refuses it. */
    assert_int_equal(check(f, tok, NOW + 600 + OIDC_LEEWAY_S, &again, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_cache_hits(f->v), 2);
    assert_int_equal(check(f, tok, NOW + 601 + OIDC_LEEWAY_S, &again, reason, sizeof(reason)), 401);
    assert_string_equal(reason, "Token expired");
    /* Before its nbf (a clock set back) it is refused too, not taken from the cache. */
    assert_int_equal(check(f, tok, NOW - 5 - OIDC_LEEWAY_S - 1, &again, reason, sizeof(reason)),
                     401);
    assert_int_equal(oidc_cache_hits(f->v), 2);
    uint64_t ok = 0, bad = 0;
    oidc_stats(f->v, NULL, &ok, &bad);
    assert_int_equal(ok, 3);
    assert_int_equal(bad, 2);
    free(tok);
    free(claims);
}

/* Only the very bytes that were verified: a token differing in one byte of its signature, or
 * signed by another key under the same kid, is judged afresh and refused. */
static void test_only_the_same_token_is_taken_from_the_cache(void **state)
{
    fixture *f = *state;
    char *claims = claims_ok(f->srv->issuer);
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    char *forged = strdup(tok);
    assert_non_null(forged);
    size_t n = strlen(forged);
    forged[n - 2] = forged[n - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(check(f, forged, NOW, &id, reason, sizeof(reason)), 401);
    char *evil = sign_token(g_evil, "k1", claims);
    assert_int_equal(check(f, evil, NOW, &id, reason, sizeof(reason)), 401);
    assert_int_equal(oidc_cache_hits(f->v), 0);
    free(evil);
    free(forged);
    free(tok);
    free(claims);
}

/* A new key set for the issuer ends its cached tokens: after a rotation that removed k1, a token
 * k1 verified before is refused; after a refresh that kept k1 it is verified afresh (not a hit). */
static void test_a_new_key_set_ends_the_cached_tokens(void **state)
{
    fixture *f = *state;
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 7200, "");
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    assert_int_equal(check(f, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(check(f, tok, NOW + 1, &id, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_cache_hits(f->v), 1);
    /* The issuer's set is refreshed after OIDC_JWKS_MAX_AGE_S, k1 still in it. */
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_MAX_AGE_S + 1, &id, reason, sizeof(reason)), 0);
    assert_int_equal(fetches(f), 2);
    assert_int_equal(oidc_cache_hits(f->v), 1);
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_MAX_AGE_S + 2, &id, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_cache_hits(f->v), 2);
    /* Rotated: k2 only. The cached k1 token is no longer accepted. */
    EVP_PKEY *keys[] = {g_k2};
    const char *kids[] = {"k2"};
    char *doc = jwks_doc(1, keys, kids);
    assert_int_equal(
        oidc_set_jwks(f->v, f->srv->issuer, doc, strlen(doc), NOW + OIDC_JWKS_MAX_AGE_S + 3),
        CRCR_OK);
    assert_int_equal(check(f, tok, NOW + OIDC_JWKS_MAX_AGE_S + 4, &id, reason, sizeof(reason)),
                     401);
    assert_int_equal(oidc_cache_hits(f->v), 2);
    free(doc);
    free(tok);
    free(claims);
}

/* A Buildkite token is judged by its resolver each time (the pipeline mapping may change). */
static void test_resolver_tokens_are_not_cached(void **state)
{
    fixture *f = *state;
    oidc_verifier *v = buildkite_verifier(f);
    oidc_set_resolver(v, CRCR_ISSUER_BUILDKITE, test_resolver, "ctx");
    char *claims = claims_full(f->srv->issuer, "\"" AUD "\"", 300,
                               ",\"organization_id\":\"o1\",\"pipeline_id\":\"p1\"");
    char *tok = sign_token(g_k1, "k1", claims);
    oidc_identity id;
    char reason[128];
    atomic_store(&g_resolver_calls, 0);
    assert_int_equal(oidc_verify(v, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(oidc_verify(v, tok, NOW, &id, reason, sizeof(reason)), 0);
    assert_int_equal(atomic_load(&g_resolver_calls), 2);
    assert_int_equal(oidc_cache_hits(v), 0);
    oidc_free(v);
    free(tok);
    free(claims);
}

/* The cache itself: bounded (never more entries than OIDC_CACHE_SLOTS, the latest always there),
 * an expired entry dropped on its first look. */
static void test_the_cache_is_bounded_and_drops_expired_entries(void **state)
{
    (void)state;
    oidc_cache *c = oidc_cache_new();
    assert_non_null(c);
    oidc_cached v;
    memset(&v, 0, sizeof(v));
    v.exp = NOW + 100;
    unsigned char key[32];
    char tok[32];
    const unsigned total = 4 * OIDC_CACHE_SLOTS;
    for (unsigned i = 0; i < total; i++) {
        snprintf(tok, sizeof(tok), "token-%u", i);
        assert_true(oidc_cache_key(tok, strlen(tok), key));
        v.iat = i;
        oidc_cache_put(c, key, &v);
        oidc_cached got;
        assert_true(oidc_cache_get(c, key, NOW, &got));
        assert_int_equal(got.iat, i);
    }
    unsigned hits = 0;
    for (unsigned i = 0; i < total; i++) {
        snprintf(tok, sizeof(tok), "token-%u", i);
        assert_true(oidc_cache_key(tok, strlen(tok), key));
        oidc_cached got;
        if (oidc_cache_get(c, key, NOW, &got)) {
            hits++;
            assert_int_equal(got.iat, i);
        }
    }
    assert_true(hits > 0 && hits <= OIDC_CACHE_SLOTS);
    /* The last one is there, until its exp plus the leeway has passed. */
    oidc_cached got;
    assert_true(oidc_cache_get(c, key, NOW + 100 + OIDC_LEEWAY_S, &got));
    assert_false(oidc_cache_get(c, key, NOW + 101 + OIDC_LEEWAY_S, &got));
    assert_false(oidc_cache_get(c, key, NOW, &got)); /* dropped */
    oidc_cache_free(c);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    buf_init(&g_log, 1u << 20);
    log_set_sink(log_capture, NULL);
    log_set_level(CRCR_LOG_OFF);
    g_k1 = EVP_RSA_gen(2048);
    g_k2 = EVP_RSA_gen(2048);
    g_evil = EVP_RSA_gen(2048);
    if (!g_k1 || !g_k2 || !g_evil)
        return 1;

#define T(name) cmocka_unit_test_setup_teardown(name, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_valid_token_is_accepted_and_identity_copied),
        T(test_bearer_prefix_any_case_and_blanks_are_accepted),
        T(test_expired_within_leeway_is_accepted),
        T(test_audience_array_containing_audience_is_accepted),
        T(test_numeric_ids_are_copied_as_decimal),
        T(test_token_without_kid_is_checked_against_every_key),
        T(test_issuer_trailing_slash_is_ignored_on_both_sides),
        T(test_missing_header_is_rejected),
        T(test_garbage_is_rejected_without_fetching),
        T(test_alg_none_unsigned_token_is_rejected),
        T(test_hs256_signed_with_public_key_pem_is_rejected),
        T(test_signature_by_other_key_with_same_kid_is_rejected),
        T(test_expired_beyond_leeway_is_rejected),
        T(test_missing_or_non_numeric_exp_is_rejected),
        T(test_nbf_in_future_beyond_leeway_is_rejected),
        T(test_iat_in_future_beyond_leeway_is_rejected),
        T(test_wrong_or_missing_audience_is_rejected),
        T(test_unknown_issuer_is_named_in_reason_without_fetch),
        T(test_missing_or_malformed_repository_is_rejected),
        T(test_malformed_optional_claims_are_rejected),
        T(test_key_rotation_refetches_at_most_once_a_minute),
        T(test_jwks_server_down_answers_503_with_retry_after),
        T(test_keys_the_relay_has_still_judge_during_an_outage),
        T(test_server_recovering_is_used_after_the_retry_interval),
        T(test_old_key_set_is_refreshed_after_max_age_and_kept_on_failure),
        T(test_unusable_jwks_entries_are_skipped),
        T(test_set_jwks_installs_keys_without_fetching),
        T(test_reasons_and_logs_never_contain_the_token),
        T(test_eight_threads_verify_concurrently_with_one_fetch),
        T(test_buildkite_issuer_takes_the_repository_from_its_resolver),
        T(test_github_issuer_never_asks_a_resolver),
        T(test_a_verified_token_is_taken_from_the_cache_until_it_expires),
        T(test_only_the_same_token_is_taken_from_the_cache),
        T(test_a_new_key_set_ends_the_cached_tokens),
        T(test_resolver_tokens_are_not_cached),
        cmocka_unit_test(test_the_cache_is_bounded_and_drops_expired_entries),
        cmocka_unit_test(test_new_refuses_bad_issuers_and_audience),
        cmocka_unit_test(test_new_kinds_refuses_duplicates_and_unknown_kinds),
        cmocka_unit_test(test_check_claims_directly),
    };
#undef T
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    EVP_PKEY_free(g_k1);
    EVP_PKEY_free(g_k2);
    EVP_PKEY_free(g_evil);
    log_set_sink(NULL, NULL);
    buf_free(&g_log);
    curl_global_cleanup();
    return rc;
}
