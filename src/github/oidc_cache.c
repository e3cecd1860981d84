/*
 * oidc_cache.c - verified callback tokens by the SHA-256 of their bytes; see oidc_cache.h.
 */
#include "oidc_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

typedef struct slot {
    bool used;
    unsigned char key[32];
    oidc_cached v;
} slot;

struct oidc_cache {
    pthread_mutex_t mu;
    slot slots[OIDC_CACHE_SLOTS];
};

oidc_cache *oidc_cache_new(void)
{
    oidc_cache *c = calloc(1, sizeof(*c));
    if (c)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

void oidc_cache_free(oidc_cache *c)
{
    if (!c)
        return;
    OPENSSL_cleanse(c->slots, sizeof(c->slots));
    pthread_mutex_destroy(&c->mu);
    free(c);
}

bool oidc_cache_key(const char *tok, size_t len, unsigned char key[32])
{
    unsigned int n = 0;
    return EVP_Digest(tok, len, key, &n, EVP_sha256(), NULL) == 1 && n == 32;
}

static size_t slot_of(const unsigned char key[32])
{
    uint32_t h =
        (uint32_t)key[0] | (uint32_t)key[1] << 8 | (uint32_t)key[2] << 16 | (uint32_t)key[3] << 24;
    return h % OIDC_CACHE_SLOTS;
}

bool oidc_cache_get(oidc_cache *c, const unsigned char key[32], int64_t now_s, oidc_cached *out)
{
    if (!c)
        return false;
    slot *s = &c->slots[slot_of(key)];
    pthread_mutex_lock(&c->mu);
    bool hit = s->used && CRYPTO_memcmp(s->key, key, 32) == 0;
    if (hit && now_s - OIDC_LEEWAY_S > s->v.exp) { /* expired: gone */
        OPENSSL_cleanse(s, sizeof(*s));
        hit = false;
    }
    if (hit)
        *out = s->v;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void oidc_cache_put(oidc_cache *c, const unsigned char key[32], const oidc_cached *v)
{
    if (!c)
        return;
    slot *s = &c->slots[slot_of(key)];
    pthread_mutex_lock(&c->mu);
    s->used = true;
    memcpy(s->key, key, 32);
    s->v = *v;
    pthread_mutex_unlock(&c->mu);
}
