"""End-to-end tests of `crcr report`, the downstream side of the callback.

The real binary runs with a fake GitHub Actions environment against one local HTTP server that
plays both the Actions OIDC token endpoint (ACTIONS_ID_TOKEN_REQUEST_URL) and the relay's
callback endpoint. The body it sends must be byte-for-byte what the upstream action's
report_callback.py sends for the same inputs (so a downstream can switch), and the retry rules
(429 + Retry-After, 5xx, time budget) must hold. `crcr report` runs on a test clock
(testclock.py): each "retrying in N s" it announces moves the clock N s, which ends that wait at
once; the retry times are checked on that clock.

Needs CRCR_BIN (the crcr binary); see tests/support/README.md.
"""

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import unittest
import urllib.parse
import uuid
from datetime import datetime, timezone

import relay as R
from testclock import TestClock

REQUEST_TOKEN = "actions-request-token-5f0c1e7d9a"  # ACTIONS_ID_TOKEN_REQUEST_TOKEN
# A JWT-shaped token (never verified here: the fake relay only compares it).
FAKE_JWT = ("eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ."
            "eyJyZXBvc2l0b3J5IjoiYWNtZS9hY2NlbCIsImF1ZCI6InB5dG9yY2gifQ."
            "c2lnbmF0dXJlLW5vdC1jaGVja2VkLWhlcmU")
AUDIENCE = "pytorch-cross-repo-ci-relay"
ISO_SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


class Recorded:
    def __init__(self, method, path, query, headers, body, clock):
        self.method, self.path, self.query = method, path, query
        self.headers, self.body = headers, body
        self.time = clock.now()  # arrival on the report's clock


class FakeActionsAndRelay:
    """One loopback server: GET /token (OIDC mint) and POST /github/callback (the relay).

    `callback_answers` is a list of (status, headers, body) the callback endpoint answers in
    turn; when it runs out, 200 {"ok": true, ...}. `token_answer` overrides the token endpoint.
    """

    def __init__(self, clock):
        self.clock = clock
        self.requests = []
        self.callback_answers = []
        self.token_answer = None
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status, body, headers=None):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _record(self, body):
                u = urllib.parse.urlsplit(self.path)
                rec = Recorded(self.command, u.path, urllib.parse.parse_qs(u.query),
                               {k.lower(): v for k, v in self.headers.items()}, body, outer.clock)
                with outer.lock:
                    outer.requests.append(rec)
                return rec

            def do_GET(self):
                rec = self._record(b"")
                if rec.path != "/token":
                    return self._answer(404, {"detail": "Not Found"})
                if outer.token_answer:
                    return self._answer(*outer.token_answer)
                if rec.headers.get("authorization") != "bearer " + REQUEST_TOKEN:
                    return self._answer(401, {"message": "bad request token"})
                if rec.query.get("audience") != [AUDIENCE] or \
                        rec.query.get("api-version") != ["2.0"]:
                    return self._answer(400, {"message": "bad query %r" % rec.query})
                return self._answer(200, {"value": FAKE_JWT})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                rec = self._record(self.rfile.read(n))
                if rec.path != "/github/callback":
                    return self._answer(404, {"detail": "Not Found"})
                with outer.lock:
                    answer = outer.callback_answers.pop(0) if outer.callback_answers else None
                if answer:
                    return self._answer(answer[0], answer[2], answer[1])
                status = json.loads(rec.body)["workflow"]["status"]
                return self._answer(200, {"ok": True, "status": status})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def callbacks(self):
        with self.lock:
            return [r for r in self.requests if r.path == "/github/callback"]

    def mints(self):
        with self.lock:
            return [r for r in self.requests if r.path == "/token"]


