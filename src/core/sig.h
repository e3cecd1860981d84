/*
 * sig.h - the webhook signature, X-Hub-Signature-256.
 *
 * GitHub signs every delivery with HMAC-SHA256 over the raw body bytes, keyed with the App's
 * webhook secret, and sends it as "sha256=" followed by 64 hex digits. The relay verifies it
 * before parsing anything; `crcr webhook send` produces it.
 */
#ifndef CRCR_SIG_H
#define CRCR_SIG_H

#include <stdbool.h>
#include <stddef.h>

/* "sha256=" + 64 hex digits. */
#define SIG_HEADER_LEN 71u
/* Room for a signature header and its NUL. */
#define SIG_HEADER_SIZE 72u

/**
 * True when `header_value` is "sha256=<64 hex>" (either case of hex digit) and equals the
 * HMAC-SHA256 of `body[0..len)` keyed with `secret`. The comparison is constant time
 * (CRYPTO_memcmp). Anything malformed - NULL, a missing prefix, a wrong length, a non-hex digit -
 * and a NULL or empty secret give false. `body` may be NULL when `len` is 0.
 */
bool sig_verify(const char *header_value, const char *body, size_t len, const char *secret);

/**
 * Writes "sha256=<64 lowercase hex>" and a NUL into `out` (SIG_HEADER_SIZE bytes): the header
 * GitHub would send for `body[0..len)` signed with `secret`. `out` is "" if OpenSSL fails.
 */
void sig_sign(const char *secret, const char *body, size_t len, char out[SIG_HEADER_SIZE]);

#endif
