"""The allowlist refreshed under a lease, with a shared copy in the store (issue 6 point 2): two
relay instances on one PostgreSQL database, both with ALLOWLIST_URL on the fake GitHub's contents
API and a short ALLOWLIST_TTL_SECONDS.

- Only the holder of the "allowlist" lease asks GitHub: over several TTL periods the fake sees
  about one contents request per TTL in total, not one per instance; the second instance started
  with the first one's copy and never fetched.
- A changed file reaches both instances (by /metrics crcr_allowlist_repos and by routing: a
  webhook fans out to the new repo), the follower taking it from the shared copy.
- The lease holder SIGKILLed: the other instance takes the lease over and fetches, and still
  follows changes to the file.

Both relays and the fake GitHub share one test clock: the TTL periods, the lease and the
followers' looks at the copy run out because the test moves the clock, and each step awaits what
the relays did about it (a contents request, crcr_allowlist_age_seconds dropping back).

Skipped only when CRCR_TEST_PG_URI (or CRCR_E2E_PG_URI) is unset (`export
CRCR_TEST_PG_URI=$(scripts/pg-test-cluster.sh start /tmp/pg)`). Each test works in a fresh
database created next to the one in the URI. Needs CRCR_BIN and psql; see
tests/support/README.md.
"""

import json
import os
import re
import unittest
import uuid

import fakegh as F
import relay as R
from test_multi_instance import drop_database, psql, with_database
from testclock import TestClock
from waiting import wait_until

PG_URI = os.environ.get("CRCR_TEST_PG_URI") or os.environ.get("CRCR_E2E_PG_URI") or ""
TTL_S = 60  # long against real time (a slow start must not run it out); the clock moves it
STEP_S = TTL_S / 30.0  # how far a poll moves the clock while it awaits a timer
ALLOWLIST_REPO = "pytorch/pytorch"
ALLOWLIST_PATH = ".github/allowlist.yml"
ALLOWLIST_URL = "https://github.com/%s/blob/main/%s" % (ALLOWLIST_REPO, ALLOWLIST_PATH)
CONTENTS_PATH = r"^/repos/pytorch/pytorch/contents/"
V1 = "L2:\n  - org1/repo1\n  - org2/repo2\n"
V2 = "L2:\n  - org1/repo1\n  - org2/repo2\n  - org3/repo3\n"
V3 = "L2:\n  - org1/repo1\n"


def gauge(relay, name):
    """A gauge from /metrics, or None when the relay does not answer."""
    try:
        body = relay.poll("/metrics").body.decode("utf-8", "replace")
    except OSError:
        return None
    m = re.search(r"^%s (\S+)$" % name, body, re.M)
    return float(m.group(1)) if m else None


def repos_in_force(relay):
    """crcr_allowlist_repos from /metrics, or None when the relay does not answer."""
    v = gauge(relay, "crcr_allowlist_repos")
    return int(v) if v is not None else None


def fresh(relay, within):
    """The allowlist in force was loaded or confirmed less than `within` s ago (relay clock)."""
    age = gauge(relay, "crcr_allowlist_age_seconds")
    return age is not None and age < within


