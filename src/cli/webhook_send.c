/*
 * webhook_send.c - `crcr webhook send`: signs a payload file as GitHub would and POSTs it; see
 * webhook_send.h.
 *
 * The HTTP client is http_client.h and the signature is sig_sign(); this file parses the command
 * line, reads the file (capped), tells which event it is when --event is not given
 * (infer_event() below) and prints the answer.
 *
 * Which event a payload is: GitHub names it only in the X-GitHub-Event header, so it is read
 * from the payload's top-level keys (a `ping` has "zen" and "hook_id", a `pull_request` its
 * "pull_request" object without a review or comment, ...) and from the file's name, whose first
 * dotted word names the event in GitHub's and octokit's fixtures (issues.opened.json). Either is
 * enough; when both speak and disagree, or neither does, nothing is sent and --event is asked
 * for: a payload sent under the wrong event is answered 202 and fans out as that event.
 */
#include "webhook_send.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "buf.h"
#include "config.h"
#include "http_client.h"
#include "crcr_limits.h"
#include "json.h"
#include "opts.h"
#include "sig.h"

#define WS_DEFAULT_URL "http://127.0.0.1:8000/github/webhook"
#define WS_PROG "crcr webhook send"
/* Longest URL made from CRCR_LISTEN ("http://[v6]:port/github/webhook"). */
#define WS_LISTEN_URL_MAX 96u
/* Longest webhook secret taken from --config (GitHub's are far shorter). */
#define WS_SECRET_MAX 4096u

typedef struct {
    const char *file;
    const char *event;
    const char *url;
    const char *secret;
    const char *delivery;
    const char *config;
    bool help;
} ws_args;

#define WS_USAGE                                                                                   \
    "usage: crcr webhook send FILE [--event E] [--url U] [--secret S] [--config F] [--delivery "   \
    "ID]\n"

/* The full help, for --help. */
static void usage(FILE *to)
{
    fprintf(to, WS_USAGE
            "\n"
            "Signs FILE (a webhook payload, '-' for standard input) with the webhook secret and\n"
            "POSTs it the way GitHub does.\n"
            "\n"
            "  --event E      X-GitHub-Event (default: told from the payload's keys, or from\n"
            "                 the file's name as in pull_request.opened.json; when neither\n"
            "                 tells, or they disagree, nothing is sent)\n"
            "  --url U        where to POST (default " WS_DEFAULT_URL ",\n"
            "                 or the CRCR_LISTEN address of --config)\n"
            "  --secret S     webhook secret (default: GITHUB_APP_SECRET from the environment,\n"
            "                 which keeps the secret out of the process list, or from --config)\n"
            "  --config F     the relay's configuration file: its GITHUB_APP_SECRET and\n"
            "                 CRCR_LISTEN (the environment overrides the file)\n"
            "  --delivery ID  X-GitHub-Delivery (default: a random UUID)\n"
            "\n"
            "Prints \"HTTP <status>\" and the response body. Exit status: 0 for a 2xx answer,\n"
            "1 otherwise, 2 for a usage error.\n");
}

/* Parses argv (after "send"). Returns 0, or 2 after printing a usage error. */
static int parse_args(int argc, char **argv, ws_args *a)
{
    static const char *names[] = {"--event", "--url", "--secret", "--delivery", "--config"};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = true;
            return 0;
        }
        if (strncmp(arg, "--", 2) == 0) {
            const char **slots[] = {&a->event, &a->url, &a->secret, &a->delivery, &a->config};
            int rc = 0;
            for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && rc == 0; k++) {
                rc = opts_take(argc, argv, &i, names[k], slots[k]);
                if (rc < 0) {
                    fprintf(stderr, WS_PROG ": %s needs a value\n", names[k]);
                    return 2;
                }
            }
            if (rc == 0) {
                fprintf(stderr, WS_PROG ": unknown option '%s'\n", arg);
                return 2;
            }
            continue;
        }
        if (a->file) {
            fprintf(stderr, WS_PROG ": more than one FILE given\n");
            return 2;
        }
        a->file = arg;
    }
    if (!a->file) {
        fprintf(stderr, WS_PROG ": FILE is required\n");
        return 2;
    }
    return 0;
}

/* Reads the payload (at most WEBHOOK_SEND_MAX_FILE bytes) into out, which the caller frees.
 * Returns false after printing why. */
