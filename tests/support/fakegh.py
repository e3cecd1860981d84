"""fakegh - a fake GitHub REST API for end-to-end tests (Python 3 stdlib only).

A test double at the network boundary: the relay under test talks to it over real HTTP/1.1 on
127.0.0.1 (keep-alive, Content-Length on every answer that has a body, 100-continue), exactly as it
would talk to api.github.com. It implements the few endpoints the relay uses, with GitHub's
validation rules where they matter to the relay:

  GET  /repos/{o}/{r}/installation                      App JWT (RS256, verified)   -> 200 / 404
  POST /app/installations/{id}/access_tokens            App JWT                     -> 201 token
  POST /repos/{o}/{r}/dispatches                        installation token          -> 204 / 422
  POST /repos/{o}/{r}/check-runs                        installation token          -> 201
  GET  /repos/{o}/{r}/check-suites/{id}/check-runs      installation token, paginated
  POST /repos/{o}/{r}/actions/runs/{id}/rerun           installation token          -> 201 / 403
  POST /repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs
  GET  /repos/{o}/{r}/contents/{path}?ref=R             no auth needed; ETag / If-None-Match
  GET  /repos/{o}/{r}/issues/{n}/comments               installation token, paginated (Link)
  POST /repos/{o}/{r}/issues/{n}/comments               installation token          -> 201
  GET  /repos/{o}/{r}/pulls/{n}                         installation token          -> 200 / 404
  GET  /app/hook/deliveries[/{id}], POST .../{id}/attempts  App JWT: the App's webhook delivery
                                                        log and redelivery (fakegh_hooks.py; the
                                                        fake also "sends" webhooks: send_webhook)

Every request is recorded (see Recorded). Fault rules (add_fault and the fault_* helpers) replace
or delay answers, in order, optionally with a probability drawn from a seeded random.Random (or,
with `key`, from the seed, the request's key and how many requests of that key came before: the
same draws whatever order requests arrive in), for a bounded count. `latency_ms` delays every
answer (benchmarks). The fake's clock (App JWT iat/exp checks, the expiry of the tokens it issues,
x-ratelimit-reset and dates it sends) is `clock.now()` when a testclock.TestClock is given (the
relay's: `FakeGitHub(..., clock=relay.clock)`, so that a test moving the relay's clock moves the
fake's too), else time.time(); `time_offset` shifts it further (expire tokens without sleeping).
Holds (hold()) keep matching answers back until the test
releases them, before or after the route took effect: a test can stop a client deterministically
between GitHub doing something and the client learning of it.

Contract check (tests/support/contract.py): every request and the fake's own answer are kept as
a contract.Exchange and checked against GitHub's REST API description (@octokit/openapi) when
the fake stops: stop() raises contract.ContractViolation naming the operation and the schema
path of each problem. `contract=False` turns it off for a fake that is sent deliberately wrong
requests (test_fakegh.py). With CRCR_GITHUB_FLAVOR=ghes-3.19 (or flavor="ghes-3.19") the fake is
a GitHub Enterprise Server: it serves the API under /api/v3 (`url` ends with it; a request
outside it is answered 404 and is a violation), its web host (`web_url`, `blob_url()`) is its own
http://127.0.0.1:PORT, and the check uses ghes-3.19.deref.json.

Example:
    gh = FakeGitHub(app_id=12345, public_key=open(".../app.pub.pem").read()).start()
    try:
        ... relay env GITHUB_API_URL=gh.url ...
        gh.wait_dispatches(4, timeout=10)
    finally:
        gh.stop()
"""

import base64
import copy
import hashlib
import json
import os
import random
import re
import secrets
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

import contract
import rsa_pure
from fakegh_hooks import HookDeliveries

JWT_ERROR = "A JSON web token could not be decoded"
BAD_CREDENTIALS = "Bad credentials"
DOCS = "https://docs.github.com/rest"
SECONDARY_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID "
    "0000:1111:2222:3333:44444444."
)
ALREADY_RUNNING_MESSAGE = "This workflow is already running"

INSTALLATION_ID_BASE = 3_000_000_000  # > 2^31: catches 32-bit truncation
CHECK_RUN_ID_BASE = 2**32 + 1_000  # > 2^32
COMMENT_ID_BASE = 2**33 + 7  # issue comment ids, > 2^32 too
COMMENT_MAX_BODY = 65536  # characters of one issue comment
APP_BOT_LOGIN = "crcr-test[bot]"  # the App's comments are authored by its bot user
APP_SLUG = "crcr-test"
APP_PERMISSIONS = {"actions": "write", "checks": "write", "contents": "write", "issues": "write",
                   "metadata": "read", "pull_requests": "read"}
DISPATCH_MAX_BODY = 65536  # "the total size of the JSON payload must be less than 64KB"
DISPATCH_MAX_EVENT_TYPE = 100
DISPATCH_MAX_PROPERTIES = 10
MAX_REQUEST_BODY = 64 * 1024 * 1024  # the fake refuses to buffer more than this

_TOKEN_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _json_bytes(obj):
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class Recorded:
    """One request as the fake saw it.

    method, path (without query, not percent-decoded), query (dict name -> first value),
    raw_query, headers (dict, lower-case names), body (bytes), time (time.monotonic() at arrival),
    wall (the fake's clock at arrival: now()), status (int answered; 0 = connection dropped by a
    fault), fault (the Fault that answered or delayed it, or None), note (why the fake refused
    it, e.g. the JWT problem), client_port (the peer's TCP port: equal ports mean one kept-alive
    connection), answered (time.monotonic() when the answer was written or the connection
    dropped; None before), outside (True when a GHES fake got a path outside its /api/v3
    prefix). `path` is without the API prefix.
    """

    __slots__ = ("method", "path", "query", "raw_query", "headers", "body", "time", "wall",
                 "status", "fault", "note", "client_port", "answered", "outside")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<%s %s -> %s%s>" % (self.method, self.path, self.status,
                                    " (%s)" % self.note if self.note else "")


