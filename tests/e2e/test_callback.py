"""End-to-end callbacks (POST /github/callback) of the real relay: core flow and state machine.

Each stack is the real `crcr serve` in App mode against three loopback fakes:
  - FakeGitHub (tests/support/fakegh.py): the App is installed everywhere (also on
    pytorch/pytorch, so check runs and re-runs reach it); records dispatches and check runs;
  - OIDCIssuer (tests/support/oidc_issuer.py): serves /.well-known/jwks and mints the RS256 ID
    tokens a downstream workflow would get (CRCR_OIDC_ISSUERS=<its url>);
  - FakeHUD (tests/support/fakehud.py): the external HUD API (HUD_API_URL, HUD_BOT_KEY).
A test opens a PR (signed pull_request webhook), takes each downstream repo's client_payload from
the dispatch the fake GitHub received - exactly what a real downstream echoes - adds the
"workflow" object the upstream callback action sends (reference §2.8) and POSTs it with a Bearer
token whose "repository" claim is that repo.

This file holds the shared harness (Stack, CallbackMixin) and covers:
  - upstream reference §3.5 (callback lambda) 1-6, §3.6 1-11 and 23-31 (handler, nightly),
    §3.7 (state machine) as black-box behaviour, §3.13 EC-03, EC-05, EC-06, STATE-04, DYNAMO-06,
    SEC-10/11/12/15/17;
  - the same in_progress and completed sent 3 times each (and 8 at once): 200s, one state change,
    one check run and one HUD forward per transition;
  - the HUD forward format and its failure modes. crcr forwards asynchronously through the
    outbox, so a HUD error never fails the callback (upstream passes HUD 4xx/5xx on to the
    downstream, which then cannot retry because the state was already committed): the tests
    assert the 200 and the outbox row's fate (4xx dead at once, 5xx retried HUD_MAX_RETRIES
    times) instead of upstream's propagation.
Mapping notes: upstream §3.5 7 (an unexpected exception -> 500) has no deterministic black-box
trigger (holding SQLite's write lock from outside gives a 503 or a reaped connection depending on
thread scheduling); upstream §3.6 10 (completed without a stored in_progress "proceeds") is a mock
artefact - the real state write refuses it (§3.7 8) - so it is tested as STATE-04; §3.6 12-22 are
in test_callback_checks.py.
Authentication and callback tokens: test_callback_auth.py. Check runs, labels and re-runs:
test_callback_checks.py. Sweeper: test_callback_sweeper.py.

Allowlist (ALLOWLIST): L1 org1/repo1; L2 org2/repo2; L3 dev: org3/repo3, org3/repo3b, other:
org5/repo5; L4 org4/repo4.
Needs CRCR_BIN; see tests/support/README.md.
"""

import copy
import json
import os
import re
import secrets
import signal
import threading
import time
import unittest
import uuid

import contract as C
import fakegh as F
import fakehud as H
import oidc_issuer as O
import relay as R
from testclock import TestClock
from waiting import wait_until

APP_ID = 424242
HUD_KEY = "hud-bot-key-e2e-7c1d"
UPSTREAM = "pytorch/pytorch"
L1, L2, L3, L3B, L3_OTHER, L4 = ("org1/repo1", "org2/repo2", "org3/repo3", "org3/repo3b",
                                 "org5/repo5", "org4/repo4")
ALLOWLIST = """\
L1:
  - org1/repo1
L2:
  - org2/repo2
L3:
  dev:
    org3/repo3: [oncall_a]
    org3/repo3b: []
  other:
    org5/repo5: []
L4:
  - org4/repo4
"""
TARGETS = sorted([L1, L2, L3, L3B, L3_OTHER, L4])
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
CHECK_RUNS_PATH = r"^/repos/pytorch/pytorch/check-runs$"


def new_sha():
    return secrets.token_hex(20)


def new_run_id():
    """A GitHub-sized run id (> 2^32), unique enough per test run."""
    return 20_000_000_000 + secrets.randbelow(10**9)


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class PR:
    """One upstream event as dispatched: delivery id, head sha, PR number and, per downstream
    repo, the client_payload the fake GitHub received."""

    def __init__(self, delivery, sha, number, payloads):
        self.delivery, self.sha, self.number, self.payloads = delivery, sha, number, payloads

    def cp(self, repo):
        return copy.deepcopy(self.payloads[repo])


class Stack:
    """Fake GitHub + OIDC issuer + fake HUD + the relay, on one clock (`clock`, a TestClock the
    test moves: the relay's timers, the fake GitHub's token and JWT times and the issuer's token
    times all read it). `env` extends/overrides the relay environment (None removes a variable).
    `extra_issuers` more GitHub-kind issuers, `buildkite_issuers` Buildkite-kind ones
    (CRCR_OIDC_ISSUERS entries buildkite=URL); `gh_files` {(owner/repo, path, ref): text} the fake
    GitHub serves from the start; `allowlist_url` serves the allowlist from the fake GitHub at
    that path of UPSTREAM's main branch and gives the relay its blob URL (ALLOWLIST_URL, on the
    fake's web host)."""

    def __init__(self, env=None, allowlist=ALLOWLIST, hud=True, issuer_keys=None, gh_kw=None,
                 extra_issuers=0, buildkite_issuers=0, gh_files=None, allowlist_url=None):
        self.env_extra = dict(env or {})
        self.allowlist = allowlist
        self.want_hud = hud
        self.issuer_keys = issuer_keys
        self.gh_kw = gh_kw or {}
        self.n_extra_issuers = extra_issuers
        self.n_buildkite_issuers = buildkite_issuers
        self.gh_files = dict(gh_files or {})
        self.allowlist_url = allowlist_url
        self.gh = self.issuer = self.hud = self.relay = None
        self.extra_issuers = []
        self.buildkite_issuers = []
        self.clock = TestClock()

    def start(self):
        try:
            with open(R.APP_PUB, encoding="ascii") as f:
                self.gh = F.FakeGitHub(app_id=APP_ID, public_key=f.read(), clock=self.clock,
                                       **self.gh_kw).start()
            for (repo, path, ref), text in self.gh_files.items():
                self.gh.set_file(repo, path, ref, text)
            # On GitHub Enterprise Server (CRCR_GITHUB_FLAVOR=ghes-*) the Actions issuer is
            # https://HOST/_services/token: the loopback issuer takes that path.
            self.issuer = O.OIDCIssuer(keys=self.issuer_keys,
                                       path=O.ACTIONS_GHES_PATH if self.gh.api_prefix
                                       else "", clock=self.clock).start()
            self.extra_issuers = [O.OIDCIssuer(keys={"x%d" % i: R.APP_KEY},
                                               clock=self.clock).start()
                                  for i in range(self.n_extra_issuers)]
            self.buildkite_issuers = [O.OIDCIssuer(keys={"bk%d" % i: R.OIDC_KEY},
                                                   clock=self.clock).start()
                                      for i in range(self.n_buildkite_issuers)]
            if self.want_hud:
                self.hud = H.FakeHUD(bot_key=HUD_KEY).start()
            env = {
                "GITHUB_APP_ID": str(APP_ID),
                "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
                "GITHUB_API_URL": self.gh.url,
                "CRCR_RETRY_BASE_MS": "100",
                "CRCR_RETRY_MAX_MS": "400",
                "CRCR_OIDC_ISSUERS": ",".join([self.issuer.url] +
                                              [i.url for i in self.extra_issuers] +
                                              ["buildkite=" + i.url
                                               for i in self.buildkite_issuers]),
                "RATE_LIMIT_PER_MIN": "10000",
                "HUD_MAX_RETRIES": "3",
            }
            if self.hud:
                env.update({"HUD_API_URL": self.hud.url, "HUD_BOT_KEY": HUD_KEY})
            if self.allowlist_url:
                self.gh.set_file(UPSTREAM, self.allowlist_url, "main", self.allowlist)
                env.update({"ALLOWLIST_FILE": None,
                            "ALLOWLIST_URL": self.gh.blob_url(UPSTREAM, "main",
                                                              self.allowlist_url)})
            env.update(self.env_extra)
            self.relay = R.Relay(env=env, allowlist=None if self.allowlist_url
                                 else self.allowlist, clock=self.clock)
            self.relay.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        """Stops everything; then raises the fake GitHub's ContractViolation, if any."""
        violation = None
        for thing in ([self.relay, self.hud, self.gh, self.issuer] + self.extra_issuers +
                      self.buildkite_issuers):
            if thing is None:
                continue
            try:
                thing.close() if thing is self.relay else thing.stop()
            except C.ContractViolation as e:
                violation = e
            except Exception:  # cleanup must go on
                pass
        self.clock.close()
        if violation is not None:
            raise violation

    def diag(self, n=25):
        reqs = self.gh.requests()[-15:] if self.gh else []
        lines = ["%s %s -> %s%s" % (r.method, r.path, r.status, " (%s)" % r.note if r.note else "")
                 for r in reqs]
        hud = ["%s %s -> %s" % (r.method, r.path, r.status)
               for r in (self.hud.requests()[-10:] if self.hud else [])]
        return ("\nlast fake GitHub requests:\n  %s\nlast HUD requests:\n  %s\nrelay log:\n%s"
                % ("\n  ".join(lines), "\n  ".join(hud),
                   self.relay.log_tail(n) if self.relay else ""))


