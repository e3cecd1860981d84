#!/usr/bin/env python3
"""hud_bench.py - how long the HUD's pages take with 10,000 runs in the store (issue 5).

    python3 bench/hud_bench.py --crcr build-bench/crcr [--repeat 20] [--write]

Two stores, each holding 10,000 callback runs of realistic size:
  spread  20 allowlisted repos (5 per level); 500 pull_request deliveries over the last 6.5 days,
          each dispatched to the 20 repos; the 15 L2..L4 repos report 10,000 runs (L4: 2 jobs
          per PR, L2/L3: 1), 90 % success, 5 % failure, 3 % cancelled, 1 % timed_out, 1 %
          running; 2 check runs per L4 run in the outbox; 100 nightly runs
  one     one L4 repo holds all 10,000 runs (5,000 PRs x 2 jobs): the repo page's worst case
Each run row carries its callback body as the relay stores it: the echoed client_payload (the
real 23 KB pull_request.opened example, with callback_token) plus `workflow`; each delivery its
23 KB payload. The rows are written with Python's sqlite3 into the schema `crcr serve` creates
(this bench only measures reading; writing 20,000 callbacks through the front door would take
minutes on these machines and measure ingest, which bench/bench.py covers).

Then a Release `crcr serve`, once idle (its first sweep scans the whole store), answers each page
`--repeat` times after two warm-up requests, one request at a time over loopback. Reported per page: median and p95 wall time at the client, the
server's own render time (the "in N ms" of the page footer, HTML only) and the answer size.
GET /healthz in the same run is the noise floor. Timings are reported, never pass/fail; --write
replaces the "## HUD" section of bench/RESULTS.md with this run's table and command.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
os.environ.setdefault("CRCR_TEST_DATA", os.path.join(ROOT, "tests", "data"))

import relay as R  # noqa: E402

DAY = 86400 * 1000
RESULTS = os.path.join(HERE, "RESULTS.md")


def allowlist_spread():
    lines = ["L1:"] + ["  - l1org/r%d" % i for i in range(5)]
    lines += ["L2:"] + ["  - l2org/r%d" % i for i in range(5)]
    lines += ["L3:"]
    for i in range(5):
        lines += ["  dev%d:" % i, "    l3org/r%d: [oncall%d]" % (i, i)]
    lines += ["L4:"] + ["  - l4org/r%d" % i for i in range(5)]
    return "\n".join(lines) + "\n"


ALLOWLIST_ONE = "L4:\n  - big/one\nL1:\n  - small/l1\n"


class Filler:
    def __init__(self, db_path, now, seed=5):
        self.db = sqlite3.connect(db_path)
        self.db.execute("PRAGMA synchronous=OFF")
        self.now = now
        self.rng = random.Random(seed)
        self.example = R.load_example_obj("pull_request.opened")
        self.outbox_id = 0

    def pr_payload(self, number, sha):
        obj = copy.deepcopy(self.example)
        obj["number"] = number
        obj["pull_request"]["number"] = number
        obj["pull_request"]["head"]["sha"] = sha
        return obj

    def delivery(self, did, number, sha, at, targets, payload_text):
        self.db.execute(
            "INSERT INTO deliveries(delivery_id, event, action, upstream_repo, pr_number, "
            "head_sha, ref, received_at, payload, payload_bytes, status) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?)",
            (did, "pull_request", "opened", "pytorch/pytorch", number, sha, None, at,
             payload_text.encode(), len(payload_text), "queued"))
        rows = []
        for t in targets:
            state, status, err = "sent", 204, None
            r = self.rng.random()
            if r < 0.01:
                state, status, err = "dead", 404, "App not installed on %s (installation " \
                                                   "lookup: 404)" % t
            elif r < 0.015:
                state, status, err = "queued", 502, "dispatch: HTTP 502: Server Error"
            rows.append(("dispatch", did, t, None, state, 1, at + 60000 if state == "queued"
                         else at, status, err, None, at, None if state == "queued" else at + 300))
        self.db.executemany(
            "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, "
            "next_attempt_at, last_status, last_error, note, created_at, done_at) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    def run(self, did, repo, level, number, sha, job, at, payload_obj, nightly=False):
        r = self.rng.random()
        if r < 0.90:
            state, concl = "completed", "success"
        elif r < 0.95:
            state, concl = "completed", "failure"
        elif r < 0.98:
            state, concl = "completed", "cancelled"
        elif r < 0.99:
            state, concl = "completed", "timed_out"
        else:
            state, concl = "in_progress", None
        queue = self.rng.randint(5, 900) * 1000
        exe = self.rng.randint(300, 7200) * 1000
        started = at + queue
        completed = started + exe if state == "completed" else None
        run_id = 40_000_000_000 + self.rng.randrange(10**9)
        body = dict(payload_obj)
        body["workflow"] = {"schema_version": "1", "status": state, "conclusion": concl,
                            "name": "ci", "url": "https://github.com/%s/actions/runs/%d"
                            % (repo, run_id), "run_id": str(run_id), "run_attempt": "1",
                            "job_name": job, "check_run_id": str(run_id * 10),
                            "started_at": None, "completed_at": None}
        text = json.dumps(body, separators=(",", ":"))
        self.db.execute(
            "INSERT INTO runs(delivery_id, repo, run_id, run_attempt, job_name, event_type, "
            "state, level, pr_number, head_sha, workflow_name, conclusion, details_url, "
            "artifact_url, dispatched_at, started_at, completed_at, queue_ms, exec_ms, "
            "test_passed, test_failed, test_skipped, payload, updated_at) VALUES "
            "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (did, repo, run_id, 1, job, "nightly" if nightly else "pull_request", state, level,
             0 if nightly else number, sha, "ci", concl,
             "https://github.com/%s/actions/runs/%d" % (repo, run_id), None,
             None if nightly else at, None if nightly else started, completed,
             None if nightly else queue, exe if completed else None, 4000, 2, 30,
             text.encode(), completed or started))
        if level == 4 and not nightly:
            cr = json.dumps({"name": "crcr/%s/ci/%s" % (repo, job), "head_sha": sha,
                             "status": "completed", "conclusion": concl or "success"})
            self.db.executemany(
                "INSERT INTO outbox(kind, delivery_id, target, body, state, attempts, "
                "next_attempt_at, last_status, last_error, note, created_at, done_at) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?)",
                [("check_run", did, "pytorch/pytorch", cr.encode(), "sent", 1, started, 201,
                  None, None, started, started + 200)] * 2)

    def close(self):
        self.db.commit()
        self.db.close()


def fill_spread(f):
    repos = ([("l1org/r%d" % i, 1) for i in range(5)] + [("l2org/r%d" % i, 2) for i in range(5)]
             + [("l3org/r%d" % i, 3) for i in range(5)] + [("l4org/r%d" % i, 4) for i in range(5)])
    targets = [r for r, _ in repos]
    n = 0
    prs = []
    for k in range(500):
        number = 150000 + k
        sha = "%040x" % f.rng.getrandbits(160)
        did = "bench-%05d" % k
        at = f.now - int(6.5 * DAY) + k * int(6.0 * DAY / 500)
        payload = f.pr_payload(number, sha)
        text = json.dumps(payload, separators=(",", ":"))
        f.delivery(did, number, sha, at, targets, text)
        echo = {"event_type": "pull_request", "delivery_id": did, "payload": payload,
                "callback_token": "v1.%040x" % f.rng.getrandbits(160)}
        for repo, level in repos:
            if level < 2:
                continue
            jobs = ["build", "test"] if level == 4 else ["test"]
            for job in jobs:
                f.run(did, repo, level, number, sha, job, at, echo)
                n += 1
        prs.append((number, sha))
    for k in range(100):
        sha = "%040x" % f.rng.getrandbits(160)
        f.run(sha, "l2org/r%d" % (k % 5), 2, 0, sha, "nightly", f.now - k * 3600 * 1000,
              {"event_type": "nightly", "delivery_id": sha,
               "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha}},
              nightly=True)
    return n, prs


def fill_one(f):
    prs = []
    n = 0
    for k in range(5000):
        number = 200000 + k
        sha = "%040x" % f.rng.getrandbits(160)
        did = "one-%05d" % k
        at = f.now - int(6.5 * DAY) + k * int(6.0 * DAY / 5000)
        payload = f.pr_payload(number, sha)
        text = json.dumps(payload, separators=(",", ":"))
        f.delivery(did, number, sha, at, ["big/one", "small/l1"], text)
        echo = {"event_type": "pull_request", "delivery_id": did, "payload": payload,
                "callback_token": "v1.%040x" % f.rng.getrandbits(160)}
        for job in ("build", "test"):
            f.run(did, "big/one", 4, number, sha, job, at, echo)
            n += 1
        prs.append((number, sha))
    return n, prs


FOOTER = re.compile(rb" in (\d+) ms by crcr")


def cpu_ms(pid):
    """User + system CPU time of `pid` so far, in ms (from /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, timeout=120.0):
    """Waits until the relay uses under 5 % CPU over half a second: its first sweep (retention
    over the whole store) runs at start and would otherwise land in the first measurements."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c0 = cpu_ms(pid)
        time.sleep(0.5)
        if cpu_ms(pid) - c0 < 25:
            return
    print("hud_bench: the relay never went idle; measuring anyway", file=sys.stderr)


def measure(rl, path, repeat):
    for _ in range(2):
        r = rl.get(path, timeout=60)
        if r.status != 200:
            raise RuntimeError("%s: %s %r" % (path, r.status, r.body[:200]))
    walls, server = [], []
    size = 0
    cpu0 = cpu_ms(rl.proc.pid)
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = rl.get(path, timeout=60)
        walls.append((time.perf_counter() - t0) * 1000)
        size = len(r.body)
        m = FOOTER.search(r.body)
        if m:
            server.append(int(m.group(1)))
    cpu = (cpu_ms(rl.proc.pid) - cpu0) / repeat
    walls.sort()
    p95 = walls[min(len(walls) - 1, int(round(0.95 * len(walls))) - 1)]
    return {"median": statistics.median(walls), "p95": p95,
            "server": statistics.median(server) if server else None, "bytes": size,
            "cpu": cpu}


def scenario(name, binary, allowlist, fill, pages_fn, repeat):
    rl = R.Relay(env={"CRCR_LOG": "warn"}, allowlist=allowlist, binary=binary)
    try:
        rl.start()
        rl.stop()
        now = int(time.time() * 1000)
        t0 = time.monotonic()
        f = Filler(rl.db_path, now)
        n_runs, prs = fill(f)
        f.close()
        fill_s = time.monotonic() - t0
        db_mb = os.path.getsize(rl.db_path) / 1e6
        rl.start()
        wait_idle(rl.proc.pid)
        rows = [("GET /healthz (noise floor)", measure(rl, "/healthz", repeat))]
        for label, path in pages_fn(prs):
            rows.append((label, measure(rl, path, repeat)))
        return {"name": name, "runs": n_runs, "db_mb": db_mb, "fill_s": fill_s, "rows": rows}
    finally:
        rl.close()


def pages_spread(prs):
    number, sha = prs[-1]
    return [
        ("/crcr (20 repos, level health)", "/crcr"),
        ("/api/v1/repos", "/api/v1/repos"),
        ("/api/v1/health", "/api/v1/health"),
        ("/crcr/l4org/r0 (1,000 runs) page 1", "/crcr/l4org/r0"),
        ("/crcr/l4org/r0 page 10", "/crcr/l4org/r0?page=10"),
        ("/crcr/l2org/r0?tab=nightly", "/crcr/l2org/r0?tab=nightly"),
        ("/api/v1/repos/l4org/r0/runs", "/api/v1/repos/l4org/r0/runs"),
        ("/crcr/pr/N (20 targets, 20 runs, 20 check runs)", "/crcr/pr/%d" % number),
        ("/api/v1/pr/N", "/api/v1/pr/%d" % number),
        ("/api/v1/pr/N/blocking?sha=", "/api/v1/pr/%d/blocking?sha=%s" % (number, sha)),
        ("/crcr/deliveries (50)", "/crcr/deliveries"),
        ("/crcr/deliveries?limit=200", "/crcr/deliveries?limit=200"),
        ("/crcr/deliveries?state=dead", "/crcr/deliveries?state=dead"),
        ("/crcr/deliveries/ID", "/crcr/deliveries/bench-00499"),
    ]


def pages_one(prs):
    number, sha = prs[-1]
    return [
        ("/crcr (1 repo with 10,000 runs)", "/crcr"),
        ("/crcr/big/one page 1", "/crcr/big/one"),
        ("/crcr/big/one page 200 (last)", "/crcr/big/one?page=200"),
        ("/api/v1/repos/big/one/runs", "/api/v1/repos/big/one/runs"),
        ("/crcr/pr/N", "/crcr/pr/%d" % number),
        ("/api/v1/pr/N/blocking?sha=", "/api/v1/pr/%d/blocking?sha=%s" % (number, sha)),
    ]


def table(results, repeat):
    out = []
    for sc in results:
        out.append("")
        out.append("**%s**: %d runs, store %.0f MB (filled in %.0f s)." % (
            sc["name"], sc["runs"], sc["db_mb"], sc["fill_s"]))
        out.append("")
        out.append("| page | median | p95 | server render | server CPU | bytes |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for label, m in sc["rows"]:
            out.append("| %s | %.1f ms | %.1f ms | %s | %.1f ms | %s |" % (
                label, m["median"], m["p95"],
                "%d ms" % m["server"] if m["server"] is not None else "-", m["cpu"],
                "{:,}".format(m["bytes"])))
    return "\n".join(out)


def write_results(section):
    with open(RESULTS, encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## HUD\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + "\n" + section + (text[end:] if end >= 0 else "\n")
    else:
        anchor = text.find("\n## Runs\n")
        if anchor >= 0:
            text = text[:anchor] + "\n" + section + text[anchor:]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(RESULTS, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crcr", default=os.path.join(ROOT, "build-bench", "crcr"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--write", action="store_true", help="update the HUD section of RESULTS.md")
    ap.add_argument("--only", choices=("spread", "one"))
    a = ap.parse_args()
    binary = os.path.abspath(a.crcr)
    if not os.access(binary, os.X_OK):
        sys.exit("hud_bench: %s is not an executable (build a Release crcr first)" % binary)
    t0 = time.monotonic()
    load = " ".join("%.2f" % x for x in os.getloadavg())
    results = []
    if a.only in (None, "spread"):
        results.append(scenario("spread", binary, allowlist_spread(), fill_spread, pages_spread,
                                a.repeat))
    if a.only in (None, "one"):
        results.append(scenario("one", binary, ALLOWLIST_ONE, fill_one, pages_one, a.repeat))
    cmd = "python3 bench/hud_bench.py --crcr %s --repeat %d%s" % (
        os.path.relpath(binary, ROOT), a.repeat, " --only " + a.only if a.only else "")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = ("## HUD\n\nPage times with 10,000 runs in the store (issue 5 target: each page "
            "under 50 ms; reported, not enforced). Run %s on %s, %d CPUs, load average at start "
            "%s; %d requests per page, one at a time over loopback, after 2 warm-up requests; "
            "Release build. \"server render\" is the time the page reports in its footer (the "
            "rest is HTTP and the client); \"server CPU\" is the relay's user+system CPU per "
            "request from /proc, which the other load on the machine disturbs least. Total "
            "%.0f s.\n\n```sh\n%s\n```"
            % (when, platform.node() or "host", os.cpu_count() or 0, load, a.repeat,
               time.monotonic() - t0, cmd))
    notes = ("\nWhat keeps these pages fast: a callback row is ~24 KB (the echoed webhook), so the "
             "SQLite store answers the HUD's listings from the covering index `runs_hud` (every "
             "run column but the payload) and finds a PR's runs and deliveries through `runs_pr` "
             "and `deliveries_pr`; a repo page reads its runs once for both the matrix and its "
             "health numbers. `/crcr/deliveries?limit=200` is four times the default page.\n")
    section = head + "\n" + table(results, a.repeat) + "\n" + notes
    print(section)
    if a.write:
        write_results(section)
        print("updated %s" % RESULTS)


if __name__ == "__main__":
    main()
