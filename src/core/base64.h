/*
 * base64.h - base64 decoding (RFC 4648), the one decoder of the relay: the standard alphabet with
 * '=' padding, as GitHub's contents API sends a file (line breaks between characters), and the
 * URL-safe alphabet without padding, as JWTs and JWKs carry it (§5).
 *
 * OpenSSL's EVP_DecodeBlock turns characters into bytes. It checks neither the URL-safe alphabet
 * nor where '=' may stand nor the trailing bits, so each decoder checks its input first:
 *   base64_decode     [A-Za-z0-9+/], '=' only as the last one or two characters, a length that
 *                     is a multiple of 4 once CR, LF, space and tab are skipped
 *   base64url_decode  [A-Za-z0-9-_] only (no '=', no blanks), no length of the form 4k+1, and
 *                     the unused bits of the last character zero, so that every byte string has
 *                     exactly one encoding (a token cannot be altered without its signature
 *                     breaking)
 * Anything else is CRCR_E_INVALID. The bytes are appended to `out` within its cap
 * (CRCR_E_TOO_LARGE past it); on any error `out` is unchanged. Temporary copies are wiped
 * (OPENSSL_cleanse): tokens and keys pass through here.
 */
#ifndef CRCR_BASE64_H
#define CRCR_BASE64_H

#include <stddef.h>

#include "buf.h"
#include "err.h"

crcr_err base64_decode(const char *in, size_t n, buf_t *out);
crcr_err base64url_decode(const char *in, size_t n, buf_t *out);

#endif
