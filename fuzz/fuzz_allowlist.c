/*
 * fuzz_allowlist.c - libFuzzer target for the allowlist parser (allowlist_parse) and its queries:
 * the input is the YAML file.
 *
 * Invariants checked (abort on violation), restated from allowlist.h:
 *   - failure: CRCR_E_INVALID, CRCR_E_TOO_LARGE or CRCR_E_NOMEM, no allowlist, and a non-empty,
 *     valid UTF-8 error text whose every line is "LINE:COL: message" with LINE, COL >= 1;
 *   - success: no error text; every entry has a repo "owner/name" with exactly one '/' and both
 *     halves non-empty, shorter than CRCR_REPO_NAME_MAX; a level 1..4 in non-decreasing order; a
 *     non-empty device exactly for L3; trimmed, non-empty oncalls (at most the limit); LINE:COL
 *     >= 1; no two repos equal ignoring case;
 *   - the queries agree with the entries: find (in any letter case), level, repo_device,
 *     repos_at_or_above (count per level, byte-sorted output), device_repos (file order),
 *     needs_check_run (L4 always, L3 with its own label only, L1/L2 never);
 *   - round trip: the parsed allowlist written back as YAML (every string double-quoted and
 *     escaped) parses to the same entries, devices and oncalls;
 *   - the same input parses the same way twice; ref/free balance.
 * Seeds: fuzz/corpus/allowlist/.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "buf.h"
#include "crcr_limits.h"
#include "fuzz_check.h"

/* Caps of the harness's own buffers (the parser reports at most 50 problems of < 1 KiB each). */
#define FZ_ERRORS_MAX (256u * 1024u)
#define FZ_YAML_MAX (8u * 1024u * 1024u)

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

/* Checks "LINE:COL: message\n" lines; the text is valid UTF-8, since it reaches JSON answers
 * (the allowlist status of /readyz and the admin API) and terminals. */
static void check_error_text(const buf_t *errors)
{
    const char *s = buf_cstr(errors);
    CHECK(errors->len > 0 && s[errors->len - 1] == '\n');
    CHECK(utf8_valid(s));
    while (*s) {
        char *end;
        long line = strtol(s, &end, 10);
        CHECK(end != s && line >= 1 && *end == ':');
        s = end + 1;
        long col = strtol(s, &end, 10);
        CHECK(end != s && col >= 1 && end[0] == ':' && end[1] == ' ');
        s = strchr(end, '\n');
        CHECK(s != NULL);
        s++;
    }
}

