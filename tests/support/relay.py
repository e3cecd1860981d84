"""relay - runs the real `crcr` binary for end-to-end tests (Python 3 stdlib only).

    r = Relay(env={"CRCR_MAX_BODY": "1048576"})   # dry-run unless env sets GITHUB_APP_ID + key
    r.start()                                       # waits for GET /healthz == 200 (10 s)
    try:
        resp = r.webhook("pull_request", load_example("pull_request.opened"))
        status, headers, body = resp                # Resp is a (status, headers, body) tuple
        rc, out, err = r.cli(["deliveries", "show", resp.delivery, "--format", "json"])
    finally:
        r.close()                                   # SIGTERM (then SIGKILL), remove the temp dir

The child gets a clean environment: the variables of the test process that configure crcr
(GITHUB_*, CRCR_*, ALLOWLIST_*, ...) are NOT inherited; only PATH, HOME, locale, TMPDIR and
sanitizer options are. Then:
    CRCR_LISTEN=127.0.0.1:<free port>   CRCR_STORE=sqlite:<tmp>/crcr.db
    ALLOWLIST_FILE=<tmp>/allowlist.yml  GITHUB_APP_SECRET=<secret>   CRCR_LOG=debug
    CRCR_DEFAULT_CONFIG= (the CLI reads no /etc/crcr/crcr.env)
plus the `env` given (a value of None removes a variable). stdout and stderr go to <tmp>/relay.log.

Also here: sign(), load_example(), key paths (APP_KEY, APP_PUB, OIDC_KEY, OIDC_PUB, EC_KEY),
http_request(), raw_request() / parse_response() / stream_chunked() for abuse tests over a raw
socket, and free_port().
"""

import http.client
import json
import hashlib
import hmac
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import namedtuple
from pathlib import Path

from testclock import TestClock
from waiting import scaled, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("CRCR_TEST_DATA") or (REPO_ROOT / "tests" / "data")).resolve()
KEYS_DIR = DATA_DIR / "keys"
WEBHOOKS_DIR = DATA_DIR / "webhooks"

APP_KEY = str(KEYS_DIR / "app.pem")  # GitHub App private key, PKCS#1
APP_PUB = str(KEYS_DIR / "app.pub.pem")
OIDC_KEY = str(KEYS_DIR / "oidc.pem")  # fake OIDC issuer key, PKCS#8
OIDC_PUB = str(KEYS_DIR / "oidc.pub.pem")
EC_KEY = str(KEYS_DIR / "ec.pem")  # not RSA: negative tests
EC_PUB = str(KEYS_DIR / "ec.pub.pem")

UPSTREAM = "pytorch/pytorch"
DEFAULT_SECRET = "test-webhook-secret"
DEFAULT_ALLOWLIST = """\
L1:
  - org1/repo1
L2:
  - org2/repo2
L3:
  dev:
    org3/repo3: [a]
L4:
  - org4/repo4
"""
DEFAULT_TARGETS = ["org1/repo1", "org2/repo2", "org3/repo3", "org4/repo4"]

_KEEP_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH")
_KEEP_PREFIXES = ("LC_", "ASAN_", "UBSAN_", "LSAN_", "TSAN_", "MSAN_")


def key_path(name):
    """Path of a file in tests/data/keys."""
    return str(KEYS_DIR / name)


def crcr_bin():
    path = os.environ.get("CRCR_BIN")
    if not path:
        raise RuntimeError("CRCR_BIN is not set: point it at the crcr binary "
                           "(ctest sets it for tests/e2e)")
    if not os.access(path, os.X_OK):
        raise RuntimeError("CRCR_BIN=%s is not an executable file" % path)
    return os.path.abspath(path)  # the relay runs in its temp dir: a relative path would break


_HOOKS = {}


