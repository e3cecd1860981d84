/*
 * utf8.h - the one well-formed UTF-8 check, shared by the JSON validator (json_select.c), the
 * PostgreSQL store's text repair (store_pg.c) and `crcr report`'s JSON writer (report.c).
 *
 * Unicode's rules (which are jansson's and PostgreSQL's): no overlong forms, no surrogates
 * (U+D800-U+DFFF), nothing above U+10FFFF. Written here because neither OpenSSL, libpq nor
 * jansson exposes a validator for a byte range.
 */
#ifndef CRCR_UTF8_H
#define CRCR_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length (1-4) of the well-formed sequence at s, of which `avail` (>= 1) bytes may be read;
 * 0 when it is ill-formed or cut short. */
static inline size_t utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    }
    return n;
}

/* Decodes the well-formed sequence at s (utf8_seq's rules) into *cp; returns its length, or 0. */
static inline size_t utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp)
{
    size_t n = utf8_seq(s, avail);
    if (n == 1)
        *cp = s[0];
    else if (n == 2)
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    else if (n == 3)
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    else if (n == 4)
        *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return n;
}

/* Whether s[0..n) is well-formed UTF-8 throughout. */
static inline bool utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

#endif
