/*
 * oidc.c - OIDC token verification for callbacks (GitHub Actions, Buildkite): Authorization header
 * parsing, issuer selection, a per-issuer JWKS cache fed over http_client.h, RS256 signature checks
 * (jwt.c) and claim checks; the repository of a non-GitHub token comes from its kind's resolver.
 * See oidc.h for the rules.
 *
 * Why hand-written: the JOSE work (base64url, RS256 on OpenSSL EVP, JWK to EVP_PKEY) is already in
 * jwt.c for the reasons given there; what remains is policy (which issuers, which claims, when to
 * refetch keys), which no library decides for us. libjwt's JWKS support would bring back the
 * dependency jwt.c avoids, and PyJWKClient-style caching needs the refetch limit below anyway.
 *
 * Concurrency: one mutex guards the issuers' cache state. A key set is immutable once built and
 * reference-counted, so a verifying thread takes a reference under the lock, drops the lock and
 * checks the signature on its own. A fetch runs without the lock too; the issuer's `fetching` flag
 * makes it single-flight, and threads that need its result wait on the condition variable.
 */
#include "oidc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "buf.h"
#include "http_client.h"
#include "jwt.h"
#include "log.h"
#include "oidc_cache.h"

/* Longest Authorization header value looked at: a maximal token plus the "Bearer " prefix and
 * some surrounding blanks. Anything longer is refused without being scanned further. */
#define OIDC_AUTH_HEADER_MAX (CRCR_JWT_MAX + 64u)
/* How much of a token's "iss" is repeated in the rejection reason. */
#define OIDC_REASON_ISS_MAX 100u
/* JWKS URL suffix appended to the issuer. */
#define OIDC_JWKS_PATH "/.well-known/jwks"
/* Longest JWKS URL. */
#define OIDC_JWKS_URL_MAX (OIDC_ISSUER_MAX + sizeof(OIDC_JWKS_PATH))
/* Repository name parts, as GitHub limits them. */
#define OIDC_OWNER_MAX 39u
#define OIDC_REPO_MAX 100u

#define OIDC_USER_AGENT "crcr-oidc/1"

static const char R_MISSING[] = "Missing authorization token";
static const char R_INVALID[] = "Invalid authorization token";
static const char R_EXPIRED[] = "Token expired";
static const char R_NBF[] = "Token not yet valid";
static const char R_IAT[] = "Token issued in the future";
static const char R_AUD[] = "Invalid audience";
static const char R_REPO[] = "GitHub OIDC token missing 'repository' claim";
static const char R_INTERNAL[] = "Internal error";

/* One usable key of a JWKS document. */
typedef struct jwks_key {
    bool has_kid;
    char kid[OIDC_KID_MAX + 1];
    EVP_PKEY *pkey; /* owned */
} jwks_key;

/* An immutable key set, shared by reference between the cache and verifying threads. */
typedef struct jwks_set {
    atomic_uint refs;
    size_t n;
    jwks_key keys[]; /* n entries */
} jwks_set;

typedef struct issuer {
    char url[OIDC_ISSUER_MAX + 1]; /* normalised: no trailing '/' */
    size_t url_len;
    crcr_issuer_kind kind;
    bool loopback;      /* http:// allowed for the JWKS fetch */
    jwks_set *keys;     /* guarded by mu; NULL until the first successful fetch */
    int64_t fetched_at; /* guarded by mu; now_s when `keys` was installed */
    uint64_t keys_gen;  /* guarded by mu; counts installs of `keys` (oidc_cache entries) */
    int64_t attempt_at; /* guarded by mu; now_s of the last fetch attempt */
    bool attempted;     /* guarded by mu */
    bool fetching;      /* guarded by mu */
    bool failing;       /* guarded by mu; the last fetch failed */
    char fetch_error[HTTP_ERROR_MAX + 64]; /* guarded by mu; why, while failing */
    atomic_uint_fast64_t st_unavailable;   /* tokens answered 503: no keys to judge them */
} issuer;

struct oidc_verifier {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* signalled when a fetch ends */
    issuer iss[OIDC_ISSUERS_MAX];
    size_t n_iss;
    http_pool *pool; /* the JWKS fetches' handles, kept-alive connections */
    char audience[OIDC_AUDIENCE_MAX + 1];
    oidc_resolver resolver[CRCR_ISSUER_BUILDKITE + 1]; /* per kind; set before use */
    void *resolver_ctx[CRCR_ISSUER_BUILDKITE + 1];
    oidc_cache *cache; /* tokens verified already (GitHub issuers), owned */
    atomic_uint_fast64_t st_fetches, st_verified, st_rejected, st_cache_hits;
};

/* ---------------------------------------------------------------- small helpers */

