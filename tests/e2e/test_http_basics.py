"""End-to-end HTTP basics of the real relay (`crcr serve` in dry-run, on 127.0.0.1):
routing (404/405 with JSON {"detail"} bodies), request limits (413 from Content-Length before the
body is read, 413 for an over-long chunked body, 431 for oversized headers), graceful SIGTERM, and
the threads that work through queues running SCHED_BATCH (src/core/thread_sched.c).

Needs CRCR_BIN (the crcr binary); see tests/support/README.md.
"""

import http.client
import json
import os
import signal
import socket
import unittest

import relay as R
from waiting import wait_until

SIG_HEADERS = {
    "X-GitHub-Event": "pull_request",
    "X-GitHub-Delivery": "00000000-0000-4000-8000-000000000000",
    "X-Hub-Signature-256": "sha256=" + "0" * 64,
    "Content-Type": "application/json",
}


def raw_head(method, path, port, headers):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1:%d" % port]
    lines += ["%s: %s" % kv for kv in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class JsonErrorMixin:
    def assertJsonError(self, resp, status, detail=None):
        """`resp` is an error answer with `status`, content-type application/json and a JSON
        object body carrying "detail" (equal to `detail` when given)."""
        self.assertEqual(resp.status, status, resp.body[:300])
        ctype = resp.headers.get("content-type", "")
        self.assertTrue(ctype.startswith("application/json"),
                        "content-type %r for %d" % (ctype, status))
        try:
            body = json.loads(resp.body)
        except ValueError:
            self.fail("%d body is not JSON: %r" % (status, resp.body[:200]))
        self.assertIsInstance(body, dict)
        self.assertIn("detail", body)
        if detail is not None:
            self.assertEqual(body, {"detail": detail})
        return body


class HttpBasicsTest(JsonErrorMixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay()
        cls.addClassCleanup(cls.relay.close)
        cls.relay.start()

    def tearDown(self):
        # Whatever a test sent, the relay must still be up and answering.
        self.assertTrue(self.relay.running(), "relay died; log:\n" + self.relay.log_tail())
        self.assertEqual(self.relay.get("/healthz").status, 200)

    def test_healthz_is_200(self):
        r = self.relay.get("/healthz")
        self.assertEqual(r.status, 200)

    def test_unknown_path_is_404_json(self):
        self.assertJsonError(self.relay.get("/nope"), 404, "Not found")
        self.assertJsonError(self.relay.post("/nope", b"{}"), 404, "Not found")
        # Exact paths only: a trailing slash or a prefix is another path.
        self.assertJsonError(self.relay.post("/github/webhook/", b"{}"), 404, "Not found")
        self.assertJsonError(self.relay.post("/github/webhookx", b"{}"), 404, "Not found")

    def test_wrong_method_on_relay_endpoints_is_405_json(self):
        for method, path in (("GET", "/github/webhook"), ("PUT", "/github/webhook"),
                             ("DELETE", "/github/webhook"), ("GET", "/github/callback")):
            with self.subTest(method=method, path=path):
                r = self.relay.request(method, path, b"" if method != "GET" else None)
                self.assertJsonError(r, 405, "Method not allowed")

    def test_content_length_over_default_limit_is_413_before_the_body(self):
        # 30,000,000 > 25 MiB default. Only the head is sent, the body never comes: a relay that
        # waited for it would answer nothing (the request deadline, 15 s, closes the connection
        # without an answer), so a 413 at all is the answer to the headers.
        head = raw_head("POST", "/github/webhook", self.relay.port,
                        dict(SIG_HEADERS, **{"Content-Length": "30000000"}))
        raw = R.raw_request(self.relay.port, head, read_timeout=10.0)
        self.assertTrue(raw, "no answer to an over-limit Content-Length")
        self.assertJsonError(R.parse_response(raw), 413)

    def test_64k_header_is_431(self):
        headers = dict(SIG_HEADERS, **{"X-Padding": "a" * 65536, "Content-Length": "2"})
        raw = R.raw_request(self.relay.port,
                            raw_head("POST", "/github/webhook", self.relay.port, headers) + b"{}",
                            read_timeout=3.0)
        self.assertTrue(raw, "no answer to a 64 KiB header")
        self.assertEqual(R.parse_response(raw).status, 431)

    def test_many_headers_adding_up_to_64k_are_431(self):
        headers = dict(SIG_HEADERS, **{"Content-Length": "2"})
        for i in range(256):
            headers["X-Pad-%03d" % i] = "b" * 256
        raw = R.raw_request(self.relay.port,
                            raw_head("POST", "/github/webhook", self.relay.port, headers) + b"{}",
                            read_timeout=3.0)
        self.assertTrue(raw, "no answer to 64 KiB of headers")
        self.assertEqual(R.parse_response(raw).status, 431)

    def test_every_error_answer_is_json_with_detail(self):
        port = self.relay.port
        big_header = raw_head("GET", "/healthz", port, {"X-Padding": "a" * 65536})
        too_long = raw_head("POST", "/github/webhook", port,
                            dict(SIG_HEADERS, **{"Content-Length": "30000000"}))
        cases = {
            "404": self.relay.get("/nope"),
            "405": self.relay.get("/github/webhook"),
            "400 no signature": self.relay.webhook("pull_request",
                                                   R.load_example("pull_request.opened"),
                                                   sign=False),
            "401 bad signature": self.relay.webhook("pull_request",
                                                    R.load_example("pull_request.opened"),
                                                    secret="not-the-secret"),
            "413": R.parse_response(R.raw_request(port, too_long, 2.0)),
            "431": R.parse_response(R.raw_request(port, big_header, 3.0)),
        }
        for name, resp in cases.items():
            with self.subTest(case=name):
                self.assertJsonError(resp, int(name[:3]))

    def test_keep_alive_connection_serves_several_requests(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.relay.port, timeout=5)
        self.addCleanup(conn.close)
        for path, want in (("/healthz", 200), ("/nope", 404), ("/healthz", 200)):
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read()
            self.assertEqual(r.status, want, body)
            if want != 200:
                self.assertEqual(int(r.getheader("content-length")), len(body))


class ConfiguredBodyLimitTest(JsonErrorMixin, unittest.TestCase):
    """CRCR_MAX_BODY=1048576: the configured cap applies to both framings."""

    LIMIT = 1048576

    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay(env={"CRCR_MAX_BODY": str(cls.LIMIT)})
        cls.addClassCleanup(cls.relay.close)
        cls.relay.start()

    def tearDown(self):
        self.assertTrue(self.relay.running(), "relay died; log:\n" + self.relay.log_tail())
        self.assertEqual(self.relay.get("/healthz").status, 200)

    def test_chunked_body_over_limit_is_413(self):
        raw, sent = R.stream_chunked(self.relay.port, "/github/webhook", SIG_HEADERS,
                                     total=2 * self.LIMIT, chunk_size=65536, read_timeout=5.0)
        self.assertTrue(raw, "no answer to a 2 MiB chunked body (sent %d bytes)" % sent)
        self.assertJsonError(R.parse_response(raw), 413)

    def test_content_length_just_over_configured_limit_is_413(self):
        head = raw_head("POST", "/github/webhook", self.relay.port,
                        dict(SIG_HEADERS, **{"Content-Length": str(self.LIMIT + 1)}))
        raw = R.raw_request(self.relay.port, head, read_timeout=2.0)
        self.assertTrue(raw, "no answer within 2 s to Content-Length limit+1")
        self.assertJsonError(R.parse_response(raw), 413)

    def test_normal_webhook_fits_under_configured_limit(self):
        r = self.relay.webhook("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(r.status, 202, r.body)


class SqliteSingleServerTest(unittest.TestCase):
    def test_a_second_serve_on_the_same_sqlite_file_is_refused(self):
        """Two `crcr serve` on one SQLite file would each re-queue the other's rows in flight at
        start: the second one stops with exit 2 and says why; the first goes on serving."""
        relay = R.Relay()
        self.addCleanup(relay.close)
        if not relay.store_uri.startswith("sqlite:"):
            self.skipTest("the relays of this run use PostgreSQL")
        relay.start()
        rc, out, err = relay.cli(["serve"], env={"CRCR_LISTEN": "127.0.0.1:0"}, timeout=15)
        self.assertEqual(rc, 2, out + err)
        self.assertIn("another `crcr serve` is using this SQLite store", err)
        self.assertEqual(relay.get("/healthz").status, 200)
        # The command-line tools still read the store while it is served.
        rc, out, err = relay.cli(["deliveries", "list"])
        self.assertEqual(rc, 0, out + err)


class ShutdownTest(unittest.TestCase):
    def test_sigterm_exits_0_within_5_s_even_with_an_idle_keep_alive_client(self):
        r = R.Relay()
        self.addCleanup(r.close)
        r.start()
        idle = http.client.HTTPConnection("127.0.0.1", r.port, timeout=5)
        self.addCleanup(idle.close)
        idle.request("GET", "/healthz")
        resp = idle.getresponse()
        resp.read()
        self.assertEqual(resp.status, 200)
        accepted = r.webhook("pull_request", R.load_example("pull_request.opened"))
        self.assertEqual(accepted.status, 202, accepted.body)
        rc = r.stop(signal.SIGTERM, timeout=15.0)  # the bound ends a hung relay only
        self.assertEqual(rc, 0, "exit code after SIGTERM; log:\n" + r.log_tail())
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", r.port), timeout=1).close()


SCHED_BATCH = 3  # Linux's policy number (sched.h)


def thread_policies(pid):
    """(comm, scheduling policy) of every thread of `pid`: /proc's stat, field 41."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 on
        out.append((comm, int(fields[41 - 3])))
    return out


class ThreadSchedulingTest(unittest.TestCase):
    """The handler pool, the HUD pool and the outbox workers are SCHED_BATCH from their start;
    an MHD I/O thread from its first connection; the other threads (main, the reaper, the
    checkpointer, the GitHub loop in App mode...) keep the default."""

    def test_queue_threads_run_sched_batch_and_the_others_do_not(self):
        relay = R.Relay(env={"CRCR_HTTP_THREADS": "3", "CRCR_HUD_CONCURRENCY": "2",
                             "MAX_DISPATCH_WORKERS": "2"})  # 2 outbox workers
        self.addCleanup(relay.close)
        relay.start()
        self.assertEqual(relay.get("/healthz").status, 200)  # a connection for an MHD thread
        pid = relay.proc.pid

        def settled():
            p = thread_policies(pid)
            ours = [pol for comm, pol in p if comm != "MHD-worker"]
            mhd = [pol for comm, pol in p if comm == "MHD-worker"]
            return (ours.count(SCHED_BATCH) == 3 + 2 + 2 and mhd.count(SCHED_BATCH) >= 1) and p

        p = wait_until(settled, timeout=30)
        self.assertTrue(p, "3 + 2 + 2 SCHED_BATCH threads besides MHD's, and an MHD thread: %r"
                        % (thread_policies(pid),))
        ours = [pol for comm, pol in p if comm != "MHD-worker"]
        self.assertGreaterEqual(len(ours) - ours.count(SCHED_BATCH), 2,
                                "the main thread, the reaper, the checkpointer keep the default: %r"
                                % (p,))


if __name__ == "__main__":
    unittest.main()
