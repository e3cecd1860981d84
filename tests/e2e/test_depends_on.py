"""End-to-end co-testing of paired PRs (spec §3.13, issue 25): `Depends-On:` lines of the PyTorch
PR body name a PR of a downstream repository; the dispatch to that repository carries it in
client_payload.depends_on, read from the fake GitHub at send time.

The stack is test_callback.Stack (the real relay, the fake GitHub with GET .../pulls/{n}, the
OIDC issuer, the fake HUD) on SQLite or, with CRCR_E2E_PG_URI, PostgreSQL. Covered:
  - a body naming l4-org/relay-l4#7: that repository's dispatch carries depends_on with PR 7's
    head sha from the fake GitHub (read with its installation token), the others carry none,
    every other envelope field is as before; the callback token binds the pair; the check run
    names it ("tested with l4-org/relay-l4#7 @ sha7");
  - editing the body to name #8 dispatches again to that repository only, with #8, and
    supersedes the #7 run; an edit that leaves the lines alone dispatches nothing;
  - a synchronize webhook of l4-org/relay-l4 PR 8 dispatches the PyTorch PR again to that
    repository with the new downstream sha (and supersedes the older run); a redelivery of it
    is a duplicate; an unpaired downstream PR and an unlisted repository are ignored;
  - a line naming an unlisted repository changes nothing (logged); the URL form on the fake's
    web host and a lower-case key count; a missing or closed PR is reported, not fatal;
  - the dispatch body stays within GitHub's limits with a pair and a body that must be trimmed
    (the contract check of the fake validates every dispatch too);
  - dry-run: the pair is recorded as not read, the request carries none.
Needs CRCR_BIN; see tests/support/README.md.
"""

import hashlib
import hmac
import json
import secrets
import unittest

import relay as R
from test_callback import CallbackMixin, new_run_id, new_sha
from waiting import wait_until

PAIRED, OTHER, L2 = "l4-org/relay-l4", "dep/other", "dep/l2"
ALLOWLIST = """\
L2:
  - dep/l2
L4:
  - l4-org/relay-l4
  - dep/other
"""
ALL = [L2, OTHER, PAIRED]
UPSTREAM_KEYS = {"event_type", "delivery_id", "payload", "callback_token"}


def new_pr_number():
    return 300000 + secrets.randbelow(600000)


def pr_event(action, number, sha, body, state="open", old_body=None):
    """A pull_request webhook of the PyTorch PR `number` (the example of `action`; an edit is the
    opened example with changes.body.from = old_body)."""
    obj = R.load_example_obj("pull_request." + ("opened" if action == "edited" else action))
    obj["action"] = action
    obj["number"] = obj["pull_request"]["number"] = number
    obj["pull_request"]["head"]["sha"] = sha
    obj["pull_request"]["body"] = body
    obj["pull_request"]["state"] = state
    if old_body is not None:
        obj["changes"] = {"body": {"from": old_body}}
    return obj


def downstream_push(repo, number, sha):
    """pull_request synchronize of `repo`'s PR `number` (the App is installed there too)."""
    obj = R.load_example_obj("pull_request.synchronize")
    owner, name = repo.split("/")
    obj["number"] = obj["pull_request"]["number"] = number
    obj["pull_request"]["head"]["sha"] = sha
    obj["repository"]["full_name"], obj["repository"]["name"] = repo, name
    obj["repository"]["owner"]["login"] = owner
    return obj


def callback_token(secret, delivery, repo, sha, pr, pair=None):
    """The relay's token (src/github/cbtoken.h), computed here to show what it binds."""
    key = hmac.new(secret.encode(), b"crcr callback token key v1", hashlib.sha256).digest()
    m = "v1\n%s\n%s\n%s\n%d" % (delivery, repo.lower(), sha, pr)
    if pair:
        m += "\npair\n%d\n%s" % pair
    return "v1." + hmac.new(key, m.encode(), hashlib.sha256).hexdigest()