/* Writes `s` into `out[0..outsz)` (truncating), if there is a buffer at all. */
static void set_reason(char *out, size_t outsz, const char *s)
{
    if (out && outsz)
        snprintf(out, outsz, "%s", s);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* a + b without overflow (b >= 0): saturates at INT64_MAX. */
static int64_t sat_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* True when `now` and `then` are at least `span` seconds apart, in either direction (a clock that
 * jumped back far enough counts as elapsed; small backward steps between threads do not). */
static bool apart(int64_t now, int64_t then, int64_t span)
{
    uint64_t d = now >= then ? (uint64_t)now - (uint64_t)then : (uint64_t)then - (uint64_t)now;
    return d >= (uint64_t)span;
}

/* Length of `s` without one trailing '/'. */
static size_t strip_slash(const char *s, size_t n)
{
    return n > 0 && s[n - 1] == '/' ? n - 1 : n;
}

/* The string of `v` when it is a string without embedded NUL of 1..max bytes; NULL otherwise. */
static const char *bounded_str(const jv *v, size_t max)
{
    const char *s = jv_str(v);
    if (!s)
        return NULL;
    size_t n = jv_str_len(v);
    if (n == 0 || n > max || strlen(s) != n)
        return NULL;
    return s;
}

/* ---------------------------------------------------------------- key sets */

static void set_ref(jwks_set *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

/* Drops one reference; the last one frees the set and its keys. Accepts NULL. */
static void set_unref(jwks_set *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < s->n; i++)
        EVP_PKEY_free(s->keys[i].pkey);
    free(s);
}

/* True when the set holds a key for `kid` (any key at all when kid is NULL). */
static bool set_has(const jwks_set *s, const char *kid)
{
    if (!s)
        return false;
    if (!kid)
        return s->n > 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->keys[i].has_kid && strcmp(s->keys[i].kid, kid) == 0)
            return true;
    return false;
}

/* Reads one JWK into `k` (which then owns a key). False for anything that is not a usable RS256
 * signing key: other key types, "use" other than "sig", "alg" other than "RS256", a bad "kid",
 * or a modulus/exponent jwt_rsa_public_from_jwk() refuses. */
static bool jwk_read(const jv *jwk, jwks_key *k)
{
    const char *kty = jv_str(jv_get(jwk, "kty"));
    if (!kty || strcmp(kty, "RSA") != 0)
        return false;
    const jv *use = jv_get(jwk, "use");
    if (use && (!jv_str(use) || strcmp(jv_str(use), "sig") != 0))
        return false;
    const jv *alg = jv_get(jwk, "alg");
    if (alg && (!jv_str(alg) || strcmp(jv_str(alg), "RS256") != 0))
        return false;
    const jv *kidv = jv_get(jwk, "kid");
    const char *kid = NULL;
    if (kidv && !(kid = bounded_str(kidv, OIDC_KID_MAX)))
        return false;
    const char *n = jv_str(jv_get(jwk, "n"));
    const char *e = jv_str(jv_get(jwk, "e"));
    EVP_PKEY *pkey = NULL;
    if (!n || !e || jwt_rsa_public_from_jwk(n, e, &pkey) != CRCR_OK)
        return false;
    k->has_kid = kid != NULL;
    if (kid)
        memcpy(k->kid, kid, strlen(kid) + 1);
    else
        k->kid[0] = '\0';
    k->pkey = pkey;
    return true;
}

/* Parses a JWKS document ({"keys":[...]}) into a new key set with one reference, owned by the
 * caller (set_unref). Keeps the first OIDC_JWKS_KEYS_MAX usable RSA keys and skips the rest. */
static crcr_err jwks_parse(const char *json, size_t len, jwks_set **out)
{
    *out = NULL;
    if (!json)
        return CRCR_E_INVALID;
    if (len > OIDC_JWKS_MAX_BYTES)
        return CRCR_E_TOO_LARGE;
    jv *doc = jv_parse(json, len, NULL, 0);
    const jv *keys = jv_get(doc, "keys");
    if (!keys || !jv_is_arr(keys)) {
        jv_free(doc);
        return CRCR_E_INVALID;
    }
    size_t total = jv_arr_len(keys);
    size_t cap = total < OIDC_JWKS_KEYS_MAX ? total : OIDC_JWKS_KEYS_MAX;
    jwks_set *s = calloc(1, sizeof(*s) + (cap ? cap : 1) * sizeof(jwks_key));
    if (!s) {
        jv_free(doc);
        return CRCR_E_NOMEM;
    }
    atomic_init(&s->refs, 1);
    for (size_t i = 0; i < total && s->n < cap; i++) {
        const jv *jwk = jv_arr_at(keys, i);
        if (jv_is_obj(jwk) && jwk_read(jwk, &s->keys[s->n]))
            s->n++;
    }
    jv_free(doc);
    if (s->n == 0) {
        set_unref(s);
        return CRCR_E_INVALID;
    }
    *out = s;
    return CRCR_OK;
}

/* ---------------------------------------------------------------- JWKS fetch */

