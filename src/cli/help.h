/*
 * help.h - `crcr help COMMAND`: a man-style page (NAME, SYNOPSIS, DESCRIPTION, OPTIONS,
 * ENVIRONMENT, EXIT STATUS, EXAMPLES, SEE ALSO) for each command of the one binary.
 */
#ifndef CRCR_HELP_H
#define CRCR_HELP_H

#include <stdio.h>

/* Writes the page of `command` (serve, allowlist, webhook, deliveries, report, health, config,
 * version, help) to `out` and returns 0; for an unknown command writes the list of pages to
 * `err` and returns 2. */
int help_page(const char *command, FILE *out, FILE *err);

#endif
