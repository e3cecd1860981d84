"""End-to-end supersession (spec §3.12, issue 25): a newer dispatch of a PR to a repository, and a
closed PR, end the older dispatches' open runs at once.

Each test runs its own stack (test_callback.Stack: the real relay, the fake GitHub, the OIDC
issuer, the fake HUD), on SQLite or, with CRCR_E2E_PG_URI, PostgreSQL. Covered:
  - the issue's acceptance flow: PR opened -> dispatch A to an L4 repo, A in progress;
    synchronize -> dispatch B; at once A's run is completed/cancelled with `ended` superseded and
    a cancelled check run follows on A's sha; B runs normally; a late completed/success of A is
    recorded and shown, creates no check run and reopens nothing; closing the PR ends B
    (pr_closed); `crcr health` shows 0 timeouts and 2 superseded, also once the clock is past
    ZOMBIE_TIMEOUT_SECONDS and the sweeper ran;
  - the sweeper never times out a superseded run: five pushes in an hour (on the relay's moved
    clock), six hours later the repository's timeout figures are 0 (a control run of another PR
    is timed out by the same sweep);
  - redeliveries supersede nothing; a re-run of the newest run is not superseded by its own
    attempt; a re-opened PR with the same head supersedes nothing; a queued older dispatch is
    withdrawn, never sent; the HUD shows superseded runs as superseded, not failed;
  - several instances on one PostgreSQL store: a dispatch ingested by one ends a run another
    instance recorded.
Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import re
import secrets
import unittest

import relay as R
from test_callback import CallbackMixin, new_run_id, new_sha
from waiting import wait_until

L1, L2, L3, L4, PUSHY, CONTROL = ("sup/l1", "sup/l2", "sup/l3", "sup/l4", "sup/pushy",
                                  "sup/control")
ALLOWLIST = """\
L1:
  - sup/l1
L2:
  - sup/l2
  - sup/control
L3:
  dev:
    sup/l3: []
L4:
  - sup/l4
  - sup/pushy
