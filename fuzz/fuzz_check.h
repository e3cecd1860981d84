/*
 * fuzz_check.h - the invariant check of every fuzz target: a violated invariant prints the
 * expression and line and aborts, which libFuzzer reports as a crash with the input kept.
 */
#ifndef CRCR_FUZZ_CHECK_H
#define CRCR_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__);                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
