/*
 * allowlist_source.c - loads the allowlist (or another YAML document of a `doc_kind`: the CI
 * providers map) from a file or a GitHub blob URL and keeps it fresh; see allowlist_source.h.
 *
 * The document in force is a refcounted, immutable value of its kind. A load builds a complete new
 * one and swaps the pointer under a mutex, so readers (webhook threads) never wait for a download
 * and never see a half-loaded list; anything that fails keeps the old one. Loads are serialised by
 * a second mutex, so one slow download never runs twice at the same time and never blocks
 * allowlist_source_get().
 *
 * The URL form goes through the contents API (JSON with base64 content). The base64 is decoded
 * with OpenSSL's EVP_DecodeBlock after removing the line breaks GitHub inserts; padding is
 * accounted for by hand because EVP_DecodeBlock counts it as zero bytes.
 *
 * With a shared store, a refresh that falls due first takes or renews the "<kind>" lease
 * ("allowlist", "ci_providers"; for 2 x the TTL, so that its holder keeps it from one refresh to
 * the next). The holder fetches and writes the copy (kv "<kind>:copy", never expiring):
 *
 *     crcr-<kind>-copy 1\n
 *     url: https://github.com/<owner>/<repo>/blob/<ref>/<path>\n   (the parsed, decoded source)
 *     etag: <ETag>\n
 *     fetched_at: <ms>\n
 *     \n
 *     <the YAML text, at most the kind's max_bytes>
 *
 * on a 200 that parses, and again with a new fetched_at on a 304. The others read the copy and
 * compare the SHA-256 of its text with that of the list in force; they look again just after the
 * copy's next refresh is due (fetched_at + TTL + a slack), so a change reaches them about one
 * slack after the holder. A missing copy, one for another URL, or one older than 3 x the TTL
 * makes the instance fetch for itself (and write the copy). The text of the list in force is
 * kept (under load_lock) only when a store is set, to write the copy on a 304.
 */
#include "allowlist_source.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
#include "gh_contents.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"

/* After a failed load, the next attempt comes after this long (or the TTL, if shorter). */
#define ALLOWLIST_RETRY_MS 30000
/* Parse problems kept for the error text: the first is enough to act on. */
#define ALLOWLIST_ERRORS_MAX 4096u
/* How often an instance sharing a copy looks for another instance's reload notice (a push that
 * touched the file, a SIGHUP): the copy is followed within this, not within the TTL. */
#define DOC_NOTICE_POLL_MS 2000
/* How long the lease of the shared copy lasts, in TTLs. */
#define ALLOWLIST_LEASE_TTLS 2
/* A copy older than this many TTLs: its holder is gone, every instance fetches for itself. */
#define ALLOWLIST_STALE_TTLS 3
/* Header of the copy (magic, URL, ETag, fetched_at) on top of the text. */
#define ALLOWLIST_COPY_HEADER_MAX 4096u
/* Longest kind name, and the names built from it (log events, kv key, lease, copy magic). */
#define DOC_KIND_NAME_MAX 24u
#define DOC_NAME_MAX (DOC_KIND_NAME_MAX + 24u)
/* Longest lease owner name kept (the store's lease key holds it). */
#define ALLOWLIST_OWNER_MAX 128u
/* Followers look at the copy TTL/10 after it is due again, within these bounds. */
#define ALLOWLIST_FOLLOW_SLACK_MIN_MS 250
#define ALLOWLIST_FOLLOW_SLACK_MAX_MS 10000
#define ALLOWLIST_HASH_LEN 32u
/* The source as written in the copy: the web host (https://github.com) + / + owner/repo + /blob/
 * + ref + / + path; a longer one (a GHES host name near GH_BLOB_URL_MAX) is cut, which only
 * names it less exactly in the copy. */
#define ALLOWLIST_CANON_MAX (CRCR_REPO_NAME_MAX + CRCR_REF_MAX + GH_BLOB_PATH_MAX + 32u)

struct allowlist_source {
    const doc_kind *kind;
    const crcr_config *cfg;
    gh_client *gh;
    bool is_file;
    char *file;                              /* owned; is_file */
    char owner_repo[CRCR_REPO_NAME_MAX];     /* URL source */
    char ref[CRCR_REF_MAX + 1];              /* URL source, decoded */
    char path[GH_BLOB_PATH_MAX + 1];         /* URL source, decoded */
    char etag[sizeof(((gh_resp *)0)->etag)]; /* of the allowlist in force; load_lock */
    int64_t ttl_ms;

