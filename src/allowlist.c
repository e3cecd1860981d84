/*
 * allowlist.c - parses the L1..L4 allowlist YAML and answers level queries; see allowlist.h.
 *
 * Parsing happens in three passes, each bounded:
 *   1. libyaml's event API feeds a small tree builder (below). It refuses anchors and aliases at
 *      the event that declares them, a second document, nesting deeper than
 *      CRCR_ALLOWLIST_MAX_DEPTH and more than CRCR_ALLOWLIST_MAX_NODES nodes. The builder is
 *      hand-written rather than libyaml's yaml_parser_load() because the document loader resolves
 *      aliases into shared nodes (a naive walk of a "billion laughs" document is exponential)
 *      and has neither a depth nor a node limit; refusing at the event stops such input at its
 *      first anchor, in microseconds.
 *   2. A validator walks the tree with the upstream rules (utils/allowlist.py) plus crcr's
 *      stricter ones (GitHub owner/repo syntax, case-insensitive duplicates, limits per level
 *      and per repo), collecting every problem it finds with its LINE:COL.
 *   3. Duplicates are found by sorting, so a large list stays O(n log n).
 * Nothing is published until all three passes are clean: a malformed file never half-loads.
 */
#include "allowlist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#include "ids.h"
#include "json.h"
#include "limits.h"

/* Problems recorded per parse; more would only bury the first ones. */
#define ALLOWLIST_MAX_ERRORS 50u
/* Longest L3 device name (it becomes the label "ciflow/crcr/<device>"). */
#define ALLOWLIST_MAX_DEVICE_LEN 100u
/* Longest value quoted back in a message. */
#define ALLOWLIST_QUOTE_MAX 80u

#define NO_NODE ((size_t)-1)

/* ---------------------------------------------------------------------------------------- */
/* The tree built from libyaml events. */

typedef enum { YN_SCALAR, YN_SEQ, YN_MAP } yn_type;

typedef struct ynode {
    yn_type type;
    unsigned line, col; /* 1-based */
    char *text;         /* scalar value (owned, NUL-terminated); NULL for containers */
    size_t len;
    bool is_null;             /* plain "", "~", "null", or tagged !!null */
    size_t first, last, next; /* children (maps: key, value, key, value ...) and sibling */
    size_t nchild;
} ynode;

typedef struct perr {
    unsigned line, col;
    size_t seq;
    char *msg; /* owned */
} perr;

/* Everything one parse owns until it either publishes an allowlist or throws it away. */
typedef struct pctx {
    const char *yaml;
    size_t yaml_len;
    ynode *nodes;
    size_t nnodes, capnodes;
    size_t root;
    perr *errs;
    size_t nerrs;
    bool stopped;   /* ALLOWLIST_MAX_ERRORS reached */
    bool too_large; /* a limit was passed */
    bool nomem;
    allowlist *al; /* being built */
    size_t cap_entries, cap_devices;
} pctx;

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
/* Errors. */

/* Records "LINE:COL: message". `limit` marks a size limit (the parse then returns
 * CRCR_E_TOO_LARGE). The message is copied. */
