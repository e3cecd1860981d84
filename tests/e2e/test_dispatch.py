"""End-to-end dispatch of the real relay (`crcr serve` as a GitHub App) against the fake GitHub.

Each test starts a FakeGitHub (tests/support/fakegh.py: verifies the App JWT, issues installation
tokens, records every request, validates dispatch bodies like GitHub) and a relay pointed at it
(GITHUB_API_URL on 127.0.0.1), posts real signed webhooks (tests/data/webhooks) and then checks
what reached the fake and what `crcr deliveries show ID --format json` says.

Covered here (issue 3 acceptance; the 502/429 storm is in test_dispatch_faults.py and the SIGKILL
run in test_dispatch_crash.py):
- upstream cases reference §3.3 1-4 and §3.4 1-5, black-box;
- the exact upstream envelope, payload bytes verbatim, for every dispatching example;
- redelivery of one X-GitHub-Delivery dispatches once per repo;
- trimming of a pull_request padded past 64 KB, and an untrimmable one dying without a 422 loop;
- steady state costs one GitHub API call per dispatch;
- 404 not installed and 422 are permanent (dead, reason recorded, no retry), then redeliver;
- bad input (signed garbage, oversized Content-Length) reaches nothing;
- installation tokens are re-minted before they expire, and a revoked token is replaced.

Needs CRCR_BIN; see tests/support/README.md. The helpers (GitHubRelayMixin, envelope checks) are
shared with the other test_dispatch_* files.
"""

import json
import random
import re
import unittest
import uuid
from collections import Counter

import fakegh as F
import relay as R
from testclock import TestClock
from waiting import wait_until

APP_ID = 424242
TARGETS = sorted(R.DEFAULT_TARGETS)
DISPATCH_PATH = r"^/repos/[^/]+/[^/]+/dispatches$"
INSTALLATION_PATH = r"^/repos/[^/]+/[^/]+/installation$"
TOKEN_PATH = r"^/app/installations/\d+/access_tokens$"
BUDGET = 65000  # CRCR_DISPATCH_BUDGET default
# Keys of the upstream client_payload. crcr may add "callback_token" (spec §3.6) and, only when
# it trimmed, "trimmed" (§5.2).
UPSTREAM_CP_KEYS = {"event_type", "delivery_id", "payload"}
# What may follow the verbatim payload: an optional callback_token member, then the two braces.
ENVELOPE_TAIL = re.compile(rb'^(,"callback_token":"[^"\\]{0,1024}")?\}\}$')

DISPATCH_EXAMPLES = [
    ("pull_request", "pull_request.opened"),
    ("pull_request", "pull_request.synchronize"),
    ("pull_request", "pull_request.reopened"),
    ("pull_request", "pull_request.closed"),
    ("push", "push"),
    ("push", "push.deleted"),
]


def app_env(gh, extra=None):
    """Relay environment for App mode against `gh`, with retries fast enough for a test."""
    env = {
        "GITHUB_APP_ID": str(APP_ID),
        "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
        "GITHUB_API_URL": gh.url,
        "CRCR_RETRY_BASE_MS": "200",
        "CRCR_RETRY_MAX_MS": "2000",
        # The reconciler (test_reconcile.py) reads GitHub's delivery log at start-up: these tests
        # count the relay's GitHub calls for dispatching only.
        "CRCR_RECONCILE_SECONDS": "0",
    }
    env.update(extra or {})
    return env


def allowlist_yaml(l1=(), l2=(), l3=None, l4=()):
    """Allowlist text. l3: {device: [repos]}."""
    out = []
    for level, repos in (("L1", l1), ("L2", l2)):
        if repos:
            out.append("%s:\n" % level + "".join("  - %s\n" % r for r in repos))
    if l3:
        out.append("L3:\n")
        for dev, repos in l3.items():
            out.append("  %s:\n" % dev + "".join("    %s: []\n" % r for r in repos))
    if l4:
        out.append("L4:\n" + "".join("  - %s\n" % r for r in l4))
    return "".join(out)


def pair_counts(gh):
    """Counter of accepted (204) dispatches by (client_payload.delivery_id, repo)."""
    return Counter((d["client_payload"].get("delivery_id"), d["repo"]) for d in gh.dispatches())


