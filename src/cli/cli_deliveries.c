/*
 * cli_deliveries.c - `crcr deliveries list|show|redeliver`, over the local store named by
 * CRCR_STORE (or --config FILE), or over a running relay's admin API with --url:
 *   crcr deliveries list [--status S] [--repo R] [--pr N] [--limit N] [--format text|json]
 *   crcr deliveries list --recovered [--limit N] [--format text|json]
 *   crcr deliveries show ID [--format text|json] [--no-bodies]
 *   crcr deliveries redeliver ID [--repo R [--force]]
 *   ... --url https://relay.example [--token T]   (token default: CRCR_ADMIN_TOKEN)
 * `show` prints each row and its request body as indented JSON (--no-bodies: the rows alone);
 * `show --format json` prints {"delivery":{...},"outbox":[{...,"body":"<request body>"}]} and
 * `list --format json` an array of deliveries, the same documents in both modes (delivery_doc.h
 * builds them). `list --recovered` lists what the reconciler asked GitHub to redeliver (newest
 * ask first; the admin API's /api/v1/admin/redeliveries), each with its state: recovered (the
 * delivery arrived), asked, refused or asking. The admin API is reached over http_client.h: https,
 * or http to a loopback host only (config_url_allowed), so the admin token never crosses a network
 * in the clear.
 *
 * The local store is opened with cli_open_store: a mistyped or missing configuration ends with
 * exit 2 naming the path, never with a new empty store read as "nothing there". `redeliver
 * --repo R` refuses an R that is not on the allowlist in force (a typo would otherwise create
 * and send a dispatch to whatever R names) unless --force: locally the allowlist the relay's
 * configuration names, through --url the relay's own (the admin API's force=1).
 */
#include "cli_deliveries.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist_source.h"
#include "cli.h"
#include "clock.h"
#include "config.h"
#include "http_client.h"
#include "json.h"
#include "ids.h"
#include "crcr_limits.h"
#include "delivery_doc.h"
#include "store.h"
#include "vocab.h"

/* Largest admin API answer read (a listing of DDOC_LIST_MAX deliveries is a few MB). */
#define CLI_MAX_ANSWER (64u * 1024u * 1024u)
/* Longest --url accepted. */
#define CLI_URL_MAX 2048u
#define CLI_CONNECT_TIMEOUT_MS 5000L
#define CLI_TIMEOUT_MS 60000L

typedef struct cli_opts {
    const char *config;
    const char *status;
    const char *repo;
    const char *format;
    const char *id;
    const char *url;
    const char *token;
    int limit;
    long long pr;
    bool force;
    bool no_bodies; /* show: the rows without their request bodies */
    bool recovered;
} cli_opts;

static void usage(void)
{
    fputs("usage: crcr deliveries list [--status S] [--repo R] [--pr N] [--limit N] "
          "[--format text|json]\n"
          "       crcr deliveries list --recovered [--limit N] [--format text|json]\n"
          "       crcr deliveries show ID [--format text|json] [--no-bodies]\n"
          "       crcr deliveries redeliver ID [--repo R [--force]]\n"
          "  the local store (--config FILE; without it /etc/crcr/crcr.env when it exists,\n"
          "  else CRCR_STORE), or a running relay's admin API with --url URL [--token T]\n"
          "  (token default: CRCR_ADMIN_TOKEN). See `crcr help deliveries`.\n",
          stderr);
}

