/*
 * ci_providers.c - the CI providers map (ci_providers.yml) and the Buildkite resolver; see
 * ci_providers.h.
 *
 * The YAML goes through the allowlist's bounded reader (yaml_doc_to_jv) into a JSON value,
 * which is then validated entry by entry into a sorted array of pipelines: a lookup is a binary
 * search on "<organization_id>/<pipeline_id>". A map is immutable once built and reference-
 * counted, so the source swaps it atomically and a callback keeps the map it looked at.
 */
#include "ci_providers.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ids.h"
#include "crcr_limits.h"
#include "yaml_doc.h"

/* Problems reported per parse; more would only bury the first ones. */
#define CI_PROVIDERS_MAX_ERRORS 20u
/* How much of a claim value or key is repeated in a reason or an error. */
#define CI_PROVIDERS_SHOW_MAX 100u
/* "<organization_id>/<pipeline_id>" */
#define CI_PROVIDERS_KEY_MAX (2u * CI_PROVIDERS_ID_MAX + 1u)

/* One required claim: its name and the values it may have. */
typedef struct ci_rule {
    char *name;    /* owned */
    char **values; /* owned, n_values strings */
    size_t n_values;
} ci_rule;

typedef struct ci_pipeline {
    char *key;  /* owned: "<organization_id>/<pipeline_id>" */
    char *repo; /* owned: "owner/repo" */
    ci_rule *rules;
    size_t n_rules;
} ci_pipeline;

struct ci_providers {
    atomic_size_t refs;
    ci_pipeline *pipelines; /* sorted by key (strcmp) */
    size_t n;
    size_t skipped;
};

/* One parse: the map being built and the problems found. */
typedef struct pstate {
    ci_providers *m;
    size_t cap;
    buf_t *errors;
    size_t nerrs;
    bool too_large;
    bool nomem;
} pstate;

/* ---------------------------------------------------------------------------------------- */
/* Building. */

static void free_rules(ci_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < rules[i].n_values; k++)
            free(rules[i].values[k]);
        free(rules[i].values);
        free(rules[i].name);
    }
    free(rules);
}

static void destroy(ci_providers *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->pipelines[i].key);
        free(m->pipelines[i].repo);
        free_rules(m->pipelines[i].rules, m->pipelines[i].n_rules);
    }
    free(m->pipelines);
    free(m);
}

/* Writes `s` into out[0..outsz) for a message: at most CI_PROVIDERS_SHOW_MAX bytes, anything
 * outside printable ASCII (and the quote) as '?'. */
