/*
 * payload_pack.h - the SQLite store's form of a delivery's payload: packed when that pays.
 *
 * A packed payload is PAYLOAD_PACK_TAG (2 bytes, a NUL first: no webhook body, which is JSON,
 * starts with one), the payload's length (4 bytes, little-endian), then an LZ4 block of it
 * (LZ4_compress_default's format). Stores of schema 8 hold payloads packed the same way with a
 * zlib stream under PAYLOAD_PACK_TAG_ZLIB; they are read back as well. Anything else is a payload
 * stored as it is (every store written before schema 8, and payloads under PAYLOAD_PACK_MIN
 * bytes or that do not shrink). Readers take all three.
 */
#ifndef CRCR_PAYLOAD_PACK_H
#define CRCR_PAYLOAD_PACK_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"

#define PAYLOAD_PACK_TAG "\0l"
#define PAYLOAD_PACK_TAG_ZLIB "\0z"
#define PAYLOAD_PACK_TAG_LEN 2u
#define PAYLOAD_PACK_HEAD_LEN (PAYLOAD_PACK_TAG_LEN + 4u)
/* Payloads shorter than this are stored as they are. */
#define PAYLOAD_PACK_MIN 1024u
/* Longest payload packed or unpacked: GitHub's 25 MB webhook cap, with room. */
#define PAYLOAD_PACK_MAX (64u * 1024u * 1024u)
/* The cap payload_pack's `out` needs: a packed form is kept only when it is shorter than the
 * payload. */
#define PAYLOAD_PACK_OUT_MAX PAYLOAD_PACK_MAX

/* Whether `blob` is a packed payload (its head, at least). */
bool payload_packed(const void *blob, size_t len);

/* Writes the stored form of payload `p` into `out` (reset first; its cap PAYLOAD_PACK_OUT_MAX):
 * packed when `len` is within
 * PAYLOAD_PACK_MIN..PAYLOAD_PACK_MAX and the packed form is shorter, else *stored is `p` itself
 * and `out` stays empty. *stored / *stored_len: what to store (`p`, or out's bytes).
 * CRCR_E_NOMEM (out of memory for the packed form). */
crcr_err payload_pack(const char *p, size_t len, buf_t *out, const void **stored,
                      size_t *stored_len);

/* Appends payload `blob` as it was given to payload_pack (unpacked, or as it is) to `out`.
 * CRCR_E_INVALID for a packed payload that does not inflate to its recorded length,
 * CRCR_E_TOO_LARGE past PAYLOAD_PACK_MAX or out's cap, CRCR_E_NOMEM. */
crcr_err payload_unpack(const void *blob, size_t len, buf_t *out);

#endif