__attribute__((format(printf, 5, 6))) static void add_err(pctx *c, unsigned line, unsigned col,
                                                          bool limit, const char *fmt, ...)
{
    if (limit)
        c->too_large = true;
    if (c->stopped)
        return;
    char msg[768];
    if (c->nerrs + 1 >= ALLOWLIST_MAX_ERRORS) {
        snprintf(msg, sizeof(msg), "too many problems; stopping after %u",
                 ALLOWLIST_MAX_ERRORS - 1);
        c->stopped = true;
    } else {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    if (!c->errs) {
        c->errs = calloc(ALLOWLIST_MAX_ERRORS, sizeof(*c->errs));
        if (!c->errs) {
            c->nomem = true;
            return;
        }
    }
    char *copy = strdup(msg);
    if (!copy) {
        c->nomem = true;
        return;
    }
    c->errs[c->nerrs] = (perr){line, col, c->nerrs, copy};
    c->nerrs++;
}

static int perr_cmp(const void *a, const void *b)
{
    const perr *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* Writes `s[0..n)` into `out` as a printable, bounded quote body: control bytes become \xNN and
 * long values end in "...". */
static void quote(char *out, size_t outsz, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i >= ALLOWLIST_QUOTE_MAX || o + 8 >= outsz) {
            /* Never cut a UTF-8 character in half (bytes >= 0x80 were copied one to one). */
            while (i > 0 && o > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) {
                i--;
                o--;
            }
            if (o + 4 <= outsz) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (ch < 0x20 || ch == 0x7f || ch == '\'' || ch == '\\') {
            o += (size_t)snprintf(out + o, outsz - o, "\\x%02x", ch);
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
}

static const char *type_name(const ynode *n)
{
    if (!n)
        return "nothing";
    switch (n->type) {
    case YN_SEQ:
        return "list";
    case YN_MAP:
        return "mapping";
    case YN_SCALAR:
        return n->is_null ? "null" : "string";
    }
    return "?";
}

/* ---------------------------------------------------------------------------------------- */
/* Pass 1: events to tree. */

static bool scalar_is_null(const yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag;
    if (tag && strcmp(tag, YAML_NULL_TAG) == 0)
        return true;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || (tag && strcmp(tag, "!") != 0))
        return false;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    const char *v = (const char *)ev->data.scalar.value;
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
        if (strcmp(v, nulls[i]) == 0)
            return true;
    return false;
}

/* Appends a node as the next child of `parent` (or as the root). Returns its index or NO_NODE
 * after recording why. */
static size_t new_node(pctx *c, yn_type type, const yaml_mark_t *mark, size_t parent)
{
    unsigned line = (unsigned)mark->line + 1, col = (unsigned)mark->column + 1;
    if (c->nnodes >= CRCR_ALLOWLIST_MAX_NODES) {
        add_err(c, line, col, true, "more than %u YAML nodes", CRCR_ALLOWLIST_MAX_NODES);
        return NO_NODE;
    }
    if (c->nnodes == c->capnodes) {
        size_t ncap = c->capnodes ? c->capnodes * 2 : 64;
        ynode *p = realloc(c->nodes, ncap * sizeof(*p));
        if (!p) {
            c->nomem = true;
            return NO_NODE;
        }
        c->nodes = p;
        c->capnodes = ncap;
    }
    size_t id = c->nnodes++;
    c->nodes[id] = (ynode){
        .type = type, .line = line, .col = col, .first = NO_NODE, .last = NO_NODE, .next = NO_NODE};
    if (parent == NO_NODE) {
        c->root = id;
    } else {
        ynode *p = &c->nodes[parent];
        if (p->last == NO_NODE)
            p->first = id;
        else
            c->nodes[p->last].next = id;
        p->last = id;
        p->nchild++;
    }
    return id;
}

/* Computes 1-based line:col of byte `off` (libyaml reader errors give only an offset). */
static void offset_pos(const pctx *c, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, k = 1;
    for (size_t i = 0; i < off && i < c->yaml_len; i++) {
        if (c->yaml[i] == '\n') {
            l++;
            k = 1;
        } else {
            k++;
        }
    }
    *line = l;
    *col = k;
}

static void syntax_err(pctx *c, const yaml_parser_t *p)
{
    unsigned line, col;
    if (p->error == YAML_READER_ERROR) {
        offset_pos(c, p->problem_offset, &line, &col);
    } else {
        line = (unsigned)p->problem_mark.line + 1;
        col = (unsigned)p->problem_mark.column + 1;
    }
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_MEMORY_ERROR) {
        c->nomem = true;
        return;
    }
    if (p->context)
        add_err(c, line, col, false, "YAML syntax error: %s %s (started at %u:%u)", p->context,
                problem, (unsigned)p->context_mark.line + 1, (unsigned)p->context_mark.column + 1);
    else
        add_err(c, line, col, false, "YAML syntax error: %s", problem);
}

/* Runs libyaml over the input and builds c->nodes. Returns false after recording a problem. */
static bool build_tree(pctx *c)
{
    yaml_parser_t p;
    yaml_event_t ev;
    size_t stack[CRCR_ALLOWLIST_MAX_DEPTH];
    size_t depth = 0;
    unsigned docs = 0;
    bool ok = true, done = false;

    if (!yaml_parser_initialize(&p)) {
        c->nomem = true;
        return false;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)c->yaml, c->yaml_len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);

    while (ok && !done) {
        if (!yaml_parser_parse(&p, &ev)) {
            syntax_err(c, &p);
            ok = false;
            break;
        }
        unsigned line = (unsigned)ev.start_mark.line + 1, col = (unsigned)ev.start_mark.column + 1;
        size_t parent = depth ? stack[depth - 1] : NO_NODE;
        const yaml_char_t *anchor = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                add_err(c, line, col, false,
                        "only one YAML document is allowed (found a second one here)");
                ok = false;
            }
            break;
        case YAML_ALIAS_EVENT:
            add_err(c, line, col, false, "anchors and aliases are not allowed (alias '*%s')",
                    (const char *)ev.data.alias.anchor);
            ok = false;
            break;
        case YAML_SCALAR_EVENT: {
            anchor = ev.data.scalar.anchor;
            if (anchor)
                break;
            if (memchr(ev.data.scalar.value, '\0', ev.data.scalar.length)) {
                add_err(c, line, col, false, "NUL characters are not allowed");
                ok = false;
                break;
            }
            size_t id = new_node(c, YN_SCALAR, &ev.start_mark, parent);
            if (id == NO_NODE) {
                ok = false;
                break;
            }
            ynode *n = &c->nodes[id];
            n->len = ev.data.scalar.length;
            n->is_null = scalar_is_null(&ev);
            n->text = malloc(n->len + 1);
            if (!n->text) {
                c->nomem = true;
                ok = false;
                break;
            }
            memcpy(n->text, ev.data.scalar.value, n->len);
            n->text[n->len] = '\0';
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
            anchor = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor
                                                          : ev.data.mapping_start.anchor;
            if (anchor)
                break;
            if (depth >= CRCR_ALLOWLIST_MAX_DEPTH) {
                add_err(c, line, col, true, "nesting deeper than %u levels",
                        CRCR_ALLOWLIST_MAX_DEPTH);
                ok = false;
                break;
            }
            size_t id = new_node(c, ev.type == YAML_SEQUENCE_START_EVENT ? YN_SEQ : YN_MAP,
                                 &ev.start_mark, parent);
            if (id == NO_NODE) {
                ok = false;
                break;
            }
            stack[depth++] = id;
            break;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth)
                depth--;
            break;
        default: /* stream start, document end, no-event */
            break;
        }
        if (anchor) {
            add_err(c, line, col, false, "anchors and aliases are not allowed (anchor '&%s')",
                    (const char *)anchor);
            ok = false;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return ok && !c->nomem;
}

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
    char q[ALLOWLIST_QUOTE_MAX * 4 + 8];
    quote(q, sizeof(q), n->text, n->len);

    strip_ws(&s, &len);
    while (len && *s == '/') {
        s++;
        len--;
    }
    while (len && s[len - 1] == '/')
        len--;
    const char *slash = len ? memchr(s, '/', len) : NULL;
    if (!slash) {
        add_err(c, n->line, n->col, false, "%s must be in owner/repo format, got '%s'", where, q);
        return false;
    }
    size_t olen = (size_t)(slash - s), nlen = len - olen - 1;
    const char *name = slash + 1;
    if (memchr(name, '/', nlen)) {
        add_err(c, n->line, n->col, false,
                "%s: invalid repo '%s': owner/repo must contain exactly one '/'", where, q);
        return false;
    }
    if (!ids_owner_valid(s, olen)) {
        add_err(c, n->line, n->col, false,
                "%s: invalid repo '%s': the owner must be 1-39 characters of A-Z, a-z, 0-9 and "
                "'-'",
                where, q);
        return false;
    }
    if (!ids_repo_name_valid(name, nlen)) {
        add_err(c, n->line, n->col, false,
                "%s: invalid repo '%s': the name must be 1-100 characters of A-Z, a-z, 0-9, '.', "
                "'_' and '-' (and not '.' or '..')",
                where, q);
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
        add_err(c, at->line, at->col, true, "%s: more than %u oncalls", where,
                CRCR_ALLOWLIST_MAX_ONCALLS);
        return false;
    }
    if (!*list) {
        *list = calloc(CRCR_ALLOWLIST_MAX_ONCALLS, sizeof(char *));
        if (!*list) {
            c->nomem = true;
            return false;
        }
    }
    char *copy = strndup(s, n);
    if (!copy) {
        c->nomem = true;
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
        for (size_t i = v->first; ok && i != NO_NODE; i = c->nodes[i].next) {
            const ynode *item = &c->nodes[i];
            if (item->type != YN_SCALAR) {
                add_err(c, item->line, item->col, false, "%s: each oncall must be a string, got %s",
                        where, type_name(item));
                ok = false;
            } else if (!item->is_null) {
                ok = push_oncall(c, where, item, list, count, item->text, item->len);
            }
        }
    } else {
        add_err(c, v->line, v->col, false, "%s: oncalls must be a string or a list, got %s", where,
                type_name(v));
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
            c->nomem = true;
            return false;
        }
        al->entries = p;
        c->cap_entries = ncap;
    }
    char *copy = strdup(repo);
    if (!copy) {
        free_oncalls(oncalls, n_oncalls);
        c->nomem = true;
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
        add_err(c, at->line, at->col, true, "L%d has more than %u repos", (int)level,
                CRCR_ALLOWLIST_MAX_REPOS);
        return false;
    }
    return true;
}

