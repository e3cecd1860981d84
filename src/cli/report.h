/*
 * report.h - `crcr report`: the downstream side, run by a downstream repo's GitHub Actions job to
 * report a run's state back to the relay (POST /github/callback).
 *
 * It replaces the upstream composite action `cross-repo-ci-relay-callback` and its
 * report_callback.py: the request body is byte-for-byte what that script sends (the echoed
 * `client_payload` plus a `workflow` object, serialised like Python's json.dumps), so a downstream
 * can switch without the relay seeing a difference. On top of it, crcr mints the OIDC token
 * itself and retries network errors, 429 and 5xx within a total time budget, honouring
 * Retry-After (safe because crcr's callbacks are idempotent).
 *
 * On a Buildkite agent (BUILDKITE=true) it maps Buildkite's variables as upstream's
 * report_callback_buildkite.sh does (the run is the build, the attempt the retry count + 1, the
 * workflow the pipeline slug, the job the step's label or key, the URL the build's) and mints the
 * token with `buildkite-agent oidc request-token --audience <audience> --lifetime 300`.
 */
#ifndef CRCR_REPORT_H
#define CRCR_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* The command's name in messages. */
#define REPORT_PROG "crcr report"
/* Longest URL handled (callback URL, token URL with the audience appended). */
#define REPORT_MAX_URL 8192u
/* Largest GITHUB_EVENT_PATH file read (GitHub's own cap on webhook payloads). */
#define REPORT_MAX_EVENT_BYTES (25u * 1024u * 1024u)
/* Largest request body built (the relay's default CRCR_MAX_BODY). */
#define REPORT_MAX_BODY (25u * 1024u * 1024u)
/* Largest --test-results text. */
#define REPORT_MAX_TEST_RESULTS (1024u * 1024u)
/* Longest --conclusion, --event-type, --check-run-id, run id / attempt values. */
#define REPORT_MAX_SHORT 128u
/* Longest --artifact-url, workflow name, server URL. */
#define REPORT_MAX_TEXT 4096u
/* Default and largest --max-time (total seconds, retries included). The default leaves room for
 * the longest wait the relay asks for (a 429's Retry-After is at most 60 s, its rate window) and
 * the attempts around it; the action's max-time default is the same (docs/downstream.md). */
#define REPORT_DEFAULT_MAX_TIME_S 120L
#define REPORT_MAX_MAX_TIME_S 86400L
/* Default OIDC audience (the relay's CRCR_OIDC_AUDIENCE default). */
#define REPORT_DEFAULT_AUDIENCE "pytorch-cross-repo-ci-relay"

/* The command-line options. Strings are borrowed (argv / environment). NULL means "not given";
 * conclusion, test_results, artifact_url, check_run_id, delivery_id and event_type are trimmed of
 * surrounding white space and an empty value counts as not given, as in report_callback.py (a
 * GitHub Actions input left at its '' default). */
typedef struct {
    const char *status;            /* "in_progress" | "completed" (required) */
    const char *conclusion;        /* required with completed; always null for in_progress */
    const char *job_name;          /* NULL: report_env.job (GITHUB_JOB) */
    const char *test_results;      /* JSON text, sent parsed as workflow.test_results */
    const char *artifact_url;      /* workflow.artifact_url */
    const char *callback_url;      /* where to POST (trailing '/' stripped) */
    const char *callback_url_from; /* where it came from: "--callback-url" or
                                      "CRCR_CALLBACK_URL", for messages */
    const char *delivery_id;       /* self-report: the upstream commit SHA tested */
    const char *event_type;        /* self-report: "nightly" | "periodic" */
    const char *check_run_id;      /* NULL/empty: "<run_id>-<run_attempt>" */
    const char *audience;          /* OIDC audience, default REPORT_DEFAULT_AUDIENCE */
    long max_time_s;               /* total budget in seconds, retries included */
    bool dry_run;                  /* print the body and the URL, send nothing */
} report_opts;

