/*
 * sig.c - X-Hub-Signature-256 signing and verification; see sig.h.
 *
 * The MAC itself is OpenSSL's one-shot HMAC(); only the header syntax ("sha256=" + hex) is parsed
 * here. The expected MAC is compared with CRYPTO_memcmp and is never returned or printed.
 */
#include "sig.h"

#include <stdint.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

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

bool sig_verify(const char *header_value, const char *body, size_t len, const char *secret)
{
    if (!header_value || !secret || !*secret || (!body && len > 0))
        return false;
    if (strlen(header_value) != SIG_HEADER_LEN ||
        memcmp(header_value, SIG_PREFIX, SIG_PREFIX_LEN) != 0)
        return false;

    unsigned char given[SIG_MAC_LEN];
    const char *hex = header_value + SIG_PREFIX_LEN;
    for (size_t i = 0; i < SIG_MAC_LEN; i++) {
        int hi = ids_hex_value(hex[2 * i]);
        int lo = ids_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        given[i] = (unsigned char)((hi << 4) | lo);
    }

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
