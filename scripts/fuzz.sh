#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_*.c) with clang, ASan and UBSan in build-fuzz/ and runs
# each one for SECONDS (default 60). Seeds come from fuzz/corpus/<target>/, copied into a temporary
# working corpus so that the checkout is not modified; fuzz/<target>.dict is used when present.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 webhook allowlist
# Environment:
#   CRCR_FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   CRCR_FUZZ_JOBS       targets run at the same time (default 1)
#   CRCR_FUZZ_KEEP=1     keep the working corpora (their path is printed) to merge new inputs
# Exit status: 0 when no target found anything; 1 on any finding (crash, sanitizer report, leak,
# timeout, out-of-memory or a failed invariant), with the saved input's path printed; 2 on usage
# or build errors. Logs: <build dir>/fuzz-logs/<target>.log; inputs: <build dir>/fuzz-findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

secs="${1:-60}"
case "$secs" in
'' | *[!0-9]*)
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
  ;;
esac
[ "$#" -gt 0 ] && shift

dir="${CRCR_FUZZ_BUILD_DIR:-build-fuzz}"
case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
jobs="${CRCR_FUZZ_JOBS:-1}"

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/fuzz_*.c; do
    n="$(basename "$f" .c)"
    targets+=("${n#fuzz_}")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "fuzz/fuzz_$t.c" ]; then
    echo "fuzz.sh: no target '$t' (fuzz/fuzz_$t.c)" >&2
    exit 2
  fi
done

if ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang is missing (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

# A build directory configured with another compiler cannot be switched to clang: start over.
if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_C_COMPILER:[A-Z]*=.*clang' "$dir/CMakeCache.txt"; then
  echo "fuzz.sh: $dir was configured with another compiler; reconfiguring it with clang"
  rm -rf "$dir"
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/crcr-fuzz.XXXXXX")"
if [ "${CRCR_FUZZ_KEEP:-0}" != "1" ]; then
  trap 'rm -rf "$work"' EXIT
fi

echo "== building ${targets[*]/#/fuzz_} in $dir"
# -Werror stays off: this build is for finding bugs, the warning-clean builds are gcc's.
if ! CC=clang cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCRCR_FUZZ=ON \
  -DCRCR_E2E=OFF -DCRCR_WERROR=OFF >"$work/cmake.log" 2>&1; then
  cat "$work/cmake.log" >&2
  exit 2
fi
ninja -C "$dir" "${targets[@]/#/fuzz_}" || exit 2

logs="$dir/fuzz-logs"
findings="$dir/fuzz-findings"
mkdir -p "$logs" "$findings"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# Runs one target; its status goes to $work/<target>.rc.
run_one() {
  local t="$1" corpus="$work/$1" out="$findings/$1" log="$logs/$1.log"
  local args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  mkdir -p "$corpus" "$out"
  if [ -d "fuzz/corpus/$t" ]; then
    cp -R "fuzz/corpus/$t/." "$corpus/"
  fi
  [ -f "fuzz/$t.dict" ] && args+=(-dict="fuzz/$t.dict")
  args+=(-artifact_prefix="$out/")
  local rc=0
  "$dir/fuzz_$t" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}

pids=()
for t in "${targets[@]}"; do
  echo "== fuzz_$t for ${secs}s (log: $logs/$t.log)"
  run_one "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}" || true
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do
  wait "$p" || true
done

failed=0
printf '\n%-12s %-8s %10s %10s %8s %8s %s\n' target result execs exec/s cov ft corpus
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  rc="$(cat "$work/$t.rc" 2>/dev/null || echo 2)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")"
  result=ok
  [ "$rc" != 0 ] && result=FOUND && failed=1
  printf '%-12s %-8s %10s %10s %8s %8s %s\n' "$t" "$result" "${execs:-?}" "${speed:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}"
done

for t in "${targets[@]}"; do
  rc="$(cat "$work/$t.rc" 2>/dev/null || echo 2)"
  [ "$rc" = 0 ] && continue
  log="$logs/$t.log"
  echo
  echo "== fuzz_$t: finding (exit status $rc), log $log"
  grep -E 'invariant failed|ERROR: |SUMMARY: |runtime error:' "$log" | head -n 5 || true
  artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)"
  if [ -n "$artifact" ]; then
    echo "input: $artifact"
    echo "reproduce: $dir/fuzz_$t $artifact"
  else
    echo "no input was saved; see the log"
  fi
done
if [ "${CRCR_FUZZ_KEEP:-0}" = "1" ]; then
  echo "working corpora kept in $work"
fi
exit "$failed"
