"""End-to-end: no client holds the front door, and nothing acknowledged is lost at it (issue 23,
items 2-4; spec §5.1, §7, §8). The real relay on 127.0.0.1:

- Flood: one client from a loopback address of its own (127.0.0.2) holds 3,000 connections open
  (a partial header, one more byte every 2 s) and reopens each one the relay cuts or refuses, while
  signed webhooks come one after another from 127.0.0.1: every one is answered 202 and none waits
  past 2 s. The relay keeps the flooding peer at CRCR_MAX_CONNECTIONS_PER_CLIENT (refused at accept
  beyond it) and cuts its held connections at CRCR_HEADER_TIMEOUT_MS.
- 48 concurrent 25 MiB uploads with a wrong signature, three bursts: all refused (401 once the
  HMAC computed as the body arrived fails, or 503 + Retry-After from the budget of
  unauthenticated bodies: at once when the declared length does not fit, at the end of a body that
  outgrew it midway), nothing stored; the relay's peak RSS stays
  within baseline + 96 MiB and its RSS is back within baseline + 16 MiB within 10 s of each burst
  (glibc's dynamic mmap threshold used to keep 25 MiB per arena after every burst: app.c).
- Header timeout: a slowloris sending one header byte every 0.1 s is cut at CRCR_HEADER_TIMEOUT_MS.
- Disk full: the store on a size-capped tmpfs the test mounts (root only; skipped with a message
  otherwise), filled while webhooks arrive: every 202 corresponds to a stored delivery that is
  dispatched (to every target) once space returns, every other answer is 503, /readyz and
  /metrics say why meanwhile, and the same relay process serves again without a restart. SQLite
  in the default pass; PostgreSQL (a throwaway cluster of its own, data directory on the tmpfs,
  write-ahead log beside it: the server refuses writes with SQLSTATE 53100 instead of stopping)
  in the CRCR_E2E_PG_URI pass of scripts/test.sh, which runs only that test of this suite (the
  others are not about the store).

Real time. The flood's 2 s bound and the header timeout are themselves about time: they are
measured on the wall clock, bounded, and printed. The flood's bound is the acceptance figure of
issue 23 (GitHub gives up after 10 s); the header-timeout test allows 1.5 s past the timeout
for the reaper's tick and the client's own lag. Everything else awaits events. Figures go to
stderr ("[figures]"). Needs CRCR_BIN; see tests/support/README.md.
"""

import errno
import http.client
import json
import multiprocessing
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import relay as R
from test_dispatch import DISPATCH_PATH, GitHubRelayMixin, pair_counts, wait_until

FLOOD_PEER = "127.0.0.2"
FLOOD_HOLD = 3000
FLOOD_S = 10.0
FLOOD_WAIT_MAX_S = 2.0  # issue 23's acceptance: no signed webhook waits longer (GitHub's limit is
# 10 s); real time is this test's subject: how long GitHub would wait for an answer
PER_CLIENT = 64  # CRCR_MAX_CONNECTIONS_PER_CLIENT default

BURST_N = 48
BURST_SIZE = 25 * 1024 * 1024
BURSTS = 3
PEAK_MIB = 96
AFTER_MIB = 16
RETURN_WITHIN_S = 10.0

TMPFS_SIZE = "16m"
PG_TMPFS_SIZE = "96m"
PAD = 512 * 1024  # bytes of padding in a webhook sent to a full disk: more than a page holds


def note(msg):
    sys.stderr.write("    [figures] %s\n" % msg)
    sys.stderr.flush()


def vm_mib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no %s for pid %d" % (field, pid))


def sanitized(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def scrape(relay, name):
    for line in relay.get("/metrics", timeout=60).body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("%s not on /metrics" % name)


def percentile(values, p):
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))] if s else 0.0


class RelayMixin:
    """The flood, upload and header-timeout tests: their subject is the front door, not the
    store, so the SQLite pass runs them and the PostgreSQL pass of this suite (CRCR_E2E_PG_URI)
    runs only its disk-full test."""

    def setUp(self):
        if os.environ.get("CRCR_E2E_PG_URI"):
            self.skipTest("not about the store: runs in the SQLite pass")
        super().setUp()

    def start_relay(self, env=None):
        relay = R.Relay(env=env)
        self.addCleanup(relay.close)
        self.addCleanup(R.check_clean_exit, self, relay)  # runs before close
        relay.start()
        return relay


