/* err.c - text for crcr_err codes. */
#include "err.h"

const char *crcr_strerror(crcr_err e)
{
    switch (e) {
    case CRCR_OK:
        return "ok";
    case CRCR_E_NOMEM:
        return "out of memory";
    case CRCR_E_TOO_LARGE:
        return "too large";
    case CRCR_E_INVALID:
        return "invalid input";
    case CRCR_E_IO:
        return "i/o error";
    case CRCR_E_NOT_FOUND:
        return "not found";
    case CRCR_E_DUPLICATE:
        return "duplicate";
    case CRCR_E_STORE:
        return "store error";
    case CRCR_E_NETWORK:
        return "network error";
    case CRCR_E_HTTP:
        return "unexpected http status";
    case CRCR_E_CRYPTO:
        return "crypto error";
    case CRCR_E_CONFIG:
        return "configuration error";
    case CRCR_E_STATE:
        return "invalid state transition";
    case CRCR_E_PERMANENT:
        return "permanent failure";
    }
    return "unknown error";
}