/* Downloads and parses <issuer>/.well-known/jwks over the verifier's pool (the caller holds the
 * issuer's `fetching` flag). On success *out is a new key set with one reference owned by the
 * caller. On failure a short description (no secrets are involved) goes to `why`. */
static crcr_err jwks_fetch(http_pool *pool, const issuer *is, jwks_set **out, char *why,
                           size_t whysz)
{
    *out = NULL;
    char url[OIDC_JWKS_URL_MAX];
    snprintf(url, sizeof(url), "%s%s", is->url, OIDC_JWKS_PATH);

    buf_t body;
    buf_init(&body, OIDC_JWKS_MAX_BYTES);
    http_call rq = {.method = "GET",
                    .url = url,
                    .allow_http = is->loopback,
                    .user_agent = OIDC_USER_AGENT,
                    .connect_timeout_ms = OIDC_JWKS_CONNECT_TIMEOUT_MS,
                    .timeout_ms = OIDC_JWKS_TIMEOUT_MS};
    http_answer a = {.body = &body};
    crcr_err err = http_exchange(pool, &rq, &a);
    if (err) {
        snprintf(why, whysz, "%s", a.error);
    } else if (a.status != 200) {
        snprintf(why, whysz, "HTTP status %ld", a.status);
        err = CRCR_E_HTTP;
    } else {
        err = jwks_parse(buf_cstr(&body), body.len, out);
        if (err)
            snprintf(why, whysz, "not a JWKS document with a usable RSA key (%s)",
                     crcr_strerror(err));
    }
    buf_free(&body);
    return err;
}

/* ---------------------------------------------------------------- cache */

/* Seconds between two fetch attempts for `is` (call with mu held): OIDC_JWKS_REFETCH_S, or
 * OIDC_JWKS_RETRY_S when the last attempt failed and the cached keys cannot judge the token at
 * hand (`have`: they hold its kid), so that an issuer back from an outage is seen soon. */
static int64_t fetch_interval(const issuer *is, bool have)
{
    return is->failing && !have ? OIDC_JWKS_RETRY_S : OIDC_JWKS_REFETCH_S;
}

/* Whether a fetch for `is` may start at `now_s` (call with mu held). */
static bool fetch_allowed(const issuer *is, int64_t now_s, bool have)
{
    return !is->attempted || apart(now_s, is->attempt_at, fetch_interval(is, have));
}

/* Installs `fresh` (its reference moves to the cache) as the key set of `is` (call with mu
 * held); the previous set loses the cache's reference. */
static void install_keys(issuer *is, jwks_set *fresh, int64_t now_s)
{
    jwks_set *old = is->keys;
    is->keys = fresh;
    is->fetched_at = now_s;
    is->keys_gen++;
    set_unref(old);
}

/* What acquire_keys() found when the keys cannot judge the token because the issuer's JWKS
 * could not be had. */
typedef struct keys_outage {
    bool unavailable;      /* the keys lack the token's kid and the last fetch failed */
    int64_t retry_after_s; /* when a fetch may be tried again, >= 1 */
    char why[HTTP_ERROR_MAX + 64];
} keys_outage;

/* Returns a referenced key set for `is` that holds `kid` if at all possible (the caller drops it
 * with set_unref), or NULL when no keys are known. Fetches the JWKS when the cache is empty, does
 * not know `kid` or is older than OIDC_JWKS_MAX_AGE_S, at most once per fetch_interval().
 * Waits for a fetch another thread runs when the current keys cannot serve the token. When the
 * keys cannot serve it and the last fetch failed, fills *out (a 503: come back later). */
static jwks_set *acquire_keys(oidc_verifier *v, issuer *is, const char *kid, int64_t now_s,
                              keys_outage *out)
{
    /* Set once this call fetched or waited for a fetch: the result is then final for this token,
     * whatever the clocks say (one fetch per call at most). */
    bool settled = false;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        bool have = set_has(is->keys, kid);
        bool stale = is->keys && apart(now_s, is->fetched_at, OIDC_JWKS_MAX_AGE_S);
        if (have && !stale)
            break;
        if (is->fetching) {
            if (have)
                break; /* a refresh is under way; the current keys do */
            pthread_cond_wait(&v->cond, &v->mu);
            settled = true;
            continue;
        }
        if (settled || !fetch_allowed(is, now_s, have))
            break;
        is->fetching = true;
        is->attempted = true;
        is->attempt_at = now_s;
        pthread_mutex_unlock(&v->mu);

        atomic_fetch_add_explicit(&v->st_fetches, 1, memory_order_relaxed);
        jwks_set *fresh = NULL;
        char why[HTTP_ERROR_MAX + 64] = "";
        crcr_err err = jwks_fetch(v->pool, is, &fresh, why, sizeof(why));
        if (err) {
            LOG_WARN("oidc.jwks_fetch_failed", "issuer", is->url, "error", why, NULL);
        } else {
            char nkeys[24];
            snprintf(nkeys, sizeof(nkeys), "%zu", fresh->n);
            LOG_INFO("oidc.jwks_fetched", "issuer", is->url, "keys", nkeys, NULL);
        }

        pthread_mutex_lock(&v->mu);
        is->fetching = false;
        is->failing = fresh == NULL;
        snprintf(is->fetch_error, sizeof(is->fetch_error), "%s", fresh ? "" : why);
        if (fresh)
            install_keys(is, fresh, now_s);
        pthread_cond_broadcast(&v->cond);
        settled = true;
        /* Loop once more to take the (possibly new) key set. */
    }
    jwks_set *s = is->keys;
    if (s)
        set_ref(s);
    if (is->failing && !set_has(s, kid)) {
        out->unavailable = true;
        int64_t next = is->attempt_at + fetch_interval(is, false);
        out->retry_after_s = next > now_s ? next - now_s : 1;
        snprintf(out->why, sizeof(out->why), "%s", is->fetch_error);
    }
    pthread_mutex_unlock(&v->mu);
    return s;
}