class CallbackMixin:
    """Helpers over self.s (a started Stack). Mixed into unittest.TestCase subclasses."""

    STACK_ENV = None  # per-class relay environment of the shared stack
    STACK_KW = {}  # other Stack() arguments of the shared stack

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s = Stack(env=cls.STACK_ENV, **cls.STACK_KW).start()
        cls.addClassCleanup(cls.s.close)

    def tearDown(self):
        self.s.gh.clear_faults()
        if self.s.hud:
            self.s.hud.clear_faults()
        self.assertTrue(self.s.relay.running(), "relay died; log:\n" + self.s.relay.log_tail())
        super().tearDown()

    def own_stack(self, **kw):
        """A private stack for this test (different environment)."""
        s = Stack(**kw)
        self.addCleanup(s.close)
        self.s = s.start()
        return s

    def diag(self):
        return self.s.diag()

    # ------------------------------------------------------------ upstream events

    def open_pr(self, labels=(), action="opened", sha=None, number=None, delivery=None,
                repos=None):
        """Sends a pull_request webhook (example with head sha, number and labels replaced) and
        waits until the fake GitHub received the dispatch to every repo in `repos` (default:
        every target). Returns a PR."""
        obj = R.load_example_obj("pull_request." + action)
        sha = sha or new_sha()
        number = number or 1000 + secrets.randbelow(900000)
        obj["number"] = number
        obj["pull_request"]["number"] = number
        obj["pull_request"]["head"]["sha"] = sha
        tmpl = obj["pull_request"]["labels"][0] if obj["pull_request"]["labels"] else {}
        obj["pull_request"]["labels"] = [dict(tmpl, id=7000 + i, name=n) for i, n in
                                         enumerate(labels)]
        return self._dispatch("pull_request", obj, sha, number, delivery, repos)

    def push(self, sha=None, repos=None):
        obj = R.load_example_obj("push")
        sha = sha or new_sha()
        obj["after"] = sha
        obj["head_commit"]["id"] = sha
        return self._dispatch("push", obj, sha, 0, None, repos)

    def _dispatch(self, event, obj, sha, number, delivery, repos):
        r = self.s.relay.webhook(event, R.compact(obj), delivery=delivery)
        self.assertEqual(r.status, 202, "%s: %r%s" % (event, r.body[:300], self.diag()))
        want = set(repos or TARGETS)

        def got():
            out = {d["repo"]: d["client_payload"] for d in self.s.gh.dispatches()
                   if d["client_payload"].get("delivery_id") == r.delivery}
            return out if want <= set(out) else None

        payloads = wait_until(got, 60.0)  # bounds a broken relay only
        self.assertTrue(payloads, "dispatches of %s never reached %s%s"
                        % (r.delivery, sorted(want), self.diag()))
        return PR(r.delivery, sha, number, payloads)

    def webhook(self, event, obj, delivery=None):
        return self.s.relay.webhook(event, R.compact(obj) if not isinstance(obj, bytes) else obj,
                                    delivery=delivery)

    # ------------------------------------------------------------ callbacks

    @staticmethod
    def body(cp, status, /, conclusion=None, run_id=99999, run_attempt=1, job_name="build",
             name="CI", **extra):
        """The upstream action's body: the echoed client_payload plus "workflow" (reference
        §2.8; ids as strings). run_attempt/job_name None leave the field out; `extra` sets more
        workflow fields, or overrides one (None removes it)."""
        b = copy.deepcopy(cp)
        now = utc_now()
        crid = run_id * 10 + 7 if isinstance(run_id, int) else 1234567
        wf = {
            "schema_version": "1",
            "status": status,
            "conclusion": (conclusion or "success") if status == "completed" else None,
            "name": name,
            "url": "https://github.com/%s/actions/runs/%s" % ("org/repo", run_id),
            "run_id": str(run_id) if isinstance(run_id, int) else run_id,
            "run_attempt": str(run_attempt),
            "job_name": job_name,
            "check_run_id": str(crid),
            "started_at": now if status == "in_progress" else None,
            "completed_at": now if status == "completed" else None,
        }
        if run_attempt is None:
            del wf["run_attempt"]
        if job_name is None:
            del wf["job_name"]
        for k, v in extra.items():
            if v is None:
                wf.pop(k, None)
            else:
                wf[k] = v
        b["workflow"] = wf
        return b

    def post_callback(self, repo, body, token=None, headers=None):
        """POSTs `body` (object, str or bytes) with a valid token for `repo` (or `token`; "" for
        none). Returns Resp."""
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode("utf-8")
        else:
            data = R.compact(body)
        h = {"Content-Type": "application/json", "User-Agent": "curl/8.5.0"}
        if token is None:
            token = self.s.issuer.token(repo)
        if token:
            h["Authorization"] = "Bearer " + token
        h.update(headers or {})
        return self.s.relay.post("/github/callback", data, h)

    def cb(self, repo, pr, status, **kw):
        """Builds the body for `repo` from its dispatched payload and posts it."""
        token = kw.pop("token", None)
        return self.post_callback(repo, self.body(pr.cp(repo), status, **kw), token=token)

    def assertDetail(self, resp, status, detail=None, contains=None):
        self.assertEqual(resp.status, status, "%r%s" % (resp.body[:400], self.diag()))
        self.assertTrue(resp.headers.get("content-type", "").startswith("application/json"))
        doc = json.loads(resp.body)
        if detail is not None:
            self.assertEqual(doc, {"detail": detail})
        if contains is not None:
            self.assertIn(contains, doc.get("detail", ""))
        return doc

    def assertOk(self, resp, status, duplicate=False):
        want = {"ok": True, "status": status}
        if duplicate:
            want["duplicate"] = True
        self.assertEqual(resp.status, 200, "%r%s" % (resp.body[:400], self.diag()))
        self.assertEqual(json.loads(resp.body), want)

    def progress(self, repo, pr, **kw):
        """in_progress then completed for one job; both must be accepted."""
        self.assertOk(self.cb(repo, pr, "in_progress", **kw), "in_progress")
        self.assertOk(self.cb(repo, pr, "completed", **kw), "completed")

    # ------------------------------------------------------------ observations

    def outbox(self, delivery, kind=None):
        """Outbox rows of `delivery` (from `crcr deliveries show --format json`)."""
        rc, out, err = self.s.relay.cli(["deliveries", "show", delivery, "--format", "json"])
        self.assertEqual(rc, 0, "deliveries show %s: rc %d %s %s" % (delivery, rc, out, err))
        rows = json.loads(out)["outbox"]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def hud_for(self, delivery, repo=None):
        """HUD bodies accepted for `delivery` (and `repo`), oldest first."""
        return [b for b in self.s.hud.results()
                if b["untrusted"]["callback_payload"].get("delivery_id") == delivery
                and (repo is None or b["trusted"]["verified_repo"] == repo)]

    def wait_hud(self, delivery, n, repo=None, timeout=10.0, step=0.0):
        """Waits for `n` HUD forwards of `delivery`; with `step`, each poll without them moves the
        clock `step` s (forwards waiting out a retry backoff become due)."""
        got = wait_until(lambda: (lambda x: x if len(x) >= n else None)(
            self.hud_for(delivery, repo)), timeout, clock=self.s.clock, step=step)
        self.assertTrue(got, "HUD got %d of %d forwards for %s%s"
                        % (len(self.hud_for(delivery, repo)), n, delivery, self.diag()))
        return got

    def hud_status(self, delivery, status, repo=None, timeout=10.0):
        """The one HUD forward of `delivery` whose workflow.status is `status`, waiting for it.
        (Forwards are independent outbox rows: their arrival order is not the callback order.)"""
        def got():
            x = [b for b in self.hud_for(delivery, repo)
                 if b["untrusted"]["callback_payload"]["workflow"].get("status") == status]
            return x or None
        found = wait_until(got, timeout)
        self.assertTrue(found, "no %s forward for %s%s" % (status, delivery, self.diag()))
        self.assertEqual(len(found), 1, "several %s forwards for %s" % (status, delivery))
        return found[0]

    def checks_for(self, sha, repo=None):
        """Check runs the fake GitHub created on pytorch/pytorch for `sha` (and downstream
        `repo`), oldest first."""
        prefix = "crcr/%s/" % repo if repo else "crcr/"
        return [c for c in self.s.gh.check_runs()
                if c["head_sha"] == sha and c["name"].startswith(prefix)]

    def wait_checks(self, sha, n, repo=None, timeout=10.0, step=0.0):
        """Waits for `n` check runs of `sha` (and `repo`); with `step`, each poll without them
        moves the clock `step` s (check runs waiting out a retry backoff become due)."""
        got = wait_until(lambda: (lambda x: x if len(x) >= n else None)(
            self.checks_for(sha, repo)), timeout, clock=self.s.clock, step=step)
        self.assertTrue(got, "%d of %d check runs for %s%s"
                        % (len(self.checks_for(sha, repo)), n, sha, self.diag()))
        return got

    def settle(self, timeout=10.0, step=0.2):
        """Waits until the relay has nothing left to send: no outbox row is queued or running
        (every check run and HUD forward was made and its outcome recorded, and nothing is
        scheduled again). Each poll that finds work left moves the clock `step` s, so rows
        waiting out a retry backoff run at once."""
        if not self.s.relay.wait_outbox_idle(timeout, step):
            self.fail("the relay kept work queued%s" % self.diag())


