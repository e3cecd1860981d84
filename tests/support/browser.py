"""browser - drive Debian's headless chromium over the DevTools protocol (Python 3 stdlib only).

    with Browser() as b:                       # one chromium process (raises if not installed)
        page = b.new_page()
        page.goto(url)                         # waits for the load event
        dom = page.dom()                       # serialised DOM after load
        page.screenshot("/out/x.png")          # PNG of the current viewport
        page.goto(url, width=390, height=844, mobile=True)
        page.problems                          # console messages, errors, CSP refusals, dialogs
    root = parse_html(dom)                     # small tree: find_all(), find(), text(), attrs

One `chromium --headless=new` process with a throw-away profile serves every page of a test (a
cold start costs seconds; a navigation costs milliseconds). The client speaks the DevTools
protocol over a minimal WebSocket (RFC 6455: masked client frames, fragmented and 64-bit-length
server frames, ping/pong). Per page it records, for the last navigation:
  - Runtime.consoleAPICalled (any console.* call), Runtime.exceptionThrown,
  - Log.entryAdded (browser-side messages: CSP refusals, failed loads, ...),
  - Page.javascriptDialogOpening (alert/confirm/prompt: proof that a script ran; the dialog is
    dismissed so the page goes on),
so a test can insist that `page.problems` is empty. CRCR_CHROMIUM overrides the binary.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.parse
from html.parser import HTMLParser

START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class BrowserError(AssertionError):
    pass


def chromium_path():
    path = os.environ.get("CRCR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        raise BrowserError("chromium not found (%s): install it with `apt-get install -y "
                           "chromium` (.ci/run does) or set CRCR_CHROMIUM" % path)
    return path


# ---------------------------------------------------------------------------- WebSocket client


class _WebSocket:
    def __init__(self, url, timeout):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        req = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
               % (u.path or "/", u.hostname, u.port, key))
        self.sock.sendall(req.encode("ascii"))
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BrowserError("DevTools closed the connection during the handshake")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise BrowserError("DevTools refused the WebSocket: %r" % head[:200])

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def settimeout(self, t):
        self.sock.settimeout(max(0.01, t))

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise BrowserError("DevTools connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self):
        """The next text message (fragments joined; pings answered)."""
        parts = []
        while True:
            b0, b1 = self._exact(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exact(8))[0]
            mask = self._exact(4) if b1 & 0x80 else None
            data = self._exact(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x9:
                self._send_frame(0xA, data)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                raise BrowserError("DevTools closed the WebSocket")
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode("utf-8")


# ---------------------------------------------------------------------------- DevTools client


class _CDP:
    def __init__(self, ws):
        self.ws = ws
        self.next_id = 1
        self.events = []  # (sessionId, method, params) not yet consumed

    def _read(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrowserError("DevTools did not answer in time")
        self.ws.settimeout(left)
        try:
            return json.loads(self.ws.recv())
        except socket.timeout as e:
            raise BrowserError("DevTools did not answer in time") from e

    def call(self, method, params=None, session=None, timeout=CALL_TIMEOUT):
        msg_id = self.next_id
        self.next_id += 1
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == msg_id:
                if "error" in m:
                    raise BrowserError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))

    def pump(self, until, timeout):
        """Reads events until until(session, method, params) is true for one (events stay in
        self.events, also those read by calls `until` makes); returns it or raises on timeout."""
        deadline = time.monotonic() + timeout
        i = 0
        while True:
            while i < len(self.events):
                ev = self.events[i]
                i += 1
                if until(*ev):
                    return ev
            m = self._read(deadline)
            if "method" in m:
                self.events.append((m.get("sessionId"), m["method"], m.get("params", {})))


class Page:
    def __init__(self, browser, target, session):
        self.b = browser
        self.target = target
        self.session = session
        self.problems = []
        self.url = None
        self.metrics = {"width": 1280, "height": 1800, "deviceScaleFactor": 1, "mobile": False}

    def _call(self, method, params=None, timeout=CALL_TIMEOUT):
        return self.b.cdp.call(method, params, self.session, timeout)

    def _collect(self):
        """Turns this page's queued events into problems; dismisses dialogs."""
        keep = []
        for ev in self.b.cdp.events:
            session, method, p = ev
            if session != self.session:
                keep.append(ev)
                continue
            if method == "Runtime.consoleAPICalled":
                args = " ".join(str(a.get("value", a.get("description", "")))
                                for a in p.get("args", []))
                self.problems.append("console.%s: %s" % (p.get("type"), args))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                self.problems.append("exception: %s" % (d.get("exception", {}).get(
                    "description") or d.get("text")))
            elif method == "Log.entryAdded":
                e = p.get("entry", {})
                self.problems.append("log.%s (%s): %s %s" % (e.get("level"), e.get("source"),
                                                             e.get("text"), e.get("url", "")))
            elif method == "Page.javascriptDialogOpening":
                self.problems.append("dialog %s: %s" % (p.get("type"), p.get("message")))
                self._dismiss()
        self.b.cdp.events = keep

    def _dismiss(self):
        try:
            self.b.cdp.call("Page.handleJavaScriptDialog", {"accept": False}, self.session)
        except BrowserError:
            pass  # already dismissed

    def goto(self, url, width=1280, height=1800, mobile=False, timeout=30.0):
        """Navigates and waits for the load event. Problems of this navigation go to
        self.problems (reset first)."""
        self._collect()
        self.problems = []
        self.metrics = {"width": width, "height": height, "deviceScaleFactor": 1,
                        "mobile": mobile}
        self._call("Emulation.setDeviceMetricsOverride", self.metrics)
        self.b.cdp.events = [e for e in self.b.cdp.events if e[0] != self.session]
        res = self._call("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise BrowserError("navigation to %s failed: %s" % (url, res["errorText"]))

        def loaded(session, method, params):
            if session == self.session and method == "Page.javascriptDialogOpening":
                self._dismiss()  # a dialog holds the load event back; recorded by _collect
            return session == self.session and method == "Page.loadEventFired"

        self.b.cdp.pump(loaded, timeout)
        # Let late console messages (after load) arrive: a no-op round trip.
        self._call("Runtime.evaluate", {"expression": "1", "returnByValue": True})
        self._collect()
        self.url = url
        return self

    def eval(self, expression):
        r = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise BrowserError("evaluate failed: %s" % r["exceptionDetails"])
        return r.get("result", {}).get("value")

    def dom(self):
        out = self.eval("document.documentElement.outerHTML")
        self._collect()
        return "<!DOCTYPE html>" + out

    def screenshot(self, path, full_page=True, max_height=8000):
        """Saves a PNG: the whole page (up to max_height CSS px) or the viewport."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        resized = False
        if full_page:
            m = self._call("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m.get("contentSize") or {}
            h = min(int(size.get("height", 0)), max_height)
            if h > self.metrics["height"]:
                self._call("Emulation.setDeviceMetricsOverride", dict(self.metrics, height=h))
                resized = True
        r = self._call("Page.captureScreenshot", {"format": "png"})
        if resized:
            self._call("Emulation.setDeviceMetricsOverride", self.metrics)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        self._collect()
        return path


class Browser:
    def __init__(self, timeout=START_TIMEOUT):
        self.binary = chromium_path()
        self.tmp = tempfile.mkdtemp(prefix="crcr-browser-")
        self.profile = os.path.join(self.tmp, "profile")
        self.log_path = os.path.join(self.tmp, "chromium.log")
        self.proc = None
        self.ws = None
        self.cdp = None
        try:
            self._start(timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, timeout):
        args = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--disable-default-apps", "--hide-scrollbars", "--mute-audio",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                "--user-data-dir=" + self.profile, "--enable-logging=stderr", "--v=0",
                "about:blank"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BrowserError("chromium exited with %s:\n%s" % (self.proc.returncode,
                                                                   self.log_tail()))
            try:
                with open(port_file, encoding="ascii") as f:
                    lines = f.read().split("\n")
                if len(lines) >= 2 and lines[0].strip() and lines[1].strip():
                    break
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise BrowserError("chromium did not open DevTools in %.0f s:\n%s"
                                   % (timeout, self.log_tail()))
            time.sleep(0.05)
        url = "ws://127.0.0.1:%s%s" % (lines[0].strip(), lines[1].strip())
        self.ws = _WebSocket(url, timeout)
        self.cdp = _CDP(self.ws)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return ""

    def new_page(self):
        target = self.cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.cdp.call("Target.attachToTarget",
                                {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.cdp.call(domain + ".enable", {}, session)
        return Page(self, target, session)

    def close(self):
        if self.cdp is not None:
            try:
                self.cdp.call("Browser.close", {}, None, 5.0)
            except (BrowserError, OSError):
                pass
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------- DOM tree


class Node:
    """An element (tag None for the document root). attrs: dict (last value wins)."""

    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children = []  # Node or str

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag=None, cls=None, pred=None, **attrs):
        """Descendants matching tag, class, attrs (data_repo= matches data-repo) and pred."""
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if cls is not None and cls not in n.classes():
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            if pred is not None and not pred(n):
                continue
            out.append(n)
        return out

    def find(self, tag=None, cls=None, pred=None, **attrs):
        found = self.find_all(tag, cls, pred, **attrs)
        return found[0] if found else None

    def __repr__(self):
        return "<%s %r>" % (self.tag, self.attrs)


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node(None, {}, None)
        self.cur = self.root

    def _node(self, tag, attrs):
        return Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)

    def handle_starttag(self, tag, attrs):
        n = self._node(tag, attrs)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(self._node(tag, attrs))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse_html(text):
    b = _Builder()
    b.feed(text)
    b.close()
    return b.root
