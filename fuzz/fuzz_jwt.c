/*
 * fuzz_jwt.c - libFuzzer target for the callback authentication path: the input is used as
 *   1. an Authorization header value for oidc_verify() on a verifier whose JWKS cache was
 *      preloaded with a fixed public key (oidc_set_jwks), so no fetch is ever due: no network;
 *   2. a compact JWS for jwt_decode(), whose header and payload then go through
 *      oidc_check_claims();
 *   3. a JSON claims object for oidc_check_claims() directly (no base64 layer in the way);
 *   4. a JWKS document for oidc_set_jwks() on a second verifier.
 *
 * Invariants checked (abort on violation):
 *   - oidc_verify() never accepts (nobody holds the private key) and answers 401 (or 500 under a
 *     memory limit) with a non-empty, printable, NUL-terminated reason that does not contain the
 *     token, an all-zero identity, and no JWKS fetch;
 *   - oidc_check_claims() answers 0 or 401; on 0 the repository is "owner/repo" and every
 *     identity string is NUL-terminated inside its field; on 401 the identity is all zero and the
 *     reason non-empty;
 *   - oidc_set_jwks() answers CRCR_OK, CRCR_E_INVALID, CRCR_E_TOO_LARGE or CRCR_E_NOMEM.
 * Suggested seeds: a real GitHub OIDC token's shape, a claims object, a JWKS document.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "json.h"
#include "jwt.h"
#include "log.h"
#include "oidc.h"
#include "fuzz_check.h"

/* Issuers on the discard port of the loopback: even a fetch by mistake would go nowhere. */
#define FZ_ISSUER "http://127.0.0.1:9"
#define FZ_ISSUER2 "http://127.0.0.1:9/jwks-target"
#define FZ_AUDIENCE "pytorch-cross-repo-ci-relay"
#define FZ_NOW ((int64_t)1700000000)
/* Inputs longer than this are cut (the verifier refuses anything beyond CRCR_JWT_MAX anyway). */
#define FZ_INPUT_MAX (CRCR_JWT_MAX + 1024u)

/* A 2048-bit RSA public key (its private half was discarded), published as kid "fz". */
static const char fz_jwks[] =
    "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"fz\",\"alg\":\"RS256\",\"use\":\"sig\",\"e\":\"AQAB\","
    "\"n\":\"rEkPIw3V9GyJEpD8HMkXDgmaV4EAkR7SDZNxGxTr2-vWX3eOtPxuMZuPM9GUXmNFXt0C84ITCg2cbVW2ChEBZu"
    "MSucNThHwHHdTVxV3W7Z4gpWgcaOFzYMe-63JESb6cVg2Xa3VYef38F1c7xRsC8MUDTTqpFt9egkLc3eFTyVUgdSLUt8m"
    "EKHn0T3nJw9EZgtTGG-wqGtiraVRiXFhKbsIrD2f8WY6p8XNa-OVyR1NSFOOJ1VlkAVmzzrJfEKKABugAkcrVJUr6Dry"
    "s5JA4vvR978-lLP6N7CulTkBonsqRVruMHjDkrtuLH-qU1bRXeXjXmCOJRBqPGAm_bsGl0Q\"}]}";

static oidc_verifier *g_verify; /* preloaded, for oidc_verify() */
static oidc_verifier *g_jwks;   /* target of oidc_set_jwks() */

static void init_once(void)
{
    if (g_verify)
        return;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    log_set_level(CRCR_LOG_OFF);
    const char *iss[] = {FZ_ISSUER};
    const char *iss2[] = {FZ_ISSUER2};
    char err[256];
    g_verify = oidc_new(iss, 1, FZ_AUDIENCE, err, sizeof(err));
    g_jwks = oidc_new(iss2, 1, FZ_AUDIENCE, err, sizeof(err));
    CHECK(g_verify && g_jwks);
    CHECK(oidc_set_jwks(g_verify, FZ_ISSUER, fz_jwks, strlen(fz_jwks), FZ_NOW) == CRCR_OK);
}

/* True when `s` is NUL-terminated within `cap` bytes. */
static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static int all_zero(const oidc_identity *id)
{
    const unsigned char *p = (const unsigned char *)id;
    for (size_t i = 0; i < sizeof(*id); i++)
        if (p[i])
            return 0;
    return 1;
}

static void check_reason(const char *reason, size_t cap)
{
    CHECK(terminated(reason, cap));
    CHECK(reason[0] != '\0');
    for (const char *c = reason; *c; c++)
        CHECK(*c >= 0x20 && *c <= 0x7e);
}

/* Runs oidc_check_claims() on `claims` and checks its contract. */
static void claims_case(const jv *claims)
{
    oidc_identity id;
    char reason[160];
    memset(&id, 0xa5, sizeof(id));
    int rc = oidc_check_claims(claims, FZ_AUDIENCE, FZ_NOW, &id, reason, sizeof(reason));
    if (rc == 0) {
        CHECK(terminated(id.repository, sizeof(id.repository)));
        CHECK(terminated(id.repository_id, sizeof(id.repository_id)));
        CHECK(terminated(id.repository_owner_id, sizeof(id.repository_owner_id)));
        CHECK(terminated(id.jti, sizeof(id.jti)));
        CHECK(terminated(id.event_name, sizeof(id.event_name)));
        CHECK(id.issuer[0] == '\0');
        const char *slash = strchr(id.repository, '/');
        CHECK(slash && slash != id.repository && slash[1] != '\0' && !strchr(slash + 1, '/'));
        CHECK(id.exp >= FZ_NOW - OIDC_LEEWAY_S);
    } else {
        CHECK(rc == 401);
        CHECK(all_zero(&id));
        check_reason(reason, sizeof(reason));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_once();
    if (size > FZ_INPUT_MAX)
        size = FZ_INPUT_MAX;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    /* 1. The whole header path. */
    oidc_identity id;
    char reason[160];
    int rc = oidc_verify(g_verify, text, FZ_NOW, &id, reason, sizeof(reason));
    CHECK(rc == 401 || rc == 500);
    CHECK(all_zero(&id));
    check_reason(reason, sizeof(reason));
    size_t tlen = strlen(text);
    if (tlen >= 32)
        CHECK(strstr(reason, text) == NULL);
    uint64_t fetches = 1, verified = 1;
    oidc_stats(g_verify, &fetches, &verified, NULL);
    CHECK(fetches == 0 && verified == 0);

    /* 2. Decoded token: both JSON parts through the claim checks. */
    jwt_parts parts;
    jwt_parts_init(&parts);
    if (jwt_decode(text, size, &parts) == CRCR_OK) {
        CHECK(jv_is_obj(parts.header) && jv_is_obj(parts.payload));
        claims_case(parts.payload);
        claims_case(parts.header);
    }
    jwt_parts_free(&parts);

    /* 3. The input as a claims object. */
    jv *doc = jv_parse(text, size, NULL, 0);
    if (doc)
        claims_case(doc);
    jv_free(doc);

    /* 4. The input as a JWKS document. */
    crcr_err err = oidc_set_jwks(g_jwks, FZ_ISSUER2, text, size, FZ_NOW);
    CHECK(err == CRCR_OK || err == CRCR_E_INVALID || err == CRCR_E_TOO_LARGE ||
          err == CRCR_E_NOMEM);

    free(text);
    return 0;
}