/* L1, L2, L4: a list of "owner/repo" strings or single-key {owner/repo: oncalls} mappings. */
static void parse_list_level(pctx *c, crcr_level level, const ynode *v)
{
    if (v->type != YN_SEQ) {
        add_err(c, v->line, v->col, false, "L%d must be a list, got %s", (int)level, type_name(v));
        return;
    }
    size_t idx = 0, count = 0;
    for (size_t i = v->first; i != NO_NODE && !c->nomem; i = c->nodes[i].next, idx++) {
        const ynode *item = &c->nodes[i];
        char where[64], repo[CRCR_REPO_NAME_MAX];
        snprintf(where, sizeof(where), "L%d[%zu]", (int)level, idx);
        if (!count_repo(c, level, &count, item))
            return;
        if (item->type == YN_SCALAR && !item->is_null) {
            if (normalize_repo(c, where, item, repo))
                add_entry(c, repo, level, NULL, NULL, 0, item);
        } else if (item->type == YN_MAP) {
            if (item->nchild != 2) {
                add_err(c, item->line, item->col, false,
                        "%s: mapping must have exactly one repo key", where);
                continue;
            }
            const ynode *key = &c->nodes[item->first];
            const ynode *val = &c->nodes[key->next];
            if (key->type != YN_SCALAR || key->is_null) {
                add_err(c, key->line, key->col, false, "%s: the repo key must be a string, got %s",
                        where, type_name(key));
                continue;
            }
            char **oncalls;
            size_t n_oncalls;
            bool repo_ok = normalize_repo(c, where, key, repo);
            if (parse_oncalls(c, where, val, &oncalls, &n_oncalls)) {
                if (repo_ok)
                    add_entry(c, repo, level, NULL, oncalls, n_oncalls, key);
                else
                    free_oncalls(oncalls, n_oncalls);
            }
        } else {
            add_err(c, item->line, item->col, false, "%s must be a string or mapping, got %s",
                    where, type_name(item));
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
            c->nomem = true;
            return NULL;
        }
        al->devices = p;
        c->cap_devices = ncap;
    }
    char *copy = strndup(s, n);
    if (!copy) {
        c->nomem = true;
        return NULL;
    }
    al->devices[al->ndevices++] = copy;
    return copy;
}

