"""End-to-end operations of the real relay (issue 7 items 1-3): /metrics, /readyz, the admin API
and `crcr deliveries --url`, redelivery of a dead dispatch, and the log scrubber.

- /metrics is checked with a Prometheus text-format (0.0.4) parser written here: HELP and TYPE
  before each family's samples, metric and label name grammar, label value escapes, no duplicate
  series, counters non-negative and named *_total, histogram buckets with increasing `le`,
  cumulative counts, a +Inf bucket equal to _count, and a _sum. The parser is itself tested on
  broken expositions. After real traffic against the fake GitHub, the values must match what
  happened: webhooks by event/result, outbox attempts by kind/result, GitHub requests by endpoint
  and status, cache hits, callbacks, rate-limit pauses, allowlist age, latency per route.
- /readyz is 503 while no allowlist could be loaded and 200 once one is.
- The admin API exists only with CRCR_ADMIN_TOKEN (404 otherwise), refuses a missing or wrong
  bearer token (401), lists/shows/redelivers; `crcr deliveries --url` prints exactly what the
  local CLI prints. A dispatch that died on a 422 is redelivered through --url after the fault
  is cleared and reaches the fake GitHub once.
- Log scrub: installation tokens, App JWTs and the App's PEM key are echoed back by the fake
  GitHub in error bodies (dispatch 5xx and 422, token minting, installation lookup), sent as a
  callback's bearer token and in a URL path; none of them, nor the webhook secret or the admin
  token, appears in the relay's log (CRCR_LOG=debug) or in what the admin API shows, while the
  lines that carried them are there, with delivery id and repo.

Needs CRCR_BIN; see tests/support/README.md. Harness: test_dispatch.py (GitHubRelayMixin).
"""

import json
import math
import re
import signal
import unittest
from collections import Counter

import fakegh as F
import relay as R
from test_dispatch import (DISPATCH_PATH, INSTALLATION_PATH, TARGETS, TOKEN_PATH,
                           GitHubRelayMixin, pair_counts)
from waiting import wait_until

ADMIN_TOKEN = "admin-token-for-e2e-0123456789abcdef"
ADMIN = {"Authorization": "Bearer " + ADMIN_TOKEN}

# ------------------------------------------------------------------------ text format parser

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
FLOAT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class ExpositionError(AssertionError):
    pass


def _value(s, line):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not FLOAT.match(s):
        raise ExpositionError("bad value %r in %r" % (s, line))
    return float(s)


def _labels(s, i, line):
    """Parses `{...}` starting at s[i] == '{'; returns (dict, index after '}')."""
    out = {}
    i += 1
    while True:
        if i < len(s) and s[i] == "}":
            return out, i + 1
        eq = s.find("=", i)
        if eq < 0:
            raise ExpositionError("label without '=' in %r" % line)
        name = s[i:eq]
        if not LABEL_NAME.match(name) or name.startswith("__"):
            raise ExpositionError("bad label name %r in %r" % (name, line))
        if name in out:
            raise ExpositionError("label %r twice in %r" % (name, line))
        i = eq + 1
        if i >= len(s) or s[i] != '"':
            raise ExpositionError("label value not quoted in %r" % line)
        i += 1
        val = []
        while True:
            if i >= len(s):
                raise ExpositionError("unterminated label value in %r" % line)
            c = s[i]
            if c == "\\":
                nxt = s[i + 1:i + 2]
                if nxt not in ('\\', '"', "n"):
                    raise ExpositionError("bad escape \\%s in %r" % (nxt, line))
                val.append("\n" if nxt == "n" else nxt)
                i += 2
                continue
            if c == '"':
                i += 1
                break
            val.append(c)
            i += 1
        out[name] = "".join(val)
        if i < len(s) and s[i] == ",":
            i += 1
            if i < len(s) and s[i] == "}":
                raise ExpositionError("trailing comma in %r" % line)
        elif i >= len(s) or s[i] != "}":
            raise ExpositionError("expected ',' or '}' in %r" % line)


