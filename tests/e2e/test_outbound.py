"""Outbound requests without a thread each, one GitHub budget for the App (issue 26): the real
relay (App mode) against the fake GitHub, on SQLite or (with CRCR_E2E_PG_URI) PostgreSQL.

- The budget at the fake: with CRCR_GITHUB_CONCURRENCY=4 and every answer held back, the relay
  stops at exactly 4 requests out while it has more waiting (its own /metrics says so); released,
  every pair is dispatched and the fake never served more than 4 at once.
- Two instances on one PostgreSQL store share one budget: both have rows in flight and requests
  waiting, and together they never have more than the budget out (counted at the fake).
- Installation ids are kept in the store: after a restart a fan-out costs a token and a dispatch
  per installation, no lookup. An `installation` event with a valid signature makes the relay
  forget that installation's ids (an unsigned one is ignored as before, forgetting nothing); both
  are answered 200 {"ignored":true} like any event the relay does not relay.
- A 404 to a request made with a stored installation id drops the id and looks the installation
  up again, once: a repository that left the installation is dead "not installed" after two
  calls, and its id is not in the store any more.

Needs CRCR_BIN; see tests/support/README.md. Helpers come from test_dispatch.py.
"""

import json
import os
import unittest
from collections import Counter

import relay as R
from test_dispatch import DISPATCH_PATH, GitHubRelayMixin, allowlist_yaml, app_env, pair_counts
from waiting import wait_until


def kind_of(rec):
    if rec.path.endswith("/installation"):
        return "installation"
    if rec.path.endswith("/access_tokens"):
        return "token"
    if rec.path.endswith("/dispatches"):
        return "dispatch"
    return rec.path


def peak_in_flight(recs):
    """Most requests the fake was serving at once: arrival to answer, from its records."""
    events = []
    for r in recs:
        events.append((r.time, 1))
        events.append((r.answered if r.answered is not None else float("inf"), -1))
    # An answer leaving at the same instant as an arrival counts before it.
    events.sort(key=lambda e: (e[0], e[1]))
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def metric(relay, name):
    """A sample of the relay's /metrics (0 when absent)."""
    v = relay.metric(name)
    return 0.0 if v is None else v


def push_example():
    return R.load_example("push")


class BudgetTest(GitHubRelayMixin, unittest.TestCase):
    def test_the_relay_never_has_more_than_the_budget_out_at_the_fake(self):
        repos = ["bud%02d/repo" % i for i in range(12)]  # 12 installations: 36 requests
        self.start_pair(allowlist=allowlist_yaml(l1=repos),
                        env={"CRCR_GITHUB_CONCURRENCY": "4"})
        hold = self.gh.hold(count=None)  # every answer waits until released
        self.addCleanup(hold.release)
        d = self.post_ok("push", push_example()).delivery
        # 12 rows, each needing a lookup first: 4 go out, the others wait for the budget.
        self.assertTrue(wait_until(lambda: metric(self.relay, "crcr_github_requests_waiting") >= 1
                                   and len(hold.held) >= 4, 30),
                        "the relay never filled its budget" + self.diag())
        self.assertEqual(len(hold.held), 4, "requests out beyond the budget" + self.diag())
        self.assertEqual(metric(self.relay, "crcr_github_requests_in_flight"), 4)
        hold.release()
        self.wait_pairs({(d, r) for r in repos}, timeout=30)
        self.quiesce()
        recs = self.gh.requests()
        self.assertEqual(Counter(kind_of(r) for r in recs),
                         Counter({"installation": 12, "token": 12, "dispatch": 12}))
        self.assertEqual(peak_in_flight(recs), 4)
        self.assertEqual(metric(self.relay, "crcr_github_requests_in_flight_peak"), 4)

    def test_alone_on_sqlite_the_whole_budget_on_postgresql_a_share_given_back_when_idle(self):
        repos = ["sha%02d/repo" % i for i in range(6)]
        self.start_pair(allowlist=allowlist_yaml(l1=repos),
                        env={"CRCR_GITHUB_CONCURRENCY": "5"})
        shared = bool(os.environ.get("CRCR_E2E_PG_URI"))  # instances share it through the store
        share = lambda: metric(self.relay, "crcr_github_budget_share")  # noqa: E731
        # Before any request: SQLite has one serving process, which holds the whole budget (no
        # request waits for a share to grow); on PostgreSQL nothing is held while idle.
        self.assertEqual(share(), 0 if shared else 5)
        d = self.post_ok("push", push_example()).delivery
        self.wait_pairs({(d, r) for r in repos}, timeout=30)
        self.quiesce()
        if shared:
            # Idle again: the share goes back to the store for the other instances (its idle
            # time runs on the relay's clock, moved here rather than waited for).
            self.assertTrue(wait_until(lambda: share() == 0, 10, 0.05, self.clock, 0.05),
                            "the share was not given back: %s%s" % (share(), self.diag()))
        else:
            self.assertEqual(share(), 5)
        self.assertEqual(metric(self.relay, "crcr_github_budget"), 5)