static int cmp_ci(const void *a, const void *b)
{
    return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

/* `s` with its letters flipped to upper (`upper`) or lower case, in `out` (CRCR_REPO_NAME_MAX). */
static void recase(const char *s, char *out, bool upper)
{
    size_t i = 0;
    for (; s[i] && i + 1 < CRCR_REPO_NAME_MAX; i++) {
        char c = s[i];
        if (upper && c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        else if (!upper && c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        out[i] = c;
    }
    out[i] = '\0';
}

static void check_entry(const allowlist *al, const allowlist_entry *e)
{
    CHECK(e->repo != NULL);
    size_t len = strlen(e->repo);
    CHECK(len > 0 && len < CRCR_REPO_NAME_MAX);
    const char *slash = strchr(e->repo, '/');
    CHECK(slash && slash != e->repo && slash[1] != '\0' && strchr(slash + 1, '/') == NULL);
    CHECK(e->level >= CRCR_LEVEL_L1 && e->level <= CRCR_LEVEL_L4);
    CHECK(e->line >= 1 && e->col >= 1);
    if (e->level == CRCR_LEVEL_L3)
        CHECK(e->device && e->device[0] != '\0');
    else
        CHECK(e->device == NULL);
    CHECK(e->n_oncalls <= CRCR_ALLOWLIST_MAX_ONCALLS);
    CHECK(e->n_oncalls == 0 || e->oncalls != NULL);
    for (size_t i = 0; i < e->n_oncalls; i++) {
        const char *o = e->oncalls[i];
        size_t n = strlen(o);
        CHECK(n > 0 && !is_ws(o[0]) && !is_ws(o[n - 1]));
    }

    /* Point queries, in three letter cases. */
    char up[CRCR_REPO_NAME_MAX], low[CRCR_REPO_NAME_MAX];
    recase(e->repo, up, true);
    recase(e->repo, low, false);
    CHECK(allowlist_find(al, e->repo) == e);
    CHECK(allowlist_find(al, up) == e);
    CHECK(allowlist_find(al, low) == e);
    CHECK(allowlist_level(al, up) == e->level);
    CHECK(allowlist_repo_device(al, low) == e->device);

    /* needs_check_run: L4 always, L3 only with its own device label, L1/L2 never. */
    CHECK(allowlist_needs_check_run(al, e->repo, NULL, 0) == (e->level == CRCR_LEVEL_L4));
    if (e->level == CRCR_LEVEL_L3) {
        buf_t label;
        buf_init(&label, 512);
        CHECK(buf_printf(&label, "ciflow/crcr/%s", e->device) == CRCR_OK);
        const char *labels[] = {"ciflow/crcr/", buf_cstr(&label)};
        CHECK(allowlist_needs_check_run(al, e->repo, labels, 2));
        CHECK(!allowlist_needs_check_run(al, e->repo, labels, 1));
        buf_free(&label);
    }
}

/* The aggregate queries against a straightforward recount over the entries. */
static void check_aggregates(const allowlist *al)
{
    size_t n = allowlist_count(al);
    CHECK(allowlist_at(al, n) == NULL);
    CHECK(allowlist_find(al, "no-slash") == NULL);
    CHECK(allowlist_level(al, "") == CRCR_LEVEL_NONE);

    /* No case-insensitive duplicates: sort a copy of the names, compare neighbours. */
    const char **names = calloc(n ? n : 1, sizeof(*names));
    CHECK(names != NULL);
    for (size_t i = 0; i < n; i++)
        names[i] = allowlist_at(al, i)->repo;
    qsort(names, n, sizeof(*names), cmp_ci);
    for (size_t i = 1; i < n; i++)
        CHECK(strcasecmp(names[i - 1], names[i]) != 0);

    for (int l = CRCR_LEVEL_L1; l <= CRCR_LEVEL_L4; l++) {
        size_t want = 0;
        for (size_t i = 0; i < n; i++)
            want += allowlist_at(al, i)->level >= (crcr_level)l;
        CHECK(allowlist_repos_at_or_above(al, (crcr_level)l, NULL, 0) == want);
        size_t got = allowlist_repos_at_or_above(al, (crcr_level)l, names, n);
        CHECK(got == want);
        for (size_t i = 0; i < got; i++) {
            CHECK(allowlist_level(al, names[i]) >= (crcr_level)l);
            if (i)
                CHECK(strcmp(names[i - 1], names[i]) < 0);
        }
    }

    /* device_repos: every L3 entry of the device, in file order; the fill respects `max`. */
    for (size_t i = 0; i < n; i++) {
        const allowlist_entry *e = allowlist_at(al, i);
        if (i)
            CHECK(allowlist_at(al, i - 1)->level <= e->level);
        if (!e->device)
            continue;
        size_t got = allowlist_device_repos(al, e->device, names, n), k = 0;
        for (size_t j = 0; j < n; j++) {
            const allowlist_entry *o = allowlist_at(al, j);
            if (o->device && strcmp(o->device, e->device) == 0) {
                CHECK(k < got && names[k] == o->repo);
                k++;
            }
        }
        CHECK(k == got);
        const char *one[1] = {NULL};
        CHECK(allowlist_device_repos(al, e->device, one, 1) == got);
        CHECK(one[0] == names[0]);
    }
    free(names);
}

/* Appends `s` as a YAML double-quoted scalar: printable ASCII as is, everything else escaped
 * (\xNN below 0x80, \uXXXX / \UXXXXXXXX for decoded UTF-8), so no byte is re-interpreted. */
static void yaml_quote(buf_t *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    CHECK(buf_putc(b, '"') == CRCR_OK);
    while (*p) {
        unsigned char c = *p;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            CHECK(buf_putc(b, (char)c) == CRCR_OK);
            p++;
            continue;
        }
        if (c < 0x80) {
            CHECK(buf_printf(b, "\\x%02x", c) == CRCR_OK);
            p++;
            continue;
        }
        /* The parser only stores valid UTF-8 (libyaml checks it); decode one code point. */
        size_t n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
        uint32_t cp = c & (n == 3 ? 0x07 : n == 2 ? 0x0f : 0x1f);
        for (size_t i = 1; i <= n; i++) {
            CHECK((p[i] & 0xc0) == 0x80);
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        p += n + 1;
        if (cp <= 0xffff)
            CHECK(buf_printf(b, "\\u%04x", (unsigned)cp) == CRCR_OK);
        else
            CHECK(buf_printf(b, "\\U%08x", (unsigned)cp) == CRCR_OK);
    }
    CHECK(buf_putc(b, '"') == CRCR_OK);
}

static void yaml_oncalls(buf_t *b, const allowlist_entry *e)
{
    CHECK(buf_puts(b, ": [") == CRCR_OK);
    for (size_t i = 0; i < e->n_oncalls; i++) {
        if (i)
            CHECK(buf_puts(b, ", ") == CRCR_OK);
        yaml_quote(b, e->oncalls[i]);
    }
    CHECK(buf_puts(b, "]\n") == CRCR_OK);
}

/* Writes `al` back as YAML in the upstream layout. */
static void write_yaml(const allowlist *al, buf_t *b)
{
    size_t n = allowlist_count(al);
    for (int l = CRCR_LEVEL_L1; l <= CRCR_LEVEL_L4; l++) {
        CHECK(buf_printf(b, "L%d:\n", l) == CRCR_OK);
        const char *device = NULL;
        for (size_t i = 0; i < n; i++) {
            const allowlist_entry *e = allowlist_at(al, i);
            if ((int)e->level != l)
                continue;
            if (l != CRCR_LEVEL_L3) {
                CHECK(buf_puts(b, "  - ") == CRCR_OK);
            } else {
                if (!device || strcmp(device, e->device) != 0) {
                    device = e->device;
                    CHECK(buf_puts(b, "  ") == CRCR_OK);
                    yaml_quote(b, device);
                    CHECK(buf_puts(b, ":\n") == CRCR_OK);
                }
                CHECK(buf_puts(b, "    ") == CRCR_OK);
            }
            yaml_quote(b, e->repo);
            yaml_oncalls(b, e);
        }
    }
}

/* True when both allowlists hold the same entries in the same order (line/col aside). */
static bool same_entries(const allowlist *a, const allowlist *b)
{
    size_t n = allowlist_count(a);
    if (allowlist_count(b) != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        const allowlist_entry *x = allowlist_at(a, i), *y = allowlist_at(b, i);
        if (strcmp(x->repo, y->repo) != 0 || x->level != y->level ||
            (x->device == NULL) != (y->device == NULL) ||
            (x->device && strcmp(x->device, y->device) != 0) || x->n_oncalls != y->n_oncalls)
            return false;
        for (size_t k = 0; k < x->n_oncalls; k++)
            if (strcmp(x->oncalls[k], y->oncalls[k]) != 0)
                return false;
    }
    return true;
}

static void check_round_trip(const allowlist *al)
{
    buf_t yaml, errors;
    buf_init(&yaml, FZ_YAML_MAX);
    buf_init(&errors, FZ_ERRORS_MAX);
    write_yaml(al, &yaml);
    allowlist *again = NULL;
    crcr_err rc = allowlist_parse(yaml.data, yaml.len, &again, &errors);
    if (rc != CRCR_OK)
        fprintf(stderr, "round trip failed:\n%s--- yaml:\n%s\n", buf_cstr(&errors),
                buf_cstr(&yaml));
    CHECK(rc == CRCR_OK);
    CHECK(same_entries(al, again));
    allowlist_free(again);
    buf_free(&yaml);
    buf_free(&errors);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    allowlist *al = NULL, *al2 = NULL;
    buf_t errors, errors2;
    buf_init(&errors, FZ_ERRORS_MAX);
    buf_init(&errors2, FZ_ERRORS_MAX);
    crcr_err rc = allowlist_parse((const char *)data, size, &al, &errors);
    crcr_err rc2 = allowlist_parse((const char *)data, size, &al2, &errors2);
    CHECK(rc == rc2);
    CHECK(errors.len == errors2.len &&
          (errors.len == 0 || memcmp(errors.data, errors2.data, errors.len) == 0));

    if (rc != CRCR_OK) {
        CHECK(rc == CRCR_E_INVALID || rc == CRCR_E_TOO_LARGE || rc == CRCR_E_NOMEM);
        CHECK(al == NULL && al2 == NULL);
        check_error_text(&errors);
    } else {
        CHECK(al != NULL && errors.len == 0);
        CHECK(same_entries(al, al2));
        for (size_t i = 0; i < allowlist_count(al); i++)
            check_entry(al, allowlist_at(al, i));
        check_aggregates(al);
        check_round_trip(al);
        CHECK(allowlist_ref(al) == al);
        allowlist_free(al); /* drops the extra reference only */
        CHECK(allowlist_count(al) == allowlist_count(al2));
    }
    allowlist_free(al);
    allowlist_free(al2);
    buf_free(&errors);
    buf_free(&errors2);
    return 0;
}
