"""End-to-end tests of the HUD's JSON API (/api/v1/...) and `crcr health`, against a relay filled
through its real front doors (tests/support/hud_fill.py: webhooks, dispatches to a fake GitHub,
OIDC callbacks, the sweeper).

Covers docs/api.md: repos with level health, the PR x job matrix with pagination and the nightly
tab, the PR view with check runs, the merge-blocking query (upstream §2.5: failed or still
running L4 results block; cancelled and timed_out do not), deliveries with each target's
dispatch state, query-parameter bounds, and that no token or secret ever reaches an answer.
Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import unittest

import hud_fill as HF
import relay as R

CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"


class HudApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.w = HF.HudWorld().start()
        cls.addClassCleanup(cls.w.close)

    def setUp(self):
        self.assertTrue(self.w.relay.running(), "relay died:\n" + self.w.relay.log_tail())

    # ------------------------------------------------------------------ helpers

    def get(self, path, status=200):
        r = self.w.relay.get(path)
        self.assertEqual(r.status, status, "%s: %r%s" % (path, r.body[:300], self.w.diag(10)))
        return r

    def json(self, path, status=200):
        r = self.get(path, status)
        self.assertEqual(r.headers.get("content-type"), "application/json", path)
        return json.loads(r.body)

    def repos(self):
        return {e["repo"]: e for e in self.json("/api/v1/repos")["repos"]}

    def bad_request(self, path):
        doc = self.json(path, 400)
        self.assertIn("detail", doc)
        return doc["detail"]

    # ------------------------------------------------------------------ /api/v1/repos

    def test_repos_lists_every_allowlisted_repo_in_level_order(self):
        doc = self.json("/api/v1/repos")
        self.assertEqual([e["repo"] for e in doc["repos"]],
                         [HF.CUDA, HF.ROCM, HF.FLAKY, HF.NPU, HF.XPU, HF.XPU_SLOW, HF.OBS_A,
                          HF.OBS_B, HF.OBS_DEAD, HF.L1_A, HF.L1_B])
        self.assertEqual([e["level"] for e in doc["repos"]],
                         ["L4"] * 3 + ["L3"] * 3 + ["L2"] * 3 + ["L1"] * 2)
        self.assertEqual(doc["window_s"], 7 * 86400)
        self.assertEqual(self.repos()[HF.NPU]["device"], "npu")

    def test_counts_and_rates_follow_the_runs(self):
        e = self.repos()

        def counts(repo):
            x = e[repo]
            return (x["runs"], x["success"], x["failure"], x["cancelled"], x["timed_out"],
                    x["running"], x["success_rate_pct"])

        self.assertEqual(counts(HF.CUDA), (36, 35, 0, 1, 0, 0, 100.0))
        self.assertEqual(counts(HF.ROCM), (24, 22, 0, 0, 1, 1, 95.7))
        self.assertEqual(counts(HF.FLAKY), (13, 11, 2, 0, 0, 0, 84.6))
        # the sweeper's zombie counts as timed out (a failure), cancelled runs not at all
        self.assertEqual(counts(HF.NPU), (25, 22, 0, 2, 1, 0, 95.7))
        self.assertEqual(counts(HF.XPU_SLOW), (13, 10, 0, 0, 1, 2, 90.9))
        self.assertEqual(counts(HF.OBS_A), (13, 10, 3, 0, 0, 0, 76.9))
        self.assertEqual(counts(HF.OBS_B)[:6], (0, 0, 0, 0, 0, 0))
        self.assertEqual(e[HF.OBS_B]["nightly"], 5)
        self.assertIsNone(e[HF.OBS_B]["success_rate_pct"])
        self.assertEqual(e[HF.ROCM]["timeout_rate_pct"], 4.3)  # 1 of 23 completed
        for repo in (HF.OBS_DEAD, HF.L1_A, HF.L1_B):
            self.assertEqual(e[repo]["runs"], 0, repo)  # L1 callbacks are ignored
        self.assertIsNotNone(e[HF.CUDA]["queue_p50_s"])
        self.assertIsNotNone(e[HF.CUDA]["exec_p50_s"])
        self.assertEqual(e[HF.CUDA]["pr_heads"], 12)
        self.assertIsNotNone(e[HF.CUDA]["last_run_at"])

    def test_callback_rejections_are_counted_per_repo(self):
        e = self.repos()
        self.assertEqual(e[HF.FLAKY]["callbacks_rejected"], 2)
        self.assertEqual(e[HF.FLAKY]["callbacks_accepted"], 26)
        self.assertEqual(e[HF.FLAKY]["callback_rejection_pct"], 7.1)  # 2 of 28
        self.assertEqual(e[HF.CUDA]["callback_rejection_pct"], 0.0)

    def test_health_classifies_each_repo_against_its_level(self):
        e = self.repos()

        def h(repo):
            return (e[repo]["health"]["status"], e[repo]["health"]["recommended_level"])

        self.assertEqual(h(HF.CUDA), ("healthy", "L4"))
        self.assertEqual(h(HF.ROCM), ("at_risk", "L4"))  # 95.7 % <= 97.5 %
        self.assertEqual(h(HF.FLAKY), ("below_level", "L2"))  # 84.6 %: L2 yes, L3 no
        self.assertIn("L3 threshold 90%", e[HF.FLAKY]["health"]["reason"])
        self.assertEqual(h(HF.NPU), ("healthy", "L3"))
        self.assertEqual(h(HF.XPU), ("at_risk", "L3"))
        self.assertIn("too few runs", e[HF.XPU]["health"]["reason"])
        self.assertEqual(h(HF.XPU_SLOW), ("at_risk", "L3"))
        self.assertEqual(h(HF.OBS_A), ("healthy", "L2"))
        self.assertEqual(h(HF.L1_A), ("not_measured", "L1"))

    def test_relay_health_reports_backlog_dead_rows_and_allowlist(self):
        relay = self.json("/api/v1/repos")["relay"]
        # observer-dead is not installed: its dispatch of each of the 14 webhooks is dead
        self.assertEqual(relay["outbox"]["dead"], 14)
        self.assertEqual(relay["outbox"]["queued"], 1)  # observer-b's retry of PR 5010
        self.assertEqual(relay["outbox"]["backlog"], 1)
        self.assertIsNotNone(relay["outbox"]["oldest_due_at"])
        self.assertIsNotNone(relay["last_webhook_at"])
        self.assertTrue(relay["allowlist"]["loaded"])
        self.assertEqual(relay["allowlist"]["repos"], 11)
        self.assertTrue(relay["allowlist"]["source"].startswith("file:"))
        self.assertFalse(relay["dry_run"])

    # ------------------------------------------------------------------ repo matrix

    def test_repo_matrix_has_one_row_per_pr_and_one_column_per_job(self):
        doc = self.json("/api/v1/repos/l4org/cuda-mature/runs")
        self.assertEqual((doc["repo"], doc["level"], doc["tab"]), (HF.CUDA, "L4", "pr"))
        self.assertEqual((doc["page"], doc["pages"], doc["rows_total"]), (1, 1, 12))
        self.assertEqual([(j["workflow"], j["job"]) for j in doc["jobs"]],
                         [("cuda-ci", "build"), ("cuda-ci", "test (default, 1, 2)"),
                          ("cuda-ci", "test (default, 2, 2)")])
        self.assertEqual([r["pr_number"] for r in doc["rows"]], list(range(5012, 5000, -1)))
        first = doc["rows"][0]
        self.assertEqual(first["head_sha"], self.w.prs[5012]["sha"])
        self.assertEqual([c["result"] for c in first["cells"]], ["success", "cancelled",
                                                                 "success"])
        cell = first["cells"][1]
        self.assertEqual(cell["tests"], {"passed": 4000, "failed": 0, "skipped": 31})
        self.assertTrue(cell["details_url"].startswith(
            "https://github.com/l4org/cuda-mature/actions/runs/"))
        self.assertNotIn("payload", cell)
        self.assertEqual(doc["health"]["repo"], HF.CUDA)
        self.assertEqual(len(doc["trend"]), 14)
        self.assertEqual(sum(b["completed"] for b in doc["trend"]), 36)
        # the same answer without /runs, and the repo is matched case-insensitively
        self.assertEqual(self.json("/api/v1/repos/L4ORG/Cuda-Mature")["rows_total"], 12)

    def test_repo_pages_report_the_same_health_as_the_overview(self):
        overview = self.repos()
        for repo in HF.ALL_REPOS:
            for tab in ("pr", "nightly"):
                doc = self.json("/api/v1/repos/%s/runs?tab=%s" % (repo, tab))
                self.assertEqual(doc["health"], overview[repo], (repo, tab))

    def test_running_and_timed_out_cells(self):
        doc = self.json("/api/v1/repos/l4org/rocm-mature/runs")
        first = doc["rows"][0]
        self.assertEqual(first["pr_number"], 5012)
        self.assertEqual([c["result"] for c in first["cells"]], ["running", "timed_out"])
        self.assertEqual(first["cells"][0]["state"], "in_progress")
        self.assertIsNone(first["cells"][0]["completed_at"])

    def test_a_re_run_shows_its_newest_attempt(self):
        doc = self.json("/api/v1/repos/l4org/flaky-l4/runs")
        row = [r for r in doc["rows"] if r["pr_number"] == 5004][0]
        self.assertEqual(row["cells"][0]["run_attempt"], 2)
        self.assertEqual(row["cells"][0]["result"], "success")

    def test_push_runs_are_rows_of_their_own(self):
        doc = self.json("/api/v1/repos/l2org/observer-a/runs")
        push = [r for r in doc["rows"] if r["pr_number"] is None]
        self.assertEqual(len(push), 1)
        self.assertEqual(push[0]["head_sha"], self.w.push["sha"])

    def test_nightly_tab_lists_self_reports(self):
        doc = self.json("/api/v1/repos/l2org/observer-b/runs?tab=nightly")
        self.assertEqual(doc["tab"], "nightly")
        self.assertEqual(doc["rows_total"], 5)
        self.assertEqual([r["delivery_id"] for r in doc["rows"]], self.w.nightly_shas[::-1])
        self.assertEqual([r["cells"][0]["result"] for r in doc["rows"]],
                         ["success", "success", "failure", "success", "success"])
        self.assertEqual(doc["rows"][0]["cells"][0]["event_type"], "nightly")
        self.assertEqual(self.json("/api/v1/repos/l2org/observer-b/runs?tab=pr")["rows_total"], 0)

    def test_pagination_and_query_parameters_are_bounded(self):
        doc = self.json("/api/v1/repos/l4org/cuda-mature/runs?page=2")
        self.assertEqual((doc["page"], doc["pages"], doc["rows"]), (2, 1, []))
        self.assertEqual(self.json("/api/v1/repos/l4org/cuda-mature/runs?page=1000")["rows"], [])
        for q in ("page=0", "page=1001", "page=-1", "page=abc", "page=1e3",
                  "page=99999999999999999999", "tab=bogus", "window=0d", "window=91d",
                  "window=7x"):
            self.bad_request("/api/v1/repos/l4org/cuda-mature/runs?" + q)
        self.assertEqual(self.json("/api/v1/repos/l4org/cuda-mature/runs?window=36h")["window_s"],
                         36 * 3600)

    def test_unknown_repos_and_bad_names_are_404(self):
        for path in ("/api/v1/repos/nobody/nothing/runs", "/api/v1/repos/a/b/c",
                     "/api/v1/repos/..%2F../runs", "/api/v1/repos/only-owner"):
            self.assertIn("Not found", self.json(path, 404)["detail"])

    # ------------------------------------------------------------------ PR view

    def test_pr_view_groups_results_by_head_sha_with_check_runs(self):
        doc = self.json("/api/v1/pr/5012")
        self.assertEqual(doc["pr_number"], 5012)
        self.assertEqual(len(doc["shas"]), 1)
        sha = doc["shas"][0]
        self.assertEqual(sha["head_sha"], self.w.prs[5012]["sha"])
        self.assertEqual([d["delivery_id"] for d in sha["deliveries"]],
                         [self.w.prs[5012]["delivery"]])
        disp = {d["target"]: d for d in sha["deliveries"][0]["dispatches"]}
        self.assertEqual(set(disp), set(HF.ALL_REPOS))
        self.assertEqual(disp[HF.OBS_DEAD]["state"], "dead")
        self.assertEqual(disp[HF.OBS_DEAD]["last_status"], 404)
        self.assertEqual(disp[HF.CUDA]["dispatch_state"], "sent")
        by_repo = {}
        for r in sha["runs"]:
            by_repo.setdefault(r["repo"], []).append(r["result"])
        self.assertEqual(by_repo, {
            HF.CUDA: ["success", "cancelled", "success"],
            HF.FLAKY: ["failure"],
            HF.ROCM: ["running", "timed_out"],
            HF.NPU: ["success", "success"],
            HF.XPU: ["failure", "success"],
            HF.XPU_SLOW: ["running"],
            HF.OBS_A: ["success"],
        })
        # L4 check runs: an in_progress and a completed one per finished job
        names = sorted((c["check_run"]["name"], c["check_run"]["status"])
                       for c in sha["check_runs"])
        self.assertEqual(len(names), 11)
        self.assertIn(("crcr/l4org/rocm-mature/rocm/build", "in_progress"), names)
        self.assertTrue(all(n.startswith("crcr/l4org/") for n, _ in names))
        self.assertTrue(all(c["state"] == "sent" for c in sha["check_runs"]))

    def test_labelled_l3_prs_get_check_runs_too(self):
        sha = self.json("/api/v1/pr/5001")["shas"][0]
        names = {c["check_run"]["name"] for c in sha["check_runs"]}
        self.assertIn("crcr/l3org/npu-ci/npu/build", names)
        self.assertNotIn("crcr/l3org/xpu-ci/xpu/unit", names)  # no ciflow/crcr/xpu label

    def test_pr_view_of_an_unknown_pr_is_empty_and_bad_numbers_404(self):
        self.assertEqual(self.json("/api/v1/pr/4242")["shas"], [])
        for path in ("/api/v1/pr/0", "/api/v1/pr/-3", "/api/v1/pr/12345678901",
                     "/api/v1/pr/abc", "/api/v1/pr/5012/other"):
            self.assertEqual(self.w.relay.get(path).status, 404, path)

    # ------------------------------------------------------------------ blocking

    def test_failed_and_running_l4_results_block_cancelled_and_timed_out_do_not(self):
        sha = self.w.prs[5012]["sha"]
        doc = self.json("/api/v1/pr/5012/blocking?sha=" + sha)
        self.assertTrue(doc["blocked"])
        self.assertEqual(doc["l4_repos"], [HF.CUDA, HF.ROCM, HF.FLAKY])
        got = {b["repo"]: [(j["job"], j["reason"]) for j in b["jobs"]] for b in doc["blocking"]}
        self.assertEqual(got, {HF.ROCM: [("build", "still running")],
                               HF.FLAKY: [("test", "failed")]})
        # an L3 failure (xpu-ci) never blocks; neither does an all-green PR
        doc = self.json("/api/v1/pr/5001/blocking?sha=" + self.w.prs[5001]["sha"])
        self.assertEqual((doc["blocked"], doc["blocking"]), (False, []))
        # the re-run of flaky-l4 on 5004 passed: its latest result no longer blocks
        doc = self.json("/api/v1/pr/5004/blocking?sha=" + self.w.prs[5004]["sha"])
        self.assertEqual(doc["blocking"], [])
        # another PR's sha: nothing of this PR
        doc = self.json("/api/v1/pr/5003/blocking?sha=" + sha)
        self.assertFalse(doc["blocked"])

    def test_blocking_needs_a_hex_sha(self):
        self.bad_request("/api/v1/pr/5012/blocking")
        self.bad_request("/api/v1/pr/5012/blocking?sha=")
        self.bad_request("/api/v1/pr/5012/blocking?sha=xyz1234")
        self.bad_request("/api/v1/pr/5012/blocking?sha=" + "a" * 65)
        self.assertEqual(self.w.relay.get("/crcr/pr/5012/blocking").status, 404)  # API only

    # ------------------------------------------------------------------ deliveries

    def test_deliveries_list_each_targets_dispatch_state(self):
        doc = self.json("/api/v1/deliveries")
        self.assertEqual(len(doc["deliveries"]), 14)  # 13 PRs + the push, newest first
        self.assertEqual(doc["deliveries"][0]["delivery_id"], self.w.push["delivery"])
        for d in doc["deliveries"]:
            dispatch = [o for o in d["outbox"] if o["kind"] == "dispatch"]
            self.assertEqual(len(dispatch), 11, d["delivery_id"])
            for o in d["outbox"]:
                self.assertNotIn("body", o)

    def test_deliveries_filter_by_state_repo_and_limit(self):
        dead = self.json("/api/v1/deliveries?state=dead")["deliveries"]
        self.assertEqual(len(dead), 14)
        retry = self.json("/api/v1/deliveries?state=queued")["deliveries"]
        self.assertEqual([d["pr_number"] for d in retry], [HF.RETRY_PR])
        row = [o for o in retry[0]["outbox"] if o["target"] == HF.OBS_B][0]
        self.assertEqual((row["state"], row["dispatch_state"], row["attempts"],
                          row["last_status"]), ("queued", "retrying", 1, 502))
        self.assertIsNotNone(row["next_attempt_at"])
        self.assertEqual(len(self.json("/api/v1/deliveries?state=queued&repo=l2org/observer-b")
                             ["deliveries"]), 1)
        self.assertEqual(self.json("/api/v1/deliveries?repo=nobody/nothing")["deliveries"], [])
        self.assertEqual(len(self.json("/api/v1/deliveries?state=dead&repo=l2org/observer-dead")
                             ["deliveries"]), 14)
        self.assertEqual(len(self.json("/api/v1/deliveries?limit=2")["deliveries"]), 2)
        for q in ("limit=0", "limit=201", "limit=x", "state=bogus", "state=%3Cb%3E",
                  "repo=..%2Fx", "repo=a/b/c", "repo=" + "a" * 50 + "/b"):
            self.bad_request("/api/v1/deliveries?" + q)

    def test_delivery_detail_shows_trimming_and_reasons_but_no_bodies(self):
        doc = self.json("/api/v1/deliveries/" + self.w.prs[HF.TRIMMED_PR]["delivery"])
        self.assertEqual(doc["pr_number"], HF.TRIMMED_PR)
        self.assertGreater(doc["payload_bytes"], 70000)
        rows = {o["target"]: o for o in doc["outbox"] if o["kind"] == "dispatch"}
        self.assertIn("payload.pull_request.body", rows[HF.CUDA]["note"])
        self.assertEqual(rows[HF.OBS_DEAD]["state"], "dead")
        self.assertIn("not installed", rows[HF.OBS_DEAD]["last_error"])
        for o in doc["outbox"]:
            self.assertNotIn("body", o)
            self.assertNotIn("payload", o)
        self.assertNotIn("payload", doc)
        self.assertEqual(self.json("/api/v1/deliveries/no-such-id", 404), {"detail":
                         "Not found: unknown delivery (or past retention)"})
        self.assertEqual(self.w.relay.get("/api/v1/deliveries/a%20b").status, 404)

    # ------------------------------------------------------------------ health

    def test_health_endpoint_and_cli_agree(self):
        api = self.json("/api/v1/health")
        rc, out, err = self.w.relay.cli(["health", "--format", "json"])
        self.assertEqual(rc, 0, err)
        cli = json.loads(out)
        self.assertEqual(cli["thresholds"], api["thresholds"])
        self.assertEqual(cli["thresholds"]["L4_success_pct"], 95)
        strip = lambda doc: [{k: v for k, v in e.items()} for e in doc["repos"]]
        self.assertEqual(strip(cli), strip(api))
        self.assertEqual(api["repos"], self.json("/api/v1/repos")["repos"])

    def test_health_cli_prints_a_markdown_table_for_an_allowlist_pr(self):
        rc, out, err = self.w.relay.cli(["health", "--format", "md", "--window", "7d"])
        self.assertEqual(rc, 0, err)
        self.assertIn("| Repo | Level | Runs | Success |", out)
        self.assertIn("| `l4org/flaky-l4` | L4 | 13 | 84.6% | 0 | 0 (0.0%) |", out)
        self.assertIn("**below_level** | L2 |", out)
        self.assertIn("| `l4org/cuda-mature` | L4 | 36 | 100.0% | 1 |", out)
        rc, out, err = self.w.relay.cli(["health", "--repo", "l3org/xpu-ci"])
        self.assertEqual(rc, 0, err)
        self.assertIn("l3org/xpu-ci", out)
        self.assertNotIn("l4org/cuda-mature", out)
        for bad in (["health", "--window", "0d"], ["health", "--format", "xml"],
                    ["health", "--bogus"]):
            rc, out, err = self.w.relay.cli(bad)
            self.assertEqual(rc, 2, bad)

    # ------------------------------------------------------------------ security

    def all_answers(self):
        paths = ["/crcr", "/crcr/deliveries", "/crcr/deliveries?limit=200", "/api/v1/repos",
                 "/api/v1/deliveries?limit=200", "/api/v1/health"]
        for repo in HF.ALL_REPOS:
            paths += ["/crcr/" + repo, "/crcr/" + repo + "?tab=nightly",
                      "/api/v1/repos/%s/runs" % repo, "/api/v1/repos/%s/runs?tab=nightly" % repo]
        for n, pr in self.w.prs.items():
            paths += ["/crcr/pr/%d" % n, "/api/v1/pr/%d" % n,
                      "/crcr/deliveries/" + pr["delivery"],
                      "/api/v1/deliveries/" + pr["delivery"]]
        for p in paths:
            r = self.w.relay.get(p)
            self.assertEqual(r.status, 200, p)
            yield p, r.body.decode("utf-8")

    def test_no_token_or_secret_reaches_any_page_or_answer(self):
        tokens = self.w.callback_tokens()
        self.assertGreater(len(tokens), 100)
        inst = self.w.installation_tokens()
        self.assertTrue(inst)
        secrets = tokens + inst + [R.DEFAULT_SECRET]
        for path, body in self.all_answers():
            self.assertNotIn("callback_token", body, path)
            self.assertNotIn("Bearer", body, path)
            self.assertNotIn("eyJ", body, path)  # no JWT (OIDC or App) of any kind
            for s in secrets:
                self.assertNotIn(s, body, path)

    def test_xss_values_are_data_in_json_and_escaped_in_html(self):
        doc = self.json("/api/v1/repos/l3org/xpu-ci/runs")
        self.assertIn(HF.XSS_JOB, [j["job"] for j in doc["jobs"]])
        arts = {c["artifact_url"] for r in doc["rows"] for c in r["cells"] if c}
        self.assertEqual(arts, {HF.XSS_ARTIFACT, None})  # the javascript: one was dropped
        for path in ("/crcr/l3org/xpu-ci", "/crcr/pr/5012"):
            html = self.get(path).body.decode("utf-8")
            self.assertNotIn("<script", html, path)
            self.assertNotIn("<img", html, path)
            self.assertIn("&lt;img src=x onerror=alert(1)&gt;build&lt;script&gt;alert(2)"
                          "&lt;/script&gt;", html, path)
            self.assertIn("href=\"https://example.com/&lt;script&gt;alert(&#39;xss&#39;)"
                          "&lt;/script&gt;\"", html, path)
            self.assertNotIn("href=\"javascript:", html, path)

    def test_pages_carry_security_headers_and_api_is_json(self):
        for path in ("/crcr", "/crcr/l4org/cuda-mature", "/crcr/pr/5012", "/crcr/deliveries",
                     "/crcr/deliveries/" + self.w.push["delivery"], "/crcr/nobody/nothing",
                     "/crcr/l4org/cuda-mature?page=0"):
            r = self.w.relay.get(path)
            self.assertEqual(r.headers.get("content-security-policy"), CSP, path)
            self.assertEqual(r.headers.get("x-content-type-options"), "nosniff", path)
            self.assertEqual(r.headers.get("content-type"), "text/html; charset=utf-8", path)
        css = self.get("/crcr/static/style.css")
        self.assertEqual(css.headers.get("content-type"), "text/css; charset=utf-8")
        self.assertIn(b".chip-success", css.body)
        self.assertEqual(self.w.relay.get("/crcr/static/app.js").status, 404)
        self.assertEqual(self.w.relay.get("/crcr/l4org/cuda-mature?page=0").status, 400)

    def test_hud_answers_get_only_and_leaves_the_admin_api_alone(self):
        self.assertEqual(self.w.relay.post("/api/v1/repos", b"{}").status, 405)
        self.assertEqual(self.w.relay.post("/crcr", b"").status, 405)
        self.assertEqual(self.w.relay.request("DELETE", "/api/v1/deliveries/x").status, 405)
        r = self.w.relay.get("/api/v1/admin/deliveries")
        self.assertIn(r.status, (401, 403, 404))
        self.assertEqual(self.w.relay.get("/api/v1/nothing").status, 404)
        self.assertEqual(self.w.relay.get("/api/v2/repos").status, 404)



class HudOwnerNamesTest(unittest.TestCase):
    """"pr", "deliveries" and "static" are HUD paths and valid GitHub owner names: an
    allowlisted repository of such an owner gets its page, other paths keep their meaning."""

    def test_allowlisted_repos_of_owners_named_like_hud_pages_get_their_page(self):
        relay = R.Relay(allowlist="L2:\n  - pr/7\n  - deliveries/ci\n  - static/site\n")
        self.addCleanup(relay.close)
        relay.start()

        def title(path):
            r = relay.get(path)
            self.assertEqual(r.status, 200, "%s: %r" % (path, r.body[:200]))
            body = r.body.decode()
            return body[body.index("<title>") + 7:body.index("</title>")]

        self.assertIn("pr/7", title("/crcr/pr/7"))
        self.assertIn("PR #8", title("/crcr/pr/8"))
        self.assertIn("deliveries/ci", title("/crcr/deliveries/ci"))
        self.assertIn("Deliveries", title("/crcr/deliveries"))
        self.assertIn("static/site", title("/crcr/static/site"))
        self.assertEqual(relay.get("/crcr/static/other").status, 404)
        self.assertEqual(relay.get("/crcr/static/style.css").status, 200)

if __name__ == "__main__":
    unittest.main()
