"""Several relay instances on one PostgreSQL store (issue 6 acceptance), against the fake GitHub
and the loopback OIDC issuer.

- Two relays on one database, webhooks posted alternately (100 deliveries x 10 repos) and both
  transitions of every dispatched run reported to both instances at the same moment: every pair
  is dispatched exactly once, every transition is applied exactly once (one answer without
  "duplicate", one with), and every L4 check run is created exactly once.
- One instance SIGKILLed mid fan-out (every worker of both waiting on a dispatch the fake GitHub
  holds): the other dispatches everything, taking the dead one's rows over by liveness long before
  their lease ends, repeating only what the dead one had in flight, and every transition still
  applies exactly once.
- One instance SIGKILLed in the middle of the callbacks (the reporter holds the second half of
  them until the kill): every transition applies exactly once.
- The same delivery posted to both instances at the same moment: one 202, one duplicate, one set
  of dispatches.
- PostgreSQL stopped under a steady stream of webhooks, until both relays answered 503 to
  webhooks and on /readyz: nothing answered 202 is lost, and both relays serve again once the
  database is back, without a restart. This test runs its own throwaway cluster
  (scripts/pg-test-cluster.sh) so that stopping it disturbs no other test.

The relays, the fake GitHub and the OIDC issuer share one test clock; the default lease
(CRCR_LEASE_SECONDS=120) runs out only where a test moves the clock.

Skipped only when CRCR_TEST_PG_URI is unset (`export CRCR_TEST_PG_URI=$(scripts/pg-test-cluster.sh
start /tmp/pg)`). Each test works in a fresh database created next to the one in the URI.
Needs CRCR_BIN and psql; see tests/support/README.md.
"""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import fakegh as F
import oidc_issuer as O
import relay as R
from testclock import TestClock
from waiting import wait_until

PG_URI = os.environ.get("CRCR_TEST_PG_URI", "")
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLUSTER_SCRIPT = os.path.join(REPO_ROOT, "scripts", "pg-test-cluster.sh")
APP_ID = 424242
DISPATCH_PATH = r"^/repos/[^/]+/[^/]+/dispatches$"
L2_REPOS = ["org%d/repo-l2-%d" % (i % 3, i) for i in range(5)]
L4_REPOS = ["org%d/repo-l4-%d" % (i % 3, i) for i in range(5)]
REPOS = L2_REPOS + L4_REPOS
ALLOWLIST = ("L2:\n" + "".join("  - %s\n" % r for r in L2_REPOS) +
             "L4:\n" + "".join("  - %s\n" % r for r in L4_REPOS))
N_DELIVERIES = 100
WORKERS = 8


def psql(uri, sql):
    """Runs `sql`; returns rows as lists of strings."""
    try:
        return R.psql_rows(uri, sql)
    except R.RelayError as e:
        raise AssertionError(str(e)) from None


