#!/usr/bin/env bash
# Builds the Debian package, installs it on this machine with dpkg -i and checks it the way an
# operator meets it: files, owners and modes, the crcr user, the man pages, `systemd-analyze
# verify` on the units, `crcr serve` run as the crcr user with the packaged configuration until
# /healthz and /readyz answer and a signed webhook is stored, then `dpkg --remove` (configuration,
# data and user stay) and `dpkg --purge` (nothing stays).
#
# Needs root and a machine without a crcr installation of its own: it refuses to run when the
# package, the crcr user, /etc/crcr or /var/lib/crcr exist already, so that it never purges a real
# deployment. Whatever happens, it purges its own installation before it exits.
#   scripts/test-package.sh [DEB]     (default: build one with scripts/build-deb.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

if [ "$(id -u)" -ne 0 ]; then
  echo "test-package: needs root (dpkg -i, adduser); CI runs it as root" >&2
  exit 1
fi
if dpkg-query -W -f='${Status}' crcr 2>/dev/null | grep -qv 'not-installed' ||
  getent passwd crcr >/dev/null || getent group crcr >/dev/null ||
  [ -e /etc/crcr ] || [ -e /var/lib/crcr ]; then
  echo "test-package: this machine has a crcr installation (package, user, /etc/crcr or" \
    "/var/lib/crcr); not touching it" >&2
  exit 1
fi
scripts/install-deps.sh --package

