"""End-to-end dispatch under GitHub faults: the real relay (App mode) against the fake GitHub.

Retries and rate-limit pauses run out in moved time: the fake GitHub is on the relay's clock, and
the test moves it only while the relay waits for it (Relay.wait_with_timers: rows queued for
later, none running), so every time below is on the relay's clock and none is waited for.

- A storm: 30% of dispatches answered 502 and some 429 + Retry-After: 300. Every (delivery,
  repo) pair is dispatched exactly once in the end, no request reaches a paused installation
  before the Retry-After elapsed, rows waiting for a pause spend no attempts, and every webhook is
  answered 202 (or 200 for a redelivery) throughout.
- A secondary-limit 403 with Retry-After, and a primary-limit 403 with x-ratelimit-reset, pause
  that installation only, until the given time.
- Prompt retries with the default schedule (issue 14): 30% of dispatch attempts answered 502,
  10 PR webhooks to 4 repos are all dispatched within 30 s of the relay's clock, each exactly
  once.

Needs CRCR_BIN; see tests/support/README.md. Helpers come from test_dispatch.py.
"""

import json
import os
import random
import unittest
import uuid
from collections import Counter

import relay as R
from test_dispatch import (DISPATCH_EXAMPLES, DISPATCH_PATH, GitHubRelayMixin, allowlist_yaml,
                           pair_counts)
from waiting import wait_until

# A request that the relay had already sent (or was sending) when a rate-limit answer reached it
# cannot honour that answer: requests arriving this soon after the limit answer (on the relay's
# clock, which does not move while a request is in flight) are counted as in flight, not as
# violations. It only has to exceed the real-time latency of a request, being far below the
# pauses (300 s).
IN_FLIGHT_GRACE_S = 5.0
# Clock slack between "answer written" in the fake and "answer read" in the relay.
SLACK_S = 0.02


def owner_of(rec):
    return rec.path.split("/")[2]


def pair_of(rec):
    """(delivery id, repo) of a dispatch request, from its body (also for refused requests)."""
    try:
        delivery = json.loads(rec.body)["client_payload"]["delivery_id"]
    except (ValueError, KeyError, TypeError):
        delivery = None
    parts = rec.path.split("/")
    return delivery, parts[2] + "/" + parts[3]


class FaultTestBase(GitHubRelayMixin, unittest.TestCase):
    def pause_violations(self, limited, until_of, owner_key=owner_of):
        """Dispatch requests to the installation of each `limited` request that arrived after the
        limit answer (plus the in-flight grace) but before `until_of(rec)`, on the fake's clock
        (the relay's)."""
        out = []
        dispatches = self.gh.requests("POST", DISPATCH_PATH)
        for lim in limited:
            if lim.answered is None:
                continue
            until = until_of(lim)
            for x in dispatches:
                if (owner_key(x) == owner_key(lim) and x is not lim
                        and lim.wall + IN_FLIGHT_GRACE_S < x.wall < until - SLACK_S):
                    out.append("%s %s arrived %.3f s after a %d (pause %.3f s)"
                               % (x.path, pair_of(x)[0], x.wall - lim.wall, lim.status,
                                  until - lim.wall))
        return out


