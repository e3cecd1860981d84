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
 *
 * The same fetcher keeps other YAML documents fresh the same way (doc_source_new): the CI
 * providers map (ci_providers.h, CI_PROVIDERS_FILE / CI_PROVIDERS_URL) has its own lease and copy
 * ("ci_providers", kv "ci_providers:copy") and its own log events ("ci_providers.loaded", ...).
 * Every allowlist_source_* function below except _new and _get works on any such source.
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
/* A source of any kind of document (the same type). */
typedef struct allowlist_source doc_source;

/* What a source holds: how its text is parsed, how the parsed value is shared, and the names of
 * the variables, log events, lease and shared copy. The value a parse returns must be immutable
 * and reference-counted (ref/unref are called from several threads). */
typedef struct doc_kind {
    const char *name;       /* "allowlist": log events "<name>.loaded", lease "<name>", kv
                               "<name>:copy"; at most 24 bytes */
    const char *file_var;   /* "ALLOWLIST_FILE", named in messages */
    const char *url_var;    /* "ALLOWLIST_URL" */
    const char *count_name; /* "repos": what count() counts, in the log lines */
    size_t max_bytes;       /* largest text read (the parser is given one byte more to refuse) */
    /* Parses len bytes: CRCR_OK and a new value in *out (one reference, the caller's), or an
     * error with "LINE:COL: message" lines in `errors` (as allowlist_parse()). */
    crcr_err (*parse)(const char *text, size_t len, void **out, buf_t *errors);
    void *(*ref)(void *doc);          /* another reference; returns doc */
    void (*unref)(void *doc);         /* drops one */
    size_t (*count)(const void *doc); /* entries, for the status and the log */
} doc_kind;

typedef struct allowlist_status {
    bool loaded;          /* a valid allowlist is in force */
    int64_t loaded_at;    /* ms: when the allowlist in force was loaded (or confirmed by 304);
                             for a shared copy, when its holder fetched or confirmed it */
    int64_t last_attempt; /* ms: last load attempt */
    char source[512];     /* "file:/path" or the URL */
    char last_error[256]; /* "" when the last attempt succeeded */
    size_t repos;         /* entries in force (repositories; pipelines for the CI providers) */
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

/* Defines `static const doc_kind var` named `name` (file_var, url_var, count_name, max_bytes as
 * in doc_kind) over a typed API: parse_fn(text, len, type **, errors), ref_fn(type *),
 * unref_fn(type *), count_fn(const type *), through four functions <var>_parse, _ref, _unref and
 * _count it defines too. */
#define DOC_KIND_DEFINE(var, name_, file_var_, url_var_, count_name_, max_bytes_, type, parse_fn,  \
                        ref_fn, unref_fn, count_fn)                                                \
    static crcr_err var##_parse(const char *text, size_t len, void **out, buf_t *errors)           \
    {                                                                                              \
        type *doc = NULL;                                                                          \
        crcr_err rc = parse_fn(text, len, &doc, errors);                                           \
        *out = doc;                                                                                \
        return rc;                                                                                 \
    }                                                                                              \
    static void *var##_ref(void *doc)                                                              \
    {                                                                                              \
        return ref_fn(doc);                                                                        \
    }                                                                                              \
    static void var##_unref(void *doc)                                                             \
    {                                                                                              \
        unref_fn(doc);                                                                             \
    }                                                                                              \
    static size_t var##_count(const void *doc)                                                     \
    {                                                                                              \
        return count_fn(doc);                                                                      \
    }                                                                                              \
    static const doc_kind var = {.name = name_,                                                    \
                                 .file_var = file_var_,                                            \
                                 .url_var = url_var_,                                              \
                                 .count_name = count_name_,                                        \
                                 .max_bytes = max_bytes_,                                          \
                                 .parse = var##_parse,                                             \
                                 .ref = var##_ref,                                                 \
                                 .unref = var##_unref,                                             \
                                 .count = var##_count}

/* Creates a source of `kind` (which must outlive it) from `file` (wins) or `url` (a GitHub blob
 * URL), refreshed every cfg->allowlist_ttl_s; cfg and gh as for allowlist_source_new(), whose
 * messages it gives with the kind's variable names. The caller frees it with
 * allowlist_source_free(). */
doc_source *doc_source_new(const doc_kind *kind, const crcr_config *cfg, const char *file,
                           const char *url, gh_client *gh, char *err, size_t errsz);

/* The document in force with a reference the caller drops with kind->unref(); NULL when none
 * was ever loaded. */
void *doc_source_get(doc_source *src);
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

/* Whether a push to `repo` (owner/name) on `ref` ("refs/heads/<branch>") that added, modified
 * or removed `paths` touches this URL source's file: the same repository (case-insensitive),
 * branch and path. False for a file source. The webhook handler then asks for a reload: the
 * instance that gets the push fetches at once and writes the shared copy with a notice, which
 * the other instances sharing the store look for every 2 s and follow. */
bool allowlist_source_watches(const allowlist_source *src, const char *repo, const char *ref,
                              const char *const *paths, size_t n);

/* Asks for a reload at the next tick (async-signal-safe: only sets a flag). */
void allowlist_source_reload(allowlist_source *src);

/* The allowlist in force, with a reference the caller drops with allowlist_free(); NULL when
 * none was ever loaded (or `src` holds another kind). */
allowlist *allowlist_source_get(allowlist_source *src);

void allowlist_source_status(allowlist_source *src, allowlist_status *out);

#endif
