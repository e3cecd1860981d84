#!/usr/bin/env bash
# Installs what is missing, builds with -Wall -Wextra -Werror and runs the whole test suite
# (unit tests and end-to-end tests against the real binary). Same variables as scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
dir="${CRCR_BUILD_DIR:-build}"
ctest --test-dir "$dir" --output-on-failure -j2
