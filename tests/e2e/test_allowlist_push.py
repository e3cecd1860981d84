"""The allowlist follows upstream at once (issue 13 point 4): with ALLOWLIST_URL and a TTL of an
hour, a signed push to the upstream default branch whose commits add, modify or remove the
allowlist's file makes the relay fetch it now; a newly added repository receives the next PR's
dispatch. The relays' clock (a test clock) stays short of the TTL, so only the push can have
brought the new list; no wall-clock bound is needed. A push that does not touch the file, or
touches it on another branch, fetches nothing. With two instances on one PostgreSQL store, the
instance that got the push fetches and leaves a notice; the other follows the shared copy at its
next look at the notice (every 2 s of its clock, which the test moves).

The multi-instance case is skipped without CRCR_TEST_PG_URI (or CRCR_E2E_PG_URI). Needs CRCR_BIN.
"""

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
TTL_S = 3600
UPSTREAM = "pytorch/pytorch"
ALLOWLIST_PATH = ".github/allowlist.yml"
CONTENTS_PATH = r"^/repos/pytorch/pytorch/contents/"
V1 = "L1:\n  - org1/repo1\n"
V2 = "L1:\n  - org1/repo1\n  - org9/newcomer\n"


def push_payload(paths, ref="refs/heads/main", where="modified"):
    obj = R.load_example_obj("push")
    obj["ref"] = ref
    obj["repository"]["full_name"] = UPSTREAM
    commit = {"id": "a" * 40, "added": [], "removed": [], "modified": []}
    commit[where] = list(paths)
    obj["commits"] = [dict(commit, id="b" * 40, modified=["README.md"]), commit]
    obj["head_commit"] = commit
    return R.compact(obj)


def pr_payload(number):
    obj = R.load_example_obj("pull_request.opened")
    obj["number"] = number
    obj["pull_request"]["number"] = number
    obj["pull_request"]["head"]["sha"] = uuid.uuid4().hex + "00000000"
    return R.compact(obj)


class PushRefreshMixin:
    def start_relays(self, n, store=None):
        self.clock = TestClock()
        self.addCleanup(self.clock.close)
        with open(R.APP_PUB, encoding="ascii") as f:
            self.gh = F.FakeGitHub(app_id=1, public_key=f.read(), clock=self.clock).start()
        self.addCleanup(self.gh.stop)
        self.gh.set_file(UPSTREAM, ALLOWLIST_PATH, "main", V1)
        env = {
            "ALLOWLIST_FILE": None,
            "ALLOWLIST_URL": self.gh.blob_url(UPSTREAM, "main", ALLOWLIST_PATH),
            "ALLOWLIST_TTL_SECONDS": str(TTL_S),
            "GITHUB_API_URL": self.gh.url,
            "GITHUB_APP_ID": "1",
            "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
        }
        if store:
            env["CRCR_STORE"] = store
        self.relays = []
        for _ in range(n):
            r = R.Relay(env=env, allowlist=None, clock=self.clock)
            self.addCleanup(r.close)
            r.start()
            self.relays.append(r)

    def diag(self):
        return "".join("\nrelay %d log:\n%s" % (i, r.log_tail(25))
                       for i, r in enumerate(self.relays))

    def contents_requests(self):
        return len(self.gh.requests(method="GET", path_re=CONTENTS_PATH))

    def dispatched_to(self, repo, delivery):
        return [d for d in self.gh.dispatches()
                if d["repo"] == repo and d["client_payload"].get("delivery_id") == delivery]

    def repos_in_force(self, relay):
        m = re.search(r"^crcr_allowlist_repos (\S+)$",
                      relay.poll("/metrics").body.decode("utf-8", "replace"), re.M)
        return int(float(m.group(1))) if m else None

    def pr_reaches(self, relay, repo, n_repos, step=0.0):
        """Awaits `relay` having the list of `n_repos` in force (moving the clock `step` s per
        poll without it), then sends a PR that must be queued and dispatched to `repo`."""
        self.assertTrue(wait_until(lambda: self.repos_in_force(relay) == n_repos, 20, 0.02,
                                   self.clock, step),
                        "the new list never came into force" + self.diag())
        self.assertLess(self.clock.offset_ms, TTL_S * 1000, "the TTL would explain the refresh")
        r = relay.webhook("pull_request", pr_payload(7001))
        self.assertEqual(r.status, 202, r.body)
        self.assertIn(repo, r.json()["queued"])
        ok = wait_until(lambda: self.dispatched_to(repo, r.delivery), 10)
        self.assertTrue(ok, "queued but never dispatched" + self.diag())