@unittest.skipUnless(PG_URI, "CRCR_TEST_PG_URI is not set (scripts/pg-test-cluster.sh start DIR)")
class SharedAllowlistTest(unittest.TestCase):

    def setUp(self):
        name = "crcr_e2e_%s" % uuid.uuid4().hex[:12]
        psql(PG_URI, "CREATE DATABASE %s" % name)
        self.addCleanup(drop_database, PG_URI, name)
        self.db = with_database(PG_URI, name)
        self.clock = TestClock()
        self.addCleanup(self.clock.close)
        with open(R.APP_PUB, encoding="ascii") as f:
            self.gh = F.FakeGitHub(app_id=1, public_key=f.read(), clock=self.clock).start()
        self.addCleanup(self.gh.stop)
        self.gh.set_file(ALLOWLIST_REPO, ALLOWLIST_PATH, "main", V1)
        env = {
            "ALLOWLIST_FILE": None,
            "ALLOWLIST_URL": ALLOWLIST_URL,
            "ALLOWLIST_TTL_SECONDS": str(TTL_S),
            "GITHUB_API_URL": self.gh.url,
            "CRCR_STORE": self.db,
        }
        self.relays = []
        for _ in range(2):
            r = R.Relay(env=env, allowlist=None, clock=self.clock)
            self.addCleanup(r.close)
            self.addCleanup(R.check_clean_exit, self, r)  # runs before close
            r.start()
            self.relays.append(r)

    def diag(self, n=25):
        return "".join("\nrelay %d log:\n%s" % (i, r.log_tail(n))
                       for i, r in enumerate(self.relays))

    def contents_requests(self):
        return len(self.gh.requests(method="GET", path_re=CONTENTS_PATH))

    def lease_owner(self):
        rows = psql(self.db, "SELECT convert_from(value, 'UTF8') FROM kv "
                             "WHERE key='lease:allowlist'")
        return rows[0][0] if rows else None

    def holder(self):
        """The relay whose pid is in the lease (owner "host:pid"), or None."""
        owner = self.lease_owner() or ""
        for r in self.relays:
            if r.running() and owner.endswith(":%d" % r.proc.pid):
                return r
        return None

    def wait_repos(self, relays, n, step=0.0):
        """Waits until every relay in `relays` has n repos in force, moving the clock `step` s
        per poll without it; returns how far the clock moved meanwhile."""
        moved0 = self.clock.offset_ms
        ok = wait_until(lambda: all(repos_in_force(r) == n for r in relays), 20, 0.02,
                        self.clock, step)
        self.assertTrue(ok, "allowlist with %d repos not in force everywhere: %r%s"
                        % (n, [repos_in_force(r) for r in relays], self.diag()))
        return (self.clock.offset_ms - moved0) / 1000.0

    def next_period(self, relays):
        """Moves the clock one TTL and a follower's slack (a tenth of the TTL) ahead and awaits
        every relay in `relays` having loaded or confirmed its allowlist since (moving the clock
        a tenth of a second per poll, for a follower that looked before the holder fetched)."""
        self.clock.advance(TTL_S * 1.1)
        ok = wait_until(lambda: all(fresh(r, TTL_S * 0.5) for r in relays), 20, 0.02,
                        self.clock, STEP_S)
        self.assertTrue(ok, "not refreshed after a TTL: ages %r%s"
                        % ([gauge(r, "crcr_allowlist_age_seconds") for r in relays],
                           self.diag()))

    # ------------------------------------------------------------------ tests

    def test_one_contents_request_per_ttl_in_total(self):
        # The first instance fetched at start; the second took its copy.
        self.assertEqual(self.contents_requests(), 1, self.diag())
        self.assertIn("from=github", self.relays[0].log_text())
        self.assertIn("from=shared_copy", self.relays[1].log_text())
        for r in self.relays:
            ready = r.get("/readyz")
            self.assertEqual(ready.status, 200, ready.body)
            self.assertEqual(repos_in_force(r), 2)

        periods = 5
        n0 = self.contents_requests()
        for _ in range(periods):
            self.next_period(self.relays)
        n = self.contents_requests() - n0
        print("\ncontents requests in %d TTL periods of %d s (2 instances): %d"
              % (periods, TTL_S, n))
        # One instance per TTL makes 5 (a refresh is due TTL after the last one); both
        # instances fetching would make 10.
        self.assertEqual(n, periods, self.diag())
        # Every request after the start-up fetch was a conditional one answered 304.
        later = self.gh.requests(method="GET", path_re=CONTENTS_PATH)[1:]
        self.assertTrue(all(rec.status == 304 for rec in later),
                        [rec.status for rec in later])
        self.assertIsNotNone(self.holder(), "lease owner %r" % self.lease_owner())

    def test_a_changed_file_reaches_both_instances(self):
        self.wait_repos(self.relays, 2)
        self.gh.set_file(ALLOWLIST_REPO, ALLOWLIST_PATH, "main", V2)
        took = self.wait_repos(self.relays, 3, step=STEP_S)
        print("\nnew allowlist in force on both instances %.1f s later on the relays' clock "
              "(TTL %d s)" % (took, TTL_S))
        # About one TTL (the holder's refresh) plus the follower's slack, on the relays' clock.
        self.assertLess(took, 2 * TTL_S + 1, self.diag())
        follower = [r for r in self.relays if r is not self.holder()]
        self.assertEqual(len(follower), 1, "lease owner %r" % self.lease_owner())
        self.assertRegex(follower[0].log_text(),
                         r"event=allowlist\.loaded .*from=shared_copy repos=3")
        # Routing follows: a push from upstream fans out to the new repo on either instance.
        for r in self.relays:
            resp = r.webhook("push", R.load_example("push"))
            self.assertEqual(resp.status, 202, resp.body)
            self.assertIn("org3/repo3", resp.json()["queued"], resp.body)

    def test_the_other_instance_takes_over_when_the_holder_dies(self):
        # The holder is whoever renewed the lease last; wait for a renewal to be sure there is one.
        self.assertTrue(wait_until(lambda: self.holder() is not None, 10, 0.05, self.clock, STEP_S),
                        "lease owner %r" % self.lease_owner())
        self.next_period(self.relays)  # the copy is at most half a TTL old
        dead = self.holder()
        survivor = [r for r in self.relays if r is not dead][0]
        dead.kill()
        n0 = self.contents_requests()
        # Its lease lasts 2 TTLs from its last renewal: one move of the clock past it (the copy
        # stays younger than the 3 TTLs that make an instance fetch for itself), then the
        # survivor takes the lease and fetches, awaited without moving the clock further.
        self.clock.advance(TTL_S * 2.1)
        self.assertTrue(wait_until(lambda: self.holder() is survivor, 60, 0.1),
                        "lease owner %r%s" % (self.lease_owner(), self.diag()))
        self.assertTrue(wait_until(lambda: self.contents_requests() > n0, 60), self.diag())
        self.assertNotIn("allowlist.copy_stale", survivor.log_text())
        # It keeps fetching once per TTL, and follows changes.
        n1 = self.contents_requests()
        for _ in range(3):
            self.next_period([survivor])
        self.assertEqual(self.contents_requests() - n1, 3, self.diag())
        self.gh.set_file(ALLOWLIST_REPO, ALLOWLIST_PATH, "main", V3)
        self.wait_repos([survivor], 1, step=STEP_S)
        ready = survivor.get("/readyz")
        self.assertEqual(ready.status, 200, ready.body)
        self.assertIsNone(json.loads(ready.body)["allowlist_error"], ready.body)


if __name__ == "__main__":
    unittest.main()
