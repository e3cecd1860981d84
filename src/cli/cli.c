/* cli.c - configuration, store and allowlist for the operator commands; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Longest message about a store that could not be opened. */
#define CLI_ERR_MAX 1024u

const char *cli_config_file(const char *given)
{
    if (given)
        return given;
    const char *def = getenv("CRCR_DEFAULT_CONFIG");
    if (!def)
        def = CLI_DEFAULT_CONFIG;
    if (!*def)
        return NULL;
    /* Only a file that is not there is no file: one this user may not read (/etc/crcr is 0750
     * root:crcr) is read, and fails saying so, rather than being taken for a missing one. */
    struct stat st;
    if (stat(def, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return NULL;
    return def;
}

int cli_load_config(const char *given, crcr_config *cfg, const char **used)
{
    const char *file = cli_config_file(given);
    if (used)
        *used = file;
    char err[512] = "";
    if (config_load(cfg, file, config_getenv, NULL, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, "crcr: %s\n", err);
        cli_config_unreadable_hint(file);
        return 2;
    }
    return 0;
}

void cli_config_unreadable_hint(const char *file)
{
    if (!file || access(file, R_OK) == 0 || errno != EACCES)
        return;
    fprintf(stderr,
            "crcr: %s exists but this user (uid %ld) may not read it: it holds secrets; run the "
            "command as root or as the relay's user (runuser -u crcr -- crcr ...), or name a "
            "readable file with --config FILE\n",
            file, (long)getuid());
}

void cli_config_note(const char *used)
{
    if (used)
        fprintf(stderr, "crcr: the configuration read was %s\n", used);
    else
        fprintf(stderr,
                "crcr: no configuration file was read (no --config, and no %s): "
                "CRCR_STORE came from the environment or its default\n",
                CLI_DEFAULT_CONFIG);
}

int cli_open_store(const crcr_config *cfg, const char *used, store **out)
{
    char err[CLI_ERR_MAX] = "";
    crcr_err e = store_open_existing(cfg->store_uri, cfg->store_pool, out, err, sizeof(err));
    if (!e)
        return 0;
    fprintf(stderr, "crcr: %s\n", err);
    if (e == CRCR_E_NOT_FOUND)
        cli_config_note(used);
    return e == CRCR_E_NOT_FOUND || e == CRCR_E_CONFIG ? 2 : 1;
}

allowlist *cli_load_allowlist(const crcr_config *cfg, gh_client **gh, allowlist_source **src,
                              char *err, size_t errsz)
{
    *gh = NULL;
    *src = NULL;
    if (!cfg->allowlist_file && !cfg->allowlist_url) {
        snprintf(err, errsz, "no ALLOWLIST_FILE or ALLOWLIST_URL");
        return NULL;
    }
    if (!cfg->allowlist_file) {
        *gh = gh_client_new(cfg, err, errsz);
        if (!*gh)
            return NULL;
    }
    *src = allowlist_source_new(cfg, *gh, err, errsz);
    if (!*src || allowlist_source_load(*src, err, errsz) != CRCR_OK)
        return NULL;
    return allowlist_source_get(*src);
}
