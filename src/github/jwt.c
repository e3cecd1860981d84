/*
 * jwt.c - RS256 JWT signing and verification, base64url and RSA key loading on OpenSSL 3 EVP;
 * see jwt.h for why this is hand-written rather than taken from libjwt.
 */
#include "jwt.h"

#include <stdbool.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "base64.h"

/* The encoded header every token we sign carries: base64url of {"alg":"RS256","typ":"JWT"}. */
#define JWT_RS256_HEADER_JSON "{\"alg\":\"RS256\",\"typ\":\"JWT\"}"
/* Largest JWK exponent accepted, in bytes (65537 needs 3). */
#define JWT_JWK_E_MAX 8u

static const char b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Frees a buffer that held credential material after overwriting all of its memory. */
static void buf_wipe_free(buf_t *b)
{
    if (b->data)
        OPENSSL_cleanse(b->data, b->cap);
    buf_free(b);
}

crcr_err jwt_b64url_encode(const void *in, size_t n, buf_t *out)
{
    const unsigned char *p = in;
    size_t outlen = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (n > ((size_t)-1) / 2)
        return CRCR_E_TOO_LARGE;
    buf_t tmp;
    buf_init(&tmp, outlen);
    char quad[4];
    crcr_err err = CRCR_OK;
    size_t i = 0;
    for (; i + 3 <= n && !err; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        quad[0] = b64url_alphabet[(v >> 18) & 63];
        quad[1] = b64url_alphabet[(v >> 12) & 63];
        quad[2] = b64url_alphabet[(v >> 6) & 63];
        quad[3] = b64url_alphabet[v & 63];
        err = buf_append(&tmp, quad, 4);
    }
    if (!err && n - i == 1) {
        unsigned v = (unsigned)p[i] << 16;
        quad[0] = b64url_alphabet[(v >> 18) & 63];
        quad[1] = b64url_alphabet[(v >> 12) & 63];
        err = buf_append(&tmp, quad, 2);
    } else if (!err && n - i == 2) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
        quad[0] = b64url_alphabet[(v >> 18) & 63];
        quad[1] = b64url_alphabet[(v >> 12) & 63];
        quad[2] = b64url_alphabet[(v >> 6) & 63];
        err = buf_append(&tmp, quad, 3);
    }
    if (!err)
        err = buf_append(out, tmp.data ? tmp.data : "", tmp.len);
    buf_wipe_free(&tmp);
    return err;
}

/* True when `key` is a plain RSA key (not RSA-PSS, not EC) of at least the minimum size. */
static bool is_usable_rsa(EVP_PKEY *key)
{
    return key && EVP_PKEY_is_a(key, "RSA") && EVP_PKEY_get_bits(key) >= CRCR_JWT_RSA_MIN_BITS;
}

crcr_err jwt_sign_rs256(EVP_PKEY *key, const char *claims_json, buf_t *out)
{
    if (!is_usable_rsa(key) || !claims_json)
        return CRCR_E_INVALID;
    size_t claims_len = strlen(claims_json);
    if (claims_len > CRCR_JWT_MAX)
        return CRCR_E_TOO_LARGE;

    /* The token is assembled in a private buffer (wiped afterwards: it is a credential). */
    buf_t tok;
    buf_init(&tok, CRCR_JWT_MAX);
    unsigned char *sig = NULL;
    EVP_MD_CTX *md = NULL;
    crcr_err err = jwt_b64url_encode(JWT_RS256_HEADER_JSON, strlen(JWT_RS256_HEADER_JSON), &tok);
    if (!err)
        err = buf_putc(&tok, '.');
    if (!err)
        err = jwt_b64url_encode(claims_json, claims_len, &tok);
    size_t siglen = 0;
    if (!err) {
        md = EVP_MD_CTX_new();
        EVP_PKEY_CTX *pctx = NULL;
        if (!md || EVP_DigestSignInit(md, &pctx, EVP_sha256(), NULL, key) != 1 ||
            EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0 ||
            EVP_DigestSign(md, NULL, &siglen, (const unsigned char *)tok.data, tok.len) != 1)
            err = CRCR_E_CRYPTO;
    }
    if (!err && !(sig = OPENSSL_malloc(siglen)))
        err = CRCR_E_NOMEM;
    if (!err && EVP_DigestSign(md, sig, &siglen, (const unsigned char *)tok.data, tok.len) != 1)
        err = CRCR_E_CRYPTO;
    if (!err)
        err = buf_putc(&tok, '.');
    if (!err)
        err = jwt_b64url_encode(sig, siglen, &tok);
    if (!err)
        err = buf_append(out, tok.data, tok.len);

    OPENSSL_free(sig);
    EVP_MD_CTX_free(md);
    buf_wipe_free(&tok);
    if (err == CRCR_E_CRYPTO)
        ERR_clear_error();
    return err;
}

