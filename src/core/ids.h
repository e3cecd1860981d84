/*
 * ids.h - the identifiers the relay accepts from the network, by one set of rules:
 * GitHub delivery ids, owner/repo names (GitHub's own limits) and commit shas.
 */
#ifndef CRCR_IDS_H
#define CRCR_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An X-GitHub-Delivery id (a GUID in practice): 1 to CRCR_DELIVERY_ID_MAX-1 characters of
 * [A-Za-z0-9-_.:]. Also the form of a nightly report's id (a sha). */
bool ids_delivery_valid(const char *id);

/* A GitHub owner (user or organisation): 1-39 characters of [A-Za-z0-9-] (upstream's allowlist
 * rule; GitHub allows nothing else). */
bool ids_owner_valid(const char *s, size_t n);

/* A GitHub repository name: 1-100 characters of [A-Za-z0-9._-], not "." or "..". */
bool ids_repo_name_valid(const char *s, size_t n);

/* "owner/repo" with both parts valid. */
bool ids_full_name_valid(const char *s);

/* The value of one hex digit (either case), or -1. */
int ids_hex_value(char c);

/* A downstream run id as the relay keeps it (text): 1 to CRCR_RUN_ID_MAX-1 characters of
 * [A-Za-z0-9._-]: a GitHub Actions run id (digits) or a Buildkite build id (a UUID). No ':' (it
 * separates the run from the PR in a check run's external_id) and nothing that needs escaping in
 * a URL, a log line or HTML. */
bool ids_run_id_valid(const char *s);

/* An unsigned decimal number of 1 to `max_digits` digits (no sign, no spaces; max_digits at most
 * IDS_DECIMAL_DIGITS_MAX, so it cannot overflow). Sets *out. */
#define IDS_DECIMAL_DIGITS_MAX 18u
bool ids_decimal(const char *s, size_t n, size_t max_digits, int64_t *out);

/* A pull request or issue number as written in a URL or a reference ("#123"): 1 to
 * IDS_PR_DIGITS_MAX decimal digits, no sign, above 0. Sets *out. */
#define IDS_PR_DIGITS_MAX 10u
bool ids_pr_number(const char *s, size_t n, int64_t *out);

/* A commit sha: 40 (SHA-1) or 64 (SHA-256) hex digits, either case. */
bool ids_sha_valid(const char *s);

#endif
