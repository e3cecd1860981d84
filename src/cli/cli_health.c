/* cli_health.c - `crcr health`: the level-health report of health.h over the store. */
#include "health.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "allowlist_source.h"
#include "cli.h"
#include "clock.h"
#include "config.h"
#include "github.h"

/* Output buffers: one report is a few hundred bytes per repo. */
#define HEALTH_OUT_MAX (16u * 1024u * 1024u)

/* ---- crcr health ---- */

static void usage(void)
{
    fputs("usage: crcr health [--window 7d] [--format text|md|json] [--repo OWNER/REPO] "
          "[--config FILE]\n"
          "  level health of every allowlisted repo over the window (store: CRCR_STORE,\n"
          "  allowlist: ALLOWLIST_FILE or ALLOWLIST_URL)\n",
          stderr);
}

/* Loads the allowlist the relay would use; NULL (with a warning) when it cannot. */
static allowlist *load_allowlist(const crcr_config *cfg, gh_client **gh, allowlist_source **src)
{
    char err[512] = "";
    allowlist *al = cli_load_allowlist(cfg, gh, src, err, sizeof(err));
    if (!al)
        fprintf(stderr, "crcr: allowlist: %s: levels come from the runs\n", err);
    return al;
}

int health_main(int argc, char **argv)
{
    const char *config_file = NULL, *format = "text", *repo = NULL;
    int64_t window = HEALTH_WINDOW_DEFAULT_MS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") != 0 && strcmp(a, "--format") != 0 && strcmp(a, "--repo") != 0 &&
            strcmp(a, "--window") != 0) {
            fprintf(stderr, "crcr health: %s '%s'\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            usage();
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "crcr health: %s needs a value\n", a);
            usage();
            return 2;
        }
        if (strcmp(a, "--config") == 0) {
            config_file = argv[++i];
        } else if (strcmp(a, "--format") == 0) {
            format = argv[++i];
        } else if (strcmp(a, "--repo") == 0) {
            repo = argv[++i];
        } else if (strcmp(a, "--window") == 0) {
            if (health_parse_window(argv[++i], &window) != 0) {
                fprintf(stderr, "crcr: --window: expected e.g. 7d, 36h or 90m, between 1h and "
                                "90d\n");
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    if (strcmp(format, "text") != 0 && strcmp(format, "md") != 0 && strcmp(format, "json") != 0) {
        usage();
        return 2;
    }
    crcr_config cfg;
    const char *used = NULL;
    if (cli_load_config(config_file, &cfg, &used) != 0)
        return 2;
    store *st = NULL;
    int orc = cli_open_store(&cfg, used, &st);
    if (orc) {
        config_free(&cfg);
        return orc;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    gh_client *gh = NULL;
    allowlist_source *src = NULL;
    allowlist *al = load_allowlist(&cfg, &gh, &src);
    health_thresholds t;
    health_thresholds_from_config(&t, &cfg);
    health_report rep;
    int rc = 1;
    crcr_err e = health_report_build(st, al, repo, clock_now_ms(), window, &t, &rep);
    if (e) {
        fprintf(stderr, "crcr: health: %s\n", crcr_strerror(e));
    } else {
        buf_t b;
        buf_init(&b, HEALTH_OUT_MAX);
        if (strcmp(format, "json") == 0)
            e = health_report_json(&rep, &b);
        else if (strcmp(format, "md") == 0)
            e = health_report_md(&rep, &b);
        else
            e = health_report_text(&rep, &b);
        if (!e) {
            fputs(buf_cstr(&b), stdout);
            if (strcmp(format, "json") == 0)
                fputc('\n', stdout);
            rc = 0;
        } else {
            fprintf(stderr, "crcr: health: %s\n", crcr_strerror(e));
        }
        buf_free(&b);
        health_report_free(&rep);
    }
    allowlist_free(al);
    allowlist_source_free(src);
    gh_client_free(gh);
    curl_global_cleanup();
    store_close(st);
    config_free(&cfg);
    return rc;
}