"""
ZOMBIE_S = 21600  # the default ZOMBIE_TIMEOUT_SECONDS: the clock is moved past it
SWEEP_S = 600  # the default CRCR_SWEEP_SECONDS
ENV = {"CRCR_HUD_CACHE_MS": "0"}


def new_pr_number():
    return 300000 + secrets.randbelow(600000)


class SupersedeMixin(CallbackMixin):
    """Helpers over a private stack per test (the clock of some tests moves); TEST_ENV adds to
    the relay's environment of the test it names."""

    TEST_ENV = {}

    def setUp(self):
        super().setUp()
        self.stack(self.TEST_ENV.get(self._testMethodName))

    @classmethod
    def setUpClass(cls):  # no shared stack: each test starts its own (own_stack)
        unittest.TestCase.setUpClass()

    def stack(self, env=None, **kw):
        e = dict(ENV)
        e.update(env or {})
        return self.own_stack(env=e, allowlist=ALLOWLIST, **kw)

    # ---------------------------------------------------------------- the moved clock

    def advance(self, seconds):
        """Moves the stack's one clock (the relay's timers, the fakes' JWT and token times) once
        nothing is in flight (a request out while its lease jumps past its end would be sent
        again)."""
        self.settle()
        self.s.clock.advance(seconds)

    def swept(self, repo, n):
        """Awaits `n` timed-out runs in `repo`'s health, moving the clock a sweeper period per
        poll that finds fewer (the sweeper runs on the relay's clock)."""
        return wait_until(lambda: self.health(repo)["timed_out"] == n, 15.0, interval=0.1,
                          clock=self.s.clock, step=SWEEP_S)

    def token(self, repo):
        """An OIDC token valid on the stack's (moved) clock."""
        return self.s.issuer.token(repo)

    def say(self, repo, pr, status, **kw):
        """A callback of `repo` for `pr` with a token valid on the relay's clock."""
        return self.cb(repo, pr, status, token=self.token(repo), **kw)

    # ---------------------------------------------------------------- observations

    def api(self, path):
        r = self.s.relay.get(path)
        self.assertEqual(r.status, 200, "%s: %r" % (path, r.body[:300]))
        return r.json()

    def pr_runs(self, number, repo=None, delivery=None):
        """Runs of upstream PR `number` from /api/v1/pr/{n} (every sha)."""
        doc = self.api("/api/v1/pr/%d" % number)
        return [run for sha in doc["shas"] for run in sha["runs"]
                if (repo is None or run["repo"] == repo)
                and (delivery is None or run["delivery_id"] == delivery)]

    def run_of(self, number, repo, delivery, run_id):
        runs = [r for r in self.pr_runs(number, repo, delivery) if r["run_id"] == str(run_id)]
        self.assertEqual(len(runs), 1, "runs of %s/%s: %r" % (repo, delivery, runs))
        return runs[0]

    def dispatch_row(self, delivery, repo):
        doc = self.api("/api/v1/deliveries/%s" % delivery)
        rows = [j for j in doc["outbox"] if j["kind"] == "dispatch" and j["target"] == repo]
        self.assertEqual(len(rows), 1, doc["outbox"])
        return rows[0]

    def health(self, repo):
        rc, out, err = self.s.relay.cli(["health", "--repo", repo, "--format", "json"])
        self.assertEqual(rc, 0, err)
        (entry,) = json.loads(out)["repos"]
        return entry

    def health_text(self, repo):
        rc, out, err = self.s.relay.cli(["health", "--repo", repo])
        self.assertEqual(rc, 0, err)
        return out

    def assertRunEnded(self, run, reason, conclusion="cancelled"):
        self.assertEqual((run["state"], run["conclusion"], run["result"], run.get("ended")),
                         ("completed", conclusion, "superseded", reason), run)

    def assertEndedAnswer(self, resp, status, reason, duplicate=False):
        want = {"ok": True, "status": status, "ended": reason}
        if duplicate:
            want["duplicate"] = True
        self.assertEqual(resp.status, 200, "%r%s" % (resp.body[:400], self.diag()))
        self.assertEqual(json.loads(resp.body), want)


