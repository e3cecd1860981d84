/*
 * oncall.h - the on-call comment on the upstream PR when a crcr check run completes with a failure
 * (upstream reference §2.5 "Oncall ping"): pure functions building its text, its outbox row and
 * its keys, and recognising the marker in existing comments. No I/O.
 *
 * The comment, in upstream's shape (the marker is its first line):
 *   <!-- crcr-oncall:OWNER/REPO -->
 *   ## :x: CRCR downstream CI failure
 *   The downstream CI of `OWNER/REPO` failed on commit `abc1234`.
 *   @oncall1 @org/team please investigate.
 *   | Check Run | Commit | Conclusion |
 *   |---|---|---|
 *   | [`crcr/OWNER/REPO/workflow/job`](https://...) | `abc1234` | `failure` |
 *
 * Security (docs/security.md): the workflow and job names inside the check-run name are written
 * by the downstream repository. Every such string goes through oncall_text(): printable ASCII
 * only, without ` | < > @ \ [ ] & (each replaced by '_', as is every control character and every
 * non-ASCII character), at most ONCALL_TEXT_MAX bytes, and always inside a code span, so it can
 * neither mention anyone, reference an issue, autolink, break the table or the code span, nor
 * inject HTML. The link is written only for an https:// URL of safe characters. On-calls come
 * from the allowlist: only valid GitHub handles (user, or org/team) are mentioned. The marker
 * found on a PR counts only at the start of a comment of this App or of a trusted login
 * (oncall_comment_is_marker, CRCR_ONCALL_TRUSTED_AUTHORS).
 */
#ifndef CRCR_ONCALL_H
#define CRCR_ONCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "json.h"
#include "crcr_limits.h"

/* Bytes of one downstream-controlled string shown in a comment (longer ones end in "..."). */
#define ONCALL_TEXT_MAX 200u
/* Longest details URL rendered as a link (longer ones are shown without a link). */
#define ONCALL_URL_MAX 512u
/* Largest comment text: 64 mentions of at most 141 bytes, the table and the headings. */
#define ONCALL_COMMENT_MAX (16u * 1024u)
/* Largest outbox row body: the comment JSON-escaped (at most 6 bytes per byte) and the rest. */
#define ONCALL_ROW_MAX (6u * ONCALL_COMMENT_MAX + 512u)
/* Largest ordering or record key. */
#define ONCALL_KEY_MAX 512u

/* What the comment says. Strings are borrowed; NULL counts as "". */
typedef struct oncall_failure {
    const char *repo;           /* downstream owner/repo (the verified identity) */
    const char *check_name;     /* the check run's name (downstream text: sanitised) */
    const char *details_url;    /* the downstream run (linked when https) */
    const char *head_sha;       /* upstream commit (hex; shown shortened to 7) */
    const char *conclusion;     /* one of oncall_alerting()'s */
    const char *const *oncalls; /* as written in the allowlist, with or without '@' */
    size_t n_oncalls;
} oncall_failure;

/* True for the conclusions that ping the on-calls: failure, cancelled, timed_out. */
bool oncall_alerting(const char *conclusion);

/* Appends "@handle" for an on-call written as "handle", "@handle", "org/team" or "@org/team" with
 * GitHub's name rules (ids.h); false (nothing appended) for anything else. */
bool oncall_mention(const char *oncall, buf_t *out);

/* Appends `s` sanitised as described above (NULL: nothing). */
crcr_err oncall_text(const char *s, buf_t *out);

/* Appends the marker "<!-- crcr-oncall:REPO -->". */
crcr_err oncall_marker(const char *repo, buf_t *out);

/* Whether `text` starts with the marker of `repo` (after blanks: space, tab, CR, LF; the repo
 * compared case-insensitively). A marker further down a comment does not count: anyone can
 * quote one. */
bool oncall_marker_leads(const char *text, size_t len, const char *repo);

/* Whether `comment` (an issue comment object of GitHub's API, borrowed) is the on-call comment of
 * `repo`: its body starts with the marker (oncall_marker_leads) and it was written by this App
 * (performed_via_github_app.id equals `app_id`, or its client_id when `app_id` is a client id
 * "Iv...") or by a login in `trusted` (user.login; a comma-separated list, blanks around names
 * ignored, compared case-insensitively; NULL or "" for none). A marker written by anyone else
 * (any GitHub user can comment on a PR) does not stop the on-call comment. */
bool oncall_comment_is_marker(const jv *comment, const char *repo, const char *app_id,
                              const char *trusted);

/* Appends the comment. CRCR_E_NOT_FOUND (nothing appended) when no on-call is a valid handle,
 * CRCR_E_INVALID when the repo is not a valid owner/repo. */
crcr_err oncall_comment(const oncall_failure *f, buf_t *out);

/* Appends the outbox row body {"pr":N,"repo":"owner/repo","body":"<comment>"}. */
crcr_err oncall_row_body(int64_t pr, const char *repo, const char *comment, size_t len, buf_t *out);

/* A row body read back. */
typedef struct oncall_row {
    int64_t pr;
    char repo[CRCR_REPO_NAME_MAX];
    jv *doc;             /* owned: the parsed body */
    const char *comment; /* borrowed from doc */
} oncall_row;
/* Reads a row body: pr > 0, a valid owner/repo and a non-empty comment, else false (and *out
 * holds nothing to free). On true the caller releases *out with oncall_row_free. */
bool oncall_row_parse(const char *body, size_t len, oncall_row *out);
void oncall_row_free(oncall_row *row);

/* Appends the outbox ordering key "oncall:PR:repo" (repo lower-cased): rows of one (PR, repo)
 * are carried out one after another. */
crcr_err oncall_seq_key(int64_t pr, const char *repo, buf_t *out);

/* Appends the store kv key recording that the comment is on the PR:
 * "oncall:UPSTREAM#PR:repo" (both repos lower-cased). */
crcr_err oncall_record_key(const char *upstream, int64_t pr, const char *repo, buf_t *out);

#endif
