"""End-to-end check runs on the upstream PR, L3 labels and re-runs (real relay, fake GitHub).

Covered:
  - upstream reference §3.6 12-22: which callbacks create a check run (L4 always, L3 when the PR
    carries ciflow/crcr/<device> or its sha was marked by a labeled event, never L2, never at
    dispatch time - §3.4 4-5), its exact request body (name, external_id, details_url, output),
    created never patched, and a GitHub failure never fails the callback;
  - §3.4 6-11: the labeled webhook back-fills check runs for jobs already reported and marks the
    sha wanted for later callbacks (upstream §1.7: label before, during and after the run);
  - §3.4 12-20: check_run / check_suite rerequested -> rerun-failed-jobs / full re-runs through
    the outbox, "already running" treated as success, suite listing paginated and de-duplicated;
  - 20 matrix legs with distinct job names in one run -> 20 distinct check runs (crcr-test's L3
    matrix workflow).
Harness: test_callback.py. Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import secrets
import unittest

import relay as R
from test_callback import (L2, L3, L3B, L3_OTHER, L4, CHECK_RUNS_PATH, CallbackMixin,
                           new_run_id)
from waiting import wait_until

ACCESS_TOKENS_PATH = r"^/app/installations/%d/access_tokens$"


def labeled_event(pr, label):
    """pull_request labeled webhook for `pr` (number, head sha) with label `label`."""
    obj = R.load_example_obj("pull_request.labeled")
    obj["number"] = pr.number
    obj["pull_request"]["number"] = pr.number
    obj["pull_request"]["head"]["sha"] = pr.sha
    obj["label"]["name"] = label
    obj["pull_request"]["labels"] = [dict(obj["label"])]
    return obj


def check_run_event(name, external_id, action="rerequested"):
    obj = R.load_example_obj("check_run.rerequested")
    obj["action"] = action
    obj["check_run"]["name"] = name
    obj["check_run"]["external_id"] = external_id
    return obj


def check_suite_event(suite_id, action="rerequested"):
    obj = R.load_example_obj("check_suite.rerequested")
    obj["action"] = action
    obj["check_suite"]["id"] = suite_id
    return obj


class ChecksMixin(CallbackMixin):
    def label(self, pr, label="ciflow/crcr/dev"):
        r = self.webhook("pull_request", labeled_event(pr, label))
        self.assertEqual(r.status, 200, "%r%s" % (r.body[:300], self.diag()))
        return r

    def no_new_checks(self, sha, repo=None):
        """Nothing queued for `sha` by now: checked after the outbox went quiet."""
        self.settle()
        self.assertEqual(self.checks_for(sha, repo), [])


# ============================================================================================


class CheckRunTest(ChecksMixin, unittest.TestCase):
    """reference §3.6 12-22, §3.4 4-5."""

    def test_3_6_12_13_14_l4_check_runs_have_the_upstream_shape(self):
        pr = self.open_pr(repos=[L4])
        run = new_run_id()
        job = "ec05-multi-job-a"
        self.progress(L4, pr, run_id=run, job_name=job)
        self.wait_checks(pr.sha, 2, L4)
        reqs = sorted((json.loads(r.body) for r in self.s.gh.requests("POST", CHECK_RUNS_PATH)
                       if pr.sha.encode() in r.body), key=lambda b: b["status"], reverse=True)
        details = "%s/%s/actions/runs/%d" % (self.s.gh.web_url, L4, run)
        base = {
            "name": "crcr/%s/CI/%s" % (L4, job),
            "head_sha": pr.sha,
            "details_url": details,
            "external_id": "%d:%d" % (run, pr.number),
        }
        summary = "%s workflow: %s" % (L4, details)
        self.assertEqual(reqs, [
            dict(base, status="in_progress", output={"title": "In progress", "summary": summary}),
            dict(base, status="completed", conclusion="success",
                 output={"title": "Success", "summary": summary}),
        ])

    def test_check_run_title_is_the_capitalised_conclusion(self):
        pr = self.open_pr(repos=[L4])
        for concl, title in (("failure", "Failure"), ("cancelled", "Cancelled"),
                             ("timed_out", "Timed_out"), ("SKIPPED", "Skipped")):
            self.progress(L4, pr, job_name="t-" + concl, conclusion=concl)
        checks = self.wait_checks(pr.sha, 8, L4)
        titles = {c["name"].rsplit("/", 1)[1]: c["output"]["title"] for c in checks
                  if c["status"] == "completed"}
        self.assertEqual(titles, {"t-failure": "Failure", "t-cancelled": "Cancelled",
                                  "t-timed_out": "Timed_out", "t-SKIPPED": "Skipped"})

    def test_3_6_15_16_in_progress_and_a_reopened_pr_create_new_runs_never_patch(self):
        pr = self.open_pr(repos=[L4])
        self.assertOk(self.cb(L4, pr, "in_progress", run_id=11), "in_progress")
        self.wait_checks(pr.sha, 1, L4)
        reopened = self.open_pr(action="reopened", sha=pr.sha, number=pr.number, repos=[L4])
        self.assertOk(self.cb(L4, reopened, "in_progress", run_id=12), "in_progress")
        checks = self.wait_checks(pr.sha, 2, L4)
        self.assertEqual([(c["status"], c["external_id"]) for c in checks],
                         [("in_progress", "11:%d" % pr.number),
                          ("in_progress", "12:%d" % pr.number)])
        self.assertEqual(len({c["id"] for c in checks}), 2)
        self.assertEqual([r for r in self.s.gh.requests() if r.method == "PATCH"], [])

    def test_3_6_17_18_l3_with_the_device_label_on_the_pr_gets_check_runs(self):
        pr = self.open_pr(labels=["ciflow/crcr/dev", "other"], repos=[L3, L3B, L3_OTHER])
        for repo in (L3, L3B, L3_OTHER):
            self.progress(repo, pr)
        self.wait_checks(pr.sha, 2, L3)
        self.wait_checks(pr.sha, 2, L3B)
        self.settle()
        self.assertEqual(self.checks_for(pr.sha, L3_OTHER), [],
                         "a repo of another device got a check run")

    def test_3_6_19_l3_without_label_or_mark_gets_none(self):
        pr = self.open_pr(labels=["ciflow/crcr/other-device-typo", "ciflow/crcr"], repos=[L3])
        self.progress(L3, pr)
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        self.no_new_checks(pr.sha)

    def test_3_6_20_l3_marked_by_a_label_event_gets_check_runs_despite_stale_labels(self):
        pr = self.open_pr(repos=[L3])
        self.label(pr)
        # The callback echoes the labels of the dispatch (none): the mark decides.
        self.progress(L3, pr, job_name="after-label")
        checks = self.wait_checks(pr.sha, 2, L3)
        self.assertEqual({c["name"] for c in checks}, {"crcr/%s/CI/after-label" % L3})

    def test_3_6_21_l2_never_gets_a_check_run(self):
        pr = self.open_pr(labels=["ciflow/crcr/dev"], repos=[L2])
        self.progress(L2, pr)
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        self.no_new_checks(pr.sha)

    def test_3_4_4_5_dispatch_alone_never_creates_check_runs(self):
        pr = self.open_pr(labels=["ciflow/crcr/dev"])
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        self.no_new_checks(pr.sha)

    def test_3_6_22_github_errors_never_fail_the_callback(self):
        # Upstream: token minting raising still answers ok. crcr answers before GitHub is
        # called at all; the check run is retried from the outbox.
        self.own_stack()
        pytorch_inst = self.s.gh.installation_id("pytorch")
        pr = self.open_pr(repos=[L4])
        tok_fault = self.s.gh.fault_5xx(ACCESS_TOKENS_PATH % pytorch_inst, status=500, count=2)
        cr_fault = self.s.gh.fault_5xx(CHECK_RUNS_PATH, status=502, count=1)
        # The first GitHub call of the check run (pytorch/pytorch's installation lookup) is held
        # until the callback was answered: an answer that waited for GitHub would never come.
        lookup = self.s.gh.hold("GET", r"^/repos/pytorch/pytorch/installation$", count=1)
        self.addCleanup(lookup.release)
        self.assertOk(self.cb(L4, pr, "in_progress"), "in_progress")
        self.assertTrue(lookup.wait_reached(), "the check run never reached GitHub")
        lookup.release()
        checks = self.wait_checks(pr.sha, 1, L4, timeout=15, step=0.5)
        self.assertEqual(len(checks), 1)
        self.assertEqual(tok_fault.hits, 2)
        self.assertEqual(cr_fault.hits, 1)
        rows = self.outbox(pr.delivery, "check_run")
        self.assertEqual([(r["state"], r["last_status"]) for r in rows], [("sent", 201)])

    def test_a_retried_in_progress_check_run_never_lands_after_the_completed_one(self):
        # GitHub shows the newest check run of a name on a commit (reference §2.5). Upstream
        # creates them inside the callback, in callback order. Here the in_progress POST fails
        # once (a 502), and its retry is held at GitHub until the completed callback was
        # answered: if the completed one went out meanwhile, or the retried in_progress were
        # created after it, the PR would show the finished job as running forever.
        self.own_stack()
        pr = self.open_pr(repos=[L4])
        fault = self.s.gh.add_fault("POST", CHECK_RUNS_PATH, status=502, count=1)
        retry = self.s.gh.hold("POST", CHECK_RUNS_PATH, count=1, after=False)
        self.addCleanup(retry.release)
        self.assertOk(self.cb(L4, pr, "in_progress", job_name="ordered"), "in_progress")
        self.assertOk(self.cb(L4, pr, "completed", job_name="ordered"), "completed")
        # The retry comes after its backoff (moved clock); nothing else reaches GitHub meanwhile.
        self.assertTrue(wait_until(lambda: retry.held, 15, clock=self.s.clock, step=0.5),
                        "the in_progress check run was not retried" + self.diag())
        self.assertEqual(fault.hits, 1)
        self.assertEqual(len(self.s.gh.requests("POST", CHECK_RUNS_PATH)), 2)
        retry.release()
        self.wait_checks(pr.sha, 2, L4, timeout=15)
        self.settle()
        newest = max(self.checks_for(pr.sha, L4), key=lambda c: c["id"])
        self.assertEqual((newest["status"], newest["conclusion"]), ("completed", "success"),
                         "the newest check run of crcr/%s/CI/ordered is %s/%s: the PR shows the "
                         "job running" % (L4, newest["status"], newest["conclusion"]))

    def test_twenty_matrix_legs_give_twenty_distinct_check_runs(self):
        pr = self.open_pr(labels=["ciflow/crcr/dev"], repos=[L3])
        run = new_run_id()
        names = ["test-L3-matrix-checkrun-creation-%d" % i for i in range(20)]
        for job in names:
            self.assertOk(self.cb(L3, pr, "in_progress", run_id=run, job_name=job),
                          "in_progress")
        for job in names:
            self.assertOk(self.cb(L3, pr, "completed", run_id=run, job_name=job), "completed")
        checks = self.wait_checks(pr.sha, 40, L3, timeout=20)
        self.settle()
        checks = self.checks_for(pr.sha, L3)
        self.assertEqual(len(checks), 40)
        by_name = {}
        for c in checks:
            by_name.setdefault(c["name"], []).append(c["status"])
        self.assertEqual(sorted(by_name), sorted("crcr/%s/CI/%s" % (L3, j) for j in names))
        for name, statuses in by_name.items():
            self.assertEqual(sorted(statuses), ["completed", "in_progress"], name)
        self.assertEqual({c["external_id"] for c in checks}, {"%d:%d" % (run, pr.number)})


# ============================================================================================


class LabelTest(ChecksMixin, unittest.TestCase):
    """reference §3.4 6-11 (label handler) and the §1.7 label flows."""

    def test_3_4_6_label_during_the_run_backfills_the_in_progress_job(self):
        pr = self.open_pr(repos=[L3])
        self.assertOk(self.cb(L3, pr, "in_progress", run_id=99999, job_name="ci"), "in_progress")
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])
        r = self.label(pr)
        self.assertEqual(r.json(), {"ok": True, "created_check_runs": ["%s/ci" % L3]})
        (c,) = self.wait_checks(pr.sha, 1)
        self.assertEqual((c["name"], c["head_sha"], c["status"], c["conclusion"],
                          c["external_id"]),
                         ("crcr/%s/CI/ci" % L3, pr.sha, "in_progress", None,
                          "99999:%d" % pr.number))
        self.assertNotIn("conclusion", json.loads(
            [x for x in self.s.gh.requests("POST", CHECK_RUNS_PATH)
             if pr.sha.encode() in x.body][0].body))
        # The run goes on: its completion now gets a check run too (wanted mark).
        self.assertOk(self.cb(L3, pr, "completed", run_id=99999, job_name="ci"), "completed")
        checks = self.wait_checks(pr.sha, 2)
        self.assertEqual(checks[1]["conclusion"], "success")

    def test_3_4_7_two_jobs_are_both_backfilled_with_the_same_external_id(self):
        pr = self.open_pr(repos=[L3])
        for job in ("ci", "ci-2"):
            self.assertOk(self.cb(L3, pr, "in_progress", run_id=99999, job_name=job),
                          "in_progress")
        r = self.label(pr)
        self.assertEqual(sorted(r.json()["created_check_runs"]), ["%s/ci" % L3, "%s/ci-2" % L3])
        checks = self.wait_checks(pr.sha, 2)
        self.assertEqual(sorted(c["name"] for c in checks),
                         ["crcr/%s/CI/ci" % L3, "crcr/%s/CI/ci-2" % L3])
        self.assertEqual({c["external_id"] for c in checks}, {"99999:%d" % pr.number})

    def test_3_4_8_label_after_the_run_backfills_the_completed_job(self):
        pr = self.open_pr(repos=[L3])
        self.progress(L3, pr, run_id=99999, job_name="ci", conclusion="failure")
        self.assertEqual(self.label(pr).json()["created_check_runs"], ["%s/ci" % L3])
        (c,) = self.wait_checks(pr.sha, 1)
        self.assertEqual((c["status"], c["conclusion"], c["output"]["title"]),
                         ("completed", "failure", "Failure"))
        self.assertEqual(c["details_url"], "%s/%s/actions/runs/99999" % (self.s.gh.web_url, L3))

    def test_3_4_9_every_repo_of_the_device_is_backfilled_with_one_upstream_token(self):
        self.own_stack()  # a fresh token cache
        pr = self.open_pr(repos=[L3, L3B, L4])
        self.progress(L3, pr, job_name="ci")
        self.progress(L3B, pr, job_name="ci")
        self.settle()
        self.s.gh.clear()
        r = self.label(pr)
        self.assertEqual(sorted(r.json()["created_check_runs"]), ["%s/ci" % L3, "%s/ci" % L3B])
        checks = self.wait_checks(pr.sha, 2)
        self.settle()
        self.assertEqual(sorted(c["name"] for c in self.checks_for(pr.sha)),
                         ["crcr/%s/CI/ci" % L3, "crcr/%s/CI/ci" % L3B])
        inst = self.s.gh.installation_id("pytorch")
        self.assertEqual(len(self.s.gh.requests("POST", ACCESS_TOKENS_PATH % inst)), 1)
        self.assertEqual(len(checks), 2)

    def test_3_4_10_label_before_the_run_marks_the_sha_wanted(self):
        pr = self.open_pr(repos=[L3, L3B])
        r = self.label(pr)
        self.assertEqual(r.json(), {"ok": True, "created_check_runs": []})
        self.assertEqual(self.outbox(r.delivery, "check_run"), [])
        self.progress(L3B, pr, job_name="later")
        checks = self.wait_checks(pr.sha, 2, L3B)
        self.assertEqual(sorted(c["status"] for c in checks), ["completed", "in_progress"])

    def test_3_4_11_other_labels_are_ignored_and_unknown_devices_create_nothing(self):
        pr = self.open_pr(repos=[L3])
        self.progress(L3, pr, job_name="ci")
        for label in ("some/other/label", "ciflow/trunk", "ciflow/crcr/"):
            with self.subTest(label=label):
                r = self.webhook("pull_request", labeled_event(pr, label))
                self.assertEqual((r.status, r.json()), (200, {"ignored": True}))
        r = self.webhook("pull_request", labeled_event(pr, "ciflow/crcr/nodevice"))
        self.assertEqual((r.status, r.json()), (200, {"ok": True, "created_check_runs": []}))
        # unlabeled is ignored (the mark stays until it expires)
        ev = labeled_event(pr, "ciflow/crcr/dev")
        ev["action"] = "unlabeled"
        r = self.webhook("pull_request", ev)
        self.assertEqual((r.status, r.json()), (200, {"ignored": True}))
        self.no_new_checks(pr.sha)

    def test_label_event_without_pr_context_is_ignored(self):
        pr = self.open_pr(repos=[L3])
        ev = labeled_event(pr, "ciflow/crcr/dev")
        del ev["pull_request"]["head"]["sha"]
        r = self.webhook("pull_request", ev)
        self.assertEqual((r.status, r.json()),
                         (200, {"ignored": True, "reason": "missing pr context"}))

    def test_label_only_backfills_the_devices_l3_repos(self):
        pr = self.open_pr(repos=[L3, L3_OTHER, L2])
        for repo in (L3, L3_OTHER, L2):
            self.progress(repo, pr, job_name="ci")
        r = self.label(pr)
        self.assertEqual(r.json()["created_check_runs"], ["%s/ci" % L3])
        self.wait_checks(pr.sha, 1)
        self.settle()
        self.assertEqual({c["name"] for c in self.checks_for(pr.sha)}, {"crcr/%s/CI/ci" % L3})

    def test_redelivered_label_event_backfills_once(self):
        pr = self.open_pr(repos=[L3])
        self.progress(L3, pr, job_name="ci")
        r1 = self.label(pr)
        r2 = self.s.relay.webhook("pull_request", R.compact(labeled_event(pr, "ciflow/crcr/dev")),
                                  delivery=r1.delivery)
        self.assertEqual((r2.status, r2.json()), (200, {"ok": True, "duplicate": True}))
        self.wait_checks(pr.sha, 1)
        self.settle()
        self.assertEqual(len(self.checks_for(pr.sha)), 1)


# ============================================================================================


class RerunTest(ChecksMixin, unittest.TestCase):
    """reference §3.4 12-20 (re-runs) against the fake GitHub."""

    def reruns_of(self, *run_ids):
        return [(x["repo"], x["run_id"], x["kind"]) for x in self.s.gh.reruns()
                if x["run_id"] in run_ids]

    def rerun_requests(self, run_id):
        return [r for r in self.s.gh.requests("POST") if "/actions/runs/%d/" % run_id in r.path]

    def test_3_4_12_check_run_rerequested_reruns_the_failed_jobs(self):
        run = new_run_id()
        for ext in ("%d" % run, "%d:42" % run):
            with self.subTest(external_id=ext):
                self.s.gh.clear()
                r = self.webhook("check_run", check_run_event("crcr/%s/CI/build" % L3, ext))
                self.assertEqual((r.status, r.json()), (200, {"ok": True, "rerun": [L3]}))
                wait_until(lambda: self.reruns_of(run))
                self.settle()
                self.assertEqual(self.reruns_of(run), [(L3, run, "rerun-failed-jobs")])
                (row,) = self.outbox(r.delivery, "rerun")
                self.assertEqual((row["target"], row["state"]), (L3, "sent"))

    def test_3_4_12_l4_repos_are_rerun_too_and_names_match_the_allowlist_case(self):
        run = new_run_id()
        r = self.webhook("check_run", check_run_event("crcr/ORG4/Repo4/CI/build", str(run)))
        self.assertEqual((r.status, r.json()), (200, {"ok": True, "rerun": [L4]}))
        wait_until(lambda: self.reruns_of(run))
        self.assertEqual(self.reruns_of(run), [(L4, run, "rerun-failed-jobs")])

    def test_3_4_13_already_running_is_success(self):
        run = new_run_id()
        self.s.gh.set_already_running(run)
        r = self.webhook("check_run", check_run_event("crcr/%s/CI/build" % L3, str(run)))
        self.assertEqual((r.status, r.json()["ok"]), (200, True))
        row = wait_until(lambda: [x for x in self.outbox(r.delivery, "rerun")
                                  if x["state"] not in ("queued", "running")], 10.0, 0.1)
        self.assertEqual([(x["state"], x["attempts"], x["note"]) for x in row],
                         [("sent", 1, "already running")])
        self.settle()
        self.assertEqual([x.status for x in self.rerun_requests(run)], [403],
                         "an already-running answer was retried")

    def test_3_4_14_to_16_not_crcr_no_run_id_or_not_rerequested_is_ignored(self):
        cases = [
            (check_run_event("some-other-check", "777"), {"ignored": True,
                                                          "reason": "not a crcr check run"}),
            (check_run_event("crcr/%s/CI/build" % L3, ""), {"ignored": True,
                                                            "reason": "not a crcr check run"}),
            (check_run_event("crcr/%s/CI/build" % L3, "abc"), {"ignored": True,
                                                               "reason": "not a crcr check run"}),
            (check_run_event("crcr/%s" % L3, "777"), {"ignored": True,
                                                      "reason": "not a crcr check run"}),
            (check_run_event("crcr/%s/CI/build" % L2, "777"),
             {"ignored": True, "reason": "downstream repo not L3+"}),
            (check_run_event("crcr/stranger/repo/CI/build", "777"),
             {"ignored": True, "reason": "downstream repo not L3+"}),
            (check_run_event("crcr/%s/CI/build" % L3, "777", action="created"),
             {"ignored": True}),
            (check_run_event("crcr/%s/CI/build" % L3, "777", action="completed"),
             {"ignored": True}),
        ]
        for ev, want in cases:
            with self.subTest(name=ev["check_run"]["name"], ext=ev["check_run"]["external_id"],
                              action=ev["action"]):
                r = self.webhook("check_run", ev)
                self.assertEqual((r.status, r.json()), (200, want))
        self.settle()
        self.assertEqual(self.reruns_of(777), [])

    def test_3_4_17_suite_rerun_reruns_each_distinct_run_in_full(self):
        suite, a, b = 900_000 + secrets.randbelow(10**5), new_run_id(), new_run_id()
        self.s.gh.set_suite_check_runs(suite, [
            {"name": "crcr/%s/CI/build" % L3, "external_id": "%d:42" % a},
            {"name": "crcr/%s/CI/test" % L3, "external_id": "%d:42" % a},
            {"name": "crcr/%s/Lint/lint" % L3, "external_id": "%d" % b},
        ])
        r = self.webhook("check_suite", check_suite_event(suite))
        self.assertEqual((r.status, r.json()), (200, {"ok": True, "rerun_suite": suite}))
        wait_until(lambda: len(self.reruns_of(a, b)) >= 2)
        self.settle()
        self.assertEqual(sorted(self.reruns_of(a, b)), sorted([(L3, a, "rerun"),
                                                               (L3, b, "rerun")]))
        listing = self.s.gh.requests("GET", r"/check-suites/%d/check-runs" % suite)
        self.assertTrue(listing and listing[0].path.startswith("/repos/pytorch/pytorch/"))
        self.assertEqual(listing[0].query.get("per_page"), "100")

    def test_3_4_18_already_running_run_in_a_suite_does_not_stop_the_others(self):
        suite, a, b = 900_000 + secrets.randbelow(10**5), new_run_id(), new_run_id()
        self.s.gh.set_already_running(a)
        self.s.gh.set_suite_check_runs(suite, [
            {"name": "crcr/%s/CI/build" % L3, "external_id": "%d:42" % a},
            {"name": "crcr/%s/Lint/lint" % L4, "external_id": "%d:42" % b},
        ])
        r = self.webhook("check_suite", check_suite_event(suite))
        self.assertEqual(r.status, 200)
        wait_until(lambda: self.reruns_of(b))
        self.settle()
        self.assertEqual(self.reruns_of(a, b), [(L4, b, "rerun")])
        self.assertEqual([x.status for x in self.rerun_requests(a)], [403])
        rows = self.outbox(r.delivery, "rerun")
        self.assertEqual(sorted((x["target"], x["state"]) for x in rows),
                         sorted([(L3, "sent"), (L4, "sent")]))

    def test_3_4_19_suite_without_crcr_runs_reruns_nothing(self):
        suite = 900_000 + secrets.randbelow(10**5)
        self.s.gh.set_suite_check_runs(suite, [
            {"name": "some-other-check", "external_id": "999"},
            {"name": "crcr/%s/CI/build" % L3, "external_id": ""},
            {"name": "crcr/%s/CI/build" % L2, "external_id": "998:1"},
            {"name": "crcr/stranger/repo/CI/build", "external_id": "997:1"},
        ])
        r = self.webhook("check_suite", check_suite_event(suite))
        self.assertEqual(r.status, 200)
        row = wait_until(lambda: [x for x in self.outbox(r.delivery, "rerun_suite")
                                  if x["state"] == "sent"], 10.0, 0.1)
        self.assertEqual(row[0]["note"], "0 re-runs queued")
        self.settle()
        self.assertEqual(self.reruns_of(997, 998, 999), [])
        self.assertEqual(self.outbox(r.delivery, "rerun"), [])

    def test_3_4_20_other_suite_actions_are_ignored(self):
        for action in ("completed", "requested"):
            r = self.webhook("check_suite", check_suite_event(4242, action=action))
            self.assertEqual((r.status, r.json()), (200, {"ignored": True}))
        ev = check_suite_event(4242)
        del ev["check_suite"]["id"]
        r = self.webhook("check_suite", ev)
        self.assertEqual(r.json(), {"ignored": True, "reason": "missing check_suite id"})

    def test_suite_listing_is_paginated(self):
        suite, a, b = 900_000 + secrets.randbelow(10**5), new_run_id(), new_run_id()
        runs = [{"name": "lint-%d" % i, "external_id": ""} for i in range(140)]
        runs.insert(5, {"name": "crcr/%s/CI/build" % L3, "external_id": "%d:1" % a})
        runs.append({"name": "crcr/%s/CI/late" % L4, "external_id": "%d:1" % b})
        runs.append({"name": "crcr/%s/CI/late-2" % L4, "external_id": "%d:1" % b})
        self.s.gh.set_suite_check_runs(suite, runs)
        self.webhook("check_suite", check_suite_event(suite))
        wait_until(lambda: len(self.reruns_of(a, b)) >= 2)
        self.settle()
        self.assertEqual(sorted(self.reruns_of(a, b)), sorted([(L3, a, "rerun"),
                                                               (L4, b, "rerun")]))
        pages = sorted(r.query.get("page") for r in
                       self.s.gh.requests("GET", r"/check-suites/%d/check-runs" % suite))
        self.assertEqual(pages, ["1", "2"])


if __name__ == "__main__":
    unittest.main()
