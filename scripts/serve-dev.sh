#!/usr/bin/env bash
# Installs what is missing, builds the crcr binary (only it: the tests build with scripts/test.sh)
# and runs the relay on 127.0.0.1:8000 in dry-run (no App credentials) with the embedded SQLite
# store and the sample allowlist from examples/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh crcr
exec build/crcr serve --config examples/crcr.env
