"""Nothing lost at the front door (issue 23, §5.7): the reconciler reads the App's webhook delivery
log of the fake GitHub and has GitHub redeliver what the relay never stored.

- Relay down, nothing lost: with the relay stopped, the fake sends 20 upstream PR webhooks (failed
  deliveries: "failed to connect"), one more whose redeliveries will keep failing, and two of
  events the relay does not handle; 4 webhooks sent while it ran had succeeded. The log is served
  8 per page (3 pages and more). The relay starts: every one of the 20 is redelivered once (same
  guid) and dispatched once to every target; the 4 and the unhandled ones are never redelivered;
  the doomed guid is asked for 3 times over 3 passes (the test moves the relay's clock to the next
  passes) and never a 4th. The time from start-up to the last dispatch is printed, not asserted.
- Two instances on one PostgreSQL store: each guid is asked for once.
- 503 then recovered: while the store refuses new deliveries (a trigger on its deliveries table)
  webhooks are answered 503; once the store is back the next pass recovers them.

Deterministic: waits are on events (the fake's records, the relay's pass counters in /metrics);
time is moved (tests/support/testclock.py), never waited for. Runs on SQLite and, with
CRCR_E2E_PG_URI, on PostgreSQL (the two-instance test needs PostgreSQL and is skipped without it).
"""

import json
import os
import re
import sqlite3
import time
import unittest
import uuid
from collections import Counter

import fakegh as F
import relay as R
from waiting import wait_until

APP_ID = 424242
DISPATCH_PATH = r"^/repos/[^/]+/[^/]+/dispatches$"
REDELIVER_PATH = r"^/app/hook/deliveries/(\d+)/attempts$"
PER_PAGE_CAP = 8
PERIOD_S = 300


def app_env(gh, extra=None):
    env = {
        "GITHUB_APP_ID": str(APP_ID),
        "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
        "GITHUB_API_URL": gh.url,
        "CRCR_RETRY_BASE_MS": "200",
        "CRCR_RETRY_MAX_MS": "2000",
        "CRCR_RECONCILE_SECONDS": str(PERIOD_S),
    }
    env.update(extra or {})
    return env


def pr_payload(number, action="opened"):
    p = R.load_example_obj("pull_request.opened")
    p["action"] = action
    p["number"] = number
    p["pull_request"]["number"] = number
    return p


def metric(text, name, labels=None):
    """The value of one sample of the text exposition (0 when absent)."""
    want = "" if not labels else "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(name + want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class ReconcileBase(unittest.TestCase):
    def setUp(self):
        with open(R.APP_PUB, encoding="ascii") as f:
            pub = f.read()
        self.gh = F.FakeGitHub(APP_ID, pub, hook_per_page_cap=PER_PAGE_CAP)
        self.gh.start()
        self.addCleanup(self.gh.stop)

    def relay(self, port=None, env=None, clock=None, start=True):
        r = R.Relay(env=app_env(self.gh, env), clock=clock)
        self.addCleanup(r.close)
        self.addCleanup(R.check_clean_exit, self, r)  # runs first: SIGTERM, exit 0, no report
        if start:
            r.start(port=port)
        return r

    def advance(self, r, seconds):
        """Moves the relay's clock and the fake's together (JWT and token times)."""
        r.clock.advance(seconds)
        self.gh.time_offset = r.clock.offset_ms / 1000.0

    def passes(self, r):
        m = r.get("/metrics").body.decode()
        return {k: metric(m, "crcr_reconcile_passes_total", {"result": k})
                for k in ("ok", "failed", "skipped")}

    def wait_passes(self, r, n, result="ok", timeout=120.0):
        """Waits until relay `r` has ended at least n passes with `result`."""
        got = wait_until(lambda: (lambda g: g if g[result] >= n else None)(self.passes(r)),
                         timeout)
        if got:
            return got
        self.fail("relay did not end %d %s reconciler passes within %.0f s: %r; log:\n%s"
                  % (n, result, timeout, self.passes(r), r.log_tail(30)))

    def asks(self):
        """Counter guid -> redelivery POSTs the relay made (answered 202)."""
        c = Counter()
        for rec in self.gh.requests("POST", REDELIVER_PATH):
            if rec.status == 202:
                c[self.gh.hook_guid_of(re.match(REDELIVER_PATH, rec.path).group(1))] += 1
        return c

    def wait_dispatched(self, guids, targets=R.DEFAULT_TARGETS, timeout=30.0, relay=None):
        """Waits until every guid has a dispatch to every target; returns the dispatches."""
        want = {(g, t) for g in guids for t in targets}
        deadline = time.monotonic() + timeout
        while True:
            ds = self.gh.dispatches()
            have = {(d["client_payload"].get("delivery_id"), d["repo"]) for d in ds}
            if want <= have:
                return ds
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail("missing dispatches: %d of %d; log:\n%s"
                          % (len(want - have), len(want), relay.log_tail(40) if relay else ""))
            self.gh.wait_dispatches(len(ds) + 1, timeout=min(left, 1.0))