def expected_envelope_head(event, delivery):
    """The bytes before the payload in the upstream envelope."""
    e, d = json.dumps(event), json.dumps(delivery)
    return ('{"event_type":%s,"client_payload":{"event_type":%s,"delivery_id":%s,"payload":'
            % (e, e, d)).encode("utf-8")


class GitHubRelayMixin:
    """A fake GitHub plus a relay in App mode per test, on one clock the test moves
    (self.clock); helpers to inspect both. Mixed into unittest.TestCase subclasses."""

    def start_pair(self, allowlist=R.DEFAULT_ALLOWLIST, env=None, **fake_kw):
        with open(R.APP_PUB, encoding="ascii") as f:
            pub = f.read()
        self.clock = TestClock()
        self.addCleanup(self.clock.close)
        gh = F.FakeGitHub(app_id=APP_ID, public_key=pub, clock=self.clock, **fake_kw).start()
        self.addCleanup(gh.stop)
        relay = R.Relay(env=app_env(gh, env), allowlist=allowlist, clock=self.clock)
        self.addCleanup(relay.close)
        self.addCleanup(R.check_clean_exit, self, relay)  # runs before close
        relay.start()
        self.gh, self.relay = gh, relay
        return relay, gh

    def diag(self, n=30):
        """Context for a failure message: recent fake requests and the relay log tail."""
        reqs = self.gh.requests()[-25:] if getattr(self, "gh", None) else []
        lines = ["%s %s -> %s%s" % (r.method, r.path, r.status,
                                    " (%s)" % r.note if r.note else "") for r in reqs]
        log = self.relay.log_tail(n) if getattr(self, "relay", None) else ""
        return "\nlast fake requests:\n  %s\nrelay log:\n%s" % ("\n  ".join(lines), log)

    def post_ok(self, event, payload, delivery=None):
        """POSTs a signed webhook that must be queued (202) to every target."""
        r = self.relay.webhook(event, payload, delivery=delivery)
        self.assertEqual(r.status, 202, "%s: %r%s" % (event, r.body[:300], self.diag()))
        return r

    def show(self, delivery):
        rc, out, err = self.relay.cli(["deliveries", "show", delivery, "--format", "json"])
        self.assertEqual(rc, 0, "deliveries show %s: rc %d %s %s" % (delivery, rc, out, err))
        return json.loads(out)

    def rows(self, delivery):
        """Outbox dispatch rows of `delivery` by target."""
        return {r["target"]: r for r in self.show(delivery)["outbox"] if r["kind"] == "dispatch"}

    def wait_rows(self, delivery, pred, timeout=10.0, what="rows", step=0.0):
        """Waits until pred(rows by target) holds; fails with the last rows otherwise. With
        `step`, each poll that finds it false moves the clock `step` s (retries come due)."""
        last = {}

        def check():
            last["rows"] = self.rows(delivery)
            return pred(last["rows"])

        if not wait_until(check, timeout, 0.1, self.clock, step):
            self.fail("%s not reached within %.0f s; rows: %s%s"
                      % (what, timeout, json.dumps(last["rows"], indent=1)[:3000], self.diag()))
        return last["rows"]

    def wait_pairs(self, expected, timeout=15.0, step=0.0):
        """Waits until every (delivery, repo) in `expected` was accepted at least once (moving
        the clock `step` s per poll without them, when given)."""
        expected = set(expected)
        ok = wait_until(lambda: expected <= set(pair_counts(self.gh)), timeout,
                        clock=self.clock, step=step)
        if not ok:
            missing = sorted(expected - set(pair_counts(self.gh)))
            self.fail("%d of %d pairs never dispatched, e.g. %s%s"
                      % (len(missing), len(expected), missing[:5], self.diag()))

    def quiesce(self, timeout=30.0, step=0.2, relay=None):
        """Waits until the relay (`relay`, default self.relay: any live instance on the store)
        has nothing left to send: no outbox row queued or running (each poll that finds one
        moves the clock `step` s, so a scheduled retry would run now). A test that asserts no
        more calls come relies on this: nothing is scheduled."""
        self.assertTrue((relay or self.relay).wait_outbox_idle(timeout, step),
                        "the relay kept work queued for %.0f s%s" % (timeout, self.diag()))

    def assertUpstreamEnvelope(self, body, event, delivery, payload):
        """`body` (bytes the fake received) is exactly the upstream envelope around the signed
        `payload` bytes; returns the parsed client_payload."""
        head = expected_envelope_head(event, delivery)
        self.assertTrue(body.startswith(head),
                        "envelope head differs:\n got %r\nwant %r" % (body[:200], head))
        self.assertEqual(body[len(head):len(head) + len(payload)], payload,
                         "payload bytes are not the signed body verbatim")
        tail = body[len(head) + len(payload):]
        self.assertRegex(tail, ENVELOPE_TAIL, "unexpected bytes after the payload")
        env = json.loads(body)
        self.assertEqual(set(env), {"event_type", "client_payload"})
        self.assertEqual(env["event_type"], event)
        cp = env["client_payload"]
        self.assertLessEqual(UPSTREAM_CP_KEYS, set(cp))
        self.assertLessEqual(set(cp) - UPSTREAM_CP_KEYS, {"callback_token"})
        self.assertEqual((cp["event_type"], cp["delivery_id"]), (event, delivery))
        self.assertEqual(cp["payload"], json.loads(payload))
        return cp


