"""hud_fill - a relay filled with realistic HUD data, for tests/e2e/test_hud_*.py and the bench.

Everything goes through the real front doors: signed webhooks to /github/webhook, dispatches to
a fake GitHub (some refused or failing), and OIDC-authenticated callbacks to /github/callback
that echo the dispatched client_payload (callback_token included). Nothing is written to the
store directly.

    w = HudWorld().start()      # ~10 s; w.relay, w.gh, w.issuer
    w.relay.get("/crcr")
    w.close()

What it builds (PR numbers 5000-5012, one head sha each, plus a push and nightly runs):

  repo                  level  profile
  l4org/cuda-mature     L4     3 jobs x 12 PRs, all success, one cancelled on PR 5012 -> healthy
  l4org/rocm-mature     L4     2 jobs x 12 PRs; PR 5012: build still running, test timed_out
                               (reported) -> 22/23 = 95.7 % -> at risk
  l4org/flaky-l4        L4     1 job x 12 PRs, failures on PRs 5004 and 5012, a passing re-run of
                               5004 -> 11/13 = 84.6 % -> below level, recommended L2; two
                               refused callbacks
  l3org/npu-ci          L3     2 jobs x 12 PRs, label ciflow/crcr/npu on even PRs (check runs),
                               2 cancelled; a zombie on PR 5000 timed out by the sweeper (an
                               hour later on the moved clock)
  l3org/xpu-ci          L3     3 PRs only (too few runs -> at risk); SEC-10/11: a job name with
                               HTML and artifact_url https://example.com/<script>alert('xss')
                               </script>, plus a javascript: artifact URL that must not be linked
  l3org/xpu-slow        L3     1 job x 12 PRs, the last two still running; zombie on PR 5000
  l2org/observer-a      L2     1 job x 12 PRs (9 success) + the push -> 10/13 = 76.9 % -> healthy
  l2org/observer-b      L2     5 nightly runs, no PR runs; its dispatch of PR 5010 is retrying
  l2org/observer-dead   L2     App not installed: every dispatch dead (404)
  l1org/events-only     L1     dispatches only
  l1org/listener        L1     dispatches only; one callback, ignored (below L2)

PR 5006 carries a 70 kB body, so its dispatches are trimmed. PR 5012 is the merge candidate of
the blocking API: rocm-mature (running) and flaky-l4 (failed) block it; cuda-mature's cancelled
job and rocm-mature's timed_out job do not.
"""

import copy
import json
import secrets
import time

import contract as C
import fakegh as F
import oidc_issuer as O
import relay as R
from testclock import TestClock
from waiting import wait_until

APP_ID = 515151
PR_BASE = 5000
N_PRS = 12  # PRs 5001..5012 (5000 is the zombie PR of phase 1)
MERGE_PR = PR_BASE + N_PRS
TRIMMED_PR = 5006
RETRY_PR = 5010

CUDA, ROCM, FLAKY = "l4org/cuda-mature", "l4org/rocm-mature", "l4org/flaky-l4"
NPU, XPU, XPU_SLOW = "l3org/npu-ci", "l3org/xpu-ci", "l3org/xpu-slow"
OBS_A, OBS_B, OBS_DEAD = "l2org/observer-a", "l2org/observer-b", "l2org/observer-dead"
L1_A, L1_B = "l1org/events-only", "l1org/listener"
ALL_REPOS = [CUDA, ROCM, FLAKY, NPU, XPU, XPU_SLOW, OBS_A, OBS_B, OBS_DEAD, L1_A, L1_B]

ALLOWLIST = """\
L1:
  - l1org/events-only
  - l1org/listener
L2:
  - l2org/observer-a
  - l2org/observer-b
  - l2org/observer-dead
L3:
  npu:
    l3org/npu-ci: [oncall_npu]
  xpu:
    l3org/xpu-ci: [oncall_xpu]
    l3org/xpu-slow: []
L4:
  - l4org/cuda-mature: oncall_a
  - l4org/rocm-mature
  - l4org/flaky-l4
"""

XSS_ARTIFACT = "https://example.com/<script>alert('xss')</script>"
XSS_JOB = "<img src=x onerror=alert(1)>build<script>alert(2)</script>"
JS_ARTIFACT = "javascript:alert(3)"  # dropped at parse time: never stored nor shown


def utc_now(clock=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ",
                         time.gmtime(clock.now() if clock is not None else None))


