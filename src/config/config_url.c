/*
 * config_url.c - the syntax of the configuration's addresses: http(s) URLs, GitHub blob URLs,
 * ports, and the passwords inside a store URI; see config_url.h and config.h.
 *
 * The URL host check is hand-written: URL parsers in packaged libraries (libcurl's CURLU) accept
 * more than we want to allow and do not answer "is this host loopback".
 */
#include "config_url.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "config.h"
#include "ids.h"
#include "log.h"

/* Longest URL accepted for any URL variable. */
#define CONFIG_URL_MAX 2048u

void config_url_strip_slashes(char *url)
{
    size_t n = strlen(url);
    const char *sep = strstr(url, "://");
    size_t floor = sep ? (size_t)(sep - url) + 3 : 0;
    while (n > floor && url[n - 1] == '/')
        url[--n] = '\0';
}

bool config_port_parse(const char *s, size_t n, long *out)
{
    int64_t pv = 0;
    if (!ids_decimal(s, n, 5, &pv))
        return false;
    *out = (long)pv;
    return pv <= 65535;
}

/* The host part of an http(s) URL. */
typedef struct {
    bool https;
    const char *host; /* into the URL; without brackets for IPv6 */
    size_t host_len;
} url_parts;

/* Splits an http:// or https:// URL far enough to know its host. Rejects whitespace and control
 * bytes anywhere, an empty host, unbalanced brackets and a non-numeric or too large port. */
