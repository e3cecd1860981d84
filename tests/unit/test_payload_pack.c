/* Unit tests for payload_pack.h: the SQLite store's packed form of a delivery's payload, and the
 * payloads it leaves as they are (small, incompressible, and every row of an older store). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "payload_pack.h"

/* `n` bytes of JSON with GitHub's kind of repetition (caller frees). */
static char *json_of(size_t n)
{
    char *p = malloc(n + 1);
    assert_non_null(p);
    static const char url[] = "\"https://api.github.com/repos/pytorch/pytorch/issues/1\",";
    for (size_t i = 0; i < n; i++)
        p[i] = url[i % (sizeof(url) - 1)];
    p[0] = '[';
    p[n - 1] = ']';
    p[n] = '\0';
    return p;
}

static void a_webhook_sized_payload_packs_smaller_and_unpacks_to_the_same_bytes(void **state)
{
    (void)state;
    size_t n = 30000;
    char *p = json_of(n);
    buf_t packed;
    buf_init(&packed, 1 << 20);
    const void *stored = NULL;
    size_t stored_len = 0;
    assert_int_equal(payload_pack(p, n, &packed, &stored, &stored_len), CRCR_OK);
    assert_ptr_equal(stored, packed.data);
    assert_true(stored_len < n / 4);
    assert_true(payload_packed(stored, stored_len));
    buf_t out;
    buf_init(&out, 1 << 20);
    assert_int_equal(buf_append(&out, "x", 1), CRCR_OK); /* unpack appends */
    assert_int_equal(payload_unpack(stored, stored_len, &out), CRCR_OK);
    assert_int_equal(out.len, n + 1);
    assert_memory_equal(out.data + 1, p, n);
    assert_int_equal(out.data[out.len], '\0');
    buf_free(&out);
    buf_free(&packed);
    free(p);
}

static void small_and_incompressible_payloads_are_stored_as_they_are(void **state)
{
    (void)state;
    buf_t packed;
    buf_init(&packed, 1 << 20);
    const void *stored = NULL;
    size_t stored_len = 0;
    char *small = json_of(PAYLOAD_PACK_MIN - 1);
    assert_int_equal(payload_pack(small, PAYLOAD_PACK_MIN - 1, &packed, &stored, &stored_len),
                     CRCR_OK);
    assert_ptr_equal(stored, small);
    assert_int_equal(stored_len, PAYLOAD_PACK_MIN - 1);
    free(small);

    size_t n = 4096;
    char *noise = malloc(n);
    assert_non_null(noise);
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < n; i++) { /* xorshift: nothing for deflate to find */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise[i] = (char)(x >> 24);
    }
    noise[0] = '{'; /* not the tag */
    assert_int_equal(payload_pack(noise, n, &packed, &stored, &stored_len), CRCR_OK);
    assert_ptr_equal(stored, noise);
    assert_int_equal(stored_len, n);
    free(noise);
    buf_free(&packed);
}

static void a_payload_not_packed_unpacks_as_it_is(void **state)
{
    (void)state;
    static const char old[] = "{\"action\":\"opened\",\"number\":1}"; /* an older store's row */
    buf_t out;
    buf_init(&out, 1024);
    assert_false(payload_packed(old, sizeof(old) - 1));
    assert_int_equal(payload_unpack(old, sizeof(old) - 1, &out), CRCR_OK);
    assert_string_equal(buf_cstr(&out), old);
    assert_int_equal(payload_unpack("", 0, &out), CRCR_OK);
    assert_int_equal(out.len, sizeof(old) - 1);
    buf_free(&out);
}

static void a_damaged_packed_payload_is_refused(void **state)
{
    (void)state;
    size_t n = 8000;
    char *p = json_of(n);
    buf_t packed, out;
    buf_init(&packed, 1 << 20);
    buf_init(&out, 1 << 20);
    const void *stored = NULL;
    size_t len = 0;
    assert_int_equal(payload_pack(p, n, &packed, &stored, &len), CRCR_OK);
    assert_true(payload_packed(stored, len));

    /* Cut short. */
    assert_int_equal(payload_unpack(stored, len - 5, &out), CRCR_E_INVALID);
    assert_int_equal(out.len, 0);
    /* A recorded length that is not what the stream inflates to. */
    packed.data[PAYLOAD_PACK_TAG_LEN] ^= 1;
    assert_int_equal(payload_unpack(stored, len, &out), CRCR_E_INVALID);
    packed.data[PAYLOAD_PACK_TAG_LEN] ^= 1;
    /* A recorded length past PAYLOAD_PACK_MAX. */
    packed.data[PAYLOAD_PACK_TAG_LEN + 3] = (char)0x7f;
    assert_int_equal(payload_unpack(stored, len, &out), CRCR_E_TOO_LARGE);
    assert_int_equal(out.len, 0);
    /* A caller's cap below the payload. */
    packed.data[PAYLOAD_PACK_TAG_LEN + 3] = 0;
    buf_t small;
    buf_init(&small, n - 1);
    assert_int_equal(payload_unpack(stored, len, &small), CRCR_E_TOO_LARGE);
    assert_int_equal(payload_unpack(stored, len, &out), CRCR_OK);
    assert_memory_equal(out.data, p, n);
    buf_free(&small);
    buf_free(&out);
    buf_free(&packed);
    free(p);
}

/* A store of schema 8 packed payloads as zlib streams (PAYLOAD_PACK_TAG_ZLIB): they read back
 * (made here with zlib's compress2, as those relays did), and a damaged one is refused. */
static void payloads_a_schema_8_store_packed_with_zlib_unpack(void **state)
{
    (void)state;
    size_t n = 30000;
    char *p = json_of(n);
    uLong bound = compressBound((uLong)n);
    unsigned char *old = malloc(PAYLOAD_PACK_HEAD_LEN + bound);
    assert_non_null(old);
    memcpy(old, PAYLOAD_PACK_TAG_ZLIB, PAYLOAD_PACK_TAG_LEN);
    for (size_t i = 0; i < 4; i++)
        old[PAYLOAD_PACK_TAG_LEN + i] = (unsigned char)((n >> (8 * i)) & 0xff);
    uLongf zlen = bound;
    assert_int_equal(compress2(old + PAYLOAD_PACK_HEAD_LEN, &zlen, (const Bytef *)p, (uLong)n, 1),
                     Z_OK);
    assert_true(payload_packed(old, PAYLOAD_PACK_HEAD_LEN + zlen));
    buf_t out;
    buf_init(&out, 1 << 20);
    assert_int_equal(payload_unpack(old, PAYLOAD_PACK_HEAD_LEN + zlen, &out), CRCR_OK);
    assert_int_equal(out.len, n);
    assert_memory_equal(out.data, p, n);
    /* a damaged checksum (the stream's last four bytes) is refused */
    old[PAYLOAD_PACK_HEAD_LEN + zlen - 1] ^= 0x40;
    buf_reset(&out);
    assert_int_equal(payload_unpack(old, PAYLOAD_PACK_HEAD_LEN + zlen, &out), CRCR_E_INVALID);
    assert_int_equal(out.len, 0);
    buf_free(&out);
    free(old);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_webhook_sized_payload_packs_smaller_and_unpacks_to_the_same_bytes),
        cmocka_unit_test(small_and_incompressible_payloads_are_stored_as_they_are),
        cmocka_unit_test(a_payload_not_packed_unpacks_as_it_is),
        cmocka_unit_test(a_damaged_packed_payload_is_refused),
        cmocka_unit_test(payloads_a_schema_8_store_packed_with_zlib_unpack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
