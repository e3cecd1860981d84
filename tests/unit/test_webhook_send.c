/*
 * test_webhook_send.c - `crcr webhook send` (src/cli/webhook_send.c) against a receiver served on
 * 127.0.0.1 by the unit tests' HTTP server (support/ut_httpd.h): the request is the one GitHub
 * would send (headers, the file's bytes, an HMAC-SHA256 signature checked here with OpenSSL
 * directly), the answer is printed with the exit status of its class, options in both forms, the
 * defaults (a UUID v4 delivery id, the secret from GITHUB_APP_SECRET), standard input, and every
 * usage and file error with its exit status.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <unistd.h>

#include "crcr_limits.h"
#include "log.h"
#include "unit_support.h"
#include "ut_httpd.h"
#include "webhook_send.h"

#define PAYLOAD "{\"action\":\"synchronize\",\"number\":7}\n"

/* ---------------------------------------------------------------------------------------- */
/* The receiver. */

typedef struct receiver {
    pthread_mutex_t mu;
    int status;          /* answered */
    buf_t answer;        /* answered body */
    unsigned n_requests; /* seen */
    char event[128], delivery[256], sig[128], ctype[128], agent[128];
    buf_t body;
} receiver;

typedef struct fixture {
    ut_dir dir;
    receiver r;
    ut_httpd *srv;
    char url[96];
} fixture;

static void copy_header(const ut_httpd_req *req, const char *name, char *out, size_t outsz)
{
    const char *v = ut_httpd_header(req, name);
    snprintf(out, outsz, "%s", v ? v : "(none)");
}