class StormTest(FaultTestBase):
    REPOS = ["acme/a1", "acme/a2", "acme/a3", "beta/b1", "beta/b2", "beta/b3", "gamma/g1",
             "gamma/g2"]
    N_WEBHOOKS = 20
    RETRY_AFTER = 300

    def test_502_and_429_storm_every_pair_dispatched_once_and_retry_after_honoured(self):
        # Retries a minute apart and pauses of 5 minutes: nothing the real seconds of a test run
        # can run out, only the moved clock.
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS[:4], l2=self.REPOS[4:]),
                        env={"CRCR_MAX_ATTEMPTS": "40", "CRCR_RETRY_BASE_MS": "60000",
                             "CRCR_RETRY_MAX_MS": "240000"})
        r429 = self.gh.add_fault("POST", DISPATCH_PATH, 429,
                                 {"content-type": "application/json",
                                  "retry-after": str(self.RETRY_AFTER)},
                                 {"message": "Too Many Requests"}, probability=0.08, count=6,
                                 seed=429, name="429")
        r502 = self.gh.fault_5xx(DISPATCH_PATH, status=502, method="POST", count=None,
                                 probability=0.3, seed=502)
        answers = []
        deliveries = []
        for i in range(self.N_WEBHOOKS):
            event, name = DISPATCH_EXAMPLES[i % len(DISPATCH_EXAMPLES)]
            payload = R.load_example(name)
            r = self.relay.webhook(event, payload)
            answers.append((r.status, r.body))
            deliveries.append(r.delivery)
            if i % 4 == 3:  # GitHub redelivering an earlier one in the middle of the storm
                again = self.relay.webhook(event, payload, delivery=r.delivery)
                answers.append((again.status, again.body))
        bad = [a for a in answers if a[0] not in (200, 202)]
        self.assertEqual(bad, [], "webhook answers other than 202/200 during the storm")
        self.assertEqual(Counter(s for s, _ in answers),
                         Counter({202: self.N_WEBHOOKS, 200: self.N_WEBHOOKS // 4}))

        expected = {(d, t) for d in deliveries for t in self.REPOS}
        self.assertTrue(self.relay.wait_with_timers(
            lambda: expected <= set(pair_counts(self.gh)), timeout=90, step=20),
            "%d pairs never dispatched%s" % (len(expected - set(pair_counts(self.gh))),
                                             self.diag()))
        self.quiesce(step=0)

        counts = pair_counts(self.gh)
        self.assertEqual(set(counts), expected)
        self.assertEqual({p: c for p, c in counts.items() if c != 1}, {},
                         "a pair was dispatched more than once")
        self.assertGreaterEqual(r502.hits, 20, "the storm did not happen")
        self.assertGreaterEqual(r429.hits, 1, "no 429 was answered: nothing checked below")

        limited = [x for x in self.gh.requests("POST", DISPATCH_PATH) if x.status == 429]
        violations = self.pause_violations(
            limited, lambda lim: lim.wall + self.RETRY_AFTER)
        self.assertEqual(violations, [], "requests to a paused installation")

        # Every row is sent, and its attempts are exactly the dispatch requests made for it:
        # waiting out another row's pause costs no attempt.
        per_pair = Counter(pair_of(x) for x in self.gh.requests("POST", DISPATCH_PATH))
        for d in deliveries:
            for target, row in self.rows(d).items():
                self.assertEqual((row["state"], row["last_status"]), ("sent", 204), row)
                self.assertEqual(row["attempts"], per_pair[(d, target)],
                                 "%s %s: attempts vs requests" % (d, target))
        self.assertTrue(self.relay.running())
        self.assertNotIn("dispatch.dead", self.relay.log_text())


class QuickRetryTest(FaultTestBase):
    """The default retry schedule (1 s, doubling) under 30% 502s on every dispatch attempt.

    The 502s are drawn per (delivery, repo) and attempt from a fixed seed, with fixed delivery
    ids, so the same attempts fail in every run whatever order the relay sends them in: the
    fixture's worst pair fails 4 times in a row, so its fifth attempt comes after at most
    1 + 2 + 4 + 8 = 15 s of waits (on the relay's clock, moved half a second at a time while it
    waits), and 30 s holds without luck."""

    REPOS = ["acme/a1", "acme/a2", "beta/b1", "gamma/g1"]
    N_WEBHOOKS = 10
    SEED = 504
    SHARE = 0.3
    BOUND_S = 30.0

    def deliveries(self):
        return [str(uuid.uuid5(uuid.NAMESPACE_URL, "crcr-e2e-quick-retry-%d" % i))
                for i in range(self.N_WEBHOOKS)]

    def failures_in_a_row(self, pair):
        """How many first attempts of `pair` the fault answers 502 (its draws, see fakegh)."""
        n = 0
        while random.Random("%r|%r|%d" % (self.SEED, pair, n)).random() < self.SHARE:
            n += 1
        return n

    def test_transient_502s_are_retried_within_seconds_and_every_pair_is_sent_once(self):
        # Default CRCR_RETRY_BASE_MS / CRCR_RETRY_MAX_MS: the schedule operators get.
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS),
                        env={"CRCR_RETRY_BASE_MS": None, "CRCR_RETRY_MAX_MS": None})
        deliveries = self.deliveries()
        expected = {(d, t) for d in deliveries for t in self.REPOS}
        runs = {p: self.failures_in_a_row(p) for p in expected}
        self.assertEqual(max(runs.values()), 4, "fixture: the worst pair fails 4 times in a row")
        r502 = self.gh.fault_5xx(DISPATCH_PATH, status=502, method="POST", count=None,
                                 probability=self.SHARE, seed=self.SEED, key=pair_of)
        posted = {}
        payload = R.load_example("pull_request.opened")
        for d in deliveries:
            posted[d] = self.clock.now()
            self.post_ok("pull_request", payload, delivery=d)
        self.assertTrue(self.relay.wait_with_timers(
            lambda: expected <= set(pair_counts(self.gh)), timeout=60, step=0.5),
            "pairs never dispatched%s" % self.diag())
        self.quiesce(step=0)

        attempts = [x for x in self.gh.requests("POST", DISPATCH_PATH)]
        ok = Counter(pair_of(x) for x in attempts if x.status == 204)
        self.assertEqual(set(ok), expected)
        self.assertEqual({p: c for p, c in ok.items() if c != 1}, {},
                         "a pair got more than one 204")
        self.assertEqual({p: c for p, c in pair_counts(self.gh).items() if c != 1}, {})
        self.assertEqual(r502.hits, sum(runs.values()))
        self.assertEqual(Counter(pair_of(x) for x in attempts if x.status == 502),
                         Counter({p: n for p, n in runs.items() if n}))
        latency = {p: min(x.wall for x in attempts if pair_of(x) == p and x.status == 204)
                   - posted[p[0]] for p in expected}
        worst = max(latency, key=latency.get)
        if os.environ.get("CRCR_E2E_VERBOSE"):
            print("502s: %d; latency p50 %.2f s, max %.2f s (%d failures in a row)"
                  % (r502.hits, sorted(latency.values())[len(latency) // 2], latency[worst],
                     runs[worst]))
        # The relay's schedule on its own clock (not a wall-clock latency: the clock moved).
        self.assertLess(latency[worst], self.BOUND_S,
                        "%s dispatched %.1f s after its webhook on the relay's clock (%d 502s)%s"
                        % (worst, latency[worst], runs[worst], self.diag()))
        for d in deliveries:
            for target, row in self.rows(d).items():
                self.assertEqual((row["state"], row["attempts"]), ("sent", runs[(d, target)] + 1))
        self.assertNotIn("outbox.dead", self.relay.log_text())


class RateLimitPauseTest(FaultTestBase):
    REPOS = ["acme/a1", "acme/a2", "acme/a3", "acme/a4", "beta/b1"]
    PAUSE_S = 60  # longer than any real stretch of the test: only the moved clock ends it

    def run_limited(self, fault_rule_factory, until_of):
        """Starts a relay, installs the fault on acme's dispatches and posts a webhook; once the
        pause is recorded posts a second one. Checks that acme pauses until `until_of(limited
        request)` (the relay's clock) while beta goes on at once: the second webhook's acme rows
        (written after the pause was recorded) wait, beta's is sent, and only once the clock is
        moved past the pause does acme go on."""
        self.start_pair(allowlist=allowlist_yaml(l1=self.REPOS))
        # Warm the caches first so the limit hits a dispatch, not a token mint.
        warm = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(warm.delivery, t) for t in self.REPOS})
        self.quiesce(step=0)
        rule = fault_rule_factory()
        first = self.post_ok("pull_request", R.load_example("pull_request.opened")).delivery
        self.assertTrue(wait_until(lambda: any(x.fault is rule and x.answered
                                               for x in self.gh.requests()), 10),
                        "the limit was never answered" + self.diag())
        lim = [x for x in self.gh.requests("POST", DISPATCH_PATH) if x.fault is rule][0]
        until = until_of(lim)
        # The relay logs the pause once it has recorded it: only then is the installation paused
        # for rows claimed from now on, however slow the machine.
        self.assertTrue(wait_until(lambda: "event=github.rate_limited" in self.relay.log_text(),
                                   10), "the pause was never recorded" + self.diag())
        # A webhook that arrives while acme is paused: beta's row is sent at once, acme's rows
        # (and the limited one) wait, with nothing left running.
        second = self.post_ok("push", R.load_example("push.deleted")).delivery
        self.wait_pairs({(first, "beta/b1"), (second, "beta/b1")})
        self.assertTrue(wait_until(self.relay.waiting_for_time, 10),
                        "the relay never settled into the pause" + self.diag())
        waiting = [t for t, row in self.rows(second).items() if row["state"] == "queued"]
        self.assertEqual(sorted(waiting), self.REPOS[:4], "acme's rows must wait for the pause")
        self.assertEqual([x for x in self.gh.requests("POST", DISPATCH_PATH)
                          if pair_of(x)[0] == second and owner_of(x) == "acme"], [])
        # Past the pause, acme goes on.
        moved = self.clock.now()
        self.clock.advance(until - moved + 1)
        deliveries = [first, second]
        self.wait_pairs({(d, t) for d in deliveries for t in self.REPOS}, timeout=30)
        self.quiesce(step=0)
        self.assertEqual(rule.hits, 1)
        self.assertEqual(owner_of(lim), "acme")
        self.assertEqual(self.pause_violations([lim], until_of), [],
                         "requests to the paused installation")
        sent = [x for x in self.gh.requests("POST", DISPATCH_PATH) if x.status == 204]
        by_pair = {pair_of(x): x for x in sent}
        # acme: the limited row and the second webhook's rows waited for the end of the pause...
        for target in self.REPOS[:4]:
            self.assertGreaterEqual(by_pair[(second, target)].wall, until - SLACK_S, target)
        self.assertGreaterEqual(by_pair[pair_of(lim)].wall, until - SLACK_S)
        # ...while the other installation was served at once.
        self.assertLess(by_pair[(second, "beta/b1")].wall, moved,
                        "beta must not wait for acme's pause")
        # Rows: the limited one retried once, none dead, nobody dispatched twice.
        limited_pair = pair_of(lim)
        for d in deliveries:
            for target, row in self.rows(d).items():
                self.assertEqual(row["state"], "sent", row)
                want = 2 if (d, target) == limited_pair else 1
                self.assertEqual(row["attempts"], want, "%s %s" % (d, target))
        self.assertEqual({p: c for p, c in pair_counts(self.gh).items() if c != 1}, {})

    def test_secondary_limit_403_pauses_that_installation_for_retry_after(self):
        self.run_limited(
            lambda: self.gh.fault_secondary_limit(r"^/repos/acme/[^/]+/dispatches$",
                                                  retry_after=self.PAUSE_S, method="POST",
                                                  count=1),
            lambda lim: lim.wall + self.PAUSE_S)

    def test_primary_limit_403_pauses_that_installation_until_the_reset(self):
        resets = []

        def reset_header():
            # A minute ahead on the fake's clock (the relay's), whole seconds like GitHub.
            value = int(self.gh.now() + self.PAUSE_S)
            resets.append(value)
            return str(value)

        self.run_limited(
            lambda: self.gh.add_fault("POST", r"^/repos/acme/[^/]+/dispatches$", 403,
                                      {"content-type": "application/json",
                                       "x-ratelimit-limit": "5000",
                                       "x-ratelimit-remaining": "0",
                                       "x-ratelimit-used": "5000",
                                       "x-ratelimit-reset": reset_header,
                                       "x-ratelimit-resource": "core"},
                                      {"message": "API rate limit exceeded for installation."},
                                      count=1, name="primary limit"),
            lambda lim: float(resets[0]))
        self.assertEqual(len(resets), 1)


if __name__ == "__main__":
    unittest.main()