def pr_with(name="pull_request.opened", labels=None, body=None):
    """A pull_request example with labels (names) and/or body replaced; compact JSON bytes."""
    obj = R.load_example_obj(name)
    if labels is not None:
        tmpl = obj["pull_request"]["labels"][0] if obj["pull_request"]["labels"] else {}
        obj["pull_request"]["labels"] = [
            dict(tmpl, id=1000 + i, name=n,
                 url="https://api.github.com/repos/pytorch/pytorch/labels/%s" % n)
            for i, n in enumerate(labels)]
    if body is not None:
        obj["pull_request"]["body"] = body
    return R.compact(obj)


# --------------------------------------------------------------------------------------------
# 1. Upstream test cases, black-box


class UpstreamLambdaCasesTest(GitHubRelayMixin, unittest.TestCase):
    """reference §3.3 (test_event_handler_lambda.py) 1-4 against the real relay."""

    def test_3_3_1_other_path_404_and_get_on_webhook_405(self):
        self.start_pair()
        self.assertEqual(self.relay.post("/other", b"{}").status, 404)
        self.assertEqual(self.relay.get("/github/webhook").status, 405)
        self.quiesce()
        self.assertEqual(self.gh.requests(), [], "no GitHub call for a routing error")

    def test_3_3_2_bad_signature_is_401_and_nothing_is_dispatched(self):
        self.start_pair()
        r = self.relay.webhook("pull_request", R.load_example("pull_request.opened"),
                               signature="sha256=bad")
        self.assertEqual(r.status, 401, r.body)
        self.assertEqual(json.loads(r.body), {"detail": "Bad signature"})
        self.quiesce()
        self.assertEqual(self.gh.requests(), [])

    def test_3_3_3_valid_request_is_handled_once_one_dispatch_per_repo(self):
        self.start_pair()
        r = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(r.json(), {"ok": True, "delivery_id": r.delivery, "queued": TARGETS})
        self.wait_pairs({(r.delivery, t) for t in TARGETS})
        self.quiesce()
        self.assertEqual(pair_counts(self.gh), Counter({(r.delivery, t): 1 for t in TARGETS}))

    def test_3_3_4_failing_github_no_longer_fails_the_webhook(self):
        # Upstream answers 502 when every dispatch failed (and loses the event). crcr persists
        # first and answers 202; the rows are retried until GitHub recovers.
        self.start_pair()
        fault = self.gh.fault_5xx(DISPATCH_PATH, status=502, method="POST", count=None)
        r = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        self.wait_rows(r.delivery, lambda rows: len(rows) == 4 and all(
            x["state"] == "queued" and x["attempts"] >= 2 and x["last_status"] == 502
            for x in rows.values()), what="every row retried after 502", step=0.5)
        self.assertEqual(pair_counts(self.gh), Counter())
        self.assertGreaterEqual(fault.hits, 8)
        self.gh.clear_faults()
        self.wait_pairs({(r.delivery, t) for t in TARGETS}, step=0.5)
        self.wait_rows(r.delivery, lambda rows: all(x["state"] == "sent" and
                                                    x["last_status"] == 204
                                                    for x in rows.values()),
                       what="every row sent after recovery")


