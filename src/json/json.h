/*
 * json.h - the only door to the JSON library.
 *
 * Library: jansson 2.14 (Debian libjansson-dev), chosen on the measurements in
 * c-dependencies-and-style.md §A3:
 *   - 64-bit integers are exact (json_int_t is int64): GitHub ids (check runs, installations,
 *     run ids) pass 2^31 and 2^53; cJSON saturates them at INT_MAX.
 *   - JSON_REJECT_DUPLICATES: a document with a repeated key is refused, so two parsers can never
 *     disagree on a signed payload (json-c keeps the last key silently, cJSON the first).
 *   - Object lookups are case-sensitive (cJSON_GetObjectItem is not).
 *   - Parse time is about 0.3-0.45 ms for a 30 KB pull_request payload, one to two orders of
 *     magnitude below GitHub's webhook rate on one core; json-c is 2-3x faster but loses the
 *     duplicate-key check. If profiling ever makes parsing the bottleneck, only this module
 * changes. Pitfalls handled here: jansson's own depth limit (2048) is far beyond what a webhook
 * needs and it has no value-count limit, so jv_parse() first runs a linear, non-recursive prescan
 * that enforces CRCR_JSON_MAX_DEPTH and CRCR_JSON_MAX_VALUES before jansson allocates anything.
 *
 * Reference counting: functions documented as returning a "new reference" hand ownership to the
 * caller, who releases it with jv_free(). "Borrowed" results live as long as their container.
 */
#ifndef CRCR_JSON_H
#define CRCR_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

typedef struct json_t jv; /* jansson's type, opaque outside json.c */

/* Parses `len` bytes. Any JSON value may be the root. Rejects duplicate keys, invalid UTF-8,
 * nesting deeper than CRCR_JSON_MAX_DEPTH and more than CRCR_JSON_MAX_VALUES values. Returns a
 * new reference, or NULL with a short reason in `err` (which may be NULL). */
jv *jv_parse(const char *text, size_t len, char *err, size_t errsz);

/* Paths one jv_parse_select() call may select, and path segments (object keys) over all of them. */
#define CRCR_JSON_SELECT_MAX_PATHS 64u
#define CRCR_JSON_SELECT_MAX_SEGMENTS 256u

/* Validates the whole document exactly as jv_parse() does (same accept/reject answer on every
 * input, same limits) but builds only the values at the selected `paths`: dot-separated object
 * keys as jv_path() reads them ("pull_request.head.sha"). Returns a new reference, or NULL with a
 * short reason in `err` (which may be NULL); also NULL when `paths` is not a valid selection (an
 * empty or NULL path, more than CRCR_JSON_SELECT_MAX_PATHS paths or _SEGMENTS segments).
 * When the root is an object, the result is an object holding only the selected paths: for every
 * selected p, jv_path(result, p) is json-equal to jv_path(jv_parse(text), p), or NULL when that
 * is NULL. A selected value is complete (a whole subtree for an object or array). A key on the
 * way to a selected path is present, as an object of the selected descendants only, exactly when
 * the document has an object there. Nothing else is present.
 * When the root is not an object, the result is not one either: an empty array for an array root,
 * the value itself for a scalar root. Memory: the selected values plus the keys of the objects
 * open at one time (32 bytes each, at most CRCR_JSON_MAX_VALUES); see json.c. */
jv *jv_parse_select(const char *text, size_t len, const char *const *paths, size_t n_paths,
                    char *err, size_t errsz);

/* The validation of jv_parse_select() alone, one linear pass, with nothing built and nothing
 * allocated: no value, not even the root, and no key set, so duplicate keys are not looked for
 * (JSON allows them; RFC 8259 says names SHOULD be unique, and Python's json.loads, upstream's
 * parser, keeps the last). Otherwise jv_parse()'s rules and limits: it refuses what jv_parse()
 * refuses but for a duplicate key. True for such a document, with *is_object (may be NULL)
 * telling whether its root is an object; false with a short reason in `err` (may be NULL). For
 * input that must cost no more than a read before it is authenticated (a callback body before
 * its token; after it, jv_parse_select() refuses duplicates). */
bool jv_validate(const char *text, size_t len, bool *is_object, char *err, size_t errsz);

