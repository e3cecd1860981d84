"""End-to-end on-call comments on the upstream PR (issue 13 part 3; upstream reference §2.5
"Oncall ping"): the real relay, the fake GitHub and OIDC issuer of test_callback.py.

When a crcr check run is created completed with failure, cancelled or timed_out on a PR and the
downstream repo has on-calls in the allowlist, the relay comments once per (PR, downstream repo),
mentioning them, with upstream's marker `<!-- crcr-oncall:OWNER/REPO -->` as the first line. Covered:
  - a failing L4 check run -> exactly one comment naming the on-calls (recorded by the fake);
    a second failure of the same repo on the same PR (also from a reopened PR's new delivery)
    adds none;
  - a PR that already holds upstream's marker for the repo gets none (another repo's marker does
    not count); a marker written by another user (any GitHub user can comment), or by upstream's
    bot anywhere but at the start of its comment, does not stop the comment; with
    CRCR_ONCALL_TRUSTED_AUTHORS=- only the App's own comments count;
  - crash safety: the relay SIGKILLed after GitHub created the comment but before the relay learnt
    of it (the fake holds its answer), and SIGKILLed while it listed the PR's comments, before its
    POST; after the restart there is exactly one comment either way;
  - CRCR_ONCALL_COMMENTS=0 posts nothing; a repo without on-calls gets none; success, an
    in_progress check run and a push (no PR) get none; L2 never; L3 only with its check run (the
    label on the PR, or the label event's back-fill of a failed job);
  - the sweeper's timed_out check run comments (the zombie timeout runs out on the stack's moved
    clock);
  - dry-run (no App) records the comment row as dry_run and sends nothing;
  - a hostile job name cannot mention anyone or break the comment's table.
Every wait is on an observable event (a request, a comment, an outbox row's state), never a
sleep; timers (the zombie timeout, a dead claim's lease) run out on the moved clock. Harness:
test_callback.py. Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import re
import secrets
import unittest

import relay as R
from test_callback import PR, UPSTREAM, CallbackMixin, new_run_id, new_sha
from test_callback_checks import labeled_event
from waiting import wait_until

L2, L3, L3_NONE, L4, L4_NONE = ("org2/repo2", "org3/repo3", "org3/repo3b", "org4/repo4",
                                "org6/repo6")
ALLOWLIST = """\
L1:
  - org1/repo1
L2:
  - org2/repo2: alice
L3:
  dev:
    org3/repo3: [oncall-a, "@pytorch/dev-oncall"]
    org3/repo3b: []
L4:
  - org4/repo4: alice, @pytorch/accel-oncall
  - org6/repo6
