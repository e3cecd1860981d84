/*
 * err.h - the one error type of crcr.
 *
 * Every fallible function returns a crcr_err. CRCR_OK is zero so that calls can be chained with
 * `if (!err) err = next(...)`. Human-readable detail travels in a caller-supplied `char *errbuf`
 * where a function has more to say than the code.
 */
#ifndef CRCR_ERR_H
#define CRCR_ERR_H

typedef enum {
    CRCR_OK = 0,
    CRCR_E_NOMEM,     /* allocation failed */
    CRCR_E_TOO_LARGE, /* an input or buffer passed its named limit */
    CRCR_E_INVALID,   /* malformed input */
    CRCR_E_IO,        /* file or socket error */
    CRCR_E_NOT_FOUND, /* the thing asked for does not exist */
    CRCR_E_DUPLICATE, /* a unique key already exists */
    CRCR_E_STORE,     /* the store failed (retryable from the caller's view) */
    CRCR_E_NETWORK,   /* transport error talking to a peer */
    CRCR_E_HTTP,      /* a peer answered with an unexpected HTTP status */
    CRCR_E_CRYPTO,    /* OpenSSL failure */
    CRCR_E_CONFIG,    /* bad configuration */
    CRCR_E_STATE,     /* invalid state transition */
    CRCR_E_PERMANENT  /* a permanent failure: retrying cannot help */
} crcr_err;

/* Returns a static, never-NULL description of `e`. */
const char *crcr_strerror(crcr_err e);

#endif
