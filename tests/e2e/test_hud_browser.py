"""The HUD in a real browser: headless Debian chromium, driven over the DevTools protocol
(tests/support/browser.py), loads every page of a relay filled with realistic data
(tests/support/hud_fill.py) and checks what a reader sees.

For each page: no console message, no uncaught error, no CSP refusal and no dialog (an alert()
would prove a script ran); no <script> element and no on* attribute in the DOM; every link is
relative or https. Then the content that matters: rows and counts, chip classes and their
computed colours, links to downstream runs, pagination and tabs. SEC-10/11 (upstream reference
§3.13): an artifact_url of https://example.com/<script>alert('xss')</script> and a job name
with HTML render as text.

Screenshots (desktop 1280 px and phone 390 px) go to $CRCR_TEST_OUTPUT/hud, by default
<build dir of CRCR_BIN>/test-output/hud; their paths are printed. Needs CRCR_BIN and chromium
(`apt-get install -y chromium`; .ci/run installs it).
"""

import os
import re
import sys
import unittest

import browser as B
import hud_fill as HF

GREEN_BG = "rgb(218, 251, 225)"
RED_BG = "rgb(255, 235, 233)"
YELLOW_BG = "rgb(255, 248, 197)"
BLUE_BG = "rgb(221, 244, 255)"


def output_dir():
    d = os.environ.get("CRCR_TEST_OUTPUT")
    if not d:
        binary = os.environ.get("CRCR_BIN") or "."
        d = os.path.join(os.path.dirname(os.path.abspath(binary)), "test-output")
    return os.path.join(d, "hud")


class HudBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.w = HF.HudWorld().start()
        cls.addClassCleanup(cls.w.close)
        cls.b = B.Browser()
        cls.addClassCleanup(cls.b.close)
        cls.page = cls.b.new_page()
        cls.out = output_dir()
        os.makedirs(cls.out, exist_ok=True)
        cls.shots = []

    @classmethod
    def tearDownClass(cls):
        if cls.shots:
            print("\nHUD screenshots:\n  " + "\n  ".join(cls.shots), file=sys.stderr)
        super().tearDownClass()

    # ------------------------------------------------------------------ helpers

    def load(self, path, shot=None, phone=False):
        """Loads `path`, checks the page-independent rules and returns the parsed DOM."""
        url = self.w.relay.url + path
        if phone:
            self.page.goto(url, width=390, height=844, mobile=True)
        else:
            self.page.goto(url)
        self.assertEqual(self.page.problems, [], "console/CSP/dialog on %s" % path)
        dom = self.page.dom()
        root = B.parse_html(dom)
        self.assertEqual(root.find_all("script"), [], path)
        for n in root.iter():
            for k in n.attrs:
                self.assertFalse(k.lower().startswith("on"), "%s: %r" % (path, n))
            if n.tag == "a" and "href" in n.attrs:
                href = n.attrs["href"]
                self.assertTrue(href.startswith("/") or href.startswith("https://"),
                                "%s: link %r" % (path, href))
        self.assertEqual(self.page.eval("document.scripts.length"), 0)
        if shot:
            name = "%s-%s.png" % (shot, "phone" if phone else "desktop")
            self.shots.append(self.page.screenshot(os.path.join(self.out, name)))
            self.assertEqual(self.page.problems, [], path)
        return root

    def bg(self, selector):
        return self.page.eval("getComputedStyle(document.querySelector(%r)).backgroundColor"
                              % selector)

    def no_overflow(self, path):
        """At phone width nothing but the table wrappers scrolls sideways."""
        self.load(path, phone=True)
        width = self.page.eval("document.documentElement.scrollWidth")
        self.assertLessEqual(width, 390, path)

    # ------------------------------------------------------------------ tests

    def test_console_check_catches_errors_and_dialogs(self):
        """The detector the other tests rely on does fail when a page misbehaves."""
        self.page.goto("data:text/html,<p>x<script>console.error('probe');alert(1)</script>")
        joined = " | ".join(self.page.problems)
        self.assertIn("console.error: probe", joined)
        self.assertIn("dialog alert: 1", joined)

    def test_overview_groups_repos_by_level_with_health(self):
        root = self.load("/crcr", shot="overview")
        self.load("/crcr", shot="overview", phone=True)
        self.load("/crcr")
        counts = {}
        for lvl in ("L4", "L3", "L2", "L1"):
            sec = root.find("section", id="level-" + lvl)
            self.assertIsNotNone(sec, lvl)
            counts[lvl] = [tr.attrs["data-repo"] for tr in sec.find_all("tr")
                           if "data-repo" in tr.attrs]
        self.assertEqual(counts, {"L4": [HF.CUDA, HF.ROCM, HF.FLAKY],
                                  "L3": [HF.NPU, HF.XPU, HF.XPU_SLOW],
                                  "L2": [HF.OBS_A, HF.OBS_B, HF.OBS_DEAD],
                                  "L1": [HF.L1_A, HF.L1_B]})
        row = {tr.attrs["data-repo"]: tr for tr in root.find_all("tr")
               if "data-repo" in tr.attrs}
        self.assertEqual(row[HF.CUDA].find("td", cls="runs").text(), "36")
        self.assertEqual(row[HF.CUDA].find("td", cls="success").text(), "100.0%")
        self.assertEqual(row[HF.ROCM].find("td", cls="timed-out").text(), "4.3%")
        health = {r: tr.attrs["data-health"] for r, tr in row.items()}
        self.assertEqual(health[HF.CUDA], "healthy")
        self.assertEqual(health[HF.ROCM], "at_risk")
        self.assertEqual(health[HF.FLAKY], "below_level")
        self.assertEqual(health[HF.L1_A], "not_measured")
        badge = row[HF.FLAKY].find("span", cls="health-below_level")
        self.assertEqual(badge.text(), "below level")
        self.assertIn("L3 threshold 90%", badge.attrs["title"])
        self.assertIn("recommend L2", row[HF.FLAKY].text())
        link = row[HF.CUDA].find("a")
        self.assertEqual(link.attrs["href"], "/crcr/l4org/cuda-mature")
        # relay health
        self.assertEqual(root.find(id="relay-dead").find("a").text(), "14")
        self.assertEqual(root.find(id="relay-backlog").find("div", cls="v").text(), "1")
        self.assertIn("11 repos", root.find(id="relay-allowlist").text())
        self.assertIn("allowlist.yml", root.find(id="relay-allowlist").text())
        self.assertNotEqual(root.find(id="relay-webhook").find("div", cls="v").text(), "never")
        self.assertEqual(self.bg(".health-healthy"), GREEN_BG)
        self.assertEqual(self.bg(".health-below_level"), RED_BG)
        self.assertEqual(self.bg(".health-at_risk"), YELLOW_BG)

    def test_repo_matrix_shows_chips_coloured_by_result(self):
        root = self.load("/crcr/l4org/cuda-mature", shot="repo")
        self.load("/crcr/l4org/cuda-mature", shot="repo", phone=True)
        root = self.load("/crcr/l4org/cuda-mature")
        table = root.find("table", cls="matrix")
        heads = [th.text() for th in table.find_all("th", cls="job")]
        self.assertEqual(heads, ["cuda-ci / build", "cuda-ci / test (default, 1, 2)",
                                 "cuda-ci / test (default, 2, 2)"])
        rows = table.find("tbody").find_all("tr")
        self.assertEqual(len(rows), 12)
        self.assertTrue(rows[0].find("td", cls="row").text().startswith("#5012"))
        chips = table.find_all(cls="chip")
        self.assertEqual(len(chips), 36)
        self.assertEqual(len(table.find_all(cls="chip-success")), 35)
        cancelled = rows[0].find_all("td")[2].find(cls="chip")
        self.assertIn("chip-cancelled", cancelled.classes())
        self.assertEqual(cancelled.text(), "cancelled")
        for c in chips:
            self.assertEqual(c.tag, "a")
            self.assertTrue(re.match(r"^https://github\.com/l4org/cuda-mature/actions/runs/\d+$",
                                     c.attrs["href"]), c.attrs["href"])
        self.assertEqual(self.bg(".chip-success"), GREEN_BG)
        self.assertEqual(self.bg(".chip-cancelled"), YELLOW_BG)
        self.assertEqual(len(root.find_all("svg")), 2)
        self.assertGreaterEqual(len(root.find("svg", cls="rate").find_all("circle")), 1)
        self.assertIn("Page 1 of 1", root.find("nav", cls="pager").text())
        self.assertEqual(root.find(id="stat-runs").find("div", cls="v").text(), "36")

        root = self.load("/crcr/l4org/rocm-mature")
        first = root.find("table", cls="matrix").find("tbody").find("tr")
        self.assertEqual([c.classes()[1] for c in first.find_all(cls="chip")],
                         ["chip-running", "chip-timed_out"])
        self.assertEqual(self.bg(".chip-running"), BLUE_BG)
        self.assertEqual(self.bg(".chip-timed_out"), YELLOW_BG)

        root = self.load("/crcr/l4org/flaky-l4")
        self.assertEqual(len(root.find_all(cls="chip-failure")), 1)  # 5004's re-run passed
        self.assertEqual(self.bg(".chip-failure"), RED_BG)
        rerun = [a for a in root.find_all(cls="chip") if "\u00d7" in a.text()]
        self.assertEqual([a.text() for a in rerun], ["success \u00d72"])

    def test_nightly_tab_and_pagination_links(self):
        root = self.load("/crcr/l2org/observer-b?tab=nightly", shot="nightly")
        tabs = root.find("nav", cls="tabs").find_all("a")
        self.assertEqual([t.text() for t in tabs if "active" in t.classes()],
                         ["Nightly / periodic"])
        rows = root.find("table", cls="matrix").find("tbody").find_all("tr")
        self.assertEqual(len(rows), 5)
        self.assertEqual(len(root.find_all(cls="chip-failure")), 1)
        root = self.load("/crcr/l2org/observer-b")
        self.assertIn("No runs reported yet", root.text())
        root = self.load("/crcr/l4org/cuda-mature?page=3")
        self.assertIn("No rows on this page", root.text())
        self.assertEqual(root.find("a", rel="prev").attrs["href"], "/crcr/l4org/cuda-mature?page=2")
        self.page.goto(self.w.relay.url + "/crcr/l4org/cuda-mature?page=1001")
        self.assertIn("page: expected an integer", self.page.eval("document.body.innerText"))

    def test_sec10_11_html_in_job_names_and_artifact_urls_renders_as_text(self):
        for path, shot in (("/crcr/l3org/xpu-ci", "xss-repo"), ("/crcr/pr/5012", None)):
            root = self.load(path, shot=shot)
            self.assertEqual(root.find_all("img"), [], path)
            text = root.text()
            self.assertIn(HF.XSS_JOB, text, path)
            arts = [a for a in root.find_all("a") if a.attrs.get("href") == HF.XSS_ARTIFACT]
            self.assertTrue(arts, path)
            self.assertTrue(all(a.text() == "artifacts" for a in arts))
            self.assertFalse([a for a in root.find_all("a")
                              if a.attrs.get("href", "").startswith("javascript")], path)
            # the browser agrees: the text node holds the markup, no element was made from it
            self.assertEqual(self.page.eval("document.querySelectorAll('img,script,iframe')"
                                            ".length"), 0)
        root = self.load("/crcr/pr/5012")
        self.assertNotIn(HF.JS_ARTIFACT, root.text())  # dropped at parse time, never stored

    def test_pr_page_lists_results_per_head_sha_with_check_runs(self):
        root = self.load("/crcr/pr/5012", shot="pr")
        self.load("/crcr/pr/5012", shot="pr", phone=True)
        root = self.load("/crcr/pr/5012")
        secs = root.find_all("section", cls="sha")
        self.assertEqual([s.attrs["data-sha"] for s in secs], [self.w.prs[5012]["sha"]])
        results = secs[0].find("table", cls="results").find("tbody").find_all("tr")
        self.assertEqual(len(results), 12)
        repos = sorted({tr.attrs["data-repo"] for tr in results})
        self.assertEqual(repos, sorted([HF.CUDA, HF.ROCM, HF.FLAKY, HF.NPU, HF.XPU, HF.XPU_SLOW,
                                        HF.OBS_A]))
        checks = secs[0].find("table", cls="checks").find("tbody").find_all("tr")
        self.assertEqual(len(checks), 11)
        self.assertTrue(all(tr.find("td").text().startswith("crcr/l4org/") for tr in checks))
        dead = secs[0].find("li", data_target=HF.OBS_DEAD)
        self.assertIn("state-dead", dead.classes())
        self.assertIn("not installed", dead.text())
        gh = [a for a in root.find_all("a") if a.text() == "Open on GitHub"]
        self.assertEqual(gh[0].attrs["href"], "https://github.com/pytorch/pytorch/pull/5012")

    def test_deliveries_show_each_targets_dispatch_state(self):
        root = self.load("/crcr/deliveries", shot="deliveries")
        self.load("/crcr/deliveries", shot="deliveries", phone=True)
        root = self.load("/crcr/deliveries")
        rows = [tr for tr in root.find_all("tr") if "data-delivery" in tr.attrs]
        self.assertEqual(len(rows), 14)
        self.assertEqual(len(root.find_all("li", cls="state-dead")), 14)
        retry = root.find_all("li", cls="state-retrying")
        self.assertEqual([li.attrs["data-target"] for li in retry], [HF.OBS_B])
        self.assertIn("next in", retry[0].text())
        trimmed = [tr for tr in rows
                   if tr.attrs["data-delivery"] == self.w.prs[HF.TRIMMED_PR]["delivery"]][0]
        self.assertEqual(len([li for li in trimmed.find_all("li") if "trimmed" in li.text()]),
                         11)
        self.assertIn("payload.pull_request.body",
                      trimmed.find("li", data_target=HF.CUDA).attrs["title"])
        self.assertEqual(self.bg("li.state-dead"), RED_BG)
        self.assertEqual(self.bg("li.state-retrying"), YELLOW_BG)
        # the filter form is a plain GET form
        root = self.load("/crcr/deliveries?state=queued")
        self.assertEqual(len([tr for tr in root.find_all("tr") if "data-delivery" in tr.attrs]),
                         1)
        self.assertEqual(root.find("option", value="queued").attrs.get("selected"), "")

    def test_delivery_page_shows_trimming_notes_reasons_and_check_runs(self):
        path = "/crcr/deliveries/" + self.w.prs[HF.TRIMMED_PR]["delivery"]
        root = self.load(path, shot="delivery")
        rows = root.find("table", cls="outbox").find("tbody").find_all("tr")
        dispatch = [tr for tr in rows if tr.attrs.get("data-kind") == "dispatch"]
        self.assertEqual(len(dispatch), 11)
        for tr in dispatch:
            self.assertIn("trimmed: payload.pull_request.body", tr.text())
        dead = [tr for tr in dispatch if tr.attrs["data-target"] == HF.OBS_DEAD][0]
        self.assertIn("state-dead", dead.find(cls="state").classes())
        self.assertIn("404", dead.text())
        checks = [tr for tr in rows if tr.attrs.get("data-kind") == "check_run"]
        self.assertTrue(checks)
        self.assertTrue(all("crcr/l4org/" in tr.text() for tr in checks))
        self.assertIn("not shown", root.find(id="d-payload").text())

    def test_pages_fit_a_phone_screen(self):
        for path in ("/crcr", "/crcr/l4org/cuda-mature", "/crcr/pr/5012", "/crcr/deliveries",
                     "/crcr/deliveries/" + self.w.push["delivery"]):
            self.no_overflow(path)


if __name__ == "__main__":
    unittest.main()
