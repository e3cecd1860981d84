#!/usr/bin/env bash
# Configures and builds crcr: every target, or the ninja targets given (scripts/build.sh crcr
# builds the binary alone). Environment: CRCR_BUILD_DIR (default build), CRCR_SANITIZE=1 for an
# ASan+UBSan build, CRCR_BUILD_TYPE (default RelWithDebInfo), CRCR_TEST_HOOKS (default ON: the
# clock tests move, src/core/clock.h; the Debian package and the benchmarks build without it),
# CRCR_E2E_PG_ALL=1 to register every end-to-end suite on PostgreSQL too (CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CRCR_BUILD_DIR:-build}"
san=OFF
[ "${CRCR_SANITIZE:-0}" = "1" ] && san=ON
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${CRCR_BUILD_TYPE:-RelWithDebInfo}" \
  -DCRCR_WERROR=ON -DCRCR_SANITIZE="$san" -DCRCR_TEST_HOOKS="${CRCR_TEST_HOOKS:-ON}" \
  -DCRCR_E2E_PG_ALL="$([ "${CRCR_E2E_PG_ALL:-0}" = "1" ] && echo ON || echo OFF)" >/dev/null
ninja -C "$dir" "$@"
