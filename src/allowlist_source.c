/*
 * allowlist_source.c - loads the allowlist from a file or a GitHub blob URL and keeps it fresh;
 * see allowlist_source.h.
 *
 * The allowlist in force is a refcounted, immutable `allowlist`. A load builds a complete new one
 * and swaps the pointer under a mutex, so readers (webhook threads) never wait for a download and
 * never see a half-loaded list; anything that fails keeps the old one. Loads are serialised by a
 * second mutex, so one slow download never runs twice at the same time and never blocks
 * allowlist_source_get().
 *
 * The URL form goes through the contents API (JSON with base64 content). The base64 is decoded
 * with OpenSSL's EVP_DecodeBlock after removing the line breaks GitHub inserts; padding is
 * accounted for by hand because EVP_DecodeBlock counts it as zero bytes.
 *
 * With a shared store, a refresh that falls due first takes or renews the "allowlist" lease (for
 * 2 x the TTL, so that its holder keeps it from one refresh to the next). The holder fetches and
 * writes the copy (kv "allowlist:copy", never expiring):
 *
 *     crcr-allowlist-copy 1\n
 *     url: https://github.com/<owner>/<repo>/blob/<ref>/<path>\n   (the parsed, decoded source)
 *     etag: <ETag>\n
 *     fetched_at: <ms>\n
 *     \n
 *     <the YAML text, at most CRCR_ALLOWLIST_MAX_BYTES>
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
#include <fcntl.h>
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
#include "ids.h"
#include "json.h"
#include "limits.h"
#include "log.h"

/* Longest ALLOWLIST_URL looked at. */
#define ALLOWLIST_URL_MAX 2048u
/* Longest path inside the repo (GitHub's own limit on a path is 4096 bytes). */
#define ALLOWLIST_PATH_MAX 1024u
/* After a failed load, the next attempt comes after this long (or the TTL, if shorter). */
#define ALLOWLIST_RETRY_MS 30000
/* Parse problems kept for the error text: the first is enough to act on. */
#define ALLOWLIST_ERRORS_MAX 4096u
/* The shared copy: its kv key, the lease, and how long each lasts in TTLs. */
#define ALLOWLIST_COPY_KEY "allowlist:copy"
#define ALLOWLIST_COPY_MAGIC "crcr-allowlist-copy 1"
#define ALLOWLIST_LEASE_NAME "allowlist"
#define ALLOWLIST_LEASE_TTLS 2
/* A copy older than this many TTLs: its holder is gone, every instance fetches for itself. */
#define ALLOWLIST_STALE_TTLS 3
/* Header of the copy (magic, URL, ETag, fetched_at) on top of the text. */
#define ALLOWLIST_COPY_HEADER_MAX 4096u
#define ALLOWLIST_COPY_MAX (CRCR_ALLOWLIST_MAX_BYTES + ALLOWLIST_COPY_HEADER_MAX)
/* Longest lease owner name kept (the store's lease key holds it). */
#define ALLOWLIST_OWNER_MAX 128u
/* Followers look at the copy TTL/10 after it is due again, within these bounds. */
#define ALLOWLIST_FOLLOW_SLACK_MIN_MS 250
#define ALLOWLIST_FOLLOW_SLACK_MAX_MS 10000
#define ALLOWLIST_HASH_LEN 32u
/* The source as written in the copy: https://github.com/ + owner/repo + /blob/ + ref + / + path */
#define ALLOWLIST_CANON_MAX (CRCR_REPO_NAME_MAX + CRCR_REF_MAX + ALLOWLIST_PATH_MAX + 32u)

static const char BLOB_EXPECTED[] = "Expected: https://github.com/<owner>/<repo>/blob/<ref>/<path>";

struct allowlist_source {
    const crcr_config *cfg;
    gh_client *gh;
    bool is_file;
    char *file;                              /* owned; is_file */
    char owner_repo[CRCR_REPO_NAME_MAX];     /* URL source */
    char ref[CRCR_REF_MAX + 1];              /* URL source, decoded */
    char path[ALLOWLIST_PATH_MAX + 1];       /* URL source, decoded */
    char etag[sizeof(((gh_resp *)0)->etag)]; /* of the allowlist in force; load_lock */
    int64_t ttl_ms;

