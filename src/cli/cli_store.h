/*
 * cli_store.h - `crcr store backup FILE [--config FILE]`: a consistent copy of the SQLite store,
 * safe while `crcr serve` runs (store_backup); for PostgreSQL it prints the pg_dump command to
 * use instead and exits 2. Restoring and upgrading are procedures, in docs/operations.md.
 */
#ifndef CRCR_CLI_STORE_H
#define CRCR_CLI_STORE_H

/* argv[0] is the verb. Returns the exit status: 0 done, 1 the backup failed, 2 usage, no store,
 * or a store crcr does not back up itself. */
int cli_store_main(int argc, char **argv);

#endif
