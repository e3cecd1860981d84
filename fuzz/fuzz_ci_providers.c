/*
 * fuzz_ci_providers.c - libFuzzer target for the CI providers map (ci_providers_parse, through
 * the allowlist's YAML reader yaml_doc_to_jv) and the Buildkite check: the input is
 * ci_providers.yml.
 *
 * Invariants checked (abort on violation), restated from ci_providers.h and yaml_doc.h:
 *   - the YAML reader: CRCR_OK with a JSON value, or an error with no value and a non-empty error
 *     text whose every line ends in '\n';
 *   - the map: CRCR_OK with a map, or CRCR_E_INVALID / CRCR_E_TOO_LARGE / CRCR_E_NOMEM with none
 *     and a non-empty error text; a map from a document the reader refused is impossible;
 *   - a map: at most CRCR_CI_PROVIDERS_MAX_PIPELINES keys, strictly increasing in byte order,
 *     each "<org>/<pipeline>" with two non-empty printable parts of at most CI_PROVIDERS_ID_MAX
 *     bytes; each maps to an owner/repo that ids_full_name_valid() accepts;
 *   - the check, for the claims {organization_id, pipeline_id} of every key: never 401, 0 with
 *     the mapped repository and pipeline, or 403 with a reason (a rule on an absent claim); for
 *     a pipeline not in the map: 403 "... is not registered with CRCR";
 *   - the same input parses the same way twice; ref/free balance.
 * Seeds: fuzz/corpus/ci_providers/.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "allowlist.h"
#include "buf.h"
#include "ci_providers.h"
#include "fuzz_check.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "oidc.h"
#include "yaml_doc.h"

#define FZ_ERRORS_MAX (256u * 1024u)

/* Every line of a non-empty error text ends in '\n'. */
static void check_errors(const buf_t *e)
{
    CHECK(e->len > 0);
    CHECK(e->data[e->len - 1] == '\n');
    CHECK(memchr(e->data, '\0', e->len) == NULL);
}

/* The check on claims naming `key` (split at its '/'). */
static void check_key(const ci_providers *m, const char *key)
{
    const char *slash = strchr(key, '/');
    CHECK(slash && slash != key && slash[1] && !strchr(slash + 1, '/'));
    size_t on = (size_t)(slash - key), pn = strlen(slash + 1);
    CHECK(on <= CI_PROVIDERS_ID_MAX && pn <= CI_PROVIDERS_ID_MAX);
    for (const char *p = key; *p; p++)
        CHECK((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
    char org[CI_PROVIDERS_ID_MAX + 1], pipe[CI_PROVIDERS_ID_MAX + 1];
    memcpy(org, key, on);
    org[on] = '\0';
    memcpy(pipe, slash + 1, pn + 1);
    const char *repo = ci_providers_buildkite_repo(m, org, pipe);
    CHECK(repo && ids_full_name_valid(repo));

    jv *claims = jv_new_obj();
    CHECK(claims);
    CHECK(jv_set(claims, "organization_id", jv_new_str(org)) == CRCR_OK);
    CHECK(jv_set(claims, "pipeline_id", jv_new_str(pipe)) == CRCR_OK);
    oidc_identity id;
    memset(&id, 0, sizeof(id));
    char reason[512] = "";
    int st = ci_providers_check_buildkite(m, claims, &id, reason, sizeof(reason));
    if (st == 0) {
        CHECK(strcmp(id.repository, repo) == 0);
        CHECK(strcmp(id.pipeline, key) == 0);
    } else {
        CHECK(st == 403 && reason[0] && strstr(reason, "Buildkite claim '"));
    }
    /* Another pipeline of the same organisation is not registered, unless it is. */
    CHECK(jv_set(claims, "pipeline_id", jv_new_str("fuzz-unlisted-pipeline")) == CRCR_OK);
    if (!ci_providers_buildkite_repo(m, org, "fuzz-unlisted-pipeline")) {
        st = ci_providers_check_buildkite(m, claims, &id, reason, sizeof(reason));
        CHECK(st == 403 && strstr(reason, "is not registered with CRCR"));
    }
    jv_free(claims);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    buf_t errors;
    buf_init(&errors, FZ_ERRORS_MAX);

    jv *doc = NULL;
    crcr_err yrc = yaml_doc_to_jv(text, size, CRCR_CI_PROVIDERS_MAX_BYTES, &doc, &errors);
    if (yrc == CRCR_OK) {
        CHECK(doc != NULL && errors.len == 0);
    } else {
        CHECK(doc == NULL);
        check_errors(&errors);
    }
    jv_free(doc);
    buf_reset(&errors);

    ci_providers *m = NULL;
    crcr_err rc = ci_providers_parse(text, size, &m, &errors);
    if (rc != CRCR_OK) {
        CHECK(rc == CRCR_E_INVALID || rc == CRCR_E_TOO_LARGE || rc == CRCR_E_NOMEM);
        CHECK(m == NULL);
        check_errors(&errors);
        buf_free(&errors);
        return 0;
    }
    CHECK(yrc == CRCR_OK && m != NULL);
    size_t n = ci_providers_count(m);
    CHECK(n <= CRCR_CI_PROVIDERS_MAX_PIPELINES);
    CHECK(ci_providers_key_at(m, n) == NULL);
    for (size_t i = 0; i < n; i++) {
        const char *key = ci_providers_key_at(m, i);
        CHECK(key);
        if (i > 0)
            CHECK(strcmp(ci_providers_key_at(m, i - 1), key) < 0);
        check_key(m, key);
    }

    ci_providers *again = NULL;
    buf_reset(&errors);
    CHECK(ci_providers_parse(text, size, &again, &errors) == CRCR_OK);
    CHECK(ci_providers_count(again) == n && ci_providers_skipped(again) == ci_providers_skipped(m));
    for (size_t i = 0; i < n; i++)
        CHECK(strcmp(ci_providers_key_at(again, i), ci_providers_key_at(m, i)) == 0);
    ci_providers_free(again);

    CHECK(ci_providers_ref(m) == m);
    ci_providers_free(m);
    ci_providers_free(m);
    buf_free(&errors);
    return 0;
}