# ============================================================================================
# reference §3.5 test_callback_handler_lambda.py


class LambdaCasesTest(CallbackMixin, unittest.TestCase):
    """Routing, body parsing before authentication, and the answer passthrough (§3.5)."""

    def test_3_5_1_other_path_404_and_get_on_callback_405(self):
        self.assertEqual(self.s.relay.post("/other", b"{}").status, 404)
        self.assertEqual(self.s.relay.post("/github/callbacks", b"{}").status, 404)
        r = self.s.relay.get("/github/callback")
        self.assertEqual(r.status, 405)

    def test_3_5_2_invalid_json_is_400_before_authentication(self):
        for data in (b"not-json", b"{", b"[1,2]", b"\"str\"", b"\xff\xfe"):
            with self.subTest(body=data):
                # Upstream's case: a bearer header that is no valid token, and a body that is no
                # JSON: 400, the JSON is looked at before the token is verified.
                r = self.post_callback(L2, data, token="not.a.token")
                self.assertDetail(r, 400, "Invalid JSON body")
                r = self.post_callback(L2, data)
                self.assertDetail(r, 400, "Invalid JSON body")
                # No bearer header at all (issue 12): answered from the headers, before the body
                # is read (upstream parsed first and said 400; no upstream test pins that).
                r = self.post_callback(L2, data, token="")
                self.assertDetail(r, 401, "Missing authorization token")
        # Duplicate keys are JSON (Python's json.loads, upstream's parser, keeps the last): only
        # validated before the token, they are refused once the caller is known.
        pr = self.open_pr(repos=[L2])
        text = json.dumps(self.body(pr.cp(L2), "in_progress"))
        dup = text[:-1] + ', "delivery_id": "other"}'
        self.assertDetail(self.post_callback(L2, dup, token="not.a.token"), 401,
                          "Invalid authorization token")
        self.assertDetail(self.post_callback(L2, dup), 400, "Invalid JSON body")
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_3_5_3_missing_authorization_is_401_missing(self):
        pr = self.open_pr(repos=[L2])
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"), token="")
        self.assertDetail(r, 401, "Missing authorization token")
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"), token="",
                               headers={"Authorization": "Bearer "})
        self.assertDetail(r, 401, contains="Missing")
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_3_5_4_failed_oidc_verification_is_401(self):
        pr = self.open_pr(repos=[L2])
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"), token="some.oidc.token")
        self.assertDetail(r, 401, "Invalid authorization token")

    def test_3_5_5_accepted_callback_answers_exactly_and_forwards_the_body_verbatim(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        # The body bytes as sent (odd spacing and key order kept) must reach the HUD verbatim.
        body = self.body(pr.cp(L2), "completed")
        raw = json.dumps(body, indent=1, sort_keys=True).encode("utf-8")
        r = self.post_callback(L2, raw)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b'{"ok":true,"status":"completed"}')
        fwd = self.hud_status(pr.delivery, "completed")
        self.assertEqual(fwd["untrusted"]["callback_payload"], body)
        req = [x for x in self.s.hud.requests() if raw in x.body]
        self.assertEqual(len(req), 1, "the callback bytes are not embedded verbatim")
        self.assertEqual(fwd["trusted"]["verified_repo"], L2)

    def test_3_5_6_hud_outage_no_longer_fails_the_callback(self):
        # Upstream passes a HUD 503 through to the downstream (which then cannot retry: the state
        # was already committed). crcr forwards through the outbox after answering, so the
        # callback is 200 and the forward is retried until the HUD is back.
        pr = self.open_pr(repos=[L2])
        # The HUD's first answer is held until the callback was answered: an answer that waited
        # for the HUD would never come.
        gate = threading.Event()
        self.addCleanup(gate.set)
        self.s.hud.fail(503, count=1, match=pr.delivery, gate=gate)
        self.s.hud.fail(503, count=1, match=pr.delivery)
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        self.assertTrue(self.s.hud.wait_held(1), "the forward never reached the HUD")
        gate.set()
        fwd = self.wait_hud(pr.delivery, 1, step=0.5)
        self.assertEqual(fwd[0]["untrusted"]["callback_payload"]["workflow"]["status"],
                         "in_progress")
        statuses = [x.status for x in self.s.hud.requests()
                    if pr.delivery.encode() in x.body]
        self.assertEqual(statuses, [503, 503, 200])
        rows = wait_until(lambda: [r for r in self.outbox(pr.delivery, "hud_forward")
                                   if r["state"] == "sent"], 10.0, 0.1)
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["attempts"], 3)


