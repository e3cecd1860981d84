/*
 * test_jwt.c - RS256 signing/verification, base64url, JWK and PEM key loading (jwt.c), and the
 * GitHub App JWT claims built by github.c on top of it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "buf.h"
#include "config.h"
#include "github.h"
#include "json.h"
#include "base64.h"
#include "jwt.h"

static EVP_PKEY *g_key;   /* 2048-bit RSA key pair shared by the tests */
static EVP_PKEY *g_other; /* another one, for wrong-key checks */

/* ---------------------------------------------------------------- helpers */

/* PEM text of a private key (caller frees). `cipher` encrypts it when not NULL. */
static char *key_pem(EVP_PKEY *k, const EVP_CIPHER *cipher)
{
    BIO *b = BIO_new(BIO_s_mem());
    assert_non_null(b);
    unsigned char pass[] = "correct horse";
    assert_int_equal(PEM_write_bio_PrivateKey(b, k, cipher, cipher ? pass : NULL,
                                              cipher ? (int)sizeof(pass) - 1 : 0, NULL, NULL),
                     1);
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    char *out = malloc((size_t)n + 1);
    assert_non_null(out);
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    BIO_free(b);
    return out;
}

/* Builds "<b64 header>.<b64 payload>.<b64 RS256 signature by key>" for arbitrary header text, so
 * that tokens with a valid RSA signature but a different "alg" can be made. */
static void sign_raw(EVP_PKEY *k, const char *header, const char *payload, buf_t *out)
{
    assert_int_equal(jwt_b64url_encode(header, strlen(header), out), CRCR_OK);
    assert_int_equal(buf_putc(out, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode(payload, strlen(payload), out), CRCR_OK);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char sig[1024];
    size_t siglen = sizeof(sig);
    assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k), 1);
    assert_int_equal(EVP_DigestSign(md, sig, &siglen, (const unsigned char *)out->data, out->len),
                     1);
    EVP_MD_CTX_free(md);
    assert_int_equal(buf_putc(out, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode(sig, siglen, out), CRCR_OK);
}

/* Decodes and verifies `token` with `pub`; returns the verification result. */
static crcr_err decode_verify(const char *token, EVP_PKEY *pub)
{
    jwt_parts p;
    jwt_parts_init(&p);
    crcr_err err = jwt_decode(token, strlen(token), &p);
    if (!err)
        err = jwt_verify_rs256(&p, pub);
    jwt_parts_free(&p);
    return err;
}

/* The base64url modulus or exponent of an RSA key. */
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

static int setup_keys(void **state)
{
    (void)state;
    g_key = EVP_RSA_gen(2048);
    g_other = EVP_RSA_gen(2048);
    return g_key && g_other ? 0 : -1;
}

static int teardown_keys(void **state)
{
    (void)state;
    EVP_PKEY_free(g_key);
    EVP_PKEY_free(g_other);
    return 0;
}

/* ---------------------------------------------------------------- base64url */

static void test_b64url_encodes_rfc4648_vectors_without_padding(void **state)
{
    (void)state;
    static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *want[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        buf_t b;
        buf_init(&b, 64);
        assert_int_equal(jwt_b64url_encode(in[i], strlen(in[i]), &b), CRCR_OK);
        assert_string_equal(buf_cstr(&b), want[i]);
        buf_reset(&b);
        assert_int_equal(base64url_decode(want[i], strlen(want[i]), &b), CRCR_OK);
        assert_int_equal(b.len, strlen(in[i]));
        assert_memory_equal(buf_cstr(&b), in[i], b.len);
        buf_free(&b);
    }
}