static void receive(void *ctx, const ut_httpd_req *req, ut_httpd_resp *resp)
{
    receiver *r = ctx;
    if (strcmp(req->method, "POST") != 0 || strcmp(req->path, "/github/webhook") != 0) {
        ut_httpd_reply(resp, 404, "");
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->n_requests++;
    copy_header(req, "X-GitHub-Event", r->event, sizeof(r->event));
    copy_header(req, "X-GitHub-Delivery", r->delivery, sizeof(r->delivery));
    copy_header(req, "X-Hub-Signature-256", r->sig, sizeof(r->sig));
    copy_header(req, "Content-Type", r->ctype, sizeof(r->ctype));
    copy_header(req, "User-Agent", r->agent, sizeof(r->agent));
    buf_reset(&r->body);
    buf_append(&r->body, req->body, req->body_len);
    resp->status = r->status;
    buf_append(&resp->body, r->answer.data, r->answer.len);
    pthread_mutex_unlock(&r->mu);
}

static void answer(fixture *fx, int status, const char *body, size_t len)
{
    pthread_mutex_lock(&fx->r.mu);
    fx->r.status = status;
    buf_reset(&fx->r.answer);
    assert_int_equal(buf_append(&fx->r.answer, body, len), CRCR_OK);
    pthread_mutex_unlock(&fx->r.mu);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    ut_dir_make(&fx->dir);
    pthread_mutex_init(&fx->r.mu, NULL);
    buf_init(&fx->r.answer, 4u * 1024u * 1024u);
    buf_init(&fx->r.body, WEBHOOK_SEND_MAX_FILE);
    fx->srv = ut_httpd_start(receive, &fx->r);
    snprintf(fx->url, sizeof(fx->url), "%s/github/webhook", ut_httpd_base(fx->srv));
    answer(fx, 202, "{\"detail\":\"queued\"}", 19);
    char path[128];
    ut_write_file(ut_path(&fx->dir, "payload.json", path, sizeof(path)), PAYLOAD);
    unsetenv("GITHUB_APP_SECRET");
    log_set_level(CRCR_LOG_OFF); /* the server's own lines stay out of the captured stderr */
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    ut_httpd_stop(fx->srv);
    buf_free(&fx->r.answer);
    buf_free(&fx->r.body);
    pthread_mutex_destroy(&fx->r.mu);
    ut_dir_remove(&fx->dir);
    unsetenv("GITHUB_APP_SECRET");
    log_set_level(CRCR_LOG_INFO);
    free(fx);
    return 0;
}

/* The payload file's path (static). */
static char *payload_path(fixture *fx)
{
    static char path[128];
    return (char *)ut_path(&fx->dir, "payload.json", path, sizeof(path));
}

/* ---------------------------------------------------------------------------------------- */
/* Running the command. */

/* Runs webhook_send_main over argv (NULL-terminated), standard input read from `stdin_path` when
 * it is not NULL. */
static ut_cmd send_cmd(fixture *fx, const char *stdin_path, char **argv)
{
    ut_cmd c;
    ut_run(&fx->dir, webhook_send_main, argv, stdin_path, &c);
    return c;
}

/* "sha256=<hex>" of body under key, computed with OpenSSL's HMAC() (not sig.c). */
static void expected_sig(const char *key, const void *body, size_t len, char out[80])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    assert_non_null(HMAC(EVP_sha256(), key, (int)strlen(key), body, len, mac, &n));
    assert_int_equal(n, 32);
    size_t o = (size_t)snprintf(out, 80, "sha256=");
    for (unsigned i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, 80 - o, "%02x", mac[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* Sending. */

static void test_sends_what_github_would_and_prints_the_answer(void **state)
{
    fixture *fx = *state;
    char *argv[] = {"send",     payload_path(fx), "--url",      fx->url,
                    "--secret", "s3cret-value",   "--delivery", "d-1234",
                    "--event",  "pull_request",   NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "HTTP 202\n{\"detail\":\"queued\"}\n");
    assert_non_null(strstr(c.err, "delivery d-1234, event pull_request (given), 36 bytes"));
    assert_int_equal(fx->r.n_requests, 1);
    assert_string_equal(fx->r.event, "pull_request");
    assert_string_equal(fx->r.delivery, "d-1234");
    assert_string_equal(fx->r.ctype, "application/json");
    assert_string_equal(fx->r.agent, "GitHub-Hookshot/crcr");
    /* The file's bytes as they are (the final newline included), and their signature. */
    assert_int_equal(fx->r.body.len, strlen(PAYLOAD));
    assert_memory_equal(fx->r.body.data, PAYLOAD, strlen(PAYLOAD));
    char want[80];
    expected_sig("s3cret-value", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
    /* The secret is never printed. */
    assert_null(strstr(c.out, "s3cret"));
    assert_null(strstr(c.err, "s3cret"));
}

static void test_equals_forms_environment_secret_and_defaults(void **state)
{
    fixture *fx = *state;
    setenv("GITHUB_APP_SECRET", "from-the-environment", 1);
    char url_opt[128];
    snprintf(url_opt, sizeof(url_opt), "--url=%s", fx->url);
    char *argv[] = {"send", "--event=push", url_opt, payload_path(fx), NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_string_equal(fx->r.event, "push");
    char want[80];
    expected_sig("from-the-environment", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
    /* A random UUID v4: 8-4-4-4-12 lowercase hex, version 4, variant 10xx. */
    const char *d = fx->r.delivery;
    assert_int_equal(strlen(d), 36);
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(d[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", d[i]));
    }
    assert_int_equal(d[14], '4');
    assert_non_null(strchr("89ab", d[19]));
    char first[sizeof(fx->r.delivery)];
    snprintf(first, sizeof(first), "%s", d);
    /* Another run, another id; --secret wins over the environment; the event from the file's
     * name. */
    char named[128];
    ut_write_file(ut_path(&fx->dir, "pull_request.synchronize.json", named, sizeof(named)),
                  PAYLOAD);
    char *again[] = {"send", named, url_opt, "--secret=explicit", NULL};
    c = send_cmd(fx, NULL, again);
    assert_int_equal(c.rc, 0);
    assert_string_equal(fx->r.event, "pull_request");
    assert_non_null(strstr(c.err, "event pull_request (from the file's name)"));
    assert_true(strcmp(fx->r.delivery, first) != 0);
    expected_sig("explicit", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
}

static void test_payload_from_standard_input(void **state)
{
    fixture *fx = *state;
    static const char bin[] = "{\"a\":\"\xc3\xa9\"}\r\n\x01";
    char path[128];
    ut_write_file(ut_path(&fx->dir, "stdin.json", path, sizeof(path)), bin);
    char *argv[] = {"send", "-", "--url", fx->url, "--secret", "k", "--event", "push", NULL};
    ut_cmd c = send_cmd(fx, path, argv);
    assert_int_equal(c.rc, 0);
    assert_int_equal(fx->r.body.len, strlen(bin));
    assert_memory_equal(fx->r.body.data, bin, strlen(bin));
    char want[80];
    expected_sig("k", bin, strlen(bin), want);
    assert_string_equal(fx->r.sig, want);
}

static void test_non_2xx_answers_exit_1(void **state)
{
    fixture *fx = *state;
    answer(fx, 401, "{\"detail\":\"invalid signature\"}", 30);
    char *argv[] = {"send", payload_path(fx), "--url",        fx->url, "--secret",
                    "k",    "--event",        "pull_request", NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.out, "HTTP 401\n{\"detail\":\"invalid signature\"}\n");
    /* An empty body: the status line alone; a body ending in a newline gets no second one. */
    answer(fx, 200, "", 0);
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "HTTP 200\n");
    answer(fx, 299, "ok\n", 3);
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_string_equal(c.out, "HTTP 299\nok\n");
    answer(fx, 300, "", 0);
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 1);
    answer(fx, 500, "boom", 4);
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.out, "HTTP 500\nboom\n");
}

static void test_a_long_answer_is_cut(void **state)
{
    fixture *fx = *state;
    size_t n = WEBHOOK_SEND_MAX_RESPONSE + 4096;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'x', n);
    answer(fx, 202, big, n);
    free(big);
    char *argv[] = {"send", payload_path(fx), "--url",        fx->url, "--secret",
                    "k",    "--event",        "pull_request", NULL};
    /* stdout holds more than the run buffer: check its size on disk. */
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.err, "response cut at 1048576 bytes"));
    char path[128];
    FILE *f = fopen(ut_path(&fx->dir, "stdout", path, sizeof(path)), "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(size, (long)(strlen("HTTP 202\n") + WEBHOOK_SEND_MAX_RESPONSE + 1));
}

static void test_no_answer_exits_1(void **state)
{
    fixture *fx = *state;
    char url[128];
    snprintf(url, sizeof(url), "%s", fx->url);
    ut_httpd_stop(fx->srv);
    fx->srv = NULL;
    char *argv[] = {"send", payload_path(fx), "--url", url, "--secret",
                    "k",    "--event",        "ping",  NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 1);
    assert_string_equal(c.out, "");
    char want[160];
    snprintf(want, sizeof(want), "crcr webhook send: %s: ", url);
    assert_non_null(strstr(c.err, want));
}

/* ---------------------------------------------------------------------------------------- */
/* Errors before sending. */

static void test_usage_errors_exit_2_and_send_nothing(void **state)
{
    fixture *fx = *state;
    char *p = payload_path(fx);
    char long_event[CRCR_EVENT_NAME_MAX + 2];
    memset(long_event, 'e', sizeof(long_event) - 1);
    long_event[sizeof(long_event) - 1] = '\0';
    const struct {
        const char *argv[10];
        const char *err;
    } cases[] = {
        {{NULL}, "usage: crcr webhook send FILE"},
        {{"post", p, NULL}, "crcr webhook: unknown command 'post'"},
        {{"send", NULL}, "crcr webhook send: FILE is required"},
        {{"send", p, p, NULL}, "crcr webhook send: more than one FILE given"},
        {{"send", p, "--evnt", "x", NULL}, "crcr webhook send: unknown option '--evnt'"},
        {{"send", p, "--secret", "k", "--event", NULL}, "crcr webhook send: --event needs a value"},
        {{"send", p, "--url", NULL}, "crcr webhook send: --url needs a value"},
        {{"send", p, NULL}, "no webhook secret: set GITHUB_APP_SECRET, use --secret or --config"},
        {{"send", p, "--secret=", NULL}, "no webhook secret"},
        {{"send", p, "--secret", "k", "--event", "pull request", NULL},
         "--event must be 1 to 64 printable characters"},
        {{"send", p, "--secret", "k", "--event", long_event, NULL},
         "--event must be 1 to 64 printable characters"},
        {{"send", p, "--secret", "k", "--event=", NULL},
         "--event must be 1 to 64 printable characters"},
        {{"send", p, "--secret", "k", "--delivery", "a\tb", NULL},
         "--delivery must be 1 to 128 printable characters"},
        {{"send", p, "--secret", "k", "--url", "ftp://127.0.0.1/x", NULL},
         "--url must start with http:// or https://"},
        {{"send", p, "--secret", "k", "--url", "127.0.0.1:8000", NULL},
         "--url must start with http:// or https://"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[10];
        size_t n = 0;
        for (; cases[i].argv[n]; n++)
            argv[n] = (char *)cases[i].argv[n];
        argv[n] = NULL;
        ut_cmd c = send_cmd(fx, NULL, argv);
        if (c.rc != 2 || !strstr(c.err, cases[i].err))
            fail_msg("case %zu: rc %d, stderr:\n%s\nwant: %s", i, c.rc, c.err, cases[i].err);
        assert_string_equal(c.out, "");
        /* The command line's shape is answered with the usage; bad values are not. */
        bool usage = strstr(c.err, "usage: crcr webhook send FILE") != NULL;
        assert_int_equal(usage, i < 7);
    }
    assert_int_equal(fx->r.n_requests, 0);
}

static void test_help_goes_to_stdout(void **state)
{
    fixture *fx = *state;
    char *argv[] = {"send", "--help", NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    assert_true(strncmp(c.out, "usage: crcr webhook send FILE", 29) == 0);
    assert_non_null(strstr(c.out, "--delivery ID"));
    assert_string_equal(c.err, "");
    char *short_h[] = {"send", "x.json", "-h", NULL};
    c = send_cmd(fx, NULL, short_h);
    assert_int_equal(c.rc, 0);
    assert_non_null(strstr(c.out, "Exit status"));
    assert_int_equal(fx->r.n_requests, 0);
}

static void test_file_errors_exit_1_and_send_nothing(void **state)
{
    fixture *fx = *state;
    char *missing[] = {"send", "/nonexistent/payload.json", "--secret", "k", "--url", fx->url,
                       NULL};
    ut_cmd c = send_cmd(fx, NULL, missing);
    assert_int_equal(c.rc, 1);
    assert_non_null(
        strstr(c.err, "crcr webhook send: /nonexistent/payload.json: No such file or directory"));

    /* One byte over GitHub's 25 MiB cap (a sparse file). */
    char path[128];
    ut_path(&fx->dir, "big.json", path, sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)WEBHOOK_SEND_MAX_FILE + 1), 0);
    close(fd);
    char *big[] = {"send", path, "--secret", "k", "--url", fx->url, "--event", "push", NULL};
    c = send_cmd(fx, NULL, big);
    assert_int_equal(c.rc, 1);
    assert_non_null(strstr(c.err, ": larger than 26214400 bytes"));
    assert_int_equal(fx->r.n_requests, 0);

    /* Exactly the cap is sent. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)WEBHOOK_SEND_MAX_FILE), 0);
    close(fd);
    c = send_cmd(fx, NULL, big);
    assert_int_equal(c.rc, 0);
    assert_int_equal(fx->r.body.len, WEBHOOK_SEND_MAX_FILE);
}

/* ---------------------------------------------------------------------------------------- */
/* The event, told from the payload or the file's name; --config. */

/* Writes `text` to dir/name and sends it without --event; returns the run. */
static ut_cmd send_named(fixture *fx, const char *name, const char *text)
{
    static char path[160];
    ut_write_file(ut_path(&fx->dir, name, path, sizeof(path)), text);
    char *argv[] = {"send", path, "--url", fx->url, "--secret", "k", NULL};
    return send_cmd(fx, NULL, argv);
}

static void test_the_event_is_told_from_the_payload_or_the_file_name(void **state)
{
    fixture *fx = *state;
    static const char issue[] = "{\"action\":\"opened\",\"issue\":{\"number\":1}}";
    static const char pr[] = "{\"action\":\"opened\",\"number\":1,\"pull_request\":{}}";
    static const char ping[] = "{\"zen\":\"Keep it simple.\",\"hook_id\":1,\"hook\":{}}";
    static const char push[] = "{\"ref\":\"refs/heads/main\",\"before\":\"0\",\"after\":\"1\","
                               "\"pusher\":{}}";
    const struct {
        const char *name, *text, *event, *how;
    } ok[] = {
        {"issues.opened.json", issue, "issues", "from the payload and the file's name"},
        {"ping.json", ping, "ping", "from the payload and the file's name"},
        {"mine.json", ping, "ping", "from the payload"},
        {"a-push.json", push, "push", "from the payload"},
        {"pr.json", pr, "pull_request", "from the payload"},
        {"check_suite.requested.json", "{}", "check_suite", "from the file's name"},
        {"pull_request_review.submitted.json",
         "{\"action\":\"submitted\",\"review\":{},\"pull_request\":{}}", "pull_request_review",
         "from the payload and the file's name"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ut_cmd c = send_named(fx, ok[i].name, ok[i].text);
        if (c.rc != 0 || strcmp(fx->r.event, ok[i].event) != 0)
            fail_msg("%s: rc %d, event %s, want %s\n%s", ok[i].name, c.rc, fx->r.event, ok[i].event,
                     c.err);
        char want[160];
        snprintf(want, sizeof(want), "event %s (%s)", ok[i].event, ok[i].how);
        if (!strstr(c.err, want))
            fail_msg("%s: stderr lacks '%s':\n%s", ok[i].name, want, c.err);
    }
    unsigned sent = fx->r.n_requests;
    /* Nothing to tell from, or a payload and a name that disagree: nothing is sent. */
    ut_cmd c = send_named(fx, "payload.json", "{\"a\":1}");
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "cannot tell which event this payload is"));
    assert_non_null(strstr(c.err, "--event"));
    c = send_named(fx, "notes.txt", "not json");
    assert_int_equal(c.rc, 2);
    c = send_named(fx, "push.json", issue);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "the payload is a issues event but the file's name says push"));
    assert_int_equal(fx->r.n_requests, sent);
    /* --event still decides. */
    char path[160];
    ut_write_file(ut_path(&fx->dir, "push.json", path, sizeof(path)), issue);
    char *given[] = {"send", path, "--url", fx->url, "--secret", "k", "--event", "issues", NULL};
    c = send_cmd(fx, NULL, given);
    assert_int_equal(c.rc, 0);
    assert_string_equal(fx->r.event, "issues");
    assert_non_null(strstr(c.err, "event issues (given)"));
}

static void test_config_gives_the_secret_and_the_address(void **state)
{
    fixture *fx = *state;
    const char *colon = strrchr(fx->url + 7, ':');
    long port = strtol(colon + 1, NULL, 10);
    char conf[160], text[256];
    snprintf(text, sizeof(text), "CRCR_LISTEN=0.0.0.0:%ld\nGITHUB_APP_SECRET=from-the-config\n",
             port);
    ut_write_file(ut_path(&fx->dir, "crcr.env", conf, sizeof(conf)), text);
    char *argv[] = {"send", payload_path(fx), "--config", conf, "--event", "ping", NULL};
    ut_cmd c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    char want[80];
    expected_sig("from-the-config", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
    char to[128];
    snprintf(to, sizeof(to), "to http://127.0.0.1:%ld/github/webhook", port);
    assert_non_null(strstr(c.err, to));
    assert_null(strstr(c.err, "from-the-config"));
    /* The environment overrides the file, --secret both. */
    setenv("GITHUB_APP_SECRET", "from-the-environment", 1);
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 0);
    expected_sig("from-the-environment", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
    char *explicit_secret[] = {"send", payload_path(fx), "--config", conf, "--event",
                               "ping", "--secret",       "explicit", NULL};
    c = send_cmd(fx, NULL, explicit_secret);
    assert_int_equal(c.rc, 0);
    expected_sig("explicit", PAYLOAD, strlen(PAYLOAD), want);
    assert_string_equal(fx->r.sig, want);
    /* A configuration that does not load stops before anything is sent. */
    unsigned sent = fx->r.n_requests;
    ut_write_file(conf, "NO_SUCH_KEY=1\n");
    c = send_cmd(fx, NULL, argv);
    assert_int_equal(c.rc, 2);
    assert_non_null(strstr(c.err, "unknown key 'NO_SUCH_KEY'"));
    assert_int_equal(fx->r.n_requests, sent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sends_what_github_would_and_prints_the_answer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_equals_forms_environment_secret_and_defaults, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_payload_from_standard_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_2xx_answers_exit_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_long_answer_is_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_answer_exits_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors_exit_2_and_send_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_goes_to_stdout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_errors_exit_1_and_send_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_event_is_told_from_the_payload_or_the_file_name,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_gives_the_secret_and_the_address, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