# ============================================================================================
# reference §3.6 test_callback_handler.py (1-11) and the HUD forward


class HandlerCasesTest(CallbackMixin, unittest.TestCase):

    def test_3_6_1_repo_not_in_allowlist_or_below_l2_is_ignored_without_side_effects(self):
        pr = self.open_pr(repos=[L1])
        for repo, cp in (("stranger/repo", pr.cp(L1)), (L1, pr.cp(L1))):
            with self.subTest(repo=repo):
                r = self.post_callback(repo, self.body(cp, "in_progress"))
                self.assertEqual(r.status, 200)
                self.assertEqual(json.loads(r.body), {"ok": True, "status": "ignored"})
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        self.settle()
        self.assertEqual(self.hud_for(pr.delivery), [])

    def test_3_6_2_hud_gets_the_body_as_untrusted_and_the_oidc_repo_as_trusted(self):
        pr = self.open_pr(repos=[L2])
        body = self.body(pr.cp(L2), "in_progress", job_name="ec03",
                         test_results={"passed": 1})
        self.assertOk(self.post_callback(L2, body), "in_progress")
        fwd = self.wait_hud(pr.delivery, 1)[0]
        self.assertEqual(set(fwd), {"trusted", "untrusted"})
        self.assertEqual(fwd["untrusted"], {"callback_payload": body})
        self.assertEqual(set(fwd["trusted"]),
                         {"ci_metrics", "verified_repo", "downstream_repo_level"})
        self.assertEqual(fwd["trusted"]["verified_repo"], L2)
        self.assertEqual(fwd["trusted"]["downstream_repo_level"], "L2")
        self.assertEqual(set(fwd["trusted"]["ci_metrics"]), {"queue_time", "execution_time"})
        req = [x for x in self.s.hud.requests() if pr.delivery.encode() in x.body][0]
        self.assertEqual(req.headers.get("x-hud-internal-bot"), HUD_KEY)
        self.assertTrue(req.headers.get("content-type", "").startswith("application/json"))

    def test_3_6_3_in_progress_reports_queue_time_only(self):
        t0 = time.monotonic()
        pr = self.open_pr(repos=[L2])
        self.settle()  # the dispatch's time recorded before the clock moves
        self.s.clock.advance(30)  # the job waited 30 s in a queue
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        elapsed = time.monotonic() - t0
        m = self.wait_hud(pr.delivery, 1)[0]["trusted"]["ci_metrics"]
        self.assertIsNone(m["execution_time"])
        self.assertIsInstance(m["queue_time"], (int, float))
        self.assertGreaterEqual(m["queue_time"], 30.0)
        self.assertLessEqual(m["queue_time"], 30.0 + elapsed + 1.0)

    def test_3_6_4_completed_reports_execution_time_since_in_progress(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        t0 = time.monotonic()
        self.settle()  # nothing in flight: two minutes is a lease
        self.s.clock.advance(120)  # the job ran two minutes
        self.assertOk(self.cb(L2, pr, "completed"), "completed")
        elapsed = time.monotonic() - t0
        m = self.hud_status(pr.delivery, "completed")["trusted"]["ci_metrics"]
        self.assertIsNone(m["queue_time"])
        self.assertGreaterEqual(m["execution_time"], 120.0)
        self.assertLessEqual(m["execution_time"], 120.0 + elapsed + 1.0)

    def test_3_6_5_hud_4xx_is_not_retried_and_does_not_fail_the_callback(self):
        # Upstream propagates a HUD 422 to the downstream. crcr answers before forwarding: the
        # callback is 200, the forward row is dead with the HUD's status and never retried.
        pr = self.open_pr(repos=[L2])
        self.s.hud.fail(422, count=1, match=pr.delivery)
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        row = wait_until(lambda: [r for r in self.outbox(pr.delivery, "hud_forward")
                                  if r["state"] == "dead"], 10.0, 0.1)
        self.assertTrue(row, "the hud_forward row did not die: %s"
                        % self.outbox(pr.delivery, "hud_forward"))
        self.assertEqual(row[0]["last_status"], 422)
        self.assertIn("422", row[0]["last_error"])
        self.settle()  # nothing queued again, however far the clock moves
        hits = [x for x in self.s.hud.requests() if pr.delivery.encode() in x.body]
        self.assertEqual([x.status for x in hits], [422], "a 4xx was retried")
        # The state was committed regardless: the completed transition is accepted.
        self.assertOk(self.cb(L2, pr, "completed"), "completed")

    def test_hud_5xx_is_retried_hud_max_retries_times_then_given_up(self):
        # Upstream retries HUD_MAX_RETRIES times with sleeps inside the request and then answers
        # 500. crcr retries from the outbox (HUD_MAX_RETRIES=3 here: 4 attempts) and the
        # callback answer does not depend on it.
        pr = self.open_pr(repos=[L2])
        self.s.hud.fail(502, match=pr.delivery)
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        row = wait_until(lambda: [r for r in self.outbox(pr.delivery, "hud_forward")
                                  if r["state"] == "dead"], 15.0, 0.1, self.s.clock, 0.5)
        self.assertTrue(row, "never gave up: %s" % self.outbox(pr.delivery, "hud_forward"))
        self.assertEqual((row[0]["attempts"], row[0]["last_status"]), (4, 502))
        self.assertIn("gave up after 4 attempts", row[0]["last_error"])
        self.s.hud.clear_faults()
        self.settle()  # nothing queued again, however far the clock moves
        hits = [x for x in self.s.hud.requests() if pr.delivery.encode() in x.body]
        self.assertEqual([x.status for x in hits], [502] * 4)
        self.assertOk(self.cb(L2, pr, "completed"), "completed")
        self.wait_hud(pr.delivery, 1)

    def test_a_retried_in_progress_forward_never_lands_after_the_completed_one(self):
        # The HUD writes each forward over the same row (dynamoKey; UpdateItem SET status=...):
        # the last forward to arrive is what it shows. Upstream forwards inside the callback, so
        # the order is the callback order. Here the in_progress forward fails once (a slow 502)
        # while the completed one goes through: the retried in_progress must not be delivered
        # after it, or the HUD shows the finished job as running forever.
        self.own_stack()
        pr = self.open_pr(repos=[L2])
        # The in_progress forward's 502 is held until the completed callback was answered.
        gate = threading.Event()
        self.addCleanup(gate.set)
        self.s.hud.fail(502, count=1, match=pr.delivery, gate=gate)
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="ordered"), "in_progress")
        self.assertTrue(self.s.hud.wait_held(1), "the in_progress forward never reached the HUD")
        self.assertOk(self.cb(L2, pr, "completed", job_name="ordered"), "completed")
        gate.set()
        self.wait_hud(pr.delivery, 2, step=0.5)
        self.settle()
        arrived = [b["untrusted"]["callback_payload"]["workflow"]["status"]
                   for b in self.hud_for(pr.delivery)]
        self.assertEqual(arrived[-1], "completed",
                         "HUD forwards arrived in the order %s: the HUD row ends in_progress"
                         % arrived)

    def test_without_hud_api_url_nothing_is_forwarded(self):
        self.own_stack(hud=False)
        pr = self.open_pr(repos=[L2, L4])
        self.progress(L2, pr)
        self.progress(L4, pr)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        self.assertEqual(len(self.outbox(pr.delivery, "check_run")), 2)

    def test_3_6_6_and_7_missing_required_fields_are_400(self):
        pr = self.open_pr(repos=[L2])
        cases = [
            ("delivery_id", lambda b: b.pop("delivery_id"),
             "callback body missing required field: 'delivery_id'"),
            ("workflow", lambda b: b.pop("workflow"),
             "callback body missing required field: 'workflow'"),
            ("workflow.status", lambda b: b["workflow"].pop("status"),
             "callback body missing required field: 'workflow.status'"),
            ("workflow.run_id", lambda b: b["workflow"].pop("run_id"),
             "callback body missing required field: 'workflow.run_id'"),
            ("workflow.name", lambda b: b["workflow"].pop("name"),
             "callback body missing required field: 'workflow.name'"),
        ]
        for what, edit, detail in cases:
            with self.subTest(missing=what):
                b = self.body(pr.cp(L2), "in_progress")
                edit(b)
                self.assertDetail(self.post_callback(L2, b), 400, detail)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        # Nothing was recorded: the first real in_progress is not a duplicate.
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")

    def test_3_6_6_bad_field_values_are_400_not_500(self):
        # Upstream answers 500 for a non-numeric run_id (an uncaught ValueError).
        pr = self.open_pr(repos=[L2])
        cases = [
            ({"run_id": "abc"}, "run_id"), ({"run_id": "12x"}, "run_id"),
            ({"run_id": "0"}, "run_id"), ({"run_id": -5}, "run_id"),
            ({"run_id": "1" * 40}, "run_id"), ({"run_attempt": "first"}, "run_attempt"),
            ({"run_attempt": "0"}, "run_attempt"), ({"job_name": 5}, "job_name"),
            ({"job_name": "j" * 5000}, "job_name"),
        ]
        for extra, field in cases:
            with self.subTest(extra=extra):
                b = self.body(pr.cp(L2), "in_progress", **extra)
                self.assertDetail(self.post_callback(L2, b), 400, contains=field)
        for status in ("queued", "done", "", "IN_PROGRESS"):
            with self.subTest(status=status):
                b = self.body(pr.cp(L2), "in_progress", status=status)
                self.assertDetail(self.post_callback(L2, b), 400,
                                  "unknown callback status: '%s'" % status)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_a_typo_in_the_conclusion_is_400_and_the_correct_report_follows(self):
        # Issue 24: "sucess" was stored for good (the run completed, the HUD showed it, health
        # counted a failure, GitHub refused its check run) and the correct report was refused.
        pr = self.open_pr(repos=[L4])
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="typo"), "in_progress")
        r = self.cb(L4, pr, "completed", job_name="typo", conclusion="sucess")
        self.assertDetail(r, 400, "workflow.conclusion must be one of action_required, "
                                  "cancelled, failure, neutral, success, skipped, stale, "
                                  "timed_out when status is completed, got 'sucess'")
        for bad in ("completed", "", None):
            b = self.body(pr.cp(L4), "completed", job_name="typo")
            b["workflow"]["conclusion"] = bad
            self.assertDetail(self.post_callback(L4, b), 400,
                              contains="workflow.conclusion must be one of")
        # Nothing was stored: the correct report completes the run.
        self.assertOk(self.cb(L4, pr, "completed", job_name="typo", conclusion="success"),
                      "completed")
        checks = self.wait_checks(pr.sha, 2, L4)
        self.assertEqual(sorted(c.get("conclusion") or "-" for c in checks), ["-", "success"])
        # Any case is GitHub's word, kept, shown, sent and forwarded in lower case.
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="upper"), "in_progress")
        self.assertOk(self.cb(L4, pr, "completed", job_name="upper", conclusion="Failure"),
                      "completed")
        check = wait_until(lambda: [c for c in self.checks_for(pr.sha, L4)
                                    if c["name"].endswith("/upper") and c.get("conclusion")])
        self.assertEqual(check[0]["conclusion"], "failure")
        doc = self.s.relay.get("/api/v1/pr/%d" % pr.number).json()
        (run,) = [r for s in doc["shas"] for r in s["runs"] if r["job"] == "upper"]
        self.assertEqual((run["conclusion"], run["result"]), ("failure", "failure"))
        def upper_done():
            return [b["untrusted"]["callback_payload"]["workflow"]
                    for b in self.hud_for(pr.delivery)
                    if b["untrusted"]["callback_payload"]["workflow"]["job_name"] == "upper"
                    and b["untrusted"]["callback_payload"]["workflow"]["status"] == "completed"]
        done = wait_until(upper_done)
        self.assertTrue(done, self.diag())
        self.assertEqual(done[0]["conclusion"], "failure")

    def test_links_other_than_https_are_never_stored_served_or_forwarded(self):
        pr = self.open_pr(repos=[L4])
        js = "javascript:alert(document.cookie)"
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="links", artifact_url=js,
                              url="javascript:fetch('//evil.example')"), "in_progress")
        self.assertOk(self.cb(L4, pr, "completed", job_name="links", artifact_url=js),
                      "completed")
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="ok-links"), "in_progress")
        good = "https://example.com/artifacts/1.zip"
        self.assertOk(self.cb(L4, pr, "completed", job_name="ok-links", artifact_url=good),
                      "completed")
        fwd = self.wait_hud(pr.delivery, 4)
        for b in fwd:
            wf = b["untrusted"]["callback_payload"]["workflow"]
            self.assertNotIn("javascript", json.dumps(b))
            if wf["job_name"] == "links":
                self.assertNotIn("artifact_url", wf)
            if wf["job_name"] == "links" and wf["status"] == "in_progress":
                self.assertNotIn("url", wf)
        doc = self.s.relay.get("/api/v1/pr/%d" % pr.number).json()
        self.assertNotIn("javascript", json.dumps(doc))
        arts = {r["job"]: r["artifact_url"] for s in doc["shas"] for r in s["runs"]}
        self.assertEqual(arts, {"links": None, "ok-links": good})
        page = self.s.relay.get("/crcr/pr/%d" % pr.number).body.decode("utf-8")
        self.assertNotIn("javascript", page)
        self.assertIn('href="%s"' % good, page)
        db = self.s.relay.db_path if hasattr(self.s.relay, "db_path") else None
        if db and os.path.exists(db):  # SQLite: not in the store at all (WAL included)
            for suffix in ("", "-wal"):
                if os.path.exists(db + suffix):
                    with open(db + suffix, "rb") as f:
                        self.assertNotIn(b"javascript:alert", f.read())

    def test_3_6_8_rate_limited_is_429_with_retry_after_and_no_forward(self):
        self.own_stack(env={"RATE_LIMIT_PER_MIN": "3"})
        pr = self.open_pr(repos=[L2, L4])
        for i in range(3):
            self.assertOk(self.cb(L2, pr, "in_progress", job_name="j%d" % i), "in_progress")
        r = self.cb(L2, pr, "in_progress", job_name="j3")
        self.assertDetail(r, 429, "rate limit exceeded for %s" % L2)
        retry = int(r.headers.get("retry-after", "-1"))
        self.assertTrue(1 <= retry <= 60, "Retry-After %r" % r.headers.get("retry-after"))
        # Refused callbacks are not counted, and the limit is per verified repo.
        self.assertDetail(self.cb(L2, pr, "in_progress", job_name="j4"), 429)
        self.assertOk(self.cb(L4, pr, "in_progress"), "in_progress")
        # Invalid JSON and auth failures are answered before the limit.
        self.assertDetail(self.post_callback(L2, b"nope"), 400)
        self.assertDetail(self.post_callback(L2, b"{}", token="x.y.z"), 401)
        self.wait_hud(pr.delivery, 3, repo=L2)
        self.settle()
        jobs = sorted(b["untrusted"]["callback_payload"]["workflow"]["job_name"]
                      for b in self.hud_for(pr.delivery, L2))
        self.assertEqual(jobs, ["j0", "j1", "j2"])
        # The window is a minute on the relay's clock: a minute later the repo may call again.
        self.s.clock.advance(61)
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="j5"), "in_progress")

    def test_3_6_9_no_dispatch_record_for_this_repo_is_400(self):
        self.own_stack()  # this test changes the allowlist
        pr = self.open_pr(repos=[L2])
        no_record = "callback rejected: no matching dispatch record"
        b = self.body(pr.cp(L2), "in_progress")
        b["delivery_id"] = str(uuid.uuid4())  # never received
        b.pop("callback_token")  # (with the token it would be a 403: see test_callback_auth)
        self.assertDetail(self.post_callback(L2, b), 400, no_record)
        # A repo that is allowlisted now but was not when the delivery was dispatched.
        self.s.relay.write_allowlist(ALLOWLIST.replace("  - org2/repo2\n",
                                                       "  - org2/repo2\n  - org9/late\n"))
        self.s.relay.send_signal(signal.SIGHUP)
        b = self.body(pr.cp(L2), "in_progress")
        b.pop("callback_token")
        r = wait_until(lambda: (lambda x: x if x.status != 200 else None)(
            self.post_callback("org9/late", b)), 5.0)
        self.assertTrue(r, "the allowlist reload never made org9/late L2")
        self.assertDetail(r, 400, no_record)

    def test_3_6_11_job_name_is_part_of_the_key(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="build"), "in_progress")
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="test"), "in_progress")
        self.assertOk(self.cb(L2, pr, "completed", job_name="build"), "completed")
        self.assertOk(self.cb(L2, pr, "completed", job_name="test"), "completed")
        fwd = self.wait_hud(pr.delivery, 4)
        self.assertEqual(sorted((b["untrusted"]["callback_payload"]["workflow"]["job_name"],
                                 b["untrusted"]["callback_payload"]["workflow"]["status"])
                                for b in fwd),
                         [("build", "completed"), ("build", "in_progress"),
                          ("test", "completed"), ("test", "in_progress")])

    def test_callback_without_job_name_uses_the_run_key_alone(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress", job_name=None), "in_progress")
        self.assertOk(self.cb(L2, pr, "in_progress", job_name=None), "in_progress",
                      duplicate=True)
        self.assertOk(self.cb(L2, pr, "completed", job_name=None), "completed")


# ============================================================================================
# reference §3.7 test_redis_helper.py state machine, black-box; crcr idempotency (spec §3.5)


class StateMachineTest(CallbackMixin, unittest.TestCase):

    def test_3_7_10_and_9_no_record_to_in_progress_to_completed(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        self.assertOk(self.cb(L2, pr, "completed"), "completed")
        self.assertEqual(len(self.outbox(pr.delivery, "hud_forward")), 2)

    def test_3_7_8_completed_without_in_progress_is_rejected_state_04(self):
        # STATE-04 (crcr-test): the action step fails with the relay's 400.
        pr = self.open_pr(repos=[L2])
        r = self.cb(L2, pr, "completed")
        self.assertDetail(r, 400, contains="callback rejected: invalid state transition "
                          "delivery_id=%s repo=%s status=completed" % (pr.delivery, L2))
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        # Still nothing recorded: in_progress then completed work afterwards.
        self.progress(L2, pr)

    def test_3_7_8_in_progress_after_completed_is_rejected(self):
        pr = self.open_pr(repos=[L2])
        self.progress(L2, pr)
        self.assertDetail(self.cb(L2, pr, "in_progress"), 400,
                          contains="callback rejected: invalid state transition "
                          "delivery_id=%s repo=%s status=in_progress" % (pr.delivery, L2))
        self.assertEqual(len(self.outbox(pr.delivery, "hud_forward")), 2)

    def test_3_7_8_completed_again_with_another_conclusion_is_rejected(self):
        pr = self.open_pr(repos=[L2])
        self.progress(L2, pr)  # success
        self.assertDetail(self.cb(L2, pr, "completed", conclusion="failure"), 400,
                          contains="invalid state transition")
        self.assertOk(self.cb(L2, pr, "completed"), "completed", duplicate=True)

    def test_3_7_11_reserved_run_id_0_is_rejected(self):
        pr = self.open_pr(repos=[L2])
        for status in ("in_progress", "completed"):
            self.assertDetail(self.cb(L2, pr, status, run_id=0), 400, contains="run_id")

    def test_three_times_each_gives_one_state_change_and_one_check_run_per_transition(self):
        pr = self.open_pr(repos=[L4])
        for status in ("in_progress", "completed"):
            for i in range(3):
                r = self.cb(L4, pr, status, job_name="triple")
                self.assertOk(r, status, duplicate=i > 0)
        self.assertEqual(len(self.outbox(pr.delivery, "check_run")), 2)
        self.assertEqual(len(self.outbox(pr.delivery, "hud_forward")), 2)
        checks = self.wait_checks(pr.sha, 2, L4)
        self.settle()
        checks = self.checks_for(pr.sha, L4)
        self.assertEqual(sorted((c["status"], str(c["conclusion"])) for c in checks),
                         [("completed", "success"), ("in_progress", "None")])
        fwd = self.hud_for(pr.delivery)
        self.assertEqual(sorted(b["untrusted"]["callback_payload"]["workflow"]["status"]
                                for b in fwd), ["completed", "in_progress"])

    def test_concurrent_identical_callbacks_apply_once(self):
        pr = self.open_pr(repos=[L4])
        results = []
        body = self.body(pr.cp(L4), "in_progress", job_name="race")
        tokens = [self.s.issuer.token(L4) for _ in range(8)]

        def go(tok):
            results.append(self.post_callback(L4, body, token=tok))

        threads = [threading.Thread(target=go, args=(t,)) for t in tokens]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self.assertEqual([r.status for r in results], [200] * 8)
        dup = sorted(bool(json.loads(r.body).get("duplicate")) for r in results)
        self.assertEqual(dup, [False] + [True] * 7)
        self.assertEqual(len(self.outbox(pr.delivery, "check_run")), 1)
        self.assertEqual(len(self.outbox(pr.delivery, "hud_forward")), 1)

    def test_rerun_attempt_is_a_new_key_on_the_same_dispatch(self):
        # Reference §2.3.5: a re-run echoes the old client_payload with a new run_attempt.
        pr = self.open_pr(repos=[L2])
        self.progress(L2, pr, run_attempt=1, conclusion="failure")
        self.progress(L2, pr, run_attempt=2)
        self.assertEqual(len(self.outbox(pr.delivery, "hud_forward")), 4)
        # A missing run_attempt means 1.
        self.assertOk(self.cb(L2, pr, "completed", run_attempt=None, conclusion="failure"),
                      "completed", duplicate=True)

    def test_ec_05_two_jobs_of_one_run_are_independent(self):
        pr = self.open_pr(repos=[L4])
        for job in ("ec05-multi-job-a", "ec05-multi-job-b"):
            self.assertOk(self.cb(L4, pr, "in_progress", job_name=job), "in_progress")
        for job in ("ec05-multi-job-a", "ec05-multi-job-b"):
            self.assertOk(self.cb(L4, pr, "completed", job_name=job), "completed")
        checks = self.wait_checks(pr.sha, 4, L4)
        self.assertEqual(sorted({c["name"] for c in checks}),
                         ["crcr/%s/CI/ec05-multi-job-a" % L4, "crcr/%s/CI/ec05-multi-job-b" % L4])
        self.wait_hud(pr.delivery, 4)

    def test_dynamo_06_in_progress_work_completed_gives_both_metrics_and_timestamps(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="dynamo06"), "in_progress")
        self.s.clock.advance(8)  # crcr-test sleeps 8 s
        self.assertOk(self.cb(L2, pr, "completed", job_name="dynamo06"), "completed")
        ip = self.hud_status(pr.delivery, "in_progress")
        done = self.hud_status(pr.delivery, "completed")
        self.assertIsNotNone(ip["trusted"]["ci_metrics"]["queue_time"])
        self.assertGreaterEqual(done["trusted"]["ci_metrics"]["execution_time"], 8.0)
        self.assertRegex(ip["untrusted"]["callback_payload"]["workflow"]["started_at"], ISO_Z)
        self.assertRegex(done["untrusted"]["callback_payload"]["workflow"]["completed_at"],
                         ISO_Z)

    def test_ec_03_ec_06_completed_without_test_results_and_failure_accepted(self):
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="ec06"), "in_progress")
        self.assertOk(self.cb(L2, pr, "completed", job_name="ec06", conclusion="failure"),
                      "completed")
        wf = self.hud_status(pr.delivery, "completed")["untrusted"]["callback_payload"]["workflow"]
        self.assertEqual(wf["conclusion"], "failure")
        self.assertNotIn("test_results", wf)


