"""Crash safety and crash recovery of the durable dispatch: the real relay (App mode) is SIGKILLed
mid fan-out, against the fake GitHub, on SQLite or (with CRCR_E2E_PG_URI) on PostgreSQL.

The kill lands in the middle by construction: the fake answers the first PASS dispatches, then
carries out every further one but holds its answer back (fakegh's hold), and a relay is killed
once each worker waits on a held answer. At that moment the held requests are exactly what the
relays have in flight (every earlier answer was recorded: a worker records its outcome before it
claims its next row), and GitHub has carried them out, so each pair the dead relay had in flight
is dispatched exactly twice and every other pair exactly once.

- The only instance SIGKILLed and restarted: every pair is dispatched without the default lease
  (CRCR_LEASE_SECONDS=120) running out (the clock does not move, and no row is reclaimed as
  lease_expired): SQLite re-queues the dead process's rows at start, PostgreSQL sees its instance
  gone.
- One of two instances on one PostgreSQL database SIGKILLed: the other dispatches every pair,
  taking the dead instance's rows over by liveness, not by their lease (runs in the
  CRCR_E2E_PG_URI pass of scripts/test.sh; skipped without it).
- A worker whose lease ran out (moved past it while the worker's request is held) sends
  nothing.

Needs CRCR_BIN; see tests/support/README.md. Helpers come from test_dispatch.py.
"""

import json
import os
import unittest
from collections import Counter

import relay as R
from test_dispatch import (DISPATCH_EXAMPLES, DISPATCH_PATH, GitHubRelayMixin, allowlist_yaml,
                           app_env, pair_counts)
from waiting import wait_until

WORKERS = 8
N_WEBHOOKS = 12
REPOS = ["org%d/repo%02d" % (i % 4, i) for i in range(8)]  # 4 installations, 96 pairs
PASS = 24  # dispatch requests answered before the fake starts holding


def pair_of(rec):
    parts = rec.path.split("/")
    return json.loads(rec.body)["client_payload"]["delivery_id"], parts[2] + "/" + parts[3]


class CrashTestBase(GitHubRelayMixin, unittest.TestCase):
    def post_all(self):
        deliveries = []
        for i in range(N_WEBHOOKS):
            event, name = DISPATCH_EXAMPLES[i % len(DISPATCH_EXAMPLES)]
            r = self.post_ok(event, R.load_example(name))
            self.assertEqual(len(r.json()["queued"]), len(REPOS))
            deliveries.append(r.delivery)
        return deliveries

    def hold_dispatches(self):
        """From the (PASS+1)-th dispatch on, the fake carries each out and holds its answer."""
        hold = self.gh.hold("POST", DISPATCH_PATH, count=None, skip=PASS)
        self.addCleanup(hold.release)
        return hold

    def kill_mid_fan_out(self, victim, hold, workers):
        """Kills `victim` once `workers` answers are held (every worker of every relay waits on
        GitHub), then lets the fake answer them. Returns the pairs held."""
        self.assertTrue(wait_until(lambda: len(hold.held) >= workers, 60),
                        "the workers never all waited on GitHub" + self.diag())
        victim.kill()
        self.assertEqual(len(hold.held), workers)
        in_flight = {pair_of(x) for x in hold.held}
        self.assertEqual(len(in_flight), workers)
        answered = [x for x in self.gh.requests("POST", DISPATCH_PATH) if x.status == 204]
        self.assertEqual(len(answered), PASS)
        held = list(hold.held)
        hold.release()
        self.assertTrue(wait_until(lambda: all(x.answered for x in held), 10),
                        "the held answers never left the fake")
        return in_flight

    def check_recovery(self, expected, repeats_due, relays):
        """Every pair dispatched, and `repeats_due` pairs a second time (the dead relay's pairs in
        flight: the fake answered them after the kill), with the clock never moved: none of the
        `relays` took a row over because its lease ran out. Returns the pairs dispatched
        twice."""
        def done():
            counts = pair_counts(self.gh)
            return expected <= set(counts) and sum(c > 1 for c in counts.values()) >= repeats_due

        self.assertTrue(wait_until(done, 60), "not every pair dispatched; %d repeats"
                        % sum(c > 1 for c in pair_counts(self.gh).values()) + self.diag())
        self.quiesce(step=0, relay=relays[0])
        counts = pair_counts(self.gh)
        self.assertEqual(set(counts), expected)
        self.assertLessEqual(set(counts.values()), {1, 2})
        self.assertEqual(self.clock.offset_ms, 0)
        for r in relays:
            self.assertNotIn("reason=lease_expired", r.log_text(), "taken over by the lease")
        return {p for p, c in counts.items() if c > 1}


