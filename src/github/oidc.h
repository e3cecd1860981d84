/*
 * oidc.h - verification of the OIDC tokens that authenticate callbacks: GitHub Actions' and
 * Buildkite's.
 *
 * A downstream workflow mints a token with core.getIDToken(<audience>) (Buildkite: buildkite-agent
 * oidc request-token --audience <audience>) and sends it as "Authorization: Bearer <token>".
 * oidc_verify() accepts it only when all of this holds:
 *   - it is a compact JWS of at most CRCR_JWT_MAX bytes whose header "alg" is exactly "RS256"
 *     (never "none", HS256, ES256, PS256...);
 *   - its "iss" is one of the configured issuers (compared exactly, ignoring one trailing '/');
 *   - its signature verifies with a key from that issuer's JWKS (<issuer>/.well-known/jwks),
 *     picked by the header's "kid" (every cached key is tried when there is no "kid");
 *   - "exp" (required), "nbf" and "iat" (optional) are within OIDC_LEEWAY_S of `now_s`;
 *   - "aud" is the configured audience, or an array that contains it;
 *   - the issuer's kind names the repository: a GitHub issuer's token carries "repository", a
 *     string "owner/repo"; a token of any other kind (Buildkite) goes to the resolver set for
 *     that kind (oidc_set_resolver), which maps its claims to a repository or refuses it.
 *
 * JWKS cache: one key set per issuer, kept in memory. It is fetched when it is empty, when a
 * token names a "kid" it does not hold (key rotation) and when it is older than
 * OIDC_JWKS_MAX_AGE_S, but at most once per OIDC_JWKS_REFETCH_S per issuer whatever happens, so
 * tokens with invented "kid"s cannot make the relay hammer the issuer. One thread fetches while
 * the others that need the result wait for it; verification never holds a lock while a fetch or
 * a signature check runs. A failed refresh keeps the previous key set.
 *
 * An issuer whose keys cannot be had (network error, 5xx, a document that is no JWKS) is not the
 * caller's fault: when the cached keys cannot judge a token (none, or not its kid) and the last
 * fetch failed, oidc_verify_ex() answers 503 with the issuer's URL in the reason and when to
 * retry, and the next fetch may come after OIDC_JWKS_RETRY_S. A token that the keys the relay
 * has do judge stays a 401 when it fails.
 *
 * Verified tokens: a GitHub issuer's token accepted once is remembered by the SHA-256 of its
 * bytes (oidc_cache.h, OIDC_CACHE_SLOTS entries) with the identity it gave, so that a job's
 * in_progress and completed reports with one token cost one signature check. A remembered token
 * is accepted again only while the key set that verified it is still the issuer's (any JWKS fetch
 * or install ends the issuer's entries: a key removed by a rotation takes its tokens with it) and
 * fresh, and only when exp, nbf and iat hold at `now_s` as above; otherwise it takes the full path.
 *
 * Nothing in here logs or returns the token: reasons are fixed phrases (plus the token's "iss",
 * which is public, shortened and reduced to printable ASCII), and rejections are logged at debug
 * level with the reason only.
 *
 * Thread safety: every function except oidc_free() may be called from several threads at once on
 * the same verifier. libcurl must have been initialised (curl_global_init) before oidc_new().
 */
#ifndef CRCR_OIDC_H
#define CRCR_OIDC_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "json.h"

/* Clock skew tolerated on exp, nbf and iat, in seconds. */
#define OIDC_LEEWAY_S 60
/* Shortest interval between two JWKS fetches for one issuer, in seconds. */
#define OIDC_JWKS_REFETCH_S 60
/* The same while the last fetch failed and the cached keys cannot judge a token (an outage of
 * the issuer's JWKS host: callbacks are answered 503 with this Retry-After at most). */
#define OIDC_JWKS_RETRY_S 5
/* Size of a reason written by oidc_verify() (with its NUL). */
#define OIDC_REASON_MAX 512u
/* Age after which a cached key set is refreshed even when every kid is known, in seconds (so a
 * key the issuer withdrew stops being trusted). */