/* L3: {device: {owner/repo: oncalls}}. */
static void parse_l3(pctx *c, const ynode *v)
{
    if (v->type != YN_MAP) {
        add_err(c, v->line, v->col, false,
                "L3 must be a device mapping (e.g. 'device:\\n  org/repo: [oncall]'), got %s",
                type_name(v));
        return;
    }
    size_t count = 0;
    for (size_t k = v->first; k != NO_NODE && !c->nomem; k = c->nodes[c->nodes[k].next].next) {
        const ynode *key = &c->nodes[k];
        const ynode *val = &c->nodes[key->next];
        const char *name = key->text ? key->text : "";
        size_t nlen = key->type == YN_SCALAR && !key->is_null ? key->len : 0;
        strip_ws(&name, &nlen);
        if (key->type != YN_SCALAR) {
            add_err(c, key->line, key->col, false, "L3 device name must be a string, got %s",
                    type_name(key));
            continue;
        }
        if (!nlen) {
            add_err(c, key->line, key->col, false, "L3 device name must not be empty");
            continue;
        }
        char q[ALLOWLIST_QUOTE_MAX * 4 + 8];
        quote(q, sizeof(q), name, nlen);
        bool printable = nlen <= ALLOWLIST_MAX_DEVICE_LEN;
        for (size_t i = 0; printable && i < nlen; i++)
            printable = (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
        if (!printable) {
            add_err(c, key->line, key->col, false,
                    "L3 device name '%s' must be at most %u characters without control characters",
                    q, ALLOWLIST_MAX_DEVICE_LEN);
            continue;
        }
        /* Device names are part of a label, which GitHub matches exactly: compare exactly. */
        const ynode *dup = NULL;
        for (size_t j = v->first; j != k; j = c->nodes[c->nodes[j].next].next) {
            const ynode *o = &c->nodes[j];
            const char *os = o->text ? o->text : "";
            size_t on = o->type == YN_SCALAR && !o->is_null ? o->len : 0;
            strip_ws(&os, &on);
            if (on == nlen && memcmp(os, name, nlen) == 0) {
                dup = o;
                break;
            }
        }
        if (dup) {
            add_err(c, key->line, key->col, false, "duplicate L3 device '%s' (first at %u:%u)", q,
                    dup->line, dup->col);
            continue;
        }
        if (val->type != YN_MAP) {
            add_err(c, val->line, val->col, false, "L3.%s must be a repo mapping, got %s", q,
                    type_name(val));
            continue;
        }
        const char *device = add_device(c, name, nlen);
        if (!device)
            return;
        size_t idx = 0;
        for (size_t r = val->first; r != NO_NODE && !c->nomem;
             r = c->nodes[c->nodes[r].next].next, idx++) {
            const ynode *rk = &c->nodes[r];
            const ynode *rv = &c->nodes[rk->next];
            char where[ALLOWLIST_QUOTE_MAX * 4 + 40], repo[CRCR_REPO_NAME_MAX];
            snprintf(where, sizeof(where), "L3.%s[%zu]", q, idx);
            if (!count_repo(c, CRCR_LEVEL_L3, &count, rk))
                return;
            if (rk->type != YN_SCALAR || rk->is_null) {
                add_err(c, rk->line, rk->col, false, "%s: the repo key must be a string, got %s",
                        where, type_name(rk));
                continue;
            }
            char **oncalls;
            size_t n_oncalls;
            bool repo_ok = normalize_repo(c, where, rk, repo);
            if (parse_oncalls(c, where, rv, &oncalls, &n_oncalls)) {
                if (repo_ok)
                    add_entry(c, repo, CRCR_LEVEL_L3, device, oncalls, n_oncalls, rk);
                else
                    free_oncalls(oncalls, n_oncalls);
            }
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
        c->nomem = true;
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
            add_err(c, e->line, e->col, false, "duplicate repo '%s' (first at %u:%u)", e->repo,
                    first->line, first->col);
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
        add_err(c, key->line, key->col, false, "a top-level key must be L1, L2, L3 or L4, got a %s",
                type_name(key));
        return true;
    }
    if (key->len == 2 && key->text[0] == 'L' && key->text[1] >= '1' && key->text[1] <= '4')
        return false;
    char q[ALLOWLIST_QUOTE_MAX * 4 + 8];
    quote(q, sizeof(q), key->text, key->len);
    if (key->len == 2 && key->text[0] == 'l' && key->text[1] >= '1' && key->text[1] <= '4')
        add_err(c, key->line, key->col, false,
                "unknown top-level key '%s': did you mean 'L%c'? (keys are case-sensitive)", q,
                key->text[1]);
    else
        add_err(c, key->line, key->col, false,
                "unknown top-level key '%s' (the keys are L1, L2, L3 and L4)", q);
    return true;
}

/* Walks the root mapping: each of L1..L4 once, in level order. */
static void validate(pctx *c)
{
    if (c->root == NO_NODE)
        return; /* no document, or only comments: an empty allowlist */
    const ynode *root = &c->nodes[c->root];
    if (root->type == YN_SCALAR && root->is_null)
        return; /* an empty document */
    if (root->type != YN_MAP) {
        add_err(c, root->line, root->col, false, "expected a mapping with L1-L4 keys, got %s",
                type_name(root));
        return;
    }
    const ynode *levels[5] = {NULL};
    const ynode *level_keys[5] = {NULL};
    for (size_t k = root->first; k != NO_NODE; k = c->nodes[c->nodes[k].next].next) {
        const ynode *key = &c->nodes[k];
        static const char *const names[] = {NULL, "L1", "L2", "L3", "L4"};
        if (unknown_key(c, key))
            continue;
        for (int l = 1; l <= 4; l++) {
            if (strcmp(key->text, names[l]) != 0)
                continue;
            if (level_keys[l]) {
                add_err(c, key->line, key->col, false, "duplicate key '%s' (first at %u:%u)",
                        names[l], level_keys[l]->line, level_keys[l]->col);
            } else {
                level_keys[l] = key;
                levels[l] = &c->nodes[key->next];
            }
        }
    }
    for (int l = 1; l <= 4 && !c->nomem; l++) {
        const ynode *v = levels[l];
        if (!v || (v->type == YN_SCALAR && v->is_null))
            continue;
        if (l == 3)
            parse_l3(c, v);
        else
            parse_list_level(c, (crcr_level)l, v);
    }
}

/* Frees the tree and the problems of a parse, writing the problems to `errors` (may be NULL) as
 * "LINE:COL: message" lines in input order. Returns the parse's outcome. */
static crcr_err finish(pctx *c, buf_t *errors)
{
    for (size_t i = 0; i < c->nnodes; i++)
        free(c->nodes[i].text);
    free(c->nodes);
    c->nodes = NULL;
    c->nnodes = 0;

    crcr_err rc = CRCR_OK;
    if (c->nomem)
        rc = CRCR_E_NOMEM;
    else if (c->nerrs)
        rc = c->too_large ? CRCR_E_TOO_LARGE : CRCR_E_INVALID;
    if (c->nerrs) {
        qsort(c->errs, c->nerrs, sizeof(*c->errs), perr_cmp);
        for (size_t i = 0; i < c->nerrs; i++) {
            if (errors)
                (void)buf_printf(errors, "%u:%u: %s\n", c->errs[i].line, c->errs[i].col,
                                 c->errs[i].msg);
            free(c->errs[i].msg);
        }
    } else if (c->nomem && errors) {
        (void)buf_puts(errors, "1:1: out of memory\n");
    }
    free(c->errs);
    c->errs = NULL;
    c->nerrs = 0;
    return rc;
}

crcr_err allowlist_parse(const char *yaml, size_t len, allowlist **out, buf_t *errors)
{
    *out = NULL;
    pctx c = {.yaml = yaml ? yaml : "", .yaml_len = yaml ? len : 0, .root = NO_NODE};
    if (len > CRCR_ALLOWLIST_MAX_BYTES) {
        add_err(&c, 1, 1, true, "the allowlist is larger than the limit of %u bytes",
                CRCR_ALLOWLIST_MAX_BYTES);
    } else if (!yaml && len) {
        add_err(&c, 1, 1, false, "no input");
    } else {
        c.al = calloc(1, sizeof(*c.al));
        if (!c.al) {
            c.nomem = true;
        } else {
            atomic_init(&c.al->refs, 1);
            if (build_tree(&c))
                validate(&c);
            if (!c.nerrs && !c.nomem)
                build_indexes(&c);
        }
    }

    crcr_err rc = finish(&c, errors);
    if (rc) {
        destroy(c.al);
        return rc;
    }
    *out = c.al;
    return CRCR_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The same reader for other YAML documents (allowlist_yaml_to_jv). */

/* Builds the JSON value of node `id` (recursion bounded by CRCR_ALLOWLIST_MAX_DEPTH). Returns a
 * new reference, or NULL after recording why. */
static jv *node_to_jv(pctx *c, size_t id)
{
    const ynode *n = &c->nodes[id];
    if (n->type == YN_SCALAR) {
        jv *s = n->is_null ? jv_new_null() : jv_new_strn(n->text, n->len);
        if (!s)
            c->nomem = true;
        return s;
    }
    jv *out = n->type == YN_SEQ ? jv_new_arr() : jv_new_obj();
    if (!out) {
        c->nomem = true;
        return NULL;
    }
    bool ok = true;
    for (size_t k = n->first; k != NO_NODE && ok; k = c->nodes[k].next) {
        if (n->type == YN_SEQ) {
            jv *e = node_to_jv(c, k);
            ok = e && jv_push(out, e) == CRCR_OK;
            continue;
        }
        const ynode *key = &c->nodes[k];
        size_t vid = key->next; /* libyaml pairs every key with a value node */
        if (vid == NO_NODE)
            break;
        k = vid;
        if (key->type != YN_SCALAR || key->is_null) {
            add_err(c, key->line, key->col, false, "a mapping key must be a string, got %s",
                    type_name(key));
            ok = false;
        } else if (jv_get(out, key->text)) {
            char q[ALLOWLIST_QUOTE_MAX * 4 + 8];
            quote(q, sizeof(q), key->text, key->len);
            add_err(c, key->line, key->col, false, "duplicate key '%s'", q);
            ok = false;
        } else {
            jv *e = node_to_jv(c, vid);
            ok = e && jv_set(out, key->text, e) == CRCR_OK;
        }
    }
    if (!ok) {
        if (!c->nerrs)
            c->nomem = true; /* a failed push or set */
        jv_free(out);
        return NULL;
    }
    return out;
}

crcr_err allowlist_yaml_to_jv(const char *yaml, size_t len, size_t max_bytes, jv **out,
                              buf_t *errors)
{
    *out = NULL;
    pctx c = {.yaml = yaml ? yaml : "", .yaml_len = yaml ? len : 0, .root = NO_NODE};
    jv *doc = NULL;
    if (len > max_bytes)
        add_err(&c, 1, 1, true, "the document is larger than the limit of %zu bytes", max_bytes);
    else if (!yaml && len)
        add_err(&c, 1, 1, false, "no input");
    else if (build_tree(&c))
        doc = c.root == NO_NODE ? jv_new_null() : node_to_jv(&c, c.root);
    if (!doc && !c.nerrs)
        c.nomem = true;
    crcr_err rc = finish(&c, errors);
    if (rc) {
        jv_free(doc);
        return rc;
    }
    *out = doc;
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