def parse_exposition(text):
    """Parses and validates a text-format exposition. Returns {family: {"type", "help",
    "samples": [(name, labels, value)]}}; raises ExpositionError on any violation."""
    if not text.endswith("\n"):
        raise ExpositionError("exposition does not end with a newline")
    fams = {}
    series = set()
    current = None
    done = set()

    def family(name):
        return fams.setdefault(name, {"type": None, "help": None, "samples": []})

    for line in text[:-1].split("\n"):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.match(name):
                    raise ExpositionError("bad family name in %r" % line)
                f = family(name)
                if f["samples"] or name in done:
                    raise ExpositionError("%s after samples of %s" % (parts[1], name))
                rest = parts[3] if len(parts) == 4 else ""
                if parts[1] == "HELP":
                    if f["help"] is not None:
                        raise ExpositionError("second HELP for %s" % name)
                    if re.search(r"\\[^\\n]", rest):
                        raise ExpositionError("bad escape in HELP %r" % line)
                    f["help"] = rest
                else:
                    if f["type"] is not None:
                        raise ExpositionError("second TYPE for %s" % name)
                    if rest not in TYPES:
                        raise ExpositionError("unknown TYPE in %r" % line)
                    f["type"] = rest
            continue
        m = re.match(r"^([^{ ]+)", line)
        name = m.group(1) if m else ""
        if not METRIC_NAME.match(name):
            raise ExpositionError("bad metric name in %r" % line)
        i = len(name)
        labels = {}
        if line[i:i + 1] == "{":
            labels, i = _labels(line, i, line)
        if line[i:i + 1] != " ":
            raise ExpositionError("expected one space before the value in %r" % line)
        fields = line[i + 1:].split(" ")
        if not 1 <= len(fields) <= 2 or (len(fields) == 2 and not re.match(r"^-?\d+$", fields[1])):
            raise ExpositionError("bad value/timestamp in %r" % line)
        value = _value(fields[0], line)
        fname = name if name in fams and fams[name]["type"] else None
        if fname is None:
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[:-len(suffix)]
                if (name.endswith(suffix) and base in fams
                        and fams[base]["type"] in ("histogram", "summary")):
                    fname = base
                    break
        if fname is None:
            raise ExpositionError("sample without a TYPE line: %r" % line)
        f = fams[fname]
        if f["help"] is None:
            raise ExpositionError("sample before HELP: %r" % line)
        if current != fname:
            if fname in done:
                raise ExpositionError("samples of %s are not contiguous" % fname)
            if current:
                done.add(current)
            current = fname
        key = (name, tuple(sorted(labels.items())))
        if key in series:
            raise ExpositionError("duplicate series %r" % line)
        series.add(key)
        if f["type"] == "counter":
            if not name.endswith("_total"):
                raise ExpositionError("counter %s not named *_total" % name)
            if not value >= 0:
                raise ExpositionError("counter below zero or NaN: %r" % line)
        f["samples"].append((name, labels, value))

    for fname, f in fams.items():
        if f["type"] != "histogram":
            continue
        groups = {}
        for name, labels, value in f["samples"]:
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
            if name == fname + "_bucket":
                if "le" not in labels:
                    raise ExpositionError("%s bucket without le" % fname)
                g["buckets"].append((_value(labels["le"], labels["le"]), value))
            elif name == fname + "_sum":
                g["sum"] = value
            elif name == fname + "_count":
                g["count"] = value
        for rest, g in groups.items():
            b = g["buckets"]
            if not b or b[-1][0] != math.inf:
                raise ExpositionError("%s%s: no +Inf bucket last" % (fname, rest))
            for (le1, c1), (le2, c2) in zip(b, b[1:]):
                if not le2 > le1:
                    raise ExpositionError("%s%s: le not increasing" % (fname, rest))
                if c2 < c1:
                    raise ExpositionError("%s%s: buckets not cumulative" % (fname, rest))
            if g["count"] is None or g["sum"] is None:
                raise ExpositionError("%s%s: _count or _sum missing" % (fname, rest))
            if b[-1][1] != g["count"]:
                raise ExpositionError("%s%s: +Inf %s != _count %s"
                                      % (fname, rest, b[-1][1], g["count"]))
    return fams


def sample(fams, name, **labels):
    """The value of the series `name` with exactly `labels`, or None."""
    for f in fams.values():
        for n, l, v in f["samples"]:
            if n == name and l == labels:
                return v
    return None


