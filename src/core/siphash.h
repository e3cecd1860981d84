/*
 * siphash.h - SipHash (Aumasson and Bernstein, 2012), fed one byte at a time, for hash tables
 * whose keys come from the network.
 *
 * Why by hand: the JSON validator hashes every object key of an unauthenticated body while it
 * scans it, byte by byte, across escapes; OpenSSL's EVP_MAC "SIPHASH" costs an allocation and a
 * context per key (measured: slower than the whole validator per key), and no Debian package
 * offers a streaming SipHash. The algorithm is a few lines from the paper.
 *
 * Keyed with a per-process random key (siphash_process_key), an attacker who does not know the
 * key cannot choose keys that share a bucket, so chained tables stay linear whatever the input
 * (FNV-1a, used before, lets anyone build any number of colliding keys offline).
 *
 * The number of compression rounds (c) and finalisation rounds (d) is a parameter: SipHash-2-4
 * is the paper's reference (its test vectors check this code), SipHash-1-3 is what hash tables
 * use (Python, Rust) and what crcr uses.
 */
#ifndef CRCR_SIPHASH_H
#define CRCR_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct siphash_key {
    uint64_t k0, k1;
} siphash_key;

/* The running state of one hash; fill with siphash_init. */
typedef struct siphash_state {
    uint64_t v0, v1, v2, v3;
    uint64_t m;     /* bytes not yet compressed, little-endian */
    unsigned mlen;  /* how many (0..7) */
    uint64_t total; /* bytes fed */
    unsigned c, d;  /* rounds */
} siphash_state;

/* A random key drawn once per process (getrandom; the first call draws it, thread-safe). */
const siphash_key *siphash_process_key(void);

static inline uint64_t siphash_rotl(uint64_t x, unsigned b)
{
    return (x << b) | (x >> (64u - b));
}

static inline void siphash_round(siphash_state *s)
{
    s->v0 += s->v1;
    s->v1 = siphash_rotl(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = siphash_rotl(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = siphash_rotl(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = siphash_rotl(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = siphash_rotl(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = siphash_rotl(s->v2, 32);
}

static inline void siphash_compress(siphash_state *s, uint64_t m)
{
    s->v3 ^= m;
    for (unsigned i = 0; i < s->c; i++)
        siphash_round(s);
    s->v0 ^= m;
}

static inline void siphash_init(siphash_state *s, const siphash_key *k, unsigned c, unsigned d)
{
    s->v0 = k->k0 ^ 0x736f6d6570736575ull;
    s->v1 = k->k1 ^ 0x646f72616e646f6dull;
    s->v2 = k->k0 ^ 0x6c7967656e657261ull;
    s->v3 = k->k1 ^ 0x7465646279746573ull;
    s->m = 0;
    s->mlen = 0;
    s->total = 0;
    s->c = c;
    s->d = d;
}

static inline void siphash_byte(siphash_state *s, unsigned char b)
{
    s->m |= (uint64_t)b << (8u * s->mlen);
    s->total++;
    if (++s->mlen == 8) {
        siphash_compress(s, s->m);
        s->m = 0;
        s->mlen = 0;
    }
}

/* Feeds data[0..len): the bytes that complete a pending word one at a time, then whole words
 * (read little-endian, as siphash_byte assembles them), then the rest one at a time. Same hash
 * as feeding every byte with siphash_byte. */
static inline void siphash_bytes(siphash_state *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t i = 0;
    while (i < len && s->mlen != 0)
        siphash_byte(s, p[i++]);
    for (; len - i >= 8; i += 8) {
        uint64_t m = 0;
        for (unsigned b = 0; b < 8; b++) /* compilers make this one load on little-endian */
            m |= (uint64_t)p[i + b] << (8u * b);
        siphash_compress(s, m);
        s->total += 8;
    }
    for (; i < len; i++)
        siphash_byte(s, p[i]);
}

static inline uint64_t siphash_final(siphash_state *s)
{
    siphash_compress(s, s->m | (s->total << 56));
    s->v2 ^= 0xff;
    for (unsigned i = 0; i < s->d; i++)
        siphash_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* One-shot SipHash-c-d of data[0..len). */
static inline uint64_t siphash(const siphash_key *k, unsigned c, unsigned d, const void *data,
                               size_t len)
{
    siphash_state s;
    siphash_init(&s, k, c, d);
    siphash_bytes(&s, data, len);
    return siphash_final(&s);
}

#endif
