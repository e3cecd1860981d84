"""End-to-end tests of the reporting action (action.yml -> action/report.js) against the real relay.

The action's JavaScript file runs exactly as the GitHub Actions runner runs it: `node
action/report.js` with the inputs in INPUT_<NAME> variables (hyphens kept: INPUT_DELIVERY-ID),
GITHUB_EVENT_PATH naming an event file whose client_payload is what the relay really dispatched
(taken from the fake GitHub, see test_callback.Stack), and ACTIONS_ID_TOKEN_REQUEST_URL/_TOKEN
naming a loopback token endpoint (TokenEndpoint) that checks the request token and the audience
and answers {"value": <token>} with a token of tests/support/oidc_issuer.py, which the relay
verifies. The callbacks go through FrontProxy, a loopback proxy in front of the relay that records
every request (the exact body bytes, arrival and answer times) and can answer one itself (a 429
with Retry-After), so waits are checked against observed events, never against a clock guess.

Covered: in_progress, completed (runs API), the nightly self-report (nightly tab), 429 +
Retry-After then success, Retry-After as an HTTP date, a relay refusal (::error:: with the
relay's detail, exit status 1, no retry), the OIDC token masked (::add-mask:: before anything
else, never printed otherwise), the missing id-token permission, an HTTP proxy, the body equal to
`crcr report --dry-run`'s for the same environment (one contract, also on edge-case JSON), and a
static check that action.yml is a node24 action without shell steps. Issue 24: a conclusion
that is none of GitHub's refused before any request (then the correct report succeeds); an
issuer whose JWKS cannot be fetched (the loopback issuer stopped) answered 503 + Retry-After,
retried by the action until the issuer is back (restarted on the same port); a callback-url with
credentials refused, URLs printed as origin and path only, the callback token masked in a
dry-run.

Debian's nodejs runs the file (the test fails, never skips, without it: scripts/install-deps.sh
--test installs it). Needs CRCR_BIN; see tests/support/README.md.
"""

import http.client
import http.server
import json
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

import relay as R
from test_callback import L2, L4, CallbackMixin, new_run_id, new_sha
from waiting import wait_until

REPO_ROOT = R.REPO_ROOT
ACTION_YML = REPO_ROOT / "action.yml"
ACTION_JS = REPO_ROOT / "action" / "report.js"
AUDIENCE = "pytorch-cross-repo-ci-relay"
REQUEST_TOKEN = "actions-request-token-3b9e61f0c2d4"  # ACTIONS_ID_TOKEN_REQUEST_TOKEN
UPSTREAM_DEFAULT_URL = ("https://gwuj7w5coh4y4l66urspge6mnm0pwaxq.lambda-url.us-east-1.on.aws"
                        "/github/callback/")
TIMESTAMP = re.compile(rb'"(started_at|completed_at)": "(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"')
# The inputs of `crcr report` that have an action input of the same meaning.
REPORT_OPTIONS = ("status", "conclusion", "job-name", "test-results", "artifact-url",
                  "callback-url", "delivery-id", "event-type", "check-run-id", "audience")


def action_default(name):
    """The default of input `name` in action.yml, as the runner passes it (unquoted)."""
    text = ACTION_YML.read_text(encoding="utf-8")
    m = re.search(r"\n  %s:\n(?:    .*\n|      .*\n)*?    default: (.*)\n" % re.escape(name), text)
    return m.group(1).strip("'") if m else ""


def closed_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_node():
    """$CRCR_NODE (to try another Node), else Debian's node binary (nodejs package), or None."""
    for cand in (os.environ.get("CRCR_NODE"), "/usr/bin/node", "/usr/bin/nodejs"):
        if not cand:
            continue
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("node") or shutil.which("nodejs")


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that refuses our certificate is part of a test


class Recorded:
    def __init__(self, method, target, headers, body):
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.absolute = target.startswith("http://")  # absolute-form: sent to a proxy
        self.path = urllib.parse.urlsplit(target).path
        self.query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
        self.time = time.monotonic()  # arrival
        self.answered = None  # when the answer left
        self.status = None
        self.answer = None


