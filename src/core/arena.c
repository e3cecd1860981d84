/*
 * arena.c - the HUD's per-request memory: a capped arena, a growable vector and a string -> index
 * map; see arena.h.
 */
#include "arena.h"

#include <stdlib.h>
#include <string.h>

void arena_init(arena *a, size_t max)
{
    memset(a, 0, sizeof(*a));
    a->max = max;
}

/* The returned memory is owned by the arena (arena_free). */
void *arena_alloc(arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (a->oom)
        return NULL;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        if (a->total + cap > a->max) {
            a->oom = true;
            return NULL;
        }
        ablock *b = malloc(sizeof(*b) + cap);
        if (!b) {
            a->oom = true;
            return NULL;
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
        a->total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

/* The copy is owned by the arena (arena_free). */
const char *arena_dup(arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *p = arena_alloc(a, n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

void arena_free(arena *a)
{
    for (ablock *b = a->head; b;) {
        ablock *next = b->next;
        free(b);
        b = next;
    }
    arena_init(a, a->max);
}

/* The vector's memory is owned by the caller (free(*v)). */
void *vec_push(void **v, size_t *n, size_t *cap, size_t elsz)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        void *p = realloc(*v, ncap * elsz);
        if (!p)
            return NULL;
        *v = p;
        *cap = ncap;
    }
    void *slot = (char *)*v + (*n)++ * elsz;
    memset(slot, 0, elsz);
    return slot;
}

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* The new tables are owned by the map (smap_free). */
static bool smap_grow(smap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const char **keys = calloc(ncap, sizeof(*keys));
    size_t *vals = calloc(ncap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = str_hash(m->keys[i]) & (ncap - 1);
        while (keys[j])
            j = (j + 1) & (ncap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return true;
}

/* The map's tables are owned by the map (smap_free). */
size_t smap_get_or_add(smap *m, const char *key, size_t val)
{
    if ((m->n + 1) * 2 > m->cap && !smap_grow(m))
        return (size_t)-1;
    size_t j = str_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->n++;
    return val;
}

void smap_free(smap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
