"""browser - drive Debian's headless chromium from tests (Python 3 stdlib only).

    b = Browser()                                   # raises BrowserError if chromium is missing
    dom, problems = b.dump_dom(url)                 # DOM after load, console problems
    problems = b.screenshot(url, "/out/x.png", 1280, 1800)
    b.close()
    root = parse_html(dom)                          # a small tree: find_all(), text(), attrs

Every run is a fresh `chromium --headless=new` process with its own throw-away profile, no
network beyond what the page asks for (loopback in tests), no GPU, no sandbox (tests run as
root in CI containers). Console output comes through `--enable-logging=stderr`: chromium writes
every console message as an ":INFO:CONSOLE(...)" line and every Content-Security-Policy refusal
as one too; `console_problems()` returns those lines (and uncaught errors), so a test can insist
on none. CRCR_CHROMIUM overrides the binary.
"""

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser

DEFAULT_TIMEOUT = 60.0
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


def console_problems(stderr_text):
    """Console messages, CSP refusals and uncaught errors in chromium's stderr log."""
    out = []
    for line in stderr_text.splitlines():
        if (":CONSOLE" in line or "Refused to" in line or "Uncaught" in line
                or "Content Security Policy" in line):
            out.append(line.strip())
    return out


class Browser:
    def __init__(self, timeout=DEFAULT_TIMEOUT):
        self.binary = chromium_path()
        self.timeout = timeout
        self.tmp = tempfile.mkdtemp(prefix="crcr-browser-")
        self.runs = 0

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, extra, url):
        self.runs += 1
        profile = os.path.join(self.tmp, "profile-%d" % self.runs)
        args = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--disable-features=Translate,MediaRouter,OptimizationHints",
                "--hide-scrollbars", "--mute-audio", "--user-data-dir=" + profile,
                "--enable-logging=stderr", "--v=0"] + extra + [url]
        try:
            p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired as e:
            raise BrowserError("chromium timed out after %.0f s on %s" % (self.timeout, url)) from e
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        err = p.stderr.decode("utf-8", "replace")
        if p.returncode != 0:
            raise BrowserError("chromium exited %d on %s:\n%s" % (p.returncode, url, err[-3000:]))
        return p.stdout.decode("utf-8", "replace"), err

    def dump_dom(self, url):
        """(serialised DOM after load, console problem lines)."""
        out, err = self._run(["--dump-dom"], url)
        return out, console_problems(err)

    def screenshot(self, url, path, width, height):
        """Saves a PNG of the page at width x height; returns console problem lines."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        _, err = self._run(["--screenshot=" + path, "--window-size=%d,%d" % (width, height)], url)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            raise BrowserError("chromium wrote no screenshot for %s:\n%s" % (url, err[-2000:]))
        return console_problems(err)


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
        parts = []
        for c in self.children:
            parts.append(c if isinstance(c, str) else c.text())
        return "".join(parts)

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag=None, cls=None, pred=None, **attrs):
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

    def handle_starttag(self, tag, attrs):
        n = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: (v if v is not None else "") for k, v in attrs},
                                      self.cur))

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
