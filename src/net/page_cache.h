/*
 * page_cache.h - a small, bounded cache of whole HTTP answers (the HUD's pages and JSON).
 *
 * A HUD page reads up to 100,000 runs; fifty people opening the same page in the same second
 * should cost one render, not fifty. Entries are keyed by method, path and query, live `ttl_ms`,
 * and all of them together hold at most `max_bytes` of bodies in at most PAGE_CACHE_SLOTS
 * entries (expired entries go first, then the oldest). Only the caller decides what is cacheable
 * (http_server: 200 answers of HTTP_ROUTE_CACHE routes). Thread-safe: one mutex, held only for a
 * slot scan and a copy.
 */
#ifndef CRCR_PAGE_CACHE_H
#define CRCR_PAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define PAGE_CACHE_SLOTS 64u
#define PAGE_CACHE_KEY_MAX 4096u
#define PAGE_CACHE_HEADERS 8u
#define PAGE_CACHE_HEADER_NAME_MAX 64u
#define PAGE_CACHE_HEADER_VALUE_MAX 256u

typedef struct page_cache page_cache;

/* One cached answer, as stored and as handed back. */
typedef struct page_entry {
    int status;
    const char *content_type; /* a static string (the handler's) */
    size_t n_headers;
    char header_name[PAGE_CACHE_HEADERS][PAGE_CACHE_HEADER_NAME_MAX];
    char header_value[PAGE_CACHE_HEADERS][PAGE_CACHE_HEADER_VALUE_MAX];
} page_entry;

/* A cache; NULL on allocation failure. Owned by the caller: page_cache_free(). */
page_cache *page_cache_new(unsigned ttl_ms, size_t max_bytes);
void page_cache_free(page_cache *c);

/* Copies the live answer for `key` into *meta and `body` (appended) and returns 1; 0 when there is
 * none (or `body` cannot hold it). `now_ms` is a monotonic clock. */
int page_cache_get(page_cache *c, const char *key, int64_t now_ms, page_entry *meta, buf_t *body);

/* Stores a copy of an answer under `key`, replacing an older one. Answers larger than a quarter
 * of max_bytes, and keys longer than PAGE_CACHE_KEY_MAX, are not kept. */
void page_cache_put(page_cache *c, const char *key, int64_t now_ms, const page_entry *meta,
                    const char *body, size_t len);

/* Hits and misses since creation (for metrics and tests). */
void page_cache_counts(page_cache *c, uint64_t *hits, uint64_t *misses);

#endif