static void test_b64url_uses_url_safe_alphabet(void **state)
{
    (void)state;
    const unsigned char bytes[] = {0xfb, 0xff, 0xbf};
    buf_t b;
    buf_init(&b, 64);
    assert_int_equal(jwt_b64url_encode(bytes, sizeof(bytes), &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "-_-_"); /* standard base64 would be "+/+/" */
    buf_reset(&b);
    assert_int_equal(base64url_decode("-_-_", 4, &b), CRCR_OK);
    assert_memory_equal(b.data, bytes, sizeof(bytes));
    buf_free(&b);
}

static void test_b64url_decode_rejects_padding_bad_chars_and_noncanonical_bits(void **state)
{
    (void)state;
    static const char *bad[] = {"Zg==", "Zm8=", "Z",     "Zm9vY", "Zh",
                                "Zm9",  "+/8",  "Zm 9v", "Zm9v\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_t b;
        buf_init(&b, 64);
        assert_int_equal(base64url_decode(bad[i], strlen(bad[i]), &b), CRCR_E_INVALID);
        assert_int_equal(b.len, 0); /* unchanged on error */
        buf_free(&b);
    }
}

static void test_b64url_respects_output_cap(void **state)
{
    (void)state;
    buf_t b;
    buf_init(&b, 5);
    assert_int_equal(jwt_b64url_encode("foob", 4, &b), CRCR_E_TOO_LARGE); /* needs 6 */
    assert_int_equal(b.len, 0);
    assert_int_equal(base64url_decode("Zm9vYmFy", 8, &b), CRCR_E_TOO_LARGE); /* 6 bytes */
    assert_int_equal(b.len, 0);
    buf_free(&b);
}

/* ---------------------------------------------------------------- sign / verify */

static void test_sign_then_verify_round_trip(void **state)
{
    (void)state;
    const char *claims = "{\"iss\":\"123\",\"n\":1}";
    buf_t tok;
    buf_init(&tok, 8192);
    assert_int_equal(jwt_sign_rs256(g_key, claims, &tok), CRCR_OK);
    /* base64url of {"alg":"RS256","typ":"JWT"} */
    assert_memory_equal(tok.data, "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.", 37);

    jwt_parts p;
    jwt_parts_init(&p);
    assert_int_equal(jwt_decode(tok.data, tok.len, &p), CRCR_OK);
    assert_int_equal(jwt_verify_rs256(&p, g_key), CRCR_OK);
    assert_string_equal(jv_str(jv_get(p.header, "alg")), "RS256");
    assert_string_equal(jv_str(jv_get(p.header, "typ")), "JWT");
    assert_string_equal(jv_str(jv_get(p.payload, "iss")), "123");
    assert_int_equal(p.signature.len, 256);
    jwt_parts_free(&p);

    assert_int_equal(decode_verify(tok.data, g_other), CRCR_E_INVALID);
    buf_free(&tok);
}

static void test_sign_appends_and_leaves_output_unchanged_on_error(void **state)
{
    (void)state;
    buf_t tok;
    buf_init(&tok, 100); /* far too small for a 2048-bit signature */
    assert_int_equal(buf_puts(&tok, "x"), CRCR_OK);
    assert_int_equal(jwt_sign_rs256(g_key, "{}", &tok), CRCR_E_TOO_LARGE);
    assert_string_equal(buf_cstr(&tok), "x");
    buf_free(&tok);
}

static void test_tampered_payload_fails_verification(void **state)
{
    (void)state;
    buf_t tok, forged;
    buf_init(&tok, 8192);
    buf_init(&forged, 8192);
    assert_int_equal(jwt_sign_rs256(g_key, "{\"admin\":false}", &tok), CRCR_OK);
    const char *dot1 = strchr(tok.data, '.');
    const char *dot2 = strchr(dot1 + 1, '.');
    /* Same header and signature, another payload. */
    assert_int_equal(buf_append(&forged, tok.data, (size_t)(dot1 + 1 - tok.data)), CRCR_OK);
    assert_int_equal(jwt_b64url_encode("{\"admin\":true}", 14, &forged), CRCR_OK);
    assert_int_equal(buf_puts(&forged, dot2), CRCR_OK);
    assert_int_equal(decode_verify(forged.data, g_key), CRCR_E_INVALID);

    /* One flipped signature character. */
    tok.data[tok.len - 3] = tok.data[tok.len - 3] == 'A' ? 'B' : 'A';
    assert_int_equal(decode_verify(tok.data, g_key), CRCR_E_INVALID);
    buf_free(&tok);
    buf_free(&forged);
}

static void test_alg_other_than_rs256_is_rejected_even_with_valid_signature(void **state)
{
    (void)state;
    static const char *headers[] = {
        "{\"alg\":\"none\"}",  "{\"alg\":\"HS256\"}",
        "{\"alg\":\"ES256\"}", "{\"alg\":\"PS256\"}",
        "{\"alg\":\"rs256\"}", "{\"typ\":\"JWT\"}",
        "{\"alg\":256}",       "{\"alg\":\"RS256\",\"crit\":[\"exp\"]}"};
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        buf_t tok;
        buf_init(&tok, 8192);
        sign_raw(g_key, headers[i], "{\"sub\":\"x\"}", &tok);
        assert_int_equal(decode_verify(tok.data, g_key), CRCR_E_INVALID);
        buf_free(&tok);
    }
    /* Control: the same construction with alg RS256 verifies, so the alg is what failed. */
    buf_t ok;
    buf_init(&ok, 8192);
    sign_raw(g_key, "{\"alg\":\"RS256\"}", "{\"sub\":\"x\"}", &ok);
    assert_int_equal(decode_verify(ok.data, g_key), CRCR_OK);
    buf_free(&ok);
}