#define OIDC_JWKS_MAX_AGE_S 3600
/* Most issuers one verifier accepts. */
#define OIDC_ISSUERS_MAX 8
/* Longest issuer URL and audience, in bytes (without the NUL). */
#define OIDC_ISSUER_MAX 255
#define OIDC_AUDIENCE_MAX 255
/* Longest "kid" looked at, in bytes; a longer one in a token or JWK is refused. */
#define OIDC_KID_MAX 255
/* Most RSA keys kept from one JWKS document (others are ignored). */
#define OIDC_JWKS_KEYS_MAX 64
/* Longest pipeline identity a resolver records ("<organization_id>/<pipeline_id>"), in bytes. */
#define OIDC_PIPELINE_MAX 159
/* Largest JWKS document accepted, in bytes. */
#define OIDC_JWKS_MAX_BYTES (256u * 1024u)
/* JWKS fetch timeouts, in milliseconds. */
#define OIDC_JWKS_CONNECT_TIMEOUT_MS 5000L
#define OIDC_JWKS_TIMEOUT_MS 10000L

typedef struct oidc_verifier oidc_verifier;

/* What a verified token says about its caller. Every string is NUL-terminated; a claim that is
 * absent leaves its field "". */
typedef struct oidc_identity {
    char repository[141];         /* "owner/repo", from the "repository" claim */
    char repository_id[32];       /* decimal, from "repository_id" */
    char repository_owner_id[32]; /* decimal, from "repository_owner_id" */
    char issuer[256];             /* the configured issuer that matched (no trailing '/') */
    char jti[128];                /* "jti" */
    char event_name[64];          /* "event_name" (push, pull_request, workflow_dispatch...) */
    int64_t exp;                  /* "exp", seconds since the epoch */
    crcr_issuer_kind kind;        /* the kind of the issuer that matched */
    char pipeline[OIDC_PIPELINE_MAX + 1]; /* Buildkite: "<organization_id>/<pipeline_id>" of the
                                             mapping that named `repository`; "" for GitHub */
} oidc_identity;

/*
 * Maps the claims of a verified token from an issuer of a kind other than GitHub (`claims`, the
 * payload object, borrowed; exp/nbf/iat and aud already checked) to the repository it speaks for:
 * writes id->repository ("owner/repo") and id->pipeline, and returns 0; or returns the HTTP
 * status of the refusal (401 for a token without the claims the kind needs, 403 for one the
 * mapping does not allow, 503 when the mapping cannot be consulted) with a reason in
 * reason[0..reasonsz) that never contains the token. Called from several threads at once.
 */
typedef int (*oidc_resolver)(void *ctx, const jv *claims, oidc_identity *id, char *reason,
                             size_t reasonsz);

/**
 * Creates a verifier that trusts `issuers[0..n_issuers)` (1..OIDC_ISSUERS_MAX URLs, each https://,
 * or http:// to a loopback host; a trailing '/' is ignored) and requires the audience `audience`.
 * Both are copied; nothing is fetched yet.
 *
 * Returns the verifier, which the caller frees with oidc_free(), or NULL with a short message in
 * `err` (which may be NULL) for a bad argument or an allocation failure.
 */
oidc_verifier *oidc_new(const char *const *issuers, size_t n_issuers, const char *audience,
                        char *err, size_t errsz);

/**
 * oidc_new() with a kind per issuer (`kinds[0..n_issuers)`; NULL: all CRCR_ISSUER_GITHUB). The
 * same URL may not be given twice. Tokens of an issuer whose kind has no resolver (below) are
 * refused as from an unsupported issuer.
 */
oidc_verifier *oidc_new_kinds(const char *const *issuers, const crcr_issuer_kind *kinds,
                              size_t n_issuers, const char *audience, char *err, size_t errsz);

/**
 * Sets the resolver of the issuers of `kind` (not CRCR_ISSUER_GITHUB, whose tokens name their
 * repository) with its context, which must outlive the verifier. Call before the first
 * oidc_verify(); not thread-safe against it.
 */
void oidc_set_resolver(oidc_verifier *v, crcr_issuer_kind kind, oidc_resolver fn, void *ctx);

/**
 * Frees the verifier, its cached keys and its curl handles. Accepts NULL. No other thread may be
 * using the verifier.
 */
void oidc_free(oidc_verifier *v);

/* Whether an Authorization header value carries a token at all (after blanks and one "Bearer "
 * prefix); oidc_verify() answers "Missing authorization token" exactly when it does not. A header
 * check, no parsing: callers use it to refuse a request before reading its body. */
