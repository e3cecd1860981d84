/* gh_contents.c - blob URLs and the contents API; see gh_contents.h. */
#include "gh_contents.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"

/* GitHub.com's web host: blob URLs are on it unless the caller names another (GHES). */
static const char WEB_GITHUB[] = "https://github.com";

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

/* Writes the message for an invalid URL given in variable `var`. The URL is echoed unless it
 * might hold credentials. */
static int url_error(const char *var, char *err, size_t errsz, const char *url, const char *web,
                     const char *reason)
{
    if (err && errsz) {
        if (!url || strchr(url, '@') || strlen(url) > 200)
            snprintf(err, errsz,
                     "%s: invalid GitHub blob URL (%s). Expected: %.200s/<owner>/<repo>/blob/<ref>/"
                     "<path>",
                     var, reason, web);
        else
            snprintf(err, errsz,
                     "%s: invalid GitHub blob URL '%s' (%s). Expected: "
                     "%.200s/<owner>/<repo>/blob/<ref>/<path>",
                     var, url, reason, web);
    }
    return -1;
}

int gh_blob_url_parse(const char *var, const char *url, char *owner_repo, size_t orsz, char *ref,
                      size_t refsz, char *path, size_t pathsz, char *err, size_t errsz)
{
    return gh_blob_url_parse_on(var, url, NULL, owner_repo, orsz, ref, refsz, path, pathsz, err,
                                errsz);
}

int gh_blob_url_parse_on(const char *var, const char *url, const char *web_url, char *owner_repo,
                         size_t orsz, char *ref, size_t refsz, char *path, size_t pathsz, char *err,
                         size_t errsz)
{
    const char *web = web_url && *web_url ? web_url : WEB_GITHUB;
    if (!url || !*url)
        return url_error(var, err, errsz, url, web, "empty");
    size_t ulen = strlen(url);
    if (ulen > GH_BLOB_URL_MAX)
        return url_error(var, err, errsz, NULL, web, "longer than 2048 bytes");
    const char *sep = strstr(url, "://");
    if (!sep)
        return url_error(var, err, errsz, url, web, "no scheme");
    /* Scheme and host[:port] exactly the web host's: on github.com https and no port (github.com
     * is never a loopback host, so http is never acceptable there). */
    const char *host = sep + 3;
    size_t hlen = strcspn(host, "/?#");
    size_t origin_len = (size_t)(host - url) + hlen;
    if (origin_len != strlen(web) || strncasecmp(url, web, origin_len) != 0) {
        if (web != WEB_GITHUB)
            return url_error(var, err, errsz, url, web,
                             "not on GitHub's web host for GITHUB_API_URL");
        if ((size_t)(sep - url) != 5 || strncasecmp(url, "https", 5) != 0)
            return url_error(var, err, errsz, url, web, "the scheme must be https");
        return url_error(var, err, errsz, url, web, "the host must be exactly github.com");
    }
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
            return url_error(var, err, errsz, url, web, "an empty path part");
        if (nparts == sizeof(parts) / sizeof(parts[0]))
            return url_error(var, err, errsz, url, web, "too many path parts");
        parts[nparts] = p + i;
        lens[nparts++] = j - i;
        i = j + 1;
    }
    if (nparts < 5)
        return url_error(var, err, errsz, url, web, "fewer than 5 path parts");
    if (lens[2] != 4 || memcmp(parts[2], "blob", 4) != 0)
        return url_error(var, err, errsz, url, web, "the third path part must be 'blob'");

    /* owner/repo: GitHub syntax, never percent-encoded. */
    if (!ids_owner_valid(parts[0], lens[0]) || !ids_repo_name_valid(parts[1], lens[1]))
        return url_error(var, err, errsz, url, web, "not a valid owner/repo");

    char or_buf[CRCR_REPO_NAME_MAX];
    snprintf(or_buf, sizeof(or_buf), "%.*s/%.*s", (int)lens[0], parts[0], (int)lens[1], parts[1]);
    char ref_buf[CRCR_REF_MAX + 1];
    const char *why = decode_segment(parts[3], lens[3], ref_buf, sizeof(ref_buf), true);
    if (why)
        return url_error(var, err, errsz, url, web, why);

    char path_buf[GH_BLOB_PATH_MAX + 1];
    size_t o = 0;
    for (size_t k = 4; k < nparts; k++) {
        char seg[GH_BLOB_PATH_MAX + 1];
        why = decode_segment(parts[k], lens[k], seg, sizeof(seg), false);
        if (why)
            return url_error(var, err, errsz, url, web, why);
        if (strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0)
            return url_error(var, err, errsz, url, web, "'.' and '..' are not allowed in the path");
        size_t sl = strlen(seg);
        if (o + sl + 1 >= sizeof(path_buf))
            return url_error(var, err, errsz, url, web, "the path is too long");
        if (o)
            path_buf[o++] = '/';
        memcpy(path_buf + o, seg, sl);
        o += sl;
    }
    path_buf[o] = '\0';

    if (strlen(or_buf) >= orsz || strlen(ref_buf) >= refsz || o >= pathsz)
        return url_error(var, err, errsz, url, web, "a part does not fit the caller's buffer");
    memcpy(owner_repo, or_buf, strlen(or_buf) + 1);
    memcpy(ref, ref_buf, strlen(ref_buf) + 1);
    memcpy(path, path_buf, o + 1);
    return 0;
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