    store *shared;                   /* lease and shared copy (URL source); NULL: none */
    char owner[ALLOWLIST_OWNER_MAX]; /* this instance in the lease */
    char canon[ALLOWLIST_CANON_MAX]; /* the URL source as written in the copy */
    char copy_key[DOC_NAME_MAX];     /* "<kind>:copy" */
    char copy_magic[DOC_NAME_MAX];   /* "crcr-<kind>-copy 1" */
    size_t copy_max;                 /* the kind's max_bytes + ALLOWLIST_COPY_HEADER_MAX */
    char *text;                      /* owned: the text in force (with `shared`); load_lock */
    size_t text_len;                 /* load_lock */
    unsigned char hash[ALLOWLIST_HASH_LEN]; /* SHA-256 of the text in force; load_lock */
    bool have_hash;                         /* load_lock */

    pthread_mutex_t load_lock; /* one load at a time */
    pthread_mutex_t lock;      /* guards `current` and `st` */
    void *current;             /* one reference owned here (the kind's ref/unref) */
    allowlist_status st;

    atomic_int reload_requested;
    _Atomic int64_t next_due;      /* ms on the caller's clock (tick's now_ms) */
    char notice_key[DOC_NAME_MAX]; /* "<kind>:notice": when a reload last wrote the copy */
    int64_t notice_seen;           /* that time, as this instance last acted on it; load_lock */
    int64_t notice_next;           /* when to look at it again; load_lock */
};

int allowlist_parse_blob_url(const char *url, char *owner_repo, size_t orsz, char *ref,
                             size_t refsz, char *path, size_t pathsz, char *err, size_t errsz)
{
    return gh_blob_url_parse("ALLOWLIST_URL", url, owner_repo, orsz, ref, refsz, path, pathsz, err,
                             errsz);
}

/* ---------------------------------------------------------------------------------------- */
/* Life cycle. */

/* The allowlist as a document kind. */
DOC_KIND_DEFINE(ALLOWLIST_KIND, "allowlist", "ALLOWLIST_FILE", "ALLOWLIST_URL", "repos",
                CRCR_ALLOWLIST_MAX_BYTES, allowlist, allowlist_parse, allowlist_ref, allowlist_free,
                allowlist_count);

/* "<kind>.<what>", the name of a log event, in `buf`. */
static const char *event_name(const allowlist_source *src, const char *what, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", src->kind->name, what);
    return buf;
}

/* The log event "<kind>.<what>" of `src`, in a buffer living as long as the enclosing block. */
#define EV(src, what) event_name((src), (what), (char[DOC_NAME_MAX]){0}, DOC_NAME_MAX)

allowlist_source *allowlist_source_new(const crcr_config *cfg, gh_client *gh, char *err,
                                       size_t errsz)
{
    return doc_source_new(&ALLOWLIST_KIND, cfg, cfg ? cfg->allowlist_file : NULL,
                          cfg ? cfg->allowlist_url : NULL, gh, err, errsz);
}

/* Owner: the caller frees the source with allowlist_source_free(). */
doc_source *doc_source_new(const doc_kind *kind, const crcr_config *cfg, const char *file,
                           const char *url, gh_client *gh, char *err, size_t errsz)
{
    if (!kind || !cfg || (!file && !url)) {
        snprintf(err, errsz, "%s or %s: one of them is required", kind ? kind->file_var : "FILE",
                 kind ? kind->url_var : "URL");
        return NULL;
    }
    if (strlen(kind->name) > DOC_KIND_NAME_MAX) {
        snprintf(err, errsz, "%s: the kind's name is too long", kind->name);
        return NULL;
    }
    allowlist_source *src = calloc(1, sizeof(*src));
    if (!src) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    src->kind = kind;
    src->cfg = cfg;
    src->gh = gh;
    src->ttl_ms = (cfg->allowlist_ttl_s > 0 ? cfg->allowlist_ttl_s : 900) * 1000;
    snprintf(src->copy_key, sizeof(src->copy_key), "%s:copy", kind->name);
    snprintf(src->notice_key, sizeof(src->notice_key), "%s:notice", kind->name);
    snprintf(src->copy_magic, sizeof(src->copy_magic), "crcr-%s-copy 1", kind->name);
    src->copy_max = kind->max_bytes + ALLOWLIST_COPY_HEADER_MAX;
    if (file) {
        src->is_file = true;
        src->file = strdup(file);
        if (!src->file) {
            free(src);
            snprintf(err, errsz, "out of memory");
            return NULL;
        }
        snprintf(src->st.source, sizeof(src->st.source), "file:%s", src->file);
    } else {
        if (gh_blob_url_parse_on(kind->url_var, url, config_web_url(cfg), src->owner_repo,
                                 sizeof(src->owner_repo), src->ref, sizeof(src->ref), src->path,
                                 sizeof(src->path), err, errsz) != 0) {
            free(src);
            return NULL;
        }
        if (!gh) {
            free(src);
            snprintf(err, errsz, "%s: needs a GitHub client", kind->url_var);
            return NULL;
        }
        snprintf(src->st.source, sizeof(src->st.source), "%s", url);
        snprintf(src->canon, sizeof(src->canon), "%s/%s/blob/%s/%s", config_web_url(cfg),
                 src->owner_repo, src->ref, src->path);
    }
    pthread_mutex_init(&src->load_lock, NULL);
    pthread_mutex_init(&src->lock, NULL);
    atomic_init(&src->reload_requested, 0);
    atomic_init(&src->next_due, 0);
    return src;
}