static bool read_payload(const char *path, buf_t *out)
{
    bool from_stdin = strcmp(path, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, WS_PROG ": %s: %s\n", path, strerror(errno));
        return false;
    }
    buf_init(out, WEBHOOK_SEND_MAX_FILE);
    char chunk[64 * 1024];
    bool ok = true;
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n > 0) {
            crcr_err e = buf_append(out, chunk, n);
            if (e == CRCR_E_TOO_LARGE) {
                fprintf(stderr, WS_PROG ": %s: larger than %u bytes\n", path,
                        WEBHOOK_SEND_MAX_FILE);
                ok = false;
                break;
            }
            if (e) {
                fprintf(stderr, WS_PROG ": out of memory\n");
                ok = false;
                break;
            }
        }
        if (n < sizeof(chunk)) {
            if (ferror(f)) {
                fprintf(stderr, WS_PROG ": %s: read error\n", path);
                ok = false;
            }
            break;
        }
    }
    if (!from_stdin)
        fclose(f);
    if (!ok)
        buf_free(out);
    return ok;
}

/* Words of GitHub's webhooks that the relay's vocabularies also use for other concepts. */
#define EV_CHECK_RUN "check_run" /* vocab-ok: a webhook event and its payload key */
#define KEY_COMMENT "comment"    /* vocab-ok: a webhook payload key */

/* The events of GitHub's webhooks: a file name's first dotted word counts only when it is one. */
static const char *const GITHUB_EVENTS[] = {"branch_protection_configuration",
                                            "branch_protection_rule",
                                            EV_CHECK_RUN,
                                            "check_suite",
                                            "code_scanning_alert",
                                            "commit_comment",
                                            "create",
                                            "custom_property",
                                            "custom_property_values",
                                            "delete",
                                            "dependabot_alert",
                                            "deploy_key",
                                            "deployment",
                                            "deployment_protection_rule",
                                            "deployment_review",
                                            "deployment_status",
                                            "discussion",
                                            "discussion_comment",
                                            "fork",
                                            "github_app_authorization",
                                            "gollum",
                                            "installation",
                                            "installation_repositories",
                                            "installation_target",
                                            "issue_comment",
                                            "issues",
                                            "label",
                                            "marketplace_purchase",
                                            "member",
                                            "membership",
                                            "merge_group",
                                            "meta",
                                            "milestone",
                                            "org_block",
                                            "organization",
                                            "package",
                                            "page_build",
                                            "personal_access_token_request",
                                            "ping",
                                            "project",
                                            "project_card",
                                            "project_column",
                                            "projects_v2",
                                            "projects_v2_item",
                                            "public",
                                            "pull_request",
                                            "pull_request_review",
                                            "pull_request_review_comment",
                                            "pull_request_review_thread",
                                            "push",
                                            "registry_package",
                                            "release",
                                            "repository",
                                            "repository_advisory",
                                            "repository_dispatch",
                                            "repository_import",
                                            "repository_ruleset",
                                            "repository_vulnerability_alert",
                                            "secret_scanning_alert",
                                            "secret_scanning_alert_location",
                                            "security_advisory",
                                            "security_and_analysis",
                                            "sponsorship",
                                            "star",
                                            "status",
                                            "sub_issues",
                                            "team",
                                            "team_add",
                                            "watch",
                                            "workflow_dispatch",
                                            "workflow_job",
                                            "workflow_run"};

/* The event the file's name names ("issues" for .../issues.opened.json), or NULL. The result
 * points into the table above. */
static const char *event_of_name(const char *path)
{
    if (strcmp(path, "-") == 0)
        return NULL;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strcspn(base, ".");
    for (size_t i = 0; i < sizeof(GITHUB_EVENTS) / sizeof(GITHUB_EVENTS[0]); i++)
        if (strlen(GITHUB_EVENTS[i]) == n && strncmp(base, GITHUB_EVENTS[i], n) == 0)
            return GITHUB_EVENTS[i];
    return NULL;
}

/* The event a payload's top-level keys show, or NULL when they do not tell (not JSON, not an
 * object, or the keys of an event not listed here: its file name or --event must say). */
static const char *event_of_payload(const buf_t *payload)
{
    jv *doc = jv_parse(buf_cstr(payload), payload->len, NULL, 0);
    const char *ev = NULL;
#define HAS(k) (jv_get(doc, k) != NULL)
    if (!jv_is_obj(doc))
        ev = NULL;
    else if (HAS("zen") && HAS("hook_id"))
        ev = "ping";
    else if (HAS(EV_CHECK_RUN))
        ev = EV_CHECK_RUN;
    else if (HAS("check_suite"))
        ev = "check_suite";
    else if (HAS("pull_request"))
        ev = HAS("review")      ? "pull_request_review"
             : HAS(KEY_COMMENT) ? "pull_request_review_comment"
             : HAS("thread")    ? "pull_request_review_thread"
                                : "pull_request";
    else if (HAS("issue"))
        ev = HAS(KEY_COMMENT) ? "issue_comment" : "issues";
    else if (HAS("ref") && HAS("before") && HAS("after") && HAS("pusher"))
        ev = "push";
    else if (HAS("workflow_run"))
        ev = "workflow_run";
    else if (HAS("workflow_job"))
        ev = "workflow_job";
    else if (HAS("merge_group"))
        ev = "merge_group";
    else if (HAS("deployment_status"))
        ev = "deployment_status";
    else if (HAS("release"))
        ev = "release";
#undef HAS
    jv_free(doc);
    return ev;
}