/* CRCR_OK when a key of `s` matching `kid` (every key when kid is NULL) verifies the token. */
static crcr_err verify_with_set(const jwks_set *s, const char *kid, const jwt_parts *p)
{
    crcr_err err = CRCR_E_INVALID;
    for (size_t i = 0; s && i < s->n && err; i++) {
        if (kid && (!s->keys[i].has_kid || strcmp(s->keys[i].kid, kid) != 0))
            continue;
        crcr_err e = jwt_verify_rs256(p, s->keys[i].pkey);
        if (e == CRCR_OK || e == CRCR_E_NOMEM || e == CRCR_E_CRYPTO)
            err = e;
    }
    return err;
}

/* ---------------------------------------------------------------- claims */

/* Reads a NumericDate: an integer, or a finite real (truncated). */
static bool claim_time(const jv *v, int64_t *out)
{
    if (jv_int(v, out))
        return true;
    if (!jv_is_number(v))
        return false;
    double d = jv_number(v);
    if (!(d > -9.0e18 && d < 9.0e18))
        return false;
    *out = (int64_t)d;
    return true;
}

static bool repo_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

/* True for "owner/repo" with GitHub's lengths and characters. */
static bool repo_name_ok(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    if (!slash)
        return false;
    size_t on = (size_t)(slash - s), rn = n - on - 1;
    if (on == 0 || on > OIDC_OWNER_MAX || rn == 0 || rn > OIDC_REPO_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (i != on && !repo_char_ok(s[i]))
            return false;
    const char *r = slash + 1;
    if ((rn == 1 && r[0] == '.') || (rn == 2 && r[0] == '.' && r[1] == '.'))
        return false;
    return true;
}

/* Copies an optional claim into dst[0..cap): absent leaves ""; a string of printable ASCII (only
 * digits when `digits`) shorter than cap is copied; a non-negative integer is written in decimal.
 * False for anything else. */
static bool copy_claim(const jv *v, char *dst, size_t cap, bool digits)
{
    dst[0] = '\0';
    if (!v)
        return true;
    int64_t num;
    if (jv_int(v, &num)) {
        if (num < 0)
            return false;
        int w = snprintf(dst, cap, "%lld", (long long)num);
        return w > 0 && (size_t)w < cap;
    }
    const char *s = bounded_str(v, cap - 1);
    if (!s)
        return false;
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (digits ? (c < '0' || c > '9') : (c < 0x20 || c > 0x7e))
            return false;
    }
    memcpy(dst, s, n + 1);
    return true;
}

/* True when "aud" is `audience` or an array holding it. */
static bool audience_ok(const jv *aud, const char *audience)
{
    const char *s = jv_str(aud);
    if (s)
        return jv_str_len(aud) == strlen(audience) && strcmp(s, audience) == 0;
    size_t n = jv_arr_len(aud);
    for (size_t i = 0; i < n; i++) {
        const jv *a = jv_arr_at(aud, i);
        const char *as = jv_str(a);
        if (as && jv_str_len(a) == strlen(audience) && strcmp(as, audience) == 0)
            return true;
    }
    return false;
}

/* The checks every kind shares: exp (required), nbf and iat within OIDC_LEEWAY_S of now_s, aud,
 * and the optional "jti". Fills id->exp and id->jti. Returns NULL or the reason of a refusal. */
