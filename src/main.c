/*
 * main.c - the `crcr` command line: one binary for the relay and its tools.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"
#include "app.h"
#include "cli.h"
#include "cli_deliveries.h"
#include "cli_store.h"
#include "clock.h"
#include "config.h"
#include "health.h"
#include "help.h"
#include "log.h"
#include "report.h"
#include "trust.h"
#include "webhook_send.h"

static const char USAGE[] =
    "usage: crcr <command> [options]\n"
    "\n"
    "commands:\n"
    "  serve [--config FILE]                 run the relay (webhook, workers, health)\n"
    "  allowlist check FILE                  validate an allowlist and print its levels\n"
    "  webhook send FILE [--event E] [--url U] [--secret S] [--config F] [--delivery ID]\n"
    "                                        sign a payload and POST it like GitHub does\n"
    "  deliveries list|show ID|redeliver ID  inspect and re-queue deliveries (store, or --url "
    "admin API)\n"
    "  health [--window 7d] [--format text|md|json]  level health of the allowlisted repos\n"
    "  trust list|reset OWNER/REPO           repository identities pinned at their first "
    "callback\n"
    "  store backup FILE                     copy the SQLite store while the relay runs\n"
    "  report --status S [--conclusion C] ... downstream side: post a callback from GitHub "
    "Actions\n"
    "  config [--config FILE] [--check]      print the effective configuration (secrets hidden);\n"
    "                                        --check: every problem crcr serve would refuse\n"
    "  version                               print the version\n"
    "  help [COMMAND]                        this text, or a command's own help\n"
    "\n"
    "Configuration comes from the environment and --config FILE (KEY=VALUE lines);\n"
    "see docs/configuration.md. The commands that read the store (deliveries, health,\n"
    "trust, store) read /etc/crcr/crcr.env without --config when it exists, and never\n"
    "create a store. Commands other than serve print no log lines unless CRCR_LOG\n"
    "(debug, info, warn, error) in the environment asks for them.\n";

/* The log of a command other than serve: off, so that its stderr carries its own messages only,
 * unless CRCR_LOG in the environment asks for lines (the configuration file's CRCR_LOG is the
 * relay's). */
static void command_log_level(void)
{
    crcr_log_level lvl = CRCR_LOG_OFF;
    const char *v = getenv("CRCR_LOG");
    if (v && *v && log_level_parse(v, &lvl) != 0)
        lvl = CRCR_LOG_OFF;
    log_set_level(lvl);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    char err[256];
    if (clock_test_control_init(err, sizeof(err)) != 0) {
        fprintf(stderr, "crcr: %s\n", err);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return app_serve_main(argc - 1, argv + 1);
    command_log_level();
    if (strcmp(cmd, "allowlist") == 0)
        return allowlist_check_main(argc - 2, argv + 2);
    if (strcmp(cmd, "webhook") == 0)
        return webhook_send_main(argc - 2, argv + 2);
    if (strcmp(cmd, "deliveries") == 0)
        return cli_deliveries_main(argc - 2, argv + 2);
    if (strcmp(cmd, "store") == 0)
        return cli_store_main(argc - 2, argv + 2);
    if (strcmp(cmd, "trust") == 0)
        return trust_main(argc - 2, argv + 2);
    if (strcmp(cmd, "health") == 0)
        return health_main(argc - 1, argv + 1);
    if (strcmp(cmd, "report") == 0)
        return report_main(argc - 2, argv + 2);
    if (strcmp(cmd, "config") == 0)
        return config_main(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("crcr %s%s\n", CRCR_VERSION,
               clock_test_hooks_built() ? " (test hooks: CRCR_TEST_CLOCK_FILE)" : "");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 && argc >= 3)
        return help_page(argv[2], stdout, stderr);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    fprintf(stderr, "crcr: unknown command '%s'\n\n%s", cmd, USAGE);
    return 2;
}