static void shown(const char *s, char *out, size_t outsz)
{
    size_t n = 0;
    for (; s && s[n] && n < CI_PROVIDERS_SHOW_MAX && n + 1 < outsz; n++) {
        unsigned char c = (unsigned char)s[n];
        out[n] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    out[n] = '\0';
}

/* Records " <where>: message" (`limit`: a size limit was passed). */
__attribute__((format(printf, 4, 5))) static void perr(pstate *p, bool limit, const char *where,
                                                       const char *fmt, ...)
{
    if (limit)
        p->too_large = true;
    if (p->nerrs++ >= CI_PROVIDERS_MAX_ERRORS || !p->errors)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    (void)buf_printf(p->errors, " %s: %s\n", where, msg);
}

/* A copy of a string value, or NULL (p->nomem set) when out of memory. */
static char *dup_str(pstate *p, const char *s)
{
    char *c = strdup(s);
    if (!c)
        p->nomem = true;
    return c;
}

/* True for one id of a key: 1..CI_PROVIDERS_ID_MAX printable ASCII bytes, no blank, no '/'. */
static bool id_ok(const char *s, size_t n)
{
    if (n == 0 || n > CI_PROVIDERS_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '/')
            return false;
    return true;
}

/* Adds the allowed values of one rule: a list of strings, or one string. */
static bool take_values(pstate *p, const char *where, const jv *v, ci_rule *r)
{
    size_t n = jv_is_arr(v) ? jv_arr_len(v) : 1;
    if (!jv_is_arr(v) && !jv_is_str(v)) {
        perr(p, false, where, "expected a list of values or one value");
        return false;
    }
    if (n > CI_PROVIDERS_MAX_VALUES) {
        perr(p, true, where, "more than %u allowed values", CI_PROVIDERS_MAX_VALUES);
        return false;
    }
    r->values = calloc(n ? n : 1, sizeof(*r->values));
    if (!r->values) {
        p->nomem = true;
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const jv *e = jv_is_arr(v) ? jv_arr_at(v, i) : v;
        const char *s = jv_str(e);
        if (!s) {
            perr(p, false, where, "value %zu is not a string", i + 1);
            return false;
        }
        if (jv_str_len(e) > CI_PROVIDERS_VALUE_MAX) {
            perr(p, true, where, "value %zu is longer than %u bytes", i + 1,
                 CI_PROVIDERS_VALUE_MAX);
            return false;
        }
        if (!(r->values[r->n_values] = dup_str(p, s)))
            return false;
        r->n_values++;
    }
    return true;
}

/* Reads `required_claims` (a mapping of claim name to allowed values) into pl. */
static bool take_rules(pstate *p, const char *where, const jv *rc, ci_pipeline *pl)
{
    if (!rc || jv_is_null(rc))
        return true;
    if (!jv_is_obj(rc)) {
        perr(p, false, where, "required_claims: expected a mapping of claim to allowed values");
        return false;
    }
    size_t n = jv_obj_len(rc);
    if (n > CI_PROVIDERS_MAX_CLAIMS) {
        perr(p, true, where, "required_claims: more than %u claims", CI_PROVIDERS_MAX_CLAIMS);
        return false;
    }
    pl->rules = calloc(n ? n : 1, sizeof(*pl->rules));
    if (!pl->rules) {
        p->nomem = true;
        return false;
    }
    for (void *it = jv_iter((jv *)rc); it; it = jv_iter_next((jv *)rc, it)) {
        const char *name = jv_iter_key(it);
        char claim_where[CI_PROVIDERS_KEY_MAX + 2 * CI_PROVIDERS_SHOW_MAX + 160];
        char nm[CI_PROVIDERS_SHOW_MAX + 1];
        shown(name, nm, sizeof(nm));
        snprintf(claim_where, sizeof(claim_where), "%s: required_claims.%s", where, nm);
        if (!*name || strlen(name) > CI_PROVIDERS_CLAIM_NAME_MAX) {
            perr(p, false, claim_where, "a claim name must be 1 to %u bytes",
                 CI_PROVIDERS_CLAIM_NAME_MAX);
            return false;
        }
        ci_rule *r = &pl->rules[pl->n_rules++];
        if (!(r->name = dup_str(p, name)) || !take_values(p, claim_where, jv_iter_val(it), r))
            return false;
    }
    return true;
}

/* Reads one entry (key and value) of a repo map into a new pipeline of p->m. */
static void take_entry(pstate *p, const char *section, const char *key, const jv *val)
{
    const char *slash = strchr(key, '/');
    if (!slash) {
        p->m->skipped++; /* upstream skips them: issuer, jwks_uri of a legacy section */
        return;
    }
    char k[CI_PROVIDERS_SHOW_MAX + 1];
    shown(key, k, sizeof(k));
    char where[CI_PROVIDERS_SHOW_MAX + 96];
    snprintf(where, sizeof(where), "%s['%s']", section, k);
    size_t on = (size_t)(slash - key), pn = strlen(slash + 1);
    if (!id_ok(key, on) || !id_ok(slash + 1, pn)) {
        perr(p, false, where,
             "expected '<organization_id>/<pipeline_id>', each 1 to %u printable characters",
             CI_PROVIDERS_ID_MAX);
        return;
    }
    if (p->m->n >= CRCR_CI_PROVIDERS_MAX_PIPELINES) {
        perr(p, true, where, "more than %u pipelines", CRCR_CI_PROVIDERS_MAX_PIPELINES);
        return;
    }
    const jv *repo = val, *rules = NULL;
    if (jv_is_obj(val)) {
        for (void *it = jv_iter((jv *)val); it; it = jv_iter_next((jv *)val, it)) {
            const char *f = jv_iter_key(it);
            if (strcmp(f, "repo") != 0 && strcmp(f, "required_claims") != 0) {
                char fs[CI_PROVIDERS_SHOW_MAX + 1];
                shown(f, fs, sizeof(fs));
                perr(p, false, where, "unknown key '%s' (expected repo, required_claims)", fs);
                return;
            }
        }
        repo = jv_get(val, "repo");
        rules = jv_get(val, "required_claims");
    }
    const char *rs = jv_str(repo);
    if (!rs || strlen(rs) != jv_str_len(repo) || !ids_full_name_valid(rs)) {
        perr(p, false, where, "expected owner/repo%s",
             jv_is_obj(val) ? " under repo" : ", or a mapping with repo and required_claims");
        return;
    }
    if (p->m->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        ci_pipeline *np = realloc(p->m->pipelines, ncap * sizeof(*np));
        if (!np) {
            p->nomem = true;
            return;
        }
        p->m->pipelines = np;
        p->cap = ncap;
    }
    ci_pipeline *pl = &p->m->pipelines[p->m->n++];
    memset(pl, 0, sizeof(*pl));
    pl->key = dup_str(p, key);
    pl->repo = dup_str(p, rs);
    if (pl->key && pl->repo)
        take_rules(p, where, rules, pl);
}

/* Reads a repo map (a mapping of entries; null is empty). */
static void take_map(pstate *p, const char *section, const jv *map)
{
    if (!map || jv_is_null(map))
        return;
    if (!jv_is_obj(map)) {
        perr(p, false, section,
             "expected a mapping of '<organization_id>/<pipeline_id>' to "
             "owner/repo");
        return;
    }
    for (void *it = jv_iter((jv *)map); it && !p->nomem; it = jv_iter_next((jv *)map, it))
        take_entry(p, section, jv_iter_key(it), jv_iter_val(it));
}

/* The sections of the file: providers.buildkite.repo_map, else the legacy flat buildkite. */
static void take_doc(pstate *p, const jv *doc)
{
    if (!doc || jv_is_null(doc))
        return; /* an empty file */
    if (!jv_is_obj(doc)) {
        perr(p, false, "(top level)", "expected a mapping");
        return;
    }
    const jv *providers = jv_get(doc, "providers");
    const jv *bk = NULL;
    if (providers && !jv_is_null(providers)) {
        if (!jv_is_obj(providers)) {
            perr(p, false, "providers", "expected a mapping");
            return;
        }
        bk = jv_get(providers, "buildkite");
        if (bk && !jv_is_null(bk) && !jv_is_obj(bk)) {
            perr(p, false, "providers.buildkite", "expected a mapping");
            return;
        }
    }
    const jv *map = jv_is_obj(bk) ? jv_get(bk, "repo_map") : NULL;
    if (map)
        take_map(p, "providers.buildkite.repo_map", map);
    else
        take_map(p, "buildkite", jv_get(doc, "buildkite"));
}

static int pipeline_cmp(const void *a, const void *b)
{
    return strcmp(((const ci_pipeline *)a)->key, ((const ci_pipeline *)b)->key);
}

/* Owner: on success the caller owns *out (ci_providers_free). */
crcr_err ci_providers_parse(const char *yaml, size_t len, ci_providers **out, buf_t *errors)
{
    *out = NULL;
    jv *doc = NULL;
    crcr_err rc = yaml_doc_to_jv(yaml, len, CRCR_CI_PROVIDERS_MAX_BYTES, &doc, errors);
    if (rc)
        return rc;
    pstate p = {.errors = errors};
    p.m = calloc(1, sizeof(*p.m));
    if (!p.m) {
        jv_free(doc);
        return CRCR_E_NOMEM;
    }
    atomic_init(&p.m->refs, 1);
    take_doc(&p, doc);
    jv_free(doc);
    if (!p.nomem && !p.nerrs && p.m->n > 1) {
        qsort(p.m->pipelines, p.m->n, sizeof(*p.m->pipelines), pipeline_cmp);
        for (size_t i = 1; i < p.m->n; i++) /* the YAML reader refuses repeated keys already */
            if (strcmp(p.m->pipelines[i - 1].key, p.m->pipelines[i].key) == 0)
                perr(&p, false, p.m->pipelines[i].key, "listed twice");
    }
    if (p.nerrs > CI_PROVIDERS_MAX_ERRORS && errors)
        (void)buf_printf(errors, " (and %zu more problems)\n", p.nerrs - CI_PROVIDERS_MAX_ERRORS);
    if (p.nomem || p.nerrs) {
        destroy(p.m);
        return p.nomem ? CRCR_E_NOMEM : p.too_large ? CRCR_E_TOO_LARGE : CRCR_E_INVALID;
    }
    *out = p.m;
    return CRCR_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Lifetime and queries. */

ci_providers *ci_providers_ref(ci_providers *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void ci_providers_free(ci_providers *m)
{
    if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
        destroy(m);
}

size_t ci_providers_count(const ci_providers *m)
{
    return m ? m->n : 0;
}

size_t ci_providers_skipped(const ci_providers *m)
{
    return m ? m->skipped : 0;
}

const char *ci_providers_key_at(const ci_providers *m, size_t i)
{
    return m && i < m->n ? m->pipelines[i].key : NULL;
}

/* The pipeline "<org>/<pipeline>", or NULL. */
static const ci_pipeline *find(const ci_providers *m, const char *org, const char *pipeline)
{
    char key[CI_PROVIDERS_KEY_MAX + 1];
    if (!m || !org || !pipeline || !id_ok(org, strlen(org)) || !id_ok(pipeline, strlen(pipeline)))
        return NULL;
    snprintf(key, sizeof(key), "%s/%s", org, pipeline);
    ci_pipeline probe = {.key = key};
    return bsearch(&probe, m->pipelines, m->n, sizeof(*m->pipelines), pipeline_cmp);
}

const char *ci_providers_buildkite_repo(const ci_providers *m, const char *organization_id,
                                        const char *pipeline_id)
{
    const ci_pipeline *pl = find(m, organization_id, pipeline_id);
    return pl ? pl->repo : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The Buildkite resolver. */

/* Writes a reason and returns `status`. */
__attribute__((format(printf, 4, 5))) static int refuse(int status, char *reason, size_t reasonsz,
                                                        const char *fmt, ...)
{
    if (reason && reasonsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(reason, reasonsz, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* A claim as the string upstream compares (str(value)): a string as it is, an integer in
 * decimal, a boolean "true"/"false". False for an absent claim or another type. */
static bool claim_text(const jv *v, char *out, size_t outsz)
{
    int64_t i;
    if (jv_is_str(v)) {
        if (jv_str_len(v) >= outsz || strlen(jv_str(v)) != jv_str_len(v))
            return false;
        memcpy(out, jv_str(v), jv_str_len(v) + 1);
        return true;
    }
    if (jv_int(v, &i)) {
        snprintf(out, outsz, "%lld", (long long)i);
        return true;
    }
    if (jv_is_bool(v)) {
        snprintf(out, outsz, "%s", jv_is_true(v) ? "true" : "false");
        return true;
    }
    return false;
}

/* An id claim: a string that id_ok() accepts. */
static const char *id_claim(const jv *claims, const char *name)
{
    const jv *v = jv_get(claims, name);
    const char *s = jv_str(v);
    return s && strlen(s) == jv_str_len(v) && id_ok(s, jv_str_len(v)) ? s : NULL;
}

/* Checks the token's claims against the pipeline's rules: 0, or 403 with the reason. */
static int check_rules(const ci_pipeline *pl, const jv *claims, char *reason, size_t reasonsz)
{
    for (size_t i = 0; i < pl->n_rules; i++) {
        const ci_rule *r = &pl->rules[i];
        const jv *v = jv_get(claims, r->name);
        char text[CI_PROVIDERS_VALUE_MAX + 2]; /* one more than a value: longer never matches */
        bool have = claim_text(v, text, sizeof(text));
        if (!have && !v)
            return refuse(403, reason, reasonsz,
                          "Buildkite claim '%s' missing: required for this pipeline", r->name);
        bool ok = false;
        for (size_t k = 0; have && k < r->n_values && !ok; k++)
            ok = strcmp(text, r->values[k]) == 0;
        if (!ok) {
            char val[CI_PROVIDERS_SHOW_MAX + 1];
            shown(have ? text : "(not comparable)", val, sizeof(val));
            return refuse(403, reason, reasonsz,
                          "Buildkite claim '%s' value '%s' not in allowed set for this pipeline",
                          r->name, val);
        }
    }
    return 0;
}

int ci_providers_check_buildkite(const ci_providers *m, const jv *claims, oidc_identity *id,
                                 char *reason, size_t reasonsz)
{
    const char *org = id_claim(claims, "organization_id");
    if (!org)
        return refuse(401, reason, reasonsz,
                      "Buildkite OIDC token missing 'organization_id' claim");
    const char *pipeline = id_claim(claims, "pipeline_id");
    if (!pipeline)
        return refuse(401, reason, reasonsz, "Buildkite OIDC token missing 'pipeline_id' claim");
    const ci_pipeline *pl = find(m, org, pipeline);
    if (!pl)
        return refuse(403, reason, reasonsz, "Buildkite pipeline %s/%s is not registered with CRCR",
                      org, pipeline);
    int status = check_rules(pl, claims, reason, reasonsz);
    if (status == 0) {
        snprintf(id->repository, sizeof(id->repository), "%s", pl->repo);
        snprintf(id->pipeline, sizeof(id->pipeline), "%s", pl->key);
    }
    return status;
}

int ci_providers_resolve_buildkite(void *ctx, const jv *claims, oidc_identity *id, char *reason,
                                   size_t reasonsz)
{
    doc_source *src = ctx;
    ci_providers *m = src ? ci_providers_source_get(src) : NULL;
    int status = src && !m ? refuse(503, reason, reasonsz,
                                    "the CI providers map is not loaded yet; please retry")
                           : ci_providers_check_buildkite(m, claims, id, reason, reasonsz);
    ci_providers_free(m);
    return status;
}

/* ---------------------------------------------------------------------------------------- */
/* The source. */

DOC_KIND_DEFINE(CI_PROVIDERS_KIND, "ci_providers", "CI_PROVIDERS_FILE", "CI_PROVIDERS_URL",
                "pipelines", CRCR_CI_PROVIDERS_MAX_BYTES, ci_providers, ci_providers_parse,
                ci_providers_ref, ci_providers_free, ci_providers_count);

/* Owner: the caller frees the source with allowlist_source_free(). */
doc_source *ci_providers_source_new(const crcr_config *cfg, gh_client *gh, char *err, size_t errsz)
{
    if (err && errsz)
        err[0] = '\0';
    if (!cfg || (!cfg->ci_providers_file && !cfg->ci_providers_url))
        return NULL;
    return doc_source_new(&CI_PROVIDERS_KIND, cfg, cfg->ci_providers_file, cfg->ci_providers_url,
                          gh, err, errsz);
}

ci_providers *ci_providers_source_get(doc_source *src)
{
    return doc_source_get(src);
}
