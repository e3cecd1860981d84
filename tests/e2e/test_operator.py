"""End-to-end operator safety of the real binary (issue 14 parts 2, 3 and 7).

- No store, no guess: `crcr deliveries`, `health`, `trust` and `store backup` run away from the
  service's directory without --config used to create an empty ./crcr.db (0644) and print
  nothing with exit 0. Now they exit 2 naming the absolute path and --config, and create nothing.
- The default configuration: without --config they read the packaged /etc/crcr/crcr.env when it
  exists (CRCR_DEFAULT_CONFIG names another file, here a temp one; empty turns it off).
- `redeliver --repo` refuses a repository that is not on the allowlist in force (exit 2, nothing
  re-queued) unless --force, locally and through --url (the admin API's force=1).
- Every command group without a verb prints its usage; unknown options are named.
- Listening: a port in use is refused with the reason ("Address already in use"), and a second
  relay can never bind the port of a running one (no SO_REUSEPORT).
- Allowlist strictness: `crcr allowlist check` names every unknown top-level key at FILE:LINE:COL;
  a reload with one, or one that would empty a non-empty list, is refused with the previous list
  kept, the reason on /readyz and crcr_allowlist_refresh_failing 1.
- Backup and restore: `crcr store backup FILE` while the relay serves gives a 0600 copy with every
  committed delivery; the documented restore (stop, drop -wal/-shm, copy, start) brings exactly
  that back. For PostgreSQL it prints the pg_dump command (password hidden) and exits 2.
- Upgrade: tests/data/stores/schema-v1.db, written by the last schema-1 crcr
  (tests/data/stores/make-schema-v1.py), is opened by this binary: every row of every table is
  still there (run ids now as text: version 4) and the schema version is now current. A store newer than the binary is refused
  with a clear message by the CLI and by `crcr serve` (exit 2).

Needs CRCR_BIN; see tests/support/README.md. SQLite-only tests are skipped when the relay's store
is PostgreSQL (CRCR_E2E_PG_URI).
"""

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import tempfile
import unittest

import relay as R
from waiting import wait_until

ADMIN_TOKEN = "admin-token-for-operator-e2e-0123456789"
V1_FIXTURE = os.path.join(str(R.DATA_DIR), "stores", "schema-v1.db")
V1_TABLES = ("schema_version", "deliveries", "outbox", "kv", "runs", "labels_wanted",
             "rate_hits", "rate_counts", "callback_rejections")
CURRENT_SCHEMA = 9  # src/store/store.h CRCR_SCHEMA_VERSION


