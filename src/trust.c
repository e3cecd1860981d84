/* trust.c - `crcr trust` and the pins' JSON document; see trust.h. */
#include "trust.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "clock.h"
#include "config.h"
#include "json.h"
#include "limits.h"

typedef struct doc_ctx {
    buf_t *out;
    size_t n;
    crcr_err err;
} doc_ctx;

static void add_pin(void *vctx, const store_identity_row *r)
{
    doc_ctx *c = vctx;
    char when[40];
    clock_iso8601(r->pinned_at, when, sizeof(when));
    buf_t *b = c->out;
    crcr_err e = buf_puts(b, c->n++ ? ",{\"repo\":" : "{\"repo\":");
    jv_quote(b, r->repo, strlen(r->repo));
    buf_puts(b, ",\"repository_id\":");
    jv_quote(b, r->repository_id, strlen(r->repository_id));
    buf_puts(b, ",\"owner_id\":");
    jv_quote(b, r->owner_id, strlen(r->owner_id));
    buf_puts(b, ",\"pinned_at\":");
    jv_quote(b, when, strlen(when));
    if (!e)
        e = buf_putc(b, '}');
    if (e && !c->err)
        c->err = e;
}

crcr_err trust_doc(store *st, buf_t *out)
{
    doc_ctx c = {.out = out};
    buf_puts(out, "{\"pins\":[");
    crcr_err e = store_identity_list(st, add_pin, &c);
    if (!e)
        e = c.err;
    if (!e)
        e = buf_puts(out, "]}");
    return e;
}

static void print_pin(void *ctx, const store_identity_row *r)
{
    char when[40];
    clock_iso8601(r->pinned_at, when, sizeof(when));
    printf("%-40s repository_id=%s owner_id=%s pinned_at=%s\n", r->repo, r->repository_id,
           r->owner_id, when);
}

static const char USAGE[] = "usage: crcr trust list [--config FILE]\n"
                            "       crcr trust reset OWNER/REPO [--config FILE]\n";

int trust_main(int argc, char **argv)
{
    const char *verb = argc >= 1 ? argv[0] : NULL;
    const char *repo = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            file = argv[++i];
        } else if (strcmp(argv[i], "--config") == 0) {
            fprintf(stderr, "crcr trust: --config needs a value\n%s", USAGE);
            return 2;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "crcr trust: unknown option '%s'\n%s", argv[i], USAGE);
            return 2;
        } else if (!repo) {
            repo = argv[i];
        } else {
            fprintf(stderr, "crcr trust: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        }
    }
    bool list = verb && strcmp(verb, "list") == 0 && !repo;
    bool reset = verb && strcmp(verb, "reset") == 0 && repo;
    if (!list && !reset) {
        fputs(USAGE, stderr);
        return 2;
    }
    if (reset && (strlen(repo) >= CRCR_REPO_NAME_MAX || !strchr(repo, '/'))) {
        fprintf(stderr, "crcr trust: expected OWNER/REPO, got '%s'\n", repo);
        return 2;
    }
    crcr_config cfg;
    const char *used = NULL;
    if (cli_load_config(file, &cfg, &used) != 0)
        return 2;
    store *st = NULL;
    int orc = cli_open_store(&cfg, used, &st);
    if (orc) {
        config_free(&cfg);
        return orc;
    }
    int rc = 0;
    crcr_err e;
    if (list) {
        e = store_identity_list(st, print_pin, NULL);
    } else {
        e = store_identity_reset(st, repo);
        if (e == CRCR_E_NOT_FOUND) {
            fprintf(stderr, "crcr trust: %s has no pin\n", repo);
            rc = 1;
            e = CRCR_OK;
        } else if (!e) {
            printf("reset the pin of %s: its next callback pins it again\n", repo);
        }
    }
    if (e) {
        fprintf(stderr, "crcr trust: %s\n", crcr_strerror(e));
        rc = 1;
    }
    store_close(st);
    config_free(&cfg);
    return rc;
}