void jwt_parts_init(jwt_parts *p)
{
    p->header = NULL;
    p->payload = NULL;
    buf_init(&p->signing_input, CRCR_JWT_MAX);
    buf_init(&p->signature, CRCR_JWT_MAX);
}

void jwt_parts_free(jwt_parts *p)
{
    jv_free(p->header);
    jv_free(p->payload);
    p->header = NULL;
    p->payload = NULL;
    buf_wipe_free(&p->signing_input);
    buf_free(&p->signature);
}

/* Decodes one base64url segment that must hold a JSON object; returns a new reference. */
static crcr_err decode_json_segment(const char *s, size_t n, jv **out)
{
    buf_t raw;
    buf_init(&raw, CRCR_JWT_MAX);
    crcr_err err = base64url_decode(s, n, &raw);
    if (!err) {
        jv *v = jv_parse(buf_cstr(&raw), raw.len, NULL, 0);
        if (!v || !jv_is_obj(v)) {
            jv_free(v);
            err = CRCR_E_INVALID;
        } else {
            *out = v;
        }
    }
    buf_wipe_free(&raw);
    return err;
}

crcr_err jwt_decode(const char *token, size_t len, jwt_parts *out)
{
    if (!token)
        return CRCR_E_INVALID;
    if (len > CRCR_JWT_MAX)
        return CRCR_E_TOO_LARGE;
    const char *dot1 = memchr(token, '.', len);
    if (!dot1)
        return CRCR_E_INVALID;
    const char *dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token));
    if (!dot2 || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)))
        return CRCR_E_INVALID;
    size_t hlen = (size_t)(dot1 - token);
    size_t plen = (size_t)(dot2 - dot1 - 1);
    size_t slen = len - (size_t)(dot2 + 1 - token);
    if (hlen == 0 || plen == 0)
        return CRCR_E_INVALID;

    crcr_err err = decode_json_segment(token, hlen, &out->header);
    if (!err)
        err = decode_json_segment(dot1 + 1, plen, &out->payload);
    if (!err)
        err = base64url_decode(dot2 + 1, slen, &out->signature);
    if (!err)
        err = buf_append(&out->signing_input, token, (size_t)(dot2 - token));
    return err;
}

crcr_err jwt_verify_rs256(const jwt_parts *p, EVP_PKEY *pub)
{
    if (!p || !p->header || !p->payload || !p->signing_input.data)
        return CRCR_E_INVALID;
    /* The algorithm is fixed by us, never chosen by the token. */
    const char *alg = jv_str(jv_get(p->header, "alg"));
    if (!alg || strcmp(alg, "RS256") != 0)
        return CRCR_E_INVALID;
    /* RFC 7515 §4.1.11: extensions we do not understand must make the token invalid. */
    if (jv_get(p->header, "crit"))
        return CRCR_E_INVALID;
    if (!is_usable_rsa(pub))
        return CRCR_E_INVALID;
    if (p->signature.len == 0 || p->signature.len != (size_t)EVP_PKEY_get_size(pub))
        return CRCR_E_INVALID;

    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md)
        return CRCR_E_NOMEM;
    EVP_PKEY_CTX *pctx = NULL;
    crcr_err err = CRCR_OK;
    if (EVP_DigestVerifyInit(md, &pctx, EVP_sha256(), NULL, pub) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0) {
        err = CRCR_E_CRYPTO;
    } else if (EVP_DigestVerify(md, (const unsigned char *)p->signature.data, p->signature.len,
                                (const unsigned char *)p->signing_input.data,
                                p->signing_input.len) != 1) {
        err = CRCR_E_INVALID;
    }
    EVP_MD_CTX_free(md);
    ERR_clear_error();
    return err;
}