/* The CI environment, borrowed strings (NULL when unset), except attempt_buf. */
typedef struct {
    const char *event_path;   /* GITHUB_EVENT_PATH */
    const char *run_id;       /* GITHUB_RUN_ID */
    const char *run_attempt;  /* GITHUB_RUN_ATTEMPT */
    const char *workflow;     /* GITHUB_WORKFLOW */
    const char *job;          /* GITHUB_JOB */
    const char *server_url;   /* GITHUB_SERVER_URL, default https://github.com */
    const char *repository;   /* GITHUB_REPOSITORY (owner/repo) */
    const char *token_url;    /* ACTIONS_ID_TOKEN_REQUEST_URL */
    const char *token_secret; /* ACTIONS_ID_TOKEN_REQUEST_TOKEN (never printed) */

    /* Buildkite (BUILDKITE=true): run_id is BUILDKITE_BUILD_ID (the build's UUID, as upstream's
     * wrapper sends it), run_attempt BUILDKITE_RETRY_COUNT + 1 (in attempt_buf), workflow
     * BUILDKITE_PIPELINE_SLUG, job BUILDKITE_LABEL, else BUILDKITE_STEP_KEY, else "unknown";
     * repository is not used. */
    bool buildkite;
    const char *run_url;        /* workflow.url verbatim: BUILDKITE_BUILD_URL; NULL: GitHub's */
    const char *exit_status;    /* BUILDKITE_COMMAND_EXIT_STATUS: the conclusion when none given */
    const char *retry_count;    /* BUILDKITE_RETRY_COUNT as given (for the message) */
    const char *client_payload; /* CLIENT_PAYLOAD: the dispatch's client_payload JSON, read when
                                   there is no GITHUB_EVENT_PATH (upstream's variable) */
    char attempt_buf[24];
} report_env;

/* A getter of environment variables (getenv, or a table in tests). */
typedef const char *(*report_getenv_fn)(const char *name);

/* Fills *env from `get`: the GitHub Actions variables, or Buildkite's when BUILDKITE is "true". */
void report_env_load(report_env *env, report_getenv_fn get);

/* The conclusion of a Buildkite step from BUILDKITE_COMMAND_EXIT_STATUS: "success" for "0",
 * "failure" for any other value, NULL when it is unset or empty. */
const char *report_buildkite_conclusion(const report_env *env);

/*
 * Builds the callback body (pure: no I/O, the clock is `now_ms`).
 *
 * `event_json[0..n)` is the GITHUB_EVENT_PATH file's content (on Buildkite without an event file:
 * the CLIENT_PAYLOAD text, the client_payload itself); it is only read outside self-report mode
 * (may be NULL in self-report mode). The body is event.client_payload with key order and
 * every field (callback_token, trimmed, ...) kept, or the self-report envelope, plus the key
 * "workflow" (replacing an existing one in place, as Python's dict assignment does), serialised
 * exactly as Python's json.dumps() would (", " and ": " separators, non-ASCII as \uXXXX, floats in
 * shortest repr form).
 *
 * Appends to `out` (the caller owns and frees it). Returns CRCR_OK; CRCR_E_INVALID for a problem
 * with the options (bad status, combination, --test-results not JSON), which the command answers
 * with exit code 2; CRCR_E_CONFIG for a problem with the environment or event file (missing
 * variable, no client_payload object); CRCR_E_TOO_LARGE when the body passes `out`'s cap;
 * CRCR_E_NOMEM. On error `err` holds one line and `out` may hold a partial body.
 */
crcr_err report_build_body(const report_opts *o, const report_env *env, const char *event_json,
                           size_t n, int64_t now_ms, buf_t *out, char *err, size_t errsz);

/*
 * Appends the serialisation of the JSON text `json[0..n)` in Python json.dumps() form to `out`
 * (the caller owns it). CRCR_E_INVALID when the text does not parse. Exposed for tests.
 */
crcr_err report_pydump_text(const char *json, size_t n, buf_t *out);

/*
 * Seconds to wait before retry number `attempt` (0 for the first retry): the Retry-After value
 * when the answer carried one (`retry_after_s` >= 0, capped at 60), else 1, 2, 4, 8, ... capped
 * at 60. Pure; exposed for tests.
 */
long report_retry_delay_s(unsigned attempt, long retry_after_s);

/*
 * Runs `crcr report OPTIONS`. `argv` holds the words after "crcr report" (argv[0] is the first
 * option). Reads the environment described above and $CRCR_CALLBACK_URL, $CRCR_CHECK_RUN_ID.
 * Returns the exit code: 0 when the relay answered 2xx (printed as "crcr report: HTTP <code>
 * <body>"), 1 for any other answer, a transport failure after the time budget, or a broken
 * environment (printed on stderr), 2 for a usage error. Calls curl_global_init()/cleanup itself.
 */
int report_main(int argc, char **argv);

/*
 * The sending half of report_main (report_send.c): checks the OIDC token request variables of
 * `env` (on Buildkite: runs buildkite-agent instead), mints a token, POSTs `body` to `url`
 * (already vetted) and retries within o->max_time_s.
 * Prints progress and the outcome; returns the exit code as report_main does. Calls
 * curl_global_init()/cleanup itself.
 */
int report_send(const report_opts *o, const report_env *env, const char *url, const buf_t *body);

#endif