static const char *check_common(const jv *claims, const char *audience, int64_t now_s,
                                oidc_identity *id)
{
    int64_t exp = 0, t = 0;
    const jv *v;
    if (!claims || !jv_is_obj(claims) || !audience)
        return R_INVALID;
    if (!(v = jv_get(claims, "exp")) || !claim_time(v, &exp))
        return R_INVALID;
    if (now_s > sat_add(exp, OIDC_LEEWAY_S))
        return R_EXPIRED;
    if ((v = jv_get(claims, "nbf")) && !claim_time(v, &t))
        return R_INVALID;
    if (v && sat_add(now_s, OIDC_LEEWAY_S) < t)
        return R_NBF;
    if ((v = jv_get(claims, "iat")) && !claim_time(v, &t))
        return R_INVALID;
    if (v && t > sat_add(now_s, OIDC_LEEWAY_S))
        return R_IAT;
    if (!audience_ok(jv_get(claims, "aud"), audience))
        return R_AUD;
    id->exp = exp;
    if (!copy_claim(jv_get(claims, "jti"), id->jti, sizeof(id->jti), false))
        return R_INVALID;
    return NULL;
}

/* A GitHub Actions token's identity: "repository" (required) and its ids. NULL or the reason. */
static const char *github_identity(const jv *claims, oidc_identity *id)
{
    const char *rs = bounded_str(jv_get(claims, "repository"), sizeof(id->repository) - 1);
    if (!rs || !repo_name_ok(rs, strlen(rs)))
        return R_REPO;
    memcpy(id->repository, rs, strlen(rs) + 1);
    if (!copy_claim(jv_get(claims, "repository_id"), id->repository_id, sizeof(id->repository_id),
                    true) ||
        !copy_claim(jv_get(claims, "repository_owner_id"), id->repository_owner_id,
                    sizeof(id->repository_owner_id), true) ||
        !copy_claim(jv_get(claims, "event_name"), id->event_name, sizeof(id->event_name), false))
        return R_INVALID;
    return NULL;
}

/* The claims of a token from an issuer of `kind`: the common checks, then the repository from the
 * "repository" claim (GitHub) or from the kind's resolver. 0 with *out filled (out->issuer left
 * ""), or the status of the refusal with *out cleared and the reason in reason[0..reasonsz). */
static int check_kind(const oidc_verifier *v, crcr_issuer_kind kind, const jv *claims,
                      const char *audience, int64_t now_s, oidc_identity *out, char *reason,
                      size_t reasonsz)
{
    oidc_identity id;
    memset(&id, 0, sizeof(id));
    id.kind = kind;
    int status = 401;
    const char *why = check_common(claims, audience, now_s, &id);
    if (!why && kind == CRCR_ISSUER_GITHUB) {
        why = github_identity(claims, &id);
    } else if (!why) {
        char rwhy[OIDC_REASON_MAX] = "";
        status = v->resolver[kind](v->resolver_ctx[kind], claims, &id, rwhy, sizeof(rwhy));
        id.kind = kind;
        size_t rn = strnlen(id.repository, sizeof(id.repository));
        if (status == 0 && (rn == sizeof(id.repository) || !repo_name_ok(id.repository, rn))) {
            status = 500; /* a resolver that names no repository is a bug: refuse */
            snprintf(rwhy, sizeof(rwhy), "%s", R_INTERNAL);
        }
        if (status != 0) {
            if (out)
                memset(out, 0, sizeof(*out));
            set_reason(reason, reasonsz, rwhy[0] ? rwhy : R_INVALID);
            return status;
        }
    }
    if (why) {
        if (out)
            memset(out, 0, sizeof(*out));
        set_reason(reason, reasonsz, why);
        return 401;
    }
    if (out)
        *out = id;
    set_reason(reason, reasonsz, "");
    return 0;
}

int oidc_check_claims(const jv *claims, const char *audience, int64_t now_s, oidc_identity *out,
                      char *reason, size_t reasonsz)
{
    return check_kind(NULL, CRCR_ISSUER_GITHUB, claims, audience, now_s, out, reason, reasonsz);
}

/* ---------------------------------------------------------------- verification */

/* "Unsupported OIDC issuer: <iss>", with iss cut to OIDC_REASON_ISS_MAX bytes and everything that
 * is not printable ASCII replaced by '?'. */
static void issuer_reason(const char *iss, size_t n, char *why, size_t whysz)
{
    char shown[OIDC_REASON_ISS_MAX + 1];
    size_t k = n < OIDC_REASON_ISS_MAX ? n : OIDC_REASON_ISS_MAX;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)iss[i];
        shown[i] = (c >= 0x20 && c <= 0x7e) ? (char)c : '?';
    }
    shown[k] = '\0';
    snprintf(why, whysz, "Unsupported OIDC issuer: %s", shown);
}

/* The configured issuer equal to `iss` (one trailing '/' ignored on both sides), or NULL. */
static issuer *find_issuer(oidc_verifier *v, const char *iss, size_t n)
{
    n = strip_slash(iss, n);
    for (size_t i = 0; i < v->n_iss; i++)
        if (v->iss[i].url_len == n && memcmp(v->iss[i].url, iss, n) == 0)
            return &v->iss[i];
    return NULL;
}

/* Locates the token inside the header value: blanks trimmed, one "Bearer " prefix removed.
 * Returns false when nothing is left. */