def scrape(relay):
    r = relay.get("/metrics")
    if r.status != 200:
        raise AssertionError("/metrics answered %d" % r.status)
    ctype = r.headers.get("content-type", "")
    if not ctype.startswith("text/plain; version=0.0.4"):
        raise AssertionError("/metrics content-type %r" % ctype)
    return parse_exposition(r.body.decode("utf-8"))


class ParserSelfTest(unittest.TestCase):
    """The parser must reject what Prometheus would reject, or the metrics test proves
    nothing."""

    GOOD = ("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\"} 3\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
            "h_sum 0.7\nh_count 2\n")
    BAD = {
        "no newline at end": "# HELP g G.\n# TYPE g gauge\ng 1",
        "no TYPE": "# HELP g G.\ng 1\n",
        "no HELP": "# TYPE g gauge\ng 1\n",
        "TYPE after samples": "# HELP g G.\n# TYPE g gauge\ng 1\n# TYPE g gauge\n",
        "bad metric name": "# HELP 1g G.\n# TYPE 1g gauge\n1g 1\n",
        "bad label name": "# HELP g G.\n# TYPE g gauge\ng{1x=\"a\"} 1\n",
        "unquoted label": "# HELP g G.\n# TYPE g gauge\ng{x=a} 1\n",
        "bad escape": "# HELP g G.\n# TYPE g gauge\ng{x=\"\\t\"} 1\n",
        "duplicate series": "# HELP g G.\n# TYPE g gauge\ng{x=\"a\"} 1\ng{x=\"a\"} 2\n",
        "bad value": "# HELP g G.\n# TYPE g gauge\ng one\n",
        "counter without _total": "# HELP c C.\n# TYPE c counter\nc 1\n",
        "negative counter": "# HELP c_total C.\n# TYPE c_total counter\nc_total -1\n",
        "interleaved": ("# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\na 1\nb 1\n"
                        "a{x=\"1\"} 2\n"),
        "inf != count": ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\n"
                         "h_count 3\n"),
        "not cumulative": ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\n"
                           "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n"),
        "le not increasing": ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\n"
                              "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n"
                              "h_count 1\n"),
        "no +Inf": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
    }

    def test_parser_accepts_valid_and_rejects_each_broken_exposition(self):
        fams = parse_exposition(self.GOOD)
        self.assertEqual(sample(fams, "a_total", x='q"\\\n'), 3)
        self.assertEqual(sample(fams, "h_count"), 2)
        for name, text in self.BAD.items():
            with self.subTest(case=name):
                with self.assertRaises(ExpositionError):
                    parse_exposition(text)


# ------------------------------------------------------------------------ metrics, readyz