@unittest.skipUnless(os.environ.get("CRCR_E2E_PG_URI"),
                     "PostgreSQL only: runs in the CRCR_E2E_PG_URI pass of scripts/test.sh")
class SharedBudgetTest(GitHubRelayMixin, unittest.TestCase):
    def test_two_instances_on_one_store_never_have_more_than_the_budget_out_together(self):
        budget, rows_each = 4, 6
        repos = ["sh%02d/repo" % i for i in range(16)]
        env = {"CRCR_GITHUB_CONCURRENCY": str(budget), "MAX_DISPATCH_WORKERS": str(rows_each)}
        allowlist = allowlist_yaml(l1=repos)
        a, gh = self.start_pair(allowlist=allowlist, env=env)
        b = R.Relay(env=app_env(gh, dict(env, CRCR_STORE=a.store_uri)), allowlist=allowlist,
                    clock=self.clock)
        self.addCleanup(b.close)
        self.addCleanup(R.check_clean_exit, self, b)
        b.start()
        hold = gh.hold(count=None)
        self.addCleanup(hold.release)
        d = self.post_ok("push", push_example()).delivery

        # Each instance carries at most 6 rows out of 16: both have rows, 12 lookups want out.
        def blocked():
            rows = [metric(x, "crcr_outbox_rows_in_flight") for x in (a, b)]
            waiting = sum(metric(x, "crcr_github_requests_waiting") for x in (a, b))
            return rows == [rows_each, rows_each] and waiting == 2 * rows_each - budget \
                and len(hold.held) >= budget

        self.assertTrue(wait_until(blocked, 30),
                        "the instances never both waited on the shared budget: rows %s, "
                        "waiting %s, held %d%s"
                        % ([metric(x, "crcr_outbox_rows_in_flight") for x in (a, b)],
                           [metric(x, "crcr_github_requests_waiting") for x in (a, b)],
                           len(hold.held), self.diag()))
        self.assertEqual(len(hold.held), budget, "requests out beyond the budget" + self.diag())
        shares = [metric(x, "crcr_github_budget_share") for x in (a, b)]
        self.assertLessEqual(sum(shares), budget)
        out = [metric(x, "crcr_github_requests_in_flight") for x in (a, b)]
        self.assertEqual(sum(out), budget)
        hold.release()
        self.wait_pairs({(d, r) for r in repos}, timeout=60)
        self.quiesce()
        self.assertEqual(pair_counts(gh), Counter({(d, r): 1 for r in repos}))
        self.assertLessEqual(peak_in_flight(gh.requests()), budget)
        sent = [x.log_text().count("event=outbox.sent") for x in (a, b)]
        self.assertTrue(all(n > 0 for n in sent), "both instances dispatched: %s" % sent)
        self.assertEqual(sum(sent), len(repos))


class ClaimRoomTest(GitHubRelayMixin, unittest.TestCase):
    def test_a_lone_free_slot_is_claimed_when_no_other_frees_up(self):
        # MAX_DISPATCH_WORKERS 16: a claim waits for 2 free slots (16 / 8), a few ms at most.
        repos = ["room/r%02d" % i for i in range(17)]
        self.start_pair(allowlist=allowlist_yaml(l1=repos), env={"MAX_DISPATCH_WORKERS": "16"})
        first = self.gh.hold(path_re=r"/dispatches$", count=1)
        rest = self.gh.hold(path_re=r"/dispatches$", count=None)
        self.addCleanup(first.release)
        self.addCleanup(rest.release)
        d = self.post_ok("push", push_example()).delivery
        held = lambda: len(first.held) + len(rest.held)  # noqa: E731
        self.assertTrue(wait_until(lambda: held() >= 16, 30),
                        "16 dispatches never reached the fake" + self.diag())
        self.assertEqual((len(first.held), len(rest.held)), (1, 15),
                         "more rows out than MAX_DISPATCH_WORKERS" + self.diag())
        # One job ends: one slot is free, fewer than a claim waits for, and no other answer comes.
        # (Awaited well within the relay's 20 s GitHub timeout, after which the held requests
        # would fail and free their slots too.)
        first.release()
        self.assertTrue(wait_until(lambda: len(rest.held) == 16, 10),
                        "the 17th row waited for a second free slot" + self.diag())
        self.assertNotIn("event=outbox.retry", self.relay.log_text())
        rest.release()
        self.wait_pairs({(d, r) for r in repos}, timeout=30)
        self.quiesce()
        self.assertEqual(pair_counts(self.gh), Counter({(d, r): 1 for r in repos}))

    def test_rows_of_two_deliveries_claimed_together_keep_their_own_payloads(self):
        # A claim's jobs share their delivery's payload: rows of another delivery in the same
        # batch must not get it. Every first attempt fails (502), so all six rows come due
        # again together when the clock moves past their retry, for one claim.
        repos = ["pay/r%d" % i for i in range(3)]
        self.start_pair(allowlist=allowlist_yaml(l1=repos),
                        env={"CRCR_RETRY_BASE_MS": "60000", "CRCR_RETRY_MAX_MS": "60000"})
        fault = self.gh.fault_5xx(DISPATCH_PATH, status=502, method="POST", count=6)
        payloads = {}
        for event, name in (("pull_request", "pull_request.opened"), ("push", "push")):
            payload = R.load_example(name)
            payloads[self.post_ok(event, payload).delivery] = payload
        for d in payloads:
            self.wait_rows(d, lambda rows: len(rows) == 3 and all(
                r["state"] == "queued" and r["attempts"] == 1 for r in rows.values()),
                what="three rows retried")
        self.assertEqual(fault.hits, 6)
        self.clock.advance(120)
        self.wait_pairs({(d, r) for d in payloads for r in repos}, timeout=30)
        self.quiesce()
        got = {(x["client_payload"]["delivery_id"], x["repo"]): x["client_payload"]["payload"]
               for x in self.gh.dispatches()}
        self.assertEqual(got, {(d, r): json.loads(payloads[d]) for d in payloads for r in repos})