# ============================================================================================
# §3.13 SEC-10/11/12 (and SEC-15/17): hostile-looking but valid input is stored verbatim


class HostileInputTest(CallbackMixin, unittest.TestCase):

    def test_sec_10_11_script_in_artifact_url_is_accepted_and_forwarded_verbatim(self):
        pr = self.open_pr(repos=[L4])
        url = "https://example.com/<script>alert('xss')</script>"
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="sec10"), "in_progress")
        self.assertOk(self.cb(L4, pr, "completed", job_name="sec10", artifact_url=url),
                      "completed")
        wf = self.hud_status(pr.delivery, "completed")["untrusted"]["callback_payload"]["workflow"]
        self.assertEqual(wf["artifact_url"], url)

    def test_sec_12_job_name_with_sql_is_stored_verbatim(self):
        pr = self.open_pr(repos=[L4])
        job = "build'); DROP TABLE runs; --\"x"
        self.progress(L4, pr, job_name=job)
        checks = self.wait_checks(pr.sha, 2, L4)
        self.assertEqual({c["name"] for c in checks}, {"crcr/%s/CI/%s" % (L4, job)})
        # The store is intact: the same key is still known (duplicate), another job works.
        self.assertOk(self.cb(L4, pr, "completed", job_name=job), "completed", duplicate=True)
        self.progress(L4, pr, job_name="after-sec12")
        fwd = self.wait_hud(pr.delivery, 4)
        self.assertIn(job, [b["untrusted"]["callback_payload"]["workflow"]["job_name"]
                            for b in fwd])

    def test_sec_15_17_large_test_results_and_unicode_artifact_url_accepted(self):
        pr = self.open_pr(repos=[L2])
        results = {"passed": 10**6, "failed": 3, "skipped": 5,
                   "failures": ["test_%d::case" % i for i in range(5000)]}
        url = "https://example.com/artefacts/\u6d4b\u8bd5/\U0001f525.tar.gz"
        self.assertOk(self.cb(L2, pr, "in_progress", job_name="sec15"), "in_progress")
        self.assertOk(self.cb(L2, pr, "completed", job_name="sec15", test_results=results,
                              artifact_url=url), "completed")
        wf = self.hud_status(pr.delivery, "completed")["untrusted"]["callback_payload"]["workflow"]
        self.assertEqual(wf["test_results"], results)
        self.assertEqual(wf["artifact_url"], url)


