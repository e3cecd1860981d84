"""Buildkite OIDC callbacks (issue 13 part 2) against the real relay.

The relay trusts a loopback issuer as a Buildkite issuer (CRCR_OIDC_ISSUERS=...,buildkite=<url>)
and maps its tokens to repositories through a CI providers map (upstream's ci_providers.yml,
CI_PROVIDERS_FILE or CI_PROVIDERS_URL). Covered:
  - a Buildkite-shaped token (organization_id, pipeline_id, build_branch; no repository) of a
    mapped pipeline on main reports a nightly result the HUD shows for the mapped repository
    (GET /api/v1/repos/{org}/{repo}/runs?tab=nightly), linked to the build;
  - PR callbacks from a mapped pipeline (the dispatch to the mapped repository, its check run
    linked to the build);
  - refusals with upstream's texts: an unmapped pipeline 403, a fork branch 403, a missing
    organization_id / pipeline_id 401, a "repository" claim in a Buildkite token ignored;
  - identity pins: GitHub tokens pin, Buildkite tokens neither pin nor are refused by a pin;
  - the map kept fresh: a changed file after SIGHUP, a changed URL file after the TTL, a broken
    file keeping the last good map (on /readyz and /metrics), 503 while no map ever loaded, and
    (PostgreSQL only) one fetch per TTL for two instances through the shared copy;
  - `crcr report` on a Buildkite agent: a fake `buildkite-agent` on PATH prints a token from the
    loopback issuer; the report lands on the nightly tab with Buildkite's names and the build's
    UUID as run id;
  - upstream's own Buildkite reporter (report_callback_buildkite.sh + report_callback.py, which
    vLLM runs): its body, built field by field in upstream_buildkite_body(), is taken for PR and
    nightly reports, the run shows on the HUD pages and the API with its build UUID as run id;
    the same body under a GitHub Actions token is still 400 (a GitHub run id is a number).
Harness: test_callback.py. Needs CRCR_BIN; see tests/support/README.md.
"""

import datetime
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import unittest
import uuid

import fakegh as F
import relay as R
from test_callback import L2, L4, UPSTREAM, CallbackMixin, Stack, new_sha
from testclock import TestClock
from waiting import wait_until

ORG = "018b5ec5-6c13-4b0a-9e0e-0a1b2c3d4e5f"
PIPE_L2 = "018cdabc-1111-4c2d-8e3f-000000000002"  # org2/repo2, main only
PIPE_L4 = "018cdabc-4444-4c2d-8e3f-000000000004"  # org4/repo4, any branch
PIPE_NEW = "018cdabc-9999-4c2d-8e3f-000000000009"
BUILD_URL = "https://buildkite.com/acme/vllm-ci/builds/42"
PROVIDERS = """\
providers:
  buildkite:
    issuer: https://agent.buildkite.com      # ignored, as upstream
    repo_map:
      "%(org)s/%(l2)s":
        repo: org2/repo2
        required_claims:
          build_branch: [main]
      "%(org)s/%(l4)s": org4/repo4
""" % {"org": ORG, "l2": PIPE_L2, "l4": PIPE_L4}
NOT_REGISTERED = "Buildkite pipeline %s/%s is not registered with CRCR"
FORK = "Buildkite claim 'build_branch' value '%s' not in allowed set for this pipeline"


def metric(relay, name):
    """A sample without labels from /metrics, or None."""
    body = relay.poll("/metrics").body.decode("utf-8", "replace")
    m = re.search(r"^%s (\S+)$" % re.escape(name), body, re.M)
    return float(m.group(1)) if m else None


class BuildkiteMixin(CallbackMixin):
    """A stack with one Buildkite issuer and a CI providers file in a temp dir."""

    STACK_KW = {"buildkite_issuers": 1}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="crcr-e2e-bk-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.providers_path = os.path.join(cls.tmp, "ci_providers.yml")
        cls.write_providers(PROVIDERS)
        cls.STACK_ENV = {"CI_PROVIDERS_FILE": cls.providers_path}
        super().setUpClass()

    @classmethod
    def write_providers(cls, text):
        tmp = cls.providers_path + ".new"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, cls.providers_path)

    @property
    def bk(self):
        return self.s.buildkite_issuers[0]

    def bk_token(self, pipeline, org=ORG, **claims):
        return self.bk.buildkite_token(org, pipeline, **claims)

    def nightly(self, sha, **kw):
        cp = {"event_type": "nightly", "delivery_id": sha,
              "payload": {"repository": {"full_name": UPSTREAM}, "head_sha": sha}}
        kw.setdefault("name", "vllm-ci")
        kw.setdefault("job_name", ":pytorch: nightly")
        kw.setdefault("run_id", 42)
        kw.setdefault("url", BUILD_URL)
        return self.body(cp, "completed", conclusion=kw.pop("conclusion", "success"), **kw)

    def nightly_cell(self, repo, sha, timeout=10.0):
        def find():
            doc = self.s.relay.get("/api/v1/repos/%s/runs?tab=nightly" % repo).json()
            for row in doc["rows"]:
                if row.get("delivery_id") == sha and row["cells"] and row["cells"][0]:
                    return row["cells"][0]
            return None
        cell = wait_until(find, timeout)
        self.assertTrue(cell, "nightly %s of %s not on the HUD%s" % (sha, repo, self.diag()))
        return cell

    def nightly_rows(self, repo, sha):
        doc = self.s.relay.get("/api/v1/repos/%s/runs?tab=nightly" % repo).json()
        return [r for r in doc["rows"] if r.get("delivery_id") == sha]

    def pins(self):
        rc, out, err = self.s.relay.cli(["trust", "list"])
        self.assertEqual(rc, 0, err)
        return out