/* Sets a->event from the payload and the file's name when it was not given; `how` says where it
 * came from. Returns false after printing why nothing can be sent. */
static bool infer_event(ws_args *a, const buf_t *payload, const char **how)
{
    if (a->event) {
        *how = "given";
        return true;
    }
    const char *by_payload = event_of_payload(payload);
    const char *by_name = event_of_name(a->file);
    if (by_payload && by_name && strcmp(by_payload, by_name) != 0) {
        fprintf(stderr,
                WS_PROG ": %s: the payload is a %s event but the file's name says %s; give "
                        "--event E\n",
                a->file, by_payload, by_name);
        return false;
    }
    if (!by_payload && !by_name) {
        fprintf(stderr,
                WS_PROG ": %s: cannot tell which event this payload is (its keys and its name do "
                        "not say); give --event E, e.g. --event pull_request\n",
                a->file);
        return false;
    }
    a->event = by_payload ? by_payload : by_name;
    *how = by_payload && by_name ? "from the payload and the file's name"
           : by_payload          ? "from the payload"
                                 : "from the file's name";
    return true;
}

/* With --config: GITHUB_APP_SECRET and CRCR_LISTEN of the relay's configuration (the environment
 * overriding the file) become the defaults of --secret and --url. The copies go to secret[] and
 * url[]. Returns false after printing why the file cannot be used. */
static bool apply_config(ws_args *a, char *secret, size_t secretsz, char *url, size_t urlsz)
{
    if (!a->config)
        return true;
    crcr_config cfg;
    char err[512] = "";
    if (config_load(&cfg, a->config, config_getenv, NULL, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, WS_PROG ": %s\n", err);
        return false;
    }
    bool ok = true;
    if (!a->secret && cfg.app_secret) {
        if (strlen(cfg.app_secret) >= secretsz) {
            fprintf(stderr, WS_PROG ": GITHUB_APP_SECRET: longer than %zu bytes\n", secretsz - 1);
            ok = false;
        } else {
            memcpy(secret, cfg.app_secret, strlen(cfg.app_secret) + 1);
            a->secret = secret;
        }
    }
    if (ok && !a->url) {
        /* A relay listening on every address is reached on loopback. */
        const char *h = cfg.listen_host;
        bool v6 = strchr(h, ':') != NULL;
        if (strcmp(h, "0.0.0.0") == 0)
            h = "127.0.0.1";
        else if (strcmp(h, "::") == 0)
            h = "::1";
        snprintf(url, urlsz, "http://%s%s%s:%d/github/webhook", v6 ? "[" : "", h, v6 ? "]" : "",
                 cfg.listen_port);
        a->url = url;
    }
    config_free(&cfg);
    return ok;
}

/* Writes a random (version 4) UUID into out. Returns false when the RNG fails. */
static bool random_uuid(char out[37])
{
    unsigned char b[16];
    if (RAND_bytes(b, (int)sizeof(b)) != 1)
        return false;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return true;
}