bool oidc_token_present(const char *authorization);

/**
 * Verifies an Authorization header value ("Bearer <token>", the prefix matched case-insensitively
 * and optional; surrounding spaces ignored) at time `now_s` (seconds since the epoch). May fetch
 * the issuer's JWKS, blocking for up to OIDC_JWKS_TIMEOUT_MS.
 *
 * Returns 0 and fills *out when the token is valid. Otherwise returns the HTTP status to answer
 * (401; 503 when the issuer's keys cannot be had, see oidc_verify_ex(); a resolver's 401, 403 or
 * 503; 500 only for a NULL verifier/out or an allocation failure),
 * clears *out, and writes to `reason` (if not NULL) one of:
 *   "Missing authorization token", "Invalid authorization token", "Unsupported OIDC issuer: <iss>",
 *   "Token expired", "Token not yet valid", "Token issued in the future", "Invalid audience",
 *   "GitHub OIDC token missing 'repository' claim", "Internal error", or the resolver's reason.
 * The reason never contains the token.
 */
int oidc_verify(oidc_verifier *v, const char *authorization, int64_t now_s, oidc_identity *out,
                char *reason, size_t reasonsz);

/**
 * oidc_verify() that also answers 503 when the issuer's keys cannot be had (see above): the
 * reason then names the issuer and why ("the relay cannot get the signing keys of OIDC issuer
 * <url> (<why>); ..."), and *retry_after_s (may be NULL; 0 otherwise) says in how many seconds
 * a fetch may be tried again (1..OIDC_JWKS_RETRY_S). oidc_verify() answers such a token 503 too.
 */
int oidc_verify_ex(oidc_verifier *v, const char *authorization, int64_t now_s, oidc_identity *out,
                   char *reason, size_t reasonsz, int64_t *retry_after_s);

/* One configured issuer's state, for /metrics. */
typedef struct oidc_issuer_stat {
    char url[OIDC_ISSUER_MAX + 1];
    bool failing;         /* the last JWKS fetch failed */
    uint64_t unavailable; /* tokens answered 503 because its keys could not be had */
} oidc_issuer_stat;

/* Fills *out for issuer number `i` (in configuration order); false past the last one. */
bool oidc_issuer_stats(oidc_verifier *v, size_t i, oidc_issuer_stat *out);

/**
 * Reads the counters: JWKS documents fetched over HTTP (successful or not), tokens accepted and
 * tokens rejected. Any pointer may be NULL.
 */
void oidc_stats(oidc_verifier *v, uint64_t *jwks_fetches, uint64_t *verified, uint64_t *rejected);
/* Tokens accepted from the cache of verified tokens (counted in `verified` too). */
uint64_t oidc_cache_hits(oidc_verifier *v);

/**
 * Checks the claims of an already signature-verified token (`claims` is the payload object,
 * borrowed) against `audience` at `now_s`: exp/nbf/iat with OIDC_LEEWAY_S, aud, and the
 * repository claims, which are copied into *out (out->issuer is left ""). Issuer and signature
 * are NOT checked here. Exposed for oidc_verify() and the fuzz target.
 *
 * Returns 0, or 401 with *out cleared and one of the reasons listed at oidc_verify() in `reason`.
 */
int oidc_check_claims(const jv *claims, const char *audience, int64_t now_s, oidc_identity *out,
                      char *reason, size_t reasonsz);

/**
 * Installs a JWKS document (`json[0..len)`, the body of <issuer>/.well-known/jwks) as the key
 * set of `issuer` (one of the configured issuers), as if it had been fetched at `now_s`: a fetch
 * for that issuer is then not attempted before now_s + OIDC_JWKS_REFETCH_S. The text is only
 * read. Used by the fuzz target and tests; a deployment could also pin keys with it.
 *
 * Returns CRCR_OK; CRCR_E_NOT_FOUND for an issuer that is not configured; CRCR_E_INVALID when the
 * document is not a JWKS with at least one usable RSA key (the cache is then unchanged);
 * CRCR_E_TOO_LARGE beyond OIDC_JWKS_MAX_BYTES; CRCR_E_NOMEM.
 */
crcr_err oidc_set_jwks(oidc_verifier *v, const char *issuer, const char *json, size_t len,
                       int64_t now_s);

#endif
