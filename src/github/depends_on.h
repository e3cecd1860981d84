/*
 * depends_on.h - co-testing paired PRs (§3.13): the Depends-On lines of a PyTorch PR body, the
 * record a dispatch row keeps of its pair, and what a downstream receives.
 *
 * A line of the PR body names a PR of a downstream repository:
 *   Depends-On: OWNER/REPO#N
 *   Depends-On: https://github.com/OWNER/REPO/pull/N      (GitHub Enterprise Server: its web host,
 *                                                          config_web_url; a trailing '/' is fine)
 * The key is case-insensitive, blanks may lead the line and surround the colon, the value is the
 * rest of the line (trailing blanks and CR cut). At most CRCR_DEPENDS_ON_MAX lines count, the
 * first per repository (compared case-insensitively); more lines, repeats and lines whose value
 * is neither form are counted as ignored. Only the first CRCR_PR_BODY_MAX bytes of a body are
 * read. Whether a repository is allowlisted is the caller's question.
 *
 * A paired dispatch row's body is its record (store.h: store_dispatch.pair), JSON:
 *   requested (webhook.c)   {"depends_on":{"repository":"o/r","number":7}}
 *   resolved (outbox.c)     {"depends_on":{"repository":"o/r","number":7,"head_sha":"..",
 *                             "head_ref":"..","clone_url":".."}}
 *   not resolved            {"depends_on":{"repository":"o/r","number":7},"problem":"closed"}
 * and client_payload.depends_on is the resolved object (never sent unresolved). The callback
 * token binds a resolved pair's number and head sha (cbtoken.h); the check run names it.
 *
 * Why hand-written: a dozen lines of text matching; no library knows GitHub's reference forms.
 */
#ifndef CRCR_DEPENDS_ON_H
#define CRCR_DEPENDS_ON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "crcr_limits.h"
#include "err.h"

/* Longest head ref and clone URL kept (GitHub's refs are at most 255 bytes in practice; a clone
 * URL is the web host, at most 2048 bytes, with "/owner/repo.git"). */
#define DEPENDS_ON_REF_MAX 1024u
#define DEPENDS_ON_URL_MAX (2048u + CRCR_REPO_NAME_MAX + 16u)
#define DEPENDS_ON_PROBLEM_MAX 256u

/* One Depends-On line. */
typedef struct depends_on_line {
    char repo[CRCR_REPO_NAME_MAX]; /* OWNER/REPO as written */
    int64_t number;                /* > 0 */
} depends_on_line;

/* Fills out[0..return) with the Depends-On lines of `body` (`len` bytes; NULL: none), at most
 * `max` (CRCR_DEPENDS_ON_MAX is the limit callers pass); *ignored (may be NULL) receives the
 * lines that look like Depends-On but do not count (see above). */
size_t depends_on_parse(const char *body, size_t len, const char *web_url, depends_on_line *out,
                        size_t max, size_t *ignored);

/* The PR number the lines name for `repo` (case-insensitive), 0 when none. */
int64_t depends_on_find(const depends_on_line *v, size_t n, const char *repo);

/* A dispatch's pair, as its record says. */
typedef struct depends_on_pair {
    char repo[CRCR_REPO_NAME_MAX];
    int64_t number;
    bool resolved; /* head_sha, head_ref and clone_url are what GitHub said at dispatch time */
    char head_sha[CRCR_SHA_MAX + 8];
    char head_ref[DEPENDS_ON_REF_MAX];
    char clone_url[DEPENDS_ON_URL_MAX];
    char problem[DEPENDS_ON_PROBLEM_MAX]; /* why it is not resolved ("" when resolved or not
                                              looked at yet) */
} depends_on_pair;

/* Appends the requested record of `repo`#`number` (the body of a paired dispatch row). */
crcr_err depends_on_request(const char *repo, int64_t number, buf_t *out);
/* Reads a record (any of the three forms); false when `json` is none (empty, another shape). */
bool depends_on_record_parse(const char *json, size_t len, depends_on_pair *out);
/* Appends the record of `p`: resolved, or with its problem. */
crcr_err depends_on_record(const depends_on_pair *p, buf_t *out);
/* Appends client_payload.depends_on of a resolved pair: {repository, number, head_sha, head_ref,
 * clone_url}. CRCR_E_INVALID when `p` is not resolved. */
crcr_err depends_on_payload(const depends_on_pair *p, buf_t *out);

/* Forgets what was read of p's PR (head, problem): the pair as requested, to be read again. */
void depends_on_unread(depends_on_pair *p);

/* Fills p's head from GET /repos/{repo}/pulls/{number}'s answer (`json`): an open PR resolves
 * (head.sha, head.ref, head.repo.clone_url, else base.repo.clone_url for a deleted fork); a
 * closed or merged one, or an answer without a valid head sha, gets its problem instead. */
void depends_on_from_pull(const char *json, size_t len, depends_on_pair *p);

/* "OWNER/REPO#N @ sha7" of a resolved pair ("OWNER/REPO#N" otherwise), for check runs and notes. */
void depends_on_label(const depends_on_pair *p, char *out, size_t outsz);

#endif