class BuildkiteCallbackTest(BuildkiteMixin, unittest.TestCase):

    def test_mapped_pipeline_on_main_reports_a_nightly_the_hud_shows_for_the_mapped_repo(self):
        sha = new_sha()
        r = self.post_callback(L2, self.nightly(sha),
                               token=self.bk_token(PIPE_L2, build_branch="main"))
        self.assertOk(r, "completed")
        cell = self.nightly_cell(L2, sha)
        self.assertEqual((cell["result"], cell["event_type"], cell["run_id"], cell["job"],
                          cell["workflow"]),
                         ("success", "nightly", "42", ":pytorch: nightly", "vllm-ci"))
        # The run links to the build, not to a GitHub Actions run of the mapped repository.
        self.assertEqual(cell["details_url"], BUILD_URL)
        # The HUD forward names the mapped repository as the verified one.
        fwd = wait_until(lambda: [b for b in self.s.hud.results()
                                  if b["untrusted"]["callback_payload"].get("delivery_id") == sha])
        self.assertTrue(fwd, self.diag())
        self.assertEqual(fwd[0]["trusted"]["verified_repo"], L2)
        self.assertIn("callback.mapped_identity", self.s.relay.log_text())

    def test_an_unmapped_pipeline_is_403_and_records_nothing(self):
        sha = new_sha()
        for org, pipe in ((ORG, PIPE_NEW), ("0000-other-org", PIPE_L2)):
            with self.subTest(pipeline=pipe, org=org):
                r = self.post_callback(L2, self.nightly(sha), token=self.bk_token(pipe, org=org))
                self.assertDetail(r, 403, NOT_REGISTERED % (org, pipe))
        # A "repository" claim does not make a Buildkite token speak for that repository.
        r = self.post_callback(L2, self.nightly(sha),
                               token=self.bk_token(PIPE_NEW, repository=L2,
                                                   repository_id="2000001"))
        self.assertDetail(r, 403, NOT_REGISTERED % (ORG, PIPE_NEW))
        self.assertEqual(self.nightly_rows(L2, sha), [])

    def test_a_fork_branch_is_403(self):
        sha = new_sha()
        for branch in ("contributor:fix-cuda", "Main", "main-fork"):
            with self.subTest(branch=branch):
                r = self.post_callback(L2, self.nightly(sha),
                                       token=self.bk_token(PIPE_L2, build_branch=branch))
                self.assertDetail(r, 403, FORK % branch)
        r = self.post_callback(L2, self.nightly(sha),
                               token=self.bk.sign(self.bk.buildkite_claims(
                                   ORG, PIPE_L2, build_branch=None)))
        self.assertDetail(r, 403, contains="'build_branch'")
        self.assertEqual(self.nightly_rows(L2, sha), [])
        # The pipeline without rules reports from any branch.
        r = self.post_callback(L4, self.nightly(sha),
                               token=self.bk_token(PIPE_L4, build_branch="feature"))
        self.assertOk(r, "completed")

    def test_missing_organization_or_pipeline_id_is_401(self):
        sha = new_sha()
        for claim in ("organization_id", "pipeline_id"):
            with self.subTest(missing=claim):
                ids = {"organization_id": ORG, "pipeline_id": PIPE_L2, claim: None}
                tok = self.bk.sign(self.bk.buildkite_claims(ids["organization_id"],
                                                            ids["pipeline_id"]))
                r = self.post_callback(L2, self.nightly(sha), token=tok)
                self.assertDetail(r, 401, "Buildkite OIDC token missing '%s' claim" % claim)

    def test_signature_times_and_audience_are_checked_as_for_github(self):
        sha = new_sha()
        bk = self.bk
        cases = {
            "other key": bk.sign(bk.buildkite_claims(ORG, PIPE_L2), key=bk.foreign_key),
            "expired": bk.buildkite_token(ORG, PIPE_L2, now=bk.now() - 3600),
            "wrong aud": bk.buildkite_token(ORG, PIPE_L2, aud="other"),
        }
        for what, tok in cases.items():
            with self.subTest(token=what):
                self.assertEqual(self.post_callback(L2, self.nightly(sha), token=tok).status, 401)
        # A GitHub issuer's key cannot sign for the Buildkite issuer.
        tok = self.s.issuer.sign(bk.buildkite_claims(ORG, PIPE_L2))
        self.assertDetail(self.post_callback(L2, self.nightly(sha), token=tok), 401,
                          "Invalid authorization token")
        self.assertEqual(self.nightly_rows(L2, sha), [])

    def test_pr_callbacks_from_a_mapped_pipeline_follow_the_dispatch(self):
        pr = self.open_pr(repos=[L4])
        tok = self.bk_token(PIPE_L4)
        for status in ("in_progress", "completed"):
            body = self.body(pr.cp(L4), status, conclusion="success", run_id=42,
                             job_name="gpu-tests", url=BUILD_URL)
            self.assertOk(self.post_callback(L4, body, token=tok), status)
        runs = wait_until(lambda: [c for c in self.s.gh.check_runs()
                                   if c.get("head_sha") == pr.sha and
                                   c.get("status") == "completed"])
        self.assertTrue(runs, self.diag())
        self.assertEqual(runs[0]["details_url"], BUILD_URL)
        self.assertEqual(runs[0]["name"], "crcr/%s/CI/gpu-tests" % L4)
        # Another repository's dispatch is not the mapped repository's to report.
        pr2 = self.open_pr(repos=[L2])
        r = self.post_callback(L4, self.body(pr2.cp(L2), "in_progress"), token=tok)
        self.assertEqual(r.status, 403, r.body)

    def test_github_tokens_pin_buildkite_tokens_neither_pin_nor_are_refused(self):
        sha = new_sha()
        self.assertOk(self.post_callback(L4, self.nightly(sha, job_name="bk-first"),
                                         token=self.bk_token(PIPE_L4)), "completed")
        self.assertNotIn(L4, self.pins(), "a Buildkite token pinned an identity")
        # A GitHub token pins the repository's GitHub ids ...
        gh_claims = self.s.issuer.claims(L4)
        self.assertOk(self.post_callback(L4, self.nightly(sha, job_name="gh")), "completed")
        self.assertIn("repository_id=%s owner_id=%s" % (gh_claims["repository_id"],
                                                        gh_claims["repository_owner_id"]),
                      self.pins())
        # ... which an id-less Buildkite token for the same repository does not contradict.
        self.assertOk(self.post_callback(L4, self.nightly(sha, job_name="bk-after"),
                                         token=self.bk_token(PIPE_L4)), "completed")
        # The pin still holds for GitHub tokens.
        tok = self.s.issuer.token(L4, repository_id="99999")
        self.assertDetail(self.post_callback(L4, self.nightly(sha, job_name="x"), token=tok), 403,
                          contains="repository identity changed")


