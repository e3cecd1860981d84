/*
 * config.c - loads and validates the relay's configuration; see config.h.
 *
 * The table of variables (config_keys.c) drives loading: a key not in it is an error in a config
 * file, and every variable is read by its kind (string, URL, integer within its range...), then by
 * the rules that are its own (take_key() below). config_keys.c also describes a loaded
 * configuration (config_describe()); config_url.c checks the addresses (URLs, store URIs).
 *
 * The KEY=VALUE reader is hand-written: the format is a dozen lines of rules (comments, optional
 * quotes, `\n` escapes).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "config_keys.h"
#include "config_url.h"
#include "ids.h"
#include "crcr_limits.h"

/* A --config file is a few dozen lines; a PEM written on one line is ~2.5 KB. */
#define CONFIG_FILE_MAX_BYTES (1024u * 1024u)
/* An RSA 4096 private key in PEM is ~3.3 KB. */
#define CONFIG_PEM_MAX_BYTES (64u * 1024u)
/* Longest key name echoed back in an "unknown key" error. */
#define CONFIG_KEY_NAME_MAX 64u
/* Longest value quoted back in an error (longer ones are cut with "..."). */
#define CONFIG_QUOTE_MAX 60u
/* Longest GitHub App id or client id. */
#define CONFIG_APP_ID_MAX 64u
/* Longest web URL derived from GITHUB_API_URL (config_web_url): the URL itself is at most 2048. */
#define CONFIG_WEB_URL_MAX 2049u
/* Longest URL accepted for any URL variable. */

/* The raw text of every variable while loading. */
typedef struct {
    char *file_val[K_COUNT];  /* owned copies from the config file */
    const char *val[K_COUNT]; /* effective: the getter's, else the file's, else NULL */
    char *pem_scratch;        /* owned: unescaped GITHUB_APP_PRIVATE_KEY from the environment */
} raw_values;

/* Writes a one-line message into err (if any) and returns CRCR_E_CONFIG. */
static crcr_err fail(char *err, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static crcr_err fail(char *err, size_t errsz, const char *fmt, ...)
{
    if (err && errsz > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
        /* One line, whatever went into it. */
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    }
    return CRCR_E_CONFIG;
}

/* Where config_check() collects problems; NULL (config_load) stops at the first one. */
typedef struct problems {
    config_problem_fn fn;
    void *ctx;
    unsigned n;
} problems;

/* In config_check() (a sink), hands the one-line problem in err to it, empties err and returns
 * true: the caller goes on with the next line or variable. False in config_load(). */
static bool noted(problems *pr, char *err)
{
    if (!pr || !pr->fn)
        return false;
    pr->fn(pr->ctx, err && *err ? err : "configuration problem");
    pr->n++;
    if (err)
        err[0] = '\0';
    return true;
}

/* Writes "WHAT: out of memory" into err (if any) and returns CRCR_E_NOMEM. */
static crcr_err fail_nomem(char *err, size_t errsz, const char *what)
{
    fail(err, errsz, "%s: out of memory", what);
    return CRCR_E_NOMEM;
}

/* Copies a non-secret value into out for quoting in an error: control bytes become '?', and a
 * long value is cut with "...". */
static void quote_value(const char *v, char out[CONFIG_QUOTE_MAX + 4])
{
    size_t i = 0;
    for (; v[i] && i < CONFIG_QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)v[i];
        out[i] = (c < 0x20 || c == 0x7f || c == '\'') ? '?' : (char)c;
    }
    if (v[i]) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

/* fail() with "WHAT: 'VALUE'", the non-secret value quoted by quote_value(). */
static crcr_err fail_quoting(char *err, size_t errsz, const char *what, const char *v)
{
    char q[CONFIG_QUOTE_MAX + 4];
    quote_value(v, q);
    return fail(err, errsz, "%s: '%s'", what, q);
}

/* Frees a string after wiping it. Accepts NULL. */
static void free_wiped(char *s)
{
    if (s) {
        OPENSSL_cleanse(s, strlen(s));
        free(s);
    }
}

/* Returns a fresh copy of s[0..n) (caller frees), or NULL when out of memory. */
static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Reads a whole regular file of at most `max` bytes into `out` (which the caller frees).
 * Returns 0, or an errno value (EFBIG when larger than max). */
static int read_small_file(const char *path, size_t max, buf_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return EISDIR;
    }
    buf_init(out, max);
    char chunk[4096];
    int rc = 0;
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n > 0) {
            crcr_err e = buf_append(out, chunk, n);
            if (e) {
                rc = e == CRCR_E_TOO_LARGE ? EFBIG : ENOMEM;
                break;
            }
        }
        if (n < sizeof(chunk)) {
            if (ferror(f))
                rc = EIO;
            break;
        }
    }
    fclose(f);
    if (rc) {
        if (out->data)
            OPENSSL_cleanse(out->data, out->len);
        buf_free(out);
    }
    return rc;
}