def upstream_body(client_payload, env, status, conclusion="", test_results="", artifact_url="",
                  check_run_id="", delivery_id="", event_type="", now="NOW"):
    """The body report_callback.py (pytorch/test-infra, cross-repo-ci-relay-callback) builds
    for the same inputs, with its clock replaced by `now`. For self-report the brief and the
    reference spec have started_at set too."""
    delivery_id, event_type = delivery_id.strip(), event_type.strip()
    self_report = bool(delivery_id and event_type)
    conclusion = conclusion.strip() or None
    if status == "in_progress":
        conclusion = None
    if self_report:
        cp = {"event_type": event_type, "delivery_id": delivery_id,
              "payload": {"repository": {"full_name": "pytorch/pytorch"},
                          "head_sha": delivery_id}}
    else:
        cp = json.loads(json.dumps(client_payload))  # toJson(...) then json.loads
    check_run_id = check_run_id.strip() or "%s-%s" % (env["GITHUB_RUN_ID"],
                                                      env["GITHUB_RUN_ATTEMPT"])
    workflow = {
        "schema_version": "1",
        "status": status,
        "conclusion": conclusion,
        "name": env["GITHUB_WORKFLOW"],
        "url": "%s/%s/actions/runs/%s" % (env.get("GITHUB_SERVER_URL", "https://github.com"),
                                          env["GITHUB_REPOSITORY"], env["GITHUB_RUN_ID"]),
        "run_attempt": env["GITHUB_RUN_ATTEMPT"],
        "job_name": env["JOB_NAME"],
        "check_run_id": check_run_id,
        "run_id": str(env["GITHUB_RUN_ID"]),
        "started_at": now if (status == "in_progress" or self_report) else None,
        "completed_at": None if status == "in_progress" else now,
    }
    if test_results.strip():
        workflow["test_results"] = json.loads(test_results)
    if artifact_url.strip():
        workflow["artifact_url"] = artifact_url.strip()
    cp["workflow"] = workflow
    return json.dumps(cp).encode()


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.bin = R.crcr_bin()
        self.tmp = tempfile.mkdtemp(prefix="crcr-e2e-report-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.clock = TestClock(self.tmp)
        self.addCleanup(self.clock.close)
        self.fake = FakeActionsAndRelay(self.clock)
        self.fake.start()
        self.addCleanup(self.fake.stop)
        try:
            pr = R.load_example_obj("pull_request.opened")
        except OSError:
            pr = {"action": "opened", "number": 1,
                  "pull_request": {"head": {"sha": "a" * 40}},
                  "repository": {"full_name": "pytorch/pytorch"}}
        # What the relay dispatches: its three fields plus crcr's callback token, and a field
        # with text json.dumps must escape.
        self.client_payload = {
            "event_type": "pull_request",
            "delivery_id": str(uuid.uuid4()),
            "payload": pr,
            "callback_token": "v1.0123456789abcdef0123456789abcdef",
            "note": "caf\u00e9 \u2713 \U0001F600 \x7f \"quoted\" \\ /",
        }
        event = {"action": "pull_request", "branch": "main",
                 "client_payload": self.client_payload,
                 "repository": {"full_name": "acme/accel"}, "sender": {"login": "relay[bot]"}}
        self.event_path = os.path.join(self.tmp, "event.json")
        with open(self.event_path, "w", encoding="utf-8") as f:
            json.dump(event, f, ensure_ascii=False)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if k in R._KEEP_ENV or k.startswith(R._KEEP_PREFIXES)}
        env.update({
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_PATH": self.event_path,
            "GITHUB_RUN_ID": "16549876543",
            "GITHUB_RUN_ATTEMPT": "2",
            "GITHUB_WORKFLOW": "PyTorch CI",
            "GITHUB_JOB": "build",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "acme/accel",
            "ACTIONS_ID_TOKEN_REQUEST_URL": self.fake.url + "/token?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "CRCR_CALLBACK_URL": self.fake.url + "/github/callback/",
        })
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def run_report(self, args, env=None, timeout=60):
        """Runs `crcr report` on the test clock; every wait it announces on stderr ("retrying
        in N s") is ended by moving the clock N s. The result has returncode, stdout, stderr."""
        env = dict(env or self.env(), **self.clock.env())
        proc = subprocess.Popen([self.bin, "report"] + list(args), env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = []

        def pump():
            for line in proc.stderr:
                err.append(line)
                m = re.search(r"retrying in (\d+) s", line)
                if m:
                    self.clock.advance(int(m.group(1)))

        t = threading.Thread(target=pump)
        t.start()
        try:
            out = proc.stdout.read()
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            t.join()
        p = subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(err))
        if "unknown command" in p.stderr:
            self.fail("crcr does not dispatch 'report' to report_main yet: " + p.stderr[:200])
        self.assertNotIn(FAKE_JWT, p.stdout + p.stderr, "OIDC token printed")
        self.assertNotIn(REQUEST_TOKEN, p.stdout + p.stderr, "request token printed")
        return p

    def expected(self, received, env, **kw):
        """upstream_body() with the clock value crcr used (read from what it sent)."""
        wf = json.loads(received)["workflow"]
        now = wf["started_at"] or wf["completed_at"]
        self.assertRegex(now, ISO_SECONDS)
        sent = datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        self.assertLess(abs(self.clock.now() - sent.timestamp()), 30)  # the report's clock
        env = dict(env, JOB_NAME=kw.pop("job_name", env.get("GITHUB_JOB")))
        return upstream_body(self.client_payload, env, now=now, **kw)

    def assert_authenticated(self, rec):
        self.assertEqual(rec.method, "POST")
        self.assertEqual(rec.headers.get("authorization"), "Bearer " + FAKE_JWT)
        self.assertEqual(rec.headers.get("content-type"), "application/json")

    def test_in_progress_body_is_what_upstream_action_sends(self):
        env = self.env()
        p = self.run_report(["--status", "in_progress"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("crcr report: HTTP 200", p.stdout)
        mints = self.fake.mints()
        self.assertEqual(len(mints), 1)
        self.assertEqual(mints[0].headers.get("authorization"), "bearer " + REQUEST_TOKEN)
        self.assertEqual(mints[0].query.get("audience"), [AUDIENCE])
        cbs = self.fake.callbacks()
        self.assertEqual(len(cbs), 1)
        self.assert_authenticated(cbs[0])
        self.assertEqual(cbs[0].body, self.expected(cbs[0].body, env, status="in_progress"))
        wf = json.loads(cbs[0].body)["workflow"]
        self.assertIsNone(wf["conclusion"])
        self.assertIsNone(wf["completed_at"])
        self.assertEqual(json.loads(cbs[0].body)["callback_token"],
                         self.client_payload["callback_token"])

    def test_completed_with_all_options_is_what_upstream_action_sends(self):
        env = self.env(CRCR_CHECK_RUN_ID="48151623420")
        results = '{"passed": 50, "failed": 1, "skipped": 2, "total": 53}'
        art = "https://example.com/artifacts/\u00fcber"
        p = self.run_report(["--status", "completed", "--conclusion", "failure",
                             "--job-name", "test-cuda12", "--test-results", results,
                             "--artifact-url", art], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        cbs = self.fake.callbacks()
        self.assertEqual(len(cbs), 1)
        self.assert_authenticated(cbs[0])
        self.assertEqual(cbs[0].body, self.expected(
            cbs[0].body, env, status="completed", conclusion="failure", job_name="test-cuda12",
            test_results=results, artifact_url=art, check_run_id="48151623420"))

    def test_nightly_self_report_needs_no_dispatch_event(self):
        sha = "0123456789abcdef0123456789abcdef01234567"
        env = self.env(GITHUB_EVENT_PATH=None)
        p = self.run_report(["--status", "completed", "--conclusion", "success",
                             "--delivery-id", sha, "--event-type", "nightly"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        cbs = self.fake.callbacks()
        self.assertEqual(len(cbs), 1)
        self.assertEqual(cbs[0].body, self.expected(
            cbs[0].body, env, status="completed", conclusion="success", delivery_id=sha,
            event_type="nightly"))

    def test_429_with_retry_after_is_retried_after_the_wait_and_succeeds(self):
        self.fake.callback_answers = [
            (429, {"Retry-After": "1"}, {"detail": "rate limit exceeded for acme/accel"})]
        p = self.run_report(["--status", "in_progress"])
        self.assertEqual(p.returncode, 0, p.stderr)
        cbs = self.fake.callbacks()
        self.assertEqual(len(cbs), 2, p.stderr)
        self.assertGreaterEqual(cbs[1].time - cbs[0].time, 1.0)
        self.assertEqual(cbs[0].body, cbs[1].body)  # the same callback, re-sent
        self.assert_authenticated(cbs[1])
        self.assertIn("HTTP 429", p.stderr)
        self.assertIn("crcr report: HTTP 200", p.stdout)

    def test_retry_after_is_honoured_over_the_default_backoff(self):
        # The first default wait is 1 s; Retry-After: 2 must win.
        self.fake.callback_answers = [(503, {"Retry-After": "2"}, {"detail": "busy"})]
        p = self.run_report(["--status", "in_progress"])
        self.assertEqual(p.returncode, 0, p.stderr)
        cbs = self.fake.callbacks()
        self.assertEqual(len(cbs), 2, p.stderr)
        self.assertGreaterEqual(cbs[1].time - cbs[0].time, 2.0)

    def test_400_fails_at_once_with_the_relays_detail(self):
        # A relay (or a proxy) that echoes the credential must not make crcr print it.
        detail = {"detail": "callback rejected: no matching dispatch record (auth Bearer %s)"
                  % FAKE_JWT}
        self.fake.callback_answers = [(400, {}, detail)]
        p = self.run_report(["--status", "in_progress"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("Error: Callback server returned HTTP 400.", p.stderr)
        self.assertIn("callback rejected: no matching dispatch record", p.stderr)
        self.assertEqual(len(self.fake.callbacks()), 1)  # 4xx is not retried

    def test_5xx_is_retried_until_the_time_budget_is_spent(self):
        self.fake.callback_answers = [(503, {}, {"detail": "store unavailable"})] * 10
        p = self.run_report(["--status", "in_progress", "--max-time", "3"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("Error: Callback server returned HTTP 503.", p.stderr)
        cbs = self.fake.callbacks()
        # attempts at about 0 s and 1 s; the next wait (2 s) would end after the 3 s budget, so
        # it gives up without waiting it: the only wait was the first one's 1 s
        self.assertEqual(len(cbs), 2, p.stderr)
        self.assertGreaterEqual(cbs[1].time - cbs[0].time, 1.0)
        self.assertIn("giving up (--max-time 3 s)", p.stderr)
        self.assertEqual(self.clock.offset_ms, 1000)

    def test_connection_errors_are_retried_within_the_budget(self):
        dead = "http://127.0.0.1:%d/github/callback" % R.free_port()  # nobody listens
        p = self.run_report(["--status", "in_progress", "--callback-url", dead,
                             "--max-time", "2"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("retrying in 1 s", p.stderr)
        self.assertIn("Error: callback request failed", p.stderr)
        # One wait of 1 s, then the budget is spent (the next wait would pass it).
        self.assertEqual(p.stderr.count("retrying in"), 1, p.stderr)
        self.assertEqual(self.clock.offset_ms, 1000)

    def test_an_unreachable_relay_is_named_with_where_its_url_came_from(self):
        dead = "http://127.0.0.1:%d/github/callback" % R.free_port()  # nobody listens
        p = self.run_report(["--status", "in_progress", "--callback-url", dead,
                             "--max-time", "1"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("is the relay reachable at %s? (the URL came from --callback-url)" % dead,
                      p.stderr)
        p = self.run_report(["--status", "in_progress", "--max-time", "1"],
                            self.env(CRCR_CALLBACK_URL=dead))
        self.assertEqual(p.returncode, 1)
        self.assertIn("POST %s (in_progress" % dead, p.stderr)
        self.assertIn("is the relay reachable at %s? (the URL came from CRCR_CALLBACK_URL)"
                      % dead, p.stderr)
        # No URL at all: said before anything is sent (crcr report has no default relay).
        before = len(self.fake.requests)
        p = self.run_report(["--status", "in_progress"], self.env(CRCR_CALLBACK_URL=None))
        self.assertEqual(p.returncode, 2)
        self.assertIn("no callback URL: give --callback-url or set CRCR_CALLBACK_URL", p.stderr)
        self.assertEqual(len(self.fake.requests), before)

    def test_missing_oidc_variables_explain_the_permission(self):
        env = self.env(ACTIONS_ID_TOKEN_REQUEST_URL=None, ACTIONS_ID_TOKEN_REQUEST_TOKEN=None)
        p = self.run_report(["--status", "in_progress"], env)
        self.assertEqual(p.returncode, 1)
        self.assertIn("OIDC token request variables are missing", p.stderr)
        self.assertIn("id-token: write", p.stderr)
        self.assertEqual(self.fake.requests, [])

    def test_token_endpoint_refusal_fails_without_calling_the_relay(self):
        self.fake.token_answer = (403, {"message": "Forbidden"})
        p = self.run_report(["--status", "in_progress"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("HTTP 403", p.stderr)
        self.assertEqual(self.fake.callbacks(), [])

    def test_dry_run_prints_the_body_and_sends_nothing(self):
        env = self.env()
        p = self.run_report(["--status", "in_progress", "--dry-run"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.fake.requests, [])
        head, _, body = p.stdout.partition("\n")
        self.assertIn(self.fake.url + "/github/callback", head)
        body = body.rstrip("\n").encode()
        self.assertEqual(body, self.expected(body, env, status="in_progress"))

    def test_usage_errors_exit_2_before_any_request(self):
        cases = [
            ["--status", "completed"],  # no conclusion
            ["--status", "queued"],
            ["--status", "completed", "--conclusion", "success", "--event-type", "nightly"],
            ["--status", "in_progress", "--delivery-id", "abc", "--event-type", "nightly"],
            ["--status", "completed", "--conclusion", "success", "--test-results", "{nope"],
            ["--status", "in_progress", "--callback-url", "http://relay.example/github/callback"],
            ["--status", "in_progress", "--max-time", "0"],
            ["--status", "completed", "--conclusion", "sucess"],  # none of GitHub's words
            ["--status", "in_progress", "--callback-url",
             self.fake.url.replace("://", "://user:pw@") + "/github/callback"],
            ["--bogus"],
        ]
        for args in cases:
            with self.subTest(args=args):
                p = self.run_report(args)
                self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(self.fake.requests, [])

    def test_event_without_client_payload_is_an_error(self):
        with open(self.event_path, "w", encoding="utf-8") as f:
            json.dump({"ref": "refs/heads/main", "after": "b" * 40}, f)
        p = self.run_report(["--status", "in_progress"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("client_payload", p.stderr)
        self.assertEqual(self.fake.requests, [])


if __name__ == "__main__":
    unittest.main()