/* POSTs the signed payload and prints the answer. Returns the exit code. */
static int post(const ws_args *a, const buf_t *payload, const char *delivery)
{
    char sig[SIG_HEADER_SIZE];
    sig_sign(a->secret, buf_cstr(payload), payload->len, sig);
    if (!sig[0]) {
        fprintf(stderr, WS_PROG ": signing failed\n");
        return 1;
    }
    char event[32 + CRCR_EVENT_NAME_MAX], id[32 + CRCR_DELIVERY_ID_MAX],
        sig_line[32 + SIG_HEADER_SIZE];
    snprintf(event, sizeof(event), "X-GitHub-Event: %s", a->event);
    snprintf(id, sizeof(id), "X-GitHub-Delivery: %s", delivery);
    snprintf(sig_line, sizeof(sig_line), "X-Hub-Signature-256: %s", sig);
    OPENSSL_cleanse(sig, sizeof(sig));
    /* GitHub does not wait for "100 Continue"; neither does http_client. */
    const char *hdrs[] = {"Content-Type: application/json", event, id, sig_line, NULL};
    http_call rq = {.method = "POST",
                    .url = a->url,
                    .allow_http = true,
                    .user_agent = "GitHub-Hookshot/crcr",
                    .headers = hdrs,
                    .body = buf_cstr(payload),
                    .body_len = payload->len,
                    .connect_timeout_ms = WEBHOOK_SEND_CONNECT_TIMEOUT_MS,
                    .timeout_ms = WEBHOOK_SEND_TIMEOUT_MS,
                    .truncate = true};
    buf_t body;
    buf_init(&body, WEBHOOK_SEND_MAX_RESPONSE);
    http_answer ans = {.body = &body};
    crcr_err e = http_exchange(NULL, &rq, &ans);
    OPENSSL_cleanse(sig_line, sizeof(sig_line));

    int rc = 1;
    if (e) {
        fprintf(stderr, WS_PROG ": %s: %s\n", a->url, ans.error);
    } else {
        printf("HTTP %ld\n", ans.status);
        if (body.len > 0) {
            fwrite(body.data, 1, body.len, stdout);
            if (body.data[body.len - 1] != '\n')
                putchar('\n');
        }
        if (ans.truncated)
            fprintf(stderr, WS_PROG ": response cut at %u bytes\n", WEBHOOK_SEND_MAX_RESPONSE);
        fflush(stdout);
        rc = ans.status >= 200 && ans.status <= 299 ? 0 : 1;
    }
    buf_free(&body);
    return rc;
}

/* Checks the options, reads the payload, tells its event and sends it. Returns the exit code. */
static int send_checked(ws_args *a)
{
    if (!a->url)
        a->url = WS_DEFAULT_URL;
    if (!a->secret)
        a->secret = getenv("GITHUB_APP_SECRET");
    if (!a->secret || !*a->secret) {
        fprintf(stderr, WS_PROG ": no webhook secret: set GITHUB_APP_SECRET, use --secret or "
                                "--config\n");
        return 2;
    }
    if (a->event && !http_header_token_ok(a->event, strlen(a->event), CRCR_EVENT_NAME_MAX)) {
        fprintf(stderr, WS_PROG ": --event must be 1 to %u printable characters\n",
                CRCR_EVENT_NAME_MAX);
        return 2;
    }
    if (a->delivery &&
        !http_header_token_ok(a->delivery, strlen(a->delivery), CRCR_DELIVERY_ID_MAX)) {
        fprintf(stderr, WS_PROG ": --delivery must be 1 to %u printable characters\n",
                CRCR_DELIVERY_ID_MAX);
        return 2;
    }
    if (strncmp(a->url, "http://", 7) != 0 && strncmp(a->url, "https://", 8) != 0) {
        fprintf(stderr, WS_PROG ": --url must start with http:// or https://\n");
        return 2;
    }

    char uuid[37];
    if (!a->delivery) {
        if (!random_uuid(uuid)) {
            fprintf(stderr, WS_PROG ": cannot make a delivery id (RNG failure)\n");
            return 1;
        }
        a->delivery = uuid;
    }

    buf_t payload;
    if (!read_payload(a->file, &payload))
        return 1;
    const char *how = "";
    if (!infer_event(a, &payload, &how)) {
        buf_free(&payload);
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, WS_PROG ": cannot initialise libcurl\n");
        buf_free(&payload);
        return 1;
    }
    fprintf(stderr, WS_PROG ": delivery %s, event %s (%s), %zu bytes, to %s\n", a->delivery,
            a->event, how, payload.len, a->url);
    int rc = post(a, &payload, a->delivery);
    curl_global_cleanup();
    buf_free(&payload);
    return rc;
}

int webhook_send_main(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "send") != 0) {
        if (argc >= 1)
            fprintf(stderr, "crcr webhook: unknown command '%s'\n", argv[0]);
        fputs(WS_USAGE, stderr);
        return 2;
    }
    ws_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        fputs(WS_USAGE, stderr);
        return rc;
    }
    if (a.help) {
        usage(stdout);
        return 0;
    }
    /* The secret read from --config lives here until the request is sent, then is wiped. */
    char cfg_secret[WS_SECRET_MAX + 1] = "", cfg_url[WS_LISTEN_URL_MAX] = "";
    if (apply_config(&a, cfg_secret, sizeof(cfg_secret), cfg_url, sizeof(cfg_url)))
        rc = send_checked(&a);
    else
        rc = 2;
    OPENSSL_cleanse(cfg_secret, sizeof(cfg_secret));
    return rc;
}