class RelayDownTest(ReconcileBase):
    def test_relay_down_nothing_lost(self):
        port = R.free_port()
        r = self.relay(start=False)
        self.gh.hook_target("http://127.0.0.1:%d/github/webhook" % port, r.secret)
        r.start(port=port)
        self.wait_passes(r, 1)
        ok = [self.gh.send_webhook("pull_request", pr_payload(1000 + i)) for i in range(4)]
        self.assertEqual([a["status_code"] for a in ok], [202] * 4)
        self.wait_dispatched([a["guid"] for a in ok])
        r.stop()

        lost = [self.gh.send_webhook("pull_request", pr_payload(i)) for i in range(1, 21)]
        doomed = self.gh.send_webhook("pull_request", pr_payload(99, "synchronize"))
        self.gh.fail_redelivery(doomed["guid"])
        unhandled = [self.gh.send_webhook("pull_request", pr_payload(98, "assigned")),
                     self.gh.send_webhook("issues", {"action": "opened"})]
        for a in lost + [doomed] + unhandled:
            self.assertEqual((a["status_code"], a["status"]), (0, "failed to connect"))
        self.assertGreaterEqual(len(self.gh.hook_attempts()) / PER_PAGE_CAP, 3)
        lost_guids = [a["guid"] for a in lost]

        t0 = time.monotonic()
        r.start(port=port)
        ds = self.wait_dispatched(lost_guids, relay=r)
        last = max(d["time"] for d in ds if d["client_payload"]["delivery_id"] in lost_guids)
        print("\nrelay down, nothing lost: %d webhooks redelivered and dispatched to %d targets; "
              "start-up to the last dispatch %.2f s" % (len(lost), len(R.DEFAULT_TARGETS),
                                                        last - t0))
        self.wait_passes(r, 1)
        self.gh.wait_hook_attempts(1, guid=doomed["guid"], redelivery=True)

        # Every lost webhook redelivered once (same guid), dispatched once per target.
        asks = self.asks()
        self.assertEqual({g: asks[g] for g in lost_guids}, {g: 1 for g in lost_guids})
        for g in lost_guids:
            # The fake records an attempt when the relay's answer reaches it, which may be after
            # the dispatch it caused: await the record.
            self.gh.wait_hook_attempts(1, guid=g, redelivery=True)
            red = self.gh.hook_attempts(guid=g, redelivery=True)
            self.assertEqual([a["status_code"] for a in red], [202])
        per_pair = Counter((d["client_payload"]["delivery_id"], d["repo"]) for d in ds)
        self.assertEqual({per_pair[(g, t)] for g in lost_guids for t in R.DEFAULT_TARGETS}, {1})
        # Never the ones that had succeeded, nor events the relay does not handle.
        for a in ok + unhandled:
            self.assertEqual(asks[a["guid"]], 0, a)

        # The doomed guid: one ask per pass, three in all.
        for n in (2, 3):
            before = self.passes(r)["ok"]
            self.advance(r, PERIOD_S)
            self.wait_passes(r, before + 1)
            self.gh.wait_hook_attempts(n, guid=doomed["guid"], redelivery=True)
            self.assertEqual(self.asks()[doomed["guid"]], n)
        for _ in range(2):
            before = self.passes(r)["ok"]
            self.advance(r, PERIOD_S)
            self.wait_passes(r, before + 1)
        asks = self.asks()
        self.assertEqual(asks[doomed["guid"]], 3)
        self.assertEqual({g: asks[g] for g in lost_guids}, {g: 1 for g in lost_guids})
        print("redeliveries per guid: %s; the failing guid: %d"
              % (dict(Counter(asks[g] for g in lost_guids)), asks[doomed["guid"]]))

        # What the operator sees.
        rc, out, err = r.cli(["deliveries", "list", "--recovered", "--limit", "100",
                              "--format", "json"])
        self.assertEqual(rc, 0, err)
        recs = {x["guid"]: x for x in json.loads(out)}
        self.assertEqual({recs[g]["state"] for g in lost_guids}, {"recovered"})
        self.assertEqual((recs[doomed["guid"]]["asks"], recs[doomed["guid"]]["state"]),
                         (3, "asked"))
        self.assertEqual(set(recs), set(lost_guids) | {doomed["guid"]})
        rc, out, _ = r.cli(["deliveries", "show", lost_guids[0], "--format", "json"])
        self.assertTrue(json.loads(out)["delivery"]["recovered"])
        rc, out, _ = r.cli(["deliveries", "show", ok[0]["guid"], "--format", "json"])
        self.assertFalse(json.loads(out)["delivery"]["recovered"])
        page = r.get("/crcr/deliveries?limit=100").body.decode()
        row = re.search(r'<tr data-delivery="%s">.*?</tr>' % lost_guids[0], page, re.S)
        self.assertIn('class="badge recovered"', row.group(0))
        self.assertIn('data-guid="%s"' % doomed["guid"], page)
        m = r.get("/metrics").body.decode()
        self.assertEqual(metric(m, "crcr_reconcile_redeliveries_total", {"result": "accepted"}),
                         len(lost_guids) + 3)
        self.assertEqual(metric(m, "crcr_reconcile_missing"), 1)  # the doomed one
        self.assertGreater(metric(m, "crcr_reconcile_last_pass_timestamp_seconds"),
                           self.gh.now() - PERIOD_S)
        self.assertEqual(metric(m, "crcr_reconcile_failing"), 0)