class SupersedeTest(SupersedeMixin, unittest.TestCase):
    # Retries an hour apart: the failed first attempt of a dispatch waits queued.
    TEST_ENV = {"test_a_queued_older_dispatch_is_withdrawn_never_sent":
                {"CRCR_RETRY_BASE_MS": "3600000", "CRCR_RETRY_MAX_MS": "7200000"}}

    def test_acceptance_a_push_ends_the_older_run_at_once_and_closing_ends_the_newer(self):
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4, L2])
        run_a = new_run_id()
        self.assertOk(self.say(L4, a, "in_progress", run_id=run_a), "in_progress")
        self.wait_checks(a.sha, 1, L4)

        b = self.open_pr(action="synchronize", number=number, repos=[L4, L2])
        self.assertNotEqual(a.sha, b.sha)
        # At once: the ingest that answered 202 ended A's run (no wait).
        self.assertRunEnded(self.run_of(number, L4, a.delivery, run_a), "superseded")
        for repo in (L4, L2):  # both of A's dispatches, L2's without any callback yet
            self.assertEqual(self.dispatch_row(a.delivery, repo)["ended"],
                             {"reason": "superseded", "by": b.delivery})
        checks = self.wait_checks(a.sha, 2, L4)
        self.assertEqual([(c["status"], c["conclusion"]) for c in checks],
                         [("in_progress", None), ("completed", "cancelled")])
        cancelled = checks[1]
        self.assertEqual((cancelled["name"], cancelled["external_id"],
                          cancelled["output"]["title"]),
                         (checks[0]["name"], "%d:%d" % (run_a, number), "Cancelled"))
        self.assertIn("Superseded", cancelled["output"]["summary"])

        # B runs normally.
        run_b = new_run_id()
        self.assertOk(self.say(L4, b, "in_progress", run_id=run_b), "in_progress")
        self.assertEqual([c["status"] for c in self.wait_checks(b.sha, 1, L4)], ["in_progress"])
        self.assertEqual(self.run_of(number, L4, b.delivery, run_b)["result"], "running")

        # A late completed/success for A: recorded and shown, no check run, nothing reopened.
        self.settle()
        forwards = len(self.hud_for(a.delivery))
        self.assertEndedAnswer(self.say(L4, a, "completed", run_id=run_a), "completed",
                               "superseded")
        self.assertRunEnded(self.run_of(number, L4, a.delivery, run_a), "superseded",
                            conclusion="success")
        self.assertEndedAnswer(self.say(L4, a, "in_progress", run_id=run_a), "in_progress",
                               "superseded", duplicate=True)
        # The dispatch to L2 was ended before any callback: a late one is recorded as ended.
        run_l2 = new_run_id()
        self.assertEndedAnswer(self.say(L2, a, "in_progress", run_id=run_l2), "in_progress",
                               "superseded")
        late = self.run_of(number, L2, a.delivery, run_l2)
        self.assertEqual((late["state"], late["result"], late["ended"]),
                         ("in_progress", "superseded", "superseded"))
        self.settle()
        self.assertEqual(len(self.checks_for(a.sha, L4)), 2, "a late callback made a check run")
        self.assertEqual(len(self.hud_for(a.delivery)), forwards, "a late callback was forwarded")
        self.assertEqual([c["status"] for c in self.checks_for(b.sha, L4)], ["in_progress"])
        self.assertEqual(self.run_of(number, L4, b.delivery, run_b)["result"], "running")

        # Closing the PR ends B the same way.
        closed = self.open_pr(action="closed", sha=b.sha, number=number, repos=[L4])
        self.assertRunEnded(self.run_of(number, L4, b.delivery, run_b), "pr_closed")
        self.assertEqual(self.dispatch_row(b.delivery, L4)["ended"],
                         {"reason": "pr_closed", "by": closed.delivery})
        checks = self.wait_checks(b.sha, 2, L4)
        self.assertEqual([(c["status"], c["conclusion"]) for c in checks],
                         [("in_progress", None), ("completed", "cancelled")])
        self.assertIn("closed", checks[1]["output"]["summary"])

        h = self.health(L4)
        self.assertEqual((h["timed_out"], h["superseded"], h["failure"], h["running"]),
                         (0, 2, 0, 0), h)
        self.assertRegex(self.health_text(L4), r"\n%s\s+L4\s+2\s+-\s+0\s+0\s+2\s" % L4)
        # Past the zombie timeout, after a sweep: still no timeout from these runs.
        self.advance(ZOMBIE_S + 120)
        control = self.open_pr(repos=[CONTROL])  # a run that is not superseded: it times out
        self.assertOk(self.say(CONTROL, control, "in_progress"), "in_progress")
        self.advance(ZOMBIE_S + 120)
        self.assertTrue(self.swept(CONTROL, 1), "the sweeper did not run%s" % self.diag())
        h = self.health(L4)
        self.assertEqual((h["timed_out"], h["superseded"]), (0, 2), h)
        self.assertEqual(self.health(L2)["timed_out"], 0)

    def test_the_sweeper_never_times_out_a_superseded_run_five_pushes_stay_at_zero(self):
        number = new_pr_number()
        runs = []
        for i in range(5):  # five pushes within an hour, each run in progress when the next comes
            pr = self.open_pr(action="opened" if i == 0 else "synchronize", number=number,
                              repos=[PUSHY])
            run = new_run_id()
            self.assertOk(self.say(PUSHY, pr, "in_progress", run_id=run), "in_progress")
            runs.append((pr, run))
            self.advance(600)
        last, last_run = runs[-1]
        self.assertOk(self.say(PUSHY, last, "completed", run_id=last_run), "completed")
        for pr, run in runs[:-1]:
            self.assertRunEnded(self.run_of(number, PUSHY, pr.delivery, run), "superseded")
        # A control run of another PR, never superseded: the sweep that must time it out comes
        # over the superseded ones too.
        control = self.open_pr(repos=[CONTROL])
        self.assertOk(self.say(CONTROL, control, "in_progress"), "in_progress")
        self.advance(ZOMBIE_S + 120)
        self.assertTrue(self.swept(CONTROL, 1), "the sweeper did not run%s" % self.diag())
        self.settle()
        for pr, run in runs[:-1]:
            self.assertRunEnded(self.run_of(number, PUSHY, pr.delivery, run), "superseded")
        h = self.health(PUSHY)
        self.assertEqual((h["runs"], h["success"], h["superseded"], h["timed_out"],
                          h["failure"], h["timeout_rate_pct"]), (5, 1, 4, 0, 0, 0.0), h)
        timed_out = [c for c in self.s.gh.check_runs() if c["conclusion"] == "timed_out"]
        self.assertEqual(timed_out, [])
        swept = [line for line in self.s.relay.log_text().splitlines()
                 if "event=sweeper.timed_out" in line]
        self.assertEqual(len(swept), 1, swept)
        self.assertIn(control.delivery, swept[0])
        # Every superseded run's check run on its old sha was completed cancelled.
        for pr, _ in runs[:-1]:
            self.assertEqual([(c["status"], c["conclusion"]) for c in self.checks_for(pr.sha)],
                             [("in_progress", None), ("completed", "cancelled")])

    def test_redeliveries_supersede_nothing(self):
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4])
        b = self.open_pr(action="synchronize", number=number, repos=[L4])
        run_b = new_run_id()
        self.assertOk(self.say(L4, b, "in_progress", run_id=run_b), "in_progress")
        for pr, action in ((a, "opened"), (b, "synchronize")):
            obj = R.load_example_obj("pull_request." + action)
            obj["number"] = obj["pull_request"]["number"] = number
            obj["pull_request"]["head"]["sha"] = pr.sha
            r = self.webhook("pull_request", obj, delivery=pr.delivery)
            self.assertEqual((r.status, r.json()), (200, {"ok": True, "duplicate": True}))
        run = self.run_of(number, L4, b.delivery, run_b)
        self.assertEqual((run["state"], run["result"]), ("in_progress", "running"))
        self.assertNotIn("ended", self.dispatch_row(b.delivery, L4))
        self.settle()
        self.assertEqual([c["status"] for c in self.checks_for(b.sha, L4)], ["in_progress"])

    def test_a_rerun_of_the_newest_run_is_not_superseded_by_its_own_attempt(self):
        number = new_pr_number()
        self.open_pr(number=number, repos=[L4])
        b = self.open_pr(action="synchronize", number=number, repos=[L4])
        run = new_run_id()
        self.assertOk(self.say(L4, b, "in_progress", run_id=run), "in_progress")
        self.assertOk(self.say(L4, b, "completed", run_id=run, conclusion="failure"), "completed")
        for status in ("in_progress", "completed"):
            self.assertOk(self.say(L4, b, status, run_id=run, run_attempt=2), status)
        attempts = sorted(self.pr_runs(number, L4, b.delivery), key=lambda r: r["run_attempt"])
        self.assertEqual([(r["run_attempt"], r["result"], r.get("ended")) for r in attempts],
                         [(1, "failure", None), (2, "success", None)])
        checks = self.wait_checks(b.sha, 4, L4)
        self.assertEqual([(c["status"], c["conclusion"]) for c in checks],
                         [("in_progress", None), ("completed", "failure"),
                          ("in_progress", None), ("completed", "success")])

    def test_a_reopened_pr_with_the_same_head_supersedes_nothing(self):
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4])
        run = new_run_id()
        self.assertOk(self.say(L4, a, "in_progress", run_id=run), "in_progress")
        self.open_pr(action="reopened", sha=a.sha, number=number, repos=[L4])
        self.assertEqual(self.run_of(number, L4, a.delivery, run)["result"], "running")
        self.assertNotIn("ended", self.dispatch_row(a.delivery, L4))

    def test_a_queued_older_dispatch_is_withdrawn_never_sent(self):
        self.s.gh.fault_5xx(path_re=r"^/repos/sup/l1/dispatches$", count=1)
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4])
        row = wait_until(lambda: (lambda r: r if r["attempts"] == 1 else None)(
            self.dispatch_row(a.delivery, L1)))
        self.assertEqual((row["state"], row["last_status"]), ("queued", 502), row)
        b = self.open_pr(action="synchronize", number=number, repos=[L4, L1])
        row = self.dispatch_row(a.delivery, L1)
        self.assertEqual((row["state"], row["dispatch_state"], row["ended"]),
                         ("withdrawn", "withdrawn",
                          {"reason": "superseded", "by": b.delivery}), row)
        self.advance(3 * 3600)  # past its retry time: it stays withdrawn
        self.settle()
        sent = [d for d in self.s.gh.dispatches() if d["repo"] == L1]
        self.assertEqual([d["client_payload"]["delivery_id"] for d in sent], [b.delivery])
        self.assertEqual(self.dispatch_row(a.delivery, L1)["state"], "withdrawn")
        html = self.s.relay.get("/crcr/deliveries/%s" % a.delivery).body.decode()
        self.assertIn("state-withdrawn", html)
        self.assertIn('data-ended="superseded"', html)

    def test_the_hud_shows_superseded_runs_as_superseded_not_failed(self):
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4])
        run = new_run_id()
        self.assertOk(self.say(L4, a, "in_progress", run_id=run), "in_progress")
        self.open_pr(action="synchronize", number=number, repos=[L4])
        self.assertEndedAnswer(self.say(L4, a, "completed", run_id=run, conclusion="failure"),
                               "completed", "superseded")
        html = self.s.relay.get("/crcr/pr/%d" % number).body.decode()
        chips = re.findall(r'class="chip (chip-[a-z_]+)"[^>]*>([^<]*)<', html)
        self.assertIn(("chip-superseded", "superseded"), chips)
        self.assertNotIn("chip-failure", [c for c, _ in chips])
        blocking = self.api("/api/v1/pr/%d/blocking?sha=%s" % (number, a.sha))
        self.assertEqual(blocking["blocking"], [])
        self.assertEqual(self.health(L4)["failure"], 0)