# ------------------------------------------------------------------------------ the flood


def flood(port, hold, stop, stats):
    """The flooding client (a process of its own): keeps `hold` connections from FLOOD_PEER open,
    each with a partial header and one more byte every 2 s, and reopens every one that the relay
    closes. stats: [sockets held after the last refill, opened in all, closed by the relay]."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, hold + 1024), hard))
    sel = selectors.DefaultSelector()
    socks = {}
    opened = cut = 0

    def open_one():
        nonlocal opened
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind((FLOOD_PEER, 0))
            s.connect_ex(("127.0.0.1", port))
        except OSError:
            s.close()
            return
        socks[s.fileno()] = [s, False]
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
        opened += 1

    def drop(s):
        nonlocal cut
        sel.unregister(s)
        del socks[s.fileno()]
        s.close()
        cut += 1

    last_trickle = time.monotonic()
    while not stop.is_set():
        while len(socks) < hold:
            open_one()
        stats[0], stats[1], stats[2] = len(socks), opened, cut
        for key, ev in sel.select(0.1):
            s = key.fileobj
            if s.fileno() not in socks:
                continue
            ent = socks[s.fileno()]
            if ev & selectors.EVENT_READ:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    drop(s)
                    continue
            if ev & selectors.EVENT_WRITE and not ent[1]:
                try:
                    s.send(b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    ent[1] = True
                    sel.modify(s, selectors.EVENT_READ)
                except OSError:
                    drop(s)
        now = time.monotonic()
        if now - last_trickle >= 2.0:
            last_trickle = now
            for s, started in list(socks.values()):
                if started:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
    for s, _ in socks.values():
        s.close()


class FloodTest(RelayMixin, unittest.TestCase):
    def test_signed_webhooks_are_answered_while_one_peer_floods_3000_connections(self):
        probe = socket.socket()
        try:
            probe.bind((FLOOD_PEER, 0))
        except OSError as e:
            self.skipTest("%s is not usable as a source address here (%s)" % (FLOOD_PEER, e))
        finally:
            probe.close()
        relay = self.start_relay(env={"CRCR_LOG": "info"})
        payload = R.load_example("pull_request.opened")
        self.assertEqual(relay.webhook("pull_request", payload).status, 202)

        stop = multiprocessing.Event()
        stats = multiprocessing.Array("l", 3)
        attacker = multiprocessing.Process(target=flood, args=(relay.port, FLOOD_HOLD, stop,
                                                               stats), daemon=True)
        attacker.start()

        def end_attack():
            stop.set()
            attacker.join(30)
            if attacker.is_alive():
                attacker.kill()
        self.addCleanup(end_attack)
        # The flood is on: the attacker holds its sockets and the relay refuses its surplus.
        self.assertTrue(wait_until(lambda: stats[0] >= FLOOD_HOLD
                                   and scrape(relay, "crcr_http_client_refused_total") > 0, 60),
                        "the flood never got going: attacker %s" % list(stats[:]))

        lat, statuses, held = [], [], []
        until = time.monotonic() + FLOOD_S
        while time.monotonic() < until:
            t0 = time.monotonic()
            try:
                status = relay.webhook("pull_request", payload, timeout=15).status
            except (OSError, http.client.HTTPException) as e:
                status = "error: %r" % e
            lat.append(time.monotonic() - t0)
            statuses.append(status)
            held.append(scrape(relay, "crcr_http_connections"))
            time.sleep(0.1)  # the pace of the signed webhooks, not a wait for the relay
        # The relay cuts the flood's idle connections at the header timeout: await (event, not a
        # time) more cuts than the attacker held at once, i.e. it reopened and was cut again.
        wait_until(lambda: stats[2] > FLOOD_HOLD, 120)
        attacker_open, opened, cut = stats[:]
        end_attack()

        refused = scrape(relay, "crcr_http_client_refused_total")
        header_cuts = scrape(relay, "crcr_http_header_timeouts_total")
        note("flood: %s held %d connections (%d opened in all, %d closed by the relay); relay "
             "held at most %d connections, refused %d at accept, cut %d at the header timeout"
             % (FLOOD_PEER, attacker_open, opened, cut, max(held), refused, header_cuts))
        note("signed webhooks from 127.0.0.1 meanwhile: %d, all answered %s, p50 %.0f ms, "
             "slowest %.0f ms (bound %.0f ms)" % (len(lat), sorted(set(map(str, statuses))),
                                                 1000 * percentile(lat, 50), 1000 * max(lat),
                                                 1000 * FLOOD_WAIT_MAX_S))
        self.assertGreaterEqual(len(lat), 10)
        self.assertEqual(set(statuses), {202}, statuses)
        self.assertLessEqual(max(lat), FLOOD_WAIT_MAX_S, "a signed webhook waited %.2f s" % max(lat))
        self.assertGreater(refused, 0)
        self.assertGreater(cut, FLOOD_HOLD, "the relay never closed the flood's connections")
        # The peer's share plus the scrape and the webhook: the cap held (exact, not approximate).
        self.assertLessEqual(max(held), PER_CLIENT + 3)
        self.assertTrue(relay.running())


# ------------------------------------------------------------------------------ the uploads


def upload(port, size, body, out, i):
    """One wrong-signature upload of `size` bytes; out[i] is the status line's code, or the error
    when the relay closed the connection without a readable answer."""
    head = ("POST /github/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n"
            "Content-Type: application/json\r\nX-GitHub-Event: pull_request\r\n"
            "X-GitHub-Delivery: %s\r\nX-Hub-Signature-256: sha256=%s\r\n\r\n"
            % (size, uuid.uuid4(), "0" * 64)).encode()
    got = b""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        try:
            s.sendall(head)
            s.sendall(body)
        except OSError:
            pass  # answered early (503): the relay stopped reading
        try:
            while b"\r\n\r\n" not in got:
                data = s.recv(65536)
                if not data:
                    break
                got += data
        except OSError as e:
            if not got:
                out[i] = "closed: %s" % errno.errorcode.get(e.errno, e.errno)
                return
    finally:
        s.close()
    out[i] = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1 ") else "closed"


class UploadBurstTest(RelayMixin, unittest.TestCase):
    def test_wrong_signature_uploads_are_refused_and_their_memory_given_back(self):
        env = {"CRCR_LOG": "info"}
        relay = self.start_relay(env=env)
        pid = relay.proc.pid
        asan = sanitized(pid)
        if asan:  # ASan keeps freed memory in its quarantine: keep that small for this relay
            relay.close()
            env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16"
            relay = self.start_relay(env=env)
            pid = relay.proc.pid
        self.assertEqual(relay.webhook("pull_request", R.load_example("pull_request.opened"))
                         .status, 202)
        base = vm_mib(pid, "VmRSS")
        body = b"x" * BURST_SIZE
        figures = []
        refused_before = 0
        for burst in range(BURSTS):
            out = [None] * BURST_N
            threads = [threading.Thread(target=upload, args=(relay.port, BURST_SIZE, body, out, i))
                       for i in range(BURST_N)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            peak = vm_mib(pid, "VmHWM")
            t0 = time.monotonic()
            back = wait_until(lambda: vm_mib(pid, "VmRSS") - base <= AFTER_MIB, RETURN_WITHIN_S,
                              0.1)
            after = vm_mib(pid, "VmRSS")
            codes = {c: out.count(c) for c in set(out)}
            figures.append("burst %d: %s, peak +%.1f MiB, RSS +%.1f MiB %.1f s later"
                           % (burst + 1, codes, peak - base, after - base, time.monotonic() - t0))
            self.assertFalse([c for c in out if c not in ("401", "503")
                              and not str(c).startswith("closed")],
                             "an upload was not refused: %s" % codes)
            # The relay's own count, not the client's view: on a slow machine the request
            # deadline may cut an upload before the budget answers it, or the answer is lost in
            # the reset of a socket still sending (both seen as "closed").
            refused = scrape(relay, "crcr_http_unauth_budget_refused_total")
            self.assertGreater(refused, refused_before,
                               "the budget of unauthenticated bodies refused nothing: %s" % codes)
            refused_before = refused
            self.assertLessEqual(peak - base, PEAK_MIB * (2 if asan else 1),
                                 "peak RSS %.1f MiB over the baseline" % (peak - base))
            if not asan:  # ASan's allocator keeps its own mappings: the return is glibc's
                self.assertTrue(back, "RSS still %.1f MiB over the baseline %.0f s after burst %d"
                                % (after - base, RETURN_WITHIN_S, burst + 1))
        note("48 x 25 MiB wrong-signature uploads, baseline %.1f MiB%s: %s"
             % (base, " [ASan build]" if asan else "", "; ".join(figures)))
        rc, out, err = relay.cli(["deliveries", "list", "--format", "json"])
        self.assertEqual((rc, len(json.loads(out))), (0, 1), out[:300])  # the warm-up webhook
        self.assertGreater(scrape(relay, "crcr_http_unauth_budget_refused_total"), 0)
        self.assertEqual(scrape(relay, "crcr_http_unauth_body_bytes"), 0)


# ------------------------------------------------------------------------------ header timeout


class HeaderTimeoutTest(RelayMixin, unittest.TestCase):
    TIMEOUT_MS = 500

    def test_a_slowloris_is_cut_at_the_header_timeout(self):
        relay = self.start_relay(env={"CRCR_HEADER_TIMEOUT_MS": str(self.TIMEOUT_MS),
                                      "CRCR_REQUEST_DEADLINE_SECONDS": "60"})
        s = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        s.sendall(b"POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        s.settimeout(0.1)
        closed_at = None
        while time.monotonic() - t0 < 10:
            try:
                s.send(b"a")  # one byte every 0.1 s: never idle
                if s.recv(1024) == b"":
                    closed_at = time.monotonic() - t0
                    break
            except socket.timeout:
                continue
            except OSError:
                closed_at = time.monotonic() - t0
                break
        note("slowloris cut after %s s (CRCR_HEADER_TIMEOUT_MS %d)"
             % ("%.2f" % closed_at if closed_at else "never", self.TIMEOUT_MS))
        self.assertIsNotNone(closed_at, "a slowloris outlived the header timeout by 10 s")
        self.assertGreaterEqual(closed_at, self.TIMEOUT_MS / 1000.0 - 0.1)
        self.assertLessEqual(closed_at, self.TIMEOUT_MS / 1000.0 + 1.5)
        self.assertEqual(scrape(relay, "crcr_http_header_timeouts_total"), 1)
        self.assertEqual(relay.webhook("pull_request", R.load_example("pull_request.opened"))
                         .status, 202)


# ------------------------------------------------------------------------------ disk full


def mount_tmpfs(test, path, size):
    if os.geteuid() != 0:
        test.skipTest("needs root to mount a size-capped tmpfs (CI runs the suite as root)")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        test.skipTest("cannot mount a tmpfs here: %s" % p.stderr.strip())
    test.addCleanup(subprocess.run, ["umount", "-l", path], capture_output=True)


def fill(path):
    """Writes zeros into `path` until the filesystem is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            n += os.write(fd, chunk)  # a short write, then ENOSPC
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return n


