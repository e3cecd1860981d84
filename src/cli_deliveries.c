/*
 * cli_deliveries.c - operator commands over the store named by CRCR_STORE (or --config FILE):
 *   crcr deliveries list [--status S] [--repo R] [--limit N] [--format text|json]
 *   crcr deliveries show ID [--format text|json]
 *   crcr deliveries redeliver ID [--repo R]
 * `show --format json` prints {"delivery":{...},"outbox":[{...,"body":"<request body>"}]}.
 */
#include "cli_deliveries.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "json.h"
#include "store.h"

typedef struct cli_opts {
    const char *config;
    const char *status;
    const char *repo;
    const char *format;
    const char *id;
    int limit;
} cli_opts;

static void usage(void)
{
    fputs("usage: crcr deliveries list [--status S] [--repo R] [--limit N] [--format text|json]\n"
          "       crcr deliveries show ID [--format text|json]\n"
          "       crcr deliveries redeliver ID [--repo R]\n"
          "  (all take --config FILE; the store is CRCR_STORE)\n",
          stderr);
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
        else if (strcmp(a, "--limit") == 0) {
            if (i + 1 >= argc)
                return -1;
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v <= 0 || v > 10000)
                return -1;
            o->limit = (int)v;
            continue;
        } else if (a[0] != '-' && !o->id) {
            o->id = a;
            continue;
        } else {
            return -1;
        }
        if (i + 1 >= argc)
            return -1;
        *dst = argv[++i];
    }
    if (o->format && strcmp(o->format, "json") != 0 && strcmp(o->format, "text") != 0)
        return -1;
    return 0;
}

static jv *delivery_json(const store_delivery_row *r)
{
    char ts[32];
    clock_iso8601(r->received_at, ts, sizeof(ts));
    jv *o = jv_new_obj();
    jv_set(o, "delivery_id", jv_new_str(r->delivery_id));
    jv_set(o, "event", jv_new_str(r->event));
    jv_set(o, "action", r->action ? jv_new_str(r->action) : jv_new_null());
    jv_set(o, "upstream_repo", r->upstream_repo ? jv_new_str(r->upstream_repo) : jv_new_null());
    jv_set(o, "pr_number", jv_new_int(r->pr_number));
    jv_set(o, "head_sha", r->head_sha ? jv_new_str(r->head_sha) : jv_new_null());
    jv_set(o, "ref", r->ref ? jv_new_str(r->ref) : jv_new_null());
    jv_set(o, "received_at", jv_new_str(ts));
    jv_set(o, "payload_bytes", jv_new_int((int64_t)r->payload_bytes));
    jv_set(o, "status", jv_new_str(r->status ? r->status : ""));
    return o;
}

typedef struct show_ctx {
    jv *doc;
    jv *outbox;
} show_ctx;

static void show_delivery(void *ctx, const store_delivery_row *r, const char *payload, size_t n)
{
    show_ctx *s = ctx;
    jv_set(s->doc, "delivery", delivery_json(r));
}

static void show_job(void *ctx, const store_job_row *j)
{
    show_ctx *s = ctx;
    jv *o = jv_new_obj();
    jv_set(o, "id", jv_new_int(j->id));
    jv_set(o, "kind", jv_new_str(j->kind));
    jv_set(o, "target", jv_new_str(j->target));
    jv_set(o, "state", jv_new_str(j->state));
    jv_set(o, "attempts", jv_new_int(j->attempts));
    jv_set(o, "last_status", j->last_status ? jv_new_int(j->last_status) : jv_new_null());
    jv_set(o, "last_error", j->last_error ? jv_new_str(j->last_error) : jv_new_null());
    jv_set(o, "note", j->note ? jv_new_str(j->note) : jv_new_null());
    char ts[32];
    clock_iso8601(j->next_attempt_at, ts, sizeof(ts));
    jv_set(o, "next_attempt_at", jv_new_str(ts));
    if (j->done_at) {
        clock_iso8601(j->done_at, ts, sizeof(ts));
        jv_set(o, "done_at", jv_new_str(ts));
    } else {
        jv_set(o, "done_at", jv_new_null());
    }
    jv *body = j->body && j->body_len ? jv_new_strn(j->body, j->body_len) : jv_new_null();
    jv_set(o, "body", body ? body : jv_new_null());
    jv_push(s->outbox, o);
}

static int print_json(jv *doc)
{
    buf_t b;
    buf_init(&b, 256u * 1024u * 1024u);
    crcr_err e = jv_dump(doc, &b);
    if (!e)
        printf("%s\n", buf_cstr(&b));
    buf_free(&b);
    return e ? 1 : 0;
}

