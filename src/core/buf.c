/* buf.c - capped growable buffers; see buf.h. */
#include "buf.h"

#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf_t *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

/* Makes room for `extra` more bytes plus the NUL. */
static crcr_err buf_reserve(buf_t *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return CRCR_E_TOO_LARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return CRCR_OK;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need)
        ncap = ncap > ((size_t)-1) / 2 ? need : ncap * 2;
    if (ncap > b->max + 1)
        ncap = b->max + 1;
    char *p = realloc(b->data, ncap);
    if (!p)
        return CRCR_E_NOMEM;
    b->data = p;
    b->cap = ncap;
    return CRCR_OK;
}

crcr_err buf_ensure(buf_t *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return CRCR_E_TOO_LARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return CRCR_OK;
    char *p = realloc(b->data, need);
    if (!p)
        return CRCR_E_NOMEM;
    if (!b->data)
        p[0] = '\0';
    b->data = p;
    b->cap = need;
    return CRCR_OK;
}

crcr_err buf_append(buf_t *b, const void *p, size_t n)
{
    crcr_err err = buf_reserve(b, n);
    if (err)
        return err;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return CRCR_OK;
}

crcr_err buf_append_hex(buf_t *b, const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    if (n > ((size_t)-1) / 2)
        return CRCR_E_TOO_LARGE;
    crcr_err err = buf_reserve(b, 2 * n);
    if (err)
        return err;
    const unsigned char *in = p;
    for (size_t i = 0; i < n; i++) {
        b->data[b->len++] = digits[in[i] >> 4];
        b->data[b->len++] = digits[in[i] & 15];
    }
    b->data[b->len] = '\0';
    return CRCR_OK;
}

crcr_err buf_puts(buf_t *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

crcr_err buf_putc(buf_t *b, char c)
{
    return buf_append(b, &c, 1);
}

crcr_err buf_vprintf(buf_t *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return CRCR_E_INVALID;
    crcr_err err = buf_reserve(b, (size_t)n);
    if (err)
        return err;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return CRCR_OK;
}

crcr_err buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    crcr_err err = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return err;
}

const char *buf_cstr(const buf_t *b)
{
    return b->data ? b->data : "";
}

void buf_reset(buf_t *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

char *buf_detach(buf_t *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    if (!p)
        p = calloc(1, 1);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

void buf_free(buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

/* The caller owns `out` (initialised, freed by it). */
crcr_err buf_read_file(const char *path, size_t max, buf_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CRCR_E_IO;
    char chunk[16384];
    crcr_err rc = CRCR_OK;
    while (out->len < max) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = CRCR_E_IO;
            break;
        }
        if (n == 0)
            break;
        size_t take = (size_t)n < max - out->len ? (size_t)n : max - out->len;
        rc = buf_append(out, chunk, take);
        if (rc)
            break;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}
