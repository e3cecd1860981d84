/*
 * report_send.c - the sending half of `crcr report`: mints the GitHub Actions OIDC token (one GET,
 * what @actions/core's getIDToken() does) and POSTs the callback body to the relay over
 * http_client.h; see report.h. Retry timing follows the relay's contract: 429 and 5xx and
 * transport errors are retried (callbacks are idempotent in crcr), waiting Retry-After when given.
 */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
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
        if (jv_is_str(val) &&
            http_header_token_ok(jv_str(val), jv_str_len(val), REPORT_MAX_OIDC_TOKEN)) {
            run->jwt = strdup(jv_str(val));
            if (run->jwt) {
                log_add_secret(run->jwt);
                run->minted_ms = clock_mono_ms();
                res = STEP_OK;
            } else {
                snprintf(run->why, sizeof(run->why), "out of memory");
            }
        } else {
            snprintf(run->why, sizeof(run->why),
                     "the OIDC token endpoint's answer has no usable \"value\"");
        }
        jv_free(doc);
    }
    if (answer.data)
        OPENSSL_cleanse(answer.data, answer.len); /* held the token */
    buf_free(&answer);
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
        if (!run->jwt || clock_mono_ms() - run->minted_ms > REPORT_REMINT_AFTER_MS) {
            drop_jwt(run);
            s = mint(run);
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
        fprintf(stderr, REPORT_PROG ": %s; retrying in %ld s\n", run->why, wait_s);
        sleep_ms(wait_s * 1000);
    }
}

int report_send(const report_opts *o, const report_env *env, const char *url, const buf_t *body)
{
    if (!env->token_url || !*env->token_url || !env->token_secret || !*env->token_secret) {
        fprintf(stderr, "Error: OIDC token request variables are missing: does the job have "
                        "permissions: id-token: write?\n");
        return 1;
    }
    if (strlen(env->token_url) > REPORT_MAX_URL / 2 || !config_url_allowed(env->token_url)) {
        fprintf(stderr, "Error: ACTIONS_ID_TOKEN_REQUEST_URL must be an https:// URL\n");
        return 1;
    }
    if (!http_header_token_ok(env->token_secret, strlen(env->token_secret),
                              REPORT_MAX_REQUEST_TOKEN)) {
        fprintf(stderr, "Error: ACTIONS_ID_TOKEN_REQUEST_TOKEN is malformed\n");
        return 1;
    }

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
    fprintf(stderr, REPORT_PROG ": POST %s (%s, %zu bytes)\n", url, o->status, body->len);
    int rc = send_with_retries(&run);
    report_run_free(&run);
    curl_global_cleanup();
    return rc;
}