# ============================================================================================
# Upstream's Buildkite reporter, as vLLM runs it

UPSTREAM_CALLBACK_URL = ("https://gwuj7w5coh4y4l66urspge6mnm0pwaxq.lambda-url.us-east-1.on.aws"
                         "/github/callback/")


def upstream_buildkite_body(agent_env, status, client_payload=None, conclusion="",
                            delivery_id="", event_type="", test_results="", artifact_url="",
                            now=None):
    """The exact body pytorch/test-infra's Buildkite reporter POSTs: the wrapper
    .github/actions/cross-repo-ci-relay-callback/report_callback_buildkite.sh maps the agent's
    variables (`agent_env`) to report_callback.py's, which builds and sends the body. Field by
    field, as those two scripts do it (upstream reference §2.8):

    report_callback_buildkite.sh
      RUN_ID        = $BUILDKITE_BUILD_ID                  the build's UUID
      RUN_ATTEMPT   = $(( ${BUILDKITE_RETRY_COUNT:-0} + 1 ))  shell arithmetic: "1", "2", ...
      WORKFLOW_NAME = $BUILDKITE_PIPELINE_SLUG
      WORKFLOW_URL  = $BUILDKITE_BUILD_URL
      JOB_NAME      = ${BUILDKITE_LABEL:-${BUILDKITE_STEP_KEY:-unknown}}  labels have spaces and
                      :emoji: shortcodes
      CHECK_RUN_ID  = ${BUILDKITE_BUILD_ID}-${RUN_ATTEMPT}
      CONCLUSION    = the caller's, else from BUILDKITE_COMMAND_EXIT_STATUS: 0 -> success,
                      anything else -> failure
      SCHEMA_VERSION = 1, STATUS (default completed), DELIVERY_ID_OVERRIDE, EVENT_TYPE_OVERRIDE,
      CLIENT_PAYLOAD, TEST_RESULTS, ARTIFACT_URL passed through from the step's environment

    report_callback.py build_payload()
      delivery_id / event_type: stripped; both set = a nightly/periodic self-report
      conclusion: stripped, "" -> None; None whenever status is in_progress
      root: the self-report envelope {"event_type", "delivery_id", "payload": {"repository":
            {"full_name": "pytorch/pytorch"}, "head_sha": delivery_id}}, else
            json.loads(CLIENT_PAYLOAD) (the dispatch's client_payload)
      workflow, in this key order: schema_version (str), status, conclusion, name, url,
            run_attempt (the string), job_name, check_run_id (stripped; RUN_ID-RUN_ATTEMPT when
            empty), run_id (str), started_at (None when completed, else now), completed_at
            (None when in_progress, else now), test_results (json.loads, only when given),
            artifact_url (stripped, only when given); now = datetime.now(timezone.utc)
            .isoformat() with "+00:00" replaced by "Z" (microseconds kept)
      root["workflow"] = workflow; the body is json.dumps(root) (", " and ": " separators)
    """
    run_id = agent_env["BUILDKITE_BUILD_ID"]
    run_attempt = str(int(agent_env.get("BUILDKITE_RETRY_COUNT") or 0) + 1)
    job_name = (agent_env.get("BUILDKITE_LABEL") or agent_env.get("BUILDKITE_STEP_KEY")
                or "unknown")
    check_run_id = "%s-%s" % (run_id, run_attempt)
    if not conclusion and agent_env.get("BUILDKITE_COMMAND_EXIT_STATUS"):
        conclusion = "success" if int(agent_env["BUILDKITE_COMMAND_EXIT_STATUS"]) == 0 \
            else "failure"
    delivery_id, event_type = delivery_id.strip(), event_type.strip()
    conclusion = conclusion.strip() or None
    if status == "in_progress":
        conclusion = None
    if delivery_id and event_type:
        root = {"event_type": event_type, "delivery_id": delivery_id,
                "payload": {"repository": {"full_name": "pytorch/pytorch"},
                            "head_sha": delivery_id}}
    else:
        root = json.loads(json.dumps(client_payload))  # CLIENT_PAYLOAD, parsed
    now = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat().replace(
        "+00:00", "Z")
    workflow = {
        "schema_version": "1",
        "status": status,
        "conclusion": conclusion,
        "name": agent_env["BUILDKITE_PIPELINE_SLUG"],
        "url": agent_env["BUILDKITE_BUILD_URL"],
        "run_attempt": run_attempt,
        "job_name": job_name,
        "check_run_id": check_run_id,
        "run_id": str(run_id),
        "started_at": None if status == "completed" else now,
        "completed_at": None if status == "in_progress" else now,
    }
    if test_results.strip():
        workflow["test_results"] = json.loads(test_results.strip())
    if artifact_url.strip():
        workflow["artifact_url"] = artifact_url.strip()
    root["workflow"] = workflow
    return json.dumps(root).encode("utf-8")