static int parse_number(const char *s, long long max, long long *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v <= 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, cli_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "--config") == 0)
            dst = &o->config;
        else if (strcmp(a, "--status") == 0)
            dst = &o->status;
        else if (strcmp(a, "--repo") == 0)
            dst = &o->repo;
        else if (strcmp(a, "--format") == 0)
            dst = &o->format;
        else if (strcmp(a, "--url") == 0)
            dst = &o->url;
        else if (strcmp(a, "--token") == 0)
            dst = &o->token;
        else if (strcmp(a, "--force") == 0) {
            o->force = true;
            continue;
        } else if (strcmp(a, "--no-bodies") == 0) {
            o->no_bodies = true;
            continue;
        } else if (strcmp(a, "--recovered") == 0) {
            o->recovered = true;
            continue;
        } else if (strcmp(a, "--limit") == 0 || strcmp(a, "--pr") == 0) {
            bool is_limit = strcmp(a, "--limit") == 0;
            long long v = 0;
            if (i + 1 >= argc ||
                parse_number(argv[i + 1], is_limit ? DDOC_LIST_MAX : INT64_MAX, &v) != 0) {
                fprintf(stderr, "crcr deliveries: %s: expected a number%s\n", a,
                        is_limit ? " from 1 to 10000" : "");
                return -1;
            }
            i++;
            if (is_limit)
                o->limit = (int)v;
            else
                o->pr = v;
            continue;
        } else if (a[0] != '-' && !o->id) {
            o->id = a;
            continue;
        } else {
            fprintf(stderr, "crcr deliveries: %s '%s'\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "crcr deliveries: %s needs a value\n", a);
            return -1;
        }
        *dst = argv[++i];
    }
    if (o->format && strcmp(o->format, "json") != 0 && strcmp(o->format, "text") != 0) {
        fprintf(stderr, "crcr deliveries: --format: expected text or json\n");
        return -1;
    }
    if (o->status && ob_state_parse(o->status) == OB_STATE_UNKNOWN) {
        fprintf(stderr, "crcr: --status: expected queued, running, sent, dry_run or dead\n");
        return -1;
    }
    if (o->id && !ids_delivery_valid(o->id)) {
        fprintf(stderr, "crcr: '%s' is not a delivery id\n", o->id);
        return -1;
    }
    return 0;
}

/* ---- output, the same for both modes ---- */

static int print_json(const jv *doc)
{
    buf_t b;
    buf_init(&b, 256u * 1024u * 1024u);
    crcr_err e = jv_dump(doc, &b);
    if (!e)
        printf("%s\n", buf_cstr(&b));
    buf_free(&b);
    return e ? 1 : 0;
}

static const char *or_dash(const char *s)
{
    return s ? s : "-";
}

/* A row's request body for people: its JSON indented under the row (each line after `indent`),
 * or the text as it is when it is not JSON. */
static void print_body(const char *body, const char *indent)
{
    jv *doc = jv_parse(body, strlen(body), NULL, 0);
    buf_t b;
    buf_init(&b, 256u * 1024u * 1024u);
    const char *text = body;
    if (doc && jv_dump_indented(doc, &b) == CRCR_OK)
        text = buf_cstr(&b);
    jv_free(doc);
    while (*text) {
        size_t n = strcspn(text, "\n");
        printf("%s%.*s\n", indent, (int)n, text);
        text += n + (text[n] == '\n');
    }
    buf_free(&b);
}

static int print_show(const jv *doc, const cli_opts *o)
{
    if (o->format && strcmp(o->format, "json") == 0)
        return print_json(doc);
    jv *d = jv_get(doc, "delivery");
    printf("delivery %s  event=%s action=%s pr=%lld received=%s status=%s\n",
           or_dash(jv_path_str(d, "delivery_id")), or_dash(jv_path_str(d, "event")),
           or_dash(jv_path_str(d, "action")), (long long)jv_number(jv_get(d, "pr_number")),
           or_dash(jv_path_str(d, "received_at")), or_dash(jv_path_str(d, "status")));
    jv *ob = jv_get(doc, "outbox");
    for (size_t i = 0; i < jv_arr_len(ob); i++) {
        jv *j = jv_arr_at(ob, i);
        const char *err = jv_path_str(j, "last_error");
        const char *note = jv_path_str(j, "note");
        printf("  %-10s %-40s %-8s attempts=%lld%s%s%s%s\n", or_dash(jv_path_str(j, "kind")),
               or_dash(jv_path_str(j, "target")), or_dash(jv_path_str(j, "state")),
               (long long)jv_number(jv_get(j, "attempts")), err ? " error=" : "", err ? err : "",
               note ? " trimmed=" : "", note ? note : "");
        const char *body = jv_path_str(j, "body");
        if (body && *body && !o->no_bodies) {
            printf("    request body (%zu bytes):\n", strlen(body));
            print_body(body, "    ");
        }
    }
    return 0;
}

/* What a listing was asked for, for the line that says nothing matched. */
static void describe_filter(const cli_opts *o, char *out, size_t outsz)
{
    int n = snprintf(out, outsz, "no delivery");
    if (o->status && n >= 0 && (size_t)n < outsz)
        n += snprintf(out + n, outsz - (size_t)n, " with an outbox row in state %s", o->status);
    if (o->repo && n >= 0 && (size_t)n < outsz)
        n += snprintf(out + n, outsz - (size_t)n, " with a row for %s", o->repo);
    if (o->pr && n >= 0 && (size_t)n < outsz)
        snprintf(out + n, outsz - (size_t)n, " of pull request %lld", o->pr);
}