void allowlist_source_free(allowlist_source *src)
{
    if (!src)
        return;
    if (src->current)
        src->kind->unref(src->current);
    free(src->file);
    free(src->text);
    pthread_mutex_destroy(&src->load_lock);
    pthread_mutex_destroy(&src->lock);
    free(src);
}

void allowlist_source_set_store(allowlist_source *src, store *st, const char *owner)
{
    if (!src || src->is_file)
        return;
    src->shared = st;
    snprintf(src->owner, sizeof(src->owner), "%s", owner && *owner ? owner : "crcr");
}

/* ---------------------------------------------------------------------------------------- */
/* Fetching. */

/* The outcome of one fetch. */
typedef enum { FETCH_NEW, FETCH_UNCHANGED, FETCH_FAILED } fetch_result;

/* Reads the file into `text`. */
static fetch_result fetch_file(allowlist_source *src, buf_t *text, crcr_err *rc, char *why,
                               size_t whysz)
{
    /* One byte over the limit, so that the parser reports an oversize file. */
    *rc = buf_read_file(src->file, src->kind->max_bytes + 1u, text);
    if (*rc) {
        snprintf(why, whysz, "%s: cannot read: %s", src->file,
                 *rc == CRCR_E_IO ? strerror(errno) : crcr_strerror(*rc));
        return FETCH_FAILED;
    }
    return FETCH_NEW;
}

/* Downloads the file through the contents API (gh_contents.h); `etag` receives the answer's
 * ETag. */
static fetch_result fetch_url(allowlist_source *src, buf_t *text, char *etag, size_t etagsz,
                              crcr_err *rc, char *why, size_t whysz)
{
    gh_contents_req q = {.gh = src->gh,
                         .anonymous = src->cfg->dry_run,
                         .owner_repo = src->owner_repo,
                         .ref = src->ref,
                         .path = src->path,
                         .if_none_match = src->etag,
                         .max = src->kind->max_bytes,
                         .fallback_event = EV(src, "auth_fallback")};
    gh_contents_result r = gh_contents_fetch(&q, text, etag, etagsz, rc, why, whysz);
    return r == GH_CONTENTS_NEW ? FETCH_NEW
                                : (r == GH_CONTENTS_UNCHANGED ? FETCH_UNCHANGED : FETCH_FAILED);
}

/* Copies as much of `s` as fits, never cutting a UTF-8 character in two (the text ends up in
 * JSON on /readyz). */