crcr_err jwt_rsa_public_from_jwk(const char *n_b64, const char *e_b64, EVP_PKEY **out)
{
    if (!n_b64 || !e_b64 || !out)
        return CRCR_E_INVALID;
    size_t nlen = strlen(n_b64), elen = strlen(e_b64);
    /* Allow one leading zero byte on the modulus beyond the maximum size. */
    if (nlen > ((CRCR_JWT_RSA_MAX_BITS / 8 + 1) * 4 + 2) / 3 || elen > (JWT_JWK_E_MAX * 4 + 2) / 3)
        return CRCR_E_TOO_LARGE;
    buf_t nb, eb;
    buf_init(&nb, CRCR_JWT_RSA_MAX_BITS / 8 + 1);
    buf_init(&eb, JWT_JWK_E_MAX);
    BIGNUM *n = NULL, *e = NULL;
    OSSL_PARAM_BLD *bld = NULL;
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *ctx = NULL;
    EVP_PKEY *key = NULL;

    crcr_err err = base64url_decode(n_b64, nlen, &nb);
    if (!err)
        err = base64url_decode(e_b64, elen, &eb);
    if (!err && (nb.len == 0 || eb.len == 0))
        err = CRCR_E_INVALID;
    if (!err) {
        n = BN_bin2bn((const unsigned char *)nb.data, (int)nb.len, NULL);
        e = BN_bin2bn((const unsigned char *)eb.data, (int)eb.len, NULL);
        if (!n || !e)
            err = CRCR_E_NOMEM;
    }
    if (!err && (BN_num_bits(n) < CRCR_JWT_RSA_MIN_BITS || BN_num_bits(n) > CRCR_JWT_RSA_MAX_BITS ||
                 !BN_is_odd(n) || !BN_is_odd(e) || BN_is_one(e)))
        err = CRCR_E_INVALID;
    if (!err) {
        bld = OSSL_PARAM_BLD_new();
        if (!bld || !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) ||
            !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) ||
            !(params = OSSL_PARAM_BLD_to_param(bld)))
            err = CRCR_E_NOMEM;
    }
    if (!err) {
        ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
        if (!ctx || EVP_PKEY_fromdata_init(ctx) != 1 ||
            EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) != 1)
            err = CRCR_E_CRYPTO;
    }
    if (!err)
        *out = key;
    else
        EVP_PKEY_free(key);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    BN_free(n);
    BN_free(e);
    buf_free(&nb);
    buf_free(&eb);
    ERR_clear_error();
    return err;
}

/* Passphrase callback that refuses: an encrypted key is an error, never an interactive prompt. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

crcr_err jwt_load_rsa_private(const char *pem, EVP_PKEY **out)
{
    if (!pem || !out)
        return CRCR_E_INVALID;
    size_t len = strlen(pem);
    if (len > CRCR_JWT_PEM_MAX)
        return CRCR_E_TOO_LARGE;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio)
        return CRCR_E_NOMEM;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    BIO_free(bio);
    ERR_clear_error();
    if (!key)
        return CRCR_E_INVALID;
    if (!is_usable_rsa(key)) {
        EVP_PKEY_free(key);
        return CRCR_E_INVALID;
    }
    *out = key;
    return CRCR_OK;
}