class MetricsTest(GitHubRelayMixin, unittest.TestCase):
    def test_metrics_parse_and_count_what_happened(self):
        self.start_pair(env={"CRCR_OIDC_ISSUERS": "http://127.0.0.1:9"})
        fams = scrape(self.relay)  # before any traffic: valid, zeros
        self.assertEqual(sample(fams, "crcr_webhooks_total", event="push", result="accepted"), 0)
        self.assertEqual(sample(fams, "crcr_allowlist_loaded"), 1)

        self.gh.fault_5xx(r"^/repos/org1/repo1/dispatches$", status=502, method="POST", count=1)
        pr = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        push = self.post_ok("push", R.load_example("push"))
        again = self.relay.webhook("pull_request", R.load_example("pull_request.opened"),
                                   delivery=pr.delivery)
        self.assertEqual(again.status, 200)
        self.assertEqual(self.relay.webhook("pull_request", R.load_example("pull_request.opened"),
                                            secret="wrong").status, 401)
        self.assertEqual(self.relay.webhook("issues", R.load_example("issues.opened")).status, 200)
        self.assertEqual(self.relay.webhook("ping", R.load_example("ping")).status, 200)
        cb = self.relay.post("/github/callback", b"{}",
                             {"Authorization": "Bearer not-a-jwt",
                              "Content-Type": "application/json"})
        self.assertEqual(cb.status, 401)
        self.wait_pairs({(d, t) for d in (pr.delivery, push.delivery) for t in TARGETS},
                        timeout=20)
        self.quiesce()

        fams = scrape(self.relay)
        want = {
            ("crcr_webhooks_total", (("event", "pull_request"), ("result", "accepted"))): 1,
            ("crcr_webhooks_total", (("event", "push"), ("result", "accepted"))): 1,
            ("crcr_webhooks_total", (("event", "pull_request"), ("result", "duplicate"))): 1,
            ("crcr_webhooks_total", (("event", "pull_request"), ("result", "rejected"))): 1,
            ("crcr_webhooks_total", (("event", "other"), ("result", "ignored"))): 1,
            ("crcr_webhooks_total", (("event", "ping"), ("result", "accepted"))): 1,
            ("crcr_outbox_jobs_total", (("kind", "dispatch"), ("result", "sent"))): 8,
            ("crcr_outbox_jobs_total", (("kind", "dispatch"), ("result", "retry"))): 1,
            ("crcr_outbox_jobs_total", (("kind", "dispatch"), ("result", "dead"))): 0,
            ("crcr_github_requests_total", (("endpoint", "dispatches"), ("status", "204"))): 8,
            ("crcr_github_requests_total", (("endpoint", "dispatches"), ("status", "502"))): 1,
            ("crcr_outbox_rows", (("state", "sent"),)): 8,
            ("crcr_outbox_rows", (("state", "queued"),)): 0,
            ("crcr_outbox_rows", (("state", "dead"),)): 0,
            ("crcr_outbox_retries_total", ()): 1,
            ("crcr_callbacks_total", (("result", "rejected"),)): 1,
            ("crcr_allowlist_repos", ()): 4,
            ("crcr_store_up", ()): 1,
            ("crcr_dry_run", ()): 0,
        }
        got = {k: sample(fams, k[0], **dict(k[1])) for k in want}
        self.assertEqual(got, want)
        # The fake GitHub saw exactly what the relay counted, endpoint by endpoint.
        seen = Counter()
        for rec in self.gh.requests():
            ep = ("access_tokens" if re.search(TOKEN_PATH, rec.path) else
                  "installation" if re.search(INSTALLATION_PATH, rec.path) else
                  "dispatches" if re.search(DISPATCH_PATH, rec.path) else
                  "hook_deliveries" if rec.path.startswith("/app/hook/deliveries") else "other")
            seen[(ep, str(rec.status))] += 1
        for (ep, status), n in seen.items():
            self.assertEqual(sample(fams, "crcr_github_requests_total", endpoint=ep,
                                    status=status), n, (ep, status))
        self.assertGreaterEqual(sample(fams, "crcr_github_cache_lookups_total", cache="token",
                                       result="hit"), 1)
        self.assertEqual(sample(fams, "crcr_github_cache_lookups_total", cache="token",
                                result="miss"), seen[("access_tokens", "201")])
        age = sample(fams, "crcr_allowlist_age_seconds")
        self.assertTrue(0 <= age < 60, age)
        self.assertEqual(sample(fams, "crcr_outbox_oldest_due_age_seconds"), 0)
        # Latency: one observation per webhook request, in the route's own histogram.
        self.assertEqual(sample(fams, "crcr_http_request_duration_seconds_count", method="POST",
                                route="/github/webhook"), 6)
        self.assertEqual(sample(fams, "crcr_http_responses_total", method="POST",
                                route="/github/webhook", code="2xx"), 5)
        self.assertEqual(sample(fams, "crcr_http_responses_total", method="POST",
                                route="/github/webhook", code="4xx"), 1)
        for fam in ("crcr_build_info", "crcr_start_time_seconds", "crcr_http_connections",
                    "crcr_http_requests_reaped_total", "crcr_outbox_rate_limit_pauses_total",
                    "crcr_allowlist_refresh_failing", "crcr_last_webhook_timestamp_seconds"):
            self.assertIn(fam, fams)

    def test_rate_limit_pause_is_counted(self):
        self.start_pair(allowlist="L1:\n  - org1/repo1\n")
        self.gh.fault_429(r"^/repos/org1/repo1/dispatches$", retry_after=1, method="POST")
        r = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(r.delivery, "org1/repo1")}, timeout=20)
        # The fake has answered; the relay records the outcome just after (a store round trip).
        self.assertTrue(wait_until(lambda: sample(scrape(self.relay), "crcr_outbox_jobs_total",
                                                  kind="dispatch", result="sent") == 1, 10),
                        "the sent dispatch was never counted")
        fams = scrape(self.relay)
        self.assertEqual(sample(fams, "crcr_outbox_rate_limit_pauses_total"), 1)
        self.assertEqual(sample(fams, "crcr_github_requests_total", endpoint="dispatches",
                                status="429"), 1)
        self.assertEqual(sample(fams, "crcr_outbox_jobs_total", kind="dispatch",
                                result="sent"), 1)