class CrashTest(CrashTestBase):
    def test_sigkill_of_the_only_instance_recovers_in_seconds_and_repeats_only_in_flight(self):
        self.start_pair(allowlist=allowlist_yaml(l1=REPOS[:4], l2=REPOS[4:]),
                        env={"MAX_DISPATCH_WORKERS": str(WORKERS)})
        hold = self.hold_dispatches()
        deliveries = self.post_all()
        expected = {(d, t) for d in deliveries for t in REPOS}
        in_flight = self.kill_mid_fan_out(self.relay, hold, WORKERS)

        self.relay.start()  # same store; the default lease (120 s) would take two minutes
        self.assertEqual(self.check_recovery(expected, WORKERS, [self.relay]), in_flight,
                         "repeats other than the dispatches in flight at the kill")
        log = self.relay.log_text()
        if self.relay.pg_db:
            self.assertEqual(log.count("reason=holder_gone"), WORKERS, "taken over by liveness")
        else:
            self.assertIn("event=store.recovered rows=%d" % WORKERS, log)
        for d in deliveries[::5]:
            states = Counter(r["state"] for r in self.rows(d).values())
            self.assertEqual(states, Counter({"sent": len(REPOS)}), d)
        self.assertTrue(self.relay.running())


@unittest.skipUnless(os.environ.get("CRCR_E2E_PG_URI"),
                     "PostgreSQL only: runs in the CRCR_E2E_PG_URI pass of scripts/test.sh")
class TwoInstanceCrashTest(CrashTestBase):
    def test_sigkill_of_one_of_two_instances_the_other_takes_over_in_seconds(self):
        env = {"MAX_DISPATCH_WORKERS": str(WORKERS)}
        allowlist = allowlist_yaml(l1=REPOS)
        a, gh = self.start_pair(allowlist=allowlist, env=env)
        # A second instance on A's database (A's close drops it, after B has stopped).
        b = R.Relay(env=app_env(gh, dict(env, CRCR_STORE=a.store_uri)), allowlist=allowlist,
                    clock=self.clock)
        self.addCleanup(b.close)
        self.addCleanup(R.check_clean_exit, self, b)
        b.start()
        hold = self.hold_dispatches()
        deliveries = self.post_all()
        expected = {(d, t) for d in deliveries for t in REPOS}
        in_flight = self.kill_mid_fan_out(a, hold, 2 * WORKERS)
        # B's own held requests are answered and recorded; A's are sent again by B.
        repeats = self.check_recovery(expected, WORKERS, [b])
        self.assertLessEqual(repeats, in_flight)
        self.assertEqual(len(repeats), WORKERS, "A had one row in flight per worker")
        self.assertEqual(b.log_text().count("reason=holder_gone"), WORKERS,
                         "B took A's rows over by liveness, not by their lease")
        self.assertTrue(b.running())


class LeaseTest(GitHubRelayMixin, unittest.TestCase):
    def test_a_worker_whose_lease_ran_out_sends_nothing(self):
        """A worker stuck for longer than its lease (here: its installation lookup is held while
        the clock moves 31 s past a 30 s lease) must not send once another worker has taken the
        row over; the row is dispatched once, by the new holder, and the late worker records
        nothing."""
        self.start_pair(allowlist=allowlist_yaml(l1=["solo/repo"]),
                        env={"MAX_DISPATCH_WORKERS": "4", "CRCR_LEASE_SECONDS": "30"})  # long against real time
        slow = self.gh.hold("GET", r"^/repos/solo/repo/installation$", count=1)
        self.addCleanup(slow.release)
        d = self.post_ok("push", R.load_example("push")).delivery
        self.assertTrue(slow.wait_reached(), "the lookup never reached the fake" + self.diag())
        lease = "SELECT lease_until FROM outbox WHERE target='solo/repo'"
        first = self.relay.store_rows(lease)
        self.clock.advance(31)  # the stuck worker's lease runs out; another takes the row ...
        self.assertTrue(wait_until(lambda: self.relay.store_rows(lease) != first, 10, 0.1),
                        "no other worker took the row over" + self.diag())
        slow.release()  # ... and waits for the same lookup (one flight), then dispatches
        self.wait_pairs({(d, "solo/repo")}, timeout=20)
        # Let the stuck worker come back from its lookup and find its lease gone.
        self.assertTrue(wait_until(lambda: "outbox.lease_lost" in self.relay.log_text(), 10),
                        "the stuck worker never noticed its lost lease" + self.diag())
        self.quiesce(step=0)
        self.assertEqual(len(slow.held), 1)
        self.assertEqual(pair_counts(self.gh), {(d, "solo/repo"): 1},
                         "the row was dispatched by both workers" + self.diag())
        row = self.rows(d)["solo/repo"]
        self.assertEqual((row["state"], row["attempts"], row["last_status"]), ("sent", 1, 204))
        lost = [ln for ln in self.relay.log_text().splitlines() if "outbox.lease_lost" in ln]
        self.assertTrue(all("sent=no" in ln for ln in lost), lost)


if __name__ == "__main__":
    unittest.main()