class DependsOnMixin(CallbackMixin):
    STACK_ENV = {"CRCR_HUD_CACHE_MS": "0"}
    STACK_KW = {"allowlist": ALLOWLIST}

    def open(self, body, action="opened", number=None, sha=None, repos=ALL, state="open",
             old_body=None):
        number = number or new_pr_number()
        sha = sha or new_sha()
        obj = pr_event(action, number, sha, body, state, old_body)
        return self._dispatch("pull_request", obj, sha, number, None, repos)

    def pull(self, number, sha=None, **kw):
        sha = sha or new_sha()
        self.s.gh.set_pull(PAIRED, number, sha, head_ref="fix-%d" % number, **kw)
        return sha

    def dispatches_of(self, delivery):
        return {d["repo"]: d for d in self.s.gh.dispatches()
                if d["client_payload"].get("delivery_id") == delivery}

    def dispatch_row(self, delivery, repo, until=lambda row: row["state"] not in ("queued",
                                                                                "running")):
        """The dispatch row of `delivery` to `repo` once `until(row)` holds (by default once its
        outcome is recorded: the fake sees the request before the relay has written what the
        answer made of the row); the last row read when it never does."""
        last = {}

        def recorded():
            doc = self.s.relay.get("/api/v1/deliveries/%s" % delivery).json()
            (row,) = [j for j in doc["outbox"] if j["kind"] == "dispatch" and j["target"] == repo]
            last["row"] = row
            return until(row)

        wait_until(recorded, 15.0)
        return last["row"]

    def pr_runs(self, number, repo):
        doc = self.s.relay.get("/api/v1/pr/%d" % number).json()
        return [r for s in doc["shas"] for r in s["runs"] if r["repo"] == repo]

    def assertPair(self, cp, number, sha):
        want = {"repository": PAIRED, "number": number, "head_sha": sha,
                "head_ref": "fix-%d" % number,
                "clone_url": "%s/%s.git" % (self.s.gh.web_url, PAIRED)}
        self.assertEqual(cp.get("depends_on"), want)
        self.assertEqual(set(cp), UPSTREAM_KEYS | {"depends_on"})


