/*
 * cbtoken.c - callback tokens; see cbtoken.h.
 *
 * The key K of a token depends on the secret alone, so it is derived once per secret and kept as
 * an HMAC context keyed with it (CBTOKEN_KEYS secrets at most: the secret and the previous one of
 * a rotation, and tests' own); a token then costs one HMAC of its short message from a copy of
 * that context. Deriving K for every token with OpenSSL 3's one-shot HMAC() (which fetches the
 * algorithm by name, under the provider store's lock, on every call) and writing the hex digits
 * with snprintf took 3.9 % of the App-mode ingest's CPU (two HMACs per dispatch; bench/RESULTS.md).
 * A secret is known by its SHA-256, compared in constant time; no copy of it is kept.
 */
#include "cbtoken.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/sha.h>

#include "buf.h"
#include "crcr_limits.h"

static const char KEY_LABEL[] = "crcr callback token key v1";

/* Secrets whose keyed context is kept; one more replaces the oldest. */
#define CBTOKEN_KEYS 4

typedef struct keyed {
    unsigned char id[SHA256_DIGEST_LENGTH]; /* SHA-256 of the secret */
    EVP_MAC_CTX *ctx;                       /* HMAC-SHA256 keyed with K (owned) */
} keyed;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static EVP_MAC *g_hmac;  /* fetched once; NULL: every token takes the one-shot way */
static EVP_MD *g_sha256; /* fetched once; NULL: a secret's id is made by SHA256() */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static keyed g_keys[CBTOKEN_KEYS]; /* owned by this module for the process's life */
static size_t g_next;              /* the entry the next new secret takes */

static void fetch_once(void)
{
    g_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    g_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* A secret's id: its SHA-256, with the digest fetched once. OpenSSL 3's one-shot SHA256() looks
 * the algorithm up by name (a locked fetch and a string copy) on every call; it was 0.6 % of the
 * App-mode ingest's CPU, once per dispatch. */
static void secret_id(const char *secret, unsigned char id[SHA256_DIGEST_LENGTH])
{
    unsigned int n = 0;
    if (!g_sha256 || EVP_Digest(secret, strlen(secret), id, &n, g_sha256, NULL) != 1 ||
        n != SHA256_DIGEST_LENGTH)
        SHA256((const unsigned char *)secret, strlen(secret), id);
}

/* K for `secret` (cbtoken.h). */
static void derive(const char *secret, unsigned char key[32])
{
    unsigned int klen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)KEY_LABEL,
         sizeof(KEY_LABEL) - 1, key, &klen);
}

/* A context keyed with `secret`'s K for one token (the caller frees it), or NULL (no memory, no
 * HMAC): the caller then takes the one-shot way. */
static EVP_MAC_CTX *keyed_ctx(const char *secret)
{
    pthread_once(&g_once, fetch_once);
    if (!g_hmac)
        return NULL;
    unsigned char id[SHA256_DIGEST_LENGTH];
    secret_id(secret, id);
    EVP_MAC_CTX *out = NULL;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < CBTOKEN_KEYS && !out; i++)
        if (g_keys[i].ctx && CRYPTO_memcmp(g_keys[i].id, id, sizeof(id)) == 0)
            out = EVP_MAC_CTX_dup(g_keys[i].ctx);
    if (!out) {
        unsigned char key[32];
        derive(secret, key);
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end()};
        EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(g_hmac);
        if (ctx && EVP_MAC_init(ctx, key, sizeof(key), params) == 1) {
            keyed *k = &g_keys[g_next];
            g_next = (g_next + 1) % CBTOKEN_KEYS;
            EVP_MAC_CTX_free(k->ctx);
            memcpy(k->id, id, sizeof(id));
            k->ctx = ctx;
            out = EVP_MAC_CTX_dup(ctx);
        } else {
            EVP_MAC_CTX_free(ctx);
        }
        OPENSSL_cleanse(key, sizeof(key));
    }
    pthread_mutex_unlock(&g_mu);
    return out;
}

void cbtoken_make(const char *secret, const char *delivery_id, const char *repo,
                  const char *head_sha, int64_t pr_number, char out[CBTOKEN_SIZE])
{
    cbtoken_make_pair(secret, delivery_id, repo, head_sha, pr_number, 0, NULL, out);
}

void cbtoken_make_pair(const char *secret, const char *delivery_id, const char *repo,
                       const char *head_sha, int64_t pr_number, int64_t pair_number,
                       const char *pair_sha, char out[CBTOKEN_SIZE])
{
    unsigned char mac[32];
    char lower[CRCR_REPO_NAME_MAX];
    size_t n = 0;
    for (; repo[n] && n + 1 < sizeof(lower); n++)
        lower[n] = (char)tolower((unsigned char)repo[n]);
    lower[n] = '\0';
    buf_t m;
    buf_init(&m, 4096);
    buf_printf(&m, "v1\n%s\n%s\n%s\n%lld", delivery_id, lower, head_sha ? head_sha : "",
               (long long)pr_number);
    if (pair_number > 0)
        buf_printf(&m, "\npair\n%lld\n%s", (long long)pair_number, pair_sha ? pair_sha : "");
    const unsigned char *msg = (const unsigned char *)buf_cstr(&m);
    EVP_MAC_CTX *ctx = keyed_ctx(secret);
    size_t mlen = 0;
    if (!ctx || EVP_MAC_update(ctx, msg, m.len) != 1 ||
        EVP_MAC_final(ctx, mac, &mlen, sizeof(mac)) != 1 || mlen != sizeof(mac)) {
        unsigned char key[32];
        unsigned int len = 0;
        derive(secret, key);
        HMAC(EVP_sha256(), key, (int)sizeof(key), msg, m.len, mac, &len);
        OPENSSL_cleanse(key, sizeof(key));
    }
    EVP_MAC_CTX_free(ctx);
    buf_free(&m);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "v1.", 3);
    for (unsigned i = 0; i < 32; i++) {
        out[3 + 2 * i] = hex[mac[i] >> 4];
        out[4 + 2 * i] = hex[mac[i] & 15];
    }
    out[CBTOKEN_SIZE - 1] = '\0';
    OPENSSL_cleanse(mac, sizeof(mac));
}

bool cbtoken_verify(const char *secret, const char *previous, const char *token,
                    const char *delivery_id, const char *repo, const char *head_sha,
                    int64_t pr_number)
{
    return cbtoken_verify_pair(secret, previous, token, delivery_id, repo, head_sha, pr_number, 0,
                               NULL);
}

bool cbtoken_verify_pair(const char *secret, const char *previous, const char *token,
                         const char *delivery_id, const char *repo, const char *head_sha,
                         int64_t pr_number, int64_t pair_number, const char *pair_sha)
{
    if (!token || strlen(token) != CBTOKEN_SIZE - 1)
        return false;
    char want[CBTOKEN_SIZE];
    bool ok = false;
    if (secret) {
        cbtoken_make_pair(secret, delivery_id, repo, head_sha, pr_number, pair_number, pair_sha,
                          want);
        ok = CRYPTO_memcmp(want, token, CBTOKEN_SIZE - 1) == 0;
    }
    if (!ok && previous) {
        cbtoken_make_pair(previous, delivery_id, repo, head_sha, pr_number, pair_number, pair_sha,
                          want);
        ok = CRYPTO_memcmp(want, token, CBTOKEN_SIZE - 1) == 0;
    }
    return ok;
}