static void test_unsigned_none_token_is_rejected(void **state)
{
    (void)state;
    /* {"alg":"none"} . {"admin":true} . (empty signature) */
    const char *tok = "eyJhbGciOiJub25lIn0.eyJhZG1pbiI6dHJ1ZX0.";
    jwt_parts p;
    jwt_parts_init(&p);
    assert_int_equal(jwt_decode(tok, strlen(tok), &p), CRCR_OK);
    assert_int_equal(p.signature.len, 0);
    assert_int_equal(jwt_verify_rs256(&p, g_key), CRCR_E_INVALID);
    jwt_parts_free(&p);
}

static void test_hs256_signed_with_public_key_bytes_is_rejected(void **state)
{
    (void)state;
    /* The classic key-confusion forgery: HMAC keyed with the public key's bytes. */
    buf_t tok;
    buf_init(&tok, 8192);
    const char *hdr = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    assert_int_equal(jwt_b64url_encode(hdr, strlen(hdr), &tok), CRCR_OK);
    assert_int_equal(buf_putc(&tok, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode("{\"sub\":\"x\"}", 11, &tok), CRCR_OK);
    buf_t nb;
    buf_init(&nb, 1024);
    rsa_param_b64(g_key, OSSL_PKEY_PARAM_RSA_N, &nb);
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t maclen = sizeof(mac);
    assert_non_null(EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, nb.data, nb.len,
                              (const unsigned char *)tok.data, tok.len, mac, sizeof(mac), &maclen));
    assert_int_equal(buf_putc(&tok, '.'), CRCR_OK);
    assert_int_equal(jwt_b64url_encode(mac, maclen, &tok), CRCR_OK);
    assert_int_equal(decode_verify(tok.data, g_key), CRCR_E_INVALID);
    buf_free(&nb);
    buf_free(&tok);
}

static void test_decode_rejects_malformed_tokens(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "abc",
        "a.b",
        "eyJhIjoxfQ.eyJhIjoxfQ.AA.AA",      /* four parts */
        ".eyJhIjoxfQ.AA",                   /* empty header */
        "eyJhIjoxfQ..AA",                   /* empty payload */
        "eyJhIjoxfQ.WzFd.AA",               /* payload [1] is not an object */
        "eyJhIjoxfQ.bm90IGpzb24.AA",        /* payload "not json" */
        "eyJhIjoxLCJhIjoyfQ.eyJhIjoxfQ.AA", /* header {"a":1,"a":2}: duplicate key */
        "eyJhIjoxfQ.eyJhIjoxfQ.A+A",        /* signature not base64url */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        jwt_parts p;
        jwt_parts_init(&p);
        assert_int_equal(jwt_decode(bad[i], strlen(bad[i]), &p), CRCR_E_INVALID);
        jwt_parts_free(&p);
    }
}