class UpstreamBuildkiteReporterTest(BuildkiteMixin, unittest.TestCase):
    """Issue 24: every report of upstream's Buildkite reporter was refused (400 "workflow.run_id
    must be a positive integer": its run id is the build's UUID)."""

    def agent_env(self, **extra):
        """What the Buildkite agent sets for the step (a retried build: attempt 2)."""
        env = {"BUILDKITE_BUILD_ID": str(uuid.uuid4()),
               "BUILDKITE_RETRY_COUNT": "1",
               "BUILDKITE_PIPELINE_SLUG": "vllm-ci",
               "BUILDKITE_BUILD_URL": BUILD_URL,
               "BUILDKITE_LABEL": ":pytorch: GPU tests (H100) :fire:",
               "BUILDKITE_STEP_KEY": "gpu-tests"}
        env.update(extra)
        return env

    def run_cells(self, repo, run_id, tab="pr"):
        doc = self.s.relay.get("/api/v1/repos/%s/runs?tab=%s" % (repo, tab)).json()
        return [c for row in doc["rows"] for c in row["cells"] if c and c["run_id"] == run_id]

    def test_pr_reports_are_taken_and_the_run_shows_with_its_build_uuid(self):
        pr = self.open_pr(repos=[L4])
        agent = self.agent_env()
        build = agent["BUILDKITE_BUILD_ID"]
        tok = self.bk_token(PIPE_L4)
        body = upstream_buildkite_body(agent, "in_progress", client_payload=pr.cp(L4))
        wf = json.loads(body)["workflow"]
        self.assertEqual((wf["run_id"], wf["run_attempt"], wf["check_run_id"], wf["name"]),
                         (build, "2", build + "-2", "vllm-ci"))
        self.assertOk(self.post_callback(L4, body, token=tok), "in_progress")
        agent["BUILDKITE_COMMAND_EXIT_STATUS"] = "1"
        body = upstream_buildkite_body(agent, "completed", client_payload=pr.cp(L4))
        self.assertEqual(json.loads(body)["workflow"]["conclusion"], "failure")
        self.assertOk(self.post_callback(L4, body, token=tok), "completed")
        # The same report again is a duplicate of the same run (the UUID is its key).
        self.assertOk(self.post_callback(L4, body, token=tok), "completed", duplicate=True)

        # The check run: the step's label in its name, linked to the build.
        name = "crcr/%s/vllm-ci/%s" % (L4, agent["BUILDKITE_LABEL"])
        runs = wait_until(lambda: [c for c in self.s.gh.check_runs()
                                   if c.get("head_sha") == pr.sha and c.get("name") == name and
                                   c.get("status") == "completed"])
        self.assertTrue(runs, self.diag())
        self.assertEqual((runs[0]["conclusion"], runs[0]["details_url"], runs[0]["external_id"]),
                         ("failure", BUILD_URL, "%s:%d" % (build, pr.number)))
        # The HUD: the API's runs and PR documents, and the pages, with the build's UUID.
        (cell,) = self.run_cells(L4, build)
        self.assertEqual((cell["result"], cell["run_attempt"], cell["job"], cell["workflow"],
                          cell["details_url"]),
                         ("failure", 2, agent["BUILDKITE_LABEL"], "vllm-ci", BUILD_URL))
        doc = self.s.relay.get("/api/v1/pr/%d" % pr.number).json()
        (run,) = [r for s in doc["shas"] for r in s["runs"] if r["run_id"] == build]
        self.assertEqual((run["repo"], run["state"], run["conclusion"]),
                         (L4, "completed", "failure"))
        for page in ("/crcr/pr/%d" % pr.number, "/crcr/%s" % L4):
            html = self.s.relay.get(page).body.decode("utf-8")
            self.assertIn("run %s attempt 2" % build, html, page)
            self.assertIn(":pytorch: GPU tests (H100) :fire:", html, page)
        # The HUD forward carries the body's ids as sent.
        fwd = wait_until(lambda: [b for b in self.hud_for(pr.delivery, L4)
                                  if b["untrusted"]["callback_payload"]["workflow"]["status"]
                                  == "completed"])
        self.assertTrue(fwd, self.diag())
        wf = fwd[0]["untrusted"]["callback_payload"]["workflow"]
        self.assertEqual((wf["run_id"], wf["check_run_id"]), (build, build + "-2"))

    def test_a_nightly_report_is_taken_and_shows_with_its_build_uuid(self):
        sha = new_sha()
        agent = self.agent_env(BUILDKITE_RETRY_COUNT="0", BUILDKITE_LABEL="",
                               BUILDKITE_COMMAND_EXIT_STATUS="0")
        build = agent["BUILDKITE_BUILD_ID"]
        body = upstream_buildkite_body(agent, "completed", delivery_id=sha, event_type="nightly",
                                       test_results='{"passed": 12, "failed": 0, "skipped": 1}')
        wf = json.loads(body)["workflow"]
        self.assertEqual((wf["job_name"], wf["run_attempt"], wf["conclusion"]),
                         ("gpu-tests", "1", "success"))  # no label: the step key
        r = self.post_callback(L2, body, token=self.bk_token(PIPE_L2, build_branch="main"))
        self.assertOk(r, "completed")
        cell = self.nightly_cell(L2, sha)
        self.assertEqual((cell["run_id"], cell["run_attempt"], cell["job"], cell["result"],
                          cell["details_url"], cell["tests"]["passed"]),
                         (build, 1, "gpu-tests", "success", BUILD_URL, 12))

    def test_github_actions_tokens_still_need_a_numeric_run_id(self):
        pr = self.open_pr(repos=[L4])
        body = upstream_buildkite_body(self.agent_env(), "in_progress", client_payload=pr.cp(L4))
        r = self.post_callback(L4, body)  # a GitHub Actions token of the same repository
        self.assertDetail(r, 400, "workflow.run_id must be a positive integer")
        sha = new_sha()
        body = upstream_buildkite_body(self.agent_env(), "completed", delivery_id=sha,
                                       event_type="nightly", conclusion="success")
        self.assertDetail(self.post_callback(L4, body), 400,
                          "workflow.run_id must be a positive integer")
        self.assertEqual(self.nightly_rows(L4, sha), [])


