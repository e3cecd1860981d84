/*
 * payload_pack.c - a delivery's payload deflated for the SQLite store; see payload_pack.h.
 *
 * Why: every webhook's payload (~24-30 KB for a pull_request event) was written whole to the
 * WAL, synced, and written again by each checkpoint: eight overflow pages per delivery. Deflated
 * at level 1 the bench's 30,512-byte pull_request payload is ~2,600-2,900 bytes. Two alternated
 * pairs of the bench's durable ingest (c64, SQLite on disk, 4 targets, dry-run): 2,866 / 3,009
 * webhooks/s unpacked, 3,860 / 4,281 packed, and less CPU per stored webhook (0.339 / 0.329 ->
 * 0.296 / 0.269 ms): the pages SQLite no longer handles cost more than the deflate. PostgreSQL
 * compresses the same column itself (lz4, store_pg.c), so only the SQLite store packs.
 *
 * Why libdeflate (Debian's libdeflate0), not zlib: the same zlib stream (RFC 1950) both ways, so
 * every payload an earlier relay packed with zlib's compress2 reads back, and an earlier relay
 * reads these; but one call each way on a whole buffer, which is all this needs, and faster. On
 * the payload above (this host, 5,000 calls each): zlib level 1 0.35 ms to pack (its compress2
 * sets up a 256 KiB stream per call) and 18.7 us to unpack; libdeflate level 1 29 us to pack
 * (with its compressor's allocation, 32 us) into 2,611 bytes, 8.4 us to unpack. In the App-mode
 * ingest (the handler packs each webhook, the claim unpacks it) the two were 11 % of the relay's
 * samples with zlib. Nothing is hand-written but the 6-byte head.
 */
#include "payload_pack.h"

#include <string.h>

#include <libdeflate.h>

/* libdeflate's fastest level: its level 6 packs the payload above into 2,310 bytes (12 % smaller)
 * in twice the time. */
#define PAYLOAD_PACK_LEVEL 1

bool payload_packed(const void *blob, size_t len)
{
    return blob && len >= PAYLOAD_PACK_HEAD_LEN &&
           memcmp(blob, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN) == 0;
}

/* The compressor (~200 KiB, level 1) is made and freed per call: kept per thread it would hold
 * that much on each HTTP thread, and its allocation costs ~3 us of the ~30. */
crcr_err payload_pack(const char *p, size_t len, buf_t *out, const void **stored,
                      size_t *stored_len)
{
    buf_reset(out);
    *stored = p;
    *stored_len = len;
    if (len < PAYLOAD_PACK_MIN || len > PAYLOAD_PACK_MAX)
        return CRCR_OK;
    struct libdeflate_compressor *c = libdeflate_alloc_compressor(PAYLOAD_PACK_LEVEL);
    if (!c)
        return CRCR_E_NOMEM;
    /* Only a gain is kept: the stream may take len - head - 1 bytes at the most. */
    size_t room = len - PAYLOAD_PACK_HEAD_LEN - 1;
    crcr_err e = buf_ensure(out, PAYLOAD_PACK_HEAD_LEN + room);
    size_t packed = 0;
    if (!e) {
        unsigned char *h = (unsigned char *)out->data;
        memcpy(h, PAYLOAD_PACK_TAG, PAYLOAD_PACK_TAG_LEN);
        for (size_t i = 0; i < 4; i++)
            h[PAYLOAD_PACK_TAG_LEN + i] = (unsigned char)((len >> (8 * i)) & 0xff);
        packed = libdeflate_zlib_compress(c, p, len, h + PAYLOAD_PACK_HEAD_LEN, room);
    }
    libdeflate_free_compressor(c);
    if (e)
        return e;
    if (packed == 0)
        return CRCR_OK; /* no gain: stored as it is */
    out->len = PAYLOAD_PACK_HEAD_LEN + packed;
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
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    if (!d)
        return CRCR_E_NOMEM;
    /* LIBDEFLATE_SUCCESS only when the stream is whole, its Adler-32 matches and it is exactly n
     * bytes (a NULL actual_out_nbytes_ret asks for that) */
    enum libdeflate_result r = libdeflate_zlib_decompress(
        d, h + PAYLOAD_PACK_HEAD_LEN, len - PAYLOAD_PACK_HEAD_LEN, out->data + out->len, n, NULL);
    libdeflate_free_decompressor(d);
    if (r != LIBDEFLATE_SUCCESS) {
        out->data[out->len] = '\0';
        return CRCR_E_INVALID;
    }
    out->len += n;
    out->data[out->len] = '\0';
    return CRCR_OK;
}
