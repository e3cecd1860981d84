/*
 * payload_pack.c - a delivery's payload deflated for the SQLite store; see payload_pack.h.
 *
 * Why: every webhook's payload (~24-30 KB for a pull_request event) was written whole to the
 * WAL, synced, and written again by each checkpoint: eight overflow pages per delivery. zlib at
 * level 1 packs the bench's 30,512-byte pull_request payload into 2,860 bytes in ~0.06 ms
 * (GitHub's own pull_request example, 23,619 bytes: 2,709). Two alternated pairs of the bench's
 * durable ingest (c64, SQLite on disk, 4 targets, dry-run): 2,866 / 3,009 webhooks/s unpacked,
 * 3,860 / 4,281 packed, and less CPU per stored webhook (0.339 / 0.329 -> 0.296 / 0.269 ms): the
 * pages SQLite no longer handles cost more than the deflate. PostgreSQL compresses the same column
 * itself (lz4, store_pg.c), so only the SQLite store packs.
 *
 * Why zlib: Debian's zlib1g is on every system (libcurl links it already); the packing is one
 * call each way (compress2 / uncompress), nothing is hand-written but the 6-byte head.
 */
#include "payload_pack.h"

#include <string.h>

#include <zlib.h>

/* zlib's fastest level: the ratio of the default level (6) is ~20 % better for three times the
 * time (2,287 bytes in 0.15 ms for the payload above). */
#define PAYLOAD_PACK_LEVEL 1

bool payload_packed(const void *blob, size_t len)
{
    return blob && len >= PAYLOAD_PACK_HEAD_LEN &&
           memcmp(blob, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN) == 0;
}

crcr_err payload_pack(const char *p, size_t len, buf_t *out, const void **stored,
                      size_t *stored_len)
{
    buf_reset(out);
    *stored = p;
    *stored_len = len;
    if (len < PAYLOAD_PACK_MIN || len > PAYLOAD_PACK_MAX)
        return CRCR_OK;
    uLong bound = compressBound((uLong)len);
    crcr_err e = buf_ensure(out, PAYLOAD_PACK_HEAD_LEN + (size_t)bound);
    if (e)
        return e;
    unsigned char *h = (unsigned char *)out->data;
    memcpy(h, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN);
    for (size_t i = 0; i < 4; i++)
        h[PAYLOAD_PACK_TAG_LEN + i] = (unsigned char)((len >> (8 * i)) & 0xff);
    uLongf packed = bound;
    if (compress2(h + PAYLOAD_PACK_HEAD_LEN, &packed, (const Bytef *)p, (uLong)len,
                  PAYLOAD_PACK_LEVEL) != Z_OK ||
        PAYLOAD_PACK_HEAD_LEN + (size_t)packed >= len)
        return CRCR_OK; /* no gain (or a zlib failure): stored as it is */
    out->len = PAYLOAD_PACK_HEAD_LEN + (size_t)packed;
    out->data[out->len] = '\0';
    *stored = out->data;
    *stored_len = out->len;
    return CRCR_OK;
}

crcr_err payload_unpack(const void *blob, size_t len, buf_t *out)
{
    if (!payload_packed(blob, len))
        return len ? buf_append(out, blob, len) : CRCR_OK;
    const unsigned char *h = blob;
    size_t n = 0;
    for (size_t i = 0; i < 4; i++)
        n |= (size_t)h[PAYLOAD_PACK_TAG_LEN + i] << (8 * i);
    if (n > PAYLOAD_PACK_MAX)
        return CRCR_E_TOO_LARGE;
    crcr_err e = buf_ensure(out, n);
    if (e)
        return e;
    uLongf got = (uLongf)n;
    if (uncompress((Bytef *)out->data + out->len, &got, h + PAYLOAD_PACK_HEAD_LEN,
                   (uLong)(len - PAYLOAD_PACK_HEAD_LEN)) != Z_OK ||
        got != (uLongf)n) {
        out->data[out->len] = '\0';
        return CRCR_E_INVALID;
    }
    out->len += n;
    out->data[out->len] = '\0';
    return CRCR_OK;
}
