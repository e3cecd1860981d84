#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests: loopback TCP only, trust auth, no fsync.
#
#   scripts/pg-test-cluster.sh start DIR    initdb DIR (first time), start it on a free
#                                           127.0.0.1 port, print the URI on stdout
#   scripts/pg-test-cluster.sh stop DIR     stop it (fast shutdown); fine when not running
#   scripts/pg-test-cluster.sh uri DIR      print the URI of DIR's cluster
#   scripts/pg-test-cluster.sh status DIR   exit 0 when running
#   scripts/pg-test-cluster.sh destroy DIR  stop and remove DIR
#
# `start` is idempotent: a running cluster is left alone and its URI printed again; a stopped
# one is started again on the same port (or on a new one when that port was taken meanwhile).
# Only stdout carries the URI, so `export CRCR_TEST_PG_URI=$(scripts/pg-test-cluster.sh start
# /tmp/pg)` works. Run as root, initdb and the server run as the `postgres` user (initdb refuses
# root) and DIR is handed to that user; otherwise they run as the calling user. Never touches a
# system cluster: everything lives in DIR (data in DIR/data, log in DIR/server.log).
#
# PG_BINDIR selects the server binaries (default: the newest /usr/lib/postgresql/*/bin, else
# the PATH). The database `crcr` is created on first start; the URI names it. PG_WALDIR, at the
# first start, puts the write-ahead log in that directory (initdb --waldir) instead of DIR/data:
# a test that fills the filesystem of DIR (a small tmpfs) then fills the data files' disk only.
set -euo pipefail

die() {
  echo "pg-test-cluster: $*" >&2
  exit 1
}

usage() {
  echo "usage: $0 start|stop|uri|status|destroy DIR" >&2
  exit 2
}

[ $# -eq 2 ] || usage
cmd="$1"
dir="$2"
[ -n "$dir" ] || usage
case "$dir" in
/*) ;;
*) dir="$(pwd)/$dir" ;;
esac

bindir="${PG_BINDIR:-}"
if [ -z "$bindir" ]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ]; then
      bindir="$d"
      break
    fi
  done
fi
if [ -z "$bindir" ]; then
  initdb_path="$(command -v initdb || true)"
  [ -n "$initdb_path" ] || die "no PostgreSQL server binaries (apt-get install postgresql-15, or set PG_BINDIR)"
  bindir="$(dirname "$initdb_path")"
fi

# Runs a server binary as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

data="$dir/data"
portfile="$dir/port"

running() {
  [ -f "$data/PG_VERSION" ] && as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1
}

uri() {
  [ -f "$portfile" ] || die "$dir: no cluster was started here"
  echo "postgresql://postgres@127.0.0.1:$(cat "$portfile")/crcr"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# SO_REUSEADDR as the server uses it: connections in TIME_WAIT on the port do not count.
port_free() {
  python3 -c 'import socket,sys
s=socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1",int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
}

start() {
  if running; then
    uri
    return 0
  fi
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the postgres user (apt-get install postgresql-15)"
    chown postgres: "$dir"
    chmod 700 "$dir"
    runuser -u postgres -- test -w "$dir" ||
      die "$dir: the postgres user cannot write here (a parent directory is not searchable)"
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data"
    local waldir=()
    if [ -n "${PG_WALDIR:-}" ]; then
      mkdir -p "$PG_WALDIR"
      [ "$(id -u)" -ne 0 ] || chown postgres: "$PG_WALDIR"
      waldir=(--waldir="$PG_WALDIR")
    fi
    as_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
      --no-sync "${waldir[@]}" >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      die "initdb failed"
    }
  fi
  local port=""
  if [ -f "$portfile" ] && port_free "$(cat "$portfile")"; then
    port="$(cat "$portfile")"
  fi
  [ -n "$port" ] || port="$(free_port)"
  echo "$port" >"$portfile"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$portfile"
  # Loopback TCP only (no Unix socket), and durability off: this cluster is thrown away. Room
  # for the connection pools of the relays that scripts/test.sh runs side by side.
  as_owner "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 -o \
    "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=1000" \
    start >/dev/null || {
    tail -n 30 "$dir/server.log" >&2 || true
    die "the server did not start"
  }
  local psql="$bindir/psql"
  [ -x "$psql" ] || psql="$(command -v psql)"
  local have
  have="$("$psql" -X -q -t -A -h 127.0.0.1 -p "$port" -U postgres -d postgres \
    -c "SELECT 1 FROM pg_database WHERE datname='crcr'")"
  if [ "$have" != "1" ]; then
    "$psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE crcr" >/dev/null
  fi
  uri
}

stop() {
  if running; then
    as_owner "$bindir/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
  fi
}

case "$cmd" in
start) start ;;
stop) stop ;;
uri) uri ;;
status) running ;;
destroy)
  stop
  rm -rf "$dir"
  ;;
*) usage ;;
esac