static void test_decode_caps_token_length_at_16k(void **state)
{
    (void)state;
    size_t n = CRCR_JWT_MAX + 1;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'A', n);
    big[10] = '.';
    big[20] = '.';
    big[n] = '\0';
    jwt_parts p;
    jwt_parts_init(&p);
    assert_int_equal(jwt_decode(big, n, &p), CRCR_E_TOO_LARGE);
    jwt_parts_free(&p);
    free(big);
}

static void test_wrong_length_signature_is_rejected(void **state)
{
    (void)state;
    buf_t tok;
    buf_init(&tok, 8192);
    assert_int_equal(jwt_sign_rs256(g_key, "{}", &tok), CRCR_OK);
    assert_int_equal(buf_puts(&tok, "AAAA"), CRCR_OK); /* 3 extra signature bytes */
    assert_int_equal(decode_verify(tok.data, g_key), CRCR_E_INVALID);
    buf_free(&tok);
}

/* ---------------------------------------------------------------- JWK */

static void test_jwk_n_e_key_verifies_tokens_of_the_private_key(void **state)
{
    (void)state;
    buf_t n, e, tok;
    buf_init(&n, 1024);
    buf_init(&e, 64);
    buf_init(&tok, 8192);
    rsa_param_b64(g_key, OSSL_PKEY_PARAM_RSA_N, &n);
    rsa_param_b64(g_key, OSSL_PKEY_PARAM_RSA_E, &e);
    assert_string_equal(buf_cstr(&e), "AQAB");
    EVP_PKEY *pub = NULL;
    assert_int_equal(jwt_rsa_public_from_jwk(n.data, e.data, &pub), CRCR_OK);
    assert_non_null(pub);
    assert_int_equal(EVP_PKEY_get_bits(pub), 2048);

    assert_int_equal(jwt_sign_rs256(g_key, "{\"aud\":\"x\"}", &tok), CRCR_OK);
    assert_int_equal(decode_verify(tok.data, pub), CRCR_OK);
    buf_reset(&tok);
    assert_int_equal(jwt_sign_rs256(g_other, "{\"aud\":\"x\"}", &tok), CRCR_OK);
    assert_int_equal(decode_verify(tok.data, pub), CRCR_E_INVALID);
    /* A public key cannot sign. */
    buf_reset(&tok);
    assert_int_not_equal(jwt_sign_rs256(pub, "{}", &tok), CRCR_OK);

    EVP_PKEY_free(pub);
    buf_free(&n);
    buf_free(&e);
    buf_free(&tok);
}

/* RFC 7515 Appendix A.2: the published RS256 example token and its key's n and e. */
static const char rfc7515_n[] =
    "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4"
    "d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5re"
    "xMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyx"
    "XFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ";
static const char rfc7515_token[] =
    "eyJhbGciOiJSUzI1NiJ9."
    "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVl"
    "fQ."
    "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5"
    "jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1"
    "L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYE"
    "UipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw";

static void test_rfc7515_a2_example_verifies_with_its_jwk(void **state)
{
    (void)state;
    EVP_PKEY *pub = NULL;
    assert_int_equal(jwt_rsa_public_from_jwk(rfc7515_n, "AQAB", &pub), CRCR_OK);
    jwt_parts p;
    jwt_parts_init(&p);
    assert_int_equal(jwt_decode(rfc7515_token, strlen(rfc7515_token), &p), CRCR_OK);
    assert_int_equal(jwt_verify_rs256(&p, pub), CRCR_OK);
    assert_string_equal(jv_str(jv_get(p.payload, "iss")), "joe");
    int64_t exp = 0;
    assert_true(jv_int(jv_get(p.payload, "exp"), &exp));
    assert_int_equal(exp, 1300819380);
    jwt_parts_free(&p);
    /* The same token does not verify under an unrelated key. */
    assert_int_equal(decode_verify(rfc7515_token, g_key), CRCR_E_INVALID);
    EVP_PKEY_free(pub);
}

