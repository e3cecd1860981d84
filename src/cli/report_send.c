/*
 * report_send.c - the sending half of `crcr report`: mints the GitHub Actions OIDC token (one GET,
 * what @actions/core's getIDToken() does; on Buildkite the output of `buildkite-agent oidc
 * request-token`) and POSTs the callback body to the relay over http_client.h; see report.h.
 * Retry timing follows the relay's contract: 429 and 5xx and transport errors are retried
 * (callbacks are idempotent in crcr), waiting Retry-After when given.
 */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "clock.h"
#include "config.h"
#include "http_client.h"
#include "json.h"
#include "log.h"

/* Longest OIDC token accepted from the token endpoint (GitHub's are about 1-2 KB). */
#define REPORT_MAX_OIDC_TOKEN 16384u
/* Most of any HTTP answer kept (token endpoint or relay); the rest is dropped. */
#define REPORT_MAX_RESPONSE (64u * 1024u)
/* Longest value of ACTIONS_ID_TOKEN_REQUEST_TOKEN. */
#define REPORT_MAX_REQUEST_TOKEN 8192u
/* Connect timeout and whole-request timeout of one attempt (both also bounded by what is left of
 * --max-time). The relay answers a callback in milliseconds; a hung attempt is retried. */
#define REPORT_CONNECT_TIMEOUT_MS 10000L
#define REPORT_ATTEMPT_TIMEOUT_MS 30000L
/* Longest wait between two attempts, also the cap on Retry-After. */
#define REPORT_MAX_RETRY_WAIT_S 60L
/* GitHub's OIDC tokens live 5 minutes: mint a new one before a retry once this one is older. */
#define REPORT_REMINT_AFTER_MS (4L * 60L * 1000L)
/* The Buildkite agent and the lifetime asked of its tokens (upstream's wrapper: 300 s). */
#define REPORT_BUILDKITE_AGENT "buildkite-agent"
#define REPORT_BUILDKITE_LIFETIME "300"

extern char **environ;

long report_retry_delay_s(unsigned attempt, long retry_after_s)
{
    if (retry_after_s >= 0)
        return retry_after_s > REPORT_MAX_RETRY_WAIT_S ? REPORT_MAX_RETRY_WAIT_S : retry_after_s;
    if (attempt >= 6)
        return REPORT_MAX_RETRY_WAIT_S;
    long d = 1L << attempt;
    return d > REPORT_MAX_RETRY_WAIT_S ? REPORT_MAX_RETRY_WAIT_S : d;
}

/* ------------------------------------------------------------------------------------------ */
/* HTTP                                                                                        */

/*
 * One request: GET when `body` is NULL, else POST of the JSON body, with "Authorization: <scheme>
 * <credential>", taking at most `timeout_ms`. The first REPORT_MAX_RESPONSE bytes of the answer
 * go to `answer` (the caller's, capped at that size). Fills *a; returns http_exchange's result.
 */
static crcr_err http_do(const char *url, const char *scheme, const char *credential,
                        const buf_t *body, long timeout_ms, buf_t *answer, http_answer *a)
{
    const char *hdrs[] = {"Accept: application/json",
                          body ? "Content-Type: application/json" : NULL, NULL};
    http_call rq = {.method = body ? "POST" : "GET",
                    .url = url,
                    .allow_http = true,
                    .user_agent = "crcr-report/" CRCR_VERSION,
                    .headers = hdrs,
                    .auth_scheme = scheme,
                    .auth_credential = credential,
                    .body = body ? buf_cstr(body) : NULL,
                    .body_len = body ? body->len : 0,
                    .connect_timeout_ms = timeout_ms < REPORT_CONNECT_TIMEOUT_MS
                                              ? timeout_ms
                                              : REPORT_CONNECT_TIMEOUT_MS,
                    .timeout_ms = timeout_ms,
                    .truncate = true};
    a->body = answer;
    crcr_err err = http_exchange(NULL, &rq, a);
    if (err == CRCR_E_INVALID)
        a->permanent = true;
    return err;
}

/* True for answers worth another try: 429 and 5xx (transport failures are retried too). */
static bool retryable_status(long status)
{
    return status == 429 || (status >= 500 && status <= 599);
}

/* Prints `text[0..n)` to `to` with secrets scrubbed, then a newline. */
static void print_scrubbed(FILE *to, const char *text, size_t n)
{
    buf_t s;
    buf_init(&s, REPORT_MAX_RESPONSE * 2);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    if (log_scrub(text, n, &s) == CRCR_OK)
        fprintf(to, "%s\n", buf_cstr(&s));
    else
        fputs("(answer not shown)\n", to);
    buf_free(&s);
}

