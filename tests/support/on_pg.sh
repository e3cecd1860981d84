#!/bin/sh
# Runs an end-to-end suite with PostgreSQL as every relay's store: CRCR_E2E_PG_URI set to the
# server of CRCR_TEST_PG_URI (the e2e_pg.* ctest entries, CMakeLists.txt). Without it the entry
# is skipped (exit 77).
if [ -z "${CRCR_TEST_PG_URI:-}" ]; then
  echo "CRCR_TEST_PG_URI is not set: skipped (scripts/test.sh starts a server)" >&2
  exit 77
fi
CRCR_E2E_PG_URI="$CRCR_TEST_PG_URI" exec "$@"
