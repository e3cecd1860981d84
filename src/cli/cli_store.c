/* cli_store.c - `crcr store backup`; see cli_store.h. */
#include "cli_store.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "config.h"
#include "store.h"

static const char USAGE[] = "usage: crcr store backup FILE [--config FILE]\n";

/* Longest store URI shown in the pg_dump advice. */
#define CLI_STORE_URI_MAX 4096u

/* PostgreSQL: the documented pg_dump command, with the password hidden. */
static int pg_advice(const crcr_config *cfg, const char *file)
{
    buf_t uri;
    buf_init(&uri, CLI_STORE_URI_MAX);
    if (config_redact_store(cfg->store_uri, &uri) != CRCR_OK)
        buf_puts(&uri, "postgresql://...");
    fprintf(stderr,
            "crcr store backup: the store is PostgreSQL, which crcr does not copy itself; back "
            "it up with pg_dump (safe while the relays run):\n"
            "  pg_dump --format=custom --file=%s '%s'\n"
            "(the password from ~/.pgpass or PGPASSWORD, not the command line). Restore: stop "
            "every relay, then\n"
            "  pg_restore --clean --if-exists --no-owner --dbname='<the same URI>' %s\n"
            "See docs/operations.md (Backup, restore and upgrade).\n",
            file, buf_cstr(&uri), file);
    buf_free(&uri);
    return 2;
}

int cli_store_main(int argc, char **argv)
{
    const char *verb = argc >= 1 ? argv[0] : NULL;
    if (!verb || strcmp(verb, "backup") != 0) {
        if (verb)
            fprintf(stderr, "crcr store: unknown verb '%s'\n", verb);
        fputs(USAGE, stderr);
        return 2;
    }
    const char *file = NULL, *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "crcr store: --config needs a value\n%s", USAGE);
                return 2;
            }
            config = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "crcr store: unknown option '%s'\n%s", argv[i], USAGE);
            return 2;
        } else if (!file) {
            file = argv[i];
        } else {
            fprintf(stderr, "crcr store: unexpected argument '%s'\n%s", argv[i], USAGE);
            return 2;
        }
    }
    if (!file || !*file) {
        fprintf(stderr, "crcr store backup: FILE is required\n%s", USAGE);
        return 2;
    }
    crcr_config cfg;
    const char *used = NULL;
    if (cli_load_config(config, &cfg, &used) != 0)
        return 2;
    if (strncmp(cfg.store_uri, "sqlite:", 7) != 0) {
        int rc = pg_advice(&cfg, file);
        config_free(&cfg);
        return rc;
    }
    char err[1024] = "";
    if (store_missing(cfg.store_uri, err, sizeof(err))) {
        fprintf(stderr, "crcr: %s\n", err);
        cli_config_note(used);
        config_free(&cfg);
        return 2;
    }
    int version = 0;
    crcr_err e = store_backup(cfg.store_uri, file, &version, err, sizeof(err));
    int rc = 0;
    if (e == CRCR_E_NOT_FOUND) {
        fprintf(stderr, "crcr store backup: %s; nothing was written\n", err);
        cli_config_note(used);
        rc = 2;
    } else if (e) {
        fprintf(stderr, "crcr store backup: %s\n", err);
        rc = e == CRCR_E_DUPLICATE ? 2 : 1;
    } else {
        struct stat sb;
        long long size = stat(file, &sb) == 0 ? (long long)sb.st_size : -1;
        printf("backed up %s to %s (schema version %d, %lld bytes)\n", cfg.store_uri + 7, file,
               version, size);
    }
    config_free(&cfg);
    return rc;
}