static bool url_split(const char *url, url_parts *u)
{
    if (!url || strlen(url) > CONFIG_URL_MAX)
        return false;
    for (const char *c = url; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '\\')
            return false;
    const char *rest;
    if (strncasecmp(url, "https://", 8) == 0) {
        u->https = true;
        rest = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        u->https = false;
        rest = url + 7;
    } else {
        return false;
    }
    size_t alen = strcspn(rest, "/?#");
    const char *auth = rest;
    const char *aend = rest + alen;
    /* Userinfo ends at the last '@' of the authority. */
    for (const char *c = aend; c > auth; c--) {
        if (c[-1] == '@') {
            auth = c;
            break;
        }
    }
    const char *port = NULL;
    if (auth < aend && *auth == '[') {
        const char *rb = memchr(auth, ']', (size_t)(aend - auth));
        if (!rb)
            return false;
        u->host = auth + 1;
        u->host_len = (size_t)(rb - auth - 1);
        if (rb + 1 < aend) {
            if (rb[1] != ':')
                return false;
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(auth, ':', (size_t)(aend - auth));
        u->host = auth;
        u->host_len = (size_t)((colon ? colon : aend) - auth);
        if (colon)
            port = colon + 1;
        if (memchr(auth, '[', (size_t)(aend - auth)) || memchr(auth, ']', (size_t)(aend - auth)))
            return false;
    }
    if (u->host_len == 0)
        return false;
    long pv;
    return !port || config_port_parse(port, (size_t)(aend - port), &pv);
}

/* True for localhost, a dotted-quad 127.x.x.x and ::1. */
static bool host_is_loopback(const char *host, size_t len)
{
    char h[64];
    if (len == 0 || len >= sizeof(h))
        return false;
    memcpy(h, host, len);
    h[len] = '\0';
    if (strcasecmp(h, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return memcmp(&a6, &in6addr_loopback, sizeof(a6)) == 0;
    return false;
}

bool config_url_allowed(const char *url)
{
    url_parts u;
    if (!url_split(url, &u))
        return false;
    return u.https || host_is_loopback(u.host, u.host_len);
}

bool config_blob_url_allowed(const char *url)
{
    url_parts u;
    return url_split(url, &u) && (u.https || host_is_loopback(u.host, u.host_len));
}

/* GitHub.com's web host, the web URL of every API URL that names no other. */
static const char GITHUB_WEB_URL[] = "https://github.com";

bool config_github_web_url(const char *api_url, char *out, size_t outsz)
{
    url_parts u;
    const char *web = GITHUB_WEB_URL;
    char tmp[CONFIG_URL_MAX + 1];
    if (api_url && url_split(api_url, &u)) {
        const char *auth = strstr(api_url, "://") + 3;
        const char *path = auth + strcspn(auth, "/?#");
        for (const char *c = path; c > auth; c--) { /* no userinfo in a web URL */
            if (c[-1] == '@') {
                auth = c;
                break;
            }
        }
        size_t plen = strcspn(path, "?#");
        while (plen > 0 && path[plen - 1] == '/')
            plen--;
        bool ghes = plen == 7 && strncasecmp(path, "/api/v3", 7) == 0;
        bool api_host = plen == 0 && u.host_len > 4 && strncasecmp(auth, "api.", 4) == 0;
        if (ghes || api_host) {
            if (api_host)
                auth += 4;
            snprintf(tmp, sizeof(tmp), "%s%.*s", u.https ? "https://" : "http://",
                     (int)(path - auth), auth);
            web = tmp;
        }
    }
    size_t n = strlen(web);
    if (n >= outsz)
        return false;
    memcpy(out, web, n + 1);
    return true;
}

bool config_url_on_web_host(const char *url, const char *web_url)
{
    const char *web = web_url && *web_url ? web_url : GITHUB_WEB_URL;
    size_t n = strlen(web);
    return url && strncasecmp(url, web, n) == 0 && (url[n] == '/' || url[n] == '\0');
}

/* Where the password of a postgresql:// URI starts (userinfo "user:PASSWORD@"), with its
 * length; false when there is none. */
static bool pg_uri_password(const char *uri, size_t *off, size_t *len)
{
    const char *rest = strstr(uri, "://");
    if (!rest)
        return false;
    rest += 3;
    size_t alen = strcspn(rest, "/?#");
    const char *at = NULL;
    for (size_t i = alen; i > 0; i--) {
        if (rest[i - 1] == '@') {
            at = rest + i - 1;
            break;
        }
    }
    if (!at)
        return false;
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (!colon)
        return false;
    *off = (size_t)(colon + 1 - uri);
    *len = (size_t)(at - colon - 1);
    return true;
}

/* Where the value of the first "password=" query parameter of a URI whose value starts at byte
 * `from` or later starts, with its length. libpq takes the last of repeated parameters, so callers
 * walk them all. */
static bool pg_query_password(const char *uri, size_t from, size_t *off, size_t *len)
{
    const char *q = strchr(uri, '?');
    while (q) {
        q++;
        if (strncmp(q, "password=", 9) == 0 && (size_t)(q + 9 - uri) >= from) {
            *off = (size_t)(q + 9 - uri);
            *len = strcspn(q + 9, "&#");
            return true;
        }
        q = strchr(q, '&');
    }
    return false;
}

/* Registers s[0..len) as a log secret; an empty one or one of 512 bytes or more is not. */
static void add_secret_n(const char *s, size_t len)
{
    char tmp[512];
    if (len == 0 || len >= sizeof(tmp))
        return;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    log_add_secret(tmp);
    OPENSSL_cleanse(tmp, sizeof(tmp));
}

void config_store_add_secrets(const char *uri)
{
    size_t off, len;
    if (pg_uri_password(uri, &off, &len))
        add_secret_n(uri + off, len);
    for (size_t from = 0; pg_query_password(uri, from, &off, &len); from = off + len + 1)
        add_secret_n(uri + off, len);
}

crcr_err config_redact_store(const char *uri, buf_t *out)
{
    if (!uri)
        return CRCR_OK;
    size_t off1 = 0, len1 = 0, off2 = 0, len2 = 0;
    bool p1 = pg_uri_password(uri, &off1, &len1);
    bool p2 = pg_query_password(uri, 0, &off2, &len2);
    crcr_err e = CRCR_OK;
    /* Each password is replaced once: an empty one would otherwise be met again at the same i. */
    for (size_t i = 0; uri[i] && !e;) {
        if (p1 && i == off1) {
            e = buf_puts(out, "***");
            i += len1;
            p1 = false;
        } else if (p2 && i == off2) {
            e = buf_puts(out, "***");
            i += len2;
            p2 = pg_query_password(uri, off2 + len2 + 1, &off2, &len2);
        } else {
            e = buf_putc(out, uri[i++]);
        }
    }
    return e;
}
