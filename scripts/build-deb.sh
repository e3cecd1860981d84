#!/usr/bin/env bash
# Builds the Debian package crcr_VERSION_ARCH.deb (VERSION from CMakeLists.txt's project()) with
# Debian's own tools: the binary built with dpkg-buildflags' hardening flags, dependencies from
# dpkg-shlibdeps, man pages made from `crcr help`, maintainer scripts and the conffile from
# deploy/debian/, and dpkg-deb. Prints the path of the package on its last line.
#   scripts/build-deb.sh [OUTDIR]            (default: the build directory)
# Environment: CRCR_DEB_BUILD_DIR (default build-deb), CRCR_DEB_MAINTAINER.
# Needs no root: every file in the package is root:root (dpkg-deb --root-owner-group); the crcr
# group of /etc/crcr and /etc/crcr/crcr.env is set by the postinst (dpkg-statoverride).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
dir="${CRCR_DEB_BUILD_DIR:-build-deb}"
outdir="${1:-$dir}"
maintainer="${CRCR_DEB_MAINTAINER:-crcr maintainers <crcr@localhost>}"

if ! command -v dpkg-shlibdeps >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1; then
  scripts/install-deps.sh --package
fi

version="$(sed -n 's/^project(crcr VERSION \([0-9][0-9.]*\) .*/\1/p' CMakeLists.txt)"
if [ -z "$version" ]; then
  echo "build-deb: no version in CMakeLists.txt's project()" >&2
  exit 1
fi
arch="$(dpkg --print-architecture)"
# Reproducible dates (man page headers, file times): the last commit's.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

# The binary: the project's RelWithDebInfo build (the configuration the tests run) with Debian's
# hardening flags (stack protector, _FORTIFY_SOURCE, format checks, full RELRO, PIE), -Werror.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
ldflags="$(dpkg-buildflags --get LDFLAGS)"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$cflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCRCR_WERROR=ON -DCRCR_SANITIZE=OFF -DCRCR_FUZZ=OFF \
  -DCRCR_E2E=OFF -DCRCR_TEST_HOOKS=OFF >/dev/null
ninja -C "$dir" crcr >/dev/null
bin="$dir/crcr"
built="$("$bin" version)"
if [ "$built" != "crcr $version" ]; then
  echo "build-deb: the binary says '$built', CMakeLists.txt $version" >&2
  exit 1
fi

pkg="$dir/deb/crcr_${version}_${arch}"
rm -rf "$pkg"
umask 022
install -d "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/etc/crcr" \
  "$pkg/usr/share/man/man1" "$pkg/usr/share/doc/crcr" "$pkg/usr/share/crcr"

install -m 0755 "$bin" "$pkg/usr/bin/crcr"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$pkg/usr/bin/crcr"
install -m 0644 deploy/systemd/crcr.service deploy/systemd/crcr@.service "$pkg/lib/systemd/system/"
# root:root 0640 in the archive; the postinst gives it the group crcr.
install -m 0640 deploy/debian/crcr.env "$pkg/etc/crcr/crcr.env"

# Man pages from `crcr help`: crcr.1 and crcr-COMMAND.1 for every page the binary has.
python3 scripts/man-pages.py "$bin" "$dir/man" >/dev/null
for page in "$dir"/man/*.1; do
  gzip -9n <"$page" >"$pkg/usr/share/man/man1/$(basename "$page").gz"
done

# Documentation: the operator's documents, the upstream changelog.
install -m 0644 deploy/debian/copyright "$pkg/usr/share/doc/crcr/copyright"
gzip -9n <CHANGELOG.md >"$pkg/usr/share/doc/crcr/changelog.gz"
gzip -9n <README.md >"$pkg/usr/share/doc/crcr/README.md.gz"
for doc in docs/*.md; do
  gzip -9n <"$doc" >"$pkg/usr/share/doc/crcr/$(basename "$doc").gz"
done
# Examples docs/go-live.md uses, outside /usr/share/doc (which minimal images often leave out of
# dpkg's installs): the sample allowlist, the nginx site and real webhook payloads to send with
# `crcr webhook send` (tests/data/webhooks, MIT, see their ATTRIBUTION.md).
ex="$pkg/usr/share/crcr/examples"
install -d "$ex" "$ex/webhooks"
install -m 0644 examples/allowlist.yml "$ex/allowlist.yml"
install -m 0644 deploy/nginx/crcr.conf "$ex/nginx-crcr.conf"
install -m 0644 tests/data/webhooks/*.json tests/data/webhooks/ATTRIBUTION.md "$ex/webhooks/"

# Depends: the shared libraries the binary links, as dpkg-shlibdeps finds them (libmicrohttpd12,
# libcurl4, libjansson4, libyaml-0-2, libsqlite3-0, libpq5, libssl3, libc6).
shlib="$dir/deb/shlibdeps"
rm -rf "$shlib"
mkdir -p "$shlib/debian"
printf 'Source: crcr\n\nPackage: crcr\nArchitecture: any\n' >"$shlib/debian/control"
shlibs="$(cd "$shlib" && dpkg-shlibdeps -O -e"$root/$pkg/usr/bin/crcr" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')"
if [ -z "$shlibs" ]; then
  echo "build-deb: dpkg-shlibdeps found no dependencies" >&2
  exit 1
fi

install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$pkg/DEBIAN/"
echo "/etc/crcr/crcr.env" >"$pkg/DEBIAN/conffiles"
chmod 0644 "$pkg/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
  -e "s|@INSTALLED_SIZE@|$size|" -e "s|@SHLIBS@|$shlibs|" deploy/debian/control.in \
  >"$pkg/DEBIAN/control"
(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/md5sums"
find "$pkg" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$outdir"
deb="$outdir/crcr_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "build-deb: $(dpkg-deb -f "$deb" Package Version Architecture | tr '\n' ' ')"
echo "build-deb: Depends: $(dpkg-deb -f "$deb" Depends)"
echo "$deb"