/* Index of the variable called name[0..n), or -1. */
static int key_index(const char *name, size_t n)
{
    for (int i = 0; i < K_COUNT; i++)
        if (strlen(config_keys[i].name) == n && memcmp(config_keys[i].name, name, n) == 0)
            return i;
    return -1;
}

/* True when s[0..n) looks like a variable name: [A-Z][A-Z0-9_]*, short. Only such names are
 * echoed in an error, so that a stray line of PEM or a secret is never printed. */
static bool looks_like_key(const char *s, size_t n)
{
    if (n == 0 || n > CONFIG_KEY_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* Returns a fresh copy of v[0..n) with "\n" turned into a newline and "\\" into one backslash
 * (caller frees), or NULL when out of memory. Other backslashes are kept as they are. */
static char *unescape(const char *v, size_t n)
{
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\' && i + 1 < n && (v[i + 1] == 'n' || v[i + 1] == '\\')) {
            out[o++] = v[i + 1] == 'n' ? '\n' : '\\';
            i++;
        } else {
            out[o++] = v[i];
        }
    }
    out[o] = '\0';
    return out;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* True when v[0..n) holds "-----END" (a PEM value written whole on its line). */
static bool has_pem_end(const char *v, size_t n)
{
    for (size_t i = 0; i + 8 <= n; i++)
        if (memcmp(v + i, "-----END", 8) == 0)
            return true;
    return false;
}

/* Parses the KEY=VALUE file into raw->file_val. With a sink (`pr`) a bad line is noted and the
 * next one read; a file that cannot be read at all still stops. */
static crcr_err read_config_file(const char *path, raw_values *raw, char *err, size_t errsz,
                                 problems *pr)
{
    buf_t text;
    int rc = read_small_file(path, CONFIG_FILE_MAX_BYTES, &text);
    if (rc == EFBIG)
        return fail(err, errsz, "%s: larger than %u bytes", path, CONFIG_FILE_MAX_BYTES);
    if (rc)
        return fail(err, errsz, "%s: cannot read: %s", path, strerror(rc));

    crcr_err e = CRCR_OK;
    const char *p = buf_cstr(&text);
    const char *end = p + text.len;
    if (memchr(p, '\0', text.len)) {
        e = fail(err, errsz, "%s: contains a NUL byte", path);
        goto out;
    }
    bool in_pem = false; /* check mode: inside a PEM block already reported */
    for (unsigned lineno = 1; p < end && !e; lineno++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        if (le > p && le[-1] == '\r')
            le--;
        while (p < le && is_blank(*p))
            p++;
        if (in_pem) {
            in_pem = !((size_t)(le - p) >= 8 && memcmp(p, "-----END", 8) == 0);
            p = next;
            continue;
        }
        if (p == le || *p == '#') {
            p = next;
            continue;
        }
        const char *eq = memchr(p, '=', (size_t)(le - p));
        if (!eq) {
            bool pem = (size_t)(le - p) >= 10 && memcmp(p, "-----BEGIN", 10) == 0;
            if (pem)
                e = fail(err, errsz,
                         "%s:%u: a PEM value must be written on one line with \\n escapes "
                         "(or use GITHUB_APP_PRIVATE_KEY_FILE)",
                         path, lineno);
            else
                e = fail(err, errsz, "%s:%u: expected KEY=VALUE", path, lineno);
            if (!noted(pr, err))
                break;
            e = CRCR_OK;
            in_pem = pem;
            p = next;
            continue;
        }
        const char *ke = eq;
        while (ke > p && is_blank(ke[-1]))
            ke--;
        size_t klen = (size_t)(ke - p);
        int id = key_index(p, klen);
        if (id < 0 || raw->file_val[id]) {
            if (id >= 0)
                e = fail(err, errsz, "%s:%u: %s is set twice", path, lineno, config_keys[id].name);
            else if (looks_like_key(p, klen))
                e = fail(err, errsz, "%s:%u: unknown key '%.*s'", path, lineno, (int)klen, p);
            else
                e = fail(err, errsz, "%s:%u: expected KEY=VALUE", path, lineno);
            if (!noted(pr, err))
                break;
            e = CRCR_OK;
            p = next;
            continue;
        }
        const char *v = eq + 1;
        const char *ve = le;
        while (v < ve && is_blank(*v))
            v++;
        while (ve > v && is_blank(ve[-1]))
            ve--;
        if (ve - v >= 2 && *v == '"' && ve[-1] == '"') {
            v++;
            ve--;
        }
        if (pr && pr->fn && ve - v >= 10 && memcmp(v, "-----BEGIN", 10) == 0 &&
            !has_pem_end(v, (size_t)(ve - v))) {
            /* A PEM pasted over several lines: one problem, not one per line of it. */
            fail(err, errsz,
                 "%s:%u: a PEM value must be written on one line with \\n escapes (or use "
                 "GITHUB_APP_PRIVATE_KEY_FILE)",
                 path, lineno);
            noted(pr, err);
            in_pem = true;
            p = next;
            continue;
        }
        raw->file_val[id] = unescape(v, (size_t)(ve - v));
        if (!raw->file_val[id])
            e = fail_nomem(err, errsz, path);
        p = next;
    }
out:
    OPENSSL_cleanse(text.data, text.len);
    buf_free(&text);
    return e;
}

/* The variable's value, or NULL when unset or empty (empty is the same as unset). */
static const char *given(const raw_values *raw, key_id id)
{
    const char *v = raw->val[id];
    return v && *v ? v : NULL;
}

/* The variable's value, else its default (may be NULL). */
static const char *value_or_default(const raw_values *raw, key_id id)
{
    const char *v = given(raw, id);
    return v ? v : config_keys[id].def;
}

/* Copies the variable's value (or default) into *out; NULL stays NULL. */
static crcr_err take_string(const raw_values *raw, key_id id, char **out, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, id);
    *out = NULL;
    if (!v)
        return CRCR_OK;
    *out = strdup(v);
    if (!*out)
        return fail_nomem(err, errsz, config_keys[id].name);
    return CRCR_OK;
}

