#!/usr/bin/env python3
"""fakegh_proc.py - the fake GitHub of tests/support/fakegh.py in a process of its own.

bench.py's fan-out sections use bench/fakegh_fast.c (C, same control protocol) by default; this
one with `--fake-server asyncio` or `threads` (every route of the test suites' fake, ~0.5 ms of
CPU per dispatch). It runs here rather than in bench.py's process, so that it has a GIL
of its own: the bench's polling, RSS sampler and perf wrapper do not take turns with the fake's
request threads. bench.py talks to it over stdin/stdout, one JSON object per line each way:

    python3 bench/fakegh_proc.py '{"app_id": 424242, "public_key": "tests/data/keys/app.pub.pem",
                                   "latency_ms": 50, "backlog": 4096}'
    -> {"url": "http://127.0.0.1:PORT", "pid": PID}           (once, when listening)
    <- {"cmd": "clear"}                                        -> {"ok": true}
    <- {"cmd": "wait", "n": N, "timeout": S, "idle": S}        -> {"dispatches": K, "idle": bool}
         (waits until N dispatches were accepted, then until every request was answered and none
          arrived for `idle` s)
    <- {"cmd": "records"}   -> {"records": [[method, path, status, time, answered, port], ...]}
         (time/answered: time.monotonic(), the same clock as the bench's on Linux)
    <- {"cmd": "sample"}    -> {"path", "authorization", "body_b64"} of the last accepted dispatch
    <- {"cmd": "stop"}      -> {"ok": true}, then exits

"server" picks how the fake serves HTTP:
  "asyncio" (default)  one event loop thread serves every connection; the requests are the fake's
                       own (FakeGitHub._route: the same JWT, token and body checks, the same
                       records), only the HTTP/1.1 framing and the latency sleep are asyncio's.
                       A thread per connection (fakegh's ThreadingHTTPServer) answers a thousand
                       connections at a fraction of the rate of a few dozen: the threads take
                       turns on the GIL.
  "threads"            fakegh's own ThreadingHTTPServer, as the e2e tests use it.
`backlog` is the listen queue (fakegh's default is 256: a relay opening a thousand connections
at once would overflow it and wait for SYN retransmits). Fault rules are not served by the
asyncio front (the bench sets none). Python 3 standard library only. Listens on 127.0.0.1; exits
when stdin closes or on "stop".
"""

import asyncio
import base64
import json
import os
import resource
import sys
import threading
import time
from http import HTTPStatus
from urllib.parse import parse_qs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))

import fakegh as F  # noqa: E402


