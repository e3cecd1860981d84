/*
 * webhook_send.c - `crcr webhook send`: signs a payload file as GitHub would and POSTs it; see
 * webhook_send.h.
 *
 * The HTTP client is http_client.h and the signature is sig_sign(); this file only parses the
 * command line, reads the file (capped) and prints the answer.
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
#include "http_client.h"
#include "crcr_limits.h"
#include "opts.h"
#include "sig.h"

#define WS_DEFAULT_EVENT "pull_request"
#define WS_DEFAULT_URL "http://127.0.0.1:8000/github/webhook"
#define WS_PROG "crcr webhook send"

typedef struct {
    const char *file;
    const char *event;
    const char *url;
    const char *secret;
    const char *delivery;
    bool help;
} ws_args;

#define WS_USAGE                                                                                   \
    "usage: crcr webhook send FILE [--event E] [--url U] [--secret S] [--delivery ID]\n"

/* The full help, for --help. */
static void usage(FILE *to)
{
    fprintf(to, WS_USAGE
            "\n"
            "Signs FILE (a webhook payload, '-' for standard input) with the webhook secret and\n"
            "POSTs it the way GitHub does.\n"
            "\n"
            "  --event E      X-GitHub-Event (default " WS_DEFAULT_EVENT ")\n"
            "  --url U        where to POST (default " WS_DEFAULT_URL ")\n"
            "  --secret S     webhook secret (default: the GITHUB_APP_SECRET environment\n"
            "                 variable, which keeps the secret out of the process list)\n"
            "  --delivery ID  X-GitHub-Delivery (default: a random UUID)\n"
            "\n"
            "Prints \"HTTP <status>\" and the response body. Exit status: 0 for a 2xx answer,\n"
            "1 otherwise, 2 for a usage error.\n");
}

/* Parses argv (after "send"). Returns 0, or 2 after printing a usage error. */
static int parse_args(int argc, char **argv, ws_args *a)
{
    static const char *names[] = {"--event", "--url", "--secret", "--delivery"};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = true;
            return 0;
        }
        if (strncmp(arg, "--", 2) == 0) {
            const char **slots[] = {&a->event, &a->url, &a->secret, &a->delivery};
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
    if (!a.event)
        a.event = WS_DEFAULT_EVENT;
    if (!a.url)
        a.url = WS_DEFAULT_URL;
    if (!a.secret)
        a.secret = getenv("GITHUB_APP_SECRET");
    if (!a.secret || !*a.secret) {
        fprintf(stderr, WS_PROG ": no webhook secret: set GITHUB_APP_SECRET or use --secret\n");
        return 2;
    }
    if (!http_header_token_ok(a.event, strlen(a.event), CRCR_EVENT_NAME_MAX)) {
        fprintf(stderr, WS_PROG ": --event must be 1 to %u printable characters\n",
                CRCR_EVENT_NAME_MAX);
        return 2;
    }
    if (a.delivery && !http_header_token_ok(a.delivery, strlen(a.delivery), CRCR_DELIVERY_ID_MAX)) {
        fprintf(stderr, WS_PROG ": --delivery must be 1 to %u printable characters\n",
                CRCR_DELIVERY_ID_MAX);
        return 2;
    }
    if (strncmp(a.url, "http://", 7) != 0 && strncmp(a.url, "https://", 8) != 0) {
        fprintf(stderr, WS_PROG ": --url must start with http:// or https://\n");
        return 2;
    }

    char uuid[37];
    if (!a.delivery) {
        if (!random_uuid(uuid)) {
            fprintf(stderr, WS_PROG ": cannot make a delivery id (RNG failure)\n");
            return 1;
        }
        a.delivery = uuid;
    }

    buf_t payload;
    if (!read_payload(a.file, &payload))
        return 1;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, WS_PROG ": cannot initialise libcurl\n");
        buf_free(&payload);
        return 1;
    }
    fprintf(stderr, WS_PROG ": delivery %s, event %s, %zu bytes\n", a.delivery, a.event,
            payload.len);
    rc = post(&a, &payload, a.delivery);
    curl_global_cleanup();
    buf_free(&payload);
    return rc;
}