class ProvidersReloadTest(BuildkiteMixin, unittest.TestCase):
    """The map from a file: SIGHUP, a broken file, /readyz and /metrics."""

    def wait_pipelines(self, n, timeout=10.0):
        ok = wait_until(lambda: metric(self.s.relay, "crcr_ci_providers_pipelines") == n, timeout)
        self.assertTrue(ok, "crcr_ci_providers_pipelines != %d%s" % (n, self.diag()))

    def test_a_changed_file_takes_effect_after_sighup_and_a_broken_one_keeps_the_map(self):
        sha = new_sha()
        self.wait_pipelines(2)
        ready = self.s.relay.get("/readyz").json()
        self.assertEqual((ready["ci_providers"], ready["ci_providers_error"]), (True, None))
        self.assertEqual(ready["ci_providers_source"], "file:" + self.providers_path)
        self.assertDetail(self.post_callback(L2, self.nightly(sha),
                                             token=self.bk_token(PIPE_NEW)), 403,
                          NOT_REGISTERED % (ORG, PIPE_NEW))

        # Map the new pipeline, drop the L2 one; nothing changes before the reload (TTL 900 s).
        self.write_providers('buildkite:\n  "%s/%s": org2/repo2\n' % (ORG, PIPE_NEW))
        self.s.relay.send_signal(signal.SIGHUP)
        self.wait_pipelines(1)
        self.assertOk(self.post_callback(L2, self.nightly(sha), token=self.bk_token(PIPE_NEW)),
                      "completed")
        self.assertDetail(self.post_callback(L2, self.nightly(sha, job_name="again"),
                                             token=self.bk_token(PIPE_L2)), 403,
                          NOT_REGISTERED % (ORG, PIPE_L2))
        self.assertEqual(metric(self.s.relay, "crcr_ci_providers_refresh_failing"), 0)

        # A broken file: the last good map stays in force, /readyz and /metrics say why.
        self.write_providers('buildkite:\n  "%s/%s": &a org2/repo2\n' % (ORG, PIPE_L4))
        self.s.relay.send_signal(signal.SIGHUP)
        ok = wait_until(lambda: metric(self.s.relay, "crcr_ci_providers_refresh_failing") == 1)
        self.assertTrue(ok, self.diag())
        ready = self.s.relay.get("/readyz")
        self.assertEqual(ready.status, 200, ready.body)  # webhooks do not need the map
        self.assertIn("anchors and aliases", ready.json()["ci_providers_error"])
        self.assertTrue(ready.json()["ci_providers"])
        self.assertIn("event=ci_providers.refresh_failed", self.s.relay.log_text())
        self.assertOk(self.post_callback(L2, self.nightly(sha, job_name="kept"),
                                         token=self.bk_token(PIPE_NEW)), "completed")
        self.write_providers(PROVIDERS)
        self.s.relay.send_signal(signal.SIGHUP)
        self.wait_pipelines(2)
        self.assertTrue(wait_until(lambda: metric(
            self.s.relay, "crcr_ci_providers_refresh_failing") == 0), self.diag())
        # Every map swapped out was freed (a sanitizer build reports leaks at exit): checked
        # after tearDown, which wants the relay alive.
        self.addCleanup(R.check_clean_exit, self, self.s.relay)