start=$(date +%s)
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
check() { # check DESCRIPTION COMMAND...
  local what="$1"
  shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
mode_owner() { stat -c '%a %U:%G' "$1" 2>/dev/null || echo missing; }
expect_stat() { # expect_stat PATH MODE OWNER:GROUP
  local got
  got="$(mode_owner "$1")"
  if [ "$got" = "$2 $3" ]; then ok "$1 is $2 $3"; else fail "$1 is $2 $3 (found: $got)"; fi
}

tmp="$(mktemp -d /tmp/crcr-package.XXXXXX)"
chmod 0755 "$tmp"
serve_pid=""
crcr_pid=""
cleanup() {
  if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "${crcr_pid:-$serve_pid}" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  if dpkg-query -W -f='${Status}' crcr 2>/dev/null | grep -qv 'not-installed'; then
    echo "test-package: purging the test installation"
    dpkg --purge crcr >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# -- build --------------------------------------------------------------------------------------
if [ -n "${1:-}" ]; then
  deb="$1"
else
  deb="$(scripts/build-deb.sh "$tmp/out" | tee "$tmp/build.log" | tail -n 1)"
  sed '$d' "$tmp/build.log"
fi
version="$(dpkg-deb -f "$deb" Version)"
echo "test-package: $deb ($(du -k "$deb" | cut -f1) KiB), built in $(($(date +%s) - start)) s"

# -- install ------------------------------------------------------------------------------------
dpkg -i "$deb"
check "dpkg: crcr $version is installed and configured" \
  test "$(dpkg-query -W -f='${Status} ${Version}' crcr)" = "install ok installed $version"

expect_stat /usr/bin/crcr 755 root:root
check "crcr version says $version" test "$(crcr version)" = "crcr $version"
expect_stat /etc/crcr 750 root:crcr
expect_stat /etc/crcr/crcr.env 640 root:crcr
check "/etc/crcr/crcr.env is a conffile" \
  sh -c "dpkg-query -W -f='\${Conffiles}' crcr | grep -q '^ /etc/crcr/crcr.env '"
expect_stat /var/lib/crcr 700 crcr:crcr
expect_stat /lib/systemd/system/crcr.service 644 root:root
expect_stat /lib/systemd/system/crcr@.service 644 root:root

IFS=: read -r _ _ uid _ _ home shell < <(getent passwd crcr) || true
check "user crcr exists" sh -c 'getent passwd crcr >/dev/null'
check "user crcr is a system user (uid $uid)" test "${uid:-99999}" -lt 1000
check "user crcr: home /var/lib/crcr, shell /usr/sbin/nologin ($home, $shell)" \
  test "$home:$shell" = "/var/lib/crcr:/usr/sbin/nologin"
check "group crcr exists and is crcr's primary group" \
  test "$(id -gn crcr 2>/dev/null)" = crcr

# Man pages: one per page `crcr help` knows, plus crcr.1. A Docker-style dpkg configuration may
# exclude /usr/share/man; then the package's own list is checked instead.
pages="$( (crcr help no-such-page 2>&1 || true) | sed -n 's/.*pages://p')"
man_excluded=no
if grep -rqs '^path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg /etc/dpkg/dpkg.cfg.d/; then
  man_excluded=yes
  echo "test-package: dpkg excludes /usr/share/man on this machine; checking the package's list"
fi
man_names="crcr"
for p in $pages; do man_names="$man_names crcr-$p"; done
for name in $man_names; do
  f="/usr/share/man/man1/$name.1.gz"
  if [ "$man_excluded" = yes ]; then
    check "man page $f in the package" sh -c "dpkg-deb -c '$deb' | grep -q ' \\.$f\$'"
  else
    check "man page $f (gzip, roff)" sh -c "gzip -t '$f' && zcat '$f' | grep -q '^\\.TH '"
  fi
done
if [ "$man_excluded" = no ] && command -v man >/dev/null 2>&1; then
  warnings="$(for name in $man_names; do
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings "$name" 2>&1 >/dev/null; done)"
  check "man renders every page without a warning${warnings:+: $warnings}" test -z "$warnings"
fi

# The units, offline (no systemd needs to run): syntax, the binary, the Documentation= pages.
man_opt=()
if [ "$man_excluded" = yes ] || ! command -v man >/dev/null 2>&1; then
  man_opt=(--man=no)
fi
cp /lib/systemd/system/crcr@.service "$tmp/crcr@8001.service"
for unit in /lib/systemd/system/crcr.service "$tmp/crcr@8001.service"; do
  if out="$(systemd-analyze verify "${man_opt[@]}" "$unit" 2>&1)" && [ -z "$out" ]; then
    ok "systemd-analyze verify $(basename "$unit")"
  else
    fail "systemd-analyze verify $(basename "$unit"): $out"
  fi
done
if out="$(systemd-analyze security --offline=true /lib/systemd/system/crcr.service 2>&1)"; then
  echo "test-package: systemd-analyze security: $(echo "$out" | tail -n 1)"
fi

# -- go-live, sections 2 and 3 of docs/go-live.md: its commands, word for word -------------------
# doc_cmd COMMAND: checks that COMMAND is in docs/go-live.md as it is written here, then runs it
# with bash (127.0.0.1:8000 replaced by the port this relay got, once it has one); its exit
# status and output (stdout and stderr) land in $doc_rc and $doc_out.
golive="$root/docs/go-live.md"
port=""
doc_cmd() {
  local cmd="$1"
  doc_out=""
  doc_rc=127
  if ! grep -qF -- "$cmd" "$golive"; then
    fail "docs/go-live.md no longer shows: $cmd"
    return 0
  fi
  [ -n "$port" ] && cmd="${cmd//127.0.0.1:8000/127.0.0.1:$port}"
  doc_out="$(bash -c "$cmd" 2>&1)" && doc_rc=0 || doc_rc=$?
  return 0
}
check "the package ships the go-live document" test -f /usr/share/doc/crcr/go-live.md.gz
for f in allowlist.yml nginx-crcr.conf webhooks/ping.json webhooks/pull_request.opened.json \
  webhooks/issues.opened.json webhooks/ATTRIBUTION.md; do
  expect_stat "/usr/share/crcr/examples/$f" 644 root:root
done

doc_cmd 'crcr config --check --config /etc/crcr/crcr.env'
echo "$doc_out" | sed 's/^/test-package: | /'
check "crcr config --check on the untouched file exits 2 (got $doc_rc)" test "$doc_rc" = 2
check "... naming GITHUB_APP_SECRET" grep -q '^crcr: GITHUB_APP_SECRET: required' <<<"$doc_out"
check "... naming the allowlist" \
  grep -q '^crcr: ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required' <<<"$doc_out"
check "... and nothing else (2 problems)" grep -q ' 2 problems in /etc/crcr/crcr.env' <<<"$doc_out"
check "crcr config reads /etc/crcr/crcr.env as user crcr" \
  sh -c "runuser -u crcr -- crcr config --config /etc/crcr/crcr.env 2>/dev/null |
    grep -qx 'CRCR_STORE=sqlite:/var/lib/crcr/crcr.db'"
# /etc/crcr is 0750 root:crcr: another user is told the file is there but unreadable.
out="$(runuser -u nobody -- crcr deliveries list 2>&1 || true)"
check "an unprivileged crcr deliveries list says it may not read /etc/crcr/crcr.env ($out)" \
  grep -q '/etc/crcr/crcr.env: cannot read: Permission denied' <<<"$out"

doc_cmd 'sed -i "s|^#GITHUB_APP_SECRET=.*|GITHUB_APP_SECRET=$(openssl rand -hex 32)|" /etc/crcr/crcr.env'
check "go-live: the webhook secret set (rc $doc_rc)" grep -qE '^GITHUB_APP_SECRET=[0-9a-f]{64}$' \
  /etc/crcr/crcr.env
doc_cmd 'sed -i "s|^#ALLOWLIST_FILE=.*|ALLOWLIST_FILE=/usr/share/crcr/examples/allowlist.yml|" /etc/crcr/crcr.env'
check "go-live: the sample allowlist set (rc $doc_rc)" \
  grep -qx 'ALLOWLIST_FILE=/usr/share/crcr/examples/allowlist.yml' /etc/crcr/crcr.env
doc_cmd 'crcr config --check --config /etc/crcr/crcr.env'
echo "$doc_out" | sed 's/^/test-package: | /'
check "crcr config --check on the completed file exits 0 (got $doc_rc)" test "$doc_rc" = 0
check "... complete" grep -q 'complete, crcr serve would start with it' <<<"$doc_out"
check "... in dry-run" grep -q '^  mode       dry-run' <<<"$doc_out"
check "... with the sample allowlist's 8 repos" grep -q '(8 repos)' <<<"$doc_out"
expect_stat /etc/crcr/crcr.env 640 root:crcr

# The unit's start, without systemd: the documented command, on a free port (the environment
# overrides the file) and with the unit's umask (UMask=), so the store's files get the modes they
# get under systemd.
umask_unit="$(sed -n 's/^UMask=//p' /lib/systemd/system/crcr.service)"
serve_cmd='cd /var/lib/crcr && runuser -u crcr -- crcr serve --config /etc/crcr/crcr.env'
check "docs/go-live.md shows how to start the relay without systemd" grep -qF "$serve_cmd" "$golive"
(
  umask "${umask_unit:-0022}"
  export CRCR_LISTEN=127.0.0.1:0
  exec bash -c "$serve_cmd"
) 2>"$tmp/serve.log" &
serve_pid=$!
for _ in $(seq 600); do # up to 60 s: the relay logs relay.started with the port it bound
  port="$(sed -n 's/.*event=relay.started.* listen=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/serve.log")"
  [ -n "$port" ] && break
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.1
done
delivery=""
if [ -z "$port" ]; then
  fail "crcr serve started (log: $(cat "$tmp/serve.log"))"