class AsyncFront:
    """Serves a FakeGitHub's routes over HTTP/1.1 (keep-alive, Content-Length bodies,
    Expect: 100-continue) from one asyncio event loop."""

    def __init__(self, gh, backlog):
        self.gh = gh
        self.backlog = backlog
        self.loop = asyncio.new_event_loop()
        self.server = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="fakegh-asyncio")

    def start(self):
        self.thread.start()
        self.ready.wait(10)
        return self

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(
            self._conn, "127.0.0.1", 0, backlog=self.backlog, limit=1 << 20))
        self.gh._port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def stop(self):
        def _stop():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(_stop)
        self.thread.join(5)

    async def _conn(self, reader, writer):
        gh = self.gh
        peer = writer.get_extra_info("peername") or ("", 0)
        try:
            while True:
                line = await reader.readline()
                if not line or not line.strip():
                    if not line:
                        break
                    continue
                parts = line.decode("latin-1").split()
                if len(parts) < 2:
                    break
                method, target = parts[0].upper(), parts[1]
                headers = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    k, v = k.strip().lower(), v.strip()
                    headers[k] = headers[k] + ", " + v if k in headers else v
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    break  # the relay sends Content-Length; not needed here
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length > 0 else b""
                arrival = time.monotonic()
                raw_path, _, raw_query = target.partition("?")
                rec = F.Recorded(method=method, path=raw_path, raw_query=raw_query,
                                 query={k: v[0] for k, v in parse_qs(raw_query).items()},
                                 headers=headers, body=body, time=arrival, wall=time.time(),
                                 status=None, fault=None, note=None, client_port=peer[1])
                with gh._lock:
                    gh._records.append(rec)
                if gh.latency_ms:
                    await asyncio.sleep(gh.latency_ms / 1000.0)
                try:
                    status, extra, out = gh._route(method, raw_path, rec)
                except Exception as e:  # a bug in the fake: answer 500 and say why
                    status, extra, out = 500, {}, {"message": "fake error: %r" % e}
                    rec.note = "fake error: %r" % e
                hdrs = gh._rate_headers()
                hdrs["x-github-request-id"] = "FAKE:%08X" % (id(rec) & 0xFFFFFFFF)
                if isinstance(out, (dict, list)):
                    out = json.dumps(out, separators=(",", ":")).encode("utf-8")
                    hdrs["content-type"] = "application/json; charset=utf-8"
                hdrs.update(extra)
                out = out or b""
                close = headers.get("connection", "").lower() == "close"
                try:
                    reason = HTTPStatus(status).phrase
                except ValueError:
                    reason = "Status"
                head = ["HTTP/1.1 %d %s" % (status, reason), "Server: GitHub.com"]
                head += ["%s: %s" % kv for kv in hdrs.items()]
                no_body = status in (204, 304)
                if not no_body:
                    head.append("Content-Length: %d" % len(out))
                if close:
                    head.append("Connection: close")
                data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
                if not no_body and method != "HEAD":
                    data += out
                rec.status = status
                rec.answered = time.monotonic()
                writer.write(data)
                gh._finish(rec)
                await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass


def main():
    cfg = json.loads(sys.argv[1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    F._Server.request_queue_size = int(cfg.get("backlog", 4096))
    if "switch_interval" in cfg:
        sys.setswitchinterval(float(cfg["switch_interval"]))
    with open(cfg["public_key"], encoding="ascii") as f:
        pub = f.read()
    # No contract check in benchmarks (tests/support/contract.py): the test suites do it.
    gh = F.FakeGitHub(app_id=cfg["app_id"], public_key=pub,
                      latency_ms=int(cfg.get("latency_ms", 0)), contract=False)
    front = None
    if cfg.get("server", "asyncio") == "asyncio":
        front = AsyncFront(gh, int(cfg.get("backlog", 4096))).start()
    else:
        gh.start()
    out = sys.stdout

    def reply(obj):
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    reply({"url": gh.url, "pid": os.getpid()})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "clear":
                gh.clear()
                reply({"ok": True})
            elif cmd == "wait":
                n, timeout = int(req["n"]), float(req.get("timeout", 60))
                deadline = time.monotonic() + timeout
                # O(1) per wake-up: the fake notifies on every answer.
                with gh._cond:
                    while len(gh._dispatches) < n and time.monotonic() < deadline:
                        gh._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                    got = len(gh._dispatches)
                idle = gh.wait_idle(idle=float(req.get("idle", 0.5)),
                                    timeout=max(1.0, deadline - time.monotonic() + 5))
                reply({"dispatches": got, "idle": idle})
            elif cmd == "records":
                reply({"records": [[r.method, r.path, r.status, r.time, r.answered,
                                    r.client_port] for r in gh.requests()]})
            elif cmd == "sample":
                d = [r for r in gh.requests(method="POST", path_re=r"/dispatches$")
                     if r.status == 204]
                if not d:
                    reply({"error": "no accepted dispatch"})
                else:
                    r = d[-1]
                    reply({"path": r.path, "authorization": r.headers.get("authorization", ""),
                           "body_b64": base64.b64encode(r.body).decode("ascii")})
            elif cmd == "stop":
                break
            else:
                reply({"error": "unknown command %r" % cmd})
    finally:
        if front:
            front.stop()
        else:
            gh.stop()
    reply({"ok": True})


if __name__ == "__main__":
    main()