static bool token_span(const char *h, size_t n, const char **tok, size_t *tlen)
{
    while (n > 0 && is_blank(*h)) {
        h++;
        n--;
    }
    while (n > 0 && is_blank(h[n - 1]))
        n--;
    if (n >= 6 && strncasecmp(h, "bearer", 6) == 0 && (n == 6 || is_blank(h[6]))) {
        h += 6;
        n -= 6;
        while (n > 0 && is_blank(*h)) {
            h++;
            n--;
        }
    }
    *tok = h;
    *tlen = n;
    return n > 0;
}

bool oidc_token_present(const char *authorization)
{
    if (!authorization)
        return false;
    const char *tok;
    size_t tlen;
    return token_span(authorization, strnlen(authorization, OIDC_AUTH_HEADER_MAX + 1), &tok, &tlen);
}

/* ---------------------------------------------------------------- verified tokens */

/*
 * A token this verifier accepted before (oidc_cache.h), judged again without its signature: only
 * a GitHub issuer's (a resolver's mapping may change), only while the key set that verified it is
 * still the issuer's and younger than OIDC_JWKS_MAX_AGE_S (else the full path fetches), and only
 * when exp, nbf and iat still hold at now_s as check_common() judges them. True with *out filled;
 * false sends the token down the full path, which gives every refusal its reason.
 */
static bool cache_lookup(oidc_verifier *v, const unsigned char key[32], int64_t now_s,
                         oidc_identity *out)
{
    oidc_cached c;
    if (!oidc_cache_get(v->cache, key, now_s, &c) || c.issuer >= v->n_iss)
        return false;
    issuer *is = &v->iss[c.issuer];
    pthread_mutex_lock(&v->mu);
    bool current = is->kind == CRCR_ISSUER_GITHUB && is->keys && is->keys_gen == c.keys_gen &&
                   !apart(now_s, is->fetched_at, OIDC_JWKS_MAX_AGE_S);
    pthread_mutex_unlock(&v->mu);
    if (!current || now_s > sat_add(c.exp, OIDC_LEEWAY_S) ||
        (c.has_nbf && sat_add(now_s, OIDC_LEEWAY_S) < c.nbf) ||
        (c.has_iat && c.iat > sat_add(now_s, OIDC_LEEWAY_S)))
        return false;
    *out = c.id;
    atomic_fetch_add_explicit(&v->st_cache_hits, 1, memory_order_relaxed);
    return true;
}

/* Remembers a token `keys` (borrowed) verified for issuer `is`, when they are still its keys. */
static void cache_store(oidc_verifier *v, issuer *is, const jwks_set *keys, const jv *claims,
                        const oidc_identity *id, const unsigned char key[32])
{
    oidc_cached c;
    memset(&c, 0, sizeof(c));
    c.issuer = (size_t)(is - v->iss);
    c.exp = id->exp;
    const jv *t = jv_get(claims, "nbf");
    c.has_nbf = t && claim_time(t, &c.nbf);
    t = jv_get(claims, "iat");
    c.has_iat = t && claim_time(t, &c.iat);
    c.id = *id;
    pthread_mutex_lock(&v->mu);
    bool current = is->keys == keys;
    c.keys_gen = is->keys_gen;
    pthread_mutex_unlock(&v->mu);
    if (current)
        oidc_cache_put(v->cache, key, &c);
}