else
  ok "crcr serve started on 127.0.0.1:$port"
  # bash runs runuser, which forks crcr and waits for it; signals go to crcr itself (runuser
  # would SIGKILL its child 2 s after forwarding a SIGTERM).
  crcr_pid="$(pgrep -u crcr -x crcr | head -n 1 || true)"
  check "the relay (pid ${crcr_pid:-none}) runs as user crcr" \
    test "$(ps -o user= -p "${crcr_pid:-0}" | tr -d ' ')" = crcr
  code="$(curl -s -o "$tmp/healthz" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/healthz")"
  check "GET /healthz answers 200 {\"ok\":true} (got $code $(cat "$tmp/healthz"))" \
    test "$code:$(cat "$tmp/healthz")" = '200:{"ok":true}'
  doc_cmd 'curl -s http://127.0.0.1:8000/readyz'
  check "GET /readyz: store and allowlist, dry-run ($doc_out)" \
    grep -q '"ok":true,"store":true,"store_error":null,"allowlist":true,.*"dry_run":true' <<<"$doc_out"
  export CRCR_LISTEN="127.0.0.1:$port" # for --config's address, as the file's would be
  doc_cmd 'crcr webhook send /usr/share/crcr/examples/webhooks/ping.json --config /etc/crcr/crcr.env'
  check "the sample ping.json is sent as a ping" grep -q 'event ping (from the payload' <<<"$doc_out"
  check "... and answered pong ($doc_out)" grep -qx '{"ok":true,"pong":true}' <<<"$doc_out"
  doc_cmd 'crcr webhook send /usr/share/crcr/examples/webhooks/pull_request.opened.json --config /etc/crcr/crcr.env'
  check "the sample pull_request.opened.json is answered 202" grep -qx 'HTTP 202' <<<"$doc_out"
  queued="$(sed -n 's/.*"queued":\[\([^]]*\)\].*/\1/p' <<<"$doc_out" | tr ',' '\n' | grep -c . || true)"
  check "... and queued for the sample allowlist's 8 repos (got $queued)" test "$queued" = 8
  delivery="$(sed -n 's/^crcr webhook send: delivery \([^,]*\), event pull_request.*/\1/p' \
    <<<"$doc_out")"
  unset CRCR_LISTEN
  doc_cmd 'runuser -u crcr -- crcr deliveries list --config /etc/crcr/crcr.env'
  check "crcr deliveries list (as crcr) shows the delivery ${delivery:-?}" \
    grep -q " ${delivery:-none} " <<<"$doc_out"
  done_status=no
  for _ in $(seq 100); do # the dry-run workers record the rows within moments
    if runuser -u crcr -- crcr deliveries show "${delivery:-none}" --config /etc/crcr/crcr.env \
      --no-bodies 2>/dev/null | head -n 1 | grep -q 'status=done$'; then
      done_status=yes
      break
    fi
    sleep 0.1
  done
  check "the delivery's status becomes done once its rows are dry_run" test "$done_status" = yes
  check "crcr deliveries show prints the request bodies as indented JSON" sh -c \
    "runuser -u crcr -- crcr deliveries show '${delivery:-none}' --config /etc/crcr/crcr.env |
      grep -q '^      \"event_type\": \"pull_request\",\$'"
