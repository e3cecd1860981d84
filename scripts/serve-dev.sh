#!/usr/bin/env bash
# Installs what is missing, builds, and runs the relay on 127.0.0.1:8000 in dry-run (no App
# credentials) with the embedded SQLite store and the sample allowlist from examples/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/crcr serve --config examples/crcr.env