class DependsOnTest(DependsOnMixin, unittest.TestCase):

    def test_the_named_repository_gets_the_pair_and_the_others_none(self):
        sha7 = self.pull(7)
        body = ("Changes an API relay-l4 uses.\r\n\r\nDepends-On: l4-org/relay-l4#7\r\n"
                "Depends-On: unlisted/repo#3\r\n")
        before = len(self.s.gh.pull_reads())
        pr = self.open(body)
        d = self.dispatches_of(pr.delivery)
        self.assertPair(d[PAIRED]["client_payload"], 7, sha7)
        for repo in (OTHER, L2):
            self.assertEqual(set(d[repo]["client_payload"]), UPSTREAM_KEYS, repo)
        # The rest of the envelope is what an unpaired dispatch carries: the webhook verbatim.
        cp = d[PAIRED]["client_payload"]
        self.assertEqual((cp["event_type"], cp["delivery_id"]), ("pull_request", pr.delivery))
        self.assertEqual(cp["payload"], d[OTHER]["client_payload"]["payload"])
        self.assertEqual(cp["payload"]["pull_request"]["body"], body)
        # Read once, with relay-l4's installation token; the unlisted repo is never read.
        reads = self.s.gh.pull_reads()[before:]
        self.assertEqual([r.path for r in reads], ["/repos/%s/pulls/7" % PAIRED])
        self.assertEqual(self.s.gh.token_info(reads[0].headers["authorization"].split()[1])
                         ["owner"], "l4-org")
        self.assertIn("event=webhook.depends_on_ignored", self.s.relay.log_text())
        self.assertIn("repo=unlisted/repo", self.s.relay.log_text())
        row = self.dispatch_row(pr.delivery, PAIRED)
        self.assertEqual((row["depends_on"]["number"], row["depends_on"]["head_sha"]), (7, sha7))
        self.assertEqual(row["note"], "Depends-On %s#7 @ %s" % (PAIRED, sha7[:7]))
        self.assertNotIn("depends_on", self.dispatch_row(pr.delivery, OTHER))

        # The callback token binds the pair; the check run names it.
        self.assertEqual(cp["callback_token"],
                         callback_token(R.DEFAULT_SECRET, pr.delivery, PAIRED, pr.sha, pr.number,
                                        (7, sha7)))
        unpaired = callback_token(R.DEFAULT_SECRET, pr.delivery, PAIRED, pr.sha, pr.number)
        body_unpaired = self.body(pr.cp(PAIRED), "in_progress")
        body_unpaired["callback_token"] = unpaired
        self.assertDetail(self.post_callback(PAIRED, body_unpaired), 403,
                          contains="callback_token does not match")
        run = new_run_id()
        self.assertOk(self.cb(PAIRED, pr, "in_progress", run_id=run), "in_progress")
        self.assertOk(self.cb(PAIRED, pr, "completed", run_id=run), "completed")
        checks = self.wait_checks(pr.sha, 2, PAIRED)
        suffix = " - tested with %s#7 @ %s" % (PAIRED, sha7[:7])
        self.assertEqual([c["output"]["title"] for c in checks],
                         ["In progress" + suffix, "Success" + suffix])
        self.assertIn("Tested with %s#7 @ %s (fix-7)." % (PAIRED, sha7[:7]),
                      checks[1]["output"]["summary"])
        self.assertOk(self.cb(OTHER, pr, "in_progress"), "in_progress")
        (other,) = self.wait_checks(pr.sha, 1, OTHER)
        self.assertEqual(other["output"]["title"], "In progress")

    def test_editing_the_body_to_name_8_redispatches_that_repository_and_supersedes(self):
        sha7, sha8 = self.pull(7), self.pull(8)
        body7 = "Depends-On: l4-org/relay-l4#7"
        pr = self.open(body7)
        run7 = new_run_id()
        self.assertOk(self.cb(PAIRED, pr, "in_progress", run_id=run7), "in_progress")
        self.wait_checks(pr.sha, 1, PAIRED)

        # An edit of other text leaves the pairs alone: nothing is dispatched.
        r = self.webhook("pull_request", pr_event("edited", pr.number, pr.sha,
                                                  body7 + "\n\nTypo fixed.", old_body=body7))
        self.assertEqual((r.status, r.json()), (200, {"ignored": True}))

        body8 = "Depends-On: l4-org/relay-l4#8"
        edit = self.open(body8, action="edited", number=pr.number, sha=pr.sha, repos=[PAIRED],
                         old_body=body7 + "\n\nTypo fixed.")
        d = self.dispatches_of(edit.delivery)
        self.assertEqual(sorted(d), [PAIRED], "an edit dispatches to the changed pair only")
        self.assertPair(d[PAIRED]["client_payload"], 8, sha8)
        self.assertEqual(d[PAIRED]["client_payload"]["payload"]["action"], "edited")
        (run,) = [x for x in self.pr_runs(pr.number, PAIRED) if x["run_id"] == str(run7)]
        self.assertEqual((run["result"], run["ended"], run["conclusion"]),
                         ("superseded", "superseded", "cancelled"))
        checks = self.wait_checks(pr.sha, 2, PAIRED)
        self.assertEqual((checks[1]["status"], checks[1]["conclusion"],
                          checks[1]["output"]["title"]),
                         ("completed", "cancelled",
                          "Cancelled - tested with %s#7 @ %s" % (PAIRED, sha7[:7])))
        self.assertEqual(self.dispatch_row(pr.delivery, PAIRED)["ended"],
                         {"reason": "superseded", "by": edit.delivery})
        self.assertNotIn("ended", self.dispatch_row(pr.delivery, OTHER))
        run8 = new_run_id()
        self.assertOk(self.cb(PAIRED, edit, "in_progress", run_id=run8), "in_progress")
        checks = self.wait_checks(pr.sha, 3, PAIRED)
        self.assertEqual(checks[2]["output"]["title"],
                         "In progress - tested with %s#8 @ %s" % (PAIRED, sha8[:7]))

        # Removing the line dispatches the repository again without a pair.
        gone = self.open("No pair any more.", action="edited", number=pr.number, sha=pr.sha,
                         repos=[PAIRED], old_body=body8)
        cp = self.dispatches_of(gone.delivery)[PAIRED]["client_payload"]
        self.assertEqual(set(cp), UPSTREAM_KEYS)
        (run,) = [x for x in self.pr_runs(pr.number, PAIRED) if x["run_id"] == str(run8)]
        self.assertEqual(run["result"], "superseded")

    def test_a_push_to_the_paired_downstream_pr_redispatches_with_the_new_sha(self):
        old = self.pull(8)
        pr = self.open("Depends-On: l4-org/relay-l4#8")
        self.assertPair(self.dispatches_of(pr.delivery)[PAIRED]["client_payload"], 8, old)
        run = new_run_id()
        self.assertOk(self.cb(PAIRED, pr, "in_progress", run_id=run), "in_progress")

        new = self.pull(8)  # a push to relay-l4's PR 8
        # The new dispatch's answer waits at the fake until the callback below is answered: a
        # downstream may call back before the relay has recorded the dispatch's outcome, and the
        # pair its token binds must be in the store by then.
        hold = self.s.gh.hold("POST", r"/repos/%s/dispatches$" % PAIRED)
        self.addCleanup(hold.release)
        r = self.webhook("pull_request", downstream_push(PAIRED, 8, new))
        self.assertEqual(r.status, 202, r.body)
        again = "%s:pr%d" % (r.delivery, pr.number)
        self.assertEqual(r.json(), {"ok": True, "delivery_id": r.delivery, "queued": [PAIRED],
                                    "redispatched": [{"pull_request": pr.number,
                                                      "delivery_id": again}]})
        d = wait_until(lambda: self.dispatches_of(again).get(PAIRED), 15.0)
        self.assertTrue(d, "no dispatch of %s%s" % (again, self.diag()))
        cp = d["client_payload"]
        self.assertPair(cp, 8, new)
        # The PyTorch PR's webhook, as dispatched before: its head, its number.
        self.assertEqual(cp["payload"], self.dispatches_of(pr.delivery)[PAIRED]
                         ["client_payload"]["payload"])
        self.assertEqual(sorted(self.dispatches_of(again)), [PAIRED])
        (old_run,) = [x for x in self.pr_runs(pr.number, PAIRED) if x["run_id"] == str(run)]
        self.assertEqual((old_run["result"], old_run["ended"]), ("superseded", "superseded"))
        # Callbacks of the new run are bound to the new pair and accepted.
        repush = self.s.relay.get("/api/v1/deliveries/%s" % again).json()
        self.assertEqual((repush["pr_number"], repush["head_sha"]), (pr.number, pr.sha))
        self.assertTrue(hold.wait_reached(15.0),
                        "the dispatch's answer was not held" + self.diag())
        self.assertOk(self.post_callback(PAIRED, self.body(cp, "in_progress",
                                                           run_id=new_run_id())), "in_progress")
        hold.release()

        # The same webhook again: a duplicate, nothing dispatched twice.
        r2 = self.webhook("pull_request", downstream_push(PAIRED, 8, new), delivery=r.delivery)
        self.assertEqual((r2.status, r2.json()), (200, {"ok": True, "duplicate": True}))
        # A PR no upstream PR names, and a repository not on the allowlist: ignored as before.
        for repo, number in ((PAIRED, 99), ("stranger/repo", 8)):
            r3 = self.webhook("pull_request", downstream_push(repo, number, new_sha()))
            self.assertEqual((r3.status, r3.json()), (200, {"ignored": True}), repo)
        self.settle()
        self.assertEqual(len([x for x in self.s.gh.dispatches()
                              if x["client_payload"]["delivery_id"] == again]), 1)

    def test_a_line_naming_an_unlisted_repository_changes_nothing(self):
        before = len(self.s.gh.pull_reads())
        pr = self.open("Depends-On: stranger/repo#5\nDepends-On: l4-org\n")
        for repo, d in self.dispatches_of(pr.delivery).items():
            self.assertEqual(set(d["client_payload"]), UPSTREAM_KEYS, repo)
            self.assertNotIn("depends_on", self.dispatch_row(pr.delivery, repo))
        self.settle()
        self.assertEqual(self.s.gh.pull_reads()[before:], [])
        # A push to that repository's PR is no pair: ignored.
        r = self.webhook("pull_request", downstream_push("stranger/repo", 5, new_sha()))
        self.assertEqual((r.status, r.json()), (200, {"ignored": True}))

    def test_the_url_form_and_a_lower_case_key_count(self):
        sha7 = self.pull(7)
        pr = self.open("see below\n  depends-on :  %s/%s/pull/7/  \n" % (self.s.gh.web_url,
                                                                        PAIRED))
        self.assertPair(self.dispatches_of(pr.delivery)[PAIRED]["client_payload"], 7, sha7)

    def test_a_missing_or_closed_pr_is_reported_not_fatal(self):
        self.pull(9, state="closed")
        self.pull(10, merged=True)
        for number, problem in ((404, "not found"), (9, "closed"), (10, "merged")):
            with self.subTest(pr=number):
                pr = self.open("Depends-On: l4-org/relay-l4#%d" % number)
                cp = self.dispatches_of(pr.delivery)[PAIRED]["client_payload"]
                self.assertEqual(set(cp), UPSTREAM_KEYS)  # sent, without a pair
                row = self.dispatch_row(pr.delivery, PAIRED)
                self.assertEqual((row["state"], row["depends_on"]["number"],
                                  row["depends_on"]["problem"], row["depends_on"]["head_sha"]),
                                 ("sent", number, problem, None))
                self.assertEqual(row["note"], "Depends-On %s#%d not tested: %s"
                                 % (PAIRED, number, problem))
                self.assertOk(self.cb(PAIRED, pr, "in_progress"), "in_progress")
                (check,) = self.wait_checks(pr.sha, 1, PAIRED)
                self.assertEqual(check["output"]["title"], "In progress")
                self.assertIn("Depends-On %s#%d was not tested: %s." % (PAIRED, number, problem),
                              check["output"]["summary"])

    def test_the_dispatch_body_stays_within_githubs_limits(self):
        sha7 = self.pull(7)
        text = "Depends-On: l4-org/relay-l4#7\n" + "x" * 60000  # the envelope must be trimmed
        pr = self.open(text)
        d = self.dispatches_of(pr.delivery)[PAIRED]
        self.assertLess(len(d["body"]), 65000)
        cp = d["client_payload"]
        self.assertLessEqual(len(cp), 10)
        self.assertEqual(cp["depends_on"]["head_sha"], sha7)
        self.assertIn("payload.pull_request.body", cp["trimmed"])
        self.assertEqual(set(cp), UPSTREAM_KEYS | {"depends_on", "trimmed"})
        self.assertTrue(self.dispatch_row(pr.delivery, PAIRED)["note"].startswith(
            "Depends-On %s#7 @ %s; trimmed: payload.pull_request.body" % (PAIRED, sha7[:7])))