class PushRefreshTest(PushRefreshMixin, unittest.TestCase):
    def setUp(self):
        self.start_relays(1)

    def test_a_push_touching_the_file_brings_the_new_repo_at_once(self):
        relay = self.relays[0]
        self.assertEqual(self.contents_requests(), 1)
        self.gh.set_file(UPSTREAM, ALLOWLIST_PATH, "main", V2)
        r = relay.webhook("push", push_payload([ALLOWLIST_PATH]))
        self.assertEqual(r.status, 202, r.body)
        self.pr_reaches(relay, "org9/newcomer", 2)  # the clock does not move: not the TTL
        self.assertEqual(self.clock.offset_ms, 0)
        self.assertIn("event=webhook.push_refresh", relay.log_text())

    def test_added_and_removed_count_too(self):
        relay = self.relays[0]
        for where in ("added", "removed"):
            with self.subTest(where=where):
                n = self.contents_requests()
                r = relay.webhook("push", push_payload([ALLOWLIST_PATH], where=where))
                self.assertEqual(r.status, 202, r.body)
                self.assertTrue(wait_until(lambda: self.contents_requests() > n, 10),
                                self.diag())

    def test_other_pushes_fetch_nothing(self):
        relay = self.relays[0]
        n = self.contents_requests()
        pushes = [
            push_payload(["README.md", ".github/allowlist.yml.bak", "github/allowlist.yml"]),
            push_payload([ALLOWLIST_PATH], ref="refs/heads/release/2.9"),
            push_payload([ALLOWLIST_PATH], ref="refs/tags/main"),
        ]
        for body in pushes:
            r = relay.webhook("push", body)
            self.assertEqual(r.status, 202, r.body)
        # The refresh is decided while the webhook is handled (and logged then): none so far.
        self.assertNotIn("event=webhook.push_refresh", relay.log_text())
        self.assertEqual(self.contents_requests(), n)
        # Then one that does touch it.
        r = relay.webhook("push", push_payload([ALLOWLIST_PATH]))
        self.assertEqual(r.status, 202)
        self.assertEqual(relay.log_text().count("event=webhook.push_refresh"), 1)
        self.assertTrue(wait_until(lambda: self.contents_requests() > n, 10), self.diag())


@unittest.skipUnless(PG_URI, "CRCR_TEST_PG_URI is not set (scripts/pg-test-cluster.sh start DIR)")
class SharedPushRefreshTest(PushRefreshMixin, unittest.TestCase):
    def setUp(self):
        name = "crcr_e2e_%s" % uuid.uuid4().hex[:12]
        psql(PG_URI, "CREATE DATABASE %s" % name)
        self.addCleanup(drop_database, PG_URI, name)
        self.start_relays(2, store=with_database(PG_URI, name))

    def test_the_other_instance_follows_at_its_next_look(self):
        a, b = self.relays
        self.gh.set_file(UPSTREAM, ALLOWLIST_PATH, "main", V2)
        r = a.webhook("push", push_payload([ALLOWLIST_PATH]))
        self.assertEqual(r.status, 202, r.body)
        self.pr_reaches(a, "org9/newcomer", 2)
        self.pr_reaches(b, "org9/newcomer", 2, step=0.5)  # its notice look: every 2 s
        print("\nthe other instance followed %.1f s later on the relays' clock"
              % (self.clock.offset_ms / 1000.0))
        self.assertIn("event=allowlist.notice", b.log_text())
        # The follower took the shared copy: only the instance with the push fetched again.
        fetches = [rec for rec in self.gh.requests(method="GET", path_re=CONTENTS_PATH)]
        self.assertLessEqual(len(fetches), 3, [f.status for f in fetches])


if __name__ == "__main__":
    unittest.main()
