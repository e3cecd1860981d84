#!/usr/bin/env bash
# Checks deploy/nginx/crcr.conf with Debian's nginx: `nginx -t` on a throwaway nginx.conf that
# includes the sample (certificate paths pointed at a self-signed certificate made here), so
# nothing under /etc/nginx is read or changed and no server is started.
#   scripts/test-nginx.sh             exit 77 (skipped) when nginx is not installed
#   scripts/test-nginx.sh --install   install Debian's nginx first when it is missing (root)
set -euo pipefail
cd "$(dirname "$0")/.."
sample="$PWD/deploy/nginx/crcr.conf"

if ! command -v nginx >/dev/null 2>&1 && [ -x /usr/sbin/nginx ]; then
  PATH="$PATH:/usr/sbin"
fi
if ! command -v nginx >/dev/null 2>&1; then
  if [ "${1:-}" != "--install" ]; then
    echo "SKIP: nginx is not installed (scripts/test-nginx.sh --install installs Debian's nginx)"
    exit 77
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "test-nginx: nginx is missing; run as root to install it" >&2
    exit 1
  fi
  echo "test-nginx: installing Debian's nginx"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nginx >/dev/null
  PATH="$PATH:/usr/sbin"
fi
command -v openssl >/dev/null 2>&1 || { echo "test-nginx: openssl is missing" >&2; exit 1; }

tmp="$(mktemp -d /tmp/crcr-nginx.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=crcr.example.org \
  -keyout "$tmp/privkey.pem" -out "$tmp/fullchain.pem" 2>/dev/null

# The sample, with its certificate paths pointed at the throwaway certificate. Every other line
# is checked as it is shipped, except that `nginx -t` binds the listen ports: when 80 and 443
# cannot be bound here (not root, or a server already has them) free ports stand in for them.
grep -q '/etc/letsencrypt/live/crcr.example.org/fullchain.pem' "$sample"
grep -q '/etc/letsencrypt/live/crcr.example.org/privkey.pem' "$sample"
can_bind_80_443='
import socket
for fam, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    for port in (80, 443):
        s = socket.socket(fam, socket.SOCK_STREAM)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.close()'
free_ports='
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])'
http=80
https=443
if ! python3 -c "$can_bind_80_443" 2>/dev/null; then
  read -r http https < <(python3 -c "$free_ports")
  echo "test-nginx: ports 80/443 cannot be bound here; checking with $http/$https in their place"
fi
no_ipv6=()
if ! python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
  no_ipv6=(-e '/^ *listen \[::\]/d')
  echo "test-nginx: no IPv6 on this machine; checking without the [::] listen lines"
fi
sed -e "s#/etc/letsencrypt/live/crcr.example.org/fullchain.pem#$tmp/fullchain.pem#" \
    -e "s#/etc/letsencrypt/live/crcr.example.org/privkey.pem#$tmp/privkey.pem#" "${no_ipv6[@]}" \
    -e "s#^\( *listen \(\[::\]:\)\{0,1\}\)80\([ ;]\)#\1$http\3#" \
    -e "s#^\( *listen \(\[::\]:\)\{0,1\}\)443\([ ;]\)#\1$https\3#" \
    "$sample" >"$tmp/crcr.conf"
if [ "$http" != 80 ]; then
  grep -n '^ *listen' "$tmp/crcr.conf"
fi

# The same context as Debian's /etc/nginx/nginx.conf gives a conf.d file (inside http {}), with
# every path nginx writes kept in the temporary directory.
mkdir -p "$tmp/temp"
cat >"$tmp/nginx.conf" <<EOF
pid $tmp/nginx.pid;
error_log $tmp/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $tmp/temp/body;
    proxy_temp_path $tmp/temp/proxy;
    fastcgi_temp_path $tmp/temp/fastcgi;
    uwsgi_temp_path $tmp/temp/uwsgi;
    scgi_temp_path $tmp/temp/scgi;
    include $tmp/crcr.conf;
}
EOF

version="$(nginx -v 2>&1)"
echo "test-nginx: $version"
if ! out="$(nginx -t -p "$tmp" -e "$tmp/error.log" -c "$tmp/nginx.conf" 2>&1)"; then
  echo "$out"
  echo "test-nginx: FAIL: deploy/nginx/crcr.conf does not pass nginx -t ($version)" >&2
  exit 1
fi
echo "$out"
# A warning (a deprecated directive, a conflicting server name, ...) is a failure too: an operator
# copying the sample should see a clean `nginx -t`. Two are expected: "the user directive makes
# sense only if the master process runs with super-user privileges" (nginx run unprivileged, not
# the sample) and, from nginx 1.25.1 on, "the "listen ... http2" directive is deprecated" (the
# form Debian 12's nginx needs; see the sample).
if echo "$out" | grep '\[warn\]' | grep -v -e 'super-user privileges' \
  -e '"listen \.\.\. http2" directive is deprecated' | grep -q .; then
  echo "test-nginx: FAIL: nginx -t warns about deploy/nginx/crcr.conf" >&2
  exit 1
fi
echo "test-nginx: 1 passed, 0 failed"