/* Parses an integer variable within its table range. */
static crcr_err take_int(const raw_values *raw, key_id id, long long *out, char *err, size_t errsz)
{
    const key_def *k = &config_keys[id];
    const char *v = value_or_default(raw, id);
    char q[CONFIG_QUOTE_MAX + 4];
    quote_value(v, q);
    const char *what = k->min > 0 ? "positive" : "non-negative";
    for (const char *c = v; *c; c++)
        if (*c < '0' || *c > '9')
            return fail(err, errsz, "%s: not a %s integer: '%s'", k->name, what, q);
    errno = 0;
    char *endp = NULL;
    long long n = strtoll(v, &endp, 10);
    if (endp == v || *endp)
        return fail(err, errsz, "%s: not a %s integer: '%s'", k->name, what, q);
    if (n == 0 && k->min == 1 && errno == 0)
        return fail(err, errsz, "%s: not a positive integer: '%s'", k->name, q);
    if (errno == ERANGE || n < k->min || n > k->max)
        return fail(err, errsz, "%s: must be between %lld and %lld: '%s'", k->name, k->min, k->max,
                    q);
    *out = n;
    return CRCR_OK;
}

/* Copies a URL variable after checking it: a V_URL one by config_url_allowed (trailing '/'
 * stripped), a V_BLOB_URL one (ALLOWLIST_URL, CI_PROVIDERS_URL) by config_blob_url_allowed. */
static crcr_err take_url(const raw_values *raw, key_id id, char **out, char *err, size_t errsz)
{
    crcr_err e = take_string(raw, id, out, err, errsz);
    if (e || !*out)
        return e;
    const char *name = config_keys[id].name;
    if (config_keys[id].kind == V_BLOB_URL) {
        if (!config_blob_url_allowed(*out))
            return fail(err, errsz,
                        "%s: must be an https:// GitHub blob URL (http:// only for loopback "
                        "hosts)",
                        name);
        return CRCR_OK;
    }
    config_url_strip_slashes(*out);
    if (!config_url_allowed(*out))
        return fail(err, errsz, "%s: must be https:// (http:// only for loopback hosts)", name);
    return CRCR_OK;
}

/* OpenSSL's passphrase callback: there is no passphrase (never prompt on a terminal). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    return 0;
}

/* True when pem[0..len) holds an unencrypted RSA private key (PKCS#1 or PKCS#8 PEM). */
static bool is_rsa_private_key_pem(const char *pem, size_t len)
{
    if (len > CONFIG_PEM_MAX_BYTES)
        return false;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio)
        return false;
    EVP_PKEY *pk = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    bool ok = pk && EVP_PKEY_get_base_id(pk) == EVP_PKEY_RSA;
    EVP_PKEY_free(pk);
    BIO_free(bio);
    ERR_clear_error();
    return ok;
}