"""
MARKER = "<!-- crcr-oncall:%s -->"
COMMENTS_PATH = r"^/repos/pytorch/pytorch/issues/%d/comments$"
TITLE = "## :x: CRCR downstream CI failure"
ROW_TIMEOUT = 30.0  # generous: an outbox row, its listing and its POST on a loaded machine


class OncallMixin(CallbackMixin):
    STACK_KW = {"allowlist": ALLOWLIST, "hud": False}

    def own(self, env=None):
        """A private stack with this suite's allowlist and `env`."""
        return self.own_stack(env=env, allowlist=ALLOWLIST, hud=False)

    def fail_job(self, repo, pr, job="build", conclusion="failure", run_id=None):
        """in_progress then completed with `conclusion` for one job of `repo` on `pr`."""
        self.progress(repo, pr, job_name=job, conclusion=conclusion,
                      run_id=run_id or new_run_id())

    def comments(self, pr):
        return self.s.gh.comments(UPSTREAM, pr.number)

    def wait_comments(self, pr, n):
        got = self.s.gh.wait_comments(UPSTREAM, pr.number, n, timeout=ROW_TIMEOUT)
        self.assertGreaterEqual(len(got), n, "%d of %d comments on #%d%s"
                                % (len(got), n, pr.number, self.diag()))
        return got

    def comment_rows(self, delivery, n=1, step=0.0):
        """The `comment` outbox rows of `delivery` once there are `n` and all are finished (with
        `step`, each poll without them moves the clock `step` s: a lease runs out)."""
        def got():
            rows = self.outbox(delivery, "comment")
            done = [r for r in rows if r["state"] in ("sent", "dry_run", "dead")]
            return rows if len(rows) >= n and len(done) == len(rows) else None
        rows = wait_until(got, ROW_TIMEOUT, 0.1, self.s.clock, step)
        self.assertTrue(rows, "comment rows of %s: %r%s"
                        % (delivery, self.outbox(delivery, "comment"), self.diag()))
        return rows

    def assert_never_commented(self, pr):
        """No comment row was written with `pr`'s check runs (call once they are seen: the row
        would have been written in the same transaction), so nothing reaches the PR."""
        self.assertEqual(self.outbox(pr.delivery, "comment"), [])
        self.settle()
        self.assertEqual(self.comments(pr), [])
        self.assertEqual(self.s.gh.requests(path_re=COMMENTS_PATH % pr.number), [])

    def comment_requests(self, pr, method):
        return self.s.gh.requests(method, COMMENTS_PATH % pr.number)

    def assert_our_comment(self, body, repo, pr, mentions, check, conclusion):
        lines = body.split("\n")
        self.assertEqual(lines[0], MARKER % repo)
        self.assertEqual(lines[1], TITLE)
        self.assertIn("The downstream CI of `%s` failed on commit `%s`." % (repo, pr.sha[:7]),
                      body)
        self.assertIn("%s please investigate." % " ".join(mentions), lines)
        self.assertIn("| Check Run | Commit | Conclusion |", lines)
        web = self.s.gh.web_url
        if web.startswith("https://"):
            row = [l for l in lines if l.startswith("| [`")]
            self.assertEqual(len(row), 1, body)
            self.assertRegex(row[0], r"^\| \[`%s`\]\(%s/%s/actions/runs/\d+\) "
                             r"\| `%s` \| `%s` \|$" % (re.escape(check), re.escape(web),
                                                        re.escape(repo), pr.sha[:7], conclusion))
        else:  # a GHES fake's http://127.0.0.1 host: the run page is not linked (https only)
            self.assertIn("| `%s` | `%s` | `%s` |" % (check, pr.sha[:7], conclusion), lines,
                          body)


# ============================================================================================


