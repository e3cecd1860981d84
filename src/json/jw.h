/*
 * jw.h - the streaming JSON writer of the HUD API, `crcr health` and the delivery documents:
 * values are appended to a capped buffer as they are written, with no tree in between.
 *
 * Strings go through jv_quote (json.h): '"' and '\\' escaped, \n \r \t, other control characters
 * as \u00xx, everything else (UTF-8 included) as it is. Times are ISO-8601, null for 0 (or
 * less); a number below 0 is the "unknown" marker and written as null.
 *
 * The writer is sticky: after the first error (the buffer's cap, memory, nesting deeper than
 * JW_MAX_DEPTH, a close without an open) every further call does nothing and the error stays in
 * `err`, so a document is written without checking each call.
 */
#ifndef CRCR_JW_H
#define CRCR_JW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

#define JW_MAX_DEPTH 16

typedef struct jw {
    buf_t *b;
    crcr_err err;
    int depth;
    bool need_comma[JW_MAX_DEPTH + 1];
    bool after_key;
} jw;

void jw_init(jw *w, buf_t *b);
void jw_obj(jw *w);
void jw_obj_end(jw *w);
void jw_arr(jw *w);
void jw_arr_end(jw *w);
void jw_key(jw *w, const char *k);
/* Writes the separator for a value the caller appends to w->b itself (a nested writer's
 * output); check w->err afterwards and store the appending call's error in it. */
void jw_value_begin(jw *w);
void jw_str(jw *w, const char *s); /* NULL writes null */
void jw_strn(jw *w, const char *s, size_t n);
void jw_int(jw *w, int64_t v);
void jw_bool(jw *w, bool v);
void jw_null(jw *w);
/* A number with `decimals` digits after the point; null when v < 0 (the "unknown" marker). */
void jw_num(jw *w, double v, int decimals);
/* ISO-8601 time, null for 0. */
void jw_time(jw *w, int64_t ms);
/* Seconds with millisecond precision, null for ms < 0. */
void jw_secs(jw *w, int64_t ms);

/* key + value shorthands */
void jw_kstr(jw *w, const char *k, const char *s);
void jw_kint(jw *w, const char *k, int64_t v);
void jw_kbool(jw *w, const char *k, bool v);
void jw_knum(jw *w, const char *k, double v, int decimals);
void jw_ktime(jw *w, const char *k, int64_t ms);
void jw_ksecs(jw *w, const char *k, int64_t ms);

#endif