static int print_list(const jv *arr, const cli_opts *o)
{
    if (o->format && strcmp(o->format, "json") == 0)
        return print_json(arr);
    if (jv_arr_len(arr) == 0) {
        /* Said on stderr: stdout stays a list (of nothing) for scripts. */
        char what[256 + CRCR_REPO_NAME_MAX];
        describe_filter(o, what, sizeof(what));
        fprintf(stderr, "crcr deliveries: %s\n", what);
        return 0;
    }
    for (size_t i = 0; i < jv_arr_len(arr); i++) {
        jv *d = jv_arr_at(arr, i);
        printf("%s  %-24s %-14s %-12s pr=%-8lld %s\n", or_dash(jv_path_str(d, "received_at")),
               or_dash(jv_path_str(d, "delivery_id")), or_dash(jv_path_str(d, "event")),
               or_dash(jv_path_str(d, "action")), (long long)jv_number(jv_get(d, "pr_number")),
               or_dash(jv_path_str(d, "status")));
    }
    return 0;
}

/* The reconciler's records (ddoc_redeliveries_jv), one line each. */
static int print_redeliveries(const jv *arr, const cli_opts *o)
{
    if (o->format && strcmp(o->format, "json") == 0)
        return print_json(arr);
    for (size_t i = 0; i < jv_arr_len(arr); i++) {
        jv *r = jv_arr_at(arr, i);
        const char *result = jv_path_str(r, "last_result");
        printf("%s  %-36s %-14s %-12s asks=%lld/%lld %-9s%s%s\n",
               or_dash(jv_path_str(r, "last_asked_at")), or_dash(jv_path_str(r, "guid")),
               or_dash(jv_path_str(r, "event")), or_dash(jv_path_str(r, "action")),
               (long long)jv_number(jv_get(r, "asks")), (long long)jv_number(jv_get(r, "max_asks")),
               or_dash(jv_path_str(r, "state")), result ? " " : "", result ? result : "");
    }
    return 0;
}

static int print_requeued(const char *id, int n)
{
    printf("re-queued %d dispatch%s of %s\n", n, n == 1 ? "" : "es", id);
    return n > 0 ? 0 : 1;
}

/* ---- local store ---- */

/* redeliver --repo: 0 when o->repo is on the allowlist `cfg` names (or --force), else 2 after
 * saying why nothing was re-queued. */
static int check_repo_listed(const cli_opts *o, const crcr_config *cfg)
{
    if (!o->repo || o->force)
        return 0;
    gh_client *gh = NULL;
    allowlist_source *src = NULL;
    char err[512] = "";
    curl_global_init(CURL_GLOBAL_DEFAULT);
    allowlist *al = cli_load_allowlist(cfg, &gh, &src, err, sizeof(err));
    allowlist_status as;
    allowlist_source_status(src, &as);
    int rc = 0;
    if (!al) {
        fprintf(stderr,
                "crcr: redeliver --repo %s: cannot check it against the allowlist: %s; nothing "
                "re-queued (--force redelivers without the check)\n",
                o->repo, err);
        rc = 2;
    } else if (allowlist_level(al, o->repo) == CRCR_LEVEL_NONE) {
        fprintf(stderr,
                "crcr: redeliver --repo %s: not on the allowlist in force (%s, %zu repos); "
                "nothing re-queued. Check the name, or add --force to redeliver to it anyway\n",
                o->repo, as.source, as.repos);
        rc = 2;
    }
    allowlist_free(al);
    allowlist_source_free(src);
    gh_client_free(gh);
    curl_global_cleanup();
    return rc;
}