class Fault:
    """A fault rule. status None means "delay only, then answer normally"; status 0 means
    "close the connection without answering". Header values may be callables (evaluated per
    answer, e.g. a reset time)."""

    def __init__(self, method, path_re, status, headers, body, probability, count, delay_ms, rng,
                 name, key=None, seed=None):
        self.method = method.upper() if method else None
        self.path_re = re.compile(path_re) if isinstance(path_re, str) else path_re
        self.status = status
        self.headers = dict(headers or {})
        self.body = body
        self.probability = probability
        self.remaining = count
        self.delay_ms = delay_ms
        self.rng = rng
        self.name = name or ("fault %s" % status)
        self.hits = 0
        self.key = key  # f(Recorded) -> a hashable key of the request's own draws, or None
        self.seed = seed
        self._seen = {}  # key -> requests of that key seen so far

    def _draw(self, rec, default_rng):
        if self.key is None:
            return (self.rng or default_rng).random()
        k = self.key(rec)
        n = self._seen.get(k, 0)
        self._seen[k] = n + 1
        return random.Random("%r|%r|%d" % (self.seed, k, n)).random()

    def _applies(self, rec, default_rng):
        if self.method and self.method != rec.method:
            return False
        if self.path_re is not None and not self.path_re.search(rec.path):
            return False
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.probability < 1.0:
            if self._draw(rec, default_rng) >= self.probability:
                return False
        self.hits += 1
        if self.remaining is not None:
            self.remaining -= 1
        return True

    def __repr__(self):
        return "<Fault %s hits=%d remaining=%s>" % (self.name, self.hits, self.remaining)


