/* oncall.c - the on-call comment on the upstream PR; see oncall.h. */
#include "oncall.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ids.h"
#include "utf8.h"
#include "vocab.h"

#define ONCALL_PREFIX "<!-- crcr-oncall:"
#define ONCALL_SUFFIX " -->"
#define ONCALL_SHORT_SHA 7u
/* Bytes of all mentions: every on-call a maximal "@org/team" and a space. */
#define ONCALL_MENTIONS_MAX (CRCR_ALLOWLIST_MAX_ONCALLS * (CRCR_REPO_NAME_MAX + 2u))

bool oncall_alerting(const char *conclusion)
{
    switch (conclusion_parse(conclusion)) {
    case CONCLUSION_FAILURE:
    case CONCLUSION_CANCELLED:
    case CONCLUSION_TIMED_OUT:
        return true;
    default:
        return false;
    }
}

bool oncall_mention(const char *oncall, buf_t *out)
{
    if (!oncall)
        return false;
    const char *h = oncall[0] == '@' ? oncall + 1 : oncall;
    size_t n = strlen(h);
    bool ok = memchr(h, '/', n) ? ids_full_name_valid(h) : ids_owner_valid(h, n);
    return ok && buf_printf(out, "@%s", h) == CRCR_OK;
}

/* A byte written as itself: printable ASCII that cannot end a code span or a table cell, mention,
 * open a link or start markup or an entity. */
static bool text_safe(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && !strchr("`|<>@\\[]&", c);
}

crcr_err oncall_text(const char *s, buf_t *out)
{
    if (!s)
        return CRCR_OK;
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), i = 0, n = 0;
    char tmp[ONCALL_TEXT_MAX] = "";
    while (i < len && n < sizeof(tmp)) {
        size_t k = p[i] < 0x80 ? 1 : utf8_seq(p + i, len - i);
        if (k == 0)
            k = 1; /* an ill-formed byte: one replacement of its own */
        tmp[n++] = k == 1 && text_safe(p[i]) ? (char)p[i] : '_';
        i += k;
    }
    crcr_err e = buf_append(out, tmp, n);
    if (!e && i < len)
        e = buf_puts(out, "...");
    return e;
}

crcr_err oncall_marker(const char *repo, buf_t *out)
{
    return buf_printf(out, ONCALL_PREFIX "%s" ONCALL_SUFFIX, repo ? repo : "");
}

bool oncall_marker_leads(const char *text, size_t len, const char *repo)
{
    if (!text || !repo)
        return false;
    const size_t pl = sizeof(ONCALL_PREFIX) - 1, sl = sizeof(ONCALL_SUFFIX) - 1;
    const size_t rl = strlen(repo);
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    const char *p = text + i;
    return len - i >= pl + rl + sl && memcmp(p, ONCALL_PREFIX, pl) == 0 &&
           strncasecmp(p + pl, repo, rl) == 0 && memcmp(p + pl + rl, ONCALL_SUFFIX, sl) == 0;
}

/* Whether `login` is one of the comma-separated names of `list` (blanks around them ignored,
 * ASCII case ignored). */
static bool login_listed(const char *login, const char *list)
{
    size_t ln = login ? strlen(login) : 0;
    for (const char *p = list ? list : ""; ln && *p;) {
        size_t n = strcspn(p, ",");
        const char *s = p, *e = p + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - s) == ln && strncasecmp(s, login, ln) == 0)
            return true;
        p += n;
        if (*p == ',')
            p++;
    }
    return false;
}

/* Whether the App that wrote the comment (performed_via_github_app) is the App `app_id`: its
 * numeric id, or its client id for an "Iv..." `app_id`. */
static bool written_by_app(const jv *comment, const char *app_id)
{
    const jv *app = jv_get(comment, "performed_via_github_app");
    if (!app_id || !*app_id || !jv_is_obj(app))
        return false;
    if (app_id[0] >= '0' && app_id[0] <= '9') {
        int64_t id = 0;
        char s[24];
        if (!jv_int(jv_get(app, "id"), &id))
            return false;
        snprintf(s, sizeof(s), "%lld", (long long)id);
        return strcmp(s, app_id) == 0;
    }
    const char *client = jv_str(jv_get(app, "client_id"));
    return client && strcmp(client, app_id) == 0;
}

bool oncall_comment_is_marker(const jv *comment, const char *repo, const char *app_id,
                              const char *trusted)
{
    const jv *b = jv_get(comment, "body");
    if (!oncall_marker_leads(jv_str(b), jv_str_len(b), repo))
        return false;
    return written_by_app(comment, app_id) ||
           login_listed(jv_path_str(comment, "user.login"), trusted);
}

/* The downstream run is linked only through an https:// URL of characters that cannot close the
 * link or leave the table. */
static bool url_linkable(const char *url)
{
    static const char scheme[] = "https://";
    size_t n = url ? strlen(url) : 0;
    if (n <= sizeof(scheme) - 1 || n > ONCALL_URL_MAX || strncmp(url, scheme, sizeof(scheme) - 1))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (!isalnum(c) && !strchr("-._~:/?#=%+", c))
            return false;
    }
    return true;
}

