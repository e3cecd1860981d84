/*
 * jw.c - the streaming JSON writer; see jw.h.
 */
#include "jw.h"

#include <math.h>
#include <string.h>

#include "clock.h"
#include "json.h"

void jw_init(jw *w, buf_t *b)
{
    memset(w, 0, sizeof(*w));
    w->b = b;
}

/* Writes the separator a new value needs at the current position. */
static void jw_pre(jw *w)
{
    if (w->err)
        return;
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->need_comma[w->depth])
        w->err = buf_putc(w->b, ',');
    w->need_comma[w->depth] = true;
}

void jw_value_begin(jw *w)
{
    jw_pre(w);
}

static void jw_open(jw *w, char c)
{
    jw_pre(w);
    if (w->err)
        return;
    if (w->depth >= JW_MAX_DEPTH) {
        w->err = CRCR_E_TOO_LARGE;
        return;
    }
    w->err = buf_putc(w->b, c);
    w->depth++;
    w->need_comma[w->depth] = false;
}

static void jw_close(jw *w, char c)
{
    if (w->err)
        return;
    if (w->depth <= 0) {
        w->err = CRCR_E_INVALID;
        return;
    }
    w->depth--;
    w->err = buf_putc(w->b, c);
}

void jw_obj(jw *w)
{
    jw_open(w, '{');
}

void jw_obj_end(jw *w)
{
    jw_close(w, '}');
}

void jw_arr(jw *w)
{
    jw_open(w, '[');
}

void jw_arr_end(jw *w)
{
    jw_close(w, ']');
}

void jw_key(jw *w, const char *k)
{
    jw_pre(w);
    if (w->err)
        return;
    w->err = jv_quote(w->b, k, strlen(k));
    if (!w->err)
        w->err = buf_putc(w->b, ':');
    w->after_key = true;
}

void jw_strn(jw *w, const char *s, size_t n)
{
    jw_pre(w);
    if (w->err)
        return;
    w->err = s ? jv_quote(w->b, s, n) : buf_puts(w->b, "null");
}

void jw_str(jw *w, const char *s)
{
    jw_strn(w, s, s ? strlen(s) : 0);
}

void jw_int(jw *w, int64_t v)
{
    jw_pre(w);
    if (!w->err)
        w->err = buf_printf(w->b, "%lld", (long long)v);
}

void jw_bool(jw *w, bool v)
{
    jw_pre(w);
    if (!w->err)
        w->err = buf_puts(w->b, v ? "true" : "false");
}

void jw_null(jw *w)
{
    jw_pre(w);
    if (!w->err)
        w->err = buf_puts(w->b, "null");
}

void jw_num(jw *w, double v, int decimals)
{
    if (v < 0 || !isfinite(v)) {
        jw_null(w);
        return;
    }
    jw_pre(w);
    if (!w->err)
        w->err = buf_printf(w->b, "%.*f", decimals, v);
}

void jw_time(jw *w, int64_t ms)
{
    if (ms <= 0) {
        jw_null(w);
        return;
    }
    char iso[32];
    clock_iso8601(ms, iso, sizeof(iso));
    jw_str(w, iso);
}

void jw_secs(jw *w, int64_t ms)
{
    if (ms < 0) {
        jw_null(w);
        return;
    }
    jw_pre(w);
    if (!w->err)
        w->err = buf_printf(w->b, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

void jw_kstr(jw *w, const char *k, const char *s)
{
    jw_key(w, k);
    jw_str(w, s);
}

void jw_kint(jw *w, const char *k, int64_t v)
{
    jw_key(w, k);
    jw_int(w, v);
}

void jw_kbool(jw *w, const char *k, bool v)
{
    jw_key(w, k);
    jw_bool(w, v);
}

void jw_knum(jw *w, const char *k, double v, int decimals)
{
    jw_key(w, k);
    jw_num(w, v, decimals);
}

void jw_ktime(jw *w, const char *k, int64_t ms)
{
    jw_key(w, k);
    jw_time(w, ms);
}

void jw_ksecs(jw *w, const char *k, int64_t ms)
{
    jw_key(w, k);
    jw_secs(w, ms);
}