class Hold:
    """Answers held back by FakeGitHub.hold(). `reached` is set once a matching request is being
    held (after its route ran when `after`), `held` lists those requests; release() lets every
    held and future matching answer go. The first `skip` matching requests pass."""

    def __init__(self, method, path_re, count, after, timeout, skip=0):
        self.method = method.upper() if method else None
        self.path_re = re.compile(path_re) if isinstance(path_re, str) else path_re
        self.skip = skip
        self.remaining = count
        self.after = after
        self.timeout = timeout
        self.reached = threading.Event()
        self.held = []
        self._go = threading.Event()

    def _applies(self, method, path):  # called with the fake's lock held
        if self.method and self.method != method:
            return False
        if self.path_re is not None and not self.path_re.search(path):
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.remaining is not None:
            self.remaining -= 1
        return True

    def _wait(self, rec):
        if self._go.is_set():  # released: passes, not held
            return
        self.held.append(rec)
        self.reached.set()
        self._go.wait(self.timeout)

    def wait_reached(self, timeout=10.0):
        return self.reached.wait(timeout)

    def release(self):
        self._go.set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, handler, fake):
        self.fake = fake
        self.open_sockets = set()
        self.sockets_lock = threading.Lock()
        super().__init__(addr, handler)

    def process_request(self, request, client_address):
        with self.sockets_lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.sockets_lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        # A client that went away (e.g. a relay SIGKILLed by a test) is not an error of the fake.
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "GitHub.com"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 60  # idle keep-alive connections are closed after this

    def log_message(self, fmt, *args):  # keep test output clean
        pass

    def do_GET(self):
        self.server.fake._handle(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("eof in chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                total += size
                if total > MAX_REQUEST_BODY:
                    raise ConnectionError("chunked body too large for the fake")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(8)
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_REQUEST_BODY:
            raise ConnectionError("bad Content-Length")
        return self.rfile.read(length) if length else b""

    def send_raw(self, status, headers, body):
        """Writes the whole answer in one write. No Content-Length for 204/304 (no body)."""
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        lines = ["HTTP/1.1 %d %s" % (status, reason), "Server: GitHub.com",
                 "Date: " + self.date_time_string()]
        no_body = status in (204, 304) or 100 <= status < 200
        for k, v in headers.items():
            lines.append("%s: %s" % (k, v))
        if not no_body:
            lines.append("Content-Length: %d" % len(body))
        if self.close_connection:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if not no_body and self.command != "HEAD":
            data += body
        self.wfile.write(data)


class FakeGitHub(HookDeliveries):
    """See the module docstring. All public methods are thread-safe."""

    def __init__(self, app_id, public_key, installed_repos=None, token_ttl=3600, latency_ms=0,
                 seed=0, port=0, rate_limit=5000, token_format="classic", default_ref="main",
                 flavor=None, api_prefix=None, contract=None, hook_per_page_cap=100,
                 clock=None):
        self.app_id = str(app_id)
        self.clock = clock
        self._init_contract(flavor, api_prefix, contract)
        self.public_key = rsa_pure.as_public_key(public_key)
        self.token_ttl = token_ttl
        self.latency_ms = latency_ms
        self.time_offset = 0.0
        self.rate_limit = rate_limit
        self.token_format = token_format
        self.default_ref = default_ref
        self._port = port
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._installed = None if installed_repos is None else {r.lower() for r in installed_repos}
        self._install_ids = {}  # owner (lower) -> id
        self._tokens = {}  # token -> dict(installation_id, owner, expires_at, repos)
        self._records = []
        self._faults = []
        self._dispatches = []
        self._check_runs = []
        self._next_check_run_id = CHECK_RUN_ID_BASE
        self._suites = {}  # suite id -> list of check run dicts
        self._already_running = set()
        self._reruns = []
        self._files = {}  # (repo lower, path, ref) -> bytes
        self._comments = {}  # (repo lower, issue number) -> list of comment dicts
        self._pulls = {}  # (repo lower, number) -> pull request dict (set_pull)
        self._next_comment_id = COMMENT_ID_BASE
        self._holds = []
        self._rl_used = 0
        self._rl_window = 0
        self._cond = threading.Condition(self._lock)
        self._hooks_init(hook_per_page_cap)
        self._server = None
        self._thread = None

    # ------------------------------------------------------------------ lifecycle

    def start(self):
        self._server = _Server(("127.0.0.1", self._port), _Handler, self)
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="fakegh")
        self._thread.start()
        return self

    def stop(self):
        """Stops accepting, closes open (kept-alive) connections, joins the server thread; then
        checks the traffic against GitHub's description (raises ContractViolation)."""
        srv, self._server = self._server, None
        if srv is None:
            return
        for h in list(self._holds):
            h.release()
        self.hook_join()
        srv.shutdown()
        with srv.sockets_lock:
            socks = list(srv.open_sockets)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        srv.server_close()
        if self._thread:
            self._thread.join(5)
        self.check_contract()

    def __enter__(self):
        return self.start() if self._server is None else self

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._port

    @property
    def url(self):
        """The API's base URL (GITHUB_API_URL): http://127.0.0.1:PORT, with /api/v3 on GHES."""
        return "http://127.0.0.1:%d%s" % (self._port, self.api_prefix)

    @property
    def web_url(self):
        """Where GitHub's pages are: https://github.com, or the fake's own host on GHES."""
        return "http://127.0.0.1:%d" % self._port if self.api_prefix else "https://github.com"

    def blob_url(self, owner_repo, ref, path):
        """The blob URL of a file (ALLOWLIST_URL, CI_PROVIDERS_URL) on the web host."""
        return "%s/%s/blob/%s/%s" % (self.web_url, owner_repo, ref, path)

    def now(self):
        """Seconds since the epoch on the fake's clock: the test clock (or time.time()) plus
        time_offset."""
        base = self.clock.now() if self.clock is not None else time.time()
        return base + self.time_offset

    # ------------------------------------------------------------------ state accessors

    def requests(self, method=None, path_re=None):
        """Recorded requests, oldest first, filtered by method and re.search(path_re, path)."""
        rx = re.compile(path_re) if isinstance(path_re, str) else path_re
        with self._lock:
            return [r for r in self._records
                    if (method is None or r.method == method.upper())
                    and (rx is None or rx.search(r.path))]

    def clear(self):
        """Forgets recorded requests, dispatches, check runs and re-runs (not tokens or files)."""
        with self._lock:
            self._records.clear()
            self._dispatches.clear()
            self._check_runs.clear()
            self._reruns.clear()
            self._comments.clear()

    def wait_requests(self, n, method=None, path_re=None, timeout=10.0):
        """Waits until at least n matching requests were answered; returns them (maybe fewer)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = [r for r in self.requests(method, path_re) if r.status is not None]
                left = deadline - time.monotonic()
                if len(got) >= n or left <= 0:
                    return got
                self._cond.wait(min(left, 0.1))

    def wait_idle(self, idle=1.0, timeout=30.0):
        """Waits until every request was answered and none arrived for `idle` seconds (the client
        has gone quiet). Returns True when it did within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                pending = any(r.status is None for r in self._records)
                last = self._records[-1].time if self._records else None
                if not pending and (last is None or now - last >= idle):
                    return True
                if now >= deadline:
                    return False
                self._cond.wait(min(0.05, max(0.0, deadline - now)))

    def token_info(self, token):
        """What the fake knows of an installation token it issued: a dict installation_id, owner,
        expires_at (epoch seconds on the fake's clock), repos; None when unknown or revoked."""
        with self._lock:
            t = self._tokens.get(token)
            return dict(t) if t is not None else None

    def dispatches(self):
        """Accepted dispatches: dicts repo, event_type, client_payload, body (raw bytes),
        installation_id, time (monotonic)."""
        with self._lock:
            return list(self._dispatches)

    def wait_dispatches(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._dispatches) < n and time.monotonic() < deadline:
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            return list(self._dispatches)

    def check_runs(self):
        """Created check runs (the answered objects, with "repo" added)."""
        with self._lock:
            return [dict(c) for c in self._check_runs]

    def reruns(self):
        """Accepted re-runs: dicts repo, run_id, kind ("rerun" | "rerun-failed-jobs")."""
        with self._lock:
            return list(self._reruns)

    def tokens_issued(self):
        with self._lock:
            return len(self._tokens)

    def revoke_tokens(self):
        """Invalidates every installation token (the next use answers 401)."""
        with self._lock:
            self._tokens.clear()

    def installation_id(self, owner):
        """The installation id of `owner` (assigned on first use: 3_000_000_000 + k)."""
        with self._lock:
            key = owner.lower()
            if key not in self._install_ids:
                self._install_ids[key] = INSTALLATION_ID_BASE + len(self._install_ids) + 1
            return self._install_ids[key]

    def install(self, repo):
        with self._lock:
            if self._installed is not None:
                self._installed.add(repo.lower())

    def uninstall(self, repo):
        with self._lock:
            if self._installed is None:
                raise ValueError("uninstall() needs an explicit installed_repos set")
            self._installed.discard(repo.lower())

    def is_installed(self, repo):
        with self._lock:
            return self._installed is None or repo.lower() in self._installed

    def set_file(self, owner_repo, path, ref, text):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with self._lock:
            self._files[(owner_repo.lower(), path.strip("/"), ref)] = data

    def set_suite_check_runs(self, suite_id, runs):
        """Check runs listed by GET .../check-suites/{suite_id}/check-runs (list of dicts: what
        the test cares about, e.g. name and external_id; the fake adds GitHub's other fields)."""
        with self._lock:
            self._suites[int(suite_id)] = [dict(r) for r in runs]

    def set_already_running(self, run_id, running=True):
        with self._lock:
            if running:
                self._already_running.add(int(run_id))
            else:
                self._already_running.discard(int(run_id))

    # ------------------------------------------------------------------ faults

    def add_fault(self, method=None, path_re=None, status=None, headers=None, body=None,
                  probability=1.0, count=None, delay_ms=0, seed=None, name=None, key=None):
        """Adds a rule (checked in order; the first that applies answers). Returns the Fault,
        whose .hits counts the requests it took. `seed` gives the rule its own Random; with
        `key` (a function of the Recorded request) each draw is made from the seed, the key and
        how many requests of that key came before instead."""
        rng = random.Random(seed) if seed is not None else None
        if isinstance(body, (dict, list)):
            body = _json_bytes(body)
        elif isinstance(body, str):
            body = body.encode("utf-8")
        elif body is None and status:
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Error"
            body = _json_bytes({"message": phrase, "documentation_url": DOCS})
        f = Fault(method, path_re, status, headers, body, probability, count, delay_ms, rng, name,
                  key=key, seed=seed)
        with self._lock:
            self._faults.append(f)
        return f

    def clear_faults(self):
        with self._lock:
            self._faults.clear()

    def fault_5xx(self, path_re=None, status=502, method=None, count=1, probability=1.0,
                  seed=None, key=None):
        body = {"message": "Server Error"} if status != 503 else {"message": "Service Unavailable"}
        return self.add_fault(method, path_re, status, {"content-type": "application/json"}, body,
                              probability, count, 0, seed, "%d" % status, key=key)

    def fault_429(self, path_re=None, retry_after=1, method=None, count=1):
        return self.add_fault(method, path_re, 429,
                              {"content-type": "application/json",
                               "retry-after": str(retry_after)},
                              {"message": "Too Many Requests", "documentation_url": DOCS},
                              1.0, count, 0, None, "429 retry-after %s" % retry_after)

    def fault_secondary_limit(self, path_re=None, retry_after=60, method=None, count=1,
                              status=403):
        headers = {"content-type": "application/json"}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return self.add_fault(method, path_re, status, headers,
                              {"message": SECONDARY_LIMIT_MESSAGE,
                               "documentation_url": "https://docs.github.com/rest/overview/"
                               "rate-limits-for-the-rest-api#about-secondary-rate-limits"},
                              1.0, count, 0, None, "secondary limit")

    def fault_primary_limit(self, path_re=None, reset_in=60, status=403, method=None, count=1):
        """403 (or 429) with x-ratelimit-remaining: 0 and x-ratelimit-reset = now + reset_in,
        evaluated when answering."""
        headers = {
            "content-type": "application/json",
            "x-ratelimit-limit": str(self.rate_limit),
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": str(self.rate_limit),
            "x-ratelimit-reset": lambda: str(int(self.now() + reset_in)),
            "x-ratelimit-resource": "core",
        }
        return self.add_fault(method, path_re, status, headers,
                              {"message": "API rate limit exceeded for installation ID 1.",
                               "documentation_url": DOCS},
                              1.0, count, 0, None, "primary limit")

    def fault_not_installed(self, repo, count=None):
        """GET /repos/{repo}/installation answers 404 (the App is not installed there)."""
        return self.add_fault("GET", "^/repos/%s/installation$" % re.escape(repo), 404,
                              {"content-type": "application/json"},
                              {"message": "Not Found", "documentation_url": DOCS}, 1.0, count, 0,
                              None, "not installed")

    def fault_delay(self, path_re=None, delay_ms=1000, method=None, count=None):
        return self.add_fault(method, path_re, None, None, None, 1.0, count, delay_ms, None,
                              "delay %d ms" % delay_ms)

    def fault_drop(self, path_re=None, method=None, count=1):
        """Closes the connection without an answer (the client sees a network error)."""
        return self.add_fault(method, path_re, 0, None, b"", 1.0, count, 0, None, "drop")

    # ------------------------------------------------------------------ request handling

    def _match_fault(self, rec):
        with self._lock:
            for f in self._faults:
                if f._applies(rec, self._rng):
                    return f
        return None

    def _rate_headers(self):
        with self._lock:
            now = int(self.now())
            if now >= self._rl_window + 3600:
                self._rl_window, self._rl_used = now, 0
            self._rl_used += 1
            return {
                "x-ratelimit-limit": str(self.rate_limit),
                "x-ratelimit-remaining": str(max(0, self.rate_limit - self._rl_used)),
                "x-ratelimit-reset": str(self._rl_window + 3600),
                "x-ratelimit-used": str(self._rl_used),
                "x-ratelimit-resource": "core",
            }

    def _handle(self, h):
        arrival = time.monotonic()
        raw_path, _, raw_query = h.path.partition("?")
        api_path = self._strip_prefix(raw_path)
        outside = api_path is None  # GHES: not under /api/v3
        raw_path = raw_path if outside else api_path
        headers = {}
        for k, v in h.headers.items():
            k = k.lower()
            headers[k] = headers[k] + ", " + v if k in headers else v
        rec = Recorded(method=h.command, path=raw_path, raw_query=raw_query,
                       query={k: v[0] for k, v in parse_qs(raw_query).items()},
                       headers=headers, body=b"", time=arrival, wall=self.now(), status=None,
                       fault=None, note=None, client_port=h.client_address[1],
                       outside=outside)
        try:
            rec.body = h.read_body()
        except (ConnectionError, ValueError, OSError) as e:
            rec.status, rec.note = 0, "unreadable body: %s" % e
            self._record(rec)
            h.close_connection = True
            return
        with self._lock:
            self._records.append(rec)

        if self.latency_ms:
            time.sleep(self.latency_ms / 1000.0)
        fault = self._match_fault(rec)
        if fault is not None:
            rec.fault = fault
            if fault.delay_ms:
                time.sleep(fault.delay_ms / 1000.0)
            if fault.status == 0:
                rec.status = 0
                rec.answered = time.monotonic()
                self._keep_exchange(h, rec, 0, {}, b"")
                h.close_connection = True
                try:
                    h.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._finish(rec)
                return
            if fault.status is not None:
                fh = {k: (v() if callable(v) else v) for k, v in fault.headers.items()}
                self._answer(h, rec, fault.status, fh, fault.body)
                return
        hold = self._take_hold(h.command, raw_path)
        if hold is not None and not hold.after:
            hold._wait(rec)
        try:
            if outside:
                rec.note = "outside the API prefix %s" % self.api_prefix
                status, extra, body = 404, {}, {"message": "Not Found",
                                                "documentation_url": DOCS}
            else:
                status, extra, body = self._route(h.command, raw_path, rec)
        except Exception as e:  # a bug in the fake: answer 500 and say why in the record
            status, extra, body = 500, {}, {"message": "fake error: %r" % e}
            rec.note = "fake error: %r" % e
        if hold is not None and hold.after:
            hold._wait(rec)
        out_headers = self._rate_headers()
        out_headers["x-github-request-id"] = "FAKE:%08X" % (id(rec) & 0xFFFFFFFF)
        if isinstance(body, (dict, list)):
            body = _json_bytes(body)
            out_headers["content-type"] = "application/json; charset=utf-8"
        out_headers.update(extra)
        self._answer(h, rec, status, out_headers, body or b"")

    def _answer(self, h, rec, status, headers, body):
        rec.status = status
        rec.answered = time.monotonic()
        self._keep_exchange(h, rec, status, headers, body)
        try:
            h.send_raw(status, headers, body or b"")
        finally:
            self._finish(rec)

    def _record(self, rec):
        with self._lock:
            self._records.append(rec)
        self._finish(rec)

    def _finish(self, rec):
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------ auth

    def _bearer(self, rec, schemes=("bearer",)):
        auth = rec.headers.get("authorization", "")
        scheme, _, cred = auth.partition(" ")
        if scheme.lower() not in schemes or not cred.strip():
            return None
        return cred.strip()

    def _check_app_jwt(self, rec):
        """Returns None when the request carries a valid App JWT, else the reason."""
        token = self._bearer(rec)
        if token is None:
            return "no Bearer credentials"
        try:
            header, claims, signing_input, sig = rsa_pure.decode_jwt(token)
        except (ValueError, UnicodeError) as e:
            return "malformed JWT: %s" % e
        if header.get("alg") != "RS256":
            return "alg %r is not RS256" % header.get("alg")
        if not rsa_pure.verify(self.public_key, signing_input, sig):
            return "bad signature"
        now = self.now()
        iss, iat, exp = claims.get("iss"), claims.get("iat"), claims.get("exp")
        if isinstance(iss, bool) or not isinstance(iss, (str, int)) or str(iss) != self.app_id:
            return "iss %r is not the app id" % (iss,)
        for name, v in (("iat", iat), ("exp", exp)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return "%s is not a number" % name
        if iat > now + 5:
            return "iat is in the future"
        if iat < now - 120:
            return "iat is too old"
        if exp <= now:
            return "expired"
        if exp - iat > 660:
            return "exp - iat is over 10 minutes"
        return None

    def _token_for_repo(self, rec, owner, repo):
        """Returns None when the request carries a valid installation token for owner/repo."""
        token = self._bearer(rec, ("bearer", "token"))
        if token is None:
            return "no token"
        with self._lock:
            t = self._tokens.get(token)
            if t is None:
                return "unknown token"
            if t["expires_at"] <= self.now():
                return "expired token"
            if t["owner"] != owner.lower():
                return "token of another installation"
            if t["repos"] is not None and repo.lower() not in t["repos"]:
                return "token not scoped to this repo"
            if not self.is_installed(owner + "/" + repo):
                return "app not installed on the repo"
        return None

    # ------------------------------------------------------------------ routes

    _ROUTES = [
        ("GET", re.compile(r"^/repos/([^/]+)/([^/]+)/installation$"), "_r_installation"),
        ("POST", re.compile(r"^/app/installations/(\d+)/access_tokens$"), "_r_access_token"),
        ("POST", re.compile(r"^/repos/([^/]+)/([^/]+)/dispatches$"), "_r_dispatch"),
        ("POST", re.compile(r"^/repos/([^/]+)/([^/]+)/check-runs$"), "_r_check_run"),
        ("GET", re.compile(r"^/repos/([^/]+)/([^/]+)/check-suites/(\d+)/check-runs$"),
         "_r_suite_runs"),
        ("POST",
         re.compile(r"^/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/(rerun|rerun-failed-jobs)$"),
         "_r_rerun"),
        ("GET", re.compile(r"^/repos/([^/]+)/([^/]+)/contents/(.*)$"), "_r_contents"),
        ("GET", re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$"),
         "_r_list_comments"),
        ("POST", re.compile(r"^/repos/([^/]+)/([^/]+)/issues/(\d+)/comments$"),
         "_r_create_comment"),
        ("GET", re.compile(r"^/repos/([^/]+)/([^/]+)/pulls/(\d+)$"), "_r_pull"),
    ] + HookDeliveries._HOOK_ROUTES

    def _route(self, method, path, rec):
        for m, rx, fn in self._ROUTES:
            mo = rx.match(path)
            if mo and (m == method or (m == "GET" and method == "HEAD")):
                return getattr(self, fn)(rec, *[unquote(g) for g in mo.groups()])
        return 404, {}, {"message": "Not Found", "documentation_url": DOCS}

    # ------------------------------------------------------------------ GitHub's objects

    def _user(self, login, uid, user_type="User"):
        """A simple-user object as GitHub embeds it (account, owner, author)."""
        api = "%s/users/%s" % (self.url, login)
        return {
            "login": login, "id": uid, "node_id": "U_%d" % uid,
            "avatar_url": "https://avatars.githubusercontent.com/u/%d?v=4" % uid,
            "gravatar_id": "", "url": api, "html_url": "%s/%s" % (self.web_url, login),
            "followers_url": api + "/followers",
            "following_url": api + "/following{/other_user}",
            "gists_url": api + "/gists{/gist_id}",
            "starred_url": api + "/starred{/owner}{/repo}",
            "subscriptions_url": api + "/subscriptions",
            "organizations_url": api + "/orgs", "repos_url": api + "/repos",
            "events_url": api + "/events{/privacy}",
            "received_events_url": api + "/received_events",
            "type": user_type, "site_admin": False,
        }

    def _app(self):
        """The App (integration object) that acts: check runs' `app`, comments'
        `performed_via_github_app`."""
        app_id = int(self.app_id) if self.app_id.isdigit() else 0
        return {
            "id": app_id, "slug": APP_SLUG, "node_id": "A_%d" % app_id,
            "client_id": "Iv1.%016x" % app_id, "owner": self._user("crcr-org", 9001,
                                                                 "Organization"),
            "name": APP_SLUG, "description": None, "external_url": "https://crcr.example",
            "html_url": "%s/apps/%s" % (self.web_url, APP_SLUG),
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            "permissions": dict(APP_PERMISSIONS), "events": [],
        }

    # ------------------------------------------------------------------ issue comments

    def _new_comment(self, owner_repo, number, body, login, user_type, app=False):
        with self._cond:
            cid = self._next_comment_id
            self._next_comment_id += 1
            now = _iso(self.now())
            c = {
                "id": cid,
                "node_id": "IC_%d" % cid,
                "url": "%s/repos/%s/issues/comments/%d" % (self.url, owner_repo, cid),
                "html_url": "%s/%s/pull/%d#issuecomment-%d"
                            % (self.web_url, owner_repo, number, cid),
                "issue_url": "%s/repos/%s/issues/%d" % (self.url, owner_repo, number),
                "body": body,
                "user": self._user(login, 100 + cid % 1000, user_type),
                "created_at": now,
                "updated_at": now,
                "author_association": "NONE",
                "performed_via_github_app": self._app() if app else None,
            }
            self._comments.setdefault((owner_repo.lower(), int(number)), []).append(c)
            self._cond.notify_all()
            return dict(c)

    def add_comment(self, repo, number, body, login="pytorch-bot[bot]", user_type="Bot"):
        """Puts a comment on issue/PR `number` of `repo` as someone else (e.g. upstream's bot with
        its marker). Returns the comment dict."""
        return self._new_comment(repo, int(number), body, login, user_type)

    def comments(self, repo, number):
        """The comments of issue/PR `number` of `repo`, oldest first (dicts id, body, user, ...)."""
        with self._lock:
            return [dict(c) for c in self._comments.get((repo.lower(), int(number)), [])]

    def wait_comments(self, repo, number, n, timeout=10.0):
        """Waits until `repo`#`number` has at least n comments; returns them (maybe fewer)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = self.comments(repo, number)
                left = deadline - time.monotonic()
                if len(got) >= n or left <= 0:
                    return got
                self._cond.wait(min(left, 0.1))

    @staticmethod
    def _listing_page(rec):
        """(per_page, page) as GitHub reads a listing's query (per_page 1..100, default 30);
        None when one is not an integer."""
        q = rec.query
        try:
            return max(1, min(100, int(q.get("per_page", "30")))), max(1, int(q.get("page", "1")))
        except ValueError:
            return None

    def _r_list_comments(self, rec, owner, repo, number):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        paging = self._listing_page(rec)
        if paging is None:
            return self._invalid("Invalid request.\n\nper_page and page must be integers.")
        per_page, page = paging
        with self._lock:
            every = self._comments.get(((owner + "/" + repo).lower(), int(number)), [])
            chunk = [dict(c) for c in every[(page - 1) * per_page : page * per_page]]
            pages = max(1, -(-len(every) // per_page))
        base = "%s/repos/%s/%s/issues/%s/comments?per_page=%d&page=" % (self.url, owner, repo,
                                                                          number, per_page)
        links = []
        if page < pages:
            links.append('<%s%d>; rel="next"' % (base, page + 1))
            links.append('<%s%d>; rel="last"' % (base, pages))
        return 200, ({"link": ", ".join(links)} if links else {}), chunk

    def _r_create_comment(self, rec, owner, repo, number):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        try:
            req = json.loads(rec.body)
        except (ValueError, UnicodeDecodeError):
            rec.note = "invalid JSON"
            return 400, {}, {"message": "Problems parsing JSON", "documentation_url": DOCS}
        body = req.get("body") if isinstance(req, dict) else None
        if not isinstance(body, str) or not body:
            rec.note = "no body"
            return self._invalid('Invalid request.\n\n"body" wasn\'t supplied.')
        if len(body) > COMMENT_MAX_BODY:
            rec.note = "body too long"
            return self._invalid("Validation Failed: body is too long (maximum is %d characters)"
                                 % COMMENT_MAX_BODY)
        return 201, {}, self._new_comment(owner + "/" + repo, int(number), body, APP_BOT_LOGIN,
                                          "Bot", app=True)

    # ------------------------------------------------------------------ pull requests

    _PULL_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                  "webhooks", "pull_request.opened.json")

    def set_pull(self, repo, number, head_sha, head_ref="feature", state="open", merged=False,
                 fork=None):
        """Serves GET /repos/{repo}/pulls/{number}: GitHub's pull-request object (the example
        webhook's, whose shape the description accepts) with this number, state, head sha and
        ref; `fork` (owner/repo) is the head's repository (default: `repo` itself). Setting it
        again replaces it (a push to the PR). Returns the object."""
        with open(self._PULL_TEMPLATE, encoding="utf-8") as f:
            pr = json.load(f)["pull_request"]
        number = int(number)
        api = "%s/repos/%s" % (self.url, repo)
        web = "%s/%s" % (self.web_url, repo)
        pr.update({
            "number": number, "state": "closed" if merged else state, "merged": bool(merged),
            "url": "%s/pulls/%d" % (api, number), "html_url": "%s/pull/%d" % (web, number),
            "issue_url": "%s/issues/%d" % (api, number),
            "diff_url": "%s/pull/%d.diff" % (web, number),
            "patch_url": "%s/pull/%d.patch" % (web, number),
        })
        head_repo = fork or repo
        for side, name, sha, ref in (("head", head_repo, head_sha, head_ref),
                                     ("base", repo, pr["base"]["sha"], pr["base"]["ref"])):
            part = pr[side]
            part["sha"], part["ref"] = sha, ref
            part["label"] = "%s:%s" % (name.split("/")[0], ref)
            r = part["repo"]
            r["full_name"], r["name"] = name, name.split("/")[1]
            r["clone_url"] = "%s/%s.git" % (self.web_url, name)
            r["html_url"] = "%s/%s" % (self.web_url, name)
        with self._lock:
            self._pulls[(repo.lower(), number)] = pr
        return copy.deepcopy(pr)

    def pull_reads(self, repo=None, number=None):
        """The GET /repos/{repo}/pulls/{number} requests the fake received."""
        rx = r"^/repos/%s/pulls/%s$" % (re.escape(repo) if repo else "[^/]+/[^/]+",
                                        number if number else r"\d+")
        return self.requests(method="GET", path_re=rx)

    def _r_pull(self, rec, owner, repo, number):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        with self._lock:
            pr = self._pulls.get(((owner + "/" + repo).lower(), int(number)))
            pr = copy.deepcopy(pr) if pr else None
        if pr is None:
            rec.note = "no such pull request"
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
        return 200, {}, pr

    # ------------------------------------------------------------------ contract check

    def _init_contract(self, flavor, api_prefix, check):
        self.flavor = flavor or contract.flavor_from_env()
        ghes = self.flavor.startswith("ghes-")
        self.api_prefix = (("/api/v3" if ghes else "") if api_prefix is None
                           else api_prefix.rstrip("/"))
        self.contract = contract.enabled() if check is None else bool(check)
        self._exchanges = []  # contract.Exchange per answered request; clear() keeps them
        self.contract_violations = []
        self.contract_tally = contract.TALLY  # where the run's counts go; None: not counted
        self._contract_checked = 0

    def _strip_prefix(self, path):
        """`path` without the API prefix; None when it is not under it."""
        if not self.api_prefix:
            return path
        if path == self.api_prefix or path.startswith(self.api_prefix + "/"):
            return path[len(self.api_prefix):] or "/"
        return None

    def _keep_exchange(self, h, rec, status, headers, body):
        if not self.contract:
            return
        injected = rec.fault is not None and rec.fault.status is not None
        with self._lock:
            self._exchanges.append(contract.Exchange(
                method=rec.method, raw_path=h.path.partition("?")[0],
                path=None if rec.outside else rec.path,
                query=dict(rec.query), headers=rec.headers, body=rec.body, status=status,
                response_headers={k.lower(): v for k, v in (headers or {}).items()},
                response=body if isinstance(body, bytes) else (body or b""),
                injected=injected))

    def check_contract(self):
        """Checks the exchanges not checked yet against GitHub's description (stop() calls
        it); raises contract.ContractViolation listing the problems, which stay in
        `contract_violations`."""
        if not self.contract:
            return
        with self._lock:
            todo = self._exchanges[self._contract_checked:]
            self._contract_checked = len(self._exchanges)
        found = contract.check(todo, self.flavor, tally=self.contract_tally)
        if found:
            self.contract_violations.extend(found)
            raise contract.ContractViolation(contract.report(found, self.flavor))

    # ------------------------------------------------------------------ holds

    def hold(self, method=None, path_re=None, count=1, after=True, timeout=60.0, skip=0):
        """Holds the answers of the next `count` matching requests (None: all) until
        Hold.release(), after letting `skip` of them through. With after=True the route runs
        first (a POST takes effect, then its answer waits); with after=False nothing happens until
        the release. A held answer goes out after `timeout` seconds at the latest (a forgotten
        hold never wedges the fake). Returns the Hold."""
        h = Hold(method, path_re, count, after, timeout, skip)
        with self._lock:
            self._holds.append(h)
        return h

    def _take_hold(self, method, path):
        with self._lock:
            for h in self._holds:
                if h._applies(method, path):
                    return h
        return None

    def _unauthorized_jwt(self, rec, why):
        rec.note = why
        return 401, {}, {"message": JWT_ERROR, "documentation_url": DOCS}

    # A valid token of an installation that does not cover the repository: GitHub does not show
    # a repository to a token that cannot see it (404), it does not call the credential bad.
    _NOT_VISIBLE = ("token not scoped to this repo", "app not installed on the repo")

    def _unauthorized_token(self, rec, why):
        rec.note = why
        if why in self._NOT_VISIBLE:
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
        return 401, {}, {"message": BAD_CREDENTIALS, "documentation_url": DOCS}

    def _r_installation(self, rec, owner, repo):
        why = self._check_app_jwt(rec)
        if why:
            return self._unauthorized_jwt(rec, why)
        if not self.is_installed(owner + "/" + repo):
            rec.note = "not installed"
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
        iid = self.installation_id(owner)
        base = self.url
        return 200, {}, {
            "id": iid,
            "account": self._user(owner, iid - INSTALLATION_ID_BASE + 1000, "Organization"),
            "repository_selection": "selected",
            "access_tokens_url": "%s/app/installations/%d/access_tokens" % (base, iid),
            "repositories_url": "%s/installation/repositories" % base,
            "html_url": "%s/organizations/%s/settings/installations/%d"
                        % (self.web_url, owner, iid),
            "app_id": int(self.app_id) if self.app_id.isdigit() else self.app_id,
            "app_slug": APP_SLUG,
            "target_id": iid - INSTALLATION_ID_BASE + 1000,
            "target_type": "Organization",
            "permissions": dict(APP_PERMISSIONS),
            "events": [],
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
            "single_file_name": None,
            "suspended_by": None,
            "suspended_at": None,
        }

    def _new_token(self):
        if self.token_format == "stateless":
            # ghs_APPID_<JWT-shaped text>: ~520 characters with two dots, like the 2026 format.
            part = lambda n: "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(n))
            return "ghs_%s_%s.%s.%s" % (self.app_id, part(36), part(300), part(170))
        return "ghs_" + "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(36))

    def _r_access_token(self, rec, install_id):
        why = self._check_app_jwt(rec)
        if why:
            return self._unauthorized_jwt(rec, why)
        iid = int(install_id)
        with self._lock:
            owner = next((o for o, i in self._install_ids.items() if i == iid), None)
        if owner is None:
            rec.note = "unknown installation"
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
        repos = None
        if rec.body.strip():
            try:
                req = json.loads(rec.body)
            except ValueError:
                return 400, {}, {"message": "Problems parsing JSON", "documentation_url": DOCS}
            if isinstance(req, dict) and isinstance(req.get("repositories"), list):
                repos = {str(r).lower() for r in req["repositories"]}
        token = self._new_token()
        expires = self.now() + self.token_ttl
        with self._lock:
            self._tokens[token] = {"installation_id": iid, "owner": owner,
                                   "expires_at": expires, "repos": repos}
        return 201, {}, {
            "token": token,
            "expires_at": _iso(expires),
            "permissions": dict(APP_PERMISSIONS),
            "repository_selection": "selected",
        }

    @staticmethod
    def _invalid(msg):
        return 422, {}, {"message": msg, "documentation_url": DOCS}

    def _r_dispatch(self, rec, owner, repo):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        try:
            req = json.loads(rec.body)
        except (ValueError, UnicodeDecodeError):
            rec.note = "invalid JSON"
            return 400, {}, {"message": "Problems parsing JSON", "documentation_url": DOCS}
        if not isinstance(req, dict):
            rec.note = "body not an object"
            return self._invalid("Invalid request.\n\nFor 'links/0/schema', %s is not an object."
                                 % json.dumps(req)[:100])
        et = req.get("event_type")
        if "event_type" not in req:
            rec.note = "no event_type"
            return self._invalid('Invalid request.\n\n"event_type" wasn\'t supplied.')
        if not isinstance(et, str):
            rec.note = "event_type not a string"
            return self._invalid("Invalid request.\n\nFor 'properties/event_type', %s is not a "
                                 "string." % json.dumps(et)[:100])
        if len(et) < 1:
            rec.note = "event_type empty"
            return self._invalid("Invalid request.\n\nFor 'properties/event_type', \"\" is too "
                                 "short (minimum is 1 characters).")
        if len(et) > DISPATCH_MAX_EVENT_TYPE:
            rec.note = "event_type too long"
            return self._invalid("Invalid request.\n\nFor 'properties/event_type', %s is too "
                                 "long (maximum is %d characters)."
                                 % (json.dumps(et)[:40], DISPATCH_MAX_EVENT_TYPE))
        cp = req.get("client_payload", {})
        if "client_payload" in req and not isinstance(cp, dict):
            rec.note = "client_payload not an object"
            return self._invalid("Invalid request.\n\nFor 'properties/client_payload', %s is not "
                                 "an object." % json.dumps(cp)[:40])
        if len(cp) > DISPATCH_MAX_PROPERTIES:
            rec.note = "client_payload has %d properties" % len(cp)
            return self._invalid("Invalid request.\n\nNo more than %d properties are allowed; %d "
                                 "were supplied." % (DISPATCH_MAX_PROPERTIES, len(cp)))
        if len(rec.body) >= DISPATCH_MAX_BODY:
            rec.note = "body of %d bytes" % len(rec.body)
            return self._invalid("client_payload is too large")
        with self._cond:
            self._dispatches.append({
                "repo": owner + "/" + repo, "event_type": et, "client_payload": cp,
                "body": rec.body, "installation_id": self.installation_id(owner),
                "time": rec.time,
            })
            self._cond.notify_all()
        return 204, {}, b""

    def _r_check_run(self, rec, owner, repo):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        try:
            req = json.loads(rec.body)
        except (ValueError, UnicodeDecodeError):
            return 400, {}, {"message": "Problems parsing JSON", "documentation_url": DOCS}
        if not isinstance(req, dict):
            return self._invalid("Invalid request.\n\nRequest body must be an object.")
        for field in ("name", "head_sha"):
            if not isinstance(req.get(field), str) or not req.get(field):
                rec.note = "no %s" % field
                return self._invalid('Invalid request.\n\n"%s" wasn\'t supplied.' % field)
        status = req.get("status", "queued")
        if status not in ("queued", "in_progress", "completed"):
            return self._invalid("Invalid request.\n\nFor 'properties/status', %s is not a "
                                 "member of the enum." % json.dumps(status))
        if (status == "completed" or req.get("completed_at")) and not req.get("conclusion"):
            return self._invalid("Invalid request.\n\nNo subschema in \"anyOf\" matched.\n"
                                 "\"conclusion\" wasn't supplied.")
        with self._cond:
            cid = self._next_check_run_id
            self._next_check_run_id += 1
            run = self._check_run_object(owner, repo, cid, dict(req, status=status),
                                         5_000_000_000 + cid % 1000)
            stored = dict(run, repo=owner + "/" + repo)
            self._check_runs.append(stored)
            self._cond.notify_all()
        return 201, {}, run

    def _check_run_object(self, owner, repo, cid, given, suite_id):
        """A check run as GitHub answers it: `given` (the request's fields, or a test's listed
        run) completed with what GitHub adds."""
        run = dict(given)
        run.update({
            "id": cid,
            "node_id": "CR_%d" % cid,
            "head_sha": given.get("head_sha") or "0" * 40,
            "name": given.get("name") or "check",
            "status": "completed" if given.get("conclusion") else
                      given.get("status", "queued"),
            "conclusion": given.get("conclusion"),
            "external_id": given.get("external_id", ""),
            "url": "%s/repos/%s/%s/check-runs/%d" % (self.url, owner, repo, cid),
            "html_url": "%s/%s/%s/runs/%d" % (self.web_url, owner, repo, cid),
            "details_url": given.get("details_url"),
            "started_at": given.get("started_at", _iso(self.now())),
            "completed_at": given.get("completed_at"),
            "output": self._check_output(given.get("output"), owner, repo, cid),
            "check_suite": {"id": suite_id},
            "app": self._app(),
            "pull_requests": [],
        })
        return run

    def _check_output(self, given, owner, repo, cid):
        """A check run's `output` as GitHub answers it, from the request's."""
        given = given if isinstance(given, dict) else {}
        return {"title": given.get("title"), "summary": given.get("summary"),
                "text": given.get("text"), "annotations_count": 0,
                "annotations_url": "%s/repos/%s/%s/check-runs/%d/annotations"
                                   % (self.url, owner, repo, cid)}

    def _r_suite_runs(self, rec, owner, repo, suite_id):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        try:
            per_page = max(1, min(100, int(rec.query.get("per_page", "30"))))
            page = max(1, int(rec.query.get("page", "1")))
        except ValueError:
            return self._invalid("Invalid request.\n\nper_page and page must be integers.")
        with self._lock:
            runs = self._suites.get(int(suite_id))
            if runs is None:
                return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
            first = (page - 1) * per_page
            chunk = [self._check_run_object(owner, repo, r.get("id", CHECK_RUN_ID_BASE // 2 + i),
                                            r, int(suite_id))
                     for i, r in enumerate(runs[first : first + per_page], first)]
            return 200, {}, {"total_count": len(runs), "check_runs": chunk}

    def _r_rerun(self, rec, owner, repo, run_id, kind):
        why = self._token_for_repo(rec, owner, repo)
        if why:
            return self._unauthorized_token(rec, why)
        with self._cond:
            if int(run_id) in self._already_running:
                rec.note = "already running"
                return 403, {}, {"message": ALREADY_RUNNING_MESSAGE, "documentation_url": DOCS}
            self._reruns.append({"repo": owner + "/" + repo, "run_id": int(run_id),
                                 "kind": kind})
            self._cond.notify_all()
        return 201, {}, {}

    def _r_contents(self, rec, owner, repo, path):
        ref = rec.query.get("ref", self.default_ref)
        with self._lock:
            data = self._files.get(((owner + "/" + repo).lower(), path.strip("/"), ref))
        if data is None:
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}
        etag = '"%s"' % hashlib.sha256(data).hexdigest()
        inm = rec.headers.get("if-none-match")
        if inm is not None:
            tags = [t.strip() for t in inm.split(",")]
            if etag in tags or ("W/" + etag) in tags or "*" in tags:
                return 304, {"etag": etag}, b""
        if "application/vnd.github.raw" in rec.headers.get("accept", ""):
            return 200, {"etag": etag, "content-type": "application/vnd.github.raw"}, data
        b64 = base64.b64encode(data).decode("ascii")
        content = "".join(b64[i : i + 60] + "\n" for i in range(0, len(b64), 60))
        blob_sha = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        name = os.path.basename(path)
        url = "%s/repos/%s/%s/contents/%s?ref=%s" % (self.url, owner, repo, path, ref)
        git_url = "%s/repos/%s/%s/git/blobs/%s" % (self.url, owner, repo, blob_sha)
        html_url = self.blob_url(owner + "/" + repo, ref, path)
        return 200, {"etag": etag}, {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": name,
            "path": path,
            "content": content,
            "sha": blob_sha,
            "url": url,
            "git_url": git_url,
            "html_url": html_url,
            "download_url": "https://raw.githubusercontent.com/%s/%s/%s/%s"
                            % (owner, repo, ref, path),
            "_links": {"self": url, "git": git_url, "html": html_url},
        }