/* GITHUB_APP_PRIVATE_KEY or the contents of GITHUB_APP_PRIVATE_KEY_FILE into cfg. */
static crcr_err take_private_key(raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *text = given(raw, K_GITHUB_APP_PRIVATE_KEY);
    const char *path = given(raw, K_GITHUB_APP_PRIVATE_KEY_FILE);
    if (text && path)
        return fail(err, errsz,
                    "GITHUB_APP_PRIVATE_KEY_FILE: cannot be combined with GITHUB_APP_PRIVATE_KEY; "
                    "set only one");
    if (path) {
        buf_t pem;
        char q[CONFIG_QUOTE_MAX + 4];
        quote_value(path, q);
        int rc = read_small_file(path, CONFIG_PEM_MAX_BYTES, &pem);
        if (rc == EFBIG)
            return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE: '%s' is larger than %u bytes", q,
                        CONFIG_PEM_MAX_BYTES);
        if (rc)
            return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE: cannot read '%s': %s", q,
                        strerror(rc));
        if (!is_rsa_private_key_pem(buf_cstr(&pem), pem.len)) {
            OPENSSL_cleanse(pem.data, pem.len);
            buf_free(&pem);
            return fail(err, errsz,
                        "GITHUB_APP_PRIVATE_KEY_FILE: '%s' is not an RSA private key in PEM "
                        "format",
                        q);
        }
        size_t n = 0;
        cfg->private_key_pem = buf_detach(&pem, &n);
        if (!cfg->private_key_pem)
            return fail_nomem(err, errsz, "GITHUB_APP_PRIVATE_KEY_FILE");
        return CRCR_OK;
    }
    if (!text)
        return CRCR_OK;
    /* An environment variable cannot easily hold newlines: accept a PEM written with literal
     * "\n" sequences (the config file reader has already turned its own escapes into
     * newlines). */
    if (!strchr(text, '\n') && strstr(text, "\\n")) {
        raw->pem_scratch = unescape(text, strlen(text));
        if (!raw->pem_scratch)
            return fail_nomem(err, errsz, "GITHUB_APP_PRIVATE_KEY");
        text = raw->pem_scratch;
    }
    if (!is_rsa_private_key_pem(text, strlen(text)))
        return fail(err, errsz, "GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM format");
    cfg->private_key_pem = strdup(text);
    if (!cfg->private_key_pem)
        return fail_nomem(err, errsz, "GITHUB_APP_PRIVATE_KEY");
    return CRCR_OK;
}

/* GITHUB_APP_ID: digits (App id) or a client id "Iv..." of letters, digits and '.'. */
static bool app_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > CONFIG_APP_ID_MAX)
        return false;
    bool digits = true;
    for (size_t i = 0; i < n; i++)
        if (id[i] < '0' || id[i] > '9')
            digits = false;
    if (digits)
        return id[0] != '0';
    if (n < 3 || id[0] != 'I' || id[1] != 'v')
        return false;
    for (size_t i = 2; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.'))
            return false;
    }
    return true;
}

/* CRCR_ONCALL_TRUSTED_AUTHORS: GitHub logins separated by commas (blanks around them allowed), a
 * user's or an App's ("name[bot]"); empty is fine. */
static bool trusted_authors_valid(const char *v)
{
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;
        while (s < e && is_blank(*s))
            s++;
        while (e > s && is_blank(e[-1]))
            e--;
        size_t len = (size_t)(e - s);
        if (len > 5 && memcmp(e - 5, "[bot]", 5) == 0)
            len -= 5;
        if (e > s && !ids_owner_valid(s, len))
            return false;
        p += n;
        if (*p == ',')
            p++;
    }
    return true;
}