# ============================================================================================
# reference §3.6 23-31 (nightly / periodic self-report), §2.9


class NightlyTest(CallbackMixin, unittest.TestCase):

    def nightly(self, sha, status="completed", event_type="nightly", **kw):
        cp = {"event_type": event_type, "delivery_id": sha,
              "payload": {"repository": {"full_name": UPSTREAM}, "head_sha": sha}}
        kw.setdefault("name", "CRCR Nightly CI")
        kw.setdefault("job_name", "nightly-build")
        kw.setdefault("run_id", new_run_id())
        return self.body(cp, status, **kw)

    def nightly_hud(self, sha):
        return [b for b in self.s.hud.results()
                if b["untrusted"]["callback_payload"].get("delivery_id") == sha]

    def test_3_6_23_to_25_nightly_completed_is_forwarded_unchanged_with_null_metrics(self):
        sha = new_sha()
        body = self.nightly(sha)
        self.assertOk(self.post_callback(L2, body), "completed")
        fwd = wait_until(lambda: self.nightly_hud(sha))
        self.assertEqual(len(fwd), 1, self.diag())
        self.assertEqual(fwd[0]["untrusted"]["callback_payload"], body)
        self.assertEqual(fwd[0]["trusted"], {"ci_metrics": {"queue_time": None,
                                                            "execution_time": None},
                                             "verified_repo": L2,
                                             "downstream_repo_level": "L2"})

    def test_3_6_24_nightly_needs_no_dispatch_and_makes_no_check_run_even_at_l4(self):
        sha = new_sha()
        self.assertOk(self.post_callback(L4, self.nightly(sha)), "completed")
        wait_until(lambda: self.nightly_hud(sha))
        self.settle()
        self.assertEqual(self.checks_for(sha), [])

    def test_3_6_26_periodic_is_the_same(self):
        sha = new_sha()
        body = self.nightly(sha, event_type="periodic")
        self.assertOk(self.post_callback(L2, body), "completed")
        fwd = wait_until(lambda: self.nightly_hud(sha))
        self.assertEqual(fwd[0]["untrusted"]["callback_payload"]["event_type"], "periodic")

    def test_3_6_27_nightly_in_progress_is_400_mentioning_completed(self):
        sha = new_sha()
        d = self.assertDetail(self.post_callback(L2, self.nightly(sha, status="in_progress")),
                              400)
        self.assertIn("completed", d["detail"])
        self.assertEqual(d["detail"], "nightly/periodic callbacks must have status "
                                      "'completed', got 'in_progress'")

    def test_3_6_28_nightly_from_a_repo_not_allowlisted_is_ignored(self):
        sha = new_sha()
        for repo in ("stranger/repo", L1):
            r = self.post_callback(repo, self.nightly(sha))
            self.assertEqual(json.loads(r.body), {"ok": True, "status": "ignored"})
        self.settle()
        self.assertEqual(self.nightly_hud(sha), [])

    def test_3_6_30_nightly_missing_delivery_id_is_400(self):
        b = self.nightly(new_sha())
        b.pop("delivery_id")
        self.assertDetail(self.post_callback(L2, b), 400,
                          "callback body missing required field: 'delivery_id'")

    def test_3_6_31_nightly_failure_is_forwarded_unchanged(self):
        sha = new_sha()
        body = self.nightly(sha, conclusion="failure")
        self.assertOk(self.post_callback(L2, body), "completed")
        fwd = wait_until(lambda: self.nightly_hud(sha))
        self.assertEqual(fwd[0]["untrusted"]["callback_payload"]["workflow"]["conclusion"],
                         "failure")

    def test_nightly_is_deduplicated_by_repo_delivery_workflow_job_run_attempt(self):
        sha = new_sha()
        body = self.nightly(sha, run_id=4242)
        self.assertOk(self.post_callback(L2, body), "completed")
        self.assertOk(self.post_callback(L2, body), "completed", duplicate=True)
        self.assertOk(self.post_callback(L2, body), "completed", duplicate=True)
        # Another job, another attempt, another repo: new results.
        self.assertOk(self.post_callback(L2, self.nightly(sha, run_id=4242, job_name="other")),
                      "completed")
        self.assertOk(self.post_callback(L2, self.nightly(sha, run_id=4242, run_attempt=2)),
                      "completed")
        self.assertOk(self.post_callback(L4, self.nightly(sha, run_id=4242)), "completed")
        # The same identity with another conclusion does not overwrite the first result.
        self.assertDetail(self.post_callback(L2, self.nightly(sha, run_id=4242,
                                                              conclusion="failure")), 400)
        wait_until(lambda: len(self.nightly_hud(sha)) >= 4)
        self.settle()
        self.assertEqual(len(self.nightly_hud(sha)), 4)

    def test_nightly_dedup_key_includes_the_workflow_name(self):
        # Issue 4: nightly/periodic callbacks are "deduplicated by (repo, delivery_id, workflow
        # name, job name, run_id, run_attempt)". Two workflows reporting the same run id and job
        # name are two results (the HUD keys rows by workflow name too).
        sha = new_sha()
        a = self.nightly(sha, run_id=777, name="Nightly A", job_name="build")
        b = self.nightly(sha, run_id=777, name="Nightly B", job_name="build")
        self.assertOk(self.post_callback(L2, a), "completed")
        self.assertOk(self.post_callback(L2, b), "completed")
        wait_until(lambda: len(self.nightly_hud(sha)) >= 2)
        self.assertEqual(sorted(x["untrusted"]["callback_payload"]["workflow"]["name"]
                                for x in self.nightly_hud(sha)), ["Nightly A", "Nightly B"])

    def test_3_6_29_nightly_rate_limited_is_429(self):
        self.own_stack(env={"RATE_LIMIT_PER_MIN": "2"})
        sha = new_sha()
        self.assertOk(self.post_callback(L2, self.nightly(sha, job_name="a")), "completed")
        self.assertOk(self.post_callback(L2, self.nightly(sha, job_name="b")), "completed")
        r = self.post_callback(L2, self.nightly(sha, job_name="c"))
        self.assertDetail(r, 429, "rate limit exceeded for %s" % L2)
        self.assertIn("retry-after", r.headers)


if __name__ == "__main__":
    unittest.main()
