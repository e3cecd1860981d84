/*
 * allowlist.c - parses the L1..L4 allowlist YAML and answers level queries; see allowlist.h.
 *
 * Parsing happens in three passes, each bounded:
 *   1. The bounded YAML reader (yaml_doc.h) builds a tree from libyaml's events, refusing
 *      anchors, aliases, a second document and input past the depth and node limits.
 *   2. A validator walks the tree with the upstream rules (utils/allowlist.py) plus crcr's
 *      stricter ones (GitHub owner/repo syntax, case-insensitive duplicates, limits per level
 *      and per repo), collecting every problem it finds with its LINE:COL.
 *   3. Duplicates are found by sorting, so a large list stays O(n log n).
 * Nothing is published until all three passes are clean: a malformed file never half-loads.
 */
#include "allowlist.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ids.h"
#include "crcr_limits.h"
#include "yaml_doc.h"

/* Longest L3 device name (it becomes the label "ciflow/crcr/<device>"). */
#define ALLOWLIST_MAX_DEVICE_LEN 100u

/* Everything one parse owns until it either publishes an allowlist or throws it away. */
typedef struct pctx {
    yaml_doc doc;  /* the tree and the problems */
    allowlist *al; /* being built */
    size_t cap_entries, cap_devices;
} pctx;

/* Node `id` of the parse's tree. */
static const ynode *node(const pctx *c, size_t id)
{
    return &c->doc.nodes[id];
}

struct allowlist {
    atomic_size_t refs;
    allowlist_entry *entries;
    size_t n;
    char **devices; /* owned device names; entries point into them */
    size_t ndevices;
    const allowlist_entry **by_ci;   /* sorted case-insensitively, ties in file order (find) */
    const allowlist_entry **by_name; /* sorted byte-wise (repos_at_or_above) */
};