/* Extracts and decodes the file (of at most `max` bytes) from a contents API answer. */
static gh_contents_result contents_answer(const gh_resp *r, size_t max, buf_t *text, crcr_err *rc,
                                          char *why, size_t whysz)
{
    char jerr[128] = "";
    jv *doc = jv_parse(r->body.data ? r->body.data : "", r->body.len, jerr, sizeof(jerr));
    gh_contents_result res = GH_CONTENTS_FAILED;
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
            buf_t bytes; /* the decoded file, at most as long as the answer it came in */
            buf_init(&bytes, CRCR_GH_RESPONSE_MAX);
            *rc = base64_decode(jv_str(content), jv_str_len(content), &bytes);
            if (*rc) {
                snprintf(why, whysz, "contents API: %s",
                         *rc == CRCR_E_INVALID ? "invalid base64 content" : crcr_strerror(*rc));
            } else {
                size_t n = bytes.len > max ? max + 1u : bytes.len; /* the parser reports the size */
                *rc = buf_append(text, bytes.data ? bytes.data : "", n);
                if (*rc)
                    snprintf(why, whysz, "contents API: %s", crcr_strerror(*rc));
                else
                    res = GH_CONTENTS_NEW;
            }
            buf_free(&bytes);
        }
    }
    jv_free(doc);
    return res;
}

gh_contents_result gh_contents_fetch(const gh_contents_req *q, buf_t *text, char *etag,
                                     size_t etagsz, crcr_err *rc, char *why, size_t whysz)
{
    buf_t path;
    buf_init(&path, CRCR_MAX_PATH * 4);
    *rc = buf_printf(&path, "/repos/%s/contents/", q->owner_repo);
    if (!*rc)
        *rc = url_encode(&path, q->path, true);
    if (!*rc)
        *rc = buf_puts(&path, "?ref=");
    if (!*rc)
        *rc = url_encode(&path, q->ref, false);
    if (*rc) {
        snprintf(why, whysz, "contents API: %s", crcr_strerror(*rc));
        buf_free(&path);
        return GH_CONTENTS_FAILED;
    }
    char inm[GH_CONTENTS_ETAG_MAX + 32];
    const char *headers[2] = {NULL, NULL};
    if (q->if_none_match && q->if_none_match[0] &&
        strlen(q->if_none_match) < GH_CONTENTS_ETAG_MAX) {
        snprintf(inm, sizeof(inm), "If-None-Match: %s", q->if_none_match);
        headers[0] = inm;
    }

    gh_resp r;
    gh_resp_init(&r);
    gh_auth auth = q->anonymous ? GH_AUTH_NONE : GH_AUTH_INSTALLATION;
    *rc = gh_request(q->gh, auth, q->owner_repo, "GET", buf_cstr(&path), headers, NULL, 0, &r);
    if (*rc == CRCR_E_HTTP && auth != GH_AUTH_NONE) {
        /* The App cannot get a token for the allowlist's repo (not installed there?). The file
         * is public upstream, so an anonymous read still keeps the relay up to date. */
        LOG_WARN(q->fallback_event, "repo", q->owner_repo, "error", r.error, NULL);
        gh_resp_free(&r);
        gh_resp_init(&r);
        *rc = gh_request(q->gh, GH_AUTH_NONE, q->owner_repo, "GET", buf_cstr(&path), headers, NULL,
                         0, &r);
    }
    buf_free(&path);

    gh_contents_result res = GH_CONTENTS_FAILED;
    if (*rc) {
        snprintf(why, whysz, "contents API: %s%s%s", crcr_strerror(*rc), r.error[0] ? ": " : "",
                 r.error);
    } else if (r.status == 304) {
        res = GH_CONTENTS_UNCHANGED;
    } else if (r.status == 200) {
        res = contents_answer(&r, q->max, text, rc, why, whysz);
        snprintf(etag, etagsz, "%s", r.etag);
    } else {
        *rc = CRCR_E_HTTP;
        snprintf(why, whysz, "contents API: HTTP %ld%s%s", r.status, r.error[0] ? ": " : "",
                 r.error);
    }
    gh_resp_free(&r);
    return res;
}
