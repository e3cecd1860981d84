/*
 * allowlist_source.h - where the allowlist comes from, and keeping it fresh.
 *
 * Source: ALLOWLIST_FILE (a local path) or ALLOWLIST_URL, a GitHub blob URL
 * https://github.com/<owner>/<repo>/blob/<ref>/<path>, fetched through the contents API
 * GET {GITHUB_API_URL}/repos/<owner>/<repo>/contents/<path>?ref=<ref> (JSON answer, base64
 * content), with an installation token when App credentials exist (anonymous otherwise) and
 * If-None-Match with the last ETag. The copy is refreshed after ALLOWLIST_TTL_SECONDS, or at once
 * on allowlist_source_reload() (SIGHUP). A failed refresh, or a new text that does not parse,
 * keeps the last good allowlist in force; the failure is logged and reported by
 * allowlist_source_status() (and so by /readyz).
 *
 * Several instances (a shared store, allowlist_source_set_store()): only the holder of the
 * "allowlist" lease fetches from GitHub when a refresh falls due; it writes what it got to the
 * store (kv "allowlist:copy": the URL, the ETag, when it was fetched or confirmed, the text) and
 * the other instances read that copy instead of calling GitHub, swapping in a changed copy exactly
 * as a fetched list. Nothing depends on the holder staying alive: its lease expires, and a copy
 * older than 3 x the TTL makes each instance fetch for itself. A reload (SIGHUP) fetches at once
 * on that instance, whoever holds the lease, and writes the copy. At start a copy younger than
 * the TTL is used instead of fetching, and when GitHub cannot be reached a copy of any age is
 * loaded (with a warning naming its age, and the fetch error in the status). A store that fails
 * makes the instance fetch for itself as without a store. A file source never uses the store.
 */
#ifndef CRCR_ALLOWLIST_SOURCE_H
#define CRCR_ALLOWLIST_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "allowlist.h"
#include "config.h"
#include "github.h"
#include "store.h"

typedef struct allowlist_source allowlist_source;

typedef struct allowlist_status {
    bool loaded;          /* a valid allowlist is in force */
    int64_t loaded_at;    /* ms: when the allowlist in force was loaded (or confirmed by 304);
                             for a shared copy, when its holder fetched or confirmed it */
    int64_t last_attempt; /* ms: last load attempt */
    char source[512];     /* "file:/path" or the URL */
    char last_error[256]; /* "" when the last attempt succeeded */
    size_t repos;         /* entries in force */
    char origin[16];      /* where the list in force came from: "file", "github", "shared_copy"
                             ("" when none) */
} allowlist_status;

/* Checks that `url` is a GitHub blob URL and splits it (caller buffers). 0 on success, -1 with
 * a message in err otherwise. */
int allowlist_parse_blob_url(const char *url, char *owner_repo, size_t orsz, char *ref,
                             size_t refsz, char *path, size_t pathsz, char *err, size_t errsz);

/* Creates a source from cfg (ALLOWLIST_FILE wins over ALLOWLIST_URL). `gh` may be NULL when
 * only a file is used; both must outlive the source. Loads nothing yet. */
allowlist_source *allowlist_source_new(const crcr_config *cfg, gh_client *gh, char *err,
                                       size_t errsz);
void allowlist_source_free(allowlist_source *src);

/* Shares a URL source's refreshes with other instances through `st` (which must outlive the
 * source), `owner` naming this instance in the lease (copied; at most 127 bytes). Call before
 * the first load; no effect on a file source. */
void allowlist_source_set_store(allowlist_source *src, store *st, const char *owner);

/* Loads now (start-up): CRCR_OK, or an error with the reason in err (the source keeps whatever
 * it had before). With a store: a copy younger than the TTL is used instead of fetching, and
 * an older one when the fetch fails (CRCR_OK then, the fetch error in the status). */
crcr_err allowlist_source_load(allowlist_source *src, char *err, size_t errsz);

/* Refreshes if the TTL has passed or a reload was requested. Cheap when nothing is due. With a
 * store, `now_ms` is also the clock of the lease and of the shared copy's age (wall time). */
void allowlist_source_tick(allowlist_source *src, int64_t now_ms);

/* Asks for a reload at the next tick (async-signal-safe: only sets a flag). */
void allowlist_source_reload(allowlist_source *src);

/* The allowlist in force, with a reference the caller drops with allowlist_free(); NULL when
 * none was ever loaded. */
allowlist *allowlist_source_get(allowlist_source *src);

void allowlist_source_status(allowlist_source *src, allowlist_status *out);

#endif