static void test_jwk_rejects_small_modulus_even_exponent_and_bad_encoding(void **state)
{
    (void)state;
    EVP_PKEY *small = EVP_RSA_gen(1024);
    assert_non_null(small);
    buf_t n;
    buf_init(&n, 1024);
    rsa_param_b64(small, OSSL_PKEY_PARAM_RSA_N, &n);
    EVP_PKEY *pub = NULL;
    assert_int_equal(jwt_rsa_public_from_jwk(n.data, "AQAB", &pub), CRCR_E_INVALID);
    assert_null(pub);
    assert_int_equal(jwt_rsa_public_from_jwk(rfc7515_n, "AQAA", &pub), CRCR_E_INVALID); /* even */
    assert_int_equal(jwt_rsa_public_from_jwk(rfc7515_n, "AQ==", &pub), CRCR_E_INVALID);
    assert_int_equal(jwt_rsa_public_from_jwk(rfc7515_n, "", &pub), CRCR_E_INVALID);
    assert_int_equal(jwt_rsa_public_from_jwk("not+base64url", "AQAB", &pub), CRCR_E_INVALID);
    assert_null(pub);
    EVP_PKEY_free(small);
    buf_free(&n);
}

/* ---------------------------------------------------------------- PEM loading */

static void test_load_rsa_private_accepts_rsa_pem(void **state)
{
    (void)state;
    char *pem = key_pem(g_key, NULL);
    EVP_PKEY *k = NULL;
    assert_int_equal(jwt_load_rsa_private(pem, &k), CRCR_OK);
    assert_non_null(k);
    assert_int_equal(EVP_PKEY_eq(k, g_key), 1);
    EVP_PKEY_free(k);
    free(pem);
}

static void test_load_rsa_private_rejects_ec_key(void **state)
{
    (void)state;
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    assert_non_null(ec);
    char *pem = key_pem(ec, NULL);
    EVP_PKEY *k = NULL;
    assert_int_equal(jwt_load_rsa_private(pem, &k), CRCR_E_INVALID);
    assert_null(k);
    free(pem);
    EVP_PKEY_free(ec);
}

static void test_load_rsa_private_rejects_garbage_encrypted_and_small_keys(void **state)
{
    (void)state;
    EVP_PKEY *k = NULL;
    assert_int_equal(jwt_load_rsa_private("not a key", &k), CRCR_E_INVALID);
    assert_int_equal(jwt_load_rsa_private("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE "
                                          "KEY-----\n",
                                          &k),
                     CRCR_E_INVALID);
    /* Encrypted: refused without asking for a passphrase on the terminal. */
    char *enc = key_pem(g_key, EVP_aes_256_cbc());
    assert_non_null(strstr(enc, "ENCRYPTED"));
    assert_int_equal(jwt_load_rsa_private(enc, &k), CRCR_E_INVALID);
    free(enc);
    EVP_PKEY *small = EVP_RSA_gen(1024);
    char *pem = key_pem(small, NULL);
    assert_int_equal(jwt_load_rsa_private(pem, &k), CRCR_E_INVALID);
    assert_null(k);
    free(pem);
    EVP_PKEY_free(small);
}

/* ---------------------------------------------------------------- App JWT (github.c) */

