#!/usr/bin/env bash
# Installs what is missing, builds with -Wall -Wextra -Werror and runs the whole test suite:
# unit tests, and end-to-end tests against the real binary, a fake GitHub on loopback, a
# throwaway PostgreSQL cluster (the store tests run on SQLite and PostgreSQL) and headless
# Chromium (HUD pages). Same variables as scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/build.sh
dir="${CRCR_BUILD_DIR:-build}"

pgdir="$(mktemp -d /tmp/crcr-pg.XXXXXX)"
cleanup() { scripts/pg-test-cluster.sh destroy "$pgdir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
CRCR_TEST_PG_URI="$(scripts/pg-test-cluster.sh start "$pgdir")"
export CRCR_TEST_PG_URI
echo "PostgreSQL for the tests: $CRCR_TEST_PG_URI"

mkdir -p "$dir/test-output"
ctest --test-dir "$dir" --output-on-failure -j2
