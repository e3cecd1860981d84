/*
 * cli.h - what the operator commands that read the store share (`crcr deliveries`, `health`,
 * `trust`, `store`): which configuration they read, opening the store without ever creating
 * one, and the allowlist the relay would use.
 *
 * Configuration. With --config FILE that file; without it the packaged configuration
 * CLI_DEFAULT_CONFIG (/etc/crcr/crcr.env) when it exists (also when this user may not read it:
 * then the command stops saying so), else the environment alone. The
 * environment variable CRCR_DEFAULT_CONFIG names another default file (tests, other layouts);
 * set and empty, it turns the default file off. The environment overrides the file's values in
 * every case (config.h).
 */
#ifndef CRCR_CLI_H
#define CRCR_CLI_H

#include "allowlist.h"
#include "allowlist_source.h"
#include "config.h"
#include "github.h"
#include "store.h"

/* The packaged configuration file, read when no --config is given and it exists. */
#define CLI_DEFAULT_CONFIG "/etc/crcr/crcr.env"

/* The configuration file a command reads: `given` (from --config) when not NULL, else the
 * default file described above when it exists, else NULL (the environment alone). The result
 * is `given`, a string of the environment or a constant: nothing to free. */
const char *cli_config_file(const char *given);

/* Loads the configuration from cli_config_file(given) and the environment into *cfg (released
 * with config_free by the caller on success). Returns 0, or 2 after printing the reason. *used
 * (may be NULL) receives the file read, NULL for none. */
int cli_load_config(const char *given, crcr_config *cfg, const char **used);

/* After a failed load of `file`: when it exists but this user may not read it, says so and how
 * to run the command (stderr); otherwise prints nothing. */
void cli_config_unreadable_hint(const char *file);

/* Prints which configuration file was read (`used`, NULL for none) to stderr: the second line
 * of a "no store" message. */
void cli_config_note(const char *used);

/* Opens the store of `cfg` for an operator command: an existing SQLite file or a PostgreSQL
 * URI; a missing SQLite file is never created. Returns 0 with *out set (the caller closes it),
 * 2 after printing a message that names the path, the configuration read (`used`, NULL for the
 * environment alone) and how to point at the right store, or 1 after printing a store error. */
int cli_open_store(const crcr_config *cfg, const char *used, store **out);

/* Loads the allowlist the relay of `cfg` would use (ALLOWLIST_FILE, or ALLOWLIST_URL through
 * GitHub). Returns it with a reference the caller drops with allowlist_free(), and *gh / *src
 * (freed by the caller with gh_client_free / allowlist_source_free, also on failure); NULL with
 * the reason in err when there is none or it cannot be loaded. */
allowlist *cli_load_allowlist(const crcr_config *cfg, gh_client **gh, allowlist_source **src,
                              char *err, size_t errsz);

/* ---- the commands (main.c calls them with the arguments after the command's name) ---- */

/* `crcr allowlist check FILE` (cli_allowlist.c): prints a summary and returns 0, or prints
 * "FILE:LINE:COL: msg" lines to stderr and returns 1 (2 for usage errors). */
int allowlist_check_main(int argc, char **argv);
/* `crcr health [--window W] [--format text|md|json] [--repo R] [--config F]` (cli_health.c). */
int health_main(int argc, char **argv);
/* `crcr trust list|reset OWNER/REPO [--config F]` (cli_trust.c). */
int trust_main(int argc, char **argv);
/* `crcr config [--config F] [--check]` (cli_config.c). */
int config_main(int argc, char **argv);

#endif