class RetriedPairTest(DependsOnMixin, unittest.TestCase):
    """A paired dispatch writes the pair it resolved before it goes out. When GitHub fails it
    and the row is sent again (after a retry delay that only the moved clock ends), the pair is
    read again: here the PR is gone by then, and the dispatch goes without the old pair."""
    STACK_ENV = dict(DependsOnMixin.STACK_ENV, CRCR_RETRY_BASE_MS="60000",
                     CRCR_RETRY_MAX_MS="60000")

    def test_a_dispatch_sent_again_reads_its_pair_again(self):
        sha = self.pull(11)
        posts = r"/repos/%s/dispatches$" % PAIRED
        read = r"/repos/%s/pulls/11$" % PAIRED
        self.s.gh.fault_5xx(posts, status=502, method="POST", count=1)
        pr = self.open("Depends-On: l4-org/relay-l4#11", repos=[OTHER])
        self.assertTrue(wait_until(lambda: [x for x in self.s.gh.requests("POST", posts)
                                            if x.status == 502], 15.0),
                        "the paired dispatch was not sent" + self.diag())
        # The attempt GitHub failed had resolved the pair, and said so in the store.
        row = self.dispatch_row(pr.delivery, PAIRED, until=lambda x: x["state"] == "queued")
        self.assertEqual(row["state"], "queued", "the failed attempt was not put back" +
                         self.diag())
        self.assertEqual(row["depends_on"]["head_sha"], sha)
        self.assertEqual(len(self.s.gh.requests("GET", read)), 1)
        # The PR is gone when the row is sent again.
        self.s.gh.add_fault("GET", read, 404)  # every read from now on
        d = wait_until(lambda: self.dispatches_of(pr.delivery).get(PAIRED), 15.0,
                       clock=self.s.clock, step=10.0)
        self.assertTrue(d, "no second attempt" + self.diag())
        cp = d["client_payload"]
        self.assertEqual(set(cp), UPSTREAM_KEYS, self.diag())
        self.assertEqual(cp["callback_token"], callback_token(R.DEFAULT_SECRET, pr.delivery,
                                                              PAIRED, pr.sha, pr.number))
        row = self.dispatch_row(pr.delivery, PAIRED)
        self.assertEqual((row["state"], row["attempts"], row["depends_on"]["problem"],
                          row["depends_on"]["head_sha"]), ("sent", 2, "not found", None))
        self.assertEqual(row["note"], "Depends-On %s#11 not tested: not found" % PAIRED)
        self.assertOk(self.post_callback(PAIRED, self.body(cp, "in_progress")), "in_progress")


class DryRunTest(unittest.TestCase):
    """Without App credentials nothing can be read from GitHub: the pair is recorded as not
    read and the request the row would have sent carries none."""

    def test_dry_run_records_the_pair_unread(self):
        relay = R.Relay(allowlist=ALLOWLIST)
        self.addCleanup(relay.close)
        relay.start()
        obj = pr_event("opened", new_pr_number(), new_sha(), "Depends-On: l4-org/relay-l4#7")
        r = relay.webhook("pull_request", R.compact(obj))
        self.assertEqual(r.status, 202, r.body)

        def shown():
            rc, out, _ = relay.cli(["deliveries", "show", r.delivery, "--format", "json"])
            rows = [x for x in json.loads(out)["outbox"] if x["target"] == PAIRED] if rc == 0 \
                else []
            return rows[0] if rows and rows[0]["state"] == "dry_run" else None
        row = wait_until(shown, 10.0)
        self.assertTrue(row, relay.log_tail())
        self.assertEqual((row["depends_on"]["number"], row["depends_on"]["problem"]),
                         (7, "not read in dry-run mode"))
        self.assertNotIn("depends_on", json.loads(row["body"])["client_payload"])


if __name__ == "__main__":
    unittest.main()