class UpstreamHandlerCasesTest(GitHubRelayMixin, unittest.TestCase):
    """reference §3.4 (test_event_handler.py) 1-5 against the real relay."""

    def test_3_4_1_assigned_is_ignored_without_any_github_call(self):
        self.start_pair()
        for event, name in (("pull_request", "pull_request.assigned"),
                            ("pull_request", "pull_request.labeled"),  # not ciflow/crcr/*
                            ("issues", "issues.opened")):
            with self.subTest(example=name):
                r = self.relay.webhook(event, R.load_example(name))
                self.assertEqual((r.status, r.json()), (200, {"ignored": True}))
        self.quiesce()
        self.assertEqual(self.gh.requests(), [])

    def test_3_4_2_single_repo_allowlist_one_dispatch(self):
        self.start_pair(allowlist=allowlist_yaml(l1=["org/a"]))
        r = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(r.json()["queued"], ["org/a"])
        self.wait_pairs({(r.delivery, "org/a")})
        self.quiesce()
        self.assertEqual(len(self.gh.requests("POST", DISPATCH_PATH)), 1)
        self.assertEqual(len(self.gh.requests("GET", INSTALLATION_PATH)), 1)
        self.assertEqual(len(self.gh.requests("POST", TOKEN_PATH)), 1)

    def test_3_4_3_one_token_per_installation_not_per_repo(self):
        # Upstream mints once per repo; crcr once per installation (one per owner in the fake).
        repos = ["org1/repo", "pytorch/repo", "acme/one", "acme/two", "acme/three"]
        self.start_pair(allowlist=allowlist_yaml(l1=repos[:2], l2=repos[2:]))
        first = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        self.wait_pairs({(first.delivery, t) for t in repos})
        self.quiesce()
        mints = Counter(r.path for r in self.gh.requests("POST", TOKEN_PATH))
        ids = {o: self.gh.installation_id(o) for o in ("org1", "pytorch", "acme")}
        self.assertEqual(mints, Counter({"/app/installations/%d/access_tokens" % i: 1
                                         for i in ids.values()}),
                         "one token per installation (3 owners), not one per repo (5)")
        lookups = Counter(r.path for r in self.gh.requests("GET", INSTALLATION_PATH))
        self.assertEqual(lookups, Counter({"/repos/%s/installation" % t: 1 for t in repos}))
        # Each dispatch used the token of its own owner's installation (the fake would 401).
        self.assertEqual(len(self.gh.dispatches()), 5)
        # A second event costs dispatches only.
        n = len(self.gh.requests())
        second = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(second.delivery, t) for t in repos})
        self.quiesce()
        self.assertEqual([(r.method, r.status) for r in self.gh.requests()[n:]],
                         [("POST", 204)] * 5)

    def test_3_4_4_and_5_no_check_run_at_dispatch_time_for_l3_and_l4(self):
        self.start_pair(allowlist=allowlist_yaml(l1=["org1/repo1"], l3={"dev": ["org3/l3repo"]},
                                                 l4=["org4/l4repo"]))
        targets = ["org1/repo1", "org3/l3repo", "org4/l4repo"]
        labelled = pr_with(labels=["ciflow/crcr/dev", "bug"])
        deliveries = [self.post_ok("pull_request", labelled).delivery,
                      self.post_ok("pull_request", R.load_example("pull_request.synchronize"))
                      .delivery]
        self.wait_pairs({(d, t) for d in deliveries for t in targets})
        self.quiesce()
        self.assertEqual(self.gh.requests(path_re=r"check-runs"), [])
        self.assertEqual(self.gh.check_runs(), [])


# --------------------------------------------------------------------------------------------
# 2. The exact envelope


