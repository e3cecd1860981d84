/*
 * checks.h - check runs on the upstream PR and the re-run requests that come back from them,
 * in the upstream relay's exact shapes (upstream reference §2.5, §2.3.5):
 *   name         crcr/{downstream repo}/{workflow name}/{job name}  (".../{workflow}" without job)
 *   external_id  "{run_id}:{pr_number}", or "{run_id}" without a PR
 *   details_url  https://github.com/{downstream repo}/actions/runs/{run_id} (a Buildkite run:
 *                its build URL, checks_run.details_url; on GitHub Enterprise Server the web host
 *                https://HOST instead of https://github.com, checks_run.web_url)
 *   output       {"title": "In progress" | "Success" | "Failure" | "Timed_out" | ... | "Completed",
 *                 "summary": "{repo} workflow: {details_url}"}
 *                crcr adds (§3.12, §3.13): the title suffix " - tested with OWNER/REPO#N @ sha7"
 *                and a summary line "Tested with OWNER/REPO#N @ sha7 (ref)." when the dispatch
 *                carried a Depends-On pair, and a summary paragraph `note` (a pair that could not
 *                be tested, a run ended because a newer commit was dispatched)
 * Check runs are always created, never patched: GitHub shows the newest run of a name.
 */
#ifndef CRCR_CHECKS_H
#define CRCR_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "crcr_limits.h"
#include "err.h"

/* Longest details_url built here: a web host (from GITHUB_API_URL, at most 2048 bytes) +
 * "/{repo}/actions/runs/{run_id}". A given details_url (Buildkite) is the caller's. */
#define CHECKS_DETAILS_URL_MAX (2048u + CRCR_REPO_NAME_MAX + 64u)

typedef struct checks_run {
    const char *repo;          /* downstream owner/repo (the OIDC-verified identity) */
    const char *workflow_name; /* as reported */
    const char *job_name;      /* "" or NULL when none */
    const char *head_sha;      /* upstream commit */
    const char *status;        /* in_progress | completed */
    const char *conclusion;    /* completed only; NULL allowed */
    const char *run_id;        /* text (ids_run_id_valid); GitHub's runs are numbers */
    int64_t pr_number;         /* 0 when none */
    const char *details_url;   /* NULL: the GitHub Actions run URL above */
    const char *web_url;       /* GitHub's web host (config_web_url); NULL: https://github.com */
    const char *pair;          /* "OWNER/REPO#N @ sha7": the Depends-On pair tested, NULL: none */
    const char *pair_ref;      /* its head ref, for the summary; NULL: none */
    const char *note;          /* one more paragraph of the summary, NULL: none */
} checks_run;

/* Appends the check run's name. */
crcr_err checks_name(const checks_run *r, buf_t *out);

/* Appends the outbox ordering key of this check run: "check:{head_sha}:{name}". GitHub shows the
 * newest run of a name on a commit, so runs of one name must reach it in the order they were
 * decided (an in_progress retried after its completed would otherwise win). */
crcr_err checks_seq_key(const checks_run *r, buf_t *out);

/* Appends the details_url: r->details_url, else {web_url}/{repo}/actions/runs/{run_id}. */
crcr_err checks_details_url(const checks_run *r, buf_t *out);

/* Appends the POST /repos/{upstream}/check-runs request body. */
crcr_err checks_body(const checks_run *r, buf_t *out);

/* Reads a crcr check run name back: true when it starts with "crcr/" and has at least three
 * '/'-separated parts after it; the downstream repo (first two parts) goes to `repo`. */
bool checks_parse_name(const char *name, char *repo, size_t reposz);

/* The run id from an external_id ("{run_id}:{pr}" or "{run_id}"): > 0, or 0 when absent/invalid. */
int64_t checks_parse_external_id(const char *external_id);

#endif