class ReadyzTest(unittest.TestCase):
    ALLOWLIST_URL = "https://github.com/pytorch/pytorch/blob/main/.github/allowlist.yml"

    def test_readyz_is_503_without_an_allowlist_and_200_once_loaded(self):
        with open(R.APP_PUB, encoding="ascii") as f:
            gh = F.FakeGitHub(app_id=1, public_key=f.read()).start()
        self.addCleanup(gh.stop)
        relay = R.Relay(env={"ALLOWLIST_FILE": None, "ALLOWLIST_URL": self.ALLOWLIST_URL,
                             "GITHUB_API_URL": gh.url})
        self.addCleanup(relay.close)
        self.addCleanup(R.check_clean_exit, self, relay)
        relay.start()
        r = relay.get("/readyz")
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual((r.json()["ok"], r.json()["store"], r.json()["allowlist"]),
                         (False, True, False))
        fams = scrape(relay)
        self.assertEqual(sample(fams, "crcr_allowlist_loaded"), 0)
        self.assertEqual(sample(fams, "crcr_allowlist_refresh_failing"), 1)
        # A webhook cannot be routed without an allowlist: 503, GitHub will redeliver.
        self.assertEqual(relay.webhook("push", R.load_example("push")).status, 503)

        gh.set_file("pytorch/pytorch", ".github/allowlist.yml", "main", R.DEFAULT_ALLOWLIST)
        relay.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: relay.get("/readyz").status == 200, 10),
                        relay.log_tail())
        self.assertEqual(relay.get("/readyz").json()["allowlist"], True)
        fams = scrape(relay)
        self.assertEqual(sample(fams, "crcr_allowlist_loaded"), 1)
        self.assertEqual(sample(fams, "crcr_allowlist_refresh_failing"), 0)
        self.assertEqual(sample(fams, "crcr_allowlist_repos"), 4)


# ------------------------------------------------------------------------ admin API and CLI


class AdminOffTest(unittest.TestCase):
    def test_admin_api_is_absent_without_a_token(self):
        relay = R.Relay()
        self.addCleanup(relay.close)
        self.addCleanup(R.check_clean_exit, self, relay)
        relay.start()
        delivery = relay.webhook("push", R.load_example("push")).delivery
        for method, path in (("GET", "/api/v1/admin/deliveries"),
                             ("GET", "/api/v1/admin/deliveries/" + delivery),
                             ("POST", "/api/v1/admin/deliveries/%s/redeliver" % delivery)):
            with self.subTest(path=path):
                r = relay.request(method, path, b"" if method == "POST" else None, ADMIN)
                self.assertEqual((r.status, r.json()), (404, {"detail": "Not found"}))
        self.assertEqual(relay.get("/metrics").status, 200)
        rc, out, err = relay.cli(["deliveries", "list", "--url", relay.url, "--token", "x" * 20])
        self.assertEqual(rc, 1)
        self.assertIn("no admin API", err)