/* The body of oidc_verify(): returns 0 or an HTTP status with the reason in why[0..whysz). */
static int verify_token(oidc_verifier *v, const char *authorization, int64_t now_s,
                        oidc_identity *out, char *why, size_t whysz, int64_t *retry_after_s)
{
    if (!authorization) {
        snprintf(why, whysz, "%s", R_MISSING);
        return 401;
    }
    size_t hlen = strnlen(authorization, OIDC_AUTH_HEADER_MAX + 1);
    if (hlen > OIDC_AUTH_HEADER_MAX) {
        snprintf(why, whysz, "%s", R_INVALID);
        return 401;
    }
    const char *tok;
    size_t tlen;
    if (!token_span(authorization, hlen, &tok, &tlen)) {
        snprintf(why, whysz, "%s", R_MISSING);
        return 401;
    }
    if (tlen > CRCR_JWT_MAX) {
        snprintf(why, whysz, "%s", R_INVALID);
        return 401;
    }

    unsigned char ckey[32];
    bool cacheable = v->cache && oidc_cache_key(tok, tlen, ckey);
    if (cacheable && cache_lookup(v, ckey, now_s, out))
        return 0;

    jwt_parts parts;
    jwt_parts_init(&parts);
    int status = 401;
    const char *fixed = R_INVALID;
    jwks_set *keys = NULL;
    crcr_err err = jwt_decode(tok, tlen, &parts);
    if (err == CRCR_E_NOMEM) {
        status = 500;
        fixed = R_INTERNAL;
        goto done;
    }
    if (err)
        goto done;

    /* The algorithm is ours to choose, never the token's. */
    const char *alg = jv_str(jv_get(parts.header, "alg"));
    if (!alg || strcmp(alg, "RS256") != 0)
        goto done;
    const jv *kidv = jv_get(parts.header, "kid");
    const char *kid = NULL;
    if (kidv && !(kid = bounded_str(kidv, OIDC_KID_MAX)))
        goto done;
    const jv *issv = jv_get(parts.payload, "iss");
    const char *iss = jv_str(issv);
    if (!iss)
        goto done;
    issuer *is = find_issuer(v, iss, jv_str_len(issv));
    if (is && is->kind != CRCR_ISSUER_GITHUB && !v->resolver[is->kind])
        is = NULL; /* nothing can name the repository of its tokens */
    if (!is) {
        issuer_reason(iss, jv_str_len(issv), why, whysz);
        fixed = NULL;
        goto done;
    }

    keys_outage outage = {0};
    keys = acquire_keys(v, is, kid, now_s, &outage);
    if (outage.unavailable) {
        /* Not the caller's fault: its token cannot be judged until the keys can be had. */
        atomic_fetch_add_explicit(&is->st_unavailable, 1, memory_order_relaxed);
        snprintf(why, whysz,
                 "the relay cannot get the signing keys of OIDC issuer %s (%.80s); the token was "
                 "not judged, please retry",
                 is->url, outage.why);
        *retry_after_s = outage.retry_after_s;
        status = 503;
        fixed = NULL;
        goto done;
    }
    err = verify_with_set(keys, kid, &parts);
    if (err == CRCR_E_NOMEM) {
        status = 500;
        fixed = R_INTERNAL;
        goto done;
    }
    if (err)
        goto done;

    status = check_kind(v, is->kind, parts.payload, v->audience, now_s, out, why, whysz);
    fixed = NULL;
    if (status == 0) {
        memcpy(out->issuer, is->url, is->url_len + 1);
        if (cacheable && is->kind == CRCR_ISSUER_GITHUB)
            cache_store(v, is, keys, parts.payload, out, ckey);
    }

done:
    set_unref(keys);
    jwt_parts_free(&parts);
    if (fixed)
        snprintf(why, whysz, "%s", fixed);
    return status;
}

int oidc_verify(oidc_verifier *v, const char *authorization, int64_t now_s, oidc_identity *out,
                char *reason, size_t reasonsz)
{
    return oidc_verify_ex(v, authorization, now_s, out, reason, reasonsz, NULL);
}

int oidc_verify_ex(oidc_verifier *v, const char *authorization, int64_t now_s, oidc_identity *out,
                   char *reason, size_t reasonsz, int64_t *retry_after_s)
{
    int64_t retry = 0;
    if (retry_after_s)
        *retry_after_s = 0;
    if (out)
        memset(out, 0, sizeof(*out));
    if (!v || !out) {
        set_reason(reason, reasonsz, R_INTERNAL);
        return 500;
    }
    char why[OIDC_REASON_MAX] = "";
    int status = verify_token(v, authorization, now_s, out, why, sizeof(why), &retry);
    if (retry_after_s)
        *retry_after_s = retry;
    if (status == 0) {
        atomic_fetch_add_explicit(&v->st_verified, 1, memory_order_relaxed);
        set_reason(reason, reasonsz, "");
        return 0;
    }
    memset(out, 0, sizeof(*out));
    atomic_fetch_add_explicit(&v->st_rejected, 1, memory_order_relaxed);
    LOG_DEBUG("oidc.rejected", "reason", why, NULL);
    set_reason(reason, reasonsz, why);
    return status;
}

/* ---------------------------------------------------------------- life cycle */

/* Fills is->url and is->loopback from a configured issuer (judged by http_url_check, so that the
 * host judged is the host connected to). False (with a message) for an unusable URL. */
static bool issuer_init(issuer *is, const char *url, size_t idx, char *err, size_t errsz)
{
    size_t n = url ? strlen(url) : 0;
    n = url ? strip_slash(url, n) : 0;
    if (n == 0 || n > OIDC_ISSUER_MAX) {
        snprintf(err, errsz, "oidc: issuer %zu: empty or longer than %d bytes", idx + 1,
                 OIDC_ISSUER_MAX);
        return false;
    }
    memcpy(is->url, url, n);
    is->url[n] = '\0';
    is->url_len = n;
    if (!http_url_check(is->url, &is->loopback)) {
        snprintf(err, errsz,
                 "oidc: issuer %zu: must be an https:// URL (http:// only for loopback hosts) "
                 "without user, query or fragment",
                 idx + 1);
        return false;
    }
    return true;
}

oidc_verifier *oidc_new(const char *const *issuers, size_t n_issuers, const char *audience,
                        char *err, size_t errsz)
{
    return oidc_new_kinds(issuers, NULL, n_issuers, audience, err, errsz);
}

