/*
 * webhook_send.c - `crcr webhook send`: signs a payload file as GitHub would and POSTs it; see
 * webhook_send.h.
 *
 * The HTTP client is libcurl and the signature is sig_sign(); this file only parses the command
 * line, reads the file (capped) and prints the answer.
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
#include "limits.h"
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

/* The answer being read: the body up to its cap. */
typedef struct {
    buf_t body;
    bool truncated;
} ws_response;

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

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]; on a match stores the value, advances
 * *i past what was used and returns 1; returns -1 when the value is missing, 0 for no match. */
static int take_option(int argc, char **argv, int *i, const char *name, const char **out)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *out = argv[++*i];
    return 1;
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
                rc = take_option(argc, argv, &i, names[k], slots[k]);
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

/* True when s is 1..max bytes of printable ASCII without spaces (safe in an HTTP header). */
static bool header_safe(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
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

/* libcurl write callback: keeps the first WEBHOOK_SEND_MAX_RESPONSE bytes, drops the rest. */
static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    ws_response *r = userdata;
    size_t n = size * nmemb;
    size_t room = r->body.max - r->body.len;
    size_t take = n < room ? n : room;
    if (take > 0 && buf_append(&r->body, ptr, take) != CRCR_OK)
        return 0; /* out of memory: abort the transfer */
    if (take < n)
        r->truncated = true;
    return n;
}

/* Appends "Name: value" to a header list; false when out of memory. */
static bool add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[512];
    snprintf(line, sizeof(line), "%s: %s", name, value);
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return false;
    *list = l;
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

    CURL *curl = curl_easy_init();
    if (!curl) {
        fprintf(stderr, WS_PROG ": cannot create an HTTP client\n");
        return 1;
    }
    struct curl_slist *headers = NULL;
    bool ok = add_header(&headers, "Content-Type", "application/json") &&
              add_header(&headers, "User-Agent", "GitHub-Hookshot/crcr") &&
              add_header(&headers, "X-GitHub-Event", a->event) &&
              add_header(&headers, "X-GitHub-Delivery", delivery) &&
              add_header(&headers, "X-Hub-Signature-256", sig) &&
              /* GitHub does not wait for "100 Continue"; neither do we. */
              (headers = curl_slist_append(headers, "Expect:")) != NULL;
    OPENSSL_cleanse(sig, sizeof(sig));
    if (!ok) {
        fprintf(stderr, WS_PROG ": out of memory\n");
        curl_slist_free_all(headers);
        curl_easy_cleanup(curl);
        return 1;
    }

    ws_response resp;
    buf_init(&resp.body, WEBHOOK_SEND_MAX_RESPONSE);
    resp.truncated = false;
    char errbuf[CURL_ERROR_SIZE] = "";

    curl_easy_setopt(curl, CURLOPT_URL, a->url);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, buf_cstr(payload));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)payload->len);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &resp);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, WEBHOOK_SEND_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, WEBHOOK_SEND_CONNECT_TIMEOUT_MS);

    int rc = 1;
    CURLcode cc = curl_easy_perform(curl);
    if (cc != CURLE_OK) {
        fprintf(stderr, WS_PROG ": %s: %s\n", a->url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    } else {
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        printf("HTTP %ld\n", status);
        if (resp.body.len > 0) {
            fwrite(resp.body.data, 1, resp.body.len, stdout);
            if (resp.body.data[resp.body.len - 1] != '\n')
                putchar('\n');
        }
        if (resp.truncated)
            fprintf(stderr, WS_PROG ": response cut at %u bytes\n", WEBHOOK_SEND_MAX_RESPONSE);
        fflush(stdout);
        rc = status >= 200 && status <= 299 ? 0 : 1;
    }
    buf_free(&resp.body);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
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
    if (!header_safe(a.event, CRCR_EVENT_NAME_MAX)) {
        fprintf(stderr, WS_PROG ": --event must be 1 to %u printable characters\n",
                CRCR_EVENT_NAME_MAX);
        return 2;
    }
    if (a.delivery && !header_safe(a.delivery, CRCR_DELIVERY_ID_MAX)) {
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
