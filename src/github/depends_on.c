/* depends_on.c - Depends-On lines, pair records and payloads; see depends_on.h. */
#include "depends_on.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ids.h"
#include "json.h"

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* OWNER/REPO in s[0..n) by GitHub's name rules, copied to out. */
static bool owner_repo(const char *s, size_t n, char out[CRCR_REPO_NAME_MAX])
{
    const char *slash = memchr(s, '/', n);
    if (!slash || n >= CRCR_REPO_NAME_MAX)
        return false;
    size_t on = (size_t)(slash - s);
    if (!ids_owner_valid(s, on) || !ids_repo_name_valid(slash + 1, n - on - 1))
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* The value of a line: OWNER/REPO#N, or {web_url}/OWNER/REPO/pull/N[/]. */
static bool parse_value(const char *v, size_t n, const char *web_url, depends_on_line *out)
{
    const char *hash = memchr(v, '#', n);
    if (hash)
        return owner_repo(v, (size_t)(hash - v), out->repo) &&
               ids_pr_number(hash + 1, n - (size_t)(hash - v) - 1, &out->number);
    const char *web = web_url && *web_url ? web_url : "https://github.com";
    size_t wn = strlen(web);
    while (wn > 0 && web[wn - 1] == '/')
        wn--;
    if (n <= wn + 1 || strncasecmp(v, web, wn) != 0 || v[wn] != '/')
        return false;
    const char *p = v + wn + 1, *end = v + n;
    if (end > p && end[-1] == '/')
        end--;
    /* OWNER/REPO/pull/N: the last two segments are "pull" and the number. */
    const char *last = end;
    while (last > p && last[-1] != '/')
        last--;
    if (last - p < 9 || strncmp(last - 6, "/pull/", 6) != 0) /* "o/r/pull/" at least */
        return false;
    return owner_repo(p, (size_t)(last - 6 - p), out->repo) &&
           ids_pr_number(last, (size_t)(end - last), &out->number);
}

size_t depends_on_parse(const char *body, size_t len, const char *web_url, depends_on_line *out,
                        size_t max, size_t *ignored)
{
    static const char key[] = "depends-on";
    size_t n = 0, skipped = 0;
    if (len > CRCR_PR_BODY_MAX)
        len = CRCR_PR_BODY_MAX;
    for (size_t at = 0; body && at < len;) {
        const char *line = body + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t ln = nl ? (size_t)(nl - line) : len - at;
        at += ln + (nl ? 1 : 0);
        size_t i = 0;
        while (i < ln && blank(line[i]))
            i++;
        if (ln - i < sizeof(key) - 1 || strncasecmp(line + i, key, sizeof(key) - 1) != 0)
            continue;
        i += sizeof(key) - 1;
        while (i < ln && blank(line[i]))
            i++;
        if (i >= ln || line[i] != ':')
            continue;
        i++;
        while (i < ln && blank(line[i]))
            i++;
        size_t end = ln;
        while (end > i && (blank(line[end - 1]) || line[end - 1] == '\r'))
            end--;
        depends_on_line d;
        bool repeat = false;
        if (!parse_value(line + i, end - i, web_url, &d)) {
            skipped++;
            continue;
        }
        for (size_t k = 0; k < n && !repeat; k++)
            repeat = strcasecmp(out[k].repo, d.repo) == 0;
        if (repeat || n >= max) {
            skipped++;
            continue;
        }
        out[n++] = d;
    }
    if (ignored)
        *ignored = skipped;
    return n;
}

int64_t depends_on_find(const depends_on_line *v, size_t n, const char *repo)
{
    for (size_t i = 0; repo && i < n; i++) {
        if (strcasecmp(v[i].repo, repo) == 0)
            return v[i].number;
    }
    return 0;
}

crcr_err depends_on_request(const char *repo, int64_t number, buf_t *out)
{
    crcr_err e = buf_puts(out, "{\"depends_on\":{\"repository\":");
    if (!e)
        e = jv_quote(out, repo, strlen(repo));
    if (!e)
        e = buf_printf(out, ",\"number\":%lld}}", (long long)number);
    return e;
}

/* Copies a string member of `o` into out[sz]; false when absent, not a string or too long. */
static bool copy_member(const jv *o, const char *key, char *out, size_t sz)
{
    const char *s = jv_str(jv_get(o, key));
    size_t n = s ? strlen(s) : 0;
    if (!s || n >= sz)
        return false;
    memcpy(out, s, n + 1);
    return true;
}

bool depends_on_record_parse(const char *json, size_t len, depends_on_pair *out)
{
    memset(out, 0, sizeof(*out));
    if (!json || !len)
        return false;
    jv *doc = jv_parse(json, len, NULL, 0);
    const jv *d = jv_get(doc, "depends_on");
    bool ok = jv_is_obj(d) && copy_member(d, "repository", out->repo, sizeof(out->repo)) &&
              jv_int(jv_get(d, "number"), &out->number) && out->number > 0;
    if (ok) {
        out->resolved = copy_member(d, "head_sha", out->head_sha, sizeof(out->head_sha)) &&
                        copy_member(d, "head_ref", out->head_ref, sizeof(out->head_ref)) &&
                        copy_member(d, "clone_url", out->clone_url, sizeof(out->clone_url));
        if (!out->resolved)
            out->head_sha[0] = out->head_ref[0] = out->clone_url[0] = '\0';
        copy_member(doc, "problem", out->problem, sizeof(out->problem));
    }
    jv_free(doc);
    if (!ok)
        memset(out, 0, sizeof(*out));
    return ok;
}

/* Appends "repository":..,"number":N and, for a resolved pair, its head. */
static crcr_err pair_members(const depends_on_pair *p, buf_t *out)
{
    crcr_err e = buf_puts(out, "\"repository\":");
    if (!e)
        e = jv_quote(out, p->repo, strlen(p->repo));
    if (!e)
        e = buf_printf(out, ",\"number\":%lld", (long long)p->number);
    if (!e && p->resolved) {
        const struct {
            const char *key, *value;
        } head[] = {
            {"head_sha", p->head_sha}, {"head_ref", p->head_ref}, {"clone_url", p->clone_url}};
        for (size_t i = 0; i < sizeof(head) / sizeof(head[0]) && !e; i++) {
            e = buf_printf(out, ",\"%s\":", head[i].key);
            if (!e)
                e = jv_quote(out, head[i].value, strlen(head[i].value));
        }
    }
    return e;
}

crcr_err depends_on_record(const depends_on_pair *p, buf_t *out)
{
    crcr_err e = buf_puts(out, "{\"depends_on\":{");
    if (!e)
        e = pair_members(p, out);
    if (!e)
        e = buf_putc(out, '}');
    if (!e && !p->resolved && p->problem[0]) {
        e = buf_puts(out, ",\"problem\":");
        if (!e)
            e = jv_quote(out, p->problem, strlen(p->problem));
    }
    if (!e)
        e = buf_putc(out, '}');
    return e;
}

crcr_err depends_on_payload(const depends_on_pair *p, buf_t *out)
{
    if (!p->resolved)
        return CRCR_E_INVALID;
    crcr_err e = buf_putc(out, '{');
    if (!e)
        e = pair_members(p, out);
    if (!e)
        e = buf_putc(out, '}');
    return e;
}

void depends_on_unread(depends_on_pair *p)
{
    p->resolved = false;
    p->head_sha[0] = p->head_ref[0] = p->clone_url[0] = p->problem[0] = '\0';
}

void depends_on_from_pull(const char *json, size_t len, depends_on_pair *p)
{
    depends_on_unread(p);
    jv *doc = json && len ? jv_parse(json, len, NULL, 0) : NULL;
    const char *state = jv_str(jv_get(doc, "state"));
    const jv *head = jv_get(doc, "head");
    if (!state || strcmp(state, "open") != 0) {
        snprintf(p->problem, sizeof(p->problem), "%s",
                 jv_is_true(jv_get(doc, "merged")) ? "merged"
                 : state                           ? "closed"
                                                   : "unreadable answer");
    } else if (!copy_member(head, "sha", p->head_sha, sizeof(p->head_sha)) ||
               !ids_sha_valid(p->head_sha) ||
               !copy_member(head, "ref", p->head_ref, sizeof(p->head_ref))) {
        snprintf(p->problem, sizeof(p->problem), "no valid head in GitHub's answer");
    } else if (!copy_member(jv_get(head, "repo"), "clone_url", p->clone_url,
                            sizeof(p->clone_url)) &&
               !copy_member(jv_path(doc, "base.repo"), "clone_url", p->clone_url,
                            sizeof(p->clone_url))) {
        snprintf(p->problem, sizeof(p->problem), "no clone URL in GitHub's answer");
    } else {
        p->resolved = true;
    }
    if (!p->resolved)
        p->head_sha[0] = p->head_ref[0] = p->clone_url[0] = '\0';
    jv_free(doc);
}

void depends_on_label(const depends_on_pair *p, char *out, size_t outsz)
{
    if (p->resolved)
        snprintf(out, outsz, "%s#%lld @ %.7s", p->repo, (long long)p->number, p->head_sha);
    else
        snprintf(out, outsz, "%s#%lld", p->repo, (long long)p->number);
}
