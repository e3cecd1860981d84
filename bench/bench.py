#!/usr/bin/env python3
"""bench.py - crcr's benchmarks, each against a peer measured in the same run, or as counts.

Run through bench/run.sh (it builds build-bench/crcr in Release and installs the Node peer); by
hand: python3 bench/bench.py --crcr build-bench/crcr [--only ingest,fanout,...] [--no-append].

Sections (see bench/RESULTS.md for what each measures and the targets):
  ingest     signed 30,512-byte pull_request webhooks, wrk at 16 and 64 connections, crcr (SQLite,
             durable 202, dry-run) vs the @octokit/webhooks peer (bench/peer); plus a ladder of
             crcr-only diagnostic runs (ping = HTTP+HMAC, ignored action = +JSON parse, store on
             tmpfs = +SQLite without fsync) and per-webhook syscall counts (perf stat)
  fanout     100 allowlisted repos, fake GitHub with 50 ms per request: webhook -> 100th dispatch
             answered, cold and warm; GitHub API calls per dispatch
  callbacks  in_progress + completed pairs with RS256 OIDC tokens at 32 connections (wrk)
  memory     RSS idle, during ingest, along 100,000 webhooks
  profile    callgrind over a short ingest run (perf record when hardware counters work)

Everything listens on 127.0.0.1; every load run is bounded in time (and, for memory, in count).
Timings are never pass/fail: the run prints a table and appends it, with the commands, to
bench/RESULTS.md. Python 3 stdlib only (plus tests/support).
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
PAD_UNIT = "Ünïcödé PR description — 日本語のテキスト ✓ "  # multi-byte UTF-8 padding
INGEST_ALLOWLIST = R.DEFAULT_ALLOWLIST  # four repos, one per level
FANOUT_REPOS = 100
FANOUT_LATENCY_MS = 50
PEER_DIR = os.path.join(HERE, "peer")
CALLBACK_REPO = "org2/repo2"  # L2 in the default allowlist
CB_BLOCK = 256  # callback pairs: in_progress x B, then completed x B (8 x the connections)
MEMORY_ALLOWLIST = "L4:\n  - org4/repo4\n"  # one target: 100,000 webhooks fit the time budget


# ----------------------------------------------------------------------------- small helpers


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def sign(body):
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


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
        argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % duration, "--latency",
                "--timeout", "%ds" % timeout_s, "-s", script, url]
        self.record(what, argv, {k: v for k, v in env.items() if k != "CB_TOKEN"})
        full_env = dict(os.environ)
        full_env.update({k: str(v) for k, v in env.items()})
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=full_env)
        deadline = time.monotonic() + duration + timeout_s + 60
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
              start_timeout=15.0):
        """A Relay (tests/support/relay.py) whose SQLite store is a file of the bench's own, in
        the temp dir (the disk the fsync probe measures) or on tmpfs: always SQLite, whatever
        store the test support would pick."""
        d = tempfile.mkdtemp(prefix="crcr-bench-", dir="/dev/shm" if tmpfs else None)
        base = {"CRCR_LOG": "warn", "CRCR_STORE": "sqlite:" + os.path.join(d, "crcr.db")}
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
            raise
        rl.bench_db = os.path.join(d, "crcr.db")
        rl.bench_dir = d
        return rl

    @staticmethod
    def close_relay(rl):
        rl.close()
        shutil.rmtree(rl.bench_dir, ignore_errors=True)

    def db(self, rl):
        con = sqlite3.connect(rl.bench_db, timeout=30)
        return con

    def db_scalar(self, rl, sql, params=()):
        con = self.db(rl)
        try:
            return con.execute(sql, params).fetchone()[0]
        finally:
            con.close()

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

        peer = self.start_peer()
        self.record("crcr server (ingest; a fresh relay per run)", [self.crcr, "serve"],
                    {"CRCR_STORE": "sqlite:<tmp>/crcr.db", "ALLOWLIST_FILE": "<4 repos>",
                     "CRCR_LOG": "warn", "GITHUB_APP_SECRET": "<secret>",
                     "CRCR_LISTEN": "127.0.0.1:PORT"})
        try:
            for conns in (16, 64):
                # The peer first, then a fresh crcr (nothing of crcr runs during the peer's run).
                env = {"BENCH_BODY": body_path, "BENCH_SIG": sign(body),
                       "BENCH_PREFIX": "peer%d-%s" % (conns, self.run_id)}
                cpu0 = proc_cpu_s(peer.pid)
                la = loadavg()
                with RssSampler(peer.pid) as s:
                    w = self.wrk("ingest peer c%d" % conns,
                                 "http://127.0.0.1:%d/github/webhook" % peer.port, script, conns,
                                 a.duration, env)
                w["cpu_s"] = proc_cpu_s(peer.pid) - cpu0
                w["rss_peak_kib"], w["hwm_kib"] = s.peak_kib, proc_status(peer.pid)["VmHWM"]
                w["loadavg"] = la
                res["peer_c%d" % conns] = w
                log("peer  c%-3d %s req/s p50 %s p99 %s non2xx %d (load %s)"
                    % (conns, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                       w["non2xx"], la))

                rl = self.relay()
                try:
                    rl.start()
                    pid = rl.proc.pid
                    time.sleep(0.5)
                    res.setdefault("rss_idle_kib", proc_status(pid)["VmRSS"])
                    res.setdefault("threads", proc_threads(pid))
                    prefix = "crcr%d-%s" % (conns, self.run_id)
                    env = dict(env, BENCH_PREFIX=prefix)
                    cpu0 = proc_cpu_s(pid)
                    la = loadavg()
                    with RssSampler(pid) as s, PerfStat(pid, os.path.join(
                            self.out_dir, "perf_ingest_c%d.csv" % conns), self.perf_ok) as ps:
                        w = self.wrk("ingest crcr c%d" % conns, rl.url + "/github/webhook",
                                     script, conns, a.duration, env)
                    w["cpu_s"] = proc_cpu_s(pid) - cpu0
                    w["rss_peak_kib"], w["hwm_kib"] = s.peak_kib, proc_status(pid)["VmHWM"]
                    w["loadavg"] = la
                    w["perf"] = ps.counts
                    w["stored"] = self.db_scalar(
                        rl, "SELECT count(*) FROM deliveries WHERE delivery_id LIKE ?",
                        (prefix + "-%",))
                    w["outbox_left"] = self.db_scalar(
                        rl, "SELECT count(*) FROM outbox WHERE state IN ('queued','running')")
                    res["crcr_c%d" % conns] = w
                    log("crcr  c%-3d %s req/s p50 %s p99 %s non2xx %d stored %d, outbox rows "
                        "not yet done %d (load %s)"
                        % (conns, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p99"]),
                           w["non2xx"], w["stored"], w["outbox_left"], la))
                finally:
                    self.close_relay(rl)
        finally:
            self.stop_proc(peer)

        if a.no_diag:
            return
        # Diagnostic ladder at 64 connections: where does crcr's time go?
        diag = res.setdefault("diag", {})
        ladder = [
            ("ping (HTTP + HMAC, no parse)", "ping", body_path, body, False),
            ("ignored action (+ JSON parse)", "pull_request", ignored_path, ignored_body, False),
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
                with PerfStat(pid, os.path.join(self.out_dir, "perf_diag_%d.csv" % len(diag)),
                              self.perf_ok) as ps:
                    w = self.wrk("diag crcr c64 %s" % label, rl.url + "/github/webhook", script,
                                 64, a.diag_duration, env)
                w["cpu_s"] = proc_cpu_s(pid) - cpu0
                w["perf"] = ps.counts
                w["loadavg"] = loadavg()
                diag[label] = w
                log("diag  %-45s %s req/s p50 %s p99 %s" % (label, fmt_num(w["rps"]),
                                                           fmt_ms(w["p50"]), fmt_ms(w["p99"])))
            finally:
                self.close_relay(rl)
        self.ingest_counts(body)

    def ingest_counts(self, body, n=100):
        """Per-webhook syscall and CPU counts: n webhooks sent one at a time to a fresh relay,
        the outbox drained (dry-run), all under perf stat. Counts, so speed-independent."""
        res = self.results["ingest"]
        rl = self.relay()
        try:
            rl.start()
            pid = rl.proc.pid
            conn = http.client.HTTPConnection("127.0.0.1", rl.port, timeout=30)
            with PerfStat(pid, os.path.join(self.out_dir, "perf_sequential.csv"),
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
            conn.close()
            res["sequential"] = {"n": n, "seconds": t_ingest, "per_webhook_ms": t_ingest / n *
                                 1000, "perf": ps.counts, "drained": drained,
                                 "targets": 4}
            c = ps.counts
            if c:
                log("per webhook (sequential, incl. outbox dry-run of 4 targets): %.1f fdatasync, "
                    "%.0f pwrite, %.0f futex, %.1f ms CPU"
                    % (c.get("syscalls:sys_enter_fdatasync", 0) / n,
                       c.get("syscalls:sys_enter_pwrite64", 0) / n,
                       c.get("syscalls:sys_enter_futex", 0) / n,
                       c.get("task-clock", 0) / n))
        finally:
            self.close_relay(rl)

    # ----------------------------------------------------------------------------- 2. fan-out

    def fanout(self):
        res = self.results.setdefault("fanout", {})
        repos = ["oot-vendor%03d/pytorch-backend-ci" % i for i in range(FANOUT_REPOS)]
        allowlist = "L1:\n" + "".join("  - %s\n" % r for r in repos)
        with open(R.APP_PUB, encoding="ascii") as f:
            pub = f.read()
        body = padded_payload("pull_request.opened")
        gh = F.FakeGitHub(app_id=APP_ID, public_key=pub, latency_ms=FANOUT_LATENCY_MS).start()
        runs = []
        try:
            # (workers, store on tmpfs): the default; more workers than repos; without fsync cost.
            for workers, tmpfs in ((32, False), (128, False), (32, True), (128, True)):
                env = {"GITHUB_APP_ID": str(APP_ID), "GITHUB_APP_PRIVATE_KEY_FILE": R.APP_KEY,
                       "GITHUB_API_URL": gh.url, "MAX_DISPATCH_WORKERS": str(workers)}
                rl = self.relay(env=env, allowlist=allowlist, tmpfs=tmpfs)
                store = "tmpfs" if tmpfs else "disk"
                try:
                    rl.start()
                    self.record("crcr server (fan-out, App mode, %s store)" % store,
                                [self.crcr, "serve"],
                                dict(env, GITHUB_API_URL="<fake GitHub, latency_ms=50>",
                                     ALLOWLIST_FILE="<100 repos, 100 owners>",
                                     CRCR_STORE="sqlite:%s/crcr.db" % (
                                         "/dev/shm/<tmp>" if tmpfs else "<tmp>"),
                                     CRCR_LOG="warn"))
                    kinds = ["cold", "warm", "warm", "warm"] if (workers, tmpfs) == (32, False) \
                        else ["cold", "warm"]
                    for k, kind in enumerate(kinds):
                        with PerfStat(rl.proc.pid, os.path.join(
                                self.out_dir, "perf_fanout_%d_%s_%d.csv" % (workers, store, k)),
                                self.perf_ok) as ps:
                            r = self._fanout_once(rl, gh, body, "fan-%s-%d-%s-%d" % (
                                self.run_id, workers, store, k))
                        r.update(kind=kind, workers=workers, store=store,
                                 fdatasync=ps.counts.get("syscalls:sys_enter_fdatasync"))
                        runs.append(r)
                        log("fan-out %-4s workers %3d %-5s: 202 in %s, 100th dispatch answered at"
                            " %s; %.2f API calls/dispatch (%s); fake overhead p50 %s max %s"
                            % (kind, workers, store, fmt_ms(r["ack_ms"]), fmt_ms(r["t100_ms"]),
                               r["calls_per_dispatch"], r["by_kind"], fmt_ms(r["fake_p50_ms"]),
                               fmt_ms(r["fake_max_ms"])))
                finally:
                    self.close_relay(rl)
                    gh.clear()
        finally:
            gh.stop()
        res["runs"] = runs

    def _fanout_once(self, rl, gh, body, delivery):
        gh.clear()
        t0 = time.monotonic()
        st, _ = self.send_webhook(rl.port, body, delivery)
        ack = time.monotonic()
        if st != 202:
            raise RuntimeError("fan-out webhook answered %d" % st)
        deadline = t0 + 60
        disp = []
        while time.monotonic() < deadline:
            disp = [q for q in gh.requests(method="POST", path_re=r"/dispatches$")
                    if q.status == 204]
            if len(disp) >= FANOUT_REPOS:
                break
            time.sleep(0.005)
        gh.wait_idle(idle=0.5, timeout=30)
        reqs = gh.requests()
        by_kind = {}
        for q in reqs:
            k = ("installation" if q.path.endswith("/installation") else
                 "token" if q.path.endswith("/access_tokens") else
                 "dispatch" if q.path.endswith("/dispatches") else q.path)
            by_kind[k] = by_kind.get(k, 0) + 1
        ok = [q for q in reqs if q.path.endswith("/dispatches") and q.status == 204]
        t100 = (max(q.answered for q in ok) - t0) * 1000 if len(ok) >= FANOUT_REPOS else None
        over = sorted((q.answered - q.time) * 1000 - FANOUT_LATENCY_MS for q in reqs
                      if q.answered is not None)
        # Highest number of requests the fake was serving at once.
        events = sorted([(q.time, 1) for q in reqs] + [(q.answered, -1) for q in reqs
                                                       if q.answered is not None])
        cur = peak = 0
        for _, d in events:
            cur += d
            peak = max(peak, cur)
        arrivals = sorted((q.time - t0) * 1000 for q in reqs if q.path.endswith("/dispatches"))
        return {"ack_ms": (ack - t0) * 1000, "t100_ms": t100, "dispatched": len(ok),
                "first_dispatch_ms": arrivals[0] if arrivals else None,
                "last_dispatch_ms": arrivals[-1] if arrivals else None,
                "calls": len(reqs), "calls_per_dispatch": len(reqs) / max(1, len(ok)),
                "by_kind": by_kind,
                "fake_p50_ms": over[len(over) // 2] if over else None,
                "fake_max_ms": over[-1] if over else None, "fake_peak_inflight": peak,
                "non204": len([q for q in reqs if q.status not in (200, 201, 204)])}

    # ----------------------------------------------------------------------------- 3. callbacks

    def callbacks(self):
        a = self.args
        res = self.results.setdefault("callbacks", {})
        issuer = OidcIssuer(os.path.join(DATA, "keys", "oidc.pem")).start()
        body = padded_payload("pull_request.opened")
        variants = [("disk", False)] + ([] if a.no_diag else [("tmpfs", True)])
        try:
            for name, tmpfs in variants:
                env = {"CRCR_OIDC_ISSUERS": issuer.url, "RATE_LIMIT_PER_MIN": "2000000000"}
                rl = self.relay(env=env, tmpfs=tmpfs)
                try:
                    rl.start()
                    self.record("crcr server (callbacks, %s store)" % name, [self.crcr, "serve"],
                                dict(env, CRCR_OIDC_ISSUERS="<bench OIDC issuer on 127.0.0.1>",
                                     CRCR_LOG="warn"))
                    r = self._callbacks_run(rl, issuer, body, name,
                                            a.duration if name == "disk" else a.diag_duration)
                    res[name] = r
                    log("callbacks (%s store) c32: %s req/s p50 %s p99 %s non2xx %d; runs "
                        "completed %d, in_progress %d"
                        % (name, fmt_num(r["rps"]), fmt_ms(r["p50"]), fmt_ms(r["p99"]),
                           r["non2xx"], r["states"].get("completed", 0),
                           r["states"].get("in_progress", 0)))
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

    def _callbacks_run(self, rl, issuer, body, name, duration):
        delivery, paths = self._callback_templates(rl, body, name)
        token = issuer.mint(CALLBACK_REPO, lifetime_s=1200)
        # One pair by hand first: both must answer 200, or the wrk numbers mean nothing.
        self.post_callbacks(rl.port, paths, token, [1])
        env = {"CB_TOKEN": token, "CB_IP": paths["ip"], "CB_DONE": paths["done"],
               "CB_BASE": "1000000", "CB_BLOCK": str(CB_BLOCK)}
        pid = rl.proc.pid
        cpu0 = proc_cpu_s(pid)
        la = loadavg()
        with PerfStat(pid, os.path.join(self.out_dir, "perf_callbacks_%s.csv" % name),
                      self.perf_ok) as ps:
            w = self.wrk("callbacks crcr c32 (%s store)" % name, rl.url + "/github/callback",
                         os.path.join(HERE, "callback.lua"), 32, duration, env)
        w["cpu_s"] = proc_cpu_s(pid) - cpu0
        w["perf"] = ps.counts
        w["loadavg"] = la
        w["body_bytes"] = os.path.getsize(paths["done"])
        m = re.search(r"first non-200 answers:\n((?:.+\n?){1,3})", w["raw"])
        w["bad_sample"] = m.group(1).strip() if m else ""
        con = self.db(rl)
        try:
            w["states"] = dict(con.execute(
                "SELECT state, count(*) FROM runs WHERE delivery_id=? AND run_id>=1000000 "
                "GROUP BY state", (delivery,)).fetchall())
        finally:
            con.close()
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
        return {"total_ir": total, "ir_per_webhook": (total or 0) / max(1, n),
                "self_top": self_rows[:25],
                "incl_top": [r for r in incl_rows if r[3].startswith("crcr")][:25],
                "by_object": sorted(by_obj.items(), key=lambda kv: -kv[1])}

    # ----------------------------------------------------------------------------- report

    def table(self):
        """The summary rows: (metric, crcr, peer, ratio, target, verdict)."""
        rows = []
        ing = self.results.get("ingest", {})
        for c in (16, 64):
            cr, pe = ing.get("crcr_c%d" % c), ing.get("peer_c%d" % c)
            if not cr or not pe:
                continue
            rr = (cr["rps"] or 0) / pe["rps"] if pe.get("rps") else None
            tgt = ">= 3x peer, p99 <= 10 ms" if c == 64 else "-"
            verdict = ("met" if rr is not None and rr >= 3 and (cr["p99"] or 1e9) <= 10
                       else "MISSED") if c == 64 else "-"
            rows.append(("ingest c%d req/s" % c, fmt_num(cr["rps"]), fmt_num(pe["rps"]),
                         ratio(cr["rps"], pe["rps"]), tgt, verdict))
            rows.append(("ingest c%d p50 / p99" % c, "%s / %s" % (fmt_ms(cr["p50"]),
                                                                  fmt_ms(cr["p99"])),
                         "%s / %s" % (fmt_ms(pe["p50"]), fmt_ms(pe["p99"])),
                         ratio(cr["p99"], pe["p99"]) + " (p99)", "-", "-"))
            cpu_c = cr["cpu_s"] / cr["requests"] * 1e6 if cr.get("requests") else None
            cpu_p = pe["cpu_s"] / pe["requests"] * 1e6 if pe.get("requests") else None
            rows.append(("ingest c%d server CPU per request" % c,
                         "%s us" % fmt_num(cpu_c), "%s us" % fmt_num(cpu_p), ratio(cpu_c, cpu_p),
                         "-", "-"))
        if ing.get("crcr_c64"):
            cr, pe = ing["crcr_c64"], ing.get("peer_c64", {})
            hwm = max(cr.get("hwm_kib", 0), ing.get("crcr_c16", {}).get("hwm_kib", 0))
            rows.append(("peak RSS during ingest (VmHWM)", "%.1f MiB" % (hwm / 1024),
                         "%.1f MiB" % (pe.get("hwm_kib", 0) / 1024),
                         ratio(hwm, pe.get("hwm_kib")), "<= 64 MiB",
                         "met" if hwm <= 64 * 1024 else "MISSED"))
        fo = self.results.get("fanout", {}).get("runs", [])
        for kind in ("cold", "warm"):
            rs = [r for r in fo if r["kind"] == kind and r["workers"] == 32 and
                  r["store"] == "disk" and r["t100_ms"]]
            if not rs:
                continue
            t = sorted(r["t100_ms"] for r in rs)[len(rs) // 2]
            cpd = sorted(r["calls_per_dispatch"] for r in rs)[len(rs) // 2]
            tgt = "<= %d ms (4 x 50 ms)" % (4 * FANOUT_LATENCY_MS) if kind == "warm" else "-"
            rows.append(("fan-out %s: webhook -> 100th dispatch" % kind, fmt_ms(t), "-",
                         "%.1fx latency" % (t / FANOUT_LATENCY_MS), tgt,
                         ("met" if t <= 4 * FANOUT_LATENCY_MS else "MISSED") if kind == "warm"
                         else "-"))
            rows.append(("fan-out %s: API calls per dispatch" % kind, "%.2f" % cpd,
                         "3.00 (upstream)", "-", "1.00" if kind == "warm" else "-",
                         ("met" if cpd <= 1.0 else "MISSED") if kind == "warm" else "-"))
        cb = self.results.get("callbacks", {}).get("disk")
        if cb:
            rows.append(("callbacks c32 req/s", fmt_num(cb["rps"]), "-", "-", ">= 2,000/s",
                         "met" if (cb["rps"] or 0) >= 2000 else "MISSED"))
            rows.append(("callbacks c32 p50 / p99", "%s / %s" % (fmt_ms(cb["p50"]),
                                                                 fmt_ms(cb["p99"])), "-", "-",
                         "p99 <= 20 ms", "met" if (cb["p99"] or 1e9) <= 20 else "MISSED"))
        mem = self.results.get("memory")
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
        prof = self.results.get("profile")
        if prof and prof.get("total_ir"):
            rows.append(("instructions per webhook (callgrind, incl. outbox)",
                         fmt_num(prof["ir_per_webhook"]), "-", "-", "-", "-"))
        pc = self.results.get("profile_callbacks")
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

    def markdown(self, rows):
        a = self.args
        L = []
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        L.append("## Run %s" % now)
        L.append("")
        L.append("Host: %s, %d CPUs, kernel %s; load average at start %s. crcr %s (%s); "
                 "node %s; %s; SQLite %s. Sections: %s. Total %.0f s."
                 % (platform.node() or "?", os.cpu_count() or 0, platform.release(),
                    self.load_start, self.crcr_version, os.path.relpath(self.crcr, ROOT),
                    self.tool_version(["node", "--version"]),
                    self.tool_version(["wrk", "--version"]).split(" Copyright")[0],
                    self.tool_version(["pkg-config", "--modversion", "sqlite3"]),
                    ",".join(self.sections),
                    time.monotonic() - self.t_start))
        L.append("")
        L.append("| metric | crcr | peer | ratio | target | verdict |")
        L.append("|---|---|---|---|---|---|")
        for r in rows:
            L.append("| " + " | ".join(str(c) for c in r) + " |")
        L.append("")
        ing = self.results.get("ingest")
        if ing:
            L.append("### Ingest detail")
            L.append("")
            L.append("fsync probe on the store's disk (30 KB append + fdatasync): median %.2f ms,"
                     " p90 %.2f ms. crcr threads: %s; RSS idle %.1f MiB."
                     % (ing["fsync_ms"][0], ing["fsync_ms"][1], ing.get("threads"),
                        ing.get("rss_idle_kib", 0) / 1024))
            L.append("")
            L.append("| run | req/s | p50 | p90 | p99 | requests | non-2xx | timeouts | CPU/req |"
                     " fdatasync/req | futex/req | ctx-sw/req | load |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

            def line(name, w):
                n = w.get("requests") or 0
                pf = w.get("perf") or {}

                def per(ev):
                    return "%.2f" % (pf[ev] / n) if n and ev in pf else "-"

                cpu = "%s us" % fmt_num(w["cpu_s"] / n * 1e6) if n and "cpu_s" in w else "-"
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                         % (name, fmt_num(w.get("rps")), fmt_ms(w.get("p50")),
                            fmt_ms(w.get("p90")), fmt_ms(w.get("p99")), fmt_num(n),
                            w.get("non2xx"), w.get("timeouts"), cpu,
                            per("syscalls:sys_enter_fdatasync"), per("syscalls:sys_enter_futex"),
                            per("context-switches"), w.get("loadavg", "-")))

            for c in (16, 64):
                for who in ("peer", "crcr"):
                    w = ing.get("%s_c%d" % (who, c))
                    if w:
                        line("%s c%d%s" % (who, c, " (stored %s)" % fmt_num(w["stored"])
                                           if "stored" in w else ""), w)
            for label, w in ing.get("diag", {}).items():
                line("crcr c64 " + label, w)
            L.append("")
            seq = ing.get("sequential")
            if seq and seq.get("perf"):
                pf, n = seq["perf"], seq["n"]
                L.append("Per webhook, %d sent one at a time to a fresh relay (4 targets, dry-run),"
                         " outbox drained, counted by `perf stat`: %.1f fdatasync, %.1f pwrite64, "
                         "%.1f fcntl, %.1f futex, %.1f context switches, %.2f ms CPU (task-clock, "
                         "all threads); %.2f ms wall per webhook."
                         % (n, pf.get("syscalls:sys_enter_fdatasync", 0) / n,
                            pf.get("syscalls:sys_enter_pwrite64", 0) / n,
                            pf.get("syscalls:sys_enter_fcntl", 0) / n,
                            pf.get("syscalls:sys_enter_futex", 0) / n,
                            pf.get("context-switches", 0) / n, pf.get("task-clock", 0) / n,
                            seq["per_webhook_ms"]))
                L.append("")
        fo = self.results.get("fanout", {}).get("runs")
        if fo:
            L.append("### Fan-out detail (100 repos, 100 owners, fake GitHub +%d ms per request)"
                     % FANOUT_LATENCY_MS)
            L.append("")
            L.append("| run | workers | store | 202 after | first / last dispatch sent | 100th "
                     "dispatch answered | calls | per dispatch | calls by kind | fdatasync | fake "
                     "overhead p50 / max | fake peak in flight |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in fo:
                L.append("| %s | %d | %s | %s | %s / %s | %s | %d | %.2f | %s | %s | %s / %s | %d |"
                         % (r["kind"], r["workers"], r["store"], fmt_ms(r["ack_ms"]),
                            fmt_ms(r["first_dispatch_ms"]), fmt_ms(r["last_dispatch_ms"]),
                            fmt_ms(r["t100_ms"]),
                            r["calls"], r["calls_per_dispatch"],
                            ", ".join("%s %d" % kv for kv in sorted(r["by_kind"].items())),
                            fmt_num(r.get("fdatasync")), fmt_ms(r["fake_p50_ms"]),
                            fmt_ms(r["fake_max_ms"]), r["fake_peak_inflight"]))
            L.append("")
        cb = self.results.get("callbacks")
        if cb:
            L.append("### Callbacks detail (wrk -t1 -c32, blocks of %d in_progress then %d "
                     "completed, one L2 repo, RS256 token reused)" % (CB_BLOCK, CB_BLOCK))
            L.append("")
            L.append("| store | req/s | p50 | p90 | p99 | requests | non-2xx | runs completed |"
                     " runs in_progress | body bytes | CPU/req | fdatasync/req | load |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for name, w in cb.items():
                n = w.get("requests") or 0
                pf = w.get("perf") or {}
                fd = ("%.2f" % (pf["syscalls:sys_enter_fdatasync"] / n)
                      if n and "syscalls:sys_enter_fdatasync" in pf else "-")
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                         % (name, fmt_num(w["rps"]), fmt_ms(w["p50"]), fmt_ms(w["p90"]),
                            fmt_ms(w["p99"]), fmt_num(n), w["non2xx"],
                            fmt_num(w["states"].get("completed", 0)),
                            fmt_num(w["states"].get("in_progress", 0)), fmt_num(w["body_bytes"]),
                            "%s us" % fmt_num(w["cpu_s"] / n * 1e6) if n else "-", fd,
                            w["loadavg"]))
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
            L.append("Total %s instructions, %s per webhook. By object (self cost):"
                     % (fmt_num(prof["total_ir"]), fmt_num(prof["ir_per_webhook"])))
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
            for ir, pct, fn, obj in prof["self_top"][:20]:
                L.append("| %s | %.2f%% | `%s` | %s |" % (fmt_num(ir), pct, fn, obj))
            L.append("")
            L.append("Inclusive cost of crcr's own functions:")
            L.append("")
            L.append("| inclusive | per webhook | share | function |")
            L.append("|---|---|---|---|")
            for ir, pct, fn, obj in prof["incl_top"][:20]:
                L.append("| %s | %s | %.2f%% | `%s` |" % (fmt_num(ir), fmt_num(ir / prof["n"]),
                                                        pct, fn))
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
            L.append("| inclusive per callback | share | function |")
            L.append("|---|---|---|")
            for ir, pct, fn, obj in pc["incl_top"][:16]:
                L.append("| %s | %.2f%% | `%s` |" % (fmt_num(ir / pc["n"]), pct, fn))
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
        for s in sections:
            t = time.monotonic()
            log("== %s" % s)
            try:
                getattr(self, s)()
            except Exception as e:  # keep going: one broken section must not hide the others
                log("section %s failed: %r" % (s, e))
                self.notes.append("section %s failed: %s" % (s, str(e)[:300]))
            log("== %s done in %.0f s" % (s, time.monotonic() - t))
        with open(os.path.join(self.out_dir, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)
        rows = self.table()
        self.print_table(rows)
        md = self.markdown(rows)
        self.write_file("results.md", md)
        if not self.args.no_append:
            with open(os.path.join(HERE, "RESULTS.md"), "a", encoding="utf-8") as f:
                f.write("\n" + md)
            log("appended to bench/RESULTS.md")
        log("total %.0f s" % (time.monotonic() - self.t_start))


SECTIONS = ["ingest", "fanout", "callbacks", "memory", "profile"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crcr", default=os.path.join(ROOT, "build-bench", "crcr"))
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections (default: all): " + ",".join(SECTIONS))
    ap.add_argument("--duration", type=int, default=10, help="seconds per main load run")
    ap.add_argument("--diag-duration", type=int, default=5,
                    help="seconds per diagnostic load run")
    ap.add_argument("--no-diag", action="store_true", help="skip the diagnostic runs")
    ap.add_argument("--drain", type=int, default=20,
                    help="max seconds to wait for the outbox to drain (sequential count run)")
    ap.add_argument("--memory-total", type=int, default=100000)
    ap.add_argument("--memory-chunks", type=int, default=10)
    ap.add_argument("--memory-budget", type=int, default=240,
                    help="max seconds of load in the memory section (cut further by --total)")
    ap.add_argument("--total", type=int, default=570,
                    help="seconds the whole bench/run.sh run should stay under (memory adapts)")
    ap.add_argument("--profile-reserve", type=int, default=150,
                    help="seconds kept for the profile section when it follows memory")
    ap.add_argument("--profile-n", type=int, default=150, help="webhooks under callgrind")
    ap.add_argument("--profile-callbacks", type=int, default=60,
                    help="callback pairs under callgrind (0: skip)")
    ap.add_argument("--no-append", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args()
    sections = [s for s in args.only.split(",") if s]
    for s in sections:
        if s not in SECTIONS:
            ap.error("unknown section %r" % s)
    if not os.access(args.crcr, os.X_OK):
        ap.error("no crcr binary at %s (bench/run.sh builds it)" % args.crcr)
    Bench(args).run(sections)


if __name__ == "__main__":
    main()
