/* cli_deliveries.h - `crcr deliveries list|show|redeliver` over the local store. */
#ifndef CRCR_CLI_DELIVERIES_H
#define CRCR_CLI_DELIVERIES_H

/* argv = the words after "crcr deliveries". Returns the exit code. */
int cli_deliveries_main(int argc, char **argv);

#endif
