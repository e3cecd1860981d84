/*
 * payload_pack.c - a delivery's payload packed for the SQLite store; see payload_pack.h.
 *
 * Why: every webhook's payload (~24-30 KB for a pull_request event) was written whole to the
 * WAL, synced, and written again by each checkpoint: eight overflow pages per delivery. Packed,
 * the bench's 30,512-byte pull_request payload fits in one page. Two alternated pairs of the
 * bench's durable ingest when packing came in (c64, SQLite on disk, 4 targets, dry-run, zlib):
 * 2,866 / 3,009 webhooks/s unpacked, 3,860 / 4,281 packed, and less CPU per stored webhook
 * (0.339 / 0.329 -> 0.296 / 0.269 ms): the pages SQLite no longer handles cost more than the
 * packing. PostgreSQL compresses the same column itself (lz4 too, store_pg.c), so only the
 * SQLite store packs.
 *
 * Why LZ4 (Debian's liblz4-1), not deflate: a stored payload is packed once and read back by
 * each claim of its rows, on the paths every webhook takes, and LZ4 does both several times
 * faster for a page either way. On the payload above (this host, 5,000 calls each): zlib level 1
 * 2,860 bytes, ~50 us to pack in the relay (its compress2 sets up a 256 KiB stream per call),
 * 18.7 us to unpack; libdeflate level 1 2,611 bytes, 32 us with its compressor's allocation,
 * 8.4 us; LZ4 3,126 bytes, 5.7 us, 2.0 us, with no allocation (its state is on the stack). With
 * libdeflate the packing was still 8-9 % of the relay's samples in the App-mode ingest. Stores
 * of schema 8 packed with zlib (PAYLOAD_PACK_TAG_ZLIB): those payloads are read with zlib's
 * uncompress. Nothing is hand-written but the 6-byte head.
 */
#include "payload_pack.h"

#include <string.h>

#include <lz4.h>
#include <zlib.h>

_Static_assert(PAYLOAD_PACK_MAX <= LZ4_MAX_INPUT_SIZE, "a payload's size fits LZ4's int sizes");

bool payload_packed(const void *blob, size_t len)
{
    return blob && len >= PAYLOAD_PACK_HEAD_LEN &&
           (memcmp(blob, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN) == 0 ||
            memcmp(blob, PAYLOAD_PACK_TAG_ZLIB, PAYLOAD_PACK_TAG_LEN) == 0);
}

crcr_err payload_pack(const char *p, size_t len, buf_t *out, const void **stored,
                      size_t *stored_len)
{
    buf_reset(out);
    *stored = p;
    *stored_len = len;
    if (len < PAYLOAD_PACK_MIN || len > PAYLOAD_PACK_MAX)
        return CRCR_OK;
    /* Only a gain is kept: the block may take len - head - 1 bytes at the most. */
    size_t room = len - PAYLOAD_PACK_HEAD_LEN - 1;
    crcr_err e = buf_ensure(out, PAYLOAD_PACK_HEAD_LEN + room);
    if (e)
        return e;
    unsigned char *h = (unsigned char *)out->data;
    memcpy(h, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN);
    for (size_t i = 0; i < 4; i++)
        h[PAYLOAD_PACK_TAG_LEN + i] = (unsigned char)((len >> (8 * i)) & 0xff);
    /* both sizes fit an int (the _Static_assert above) */
    int packed = LZ4_compress_default(p, (char *)h + PAYLOAD_PACK_HEAD_LEN, (int)len, (int)room);
    if (packed <= 0)
        return CRCR_OK; /* no gain: stored as it is */
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
    const unsigned char *in = h + PAYLOAD_PACK_HEAD_LEN;
    size_t in_len = len - PAYLOAD_PACK_HEAD_LEN;
    bool ok;
    if (memcmp(h, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN) == 0) {
        /* the exact length or a failure: LZ4_decompress_safe never writes past n */
        ok = in_len <= (size_t)LZ4_MAX_INPUT_SIZE &&
             LZ4_decompress_safe((const char *)in, out->data + out->len, (int)in_len, (int)n) ==
                 (int)n;
    } else {
        uLongf got = (uLongf)n;
        ok = uncompress((Bytef *)out->data + out->len, &got, in, (uLong)in_len) == Z_OK &&
             got == (uLongf)n;
    }
    if (!ok) {
        out->data[out->len] = '\0';
        return CRCR_E_INVALID;
    }
    out->len += n;
    out->data[out->len] = '\0';
    return CRCR_OK;
}
