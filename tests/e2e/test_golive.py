"""End-to-end tests of the go-live points of issue 28 on the real binary.

- `crcr config --check` runs what `crcr serve` checks and lists every problem at once (exit 2):
  the packaged deploy/debian/crcr.env, untouched, names both missing settings; a complete file
  exits 0. `crcr config` alone says that it checked nothing.
- `crcr webhook send` tells the event from the payload or the fixture's name
  (issues.opened.json is an `issues` event, ignored by the relay, never a `pull_request`;
  ping.json is a `ping`) and takes the relay's --config (secret and address).
- A configuration file that exists but cannot be read is not "no configuration file".
- `crcr serve --confg x` names the bad option.
- `crcr trust list` and `crcr deliveries list --status dead` say so when there is nothing.
- A delivery's status follows its outbox rows: queued, then done, partly_failed or dead.
- `crcr deliveries show ID` prints the request bodies as indented JSON.
- No log lines on a command's stderr unless CRCR_LOG asks (`redeliver --repo`).

Needs CRCR_BIN; see tests/support/README.md. Run with CRCR_BIN pointing at an older binary to
see each of these fail there.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import relay as R
from test_dispatch import TARGETS, GitHubRelayMixin, wait_until
from test_operator import clean_env, run

PACKAGED_ENV = R.REPO_ROOT / "deploy" / "debian" / "crcr.env"
WEBHOOKS = os.path.join(str(R.DATA_DIR), "webhooks")


def tmpdir(test):
    d = tempfile.mkdtemp(prefix="crcr-golive-")
    test.addCleanup(shutil.rmtree, d, True)
    return d


class ConfigCheckTest(unittest.TestCase):
    def test_the_untouched_packaged_file_names_every_missing_setting(self):
        d = tmpdir(self)
        rc, out, err = run(["config", "--check", "--config", str(PACKAGED_ENV)], d, clean_env())
        self.assertEqual(rc, 2, out + err)
        self.assertIn("crcr: GITHUB_APP_SECRET: required", err)
        self.assertIn("crcr: ALLOWLIST_FILE or ALLOWLIST_URL: one of them is required", err)
        self.assertIn("crcr serve would not start", err)
        self.assertEqual(out, "")

    def test_every_problem_at_once_and_a_complete_file_passes(self):
        d = tmpdir(self)
        allowlist = os.path.join(d, "allowlist.yml")
        with open(allowlist, "w", encoding="utf-8") as f:
            f.write(R.DEFAULT_ALLOWLIST)
        bad = os.path.join(d, "bad.env")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("CRCR_LISTEN=127.0.0.1:http\nGITHUB_APP_SECRETT=x\nCRCR_MAX_BODY=big\n"
                    "ALLOWLIST_FILE=%s\n" % os.path.join(d, "missing.yml"))
        rc, out, err = run(["config", "--check", "--config", bad], d, clean_env())
        self.assertEqual(rc, 2, out + err)
        for want in ("unknown key 'GITHUB_APP_SECRETT'", "CRCR_LISTEN: port must be a number",
                     "CRCR_MAX_BODY: not a positive integer", "GITHUB_APP_SECRET: required",
                     "ALLOWLIST_FILE: ", "missing.yml", "5 problems"):
            self.assertIn(want, err)
        # `crcr serve` refuses the same file, at its first problem.
        rc, _, serve_err = run(["serve", "--config", bad], d, clean_env())
        self.assertEqual(rc, 2, serve_err)
        self.assertIn("unknown key 'GITHUB_APP_SECRETT'", serve_err)

        good = os.path.join(d, "good.env")
        with open(good, "w", encoding="utf-8") as f:
            f.write("CRCR_LISTEN=127.0.0.1:8000\nCRCR_STORE=sqlite:%s/crcr.db\n"
                    "GITHUB_APP_SECRET=a-webhook-secret\nALLOWLIST_FILE=%s\n" % (d, allowlist))
        rc, out, err = run(["config", "--check", "--config", good], d, clean_env())
        self.assertEqual(rc, 0, out + err)
        self.assertIn("complete, crcr serve would start with it", out)
        self.assertIn("dry-run", out)
        self.assertIn("(%d repos)" % len(TARGETS), out)
        self.assertNotIn("a-webhook-secret", out + err)
        self.assertEqual(sorted(os.listdir(d)), ["allowlist.yml", "bad.env", "good.env"],
                         "the check created a store")

    def test_config_without_check_says_it_checked_nothing(self):
        d = tmpdir(self)
        rc, out, err = run(["config", "--config", str(PACKAGED_ENV)], d, clean_env())
        self.assertEqual(rc, 0, out + err)
        self.assertIn("GITHUB_APP_SECRET=(unset)", out)
        self.assertIn("not checked", err)
        self.assertIn("crcr config --check", err)


class WebhookSendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay()
        cls.relay.start()
        cls.addClassCleanup(cls.relay.close)

    def send(self, name, *extra, env=None):
        return self.relay.cli(["webhook", "send", os.path.join(WEBHOOKS, name),
                               "--url", self.relay.url + "/github/webhook"] + list(extra),
                              env=env)

    def test_issues_opened_is_sent_as_issues_and_ignored(self):
        rc, out, err = self.send("issues.opened.json")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("event issues", err)
        self.assertEqual(out.splitlines()[0], "HTTP 200", out)
        self.assertEqual(json.loads(out.splitlines()[1]), {"ignored": True})

    def test_ping_without_event_is_a_ping(self):
        rc, out, err = self.send("ping.json")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("event ping", err)
        self.assertEqual(json.loads(out.splitlines()[1]), {"ok": True, "pong": True})

    def test_a_payload_that_names_no_event_is_not_sent(self):
        d = tmpdir(self)
        path = os.path.join(d, "payload.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"action": "opened"}')
        rc, out, err = self.relay.cli(["webhook", "send", path, "--url", self.relay.url])
        self.assertEqual(rc, 2, out + err)
        self.assertIn("give --event", err)
        self.assertEqual(out, "")

    def test_config_gives_the_secret_and_the_address(self):
        d = tmpdir(self)
        conf = os.path.join(d, "relay.env")
        with open(conf, "w", encoding="utf-8") as f:
            f.write("CRCR_LISTEN=127.0.0.1:%d\nGITHUB_APP_SECRET=%s\n"
                    % (self.relay.port, self.relay.secret))
        rc, out, err = run(["webhook", "send", os.path.join(WEBHOOKS, "pull_request.opened.json"),
                            "--config", conf], d, clean_env())
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out.splitlines()[0], "HTTP 202", out)
        self.assertEqual(sorted(json.loads(out.splitlines()[1])["queued"]), TARGETS)


class ConfigFileTest(unittest.TestCase):
    def test_an_unreadable_file_is_not_a_missing_one(self):
        d = tmpdir(self)
        private = os.path.join(d, "etc-crcr")
        os.mkdir(private)
        conf = os.path.join(private, "crcr.env")
        with open(conf, "w", encoding="utf-8") as f:
            f.write("CRCR_STORE=sqlite:%s/crcr.db\n" % d)
        os.chmod(private, 0o700)  # as /etc/crcr is to everyone but root and group crcr
        os.chmod(d, 0o755)
        kw = {}
        if os.geteuid() == 0:  # root reads anything: run as nobody
            kw = {"user": 65534, "group": 65534, "extra_groups": []}
        else:
            os.chmod(private, 0)
            self.addCleanup(os.chmod, private, 0o700)
        env = clean_env(CRCR_DEFAULT_CONFIG=conf)
        p = subprocess.run([R.crcr_bin(), "deliveries", "list"], cwd=d, env=env,
                           capture_output=True, text=True, timeout=30, **kw)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("%s: cannot read: Permission denied" % conf, p.stderr)
        self.assertIn("may not read it", p.stderr)
        self.assertNotIn("no configuration file was read", p.stderr)
        # A missing one still says so.
        env = clean_env(CRCR_DEFAULT_CONFIG=os.path.join(d, "absent.env"))
        rc, out, err = run(["deliveries", "list"], d, env)
        self.assertEqual(rc, 2, out + err)
        self.assertIn("no configuration file was read", err)

    def test_serve_names_a_bad_option(self):
        d = tmpdir(self)
        rc, out, err = run(["serve", "--confg", "x"], d, clean_env())
        self.assertEqual(rc, 2, out + err)
        self.assertIn("unknown option '--confg'", err)
        rc, out, err = run(["serve", "--config"], d, clean_env())
        self.assertEqual(rc, 2, out + err)
        self.assertIn("--config needs a value", err)


class EmptyListsTest(unittest.TestCase):
    def test_empty_listings_say_so(self):
        relay = R.Relay()
        self.addCleanup(relay.close)
        relay.start()
        quiet = {"CRCR_LOG": None}
        rc, out, err = relay.cli(["trust", "list"], env=quiet)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out, "")
        self.assertIn("no repository identity is pinned yet", err)
        rc, out, err = relay.cli(["deliveries", "list", "--status", "dead"], env=quiet)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out, "")
        self.assertIn("no delivery with an outbox row in state dead", err)
        rc, out, err = relay.cli(["deliveries", "list", "--status", "dead", "--format", "json"],
                                 env=quiet)
        self.assertEqual((rc, out.strip(), err), (0, "[]", ""))


class DeliveryStatusTest(GitHubRelayMixin, unittest.TestCase):
    def status(self, delivery):
        return self.show(delivery)["delivery"]["status"]

    def test_status_follows_the_rows_to_partly_failed_then_done(self):
        self.start_pair(installed_repos=[t for t in TARGETS if t != "org2/repo2"])
        r = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        self.wait_rows(r.delivery, lambda rows: all(row["state"] in ("sent", "dead")
                                                    for row in rows.values()),
                       what="every dispatch finished")
        self.assertEqual(self.status(r.delivery), "partly_failed")
        rc, out, err = self.relay.cli(["deliveries", "list"])
        self.assertEqual(rc, 0, err)
        line = [ln for ln in out.splitlines() if r.delivery in ln][0]
        self.assertTrue(line.endswith(" partly_failed"), line)
        self.gh.install("org2/repo2")
        rc, out, err = self.relay.cli(["deliveries", "redeliver", r.delivery,
                                       "--repo", "org2/repo2"])
        self.assertEqual(rc, 0, out + err)
        self.wait_rows(r.delivery, lambda rows: rows["org2/repo2"]["state"] == "sent",
                       what="org2/repo2 sent after redeliver")
        self.assertEqual(self.status(r.delivery), "done")

    def test_every_target_dead_is_dead(self):
        self.start_pair(installed_repos=[])
        r = self.post_ok("push", R.load_example("push"))
        self.wait_rows(r.delivery, lambda rows: all(row["state"] == "dead"
                                                    for row in rows.values()),
                       what="every dispatch dead")
        self.assertEqual(self.status(r.delivery), "dead")


class ShowAndLogTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay()
        cls.relay.start()
        cls.addClassCleanup(cls.relay.close)
        r = cls.relay.webhook("pull_request", R.load_example("pull_request.opened"))
        assert r.status == 202, r
        cls.delivery = r.delivery

    def show_json(self):
        rc, out, err = self.relay.cli(["deliveries", "show", self.delivery, "--format", "json"])
        self.assertEqual(rc, 0, err)
        return json.loads(out)

    def wait_done(self):
        ok = wait_until(lambda: self.show_json()["delivery"]["status"] == "done", 20.0)
        doc = self.show_json()
        self.assertTrue(ok, "the dry-run delivery never became done: status %s, rows %s"
                        % (doc["delivery"]["status"], [j["state"] for j in doc["outbox"]]))
        return doc

    def test_dry_run_delivery_is_done_and_show_prints_bodies_readably(self):
        doc = self.wait_done()
        self.assertTrue(all(j["state"] == "dry_run" for j in doc["outbox"]))
        rc, out, err = self.relay.cli(["deliveries", "show", self.delivery],
                                      env={"CRCR_LOG": None})
        self.assertEqual(rc, 0, err)
        self.assertIn("status=done", out.splitlines()[0])
        self.assertEqual(out.count("request body ("), len(TARGETS))
        # The envelope, one member per line, indented under its row: not an escaped string.
        self.assertIn('\n      "event_type": "pull_request",\n', out)
        self.assertIn('\n      "client_payload": {\n', out)
        self.assertIn('\n        "delivery_id": "%s",\n' % self.delivery, out)
        self.assertNotIn('\\"', out.split("request body", 1)[1][:400])
        rc, out, err = self.relay.cli(["deliveries", "show", self.delivery, "--no-bodies"])
        self.assertEqual(rc, 0, err)
        self.assertNotIn("request body", out)

    def test_redeliver_repo_prints_no_log_line_unless_asked(self):
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "org1/repo1"], env={"CRCR_LOG": None})
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(err, "")
        self.assertIn("re-queued 1 dispatch", out)
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "org1/repo1"], env={"CRCR_LOG": "info"})
        self.assertEqual(rc, 0, out + err)
        self.assertIn("event=allowlist.loaded", err)


if __name__ == "__main__":
    unittest.main()