class EnvelopeTest(GitHubRelayMixin, unittest.TestCase):
    def test_every_repo_receives_the_upstream_envelope_with_the_signed_bytes(self):
        self.start_pair()
        for event, name in DISPATCH_EXAMPLES:
            with self.subTest(example=name):
                payload = R.load_example(name)
                r = self.post_ok(event, payload)
                self.wait_pairs({(r.delivery, t) for t in TARGETS})
                got = [d for d in self.gh.dispatches()
                       if d["client_payload"].get("delivery_id") == r.delivery]
                self.assertEqual(sorted(d["repo"] for d in got), TARGETS)
                for d in got:
                    self.assertEqual(d["event_type"], event)
                    self.assertUpstreamEnvelope(d["body"], event, r.delivery, payload)
        self.quiesce()
        # The requests themselves: REST headers of the issue, installation token auth.
        for rec in self.gh.requests("POST", DISPATCH_PATH):
            self.assertEqual(rec.status, 204, rec)
            self.assertEqual(rec.headers.get("accept"), "application/vnd.github+json")
            self.assertEqual(rec.headers.get("x-github-api-version"), "2022-11-28")
            self.assertTrue(rec.headers.get("user-agent", "").startswith("crcr/"))
            self.assertTrue(rec.headers.get("content-type", "").startswith("application/json"))
            owner = rec.path.split("/")[2]
            info = self.gh.token_info(rec.headers["authorization"].split(" ", 1)[1])
            self.assertIsNotNone(info, "dispatch not made with an issued installation token")
            self.assertEqual(info["owner"], owner)

    def test_pretty_printed_payload_is_forwarded_byte_for_byte(self):
        # GitHub sends compact JSON, but the relay must not re-serialise whatever it signed.
        self.start_pair(allowlist=allowlist_yaml(l1=["org1/repo1"]))
        payload = json.dumps(R.load_example_obj("push"), indent=2, ensure_ascii=True).encode()
        payload = payload.replace(b'"ref"', b'"r\\u0065f"', 1)  # an escape jansson would undo
        r = self.post_ok("push", payload)
        self.wait_pairs({(r.delivery, "org1/repo1")})
        self.assertUpstreamEnvelope(self.gh.dispatches()[0]["body"], "push", r.delivery, payload)


# --------------------------------------------------------------------------------------------
# 3. Redelivery


class RedeliveryTest(GitHubRelayMixin, unittest.TestCase):
    def test_same_delivery_posted_twice_dispatches_once_per_repo(self):
        self.start_pair()
        payload = R.load_example("pull_request.reopened")
        first = self.post_ok("pull_request", payload)
        # Immediately (rows possibly still queued or running) and again after they were sent.
        again = self.relay.webhook("pull_request", payload, delivery=first.delivery)
        self.assertEqual((again.status, again.json()), (200, {"ok": True, "duplicate": True}))
        self.wait_pairs({(first.delivery, t) for t in TARGETS})
        self.quiesce()
        late = self.relay.webhook("pull_request", payload, delivery=first.delivery)
        self.assertEqual((late.status, late.json()), (200, {"ok": True, "duplicate": True}))
        # GitHub's "Redeliver" resends the same id with the same body; a changed body with a known
        # id is still the same delivery.
        other = self.relay.webhook("pull_request", R.load_example("pull_request.closed"),
                                   delivery=first.delivery)
        self.assertEqual(other.status, 200, other.body)
        self.quiesce()
        self.assertEqual(pair_counts(self.gh), Counter({(first.delivery, t): 1 for t in TARGETS}))


# --------------------------------------------------------------------------------------------
# 6. Trimming


KEPT_FIELDS = [
    ("action",), ("number",), ("pull_request", "number"), ("pull_request", "state"),
    ("pull_request", "merged"), ("pull_request", "draft"),
    ("pull_request", "head", "sha"), ("pull_request", "head", "ref"),
    ("pull_request", "head", "repo", "full_name"),
    ("pull_request", "base", "sha"), ("pull_request", "base", "ref"),
    ("pull_request", "html_url"), ("repository", "full_name"),
]


def dig(obj, path):
    for k in path:
        obj = obj[k]
    return obj