static int cmd_show(store *st, const cli_opts *o)
{
    if (!o->id) {
        usage();
        return 2;
    }
    show_ctx s = {jv_new_obj(), jv_new_arr()};
    crcr_err e = store_get_delivery(st, o->id, show_delivery, show_job, &s);
    if (e) {
        fprintf(stderr, "crcr: delivery %s: %s\n", o->id, crcr_strerror(e));
        jv_free(s.doc);
        jv_free(s.outbox);
        return 1;
    }
    jv_set(s.doc, "outbox", s.outbox);
    int rc = 0;
    if (o->format && strcmp(o->format, "json") == 0) {
        rc = print_json(s.doc);
    } else {
        jv *d = jv_get(s.doc, "delivery");
        printf("delivery %s  event=%s action=%s pr=%lld received=%s\n",
               jv_path_str(d, "delivery_id"), jv_path_str(d, "event"),
               jv_path_str(d, "action") ? jv_path_str(d, "action") : "-",
               (long long)jv_number(jv_get(d, "pr_number")), jv_path_str(d, "received_at"));
        jv *ob = jv_get(s.doc, "outbox");
        for (size_t i = 0; i < jv_arr_len(ob); i++) {
            jv *j = jv_arr_at(ob, i);
            const char *err = jv_path_str(j, "last_error");
            const char *note = jv_path_str(j, "note");
            printf("  %-10s %-40s %-8s attempts=%lld%s%s%s%s\n", jv_path_str(j, "kind"),
                   jv_path_str(j, "target"), jv_path_str(j, "state"),
                   (long long)jv_number(jv_get(j, "attempts")), err ? " error=" : "",
                   err ? err : "", note ? " trimmed=" : "", note ? note : "");
        }
    }
    jv_free(s.doc);
    return rc;
}

typedef struct list_ctx {
    jv *arr;
} list_ctx;

static int list_row(void *ctx, const store_delivery_row *r)
{
    list_ctx *l = ctx;
    jv_push(l->arr, delivery_json(r));
    return 0;
}

static int cmd_list(store *st, const cli_opts *o)
{
    list_ctx l = {jv_new_arr()};
    store_filter f = {.state = o->status, .repo = o->repo, .limit = o->limit};
    crcr_err e = store_list_deliveries(st, &f, list_row, &l);
    if (e) {
        fprintf(stderr, "crcr: %s\n", crcr_strerror(e));
        jv_free(l.arr);
        return 1;
    }
    int rc = 0;
    if (o->format && strcmp(o->format, "json") == 0) {
        rc = print_json(l.arr);
    } else {
        for (size_t i = 0; i < jv_arr_len(l.arr); i++) {
            jv *d = jv_arr_at(l.arr, i);
            printf("%s  %-24s %-14s %-12s pr=%lld\n", jv_path_str(d, "received_at"),
                   jv_path_str(d, "delivery_id"), jv_path_str(d, "event"),
                   jv_path_str(d, "action") ? jv_path_str(d, "action") : "-",
                   (long long)jv_number(jv_get(d, "pr_number")));
        }
    }
    jv_free(l.arr);
    return rc;
}

static int cmd_redeliver(store *st, const cli_opts *o)
{
    if (!o->id) {
        usage();
        return 2;
    }
    int n = 0;
    crcr_err e = store_redeliver(st, o->id, o->repo, clock_now_ms(), &n);
    if (e) {
        fprintf(stderr, "crcr: delivery %s: %s\n", o->id, crcr_strerror(e));
        return 1;
    }
    printf("re-queued %d dispatch%s of %s\n", n, n == 1 ? "" : "es", o->id);
    return n > 0 ? 0 : 1;
}

int cli_deliveries_main(int argc, char **argv)
{
    if (argc < 1) {
        usage();
        return 2;
    }
    cli_opts o = {0};
    if (parse_opts(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    const char *sub = argv[0];
    if (strcmp(sub, "list") != 0 && strcmp(sub, "show") != 0 && strcmp(sub, "redeliver") != 0) {
        usage();
        return 2;
    }
    crcr_config cfg;
    char err[512] = "";
    if (config_load(&cfg, o.config, config_getenv, NULL, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, "crcr: %s\n", err);
        return 2;
    }
    store *st = NULL;
    crcr_err e = store_open(cfg.store_uri, &st, err, sizeof(err));
    if (e) {
        fprintf(stderr, "crcr: %s\n", err);
        config_free(&cfg);
        return e == CRCR_E_CONFIG ? 2 : 1;
    }
    int rc;
    if (strcmp(sub, "list") == 0)
        rc = cmd_list(st, &o);
    else if (strcmp(sub, "show") == 0)
        rc = cmd_show(st, &o);
    else
        rc = cmd_redeliver(st, &o);
    store_close(st);
    config_free(&cfg);
    return rc;
}
