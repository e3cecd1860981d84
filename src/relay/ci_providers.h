/*
 * ci_providers.h - which repository a Buildkite OIDC token speaks for: the CI providers map.
 *
 * Buildkite's tokens carry no "repository" claim. The repository comes from upstream's
 * ci_providers.yml, keyed by the immutable organization and pipeline UUIDs of the token:
 *
 *   providers:
 *     buildkite:
 *       repo_map:
 *         "<organization_id>/<pipeline_id>": owner/repo
 *         "<organization_id>/<pipeline_id>":
 *           repo: owner/repo
 *           required_claims:            # every claim listed must have one of these values
 *             build_branch: [main]      # a single value may be written as a scalar
 *
 * The legacy flat form (a top-level `buildkite:` mapping of the same entries) is read when
 * `providers.buildkite.repo_map` is absent. As upstream: keys without '/' are skipped (so an old
 * file's `issuer:` or `jwks_uri:` is), other keys of `providers.buildkite` are ignored, and a file
 * without a Buildkite section (or `{}`, or an empty file) is an empty map. Stricter than upstream,
 * so that a typo cannot silently drop a restriction: an entry mapping with a key other than
 * `repo` and `required_claims`, a repository that is not GitHub's owner/repo syntax, a key with
 * an empty, over-long or non-printable part, and a required value that is not a string are
 * errors. The YAML is read by the allowlist's reader (yaml_doc_to_jv: no anchors or aliases,
 * depth and node limits), the file is at most CRCR_CI_PROVIDERS_MAX_BYTES, and there are at most
 * CRCR_CI_PROVIDERS_MAX_PIPELINES entries, CI_PROVIDERS_MAX_CLAIMS rules per entry and
 * CI_PROVIDERS_MAX_VALUES values per rule. A parse builds a complete immutable map or nothing.
 *
 * The map is kept fresh like the allowlist (allowlist_source.h): CI_PROVIDERS_FILE or
 * CI_PROVIDERS_URL, ALLOWLIST_TTL_SECONDS, ETag, SIGHUP, the last good map kept, a shared copy
 * between instances.
 */
#ifndef CRCR_CI_PROVIDERS_H
#define CRCR_CI_PROVIDERS_H

#include <stdbool.h>
#include <stddef.h>

#include "allowlist_source.h"
#include "buf.h"
#include "config.h"
#include "err.h"
#include "github.h"
#include "json.h"
#include "oidc.h"

/* Required-claim rules per pipeline, allowed values per rule. */
#define CI_PROVIDERS_MAX_CLAIMS 16u
#define CI_PROVIDERS_MAX_VALUES 64u
/* Longest organization or pipeline id (Buildkite's are 36-character UUIDs), claim name and
 * allowed value, in bytes. */
#define CI_PROVIDERS_ID_MAX 64u
#define CI_PROVIDERS_CLAIM_NAME_MAX 64u
#define CI_PROVIDERS_VALUE_MAX 256u

typedef struct ci_providers ci_providers;

/*
 * Parses `len` bytes of ci_providers.yml. On success *out is a new map owned by the caller
 * (ci_providers_free). On failure returns CRCR_E_INVALID, CRCR_E_TOO_LARGE or CRCR_E_NOMEM,
 * *out is NULL, and `errors` (if not NULL) receives one line per problem: "LINE:COL: message"
 * for YAML problems, " <where>: message" (a leading space, then the path of the entry) for the
 * others.
 */
crcr_err ci_providers_parse(const char *yaml, size_t len, ci_providers **out, buf_t *errors);

/* Another reference (atomic: a map is shared between threads); returns `m`. */
ci_providers *ci_providers_ref(ci_providers *m);
/* Drops a reference and frees at zero; NULL is fine. */
void ci_providers_free(ci_providers *m);

/* Pipelines mapped, and keys skipped because they have no '/'. */
size_t ci_providers_count(const ci_providers *m);
size_t ci_providers_skipped(const ci_providers *m);

/* The key "<organization_id>/<pipeline_id>" of the i-th pipeline (i < count; byte order), borrowed
 * from `m`; NULL beyond the end. */
const char *ci_providers_key_at(const ci_providers *m, size_t i);

/* The repository mapped to a pipeline (borrowed from `m`), or NULL. */
const char *ci_providers_buildkite_repo(const ci_providers *m, const char *organization_id,
                                        const char *pipeline_id);

/*
 * Maps the verified claims of a Buildkite token through `m` (NULL: an empty map). Refuses with
 * 401 a token without a string "organization_id" or "pipeline_id" ("Buildkite OIDC token missing
 * 'organization_id' claim"); with 403 an unmapped pipeline ("Buildkite pipeline X/Y is not
 * registered with CRCR") or a claim outside its pipeline's allowed values ("Buildkite claim
 * 'build_branch' value 'x' not in allowed set for this pipeline", "Buildkite claim 'x' missing:
 * required for this pipeline"), the reason in reason[0..reasonsz). Otherwise returns 0 and fills
 * id->repository and id->pipeline. Claims compare as upstream's str(value): strings as they are,
 * integers in decimal, booleans as true/false.
 */
int ci_providers_check_buildkite(const ci_providers *m, const jv *claims, oidc_identity *id,
                                 char *reason, size_t reasonsz);

/*
 * The Buildkite resolver (an oidc_resolver): ci_providers_check_buildkite() on the map in force
 * of `ctx`, the CI providers source, or on an empty map when `ctx` is NULL (none configured);
 * 503 "the CI providers map is not loaded yet; please retry" while a configured map has never
 * loaded.
 */
int ci_providers_resolve_buildkite(void *ctx, const jv *claims, oidc_identity *id, char *reason,
                                   size_t reasonsz);

/*
 * The source of the map: CI_PROVIDERS_FILE (wins) or CI_PROVIDERS_URL, as doc_source_new()
 * says. NULL with a message in err for a bad setting; NULL with err "" when neither is set.
 * The caller frees it with allowlist_source_free().
 */
doc_source *ci_providers_source_new(const crcr_config *cfg, gh_client *gh, char *err, size_t errsz);

/* The map in force with a reference (ci_providers_free), or NULL when none was loaded. `src`
 * must come from ci_providers_source_new(). */
ci_providers *ci_providers_source_get(doc_source *src);

#endif