class DeepLogTest(ReconcileBase):
    def test_a_log_deeper_than_one_pass_is_finished_by_the_next_pass(self):
        """Lost webhooks under more than one pass's pages (RC_MAX_PAGES = 300) of newer attempts
        are found by the next pass, which reads the backlog first."""
        port = R.free_port()
        r = self.relay(start=False)
        self.gh.hook_target("http://127.0.0.1:%d/github/webhook" % port, r.secret)
        lost = [self.gh.send_webhook("pull_request", pr_payload(700 + i)) for i in range(3)]
        self.advance(r, 2 * 3600)  # the flood comes two hours later
        for i in range(300 * PER_PAGE_CAP):
            self.gh.send_webhook("check_run", {"action": "completed", "n": i})
        r.start(port=port)
        self.wait_passes(r, 1)
        m = r.get("/metrics").body.decode()
        self.assertEqual(metric(m, "crcr_reconcile_backlog"), 1)
        self.assertEqual(self.asks(), Counter())
        self.advance(r, PERIOD_S)
        self.wait_passes(r, 2)
        guids = [a["guid"] for a in lost]
        self.wait_dispatched(guids, relay=r)
        asks = self.asks()
        self.assertEqual(dict(asks), {g: 1 for g in guids})
        pages = len(self.gh.requests("GET", r"^/app/hook/deliveries$"))
        print("\ndeep log: %d attempts, %d pages read in 2 passes, %d lost webhooks recovered"
              % (len(self.gh.hook_attempts()), pages, len(guids)))


class TwoInstancesTest(ReconcileBase):
    def test_two_instances_on_one_postgresql_store_ask_once_per_guid(self):
        if not os.environ.get("CRCR_E2E_PG_URI"):
            self.skipTest("needs PostgreSQL (CRCR_E2E_PG_URI): one SQLite store has one relay")
        a = self.relay(start=False)
        self.gh.hook_target("http://127.0.0.1:1/github/webhook", a.secret)  # nobody there
        lost = [self.gh.send_webhook("push", {"ref": "refs/heads/b%d" % i, "after": "%040x" % i,
                                              "repository": {"full_name": R.UPSTREAM}})
                for i in range(12)]
        a.port = R.free_port()
        self.gh.hook_target("http://127.0.0.1:%d/github/webhook" % a.port, a.secret)
        b = self.relay(env={"CRCR_STORE": a.store_uri}, clock=a.clock, start=False)
        a.start(port=a.port)
        b.start()
        for r in (a, b):
            wait_until(lambda: sum(self.passes(r).values()) >= 1, 120)
        self.wait_dispatched([x["guid"] for x in lost])
        before = [self.passes(r) for r in (a, b)]
        self.advance(a, PERIOD_S)  # both instances move (one clock file)
        for r, p in zip((a, b), before):
            wait_until(lambda: sum(self.passes(r).values()) > sum(p.values()), 120)
        asks = self.asks()
        self.assertEqual({x["guid"]: asks[x["guid"]] for x in lost},
                         {x["guid"]: 1 for x in lost})
        leaders = [self.passes(r)["ok"] > 0 for r in (a, b)]
        print("\ntwo instances: %d guids asked for once each; leader passes %r"
              % (len(lost), [self.passes(r)["ok"] for r in (a, b)]))
        self.assertIn(True, leaders)


