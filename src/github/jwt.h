/*
 * jwt.h - the small JWT toolkit crcr needs: RS256 signing (GitHub App JWT) and RS256
 * verification (GitHub Actions OIDC tokens on callbacks), base64url encoding (decoding is
 * base64.h's, shared with the contents API), and RSA key loading.
 *
 * Hand-written on OpenSSL 3 EVP instead of using libjwt: libjwt has a CVE history (Debian 12 ships
 * a fix for CVE-2024-25189, a timing leak through strcmp), its API changed incompatibly across
 * 1.x/2.x/3.x, and what crcr needs is about a hundred lines on top of EVP_DigestSign/Verify that
 * OpenSSL (already linked by libcurl) provides. Owning the code also lets the verifier be strict:
 * only RS256 is accepted (never "none", HS256 or anything chosen by the token), base64url must be
 * canonical and unpadded, JSON goes through json.h (duplicate keys rejected), and every input has a
 * cap.
 *
 * Error codes: CRCR_E_INVALID for malformed or unacceptable input (bad encoding, wrong alg, wrong
 * key type, bad signature), CRCR_E_TOO_LARGE for inputs over their cap, CRCR_E_CRYPTO for an
 * OpenSSL failure that is not the input's fault, CRCR_E_NOMEM for allocation failures.
 * Thread safety: every function is reentrant; an EVP_PKEY may be used by several threads at once.
 */
#ifndef CRCR_JWT_H
#define CRCR_JWT_H

#include <stddef.h>

#include <openssl/types.h>

#include "buf.h"
#include "err.h"
#include "json.h"

/* Longest token jwt_decode() accepts (GitHub OIDC tokens are about 1.2 KB). */
#define CRCR_JWT_MAX (16u * 1024u)
/* Longest PEM text jwt_load_rsa_private() reads (a 4096-bit RSA key is about 3.3 KB). */
#define CRCR_JWT_PEM_MAX (64u * 1024u)
/* Smallest RSA modulus accepted for signing and verifying. */
#define CRCR_JWT_RSA_MIN_BITS 2048
/* Largest RSA modulus accepted from a JWK. */
#define CRCR_JWT_RSA_MAX_BITS 8192

/* A decoded (not yet verified) compact JWS. */
typedef struct jwt_parts {
    jv *header;          /* the JOSE header, a JSON object (owned) */
    jv *payload;         /* the claims, a JSON object (owned) */
    buf_t signing_input; /* "<header b64>.<payload b64>", the bytes the signature covers */
    buf_t signature;     /* the raw signature bytes */
} jwt_parts;

/* Appends the unpadded base64url encoding of `in[0..n)` to `out` (within out's cap). On error
 * `out` is unchanged. */
crcr_err jwt_b64url_encode(const void *in, size_t n, buf_t *out);

/* Signs `claims_json` (a JSON object text, used verbatim) with RS256 under the header
 * {"alg":"RS256","typ":"JWT"} and appends the compact token to `out`. `key` must be an RSA
 * private key (borrowed). On error `out` is unchanged. */
crcr_err jwt_sign_rs256(EVP_PKEY *key, const char *claims_json, buf_t *out);

/* Prepares an empty holder; jwt_parts_free() must be called after jwt_decode(), also on error. */
void jwt_parts_init(jwt_parts *p);
/* Frees everything the holder owns; it may be reused after jwt_parts_init(). */
void jwt_parts_free(jwt_parts *p);

/* Splits `token[0..len)` (at most CRCR_JWT_MAX bytes, exactly three dot-separated parts) and
 * decodes header and payload (both must be JSON objects) and the signature. Nothing is verified:
 * call jwt_verify_rs256() before trusting any claim. Fills `out`, which owns the results. */
crcr_err jwt_decode(const char *token, size_t len, jwt_parts *out);

/* Verifies a decoded token: the header's "alg" must be exactly "RS256" (anything else, "none",
 * HS256, ES256, PS256, is CRCR_E_INVALID), the header must not carry "crit", `pub` must be an RSA
 * key of at least CRCR_JWT_RSA_MIN_BITS, and the signature must be a valid RSASSA-PKCS1-v1_5
 * SHA-256 signature over the signing input. CRCR_OK only when all of that holds. Claims (exp,
 * aud, iss...) are the caller's business. */
crcr_err jwt_verify_rs256(const jwt_parts *p, EVP_PKEY *pub);

/* Builds an RSA public key from a JWK's "n" and "e" members (base64url, big-endian). The modulus
 * must have CRCR_JWT_RSA_MIN_BITS..CRCR_JWT_RSA_MAX_BITS bits and the exponent must be odd and
 * > 1. On success *out is a new key the caller frees with EVP_PKEY_free(). */
crcr_err jwt_rsa_public_from_jwk(const char *n_b64, const char *e_b64, EVP_PKEY **out);

/* Loads a private key from PEM text (PKCS#1 "RSA PRIVATE KEY" or PKCS#8 "PRIVATE KEY"; encrypted
 * keys are refused, never prompted for). Fails with CRCR_E_INVALID unless it is an RSA key of at
 * least CRCR_JWT_RSA_MIN_BITS. On success *out is a new key the caller frees with EVP_PKEY_free().
 */
crcr_err jwt_load_rsa_private(const char *pem, EVP_PKEY **out);

#endif