class DiskFullMixin(GitHubRelayMixin):
    def hook(self, pad):
        doc = json.loads(R.load_example("pull_request.opened"))
        doc["crcr_pad"] = os.urandom(pad // 2).hex()
        return self.relay.webhook("pull_request", doc)

    def run_disk_full(self, mountpoint, store_env, want_reason):
        relay, gh = self.start_pair(env=dict({"CRCR_LOG": "info"}, **store_env))
        pid = relay.proc.pid
        accepted, refused = [], []

        def send(pad):
            r = self.hook(pad)
            self.assertIn(r.status, (202, 503), r.body[:300])
            (accepted if r.status == 202 else refused).append(r.delivery)
            return r

        for _ in range(3):
            self.assertEqual(send(1000).status, 202)
        # Dispatches wait at the fake until the end: what is dispatched is what was stored.
        hold = gh.hold("POST", DISPATCH_PATH, count=None, after=False, timeout=120)
        self.addCleanup(hold.release)

        filler = os.path.join(mountpoint, "filler")
        filled = fill(filler)
        before_full = len(accepted)
        for _ in range(100):  # WAL and free pages take some first; the tmpfs holds far less
            r = send(PAD)
            if r.status == 503:
                break
        self.assertTrue(refused, "100 webhooks of %d KiB were stored on a full disk" % (PAD // 1024))
        self.assertEqual(r.json(), {"detail": "store unavailable, please redeliver"})
        ready = relay.get("/readyz")
        self.assertEqual(ready.status, 503, ready.body)
        doc = ready.json()
        self.assertFalse(doc["store"])
        self.assertIn(want_reason, doc["store_error"])
        self.assertIn("store_error_since", doc)
        self.assertEqual(scrape(relay, "crcr_store_write_fault"), 1)
        for _ in range(5):  # still arriving while the disk stays full
            send(PAD)

        os.unlink(filler)
        t0 = time.monotonic()
        self.assertTrue(wait_until(lambda: relay.get("/readyz").status == 200, 30, 0.1),
                        "/readyz never recovered: %s%s" % (relay.get("/readyz").body, self.diag()))
        recovered_s = time.monotonic() - t0
        for _ in range(3):
            self.assertEqual(send(1000).status, 202)
        self.assertEqual(scrape(relay, "crcr_store_write_fault"), 0)

        hold.release()
        want = {(d, t) for d in accepted for t in R.DEFAULT_TARGETS}
        self.wait_pairs(want, timeout=30)
        counts = pair_counts(gh)
        self.assertFalse([p for p in counts if p[0] in refused], "a refused webhook was dispatched")
        for d in refused:
            rc, out, err = relay.cli(["deliveries", "show", d, "--format", "json"])
            self.assertNotEqual(rc, 0, "a webhook answered 503 is in the store: %s" % out[:200])
        self.assertEqual(relay.proc.pid, pid)
        self.assertTrue(relay.running())
        log = relay.log_text()
        self.assertIn("event=store.write_fault", log)
        self.assertIn("event=store.write_recovered", log)
        note("disk full (%s): %.1f MiB filler; %d webhooks 202 before the disk filled, %d after "
             "it filled, %d answered 503; /readyz ready %.1f s after space returned; %d pairs "
             "dispatched once space returned (at most %d times each)"
             % (want_reason, filled / 1048576.0, before_full, len(accepted) - before_full - 3,
                len(refused), recovered_s, len(want), max(counts.values())))


class SqliteDiskFullTest(DiskFullMixin, unittest.TestCase):
    def test_a_full_disk_answers_503_loses_nothing_acknowledged_and_recovers(self):
        if os.environ.get("CRCR_E2E_PG_URI"):
            self.skipTest("the SQLite disk-full test runs in the SQLite pass")
        mnt = tempfile.mkdtemp(prefix="crcr-e2e-disk-")
        self.addCleanup(shutil.rmtree, mnt, True)
        mount_tmpfs(self, mnt, TMPFS_SIZE)
        self.run_disk_full(mnt, {"CRCR_STORE": "sqlite:%s/crcr.db" % mnt}, "disk full")


class PostgresDiskFullTest(DiskFullMixin, unittest.TestCase):
    def test_a_full_database_disk_answers_503_loses_nothing_acknowledged_and_recovers(self):
        if not os.environ.get("CRCR_E2E_PG_URI"):
            self.skipTest("the PostgreSQL disk-full test runs in the CRCR_E2E_PG_URI pass "
                          "(scripts/test.sh), on a cluster of its own")
        pg_lib = "/usr/lib/postgresql"
        if not (os.path.isdir(pg_lib) and any(os.path.exists(os.path.join(pg_lib, v, "bin/initdb"))
                                              for v in os.listdir(pg_lib))):
            self.skipTest("no PostgreSQL server binaries")
        root = tempfile.mkdtemp(prefix="crcr-e2e-pgdisk-")
        os.chmod(root, 0o755)
        self.addCleanup(shutil.rmtree, root, True)
        cluster = os.path.join(root, "cluster")
        os.mkdir(cluster)
        mount_tmpfs(self, cluster, PG_TMPFS_SIZE)
        script = str(R.REPO_ROOT / "scripts" / "pg-test-cluster.sh")
        p = subprocess.run([script, "start", cluster], capture_output=True, text=True,
                           env=dict(os.environ, PG_WALDIR=os.path.join(root, "wal")))
        self.addCleanup(subprocess.run, [script, "stop", cluster], capture_output=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.run_disk_full(cluster, {"CRCR_STORE": p.stdout.strip()}, "SQLSTATE 53100")


if __name__ == "__main__":
    unittest.main()
