/*
 * yaml_doc.c - the bounded YAML reader; see yaml_doc.h.
 *
 * libyaml's event API feeds a small tree builder. It refuses anchors and aliases at the event
 * that declares them, a second document, nesting deeper than CRCR_ALLOWLIST_MAX_DEPTH and more
 * than CRCR_ALLOWLIST_MAX_NODES nodes. The builder is hand-written rather than libyaml's
 * yaml_parser_load() because the document loader resolves aliases into shared nodes (a naive walk
 * of a "billion laughs" document is exponential) and has neither a depth nor a node limit;
 * refusing at the event stops such input at its first anchor, in microseconds.
 */
#include "yaml_doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "crcr_limits.h"

/* Problems recorded per parse; more would only bury the first ones. */
#define YAML_DOC_MAX_PROBLEMS 50u

struct yaml_doc_problem {
    unsigned line, col;
    size_t seq;
    char *msg; /* owned */
};

void yaml_doc_init(yaml_doc *d, const char *yaml, size_t len)
{
    *d = (yaml_doc){.yaml = yaml ? yaml : "", .yaml_len = yaml ? len : 0, .root = YN_NONE};
}

/* ---------------------------------------------------------------------------------------- */
/* Problems. */

void yaml_doc_error(yaml_doc *d, unsigned line, unsigned col, bool limit, const char *fmt, ...)
{
    if (limit)
        d->too_large = true;
    if (d->stopped)
        return;
    char msg[768];
    if (d->nerrs + 1 >= YAML_DOC_MAX_PROBLEMS) {
        snprintf(msg, sizeof(msg), "too many problems; stopping after %u",
                 YAML_DOC_MAX_PROBLEMS - 1);
        d->stopped = true;
    } else {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    if (!d->errs) {
        d->errs = calloc(YAML_DOC_MAX_PROBLEMS, sizeof(*d->errs));
        if (!d->errs) {
            d->nomem = true;
            return;
        }
    }
    char *copy = strdup(msg);
    if (!copy) {
        d->nomem = true;
        return;
    }
    d->errs[d->nerrs] = (struct yaml_doc_problem){line, col, d->nerrs, copy};
    d->nerrs++;
}

static int problem_cmp(const void *a, const void *b)
{
    const struct yaml_doc_problem *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

void yaml_doc_quote(char *out, size_t outsz, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i >= YAML_DOC_QUOTE_MAX || o + 8 >= outsz) {
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

const char *yaml_doc_type_name(const ynode *n)
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
/* Events to tree. */

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

/* Appends a node as the next child of `parent` (or as the root). Returns its index or YN_NONE
 * after recording why. */
static size_t new_node(yaml_doc *d, yn_type type, const yaml_mark_t *mark, size_t parent)
{
    unsigned line = (unsigned)mark->line + 1, col = (unsigned)mark->column + 1;
    if (d->nnodes >= CRCR_ALLOWLIST_MAX_NODES) {
        yaml_doc_error(d, line, col, true, "more than %u YAML nodes", CRCR_ALLOWLIST_MAX_NODES);
        return YN_NONE;
    }
    if (d->nnodes == d->capnodes) {
        size_t ncap = d->capnodes ? d->capnodes * 2 : 64;
        ynode *p = realloc(d->nodes, ncap * sizeof(*p));
        if (!p) {
            d->nomem = true;
            return YN_NONE;
        }
        d->nodes = p;
        d->capnodes = ncap;
    }
    size_t id = d->nnodes++;
    d->nodes[id] = (ynode){
        .type = type, .line = line, .col = col, .first = YN_NONE, .last = YN_NONE, .next = YN_NONE};
    if (parent == YN_NONE) {
        d->root = id;
    } else {
        ynode *p = &d->nodes[parent];
        if (p->last == YN_NONE)
            p->first = id;
        else
            d->nodes[p->last].next = id;
        p->last = id;
        p->nchild++;
    }
    return id;
}

/* Computes 1-based line:col of byte `off` (libyaml reader errors give only an offset). */
static void offset_pos(const yaml_doc *d, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, k = 1;
    for (size_t i = 0; i < off && i < d->yaml_len; i++) {
        if (d->yaml[i] == '\n') {
            l++;
            k = 1;
        } else {
            k++;
        }
    }
    *line = l;
    *col = k;
}

static void syntax_err(yaml_doc *d, const yaml_parser_t *p)
{
    unsigned line, col;
    if (p->error == YAML_READER_ERROR) {
        offset_pos(d, p->problem_offset, &line, &col);
    } else {
        line = (unsigned)p->problem_mark.line + 1;
        col = (unsigned)p->problem_mark.column + 1;
    }
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_MEMORY_ERROR) {
        d->nomem = true;
        return;
    }
    if (p->context)
        yaml_doc_error(d, line, col, false, "YAML syntax error: %s %s (started at %u:%u)",
                       p->context, problem, (unsigned)p->context_mark.line + 1,
                       (unsigned)p->context_mark.column + 1);
    else
        yaml_doc_error(d, line, col, false, "YAML syntax error: %s", problem);
}

bool yaml_doc_build(yaml_doc *d)
{
    yaml_parser_t p;
    yaml_event_t ev;
    size_t stack[CRCR_ALLOWLIST_MAX_DEPTH];
    size_t depth = 0;
    unsigned docs = 0;
    bool ok = true, done = false;

    if (!yaml_parser_initialize(&p)) {
        d->nomem = true;
        return false;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)d->yaml, d->yaml_len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);

    while (ok && !done) {
        if (!yaml_parser_parse(&p, &ev)) {
            syntax_err(d, &p);
            ok = false;
            break;
        }
        unsigned line = (unsigned)ev.start_mark.line + 1, col = (unsigned)ev.start_mark.column + 1;
        size_t parent = depth ? stack[depth - 1] : YN_NONE;
        const yaml_char_t *anchor = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                yaml_doc_error(d, line, col, false,
                               "only one YAML document is allowed (found a second one here)");
                ok = false;
            }
            break;
        case YAML_ALIAS_EVENT:
            yaml_doc_error(d, line, col, false, "anchors and aliases are not allowed (alias '*%s')",
                           (const char *)ev.data.alias.anchor);
            ok = false;
            break;
        case YAML_SCALAR_EVENT: {
            anchor = ev.data.scalar.anchor;
            if (anchor)
                break;
            if (memchr(ev.data.scalar.value, '\0', ev.data.scalar.length)) {
                yaml_doc_error(d, line, col, false, "NUL characters are not allowed");
                ok = false;
                break;
            }
            size_t id = new_node(d, YN_SCALAR, &ev.start_mark, parent);
            if (id == YN_NONE) {
                ok = false;
                break;
            }
            ynode *n = &d->nodes[id];
            n->len = ev.data.scalar.length;
            n->is_null = scalar_is_null(&ev);
            n->text = malloc(n->len + 1);
            if (!n->text) {
                d->nomem = true;
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
                yaml_doc_error(d, line, col, true, "nesting deeper than %u levels",
                               CRCR_ALLOWLIST_MAX_DEPTH);
                ok = false;
                break;
            }
            size_t id = new_node(d, ev.type == YAML_SEQUENCE_START_EVENT ? YN_SEQ : YN_MAP,
                                 &ev.start_mark, parent);
            if (id == YN_NONE) {
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
            yaml_doc_error(d, line, col, false,
                           "anchors and aliases are not allowed (anchor '&%s')",
                           (const char *)anchor);
            ok = false;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return ok && !d->nomem;
}

crcr_err yaml_doc_finish(yaml_doc *d, buf_t *errors)
{
    for (size_t i = 0; i < d->nnodes; i++)
        free(d->nodes[i].text);
    free(d->nodes);
    d->nodes = NULL;
    d->nnodes = 0;

    crcr_err rc = CRCR_OK;
    if (d->nomem)
        rc = CRCR_E_NOMEM;
    else if (d->nerrs)
        rc = d->too_large ? CRCR_E_TOO_LARGE : CRCR_E_INVALID;
    if (d->nerrs) {
        qsort(d->errs, d->nerrs, sizeof(*d->errs), problem_cmp);
        for (size_t i = 0; i < d->nerrs; i++) {
            if (errors)
                (void)buf_printf(errors, "%u:%u: %s\n", d->errs[i].line, d->errs[i].col,
                                 d->errs[i].msg);
            free(d->errs[i].msg);
        }
    } else if (d->nomem && errors) {
        (void)buf_puts(errors, "1:1: out of memory\n");
    }
    free(d->errs);
    d->errs = NULL;
    d->nerrs = 0;
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* The tree as a JSON value (yaml_doc_to_jv). */

/* Builds the JSON value of node `id` (recursion bounded by CRCR_ALLOWLIST_MAX_DEPTH). Returns a
 * new reference, or NULL after recording why. */
static jv *node_to_jv(yaml_doc *d, size_t id)
{
    const ynode *n = &d->nodes[id];
    if (n->type == YN_SCALAR) {
        jv *s = n->is_null ? jv_new_null() : jv_new_strn(n->text, n->len);
        if (!s)
            d->nomem = true;
        return s;
    }
    jv *out = n->type == YN_SEQ ? jv_new_arr() : jv_new_obj();
    if (!out) {
        d->nomem = true;
        return NULL;
    }
    bool ok = true;
    for (size_t k = n->first; k != YN_NONE && ok; k = d->nodes[k].next) {
        if (n->type == YN_SEQ) {
            jv *e = node_to_jv(d, k);
            ok = e && jv_push(out, e) == CRCR_OK;
            continue;
        }
        const ynode *key = &d->nodes[k];
        size_t vid = key->next; /* libyaml pairs every key with a value node */
        if (vid == YN_NONE)
            break;
        k = vid;
        if (key->type != YN_SCALAR || key->is_null) {
            yaml_doc_error(d, key->line, key->col, false, "a mapping key must be a string, got %s",
                           yaml_doc_type_name(key));
            ok = false;
        } else if (jv_get(out, key->text)) {
            char q[YAML_DOC_QUOTE_SIZE];
            yaml_doc_quote(q, sizeof(q), key->text, key->len);
            yaml_doc_error(d, key->line, key->col, false, "duplicate key '%s'", q);
            ok = false;
        } else {
            jv *e = node_to_jv(d, vid);
            ok = e && jv_set(out, key->text, e) == CRCR_OK;
        }
    }
    if (!ok) {
        if (!d->nerrs)
            d->nomem = true; /* a failed push or set */
        jv_free(out);
        return NULL;
    }
    return out;
}

crcr_err yaml_doc_to_jv(const char *yaml, size_t len, size_t max_bytes, jv **out, buf_t *errors)
{
    *out = NULL;
    yaml_doc d;
    yaml_doc_init(&d, yaml, len);
    jv *doc = NULL;
    if (len > max_bytes)
        yaml_doc_error(&d, 1, 1, true, "the document is larger than the limit of %zu bytes",
                       max_bytes);
    else if (!yaml && len)
        yaml_doc_error(&d, 1, 1, false, "no input");
    else if (yaml_doc_build(&d))
        doc = d.root == YN_NONE ? jv_new_null() : node_to_jv(&d, d.root);
    if (!doc && !d.nerrs)
        d.nomem = true;
    crcr_err rc = yaml_doc_finish(&d, errors);
    if (rc) {
        jv_free(doc);
        return rc;
    }
    *out = doc;
    return CRCR_OK;
}
