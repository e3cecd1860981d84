#!/usr/bin/env bash
# bench/run.sh - crcr's benchmarks, against a peer measured in the same run (see bench/RESULTS.md).
#
#   bench/run.sh                      # everything (9-13 minutes on a 2-core machine)
#   bench/run.sh --only ingest,fanout # some sections: ingest, ingest_targets, fanout, fanout1000,
#                                     # callbacks, callbacks_under_ingest, memory, profile
#   bench/run.sh --store sqlite       # without the PostgreSQL variant (default: sqlite,pg)
#   bench/run.sh --no-append          # print the table, write nothing to bench/runs/
#
# Steps: installs missing tools (Debian: wrk, valgrind, nodejs/npm; linux-perf and postgresql
# when available; only as root), builds a Release crcr into build-bench/ (and bench.py the fake
# GitHub of the fan-out sections, bench/fakegh_fast.c, beside it), installs the
# @octokit/webhooks peer into bench/peer/node_modules (npm, version pinned in
# bench/peer/package.json), then runs bench/bench.py, which prints a table, writes it with the
# exact commands to bench/runs/<date>-<time>.md and lists that file in bench/RESULTS.md. Raw
# outputs go to bench/out/<timestamp>/ (not committed).
# Everything runs on 127.0.0.1 (PostgreSQL: a throwaway cluster from scripts/pg-test-cluster.sh,
# removed at the end); every load run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
export BENCH_T0="${BENCH_T0:-$(date +%s)}" # the memory section sizes itself to finish in time

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v valgrind >/dev/null || need+=(valgrind)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench: missing tools: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "bench: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# perf is optional (per-request syscall counts); Debian ships it as linux-perf.
if ! command -v perf >/dev/null && [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-perf \
    >/dev/null 2>&1 || echo "bench: linux-perf not installable; syscall counts are skipped"
fi
# PostgreSQL's server binaries are optional too (the pg store variant; bench.py skips it without).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
    >/dev/null 2>&1 || echo "bench: postgresql not installable; the PostgreSQL figures are skipped"
fi

scripts/install-deps.sh
echo "bench: building Release crcr in build-bench/"
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRCR_E2E=OFF -DCRCR_TEST_HOOKS=OFF >/dev/null
ninja -C build-bench crcr >/dev/null

if [ ! -f bench/peer/node_modules/@octokit/webhooks/package.json ]; then
  echo "bench: installing the @octokit/webhooks peer (npm)"
  (cd bench/peer && npm install --no-package-lock --no-audit --no-fund --loglevel=error)
fi

exec python3 bench/bench.py --crcr build-bench/crcr "$@"
