#!/usr/bin/env python3
"""bench.py - crcr's benchmarks, each against a peer measured in the same run, or as counts.

Run through bench/run.sh (it builds build-bench/crcr in Release and installs the Node peer); by
hand: python3 bench/bench.py --crcr build-bench/crcr [--only ingest,fanout,...] [--store sqlite,pg]
[--no-append].

Sections (see bench/RESULTS.md for what each measures and the targets of issues 16 and 26):
  ingest          signed 30,512-byte pull_request webhooks, wrk at 16 and 64 connections, crcr
                  (durable 202, dry-run, 4 targets; CPU counted until the outbox has drained) vs
                  the @octokit/webhooks peer (bench/peer); an ignored action at 64 connections vs
                  the peer; a ladder of crcr-only diagnostic runs (ping = HTTP+HMAC, store on
                  tmpfs = +SQLite without fsync) and per-webhook syscall counts (perf stat)
  ingest_targets  the same durable ingest with 1, 10 and 100 allowlisted targets, c16 and c64:
                  req/s and server CPU per stored webhook including the dry-run of its rows
  fanout          100 allowlisted repos, fake GitHub with 50 ms per request: webhook -> 100th
                  dispatch answered, cold and warm, default MAX_DISPATCH_WORKERS; API calls
  fanout1000      the same with 1,000 repos of 1,000 owners, and how fast the fake itself is
  callbacks       in_progress + completed pairs with RS256 OIDC tokens at 32 connections (wrk)
  callbacks_under_ingest
                  the callbacks alone, then again while a second wrk sends webhooks (same window)
  memory          RSS idle, during ingest, along 100,000 webhooks
  profile         callgrind over a short ingest run and a short callback run

--store sqlite,pg (default: both when PostgreSQL is installed) repeats ingest, fanout,
fanout1000, callbacks and callbacks_under_ingest with a PostgreSQL store: a throwaway cluster from
scripts/pg-test-cluster.sh, or --pg-uri.

Everything listens on 127.0.0.1; every load run is bounded in time (and, for memory, in count).
Timings are never pass/fail: the run prints a table and writes it, with the commands, to
bench/runs/<date>-<time>.md, listed in bench/RESULTS.md. Python 3 stdlib only (plus
tests/support).
"""

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import platform
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUPPORT = os.path.join(ROOT, "tests", "support")
DATA = os.path.join(ROOT, "tests", "data")
sys.path.insert(0, SUPPORT)
sys.path.insert(0, HERE)

import fakegh as F  # noqa: E402
import relay as R  # noqa: E402
from oidc_issuer import OidcIssuer  # noqa: E402

SECRET = "crcr-bench-webhook-secret"
APP_ID = 424242
PAYLOAD_BYTES = 30512  # the reference's padded pull_request size
DISTINCT_PRS = 64  # pull requests of the PostgreSQL ingest row with many PRs
PAD_UNIT = "Ünïcödé PR description — 日本語のテキスト ✓ "  # multi-byte UTF-8 padding
INGEST_ALLOWLIST = R.DEFAULT_ALLOWLIST  # four repos, one per level
FANOUT_REPOS = 100
FANOUT1000_REPOS = 1000
FANOUT_LATENCY_MS = 50
TARGET_COUNTS = (1, 10, 100)  # ingest_targets
PEER_DIR = os.path.join(HERE, "peer")
PG_CLUSTER = os.path.join(ROOT, "scripts", "pg-test-cluster.sh")
CALLBACK_REPO = "org2/repo2"  # L2 in the default allowlist
CB_BLOCK = 256  # callback pairs: in_progress x B, then completed x B (8 x the connections)
MEMORY_ALLOWLIST = "L4:\n  - org4/repo4\n"  # one target: 100,000 webhooks fit the time budget

# The targets of issues 16 and 26 (performance rounds 3 and 4). Reported, never enforced.
T_INGEST_RATIO = 1.0  # durable ingest c64, x the peer in the same run
T_INGEST_P99_MS = 30.0
T_CPU_PER_WEBHOOK_MS = 0.5  # server CPU per stored webhook, 4 targets (issue 26; 0.35 in issue 16)
APP_REPEATS = 3  # App-mode ingest loads per run; the median is reported (see ingest)
T_IGNORED_RATIO = 3.0  # ignored event c64, x the peer
T_CB_RPS = 3000.0  # callbacks c32, disk store
T_CB_P99_MS = 20.0
T_FANOUT100_WARM_MS = 110.0  # default settings
T_FANOUT100_COLD_MS = 300.0
T_FANOUT1000_WARM_MS = 1000.0
T_RSS_MIB = 40.0  # peak RSS during ingest, at every setting above
T_GITHUB_BUDGET = 90  # CRCR_GITHUB_CONCURRENCY default: requests in flight, all instances
# When the fake GitHub was too busy to answer at its injected latency, a fan-out figure measures
# the fake, not crcr: such figures are flagged instead of judged. Flagged when the fake's own
# time (answer - arrival - latency) summed along one relay connection exceeds 10 % of the figure
# (and 5 ms), when it used more than 80 % of a core (one Python process: one GIL), or when the
# kernel dropped connections on a full listen queue.
FAKE_ADDED_SHARE = 0.10
FAKE_ADDED_MIN_MS = 5.0
FAKE_BUSY_MAX = 0.8


# ----------------------------------------------------------------------------- small helpers


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def sign(body):
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def pr_variant(body, number):
    """`body` (a padded pull_request webhook) as the same event of pull request `number`, padded
    back to the same size."""
    doc = json.loads(body)
    doc["number"] = number
    doc["pull_request"]["number"] = number
    doc["pull_request"]["head"]["sha"] = "%040x" % (0xbe9c4 + number)

    def enc(d):
        return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    over = len(enc(doc)) - len(body)
    doc["pull_request"]["body"] = doc["pull_request"]["body"][over:] if over > 0 else \
        doc["pull_request"]["body"] + "x" * -over
    return enc(doc)


def new_head_payload(seq):
    """padded_payload("pull_request.opened") as a new commit of its PR: action synchronize and
    head sha number `seq` (the same size): its fan-out supersedes the PR's earlier dispatches."""
    body = padded_payload("pull_request.opened", action="synchronize")
    sha = json.loads(body)["pull_request"]["head"]["sha"]
    return body.replace(sha.encode(), ("%040x" % (0xC0FFEE0000 + seq)).encode())


def padded_payload(name, size=PAYLOAD_BYTES, action=None):
    """tests/data/webhooks/<name>.json, compact, with pull_request.body padded with UTF-8 text so
    the document is exactly `size` bytes. `action` replaces the action when given."""
    with open(os.path.join(DATA, "webhooks", name + ".json"), "rb") as f:
        doc = json.loads(f.read())
    if action:
        doc["action"] = action
    doc["pull_request"]["body"] = ""

    def enc(d):
        return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    room = size - len(enc(doc))
    if room < 0:
        raise ValueError("%s is already larger than %d bytes" % (name, size))
    text = ""
    while len(text.encode("utf-8")) < room:
        text += PAD_UNIT
    while len(text.encode("utf-8")) > room:
        text = text[:-1]
    text += "x" * (room - len(text.encode("utf-8")))
    doc["pull_request"]["body"] = text
    out = enc(doc)
    assert len(out) == size, len(out)
    return out


def small_push_payload():
    """tests/data/webhooks/push.json, compact (the memory run's smaller body)."""
    with open(os.path.join(DATA, "webhooks", "push.json"), "rb") as f:
        return json.dumps(json.loads(f.read()), separators=(",", ":")).encode("utf-8")