/* The first ONCALL_SHORT_SHA digits of `sha` (lower case), or "unknown" for anything but hex. */
static void short_sha(const char *sha, char *out, size_t outsz)
{
    size_t n = sha ? strlen(sha) : 0;
    bool hex = n > 0;
    for (size_t i = 0; i < n && hex; i++)
        hex = isxdigit((unsigned char)sha[i]) != 0;
    if (!hex) {
        snprintf(out, outsz, "unknown");
        return;
    }
    size_t k = 0;
    for (; k < n && k < ONCALL_SHORT_SHA && k + 1 < outsz; k++)
        out[k] = (char)tolower((unsigned char)sha[k]);
    out[k] = '\0';
}

crcr_err oncall_comment(const oncall_failure *f, buf_t *out)
{
    if (!f->repo || !ids_full_name_valid(f->repo))
        return CRCR_E_INVALID;
    buf_t mentions, name, concl;
    buf_init(&mentions, ONCALL_MENTIONS_MAX);
    buf_init(&name, ONCALL_TEXT_MAX + 8);
    buf_init(&concl, ONCALL_TEXT_MAX + 8);
    crcr_err e = CRCR_OK;
    for (size_t i = 0; i < f->n_oncalls && !e; i++) {
        buf_t m;
        buf_init(&m, CRCR_REPO_NAME_MAX + 2);
        if (oncall_mention(f->oncalls[i], &m)) {
            if (mentions.len)
                e = buf_putc(&mentions, ' ');
            if (!e)
                e = buf_append(&mentions, m.data, m.len);
        }
        buf_free(&m);
    }
    if (!e && mentions.len == 0)
        e = CRCR_E_NOT_FOUND;
    if (!e)
        e = oncall_text(f->check_name, &name);
    if (!e)
        e = oncall_text(f->conclusion, &concl);
    char sha[ONCALL_SHORT_SHA + 8];
    short_sha(f->head_sha, sha, sizeof(sha));
    size_t start = out->len;
    if (!e)
        e = oncall_marker(f->repo, out);
    if (!e)
        e = buf_printf(out,
                       "\n## :x: CRCR downstream CI failure\n\n"
                       "The downstream CI of `%s` failed on commit `%s`.\n\n"
                       "%s please investigate.\n\n"
                       "| Check Run | Commit | Conclusion |\n"
                       "|---|---|---|\n",
                       f->repo, sha, buf_cstr(&mentions));
    if (!e)
        e = url_linkable(f->details_url)
                ? buf_printf(out, "| [`%s`](%s) ", buf_cstr(&name), f->details_url)
                : buf_printf(out, "| `%s` ", buf_cstr(&name));
    if (!e)
        e = buf_printf(out, "| `%s` | `%s` |\n", sha, buf_cstr(&concl));
    if (e && out->len > start) { /* nothing half-written stays behind */
        out->len = start;
        out->data[start] = '\0';
    }
    buf_free(&mentions);
    buf_free(&name);
    buf_free(&concl);
    return e;
}

crcr_err oncall_row_body(int64_t pr, const char *repo, const char *comment, size_t len, buf_t *out)
{
    crcr_err e = buf_printf(out, "{\"pr\":%lld,\"repo\":", (long long)pr);
    if (!e)
        e = jv_quote(out, repo, strlen(repo));
    if (!e)
        e = buf_puts(out, ",\"body\":");
    if (!e)
        e = jv_quote(out, comment, len);
    if (!e)
        e = buf_putc(out, '}');
    return e;
}

bool oncall_row_parse(const char *body, size_t len, oncall_row *out)
{
    memset(out, 0, sizeof(*out));
    jv *doc = body ? jv_parse(body, len, NULL, 0) : NULL;
    const char *repo = jv_str(jv_get(doc, "repo"));
    const char *comment = jv_str(jv_get(doc, "body"));
    if (!jv_int(jv_get(doc, "pr"), &out->pr) || out->pr <= 0 || !repo ||
        !ids_full_name_valid(repo) || !comment || !*comment) {
        jv_free(doc);
        memset(out, 0, sizeof(*out));
        return false;
    }
    snprintf(out->repo, sizeof(out->repo), "%s", repo); /* valid: < CRCR_REPO_NAME_MAX */
    out->doc = doc;
    out->comment = comment;
    return true;
}

void oncall_row_free(oncall_row *row)
{
    jv_free(row->doc);
    memset(row, 0, sizeof(*row));
}

static crcr_err put_lower(buf_t *out, const char *s)
{
    crcr_err e = CRCR_OK;
    for (; s && *s && !e; s++)
        e = buf_putc(out, (char)tolower((unsigned char)*s));
    return e;
}

crcr_err oncall_seq_key(int64_t pr, const char *repo, buf_t *out)
{
    crcr_err e = buf_printf(out, "oncall:%lld:", (long long)pr);
    if (!e)
        e = put_lower(out, repo);
    return e;
}

crcr_err oncall_record_key(const char *upstream, int64_t pr, const char *repo, buf_t *out)
{
    crcr_err e = buf_puts(out, "oncall:");
    if (!e)
        e = put_lower(out, upstream);
    if (!e)
        e = buf_printf(out, "#%lld:", (long long)pr);
    if (!e)
        e = put_lower(out, repo);
    return e;
}