class FillError(AssertionError):
    pass


class HudWorld:
    """Fake GitHub + OIDC issuer + relay on one test clock (`clock`), filled as described in the
    module docstring."""

    def __init__(self, relay_env=None):
        self.relay_env = dict(relay_env or {})
        self.gh = self.issuer = self.relay = None
        self.clock = TestClock()
        self.prs = {}  # number -> {"sha", "delivery", "payloads": {repo: client_payload}}
        self.push = None
        self.nightly_shas = []
        self._tokens = {}
        self._run_id = 30_000_000_000 + secrets.randbelow(10**8)
        self.callbacks = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self):
        try:
            with open(R.APP_PUB, encoding="ascii") as f:
                installed = [r for r in ALL_REPOS if r != OBS_DEAD] + ["pytorch/pytorch"]
                self.gh = F.FakeGitHub(app_id=APP_ID, public_key=f.read(),
                                       installed_repos=installed, clock=self.clock).start()
            self.issuer = O.OIDCIssuer(clock=self.clock).start()
            env = {
                "GITHUB_APP_ID": str(APP_ID),
                "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
                "GITHUB_API_URL": self.gh.url,
                "CRCR_OIDC_ISSUERS": self.issuer.url,
                "RATE_LIMIT_PER_MIN": "100000",
                "CRCR_RETRY_BASE_MS": "600000",
                "CRCR_RETRY_MAX_MS": "600000",
                "CRCR_LOG": "info",
                # zombies after an hour (a PR head's time stays under the L3+ limit of 3 h); the
                # clock moves past it once, in phase 1
                "ZOMBIE_TIMEOUT_SECONDS": "3600",
                "CRCR_SWEEP_SECONDS": "60",
            }
            env.update(self.relay_env)
            self.relay = R.Relay(env=env, allowlist=ALLOWLIST, clock=self.clock)
            self.relay.start()
            self._fill()
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        """Stops everything; then raises the fake GitHub's ContractViolation, if any."""
        violation = None
        for thing in (self.relay, self.gh, self.issuer):
            if thing is None:
                continue
            try:
                thing.close() if thing is self.relay else thing.stop()
            except C.ContractViolation as e:
                violation = e
            except Exception:  # cleanup goes on
                pass
        self.clock.close()
        if violation is not None:
            raise violation

    def diag(self, n=30):
        return "\nrelay log:\n" + (self.relay.log_tail(n) if self.relay else "")

    # ------------------------------------------------------------------ helpers

    def token(self, repo):
        tok, at = self._tokens.get(repo, (None, 0))
        if not tok or self.clock.now() - at > 200:  # tokens live 300 s on the moved clock
            tok = self.issuer.token(repo)
            self._tokens[repo] = (tok, self.clock.now())
        return tok

    def next_run_id(self):
        self._run_id += 1
        return self._run_id

    def pr_webhook(self, number, labels=(), body_text=None, skip_wait=()):
        obj = R.load_example_obj("pull_request.opened")
        sha = secrets.token_hex(20)
        obj["number"] = number
        obj["pull_request"]["number"] = number
        obj["pull_request"]["head"]["sha"] = sha
        obj["pull_request"]["title"] = "HUD fixture PR %d" % number
        if body_text is not None:
            obj["pull_request"]["body"] = body_text
        tmpl = obj["pull_request"]["labels"][0] if obj["pull_request"]["labels"] else {}
        obj["pull_request"]["labels"] = [dict(tmpl, id=9000 + i, name=n)
                                         for i, n in enumerate(labels)]
        r = self.relay.webhook("pull_request", R.compact(obj))
        if r.status != 202:
            raise FillError("webhook PR %d: %s %r%s" % (number, r.status, r.body[:200],
                                                         self.diag()))
        payloads = self._wait_dispatches(r.delivery, skip_wait)
        self.prs[number] = {"sha": sha, "delivery": r.delivery, "payloads": payloads,
                            "obj": obj}
        return self.prs[number]

    def _wait_dispatches(self, delivery, skip):
        want = set(r for r in ALL_REPOS if r != OBS_DEAD and r not in skip)

        def got():
            out = {d["repo"]: d["client_payload"] for d in self.gh.dispatches()
                   if d["client_payload"].get("delivery_id") == delivery}
            return out if want <= set(out) else None

        payloads = wait_until(got, 20.0)
        if not payloads:
            raise FillError("dispatches of %s did not arrive%s" % (delivery, self.diag()))
        return payloads

    def body(self, cp, status, conclusion=None, run_id=None, run_attempt=1, job="build",
             workflow="CI", artifact_url=None, tests=None):
        b = copy.deepcopy(cp)
        now = utc_now(self.clock)
        wf = {
            "schema_version": "1",
            "status": status,
            "conclusion": conclusion if status == "completed" else None,
            "name": workflow,
            "url": "https://github.com/x/y/actions/runs/%s" % run_id,
            "run_id": str(run_id),
            "run_attempt": str(run_attempt),
            "job_name": job,
            "check_run_id": str(run_id * 10 + 1),
            "started_at": now if status == "in_progress" else None,
            "completed_at": now if status == "completed" else None,
        }
        if artifact_url is not None:
            wf["artifact_url"] = artifact_url
        if tests is not None:
            wf["test_results"] = tests
        b["workflow"] = wf
        return b

    def post(self, repo, body, expect=200):
        h = {"Content-Type": "application/json",
             "Authorization": "Bearer " + self.token(repo)}
        r = self.relay.post("/github/callback", R.compact(body), h)
        self.callbacks += 1
        if expect is not None and r.status != expect:
            raise FillError("callback %s %s: %s %r%s" % (repo, body["workflow"]["status"],
                                                        r.status, r.body[:300], self.diag()))
        return r

    def job(self, repo, number, job, outcome, workflow="CI", artifact_url=None, tests=None,
            run_attempt=1, run_id=None):
        """One downstream job of PR `number`: outcome "running" sends in_progress only, anything
        else in_progress then completed with that conclusion."""
        cp = self.prs[number]["payloads"][repo]
        run_id = run_id or self.next_run_id()
        kw = dict(run_id=run_id, run_attempt=run_attempt, job=job, workflow=workflow,
                  artifact_url=artifact_url)
        self.post(repo, self.body(cp, "in_progress", **kw))
        if outcome != "running":
            self.post(repo, self.body(cp, "completed", conclusion=outcome, tests=tests, **kw))
        return run_id

    def nightly(self, repo, conclusion, job="nightly-full"):
        sha = secrets.token_hex(20)
        self.nightly_shas.append(sha)
        body = {"event_type": "nightly", "delivery_id": sha,
                "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha}}
        body = self.body(body, "completed", conclusion=conclusion, run_id=self.next_run_id(),
                         job=job, workflow="Nightly", tests={"passed": 900, "failed": 3,
                                                             "skipped": 12})
        self.post(repo, body)
        # The next report a millisecond later on the relay's clock: the HUD lists runs newest
        # first, and runs of the same millisecond in its index's order, not in arrival order (a
        # fast machine stored two of these in one millisecond: test_hud_api saw them swapped).
        self.clock.advance(0.001)

    # ------------------------------------------------------------------ the data

    def _fill(self):
        # Phase 1: zombies. The clock moves past the zombie timeout (1 h) and a sweeper period
        # (1 min) once nothing is in flight: the sweeper times the in-progress runs out.
        self.pr_webhook(PR_BASE, labels=("ciflow/crcr/npu",))
        self.job(NPU, PR_BASE, "long-test", "running")
        self.job(XPU_SLOW, PR_BASE, "test", "running")
        if not self.relay.wait_outbox_idle(20.0):
            raise FillError("outbox did not settle before the zombies" + self.diag())
        self.clock.advance(3600 + 60 + 1)

        def swept():
            doc = self.relay.get("/api/v1/pr/%d" % PR_BASE).json()
            runs = [r for s in doc["shas"] for r in s["runs"]]
            return len(runs) == 2 and all(r["conclusion"] == "timed_out" for r in runs)

        if not wait_until(swept, 15.0, 0.02):
            raise FillError("the sweeper did not time out the zombies" + self.diag())
        # Phase 2: later runs stay running (the clock does not move again).

        for i in range(N_PRS):
            number = PR_BASE + 1 + i
            last = number == MERGE_PR
            labels = ("ciflow/crcr/npu",) if i % 2 == 0 else ()
            body_text = "x" * 70000 if number == TRIMMED_PR else None
            skip = ()
            rule = None
            if number == RETRY_PR:
                rule = self.gh.fault_5xx(r"^/repos/l2org/observer-b/dispatches$", count=1)
                skip = (OBS_B,)
            self.pr_webhook(number, labels=labels, body_text=body_text, skip_wait=skip)
            if rule is not None:
                wait_until(lambda: rule.hits >= 1, 10.0)

            # L4
            self.job(CUDA, number, "build", "success", workflow="cuda-ci")
            self.job(CUDA, number, "test (default, 1, 2)", "cancelled" if last else "success",
                     workflow="cuda-ci", tests={"passed": 4000, "failed": 0, "skipped": 31})
            self.job(CUDA, number, "test (default, 2, 2)", "success", workflow="cuda-ci")
            self.job(ROCM, number, "build", "running" if last else "success", workflow="rocm")
            self.job(ROCM, number, "test", "timed_out" if last else "success", workflow="rocm")
            self.job(FLAKY, number, "test", "failure" if number in (5004, MERGE_PR) else
                     "success", workflow="ci")
            # L3
            self.job(NPU, number, "build", "success", workflow="npu")
            self.job(NPU, number, "test", "cancelled" if number in (5003, 5007) else "success",
                     workflow="npu")
            if number in (5001, 5002, MERGE_PR):
                self.job(XPU, number, XSS_JOB, "failure", workflow="xpu",
                         artifact_url=XSS_ARTIFACT)
                self.job(XPU, number, "unit", "success", workflow="xpu",
                         artifact_url=JS_ARTIFACT)
            self.job(XPU_SLOW, number, "test",
                     "running" if number >= MERGE_PR - 1 else "success", workflow="slow")
            # L2
            self.job(OBS_A, number, "smoke",
                     "failure" if number in (5002, 5005, 5008) else "success", workflow="obs")
            # L1: ignored
            if number == PR_BASE + 1:
                r = self.post(L1_B, self.body(self.prs[number]["payloads"][L1_B], "in_progress",
                                              run_id=self.next_run_id()), expect=200)
                if json.loads(r.body).get("status") != "ignored":
                    raise FillError("L1 callback not ignored: %r" % r.body)

        # A re-run: the second attempt of flaky-l4 on PR 5004 passes.
        self.job(FLAKY, 5004, "test", "success", workflow="ci", run_attempt=2)
        # Refused callbacks (counted in flaky-l4's rejection rate): completed without
        # in_progress, and an unknown delivery.
        cp = copy.deepcopy(self.prs[5005]["payloads"][FLAKY])
        self.post(FLAKY, self.body(cp, "completed", conclusion="success",
                                   run_id=self.next_run_id()), expect=400)
        cp["delivery_id"] = "no-such-delivery"
        cp.pop("callback_token", None)
        self.post(FLAKY, self.body(cp, "in_progress", run_id=self.next_run_id()), expect=400)

        # A push, reported by observer-a.
        obj = R.load_example_obj("push")
        sha = secrets.token_hex(20)
        obj["after"] = sha
        obj["head_commit"]["id"] = sha
        r = self.relay.webhook("push", R.compact(obj))
        if r.status != 202:
            raise FillError("push: %s%s" % (r.status, self.diag()))
        payloads = self._wait_dispatches(r.delivery, ())
        self.push = {"sha": sha, "delivery": r.delivery}
        rid = self.next_run_id()
        self.post(OBS_A, self.body(payloads[OBS_A], "in_progress", run_id=rid, job="smoke",
                                   workflow="obs"))
        self.post(OBS_A, self.body(payloads[OBS_A], "completed", conclusion="success",
                                   run_id=rid, job="smoke", workflow="obs"))

        # Nightly self-reports of observer-b.
        for c in ("success", "success", "failure", "success", "success"):
            self.nightly(OBS_B, c)

        # Let check runs and the like drain (the retrying row stays queued for 10 min).
        if not wait_until(self._settled, 20.0, 0.2):
            raise FillError("outbox did not settle" + self.diag())

    def _settled(self):
        doc = self.relay.get("/api/v1/repos").json()
        ob = doc["relay"]["outbox"]
        return ob["running"] == 0 and ob["queued"] == 1

    # ------------------------------------------------------------------ facts for tests

    def callback_tokens(self):
        """Every callback_token the relay handed out (they must never appear on the HUD)."""
        return sorted({d["client_payload"].get("callback_token") for d in self.gh.dispatches()
                       if d["client_payload"].get("callback_token")})

    def installation_tokens(self):
        """Installation tokens the fake GitHub issued to the relay."""
        with self.gh._lock:
            return list(self.gh._tokens)