/* For a text jv_validate() accepted whose root is an object: the byte span [*off, *off + *n) of
 * the value of its top-level member `key`, matched as written (a key spelled with escapes is not
 * found; with duplicate keys, the first). False when the root is not an object or has no such
 * member. One pass over the bytes up to the member's end, nothing allocated; on text that is not
 * JSON it reads nothing beyond `len` and may give any span within it. For a caller that keeps
 * part of a body apart from the rest (the SQLite store's echoed webhook of a callback). */
bool jv_member_span(const char *text, size_t len, const char *key, size_t *off, size_t *n);

/* Key comparisons the duplicate-key check of jv_parse_select() made on this thread so far: the
 * work stays linear in the number of keys whatever the keys are (tests read it). */
uint64_t jv_select_key_probes(void);

/* Checks only the structural limits (depth, value count); CRCR_OK or CRCR_E_TOO_LARGE. Strings
 * are skipped correctly, other syntax is left to the parser. */
crcr_err jv_prescan(const char *text, size_t len, unsigned max_depth, unsigned long max_values);

/* Releases a reference; NULL is fine. */
void jv_free(jv *v);
/* Takes another reference to `v` and returns it. */
jv *jv_ref(jv *v);
/* A deep copy (new reference), NULL on allocation failure. */
jv *jv_copy(const jv *v);

/* Lookups: all borrowed; NULL when the container has the wrong type or the key is missing. */
jv *jv_get(const jv *obj, const char *key);
/* Follows dot-separated object keys: jv_path(root, "pull_request.head.sha"). */
jv *jv_path(const jv *root, const char *path);
/* The string at `path`, or NULL if absent or not a string. */
const char *jv_path_str(const jv *root, const char *path);

/* Whether two values are equal as jansson's json_equal() says (NULLs are never equal). */
bool jv_equal(const jv *a, const jv *b);

bool jv_is_obj(const jv *v);
bool jv_is_arr(const jv *v);
bool jv_is_str(const jv *v);
bool jv_is_null(const jv *v);
bool jv_is_bool(const jv *v);
bool jv_is_true(const jv *v);
bool jv_is_int(const jv *v);
bool jv_is_number(const jv *v);

/* The string value (borrowed), or NULL if `v` is not a string. */
const char *jv_str(const jv *v);
size_t jv_str_len(const jv *v);
/* Stores an integer value in *out; false if `v` is not an integer. */
bool jv_int(const jv *v, int64_t *out);
double jv_number(const jv *v);

size_t jv_arr_len(const jv *arr);
jv *jv_arr_at(const jv *arr, size_t i);
size_t jv_obj_len(const jv *obj);

/* Object iteration in document order:
 *   for (void *it = jv_iter(o); it; it = jv_iter_next(o, it)) { jv_iter_key(it); jv_iter_val(it); }
 * Deleting the current key while iterating is not allowed; collect keys first. */
void *jv_iter(jv *obj);
void *jv_iter_next(jv *obj, void *it);
const char *jv_iter_key(void *it);
jv *jv_iter_val(void *it);

/* Constructors: new references, NULL on allocation failure (or invalid UTF-8 for strings). */
jv *jv_new_obj(void);
jv *jv_new_arr(void);
jv *jv_new_str(const char *s);
jv *jv_new_strn(const char *s, size_t n);
jv *jv_new_int(int64_t i);
jv *jv_new_real(double d);
jv *jv_new_bool(bool b);
jv *jv_new_null(void);

/* Container edits. jv_set/jv_push steal `val` (also on failure). */
crcr_err jv_set(jv *obj, const char *key, jv *val);
crcr_err jv_del(jv *obj, const char *key);
crcr_err jv_push(jv *arr, jv *val);
crcr_err jv_arr_del(jv *arr, size_t i);

/* Appends the compact serialisation (separators "," and ":", key order kept, UTF-8 unescaped). */
crcr_err jv_dump(const jv *v, buf_t *out);

/* Appends the serialisation for people to read: two spaces of indent per level, one member or
 * item per line, key order kept, UTF-8 unescaped (`crcr deliveries show`). */
crcr_err jv_dump_indented(const jv *v, buf_t *out);

/* Appends `s[0..n)` as a JSON string literal, quotes included. */
crcr_err jv_quote(buf_t *out, const char *s, size_t n);

#endif
