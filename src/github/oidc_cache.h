/*
 * oidc_cache.h - a bounded cache of verified callback tokens (oidc.c), so that a token is checked
 * once per key set within its lifetime: a job reports in_progress and then completed with one
 * OIDC token, and its signature need not be verified twice.
 *
 * Keyed by the SHA-256 of the whole token (every byte of header, claims and signature), never by
 * a part of it; an entry holds what the full verification found (the identity, the time claims)
 * and which key set verified it (issuer and key-set generation). oidc.c uses an entry only while
 * that key set is still the issuer's current one and fresh (a JWKS fetched again, rotated or not,
 * ends every entry of the issuer), and checks exp, nbf and iat against the caller's `now` on every
 * use, exactly as the full path does; an entry is dropped once its token expired (exp plus
 * OIDC_LEEWAY_S on the relay's clock). The cache never holds the token, and logs nothing.
 * OIDC_CACHE_SLOTS entries, direct-mapped by the hash: a new token replaces whatever shared its
 * slot, so the memory is fixed (~0.7 KiB a slot). Hash comparisons are constant-time.
 * Thread-safe (one mutex, held for a copy).
 *
 * Written here rather than taken from a library: a fixed array of a few hundred slots behind a
 * mutex is all it is.
 */
#ifndef CRCR_OIDC_CACHE_H
#define CRCR_OIDC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oidc.h"

/* Entries kept (each ~0.7 KiB). */
#define OIDC_CACHE_SLOTS 256u

typedef struct oidc_cache oidc_cache;

typedef struct oidc_cached {
    size_t issuer;     /* index of the issuer whose key verified the token */
    uint64_t keys_gen; /* generation of that issuer's key set */
    int64_t exp;       /* the time claims, to check at every use */
    bool has_nbf, has_iat;
    int64_t nbf, iat;
    oidc_identity id; /* what the verification gave */
} oidc_cached;

/* NULL when out of memory. Owner: the caller, oidc_cache_free (NULL is fine). */
oidc_cache *oidc_cache_new(void);
void oidc_cache_free(oidc_cache *c);

/* The cache key of a token: SHA-256 of its bytes. False when hashing failed. */
bool oidc_cache_key(const char *tok, size_t len, unsigned char key[32]);

/* Copies the entry of `key` into *out; false when there is none or its token expired at `now_s`
 * (the entry is then dropped). */
bool oidc_cache_get(oidc_cache *c, const unsigned char key[32], int64_t now_s, oidc_cached *out);
/* Stores (or replaces) the entry of `key`. */
void oidc_cache_put(oidc_cache *c, const unsigned char key[32], const oidc_cached *v);

#endif
