"""GitHub Enterprise Server end to end (issue 24 point 5; spec: GITHUB_API_URL is configurable).

One stack as a GHES deployment has it, whatever CRCR_GITHUB_FLAVOR says: the fake GitHub is a
GitHub Enterprise Server 3.19 on http://127.0.0.1:PORT (plain http is allowed for loopback only)
with its API under /api/v3, so the relay runs with
  GITHUB_API_URL    = http://127.0.0.1:PORT/api/v3
  ALLOWLIST_URL     = http://127.0.0.1:PORT/pytorch/pytorch/blob/main/.github/crcr-allowlist.yml
                      (a blob URL on the GHES web host, read through /api/v3/.../contents/...)
  CRCR_OIDC_ISSUERS = http://127.0.0.1:ISSUER_PORT/_services/token (GHES's Actions issuer is
                      https://HOST/_services/token; its JWKS under it)
and every request the relay sends must be under /api/v3 and follow ghes-3.19.deref.json (the
contract check of the fake, tests/support/contract.py). Covered: the allowlist fetch, dispatch,
OIDC callbacks, a check run whose details_url is on the GHES host, the on-call comment, a
check-run re-run, and the HUD's links (the PR's blocking jobs and the repo page) on the host.
Harness: test_callback.py. Needs CRCR_BIN; see tests/support/README.md.
"""

import re
import unittest

import oidc_issuer as O
from test_callback import UPSTREAM, CallbackMixin, new_run_id, wait_until
from test_callback_checks import check_run_event

L2, L4 = "org2/repo2", "org4/repo4"
ALLOWLIST = """\
L2:
  - org2/repo2
L4:
  - org4/repo4: alice, @pytorch/accel-oncall
"""
ALLOWLIST_PATH = ".github/crcr-allowlist.yml"
TIMEOUT = 30.0


class GhesTest(CallbackMixin, unittest.TestCase):
    STACK_KW = {"allowlist": ALLOWLIST, "hud": False, "allowlist_url": ALLOWLIST_PATH,
                "gh_kw": {"flavor": "ghes-3.19"}}

    def test_the_relay_works_against_ghes_under_api_v3(self):
        gh, relay = self.s.gh, self.s.relay
        host = "http://127.0.0.1:%d" % gh.port
        self.assertEqual(gh.url, host + "/api/v3")
        self.assertEqual(self.s.issuer.url, "http://127.0.0.1:%d%s"
                         % (self.s.issuer.port, O.ACTIONS_GHES_PATH))

        # Allowlist fetch: the blob URL on the host, read through the contents API under /api/v3.
        fetch = gh.requests("GET", r"^/repos/pytorch/pytorch/contents/")
        self.assertEqual([(r.path, r.query.get("ref"), r.status) for r in fetch][:1],
                         [("/repos/pytorch/pytorch/contents/" + ALLOWLIST_PATH, "main", 200)])
        ready = relay.get("/readyz")
        self.assertEqual(ready.status, 200, ready.body)

        # Dispatch: a PR reaches both repos.
        pr = self.open_pr(repos=[L2, L4])
        self.assertEqual(sorted(d["repo"] for d in gh.dispatches()
                                if d["client_payload"].get("delivery_id") == pr.delivery),
                         [L2, L4])

        # OIDC callbacks from the GHES issuer; an L4 failure makes a check run on the PR's sha
        # whose details_url is the run's page on the GHES host, and the on-call comment.
        run = new_run_id()
        self.progress(L4, pr, job_name="build", conclusion="failure", run_id=run)
        self.assertOk(self.cb(L2, pr, "in_progress", run_id=new_run_id()), "in_progress")
        done = wait_until(lambda: [c for c in self.checks_for(pr.sha, L4)
                                   if c["status"] == "completed"], TIMEOUT)
        self.assertTrue(done, "no completed check run%s" % self.diag())
        details = "%s/%s/actions/runs/%d" % (host, L4, run)
        self.assertEqual((done[0]["conclusion"], done[0]["details_url"]), ("failure", details))
        self.assertEqual(done[0]["output"]["summary"], "%s workflow: %s" % (L4, details))
        comments = gh.wait_comments(UPSTREAM, pr.number, 1, timeout=TIMEOUT)
        self.assertEqual(len(comments), 1, self.diag())
        self.assertTrue(comments[0]["body"].startswith("<!-- crcr-oncall:%s -->" % L4))
        self.assertIn("@alice", comments[0]["body"])
        # (its check-run link is https-only: the loopback host's http page is not linked)
        self.assertNotIn("github.com", comments[0]["body"])

        # Re-run: the check run rerequested on GHES re-runs the failed jobs through /api/v3.
        r = self.webhook("check_run", check_run_event("crcr/%s/CI/build" % L4, "%d:%d"
                                                      % (run, pr.number)))
        self.assertEqual((r.status, r.json()), (200, {"ok": True, "rerun": [L4]}))
        self.assertTrue(wait_until(lambda: [x for x in gh.reruns() if x["run_id"] == run],
                                   TIMEOUT), self.diag())
        self.assertEqual([(x["repo"], x["kind"]) for x in gh.reruns() if x["run_id"] == run],
                         [(L4, "rerun-failed-jobs")])

        # The HUD links to the GHES host: the blocking job's run page, the repo on GitHub.
        blocking = relay.get("/api/v1/pr/%d/blocking?sha=%s" % (pr.number, pr.sha)).json()
        self.assertEqual([(b["repo"], [j["details_url"] for j in b["jobs"]])
                          for b in blocking["blocking"]], [(L4, [details])])
        page = relay.get("/crcr/%s" % L4).body.decode("utf-8")
        self.assertIn('href="%s/%s"' % (host, L4), page)
        self.assertNotIn("https://github.com/", page)

        # Every request was under /api/v3 and follows GitHub Enterprise Server 3.19's
        # description (the check runs again when the stack stops).
        self.settle()
        self.assertEqual([r.path for r in gh.requests() if r.outside], [])
        self.assertTrue(all(x.raw_path.startswith("/api/v3/") for x in gh._exchanges))
        seen = {r.method + " " + r.path for r in gh.requests()}
        for want in (r"GET /repos/\S+/installation$", r"POST /app/installations/\d+/access_tokens$",
                     r"GET /repos/pytorch/pytorch/contents/", r"POST /repos/\S+/dispatches$",
                     r"POST /repos/pytorch/pytorch/check-runs$",
                     r"GET /repos/pytorch/pytorch/issues/\d+/comments$",
                     r"POST /repos/pytorch/pytorch/issues/\d+/comments$",
                     r"POST /repos/org4/repo4/actions/runs/\d+/rerun-failed-jobs$"):
            self.assertTrue([x for x in seen if re.match(want, x)], "%s not in %s" % (want, seen))
        gh.check_contract()
        self.assertEqual(gh.contract_violations, [])


if __name__ == "__main__":
    unittest.main()