class SeveralInstancesTest(SupersedeMixin, unittest.TestCase):

    def test_a_dispatch_stored_by_one_instance_ends_a_run_another_recorded(self):
        if self.s.relay.store_uri.startswith("sqlite:"):
            self.skipTest("several instances need the PostgreSQL store (CRCR_E2E_PG_URI)")
        env = dict(self.s.relay.extra_env, CRCR_STORE=self.s.relay.store_uri)
        second = R.Relay(env=env, allowlist=ALLOWLIST, clock=self.s.relay.clock)
        self.addCleanup(second.close)
        second.start()
        number = new_pr_number()
        a = self.open_pr(number=number, repos=[L4])
        run = new_run_id()
        body = self.body(a.cp(L4), "in_progress", run_id=run)
        r = second.post("/github/callback", R.compact(body),
                        {"Content-Type": "application/json",
                         "Authorization": "Bearer " + self.token(L4)})
        self.assertEqual(r.status, 200, r.body)
        obj = R.load_example_obj("pull_request.synchronize")
        obj["number"] = obj["pull_request"]["number"] = number
        obj["pull_request"]["head"]["sha"] = new_sha()
        r = second.webhook("pull_request", R.compact(obj))
        self.assertEqual(r.status, 202, r.body)
        self.assertRunEnded(self.run_of(number, L4, a.delivery, run), "superseded")
        self.wait_checks(a.sha, 2, L4)


if __name__ == "__main__":
    unittest.main()