PROVIDERS_REPO = "pytorch/test-infra"
PROVIDERS_PATH = "aws/lambda/cross_repo_ci_relay/config/ci_providers.yml"
PROVIDERS_URL = "https://github.com/%s/blob/main/%s" % (PROVIDERS_REPO, PROVIDERS_PATH)
TTL_S = 600


class ProvidersUrlTest(BuildkiteMixin, unittest.TestCase):
    """The map from a GitHub blob URL (the fake GitHub's contents API) with a TTL of 10 minutes
    that runs out when the test moves the stack's clock. Every test starts its own stack."""

    @classmethod
    def setUpClass(cls):
        pass  # no shared stack

    def own(self, text):
        files = {(PROVIDERS_REPO, PROVIDERS_PATH, "main"): text} if text is not None else {}
        s = self.own_stack(buildkite_issuers=1, gh_files=files,
                           env={"CI_PROVIDERS_URL": PROVIDERS_URL,
                                "ALLOWLIST_TTL_SECONDS": str(TTL_S)})
        self.addCleanup(R.check_clean_exit, self, s.relay)  # runs before the stack's close
        return s

    def contents_requests(self):
        return self.s.gh.requests(method="GET", path_re=r"^/repos/pytorch/test-infra/contents/")

    def test_a_changed_file_takes_effect_after_the_ttl(self):
        self.own(PROVIDERS)
        sha = new_sha()
        bk = self.bk
        self.assertEqual(metric(self.s.relay, "crcr_ci_providers_pipelines"), 2)
        self.assertOk(self.post_callback(L2, self.nightly(sha),
                                         token=bk.buildkite_token(ORG, PIPE_L2)), "completed")
        self.s.gh.set_file(PROVIDERS_REPO, PROVIDERS_PATH, "main",
                           "buildkite:\n  %s/%s: org2/repo2\n" % (ORG, PIPE_NEW))
        # Not before the TTL (the clock has not moved)...
        self.assertEqual(metric(self.s.relay, "crcr_ci_providers_pipelines"), 2)
        # ...and at the TTL (nothing in flight when the clock moves).
        self.settle()
        self.s.clock.advance(TTL_S)
        ok = wait_until(lambda: metric(self.s.relay, "crcr_ci_providers_pipelines") == 1, 10)
        self.assertTrue(ok, self.diag())
        self.assertOk(self.post_callback(L2, self.nightly(sha, job_name="new"),
                                         token=bk.buildkite_token(ORG, PIPE_NEW)), "completed")
        self.assertDetail(self.post_callback(L2, self.nightly(sha, job_name="old"),
                                             token=bk.buildkite_token(ORG, PIPE_L2)), 403,
                          NOT_REGISTERED % (ORG, PIPE_L2))
        # Unchanged refreshes are conditional requests answered 304.
        n = len(self.contents_requests())
        self.settle()
        self.s.clock.advance(TTL_S)
        self.assertTrue(wait_until(lambda: len(self.contents_requests()) > n, 10))
        self.assertEqual(self.contents_requests()[-1].status, 304)
        self.assertIn("from=github pipelines=1", self.s.relay.log_text())

    def test_no_map_yet_is_503_and_the_relay_still_serves(self):
        self.own(None)  # the file does not exist (404)
        ready = self.s.relay.get("/readyz")
        self.assertEqual(ready.status, 200, ready.body)
        doc = ready.json()
        self.assertFalse(doc["ci_providers"])
        self.assertIn("HTTP 404", doc["ci_providers_error"])
        self.assertEqual(metric(self.s.relay, "crcr_ci_providers_loaded"), 0)
        bk = self.bk
        sha = new_sha()
        r = self.post_callback(L2, self.nightly(sha),
                               token=bk.buildkite_token(ORG, PIPE_L2))
        self.assertDetail(r, 503, "the CI providers map is not loaded yet; please retry")
        # GitHub tokens do not need the map.
        self.assertOk(self.post_callback(L2, self.nightly(sha)), "completed")
        # The file appears: within the retry interval or a SIGHUP it is in force.
        self.s.gh.set_file(PROVIDERS_REPO, PROVIDERS_PATH, "main", PROVIDERS)
        self.s.relay.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: metric(self.s.relay, "crcr_ci_providers_loaded") == 1),
                        self.diag())
        self.assertOk(self.post_callback(L2, self.nightly(sha, job_name="bk"),
                                         token=bk.buildkite_token(ORG, PIPE_L2)), "completed")