def drop_database(uri, name):
    """Best effort (the server may be gone when a test failed mid-outage)."""
    try:
        psql(uri, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
    except (AssertionError, OSError, subprocess.SubprocessError):
        pass


def with_database(uri, name):
    """`uri` pointing at database `name` instead."""
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def pair_counts(gh):
    return Counter((d["client_payload"].get("delivery_id"), d["repo"]) for d in gh.dispatches())


def post_quietly(relay, *args, **kw):
    """relay.webhook(...), or None when the instance does not answer (killed, or busy
    answering slowly while the database is away)."""
    try:
        return relay.webhook(*args, **kw)
    except OSError:
        return None


@unittest.skipUnless(PG_URI, "CRCR_TEST_PG_URI is not set (scripts/pg-test-cluster.sh start DIR)")
class MultiInstanceTest(unittest.TestCase):

    # ------------------------------------------------------------------ set-up

    def fresh_database(self, base_uri):
        name = "crcr_e2e_%s" % uuid.uuid4().hex[:12]
        psql(base_uri, "CREATE DATABASE %s" % name)
        self.addCleanup(drop_database, base_uri, name)
        return with_database(base_uri, name)

    def start_cluster(self, base_uri=None, **env):
        """A fake GitHub, an OIDC issuer and two relays (App mode) on one fresh database."""
        self.db = self.fresh_database(base_uri or PG_URI)
        self.clock = TestClock()
        self.addCleanup(self.clock.close)
        with open(R.APP_PUB, encoding="ascii") as f:
            self.gh = F.FakeGitHub(app_id=APP_ID, public_key=f.read(), clock=self.clock).start()
        self.addCleanup(self.gh.stop)
        self.issuer = O.OIDCIssuer(clock=self.clock).start()
        self.addCleanup(self.issuer.stop)
        relay_env = {
            "GITHUB_APP_ID": str(APP_ID),
            "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
            "GITHUB_API_URL": self.gh.url,
            "CRCR_STORE": self.db,
            "CRCR_OIDC_ISSUERS": self.issuer.url,
            "CRCR_RETRY_BASE_MS": "200",
            "CRCR_RETRY_MAX_MS": "1000",
            "MAX_DISPATCH_WORKERS": str(WORKERS),
            "RATE_LIMIT_PER_MIN": "1000000",
            "CRCR_LOG": "info",
        }
        relay_env.update(env)
        self.relays = []
        for _ in range(2):
            r = R.Relay(env=relay_env, allowlist=ALLOWLIST, clock=self.clock)
            self.addCleanup(r.close)
            self.addCleanup(R.check_clean_exit, self, r)  # runs before close
            r.start()
            self.relays.append(r)
        self.tokens = {repo: self.issuer.token(repo) for repo in REPOS}
        return self.relays

    def diag(self, n=25):
        out = []
        for i, r in enumerate(getattr(self, "relays", [])):
            out.append("relay %d log:\n%s" % (i, r.log_tail(n)))
        return "\n" + "\n".join(out)

    def post_alternately(self, n, payload=None):
        """Posts n pull_request webhooks (8 at a time), alternating instances; returns their
        delivery ids."""
        payload = payload or R.load_example("pull_request.opened")
        deliveries = []
        with ThreadPoolExecutor(8) as pool:
            answers = pool.map(lambda i: self.relays[i % 2].webhook("pull_request", payload),
                               range(n))
            for i, r in enumerate(answers):
                self.assertEqual(r.status, 202, "webhook %d: %r%s"
                                 % (i, r.body[:300], self.diag()))
                self.assertEqual(sorted(r.json()["queued"]), sorted(REPOS))
                deliveries.append(r.delivery)
        return deliveries

    def wait_pairs(self, expected, timeout, step=0.0):
        ok = wait_until(lambda: set(expected) <= set(pair_counts(self.gh)), timeout, 0.2,
                        self.clock, step)
        if not ok:
            missing = sorted(set(expected) - set(pair_counts(self.gh)))
            self.fail("%d of %d pairs never dispatched, e.g. %s%s"
                      % (len(missing), len(expected), missing[:3], self.diag()))

    # ------------------------------------------------------------------ callbacks

    def callback_body(self, cp, status, job):
        pr = cp["payload"]["pull_request"]
        workflow = {"status": status, "run_id": 7000000000 + job, "name": "crcr-ci",
                    "job_name": "job-%d" % job}
        if status == "completed":
            workflow["conclusion"] = "success"
        return json.dumps({
            "event_type": cp["event_type"],
            "delivery_id": cp["delivery_id"],
            "callback_token": cp["callback_token"],
            "payload": {"pull_request": {"number": pr["number"],
                                         "head": {"sha": pr["head"]["sha"]}}},
            "workflow": workflow,
        }).encode("utf-8")

    def post_callback(self, relay, repo, body):
        """Answer (status, json) of one callback; None when the instance is gone."""
        headers = {"Authorization": "Bearer " + self.tokens[repo],
                   "Content-Type": "application/json"}
        try:
            r = relay.post("/github/callback", body, headers, timeout=20)
        except OSError:
            return None
        try:
            doc = json.loads(r.body)
        except ValueError:
            doc = {"raw": r.body[:200].decode("latin-1")}
        return r.status, doc

    def report_both(self, repo, body, live):
        """Posts the same callback to every live instance at the same moment. Returns the
        answers that arrived; an instance that is gone is replaced by a live one (as a load
        balancer would), so every transition reaches the store at least once."""
        go = threading.Barrier(len(live))
        answers = [None] * len(live)

        def send(i):
            go.wait()
            answers[i] = self.post_callback(live[i], repo, body)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(live))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = [a for a in answers if a is not None]
        if not got:
            for r in self.relays:
                if r.running():
                    a = self.post_callback(r, repo, body)
                    if a is not None:
                        got.append(a)
                        break
        return got

    def report_every_dispatch(self, deliveries, live, both_every=1, gate=None):
        """in_progress then completed for every dispatched pair. Every `both_every`-th pair is
        posted to all `live` instances at the same moment, the others to one instance in turn.
        `gate` (done_at, hold_from, done, go): pairs from `hold_from` on wait for `go`, and `done`
        is set once `done_at` pairs are reported. Returns {(delivery, repo, status): [answers]}."""
        job_of = {d: i for i, d in enumerate(deliveries)}
        seen = {}
        for d in self.gh.dispatches():
            cp = d["client_payload"]
            seen.setdefault((cp["delivery_id"], d["repo"]), cp)
        out = {}

        finished = [0]
        lock = threading.Lock()

        def one(args):
            n, ((delivery, repo), cp) = args
            if gate and n >= gate[1]:
                gate[3].wait(120)
            res = {}
            for k, status in enumerate(("in_progress", "completed")):
                targets = live() if callable(live) else live
                if n % both_every:
                    targets = [targets[(n + k) % len(targets)]]
                body = self.callback_body(cp, status, job_of[delivery])
                res[status] = self.report_both(repo, body, targets)
            with lock:
                finished[0] += 1
                if gate and finished[0] >= gate[0]:
                    gate[2].set()
            return delivery, repo, res

        with ThreadPoolExecutor(16) as pool:
            for delivery, repo, res in pool.map(one, enumerate(sorted(seen.items()))):
                for status, answers in res.items():
                    out[(delivery, repo, status)] = answers
        return out

    def assertAppliedOnce(self, answers, allow_lost_answer=False):
        """Every transition: every answer 200; exactly one without "duplicate" (at most one when
        an instance may have died between commit and answer), the others duplicates."""
        bad = []
        for key, got in answers.items():
            statuses = [a[0] for a in got]
            applied = [a for a in got if a[0] == 200 and not a[1].get("duplicate")]
            if set(statuses) != {200} or len(applied) > 1 or (
                    len(applied) == 0 and not allow_lost_answer):
                bad.append((key, got))
        self.assertEqual(bad[:5], [], "%d transitions not applied exactly once%s"
                         % (len(bad), self.diag()))

    def assertRunsCompleted(self, deliveries):
        rows = psql(self.db, "SELECT state, count(*) FROM runs GROUP BY state")
        self.assertEqual({s: int(n) for s, n in rows}, {"completed": len(deliveries) * len(REPOS)})

    def wait_idle(self, timeout=30):
        """Nothing queued or running in the shared outbox (asked of a live instance)."""
        live = [r for r in self.relays if r.running()]
        self.assertTrue(live and live[0].wait_outbox_idle(timeout),
                        "the outbox never emptied" + self.diag())

    def assertCheckRunsOnce(self, deliveries):
        """One check run per L4 transition: (name, status) each created exactly once."""
        counts = Counter((c["name"], c.get("status")) for c in self.gh.check_runs())
        want = len(deliveries) * len(L4_REPOS) * 2
        ok = wait_until(lambda: len(self.gh.check_runs()) >= want, 60, 0.2)
        counts = Counter((c["name"], c.get("status")) for c in self.gh.check_runs())
        self.assertTrue(ok, "%d of %d check runs%s" % (len(self.gh.check_runs()), want,
                                                       self.diag()))
        self.assertEqual(len(counts), want)
        self.assertEqual(set(counts.values()), {1}, [k for k, v in counts.items() if v > 1][:5])

    # ------------------------------------------------------------------ tests

    def test_two_instances_dispatch_every_pair_once_and_apply_every_transition_once(self):
        a, b = self.start_cluster()
        deliveries = self.post_alternately(N_DELIVERIES)
        expected = {(d, t) for d in deliveries for t in REPOS}
        self.assertEqual(len(expected), 1000)
        self.wait_pairs(expected, timeout=90)
        self.wait_idle()
        counts = pair_counts(self.gh)
        self.assertEqual(set(counts), expected)
        self.assertEqual({p: c for p, c in counts.items() if c > 1}, {},
                         "pairs dispatched more than once")
        # Both instances did part of the work (the outbox is shared, not partitioned).
        sent = [sum(1 for line in r.log_text().splitlines()
                    if "event=outbox.sent" in line and "kind=dispatch" in line)
                for r in self.relays]
        self.assertTrue(all(n > 0 for n in sent), "sent per instance: %s" % sent)

        answers = self.report_every_dispatch(deliveries, [a, b], both_every=4)
        self.assertEqual(len(answers), 2000)
        self.assertEqual(sum(len(x) for x in answers.values()), 2000 + 500)
        self.assertAppliedOnce(answers)
        self.assertRunsCompleted(deliveries)
        self.assertCheckRunsOnce(deliveries)
        self.assertTrue(a.running() and b.running())

    def test_sigkill_of_one_instance_loses_nothing(self):
        # The default lease: the dead instance's rows must come back by liveness, not by lease.
        a, b = self.start_cluster(CRCR_LEASE_SECONDS="120")
        # After 250 dispatches the fake holds every further answer: the kill lands when every
        # worker of both instances waits on GitHub, whatever the machine's speed.
        hold = self.gh.hold("POST", DISPATCH_PATH, count=None, skip=250)
        self.addCleanup(hold.release)
        deliveries = self.post_alternately(N_DELIVERIES)
        expected = {(d, t) for d in deliveries for t in REPOS}
        self.assertTrue(wait_until(lambda: len(hold.held) >= 2 * WORKERS, 60),
                        "the workers never all waited on GitHub" + self.diag())
        a.kill()
        in_flight = {(json.loads(x.body)["client_payload"]["delivery_id"],
                      "/".join(x.path.split("/")[2:4])) for x in hold.held}
        self.assertEqual(len(in_flight), 2 * WORKERS)
        hold.release()  # GitHub carried out A's requests too: B sends A's WORKERS pairs again
        self.wait_pairs(expected, timeout=90)
        self.assertTrue(wait_until(lambda: sum(c > 1 for c in pair_counts(self.gh).values())
                                   >= WORKERS, 60), "A's rows were not taken over" + self.diag())
        self.wait_idle()
        counts = pair_counts(self.gh)
        self.assertEqual(set(counts), expected)
        repeats = {p for p, c in counts.items() if c > 1}
        self.assertLessEqual(repeats, in_flight, "a repeat of a pair that was not in flight")
        self.assertEqual(len(repeats), WORKERS,
                         "other repeats than the dispatches the dead instance had in flight")
        self.assertEqual(b.log_text().count("reason=holder_gone"), WORKERS,
                         "taken over by liveness, not after the lease")

        # Callbacks: B is the only live instance; each transition is posted twice at once.
        answers = self.report_every_dispatch(deliveries, [b, b], both_every=10)
        self.assertAppliedOnce(answers)
        self.assertRunsCompleted(deliveries)
        self.assertCheckRunsOnce(deliveries)
        self.assertTrue(b.running())

    def test_sigkill_during_callbacks_applies_every_transition_once(self):
        a, b = self.start_cluster()
        deliveries = self.post_alternately(20)
        expected = {(d, t) for d in deliveries for t in REPOS}
        self.wait_pairs(expected, timeout=60)
        self.wait_idle()
        # The reporter holds the second half of the pairs until A is dead, and A is killed once
        # all but the last few of the first half are reported (those may still be in flight):
        # the kill lands in the middle of the callbacks by construction.
        half = len(expected) // 2
        first_half_done, go = threading.Event(), threading.Event()
        self.addCleanup(go.set)

        def killer():
            if first_half_done.wait(120):
                a.kill()
            go.set()

        k = threading.Thread(target=killer)
        k.start()
        answers = self.report_every_dispatch(
            deliveries, lambda: [r for r in (a, b) if r.running()] or [b], both_every=2,
            gate=(half - 8, half, first_half_done, go))
        k.join()
        self.assertFalse(a.running())
        # A transition whose answer died with A shows up as a duplicate on B: applied once.
        self.assertAppliedOnce(answers, allow_lost_answer=True)
        self.assertRunsCompleted(deliveries)
        self.assertTrue(b.running())

    def test_same_delivery_posted_to_both_at_once_dispatches_once(self):
        a, b = self.start_cluster()
        payload = R.load_example("pull_request.opened")
        deliveries = []
        for _ in range(20):
            delivery = str(uuid.uuid4())
            go = threading.Barrier(2)
            answers = [None, None]

            def send(i, relay, delivery=delivery, go=go, answers=answers):
                go.wait()
                answers[i] = relay.webhook("pull_request", payload, delivery=delivery)

            threads = [threading.Thread(target=send, args=(i, r)) for i, r in enumerate((a, b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            statuses = sorted(r.status for r in answers)
            self.assertEqual(statuses, [200, 202], [r.body for r in answers])
            dup = [r for r in answers if r.status == 200][0]
            self.assertEqual(dup.json(), {"ok": True, "duplicate": True})
            deliveries.append(delivery)
        expected = {(d, t) for d in deliveries for t in REPOS}
        self.wait_pairs(expected, timeout=60)
        self.wait_idle()
        counts = pair_counts(self.gh)
        self.assertEqual(set(counts), expected)
        self.assertEqual(set(counts.values()), {1})

    def test_database_outage_answers_503_loses_nothing_and_recovers_without_restart(self):
        pgdir = tempfile.mkdtemp(prefix="crcr-e2e-pg-")
        self.addCleanup(shutil.rmtree, pgdir, True)
        self.addCleanup(subprocess.run, [CLUSTER_SCRIPT, "destroy", pgdir],
                        capture_output=True, timeout=120)

        def cluster(cmd):
            p = subprocess.run([CLUSTER_SCRIPT, cmd, pgdir], capture_output=True, text=True,
                               timeout=300)  # a bound for a hung server only
            self.assertEqual(p.returncode, 0, "pg-test-cluster.sh %s: %s" % (cmd, p.stderr))
            return p.stdout.strip()

        uri = cluster("start")
        a, b = self.start_cluster(base_uri=uri)
        pids = [r.proc.pid for r in self.relays]
        payload = R.load_example("pull_request.opened")
        # (sent at, answered at, status or None, delivery, instance), monotonic: only to order
        # the answers against the outage, never to bound them
        log = []
        stop = threading.Event()

        def stream():
            i = 0
            while not stop.is_set():
                sent = time.monotonic()
                r = post_quietly(self.relays[i % 2], "pull_request", payload)
                log.append((sent, time.monotonic(), r.status if r else None,
                            r.delivery if r else None, i % 2))
                i += 1
                time.sleep(0.05)  # the stream's pace, not a wait for the relays

        def answered(status, after, each=1):
            """At least `each` answers `status` from each instance to webhooks sent after
            `after`."""
            got = [x[4] for x in list(log) if x[2] == status and x[0] > after]
            return all(got.count(k) >= each for k in (0, 1))

        t = threading.Thread(target=stream)
        t.start()
        try:
            start_at = time.monotonic()
            self.assertTrue(wait_until(lambda: answered(202, start_at, 3), 30),
                            "no webhook accepted before the outage" + self.diag())
            down_at = time.monotonic()
            cluster("stop")
            stopped_at = time.monotonic()
            # While it is away: webhooks 503, /readyz 503 (on both instances).
            self.assertTrue(wait_until(lambda: all(r.get("/readyz").status == 503
                                                   for r in (a, b)), 30),
                            "/readyz did not fail during the outage" + self.diag())
            self.assertTrue(wait_until(lambda: answered(503, stopped_at, 2), 30),
                            "webhooks were not answered 503 during the outage" + self.diag())
            restart_at = time.monotonic()
            cluster("start")
            up_at = time.monotonic()
            # The bound only ends a broken test: the relays reconnect without a restart.
            back = wait_until(lambda: answered(202, up_at, 3)
                              and all(r.get("/readyz").status == 200 for r in (a, b)), 60, 0.1)
        finally:
            stop.set()
            t.join()
        self.assertTrue(back, "not serving again after the database's return" + self.diag())
        during = [s for t0, t1, s, _, _ in log if t0 > stopped_at and t1 < restart_at]
        self.assertTrue(during, "no webhook was sent during the outage")
        self.assertEqual(set(during) - {503, None}, set(),
                         "answers while the database was away: %s" % Counter(during))
        self.assertIn(503, during)
        accepted = [d for _, _, s, d, _ in log if s == 202]
        before = [d for _, t1, s, d, _ in log if s == 202 and t1 < down_at]
        after = [d for t0, _, s, d, _ in log if s == 202 and t0 > up_at]
        self.assertTrue(before and after)
        # Nothing answered 202 is lost: every pair is dispatched (at least once; a dispatch
        # whose outcome could not be recorded during the outage is repeated after its lease,
        # which the moved clock runs out).
        self.wait_pairs({(d, r) for d in accepted for r in REPOS}, timeout=60, step=5)
        # The same processes, never restarted.
        self.assertEqual([r.proc.pid for r in self.relays], pids)
        self.assertTrue(a.running() and b.running())


if __name__ == "__main__":
    unittest.main()
