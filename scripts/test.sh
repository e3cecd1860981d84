#!/usr/bin/env bash
# Installs what is missing, builds with -Wall -Wextra -Werror and runs the whole test suite:
#  - unit tests (the store conformance suite on SQLite and on PostgreSQL),
#  - end-to-end tests against the real binary, a fake GitHub, a test OIDC issuer and a fake HUD on
#    loopback, headless Chromium for the HUD pages, and two relays on one PostgreSQL,
#  - the end-to-end suites whose subject is the store once more with PostgreSQL as every relay's
#    store (ctest entries e2e_pg.*; CRCR_E2E_PG_ALL=1: every suite that has a store, as CI runs),
#  - the suites that talk to GitHub once more against a GitHub Enterprise Server 3.19 fake (API
#    under /api/v3; ctest entries e2e_ghes.*).
# Every request the relay sends to the fake GitHub, and every answer of the fake, is checked
# against GitHub's REST API description (@octokit/openapi, pinned, fetched from the npm registry
# into ~/.cache/crcr/openapi once: tests/support/contract.py); the counts are summed up at the end
# in <build>/test-output/contract-summary.txt.
# A throwaway PostgreSQL cluster on 127.0.0.1 is started (while the build runs) and removed
# afterwards. The tests await events and move the relay's clock instead of waiting for it
# (tests/support/README.md), so they run side by side: CRCR_TEST_JOBS (default 6) at a time.
# Variables: those of scripts/build.sh (CRCR_E2E_PG_ALL among them), CRCR_TEST_JOBS,
# CRCR_TEST_TIMEOUT_SCALE (default 3 with CRCR_SANITIZE=1, else 1: tests/support/waiting.py),
# CRCR_E2E_ON_PG=0 to skip the e2e_pg entries and CRCR_E2E_ON_GHES=0 the e2e_ghes ones,
# CRCR_TEST_TMPDIR for the tests' scratch (default: a directory in /dev/shm when it has room).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
dir="${CRCR_BUILD_DIR:-build}"
# Debian's python3 (the one install-deps.sh gives python3-yaml and python3-jsonschema), as ctest
# runs it (CMakeLists.txt), before another python3 on PATH.
py=python3
[ ! -x /usr/bin/python3 ] || py=/usr/bin/python3
"$py" tests/support/contract.py fetch

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
# A sanitizer build does the same work several times slower: the tests' bounds (which only end a
# broken test, tests/support/waiting.py) stretch with it.
if [ "${CRCR_SANITIZE:-0}" = "1" ]; then
  export CRCR_TEST_TIMEOUT_SCALE="${CRCR_TEST_TIMEOUT_SCALE:-3}"
fi
# The tests' scratch (each relay's SQLite store, logs, allowlists: they follow TMPDIR) goes to
# memory when /dev/shm is a tmpfs with room: a SQLite commit fsyncs, and on this 2-core machine's
# disk those fsyncs cost the suite ~9 % of its CPU (user + system time of a whole run: 313 s
# with the scratch on disk, 286 in memory). The tests kill processes, never the machine, so a file
# in memory keeps every property they check; the disk-full tests mount a tmpfs of their own and the
# bench measures the disk. CRCR_TEST_TMPDIR picks the place instead (a disk, say).
scratch="${CRCR_TEST_TMPDIR:-}"
shm_kib="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 + 0 }')"
if [ -z "$scratch" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = "tmpfs" ] &&
  [ "${shm_kib:-0}" -ge $((2 * 1024 * 1024)) ]; then
  scratch=/dev/shm
fi
if [ -n "$scratch" ]; then
  TMPDIR="$(mktemp -d "$scratch/crcr-tests.XXXXXX")"
  chmod 1777 "$TMPDIR" # as /tmp: the postgres user of a test's own cluster works in it too
  export TMPDIR
  trap 'cleanup; rm -rf "$TMPDIR" 2>/dev/null || true' EXIT
  echo "Scratch for the tests: $TMPDIR"
fi
mkdir -p "$dir/test-output"
rm -rf "$dir/test-output/contract" "$dir/test-output/contract-summary.txt"

skip=()
if [ "${CRCR_E2E_ON_PG:-1}" != "1" ]; then
  skip+=('^e2e_pg\.')
fi
if [ "${CRCR_E2E_ON_GHES:-1}" != "1" ]; then
  skip+=('^e2e_ghes\.')
fi
exclude=()
if [ "${#skip[@]}" -gt 0 ]; then
  exclude=(-E "$(IFS='|'; echo "${skip[*]}")")
fi
echo "== the whole suite (SQLite stores, then the e2e_pg entries on PostgreSQL and the e2e_ghes"
echo "   ones against GitHub Enterprise Server; conformance and multi-instance on PostgreSQL)"
status=0
ctest --test-dir "$dir" --output-on-failure -j"${CRCR_TEST_JOBS:-6}" "${exclude[@]}" || status=1
echo "== GitHub REST API contract check"
"$py" tests/support/contract.py summary "$dir/test-output" || status=1
echo "== done in ${SECONDS} s"
exit "$status"
