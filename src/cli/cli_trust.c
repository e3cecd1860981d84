/* cli_trust.c - `crcr trust list|reset`: the pins of trust.h over the store. */
#include "trust.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "clock.h"
#include "config.h"
#include "crcr_limits.h"

/* ctx: the count of pins printed. */
static void print_pin(void *ctx, const store_identity_row *r)
{
    (*(size_t *)ctx)++;
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
        size_t n = 0;
        e = store_identity_list(st, print_pin, &n);
        if (!e && n == 0) /* on stderr: stdout stays a list (of nothing) for scripts */
            fputs("crcr trust: no repository identity is pinned yet (a repository's first "
                  "accepted callback pins it)\n",
                  stderr);
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
