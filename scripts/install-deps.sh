#!/usr/bin/env bash
# Installs the Debian 12 packages crcr needs, when they are missing.
#   scripts/install-deps.sh            build and run the relay
#   scripts/install-deps.sh --test     + what the whole test suite needs (PostgreSQL, Chromium,
#                                        Node.js for the reporting action's tests, PyYAML for
#                                        the Kubernetes manifest check, python3-jsonschema for
#                                        the GitHub REST API contract check; curl fetches
#                                        GitHub's API description at test time)
#   scripts/install-deps.sh --package  + what building and testing the Debian package needs
#                                        (dpkg-dev, python3 for the man pages, systemd-analyze)
#   scripts/install-deps.sh --ci       all of the above + what CI's extra checks need (clang,
#                                        libFuzzer, clang-format, nginx for `nginx -t`)
# Installing Debian's nginx starts it where services may start (not in containers whose
# policy-rc.d forbids it): --ci is meant for throwaway CI machines.
set -euo pipefail

pkgs=(build-essential pkg-config cmake ninja-build
      libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libjansson-dev
      libyaml-dev libsqlite3-dev libpq-dev libcmocka-dev liblz4-dev zlib1g-dev
      openssl ca-certificates curl)
package=(python3 dpkg-dev systemd adduser)
case "${1:-}" in
  --test) pkgs+=(python3 python3-yaml python3-jsonschema postgresql chromium nodejs) ;;
  --package) pkgs+=("${package[@]}") ;;
  --ci)   pkgs+=(python3 python3-yaml python3-jsonschema postgresql chromium nodejs clang
                 clang-format libclang-rt-14-dev nginx "${package[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--test|--package|--ci]" >&2; exit 2 ;;
esac

# One dpkg-query for every package (one per package took seconds on a busy machine).
installed="$(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null |
  awk '$2 == "install" && $3 == "ok" && $4 == "installed" {print $1}' || true)"
missing=()
for p in "${pkgs[@]}"; do
  grep -qxF "$p" <<<"$installed" || missing+=("$p")
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