def proc_status(pid):
    """VmRSS/VmHWM in KiB (0 when the process is gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in out:
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def proc_cpu_s(pid):
    """user+system CPU seconds of the whole process (all threads)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_io(pid):
    """(wchar, write_bytes) of the whole process: bytes handed to write calls, and bytes sent to
    the block layer; (0, 0) when /proc/PID/io cannot be read."""
    try:
        with open("/proc/%d/io" % pid) as f:
            kv = dict(line.split(": ") for line in f.read().splitlines())
        return int(kv["wchar"]), int(kv["write_bytes"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def proc_threads(pid):
    try:
        return len(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return 0


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fmt_ms(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f ms" % v
    if v >= 10:
        return "%.1f ms" % v
    return "%.2f ms" % v


def fmt_num(v, digits=0):
    if v is None:
        return "-"
    return ("{:,.%df}" % digits).format(v)


def ratio(a, b, digits=2):
    if a is None or b in (None, 0):
        return "-"
    return ("%." + str(digits) + "fx") % (a / b)


class RssSampler:
    """Samples VmRSS of a pid every `interval` s in a thread; .peak_kib is the highest seen."""

    def __init__(self, pid, interval=0.1):
        self.pid, self.interval = pid, interval
        self.peak_kib = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, proc_status(self.pid)["VmRSS"])
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(2)
        self.peak_kib = max(self.peak_kib, proc_status(self.pid)["VmRSS"])


class PerfStat:
    """`perf stat` on a running pid for the duration of a `with` block (syscall tracepoints,
    context switches, task-clock). .counts maps event -> count; empty when perf cannot."""

    EVENTS = ["task-clock", "context-switches", "syscalls:sys_enter_fdatasync",
              "syscalls:sys_enter_fsync", "syscalls:sys_enter_pwrite64",
              "syscalls:sys_enter_futex", "syscalls:sys_enter_fcntl"]

    def __init__(self, pid, out_path, enabled=True):
        self.pid, self.out_path, self.enabled = pid, out_path, enabled
        self.counts = {}
        self.proc = None

    def __enter__(self):
        if self.enabled and shutil.which("perf"):
            self.proc = subprocess.Popen(
                ["perf", "stat", "-x", ",", "-o", self.out_path, "-e", ",".join(self.EVENTS),
                 "-p", str(self.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._wait_attached()
        return self

    def _wait_attached(self, limit_s=5.0):
        """Waits until perf holds its counters open (one perf_event fd per event and thread):
        on a loaded machine attaching takes long enough to miss the first requests."""
        want = len(self.EVENTS) * max(1, proc_threads(self.pid))
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                fds = os.listdir("/proc/%d/fd" % self.proc.pid)
                n = sum(1 for fd in fds if "perf_event" in os.readlink(
                    "/proc/%d/fd/%s" % (self.proc.pid, fd)))
            except OSError:
                n = 0
            if n >= want:
                return
            time.sleep(0.02)

    def __exit__(self, *exc):
        if not self.proc:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            with open(self.out_path) as f:
                for line in f:
                    parts = line.strip().split(",")
                    if len(parts) >= 3 and parts[0] and parts[0][0].isdigit():
                        try:
                            self.counts[parts[2]] = float(parts[0])
                        except ValueError:
                            pass
        except OSError:
            pass


def tcp_listen_drops():
    """TcpExt ListenOverflows + ListenDrops of this network namespace (/proc/net/netstat): a
    connection refused by a full accept queue waits for a SYN retransmit (1 s and more)."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for i in range(0, len(lines) - 1, 2):
        if lines[i].startswith("TcpExt:"):
            names, vals = lines[i].split()[1:], lines[i + 1].split()[1:]
            d = dict(zip(names, vals))
            try:
                return int(d.get("ListenOverflows", 0)) + int(d.get("ListenDrops", 0))
            except ValueError:
                return None
    return None


def base64_decode(text):
    import base64
    return base64.b64decode(text)


def pct(values, p):
    """The p-th percentile (0-100) of a list, nearest rank; None when empty."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))]


def median(values):
    v = sorted(x for x in values if x is not None)
    return v[len(v) // 2] if v else None


def psql_path():
    import glob
    return shutil.which("psql") or next(iter(sorted(glob.glob(
        "/usr/lib/postgresql/*/bin/psql"), reverse=True)), None)


def pg_server_installed():
    import glob
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb")) and \
        bool(psql_path())


class PgServer:
    """The PostgreSQL server of the `pg` store variant: `uri` (--pg-uri) as given, else a
    throwaway cluster started with scripts/pg-test-cluster.sh in a temp dir (loopback only,
    trust auth, fsync=off: it measures crcr's PostgreSQL code path, not a disk's flushes).
    Every relay gets a database of its own (create_db), dropped when the relay closes."""

    def __init__(self, uri=None):
        self.given_uri = uri
        self.uri = uri
        self.dir = None
        self.throwaway = uri is None
        self.psql = psql_path()

    def start(self):
        if not self.psql:
            raise RuntimeError("psql not found (apt-get install postgresql-15)")
        if self.uri is None:
            self.dir = tempfile.mkdtemp(prefix="crcr-bench-pg-")
            p = subprocess.run([PG_CLUSTER, "start", self.dir], capture_output=True, text=True,
                               timeout=180)
            if p.returncode != 0:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None
                raise RuntimeError("pg-test-cluster.sh start: %s" % p.stderr.strip()[-500:])
            self.uri = p.stdout.strip().splitlines()[-1]
        self.run_sql(self.uri, "SELECT 1")
        self.version = self.run_sql(self.uri, "SHOW server_version").strip()
        self.fsync = self.run_sql(self.uri, "SHOW fsync").strip()
        self.sync_commit = self.run_sql(self.uri, "SHOW synchronous_commit").strip()
        return self

    def run_sql(self, uri, sql):
        p = subprocess.run([self.psql, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d", uri,
                            "-c", sql], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError("psql %r: %s" % (sql, p.stderr.strip()))
        return p.stdout

    def db_uri(self, name):
        parts = urllib.parse.urlsplit(self.uri)
        return urllib.parse.urlunsplit(parts._replace(path="/" + name))

    def create_db(self):
        name = "crcr_bench_%s" % uuid.uuid4().hex[:12]
        self.run_sql(self.uri, "CREATE DATABASE %s" % name)
        return name, self.db_uri(name)

    def drop_db(self, name):
        try:
            self.run_sql(self.uri, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        except (RuntimeError, OSError, subprocess.SubprocessError):
            pass

    def stop(self):
        if self.dir:
            subprocess.run([PG_CLUSTER, "destroy", self.dir], capture_output=True, text=True,
                           timeout=120)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def describe(self):
        where = ("a throwaway cluster (scripts/pg-test-cluster.sh)" if self.throwaway
                 else "the server of --pg-uri")
        return "PostgreSQL %s, %s, fsync=%s, synchronous_commit=%s" % (
            getattr(self, "version", "?"), where, getattr(self, "fsync", "?"),
            getattr(self, "sync_commit", "?"))


class PsqlSession:
    """One long-lived psql for the bench's own queries on a relay's PostgreSQL store (a psql per
    query would cost the shared cores more than the polling it serves)."""

    END = "@@crcr-bench-end@@"

    def __init__(self, psql, uri):
        self.p = subprocess.Popen([psql, "-X", "-q", "-t", "-A", "-F", "\t", "-d", uri],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.lock = threading.Lock()

    def rows(self, sql):
        with self.lock:
            self.p.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo %s\n" % self.END)
            self.p.stdin.flush()
            out = []
            while True:
                line = self.p.stdout.readline()
                if not line:
                    raise RuntimeError("psql ended: %s" % "".join(out)[-300:])
                line = line.rstrip("\n")
                if line == self.END:
                    break
                out.append(line)
        errs = [x for x in out if x.startswith(("ERROR:", "psql:", "FATAL:"))]
        if errs:
            raise RuntimeError("psql %r: %s" % (sql[:120], errs[0]))
        res = []
        for line in out:
            if line == "":
                continue
            res.append(tuple(int(c) if re.match(r"^-?\d+$", c) else c
                             for c in line.split("\t")))
        return res

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def sql_literal(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


FAST_FAKE_SRC = os.path.join(HERE, "fakegh_fast.c")


def fast_fake_binary(build_dir):
    """bench/fakegh_fast.c built into build_dir (again when the source is newer)."""
    out = os.path.join(build_dir, "fakegh_fast")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(FAST_FAKE_SRC):
        subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", FAST_FAKE_SRC,
                        "-ljansson", "-o", out], check=True)
    return out


class FakeGitHubProc:
    """The fake GitHub in a process of its own: bench/fakegh_fast.c ("c", the default: one epoll
    loop in C, the routes a fan-out sends) or bench/fakegh_proc.py ("asyncio", "threads": the
    test suites' fake with every route). Both speak the same control protocol (see there)."""

    binary = None  # fakegh_fast's path, set by main()

    def __init__(self, latency_ms, server="c", backlog=4096):
        cfg = {"app_id": APP_ID, "public_key": R.APP_PUB, "latency_ms": latency_ms,
               "backlog": backlog, "server": server}
        self.server = server
        argv = [FakeGitHubProc.binary, json.dumps(cfg)] if server == "c" else \
            [sys.executable, os.path.join(HERE, "fakegh_proc.py"), json.dumps(cfg)]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        hello = self._read()
        self.url, self.pid = hello["url"], hello["pid"]

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the fake GitHub process ended")
        return json.loads(line)

    def cmd(self, **kw):
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        r = self._read()
        if "error" in r:
            raise RuntimeError("fake GitHub: %s" % r["error"])
        return r

    def clear(self):
        self.cmd(cmd="clear")

    def wait(self, n, timeout, idle=0.5):
        return self.cmd(cmd="wait", n=n, timeout=timeout, idle=idle)

    def records(self):
        """[(method, path, status, arrival, answered, client port)], monotonic times."""
        return [tuple(r) for r in self.cmd(cmd="records")["records"]]

    def sample(self):
        return self.cmd(cmd="sample")

    def stop(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.p.stdin.flush()
                self.p.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


# ----------------------------------------------------------------------------- wrk


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m|h)$", text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def parse_wrk(out):
    r = {"rps": None, "p50": None, "p75": None, "p90": None, "p99": None, "requests": None,
         "seconds": None, "non2xx": 0, "sock_errors": 0, "timeouts": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    for pct in ("50", "75", "90", "99"):
        m = re.search(r"^\s+%s%%\s+(\S+)" % pct, out, re.M)
        if m:
            r["p" + pct] = _to_ms(m.group(1))
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if m:
        r["requests"] = int(m.group(1))
        r["seconds"] = _to_ms(m.group(2) + m.group(3)) / 1000.0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["sock_errors"] = sum(int(x) for x in m.groups()[:3])
        r["timeouts"] = int(m.group(4))
    return r


class Bench:
    def __init__(self, args):
        self.args = args
        self.crcr = os.path.abspath(args.crcr)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.out_dir = os.path.join(HERE, "out", stamp)
        os.makedirs(self.out_dir, exist_ok=True)
        self.commands = []  # (what, command line)
        self.results = {}
        self.notes = []
        self.t_start = time.monotonic()
        try:
            self.t0_wall = float(os.environ.get("BENCH_T0") or time.time())
        except ValueError:
            self.t0_wall = time.time()
        self.run_id = stamp.replace("-", "")
        self.perf_ok = self._perf_tracepoints_ok()
        self.stores = [x for x in args.store.split(",") if x]
        self.target_counts = [int(x) for x in args.targets.split(",") if x]
        self.pg = None
        self.section_seconds = {}
        self.baseline = None
        if args.baseline:
            with open(args.baseline) as f:
                self.baseline = json.load(f)

    # -- infrastructure

    def _perf_tracepoints_ok(self):
        if not shutil.which("perf"):
            return False
        try:
            p = subprocess.run(["perf", "stat", "-x", ",", "-e", "syscalls:sys_enter_fdatasync",
                                "true"], capture_output=True, text=True, timeout=20)
            return p.returncode == 0 and "not supported" not in p.stderr and \
                "<not" not in p.stderr
        except (OSError, subprocess.TimeoutExpired):
            return False

    def record(self, what, argv, env=None):
        """Remembers a command for RESULTS.md: repo-relative paths, ephemeral ports as PORT."""
        shown = " ".join(shlex.quote(a) for a in argv)
        if env:
            shown = " ".join("%s=%s" % (k, shlex.quote(str(v))) for k, v in env.items()) + " " + \
                shown
        shown = shown.replace(ROOT + os.sep, "")
        shown = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", shown)
        self.commands.append((what, shown))

    def write_file(self, name, data):
        path = os.path.join(self.out_dir, name)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def wrk(self, what, url, script, conns, duration, env, timeout_s=10, stop_when=None):
        """Runs wrk for `duration` s and parses its summary. With `stop_when` (a callable polled
        every 0.5 s) wrk is interrupted (SIGINT: it still prints its summary) once it returns
        true: wrk's own -d sleeps the full duration even after every thread has stopped."""
        return self.wrk_finish(self.wrk_start(what, url, script, conns, duration, env, timeout_s),
                               stop_when)

    def wrk_start(self, what, url, script, conns, duration, env, timeout_s=10):
        """Starts wrk and returns a handle for wrk_finish (two loads in the same window)."""
        argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % duration, "--latency",
                "--timeout", "%ds" % timeout_s, "-s", script, url]
        self.record(what, argv, {k: v for k, v in env.items()
                                 if k not in ("CB_TOKEN", "REPLAY_AUTH")})
        full_env = dict(os.environ)
        full_env.update({k: str(v) for k, v in env.items()})
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=full_env)
        return {"p": p, "what": what, "deadline": time.monotonic() + duration + timeout_s + 60}

    def wrk_finish(self, h, stop_when=None):
        p, what, deadline = h["p"], h["what"], h["deadline"]
        try:
            if stop_when is not None:
                while p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                    if stop_when():
                        p.send_signal(signal.SIGINT)
                        break
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise RuntimeError("wrk did not finish (%s)" % what)
        name = re.sub(r"[^A-Za-z0-9]+", "_", what).strip("_")
        self.write_file("wrk_%s.txt" % name, out + err)
        if p.returncode not in (0, -signal.SIGINT):
            raise RuntimeError("wrk failed (%s): %s" % (what, err[-2000:]))
        r = parse_wrk(out)
        r["raw"] = out
        return r

    def relay(self, env=None, allowlist=INGEST_ALLOWLIST, tmpfs=False, binary=None, args=None,
              start_timeout=15.0, store="sqlite", share_with=None):
        """A Relay (tests/support/relay.py) whose store is the bench's own: with store "sqlite" a
        SQLite file in the temp dir (the disk the fsync probe measures) or on tmpfs, whatever
        store the test support would pick; with "pg" a fresh database on the run's PostgreSQL
        server (see PgServer), or `share_with`'s database (a second instance on the same store:
        close it before `share_with`, whose close drops the database)."""
        d = tempfile.mkdtemp(prefix="crcr-bench-", dir="/dev/shm" if tmpfs else None)
        base = {"CRCR_LOG": "warn", "CRCR_STORE": "sqlite:" + os.path.join(d, "crcr.db")}
        pg_name = None
        if share_with is not None:
            base["CRCR_STORE"] = share_with.bench_store_uri
        elif store == "pg":
            if not self.pg:
                shutil.rmtree(d, ignore_errors=True)
                raise RuntimeError("no PostgreSQL server for the pg store")
            pg_name, base["CRCR_STORE"] = self.pg.create_db()
        # BENCH_RELAY_ENV="K=V,K=V": extra settings for every relay of the run (A/B comparisons,
        # e.g. CRCR_HTTP_THREADS=2); recorded with the run's commands.
        for kv in filter(None, os.environ.get("BENCH_RELAY_ENV", "").split(",")):
            k, _, v = kv.partition("=")
            base[k.strip()] = v
        base.update(env or {})
        try:
            rl = R.Relay(env=base, allowlist=allowlist, secret=SECRET,
                         binary=binary or self.crcr, args=args or ("serve",),
                         start_timeout=start_timeout)
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            if pg_name:
                self.pg.drop_db(pg_name)
            raise
        rl.bench_db = os.path.join(d, "crcr.db")
        rl.bench_store_uri = base["CRCR_STORE"]
        rl.bench_dir = d
        rl.bench_store = store
        rl.bench_pg_name = pg_name
        rl.bench_psql = None
        if store == "pg":
            rl.bench_psql = PsqlSession(self.pg.psql, base["CRCR_STORE"])
        return rl

    def close_relay(self, rl):
        rl.close()
        if getattr(rl, "bench_psql", None):
            rl.bench_psql.close()
        if getattr(rl, "bench_pg_name", None):
            self.pg.drop_db(rl.bench_pg_name)
        shutil.rmtree(rl.bench_dir, ignore_errors=True)

    def store_shown(self, store, tmpfs=False):
        """CRCR_STORE as the recorded commands show it."""
        if store == "pg":
            return "postgresql://<bench PostgreSQL>/crcr_bench_<id>"
        return "sqlite:%s/crcr.db" % ("/dev/shm/<tmp>" if tmpfs else "<tmp>")

    def db(self, rl):
        con = sqlite3.connect(rl.bench_db, timeout=30)
        return con

    def db_rows(self, rl, sql, params=()):
        """Rows of one query on the relay's store, SQLite or PostgreSQL (`?` placeholders)."""
        if rl.bench_store == "pg":
            parts = sql.split("?")
            if len(parts) - 1 != len(params):
                raise ValueError("placeholders/params mismatch in %r" % sql)
            text = parts[0] + "".join(sql_literal(v) + rest for v, rest in zip(params, parts[1:]))
            return rl.bench_psql.rows(text)
        con = self.db(rl)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def db_scalar(self, rl, sql, params=()):
        rows = self.db_rows(rl, sql, params)
        return rows[0][0] if rows else None

    def wait_outbox_drained(self, rl, limit_s):
        """Waits until no outbox row is queued or running; returns (drained, left, seconds)."""
        t0 = time.monotonic()
        left = None
        while time.monotonic() - t0 < limit_s:
            left = self.db_scalar(rl, "SELECT count(*) FROM outbox WHERE state IN "
                                      "('queued','running')")
            if left == 0:
                return True, 0, time.monotonic() - t0
            time.sleep(0.2)
        return False, left, time.monotonic() - t0

    def start_peer(self):
        env = dict(os.environ)
        env.update({"PEER_SECRET": SECRET, "PEER_PORT": "0"})
        argv = ["node", os.path.join(PEER_DIR, "server.js")]
        self.record("peer server", argv, {"PEER_SECRET": "<secret>", "PEER_PORT": "0"})
        p = subprocess.Popen(argv, cwd=PEER_DIR, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        line = p.stdout.readline()
        m = re.match(r"listening (\d+)", line or "")
        if not m:
            p.kill()
            raise RuntimeError("peer did not start: %r" % line)
        threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
        p.port = int(m.group(1))
        return p

    @staticmethod
    def stop_proc(p):
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def send_webhook(self, port, body, delivery, event="pull_request", conn=None):
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
                   "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(body),
                   "User-Agent": "GitHub-Hookshot/bench"}
        own = conn is None
        c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            c.request("POST", "/github/webhook", body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            return r.status, data
        finally:
            if own:
                c.close()

    # ----------------------------------------------------------------------------- fsync probe

    def fsync_probe(self, directory, n=50):
        """Median ms of append 30 KB + fdatasync in `directory` (the store's disk)."""
        path = os.path.join(directory, "fsync-probe.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            chunk = os.urandom(PAYLOAD_BYTES)
            times = []
            for _ in range(n):
                t = time.perf_counter()
                os.write(fd, chunk)
                os.fdatasync(fd)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            return times[len(times) // 2], times[int(len(times) * 0.9)]
        finally:
            os.close(fd)
            os.unlink(path)

    # ----------------------------------------------------------------------------- 1. ingest

    def ingest(self):
        a = self.args
        body = padded_payload("pull_request.opened")
        body_path = self.write_file("pull_request.opened.30512.json", body)
        ignored_body = padded_payload("pull_request.assigned")
        ignored_path = self.write_file("pull_request.assigned.30512.json", ignored_body)
        script = os.path.join(HERE, "webhook.lua")
        res = self.results.setdefault("ingest", {})
        res["fsync_ms"] = self.fsync_probe(tempfile.gettempdir())
        log("fsync probe (30 KB append + fdatasync, %s): median %.2f ms, p90 %.2f ms"
            % (tempfile.gettempdir(), *res["fsync_ms"]))
        stores = self.stores

        peer = self.start_peer()
        for store in stores:
            self.record("crcr server (ingest, %s store; a fresh relay per run)" % store,
                        [self.crcr, "serve"],
                        {"CRCR_STORE": self.store_shown(store), "ALLOWLIST_FILE": "<4 repos>",
                         "CRCR_LOG": "warn", "GITHUB_APP_SECRET": "<secret>",
                         "CRCR_LISTEN": "127.0.0.1:PORT"})
        try:
            for conns in (16, 64):
                # The peer first, then a fresh crcr per store (nothing of crcr runs during the
                # peer's run, nothing of the peer during crcr's).
                env = {"BENCH_BODY": body_path, "BENCH_SIG": sign(body),
                       "BENCH_PREFIX": "peer%d-%s" % (conns, self.run_id)}
                w = self._peer_run("ingest peer c%d" % conns, peer, script, conns, a.duration,
                                   env)
                res["peer_c%d" % conns] = w
                log("peer  c%-3d %s req/s p50 %s p99 %s non2xx %d (load %s)"
                    % (conns, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                       w["non2xx"], w["loadavg"]))
                for store in stores:
                    rl = self.relay(store=store)
                    try:
                        rl.start()
                        pid = rl.proc.pid
                        time.sleep(0.5)
                        if store == "sqlite":
                            res.setdefault("rss_idle_kib", proc_status(pid)["VmRSS"])
                            res.setdefault("threads", proc_threads(pid))
                        prefix = "crcr%d%s-%s" % (conns, store, self.run_id)
                        w = self._ingest_run(
                            "ingest crcr c%d%s" % (conns, "" if store == "sqlite" else " (pg)"),
                            rl, script, conns, a.duration, dict(env, BENCH_PREFIX=prefix),
                            "perf_ingest_%s_c%d.csv" % (store, conns), a.drain, prefix)
                        res[self._k("crcr_c%d" % conns, store)] = w
                        log("crcr  c%-3d %-6s %s req/s p50 %s p99 %s non2xx %d stored %d; CPU "
                            "per stored webhook incl. outbox %s (%s) (load %s)"
                            % (conns, store, fmt_num(w["rps"]), fmt_ms(w["p50"]),
                               fmt_ms(w["p99"]), w["non2xx"], w["stored"],
                               fmt_ms(w.get("cpu_per_webhook_ms")),
                               "drained" if w["drained"][0] else
                               "%s rows left" % w["drained"][1], w["loadavg"]))
                    finally:
                        self.close_relay(rl)

            # PostgreSQL with the webhooks of 64 different pull requests: every ingest of one PR
            # takes that PR's lock (its supersession, spec 3.12), so the rows above, one PR
            # over and over, measure that lock; pytorch/pytorch's webhooks are of many PRs.
            if "pg" in stores:
                lines = []
                for n in range(1, DISTINCT_PRS + 1):
                    b = pr_variant(body, n)
                    lines.append("%s %s\n" % (self.write_file("pr%d.json" % n, b), sign(b)))
                list_path = self.write_file("distinct-prs.txt", "".join(lines).encode())
                rl = self.relay(store="pg")
                try:
                    rl.start()
                    time.sleep(0.5)
                    prefix = "distinct-%s" % self.run_id
                    w = self._ingest_run(
                        "ingest crcr c64 (pg, %d PRs)" % DISTINCT_PRS, rl, script, 64,
                        a.duration, {"BENCH_BODIES": list_path, "BENCH_PREFIX": prefix},
                        "perf_ingest_pg_distinct_c64.csv", a.drain, prefix)
                    res["crcr_c64_pg_distinct"] = w
                    log("crcr  c64 pg, %d distinct PRs: %s req/s p50 %s p99 %s non2xx %d stored "
                        "%d; CPU per stored webhook incl. outbox %s (load %s)"
                        % (DISTINCT_PRS, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                           w["non2xx"], w["stored"], fmt_ms(w.get("cpu_per_webhook_ms")),
                           w["loadavg"]))
                finally:
                    self.close_relay(rl)

            # App mode: the production work. The same webhooks, 64 connections, on a relay with
            # App credentials behind the fake GitHub (its own process, no added latency): each
            # webhook's 4 rows are dispatched (and check runs created where the level asks) instead
            # of being written down as dry-run bodies. A third of the duration (at least 3 s) and
            # three times the drain: the fake (Python, a core of its own) is slower than the
            # relay, and the CPU per webhook counts until every row is done. APP_REPEATS loads,
            # each on a fresh relay and fake; the row shows the median load (by CPU per webhook)
            # and every load's figure: one binary's single loads spread over 0.49-0.67 ms within
            # minutes on the 2-CPU VM (bench/RESULTS.md), more than the differences measured.
            # No `perf stat` is attached to these loads (their counts were never shown), as none
            # is to the peer's: attached, it added 2-4 % to the relay's CPU per webhook (16
            # alternated pairs, bench/RESULTS.md, 2026-12-05).
            if "sqlite" in stores:
                loads = [self._app_ingest_once(script, env, rep) for rep in range(APP_REPEATS)]
                by_cpu = sorted(loads, key=lambda x: x.get("cpu_per_webhook_ms") or 1e9)
                w = dict(by_cpu[len(by_cpu) // 2])
                w["repeats"] = [{"cpu_per_webhook_ms": x.get("cpu_per_webhook_ms"),
                                 "drained": x["drained"][0], "rps": x["rps"],
                                 "stored": x["stored"], "loadavg": x["loadavg"]}
                                for x in loads]
                res["crcr_c64_app"] = w

            # Ignored event (verify + parse, nothing stored), 64 connections, against the peer
            # doing its whole work (verify, JSON.parse, emit) on the same body.
            env = {"BENCH_BODY": ignored_path, "BENCH_SIG": sign(ignored_body),
                   "BENCH_EVENT": "pull_request", "BENCH_PREFIX": "ign-%s" % self.run_id}
            w = self._peer_run("ignored event peer c64", peer, script, 64, a.duration, env)
            res["ignored_peer"] = w
            rl = self.relay()
            try:
                rl.start()
                pid = rl.proc.pid
                cpu0 = proc_cpu_s(pid)
                la = loadavg()
                with RssSampler(pid) as smp:
                    w = self.wrk("ignored event crcr c64", rl.url + "/github/webhook", script,
                                 64, a.duration, env)
                w["cpu_s"] = proc_cpu_s(pid) - cpu0
                w["rss_peak_kib"], w["hwm_kib"] = smp.peak_kib, proc_status(pid)["VmHWM"]
                w["loadavg"] = la
                w["stored"] = self.db_scalar(rl, "SELECT count(*) FROM deliveries")
                res["ignored_crcr"] = w
                log("ignored event c64: crcr %s req/s (p99 %s), peer %s req/s (p99 %s); stored %d"
                    % (fmt_num(w["rps"]), fmt_ms(w["p99"]), fmt_num(res["ignored_peer"]["rps"]),
                       fmt_ms(res["ignored_peer"]["p99"]), w["stored"]))
            finally:
                self.close_relay(rl)
        finally:
            self.stop_proc(peer)

        if not a.no_diag:
            # Diagnostic ladder at 64 connections: where does crcr's time go?
            diag = res.setdefault("diag", {})
            ladder = [
                ("ping (HTTP + HMAC, no parse)", "ping", body_path, body, False),
                ("durable, store on tmpfs (+ SQLite, no fsync)", "pull_request", body_path, body,
                 True),
            ]
            for label, event, path, b, tmpfs in ladder:
                rl = self.relay(tmpfs=tmpfs)
                try:
                    rl.start()
                    pid = rl.proc.pid
                    env = {"BENCH_BODY": path, "BENCH_SIG": sign(b), "BENCH_EVENT": event,
                           "BENCH_PREFIX": "diag-%s" % self.run_id}
                    cpu0 = proc_cpu_s(pid)
                    with PerfStat(pid, os.path.join(self.out_dir, "perf_diag_%d.csv"
                                                    % len(diag)), self.perf_ok) as ps:
                        w = self.wrk("diag crcr c64 %s" % label, rl.url + "/github/webhook",
                                     script, 64, a.diag_duration, env)
                    w["cpu_s"] = proc_cpu_s(pid) - cpu0
                    w["perf"] = ps.counts
                    w["loadavg"] = loadavg()
                    diag[label] = w
                    log("diag  %-45s %s req/s p50 %s p99 %s" % (
                        label, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"])))
                finally:
                    self.close_relay(rl)
        for store in stores:
            self.ingest_counts(body, store)

    def _peer_run(self, what, peer, script, conns, duration, env):
        cpu0 = proc_cpu_s(peer.pid)
        la = loadavg()
        with RssSampler(peer.pid) as s:
            w = self.wrk(what, "http://127.0.0.1:%d/github/webhook" % peer.port, script, conns,
                         duration, env)
        w["cpu_s"] = proc_cpu_s(peer.pid) - cpu0
        w["rss_peak_kib"], w["hwm_kib"] = s.peak_kib, proc_status(peer.pid)["VmHWM"]
        w["loadavg"] = la
        if w.get("requests"):
            w["cpu_per_webhook_ms"] = w["cpu_s"] / w["requests"] * 1000
        return w

    def _app_ingest_once(self, script, env, rep):
        """One App-mode ingest load (see ingest): a fresh fake GitHub and relay, 64 connections,
        a third of the duration (at least 3 s), the outbox drained. Returns the load's figures."""
        a = self.args
        gh = FakeGitHubProc(0, a.fake_server)
        try:
            app_env = {"GITHUB_APP_ID": str(APP_ID), "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
                       "GITHUB_API_URL": gh.url}
            if rep == 0:
                self.record("crcr server (ingest, App mode, sqlite store)", [self.crcr, "serve"],
                            dict(app_env, GITHUB_API_URL="<fake GitHub, latency_ms=0>",
                                 ALLOWLIST_FILE="<4 repos>", CRCR_LOG="warn",
                                 GITHUB_APP_SECRET="<secret>", CRCR_STORE="sqlite:<disk>"))
            rl = self.relay(env=app_env)
            try:
                rl.start()
                time.sleep(0.5)
                prefix = "app%d-%s" % (rep, self.run_id)
                fcpu0 = proc_cpu_s(gh.pid)
                w = self._ingest_run(
                    "ingest crcr c64 (App mode, load %d of %d)" % (rep + 1, APP_REPEATS), rl,
                    script, 64, max(3, a.duration // 3), dict(env, BENCH_PREFIX=prefix),
                    "perf_ingest_app_c64_%d.csv" % rep, 3 * a.drain, prefix, traced=False)
                w["fake_cpu_s"] = proc_cpu_s(gh.pid) - fcpu0
                recs = gh.records()
                w["api_calls"] = len(recs)
                w["api_non2xx"] = sum(1 for r in recs if not 200 <= r[2] < 300)
                log("crcr  c64 App mode, load %d of %d: %s req/s p50 %s p99 %s non2xx %d stored "
                    "%d; %d API calls (%.2f per webhook, %d not 2xx); CPU per stored webhook "
                    "incl. its requests %s (%s) (load %s)"
                    % (rep + 1, APP_REPEATS, fmt_num(w["rps"]), fmt_ms(w["p50"]),
                       fmt_ms(w["p99"]), w["non2xx"], w["stored"], w["api_calls"],
                       w["api_calls"] / max(1, w["stored"]), w["api_non2xx"],
                       fmt_ms(w.get("cpu_per_webhook_ms")),
                       "drained" if w["drained"][0] else
                       "%s rows left" % w["drained"][1], w["loadavg"]))
                return w
            finally:
                self.close_relay(rl)
        finally:
            gh.stop()

    def _ingest_run(self, what, rl, script, conns, duration, env, perf_name, drain_s, prefix,
                    traced=True):
        """One durable ingest load on a fresh relay: wrk for `duration` s, then the outbox drained
        (at most `drain_s` s). CPU and perf counts cover both, so that a stored webhook's cost
        includes the (dry-run) work of its outbox rows. With traced=False no `perf stat` is
        attached (no counts): its hooks on every syscall and context switch of the relay's
        threads are CPU the relay is charged for, which the peer's loads never carry."""
        pid = rl.proc.pid
        cpu0 = proc_cpu_s(pid)
        la = loadavg()
        with RssSampler(pid) as smp, PerfStat(pid, os.path.join(self.out_dir, perf_name),
                                              self.perf_ok and traced) as ps:
            w = self.wrk(what, rl.url + "/github/webhook", script, conns, duration, env)
            w["cpu_wrk_s"] = proc_cpu_s(pid) - cpu0
            w["outbox_left"] = self.db_scalar(
                rl, "SELECT count(*) FROM outbox WHERE state IN ('queued','running')")
            w["drained"] = self.wait_outbox_drained(rl, drain_s)
            w["cpu_s"] = proc_cpu_s(pid) - cpu0
        w["rss_peak_kib"], w["hwm_kib"] = smp.peak_kib, proc_status(pid)["VmHWM"]
        w["loadavg"] = la
        w["perf"] = ps.counts
        w["stored"] = self.db_scalar(
            rl, "SELECT count(*) FROM deliveries WHERE delivery_id LIKE ?", (prefix + "-%",))
        w["rows"] = self.db_scalar(
            rl, "SELECT count(*) FROM outbox WHERE delivery_id LIKE ?", (prefix + "-%",))
        w["store"] = rl.bench_store
        if w["stored"]:
            w["cpu_per_webhook_ms"] = w["cpu_s"] / w["stored"] * 1000
            w["cpu_wrk_per_webhook_ms"] = w["cpu_wrk_s"] / w["stored"] * 1000
        return w

    def ingest_counts(self, body, store="sqlite", n=100):
        """Per-webhook syscall and CPU counts: n webhooks sent one at a time to a fresh relay,
        the outbox drained (dry-run), all under perf stat. Counts, so speed-independent."""
        res = self.results["ingest"]
        rl = self.relay(store=store)
        try:
            rl.start()
            pid = rl.proc.pid
            conn = http.client.HTTPConnection("127.0.0.1", rl.port, timeout=30)
            cpu0 = proc_cpu_s(pid)
            with PerfStat(pid, os.path.join(self.out_dir, "perf_sequential_%s.csv" % store),
                          self.perf_ok) as ps:
                t0 = time.monotonic()
                for i in range(n):
                    st, _ = self.send_webhook(rl.port, body, "seq-%s-%d" % (self.run_id, i),
                                              conn=conn)
                    if st != 202:
                        raise RuntimeError("sequential webhook answered %d" % st)
                t_ingest = time.monotonic() - t0
                drained = self.wait_outbox_drained(rl, self.args.drain)
                time.sleep(0.3)
            cpu = proc_cpu_s(pid) - cpu0
            conn.close()
            res[self._k("sequential", store)] = {
                "n": n, "seconds": t_ingest, "per_webhook_ms": t_ingest / n * 1000,
                "perf": ps.counts, "drained": drained, "targets": 4, "cpu_ms": cpu / n * 1000}
            c = ps.counts
            log("per webhook (%s, sequential, incl. outbox dry-run of 4 targets): %s fdatasync, "
                "%s pwrite, %s futex, %.2f ms CPU"
                % (store, "%.1f" % (c["syscalls:sys_enter_fdatasync"] / n)
                   if "syscalls:sys_enter_fdatasync" in c else "-",
                   "%.0f" % (c["syscalls:sys_enter_pwrite64"] / n)
                   if "syscalls:sys_enter_pwrite64" in c else "-",
                   "%.0f" % (c["syscalls:sys_enter_futex"] / n)
                   if "syscalls:sys_enter_futex" in c else "-",
                   (c["task-clock"] / n) if "task-clock" in c else cpu / n * 1000))
        finally:
            self.close_relay(rl)

    # ----------------------------------------------------------------------------- ingest targets

    def ingest_targets(self):
        """Durable ingest with 1, 10 and 100 allowlisted targets (dry-run, SQLite on disk): how
        the cost of a stored webhook grows with the rows it queues."""
        a = self.args
        res = self.results.setdefault("ingest_targets", {})
        body = padded_payload("pull_request.opened")
        body_path = self.write_file("pull_request.opened.30512.json", body)
        script = os.path.join(HERE, "webhook.lua")
        for n in self.target_counts:
            allowlist = "L1:\n" + "".join("  - oot-vendor%03d/pytorch-backend-ci\n" % i
                                          for i in range(n))
            self.record("crcr server (ingest_targets, %d targets)" % n, [self.crcr, "serve"],
                        {"CRCR_STORE": self.store_shown("sqlite"),
                         "ALLOWLIST_FILE": "<%d repos, L1>" % n, "CRCR_LOG": "warn"})
            for conns in (16, 64):
                rl = self.relay(allowlist=allowlist)
                try:
                    rl.start()
                    prefix = "tg%d-%d-%s" % (n, conns, self.run_id)
                    env = {"BENCH_BODY": body_path, "BENCH_SIG": sign(body),
                           "BENCH_PREFIX": prefix}
                    w = self._ingest_run("ingest_targets crcr %d targets c%d" % (n, conns), rl,
                                         script, conns, a.targets_duration, env,
                                         "perf_targets_%d_c%d.csv" % (n, conns),
                                         a.targets_drain, prefix)
                    w["targets"] = n
                    res["t%d_c%d" % (n, conns)] = w
                    log("targets %3d c%-3d %s req/s p50 %s p99 %s stored %d rows %d; CPU per "
                        "stored webhook incl. its rows %s (%s)"
                        % (n, conns, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                           w["stored"] or 0, w["rows"] or 0,
                           fmt_ms(w.get("cpu_per_webhook_ms")),
                           "drained in %.1f s" % w["drained"][2] if w["drained"][0] else
                           "%s rows left after %.0f s" % (w["drained"][1], w["drained"][2])))
                finally:
                    self.close_relay(rl)

    # ----------------------------------------------------------------------------- 2. fan-out

    def fanout(self):
        # (MAX_DISPATCH_WORKERS or None for the default, store on tmpfs, store): the default
        # settings; more workers than repos; the same without fsync cost; PostgreSQL.
        configs = [(None, False, "sqlite")]
        if not self.args.no_diag:
            configs += [(128, False, "sqlite"), (None, True, "sqlite"), (128, True, "sqlite")]
        if "pg" in self.stores:
            configs += [(None, False, "pg"), (None, False, "pg2")]
        if "sqlite" not in self.stores:
            configs = [c for c in configs if c[2] != "sqlite"]
        res = self.results.setdefault("fanout", {})
        res["runs"] = self._fanout_series(FANOUT_REPOS, configs, "fanout", res)

    def fanout1000(self):
        configs = [(None, False, "sqlite")]
        if not self.args.no_diag:
            configs.append((1024, False, "sqlite"))  # the most the relay allows: one round
        if "pg" in self.stores:
            configs += [(None, False, "pg"), (None, False, "pg2")]
        if "sqlite" not in self.stores:
            configs = [c for c in configs if c[2] != "sqlite"]
        res = self.results.setdefault("fanout1000", {})
        res["runs"] = self._fanout_series(FANOUT1000_REPOS, configs, "fanout1000", res,
                                          calibrate=True)

    def _fanout_series(self, n, configs, name, res, calibrate=False):
        """Fan-outs of one webhook to n allowlisted repos of n owners (L1, one installation
        each), App mode, behind the fake GitHub (its own process, +50 ms per request): a cold
        one on a fresh relay, then warm ones (3 for the default settings, 1 otherwise). Store
        "pg2": two instances on one PostgreSQL database, the webhook sent to the first; both
        carry out rows, within one GitHub budget (CRCR_GITHUB_CONCURRENCY) together."""
        fmt = "oot-vendor%03d/pytorch-backend-ci" if n <= 1000 else "oot-vendor%05d/pytorch-ci"
        repos = [fmt % i for i in range(n)]
        allowlist = "L1:\n" + "".join("  - %s\n" % r for r in repos)
        body = padded_payload("pull_request.opened")
        gh = FakeGitHubProc(FANOUT_LATENCY_MS, self.args.fake_server)
        runs = []
        sample = None
        try:
            for workers, tmpfs, store in configs:
                env = {"GITHUB_APP_ID": str(APP_ID), "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
                       "GITHUB_API_URL": gh.url}
                if workers:
                    env["MAX_DISPATCH_WORKERS"] = str(workers)
                where = store if store in ("pg", "pg2") else ("tmpfs" if tmpfs else "disk")
                wname = str(workers) if workers else "default"
                rl = self.relay(env=env, allowlist=allowlist, tmpfs=tmpfs,
                                store="pg" if store == "pg2" else store)
                rl2 = None
                try:
                    rl.start()
                    if store == "pg2":
                        rl2 = self.relay(env=env, allowlist=allowlist, store="pg", share_with=rl)
                        rl2.start()
                    self.record("crcr server (%s, App mode, %s store, %s workers)"
                                % (name, where, wname), [self.crcr, "serve"],
                                dict(env, GITHUB_API_URL="<fake GitHub, latency_ms=%d>"
                                     % FANOUT_LATENCY_MS,
                                     ALLOWLIST_FILE="<%d repos, %d owners>" % (n, n),
                                     CRCR_STORE=self.store_shown(store, tmpfs),
                                     CRCR_LOG="warn"))
                    kinds = ["cold", "warm", "warm", "warm"] if workers is None else \
                        ["cold", "warm"]
                    if workers is None and n == FANOUT_REPOS:  # new commits: supersession
                        kinds += ["new head", "new head"]
                    if store == "pg2":  # each instance mints its own tokens: both must be warm
                        kinds[1:1] = ["warm-up"] * 5  # (an instance takes about half the rows)
                    for k, kind in enumerate(kinds):
                        with PerfStat(rl.proc.pid, os.path.join(
                                self.out_dir, "perf_%s_%s_%s_%d.csv" % (name, wname, where, k)),
                                self.perf_ok) as ps:
                            sent0 = [self._api_calls(x) for x in (rl, rl2) if x]
                            r = self._fanout_once(rl, gh, new_head_payload(k) if kind ==
                                                  "new head" else body, "%s-%s-%s-%s-%d" % (
                                name, self.run_id, wname, where, k), n)
                        r.update(kind=kind, workers=wname, store=where, n=n,
                                 fdatasync=ps.counts.get("syscalls:sys_enter_fdatasync"),
                                 hwm_kib=max(proc_status(x.proc.pid)["VmHWM"]
                                             for x in (rl, rl2) if x))
                        if rl2:  # GitHub requests each instance sent
                            r["calls_by_instance"] = [self._api_calls(x) - c0 for x, c0 in
                                                      zip((rl, rl2), sent0)]
                        runs.append(r)
                        log("%s %-4s workers %-7s %-5s: 202 in %s, dispatch %d answered at %s; "
                            "%.2f API calls/dispatch (%s%s); fake overhead p50 %s p99 %s, added "
                            "<= %s, busy %.0f%%, peak in flight %d%s"
                            % (name, kind, wname, where, fmt_ms(r["ack_ms"]), n,
                               fmt_ms(r["t_last_ms"]), r["calls_per_dispatch"], r["by_kind"],
                               "; by instance %s" % r["calls_by_instance"]
                               if "calls_by_instance" in r else "",
                               fmt_ms(r["fake_p50_ms"]), fmt_ms(r["fake_p99_ms"]),
                               fmt_ms(r["fake_added_ms"]),
                               100 * (r["fake_busy"] or 0), r["fake_peak_inflight"],
                               "" if r["fake_ok"] else "; FAKE GITHUB SLOW: " +
                               ", ".join(r["fake_problems"])))
                    if calibrate and sample is None:
                        sample = gh.sample()
                finally:
                    if rl2:
                        self.close_relay(rl2)
                    self.close_relay(rl)
                    gh.clear()
            if calibrate and sample:
                peaks = [r["fake_peak_inflight"] for r in runs if r["workers"] == "default"]
                res["calibration"] = self._fake_calibration(
                    gh, sample, sorted({max(32, max(peaks or [32])), n}))
        finally:
            gh.stop()
        return runs

    @staticmethod
    def _api_calls(rl):
        """crcr_github_api_calls_total of one relay (requests it sent to GitHub)."""
        return int(rl.metric("crcr_github_api_calls_total") or 0)

    def _fanout_once(self, rl, gh, body, delivery, n):
        gh.clear()
        drops0 = tcp_listen_drops()
        fcpu0 = proc_cpu_s(gh.pid)
        t0 = time.monotonic()
        st, _ = self.send_webhook(rl.port, body, delivery)
        ack = time.monotonic()
        if st != 202:
            raise RuntimeError("fan-out webhook answered %d" % st)
        gh.wait(n, timeout=max(60.0, n * 0.2), idle=0.5)
        fake_cpu = proc_cpu_s(gh.pid) - fcpu0
        drops1 = tcp_listen_drops()
        reqs = gh.records()  # (method, path, status, arrival, answered, client port)
        by_kind = {}
        for q in reqs:
            k = ("installation" if q[1].endswith("/installation") else
                 "token" if q[1].endswith("/access_tokens") else
                 "dispatch" if q[1].endswith("/dispatches") else q[1])
            by_kind[k] = by_kind.get(k, 0) + 1
        ok = [q for q in reqs if q[1].endswith("/dispatches") and q[2] == 204]
        t_last = (max(q[4] for q in ok) - t0) * 1000 if len(ok) >= n else None
        answered = [q for q in reqs if q[4] is not None]
        over = sorted((q[4] - q[3]) * 1000 - FANOUT_LATENCY_MS for q in answered)
        # Highest number of requests the fake was serving at once.
        events = sorted([(q[3], 1) for q in reqs] + [(q[4], -1) for q in answered])
        cur = peak = 0
        for _, d in events:
            cur += d
            peak = max(peak, cur)
        arrivals = sorted((q[3] - t0) * 1000 for q in reqs if q[1].endswith("/dispatches"))
        window = (max(q[4] for q in answered) - t0) if answered else None
        busy = fake_cpu / window if window else None
        drops = (drops1 - drops0) if drops0 is not None and drops1 is not None else None
        problems = []
        p99 = pct(over, 99)
        # What the fake added to the figure: a relay connection sends its requests one after the
        # other, so the fake's overheads on one connection add up along it; the longest such
        # chain bounds the delay the fake put on the last answer.
        chains = {}
        for q in answered:
            chains[q[5]] = chains.get(q[5], 0.0) + max(
                0.0, (q[4] - q[3]) * 1000 - FANOUT_LATENCY_MS)
        added = max(chains.values()) if chains else None
        if added is not None and t_last and added > max(FAKE_ADDED_MIN_MS,
                                                        FAKE_ADDED_SHARE * t_last):
            problems.append("it added up to %s (%.0f%%) along one relay connection"
                            % (fmt_ms(added), 100 * added / t_last))
        if busy is not None and busy > FAKE_BUSY_MAX:
            problems.append("busy %.0f%% of a core" % (100 * busy))
        if drops:
            problems.append("%d connections dropped by a full listen queue" % drops)
        non2xx = len([q for q in reqs if q[2] not in (200, 201, 204)])
        return {"ack_ms": (ack - t0) * 1000, "t_last_ms": t_last, "dispatched": len(ok),
                "first_dispatch_ms": arrivals[0] if arrivals else None,
                "last_dispatch_ms": arrivals[-1] if arrivals else None,
                "calls": len(reqs), "calls_per_dispatch": len(reqs) / max(1, len(ok)),
                "by_kind": by_kind,
                "fake_p50_ms": pct(over, 50), "fake_p99_ms": p99,
                "fake_max_ms": over[-1] if over else None, "fake_peak_inflight": peak,
                "fake_cpu_s": fake_cpu, "fake_busy": busy, "listen_drops": drops,
                "fake_added_ms": added, "relay_connections": len(chains),
                "fake_ok": not problems, "fake_problems": problems, "non204": non2xx,
                # the historical key of the 100-repo section
                "t100_ms": t_last}

    def _fake_calibration(self, gh, sample, conns_list):
        """How fast the fake itself answers the relay's dispatches: wrk replays one recorded
        dispatch (same body, same token) at the given connection counts for a few seconds."""
        out = []
        body = base64_decode(sample["body_b64"])
        path = self.write_file("fake_calibration_body.json", body)
        for c in conns_list:
            env = {"REPLAY_PATH": sample["path"], "REPLAY_AUTH": sample["authorization"],
                   "REPLAY_BODY": path}
            gh.clear()
            drops0 = tcp_listen_drops()
            fcpu0 = proc_cpu_s(gh.pid)
            t = time.monotonic()
            w = self.wrk("fake GitHub calibration c%d" % c, gh.url + sample["path"],
                         os.path.join(HERE, "replay.lua"), c, self.args.calib_duration, env,
                         timeout_s=10)
            wall = time.monotonic() - t
            w["fake_busy"] = (proc_cpu_s(gh.pid) - fcpu0) / wall if wall else None
            d1 = tcp_listen_drops()
            w["listen_drops"] = d1 - drops0 if drops0 is not None and d1 is not None else None
            w["conns"] = c
            w["body_bytes"] = len(body)
            gh.clear()
            # A burst of c dispatches cannot be answered faster than c / (its rate).
            w["burst_floor_ms"] = max(FANOUT_LATENCY_MS, c / w["rps"] * 1000) \
                if w.get("rps") else None
            w.pop("raw", None)
            out.append(w)
            log("fake GitHub alone, %d connections: %s dispatches/s, p50 %s p99 %s, busy %.0f%% "
                "of a core, non-2xx %d: a burst of %d takes it >= %s"
                % (c, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                   100 * (w["fake_busy"] or 0), w["non2xx"], c, fmt_ms(w["burst_floor_ms"])))
        return out

    # ----------------------------------------------------------------------------- 3. callbacks

    def callbacks(self):
        a = self.args
        res = self.results.setdefault("callbacks", {})
        issuer = OidcIssuer(os.path.join(DATA, "keys", "oidc.pem")).start()
        body = padded_payload("pull_request.opened")
        # (result key, store, tmpfs, duration)
        variants = []
        if "sqlite" in self.stores:
            variants.append(("disk", "sqlite", False, a.duration))
            if not a.no_diag:
                variants.append(("tmpfs", "sqlite", True, a.diag_duration))
        if "pg" in self.stores:
            variants.append(("pg", "pg", False, a.duration))
        try:
            for name, store, tmpfs, duration in variants:
                env = {"CRCR_OIDC_ISSUERS": issuer.url, "RATE_LIMIT_PER_MIN": "2000000000"}
                rl = self.relay(env=env, tmpfs=tmpfs, store=store)
                try:
                    rl.start()
                    self.record("crcr server (callbacks, %s store)" % name, [self.crcr, "serve"],
                                dict(env, CRCR_OIDC_ISSUERS="<bench OIDC issuer on 127.0.0.1>",
                                     CRCR_STORE=self.store_shown(store, tmpfs),
                                     CRCR_LOG="warn"))
                    delivery, paths = self._callback_templates(rl, body, name)
                    token = issuer.mint(CALLBACK_REPO, lifetime_s=1200)
                    # One pair by hand first: both must answer 200, or the numbers mean nothing.
                    self.post_callbacks(rl.port, paths, token, [1])
                    r = self._callbacks_run(rl, delivery, paths, token, name, duration)
                    res[name] = r
                    n = r.get("requests") or 1
                    log("callbacks (%s store) c32: %s req/s p50 %s p99 %s non2xx %d; runs "
                        "completed %d, in_progress %d; written per callback %.1f KB (block "
                        "layer %.1f KB)"
                        % (name, fmt_num(r["rps"]), fmt_ms(r["p50"]), fmt_ms(r["p99"]),
                           r["non2xx"], r["states"].get("completed", 0),
                           r["states"].get("in_progress", 0), r["io"][0] / n / 1000,
                           r["io"][1] / n / 1000))
                finally:
                    self.close_relay(rl)
        finally:
            issuer.stop()

    def callbacks_under_ingest(self):
        """Callbacks at 32 connections alone, then on the same relay while a second wrk sends
        durable webhooks (4 targets, dry-run) at --cbi-webhook-conns connections; both wrk
        processes run in the same window."""
        a = self.args
        res = self.results.setdefault("callbacks_under_ingest", {})
        issuer = OidcIssuer(os.path.join(DATA, "keys", "oidc.pem")).start()
        body = padded_payload("pull_request.opened")
        body_path = self.write_file("pull_request.opened.30512.json", body)
        wc = a.cbi_webhook_conns
        try:
            for store in self.stores:
                name = "disk" if store == "sqlite" else store
                env = {"CRCR_OIDC_ISSUERS": issuer.url, "RATE_LIMIT_PER_MIN": "2000000000"}
                rl = self.relay(env=env, store=store)
                try:
                    rl.start()
                    self.record("crcr server (callbacks_under_ingest, %s store)" % name,
                                [self.crcr, "serve"],
                                dict(env, CRCR_OIDC_ISSUERS="<bench OIDC issuer on 127.0.0.1>",
                                     CRCR_STORE=self.store_shown(store), CRCR_LOG="warn"))
                    delivery, paths = self._callback_templates(rl, body, "cbi_" + name)
                    token = issuer.mint(CALLBACK_REPO, lifetime_s=1200)
                    self.post_callbacks(rl.port, paths, token, [1])
                    alone = self._callbacks_run(rl, delivery, paths, token, "cbi_alone_" + name,
                                                a.duration, base=1000000,
                                                what="callbacks_under_ingest: callbacks alone "
                                                     "c32 (%s store)" % name)
                    prefix = "cbi%s-%s" % (name, self.run_id)
                    wh_env = {"BENCH_BODY": body_path, "BENCH_SIG": sign(body),
                              "BENCH_PREFIX": prefix}
                    both = self._callbacks_run(
                        rl, delivery, paths, token, "cbi_both_" + name, a.duration,
                        base=3000000, what="callbacks_under_ingest: callbacks c32 with webhooks "
                                           "c%d (%s store)" % (wc, name),
                        concurrent=("callbacks_under_ingest: webhooks c%d alongside (%s store)"
                                    % (wc, name), rl.url + "/github/webhook",
                                    os.path.join(HERE, "webhook.lua"), wc, wh_env))
                    both["webhooks"]["stored"] = self.db_scalar(
                        rl, "SELECT count(*) FROM deliveries WHERE delivery_id LIKE ?",
                        (prefix + "-%",))
                    res[name] = {"alone": alone, "with_ingest": both, "webhook_conns": wc}
                    wh = both["webhooks"]
                    log("callbacks under ingest (%s): alone %s req/s p50 %s p99 %s; with webhooks "
                        "c%d: %s req/s p50 %s p99 %s non2xx %d, webhooks %s req/s p99 %s "
                        "(stored %s)"
                        % (name, fmt_num(alone["rps"]), fmt_ms(alone["p50"]),
                           fmt_ms(alone["p99"]), wc, fmt_num(both["rps"]), fmt_ms(both["p50"]),
                           fmt_ms(both["p99"]), both["non2xx"], fmt_num(wh["rps"]),
                           fmt_ms(wh["p99"]), fmt_num(wh["stored"])))
                finally:
                    self.close_relay(rl)
        finally:
            issuer.stop()

    def _callback_templates(self, rl, body, name):
        """Sends a webhook, takes the dispatch's client_payload for CALLBACK_REPO from
        `crcr deliveries show ID --format json` and writes the in_progress and completed bodies
        with @@RUN@@ where the run id goes. Returns (delivery, {"ip": path, "done": path})."""
        delivery = "cb-%s-%s" % (self.run_id, name)
        st, _ = self.send_webhook(rl.port, body, delivery)
        if st != 202:
            raise RuntimeError("callback setup webhook answered %d" % st)
        cp = None
        deadline = time.monotonic() + 120
        while cp is None and time.monotonic() < deadline:
            # The dispatch body appears once the (dry-run) outbox worker has built it. The CLI
            # is the crcr binary itself even when the relay runs under valgrind.
            p = subprocess.run([self.crcr, "deliveries", "show", delivery, "--format", "json"],
                               env=rl.child_env(), capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise RuntimeError("crcr deliveries show failed: %s" % p.stderr)
            for row in json.loads(p.stdout).get("outbox", []):
                if row.get("kind") == "dispatch" and row.get("body") and \
                        row.get("target", "").lower() == CALLBACK_REPO:
                    cp = json.loads(row["body"])["client_payload"]
            if cp is None:
                time.sleep(0.2)
        if cp is None:
            raise RuntimeError("no dispatch body for %s in deliveries show" % CALLBACK_REPO)
        sentinel = 987654321987
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        common = {"schema_version": "1", "name": "bench", "run_attempt": 1,
                  "job_name": "bench-job", "check_run_id": None,
                  "url": "https://github.com/%s/actions/runs/1" % CALLBACK_REPO,
                  "run_id": sentinel, "started_at": now}
        ip = dict(cp, workflow=dict(common, status="in_progress", conclusion=None,
                                    completed_at=None))
        done = dict(cp, workflow=dict(common, status="completed", conclusion="success",
                                      completed_at=now,
                                      test_results={"passed": 120, "failed": 0, "skipped": 3}))
        paths = {}
        for tag, doc in (("ip", ip), ("done", done)):
            text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
            assert text.count(str(sentinel)) == 1
            paths[tag] = self.write_file("callback_%s_%s.tmpl.json" % (name, tag),
                                         text.replace(str(sentinel), "@@RUN@@").encode("utf-8"))
        return delivery, paths

    @staticmethod
    def post_callbacks(port, paths, token, run_ids, timeout=30):
        """Sends in_progress then completed for each run id, one at a time; raises on non-200."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            bodies = {}
            for tag in ("ip", "done"):
                with open(paths[tag], "rb") as f:
                    bodies[tag] = f.read()
            for run in run_ids:
                for tag in ("ip", "done"):
                    conn.request("POST", "/github/callback",
                                 body=bodies[tag].replace(b"@@RUN@@", str(run).encode()),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
                    r = conn.getresponse()
                    data = r.read()
                    if r.status != 200:
                        raise RuntimeError("callback %s of run %d answered %d: %s"
                                           % (tag, run, r.status, data[:300]))
        finally:
            conn.close()

    def _callbacks_run(self, rl, delivery, paths, token, name, duration, base=1000000,
                       what=None, concurrent=None):
        """wrk -c32 with callback.lua on the relay, run ids from `base`. `concurrent`: (what,
        url, script, conns, env) of a second wrk started in the same window; its result is
        returned under "webhooks"."""
        env = {"CB_TOKEN": token, "CB_IP": paths["ip"], "CB_DONE": paths["done"],
               "CB_BASE": str(base), "CB_BLOCK": str(CB_BLOCK)}
        pid = rl.proc.pid
        cpu0 = proc_cpu_s(pid)
        io0 = proc_io(pid)
        la = loadavg()
        other = None
        with PerfStat(pid, os.path.join(self.out_dir, "perf_callbacks_%s.csv" % name),
                      self.perf_ok) as ps, RssSampler(pid) as smp:
            h = self.wrk_start(what or "callbacks crcr c32 (%s store)" % name,
                               rl.url + "/github/callback", os.path.join(HERE, "callback.lua"),
                               32, duration, env)
            if concurrent:
                cw, curl, cscript, cconns, cenv = concurrent
                other = self.wrk_start(cw, curl, cscript, cconns, duration, cenv)
            w = self.wrk_finish(h)
            if other:
                w["webhooks"] = self.wrk_finish(other)
                w["webhooks"].pop("raw", None)
        w["cpu_s"] = proc_cpu_s(pid) - cpu0
        w["io"] = [b - a for a, b in zip(io0, proc_io(pid))]
        w["perf"] = ps.counts
        w["loadavg"] = la
        w["rss_peak_kib"], w["hwm_kib"] = smp.peak_kib, proc_status(pid)["VmHWM"]
        w["body_bytes"] = os.path.getsize(paths["done"])
        m = re.search(r"first non-200 answers:\n((?:.+\n?){1,3})", w["raw"])
        w["bad_sample"] = m.group(1).strip() if m else ""
        w["states"] = {st: n for st, n in self.db_rows(
            rl, "SELECT state, count(*) FROM runs WHERE delivery_id=? AND CAST(run_id AS BIGINT)"
                ">=? AND CAST(run_id AS BIGINT)<? GROUP BY state",  # run ids are text (schema 5)
            (delivery, base, base + 1000000))}
        return w

    # ----------------------------------------------------------------------------- 4. memory

    def memory(self):
        a = self.args
        res = self.results.setdefault("memory", {})
        body = small_push_payload()
        path = self.write_file("push.compact.json", body)
        rl = self.relay(tmpfs=True, allowlist=MEMORY_ALLOWLIST)
        points = []
        try:
            rl.start()
            pid = rl.proc.pid
            time.sleep(1.0)
            idle = proc_status(pid)
            points.append((0, idle["VmRSS"], idle["VmHWM"], idle["VmRSS"]))
            script = os.path.join(HERE, "webhook.lua")
            sent = 0
            t0 = time.monotonic()
            chunk = a.memory_total // a.memory_chunks
            budget = self.memory_budget()
            res["budget_s"] = budget
            for k in range(a.memory_chunks):
                remaining = budget - (time.monotonic() - t0)
                if remaining < 5:
                    self.notes.append("memory: stopped after %d webhooks (time budget %.0f s)"
                                      % (sent, budget))
                    break
                goal = (k + 1) * chunk
                env = {"BENCH_BODY": path, "BENCH_SIG": sign(body), "BENCH_EVENT": "push",
                       "BENCH_PREFIX": "mem%d-%s" % (k, self.run_id), "BENCH_MAX": str(chunk)}
                with RssSampler(pid, 0.2) as smp:
                    w = self.wrk("memory chunk", rl.url + "/github/webhook", script, 64,
                                 int(max(5, remaining)), env,
                                 stop_when=self._count_reached(rl, goal))
                sent = self.db_scalar(rl, "SELECT count(*) FROM deliveries")
                stt = proc_status(pid)
                points.append((sent, stt["VmRSS"], stt["VmHWM"], smp.peak_kib))
                log("memory: %7d webhooks stored, VmRSS %d KiB (chunk peak %d KiB), VmHWM %d "
                    "KiB (%s req/s)" % (sent, stt["VmRSS"], smp.peak_kib, stt["VmHWM"],
                                        fmt_num(w["rps"])))
            drained = self.wait_outbox_drained(rl, 60)
            time.sleep(1.0)
            stt = proc_status(pid)
            # What the peaks scale with: open connections (short runs at 16/64/128).
            per_conn = []
            for conns in (16, 64, 128):
                env = {"BENCH_BODY": path, "BENCH_SIG": sign(body), "BENCH_EVENT": "push",
                       "BENCH_PREFIX": "memc%d-%s" % (conns, self.run_id)}
                with RssSampler(pid, 0.1) as smp:
                    self.wrk("memory connections c%d" % conns, rl.url + "/github/webhook",
                             script, conns, 3, env)
                per_conn.append((conns, smp.peak_kib))
                log("memory: %d connections: peak VmRSS %d KiB" % (conns, smp.peak_kib))
            res["per_conn"] = per_conn
            res.update(points=points, after_drain=(stt["VmRSS"], stt["VmHWM"]),
                       drained=drained, seconds=time.monotonic() - t0,
                       body_bytes=len(body), stored=sent,
                       db_bytes=os.path.getsize(rl.bench_db))
        finally:
            self.close_relay(rl)

    def memory_budget(self):
        """Seconds of load the memory section may use: --memory-budget, cut so that the whole
        bench (from BENCH_T0, the start of run.sh, including the build) stays under --total
        with time kept for the sections after it."""
        elapsed = time.time() - self.t0_wall
        later = 0
        if "profile" in self.sections[self.sections.index("memory") + 1:]:
            later = self.args.profile_reserve
        return max(10.0, min(float(self.args.memory_budget),
                             self.args.total - elapsed - later - 15))

    def _count_reached(self, rl, goal):
        """A stop_when for wrk: the store holds `goal` deliveries, or their count has not moved
        for 3 s (the wrk thread stopped itself, some answers were not 202)."""
        state = {"n": -1, "since": time.monotonic()}

        def check():
            n = self.db_scalar(rl, "SELECT count(*) FROM deliveries")
            if n != state["n"]:
                state["n"], state["since"] = n, time.monotonic()
            return n >= goal or time.monotonic() - state["since"] > 3.0

        return check

    # ----------------------------------------------------------------------------- 5. profile

    def profile(self):
        res = self.results.setdefault("profile", {})
        body = padded_payload("pull_request.opened")
        # Hardware counters (perf record -e instructions) are the first choice where the PMU is
        # reachable; on VMs without it callgrind counts instructions instead. Callgrind is used
        # either way here: its counts are exact and repeatable, which is what a note needs.
        res["perf_hw_counters"] = self._perf_hw_ok()
        if not shutil.which("valgrind"):
            res["error"] = "valgrind not installed"
            return
        res["tool"] = "callgrind"
        out = os.path.join(self.out_dir, "callgrind.out")
        n = self.args.profile_n
        args = ["--tool=callgrind", "--callgrind-out-file=" + out, self.crcr, "serve"]
        rl = self.relay(binary=shutil.which("valgrind"), args=args, start_timeout=60)
        self.record("profile (callgrind)", ["valgrind"] + args,
                    {"CRCR_LOG": "warn", "CRCR_STORE": "sqlite:<tmp>/crcr.db"})
        try:
            rl.start()
            conn = http.client.HTTPConnection("127.0.0.1", rl.port, timeout=60)
            t0 = time.monotonic()
            for i in range(n):
                st, _ = self.send_webhook(rl.port, body, "prof-%s-%d" % (self.run_id, i),
                                          conn=conn)
                if st != 202:
                    raise RuntimeError("profile webhook answered %d" % st)
            conn.close()
            res["drained"] = self.wait_outbox_drained(rl, 120)
            res["seconds"] = time.monotonic() - t0
            rl.stop(signal.SIGTERM, timeout=120)
        finally:
            self.close_relay(rl)
        res["n"] = n
        res.update(self._annotate(out, n))
        if self.args.profile_callbacks:
            self.results["profile_callbacks"] = self._profile_callbacks(body)

    def _profile_callbacks(self, body):
        """callgrind over profile_callbacks in_progress/completed pairs sent one at a time."""
        res = {"tool": "callgrind"}
        pairs = self.args.profile_callbacks
        issuer = OidcIssuer(os.path.join(DATA, "keys", "oidc.pem")).start()
        out = os.path.join(self.out_dir, "callgrind.callbacks.out")
        args = ["--tool=callgrind", "--callgrind-out-file=" + out, self.crcr, "serve"]
        env = {"CRCR_OIDC_ISSUERS": issuer.url, "RATE_LIMIT_PER_MIN": "2000000000"}
        rl = self.relay(env=env, binary=shutil.which("valgrind"), args=args, start_timeout=60)
        self.record("profile of callbacks (callgrind)", ["valgrind"] + args,
                    dict(env, CRCR_OIDC_ISSUERS="<bench OIDC issuer on 127.0.0.1>",
                         CRCR_LOG="warn"))
        try:
            rl.start()
            _, paths = self._callback_templates(rl, body, "profile")
            token = issuer.mint(CALLBACK_REPO, lifetime_s=1200)
            self.post_callbacks(rl.port, paths, token, range(1000000, 1000000 + pairs),
                                timeout=60)
            rl.stop(signal.SIGTERM, timeout=120)
        finally:
            self.close_relay(rl)
            issuer.stop()
        res["n"] = 2 * pairs
        res.update(self._annotate(out, 2 * pairs, "callbacks_"))
        return res

    def _perf_hw_ok(self):
        try:
            p = subprocess.run(["perf", "stat", "-e", "instructions", "true"], capture_output=True,
                               text=True, timeout=20)
            return p.returncode == 0 and "not supported" not in p.stderr
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _annotate(self, out, n, prefix=""):
        def run(inclusive):
            p = subprocess.run(["callgrind_annotate", "--inclusive=%s" % inclusive,
                                "--threshold=100", out], capture_output=True, text=True,
                               timeout=120)
            self.write_file("callgrind_%s%s.txt" % (prefix, "incl" if inclusive == "yes" else
                                                   "self"),
                            p.stdout)
            return p.stdout

        def rows(text):
            total = None
            m = re.search(r"^([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", text, re.M)
            if m:
                total = int(m.group(1).replace(",", ""))
            items = []
            for line in text.splitlines():
                mm = re.match(r"^\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(\S.*)$", line)
                if mm and "PROGRAM TOTALS" not in line:
                    fn = mm.group(3)
                    obj = ""
                    mo = re.search(r"\[(.*)\]\s*$", fn)
                    if mo:
                        obj = os.path.basename(mo.group(1))
                        fn = fn[:mo.start()].strip()
                    fn = fn.split(":", 1)[1] if ":" in fn and not fn.startswith("0x") else fn
                    items.append((int(mm.group(1).replace(",", "")), float(mm.group(2)), fn,
                                  obj))
            return total, items

        total, self_rows = rows(run("no"))
        _, incl_rows = rows(run("yes"))
        by_obj = {}
        for ir, _, _, obj in self_rows:
            by_obj[obj or "?"] = by_obj.get(obj or "?", 0) + ir
        incl_crcr = {}
        for ir, _, fn, obj in incl_rows:
            if obj.startswith("crcr") and fn not in incl_crcr:
                incl_crcr[fn] = ir
        return {"total_ir": total, "ir_per_webhook": (total or 0) / max(1, n),
                "self_top": self_rows[:25],
                "incl_top": [r for r in incl_rows if r[3].startswith("crcr")][:25],
                "incl_crcr": incl_crcr,
                "by_object": sorted(by_obj.items(), key=lambda kv: -kv[1])}

    # Functions whose inclusive cost per request makes the breakdown of a profile (the same rows
    # before and after a change). A function missing from a build (inlined, renamed) shows "-".
    INGEST_BREAKDOWN = [
        ("webhook handler (verify, parse, classify, store, answer)", "webhook_handle"),
        ("- HMAC-SHA256 verify", "sig_verify"),
        ("- selective JSON parse", "jv_parse_select"),
        ("- store: ingest (delivery + outbox rows, group commit)", "store_ingest"),
        ("outbox: claims", "store_claim_batch"),
        ("outbox: dry-run job (build the dispatch, token)", "process"),
        ("outbox: finish marks", "store_job_finish"),
        ("outbox: next due / wait for work", "store_next_due"),
    ]
    CALLBACK_BREAKDOWN = [
        ("callback handler", "callback_handle"),
        ("- OIDC verify", "oidc_verify"),
        ("- of which RS256", "jwt_verify_rs256"),
        ("- selective JSON parse", "jv_parse_select"),
        ("- store: run transition (+ rate hit, group commit)", "store_run_apply"),
        ("- store: separate rate hit", "store_rate_hit"),
    ]

    @staticmethod
    def breakdown(prof, spec):
        """[(label, instructions per request or None)] from a profile's inclusive costs, then
        the self cost of the main shared objects."""
        out = []
        n = max(1, prof.get("n") or 1)
        for label, fn in spec:
            ir = prof.get("incl_crcr", {}).get(fn)
            out.append(("%s (`%s`)" % (label, fn), ir / n if ir is not None else None))
        for obj, ir in prof.get("by_object", [])[:6]:
            out.append(("self cost in %s" % obj, ir / n))
        return out

    # ----------------------------------------------------------------------------- report

    # -- figures of a results dict (this run's, or --baseline's) for the summary

    @staticmethod
    def _k(name, store):
        """Result key of a store variant: the SQLite figures keep the historical names."""
        return name if store == "sqlite" else "%s_%s" % (name, store)

    def fig(self, res, what, store="sqlite"):
        """One summary figure from a results dict; None when that run did not measure it."""
        ing = res.get("ingest", {})
        try:
            if what == "ingest_ratio":
                cr, pe = ing[self._k("crcr_c64", store)], ing["peer_c64"]
                return cr["rps"] / pe["rps"]
            if what == "ingest_p99":
                return ing[self._k("crcr_c64", store)]["p99"]
            if what == "cpu_per_webhook":
                w = ing[self._k("crcr_c64", store)]
                return w["cpu_per_webhook_ms"] if w["drained"][0] else None
            if what == "ignored_ratio":
                return ing["ignored_crcr"]["rps"] / ing["ignored_peer"]["rps"]
            if what in ("cb_rps", "cb_p99"):
                w = res["callbacks"]["disk" if store == "sqlite" else store]
                return w["rps" if what == "cb_rps" else "p99"]
            if what.startswith("fanout"):
                section, kind = what.split("_")
                runs = [r for r in res[section]["runs"] if r["kind"] == kind and
                        r["workers"] == "default" and
                        r["store"] == ("disk" if store == "sqlite" else store)]
                return median([r.get("t_last_ms", r.get("t100_ms")) for r in runs])
        except (KeyError, TypeError, ZeroDivisionError, IndexError):
            return None
        return None

    def vs_baseline(self, what, store, higher_better, fmt):
        """(before, verdict) against --baseline: 'not slower' within 10 %, else 'SLOWER'."""
        if not self.baseline:
            return "-", "reported"
        now, before = self.fig(self.results, what, store), self.fig(self.baseline, what, store)
        if now is None or before is None:
            return (fmt(before) if before is not None else "-"), "reported"
        worse = now < before * 0.9 if higher_better else now > before * 1.1
        return fmt(before), ("SLOWER" if worse else "not slower")

    def fanout_verdict(self, section, kind, store, target_ms):
        """(figure, verdict, problems) of the default-settings fan-out runs of one kind. The fake
        GitHub can only make a fan-out slower: a figure within the target is met whatever the
        fake did, and one that misses it even without the time the fake added is missed."""
        runs = [r for r in self.results.get(section, {}).get("runs", [])
                if r["kind"] == kind and r["workers"] == "default" and
                r["store"] == ("disk" if store == "sqlite" else store)]
        if not runs:
            return None, None, []
        if any(r["t_last_ms"] is None for r in runs):
            return None, "MISSED (not every dispatch answered 204)", []
        t = median([r["t_last_ms"] for r in runs])
        mid = min(runs, key=lambda r: abs(r["t_last_ms"] - t))
        problems = mid["fake_problems"]
        added = mid.get("fake_added_ms") or 0.0
        unbounded = any("busy" in p or "listen queue" in p for p in problems)
        if target_ms is None:
            return t, ("reported" if not problems else
                       "UNRELIABLE: fake GitHub slow (%s)" % "; ".join(problems)), problems
        if t <= target_ms:
            return t, "met", problems
        if not problems or (not unbounded and t - added > target_ms):
            return t, "MISSED" + (" (also without the fake's %s)" % fmt_ms(added)
                                  if problems else ""), problems
        return t, "UNRELIABLE: fake GitHub slow (%s)" % "; ".join(problems), problems

    def table(self):
        """The summary rows: (metric, crcr, peer, ratio, target, verdict), the targets of issues
        16 and 26 first, then the figures that show how costs grow."""
        rows = []
        res = self.results
        ing = res.get("ingest", {})
        stores = [st for st in ("sqlite", "pg") if st in self.stores]

        def pgtag(store):
            return "" if store == "sqlite" else " [PostgreSQL]"

        # Durable ingest, 30 KB PR, 4 targets, c64 (and c16 for reference).
        for store in stores:
            for c in (64, 16):
                cr, pe = ing.get(self._k("crcr_c%d" % c, store)), ing.get("peer_c%d" % c)
                if not cr or not pe:
                    continue
                rr = self.fig(res, "ingest_ratio", store) if c == 64 else (
                    cr["rps"] / pe["rps"] if cr.get("rps") and pe.get("rps") else None)
                if c == 64 and store == "sqlite":
                    tgt = ">= %.1fx peer, p99 <= %.0f ms" % (T_INGEST_RATIO, T_INGEST_P99_MS)
                    ver = "met" if rr is not None and rr >= T_INGEST_RATIO and \
                        (cr["p99"] or 1e9) <= T_INGEST_P99_MS else "MISSED"
                elif c == 64:
                    before, ver = self.vs_baseline("ingest_ratio", store, True,
                                                   lambda v: "%.2fx" % v)
                    tgt = "not slower (before: %s)" % before
                else:
                    tgt, ver = "-", "-"
                rows.append(("durable ingest c%d req/s (SQLite on disk, 4 targets)%s"
                             % (c, pgtag(store)) if store == "sqlite" else
                             "durable ingest c%d req/s (4 targets)%s" % (c, pgtag(store)),
                             fmt_num(cr["rps"]), fmt_num(pe["rps"]),
                             "%.2fx" % rr if rr is not None else "-", tgt, ver))
                rows.append(("durable ingest c%d p50 / p99%s" % (c, pgtag(store)),
                             "%s / %s" % (fmt_ms(cr["p50"]), fmt_ms(cr["p99"])),
                             "%s / %s" % (fmt_ms(pe["p50"]), fmt_ms(pe["p99"])),
                             ratio(cr["p99"], pe["p99"]) + " (p99)", "-", "-"))
            cr, pe = ing.get(self._k("crcr_c64", store)), ing.get("peer_c64", {})
            if cr and cr.get("cpu_per_webhook_ms") is not None:
                cpu = cr["cpu_per_webhook_ms"]
                drained = cr["drained"][0]
                figure = ("%.3f ms" % cpu) if drained else \
                    ">= %.3f ms (outbox not drained: %s rows left)" % (cpu, cr["drained"][1])
                if store == "sqlite":
                    tgt = "<= %.2f ms (issue 26)" % T_CPU_PER_WEBHOOK_MS
                    ver = ("met" if cpu <= T_CPU_PER_WEBHOOK_MS else "MISSED") if drained else \
                        "MISSED" if cpu > T_CPU_PER_WEBHOOK_MS else "not measured (not drained)"
                else:
                    before, ver = self.vs_baseline("cpu_per_webhook", store, False,
                                                   lambda v: "%.3f ms" % v)
                    tgt = "not slower (before: %s)" % before
                rows.append(("server CPU per stored webhook incl. the dry-run of its 4 rows, c64%s"
                             % pgtag(store), figure,
                             "%.3f ms" % pe["cpu_per_webhook_ms"]
                             if pe.get("cpu_per_webhook_ms") else "-",
                             ratio(cpu, pe.get("cpu_per_webhook_ms")), tgt, ver))
        ca, pe = ing.get("crcr_c64_app"), ing.get("peer_c64")
        if ca and pe:
            rows.append(("durable ingest c64 req/s, App mode (fake GitHub, dispatching meanwhile)",
                         fmt_num(ca["rps"]), fmt_num(pe["rps"]),
                         ratio(ca["rps"], pe["rps"]), "-", "-"))
            rows.append(("durable ingest c64 p50 / p99, App mode",
                         "%s / %s" % (fmt_ms(ca["p50"]), fmt_ms(ca["p99"])),
                         "%s / %s" % (fmt_ms(pe["p50"]), fmt_ms(pe["p99"])),
                         ratio(ca["p99"], pe["p99"]) + " (p99)", "-", "-"))
            if ca.get("cpu_per_webhook_ms") is not None:
                reps = ca.get("repeats") or []
                each = (" (median of %d loads: %s)" % (len(reps), " / ".join(
                    "%.3f" % r["cpu_per_webhook_ms"] if r["cpu_per_webhook_ms"] is not None
                    else "-" for r in reps))) if len(reps) > 1 else ""
                rows.append(("server CPU per stored webhook incl. its %.2f API calls, App mode "
                             "(no perf stat attached, as to the peer)"
                             % (ca["api_calls"] / max(1, ca["stored"])),
                             ("%.3f ms%s" % (ca["cpu_per_webhook_ms"], each))
                             if ca["drained"][0] else
                             ">= %.3f ms (not drained)%s" % (ca["cpu_per_webhook_ms"], each),
                             "%.3f ms" % pe["cpu_per_webhook_ms"]
                             if pe.get("cpu_per_webhook_ms") else "-",
                             ratio(ca["cpu_per_webhook_ms"], pe.get("cpu_per_webhook_ms")),
                             "<= %.2f ms (issue 26)" % T_CPU_PER_WEBHOOK_MS,
                             "met" if ca["drained"][0] and
                             ca["cpu_per_webhook_ms"] <= T_CPU_PER_WEBHOOK_MS else "MISSED"))
        cd, pe = ing.get("crcr_c64_pg_distinct"), ing.get("peer_c64")
        if cd and pe:
            rows.append(("durable ingest c64 req/s (4 targets, %d distinct PRs) [PostgreSQL]"
                         % DISTINCT_PRS, fmt_num(cd["rps"]), fmt_num(pe["rps"]),
                         ratio(cd["rps"], pe["rps"]), "-", "-"))
            rows.append(("durable ingest c64 p50 / p99 (%d distinct PRs) [PostgreSQL]"
                         % DISTINCT_PRS, "%s / %s" % (fmt_ms(cd["p50"]), fmt_ms(cd["p99"])),
                         "%s / %s" % (fmt_ms(pe["p50"]), fmt_ms(pe["p99"])),
                         ratio(cd["p99"], pe["p99"]) + " (p99)", "-", "-"))
        ic, ip = ing.get("ignored_crcr"), ing.get("ignored_peer")
        if ic and ip:
            rr = self.fig(res, "ignored_ratio")
            rows.append(("ignored event c64 req/s (verify + parse, nothing stored)",
                         fmt_num(ic["rps"]), fmt_num(ip["rps"]),
                         "%.2fx" % rr if rr is not None else "-",
                         ">= %.0fx peer" % T_IGNORED_RATIO,
                         "met" if rr is not None and rr >= T_IGNORED_RATIO else "MISSED"))
        cbs = res.get("callbacks", {})
        for store in stores:
            cb = cbs.get("disk" if store == "sqlite" else store)
            if not cb:
                continue
            if store == "sqlite":
                rows.append(("callbacks c32 req/s (disk store)", fmt_num(cb["rps"]), "-", "-",
                             ">= %s/s" % fmt_num(T_CB_RPS),
                             "met" if (cb["rps"] or 0) >= T_CB_RPS else "MISSED"))
                rows.append(("callbacks c32 p50 / p99 (disk store)",
                             "%s / %s" % (fmt_ms(cb["p50"]), fmt_ms(cb["p99"])), "-", "-",
                             "p99 <= %.0f ms" % T_CB_P99_MS,
                             "met" if (cb["p99"] or 1e9) <= T_CB_P99_MS else "MISSED"))
            else:
                b1, v1 = self.vs_baseline("cb_rps", store, True, fmt_num)
                b2, v2 = self.vs_baseline("cb_p99", store, False, fmt_ms)
                rows.append(("callbacks c32 req/s%s" % pgtag(store), fmt_num(cb["rps"]), "-",
                             "-", "not slower (before: %s)" % b1, v1))
                rows.append(("callbacks c32 p50 / p99%s" % pgtag(store),
                             "%s / %s" % (fmt_ms(cb["p50"]), fmt_ms(cb["p99"])), "-", "-",
                             "not slower (before: %s)" % b2, v2))
        # Fan-out: issue 26's targets on every store, and for two instances on one PostgreSQL
        # database ("pg2"), whose peak in flight at the fake must stay within the one budget.
        fo_stores = stores + (["pg2"] if "pg" in stores else [])
        for store in fo_stores:
            for section, kind, n, target in (("fanout", "warm", FANOUT_REPOS, T_FANOUT100_WARM_MS),
                                             ("fanout", "cold", FANOUT_REPOS, T_FANOUT100_COLD_MS),
                                             ("fanout1000", "warm", FANOUT1000_REPOS,
                                              T_FANOUT1000_WARM_MS),
                                             ("fanout1000", "cold", FANOUT1000_REPOS, None)):
                t, ver, _ = self.fanout_verdict(section, kind, store, target)
                if ver is None:
                    continue
                tgt = ("<= %s ms" % fmt_num(target)) if target else "-"
                if section == "fanout" and kind == "warm":
                    tgt += " (default settings)"
                if target is None and not ver.startswith(("UNRELIABLE", "MISSED")):
                    ver = "-"
                runs = [r for r in res[section]["runs"] if r["kind"] == kind and
                        r["workers"] == "default" and
                        r["store"] == ("disk" if store == "sqlite" else store)]
                cpd = median([r["calls_per_dispatch"] for r in runs])
                tag = " [PostgreSQL, 2 instances]" if store == "pg2" else pgtag(store)
                rows.append(("fan-out to %s repos, %s: webhook -> last dispatch answered%s"
                             % (fmt_num(n), kind, tag), fmt_ms(t), "-",
                             "%.1fx latency; %.2f calls/dispatch" % (t / FANOUT_LATENCY_MS, cpd)
                             if t else "-", tgt, ver))
            # A new commit of the PR: its fan-out ends the dispatches of the one before.
            nh = [r for r in res.get("fanout", {}).get("runs", []) if r["kind"] == "new head" and
                  r["store"] == ("disk" if store == "sqlite" else store)]
            if nh:
                tag = " [PostgreSQL, 2 instances]" if store == "pg2" else pgtag(store)
                last = [r["t_last_ms"] for r in nh if r["t_last_ms"] is not None]
                rows.append(("fan-out to %s repos, a new head (synchronize, superseding): "
                             "webhook -> 202 / last dispatch answered%s"
                             % (fmt_num(FANOUT_REPOS), tag),
                             "%s / %s" % (fmt_ms(median([r["ack_ms"] for r in nh])),
                                          fmt_ms(median(last)) if last else "-"),
                             "-", "-", "-", "reported"))
        two = [r for sec in ("fanout", "fanout1000") for r in res.get(sec, {}).get("runs", [])
               if r["store"] == "pg2"]
        if two:
            peak = max(r["fake_peak_inflight"] for r in two)
            split = ["%s/%s" % tuple(r["calls_by_instance"]) for r in two
                     if r.get("calls_by_instance")]
            rows.append(("two instances, one PostgreSQL store: most requests in flight at the "
                         "fake together (%d fan-outs; GitHub requests by instance: %s)"
                         % (len(two), ", ".join(split)), str(peak), "-", "-",
                         "<= %d (CRCR_GITHUB_CONCURRENCY)" % T_GITHUB_BUDGET,
                         "met" if peak <= T_GITHUB_BUDGET else "MISSED"))
        cal = res.get("fanout1000", {}).get("calibration") or []
        for w in cal:
            eff = (w["rps"] or 0) / (w["conns"] * 1000.0 / FANOUT_LATENCY_MS)
            rows.append(("fake GitHub alone, %d connections: dispatches/s (its floor for a "
                         "burst of %d)" % (w["conns"], w["conns"]),
                         "%s/s (%s)" % (fmt_num(w["rps"]), fmt_ms(w["burst_floor_ms"])), "-",
                         "%.0f%% of %d/s" % (100 * eff, w["conns"] * 1000 / FANOUT_LATENCY_MS),
                         "-", "fake keeps up" if eff >= 0.8 else
                         "FAKE GITHUB LIMITS: %d in flight at once take it >= %s"
                         % (w["conns"], fmt_ms(w["burst_floor_ms"]))))
        # Peak RSS at every setting of the table above.
        peaks = []
        for store in stores:
            for c in (16, 64):
                w = ing.get(self._k("crcr_c%d" % c, store))
                if w:
                    peaks.append(("ingest c%d%s" % (c, pgtag(store)), w.get("hwm_kib", 0)))
            cb = cbs.get("disk" if store == "sqlite" else store)
            if cb and cb.get("hwm_kib"):
                peaks.append(("callbacks%s" % pgtag(store), cb["hwm_kib"]))
            for section in ("fanout", "fanout1000"):
                for r in res.get(section, {}).get("runs", []):
                    if r["workers"] == "default" and r["store"] == (
                            "disk" if store == "sqlite" else store) and r.get("hwm_kib"):
                        peaks.append(("%s%s" % (section, pgtag(store)), r["hwm_kib"]))
        if ic:
            peaks.append(("ignored event", ic.get("hwm_kib", 0)))
        if peaks:
            where, hwm = max(peaks, key=lambda kv: kv[1])
            pe = max(ing.get("peer_c64", {}).get("hwm_kib", 0),
                     ing.get("peer_c16", {}).get("hwm_kib", 0))
            rows.append(("peak RSS (VmHWM) at the settings above (worst: %s)" % where,
                         "%.1f MiB" % (hwm / 1024), "%.1f MiB" % (pe / 1024) if pe else "-",
                         ratio(hwm, pe), "<= %.0f MiB" % T_RSS_MIB,
                         "met" if hwm <= T_RSS_MIB * 1024 else "MISSED"))
        # How costs grow: targets per webhook, callbacks under ingest.
        tg = res.get("ingest_targets", {})
        for c in (16, 64):
            ws = [(n, tg.get("t%d_c%d" % (n, c))) for n in sorted({int(k[1:].split("_")[0])
                                                                    for k in tg})]
            ws = [(n, w) for n, w in ws if w]
            if not ws:
                continue
            counts = " / ".join(str(n) for n, _ in ws)
            rows.append(("ingest c%d req/s with %s targets" % (c, counts),
                         " / ".join(fmt_num(w["rps"]) for _, w in ws), "-",
                         "%.2fx (%d vs %d)" % (ws[-1][1]["rps"] / ws[0][1]["rps"], ws[-1][0],
                                               ws[0][0])
                         if len(ws) > 1 and ws[0][1].get("rps") and ws[-1][1].get("rps")
                         else "-", "-", "-"))

            def cpu(w):
                v = w.get("cpu_per_webhook_ms")
                if v is None:
                    return "-"
                return ("%.2f" if w["drained"][0] else ">= %.2f") % v

            c0, c1 = ws[0][1].get("cpu_per_webhook_ms"), ws[-1][1].get("cpu_per_webhook_ms")
            rows.append(("CPU per stored webhook incl. its rows, c%d, %s targets (ms)"
                         % (c, " / ".join(str(n) for n, _ in ws)),
                         " / ".join(cpu(w) for _, w in ws), "-",
                         "%.1fx" % (c1 / c0) if c0 and c1 and len(ws) > 1 else "-", "-", "-"))
        cbi = res.get("callbacks_under_ingest", {})
        for name in ("disk", "pg"):
            x = cbi.get(name)
            if not x:
                continue
            al, bo = x["alone"], x["with_ingest"]
            rows.append(("callbacks c32 under webhooks c%d: req/s, p50 / p99 (%s store)"
                         % (x["webhook_conns"], name),
                         "%s, %s / %s" % (fmt_num(bo["rps"]), fmt_ms(bo["p50"]),
                                          fmt_ms(bo["p99"])), "-",
                         "alone: %s, %s / %s" % (fmt_num(al["rps"]), fmt_ms(al["p50"]),
                                                 fmt_ms(al["p99"])), "-", "-"))
            wh = bo.get("webhooks", {})
            rows.append(("webhooks c%d alongside: req/s, p99 (%s store)"
                         % (x["webhook_conns"], name),
                         "%s, %s" % (fmt_num(wh.get("rps")), fmt_ms(wh.get("p99"))), "-", "-",
                         "-", "-"))
        mem = res.get("memory")
        if mem and len(mem.get("points", [])) > 2:
            pts = mem["points"]
            chunks = pts[1:]
            half = len(chunks) // 2
            first = max(p[3] for p in chunks[:half])
            second = max(p[3] for p in chunks[half:])
            rows.append(("RSS idle", "%.1f MiB" % (pts[0][1] / 1024), "-", "-", "-", "-"))
            rows.append(("RSS after %s webhooks (after drain)" % fmt_num(pts[-1][0]),
                         "%.1f MiB" % (mem["after_drain"][0] / 1024), "-", "-", "-", "-"))
            pc = mem.get("per_conn") or []
            if len(pc) >= 2:
                slope = (pc[-1][1] - pc[0][1]) / float(pc[-1][0] - pc[0][0])
                rows.append(("RSS per open connection (16 -> 128 connections)",
                             "%.0f KiB" % slope, "-", "-", "-", "-"))
            rows.append(("RSS peak, 1st vs 2nd half of the %s webhooks" % fmt_num(pts[-1][0]),
                         "%.1f / %.1f MiB" % (first / 1024, second / 1024), "-",
                         "%+.1f MiB" % ((second - first) / 1024), "no growth beyond caches",
                         "met" if second - first <= 2048 else "CHECK"))
        prof = res.get("profile")
        if prof and prof.get("total_ir"):
            rows.append(("instructions per webhook (callgrind, incl. outbox)",
                         fmt_num(prof["ir_per_webhook"]), "-", "-", "-", "-"))
        pc = res.get("profile_callbacks")
        if pc and pc.get("total_ir"):
            rows.append(("instructions per callback (callgrind)",
                         fmt_num(pc["ir_per_webhook"]), "-", "-", "-", "-"))
        return rows

    def print_table(self, rows):
        heads = ("metric", "crcr", "peer", "ratio", "target", "verdict")
        widths = [max(len(str(r[i])) for r in rows + [heads]) for i in range(6)]
        line = "  ".join(h.ljust(w) for h, w in zip(heads, widths))
        print("\n" + line)
        print("-" * len(line))
        for r in rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
        print()

    def _ingest_table(self, L, items, header=True, pg_names=False):
        if header:
            L.append("| run | req/s | p50 | p90 | p99 | requests | stored | non-2xx | timeouts | "
                     "CPU/req (load) | CPU per stored webhook incl. outbox | outbox drained | "
                     "fdatasync/webhook | futex/webhook | ctx-sw/webhook | peak RSS | load |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, w in items:
            if not w:
                continue
            if pg_names and w.get("store") == "pg":
                name += " (PostgreSQL)"
            n = w.get("requests") or 0
            st = w.get("stored")
            den = st if st else n
            pf = w.get("perf") or {}

            def per(ev):
                return "%.2f" % (pf[ev] / den) if den and ev in pf else "-"

            cpu_load = w.get("cpu_wrk_s", w.get("cpu_s"))
            cpu = "%s us" % fmt_num(cpu_load / n * 1e6) if n and cpu_load is not None else "-"
            dr = w.get("drained")
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                     "%s | %s |"
                     % (name, fmt_num(w.get("rps")), fmt_ms(w.get("p50")), fmt_ms(w.get("p90")),
                        fmt_ms(w.get("p99")), fmt_num(n), fmt_num(st) if st is not None else "-",
                        w.get("non2xx"), w.get("timeouts"), cpu,
                        fmt_ms(w.get("cpu_per_webhook_ms")) if st else "-",
                        "-" if not dr else ("%.1f s" % dr[2] if dr[0] else
                                            "no: %s left" % fmt_num(dr[1])),
                        per("syscalls:sys_enter_fdatasync"), per("syscalls:sys_enter_futex"),
                        per("context-switches"),
                        "%.1f MiB" % (w["hwm_kib"] / 1024) if w.get("hwm_kib") else "-",
                        w.get("loadavg", "-")))

    def record_run(self, md):
        """Writes the run to bench/runs/<date>-<time>.md and lists it first under "## Runs" in
        bench/RESULTS.md (the current figures at its top are updated by hand)."""
        runs = os.path.join(HERE, "runs")
        os.makedirs(runs, exist_ok=True)
        with open(os.path.join(runs, self.run_file), "w", encoding="utf-8") as f:
            f.write(md)
        path = os.path.join(HERE, "RESULTS.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        line = runs_index_line(self.run_title, self.run_file, self.load_start,
                               time.monotonic() - self.t_start)
        at = text.find("\n- [", text.find("\n## Runs\n"))
        if text.find("\n## Runs\n") < 0 or at < 0:
            text = text.rstrip("\n") + "\n\n## Runs\n\n" + line + "\n"
        else:
            text = text[:at + 1] + line + "\n" + text[at + 1:]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        log("wrote bench/runs/%s and listed it in bench/RESULTS.md" % self.run_file)

    def markdown(self, rows):
        a = self.args
        L = []
        now = datetime.datetime.now(datetime.timezone.utc)
        self.run_title = now.strftime("%Y-%m-%d %H:%M UTC")
        self.run_file = now.strftime("%Y-%m-%d-%H%M.md")
        L.append("# bench run %s" % self.run_title)
        L.append("")
        L.append("One run of `bench/run.sh`; bench/RESULTS.md keeps the current figures, the "
                 "targets and what each change measured.")
        L.append("")
        L.append("Host: %s, %d CPUs, kernel %s; load average at start %s. crcr %s (%s); "
                 "node %s; %s; SQLite %s. Sections: %s. Total %.0f s."
                 % (platform.node() or "?", os.cpu_count() or 0, platform.release(),
                    self.load_start, self.crcr_version, os.path.relpath(self.crcr, ROOT),
                    self.tool_version(["node", "--version"]),
                    self.tool_version(["wrk", "--version"]).split(" Copyright")[0],
                    self.tool_version(["pkg-config", "--modversion", "sqlite3"]),
                    ", ".join("%s %.0f s" % (x, self.section_seconds.get(x, 0))
                              for x in self.sections),
                    time.monotonic() - self.t_start))
        L.append("")
        L.append("Stores: %s." % ", ".join(self.stores))
        L.append("")
        L.append("| metric | crcr | peer | ratio | target | verdict |")
        L.append("|---|---|---|---|---|---|")
        for r in rows:
            L.append("| " + " | ".join(str(c) for c in r) + " |")
        L.append("")
        if self.pg:
            L.append("PostgreSQL rows: %s. %s" % (
                self.pg.describe(), "Its commits do not wait for a disk, unlike SQLite's "
                "(synchronous=FULL on disk): compare PostgreSQL figures with PostgreSQL figures."
                if self.pg.throwaway else ""))
            L.append("")
        ing = self.results.get("ingest")
        if ing:
            L.append("### Ingest detail (30,512-byte pull_request, 4 targets, dry-run)")
            L.append("")
            L.append("fsync probe on the store's disk (30 KB append + fdatasync): median %.2f ms,"
                     " p90 %.2f ms. crcr threads: %s; RSS idle %.1f MiB. crcr rows: CPU and "
                     "`perf stat` counts from the start of the load until the outbox has drained "
                     "(at most %d s), per stored webhook; peer rows per request."
                     % (ing["fsync_ms"][0], ing["fsync_ms"][1], ing.get("threads"),
                        ing.get("rss_idle_kib", 0) / 1024, self.args.drain))
            L.append("")
            self._ingest_table(L, [("%s c%d" % (who, c), ing.get(self._k("%s_c%d" % (who, c),
                                                                         st)))
                                   for c in (16, 64)
                                   for who, st in [("peer", "sqlite")] +
                                   [("crcr", x) for x in self.stores]
                                   if not (who == "peer" and st != "sqlite")],
                               pg_names=True)
            extra = [("peer c64 ignored event", ing.get("ignored_peer")),
                     ("crcr c64 ignored event (nothing stored)", ing.get("ignored_crcr"))]
            extra += [("crcr c64 " + label, w) for label, w in ing.get("diag", {}).items()]
            self._ingest_table(L, extra, header=False)
            L.append("")
            for store in self.stores:
                seq = ing.get(self._k("sequential", store))
                if not seq:
                    continue
                pf, n = seq.get("perf") or {}, seq["n"]

                def ev(name, digits=1):
                    return ("%%.%df" % digits) % (pf[name] / n) if name in pf else "-"

                L.append("Per webhook (%s store), %d sent one at a time to a fresh relay (4 "
                         "targets, dry-run), outbox drained, counted by `perf stat`: %s fdatasync, "
                         "%s pwrite64, %s fcntl, %s futex, %s context switches, %s ms CPU "
                         "(task-clock, all threads; /proc: %.2f ms); %.2f ms wall per webhook."
                         % (store, n, ev("syscalls:sys_enter_fdatasync"),
                            ev("syscalls:sys_enter_pwrite64"), ev("syscalls:sys_enter_fcntl"),
                            ev("syscalls:sys_enter_futex"), ev("context-switches"),
                            ev("task-clock", 2), seq["cpu_ms"], seq["per_webhook_ms"]))
                L.append("")
        tg = self.results.get("ingest_targets")
        if tg:
            L.append("### Ingest by number of targets (dry-run, SQLite on disk, %d s loads, "
                     "outbox drained for at most %d s)" % (self.args.targets_duration,
                                                           self.args.targets_drain))
            L.append("")
            L.append("| targets | conns | req/s | p50 | p99 | stored | outbox rows | drained | CPU "
                     "per stored webhook (load only) | CPU per stored webhook incl. its rows | "
                     "the same / targets | fdatasync per webhook | futex per webhook | peak RSS | load |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for n in sorted({int(k[1:].split("_")[0]) for k in tg}):
                for c in (16, 64):
                    w = tg.get("t%d_c%d" % (n, c))
                    if not w:
                        continue
                    st = w.get("stored") or 0
                    pf = w.get("perf") or {}

                    def per(name):
                        return "%.2f" % (pf[name] / st) if st and name in pf else "-"

                    dr = w["drained"]
                    L.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                             "%.1f MiB | %s |"
                             % (n, c, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                                fmt_num(st), fmt_num(w.get("rows")),
                                "%.1f s" % dr[2] if dr[0] else "no: %s left" % fmt_num(dr[1]),
                                fmt_ms(w.get("cpu_wrk_per_webhook_ms")),
                                fmt_ms(w.get("cpu_per_webhook_ms")),
                                "%.1f us" % (w["cpu_per_webhook_ms"] * 1000 / n)
                                if w.get("cpu_per_webhook_ms") else "-",
                                per("syscalls:sys_enter_fdatasync"),
                                per("syscalls:sys_enter_futex"), w.get("hwm_kib", 0) / 1024,
                                w.get("loadavg", "-")))
            L.append("")
        for section, n in (("fanout", FANOUT_REPOS), ("fanout1000", FANOUT1000_REPOS)):
            fo = self.results.get(section, {}).get("runs")
            if not fo:
                continue
            L.append("### Fan-out detail (%s repos, %s owners, fake GitHub +%d ms per request in "
                     "a process of its own)" % (fmt_num(n), fmt_num(n), FANOUT_LATENCY_MS))
            L.append("")
            L.append("| run | workers | store | 202 after | first / last dispatch sent | last "
                     "dispatch answered | calls | per dispatch | calls by kind | fdatasync | "
                     "fake overhead p50 / p99 / max | fake added (longest connection) | fake "
                     "busy | fake peak in flight | relay connections | listen drops | peak RSS |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in fo:
                L.append("| %s | %s | %s | %s | %s / %s | %s | %d | %.2f | %s | %s | %s / %s / %s "
                         "| %s | %s | %d | %s | %s | %.1f MiB |"
                         % (r["kind"], r["workers"], r["store"], fmt_ms(r["ack_ms"]),
                            fmt_ms(r["first_dispatch_ms"]), fmt_ms(r["last_dispatch_ms"]),
                            fmt_ms(r["t_last_ms"]) + ("" if r["fake_ok"] else " (fake slow)"),
                            r["calls"], r["calls_per_dispatch"],
                            ", ".join("%s %d" % kv for kv in sorted(r["by_kind"].items())),
                            fmt_num(r.get("fdatasync")), fmt_ms(r["fake_p50_ms"]),
                            fmt_ms(r["fake_p99_ms"]), fmt_ms(r["fake_max_ms"]),
                            fmt_ms(r.get("fake_added_ms")),
                            "%.0f%%" % (100 * r["fake_busy"]) if r["fake_busy"] is not None
                            else "-", r["fake_peak_inflight"], r.get("relay_connections", "-"),
                            "-" if r["listen_drops"] is None else r["listen_drops"],
                            r.get("hwm_kib", 0) / 1024))
            L.append("")
            cal = self.results.get(section, {}).get("calibration")
            if cal:
                L.append("The fake alone (`replay.lua`: one recorded dispatch of %s bytes with its "
                         "token, %d s per row): what the fake GitHub (%s) answers with +%d ms per "
                         "request. A fan-out that keeps c dispatches in flight cannot beat "
                         "n / (the rate at c connections)."
                         % (fmt_num(cal[0]["body_bytes"]), self.args.calib_duration,
                            "bench/fakegh_fast.c" if self.args.fake_server == "c" else
                            "bench/fakegh_proc.py, %s" % self.args.fake_server,
                            FANOUT_LATENCY_MS))
                L.append("")
                L.append("| connections | dispatches/s | ideal (c / latency) | p50 | p99 | fake "
                         "busy | listen drops | non-2xx | floor for a burst of c |")
                L.append("|---|---|---|---|---|---|---|---|---|")
                for w in cal:
                    L.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |"
                             % (w["conns"], fmt_num(w["rps"]),
                                fmt_num(w["conns"] * 1000.0 / FANOUT_LATENCY_MS),
                                fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                                "%.0f%%" % (100 * w["fake_busy"]) if w.get("fake_busy") is not None
                                else "-", w.get("listen_drops"), w["non2xx"],
                                fmt_ms(w["burst_floor_ms"])))
                L.append("")
        cb = self.results.get("callbacks")
        cbi = self.results.get("callbacks_under_ingest") or {}
        if cb or cbi:
            L.append("### Callbacks detail (wrk -t1 -c32, blocks of %d in_progress then %d "
                     "completed, one L2 repo, RS256 token reused)" % (CB_BLOCK, CB_BLOCK))
            L.append("")
            L.append("| store | req/s | p50 | p90 | p99 | requests | non-2xx | runs completed |"
                     " runs in_progress | body bytes | CPU/req | fdatasync/req | KB written/req (write"
                     " calls / block layer) | peak RSS | load |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

            def cbline(name, w):
                n = w.get("requests") or 0
                pf = w.get("perf") or {}
                fd = ("%.2f" % (pf["syscalls:sys_enter_fdatasync"] / n)
                      if n and "syscalls:sys_enter_fdatasync" in pf else "-")
                io = w.get("io") or [0, 0]
                kb = ("%.1f / %.1f" % (io[0] / n / 1000, io[1] / n / 1000)
                      if n and io[0] else "-")
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                         % (name, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p90"]),
                            fmt_ms(w["p99"]), fmt_num(n), w["non2xx"],
                            fmt_num(w["states"].get("completed", 0)),
                            fmt_num(w["states"].get("in_progress", 0)), fmt_num(w["body_bytes"]),
                            "%s us" % fmt_num(w["cpu_s"] / n * 1e6) if n else "-", fd, kb,
                            "%.1f MiB" % (w["hwm_kib"] / 1024) if w.get("hwm_kib") else "-",
                            w["loadavg"]))

            for name, w in (cb or {}).items():
                cbline(name, w)
            for name, x in cbi.items():
                cbline("%s, alone (callbacks_under_ingest)" % name, x["alone"])
                cbline("%s, with webhooks c%d in the same window" % (name, x["webhook_conns"]),
                       x["with_ingest"])
            L.append("")
            for name, x in cbi.items():
                wh = x["with_ingest"].get("webhooks", {})
                L.append("Webhooks alongside the callbacks (%s store, c%d, 4 targets, dry-run): "
                         "%s req/s, p50 %s, p99 %s, %s stored, non-2xx %s."
                         % (name, x["webhook_conns"], fmt_num(wh.get("rps")),
                            fmt_ms(wh.get("p50")), fmt_ms(wh.get("p99")),
                            fmt_num(wh.get("stored")), wh.get("non2xx")))
            if cbi:
                L.append("")
        mem = self.results.get("memory")
        if mem and mem.get("points"):
            L.append("### Memory detail (push webhook of %d bytes, store on tmpfs, 64 connections,"
                     " dry-run, 1 target)" % mem["body_bytes"])
            L.append("")
            L.append("| webhooks stored | VmRSS at the end of the chunk | VmRSS peak in the chunk |"
                     " VmHWM |")
            L.append("|---|---|---|---|")
            for sent, rss, hwm, peak in mem["points"]:
                L.append("| %s | %.1f MiB | %.1f MiB | %.1f MiB |" % (
                    fmt_num(sent), rss / 1024, peak / 1024, hwm / 1024))
            L.append("| after outbox drain (%s) | %.1f MiB | - | %.1f MiB |"
                     % ("drained" if mem["drained"][0] else "%d rows left" % mem["drained"][1],
                        mem["after_drain"][0] / 1024, mem["after_drain"][1] / 1024))
            L.append("")
            pc = mem.get("per_conn") or []
            if len(pc) >= 2:
                slope = (pc[-1][1] - pc[0][1]) / float(pc[-1][0] - pc[0][0])
                L.append("Peak VmRSS by open connections (3 s of the same load each): %s; about "
                         "%.0f KiB per connection."
                         % (", ".join("%d: %.1f MiB" % (c, k / 1024) for c, k in pc), slope))
                L.append("")
            L.append("Database after the run: %.0f MiB; %.0f s for the section."
                     % (mem["db_bytes"] / 1048576, mem["seconds"]))
            L.append("")
        prof = self.results.get("profile")
        if prof and prof.get("total_ir"):
            L.append("### Profile (callgrind, %d webhooks of 30,512 bytes sent one at a time, "
                     "outbox drained in dry-run, 4 targets; whole process incl. start-up; "
                     "`perf stat -e instructions` %s)"
                     % (prof["n"], "works" if prof.get("perf_hw_counters") else
                        "not supported on this host"))
            L.append("")
            L.append("Total %s instructions, %s per webhook. Breakdown per webhook (inclusive "
                     "costs; compare this table before and after a change):"
                     % (fmt_num(prof["total_ir"]), fmt_num(prof["ir_per_webhook"])))
            L.append("")
            L.append("| part | instructions per webhook | share |")
            L.append("|---|---|---|")
            for label, v in self.breakdown(prof, self.INGEST_BREAKDOWN):
                L.append("| %s | %s | %s |" % (label, fmt_num(v), "%.1f%%" % (
                    100.0 * v / prof["ir_per_webhook"]) if v is not None and
                    prof["ir_per_webhook"] else "-"))
            L.append("")
            L.append("By object (self cost):")
            L.append("")
            L.append("| object | instructions | share | per webhook |")
            L.append("|---|---|---|---|")
            for obj, ir in prof["by_object"][:12]:
                L.append("| %s | %s | %.1f%% | %s |" % (obj, fmt_num(ir),
                                                        100.0 * ir / prof["total_ir"],
                                                        fmt_num(ir / prof["n"])))
            L.append("")
            L.append("Top functions by self cost:")
            L.append("")
            L.append("| self | share | function | object |")
            L.append("|---|---|---|---|")
            for ir, pct_, fn, obj in prof["self_top"][:20]:
                L.append("| %s | %.2f%% | `%s` | %s |" % (fmt_num(ir), pct_, fn, obj))
            L.append("")
            L.append("Inclusive cost of crcr's own functions:")
            L.append("")
            L.append("| inclusive | per webhook | share | function |")
            L.append("|---|---|---|---|")
            for ir, pct_, fn, obj in prof["incl_top"][:20]:
                L.append("| %s | %s | %.2f%% | `%s` |" % (fmt_num(ir), fmt_num(ir / prof["n"]),
                                                        pct_, fn))
            L.append("")
        pc = self.results.get("profile_callbacks")
        if pc and pc.get("total_ir"):
            L.append("### Profile of callbacks (callgrind, %d callbacks of ~31 KB sent one at a "
                     "time: in_progress and completed of %d runs, one L2 repo)"
                     % (pc["n"], pc["n"] // 2))
            L.append("")
            L.append("Total %s instructions, %s per callback (incl. start-up and the set-up "
                     "webhook). By object: %s."
                     % (fmt_num(pc["total_ir"]), fmt_num(pc["ir_per_webhook"]),
                        ", ".join("%s %.1f%%" % (obj, 100.0 * ir / pc["total_ir"])
                                  for obj, ir in pc["by_object"][:6])))
            L.append("")
            L.append("| part | instructions per callback | share |")
            L.append("|---|---|---|")
            for label, v in self.breakdown(pc, self.CALLBACK_BREAKDOWN):
                L.append("| %s | %s | %s |" % (label, fmt_num(v), "%.1f%%" % (
                    100.0 * v / pc["ir_per_webhook"]) if v is not None and
                    pc["ir_per_webhook"] else "-"))
            L.append("")
            L.append("| inclusive per callback | share | function |")
            L.append("|---|---|---|")
            for ir, pct_, fn, obj in pc["incl_top"][:16]:
                L.append("| %s | %.2f%% | `%s` |" % (fmt_num(ir / pc["n"]), pct_, fn))
            L.append("")
        if self.notes:
            L.append("Notes: " + "; ".join(self.notes))
            L.append("")
        L.append("<details><summary>Commands</summary>")
        L.append("")
        L.append("```")
        L.append("# dry-run everywhere except fan-out (no GITHUB_APP_ID); secrets elided")
        L.append(("bench/run.sh " + " ".join(shlex.quote(x) for x in self.argv_shown)).strip())
        seen = set()
        for what, cmd in self.commands:
            # The memory chunks differ only in prefix and remaining time: show the first.
            key = what if what in ("memory chunk", "memory connections c64",
                                   "memory connections c128") else cmd
            if key in seen:
                continue
            seen.add(key)
            L.append("# " + what + (" (1 of %d; BENCH_PREFIX and -d vary)" % self.args.memory_chunks
                                    if what == "memory chunk" else ""))
            L.append(cmd)
        L.append("```")
        L.append("")
        L.append("Raw outputs: `%s/` (not committed)." % os.path.relpath(self.out_dir, ROOT))
        L.append("")
        L.append("</details>")
        L.append("")
        return "\n".join(L)

    @staticmethod
    def tool_version(argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (p.stdout or p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    def run_sections(self, sections):
        pg_sections = {"ingest", "fanout", "fanout1000", "callbacks", "callbacks_under_ingest"}
        if "pg" in self.stores and pg_sections & set(sections):
            try:
                self.pg = PgServer(self.args.pg_uri).start()
                log("PostgreSQL store: %s" % self.pg.describe())
            except Exception as e:  # the SQLite figures are still worth having
                log("no PostgreSQL: %s" % e)
                self.notes.append("PostgreSQL variant skipped: %s" % str(e)[:300])
                self.stores = [st for st in self.stores if st != "pg"] or ["sqlite"]
                self.pg = None
        for s in sections:
            t = time.monotonic()
            log("== %s" % s)
            try:
                getattr(self, s)()
            except Exception as e:  # keep going: one broken section must not hide the others
                log("section %s failed: %r" % (s, e))
                self.notes.append("section %s failed: %s" % (s, str(e)[:300]))
            log("== %s done in %.0f s" % (s, time.monotonic() - t))
            self.section_seconds[s] = time.monotonic() - t

    def run(self, sections):
        self.sections = sections
        self.load_start = loadavg()
        self.crcr_version = self.tool_version([self.crcr, "version"]).replace("crcr ", "")
        argv, skip = [], False
        for x in sys.argv[1:]:
            if skip:
                skip = False
            elif x == "--crcr":
                skip = True
            elif not x.startswith("--crcr="):
                argv.append(x)
        self.argv_shown = argv
        try:
            self.run_sections(sections)
        finally:
            if self.pg:
                self.pg.stop()
        with open(os.path.join(self.out_dir, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        rows = self.table()
        self.print_table(rows)
        md = self.markdown(rows)
        self.write_file("results.md", md)
        if not self.args.no_append:
            self.record_run(md)
        log("total %.0f s" % (time.monotonic() - self.t_start))


def runs_index_line(title, name, load, seconds):
    """The line of bench/RESULTS.md's Runs list that names one run's file."""
    return "- [%s](runs/%s): load average at start %s; total %.0f s." % (title, name, load,
                                                                          seconds)


SECTIONS = ["ingest", "ingest_targets", "fanout", "fanout1000", "callbacks",
            "callbacks_under_ingest", "memory", "profile"]
STORES = ["sqlite", "pg"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crcr", default=os.path.join(ROOT, "build-bench", "crcr"))
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections (default: all): " + ",".join(SECTIONS))
    ap.add_argument("--store", default=None,
                    help="comma-separated stores for ingest, fanout, fanout1000, callbacks and "
                         "callbacks_under_ingest: sqlite, pg (default: sqlite,pg when PostgreSQL's "
                         "server binaries are installed, else sqlite). ingest_targets, memory "
                         "and profile always use SQLite")
    ap.add_argument("--pg-uri", default=None,
                    help="PostgreSQL server for the pg store (a database per relay is created "
                         "and dropped on it); default: a throwaway cluster from "
                         "scripts/pg-test-cluster.sh")
    ap.add_argument("--duration", type=int, default=10, help="seconds per main load run")
    ap.add_argument("--diag-duration", type=int, default=5,
                    help="seconds per diagnostic load run")
    ap.add_argument("--no-diag", action="store_true",
                    help="skip the diagnostic runs (ladder, tmpfs stores, extra worker counts)")
    ap.add_argument("--drain", type=int, default=20,
                    help="max seconds to wait for the outbox to drain after an ingest load")
    ap.add_argument("--targets", default=",".join(str(n) for n in TARGET_COUNTS),
                    help="allowlisted target counts of ingest_targets")
    ap.add_argument("--targets-duration", type=int, default=5,
                    help="seconds per ingest_targets load run")
    ap.add_argument("--targets-drain", type=int, default=30,
                    help="max seconds to wait for the outbox to drain in ingest_targets")
    ap.add_argument("--cbi-webhook-conns", type=int, default=16,
                    help="connections of the webhook load in callbacks_under_ingest")
    ap.add_argument("--fake-server", choices=("c", "asyncio", "threads"), default="c",
                    help="the fake GitHub of the fan-out sections and the App-mode ingest row: "
                         "c (bench/fakegh_fast.c) or bench/fakegh_proc.py's asyncio or threads")
    ap.add_argument("--calib-duration", type=int, default=2,
                    help="seconds per calibration run of the fake GitHub (fanout1000)")
    ap.add_argument("--baseline", default=None,
                    help="results.json of an earlier run (bench/out/*/results.json): PostgreSQL "
                         "rows say whether they got slower (more than 10 %%)")
    ap.add_argument("--memory-total", type=int, default=100000)
    ap.add_argument("--memory-chunks", type=int, default=10)
    ap.add_argument("--memory-budget", type=int, default=240,
                    help="max seconds of load in the memory section (cut further by --total)")
    ap.add_argument("--total", type=int, default=870,
                    help="seconds the whole bench/run.sh run should stay under (memory adapts)")
    ap.add_argument("--profile-reserve", type=int, default=150,
                    help="seconds kept for the profile section when it follows memory")
    ap.add_argument("--profile-n", type=int, default=150, help="webhooks under callgrind")
    ap.add_argument("--profile-callbacks", type=int, default=60,
                    help="callback pairs under callgrind (0: skip)")
    ap.add_argument("--no-append", action="store_true",
                    help="write nothing to bench/runs/ or RESULTS.md")
    args = ap.parse_args()
    sections = [s for s in args.only.split(",") if s]
    for s in sections:
        if s not in SECTIONS:
            ap.error("unknown section %r" % s)
    if args.store is None:
        args.store = "sqlite,pg" if (args.pg_uri or pg_server_installed()) else "sqlite"
    for st in args.store.split(","):
        if st not in STORES:
            ap.error("unknown store %r (sqlite, pg)" % st)
    if not os.access(args.crcr, os.X_OK):
        ap.error("no crcr binary at %s (bench/run.sh builds it)" % args.crcr)
    if args.fake_server == "c":
        FakeGitHubProc.binary = fast_fake_binary(os.path.dirname(os.path.abspath(args.crcr)))
    Bench(args).run(sections)


if __name__ == "__main__":
    main()