def has_test_hooks(binary):
    """Whether `binary` was built with the test clock (CRCR_TEST_HOOKS=ON: `crcr version` says
    so). A binary without it refuses CRCR_TEST_CLOCK_FILE, so Relay passes the clock only to one
    that has it (the benchmarks run a Release build without hooks and never move the clock)."""
    if binary not in _HOOKS:
        p = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30,
                           env={"PATH": os.environ.get("PATH", "")})
        _HOOKS[binary] = "test hooks" in p.stdout
    return _HOOKS[binary]


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range:
    the servers of suites running alongside bind port 0, and one of them once got a port this
    picked (from that range, as it did) before the relay bound it - the harness then polled that
    server's /healthz (a fake GitHub: a contract violation) and the relay started elsewhere.
    Below the range only another free_port() can pick the same port, at random among 10,000."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randint(max(1024, low - 10000), low - 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # crowded: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sign(body, secret):
    """GitHub's X-Hub-Signature-256 value: "sha256=" + hex HMAC-SHA256(secret, body)."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


_sign = sign  # Relay.webhook has a parameter named `sign`


def hookshot_headers(event, delivery):
    """The headers GitHub's webhook sender (Hookshot) puts on a delivery, but the signature and
    the length: X-GitHub-Event, the delivery guid (None: none), the hook and its App target."""
    h = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/e2e-test",
        "X-GitHub-Event": event,
        "X-GitHub-Hook-ID": "123456789",
        "X-GitHub-Hook-Installation-Target-Type": "integration",
        "X-GitHub-Hook-Installation-Target-ID": "12345",
    }
    if delivery is not None:
        h["X-GitHub-Delivery"] = delivery
    return h


def compact(obj):
    """Compact JSON bytes (separators , and :), as the examples are stored."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def load_example(name):
    """The bytes of tests/data/webhooks/<name>.json (e.g. "pull_request.opened")."""
    return (WEBHOOKS_DIR / (name + ".json")).read_bytes()


def load_example_obj(name):
    return json.loads(load_example(name))


class Resp(namedtuple("Resp", "status headers body")):
    """(status, headers dict with lower-case names, body bytes). webhook() adds .delivery."""

    delivery = None

    def json(self):
        return json.loads(self.body)


def _headers_dict(items):
    out = {}
    for k, v in items:
        k = k.lower()
        out[k] = out[k] + ", " + v if k in out else v
    return out