/* ------------------------------------------------------------------------------------------ */
/* Token minting and sending                                                                   */

typedef enum { STEP_OK, STEP_RETRY, STEP_FAIL } step_result;

/* The state of one `crcr report` run. */
typedef struct {
    const report_opts *o;
    const report_env *env;
    const char *callback_url;
    const buf_t *body;
    int64_t deadline_ms; /* monotonic */
    char *jwt;           /* owned; wiped and freed by report_run_free */
    int64_t minted_ms;   /* monotonic time of the mint */
    long retry_after_s;  /* of the last answer, -1 when none */
    char why[HTTP_ERROR_MAX + 96];
    bool answered;    /* the relay answered this attempt (last_* are valid) */
    bool unreachable; /* this attempt's POST got no answer (connect, DNS, timeout) */
    long last_status; /* of the relay's last answer, 0 when none */
    buf_t last_body;  /* the relay's last answer body */
} report_run;

static void drop_jwt(report_run *run);

static void report_run_free(report_run *run)
{
    drop_jwt(run);
    buf_free(&run->last_body);
}

/* The timeout of the next request: what is left of the budget, at most one attempt's worth. */
static long attempt_timeout_ms(const report_run *run)
{
    int64_t r = run->deadline_ms - clock_mono_ms();
    if (r > REPORT_ATTEMPT_TIMEOUT_MS)
        r = REPORT_ATTEMPT_TIMEOUT_MS;
    return r > 0 ? (long)r : 0;
}

/* Keeps `tok[0..n)` (trailing blanks and line ends removed) as run->jwt. STEP_OK, or STEP_FAIL
 * with the reason when it is not a usable token. */