static void check_app_jwt(const char *app_id, bool iss_is_int)
{
    char *pem = key_pem(g_key, NULL);
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.app_id = (char *)app_id;
    cfg.private_key_pem = pem;
    cfg.github_api_url = "https://api.github.com";
    char err[256] = "";
    gh_client *gh = gh_client_new(&cfg, err, sizeof(err));
    assert_non_null(gh);

    int64_t now = (int64_t)time(NULL);
    buf_t tok;
    buf_init(&tok, 8192);
    assert_int_equal(gh_app_jwt(gh, now, &tok), CRCR_OK);
    jwt_parts p;
    jwt_parts_init(&p);
    assert_int_equal(jwt_decode(tok.data, tok.len, &p), CRCR_OK);
    assert_int_equal(jwt_verify_rs256(&p, g_key), CRCR_OK);
    int64_t iat = 0, exp = 0;
    assert_true(jv_int(jv_get(p.payload, "iat"), &iat));
    assert_true(jv_int(jv_get(p.payload, "exp"), &exp));
    assert_int_equal(iat, now - 60);
    assert_true(exp > now && exp <= now + 600); /* GitHub refuses exp more than 10 min ahead */
    assert_int_equal(exp, now + 540);
    jv *iss = jv_get(p.payload, "iss");
    if (iss_is_int) {
        int64_t v = 0;
        assert_true(jv_int(iss, &v));
        assert_int_equal(v, strtoll(app_id, NULL, 10));
    } else {
        assert_string_equal(jv_str(iss), app_id);
    }
    assert_int_equal(jv_obj_len(p.payload), 3);
    jwt_parts_free(&p);
    buf_free(&tok);
    gh_client_free(gh);
    free(pem);
}

static void test_app_jwt_claims_iat_minus_60_exp_within_10_min_numeric_iss(void **state)
{
    (void)state;
    check_app_jwt("123456", true);
}

static void test_app_jwt_client_id_iss_is_a_string(void **state)
{
    (void)state;
    check_app_jwt("Iv1.8a61f9b3a7aba766", false);
}

static void test_client_refuses_non_rsa_private_key(void **state)
{
    (void)state;
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    char *pem = key_pem(ec, NULL);
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.app_id = "1";
    cfg.private_key_pem = pem;
    char err[256] = "";
    assert_null(gh_client_new(&cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "GITHUB_APP_PRIVATE_KEY"));
    assert_null(strstr(err, "BEGIN")); /* the key text never appears */
    free(pem);
    EVP_PKEY_free(ec);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64url_encodes_rfc4648_vectors_without_padding),
        cmocka_unit_test(test_b64url_uses_url_safe_alphabet),
        cmocka_unit_test(test_b64url_decode_rejects_padding_bad_chars_and_noncanonical_bits),
        cmocka_unit_test(test_b64url_respects_output_cap),
        cmocka_unit_test(test_sign_then_verify_round_trip),
        cmocka_unit_test(test_sign_appends_and_leaves_output_unchanged_on_error),
        cmocka_unit_test(test_tampered_payload_fails_verification),
        cmocka_unit_test(test_alg_other_than_rs256_is_rejected_even_with_valid_signature),
        cmocka_unit_test(test_unsigned_none_token_is_rejected),
        cmocka_unit_test(test_hs256_signed_with_public_key_bytes_is_rejected),
        cmocka_unit_test(test_decode_rejects_malformed_tokens),
        cmocka_unit_test(test_decode_caps_token_length_at_16k),
        cmocka_unit_test(test_wrong_length_signature_is_rejected),
        cmocka_unit_test(test_jwk_n_e_key_verifies_tokens_of_the_private_key),
        cmocka_unit_test(test_rfc7515_a2_example_verifies_with_its_jwk),
        cmocka_unit_test(test_jwk_rejects_small_modulus_even_exponent_and_bad_encoding),
        cmocka_unit_test(test_load_rsa_private_accepts_rsa_pem),
        cmocka_unit_test(test_load_rsa_private_rejects_ec_key),
        cmocka_unit_test(test_load_rsa_private_rejects_garbage_encrypted_and_small_keys),
        cmocka_unit_test(test_app_jwt_claims_iat_minus_60_exp_within_10_min_numeric_iss),
        cmocka_unit_test(test_app_jwt_client_id_iss_is_a_string),
        cmocka_unit_test(test_client_refuses_non_rsa_private_key),
    };
    int rc = cmocka_run_group_tests(tests, setup_keys, teardown_keys);
    curl_global_cleanup();
    return rc;
}
