"""Crash safety of the durable dispatch: the real relay (App mode) is SIGKILLed mid fan-out and
restarted on the same store (SQLite, or PostgreSQL when CRCR_E2E_PG_URI is set), against the fake
GitHub. A second test checks that a worker whose lease ran out sends nothing.

50 webhooks x 20 repos (1,000 dispatch rows); the fake delays every dispatch by 200 ms, so with
16 workers the fan-out takes seconds and the kill lands in the middle of it. Afterwards every
(delivery, repo) pair must have been dispatched at least once, and the only duplicates allowed are
the dispatches that were in flight at the kill (at most MAX_DISPATCH_WORKERS, each sent exactly
twice). Rows the killed process had claimed come back after CRCR_LEASE_SECONDS.

Needs CRCR_BIN; see tests/support/README.md. Helpers come from test_dispatch.py.
"""

import json
import os
import time
import unittest
from collections import Counter

import relay as R
from test_dispatch import (DISPATCH_EXAMPLES, DISPATCH_PATH, GitHubRelayMixin, allowlist_yaml,
                           pair_counts, wait_until)

WORKERS = 16
LEASE_S = 3
DELAY_MS = 200
N_WEBHOOKS = 50
REPOS = ["org%d/repo%02d" % (i % 4, i) for i in range(20)]  # 4 installations
KILL_AFTER = 150  # dispatch requests received by the fake
# A dispatch whose answer the relay had already read this long before the kill was surely
# recorded as sent; only requests unanswered until then may be repeated after the restart.
COMMIT_WINDOW_S = 0.25


def pair_of(rec):
    parts = rec.path.split("/")
    return json.loads(rec.body)["client_payload"]["delivery_id"], parts[2] + "/" + parts[3]


class CrashTest(GitHubRelayMixin, unittest.TestCase):
    def test_sigkill_mid_fan_out_loses_nothing_and_repeats_only_in_flight_dispatches(self):
        self.start_pair(allowlist=allowlist_yaml(l1=REPOS[:10], l2=REPOS[10:]),
                        env={"MAX_DISPATCH_WORKERS": str(WORKERS),
                             "CRCR_LEASE_SECONDS": str(LEASE_S)})
        self.gh.fault_delay(DISPATCH_PATH, delay_ms=DELAY_MS, method="POST")
        deliveries = []
        for i in range(N_WEBHOOKS):
            event, name = DISPATCH_EXAMPLES[i % len(DISPATCH_EXAMPLES)]
            r = self.post_ok(event, R.load_example(name))
            self.assertEqual(len(r.json()["queued"]), len(REPOS))
            deliveries.append(r.delivery)
        expected = {(d, t) for d in deliveries for t in REPOS}
        self.assertEqual(len(expected), 1000)

        reached = wait_until(
            lambda: len(self.gh.requests("POST", DISPATCH_PATH)) >= KILL_AFTER, timeout=60)
        self.assertTrue(reached, "fan-out too slow to reach %d dispatches%s"
                        % (KILL_AFTER, self.diag()))
        self.relay.kill()
        kill_time = time.monotonic()
        before = self.gh.requests("POST", DISPATCH_PATH)
        self.assertLess(len(before), len(expected) - 200, "the kill came too late to matter")
        in_flight = {pair_of(x) for x in before
                     if x.answered is None or x.answered > kill_time - COMMIT_WINDOW_S}
        sent_before = {pair_of(x) for x in before}
        self.assertTrue(in_flight, "the kill hit no dispatch in flight: nothing was tested")

        self.relay.start()  # same store; rows claimed by the dead process wait for their lease
        self.wait_pairs(expected, timeout=120)
        self.quiesce(max(1.5, LEASE_S / 2), timeout=60)

        counts = pair_counts(self.gh)
        if os.environ.get("CRCR_E2E_VERBOSE"):
            print("in flight at kill: %d, repeats: %d" % (
                len(in_flight), sum(c - 1 for c in counts.values())))
        self.assertEqual(set(counts), expected)
        dups = {p: c for p, c in counts.items() if c > 1}
        self.assertLessEqual(sum(c - 1 for c in dups.values()), WORKERS,
                             "more repeats than dispatches that can be in flight: %s" % dups)
        self.assertEqual(set(dups.values()) - {2}, set(), "a pair dispatched 3+ times")
        self.assertLessEqual(set(dups), sent_before, "a repeat of a pair not sent before the kill")
        self.assertLessEqual(set(dups), in_flight,
                             "a dispatch answered well before the kill was repeated")
        # The store agrees: every row sent.
        for d in deliveries[:: 7]:
            states = Counter(r["state"] for r in self.rows(d).values())
            self.assertEqual(states, Counter({"sent": len(REPOS)}), d)
        self.assertTrue(self.relay.running())


class LeaseTest(GitHubRelayMixin, unittest.TestCase):
    def test_a_worker_whose_lease_ran_out_sends_nothing(self):
        """A worker stuck for longer than its lease (here: the installation lookup takes 2.5 s
        with a 1 s lease) must not send once another worker has taken the row over; the row is
        dispatched once, by the new holder, and the late worker records nothing."""
        self.start_pair(allowlist=allowlist_yaml(l1=["solo/repo"]),
                        env={"MAX_DISPATCH_WORKERS": "4", "CRCR_LEASE_SECONDS": "1"})
        slow = self.gh.fault_delay(r"^/repos/solo/repo/installation$", delay_ms=2500,
                                   method="GET", count=1)
        d = self.post_ok("push", R.load_example("push")).delivery
        self.wait_pairs({(d, "solo/repo")}, timeout=20)
        # Let the stuck worker come back from its lookup and find its lease gone.
        self.assertTrue(wait_until(lambda: "outbox.lease_lost" in self.relay.log_text(), 10),
                        "the stuck worker never noticed its lost lease" + self.diag())
        self.quiesce(1.0)
        self.assertEqual(slow.hits, 1)
        self.assertEqual(pair_counts(self.gh), {(d, "solo/repo"): 1},
                         "the row was dispatched by both workers" + self.diag())
        row = self.rows(d)["solo/repo"]
        self.assertEqual((row["state"], row["attempts"], row["last_status"]), ("sent", 1, 204))
        lost = [ln for ln in self.relay.log_text().splitlines() if "outbox.lease_lost" in ln]
        self.assertTrue(all("sent=no" in ln for ln in lost), lost)


if __name__ == "__main__":
    unittest.main()
