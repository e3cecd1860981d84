#!/usr/bin/env python3
"""Makes tests/data/stores/schema-v1.db: a SQLite store written by a crcr of schema version 1.

The fixture is committed; this script says how it was made, so that the next schema version can
make its own the same way. Build the last schema-1 crcr from git and run this with it:

    git archive 41d2cf7 | (mkdir -p /tmp/crcr-v1 && tar -x -C /tmp/crcr-v1)
    (cd /tmp/crcr-v1 && scripts/build.sh)
    CRCR_BIN=/tmp/crcr-v1/build/crcr CRCR_TEST_DATA=/tmp/crcr-v1/tests/data \\
        PYTHONPATH=/tmp/crcr-v1/tests/support:/tmp/crcr-v1/tests/e2e \\
        python3 tests/data/stores/make-schema-v1.py tests/data/stores/schema-v1.db

(the test harness of that same commit, which knows that binary's ways).
It runs that relay in App mode against the test fakes (fake GitHub, OIDC issuer, fake HUD),
sends a pull_request webhook, lets every dispatch be sent (one after a 429, which writes an
installation pause to kv), posts in_progress and completed callbacks for the L2, L3 and L4
repositories (runs, check runs, HUD forwards) and waits until no outbox row is queued or
running. Then it stops the relay, checkpoints the WAL into the database file and copies that file
alone (no -wal, no -shm).
"""

import os
import shutil
import sqlite3
import sys

import relay as R
from test_callback import (ALLOWLIST, CallbackMixin, Stack, new_run_id, new_sha, wait_until)
from test_dispatch import DISPATCH_PATH


def main(out):
    s = Stack(allowlist=ALLOWLIST).start()
    try:
        s.gh.fault_429(r"^/repos/org2/repo2/dispatches$", retry_after=1, method="POST")
        obj = R.load_example_obj("pull_request.opened")
        sha = new_sha()
        obj["pull_request"]["head"]["sha"] = sha
        r = s.relay.webhook("pull_request", R.compact(obj))
        assert r.status == 202, r
        want = {"org1/repo1", "org2/repo2", "org3/repo3", "org3/repo3b", "org5/repo5",
                "org4/repo4"}

        def got():
            out = {d["repo"]: d["client_payload"] for d in s.gh.dispatches()
                   if d["client_payload"].get("delivery_id") == r.delivery}
            return out if want <= set(out) else None

        payloads = wait_until(got, 30.0)
        assert payloads, s.diag()
        for repo in ("org2/repo2", "org3/repo3", "org4/repo4"):
            run_id = new_run_id()
            for status in ("in_progress", "completed"):
                body = CallbackMixin.body(payloads[repo], status, run_id=run_id)
                resp = s.relay.post("/github/callback", R.compact(body),
                                    {"Content-Type": "application/json",
                                     "Authorization": "Bearer " + s.issuer.token(repo)})
                assert resp.status == 200, (resp, s.diag())
        # Every outbox row (check runs, HUD forwards) done before the relay stops.
        def settled():
            rc, o, e = s.relay.cli(["deliveries", "list", "--status", "queued"])
            rc2, o2, e2 = s.relay.cli(["deliveries", "list", "--status", "running"])
            return rc == 0 and rc2 == 0 and not o.strip() and not o2.strip()

        assert wait_until(settled, 30.0), s.diag()
        assert len(s.gh.requests("POST", DISPATCH_PATH)) >= len(want) + 1
        db = s.relay.db_path
        rc = s.relay.stop()
        assert rc == 0, rc
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        assert version == 1, version
        counts = {t: con.execute("SELECT count(*) FROM %s" % t).fetchone()[0]
                  for t in ("deliveries", "outbox", "runs", "kv")}
        con.close()
        assert all(counts.values()), counts
        shutil.copyfile(db, out)
        os.chmod(out, 0o600)
        print("wrote %s: %s" % (out, counts))
    finally:
        s.close()


if __name__ == "__main__":
    main(sys.argv[1])