class OncallCommentTest(OncallMixin, unittest.TestCase):
    def test_a_failing_l4_check_run_comments_once_naming_the_oncalls(self):
        pr = self.open_pr(repos=[L4])
        self.fail_job(L4, pr, job="build (linux)")
        (c,) = self.wait_comments(pr, 1)
        self.assert_our_comment(c["body"], L4, pr, ["@alice", "@pytorch/accel-oncall"],
                                "crcr/%s/CI/build (linux)" % L4, "failure")
        self.assertEqual(c["user"]["login"], "crcr-test[bot]")  # posted as the App
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual((row["state"], row["note"]), ("sent", "commented"))
        self.assertEqual(len(self.comment_requests(pr, "GET")), 1)  # the marker looked for once

        # A second failure of the same repo on the same PR: recorded, nothing sent.
        self.fail_job(L4, pr, job="test", conclusion="cancelled")
        rows = self.comment_rows(pr.delivery, 2)
        self.assertEqual([(r["state"], r["note"]) for r in rows],
                         [("sent", "commented"), ("sent", "already commented (recorded)")])
        # The same PR reopened: a new delivery, the same (PR, repo).
        reopened = self.open_pr(action="reopened", sha=pr.sha, number=pr.number, repos=[L4])
        self.fail_job(L4, reopened, job="build (linux)", conclusion="timed_out")
        (row,) = self.comment_rows(reopened.delivery)
        self.assertEqual(row["note"], "already commented (recorded)")
        self.assertEqual(len(self.comments(pr)), 1)
        self.assertEqual(len(self.comment_requests(pr, "POST")), 1)
        self.assertEqual(len(self.comment_requests(pr, "GET")), 1)

    def test_one_comment_per_downstream_repo(self):
        pr = self.open_pr(labels=["ciflow/crcr/dev"], repos=[L3, L4])
        self.fail_job(L4, pr)
        self.wait_comments(pr, 1)
        self.fail_job(L3, pr, job="dev-test")
        bodies = [c["body"] for c in self.wait_comments(pr, 2)]
        self.assertEqual(sorted(b.split("\n")[0] for b in bodies),
                         sorted([MARKER % L3, MARKER % L4]))
        l3 = next(b for b in bodies if b.startswith(MARKER % L3))
        self.assert_our_comment(l3, L3, pr, ["@oncall-a", "@pytorch/dev-oncall"],
                                "crcr/%s/CI/dev-test" % L3, "failure")

    def test_a_pr_holding_upstreams_marker_gets_none(self):
        number = 700000 + new_run_id() % 100000
        # Upstream's bot commented for this repo (the case of the repo name may differ); a marker
        # of another repo does not count.
        self.s.gh.add_comment(UPSTREAM, number, "<!-- crcr-oncall:org3/repo3 -->\n" + TITLE)
        self.s.gh.add_comment(UPSTREAM, number, "<!-- crcr-oncall:ORG4/Repo4 -->\n" + TITLE +
                              "\n\n@alice please investigate.")
        pr = self.open_pr(number=number, repos=[L4])
        self.fail_job(L4, pr)
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual((row["state"], row["note"]),
                         ("sent", "already commented (marker on the PR)"))
        self.assertEqual(len(self.comments(pr)), 2)
        self.assertEqual(self.comment_requests(pr, "POST"), [])
        # Recorded: the next failure does not even list the comments again.
        self.fail_job(L4, pr, job="again")
        rows = self.comment_rows(pr.delivery, 2)
        self.assertEqual(rows[1]["note"], "already commented (recorded)")
        self.assertEqual(len(self.comment_requests(pr, "GET")), 1)

    def test_a_marker_by_another_user_does_not_stop_the_comment(self):
        number = 750000 + new_run_id() % 100000
        # Any GitHub user can comment on a PR: a user writing the marker, a user writing it under
        # the bot's name without the [bot] suffix, and upstream's bot quoting it further down
        # its comment are no on-call comment.
        self.s.gh.add_comment(UPSTREAM, number, MARKER % L4 + "\n" + TITLE, login="mallory",
                              user_type="User")
        self.s.gh.add_comment(UPSTREAM, number, MARKER % L4, login="pytorch-bot",
                              user_type="User")
        self.s.gh.add_comment(UPSTREAM, number, "see above:\n" + MARKER % L4)
        pr = self.open_pr(number=number, repos=[L4])
        self.fail_job(L4, pr)
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual((row["state"], row["note"]), ("sent", "commented"))
        (posted,) = [c for c in self.comments(pr) if c["user"]["login"] == "crcr-test[bot]"]
        self.assertTrue(posted["body"].startswith(MARKER % L4 + "\n"), posted["body"])
        self.assertEqual(len(self.comment_requests(pr, "POST")), 1)

    def test_with_no_trusted_authors_only_the_apps_own_marker_counts(self):
        s = self.own(env={"CRCR_ONCALL_TRUSTED_AUTHORS": "-"})
        number = 760000 + new_run_id() % 100000
        s.gh.add_comment(UPSTREAM, number, MARKER % L4 + "\n" + TITLE)  # upstream's bot
        pr = self.open_pr(number=number, repos=[L4])
        self.fail_job(L4, pr)
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual(row["note"], "commented")
        self.assertEqual(len(self.comment_requests(pr, "POST")), 1)

    def test_the_marker_is_found_past_the_first_page(self):
        number = 800000 + new_run_id() % 100000
        for i in range(65):
            self.s.gh.add_comment(UPSTREAM, number, "chatter %d" % i, login="someone",
                                  user_type="User")
        self.s.gh.add_comment(UPSTREAM, number, "<!-- crcr-oncall:org4/repo4 -->\n" + TITLE)
        pr = self.open_pr(number=number, repos=[L4])
        self.fail_job(L4, pr)
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual(row["note"], "already commented (marker on the PR)")
        pages = sorted(int(r.query["page"]) for r in self.comment_requests(pr, "GET"))
        self.assertEqual(pages, [1, 2, 3])
        self.assertEqual(self.comment_requests(pr, "POST"), [])

    def test_no_comment_without_an_alerting_completed_check_run_on_a_pr(self):
        pr = self.open_pr(repos=[L4, L4_NONE, L2])
        self.fail_job(L4, pr, conclusion="success")
        self.fail_job(L4, pr, job="skipped", conclusion="skipped")
        self.fail_job(L4, pr, job="neutral", conclusion="neutral")
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="running"), "in_progress")
        self.fail_job(L4_NONE, pr)  # failing, but the repo has no on-calls
        self.fail_job(L2, pr)  # on-calls, but L2: no check run
        self.wait_checks(pr.sha, 7, L4)
        self.wait_checks(pr.sha, 2, L4_NONE)
        push = self.push(repos=[L4])  # a check run without a PR
        self.fail_job(L4, push)
        self.wait_checks(push.sha, 2, L4)
        self.assertEqual(self.outbox(push.delivery, "comment"), [])
        self.assert_never_commented(pr)
        self.assertEqual(self.checks_for(pr.sha, L2), [])

    def test_l3_comments_only_with_its_check_run(self):
        # Without the label: no check run, no comment.
        pr = self.open_pr(repos=[L3, L3_NONE])
        self.fail_job(L3, pr, job="unlabelled")
        self.assertEqual(self.outbox(pr.delivery, "comment"), [])
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        # The label arrives after the run: the back-filled check run is a completed failure, and
        # pings the on-calls as upstream's bot would on its check_run.completed.
        r = self.webhook("pull_request", labeled_event(pr, "ciflow/crcr/dev"))
        self.assertEqual(r.status, 200, r.body)
        self.wait_checks(pr.sha, 1, L3)
        (c,) = self.wait_comments(pr, 1)
        self.assert_our_comment(c["body"], L3, pr, ["@oncall-a", "@pytorch/dev-oncall"],
                                "crcr/%s/CI/unlabelled" % L3, "failure")
        (row,) = self.comment_rows(r.delivery)
        self.assertEqual(row["note"], "commented")
        # An L3 repo of the device without on-calls: its check runs, no comment.
        self.fail_job(L3_NONE, pr, job="none")
        self.wait_checks(pr.sha, 2, L3_NONE)
        self.assertEqual(self.outbox(pr.delivery, "comment"), [])
        # With the label on the PR from the start.
        labelled = self.open_pr(labels=["ciflow/crcr/dev"], repos=[L3])
        self.fail_job(L3, labelled, job="labelled", conclusion="cancelled")
        (c,) = self.wait_comments(labelled, 1)
        self.assertIn("| `cancelled` |", c["body"])

    def test_a_hostile_job_name_cannot_mention_or_break_the_table(self):
        pr = self.open_pr(repos=[L4])
        job = "x` | @pytorch/everyone <img src=x onerror=alert(1)>\n| [a](https://evil) #1 |"
        self.fail_job(L4, pr, job=job)
        (c,) = self.wait_comments(pr, 1)
        body = c["body"]
        self.assertEqual(body.count("@"), 2, body)  # @alice @pytorch/accel-oncall only
        self.assertNotIn("@pytorch/everyone", body)
        self.assertNotIn("<img", body)
        self.assertEqual(body.count("<"), 1)  # the marker's
        linked = self.s.gh.web_url.startswith("https://")  # not a GHES fake's http host
        row = [l for l in body.split("\n") if l.startswith("| [`" if linked else "| `crcr/")]
        self.assertEqual(len(row), 1, body)
        self.assertEqual(row[0].count("|"), 4)
        self.assertEqual(row[0].count("`"), 6)
        self.assertEqual(row[0].count("]("), 1 if linked else 0)
        # The check run itself keeps the name as reported.
        (done,) = wait_until(lambda: [x for x in self.checks_for(pr.sha, L4)
                                      if x["status"] == "completed"], ROW_TIMEOUT)
        self.assertEqual(done["name"], "crcr/%s/CI/%s" % (L4, job))