class TrimmingTest(GitHubRelayMixin, unittest.TestCase):
    def test_pull_request_over_64kb_is_dispatched_trimmed_under_the_budget(self):
        self.start_pair(allowlist=allowlist_yaml(l1=["org1/repo1", "org2/repo2"]))
        # A long PR description (with escapes and non-ASCII, as real ones have) pushes the
        # payload past GitHub's 64 KB dispatch limit.
        line = 'Step %d: "quoted" \\ back-slash, tab\t, unicode \u00e9\u4e2d, emoji \U0001F600\n'
        long_body = "".join(line % i for i in range(1200))
        labels = ["ciflow/trunk", "ciflow/crcr/dev", "module: cuda", "release notes: \u00e9"]
        payload = pr_with(labels=labels, body=long_body)
        self.assertGreater(len(payload), 70000)
        original = json.loads(payload)
        r = self.post_ok("pull_request", payload)
        self.wait_pairs({(r.delivery, t) for t in ("org1/repo1", "org2/repo2")}, timeout=20)
        self.quiesce()
        self.assertEqual([x.status for x in self.gh.requests("POST", DISPATCH_PATH)], [204, 204],
                         "no 422 from the fake, no retry")
        for d in self.gh.dispatches():
            with self.subTest(repo=d["repo"]):
                self.assertLessEqual(len(d["body"]), BUDGET)
                env = json.loads(d["body"])
                cp = env["client_payload"]
                self.assertEqual((env["event_type"], cp["event_type"], cp["delivery_id"]),
                                 ("pull_request", "pull_request", r.delivery))
                self.assertEqual(cp["trimmed"], ["payload.pull_request.body"])
                got = cp["payload"]
                self.assertNotIn("body", got["pull_request"])
                for path in KEPT_FIELDS:
                    self.assertEqual(dig(got, path), dig(original, path), ".".join(path))
                self.assertEqual([l["name"] for l in got["pull_request"]["labels"]], labels)
                # Removing the body was enough: everything else is untouched.
                expect = json.loads(payload)
                del expect["pull_request"]["body"]
                self.assertEqual(got, expect)
        rows = self.rows(r.delivery)
        for row in rows.values():
            self.assertEqual(row["state"], "sent")
            self.assertIn("payload.pull_request.body", row["note"] or "")

    def test_payload_that_cannot_fit_dies_with_a_reason_and_is_never_sent(self):
        # 700 label names of ~100 characters are always kept: no trimming can get under 65,000
        # bytes. Upstream would send it and get 422; crcr must fail it without calling GitHub.
        self.start_pair(allowlist=allowlist_yaml(l1=["org1/repo1"]))
        names = ["ciflow/crcr/%04d-%s" % (i, "x" * 88) for i in range(700)]
        r = self.post_ok("pull_request", pr_with(labels=names))
        rows = self.wait_rows(r.delivery, lambda rows: rows["org1/repo1"]["state"] == "dead",
                              what="untrimmable row dead")
        err = rows["org1/repo1"]["last_error"] or ""
        self.assertRegex(err, r"(?i)budget|too large", err)
        self.quiesce()
        self.assertEqual(self.gh.requests("POST", DISPATCH_PATH), [])


# --------------------------------------------------------------------------------------------
# 7. Steady state cost


class SteadyStateTest(GitHubRelayMixin, unittest.TestCase):
    def test_one_api_call_per_dispatch_once_ids_and_tokens_are_cached(self):
        repos = ["acme/r1", "acme/r2", "acme/r3", "beta/r4", "beta/r5"]
        self.start_pair(allowlist=allowlist_yaml(l1=repos[:3], l2=repos[3:]))
        warm = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(warm.delivery, t) for t in repos})
        self.quiesce()
        mark = len(self.gh.requests())
        deliveries = [self.post_ok(ev, R.load_example(name)).delivery
                      for ev, name in (DISPATCH_EXAMPLES * 4)[:20]]
        self.assertEqual(len(deliveries) * len(repos), 100)
        self.wait_pairs({(d, t) for d in deliveries for t in repos}, timeout=30)
        self.quiesce()
        calls = self.gh.requests()[mark:]
        kinds = Counter("%s %s -> %s" % (c.method, "dispatch" if re.match(DISPATCH_PATH, c.path)
                                         else c.path, c.status) for c in calls)
        self.assertEqual(len(calls), 100, "API calls for 100 dispatches: %s" % dict(kinds))
        self.assertEqual(kinds, Counter({"POST dispatch -> 204": 100}))


