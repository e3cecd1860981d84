/*
 * cbtoken.h - the relay-signed callback token (§3.6) that binds a callback to a real dispatch.
 *
 * Every dispatch carries client_payload.callback_token = "v1." + hex(HMAC-SHA256(K, m)) where
 *   K = HMAC-SHA256(webhook secret, "crcr callback token key v1")
 *   m = "v1\n" + delivery_id + "\n" + lower(downstream repo) + "\n" + head_sha + "\n" + pr_number
 * A callback's token must match the OIDC-verified repository and the echoed delivery id, head sha
 * and PR number. During secret rotation a token made with GITHUB_APP_SECRET_PREVIOUS also passes.
 * A dispatch that carried a resolved Depends-On pair (§3.13, depends_on.h) binds it too:
 *   m += "\npair\n" + pair PR number + "\n" + pair head sha
 * so the token of one pair does not pass for another (an unpaired dispatch's m is unchanged).
 */
#ifndef CRCR_CBTOKEN_H
#define CRCR_CBTOKEN_H

#include <stdbool.h>
#include <stdint.h>

/* "v1." + 64 hex digits + NUL. */
#define CBTOKEN_SIZE 68

/* Writes the token for a dispatch. */
void cbtoken_make(const char *secret, const char *delivery_id, const char *repo,
                  const char *head_sha, int64_t pr_number, char out[CBTOKEN_SIZE]);

/* True when `token` matches under `secret` or (when not NULL) `previous`. Constant-time compare. */
bool cbtoken_verify(const char *secret, const char *previous, const char *token,
                    const char *delivery_id, const char *repo, const char *head_sha,
                    int64_t pr_number);

/* The same with the dispatch's pair: `pair_number` 0 (and pair_sha ignored) for none. */
void cbtoken_make_pair(const char *secret, const char *delivery_id, const char *repo,
                       const char *head_sha, int64_t pr_number, int64_t pair_number,
                       const char *pair_sha, char out[CBTOKEN_SIZE]);
bool cbtoken_verify_pair(const char *secret, const char *previous, const char *token,
                         const char *delivery_id, const char *repo, const char *head_sha,
                         int64_t pr_number, int64_t pair_number, const char *pair_sha);

#endif
