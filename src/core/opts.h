/*
 * opts.h - command-line options of the `crcr` commands: "--name VALUE" and "--name=VALUE".
 */
#ifndef CRCR_OPTS_H
#define CRCR_OPTS_H

/* Matches option `name` ("--name") at argv[*i]. On a match stores the value (borrowed from argv)
 * in *out, advances *i past what was used and returns 1; returns -1 when the value is missing,
 * 0 when argv[*i] is another option. */
int opts_take(int argc, char **argv, int *i, const char *name, const char **out);

#endif
