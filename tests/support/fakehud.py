"""fakehud - a loopback fake of the external HUD API for end-to-end tests (stdlib only).

The relay forwards every accepted callback (and every sweeper timeout) to
POST {HUD_API_URL}/crcr/results with the header x-hud-internal-bot: <HUD_BOT_KEY> and the upstream
body {"trusted": {...}, "untrusted": {"callback_payload": ...}}. This fake answers like the real
torchci endpoint (pages/api/crcr/results.ts):

    non-POST                                  405 {"error":"Method not allowed"}
    other path                                404
    x-hud-internal-bot != bot_key (when set)  401 {"error":"Unauthorized"}
    body not JSON                             400 {"error":"Invalid JSON"}
    otherwise                                 200 {"ok":true,"status":<status>,"dynamoKey":...}

unless a scripted answer applies: `fail(status, count=None, body=None, match=None, delay_ms=0,
gate=None)` makes the next `count` POSTs (all, when None; only those whose body contains `match`,
when given) answer `status` (after `delay_ms`, or once the threading.Event `gate` is set: the test
decides when the answer leaves; `wait_held(n)` waits until n answers wait at gates). Every request
is recorded (`requests()`); `results()` returns the accepted (2xx) bodies parsed.

    hud = FakeHUD(bot_key="hud-bot-key").start()
    ... relay env HUD_API_URL=hud.url, HUD_BOT_KEY=hud-bot-key ...
    hud.wait_results(2)
    hud.stop()
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESULTS_PATH = "/crcr/results"


class HudRequest:
    """One received request: method, path, headers (lower-case names), body (bytes), status
    answered, time (monotonic)."""

    def __init__(self, method, path, headers, body):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.status = None
        self.time = time.monotonic()

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<HudRequest %s %s -> %s>" % (self.method, self.path, self.status)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        rec = HudRequest(self.command, self.path.split("?", 1)[0],
                         {k.lower(): v for k, v in self.headers.items()}, body)
        status, answer = self.server.hud._handle(rec)
        data = json.dumps(answer).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET = do_PUT = _serve


class FakeHUD:
    """See the module docstring. Thread-safe."""

    def __init__(self, bot_key=None, port=0):
        self.bot_key = bot_key
        self._port = port
        self._cond = threading.Condition()
        self._records = []
        self._faults = []  # [status, remaining or None, body, match, delay_ms, gate]
        self._held = 0  # answers waiting at a gate now
        self._server = None
        self._thread = None

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
        self._server.daemon_threads = True
        self._server.hud = self
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="fakehud")
        self._thread.start()
        return self

    def stop(self):
        srv, self._server = self._server, None
        if srv is None:
            return
        srv.shutdown()
        srv.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self):
        return self.start() if self._server is None else self

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._port

    # -------------------------------------------------------------- scripting

    def fail(self, status, count=None, body=None, match=None, delay_ms=0, gate=None):
        """The next `count` POSTs to /crcr/results (every one when None) answer `status` with
        `body` (a JSON object), after `delay_ms`, or once `gate` (a threading.Event) is set. With
        `match` (str or bytes) only POSTs whose body contains it count, e.g. one delivery id."""
        if isinstance(match, str):
            match = match.encode("utf-8")
        with self._cond:
            self._faults.append([status, count, body, match, delay_ms, gate])

    def wait_held(self, n, timeout=10.0):
        """Waits until `n` answers wait at gates (fail(gate=...)); returns whether they do."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._held < n and time.monotonic() < deadline:
                self._cond.wait(0.05)
            return self._held >= n

    def clear_faults(self):
        with self._cond:
            self._faults.clear()

    # -------------------------------------------------------------- inspection

    def requests(self):
        with self._cond:
            return list(self._records)

    def results(self):
        """Bodies (parsed) of the POSTs answered 2xx, oldest first."""
        with self._cond:
            return [json.loads(r.body) for r in self._records
                    if r.status is not None and 200 <= r.status < 300]

    def wait_requests(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._records) < n and time.monotonic() < deadline:
                self._cond.wait(0.05)
            return list(self._records)

    def wait_results(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            got = self.results()
            if len(got) >= n or time.monotonic() >= deadline:
                return got
            with self._cond:
                self._cond.wait(0.05)

    # -------------------------------------------------------------- the endpoint

    def _handle(self, rec):
        status, answer, delay_ms, gate = self._decide(rec)
        if delay_ms:
            time.sleep(delay_ms / 1000.0)
        if gate is not None:
            with self._cond:
                self._held += 1
                self._cond.notify_all()
            gate.wait(60)
            with self._cond:
                self._held -= 1
        with self._cond:
            rec.status = status
            self._records.append(rec)
            self._cond.notify_all()
        return status, answer

    def _decide(self, rec):
        if rec.path != RESULTS_PATH:
            return 404, {"error": "Not found"}, 0, None
        if rec.method != "POST":
            return 405, {"error": "Method not allowed"}, 0, None
        with self._cond:
            for f in self._faults:
                if f[3] is not None and f[3] not in rec.body:
                    continue
                if f[1] is None or f[1] > 0:
                    if f[1] is not None:
                        f[1] -= 1
                    return (f[0], f[2] if f[2] is not None else {"error": "scripted %d" % f[0]},
                            f[4], f[5])
        if self.bot_key is not None and rec.headers.get("x-hud-internal-bot") != self.bot_key:
            return 401, {"error": "Unauthorized"}, 0, None
        try:
            doc = json.loads(rec.body)
        except ValueError:
            return 400, {"error": "Invalid JSON"}, 0, None
        cp = ((doc.get("untrusted") or {}).get("callback_payload") or {}) \
            if isinstance(doc, dict) else {}
        wf = cp.get("workflow") or {} if isinstance(cp, dict) else {}
        repo = (doc.get("trusted") or {}).get("verified_repo") if isinstance(doc, dict) else None
        key = "%s/%s/%s/%s/%s" % (repo, cp.get("delivery_id"), wf.get("name"),
                                  wf.get("job_name"), wf.get("check_run_id"))
        return 200, {"ok": True, "status": wf.get("status"), "dynamoKey": key}, 0, None
