/* base64.c - base64 and base64url decoding on OpenSSL's EVP decoder; see base64.h. */
#include "base64.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* Decodes `c` characters of padded standard base64 (`pad` of them '=') from `std` and appends the
 * bytes to `out`. EVP_DecodeBlock takes an int length and yields the padding as zero bytes. */
static crcr_err decode_block(const unsigned char *std, size_t c, size_t pad, buf_t *out)
{
    if (c == 0)
        return CRCR_OK;
    if (c > INT32_MAX)
        return CRCR_E_TOO_LARGE;
    unsigned char *dst = malloc(c / 4 * 3 + 1);
    if (!dst)
        return CRCR_E_NOMEM;
    int got = EVP_DecodeBlock(dst, std, (int)c);
    crcr_err err = CRCR_E_INVALID;
    if (got >= 0 && (size_t)got >= pad)
        err = buf_append(out, dst, (size_t)got - pad);
    OPENSSL_cleanse(dst, c / 4 * 3 + 1);
    free(dst);
    return err;
}

static bool std_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '+' || ch == '/';
}

crcr_err base64_decode(const char *in, size_t n, buf_t *out)
{
    unsigned char *clean = malloc(n + 1);
    if (!clean)
        return CRCR_E_NOMEM;
    size_t c = 0, pad = 0;
    crcr_err err = CRCR_OK;
    for (size_t i = 0; i < n && !err; i++) {
        char ch = in[i];
        if (ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t')
            continue;
        if (ch == '=')
            pad++;
        else if (!std_char(ch) || pad) /* '=' only as the last characters */
            err = CRCR_E_INVALID;
        clean[c++] = (unsigned char)ch;
    }
    if (!err && (c % 4 != 0 || pad > 2))
        err = CRCR_E_INVALID;
    if (!err)
        err = decode_block(clean, c, pad, out);
    OPENSSL_cleanse(clean, n + 1);
    free(clean);
    return err;
}

/* The 6-bit value of a base64url character, or -1. */
static int url_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '-')
        return 62;
    if (ch == '_')
        return 63;
    return -1;
}

crcr_err base64url_decode(const char *in, size_t n, buf_t *out)
{
    if (n % 4 == 1)
        return CRCR_E_INVALID;
    size_t pad = (4 - n % 4) % 4, c = n + pad;
    unsigned char *std = malloc(c + 1);
    if (!std)
        return CRCR_E_NOMEM;
    crcr_err err = CRCR_OK;
    int last = 0;
    for (size_t i = 0; i < n && !err; i++) {
        last = url_value(in[i]);
        if (last < 0)
            err = CRCR_E_INVALID;
        std[i] = in[i] == '-' ? '+' : in[i] == '_' ? '/' : (unsigned char)in[i];
    }
    /* The bits the last character carries past the last byte: 4 of it before "==", 2 before
     * "=". They must be zero. */
    if (!err && pad && (last & (pad == 2 ? 0x0f : 0x03)))
        err = CRCR_E_INVALID;
    for (size_t i = n; i < c; i++)
        std[i] = '=';
    if (!err)
        err = decode_block(std, c, pad, out);
    OPENSSL_cleanse(std, c + 1);
    free(std);
    return err;
}