static int local_main(const char *sub, const cli_opts *o, const crcr_config *cfg, const char *used)
{
    if (strcmp(sub, "redeliver") == 0 && check_repo_listed(o, cfg) != 0)
        return 2;
    store *st = NULL;
    int orc = cli_open_store(cfg, used, &st);
    if (orc)
        return orc;
    crcr_err e;
    int rc = 1;
    jv *doc = NULL;
    if (strcmp(sub, "list") == 0 && o->recovered) {
        e = ddoc_redeliveries_jv(st, o->limit, false, &doc);
        if (e)
            fprintf(stderr, "crcr: %s\n", crcr_strerror(e));
        else
            rc = print_redeliveries(doc, o);
    } else if (strcmp(sub, "list") == 0) {
        store_filter f = {
            .state = o->status, .repo = o->repo, .limit = o->limit, .pr_number = o->pr};
        e = ddoc_admin_list_jv(st, &f, &doc);
        if (e)
            fprintf(stderr, "crcr: %s\n", crcr_strerror(e));
        else
            rc = print_list(doc, o);
    } else if (strcmp(sub, "show") == 0) {
        e = ddoc_admin_jv(st, cfg, o->id, &doc);
        if (e)
            fprintf(stderr, "crcr: delivery %s: %s\n", o->id, crcr_strerror(e));
        else
            rc = print_show(doc, o);
    } else {
        int n = 0;
        e = store_redeliver(st, o->id, o->repo, clock_now_ms(), &n);
        if (e)
            fprintf(stderr, "crcr: delivery %s: %s\n", o->id, crcr_strerror(e));
        else
            rc = print_requeued(o->id, n);
    }
    jv_free(doc);
    store_close(st);
    return rc;
}

/* ---- admin API ---- */

/* Appends "&name=<escaped value>" (or "?..." for the first) when value is set. */
static crcr_err add_query(buf_t *url, const char *name, const char *value)
{
    return value && *value ? http_add_query(url, name, value) : CRCR_OK;
}

typedef struct remote_req {
    const char *method;
    const char *base;
    const char *token;
    const cli_opts *o;
    const char *sub;
} remote_req;

/* Performs the admin API call for `sub`; the answer's body goes to `answer`. Returns the HTTP
 * status, or 0 with a message on stderr when there was no answer. */
static long remote_call(const remote_req *rq, buf_t *answer)
{
    buf_t url;
    buf_init(&url, CLI_URL_MAX + 1024);
    size_t bl = strlen(rq->base);
    while (bl > 0 && rq->base[bl - 1] == '/')
        bl--;
    crcr_err e = buf_append(&url, rq->base, bl);
    bool recovered = strcmp(rq->sub, "list") == 0 && rq->o->recovered;
    if (!e)
        e = buf_puts(&url, recovered ? "/api/v1/admin/redeliveries" : "/api/v1/admin/deliveries");
    if (!e && strcmp(rq->sub, "list") != 0) {
        e = buf_putc(&url, '/');
        if (!e)
            e = http_append_escaped(&url, rq->o->id);
    }
    if (!e && strcmp(rq->sub, "redeliver") == 0)
        e = buf_puts(&url, "/redeliver");
    if (!e && strcmp(rq->sub, "list") == 0) {
        char num[24];
        e = add_query(&url, "status", rq->o->status);
        if (!e)
            e = add_query(&url, "repo", rq->o->repo);
        snprintf(num, sizeof(num), "%d", rq->o->limit);
        if (!e && rq->o->limit)
            e = add_query(&url, "limit", num);
        snprintf(num, sizeof(num), "%lld", rq->o->pr);
        if (!e && rq->o->pr)
            e = add_query(&url, "pr", num);
    }
    if (!e && strcmp(rq->sub, "redeliver") == 0)
        e = add_query(&url, "repo", rq->o->repo);
    if (!e && strcmp(rq->sub, "redeliver") == 0 && rq->o->force)
        e = add_query(&url, "force", "1");
    if (e) {
        fprintf(stderr, "crcr: --url: URL too long\n");
        buf_free(&url);
        return 0;
    }
    const char *hdrs[] = {"Accept: application/json", NULL};
    http_call hr = {.method = rq->method,
                    .url = url.data,
                    .allow_http = true,
                    .headers = hdrs,
                    .auth_scheme = "Bearer",
                    .auth_credential = rq->token,
                    .connect_timeout_ms = CLI_CONNECT_TIMEOUT_MS,
                    .timeout_ms = CLI_TIMEOUT_MS};
    http_answer a = {.body = answer};
    e = http_exchange(NULL, &hr, &a);
    buf_free(&url);
    if (e) {
        fprintf(stderr, "crcr: %s: %s\n", rq->base, a.error);
        return 0;
    }
    return a.status;
}

