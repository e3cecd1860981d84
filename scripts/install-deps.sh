#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing crcr need, when they are missing.
# Usage: scripts/install-deps.sh [--with-extras]   (extras: packages only CI's longer checks use)
set -euo pipefail

pkgs=(build-essential pkg-config cmake ninja-build
      libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libjansson-dev
      libyaml-dev libsqlite3-dev libpq-dev libcmocka-dev
      python3 openssl ca-certificates curl)
if [ "${1:-}" = "--with-extras" ]; then
  pkgs+=(clang clang-format libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