/* CRCR_LISTEN: IPV4:PORT, [IPV6]:PORT or localhost:PORT (which listens on 127.0.0.1). */
static crcr_err take_listen(const raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, K_CRCR_LISTEN);
    char q[CONFIG_QUOTE_MAX + 4];
    quote_value(v, q);
    const char *host, *port;
    size_t hlen;
    if (*v == '[') {
        const char *rb = strchr(v, ']');
        if (!rb || rb[1] != ':')
            return fail(err, errsz, "CRCR_LISTEN: expected HOST:PORT or [IPV6]:PORT: '%s'", q);
        host = v + 1;
        hlen = (size_t)(rb - host);
        port = rb + 2;
    } else {
        const char *colon = strrchr(v, ':');
        if (!colon || memchr(v, ':', (size_t)(colon - v)))
            return fail(err, errsz, "CRCR_LISTEN: expected HOST:PORT or [IPV6]:PORT: '%s'", q);
        host = v;
        hlen = (size_t)(colon - v);
        port = colon + 1;
    }
    long pv;
    if (!config_port_parse(port, strlen(port), &pv))
        return fail(err, errsz, "CRCR_LISTEN: port must be a number from 0 to 65535: '%s'", q);

    char h[INET6_ADDRSTRLEN + 1];
    if (hlen == 0 || hlen >= sizeof(h))
        return fail(err, errsz, "CRCR_LISTEN: not a numeric IP address or localhost: '%s'", q);
    memcpy(h, host, hlen);
    h[hlen] = '\0';
    unsigned char addr[sizeof(struct in6_addr)];
    bool v6 = *v == '[';
    if (!v6 && strcasecmp(h, "localhost") == 0) {
        memcpy(h, "127.0.0.1", sizeof("127.0.0.1"));
    } else if (inet_pton(v6 ? AF_INET6 : AF_INET, h, addr) != 1) {
        return fail(err, errsz, "CRCR_LISTEN: not a numeric IP address or localhost: '%s'", q);
    }
    cfg->listen_host = strdup(h);
    if (!cfg->listen_host)
        return fail_nomem(err, errsz, "CRCR_LISTEN");
    cfg->listen_port = (int)pv;
    return CRCR_OK;
}

/* CRCR_STORE: sqlite:PATH or a postgresql:// (postgres://) URI. */
static crcr_err check_store(const char *s, char *err, size_t errsz)
{
    /* The value is never quoted: a postgresql:// URI may hold a password. */
    if (strncmp(s, "sqlite:", 7) == 0) {
        if (!s[7])
            return fail(err, errsz, "CRCR_STORE: sqlite: needs a path (sqlite:PATH)");
        return CRCR_OK;
    }
    if (strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0)
        return CRCR_OK;
    return fail(err, errsz,
                "CRCR_STORE: unknown scheme (expected sqlite:PATH or postgresql://...)");
}

const char *crcr_issuer_kind_name(crcr_issuer_kind kind)
{
    return kind == CRCR_ISSUER_BUILDKITE ? "buildkite" : "github";
}

/* Splits one CRCR_OIDC_ISSUERS entry s[0..n) ("URL" or "KIND=URL", KIND github or buildkite)
 * into its kind and where its URL starts. False for an unknown kind. */
static bool issuer_kind_prefix(const char **s, size_t *n, crcr_issuer_kind *kind)
{
    *kind = CRCR_ISSUER_GITHUB;
    const char *eq = memchr(*s, '=', *n);
    const char *scheme = *n >= 3 ? strstr(*s, "://") : NULL;
    if (!eq || (scheme && scheme < eq && scheme < *s + *n))
        return true; /* a plain URL (an '=' after "://" belongs to it) */
    size_t kl = (size_t)(eq - *s), skip = kl + 1;
    while (kl > 0 && is_blank((*s)[kl - 1]))
        kl--;
    if (kl == 9 && strncasecmp(*s, "buildkite", 9) == 0)
        *kind = CRCR_ISSUER_BUILDKITE;
    else if (!(kl == 6 && strncasecmp(*s, "github", 6) == 0))
        return false;
    *n -= skip;
    *s = eq + 1;
    while (*n > 0 && is_blank(**s)) {
        (*s)++;
        (*n)--;
    }
    return true;
}

