/*
 * json.c - jansson behind the jv_* interface; see json.h for the choice and the rules. The
 * selective validating parser of webhook and callback bodies is json_select.c.
 */
#include "json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crcr_limits.h"

crcr_err jv_prescan(const char *text, size_t len, unsigned max_depth, unsigned long max_values)
{
    unsigned depth = 0;
    unsigned long values = 0;
    int in_value = 0; /* inside a scalar token (number, true, false, null) */
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '"') {
            values++;
            in_value = 0;
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] == '\\')
                    i++;
            }
        } else if (c == '{' || c == '[') {
            values++;
            in_value = 0;
            if (++depth > max_depth)
                return CRCR_E_TOO_LARGE;
        } else if (c == '}' || c == ']') {
            in_value = 0;
            if (depth > 0)
                depth--;
        } else if (c == ',' || c == ':' || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            in_value = 0;
        } else if (!in_value) {
            in_value = 1;
            values++;
        }
        if (values > max_values)
            return CRCR_E_TOO_LARGE;
    }
    return CRCR_OK;
}

jv *jv_parse(const char *text, size_t len, char *err, size_t errsz)
{
    if (jv_prescan(text, len, CRCR_JSON_MAX_DEPTH, CRCR_JSON_MAX_VALUES) != CRCR_OK) {
        if (err && errsz)
            snprintf(err, errsz, "JSON nesting or size limit exceeded");
        return NULL;
    }
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
    if (!v && err && errsz)
        snprintf(err, errsz, "%s at line %d column %d", e.text, e.line, e.column);
    return v;
}

void jv_free(jv *v)
{
    json_decref(v);
}

jv *jv_ref(jv *v)
{
    return json_incref(v);
}

jv *jv_copy(const jv *v)
{
    return json_deep_copy(v);
}

jv *jv_get(const jv *obj, const char *key)
{
    if (!obj || !json_is_object(obj))
        return NULL;
    return json_object_get(obj, key);
}

jv *jv_path(const jv *root, const char *path)
{
    const jv *cur = root;
    char key[256];
    while (cur && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        cur = jv_get(cur, key);
        path += n;
        if (*path == '.')
            path++;
    }
    return (jv *)cur;
}

const char *jv_path_str(const jv *root, const char *path)
{
    return jv_str(jv_path(root, path));
}

bool jv_equal(const jv *a, const jv *b)
{
    return json_equal(a, b) != 0;
}

bool jv_is_obj(const jv *v)
{
    return v && json_is_object(v);
}
bool jv_is_arr(const jv *v)
{
    return v && json_is_array(v);
}
bool jv_is_str(const jv *v)
{
    return v && json_is_string(v);
}
bool jv_is_null(const jv *v)
{
    return v && json_is_null(v);
}
bool jv_is_bool(const jv *v)
{
    return v && json_is_boolean(v);
}
bool jv_is_true(const jv *v)
{
    return v && json_is_true(v);
}
bool jv_is_int(const jv *v)
{
    return v && json_is_integer(v);
}
bool jv_is_number(const jv *v)
{
    return v && json_is_number(v);
}

const char *jv_str(const jv *v)
{
    return (v && json_is_string(v)) ? json_string_value(v) : NULL;
}

size_t jv_str_len(const jv *v)
{
    return (v && json_is_string(v)) ? json_string_length(v) : 0;
}