    store *shared;                   /* lease and shared copy (URL source); NULL: none */
    char owner[ALLOWLIST_OWNER_MAX]; /* this instance in the lease */
    char canon[ALLOWLIST_CANON_MAX]; /* the URL source as written in the copy */
    char *text;                      /* owned: the text in force (with `shared`); load_lock */
    size_t text_len;                 /* load_lock */
    unsigned char hash[ALLOWLIST_HASH_LEN]; /* SHA-256 of the text in force; load_lock */
    bool have_hash;                         /* load_lock */

    pthread_mutex_t load_lock; /* one load at a time */
    pthread_mutex_t lock;      /* guards `current` and `st` */
    allowlist *current;        /* one reference owned here */
    allowlist_status st;

    atomic_int reload_requested;
    _Atomic int64_t next_due; /* ms on the caller's clock (tick's now_ms) */
};

/* ---------------------------------------------------------------------------------------- */
/* Blob URL parsing. */

/* Percent-decodes one path part s[0..n) into out (outsz bytes, NUL-terminated). Refuses bad
 * escapes, control characters and, unless `allow_slash`, an encoded '/'. Returns a reason, or
 * NULL on success. */
static const char *decode_segment(const char *s, size_t n, char *out, size_t outsz,
                                  bool allow_slash)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '%') {
            if (n - i < 3)
                return "bad percent-escape";
            int h = ids_hex_value(s[i + 1]), l = ids_hex_value(s[i + 2]);
            if (h < 0 || l < 0)
                return "bad percent-escape";
            ch = (unsigned char)(h * 16 + l);
            i += 2;
            if (ch == '/' && !allow_slash)
                return "an encoded '/' inside a path part";
        }
        if (ch < 0x20 || ch == 0x7f)
            return "control characters";
        if (o + 1 >= outsz)
            return "a part is too long";
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return NULL;
}

/* Writes the message for an invalid URL. The URL is echoed unless it might hold credentials. */
static int url_error(char *err, size_t errsz, const char *url, const char *reason)
{
    if (err && errsz) {
        if (!url || strchr(url, '@') || strlen(url) > 200)
            snprintf(err, errsz, "ALLOWLIST_URL: invalid GitHub blob URL (%s). %s", reason,
                     BLOB_EXPECTED);
        else
            snprintf(err, errsz, "ALLOWLIST_URL: invalid GitHub blob URL '%s' (%s). %s", url,
                     reason, BLOB_EXPECTED);
    }
    return -1;
}

