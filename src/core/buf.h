/*
 * buf.h - growable byte buffers with a hard cap.
 *
 * Every buffer is created with the largest size it may ever reach (`max`). Growing past it returns
 * CRCR_E_TOO_LARGE and leaves the content as it was. The content is always NUL-terminated, so a
 * buffer holding text can be used as a C string through `b->data` (which may be NULL while empty;
 * use buf_cstr() for a never-NULL view).
 */
#ifndef CRCR_BUF_H
#define CRCR_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "err.h"

typedef struct {
    char *data; /* owned; NUL-terminated when not NULL */
    size_t len; /* bytes used, not counting the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* hard cap on len */
} buf_t;

/* Prepares an empty buffer that may grow up to `max` bytes. Allocates nothing. */
void buf_init(buf_t *b, size_t max);

/* Makes room for `extra` more bytes at once, allocating exactly what that needs when the buffer
 * must grow (no doubling): for a size known up front. On error the buffer is unchanged. */
crcr_err buf_ensure(buf_t *b, size_t extra);

/* Appends `n` bytes. On error the buffer is unchanged. */
crcr_err buf_append(buf_t *b, const void *p, size_t n);

/* Appends the `n` bytes at `p` as lower-case hex (2n characters). On error the buffer is
 * unchanged. */
crcr_err buf_append_hex(buf_t *b, const void *p, size_t n);

/* Appends a NUL-terminated string. */
crcr_err buf_puts(buf_t *b, const char *s);

/* Appends one byte. */
crcr_err buf_putc(buf_t *b, char c);

/* Appends printf-formatted text (vsnprintf underneath). */
crcr_err buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
crcr_err buf_vprintf(buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Returns the content as a C string; "" for an empty buffer. Valid until the next change. */
const char *buf_cstr(const buf_t *b);

/* Empties the buffer but keeps its memory. */
void buf_reset(buf_t *b);

/* Hands the memory to the caller (who frees it with free()) and empties the buffer. Returns a
 * freshly allocated "" for an empty buffer, NULL only when that allocation fails. */
char *buf_detach(buf_t *b, size_t *len);

/* Appends at most `max` bytes of the file at `path` (a larger file is cut at `max`: ask for one
 * byte more than the limit to tell). CRCR_E_IO leaves errno set. */
crcr_err buf_read_file(const char *path, size_t max, buf_t *out);

/* Frees the memory. Accepts a buffer that never allocated. The buffer may be reused after
 * buf_init(). */
void buf_free(buf_t *b);

#endif