class _Server:
    """A loopback ThreadingHTTPServer (HTTPS with `tls`, an ssl.SSLContext) whose handler
    answers with self.handle(rec) -> (status, headers, body)."""

    def __init__(self, tls=None):
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                rec = Recorded(self.command, self.path,
                               {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(n))
                with outer.lock:
                    outer.requests.append(rec)
                status, headers, body = outer.handle(rec)
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                rec.status, rec.answer, rec.answered = status, body, time.monotonic()

            do_GET = do_POST = _any

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        if tls:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def recorded(self):
        with self.lock:
            return list(self.requests)

    def clear(self):
        with self.lock:
            self.requests = []

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _json_answer(status, doc, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return status, h, json.dumps(doc).encode()


class TokenEndpoint(_Server):
    """ACTIONS_ID_TOKEN_REQUEST_URL: GET /token?api-version=2.0&audience=A with
    "Authorization: Bearer <REQUEST_TOKEN>" answers {"value": <ID token for `repo`>}."""

    def __init__(self, issuer):
        self.issuer = issuer
        self.repo = L2
        self.minted = []  # every token handed out
        super().__init__()

    def handle(self, rec):
        if rec.method != "GET" or rec.path != "/token":
            return _json_answer(404, {"message": "Not Found"})
        if rec.headers.get("authorization") != "Bearer " + REQUEST_TOKEN:
            return _json_answer(401, {"message": "bad request token"})
        if rec.query.get("audience") != [AUDIENCE] or rec.query.get("api-version") != ["2.0"]:
            return _json_answer(400, {"message": "bad query %r" % rec.query})
        token = self.issuer.token(self.repo)
        with self.lock:
            self.minted.append(token)
        return _json_answer(200, {"value": token})


class FrontProxy(_Server):
    """In front of the relay: forwards each request (origin-form or, as an HTTP proxy,
    absolute-form) to the relay and records it. `answers` (status, headers, doc) are answered
    in turn, instead of forwarding, first."""

    def __init__(self, relay_port, tls=None):
        self.relay_port = relay_port
        self.answers = []
        super().__init__(tls)

    def handle(self, rec):
        with self.lock:
            canned = self.answers.pop(0) if self.answers else None
        if canned:
            return _json_answer(*canned)
        target = urllib.parse.urlsplit(rec.target)
        path = target.path + ("?" + target.query if target.query else "")
        conn = http.client.HTTPConnection("127.0.0.1", self.relay_port, timeout=30)
        try:
            headers = {k: v for k, v in rec.headers.items()
                       if k not in ("host", "connection", "proxy-authorization")}
            conn.request(rec.method, path, body=rec.body or None, headers=headers)
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def callbacks(self):
        return [r for r in self.recorded() if r.path == "/github/callback"]


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT host:port), recording each target."""

    def __init__(self):
        self.targets = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_CONNECT(self):
                outer.targets.append(self.path)
                host, port = self.path.rsplit(":", 1)
                with socket.create_connection((host, int(port)), timeout=30) as up:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.flush()
                    ends = [self.connection, up]
                    while True:
                        ready, _, _ = select.select(ends, [], [], 30)
                        data = ready[0].recv(65536) if ready else b""
                        if not data:
                            return
                        (up if ready[0] is self.connection else self.connection).sendall(data)

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class ActionTest(CallbackMixin, unittest.TestCase):
    """The action against a shared stack (fake GitHub, OIDC issuer, fake HUD, relay)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tokens = TokenEndpoint(cls.s.issuer)
        cls.addClassCleanup(cls.tokens.stop)
        cls.front = FrontProxy(cls.s.relay.port)
        cls.addClassCleanup(cls.front.stop)

    def setUp(self):
        super().setUp()
        self.node = find_node()
        self.assertIsNotNone(self.node, "node is missing: install Debian's nodejs "
                                        "(scripts/install-deps.sh --test)")
        self.bin = R.crcr_bin()
        self.tmp = tempfile.mkdtemp(prefix="crcr-e2e-action-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.front.clear()
        self.front.answers = []
        self.tokens.clear()
        self.tokens.minted = []
        self.tokens.repo = L2
        self.run_id = str(new_run_id())

    # ------------------------------------------------------------ running the action

    def event_file(self, client_payload=None, event=None):
        """A GITHUB_EVENT_PATH file: a repository_dispatch event carrying `client_payload`
        (pretty-printed, as the runner writes it), or `event` as given."""
        if event is None:
            event = {"action": client_payload.get("event_type"), "branch": "main",
                     "client_payload": client_payload,
                     "repository": {"full_name": self.tokens.repo},
                     "sender": {"login": "pytorch-fdn-cross-repo-ci-relay[bot]"}}
        fd, path = tempfile.mkstemp(prefix="event-", suffix=".json", dir=self.tmp)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(event, f, indent=2, ensure_ascii=False)
        return path

    def job_env(self, event_path, **extra):
        """The environment the runner gives a JavaScript action's process (no inputs)."""
        env = {k: v for k, v in os.environ.items()
               if k in R._KEEP_ENV or k.startswith(R._KEEP_PREFIXES)}
        env.update({
            "GITHUB_ACTIONS": "true",
            "CI": "true",
            "GITHUB_RUN_ID": self.run_id,
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_WORKFLOW": "PyTorch CI \u00fcber",
            "GITHUB_JOB": "build",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": self.tokens.repo,
            "ACTIONS_ID_TOKEN_REQUEST_URL": self.tokens.url + "/token?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "RUNNER_TEMP": self.tmp,
            # A safety net: a report that names no relay goes nowhere, never to the upstream
            # relay (the callback-url default).
            "CRCR_CALLBACK_URL": "http://127.0.0.1:9/no-relay-configured",
        })
        if event_path:
            env["GITHUB_EVENT_PATH"] = event_path
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    @staticmethod
    def input_env(inputs):
        """INPUT_<NAME> variables as the runner names them: upper case, spaces to '_', hyphens
        kept. Every input of action.yml is set (to its default unless given), as the runner
        does."""
        values = {"conclusion": "", "delivery-id": "", "event-type": "", "test-results": "",
                  "callback-url": UPSTREAM_DEFAULT_URL, "artifact-url": "",
                  "max-time": action_default("max-time"),
                  "job-name": "build", "check-run-id": "", "audience": AUDIENCE,
                  "dry-run": "false"}
        values.update(inputs)
        return {"INPUT_" + k.replace(" ", "_").upper(): v for k, v in values.items()}

    def run_action(self, inputs, event_path, timeout=120, **extra_env):
        env = self.job_env(event_path, **extra_env)
        env.update(self.input_env(inputs))
        before = len(self.tokens.minted)
        p = subprocess.run([self.node, str(ACTION_JS)], env=env, cwd=self.tmp,
                           capture_output=True, text=True, timeout=timeout)
        self.assert_secrets_kept(p, self.tokens.minted[:before], self.tokens.minted[before:])
        return p

    def assert_secrets_kept(self, p, earlier, minted):
        """Every token minted for this run appears once, in `::add-mask::TOKEN` before any
        line that reports an answer; earlier tokens and the request token never appear."""
        lines = p.stdout.splitlines()
        for secret in [REQUEST_TOKEN] + earlier:
            self.assertNotIn(secret, p.stdout + p.stderr, "secret printed")
        for token in minted:
            self.assertNotIn(token, p.stderr, "OIDC token on stderr")
            hits = [i for i, line in enumerate(lines) if token in line]
            self.assertEqual(len(hits), 1, "OIDC token printed besides its mask line:\n"
                             + p.stdout)
            self.assertEqual(lines[hits[0]], "::add-mask::" + token)
            answers = [i for i, line in enumerate(lines)
                       if "HTTP " in line or line.startswith("::error::")]
            self.assertTrue(all(hits[0] < i for i in answers), p.stdout)

    def report_dry_run(self, inputs, event_path, **extra_env):
        """`crcr report --dry-run` for the same inputs and environment: its body (bytes)."""
        args = [self.bin, "report", "--dry-run"]
        for name in REPORT_OPTIONS:
            if inputs.get(name):
                args += ["--" + name, inputs[name]]
        p = subprocess.run(args, env=self.job_env(event_path, **extra_env),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.rstrip(b"\n").split(b"\n", 1)[1]

    def assert_same_body(self, action_body, report_body):
        """Byte equality, the two clock readings (whole seconds) aside."""
        stamps = TIMESTAMP.findall(action_body)
        self.assertTrue(stamps, action_body)
        self.assertEqual([k for k, _ in TIMESTAMP.findall(report_body)], [k for k, _ in stamps])
        norm = lambda b: TIMESTAMP.sub(rb'"\1": "T"', b)
        self.assertEqual(norm(action_body), norm(report_body))

    def assert_ok(self, p):
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s%s"
                         % (p.stdout, p.stderr, self.diag()))
        self.assertNotIn("::error::", p.stdout)

    # ------------------------------------------------------------ relay observations

    def runs_cell(self, repo, tab="pr", key=None, timeout=10.0):
        """The runs API cell of this test's run (matched by run_id), waiting for it."""
        def find():
            doc = json.loads(self.s.relay.get("/api/v1/repos/%s/runs?tab=%s" % (repo, tab)).body)
            for row in doc["rows"]:
                for cell in row["cells"]:
                    if cell and str(cell["run_id"]) == self.run_id and (key is None or key(cell)):
                        return cell
            return None
        cell = wait_until(find, timeout)
        self.assertTrue(cell, "run %s not in /api/v1/repos/%s/runs?tab=%s%s"
                        % (self.run_id, repo, tab, self.diag()))
        return cell

    # ------------------------------------------------------------ the cases

    def test_in_progress_reaches_the_relay_with_crcr_report_body(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        inputs = {"status": "in_progress"}
        # No callback-url input (the runner passes the upstream default): CRCR_CALLBACK_URL wins.
        cb_env = {"CRCR_CALLBACK_URL": self.front.url + "/github/callback/"}
        p = self.run_action(inputs, event, **cb_env)
        self.assert_ok(p)
        self.assertIn('HTTP 200 {"ok":true,"status":"in_progress"}', p.stdout)
        self.assertEqual(len(self.tokens.minted), 1)
        cbs = self.front.callbacks()
        self.assertEqual(len(cbs), 1)
        self.assertEqual(cbs[0].status, 200)
        self.assertEqual(cbs[0].headers.get("authorization"), "Bearer " + self.tokens.minted[0])
        self.assertEqual(cbs[0].headers.get("content-type"), "application/json")
        self.assert_same_body(cbs[0].body, self.report_dry_run(inputs, event, **cb_env))
        sent = json.loads(cbs[0].body)
        self.assertEqual({k: v for k, v in sent.items() if k != "workflow"}, pr.cp(L2))
        cell = self.runs_cell(L2)
        self.assertEqual((cell["state"], cell["job"], cell["delivery_id"]),
                         ("in_progress", "build", pr.delivery))

    def test_completed_with_every_input(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        url = self.front.url + "/github/callback"
        self.assert_ok(self.run_action({"status": "in_progress", "job-name": "test-npu",
                                        "callback-url": url}, event))
        results = '{"passed": 50, "failed": 1, "skipped": 2, "duration_s": 12.50}'
        inputs = {"status": "completed", "conclusion": "failure", "job-name": "test-npu",
                  "test-results": results, "callback-url": url, "check-run-id": "48151623420",
                  "artifact-url": "https://example.com/artifacts/%s" % self.run_id}
        p = self.run_action(inputs, event)
        self.assert_ok(p)
        self.assertIn('HTTP 200 {"ok":true,"status":"completed"}', p.stdout)
        cbs = self.front.callbacks()
        self.assertEqual([c.status for c in cbs], [200, 200])
        self.assert_same_body(cbs[1].body, self.report_dry_run(inputs, event))
        wf = json.loads(cbs[1].body)["workflow"]
        self.assertEqual((wf["status"], wf["conclusion"], wf["check_run_id"], wf["started_at"]),
                         ("completed", "failure", "48151623420", None))
        cell = self.runs_cell(L2, key=lambda c: c["state"] == "completed")
        self.assertEqual((cell["job"], cell["conclusion"], cell["artifact_url"]),
                         ("test-npu", "failure", inputs["artifact-url"]))
        self.assertEqual(cell["tests"]["passed"], 50)

    def test_nightly_self_report_shows_on_the_nightly_tab(self):
        sha = new_sha()
        schedule = self.event_file(event={"schedule": "0 3 * * *", "workflow": ".github/x.yml"})
        inputs = {"status": "completed", "conclusion": "success", "delivery-id": sha,
                  "event-type": "nightly", "job-name": "nightly-build",
                  "callback-url": self.front.url + "/github/callback"}
        p = self.run_action(inputs, schedule)
        self.assert_ok(p)
        cbs = self.front.callbacks()
        self.assertEqual([c.status for c in cbs], [200])
        self.assert_same_body(cbs[0].body, self.report_dry_run(inputs, schedule))
        body = json.loads(cbs[0].body)
        self.assertEqual(body["payload"], {"repository": {"full_name": "pytorch/pytorch"},
                                           "head_sha": sha})
        self.assertIsNotNone(body["workflow"]["started_at"])
        cell = self.runs_cell(L2, tab="nightly")
        self.assertEqual((cell["delivery_id"], cell["event_type"], cell["result"]),
                         (sha, "nightly", "success"))

    def test_429_waits_retry_after_then_succeeds(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        self.front.answers = [(429, {"detail": "rate limit exceeded for %s" % L2},
                               {"Retry-After": "1"})]
        # Real time is the subject: the action (Node, not the relay) waits on the real clock, so
        # this waits its 1 s out. A generous budget: only the order of events is checked, not
        # the machine's speed.
        p = self.run_action({"status": "in_progress", "max-time": "120",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        self.assertIn("the relay answered HTTP 429; retrying in 1 s", p.stdout)
        cbs = self.front.callbacks()
        self.assertEqual([c.status for c in cbs], [429, 200])
        self.assertGreaterEqual(cbs[1].time - cbs[0].answered, 1.0)
        self.assertEqual(cbs[0].body, cbs[1].body)  # the same callback, sent again
        self.assertEqual(len(self.tokens.minted), 1)  # the token is still fresh: no re-mint
        self.assertEqual(self.runs_cell(L2)["state"], "in_progress")

    def test_retry_after_as_an_http_date(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        # A date in the past means "now": 0 s, where an unread header would give the 1 s backoff.
        self.front.answers = [(503, {"detail": "store unavailable, please retry"},
                               {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})]
        p = self.run_action({"status": "in_progress", "max-time": "120",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        self.assertIn("the relay answered HTTP 503; retrying in 0 s", p.stdout)
        self.assertEqual([c.status for c in self.front.callbacks()], [503, 200])

    def test_refusal_fails_the_step_with_the_relays_detail_and_no_retry(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        # completed without in_progress: the relay's state machine refuses it (STATE-04).
        p = self.run_action({"status": "completed", "conclusion": "success", "max-time": "120",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        errors = [line for line in p.stdout.splitlines() if line.startswith("::error::")]
        self.assertEqual(len(errors), 1, p.stdout)
        self.assertTrue(errors[0].startswith(
            "::error::Callback server returned HTTP 400. callback rejected: invalid state "
            "transition delivery_id=%s repo=%s status=completed" % (pr.delivery, L2)), errors[0])
        self.assertEqual([c.status for c in self.front.callbacks()], [400])

    def test_missing_id_token_permission_is_explained(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        p = self.run_action({"status": "in_progress",
                             "callback-url": self.front.url + "/github/callback"}, event,
                            ACTIONS_ID_TOKEN_REQUEST_URL=None, ACTIONS_ID_TOKEN_REQUEST_TOKEN=None)
        self.assertEqual(p.returncode, 1)
        self.assertIn("::error::OIDC token request variables are missing", p.stdout)
        self.assertIn("id-token: write", p.stdout)
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])

    def test_http_proxy_from_the_environment(self):
        pr = self.open_pr(repos=[L4])
        self.tokens.repo = L4
        event = self.event_file(pr.cp(L4))
        # The relay directly, through the proxy; the token endpoint bypasses it (no_proxy).
        p = self.run_action({"status": "in_progress",
                             "callback-url": self.s.relay.url + "/github/callback"}, event,
                            http_proxy=self.front.url,
                            no_proxy="example.invalid, 127.0.0.1:%d" % self.tokens.port)
        self.assert_ok(p)
        cbs = self.front.callbacks()
        self.assertEqual([(c.absolute, c.status) for c in cbs], [(True, 200)])
        self.assertEqual(cbs[0].target, self.s.relay.url + "/github/callback")
        self.assertEqual(len(self.tokens.minted), 1)
        self.assertEqual(self.runs_cell(L4)["state"], "in_progress")

    def test_https_through_a_connect_proxy_with_a_private_ca(self):
        cert, key = os.path.join(self.tmp, "cert.pem"), os.path.join(self.tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        relay_tls = FrontProxy(self.s.relay.port, tls=ctx)
        self.addCleanup(relay_tls.stop)
        tunnel = ConnectProxy()
        self.addCleanup(tunnel.stop)
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        inputs = {"status": "in_progress", "max-time": "120",
                  "callback-url": "https://localhost:%d/github/callback" % relay_tls.port}
        # Without the CA: the certificate error is final, no retry (one tunnel, no request).
        p = self.run_action(inputs, event, https_proxy=tunnel.url)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertRegex(p.stdout, r"::error::callback request failed: \S*CERT")
        self.assertEqual((tunnel.targets, relay_tls.recorded()), (["localhost:%d" % relay_tls.port],
                                                                  []))
        # With it (NODE_EXTRA_CA_CERTS, as a self-hosted runner sets it): through the tunnel.
        p = self.run_action(inputs, event, https_proxy=tunnel.url, NODE_EXTRA_CA_CERTS=cert)
        self.assert_ok(p)
        self.assertEqual(len(tunnel.targets), 2)
        self.assertEqual([c.status for c in relay_tls.callbacks()], [200])
        self.assertEqual(self.runs_cell(L2)["state"], "in_progress")

    def test_body_equals_crcr_report_on_edge_case_json(self):
        # Key order (also numeric-looking keys), an existing "workflow" key replaced in place,
        # json.dumps escapes (non-ASCII, astral, DEL, controls), int64 bounds, reals in every
        # repr form.
        payload_text = (
            '{"event_type": "push", "2": "b", "1": "a", "workflow": "replaced here",'
            ' "delivery_id": "d-1", "text": "caf\\u00e9 \\u2713 \\ud83d\\ude00 \\u007f \\"q\\" '
            '\\\\ / \\b\\f\\n\\r\\t \\u001f \u00fc\u2028",'
            ' "numbers": [0, -0, -9223372036854775808, 9223372036854775807, 1.0, -0.0, 2.50,'
            ' 1e16, 1E-5, 0.0001, 123456789.125, 5e-324, 1.7976931348623157e308, 1e22,'
            ' 12345678901234567890.0],'
            ' "nested": {"a": [], "b": {}, "c": [true, false, null]}}')
        event_text = '{"client_payload": %s, "action": "push"}' % payload_text
        path = os.path.join(self.tmp, "edge.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(event_text)
        inputs = {"status": "completed", "conclusion": "cancelled", "job-name": "j \u00e9",
                  "test-results": ' {"passed": 1, "ratio": 0.1, "big": 1e300} ',
                  "callback-url": "https://relay.example.org/github/callback/",
                  "artifact-url": " https://example.com/\u00fc ", "dry-run": "true"}
        p = self.run_action(inputs, path)
        self.assert_ok(p)
        head, body = p.stdout.rstrip("\n").split("\n", 1)
        self.assertEqual(head, "crcr action: dry-run: POST https://relay.example.org/github/callback")
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])
        self.assert_same_body(body.encode(), self.report_dry_run(inputs, path))
        # Python's json.dumps of the parsed documents gives the same bytes too.
        want = json.loads(payload_text)
        want["workflow"] = json.loads(body)["workflow"]
        self.assertEqual(body, json.dumps(want))

    def test_documents_crcr_report_refuses_are_refused(self):
        cases = ['{"client_payload": {"a": 1, "a": 2}}',       # duplicate key
                 '{"client_payload": {"a": "\\u0000"}}',        # NUL escape
                 '{"client_payload": {"a": "\\ud800"}}',        # lone surrogate
                 '{"client_payload": {"a": 9223372036854775808}}',  # beyond int64
                 '{"client_payload": {"a": 1e400}}',            # real overflow
                 '{"client_payload": %s}' % ("[" * 64 + "]" * 64),  # too deep
                 '{"client_payload": []}']                       # not an object
        for text in cases:
            with self.subTest(event=text[:60]):
                path = os.path.join(self.tmp, "bad.json")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                p = self.run_action({"status": "in_progress", "dry-run": "true"}, path)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertIn("::error::GITHUB_EVENT_PATH", p.stdout)
                r = subprocess.run([self.bin, "report", "--status", "in_progress", "--dry-run",
                                    "--callback-url", "https://relay.example.org/cb"],
                                   env=self.job_env(path), capture_output=True, timeout=60)
                self.assertEqual(r.returncode, 1, r.stdout)

    def test_a_forgotten_callback_url_names_the_default(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        # No callback-url input (the runner passes the default) and no CRCR_CALLBACK_URL.
        p = self.run_action({"status": "in_progress", "dry-run": "true"}, event,
                            CRCR_CALLBACK_URL=None)
        self.assert_ok(p)
        default = UPSTREAM_DEFAULT_URL.rstrip("/")
        self.assertIn("callback-url was not given (nor CRCR_CALLBACK_URL): reporting to the "
                      "default, the upstream relay's %s" % default, p.stdout)
        # Given, nothing is said about a default.
        p = self.run_action({"status": "in_progress", "dry-run": "true",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        self.assertNotIn("callback-url was not given", p.stdout, p.stdout[:300])
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])

    def test_an_unreachable_relay_gets_a_hint(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        url = "http://127.0.0.1:%d/github/callback" % closed_port()
        p = self.run_action({"status": "in_progress", "max-time": "2", "callback-url": url},
                            event)
        self.assertEqual(p.returncode, 1, p.stdout)
        errors = [line for line in p.stdout.splitlines() if line.startswith("::error::")]
        self.assertEqual(len(errors), 1, p.stdout)
        self.assertIn("ECONNREFUSED", errors[0])
        self.assertIn("is the relay reachable at %s?" % url, errors[0])

    def test_the_default_max_time_waits_out_a_long_retry_after(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        # Longer than upstream's 10 s default: only a default with room for the relay's
        # Retry-After (up to 60 s) gets through.
        self.front.answers = [(429, {"detail": "rate limit exceeded for %s" % L2},
                               {"Retry-After": "11"})]
        self.assertEqual(action_default("max-time"), "120")
        p = self.run_action({"status": "in_progress",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        self.assertIn("the relay answered HTTP 429; retrying in 11 s", p.stdout)
        self.assertEqual([c.status for c in self.front.callbacks()], [429, 200])

    def test_bad_inputs_fail_before_any_request(self):
        cases = [{"status": "completed"},                            # no conclusion
                 {"status": "queued"},
                 {"status": "completed", "conclusion": "success", "event-type": "nightly"},
                 {"status": "in_progress", "delivery-id": "abc", "event-type": "nightly"},
                 {"status": "completed", "conclusion": "success", "test-results": "{nope"},
                 {"status": "in_progress", "callback-url": "http://relay.example/cb"},
                 {"status": "in_progress", "max-time": "0"},
                 {"status": "completed", "conclusion": "sucess"},
                 {"status": "in_progress",
                  "callback-url": self.front.url.replace("://", "://user:pw@") + "/cb"}]
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        for inputs in cases:
            with self.subTest(inputs=inputs):
                inputs.setdefault("callback-url", self.front.url + "/github/callback")
                p = self.run_action(inputs, event)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertTrue(p.stdout.startswith("::error::"), p.stdout)
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])


    # ------------------------------------------------------------ issue 24: real clients

    def test_a_misspelt_conclusion_is_refused_before_any_request(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        url = self.front.url + "/github/callback"
        self.assert_ok(self.run_action({"status": "in_progress", "callback-url": url}, event))
        self.front.clear()
        self.tokens.clear()
        p = self.run_action({"status": "completed", "conclusion": "sucess", "callback-url": url},
                            event)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertEqual(p.stdout.splitlines()[-1],
                         "::error::conclusion must be one of action_required, cancelled, "
                         "failure, neutral, success, skipped, stale, timed_out with status "
                         "completed, got 'sucess'")
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])
        # The correct report follows (nothing was sent, nothing stored).
        p = self.run_action({"status": "completed", "conclusion": "success", "callback-url": url},
                            event)
        self.assert_ok(p)
        self.assertIn('HTTP 200 {"ok":true,"status":"completed"}', p.stdout)
        cell = self.runs_cell(L2, key=lambda c: c["state"] == "completed")
        self.assertEqual(cell["conclusion"], "success")
        # crcr report refuses it the same way, with the same words, before any request.
        r = subprocess.run([self.bin, "report", "--status", "completed", "--conclusion", "sucess",
                            "--callback-url", url], env=self.job_env(event), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--conclusion must be one of action_required, cancelled, failure, neutral, "
                      "success, skipped, stale, timed_out with --status completed, got 'sucess'",
                      r.stderr)
        self.assertEqual(len(self.front.callbacks()), 1)

    def test_an_issuer_outage_is_retried_until_the_issuer_is_back(self):
        # A relay that never fetched the issuer's keys; the issuer stopped.
        s = self.own_stack()
        tokens = TokenEndpoint(s.issuer)
        self.addCleanup(tokens.stop)
        front = HookedFront(s.relay.port)
        self.addCleanup(front.stop)
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        s.issuer.stop()

        def back(rec, status, body):
            # Before the action hears of the 503: the issuer answers again on its port, and the
            # relay's clock passes the retry interval (OIDC_JWKS_RETRY_S), so that the retry
            # the 503 asks for is the one that finds the keys. No timing involved.
            if status == 503 and not front.seen_503:
                front.seen_503 = body
                s.issuer.start()
                s.relay.clock.advance(5)
        front.seen_503 = None
        front.hook = back
        p = self.run_action({"status": "in_progress", "max-time": "120",
                             "callback-url": front.url + "/github/callback"}, event,
                            ACTIONS_ID_TOKEN_REQUEST_URL=tokens.url + "/token?api-version=2.0")
        self.assert_ok(p)
        cbs = front.callbacks()
        self.assertEqual([c.status for c in cbs], [503, 200], p.stdout)
        detail = json.loads(front.seen_503)["detail"]
        self.assertTrue(detail.startswith("the relay cannot get the signing keys of OIDC issuer "
                                          "%s (" % s.issuer.url), detail)
        self.assertTrue(detail.endswith("); the token was not judged, please retry"), detail)
        retry_after = cbs[0].answer_headers.get("Retry-After")
        self.assertIn(retry_after, [str(n) for n in range(1, 6)])
        self.assertIn("the relay answered HTTP 503; retrying in %s s" % retry_after, p.stdout)
        self.assertEqual(cbs[0].body, cbs[1].body)  # the same report, sent again
        self.assertGreaterEqual(len(s.issuer.jwks_fetches()), 1)  # fetched once it was back
        cell = self.runs_cell(L2)
        self.assertEqual((cell["state"], cell["delivery_id"]), ("in_progress", pr.delivery))

    def test_credentials_in_the_callback_url_are_refused_and_urls_print_without_query(self):
        pr = self.open_pr(repos=[L2])
        event = self.event_file(pr.cp(L2))
        secret_url = self.front.url.replace("://", "://relay-user:s3cr3t-pw@") + "/github/callback"
        for dry in ("false", "true"):
            p = self.run_action({"status": "in_progress", "callback-url": secret_url,
                                 "dry-run": dry}, event)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("::error::callback-url must not contain credentials (user:password@)",
                          p.stdout)
            self.assertNotIn("s3cr3t-pw", p.stdout + p.stderr)
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])
        # A query (which may carry a secret too) is sent, never printed.
        url = self.front.url + "/github/callback?key=q-s3cr3t"
        p = self.run_action({"status": "in_progress", "callback-url": url, "max-time": "120"},
                            event)
        self.assert_ok(p)
        self.assertIn("crcr action: POST %s/github/callback (in_progress," % self.front.url,
                      p.stdout)
        self.assertNotIn("q-s3cr3t", p.stdout + p.stderr)
        self.assertEqual([c.target for c in self.front.callbacks()], ["/github/callback?key=q-s3cr3t"])
        p = self.run_action({"status": "in_progress", "callback-url": url, "dry-run": "true"},
                            event)
        self.assert_ok(p)
        self.assertIn("crcr action: dry-run: POST %s/github/callback\n" % self.front.url, p.stdout)
        self.assertNotIn("q-s3cr3t", p.stdout)
        # crcr report refuses credentials too.
        r = subprocess.run([self.bin, "report", "--status", "in_progress", "--dry-run",
                            "--callback-url", secret_url], env=self.job_env(event),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("--callback-url must not contain credentials", r.stderr)
        self.assertNotIn("s3cr3t-pw", r.stdout + r.stderr)

    def test_dry_run_masks_the_callback_token(self):
        pr = self.open_pr(repos=[L2])
        cp = pr.cp(L2)
        token = cp["callback_token"]
        self.assertTrue(token.startswith("v1."), cp)
        event = self.event_file(cp)
        p = self.run_action({"status": "in_progress", "dry-run": "true",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0], "::add-mask::" + token)  # the runner hides it from now on
        self.assertEqual([l for l in lines if token in l], [lines[0]])
        body = json.loads(lines[-1])
        self.assertEqual(body["callback_token"], "[REDACTED]")
        self.assertEqual(self.front.recorded() + self.tokens.recorded(), [])
        # Sent for real, the token is in the body and nowhere in the output but the mask line.
        p = self.run_action({"status": "in_progress",
                             "callback-url": self.front.url + "/github/callback"}, event)
        self.assert_ok(p)
        self.assertEqual([l for l in p.stdout.splitlines() if token in l],
                         ["::add-mask::" + token])
        self.assertEqual(json.loads(self.front.callbacks()[0].body)["callback_token"], token)


class HookedFront(FrontProxy):
    """A FrontProxy that calls hook(rec, status, body) with the relay's answer before it
    passes the answer on, and keeps the answer's headers (rec.answer_headers)."""

    hook = None

    def handle(self, rec):
        status, headers, body = super().handle(rec)
        rec.answer_headers = dict(headers)
        if self.hook:
            self.hook(rec, status, body)
        return status, headers, body


class ActionMetadataTest(unittest.TestCase):
    """action.yml is a JavaScript action on the runner's Node, nothing else."""

    def test_action_yml_is_a_node24_action_without_shell_steps(self):
        text = ACTION_YML.read_text(encoding="utf-8")
        runs = text[text.index("\nruns:"):]
        self.assertRegex(runs, r"\n  using: node24\n")
        self.assertRegex(runs, r"\n  main: action/report\.js\n")
        self.assertNotRegex(text, r"(?m)^\s*(- )?(run|steps|shell|uses):")
        for banned in ("composite", "apt-get", "sudo", "npm", "node_modules"):
            self.assertNotIn(banned, text)
        self.assertTrue(ACTION_JS.is_file())
        js = ACTION_JS.read_text(encoding="utf-8")
        self.assertIn("'use strict';", js)
        requires = set(re.findall(r"require\('([^']+)'\)", js))
        self.assertTrue(requires <= {"node:fs", "node:http", "node:https", "node:net",
                                     "node:tls"}, requires)
        self.assertFalse((ACTION_JS.parent / "node_modules").exists())

    def test_inputs_keep_the_upstream_names_and_defaults(self):
        text = ACTION_YML.read_text(encoding="utf-8")
        # Upstream's names and defaults, but max-time: 120, not 10, so that the relay's
        # Retry-After (up to 60 s) fits (docs/downstream.md, "Retries are safe").
        upstream = {"status": None, "conclusion": "''", "delivery-id": "''",
                    "event-type": "''", "test-results": "''",
                    "callback-url": "'%s'" % UPSTREAM_DEFAULT_URL, "artifact-url": "''",
                    "max-time": "'120'", "job-name": "${{ github.job }}"}
        for name, default in upstream.items():
            with self.subTest(input=name):
                m = re.search(r"\n  %s:\n(?:    .*\n|      .*\n)*?    required: (\w+)\n"
                              r"(?:    default: (.*)\n)?" % re.escape(name), text)
                self.assertTrue(m, name)
                self.assertEqual(m.group(1), "true" if default is None else "false")
                self.assertEqual(m.group(2), default)


if __name__ == "__main__":
    unittest.main()
