/*
 * yaml_doc.h - the bounded YAML reader behind the allowlist and the CI providers map.
 *
 * libyaml's event API builds a small tree of nodes: anchors, aliases and a second document are
 * refused, nesting deeper than CRCR_ALLOWLIST_MAX_DEPTH and more than CRCR_ALLOWLIST_MAX_NODES
 * nodes too (crcr_limits.h). Problems are collected with their LINE:COL (at most 49 and a last "too
 * many problems"), for the reader and for the rules of the format read on top of it, and written
 * out sorted by position. A yaml_doc owns its nodes and problems until yaml_doc_finish().
 */
#ifndef CRCR_YAML_DOC_H
#define CRCR_YAML_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"
#include "json.h"

/* Longest value yaml_doc_quote() repeats; its output needs YAML_DOC_QUOTE_SIZE bytes. */
#define YAML_DOC_QUOTE_MAX 80u
#define YAML_DOC_QUOTE_SIZE (YAML_DOC_QUOTE_MAX * 4 + 8)

/* No node: the end of a list of children, or no document. */
#define YN_NONE ((size_t)-1)

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

struct yaml_doc_problem;

/* One parse: the input (borrowed), the tree and the problems found. */
typedef struct yaml_doc {
    const char *yaml;
    size_t yaml_len;
    ynode *nodes; /* owned */
    size_t nnodes, capnodes;
    size_t root;                   /* YN_NONE: no document, or only comments */
    struct yaml_doc_problem *errs; /* owned */
    size_t nerrs;
    bool stopped;   /* the most problems recorded */
    bool too_large; /* a limit was passed */
    bool nomem;
} yaml_doc;

/* Starts a parse of yaml[0..len) (NULL reads as no input). */
void yaml_doc_init(yaml_doc *d, const char *yaml, size_t len);

/* Runs libyaml over the input and builds the tree. Returns false after recording a problem (or
 * running out of memory: d->nomem). */
bool yaml_doc_build(yaml_doc *d);

/* Records "LINE:COL: message". `limit` marks a size limit (the parse then returns
 * CRCR_E_TOO_LARGE). The message is copied. */
__attribute__((format(printf, 5, 6))) void yaml_doc_error(yaml_doc *d, unsigned line, unsigned col,
                                                          bool limit, const char *fmt, ...);

/* Frees the tree and the problems, writing the problems to `errors` (may be NULL) as
 * "LINE:COL: message" lines in input order. Returns the parse's outcome: CRCR_OK without
 * problems, else CRCR_E_NOMEM, CRCR_E_TOO_LARGE or CRCR_E_INVALID. */
crcr_err yaml_doc_finish(yaml_doc *d, buf_t *errors);

/* Writes `s[0..n)` into `out` as a printable, bounded quote body: control bytes become \xNN and
 * values longer than YAML_DOC_QUOTE_MAX end in "...". */
void yaml_doc_quote(char *out, size_t outsz, const char *s, size_t n);

/* "list", "mapping", "null", "string", or "nothing" for NULL: for messages. */
const char *yaml_doc_type_name(const ynode *n);

/* The key after mapping key `key` (its value skipped), or YN_NONE. */
static inline size_t yaml_doc_next_key(const yaml_doc *d, size_t key)
{
    return d->nodes[d->nodes[key].next].next;
}

/*
 * The reader for YAML inputs other than the allowlist, held to the same rules
 * (ci_providers.c), `len` at most `max_bytes`. The document becomes a JSON value: mappings
 * objects (a key must be a string and appear once), sequences arrays, scalars strings (never
 * numbers or booleans), null scalars and an empty document null. On success *out is a new
 * reference (jv_free); on failure it is NULL, the result is CRCR_E_INVALID, CRCR_E_TOO_LARGE or
 * CRCR_E_NOMEM and `errors` (if not NULL) receives one line per problem, "LINE:COL: message\n".
 */
crcr_err yaml_doc_to_jv(const char *yaml, size_t len, size_t max_bytes, jv **out, buf_t *errors);

#endif