static void copy_text(char *dst, size_t dstsz, const char *s)
{
    size_t n = strlen(s);
    if (n >= dstsz) {
        n = dstsz - 1;
        while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/* Formats the first parse problem as "<where>:LINE:COL: msg (and N more problems)". */
static void parse_problem(const char *where, const buf_t *errors, crcr_err rc, char *why,
                          size_t whysz)
{
    const char *s = buf_cstr(errors);
    const char *nl = strchr(s, '\n');
    size_t first = nl ? (size_t)(nl - s) : strlen(s);
    size_t more = 0;
    for (const char *q = nl; q && q[1]; q = strchr(q + 1, '\n'))
        more++;
    buf_t b;
    buf_init(&b, ALLOWLIST_ERRORS_MAX);
    if (!first)
        (void)buf_printf(&b, "%s: %s", where, crcr_strerror(rc));
    else
        (void)buf_printf(&b, "%s:%.*s", where, (int)first, s);
    if (more)
        (void)buf_printf(&b, " (and %zu more problem%s)", more, more == 1 ? "" : "s");
    copy_text(why, whysz, b.len ? buf_cstr(&b) : crcr_strerror(rc));
    buf_free(&b);
}

static void schedule(allowlist_source *src, int64_t now_ms, bool failed)
{
    int64_t delay = src->ttl_ms;
    if (failed && delay > ALLOWLIST_RETRY_MS)
        delay = ALLOWLIST_RETRY_MS;
    atomic_store(&src->next_due, now_ms + delay);
}

/* A follower looks again just after the copy fetched at `fetched_at` is due to be refreshed by
 * the lease holder, or a slack from now when that moment has passed (the holder is late). */
static void schedule_follow(allowlist_source *src, int64_t now_ms, int64_t fetched_at)
{
    int64_t slack = src->ttl_ms / 10;
    if (slack < ALLOWLIST_FOLLOW_SLACK_MIN_MS)
        slack = ALLOWLIST_FOLLOW_SLACK_MIN_MS;
    if (slack > ALLOWLIST_FOLLOW_SLACK_MAX_MS)
        slack = ALLOWLIST_FOLLOW_SLACK_MAX_MS;
    int64_t next = fetched_at + src->ttl_ms;
    if (next < now_ms)
        next = now_ms;
    if (next > now_ms + src->ttl_ms) /* a copy from a clock ahead of ours */
        next = now_ms + src->ttl_ms;
    atomic_store(&src->next_due, next + slack);
}

static bool text_hash(const char *p, size_t n, unsigned char out[ALLOWLIST_HASH_LEN])
{
    unsigned int len = 0;
    return EVP_Digest(p ? p : "", n, out, &len, EVP_sha256(), NULL) == 1 &&
           len == ALLOWLIST_HASH_LEN;
}

/* One load attempt, from fetching (or reading the copy) to the status. */
typedef struct attempt {
    const char *from; /* "file", "github", "shared_copy" (logs and status) */
    crcr_err rc;
    char why[1024]; /* the failure, when rc != CRCR_OK */
    void *fresh;    /* a new document to put in force (owned until finish), or NULL when
                       the one in force was confirmed unchanged */
    char *text;     /* owned until finish: fresh's text (kept with a store) */
    size_t text_len;
    unsigned char hash[ALLOWLIST_HASH_LEN];
    bool have_hash;
    char etag[sizeof(((gh_resp *)0)->etag)];
    int64_t loaded_at; /* what the status says on success */
} attempt;

static void attempt_init(attempt *a, const char *from, int64_t loaded_at)
{
    memset(a, 0, sizeof(*a));
    a->from = from;
    a->loaded_at = loaded_at;
}

/* Parses `text` into a->fresh (keeping a copy of the text and its hash when a store is set), or
 * sets a->rc and a->why naming `where`. */
static void attempt_parse(allowlist_source *src, attempt *a, const char *where, const char *text,
                          size_t len)
{
    buf_t errors;
    buf_init(&errors, ALLOWLIST_ERRORS_MAX);
    a->rc = src->kind->parse(text, len, &a->fresh, &errors);
    if (a->rc)
        parse_problem(where, &errors, a->rc, a->why, sizeof(a->why));
    buf_free(&errors);
    if (a->rc || !src->shared)
        return;
    a->have_hash = text_hash(text, len, a->hash);
    a->text = malloc(len + 1);
    if (!a->text) {
        src->kind->unref(a->fresh);
        a->fresh = NULL;
        a->rc = CRCR_E_NOMEM;
        snprintf(a->why, sizeof(a->why), "%s", crcr_strerror(a->rc));
        return;
    }
    memcpy(a->text, text, len);
    a->text[len] = '\0';
    a->text_len = len;
}

/* Fetches from the file or GitHub. */
static void attempt_fetch(allowlist_source *src, attempt *a)
{
    buf_t text;
    buf_init(&text, src->kind->max_bytes + 1u);
    fetch_result res = src->is_file ? fetch_file(src, &text, &a->rc, a->why, sizeof(a->why))
                                    : fetch_url(src, &text, a->etag, sizeof(a->etag), &a->rc,
                                                a->why, sizeof(a->why));
    if (res == FETCH_NEW)
        attempt_parse(src, a, src->is_file ? src->file : src->path, text.data, text.len);
    buf_free(&text);
    if (res == FETCH_UNCHANGED && !src->current) {
        /* Cannot happen (the ETag is only kept with a loaded list); refuse rather than trust. */
        a->rc = CRCR_E_STATE;
        snprintf(a->why, sizeof(a->why), "contents API: 304 without a %s in force",
                 src->kind->name);
    }
}

/* A new list with no repository while the one in force has some is refused like a list that
 * does not parse (an emptied or truncated file, a bad merge): the previous list stays in force
 * and the reason is in the status. Only a first load may be empty. Caller holds load_lock,
 * which also guards every change of src->current. */
static void refuse_emptying(allowlist_source *src, attempt *a)
{
    if (a->rc || !a->fresh || allowlist_count(a->fresh) || !src->current ||
        !allowlist_count(src->current))
        return;
    snprintf(a->why, sizeof(a->why),
             "%.200s: the new allowlist has no repositories, the one in force has %zu: refused "
             "(restart the relay to start from an empty list)",
             src->is_file ? src->file : src->path, allowlist_count(src->current));
    a->rc = CRCR_E_INVALID;
    allowlist_free(a->fresh);
    a->fresh = NULL;
}

/* Puts the attempt's outcome in force and in the status, logs it, and frees what it owned.
 * Caller holds load_lock. */
static crcr_err attempt_finish(allowlist_source *src, attempt *a, int64_t now, char *err,
                               size_t errsz)
{
    refuse_emptying(src, a);
    bool failed = a->rc != CRCR_OK;
    void *old = NULL;
    pthread_mutex_lock(&src->lock);
    src->st.last_attempt = now;
    if (failed) {
        copy_text(src->st.last_error, sizeof(src->st.last_error), a->why);
    } else {
        src->st.last_error[0] = '\0';
        if (a->fresh || a->loaded_at > src->st.loaded_at)
            src->st.loaded_at = a->loaded_at;
        if (a->fresh) {
            old = src->current;
            src->current = a->fresh;
            src->st.loaded = true;
            src->st.repos = src->kind->count(a->fresh);
            snprintf(src->st.origin, sizeof(src->st.origin), "%s", a->from);
        }
    }
    bool kept = src->current != NULL;
    size_t repos = src->st.repos;
    pthread_mutex_unlock(&src->lock);
    if (old)
        src->kind->unref(old); /* readers holding it keep their own reference */

    char nrepos[24];
    snprintf(nrepos, sizeof(nrepos), "%zu", repos);
    if (failed) {
        log_kv(kept ? CRCR_LOG_WARN : CRCR_LOG_ERROR,
               EV(src, kept ? "refresh_failed" : "load_failed"), "source", src->st.source, "from",
               a->from, "error", a->why, "kept", kept ? "previous" : "none", NULL);
        if (err && errsz)
            copy_text(err, errsz, a->why);
        free(a->text);
    } else {
        if (!src->is_file && (a->fresh || a->etag[0]))
            memcpy(src->etag, a->etag, sizeof(src->etag));
        if (a->fresh && src->shared) {
            free(src->text);
            src->text = a->text;
            src->text_len = a->text_len;
            memcpy(src->hash, a->hash, sizeof(src->hash));
            src->have_hash = a->have_hash;
        } else {
            free(a->text);
        }
        if (a->fresh)
            log_kv(CRCR_LOG_INFO, EV(src, "loaded"), "source", src->st.source, "from", a->from,
                   src->kind->count_name, nrepos, NULL);
        else
            log_kv(CRCR_LOG_DEBUG, EV(src, "unchanged"), "source", src->st.source, "from", a->from,
                   src->kind->count_name, nrepos, NULL);
    }
    a->text = NULL;
    a->fresh = NULL;
    return a->rc;
}

/* Writes the text in force to the shared copy as fetched (or confirmed) at `fetched_at`. A
 * failure is logged: the others then fetch for themselves once the copy is stale. */
static void copy_write(allowlist_source *src, int64_t fetched_at)
{
    if (!src->shared || !src->text)
        return;
    /* An ETag is one header line; anything else in it is not worth sharing. */
    const char *etag = src->etag;
    for (const char *q = etag; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            etag = "";
    buf_t v;
    buf_init(&v, src->copy_max);
    crcr_err rc = buf_printf(&v, "%s\nurl: %s\netag: %s\nfetched_at: %" PRId64 "\n\n",
                             src->copy_magic, src->canon, etag, fetched_at);
    if (!rc)
        rc = buf_append(&v, src->text, src->text_len);
    if (!rc)
        rc = store_kv_put(src->shared, src->copy_key, v.data, v.len, 0);
    buf_free(&v);
    if (rc)
        LOG_WARN(EV(src, "share_failed"), "source", src->st.source, "error", crcr_strerror(rc),
                 NULL);
}

/* The shared copy as read back; `text` points into `raw`. */
typedef struct shared_copy {
    buf_t raw;
    char url[ALLOWLIST_CANON_MAX];
    char etag[sizeof(((gh_resp *)0)->etag)];
    int64_t fetched_at;
    const char *text;
    size_t text_len;
} shared_copy;

typedef enum {
    COPY_OK,
    COPY_NONE,      /* no copy, or one for another URL: ignored */
    COPY_BAD,       /* unreadable (the reason in why) */
    COPY_STORE_DOWN /* the store did not answer */
} copy_state;

/* Copies header value v[0..n) into out (outsz bytes); false when it does not fit. */
static bool header_value(const char *v, size_t n, char *out, size_t outsz)
{
    if (n >= outsz)
        return false;
    memcpy(out, v, n);
    out[n] = '\0';
    return true;
}

/* Reads and splits the copy. The caller frees c->raw with buf_free() in every case. */
static copy_state copy_read(allowlist_source *src, int64_t now, shared_copy *c, char *why,
                            size_t whysz)
{
    memset(c, 0, sizeof(*c));
    buf_init(&c->raw, src->copy_max);
    crcr_err rc = store_kv_get(src->shared, src->copy_key, &c->raw, now);
    if (rc == CRCR_E_NOT_FOUND)
        return COPY_NONE;
    if (rc == CRCR_E_TOO_LARGE) {
        snprintf(why, whysz, "shared copy: larger than %zu bytes", src->copy_max);
        return COPY_BAD;
    }
    if (rc) {
        snprintf(why, whysz, "shared copy: %s", crcr_strerror(rc));
        return COPY_STORE_DOWN;
    }
    const char *p = buf_cstr(&c->raw);
    size_t n = c->raw.len, i = 0;
    bool magic = false, body = false, url = false, fetched = false;
    while (i < n && !body) {
        const char *nl = memchr(p + i, '\n', n - i);
        if (!nl)
            break;
        const char *line = p + i;
        size_t len = (size_t)(nl - line);
        i += len + 1;
        if (memchr(line, '\0', len))
            break;
        if (!magic) {
            magic = len == strlen(src->copy_magic) && memcmp(line, src->copy_magic, len) == 0;
            if (!magic)
                break;
        } else if (len == 0) {
            body = true;
        } else if (len > 5 && memcmp(line, "url: ", 5) == 0) {
            url = header_value(line + 5, len - 5, c->url, sizeof(c->url));
            if (!url)
                break;
        } else if (len > 6 && memcmp(line, "etag: ", 6) == 0) {
            if (!header_value(line + 6, len - 6, c->etag, sizeof(c->etag)))
                c->etag[0] = '\0'; /* only an optimisation: the holder's next fetch is a 200 */
        } else if (len > 12 && memcmp(line, "fetched_at: ", 12) == 0) {
            int64_t v = 0;
            size_t k = 12;
            for (; k < len && k < 12 + 18 && line[k] >= '0' && line[k] <= '9'; k++)
                v = v * 10 + (line[k] - '0');
            fetched = k == len && v > 0;
            c->fetched_at = v;
            if (!fetched)
                break;
        } /* other lines: from a newer relay; ignored */
    }
    if (!magic || !body || !url || !fetched) {
        snprintf(why, whysz, "shared copy: not a copy this relay can read (%s)",
                 !magic ? "unknown format" : "incomplete header");
        return COPY_BAD;
    }
    if (strcmp(c->url, src->canon) != 0)
        return COPY_NONE;
    c->text = p + i;
    c->text_len = n - i;
    return COPY_OK;
}

/* How old the copy is on our clock (0 for a copy from a clock ahead of ours). */
static int64_t copy_age(const shared_copy *c, int64_t now)
{
    return now > c->fetched_at ? now - c->fetched_at : 0;
}

/* Reads the copy's list into `a` (from "shared_copy"): confirmed when its text is the one in
 * force, parsed otherwise. */
static void attempt_copy(allowlist_source *src, attempt *a, const shared_copy *c, int64_t now)
{
    attempt_init(a, "shared_copy", c->fetched_at < now ? c->fetched_at : now);
    unsigned char h[ALLOWLIST_HASH_LEN];
    if (src->current && src->have_hash && text_hash(c->text, c->text_len, h) &&
        memcmp(h, src->hash, sizeof(h)) == 0) {
        snprintf(a->etag, sizeof(a->etag), "%s", c->etag);
        return;
    }
    char where[GH_BLOB_PATH_MAX + 32];
    snprintf(where, sizeof(where), "shared copy of %s", src->path);
    attempt_parse(src, a, where, c->text, c->text_len);
    if (a->fresh)
        snprintf(a->etag, sizeof(a->etag), "%s", c->etag);
}

/* Tells the other instances that a reload wrote the copy (kv "<kind>:notice" = its time). */
static void notice_write(allowlist_source *src, int64_t now)
{
    char v[24];
    int n = snprintf(v, sizeof(v), "%" PRId64, now);
    if (store_kv_put(src->shared, src->notice_key, v, (size_t)n, 0) != CRCR_OK)
        LOG_WARN(EV(src, "notice_failed"), "source", src->st.source, NULL);
    src->notice_seen = now;
}

/* Another instance's reload notice newer than what this one acted on (or 0). */
static int64_t notice_read(allowlist_source *src, int64_t now)
{
    buf_t v;
    buf_init(&v, 32);
    int64_t at = 0;
    if (store_kv_get(src->shared, src->notice_key, &v, now) == CRCR_OK && v.len)
        at = strtoll(buf_cstr(&v), NULL, 10);
    buf_free(&v);
    return at > src->notice_seen ? at : 0;
}

/* Fetches for itself (file, GitHub); writes the copy when `share` and the list was fetched or
 * confirmed. */
static crcr_err load_direct(allowlist_source *src, int64_t now, bool share, char *err, size_t errsz)
{
    attempt a;
    attempt_init(&a, src->is_file ? "file" : "github", now);
    attempt_fetch(src, &a);
    crcr_err rc = attempt_finish(src, &a, now, err, errsz);
    if (!rc && share)
        copy_write(src, now);
    schedule(src, now, rc != CRCR_OK);
    return rc;
}

/* A refresh that fell due, or a reload. Caller holds load_lock. */
static crcr_err load_locked(allowlist_source *src, int64_t now, char *err, size_t errsz)
{
    bool reload = atomic_exchange(&src->reload_requested, 0) != 0;
    if (src->is_file || !src->shared)
        return load_direct(src, now, false, err, errsz);
    if (reload) { /* whoever holds the lease: a SIGHUP or a push wants it now, here */
        crcr_err rc = load_direct(src, now, true, err, errsz);
        if (!rc)
            notice_write(src, now); /* the others follow the copy at their next look */
        return rc;
    }
    bool held = false;
    if (store_lease(src->shared, src->kind->name, src->owner, now,
                    ALLOWLIST_LEASE_TTLS * src->ttl_ms, &held) != CRCR_OK)
        return load_direct(src, now, false, err, errsz); /* the store is down: as alone */
    if (held)
        return load_direct(src, now, true, err, errsz);

    shared_copy c;
    char why[256] = "";
    crcr_err rc;
    switch (copy_read(src, now, &c, why, sizeof(why))) {
    case COPY_STORE_DOWN:
        rc = load_direct(src, now, false, err, errsz);
        break;
    case COPY_NONE:
        LOG_DEBUG(EV(src, "no_copy"), "source", src->st.source, NULL);
        rc = load_direct(src, now, true, err, errsz);
        break;
    case COPY_BAD: {
        attempt a;
        attempt_init(&a, "shared_copy", now);
        a.rc = CRCR_E_INVALID;
        snprintf(a.why, sizeof(a.why), "%s", why);
        rc = attempt_finish(src, &a, now, err, errsz);
        schedule(src, now, true);
        break;
    }
    case COPY_OK:
    default:
        if (copy_age(&c, now) > ALLOWLIST_STALE_TTLS * src->ttl_ms) {
            char age[24];
            snprintf(age, sizeof(age), "%" PRId64, copy_age(&c, now) / 1000);
            LOG_WARN(EV(src, "copy_stale"), "source", src->st.source, "age_s", age, NULL);
            rc = load_direct(src, now, true, err, errsz);
        } else {
            attempt a;
            attempt_copy(src, &a, &c, now);
            rc = attempt_finish(src, &a, now, err, errsz);
            schedule_follow(src, now, c.fetched_at);
        }
        break;
    }
    buf_free(&c.raw);
    return rc;
}

/* Start-up. Caller holds load_lock. */
static crcr_err load_start_locked(allowlist_source *src, int64_t now, char *err, size_t errsz)
{
    atomic_store(&src->reload_requested, 0);
    if (src->is_file || !src->shared)
        return load_direct(src, now, false, err, errsz);

    /* A copy younger than the TTL is as good as a fetch: N instances starting together make
     * one fetch, not N. */
    shared_copy c;
    char why[256] = "";
    copy_state cs = copy_read(src, now, &c, why, sizeof(why));
    bool copy_tried = false;
    if (cs == COPY_OK && copy_age(&c, now) < src->ttl_ms) {
        attempt a;
        attempt_copy(src, &a, &c, now);
        copy_tried = true;
        if (attempt_finish(src, &a, now, NULL, 0) == CRCR_OK) {
            schedule_follow(src, now, c.fetched_at);
            buf_free(&c.raw);
            return CRCR_OK;
        }
    }
    if (cs != COPY_STORE_DOWN) {
        bool held = false; /* the first instance up leads; it fetches below in any case */
        (void)store_lease(src->shared, src->kind->name, src->owner, now,
                          ALLOWLIST_LEASE_TTLS * src->ttl_ms, &held);
    }
    char fetch_err[256] = "";
    crcr_err rc = load_direct(src, now, cs != COPY_STORE_DOWN, fetch_err, sizeof(fetch_err));
    if (rc && cs == COPY_OK && !copy_tried && !src->current) {
        /* GitHub cannot be reached: a copy of any age is better than no allowlist. */
        attempt a;
        attempt_copy(src, &a, &c, now);
        if (attempt_finish(src, &a, now, NULL, 0) == CRCR_OK) {
            char age[24];
            snprintf(age, sizeof(age), "%" PRId64, copy_age(&c, now) / 1000);
            LOG_WARN(EV(src, "stale_copy"), "source", src->st.source, "age_s", age, "error",
                     fetch_err, NULL);
            pthread_mutex_lock(&src->lock);
            char note[sizeof(src->st.last_error)];
            snprintf(note, sizeof(note), "%.160s (in force: the shared copy fetched %s s ago)",
                     fetch_err, age);
            copy_text(src->st.last_error, sizeof(src->st.last_error), note);
            pthread_mutex_unlock(&src->lock);
            rc = CRCR_OK;
        }
    }
    if (rc && err && errsz)
        copy_text(err, errsz, fetch_err);
    buf_free(&c.raw);
    return rc;
}

crcr_err allowlist_source_load(allowlist_source *src, char *err, size_t errsz)
{
    pthread_mutex_lock(&src->load_lock);
    if (!src->is_file && src->shared) /* what start-up loads is at least as new */
        src->notice_seen = notice_read(src, clock_now_ms());
    crcr_err rc = load_start_locked(src, clock_now_ms(), err, errsz);
    pthread_mutex_unlock(&src->load_lock);
    return rc;
}

/* An instance sharing a copy: another instance's reload notice makes the copy due now. Caller
 * holds load_lock. */
static void notice_poll(allowlist_source *src, int64_t now_ms)
{
    if (src->is_file || !src->shared || now_ms < src->notice_next)
        return;
    src->notice_next = now_ms + DOC_NOTICE_POLL_MS;
    int64_t at = notice_read(src, now_ms);
    if (!at)
        return;
    src->notice_seen = at;
    atomic_store(&src->next_due, now_ms);
    LOG_INFO(EV(src, "notice"), "source", src->st.source, NULL);
}

void allowlist_source_tick(allowlist_source *src, int64_t now_ms)
{
    if (!src)
        return;
    if (!src->is_file && src->shared && now_ms >= src->notice_next &&
        pthread_mutex_trylock(&src->load_lock) == 0) {
        notice_poll(src, now_ms);
        pthread_mutex_unlock(&src->load_lock);
    }
    if (!atomic_load(&src->reload_requested) && now_ms < atomic_load(&src->next_due))
        return;
    /* Another thread already loading will do; its result is as fresh as ours would be. */
    if (pthread_mutex_trylock(&src->load_lock) != 0)
        return;
    (void)load_locked(src, now_ms, NULL, 0);
    pthread_mutex_unlock(&src->load_lock);
}

bool allowlist_source_watches(const allowlist_source *src, const char *repo, const char *ref,
                              const char *const *paths, size_t n)
{
    if (!src || src->is_file || !repo || !ref || strncmp(ref, "refs/heads/", 11) != 0 ||
        strcasecmp(repo, src->owner_repo) != 0 || strcmp(ref + 11, src->ref) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (paths[i] && strcmp(paths[i], src->path) == 0)
            return true;
    }
    return false;
}

void allowlist_source_reload(allowlist_source *src)
{
    if (src)
        atomic_store(&src->reload_requested, 1);
}

void *doc_source_get(doc_source *src)
{
    if (!src)
        return NULL;
    pthread_mutex_lock(&src->lock);
    void *doc = src->current ? src->kind->ref(src->current) : NULL;
    pthread_mutex_unlock(&src->lock);
    return doc;
}

allowlist *allowlist_source_get(allowlist_source *src)
{
    return src && src->kind == &ALLOWLIST_KIND ? doc_source_get(src) : NULL;
}

void allowlist_source_status(allowlist_source *src, allowlist_status *out)
{
    if (!src) {
        memset(out, 0, sizeof(*out));
        return;
    }
    pthread_mutex_lock(&src->lock);
    *out = src->st;
    pthread_mutex_unlock(&src->lock);
}