PG_URI = os.environ.get("CRCR_TEST_PG_URI") or os.environ.get("CRCR_E2E_PG_URI") or ""


@unittest.skipUnless(PG_URI, "CRCR_TEST_PG_URI is not set (scripts/pg-test-cluster.sh start DIR)")
class SharedProvidersTest(unittest.TestCase):
    """Two instances on one PostgreSQL database share the map like the allowlist: one contents
    request per TTL in total, a change reaching both."""

    def setUp(self):
        from test_multi_instance import drop_database, psql, with_database
        name = "crcr_e2e_%s" % uuid.uuid4().hex[:12]
        psql(PG_URI, "CREATE DATABASE %s" % name)
        self.addCleanup(drop_database, PG_URI, name)
        self.clock = TestClock()
        self.addCleanup(self.clock.close)
        with open(R.APP_PUB, encoding="ascii") as f:
            self.gh = F.FakeGitHub(app_id=1, public_key=f.read(), clock=self.clock).start()
        self.addCleanup(self.gh.stop)
        self.gh.set_file(PROVIDERS_REPO, PROVIDERS_PATH, "main", PROVIDERS)
        env = {"CI_PROVIDERS_URL": PROVIDERS_URL, "ALLOWLIST_TTL_SECONDS": str(TTL_S),
               "GITHUB_API_URL": self.gh.url, "CRCR_STORE": with_database(PG_URI, name)}
        self.relays = []
        for _ in range(2):
            r = R.Relay(env=env, clock=self.clock)
            self.addCleanup(r.close)
            self.addCleanup(R.check_clean_exit, self, r)
            r.start()
            self.relays.append(r)

    def diag(self):
        return "".join("\nrelay %d log:\n%s" % (i, r.log_tail(20))
                       for i, r in enumerate(self.relays))

    def test_one_fetch_for_both_instances_and_a_change_reaches_both(self):
        reqs = self.gh.requests(method="GET", path_re=r"^/repos/pytorch/test-infra/contents/")
        self.assertEqual(len(reqs), 1, self.diag())
        self.assertIn("event=ci_providers.loaded", self.relays[0].log_text())
        self.assertRegex(self.relays[1].log_text(),
                         r"event=ci_providers\.loaded .*from=shared_copy pipelines=2")
        self.gh.set_file(PROVIDERS_REPO, PROVIDERS_PATH, "main",
                         "buildkite:\n  %s/%s: org2/repo2\n" % (ORG, PIPE_NEW))
        # A TTL later the holder fetches it, and the follower takes the copy at its next look
        # (a slack after the copy's refresh: the polls move the clock a second at a time).
        self.clock.advance(TTL_S)
        ok = wait_until(lambda: all(metric(r, "crcr_ci_providers_pipelines") == 1
                                    for r in self.relays), 20, 0.02, self.clock, 1.0)
        self.assertTrue(ok, self.diag())
        reqs = self.gh.requests(method="GET", path_re=r"^/repos/pytorch/test-infra/contents/")
        self.assertEqual(len(reqs), 2, "one fetch per TTL for both instances" + self.diag())


# ============================================================================================
# crcr report on a Buildkite agent

AGENT_SCRIPT = """#!/bin/sh
# A fake buildkite-agent: records its arguments, prints the token the test minted.
printf '%%s\\n' "$*" >> '%(args)s'
if [ "$1 $2" != "oidc request-token" ]; then echo "unexpected: $*" >&2; exit 2; fi
cat '%(token)s'
"""