# --------------------------------------------------------------------------------------------
# 8. Permanent failures and redelivery


class PermanentFailureTest(GitHubRelayMixin, unittest.TestCase):
    def test_not_installed_is_dead_with_reason_then_redelivered_after_install(self):
        self.start_pair(installed_repos=[t for t in TARGETS if t != "org2/repo2"])
        r = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        rows = self.wait_rows(r.delivery, lambda rows: rows["org2/repo2"]["state"] == "dead"
                              and all(rows[t]["state"] == "sent" for t in TARGETS
                                      if t != "org2/repo2"), what="org2/repo2 dead, others sent")
        self.assertIn("not installed", rows["org2/repo2"]["last_error"] or "")
        self.quiesce()  # nothing is scheduled again: no retry, however far the clock moves
        self.assertEqual(len(self.gh.requests(path_re=r"^/repos/org2/repo2/")), 1,
                         "one installation lookup, no retry: %s" % self.gh.requests())
        self.assertEqual(self.rows(r.delivery)["org2/repo2"]["state"], "dead")

        self.gh.install("org2/repo2")
        rc, out, err = self.relay.cli(["deliveries", "redeliver", r.delivery,
                                       "--repo", "org2/repo2"])
        self.assertEqual(rc, 0, out + err)
        self.wait_pairs({(r.delivery, "org2/repo2")})
        self.wait_rows(r.delivery, lambda rows: rows["org2/repo2"]["state"] == "sent",
                       what="org2/repo2 sent after redeliver")
        self.quiesce()
        self.assertEqual(pair_counts(self.gh), Counter({(r.delivery, t): 1 for t in TARGETS}),
                         "redeliver --repo touches that repo only")

    def test_422_is_dead_without_a_retry_loop_then_redelivered(self):
        self.start_pair()
        msg = "Invalid request.\n\nFor 'properties/client_payload', nil is not an object."
        fault = self.gh.add_fault("POST", r"^/repos/org3/repo3/dispatches$", 422,
                                  {"content-type": "application/json"},
                                  {"message": msg, "documentation_url": F.DOCS})
        r = self.post_ok("push", R.load_example("push"))
        rows = self.wait_rows(r.delivery, lambda rows: rows["org3/repo3"]["state"] == "dead",
                              what="org3/repo3 dead")
        row = rows["org3/repo3"]
        self.assertEqual(row["last_status"], 422)
        self.assertIn("Invalid request", row["last_error"] or "")
        self.quiesce()  # nothing is scheduled again: no retry, however far the clock moves
        self.assertEqual(fault.hits, 1, "a 422 must not be retried")
        self.assertEqual(self.rows(r.delivery)["org3/repo3"]["attempts"], 1)

        self.gh.clear_faults()
        rc, out, err = self.relay.cli(["deliveries", "redeliver", r.delivery,
                                       "--repo", "org3/repo3"])
        self.assertEqual(rc, 0, out + err)
        self.wait_pairs({(r.delivery, t) for t in TARGETS})
        self.wait_rows(r.delivery, lambda rows: all(x["state"] == "sent" for x in rows.values()),
                       what="all sent after redeliver")
        self.quiesce()
        self.assertEqual(pair_counts(self.gh), Counter({(r.delivery, t): 1 for t in TARGETS}))


# --------------------------------------------------------------------------------------------
# 9. Bad input