static crcr_err take_issuers(const raw_values *raw, crcr_config *cfg, char *err, size_t errsz)
{
    const char *v = value_or_default(raw, K_CRCR_OIDC_ISSUERS);
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;
        while (s < e && is_blank(*s))
            s++;
        while (e > s && is_blank(e[-1]))
            e--;
        if (e > s) {
            if (cfg->n_oidc_issuers == CRCR_MAX_ISSUERS)
                return fail(err, errsz, "CRCR_OIDC_ISSUERS: more than %d issuers",
                            CRCR_MAX_ISSUERS);
            size_t len = (size_t)(e - s);
            crcr_issuer_kind kind;
            if (!issuer_kind_prefix(&s, &len, &kind))
                return fail(err, errsz,
                            "CRCR_OIDC_ISSUERS: issuer %zu: unknown kind (expected URL, "
                            "github=URL or buildkite=URL)",
                            cfg->n_oidc_issuers + 1);
            cfg->oidc_issuer_kinds[cfg->n_oidc_issuers] = kind;
            char *iss = dup_n(s, len);
            if (!iss)
                return fail_nomem(err, errsz, "CRCR_OIDC_ISSUERS");
            cfg->oidc_issuers[cfg->n_oidc_issuers++] = iss;
            config_url_strip_slashes(iss);
            if (!config_url_allowed(iss))
                return fail(err, errsz,
                            "CRCR_OIDC_ISSUERS: issuer %zu must be https:// (http:// only for "
                            "loopback hosts)",
                            cfg->n_oidc_issuers);
            for (size_t j = 0; j + 1 < cfg->n_oidc_issuers; j++)
                if (strcmp(cfg->oidc_issuers[j], iss) == 0)
                    return fail(err, errsz, "CRCR_OIDC_ISSUERS: issuer %zu is listed twice",
                                cfg->n_oidc_issuers);
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (cfg->n_oidc_issuers == 0)
        return fail(err, errsz, "CRCR_OIDC_ISSUERS: no issuer");
    return CRCR_OK;
}

/* CRCR_CALLBACK_TOKEN: optional or required, in any case. */
static crcr_err take_callback_token(const raw_values *raw, crcr_config *cfg, char *err,
                                    size_t errsz)
{
    const char *cb = value_or_default(raw, K_CRCR_CALLBACK_TOKEN);
    if (strcasecmp(cb, "optional") == 0)
        cfg->callback_token = CRCR_CB_TOKEN_OPTIONAL;
    else if (strcasecmp(cb, "required") == 0)
        cfg->callback_token = CRCR_CB_TOKEN_REQUIRED;
    else
        return fail_quoting(err, errsz, "CRCR_CALLBACK_TOKEN: expected optional or required", cb);
    return CRCR_OK;
}

/* The rules of single variables, on top of their kind's; reads the V_OWN and V_PEM ones. */
static crcr_err take_own(raw_values *raw, crcr_config *cfg, key_id id, char *err, size_t errsz)
{
    crcr_err e;
    const char *v;
    switch (id) {
    case K_GITHUB_APP_ID:
        if (cfg->app_id && !app_id_valid(cfg->app_id))
            return fail_quoting(err, errsz,
                                "GITHUB_APP_ID: not an App id (digits) or client id (Iv...)",
                                cfg->app_id);
        return CRCR_OK;
    case K_GITHUB_APP_SECRET:
        if (raw->val[K_GITHUB_APP_SECRET] && !*raw->val[K_GITHUB_APP_SECRET])
            return fail(err, errsz, "GITHUB_APP_SECRET: is set but empty");
        return CRCR_OK;
    case K_GITHUB_APP_PRIVATE_KEY: /* and GITHUB_APP_PRIVATE_KEY_FILE */
        if ((e = take_private_key(raw, cfg, err, errsz)))
            return e;
        if (cfg->app_id && !cfg->private_key_pem)
            return fail(err, errsz,
                        "GITHUB_APP_PRIVATE_KEY: required when GITHUB_APP_ID is set (or set "
                        "GITHUB_APP_PRIVATE_KEY_FILE)");
        if (!cfg->app_id && cfg->private_key_pem)
            return fail(err, errsz, "GITHUB_APP_ID: required when a private key is set");
        cfg->dry_run = !(cfg->app_id && cfg->private_key_pem);
        return CRCR_OK;
    case K_UPSTREAM_REPO:
        if (!ids_full_name_valid(cfg->upstream_repo))
            return fail_quoting(err, errsz, "UPSTREAM_REPO: expected OWNER/REPO",
                                cfg->upstream_repo);
        return CRCR_OK;
    case K_CRCR_LISTEN:
        return take_listen(raw, cfg, err, errsz);
    case K_CRCR_STORE:
        return check_store(cfg->store_uri, err, errsz);
    case K_CRCR_OIDC_ISSUERS:
        return take_issuers(raw, cfg, err, errsz);
    case K_CRCR_CALLBACK_TOKEN:
        return take_callback_token(raw, cfg, err, errsz);
    case K_CRCR_LOG:
        v = value_or_default(raw, K_CRCR_LOG);
        if (log_level_parse(v, &cfg->log_level) != 0)
            return fail_quoting(err, errsz, "CRCR_LOG: expected debug, info, warn, error or off",
                                v);
        return CRCR_OK;
    case K_CRCR_RETRY_MAX_MS:
        if (cfg->retry_max_ms < cfg->retry_base_ms)
            return fail(err, errsz, "CRCR_RETRY_MAX_MS: must not be less than CRCR_RETRY_BASE_MS");
        return CRCR_OK;
    case K_CRCR_ONCALL_TRUSTED_AUTHORS:
        /* "-" (nobody: only this App's own comments) is no login: it matches no comment. */
        if (strcmp(cfg->oncall_trusted_authors, "-") != 0 &&
            !trusted_authors_valid(cfg->oncall_trusted_authors))
            return fail_quoting(err, errsz,
                                "CRCR_ONCALL_TRUSTED_AUTHORS: expected GitHub logins separated by "
                                "commas (user or app[bot]), or - for none",
                                cfg->oncall_trusted_authors);
        return CRCR_OK;
    case K_CRCR_MAX_CALLBACK_BODY:
        if (cfg->max_callback_body > cfg->max_body) /* the smaller of the two caps applies */
            cfg->max_callback_body = cfg->max_body;
        return CRCR_OK;
    case K_CRCR_UNAUTH_BODY_BUDGET:
        if (!raw->val[K_CRCR_UNAUTH_BODY_BUDGET] && cfg->unauth_body_budget < cfg->max_body)
            cfg->unauth_body_budget = cfg->max_body; /* the default grows with CRCR_MAX_BODY */
        if (cfg->unauth_body_budget < cfg->max_body)
            return fail(err, errsz,
                        "CRCR_UNAUTH_BODY_BUDGET: must be at least CRCR_MAX_BODY (a webhook of the "
                        "largest size must fit)");
        return CRCR_OK;
    default:
        return CRCR_OK;
    }
}

/* Reads one variable into cfg by its kind (config_keys.h), then by its own rules. */
static crcr_err take_key(raw_values *raw, crcr_config *cfg, key_id id, char *err, size_t errsz)
{
    crcr_err e = CRCR_OK;
    long long n = 0;
    switch (config_keys[id].kind) {
    case V_STRING:
        e = take_string(raw, id, config_key_str(cfg, id), err, errsz);
        break;
    case V_URL:
    case V_BLOB_URL:
        e = take_url(raw, id, config_key_str(cfg, id), err, errsz);
        break;
    case V_LONG:
    case V_SIZE:
    case V_INT64:
    case V_BOOL:
        if (!(e = take_int(raw, id, &n, err, errsz)))
            config_key_set_int(cfg, id, n);
        break;
    case V_OWN:
    case V_PEM:
        break;
    }
    return e ? e : take_own(raw, cfg, id, err, errsz);
}

/* take_key(), then with a sink a bad value is noted (and marked in `bad`) and loading goes on. */
static crcr_err take_noting(raw_values *raw, crcr_config *cfg, key_id id, char *err, size_t errsz,
                            problems *pr, bool *bad)
{
    crcr_err e = take_key(raw, cfg, id, err, errsz);
    if (e == CRCR_E_CONFIG && noted(pr, err)) {
        bad[id] = true;
        return CRCR_OK;
    }
    return e;
}

/* Fills cfg from the collected raw values in table order, stopping at the first bad one (with a
 * sink: at none, every bad one noted and marked in `bad`); but ALLOWLIST_TTL_SECONDS is read
 * after CI_PROVIDERS_FILE, the order in which crcr has always reported their problems. */
static crcr_err fill(raw_values *raw, crcr_config *cfg, char *err, size_t errsz, problems *pr,
                     bool *bad)
{
    crcr_err e = CRCR_OK;
    for (int i = 0; i < K_COUNT && !e; i++) {
        if (i == K_ALLOWLIST_TTL_SECONDS)
            continue;
        e = take_noting(raw, cfg, (key_id)i, err, errsz, pr, bad);
        if (!e && i == K_CI_PROVIDERS_FILE)
            e = take_noting(raw, cfg, K_ALLOWLIST_TTL_SECONDS, err, errsz, pr, bad);
    }
    return e;
}

/* Sets cfg->github_web_url from GITHUB_API_URL and checks that the blob URLs are on it (those
 * not already noted as bad in `bad`, which may be NULL). */
static crcr_err derive_web_url(crcr_config *cfg, const bool *bad, char *err, size_t errsz)
{
    char web[CONFIG_WEB_URL_MAX];
    if (!config_github_web_url(cfg->github_api_url, web, sizeof(web)))
        return fail(err, errsz, "GITHUB_API_URL: longer than %u bytes", CONFIG_WEB_URL_MAX - 1);
    cfg->github_web_url = strdup(web);
    if (!cfg->github_web_url)
        return fail_nomem(err, errsz, "GITHUB_API_URL");
    const struct {
        const char *name, *url;
        key_id key;
    } blobs[] = {{"ALLOWLIST_URL", cfg->allowlist_url, K_ALLOWLIST_URL},
                 {"CI_PROVIDERS_URL", cfg->ci_providers_url, K_CI_PROVIDERS_URL}};
    for (size_t i = 0; i < sizeof(blobs) / sizeof(blobs[0]); i++)
        if (blobs[i].url && !(bad && bad[blobs[i].key]) &&
            !config_url_on_web_host(blobs[i].url, web))
            return fail(err, errsz,
                        "%s: must be a blob URL on %s/ (GitHub's web host for GITHUB_API_URL)",
                        blobs[i].name, web);
    return CRCR_OK;
}

const char *config_web_url(const crcr_config *cfg)
{
    return cfg && cfg->github_web_url && *cfg->github_web_url ? cfg->github_web_url
                                                              : "https://github.com";
}

/* What `crcr serve` needs on top of valid values; a variable already noted as bad (`bad`, may be
 * NULL) is not reported again. Returns how many problems went to `fn`. */
static unsigned require_serve(const crcr_config *cfg, const bool *bad, config_problem_fn fn,
                              void *ctx)
{
    unsigned n = 0;
    if (!cfg->app_secret && !(bad && bad[K_GITHUB_APP_SECRET])) {
        fn(ctx, "GITHUB_APP_SECRET: required (the webhook secret GitHub signs deliveries with)");
        n++;
    }
    if (!cfg->allowlist_file && !cfg->allowlist_url &&
        !(bad && (bad[K_ALLOWLIST_FILE] || bad[K_ALLOWLIST_URL]))) {
        fn(ctx, "ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required");
        n++;
    }
    return n;
}

unsigned config_require_serve(const crcr_config *cfg, config_problem_fn fn, void *ctx)
{
    return require_serve(cfg, NULL, fn, ctx);
}

const char *config_getenv(void *ctx, const char *key)
{
    return getenv(key);
}

/* config_load() without a sink, config_check() with one (`pr`, and `bad` its marks). */
static crcr_err load(crcr_config *cfg, const char *file, config_getter get, void *ctx, char *err,
                     size_t errsz, problems *pr, bool *bad)
{
    raw_values raw;
    memset(&raw, 0, sizeof(raw));
    memset(cfg, 0, sizeof(*cfg));
    if (err && errsz > 0)
        err[0] = '\0';

    crcr_err e = CRCR_OK;
    if (file)
        e = read_config_file(file, &raw, err, errsz, pr);
    for (int i = 0; i < K_COUNT && !e; i++) {
        const char *v = get ? get(ctx, config_keys[i].name) : NULL;
        raw.val[i] = v ? v : raw.file_val[i];
    }
    if (!e)
        e = fill(&raw, cfg, err, errsz, pr, bad);
    if (!e) {
        e = derive_web_url(cfg, bad, err, errsz);
        if (e == CRCR_E_CONFIG && noted(pr, err))
            e = CRCR_OK;
    }

    for (int i = 0; i < K_COUNT; i++)
        free_wiped(raw.file_val[i]);
    free_wiped(raw.pem_scratch);

    if (e) {
        config_free(cfg);
        return e;
    }
    log_add_secret(cfg->app_secret);
    log_add_secret(cfg->app_secret_previous);
    log_add_secret(cfg->admin_token);
    log_add_secret(cfg->hud_bot_key);
    config_store_add_secrets(cfg->store_uri);
    return CRCR_OK;
}

crcr_err config_load(crcr_config *cfg, const char *file, config_getter get, void *ctx, char *err,
                     size_t errsz)
{
    return load(cfg, file, get, ctx, err, errsz, NULL, NULL);
}

unsigned config_check(crcr_config *cfg, const char *file, config_getter get, void *ctx,
                      config_problem_fn fn, void *fn_ctx)
{
    problems pr = {fn, fn_ctx, 0};
    bool bad[K_COUNT] = {false};
    char err[CONFIG_PROBLEM_MAX] = "";
    if (load(cfg, file, get, ctx, err, sizeof(err), &pr, bad) != CRCR_OK) {
        noted(&pr, err); /* the file cannot be read, or no memory: nothing more to say */
        return pr.n;
    }
    return pr.n + require_serve(cfg, bad, fn, fn_ctx);
}

void config_free(crcr_config *cfg)
{
    if (!cfg)
        return;
    for (int i = 0; i < K_COUNT; i++) { /* every string is wiped, not only the secrets */
        char **s = config_key_str(cfg, (key_id)i);
        if (s)
            free_wiped(*s);
    }
    free(cfg->listen_host);
    free(cfg->github_web_url);
    for (size_t i = 0; i < cfg->n_oidc_issuers && i < CRCR_MAX_ISSUERS; i++)
        free(cfg->oidc_issuers[i]);
    memset(cfg, 0, sizeof(*cfg));
}
