"""End-to-end webhook ingress of the real relay (`crcr serve` in dry-run: no GITHUB_APP_ID).

Real GitHub payloads (tests/data/webhooks, from @octokit/webhooks-examples) are signed and POSTed
to /github/webhook. Covers the upstream-compatible answer order (ignored event before signature,
400 no signature, 401 bad signature, 400 invalid JSON, other repository ignored), routing by
action, 202 queueing to every allowlisted repo, redelivery de-duplication (also across a restart),
secret rotation, garbage bodies, and the dry-run record of the exact dispatch bodies
(`crcr deliveries show ID --format json`).

Allowlist: L1 org1/repo1, L2 org2/repo2, L3 dev: org3/repo3, L4 org4/repo4.
Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import random
import re
import unittest
import uuid

import relay as R
from waiting import wait_until

SECRET = "e2e-current-secret"
PREVIOUS_SECRET = "e2e-previous-secret"
TARGETS = sorted(R.DEFAULT_TARGETS)


def retarget(name, full_name):
    """The example `name` with repository.full_name replaced (compact JSON bytes)."""
    obj = R.load_example_obj(name)
    obj["repository"]["full_name"] = full_name
    return R.compact(obj)


class IngressTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.relay = R.Relay(env={"GITHUB_APP_SECRET_PREVIOUS": PREVIOUS_SECRET}, secret=SECRET)
        cls.addClassCleanup(cls.relay.close)
        cls.relay.start()

    def tearDown(self):
        self.assertTrue(self.relay.running(), "relay died; log:\n" + self.relay.log_tail())

    def assertAnswer(self, resp, status, expected=None):
        """Checks status, JSON content type and (when given) the exact JSON body."""
        self.assertEqual(resp.status, status, resp.body[:500])
        ctype = resp.headers.get("content-type", "")
        self.assertTrue(ctype.startswith("application/json"), "content-type %r" % ctype)
        body = json.loads(resp.body)
        if expected is not None:
            self.assertEqual(body, expected)
        return body

    def assertQueued(self, resp):
        """202 {"ok": true, "delivery_id": <the header>, "queued": [the 4 repos, sorted]}."""
        self.assertIsNotNone(resp.delivery)
        return self.assertAnswer(resp, 202, {"ok": True, "delivery_id": resp.delivery,
                                             "queued": TARGETS})

    def assertIgnored(self, resp):
        return self.assertAnswer(resp, 200, {"ignored": True})


class AnswerOrderTest(IngressTestBase):
    def test_unsupported_event_is_ignored_before_the_signature_check(self):
        issues = R.load_example("issues.opened")
        self.assertIgnored(self.relay.webhook("issues", issues, secret="wrong-secret"))
        self.assertIgnored(self.relay.webhook("issues", issues, sign=False))
        self.assertIgnored(self.relay.webhook("issues", issues))
        # Not even the body is looked at for an event the relay does not handle.
        self.assertIgnored(self.relay.webhook("workflow_run", b"\x00not json", sign=False))

    def test_ping_with_good_signature_pongs(self):
        self.assertAnswer(self.relay.webhook("ping", R.load_example("ping")), 200,
                          {"ok": True, "pong": True})

    def test_ping_is_signature_checked(self):
        ping = R.load_example("ping")
        self.assertAnswer(self.relay.webhook("ping", ping, secret="wrong-secret"), 401,
                          {"detail": "Bad signature"})
        self.assertAnswer(self.relay.webhook("ping", ping, sign=False), 400,
                          {"detail": "No signature"})

    def test_missing_or_empty_signature_is_400(self):
        pr = R.load_example("pull_request.opened")
        self.assertAnswer(self.relay.webhook("pull_request", pr, sign=False), 400,
                          {"detail": "No signature"})
        self.assertAnswer(self.relay.webhook("pull_request", pr, signature=""), 400,
                          {"detail": "No signature"})

    def test_wrong_signatures_are_401(self):
        pr = R.load_example("pull_request.opened")
        good = R.sign(pr, SECRET)
        tampered = pr.replace(b'"action":"opened"', b'"action":"closed"', 1)
        self.assertNotEqual(tampered, pr)
        cases = {
            "other secret": R.sign(pr, "not-the-secret"),
            "signature of another body": R.sign(pr + b" ", SECRET),
            "all zero": "sha256=" + "0" * 64,
            "truncated": good[:-2],
            "hex without prefix": good[len("sha256="):],
            "sha1 prefix": "sha1=" + good[len("sha256="):],
            "garbage": "sha256=zz",
        }
        for name, sig in cases.items():
            with self.subTest(case=name):
                self.assertAnswer(self.relay.webhook("pull_request", pr, signature=sig), 401,
                                  {"detail": "Bad signature"})
        with self.subTest(case="body changed after signing"):
            self.assertAnswer(self.relay.webhook("pull_request", tampered, signature=good), 401,
                              {"detail": "Bad signature"})

    def test_invalid_json_with_valid_signature_is_400(self):
        for body in (b"{not json", R.load_example("pull_request.opened")[:-1], b"{}}"):
            with self.subTest(body=body[:20]):
                self.assertAnswer(self.relay.webhook("pull_request", body), 400,
                                  {"detail": "Invalid JSON body"})

    def test_other_repository_is_ignored(self):
        for name in ("someone/else", "pytorch/pytorch-fork", "pytorch/pytorc"):
            with self.subTest(repo=name):
                self.assertIgnored(self.relay.webhook(
                    "pull_request", retarget("pull_request.opened", name)))

    def test_repository_match_is_case_insensitive(self):
        self.assertQueued(self.relay.webhook("pull_request",
                                             retarget("pull_request.opened", "PyTorch/PyTorch")))

    def test_missing_delivery_header_on_a_dispatching_event_is_400(self):
        r = self.relay.webhook("pull_request", R.load_example("pull_request.opened"),
                               delivery=False)
        body = self.assertAnswer(r, 400)
        self.assertIn("detail", body)


class RoutingTest(IngressTestBase):
    def test_pull_request_dispatch_actions_are_queued_to_every_level(self):
        for action in ("opened", "synchronize", "reopened", "closed"):
            with self.subTest(action=action):
                self.assertQueued(self.relay.webhook("pull_request",
                                                     R.load_example("pull_request." + action)))

    def test_other_pull_request_actions_are_ignored(self):
        self.assertIgnored(self.relay.webhook("pull_request",
                                              R.load_example("pull_request.assigned")))

    def test_label_that_is_not_ciflow_crcr_is_ignored(self):
        payload = R.load_example("pull_request.labeled")
        self.assertFalse(json.loads(payload)["label"]["name"].startswith("ciflow/crcr/"))
        self.assertIgnored(self.relay.webhook("pull_request", payload))

    def test_push_and_branch_deletion_are_queued(self):
        for name in ("push", "push.deleted"):
            with self.subTest(example=name):
                self.assertQueued(self.relay.webhook("push", R.load_example(name)))


class DeliveryIdTest(IngressTestBase):
    def test_redelivery_is_answered_duplicate(self):
        pr = R.load_example("pull_request.synchronize")
        first = self.relay.webhook("pull_request", pr)
        self.assertQueued(first)
        again = self.relay.webhook("pull_request", pr, delivery=first.delivery)
        self.assertAnswer(again, 200, {"ok": True, "duplicate": True})
        # A fresh id for the same payload is a new delivery.
        self.assertQueued(self.relay.webhook("pull_request", pr))

    def test_rotation_previous_secret_is_accepted(self):
        pr = R.load_example("pull_request.opened")
        self.assertQueued(self.relay.webhook("pull_request", pr, secret=PREVIOUS_SECRET))
        self.assertAnswer(self.relay.webhook("ping", R.load_example("ping"),
                                             secret=PREVIOUS_SECRET),
                          200, {"ok": True, "pong": True})
        self.assertAnswer(self.relay.webhook("pull_request", pr, secret="third-secret"), 401,
                          {"detail": "Bad signature"})


class GarbageTest(IngressTestBase):
    def test_random_signed_bodies_are_400_and_the_relay_survives(self):
        rng = random.Random(20240501)
        bodies = [
            b"[" * 100000 + b"]" * 100000,  # nesting far beyond any sane depth limit
            b'{"a":"\xff\xfe"}',  # invalid UTF-8
            b'{"repository":{"full_name":"pytorch/pytorch"}}garbage',
            b'{"a":1,}',
            b"\x00" * 64,
        ]
        while len(bodies) < 200:
            n = rng.choice((1, 2, 7, 64, 500, 4096, 30000))
            body = rng.randbytes(n)
            try:
                json.loads(body)
            except (ValueError, RecursionError):
                bodies.append(body)  # keep only bodies that are not JSON
        for i, body in enumerate(bodies):
            r = self.relay.webhook("pull_request", body)
            self.assertEqual(r.status, 400, "body #%d (%d bytes %r...): %d %r"
                             % (i, len(body), body[:16], r.status, r.body[:200]))
            self.assertEqual(json.loads(r.body), {"detail": "Invalid JSON body"},
                             "body #%d" % i)
        self.assertEqual(self.relay.get("/healthz").status, 200)
        # And it still does its job afterwards.
        self.assertQueued(self.relay.webhook("pull_request",
                                             R.load_example("pull_request.opened")))


class DryRunOutcomeTest(IngressTestBase):
    def show(self, delivery):
        rc, out, err = self.relay.cli(["deliveries", "show", delivery, "--format", "json"])
        return rc, out, err

    def wait_dry_run(self, delivery, n, timeout=10.0):
        last = {}

        def done():
            rc, out, err = self.show(delivery)
            last["v"] = (rc, out[-2000:], err[-2000:])
            if rc == 0:
                doc = json.loads(out)
                rows = [r for r in doc["outbox"] if r["kind"] == "dispatch"]
                if len(rows) == n and all(r["state"] == "dry_run" for r in rows):
                    return doc, rows
            return None

        got = wait_until(done, timeout, 0.05)
        if not got:
            self.fail("no %d dry_run dispatch rows; last `deliveries show`: %r\nrelay log:\n%s"
                      % (n, last.get("v"), self.relay.log_tail()))
        return got

    def check_bodies(self, event, payload, delivery, rows):
        self.assertEqual(sorted(r["target"] for r in rows), TARGETS)
        for row in rows:
            with self.subTest(target=row["target"]):
                raw = row["body"].encode("utf-8")
                # The payload is embedded verbatim: its exact signed bytes appear in the body.
                self.assertIn(b'"payload":' + payload, raw)
                env = json.loads(raw)
                self.assertEqual(env["event_type"], event)
                cp = env["client_payload"]
                self.assertEqual(cp["event_type"], event)
                self.assertEqual(cp["delivery_id"], delivery)
                self.assertEqual(cp["payload"], json.loads(payload))
                self.assertNotIn("trimmed", cp)  # ~24 KB: far under the 65,000-byte budget
                self.assertLessEqual(len(cp), 10)  # GitHub's client_payload property limit
                self.assertLess(len(raw), 65536)

    def dry_run_count(self):
        text = self.relay.get("/metrics").body.decode("utf-8")
        m = re.search(r'^crcr_outbox_jobs_total\{kind="dispatch",result="dry_run"\} (\d+)$', text,
                      re.M)
        self.assertIsNotNone(m, "no dry_run dispatch counter in /metrics")
        return int(m.group(1))

    def test_dry_run_records_the_exact_dispatch_bodies(self):
        payload = R.load_example("pull_request.opened")
        before = self.dry_run_count()
        resp = self.relay.webhook("pull_request", payload)
        self.assertQueued(resp)
        doc, rows = self.wait_dry_run(resp.delivery, len(TARGETS))
        self.assertEqual(doc["delivery"]["delivery_id"], resp.delivery)
        self.check_bodies("pull_request", payload, resp.delivery, rows)
        # Recorded by the ingest itself (no claim): one attempt, done when received, and the
        # same count, metric and log line as a row a worker records.
        for row in rows:
            self.assertEqual(row["attempts"], 1)
            self.assertIsNotNone(row["done_at"])
        self.assertEqual(self.dry_run_count(), before + len(TARGETS))
        with open(self.relay.log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if "event=outbox.dry_run" in ln and resp.delivery in ln]
        self.assertEqual(sorted(t for t in TARGETS if any("repo=" + t in ln for ln in lines)),
                         sorted(TARGETS), "".join(lines))
        self.assertEqual(len(lines), len(TARGETS), "".join(lines))

    def test_dry_run_push_deletion_body(self):
        payload = R.load_example("push.deleted")
        resp = self.relay.webhook("push", payload)
        self.assertQueued(resp)
        doc, rows = self.wait_dry_run(resp.delivery, len(TARGETS))
        self.check_bodies("push", payload, resp.delivery, rows)

    def test_unknown_delivery_is_an_error(self):
        rc, out, err = self.show(str(uuid.uuid4()))
        self.assertNotEqual(rc, 0, out)


class RestartTest(unittest.TestCase):
    def test_delivery_ids_survive_a_restart(self):
        r = R.Relay()
        self.addCleanup(r.close)
        r.start()
        pr = R.load_example("pull_request.opened")
        first = r.webhook("pull_request", pr)
        self.assertEqual(first.status, 202, first.body)
        r.restart()
        again = r.webhook("pull_request", pr, delivery=first.delivery)
        self.assertEqual((again.status, json.loads(again.body)),
                         (200, {"ok": True, "duplicate": True}))


if __name__ == "__main__":
    unittest.main()