/* Owner: the caller frees the verifier with oidc_free(). */
oidc_verifier *oidc_new_kinds(const char *const *issuers, const crcr_issuer_kind *kinds,
                              size_t n_issuers, const char *audience, char *err, size_t errsz)
{
    char dummy[1];
    if (!err) {
        err = dummy;
        errsz = sizeof(dummy);
    }
    if (!issuers || n_issuers == 0 || n_issuers > OIDC_ISSUERS_MAX) {
        snprintf(err, errsz, "oidc: between 1 and %d issuers are needed", OIDC_ISSUERS_MAX);
        return NULL;
    }
    size_t alen = audience ? strlen(audience) : 0;
    if (alen == 0 || alen > OIDC_AUDIENCE_MAX) {
        snprintf(err, errsz, "oidc: audience empty or longer than %d bytes", OIDC_AUDIENCE_MAX);
        return NULL;
    }
    oidc_verifier *v = calloc(1, sizeof(*v));
    if (!v) {
        snprintf(err, errsz, "oidc: out of memory");
        return NULL;
    }
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cond, NULL);
    atomic_init(&v->st_fetches, 0);
    atomic_init(&v->st_verified, 0);
    atomic_init(&v->st_rejected, 0);
    atomic_init(&v->st_cache_hits, 0);
    memcpy(v->audience, audience, alen + 1);
    for (size_t i = 0; i < n_issuers; i++) {
        bool ok = issuer_init(&v->iss[i], issuers[i], i, err, errsz);
        crcr_issuer_kind kind = kinds ? kinds[i] : CRCR_ISSUER_GITHUB;
        if (ok && (kind < CRCR_ISSUER_GITHUB || kind > CRCR_ISSUER_BUILDKITE)) {
            snprintf(err, errsz, "oidc: issuer %zu: unknown kind", i + 1);
            ok = false;
        }
        if (ok && find_issuer(v, v->iss[i].url, v->iss[i].url_len)) {
            snprintf(err, errsz, "oidc: issuer %zu is listed twice", i + 1);
            ok = false;
        }
        v->iss[i].kind = kind;
        v->n_iss = i + 1; /* so that oidc_free() sees a partly set-up entry */
        if (!ok) {
            oidc_free(v);
            return NULL;
        }
    }
    v->pool = http_pool_new();
    v->cache = oidc_cache_new();
    if (!v->pool || !v->cache) {
        snprintf(err, errsz, "oidc: cannot create a curl handle or the token cache");
        oidc_free(v);
        return NULL;
    }
    return v;
}

void oidc_free(oidc_verifier *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n_iss; i++)
        set_unref(v->iss[i].keys);
    http_pool_free(v->pool);
    oidc_cache_free(v->cache);
    pthread_cond_destroy(&v->cond);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

void oidc_set_resolver(oidc_verifier *v, crcr_issuer_kind kind, oidc_resolver fn, void *ctx)
{
    if (!v || kind <= CRCR_ISSUER_GITHUB || kind > CRCR_ISSUER_BUILDKITE)
        return;
    v->resolver[kind] = fn;
    v->resolver_ctx[kind] = ctx;
}

bool oidc_issuer_stats(oidc_verifier *v, size_t i, oidc_issuer_stat *out)
{
    if (!v || i >= v->n_iss)
        return false;
    issuer *is = &v->iss[i];
    memset(out, 0, sizeof(*out));
    snprintf(out->url, sizeof(out->url), "%s", is->url);
    out->unavailable = atomic_load(&is->st_unavailable);
    pthread_mutex_lock(&v->mu);
    out->failing = is->failing;
    pthread_mutex_unlock(&v->mu);
    return true;
}

void oidc_stats(oidc_verifier *v, uint64_t *jwks_fetches, uint64_t *verified, uint64_t *rejected)
{
    if (jwks_fetches)
        *jwks_fetches = v ? atomic_load(&v->st_fetches) : 0;
    if (verified)
        *verified = v ? atomic_load(&v->st_verified) : 0;
    if (rejected)
        *rejected = v ? atomic_load(&v->st_rejected) : 0;
}

uint64_t oidc_cache_hits(oidc_verifier *v)
{
    return v ? atomic_load(&v->st_cache_hits) : 0;
}

crcr_err oidc_set_jwks(oidc_verifier *v, const char *issuer_url, const char *json, size_t len,
                       int64_t now_s)
{
    if (!v || !issuer_url)
        return CRCR_E_INVALID;
    issuer *is = find_issuer(v, issuer_url, strlen(issuer_url));
    if (!is)
        return CRCR_E_NOT_FOUND;
    jwks_set *fresh = NULL;
    crcr_err err = jwks_parse(json, len, &fresh);
    if (err)
        return err;
    pthread_mutex_lock(&v->mu);
    install_keys(is, fresh, now_s);
    is->attempted = true;
    is->attempt_at = now_s;
    is->failing = false;
    pthread_mutex_unlock(&v->mu);
    return CRCR_OK;
}