def clean_env(**extra):
    """The environment of a bare CLI run: no crcr variable, no default configuration file."""
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "TZ", "TMPDIR") or k.startswith(("LC_", "ASAN_",
                                                                            "UBSAN_", "LSAN_"))}
    env["CRCR_DEFAULT_CONFIG"] = ""
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run(args, cwd, env, timeout=30.0):
    p = subprocess.run([R.crcr_bin()] + list(args), cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def table_rows(path):
    """Every row of every schema-1 table, in a stable order."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return {t: sorted(con.execute("SELECT * FROM %s" % t).fetchall(), key=repr)
                for t in V1_TABLES}
    finally:
        con.close()


def schema_version(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
    finally:
        con.close()


class TempDirMixin:
    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="crcr-operator-")
        self.addCleanup(shutil.rmtree, d, True)
        return d


# ------------------------------------------------------------------------ no store, no guess


class NoStoreTest(TempDirMixin, unittest.TestCase):
    """Issue 14: a typo silently read the wrong (new, empty) store."""

    COMMANDS = (["deliveries", "list"],
                ["deliveries", "show", "72d3162e-cc78-11e3-81ab-4c9367dc0958"],
                ["deliveries", "redeliver", "72d3162e-cc78-11e3-81ab-4c9367dc0958"],
                ["health"],
                ["trust", "list"],
                ["store", "backup", "copy.db"])

    def test_commands_that_read_the_store_never_create_one(self):
        d = self.tmpdir()
        for args in self.COMMANDS:
            with self.subTest(args=args):
                rc, out, err = run(args, d, clean_env())
                self.assertEqual(rc, 2, out + err)
                self.assertIn("no store at crcr.db (in %s)" % os.path.realpath(d),
                              err.replace(d, os.path.realpath(d)))
                self.assertIn("--config FILE", err)
                self.assertIn("no configuration file was read", err)
                self.assertEqual(os.listdir(d), [], "the command created files")

    def test_a_mistyped_store_path_is_named_and_not_created(self):
        d = self.tmpdir()
        path = os.path.join(d, "var", "lib", "crcr", "crcr.db")
        os.makedirs(os.path.dirname(path))
        for args in self.COMMANDS:
            with self.subTest(args=args):
                rc, out, err = run(args, d, clean_env(CRCR_STORE="sqlite:" + path))
                self.assertEqual(rc, 2, out + err)
                self.assertIn("no store at %s" % path, err)
                self.assertFalse(os.path.exists(path))
                self.assertFalse(os.path.exists(os.path.join(d, "copy.db")))


# ------------------------------------------------------------------------ a relay to work on


class RelayTest(TempDirMixin, unittest.TestCase):
    """Tests over one dry-run relay with the admin API on."""

    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay(env={"CRCR_ADMIN_TOKEN": ADMIN_TOKEN})
        cls.relay.start()
        cls.addClassCleanup(cls.relay.close)
        r = cls.relay.webhook("pull_request", R.load_example("pull_request.opened"))
        assert r.status == 202, r
        cls.delivery = r.delivery

    def setUp(self):
        self.assertTrue(self.relay.running(), self.relay.log_tail())

    def targets(self, delivery):
        rc, out, err = self.relay.cli(["deliveries", "show", delivery, "--format", "json"])
        self.assertEqual(rc, 0, err)
        return sorted(j["target"] for j in json.loads(out)["outbox"] if j["kind"] == "dispatch")

    # -- default configuration file

    def test_the_default_configuration_file_is_read_without_config(self):
        d = self.tmpdir()
        conf = os.path.join(d, "crcr.env")
        with open(conf, "w", encoding="utf-8") as f:
            f.write("CRCR_STORE=%s\nGITHUB_APP_SECRET=x\n" % self.relay.store_uri)
        # No CRCR_STORE in the environment, run from elsewhere: the file names the store.
        rc, out, err = run(["deliveries", "list"], d, clean_env(CRCR_DEFAULT_CONFIG=conf))
        self.assertEqual(rc, 0, err)
        self.assertIn(self.delivery, out)
        rc, out, err = run(["trust", "list"], d, clean_env(CRCR_DEFAULT_CONFIG=conf))
        self.assertEqual(rc, 0, err)
        # The environment still overrides the file.
        missing = os.path.join(d, "other.db")
        rc, out, err = run(["deliveries", "list"], d,
                           clean_env(CRCR_DEFAULT_CONFIG=conf, CRCR_STORE="sqlite:" + missing))
        self.assertEqual(rc, 2, out + err)
        self.assertIn("no store at %s" % missing, err)
        self.assertIn("the configuration read was %s" % conf, err)
        # --config wins over the default file.
        other = os.path.join(d, "other.env")
        with open(other, "w", encoding="utf-8") as f:
            f.write("CRCR_STORE=sqlite:%s\n" % missing)
        rc, out, err = run(["deliveries", "list", "--config", other], d,
                           clean_env(CRCR_DEFAULT_CONFIG=conf))
        self.assertEqual(rc, 2, out + err)
        self.assertIn("the configuration read was %s" % other, err)
        # A default file that does not exist is no file at all.
        rc, out, err = run(["deliveries", "list"], d,
                           clean_env(CRCR_DEFAULT_CONFIG=os.path.join(d, "absent.env")))
        self.assertEqual(rc, 2, out + err)
        self.assertIn("no configuration file was read", err)
        self.assertFalse(os.path.exists(os.path.join(d, "crcr.db")))

    # -- redeliver --repo and the allowlist

    def test_redeliver_to_a_repo_off_the_allowlist_needs_force(self):
        before = self.targets(self.delivery)
        self.assertNotIn("not/listed", before)
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "not/listed"])
        self.assertEqual(rc, 2, out + err)
        self.assertIn("not/listed: not on the allowlist in force", err)
        self.assertIn("--force", err)
        self.assertEqual(out, "")
        self.assertEqual(self.targets(self.delivery), before)
        # A listed repo, in another case, needs nothing more.
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "ORG1/repo1"])
        self.assertEqual(rc, 0, out + err)
        # --force sends it anyway.
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "not/listed", "--force"])
        self.assertEqual(rc, 0, out + err)
        self.assertIn("re-queued 1 dispatch of %s" % self.delivery, out)
        self.assertIn("not/listed", self.targets(self.delivery))

    def test_redeliver_through_the_admin_api_needs_force_too(self):
        url = ["--url", self.relay.url]
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "not/remote"] + url)
        self.assertEqual(rc, 2, out + err)
        self.assertIn("not on the allowlist in force", err)
        self.assertNotIn("not/remote", self.targets(self.delivery))
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "not/remote", "--force"] + url)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("not/remote", self.targets(self.delivery))

    def test_redeliver_without_an_allowlist_to_check_needs_force(self):
        rc, out, err = self.relay.cli(["deliveries", "redeliver", self.delivery, "--repo",
                                       "org1/repo1"],
                                      env={"ALLOWLIST_FILE": None, "ALLOWLIST_URL": None})
        self.assertEqual(rc, 2, out + err)
        self.assertIn("cannot check it against the allowlist", err)

    # -- usage

    def test_command_groups_without_a_verb_print_their_usage(self):
        d = self.tmpdir()
        for group in ("allowlist", "deliveries", "webhook", "trust", "store"):
            with self.subTest(group=group):
                rc, out, err = run([group], d, clean_env())
                self.assertEqual(rc, 2, out + err)
                self.assertIn("usage: crcr %s" % group, err)
                self.assertNotIn("unknown command", err)
        self.assertEqual(os.listdir(d), [])

    def test_unknown_options_and_verbs_are_named(self):
        d = self.tmpdir()
        cases = (
            (["deliveries", "list", "--bogus"], "unknown option '--bogus'"),
            (["deliveries", "lsit"], "unknown verb 'lsit'"),
            (["deliveries", "list", "--limit", "0"], "--limit: expected a number"),
            (["deliveries", "show"], "show needs a delivery ID"),
            (["deliveries", "list", "--status"], "--status needs a value"),
            (["deliveries", "list", "--force"], "--force goes with redeliver --repo R"),
            (["health", "--bogus", "x"], "unknown option '--bogus'"),
            (["health", "--window"], "--window needs a value"),
            (["trust", "list", "--bogus"], "unknown option '--bogus'"),
            (["trust", "list", "--config"], "--config needs a value"),
            (["store", "backup", "x.db", "--bogus"], "unknown option '--bogus'"),
            (["store", "restore", "x.db"], "unknown verb 'restore'"),
            (["allowlist", "check", "--bogus"], "unknown option '--bogus'"),
            (["allowlist", "lint", "f.yml"], "unknown verb 'lint'"),
            (["webhook", "send", "f.json", "--bogus"], "unknown option '--bogus'"),
        )
        for args, want in cases:
            with self.subTest(args=args):
                rc, out, err = run(args, d, clean_env())
                self.assertEqual(rc, 2, out + err)
                self.assertIn(want, err)
                self.assertIn("usage:", err)

    # -- listening

    def test_a_second_relay_cannot_bind_the_port_of_a_running_one(self):
        second = R.Relay()
        self.addCleanup(second.close)
        second.port = self.relay.port
        p = subprocess.run([second.binary, "serve"], env=second.child_env(), cwd=second.tmp,
                           capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        self.assertIn("CRCR_LISTEN: cannot listen on 127.0.0.1:%d: bind: Address already in use"
                      % self.relay.port, p.stderr)
        # The running relay still answers every request.
        for _ in range(20):
            self.assertEqual(self.relay.get("/healthz").status, 200)


class ListenTest(TempDirMixin, unittest.TestCase):
    def test_a_port_in_use_is_refused_with_the_reason(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            port = s.getsockname()[1]
            relay = R.Relay()
            self.addCleanup(relay.close)
            relay.port = port
            p = subprocess.run([relay.binary, "serve"], env=relay.child_env(), cwd=relay.tmp,
                               capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        self.assertIn("crcr: CRCR_LISTEN: cannot listen on 127.0.0.1:%d: bind: Address already "
                      "in use" % port, p.stderr)

    def test_a_restart_binds_its_port_again_at_once(self):
        """SO_REUSEADDR stays: connections of the stopped relay in TIME_WAIT do not block it."""
        relay = R.Relay()
        self.addCleanup(relay.close)
        relay.start()
        port = relay.port
        for _ in range(5):  # connections the relay closes first leave TIME_WAIT behind
            relay.get("/healthz")
        self.assertEqual(relay.stop(), 0)
        relay.start(port=port)
        self.assertEqual(relay.port, port, relay.log_tail())


# ------------------------------------------------------------------------ allowlist strictness


class AllowlistStrictnessTest(TempDirMixin, unittest.TestCase):
    def test_check_names_every_unknown_key_with_line_and_column(self):
        d = self.tmpdir()
        path = os.path.join(d, "allowlist.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# levels\nl1:\n  - org1/repo1\nL5:\n  - org5/repo5\n")
        rc, out, err = run(["allowlist", "check", path], d, clean_env())
        self.assertEqual(rc, 1, out + err)
        self.assertEqual(out, "")
        self.assertEqual(err.splitlines(), [
            "%s:2:1: unknown top-level key 'l1': did you mean 'L1'? (keys are case-sensitive)"
            % path,
            "%s:4:1: unknown top-level key 'L5' (the keys are L1, L2, L3 and L4)" % path])

    def readyz(self, relay):
        return json.loads(relay.get("/readyz").body)

    def metric(self, relay, name):
        for line in relay.poll("/metrics").body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def test_a_reload_with_a_typo_or_to_an_empty_list_keeps_the_previous_list(self):
        relay = R.Relay()
        self.addCleanup(relay.close)
        relay.start()
        self.assertEqual(self.metric(relay, "crcr_allowlist_repos"), 4)
        for text, want in (("l1:\n  - org1/repo1\nL2: [org2/repo2]\n",
                            "allowlist.yml:1:1: unknown top-level key 'l1'"),
                           ("# everything moved elsewhere\n",
                            "the new allowlist has no repositories, the one in force has 4: "
                            "refused"),
                           ("L1: []\nL4:\n", "the new allowlist has no repositories")):
            with self.subTest(text=text):
                relay.write_allowlist(R.DEFAULT_ALLOWLIST)
                relay.send_signal(signal.SIGHUP)
                self.assertTrue(wait_until(lambda: self.readyz(relay)["allowlist_error"] is None
                                           and self.metric(relay,
                                                           "crcr_allowlist_refresh_failing")
                                           == 0, 15.0))
                relay.write_allowlist(text)
                relay.send_signal(signal.SIGHUP)
                self.assertTrue(wait_until(
                    lambda: want in (self.readyz(relay)["allowlist_error"] or ""), 15.0),
                    relay.log_tail())
                doc = self.readyz(relay)
                self.assertTrue(doc["ok"])
                self.assertTrue(doc["allowlist"])
                self.assertEqual(self.metric(relay, "crcr_allowlist_refresh_failing"), 1)
                self.assertEqual(self.metric(relay, "crcr_allowlist_repos"), 4)
                # Webhooks still fan out to the four repositories in force.
                r = relay.webhook("pull_request", R.load_example("pull_request.opened"))
                self.assertEqual(r.status, 202)
                rc, out, err = relay.cli(["deliveries", "show", r.delivery, "--format", "json"])
                self.assertEqual(sorted(j["target"] for j in json.loads(out)["outbox"]),
                                 R.DEFAULT_TARGETS)

    def test_a_first_load_of_an_empty_list_is_allowed(self):
        relay = R.Relay(allowlist="# nobody yet\n")
        self.addCleanup(relay.close)
        relay.start()
        doc = json.loads(relay.get("/readyz").body)
        self.assertTrue(doc["ok"], doc)
        self.assertIsNone(doc["allowlist_error"])


# ------------------------------------------------------------------------ backup and restore


@unittest.skipIf(os.environ.get("CRCR_E2E_PG_URI"), "SQLite backup: the store is PostgreSQL")
class BackupRestoreTest(TempDirMixin, unittest.TestCase):
    def test_backup_while_serving_then_restore(self):
        relay = R.Relay()
        self.addCleanup(relay.close)
        relay.start()
        before = []
        for _ in range(5):
            r = relay.webhook("pull_request", R.load_example("pull_request.opened"))
            self.assertEqual(r.status, 202)
            before.append(r.delivery)
        d = self.tmpdir()
        backup = os.path.join(d, "crcr-backup.db")
        rc, out, err = relay.cli(["store", "backup", backup])
        self.assertEqual(rc, 0, out + err)
        self.assertRegex(out, r"^backed up %s to %s \(schema version %d, \d+ bytes\)\n$"
                         % (re.escape(relay.db_path), re.escape(backup), CURRENT_SCHEMA))
        self.assertEqual(stat.S_IMODE(os.stat(backup).st_mode), 0o600)
        self.assertEqual(sorted(os.listdir(d)), ["crcr-backup.db"], "a single file")
        con = sqlite3.connect("file:%s?mode=ro" % backup, uri=True)
        self.assertEqual(con.execute("PRAGMA integrity_check").fetchone()[0], "ok")
        got = {row[0] for row in con.execute("SELECT delivery_id FROM deliveries")}
        con.close()
        self.assertEqual(got, set(before))
        self.assertTrue(relay.running(), "the relay kept serving")

        # Never over an existing file.
        rc, out, err = relay.cli(["store", "backup", backup])
        self.assertEqual(rc, 2, out + err)
        self.assertIn("never overwrites", err)

        # A delivery after the backup, then the documented restore: stop, remove the old
        # store's -wal and -shm, copy the backup in place (0600), start.
        after = relay.webhook("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(after.status, 202)
        port = relay.port
        self.assertEqual(relay.stop(), 0)
        for suffix in ("-wal", "-shm"):
            try:
                os.unlink(relay.db_path + suffix)
            except FileNotFoundError:
                pass
        shutil.copyfile(backup, relay.db_path)
        os.chmod(relay.db_path, 0o600)
        relay.start(port=port)
        rc, out, err = relay.cli(["deliveries", "list", "--format", "json"])
        self.assertEqual(rc, 0, err)
        self.assertEqual({x["delivery_id"] for x in json.loads(out)}, set(before))
        # The restored relay works as before.
        r = relay.webhook("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(r.status, 202)
        self.assertEqual(relay.webhook("pull_request", R.load_example("pull_request.opened"),
                                       delivery=before[0]).json().get("duplicate"), True)


class PostgresBackupTest(TempDirMixin, unittest.TestCase):
    def test_postgresql_gets_the_pg_dump_command_without_the_password(self):
        d = self.tmpdir()
        uri = "postgresql://crcr:s3cretpw@127.0.0.1:1/crcr"
        rc, out, err = run(["store", "backup", "crcr.dump"], d,
                           clean_env(CRCR_STORE=uri, GITHUB_APP_SECRET="x"))
        self.assertEqual(rc, 2, out + err)
        self.assertIn("pg_dump --format=custom --file=crcr.dump "
                      "'postgresql://crcr:***@127.0.0.1:1/crcr'", err)
        self.assertIn("pg_restore", err)
        self.assertNotIn("s3cretpw", out + err)
        self.assertEqual(os.listdir(d), [])


# ------------------------------------------------------------------------ upgrade


class UpgradeTest(TempDirMixin, unittest.TestCase):
    def v1_copy(self):
        d = self.tmpdir()
        path = os.path.join(d, "crcr.db")
        shutil.copyfile(V1_FIXTURE, path)
        os.chmod(path, 0o600)
        return d, path

    def test_a_schema_1_store_is_upgraded_in_place_with_nothing_lost(self):
        d, path = self.v1_copy()
        self.assertEqual(schema_version(path), 1)
        old = table_rows(path)
        self.assertTrue(all(old[t] for t in ("deliveries", "outbox", "runs", "kv")), old.keys())
        env = clean_env(CRCR_STORE="sqlite:" + path, GITHUB_APP_SECRET="x")
        rc, out, err = run(["deliveries", "list", "--format", "json"], d, env)
        self.assertEqual(rc, 0, err)
        listed = json.loads(out)
        self.assertEqual([x["delivery_id"] for x in listed], [r[0] for r in old["deliveries"]])
        self.assertEqual(schema_version(path), CURRENT_SCHEMA)
        new = table_rows(path)
        for t in V1_TABLES:
            if t != "schema_version" and t != "runs":  # columns added since come last
                width = len(old[t][0]) if old[t] else 0
                self.assertEqual([r[:width] for r in new[t]], old[t], "table %s changed" % t)
        # Version 5: run ids are text (column 2 of runs), every other value as it was; version 6
        # adds runs.ended (NULL: the relay ended none of these runs), version 7 runs.echo_at
        # (NULL: each body whole in its row), last.
        self.assertTrue(all(isinstance(r[2], int) for r in old["runs"]), old["runs"][:1])
        width = len(old["runs"][0])
        as_text = sorted((r[:2] + (str(r[2]),) + r[3:] for r in old["runs"]), key=repr)
        self.assertEqual(sorted((r[:width] for r in new["runs"]), key=repr), as_text)
        self.assertTrue(all(r[width:] == (None, None) for r in new["runs"]), new["runs"][:1])
        self.assertTrue(all(isinstance(r[2], str) for r in new["runs"]))
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        con.close()
        self.assertLessEqual({"repo_identity", "budgets", "run_echoes"}, tables)

        # The rows read back through the commands: the delivery, its 14 outbox rows, no pins.
        delivery = listed[0]["delivery_id"]
        rc, out, err = run(["deliveries", "show", delivery, "--format", "json"], d, env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(json.loads(out)["outbox"]), len(old["outbox"]))
        rc, out, err = run(["trust", "list"], d, env)
        self.assertEqual((rc, out), (0, ""), err)
        # Opening again changes nothing more.
        rc, out, err = run(["deliveries", "list"], d, env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(table_rows(path), new)

    def test_a_store_newer_than_the_binary_is_refused(self):
        d, path = self.v1_copy()
        con = sqlite3.connect(path)
        con.execute("UPDATE schema_version SET version=99")
        con.commit()
        con.close()
        want = ("CRCR_STORE: schema version 99 is newer than this crcr understands (%d); "
                "upgrade crcr" % CURRENT_SCHEMA)
        env = clean_env(CRCR_STORE="sqlite:" + path, GITHUB_APP_SECRET="x")
        rc, out, err = run(["deliveries", "list"], d, env)
        self.assertEqual(rc, 2, out + err)
        self.assertIn(want, err)
        relay = R.Relay(env={"CRCR_STORE": "sqlite:" + path})
        self.addCleanup(relay.close)
        relay.port = R.free_port()
        p = subprocess.run([relay.binary, "serve"], env=relay.child_env(), cwd=relay.tmp,
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 2, p.stderr[-2000:])
        self.assertIn(want, p.stderr)
        self.assertEqual(schema_version(path), 99)


if __name__ == "__main__":
    unittest.main()