class BuildkiteReportTest(BuildkiteMixin, unittest.TestCase):

    def agent(self, token):
        d = tempfile.mkdtemp(prefix="crcr-e2e-agent-", dir=self.tmp)
        args, tok = os.path.join(d, "args"), os.path.join(d, "token")
        with open(tok, "w", encoding="ascii") as f:
            f.write(token + "\n")
        path = os.path.join(d, "buildkite-agent")
        with open(path, "w", encoding="ascii") as f:
            f.write(AGENT_SCRIPT % {"args": args, "token": tok})
        os.chmod(path, stat.S_IRWXU)
        return d, args

    def setUp(self):
        super().setUp()
        self.build_id = str(uuid.uuid4())  # one build per test: its reports share the run

    def report(self, args, agent_dir, **extra):
        env = {k: v for k, v in os.environ.items()
               if k in R._KEEP_ENV or k.startswith(R._KEEP_PREFIXES)}
        env.update({
            "PATH": agent_dir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "BUILDKITE": "true",
            "BUILDKITE_BUILD_NUMBER": "4242",
            "BUILDKITE_BUILD_ID": self.build_id,
            "BUILDKITE_RETRY_COUNT": "1",
            "BUILDKITE_PIPELINE_SLUG": "vllm-ci",
            "BUILDKITE_LABEL": ":pytorch: nightly",
            "BUILDKITE_STEP_KEY": "nightly",
            "BUILDKITE_BUILD_URL": BUILD_URL,
            "BUILDKITE_BRANCH": "main",
            "CRCR_CALLBACK_URL": self.s.relay.url + "/github/callback",
        })
        env.update(extra)
        return subprocess.run([R.crcr_bin(), "report"] + list(args), env=env,
                              capture_output=True, text=True, timeout=120)

    def test_crcr_report_on_a_buildkite_agent_reports_a_nightly(self):
        sha = new_sha()
        token = self.bk_token(PIPE_L2, build_branch="main")
        agent_dir, args = self.agent(token)
        p = self.report(["--status", "completed", "--delivery-id", sha, "--event-type", "nightly",
                         "--test-results", '{"passed": 9, "failed": 0, "skipped": 1}'],
                        agent_dir, BUILDKITE_COMMAND_EXIT_STATUS="0")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.diag())
        self.assertIn('HTTP 200 {"ok":true,"status":"completed"}', p.stdout)
        self.assertNotIn(token, p.stdout + p.stderr)
        with open(args, encoding="ascii") as f:
            self.assertEqual(f.read().splitlines(),
                             ["oidc request-token --audience pytorch-cross-repo-ci-relay "
                              "--lifetime 300"])
        cell = self.nightly_cell(L2, sha)
        self.assertEqual((cell["result"], cell["run_id"], cell["run_attempt"], cell["job"],
                          cell["workflow"], cell["details_url"]),
                         ("success", self.build_id, 2, ":pytorch: nightly", "vllm-ci",
                          BUILD_URL))
        self.assertEqual(cell["tests"]["passed"], 9)

    def test_crcr_report_of_a_pr_build_from_client_payload_and_exit_status(self):
        pr = self.open_pr(repos=[L4])
        agent_dir, args = self.agent(self.bk_token(PIPE_L4, build_branch="main"))
        payload = json.dumps(pr.cp(L4))
        p = self.report(["--status", "in_progress"], agent_dir, CLIENT_PAYLOAD=payload)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.diag())
        # No --conclusion: the step's command exit status decides (non-zero: failure).
        p = self.report(["--status", "completed"], agent_dir, CLIENT_PAYLOAD=payload,
                        BUILDKITE_COMMAND_EXIT_STATUS="1")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr + self.diag())
        self.assertIn('HTTP 200 {"ok":true,"status":"completed"}', p.stdout)
        runs = wait_until(lambda: [c for c in self.s.gh.check_runs()
                                   if c.get("head_sha") == pr.sha and
                                   c.get("status") == "completed"])
        self.assertTrue(runs, self.diag())
        self.assertEqual((runs[0]["conclusion"], runs[0]["name"], runs[0]["details_url"]),
                         ("failure", "crcr/%s/vllm-ci/:pytorch: nightly" % L4, BUILD_URL))
        with open(args, encoding="ascii") as f:
            self.assertEqual(len(f.read().splitlines()), 2)  # one token per report

    def test_crcr_report_from_a_fork_build_is_refused(self):
        sha = new_sha()
        agent_dir, _ = self.agent(self.bk_token(PIPE_L2, build_branch="someone:patch-1"))
        p = self.report(["--status", "completed", "--conclusion", "failure", "--delivery-id", sha,
                         "--event-type", "nightly"], agent_dir)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("Error: Callback server returned HTTP 403.", p.stderr)
        self.assertIn(FORK % "someone:patch-1", p.stderr)
        self.assertEqual(self.nightly_rows(L2, sha), [])

    def test_a_failing_or_missing_agent_fails_the_report(self):
        agent_dir, _ = self.agent("")
        os.remove(os.path.join(agent_dir, "buildkite-agent"))
        with open(os.path.join(agent_dir, "buildkite-agent"), "w", encoding="ascii") as f:
            f.write("#!/bin/sh\necho 'OIDC tokens are not enabled for this pipeline' >&2\nexit 1\n")
        os.chmod(os.path.join(agent_dir, "buildkite-agent"), stat.S_IRWXU)
        args = ["--status", "completed", "--conclusion", "success", "--delivery-id", new_sha(),
                "--event-type", "nightly"]
        p = self.report(args, agent_dir)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("buildkite-agent oidc request-token failed (exit status 1)", p.stderr)
        self.assertIn("not enabled for this pipeline", p.stderr)  # the agent's own message
        empty = tempfile.mkdtemp(prefix="crcr-e2e-noagent-", dir=self.tmp)
        p = self.report(args, empty, PATH=empty)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("cannot run buildkite-agent (is it on PATH?)", p.stderr)


if __name__ == "__main__":
    unittest.main()