class AdminApiTest(GitHubRelayMixin, unittest.TestCase):
    def start(self, **kw):
        self.start_pair(env={"CRCR_ADMIN_TOKEN": ADMIN_TOKEN}, **kw)

    def api(self, method, path, headers=ADMIN):
        return self.relay.request(method, path, b"" if method == "POST" else None, headers)

    def remote(self, args, env=None):
        """`crcr deliveries ARGS --url <relay>`, with a store path that does not exist, so that
        only the admin API can answer."""
        env = dict({"CRCR_STORE": "sqlite:/nonexistent/dir/crcr.db"}, **(env or {}))
        return self.relay.cli(["deliveries"] + args + ["--url", self.relay.url], env=env)

    def test_missing_or_wrong_token_is_401(self):
        self.start()
        for name, headers in {"none": {}, "wrong": {"Authorization": "Bearer nope"},
                              "prefix": {"Authorization": "Bearer " + ADMIN_TOKEN[:-1]},
                              "longer": {"Authorization": "Bearer " + ADMIN_TOKEN + "x"},
                              "basic": {"Authorization": "Basic " + ADMIN_TOKEN}}.items():
            with self.subTest(auth=name):
                r = self.api("GET", "/api/v1/admin/deliveries", headers)
                self.assertEqual((r.status, r.json()), (401, {"detail": "Unauthorized"}))
                self.assertIn("Bearer", r.headers.get("www-authenticate", ""))
        lower = {"Authorization": "bearer " + ADMIN_TOKEN}
        self.assertEqual(self.api("GET", "/api/v1/admin/deliveries", lower).status, 200)
        rc, out, err = self.remote(["list"], env={"CRCR_ADMIN_TOKEN": "wrong-token-123"})
        self.assertEqual(rc, 1)
        self.assertIn("401", err)
        rc, out, err = self.remote(["list"], env={"CRCR_ADMIN_TOKEN": None})
        self.assertEqual(rc, 2, err)
        rc, out, err = self.relay.cli(["deliveries", "list", "--url", "http://example.org"])
        self.assertEqual(rc, 2, err)
        self.assertIn("https", err)

    def test_list_show_and_filters_match_the_local_cli(self):
        self.start()
        pr = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        push = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(d, t) for d in (pr.delivery, push.delivery) for t in TARGETS})
        self.quiesce()

        r = self.api("GET", "/api/v1/admin/deliveries")
        self.assertEqual(r.status, 200, r.body)
        ids = [d["delivery_id"] for d in r.json()["deliveries"]]
        self.assertEqual(ids, [push.delivery, pr.delivery])
        r = self.api("GET", "/api/v1/admin/deliveries?limit=1")
        self.assertEqual([d["delivery_id"] for d in r.json()["deliveries"]], [push.delivery])
        r = self.api("GET", "/api/v1/admin/deliveries?status=dead")
        self.assertEqual(r.json()["deliveries"], [])
        r = self.api("GET", "/api/v1/admin/deliveries?repo=org2/repo2&status=sent")
        self.assertEqual(len(r.json()["deliveries"]), 2)
        for bad in ("status=bogus", "limit=0", "limit=10001", "limit=x", "repo=norepo"):
            with self.subTest(query=bad):
                self.assertEqual(self.api("GET", "/api/v1/admin/deliveries?" + bad).status, 400)

        show = self.api("GET", "/api/v1/admin/deliveries/" + pr.delivery)
        self.assertEqual(show.status, 200)
        doc = show.json()
        self.assertEqual(doc["delivery"]["delivery_id"], pr.delivery)
        self.assertEqual(sorted(j["target"] for j in doc["outbox"]), TARGETS)
        self.assertTrue(all(j["state"] == "sent" for j in doc["outbox"]))
        self.assertEqual(self.api("GET", "/api/v1/admin/deliveries/no-such-id").status, 404)
        self.assertEqual(self.api("GET", "/api/v1/admin/deliveries/%s/redeliver"
                                  % pr.delivery).status, 405)
        self.assertEqual(self.api("POST", "/api/v1/admin/deliveries/%s/other"
                                  % pr.delivery).status, 404)
        self.assertEqual(self.api("GET", "/api/v1/admin/deliveries/bad%20id").status, 404)

        # The CLI over --url prints exactly what it prints over the local store.
        for args in (["list", "--format", "json"], ["list"], ["list", "--status", "sent",
                                                              "--repo", "org1/repo1"],
                     ["show", pr.delivery, "--format", "json"], ["show", push.delivery]):
            with self.subTest(args=args):
                rc_l, out_l, err_l = self.relay.cli(["deliveries"] + args)
                rc_r, out_r, err_r = self.remote(args)
                self.assertEqual((rc_r, err_r), (0, ""))
                self.assertEqual((rc_l, out_l), (rc_r, out_r))
        self.assertEqual(json.loads(self.remote(["show", pr.delivery, "--format", "json"])[1]),
                         doc)
        rc, out, err = self.remote(["show", "no-such-id"])
        self.assertEqual(rc, 1)
        self.assertIn("not found", err)

    def test_dead_dispatch_is_redelivered_through_the_admin_api_once_the_fault_is_gone(self):
        self.start()
        fault = self.gh.add_fault("POST", r"^/repos/org3/repo3/dispatches$", 422,
                                  {"content-type": "application/json"},
                                  {"message": "Invalid request.", "documentation_url": F.DOCS})
        r = self.post_ok("push", R.load_example("push"))
        self.wait_rows(r.delivery, lambda rows: rows["org3/repo3"]["state"] == "dead" and all(
            rows[t]["state"] == "sent" for t in TARGETS if t != "org3/repo3"),
                       what="org3/repo3 dead, others sent")
        rc, out, err = self.remote(["list", "--status", "dead", "--format", "json"])
        self.assertEqual(rc, 0, err)
        self.assertEqual([d["delivery_id"] for d in json.loads(out)], [r.delivery])

        self.gh.clear_faults()
        rc, out, err = self.remote(["redeliver", r.delivery, "--repo", "org3/repo3"])
        self.assertEqual((rc, out.strip()), (0, "re-queued 1 dispatch of %s" % r.delivery), err)
        rows = self.wait_rows(r.delivery, lambda rows: rows["org3/repo3"]["state"] == "sent",
                              what="org3/repo3 sent after redeliver")
        self.assertEqual((rows["org3/repo3"]["attempts"], rows["org3/repo3"]["last_status"]),
                         (1, 204))
        self.quiesce()
        self.assertEqual(fault.hits, 1)
        self.assertEqual(pair_counts(self.gh), Counter({(r.delivery, t): 1 for t in TARGETS}))
        fams = scrape(self.relay)
        self.assertEqual(sample(fams, "crcr_outbox_jobs_total", kind="dispatch", result="dead"),
                         1)
        self.assertEqual(sample(fams, "crcr_outbox_jobs_total", kind="dispatch", result="sent"),
                         4)
        self.assertEqual(sample(fams, "crcr_outbox_rows", state="dead"), 0)
        log = self.relay.log_text()
        self.assertRegex(log, r"event=admin\.redeliver delivery=%s repo=org3/repo3 requeued=1"
                         % re.escape(r.delivery))

        # The API answer itself, and an unknown delivery. A repo off the allowlist needs
        # force=1 (issue 14: a typo in --repo used to create and send a dispatch).
        a = self.api("POST", "/api/v1/admin/deliveries/%s/redeliver?repo=org9/new" % r.delivery)
        self.assertEqual((a.status, a.json()), (422, {
            "detail": "repo is not on the allowlist in force (force=1 redelivers anyway)"}))
        a = self.api("POST", "/api/v1/admin/deliveries/%s/redeliver?repo=org9/new&force=1"
                     % r.delivery)
        self.assertEqual(a.json(), {"ok": True, "delivery_id": r.delivery, "repo": "org9/new",
                                    "requeued": 1})
        self.assertEqual(self.api("POST", "/api/v1/admin/deliveries/unknown-1/redeliver")
                         .json(), {"detail": "delivery not found"})