class InstallationIdTest(GitHubRelayMixin, unittest.TestCase):
    REPOS = ["own1/a", "own1/b", "own2/c", "own3/d"]

    def fan_out(self):
        mark = len(self.gh.requests())
        d = self.post_ok("push", push_example()).delivery
        self.wait_pairs({(d, r) for r in self.REPOS})
        self.quiesce()
        return d, Counter(kind_of(r) for r in self.gh.requests()[mark:])

    def installation_event(self, owner, sign=True):
        body = {"action": "deleted",
                "installation": {"id": self.gh.installation_id(owner),
                                 "account": {"login": owner, "id": 1000, "type": "Organization"}},
                "repositories": [{"id": 1, "name": "a", "full_name": owner + "/a",
                                  "private": False}],
                "sender": {"login": "someone", "id": 7, "type": "User"}}
        r = self.relay.webhook("installation", body, sign=sign)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.json(), {"ignored": True})

    def test_a_restart_keeps_installation_ids_a_cold_fan_out_costs_two_calls_per_dispatch(self):
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS))
        _, first = self.fan_out()
        self.assertEqual(first, Counter({"installation": 4, "token": 3, "dispatch": 4}))
        _, warm = self.fan_out()
        self.assertEqual(warm, Counter({"dispatch": 4}))
        self.relay.restart()
        _, cold = self.fan_out()
        self.assertEqual(cold, Counter({"token": 3, "dispatch": 4}),
                         "a restarted relay looked installations up again" + self.diag())

    def test_an_installation_event_forgets_its_ids_an_unsigned_one_nothing(self):
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS))
        self.fan_out()
        self.installation_event("own1", sign=False)
        _, after_unsigned = self.fan_out()
        self.assertEqual(after_unsigned, Counter({"dispatch": 4}))
        self.installation_event("own1")
        self.assertIn("event=webhook.installation_changed", self.relay.log_text())
        _, after = self.fan_out()
        self.assertEqual(after, Counter({"installation": 2, "token": 1, "dispatch": 4}),
                         "own1's two repos looked up again, its token minted again")
        # The store forgot them too: a restart finds own1's new ids, not the dropped ones.
        self.installation_event("own1")
        self.relay.restart()
        _, cold = self.fan_out()
        self.assertEqual(cold, Counter({"installation": 2, "token": 3, "dispatch": 4}))

    def test_a_404_with_a_stored_id_looks_the_installation_up_again_once(self):
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS), installed_repos=self.REPOS)
        self.fan_out()
        self.gh.uninstall("own1/b")  # left the installation: its id is stale
        mark = len(self.gh.requests())
        d = self.post_ok("push", push_example()).delivery
        rows = self.wait_rows(d, lambda rows: rows["own1/b"]["state"] == "dead"
                              and all(rows[t]["state"] == "sent" for t in self.REPOS
                                      if t != "own1/b"), what="own1/b dead, others sent")
        self.assertIn("not installed", rows["own1/b"]["last_error"] or "")
        self.quiesce()
        calls = [(r.method, kind_of(r), r.status) for r in self.gh.requests()[mark:]
                 if "/own1/b/" in r.path]
        self.assertEqual(calls, [("POST", "dispatch", 404), ("GET", "installation", 404)])
        # Installed again: after a restart the relay looks it up (the stored id was dropped).
        self.gh.install("own1/b")
        self.relay.restart()
        mark = len(self.gh.requests())
        rc, out, err = self.relay.cli(["deliveries", "redeliver", d, "--repo", "own1/b"])
        self.assertEqual(rc, 0, out + err)
        self.wait_pairs({(d, "own1/b")})
        self.quiesce()
        self.assertEqual(Counter(kind_of(r) for r in self.gh.requests()[mark:]),
                         Counter({"installation": 1, "token": 1, "dispatch": 1}))


if __name__ == "__main__":
    unittest.main()