def http_request(port, method, path, body=None, headers=None, timeout=10.0, host="127.0.0.1"):
    """One request on a fresh connection; returns Resp."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, _headers_dict(r.getheaders()), data)
    finally:
        conn.close()


# ---------------------------------------------------------------------------- raw sockets


def _response_complete(buf):
    """True when `buf` holds one complete final HTTP response (1xx interim answers skipped)."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = buf[:end].decode("latin-1")
        lines = head.split("\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            return True  # garbage: nothing more to wait for
        body = buf[end + 4 :]
        if 100 <= status < 200:
            buf = body
            continue
        if status in (204, 304):
            return True
        hdrs = _headers_dict(l.split(":", 1) for l in lines[1:] if ":" in l)
        hdrs = {k: v.strip() for k, v in hdrs.items()}
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            return body.endswith(b"0\r\n\r\n")
        if "content-length" in hdrs:
            try:
                return len(body) >= int(hdrs["content-length"])
            except ValueError:
                return True
        return False  # delimited by close


def _read_response(sock, timeout):
    deadline = time.monotonic() + timeout
    buf = b""
    while not _response_complete(buf):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            break
        if not data:
            break
        buf += data
    return buf


def raw_request(port, data, read_timeout=2.0, host="127.0.0.1"):
    """Sends `data` (bytes, sent as is) on a fresh TCP connection and returns the bytes
    received until one complete answer, EOF or `read_timeout` seconds - whichever is first.
    A peer that stops reading or resets while we send is not an error: we read what it said."""
    s = socket.create_connection((host, port), timeout=read_timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        return _read_response(s, read_timeout)
    finally:
        s.close()


def parse_response(raw):
    """Parses raw answer bytes into Resp (the final answer after any 1xx). The body is
    de-chunked. Raises ValueError when there is no complete status line and header block."""
    while True:
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            raise ValueError("no complete HTTP answer in %r" % raw[:200])
        lines = raw[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError("bad status line %r" % lines[0])
        status = int(parts[1])
        body = raw[end + 4 :]
        if 100 <= status < 200:
            raw = body
            continue
        hdrs = {k: v.strip() for k, v in
                _headers_dict(l.split(":", 1) for l in lines[1:] if ":" in l).items()}
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            out, rest = b"", body
            while rest:
                line, _, rest = rest.partition(b"\r\n")
                size = int(line.split(b";")[0] or b"0", 16)
                if size == 0:
                    break
                out, rest = out + rest[:size], rest[size + 2 :]
            body = out
        elif "content-length" in hdrs:
            body = body[: int(hdrs["content-length"])]
        return Resp(status, hdrs, body)


def stream_chunked(port, path, headers, total, chunk_size=65536, read_timeout=5.0,
                   host="127.0.0.1"):
    """POSTs `total` bytes of 'x' with Transfer-Encoding: chunked, stopping early when the
    server answers or stops reading. Returns (answer bytes, body bytes sent)."""
    s = socket.create_connection((host, port), timeout=read_timeout)
    try:
        head = ["POST %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port,
                "Transfer-Encoding: chunked"]
        head += ["%s: %s" % kv for kv in headers.items()]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        sent, piece = 0, b"x" * chunk_size
        try:
            while sent < total:
                readable, _, _ = select.select([s], [], [], 0)
                if readable:
                    break  # the server has answered (or closed): stop sending
                n = min(chunk_size, total - sent)
                s.sendall(b"%x\r\n" % n + piece[:n] + b"\r\n")
                sent += n
            else:
                s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        return _read_response(s, read_timeout), sent
    finally:
        s.close()


# ---------------------------------------------------------------------------- the relay


class RelayError(AssertionError):
    """The relay did not start or stop as expected (the message carries the log tail)."""


_PSQL = []


def psql_exe():
    """Debian's psql binary itself: /usr/bin/psql is pg_wrapper, a Perl script that picks a
    cluster first (about 60 ms of CPU more per call, and the suites call psql hundreds of times)."""
    if not _PSQL:
        import glob
        import shutil as _sh
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"),
                       key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0,
                       reverse=True)
        exe = found[0] if found else _sh.which("psql")
        if not exe:
            raise RelayError("psql not found: CRCR_E2E_PG_URI needs the PostgreSQL client")
        _PSQL.append(exe)
    return _PSQL[0]


def psql_rows(uri, *sql):
    """Runs each statement of `sql` (one transaction each, psql -c ...) on `uri`; returns the rows
    of their output as lists of strings (NULL as "")."""
    cmd = [psql_exe(), "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", uri]
    for stmt in sql:
        cmd += ["-c", stmt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RelayError("psql %r: %s" % (sql, p.stderr.strip()))
    return [line.split("\t") for line in p.stdout.splitlines() if line]


def _psql(uri, sql):
    """Runs one SQL statement with Debian's psql (PostgreSQL store runs of the e2e suites)."""
    psql_rows(uri, sql)


class _PgDatabases:
    """The databases that the relays of this test process get on CRCR_E2E_PG_URI. A database is
    created once and, when its relay closes, emptied (its sessions ended, schema public dropped
    and created again: what a relay finds is then what a new database has) and kept for the next
    relay of the process; the spare ones are dropped when the process exits. CREATE DATABASE and
    DROP DATABASE cost a third of a second of CPU each on a 2-core machine, a relay a pair of them,
    and the PostgreSQL pass starts some three hundred relays."""

    def __init__(self):
        self.spare = {}  # base uri -> [database names]
        self.lock = threading.Lock()
        self.registered = False

    def take(self, base):
        with self.lock:
            names = self.spare.get(base)
            if names:
                return names.pop()
            if not self.registered:
                import atexit
                atexit.register(self.drop_spare)
                self.registered = True
        name = "crcr_e2e_%s" % uuid.uuid4().hex[:12]
        _psql(base, "CREATE DATABASE %s" % name)
        return name

    def give_back(self, base, name):
        """Empties database `name` for the next relay; drops it when that fails."""
        try:
            psql_rows(_with_database(base, name),
                      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()",
                      "DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        except (RelayError, OSError, subprocess.SubprocessError):
            try:
                _psql(base, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
            except (RelayError, OSError, subprocess.SubprocessError):
                pass
            return
        with self.lock:
            self.spare.setdefault(base, []).append(name)

    def drop_spare(self):
        with self.lock:
            spare, self.spare = self.spare, {}
        for base, names in spare.items():
            if names:
                try:
                    psql_rows(base, *["DROP DATABASE IF EXISTS %s WITH (FORCE)" % n
                                      for n in names])
                except (RelayError, OSError, subprocess.SubprocessError):
                    pass


_PG_DATABASES = _PgDatabases()


def _with_database(uri, name):
    import urllib.parse
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


class Relay:
    """A crcr process in a private temp dir. Use start()/close() or a `with` block.

    With CRCR_E2E_PG_URI set (a PostgreSQL URI), every Relay gets a fresh database on that server
    as its store instead of a SQLite file: CI runs the end-to-end suites on both stores."""

    def __init__(self, env=None, args=("serve",), allowlist=DEFAULT_ALLOWLIST,
                 secret=DEFAULT_SECRET, start_timeout=10.0, binary=None, clock=None):
        self.binary = binary or crcr_bin()
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.secret = self.extra_env.get("GITHUB_APP_SECRET") or secret
        self.start_timeout = start_timeout
        self.tmp = tempfile.mkdtemp(prefix="crcr-e2e-")
        self.db_path = os.path.join(self.tmp, "crcr.db")
        self.allowlist_path = os.path.join(self.tmp, "allowlist.yml")
        self.log_path = os.path.join(self.tmp, "relay.log")
        # The relay's clock, which the test moves (testclock.py); pass one TestClock to several
        # relays so that they move together.
        self.own_clock = clock is None
        self.clock = clock if clock is not None else TestClock(self.tmp)
        self.store_uri = "sqlite:" + self.db_path
        self.pg_base = os.environ.get("CRCR_E2E_PG_URI") or None
        self.pg_db = None
        if self.pg_base and "CRCR_STORE" not in self.extra_env:
            self.pg_db = _PG_DATABASES.take(self.pg_base)
            self.store_uri = _with_database(self.pg_base, self.pg_db)
        self.port = None
        self.proc = None
        if allowlist is not None:
            self.write_allowlist(allowlist)

    # -- environment

    def child_env(self, extra=None):
        """The environment crcr runs with (serve and cli alike)."""
        env = {k: v for k, v in os.environ.items()
               if k in _KEEP_ENV or k.startswith(_KEEP_PREFIXES)}
        env.update({
            "CRCR_STORE": self.store_uri,
            "ALLOWLIST_FILE": self.allowlist_path,
            "GITHUB_APP_SECRET": self.secret,
            "CRCR_LOG": "debug",
            # No default configuration file for the CLI: a machine with the Debian package
            # installed has /etc/crcr/crcr.env, which must not leak into the tests.
            "CRCR_DEFAULT_CONFIG": "",
        })
        if has_test_hooks(self.binary):
            env.update(self.clock.env())
        if self.port is not None:
            env["CRCR_LISTEN"] = "127.0.0.1:%d" % self.port
        for src in (self.extra_env, extra or {}):
            for k, v in src.items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = str(v)
        return env

    def write_allowlist(self, text):
        with open(self.allowlist_path, "w", encoding="utf-8") as f:
            f.write(text)

    # -- lifecycle

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, port=None):
        """Starts serving and waits for /healthz == 200. Retries on another port when the
        chosen one turned out to be taken. Raises RelayError with the log tail on failure."""
        if self.running():
            raise RelayError("relay already running")
        last = None
        for attempt in range(3):
            self.port = port if (port and attempt == 0) else free_port()
            try:
                self._spawn_and_wait()
                return self
            except RelayError as e:
                last = e
                if not self._address_in_use():
                    raise
        raise last

    def _address_in_use(self):
        text = self.log_tail(20).lower()
        return "address already in use" in text or "eaddrinuse" in text

    def _spawn_and_wait(self):
        log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary] + self.args, env=self.child_env(),
                                         cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + scaled(self.start_timeout)
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise RelayError("crcr %s exited with %s before /healthz answered; log:\n%s"
                                 % (" ".join(self.args), rc, self.log_tail(40, log_offset)))
            try:
                r = http_request(self.port, "GET", "/healthz", timeout=1.0)
                if r.status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.01)
        self.kill()
        raise RelayError("crcr did not answer GET /healthz 200 within %.0f s; log:\n%s"
                         % (self.start_timeout, self.log_tail(40, log_offset)))

    def send_signal(self, sig):
        """Sends `sig` (e.g. SIGHUP for an allowlist reload) when running."""
        if self.running():
            self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """Sends `sig` and waits up to `timeout` s. Returns the exit code (negative: killed by
        that signal). If the process does not exit in time it is SIGKILLed and RelayError
        raised. Returns the old exit code when it was not running."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RelayError("crcr did not exit within %.1f s of signal %s; log:\n%s"
                             % (timeout, sig, self.log_tail(40)))

    def kill(self):
        """SIGKILL (no chance to clean up); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(10)

    def restart(self, sig=signal.SIGTERM, timeout=5.0):
        """Stops (with `sig`) and starts again on the same port when possible, same store."""
        port = self.port
        self.stop(sig, timeout)
        return self.start(port=port)

    def close(self):
        """Stops the process (SIGTERM, then SIGKILL) and removes the temp dir. Never raises."""
        for conn in self.__dict__.pop("_poll_conns", []):
            conn.close()
        try:
            if self.running():
                try:
                    self.stop(signal.SIGTERM, 5.0)
                except RelayError:
                    pass
        finally:
            if self.running():
                self.kill()
            if self.own_clock:
                self.clock.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.pg_db:
                _PG_DATABASES.give_back(self.pg_base, self.pg_db)
                self.pg_db = None

    def __enter__(self):
        if not self.running():
            self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- logs

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40, offset=0):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-n:])

    # -- HTTP

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        return http_request(self.port, method, path, body, headers, timeout)

    def get(self, path, headers=None, timeout=10.0):
        return self.request("GET", path, None, headers, timeout)

    def post(self, path, body=b"", headers=None, timeout=10.0):
        return self.request("POST", path, body, headers, timeout)

    def webhook(self, event, payload, delivery=None, secret=None, sign=True, signature=None,
                headers=None, path="/github/webhook", timeout=10.0):
        """POSTs a GitHub-style delivery. `payload`: bytes (sent verbatim), str or an object
        (compact JSON). delivery None -> a new uuid4, False -> no X-GitHub-Delivery header.
        The signature uses `secret` (default: the relay's); sign=False omits the header;
        `signature` sets the header value verbatim. Returns Resp with .delivery set."""
        if isinstance(payload, str):
            body = payload.encode("utf-8")
        elif isinstance(payload, (bytes, bytearray)):
            body = bytes(payload)
        else:
            body = compact(payload)
        if delivery is None:
            delivery = str(uuid.uuid4())
        h = hookshot_headers(event, delivery if delivery is not False else None)
        if signature is not None:
            h["X-Hub-Signature-256"] = signature
        elif sign:
            h["X-Hub-Signature-256"] = _sign(body, secret or self.secret)
        h.update(headers or {})
        r = self.post(path, body, h, timeout)
        r.delivery = delivery if delivery is not False else None
        return r

    # -- metrics and the outbox

    def poll(self, path):
        """GET `path` on a kept-alive connection of this thread (a fresh connection costs the
        relay ten times the CPU of the request: polls come every 20 ms), reconnecting once when
        the relay closed it (idle timeout, a restart). Only for GETs, which may be repeated."""
        local = self.__dict__.setdefault("_poll_local", threading.local())
        for attempt in range(2):
            conn = getattr(local, "conn", None)
            if conn is None or getattr(local, "port", None) != self.port:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                local.conn, local.port = conn, self.port
                self.__dict__.setdefault("_poll_conns", []).append(conn)
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                body = r.read()
                return Resp(r.status, _headers_dict(r.getheaders()), body)
            except (OSError, http.client.HTTPException):
                conn.close()
                local.conn = None
                if attempt:
                    raise

    def metrics(self):
        """GET /metrics parsed: {(name, ((label, value), ...) sorted): float}."""
        r = self.poll("/metrics")
        if r.status != 200:
            raise RelayError("GET /metrics: %d %r" % (r.status, r.body[:200]))
        return parse_metrics(r.body.decode("utf-8"))

    def metric(self, name, **labels):
        """One sample of GET /metrics (labels given as keywords), or None when absent."""
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def outbox_busy(self):
        """Outbox rows of the store not finished yet (queued, with their time come or not, and
        running); None when the store did not answer."""
        m = self.metrics()
        if m.get(("crcr_store_up", ())) != 1:
            return None
        return sum(m.get(("crcr_outbox_rows", (("state", s),)), 0) for s in ("queued", "running"))

    def wait_outbox_idle(self, timeout=10.0, step=0.0):
        """Waits until no outbox row of the store is queued or running: every call the relay had
        to make (dispatches, check runs, HUD forwards, comments, re-runs) was made and its
        outcome recorded, and nothing is scheduled again. With `step`, each poll that finds work
        left moves the relay's clock `step` seconds forward (rows waiting out a backoff become
        due). Returns True, or False after `timeout` s."""
        return bool(wait_until(lambda: self.outbox_busy() == 0, timeout, 0.02,
                               self.clock if step else None, step))

    def waiting_for_time(self):
        """True when the relay only waits for its clock: outbox rows are queued for later, none
        is running and none is late (due but not claimed). Moving the clock then cannot catch a
        request in flight."""
        m = self.metrics()
        rows = {s: m.get(("crcr_outbox_rows", (("state", s),)), 0) for s in ("queued", "running")}
        late = m.get(("crcr_outbox_oldest_due_age_seconds", ()), 0)
        return rows["queued"] > 0 and rows["running"] == 0 and late == 0

    def wait_with_timers(self, pred, timeout=30.0, step=1.0):
        """Awaits pred() (returns its value, falsy after `timeout` s of real time), moving the
        relay's clock `step` s whenever the relay only waits for it (waiting_for_time): retries
        and rate-limit pauses run out in moved time, one step at a time, while no request is in
        flight: a request reaches a fake (on the same clock) at the moved time it was sent, plus
        its real-time latency."""
        def poll():
            v = pred()
            if not v and self.waiting_for_time():
                self.clock.advance(step)
            return v
        return wait_until(poll, timeout, 0.02)

    def store_rows(self, sql):
        """Rows (lists of strings, NULL as None) of one read-only query on the relay's store: the
        SQLite file (opened read-only, beside the running relay) or the PostgreSQL database (psql).
        For what no front door shows, e.g. which lease an outbox row is under."""
        if self.store_uri.startswith("sqlite:"):
            import sqlite3
            db = sqlite3.connect("file:%s?mode=ro" % self.store_uri[len("sqlite:"):], uri=True,
                                 timeout=10)
            try:
                return [[None if v is None else str(v) for v in row]
                        for row in db.execute(sql).fetchall()]
            finally:
                db.close()
        return [[None if v == "" else v for v in row] for row in psql_rows(self.store_uri, sql)]

    # -- CLI

    def cli(self, args, timeout=30.0, env=None, input=None):
        """Runs `crcr <args>` with the relay's environment (same store, allowlist, secret).
        Returns (rc, stdout, stderr) as text."""
        p = subprocess.run([self.binary] + list(args), env=self.child_env(env), cwd=self.tmp,
                           input=input, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr


def parse_metrics(text):
    """Prometheus text exposition -> {(name, ((label, value), ...) sorted): float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, labels = head, ()
        if "{" in head:
            name, rest = head.split("{", 1)
            pairs = []
            for part in rest.rstrip("}").split(","):
                if "=" in part:
                    k, v = part.split("=", 1)
                    pairs.append((k.strip(), v.strip().strip('"')))
            labels = tuple(sorted(pairs))
        try:
            out[(name, labels)] = float(value)
        except ValueError:
            pass
    return out


def check_clean_exit(test, relay, timeout=15.0):
    """SIGTERM ends a live relay with exit 0 and, in a sanitizer build, without any report.
    Register it with test.addCleanup after the relay's close, so that it runs first."""
    if not relay.running():
        return
    rc = relay.stop(signal.SIGTERM, timeout=timeout)
    reports = [line for line in relay.log_text().splitlines()
               if "Sanitizer" in line or "runtime error:" in line]
    test.assertEqual(reports, [], "sanitizer report from the relay:\n" + relay.log_tail(60))
    test.assertEqual(rc, 0, "relay exit status after SIGTERM; log:\n" + relay.log_tail(30))