static int remote_main(const char *sub, const cli_opts *o, const char *token)
{
    if (strlen(o->url) > CLI_URL_MAX || !config_url_allowed(o->url)) {
        fprintf(stderr, "crcr: --url: must be https:// (http:// only for loopback hosts), "
                        "without user, query or fragment\n");
        return 2;
    }
    if (!token || !*token) {
        fprintf(stderr, "crcr: --url needs the admin token: --token T or CRCR_ADMIN_TOKEN\n");
        return 2;
    }
    const char *method = strcmp(sub, "redeliver") == 0 ? "POST" : "GET";
    remote_req rq = {method, o->url, token, o, sub};
    buf_t answer;
    buf_init(&answer, CLI_MAX_ANSWER);
    long status = remote_call(&rq, &answer);
    int rc = 1;
    jv *doc = status ? jv_parse(answer.data ? answer.data : "", answer.len, NULL, 0) : NULL;
    const char *detail = jv_path_str(doc, "detail");
    if (status == 200 && doc) {
        if (strcmp(sub, "list") == 0) {
            jv *arr = jv_get(doc, o->recovered ? "redeliveries" : "deliveries");
            if (jv_is_arr(arr) && o->recovered)
                rc = print_redeliveries(arr, o);
            else if (jv_is_arr(arr))
                rc = print_list(arr, o);
            else
                fprintf(stderr, "crcr: %s: unexpected answer\n", o->url);
        } else if (strcmp(sub, "show") == 0) {
            rc = print_show(doc, o);
        } else {
            int64_t n = 0;
            jv_int(jv_get(doc, "requeued"), &n);
            rc = print_requeued(o->id, (int)n);
        }
    } else if (status == 422 && strcmp(sub, "redeliver") == 0) {
        fprintf(stderr,
                "crcr: redeliver --repo %s: %s; nothing re-queued (--force redelivers "
                "anyway)\n",
                o->repo ? o->repo : "", detail ? detail : "refused");
        rc = 2;
    } else if (status == 401) {
        fprintf(stderr, "crcr: %s: 401 Unauthorized: the admin token was refused\n", o->url);
    } else if (status == 404 && strcmp(sub, "list") == 0) {
        fprintf(stderr, "crcr: %s: no admin API there (is CRCR_ADMIN_TOKEN set on the relay?)\n",
                o->url);
    } else if (status == 404 && detail && strcmp(detail, "delivery not found") == 0) {
        fprintf(stderr, "crcr: delivery %s: %s\n", o->id, crcr_strerror(CRCR_E_NOT_FOUND));
    } else if (status) {
        fprintf(stderr, "crcr: %s: HTTP %ld%s%s\n", o->url, status, detail ? ": " : "",
                detail ? detail : "");
    }
    jv_free(doc);
    buf_free(&answer);
    return rc;
}

int cli_deliveries_main(int argc, char **argv)
{
    const char *sub = argc >= 1 ? argv[0] : "";
    if (strcmp(sub, "list") != 0 && strcmp(sub, "show") != 0 && strcmp(sub, "redeliver") != 0) {
        if (*sub)
            fprintf(stderr, "crcr deliveries: unknown verb '%s' (list, show or redeliver)\n", sub);
        usage();
        return 2;
    }
    cli_opts o = {0};
    if (parse_opts(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    if (strcmp(sub, "list") == 0 && o.id) {
        fprintf(stderr, "crcr deliveries: unexpected argument '%s'\n", o.id);
        usage();
        return 2;
    }
    if (strcmp(sub, "list") != 0 && !o.id) {
        fprintf(stderr, "crcr deliveries: %s needs a delivery ID\n", sub);
        usage();
        return 2;
    }
    if (o.no_bodies && strcmp(sub, "show") != 0) {
        fprintf(stderr, "crcr deliveries: --no-bodies goes with show\n");
        usage();
        return 2;
    }
    if (o.recovered && (strcmp(sub, "list") != 0 || o.status || o.repo || o.pr)) {
        fprintf(stderr, "crcr deliveries: --recovered goes with list (and --limit, --format) "
                        "only\n");
        usage();
        return 2;
    }
    if (o.force && (strcmp(sub, "redeliver") != 0 || !o.repo)) {
        fprintf(stderr, "crcr deliveries: --force goes with redeliver --repo R\n");
        usage();
        return 2;
    }
    crcr_config cfg;
    const char *used = NULL;
    if (cli_load_config(o.config, &cfg, &used) != 0)
        return 2;
    int rc;
    if (o.url) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        rc = remote_main(sub, &o, o.token ? o.token : cfg.admin_token);
        curl_global_cleanup();
    } else {
        rc = local_main(sub, &o, &cfg, used);
    }
    config_free(&cfg);
    return rc;
}
