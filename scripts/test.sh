#!/usr/bin/env bash
# Installs what is missing, builds with -Wall -Wextra -Werror and runs the whole test suite:
#  - unit tests (the store conformance suite on SQLite and on PostgreSQL),
#  - end-to-end tests against the real binary, a fake GitHub, a test OIDC issuer and a fake HUD on
#    loopback, headless Chromium for the HUD pages, and two relays on one PostgreSQL,
#  - the end-to-end suites that touch the store once more with PostgreSQL as every relay's store
#    (ctest entries e2e_pg.*).
# A throwaway PostgreSQL cluster on 127.0.0.1 is started (while the build runs) and removed
# afterwards. The tests await events and move the relay's clock instead of waiting for it
# (tests/support/README.md), so they run side by side: CRCR_TEST_JOBS (default 6) at a time.
# Variables: those of scripts/build.sh, CRCR_TEST_JOBS, and CRCR_E2E_ON_PG=0 to skip the e2e_pg
# entries.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
dir="${CRCR_BUILD_DIR:-build}"

pgdir="$(mktemp -d /tmp/crcr-pg.XXXXXX)"
pg_pid=""
cleanup() {
  [ -z "$pg_pid" ] || wait "$pg_pid" 2>/dev/null || true
  scripts/pg-test-cluster.sh destroy "$pgdir" >/dev/null 2>&1 || true
  rm -f "$pgdir.uri" "$pgdir.log"
}
trap cleanup EXIT
scripts/pg-test-cluster.sh start "$pgdir" >"$pgdir.uri" 2>"$pgdir.log" &
pg_pid=$!
scripts/build.sh
if ! wait "$pg_pid"; then
  pg_pid=""
  cat "$pgdir.log" >&2
  echo "test.sh: the PostgreSQL test cluster did not start" >&2
  exit 1
fi
pg_pid=""
echo "== built in ${SECONDS} s"
CRCR_TEST_PG_URI="$(cat "$pgdir.uri")"
export CRCR_TEST_PG_URI
echo "PostgreSQL for the tests: $CRCR_TEST_PG_URI"
mkdir -p "$dir/test-output"

skip=()
if [ "${CRCR_E2E_ON_PG:-1}" != "1" ]; then
  skip=(-E '^e2e_pg\.')
fi
echo "== the whole suite (SQLite stores, then the e2e_pg entries on PostgreSQL; conformance and"
echo "   multi-instance on PostgreSQL)"
status=0
ctest --test-dir "$dir" --output-on-failure -j"${CRCR_TEST_JOBS:-6}" "${skip[@]}" || status=1
echo "== done in ${SECONDS} s"
exit "$status"