# ------------------------------------------------------------------------ log scrub


class LogScrubTest(GitHubRelayMixin, unittest.TestCase):
    SECRET = "webhook-secret-for-scrub-test-42"

    def token_of(self, rec):
        return rec.headers.get("authorization", "").partition(" ")[2].strip()

    def test_tokens_jwts_and_keys_never_reach_the_log(self):
        self.start_pair(env={"CRCR_ADMIN_TOKEN": ADMIN_TOKEN, "GITHUB_APP_SECRET": self.SECRET,
                             "CRCR_OIDC_ISSUERS": "http://127.0.0.1:9", "CRCR_LOG": "debug",
                             "CRCR_MAX_ATTEMPTS": "3"})
        with open(R.APP_KEY, encoding="ascii") as f:
            pem = f.read()
        first = self.post_ok("push", R.load_example("push"))
        self.wait_pairs({(first.delivery, t) for t in TARGETS})
        token = self.token_of(self.gh.requests("POST", DISPATCH_PATH)[0])
        jwt = self.token_of(self.gh.requests("GET", INSTALLATION_PATH)[0])
        self.assertTrue(token.startswith("ghs_"), token)
        self.assertTrue(jwt.startswith("eyJ") and jwt.count(".") == 2, jwt)
        echo = "token %s; jwt %s; Authorization: Bearer %s; key %s" % (token, jwt, jwt, pem)

        # Error bodies echoing the secrets on every outbound path that logs an error text.
        self.gh.add_fault("POST", r"^/repos/org1/repo1/dispatches$", 502,
                          {"content-type": "application/json"}, {"message": echo}, count=1)
        self.gh.add_fault("POST", r"^/repos/org3/repo3/dispatches$", 422,
                          {"content-type": "application/json"}, {"message": echo})
        second = self.post_ok("push", R.load_example("push"))
        self.wait_rows(second.delivery, lambda rows: rows["org3/repo3"]["state"] == "dead"
                       and rows["org1/repo1"]["state"] == "sent", what="retry and dead")
        # A revoked token: 401 on use, then minting a new one fails with an echo, then works.
        self.gh.clear_faults()
        self.gh.revoke_tokens()
        self.gh.add_fault("POST", TOKEN_PATH, 500, {"content-type": "application/json"},
                          {"message": echo}, count=1)
        # A repo not looked up before: its installation lookup fails with an echo.
        self.gh.add_fault("GET", r"^/repos/org9/new/installation$", 403,
                          {"content-type": "application/json"}, {"message": echo})
        third = self.post_ok("pull_request", R.load_example("pull_request.opened"))
        rc, out, err = self.relay.cli(["deliveries", "redeliver", third.delivery, "--repo",
                                       "org9/new", "--force"])
        self.assertEqual(rc, 0, out + err)
        self.wait_rows(third.delivery, lambda rows: rows.get("org9/new", {}).get("state") == "dead"
                       and all(rows[t]["state"] == "sent" for t in TARGETS),
                       timeout=20, what="minting retried, lookup dead")
        # Inbound: a callback carrying the token and the JWT, a URL carrying the token, admin
        # requests with a wrong and the right token, a webhook with a bad signature.
        for cred in (token, jwt, "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwOi8vMTI3LjAuMC4xOjkifQ.c2ln"):
            self.relay.post("/github/callback", b"{}", {"Authorization": "Bearer " + cred,
                                                        "Content-Type": "application/json"})
        self.relay.get("/x/" + token)
        self.relay.get("/api/v1/admin/deliveries", {"Authorization": "Bearer " + token})
        self.relay.get("/api/v1/admin/deliveries", ADMIN)
        self.relay.webhook("push", R.load_example("push"), secret="not-the-secret")
        self.quiesce()
        shown = "".join(self.relay.cli(["deliveries", "show", d, "--format", "json"])[1]
                        for d in (first.delivery, second.delivery, third.delivery))
        self.relay.stop()
        log = self.relay.log_text()

        pem_lines = [l for l in pem.splitlines() if l and not l.startswith("-----")]
        secrets = {"installation token": token, "App JWT": jwt,
                   "JWT signing input": jwt.rsplit(".", 1)[0], "JWT signature": jwt.split(".")[2],
                   "webhook secret": self.SECRET, "admin token": ADMIN_TOKEN}
        secrets.update({"PEM line %d" % i: l for i, l in enumerate(pem_lines)})
        for where, text in (("relay log", log), ("deliveries show", shown)):
            for name, value in secrets.items():
                with self.subTest(where=where, secret=name):
                    self.assertNotIn(value, text)
            self.assertNotIn("BEGIN RSA PRIVATE KEY", text)

        # The paths above did log, with the upstream text scrubbed and delivery + repo named.
        lines = log.splitlines()

        def find(event, **kv):
            want = ["event=" + event] + ["%s=%s" % p for p in kv.items()]
            return [l for l in lines if all(w in l for w in want)]

        retry = find("outbox.retry", delivery=second.delivery, repo="org1/repo1")
        dead = find("outbox.dead", delivery=second.delivery, repo="org3/repo3")
        lookup = find("outbox.dead", delivery=third.delivery, repo="org9/new")
        minting = [l for l in find("outbox.retry", delivery=third.delivery) if "500" in l]
        for name, got in (("retry", retry), ("dead", dead), ("lookup", lookup),
                          ("minting", minting)):
            with self.subTest(logged=name):
                self.assertTrue(got, "no %s line; log tail:\n%s" % (name, "\n".join(lines[-30:])))
                self.assertIn("REDACTED", got[0])
        self.assertTrue(find("github.token_rejected"), "the revoked token was never reported")
        self.assertTrue(find("callback.unauthorized"))
        self.assertTrue(find("admin.unauthorized"))
        self.assertTrue(find("webhook.rejected", status="401"))


if __name__ == "__main__":
    unittest.main()
