#!/usr/bin/env bash
# Installs what is missing, builds with -Wall -Wextra -Werror and runs the whole test suite:
#  - unit tests (the store conformance suite on SQLite and on PostgreSQL),
#  - end-to-end tests against the real binary, a fake GitHub, a test OIDC issuer and a fake HUD on
#    loopback, headless Chromium for the HUD pages, and two relays on one PostgreSQL,
#  - the end-to-end suites once more with PostgreSQL as every relay's store,
#  - the suites that talk to GitHub once more against a GitHub Enterprise Server 3.19 fake (API
#    under /api/v3).
# Every request the relay sends to the fake GitHub, and every answer of the fake, is checked
# against GitHub's REST API description (@octokit/openapi, pinned, fetched from the npm registry
# into ~/.cache/crcr/openapi once: tests/support/contract.py); the counts are summed up at the end
# in <build>/test-output/contract-summary.txt.
# A throwaway PostgreSQL cluster on 127.0.0.1 is started for the run and removed afterwards.
# Variables: those of scripts/build.sh, CRCR_E2E_ON_PG=0 to skip the PostgreSQL e2e pass and
# CRCR_E2E_ON_GHES=0 the GitHub Enterprise Server one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/build.sh
dir="${CRCR_BUILD_DIR:-build}"
python3 tests/support/contract.py fetch

pgdir="$(mktemp -d /tmp/crcr-pg.XXXXXX)"
cleanup() { scripts/pg-test-cluster.sh destroy "$pgdir" >/dev/null 2>&1 || true; }
trap cleanup EXIT
CRCR_TEST_PG_URI="$(scripts/pg-test-cluster.sh start "$pgdir")"
export CRCR_TEST_PG_URI
echo "PostgreSQL for the tests: $CRCR_TEST_PG_URI"
mkdir -p "$dir/test-output"
rm -rf "$dir/test-output/contract" "$dir/test-output/contract-summary.txt"

status=0
if [ "${CRCR_E2E_ON_PG:-1}" = "1" ]; then
  echo "== end-to-end suites with PostgreSQL as the relays' store"
  # Left out: suites that touch no store (fakegh, contract, report) and multi_instance
  # (PostgreSQL only, run below).
  CRCR_E2E_PG_URI="$CRCR_TEST_PG_URI" ctest --test-dir "$dir" --output-on-failure -j2 \
    -R '^e2e\.' -E 'e2e\.test_(fakegh|contract|multi_instance|report)$' || status=1
fi
echo "== the whole suite (SQLite stores; PostgreSQL conformance and multi-instance)"
ctest --test-dir "$dir" --output-on-failure -j2 || status=1
if [ "${CRCR_E2E_ON_GHES:-1}" = "1" ]; then
  echo "== the suites that talk to GitHub against GitHub Enterprise Server 3.19 (/api/v3)"
  # Dispatch, check runs, re-runs and OIDC callbacks, the on-call comment, the allowlist fetch
  # (e2e.test_ghes, in the run above, covers them all in one stack), and Depends-On (its URL form
  # on the GHES web host, the pull request read under /api/v3).
  CRCR_GITHUB_FLAVOR=ghes-3.19 ctest --test-dir "$dir" --output-on-failure -j2 \
    -R '^e2e\.test_(dispatch|callback_checks|oncall|allowlist_push|depends_on)$' || status=1
fi
echo "== GitHub REST API contract check"
python3 tests/support/contract.py summary "$dir/test-output" || status=1
exit "$status"
