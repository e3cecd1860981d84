/*
 * arena.h - per-request memory of the HUD: an arena that strings copied out of store callbacks
 * live in (freed at once at the end of the request), a growable vector, and a string -> index map.
 *
 * The arena has a hard cap (`max`): past it every allocation fails and the sticky `oom` flag is
 * set, so a request that reads too much is answered 500 instead of growing without bound.
 */
#ifndef CRCR_ARENA_H
#define CRCR_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of one arena block (a larger allocation gets a block of its own). */
#define ARENA_BLOCK (64u * 1024u)

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    char data[];
} ablock;

typedef struct arena {
    ablock *head;
    size_t total; /* bytes of all blocks */
    size_t max;   /* cap on total */
    bool oom;     /* sticky: an allocation failed */
} arena;

/* Prepares an empty arena that may hold up to `max` bytes. Allocates nothing. */
void arena_init(arena *a, size_t max);
/* Returns `n` bytes (8-byte aligned) owned by the arena; NULL and a sticky oom flag past the cap
 * or when memory runs out. */
void *arena_alloc(arena *a, size_t n);
/* A copy of `s` owned by the arena; NULL for NULL (and when out of memory: check a->oom). */
const char *arena_dup(arena *a, const char *s);
/* Frees every block; the arena is empty afterwards, with the same cap, and may be used again. */
void arena_free(arena *a);

/* Grows a vector of `elsz`-byte items by one; returns the new (zeroed) slot or NULL. The vector's
 * memory is owned by the caller (free(*v)). */
void *vec_push(void **v, size_t *n, size_t *cap, size_t elsz);

/* String -> index map (open addressing); keys are borrowed and must outlive the map. */
typedef struct smap {
    const char **keys;
    size_t *vals;
    size_t cap, n;
} smap;

/* The index stored for `key`, or stores `val` and returns it. (size_t)-1 on allocation failure.
 * The map's tables are owned by the map (smap_free). */
size_t smap_get_or_add(smap *m, const char *key, size_t val);
void smap_free(smap *m);

#endif