class StoreRefusedTest(ReconcileBase):
    def refuse(self, r, on):
        """Makes the store refuse (or accept again) new deliveries: a trigger on `deliveries`."""
        if r.pg_db:
            if on:
                R._psql(r.store_uri, "CREATE FUNCTION crcr_test_refuse() RETURNS trigger AS "
                        "$$BEGIN RAISE EXCEPTION 'test: store refuses'; END$$ LANGUAGE plpgsql")
                R._psql(r.store_uri, "CREATE TRIGGER crcr_test_refuse BEFORE INSERT ON deliveries "
                        "FOR EACH ROW EXECUTE FUNCTION crcr_test_refuse()")
            else:
                R._psql(r.store_uri, "DROP TRIGGER crcr_test_refuse ON deliveries")
            return
        db = sqlite3.connect(r.db_path, timeout=30)
        try:
            if on:
                db.execute("CREATE TRIGGER crcr_test_refuse BEFORE INSERT ON deliveries "
                           "BEGIN SELECT RAISE(ABORT, 'test: store refuses'); END")
            else:
                db.execute("DROP TRIGGER crcr_test_refuse")
            db.commit()
        finally:
            db.close()

    def test_webhooks_answered_503_are_recovered_by_the_next_pass(self):
        r = self.relay()
        self.gh.hook_target(r.url + "/github/webhook", r.secret)
        self.wait_passes(r, 1)
        self.refuse(r, True)
        refused = [self.gh.send_webhook("pull_request", pr_payload(500 + i)) for i in range(3)]
        self.assertEqual([a["status_code"] for a in refused], [503] * 3)
        self.assertEqual(self.gh.dispatches(), [])
        self.refuse(r, False)
        before = self.passes(r)["ok"]
        self.advance(r, PERIOD_S)
        self.wait_passes(r, before + 1)
        guids = [a["guid"] for a in refused]
        ds = self.wait_dispatched(guids)
        asks = self.asks()
        self.assertEqual({g: asks[g] for g in guids}, {g: 1 for g in guids})
        per_pair = Counter((d["client_payload"]["delivery_id"], d["repo"]) for d in ds)
        self.assertEqual({per_pair[(g, t)] for g in guids for t in R.DEFAULT_TARGETS}, {1})
        # The fake records a redelivery's attempt when the relay's answer is back, which can be
        # after the relay's dispatch reached the fake: awaited, not read once.
        for g in guids:
            self.gh.wait_hook_attempts(1, guid=g, redelivery=True)
            self.assertEqual([a["status_code"] for a in self.gh.hook_attempts(guid=g)],
                             [503, 202])


class FailingPassTest(ReconcileBase):
    def test_a_refused_listing_fails_the_pass_with_its_reason_and_the_next_pass_works(self):
        self.gh.add_fault("GET", r"^/app/hook/deliveries$", 403,
                          {"content-type": "application/json"},
                          {"message": "Resource not accessible by integration"}, count=1)
        r = self.relay()
        self.wait_passes(r, 1, result="failed")
        m = r.get("/metrics").body.decode()
        self.assertEqual(metric(m, "crcr_reconcile_failing"), 1)
        self.assertIn("Resource not accessible by integration", r.log_text())
        # The webhook path never waited for it.
        self.assertEqual(r.webhook("pull_request", pr_payload(7)).status, 202)
        self.advance(r, PERIOD_S)
        self.wait_passes(r, 1)
        self.assertEqual(metric(r.get("/metrics").body.decode(), "crcr_reconcile_failing"), 0)

    def test_dry_run_and_zero_seconds_run_no_reconciler(self):
        for env in ({"GITHUB_APP_ID": None, "GITHUB_APP_PRIVATE_KEY_FILE": None},
                    {"CRCR_RECONCILE_SECONDS": "0"}):
            with self.subTest(env=env):
                r = self.relay(env=env)
                self.assertEqual(r.webhook("push", R.load_example("push")).status, 202)
                self.assertEqual(self.gh.requests("GET", r"^/app/hook/deliveries"), [])
                self.assertEqual(sum(self.passes(r).values()), 0)
                r.close()


if __name__ == "__main__":
    unittest.main()
