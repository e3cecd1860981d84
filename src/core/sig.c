/*
 * sig.c - X-Hub-Signature-256 signing and verification; see sig.h.
 *
 * The MAC itself is OpenSSL's: the one-shot HMAC() for a body in memory, EVP_MAC ("HMAC" with
 * SHA-256) for a body verified as it streams in (sig_stream); only the header syntax ("sha256=" +
 * hex) is parsed here. The expected MAC is compared with CRYPTO_memcmp and is never returned or
 * printed.
 */
#include "sig.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include "ids.h"

#define SIG_PREFIX "sha256="
#define SIG_PREFIX_LEN (sizeof(SIG_PREFIX) - 1)
#define SIG_MAC_LEN 32u

/* HMAC-SHA256 of body keyed with secret into mac; false when OpenSSL fails. */
static bool hmac_sha256(const char *secret, const char *body, size_t len,
                        unsigned char mac[SIG_MAC_LEN])
{
    unsigned int mac_len = 0;
    size_t klen = strlen(secret);
    if (klen > (size_t)INT32_MAX)
        return false;
    /* HMAC() wants a non-NULL data pointer even for an empty message. */
    const unsigned char *data = (const unsigned char *)(body ? body : "");
    if (!HMAC(EVP_sha256(), secret, (int)klen, data, len, mac, &mac_len))
        return false;
    return mac_len == SIG_MAC_LEN;
}

/* The MAC a well-formed header carries, into `given`; false for anything malformed. */
static bool parse_header(const char *header_value, unsigned char given[SIG_MAC_LEN])
{
    if (!header_value || strlen(header_value) != SIG_HEADER_LEN ||
        memcmp(header_value, SIG_PREFIX, SIG_PREFIX_LEN) != 0)
        return false;
    const char *hex = header_value + SIG_PREFIX_LEN;
    for (size_t i = 0; i < SIG_MAC_LEN; i++) {
        int hi = ids_hex_value(hex[2 * i]);
        int lo = ids_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        given[i] = (unsigned char)((hi << 4) | lo);
    }
    return true;
}

bool sig_header_valid(const char *header_value)
{
    unsigned char given[SIG_MAC_LEN];
    return parse_header(header_value, given);
}

bool sig_verify(const char *header_value, const char *body, size_t len, const char *secret)
{
    if (!header_value || !secret || !*secret || (!body && len > 0))
        return false;
    unsigned char given[SIG_MAC_LEN];
    if (!parse_header(header_value, given))
        return false;

    unsigned char expected[SIG_MAC_LEN];
    if (!hmac_sha256(secret, body, len, expected))
        return false;
    bool ok = CRYPTO_memcmp(given, expected, SIG_MAC_LEN) == 0;
    OPENSSL_cleanse(expected, sizeof(expected));
    return ok;
}

void sig_sign(const char *secret, const char *body, size_t len, char out[SIG_HEADER_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char mac[SIG_MAC_LEN];
    out[0] = '\0';
    if (!secret || (!body && len > 0) || !hmac_sha256(secret, body, len, mac))
        return;
    memcpy(out, SIG_PREFIX, SIG_PREFIX_LEN);
    for (size_t i = 0; i < SIG_MAC_LEN; i++) {
        out[SIG_PREFIX_LEN + 2 * i] = digits[mac[i] >> 4];
        out[SIG_PREFIX_LEN + 2 * i + 1] = digits[mac[i] & 0x0f];
    }
    out[SIG_HEADER_LEN] = '\0';
    OPENSSL_cleanse(mac, sizeof(mac));
}

/* ---- streaming ---- */

struct sig_stream {
    unsigned char given[SIG_MAC_LEN];
    EVP_MAC_CTX *mac[SIG_STREAM_SECRETS];
    size_t n;
    bool done, ok;
};

/* OpenSSL's HMAC implementation, fetched once (the fetch is a locked lookup in the provider). */
static EVP_MAC *g_hmac;
static pthread_once_t g_hmac_once = PTHREAD_ONCE_INIT;

static void fetch_hmac(void)
{
    g_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

sig_stream *sig_stream_new(const char *header_value, const char *const *secrets, size_t n)
{
    pthread_once(&g_hmac_once, fetch_hmac);
    sig_stream *s = calloc(1, sizeof(*s));
    if (!s || !g_hmac || !parse_header(header_value, s->given)) {
        free(s);
        return NULL;
    }
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    for (size_t i = 0; i < n && s->n < SIG_STREAM_SECRETS; i++) {
        if (!secrets[i] || !*secrets[i])
            continue;
        EVP_MAC_CTX *c = EVP_MAC_CTX_new(g_hmac);
        if (!c || !EVP_MAC_init(c, (const unsigned char *)secrets[i], strlen(secrets[i]), params)) {
            EVP_MAC_CTX_free(c);
            sig_stream_free(s);
            return NULL;
        }
        s->mac[s->n++] = c;
    }
    if (s->n == 0) {
        sig_stream_free(s);
        return NULL;
    }
    return s;
}

void sig_stream_update(sig_stream *s, const void *data, size_t len)
{
    if (!s || s->done || len == 0)
        return;
    for (size_t i = 0; i < s->n; i++) {
        if (s->mac[i] && !EVP_MAC_update(s->mac[i], data, len)) {
            EVP_MAC_CTX_free(s->mac[i]); /* cannot verify any more */
            s->mac[i] = NULL;
        }
    }
}

bool sig_stream_verify(sig_stream *s)
{
    if (!s)
        return false;
    if (s->done)
        return s->ok;
    s->done = true;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char expected[SIG_MAC_LEN];
        size_t got = 0;
        if (!s->mac[i] || !EVP_MAC_final(s->mac[i], expected, &got, sizeof(expected)))
            continue;
        /* Every secret is checked, whichever matches: the time does not tell which one did. */
        if (got == SIG_MAC_LEN && CRYPTO_memcmp(s->given, expected, SIG_MAC_LEN) == 0)
            s->ok = true;
        OPENSSL_cleanse(expected, sizeof(expected));
    }
    return s->ok;
}

void sig_stream_free(sig_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        EVP_MAC_CTX_free(s->mac[i]); /* cleanses the key schedule */
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}
