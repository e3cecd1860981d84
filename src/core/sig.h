/*
 * sig.h - the webhook signature, X-Hub-Signature-256.
 *
 * GitHub signs every delivery with HMAC-SHA256 over the raw body bytes, keyed with the App's
 * webhook secret, and sends it as "sha256=" followed by 64 hex digits. The relay verifies it
 * before parsing anything; `crcr webhook send` produces it.
 *
 * A body that arrives in pieces is verified as it arrives (sig_stream): the HTTP server feeds each
 * chunk to the MAC while it reads the body, so that the verdict is ready when the last byte is in
 * and the bytes of a forged body are never read twice. Both secrets of a rotation are run side by
 * side (two MACs over the same chunks).
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

/* True when `header_value` has the syntax "sha256=<64 hex>" (says nothing of the MAC itself). */
bool sig_header_valid(const char *header_value);

/**
 * Writes "sha256=<64 lowercase hex>" and a NUL into `out` (SIG_HEADER_SIZE bytes): the header
 * GitHub would send for `body[0..len)` signed with `secret`. `out` is "" if OpenSSL fails.
 */
void sig_sign(const char *secret, const char *body, size_t len, char out[SIG_HEADER_SIZE]);

/* At most this many secrets are checked side by side (current and previous). */
#define SIG_STREAM_SECRETS 2

/* A streaming verification: one HMAC-SHA256 per secret over the same bytes. */
typedef struct sig_stream sig_stream;

/**
 * Starts verifying a body against `header_value` with each of `secrets[0..n)` (NULL or empty
 * entries are skipped; at most SIG_STREAM_SECRETS). Returns NULL when the header is malformed,
 * no secret is usable or OpenSSL fails: such a body can never verify. The caller owns the result
 * (sig_stream_free).
 */
sig_stream *sig_stream_new(const char *header_value, const char *const *secrets, size_t n);

/* Adds `len` bytes of the body. */
void sig_stream_update(sig_stream *s, const void *data, size_t len);

/**
 * True when the bytes given so far match the header under one of the secrets (constant-time
 * comparison). Ends the stream: further updates are ignored and the answer stays the same.
 */
bool sig_stream_verify(sig_stream *s);

/* Frees; NULL is fine. Key material is cleansed. */
void sig_stream_free(sig_stream *s);

#endif
