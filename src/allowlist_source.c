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
 */
#include "allowlist_source.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
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

    pthread_mutex_t load_lock; /* one load at a time */
    pthread_mutex_t lock;      /* guards `current` and `st` */
    allowlist *current;        /* one reference owned here */
    allowlist_status st;

    atomic_int reload_requested;
    _Atomic int64_t next_due; /* ms on the caller's clock (tick's now_ms) */
};

/* ---------------------------------------------------------------------------------------- */
/* Blob URL parsing. */

static bool owner_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-';
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

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
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
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
    bool ok = lens[0] >= 1 && lens[0] <= 39 && lens[1] >= 1 && lens[1] <= 100;
    for (size_t k = 0; ok && k < lens[0]; k++)
        ok = owner_char(parts[0][k]);
    for (size_t k = 0; ok && k < lens[1]; k++)
        ok = owner_char(parts[1][k]) || parts[1][k] == '.' || parts[1][k] == '_';
    if (ok && ((lens[1] == 1 && parts[1][0] == '.') ||
               (lens[1] == 2 && parts[1][0] == '.' && parts[1][1] == '.')))
        ok = false;
    if (!ok)
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
    pthread_mutex_destroy(&src->load_lock);
    pthread_mutex_destroy(&src->lock);
    free(src);
}

/* ---------------------------------------------------------------------------------------- */
/* Fetching. */

/* Reads at most `max` bytes of `path` into `out`. CRCR_E_IO leaves errno set. */
static crcr_err read_file_capped(const char *path, size_t max, buf_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CRCR_E_IO;
    char chunk[16384];
    crcr_err rc = CRCR_OK;
    while (out->len < max) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = CRCR_E_IO;
            break;
        }
        if (n == 0)
            break;
        size_t take = (size_t)n < max - out->len ? (size_t)n : max - out->len;
        rc = buf_append(out, chunk, take);
        if (rc)
            break;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

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
    *rc = read_file_capped(src->file, CRCR_ALLOWLIST_MAX_BYTES + 1u, text);
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
static void parse_problem(const allowlist_source *src, const buf_t *errors, crcr_err rc, char *why,
                          size_t whysz)
{
    const char *where = src->is_file ? src->file : src->path;
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

/* One load attempt. Caller holds load_lock. `sched_now` is on the clock tick() is called with. */
static crcr_err load_locked(allowlist_source *src, int64_t sched_now, char *err, size_t errsz)
{
    atomic_store(&src->reload_requested, 0);
    int64_t now = clock_now_ms();
    char why[1024] = "";
    char etag[sizeof(src->etag)] = "";
    crcr_err rc = CRCR_OK;
    buf_t text;
    buf_init(&text, CRCR_ALLOWLIST_MAX_BYTES + 1u);

    fetch_result res = src->is_file
                           ? fetch_file(src, &text, &rc, why, sizeof(why))
                           : fetch_url(src, &text, etag, sizeof(etag), &rc, why, sizeof(why));
    allowlist *fresh = NULL;
    if (res == FETCH_NEW) {
        buf_t errors;
        buf_init(&errors, ALLOWLIST_ERRORS_MAX);
        rc = allowlist_parse(text.data, text.len, &fresh, &errors);
        if (rc)
            parse_problem(src, &errors, rc, why, sizeof(why));
        buf_free(&errors);
    }
    buf_free(&text);
    if (res == FETCH_UNCHANGED && !src->current) {
        /* Cannot happen (the ETag is only kept with a loaded list); refuse rather than trust. */
        res = FETCH_FAILED;
        rc = CRCR_E_STATE;
        snprintf(why, sizeof(why), "contents API: 304 without an allowlist in force");
    }

    bool failed = rc != CRCR_OK;
    allowlist *old = NULL;
    size_t repos;
    pthread_mutex_lock(&src->lock);
    src->st.last_attempt = now;
    if (failed) {
        copy_text(src->st.last_error, sizeof(src->st.last_error), why);
    } else {
        src->st.last_error[0] = '\0';
        src->st.loaded_at = now;
        if (fresh) {
            old = src->current;
            src->current = fresh;
            src->st.loaded = true;
            src->st.repos = allowlist_count(fresh);
        }
    }
    bool kept = src->current != NULL;
    repos = src->st.repos;
    pthread_mutex_unlock(&src->lock);
    allowlist_free(old); /* readers holding it keep their own reference */

    char nrepos[24];
    snprintf(nrepos, sizeof(nrepos), "%zu", repos);
    if (failed) {
        log_kv(kept ? CRCR_LOG_WARN : CRCR_LOG_ERROR,
               kept ? "allowlist.refresh_failed" : "allowlist.load_failed", "source",
               src->st.source, "error", why, "kept", kept ? "previous" : "none", NULL);
        if (err && errsz)
            copy_text(err, errsz, why);
    } else if (fresh) {
        if (!src->is_file)
            memcpy(src->etag, etag, sizeof(src->etag));
        log_kv(CRCR_LOG_INFO, "allowlist.loaded", "source", src->st.source, "repos", nrepos, NULL);
    } else {
        log_kv(CRCR_LOG_DEBUG, "allowlist.unchanged", "source", src->st.source, "repos", nrepos,
               NULL);
    }
    schedule(src, sched_now, failed);
    return rc;
}

crcr_err allowlist_source_load(allowlist_source *src, char *err, size_t errsz)
{
    pthread_mutex_lock(&src->load_lock);
    crcr_err rc = load_locked(src, clock_now_ms(), err, errsz);
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