bool jv_int(const jv *v, int64_t *out)
{
    if (!v || !json_is_integer(v))
        return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

double jv_number(const jv *v)
{
    return v ? json_number_value(v) : 0.0;
}

size_t jv_arr_len(const jv *arr)
{
    return (arr && json_is_array(arr)) ? json_array_size(arr) : 0;
}

jv *jv_arr_at(const jv *arr, size_t i)
{
    return (arr && json_is_array(arr)) ? json_array_get(arr, i) : NULL;
}

size_t jv_obj_len(const jv *obj)
{
    return (obj && json_is_object(obj)) ? json_object_size(obj) : 0;
}

void *jv_iter(jv *obj)
{
    return (obj && json_is_object(obj)) ? json_object_iter(obj) : NULL;
}

void *jv_iter_next(jv *obj, void *it)
{
    return json_object_iter_next(obj, it);
}

const char *jv_iter_key(void *it)
{
    return json_object_iter_key(it);
}

jv *jv_iter_val(void *it)
{
    return json_object_iter_value(it);
}

jv *jv_new_obj(void)
{
    return json_object();
}
jv *jv_new_arr(void)
{
    return json_array();
}
jv *jv_new_str(const char *s)
{
    return json_string(s);
}
jv *jv_new_strn(const char *s, size_t n)
{
    return json_stringn(s, n);
}
jv *jv_new_int(int64_t i)
{
    return json_integer((json_int_t)i);
}
jv *jv_new_real(double d)
{
    return json_real(d);
}
jv *jv_new_bool(bool b)
{
    return json_boolean(b);
}
jv *jv_new_null(void)
{
    return json_null();
}

crcr_err jv_set(jv *obj, const char *key, jv *val)
{
    if (!val)
        return CRCR_E_NOMEM;
    if (!obj || !json_is_object(obj)) {
        json_decref(val);
        return CRCR_E_INVALID;
    }
    return json_object_set_new(obj, key, val) == 0 ? CRCR_OK : CRCR_E_NOMEM;
}

crcr_err jv_del(jv *obj, const char *key)
{
    if (!obj || !json_is_object(obj))
        return CRCR_E_INVALID;
    return json_object_del(obj, key) == 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

crcr_err jv_push(jv *arr, jv *val)
{
    if (!val)
        return CRCR_E_NOMEM;
    if (!arr || !json_is_array(arr)) {
        json_decref(val);
        return CRCR_E_INVALID;
    }
    return json_array_append_new(arr, val) == 0 ? CRCR_OK : CRCR_E_NOMEM;
}

crcr_err jv_arr_del(jv *arr, size_t i)
{
    if (!arr || !json_is_array(arr))
        return CRCR_E_INVALID;
    return json_array_remove(arr, i) == 0 ? CRCR_OK : CRCR_E_NOT_FOUND;
}

struct dump_ctx {
    buf_t *out;
    crcr_err err;
};

static int dump_cb(const char *p, size_t n, void *data)
{
    struct dump_ctx *d = data;
    if (d->err) /* jansson ignores some callback failures and goes on writing: stay failed */
        return -1;
    d->err = buf_append(d->out, p, n);
    return d->err ? -1 : 0;
}

crcr_err jv_dump(const jv *v, buf_t *out)
{
    struct dump_ctx d = {out, CRCR_OK};
    if (json_dump_callback(v, dump_cb, &d, JSON_COMPACT | JSON_ENCODE_ANY) != 0)
        return d.err ? d.err : CRCR_E_INVALID;
    return CRCR_OK;
}

crcr_err jv_dump_indented(const jv *v, buf_t *out)
{
    struct dump_ctx d = {out, CRCR_OK};
    if (json_dump_callback(v, dump_cb, &d, JSON_INDENT(2) | JSON_ENCODE_ANY) != 0)
        return d.err ? d.err : CRCR_E_INVALID;
    return CRCR_OK;
}

crcr_err jv_quote(buf_t *out, const char *s, size_t n)
{
    crcr_err err = buf_putc(out, '"');
    size_t run = 0; /* start of the current run of bytes copied as they are */
    for (size_t i = 0; i < n && !err; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            snprintf(u, sizeof(u), "\\u%04x", c);
            esc = u;
        }
        if (esc) {
            err = buf_append(out, s + run, i - run);
            if (!err)
                err = buf_puts(out, esc);
            run = i + 1;
        }
    }
    if (!err)
        err = buf_append(out, s + run, n - run);
    if (!err)
        err = buf_putc(out, '"');
    return err;
}