static step_result keep_token(report_run *run, const char *tok, size_t n, const char *from)
{
    while (n > 0 && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
        n--;
    if (n == 0 || !http_header_token_ok(tok, n, REPORT_MAX_OIDC_TOKEN)) {
        snprintf(run->why, sizeof(run->why), "%s gave no usable token", from);
        return STEP_FAIL;
    }
    run->jwt = malloc(n + 1);
    if (!run->jwt) {
        snprintf(run->why, sizeof(run->why), "out of memory");
        return STEP_FAIL;
    }
    memcpy(run->jwt, tok, n);
    run->jwt[n] = '\0';
    log_add_secret(run->jwt);
    run->minted_ms = clock_mono_ms();
    return STEP_OK;
}

/* Mints the OIDC token: GET <url>&audience=<aud> with "Authorization: bearer <request token>";
 * the answer is {"value": "<jwt>"}. On STEP_OK run->jwt holds it. */
static step_result mint(report_run *run)
{
    const char *aud = run->o->audience ? run->o->audience : REPORT_DEFAULT_AUDIENCE;
    buf_t url;
    buf_init(&url, REPORT_MAX_URL);
    crcr_err e = buf_puts(&url, run->env->token_url);
    if (!e)
        e = http_add_query(&url, "audience", aud);
    if (e) {
        buf_free(&url);
        snprintf(run->why, sizeof(run->why), "%s",
                 e == CRCR_E_NOMEM ? "out of memory" : "the OIDC token request URL is too long");
        return STEP_FAIL;
    }
    buf_t answer;
    buf_init(&answer, REPORT_MAX_RESPONSE);
    http_answer r;
    e = http_do(buf_cstr(&url), "bearer", run->env->token_secret, NULL, attempt_timeout_ms(run),
                &answer, &r);
    buf_free(&url);

    step_result res = STEP_FAIL;
    run->retry_after_s = r.retry_after_s;
    if (e) {
        snprintf(run->why, sizeof(run->why), "OIDC token request failed: %s", r.error);
        res = r.permanent ? STEP_FAIL : STEP_RETRY;
    } else if (r.status < 200 || r.status > 299) {
        snprintf(run->why, sizeof(run->why), "OIDC token request answered HTTP %ld", r.status);
        res = retryable_status(r.status) ? STEP_RETRY : STEP_FAIL;
    } else {
        jv *doc = jv_parse(buf_cstr(&answer), answer.len, NULL, 0);
        const jv *val = jv_get(doc, "value");
        if (jv_is_str(val))
            res = keep_token(run, jv_str(val), jv_str_len(val), "the OIDC token endpoint");
        else
            snprintf(run->why, sizeof(run->why),
                     "the OIDC token endpoint's answer has no usable \"value\"");
        jv_free(doc);
    }
    if (answer.data)
        OPENSSL_cleanse(answer.data, answer.len); /* held the token */
    buf_free(&answer);
    return res;
}

/* Reads the agent's stdout (fd) into out[0..cap) until EOF or the attempt's deadline. Returns
 * the bytes read, or -1 on timeout, -2 when it printed more than cap. */
static long read_agent(report_run *run, int fd, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        long left = attempt_timeout_ms(run);
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (pr < 0 && errno != EINTR)
            return -1;
        if (pr <= 0)
            continue;
        if (n == cap)
            return -2;
        ssize_t r = read(fd, out + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return (long)n;
        n += (size_t)r;
    }
}

/* Mints a Buildkite OIDC token: `buildkite-agent oidc request-token --audience <aud> --lifetime
 * 300`, its stdout the token (its stderr goes to the job's log). On STEP_OK run->jwt holds it.
 * A missing agent or a failing one is final; one that outlives the attempt is killed and retried.
 */
static step_result mint_buildkite(report_run *run)
{
    const char *aud = run->o->audience ? run->o->audience : REPORT_DEFAULT_AUDIENCE;
    char *argv[] = {
        REPORT_BUILDKITE_AGENT,    "oidc", "request-token", "--audience", (char *)aud, "--lifetime",
        REPORT_BUILDKITE_LIFETIME, NULL};
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(run->why, sizeof(run->why), "cannot run %s: %s", REPORT_BUILDKITE_AGENT,
                 strerror(errno));
        return STEP_FAIL;
    }
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    pid_t pid;
    int se = posix_spawnp(&pid, REPORT_BUILDKITE_AGENT, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (se != 0) {
        close(fds[0]);
        snprintf(run->why, sizeof(run->why), "cannot run %s (is it on PATH?): %s",
                 REPORT_BUILDKITE_AGENT, strerror(se));
        return STEP_FAIL;
    }
    char tok[REPORT_MAX_OIDC_TOKEN + 2];
    long n = read_agent(run, fds[0], tok, sizeof(tok));
    close(fds[0]);
    if (n < 0)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    step_result res = STEP_FAIL;
    if (n == -1) {
        snprintf(run->why, sizeof(run->why), "%s oidc request-token did not answer in time",
                 REPORT_BUILDKITE_AGENT);
        res = STEP_RETRY;
    } else if (n == -2) {
        snprintf(run->why, sizeof(run->why), "%s printed more than %u bytes",
                 REPORT_BUILDKITE_AGENT, REPORT_MAX_OIDC_TOKEN);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(run->why, sizeof(run->why), "%s oidc request-token failed (exit status %d)",
                 REPORT_BUILDKITE_AGENT, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    } else {
        res = keep_token(run, tok, (size_t)n, REPORT_BUILDKITE_AGENT " oidc request-token");
    }
    OPENSSL_cleanse(tok, sizeof(tok));
    return res;
}

/* POSTs the body once. STEP_OK on 2xx (printed), STEP_RETRY for 429/5xx/transport errors,
 * STEP_FAIL for any other answer; the answer is kept in run->last_*. */
static step_result post_once(report_run *run)
{
    http_answer r;
    crcr_err e = http_do(run->callback_url, "Bearer", run->jwt, run->body, attempt_timeout_ms(run),
                         &run->last_body, &r);
    step_result res;
    run->retry_after_s = r.retry_after_s;
    run->unreachable = e != CRCR_OK && !r.permanent; /* not for a TLS trust failure */
    if (e) {
        snprintf(run->why, sizeof(run->why), "callback request failed: %s", r.error);
        res = r.permanent ? STEP_FAIL : STEP_RETRY;
    } else {
        run->answered = true;
        run->last_status = r.status;
        snprintf(run->why, sizeof(run->why), "the relay answered HTTP %ld", r.status);
        if (r.status >= 200 && r.status <= 299)
            res = STEP_OK;
        else
            res = retryable_status(r.status) ? STEP_RETRY : STEP_FAIL;
    }
    return res;
}

/* Prints the final failure: the relay's answer when there was one, else the last reason. */
static int report_failure(const report_run *run)
{
    if (run->answered) {
        fprintf(stderr, "Error: Callback server returned HTTP %ld.\n", run->last_status);
        if (run->last_body.len > 0)
            print_scrubbed(stderr, run->last_body.data, run->last_body.len);
    } else if (run->unreachable) {
        fprintf(stderr, "Error: %s: is the relay reachable at %s? (the URL came from %s)\n",
                run->why, run->callback_url,
                run->o->callback_url_from ? run->o->callback_url_from : "--callback-url");
    } else {
        fprintf(stderr, "Error: %s\n", run->why);
    }
    return 1;
}

/* Wipes and frees the current OIDC token. */
static void drop_jwt(report_run *run)
{
    if (run->jwt) {
        OPENSSL_cleanse(run->jwt, strlen(run->jwt));
        free(run->jwt);
        run->jwt = NULL;
    }
}

/* The attempt loop: mint (again when the token is old), POST, retry within the budget. */
static int send_with_retries(report_run *run)
{
    for (unsigned attempt = 0;; attempt++) {
        step_result s = STEP_OK;
        if (attempt_timeout_ms(run) <= 0) {
            fprintf(stderr, REPORT_PROG ": the --max-time budget of %ld s is spent\n",
                    run->o->max_time_s);
            return report_failure(run);
        }
        run->answered = false;
        run->unreachable = false;
        if (!run->jwt || clock_mono_ms() - run->minted_ms > REPORT_REMINT_AFTER_MS) {
            drop_jwt(run);
            s = run->env->buildkite ? mint_buildkite(run) : mint(run);
        }
        if (s == STEP_OK) {
            s = post_once(run);
            if (s == STEP_OK) {
                printf("crcr report: HTTP %ld%s", run->last_status,
                       run->last_body.len > 0 ? " " : "\n");
                if (run->last_body.len > 0)
                    print_scrubbed(stdout, run->last_body.data, run->last_body.len);
                fflush(stdout);
                return 0;
            }
        }
        if (s == STEP_FAIL)
            return report_failure(run);
        long wait_s = report_retry_delay_s(attempt, run->retry_after_s);
        if (clock_mono_ms() + wait_s * 1000 >= run->deadline_ms) {
            fprintf(stderr, REPORT_PROG ": %s; giving up (--max-time %ld s)\n", run->why,
                    run->o->max_time_s);
            return report_failure(run);
        }
        /* The end of the wait is taken before it is announced: a test that moves the clock when
         * it reads the announcement (clock.h) always shortens this wait. */
        int64_t until = clock_mono_ms() + wait_s * 1000;
        fprintf(stderr, REPORT_PROG ": %s; retrying in %ld s\n", run->why, wait_s);
        clock_sleep_until(until);
    }
}

/* Checks the GitHub Actions token request variables; prints why and returns false when they
 * cannot be used. */
static bool actions_token_env_ok(const report_env *env)
{
    if (!env->token_url || !*env->token_url || !env->token_secret || !*env->token_secret) {
        fprintf(stderr, "Error: OIDC token request variables are missing: does the job have "
                        "permissions: id-token: write?\n");
        return false;
    }
    if (strlen(env->token_url) > REPORT_MAX_URL / 2 || !config_url_allowed(env->token_url)) {
        fprintf(stderr, "Error: ACTIONS_ID_TOKEN_REQUEST_URL must be an https:// URL\n");
        return false;
    }
    if (!http_header_token_ok(env->token_secret, strlen(env->token_secret),
                              REPORT_MAX_REQUEST_TOKEN)) {
        fprintf(stderr, "Error: ACTIONS_ID_TOKEN_REQUEST_TOKEN is malformed\n");
        return false;
    }
    return true;
}

int report_send(const report_opts *o, const report_env *env, const char *url, const buf_t *body)
{
    /* On Buildkite the agent mints the token: there are no request variables to check. */
    if (!env->buildkite && !actions_token_env_ok(env))
        return 1;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "Error: cannot initialise libcurl\n");
        return 1;
    }
    report_run run = {0};
    run.o = o;
    run.env = env;
    run.callback_url = url;
    run.body = body;
    run.deadline_ms = clock_mono_ms() + (int64_t)o->max_time_s * 1000;
    run.retry_after_s = -1;
    buf_init(&run.last_body, REPORT_MAX_RESPONSE);
    fprintf(stderr, REPORT_PROG ": POST %s (%s, %zu bytes; the URL from %s)\n", url, o->status,
            body->len, o->callback_url_from ? o->callback_url_from : "--callback-url");
    int rc = send_with_retries(&run);
    report_run_free(&run);
    curl_global_cleanup();
    return rc;
}
