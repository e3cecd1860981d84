/*
 * allowlist.h - the L1..L4 allowlist: parsing (libyaml) and queries.
 *
 * Format (upstream pytorch/pytorch .github/allowlist.yml):
 *   L1: [owner/repo, ...]                 each entry a string, or a single-key mapping
 *   L2: [...]                              `owner/repo: oncall1, oncall2` (string) or
 *   L4: [...]                              `owner/repo: [oncall1, oncall2]` (list)
 *   L3: {device: {owner/repo: [oncalls]}}  a device mapping
 * Every top-level key must be one of L1..L4: any other (`l1:`, `L5:`, a typo) is an error, so a
 * misspelt level never reads as an empty one. A missing or null level is empty. Repos are compared
 * case-insensitively and may appear once across all levels. Anchors and aliases are refused, and
 * size, depth, node count and entries per level are capped (crcr_limits.h). A parsed allowlist is
 * immutable and may be shared by threads; reloading builds a new one.
 */
#ifndef CRCR_ALLOWLIST_H
#define CRCR_ALLOWLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"

typedef enum {
    CRCR_LEVEL_NONE = 0,
    CRCR_LEVEL_L1 = 1,
    CRCR_LEVEL_L2 = 2,
    CRCR_LEVEL_L3 = 3,
    CRCR_LEVEL_L4 = 4
} crcr_level;

typedef struct allowlist_entry {
    const char *repo; /* normalised owner/repo as written (case kept) */
    crcr_level level;
    const char *device; /* L3 device, NULL otherwise */
    const char *const *oncalls;
    size_t n_oncalls;
    unsigned line, col; /* where the repo was written (1-based) */
} allowlist_entry;

typedef struct allowlist allowlist;

/*
 * Parses `len` bytes of YAML. On success *out is a new allowlist owned by the caller
 * (allowlist_free). On failure returns CRCR_E_INVALID or CRCR_E_TOO_LARGE, *out is NULL, and
 * `errors` (if not NULL) receives one line per problem, "LINE:COL: message\n".
 */
crcr_err allowlist_parse(const char *yaml, size_t len, allowlist **out, buf_t *errors);

/* Takes another reference (atomic; the allowlist is shared between threads) and returns `al`. */
allowlist *allowlist_ref(allowlist *al);

/* Drops a reference and frees at zero; NULL is fine. */
void allowlist_free(allowlist *al);

/* "L1".."L4", or "none". */
const char *crcr_level_name(crcr_level level);

/* Number of entries, and the i-th in level order (L1..L4), file order within a level. */
size_t allowlist_count(const allowlist *al);
/* Number of L3 devices. */
size_t allowlist_device_count(const allowlist *al);
const allowlist_entry *allowlist_at(const allowlist *al, size_t i);

/* The entry for `repo` (case-insensitive), or NULL. */
const allowlist_entry *allowlist_find(const allowlist *al, const char *repo);

/* The level of `repo`, CRCR_LEVEL_NONE when not listed (or `al` is NULL). */
crcr_level allowlist_level(const allowlist *al, const char *repo);

/* Repos at `min` or above, sorted by name (byte order): fills up to `max` pointers (borrowed
 * from `al`) and returns how many there are in all. */
size_t allowlist_repos_at_or_above(const allowlist *al, crcr_level min, const char **out,
                                   size_t max);

/* L3 repos of `device`, in file order; same filling rule. */
size_t allowlist_device_repos(const allowlist *al, const char *device, const char **out,
                              size_t max);

/* The L3 device of `repo`, or NULL. */
const char *allowlist_repo_device(const allowlist *al, const char *repo);

/* L4: true. L3: true iff "ciflow/crcr/<device>" is among `labels`. Otherwise false. */
bool allowlist_needs_check_run(const allowlist *al, const char *repo, const char *const *labels,
                               size_t n_labels);

#endif