class OncallSwitchTest(OncallMixin, unittest.TestCase):
    STACK_KW = {"allowlist": ALLOWLIST, "hud": False}
    STACK_ENV = {"CRCR_ONCALL_COMMENTS": "0"}

    def test_oncall_comments_0_posts_nothing(self):
        pr = self.open_pr(repos=[L4])
        self.fail_job(L4, pr)
        self.wait_checks(pr.sha, 2, L4)
        self.assert_never_commented(pr)
        rc, out, _ = self.s.relay.cli(["config"])
        self.assertEqual(rc, 0)
        self.assertIn("CRCR_ONCALL_COMMENTS=0", out)


class OncallDryRunTest(OncallMixin, unittest.TestCase):
    STACK_ENV = {"GITHUB_APP_ID": None, "GITHUB_APP_PRIVATE_KEY_FILE": None}  # dry-run

    def test_dry_run_records_the_comment_and_sends_nothing(self):
        obj = R.load_example_obj("pull_request.opened")
        sha, number = new_sha(), 1000 + secrets.randbelow(900000)
        obj["number"] = obj["pull_request"]["number"] = number
        obj["pull_request"]["head"]["sha"] = sha
        r = self.webhook("pull_request", obj)
        self.assertEqual(r.status, 202, r.body)
        # The downstream echoes the client_payload of the dispatch the relay would have sent.
        rows = wait_until(lambda: [x for x in self.outbox(r.delivery, "dispatch")
                                   if x["target"] == L4 and x["state"] == "dry_run"],
                          ROW_TIMEOUT, interval=0.1)
        self.assertTrue(rows, self.diag())
        pr = PR(r.delivery, sha, number, {L4: json.loads(rows[0]["body"])["client_payload"]})
        self.fail_job(L4, pr)
        (row,) = self.comment_rows(pr.delivery)
        self.assertEqual(row["state"], "dry_run")
        recorded = json.loads(row["body"])
        self.assertEqual((recorded["pr"], recorded["repo"]), (number, L4))
        self.assertTrue(recorded["body"].startswith(MARKER % L4 + "\n" + TITLE + "\n"))
        self.assertEqual(self.s.gh.requests(), [])