int allowlist_parse_blob_url(const char *url, char *owner_repo, size_t orsz, char *ref,
                             size_t refsz, char *path, size_t pathsz, char *err, size_t errsz)
{
    if (!url || !*url)
        return url_error(err, errsz, url, "empty");
    size_t ulen = strlen(url);
    if (ulen > ALLOWLIST_URL_MAX)
        return url_error(err, errsz, NULL, "longer than 2048 bytes");
    const char *sep = strstr(url, "://");
    if (!sep)
        return url_error(err, errsz, url, "no scheme");
    /* The host must be github.com, which is never a loopback host: http is never acceptable. */
    if ((size_t)(sep - url) != 5 || strncasecmp(url, "https", 5) != 0)
        return url_error(err, errsz, url, "the scheme must be https");
    const char *host = sep + 3;
    size_t hlen = strcspn(host, "/?#");
    if (hlen != 10 || strncasecmp(host, "github.com", 10) != 0)
        return url_error(err, errsz, url, "the host must be exactly github.com");
    const char *p = host + hlen;
    size_t plen = strcspn(p, "?#"); /* a query or fragment (?plain=1, #L10) is ignored */

    /* Split the path on '/', ignoring leading and trailing slashes like upstream. */
    const char *parts[64];
    size_t lens[64], nparts = 0;
    size_t i = 0;
    while (i < plen && p[i] == '/')
        i++;
    size_t end = plen;
    while (end > i && p[end - 1] == '/')
        end--;
    while (i < end) {
        size_t j = i;
        while (j < end && p[j] != '/')
            j++;
        if (j == i)
            return url_error(err, errsz, url, "an empty path part");
        if (nparts == sizeof(parts) / sizeof(parts[0]))
            return url_error(err, errsz, url, "too many path parts");
        parts[nparts] = p + i;
        lens[nparts++] = j - i;
        i = j + 1;
    }
    if (nparts < 5)
        return url_error(err, errsz, url, "fewer than 5 path parts");
    if (lens[2] != 4 || memcmp(parts[2], "blob", 4) != 0)
        return url_error(err, errsz, url, "the third path part must be 'blob'");

    /* owner/repo: GitHub syntax, never percent-encoded. */
    if (!ids_owner_valid(parts[0], lens[0]) || !ids_repo_name_valid(parts[1], lens[1]))
        return url_error(err, errsz, url, "not a valid owner/repo");

    char or_buf[CRCR_REPO_NAME_MAX];
    snprintf(or_buf, sizeof(or_buf), "%.*s/%.*s", (int)lens[0], parts[0], (int)lens[1], parts[1]);
    char ref_buf[CRCR_REF_MAX + 1];
    const char *why = decode_segment(parts[3], lens[3], ref_buf, sizeof(ref_buf), true);
    if (why)
        return url_error(err, errsz, url, why);

    char path_buf[ALLOWLIST_PATH_MAX + 1];
    size_t o = 0;
    for (size_t k = 4; k < nparts; k++) {
        char seg[ALLOWLIST_PATH_MAX + 1];
        why = decode_segment(parts[k], lens[k], seg, sizeof(seg), false);
        if (why)
            return url_error(err, errsz, url, why);
        if (strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0)
            return url_error(err, errsz, url, "'.' and '..' are not allowed in the path");
        size_t sl = strlen(seg);
        if (o + sl + 1 >= sizeof(path_buf))
            return url_error(err, errsz, url, "the path is too long");
        if (o)
            path_buf[o++] = '/';
        memcpy(path_buf + o, seg, sl);
        o += sl;
    }
    path_buf[o] = '\0';

    if (strlen(or_buf) >= orsz || strlen(ref_buf) >= refsz || o >= pathsz)
        return url_error(err, errsz, url, "a part does not fit the caller's buffer");
    memcpy(owner_repo, or_buf, strlen(or_buf) + 1);
    memcpy(ref, ref_buf, strlen(ref_buf) + 1);
    memcpy(path, path_buf, o + 1);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Life cycle. */

allowlist_source *allowlist_source_new(const crcr_config *cfg, gh_client *gh, char *err,
                                       size_t errsz)
{
    if (!cfg || (!cfg->allowlist_file && !cfg->allowlist_url)) {
        snprintf(err, errsz, "ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required");
        return NULL;
    }
    allowlist_source *src = calloc(1, sizeof(*src));
    if (!src) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    src->cfg = cfg;
    src->gh = gh;
    src->ttl_ms = (cfg->allowlist_ttl_s > 0 ? cfg->allowlist_ttl_s : 900) * 1000;
    if (cfg->allowlist_file) {
        src->is_file = true;
        src->file = strdup(cfg->allowlist_file);
        if (!src->file) {
            free(src);
            snprintf(err, errsz, "out of memory");
            return NULL;
        }
        snprintf(src->st.source, sizeof(src->st.source), "file:%s", src->file);
    } else {
        if (allowlist_parse_blob_url(cfg->allowlist_url, src->owner_repo, sizeof(src->owner_repo),
                                     src->ref, sizeof(src->ref), src->path, sizeof(src->path), err,
                                     errsz) != 0) {
            free(src);
            return NULL;
        }
        if (!gh) {
            free(src);
            snprintf(err, errsz, "ALLOWLIST_URL: needs a GitHub client");
            return NULL;
        }
        snprintf(src->st.source, sizeof(src->st.source), "%s", cfg->allowlist_url);
        snprintf(src->canon, sizeof(src->canon), "https://github.com/%s/blob/%s/%s",
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
    allowlist_free(src->current);
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

/* Appends s percent-encoded: RFC 3986 unreserved characters stay, and '/' too when keep_slash. */
static crcr_err url_encode(buf_t *out, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    crcr_err rc = CRCR_OK;
    for (; *s && !rc; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~' ||
                     (keep_slash && ch == '/');
        if (plain) {
            rc = buf_putc(out, (char)ch);
        } else {
            char esc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            rc = buf_append(out, esc, 3);
        }
    }
    return rc;
}

/* Decodes base64 text with embedded line breaks into a new buffer (caller frees *out). */
static crcr_err b64_decode(const char *in, size_t n, unsigned char **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    char *clean = malloc(n + 1);
    if (!clean)
        return CRCR_E_NOMEM;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = in[i];
        if (ch == '\n' || ch == '\r' || ch == ' ' || ch == '\t')
            continue;
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '+' || ch == '/' || ch == '=';
        /* '=' only as the last one or two characters. */
        if (!ok || (c && clean[c - 1] == '=' && ch != '=')) {
            free(clean);
            return CRCR_E_INVALID;
        }
        clean[c++] = ch;
    }
    size_t pad = 0;
    while (pad < c && pad < 3 && clean[c - 1 - pad] == '=')
        pad++;
    if (c % 4 != 0 || pad > 2 || c > CRCR_GH_RESPONSE_MAX) {
        free(clean);
        return CRCR_E_INVALID;
    }
    unsigned char *dst = malloc(c / 4 * 3 + 1);
    if (!dst) {
        free(clean);
        return CRCR_E_NOMEM;
    }
    int got = c ? EVP_DecodeBlock(dst, (const unsigned char *)clean, (int)c) : 0;
    free(clean);
    if (got < 0 || (size_t)got < pad) {
        free(dst);
        return CRCR_E_INVALID;
    }
    *out = dst;
    *outlen = (size_t)got - pad;
    return CRCR_OK;
}

/* The outcome of one fetch. */
typedef enum { FETCH_NEW, FETCH_UNCHANGED, FETCH_FAILED } fetch_result;

/* Reads the file into `text`. */
static fetch_result fetch_file(allowlist_source *src, buf_t *text, crcr_err *rc, char *why,
                               size_t whysz)
{
    /* One byte over the limit, so that the parser reports an oversize file. */
    *rc = buf_read_file(src->file, CRCR_ALLOWLIST_MAX_BYTES + 1u, text);
    if (*rc) {
        snprintf(why, whysz, "%s: cannot read: %s", src->file,
                 *rc == CRCR_E_IO ? strerror(errno) : crcr_strerror(*rc));
        return FETCH_FAILED;
    }
    return FETCH_NEW;
}

/* Extracts and decodes the file from a contents API answer. */
static fetch_result contents_answer(const gh_resp *r, buf_t *text, crcr_err *rc, char *why,
                                    size_t whysz)
{
    char jerr[128] = "";
    jv *doc = jv_parse(r->body.data ? r->body.data : "", r->body.len, jerr, sizeof(jerr));
    fetch_result res = FETCH_FAILED;
    *rc = CRCR_E_INVALID;
    if (!doc) {
        snprintf(why, whysz, "contents API: invalid JSON (%s)", jerr);
    } else if (jv_is_arr(doc)) {
        snprintf(why, whysz, "contents API: the path is a directory, not a file");
    } else if (!jv_is_obj(doc)) {
        snprintf(why, whysz, "contents API: expected a JSON object");
    } else {
        const char *type = jv_path_str(doc, "type");
        const char *enc = jv_path_str(doc, "encoding");
        jv *content = jv_get(doc, "content");
        if (type && strcmp(type, "file") != 0) {
            snprintf(why, whysz, "contents API: the path is a %.32s, not a file", type);
        } else if (enc && strcmp(enc, "none") == 0) {
            *rc = CRCR_E_TOO_LARGE;
            snprintf(why, whysz, "contents API: the file is too large to be served inline");
        } else if (!enc || strcmp(enc, "base64") != 0 || !jv_is_str(content)) {
            snprintf(why, whysz, "contents API: expected base64 content");
        } else {
            unsigned char *bytes;
            size_t n;
            *rc = b64_decode(jv_str(content), jv_str_len(content), &bytes, &n);
            if (*rc) {
                snprintf(why, whysz, "contents API: %s",
                         *rc == CRCR_E_INVALID ? "invalid base64 content" : crcr_strerror(*rc));
            } else {
                if (n > CRCR_ALLOWLIST_MAX_BYTES)
                    n = CRCR_ALLOWLIST_MAX_BYTES + 1u; /* the parser reports the size */
                *rc = buf_append(text, bytes, n);
                free(bytes);
                if (*rc)
                    snprintf(why, whysz, "contents API: %s", crcr_strerror(*rc));
                else
                    res = FETCH_NEW;
            }
        }
    }
    jv_free(doc);
    return res;
}

/* Downloads the file through the contents API; `etag` receives the answer's ETag. */
static fetch_result fetch_url(allowlist_source *src, buf_t *text, char *etag, size_t etagsz,
                              crcr_err *rc, char *why, size_t whysz)
{
    buf_t path;
    buf_init(&path, CRCR_MAX_PATH * 4);
    *rc = buf_printf(&path, "/repos/%s/contents/", src->owner_repo);
    if (!*rc)
        *rc = url_encode(&path, src->path, true);
    if (!*rc)
        *rc = buf_puts(&path, "?ref=");
    if (!*rc)
        *rc = url_encode(&path, src->ref, false);
    if (*rc) {
        snprintf(why, whysz, "contents API: %s", crcr_strerror(*rc));
        buf_free(&path);
        return FETCH_FAILED;
    }
    char inm[sizeof(src->etag) + 32];
    const char *headers[2] = {NULL, NULL};
    if (src->etag[0]) {
        snprintf(inm, sizeof(inm), "If-None-Match: %s", src->etag);
        headers[0] = inm;
    }

    gh_resp r;
    gh_resp_init(&r);
    gh_auth auth = src->cfg->dry_run ? GH_AUTH_NONE : GH_AUTH_INSTALLATION;
    *rc = gh_request(src->gh, auth, src->owner_repo, "GET", buf_cstr(&path), headers, NULL, 0, &r);
    if (*rc == CRCR_E_HTTP && auth != GH_AUTH_NONE) {
        /* The App cannot get a token for the allowlist's repo (not installed there?). The file
         * is public upstream, so an anonymous read still keeps the relay up to date. */
        LOG_WARN("allowlist.auth_fallback", "repo", src->owner_repo, "error", r.error, NULL);
        gh_resp_free(&r);
        gh_resp_init(&r);
        *rc = gh_request(src->gh, GH_AUTH_NONE, src->owner_repo, "GET", buf_cstr(&path), headers,
                         NULL, 0, &r);
    }
    buf_free(&path);

    fetch_result res = FETCH_FAILED;
    if (*rc) {
        snprintf(why, whysz, "contents API: %s%s%s", crcr_strerror(*rc), r.error[0] ? ": " : "",
                 r.error);
    } else if (r.status == 304) {
        res = FETCH_UNCHANGED;
    } else if (r.status == 200) {
        res = contents_answer(&r, text, rc, why, whysz);
        snprintf(etag, etagsz, "%s", r.etag);
    } else {
        *rc = CRCR_E_HTTP;
        snprintf(why, whysz, "contents API: HTTP %ld%s%s", r.status, r.error[0] ? ": " : "",
                 r.error);
    }
    gh_resp_free(&r);
    return res;
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
    char why[1024];   /* the failure, when rc != CRCR_OK */
    allowlist *fresh; /* a new list to put in force (owned until finish), or NULL when
                         the one in force was confirmed unchanged */
    char *text;       /* owned until finish: fresh's text (kept with a store) */
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
    a->rc = allowlist_parse(text, len, &a->fresh, &errors);
    if (a->rc)
        parse_problem(where, &errors, a->rc, a->why, sizeof(a->why));
    buf_free(&errors);
    if (a->rc || !src->shared)
        return;
    a->have_hash = text_hash(text, len, a->hash);
    a->text = malloc(len + 1);
    if (!a->text) {
        allowlist_free(a->fresh);
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
    buf_init(&text, CRCR_ALLOWLIST_MAX_BYTES + 1u);
    fetch_result res = src->is_file ? fetch_file(src, &text, &a->rc, a->why, sizeof(a->why))
                                    : fetch_url(src, &text, a->etag, sizeof(a->etag), &a->rc,
                                                a->why, sizeof(a->why));
    if (res == FETCH_NEW)
        attempt_parse(src, a, src->is_file ? src->file : src->path, text.data, text.len);
    buf_free(&text);
    if (res == FETCH_UNCHANGED && !src->current) {
        /* Cannot happen (the ETag is only kept with a loaded list); refuse rather than trust. */
        a->rc = CRCR_E_STATE;
        snprintf(a->why, sizeof(a->why), "contents API: 304 without an allowlist in force");
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
    allowlist *old = NULL;
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
            src->st.repos = allowlist_count(a->fresh);
            snprintf(src->st.origin, sizeof(src->st.origin), "%s", a->from);
        }
    }
    bool kept = src->current != NULL;
    size_t repos = src->st.repos;
    pthread_mutex_unlock(&src->lock);
    allowlist_free(old); /* readers holding it keep their own reference */

    char nrepos[24];
    snprintf(nrepos, sizeof(nrepos), "%zu", repos);
    if (failed) {
        log_kv(kept ? CRCR_LOG_WARN : CRCR_LOG_ERROR,
               kept ? "allowlist.refresh_failed" : "allowlist.load_failed", "source",
               src->st.source, "from", a->from, "error", a->why, "kept", kept ? "previous" : "none",
               NULL);
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
            log_kv(CRCR_LOG_INFO, "allowlist.loaded", "source", src->st.source, "from", a->from,
                   "repos", nrepos, NULL);
        else
            log_kv(CRCR_LOG_DEBUG, "allowlist.unchanged", "source", src->st.source, "from", a->from,
                   "repos", nrepos, NULL);
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
    buf_init(&v, ALLOWLIST_COPY_MAX);
    crcr_err rc = buf_printf(&v, "%s\nurl: %s\netag: %s\nfetched_at: %" PRId64 "\n\n",
                             ALLOWLIST_COPY_MAGIC, src->canon, etag, fetched_at);
    if (!rc)
        rc = buf_append(&v, src->text, src->text_len);
    if (!rc)
        rc = store_kv_put(src->shared, ALLOWLIST_COPY_KEY, v.data, v.len, 0);
    buf_free(&v);
    if (rc)
        LOG_WARN("allowlist.share_failed", "source", src->st.source, "error", crcr_strerror(rc),
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
    buf_init(&c->raw, ALLOWLIST_COPY_MAX);
    crcr_err rc = store_kv_get(src->shared, ALLOWLIST_COPY_KEY, &c->raw, now);
    if (rc == CRCR_E_NOT_FOUND)
        return COPY_NONE;
    if (rc == CRCR_E_TOO_LARGE) {
        snprintf(why, whysz, "shared copy: larger than %u bytes", ALLOWLIST_COPY_MAX);
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
            magic =
                len == strlen(ALLOWLIST_COPY_MAGIC) && memcmp(line, ALLOWLIST_COPY_MAGIC, len) == 0;
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
    char where[ALLOWLIST_PATH_MAX + 32];
    snprintf(where, sizeof(where), "shared copy of %s", src->path);
    attempt_parse(src, a, where, c->text, c->text_len);
    if (a->fresh)
        snprintf(a->etag, sizeof(a->etag), "%s", c->etag);
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
    if (reload) /* whoever holds the lease: the operator wants it now, here */
        return load_direct(src, now, true, err, errsz);
    bool held = false;
    if (store_lease(src->shared, ALLOWLIST_LEASE_NAME, src->owner, now,
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
        LOG_DEBUG("allowlist.no_copy", "source", src->st.source, NULL);
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
            LOG_WARN("allowlist.copy_stale", "source", src->st.source, "age_s", age, NULL);
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
        (void)store_lease(src->shared, ALLOWLIST_LEASE_NAME, src->owner, now,
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
            LOG_WARN("allowlist.stale_copy", "source", src->st.source, "age_s", age, "error",
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
    crcr_err rc = load_start_locked(src, clock_now_ms(), err, errsz);
    pthread_mutex_unlock(&src->load_lock);
    return rc;
}

void allowlist_source_tick(allowlist_source *src, int64_t now_ms)
{
    if (!src)
        return;
    if (!atomic_load(&src->reload_requested) && now_ms < atomic_load(&src->next_due))
        return;
    /* Another thread already loading will do; its result is as fresh as ours would be. */
    if (pthread_mutex_trylock(&src->load_lock) != 0)
        return;
    (void)load_locked(src, now_ms, NULL, 0);
    pthread_mutex_unlock(&src->load_lock);
}

void allowlist_source_reload(allowlist_source *src)
{
    if (src)
        atomic_store(&src->reload_requested, 1);
}

allowlist *allowlist_source_get(allowlist_source *src)
{
    if (!src)
        return NULL;
    pthread_mutex_lock(&src->lock);
    allowlist *al = allowlist_ref(src->current);
    pthread_mutex_unlock(&src->lock);
    return al;
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