/* ---------------------------------------------------------------------------------------- */
/* Pass 2: validation and construction. */

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Narrows [*s, *s + *n) by whitespace, like Python's str.strip(). */
static void strip_ws(const char **s, size_t *n)
{
    while (*n && is_ws(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && is_ws((*s)[*n - 1]))
        (*n)--;
}

/*
 * Normalises a repo as upstream does (strip whitespace, then '/'), then checks GitHub's syntax:
 * owner 1-39 of [A-Za-z0-9-], one '/', name 1-100 of [A-Za-z0-9._-] and not "." or "..".
 * Writes the result to `out` (CRCR_REPO_NAME_MAX bytes) or records a problem and returns false.
 */
static bool normalize_repo(pctx *c, const char *where, const ynode *n, char *out)
{
    const char *s = n->text;
    size_t len = n->len;
    char q[YAML_DOC_QUOTE_SIZE];
    yaml_doc_quote(q, sizeof(q), n->text, n->len);

    strip_ws(&s, &len);
    while (len && *s == '/') {
        s++;
        len--;
    }
    while (len && s[len - 1] == '/')
        len--;
    const char *slash = len ? memchr(s, '/', len) : NULL;
    if (!slash) {
        yaml_doc_error(&c->doc, n->line, n->col, false, "%s must be in owner/repo format, got '%s'",
                       where, q);
        return false;
    }
    size_t olen = (size_t)(slash - s), nlen = len - olen - 1;
    const char *name = slash + 1;
    const char *why = NULL;
    if (memchr(name, '/', nlen))
        why = "owner/repo must contain exactly one '/'";
    else if (!ids_owner_valid(s, olen))
        why = "the owner must be 1-39 characters of A-Z, a-z, 0-9 and '-'";
    else if (!ids_repo_name_valid(name, nlen))
        why = "the name must be 1-100 characters of A-Z, a-z, 0-9, '.', '_' and '-' (and not '.' "
              "or '..')";
    if (why) {
        yaml_doc_error(&c->doc, n->line, n->col, false, "%s: invalid repo '%s': %s", where, q, why);
        return false;
    }
    memcpy(out, s, len); /* len <= 39 + 1 + 100 < CRCR_REPO_NAME_MAX */
    out[len] = '\0';
    return true;
}

/* Adds one oncall (trimmed `s[0..n)`, skipped when empty) to the list being built. */
static bool push_oncall(pctx *c, const char *where, const ynode *at, char ***list, size_t *count,
                        const char *s, size_t n)
{
    strip_ws(&s, &n);
    if (!n)
        return true;
    if (*count >= CRCR_ALLOWLIST_MAX_ONCALLS) {
        yaml_doc_error(&c->doc, at->line, at->col, true, "%s: more than %u oncalls", where,
                       CRCR_ALLOWLIST_MAX_ONCALLS);
        return false;
    }
    if (!*list) {
        *list = calloc(CRCR_ALLOWLIST_MAX_ONCALLS, sizeof(char *));
        if (!*list) {
            c->doc.nomem = true;
            return false;
        }
    }
    char *copy = strndup(s, n);
    if (!copy) {
        c->doc.nomem = true;
        return false;
    }
    (*list)[(*count)++] = copy;
    return true;
}

static void free_oncalls(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/*
 * Reads an oncalls value: null (none), a string split on ',', or a list of scalars. Each item is
 * trimmed and empty ones are dropped. On success *list (owned by the caller, NULL when empty)
 * and *count are set.
 */
static bool parse_oncalls(pctx *c, const char *where, const ynode *v, char ***list, size_t *count)
{
    *list = NULL;
    *count = 0;
    bool ok = true;
    if (!v || (v->type == YN_SCALAR && v->is_null))
        return true;
    if (v->type == YN_SCALAR) {
        const char *s = v->text, *end = v->text + v->len;
        while (ok && s <= end) {
            const char *comma = memchr(s, ',', (size_t)(end - s));
            const char *stop = comma ? comma : end;
            ok = push_oncall(c, where, v, list, count, s, (size_t)(stop - s));
            s = stop + 1;
        }
    } else if (v->type == YN_SEQ) {
        for (size_t i = v->first; ok && i != YN_NONE; i = node(c, i)->next) {
            const ynode *item = node(c, i);
            if (item->type != YN_SCALAR) {
                yaml_doc_error(&c->doc, item->line, item->col, false,
                               "%s: each oncall must be a string, got %s", where,
                               yaml_doc_type_name(item));
                ok = false;
            } else if (!item->is_null) {
                ok = push_oncall(c, where, item, list, count, item->text, item->len);
            }
        }
    } else {
        yaml_doc_error(&c->doc, v->line, v->col, false,
                       "%s: oncalls must be a string or a list, got %s", where,
                       yaml_doc_type_name(v));
        ok = false;
    }
    if (!ok) {
        free_oncalls(*list, *count);
        *list = NULL;
        *count = 0;
    }
    return ok;
}

/* Appends an entry; takes `oncalls` (also on failure). */
static bool add_entry(pctx *c, const char *repo, crcr_level level, const char *device,
                      char **oncalls, size_t n_oncalls, const ynode *at)
{
    allowlist *al = c->al;
    if (al->n == c->cap_entries) {
        size_t ncap = c->cap_entries ? c->cap_entries * 2 : 16;
        allowlist_entry *p = realloc(al->entries, ncap * sizeof(*p));
        if (!p) {
            free_oncalls(oncalls, n_oncalls);
            c->doc.nomem = true;
            return false;
        }
        al->entries = p;
        c->cap_entries = ncap;
    }
    char *copy = strdup(repo);
    if (!copy) {
        free_oncalls(oncalls, n_oncalls);
        c->doc.nomem = true;
        return false;
    }
    al->entries[al->n++] = (allowlist_entry){.repo = copy,
                                             .level = level,
                                             .device = device,
                                             .oncalls = (const char *const *)oncalls,
                                             .n_oncalls = n_oncalls,
                                             .line = at->line,
                                             .col = at->col};
    return true;
}

/* Counts one more repo in a level; false (with a problem recorded) past the limit. */
static bool count_repo(pctx *c, crcr_level level, size_t *count, const ynode *at)
{
    if (++*count > CRCR_ALLOWLIST_MAX_REPOS) {
        yaml_doc_error(&c->doc, at->line, at->col, true, "L%d has more than %u repos", (int)level,
                       CRCR_ALLOWLIST_MAX_REPOS);
        return false;
    }
    return true;
}

/* One `owner/repo: oncalls` mapping pair at `level` (L3: of `device`): an entry, else problems. */
static void take_repo_pair(pctx *c, const char *where, crcr_level level, const char *device,
                           const ynode *key, const ynode *val)
{
    if (key->type != YN_SCALAR || key->is_null) {
        yaml_doc_error(&c->doc, key->line, key->col, false,
                       "%s: the repo key must be a string, got %s", where, yaml_doc_type_name(key));
        return;
    }
    char repo[CRCR_REPO_NAME_MAX];
    char **oncalls;
    size_t n_oncalls;
    bool repo_ok = normalize_repo(c, where, key, repo);
    if (!parse_oncalls(c, where, val, &oncalls, &n_oncalls))
        return;
    if (repo_ok)
        add_entry(c, repo, level, device, oncalls, n_oncalls, key);
    else
        free_oncalls(oncalls, n_oncalls);
}

/* L1, L2, L4: a list of "owner/repo" strings or single-key {owner/repo: oncalls} mappings. */
static void parse_list_level(pctx *c, crcr_level level, const ynode *v)
{
    if (v->type != YN_SEQ) {
        yaml_doc_error(&c->doc, v->line, v->col, false, "L%d must be a list, got %s", (int)level,
                       yaml_doc_type_name(v));
        return;
    }
    size_t idx = 0, count = 0;
    for (size_t i = v->first; i != YN_NONE && !c->doc.nomem; i = node(c, i)->next, idx++) {
        const ynode *item = node(c, i);
        char where[64], repo[CRCR_REPO_NAME_MAX];
        snprintf(where, sizeof(where), "L%d[%zu]", (int)level, idx);
        if (!count_repo(c, level, &count, item))
            return;
        if (item->type == YN_SCALAR && !item->is_null) {
            if (normalize_repo(c, where, item, repo))
                add_entry(c, repo, level, NULL, NULL, 0, item);
        } else if (item->type == YN_MAP) {
            if (item->nchild != 2) {
                yaml_doc_error(&c->doc, item->line, item->col, false,
                               "%s: mapping must have exactly one repo key", where);
                continue;
            }
            const ynode *key = node(c, item->first);
            take_repo_pair(c, where, level, NULL, key, node(c, key->next));
        } else {
            yaml_doc_error(&c->doc, item->line, item->col, false,
                           "%s must be a string or mapping, got %s", where,
                           yaml_doc_type_name(item));
        }
    }
}

/* Remembers a device name; returns the owned copy entries point to, or NULL. */
static const char *add_device(pctx *c, const char *s, size_t n)
{
    allowlist *al = c->al;
    if (al->ndevices == c->cap_devices) {
        size_t ncap = c->cap_devices ? c->cap_devices * 2 : 8;
        char **p = realloc(al->devices, ncap * sizeof(*p));
        if (!p) {
            c->doc.nomem = true;
            return NULL;
        }
        al->devices = p;
        c->cap_devices = ncap;
    }
    char *copy = strndup(s, n);
    if (!copy) {
        c->doc.nomem = true;
        return NULL;
    }
    al->devices[al->ndevices++] = copy;
    return copy;
}

/* The text of an L3 device key, trimmed; empty for a null or a container. */
static void device_name(const ynode *key, const char **s, size_t *n)
{
    *s = key->text ? key->text : "";
    *n = key->type == YN_SCALAR && !key->is_null ? key->len : 0;
    strip_ws(s, n);
}

/* L3: {device: {owner/repo: oncalls}}. */
static void parse_l3(pctx *c, const ynode *v)
{
    if (v->type != YN_MAP) {
        yaml_doc_error(
            &c->doc, v->line, v->col, false,
            "L3 must be a device mapping (e.g. 'device:\\n  org/repo: [oncall]'), got %s",
            yaml_doc_type_name(v));
        return;
    }
    size_t count = 0;
    for (size_t k = v->first; k != YN_NONE && !c->doc.nomem; k = yaml_doc_next_key(&c->doc, k)) {
        const ynode *key = node(c, k);
        const ynode *val = node(c, key->next);
        const char *name;
        size_t nlen;
        device_name(key, &name, &nlen);
        if (key->type != YN_SCALAR) {
            yaml_doc_error(&c->doc, key->line, key->col, false,
                           "L3 device name must be a string, got %s", yaml_doc_type_name(key));
            continue;
        }
        if (!nlen) {
            yaml_doc_error(&c->doc, key->line, key->col, false, "L3 device name must not be empty");
            continue;
        }
        char q[YAML_DOC_QUOTE_SIZE];
        yaml_doc_quote(q, sizeof(q), name, nlen);
        bool printable = nlen <= ALLOWLIST_MAX_DEVICE_LEN;
        for (size_t i = 0; printable && i < nlen; i++)
            printable = (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
        if (!printable) {
            yaml_doc_error(
                &c->doc, key->line, key->col, false,
                "L3 device name '%s' must be at most %u characters without control characters", q,
                ALLOWLIST_MAX_DEVICE_LEN);
            continue;
        }
        /* Device names are part of a label, which GitHub matches exactly: compare exactly. */
        const ynode *dup = NULL;
        for (size_t j = v->first; j != k; j = yaml_doc_next_key(&c->doc, j)) {
            const ynode *o = node(c, j);
            const char *os;
            size_t on;
            device_name(o, &os, &on);
            if (on == nlen && memcmp(os, name, nlen) == 0) {
                dup = o;
                break;
            }
        }
        if (dup) {
            yaml_doc_error(&c->doc, key->line, key->col, false,
                           "duplicate L3 device '%s' (first at %u:%u)", q, dup->line, dup->col);
            continue;
        }
        if (val->type != YN_MAP) {
            yaml_doc_error(&c->doc, val->line, val->col, false,
                           "L3.%s must be a repo mapping, got %s", q, yaml_doc_type_name(val));
            continue;
        }
        const char *device = add_device(c, name, nlen);
        if (!device)
            return;
        size_t idx = 0;
        for (size_t r = val->first; r != YN_NONE && !c->doc.nomem;
             r = yaml_doc_next_key(&c->doc, r), idx++) {
            const ynode *rk = node(c, r);
            char where[YAML_DOC_QUOTE_SIZE + 32];
            snprintf(where, sizeof(where), "L3.%s[%zu]", q, idx);
            if (!count_repo(c, CRCR_LEVEL_L3, &count, rk))
                return;
            take_repo_pair(c, where, CRCR_LEVEL_L3, device, rk, node(c, rk->next));
        }
    }
}

static int cmp_ci(const void *a, const void *b)
{
    const allowlist_entry *x = *(const allowlist_entry *const *)a;
    const allowlist_entry *y = *(const allowlist_entry *const *)b;
    int r = strcasecmp(x->repo, y->repo);
    if (r)
        return r;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->col < y->col ? -1 : (x->col > y->col);
}

static int cmp_name(const void *a, const void *b)
{
    const allowlist_entry *x = *(const allowlist_entry *const *)a;
    const allowlist_entry *y = *(const allowlist_entry *const *)b;
    int r = strcmp(x->repo, y->repo);
    if (r)
        return r;
    return x < y ? -1 : (x > y);
}

/* Builds both indexes and reports repos listed twice (case-insensitively, across levels). */
static void build_indexes(pctx *c)
{
    allowlist *al = c->al;
    if (!al->n)
        return;
    al->by_ci = malloc(al->n * sizeof(*al->by_ci));
    al->by_name = malloc(al->n * sizeof(*al->by_name));
    if (!al->by_ci || !al->by_name) {
        c->doc.nomem = true;
        return;
    }
    for (size_t i = 0; i < al->n; i++)
        al->by_ci[i] = al->by_name[i] = &al->entries[i];
    qsort(al->by_ci, al->n, sizeof(*al->by_ci), cmp_ci);
    qsort(al->by_name, al->n, sizeof(*al->by_name), cmp_name);
    const allowlist_entry *first = al->by_ci[0];
    for (size_t i = 1; i < al->n; i++) {
        const allowlist_entry *e = al->by_ci[i];
        if (strcasecmp(e->repo, first->repo) == 0)
            yaml_doc_error(&c->doc, e->line, e->col, false, "duplicate repo '%s' (first at %u:%u)",
                           e->repo, first->line, first->col);
        else
            first = e;
    }
}

static void destroy(allowlist *al)
{
    if (!al)
        return;
    for (size_t i = 0; i < al->n; i++) {
        free((char *)al->entries[i].repo);
        free_oncalls((char **)al->entries[i].oncalls, al->entries[i].n_oncalls);
    }
    free(al->entries);
    for (size_t i = 0; i < al->ndevices; i++)
        free(al->devices[i]);
    free(al->devices);
    free(al->by_ci);
    free(al->by_name);
    free(al);
}

/* Records an error and returns true when `key` is not one of L1..L4. A typo such as `l1:` or
 * `L5:` must not turn a list into "0 repos": every top-level key is a level. */
static bool unknown_key(pctx *c, const ynode *key)
{
    if (key->type != YN_SCALAR) {
        yaml_doc_error(&c->doc, key->line, key->col, false,
                       "a top-level key must be L1, L2, L3 or L4, got a %s",
                       yaml_doc_type_name(key));
        return true;
    }
    if (key->len == 2 && key->text[0] == 'L' && key->text[1] >= '1' && key->text[1] <= '4')
        return false;
    char q[YAML_DOC_QUOTE_SIZE];
    yaml_doc_quote(q, sizeof(q), key->text, key->len);
    if (key->len == 2 && key->text[0] == 'l' && key->text[1] >= '1' && key->text[1] <= '4')
        yaml_doc_error(&c->doc, key->line, key->col, false,
                       "unknown top-level key '%s': did you mean 'L%c'? (keys are case-sensitive)",
                       q, key->text[1]);
    else
        yaml_doc_error(&c->doc, key->line, key->col, false,
                       "unknown top-level key '%s' (the keys are L1, L2, L3 and L4)", q);
    return true;
}

/* Walks the root mapping: each of L1..L4 once, in level order. */
static void validate(pctx *c)
{
    if (c->doc.root == YN_NONE)
        return; /* no document, or only comments: an empty allowlist */
    const ynode *root = node(c, c->doc.root);
    if (root->type == YN_SCALAR && root->is_null)
        return; /* an empty document */
    if (root->type != YN_MAP) {
        yaml_doc_error(&c->doc, root->line, root->col, false,
                       "expected a mapping with L1-L4 keys, got %s", yaml_doc_type_name(root));
        return;
    }
    const ynode *levels[5] = {NULL};
    const ynode *level_keys[5] = {NULL};
    for (size_t k = root->first; k != YN_NONE; k = yaml_doc_next_key(&c->doc, k)) {
        const ynode *key = node(c, k);
        static const char *const names[] = {NULL, "L1", "L2", "L3", "L4"};
        if (unknown_key(c, key))
            continue;
        for (int l = 1; l <= 4; l++) {
            if (strcmp(key->text, names[l]) != 0)
                continue;
            if (level_keys[l]) {
                yaml_doc_error(&c->doc, key->line, key->col, false,
                               "duplicate key '%s' (first at %u:%u)", names[l], level_keys[l]->line,
                               level_keys[l]->col);
            } else {
                level_keys[l] = key;
                levels[l] = node(c, key->next);
            }
        }
    }
    for (int l = 1; l <= 4 && !c->doc.nomem; l++) {
        const ynode *v = levels[l];
        if (!v || (v->type == YN_SCALAR && v->is_null))
            continue;
        if (l == 3)
            parse_l3(c, v);
        else
            parse_list_level(c, (crcr_level)l, v);
    }
}

crcr_err allowlist_parse(const char *yaml, size_t len, allowlist **out, buf_t *errors)
{
    *out = NULL;
    pctx c = {.al = NULL};
    yaml_doc_init(&c.doc, yaml, len);
    if (len > CRCR_ALLOWLIST_MAX_BYTES) {
        yaml_doc_error(&c.doc, 1, 1, true, "the allowlist is larger than the limit of %u bytes",
                       CRCR_ALLOWLIST_MAX_BYTES);
    } else if (!yaml && len) {
        yaml_doc_error(&c.doc, 1, 1, false, "no input");
    } else {
        c.al = calloc(1, sizeof(*c.al));
        if (!c.al) {
            c.doc.nomem = true;
        } else {
            atomic_init(&c.al->refs, 1);
            if (yaml_doc_build(&c.doc))
                validate(&c);
            if (!c.doc.nerrs && !c.doc.nomem)
                build_indexes(&c);
        }
    }

    crcr_err rc = yaml_doc_finish(&c.doc, errors);
    if (rc) {
        destroy(c.al);
        return rc;
    }
    *out = c.al;
    return CRCR_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Lifetime and queries. */

allowlist *allowlist_ref(allowlist *al)
{
    if (al)
        atomic_fetch_add_explicit(&al->refs, 1, memory_order_relaxed);
    return al;
}

void allowlist_free(allowlist *al)
{
    if (al && atomic_fetch_sub_explicit(&al->refs, 1, memory_order_acq_rel) == 1)
        destroy(al);
}

const char *crcr_level_name(crcr_level level)
{
    switch (level) {
    case CRCR_LEVEL_L1:
        return "L1";
    case CRCR_LEVEL_L2:
        return "L2";
    case CRCR_LEVEL_L3:
        return "L3";
    case CRCR_LEVEL_L4:
        return "L4";
    default:
        return "none";
    }
}

size_t allowlist_device_count(const allowlist *al)
{
    return al ? al->ndevices : 0;
}

size_t allowlist_count(const allowlist *al)
{
    return al ? al->n : 0;
}

const allowlist_entry *allowlist_at(const allowlist *al, size_t i)
{
    return al && i < al->n ? &al->entries[i] : NULL;
}

const allowlist_entry *allowlist_find(const allowlist *al, const char *repo)
{
    if (!al || !repo || !al->n)
        return NULL;
    size_t lo = 0, hi = al->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcasecmp(repo, al->by_ci[mid]->repo);
        if (r == 0)
            return al->by_ci[mid];
        if (r < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

crcr_level allowlist_level(const allowlist *al, const char *repo)
{
    const allowlist_entry *e = allowlist_find(al, repo);
    return e ? e->level : CRCR_LEVEL_NONE;
}

size_t allowlist_repos_at_or_above(const allowlist *al, crcr_level min, const char **out,
                                   size_t max)
{
    size_t total = 0;
    for (size_t i = 0; al && i < al->n; i++) {
        const allowlist_entry *e = al->by_name[i];
        if (e->level < min)
            continue;
        if (out && total < max)
            out[total] = e->repo;
        total++;
    }
    return total;
}

size_t allowlist_device_repos(const allowlist *al, const char *device, const char **out, size_t max)
{
    size_t total = 0;
    for (size_t i = 0; al && device && i < al->n; i++) {
        const allowlist_entry *e = &al->entries[i];
        if (!e->device || strcmp(e->device, device) != 0)
            continue;
        if (out && total < max)
            out[total] = e->repo;
        total++;
    }
    return total;
}

const char *allowlist_repo_device(const allowlist *al, const char *repo)
{
    const allowlist_entry *e = allowlist_find(al, repo);
    return e ? e->device : NULL;
}

bool allowlist_needs_check_run(const allowlist *al, const char *repo, const char *const *labels,
                               size_t n_labels)
{
    static const char prefix[] = "ciflow/crcr/";
    const allowlist_entry *e = allowlist_find(al, repo);
    if (!e)
        return false;
    if (e->level == CRCR_LEVEL_L4)
        return true;
    if (e->level != CRCR_LEVEL_L3 || !e->device || !labels)
        return false;
    size_t plen = sizeof(prefix) - 1;
    for (size_t i = 0; i < n_labels; i++) {
        const char *l = labels[i];
        if (l && strncmp(l, prefix, plen) == 0 && strcmp(l + plen, e->device) == 0)
            return true;
    }
    return false;
}
