/* page_cache.c - see page_cache.h. A linear scan of 64 slots is cheaper than any index here. */
#include "page_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *key;  /* owned; NULL when the slot is empty */
    char *body; /* owned */
    size_t len;
    int64_t stored_at;
    page_entry meta;
} slot;

struct page_cache {
    pthread_mutex_t mu;
    unsigned ttl_ms;
    size_t max_bytes, used;
    slot slots[PAGE_CACHE_SLOTS];
    uint64_t hits, misses;
};

/* The cache and its slots are owned by the caller until page_cache_free. */
page_cache *page_cache_new(unsigned ttl_ms, size_t max_bytes)
{
    page_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->ttl_ms = ttl_ms;
    c->max_bytes = max_bytes;
    return c;
}

static void slot_clear(page_cache *c, slot *s)
{
    if (!s->key)
        return;
    c->used -= s->len;
    free(s->key);
    free(s->body);
    memset(s, 0, sizeof(*s));
}

void page_cache_free(page_cache *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i < PAGE_CACHE_SLOTS; i++)
        slot_clear(c, &c->slots[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static bool live(const page_cache *c, const slot *s, int64_t now)
{
    return s->key && now - s->stored_at < (int64_t)c->ttl_ms;
}

int page_cache_get(page_cache *c, const char *key, int64_t now_ms, page_entry *meta, buf_t *body)
{
    int found = 0;
    pthread_mutex_lock(&c->mu);
    for (unsigned i = 0; i < PAGE_CACHE_SLOTS; i++) {
        slot *s = &c->slots[i];
        if (!live(c, s, now_ms) || strcmp(s->key, key) != 0)
            continue;
        if (buf_append(body, s->body, s->len) == CRCR_OK) {
            *meta = s->meta;
            found = 1;
        }
        break;
    }
    if (found)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* The slot to reuse: the one holding `key`, else an empty or expired one, else the oldest. */
static slot *victim(page_cache *c, const char *key, int64_t now)
{
    slot *free_slot = NULL, *oldest = NULL;
    for (unsigned i = 0; i < PAGE_CACHE_SLOTS; i++) {
        slot *s = &c->slots[i];
        if (s->key && strcmp(s->key, key) == 0)
            return s;
        if (!free_slot && !live(c, s, now))
            free_slot = s;
        if (s->key && (!oldest || s->stored_at < oldest->stored_at))
            oldest = s;
    }
    return free_slot ? free_slot : oldest;
}

void page_cache_put(page_cache *c, const char *key, int64_t now_ms, const page_entry *meta,
                    const char *body, size_t len)
{
    size_t klen = strlen(key);
    if (klen > PAGE_CACHE_KEY_MAX || len > c->max_bytes / 4)
        return;
    char *k = malloc(klen + 1), *b = malloc(len ? len : 1);
    if (!k || !b) {
        free(k);
        free(b);
        return;
    }
    memcpy(k, key, klen + 1);
    memcpy(b, body, len);
    pthread_mutex_lock(&c->mu);
    slot *s = victim(c, key, now_ms);
    slot_clear(c, s);
    /* Make room: expired entries first, then the oldest. */
    while (c->used + len > c->max_bytes) {
        slot *v = NULL;
        for (unsigned i = 0; i < PAGE_CACHE_SLOTS; i++) {
            slot *o = &c->slots[i];
            if (o->key && (!v || !live(c, o, now_ms) || o->stored_at < v->stored_at))
                v = o;
        }
        if (!v)
            break;
        slot_clear(c, v);
    }
    s->key = k;
    s->body = b;
    s->len = len;
    s->stored_at = now_ms;
    s->meta = *meta;
    c->used += len;
    pthread_mutex_unlock(&c->mu);
}

void page_cache_counts(page_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