class BadInputTest(GitHubRelayMixin, unittest.TestCase):
    def test_signed_random_bodies_are_400_and_reach_nothing(self):
        self.start_pair()
        rng = random.Random(31337)
        sent = 0
        while sent < 200:
            body = rng.randbytes(rng.choice((1, 3, 16, 100, 1000, 8192, 40000)))
            try:
                json.loads(body)
                continue  # a random body that happens to be JSON is not garbage
            except (ValueError, UnicodeDecodeError):
                pass
            event = ("pull_request", "push")[sent % 2]
            r = self.relay.webhook(event, body)
            self.assertEqual(r.status, 400, "body #%d %r: %d %r" % (sent, body[:16], r.status,
                                                                    r.body[:200]))
            sent += 1
        self.assertTrue(self.relay.running(), self.relay.log_tail())
        self.assertEqual(self.relay.get("/healthz").status, 200)
        self.quiesce()
        self.assertEqual(self.gh.requests(), [])
        ok = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(ok.delivery, t) for t in TARGETS})

    def test_content_length_over_25_mib_is_413_without_sending_the_body(self):
        self.start_pair()
        length = 26 * 1024 * 1024 + 1
        head = ("POST /github/webhook HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                "Content-Type: application/json\r\nX-GitHub-Event: pull_request\r\n"
                "X-GitHub-Delivery: %s\r\nX-Hub-Signature-256: sha256=%s\r\n"
                "Content-Length: %d\r\n\r\n"
                % (self.relay.port, uuid.uuid4(), "0" * 64, length)).encode("latin-1")
        # Headers only, the body never comes: a 413 can only be the answer to the headers (the
        # request deadline would close the connection without one).
        raw = R.raw_request(self.relay.port, head, read_timeout=30.0)
        self.assertTrue(raw, "no answer while the body was withheld")
        resp = R.parse_response(raw)
        self.assertEqual(resp.status, 413, raw[:300])
        self.assertEqual(self.relay.get("/healthz").status, 200)
        self.assertEqual(self.gh.requests(), [])


# --------------------------------------------------------------------------------------------
# 10. Token expiry


class TokenLifetimeTest(GitHubRelayMixin, unittest.TestCase):
    MARGIN = 300  # the relay uses a token until 5 minutes before its expires_at

    def test_token_is_reminted_before_it_expires(self):
        # Tokens live 360 s: usable by the relay for 60 s. A push every 30 s (moved) for 4 min:
        # a token serves two pushes, then the next one mints.
        repos = ["acme/a", "acme/b"]
        self.start_pair(allowlist=allowlist_yaml(l1=repos), token_ttl=self.MARGIN + 60)
        deliveries = []
        for i in range(9):
            if i:
                self.clock.advance(30)
            deliveries.append(self.post_ok("push", R.load_example("push")).delivery)
            self.wait_pairs({(deliveries[-1], t) for t in repos})
            self.quiesce(step=0)
        calls = self.gh.requests()
        self.assertEqual([c for c in calls if c.status == 401], [], "a 401 means a stale token")
        mints = self.gh.requests("POST", TOKEN_PATH)
        self.assertEqual(len(mints), 5,
                         "%d mints over 4 moved minutes of 1-minute tokens (one per dispatch "
                         "would be %d)" % (len(mints), 2 * len(deliveries)))
        for c in self.gh.requests("POST", DISPATCH_PATH):
            info = self.gh.token_info(c.headers["authorization"].split(" ", 1)[1])
            self.assertIsNotNone(info)
            left = info["expires_at"] - c.wall
            self.assertGreater(left, self.MARGIN - 1,
                               "token used %.1f s before its expiry (refresh margin %d s)"
                               % (left, self.MARGIN))

    def test_revoked_token_is_replaced_after_one_401(self):
        self.start_pair(allowlist=allowlist_yaml(l1=["acme/a"]))
        warm = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(warm.delivery, "acme/a")})
        self.quiesce()
        mark = len(self.gh.requests())
        self.gh.revoke_tokens()  # e.g. the App's key was rotated: GitHub answers 401
        r = self.post_ok("push", R.load_example("push.deleted"))
        self.wait_pairs({(r.delivery, "acme/a")})
        self.quiesce()
        seq = [(c.method, "token" if re.match(TOKEN_PATH, c.path) else c.path, c.status)
               for c in self.gh.requests()[mark:]]
        self.assertEqual(seq, [("POST", "/repos/acme/a/dispatches", 401),
                               ("POST", "token", 201),
                               ("POST", "/repos/acme/a/dispatches", 204)])
        row = self.rows(r.delivery)["acme/a"]
        self.assertEqual((row["state"], row["last_status"]), ("sent", 204))


if __name__ == "__main__":
    unittest.main()