class OncallSweeperTest(OncallMixin, unittest.TestCase):
    STACK_ENV = {"ZOMBIE_TIMEOUT_SECONDS": "3600", "CRCR_SWEEP_SECONDS": "60"}

    def test_the_sweepers_timed_out_check_run_comments(self):
        pr = self.open_pr(repos=[L4])
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="zombie"), "in_progress")
        self.settle()  # nothing in flight: moving the clock an hour cannot cost a lease
        self.s.clock.advance(3600 + 60)
        (c,) = self.wait_comments(pr, 1)
        self.assert_our_comment(c["body"], L4, pr, ["@alice", "@pytorch/accel-oncall"],
                                "crcr/%s/CI/zombie" % L4, "timed_out")
        # The check run is a row of its own: it may reach GitHub before or after the comment.
        done = wait_until(lambda: [x for x in self.checks_for(pr.sha, L4)
                                   if x["status"] == "completed"], ROW_TIMEOUT)
        self.assertEqual([x["conclusion"] for x in done], ["timed_out"])


class OncallCrashTest(OncallMixin, unittest.TestCase):
    """The relay SIGKILLed at either side of the comment's POST, then restarted on the same store
    (SQLite, or PostgreSQL with CRCR_E2E_PG_URI, where the dead claim's lease must run out: the
    waits move the clock past it)."""

    STACK_KW = None  # every test has its own stack
    LEASE = {}  # the default lease (120 s), run out on the moved clock

    @classmethod
    def setUpClass(cls):
        unittest.TestCase.setUpClass()

    def tearDown(self):
        self.s.gh.clear_faults()
        self.assertTrue(self.s.relay.running(), "relay died; log:\n" + self.s.relay.log_tail())

    def fail_and_hold(self, method):
        """A private stack whose fake GitHub holds the first `method` on the PR's comments; a
        failing L4 job; returns (pr, hold) once the relay's request is being held."""
        self.own(env=self.LEASE)
        hold = self.s.gh.hold(method, r"^/repos/pytorch/pytorch/issues/\d+/comments$")
        pr = self.open_pr(repos=[L4])
        self.fail_job(L4, pr)
        self.assertTrue(hold.wait_reached(ROW_TIMEOUT), "no comment %s%s" % (method, self.diag()))
        return pr, hold

    def restart_after_kill(self, hold):
        self.s.relay.kill()
        hold.release()
        self.s.relay.start()

    def test_killed_after_github_created_the_comment_comments_once(self):
        pr, hold = self.fail_and_hold("POST")
        # GitHub has the comment; the relay has not heard back and has recorded nothing.
        self.assertEqual(len(self.comments(pr)), 1)
        self.restart_after_kill(hold)
        (row,) = self.comment_rows(pr.delivery, step=10)
        self.assertEqual((row["state"], row["note"]),
                         ("sent", "already commented (marker on the PR)"))
        self.assertEqual(len(self.comments(pr)), 1)
        self.assertEqual(len(self.comment_requests(pr, "POST")), 1)
        self.assertEqual(len(self.comment_requests(pr, "GET")), 2)  # one per process

    def test_killed_before_the_post_comments_once(self):
        pr, hold = self.fail_and_hold("GET")
        self.assertEqual(self.comments(pr), [])
        self.restart_after_kill(hold)
        (row,) = self.comment_rows(pr.delivery, step=10)
        self.assertEqual((row["state"], row["note"]), ("sent", "commented"))
        (c,) = self.comments(pr)
        self.assertEqual(c["body"].split("\n")[0], MARKER % L4)
        self.assertEqual(len(self.comment_requests(pr, "POST")), 1)


if __name__ == "__main__":
    unittest.main()