fi
check "the SQLite store /var/lib/crcr/crcr.db exists, owned by crcr" \
  test "$(stat -c %U /var/lib/crcr/crcr.db 2>/dev/null)" = crcr
for f in /var/lib/crcr/crcr.db*; do
  [ -e "$f" ] || continue
  echo "test-package: $(stat -c '%A %U:%G %n' "$f") (umask ${umask_unit:-0022}, the unit's)"
  check "$f is not readable by others" test "$(($(stat -c '0%a' "$f") & 4))" -eq 0
done
if [ -n "$serve_pid" ]; then
  kill -TERM "${crcr_pid:-$serve_pid}" 2>/dev/null || true
  status=0
  wait "$serve_pid" || status=$?
  serve_pid=""
  check "crcr serve stops on SIGTERM with status 0 (got $status)" test "$status" -eq 0
fi
check "crcr deliveries list (as crcr, the relay stopped) still shows the webhook" \
  sh -c "runuser -u crcr -- crcr deliveries list --config /etc/crcr/crcr.env |
    grep -q ' ${delivery:-none} .* done\$'"

if command -v lintian >/dev/null 2>&1; then
  echo "test-package: lintian (information only):"
  lintian --no-tag-display-limit "$deb" || true
fi

# -- reinstall over itself (the upgrade path): the operator's edits and the modes stay ------------
echo "# edited by test-package" >>/etc/crcr/crcr.env
dpkg -i "$deb" >/dev/null
check "a reinstall keeps the edited conffile" grep -q '^# edited by test-package$' /etc/crcr/crcr.env
expect_stat /etc/crcr/crcr.env 640 root:crcr
expect_stat /var/lib/crcr 700 crcr:crcr
check "a reinstall keeps the store" test -f /var/lib/crcr/crcr.db

# -- remove: configuration, data and user stay ---------------------------------------------------
dpkg --remove crcr >/dev/null
check "dpkg --remove leaves the configuration files only" \
  test "$(dpkg-query -W -f='${Status}' crcr)" = "deinstall ok config-files"
check "dpkg --remove removes /usr/bin/crcr and the units" \
  test ! -e /usr/bin/crcr -a ! -e /lib/systemd/system/crcr.service
check "dpkg --remove keeps /etc/crcr/crcr.env, /var/lib/crcr/crcr.db and the user" \
  sh -c 'test -f /etc/crcr/crcr.env && test -f /var/lib/crcr/crcr.db && getent passwd crcr >/dev/null'

# -- purge: nothing stays -------------------------------------------------------------------------
dpkg --purge crcr >/dev/null
check "dpkg --purge: the package is gone" \
  sh -c "! dpkg-query -W -f='\${Status}' crcr 2>/dev/null | grep -q ok"
check "dpkg --purge removes /etc/crcr" test ! -e /etc/crcr
check "dpkg --purge removes /var/lib/crcr" test ! -e /var/lib/crcr
check "dpkg --purge removes the user crcr" sh -c '! getent passwd crcr >/dev/null'
check "dpkg --purge removes the group crcr" sh -c '! getent group crcr >/dev/null'
check "dpkg --purge removes the dpkg-statoverride entries" \
  sh -c '! dpkg-statoverride --list | grep -q " /etc/crcr"'
leftover="$(find /etc/systemd /var/lib/systemd -name 'crcr*' 2>/dev/null || true)"
check "dpkg --purge leaves nothing of crcr under /etc/systemd, /var/lib/systemd${leftover:+: $leftover}" \
  test -z "$leftover"

echo "test-package: $(($(date +%s) - start)) s"
echo "test-package: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
